//! `smarm::select!`: picks a ready arm, blocks until one is ready, times out (never early),
//! reports closed channels, is fair between busy arms, takes oneshot receivers, and works
//! from plain OS threads as well as from actors.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use smarm::channel::{bounded, channel, oneshot, OneshotReceiver, RecvError};
use smarm::Runtime;

/// Bounds waits that only end if a wake-up works (a lost wake fails instead of hanging).
const GUARD: Duration = Duration::from_secs(20);

/// Runs a wait bounded by [`GUARD`] and fails if it took the whole guard: a timed-out wait
/// re-checks its condition, so a lost wake would otherwise still "succeed", 20 s late.
#[track_caller]
fn woken<R>(wait: impl FnOnce() -> R) -> R {
    let start = Instant::now();
    let r = wait();
    assert!(start.elapsed() < GUARD, "the wait ended only at the {GUARD:?} guard: a wake was lost");
    r
}

/// `select!` rotates its starting arm through a process-wide counter, so the fairness tests
/// run alone: another test's selects would perturb the rotation they measure.
static ROTATION: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    ROTATION.read().unwrap_or_else(|e| e.into_inner())
}

fn exclusive() -> RwLockWriteGuard<'static, ()> {
    ROTATION.write().unwrap_or_else(|e| e.into_inner())
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Actor,
    Thread,
}

fn rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).build().unwrap()
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

/// Runs `body(helpers)` with the root on an actor (helpers: actors, then plain threads) and
/// on a plain thread (helpers: plain threads).
fn each_mode(body: fn(On)) {
    for helpers in [On::Actor, On::Thread] {
        if let Err(e) = rt(2).run(move || body(helpers)) {
            panic!("root on an actor, helpers on {helpers:?}: {e}");
        }
    }
    if let Err(p) = std::thread::spawn(move || body(On::Thread)).join() {
        eprintln!("root on a plain thread, helpers on plain threads:");
        resume_unwind(p);
    }
}

/// Gives other actors / threads a chance to run (never needed for correctness).
fn settle() {
    for _ in 0..200 {
        smarm::yield_now();
    }
}

