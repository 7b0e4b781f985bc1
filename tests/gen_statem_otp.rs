//! gen_statem: the OTP features of issue 13 (`start_link`, named machines, timeout event
//! content, cancelling a state timeout without a state change, `repeat_state`, actions
//! from `init`, state-enter per instance, the callback context).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use smarm::channel::{channel, Receiver, Sender};
use smarm::gen_statem::{self, CallError, Ctx, Event, GenStatem, StartError, StartOpts, Transition};
use smarm::{DownReason, Runtime, Signal};

const GUARD: Duration = Duration::from_secs(10);

fn one_thread<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    Runtime::builder().threads(1).build().unwrap().run(f).unwrap()
}

type Log = Arc<Mutex<Vec<String>>>;

#[derive(Clone, Debug, PartialEq)]
enum St {
    A,
    B,
}

/// What a cast asks the machine to do.
#[derive(Debug)]
enum Cmd {
    ArmEvent(Duration, u32),
    ArmState(Duration, u32),
    ArmNamed(&'static str, Duration, u32),
    CancelState,
    Go(St),
    Repeat,
    Postpone,
    Stop,
}

/// Logs every event (with its state) and runs the commands it is cast.
struct Machine {
    log: Log,
    enter: bool,
    /// What `init` returns besides the initial state `A`.
    init: fn(Transition<Machine>) -> Transition<Machine>,
    /// Told of every timeout event (waiting by calling would cancel an event timeout).
    fired: Sender<String>,
}

impl Machine {
    fn new(enter: bool) -> (Receiver<String>, Machine) {
        let (fired, rx) = channel();
        (rx, Machine { log: Log::default(), enter, init: |t| t, fired })
    }
}

impl GenStatem for Machine {
    type State = St;
    type Call = ();
    type Reply = Vec<String>;
    type Cast = Cmd;
    type Info = ();
    type Timeout = u32;

