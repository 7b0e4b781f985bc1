//! Supervisor API beyond start and restart (SEMANTICS.md, "Supervisor"; OTP's `supervisor`
//! module where smarm's page is silent).
//!
//! Statement -> tests:
//!
//! - dynamic children take arguments; restarts reuse them (OTP appends the `start_child`
//!   arguments to the template's):
//!   dynamic_child_gets_its_arguments_and_a_restart_reuses_them,
//!   dynamic_child_arguments_need_not_be_sync,
//!   exit_of_one_of_many_dynamic_children_restarts_only_it_with_its_arguments
//! - a handle's argument type is checked (at compile time for `start_simple`; a lookup
//!   checks it at run time):
//!   into_simple_checks_the_argument_type
//! - `start_child(spec)`, `already_started` / `already_present`, a failed start keeps
//!   nothing: start_child_adds_a_supervised_child_and_refuses_a_taken_id
//! - `terminate_child` keeps the spec, `restart_child` starts it again:
//!   terminate_child_keeps_the_spec_and_restart_child_starts_it_again
//! - `delete_child` removes a stopped child's spec only:
//!   delete_child_removes_only_a_stopped_spec
//! - `simple_one_for_one` refuses requests by id:
//!   simple_one_for_one_refuses_requests_about_static_children
//! - `which_children` shows restarting children; `count_children` as OTP:
//!   which_children_and_count_children_show_states_and_types,
//!   restarting_child_is_shown_and_refuses_restart_and_delete,
//!   restarting_dynamic_child_is_shown
//! - `ignore` (the spec is kept with no pid; dynamic: nothing kept; temporary: forgotten):
//!   ignored_static_child_is_kept_not_running_and_can_be_restarted,
//!   ignored_temporary_child_is_not_kept,
//!   ignored_dynamic_child_is_not_kept,
//!   restart_that_ignores_leaves_a_static_child_not_running
//! - a named supervisor is registered before its children start; a taken name is
//!   `already_started`:
//!   named_supervisor_is_registered_before_its_children_start,
//!   taken_name_fails_the_start_with_already_started_before_any_child_starts
//! - `{shutdown, Term}`: a transient child stops quietly; a linked non-trapping process
//!   still dies of it:
//!   transient_child_ending_with_shutdown_with_a_term_is_not_restarted,
//!   transient_dynamic_child_ending_with_shutdown_with_a_term_is_forgotten,
//!   permanent_child_ending_with_shutdown_with_a_term_is_restarted,
//!   shutdown_with_a_term_kills_a_linked_actor_that_does_not_trap_exits
//! - requests from the supervisor itself fail with `calling_self`:
//!   requests_from_the_supervisors_own_start_function_fail_with_calling_self
//! - typed start errors: start_link_reports_a_spawn_failure_as_a_spawn_error,
//!   duplicate_child_ids_are_refused, simple_one_for_one_needs_exactly_one_spec
//! - requests to a stopped supervisor: requests_to_a_stopped_supervisor_fail_with_noproc
//! - requests work from plain threads too (DESIGN.md: every blocking call does):
//!   requests_work_from_a_plain_thread

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use smarm::channel::{channel, Receiver, Sender};
use smarm::supervisor::{
    self, ChildCounts, ChildInfo, ChildSpec, ChildState, ChildType, DynamicSpec, Restart, Started, Strategy, SupFlags,
    SupStartError, SupervisorError, SupervisorRef,
};
use smarm::{DownReason, Exit, LookupError, Pid, Runtime, Signal};

const GUARD: Duration = Duration::from_secs(10);

fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

fn flags(strategy: Strategy) -> SupFlags {
    SupFlags { intensity: 10, ..SupFlags::new(strategy) }
}

/// A linked child that parks until it is stopped (not trapping exits).
fn parked() -> Pid {
    smarm::spawn_link(|| loop {
        smarm::recv_signal();
    })
    .pid()
}

/// A worker spec whose start function starts a parked child and reports its pid.
fn reporting(id: &str, tx: &Sender<Pid>) -> ChildSpec {
    let tx = tx.clone();
    ChildSpec::worker(id, move || {
        let pid = parked();
        tx.send(pid).unwrap();
        Ok(pid)
    })
}

