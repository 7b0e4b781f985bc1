//! Supervisors (SEMANTICS.md, "Supervisor").
//!
//! Statement -> tests:
//!
//! - children start in order; `start_link` returns after the last child's init:
//!   children_start_in_order_and_start_link_returns_after_the_last_init
//! - a child that fails to start: the started ones are shut down, the supervisor fails
//!   with the reason:
//!   failed_child_start_stops_the_started_children_in_reverse_and_fails_the_supervisor,
//!   failed_gen_server_child_init_fails_the_supervisor
//! - (OTP) a start function that panics fails like one that returns `Err` (OTP runs it
//!   under `catch`); smarm's own stop unwinds are not caught:
//!   panicking_child_start_fails_the_supervisor_like_an_error,
//!   panicking_dynamic_child_start_fails_only_start_child,
//!   panicking_restart_is_retried_like_a_failed_one,
//!   a_kill_while_a_start_function_waits_is_not_taken_for_a_start_failure
//! - `OneForOne`:
//!   one_for_one_restarts_only_the_failed_child
//! - `OneForAll`:
//!   one_for_all_stops_the_others_in_reverse_order_and_restarts_all_in_start_order
//! - `RestForOne`:
//!   rest_for_one_restarts_the_failed_child_and_those_started_after_it
//! - `SimpleOneForOne` (dynamic children of one spec; their arguments, and the rest of the
//!   supervisor API, in tests/supervisor_api.rs):
//!   simple_one_for_one_starts_dynamic_children_of_its_one_spec,
//!   simple_one_for_one_restarts_only_the_failed_instance,
//!   start_child_needs_a_simple_one_for_one_supervisor
//! - restarted children get new pids; names are the stable handles:
//!   restarted_child_gets_a_new_pid_and_keeps_its_registered_name
//! - `Permanent` (always):
//!   permanent_child_is_restarted_after_any_exit
//! - `Transient` (only after an abnormal exit, not `Normal` or `Shutdown`):
//!   transient_child_is_not_restarted_after_a_normal_exit,
//!   transient_child_is_not_restarted_after_a_shutdown_exit,
//!   transient_child_is_restarted_after_an_abnormal_exit,
//!   transient_gen_server_child_stopping_with_a_custom_reason_is_restarted,
//!   transient_gen_server_child_stopping_with_shutdown_with_a_term_is_not_restarted
//!   (`ShutdownWith`, OTP's `{shutdown, Term}`, is not abnormal either)
//! - `Temporary` (never):
//!   temporary_child_is_never_restarted_and_is_forgotten,
//!   one_for_all_and_rest_for_one_forget_the_temporary_children_they_stop
//! - (OTP `try_again_restart`) a restart whose start function fails is retried later, after
//!   the requests and signals already queued; the whole group again for `OneForAll` and
//!   `RestForOne`:
//!   failed_restart_is_retried_and_the_supervisor_lives_on,
//!   failed_restart_is_retried_after_what_is_already_queued,
//!   failed_restart_in_a_one_for_all_group_is_retried_with_the_whole_group,
//!   failed_restart_in_a_rest_for_one_group_is_retried_from_the_failed_child,
//!   failed_restart_of_a_dynamic_child_is_retried
//! - more than `intensity` restarts within `period` shuts the supervisor down (children
//!   first, then itself with `Shutdown`):
//!   exceeding_the_restart_intensity_stops_the_children_then_the_supervisor_with_shutdown,
//!   restarts_up_to_the_intensity_are_allowed,
//!   restarts_older_than_the_period_do_not_count,
//!   each_failed_restart_attempt_counts_toward_the_intensity
//! - (OTP `invalid_period`) a zero period is rejected:
//!   zero_period_is_rejected
//! - defaults 3 per 5 s:
//!   default_intensity_is_three_restarts_in_five_seconds
//! - shutdown spec `BrutalKill`:
//!   brutal_kill_child_is_killed_even_when_trapping_exits
//! - `Timeout(d)` (send `Shutdown`, wait, then kill):
//!   timeout_child_that_exits_on_shutdown_ends_with_shutdown,
//!   timeout_child_that_ignores_shutdown_is_killed_after_the_timeout
//! - `Infinity`:
//!   infinity_child_is_waited_for_however_long_it_takes
//! - children stop one at a time in reverse start order:
//!   children_stop_one_at_a_time_in_reverse_start_order,
//!   nested_supervisor_stops_its_own_tree_first
//! - dynamic children in parallel:
//!   dynamic_children_stop_in_parallel
//! - many dynamic children (OTP's `terminate_dynamic_children`): each ends with `Shutdown`,
//!   all before the supervisor, none left:
//!   stopping_many_dynamic_children_ends_each_with_shutdown_before_the_supervisor
//! - (OTP `shutdown/2`) a child is monitored while it is stopped, so one that is not linked
//!   to the supervisor (it unlinked itself) is stopped all the same:
//!   unlinked_children_are_stopped_per_their_shutdown_spec,
//!   unlinked_dynamic_children_are_stopped_too
//! - a child the start function did not link is linked by the supervisor:
//!   child_started_without_a_link_is_linked_and_restarted_when_it_crashes,
//!   child_started_without_a_link_that_already_ended_is_restarted

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smarm::channel::{channel, oneshot, watch, OneshotReceiver, OneshotSender, Receiver, Sender};
use smarm::gen_server::{self, CallResult, Caller, Ctx, Flow, GenServer, InitResult};
use smarm::supervisor::{
    self, ChildSpec, Restart, Shutdown, SimpleSupervisorRef, Strategy, SupFlags, SupStartError, SupervisorError,
    SupervisorRef,
};
use smarm::{DownReason, Exit, JoinHandle, Pid, Runtime, Signal};

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

fn push(log: &Log, s: impl Into<String>) {
    log.lock().unwrap().push(s.into());
}

fn entries(log: &Log) -> Vec<String> {
    log.lock().unwrap().clone()
}

/// The log entries after the first occurrence of `mark` (inclusive).
fn from_mark(log: &Log, mark: &str) -> Vec<String> {
    let e = entries(log);
    let i = e.iter().rposition(|x| x == mark).unwrap_or_else(|| panic!("no {mark:?} in {e:?}"));
    e[i..].to_vec()
}

fn next_signal() -> Signal {
    smarm::recv_signal_timeout(GUARD).expect("no signal within the guard time")
}

