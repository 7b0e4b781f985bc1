//! gen_server (SEMANTICS.md, "gen_server").
//!
//! Statement -> tests:
//!
//! - `start` / `start_link` return only after `init` finished:
//!   start_returns_only_after_init_finished, start_link_returns_only_after_init_finished
//! - `Ok(server)`:
//!   start_returns_a_working_server
//! - `Err(reason)` if init stopped or panicked:
//!   start_reports_the_reason_init_stopped_with, start_reports_an_init_panic
//! - name freed before the caller learns:
//!   failed_init_frees_the_name_before_start_returns
//! - `Ignore`:
//!   start_reports_init_ignore
//! - `AlreadyStarted(pid)` when the name is taken:
//!   start_with_a_taken_name_reports_already_started_with_the_holder,
//!   concurrent_starts_under_one_name_yield_exactly_one_server
//! - `start_link` links the caller (where silent, OTP):
//!   start_link_links_the_server_to_the_caller
//! - the server's stop reason is its exit reason (where silent, OTP):
//!   stop_reason_is_the_servers_exit_reason_for_monitors,
//!   init_stop_reason_is_the_servers_exit_reason
//! - `call` default timeout 5 s:
//!   call_default_timeout_is_five_seconds
//! - `call` errors `NoProc` for a dead pid or unknown name, without waiting:
//!   (and without keeping the thread: a_loop_of_calls_failing_with_noproc_lets_the_restart_run,
//!   a_loop_of_sends_to_a_dead_actor_lets_other_actors_run)
//!   call_to_a_stopped_server_is_noproc, call_to_a_killed_server_is_noproc,
//!   call_named_with_an_unknown_name_is_noproc, call_named_with_a_server_of_another_type_is_noproc
//! - `Down(reason)` if the server dies during the call:
//!   call_reports_down_with_the_panic_when_the_handler_panics,
//!   call_reports_down_killed_when_the_server_is_killed_during_the_call,
//!   call_reports_down_with_the_exit_signal_reason,
//!   call_held_by_a_server_that_stops_reports_down_with_the_stop_reason
//! - `Timeout`:
//!   call_without_a_reply_times_out,
//!   a_deferred_reply_dropped_late_still_times_out_at_the_calls_limit
//! - `CallingSelf` (OTP: also for `stop` of oneself):
//!   call_to_itself_is_calling_self, stop_of_itself_is_calling_self
//!   (gen_statem: tests/gen_statem.rs, stop_or_call_of_itself_is_calling_self)
//! - a reply that arrives after a timeout is discarded, never seen later:
//!   late_reply_after_a_timeout_is_discarded,
//!   a_reply_to_a_killed_caller_never_reaches_the_next_actor_in_its_slot,
//!   a_deferred_reply_may_outlive_the_callers_runtime
//! - calls from plain threads and from actors of another runtime (where silent: they work):
//!   call_from_a_plain_thread_gets_its_reply_and_sees_the_server_die,
//!   an_actor_can_call_a_server_of_another_runtime
//! - `cast` always succeeds, even to a dead server:
//!   cast_to_a_dead_server_succeeds, cast_is_delivered_in_order_before_a_later_call
//! - deferred replies from any actor:
//!   deferred_reply_from_another_actor_reaches_the_caller,
//!   deferred_reply_from_a_plain_thread_reaches_the_caller
//! - a caller whose server hands its reply slot to another actor and then dies fails at
//!   once with `Down(reason)`:
//!   a_call_whose_deferred_reply_is_held_elsewhere_fails_at_once_when_the_server_dies,
//!   a_held_deferred_reply_after_many_answered_ones_still_fails_at_once_when_the_server_dies,
//!   a_plain_threads_call_whose_deferred_reply_is_held_elsewhere_fails_at_once_when_the_server_dies
//! - `terminate(reason)` runs on a `Stop` return:
//!   terminate_runs_on_stop_from_handle_call, terminate_runs_on_stop_from_handle_cast,
//!   terminate_runs_on_stop_from_handle_info, terminate_runs_on_server_ref_stop
//! - on a callback panic:
//!   terminate_runs_on_a_panic_in_handle_call, terminate_runs_on_a_panic_in_handle_cast,
//!   terminate_runs_on_a_panic_in_handle_info
//! - on supervisor shutdown when the server traps exits:
//!   terminate_runs_on_supervisor_shutdown_when_trapping_exits,
//!   terminate_does_not_run_on_supervisor_shutdown_without_trapping_exits
//! - (OTP, where silent) a trapping server terminates when its parent dies, and treats
//!   other `Exit`s as info:
//!   trapping_server_terminates_when_its_parent_dies,
//!   trapping_server_gets_a_shutdown_exit_from_a_non_parent_as_info
//! - never on `kill`:
//!   terminate_never_runs_on_kill
//! - at most once (a panicking terminate is not called again):
//!   a_panicking_terminate_runs_once
//! - with `Stop(reason, reply)` terminate runs first, then the reply is sent:
//!   stop_with_reply_runs_terminate_before_the_reply

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smarm::channel::{channel, oneshot, OneshotReceiver, Sender};
use smarm::gen_server::{
    self, CallError, CallResult, Caller, Ctx, Flow, GenServer, Info, InitResult, ReplyTo, ServerRef, StartError,
    StartOpts,
};
use smarm::supervisor::{self, ChildSpec, Shutdown, Strategy, SupFlags};
use smarm::{DownReason, Exit, Runtime, Signal};

const GUARD: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);

fn custom(s: &str) -> DownReason {
    DownReason::Custom(s.to_string())
}

fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

type Log = Arc<Mutex<Vec<String>>>;

fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn push(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

fn next_down() -> smarm::Down {
    match smarm::recv_signal_timeout(GUARD) {
        Ok(Signal::Down(d)) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

fn next_exit() -> Exit {
    match smarm::recv_signal_timeout(GUARD) {
        Ok(Signal::Exit(x)) => x,
        other => panic!("expected an Exit, got {other:?}"),
    }
}

/// What `init` does.
#[derive(Clone)]
enum InitMode {
    Ok,
    /// Sleep, then record "init done" and succeed.
    Slow(Duration),
    Stop(DownReason),
    Panic(&'static str),
    Ignore,
}

/// The test server: records its callbacks in a shared log.
struct Srv {
    log: Log,
    init: InitMode,
    trap: bool,
    held: Vec<ReplyTo<u32>>,
    /// Time `terminate` takes before it records itself.
    slow_terminate: Duration,
    /// Panic with this message in `terminate`, after recording the call.
    terminate_panics: Option<&'static str>,
    /// Time the server state takes to drop (after `start` learned the outcome, before the
    /// actor's exit): widens the window in which a not-yet-released name would show.
    _slow_drop: SlowDrop,
}

/// Sleeps when dropped, then reports (if asked).
struct SlowDrop(Duration, Option<Sender<()>>);
impl Drop for SlowDrop {
    fn drop(&mut self) {
        if !self.0.is_zero() {
            smarm::sleep(self.0);
        }
        if let Some(done) = self.1.take() {
            let _ = done.send(());
        }
    }
}

impl Srv {
    fn new(log: &Log) -> Srv {
        Srv {
            log: log.clone(),
            init: InitMode::Ok,
            trap: false,
            held: Vec::new(),
            slow_terminate: Duration::ZERO,
            terminate_panics: None,
            _slow_drop: SlowDrop(Duration::ZERO, None),
        }
    }
    fn slow_drop(mut self, d: Duration, done: Sender<()>) -> Srv {
        self._slow_drop = SlowDrop(d, Some(done));
        self
    }
    fn init_mode(mut self, m: InitMode) -> Srv {
        self.init = m;
        self
    }
    fn trapping(mut self) -> Srv {
        self.trap = true;
        self
    }
}

enum Call {
    Echo(u32),
    Panic(&'static str),
    Stop(DownReason, Option<u32>),
    /// Keep the reply handle (answered by `Cast::ReleaseHeld`), then say so if asked.
    Hold(Option<Sender<()>>),
    /// Hand the reply handle to someone else.
    DeferTo(Sender<ReplyTo<u32>>),
    /// Report entry, then wait for the release (to die while handling a call).
    Block(Sender<()>, OneshotReceiver<()>),
    /// Call this server (registered under the name) from inside its own handler.
    Myself(&'static str, Sender<Result<u32, CallError>>),
    /// Stop this server (registered under the name) from inside its own handler.
    StopMyself(&'static str, Sender<Result<(), CallError>>),
}

enum Cast {
    Log(&'static str),
    Stop(DownReason),
    Panic(&'static str),
    ReleaseHeld(u32),
}

enum InfoMsg {
    Stop(DownReason),
    Panic(&'static str),
}

impl GenServer for Srv {
    type Call = Call;
    type Reply = u32;
    type Cast = Cast;
    type Info = InfoMsg;
    type Continue = ();

    fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult {
        if self.trap {
            smarm::trap_exit(true);
        }
        match self.init.clone() {
            InitMode::Ok => InitResult::Ok,
            InitMode::Slow(d) => {
                smarm::sleep(d);
                push(&self.log, "init done");
                InitResult::Ok
            }
            InitMode::Stop(r) => InitResult::Stop(r),
            InitMode::Panic(msg) => panic!("{msg}"),
            InitMode::Ignore => InitResult::Ignore,
        }
    }

    fn handle_call(&mut self, request: Call, from: &Caller<u32>, _ctx: &Ctx<Self>) -> CallResult<u32> {
        match request {
            Call::Echo(n) => CallResult::Reply(n),
            Call::Panic(msg) => panic!("{msg}"),
            Call::Stop(r, reply) => CallResult::Stop(r, reply),
            Call::Hold(told) => {
                self.held.push(from.defer());
                if let Some(t) = told {
                    t.send(()).unwrap();
                }
                CallResult::NoReply
            }
            Call::DeferTo(tx) => {
                tx.send(from.defer()).unwrap();
                CallResult::NoReply
            }
            Call::Block(entered, release) => {
                entered.send(()).unwrap();
                let _ = release.recv();
                CallResult::Reply(0)
            }
            Call::Myself(name, report) => {
                let me = gen_server::named::<Srv>(name).expect("registered");
                report.send(me.call(Call::Echo(1))).unwrap();
                CallResult::Reply(0)
            }
            Call::StopMyself(name, report) => {
                let me = gen_server::named::<Srv>(name).expect("registered");
                report.send(me.stop(DownReason::Normal)).unwrap();
                CallResult::Reply(0)
            }
        }
    }

    fn handle_cast(&mut self, msg: Cast, _ctx: &Ctx<Self>) -> Flow {
        match msg {
            Cast::Log(s) => {
                push(&self.log, s);
                Flow::Continue
            }
            Cast::Stop(r) => Flow::Stop(r),
            Cast::Panic(msg) => panic!("{msg}"),
            Cast::ReleaseHeld(n) => {
                for r in self.held.drain(..) {
                    r.reply(n);
                }
                Flow::Continue
            }
        }
    }

    fn handle_info(&mut self, info: Info<InfoMsg>, _ctx: &Ctx<Self>) -> Flow {
        match info {
            Info::Msg(InfoMsg::Stop(r)) => Flow::Stop(r),
            Info::Msg(InfoMsg::Panic(msg)) => panic!("{msg}"),
            Info::Exit(x) => {
                push(&self.log, format!("info exit {:?}", x.reason));
                Flow::Continue
            }
            Info::Down(d) => {
                push(&self.log, format!("info down {:?}", d.reason));
                Flow::Continue
            }
        }
    }

    fn terminate(&mut self, reason: &DownReason) {
        if !self.slow_terminate.is_zero() {
            smarm::sleep(self.slow_terminate);
        }
        push(&self.log, format!("terminate {reason:?}"));
        if let Some(msg) = self.terminate_panics {
            panic!("{msg}");
        }
    }
}

fn named(name: &str) -> StartOpts {
    StartOpts { name: Some(name.into()), link: false }
}

fn terminated(log: &Log) -> Vec<String> {
    entries(log).into_iter().filter(|e| e.starts_with("terminate")).collect()
}

// ------------------------------------------------------------------------------------------
// start
// ------------------------------------------------------------------------------------------

#[test]
fn start_returns_only_after_init_finished() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log).init_mode(InitMode::Slow(20 * MS))).unwrap();
        assert_eq!(entries(&log), ["init done"]);
        assert_eq!(s.call(Call::Echo(1)), Ok(1));
    });
}

#[test]
fn start_link_returns_only_after_init_finished() {
    run(|| {
        let log = new_log();
        let s = gen_server::start_link(Srv::new(&log).init_mode(InitMode::Slow(20 * MS))).unwrap();
        assert_eq!(entries(&log), ["init done"]);
        assert_eq!(s.call(Call::Echo(2)), Ok(2));
    });
}

#[test]
fn start_returns_a_working_server() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        assert!(s.is_alive());
        assert_eq!(s.call(Call::Echo(5)), Ok(5));
        assert_eq!(s.exit_reason(), None);
    });
}

#[test]
fn start_reports_the_reason_init_stopped_with() {
    run(|| {
        let r = gen_server::start(Srv::new(&new_log()).init_mode(InitMode::Stop(custom("no"))));
        assert_eq!(r.err(), Some(StartError::Init(custom("no"))));
        let r = gen_server::start_link(Srv::new(&new_log()).init_mode(InitMode::Stop(custom("no link"))));
        assert_eq!(r.err(), Some(StartError::Init(custom("no link"))));
    });
}

#[test]
fn start_reports_an_init_panic() {
    run(|| {
        let r = gen_server::start(Srv::new(&new_log()).init_mode(InitMode::Panic("init boom")));
        assert_eq!(r.err(), Some(StartError::Init(DownReason::Panic("init boom".into()))));
    });
}

#[test]
fn start_reports_init_ignore() {
    run(|| {
        let r = gen_server::start(Srv::new(&new_log()).init_mode(InitMode::Ignore));
        assert_eq!(r.err(), Some(StartError::Ignore));
    });
}

#[test]
fn failed_init_frees_the_name_before_start_returns() {
    run(|| {
        let modes = [InitMode::Stop(custom("no")), InitMode::Panic("init boom"), InitMode::Ignore];
        for round in 0..30 {
            for mode in modes.clone() {
                // The failed server lingers (slow drop) after reporting: its name must be
                // free already.
                let (dropped_tx, dropped_rx) = channel();
                let slow = if round < 3 { 20 * MS } else { Duration::ZERO };
                let srv = Srv::new(&new_log()).init_mode(mode).slow_drop(slow, dropped_tx);
                let r = gen_server::start_opts(srv, named("svc"));
                assert!(r.is_err());
                assert_eq!(smarm::whereis("svc"), None, "round {round}: the name outlived the failed start");
                let s = gen_server::start_opts(Srv::new(&new_log()), named("svc"))
                    .unwrap_or_else(|e| panic!("round {round}: restart under the freed name: {e}"));
                assert_eq!(smarm::whereis("svc"), Some(s.pid()));
                // One lingering server at a time (see process.rs,
                // kill_of_actors_parked_in_destructors_mid_unwind_does_not_abort).
                dropped_rx.recv_timeout(GUARD).unwrap();
                assert_eq!(s.stop(DownReason::Normal), Ok(()));
            }
        }
    });
}

#[test]
fn start_with_a_taken_name_reports_already_started_with_the_holder() {
    run(|| {
        let first = gen_server::start_opts(Srv::new(&new_log()), named("only")).unwrap();
        let second = gen_server::start_opts(Srv::new(&new_log()), named("only"));
        assert_eq!(second.err(), Some(StartError::AlreadyStarted(first.pid())));
        // The first server is untouched.
        assert_eq!(first.call(Call::Echo(3)), Ok(3));
        assert_eq!(smarm::whereis("only"), Some(first.pid()));

        // A name held by a plain registered actor counts too.
        let (ready_tx, ready_rx) = oneshot::<()>();
        let holder = smarm::spawn(move || {
            smarm::register("plain", smarm::current_pid()).unwrap();
            ready_tx.send(()).unwrap();
            loop {
                smarm::sleep(Duration::from_secs(3600));
            }
        });
        ready_rx.recv().unwrap();
        let r = gen_server::start_opts(Srv::new(&new_log()), named("plain"));
        assert_eq!(r.err(), Some(StartError::AlreadyStarted(holder.pid())));
    });
}

#[test]
fn concurrent_starts_under_one_name_yield_exactly_one_server() {
    run(|| {
        for _round in 0..20 {
            let (tx, rx) = channel();
            for _ in 0..6 {
                let tx = tx.clone();
                smarm::spawn(move || {
                    let r =
                        gen_server::start_opts(Srv::new(&new_log()).init_mode(InitMode::Slow(MS)), named("contested"));
                    tx.send(r).unwrap();
                });
            }
            drop(tx);
            let results: Vec<_> = rx.iter().collect();
            let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            let winner = winners[0].pid();
            for r in &results {
                if let Err(e) = r {
                    assert_eq!(*e, StartError::AlreadyStarted(winner));
                }
            }
            assert_eq!(smarm::whereis("contested"), Some(winner));
            assert_eq!(winners[0].stop(DownReason::Normal), Ok(()));
        }
    });
}

#[test]
fn start_link_links_the_server_to_the_caller() {
    run(|| {
        smarm::trap_exit(true);
        let s = gen_server::start_link(Srv::new(&new_log())).unwrap();
        s.cast(Cast::Panic("linked crash"));
        assert_eq!(next_exit(), Exit { from: s.pid(), reason: DownReason::Panic("linked crash".into()) });

        // The other direction: the server (trapping) hears of the caller's death.
        let log = new_log();
        let log2 = log.clone();
        let (tx, rx) = oneshot();
        let caller = smarm::spawn(move || {
            let s = gen_server::start_link(Srv::new(&log2).trapping()).unwrap();
            tx.send(s).unwrap();
            panic!("caller crash");
        });
        let s = rx.recv().unwrap();
        assert!(caller.join().is_err());
        s.cast(Cast::Log("after"));
        // The Exit was queued before the caller's join returned, so before this sync call.
        s.call(Call::Echo(0)).ok();
        let log = entries(&log);
        assert!(log.iter().any(|e| e.contains("Panic(\"caller crash\")")), "{log:?}");
    });
}

#[test]
fn stop_reason_is_the_servers_exit_reason_for_monitors() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let m = smarm::monitor(s.pid());
        s.cast(Cast::Stop(custom("bad state")));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, custom("bad state")));

        // A trapping server stopped by its supervisor exits with Shutdown.
        let log = new_log();
        let (sup, child) = supervised(&log, true);
        let m = smarm::monitor(child);
        sup.stop().unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
    });
}

