//! `smarm::sync`: `Mutex` (mutual exclusion with the guard held across switches, `try_lock`,
//! FIFO hand-off, release on panic and on shutdown), `Barrier` (one leader per generation,
//! reusable) and `WaitGroup` (with `add`/`done`, and participants whose drop counts as
//! done), from actors, plain OS threads, and both at once.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use smarm::channel::{oneshot, OneshotReceiver, RecvError};
use smarm::sync::{Barrier, Mutex, Participant, WaitGroup};
use smarm::{DownReason, Runtime};

/// Bounds waits that only end if a wake-up works (a lost wake fails instead of hanging).
const GUARD: Duration = Duration::from_secs(20);

fn rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).build().unwrap()
}

fn quiet_rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).quiet_panics(true).build().unwrap()
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Actor,
    Thread,
}

/// A helper's outcome; `join` parks an actor and blocks a plain thread.
struct Task<T>(OneshotReceiver<std::thread::Result<T>>);

impl<T> Task<T> {
    fn join(self) -> T {
        match self.0.recv() {
            Ok(Ok(v)) => v,
            Ok(Err(p)) => resume_unwind(p),
            Err(RecvError) => panic!("a helper ended without a result"),
        }
    }
}

/// Runs `f` as an actor of the caller's runtime or as a plain thread.
fn go<T: Send + 'static>(on: On, f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
    let (tx, rx) = oneshot();
    let job = move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    };
    match on {
        On::Actor => drop(smarm::spawn(job)),
        On::Thread => drop(std::thread::spawn(job)),
    }
    Task(rx)
}

/// Helper kinds for `n` helpers: all actors, all threads, or alternating.
#[derive(Clone, Copy, Debug)]
enum Mix {
    Actors,
    Threads,
    Mixed,
}

impl Mix {
    fn nth(self, i: usize) -> On {
        match self {
            Mix::Actors => On::Actor,
            Mix::Threads => On::Thread,
            Mix::Mixed if i % 2 == 0 => On::Actor,
            Mix::Mixed => On::Thread,
        }
    }
}

/// Runs `body(mix)` for each mix, on a root actor of a two-thread runtime (a mix of only
/// threads also runs from a plain-thread root).
fn each_mix(body: fn(Mix)) {
    for mix in [Mix::Actors, Mix::Threads, Mix::Mixed] {
        if let Err(e) = rt(2).run(move || body(mix)) {
            panic!("root on an actor, helpers {mix:?}: {e}");
        }
    }
    if let Err(p) = std::thread::spawn(move || body(Mix::Threads)).join() {
        eprintln!("root on a plain thread, helpers on plain threads:");
        resume_unwind(p);
    }
}

/// Yields until `cond` holds (each round lets other actors or threads run).
fn yield_until(cond: impl Fn() -> bool) {
    while !cond() {
        smarm::yield_now();
    }
}

// ---------------------------------------------------------------------------------------
// Mutex

