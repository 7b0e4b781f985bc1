//! gen_statem (SEMANTICS.md, "gen_statem").
//!
//! Statement -> tests:
//!
//! - `state_functions`-like mode:
//!   state_functions_style_machine_dispatches_on_the_state
//! - `handle_event`-like mode:
//!   handle_event_style_machine_sees_state_and_event_together
//! - optional state-enter calls:
//!   state_enter_runs_for_the_initial_state_and_on_every_state_change,
//!   no_enter_calls_without_state_enter,
//!   actions_of_a_state_enter_call_apply
//! - `postpone` retries an event after the next state change, oldest first:
//!   postponed_events_are_retried_after_a_state_change_oldest_first,
//!   postponed_events_are_not_retried_without_a_state_change,
//!   postponed_call_is_answered_after_the_state_change
//! - postponed events run before events that were pending or inserted behind them (OTP
//!   prepends them), in the order they were postponed:
//!   postponed_events_are_retried_before_events_inserted_earlier,
//!   an_event_postponed_again_with_a_state_change_is_retried_before_the_later_ones
//! - an expired state or named timeout is an event queued in order with messages; a stream
//!   of incoming messages cannot starve it:
//!   expired_timeout_is_handled_before_messages_that_arrived_after_its_deadline,
//!   expired_timeout_is_not_starved_by_a_stream_of_messages,
//!   zero_timeouts_run_before_queued_messages (OTP: before any event not yet received)
//! - an event timeout is cancelled by any event:
//!   event_timeout_fires_when_no_event_arrives,
//!   event_timeout_is_cancelled_by_a_cast, event_timeout_is_cancelled_by_an_info,
//!   event_timeout_is_cancelled_by_a_call,
//!   event_timeout_is_cancelled_by_an_inserted_event (OTP: an inserted event counts as arrived),
//!   event_timeout_is_cancelled_by_a_state_or_named_timeout_event
//! - a state timeout by a state change:
//!   state_timeout_is_cancelled_by_a_state_change,
//!   state_timeout_survives_events_and_transitions_to_the_same_state
//! - named generic timeouts only by re-arming or cancelling:
//!   named_timeout_survives_events_and_state_changes,
//!   rearming_a_named_timeout_replaces_the_pending_one,
//!   cancelling_a_named_timeout_prevents_it, named_timeouts_are_independent,
//!   timeouts_of_duration_max_never_fire_and_do_not_stop_the_machine
//! - inserted events (`next_event`) run before queued external events:
//!   inserted_events_run_before_queued_external_events_in_order,
//!   inserted_events_run_before_retried_postponed_events
//! - default call timeout: infinite:
//!   call_without_timeout_waits_past_gen_servers_5_s_default,
//!   call_timeout_gives_up
//! - (OTP, where silent) a state-enter call may not change the state, postpone, insert events
//!   or reply; the machine stops:
//!   a_state_enter_call_may_not_change_the_state_postpone_insert_or_reply
//! - (gen_server parity) stop runs terminate then replies:
//!   stop_transition_runs_terminate_before_the_reply
//! - (gen_server parity) terminate runs at most once; a panicking one is not called again:
//!   a_panicking_terminate_runs_once
//! - (gen_server parity, OTP's `calling_self`) `stop` or `call` of the machine from itself:
//!   stop_or_call_of_itself_is_calling_self

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smarm::channel::{channel, Receiver, Sender};
use smarm::gen_server::{CallError, Caller};
use smarm::gen_statem::{self, Ctx, Event, GenStatem, StatemRef, Transition};
use smarm::{DownReason, Runtime};

const GUARD: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);

fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

// ------------------------------------------------------------------------------------------
// Modes
// ------------------------------------------------------------------------------------------

#[derive(Clone, Debug, PartialEq)]
enum Door {
    Locked,
    Open,
}

/// `state_functions` style: one method per state, chosen by a `match` on the state.
struct Lock {
    code: u32,
    opened: u32,
}

impl Lock {
    fn locked(&mut self, event: &Event<Self>) -> Transition<Self> {
        match event {
            Event::Call(code, _) if *code == self.code => {
                self.opened += 1;
                Transition::to(Door::Open).reply(true)
            }
            Event::Call(..) => Transition::keep().reply(false),
            _ => Transition::keep(),
        }
    }
    fn open(&mut self, event: &Event<Self>) -> Transition<Self> {
        match event {
            Event::Cast(()) => Transition::to(Door::Locked),
            Event::Call(..) => Transition::keep().reply(true),
            _ => Transition::keep(),
        }
    }
}

impl GenStatem for Lock {
    type State = Door;
    type Call = u32;
    type Reply = bool;
    type Cast = ();
    type Info = ();
    type Timeout = ();
    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(Door::Locked))
    }
    fn handle_event(&mut self, state: &Door, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match state {
            Door::Locked => self.locked(event),
            Door::Open => self.open(event),
        }
    }
}

#[test]
fn state_functions_style_machine_dispatches_on_the_state() {
    run(|| {
        let m = gen_statem::start(Lock { code: 42, opened: 0 }).unwrap();
        assert_eq!(m.call(1), Ok(false));
        assert_eq!(m.call(42), Ok(true));
        // Open: any code opens.
        assert_eq!(m.call(1), Ok(true));
        m.cast(());
        assert_eq!(m.call(1), Ok(false));
    });
}

/// `handle_event` style: the state carries data and one function sees both.
struct Counter;

