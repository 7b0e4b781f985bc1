//! Blocking while unwinding. std's panic count is per OS thread, so an actor whose `Drop`
//! blocks (yields, sleeps) during unwinding must resume on the thread it started unwinding
//! on, and must leave that thread's panic count as it found it once the unwind ends.
//!
//! Nothing here asserts inside a `Drop` that runs during unwinding (a second panic there
//! would abort the process): the drop records what it saw and the test asserts afterwards.

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use smarm::{DownReason, Runtime};

const THREADS: usize = 2;
const ALL_THREADS: u64 = (1 << THREADS) - 1;
/// Yields after the sleep in the blocking sequence (and before it, when there is no load
/// to wait for).
const YIELDS: u32 = 2_000;
const SLEEP: Duration = Duration::from_millis(1);
/// Parks woken from a plain thread in the blocking sequence (after the sleep), at least.
const WOKEN_PARKS: u32 = 64;
/// Bound on the control's woken parks while it waits to be resumed on another thread
/// (reached only if the runtime never moves a woken actor). Which thread takes a woken
/// actor is up to the OS's schedule: with both threads busy and the machine loaded, one
/// thread can take dozens of them in a row.
const MAX_WOKEN_PARKS: u32 = 100_000;
/// Before its sleep, a sequence under load yields until, in this many of the intervals
/// between two of its resumes, busy actors were resumed on a thread other than the one it
/// started on: the other thread was demonstrably serving the shared queue while it yielded,
/// many separate times. (One long interval is not enough: on an overloaded machine the OS
/// may run the two scheduler threads alternately, and the thread descheduled while holding
/// an actor keeps it.)
const ACTIVE_INTERVALS: u32 = 200;
/// Bound on those yields (reached only if the other threads never run the busy actors).
const MAX_YIELDS: u32 = 20_000_000;

/// Resumes of the busy actors, per scheduler thread.
#[derive(Default)]
struct Load {
    resumes: [AtomicU64; THREADS],
}

impl Load {
    fn snapshot(&self) -> [u64; THREADS] {
        std::array::from_fn(|t| self.resumes[t].load(Ordering::Relaxed))
    }
}

/// `std::thread::panicking()` read out of line behind a barrier, so the address of std's
/// thread-local panic count is computed afresh on the thread the actor runs on now.
#[inline(never)]
fn panicking_here() -> bool {
    compiler_fence(Ordering::SeqCst);
    std::thread::panicking()
}

#[inline(never)]
fn thread_here() -> usize {
    smarm::current_thread_index().expect("an actor runs on a scheduler thread")
}

/// What a blocking sequence (yields, a sleep, yields) observed.
#[derive(Clone, Debug, Default)]
struct Report {
    start_thread: usize,
    /// Bit k set: the sequence was resumed on thread k at least once.
    threads_seen: u64,
    panicking_at_start: bool,
    /// `panicking()` after every resume.
    panicking_throughout: bool,
    /// `panicking()` was true after some resume.
    panicking_ever: bool,
    /// The thread-local thread index disagreed with the scheduler's after some resume.
    assigned_mismatch: bool,
    /// The sleep lasted at least `SLEEP`.
    slept_in_full: bool,
    /// Under load: `ACTIVE_INTERVALS` intervals with busy actors running on another thread
    /// were seen before the sleep (`MAX_YIELDS` was not reached).
    load_seen_elsewhere: bool,
    /// Under load: busy-actor resumes per thread during the whole sequence (diagnostics).
    load_during: [u64; THREADS],
    /// Yields before the sleep.
    yields_before_sleep: u32,
    /// Parks woken from a plain thread.
    woken_parks: u32,
}

impl Report {
    fn migrated(&self) -> bool {
        self.threads_seen != 1 << self.start_thread
    }
}

/// How many woken parks a blocking sequence makes.
#[derive(Clone, Copy)]
enum Parks {
    Exactly(u32),
    /// At least `WOKEN_PARKS`, then on until resumed on another thread (bounded).
    UntilMigrated,
}

