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
//! - the events the machine handles next, in order: the events inserted by the last
//!   transition (`next_event`, in the order given); then, if that transition changed the
//!   state, the postponed events, oldest first; then the events queued before (inserted or
//!   retried earlier and not handled yet); then the mailbox, with the timeouts' events
//!   among its messages (below). So a postponed event is retried ahead of events inserted
//!   before the state change, as OTP's `lists:reverse(Postponed, Events)` has it;
//! - `postpone`: the event is retried after the next state change (it may be that
//!   transition's own), oldest first;
//! - an event timeout is cancelled by any event (an inserted one too); a state timeout by a
//!   state change; a named generic timeout only by re-arming or cancelling it;
//! - `terminate` runs at most once: if it panics it is not called again, and the machine
//!   exits with that panic (as in OTP);
//! - `call` has an infinite default timeout.
//!
//! # Timeouts
//!
//! A timeout is a deadline the machine's own loop keeps: looking for its next event, it
//! waits for a message and for the earliest deadline together, so timeouts need no timer
//! messages and vanish with the machine. Where its event goes among the messages follows
//! OTP, which queues a timer message in the mailbox when the deadline passes:
//! - messages that arrived before the deadline are handled first: those queued when the
//!   timeout was armed, and those the machine saw queued whenever it looked for an event
//!   while the deadline was still ahead;
//! - then the timeout's event, before every message that arrived after the deadline. A due
//!   timeout waits only for the messages counted ahead of it, so a stream of messages
//!   cannot starve it. An idle machine sees each message as it arrives; messages that
//!   arrive while a callback runs past the deadline count as arriving after it (the
//!   machine cannot tell them apart; OTP's timer message, late by its timer's latency, may
//!   land behind a few of them instead);
//! - a zero timeout has no message ahead of it (OTP: before any external event not yet
//!   received), but comes after the inserted and retried events;
//! - of several due timeouts, the earliest deadline first (then the one armed first).
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

use crate::behaviour::{call_with, exit_reason_now, exit_with, stop_server, CallError, Caller, ExitCell, StartError};
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
    /// Runs when the machine stops (not on `kill`), at most once (not again if it panics).
    fn terminate(&mut self, _reason: &DownReason, _state: &Self::State) {}
}

/// An event delivered to `handle_event`.
pub enum Event<M: GenStatem> {
    /// A `call`; answer with [`Transition::reply`] or keep the [`Caller`] (`from.defer()`).
    Call(M::Call, Caller<M::Reply>),
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
    Call(M::Call, Caller<M::Reply>),
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
    .map_err(StartError::Spawn)?;
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
        queue: VecDeque::new(),
        event_timeout: None,
        state_timeout: None,
        named: HashMap::new(),
        armed: 0,
        parent,
        terminated: false,
    };
    let reason = match catch_unwind(AssertUnwindSafe(|| engine.run(&mut machine, &mb))) {
        Ok(reason) => reason,
        Err(payload) => {
            let reason = reason_from_payload(payload);
            // A callback panic runs terminate; a kill does not, and neither does a panic in
            // terminate itself: it runs at most once (as in OTP, the machine then exits with
            // terminate's crash).
            match catch_unwind(AssertUnwindSafe(|| {
                if matches!(reason, DownReason::Panic(_)) && !engine.terminated {
                    machine.terminate(&reason, &engine.state);
                }
            })) {
                Ok(()) => reason,
                Err(payload) => reason_from_payload(payload),
            }
        }
    };
    exit_with(cell, reason);
}

struct Engine<M: GenStatem> {
    state: M::State,
    /// Postponed events, oldest first; retried on the next state change.
    postponed: VecDeque<Event<M>>,
    /// Events handled before the mailbox: inserted ones and retried postponed ones, in order.
    queue: VecDeque<Event<M>>,
    event_timeout: Option<Armed>,
    state_timeout: Option<Armed>,
    named: HashMap<String, Armed>,
    /// Timeouts armed so far (the next [`Armed::seq`]).
    armed: u64,
    /// The `start_link` caller: its exit signals stop a trapping machine.
    parent: Option<Pid>,
    /// `terminate` has been called: a panic in it does not call it again.
    terminated: bool,
}

