//! `gen_server`: a request/reply server actor with OTP's lifecycle.
//!
//! Implement [`GenServer`] and [`start`] it; talk to it through a [`ServerRef`] with
//! [`ServerRef::call`] (request/reply, default timeout 5 s), [`ServerRef::cast`]
//! (fire-and-forget, always succeeds) and [`ServerRef::info`]; stop it with
//! [`ServerRef::stop`].
//!
//! ```
//! use std::time::Duration;
//! use smarm::gen_server::{self, CallResult, Caller, Ctx, Flow, GenServer};
//!
//! /// A counter: `call(n)` adds `n` and returns the total; `cast(())` resets it.
//! struct Counter { total: u64 }
//! impl GenServer for Counter {
//!     type Call = u64; type Reply = u64; type Cast = (); type Info = (); type Continue = ();
//!     fn handle_call(&mut self, n: u64, _from: &Caller<u64>, _ctx: &Ctx<Self>) -> CallResult<u64> {
//!         self.total += n;
//!         CallResult::Reply(self.total)
//!     }
//!     fn handle_cast(&mut self, _reset: (), _ctx: &Ctx<Self>) -> Flow {
//!         self.total = 0;
//!         Flow::Continue
//!     }
//! }
//! smarm::run(|| {
//!     let counter = gen_server::start(Counter { total: 0 }).unwrap();
//!     assert_eq!(counter.call(2), Ok(2));
//!     assert_eq!(counter.call_timeout(3, Duration::from_secs(1)), Ok(5));
//!     counter.cast(());
//!     assert_eq!(counter.call(1), Ok(1));
//! });
//! ```
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
//!   [`Caller`] (`from.defer()`), replying later from any actor.
//! - `terminate(reason)` runs on a `Stop` return, on a callback panic, and on shutdown when
//!   the server traps exits; never on `kill`; at most once: if `terminate` panics it is not
//!   called again, and the server exits with that panic (as in OTP). With
//!   `Stop(reason, Some(reply))` terminate runs first, then the reply is sent.
//!
//! # After a callback: timeouts and continues
//!
//! OTP's `{reply, R, S, Timeout}` and `{noreply, S, {continue, C}}` are
//! [`CallResult::ReplyThen`], [`CallResult::NoReplyThen`], [`Flow::Then`] and
//! [`InitResult::Then`] with a [`Then`]:
//! - [`Then::Timeout(d)`](Then::Timeout): if no message or signal arrives within `d`,
//!   [`GenServer::handle_timeout`] runs; anything that arrives first cancels it (as OTP's
//!   `receive ... after`). A zero timeout fires at once unless something is already queued.
//! - [`Then::Continue(c)`](Then::Continue): [`GenServer::handle_continue`] runs with `c`
//!   before the next message is taken (OTP's `handle_continue`), and may itself return
//!   another `Then`.
//!
//! # The context
//!
//! Every callback but `terminate` gets a [`Ctx`]: the server's own [`ServerRef`] (to send
//! itself a timed message or hand itself to others), its pid and the name it was started
//! under. It lives in the server loop's frame and callbacks get a reference, as ractor
//! passes `myself` and kameo a `&mut Context` to every handler: typed (no lookup, no
//! downcast, nothing that can fail) and free on the call path (one pointer argument). An
//! actor-local "current server" lookup was the alternative; it would need the server's type
//! named at the lookup and a runtime check.
//!
//! # Typed requests
//!
//! [`ServerRef::call`] takes the one request type `Call` and answers `Reply`: the simple
//! form, and the fastest (the request and the reply travel unboxed). A server that answers
//! several request types, each with its own reply type, implements [`Handles<M>`] for each
//! and is asked with [`ServerRef::ask`] (kameo's `Message<M> { type Reply }`); the reply's
//! type follows from the request's, so no caller matches a reply enum it cannot get. Such a
//! request costs one box.
//!
//! # Asynchronous requests
//!
//! [`ServerRef::send_request`] sends a call and returns a [`ReqId`] at once; its reply is
//! taken later with [`ReqId::wait_response`], [`ReqId::receive_response`] or
//! [`ReqId::check_response`] (OTP 25's `send_request` family). Several can be awaited
//! together in a [`ReqIdCollection`], each with a label. The request is followed as a call
//! is: if the server dies, the waiter learns its reason at once.
//!
//! # How a reply travels, and how a call finds out the server died
//!
//! A call made by an actor waits in its own frame: the [`Caller`] names that frame and the
//! caller's pid, and the reply is moved straight into it (no channel, no allocation; see
//! the `reply` module). A call made from a plain thread (and a `send_request`) waits on a
//! oneshot instead. If the server dies, the `Caller` is dropped (with the request, or with
//! the queued message) and the caller's wait ends; the caller then reads the server's exit
//! reason from the server's exit cell (a watch channel the server sets before its mailbox
//! and pending requests are dropped), waiting for it up to the call's deadline.

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::behaviour::{
    call_with, exit_reason_now, exit_with, no_proc, oneshot_caller, server_gone, stop_server, ExitCell,
};
pub use crate::behaviour::{CallError, Caller, ReplyTo, StartError, StartOpts};
use crate::channel::{oneshot, watch, OneshotReceiver, OneshotSender, TryRecvError, WatchReceiver, WatchSender};
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, Down, DownReason, Exit};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;
use crate::timer::TimerRef;

/// Default `call` timeout, as in OTP.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server does before its next message (OTP's `Timeout` and `{continue, C}` in a
/// callback's result); see "After a callback" in the module doc.
#[derive(Debug)]
pub enum Then<C> {
    /// Run `handle_timeout` if nothing arrives within this time.
    Timeout(Duration),
    /// Run `handle_continue` with this value before taking the next message.
    Continue(C),
}

/// What `init` decided.
#[derive(Debug)]
pub enum InitResult<C = ()> {
    /// Start serving.
    Ok,
    /// Start serving, with a timeout or a continue first (OTP's `{ok, S, Timeout}`,
    /// `{ok, S, {continue, C}}`).
    Then(Then<C>),
    /// Do not start; `start` returns [`StartError::Init`] with the reason.
    Stop(DownReason),
    /// Do not start; `start` returns [`StartError::Ignore`].
    Ignore,
}

