//! `gen_statem`: a state machine actor with OTP's event handling.
//!
//! Implement [`GenStatem`]: `init` returns the initial state; `handle_event(state, event)`
//! returns a [`Transition`]: keep the state or go to another, plus actions (reply, postpone,
//! timeouts, inserted events). This is OTP's `handle_event_function` mode; the
//! `state_functions` mode is the same with a `match state` at the top of `handle_event`
//! dispatching to one method per state (see the doc example).
//!
//! Semantics (SEMANTICS.md, "gen_statem"):
//! - state enter: if [`GenStatem::STATE_ENTER`] is true, every state change calls
//!   `handle_event(new_state, Enter(old_state))` first. As in OTP, that call may keep the
//!   state, stop, and set timeouts; a state change, `postpone`, `next_event` or `reply` there
//!   stops the machine with `Custom("gen_statem: <action> in a state enter call")`;
//! - `postpone`: the event is retried after the next state change, oldest first;
//! - an event timeout is cancelled by any event; a state timeout by a state change; a named
//!   generic timeout only by re-arming or cancelling it;
//! - inserted events (`next_event`) run before postponed events and before queued
//!   external events, in the order they were inserted;
//! - `call` has an infinite default timeout.
//!
//! Timeouts are deadlines the machine's own loop waits for (its receive carries the
//! earliest one), so they need no timer messages and vanish with the machine.
//!
//! ```
//! use smarm::gen_statem::{self, Event, GenStatem, Transition};
//! #[derive(Clone, Debug, PartialEq)]
//! enum Door { Locked, Open }
//! struct Lock { code: u32 }
//! impl GenStatem for Lock {
//!     type State = Door; type Call = u32; type Reply = bool; type Cast = (); type Info = ();
//!     fn init(&mut self) -> Result<Door, smarm::DownReason> { Ok(Door::Locked) }
//!     fn handle_event(&mut self, state: &Door, event: &Event<Self>) -> Transition<Self> {
//!         match (state, event) {
//!             (Door::Locked, Event::Call(code, _)) if *code == self.code => Transition::to(Door::Open).reply(true),
//!             (_, Event::Call(..)) => Transition::keep().reply(false),
//!             _ => Transition::keep(),
//!         }
//!     }
//! }
//! smarm::run(|| {
//!     let m = gen_statem::start(Lock { code: 42 }).unwrap();
//!     assert_eq!(m.call(1), Ok(false));
//!     assert_eq!(m.call(42), Ok(true));
//! });
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::behaviour::{call_with, exit_reason_now, exit_with, stop_server, CallError, ExitCell, From, StartError};
use crate::channel::{oneshot, watch, OneshotSender, WatchReceiver, WatchSender};
use crate::gen_server::Info;
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, DownReason};
use crate::slot_state::Pid;
use crate::timer::deadline_after;

/// A state machine's behaviour.
pub trait GenStatem: Send + Sized + 'static {
    /// The state.
    type State: Clone + PartialEq + Send + fmt::Debug + 'static;
    /// Requests for `call`.
    type Call: Send + 'static;
    /// Replies to `call`.
    type Reply: Send + 'static;
    /// Messages for `cast` (and inserted `next_event`s).
    type Cast: Send + 'static;
    /// Messages for `info`.
    type Info: Send + 'static;

    /// Call `handle_event(new, Enter(old))` on every state change (and once for the initial
    /// state, with `old == new`). That call may keep the state, stop, and set timeouts; a
    /// state change, `postpone`, `next_event` or `reply` in it stops the machine (as in OTP).
    const STATE_ENTER: bool = false;

    /// Runs in the new machine before `start` returns; returns the initial state.
    fn init(&mut self) -> Result<Self::State, DownReason>;
    /// Handles one event in `state`.
    fn handle_event(&mut self, state: &Self::State, event: &Event<Self>) -> Transition<Self>;
    /// Runs when the machine stops (not on `kill`).
    fn terminate(&mut self, _reason: &DownReason, _state: &Self::State) {}
}