#[derive(Clone, Debug, PartialEq)]
enum Count {
    Even(u32),
    Odd(u32),
}

impl GenStatem for Counter {
    type State = Count;
    type Call = ();
    type Reply = Count;
    type Cast = u32;
    type Info = ();
    type Timeout = ();
    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(Count::Even(0)))
    }
    fn handle_event(&mut self, state: &Count, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match (state, event) {
            (Count::Even(n) | Count::Odd(n), Event::Cast(k)) => {
                let m = n + k;
                Transition::to(if m % 2 == 0 { Count::Even(m) } else { Count::Odd(m) })
            }
            (s, Event::Call((), _)) => Transition::keep().reply(s.clone()),
            _ => Transition::keep(),
        }
    }
}

#[test]
fn handle_event_style_machine_sees_state_and_event_together() {
    run(|| {
        let m = gen_statem::start(Counter).unwrap();
        m.cast(3);
        assert_eq!(m.call(()), Ok(Count::Odd(3)));
        m.cast(5);
        assert_eq!(m.call(()), Ok(Count::Even(8)));
    });
}

// ------------------------------------------------------------------------------------------
// The probe machine: logs every event it handles
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum St {
    A,
    B,
    C,
    /// `Post` here postpones the event *and* goes to C.
    D,
}

enum Cmd {
    /// Log `N{n}`.
    Note(u32),
    /// Postponed in state A; logged `P{n}` elsewhere.
    Post(u32),
    Go(St),
    /// `Transition::to(current state)`.
    Same,
    Keep,
    /// Go to a state and insert `Note` events.
    GoInsert(St, Vec<u32>),
    /// Insert `Note` events (no state change).
    Insert(Vec<u32>),
    /// Insert `Go(state)` (logged `IGo`), then `Note` events; no state change now.
    InsertGo(St, Vec<u32>),
    ArmEvent(Duration),
    /// Arm the event timeout and insert `Note` events in the same transition.
    ArmEventInsert(Duration, Vec<u32>),
    ArmState(Duration),
    ArmNamed(&'static str, Duration),
    CancelNamed(&'static str),
    /// Block the machine inside this handler until released (or the sender is dropped).
    Block(Receiver<()>),
    /// Say so on the first channel, then block like `Block`.
    BlockTold(Sender<()>, Receiver<()>),
}

enum Req {
    /// Reply once everything sent before was handled.
    Sync,
    /// Postponed in state A (telling the sender), answered elsewhere.
    PostCall(Sender<()>),
    /// Hand the reply handle to someone else.
    DeferTo(Sender<smarm::gen_server::ReplyTo<u32>>),
    /// Stop with a reply.
    StopWith(DownReason, u32),
}

type Log = Arc<Mutex<Vec<String>>>;

struct Probe<const ENTER: bool> {
    log: Log,
    /// Every timeout event, with when it was handled.
    fired: Sender<(String, Instant)>,
    /// Arm this state timeout on entering B.
    enter_b_state_timeout: Option<Duration>,
}

impl<const ENTER: bool> Probe<ENTER> {
    fn push(&self, state: &St, what: String) {
        self.log.lock().unwrap().push(format!("{what}@{state:?}"));
    }
}

impl<const ENTER: bool> GenStatem for Probe<ENTER> {
    type State = St;
    type Call = Req;
    type Reply = u32;
    type Cast = Cmd;
    type Info = u32;
    type Timeout = ();
    const STATE_ENTER: bool = ENTER;

    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(St::A))
    }

    fn handle_event(&mut self, state: &St, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match event {
            Event::Enter(old) => {
                self.push(state, format!("Enter({old:?})"));
                match (state, self.enter_b_state_timeout) {
                    (St::B, Some(d)) => Transition::keep().state_timeout(d),
                    _ => Transition::keep(),
                }
            }
            Event::EventTimeout(_) | Event::StateTimeout(_) | Event::Timeout(..) => {
                let what = format!("{event:?}");
                self.push(state, what.clone());
                let _ = self.fired.send((what, Instant::now()));
                Transition::keep()
            }
            Event::Info(smarm::gen_server::Info::Msg(n)) => {
                self.push(state, format!("Info{n}"));
                Transition::keep()
            }
            Event::Info(_) => Transition::keep(),
            Event::Internal(Cmd::Note(n)) => {
                self.push(state, format!("I{n}"));
                Transition::keep()
            }
            Event::Internal(Cmd::Go(s)) => {
                self.push(state, format!("IGo({s:?})"));
                Transition::to(*s)
            }
            Event::Internal(_) => Transition::keep(),
            Event::Call(req, from) => self.call(state, req, from),
            Event::Cast(cmd) => self.cast(state, cmd),
        }
    }

    fn terminate(&mut self, reason: &DownReason, state: &St) {
        self.push(state, format!("terminate {reason:?}"));
    }
}

impl<const ENTER: bool> Probe<ENTER> {
    fn call(&mut self, state: &St, req: &Req, from: &Caller<u32>) -> Transition<Self> {
        match req {
            Req::Sync => Transition::keep().reply(0),
            Req::PostCall(told) if *state == St::A => {
                self.push(state, "postpone PostCall".into());
                let _ = told.send(());
                Transition::keep().postpone()
            }
            Req::PostCall(_) => {
                self.push(state, "PostCall".into());
                Transition::keep().reply(1)
            }
            Req::DeferTo(tx) => {
                tx.send(from.defer()).unwrap();
                Transition::keep()
            }
            Req::StopWith(r, n) => Transition::stop(r.clone()).reply(*n),
        }
    }