/// What `handle_call` decided. `C` is the server's [`GenServer::Continue`].
#[derive(Debug)]
pub enum CallResult<R, C = ()> {
    /// Reply now.
    Reply(R),
    /// Reply now, then a timeout or a continue.
    ReplyThen(R, Then<C>),
    /// Reply later through the kept [`Caller`].
    NoReply,
    /// Reply later, and a timeout or a continue now.
    NoReplyThen(Then<C>),
    /// Stop with a reason; `terminate` runs, then the reply (if any) is sent.
    Stop(DownReason, Option<R>),
}

/// What `handle_cast`, `handle_info`, `handle_continue` and `handle_timeout` decided.
#[derive(Debug)]
pub enum Flow<C = ()> {
    /// Keep serving.
    Continue,
    /// Keep serving, with a timeout or a continue first.
    Then(Then<C>),
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
    /// Values for [`Then::Continue`], handed to `handle_continue` (use `()` if unused).
    type Continue: Send + 'static;

    /// Runs in the new server before `start` returns.
    fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult<Self::Continue> {
        InitResult::Ok
    }
    /// Handles a `call`.
    fn handle_call(
        &mut self,
        request: Self::Call,
        from: &Caller<Self::Reply>,
        ctx: &Ctx<Self>,
    ) -> CallResult<Self::Reply, Self::Continue>;
    /// Handles a `cast`.
    fn handle_cast(&mut self, _msg: Self::Cast, _ctx: &Ctx<Self>) -> Flow<Self::Continue> {
        Flow::Continue
    }
    /// Handles an `info` message or a signal.
    fn handle_info(&mut self, _info: Info<Self::Info>, _ctx: &Ctx<Self>) -> Flow<Self::Continue> {
        Flow::Continue
    }
    /// Runs after a callback returned [`Then::Continue`], before the next message.
    fn handle_continue(&mut self, _cont: Self::Continue, _ctx: &Ctx<Self>) -> Flow<Self::Continue> {
        Flow::Continue
    }
    /// Runs when a [`Then::Timeout`] passed with nothing arriving (OTP delivers `timeout`
    /// to `handle_info`; a callback of its own keeps `Info` to messages and signals).
    fn handle_timeout(&mut self, _ctx: &Ctx<Self>) -> Flow<Self::Continue> {
        Flow::Continue
    }
    /// Runs when the server stops (see the module doc for when).
    fn terminate(&mut self, _reason: &DownReason) {}
}

/// A server that answers requests of type `M` with replies of type `Reply` (one impl per
/// request type), asked with [`ServerRef::ask`]. See "Typed requests" in the module doc.
///
/// ```
/// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Handles};
/// struct Get;
/// struct Name;
/// struct Store { n: u64 }
/// impl GenServer for Store {
///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
///     fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> { CallResult::Reply(()) }
/// }
/// impl Handles<Get> for Store {
///     type Reply = u64;
///     fn handle(&mut self, _: Get, _: &Caller<u64>, _: &Ctx<Self>) -> CallResult<u64> { CallResult::Reply(self.n) }
/// }
/// impl Handles<Name> for Store {
///     type Reply = &'static str;
///     fn handle(&mut self, _: Name, _: &Caller<&'static str>, _: &Ctx<Self>) -> CallResult<&'static str> {
///         CallResult::Reply("store")
///     }
/// }
/// smarm::run(|| {
///     let s = gen_server::start(Store { n: 7 }).unwrap();
///     let n: u64 = s.ask(Get).unwrap();
///     assert_eq!(n, 7);
///     assert_eq!(s.ask(Name), Ok("store"));
/// });
/// ```
pub trait Handles<M: Send + 'static>: GenServer {
    /// The reply to an `M`.
    type Reply: Send + 'static;
    /// Handles one `M` (as `handle_call`: reply now, defer through `from`, or stop).
    fn handle(
        &mut self,
        msg: M,
        from: &Caller<<Self as Handles<M>>::Reply>,
        ctx: &Ctx<Self>,
    ) -> CallResult<<Self as Handles<M>>::Reply, Self::Continue>;
}

/// The running server as its callbacks see it: its own handle, pid and name. See "The
/// context" in the module doc.
pub struct Ctx<S: GenServer> {
    me: ServerRef<S>,
    name: Option<String>,
}

impl<S: GenServer> Ctx<S> {
    /// The server's own handle: send it to others, or send yourself a timed message.
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, Flow, GenServer, Info, InitResult};
    /// /// Counts its own ticks: init asks for one after 1 ms.
    /// struct Ticker { ticks: u32 }
    /// impl GenServer for Ticker {
    ///     type Call = (); type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    ///     fn init(&mut self, ctx: &Ctx<Self>) -> InitResult {
    ///         ctx.myself().info_after(Duration::from_millis(1), ());
    ///         InitResult::Ok
    ///     }
    ///     fn handle_call(&mut self, _: (), _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> {
    ///         CallResult::Reply(self.ticks)
    ///     }
    ///     fn handle_info(&mut self, _: Info<()>, _: &Ctx<Self>) -> Flow {
    ///         self.ticks += 1;
    ///         Flow::Continue
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let t = gen_server::start(Ticker { ticks: 0 }).unwrap();
    ///     while t.call(()) != Ok(1) {
    ///         smarm::yield_now();
    ///     }
    /// });
    /// ```
    pub fn myself(&self) -> &ServerRef<S> {
        &self.me
    }

    /// The server's pid.
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// struct WhoAmI;
    /// impl GenServer for WhoAmI {
    ///     type Call = (); type Reply = smarm::Pid; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<smarm::Pid>, ctx: &Ctx<Self>) -> CallResult<smarm::Pid> {
    ///         CallResult::Reply(ctx.pid())
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(WhoAmI).unwrap();
    ///     assert_eq!(s.call(()), Ok(s.pid()));
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.me.pid()
    }

    /// The name the server was started under ([`StartOpts::name`]), if any.
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
    /// struct Named;
    /// impl GenServer for Named {
    ///     type Call = (); type Reply = Option<String>; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<Option<String>>, ctx: &Ctx<Self>) -> CallResult<Option<String>> {
    ///         CallResult::Reply(ctx.name().map(str::to_owned))
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start_opts(Named, StartOpts { name: Some("named".into()), ..Default::default() }).unwrap();
    ///     assert_eq!(s.call(()), Ok(Some("named".to_string())));
    /// });
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl<S: GenServer> fmt::Debug for Ctx<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").field("pid", &self.pid()).field("name", &self.name).finish()
    }
}