fn next_down() -> smarm::Down {
    match next_signal() {
        Signal::Down(d) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

// ------------------------------------------------------------------------------------------
// Child harness
// ------------------------------------------------------------------------------------------

/// What a test tells a (non-trapping) child to do.
enum Cmd {
    Return,
    Panic,
    /// Exit with this reason (an exit signal to itself).
    Exit(DownReason),
}

/// How a child reacts to the supervisor's `Shutdown` exit signal.
#[derive(Clone, Copy)]
enum Kind {
    /// Does not trap exits: dies with the signal. Takes commands.
    Plain,
    /// Traps exits and ignores them.
    Ignore,
    /// Traps exits; on `Shutdown` logs `got:id`, works for the duration, logs `done:id`,
    /// and returns.
    Slow(Duration),
}

/// How a child's start function leaves the link between the child and the supervisor.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Link {
    /// `spawn_link`, as a start function should.
    Linked,
    /// Plain `spawn`: the start function does not link (the supervisor must).
    Unlinked,
    /// `spawn_link`, and the child unlinks itself from the supervisor when told
    /// ([`Started::unlink_itself`]): OTP's "naughty child".
    Naughty,
}

/// One started child instance, reported by its start function.
struct Started {
    id: String,
    pid: Pid,
    cmd: Sender<Cmd>,
    handle: JoinHandle<()>,
    /// For a `Link::Naughty` child: tells it to unlink itself, and its acknowledgement.
    unlink: Option<(OneshotSender<()>, OneshotReceiver<()>)>,
}

impl Started {
    /// Makes the child end as told and waits until its exit (signals included) is done.
    fn end(self, how: Cmd) -> Result<(), DownReason> {
        self.cmd.send(how).unwrap();
        self.handle.join()
    }

    /// Makes a `Link::Naughty` child unlink itself from the supervisor; returns once it has.
    fn unlink_itself(&mut self) {
        let (go, ack) = self.unlink.take().expect("not a naughty child");
        go.send(()).unwrap();
        ack.recv().expect("the child did not unlink itself");
    }
}

/// Logs `down:id` when the child's body ends (returns or unwinds).
struct DownGuard(Log, String);
impl Drop for DownGuard {
    fn drop(&mut self) {
        push(&self.0, format!("down:{}", self.1));
    }
}

#[derive(Clone)]
struct Harness {
    log: Log,
    started: Sender<Started>,
}

fn harness() -> (Harness, Receiver<Started>) {
    let (tx, rx) = channel();
    (Harness { log: Arc::new(Mutex::new(Vec::new())), started: tx }, rx)
}

fn child_body(id: String, log: Log, kind: Kind, cmds: Receiver<Cmd>) {
    let _guard = DownGuard(log.clone(), id.clone());
    match kind {
        Kind::Plain => loop {
            match cmds.recv() {
                Ok(Cmd::Return) => return,
                Ok(Cmd::Panic) => panic!("child {id} crashed"),
                Ok(Cmd::Exit(r)) => {
                    smarm::exit(smarm::current_pid(), r);
                    smarm::yield_now();
                }
                Err(_) => loop {
                    smarm::sleep(Duration::from_secs(3600));
                },
            }
        },
        Kind::Ignore => loop {
            if let Signal::Exit(x) = smarm::recv_signal() {
                push(&log, format!("got:{id}:{:?}", x.reason));
            }
        },
        Kind::Slow(d) => loop {
            if let Signal::Exit(Exit { reason: DownReason::Shutdown, .. }) = smarm::recv_signal() {
                push(&log, format!("got:{id}"));
                smarm::sleep(d);
                push(&log, format!("done:{id}"));
                return;
            }
        },
    }
}

impl Harness {
    /// A worker spec whose start function spawns a linked child of `kind`, logs
    /// `start:id`, and reports the instance.
    fn spec(&self, id: &str, kind: Kind) -> ChildSpec {
        self.spec_linking(id, kind, Link::Linked)
    }

    /// [`Harness::spec`] whose start function leaves the link as `link` says.
    fn spec_linking(&self, id: &str, kind: Kind, link: Link) -> ChildSpec {
        let h = self.clone();
        let id2 = id.to_string();
        ChildSpec::worker(id, move || Ok(h.start_linking(&id2, kind, link)))
    }

    fn start_instance(&self, id: &str, kind: Kind) -> Pid {
        self.start_linking(id, kind, Link::Linked)
    }

    fn start_linking(&self, id: &str, kind: Kind, link: Link) -> Pid {
        let (cmd_tx, cmd_rx) = channel();
        let log = self.log.clone();
        let id = id.to_string();
        push(&self.log, format!("start:{id}"));
        let id2 = id.clone();
        let trapping = !matches!(kind, Kind::Plain);
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (go_tx, go_rx) = oneshot::<()>();
        let (ack_tx, ack_rx) = oneshot::<()>();
        // Start functions run in the supervisor.
        let sup = smarm::current_pid();
        let body = move || {
            if trapping {
                smarm::trap_exit(true);
            }
            ready_tx.send(()).unwrap();
            if link == Link::Naughty && go_rx.recv().is_ok() {
                smarm::unlink(sup);
                ack_tx.send(()).unwrap();
            }
            child_body(id2, log, kind, cmd_rx)
        };
        let handle = match link {
            Link::Unlinked => smarm::spawn(body),
            Link::Linked | Link::Naughty => smarm::spawn_link(body),
        };
        // Trapping children are ready for the supervisor's signals before it goes on.
        ready_rx.recv().unwrap();
        let pid = handle.pid();
        let unlink = (link == Link::Naughty).then_some((go_tx, ack_rx));
        let _ = self.started.send(Started { id, pid, cmd: cmd_tx, handle, unlink });
        pid
    }
}

/// How a flaky start function fails.
#[derive(Clone, Copy)]
enum Fail {
    Err,
    Panic,
}

impl Harness {
    /// Like [`Harness::spec`], but the start function fails as `how` on the calls (counted
    /// from 0, the first start) for which `fails` is true, logging `fail:id`. Also returns
    /// the number of calls so far.
    fn flaky_spec(
        &self,
        id: &str,
        kind: Kind,
        how: Fail,
        fails: impl Fn(usize) -> bool + Send + Sync + 'static,
    ) -> (ChildSpec, Arc<AtomicUsize>) {
        let h = self.clone();
        let id2 = id.to_string();
        let calls = Arc::new(AtomicUsize::new(0));
        let calls2 = calls.clone();
        let spec = ChildSpec::worker(id, move || {
            if fails(calls2.fetch_add(1, Ordering::SeqCst)) {
                push(&h.log, format!("fail:{id2}"));
                match how {
                    Fail::Err => return Err(custom("cannot start")),
                    Fail::Panic => panic!("start of {id2} panicked"),
                }
            }
            Ok(h.start_instance(&id2, kind))
        });
        (spec, calls)
    }
}

fn next_started(rx: &Receiver<Started>) -> Started {
    rx.recv_timeout(GUARD).expect("no child (re)started within the guard time")
}

/// Asserts that no child was (re)started: call after a round trip to the supervisor that
/// follows the exit in its mailbox.
fn assert_none_started(rx: &Receiver<Started>) {
    if let Ok(s) = rx.try_recv() {
        panic!("child {} was (re)started", s.id);
    }
}

fn flags(strategy: Strategy) -> SupFlags {
    SupFlags { intensity: 10, ..SupFlags::new(strategy) }
}

/// The running children, (id, pid), in start order.
trait Kids {
    fn kids(&self) -> Vec<(String, Pid)>;
}

impl Kids for SupervisorRef {
    fn kids(&self) -> Vec<(String, Pid)> {
        let all = self.which_children().expect("which_children");
        all.into_iter().filter_map(|c| c.pid().map(|p| (c.id, p))).collect()
    }
}

impl<A: Clone + Send + 'static> Kids for SimpleSupervisorRef<A> {
    fn kids(&self) -> Vec<(String, Pid)> {
        self.supervisor().kids()
    }
}

