//! Channels (unbounded and bounded MPSC, oneshot, watch): per-sender order, closure, values
//! handed back, blocking and wake-ups, timeouts and iteration, from actors, from plain OS
//! threads (which the API blocks), and mixed.
//!
//! Most tests run their body in four modes (see [`each_mode`]): the root is an actor or a
//! plain thread, and its helpers are actors or plain threads. Helpers of a plain-thread root
//! that must be actors run on a shared background runtime ([`host`]).

use std::any::Any;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use smarm::channel::{
    bounded, channel, oneshot, watch, OneshotReceiver, Receiver, RecvError, RecvTimeoutError, SendError, Sender,
    TryRecvError, TrySendError,
};
use smarm::Runtime;

/// Bounds waits that only end if a wake-up works, so a lost wake fails the test instead of
/// hanging it. Never reached when the behaviour holds.
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

// ---------------------------------------------------------------------------------------
// Harness: actors and plain threads interchangeably

/// Where a piece of test code runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    Actor,
    Thread,
}

type Job = Box<dyn FnOnce() + Send>;

/// A runtime on a background thread that runs actors on behalf of plain-thread roots. Lives
/// as long as the test process.
fn host() -> &'static Sender<Job> {
    static HOST: OnceLock<Sender<Job>> = OnceLock::new();
    HOST.get_or_init(|| {
        let (tx, rx) = channel::<Job>();
        std::thread::Builder::new()
            .name("actor-host".into())
            .spawn(move || {
                rt(2)
                    .run(move || {
                        for job in rx.iter() {
                            drop(smarm::spawn(job));
                        }
                    })
                    .unwrap();
            })
            .unwrap();
        tx
    })
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
            Ok(Err(payload)) => resume_unwind(payload),
            Err(RecvError) => panic!("a helper ended without a result"),
        }
    }
}

/// Runs `f` as a helper: an actor (on the caller's runtime, or on the host runtime when the
/// caller is a plain thread) or a new plain thread.
fn go<T: Send + 'static>(on: On, f: impl FnOnce() -> T + Send + 'static) -> Task<T> {
    let (tx, rx) = oneshot();
    let job = move || {
        let _ = tx.send(catch_unwind(AssertUnwindSafe(f)));
    };
    match on {
        On::Thread => drop(std::thread::spawn(job)),
        On::Actor if smarm::try_current_pid().is_some() => drop(smarm::spawn(job)),
        On::Actor => {
            if host().send(Box::new(job)).is_err() {
                panic!("the actor host is gone");
            }
        }
    }
    Task(rx)
}

fn panic_msg(p: Box<dyn Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic>".into())
}

/// Runs `body` on a root of kind `root` and re-raises its failure, naming the mode.
fn run_on<T: Send + 'static>(root: On, what: &str, body: impl FnOnce() -> T + Send + 'static) -> T {
    let outcome = match root {
        On::Actor => rt(2).run(body).map_err(|e| e.to_string()),
        On::Thread => std::thread::spawn(body).join().map_err(panic_msg),
    };
    outcome.unwrap_or_else(|msg| panic!("{what}: {msg}"))
}

/// Runs `body(helpers)` four ways: (root, helpers) in {actor, thread} x {actor, thread}.
fn each_mode(body: fn(On)) {
    for (root, helpers) in
        [(On::Actor, On::Actor), (On::Thread, On::Thread), (On::Actor, On::Thread), (On::Thread, On::Actor)]
    {
        run_on(root, &format!("root on {root:?}, helpers on {helpers:?}"), move || body(helpers));
    }
}

/// Runs `body` on a root actor and on a plain thread.
fn each_root(body: fn()) {
    for root in [On::Actor, On::Thread] {
        run_on(root, &format!("root on {root:?}"), body);
    }
}

/// Gives other actors / threads a chance to run (not a synchronisation: every test is
/// correct whatever happens meanwhile; this only makes the interesting interleaving likely).
fn settle() {
    for _ in 0..200 {
        smarm::yield_now();
    }
}

fn unbounded_or_bounded<T: Send>(cap: Option<usize>) -> (Sender<T>, Receiver<T>) {
    match cap {
        None => channel(),
        Some(n) => bounded(n),
    }
}

