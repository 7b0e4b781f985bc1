//! The shared run queue: runnable actor slot indices, taken by any scheduler thread.
//!
//! Backends are cargo features, exactly one enabled:
//! - `rq-mpmc` (default): [`MpmcRing`], Dmitry Vyukov's bounded MPMC queue
//!   (<https://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>),
//!   sized to `max_actors` rounded up to a power of two;
//! - `rq-striped`: several `MpmcRing`s, producers and consumers probe on a miss;
//! - `rq-mutex`: a `VecDeque` under a mutex, the reference.
//!
//! # Capacity and the stalled consumer
//!
//! Every actor is in at most one queue at a time (the slot state machine enqueues only on
//! the Parked -> Queued and Running -> Queued transitions), so occupancy never exceeds
//! `max_actors` and the ring can never be truly full. It can still *look* full: a consumer
//! preempted by the OS between claiming a cell (the `head` CAS) and releasing it (its
//! sequence store) freezes that cell, and once producers lap the ring they find it still
//! holding the previous lap. Vyukov's original infers "full" from that; here the producer
//! instead checks occupancy with the opposite counter (`tail - head`, after a SeqCst fence):
//! below capacity it is a transient stall and the producer backs off (spin, then yield the
//! OS thread so the stalled consumer can run); at capacity it is a real violation of the
//! at-most-once rule and the producer panics with the counters. `pop` is symmetric: a cell
//! claimed by a producer that has not yet published is waited for a bounded time, then
//! reported as empty. A spurious empty is benign: the producer finishes and wakes a
//! sleeper, and a thread about to sleep re-checks `is_empty` (which compares the counters)
//! after announcing itself.
//!
//! # Zero initialisation
//!
//! A cell's sequence number starts at its index. Cells store `seq - index` instead, so a
//! freshly zeroed buffer is the initial state and building a runtime with a large
//! `max_actors` costs no initialisation pass (pages are committed as the ring is used).

#[cfg(any(
    all(feature = "rq-mpmc", feature = "rq-striped"),
    all(feature = "rq-mpmc", feature = "rq-mutex"),
    all(feature = "rq-striped", feature = "rq-mutex"),
))]
compile_error!(
    "smarm: enable exactly one run-queue backend; `rq-mpmc` is the default (use \
     `default-features = false, features = [\"rq-striped\"]` to pick another)"
);
#[cfg(not(any(feature = "rq-mpmc", feature = "rq-striped", feature = "rq-mutex")))]
compile_error!(
    "smarm: no run-queue backend enabled; enable the default feature `rq-mpmc` \
     (or `rq-striped` / `rq-mutex`)"
);

use crate::loom_shim::{fence, spin_hint, yield_thread, AtomicUsize, CachePadded, Ordering, UnsafeCell};

/// Spin-then-yield backoff (after crossbeam-utils' `Backoff`): `spin` when a peer made
/// progress and we only lost a race, `snooze` when waiting for a peer that may be
/// descheduled, which after a few rounds yields the OS thread so that peer can run.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Up to 2^SPIN_LIMIT spin hints per `spin`.
    const SPIN_LIMIT: u32 = 6;
    /// After this many `snooze` steps the wait is considered long (`is_completed`).
    const YIELD_LIMIT: u32 = 10;

    pub(crate) fn new() -> Backoff {
        Backoff { step: 0 }
    }

    /// Lost a race with a peer that made progress: retry soon.
    pub(crate) fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(Self::SPIN_LIMIT) {
            spin_hint();
        }
        if self.step <= Self::SPIN_LIMIT {
            self.step += 1;
        }
    }

    /// Waiting on a peer that may be descheduled: spin briefly, then yield the OS thread.
    pub(crate) fn snooze(&mut self) {
        if self.step <= Self::SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                spin_hint();
            }
        } else {
            yield_thread();
        }
        if self.step <= Self::YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// True once the wait has escalated to yielding for a while.
    pub(crate) fn is_completed(&self) -> bool {
        self.step > Self::YIELD_LIMIT
    }
}

struct Cell {
    /// `seq - index`: see "Zero initialisation". `seq == pos` means free for the producer
    /// of position `pos`; `seq == pos + 1` means holding the value pushed at `pos`.
    seq_rel: AtomicUsize,
    value: UnsafeCell<u32>,
}

