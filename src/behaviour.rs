//! What the behaviours share (layer 4): the call protocol (a request carries a [`From`];
//! the reply lands in the caller's frame or on a oneshot; a dropped `From` means the server
//! died or dropped a deferred reply), the exit cell that tells callers why a server ended,
//! ending a behaviour actor with a reason, start options and the start and call errors.
//! `gen_server` and `gen_statem` are built on it and re-export its public types.

use std::fmt;

use crate::channel::{oneshot, OneshotSender, RecvTimeoutError, WatchReceiver, WatchSender};
use crate::process::DownReason;
use crate::reply::{NoReply, ReplySender, ReplyWait};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;

/// The caller of one `call`, as seen by `handle_call`. Return [`CallResult::Reply`](crate::gen_server::CallResult::Reply) to
/// answer now, or take a [`ReplyTo`] with [`From::defer`] and answer later from anywhere.
pub struct From<R> {
    tx: std::cell::Cell<Option<Reply<R>>>,
    caller: Option<Pid>,
}

/// Where a reply goes: the calling actor's frame, or a oneshot (callers that are plain
/// threads or actors of another runtime).
enum Reply<R> {
    Frame(ReplySender<R>),
    Channel(OneshotSender<R>),
}

impl<R> Reply<R> {
    fn send(self, r: R) {
        match self {
            Reply::Frame(tx) => tx.send(r),
            Reply::Channel(tx) => {
                let _ = tx.send(r);
            }
        }
    }
}

impl<R: Send> From<R> {
    /// Takes the reply handle out, to answer later (then return [`CallResult::NoReply`](crate::gen_server::CallResult::NoReply)).
    ///
    /// # Panics
    /// If called twice for one call.
    pub fn defer(&self) -> ReplyTo<R> {
        let tx = self.tx.take().expect("gen_server: From::defer called twice");
        // A reply into an actor's frame names a word in its runtime's slab; out of the
        // server's hands it keeps that runtime alive (see the `reply` module).
        let runtime = match &tx {
            // SAFETY: `defer` is called by the server, an actor of the caller's runtime
            // (`call_with` makes actor replies only for those).
            Reply::Frame(s) => Some(unsafe { s.runtime() }),
            Reply::Channel(_) => None,
        };
        ReplyTo { tx, _runtime: runtime }
    }
    /// The calling actor (None for a plain thread).
    pub fn caller(&self) -> Option<Pid> {
        self.caller
    }
    pub(crate) fn reply_now(&self, r: R) {
        if let Some(tx) = self.tx.take() {
            tx.send(r);
        }
    }
}

impl<R> fmt::Debug for From<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("From").field("caller", &self.caller).finish()
    }
}

/// A deferred reply: send it from any actor or thread. Dropping it without replying leaves
/// the caller to time out.
pub struct ReplyTo<R> {
    tx: Reply<R>,
    /// Keeps the caller's runtime alive for an actor reply (dropped after `tx`).
    _runtime: Option<std::sync::Arc<crate::runtime::Shared>>,
}

impl<R: Send> ReplyTo<R> {
    /// Sends the reply (discarded if the caller gave up).
    pub fn reply(self, reply: R) {
        self.tx.send(reply);
    }
}

impl<R> fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplyTo { .. }")
    }
}

/// Why `start` did not return a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// `init` returned `Stop` or panicked.
    Init(DownReason),
    /// `init` returned `Ignore`.
    Ignore,
    /// The name is registered to this live actor.
    AlreadyStarted(Pid),
    /// Spawning failed (slab full, out of memory maps, shutting down); the message says why.
    Spawn(String),
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Init(r) => write!(f, "gen_server init failed: {r}"),
            StartError::Ignore => f.write_str("gen_server init returned ignore"),
            StartError::AlreadyStarted(p) => write!(f, "gen_server name already registered to {p}"),
            StartError::Spawn(e) => write!(f, "gen_server could not be spawned: {e}"),
        }
    }
}
impl std::error::Error for StartError {}

/// Why a `call` failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallError {
    /// The server is not alive (or the name is unknown); nothing was sent.
    NoProc,
    /// The server died during the call.
    Down(DownReason),
    /// No reply within the timeout.
    Timeout,
    /// A server called itself.
    CallingSelf,
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::NoProc => f.write_str("gen_server call: no such server"),
            CallError::Down(r) => write!(f, "gen_server call: the server died ({r})"),
            CallError::Timeout => f.write_str("gen_server call: timed out"),
            CallError::CallingSelf => f.write_str("gen_server call: a server called itself"),
        }
    }
}
impl std::error::Error for CallError {}

/// Options for [`gen_server::start_opts`](crate::gen_server::start_opts) and
/// [`gen_statem::start_opts`](crate::gen_statem::start_opts).
#[derive(Debug, Default, Clone)]
pub struct StartOpts {
    /// Register the server under this name (released when it stops).
    pub name: Option<String>,
    /// Link the server to the caller (`start_link`).
    pub link: bool,
}

pub(crate) fn exit_reason_now(rx: &WatchReceiver<Option<DownReason>>) -> Option<DownReason> {
    rx.clone().get()
}