    fn cast(&mut self, state: &St, cmd: &Cmd) -> Transition<Self> {
        match cmd {
            Cmd::Note(n) => {
                self.push(state, format!("N{n}"));
                Transition::keep()
            }
            Cmd::Post(n) if *state == St::A => {
                self.push(state, format!("postpone P{n}"));
                Transition::keep().postpone()
            }
            Cmd::Post(n) if *state == St::D => {
                self.push(state, format!("postpone P{n}, Go(C)"));
                Transition::to(St::C).postpone()
            }
            Cmd::Post(n) => {
                self.push(state, format!("P{n}"));
                Transition::keep()
            }
            Cmd::Go(s) => {
                self.push(state, format!("Go({s:?})"));
                Transition::to(*s)
            }
            Cmd::Same => {
                self.push(state, "Same".into());
                Transition::to(*state)
            }
            Cmd::Keep => {
                self.push(state, "Keep".into());
                Transition::keep()
            }
            Cmd::GoInsert(s, ns) => {
                self.push(state, format!("GoInsert({s:?})"));
                ns.iter().fold(Transition::to(*s), |t, n| t.next_event(Cmd::Note(*n)))
            }
            Cmd::Insert(ns) => {
                self.push(state, "Insert".into());
                ns.iter().fold(Transition::keep(), |t, n| t.next_event(Cmd::Note(*n)))
            }
            Cmd::InsertGo(s, ns) => {
                self.push(state, format!("InsertGo({s:?})"));
                ns.iter().fold(Transition::keep().next_event(Cmd::Go(*s)), |t, n| t.next_event(Cmd::Note(*n)))
            }
            Cmd::ArmEvent(d) => {
                self.push(state, "ArmEvent".into());
                Transition::keep().event_timeout(*d)
            }
            Cmd::ArmEventInsert(d, ns) => {
                self.push(state, "ArmEventInsert".into());
                ns.iter().fold(Transition::keep().event_timeout(*d), |t, n| t.next_event(Cmd::Note(*n)))
            }
            Cmd::ArmState(d) => {
                self.push(state, "ArmState".into());
                Transition::keep().state_timeout(*d)
            }
            Cmd::ArmNamed(n, d) => {
                self.push(state, format!("ArmNamed({n})"));
                Transition::keep().timeout(*n, *d)
            }
            Cmd::CancelNamed(n) => {
                self.push(state, format!("CancelNamed({n})"));
                Transition::keep().cancel_timeout(*n)
            }
            Cmd::Block(release) => {
                let _ = release.recv();
                Transition::keep()
            }
            Cmd::BlockTold(told, release) => {
                let _ = told.send(());
                let _ = release.recv();
                Transition::keep()
            }
        }
    }
}

/// A running probe, its log and its timeout events.
struct Fixture<const ENTER: bool> {
    m: StatemRef<Probe<ENTER>>,
    log: Log,
    fired: Receiver<(String, Instant)>,
}

fn probe<const ENTER: bool>(enter_b_state_timeout: Option<Duration>) -> Fixture<ENTER> {
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    let (fired_tx, fired) = channel();
    let m = gen_statem::start(Probe::<ENTER> { log: log.clone(), fired: fired_tx, enter_b_state_timeout }).unwrap();
    Fixture { m, log, fired }
}

impl<const ENTER: bool> Fixture<ENTER> {
    /// The log, once everything sent before has been handled.
    fn log(&self) -> Vec<String> {
        assert_eq!(self.m.call(Req::Sync), Ok(0));
        self.log.lock().unwrap().clone()
    }
    fn next_fired(&self) -> (String, Instant) {
        self.fired.recv_timeout(GUARD).expect("no timeout fired")
    }
}

fn logged(f: &Fixture<false>) -> Vec<String> {
    f.log()
}

// ------------------------------------------------------------------------------------------
// State enter
// ------------------------------------------------------------------------------------------

#[test]
fn state_enter_runs_for_the_initial_state_and_on_every_state_change() {
    run(|| {
        let f = probe::<true>(None);
        f.m.cast(Cmd::Go(St::B));
        f.m.cast(Cmd::Same);
        f.m.cast(Cmd::Keep);
        f.m.cast(Cmd::Go(St::C));
        f.m.cast(Cmd::Go(St::A));
        assert_eq!(
            f.log(),
            [
                "Enter(A)@A",
                "Go(B)@A",
                "Enter(A)@B",
                "Same@B",
                "Keep@B",
                "Go(C)@B",
                "Enter(B)@C",
                "Go(A)@C",
                "Enter(C)@A",
            ]
        );
    });
}

#[test]
fn no_enter_calls_without_state_enter() {
    run(|| {
        let f = probe::<false>(None);
        f.m.cast(Cmd::Go(St::B));
        f.m.cast(Cmd::Go(St::A));
        assert_eq!(logged(&f), ["Go(B)@A", "Go(A)@B"]);
    });
}

#[test]
fn actions_of_a_state_enter_call_apply() {
    run(|| {
        let f = probe::<true>(Some(20 * MS));
        let start = Instant::now();
        f.m.cast(Cmd::Go(St::B));
        let (what, at) = f.next_fired();
        assert_eq!(what, "StateTimeout");
        assert!(at.duration_since(start) >= 20 * MS);
        assert_eq!(f.log(), ["Enter(A)@A", "Go(B)@A", "Enter(A)@B", "StateTimeout@B"]);
    });
}