/// The failing child's id and reason of a `start_link` that failed with `SupStartError::Child`.
fn child_failure(r: Result<SupervisorRef, SupStartError>) -> (String, DownReason) {
    match r {
        Err(SupStartError::Child { id, reason }) => (id, reason),
        other => panic!("expected a child start failure, got {other:?}"),
    }
}

fn ids(sup: &SupervisorRef) -> Vec<String> {
    sup.kids().into_iter().map(|(id, _)| id).collect()
}

// ------------------------------------------------------------------------------------------
// Start
// ------------------------------------------------------------------------------------------

/// A gen_server child that logs its init and terminate.
struct Worker {
    id: &'static str,
    log: Log,
    slow_init: Duration,
    fail_init: bool,
    stop_with: Option<DownReason>,
}

impl GenServer for Worker {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult {
        smarm::trap_exit(true);
        smarm::sleep(self.slow_init);
        if self.fail_init {
            return InitResult::Stop(custom("init refused"));
        }
        push(&self.log, format!("init:{}", self.id));
        InitResult::Ok
    }
    fn handle_call(&mut self, _: (), _: &Caller<()>, _ctx: &Ctx<Self>) -> CallResult<()> {
        CallResult::Reply(())
    }
    fn handle_cast(&mut self, _: (), _ctx: &Ctx<Self>) -> Flow {
        match self.stop_with.take() {
            Some(r) => Flow::Stop(r),
            None => Flow::Continue,
        }
    }
    fn terminate(&mut self, reason: &DownReason) {
        push(&self.log, format!("terminate:{}:{reason:?}", self.id));
    }
}

fn worker_spec(log: &Log, id: &'static str, slow_init: Duration, fail_init: bool) -> ChildSpec {
    let log = log.clone();
    ChildSpec::worker(id, move || {
        let w = Worker { id, log: log.clone(), slow_init, fail_init, stop_with: None };
        gen_server::start_link(w).map(|s| s.pid()).map_err(|e| match e {
            gen_server::StartError::Init(r) => r,
            other => custom(&other.to_string()),
        })
    })
}

#[test]
fn children_start_in_order_and_start_link_returns_after_the_last_init() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let specs = vec![
            worker_spec(&log, "a", 10 * MS, false),
            worker_spec(&log, "b", MS, false),
            worker_spec(&log, "c", 20 * MS, false),
        ];
        let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), specs).unwrap();
        assert_eq!(entries(&log), ["init:a", "init:b", "init:c"]);
        assert_eq!(ids(&sup), ["a", "b", "c"]);
    });
}

#[test]
fn failed_child_start_stops_the_started_children_in_reverse_and_fails_the_supervisor() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let specs = vec![
            worker_spec(&log, "a", MS, false),
            worker_spec(&log, "b", MS, false),
            ChildSpec::worker("c", || Err::<Pid, _>(custom("cannot start"))),
            worker_spec(&log, "d", MS, false),
        ];
        let r = supervisor::start_link(SupFlags::new(Strategy::OneForOne), specs);
        assert_eq!(child_failure(r), ("c".to_string(), custom("cannot start")));
        // a and b were shut down (trapping: terminate ran) in reverse order; d never started.
        assert_eq!(entries(&log), ["init:a", "init:b", "terminate:b:Shutdown", "terminate:a:Shutdown"]);
    });
}

#[test]
fn failed_gen_server_child_init_fails_the_supervisor() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let specs = vec![worker_spec(&log, "a", MS, false), worker_spec(&log, "b", MS, true)];
        let r = supervisor::start_link(SupFlags::new(Strategy::OneForAll), specs);
        assert_eq!(child_failure(r), ("b".to_string(), custom("init refused")));
        assert_eq!(entries(&log), ["init:a", "terminate:a:Shutdown"]);
    });
}

#[test]
fn panicking_child_start_fails_the_supervisor_like_an_error() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let specs = vec![
            worker_spec(&log, "a", MS, false),
            worker_spec(&log, "b", MS, false),
            ChildSpec::worker("c", || -> Result<Pid, DownReason> { panic!("cannot start") }),
            worker_spec(&log, "d", MS, false),
        ];
        let r = supervisor::start_link(SupFlags::new(Strategy::OneForOne), specs);
        assert_eq!(child_failure(r), ("c".to_string(), DownReason::Panic("cannot start".into())));
        // As for an `Err`: a and b were shut down in reverse order; d never started.
        assert_eq!(entries(&log), ["init:a", "init:b", "terminate:b:Shutdown", "terminate:a:Shutdown"]);
    });
}

#[test]
fn panicking_dynamic_child_start_fails_only_start_child() {
    run(|| {
        let (h, rx) = harness();
        let (spec, _calls) = h.flaky_spec("w", Kind::Plain, Fail::Panic, |n| n == 1);
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let first = sup.start_child(()).unwrap().unwrap();
        assert_eq!(sup.start_child(()), Err(SupervisorError::Start(DownReason::Panic("start of w panicked".into()))));
        let third = sup.start_child(()).unwrap().unwrap();
        assert_eq!(next_started(&rx).pid, first);
        assert_eq!(next_started(&rx).pid, third);
        assert_eq!(sup.kids(), vec![("w".to_string(), first), ("w".to_string(), third)]);
    });
}

#[test]
fn a_kill_while_a_start_function_waits_is_not_taken_for_a_start_failure() {
    run(|| {
        let (pid_tx, pid_rx) = channel::<Pid>();
        let spec = ChildSpec::worker("w", move || {
            pid_tx.send(smarm::current_pid()).unwrap();
            smarm::sleep(Duration::from_secs(3600)); // the kill unwinds the supervisor from here
            Err::<Pid, _>(custom("the start function returned"))
        });
        let (res_tx, res_rx) = channel();
        smarm::spawn(move || {
            smarm::trap_exit(true); // outlives the supervisor it is linked to
            res_tx.send(supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec])).unwrap();
        });
        let sup = pid_rx.recv_timeout(GUARD).unwrap();
        let m = smarm::monitor(sup);
        smarm::kill(sup);
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
        // Not `Child { id: "w", reason: Killed }`: the kill ended the supervisor, not the start.
        match res_rx.recv_timeout(GUARD).unwrap() {
            Err(SupStartError::Ended) => {}
            other => panic!("start_link returned {other:?}"),
        }
    });
}

#[test]
fn zero_period_is_rejected() {
    run(|| {
        let (h, rx) = harness();
        let f = SupFlags { period: Duration::ZERO, ..SupFlags::new(Strategy::OneForOne) };
        let r = supervisor::start_link(f, vec![h.spec("a", Kind::Plain)]);
        let e = r.expect_err("a zero period was accepted");
        assert!(matches!(e, SupStartError::ZeroPeriod), "{e:?}");
        assert!(e.to_string().contains("period"), "{e}");
        assert_none_started(&rx);
    });
}

// ------------------------------------------------------------------------------------------
// Strategies
// ------------------------------------------------------------------------------------------

/// Starts a supervisor over plain children with the given ids; returns it and the
/// instances in start order.
fn plain_tree(strategy: Strategy, names: &[&str]) -> (SupervisorRef, Harness, Receiver<Started>, Vec<Started>) {
    let (h, rx) = harness();
    let specs = names.iter().map(|n| h.spec(n, Kind::Plain)).collect();
    let sup = supervisor::start_link(flags(strategy), specs).unwrap();
    let kids = names.iter().map(|_| next_started(&rx)).collect();
    (sup, h, rx, kids)
}

