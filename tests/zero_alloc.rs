//! Ready operations allocate nothing once warmed up: bounded, unbounded, oneshot and watch
//! send/receive, `Barrier(1)::wait`, uncontended `sync::Mutex`; an unbounded queue grows by
//! at most one allocation per doubling. Afterwards the same primitives still park, wake,
//! time out and close correctly.
//!
//! A counting global allocator counts, per OS thread, the allocation calls (`alloc`,
//! `alloc_zeroed`, `realloc`; frees are not counted) made while that thread's counting flag
//! is on. Every runtime here has one scheduler thread, which is the test's own thread, so the
//! count covers the measured actor and everything the runtime does for it, and nothing that
//! other tests do concurrently on their own threads.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{compiler_fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smarm::channel::{bounded, channel, oneshot, watch, RecvError, RecvTimeoutError, TryRecvError};
use smarm::sync::{Barrier, Mutex};
use smarm::Runtime;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note_alloc() {
    // `try_with`: the allocator can run while thread-locals are being torn down.
    if COUNTING.try_with(Cell::get).unwrap_or(false) {
        let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
    }
}

// SAFETY: every call is forwarded unchanged to the system allocator; the bookkeeping only
// touches const-initialised thread-locals (no allocation, no re-entrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocation calls made on this thread while `f` runs. Out of line, with a compiler fence
/// around the thread-local accesses (they run on an actor stack; with one scheduler thread
/// the actor never migrates, but the rule in smarm's `context` module is kept anyway).
#[inline(never)]
fn allocations_in(f: impl FnOnce()) -> usize {
    compiler_fence(Ordering::SeqCst);
    let before = ALLOCS.with(Cell::get);
    COUNTING.with(|c| c.set(true));
    f();
    compiler_fence(Ordering::SeqCst);
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(Cell::get) - before
}

/// Runs `root` on a runtime with one scheduler thread: the calling thread.
fn on_one_thread<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(root).unwrap()
}

const WARM: usize = 100;
const ROUNDS: usize = 10_000;

#[track_caller]
fn assert_none(what: &str, n: usize) {
    assert_eq!(n, 0, "{what}: {n} allocations in {ROUNDS} rounds after warm-up");
}