/// A typed request ([`Handles`]), boxed for the mailbox: handles itself against the server.
type TypedCall<S> = Box<dyn FnOnce(&mut S, &Ctx<S>) -> Handled<<S as GenServer>::Continue> + Send>;

/// What a typed request's handler left for the loop to do.
enum Handled<C> {
    Flow(Flow<C>),
    /// Stop: `terminate` runs, then the reply (if any) is sent by the closure.
    Stop(DownReason, Option<Box<dyn FnOnce()>>),
}

/// A typed request in the mailbox (opaque).
#[doc(hidden)]
pub struct TypedRequest<S: GenServer>(TypedCall<S>);

/// Messages a server's mailbox carries.
pub enum Request<S: GenServer> {
    #[doc(hidden)]
    Call(S::Call, Caller<S::Reply>),
    #[doc(hidden)]
    Cast(S::Cast),
    #[doc(hidden)]
    Info(S::Info),
    #[doc(hidden)]
    Typed(TypedRequest<S>),
    #[doc(hidden)]
    Stop(DownReason, OneshotSender<()>),
}

/// A handle to a running server. Cheap to clone.
pub struct ServerRef<S: GenServer> {
    addr: Addr<Request<S>>,
    exit: WatchReceiver<Option<DownReason>>,
}

impl<S: GenServer> ServerRef<S> {
    /// The server's mailbox address (feature `cluster`: where its remote decoder is set).
    #[cfg(feature = "cluster")]
    pub(crate) fn mailbox_addr(&self) -> &Addr<Request<S>> {
        &self.addr
    }
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
///
/// ```
/// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
/// struct Echo;
/// impl GenServer for Echo {
///     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
///     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// }
/// smarm::run(|| assert_eq!(gen_server::start(Echo).unwrap().call(3), Ok(3)));
/// ```
pub fn start<S: GenServer>(server: S) -> Result<ServerRef<S>, StartError> {
    start_opts(server, StartOpts::default())
}

/// Starts a server linked to the caller.
///
/// ```
/// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
/// struct Echo;
/// impl GenServer for Echo {
///     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
///     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// }
/// smarm::run(|| {
///     let s = gen_server::start_link(Echo).unwrap();
///     assert_eq!(s.call(4), Ok(4));
///     s.stop(smarm::DownReason::Normal).unwrap(); // a normal exit does not kill the linked caller
/// });
/// ```
pub fn start_link<S: GenServer>(server: S) -> Result<ServerRef<S>, StartError> {
    start_opts(server, StartOpts { name: None, link: true })
}

/// Starts a server with options (name, link).
///
/// ```
/// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartError, StartOpts};
/// struct Echo;
/// impl GenServer for Echo {
///     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
///     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// }
/// smarm::run(|| {
///     let opts = || StartOpts { name: Some("echo".into()), ..Default::default() };
///     let s = gen_server::start_opts(Echo, opts()).unwrap();
///     assert_eq!(gen_server::start_opts(Echo, opts()).err(), Some(StartError::AlreadyStarted(s.pid())));
/// });
/// ```
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
    .map_err(StartError::Spawn)?;
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
    let ctx = Ctx { me: ServerRef { addr: mb.addr(), exit: exit_tx.subscribe() }, name };
    let cell = ExitCell { tx: exit_tx, reason: None };
    if let Some(n) = &ctx.name {
        if let Err(crate::process::RegisterError::NameTaken(p)) =
            crate::process::register(n.clone(), crate::task::current_pid())
        {
            let _ = ready.send(Err(StartError::AlreadyStarted(p)));
            return exit_with(cell, DownReason::Normal);
        }
    }
    // On an init failure the name is released before `start` learns of it.
    let release_name = || {
        if let Some(n) = &ctx.name {
            crate::process::unregister(n);
        }
    };
    let mut then = None;
    let failed = match catch_unwind(AssertUnwindSafe(|| server.init(&ctx))) {
        Ok(InitResult::Ok) => None,
        Ok(InitResult::Then(t)) => {
            then = Some(t);
            None
        }
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
    let reason = match serve_caught(&mut server, &mb, &ctx, parent, then, &mut terminated) {
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
    drop(ctx);
    exit_with(cell, reason);
}

/// [`run_loop`] under `catch_unwind`, in a small frame of its own: a crash's unwinder reads
/// the call-site table and CFA program of every frame it passes, and this one's are short
/// (inlined into `serve`, they would be all of `serve`'s).
#[inline(never)]
fn serve_caught<S: GenServer>(
    server: &mut S,
    mb: &Mailbox<Request<S>>,
    ctx: &Ctx<S>,
    parent: Option<Pid>,
    then: Option<Then<S::Continue>>,
    terminated: &mut bool,
) -> std::thread::Result<DownReason> {
    catch_unwind(AssertUnwindSafe(|| run_loop(server, mb, ctx, parent, then, terminated)))
}

/// Serves until the server stops; returns why. Sets `terminated` before it calls
/// `terminate`, so a panic in `terminate` is not followed by a second call. `then` is what
/// the last callback asked to happen before the next message.
fn run_loop<S: GenServer>(
    server: &mut S,
    mb: &Mailbox<Request<S>>,
    ctx: &Ctx<S>,
    parent: Option<Pid>,
    mut then: Option<Then<S::Continue>>,
    terminated: &mut bool,
) -> DownReason {
    let mut terminate = |server: &mut S, reason: &DownReason| {
        *terminated = true;
        server.terminate(reason);
    };
    loop {
        let env = match then.take() {
            None => mb.recv(),
            Some(t) => match after_callback(server, mb, ctx, t) {
                Ok(env) => env,
                Err(flow) => {
                    match flow {
                        Flow::Continue => {}
                        Flow::Then(t) => then = Some(t),
                        Flow::Stop(reason) => {
                            terminate(server, &reason);
                            return reason;
                        }
                    }
                    continue;
                }
            },
        };
        let flow = match env {
            Envelope::Msg(Request::Call(req, from)) => match server.handle_call(req, &from, ctx) {
                CallResult::Reply(r) => {
                    from.reply_into(r);
                    continue;
                }
                CallResult::ReplyThen(r, t) => {
                    from.reply_into(r);
                    Flow::Then(t)
                }
                CallResult::NoReply => continue,
                CallResult::NoReplyThen(t) => Flow::Then(t),
                CallResult::Stop(reason, reply) => {
                    terminate(server, &reason);
                    if let Some(r) = reply {
                        from.reply_into(r);
                    }
                    return reason;
                }
            },
            Envelope::Msg(Request::Cast(c)) => server.handle_cast(c, ctx),
            Envelope::Msg(Request::Info(i)) => server.handle_info(Info::Msg(i), ctx),
            Envelope::Msg(Request::Typed(TypedRequest(f))) => match f(server, ctx) {
                Handled::Flow(flow) => flow,
                Handled::Stop(reason, reply) => {
                    terminate(server, &reason);
                    if let Some(reply) = reply {
                        reply();
                    }
                    return reason;
                }
            },
            Envelope::Msg(Request::Stop(reason, done)) => {
                terminate(server, &reason);
                let _ = done.send(());
                return reason;
            }
            Envelope::Down(d) => server.handle_info(Info::Down(d), ctx),
            Envelope::Exit(x) => {
                // A trapping server whose parent (the `start_link` caller, e.g. its
                // supervisor) exits or asks it to stop terminates with that reason; exit
                // signals from anyone else are info.
                if Some(x.from) == parent {
                    terminate(server, &x.reason);
                    return x.reason;
                }
                server.handle_info(Info::Exit(x), ctx)
            }
        };
        match flow {
            Flow::Continue => {}
            Flow::Then(t) => then = Some(t),
            Flow::Stop(reason) => {
                terminate(server, &reason);
                return reason;
            }
        }
    }
}

/// Carries out a [`Then`]: runs `handle_continue` (returning its flow), or waits up to the
/// timeout for the next envelope (returning it) and runs `handle_timeout` if none came.
#[cold]
fn after_callback<S: GenServer>(
    server: &mut S,
    mb: &Mailbox<Request<S>>,
    ctx: &Ctx<S>,
    then: Then<S::Continue>,
) -> Result<Envelope<Request<S>>, Flow<S::Continue>> {
    match then {
        Then::Continue(c) => Err(server.handle_continue(c, ctx)),
        Then::Timeout(d) => {
            let deadline = crate::timer::deadline_after(Instant::now(), d);
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                if let Ok(env) = mb.recv_timeout(left) {
                    return Ok(env);
                }
                if left.is_zero() || Instant::now() >= deadline {
                    return Err(server.handle_timeout(ctx));
                }
            }
        }
    }
}

impl<S: GenServer> ServerRef<S> {
    /// The server's pid.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     assert_ne!(s.pid(), smarm::current_pid());
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// Calls the server with the default 5 s timeout.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| assert_eq!(gen_server::start(Echo).unwrap().call(5), Ok(5)));
    /// ```
    #[track_caller]
    pub fn call(&self, request: S::Call) -> Result<S::Reply, CallError> {
        self.call_timeout(request, DEFAULT_CALL_TIMEOUT)
    }

