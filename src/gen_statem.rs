//! `gen_statem`: a state machine actor with OTP's event handling.
//!
//! Implement [`GenStatem`]: `init` returns the initial state; `handle_event(state, event)`
//! returns a [`Transition`]: keep the state or go to another, plus actions (reply, postpone,
//! timeouts, inserted events). This is OTP's `handle_event_function` mode; the
//! `state_functions` mode is the same with a `match state` at the top of `handle_event`
//! dispatching to one method per state (see the doc example).
//!
//! Every callback gets a [`Ctx`]: the machine's own [`StatemRef`], pid and name (see
//! [`gen_server`](crate::gen_server)'s "The context" for why an argument).
//!
//! Semantics (SEMANTICS.md, "gen_statem"):
//! - `init` returns `Transition::to(initial_state)` with optional actions (timeouts,
//!   `next_event`), applied before the initial state-enter call (as OTP);
//! - state enter: if [`GenStatem::state_enter`] (by default [`GenStatem::STATE_ENTER`]) is true, every state change calls
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
//! - [`Transition::repeat_state`] keeps the state but runs the state-enter call again (OTP's
//!   `repeat_state`); it is not a state change;
//! - an event timeout is cancelled by any event (an inserted one too); a state timeout by a
//!   state change or [`Transition::cancel_state_timeout`]; a named generic timeout only by
//!   re-arming or cancelling it. Each carries a content of type [`GenStatem::Timeout`] to its
//!   event;
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
//! use std::time::Duration;
//! use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
//! #[derive(Clone, Debug, PartialEq)]
//! enum Door { Locked, Open }
//! /// A code lock: the right code opens it; it locks again after a state timeout whose
//! /// content says why.
//! struct Lock { code: u32, relock: Duration }
//! impl GenStatem for Lock {
//!     type State = Door; type Call = u32; type Reply = bool; type Cast = (); type Info = ();
//!     type Timeout = &'static str;
//!     fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> {
//!         Ok(Transition::to(Door::Locked))
//!     }
//!     fn handle_event(&mut self, state: &Door, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
//!         match (state, event) {
//!             (Door::Locked, Event::Call(code, _)) if *code == self.code => {
//!                 Transition::to(Door::Open).reply(true).state_timeout_with(self.relock, "relock")
//!             }
//!             (_, Event::Call(..)) => Transition::keep().reply(false),
//!             (Door::Open, Event::StateTimeout(why)) => {
//!                 assert_eq!(*why, "relock");
//!                 Transition::to(Door::Locked)
//!             }
//!             _ => Transition::keep(),
//!         }
//!     }
//! }
//! smarm::run(|| {
//!     let m = gen_statem::start(Lock { code: 42, relock: Duration::from_millis(1) }).unwrap();
//!     assert_eq!(m.call(1), Ok(false));
//!     assert_eq!(m.call(42), Ok(true));
//!     // Once the door relocks, the code opens it again.
//!     while m.call(42) != Ok(true) {
//!         smarm::yield_now();
//!     }
//! });
//! ```

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use crate::behaviour::{call_with, exit_reason_now, exit_with, no_proc, stop_server, ExitCell};
pub use crate::behaviour::{CallError, Caller, ReplyTo, StartError, StartOpts};
use crate::channel::{oneshot, watch, OneshotSender, WatchReceiver, WatchSender};
use crate::gen_server::Info;
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, DownReason};
use crate::slot_state::Pid;
use crate::timer::{deadline_after, TimerRef};

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
    /// The content a timeout carries to its event ([`Event::EventTimeout`],
    /// [`Event::StateTimeout`], [`Event::Timeout`]); use `()` if unused.
    type Timeout: Send + 'static;

    /// Call `handle_event(new, Enter(old))` on every state change (and once for the initial
    /// state, with `old == new`). That call may keep the state, stop, and set timeouts; a
    /// state change, `postpone`, `next_event` or `reply` in it stops the machine (as in OTP).
    /// The default of [`state_enter`](Self::state_enter).
    const STATE_ENTER: bool = false;

    /// Whether this machine gets state-enter calls (see [`STATE_ENTER`](Self::STATE_ENTER),
    /// the default); asked once, after `init` (OTP asks `callback_mode` once, at start).
    fn state_enter(&self) -> bool {
        Self::STATE_ENTER
    }

    /// Runs in the new machine before `start` returns; returns the initial state as
    /// `Transition::to(state)`, with actions if any (OTP's `{ok, State, Data, Actions}`:
    /// timeouts and `next_event`; a `postpone` or `reply` there stops the machine, as a
    /// `keep` or `repeat_state` does: there is no state to keep), or the reason not to start.
    fn init(&mut self, ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason>;
    /// Handles one event in `state`.
    fn handle_event(&mut self, state: &Self::State, event: &Event<Self>, ctx: &Ctx<Self>) -> Transition<Self>;
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
    /// The event timeout fired, with its content.
    EventTimeout(M::Timeout),
    /// The state timeout fired, with its content.
    StateTimeout(M::Timeout),
    /// The named generic timeout fired, with its content.
    Timeout(String, M::Timeout),
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
            Event::EventTimeout(_) => f.write_str("EventTimeout"),
            Event::StateTimeout(_) => f.write_str("StateTimeout"),
            Event::Timeout(n, _) => write!(f, "Timeout({n:?})"),
            Event::Internal(_) => f.write_str("Internal(..)"),
        }
    }
}