#[test]
fn init_stop_reason_is_the_servers_exit_reason() {
    run(|| {
        smarm::trap_exit(true);
        let r = gen_server::start_link(Srv::new(&new_log()).init_mode(InitMode::Stop(custom("no"))));
        assert_eq!(r.err(), Some(StartError::Init(custom("no"))));
        assert_eq!(next_exit().reason, custom("no"));
    });
}

// ------------------------------------------------------------------------------------------
// call
// ------------------------------------------------------------------------------------------

#[test]
fn call_default_timeout_is_five_seconds() {
    assert_eq!(gen_server::DEFAULT_CALL_TIMEOUT, Duration::from_secs(5));
    // `call` (default timeout) waits for a reply that takes a while.
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (tx, rx) = channel::<ReplyTo<u32>>();
        smarm::spawn(move || {
            let r = rx.recv().unwrap();
            smarm::sleep(300 * MS);
            r.reply(77);
        });
        assert_eq!(s.call(Call::DeferTo(tx)), Ok(77));

        // A reply that is held back: `call` gives up after the default, not before. The
        // holder replies only once the call has returned (at the latest 7 s in, so a
        // default of 7 s or more, infinity included, fails with `Ok`).
        let (tx, rx) = channel::<ReplyTo<u32>>();
        let (done_tx, done_rx) = channel::<()>();
        smarm::spawn(move || {
            let r = rx.recv().unwrap();
            let _ = done_rx.recv_timeout(Duration::from_secs(7));
            r.reply(78);
        });
        let start = Instant::now();
        assert_eq!(s.call(Call::DeferTo(tx)), Err(CallError::Timeout));
        let waited = start.elapsed();
        done_tx.send(()).unwrap();
        assert!(waited >= gen_server::DEFAULT_CALL_TIMEOUT, "call gave up after {waited:?}");
        // The late reply is discarded; the server still serves.
        assert_eq!(s.call(Call::Echo(5)), Ok(5));
    });
}