    /// Calls the server, waiting at most `timeout` for the reply.
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{self, CallError, CallResult, Caller, Ctx, GenServer};
    /// /// Never answers.
    /// struct Mute;
    /// impl GenServer for Mute {
    ///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> { CallResult::NoReply }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Mute).unwrap();
    ///     assert_eq!(s.call_timeout((), Duration::from_millis(5)), Err(CallError::Timeout));
    /// });
    /// ```
    #[track_caller]
    pub fn call_timeout(&self, request: S::Call, timeout: Duration) -> Result<S::Reply, CallError> {
        call_with(self.addr.pid(), WaitLimit::For(timeout), &self.exit, |from| {
            self.addr.try_send(Request::Call(request, from)).is_ok()
        })
    }

    /// Asks the server a typed request ([`Handles<M>`]), default 5 s timeout: the reply's
    /// type is the one the server declared for `M`.
    ///
    /// ```
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Handles};
    /// struct Len(String);
    /// struct Server;
    /// impl GenServer for Server {
    ///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> { CallResult::Reply(()) }
    /// }
    /// impl Handles<Len> for Server {
    ///     type Reply = usize;
    ///     fn handle(&mut self, m: Len, _: &Caller<usize>, _: &Ctx<Self>) -> CallResult<usize> { CallResult::Reply(m.0.len()) }
    /// }
    /// smarm::run(|| assert_eq!(gen_server::start(Server).unwrap().ask(Len("abc".into())), Ok(3)));
    /// ```
    #[track_caller]
    pub fn ask<M: Send + 'static>(&self, msg: M) -> Result<<S as Handles<M>>::Reply, CallError>
    where
        S: Handles<M>,
    {
        self.ask_timeout(msg, DEFAULT_CALL_TIMEOUT)
    }

