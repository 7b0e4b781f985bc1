//! What the behaviours share (layer 4): the call protocol (a request carries a [`Caller`];
//! the reply lands in the caller's frame or on a oneshot; a dropped `Caller` means the server
//! died or dropped a deferred reply), the exit cell that tells callers why a server ended,
//! ending a behaviour actor with a reason, stopping one, start options and the start and
//! call errors. `gen_server` and `gen_statem` are built on it and re-export its public types.
//!
//! # A deferred reply does not outlive its server's interest in the call
//!
//! OTP's `call` monitors the server, so a caller fails as soon as the server dies, whoever
//! holds the reply. Here a call is ended by its reply handle being dropped, which the
//! server's death does unless the handle was deferred and given to someone else. So
//! [`Caller::defer`] leaves a second handle on the call with the server (in an actor-local
//! list, [`DEFERRED`]): one that can end the call without a reply and is used when the server
//! ends (the list is dropped with the server's actor-local values, after its exit cell is
//! set, so the caller finds the reason). Whichever of the reply, the drop of the deferred
//! handle, the caller's timeout and the server's end comes first decides the call; the others
//! do nothing. Servers that never defer pay nothing.

use std::cell::RefCell;
use std::fmt;
use std::sync::Arc;

use crate::channel::{oneshot, OneshotSender, RecvTimeoutError, WatchReceiver, WatchSender};
use crate::process::DownReason;
use crate::raw_mutex::{Rank, RawMutex};
use crate::reply::{CallCancel, NoReply, ReplySender, ReplyWait};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;

/// The caller of one `call`, as seen by `handle_call` (and gen_statem's `Event::Call`).
/// Return [`CallResult::Reply`](crate::gen_server::CallResult::Reply) to answer now, or take
/// a [`ReplyTo`] with [`Caller::defer`] and answer later from anywhere. (OTP's `From`; named
/// so as not to shadow `std::convert::From`.)
pub struct Caller<R> {
    tx: std::cell::Cell<Option<Reply<R>>>,
    caller: Option<Pid>,
}

/// Where a call's reply goes: the calling actor's frame, or a oneshot (callers that are
/// plain threads or actors of another runtime, and `send_request`). Two variants only: this
/// is dropped on every call, and each variant adds to that drop glue on the call path
/// (the third, for callers on other nodes, exists only with feature `cluster`).
enum Reply<R> {
    Frame(ReplySender<R>),
    Channel(OneshotSender<R>),
    /// A caller on another node: the hook encodes the reply and sends it, run by whoever
    /// replies (no forwarder actor in between).
    #[cfg(feature = "cluster")]
    Hook(ReplyHook<R>),
}

/// [`Reply::Hook`]'s function.
#[cfg(feature = "cluster")]
pub(crate) type ReplyHook<R> = Box<dyn FnOnce(R) + Send>;

impl<R> Reply<R> {
    #[inline(always)]
    fn send(self, r: R) {
        match self {
            Reply::Frame(tx) => tx.send(r),
            Reply::Channel(tx) => {
                let _ = tx.send(r);
            }
            #[cfg(feature = "cluster")]
            Reply::Hook(h) => h(r),
        }
    }
}

/// Where a deferred reply goes: the calling actor's frame, or a oneshot shared with the
/// server's [`DEFERRED`] list.
enum DeferredReply<R> {
    Frame(ReplySender<R>),
    Shared(SharedOneshot<R>),
    #[cfg(feature = "cluster")]
    Hook(ReplyHook<R>),
}

impl<R> DeferredReply<R> {
    fn send(self, r: R) {
        match self {
            DeferredReply::Frame(tx) => tx.send(r),
            DeferredReply::Shared(tx) => {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(r);
                }
            }
            #[cfg(feature = "cluster")]
            DeferredReply::Hook(h) => h(r),
        }
    }
}

/// A deferred reply's oneshot, shared by the reply handle and its server's [`DEFERRED`]
/// list: whichever takes the sender first replies (the handle) or closes the call (the
/// server's end). Dropping the handle drops the sender, as an unshared one would.
struct SharedOneshot<R>(Arc<RawMutex<Option<OneshotSender<R>>>>);

impl<R> SharedOneshot<R> {
    /// Takes the sender out (the lock is released before it is used or dropped: the
    /// oneshot's own lock ranks equal).
    fn take(&self) -> Option<OneshotSender<R>> {
        self.0.lock().take()
    }
}