#[test]
fn ready_bounded_send_and_recv_allocate_nothing() {
    on_one_thread(|| {
        let (tx, rx) = bounded::<u64>(4);
        for i in 0..WARM as u64 {
            tx.send(i).unwrap();
            assert_eq!(rx.recv(), Ok(i));
        }
        let n = allocations_in(|| {
            for i in 0..ROUNDS as u64 {
                tx.send(i).unwrap();
                tx.try_send(i + 1).unwrap();
                assert_eq!(rx.recv(), Ok(i));
                assert_eq!(rx.try_recv(), Ok(i + 1));
                assert_eq!(rx.recv_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
            }
        });
        assert_none("bounded send/try_send + recv/try_recv", n);
    });
}

#[test]
fn ready_unbounded_send_and_recv_allocate_nothing_in_steady_state() {
    on_one_thread(|| {
        let (tx, rx) = channel::<u64>();
        // Warm-up reaches the steady-state depth (16 queued) once.
        for i in 0..16 {
            tx.send(i).unwrap();
        }
        for i in 0..16 {
            assert_eq!(rx.recv(), Ok(i));
        }
        let n = allocations_in(|| {
            for i in 0..ROUNDS as u64 {
                tx.send(i).unwrap();
                assert_eq!(rx.recv(), Ok(i));
            }
            for _ in 0..ROUNDS / 16 {
                for i in 0..16 {
                    tx.send(i).unwrap();
                }
                assert!(rx.try_iter().eq(0..16));
            }
        });
        assert_none("unbounded send + recv (queue depth 1 and 16)", n);
    });
}

#[test]
fn a_fresh_unbounded_channel_allocates_once_per_doubling() {
    // Measured: 16 messages -> 1 allocation (16 slots reserved by the first send);
    // 64 messages -> 3 (16, then grown to 32 and 64). Creating the channel (its shared
    // state) is outside the window.
    on_one_thread(|| {
        for (msgs, max) in [(1usize, 1usize), (16, 1), (17, 2), (64, 3)] {
            let (tx, rx) = channel::<u64>();
            let n = allocations_in(|| {
                for i in 0..msgs as u64 {
                    tx.send(i).unwrap();
                }
            });
            eprintln!("unbounded: {msgs} messages into a fresh channel: {n} allocations");
            assert!(n <= max, "{msgs} messages into a fresh unbounded channel: {n} allocations (at most {max})");
            assert_eq!(rx.try_iter().count(), msgs);
        }
    });
}

#[test]
fn oneshot_send_and_recv_allocate_nothing() {
    on_one_thread(|| {
        let mut pairs: Vec<_> = (0..ROUNDS).map(|_| oneshot::<u64>()).collect();
        let mut polled: Vec<_> = (0..ROUNDS).map(|_| oneshot::<u64>()).collect();
        let n = allocations_in(|| {
            for (i, (tx, rx)) in pairs.drain(..).enumerate() {
                tx.send(i as u64).unwrap();
                assert_eq!(rx.recv(), Ok(i as u64));
            }
            for (i, (tx, mut rx)) in polled.drain(..).enumerate() {
                assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
                tx.send(i as u64).unwrap();
                assert_eq!(rx.try_recv(), Ok(i as u64));
            }
        });
        assert_none("oneshot send + recv/try_recv", n);
    });
}

#[test]
fn watch_send_and_changed_allocate_nothing() {
    on_one_thread(|| {
        let (tx, mut rx) = watch(0u64);
        let mut rx2 = tx.subscribe();
        for i in 0..WARM as u64 {
            tx.send(i);
            rx.changed().unwrap();
        }
        let n = allocations_in(|| {
            for i in 0..ROUNDS as u64 {
                tx.send(i);
                rx.changed().unwrap();
                assert_eq!(rx.get(), i);
                assert!(rx2.has_changed());
                rx2.changed().unwrap();
                assert_eq!(tx.send_replace(i + 1), i);
                assert_eq!(rx2.with(|v| *v), i + 1);
            }
        });
        assert_none("watch send + changed", n);
    });
}

#[test]
fn barrier_of_one_wait_allocates_nothing() {
    on_one_thread(|| {
        let b = Barrier::new(1);
        b.wait();
        let n = allocations_in(|| {
            for _ in 0..ROUNDS {
                assert!(b.wait().is_leader());
            }
        });
        assert_none("Barrier(1)::wait", n);
    });
}

#[test]
fn uncontended_mutex_lock_and_unlock_allocate_nothing() {
    on_one_thread(|| {
        let m = Mutex::new(0u64);
        *m.lock() += 1;
        let n = allocations_in(|| {
            for _ in 0..ROUNDS {
                *m.lock() += 1;
                *m.try_lock().unwrap() += 1;
            }
        });
        assert_none("uncontended Mutex lock/try_lock", n);
        assert_eq!(*m.lock(), 1 + 2 * ROUNDS as u64);
    });
}

#[test]
fn a_receive_that_times_out_allocates_nothing_after_warm_up() {
    // Not a ready operation: each round registers a deadline, parks, is woken by the timer
    // and deregisters. The timer structure documents insert/cancel as allocation-free once
    // grown to the peak number of pending timers.
    on_one_thread(|| {
        let (_tx, rx) = channel::<u64>();
        let (_otx, mut orx) = oneshot::<u64>();
        let short = Duration::from_micros(50);
        for _ in 0..WARM {
            assert_eq!(rx.recv_timeout(short), Err(RecvTimeoutError::Timeout));
            assert_eq!(orx.recv_timeout(short), Err(RecvTimeoutError::Timeout));
            smarm::sleep(short);
        }
        let n = allocations_in(|| {
            for _ in 0..200 {
                assert_eq!(rx.recv_timeout(short), Err(RecvTimeoutError::Timeout));
                assert_eq!(orx.recv_timeout(short), Err(RecvTimeoutError::Timeout));
                smarm::sleep(short);
            }
        });
        assert_eq!(n, 0, "{n} allocations in 600 timed waits after warm-up");
    });
}

#[test]
fn a_blocking_hand_off_between_two_actors_allocates_nothing() {
    // Not a ready operation: each round parks and wakes both actors (ping-pong over two
    // bounded(1) channels). Measured on the single scheduler thread, which runs both.
    on_one_thread(|| {
        let (ping_tx, ping_rx) = bounded::<u64>(1);
        let (pong_tx, pong_rx) = bounded::<u64>(1);
        let echo = smarm::spawn(move || {
            for v in ping_rx.iter() {
                pong_tx.send(v).unwrap();
            }
        });
        for i in 0..WARM as u64 {
            ping_tx.send(i).unwrap();
            assert_eq!(pong_rx.recv(), Ok(i));
        }
        let n = allocations_in(|| {
            for i in 0..ROUNDS as u64 {
                ping_tx.send(i).unwrap();
                assert_eq!(pong_rx.recv(), Ok(i));
            }
        });
        drop(ping_tx);
        echo.join().unwrap();
        assert_none("ping-pong between two actors", n);
    });
}

#[test]
fn primitives_still_park_wake_time_out_and_close_after_the_zero_allocation_loops() {
    on_one_thread(|| {
        // Warm the primitives with their zero-allocation loops first.
        let (tx, rx) = bounded::<u64>(2);
        let (utx, urx) = channel::<u64>();
        let (wtx, mut wrx) = watch(0u64);
        let m = Arc::new(Mutex::new(0u64));
        let b = Arc::new(Barrier::new(2));
        let n = allocations_in(|| {
            for i in 0..1_000 {
                tx.send(i).unwrap();
                utx.send(i).unwrap();
                wtx.send(i);
                assert_eq!(rx.recv(), Ok(i));
                assert_eq!(urx.recv(), Ok(i));
                wrx.changed().unwrap();
                *m.lock() += 1;
            }
        });
        // (the unbounded queue's first block is the one allocation)
        assert!(n <= 1, "{n} allocations");

        // Time-outs: never early.
        for r in [&rx, &urx] {
            let start = Instant::now();
            assert_eq!(r.recv_timeout(Duration::from_millis(3)), Err(RecvTimeoutError::Timeout));
            assert!(start.elapsed() >= Duration::from_millis(3));
        }

        // Wakes: the root parks in each primitive and a helper actor releases it.
        let (tx2, utx2, m2, b2) = (tx.clone(), utx.clone(), m.clone(), b.clone());
        let guard = m.lock();
        let released = Arc::new(AtomicBool::new(false));
        let released2 = released.clone();
        let helper = smarm::spawn(move || {
            // Runs only once the root parks (one scheduler thread).
            tx2.send(7).unwrap();
            utx2.send(8).unwrap();
            wtx.send(9);
            *m2.lock() += 1; // parks: the root holds the lock until it is woken below
            b2.wait();
            released2.store(true, Ordering::SeqCst);
            // Closure: the helper drops its senders (and the watch sender) on return.
        });
        assert_eq!(rx.recv(), Ok(7));
        assert_eq!(urx.recv(), Ok(8));
        wrx.changed().unwrap();
        assert_eq!(wrx.get(), 9);
        drop(guard); // hands the lock to the parked helper
        b.wait();
        helper.join().unwrap();
        assert!(released.load(Ordering::SeqCst));
        assert_eq!(*m.lock(), 1_001);

        // Closure: every sender gone.
        drop(tx);
        drop(utx);
        assert_eq!(rx.recv(), Err(RecvError));
        assert_eq!(urx.recv_timeout(Duration::from_secs(20)), Err(RecvTimeoutError::Disconnected));
        assert_eq!(wrx.changed(), Err(RecvError));

        // A oneshot created now still parks and wakes.
        let (otx, orx) = oneshot::<u64>();
        let h = smarm::spawn(move || otx.send(10).unwrap());
        assert_eq!(orx.recv(), Ok(10));
        h.join().unwrap();
    });
}
