//! Timers: `send_after` delivers once and never early, `cancel_timer` stops it and reports
//! the time left, both work from plain threads, `sleep` is never early, and an idle runtime
//! waiting on a timer does not burn CPU.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, RwLock, RwLockReadGuard};
use std::time::{Duration, Instant};

use smarm::channel::{bounded, channel, RecvError, RecvTimeoutError};
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

/// The CPU-usage test measures the whole process, so it runs alone (write lock); every
/// other test takes the read lock.
static CPU_METER: RwLock<()> = RwLock::new(());

fn shared() -> RwLockReadGuard<'static, ()> {
    CPU_METER.read().unwrap_or_else(|e| e.into_inner())
}

fn rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).build().unwrap()
}

/// Runs `body` on a root actor (two scheduler threads) and on a plain thread.
fn each_root(body: fn()) {
    if let Err(e) = rt(2).run(body) {
        panic!("root on an actor: {e}");
    }
    if let Err(p) = std::thread::spawn(body).join() {
        eprintln!("root on a plain thread:");
        std::panic::resume_unwind(p);
    }
}

const MS: Duration = Duration::from_millis(1);

#[test]
fn send_after_delivers_exactly_once_and_never_before_the_delay() {
    let _g = shared();
    each_root(|| {
        let (tx, rx) = channel::<&str>();
        let d = 20 * MS;
        let start = Instant::now();
        let t = smarm::send_after(d, &tx, "tick");
        assert_eq!(woken(|| rx.recv_timeout(GUARD)), Ok("tick"));
        let elapsed = start.elapsed();
        assert!(elapsed >= d, "delivered after {elapsed:?}, before the delay {d:?}");
        // Once: nothing else arrives.
        assert_eq!(rx.recv_timeout(30 * MS), Err(RecvTimeoutError::Timeout));
        assert_eq!(smarm::cancel_timer(t), None, "cancel after firing");
        // The timer released its clone of the sender.
        drop(tx);
        assert_eq!(rx.recv(), Err(RecvError));
    });
}

#[test]
fn send_after_timers_each_fire_no_earlier_than_their_delay() {
    let _g = shared();
    each_root(|| {
        let (tx, rx) = channel::<u32>();
        let start = Instant::now();
        let delays = [30u32, 5, 20, 1, 10];
        let timers: Vec<_> = delays.iter().map(|&ms| smarm::send_after(ms * MS, &tx, ms)).collect();
        drop(tx);
        let mut got = Vec::new();
        for ms in rx.iter() {
            let elapsed = start.elapsed();
            assert!(elapsed >= ms * MS, "the {ms} ms timer fired after {elapsed:?}");
            got.push(ms);
        }
        // From a plain thread each timer has its own helper thread, so under load two due
        // timers may deliver in either order; only the set is checked here.
        got.sort_unstable();
        assert_eq!(got, [1, 5, 10, 20, 30]);
        for t in timers {
            assert_eq!(smarm::cancel_timer(t), None);
        }
    });
}

#[test]
fn runtime_timers_with_distinct_deadlines_fire_in_deadline_order() {
    // One scheduler thread: with two, two threads firing due timers at the same moment may
    // run their sends in either order. Deadlines are milliseconds apart (the order of timers
    // due at the same instant is not specified).
    let _g = shared();
    rt(1)
        .run(|| {
            let (tx, rx) = channel::<u32>();
            let delays = [30u32, 5, 20, 1, 10, 15];
            let _timers: Vec<_> = delays.iter().map(|&ms| smarm::send_after(ms * MS, &tx, ms)).collect();
            drop(tx);
            let got: Vec<u32> = rx.iter().collect();
            assert_eq!(got, [1, 5, 10, 15, 20, 30]);
        })
        .unwrap();
}