    /// [`ask`](Self::ask) waiting at most `timeout` for the reply.
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Handles};
    /// struct Double(u32);
    /// struct Server;
    /// impl GenServer for Server {
    ///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> { CallResult::Reply(()) }
    /// }
    /// impl Handles<Double> for Server {
    ///     type Reply = u32;
    ///     fn handle(&mut self, m: Double, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(2 * m.0) }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Server).unwrap();
    ///     assert_eq!(s.ask_timeout(Double(4), Duration::from_secs(1)), Ok(8));
    /// });
    /// ```
    #[track_caller]
    pub fn ask_timeout<M: Send + 'static>(
        &self,
        msg: M,
        timeout: Duration,
    ) -> Result<<S as Handles<M>>::Reply, CallError>
    where
        S: Handles<M>,
    {
        call_with(self.addr.pid(), WaitLimit::For(timeout), &self.exit, |from| {
            let handle: TypedCall<S> =
                Box::new(move |server: &mut S, ctx: &Ctx<S>| match server.handle(msg, &from, ctx) {
                    CallResult::Reply(r) => {
                        from.reply_into(r);
                        Handled::Flow(Flow::Continue)
                    }
                    CallResult::ReplyThen(r, t) => {
                        from.reply_into(r);
                        Handled::Flow(Flow::Then(t))
                    }
                    CallResult::NoReply => Handled::Flow(Flow::Continue),
                    CallResult::NoReplyThen(t) => Handled::Flow(Flow::Then(t)),
                    CallResult::Stop(reason, reply) => {
                        Handled::Stop(reason, reply.map(|r| Box::new(move || from.reply_into(r)) as Box<dyn FnOnce()>))
                    }
                });
            self.addr.try_send(Request::Typed(TypedRequest(handle))).is_ok()
        })
    }

    /// Sends a call without waiting for the reply (OTP's `send_request`); take the reply
    /// later from the returned [`ReqId`]. A server that is not running makes the request
    /// fail with [`CallError::NoProc`] when its reply is taken.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut a = s.send_request(1);
    ///     let b = s.send_request(2);
    ///     assert_eq!(b.receive_response(Duration::from_secs(1)), Ok(2));
    ///     assert_eq!(a.wait_response(Duration::from_secs(1)), Ok(1));
    /// });
    /// ```
    pub fn send_request(&self, request: S::Call) -> ReqId<S::Reply> {
        let (from, rx) = oneshot_caller(crate::task::try_current_pid());
        let sent = self.addr.try_send(Request::Call(request, from)).is_ok();
        ReqId { rx, exit: self.exit.clone(), failed: if sent { None } else { Some(CallError::NoProc) }, spent: false }
    }

    /// Sends a call whose reply is taken from `collection`, under `label` (OTP's
    /// `send_request/4`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::ReqIdCollection;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut reqs = ReqIdCollection::new();
    ///     s.send_request_to(10, "ten", &mut reqs);
    ///     let (reply, label) = reqs.wait_response(Duration::from_secs(1)).unwrap();
    ///     assert_eq!((reply, label), (Ok(10), "ten"));
    /// });
    /// ```
    pub fn send_request_to<L>(&self, request: S::Call, label: L, collection: &mut ReqIdCollection<S::Reply, L>) {
        collection.add(self.send_request(request), label);
    }

    /// Sends a cast; always succeeds, even to a dead server.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Flow};
    /// struct Sum(u32);
    /// impl GenServer for Sum {
    ///     type Call = (); type Reply = u32; type Cast = u32; type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(self.0) }
    ///     fn handle_cast(&mut self, x: u32, _: &Ctx<Self>) -> Flow { self.0 += x; Flow::Continue }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Sum(0)).unwrap();
    ///     s.cast(2);
    ///     s.cast(3);
    ///     assert_eq!(s.call(()), Ok(5)); // the casts were handled before the call
    /// });
    /// ```
    pub fn cast(&self, msg: S::Cast) {
        self.addr.send(Request::Cast(msg));
    }

    /// Sends an info message (handled by `handle_info` as [`Info::Msg`]).
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Flow, Info};
    /// struct Last(u32);
    /// impl GenServer for Last {
    ///     type Call = (); type Reply = u32; type Cast = (); type Info = u32; type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(self.0) }
    ///     fn handle_info(&mut self, i: Info<u32>, _: &Ctx<Self>) -> Flow {
    ///         if let Info::Msg(x) = i { self.0 = x; }
    ///         Flow::Continue
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Last(0)).unwrap();
    ///     s.info(9);
    ///     assert_eq!(s.call(()), Ok(9));
    /// });
    /// ```
    pub fn info(&self, msg: S::Info) {
        self.addr.send(Request::Info(msg));
    }

    /// Sends a cast after `delay` (cancel with [`cancel_timer`](crate::cancel_timer)).
    ///
    /// ```
    /// use std::time::Duration;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Flow};
    /// struct Flag(bool);
    /// impl GenServer for Flag {
    ///     type Call = (); type Reply = bool; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<bool>, _: &Ctx<Self>) -> CallResult<bool> { CallResult::Reply(self.0) }
    ///     fn handle_cast(&mut self, _: (), _: &Ctx<Self>) -> Flow { self.0 = true; Flow::Continue }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Flag(false)).unwrap();
    ///     s.cast_after(Duration::from_millis(1), ());
    ///     while s.call(()) != Ok(true) {
    ///         smarm::yield_now();
    ///     }
    /// });
    /// ```
    pub fn cast_after(&self, delay: Duration, msg: S::Cast) -> TimerRef {
        crate::timer::send_after_addr(delay, &self.addr, Request::Cast(msg))
    }

    /// Sends an info message after `delay` (cancel with [`cancel_timer`](crate::cancel_timer)).
    ///
    /// ```
    /// use std::time::Duration;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, Flow, Info};
    /// struct Flag(bool);
    /// impl GenServer for Flag {
    ///     type Call = (); type Reply = bool; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), _: &Caller<bool>, _: &Ctx<Self>) -> CallResult<bool> { CallResult::Reply(self.0) }
    ///     fn handle_info(&mut self, _: Info<()>, _: &Ctx<Self>) -> Flow { self.0 = true; Flow::Continue }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Flag(false)).unwrap();
    ///     let t = s.info_after(Duration::from_secs(60), ());
    ///     assert!(smarm::cancel_timer(t).is_some());
    ///     assert_eq!(s.call(()), Ok(false));
    /// });
    /// ```
    pub fn info_after(&self, delay: Duration, msg: S::Info) -> TimerRef {
        crate::timer::send_after_addr(delay, &self.addr, Request::Info(msg))
    }

    /// Stops the server with `reason` (terminate runs) and waits until it has stopped, as
    /// OTP's `gen_server:stop`. Errors: [`CallError::NoProc`] if it was not running,
    /// [`CallError::CallingSelf`] from the server itself (nothing is sent), and
    /// [`CallError::Down`] with its exit reason if it ended otherwise first (or its
    /// `terminate` panicked).
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallError, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     assert_eq!(s.stop(smarm::DownReason::Normal), Ok(()));
    ///     assert_eq!(s.stop(smarm::DownReason::Normal), Err(CallError::NoProc));
    /// });
    /// ```
    pub fn stop(&self, reason: DownReason) -> Result<(), CallError> {
        stop_server(self.addr.pid(), &self.exit, |done| self.addr.try_send(Request::Stop(reason, done)).is_ok())
    }

    /// The server's exit reason, once it has stopped.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     assert_eq!(s.exit_reason(), None);
    ///     s.stop(smarm::DownReason::Shutdown).unwrap();
    ///     assert_eq!(s.exit_reason(), Some(smarm::DownReason::Shutdown));
    /// });
    /// ```
    pub fn exit_reason(&self) -> Option<DownReason> {
        exit_reason_now(&self.exit)
    }

    /// True while the server's mailbox exists.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     assert!(s.is_alive());
    ///     s.stop(smarm::DownReason::Normal).unwrap();
    ///     assert!(!s.is_alive());
    /// });
    /// ```
    pub fn is_alive(&self) -> bool {
        self.addr.is_alive()
    }
}

