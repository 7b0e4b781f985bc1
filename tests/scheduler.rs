//! The scheduler's observable behaviour: spawn and join, panics, preemption, root exit and
//! shutdown, and `sleep`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use smarm::{DownReason, JoinHandle, NoPreempt, RunError, Runtime};

fn runtime(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).quiet_panics(true).build().unwrap()
}

/// Yields until `cond` holds, at most `max` times; returns whether it held.
fn yield_until(max: u64, cond: impl Fn() -> bool) -> bool {
    for _ in 0..max {
        if cond() {
            return true;
        }
        smarm::yield_now();
    }
    cond()
}

/// Counts its drops in a shared counter.
struct Tracked(Arc<AtomicUsize>);

impl Drop for Tracked {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------
// spawn / join

#[test]
fn join_returns_each_spawned_actors_value() {
    let sum = runtime(2)
        .run(|| {
            let handles: Vec<_> = (0..200u64)
                .map(|i| {
                    smarm::spawn(move || {
                        smarm::yield_now();
                        i * i
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        })
        .unwrap();
    assert_eq!(sum, (0..200u64).map(|i| i * i).sum::<u64>());
}

#[test]
fn actors_spawned_by_actors_join_with_their_values() {
    let v = runtime(2)
        .run(|| {
            let outer = smarm::spawn(|| {
                let inner: Vec<_> = (0..10u32).map(|i| smarm::spawn(move || i + 1)).collect();
                inner.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
            });
            outer.join().unwrap()
        })
        .unwrap();
    assert_eq!(v, (1..=10).collect::<Vec<u32>>());
}

#[test]
fn a_plain_os_thread_joining_a_handle_blocks_until_the_actor_finishes() {
    let (tx, rx) = mpsc::channel::<JoinHandle<u64>>();
    let about_to_join = Arc::new(AtomicBool::new(false));
    let actor_finished = Arc::new(AtomicBool::new(false));
    let joined = Arc::new(AtomicBool::new(false));
    let os_thread = {
        let (about_to_join, actor_finished, joined) = (about_to_join.clone(), actor_finished.clone(), joined.clone());
        std::thread::spawn(move || {
            let h = rx.recv().unwrap();
            about_to_join.store(true, Ordering::SeqCst);
            let result = h.join();
            let finished_before_join_returned = actor_finished.load(Ordering::SeqCst);
            joined.store(true, Ordering::SeqCst);
            (result, finished_before_join_returned)
        })
    };
    let root = {
        let (about_to_join, actor_finished, joined) = (about_to_join.clone(), actor_finished.clone(), joined.clone());
        move || {
            let h = smarm::spawn(move || {
                // Block on yields until the thread is about to join, then some more so that
                // it is (very likely) parked in `join` when the value arrives.
                assert!(yield_until(50_000_000, || about_to_join.load(Ordering::SeqCst)));
                for _ in 0..20_000 {
                    smarm::yield_now();
                }
                actor_finished.store(true, Ordering::SeqCst);
                99
            });
            tx.send(h).unwrap();
            // Keep the runtime (and so the actor) alive until the thread has joined.
            for _ in 0..200_000 {
                if joined.load(Ordering::SeqCst) {
                    break;
                }
                smarm::sleep(Duration::from_micros(100));
            }
            joined.load(Ordering::SeqCst)
        }
    };
    assert!(runtime(2).run(root).unwrap(), "the OS thread never returned from join");
    let (result, finished_first) = os_thread.join().unwrap();
    assert_eq!(result, Ok(99));
    assert!(finished_first, "join returned before the actor finished");
}

// ---------------------------------------------------------------------------------------
// panics

#[test]
fn join_reports_the_message_of_a_literal_panic() {
    let r = runtime(2).run(|| smarm::spawn(|| -> u32 { panic!("a literal message") }).join()).unwrap();
    assert_eq!(r, Err(DownReason::Panic("a literal message".to_string())));
}

#[test]
fn join_reports_the_message_of_a_formatted_panic() {
    let r = runtime(2)
        .run(|| {
            let n = 7;
            smarm::spawn(move || -> u32 { panic!("formatted {n} and {}", "more") }).join()
        })
        .unwrap();
    assert_eq!(r, Err(DownReason::Panic("formatted 7 and more".to_string())));
}

#[test]
fn join_reports_a_non_string_panic_payload_as_box_dyn_any() {
    let r = runtime(2).run(|| smarm::spawn(|| std::panic::panic_any(17u32)).join()).unwrap();
    assert_eq!(r, Err(DownReason::Panic("Box<dyn Any>".to_string())));
}

#[test]
fn panicking_actors_do_not_disturb_the_other_actors() {
    let (panics, sum) = runtime(2)
        .run(|| {
            let workers: Vec<_> = (0..8u64)
                .map(|k| {
                    smarm::spawn(move || {
                        let mut acc = 0u64;
                        for i in 0..2_000u64 {
                            acc += i * k;
                            smarm::yield_now();
                        }
                        acc
                    })
                })
                .collect();
            let panickers: Vec<_> = (0..50)
                .map(|i| {
                    smarm::spawn(move || -> u64 {
                        smarm::yield_now();
                        panic!("panicker {i}")
                    })
                })
                .collect();
            let panics: Vec<_> = panickers.into_iter().map(|h| h.join()).collect();
            let sum: u64 = workers.into_iter().map(|h| h.join().unwrap()).sum();
            (panics, sum)
        })
        .unwrap();
    for (i, r) in panics.into_iter().enumerate() {
        assert_eq!(r, Err(DownReason::Panic(format!("panicker {i}"))));
    }
    assert_eq!(sum, (0..8u64).map(|k| k * (0..2_000u64).sum::<u64>()).sum::<u64>());
}

/// The child-process side of the panic-report tests: an actor panics on a runtime whose
/// `quiet_panics` comes from the environment. Runs only when a parent test asks for it.
#[test]
#[ignore = "helper: run as a child process by the panic report tests"]
fn panic_report_child() {
    let Ok(mode) = std::env::var(CHILD_ENV) else { return };
    let rt = Runtime::builder().threads(2).quiet_panics(mode == "quiet").build().unwrap();
    let r = rt.run(|| smarm::spawn(|| -> u32 { panic!("child panic marker {}", 7) }).join()).unwrap();
    assert_eq!(r, Err(DownReason::Panic("child panic marker 7".to_string())));
}

const CHILD_ENV: &str = "SMARM_TEST_PANIC_REPORT_CHILD";

/// Runs `panic_report_child` in a child process; returns its stderr.
fn run_panic_child(mode: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "panic_report_child", "--ignored", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, mode)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "child failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    assert!(stdout.contains("1 passed"), "the child did not run the helper test\nstdout:\n{stdout}");
    stderr
}

#[test]
fn an_actor_panic_is_reported_on_stderr_with_its_pid_and_location_by_default() {
    let stderr = run_panic_child("loud");
    assert!(stderr.contains("smarm: actor <0."), "no pid in the report:\n{stderr}");
    assert!(stderr.contains("panicked at"), "no location in the report:\n{stderr}");
    assert!(stderr.contains("child panic marker 7"), "no message in the report:\n{stderr}");
}

#[test]
fn quiet_panics_silences_the_actor_panic_report() {
    let stderr = run_panic_child("quiet");
    assert!(!stderr.contains("smarm: actor"), "quiet_panics(true) still reported:\n{stderr}");
    assert!(!stderr.contains("panicked"), "quiet_panics(true) still reported:\n{stderr}");
    assert!(!stderr.contains("child panic marker"), "quiet_panics(true) still printed the message:\n{stderr}");
}

// ---------------------------------------------------------------------------------------
// preemption

#[test]
fn maybe_preempt_lets_a_queued_actor_run_on_a_single_thread() {
    let (flag_before_loop, saw_flag, iterations) = runtime(1)
        .run(|| {
            let flag = Arc::new(AtomicBool::new(false));
            let b = {
                // The spawn itself must not yield: B may only run through the loop below.
                let _g = NoPreempt::new();
                let flag = flag.clone();
                smarm::spawn(move || flag.store(true, Ordering::SeqCst))
            };
            let flag_before_loop = flag.load(Ordering::SeqCst);
            let mut i = 0u64;
            let saw_flag = loop {
                if flag.load(Ordering::SeqCst) {
                    break true;
                }
                if i == 1_000_000_000 {
                    break false;
                }
                smarm::maybe_preempt();
                i += 1;
            };
            b.join().unwrap();
            (flag_before_loop, saw_flag, i)
        })
        .unwrap();
    assert!(!flag_before_loop, "B ran before the CPU-bound loop started");
    assert!(saw_flag, "a CPU-bound actor calling maybe_preempt was never preempted ({iterations} iterations)");
}

/// Spawns an actor B that sets a flag, then runs a million `maybe_preempt` checks on the
/// caller's thread. Returns B's handle and flag, whether B ran during the loop, and the
/// loop's rdtsc ticks (to check that it outlasted many timeslices).
fn spin_beside_a_queued_actor() -> (smarm::JoinHandle<()>, Arc<AtomicBool>, bool, u64) {
    let ran = Arc::new(AtomicBool::new(false));
    let b = {
        let ran = ran.clone();
        smarm::spawn(move || ran.store(true, Ordering::SeqCst))
    };
    let start = smarm::__private::rdtsc();
    for i in 0..1_000_000u64 {
        smarm::maybe_preempt();
        std::hint::black_box(i);
    }
    let ticks = smarm::__private::rdtsc() - start;
    let ran_during_loop = ran.load(Ordering::SeqCst);
    (b, ran, ran_during_loop, ticks)
}

#[test]
fn no_preempt_guard_keeps_maybe_preempt_from_yielding_until_dropped() {
    let rt = Runtime::builder().threads(1).timeslice_cycles(1_000).build().unwrap();
    let (ran_under_guard, guarded_ticks, ran_after) = rt
        .run(|| {
            let guard = NoPreempt::new();
            // B is queued; the only thread is ours. Spend many timeslices in maybe_preempt.
            let (b, ran, ran_under_guard, guarded_ticks) = spin_beside_a_queued_actor();
            drop(guard);
            for _ in 0..1_000_000_000u64 {
                if ran.load(Ordering::SeqCst) {
                    break;
                }
                smarm::maybe_preempt();
            }
            let ran_after = ran.load(Ordering::SeqCst);
            b.join().unwrap();
            (ran_under_guard, guarded_ticks, ran_after)
        })
        .unwrap();
    assert!(guarded_ticks > 100 * 1_000, "the guarded loop did not outlast the timeslice ({guarded_ticks} ticks)");
    assert!(!ran_under_guard, "maybe_preempt yielded while a NoPreempt guard was held");
    assert!(ran_after, "maybe_preempt never yielded after the guard was dropped");
}

#[test]
fn nested_no_preempt_guards_hold_until_the_outermost_is_dropped() {
    let rt = Runtime::builder().threads(1).timeslice_cycles(1_000).build().unwrap();
    let (ran_under_outer, ran_after) = rt
        .run(|| {
            let ran = Arc::new(AtomicBool::new(false));
            let outer = NoPreempt::new();
            let b = {
                let ran = ran.clone();
                smarm::spawn(move || ran.store(true, Ordering::SeqCst))
            };
            drop(NoPreempt::new());
            {
                let _inner = NoPreempt::new();
                smarm::maybe_preempt();
            }
            for _ in 0..1_000_000u64 {
                smarm::maybe_preempt();
            }
            let ran_under_outer = ran.load(Ordering::SeqCst);
            drop(outer);
            for _ in 0..1_000_000_000u64 {
                if ran.load(Ordering::SeqCst) {
                    break;
                }
                smarm::maybe_preempt();
            }
            let ran_after = ran.load(Ordering::SeqCst);
            b.join().unwrap();
            (ran_under_outer, ran_after)
        })
        .unwrap();
    assert!(!ran_under_outer, "dropping an inner guard re-enabled preemption");
    assert!(ran_after, "maybe_preempt never yielded after the outer guard was dropped");
}

thread_local! {
    /// Where an actor leaves its NoPreempt guard for whichever actor runs next on the thread.
    static STASHED_GUARD: std::cell::RefCell<Option<NoPreempt>> = const { std::cell::RefCell::new(None) };
}

#[test]
fn no_preempt_guard_dropped_by_another_actor_panics_and_keeps_its_owner_unpreemptible() {
    let rt = Runtime::builder().threads(1).timeslice_cycles(1_000).quiet_panics(true).build().unwrap();
    let (drop_panic, ran_while_owner_spun, owner_ticks) = rt
        .run(|| {
            let (stored_tx, stored_rx) = smarm::channel::channel::<()>();
            let (go_tx, go_rx) = smarm::channel::channel::<()>();
            // The owner creates a guard and leaves it in a thread-local; the only thread
            // then runs the thief, which finds it there.
            let owner = smarm::spawn(move || {
                STASHED_GUARD.with(|g| *g.borrow_mut() = Some(NoPreempt::new()));
                stored_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                // Our count must still be raised: with a queued actor and a 1,000-tick slice,
                // many slices of maybe_preempt must not yield.
                let (other, _, ran_while_spinning, ticks) = spin_beside_a_queued_actor();
                other.join().unwrap();
                (ran_while_spinning, ticks)
            });
            stored_rx.recv().unwrap();
            let thief = smarm::spawn(|| {
                let guard = STASHED_GUARD.with(|g| g.borrow_mut().take()).expect("the owner stashed its guard");
                catch_unwind(AssertUnwindSafe(move || drop(guard)))
                    .err()
                    .map(|p| p.downcast_ref::<String>().cloned().unwrap_or_else(|| "a non-String panic".to_string()))
            });
            let drop_panic = thief.join().unwrap();
            go_tx.send(()).unwrap();
            let (ran, ticks) = owner.join().unwrap();
            (drop_panic, ran, ticks)
        })
        .unwrap();
    let msg = drop_panic.expect("dropping another actor's NoPreempt guard did not panic");
    assert!(msg.contains("NoPreempt") && msg.contains("dropped by actor"), "panic message: {msg}");
    assert!(owner_ticks > 100 * 1_000, "the owner's loop did not outlast the timeslice ({owner_ticks} ticks)");
    assert!(!ran_while_owner_spun, "the foreign drop lowered the owner's count: it was preempted");
}

// ---------------------------------------------------------------------------------------
// root exit and shutdown

#[test]
fn root_exit_shuts_down_parked_and_yielding_actors_and_runs_their_destructors() {
    let drops = Arc::new(AtomicUsize::new(0));
    let started = Arc::new(AtomicUsize::new(0));
    const YIELDERS: usize = 4;
    let root = {
        let (drops, started) = (drops.clone(), started.clone());
        move || {
            // Sleeps in a loop forever.
            let sleeper = {
                let (d, s) = (drops.clone(), started.clone());
                smarm::spawn(move || {
                    let _t = Tracked(d);
                    s.fetch_add(1, Ordering::SeqCst);
                    loop {
                        smarm::sleep(Duration::from_millis(5));
                    }
                })
            };
            // Parked forever in `join` of the sleeper.
            let joiner = {
                let (d, s) = (drops.clone(), started.clone());
                smarm::spawn(move || {
                    let _t = Tracked(d);
                    s.fetch_add(1, Ordering::SeqCst);
                    sleeper.join()
                })
            };
            // Yield forever.
            let yielders: Vec<_> = (0..YIELDERS)
                .map(|_| {
                    let (d, s) = (drops.clone(), started.clone());
                    smarm::spawn(move || {
                        let _t = Tracked(d);
                        s.fetch_add(1, Ordering::SeqCst);
                        loop {
                            smarm::yield_now();
                        }
                    })
                })
                .collect();
            let all_started = yield_until(50_000_000, || started.load(Ordering::SeqCst) == YIELDERS + 2);
            // Give the joiner time to park in `join` (it has already started).
            for _ in 0..1_000 {
                smarm::yield_now();
            }
            (all_started, joiner, yielders)
        }
    };
    let (all_started, joiner, yielders) = runtime(2).run(root).unwrap();
    assert!(all_started, "not every child started");
    assert_eq!(drops.load(Ordering::SeqCst), YIELDERS + 2, "not every child's destructor ran before run returned");
    assert_eq!(joiner.join(), Err(DownReason::Shutdown));
    for y in yielders {
        assert_eq!(y.join(), Err(DownReason::Shutdown));
    }
}

#[test]
fn run_returns_the_root_value_at_once_when_nothing_else_runs() {
    assert_eq!(runtime(2).run(|| "done").unwrap(), "done");
    assert_eq!(runtime(1).run(|| 5u8).unwrap(), 5);
}

#[test]
fn run_returns_root_panic_as_a_run_error_and_shuts_down_the_rest() {
    let drops = Arc::new(AtomicUsize::new(0));
    let d = drops.clone();
    let r = runtime(2).run(move || -> u32 {
        let started = Arc::new(AtomicBool::new(false));
        let s = started.clone();
        let _child = smarm::spawn(move || {
            let _t = Tracked(d);
            s.store(true, Ordering::SeqCst);
            loop {
                smarm::yield_now();
            }
        });
        assert!(yield_until(50_000_000, || started.load(Ordering::SeqCst)));
        panic!("root failed with {}", 13)
    });
    match r {
        Err(RunError::Root(DownReason::Panic(msg))) => assert_eq!(msg, "root failed with 13"),
        other => panic!("expected Err(Root(Panic(..))), got {other:?}"),
    }
    assert_eq!(drops.load(Ordering::SeqCst), 1, "the child's destructor did not run");
}

#[test]
fn smarm_run_panics_with_the_root_actors_message() {
    let payload = catch_unwind(AssertUnwindSafe(|| smarm::run(|| -> u32 { panic!("root message {}", 99) })))
        .expect_err("smarm::run returned although the root panicked");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .expect("a string panic payload");
    assert!(msg.contains("root message 99"), "panic message {msg:?} lacks the root's message");
}

// ---------------------------------------------------------------------------------------
// sleep

#[test]
fn sleep_never_returns_before_the_requested_duration() {
    let early = runtime(2)
        .run(|| {
            // Other actors keep both threads busy (and their wakes frequent).
            let stop = Arc::new(AtomicBool::new(false));
            let busy: Vec<_> = (0..4)
                .map(|_| {
                    let stop = stop.clone();
                    smarm::spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            smarm::yield_now();
                        }
                    })
                })
                .collect();
            let mut early = Vec::new();
            for _ in 0..5 {
                for d in [1, 10, 100, 1_000, 3_000].map(Duration::from_micros) {
                    let start = Instant::now();
                    smarm::sleep(d);
                    let slept = start.elapsed();
                    if slept < d {
                        early.push((d, slept));
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
            for b in busy {
                b.join().unwrap();
            }
            early
        })
        .unwrap();
    assert!(early.is_empty(), "sleeps that returned early (requested, slept): {early:?}");
}

#[test]
fn sleep_of_zero_returns() {
    let v = runtime(1)
        .run(|| {
            smarm::sleep(Duration::ZERO);
            let h = smarm::spawn(|| {
                smarm::sleep(Duration::ZERO);
                1
            });
            h.join().unwrap() + 1
        })
        .unwrap();
    assert_eq!(v, 2);
}

#[test]
fn a_thousand_concurrent_sleepers_all_wake_no_earlier_than_asked() {
    const SLEEPERS: u64 = 1_000;
    let results = runtime(2)
        .run(|| {
            let handles: Vec<_> = (0..SLEEPERS)
                .map(|i| {
                    smarm::spawn(move || {
                        let d = Duration::from_micros(100 * (i % 20 + 1));
                        let start = Instant::now();
                        smarm::sleep(d);
                        (i, start.elapsed() >= d)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
        .unwrap();
    assert_eq!(results.len() as u64, SLEEPERS);
    let early: Vec<u64> = results.iter().filter(|(_, ok)| !ok).map(|(i, _)| *i).collect();
    assert!(early.is_empty(), "sleepers that woke early: {early:?}");
    assert!(results.iter().enumerate().all(|(k, (i, _))| k as u64 == *i));
}