impl<R> Drop for SharedOneshot<R> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

/// The server's side of a deferred call, type-erased for the [`DEFERRED`] list.
trait PendingCall {
    /// True while the call may still be answered.
    fn is_pending(&self) -> bool;
    /// Ends the call without a reply (the caller fails with `Down`), if it still waits.
    fn close(&self);
}

impl<R: Send> PendingCall for RawMutex<Option<OneshotSender<R>>> {
    /// The reply handle still holds the sender (a caller that gave up is not asked: its
    /// oneshot's lock ranks equal; the entry goes when the handle does).
    fn is_pending(&self) -> bool {
        self.lock().is_some()
    }
    fn close(&self) {
        let tx = self.lock().take();
        drop(tx);
    }
}

/// The calls a server deferred, by the server (see the module doc).
enum Deferred {
    /// A call of an actor of this runtime, waiting in its frame.
    Frame(CallCancel),
    /// A call waiting on a oneshot.
    Oneshot(Arc<dyn PendingCall>),
}

impl Deferred {
    fn is_pending(&self) -> bool {
        match self {
            Deferred::Frame(c) => c.is_pending(),
            Deferred::Oneshot(c) => c.is_pending(),
        }
    }
}

/// A server's deferred calls; dropped with its actor-local values when it ends, which ends
/// every call still waiting.
#[derive(Default)]
pub(crate) struct DeferredCalls(RefCell<Vec<Deferred>>);

impl DeferredCalls {
    fn push(&self, d: Deferred) {
        let mut list = self.0.borrow_mut();
        // Answered calls leave their entries: drop those before the list would grow, then
        // keep it at most half full, so a long-lived server that defers keeps a bounded list
        // at amortised O(1) per deferral.
        if list.len() == list.capacity() && list.len() >= 8 {
            list.retain(Deferred::is_pending);
            let len = list.len();
            list.reserve(len);
        }
        list.push(d);
    }
}

impl Drop for DeferredCalls {
    fn drop(&mut self) {
        for d in self.0.get_mut().drain(..) {
            match d {
                // SAFETY: this runs in the server actor that deferred the call (an
                // actor-local value is dropped on its own actor's stack), an actor of the
                // caller's runtime (`call_with` makes frame replies only for those).
                Deferred::Frame(c) => unsafe { c.cancel() },
                Deferred::Oneshot(c) => c.close(),
            }
        }
    }
}

crate::actor_local! {
    /// The calls the running server deferred and may still be waiting (module doc).
    static DEFERRED: DeferredCalls = DeferredCalls::default();
}