#[test]
fn one_for_one_restarts_only_the_failed_child() {
    run(|| {
        let (sup, h, rx, mut kids) = plain_tree(Strategy::OneForOne, &["a", "b", "c"]);
        let before = sup.kids();
        let b = kids.remove(1);
        let old = b.pid;
        assert!(b.end(Cmd::Panic).is_err());
        let b2 = next_started(&rx);
        assert_eq!(b2.id, "b");
        assert_ne!(b2.pid, old);
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "start:b"]);
        let after = sup.kids();
        assert_eq!(after[0], before[0]);
        assert_eq!(after[1], ("b".to_string(), b2.pid));
        assert_eq!(after[2], before[2]);
        assert_none_started(&rx);
    });
}

#[test]
fn one_for_all_stops_the_others_in_reverse_order_and_restarts_all_in_start_order() {
    run(|| {
        let (sup, h, rx, mut kids) = plain_tree(Strategy::OneForAll, &["a", "b", "c"]);
        let old: Vec<Pid> = kids.iter().map(|k| k.pid).collect();
        let b = kids.remove(1);
        assert!(b.end(Cmd::Panic).is_err());
        let new: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        assert_eq!(new.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        for (s, o) in new.iter().zip(&old) {
            assert_ne!(s.pid, *o, "{} kept its pid", s.id);
        }
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "down:c", "down:a", "start:a", "start:b", "start:c"]);
        assert_eq!(
            sup.kids().into_iter().map(|(_, p)| p).collect::<Vec<_>>(),
            new.iter().map(|s| s.pid).collect::<Vec<_>>()
        );
    });
}

#[test]
fn rest_for_one_restarts_the_failed_child_and_those_started_after_it() {
    run(|| {
        let (sup, h, rx, mut kids) = plain_tree(Strategy::RestForOne, &["a", "b", "c", "d"]);
        let a = kids[0].pid;
        let b = kids.remove(1);
        assert!(b.end(Cmd::Panic).is_err());
        let new: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        assert_eq!(new.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["b", "c", "d"]);
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "down:d", "down:c", "start:b", "start:c", "start:d"]);
        let now = sup.kids();
        assert_eq!(now[0], ("a".to_string(), a), "a child started before the failed one was restarted");
        assert_none_started(&rx);
    });
}

fn simple_tree(n: usize) -> (SimpleSupervisorRef<()>, Harness, Receiver<Started>, Vec<Started>) {
    let (h, rx) = harness();
    let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), h.spec("w", Kind::Plain)).unwrap();
    // The template is not started.
    assert_eq!(sup.kids(), Vec::new());
    assert_none_started(&rx);
    let kids = (0..n)
        .map(|_| {
            let pid = sup.start_child(()).unwrap().unwrap();
            let s = next_started(&rx);
            assert_eq!(s.pid, pid);
            s
        })
        .collect();
    (sup, h, rx, kids)
}

#[test]
fn simple_one_for_one_starts_dynamic_children_of_its_one_spec() {
    run(|| {
        let (sup, _h, _rx, kids) = simple_tree(3);
        let pids: Vec<Pid> = kids.iter().map(|k| k.pid).collect();
        assert_eq!(sup.kids(), pids.iter().map(|p| ("w".to_string(), *p)).collect::<Vec<_>>());
        assert_eq!(sup.terminate_child(pids[1]), Ok(()));
        assert_eq!(sup.kids(), vec![("w".to_string(), pids[0]), ("w".to_string(), pids[2])]);
    });
}

#[test]
fn simple_one_for_one_restarts_only_the_failed_instance() {
    run(|| {
        let (sup, _h, rx, mut kids) = simple_tree(3);
        let (p0, p2) = (kids[0].pid, kids[2].pid);
        let k1 = kids.remove(1);
        let old = k1.pid;
        assert!(k1.end(Cmd::Panic).is_err());
        let again = next_started(&rx);
        assert_ne!(again.pid, old);
        let now: Vec<Pid> = sup.kids().into_iter().map(|(_, p)| p).collect();
        assert!(now.contains(&p0) && now.contains(&p2) && now.contains(&again.pid), "{now:?}");
        assert_eq!(now.len(), 3);
        assert_none_started(&rx);
    });
}

#[test]
fn start_child_needs_a_simple_one_for_one_supervisor() {
    run(|| {
        let (sup, _h, _rx, _kids) = plain_tree(Strategy::OneForOne, &["a"]);
        assert_eq!(sup.clone().into_simple::<()>().unwrap_err(), SupervisorError::NotSimple);
    });
}

#[test]
fn restarted_child_gets_a_new_pid_and_keeps_its_registered_name() {
    run(|| {
        let (h, rx) = harness();
        let h2 = h.clone();
        let spec = ChildSpec::worker("named", move || {
            let pid = h2.start_instance("named", Kind::Plain);
            smarm::register("stable", pid).map_err(|e| custom(&e.to_string()))?;
            Ok(pid)
        });
        let _sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        let first = next_started(&rx);
        assert_eq!(smarm::whereis("stable"), Some(first.pid));
        let old = first.pid;
        assert!(first.end(Cmd::Panic).is_err());
        let second = next_started(&rx);
        assert_ne!(second.pid, old);
        assert_eq!(smarm::whereis("stable"), Some(second.pid));
    });
}

// ------------------------------------------------------------------------------------------
// Failed restarts
// ------------------------------------------------------------------------------------------

#[test]
fn failed_restart_is_retried_and_the_supervisor_lives_on() {
    run(|| {
        let (h, rx) = harness();
        let (b, calls) = h.flaky_spec("b", Kind::Plain, Fail::Err, |n| n == 1);
        let specs = vec![h.spec("a", Kind::Plain), b, h.spec("c", Kind::Plain)];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let mut kids: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        let before = sup.kids();
        assert!(kids.remove(1).end(Cmd::Panic).is_err());
        let b2 = next_started(&rx);
        assert_eq!(b2.id, "b");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "fail:b", "start:b"]);
        assert_eq!(sup.kids(), [before[0].clone(), ("b".to_string(), b2.pid), before[2].clone()]);
        assert_none_started(&rx);
    });
}

#[test]
fn panicking_restart_is_retried_like_a_failed_one() {
    run(|| {
        let (h, rx) = harness();
        let (b, calls) = h.flaky_spec("b", Kind::Plain, Fail::Panic, |n| n == 1);
        let specs = vec![h.spec("a", Kind::Ignore), b];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let a = next_started(&rx);
        let b = next_started(&rx);
        assert!(b.end(Cmd::Panic).is_err());
        let b2 = next_started(&rx);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "fail:b", "start:b"]);
        assert_eq!(sup.kids(), [("a".to_string(), a.pid), ("b".to_string(), b2.pid)]);
    });
}