enum Next<S> {
    Keep,
    To(S),
    /// Keep the state, but run the state-enter call again (OTP's `repeat_state`).
    Repeat,
    Stop(DownReason),
}

/// What a transition does to one timeout.
enum Timer<T> {
    Set(Duration, T),
    Cancel,
}

/// The result of handling an event: the next state and actions.
pub struct Transition<M: GenStatem> {
    next: Next<M::State>,
    reply: Option<M::Reply>,
    postpone: bool,
    event_timeout: Option<Timer<M::Timeout>>,
    state_timeout: Option<Timer<M::Timeout>>,
    timeouts: Vec<(String, Timer<M::Timeout>)>,
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
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep();
    /// ```
    pub fn keep() -> Self {
        Self::new(Next::Keep)
    }
    /// Go to `state` (a change only if it differs from the current one).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::to(1);
    /// ```
    pub fn to(state: M::State) -> Self {
        Self::new(Next::To(state))
    }
    /// Keep the state but run the state-enter call again, with `Enter(state)` (OTP's
    /// `repeat_state`): it is not a state change (postponed events stay postponed, the state
    /// timeout stays armed). Without state-enter calls, the same as [`keep`](Self::keep); in
    /// a state-enter call too (as in OTP, which does not repeat the call it is in).
    ///
    /// ```
    /// use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
    /// /// Counts its state-enter calls; `cast(())` repeats the state.
    /// struct Enters(u32);
    /// impl GenStatem for Enters {
    ///     type State = (); type Call = (); type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    ///     const STATE_ENTER: bool = true;
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Enter(_) => { self.0 += 1; Transition::keep() }
    ///             Event::Cast(()) => Transition::repeat_state(),
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Enters(0)).unwrap();
    ///     m.cast(());
    ///     assert_eq!(m.call(()), Ok(2)); // the initial enter, and the repeated one
    /// });
    /// ```
    pub fn repeat_state() -> Self {
        Self::new(Next::Repeat)
    }
    /// Stop with `reason` (`terminate` runs; a reply action is sent after it).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::stop(smarm::DownReason::Normal).reply(());
    /// ```
    pub fn stop(reason: DownReason) -> Self {
        Self::new(Next::Stop(reason))
    }
    /// Reply to the call being handled.
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = u8; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().reply(7);
    /// ```
    pub fn reply(mut self, reply: M::Reply) -> Self {
        self.reply = Some(reply);
        self
    }
    /// Retry this event after the next state change.
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().postpone();
    /// ```
    pub fn postpone(mut self) -> Self {
        self.postpone = true;
        self
    }
    /// Deliver `EventTimeout(Default::default())` after `d` unless another event arrives
    /// first (see [`event_timeout_with`](Self::event_timeout_with) for a content).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().event_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn event_timeout(self, d: Duration) -> Self
    where
        M::Timeout: Default,
    {
        self.event_timeout_with(d, M::Timeout::default())
    }
    /// Deliver `EventTimeout(content)` after `d` unless another event arrives first.
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = &'static str;
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().event_timeout_with(std::time::Duration::from_secs(1), "idle");
    /// ```
    pub fn event_timeout_with(mut self, d: Duration, content: M::Timeout) -> Self {
        self.event_timeout = Some(Timer::Set(d, content));
        self
    }
    /// Cancel the event timeout (OTP's `{timeout, cancel}`; any event cancels it too).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().cancel_event_timeout();
    /// ```
    pub fn cancel_event_timeout(mut self) -> Self {
        self.event_timeout = Some(Timer::Cancel);
        self
    }
    /// Deliver `StateTimeout(Default::default())` after `d` unless the state changes first
    /// (see [`state_timeout_with`](Self::state_timeout_with) for a content).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::to(1).state_timeout(std::time::Duration::from_secs(1));
    /// ```
    pub fn state_timeout(self, d: Duration) -> Self
    where
        M::Timeout: Default,
    {
        self.state_timeout_with(d, M::Timeout::default())
    }
    /// Deliver `StateTimeout(content)` after `d` unless the state changes first.
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
    /// /// Reports the content of the state timeout that fired.
    /// struct Alarm(Option<u32>);
    /// impl GenStatem for Alarm {
    ///     type State = (); type Call = (); type Reply = Option<u32>; type Cast = (); type Info = (); type Timeout = u32;
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> {
    ///         Ok(Transition::to(()).state_timeout_with(Duration::from_millis(1), 42))
    ///     }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::StateTimeout(n) => { self.0 = Some(*n); Transition::keep() }
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Alarm(None)).unwrap();
    ///     while m.call(()) != Ok(Some(42)) {
    ///         smarm::yield_now();
    ///     }
    /// });
    /// ```
    pub fn state_timeout_with(mut self, d: Duration, content: M::Timeout) -> Self {
        self.state_timeout = Some(Timer::Set(d, content));
        self
    }
    /// Cancel the state timeout without changing the state (OTP's `{state_timeout, cancel}`).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().cancel_state_timeout();
    /// ```
    pub fn cancel_state_timeout(mut self) -> Self {
        self.state_timeout = Some(Timer::Cancel);
        self
    }
    /// Deliver `Timeout(name, Default::default())` after `d` (re-arming replaces a pending
    /// one; see [`timeout_with`](Self::timeout_with) for a content).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().timeout("retry", std::time::Duration::from_secs(1));
    /// ```
    pub fn timeout(self, name: impl Into<String>, d: Duration) -> Self
    where
        M::Timeout: Default,
    {
        self.timeout_with(name, d, M::Timeout::default())
    }
    /// Deliver `Timeout(name, content)` after `d` (re-arming replaces a pending one).
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = u32;
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().timeout_with("retry", std::time::Duration::from_secs(1), 3);
    /// ```
    pub fn timeout_with(mut self, name: impl Into<String>, d: Duration, content: M::Timeout) -> Self {
        self.timeouts.push((name.into(), Timer::Set(d, content)));
        self
    }
    /// Cancel the named generic timeout.
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().cancel_timeout("retry");
    /// ```
    pub fn cancel_timeout(mut self, name: impl Into<String>) -> Self {
        self.timeouts.push((name.into(), Timer::Cancel));
        self
    }
    /// Insert an event to be handled before any queued one.
    ///
    /// ```
    /// # use smarm::gen_statem::{GenStatem, Transition, Event, Ctx};
    /// # struct M;
    /// # impl GenStatem for M {
    /// #     type State = u8; type Call = (); type Reply = (); type Cast = u8; type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(0)) }
    /// #     fn handle_event(&mut self, _: &u8, _: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> { Transition::keep() }
    /// # }
    /// let _t: Transition<M> = Transition::keep().next_event(1).next_event(2);
    /// ```
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