/// A message that counts its drops, per id.
struct Counted {
    id: usize,
    drops: Arc<Vec<AtomicUsize>>,
}

impl std::fmt::Debug for Counted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Counted({})", self.id)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

fn drop_counters(n: usize) -> Arc<Vec<AtomicUsize>> {
    Arc::new((0..n).map(|_| AtomicUsize::new(0)).collect())
}

#[track_caller]
fn assert_each_dropped_once(drops: &[AtomicUsize], ids: std::ops::Range<usize>) {
    for id in ids {
        let n = drops[id].load(Ordering::SeqCst);
        assert_eq!(n, 1, "message {id} was dropped {n} times");
    }
}

// ---------------------------------------------------------------------------------------
// MPSC: order, loss, duplication

const PRODUCERS: usize = 8;
const PER_PRODUCER: u32 = 10_000;

/// `producers` helpers each send `(id, 0..per)`; the caller checks that every producer's
/// sequence arrives complete, in order, exactly once, and that the stream then closes.
fn check_per_sender_fifo(helpers: On, cap: Option<usize>, producers: usize, per: u32) {
    let (tx, rx) = unbounded_or_bounded::<(usize, u32)>(cap);
    let tasks: Vec<_> = (0..producers)
        .map(|id| {
            let tx = tx.clone();
            go(helpers, move || {
                for seq in 0..per {
                    tx.send((id, seq)).unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let mut next = vec![0u32; producers];
    let mut total = 0u64;
    for (id, seq) in rx.iter() {
        assert_eq!(
            seq, next[id],
            "producer {id}: expected seq {} but got {seq} (reordered, lost or duplicated)",
            next[id]
        );
        next[id] += 1;
        total += 1;
    }
    // `iter` ended: every sender is gone and the queue is drained.
    assert_eq!(total, producers as u64 * u64::from(per));
    assert!(next.iter().all(|&n| n == per), "{next:?}");
    assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    for t in tasks {
        t.join();
    }
}

#[test]
fn unbounded_delivers_every_senders_messages_in_order_exactly_once() {
    each_mode(|helpers| check_per_sender_fifo(helpers, None, PRODUCERS, PER_PRODUCER));
}

#[test]
fn bounded_under_contention_delivers_every_senders_messages_in_order_exactly_once() {
    // A tiny capacity keeps senders parking and being woken by the receiver.
    each_mode(|helpers| check_per_sender_fifo(helpers, Some(2), 4, 5_000));
}

// ---------------------------------------------------------------------------------------
// Closure

#[test]
fn recv_drains_queued_messages_after_the_last_sender_drops_then_reports_recv_error() {
    each_mode(|helpers| {
        for cap in [None, Some(8)] {
            let (tx, rx) = unbounded_or_bounded::<u32>(cap);
            assert_eq!(rx.try_recv(), Err(TryRecvError::Empty), "a fresh channel with live senders is Empty");
            let tx2 = tx.clone();
            tx.send(1).unwrap();
            // The clone sends from a helper and is dropped there.
            go(helpers, move || {
                tx2.send(2).unwrap();
                tx2.send(3).unwrap();
            })
            .join();
            assert_eq!(rx.try_recv(), Ok(1));
            assert_eq!(rx.try_recv(), Ok(2));
            drop(tx);
            // Closed but not empty: what is queued still arrives.
            assert_eq!(rx.recv(), Ok(3));
            assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
            assert_eq!(rx.recv(), Err(RecvError));
            assert_eq!(rx.recv_timeout(GUARD), Err(RecvTimeoutError::Disconnected));
            assert_eq!(rx.recv_deadline(Instant::now() + GUARD), Err(RecvTimeoutError::Disconnected));
            assert_eq!(rx.iter().next(), None);
        }
    });
}

#[test]
fn dropping_the_last_sender_wakes_a_parked_receiver_but_dropping_a_clone_does_not() {
    each_mode(|helpers| {
        let (tx_a, rx) = channel::<u32>();
        let tx_b = tx_a.clone();
        let (started_tx, started_rx) = oneshot();
        let t = go(helpers, move || {
            started_tx.send(()).unwrap();
            let first = woken(|| rx.recv_timeout(GUARD));
            let second = woken(|| rx.recv_timeout(GUARD));
            (first, second)
        });
        started_rx.recv().unwrap();
        settle();
        // One sender left: the receiver must keep waiting, not report closure.
        drop(tx_a);
        settle();
        tx_b.send(7).unwrap();
        settle();
        drop(tx_b);
        assert_eq!(t.join(), (Ok(7), Err(RecvTimeoutError::Disconnected)));
    });
}

#[test]
fn send_hands_the_value_back_once_the_receiver_is_gone() {
    each_mode(|helpers| {
        for cap in [None, Some(2)] {
            let (tx, rx) = unbounded_or_bounded::<String>(cap);
            assert!(!tx.is_closed());
            go(helpers, move || drop(rx)).join();
            assert!(tx.is_closed());
            match tx.send("kept".to_string()) {
                Err(SendError(v)) => assert_eq!(v, "kept"),
                Ok(()) => panic!("send succeeded with the receiver gone"),
            }
            match tx.try_send("again".to_string()) {
                Err(TrySendError::Disconnected(v)) => assert_eq!(v, "again"),
                other => panic!("expected Disconnected, got {other:?}"),
            }
            // The clone of a sender sees the same.
            assert_eq!(tx.clone().send("clone".to_string()).unwrap_err().0, "clone");
        }
    });
}

#[test]
fn a_sender_parked_on_a_full_channel_gets_its_value_back_when_the_receiver_drops() {
    each_mode(|helpers| {
        let (tx, rx) = bounded::<String>(1);
        tx.send("fills".into()).unwrap();
        let (started_tx, started_rx) = oneshot();
        let t = go(helpers, move || {
            started_tx.send(()).unwrap();
            tx.send("blocked".into())
        });
        started_rx.recv().unwrap();
        settle();
        drop(rx);
        match t.join() {
            Err(SendError(v)) => assert_eq!(v, "blocked"),
            Ok(()) => panic!("the parked send succeeded although the receiver was dropped"),
        }
    });
}

#[test]
fn messages_queued_when_the_receiver_drops_are_dropped_exactly_once() {
    each_mode(|helpers| {
        for cap in [None, Some(16)] {
            const N: usize = 10;
            let drops = drop_counters(N + 1);
            let (tx, rx) = unbounded_or_bounded::<Counted>(cap);
            for id in 0..N {
                tx.send(Counted { id, drops: drops.clone() }).unwrap();
            }
            go(helpers, move || {
                for _ in 0..3 {
                    drop(rx.recv().unwrap());
                }
                // `rx` drops here with seven messages queued and a sender alive.
            })
            .join();
            assert_each_dropped_once(&drops, 0..N);
            let back = tx.send(Counted { id: N, drops: drops.clone() }).unwrap_err().0;
            assert_eq!(drops[N].load(Ordering::SeqCst), 0, "the handed-back value was dropped");
            drop(back);
            drop(tx);
            assert_each_dropped_once(&drops, 0..N + 1);
        }
    });
}

/// A message that holds a sender of its own channel.
struct SelfSender(#[allow(dead_code)] Option<Sender<SelfSender>>);

#[test]
fn queued_messages_are_dropped_outside_the_channel_lock() {
    // Dropping the queued message drops a Sender of the same channel, which locks it: under
    // the lock this would trip the lock-order check (or deadlock).
    each_root(|| {
        let (tx, rx) = channel::<SelfSender>();
        tx.send(SelfSender(Some(tx.clone()))).unwrap();
        drop(rx);
        assert!(tx.is_closed());
    });
}

// ---------------------------------------------------------------------------------------
// Bounded capacity

/// The helper sends `CAP + 1` messages on `bounded(CAP)`, then sets a flag; the caller checks
/// the flag stays clear until it receives.
fn check_bounded_send_parks_while_full(helpers: On) {
    const CAP: usize = 3;
    let (tx, rx) = bounded::<usize>(CAP);
    let probe = tx.clone();
    let sent_all = Arc::new(AtomicBool::new(false));
    let (filled_tx, filled_rx) = oneshot();
    let t = go(helpers, {
        let sent_all = sent_all.clone();
        move || {
            for i in 0..CAP {
                tx.send(i).unwrap();
            }
            filled_tx.send(()).unwrap();
            tx.send(CAP).unwrap(); // full: parks until the receiver takes one
            sent_all.store(true, Ordering::SeqCst);
        }
    });
    filled_rx.recv().unwrap();
    for _ in 0..50 {
        assert!(!sent_all.load(Ordering::SeqCst), "a send on a full bounded channel completed before any receive");
        smarm::yield_now();
    }
    match probe.try_send(99) {
        Err(TrySendError::Full(v)) => assert_eq!(v, 99),
        other => panic!("try_send on a full channel: {other:?}"),
    }
    assert!(!sent_all.load(Ordering::SeqCst));
    assert_eq!(rx.recv(), Ok(0));
    for i in 1..=CAP {
        assert_eq!(woken(|| rx.recv_timeout(GUARD)), Ok(i));
    }
    t.join();
    assert!(sent_all.load(Ordering::SeqCst));
    drop(probe);
    assert_eq!(rx.recv(), Err(RecvError));
}

#[test]
fn bounded_send_parks_while_full_and_resumes_when_the_receiver_takes_one() {
    each_mode(check_bounded_send_parks_while_full);
}

#[test]
fn bounded_send_parks_while_full_on_a_single_scheduler_thread() {
    // Deterministic: on one scheduler thread the root only runs again once the sender actor
    // has switched out, which it only does by parking in its (n+1)-th send.
    rt(1).run(|| check_bounded_send_parks_while_full(On::Actor)).unwrap();
}

#[test]
fn try_send_on_a_full_bounded_channel_hands_the_value_back() {
    each_root(|| {
        let (tx, rx) = bounded::<String>(2);
        tx.try_send("a".into()).unwrap();
        tx.try_send("b".into()).unwrap();
        match tx.try_send("c".into()) {
            Err(TrySendError::Full(v)) => assert_eq!(v, "c"),
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(rx.try_recv().as_deref(), Ok("a"));
        tx.try_send("c".into()).unwrap();
        assert_eq!(tx.try_send("d".into()).unwrap_err().into_inner(), "d");
        assert_eq!(rx.try_iter().collect::<Vec<_>>(), ["b", "c"]);
        drop(rx);
        match tx.try_send("e".into()) {
            Err(TrySendError::Disconnected(v)) => assert_eq!(v, "e"),
            other => panic!("expected Disconnected, got {other:?}"),
        }
    });
}

#[test]
fn unbounded_try_send_never_reports_full() {
    each_root(|| {
        let (tx, rx) = channel::<u32>();
        for i in 0..10_000 {
            tx.try_send(i).unwrap();
        }
        assert!(rx.try_iter().eq(0..10_000));
    });
}

#[test]
fn bounded_zero_panics_with_a_message_naming_cap() {
    each_root(|| {
        let err = catch_unwind(|| bounded::<u8>(0)).expect_err("bounded(0) returned a channel");
        let msg = panic_msg(err);
        assert!(msg.contains("cap"), "the panic message does not name `cap`: {msg:?}");
        // One is the smallest capacity, and it works.
        let (tx, rx) = bounded::<u8>(1);
        tx.send(1).unwrap();
        assert!(matches!(tx.try_send(2), Err(TrySendError::Full(2))));
        assert_eq!(rx.recv(), Ok(1));
    });
}

// ---------------------------------------------------------------------------------------
// Oneshot

#[test]
fn oneshot_delivers_its_value_in_either_direction() {
    each_mode(|helpers| {
        let (tx, rx) = oneshot::<String>();
        go(helpers, move || tx.send("to root".into()).unwrap()).join();
        assert_eq!(rx.recv().as_deref(), Ok("to root"));

        let (tx, rx) = oneshot::<String>();
        let t = go(helpers, move || rx.recv());
        settle();
        tx.send("to helper".into()).unwrap();
        assert_eq!(t.join().as_deref(), Ok("to helper"));
    });
}

#[test]
fn oneshot_sender_dropped_without_sending_wakes_the_receiver_with_recv_error() {
    each_mode(|helpers| {
        let (tx, mut rx) = oneshot::<u32>();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        go(helpers, move || drop(tx)).join();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
        assert_eq!(rx.recv_timeout(GUARD), Err(RecvTimeoutError::Disconnected));
        assert_eq!(rx.recv(), Err(RecvError));

        // The same with the receiver already parked.
        let (tx, rx) = oneshot::<u32>();
        let (started_tx, started_rx) = oneshot();
        let t = go(helpers, move || {
            started_tx.send(()).unwrap();
            let mut rx = rx;
            woken(|| rx.recv_timeout(GUARD))
        });
        started_rx.recv().unwrap();
        settle();
        drop(tx);
        assert_eq!(t.join(), Err(RecvTimeoutError::Disconnected));
    });
}

#[test]
fn oneshot_send_hands_the_value_back_when_the_receiver_is_gone() {
    each_mode(|helpers| {
        let (tx, rx) = oneshot::<String>();
        assert!(!tx.is_closed());
        go(helpers, move || drop(rx)).join();
        assert!(tx.is_closed());
        assert_eq!(tx.send("back".into()), Err("back".to_string()));
    });
}

#[test]
fn oneshot_try_recv_and_recv_timeout() {
    each_mode(|helpers| {
        let (tx, mut rx) = oneshot::<u32>();
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        let d = Duration::from_millis(5);
        let start = Instant::now();
        assert_eq!(rx.recv_timeout(d), Err(RecvTimeoutError::Timeout));
        assert!(start.elapsed() >= d, "oneshot recv_timeout returned early");
        assert_eq!(rx.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
        let t = go(helpers, move || tx.send(9).unwrap());
        assert_eq!(woken(|| rx.recv_timeout(GUARD)), Ok(9));
        t.join();
        // The value was taken and the sender is gone.
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));

        let (tx, mut rx) = oneshot::<u32>();
        tx.send(4).unwrap();
        assert_eq!(rx.try_recv(), Ok(4));
        assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
    });
}

#[test]
fn a_oneshot_value_nobody_receives_is_dropped_exactly_once() {
    each_mode(|helpers| {
        let drops = drop_counters(2);
        // Received: dropped by the receiver's owner.
        let (tx, rx) = oneshot::<Counted>();
        tx.send(Counted { id: 0, drops: drops.clone() }).unwrap();
        go(helpers, move || drop(rx.recv().unwrap())).join();
        // Sent, never received: dropped with the receiver.
        let (tx, rx) = oneshot::<Counted>();
        tx.send(Counted { id: 1, drops: drops.clone() }).unwrap();
        assert_eq!(drops[1].load(Ordering::SeqCst), 0);
        go(helpers, move || drop(rx)).join();
        assert_each_dropped_once(&drops, 0..2);
    });
}

// ---------------------------------------------------------------------------------------
// Watch

#[test]
fn watch_receivers_each_see_a_rising_sequence_ending_at_the_last_value() {
    each_mode(|helpers| {
        const LAST: u32 = 200;
        let (tx, rx) = watch(0u32);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let mut rx = rx.clone();
                go(helpers, move || {
                    let mut seen = vec![rx.get()];
                    while rx.changed().is_ok() {
                        seen.push(rx.get());
                    }
                    seen
                })
            })
            .collect();
        drop(rx);
        for v in 1..=LAST {
            tx.send(v);
            if v % 16 == 0 {
                smarm::yield_now();
            }
        }
        drop(tx);
        for t in tasks {
            let seen = t.join();
            assert!(seen.windows(2).all(|w| w[0] < w[1]), "values seen out of order: {seen:?}");
            assert_eq!(*seen.last().unwrap(), LAST, "the last value was missed: {seen:?}");
        }
    });
}

#[test]
fn watch_changed_wakes_a_parked_receiver() {
    each_mode(|helpers| {
        let (tx, mut rx) = watch(0u32);
        let (started_tx, started_rx) = oneshot();
        let t = go(helpers, move || {
            started_tx.send(()).unwrap();
            rx.changed().map(|()| rx.get())
        });
        started_rx.recv().unwrap();
        settle();
        tx.send(5);
        assert_eq!(t.join(), Ok(5));
    });
}

#[test]
fn watch_changed_reports_the_last_value_then_recv_error_once_the_sender_is_gone() {
    each_mode(|helpers| {
        let (tx, mut rx) = watch(String::from("a"));
        assert!(!rx.has_changed());
        assert_eq!(rx.get(), "a");
        tx.send("b".into());
        assert!(rx.has_changed());
        let mut parked = rx.clone(); // has not seen "b" either
        let mut current = tx.subscribe();
        drop(tx);
        assert_eq!(rx.changed(), Ok(()), "a value sent before the sender dropped is still reported");
        assert_eq!(rx.get(), "b");
        assert_eq!(rx.changed(), Err(RecvError));
        assert_eq!(current.changed(), Err(RecvError), "a subscriber that saw the last value gets RecvError");
        let t = go(helpers, move || {
            let first = parked.changed();
            (first, parked.get(), parked.changed())
        });
        assert_eq!(t.join(), (Ok(()), "b".to_string(), Err(RecvError)));

        // A receiver parked when the sender drops is woken with RecvError.
        let (tx, mut rx) = watch(0u8);
        let (started_tx, started_rx) = oneshot();
        let t = go(helpers, move || {
            started_tx.send(()).unwrap();
            rx.changed()
        });
        started_rx.recv().unwrap();
        settle();
        drop(tx);
        assert_eq!(t.join(), Err(RecvError));
    });
}

#[test]
fn watch_subscribe_starts_from_the_current_value() {
    each_mode(|helpers| {
        let (tx, rx) = watch(1u32);
        tx.send(2);
        let mut sub = tx.subscribe();
        assert!(!sub.has_changed(), "a new subscriber has seen the current value");
        assert_eq!(sub.get(), 2);
        assert_eq!(tx.get(), 2);
        assert_eq!(tx.send_replace(3), 2);
        assert!(sub.has_changed());
        assert_eq!(sub.with(|v| *v * 10), 30);
        assert!(!sub.has_changed(), "`with` marks the value seen");
        // The original receiver never looked: it sees a change (to the latest value only).
        let mut rx = rx;
        let t = go(helpers, move || {
            rx.changed().unwrap();
            rx.get()
        });
        assert_eq!(t.join(), 3);
    });
}

// ---------------------------------------------------------------------------------------
// Timeouts

#[test]
fn recv_timeout_and_recv_deadline_time_out_never_early() {
    each_root(|| {
        let (_tx, rx) = channel::<u32>();
        let (_btx, brx) = bounded::<u32>(1);
        for ms in [1u64, 3, 10, 20] {
            let d = Duration::from_millis(ms);
            for r in [&rx, &brx] {
                let start = Instant::now();
                assert_eq!(r.recv_timeout(d), Err(RecvTimeoutError::Timeout));
                let elapsed = start.elapsed();
                assert!(elapsed >= d, "recv_timeout({d:?}) returned after {elapsed:?}");
                let deadline = Instant::now() + d;
                assert_eq!(r.recv_deadline(deadline), Err(RecvTimeoutError::Timeout));
                let now = Instant::now();
                assert!(now >= deadline, "recv_deadline returned {:?} before its deadline", deadline - now);
            }
        }
    });
}

#[test]
fn many_concurrent_receive_timeouts_are_never_early() {
    run_on(On::Actor, "actors", || {
        let tasks: Vec<_> = (0..64u64)
            .map(|i| {
                smarm::spawn(move || {
                    let (_tx, rx) = channel::<u8>();
                    let d = Duration::from_micros(500 + (i * 397) % 9_000);
                    let start = Instant::now();
                    let r = rx.recv_timeout(d);
                    (r, start.elapsed(), d)
                })
            })
            .collect();
        for t in tasks {
            let (r, elapsed, d) = t.join().unwrap();
            assert_eq!(r, Err(RecvTimeoutError::Timeout));
            assert!(elapsed >= d, "recv_timeout({d:?}) returned after {elapsed:?}");
        }
    });
}

#[test]
fn recv_timeout_returns_a_message_that_arrives_while_waiting() {
    each_mode(|helpers| {
        let (tx, rx) = channel::<u32>();
        let (go_tx, go_rx) = oneshot::<()>();
        let t = go(helpers, move || {
            go_rx.recv().unwrap();
            tx.send(11).unwrap();
            tx // keep the channel open: the message, not closure, must end the wait
        });
        go_tx.send(()).unwrap();
        assert_eq!(woken(|| rx.recv_timeout(GUARD)), Ok(11));
        let _tx = t.join();
        // The timer of the finished wait does not disturb the next one.
        let d = Duration::from_millis(2);
        let start = Instant::now();
        assert_eq!(rx.recv_timeout(d), Err(RecvTimeoutError::Timeout));
        assert!(start.elapsed() >= d);
    });
}

#[test]
fn zero_timeout_polls_without_parking() {
    // On one scheduler thread, with preemption suppressed, a second actor can only run if
    // the root parks or yields.
    rt(1)
        .run(|| {
            let (tx, rx) = channel::<u32>();
            let (_otx, mut orx) = oneshot::<u32>();
            let ran = Arc::new(AtomicBool::new(false));
            let no_preempt = smarm::NoPreempt::new();
            let other = {
                let ran = ran.clone();
                smarm::spawn(move || ran.store(true, Ordering::SeqCst))
            };
            for _ in 0..1_000 {
                assert_eq!(rx.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
                assert_eq!(rx.recv_deadline(Instant::now()), Err(RecvTimeoutError::Timeout));
                assert_eq!(orx.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
            }
            tx.send(5).unwrap();
            assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(5));
            assert!(!ran.load(Ordering::SeqCst), "a zero-timeout receive let another actor run: it parked or yielded");
            drop(no_preempt);
            other.join().unwrap();
            assert!(ran.load(Ordering::SeqCst));
        })
        .unwrap();
    // From a plain thread: a poll, too.
    let (tx, rx) = channel::<u32>();
    assert_eq!(rx.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
    tx.send(6).unwrap();
    assert_eq!(rx.recv_timeout(Duration::ZERO), Ok(6));
    assert_eq!(rx.recv_deadline(Instant::now() - Duration::from_secs(1)), Err(RecvTimeoutError::Timeout));
}

// ---------------------------------------------------------------------------------------
// Iteration

#[test]
fn iter_blocks_until_closed_try_iter_takes_what_is_queued_and_into_iter_owns() {
    each_mode(|helpers| {
        let (tx, rx) = channel::<u32>();
        for i in 0..10 {
            tx.send(i).unwrap();
        }
        // try_iter stops at an empty queue although a sender is alive.
        assert!(rx.try_iter().eq(0..10));
        assert_eq!(rx.try_iter().next(), None);
        let t = go(helpers, move || {
            for i in 10..20 {
                tx.send(i).unwrap();
                if i % 3 == 0 {
                    smarm::yield_now();
                }
            }
        });
        // iter (via &Receiver) waits for messages and ends when the sender is gone.
        let mut got = Vec::new();
        for v in &rx {
            got.push(v);
        }
        assert_eq!(got, (10..20).collect::<Vec<_>>());
        assert_eq!(rx.iter().next(), None);
        t.join();

        let (tx, rx) = bounded::<u32>(4);
        let t = go(helpers, move || rx.into_iter().sum::<u32>());
        for i in 1..=100 {
            tx.send(i).unwrap();
        }
        drop(tx);
        assert_eq!(t.join(), 5050);
    });
}

// ---------------------------------------------------------------------------------------
// Runtimes that end while a plain thread still holds the other end

#[test]
fn a_plain_thread_sending_after_the_receivers_runtime_ended_gets_its_value_back() {
    let drops = drop_counters(5);
    // Channel A: the receiver actor is parked in recv when the runtime ends.
    // Channel B: the receiver actor holds three queued messages, sleeping.
    let (tx_a, rx_a) = channel::<Counted>();
    let (tx_b, rx_b) = channel::<Counted>();
    for id in 0..3 {
        tx_b.send(Counted { id, drops: drops.clone() }).unwrap();
    }
    rt(2)
        .run(move || {
            let (a_started, a_ready) = oneshot();
            let (b_started, b_ready) = oneshot();
            drop(smarm::spawn(move || {
                a_started.send(()).unwrap();
                let _ = rx_a.recv(); // parked here when the runtime ends
                unreachable!("nothing was sent on channel A");
            }));
            drop(smarm::spawn(move || {
                let _rx = rx_b;
                b_started.send(()).unwrap();
                smarm::sleep(Duration::from_secs(3600));
            }));
            a_ready.recv().unwrap();
            b_ready.recv().unwrap();
            settle();
            // The root returns: both receivers are shut down and dropped.
        })
        .unwrap();
    assert_each_dropped_once(&drops, 0..3);
    let drops2 = drops.clone();
    let (a, b) = std::thread::spawn(move || {
        assert!(tx_a.is_closed() && tx_b.is_closed());
        let a = tx_a.send(Counted { id: 3, drops: drops2.clone() }).unwrap_err().0.id;
        let b = match tx_b.try_send(Counted { id: 4, drops: drops2.clone() }) {
            Err(TrySendError::Disconnected(v)) => v.id,
            other => panic!("expected Disconnected, got {other:?}"),
        };
        (a, b)
    })
    .join()
    .unwrap();
    assert_eq!((a, b), (3, 4));
    assert_each_dropped_once(&drops, 0..5);
}

#[test]
fn a_plain_thread_parked_on_a_full_channel_is_released_when_the_receivers_runtime_ends() {
    let (tx, rx) = bounded::<u32>(1);
    tx.send(0).unwrap();
    let (parked_tx, parked_rx) = oneshot::<()>();
    let sender = std::thread::spawn(move || {
        parked_tx.send(()).unwrap();
        tx.send(1)
    });
    rt(2)
        .run(move || {
            drop(smarm::spawn(move || {
                let _rx = rx;
                smarm::sleep(Duration::from_secs(3600));
            }));
            parked_rx.recv().unwrap();
            settle();
        })
        .unwrap();
    assert_eq!(sender.join().unwrap(), Err(SendError(1)));
}

#[test]
fn a_plain_thread_receiver_sees_closure_when_the_sending_actors_are_shut_down() {
    let (tx, rx) = channel::<u32>();
    let receiver = std::thread::spawn(move || {
        let got: Vec<u32> = rx.iter().collect();
        got
    });
    rt(2)
        .run(move || {
            tx.send(1).unwrap();
            drop(smarm::spawn(move || {
                let _tx = tx;
                smarm::sleep(Duration::from_secs(3600));
            }));
            settle();
        })
        .unwrap();
    assert_eq!(receiver.join().unwrap(), [1]);
}

#[test]
fn plain_thread_senders_racing_with_the_receivers_shutdown_never_crash() {
    // The receiver actor parks and is woken by a plain thread over and over; the runtime
    // ends at a different point each round. A wake aimed at a receiver whose runtime is
    // gone would be a use-after-free.
    for round in 0..30u32 {
        let (tx, rx) = channel::<u64>();
        let (btx, brx) = bounded::<u64>(2);
        let sender = std::thread::spawn(move || {
            let mut n = 0u64;
            loop {
                let a = tx.send(n).is_ok();
                let b = btx.send(n).is_ok();
                if !a && !b {
                    return n;
                }
                n += 1;
                if n % 4 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let received = Arc::new(AtomicUsize::new(0));
        let received2 = received.clone();
        rt(2)
            .run(move || {
                let r = received2.clone();
                drop(smarm::spawn(move || {
                    while rx.recv().is_ok() {
                        r.fetch_add(1, Ordering::Relaxed);
                        smarm::yield_now();
                    }
                }));
                drop(smarm::spawn(move || {
                    while brx.recv().is_ok() {
                        received2.fetch_add(1, Ordering::Relaxed);
                        // A stream that never runs dry would otherwise keep this actor from
                        // ever seeing the shutdown.
                        smarm::maybe_preempt();
                    }
                }));
                for _ in 0..round * 20 {
                    smarm::yield_now();
                }
            })
            .unwrap();
        // Both receivers are gone: the sender stopped on SendError.
        let sent = sender.join().unwrap();
        assert!(received.load(Ordering::Relaxed) as u64 <= 2 * (sent + 1));
    }
}

#[test]
fn bounded_channel_of_huge_capacity_allocates_only_as_it_fills() {
    // A ring of 2^40 (or usize::MAX - 1) u64s would be terabytes: only what is queued is
    // allocated, past the pre-sized first 1,024 messages too.
    for cap in [1usize << 40, usize::MAX - 1] {
        let (tx, rx) = smarm::channel::bounded::<u64>(cap);
        for i in 0..3000 {
            tx.try_send(i).unwrap();
        }
        for i in 0..3000 {
            assert_eq!(rx.try_recv(), Ok(i));
        }
    }
}