#[test]
fn failed_restart_is_retried_after_what_is_already_queued() {
    run(|| {
        smarm::trap_exit(true);
        let (h, rx) = harness();
        let (failing_tx, failing_rx) = channel::<()>();
        let (go_tx, go_rx) = channel::<()>();
        let go_rx = Mutex::new(Some(go_rx));
        let calls = Arc::new(AtomicUsize::new(0));
        let (h2, calls2) = (h.clone(), calls.clone());
        // The first restart fails, once the test has queued an exit signal for the supervisor.
        let spec = ChildSpec::worker("x", move || {
            if calls2.fetch_add(1, Ordering::SeqCst) == 1 {
                failing_tx.send(()).unwrap();
                let go = go_rx.lock().unwrap().take().unwrap();
                go.recv().unwrap();
                return Err(custom("cannot start"));
            }
            Ok(h2.start_instance("x", Kind::Plain))
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![h.spec("a", Kind::Plain), spec]).unwrap();
        let m = smarm::monitor(sup.pid());
        let _a = next_started(&rx);
        let x = next_started(&rx);
        assert!(x.end(Cmd::Panic).is_err());
        failing_rx.recv_timeout(GUARD).unwrap();
        // From the parent: handled (stop the children, exit likewise) before the retry.
        smarm::exit(sup.pid(), custom("go away"));
        go_tx.send(()).unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, custom("go away")));
        assert_eq!(calls.load(Ordering::SeqCst), 2, "the restart was tried again first");
        assert_eq!(from_mark(&h.log, "down:x"), ["down:x", "down:a"]);
        assert_none_started(&rx);
    });
}

#[test]
fn failed_restart_in_a_one_for_all_group_is_retried_with_the_whole_group() {
    run(|| {
        let (h, rx) = harness();
        let (b, _) = h.flaky_spec("b", Kind::Plain, Fail::Err, |n| n == 1);
        let specs = vec![h.spec("a", Kind::Plain), b, h.spec("c", Kind::Plain)];
        let sup = supervisor::start_link(flags(Strategy::OneForAll), specs).unwrap();
        let a = next_started(&rx);
        let _others: Vec<Started> = (0..2).map(|_| next_started(&rx)).collect();
        assert!(a.end(Cmd::Panic).is_err());
        // a restarted, b failed (c not started), then the retry: the group once more.
        let new: Vec<Started> = (0..4).map(|_| next_started(&rx)).collect();
        assert_eq!(new.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["a", "a", "b", "c"]);
        assert_eq!(
            entries(&h.log)[3..], // after the first starts
            ["down:a", "down:c", "down:b", "start:a", "fail:b", "down:a", "start:a", "start:b", "start:c"]
        );
        assert_eq!(
            sup.kids().into_iter().map(|(_, p)| p).collect::<Vec<_>>(),
            new[1..].iter().map(|s| s.pid).collect::<Vec<_>>()
        );
        assert_none_started(&rx);
    });
}

#[test]
fn failed_restart_in_a_rest_for_one_group_is_retried_from_the_failed_child() {
    run(|| {
        let (h, rx) = harness();
        let (c, _) = h.flaky_spec("c", Kind::Plain, Fail::Err, |n| n == 1);
        let specs = vec![h.spec("a", Kind::Plain), h.spec("b", Kind::Plain), c, h.spec("d", Kind::Plain)];
        let sup = supervisor::start_link(flags(Strategy::RestForOne), specs).unwrap();
        let mut kids: Vec<Started> = (0..4).map(|_| next_started(&rx)).collect();
        let a = kids[0].pid;
        assert!(kids.remove(1).end(Cmd::Panic).is_err());
        let new: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        assert_eq!(new.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["b", "c", "d"]);
        // b restarted, c failed (d not started), then the retry: c and the children after it.
        assert_eq!(
            from_mark(&h.log, "down:b"),
            ["down:b", "down:d", "down:c", "start:b", "fail:c", "start:c", "start:d"]
        );
        let mut now = vec![a];
        now.extend(new.iter().map(|s| s.pid));
        assert_eq!(sup.kids().into_iter().map(|(_, p)| p).collect::<Vec<_>>(), now);
        assert_none_started(&rx);
    });
}

#[test]
fn failed_restart_of_a_dynamic_child_is_retried() {
    run(|| {
        let (h, rx) = harness();
        // Calls 0-2 start the three instances; call 3, the restart, fails.
        let (spec, calls) = h.flaky_spec("w", Kind::Plain, Fail::Err, |n| n == 3);
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let mut kids: Vec<Started> = (0..3)
            .map(|_| {
                sup.start_child(()).unwrap().unwrap();
                next_started(&rx)
            })
            .collect();
        let (p0, p2) = (kids[0].pid, kids[2].pid);
        assert!(kids.remove(1).end(Cmd::Panic).is_err());
        let again = next_started(&rx);
        assert_eq!(calls.load(Ordering::SeqCst), 5);
        assert_eq!(from_mark(&h.log, "down:w"), ["down:w", "fail:w", "start:w"]);
        let now: Vec<Pid> = sup.kids().into_iter().map(|(_, p)| p).collect();
        assert_eq!(now.len(), 3);
        assert!(now.contains(&p0) && now.contains(&p2) && now.contains(&again.pid), "{now:?}");
        assert_none_started(&rx);
    });
}

// ------------------------------------------------------------------------------------------
// Restart types
// ------------------------------------------------------------------------------------------

fn one_child(restart: Restart) -> (SupervisorRef, Receiver<Started>, Started) {
    let (h, rx) = harness();
    let spec = h.spec("x", Kind::Plain).restart(restart);
    let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
    let s = next_started(&rx);
    (sup, rx, s)
}

#[test]
fn permanent_child_is_restarted_after_any_exit() {
    run(|| {
        let (sup, rx, mut s) = one_child(Restart::Permanent);
        for how in [
            Cmd::Return,
            Cmd::Exit(DownReason::Shutdown),
            Cmd::Panic,
            Cmd::Exit(custom("odd")),
            Cmd::Exit(DownReason::Killed),
        ] {
            let old = s.pid;
            let _ = s.end(how);
            s = next_started(&rx);
            assert_ne!(s.pid, old);
        }
        assert_eq!(ids(&sup), ["x"]);
    });
}

#[test]
fn transient_child_is_not_restarted_after_a_normal_exit() {
    run(|| {
        let (sup, rx, s) = one_child(Restart::Transient);
        assert_eq!(s.end(Cmd::Return), Ok(()));
        assert_eq!(sup.kids(), Vec::new());
        assert_none_started(&rx);
    });
}

#[test]
fn transient_child_is_not_restarted_after_a_shutdown_exit() {
    run(|| {
        let (sup, rx, s) = one_child(Restart::Transient);
        assert_eq!(s.end(Cmd::Exit(DownReason::Shutdown)), Err(DownReason::Shutdown));
        assert_eq!(sup.kids(), Vec::new());
        assert_none_started(&rx);
    });
}

#[test]
fn transient_child_is_restarted_after_an_abnormal_exit() {
    run(|| {
        let (sup, rx, mut s) = one_child(Restart::Transient);
        for how in [Cmd::Panic, Cmd::Exit(custom("odd")), Cmd::Exit(DownReason::Killed)] {
            let old = s.pid;
            assert!(s.end(how).is_err());
            s = next_started(&rx);
            assert_ne!(s.pid, old);
        }
        assert_eq!(ids(&sup), ["x"]);
    });
}

