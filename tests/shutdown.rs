//! Runtime shutdown (SEMANTICS.md, "Runtime shutdown").
//!
//! Statement -> tests:
//!
//! - when the root actor returns, the supervision tree is stopped in reverse start order:
//!   root_return_stops_root_supervisors_in_reverse_start_order,
//!   root_return_stops_nested_trees_depth_first
//! - ... with each child's shutdown spec:
//!   root_return_applies_each_childs_shutdown_spec
//! - (or shutdown is requested):
//!   shutdown_request_stops_the_trees_and_run_reports_shutdown,
//!   root_panic_also_stops_the_supervision_trees,
//!   a_shutdown_request_while_the_root_stops_the_trees_does_not_cut_it_short
//! - then remaining actors get `Shutdown`:
//!   remaining_actors_get_shutdown_after_the_trees_are_stopped
//! - then `Killed` after the runtime's shutdown timeout:
//!   actor_outliving_the_shutdown_timeout_is_killed
//!   (timing, and cleanup within the timeout: tests/shutdown_timeout.rs,
//!   the_kill_comes_no_earlier_than_the_shutdown_timeout,
//!   an_actor_whose_cleanup_ends_within_the_timeout_reports_shutdown)
//! - `run` returns after every actor has ended, every stack is released and every
//!   scheduler thread is joined:
//!   run_returns_after_every_actor_ended_and_every_thread_and_stack_is_released,
//!   run_returns_after_every_terminate_callback

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use smarm::channel::{channel, Receiver, Sender};
use smarm::gen_server::{self, CallResult, Caller, Ctx, GenServer, InitResult};
use smarm::supervisor::{self, ChildSpec, Shutdown, Strategy, SupFlags};
use smarm::{DownReason, Exit, JoinHandle, RunError, Runtime, Signal};

const MS: Duration = Duration::from_millis(1);

/// The resource test counts the process's threads and maps, so it runs alone (write lock);
/// every other test takes the read lock.
static RESOURCES: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    RESOURCES.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    RESOURCES.write().unwrap_or_else(|e| e.into_inner())
}

fn rt() -> Runtime {
    Runtime::builder().threads(2).quiet_panics(true).build().unwrap()
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

fn custom(s: &str) -> DownReason {
    DownReason::Custom(s.to_string())
}

/// A trapping gen_server that logs its terminate (after an optional delay) and may notify
/// someone when it terminates.
struct Worker {
    id: &'static str,
    log: Log,
    slow_terminate: Duration,
    notify: Vec<Sender<()>>,
}

impl GenServer for Worker {
    type Call = ();
    type Reply = ();
    type Cast = ();
    type Info = ();
    type Continue = ();
    fn init(&mut self, _ctx: &Ctx<Self>) -> InitResult {
        smarm::trap_exit(true);
        InitResult::Ok
    }
    fn handle_call(&mut self, _: (), _: &Caller<()>, _ctx: &Ctx<Self>) -> CallResult<()> {
        CallResult::Reply(())
    }
    fn terminate(&mut self, reason: &DownReason) {
        if !self.slow_terminate.is_zero() {
            smarm::sleep(self.slow_terminate);
        }
        push(&self.log, format!("terminate:{}:{reason:?}", self.id));
        for n in &self.notify {
            let _ = n.send(());
        }
    }
}

fn worker(log: &Log, id: &'static str) -> ChildSpec {
    worker_with(log, id, Duration::ZERO, Vec::new())
}

fn worker_with(log: &Log, id: &'static str, slow_terminate: Duration, notify: Vec<Sender<()>>) -> ChildSpec {
    let log = log.clone();
    ChildSpec::worker(id, move || {
        let w = Worker { id, log: log.clone(), slow_terminate, notify: notify.clone() };
        gen_server::start_link(w).map(|s| s.pid()).map_err(|e| custom(&e.to_string()))
    })
    .shutdown(Shutdown::Timeout(Duration::from_secs(5)))
}

fn terminates(log: &Log) -> Vec<String> {
    entries(log).into_iter().filter(|e| e.starts_with("terminate")).collect()
}

#[test]
fn root_return_stops_root_supervisors_in_reverse_start_order() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    let r = rt().run(move || {
        let s1 = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker(&l, "a1"), worker(&l, "a2")]);
        let s2 = supervisor::start_link(SupFlags::new(Strategy::OneForAll), vec![worker(&l, "b1"), worker(&l, "b2")]);
        s1.unwrap();
        s2.unwrap();
        "root done"
    });
    assert_eq!(r.unwrap(), "root done");
    assert_eq!(
        terminates(&log),
        ["terminate:b2:Shutdown", "terminate:b1:Shutdown", "terminate:a2:Shutdown", "terminate:a1:Shutdown"]
    );
}