/// What [`BadEnter`]'s state-enter call for `Door::Open` returns.
#[derive(Clone, Copy, Debug)]
enum EnterAction {
    Fine,
    StateChange,
    Postpone,
    NextEvent,
    Reply,
}

/// Enters `Open` with `action`; reports the reason its `terminate` saw.
struct BadEnter {
    action: EnterAction,
    terminated: Sender<DownReason>,
}

impl GenStatem for BadEnter {
    type State = Door;
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Timeout = ();
    const STATE_ENTER: bool = true;
    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(Door::Locked))
    }
    fn handle_event(&mut self, state: &Door, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match (state, event) {
            (Door::Open, Event::Enter(_)) => match self.action {
                EnterAction::Fine => Transition::to(Door::Open).state_timeout(GUARD),
                EnterAction::StateChange => Transition::to(Door::Locked),
                EnterAction::Postpone => Transition::keep().postpone(),
                EnterAction::NextEvent => Transition::keep().next_event(()),
                EnterAction::Reply => Transition::keep().reply(()),
            },
            (Door::Locked, Event::Cast(())) => Transition::to(Door::Open),
            (_, Event::Call((), _)) => Transition::keep().reply(()),
            _ => Transition::keep(),
        }
    }
    fn terminate(&mut self, reason: &DownReason, _state: &Door) {
        let _ = self.terminated.send(reason.clone());
    }
}

#[test]
fn a_state_enter_call_may_not_change_the_state_postpone_insert_or_reply() {
    run(|| {
        for (action, what) in [
            (EnterAction::StateChange, "a state change"),
            (EnterAction::Postpone, "postpone"),
            (EnterAction::NextEvent, "next_event"),
            (EnterAction::Reply, "reply"),
        ] {
            let (tx, terminated) = channel();
            let m = gen_statem::start(BadEnter { action, terminated: tx }).unwrap();
            let watch = smarm::monitor(m.pid());
            m.cast(()); // Locked -> Open: the enter call of Open returns `action`
            let expected = DownReason::Custom(format!("gen_statem: {what} in a state enter call"));
            match smarm::recv_signal_timeout(GUARD) {
                Ok(smarm::Signal::Down(d)) => {
                    assert_eq!((d.monitor, d.reason), (watch, expected.clone()), "{action:?}")
                }
                other => panic!("{action:?}: expected a Down, got {other:?}"),
            }
            assert_eq!(terminated.recv_timeout(GUARD), Ok(expected), "{action:?}: terminate");
        }
        // Naming the same state and arming a timeout is allowed (OTP's keep/repeat).
        let (tx, _terminated) = channel();
        let m = gen_statem::start(BadEnter { action: EnterAction::Fine, terminated: tx }).unwrap();
        m.cast(());
        assert_eq!(m.call(()), Ok(()));
    });
}

// ------------------------------------------------------------------------------------------
// Postpone
// ------------------------------------------------------------------------------------------

#[test]
fn postponed_events_are_retried_after_a_state_change_oldest_first() {
    run(|| {
        let f = probe::<false>(None);
        f.m.cast(Cmd::Post(1));
        f.m.cast(Cmd::Post(2));
        f.m.cast(Cmd::Note(3));
        f.m.cast(Cmd::Post(4));
        f.m.cast(Cmd::Go(St::B));
        f.m.cast(Cmd::Note(5));
        assert_eq!(
            logged(&f),
            ["postpone P1@A", "postpone P2@A", "N3@A", "postpone P4@A", "Go(B)@A", "P1@B", "P2@B", "P4@B", "N5@B",]
        );
    });
}

#[test]
fn postponed_events_are_not_retried_without_a_state_change() {
    run(|| {
        let f = probe::<false>(None);
        f.m.cast(Cmd::Post(1));
        f.m.cast(Cmd::Keep);
        f.m.cast(Cmd::Same);
        f.m.cast(Cmd::Note(2));
        assert_eq!(logged(&f), ["postpone P1@A", "Keep@A", "Same@A", "N2@A"]);
        f.m.cast(Cmd::Go(St::C));
        assert_eq!(logged(&f)[4..], ["Go(C)@A", "P1@C"]);
    });
}

#[test]
fn postponed_call_is_answered_after_the_state_change() {
    run(|| {
        let f = probe::<false>(None);
        let m = f.m.clone();
        let (told_tx, told_rx) = channel();
        let caller = smarm::spawn(move || m.call(Req::PostCall(told_tx)));
        told_rx.recv_timeout(GUARD).expect("the call was not postponed");
        assert!(!caller.is_finished());
        f.m.cast(Cmd::Go(St::B));
        assert_eq!(caller.join().unwrap(), Ok(1));
        assert_eq!(logged(&f), ["postpone PostCall@A", "Go(B)@A", "PostCall@B"]);
    });
}

#[test]
fn postponed_events_are_retried_before_events_inserted_earlier() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::Post(1));
        f.m.cast(Cmd::Post(2));
        // Inserts `Go(B)` with `Note(7)` behind it: when `Go(B)` changes the state, `I7` is
        // still pending, and the retried P1, P2 go ahead of it (OTP:
        // `lists:reverse(Postponed, Events)`).
        f.m.cast(Cmd::InsertGo(St::B, vec![7]));
        f.m.cast(Cmd::Note(9));
        release.send(()).unwrap();
        assert_eq!(
            logged(&f),
            ["postpone P1@A", "postpone P2@A", "InsertGo(B)@A", "IGo(B)@A", "P1@B", "P2@B", "I7@B", "N9@B"]
        );
    });
}