#[test]
fn transient_gen_server_child_stopping_with_a_custom_reason_is_restarted() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel::<gen_server::ServerRef<Worker>>();
        let log2 = log.clone();
        let spec = ChildSpec::worker("t", move || {
            let w =
                Worker { id: "t", log: log2.clone(), slow_init: MS, fail_init: false, stop_with: Some(custom("bad")) };
            let s = gen_server::start_link(w).map_err(|e| custom(&e.to_string()))?;
            let pid = s.pid();
            let _ = tx.send(s);
            Ok(pid)
        })
        .restart(Restart::Transient);
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        let first = rx.recv_timeout(GUARD).unwrap();
        first.cast(());
        let second = rx.recv_timeout(GUARD).expect("the transient child was not restarted");
        assert_ne!(second.pid(), first.pid());
        assert_eq!(ids(&sup), ["t"]);
    });
}

#[test]
fn transient_gen_server_child_stopping_with_shutdown_with_a_term_is_not_restarted() {
    run(|| {
        let log: Log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = channel::<gen_server::ServerRef<Worker>>();
        let log2 = log.clone();
        let quiet = DownReason::ShutdownWith("done".into());
        let quiet2 = quiet.clone();
        let spec = ChildSpec::worker("t", move || {
            let stop_with = Some(quiet2.clone());
            let w = Worker { id: "t", log: log2.clone(), slow_init: MS, fail_init: false, stop_with };
            let s = gen_server::start_link(w).map_err(|e| custom(&e.to_string()))?;
            let pid = s.pid();
            let _ = tx.send(s);
            Ok(pid)
        })
        .restart(Restart::Transient);
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        let first = rx.recv_timeout(GUARD).unwrap();
        let m = smarm::monitor(first.pid());
        first.cast(());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, quiet));
        // Once the exit is handled (the Down can overtake the exit signal to the supervisor):
        // the spec is kept, not running, and nothing was restarted.
        let state = loop {
            match sup.which_children().unwrap()[0].state {
                supervisor::ChildState::Running(p) if p == first.pid() => smarm::yield_now(),
                other => break other,
            }
        };
        assert_eq!(state, supervisor::ChildState::Undefined);
        assert!(rx.try_recv().is_err(), "the transient child was restarted");
    });
}

#[test]
fn temporary_child_is_never_restarted_and_is_forgotten() {
    run(|| {
        let (sup, rx, s) = one_child(Restart::Temporary);
        assert!(s.end(Cmd::Panic).is_err());
        assert_eq!(sup.kids(), Vec::new());
        assert_none_started(&rx);
    });
}

#[test]
fn one_for_all_and_rest_for_one_forget_the_temporary_children_they_stop() {
    for strategy in [Strategy::OneForAll, Strategy::RestForOne] {
        run(move || {
            let (h, rx) = harness();
            let specs = vec![
                h.spec("a", Kind::Plain),
                h.spec("t", Kind::Plain).restart(Restart::Temporary),
                h.spec("c", Kind::Plain),
            ];
            let sup = supervisor::start_link(flags(strategy), specs).unwrap();
            let a = next_started(&rx);
            let _others: Vec<Started> = (0..2).map(|_| next_started(&rx)).collect();
            assert!(a.end(Cmd::Panic).is_err());
            let new: Vec<Started> = (0..2).map(|_| next_started(&rx)).collect();
            assert_eq!(new.iter().map(|s| s.id.as_str()).collect::<Vec<_>>(), ["a", "c"], "{strategy:?}");
            assert_eq!(
                from_mark(&h.log, "down:a"),
                ["down:a", "down:c", "down:t", "start:a", "start:c"],
                "{strategy:?}"
            );
            assert_eq!(ids(&sup), ["a", "c"], "{strategy:?}");
            assert_none_started(&rx);
        });
    }
}

// ------------------------------------------------------------------------------------------
// Intensity
// ------------------------------------------------------------------------------------------

#[test]
fn default_intensity_is_three_restarts_in_five_seconds() {
    let f = SupFlags::new(Strategy::OneForOne);
    assert_eq!((f.intensity, f.period), (3, Duration::from_secs(5)));
    run(|| {
        smarm::trap_exit(true);
        let (h, rx) = harness();
        let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![h.spec("x", Kind::Plain)]).unwrap();
        let m = smarm::monitor(sup.pid());
        let mut s = next_started(&rx);
        for _ in 0..3 {
            assert!(s.end(Cmd::Panic).is_err());
            s = next_started(&rx);
        }
        assert_eq!(ids(&sup), ["x"], "three restarts are within the default intensity");
        assert!(s.end(Cmd::Panic).is_err());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
    });
}

#[test]
fn exceeding_the_restart_intensity_stops_the_children_then_the_supervisor_with_shutdown() {
    run(|| {
        smarm::trap_exit(true);
        let (h, rx) = harness();
        let f = SupFlags { intensity: 2, period: Duration::from_secs(5), ..SupFlags::new(Strategy::OneForOne) };
        let specs = vec![h.spec("a", Kind::Plain), h.spec("b", Kind::Plain), h.spec("c", Kind::Plain)];
        let sup = supervisor::start_link(f, specs).unwrap();
        let sup_pid = sup.pid();
        let m = smarm::monitor(sup_pid);
        let mut a = next_started(&rx);
        let _b = next_started(&rx);
        let _c = next_started(&rx);
        for _ in 0..2 {
            assert!(a.end(Cmd::Panic).is_err());
            a = next_started(&rx);
        }
        assert!(a.end(Cmd::Panic).is_err());
        // The supervisor's Down comes after its children were stopped (reverse order).
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
        assert_eq!(from_mark(&h.log, "down:a"), ["down:a", "down:c", "down:b"]);
        // Linked to us: a trapping parent receives its exit signal, reason Shutdown.
        assert_eq!(next_signal(), Signal::Exit(Exit { from: sup_pid, reason: DownReason::Shutdown }));
        assert_none_started(&rx);
    });
}

#[test]
fn restarts_up_to_the_intensity_are_allowed() {
    run(|| {
        let (h, rx) = harness();
        let f = SupFlags { intensity: 2, period: Duration::from_secs(5), ..SupFlags::new(Strategy::OneForOne) };
        let sup = supervisor::start_link(f, vec![h.spec("a", Kind::Plain)]).unwrap();
        let mut a = next_started(&rx);
        for _ in 0..2 {
            assert!(a.end(Cmd::Panic).is_err());
            a = next_started(&rx);
        }
        assert_eq!(sup.kids(), vec![("a".to_string(), a.pid)]);
    });
}

#[test]
fn each_failed_restart_attempt_counts_toward_the_intensity() {
    run(|| {
        smarm::trap_exit(true);
        let (h, rx) = harness();
        let f = SupFlags { intensity: 2, period: Duration::from_secs(3600), ..SupFlags::new(Strategy::OneForOne) };
        let (b, calls) = h.flaky_spec("b", Kind::Plain, Fail::Err, |n| n > 0);
        let sup = supervisor::start_link(f, vec![h.spec("a", Kind::Plain), b, h.spec("c", Kind::Plain)]).unwrap();
        let m = smarm::monitor(sup.pid());
        let mut kids: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        assert!(kids.remove(1).end(Cmd::Panic).is_err());
        // Two attempts within the intensity, both failed; the third exceeds it.
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        assert_eq!(from_mark(&h.log, "down:b"), ["down:b", "fail:b", "fail:b", "down:c", "down:a"]);
        assert_none_started(&rx);
    });
}