/// An event delivered to `handle_event`.
pub enum Event<M: GenStatem> {
    /// A `call`; answer with [`Transition::reply`] or keep the [`From`] (`from.defer()`).
    Call(M::Call, From<M::Reply>),
    /// A `cast`.
    Cast(M::Cast),
    /// An `info` message or a signal.
    Info(Info<M::Info>),
    /// Entered this state from the given one (only with `STATE_ENTER`).
    Enter(M::State),
    /// The event timeout fired.
    EventTimeout,
    /// The state timeout fired.
    StateTimeout,
    /// The named generic timeout fired.
    Timeout(String),
    /// An event inserted with [`Transition::next_event`].
    Internal(M::Cast),
}

impl<M: GenStatem> fmt::Debug for Event<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Event::Call(..) => f.write_str("Call(..)"),
            Event::Cast(_) => f.write_str("Cast(..)"),
            Event::Info(_) => f.write_str("Info(..)"),
            Event::Enter(s) => write!(f, "Enter({s:?})"),
            Event::EventTimeout => f.write_str("EventTimeout"),
            Event::StateTimeout => f.write_str("StateTimeout"),
            Event::Timeout(n) => write!(f, "Timeout({n:?})"),
            Event::Internal(_) => f.write_str("Internal(..)"),
        }
    }
}

enum Next<S> {
    Keep,
    To(S),
    Stop(DownReason),
}

/// The result of handling an event: the next state and actions.
pub struct Transition<M: GenStatem> {
    next: Next<M::State>,
    reply: Option<M::Reply>,
    postpone: bool,
    event_timeout: Option<Duration>,
    state_timeout: Option<Duration>,
    timeouts: Vec<(String, Option<Duration>)>,
    inserted: Vec<M::Cast>,
}

impl<M: GenStatem> Transition<M> {
    fn new(next: Next<M::State>) -> Self {
        Transition {
            next,
            reply: None,
            postpone: false,
            event_timeout: None,
            state_timeout: None,
            timeouts: Vec::new(),
            inserted: Vec::new(),
        }
    }
    /// Stay in the current state.
    pub fn keep() -> Self {
        Self::new(Next::Keep)
    }
    /// Go to `state` (a change only if it differs from the current one).
    pub fn to(state: M::State) -> Self {
        Self::new(Next::To(state))
    }
    /// Stop with `reason` (`terminate` runs; a reply action is sent after it).
    pub fn stop(reason: DownReason) -> Self {
        Self::new(Next::Stop(reason))
    }
    /// Reply to the call being handled.
    pub fn reply(mut self, reply: M::Reply) -> Self {
        self.reply = Some(reply);
        self
    }
    /// Retry this event after the next state change.
    pub fn postpone(mut self) -> Self {
        self.postpone = true;
        self
    }
    /// Deliver `EventTimeout` after `d` unless another event arrives first.
    pub fn event_timeout(mut self, d: Duration) -> Self {
        self.event_timeout = Some(d);
        self
    }
    /// Deliver `StateTimeout` after `d` unless the state changes first.
    pub fn state_timeout(mut self, d: Duration) -> Self {
        self.state_timeout = Some(d);
        self
    }
    /// Deliver `Timeout(name)` after `d` (re-arming replaces a pending one).
    pub fn timeout(mut self, name: impl Into<String>, d: Duration) -> Self {
        self.timeouts.push((name.into(), Some(d)));
        self
    }
    /// Cancel the named generic timeout.
    pub fn cancel_timeout(mut self, name: impl Into<String>) -> Self {
        self.timeouts.push((name.into(), None));
        self
    }
    /// Insert an event to be handled before any queued one.
    pub fn next_event(mut self, event: M::Cast) -> Self {
        self.inserted.push(event);
        self
    }
}

/// Messages a machine's mailbox carries.
#[doc(hidden)]
pub enum Request<M: GenStatem> {
    Call(M::Call, From<M::Reply>),
    Cast(M::Cast),
    Info(M::Info),
    Stop(DownReason, OneshotSender<()>),
}