/// A call sent with [`ServerRef::send_request`], whose reply is still to be taken (OTP's
/// request id). The call is followed as a `call` is: if the server dies, the reply is
/// [`CallError::Down`] with its reason, at once.
pub struct ReqId<R> {
    rx: OneshotReceiver<R>,
    exit: WatchReceiver<Option<DownReason>>,
    /// The request could not be sent.
    failed: Option<CallError>,
    /// The outcome was already taken.
    spent: bool,
}

impl<R> fmt::Debug for ReqId<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReqId").field("spent", &self.spent).finish_non_exhaustive()
    }
}

impl<R: Send> ReqId<R> {
    /// Waits at most `timeout` for the reply; on [`CallError::Timeout`] the request stays
    /// active and can be waited for again (OTP's `wait_response`). Once an outcome (a reply
    /// or an error other than `Timeout`) was returned, later waits return `Timeout` at once:
    /// nothing more will come (OTP would wait out the time).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{self, CallError, CallResult, Caller, Ctx, GenServer};
    /// /// Answers a call only when the next one comes.
    /// struct Late(Option<smarm::gen_server::ReplyTo<u32>>);
    /// impl GenServer for Late {
    ///     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, x: u32, from: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> {
    ///         if let Some(prev) = self.0.take() { prev.reply(x); }
    ///         self.0 = Some(from.defer());
    ///         CallResult::NoReply
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Late(None)).unwrap();
    ///     let mut first = s.send_request(1);
    ///     assert_eq!(first.wait_response(Duration::from_millis(1)), Err(CallError::Timeout));
    ///     let _second = s.send_request(2);
    ///     assert_eq!(first.wait_response(Duration::from_secs(1)), Ok(2));
    /// });
    /// ```
    pub fn wait_response(&mut self, timeout: Duration) -> Result<R, CallError> {
        self.wait(WaitLimit::For(timeout))
    }

    /// Waits at most `timeout` for the reply; on timeout the request is abandoned (a late
    /// reply is discarded), as OTP's `receive_response`.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     assert_eq!(s.send_request(6).receive_response(Duration::from_secs(1)), Ok(6));
    /// });
    /// ```
    pub fn receive_response(mut self, timeout: Duration) -> Result<R, CallError> {
        self.wait(WaitLimit::For(timeout))
    }

    /// The reply if it has arrived (OTP's `check_response`; the reply does not pass through
    /// the caller's mailbox here, so this polls the request instead of matching a message):
    /// `None` while none came, else the outcome, once.
    ///
    /// ```
    /// use std::time::Duration;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut r = s.send_request(7);
    ///     let got = loop {
    ///         if let Some(got) = r.check_response() { break got; }
    ///         smarm::yield_now();
    ///     };
    ///     assert_eq!(got, Ok(7));
    ///     assert_eq!(r.check_response(), None);
    /// });
    /// ```
    pub fn check_response(&mut self) -> Option<Result<R, CallError>> {
        if self.spent {
            return None;
        }
        if let Some(e) = self.failed.take() {
            self.spent = true;
            return Some(Err(e));
        }
        match self.rx.try_recv() {
            Ok(r) => {
                self.spent = true;
                Some(Ok(r))
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => {
                self.spent = true;
                Some(Err(server_gone(WaitLimit::For(Duration::ZERO), &self.exit)))
            }
        }
    }

    fn wait(&mut self, mut limit: WaitLimit) -> Result<R, CallError> {
        if self.spent {
            return Err(CallError::Timeout);
        }
        if let Some(e) = self.failed.take() {
            self.spent = true;
            return Err(e);
        }
        let got = match self.rx.recv_within(&mut limit) {
            Ok(r) => Ok(r),
            Err(crate::channel::RecvTimeoutError::Timeout) => return Err(CallError::Timeout),
            Err(crate::channel::RecvTimeoutError::Disconnected) => Err(server_gone(limit, &self.exit)),
        };
        self.spent = true;
        got
    }

    /// The outcome of a request whose receiver is ready (for [`ReqIdCollection`]).
    fn ready_outcome(&mut self, limit: WaitLimit) -> Result<R, CallError> {
        match self.check_response() {
            Some(Err(CallError::Timeout)) | None => self.wait(limit),
            Some(got) => got,
        }
    }
}