impl<R: Send> Caller<R> {
    /// Takes the reply handle out, to answer later (then return [`CallResult::NoReply`](crate::gen_server::CallResult::NoReply)).
    ///
    /// # Panics
    /// If called twice for one call.
    ///
    /// If the server ends before the reply is sent, the caller fails at once with
    /// [`CallError::Down`], wherever the [`ReplyTo`] is (as OTP's call, which monitors the
    /// server); a reply sent after that is discarded.
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// /// Answers each call from a helper actor.
    /// struct Delegates;
    /// impl GenServer for Delegates {
    ///     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, x: u32, from: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> {
    ///         let reply = from.defer();
    ///         smarm::spawn(move || reply.reply(x * 10));
    ///         CallResult::NoReply
    ///     }
    /// }
    /// smarm::run(|| assert_eq!(gen_server::start(Delegates).unwrap().call(4), Ok(40)));
    /// ```
    pub fn defer(&self) -> ReplyTo<R>
    where
        R: 'static,
    {
        let tx = self.tx.take().expect("gen_server: Caller::defer called twice");
        // The server keeps a handle that ends the call when it ends (module doc).
        let (tx, deferred) = match tx {
            Reply::Frame(s) => {
                let cancel = s.call_cancel();
                (DeferredReply::Frame(s), Some(Deferred::Frame(cancel)))
            }
            Reply::Channel(s) => {
                let shared = Arc::new(RawMutex::new(Rank::Primitive, Some(s)));
                (DeferredReply::Shared(SharedOneshot(shared.clone())), Some(Deferred::Oneshot(shared)))
            }
            // A remote caller monitors the server (OTP's protocol): its end reaches the
            // caller as that monitor's Down, with nothing to close here.
            #[cfg(feature = "cluster")]
            Reply::Hook(h) => (DeferredReply::Hook(h), None),
        };
        // `defer` runs in the server (a `Caller` is only lent to its callbacks), so the entry
        // is the server's. An actor whose local values are already being dropped cannot
        // defer a call any more: its caller is left to the reply handle alone.
        if let Some(deferred) = deferred {
            let _ = DEFERRED.try_with(|d| d.push(deferred));
        }
        // A reply into an actor's frame names a word in its runtime's slab; out of the
        // server's hands it keeps that runtime alive (see the `reply` module).
        let runtime = match &tx {
            // SAFETY: `defer` is called by the server, an actor of the caller's runtime
            // (`call_with` makes actor replies only for those).
            DeferredReply::Frame(s) => Some(unsafe { s.runtime() }),
            DeferredReply::Shared(_) => None,
            #[cfg(feature = "cluster")]
            DeferredReply::Hook(_) => None,
        };
        ReplyTo { tx, _runtime: runtime }
    }
    /// The calling actor (None for a plain thread).
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// struct WhoCalls;
    /// impl GenServer for WhoCalls {
    ///     type Call = (); type Reply = Option<smarm::Pid>; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), from: &Caller<Option<smarm::Pid>>, _: &Ctx<Self>) -> CallResult<Option<smarm::Pid>> {
    ///         CallResult::Reply(from.caller())
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(WhoCalls).unwrap();
    ///     assert_eq!(s.call(()), Ok(Some(smarm::current_pid())));
    ///     let s2 = s.clone();
    ///     // A plain thread has no pid.
    ///     let from_thread = std::thread::spawn(move || s2.call(())).join().unwrap();
    ///     assert_eq!(from_thread, Ok(None));
    /// });
    /// ```
    pub fn caller(&self) -> Option<Pid> {
        self.caller
    }
    /// Replies, unless the reply was deferred (for a `Caller` the replier only borrows).
    pub(crate) fn reply_now(&self, r: R) {
        if let Some(tx) = self.tx.take() {
            tx.send(r);
        }
    }
    /// Replies, unless the reply was deferred, consuming the handle: nothing is left to drop
    /// (the call path's reply; [`reply_now`](Self::reply_now) leaves an empty cell whose
    /// drop glue the compiler cannot always see through).
    #[inline(always)]
    pub(crate) fn reply_into(self, r: R) {
        if let Some(tx) = self.tx.into_inner() {
            tx.send(r);
        }
    }
}

impl<R> fmt::Debug for Caller<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Caller").field("caller", &self.caller).finish()
    }
}

/// A deferred reply: send it from any actor or thread. Dropping it without replying leaves
/// the caller to time out (or to fail with [`CallError::Down`] if the server ends first).
pub struct ReplyTo<R> {
    tx: DeferredReply<R>,
    /// Keeps the caller's runtime alive for an actor reply (dropped after `tx`).
    _runtime: Option<std::sync::Arc<crate::runtime::Shared>>,
}

impl<R: Send> ReplyTo<R> {
    /// Sends the reply (discarded if the caller gave up).
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, ReplyTo};
    /// /// Answers the held call when told to (a cast); a cast that comes first is remembered.
    /// struct Later(Option<ReplyTo<&'static str>>, bool);
    /// impl GenServer for Later {
    ///     type Call = (); type Reply = &'static str; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), from: &Caller<&'static str>, _: &Ctx<Self>) -> CallResult<&'static str> {
    ///         if self.1 {
    ///             return CallResult::Reply("now");
    ///         }
    ///         self.0 = Some(from.defer());
    ///         CallResult::NoReply
    ///     }
    ///     fn handle_cast(&mut self, _: (), _: &Ctx<Self>) -> gen_server::Flow {
    ///         match self.0.take() {
    ///             Some(r) => r.reply("now"),
    ///             None => self.1 = true,
    ///         }
    ///         gen_server::Flow::Continue
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Later(None, false)).unwrap();
    ///     let s2 = s.clone();
    ///     smarm::spawn(move || s2.cast(()));
    ///     assert_eq!(s.call(()), Ok("now"));
    /// });
    /// ```
    pub fn reply(self, reply: R) {
        self.tx.send(reply);
    }
}