/// The running machine as its callbacks see it: its own handle, pid and name (as
/// [`gen_server::Ctx`](crate::gen_server::Ctx); the module doc there says why a context
/// argument).
pub struct Ctx<M: GenStatem> {
    me: StatemRef<M>,
    name: Option<String>,
}

impl<M: GenStatem> Ctx<M> {
    /// The machine's own handle: send it to others, or send yourself a timed message.
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
    /// /// Goes to `true` when its own delayed cast arrives.
    /// struct Wake;
    /// impl GenStatem for Wake {
    ///     type State = bool; type Call = (); type Reply = bool; type Cast = (); type Info = (); type Timeout = ();
    ///     fn init(&mut self, ctx: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> {
    ///         ctx.myself().cast_after(Duration::from_millis(1), ());
    ///         Ok(Transition::to(false))
    ///     }
    ///     fn handle_event(&mut self, s: &bool, e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Cast(()) => Transition::to(true),
    ///             _ => Transition::keep().reply(*s),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Wake).unwrap();
    ///     while m.call(()) != Ok(true) {
    ///         smarm::yield_now();
    ///     }
    /// });
    /// ```
    pub fn myself(&self) -> &StatemRef<M> {
        &self.me
    }

    /// The machine's pid.
    ///
    /// ```
    /// use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
    /// struct WhoAmI;
    /// impl GenStatem for WhoAmI {
    ///     type State = (); type Call = (); type Reply = smarm::Pid; type Cast = (); type Info = (); type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), _: &Event<Self>, ctx: &Ctx<Self>) -> Transition<Self> {
    ///         Transition::keep().reply(ctx.pid())
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(WhoAmI).unwrap();
    ///     assert_eq!(m.call(()), Ok(m.pid()));
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.me.pid()
    }

    /// The name the machine was started under, if any.
    ///
    /// ```
    /// use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// struct Named;
    /// impl GenStatem for Named {
    ///     type State = (); type Call = (); type Reply = Option<String>; type Cast = (); type Info = (); type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), _: &Event<Self>, ctx: &Ctx<Self>) -> Transition<Self> {
    ///         Transition::keep().reply(ctx.name().map(str::to_owned))
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start_opts(Named, StartOpts { name: Some("m".into()), ..Default::default() }).unwrap();
    ///     assert_eq!(m.call(()), Ok(Some("m".to_string())));
    /// });
    /// ```
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }
}