/// Vyukov's bounded MPMC queue of `u32`s, with occupancy checks instead of "full"/"empty"
/// inferences from a single cell (see the module doc).
pub(crate) struct MpmcRing {
    /// Next position to pop. Only grows (wrapping).
    head: CachePadded<AtomicUsize>,
    /// Next position to push. Only grows (wrapping).
    tail: CachePadded<AtomicUsize>,
    buffer: Box<[Cell]>,
    /// `buffer.len() - 1`; the length is a power of two.
    mask: usize,
}

// SAFETY: the cells' values are handed over between threads under the sequence protocol
// (a value is written only by the producer that won the tail CAS for that position and
// read only by the consumer that won the head CAS, ordered by the Release/Acquire on seq).
unsafe impl Send for MpmcRing {}
// SAFETY: as above.
unsafe impl Sync for MpmcRing {}

impl MpmcRing {
    /// A ring holding at least `capacity` values.
    pub(crate) fn new(capacity: usize) -> MpmcRing {
        let len = capacity.max(2).next_power_of_two();
        MpmcRing {
            head: CachePadded(AtomicUsize::new(0)),
            tail: CachePadded(AtomicUsize::new(0)),
            buffer: zeroed_cells(len),
            mask: len - 1,
        }
    }

    fn capacity(&self) -> usize {
        self.mask + 1
    }

    #[inline]
    fn seq(&self, pos: usize, order: Ordering) -> usize {
        let idx = pos & self.mask;
        self.buffer[idx].seq_rel.load(order).wrapping_add(idx)
    }

    #[inline]
    fn set_seq(&self, pos: usize, seq: usize) {
        let idx = pos & self.mask;
        // Release: publishes the value write (push) or the value read (pop) to whoever
        // next acquires this cell's sequence.
        self.buffer[idx].seq_rel.store(seq.wrapping_sub(idx), Ordering::Release);
    }