/// An armed timeout (see "Timeouts" in the module doc).
struct Armed {
    deadline: Instant,
    /// Mailbox envelopes queued ahead of this timeout's event: those the machine saw queued
    /// while the deadline was still ahead (when it armed the timeout, and whenever it looked
    /// for an event since), less those it has taken since. They arrived before the deadline.
    ahead: usize,
    /// Arming order: of two due timeouts with one deadline, the one armed first runs first.
    seq: u64,
}

/// Which timeout fires.
enum Kind {
    Event,
    State,
    Named(String),
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
            if let Err(r) = self.apply(t, None, true, mb) {
                self.terminate(m, &r);
                return r;
            }
        }
        loop {
            let event = match self.next_event(mb) {
                Got::Event(e) => e,
                Got::Stop(reason, ack) => {
                    self.terminate(m, &reason);
                    let _ = ack.send(());
                    return reason;
                }
                Got::ParentExit(reason) => {
                    self.terminate(m, &reason);
                    return reason;
                }
                Got::Nothing => continue,
            };
            let t = m.handle_event(&self.state, &event);
            if let Next::Stop(reason) = &t.next {
                let reason = reason.clone();
                // terminate first, then the reply (as in gen_server).
                self.terminate(m, &reason);
                if let (Some(reply), Event::Call(_, from)) = (t.reply, &event) {
                    from.reply_now(reply);
                }
                return reason;
            }
            let old = self.state.clone();
            let changed = matches!(&t.next, Next::To(s) if *s != old);
            let postpone = t.postpone;
            let inserted = match self.apply(t, Some(&event), false, mb) {
                Ok(inserted) => inserted,
                Err(r) => {
                    self.terminate(m, &r);
                    return r;
                }
            };
            if postpone {
                self.postponed.push_back(event);
            }
            if changed {
                // Postponed events are retried after a state change, oldest first, ahead of
                // the events already queued (OTP: `lists:reverse(Postponed, Events)`)...
                while let Some(e) = self.postponed.pop_back() {
                    self.queue.push_front(e);
                }
            }
            // ...and behind the events this transition inserted, which run first, in the
            // order given.
            for e in inserted.into_iter().rev() {
                self.queue.push_front(Event::Internal(e));
            }
            if changed && M::STATE_ENTER {
                let t = m.handle_event(&self.state, &Event::Enter(old));
                if let Err(r) = self.apply(t, None, true, mb) {
                    self.terminate(m, &r);
                    return r;
                }
            }
        }
    }

    /// Calls `terminate`, once: a panic in it must not lead to a second call.
    fn terminate(&mut self, m: &mut M, reason: &DownReason) {
        self.terminated = true;
        m.terminate(reason, &self.state);
    }

    /// Applies a transition's state and actions; returns the events it inserts (for the
    /// caller to queue after the retried postponed events), or a stop reason.
    fn apply(
        &mut self,
        t: Transition<M>,
        event: Option<&Event<M>>,
        enter: bool,
        mb: &Mailbox<Request<M>>,
    ) -> Result<Vec<M::Cast>, DownReason> {
        if enter {
            if let Some(bad) = bad_enter_action(&t, &self.state) {
                // OTP: `bad_state_enter_action_from_state_function`; the machine stops.
                return Err(DownReason::Custom(format!("gen_statem: {bad} in a state enter call")));
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
                    self.state_timeout = None;
                }
                self.state = s;
            }
            Next::Stop(r) => return Err(r),
            _ => {}
        }
        // Everything queued now arrived before the deadlines armed here.
        let arms =
            t.event_timeout.is_some() || t.state_timeout.is_some() || t.timeouts.iter().any(|(_, d)| d.is_some());
        let queued = if arms { mb.len() } else { 0 };
        if let Some(d) = t.event_timeout {
            self.event_timeout = Some(self.arm(now, d, queued));
        }
        if let Some(d) = t.state_timeout {
            self.state_timeout = Some(self.arm(now, d, queued));
        }
        for (name, d) in t.timeouts {
            match d {
                Some(d) => {
                    let armed = self.arm(now, d, queued);
                    self.named.insert(name, armed);
                }
                None => {
                    self.named.remove(&name);
                }
            }
        }
        Ok(t.inserted)
    }

    /// A timeout due `d` after `now`, behind the `queued` envelopes in the mailbox; a zero
    /// timeout is behind none (OTP: before any external event not yet received).
    fn arm(&mut self, now: Instant, d: Duration, queued: usize) -> Armed {
        self.armed += 1;
        Armed { deadline: deadline_after(now, d), ahead: if d.is_zero() { 0 } else { queued }, seq: self.armed }
    }

    fn timeouts(&self) -> impl Iterator<Item = &Armed> {
        self.event_timeout.iter().chain(self.state_timeout.iter()).chain(self.named.values())
    }

    fn timeouts_mut(&mut self) -> impl Iterator<Item = &mut Armed> {
        self.event_timeout.iter_mut().chain(self.state_timeout.iter_mut()).chain(self.named.values_mut())
    }

    /// The event of the timeout that comes before every queued envelope, if one does: due,
    /// nothing ahead of it, the earliest deadline (then the first armed) of those.
    fn take_due(&mut self, now: Instant) -> Option<Event<M>> {
        let mut first: Option<(Instant, u64, Kind)> = None;
        let mut consider = |a: &Armed, kind: Kind| {
            let earlier = match &first {
                None => true,
                Some((deadline, seq, _)) => (a.deadline, a.seq) < (*deadline, *seq),
            };
            if a.deadline <= now && a.ahead == 0 && earlier {
                first = Some((a.deadline, a.seq, kind));
            }
        };
        if let Some(a) = &self.event_timeout {
            consider(a, Kind::Event);
        }
        if let Some(a) = &self.state_timeout {
            consider(a, Kind::State);
        }
        for (name, a) in &self.named {
            if a.deadline <= now && a.ahead == 0 {
                consider(a, Kind::Named(name.clone()));
            }
        }
        let (_, _, kind) = first?;
        // A timeout event is an event too: it cancels the event timeout (as in OTP).
        self.event_timeout = None;
        Some(match kind {
            Kind::Event => Event::EventTimeout,
            Kind::State => {
                self.state_timeout = None;
                Event::StateTimeout
            }
            Kind::Named(name) => {
                self.named.remove(&name);
                Event::Timeout(name)
            }
        })
    }

    /// The next event: a queued inserted or retried one, a due timeout with nothing ahead of
    /// it, or the next envelope in the mailbox (waiting for it until the earliest deadline).
    fn next_event(&mut self, mb: &Mailbox<Request<M>>) -> Got<M> {
        if let Some(e) = self.queue.pop_front() {
            // An inserted event counts as arrived: it cancels the event timeout (OTP).
            self.event_timeout = None;
            return Got::Event(e);
        }
        let mut wait = None;
        if let Some(earliest) = self.timeouts().map(|a| a.deadline).min() {
            let now = Instant::now();
            if self.timeouts().any(|a| now < a.deadline) {
                // What is queued now arrived before every deadline still ahead: it goes
                // ahead of those timeouts' events.
                let queued = mb.len();
                for a in self.timeouts_mut().filter(|a| now < a.deadline) {
                    a.ahead = queued;
                }
            }
            if let Some(e) = self.take_due(now) {
                return Got::Event(e);
            }
            // A due timeout waits only for the envelopes ahead of it, already queued: then
            // this is a poll.
            wait = Some(earliest.saturating_duration_since(now));
        }
        let got = match wait {
            Some(d) => mb.recv_timeout(d).ok(),
            None => Some(mb.recv()),
        };
        let Some(env) = got else {
            // Nothing is queued, so nothing is ahead of any timeout (one counted may have
            // been taken out by `demonitor_flush`).
            for a in self.timeouts_mut() {
                a.ahead = 0;
            }
            return Got::Nothing;
        };
        for a in self.timeouts_mut() {
            a.ahead = a.ahead.saturating_sub(1);
        }
        // Any event cancels the event timeout.
        self.event_timeout = None;
        Got::Event(match env {
            Envelope::Msg(Request::Call(c, f)) => Event::Call(c, f),
            Envelope::Msg(Request::Cast(c)) => Event::Cast(c),
            Envelope::Msg(Request::Info(i)) => Event::Info(Info::Msg(i)),
            Envelope::Msg(Request::Stop(reason, ack)) => return Got::Stop(reason, ack),
            Envelope::Down(d) => Event::Info(Info::Down(d)),
            // The parent's exit signal stops a trapping machine (as in gen_server).
            Envelope::Exit(x) if Some(x.from) == self.parent => return Got::ParentExit(x.reason),
            Envelope::Exit(x) => Event::Info(Info::Exit(x)),
        })
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