#[test]
fn a_loop_of_calls_failing_with_noproc_lets_the_restart_run() {
    // One scheduler thread: a client that retries `call_named` until the restarted server
    // answers gets nowhere unless a failing call gives the thread up now and then.
    let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    let attempts = rt
        .run(|| {
            let spec = ChildSpec::worker("s", || {
                gen_server::start_opts(Srv::new(&new_log()), StartOpts { link: true, ..named("restarting") })
                    .map(|s| s.pid())
                    .map_err(|e| DownReason::Custom(e.to_string()))
            });
            let _sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
            let s = gen_server::named::<Srv>("restarting").unwrap();
            let m = smarm::monitor(s.pid());
            assert!(s.call(Call::Panic("crash")).is_err());
            // Gone (and unregistered) before its Down is delivered.
            while !matches!(smarm::recv_signal(), Signal::Down(d) if d.monitor == m) {}
            (1..=5_000_000u32).find(|_| gen_server::call_named::<Srv>("restarting", Call::Echo(1)) == Ok(1))
        })
        .unwrap();
    assert!(attempts.is_some(), "5,000,000 NoProc calls in a row: the supervisor never got to restart the server");
}

#[test]
fn a_loop_of_sends_to_a_dead_actor_lets_other_actors_run() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    let sends = rt
        .run(|| {
            let dead = smarm::spawn_actor(|_mb: smarm::Mailbox<u32>| ());
            let (h, _) = smarm::spawn_monitor(|| ());
            let _ = h.join();
            while dead.is_alive() {
                smarm::yield_now();
            }
            let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let f = flag.clone();
            smarm::spawn(move || f.store(true, std::sync::atomic::Ordering::SeqCst));
            (1..=5_000_000u32).find(|i| {
                dead.send(*i);
                flag.load(std::sync::atomic::Ordering::SeqCst)
            })
        })
        .unwrap();
    assert!(sends.is_some(), "5,000,000 sends to a dead actor in a row kept the other actor from running");
}

#[test]
fn call_to_a_stopped_server_is_noproc() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        assert_eq!(s.stop(DownReason::Normal), Ok(()));
        assert_eq!(s.call(Call::Echo(1)), Err(CallError::NoProc));
        assert_eq!(s.call_timeout(Call::Echo(1), Duration::from_secs(3600)), Err(CallError::NoProc));
    });
}

#[test]
fn call_to_a_killed_server_is_noproc() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        smarm::monitor(s.pid());
        smarm::kill(s.pid());
        assert_eq!(next_down().reason, DownReason::Killed);
        assert_eq!(s.call(Call::Echo(1)), Err(CallError::NoProc));
    });
}

#[test]
fn call_named_with_an_unknown_name_is_noproc() {
    run(|| {
        assert_eq!(gen_server::call_named::<Srv>("nobody", Call::Echo(1)), Err(CallError::NoProc));
        let s = gen_server::start_opts(Srv::new(&new_log()), named("somebody")).unwrap();
        assert_eq!(gen_server::call_named::<Srv>("somebody", Call::Echo(4)), Ok(4));
        s.stop(DownReason::Normal).unwrap();
        assert_eq!(gen_server::call_named::<Srv>("somebody", Call::Echo(1)), Err(CallError::NoProc));
    });
}

/// A server of another type.
struct Other;
impl GenServer for Other {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn handle_call(&mut self, _: (), _: &Caller<()>, _ctx: &Ctx<Self>) -> CallResult<()> {
        CallResult::Reply(())
    }
}

#[test]
fn call_named_with_a_server_of_another_type_is_noproc() {
    run(|| {
        let _o = gen_server::start_opts(Other, named("other")).unwrap();
        assert_eq!(gen_server::call_named::<Srv>("other", Call::Echo(1)), Err(CallError::NoProc));
        assert_eq!(gen_server::call_named::<Other>("other", ()), Ok(()));
    });
}