#[test]
fn an_event_postponed_again_with_a_state_change_is_retried_before_the_later_ones() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::Post(1));
        f.m.cast(Cmd::Post(2));
        f.m.cast(Cmd::Go(St::D));
        f.m.cast(Cmd::Note(9));
        release.send(()).unwrap();
        // In D, P1 is postponed again and changes the state: it is retried at once, still
        // ahead of P2 (the order they were postponed in), not behind it.
        assert_eq!(
            logged(&f),
            ["postpone P1@A", "postpone P2@A", "Go(D)@A", "postpone P1, Go(C)@D", "P1@C", "P2@C", "N9@C"]
        );
    });
}

// ------------------------------------------------------------------------------------------
// Timeouts
// ------------------------------------------------------------------------------------------

#[test]
fn event_timeout_fires_when_no_event_arrives() {
    run(|| {
        let f = probe::<false>(None);
        let start = Instant::now();
        f.m.cast(Cmd::ArmEvent(25 * MS));
        let (what, at) = f.next_fired();
        assert_eq!(what, "EventTimeout");
        assert!(at.duration_since(start) >= 25 * MS, "fired early");
        assert_eq!(logged(&f), ["ArmEvent@A", "EventTimeout@A"]);
    });
}

/// Sends `arm`, then `interrupt` while the machine is blocked (so both are queued when it
/// looks again), then waits past the timeout and returns the log.
fn armed_then_interrupted(
    f: &Fixture<false>,
    arm: Cmd,
    interrupt: impl FnOnce(&StatemRef<Probe<false>>),
) -> Vec<String> {
    let release = blocker(&f.m);
    f.m.cast(arm);
    interrupt(&f.m);
    release.send(()).unwrap();
    smarm::sleep(80 * MS); // well past the 20 ms timeout: it must not fire
    logged(f)
}

#[test]
fn event_timeout_is_cancelled_by_a_cast() {
    run(|| {
        let f = probe::<false>(None);
        let log = armed_then_interrupted(&f, Cmd::ArmEvent(20 * MS), |m| m.cast(Cmd::Note(1)));
        assert_eq!(log, ["ArmEvent@A", "N1@A"]);
        assert!(f.fired.try_recv().is_err());
    });
}

#[test]
fn event_timeout_is_cancelled_by_a_state_or_named_timeout_event() {
    run(|| {
        for (arm, fired) in [(Cmd::ArmState(10 * MS), "StateTimeout"), (Cmd::ArmNamed("t", 10 * MS), "Timeout(\"t\")")]
        {
            let f = probe::<false>(None);
            let armed = format!("{}@A", if fired == "StateTimeout" { "ArmState" } else { "ArmNamed(t)" });
            // The 10 ms timeout fires first; its event must cancel the 40 ms event timeout.
            let log = armed_then_interrupted(&f, arm, |m| m.cast(Cmd::ArmEvent(40 * MS)));
            assert_eq!(log, [armed, "ArmEvent@A".to_string(), format!("{fired}@A")]);
            assert_eq!(f.fired.try_recv().map(|(what, _)| what), Ok(fired.to_string()));
            assert!(f.fired.try_recv().is_err(), "the event timeout fired after the {fired} event");
        }
    });
}

#[test]
fn event_timeout_is_cancelled_by_an_info() {
    run(|| {
        let f = probe::<false>(None);
        let log = armed_then_interrupted(&f, Cmd::ArmEvent(20 * MS), |m| m.info(9));
        assert_eq!(log, ["ArmEvent@A", "Info9@A"]);
    });
}

#[test]
fn event_timeout_is_cancelled_by_a_call() {
    run(|| {
        let f = probe::<false>(None);
        let (tx, rx) = channel();
        let log = armed_then_interrupted(&f, Cmd::ArmEvent(20 * MS), move |m| {
            // The call is answered later (deferred), so it cannot block the sender here.
            let m = m.clone();
            smarm::spawn(move || m.call(Req::DeferTo(tx)));
        });
        // The call's deferred reply handle arrived: the call was an event.
        let _reply = rx.recv_timeout(GUARD).unwrap();
        assert_eq!(log, ["ArmEvent@A"]);
        assert!(f.fired.try_recv().is_err(), "the event timeout fired despite the call");
    });
}

#[test]
fn event_timeout_is_cancelled_by_an_inserted_event() {
    run(|| {
        let f = probe::<false>(None);
        // The transition that arms the timeout also inserts an event: no external event
        // follows, so only the inserted one can cancel it (OTP: an inserted event counts as
        // arrived).
        let log = armed_then_interrupted(&f, Cmd::ArmEventInsert(20 * MS, vec![1]), |_| {});
        assert_eq!(log, ["ArmEventInsert@A", "I1@A"]);
        assert!(f.fired.try_recv().is_err(), "the event timeout fired despite the inserted event");
    });
}

#[test]
fn state_timeout_is_cancelled_by_a_state_change() {
    run(|| {
        let f = probe::<false>(None);
        let log = armed_then_interrupted(&f, Cmd::ArmState(20 * MS), |m| m.cast(Cmd::Go(St::B)));
        assert_eq!(log, ["ArmState@A", "Go(B)@A"]);
    });
}