#[test]
fn a_shutdown_request_while_the_root_stops_the_trees_does_not_cut_it_short() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    let r = rt().run(move || {
        // When b's terminate runs (the root is stopping the second tree), another actor asks
        // for a shutdown: the first tree must still be stopped, and the root's value kept.
        let (asked_tx, asked_rx) = channel::<()>();
        smarm::spawn(move || {
            if asked_rx.recv().is_ok() {
                smarm::shutdown();
            }
        });
        let a = worker_with(&l, "a", 20 * MS, Vec::new());
        let b = worker_with(&l, "b", 20 * MS, vec![asked_tx]);
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![a]).unwrap();
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![b]).unwrap();
        "root done"
    });
    assert_eq!(r.unwrap(), "root done");
    assert_eq!(terminates(&log), ["terminate:b:Shutdown", "terminate:a:Shutdown"]);
}

#[test]
fn root_return_stops_nested_trees_depth_first() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    rt().run(move || {
        let l2 = l.clone();
        let inner = ChildSpec::supervisor("inner", move || {
            supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker(&l2, "i1"), worker(&l2, "i2")])
                .map(|s| s.pid())
                .map_err(|e| custom(&e.to_string()))
        });
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker(&l, "o1"), inner, worker(&l, "o2")])
            .unwrap();
    })
    .unwrap();
    assert_eq!(
        terminates(&log),
        ["terminate:o2:Shutdown", "terminate:i2:Shutdown", "terminate:i1:Shutdown", "terminate:o1:Shutdown"]
    );
}

#[test]
fn run_returns_after_every_terminate_callback() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    rt().run(move || {
        let specs = vec![worker_with(&l, "slow1", 50 * MS, Vec::new()), worker_with(&l, "slow2", 50 * MS, Vec::new())];
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), specs).unwrap();
    })
    .unwrap();
    assert_eq!(terminates(&log), ["terminate:slow2:Shutdown", "terminate:slow1:Shutdown"]);
}

// ------------------------------------------------------------------------------------------
// Shutdown specs at root return
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum Kind {
    /// Does not trap exits.
    Plain,
    /// Traps exits and ignores them.
    Ignore,
    /// Traps exits; on `Shutdown` works for the duration and returns.
    Slow(Duration),
}

/// Logs `down:id` when the child's body ends.
struct DownGuard(Log, &'static str);
impl Drop for DownGuard {
    fn drop(&mut self) {
        push(&self.0, format!("down:{}", self.1));
    }
}

type Handles = Arc<Mutex<Vec<(&'static str, JoinHandle<()>)>>>;

fn child(log: &Log, handles: &Handles, id: &'static str, kind: Kind, shutdown: Shutdown) -> ChildSpec {
    let (log, handles) = (log.clone(), handles.clone());
    ChildSpec::worker(id, move || {
        let log = log.clone();
        let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
        let h = smarm::spawn_link(move || {
            let _guard = DownGuard(log.clone(), id);
            if !matches!(kind, Kind::Plain) {
                smarm::trap_exit(true);
            }
            ready_tx.send(()).unwrap();
            loop {
                match (kind, smarm::recv_signal()) {
                    (Kind::Slow(d), Signal::Exit(Exit { reason: DownReason::Shutdown, .. })) => {
                        push(&log, format!("got:{id}"));
                        smarm::sleep(d);
                        return;
                    }
                    (_, Signal::Exit(x)) => push(&log, format!("got:{id}:{:?}", x.reason)),
                    _ => {}
                }
            }
        });
        ready_rx.recv().unwrap();
        let pid = h.pid();
        handles.lock().unwrap().push((id, h));
        Ok(pid)
    })
    .shutdown(shutdown)
}

/// The exit outcome of every recorded child, joined after `run` returned.
fn outcomes(handles: &Handles) -> Vec<(&'static str, Result<(), DownReason>)> {
    let hs = std::mem::take(&mut *handles.lock().unwrap());
    hs.into_iter()
        .map(|(id, h)| {
            assert!(h.is_finished(), "{id} had not ended when run returned");
            (id, h.join())
        })
        .collect()
}

#[test]
fn root_return_applies_each_childs_shutdown_spec() {
    let _g = shared();
    let log = new_log();
    let handles: Handles = Arc::default();
    let (l, hs) = (log.clone(), handles.clone());
    let start = Arc::new(Mutex::new(None::<Instant>));
    let start2 = start.clone();
    rt().run(move || {
        let specs = vec![
            child(&l, &hs, "brutal", Kind::Ignore, Shutdown::BrutalKill),
            child(&l, &hs, "stubborn", Kind::Ignore, Shutdown::Timeout(100 * MS)),
            child(&l, &hs, "plain", Kind::Plain, Shutdown::Timeout(Duration::from_secs(5))),
            child(&l, &hs, "slow", Kind::Slow(100 * MS), Shutdown::Infinity),
        ];
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), specs).unwrap();
        *start2.lock().unwrap() = Some(Instant::now());
    })
    .unwrap();
    let elapsed = start.lock().unwrap().unwrap().elapsed();
    assert_eq!(
        outcomes(&handles),
        [
            ("brutal", Err(DownReason::Killed)),
            ("stubborn", Err(DownReason::Killed)),
            ("plain", Err(DownReason::Shutdown)),
            ("slow", Ok(())),
        ]
    );
    // Reverse start order, one at a time; the stubborn child got Shutdown before its kill,
    // the brutal one got nothing.
    assert_eq!(
        entries(&log),
        ["got:slow", "down:slow", "down:plain", "got:stubborn:Shutdown", "down:stubborn", "down:brutal"]
    );
    // The Infinity child was waited for and the Timeout child only killed after 100 ms.
    assert!(elapsed >= 200 * MS, "shutdown took only {elapsed:?}");
}