#[test]
fn call_reports_down_with_the_panic_when_the_handler_panics() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        assert_eq!(s.call(Call::Panic("handler boom")), Err(CallError::Down(DownReason::Panic("handler boom".into()))));
        assert_eq!(s.exit_reason(), Some(DownReason::Panic("handler boom".into())));
    });
}

/// Starts a call that blocks in the handler; returns the pending result once the server is
/// inside the handler, and the release sender.
fn blocked_call(
    s: &ServerRef<Srv>,
) -> (smarm::channel::OneshotReceiver<Result<u32, CallError>>, smarm::channel::OneshotSender<()>) {
    let (entered_tx, entered_rx) = channel();
    let (release_tx, release_rx) = oneshot();
    let (res_tx, res_rx) = oneshot();
    let s2 = s.clone();
    smarm::spawn(move || {
        res_tx.send(s2.call(Call::Block(entered_tx, release_rx))).unwrap();
    });
    entered_rx.recv_timeout(GUARD).expect("the server never entered the handler");
    (res_rx, release_tx)
}

#[test]
fn call_reports_down_killed_when_the_server_is_killed_during_the_call() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log()).trapping()).unwrap();
        let (res, _release) = blocked_call(&s);
        smarm::kill(s.pid());
        assert_eq!(res.recv().unwrap(), Err(CallError::Down(DownReason::Killed)));
    });
}

#[test]
fn call_reports_down_with_the_exit_signal_reason() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (res, _release) = blocked_call(&s);
        smarm::exit(s.pid(), custom("go away"));
        assert_eq!(res.recv().unwrap(), Err(CallError::Down(custom("go away"))));
    });
}

/// Starts a call the server holds (defers without answering); returns once it is held.
fn held_call(s: &ServerRef<Srv>) -> smarm::channel::OneshotReceiver<Result<u32, CallError>> {
    let (told_tx, told_rx) = channel();
    let (res_tx, res_rx) = oneshot();
    let s2 = s.clone();
    smarm::spawn(move || {
        res_tx.send(s2.call(Call::Hold(Some(told_tx)))).unwrap();
    });
    told_rx.recv_timeout(GUARD).expect("the server never held the call");
    res_rx
}

#[test]
fn call_held_by_a_server_that_stops_reports_down_with_the_stop_reason() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let res = held_call(&s);
        s.cast(Cast::Stop(custom("stopping")));
        assert_eq!(res.recv().unwrap(), Err(CallError::Down(custom("stopping"))));
        assert_eq!(s.exit_reason(), Some(custom("stopping")));
    });
}

#[test]
fn call_without_a_reply_times_out() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let start = Instant::now();
        assert_eq!(s.call_timeout(Call::Hold(None), 30 * MS), Err(CallError::Timeout));
        assert!(start.elapsed() >= 30 * MS);
        // The server is fine.
        assert_eq!(s.call(Call::Echo(1)), Ok(1));
    });
}

#[test]
fn call_to_itself_is_calling_self() {
    run(|| {
        let s = gen_server::start_opts(Srv::new(&new_log()), named("selfish")).unwrap();
        let (tx, rx) = channel();
        assert_eq!(s.call(Call::Myself("selfish", tx)), Ok(0));
        assert_eq!(rx.recv_timeout(GUARD), Ok(Err(CallError::CallingSelf)));
    });
}

#[test]
fn stop_of_itself_is_calling_self() {
    run(|| {
        let s = gen_server::start_opts(Srv::new(&new_log()), named("self-stopper")).unwrap();
        let (tx, rx) = channel();
        let s2 = s.clone();
        smarm::spawn(move || {
            let _ = s2.call(Call::StopMyself("self-stopper", tx));
        });
        assert_eq!(rx.recv_timeout(GUARD), Ok(Err(CallError::CallingSelf)));
        // The server goes on.
        assert_eq!(s.call(Call::Echo(5)), Ok(5));
    });
}

/// A holder of a deferred reply that never replies: takes the handle, says so, keeps it
/// until released.
fn silent_holder() -> (smarm::JoinHandle<()>, Sender<ReplyTo<u32>>, OneshotReceiver<()>, Sender<()>) {
    let (handle_tx, handle_rx) = channel::<ReplyTo<u32>>();
    let (held_tx, held_rx) = oneshot();
    let (release_tx, release_rx) = channel::<()>();
    let holder = smarm::spawn(move || {
        let handle = handle_rx.recv().unwrap();
        held_tx.send(()).unwrap();
        let _ = release_rx.recv();
        drop(handle);
    });
    (holder, handle_tx, held_rx, release_tx)
}

#[test]
fn a_call_whose_deferred_reply_is_held_elsewhere_fails_at_once_when_the_server_dies() {
    run(|| {
        // The call allows an hour: only the server's death can end it within the guard.
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (holder, handle_tx, mut held, release) = silent_holder();
        let (res_tx, mut res_rx) = oneshot();
        let s2 = s.clone();
        smarm::spawn(move || {
            res_tx.send(s2.call_timeout(Call::DeferTo(handle_tx), Duration::from_secs(3600))).unwrap();
        });
        held.recv_timeout(GUARD).expect("the holder never got the reply handle");
        s.cast(Cast::Stop(custom("gone")));
        assert_eq!(
            res_rx.recv_timeout(GUARD).expect("the caller still waits for the holder"),
            Err(CallError::Down(custom("gone")))
        );
        assert!(!holder.is_finished(), "the holder ended");
        // A reply the holder sends now goes nowhere.
        drop(release);
        holder.join().unwrap();
    });
}

#[test]
fn a_held_deferred_reply_after_many_answered_ones_still_fails_at_once_when_the_server_dies() {
    run(|| {
        // The server keeps a handle per deferred call; answered ones are pruned as it goes.
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (answer_tx, answer_rx) = channel::<ReplyTo<u32>>();
        smarm::spawn(move || {
            while let Ok(r) = answer_rx.recv() {
                r.reply(9);
            }
        });
        for _ in 0..100 {
            assert_eq!(s.call(Call::DeferTo(answer_tx.clone())), Ok(9));
        }
        let (holder, handle_tx, mut held, release) = silent_holder();
        let (res_tx, mut res_rx) = oneshot();
        let s2 = s.clone();
        smarm::spawn(move || {
            res_tx.send(s2.call_timeout(Call::DeferTo(handle_tx), Duration::from_secs(3600))).unwrap();
        });
        held.recv_timeout(GUARD).expect("the holder never got the reply handle");
        smarm::exit(s.pid(), custom("gone"));
        assert_eq!(
            res_rx.recv_timeout(GUARD).expect("the caller still waits for the holder"),
            Err(CallError::Down(custom("gone")))
        );
        drop(release);
        holder.join().unwrap();
    });
}