fn next<T: Send + 'static>(rx: &Receiver<T>) -> T {
    rx.recv_timeout(GUARD).expect("nothing within the guard time")
}

fn next_down() -> smarm::Down {
    match smarm::recv_signal_timeout(GUARD).expect("no signal within the guard time") {
        Signal::Down(d) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

/// Kills `pid` and waits until it has ended (its exit signal to the supervisor is sent).
fn kill_and_wait(pid: Pid) {
    let m = smarm::monitor(pid);
    smarm::kill(pid);
    let d = next_down();
    assert_eq!(d.monitor, m);
}

/// The state of child `i` once the supervisor has handled the exit of `old` (a process's
/// Downs go out before its link exit signals, so a request sent after the Down can overtake
/// the exit signal: ask until the child is no longer shown running as `old`).
fn state_after_exit(sup: &SupervisorRef, i: usize, old: Pid) -> ChildState {
    loop {
        match sup.which_children().unwrap().get(i).map(|c| c.state) {
            Some(ChildState::Running(p)) if p == old => smarm::yield_now(),
            Some(state) => return state,
            None => return ChildState::Undefined,
        }
    }
}

fn info(id: &str, state: ChildState, child_type: ChildType) -> ChildInfo {
    ChildInfo { id: id.to_string(), state, child_type }
}

fn running(id: &str, pid: Pid) -> ChildInfo {
    info(id, ChildState::Running(pid), ChildType::Worker)
}

// ------------------------------------------------------------------------------------------
// Dynamic children with arguments
// ------------------------------------------------------------------------------------------

#[test]
fn dynamic_child_gets_its_arguments_and_a_restart_reuses_them() {
    run(|| {
        let (tx, rx) = channel::<(u32, Pid)>();
        let spec = DynamicSpec::worker("w", move |n: u32| {
            let pid = parked();
            tx.send((n, pid)).unwrap();
            Ok(pid)
        });
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let a = sup.start_child(7).unwrap().unwrap();
        let b = sup.start_child(9).unwrap().unwrap();
        assert_eq!(next(&rx), (7, a));
        assert_eq!(next(&rx), (9, b));
        kill_and_wait(a);
        let (n, a2) = next(&rx);
        assert_eq!(n, 7, "the restart did not reuse the arguments");
        assert_ne!(a2, a);
        assert_eq!(sup.which_children().unwrap(), [running("w", a2), running("w", b)]);
    });
}

#[test]
fn dynamic_child_arguments_need_not_be_sync() {
    run(|| {
        let (tx, rx) = channel::<u32>();
        // `Cell` is `Send + Clone` but not `Sync`: the supervisor owns the arguments.
        let spec = DynamicSpec::worker("w", move |c: Cell<u32>| {
            tx.send(c.get()).unwrap();
            Ok(parked())
        });
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let pid = sup.start_child(Cell::new(5)).unwrap().unwrap();
        assert_eq!(next(&rx), 5);
        kill_and_wait(pid);
        assert_eq!(next(&rx), 5);
    });
}

#[test]
fn exit_of_one_of_many_dynamic_children_restarts_only_it_with_its_arguments() {
    run(|| {
        const N: usize = 2_000;
        let (tx, rx) = channel::<(usize, Pid)>();
        let spec = DynamicSpec::worker("w", move |i: usize| {
            let pid = parked();
            tx.send((i, pid)).unwrap();
            Ok(pid)
        });
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let pids: Vec<Pid> = (0..N).map(|i| sup.start_child(i).unwrap().unwrap()).collect();
        for _ in 0..N {
            next(&rx);
        }
        kill_and_wait(pids[N / 2]);
        let (i, again) = next(&rx);
        assert_eq!(i, N / 2);
        let now: Vec<Pid> = sup.which_children().unwrap().iter().map(|c| c.pid().unwrap()).collect();
        let mut expected = pids.clone();
        expected[N / 2] = again;
        assert_eq!(now, expected, "a restarted dynamic child keeps its place in start order");
        assert!(rx.try_recv().is_err(), "another child was restarted");
    });
}

#[test]
fn into_simple_checks_the_argument_type() {
    run(|| {
        let spec = DynamicSpec::worker("w", |_: u32| Ok(parked()));
        let named = flags(Strategy::SimpleOneForOne).named("typed_pool");
        let sup = supervisor::start_simple(named, spec).unwrap();
        let found = supervisor::whereis("typed_pool").unwrap();
        assert_eq!(found.clone().into_simple::<String>().unwrap_err(), SupervisorError::ArgType);
        let typed = found.into_simple::<u32>().unwrap();
        let pid = typed.start_child(1).unwrap().unwrap();
        assert_eq!(sup.which_children().unwrap(), [running("w", pid)]);
        // A static supervisor has no dynamic children.
        let stat = supervisor::start_link(flags(Strategy::OneForOne), vec![]).unwrap();
        assert_eq!(stat.into_simple::<u32>().unwrap_err(), SupervisorError::NotSimple);
        // And an actor that is no supervisor is no `SupervisorRef`: a plain actor has no
        // mailbox, an actor with a mailbox of another type is the wrong type.
        assert_eq!(SupervisorRef::from_pid(pid).unwrap_err(), LookupError::NoMailbox);
        let other = smarm::spawn_actor(|mb: smarm::Mailbox<u32>| {
            mb.recv();
        });
        assert!(matches!(SupervisorRef::from_pid(other.pid()).unwrap_err(), LookupError::WrongType { .. }));
        other.send(0);
    });
}

// ------------------------------------------------------------------------------------------
// start_child(spec), terminate_child, restart_child, delete_child
// ------------------------------------------------------------------------------------------

#[test]
fn start_child_adds_a_supervised_child_and_refuses_a_taken_id() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![reporting("a", &tx)]).unwrap();
        let a = next(&rx);
        let b = sup.start_child(reporting("b", &tx)).unwrap().unwrap();
        assert_eq!(next(&rx), b);
        assert_eq!(sup.which_children().unwrap(), [running("a", a), running("b", b)]);
        assert_eq!(sup.start_child(reporting("b", &tx)), Err(SupervisorError::AlreadyStarted(b)));
        // The added child is supervised: restarted when it dies.
        kill_and_wait(b);
        let b2 = next(&rx);
        assert_eq!(sup.which_children().unwrap(), [running("a", a), running("b", b2)]);
        sup.terminate_child("b").unwrap();
        assert_eq!(sup.start_child(reporting("b", &tx)), Err(SupervisorError::AlreadyPresent));
        // A failed start keeps nothing.
        let bad = ChildSpec::worker("c", || Err::<Pid, _>(DownReason::Custom("no".into())));
        assert_eq!(sup.start_child(bad), Err(SupervisorError::Start(DownReason::Custom("no".into()))));
        assert_eq!(sup.count_children().unwrap().specs, 2);
        assert!(rx.try_recv().is_err());
    });
}