#[test]
fn shutdown_request_stops_the_trees_and_run_reports_shutdown() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    let r = rt().run(move || {
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker(&l, "a"), worker(&l, "b")]).unwrap();
        push(&l, "requesting");
        smarm::spawn(smarm::shutdown);
        loop {
            smarm::sleep(Duration::from_secs(3600));
        }
    });
    assert!(matches!(r, Err(RunError::Root(DownReason::Shutdown))), "{r:?}");
    assert_eq!(entries(&log), ["requesting", "terminate:b:Shutdown", "terminate:a:Shutdown"]);
}

#[test]
fn root_panic_also_stops_the_supervision_trees() {
    let _g = shared();
    let log = new_log();
    let l = log.clone();
    let r = rt().run(move || {
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![worker(&l, "a"), worker(&l, "b")]).unwrap();
        panic!("root crash");
    });
    assert!(matches!(&r, Err(RunError::Root(DownReason::Panic(m))) if m == "root crash"), "{r:?}");
    assert_eq!(terminates(&log), ["terminate:b:Shutdown", "terminate:a:Shutdown"]);
}

/// When dropped (the actor unwinds), logs whether the trees had already been stopped.
struct SawTrees(Receiver<()>, Log, &'static str);
impl Drop for SawTrees {
    fn drop(&mut self) {
        let seen = self.0.try_recv().is_ok();
        push(&self.1, format!("{} ends, trees stopped before: {seen}", self.2));
    }
}

#[test]
fn remaining_actors_get_shutdown_after_the_trees_are_stopped() {
    let _g = shared();
    let log = new_log();
    let handles: Handles = Arc::default();
    let (l, hs) = (log.clone(), handles.clone());
    rt().run(move || {
        let (tx1, rx1) = channel();
        let (tx2, rx2) = channel();
        let (ready_tx, ready_rx) = channel::<()>();
        let (l1, r1) = (l.clone(), ready_tx.clone());
        let plain = smarm::spawn(move || {
            let _probe = SawTrees(rx1, l1, "plain");
            r1.send(()).unwrap();
            loop {
                smarm::sleep(Duration::from_secs(3600));
            }
        });
        let l2 = l.clone();
        let trapping = smarm::spawn(move || {
            smarm::trap_exit(true);
            let _probe = SawTrees(rx2, l2, "trapping");
            ready_tx.send(()).unwrap();
            loop {
                let _ = smarm::recv_signal();
            }
        });
        // Both are running (a never-run actor has no frame to unwind).
        ready_rx.recv().unwrap();
        ready_rx.recv().unwrap();
        hs.lock().unwrap().push(("plain", plain));
        hs.lock().unwrap().push(("trapping", trapping));
        // The tree's only worker tells both actors when it terminates.
        let w = worker_with(&l, "w", MS, vec![tx1, tx2]);
        supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![w]).unwrap();
    })
    .unwrap();
    assert_eq!(outcomes(&handles), [("plain", Err(DownReason::Shutdown)), ("trapping", Err(DownReason::Shutdown))]);
    let mut e = entries(&log);
    e.sort();
    assert_eq!(
        e,
        ["plain ends, trees stopped before: true", "terminate:w:Shutdown", "trapping ends, trees stopped before: true"]
    );
}