#[test]
fn state_timeout_survives_events_and_transitions_to_the_same_state() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::ArmState(40 * MS));
        f.m.cast(Cmd::Note(1));
        f.m.cast(Cmd::Same);
        f.m.cast(Cmd::Keep);
        f.m.info(2);
        let start = Instant::now();
        release.send(()).unwrap();
        let (what, at) = f.next_fired();
        assert_eq!(what, "StateTimeout");
        assert!(at.duration_since(start) >= 40 * MS, "fired early");
        assert_eq!(logged(&f), ["ArmState@A", "N1@A", "Same@A", "Keep@A", "Info2@A", "StateTimeout@A"]);
    });
}

#[test]
fn named_timeout_survives_events_and_state_changes() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::ArmNamed("t", 40 * MS));
        f.m.cast(Cmd::Note(1));
        f.m.cast(Cmd::Go(St::B));
        f.m.cast(Cmd::Go(St::C));
        let start = Instant::now();
        release.send(()).unwrap();
        let (what, at) = f.next_fired();
        assert_eq!(what, "Timeout(\"t\")");
        assert!(at.duration_since(start) >= 40 * MS, "fired early");
        assert_eq!(logged(&f), ["ArmNamed(t)@A", "N1@A", "Go(B)@A", "Go(C)@B", "Timeout(\"t\")@C"]);
    });
}

#[test]
fn timeouts_of_duration_max_never_fire_and_do_not_stop_the_machine() {
    run(|| {
        let f = probe::<false>(None);
        f.m.cast(Cmd::ArmState(Duration::MAX));
        f.m.cast(Cmd::ArmNamed("t", Duration::MAX));
        f.m.cast(Cmd::ArmEvent(Duration::MAX));
        // Alive (a deadline past what `Instant` holds used to panic the machine).
        assert_eq!(f.m.call(Req::Sync), Ok(0));
        assert!(f.fired.try_recv().is_err());
    });
}

#[test]
fn rearming_a_named_timeout_replaces_the_pending_one() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::ArmNamed("t", 10 * MS));
        f.m.cast(Cmd::ArmNamed("t", 120 * MS));
        let start = Instant::now();
        release.send(()).unwrap();
        let (what, at) = f.next_fired();
        assert_eq!(what, "Timeout(\"t\")");
        assert!(at.duration_since(start) >= 120 * MS, "the first arming fired");
        smarm::sleep(50 * MS);
        assert_eq!(logged(&f), ["ArmNamed(t)@A", "ArmNamed(t)@A", "Timeout(\"t\")@A"]);
    });
}

#[test]
fn cancelling_a_named_timeout_prevents_it() {
    run(|| {
        let f = probe::<false>(None);
        let log = armed_then_interrupted(&f, Cmd::ArmNamed("t", 20 * MS), |m| m.cast(Cmd::CancelNamed("t")));
        assert_eq!(log, ["ArmNamed(t)@A", "CancelNamed(t)@A"]);
    });
}

#[test]
fn named_timeouts_are_independent() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::ArmNamed("a", 20 * MS));
        f.m.cast(Cmd::ArmNamed("b", 40 * MS));
        f.m.cast(Cmd::CancelNamed("a"));
        release.send(()).unwrap();
        let (what, _) = f.next_fired();
        assert_eq!(what, "Timeout(\"b\")");
        smarm::sleep(40 * MS);
        assert_eq!(logged(&f), ["ArmNamed(a)@A", "ArmNamed(b)@A", "CancelNamed(a)@A", "Timeout(\"b\")@A"]);
    });
}

#[test]
fn expired_timeout_is_handled_before_messages_that_arrived_after_its_deadline() {
    run(|| {
        for (arm, fired) in [(Cmd::ArmState(20 * MS), "StateTimeout"), (Cmd::ArmNamed("t", 20 * MS), "Timeout(\"t\")")]
        {
            let armed = format!("{}@A", if fired == "StateTimeout" { "ArmState" } else { "ArmNamed(t)" });
            let f = probe::<false>(None);
            let release = blocker(&f.m);
            f.m.cast(arm);
            // Queued when the timeout is armed, so before its deadline: handled before it.
            f.m.cast(Cmd::Note(1));
            let (entered_tx, entered) = channel();
            let (release_busy, busy) = channel();
            f.m.cast(Cmd::BlockTold(entered_tx, busy));
            release.send(()).unwrap();
            entered.recv_timeout(GUARD).unwrap();
            // The timeout was armed before the machine got busy; once this wait is over its
            // deadline has passed (a sleep never ends early). Everything sent from here on
            // arrives after the deadline, while the machine is still busy.
            smarm::sleep(20 * MS);
            f.m.cast(Cmd::Note(2));
            f.m.info(3);
            f.m.cast(Cmd::Note(4));
            release_busy.send(()).unwrap();
            assert_eq!(f.next_fired().0, fired);
            assert_eq!(
                logged(&f),
                [armed, "N1@A".into(), format!("{fired}@A"), "N2@A".into(), "Info3@A".into(), "N4@A".into()]
            );
        }
    });
}