#[test]
fn a_plain_threads_call_whose_deferred_reply_is_held_elsewhere_fails_at_once_when_the_server_dies() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (holder, handle_tx, mut held, release) = silent_holder();
        let (res_tx, mut res_rx) = oneshot();
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            res_tx.send(s2.call_timeout(Call::DeferTo(handle_tx), Duration::from_secs(3600))).unwrap();
        });
        held.recv_timeout(GUARD).expect("the holder never got the reply handle");
        smarm::kill(s.pid());
        assert_eq!(
            res_rx.recv_timeout(GUARD).expect("the thread's call still waits for the holder"),
            Err(CallError::Down(DownReason::Killed))
        );
        assert!(!holder.is_finished(), "the holder ended");
        t.join().unwrap();
        drop(release);
        holder.join().unwrap();
    });
}

#[test]
fn a_deferred_reply_dropped_late_still_times_out_at_the_calls_limit() {
    run(|| {
        // The call allows 1 s; the holder drops the reply handle at 0.8 s (no reply will
        // come, the server lives on). A marker is set at 1.4 s: a call that started its wait
        // for the server's exit afresh at the drop (until 1.8 s) would return after it.
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (tx, rx) = channel::<ReplyTo<u32>>();
        smarm::spawn(move || {
            let r = rx.recv().unwrap();
            smarm::sleep(800 * MS);
            drop(r);
        });
        let marker = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let m = marker.clone();
        smarm::spawn(move || {
            smarm::sleep(1400 * MS);
            m.store(true, std::sync::atomic::Ordering::SeqCst);
        });
        assert_eq!(s.call_timeout(Call::DeferTo(tx), 1000 * MS), Err(CallError::Timeout));
        assert!(!marker.load(std::sync::atomic::Ordering::SeqCst), "the call outlived its 1 s limit");
        assert_eq!(s.call(Call::Echo(3)), Ok(3));
    });
}

#[test]
fn late_reply_after_a_timeout_is_discarded() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        for round in 0..20 {
            assert_eq!(s.call_timeout(Call::Hold(None), 5 * MS), Err(CallError::Timeout));
            // The held call is answered now, after the caller gave up; the cast is handled
            // before the next call (FIFO), so the late reply exists before it.
            s.cast(Cast::ReleaseHeld(1000 + round));
            assert_eq!(s.call(Call::Echo(round)), Ok(round), "a late reply was seen");
        }
    });
}

/// The slot index of a pid (`<0.index.gen>`).
fn slot_index(pid: smarm::Pid) -> String {
    pid.to_string().split('.').nth(1).expect("pid format").to_string()
}

#[test]
fn a_reply_to_a_killed_caller_never_reaches_the_next_actor_in_its_slot() {
    // Room for the root, the server and one caller: the second caller reuses the first's slot.
    let rt = Runtime::builder().threads(2).max_actors(3).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (defer_tx, defer_rx) = channel::<ReplyTo<u32>>();
        let s1 = s.clone();
        let first = smarm::spawn(move || {
            let _ = s1.call(Call::DeferTo(defer_tx));
        });
        let stale = defer_rx.recv_timeout(GUARD).expect("the server never deferred the call");
        let first_pid = first.pid();
        smarm::kill(first_pid);
        assert_eq!(first.join(), Err(DownReason::Killed));

        let (told_tx, told_rx) = channel();
        let (res_tx, res_rx) = oneshot();
        let s2 = s.clone();
        let second = smarm::spawn(move || res_tx.send(s2.call(Call::Hold(Some(told_tx)))).unwrap());
        assert_eq!(slot_index(second.pid()), slot_index(first_pid), "the slot was not reused");
        told_rx.recv_timeout(GUARD).expect("the server never held the call");
        // The killed caller's reply comes while the new occupant waits in a call: discarded.
        stale.reply(111);
        s.cast(Cast::ReleaseHeld(5));
        assert_eq!(res_rx.recv(), Ok(Ok(5)));
        second.join().unwrap();
    })
    .unwrap();
}

#[test]
fn a_deferred_reply_may_outlive_the_callers_runtime() {
    let (keep_tx, keep_rx) = std::sync::mpsc::channel::<ReplyTo<u32>>();
    run(move || {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (defer_tx, defer_rx) = channel::<ReplyTo<u32>>();
        let keeper = smarm::spawn(move || keep_tx.send(defer_rx.recv().unwrap()).unwrap());
        assert_eq!(s.call_timeout(Call::DeferTo(defer_tx), 5 * MS), Err(CallError::Timeout));
        keeper.join().unwrap();
    });
    // The runtime has ended and been dropped: the reply goes nowhere, and nothing breaks.
    let held = keep_rx.recv().unwrap();
    held.reply(1);
    // And one that is dropped without a reply.
    let (keep_tx, keep_rx) = std::sync::mpsc::channel::<ReplyTo<u32>>();
    run(move || {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (defer_tx, defer_rx) = channel::<ReplyTo<u32>>();
        let keeper = smarm::spawn(move || keep_tx.send(defer_rx.recv().unwrap()).unwrap());
        assert_eq!(s.call_timeout(Call::DeferTo(defer_tx), 5 * MS), Err(CallError::Timeout));
        keeper.join().unwrap();
    });
    drop(keep_rx.recv().unwrap());
}