impl<R> fmt::Debug for ReplyTo<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ReplyTo { .. }")
    }
}

/// Why `start` did not return a server (gen_server or gen_statem).
///
/// ```
/// use smarm::gen_server::{self, Caller, CallResult, GenServer, InitResult, Ctx, StartError};
/// struct Refuses;
/// impl GenServer for Refuses {
///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
///     fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult<()> { InitResult::Ignore }
///     fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<(), ()> { CallResult::Reply(()) }
/// }
/// smarm::run(|| assert_eq!(gen_server::start(Refuses).err(), Some(StartError::Ignore)));
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum StartError {
    /// `init` returned `Stop` or panicked.
    Init(DownReason),
    /// `init` returned `Ignore`.
    Ignore,
    /// The name is registered to this live actor.
    AlreadyStarted(Pid),
    /// Spawning the server's actor failed.
    Spawn(crate::error::SpawnError),
}

/// Equal variants with equal data; two `Spawn` errors are equal when they are the same kind
/// of spawn failure (`SpawnError` holds an `io::Error`, which has no equality of its own).
impl PartialEq for StartError {
    fn eq(&self, other: &Self) -> bool {
        use crate::error::SpawnError as S;
        match (self, other) {
            (StartError::Init(a), StartError::Init(b)) => a == b,
            (StartError::Ignore, StartError::Ignore) => true,
            (StartError::AlreadyStarted(a), StartError::AlreadyStarted(b)) => a == b,
            (StartError::Spawn(a), StartError::Spawn(b)) => match (a, b) {
                (S::Full { max_actors: x }, S::Full { max_actors: y }) => x == y,
                (S::Stack(x), S::Stack(y)) => x.kind() == y.kind(),
                _ => std::mem::discriminant(a) == std::mem::discriminant(b),
            },
            _ => false,
        }
    }
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Init(r) => write!(f, "behaviour init failed: {r}"),
            StartError::Ignore => f.write_str("behaviour init returned ignore"),
            StartError::AlreadyStarted(p) => write!(f, "behaviour name already registered to {p}"),
            StartError::Spawn(e) => write!(f, "behaviour could not be spawned: {e}"),
        }
    }
}
impl std::error::Error for StartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StartError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a `call` (or a `stop`) failed.
///
/// ```
/// use smarm::gen_server::{self, CallError};
/// smarm::run(|| {
///     # struct Echo;
///     # impl gen_server::GenServer for Echo {
///     #     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
///     #     fn handle_call(&mut self, _: (), _: &gen_server::Caller<()>, _: &gen_server::Ctx<Self>) -> gen_server::CallResult<()> {
///     #         gen_server::CallResult::Reply(())
///     #     }
///     # }
///     assert_eq!(gen_server::call_named::<Echo>("nobody", ()), Err(CallError::NoProc));
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CallError {
    /// The server is not alive (or the name is unknown); nothing was sent.
    NoProc,
    /// The server died during the call (or, for `stop`, ended with another reason than the
    /// one asked for: it died before it could stop, or its `terminate` panicked).
    Down(DownReason),
    /// No reply within the timeout.
    Timeout,
    /// A server called or stopped itself (OTP's `calling_self`); nothing was sent.
    CallingSelf,
    /// The reply of a server of another node did not decode into the reply type (feature
    /// `cluster`; the decoder's message).
    BadReply(String),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CallError::NoProc => f.write_str("gen_server call: no such server"),
            CallError::Down(r) => write!(f, "gen_server call: the server died ({r})"),
            CallError::Timeout => f.write_str("gen_server call: timed out"),
            CallError::CallingSelf => f.write_str("gen_server call: a server called or stopped itself"),
            CallError::BadReply(e) => write!(f, "gen_server call: the reply did not decode: {e}"),
        }
    }
}
impl std::error::Error for CallError {}