#[test]
fn terminate_child_keeps_the_spec_and_restart_child_starts_it_again() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let specs = vec![reporting("a", &tx), reporting("b", &tx)];
        let sup = supervisor::start_link(flags(Strategy::OneForOne), specs).unwrap();
        let (a, b) = (next(&rx), next(&rx));
        let m = smarm::monitor(a);
        sup.terminate_child("a").unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Shutdown));
        // Permanent, but terminated on request: not restarted, spec kept.
        assert_eq!(
            sup.which_children().unwrap(),
            [info("a", ChildState::Undefined, ChildType::Worker), running("b", b)]
        );
        assert!(rx.try_recv().is_err());
        // Terminating a stopped child is fine (OTP: `ok`).
        assert_eq!(sup.terminate_child("a"), Ok(()));
        let a2 = sup.restart_child("a").unwrap().unwrap();
        assert_eq!(next(&rx), a2);
        assert_eq!(sup.which_children().unwrap(), [running("a", a2), running("b", b)]);
        assert_eq!(sup.restart_child("a"), Err(SupervisorError::Running));
        assert_eq!(sup.restart_child("zz"), Err(SupervisorError::NotFound));
        assert_eq!(sup.terminate_child("zz"), Err(SupervisorError::NotFound));
        // By pid too (OTP accepts a pid for any supervisor).
        sup.terminate_child(b).unwrap();
        assert_eq!(sup.terminate_child(b), Err(SupervisorError::NotFound));
        assert_eq!(sup.which_children().unwrap()[1].state, ChildState::Undefined);
    });
}