#[test]
fn actor_outliving_the_shutdown_timeout_is_killed() {
    let _g = shared();
    let handles: Handles = Arc::default();
    let hs = handles.clone();
    let rt =
        Runtime::builder().threads(2).quiet_panics(true).shutdown_timeout(Duration::from_millis(100)).build().unwrap();
    rt.run(move || {
        let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
        let h = smarm::spawn(move || {
            ready_tx.send(()).unwrap();
            // Swallows the Shutdown unwind at every runtime call, for 1.5 s at most.
            let give_up = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < give_up {
                let _ = catch_unwind(AssertUnwindSafe(|| smarm::sleep(10 * MS)));
            }
        });
        ready_rx.recv().unwrap();
        hs.lock().unwrap().push(("stubborn", h));
    })
    .unwrap();
    assert_eq!(outcomes(&handles), [("stubborn", Err(DownReason::Killed))]);
}

// ------------------------------------------------------------------------------------------
// Resources
// ------------------------------------------------------------------------------------------

/// Scheduler threads of any runtime alive in this process.
fn worker_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.starts_with("smarm-worker"))
        .count()
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

struct CountDrop(Arc<AtomicUsize>);
impl Drop for CountDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

const ACTORS: usize = 300;

/// A runtime with `ACTORS` actors parked, yielding or blocked in a channel when the root
/// returns. Returns how many actor destructors ran and the handles' state.
fn busy_runtime() -> (usize, Vec<Result<(), DownReason>>, usize) {
    let dropped = Arc::new(AtomicUsize::new(0));
    let handles: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
    let (d, hs) = (dropped.clone(), handles.clone());
    // Senders of the channels some actors block on: kept past `run`, so that those actors
    // are woken only by the shutdown.
    let keep: Arc<Mutex<Vec<Sender<()>>>> = Arc::default();
    let k = keep.clone();
    let threads_inside = rt()
        .run(move || {
            let (ready_tx, ready_rx) = channel::<()>();
            for i in 0..ACTORS {
                let c = CountDrop(d.clone());
                let (tx, rx) = channel::<()>();
                k.lock().unwrap().push(tx);
                let ready = ready_tx.clone();
                let h = smarm::spawn(move || {
                    let _c = c;
                    ready.send(()).unwrap();
                    match i % 3 {
                        0 => loop {
                            smarm::sleep(Duration::from_secs(3600));
                        },
                        1 => loop {
                            smarm::yield_now();
                        },
                        _ => {
                            let _ = rx.recv();
                        }
                    }
                });
                hs.lock().unwrap().push(h);
            }
            // Every actor is inside its body when the root returns.
            for _ in 0..ACTORS {
                ready_rx.recv().unwrap();
            }
            // Sanity check of the probe: the extra scheduler thread names itself when it
            // starts, which may be after the root first runs.
            let give_up = Instant::now() + Duration::from_secs(10);
            while worker_threads() == 0 && Instant::now() < give_up {
                smarm::yield_now();
            }
            worker_threads()
        })
        .unwrap();
    let hs = std::mem::take(&mut *handles.lock().unwrap());
    let results = hs
        .into_iter()
        .map(|h| {
            assert!(h.is_finished());
            h.join()
        })
        .collect();
    drop(keep);
    (dropped.load(Ordering::SeqCst), results, threads_inside)
}

#[test]
fn run_returns_after_every_actor_ended_and_every_thread_and_stack_is_released() {
    let _g = exclusive();
    busy_runtime(); // warm-up: allocator arenas and the like
    let maps_before = maps();
    let (dropped, results, threads_inside) = busy_runtime();
    assert_eq!(threads_inside, 1, "a two-thread runtime runs one extra scheduler thread");
    assert_eq!(dropped, ACTORS, "not every actor had unwound when run returned");
    assert!(results.iter().all(|r| *r == Err(DownReason::Shutdown)), "{results:?}");
    assert_eq!(worker_threads(), 0, "a scheduler thread outlived run");
    let maps_after = maps();
    assert!(
        maps_after <= maps_before + 16,
        "memory maps grew from {maps_before} to {maps_after}: {ACTORS} actor stacks not released"
    );
}