#[test]
fn cancel_timer_before_it_fires_returns_the_time_left_and_nothing_arrives() {
    let _g = shared();
    each_root(|| {
        let (tx, rx) = channel::<u32>();
        let d = 100 * MS;
        let t = smarm::send_after(d, &tx, 1);
        let keep = smarm::send_after(d, &tx, 2); // a sibling timer is not affected
        let left = smarm::cancel_timer(t).expect("a pending timer cancels");
        assert!(left <= d, "time left {left:?} exceeds the delay {d:?}");
        assert!(!left.is_zero(), "cancelled long before the deadline, yet no time left");
        assert_eq!(woken(|| rx.recv_timeout(GUARD)), Ok(2));
        assert_eq!(rx.recv_timeout(d), Err(RecvTimeoutError::Timeout), "the cancelled timer fired");
        assert_eq!(smarm::cancel_timer(keep), None);
        // The cancelled timer dropped its clone of the sender.
        drop(tx);
        assert_eq!(rx.recv(), Err(RecvError));
    });
}

#[test]
fn cancel_timer_returns_the_time_left_to_the_deadline_not_the_delay() {
    let _g = shared();
    each_root(|| {
        let (tx, _rx) = channel::<u32>();
        let d = 10_000 * MS;
        // The deadline is set between `a` and `b`; the cancel reads the clock between `s`
        // and `e`. So the time left lies in [a + d - e, b + d - s], whatever the load.
        let a = Instant::now();
        let t = smarm::send_after(d, &tx, 1);
        let b = Instant::now();
        smarm::sleep(30 * MS);
        let s = Instant::now();
        let left = smarm::cancel_timer(t).expect("a pending timer cancels");
        let e = Instant::now();
        let (lo, hi) = ((a + d) - e, (b + d) - s);
        assert!(hi < d, "the sleep took no time?");
        assert!(lo <= left && left <= hi, "time left {left:?} outside [{lo:?}, {hi:?}] (delay {d:?})");
    });
}

/// `Duration::MAX` ("wait forever", as std's `recv_timeout` accepts it) anywhere a timeout
/// goes: it must wait, not panic on `Instant + Duration` overflow.
#[test]
fn duration_max_timeouts_wait_instead_of_overflowing() {
    let _g = shared();
    rt(1)
        .run(|| {
            let max = Duration::MAX;
            // Channel receive and select: a later send ends them.
            let (tx, rx) = channel::<u32>();
            let feeder = smarm::spawn(move || {
                for i in 0..2 {
                    smarm::yield_now();
                    tx.send(i).unwrap();
                }
            });
            assert_eq!(rx.recv_timeout(max), Ok(0));
            let got = smarm::select! { recv(rx) -> m => m.ok(), timeout(max) => None };
            assert_eq!(got, Some(1));
            feeder.join().unwrap();
            // A timer that never fires, cancelled with (about) a century left.
            let (tx, _rx) = channel::<u32>();
            let t = smarm::send_after(max, &tx, 1);
            assert!(smarm::cancel_timer(t).is_some_and(|left| left > Duration::from_secs(99 * 365 * 24 * 3600)));
            // A selective receive woken by a message it does not take, then by its match
            // (the second park turns the limit into a deadline).
            let addr = smarm::spawn_actor(|mb: smarm::Mailbox<u32>| {
                let got = mb.recv_match_timeout(Duration::MAX, |e| matches!(e, smarm::Envelope::Msg(2)));
                assert_eq!(got, Ok(smarm::Envelope::Msg(2)));
            });
            smarm::monitor(addr.pid());
            addr.send(1);
            smarm::yield_now();
            addr.send(2);
            // A signal wait: the Down of the receiver above.
            match smarm::recv_signal_timeout(max) {
                Ok(smarm::Signal::Down(d)) => assert_eq!(d.reason, smarm::DownReason::Normal),
                other => panic!("expected the Down, got {other:?}"),
            }
            // A sleep that only a kill ends.
            let sleeper = smarm::spawn(move || smarm::sleep(max));
            smarm::yield_now();
            smarm::kill(sleeper.pid());
            assert_eq!(sleeper.join(), Err(smarm::DownReason::Killed));
        })
        .unwrap();
    // A plain thread's oneshot wait.
    let (tx, mut rx) = smarm::channel::oneshot::<u32>();
    let t = std::thread::spawn(move || rx.recv_timeout(Duration::MAX));
    tx.send(5).unwrap();
    assert_eq!(t.join().unwrap(), Ok(5));
}