/// Options for [`gen_server::start_opts`](crate::gen_server::start_opts) and
/// [`gen_statem::start_opts`](crate::gen_statem::start_opts).
///
/// ```
/// let opts = smarm::gen_server::StartOpts { name: Some("db".into()), link: true };
/// assert_eq!(opts.name.as_deref(), Some("db"));
/// ```
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
/// the request carrying the given [`Caller`] and returns false if the server's mailbox is
/// gone (it drops the request itself); then the reply is awaited within `limit`.
///
/// A `Caller` dropped without a reply means the server dropped the request: it died (the
/// reason is read from its exit cell, waiting for the cell up to the limit) or dropped a
/// deferred reply (then the caller times out, as in OTP).
#[track_caller]
pub(crate) fn call_with<R: Send>(
    server: Pid,
    mut limit: WaitLimit,
    exit: &WatchReceiver<Option<DownReason>>,
    send: impl FnOnce(Caller<R>) -> bool,
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
    let from = Caller { tx: std::cell::Cell::new(Some(Reply::Frame(wait.sender(shared, me)))), caller: Some(me) };
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
#[track_caller]
fn call_by_oneshot<R: Send>(
    caller: Option<Pid>,
    mut limit: WaitLimit,
    exit: &WatchReceiver<Option<DownReason>>,
    send: impl FnOnce(Caller<R>) -> bool,
) -> Result<R, CallError> {
    let (tx, mut rx) = oneshot();
    if !send(Caller { tx: std::cell::Cell::new(Some(Reply::Channel(tx))), caller }) {
        return Err(no_proc());
    }
    match rx.recv_within(&mut limit) {
        Ok(r) => Ok(r),
        Err(RecvTimeoutError::Timeout) => Err(CallError::Timeout),
        Err(RecvTimeoutError::Disconnected) => Err(server_gone(limit, exit)),
    }
}

/// A [`Caller`] whose reply is handed to `hook` (a caller on another node: the hook sends
/// it over the connection).
#[cfg(feature = "cluster")]
pub(crate) fn hook_caller<R: Send>(caller: Option<Pid>, hook: ReplyHook<R>) -> Caller<R> {
    Caller { tx: std::cell::Cell::new(Some(Reply::Hook(hook))), caller }
}

/// A [`Caller`] whose reply goes to the returned oneshot (`send_request`: the reply is
/// taken after the sending frame is gone). `caller` is the requesting actor, if any.
pub(crate) fn oneshot_caller<R: Send>(caller: Option<Pid>) -> (Caller<R>, crate::channel::OneshotReceiver<R>) {
    let (tx, rx) = oneshot();
    (Caller { tx: std::cell::Cell::new(Some(Reply::Channel(tx))), caller }, rx)
}

/// `NoProc`, after a preemption check: a call that fails at once does not block, so a loop
/// retrying it (waiting for a restarted server to register, say) would otherwise never give
/// the thread to the actors it waits for.
#[cold]
pub(crate) fn no_proc() -> CallError {
    crate::preempt::maybe_preempt();
    CallError::NoProc
}

/// The server dropped a call's `Caller`: `Down` with its exit reason once its exit cell is
/// set (waiting for it within what is left of the call's `limit`), else `Timeout` (a
/// deferred reply that was dropped).
#[cold]
#[track_caller]
pub(crate) fn server_gone(limit: WaitLimit, exit: &WatchReceiver<Option<DownReason>>) -> CallError {
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

/// Stops the behaviour actor `server` (gen_server, gen_statem) as OTP's `stop`: `send`
/// posts the stop request carrying the given completion sender and returns false if the
/// server's mailbox is gone; then waits until the server has ended (its exit cell is set).
///
/// `Ok` once it stopped as asked (terminate ran); [`CallError::CallingSelf`] from the server
/// itself (it would wait for its own end); [`CallError::NoProc`] if it was not running;
/// [`CallError::Down`] with its exit reason if it ended otherwise before it could complete
/// the request (died first, or its `terminate` panicked).
pub(crate) fn stop_server(
    server: Pid,
    exit: &WatchReceiver<Option<DownReason>>,
    send: impl FnOnce(OneshotSender<()>) -> bool,
) -> Result<(), CallError> {
    if crate::task::try_current_pid() == Some(server) {
        return Err(CallError::CallingSelf);
    }
    let (tx, rx) = oneshot();
    if !send(tx) {
        return Err(no_proc());
    }
    let stopped = rx.recv().is_ok();
    await_exit(exit);
    if stopped {
        Ok(())
    } else {
        Err(CallError::Down(exit_reason_now(exit).unwrap_or(DownReason::Killed)))
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
/// pending `Caller` drop, so a caller that sees its reply channel close finds the reason).
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
