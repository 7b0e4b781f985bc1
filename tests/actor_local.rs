//! Per-actor state that survives migration: `actor_local!` values follow their actor to
//! every scheduler thread and end with it; pinned actors (`spawn_pinned`) never leave their
//! thread, so a `thread_local!` used across blocking calls stays the one of that thread.
//!
//! Migration is provoked, not hoped for: actors yield on a multi-thread runtime beside busy
//! yielders until `current_thread_index()` changes, and every test that relies on a
//! migration asserts that it happened (bounded by a yield budget, never by a clock). Under
//! `[profile.reltest]` (release, no LTO) these tests are the oracle for the rule in the
//! crate docs' soundness contract.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use smarm::actor_local::AccessError;
use smarm::{DownReason, Pid, Runtime};

/// Scheduler threads of the multi-thread tests.
const THREADS: usize = 4;
/// Busy yielders keeping every thread occupied (so queued actors move between threads).
const BUSY: usize = 2 * THREADS;
/// Blocking calls an actor may spend waiting for a migration before the test calls it
/// broken.
const MIGRATION_BUDGET: u64 = 100_000;

/// Blocks once: mostly a yield, and every 16th time a short sleep, whose wake comes from
/// whichever thread fires the timer (on a runtime whose threads are all busy, yields alone
/// can keep an actor on one thread indefinitely: nothing steals from a busy thread).
fn block_once(i: u64) {
    if i % 16 == 15 {
        smarm::sleep(Duration::from_micros(20));
    } else {
        smarm::yield_now();
    }
}

/// Blocks until the caller runs on another scheduler thread; false if the budget ran out.
fn yield_until_migrated() -> bool {
    let start = smarm::current_thread_index();
    (0..MIGRATION_BUDGET).any(|i| {
        block_once(i);
        smarm::current_thread_index() != start
    })
}

/// Runs `root` on a `THREADS`-thread runtime beside `BUSY` actors that yield until it
/// returns.
fn with_busy_threads<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(THREADS).build().unwrap();
    rt.run(move || {
        let stop = Arc::new(AtomicBool::new(false));
        let busy: Vec<_> = (0..BUSY)
            .map(|_| {
                let stop = stop.clone();
                smarm::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        smarm::yield_now();
                    }
                })
            })
            .collect();
        let v = root();
        stop.store(true, Ordering::Relaxed);
        for h in busy {
            h.join().unwrap();
        }
        v
    })
    .unwrap()
}

smarm::actor_local! {
    /// What one actor wrote, in order.
    static TRAIL: RefCell<Vec<u64>> = RefCell::new(Vec::new());
}

/// The measured pattern of the issue: one function reads the value, yields until it has
/// migrated, and reads it again; then a `with` whose closure itself migrates. Returns what
/// it saw, for the caller to compare (no assertion fires inside an actor).
fn trail_across_migrations(me: u64, rounds: u64) -> (Vec<u64>, Vec<u64>, u64) {
    let mut expected = Vec::new();
    let mut migrations = 0;
    for round in 0..rounds {
        TRAIL.with(|t| t.borrow_mut().push(me));
        expected.push(me);
        let before = TRAIL.with(|t| t.borrow().clone());
        migrations += u64::from(yield_until_migrated());
        let after = TRAIL.with(|t| t.borrow().clone());
        if after != before {
            return (after, before, migrations);
        }
        TRAIL.with(|t| {
            t.borrow_mut().push(round);
            migrations += u64::from(yield_until_migrated());
            t.borrow_mut().push(me);
        });
        expected.extend([round, me]);
    }
    (TRAIL.with(|t| t.borrow().clone()), expected, migrations)
}

