//! `gen_server`: a request/reply server actor with OTP's lifecycle.
//!
//! Implement [`GenServer`] and [`start`] it; talk to it through a [`ServerRef`] with
//! [`ServerRef::call`] (request/reply, default timeout 5 s), [`ServerRef::cast`]
//! (fire-and-forget, always succeeds) and [`ServerRef::info`]; stop it with
//! [`ServerRef::stop`].
//!
//! # Lifecycle (SEMANTICS.md, "gen_server")
//!
//! - [`start`] returns only after `init` finished: `Ok(server)`, [`StartError::Init`] if
//!   `init` stopped or panicked (its name is freed before the caller learns), [`StartError::Ignore`],
//!   or [`StartError::AlreadyStarted`] when the name is taken.
//! - `call` errors promptly: [`CallError::NoProc`] (dead server or unknown name, no waiting),
//!   [`CallError::Down`] if the server dies during the call, [`CallError::Timeout`],
//!   [`CallError::CallingSelf`]. A reply that arrives after a timeout is discarded (the
//!   reply channel is gone), never seen later.
//! - Deferred replies: `handle_call` may return [`CallResult::NoReply`] and keep the
//!   [`From`], replying later from any actor.
//! - `terminate(reason)` runs on a `Stop` return, on a callback panic, and on shutdown when
//!   the server traps exits; never on `kill`; at most once: if `terminate` panics it is not
//!   called again, and the server exits with that panic (as in OTP). With
//!   `Stop(reason, Some(reply))` terminate runs first, then the reply is sent.
//!
//! # How a reply travels, and how a call finds out the server died
//!
//! A call made by an actor waits in its own frame: the [`From`] names that frame and the
//! caller's pid, and the reply is moved straight into it (no channel, no allocation; see
//! the `reply` module). A call made from a plain thread waits on a oneshot instead. If the
//! server dies, the `From` is dropped (with the request, or with the queued message) and
//! the caller's wait ends; the caller then reads the server's exit reason from the server's
//! exit cell (a watch channel the server sets before its mailbox and pending requests are
//! dropped), waiting for it up to the call's deadline.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

use crate::behaviour::{call_with, exit_reason_now, exit_with, no_proc, stop_server, ExitCell};
pub use crate::behaviour::{CallError, From, ReplyTo, StartError, StartOpts};
use crate::channel::{oneshot, watch, OneshotSender, WatchReceiver, WatchSender};
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, Down, DownReason, Exit};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;

/// Default `call` timeout, as in OTP.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What `init` decided.
#[derive(Debug)]
pub enum InitResult {
    /// Start serving.
    Ok,
    /// Do not start; `start` returns [`StartError::Init`] with the reason.
    Stop(DownReason),
    /// Do not start; `start` returns [`StartError::Ignore`].
    Ignore,
}

/// What `handle_call` decided.
#[derive(Debug)]
pub enum CallResult<R> {
    /// Reply now.
    Reply(R),
    /// Reply later through the kept [`From`].
    NoReply,
    /// Stop with a reason; `terminate` runs, then the reply (if any) is sent.
    Stop(DownReason, Option<R>),
}

/// What `handle_cast` / `handle_info` decided.
#[derive(Debug)]
pub enum Flow {
    /// Keep serving.
    Continue,
    /// Stop with a reason (`terminate` runs).
    Stop(DownReason),
}

/// A non-call, non-cast input: a plain message sent with [`ServerRef::info`], or a signal.
#[derive(Debug)]
pub enum Info<I> {
    /// A message sent with `info`.
    Msg(I),
    /// A monitor fired.
    Down(Down),
    /// An exit signal (the server traps exits).
    Exit(Exit),
}

/// A server's behaviour. All callbacks run in the server actor, one at a time.
pub trait GenServer: Send + Sized + 'static {
    /// Requests for `call`.
    type Call: Send + 'static;
    /// Replies to `call`.
    type Reply: Send + 'static;
    /// Messages for `cast`.
    type Cast: Send + 'static;
    /// Messages for `info` (use `()` if unused).
    type Info: Send + 'static;

    /// Runs in the new server before `start` returns.
    fn init(&mut self) -> InitResult {
        InitResult::Ok
    }
    /// Handles a `call`.
    fn handle_call(&mut self, request: Self::Call, from: &From<Self::Reply>) -> CallResult<Self::Reply>;
    /// Handles a `cast`.
    fn handle_cast(&mut self, _msg: Self::Cast) -> Flow {
        Flow::Continue
    }
    /// Handles an `info` message or a signal.
    fn handle_info(&mut self, _info: Info<Self::Info>) -> Flow {
        Flow::Continue
    }
    /// Runs when the server stops (see the module doc for when).
    fn terminate(&mut self, _reason: &DownReason) {}
}