#[test]
fn call_from_a_plain_thread_gets_its_reply_and_sees_the_server_die() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (res_tx, mut res_rx) = oneshot();
        let t = std::thread::spawn(move || {
            let echo = s.call(Call::Echo(4));
            let timeout = s.call_timeout(Call::Hold(None), 5 * MS);
            let down = s.call(Call::Panic("boom"));
            res_tx.send((echo, timeout, down)).unwrap();
        });
        let (echo, timeout, down) = res_rx.recv_timeout(GUARD).expect("the thread's calls never finished");
        assert_eq!(echo, Ok(4));
        assert_eq!(timeout, Err(CallError::Timeout));
        assert_eq!(down, Err(CallError::Down(DownReason::Panic("boom".into()))));
        t.join().unwrap();
    });
}

#[test]
fn an_actor_can_call_a_server_of_another_runtime() {
    let (ref_tx, ref_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = oneshot::<()>();
    let other = std::thread::spawn(move || {
        let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
        rt.run(move || {
            ref_tx.send(gen_server::start(Srv::new(&new_log())).unwrap()).unwrap();
            let _ = stop_rx.recv();
        })
    });
    let s = ref_rx.recv().unwrap();
    run(move || {
        assert_eq!(s.call(Call::Echo(7)), Ok(7));
        assert_eq!(s.call_timeout(Call::Hold(None), 5 * MS), Err(CallError::Timeout));
        // A deferred reply from this runtime's actor into the other runtime's server call.
        let (defer_tx, defer_rx) = channel::<ReplyTo<u32>>();
        smarm::spawn(move || defer_rx.recv().unwrap().reply(12));
        assert_eq!(s.call(Call::DeferTo(defer_tx)), Ok(12));
        assert_eq!(s.call(Call::Panic("over there")), Err(CallError::Down(DownReason::Panic("over there".into()))));
    });
    stop_tx.send(()).unwrap();
    other.join().unwrap().unwrap();
}

// ------------------------------------------------------------------------------------------
// cast, deferred replies
// ------------------------------------------------------------------------------------------

#[test]
fn cast_to_a_dead_server_succeeds() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        assert_eq!(s.stop(DownReason::Normal), Ok(()));
        s.cast(Cast::Log("into the void"));
        s.info(InfoMsg::Stop(DownReason::Normal));
        let k = gen_server::start(Srv::new(&new_log())).unwrap();
        smarm::monitor(k.pid());
        smarm::kill(k.pid());
        next_down();
        k.cast(Cast::Log("into the void"));
    });
}

#[test]
fn cast_is_delivered_in_order_before_a_later_call() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        s.cast(Cast::Log("one"));
        s.cast(Cast::Log("two"));
        assert_eq!(s.call(Call::Echo(0)), Ok(0));
        assert_eq!(entries(&log), ["one", "two"]);
    });
}

#[test]
fn deferred_reply_from_another_actor_reaches_the_caller() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (tx, rx) = channel::<ReplyTo<u32>>();
        smarm::spawn(move || rx.recv().unwrap().reply(31));
        assert_eq!(s.call(Call::DeferTo(tx)), Ok(31));
        // The server kept serving meanwhile.
        assert_eq!(s.call(Call::Echo(2)), Ok(2));

        // A held reply, answered later from another callback.
        let res = held_call(&s);
        s.cast(Cast::ReleaseHeld(8));
        assert_eq!(res.recv().unwrap(), Ok(8));
    });
}

#[test]
fn deferred_reply_from_a_plain_thread_reaches_the_caller() {
    run(|| {
        let s = gen_server::start(Srv::new(&new_log())).unwrap();
        let (tx, rx) = channel::<ReplyTo<u32>>();
        let t = std::thread::spawn(move || rx.recv().unwrap().reply(99));
        assert_eq!(s.call(Call::DeferTo(tx)), Ok(99));
        t.join().unwrap();
    });
}

// ------------------------------------------------------------------------------------------
// terminate
// ------------------------------------------------------------------------------------------

#[test]
fn stop_with_reply_runs_terminate_before_the_reply() {
    run(|| {
        let log = new_log();
        let mut srv = Srv::new(&log);
        // A reply sent before terminate would reach us while terminate still sleeps.
        srv.slow_terminate = 30 * MS;
        let s = gen_server::start(srv).unwrap();
        assert_eq!(s.call(Call::Stop(custom("bye"), Some(7))), Ok(7));
        // The reply was sent after terminate returned.
        assert_eq!(terminated(&log), ["terminate Custom(\"bye\")"]);
    });
}

#[test]
fn terminate_runs_on_stop_from_handle_call() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        assert_eq!(s.call(Call::Stop(DownReason::Normal, None)), Err(CallError::Down(DownReason::Normal)));
        assert_eq!(terminated(&log), ["terminate Normal"]);
    });
}

/// Waits for the server to end and returns its exit reason.
fn wait_end(s: &ServerRef<Srv>) -> DownReason {
    let m = smarm::monitor(s.pid());
    let d = next_down();
    assert_eq!(d.monitor, m);
    s.exit_reason().expect("exit reason set once the server ended")
}

#[test]
fn terminate_runs_on_stop_from_handle_cast() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        s.cast(Cast::Stop(custom("cast stop")));
        assert_eq!(wait_end(&s), custom("cast stop"));
        assert_eq!(terminated(&log), ["terminate Custom(\"cast stop\")"]);
    });
}

#[test]
fn terminate_runs_on_stop_from_handle_info() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        s.info(InfoMsg::Stop(custom("info stop")));
        assert_eq!(wait_end(&s), custom("info stop"));
        assert_eq!(terminated(&log), ["terminate Custom(\"info stop\")"]);
    });
}

#[test]
fn terminate_runs_on_server_ref_stop() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        assert_eq!(s.stop(custom("asked")), Ok(()));
        assert_eq!(terminated(&log), ["terminate Custom(\"asked\")"]);
        assert_eq!(s.exit_reason(), Some(custom("asked")));
        assert_eq!(s.stop(DownReason::Normal), Err(CallError::NoProc), "a stopped server cannot be stopped again");
    });
}

#[test]
fn terminate_runs_on_a_panic_in_handle_call() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        let _ = s.call(Call::Panic("call boom"));
        assert_eq!(wait_end(&s), DownReason::Panic("call boom".into()));
        assert_eq!(terminated(&log), ["terminate Panic(\"call boom\")"]);
    });
}