/// Why a [`ReqIdCollection`] gave no response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoResponse {
    /// The collection holds no request (OTP's `no_request`).
    Empty,
    /// No reply within the timeout.
    Timeout,
    /// No reply has arrived yet ([`ReqIdCollection::check_response`]).
    Pending,
}

impl fmt::Display for NoResponse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NoResponse::Empty => "no request in the collection",
            NoResponse::Timeout => "no response within the timeout",
            NoResponse::Pending => "no response yet",
        })
    }
}
impl std::error::Error for NoResponse {}

/// Requests awaited together, each with a label (OTP 25's request id collections). A
/// response is returned with its label and its request leaves the collection (OTP's
/// `Delete = true`; an answered request has nothing more to give).
pub struct ReqIdCollection<R, L> {
    reqs: Vec<(ReqId<R>, L)>,
}

impl<R, L> Default for ReqIdCollection<R, L> {
    fn default() -> Self {
        ReqIdCollection { reqs: Vec::new() }
    }
}

impl<R, L: fmt::Debug> fmt::Debug for ReqIdCollection<R, L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.reqs.iter().map(|(_, l)| l)).finish()
    }
}

impl<R: Send, L> ReqIdCollection<R, L> {
    /// An empty collection (OTP's `reqids_new`).
    ///
    /// ```
    /// let c = smarm::gen_server::ReqIdCollection::<u32, &str>::new();
    /// assert!(c.is_empty());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a request under `label` (OTP's `reqids_add`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::ReqIdCollection;
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut c = ReqIdCollection::new();
    ///     c.add(s.send_request(1), 'a');
    ///     assert_eq!(c.len(), 1);
    ///     assert_eq!(c.receive_response(Duration::from_secs(1)), Ok((Ok(1), 'a')));
    /// });
    /// ```
    pub fn add(&mut self, req: ReqId<R>, label: L) {
        self.reqs.push((req, label));
    }

    /// How many requests it holds (OTP's `reqids_size`).
    ///
    /// ```
    /// assert_eq!(smarm::gen_server::ReqIdCollection::<(), ()>::new().len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        self.reqs.len()
    }

    /// True if it holds no request.
    ///
    /// ```
    /// assert!(smarm::gen_server::ReqIdCollection::<(), ()>::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.reqs.is_empty()
    }

    /// The requests and their labels (OTP's `reqids_to_list`).
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, ReqIdCollection};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut c = ReqIdCollection::new();
    ///     s.send_request_to(1, "one", &mut c);
    ///     let labels: Vec<_> = c.into_vec().into_iter().map(|(_, l)| l).collect();
    ///     assert_eq!(labels, ["one"]);
    /// });
    /// ```
    pub fn into_vec(self) -> Vec<(ReqId<R>, L)> {
        self.reqs
    }

    /// Waits at most `timeout` for any request's outcome and returns it with its label; on
    /// timeout every request stays (OTP's `wait_response/3`). A request whose server dropped
    /// it without replying (and lives on) comes back as `(Err(CallError::Timeout), label)`
    /// once the timeout has passed, instead of staying in the collection to time out again
    /// (OTP leaves it there; here it is known that no reply will come).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{NoResponse, ReqIdCollection};
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let (a, b) = (gen_server::start(Echo).unwrap(), gen_server::start(Echo).unwrap());
    ///     let mut c = ReqIdCollection::new();
    ///     a.send_request_to(1, "a", &mut c);
    ///     b.send_request_to(2, "b", &mut c);
    ///     let mut got = vec![];
    ///     while let Ok((reply, label)) = c.wait_response(Duration::from_secs(1)) {
    ///         got.push((label, reply.unwrap()));
    ///     }
    ///     got.sort();
    ///     assert_eq!(got, [("a", 1), ("b", 2)]);
    ///     assert_eq!(c.wait_response(Duration::from_secs(1)), Err(NoResponse::Empty));
    /// });
    /// ```
    pub fn wait_response(&mut self, timeout: Duration) -> Result<(Result<R, CallError>, L), NoResponse> {
        self.wait_any(crate::timer::deadline_after(Instant::now(), timeout))
    }

    /// As [`wait_response`](Self::wait_response), but on timeout every request is abandoned
    /// and the collection emptied (OTP's `receive_response/3`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_server::{NoResponse, ReqIdCollection};
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// /// Holds every call, never answering.
    /// struct Holds(Vec<gen_server::ReplyTo<()>>);
    /// impl GenServer for Holds {
    ///     type Call = (); type Reply = (); type Cast = (); type Info = (); type Continue = ();
    ///     fn handle_call(&mut self, _: (), from: &Caller<()>, _: &Ctx<Self>) -> CallResult<()> {
    ///         self.0.push(from.defer());
    ///         CallResult::NoReply
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Holds(vec![])).unwrap();
    ///     let mut c = ReqIdCollection::new();
    ///     s.send_request_to((), 1, &mut c);
    ///     assert_eq!(c.receive_response(Duration::from_millis(2)), Err(NoResponse::Timeout));
    ///     assert!(c.is_empty());
    /// });
    /// ```
    pub fn receive_response(&mut self, timeout: Duration) -> Result<(Result<R, CallError>, L), NoResponse> {
        let got = self.wait_response(timeout);
        if matches!(got, Err(NoResponse::Timeout)) {
            self.reqs.clear();
        }
        got
    }

    /// The outcome of any request that has one, with its label, without waiting (OTP's
    /// `check_response/3`): [`NoResponse::Pending`] if none has.
    ///
    /// ```
    /// use smarm::gen_server::{NoResponse, ReqIdCollection};
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let mut c = ReqIdCollection::new();
    ///     s.send_request_to(3, (), &mut c);
    ///     let got = loop {
    ///         match c.check_response() {
    ///             Err(NoResponse::Pending) => smarm::yield_now(),
    ///             other => break other,
    ///         }
    ///     };
    ///     assert_eq!(got, Ok((Ok(3), ())));
    /// });
    /// ```
    pub fn check_response(&mut self) -> Result<(Result<R, CallError>, L), NoResponse> {
        if self.reqs.is_empty() {
            return Err(NoResponse::Empty);
        }
        for i in 0..self.reqs.len() {
            if let Some(got) = self.reqs[i].0.check_response() {
                let (_, label) = self.reqs.swap_remove(i);
                return Ok((got, label));
            }
        }
        Err(NoResponse::Pending)
    }

    fn wait_any(&mut self, deadline: Instant) -> Result<(Result<R, CallError>, L), NoResponse> {
        if self.reqs.is_empty() {
            return Err(NoResponse::Empty);
        }
        // A request that failed to send, or is spent, has an outcome without its receiver.
        if let Some(i) = self.reqs.iter().position(|(r, _)| r.failed.is_some() || r.spent) {
            let (mut r, label) = self.reqs.swap_remove(i);
            return Ok((r.ready_outcome(WaitLimit::Until(deadline)), label));
        }
        let ready = {
            let arms: Vec<&dyn crate::channel::Selectable> =
                self.reqs.iter().map(|(r, _)| &r.rx as &dyn crate::channel::Selectable).collect();
            crate::channel::select_ready(&arms, Some(deadline))
        };
        let Some(i) = ready else { return Err(NoResponse::Timeout) };
        let (mut r, label) = self.reqs.swap_remove(i);
        Ok((r.ready_outcome(WaitLimit::Until(deadline)), label))
    }
}