#[test]
fn select_takes_the_ready_arm() {
    let _g = shared();
    each_mode(|_| {
        let (tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = channel::<&str>();
        tx2.send("two").unwrap();
        for _ in 0..10 {
            // Whatever the rotation, only the second arm is ready.
            let got = smarm::select! {
                recv(rx1) -> m => format!("one {m:?}"),
                recv(rx2) -> m => format!("two {m:?}"),
                timeout(GUARD) => "timeout".to_string(),
            };
            assert_eq!(got, "two Ok(\"two\")");
            tx2.send("two").unwrap();
        }
        let got = smarm::select! {
            recv(rx1) -> _m => 1,
            recv(rx2) -> m => { assert_eq!(m, Ok("two")); 2 },
        };
        assert_eq!(got, 2);
        tx1.send(5).unwrap();
        let got = smarm::select! {
            recv(rx1) -> m => m.unwrap(),
            recv(rx2) -> _m => 0,
        };
        assert_eq!(got, 5);
    });
}

#[test]
fn select_blocks_until_another_sends() {
    let _g = shared();
    each_mode(|helpers| {
        let (_tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = bounded::<u32>(1);
        let (go_tx, go_rx) = oneshot::<()>();
        let t = go(helpers, move || {
            go_rx.recv().unwrap();
            settle();
            tx2.send(42).unwrap();
            tx2 // stays open: the message, not closure, must wake the select
        });
        go_tx.send(()).unwrap();
        let got: Result<_, String> = woken(|| {
            smarm::select! {
                recv(rx1) -> m => Err(format!("arm 1 fired with {m:?}")),
                recv(rx2) -> m => Ok(m),
                timeout(GUARD) => Err("the send never woke the select".into()),
            }
        });
        assert_eq!(got, Ok(Ok(42)));
        let _tx2 = t.join();
    });
}

#[test]
fn select_parked_on_a_single_scheduler_thread_is_woken_by_a_send() {
    let _g = shared();
    // Deterministic: the helper only runs once the root has parked in the select.
    rt(1)
        .run(|| {
            let (tx, rx) = channel::<u32>();
            let (_tx2, rx2) = channel::<u32>();
            let (go_tx, go_rx) = oneshot::<()>();
            let h = smarm::spawn(move || {
                go_rx.recv().unwrap();
                tx.send(7).unwrap();
                tx
            });
            go_tx.send(()).unwrap();
            let got = smarm::select! {
                recv(rx2) -> _m => None,
                recv(rx) -> m => Some(m),
            };
            assert_eq!(got, Some(Ok(7)));
            drop(h.join().unwrap());
        })
        .unwrap();
}

#[test]
fn select_timeout_arm_fires_when_nothing_arrives_never_early() {
    let _g = shared();
    each_mode(|_| {
        let (_tx1, rx1) = channel::<u32>();
        let (_tx2, mut orx) = oneshot::<u32>();
        for ms in [1u64, 5, 20] {
            let d = Duration::from_millis(ms);
            let start = Instant::now();
            let fired = smarm::select! {
                recv(rx1) -> _m => false,
                recv(orx) -> _m => false,
                timeout(d) => true,
            };
            let elapsed = start.elapsed();
            assert!(fired, "an arm fired although nothing was sent");
            assert!(elapsed >= d, "the timeout({d:?}) arm fired after {elapsed:?}");
        }
        // A zero timeout polls.
        let fired = smarm::select! {
            recv(rx1) -> _m => false,
            timeout(Duration::ZERO) => true,
        };
        assert!(fired);
        assert_eq!(orx.try_recv(), Err(smarm::channel::TryRecvError::Empty));
    });
}

#[test]
fn select_reports_a_closed_channel_as_recv_error() {
    let _g = shared();
    each_mode(|helpers| {
        let (_tx1, rx1) = channel::<u32>();
        let (tx2, rx2) = channel::<u32>();
        drop(tx2);
        let got: Result<_, &str> = smarm::select! {
            recv(rx1) -> _m => Err("the open, empty arm fired"),
            recv(rx2) -> m => Ok(m),
            timeout(GUARD) => Err("a closed arm is ready: it should not time out"),
        };
        assert_eq!(got, Ok(Err(RecvError)));

        // Closure while the select is parked wakes it; a queued message comes first.
        let (tx3, rx3) = channel::<u32>();
        tx3.send(1).unwrap();
        let (go_tx, go_rx) = oneshot::<()>();
        let t = go(helpers, move || {
            go_rx.recv().unwrap();
            settle();
            drop(tx3);
        });
        let first = smarm::select! { recv(rx1) -> _m => None, recv(rx3) -> m => Some(m) };
        assert_eq!(first, Some(Ok(1)));
        go_tx.send(()).unwrap();
        let second = woken(|| {
            smarm::select! {
                recv(rx1) -> _m => None,
                recv(rx3) -> m => Some(m),
                timeout(GUARD) => panic!("closure did not wake the select"),
            }
        });
        assert_eq!(second, Some(Err(RecvError)));
        t.join();
    });
}

#[test]
fn select_over_oneshot_receivers() {
    let _g = shared();
    each_mode(|helpers| {
        let (tx_a, rx_a) = oneshot::<&str>();
        let (tx_b, rx_b) = oneshot::<&str>();
        let (_tx_c, rx_c) = channel::<&str>();
        let t = go(helpers, move || {
            settle();
            tx_b.send("b").unwrap();
        });
        let got = woken(|| {
            smarm::select! {
                recv(rx_a) -> m => ("a", m),
                recv(rx_b) -> m => ("b", m),
                recv(rx_c) -> m => ("c", m),
                timeout(GUARD) => panic!("the oneshot send never woke the select"),
            }
        });
        assert_eq!(got, ("b", Ok("b")));
        t.join();
        // `rx_b` has delivered and its sender is gone: it is now ready with RecvError, as
        // is `rx_a` once its sender drops without sending.
        drop(tx_a);
        for _ in 0..2 {
            let r = smarm::select! {
                recv(rx_a) -> m => m,
                recv(rx_c) -> m => m,
            };
            assert_eq!(r, Err(RecvError), "only the oneshot arm, whose sender is gone, is ready");
        }
        let r = smarm::select! {
            recv(rx_b) -> m => m,
            recv(rx_c) -> m => m,
        };
        assert_eq!(r, Err(RecvError), "a oneshot that has delivered is closed");
    });
}

#[test]
fn select_from_a_plain_thread_is_woken_by_an_actor_and_by_a_thread() {
    let _g = shared();
    for helpers in [On::Thread, On::Actor] {
        let (tx, rx) = channel::<u32>();
        let (_tx2, rx2) = oneshot::<u32>();
        let (go_tx, go_rx) = oneshot::<()>();
        let selector = std::thread::spawn(move || {
            go_tx.send(()).unwrap();
            woken(|| {
                smarm::select! {
                    recv(rx2) -> _m => None,
                    recv(rx) -> m => Some(m),
                    timeout(GUARD) => panic!("the plain thread's select was never woken"),
                }
            })
        });
        match helpers {
            On::Thread => {
                go_rx.recv().unwrap();
                settle();
                tx.send(3).unwrap();
            }
            On::Actor => rt(2)
                .run(move || {
                    go_rx.recv().unwrap();
                    settle();
                    tx.send(3).unwrap();
                })
                .unwrap(),
        }
        assert_eq!(selector.join().unwrap(), Some(Ok(3)), "sender on {helpers:?}");
    }
}

#[test]
fn select_never_loses_a_wake_under_ping_pong() {
    let _g = shared();
    // The helper answers every request on one of two channels; each reply races with the
    // select's registration.
    each_mode(|helpers| {
        const ROUNDS: u32 = 5_000;
        let (req_tx, req_rx) = bounded::<u32>(1);
        let (a_tx, a_rx) = channel::<u32>();
        let (b_tx, b_rx) = channel::<u32>();
        let t = go(helpers, move || {
            for i in req_rx.iter() {
                let reply = if i % 2 == 0 { &a_tx } else { &b_tx };
                reply.send(i).unwrap();
            }
        });
        for i in 0..ROUNDS {
            req_tx.send(i).unwrap();
            let got = woken(|| {
                smarm::select! {
                    recv(a_rx) -> m => m.unwrap(),
                    recv(b_rx) -> m => m.unwrap() + 1_000_000,
                    timeout(GUARD) => panic!("round {i}: the reply's wake was lost"),
                }
            });
            let expected = if i % 2 == 0 { i } else { i + 1_000_000 };
            assert_eq!(got, expected);
        }
        drop(req_tx);
        t.join();
    });
}

/// Runs `n` selects over two receivers that are always ready; returns how often each won.
fn count_wins(n: usize, rx1: &smarm::channel::Receiver<u8>, rx2: &smarm::channel::Receiver<u8>) -> [usize; 2] {
    let mut wins = [0; 2];
    for _ in 0..n {
        let arm = smarm::select! {
            recv(*rx1) -> m => { m.unwrap(); 0 },
            recv(*rx2) -> m => { m.unwrap(); 1 },
        };
        wins[arm] += 1;
    }
    wins
}

#[test]
fn select_between_two_always_ready_arms_is_fair() {
    let _g = exclusive();
    for root in [On::Actor, On::Thread] {
        let body = || {
            let (tx1, rx1) = channel::<u8>();
            let (tx2, rx2) = channel::<u8>();
            for _ in 0..1_000 {
                tx1.send(1).unwrap();
                tx2.send(2).unwrap();
            }
            count_wins(1_000, &rx1, &rx2)
        };
        let wins = match root {
            On::Actor => rt(2).run(body).unwrap(),
            On::Thread => std::thread::spawn(body).join().unwrap(),
        };
        assert_eq!(wins[0] + wins[1], 1_000);
        assert!(wins.iter().all(|&w| w >= 200), "root on {root:?}: an always-ready arm starved: wins {wins:?}");
    }
}

#[test]
fn select_between_two_continuously_refilled_arms_is_fair() {
    // Each channel holds one message at all times: whichever arm a select takes is refilled
    // at once (by a helper actor or thread that waits for the consumer's ack), so both
    // arms are ready at every select.
    let _g = exclusive();
    each_mode(|helpers| {
        let (tx1, rx1) = channel::<u8>();
        let (tx2, rx2) = channel::<u8>();
        let (ack_tx, ack_rx) = bounded::<usize>(1);
        tx1.send(0).unwrap();
        tx2.send(1).unwrap();
        let feeder = go(helpers, move || {
            for arm in ack_rx.iter() {
                [&tx1, &tx2][arm].send(arm as u8).unwrap();
            }
        });
        let mut wins = [0usize; 2];
        for _ in 0..1_000 {
            // Wait until the previous refill landed, so both arms are ready.
            while !(smarm::channel::Selectable::is_ready(&rx1) && smarm::channel::Selectable::is_ready(&rx2)) {
                smarm::yield_now();
            }
            let arm = smarm::select! {
                recv(rx1) -> m => { assert_eq!(m, Ok(0)); 0 },
                recv(rx2) -> m => { assert_eq!(m, Ok(1)); 1 },
            };
            wins[arm] += 1;
            ack_tx.send(arm).unwrap();
        }
        drop(ack_tx);
        feeder.join();
        assert!(wins.iter().all(|&w| w >= 200), "an always-ready arm starved: wins {wins:?}");
    });
}

#[test]
fn select_is_fair_for_each_of_two_actors_selecting_in_lock_step() {
    // Two actors on one scheduler thread alternate strictly (select, yield, select, ...). The
    // starting arm comes from one process-wide counter bumped by every select, so one actor
    // sees only even values and the other only odd ones: each always starts at the same arm
    // and, both arms being ready, always takes it. The other arm starves completely.
    let _g = exclusive();
    let per_actor = rt(1)
        .run(|| {
            let actors: Vec<_> = (0..2)
                .map(|_| {
                    smarm::spawn(|| {
                        let (tx1, rx1) = channel::<u8>();
                        let (tx2, rx2) = channel::<u8>();
                        for _ in 0..1_000 {
                            tx1.send(1).unwrap();
                            tx2.send(2).unwrap();
                        }
                        let mut wins = [0usize; 2];
                        for _ in 0..1_000 {
                            let [a, b] = count_wins(1, &rx1, &rx2);
                            wins[0] += a;
                            wins[1] += b;
                            smarm::yield_now();
                        }
                        wins
                    })
                })
                .collect();
            actors.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
        .unwrap();
    for wins in per_actor {
        assert!(wins.iter().all(|&w| w >= 200), "an always-ready arm starved in one actor: wins {wins:?}");
    }
}

#[test]
fn select_recv_signal_arm_takes_a_down_of_a_plain_actor() {
    let _g = shared();
    let got = rt(2)
        .run(|| {
            let (_keep, rx) = channel::<u32>();
            let watcher = smarm::spawn(move || {
                let m = smarm::monitor(smarm::spawn(|| ()).pid());
                let got = smarm::select! {
                    recv(rx) -> v => Err(v),
                    recv_signal() -> s => Ok(s),
                    timeout(GUARD) => Err(Err(RecvError)),
                };
                (m, got)
            });
            watcher.join().unwrap()
        })
        .unwrap();
    match got {
        (m, Ok(smarm::Signal::Down(d))) => {
            assert_eq!(d.monitor, m);
            assert_eq!(d.reason, smarm::DownReason::Normal);
        }
        other => panic!("expected the Down through the recv_signal arm, got {other:?}"),
    }
}

#[test]
fn select_recv_signal_arm_is_woken_by_a_signal_while_parked() {
    let _g = shared();
    let got = rt(2)
        .run(|| {
            let (_keep, rx) = channel::<u32>();
            let (go_tx, go_rx) = oneshot::<()>();
            let target = smarm::spawn(move || go_rx.recv().unwrap());
            let t = target.pid();
            let watcher = smarm::spawn(move || {
                smarm::monitor(t);
                smarm::select! {
                    recv(rx) -> _v => None,
                    recv_signal() -> s => Some(s),
                }
            });
            // Until the watcher parks in the select (so it has monitored the target): one
            // yield was not always enough at two threads, where the other thread may have
            // stolen the watcher and not run it yet; the target then ended first (NoProc).
            // A watcher that ended instead (a bug) stops the wait: the join below reports it.
            while smarm::info::process_info(watcher.pid()).is_some_and(|p| p.parked_on().is_none()) {
                smarm::yield_now();
            }
            go_tx.send(()).unwrap();
            woken(|| watcher.join().unwrap())
        })
        .unwrap();
    assert!(matches!(got, Some(smarm::Signal::Down(ref d)) if d.reason == smarm::DownReason::Normal), "{got:?}");
}

#[test]
fn select_mailbox_arm_takes_the_next_envelope_and_wakes_on_a_send() {
    let _g = shared();
    let got = rt(2)
        .run(|| {
            let (_keep, rx) = channel::<&str>();
            let (res_tx, res_rx) = oneshot();
            let (parked_tx, parked_rx) = oneshot::<()>();
            let a = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
                parked_tx.send(()).unwrap();
                let first = smarm::select! {
                    recv(mb) -> e => e.into_msg(),
                    recv(rx) -> _s => None,
                };
                let second = smarm::select! {
                    recv(rx) -> _s => None,
                    recv(mb) -> e => e.into_msg(),
                    timeout(Duration::ZERO) => Some(0),
                };
                res_tx.send((first, second)).unwrap();
            });
            parked_rx.recv().unwrap();
            smarm::yield_now();
            a.send(5);
            woken(|| res_rx.recv()).unwrap()
        })
        .unwrap();
    assert_eq!(got, (Some(5), Some(0)));
}