#[test]
fn delete_child_removes_only_a_stopped_spec() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![reporting("a", &tx)]).unwrap();
        next(&rx);
        assert_eq!(sup.delete_child("a"), Err(SupervisorError::Running));
        sup.terminate_child("a").unwrap();
        sup.delete_child("a").unwrap();
        assert_eq!(sup.which_children().unwrap(), []);
        assert_eq!(sup.delete_child("a"), Err(SupervisorError::NotFound));
        assert_eq!(sup.restart_child("a"), Err(SupervisorError::NotFound));
        // The id is free again.
        let a = sup.start_child(reporting("a", &tx)).unwrap().unwrap();
        assert_eq!(next(&rx), a);
    });
}

#[test]
fn simple_one_for_one_refuses_requests_about_static_children() {
    run(|| {
        let (tx, _rx) = channel::<Pid>();
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), reporting("w", &tx)).unwrap();
        let pid = sup.start_child(()).unwrap().unwrap();
        let s = sup.supervisor();
        assert_eq!(s.terminate_child("w"), Err(SupervisorError::SimpleOneForOne));
        assert_eq!(s.restart_child("w"), Err(SupervisorError::SimpleOneForOne));
        assert_eq!(s.delete_child("w"), Err(SupervisorError::SimpleOneForOne));
        assert_eq!(s.start_child(reporting("x", &tx)), Err(SupervisorError::SimpleOneForOne));
        // By pid, and the child is forgotten.
        sup.terminate_child(pid).unwrap();
        assert_eq!(sup.which_children().unwrap(), []);
    });
}

// ------------------------------------------------------------------------------------------
// which_children, count_children
// ------------------------------------------------------------------------------------------

#[test]
fn which_children_and_count_children_show_states_and_types() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let inner = ChildSpec::supervisor("inner", || {
            let s = supervisor::start_link(flags(Strategy::OneForOne), vec![])
                .map_err(|e| DownReason::Custom(e.to_string()))?;
            Ok(s.pid())
        });
        let idle = ChildSpec::worker("idle", || Ok(Started::Ignore));
        let sup = supervisor::start_link(flags(Strategy::OneForAll), vec![reporting("w", &tx), inner, idle]).unwrap();
        let w = next(&rx);
        let all = sup.which_children().unwrap();
        let inner_pid = all[1].pid().expect("the nested supervisor runs");
        assert_eq!(
            all,
            [
                running("w", w),
                info("inner", ChildState::Running(inner_pid), ChildType::Supervisor),
                info("idle", ChildState::Undefined, ChildType::Worker),
            ]
        );
        assert_eq!(sup.count_children().unwrap(), ChildCounts { specs: 3, active: 2, supervisors: 1, workers: 2 });
        // The nested supervisor is reachable from its pid.
        assert_eq!(SupervisorRef::from_pid(inner_pid).unwrap().count_children().unwrap(), ChildCounts::default());
    });
}

/// A spec whose start function fails while `fail` is set (reporting each failure on
/// `failed`), and otherwise starts a parked child reported on `started`.
fn failing_while(id: &str, fail: &Arc<AtomicBool>, failed: &Sender<()>, started: &Sender<Pid>) -> ChildSpec {
    let (fail, failed, started) = (fail.clone(), failed.clone(), started.clone());
    ChildSpec::worker(id, move || {
        if fail.load(Ordering::SeqCst) {
            let _ = failed.try_send(());
            return Err(DownReason::Custom("cannot start".into()));
        }
        let pid = parked();
        started.send(pid).unwrap();
        Ok(pid)
    })
}

/// Restarts keep failing while a test looks: no intensity limit, and a short window so the
/// supervisor's restart log stays small.
fn retrying(strategy: Strategy) -> SupFlags {
    SupFlags { intensity: u32::MAX, period: Duration::from_millis(10), ..SupFlags::new(strategy) }
}