/// A handle to a running state machine. Cheap to clone.
pub struct StatemRef<M: GenStatem> {
    addr: Addr<Request<M>>,
    exit: WatchReceiver<Option<DownReason>>,
}

impl<M: GenStatem> Clone for StatemRef<M> {
    fn clone(&self) -> Self {
        StatemRef { addr: self.addr.clone(), exit: self.exit.clone() }
    }
}

impl<M: GenStatem> fmt::Debug for StatemRef<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StatemRef({})", self.addr.pid())
    }
}

/// Starts a machine; returns once `init` has finished.
pub fn start<M: GenStatem>(machine: M) -> Result<StatemRef<M>, StartError> {
    start_opts(machine, crate::behaviour::StartOpts::default())
}

/// Starts a machine with options (name, link).
pub fn start_opts<M: GenStatem>(machine: M, opts: crate::behaviour::StartOpts) -> Result<StatemRef<M>, StartError> {
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
        move |mb: Mailbox<Request<M>>| run(machine, mb, name, parent, exit_tx, ready_tx),
        parent,
    )
    .map_err(|e| StartError::Spawn(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(StatemRef { addr, exit: exit_rx }),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(StartError::Init(exit_rx.clone().get().unwrap_or(DownReason::Killed))),
    }
}

fn run<M: GenStatem>(
    mut machine: M,
    mb: Mailbox<Request<M>>,
    name: Option<String>,
    parent: Option<Pid>,
    exit_tx: WatchSender<Option<DownReason>>,
    ready: OneshotSender<Result<(), StartError>>,
) {
    let cell = ExitCell { tx: exit_tx, reason: None };
    if let Some(n) = &name {
        if let Err(crate::process::RegisterError::NameTaken(p)) =
            crate::process::register(n.clone(), crate::task::current_pid())
        {
            let _ = ready.send(Err(StartError::AlreadyStarted(p)));
            return exit_with(cell, DownReason::Normal);
        }
    }
    let init = catch_unwind(AssertUnwindSafe(|| machine.init())).unwrap_or_else(|p| Err(reason_from_payload(p)));
    let state = match init {
        Ok(s) => s,
        Err(r) => {
            if let Some(n) = &name {
                crate::process::unregister(n);
            }
            // The starter learns of the failure from `start_link`'s return value. A trapping
            // starter also gets the exit signal (as in OTP); a non-trapping one is not killed by
            // it: the link is dropped before exiting.
            if let Some(p) = parent.filter(|p| !crate::process::traps_exits(*p)) {
                crate::process::unlink(p);
            }
            let _ = ready.send(Err(StartError::Init(r.clone())));
            return exit_with(cell, r);
        }
    };
    let _ = ready.send(Ok(()));
    let mut engine = Engine {
        state,
        postponed: VecDeque::new(),
        inserted: VecDeque::new(),
        event_deadline: None,
        state_deadline: None,
        named: HashMap::new(),
        parent,
    };
    let reason = match catch_unwind(AssertUnwindSafe(|| engine.run(&mut machine, &mb))) {
        Ok(reason) => reason,
        Err(payload) => {
            let reason = reason_from_payload(payload);
            if matches!(reason, DownReason::Panic(_)) {
                let _ = catch_unwind(AssertUnwindSafe(|| machine.terminate(&reason, &engine.state)));
            }
            reason
        }
    };
    exit_with(cell, reason);
}

struct Engine<M: GenStatem> {
    state: M::State,
    postponed: VecDeque<Event<M>>,
    inserted: VecDeque<Event<M>>,
    event_deadline: Option<Instant>,
    state_deadline: Option<Instant>,
    named: HashMap<String, Instant>,
    /// The `start_link` caller: its exit signals stop a trapping machine.
    parent: Option<Pid>,
}