    fn state_enter(&self) -> bool {
        self.enter
    }
    fn init(&mut self, _ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        Ok((self.init)(Transition::to(St::A)))
    }
    fn handle_event(&mut self, state: &St, event: &Event<Self>, _ctx: &Ctx<Self>) -> Transition<Self> {
        let what = match event {
            Event::Cast(c) => format!("{c:?}"),
            Event::Internal(c) => format!("internal {c:?}"),
            Event::Enter(old) => format!("enter from {old:?}"),
            Event::EventTimeout(n) => format!("event timeout {n}"),
            Event::StateTimeout(n) => format!("state timeout {n}"),
            Event::Timeout(name, n) => format!("timeout {name} {n}"),
            Event::Call(..) => return Transition::keep().reply(self.log.lock().unwrap().clone()),
            Event::Info(_) => "info".into(),
        };
        self.log.lock().unwrap().push(format!("{what} @{state:?}"));
        if matches!(event, Event::EventTimeout(_) | Event::StateTimeout(_) | Event::Timeout(..)) {
            let _ = self.fired.send(what);
        }
        let cmd = match event {
            Event::Cast(c) | Event::Internal(c) => c,
            _ => return Transition::keep(),
        };
        match cmd {
            Cmd::ArmEvent(d, n) => Transition::keep().event_timeout_with(*d, *n),
            Cmd::ArmState(d, n) => Transition::keep().state_timeout_with(*d, *n),
            Cmd::ArmNamed(name, d, n) => Transition::keep().timeout_with(*name, *d, *n),
            Cmd::CancelState => Transition::keep().cancel_state_timeout(),
            Cmd::Go(s) => Transition::to(s.clone()),
            Cmd::Repeat => Transition::repeat_state(),
            Cmd::Postpone if *state == St::A => Transition::keep().postpone(),
            Cmd::Stop => Transition::stop(DownReason::Custom("asked".into())),
            _ => Transition::keep(),
        }
    }
}

fn log_of(m: &gen_statem::StatemRef<Machine>) -> Vec<String> {
    m.call(()).unwrap()
}

/// The next timeout event the machine handled.
fn fired(rx: &Receiver<String>) -> String {
    rx.recv_timeout(GUARD).expect("no timeout fired")
}

#[test]
fn every_timeout_delivers_its_content_with_its_event() {
    one_thread(|| {
        let (rx, m) = Machine::new(false);
        let m = gen_statem::start(m).unwrap();
        m.cast(Cmd::ArmEvent(Duration::from_millis(1), 1));
        assert_eq!(fired(&rx), "event timeout 1");
        m.cast(Cmd::ArmState(Duration::from_millis(1), 2));
        assert_eq!(fired(&rx), "state timeout 2");
        m.cast(Cmd::ArmNamed("n", Duration::from_millis(1), 3));
        assert_eq!(fired(&rx), "timeout n 3");
        assert_eq!(log_of(&m).len(), 6);
    });
}

#[test]
fn a_state_timeout_can_be_cancelled_without_a_state_change() {
    one_thread(|| {
        let (rx, m) = Machine::new(false);
        let m = gen_statem::start(m).unwrap();
        // Both queued before the machine runs: the cancel is ahead of the timeout's event,
        // whenever that falls due. The named timeout, later, shows that time has passed.
        m.cast(Cmd::ArmState(Duration::from_millis(2), 1));
        m.cast(Cmd::CancelState);
        m.cast(Cmd::ArmNamed("witness", Duration::from_millis(20), 2));
        assert_eq!(fired(&rx), "timeout witness 2");
        let l = log_of(&m);
        assert_eq!(
            l,
            ["ArmState(2ms, 1) @A", "CancelState @A", "ArmNamed(\"witness\", 20ms, 2) @A", "timeout witness 2 @A"]
        );
    });
}

#[test]
fn repeat_state_reruns_the_enter_call_without_a_state_change() {
    one_thread(|| {
        let (rx, m) = Machine::new(true);
        let m = gen_statem::start(m).unwrap();
        m.cast(Cmd::Postpone);
        m.cast(Cmd::ArmState(Duration::from_millis(1), 7));
        m.cast(Cmd::Repeat);
        // The postponed event stays postponed (no state change) and the state timeout
        // stays armed: it fires in A after the repeated enter call.
        assert_eq!(fired(&rx), "state timeout 7");
        let l = log_of(&m);
        assert_eq!(
            l,
            [
                "enter from A @A",
                "Postpone @A",
                "ArmState(1ms, 7) @A",
                "Repeat @A",
                "enter from A @A",
                "state timeout 7 @A"
            ]
        );
        // A real state change retries the postponed event.
        m.cast(Cmd::Go(St::B));
        assert_eq!(log_of(&m)[6..], ["Go(B) @A", "enter from A @B", "Postpone @B"]);
    });
}

#[test]
fn repeat_state_without_state_enter_is_keep() {
    one_thread(|| {
        let (_fired, m) = Machine::new(false);
        let m = gen_statem::start(m).unwrap();
        m.cast(Cmd::Repeat);
        m.cast(Cmd::Go(St::B));
        assert_eq!(log_of(&m), ["Repeat @A", "Go(B) @A"]);
    });
}

#[test]
fn state_enter_is_chosen_per_instance() {
    one_thread(|| {
        for enter in [false, true] {
            let (_fired, m) = Machine::new(enter);
            let m = gen_statem::start(m).unwrap();
            m.cast(Cmd::Go(St::B));
            let expected: &[&str] =
                if enter { &["enter from A @A", "Go(B) @A", "enter from A @B"] } else { &["Go(B) @A"] };
            assert_eq!(log_of(&m), expected, "enter = {enter}");
        }
    });
}

#[test]
fn actions_returned_from_init_run_before_the_first_message() {
    one_thread(|| {
        let (_fired, mut m) = Machine::new(true);
        m.init = |t| t.next_event(Cmd::Go(St::B)).state_timeout_with(Duration::ZERO, 9);
        let m = gen_statem::start(m).unwrap();
        m.cast(Cmd::ArmNamed("late", Duration::from_secs(3600), 0));
        // init's inserted event first (after the initial enter call), then the zero state
        // timeout: armed in A, it was cancelled by the change to B, so it never fires.
        let l = log_of(&m);
        assert_eq!(l, ["enter from A @A", "internal Go(B) @A", "enter from A @B", "ArmNamed(\"late\", 3600s, 0) @B"]);
    });
}

#[test]
fn a_state_timeout_from_init_fires_with_its_content() {
    one_thread(|| {
        let (rx, mut m) = Machine::new(false);
        m.init = |t| t.state_timeout_with(Duration::from_millis(1), 5);
        let m = gen_statem::start(m).unwrap();
        assert_eq!(fired(&rx), "state timeout 5");
        assert_eq!(log_of(&m), ["state timeout 5 @A"]);
    });
}

#[test]
fn init_that_keeps_postpones_or_replies_fails_to_start() {
    one_thread(|| {
        for (init, what) in [
            ((|_| Transition::keep()) as fn(Transition<Machine>) -> Transition<Machine>, "keep (no initial state)"),
            (|t| t.postpone(), "postpone"),
            (|t| t.reply(vec![]), "reply"),
        ] {
            let (_fired, mut m) = Machine::new(false);
            m.init = init;
            let expected = DownReason::Custom(format!("gen_statem: {what} in init"));
            assert_eq!(gen_statem::start(m).err(), Some(StartError::Init(expected)));
        }
    });
}

#[test]
fn start_link_links_the_machine_to_the_caller() {
    one_thread(|| {
        smarm::trap_exit(true);
        let (_fired, m) = Machine::new(false);
        let m = gen_statem::start_link(m).unwrap();
        m.cast(Cmd::Stop);
        match smarm::recv_signal_timeout(GUARD) {
            Ok(Signal::Exit(x)) => assert_eq!((x.from, x.reason), (m.pid(), DownReason::Custom("asked".into()))),
            other => panic!("expected the linked machine's Exit, got {other:?}"),
        }
    });
}

#[test]
fn named_machines_are_reached_by_name() {
    one_thread(|| {
        let (_fired, m) = Machine::new(false);
        let opts = StartOpts { name: Some("machine".into()), ..Default::default() };
        let m = gen_statem::start_opts(m, opts).unwrap();
        assert_eq!(gen_statem::named::<Machine>("machine").map(|r| r.pid()), Some(m.pid()));
        assert_eq!(gen_statem::cast_named::<Machine>("machine", Cmd::Go(St::B)), Ok(()));
        assert_eq!(gen_statem::call_named::<Machine>("machine", ()), Ok(vec!["Go(B) @A".to_string()]));
        assert_eq!(gen_statem::call_named_timeout::<Machine>("machine", (), GUARD).map(|l| l.len()), Ok(1));
        assert_eq!(gen_statem::call_named::<Machine>("nobody", ()), Err(CallError::NoProc));
        assert_eq!(gen_statem::cast_named::<Machine>("nobody", Cmd::Repeat), Err(CallError::NoProc));
        m.stop(DownReason::Normal).unwrap();
        assert_eq!(gen_statem::call_named::<Machine>("machine", ()), Err(CallError::NoProc));
    });
}

/// Uses its context.
struct Aware;

impl GenStatem for Aware {
    type State = u32;
    type Call = ();
    type Reply = (smarm::Pid, smarm::Pid, Option<String>, u32);
    type Cast = ();
    type Info = ();
    type Timeout = ();
    fn init(&mut self, ctx: &Ctx<Self>) -> Result<Transition<Self>, DownReason> {
        // A message to itself from init, through its own handle.
        ctx.myself().cast(());
        Ok(Transition::to(0))
    }
    fn handle_event(&mut self, n: &u32, event: &Event<Self>, ctx: &Ctx<Self>) -> Transition<Self> {
        match event {
            Event::Cast(()) => Transition::to(n + 1),
            Event::Call(..) => {
                Transition::keep().reply((ctx.pid(), ctx.myself().pid(), ctx.name().map(str::to_owned), *n))
            }
            _ => Transition::keep(),
        }
    }
}

#[test]
fn the_context_gives_the_machines_own_handle_pid_and_name() {
    one_thread(|| {
        let opts = StartOpts { name: Some("aware".into()), ..Default::default() };
        let m = gen_statem::start_opts(Aware, opts).unwrap();
        assert_eq!(m.call(()), Ok((m.pid(), m.pid(), Some("aware".into()), 1)));
        let anon = gen_statem::start(Aware).unwrap();
        assert_eq!(anon.call(()), Ok((anon.pid(), anon.pid(), None, 1)));
    });
}