/// Makes one call to the behaviour actor `server` (gen_server, gen_statem): `send` posts
/// the request carrying the given [`From`] and returns false if the server's mailbox is
/// gone (it drops the request itself); then the reply is awaited within `limit`.
///
/// A `From` dropped without a reply means the server dropped the request: it died (the
/// reason is read from its exit cell, waiting for the cell up to the limit) or dropped a
/// deferred reply (then the caller times out, as in OTP).
pub(crate) fn call_with<R: Send>(
    server: Pid,
    mut limit: WaitLimit,
    exit: &WatchReceiver<Option<DownReason>>,
    send: impl FnOnce(From<R>) -> bool,
) -> Result<R, CallError> {
    let Some((shared, me, slot)) = crate::runtime::current_actor_slot() else {
        return call_by_oneshot(None, limit, exit, send);
    };
    if me == server {
        return Err(CallError::CallingSelf);
    }
    // SAFETY: the runtime of the running actor is alive.
    if !unsafe { &*shared }.slab.owns(server) {
        // A server of another runtime might outlive ours: a oneshot (see the `reply` module).
        return call_by_oneshot(Some(me), limit, exit, send);
    }
    // The reply lands in this frame; `wait` stays in place until the call is over.
    let wait = ReplyWait::new(slot);
    let from = From { tx: std::cell::Cell::new(Some(Reply::Frame(wait.sender(shared, me)))), caller: Some(me) };
    if !send(from) {
        return Err(no_proc());
    }
    match wait.wait(&mut limit) {
        Ok(r) => Ok(r),
        Err(NoReply::Timeout) => Err(CallError::Timeout),
        Err(NoReply::Dropped) => Err(server_gone(limit, exit)),
    }
}

/// [`call_with`] for a plain thread (or a server of another runtime): the reply comes over
/// a oneshot.
#[cold]
fn call_by_oneshot<R: Send>(
    caller: Option<Pid>,
    mut limit: WaitLimit,
    exit: &WatchReceiver<Option<DownReason>>,
    send: impl FnOnce(From<R>) -> bool,
) -> Result<R, CallError> {
    let (tx, mut rx) = oneshot();
    if !send(From { tx: std::cell::Cell::new(Some(Reply::Channel(tx))), caller }) {
        return Err(no_proc());
    }
    match rx.recv_within(&mut limit) {
        Ok(r) => Ok(r),
        Err(RecvTimeoutError::Timeout) => Err(CallError::Timeout),
        Err(RecvTimeoutError::Disconnected) => Err(server_gone(limit, exit)),
    }
}

/// `NoProc`, after a preemption check: a call that fails at once does not block, so a loop
/// retrying it (waiting for a restarted server to register, say) would otherwise never give
/// the thread to the actors it waits for.
#[cold]
pub(crate) fn no_proc() -> CallError {
    crate::preempt::maybe_preempt();
    CallError::NoProc
}

/// The server dropped a call's `From`: `Down` with its exit reason once its exit cell is
/// set (waiting for it within what is left of the call's `limit`), else `Timeout` (a
/// deferred reply that was dropped).
#[cold]
fn server_gone(limit: WaitLimit, exit: &WatchReceiver<Option<DownReason>>) -> CallError {
    // What is left of the call's limit, as a deadline: a park woken after its timeout was
    // armed left the armed deadline; a relative limit still restarts now (it was woken
    // within the rounds before arming), so the wait may end that little late, never early.
    let deadline = limit.deadline();
    let mut exit = exit.clone();
    loop {
        if let Some(r) = exit.get() {
            return CallError::Down(r);
        }
        let waited = match deadline {
            Some(d) => exit.changed_deadline(d).map_err(|_| ()),
            None => exit.changed().map_err(|_| ()),
        };
        if waited.is_err() {
            return CallError::Timeout;
        }
    }
}

/// Waits until a behaviour's exit cell is set (it has fully stopped).
pub(crate) fn await_exit(exit: &WatchReceiver<Option<DownReason>>) {
    let mut exit = exit.clone();
    while exit.get().is_none() {
        if exit.changed().is_err() {
            break;
        }
    }
}

/// Sets the exit cell when the server ends, however it ends (before the mailbox and any
/// pending `From` drop, so a caller that sees its reply channel close finds the reason).
pub(crate) struct ExitCell {
    pub(crate) tx: WatchSender<Option<DownReason>>,
    pub(crate) reason: Option<DownReason>,
}

impl Drop for ExitCell {
    fn drop(&mut self) {
        let r = self.reason.take().unwrap_or(DownReason::Killed);
        self.tx.send(Some(r));
    }
}

/// Ends a behaviour actor with `reason`: sets its exit cell (before the mailbox and any
/// pending request drop) and makes `reason` the actor's exit reason, which monitors and
/// links see once the behaviour's function returns (the caller returns at once).
///
/// A crash was already caught once (to run `terminate`); the reason is handed to the actor's
/// entry instead of being raised again, which would unwind the whole behaviour frame a
/// second time (that second unwind would be most of a supervised restart's cost:
/// outputs/history.md, finding 27).
/// An actor that is being stopped (kill, exit signal, shutdown) still unwinds, so the rest
/// of its teardown runs as a stopped actor's does (parks turn into yields).
pub(crate) fn exit_with(mut cell: ExitCell, reason: DownReason) {
    cell.reason = Some(reason.clone());
    drop(cell);
    if reason == DownReason::Normal {
        return;
    }
    if crate::runtime::current_cancel_reason().is_none() {
        crate::runtime::set_current_exit_override(reason);
        return;
    }
    // `resume_unwind` skips the panic hook, which is what marks an actor as unwinding; mark it
    // here, or a destructor that parks mid-unwind could be taken for a bystander.
    crate::runtime::mark_current_unwinding();
    match reason {
        DownReason::Panic(msg) => std::panic::resume_unwind(Box::new(msg)),
        other => std::panic::resume_unwind(Box::new(crate::process::Cancelled(other))),
    }
}