/// Messages a server's mailbox carries.
pub enum Request<S: GenServer> {
    #[doc(hidden)]
    Call(S::Call, From<S::Reply>),
    #[doc(hidden)]
    Cast(S::Cast),
    #[doc(hidden)]
    Info(S::Info),
    #[doc(hidden)]
    Stop(DownReason, OneshotSender<()>),
}

/// A handle to a running server. Cheap to clone.
pub struct ServerRef<S: GenServer> {
    addr: Addr<Request<S>>,
    exit: WatchReceiver<Option<DownReason>>,
}

impl<S: GenServer> Clone for ServerRef<S> {
    fn clone(&self) -> Self {
        ServerRef { addr: self.addr.clone(), exit: self.exit.clone() }
    }
}

impl<S: GenServer> fmt::Debug for ServerRef<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ServerRef({})", self.addr.pid())
    }
}

/// Starts a server; returns once `init` has finished.
pub fn start<S: GenServer>(server: S) -> Result<ServerRef<S>, StartError> {
    start_opts(server, StartOpts::default())
}

/// Starts a server linked to the caller.
pub fn start_link<S: GenServer>(server: S) -> Result<ServerRef<S>, StartError> {
    start_opts(server, StartOpts { name: None, link: true })
}

/// Starts a server with options (name, link).
pub fn start_opts<S: GenServer>(server: S, opts: StartOpts) -> Result<ServerRef<S>, StartError> {
    if let Some(name) = &opts.name {
        if let Some(pid) = crate::process::whereis(name) {
            return Err(StartError::AlreadyStarted(pid));
        }
    }
    let (exit_tx, exit_rx) = watch(None::<DownReason>);
    let (ready_tx, ready_rx) = oneshot::<Result<(), StartError>>();
    let name = opts.name.clone();
    let parent = if opts.link { crate::task::try_current_pid() } else { None };
    let addr = crate::task::spawn_actor_opts(
        move |mb: Mailbox<Request<S>>| serve(server, mb, name, parent, exit_tx, ready_tx),
        parent,
    )
    .map_err(|e| StartError::Spawn(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(ServerRef { addr, exit: exit_rx }),
        Ok(Err(e)) => Err(e),
        // Killed before init reported.
        Err(_) => Err(StartError::Init(exit_reason_now(&exit_rx).unwrap_or(DownReason::Killed))),
    }
}

fn serve<S: GenServer>(
    mut server: S,
    mb: Mailbox<Request<S>>,
    name: Option<String>,
    parent: Option<Pid>,
    exit_tx: WatchSender<Option<DownReason>>,
    ready: OneshotSender<Result<(), StartError>>,
) {
    crate::process::set_ext(std::sync::Arc::new(exit_tx.subscribe()));
    let cell = ExitCell { tx: exit_tx, reason: None };
    if let Some(n) = &name {
        if let Err(crate::process::RegisterError::NameTaken(p)) =
            crate::process::register(n.clone(), crate::task::current_pid())
        {
            let _ = ready.send(Err(StartError::AlreadyStarted(p)));
            return exit_with(cell, DownReason::Normal);
        }
    }
    // On an init failure the name is released before `start` learns of it.
    let release_name = || {
        if let Some(n) = &name {
            crate::process::unregister(n);
        }
    };
    let failed = match catch_unwind(AssertUnwindSafe(|| server.init())) {
        Ok(InitResult::Ok) => None,
        Ok(InitResult::Stop(r)) => Some((StartError::Init(r.clone()), r)),
        Ok(InitResult::Ignore) => Some((StartError::Ignore, DownReason::Normal)),
        Err(p) => {
            let r = reason_from_payload(p);
            Some((StartError::Init(r.clone()), r))
        }
    };
    if let Some((err, reason)) = failed {
        release_name();
        // The starter learns of the failure from `start_link`'s return value. A trapping
        // starter also gets the exit signal (as in OTP); a non-trapping one is not killed by
        // it: the link is dropped before exiting.
        if let Some(p) = parent.filter(|p| !crate::process::traps_exits(*p)) {
            crate::process::unlink(p);
        }
        let _ = ready.send(Err(err));
        return exit_with(cell, reason);
    }
    let _ = ready.send(Ok(()));
    let mut terminated = false;
    let reason = match serve_caught(&mut server, &mb, parent, &mut terminated) {
        Ok(reason) => reason,
        Err(payload) => {
            let reason = reason_from_payload(payload);
            // A callback panic runs terminate; a kill (or other stop request) does not, and
            // neither does a panic in terminate itself: it runs at most once (as in OTP, the
            // server then exits with terminate's crash).
            match catch_unwind(AssertUnwindSafe(|| {
                if matches!(reason, DownReason::Panic(_)) && !terminated {
                    server.terminate(&reason);
                }
            })) {
                Ok(()) => reason,
                Err(payload) => reason_from_payload(payload),
            }
        }
    };
    exit_with(cell, reason);
}

/// [`run_loop`] under `catch_unwind`, in a small frame of its own: a crash's unwinder reads
/// the call-site table and CFA program of every frame it passes, and this one's are short
/// (inlined into `serve`, they would be all of `serve`'s).
#[inline(never)]
fn serve_caught<S: GenServer>(
    server: &mut S,
    mb: &Mailbox<Request<S>>,
    parent: Option<Pid>,
    terminated: &mut bool,
) -> std::thread::Result<DownReason> {
    catch_unwind(AssertUnwindSafe(|| run_loop(server, mb, parent, terminated)))
}

/// Serves until the server stops; returns why. Sets `terminated` before it calls
/// `terminate`, so a panic in `terminate` is not followed by a second call.
fn run_loop<S: GenServer>(
    server: &mut S,
    mb: &Mailbox<Request<S>>,
    parent: Option<Pid>,
    terminated: &mut bool,
) -> DownReason {
    let mut terminate = |server: &mut S, reason: &DownReason| {
        *terminated = true;
        server.terminate(reason);
    };
    loop {
        let flow = match mb.recv() {
            Envelope::Msg(Request::Call(req, from)) => match server.handle_call(req, &from) {
                CallResult::Reply(r) => {
                    from.reply_now(r);
                    Flow::Continue
                }
                CallResult::NoReply => Flow::Continue,
                CallResult::Stop(reason, reply) => {
                    terminate(server, &reason);
                    if let Some(r) = reply {
                        from.reply_now(r);
                    }
                    return reason;
                }
            },
            Envelope::Msg(Request::Cast(c)) => server.handle_cast(c),
            Envelope::Msg(Request::Info(i)) => server.handle_info(Info::Msg(i)),
            Envelope::Msg(Request::Stop(reason, done)) => {
                terminate(server, &reason);
                let _ = done.send(());
                return reason;
            }
            Envelope::Down(d) => server.handle_info(Info::Down(d)),
            Envelope::Exit(x) => {
                // A trapping server whose parent (the `start_link` caller, e.g. its
                // supervisor) exits or asks it to stop terminates with that reason; exit
                // signals from anyone else are info.
                if Some(x.from) == parent {
                    terminate(server, &x.reason);
                    return x.reason;
                }
                server.handle_info(Info::Exit(x))
            }
        };
        if let Flow::Stop(reason) = flow {
            terminate(server, &reason);
            return reason;
        }
    }
}

impl<S: GenServer> ServerRef<S> {
    /// The server's pid.
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// Calls the server with the default 5 s timeout.
    pub fn call(&self, request: S::Call) -> Result<S::Reply, CallError> {
        self.call_timeout(request, DEFAULT_CALL_TIMEOUT)
    }

    /// Calls the server, waiting at most `timeout` for the reply.
    pub fn call_timeout(&self, request: S::Call, timeout: Duration) -> Result<S::Reply, CallError> {
        call_with(self.addr.pid(), WaitLimit::For(timeout), &self.exit, |from| {
            self.addr.try_send(Request::Call(request, from)).is_ok()
        })
    }

    /// Sends a cast; always succeeds, even to a dead server.
    pub fn cast(&self, msg: S::Cast) {
        self.addr.send(Request::Cast(msg));
    }

    /// Sends an info message.
    pub fn info(&self, msg: S::Info) {
        self.addr.send(Request::Info(msg));
    }

    /// Stops the server with `reason` (terminate runs) and waits until it has stopped, as
    /// OTP's `gen_server:stop`. Errors: [`CallError::NoProc`] if it was not running,
    /// [`CallError::CallingSelf`] from the server itself (nothing is sent), and
    /// [`CallError::Down`] with its exit reason if it ended otherwise first (or its
    /// `terminate` panicked).
    pub fn stop(&self, reason: DownReason) -> Result<(), CallError> {
        stop_server(self.addr.pid(), &self.exit, |done| self.addr.try_send(Request::Stop(reason, done)).is_ok())
    }

    /// The server's exit reason, once it has stopped.
    pub fn exit_reason(&self) -> Option<DownReason> {
        exit_reason_now(&self.exit)
    }

    /// True while the server's mailbox exists.
    pub fn is_alive(&self) -> bool {
        self.addr.is_alive()
    }
}

/// Calls the server registered under `name`; [`CallError::NoProc`] if no server of type
/// `S` runs under that name. Looks the name up on every call; keep a [`ServerRef`] (from
/// [`named`]) on hot paths.
pub fn call_named<S: GenServer>(name: &str, request: S::Call) -> Result<S::Reply, CallError> {
    named::<S>(name).ok_or_else(no_proc)?.call(request)
}

/// A [`ServerRef`] for the server of type `S` registered under `name`, if one runs.
pub fn named<S: GenServer>(name: &str) -> Option<ServerRef<S>> {
    let addr = crate::task::whereis_addr::<Request<S>>(name).ok()?;
    let ext = crate::process::ext_of(addr.pid())?;
    let exit = ext.downcast_ref::<WatchReceiver<Option<DownReason>>>()?.clone();
    Some(ServerRef { addr, exit })
}