#[test]
fn zero_timeouts_run_before_queued_messages() {
    run(|| {
        // OTP: a zero timeout's event comes before any external event not yet received.
        for (arm, fired) in
            [(Cmd::ArmState(Duration::ZERO), "StateTimeout"), (Cmd::ArmNamed("t", Duration::ZERO), "Timeout(\"t\")")]
        {
            let armed = format!("{}@A", if fired == "StateTimeout" { "ArmState" } else { "ArmNamed(t)" });
            let f = probe::<false>(None);
            let release = blocker(&f.m);
            f.m.cast(arm);
            f.m.cast(Cmd::Note(1));
            release.send(()).unwrap();
            assert_eq!(logged(&f), [armed, format!("{fired}@A"), "N1@A".into()]);
        }
    });
}

/// Feeds itself: each `Feed` casts the next one before it returns, so whenever the machine
/// looks for its next event a message is queued.
struct Feeder {
    me: Option<StatemRef<Feeder>>,
    armed_at: Option<Instant>,
    /// The last feed handled.
    fed: u32,
    /// Feeds handled before the timeout, and the timeout's delay after arming.
    timeout: Option<(u32, Duration)>,
    done: Sender<(Option<(u32, Duration)>, u32)>,
}

enum Feed {
    Start(StatemRef<Feeder>, FeedArm),
    Next(u32),
}

#[derive(Clone, Copy, Debug)]
enum FeedArm {
    State,
    Named,
}

/// Feeds handled after the timeout before the stream stops.
const FEEDS_AFTER: u32 = 3;

impl GenStatem for Feeder {
    type State = St;
    type Call = ();
    type Reply = ();
    type Cast = Feed;
    type Info = ();
    type Timeout = ();

    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(St::A))
    }

    fn handle_event(&mut self, _state: &St, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match event {
            Event::Cast(Feed::Start(me, arm)) => {
                me.cast(Feed::Next(0));
                self.me = Some(me.clone());
                self.armed_at = Some(Instant::now());
                match arm {
                    FeedArm::State => Transition::keep().state_timeout(20 * MS),
                    FeedArm::Named => Transition::keep().timeout("t", 20 * MS),
                }
            }
            Event::Cast(Feed::Next(n)) => {
                self.fed = *n;
                let armed_at = self.armed_at.unwrap();
                let enough = self.timeout.is_some_and(|(at, _)| *n >= at + FEEDS_AFTER);
                // The guard only ends the test when the timeout never comes.
                if enough || armed_at.elapsed() > GUARD {
                    let _ = self.done.send((self.timeout, *n));
                } else {
                    self.me.as_ref().unwrap().cast(Feed::Next(n + 1));
                }
                Transition::keep()
            }
            Event::StateTimeout(_) | Event::Timeout(..) => {
                self.timeout = Some((self.fed, self.armed_at.unwrap().elapsed()));
                Transition::keep()
            }
            _ => Transition::keep(),
        }
    }
}

#[test]
fn expired_timeout_is_not_starved_by_a_stream_of_messages() {
    run(|| {
        for arm in [FeedArm::State, FeedArm::Named] {
            let (done_tx, done) = channel();
            let m =
                gen_statem::start(Feeder { me: None, armed_at: None, fed: 0, timeout: None, done: done_tx }).unwrap();
            m.cast(Feed::Start(m.clone(), arm));
            let (timeout, last) = done.recv().unwrap();
            let (fed_before, after) = timeout.unwrap_or_else(|| panic!("{arm:?}: starved by {last} messages"));
            assert!(after >= 20 * MS, "{arm:?}: fired early, {after:?} after arming");
            // The stream went on after the timeout: it was handled amid it, not after it.
            assert_eq!(last, fed_before + FEEDS_AFTER, "{arm:?}");
        }
    });
}

// ------------------------------------------------------------------------------------------
// Inserted events
// ------------------------------------------------------------------------------------------

#[test]
fn inserted_events_run_before_queued_external_events_in_order() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::Insert(vec![1, 2, 3]));
        f.m.cast(Cmd::Note(9));
        release.send(()).unwrap();
        assert_eq!(logged(&f), ["Insert@A", "I1@A", "I2@A", "I3@A", "N9@A"]);
    });
}

#[test]
fn inserted_events_run_before_retried_postponed_events() {
    run(|| {
        let f = probe::<false>(None);
        let release = blocker(&f.m);
        f.m.cast(Cmd::Post(1));
        f.m.cast(Cmd::GoInsert(St::B, vec![7, 8]));
        f.m.cast(Cmd::Note(9));
        release.send(()).unwrap();
        assert_eq!(logged(&f), ["postpone P1@A", "GoInsert(B)@A", "I7@B", "I8@B", "P1@B", "N9@B"]);
    });
}

// ------------------------------------------------------------------------------------------
// Calls
// ------------------------------------------------------------------------------------------

#[test]
fn call_without_timeout_waits_past_gen_servers_5_s_default() {
    // Longer than gen_server's 5 s default by a clear margin: with any finite default up to
    // 5.5 s the call would give up before the reply.
    const DELAY: Duration = Duration::from_millis(5500);
    assert!(DELAY > smarm::gen_server::DEFAULT_CALL_TIMEOUT);
    run(|| {
        let f = probe::<false>(None);
        let (tx, rx) = channel::<smarm::gen_server::ReplyTo<u32>>();
        smarm::spawn(move || {
            let r = rx.recv().unwrap();
            smarm::sleep(DELAY);
            r.reply(5);
        });
        let start = Instant::now();
        assert_eq!(f.m.call(Req::DeferTo(tx)), Ok(5));
        let waited = start.elapsed();
        assert!(waited >= DELAY, "the reply came after only {waited:?}");
        // The machine still serves.
        assert_eq!(f.m.call(Req::Sync), Ok(0));
    });
}

