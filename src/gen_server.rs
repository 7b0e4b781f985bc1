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
//!   the server traps exits; never on `kill`. With `Stop(reason, Some(reply))` terminate runs
//!   first, then the reply is sent.
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

use crate::channel::{oneshot, watch, OneshotSender, RecvTimeoutError, WatchReceiver, WatchSender};
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, Down, DownReason, Exit};
use crate::reply::{NoReply, ReplySender, ReplyWait};
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

/// The caller of one `call`, as seen by `handle_call`. Return [`CallResult::Reply`] to
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
    /// Takes the reply handle out, to answer later (then return [`CallResult::NoReply`]).
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

/// Options for [`start_opts`].
#[derive(Debug, Default, Clone)]
pub struct StartOpts {
    /// Register the server under this name (released when it stops).
    pub name: Option<String>,
    /// Link the server to the caller (`start_link`).
    pub link: bool,
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
fn no_proc() -> CallError {
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
    let reason = match serve_caught(&mut server, &mb, parent) {
        Ok(reason) => reason,
        Err(payload) => {
            let reason = reason_from_payload(payload);
            // A callback panic runs terminate; a kill (or other stop request) does not.
            if matches!(reason, DownReason::Panic(_)) {
                let _ = catch_unwind(AssertUnwindSafe(|| server.terminate(&reason)));
            }
            reason
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
) -> std::thread::Result<DownReason> {
    catch_unwind(AssertUnwindSafe(|| run_loop(server, mb, parent)))
}

fn run_loop<S: GenServer>(server: &mut S, mb: &Mailbox<Request<S>>, parent: Option<Pid>) -> DownReason {
    loop {
        let flow = match mb.recv() {
            Envelope::Msg(Request::Call(req, from)) => match server.handle_call(req, &from) {
                CallResult::Reply(r) => {
                    from.reply_now(r);
                    Flow::Continue
                }
                CallResult::NoReply => Flow::Continue,
                CallResult::Stop(reason, reply) => {
                    server.terminate(&reason);
                    if let Some(r) = reply {
                        from.reply_now(r);
                    }
                    return reason;
                }
            },
            Envelope::Msg(Request::Cast(c)) => server.handle_cast(c),
            Envelope::Msg(Request::Info(i)) => server.handle_info(Info::Msg(i)),
            Envelope::Msg(Request::Stop(reason, done)) => {
                server.terminate(&reason);
                let _ = done.send(());
                return reason;
            }
            Envelope::Down(d) => server.handle_info(Info::Down(d)),
            Envelope::Exit(x) => {
                // A trapping server whose parent (the `start_link` caller, e.g. its
                // supervisor) exits or asks it to stop terminates with that reason; exit
                // signals from anyone else are info.
                if Some(x.from) == parent {
                    server.terminate(&x.reason);
                    return x.reason;
                }
                server.handle_info(Info::Exit(x))
            }
        };
        if let Flow::Stop(reason) = flow {
            server.terminate(&reason);
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

    /// Stops the server with `reason` (terminate runs) and waits until it has stopped.
    /// Returns false if it was not running.
    pub fn stop(&self, reason: DownReason) -> bool {
        let (tx, rx) = oneshot();
        if self.addr.try_send(Request::Stop(reason, tx)).is_err() {
            return false;
        }
        let _ = rx.recv();
        await_exit(&self.exit);
        true
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