/// Yields (`YIELDS` times, or under `load` until `ACTIVE_INTERVALS` intervals with busy
/// actors running on another thread), sleeps `SLEEP`, parks as `parks` says woken from a
/// plain thread, yields `YIELDS` times,
/// noting after every resume which thread it is on and whether that thread is panicking.
fn blocking_sequence(load: Option<&Load>, parks: Parks) -> Report {
    let start_thread = thread_here();
    let panicking_at_start = panicking_here();
    let mut r = Report {
        start_thread,
        threads_seen: 1 << start_thread,
        panicking_at_start,
        panicking_throughout: panicking_at_start,
        panicking_ever: panicking_at_start,
        ..Report::default()
    };
    let note = |r: &mut Report| {
        let now = thread_here();
        r.threads_seen |= 1 << now;
        if smarm::__private::scheduler_assigned_thread() != Some(now) {
            r.assigned_mismatch = true;
        }
        let p = panicking_here();
        r.panicking_throughout &= p;
        r.panicking_ever |= p;
    };
    let base = load.map(Load::snapshot);
    match load {
        Some(load) => {
            let mut prev = load.snapshot();
            let mut active = 0;
            for _ in 0..MAX_YIELDS {
                smarm::yield_now();
                r.yields_before_sleep += 1;
                note(&mut r);
                let now = load.snapshot();
                active += u32::from((0..THREADS).any(|t| t != start_thread && now[t] != prev[t]));
                prev = now;
                if active >= ACTIVE_INTERVALS {
                    r.load_seen_elsewhere = true;
                    break;
                }
            }
        }
        None => {
            for _ in 0..YIELDS {
                smarm::yield_now();
                note(&mut r);
            }
        }
    }
    let before = Instant::now();
    smarm::sleep(SLEEP);
    r.slept_in_full = before.elapsed() >= SLEEP;
    note(&mut r);
    // Parks woken from a plain thread: such a wake goes to the shared queue (or, for an
    // actor pinned while unwinding, to its thread's inbox), from which any thread may take
    // an unpinned actor. Yields alone keep an actor on its thread's local queue while every
    // thread is busy.
    let (req_tx, req_rx) = std::sync::mpsc::channel::<()>();
    let (reply_tx, reply_rx) = smarm::channel::channel::<()>();
    let helper = std::thread::spawn(move || {
        while req_rx.recv().is_ok() {
            if reply_tx.send(()).is_err() {
                break;
            }
        }
    });
    loop {
        let done = match parks {
            Parks::Exactly(n) => r.woken_parks >= n,
            Parks::UntilMigrated => r.woken_parks >= MAX_WOKEN_PARKS || (r.woken_parks >= WOKEN_PARKS && r.migrated()),
        };
        if done {
            break;
        }
        req_tx.send(()).expect("the waking thread ended");
        let _ = reply_rx.recv();
        r.woken_parks += 1;
        note(&mut r);
    }
    drop(req_tx);
    let _ = helper.join();
    for _ in 0..YIELDS {
        smarm::yield_now();
        note(&mut r);
    }
    if let (Some(load), Some(base)) = (load, base) {
        let now = load.snapshot();
        r.load_during = std::array::from_fn(|t| now[t] - base[t]);
    }
    r
}

/// Runs the blocking sequence when dropped and stores its report.
struct BlockingDrop {
    out: Arc<Mutex<Option<Report>>>,
    load: Option<Arc<Load>>,
    parks: u32,
}

impl Drop for BlockingDrop {
    fn drop(&mut self) {
        let r = blocking_sequence(self.load.as_deref(), Parks::Exactly(self.parks));
        *self.out.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
    }
}

fn runtime() -> Runtime {
    Runtime::builder().threads(THREADS).quiet_panics(true).build().unwrap()
}

