//! Exit reasons: why an actor ended ([`DownReason`]), and the unwind payload smarm raises to
//! stop an actor ([`Cancelled`]).
//!
//! Layer 2 (scheduler): the scheduler decides and records exit reasons; the process layer
//! above reports them to monitors and links.

use std::any::Any;
use std::fmt;

/// Why an actor ended, as reported by [`JoinHandle::join`](crate::JoinHandle::join) and by
/// monitors and links.
///
/// `#[non_exhaustive]`: the cluster adds `NoConnection`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DownReason {
    /// The actor's body returned.
    Normal,
    /// The actor panicked; the panic message (or `"Box<dyn Any>"` for a non-string payload).
    Panic(String),
    /// The actor was killed: by [`kill`](crate::process::kill) (the untrappable signal, OTP's
    /// `kill`), or by an exit signal with this reason (OTP's `killed`: `exit(pid, Killed)`,
    /// or a link to a killed actor), which a trapping actor receives as a message instead.
    Killed,
    /// The pid did not refer to a live actor.
    NoProc,
    /// The runtime (or a supervisor) shut the actor down.
    Shutdown,
    /// A shutdown with a term saying why (OTP's `{shutdown, Term}`): an actor that ends
    /// with it stopped on purpose. Like `Shutdown`, it is not an error: a `Transient`
    /// supervisor child that exits with it is not restarted
    /// ([`is_normal_or_shutdown`](Self::is_normal_or_shutdown)). Unlike `Normal`, and as in
    /// OTP, it is an exit signal like any other: it kills a linked actor that does not trap
    /// exits.
    ShutdownWith(String),
    /// Any other reason given to [`exit`](crate::process::exit).
    Custom(String),
    /// The connection to the node of a remote process was lost (Erlang's `noconnection`;
    /// feature `cluster`): every monitor and link that crossed it fires with this reason.
    NoConnection,
}

impl fmt::Display for DownReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DownReason::Normal => f.write_str("normal"),
            DownReason::Panic(msg) => write!(f, "panic: {msg}"),
            DownReason::Killed => f.write_str("killed"),
            DownReason::NoProc => f.write_str("noproc"),
            DownReason::Shutdown => f.write_str("shutdown"),
            DownReason::ShutdownWith(t) => write!(f, "shutdown: {t}"),
            DownReason::Custom(r) => write!(f, "{r}"),
            DownReason::NoConnection => f.write_str("noconnection"),
        }
    }
}

impl DownReason {
    /// `Shutdown` or `ShutdownWith(_)` (OTP's `shutdown` and `{shutdown, Term}`).
    ///
    /// ```
    /// use smarm::DownReason;
    /// assert!(DownReason::ShutdownWith("done".into()).is_shutdown());
    /// assert!(DownReason::Shutdown.is_shutdown());
    /// assert!(!DownReason::Normal.is_shutdown());
    /// ```
    pub fn is_shutdown(&self) -> bool {
        matches!(self, DownReason::Shutdown | DownReason::ShutdownWith(_))
    }

    /// `Normal`, `Shutdown` or `ShutdownWith(_)`: the reasons OTP does not treat as errors
    /// (a `Transient` child that ends with one is not restarted, and nothing reports it).
    ///
    /// ```
    /// use smarm::DownReason;
    /// assert!(DownReason::Normal.is_normal_or_shutdown());
    /// assert!(DownReason::ShutdownWith("done".into()).is_normal_or_shutdown());
    /// assert!(!DownReason::Killed.is_normal_or_shutdown());
    /// assert!(!DownReason::Custom("oops".into()).is_normal_or_shutdown());
    /// ```
    pub fn is_normal_or_shutdown(&self) -> bool {
        *self == DownReason::Normal || self.is_shutdown()
    }
}

impl std::error::Error for DownReason {}

/// The unwind payload smarm uses to stop an actor (shutdown, kill, exit signals). Never shown
/// to a panic hook (raised with `resume_unwind`); mapped back to a [`DownReason`] at the entry.
pub(crate) struct Cancelled(pub(crate) DownReason);

/// Maps a caught unwind payload to the actor's exit reason. Never unwinds: a payload of
/// another type is dropped under `catch_unwind`.
pub(crate) fn reason_from_payload(payload: Box<dyn Any + Send>) -> DownReason {
    let payload = match payload.downcast::<Cancelled>() {
        Ok(c) => return c.0,
        Err(p) => p,
    };
    let payload = match payload.downcast::<String>() {
        Ok(s) => return DownReason::Panic(*s),
        Err(p) => p,
    };
    match payload.downcast::<&'static str>() {
        Ok(s) => DownReason::Panic((*s).to_string()),
        Err(p) => {
            // A payload of the user's own type: its Drop is user code, which may panic.
            crate::runtime::user_drop::drop_caught(p);
            DownReason::Panic("Box<dyn Any>".to_string())
        }
    }
}