#[test]
fn restarts_older_than_the_period_do_not_count() {
    run(|| {
        smarm::trap_exit(true);
        let (h, rx) = harness();
        let f = SupFlags { intensity: 1, period: 500 * MS, ..SupFlags::new(Strategy::OneForOne) };
        let sup = supervisor::start_link(f, vec![h.spec("a", Kind::Plain)]).unwrap();
        let m = smarm::monitor(sup.pid());
        let mut a = next_started(&rx);
        assert!(a.end(Cmd::Panic).is_err());
        a = next_started(&rx);
        smarm::sleep(600 * MS); // the first restart leaves the window
        assert!(a.end(Cmd::Panic).is_err());
        a = next_started(&rx);
        assert_eq!(sup.kids(), vec![("a".to_string(), a.pid)]);
        // Control: a second restart inside the window exceeds intensity 1.
        assert!(a.end(Cmd::Panic).is_err());
        assert_eq!(next_down().monitor, m);
    });
}

// ------------------------------------------------------------------------------------------
// Shutdown specs
// ------------------------------------------------------------------------------------------

fn single(kind: Kind, shutdown: Shutdown) -> (SupervisorRef, Harness, Started) {
    let (h, rx) = harness();
    let spec = h.spec("x", kind).shutdown(shutdown);
    let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
    let s = next_started(&rx);
    (sup, h, s)
}

#[test]
fn brutal_kill_child_is_killed_even_when_trapping_exits() {
    run(|| {
        let (sup, h, s) = single(Kind::Ignore, Shutdown::BrutalKill);
        let m = smarm::monitor(s.pid);
        // From a helper: if the kill were an exit signal, this child would ignore it forever.
        let (sup2, pid) = (sup.clone(), s.pid);
        let (done_tx, done_rx) = smarm::channel::oneshot();
        smarm::spawn(move || done_tx.send(sup2.terminate_child(pid)).unwrap());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
        assert_eq!(done_rx.recv(), Ok(Ok(())));
        assert_eq!(s.handle.join(), Err(DownReason::Killed));
        assert!(!entries(&h.log).iter().any(|e| e.starts_with("got:")), "a brutal kill sent an exit signal first");
        assert_eq!(sup.kids(), Vec::new());
    });
}

#[test]
fn timeout_child_that_exits_on_shutdown_ends_with_shutdown() {
    run(|| {
        let (sup, _h, s) = single(Kind::Plain, Shutdown::Timeout(Duration::from_secs(5)));
        assert_eq!(sup.terminate_child(s.pid), Ok(()));
        assert_eq!(s.handle.join(), Err(DownReason::Shutdown));
    });
}

#[test]
fn timeout_child_that_ignores_shutdown_is_killed_after_the_timeout() {
    run(|| {
        let d = 100 * MS;
        let (sup, h, s) = single(Kind::Ignore, Shutdown::Timeout(d));
        let start = Instant::now();
        assert_eq!(sup.terminate_child(s.pid), Ok(()));
        assert!(start.elapsed() >= d, "killed before the shutdown timeout");
        assert_eq!(s.handle.join(), Err(DownReason::Killed));
        assert_eq!(entries(&h.log).iter().filter(|e| e.starts_with("got:")).collect::<Vec<_>>(), ["got:x:Shutdown"]);
    });
}

#[test]
fn infinity_child_is_waited_for_however_long_it_takes() {
    run(|| {
        // Longer than a worker's default shutdown, `Timeout(5 s)`: a timeout would kill it
        // mid-cleanup (no `done:x`, and it would end `Killed`).
        let cleanup = 5500 * MS;
        let (sup, h, s) = single(Kind::Slow(cleanup), Shutdown::Infinity);
        let start = Instant::now();
        assert_eq!(sup.terminate_child(s.pid), Ok(()));
        // terminate_child returned only after the slow cleanup finished.
        assert!(start.elapsed() >= cleanup, "terminate_child returned after {:?}", start.elapsed());
        assert_eq!(from_mark(&h.log, "got:x"), ["got:x", "done:x", "down:x"]);
        assert_eq!(s.handle.join(), Ok(()));
    });
}

#[test]
fn children_stop_one_at_a_time_in_reverse_start_order() {
    run(|| {
        let (h, rx) = harness();
        let specs = ["a", "b", "c"]
            .iter()
            .map(|id| h.spec(id, Kind::Slow(20 * MS)).shutdown(Shutdown::Timeout(Duration::from_secs(5))))
            .collect();
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let kids: Vec<Started> = (0..3).map(|_| next_started(&rx)).collect();
        sup.stop().unwrap();
        let stops: Vec<String> =
            entries(&h.log).into_iter().filter(|e| e.starts_with("got:") || e.starts_with("done:")).collect();
        assert_eq!(stops, ["got:c", "done:c", "got:b", "done:b", "got:a", "done:a"]);
        for k in kids {
            assert_eq!(k.handle.join(), Ok(()));
        }
    });
}

#[test]
fn nested_supervisor_stops_its_own_tree_first() {
    run(|| {
        let (h, rx) = harness();
        let h2 = h.clone();
        let inner = ChildSpec::supervisor("inner", move || {
            let specs = vec![h2.spec("i1", Kind::Plain), h2.spec("i2", Kind::Plain)];
            supervisor::start_link(flags(Strategy::OneForOne), specs)
                .map(|s| s.pid())
                .map_err(|e| custom(&e.to_string()))
        });
        let specs = vec![h.spec("o1", Kind::Plain), inner, h.spec("o2", Kind::Plain)];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let _kids: Vec<Started> = (0..4).map(|_| next_started(&rx)).collect();
        sup.stop().unwrap();
        let downs: Vec<String> = entries(&h.log).into_iter().filter(|e| e.starts_with("down:")).collect();
        assert_eq!(downs, ["down:o2", "down:i2", "down:i1", "down:o1"]);
    });
}

#[test]
fn dynamic_children_stop_in_parallel() {
    run(|| {
        let (got_tx, got_rx) = channel::<usize>();
        let (release_tx, release_rx) = watch(false);
        let counter = Arc::new(AtomicUsize::new(0));
        let spec = ChildSpec::worker("w", move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            let got_tx = got_tx.clone();
            let mut release = release_rx.clone();
            let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
            let h = smarm::spawn_link(move || {
                smarm::trap_exit(true);
                ready_tx.send(()).unwrap();
                loop {
                    if let Signal::Exit(Exit { reason: DownReason::Shutdown, .. }) = smarm::recv_signal() {
                        got_tx.send(n).unwrap();
                        // Wait until every instance has been asked to stop.
                        while !release.get() {
                            if release.changed().is_err() {
                                break;
                            }
                        }
                        return;
                    }
                }
            });
            ready_rx.recv().unwrap();
            Ok(h.pid())
        })
        .shutdown(Shutdown::Timeout(Duration::from_secs(5)));
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        for _ in 0..3 {
            sup.start_child(()).unwrap().unwrap();
        }
        let sup2 = sup.clone();
        let stopper = smarm::spawn(move || sup2.stop().unwrap());
        let mut asked = Vec::new();
        while asked.len() < 3 {
            match got_rx.recv_timeout(Duration::from_secs(1)) {
                Ok(n) => asked.push(n),
                Err(_) => break, // sequential: the next one is asked only after this one ends
            }
        }
        release_tx.send(true);
        stopper.join().unwrap();
        assert_eq!(asked.len(), 3, "only {asked:?} were asked to stop while the others ran");
    });
}