#[test]
fn restarting_child_is_shown_and_refuses_restart_and_delete() {
    run(|| {
        let fail = Arc::new(AtomicBool::new(false));
        let (failed_tx, failed_rx) = channel::<()>();
        let (tx, rx) = channel::<Pid>();
        let spec = failing_while("w", &fail, &failed_tx, &tx);
        let sup = supervisor::start_link(retrying(Strategy::OneForOne), vec![spec]).unwrap();
        let w = next(&rx);
        fail.store(true, Ordering::SeqCst);
        kill_and_wait(w);
        next(&failed_rx);
        // From the first failed restart until one succeeds, the child is restarting.
        assert_eq!(sup.which_children().unwrap(), [info("w", ChildState::Restarting, ChildType::Worker)]);
        assert_eq!(sup.count_children().unwrap(), ChildCounts { specs: 1, active: 0, supervisors: 0, workers: 1 });
        assert_eq!(sup.restart_child("w"), Err(SupervisorError::Restarting));
        assert_eq!(sup.delete_child("w"), Err(SupervisorError::Restarting));
        fail.store(false, Ordering::SeqCst);
        let w2 = next(&rx);
        assert_eq!(sup.which_children().unwrap(), [running("w", w2)]);
    });
}

#[test]
fn restarting_dynamic_child_is_shown() {
    run(|| {
        let fail = Arc::new(AtomicBool::new(false));
        let (failed_tx, failed_rx) = channel::<()>();
        let (tx, rx) = channel::<Pid>();
        let spec = failing_while("w", &fail, &failed_tx, &tx);
        let sup = supervisor::start_simple(retrying(Strategy::SimpleOneForOne), spec).unwrap();
        let w = sup.start_child(()).unwrap().unwrap();
        assert_eq!(next(&rx), w);
        fail.store(true, Ordering::SeqCst);
        kill_and_wait(w);
        next(&failed_rx);
        assert_eq!(sup.which_children().unwrap(), [info("w", ChildState::Restarting, ChildType::Worker)]);
        fail.store(false, Ordering::SeqCst);
        let w2 = next(&rx);
        assert_eq!(sup.which_children().unwrap(), [running("w", w2)]);
    });
}

// ------------------------------------------------------------------------------------------
// ignore
// ------------------------------------------------------------------------------------------

#[test]
fn ignored_static_child_is_kept_not_running_and_can_be_restarted() {
    run(|| {
        let calls = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = channel::<Pid>();
        let c = calls.clone();
        let spec = ChildSpec::worker("lazy", move || -> Result<Started, DownReason> {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(Started::Ignore);
            }
            let pid = parked();
            tx.send(pid).unwrap();
            Ok(pid.into())
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        assert_eq!(sup.which_children().unwrap(), [info("lazy", ChildState::Undefined, ChildType::Worker)]);
        assert_eq!(sup.count_children().unwrap().active, 0);
        let pid = sup.restart_child("lazy").unwrap().unwrap();
        assert_eq!(next(&rx), pid);
        assert_eq!(sup.which_children().unwrap(), [running("lazy", pid)]);
        // start_child(spec) that ignores: Ok(None), the spec is kept.
        assert_eq!(sup.start_child(ChildSpec::worker("idle", || Ok(Started::Ignore))), Ok(None));
        assert_eq!(sup.which_children().unwrap()[1], info("idle", ChildState::Undefined, ChildType::Worker));
    });
}

#[test]
fn ignored_temporary_child_is_not_kept() {
    run(|| {
        let temp = || ChildSpec::worker("t", || Ok(Started::Ignore)).restart(Restart::Temporary);
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![temp()]).unwrap();
        assert_eq!(sup.which_children().unwrap(), []);
        assert_eq!(sup.start_child(temp()), Ok(None));
        assert_eq!(sup.which_children().unwrap(), []);
    });
}