#[test]
fn actor_local_values_follow_their_actor_across_migrations() {
    const ACTORS: u64 = 8;
    const ROUNDS: u64 = 3;
    let results = with_busy_threads(|| {
        let handles: Vec<_> =
            (0..ACTORS).map(|me| smarm::spawn(move || trail_across_migrations(1000 + me, ROUNDS))).collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    for (me, (seen, expected, migrations)) in results.into_iter().enumerate() {
        assert_eq!(seen, expected, "actor {me}: its actor-local value changed across a migration");
        assert_eq!(migrations, 2 * ROUNDS, "actor {me}: a wait for a migration ran out of yields");
    }
}

#[test]
fn actors_never_see_each_others_actor_local_values() {
    const ACTORS: u64 = 32;
    const STEPS: u64 = 2_000;
    let trails = with_busy_threads(|| {
        let handles: Vec<_> = (0..ACTORS)
            .map(|me| {
                smarm::spawn(move || {
                    let mut threads = std::collections::BTreeSet::new();
                    for i in 0..STEPS {
                        TRAIL.with(|t| t.borrow_mut().push(me));
                        threads.insert(smarm::current_thread_index().unwrap());
                        // Not yields alone: with every thread busy, nothing steals and an
                        // actor can stay on one thread (`block_once` sleeps now and then).
                        block_once(i);
                    }
                    (TRAIL.with(|t| t.take()), threads.len())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    let mut moved = 0;
    for (me, (trail, threads)) in trails.into_iter().enumerate() {
        assert_eq!(trail, vec![me as u64; STEPS as usize], "actor {me} saw another actor's value");
        moved += usize::from(threads > 1);
    }
    assert!(moved > 0, "no actor ran on two threads: the test did not exercise migration");
}

/// Counts its drops and whether each ran on the actor that owned the value.
struct Tracked {
    owner: Option<Pid>,
}

static DROPS: Mutex<Vec<(Option<Pid>, Option<Pid>)>> = Mutex::new(Vec::new());

impl Drop for Tracked {
    fn drop(&mut self) {
        DROPS.lock().unwrap().push((self.owner, smarm::try_current_pid()));
    }
}

smarm::actor_local! {
    static TRACKED: Tracked = Tracked { owner: smarm::try_current_pid() };
}

fn drops_of(pid: Pid) -> Vec<Option<Pid>> {
    DROPS.lock().unwrap().iter().filter(|(owner, _)| *owner == Some(pid)).map(|&(_, on)| on).collect()
}

#[test]
fn actor_local_values_are_dropped_on_their_actor_before_join_returns() {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let touch = || TRACKED.with(|t| assert_eq!(t.owner, smarm::try_current_pid()));
        // Ends normally.
        let normal = smarm::spawn(move || {
            touch();
            for _ in 0..100 {
                smarm::yield_now();
            }
        });
        // Ends by panicking.
        let panics = smarm::spawn(move || {
            touch();
            panic!("boom");
        });
        // Killed while parked.
        let (tx, rx) = smarm::channel::oneshot::<()>();
        let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
        let killed = smarm::spawn(move || {
            touch();
            ready_tx.send(()).unwrap();
            let _ = rx.recv();
        });
        // Never touches the key: nothing to drop.
        let untouched = smarm::spawn(|| ());
        ready_rx.recv().unwrap();
        smarm::kill(killed.pid());

        for (h, expect) in
            [(normal, Ok(())), (panics, Err(DownReason::Panic("boom".into()))), (killed, Err(DownReason::Killed))]
        {
            let pid = h.pid();
            assert_eq!(h.join(), expect);
            assert_eq!(drops_of(pid), vec![Some(pid)], "{pid}: one drop, on the actor itself, before join returned");
        }
        let pid = untouched.pid();
        untouched.join().unwrap();
        assert_eq!(drops_of(pid), vec![]);
        drop(tx);
    })
    .unwrap();
}

smarm::actor_local! {
    static DEPTH: Cell<u32> = Cell::new(0);
    /// Initialised from another key, and reading itself while being initialised.
    static DERIVED: u32 = DEPTH.with(|d| d.get() + 10);
}

#[test]
fn nested_and_reentrant_access_shares_one_value_per_key() {
    smarm::run(|| {
        DEPTH.with(|outer| {
            outer.set(1);
            DEPTH.with(|inner| {
                assert!(std::ptr::eq(outer, inner), "a nested access sees the same value");
                inner.set(2);
            });
            assert_eq!(outer.get(), 2);
        });
        assert_eq!(DERIVED.with(|d| *d), 12, "an initialiser reads another key of the same actor");
        let child = smarm::spawn(|| (DEPTH.with(Cell::get), DERIVED.with(|d| *d)));
        assert_eq!(child.join().unwrap(), (0, 10), "a new actor starts from the initialisers");
    });
}

/// Records what a destructor of an actor-local value saw when it tried another key.
struct ReachesOut;

static REACH: Mutex<Vec<Result<u32, AccessError>>> = Mutex::new(Vec::new());

impl Drop for ReachesOut {
    fn drop(&mut self) {
        REACH.lock().unwrap().push(DEPTH.try_with(Cell::get));
    }
}

smarm::actor_local! {
    static REACHES_OUT: ReachesOut = ReachesOut;
}

#[test]
fn actor_locals_refuse_access_once_their_actor_has_ended() {
    smarm::run(|| {
        smarm::spawn(|| {
            DEPTH.with(|d| d.set(5));
            REACHES_OUT.with(|_| ());
        })
        .join()
        .unwrap();
    });
    assert_eq!(*REACH.lock().unwrap(), vec![Err(AccessError)]);
}

#[test]
fn off_an_actor_a_key_has_one_value_per_os_thread() {
    DEPTH.with(|d| d.set(7));
    assert_eq!(DEPTH.with(Cell::get), 7);
    let other = std::thread::spawn(|| DEPTH.with(Cell::get)).join().unwrap();
    assert_eq!(other, 0, "another OS thread starts from the initialiser");
    // An actor has its own value, even on the thread that runs the runtime.
    let in_actor = Runtime::builder().threads(1).build().unwrap().run(|| DEPTH.with(Cell::get)).unwrap();
    assert_eq!(in_actor, 0);
    assert_eq!(DEPTH.with(Cell::get), 7);
}

thread_local! {
    /// Used only by the actor under test, one at a time.
    static LOG: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

smarm::actor_local! {
    static ACTOR_LOG: RefCell<Vec<u64>> = RefCell::new(Vec::new());
}

/// Where [`workout`] keeps its log: the `thread_local!` or the `actor_local!`. A type
/// parameter, so that each instance of `workout` makes its accesses directly in its own
/// body, as user code would.
trait Log {
    fn with<R>(f: impl FnOnce(&RefCell<Vec<u64>>) -> R) -> R;
}

struct ThreadLog;
impl Log for ThreadLog {
    #[inline(always)]
    fn with<R>(f: impl FnOnce(&RefCell<Vec<u64>>) -> R) -> R {
        LOG.with(f)
    }
}

struct ActorLog;
impl Log for ActorLog {
    #[inline(always)]
    fn with<R>(f: impl FnOnce(&RefCell<Vec<u64>>) -> R) -> R {
        ACTOR_LOG.with(f)
    }
}

/// What one run of [`workout`] saw.
#[derive(Debug, Default)]
struct Workout {
    /// Resumes on another thread than the previous one.
    migrations: u64,
    /// Steps after which the log did not hold exactly what this actor wrote.
    inconsistent: u64,
}

/// Uses a `RefCell<Vec<_>>` log across blocking calls in one function, with a borrow held
/// across some of them. With the `thread_local!` log this is sound only if the actor never
/// migrates (the crate docs' rule: in an unpinned actor it corrupts the heap, measured
/// without LTO). It records rather than asserts, so that every run ends.
fn workout<L: Log>(steps: u64) -> Workout {
    let mut w = Workout::default();
    let mut thread = smarm::current_thread_index();
    L::with(|l| l.borrow_mut().clear());
    for i in 0..steps {
        L::with(|l| match l.try_borrow_mut() {
            Ok(mut v) => {
                v.push(i);
                if i % 8 == 0 {
                    // A borrow held across a blocking call.
                    smarm::yield_now();
                    v.push(i);
                }
            }
            Err(_) => w.inconsistent += 1,
        });
        block_once(i);
        let n = i + 1 + i / 8 + 1;
        let ok = L::with(|l| l.try_borrow().is_ok_and(|v| v.len() as u64 == n && v.last() == Some(&i)));
        w.inconsistent += u64::from(!ok);
        let now = smarm::current_thread_index();
        w.migrations += u64::from(now != thread);
        thread = now;
    }
    w
}

const WORKOUT_STEPS: u64 = 20_000;

#[test]
fn a_pinned_actor_keeps_its_thread_local_refcell_vec_consistent_across_yields() {
    let w = with_busy_threads(|| smarm::spawn_pinned(|| workout::<ThreadLog>(WORKOUT_STEPS)).join().unwrap());
    assert_eq!(w.migrations, 0, "a pinned actor migrated: {w:?}");
    assert_eq!(w.inconsistent, 0, "a pinned actor saw another thread's thread-local: {w:?}");
}

/// The control for the test above: the same workload in an ordinary actor, same load, does
/// migrate (so the pinned test would see it if pinning failed), and with its log in an
/// `actor_local!` it stays consistent. (With the `thread_local!` log it is undefined
/// behaviour, so the control does not run that.)
#[test]
fn an_unpinned_actor_running_the_same_workload_migrates_and_its_actor_local_log_holds() {
    let w = with_busy_threads(|| smarm::spawn(|| workout::<ActorLog>(WORKOUT_STEPS)).join().unwrap());
    assert!(w.migrations > 0, "the unpinned control never migrated: the pinned test proves nothing: {w:?}");
    assert_eq!(w.inconsistent, 0, "an actor-local log changed across a migration: {w:?}");
}

/// Message ping-pong with an unpinned partner that keeps moving between threads (each wake
/// of the pinned actor comes from whatever thread the partner runs on; while they share a
/// thread, the pinned actor's parks hand the thread to the partner in the wake slot), plus
/// sleeps (woken by a timer on any thread).
#[test]
fn a_pinned_actor_woken_from_any_thread_resumes_on_its_own() {
    const ROUNDS: u32 = 5_000;
    let (moved, partner_threads) = with_busy_threads(|| {
        let (to_partner, partner_rx) = smarm::channel::channel::<u32>();
        let (to_pinned, pinned_rx) = smarm::channel::channel::<u32>();
        let partner = smarm::spawn(move || {
            let mut threads = std::collections::BTreeSet::new();
            while let Ok(n) = partner_rx.recv() {
                if n % 250 == 0 {
                    // Move, so that the next wakes of the pinned actor come from elsewhere.
                    yield_until_migrated();
                }
                threads.insert(smarm::current_thread_index().unwrap());
                if to_pinned.send(n + 1).is_err() {
                    break;
                }
            }
            threads.len()
        });
        let pinned = smarm::spawn_pinned(move || {
            let home = smarm::current_thread_index();
            let mut moved = 0u32;
            for i in 0..ROUNDS {
                to_partner.send(i).unwrap();
                assert_eq!(pinned_rx.recv(), Ok(i + 1));
                if i % 500 == 0 {
                    smarm::sleep(Duration::from_micros(50));
                }
                moved += u32::from(smarm::current_thread_index() != home);
            }
            moved
        });
        let moved = pinned.join().unwrap();
        (moved, partner.join().unwrap())
    });
    assert_eq!(moved, 0, "the pinned actor resumed on another thread");
    assert!(partner_threads > 1, "the partner never migrated: wakes came from one thread only");
}

/// A pinned actor stays on its thread, then, killed while parked, unwinds through a
/// destructor that blocks: it stays there throughout (pinned and unwinding at once, which
/// the scheduler's debug checks of the pin and of its parked-unwinder count see), and the
/// runtime ends normally.
#[test]
fn a_pinned_actor_unwinding_through_blocking_drops_stays_on_its_thread() {
    static MOVED: AtomicUsize = AtomicUsize::new(usize::MAX);
    static MOVED_BEFORE: AtomicUsize = AtomicUsize::new(usize::MAX);
    struct BlocksInDrop(Option<usize>);
    impl Drop for BlocksInDrop {
        fn drop(&mut self) {
            let mut moved = 0;
            for _ in 0..200 {
                smarm::yield_now();
                moved += usize::from(smarm::current_thread_index() != self.0);
            }
            MOVED.store(moved, Ordering::Relaxed);
        }
    }
    let reason = with_busy_threads(|| {
        let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
        let (_never_tx, never_rx) = smarm::channel::oneshot::<()>();
        let h = smarm::spawn_pinned(move || {
            let home = smarm::current_thread_index();
            let _guard = BlocksInDrop(home);
            let moved = (0..2_000).filter(|&i| {
                block_once(i);
                smarm::current_thread_index() != home
            });
            MOVED_BEFORE.store(moved.count(), Ordering::Relaxed);
            ready_tx.send(()).unwrap();
            let _ = never_rx.recv();
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        h.join()
    });
    assert_eq!(reason, Err(DownReason::Killed));
    assert_eq!(MOVED_BEFORE.load(Ordering::Relaxed), 0, "the pinned actor migrated");
    assert_eq!(MOVED.load(Ordering::Relaxed), 0, "the pinned actor migrated while unwinding");
}