/// Busy actors that yield in a loop (until `stop`), counting their resumes per thread in
/// `load`, so that every blocked actor competes for both threads and an unpinned one
/// migrates. Each returns how often it migrated.
fn spawn_busy(n: usize, stop: &Arc<AtomicBool>, load: &Arc<Load>) -> Vec<smarm::JoinHandle<u64>> {
    (0..n)
        .map(|_| {
            let (stop, load) = (stop.clone(), load.clone());
            smarm::spawn(move || {
                let mut migrations = 0;
                let mut last = thread_here();
                for _ in 0..20_000_000u64 {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    smarm::yield_now();
                    let now = thread_here();
                    load.resumes[now].fetch_add(1, Ordering::Relaxed);
                    migrations += u64::from(now != last);
                    last = now;
                }
                migrations
            })
        })
        .collect()
}

struct Phase1 {
    /// What the `Drop` of the panicking actor saw while unwinding.
    unwinding: Option<Report>,
    /// The same sequence run by a non-panicking actor under the same load.
    control: Report,
    join: Result<(), DownReason>,
    busy_migrations: u64,
}

/// Under load from busy actors, runs the blocking sequence in a control actor (no panic),
/// then panics an actor whose `Drop` runs the same sequence. Call from an actor.
fn panic_through_blocking_drop() -> Phase1 {
    let stop = Arc::new(AtomicBool::new(false));
    let load = Arc::new(Load::default());
    let busy = spawn_busy(8, &stop, &load);
    // The control runs before the panicker, not beside it: while the panicker is parked
    // mid-unwind (its sleep), every actor that runs on its thread sees `panicking()` and is
    // pinned there too, which can leave the control alone on the other thread.
    let control_load = load.clone();
    let control = smarm::spawn(move || blocking_sequence(Some(&control_load), Parks::UntilMigrated))
        .join()
        .expect("the control failed");
    // The unwinding actor gets more chances to migrate than the control needed.
    let parks = WOKEN_PARKS.max(control.woken_parks.saturating_mul(2));
    let out = Arc::new(Mutex::new(None));
    let guard_out = out.clone();
    let panicker = smarm::spawn(move || {
        let _guard = BlockingDrop { out: guard_out, load: Some(load), parks };
        smarm::yield_now();
        panic!("unwinding through a blocking drop");
    });
    let join = panicker.join();
    stop.store(true, Ordering::Relaxed);
    let busy_migrations = busy.into_iter().map(|h| h.join().expect("a busy actor failed")).sum();
    let unwinding = out.lock().unwrap().take();
    Phase1 { unwinding, control, join, busy_migrations }
}