#[test]
fn send_after_from_a_plain_thread_reaches_an_actor() {
    let _g = shared();
    let (tx, rx) = channel::<u32>();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let start = Instant::now();
    let feeder = std::thread::spawn(move || {
        ready_rx.recv().unwrap();
        let cancelled = smarm::send_after(5_000 * MS, &tx, 1);
        let t = smarm::send_after(15 * MS, &tx, 2);
        assert!(smarm::cancel_timer(cancelled).is_some());
        t
    });
    let t = rt(2)
        .run(move || {
            ready_tx.send(()).unwrap();
            let got = woken(|| rx.recv_timeout(GUARD));
            let elapsed = start.elapsed();
            assert_eq!(got, Ok(2));
            assert!(elapsed >= 15 * MS, "delivered after {elapsed:?}");
            // The cancelled timer neither delivers nor keeps the channel open.
            assert_eq!(woken(|| rx.recv_timeout(GUARD)), Err(RecvTimeoutError::Disconnected));
        })
        .map(|()| feeder.join().unwrap())
        .unwrap();
    assert_eq!(smarm::cancel_timer(t), None);
}

#[test]
fn send_after_to_a_gone_receiver_is_harmless() {
    let _g = shared();
    each_root(|| {
        let (tx, rx) = channel::<u32>();
        let _t = smarm::send_after(MS, &tx, 1);
        drop(rx);
        smarm::sleep(10 * MS);
        // The runtime (or the helper thread) survived; timers still work.
        let (tx2, rx2) = channel::<u32>();
        let _t2 = smarm::send_after(MS, &tx2, 2);
        assert_eq!(woken(|| rx2.recv_timeout(GUARD)), Ok(2));
        drop(tx);
    });
}

#[test]
fn a_timer_of_an_ended_runtime_is_dropped_with_it_and_cannot_be_cancelled() {
    let _g = shared();
    let (tx, rx) = channel::<u32>();
    let t = rt(2).run(move || smarm::send_after(Duration::from_secs(3600), &tx, 1)).unwrap();
    // The runtime is gone: its timer and the sender clone it held are too.
    assert_eq!(rx.recv_timeout(GUARD), Err(RecvTimeoutError::Disconnected));
    assert_eq!(smarm::cancel_timer(t), None);
}

#[test]
fn send_after_into_a_full_bounded_channel_does_not_block_the_scheduler() {
    // The timer's action runs `Sender::send` on the scheduler thread (outside any actor). On
    // a full bounded channel that send parks the *OS thread* (Waiter::Thread) until the
    // receiver takes a message; with one scheduler thread the receiving actor can then never
    // run: deadlock. The runtime runs on a helper thread so the test fails instead of hanging.
    let _g = shared();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let r = rt(1).run(|| {
            let (tx, rx) = bounded::<u32>(1);
            tx.send(1).unwrap();
            let _t = smarm::send_after(MS, &tx, 2);
            smarm::sleep(20 * MS); // the timer fires meanwhile
            let a = rx.recv_timeout(GUARD);
            let b = rx.recv_timeout(GUARD);
            (a, b)
        });
        let _ = done_tx.send(r.map_err(|e| e.to_string()));
    });
    let r = done_rx.recv_timeout(GUARD).expect("the runtime deadlocked: the timer's send blocked its only thread");
    assert_eq!(r, Ok((Ok(1), Ok(2))));
}