/// Calls the server registered under `name` (default 5 s timeout); [`CallError::NoProc`]
/// if no server of type `S` runs under that name. Looks the name up on every call; keep a
/// [`ServerRef`] (from [`named`]) on hot paths.
///
/// ```
/// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts, CallError};
/// # struct Echo;
/// # impl GenServer for Echo {
/// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
/// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// # }
/// smarm::run(|| {
///     gen_server::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_server::call_named::<Echo>("echo", 1), Ok(1));
///     assert_eq!(gen_server::call_named::<Echo>("nobody", 1), Err(CallError::NoProc));
/// });
/// ```
pub fn call_named<S: GenServer>(name: &str, request: S::Call) -> Result<S::Reply, CallError> {
    call_named_timeout::<S>(name, request, DEFAULT_CALL_TIMEOUT)
}

/// [`call_named`] waiting at most `timeout` for the reply.
///
/// ```
/// use std::time::Duration;
/// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
/// # struct Echo;
/// # impl GenServer for Echo {
/// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
/// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// # }
/// smarm::run(|| {
///     gen_server::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_server::call_named_timeout::<Echo>("echo", 2, Duration::from_secs(1)), Ok(2));
/// });
/// ```
pub fn call_named_timeout<S: GenServer>(
    name: &str,
    request: S::Call,
    timeout: Duration,
) -> Result<S::Reply, CallError> {
    named::<S>(name).ok_or_else(no_proc)?.call_timeout(request, timeout)
}

/// Casts to the server registered under `name`; [`CallError::NoProc`] if no server of type
/// `S` runs under that name (OTP's `cast` to an unknown name is silent; an error here costs
/// nothing to ignore and says what happened).
///
/// ```
/// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts, Flow, CallError};
/// struct Sum(u32);
/// impl GenServer for Sum {
///     type Call = (); type Reply = u32; type Cast = u32; type Info = (); type Continue = ();
///     fn handle_call(&mut self, _: (), _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(self.0) }
///     fn handle_cast(&mut self, x: u32, _: &Ctx<Self>) -> Flow { self.0 += x; Flow::Continue }
/// }
/// smarm::run(|| {
///     gen_server::start_opts(Sum(0), StartOpts { name: Some("sum".into()), ..Default::default() }).unwrap();
///     gen_server::cast_named::<Sum>("sum", 4).unwrap();
///     assert_eq!(gen_server::call_named::<Sum>("sum", ()), Ok(4));
///     assert_eq!(gen_server::cast_named::<Sum>("nobody", 4), Err(CallError::NoProc));
/// });
/// ```
pub fn cast_named<S: GenServer>(name: &str, msg: S::Cast) -> Result<(), CallError> {
    named::<S>(name).ok_or_else(no_proc)?.cast(msg);
    Ok(())
}

/// A [`ServerRef`] for the server of type `S` registered under `name`, if one runs.
///
/// ```
/// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, StartOpts};
/// # struct Echo;
/// # impl GenServer for Echo {
/// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
/// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
/// # }
/// smarm::run(|| {
///     let s = gen_server::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_server::named::<Echo>("echo").map(|r| r.pid()), Some(s.pid()));
/// });
/// ```
pub fn named<S: GenServer>(name: &str) -> Option<ServerRef<S>> {
    ServerRef::from_addr(crate::task::whereis_addr::<Request<S>>(name).ok()?)
}

impl<S: GenServer> ServerRef<S> {
    /// The [`ServerRef`] of the live server `pid` of type `S` in the caller's runtime (a `pg`
    /// member, a supervisor's child), if it is one.
    ///
    /// ```
    /// # use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, ServerRef};
    /// # struct Echo;
    /// # impl GenServer for Echo {
    /// #     type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Continue = ();
    /// #     fn handle_call(&mut self, x: u32, _: &Caller<u32>, _: &Ctx<Self>) -> CallResult<u32> { CallResult::Reply(x) }
    /// # }
    /// smarm::run(|| {
    ///     let s = gen_server::start(Echo).unwrap();
    ///     let again = ServerRef::<Echo>::from_pid(s.pid()).unwrap();
    ///     assert_eq!(again.call(7), Ok(7));
    ///     assert!(ServerRef::<Echo>::from_pid(smarm::current_pid()).is_none()); // not a server
    /// });
    /// ```
    pub fn from_pid(pid: Pid) -> Option<ServerRef<S>> {
        Self::from_addr(Addr::from_pid(pid).ok()?)
    }

    fn from_addr(addr: Addr<Request<S>>) -> Option<ServerRef<S>> {
        let ext = crate::process::ext_of(addr.pid())?;
        let exit = ext.downcast_ref::<WatchReceiver<Option<DownReason>>>()?.clone();
        Some(ServerRef { addr, exit })
    }
}