/// `workers` helpers each add 1 `rounds` times, reading, yielding and writing back while
/// holding the guard (a lost update or two owners at once shows up in the total or in the
/// `inside` count).
fn hammer(mix: Mix, workers: usize, rounds: usize) {
    let m = Arc::new(Mutex::new(0usize));
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..workers)
        .map(|i| {
            let (m, inside) = (m.clone(), inside.clone());
            go(mix.nth(i), move || {
                for _ in 0..rounds {
                    let mut g = m.lock();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two owners at once");
                    let v = *g;
                    smarm::yield_now(); // the guard is held across a switch (and maybe a migration)
                    *g = v + 1;
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    for t in tasks {
        t.join();
    }
    assert_eq!(*m.lock(), workers * rounds, "lost updates");
}

#[test]
fn mutex_excludes_32_actors_that_hold_the_guard_across_yields() {
    rt(2).run(|| hammer(Mix::Actors, 32, 1_000)).unwrap();
}

#[test]
fn mutex_excludes_plain_threads_and_actors_together() {
    each_mix(|mix| hammer(mix, 8, 500));
}

#[test]
fn try_lock_fails_while_held_and_succeeds_once_released() {
    each_mix(|mix| {
        let m = Arc::new(Mutex::new(5u32));
        {
            let g = m.try_lock().expect("an unlocked mutex");
            assert_eq!(*g, 5);
            assert!(m.try_lock().is_none(), "try_lock succeeded while the caller held the guard");
            let m2 = m.clone();
            assert!(go(mix.nth(0), move || m2.try_lock().is_none()).join(), "try_lock succeeded on a held mutex");
        }
        // Held by a helper.
        let (locked_tx, locked_rx) = oneshot::<()>();
        let (release_tx, release_rx) = oneshot::<()>();
        let m2 = m.clone();
        let t = go(mix.nth(1), move || {
            let mut g = m2.lock();
            *g += 1;
            locked_tx.send(()).unwrap();
            release_rx.recv().unwrap();
        });
        locked_rx.recv().unwrap();
        assert!(m.try_lock().is_none());
        assert!(format!("{m:?}").contains("locked"), "{m:?}");
        release_tx.send(()).unwrap();
        t.join();
        assert_eq!(*m.try_lock().expect("released"), 6);
        assert_eq!(format!("{m:?}"), "Mutex { value: 6 }");
    });
}

#[test]
fn a_waiting_locker_gets_the_mutex_at_the_holders_next_unlock() {
    // One scheduler thread. A locks, yields while holding, unlocks and relocks at once, in a
    // loop. B asks for the lock while A holds it. With FIFO hand-off B owns the lock right
    // after A's next unlock; a barging lock would let A retake it every time and B would wait
    // for all of A's iterations.
    let (waited, a_iters) = rt(1)
        .run(|| {
            let m = Arc::new(Mutex::new(()));
            let iters = Arc::new(AtomicUsize::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let a = {
                let (m, iters, stop) = (m.clone(), iters.clone(), stop.clone());
                smarm::spawn(move || {
                    while !stop.load(Ordering::SeqCst) && iters.load(Ordering::SeqCst) < 10_000 {
                        let g = m.lock();
                        iters.fetch_add(1, Ordering::SeqCst);
                        smarm::yield_now();
                        drop(g); // no yield before the next lock
                    }
                    iters.load(Ordering::SeqCst)
                })
            };
            let b = smarm::spawn(move || {
                yield_until(|| iters.load(Ordering::SeqCst) > 0);
                let before = iters.load(Ordering::SeqCst);
                let g = m.lock();
                let waited = iters.load(Ordering::SeqCst) - before;
                stop.store(true, Ordering::SeqCst);
                drop(g);
                waited
            });
            (b.join().unwrap(), a.join().unwrap())
        })
        .unwrap();
    assert!(waited <= 1, "B waited through {waited} of A's critical sections");
    assert!(a_iters < 10_000, "A ran all its iterations: B was starved");
}

#[test]
fn mutex_is_released_when_its_holder_panics() {
    quiet_rt(2)
        .run(|| {
            let m = Arc::new(Mutex::new(0u32));
            let m2 = m.clone();
            let h = smarm::spawn(move || {
                let mut g = m2.lock();
                *g = 1;
                smarm::yield_now();
                panic!("holder fails");
            });
            assert_eq!(h.join(), Err(DownReason::Panic("holder fails".into())));
            assert_eq!(*m.try_lock().expect("the panicking holder's guard unlocked"), 1);
        })
        .unwrap();
    // From a plain thread.
    let m = Arc::new(Mutex::new(0u32));
    let m2 = m.clone();
    assert!(std::thread::spawn(move || {
        let _g = m2.lock();
        panic!("thread holder fails");
    })
    .join()
    .is_err());
    assert!(m.try_lock().is_some());
}

#[test]
fn a_locker_shut_down_while_queued_leaves_the_wait_list() {
    // A plain thread holds the lock; an actor queues for it; the runtime ends, stopping the
    // actor while it waits. The thread's unlock must then find no waiter to hand off to.
    let m = Arc::new(Mutex::new(0u32));
    let guard = m.lock();
    let m2 = m.clone();
    rt(1)
        .run(move || {
            let (queued_tx, queued_rx) = oneshot::<()>();
            drop(smarm::spawn(move || {
                queued_tx.send(()).unwrap();
                *m2.lock() += 1; // parks: the plain thread holds it
                unreachable!("got a lock that is never released while the runtime lives");
            }));
            // One scheduler thread: the root resumes only once the actor has parked in lock.
            queued_rx.recv().unwrap();
        })
        .unwrap();
    drop(guard);
    let g = m.try_lock().expect("the lock was handed to an actor that no longer exists");
    assert_eq!(*g, 0);
}

#[test]
fn a_locker_granted_the_lock_while_being_shut_down_passes_it_on() {
    // The root holds the lock when it returns: its unlock hands the lock to the queued
    // actor, which is then stopped by the shutdown before or after taking it. Either way the
    // lock ends up free.
    for _ in 0..20 {
        let m = Arc::new(Mutex::new(0u32));
        let m2 = m.clone();
        rt(1)
            .run(move || {
                let g = m2.lock();
                let (queued_tx, queued_rx) = oneshot::<()>();
                let m3 = m2.clone();
                drop(smarm::spawn(move || {
                    queued_tx.send(()).unwrap();
                    let mut g = m3.lock();
                    *g += 1;
                    smarm::sleep(Duration::from_secs(3600));
                }));
                queued_rx.recv().unwrap();
                drop(g);
            })
            .unwrap();
        assert!(m.try_lock().is_some(), "the lock stayed held after the runtime ended");
    }
}

#[test]
fn mutex_get_mut_and_into_inner() {
    let mut m = Mutex::new(vec![1]);
    m.get_mut().push(2);
    assert_eq!(*m.lock(), [1, 2]);
    assert_eq!(m.into_inner(), [1, 2]);
    assert_eq!(*Mutex::<u8>::default().lock(), 0);
}

// ---------------------------------------------------------------------------------------
// Barrier

const GENERATIONS: usize = 100;

/// `n` helpers pass the barrier `GENERATIONS` times. Per generation: nobody leaves before
/// everybody arrived, and exactly one is the leader.
fn barrier_generations(mix: Mix, n: usize) {
    let b = Arc::new(Barrier::new(n));
    let arrived: Arc<Vec<AtomicUsize>> = Arc::new((0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect());
    let leaders: Arc<Vec<AtomicUsize>> = Arc::new((0..GENERATIONS).map(|_| AtomicUsize::new(0)).collect());
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let (b, arrived, leaders) = (b.clone(), arrived.clone(), leaders.clone());
            go(mix.nth(i), move || {
                for g in 0..GENERATIONS {
                    arrived[g].fetch_add(1, Ordering::SeqCst);
                    let r = b.wait();
                    let a = arrived[g].load(Ordering::SeqCst);
                    assert_eq!(a, n, "generation {g}: left the barrier with {a} of {n} arrived");
                    if r.is_leader() {
                        leaders[g].fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.join();
    }
    for (g, l) in leaders.iter().enumerate() {
        assert_eq!(l.load(Ordering::SeqCst), 1, "generation {g} had {} leaders", l.load(Ordering::SeqCst));
    }
}

#[test]
fn barrier_elects_exactly_one_leader_per_generation_and_is_reusable() {
    each_mix(|mix| barrier_generations(mix, 6));
}

#[test]
fn barrier_of_many_actors_on_two_threads() {
    rt(2).run(|| barrier_generations(Mix::Actors, 32)).unwrap();
}

#[test]
fn barrier_of_one_returns_at_once_as_leader() {
    for n in [0, 1] {
        let b = Barrier::new(n);
        for _ in 0..3 {
            assert!(b.wait().is_leader());
        }
        rt(1).run(move || assert!(b.wait().is_leader())).unwrap();
    }
}

#[test]
fn barrier_of_any_size_allocates_for_its_waiters_only_as_they_arrive() {
    // Sized for 2^40 and usize::MAX participants: no list of that many waiters is allocated.
    for n in [1usize << 40, usize::MAX] {
        let b = Barrier::new(n);
        assert!(format!("{b:?}").contains(&n.to_string()));
    }
    // More participants than the list is pre-sized for: it grows, and every generation
    // still releases everyone with one leader.
    rt(2).run(|| barrier_generations(Mix::Actors, 200)).unwrap();
}

#[test]
fn a_barrier_participant_shut_down_while_waiting_withdraws_its_arrival() {
    let b = Arc::new(Barrier::new(2));
    let b2 = b.clone();
    rt(1)
        .run(move || {
            let (waiting_tx, waiting_rx) = oneshot::<()>();
            drop(smarm::spawn(move || {
                waiting_tx.send(()).unwrap();
                b2.wait();
                unreachable!("the barrier released with one participant");
            }));
            waiting_rx.recv().unwrap(); // the actor is parked in wait now
        })
        .unwrap();
    // Two fresh participants: if the stopped actor still counted, the first would pass
    // alone (waking an actor that no longer exists) and the second would wait forever.
    let (tx, rx) = mpsc::channel();
    for _ in 0..2 {
        let (b, tx) = (b.clone(), tx.clone());
        std::thread::spawn(move || tx.send(b.wait().is_leader()).unwrap());
    }
    let a = rx.recv_timeout(GUARD).expect("the barrier did not release");
    let c = rx.recv_timeout(GUARD).expect("the barrier released only one participant");
    assert!(a ^ c, "exactly one leader: {a} {c}");
}

// ---------------------------------------------------------------------------------------
// WaitGroup

#[test]
fn wait_group_wait_returns_once_every_task_is_done() {
    each_mix(|mix| {
        let wg = WaitGroup::new();
        let done = Arc::new(AtomicUsize::new(0));
        const N: usize = 8;
        wg.add(N);
        assert_eq!(wg.count(), N);
        let (release_tx, release_rx) = smarm::channel::watch(false);
        let workers: Vec<_> = (0..N)
            .map(|i| {
                let (wg, done, mut release_rx) = (wg.clone(), done.clone(), release_rx.clone());
                go(mix.nth(i), move || {
                    release_rx.changed().unwrap();
                    done.fetch_add(1, Ordering::SeqCst);
                    wg.done();
                })
            })
            .collect();
        // Several waiters, of both kinds, wait for the same group.
        let waiters: Vec<_> = (0..3)
            .map(|i| {
                let (wg, done) = (wg.clone(), done.clone());
                go(mix.nth(i + 1), move || {
                    wg.wait();
                    done.load(Ordering::SeqCst)
                })
            })
            .collect();
        release_tx.send(true);
        wg.wait();
        assert_eq!(done.load(Ordering::SeqCst), N);
        assert_eq!(wg.count(), 0);
        for w in waiters {
            assert_eq!(w.join(), N, "a waiter returned before every task was done");
        }
        for w in workers {
            w.join();
        }
    });
}

#[test]
fn wait_group_add_that_overflows_the_count_panics_with_a_message_and_keeps_the_count() {
    let wg = WaitGroup::new();
    wg.add(usize::MAX - 1);
    let p = catch_unwind(AssertUnwindSafe(|| wg.add(2))).expect_err("add past usize::MAX");
    let msg = p.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("WaitGroup::add") && msg.contains("overflow"), "panic message {msg:?}");
    assert_eq!(wg.count(), usize::MAX - 1, "a failed add leaves the count as it was");
    wg.add(1);
    assert_eq!(wg.count(), usize::MAX);
}

#[test]
fn wait_group_wait_does_not_return_while_the_count_is_above_zero() {
    each_mix(|mix| {
        let wg = WaitGroup::new();
        wg.add(2);
        let returned = Arc::new(AtomicBool::new(false));
        let t = {
            let (wg, returned) = (wg.clone(), returned.clone());
            go(mix.nth(1), move || {
                wg.wait();
                returned.store(true, Ordering::SeqCst);
            })
        };
        wg.done();
        for _ in 0..100 {
            assert!(!returned.load(Ordering::SeqCst), "wait returned with the count at {}", wg.count());
            smarm::yield_now();
        }
        wg.done();
        t.join();
        assert!(returned.load(Ordering::SeqCst));
    });
}

#[test]
fn wait_group_clones_share_one_count() {
    let wg = WaitGroup::new();
    let wg2 = wg.clone();
    wg2.add(3);
    assert_eq!(wg.count(), 3);
    wg.done();
    assert_eq!(wg2.count(), 2);
    assert_eq!(format!("{wg:?}"), "WaitGroup { count: 2 }");
    wg2.done();
    wg2.done();
    assert_eq!(wg.count(), 0);
    assert_eq!(WaitGroup::default().count(), 0);
}

#[test]
fn wait_group_wait_with_a_zero_count_returns_at_once() {
    // A plain thread: returns (does not block).
    WaitGroup::new().wait();
    // An actor on one thread with preemption suppressed: returns without parking or
    // yielding (the other actor does not get to run).
    rt(1)
        .run(|| {
            let wg = WaitGroup::new();
            let ran = Arc::new(AtomicBool::new(false));
            let no_preempt = smarm::NoPreempt::new();
            let other = {
                let ran = ran.clone();
                smarm::spawn(move || ran.store(true, Ordering::SeqCst))
            };
            wg.wait();
            wg.add(1);
            wg.done();
            wg.wait();
            assert!(!ran.load(Ordering::SeqCst), "wait with a zero count parked or yielded");
            drop(no_preempt);
            other.join().unwrap();
        })
        .unwrap();
}

#[test]
fn wait_group_done_more_times_than_add_panics_with_a_message() {
    let msg = |p: Box<dyn std::any::Any + Send>| {
        p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap()
    };
    // Plain thread.
    let wg = WaitGroup::new();
    wg.add(1);
    wg.done();
    let err = catch_unwind(AssertUnwindSafe(|| wg.done())).expect_err("done below zero did not panic");
    assert!(msg(err).contains("more times than add"));
    assert_eq!(wg.count(), 0, "the failed done changed the count");
    // Actor: its join reports the panic.
    quiet_rt(2)
        .run(|| {
            let wg = WaitGroup::new();
            let h = smarm::spawn(move || wg.done());
            match h.join() {
                Err(DownReason::Panic(m)) => assert!(m.contains("more times than add"), "{m}"),
                other => panic!("expected a panic, got {other:?}"),
            }
        })
        .unwrap();
    // The group still works after the failed call.
    wg.add(1);
    std::thread::scope(|s| {
        s.spawn(|| wg.done());
        wg.wait();
    });
}

/// Moves `p` into a new actor or plain thread that waits for `go`, then panics (before it
/// is done) if `fail`, else returns. No `catch_unwind` around it: the actor's or the
/// thread's own unwind drops `p`. Returns whether the task ended in a panic.
fn participant_task(on: On, p: Participant, fail: bool, mut go: smarm::channel::WatchReceiver<bool>) -> Task<bool> {
    let body = move || {
        let _p = p;
        go.changed().unwrap();
        assert!(!fail, "the task fails before it is done");
    };
    let (tx, rx) = oneshot();
    match on {
        On::Actor => {
            let h = smarm::spawn(body);
            drop(smarm::spawn(move || {
                let _ = tx.send(Ok(h.join().is_err()));
            }));
        }
        On::Thread => {
            let t = std::thread::spawn(body);
            drop(std::thread::spawn(move || {
                let _ = tx.send(Ok(t.join().is_err()));
            }));
        }
    }
    Task(rx)
}

#[test]
fn wait_group_participant_that_panics_counts_as_done_and_the_waiter_returns() {
    let body = |mix: Mix| {
        let wg = WaitGroup::new();
        const N: usize = 6;
        let (go_tx, go_rx) = smarm::channel::watch(false);
        let tasks: Vec<_> =
            (0..N).map(|i| participant_task(mix.nth(i), wg.participant(), i % 2 == 0, go_rx.clone())).collect();
        assert_eq!(wg.count(), N);
        go_tx.send(true);
        // Half the tasks panic before they are done: their participants are dropped by the
        // unwind, so the wait returns.
        wg.wait();
        assert_eq!(wg.count(), 0);
        let panicked: Vec<bool> = tasks.into_iter().map(Task::join).collect();
        assert_eq!(panicked, (0..N).map(|i| i % 2 == 0).collect::<Vec<_>>());
    };
    for mix in [Mix::Actors, Mix::Threads, Mix::Mixed] {
        if let Err(e) = quiet_rt(2).run(move || body(mix)) {
            panic!("root on an actor, helpers {mix:?}: {e}");
        }
    }
    // A plain-thread root, plain-thread tasks (their panics print: no runtime to quiet them).
    body(Mix::Threads);
}

#[test]
fn wait_group_participant_of_a_killed_actor_counts_as_done() {
    quiet_rt(2)
        .run(|| {
            let wg = WaitGroup::new();
            let p = wg.participant();
            let h = smarm::spawn(move || {
                let _p = p;
                loop {
                    smarm::sleep(Duration::from_secs(3600));
                }
            });
            smarm::kill(h.pid());
            wg.wait();
            assert_eq!(h.join(), Err(DownReason::Killed));
        })
        .unwrap();
}

#[test]
fn wait_group_participant_clone_adds_a_task_and_drop_or_done_ends_one() {
    let wg = WaitGroup::new();
    let p = wg.participant();
    assert_eq!(wg.count(), 1);
    let q = p.clone();
    assert_eq!(wg.count(), 2);
    assert_eq!(format!("{q:?}"), "Participant { count: 2 }");
    // Participants and add/done share the count.
    wg.add(1);
    assert_eq!(p.wait_group().count(), 3);
    wg.done();
    drop(p);
    assert_eq!(wg.count(), 1);
    let t = std::thread::spawn(move || q.done());
    wg.wait();
    t.join().unwrap();
    assert_eq!(wg.count(), 0);
    // A participant whose task an extra `done` already ended: its drop does not panic.
    let r = wg.participant();
    wg.done();
    drop(r);
    assert_eq!(wg.count(), 0);
}