#[test]
fn ignored_dynamic_child_is_not_kept() {
    run(|| {
        let spec = DynamicSpec::worker("w", |start: bool| -> Result<Started, DownReason> {
            Ok(if start { parked().into() } else { Started::Ignore })
        });
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        assert_eq!(sup.start_child(false), Ok(None));
        let pid = sup.start_child(true).unwrap().unwrap();
        assert_eq!(sup.which_children().unwrap(), [running("w", pid)]);
        assert_eq!(sup.count_children().unwrap(), ChildCounts { specs: 1, active: 1, supervisors: 0, workers: 1 });
    });
}

#[test]
fn restart_that_ignores_leaves_a_static_child_not_running() {
    run(|| {
        let calls = Arc::new(AtomicUsize::new(0));
        let (ignored_tx, ignored_rx) = channel::<()>();
        let c = calls.clone();
        let spec = ChildSpec::worker("once", move || -> Result<Started, DownReason> {
            if c.fetch_add(1, Ordering::SeqCst) == 0 {
                return Ok(parked().into());
            }
            ignored_tx.send(()).unwrap();
            Ok(Started::Ignore)
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![spec]).unwrap();
        let pid = sup.which_children().unwrap()[0].pid().unwrap();
        kill_and_wait(pid);
        next(&ignored_rx);
        assert_eq!(sup.which_children().unwrap(), [info("once", ChildState::Undefined, ChildType::Worker)]);
        assert_eq!(calls.load(Ordering::SeqCst), 2, "an ignored restart was retried");
    });
}

// ------------------------------------------------------------------------------------------
// Names
// ------------------------------------------------------------------------------------------

#[test]
fn named_supervisor_is_registered_before_its_children_start() {
    run(|| {
        let (tx, rx) = channel::<(Option<Pid>, Pid)>();
        let spec = ChildSpec::worker("w", move || {
            // Runs in the supervisor, before `start_link` returns.
            let found = supervisor::whereis("top").ok().map(|s| s.pid());
            tx.send((found, smarm::current_pid())).unwrap();
            Ok(parked())
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne).named("top"), vec![spec]).unwrap();
        let (found, me) = next(&rx);
        assert_eq!(me, sup.pid());
        assert_eq!(found, Some(sup.pid()), "the name was not registered before the children started");
        assert_eq!(smarm::whereis("top"), Some(sup.pid()));
        sup.stop().unwrap();
        assert_eq!(supervisor::whereis("top").unwrap_err(), LookupError::NotFound);
        // The name is free again.
        let again = supervisor::start_link(flags(Strategy::OneForOne).named("top"), vec![]).unwrap();
        assert_eq!(supervisor::whereis("top").unwrap().pid(), again.pid());
    });
}

#[test]
fn taken_name_fails_the_start_with_already_started_before_any_child_starts() {
    run(|| {
        // An actor with a mailbox of another type holds the name.
        let holder = smarm::spawn_actor(|mb: smarm::Mailbox<u32>| {
            mb.recv();
        });
        let me = holder.pid();
        smarm::register("taken", me).unwrap();
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let spec = ChildSpec::worker("w", move || {
            s.store(true, Ordering::SeqCst);
            Ok(parked())
        });
        match supervisor::start_link(flags(Strategy::OneForOne).named("taken"), vec![spec]) {
            Err(SupStartError::AlreadyStarted(pid)) => assert_eq!(pid, me),
            other => panic!("expected AlreadyStarted, got {other:?}"),
        }
        assert!(!started.load(Ordering::SeqCst), "a child started although the name was taken");
        // Not a supervisor: no SupervisorRef for it.
        assert!(matches!(supervisor::whereis("taken").unwrap_err(), LookupError::WrongType { .. }));
        holder.send(0);
    });
}

// ------------------------------------------------------------------------------------------
// {shutdown, Term}
// ------------------------------------------------------------------------------------------

/// A spec whose child ends with `reason` when told on the channel it reports.
fn ending(id: &str, restart: Restart, starts: &Sender<Sender<DownReason>>) -> ChildSpec {
    let starts = starts.clone();
    ChildSpec::worker(id, move || {
        let (tx, rx) = channel::<DownReason>();
        let pid = smarm::spawn_link(move || {
            let reason = rx.recv().unwrap();
            smarm::exit(smarm::current_pid(), reason);
            smarm::yield_now();
        })
        .pid();
        starts.send(tx).unwrap();
        Ok(pid)
    })
    .restart(restart)
}

fn quiet() -> DownReason {
    DownReason::ShutdownWith("done".into())
}

#[test]
fn transient_child_ending_with_shutdown_with_a_term_is_not_restarted() {
    run(|| {
        let (tx, rx) = channel();
        let sup =
            supervisor::start_link(flags(Strategy::OneForOne), vec![ending("t", Restart::Transient, &tx)]).unwrap();
        let pid = sup.which_children().unwrap()[0].pid().unwrap();
        let m = smarm::monitor(pid);
        next(&rx).send(quiet()).unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, quiet()));
        assert_eq!(state_after_exit(&sup, 0, pid), ChildState::Undefined, "the transient child was restarted");
        assert_eq!(sup.which_children().unwrap(), [info("t", ChildState::Undefined, ChildType::Worker)]);
        assert!(rx.try_recv().is_err(), "the transient child was restarted");
    });
}