#[test]
fn sleep_is_never_early() {
    let _g = shared();
    each_root(|| {
        for us in [1u64, 100, 1_000, 3_000, 10_000] {
            let d = Duration::from_micros(us);
            let start = Instant::now();
            smarm::sleep(d);
            let elapsed = start.elapsed();
            assert!(elapsed >= d, "sleep({d:?}) returned after {elapsed:?}");
        }
        smarm::sleep(Duration::ZERO);
    });
}

#[test]
fn many_sleeping_actors_each_sleep_at_least_their_duration() {
    let _g = shared();
    rt(2)
        .run(|| {
            let early = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..200u64)
                .map(|i| {
                    let early = early.clone();
                    smarm::spawn(move || {
                        let d = Duration::from_micros(100 + (i * 7_919) % 8_000);
                        let start = Instant::now();
                        smarm::sleep(d);
                        if start.elapsed() < d {
                            early.fetch_add(1, Ordering::SeqCst);
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            assert_eq!(early.load(Ordering::SeqCst), 0, "some sleeps returned early");
        })
        .unwrap();
}

/// User + system CPU time of the whole process.
fn process_cpu_time() -> Duration {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable rusage; getrusage only writes it.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, ru.as_mut_ptr()) };
    assert_eq!(rc, 0, "getrusage failed");
    // SAFETY: getrusage succeeded, so it initialised the struct (which was zeroed anyway).
    let ru = unsafe { ru.assume_init() };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

#[test]
fn an_idle_runtime_waiting_on_timers_does_not_spin() {
    // A resource assertion, not a synchronisation: the process must stay (nearly) idle while
    // the root sleeps and a long timer is pending. The bound is generous: a busy-polling
    // thread would use the full 300 ms.
    let _g = CPU_METER.write().unwrap_or_else(|e| e.into_inner());
    for threads in [1, 2] {
        let used = rt(threads)
            .run(|| {
                let (tx, _rx) = channel::<()>();
                let long = smarm::send_after(Duration::from_secs(3600), &tx, ());
                smarm::sleep(5 * MS); // let the other scheduler threads settle
                let before = process_cpu_time();
                smarm::sleep(300 * MS);
                let used = process_cpu_time() - before;
                assert!(smarm::cancel_timer(long).is_some());
                used
            })
            .unwrap();
        eprintln!("threads({threads}): {used:?} of CPU during a 300 ms sleep");
        assert!(used < 30 * MS, "threads({threads}): {used:?} of CPU used during a 300 ms idle sleep");
    }
}

/// Timed waits answered promptly never put anything on the timer wheel (their timeouts are
/// lazy), and one that did time out leaves nothing behind either.
#[test]
fn prompt_timed_waits_leave_no_timer_behind() {
    let _g = shared();
    rt(1)
        .run(|| {
            let diag = smarm::__private::Diagnostics::current().unwrap();
            let (tx, rx) = channel::<u32>();
            let (back_tx, back_rx) = channel::<u32>();
            let echo = smarm::spawn(move || {
                while let Ok(x) = rx.recv_timeout(Duration::from_secs(30)) {
                    back_tx.send(x).unwrap();
                }
            });
            for i in 0..1_000 {
                tx.send(i).unwrap();
                assert_eq!(back_rx.recv_timeout(Duration::from_secs(30)), Ok(i));
                assert_eq!(diag.pending_timers(), 0, "a prompt reply left a timer on the wheel");
            }
            let (_keep, silent) = channel::<u32>();
            let start = Instant::now();
            assert_eq!(silent.recv_timeout(5 * MS), Err(RecvTimeoutError::Timeout));
            assert!(start.elapsed() >= 5 * MS, "a lazy timeout fired early");
            drop(tx);
            echo.join().unwrap();
            assert_eq!(diag.pending_timers(), 0, "an ended wait left its timer on the wheel");
        })
        .unwrap();
}

/// A lazily armed timeout is armed and fires even when the thread never idles: another
/// actor keeps yielding on the only scheduler thread until the timed wait has ended.
#[test]
fn a_timeout_fires_while_other_actors_keep_the_thread_busy() {
    let _g = shared();
    rt(1)
        .run(|| {
            let done = Arc::new(AtomicUsize::new(0));
            let busy = {
                let done = done.clone();
                smarm::spawn(move || {
                    while done.load(Ordering::SeqCst) == 0 {
                        smarm::yield_now();
                    }
                })
            };
            let (_keep, silent) = channel::<u32>();
            let start = Instant::now();
            assert_eq!(woken(|| silent.recv_timeout(10 * MS)), Err(RecvTimeoutError::Timeout));
            assert!(start.elapsed() >= 10 * MS, "a lazy timeout fired early");
            done.store(1, Ordering::SeqCst);
            busy.join().unwrap();
        })
        .unwrap();
}

/// Hundreds of timed waits parked on one thread at once: none fires early, none is lost,
/// and the waits that are answered return their message.
#[test]
fn many_timed_waits_on_one_thread_each_end_right() {
    let _g = shared();
    rt(1)
        .run(|| {
            let d = 30 * MS;
            let mut silent_keep = Vec::new();
            let mut handles = Vec::new();
            let mut answer = Vec::new();
            for i in 0..700u32 {
                let (tx, rx) = channel::<u32>();
                let answered = i % 3 == 0;
                // Answered waits get a timeout they cannot reach, so a slow machine (or a
                // sanitizer build) cannot turn them into timeouts before the answer comes.
                let limit = if answered { GUARD } else { d };
                handles.push(smarm::spawn(move || {
                    let start = Instant::now();
                    let got = rx.recv_timeout(limit);
                    (answered, got, start.elapsed())
                }));
                if answered {
                    answer.push((i, tx));
                } else {
                    silent_keep.push(tx);
                }
            }
            // Let every waiter park (one thread: each runs until its park), then answer a third.
            smarm::yield_now();
            for (i, tx) in &answer {
                tx.send(*i).unwrap();
            }
            for (i, h) in handles.into_iter().enumerate() {
                let (answered, got, waited) = woken(|| h.join().unwrap());
                if answered {
                    assert_eq!(got, Ok(i as u32));
                } else {
                    assert_eq!(got, Err(RecvTimeoutError::Timeout), "waiter {i}");
                    assert!(waited >= d, "waiter {i} timed out after {waited:?}, before {d:?}");
                }
            }
            drop(silent_keep);
        })
        .unwrap();
}

/// `send_after` takes an actor's `Addr` as it takes a channel `Sender`, from an actor and
/// from a plain thread (where it used to panic as `send_after_addr`): the process's timer
/// thread delivers it, and the actor gets every message.
#[test]
fn send_after_to_an_addr_works_from_an_actor_and_from_a_plain_thread() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let handle = rt.handle();
    let got = rt
        .run(move || {
            let (tx, rx) = channel::<Vec<&'static str>>();
            let addr = smarm::spawn_actor(move |mb: smarm::Mailbox<&'static str>| {
                let mut seen = Vec::new();
                while seen.len() < 2 {
                    if let smarm::Envelope::Msg(m) = mb.recv() {
                        seen.push(m);
                    }
                }
                seen.sort();
                tx.send(seen).unwrap();
            });
            smarm::send_after(Duration::from_millis(1), &addr, "from an actor");
            let pid = addr.pid();
            std::thread::spawn(move || {
                let addr = handle.addr_of::<&'static str>(pid).unwrap();
                smarm::send_after(Duration::from_millis(1), &addr, "from a thread");
            })
            .join()
            .unwrap();
            rx.recv().unwrap()
        })
        .unwrap();
    assert_eq!(got, ["from a thread", "from an actor"]);
}