/// What a state-enter call's transition does that OTP forbids there, if anything: it may
/// keep the state (or name the same one), stop, and set timeouts; it may not change the
/// state, postpone, insert events, or reply (there is no event to postpone or answer).
fn bad_enter_action<M: GenStatem>(t: &Transition<M>, state: &M::State) -> Option<&'static str> {
    if matches!(&t.next, Next::To(s) if s != state) {
        Some("a state change")
    } else if t.postpone {
        Some("postpone")
    } else if !t.inserted.is_empty() {
        Some("next_event")
    } else if t.reply.is_some() {
        Some("reply")
    } else {
        None
    }
}

enum Got<M: GenStatem> {
    Event(Event<M>),
    Stop(DownReason, OneshotSender<()>),
    /// The parent exited or asked the machine to stop.
    ParentExit(DownReason),
    /// A wait ended without an event (spurious): look again.
    Nothing,
}

impl<M: GenStatem> Engine<M> {
    fn run(&mut self, m: &mut M, mb: &Mailbox<Request<M>>) -> DownReason {
        if M::STATE_ENTER {
            let s = self.state.clone();
            let t = m.handle_event(&self.state, &Event::Enter(s));
            if let Some(r) = self.apply(t, None, true) {
                m.terminate(&r, &self.state);
                return r;
            }
        }
        loop {
            let event = match self.next_event(mb) {
                Got::Event(e) => e,
                Got::Stop(reason, ack) => {
                    m.terminate(&reason, &self.state);
                    let _ = ack.send(());
                    return reason;
                }
                Got::ParentExit(reason) => {
                    m.terminate(&reason, &self.state);
                    return reason;
                }
                Got::Nothing => continue,
            };
            let t = m.handle_event(&self.state, &event);
            if let Next::Stop(reason) = &t.next {
                let reason = reason.clone();
                // terminate first, then the reply (as in gen_server).
                m.terminate(&reason, &self.state);
                if let (Some(reply), Event::Call(_, from)) = (t.reply, &event) {
                    from.reply_now(reply);
                }
                return reason;
            }
            let old = self.state.clone();
            let changed = matches!(&t.next, Next::To(s) if *s != old);
            let postpone = t.postpone;
            if let Some(r) = self.apply(t, Some(&event), false) {
                m.terminate(&r, &self.state);
                return r;
            }
            if postpone {
                self.postponed.push_back(event);
            }
            if changed {
                // Postponed events are retried after a state change, oldest first, behind the
                // events this transition inserted and ahead of queued external ones.
                self.inserted.extend(self.postponed.drain(..));
                if M::STATE_ENTER {
                    let t = m.handle_event(&self.state, &Event::Enter(old));
                    if let Some(r) = self.apply(t, None, true) {
                        m.terminate(&r, &self.state);
                        return r;
                    }
                }
            }
        }
    }

    /// Applies a transition's state and actions. Returns a stop reason if it stops.
    fn apply(&mut self, t: Transition<M>, event: Option<&Event<M>>, enter: bool) -> Option<DownReason> {
        if enter {
            if let Some(bad) = bad_enter_action(&t, &self.state) {
                // OTP: `bad_state_enter_action_from_state_function`; the machine stops.
                return Some(DownReason::Custom(format!("gen_statem: {bad} in a state enter call")));
            }
        }
        let now = Instant::now();
        if let (Some(reply), Some(Event::Call(_, from))) = (t.reply, event) {
            from.reply_now(reply);
        }
        match t.next {
            Next::To(s) => {
                if s != self.state {
                    // A state change cancels the state timeout (before this transition's
                    // own actions may arm a new one).
                    self.state_deadline = None;
                }
                self.state = s;
            }
            Next::Stop(r) => return Some(r),
            _ => {}
        }
        if let Some(d) = t.event_timeout {
            self.event_deadline = Some(deadline_after(now, d));
        }
        if let Some(d) = t.state_timeout {
            self.state_deadline = Some(deadline_after(now, d));
        }
        for (name, d) in t.timeouts {
            match d {
                Some(d) => {
                    self.named.insert(name, deadline_after(now, d));
                }
                None => {
                    self.named.remove(&name);
                }
            }
        }
        // Inserted events run first, in the order given.
        for (i, e) in t.inserted.into_iter().enumerate() {
            self.inserted.insert(i, Event::Internal(e));
        }
        None
    }