#[test]
fn transient_dynamic_child_ending_with_shutdown_with_a_term_is_forgotten() {
    run(|| {
        let (tx, rx) = channel();
        let spec = ending("t", Restart::Transient, &tx);
        let sup = supervisor::start_simple(flags(Strategy::SimpleOneForOne), spec).unwrap();
        let pid = sup.start_child(()).unwrap().unwrap();
        let m = smarm::monitor(pid);
        next(&rx).send(quiet()).unwrap();
        assert_eq!(next_down().monitor, m);
        assert_eq!(state_after_exit(sup.supervisor(), 0, pid), ChildState::Undefined);
        assert_eq!(sup.which_children().unwrap(), []);
        assert!(rx.try_recv().is_err(), "the transient child was restarted");
    });
}

#[test]
fn permanent_child_ending_with_shutdown_with_a_term_is_restarted() {
    run(|| {
        let (tx, rx) = channel();
        let sup =
            supervisor::start_link(flags(Strategy::OneForOne), vec![ending("p", Restart::Permanent, &tx)]).unwrap();
        let first = sup.which_children().unwrap()[0].pid().unwrap();
        next(&rx).send(quiet()).unwrap();
        next(&rx); // restarted
        let again = sup.which_children().unwrap()[0].pid().unwrap();
        assert_ne!(again, first);
    });
}

#[test]
fn shutdown_with_a_term_kills_a_linked_actor_that_does_not_trap_exits() {
    run(|| {
        smarm::trap_exit(true);
        let (go_tx, go_rx) = channel::<()>();
        let (linked_tx, linked_rx) = channel::<()>();
        let ender = smarm::spawn(move || {
            go_rx.recv().unwrap();
            smarm::exit(smarm::current_pid(), quiet());
            smarm::yield_now();
        });
        let ender_pid = ender.pid();
        // Not trapping, linked to the ender: dies of the signal, as in OTP (it is not `normal`).
        let bystander = smarm::spawn(move || {
            smarm::link(ender_pid).unwrap();
            linked_tx.send(()).unwrap();
            loop {
                smarm::recv_signal();
            }
        });
        next(&linked_rx);
        // The test actor traps exits: it receives the reason as a message.
        smarm::link(ender_pid).unwrap();
        go_tx.send(()).unwrap();
        assert_eq!(ender.join(), Err(quiet()));
        assert_eq!(bystander.join(), Err(quiet()));
        match smarm::recv_signal_timeout(GUARD) {
            Ok(Signal::Exit(Exit { from, reason })) => assert_eq!((from, reason), (ender_pid, quiet())),
            other => panic!("expected the exit signal, got {other:?}"),
        }
    });
}

// ------------------------------------------------------------------------------------------
// calling_self
// ------------------------------------------------------------------------------------------