    /// Appends `value`. Never fails: the caller guarantees occupancy stays within capacity
    /// (at-most-once enqueue); a stalled consumer is waited out.
    pub(crate) fn push(&self, value: u32) {
        let mut backoff = Backoff::new();
        // Relaxed: the position is only a guess; the CAS below validates it, and the value
        // is published through the cell's Release sequence store, not through `tail`.
        let mut pos = self.tail.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the consumer's Release in `pop`, so its read of the old
            // value happened before we overwrite the cell.
            let seq = self.seq(pos, Ordering::Acquire);
            let dif = seq.wrapping_sub(pos) as isize;
            if dif == 0 {
                match self.tail.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` while the cell's seq == pos gives
                        // us exclusive write access until we publish seq = pos + 1.
                        self.buffer[pos & self.mask].value.with_mut(|p| unsafe { *p = value });
                        self.set_seq(pos, pos.wrapping_add(1));
                        return;
                    }
                    Err(cur) => {
                        pos = cur;
                        backoff.spin();
                    }
                }
            } else if dif < 0 {
                // The cell still holds the previous lap's value: full, or its consumer is
                // descheduled between its head CAS and its seq store. Decide by occupancy.
                fence(Ordering::SeqCst);
                // `pos` (tail) was loaded before `head`, and head only grows, so this can
                // underestimate occupancy but never overestimate it: no spurious panic.
                let head = self.head.load(Ordering::Relaxed);
                let occupancy = pos.wrapping_sub(head);
                if occupancy >= self.capacity() {
                    panic!(
                        "smarm run queue over capacity (tail {pos}, head {head}, capacity {}): \
                         an actor was enqueued twice, which the slot state machine forbids",
                        self.capacity()
                    );
                }
                backoff.snooze();
                pos = self.tail.load(Ordering::Relaxed);
            } else {
                // Another producer already took `pos`; catch up.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// Takes the oldest value, or `None` if the ring is (or briefly looks) empty.
    pub(crate) fn pop(&self) -> Option<u32> {
        let mut backoff = Backoff::new();
        // Relaxed: validated by the CAS; the value is acquired through the cell's seq.
        let mut pos = self.head.load(Ordering::Relaxed);
        loop {
            // Acquire: pairs with the producer's Release of seq = pos + 1 (value written).
            let seq = self.seq(pos, Ordering::Acquire);
            let dif = seq.wrapping_sub(pos.wrapping_add(1)) as isize;
            if dif == 0 {
                match self.head.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Relaxed, Ordering::Relaxed) {
                    Ok(_) => {
                        // SAFETY: winning the CAS for `pos` while seq == pos + 1 gives us the
                        // value the producer published; nobody writes the cell until we
                        // release it with seq = pos + capacity.
                        let v = self.buffer[pos & self.mask].value.with(|p| unsafe { *p });
                        self.set_seq(pos, pos.wrapping_add(self.capacity()));
                        return Some(v);
                    }
                    Err(cur) => {
                        pos = cur;
                        backoff.spin();
                    }
                }
            } else if dif < 0 {
                // Not yet published at `pos`: empty, or a producer is between its tail CAS
                // and its seq store.
                fence(Ordering::SeqCst);
                let tail = self.tail.load(Ordering::Relaxed);
                if tail == pos || backoff.is_completed() {
                    return None;
                }
                backoff.snooze();
                pos = self.head.load(Ordering::Relaxed);
            } else {
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Number of values pushed and not yet popped (claimed positions, published or not).
    /// Exact when quiescent; a snapshot otherwise. Callers that need it to order against
    /// their own stores (the idle protocol) issue a SeqCst fence first.
    pub(crate) fn len(&self) -> usize {
        // Relaxed: a snapshot; see the doc comment. Head is read first so tail >= head.
        let head = self.head.load(Ordering::Relaxed);
        let tail = self.tail.load(Ordering::Relaxed);
        tail.wrapping_sub(head)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(not(loom))]
fn zeroed_cells(len: usize) -> Box<[Cell]> {
    use std::alloc::{alloc_zeroed, handle_alloc_error, Layout};
    let layout = Layout::array::<Cell>(len).expect("run queue size overflows");
    // SAFETY: `Cell` is an AtomicUsize and a u32 in UnsafeCells, for which all-zero bytes
    // are valid values (seq_rel = 0 is the documented initial state). The allocation has
    // the layout of `[Cell; len]`, so it can be owned by a boxed slice of that length.
    unsafe {
        let p = alloc_zeroed(layout) as *mut Cell;
        if p.is_null() {
            handle_alloc_error(layout);
        }
        Box::from_raw(core::ptr::slice_from_raw_parts_mut(p, len))
    }
}

#[cfg(loom)]
fn zeroed_cells(len: usize) -> Box<[Cell]> {
    (0..len).map(|_| Cell { seq_rel: AtomicUsize::new(0), value: UnsafeCell::new(0) }).collect()
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn fifo_order_and_empty() {
        let r = MpmcRing::new(8);
        assert_eq!(r.pop(), None);
        for i in 0..8 {
            r.push(i);
        }
        assert_eq!(r.len(), 8);
        for i in 0..8 {
            assert_eq!(r.pop(), Some(i));
        }
        assert_eq!(r.pop(), None);
        assert!(r.is_empty());
    }

    #[test]
    fn wraps_many_laps() {
        let r = MpmcRing::new(4);
        for i in 0..1000u32 {
            r.push(i);
            r.push(i + 1);
            assert_eq!(r.pop(), Some(i));
            assert_eq!(r.pop(), Some(i + 1));
        }
    }

    #[test]
    #[should_panic(expected = "over capacity")]
    fn overfilling_is_a_loud_bug_not_a_hang() {
        let r = MpmcRing::new(2);
        r.push(1);
        r.push(2);
        r.push(3);
    }

    #[test]
    fn concurrent_producers_consumers_lose_nothing() {
        use std::sync::Arc;
        let r = Arc::new(MpmcRing::new(64));
        let per = 20_000u32;
        let got = Arc::new(std::sync::Mutex::new(vec![0u8; (per * 2) as usize]));
        let count = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let mut hs = vec![];
        for p in 0..2u32 {
            let r = r.clone();
            let count = count.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..per {
                    // keep occupancy <= capacity as the runtime does: wait for room
                    while r.len() >= 60 {
                        std::thread::yield_now();
                    }
                    r.push(p * per + i);
                    let _ = &count;
                }
            }));
        }
        for _ in 0..2 {
            let r = r.clone();
            let got = got.clone();
            let count = count.clone();
            hs.push(std::thread::spawn(move || {
                while count.load(std::sync::atomic::Ordering::Relaxed) < per * 2 {
                    if let Some(v) = r.pop() {
                        got.lock().unwrap()[v as usize] += 1;
                        count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        assert!(got.lock().unwrap().iter().all(|&c| c == 1));
    }
}

/// Loom models of [`MpmcRing`]. Run with
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::MpmcRing;
    use crate::loom_shim::loom_check;
    use loom::sync::Arc;
    use loom::thread;

    /// Pops until a value arrives (`pop` may report a spurious empty while a producer is
    /// mid-publish, or the ring may not have been filled yet).
    fn pop_blocking(ring: &MpmcRing) -> u32 {
        loop {
            if let Some(v) = ring.pop() {
                return v;
            }
            thread::yield_now();
        }
    }

    /// A capacity-2 ring whose counters have already advanced by one, so the models'
    /// positions wrap around the buffer (and the `seq - index` encoding is exercised).
    fn shifted_ring() -> MpmcRing {
        let ring = MpmcRing::new(2);
        assert_eq!(ring.capacity(), 2);
        ring.push(99);
        assert_eq!(ring.pop(), Some(99));
        ring
    }

    #[test]
    fn mpmc_two_producers_one_consumer() {
        loom_check(4, || {
            let ring = Arc::new(shifted_ring());
            let producers: Vec<_> = [1u32, 2]
                .into_iter()
                .map(|v| {
                    let ring = ring.clone();
                    thread::spawn(move || ring.push(v))
                })
                .collect();
            let mut got = [pop_blocking(&ring), pop_blocking(&ring)];
            for p in producers {
                p.join().unwrap();
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
            assert_eq!(ring.pop(), None);
            assert!(ring.is_empty());
        });
    }

    /// Each consumer pops twice without waiting, racing the producer; after joining, the
    /// main thread drains the quiescent ring (where `pop` must be exact). Every value must
    /// come out exactly once, whichever thread took it.
    ///
    /// Preemption bound 2: consumers waiting out a mid-publish producer run the backoff's
    /// many yields, and with three threads bound 3 takes minutes.
    #[test]
    fn mpmc_one_producer_two_consumers() {
        loom_check(2, || {
            let ring = Arc::new(shifted_ring());
            let consumers: Vec<_> = (0..2)
                .map(|_| {
                    let ring = ring.clone();
                    thread::spawn(move || [ring.pop(), ring.pop()])
                })
                .collect();
            ring.push(1);
            ring.push(2);
            let mut got: Vec<u32> = consumers.into_iter().flat_map(|c| c.join().unwrap()).flatten().collect();
            while let Some(v) = ring.pop() {
                got.push(v);
            }
            got.sort_unstable();
            assert_eq!(got, [1, 2]);
            assert!(ring.is_empty());
        });
    }

    /// Two actors (0 and 1) in a capacity-2 ring. Thread X pops one and stops; the main
    /// thread plays a scheduler running the other: pop it, push it back, twice. Occupancy
    /// never exceeds the capacity (each value is in the ring at most once), but when X is
    /// preempted between its head CAS and its sequence store, the main thread's push laps
    /// onto X's frozen cell. It must wait X out: neither report "full" nor panic nor hang.
    #[test]
    fn mpmc_lap_onto_stalled_consumer_completes() {
        loom_check(5, || {
            let ring = Arc::new(MpmcRing::new(2));
            ring.push(0);
            ring.push(1);
            let x = {
                let ring = ring.clone();
                thread::spawn(move || pop_blocking(&ring))
            };
            for _ in 0..2 {
                let v = pop_blocking(&ring);
                ring.push(v);
            }
            let x = x.join().unwrap();
            let rest = ring.pop().expect("the other actor is still queued");
            assert_eq!(ring.pop(), None);
            let mut all = [x, rest];
            all.sort_unstable();
            assert_eq!(all, [0, 1]);
        });
    }
}