/// Runs `f` on `sup` from a helper and returns its result. Fails after the guard time (and
/// kills the supervisor, so that the runtime's shutdown does not wait for it either).
fn within_guard<T: Send + 'static>(sup: &SupervisorRef, f: impl FnOnce(&SupervisorRef) -> T + Send + 'static) -> T {
    let sup2 = sup.clone();
    let (done_tx, mut done_rx) = smarm::channel::oneshot();
    smarm::spawn(move || {
        let _ = done_tx.send(f(&sup2));
    });
    match done_rx.recv_timeout(GUARD) {
        Ok(r) => r,
        Err(_) => {
            smarm::kill(sup.pid());
            panic!("the supervisor did not answer within the guard time");
        }
    }
}

#[test]
fn unlinked_children_are_stopped_per_their_shutdown_spec() {
    run(|| {
        let (h, rx) = harness();
        let naughty = |id, kind| h.spec_linking(id, kind, Link::Naughty);
        let specs = vec![
            naughty("k", Kind::Ignore).shutdown(Shutdown::BrutalKill),
            naughty("t", Kind::Ignore).shutdown(Shutdown::Timeout(20 * MS)),
            naughty("i", Kind::Slow(MS)).shutdown(Shutdown::Infinity),
            naughty("p", Kind::Plain).shutdown(Shutdown::Timeout(Duration::from_secs(5))),
            naughty("x", Kind::Plain).shutdown(Shutdown::Timeout(Duration::from_secs(5))),
        ];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let mut kids: Vec<Started> = (0..5).map(|_| next_started(&rx)).collect();
        for k in &mut kids {
            k.unlink_itself();
        }
        // terminate_child too.
        let x = kids.pop().unwrap();
        let pid = x.pid;
        assert!(within_guard(&sup, move |s| s.terminate_child(pid).is_ok()));
        assert_eq!(x.handle.join(), Err(DownReason::Shutdown));
        within_guard(&sup, |s| s.stop().unwrap());
        let downs: Vec<String> = entries(&h.log).into_iter().filter(|e| e.starts_with("down:")).collect();
        assert_eq!(downs, ["down:x", "down:p", "down:i", "down:t", "down:k"]);
        let ends: Vec<(String, Result<(), DownReason>)> = kids.into_iter().map(|k| (k.id, k.handle.join())).collect();
        assert_eq!(
            ends,
            [
                ("k".to_string(), Err(DownReason::Killed)),
                ("t".to_string(), Err(DownReason::Killed)),
                ("i".to_string(), Ok(())),
                ("p".to_string(), Err(DownReason::Shutdown)),
            ]
        );
    });
}

#[test]
fn unlinked_dynamic_children_are_stopped_too() {
    run(|| {
        let (h, rx) = harness();
        let spec = h.spec_linking("w", Kind::Ignore, Link::Naughty).shutdown(Shutdown::Timeout(20 * MS));
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let mut kids: Vec<Started> = (0..3)
            .map(|_| {
                sup.start_child(()).unwrap().unwrap();
                let mut k = next_started(&rx);
                k.unlink_itself();
                k
            })
            .collect();
        let first = kids.remove(0);
        let pid = first.pid;
        assert!(within_guard(sup.supervisor(), move |s| s.terminate_child(pid).is_ok()));
        assert_eq!(first.handle.join(), Err(DownReason::Killed));
        within_guard(sup.supervisor(), |s| s.stop().unwrap());
        for k in kids {
            assert_eq!(k.handle.join(), Err(DownReason::Killed));
        }
    });
}

#[test]
fn stopping_many_dynamic_children_ends_each_with_shutdown_before_the_supervisor() {
    run(|| {
        const N: usize = 10_000;
        // Parked for good, not trapping exits: each ends with the supervisor's `Shutdown`.
        let spec = ChildSpec::worker("w", || {
            Ok(smarm::spawn_link(|| loop {
                smarm::recv_signal();
            })
            .pid())
        });
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let mut watched = std::collections::HashMap::new();
        for _ in 0..N {
            let pid = sup.start_child(()).unwrap().unwrap();
            watched.insert(smarm::monitor(pid), pid);
        }
        assert_eq!(sup.kids().len(), N);
        let sup_monitor = smarm::monitor(sup.pid());
        within_guard(sup.supervisor(), |s| s.stop().unwrap());
        // Every child's Down comes before the supervisor's: it waited for all of them.
        for _ in 0..N {
            let d = next_down();
            let pid = watched.remove(&d.monitor).unwrap_or_else(|| panic!("unexpected {d:?}"));
            assert_eq!((d.pid, d.reason), (pid, DownReason::Shutdown));
        }
        assert!(watched.is_empty());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (sup_monitor, DownReason::Normal));
        assert_eq!(sup.which_children(), Err(SupervisorError::NoProc));
    });
}

#[test]
fn child_started_without_a_link_is_linked_and_restarted_when_it_crashes() {
    run(|| {
        let (h, rx) = harness();
        let specs = vec![h.spec_linking("a", Kind::Plain, Link::Unlinked)];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let a = next_started(&rx);
        assert!(a.end(Cmd::Panic).is_err());
        // The crash was seen: restarted (and linked again: its crash is seen too).
        let a2 = next_started(&rx);
        assert_eq!(sup.kids(), vec![("a".to_string(), a2.pid)]);
        assert!(a2.end(Cmd::Panic).is_err());
        let a3 = next_started(&rx);
        assert_eq!(sup.kids(), vec![("a".to_string(), a3.pid)]);
        // A dynamic child likewise.
        let spec = h.spec_linking("w", Kind::Plain, Link::Unlinked);
        let dyn_sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let pid = dyn_sup.start_child(()).unwrap().unwrap();
        let w = next_started(&rx);
        assert_eq!(w.pid, pid);
        assert!(w.end(Cmd::Panic).is_err());
        let w2 = next_started(&rx);
        assert_eq!(dyn_sup.kids(), vec![("w".to_string(), w2.pid)]);
        // And it is stopped with the supervisor like a linked one.
        dyn_sup.stop().unwrap();
        assert_eq!(w2.handle.join(), Err(DownReason::Shutdown));
        assert_none_started(&rx);
    });
}

#[test]
fn child_started_without_a_link_that_already_ended_is_restarted() {
    run(|| {
        let (h, rx) = harness();
        let calls = Arc::new(AtomicUsize::new(0));
        let h2 = h.clone();
        let spec = ChildSpec::worker("a", move || {
            if calls.fetch_add(1, Ordering::SeqCst) == 0 {
                // An unlinked child that has ended before the supervisor can link it.
                let gone = smarm::spawn(|| ());
                let pid = gone.pid();
                gone.join().unwrap();
                return Ok(pid);
            }
            Ok(h2.start_instance("a", Kind::Plain))
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        // Linking the ended child fails with `NoProc`: an exit like any other, restarted.
        let a = next_started(&rx);
        assert_eq!(sup.kids(), vec![("a".to_string(), a.pid)]);
        assert_none_started(&rx);
    });
}