#[test]
fn requests_from_the_supervisors_own_start_function_fail_with_calling_self() {
    run(|| {
        let (tx, rx) = channel::<Vec<SupervisorError>>();
        let spec = ChildSpec::worker("w", move || {
            let me = supervisor::whereis("selfish").expect("registered before the children");
            let errors = vec![
                me.which_children().unwrap_err(),
                me.count_children().unwrap_err(),
                me.start_child(ChildSpec::worker("x", || Ok(Started::Ignore))).unwrap_err(),
                me.terminate_child("w").unwrap_err(),
                me.restart_child("w").unwrap_err(),
                me.delete_child("w").unwrap_err(),
                me.clone().into_simple::<()>().unwrap_err(),
                me.stop().unwrap_err(),
            ];
            tx.send(errors).unwrap();
            Ok(parked())
        });
        let sup = supervisor::start_link(flags(Strategy::OneForOne).named("selfish"), vec![spec]).unwrap();
        assert_eq!(next(&rx), vec![SupervisorError::CallingSelf; 8]);
        // The supervisor is fine.
        assert_eq!(sup.count_children().unwrap().active, 1);
    });
}

// ------------------------------------------------------------------------------------------
// Start errors, stopped supervisors
// ------------------------------------------------------------------------------------------

#[test]
fn start_link_reports_a_spawn_failure_as_a_spawn_error() {
    let rt = Runtime::builder().threads(1).max_actors(1).build().unwrap();
    let r = rt.run(|| supervisor::start_link(flags(Strategy::OneForOne), vec![]).map(|s| s.pid())).unwrap();
    match r {
        Err(e @ SupStartError::Spawn(smarm::SpawnError::Full { .. })) => {
            assert!(e.to_string().contains("spawn"), "{e}");
            assert!(std::error::Error::source(&e).is_some());
        }
        other => panic!("expected a spawn error, got {other:?}"),
    }
}

#[test]
fn duplicate_child_ids_are_refused() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let r = supervisor::start_link(flags(Strategy::OneForOne), vec![reporting("a", &tx), reporting("a", &tx)]);
        match r {
            Err(SupStartError::DuplicateId(id)) => assert_eq!(id, "a"),
            other => panic!("expected DuplicateId, got {other:?}"),
        }
        assert!(rx.try_recv().is_err(), "a child was started");
    });
}

#[test]
fn simple_one_for_one_needs_exactly_one_spec() {
    run(|| {
        let (tx, _rx) = channel::<Pid>();
        for specs in [vec![], vec![reporting("a", &tx), reporting("b", &tx)]] {
            let n = specs.len();
            match supervisor::start_link(flags(Strategy::SimpleOneForOne), specs) {
                Err(SupStartError::SimpleSpecCount(k)) => assert_eq!(k, n),
                other => panic!("expected SimpleSpecCount, got {other:?}"),
            }
        }
    });
}

#[test]
fn requests_to_a_stopped_supervisor_fail_with_noproc() {
    run(|| {
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![]).unwrap();
        sup.stop().unwrap();
        assert_eq!(sup.which_children(), Err(SupervisorError::NoProc));
        assert_eq!(sup.count_children(), Err(SupervisorError::NoProc));
        assert_eq!(sup.restart_child("a"), Err(SupervisorError::NoProc));
        assert_eq!(sup.stop(), Err(SupervisorError::NoProc));
        assert!(SupervisorError::NoProc.to_string().contains("not running"));
    });
}

#[test]
fn requests_work_from_a_plain_thread() {
    run(|| {
        let (tx, rx) = channel::<Pid>();
        let sup = supervisor::start_link(flags(Strategy::OneForOne), vec![reporting("a", &tx)]).unwrap();
        let a = next(&rx);
        let sup2 = sup.clone();
        let tx2 = tx.clone();
        let thread = std::thread::spawn(move || {
            let before = sup2.which_children();
            let terminated = sup2.terminate_child("a");
            let added = sup2.start_child(reporting("b", &tx2)).map(|p| p.is_some());
            (before, terminated, added, sup2.count_children())
        });
        // Joined off the runtime: this actor's thread blocks, the supervisor runs on the other.
        let (before, terminated, added, counts) = smarm::spawn_blocking(move || thread.join().unwrap()).join().unwrap();
        assert_eq!(before, Ok(vec![running("a", a)]));
        assert_eq!(terminated, Ok(()));
        assert_eq!(added, Ok(true));
        assert_eq!(counts, Ok(ChildCounts { specs: 2, active: 1, supervisors: 0, workers: 2 }));
    });
}