    /// The next event: an inserted one, a queued external one, or a due timeout.
    fn next_event(&mut self, mb: &Mailbox<Request<M>>) -> Got<M> {
        if let Some(e) = self.inserted.pop_front() {
            self.event_deadline = None;
            return Got::Event(e);
        }
        let named_next = self.named.iter().min_by_key(|(_, t)| **t).map(|(n, t)| (n.clone(), *t));
        let deadline = [self.event_deadline, self.state_deadline, named_next.as_ref().map(|(_, t)| *t)]
            .into_iter()
            .flatten()
            .min();
        let got = match deadline {
            Some(d) => mb.recv_timeout(d.saturating_duration_since(Instant::now())),
            None => Some(mb.recv()),
        };
        if let Some(env) = got {
            // Any event cancels the event timeout.
            self.event_deadline = None;
            return Got::Event(match env {
                Envelope::Msg(Request::Call(c, f)) => Event::Call(c, f),
                Envelope::Msg(Request::Cast(c)) => Event::Cast(c),
                Envelope::Msg(Request::Info(i)) => Event::Info(Info::Msg(i)),
                Envelope::Msg(Request::Stop(reason, ack)) => return Got::Stop(reason, ack),
                Envelope::Down(d) => Event::Info(Info::Down(d)),
                // The parent's exit signal stops a trapping machine (as in gen_server).
                Envelope::Exit(x) if Some(x.from) == self.parent => return Got::ParentExit(x.reason),
                Envelope::Exit(x) => Event::Info(Info::Exit(x)),
            });
        }
        let now = Instant::now();
        if self.event_deadline.is_some_and(|t| t <= now) {
            self.event_deadline = None;
            return Got::Event(Event::EventTimeout);
        }
        // A timeout event is an event too: it cancels the event timeout (as in OTP).
        if self.state_deadline.is_some_and(|t| t <= now) {
            self.state_deadline = None;
            self.event_deadline = None;
            return Got::Event(Event::StateTimeout);
        }
        if let Some((name, t)) = named_next {
            if t <= now {
                self.named.remove(&name);
                self.event_deadline = None;
                return Got::Event(Event::Timeout(name));
            }
        }
        Got::Nothing
    }
}

impl<M: GenStatem> StatemRef<M> {
    /// The machine's pid.
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// Calls the machine; waits as long as it takes (OTP's default for gen_statem).
    pub fn call(&self, request: M::Call) -> Result<M::Reply, CallError> {
        self.call_within(request, crate::runtime::WaitLimit::Forever)
    }

    /// Calls the machine, waiting at most `timeout`.
    pub fn call_timeout(&self, request: M::Call, timeout: Duration) -> Result<M::Reply, CallError> {
        self.call_within(request, crate::runtime::WaitLimit::For(timeout))
    }

    fn call_within(&self, request: M::Call, limit: crate::runtime::WaitLimit) -> Result<M::Reply, CallError> {
        call_with(self.addr.pid(), limit, &self.exit, |from| self.addr.try_send(Request::Call(request, from)).is_ok())
    }

    /// Sends a cast (always succeeds).
    pub fn cast(&self, msg: M::Cast) {
        self.addr.send(Request::Cast(msg));
    }

    /// Sends an info message.
    pub fn info(&self, msg: M::Info) {
        self.addr.send(Request::Info(msg));
    }

    /// Stops the machine with `reason` (terminate runs) and waits until it has stopped.
    /// Errors as [`ServerRef::stop`](crate::gen_server::ServerRef::stop): `NoProc` if it was
    /// not running, `CallingSelf` from the machine itself, `Down` if it ended otherwise.
    pub fn stop(&self, reason: DownReason) -> Result<(), CallError> {
        stop_server(self.addr.pid(), &self.exit, |done| self.addr.try_send(Request::Stop(reason, done)).is_ok())
    }

    /// The exit reason, once stopped.
    pub fn exit_reason(&self) -> Option<DownReason> {
        exit_reason_now(&self.exit)
    }
}