impl<M: GenStatem> fmt::Debug for Ctx<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Ctx").field("pid", &self.pid()).field("name", &self.name).finish()
    }
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
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| assert_eq!(gen_statem::start(Echo).unwrap().call(1), Ok(1)));
/// ```
pub fn start<M: GenStatem>(machine: M) -> Result<StatemRef<M>, StartError> {
    start_opts(machine, StartOpts::default())
}

/// Starts a machine linked to the caller; returns once `init` has finished.
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| {
///     let m = gen_statem::start_link(Echo).unwrap();
///     assert_eq!(m.call(2), Ok(2));
///     m.stop(smarm::DownReason::Normal).unwrap();
/// });
/// ```
pub fn start_link<M: GenStatem>(machine: M) -> Result<StatemRef<M>, StartError> {
    start_opts(machine, StartOpts { name: None, link: true })
}

/// Starts a machine with options (name, link).
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, StartError, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| {
///     let opts = || StartOpts { name: Some("echo".into()), ..Default::default() };
///     let m = gen_statem::start_opts(Echo, opts()).unwrap();
///     assert_eq!(gen_statem::start_opts(Echo, opts()).err(), Some(StartError::AlreadyStarted(m.pid())));
/// });
/// ```
pub fn start_opts<M: GenStatem>(machine: M, opts: StartOpts) -> Result<StatemRef<M>, StartError> {
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

/// What an `init` transition does that OTP forbids there: it must name the initial state
/// (not keep, repeat or stop through the transition: `Err` is the way to refuse), and may
/// not postpone or reply (there is no event).
fn bad_init_action<M: GenStatem>(t: &Transition<M>) -> Option<&'static str> {
    match &t.next {
        Next::Keep => Some("keep (no initial state)"),
        Next::Repeat => Some("repeat_state (no initial state)"),
        Next::Stop(_) => Some("stop (return Err to refuse to start)"),
        Next::To(_) if t.postpone => Some("postpone"),
        Next::To(_) if t.reply.is_some() => Some("reply"),
        Next::To(_) => None,
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
    crate::process::set_ext(std::sync::Arc::new(exit_tx.subscribe()));
    let ctx = Ctx { me: StatemRef { addr: mb.addr(), exit: exit_tx.subscribe() }, name };
    let cell = ExitCell { tx: exit_tx, reason: None };
    if let Some(n) = &ctx.name {
        if let Err(crate::process::RegisterError::NameTaken(p)) =
            crate::process::register(n.clone(), crate::task::current_pid())
        {
            let _ = ready.send(Err(StartError::AlreadyStarted(p)));
            return exit_with(cell, DownReason::Normal);
        }
    }
    let init = catch_unwind(AssertUnwindSafe(|| machine.init(&ctx))).unwrap_or_else(|p| Err(reason_from_payload(p)));
    let init = init.and_then(|t| match bad_init_action(&t) {
        Some(bad) => Err(DownReason::Custom(format!("gen_statem: {bad} in init"))),
        None => Ok(t),
    });
    let (state, init) = match init {
        Ok(mut t) => match std::mem::replace(&mut t.next, Next::Keep) {
            Next::To(s) => (s, t),
            _ => unreachable!("checked by bad_init_action"),
        },
        Err(r) => {
            if let Some(n) = &ctx.name {
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
        enter: machine.state_enter(),
        postponed: VecDeque::new(),
        queue: VecDeque::new(),
        event_timeout: None,
        state_timeout: None,
        named: HashMap::new(),
        armed: 0,
        parent,
        terminated: false,
    };
    let reason = match catch_unwind(AssertUnwindSafe(|| engine.run(&mut machine, &mb, &ctx, init))) {
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
    /// State-enter calls are made ([`GenStatem::state_enter`], asked once).
    enter: bool,
    /// Postponed events, oldest first; retried on the next state change.
    postponed: VecDeque<Event<M>>,
    /// Events handled before the mailbox: inserted ones and retried postponed ones, in order.
    queue: VecDeque<Event<M>>,
    event_timeout: Option<Armed<M::Timeout>>,
    state_timeout: Option<Armed<M::Timeout>>,
    named: HashMap<String, Armed<M::Timeout>>,
    /// Timeouts armed so far (the next [`Armed::seq`]).
    armed: u64,
    /// The `start_link` caller: its exit signals stop a trapping machine.
    parent: Option<Pid>,
    /// `terminate` has been called: a panic in it does not call it again.
    terminated: bool,
}

/// An armed timeout (see "Timeouts" in the module doc).
struct Armed<T> {
    deadline: Instant,
    /// Mailbox envelopes queued ahead of this timeout's event: those the machine saw queued
    /// while the deadline was still ahead (when it armed the timeout, and whenever it looked
    /// for an event since), less those it has taken since. They arrived before the deadline.
    ahead: usize,
    /// Arming order: of two due timeouts with one deadline, the one armed first runs first.
    seq: u64,
    /// Delivered with the timeout's event.
    content: T,
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
    fn run(&mut self, m: &mut M, mb: &Mailbox<Request<M>>, ctx: &Ctx<M>, init: Transition<M>) -> DownReason {
        // The actions `init` returned (timeouts, inserted events), then the initial state's
        // enter call (as OTP, which processes init's actions before the enter call).
        match self.apply(init, None, false, mb) {
            Ok(inserted) => self.queue.extend(inserted.into_iter().map(Event::Internal)),
            Err(r) => {
                self.terminate(m, &r);
                return r;
            }
        }
        if self.enter {
            let s = self.state.clone();
            let t = m.handle_event(&self.state, &Event::Enter(s), ctx);
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
            let t = m.handle_event(&self.state, &event, ctx);
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
            let repeat = matches!(&t.next, Next::Repeat);
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
            if (changed || repeat) && self.enter {
                let t = m.handle_event(&self.state, &Event::Enter(old), ctx);
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
            Next::Keep | Next::Repeat => {}
        }
        // Everything queued now arrived before the deadlines armed here.
        let set = |a: &Option<Timer<M::Timeout>>| matches!(a, Some(Timer::Set(..)));
        let arms = set(&t.event_timeout)
            || set(&t.state_timeout)
            || t.timeouts.iter().any(|(_, a)| matches!(a, Timer::Set(..)));
        let queued = if arms { mb.len() } else { 0 };
        match t.event_timeout {
            Some(Timer::Set(d, c)) => self.event_timeout = Some(self.arm(now, d, queued, c)),
            Some(Timer::Cancel) => self.event_timeout = None,
            None => {}
        }
        match t.state_timeout {
            Some(Timer::Set(d, c)) => self.state_timeout = Some(self.arm(now, d, queued, c)),
            // Cancelled without a state change (OTP's `{state_timeout, cancel}`).
            Some(Timer::Cancel) => self.state_timeout = None,
            None => {}
        }
        for (name, action) in t.timeouts {
            match action {
                Timer::Set(d, c) => {
                    let armed = self.arm(now, d, queued, c);
                    self.named.insert(name, armed);
                }
                Timer::Cancel => {
                    self.named.remove(&name);
                }
            }
        }
        Ok(t.inserted)
    }

    /// A timeout due `d` after `now`, behind the `queued` envelopes in the mailbox; a zero
    /// timeout is behind none (OTP: before any external event not yet received).
    fn arm(&mut self, now: Instant, d: Duration, queued: usize, content: M::Timeout) -> Armed<M::Timeout> {
        self.armed += 1;
        Armed {
            deadline: deadline_after(now, d),
            ahead: if d.is_zero() { 0 } else { queued },
            seq: self.armed,
            content,
        }
    }

    fn timeouts(&self) -> impl Iterator<Item = &Armed<M::Timeout>> {
        self.event_timeout.iter().chain(self.state_timeout.iter()).chain(self.named.values())
    }

    fn timeouts_mut(&mut self) -> impl Iterator<Item = &mut Armed<M::Timeout>> {
        self.event_timeout.iter_mut().chain(self.state_timeout.iter_mut()).chain(self.named.values_mut())
    }

    /// The event of the timeout that comes before every queued envelope, if one does: due,
    /// nothing ahead of it, the earliest deadline (then the first armed) of those.
    fn take_due(&mut self, now: Instant) -> Option<Event<M>> {
        let mut first: Option<(Instant, u64, Kind)> = None;
        let mut consider = |a: &Armed<M::Timeout>, kind: Kind| {
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
        let event = self.event_timeout.take();
        Some(match kind {
            Kind::Event => Event::EventTimeout(event.expect("the due event timeout").content),
            Kind::State => Event::StateTimeout(self.state_timeout.take().expect("the due state timeout").content),
            Kind::Named(name) => {
                let armed = self.named.remove(&name).expect("the due named timeout");
                Event::Timeout(name, armed.content)
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
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Echo).unwrap();
    ///     assert_ne!(m.pid(), smarm::current_pid());
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// Calls the machine; waits as long as it takes (OTP's default for gen_statem).
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| assert_eq!(gen_statem::start(Echo).unwrap().call(3), Ok(3)));
    /// ```
    #[track_caller]
    pub fn call(&self, request: M::Call) -> Result<M::Reply, CallError> {
        self.call_within(request, crate::runtime::WaitLimit::Forever)
    }

    /// Calls the machine, waiting at most `timeout`.
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Echo).unwrap();
    ///     assert_eq!(m.call_timeout(4, std::time::Duration::from_secs(1)), Ok(4));
    /// });
    /// ```
    #[track_caller]
    pub fn call_timeout(&self, request: M::Call, timeout: Duration) -> Result<M::Reply, CallError> {
        self.call_within(request, crate::runtime::WaitLimit::For(timeout))
    }

    #[track_caller]
    fn call_within(&self, request: M::Call, limit: crate::runtime::WaitLimit) -> Result<M::Reply, CallError> {
        call_with(self.addr.pid(), limit, &self.exit, |from| self.addr.try_send(Request::Call(request, from)).is_ok())
    }

    /// Sends a cast (always succeeds).
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// /// Counts casts and infos; a call returns the count.
    /// struct Count(u32);
    /// impl GenStatem for Count {
    ///     type State = (); type Call = (); type Reply = u32; type Cast = u32; type Info = u32; type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Cast(n) | Event::Info(smarm::gen_server::Info::Msg(n)) => { self.0 += n; Transition::keep() }
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Count(0)).unwrap();
    ///     m.cast(2);
    ///     assert_eq!(m.call(()), Ok(2));
    /// });
    /// ```
    pub fn cast(&self, msg: M::Cast) {
        self.addr.send(Request::Cast(msg));
    }

    /// Sends an info message.
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// /// Counts casts and infos; a call returns the count.
    /// struct Count(u32);
    /// impl GenStatem for Count {
    ///     type State = (); type Call = (); type Reply = u32; type Cast = u32; type Info = u32; type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Cast(n) | Event::Info(smarm::gen_server::Info::Msg(n)) => { self.0 += n; Transition::keep() }
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Count(0)).unwrap();
    ///     m.info(3);
    ///     assert_eq!(m.call(()), Ok(3));
    /// });
    /// ```
    pub fn info(&self, msg: M::Info) {
        self.addr.send(Request::Info(msg));
    }

    /// Sends a cast after `delay` (cancel with [`cancel_timer`](crate::cancel_timer)).
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// /// Counts casts and infos; a call returns the count.
    /// struct Count(u32);
    /// impl GenStatem for Count {
    ///     type State = (); type Call = (); type Reply = u32; type Cast = u32; type Info = u32; type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Cast(n) | Event::Info(smarm::gen_server::Info::Msg(n)) => { self.0 += n; Transition::keep() }
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Count(0)).unwrap();
    ///     m.cast_after(std::time::Duration::from_millis(1), 5);
    ///     while m.call(()) != Ok(5) {
    ///         smarm::yield_now();
    ///     }
    /// });
    /// ```
    pub fn cast_after(&self, delay: Duration, msg: M::Cast) -> TimerRef {
        crate::timer::send_after_addr(delay, &self.addr, Request::Cast(msg))
    }

    /// Sends an info message after `delay` (cancel with [`cancel_timer`](crate::cancel_timer)).
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// /// Counts casts and infos; a call returns the count.
    /// struct Count(u32);
    /// impl GenStatem for Count {
    ///     type State = (); type Call = (); type Reply = u32; type Cast = u32; type Info = u32; type Timeout = ();
    ///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    ///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    ///         match e {
    ///             Event::Cast(n) | Event::Info(smarm::gen_server::Info::Msg(n)) => { self.0 += n; Transition::keep() }
    ///             _ => Transition::keep().reply(self.0),
    ///         }
    ///     }
    /// }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Count(0)).unwrap();
    ///     let t = m.info_after(std::time::Duration::from_secs(60), 5);
    ///     assert!(smarm::cancel_timer(t).is_some());
    ///     assert_eq!(m.call(()), Ok(0));
    /// });
    /// ```
    pub fn info_after(&self, delay: Duration, msg: M::Info) -> TimerRef {
        crate::timer::send_after_addr(delay, &self.addr, Request::Info(msg))
    }

    /// Stops the machine with `reason` (terminate runs) and waits until it has stopped.
    /// Errors as [`ServerRef::stop`](crate::gen_server::ServerRef::stop): `NoProc` if it was
    /// not running, `CallingSelf` from the machine itself, `Down` if it ended otherwise.
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Echo).unwrap();
    ///     assert_eq!(m.stop(smarm::DownReason::Normal), Ok(()));
    ///     assert_eq!(m.stop(smarm::DownReason::Normal), Err(gen_statem::CallError::NoProc));
    /// });
    /// ```
    pub fn stop(&self, reason: DownReason) -> Result<(), CallError> {
        stop_server(self.addr.pid(), &self.exit, |done| self.addr.try_send(Request::Stop(reason, done)).is_ok())
    }

    /// The exit reason, once stopped.
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Echo).unwrap();
    ///     assert_eq!(m.exit_reason(), None);
    ///     m.stop(smarm::DownReason::Shutdown).unwrap();
    ///     assert_eq!(m.exit_reason(), Some(smarm::DownReason::Shutdown));
    /// });
    /// ```
    pub fn exit_reason(&self) -> Option<DownReason> {
        exit_reason_now(&self.exit)
    }

    /// True while the machine's mailbox exists.
    ///
    /// ```
    /// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
    /// # struct Echo;
    /// # impl GenStatem for Echo {
    /// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
    /// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
    /// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
    /// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
    /// #     }
    /// # }
    /// smarm::run(|| {
    ///     let m = gen_statem::start(Echo).unwrap();
    ///     assert!(m.is_alive());
    ///     m.stop(smarm::DownReason::Normal).unwrap();
    ///     assert!(!m.is_alive());
    /// });
    /// ```
    pub fn is_alive(&self) -> bool {
        self.addr.is_alive()
    }
}

/// Calls the machine of type `M` registered under `name`, waiting as long as it takes;
/// [`CallError::NoProc`] if none runs under that name.
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| {
///     gen_statem::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_statem::call_named::<Echo>("echo", 1), Ok(1));
///     assert_eq!(gen_statem::call_named::<Echo>("nobody", 1), Err(gen_statem::CallError::NoProc));
/// });
/// ```
pub fn call_named<M: GenStatem>(name: &str, request: M::Call) -> Result<M::Reply, CallError> {
    named::<M>(name).ok_or_else(no_proc)?.call(request)
}

/// [`call_named`] waiting at most `timeout`.
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| {
///     gen_statem::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_statem::call_named_timeout::<Echo>("echo", 2, std::time::Duration::from_secs(1)), Ok(2));
/// });
/// ```
pub fn call_named_timeout<M: GenStatem>(
    name: &str,
    request: M::Call,
    timeout: Duration,
) -> Result<M::Reply, CallError> {
    named::<M>(name).ok_or_else(no_proc)?.call_timeout(request, timeout)
}

/// Casts to the machine of type `M` registered under `name`; [`CallError::NoProc`] if none
/// runs under that name (as `gen_server::cast_named`).
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
/// /// Counts casts and infos; a call returns the count.
/// struct Count(u32);
/// impl GenStatem for Count {
///     type State = (); type Call = (); type Reply = u32; type Cast = u32; type Info = u32; type Timeout = ();
///     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
///     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
///         match e {
///             Event::Cast(n) | Event::Info(smarm::gen_server::Info::Msg(n)) => { self.0 += n; Transition::keep() }
///             _ => Transition::keep().reply(self.0),
///         }
///     }
/// }
/// smarm::run(|| {
///     gen_statem::start_opts(Count(0), StartOpts { name: Some("count".into()), ..Default::default() }).unwrap();
///     gen_statem::cast_named::<Count>("count", 4).unwrap();
///     assert_eq!(gen_statem::call_named::<Count>("count", ()), Ok(4));
/// });
/// ```
pub fn cast_named<M: GenStatem>(name: &str, msg: M::Cast) -> Result<(), CallError> {
    named::<M>(name).ok_or_else(no_proc)?.cast(msg);
    Ok(())
}

/// A [`StatemRef`] for the machine of type `M` registered under `name`, if one runs.
///
/// ```
/// # use smarm::gen_statem::{self, Ctx, Event, GenStatem, StartOpts, Transition};
/// # struct Echo;
/// # impl GenStatem for Echo {
/// #     type State = (); type Call = u32; type Reply = u32; type Cast = (); type Info = (); type Timeout = ();
/// #     fn init(&mut self, _: &Ctx<Self>) -> Result<Transition<Self>, smarm::DownReason> { Ok(Transition::to(())) }
/// #     fn handle_event(&mut self, _: &(), e: &Event<Self>, _: &Ctx<Self>) -> Transition<Self> {
/// #         match e { Event::Call(x, _) => Transition::keep().reply(*x), _ => Transition::keep() }
/// #     }
/// # }
/// smarm::run(|| {
///     let m = gen_statem::start_opts(Echo, StartOpts { name: Some("echo".into()), ..Default::default() }).unwrap();
///     assert_eq!(gen_statem::named::<Echo>("echo").map(|r| r.pid()), Some(m.pid()));
/// });
/// ```
pub fn named<M: GenStatem>(name: &str) -> Option<StatemRef<M>> {
    let addr = crate::task::whereis_addr::<Request<M>>(name).ok()?;
    let ext = crate::process::ext_of(addr.pid())?;
    let exit = ext.downcast_ref::<WatchReceiver<Option<DownReason>>>()?.clone();
    Some(StatemRef { addr, exit })
}