#[test]
fn call_timeout_gives_up() {
    run(|| {
        let f = probe::<false>(None);
        let (tx, rx) = channel::<smarm::gen_server::ReplyTo<u32>>();
        assert_eq!(f.m.call_timeout(Req::DeferTo(tx), 20 * MS), Err(CallError::Timeout));
        // A late reply is discarded.
        rx.recv().unwrap().reply(1);
        assert_eq!(f.m.call(Req::Sync), Ok(0));
    });
}

#[test]
fn stop_transition_runs_terminate_before_the_reply() {
    run(|| {
        let f = probe::<false>(None);
        assert_eq!(f.m.call(Req::StopWith(DownReason::Custom("done".into()), 3)), Ok(3));
        assert_eq!(*f.log.lock().unwrap(), ["terminate Custom(\"done\")@A"]);
        assert_eq!(f.m.exit_reason(), Some(DownReason::Custom("done".into())));
    });
}

/// Blocks `m` in a callback until the returned sender is used: everything sent meanwhile
/// is queued when the machine looks at its mailbox again.
fn blocker<const ENTER: bool>(m: &StatemRef<Probe<ENTER>>) -> Sender<()> {
    let (tx, rx) = channel();
    m.cast(Cmd::Block(rx));
    tx
}

// ------------------------------------------------------------------------------------------
// terminate
// ------------------------------------------------------------------------------------------

/// Logs each `terminate` call, then panics in it.
struct PanickyTerminate {
    log: Log,
}

impl GenStatem for PanickyTerminate {
    type State = St;
    type Call = ();
    type Reply = ();
    /// Stop with this reason.
    type Cast = DownReason;
    /// Panic in `handle_event`.
    type Info = ();
    type Timeout = ();

    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(St::A))
    }

    fn handle_event(&mut self, _state: &St, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match event {
            Event::Cast(reason) => Transition::stop(reason.clone()),
            Event::Call(..) => Transition::stop(DownReason::Custom("call".into())).reply(()),
            Event::Info(_) => panic!("handler boom"),
            _ => Transition::keep(),
        }
    }

    fn terminate(&mut self, reason: &DownReason, _state: &St) {
        self.log.lock().unwrap().push(format!("terminate {reason:?}"));
        panic!("terminate boom");
    }
}

#[test]
fn a_panicking_terminate_runs_once() {
    run(|| {
        for how in ["stop transition", "stop transition with a reply", "StatemRef::stop", "handler panic"] {
            let log: Log = Arc::new(Mutex::new(Vec::new()));
            let m = gen_statem::start(PanickyTerminate { log: log.clone() }).unwrap();
            let mon = smarm::monitor(m.pid());
            let first = match how {
                "stop transition" => {
                    m.cast(DownReason::Custom("bye".into()));
                    "terminate Custom(\"bye\")"
                }
                "stop transition with a reply" => {
                    // terminate runs before the reply, and panics: no reply.
                    assert_eq!(m.call(()), Err(CallError::Down(DownReason::Panic("terminate boom".into()))));
                    "terminate Custom(\"call\")"
                }
                "StatemRef::stop" => {
                    // As OTP's `stop`, which raises the real exit reason: terminate's crash.
                    assert_eq!(
                        m.stop(DownReason::Custom("asked".into())),
                        Err(CallError::Down(DownReason::Panic("terminate boom".into())))
                    );
                    "terminate Custom(\"asked\")"
                }
                _ => {
                    m.info(());
                    "terminate Panic(\"handler boom\")"
                }
            };
            let down = match smarm::recv_signal_timeout(GUARD) {
                Ok(smarm::Signal::Down(d)) => d,
                other => panic!("{how}: expected a Down, got {other:?}"),
            };
            assert_eq!(down.monitor, mon, "{how}");
            // As in OTP, the machine exits with terminate's crash.
            assert_eq!(down.reason, DownReason::Panic("terminate boom".into()), "{how}");
            assert_eq!(*log.lock().unwrap(), [first], "{how}");
        }
    });
}

/// A machine that, given its own handle, stops itself and calls itself, and reports what
/// `stop` and `call` said (as OTP, both are `calling_self` errors).
struct SelfCaller {
    report: Sender<(Result<(), CallError>, Result<u32, CallError>)>,
}

impl GenStatem for SelfCaller {
    type State = ();
    type Call = ();
    type Reply = u32;
    type Cast = StatemRef<SelfCaller>;
    type Info = ();
    type Timeout = ();

    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok(Transition::to(()))
    }

    fn handle_event(&mut self, _: &(), event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        match event {
            Event::Cast(me) => {
                self.report.send((me.stop(DownReason::Normal), me.call(()))).unwrap();
                Transition::keep()
            }
            Event::Call(..) => Transition::keep().reply(7),
            _ => Transition::keep(),
        }
    }
}

#[test]
fn stop_or_call_of_itself_is_calling_self() {
    run(|| {
        let (tx, rx) = channel();
        let m = gen_statem::start(SelfCaller { report: tx }).unwrap();
        m.cast(m.clone());
        assert_eq!(rx.recv_timeout(GUARD), Ok((Err(CallError::CallingSelf), Err(CallError::CallingSelf))));
        // The machine goes on.
        assert_eq!(m.call(()), Ok(7));
    });
}