/// Which threads were observed (bit mask) and which of them reported `panicking()`.
/// Spawns actors that yield and look until every thread has been seen (bounded).
fn observe_every_thread() -> (u64, u64) {
    let seen = Arc::new(AtomicU64::new(0));
    let panicking = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..32)
        .map(|_| {
            let (seen, panicking) = (seen.clone(), panicking.clone());
            smarm::spawn(move || {
                // Bounded; generous because a freshly started scheduler thread may wait a
                // while for a CPU on a loaded machine.
                for _ in 0..1_000_000 {
                    smarm::yield_now();
                    let t = thread_here();
                    if panicking_here() {
                        panicking.fetch_or(1 << t, Ordering::Relaxed);
                    }
                    if seen.fetch_or(1 << t, Ordering::Relaxed) | (1 << t) == ALL_THREADS {
                        break;
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("an observer failed");
    }
    (seen.load(Ordering::Relaxed), panicking.load(Ordering::Relaxed))
}

#[test]
fn an_actor_blocking_in_drop_while_unwinding_stays_on_its_thread_and_stays_panicking() {
    let p = runtime().run(panic_through_blocking_drop).unwrap();
    assert_eq!(p.join, Err(DownReason::Panic("unwinding through a blocking drop".into())));
    let r = p.unwinding.expect("the blocking drop did not run to completion");
    assert!(r.panicking_at_start, "the drop did not run during unwinding: {r:?}");
    assert!(r.panicking_throughout, "panicking() became false across a blocking call mid-unwind: {r:?}");
    assert!(!r.assigned_mismatch, "thread-local and scheduler disagreed on the thread: {r:?}");
    assert!(r.slept_in_full, "sleep returned early while unwinding: {r:?}");
    assert!(r.load_seen_elsewhere, "the other thread never ran the busy actors while the drop yielded: {r:?}");
    assert!(
        !r.migrated(),
        "an unwinding actor migrated from thread {} (threads seen: {:#b})",
        r.start_thread,
        r.threads_seen
    );
    // The same sequence outside unwinding, under the same load, does migrate: the pinning
    // above is the runtime's doing, not an artefact of the schedule.
    let c = p.control;
    assert!(!c.panicking_at_start && !c.assigned_mismatch && c.slept_in_full, "control: {c:?}");
    assert!(c.load_seen_elsewhere, "the other thread never ran the busy actors: {c:?}");
    assert!(c.migrated(), "the control actor never migrated, so the test exercised nothing: {c:?}");
    assert!(p.busy_migrations > 0, "the busy actors never migrated");
}

#[test]
fn after_an_unwind_through_a_blocking_drop_no_thread_is_left_panicking_and_later_panics_work() {
    let rt = runtime();
    let (phase1, after, second, value, after_second) = rt
        .run(|| {
            let phase1 = panic_through_blocking_drop();
            let after = observe_every_thread();
            let second = smarm::spawn(|| -> u32 { panic!("second panic {}", 2) }).join();
            let value = smarm::spawn(|| 6 * 7).join();
            let after_second = observe_every_thread();
            (phase1, after, second, value, after_second)
        })
        .unwrap();
    assert_eq!(phase1.join, Err(DownReason::Panic("unwinding through a blocking drop".into())));
    assert!(phase1.unwinding.is_some(), "the blocking drop did not run to completion");
    assert_eq!(after.0, ALL_THREADS, "not every scheduler thread was observed");
    assert_eq!(after.1, 0, "threads (bit mask) still panicking after the unwind ended: {:#b}", after.1);
    assert_eq!(second, Err(DownReason::Panic("second panic 2".into())));
    assert_eq!(value, Ok(42));
    assert_eq!(after_second.0, ALL_THREADS, "not every scheduler thread was observed");
    assert_eq!(after_second.1, 0, "threads (bit mask) still panicking after the second panic: {:#b}", after_second.1);
}

/// Shutdown unwinds a cancelled actor (`DownReason::Shutdown`); its blocking `Drop` runs to
/// completion: parks turn into yields (it is being shut down) but a sleep still lasts its
/// full duration, and the actor stays on its thread.
#[test]
fn an_actor_shut_down_by_root_exit_completes_a_blocking_drop_on_its_own_thread() {
    let out = Arc::new(Mutex::new(None));
    let started = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    let (o, s) = (out.clone(), started.clone());
    let v = runtime()
        .run(move || {
            let stop = Arc::new(AtomicBool::new(false));
            let busy = spawn_busy(4, &stop, &Arc::new(Load::default()));
            let h = smarm::spawn(move || {
                // No load to wait for: shutdown ends the busy actors.
                let _guard = BlockingDrop { out: o, load: None, parks: WOKEN_PARKS };
                s.store(1, Ordering::Release);
                loop {
                    smarm::yield_now();
                }
            });
            tx.send(h).unwrap();
            for _ in 0..10_000_000u64 {
                if started.load(Ordering::Acquire) == 1 {
                    break;
                }
                smarm::yield_now();
            }
            // The busy actors are still running: they are shut down with the rest.
            drop(busy);
            started.load(Ordering::Acquire)
        })
        .unwrap();
    assert_eq!(v, 1, "the child never started");
    assert_eq!(rx.recv().unwrap().join(), Err(DownReason::Shutdown));
    let r = out.lock().unwrap().take().expect("the blocking drop did not run to completion");
    assert!(r.panicking_throughout, "the drop did not run entirely during unwinding: {r:?}");
    assert!(!r.assigned_mismatch, "thread-local and scheduler disagreed on the thread: {r:?}");
    assert!(r.slept_in_full, "sleep returned early while shutting down: {r:?}");
    assert!(!r.migrated(), "an unwinding actor migrated during shutdown: {r:?}");
}

/// Yields while `cond` is false, at most `max` times; returns whether it became true.
fn yield_until(max: u64, cond: impl Fn() -> bool) -> bool {
    for _ in 0..max {
        if cond() {
            return true;
        }
        smarm::yield_now();
    }
    cond()
}

/// Waits (yielding, bounded) for a flag that another actor sets; records whether it did.
struct WaitForFlagOnDrop {
    flag: Arc<AtomicBool>,
    saw_it: Arc<AtomicBool>,
}

impl Drop for WaitForFlagOnDrop {
    fn drop(&mut self) {
        let saw = yield_until(1_000_000, || self.flag.load(Ordering::SeqCst));
        self.saw_it.store(saw, Ordering::SeqCst);
    }
}

/// An unwinding actor is pinned to its thread, but its `yield_now` must still let the other
/// actors of that thread run: on one scheduler thread, a panicking actor whose `Drop` waits
/// (yielding) for another actor must see that actor make progress.
#[test]
fn a_yield_while_unwinding_lets_the_other_actors_of_its_thread_run() {
    let (join, saw_it) = Runtime::builder()
        .threads(1)
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(|| {
            let flag = Arc::new(AtomicBool::new(false));
            let saw_it = Arc::new(AtomicBool::new(false));
            let waiter = {
                let (flag, saw_it) = (flag.clone(), saw_it.clone());
                smarm::spawn(move || {
                    let _wait = WaitForFlagOnDrop { flag, saw_it };
                    panic!("unwinding waits for another actor");
                })
            };
            let setter = smarm::spawn(move || flag.store(true, Ordering::SeqCst));
            let join = waiter.join();
            setter.join().unwrap();
            (join, saw_it.load(Ordering::SeqCst))
        })
        .unwrap();
    assert_eq!(join, Err(DownReason::Panic("unwinding waits for another actor".into())));
    assert!(saw_it, "1,000,000 yields of an unwinding actor never let the queued actor run");
}

/// Root exit while an actor's `Drop` waits for another actor to end: the shut-down actor
/// unwinds (pinned, its parks turned into yields), and the actor it waits for must still
/// get to run, be shut down and end. (With an unbounded `join` in the `Drop` instead of
/// this bounded wait, a starved actor would make `run` hang.)
#[test]
fn root_exit_lets_an_actor_waited_for_by_an_unwinding_drop_end() {
    struct WaitForEndOnDrop {
        worker: Arc<Mutex<Option<smarm::JoinHandle<()>>>>,
        ended: Arc<AtomicBool>,
    }
    impl Drop for WaitForEndOnDrop {
        fn drop(&mut self) {
            let h = self.worker.lock().unwrap_or_else(|e| e.into_inner()).take();
            let ended = h.is_some_and(|h| yield_until(1_000_000, || h.is_finished()));
            self.ended.store(ended, Ordering::SeqCst);
        }
    }
    let ended = Arc::new(AtomicBool::new(false));
    let e = ended.clone();
    let started = Runtime::builder()
        .threads(1)
        .quiet_panics(true)
        .build()
        .unwrap()
        .run(move || {
            let slot = Arc::new(Mutex::new(None));
            let started = Arc::new(AtomicUsize::new(0));
            let _supervisor = {
                let (slot, started) = (slot.clone(), started.clone());
                smarm::spawn(move || {
                    let _wait = WaitForEndOnDrop { worker: slot, ended: e };
                    started.fetch_add(1, Ordering::SeqCst);
                    loop {
                        smarm::yield_now();
                    }
                })
            };
            let worker = {
                let started = started.clone();
                smarm::spawn(move || {
                    started.fetch_add(1, Ordering::SeqCst);
                    loop {
                        smarm::yield_now();
                    }
                })
            };
            *slot.lock().unwrap() = Some(worker);
            yield_until(10_000_000, || started.load(Ordering::SeqCst) == 2)
        })
        .unwrap();
    assert!(started, "the supervisor and the worker did not both start");
    assert!(ended.load(Ordering::SeqCst), "the worker never ran (and ended) while the unwinding supervisor waited");
}
