//! A yield hands the thread straight to the head of the local queue (`hand_off_yield`), one
//! switch instead of a round through the scheduler: the order actors run in is the
//! scheduler's, nothing is lost when thieves race it, and a yielder stays killable.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use smarm::{DownReason, Runtime};

fn run<T: Send + 'static>(threads: usize, root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(threads).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

/// On one thread, yielders take turns in the order they were spawned, round after round: a
/// yielder goes behind every actor queued before it, and the head runs next (what the
/// scheduler's round would do, and the hand-off must keep). 100 rounds cross the ticks on
/// which the scheduler's round runs instead of the hand-off.
#[test]
fn yielders_on_one_thread_take_turns_in_spawn_order() {
    const ACTORS: usize = 7;
    const ROUNDS: usize = 100;
    let log = run(1, || {
        let log = Arc::new(Mutex::new(Vec::with_capacity(ACTORS * ROUNDS)));
        let hs: Vec<_> = (0..ACTORS)
            .map(|id| {
                let log = log.clone();
                smarm::spawn(move || {
                    for _ in 0..ROUNDS {
                        log.lock().unwrap().push(id);
                        smarm::yield_now();
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        Arc::try_unwrap(log).unwrap().into_inner().unwrap()
    });
    assert_eq!(log.len(), ACTORS * ROUNDS);
    for (i, &id) in log.iter().enumerate() {
        assert_eq!(id, i % ACTORS, "turn {i} went to actor {id}: {:?}", &log[i.saturating_sub(10)..i + 1]);
    }
}

/// On two threads, yielders race thieves for the local queue's head; every yielder finishes
/// every yield, and each counts its own turns exactly.
#[test]
fn yielders_on_two_threads_all_finish_with_every_turn_counted() {
    const ACTORS: usize = 64;
    const YIELDS: usize = 2_000;
    let total = Arc::new(AtomicUsize::new(0));
    let t = total.clone();
    let counts = run(2, move || {
        let hs: Vec<_> = (0..ACTORS)
            .map(|_| {
                let t = t.clone();
                smarm::spawn(move || {
                    let mut mine = 0;
                    for _ in 0..YIELDS {
                        mine += 1;
                        t.fetch_add(1, Ordering::Relaxed);
                        smarm::yield_now();
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
    });
    assert!(counts.iter().all(|&c| c == YIELDS), "{counts:?}");
    assert_eq!(total.load(Ordering::Relaxed), ACTORS * YIELDS);
}

/// An actor that only ever yields (and hands its thread to another yielder each time) is
/// still stopped by a kill, and the other yielder goes on.
#[test]
fn a_yielder_handing_off_is_killed() {
    let (reason, other) = run(1, || {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let other = smarm::spawn(move || {
            let mut turns = 0u64;
            while !s.load(Ordering::Relaxed) {
                turns += 1;
                smarm::yield_now();
            }
            turns
        });
        let spinner = smarm::spawn(|| loop {
            smarm::yield_now();
        });
        // Let both take some turns, handing the thread to each other and back to us.
        for _ in 0..100 {
            smarm::yield_now();
        }
        smarm::kill(spinner.pid());
        let reason = spinner.join().unwrap_err();
        stop.store(true, Ordering::Relaxed);
        (reason, other.join().unwrap())
    });
    assert_eq!(reason, DownReason::Killed);
    assert!(other > 0);
}

/// A yield that hands the thread to an actor which then spins without runtime calls leaves
/// the yielder queued behind it: the idle thread must be told to take it (the spinner waits
/// for the yielder, so otherwise this never ends).
#[test]
fn a_yielder_behind_a_spinning_actor_is_taken_by_the_idle_thread() {
    run(2, || {
        for _ in 0..200 {
            let started = Arc::new(AtomicBool::new(false));
            let go = Arc::new(AtomicBool::new(false));
            let (s, g) = (started.clone(), go.clone());
            let h = smarm::spawn(move || {
                s.store(true, Ordering::Release);
                while !g.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            });
            while !started.load(Ordering::Acquire) {
                smarm::yield_now();
            }
            go.store(true, Ordering::Release);
            h.join().unwrap();
        }
    });
}