#[test]
fn terminate_runs_on_a_panic_in_handle_cast() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        let m = smarm::monitor(s.pid());
        s.cast(Cast::Panic("cast boom"));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Panic("cast boom".into())));
        assert_eq!(terminated(&log), ["terminate Panic(\"cast boom\")"]);
    });
}

#[test]
fn terminate_runs_on_a_panic_in_handle_info() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log)).unwrap();
        let m = smarm::monitor(s.pid());
        s.info(InfoMsg::Panic("info boom"));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Panic("info boom".into())));
        assert_eq!(terminated(&log), ["terminate Panic(\"info boom\")"]);
    });
}

/// A supervisor with one gen_server child; returns the supervisor and the child's pid.
fn supervised(log: &Log, trap: bool) -> (supervisor::SupervisorRef, smarm::Pid) {
    let log = log.clone();
    let spec = ChildSpec::worker("srv", move || {
        let mut srv = Srv::new(&log);
        srv.trap = trap;
        gen_server::start_link(srv).map(|s| s.pid()).map_err(|e| custom(&e.to_string()))
    })
    .shutdown(Shutdown::Timeout(Duration::from_secs(5)));
    let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    let pid = sup.which_children().unwrap()[0].pid().unwrap();
    (sup, pid)
}

#[test]
fn terminate_runs_on_supervisor_shutdown_when_trapping_exits() {
    run(|| {
        let log = new_log();
        let (sup, child) = supervised(&log, true);
        let m = smarm::monitor(child);
        sup.stop().unwrap();
        // (Its exit reason: see stop_reason_is_the_servers_exit_reason_for_monitors.)
        assert_eq!(next_down().monitor, m);
        assert_eq!(terminated(&log), ["terminate Shutdown"]);
    });
}

#[test]
fn terminate_does_not_run_on_supervisor_shutdown_without_trapping_exits() {
    run(|| {
        let log = new_log();
        let (sup, child) = supervised(&log, false);
        let m = smarm::monitor(child);
        sup.stop().unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
        assert_eq!(terminated(&log), Vec::<String>::new());
    });
}

#[test]
fn terminate_never_runs_on_kill() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log).trapping()).unwrap();
        let m = smarm::monitor(s.pid());
        smarm::kill(s.pid());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
        assert_eq!(s.exit_reason(), Some(DownReason::Killed));
        assert_eq!(terminated(&log), Vec::<String>::new());

        // Also not when killed inside a callback.
        let log = new_log();
        let s = gen_server::start(Srv::new(&log).trapping()).unwrap();
        let (res, _release) = blocked_call(&s);
        smarm::kill(s.pid());
        assert_eq!(res.recv().unwrap(), Err(CallError::Down(DownReason::Killed)));
        assert_eq!(terminated(&log), Vec::<String>::new());
    });
}

#[test]
fn trapping_server_terminates_when_its_parent_dies() {
    run(|| {
        let log = new_log();
        let log2 = log.clone();
        let (tx, rx) = oneshot();
        let (go_tx, go_rx) = oneshot::<()>();
        let parent = smarm::spawn(move || {
            let s = gen_server::start_link(Srv::new(&log2).trapping()).unwrap();
            tx.send(s).unwrap();
            go_rx.recv().unwrap(); // the root monitors the server first
            panic!("parent crash");
        });
        let s = rx.recv().unwrap();
        let m = smarm::monitor(s.pid());
        go_tx.send(()).unwrap();
        assert!(parent.join().is_err());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Panic("parent crash".into())));
        assert_eq!(terminated(&log), ["terminate Panic(\"parent crash\")"]);
    });
}

#[test]
fn trapping_server_gets_a_shutdown_exit_from_a_non_parent_as_info() {
    run(|| {
        let log = new_log();
        let s = gen_server::start(Srv::new(&log).trapping()).unwrap();
        smarm::exit(s.pid(), DownReason::Shutdown);
        assert_eq!(s.call(Call::Echo(1)), Ok(1));
        assert_eq!(entries(&log), ["info exit Shutdown"]);
    });
}

#[test]
fn a_panicking_terminate_runs_once() {
    run(|| {
        for how in ["cast stop", "call stop with a reply", "ServerRef::stop", "parent exit", "handler panic"] {
            let log = new_log();
            let panicky = |srv: Srv| Srv { terminate_panics: Some("terminate boom"), ..srv };
            let mut go = None;
            let s = if how == "parent exit" {
                // A trapping server whose `start_link` parent ends terminates with its reason.
                let log2 = log.clone();
                let (tx, rx) = oneshot();
                let (go_tx, go_rx) = oneshot::<()>();
                smarm::spawn(move || {
                    tx.send(gen_server::start_link(panicky(Srv::new(&log2).trapping())).unwrap()).unwrap();
                    go_rx.recv().unwrap(); // the root monitors the server first
                });
                go = Some(go_tx);
                rx.recv().unwrap()
            } else {
                gen_server::start(panicky(Srv::new(&log))).unwrap()
            };
            let m = smarm::monitor(s.pid());
            let first = match how {
                "cast stop" => {
                    s.cast(Cast::Stop(custom("bye")));
                    "terminate Custom(\"bye\")"
                }
                "call stop with a reply" => {
                    // terminate runs before the reply, and panics: no reply.
                    let got = s.call(Call::Stop(custom("bye"), Some(7)));
                    assert_eq!(got, Err(CallError::Down(DownReason::Panic("terminate boom".into()))));
                    "terminate Custom(\"bye\")"
                }
                "ServerRef::stop" => {
                    // As OTP's `stop`, which raises the real exit reason: terminate's crash.
                    assert_eq!(
                        s.stop(custom("asked")),
                        Err(CallError::Down(DownReason::Panic("terminate boom".into())))
                    );
                    "terminate Custom(\"asked\")"
                }
                "parent exit" => {
                    go.take().unwrap().send(()).unwrap();
                    "terminate Normal"
                }
                _ => {
                    s.cast(Cast::Panic("cast boom"));
                    "terminate Panic(\"cast boom\")"
                }
            };
            let d = next_down();
            assert_eq!(d.monitor, m, "{how}");
            // As in OTP, the server exits with terminate's crash.
            assert_eq!(d.reason, DownReason::Panic("terminate boom".into()), "{how}");
            assert_eq!(terminated(&log), [first], "{how}");
        }
    });
}
