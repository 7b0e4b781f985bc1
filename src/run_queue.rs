//! The shared run queue: runnable actor slot indices, taken by any scheduler thread.
//!
//! This queue carries the work queued from outside a thread's own loop: spawns and wakes
//! from other threads or plain threads, a full local queue's overflow, and yields while it
//! already holds work. Yields, displaced wakes and spawns by actors mostly stay in the
//! per-thread local queues (`local_queue`), so this queue is rarely contended and the
//! backend choice below is off the hot path of yield- and spawn-heavy work
//! (outputs/history.md, findings 14, 17 and 28).
//!
//! # Backends
//!
//! Cargo features, exactly one enabled (checked below); `RunQueue` names the selected one.
//! All three share one interface (`new(capacity)`, `push`, `pop`, `len`, `is_empty`), and all
//! three are compiled and unit-tested in every build, whichever one the runtime uses.
//!
//! - `rq-mpmc` (default): `MpmcRing`, Dmitry Vyukov's bounded MPMC queue
//!   (<https://www.1024cores.net/home/lock-free-algorithms/queues/bounded-mpmc-queue>),
//!   sized to `max_actors` rounded up to a power of two. Lock-free and FIFO (an actor waits
//!   behind exactly the actors queued before it). Every push and pop is a CAS on one of two
//!   shared counters, the contention point as threads multiply. The default because it is
//!   FIFO (fair by construction), lock-free (an OS-descheduled thread stalls one cell, not
//!   the queue), the cheapest per operation (no probing, one lazily committed allocation,
//!   `len`/`is_empty` read two counters), and the backend the loom models check (here and
//!   in `runtime::idle`). Neither alternative is clearly faster on two cores
//!   (outputs/history.md, findings 14 and 28); striping is for many threads contending on
//!   the two counters.
//! - `rq-striped`: `StripedRing`, `StripedRing::STRIPES` `MpmcRing`s. A scheduler thread
//!   pushes to and pops from its *home* stripe (thread index mod stripes), probing the other
//!   stripes on a miss; a push skips a stripe whose next cell is frozen by a stalled
//!   consumer. Contention on the counters is divided by the stripe count and an actor
//!   tends to stay on the thread that queued it (warm caches), but there is no global FIFO
//!   order (only per stripe: an actor can be overtaken by ones queued later on another
//!   stripe), an empty `pop` probes every stripe, `len`/`is_empty` read every stripe's
//!   counters (cache lines other threads write) and memory is `STRIPES` rings. Starvation
//!   is bounded by a rotation: every `StripedRing::FAIRNESS`-th scheduling round a thread
//!   starts at another stripe, so a stripe no thread calls home (fewer threads than stripes)
//!   is served even while every home stripe stays busy.
//! - `rq-mutex`: `MutexQueue`, a `VecDeque` under a `parking_lot::Mutex`, with a length
//!   mirror so `len`/`is_empty` (polled by idle threads) never take the lock. The
//!   reference: obviously correct, FIFO, an exact over-capacity check. Every push and pop
//!   takes the lock: a convoy under contention, and a lock holder descheduled by the OS
//!   stalls every thread that needs the queue (lock-free backends only stall the one cell).
//!
//! # The idle protocol's re-check
//!
//! A thread about to sleep announces itself, issues a SeqCst fence and calls `is_empty`; a
//! pusher issues a SeqCst fence after its push and then looks for sleepers
//! (`runtime::idle`). Every backend's `is_empty` therefore reads, after the caller's
//! fence, the counter(s) every push writes *before* the pusher's fence: `MpmcRing`'s
//! `tail` (advanced by the push's CAS), every stripe's `head`/`tail` for `StripedRing` (the
//! push may have gone to any stripe), `MutexQueue`'s length mirror (stored inside the lock).
//! With the two fences either the sleeper sees the push or the pusher sees the sleeper.
//!
//! # Capacity and the stalled consumer
//!
//! Every actor is in at most one queue at a time (the slot state machine enqueues only on
//! the Parked -> Queued and Running -> Queued transitions), so occupancy never exceeds
//! `max_actors` and the ring can never be truly full. It can still *look* full: a consumer
//! preempted by the OS between claiming a cell (the `head` CAS) and releasing it (its
//! sequence store) freezes that cell, and once producers lap the ring they find it still
//! holding the previous lap. Vyukov's original infers "full" from that; here the producer
//! instead checks occupancy (`tail - head`, read so that it never overestimates; see
//! `MpmcRing::check_occupancy`): below capacity it is a transient stall and the producer
//! backs off (spin, then yield the OS thread so the stalled consumer can run); at capacity
//! it is a real violation of the at-most-once rule and the producer panics with the
//! counters. `pop` is symmetric: a cell claimed by a producer that has not yet published is
//! waited for a bounded time, then reported as empty. A spurious empty is benign: the
//! producer finishes and wakes a sleeper, and a thread about to sleep re-checks `is_empty`
//! (which compares the counters) after announcing itself.
//!
//! The at-most-once rule bounds the *total* occupancy, not any one stripe's, so each of
//! `StripedRing`'s stripes is a full-size ring (an actor set that all queues on one thread
//! lands in one stripe), and a push never needs another stripe for room: it probes only
//! past a stall, and if every stripe looks stalled it waits on its first choice with the
//! ring's spin-then-yield backoff. The price is memory (`STRIPES` rings of 16 bytes a cell), and
//! the over-capacity panic only catches a stripe overflowing, not the total.
//! `MutexQueue` reserves `capacity` up front and panics on a push beyond it.
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

// The first enabled backend wins, so a bad feature set reports only the compile_error above.
cfg_if::cfg_if! {
    if #[cfg(feature = "rq-mpmc")] {
        /// The run queue the runtime uses (selected by cargo feature; see the module doc).
        pub(crate) type RunQueue = MpmcRing;
    } else if #[cfg(feature = "rq-striped")] {
        /// The run queue the runtime uses (selected by cargo feature; see the module doc).
        pub(crate) type RunQueue = StripedRing;
    } else if #[cfg(feature = "rq-mutex")] {
        /// The run queue the runtime uses (selected by cargo feature; see the module doc).
        pub(crate) type RunQueue = MutexQueue;
    } else {
        /// Placeholder so that only the compile_error above is reported.
        pub(crate) type RunQueue = MpmcRing;
    }
}

/// The scheduler thread that pushes or pops, passed in by the runtime (this layer knows no
/// scheduler): its index and its scheduling round (`Worker::round`). `None` off the
/// runtime. Only `rq-striped` uses it (home stripe, fairness rotation); the other backends
/// ignore it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caller {
    pub(crate) thread: usize,
    pub(crate) round: u32,
}

use std::collections::VecDeque;

use crate::backoff::Backoff;
use crate::loom_shim::{fence, AtomicUsize, CachePadded, Ordering, UnsafeCell};

struct Cell {
    /// `seq - index`: see "Zero initialisation". `seq == pos` means free for the producer
    /// of position `pos`; `seq == pos + 1` means holding the value pushed at `pos`.
    seq_rel: AtomicUsize,
    value: UnsafeCell<u32>,
}

/// Vyukov's bounded MPMC queue of `u32`s, with occupancy checks instead of "full"/"empty"
/// inferences from a single cell (see the module doc).
#[cfg_attr(not(any(feature = "rq-mpmc", feature = "rq-striped")), allow(dead_code))] // tests only
pub(crate) struct MpmcRing {
    /// Next position to pop. Only grows (wrapping).
    head: CachePadded<AtomicUsize>,
    /// Next position to push. Only grows (wrapping).
    tail: CachePadded<AtomicUsize>,
    buffer: CellBuf,
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
                // Release on success: every write of `tail` is this CAS, so all of them form
                // one release sequence, and a thread that acquires a `tail` value sees every
                // head advance that happened before the pushes below it (the lap-behind
                // occupancy check relies on this). Relaxed on failure: a new guess.
                match self.tail.compare_exchange_weak(pos, pos.wrapping_add(1), Ordering::Release, Ordering::Relaxed) {
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
                self.check_occupancy();
                backoff.snooze();
                // Relaxed: a fresh guess, validated by the CAS (as the first load).
                pos = self.tail.load(Ordering::Relaxed);
            } else {
                // Another producer already took `pos`; catch up. Relaxed: as above.
                pos = self.tail.load(Ordering::Relaxed);
            }
        }
    }

    /// The lap-behind branch of `push`: panics if the ring holds `capacity` values (the push
    /// under way would exceed it: an actor was enqueued twice); otherwise the lap-behind cell
    /// is a stalled consumer's, and the caller waits it out.
    ///
    /// Never overestimates the occupancy, so it never panics while the at-most-once rule
    /// holds. The rule gives: a value is pushed again only after the pop that took it out
    /// won its head CAS (the slot state machine's Release/Acquire transitions order the two).
    /// Let `t` and `h` be the values read below and suppose `t - h >= capacity`. The values
    /// pushed at the `capacity` positions below `t`, with the value this push carries, are
    /// `capacity + 1` values out of at most `max_actors <= capacity` distinct ones, so some
    /// value was pushed at a position `q` in `h..t` and again later: at a position below
    /// `t`, or by this push. Either way the head CAS past `q` happened before our `head`
    /// load: through the later push's tail CAS, which our Acquire load of `tail` synchronises
    /// with (all tail CASes are Release and form one release sequence), or through our own
    /// push. So the load returns more than `q >= h`: a contradiction.
    ///
    /// The caller's `pos` guess is not used: read before its cell's sequence, it may be
    /// older than a `head` read here (the stalled consumer finished, and another push and pop
    /// went through `pos`). A fresh `tail` can still be overtaken by `head` before the
    /// second load; the difference is compared signed, so that reads as no occupancy rather
    /// than a wrapped huge one.
    #[cold]
    #[inline(never)]
    fn check_occupancy(&self) {
        // Acquire: see the doc comment; pairs with the Release of every tail CAS.
        let tail = self.tail.load(Ordering::Acquire);
        // Relaxed: write-read coherence after the Acquire above is all the argument needs.
        let head = self.head.load(Ordering::Relaxed);
        // Signed: `head` may have passed `tail` since the load above.
        if tail.wrapping_sub(head) as isize >= self.capacity() as isize {
            panic!(
                "smarm run queue over capacity (tail {tail}, head {head}, capacity {}): \
                 an actor was enqueued twice, which the slot state machine forbids",
                self.capacity()
            );
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
                // Relaxed (both): as in `push`; the value was acquired by the seq load above
                // and the cell is handed back by the Release seq store in `set_seq`.
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
                // Relaxed (after the fence): only compared with `pos`; a stale value at worst
                // reports a spurious empty, which is benign (see "Capacity" in the module doc).
                let tail = self.tail.load(Ordering::Relaxed);
                if tail == pos || backoff.is_completed() {
                    return None;
                }
                backoff.snooze();
                // Relaxed: a fresh guess, validated by the CAS (as the first load).
                pos = self.head.load(Ordering::Relaxed);
            } else {
                // Relaxed: as above.
                pos = self.head.load(Ordering::Relaxed);
            }
        }
    }

    /// Appends `values` in order, claiming each run of free cells with one `tail` CAS
    /// instead of one per value (a full local queue's overflow moves here in one go).
    ///
    /// Why checking the cells before the CAS is sound: a cell is free for position `q`
    /// (`seq == q`) until the producer that claims `q` writes it, and claiming `q` moves
    /// `tail` past `q`. The CAS from `pos` succeeds only if `tail` is still `pos <= q` (it
    /// only grows), so every cell seen free in `pos..pos + k` is still free and now ours.
    /// A cell not free (a stalled consumer's, or one claimed since) ends the run; the
    /// first cell not free falls back to [`Self::push`], which waits the stall out.
    pub(crate) fn push_batch(&self, mut values: &[u32]) {
        let mut backoff = Backoff::new();
        while !values.is_empty() {
            // Relaxed: a guess validated by the CAS, as in `push`.
            let pos = self.tail.load(Ordering::Relaxed);
            // Acquire (each): pairs with the consumers' Release in `pop`, as in `push`.
            let k = (0..values.len().min(self.capacity()))
                .take_while(|&i| self.seq(pos.wrapping_add(i), Ordering::Acquire) == pos.wrapping_add(i))
                .count();
            if k == 0 {
                self.push(values[0]);
                values = &values[1..];
                continue;
            }
            // Release on success: as in `push` (every tail write is a Release CAS, one
            // release sequence). Relaxed on failure: a new guess.
            if self.tail.compare_exchange_weak(pos, pos.wrapping_add(k), Ordering::Release, Ordering::Relaxed).is_err()
            {
                backoff.spin();
                continue;
            }
            for (i, &v) in values[..k].iter().enumerate() {
                let q = pos.wrapping_add(i);
                // SAFETY: the CAS above claimed positions pos..pos + k, whose cells were free
                // (see the doc comment): ours to write until we publish seq = q + 1.
                self.buffer[q & self.mask].value.with_mut(|p| unsafe { *p = v });
                self.set_seq(q, q.wrapping_add(1));
            }
            values = &values[k..];
        }
    }

    /// Takes up to `out.len()` of the oldest values into `out` with one `head` CAS; returns
    /// how many. 0 if the ring is (or briefly looks) empty, as [`Self::pop`].
    ///
    /// Sound for the same reason as `push_batch`: a published cell (`seq == q + 1`) stays
    /// published until the consumer that claims `q` releases it, and claiming `q` moves
    /// `head` past `q`, which fails a CAS from `pos <= q`.
    pub(crate) fn pop_batch(&self, out: &mut [u32]) -> usize {
        if out.is_empty() {
            return 0;
        }
        let mut backoff = Backoff::new();
        loop {
            // Relaxed: validated by the CAS; values are acquired through the cells' seq.
            let pos = self.head.load(Ordering::Relaxed);
            // Acquire (each): pairs with the producer's Release of seq = q + 1.
            let k = (0..out.len().min(self.capacity()))
                .take_while(|&i| {
                    let q = pos.wrapping_add(i);
                    self.seq(q, Ordering::Acquire) == q.wrapping_add(1)
                })
                .count();
            if k == 0 {
                // Empty, mid-publish or contended: `pop` sorts that out.
                return match (out.first_mut(), self.pop()) {
                    (Some(o), Some(v)) => {
                        *o = v;
                        1
                    }
                    _ => 0,
                };
            }
            // Relaxed (both): as in `pop`.
            if self.head.compare_exchange_weak(pos, pos.wrapping_add(k), Ordering::Relaxed, Ordering::Relaxed).is_err()
            {
                backoff.spin();
                continue;
            }
            for (i, o) in out[..k].iter_mut().enumerate() {
                let q = pos.wrapping_add(i);
                // SAFETY: the CAS above claimed positions pos..pos + k, whose cells held
                // published values (see the doc comment); nobody writes them until we
                // release each with seq = q + capacity.
                *o = self.buffer[q & self.mask].value.with(|p| unsafe { *p });
                self.set_seq(q, q.wrapping_add(self.capacity()));
            }
            return k;
        }
    }

    /// [`Self::push`]; the caller is ignored (one ring, no home).
    #[cfg_attr(not(feature = "rq-mpmc"), allow(dead_code))] // the runtime's queue only with rq-mpmc
    #[inline]
    pub(crate) fn push_from(&self, value: u32, _caller: Option<Caller>) {
        self.push(value)
    }

    /// [`Self::push_batch`]; the caller is ignored.
    #[cfg_attr(not(feature = "rq-mpmc"), allow(dead_code))] // the runtime's queue only with rq-mpmc
    pub(crate) fn push_batch_from(&self, values: &[u32], _caller: Option<Caller>) {
        self.push_batch(values)
    }

    /// [`Self::pop_batch`]; the caller is ignored.
    #[cfg_attr(not(feature = "rq-mpmc"), allow(dead_code))] // the runtime's queue only with rq-mpmc
    pub(crate) fn pop_batch_from(&self, out: &mut [u32], _caller: Option<Caller>) -> usize {
        self.pop_batch(out)
    }

    /// [`Self::pop`]; the caller is ignored.
    #[cfg_attr(not(feature = "rq-mpmc"), allow(dead_code))] // the runtime's queue only with rq-mpmc
    #[inline]
    pub(crate) fn pop_from(&self, _caller: Option<Caller>) -> Option<u32> {
        self.pop()
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

/// `rq-striped`: several [`MpmcRing`]s, each able to hold every actor (see the module doc).
#[cfg_attr(not(feature = "rq-striped"), allow(dead_code))] // tests only
pub(crate) struct StripedRing {
    stripes: Box<[MpmcRing]>,
    /// `stripes.len() - 1`; the length is a power of two.
    mask: usize,
}

#[cfg_attr(not(feature = "rq-striped"), allow(dead_code))] // tests only
impl StripedRing {
    /// Number of stripes. Fixed: `new(capacity)` does not know the thread count (and
    /// asking the OS for the CPU count costs file reads on every `run`). Four divides the
    /// contention of typical thread counts. With fewer threads than stripes the spare
    /// stripes mostly cost probes: a scheduler thread pushes to its own home stripe, which
    /// has a consumer; only pushes from outside the runtime (a plain thread's wake, the
    /// root's spawn) and pushes past a stalled stripe land there, and the fairness
    /// rotation serves them even while every thread's home stays busy (later than FIFO
    /// would: the price of not knowing the thread count).
    pub(crate) const STRIPES: usize = 4;
    /// When a thread's scheduling round (`Worker::round`) is a multiple of `FAIRNESS`, its
    /// `pop` starts at a rotating stripe instead of its home: a thread popping every round
    /// looks at each stripe first once every `FAIRNESS * STRIPES` rounds, however busy its
    /// home stays. (Rounds that take the wake slot or inbox instead of popping can skip a
    /// multiple; the rotation is then later, not lost, unless a thread's pattern of rounds
    /// stays in lockstep with `FAIRNESS` indefinitely.)
    pub(crate) const FAIRNESS: u32 = 16;

    /// [`Self::STRIPES`] stripes, each holding at least `capacity` values.
    pub(crate) fn new(capacity: usize) -> StripedRing {
        StripedRing::with_stripes(capacity, Self::STRIPES)
    }

    /// `stripes` (rounded up to a power of two) stripes of at least `capacity` values each.
    fn with_stripes(capacity: usize, stripes: usize) -> StripedRing {
        let n = stripes.max(1).next_power_of_two();
        StripedRing { stripes: (0..n).map(|_| MpmcRing::new(capacity)).collect(), mask: n - 1 }
    }

    /// True if `ring`'s next push would find its cell still holding the previous lap's
    /// value, i.e. a consumer is stalled between claiming that cell and releasing it (the
    /// ring cannot be full; see "Capacity" in the module doc). Only a hint: the answer can
    /// be stale by the time we push, and `MpmcRing::push` waits a real stall out anyway.
    fn looks_stalled(ring: &MpmcRing) -> bool {
        // Relaxed (both loads): a heuristic choice of stripe; nothing is published or
        // consumed on the strength of it, and `push` re-reads both with its own orderings.
        let pos = ring.tail.load(Ordering::Relaxed);
        (ring.seq(pos, Ordering::Relaxed).wrapping_sub(pos) as isize) < 0
    }

    /// Appends `value` to the calling thread's home stripe (off the runtime: the stripe
    /// `value` selects), or to the next stripe that does not look stalled.
    pub(crate) fn push_from(&self, value: u32, caller: Option<Caller>) {
        let first = match caller {
            Some(c) => c.thread,
            None => value as usize,
        } & self.mask;
        for i in 0..=self.mask {
            let stripe = &self.stripes[(first + i) & self.mask];
            if !Self::looks_stalled(stripe) {
                stripe.push(value);
                return;
            }
        }
        // Every stripe looks stalled: wait on the home one (spin, then yield the OS thread).
        self.stripes[first].push(value);
    }

    /// Takes a value from the calling thread's home stripe, else from the first other
    /// stripe that has one (every `FAIRNESS`-th round the probe starts at a rotating
    /// stripe); `None` if every stripe is (or briefly looks) empty.
    pub(crate) fn pop_from(&self, caller: Option<Caller>) -> Option<u32> {
        let start = match caller {
            Some(Caller { thread, round }) if round % Self::FAIRNESS == 0 => {
                thread.wrapping_add((round / Self::FAIRNESS) as usize)
            }
            Some(c) => c.thread,
            None => 0,
        };
        for i in 0..=self.mask {
            let stripe = &self.stripes[start.wrapping_add(i) & self.mask];
            // Two loads skip an empty stripe without `pop`'s fence. A stale "empty" is a
            // spurious empty, benign as in `MpmcRing::pop` (see the module doc).
            if stripe.is_empty() {
                continue;
            }
            if let Some(v) = stripe.pop() {
                return Some(v);
            }
        }
        None
    }

    /// Appends `values` to one stripe chosen as [`Self::push_from`] chooses (by the first
    /// value off the runtime), in one batch.
    pub(crate) fn push_batch_from(&self, values: &[u32], caller: Option<Caller>) {
        let Some(&v0) = values.first() else { return };
        let first = match caller {
            Some(c) => c.thread,
            None => v0 as usize,
        } & self.mask;
        let pick = (0..=self.mask).map(|i| (first + i) & self.mask).find(|&k| !Self::looks_stalled(&self.stripes[k]));
        self.stripes[pick.unwrap_or(first)].push_batch(values);
    }

    /// One value, as [`Self::pop_from`] (a batch from one stripe would skip the others'
    /// fairness rotation).
    pub(crate) fn pop_batch_from(&self, out: &mut [u32], caller: Option<Caller>) -> usize {
        let Some(o) = out.first_mut() else { return 0 };
        match self.pop_from(caller) {
            Some(v) => {
                *o = v;
                1
            }
            None => 0,
        }
    }

    /// `push_from` off the runtime (tests and loom models).
    #[cfg(any(test, loom))]
    pub(crate) fn push(&self, value: u32) {
        self.push_from(value, None)
    }

    /// `pop_from` off the runtime (tests and loom models).
    #[cfg(any(test, loom))]
    pub(crate) fn pop(&self) -> Option<u32> {
        self.pop_from(None)
    }

    /// Values pushed and not yet popped, summed over the stripes. A snapshot unless
    /// quiescent; after the caller's SeqCst fence it reads every stripe's counters, so a
    /// push to any stripe ordered before that fence is counted (the idle protocol).
    pub(crate) fn len(&self) -> usize {
        self.stripes.iter().map(MpmcRing::len).sum()
    }

    /// True if every stripe is empty (see [`Self::len`] for the ordering).
    pub(crate) fn is_empty(&self) -> bool {
        self.stripes.iter().all(MpmcRing::is_empty)
    }
}

/// `rq-mutex`: a `VecDeque` under a lock, with a lock-free length mirror.
#[cfg_attr(not(feature = "rq-mutex"), allow(dead_code))] // tests only
pub(crate) struct MutexQueue {
    /// `queue.len()`, stored inside the lock after every change; read without it.
    len: CachePadded<AtomicUsize>,
    queue: parking_lot::Mutex<VecDeque<u32>>,
    capacity: usize,
}

#[cfg_attr(not(feature = "rq-mutex"), allow(dead_code))] // tests only
impl MutexQueue {
    /// A queue holding up to `capacity` values, all reserved now (no reallocation under
    /// the lock later).
    pub(crate) fn new(capacity: usize) -> MutexQueue {
        let capacity = capacity.max(1);
        MutexQueue {
            len: CachePadded(AtomicUsize::new(0)),
            queue: parking_lot::Mutex::new(VecDeque::with_capacity(capacity)),
            capacity,
        }
    }

    /// Appends `value`.
    ///
    /// # Panics
    /// If the queue already holds `capacity` values: an actor was enqueued twice.
    pub(crate) fn push(&self, value: u32) {
        let mut q = self.queue.lock();
        if q.len() >= self.capacity {
            panic!(
                "smarm run queue over capacity (length {}, capacity {}): an actor was enqueued \
                 twice, which the slot state machine forbids",
                q.len(),
                self.capacity
            );
        }
        q.push_back(value);
        // Release: pairs with the Acquire in `len`, so a reader that sees this length sees
        // the queue state behind it. The idle protocol's Dekker ordering needs no more than
        // the store itself: the pusher's SeqCst fence follows it (after the unlock).
        self.len.store(q.len(), Ordering::Release);
    }

    /// [`Self::push`]; the caller is ignored.
    #[inline]
    pub(crate) fn push_from(&self, value: u32, _caller: Option<Caller>) {
        self.push(value)
    }

    /// [`Self::pop`]; the caller is ignored.
    #[inline]
    pub(crate) fn pop_from(&self, _caller: Option<Caller>) -> Option<u32> {
        self.pop()
    }

    /// Appends `values` in order under one lock.
    ///
    /// # Panics
    /// As [`Self::push`].
    pub(crate) fn push_batch_from(&self, values: &[u32], _caller: Option<Caller>) {
        let mut q = self.queue.lock();
        if q.len() + values.len() > self.capacity {
            panic!(
                "smarm run queue over capacity (length {} + {}, capacity {}): an actor was \
                 enqueued twice, which the slot state machine forbids",
                q.len(),
                values.len(),
                self.capacity
            );
        }
        q.extend(values);
        // Release: as in `push`.
        self.len.store(q.len(), Ordering::Release);
    }

    /// Takes up to `out.len()` of the oldest values under one lock; returns how many.
    pub(crate) fn pop_batch_from(&self, out: &mut [u32], _caller: Option<Caller>) -> usize {
        // Relaxed: as in `pop`.
        if self.len.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let mut q = self.queue.lock();
        let k = out.len().min(q.len());
        for (o, v) in out.iter_mut().zip(q.drain(..k)) {
            *o = v;
        }
        // Release: as in `push`.
        self.len.store(q.len(), Ordering::Release);
        k
    }

    /// Takes the oldest value, or `None` if the queue is (or briefly looks) empty.
    pub(crate) fn pop(&self) -> Option<u32> {
        // Relaxed: only decides whether to take the lock. A stale zero is a spurious empty
        // (benign, as in the module doc); a stale non-zero takes the lock, which is exact.
        if self.len.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let mut q = self.queue.lock();
        let v = q.pop_front();
        // Release: as in `push`.
        self.len.store(q.len(), Ordering::Release);
        v
    }

    /// Values queued, without the lock: exact when quiescent, a snapshot otherwise. Callers
    /// that order it against their own stores (the idle protocol) fence (SeqCst) first.
    pub(crate) fn len(&self) -> usize {
        // Acquire: pairs with the Release stores in `push`/`pop`. The idle protocol's
        // ordering comes from its SeqCst fences, which order this load after the caller's
        // own announcement; no stronger ordering on the load itself is needed.
        self.len.load(Ordering::Acquire)
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The cell array: fresh zero pages outside loom (see `zeroed`: a large `calloc` would be
/// memset by glibc once its mmap threshold has risen), a plain boxed slice under loom.
#[cfg(not(loom))]
type CellBuf = crate::zeroed::Zeroed<Cell>;
#[cfg(loom)]
type CellBuf = Box<[Cell]>;

#[cfg(not(loom))]
fn zeroed_cells(len: usize) -> CellBuf {
    crate::zeroed::Zeroed::new(len)
}

// SAFETY: `Cell` is an AtomicUsize and a u32 in an UnsafeCell, for which all-zero bytes are
// valid values (seq_rel = 0 is the documented initial state); neither needs a drop.
#[cfg(not(loom))]
unsafe impl crate::zeroed::ZeroValid for Cell {}

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

    /// Batches keep FIFO order across laps, mixed with single pushes and pops; a batch
    /// pop takes what there is. The striped ring is FIFO per stripe only, so for it the
    /// check is that every value comes out exactly once.
    #[test]
    fn batches_are_fifo_across_laps() {
        fn check(
            fifo: bool,
            push: impl Fn(&[u32]),
            pop: impl Fn(&mut [u32]) -> usize,
            single_pop: impl Fn() -> Option<u32>,
        ) {
            let mut next_in = 0u32;
            let mut seen = Vec::new();
            for round in 0..200u32 {
                let k = 1 + round % 7;
                let vals: Vec<u32> = (next_in..next_in + k).collect();
                push(&vals);
                next_in += k;
                let mut out = [0u32; 5];
                let n = pop(&mut out[..(round % 5 + 1) as usize]);
                assert!(n >= 1, "a non-empty queue gives at least one");
                seen.extend_from_slice(&out[..n]);
                if round % 3 == 0 {
                    while let Some(v) = single_pop() {
                        seen.push(v);
                    }
                }
            }
            while let Some(v) = single_pop() {
                seen.push(v);
            }
            let mut out = [0u32; 4];
            assert_eq!(pop(&mut out), 0, "empty");
            if !fifo {
                seen.sort_unstable();
            }
            assert_eq!(seen, (0..next_in).collect::<Vec<_>>());
        }
        let r = MpmcRing::new(16);
        check(true, |v| r.push_batch(v), |o| r.pop_batch(o), || r.pop());
        assert!(r.is_empty());
        let m = MutexQueue::new(16);
        check(true, |v| m.push_batch_from(v, None), |o| m.pop_batch_from(o, None), || m.pop());
        let st = StripedRing::new(16);
        check(false, |v| st.push_batch_from(v, None), |o| st.pop_batch_from(o, None), || st.pop());
    }

    /// A batch longer than the ring's free run is split: what fits goes in one claim, the
    /// rest after the consumer makes room.
    #[test]
    fn a_batch_up_to_capacity_fills_the_ring() {
        let r = MpmcRing::new(8);
        r.push(100);
        assert_eq!(r.pop(), Some(100));
        let vals: Vec<u32> = (0..8).collect();
        r.push_batch(&vals);
        assert_eq!(r.len(), 8);
        let mut out = [0u32; 16];
        assert_eq!(r.pop_batch(&mut out), 8);
        assert_eq!(&out[..8], &vals[..]);
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

    /// Pins the calling thread to `cpu`.
    fn pin_to_cpu(cpu: usize) {
        // SAFETY: `cpu_set_t` is plain bits (all-zero is the empty set); the calls only read
        // and write the set we pass, and pid 0 names the calling thread.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0, "sched_setaffinity");
        }
    }

    /// The first CPU the calling thread may run on.
    fn first_allowed_cpu() -> usize {
        // SAFETY: as in `pin_to_cpu`.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set), 0, "sched_getaffinity");
            (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).expect("some CPU is allowed")
        }
    }

    std::thread_local! {
        /// A single-stepped worker's random state (xorshift); 0 when not single-stepping.
        /// Const-initialised, so the SIGTRAP handler can use it.
        static STEPPING: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
    }

    /// The x86 trap flag: the CPU raises a debug trap (SIGTRAP) after every instruction.
    const EFLAGS_TF: libc::greg_t = 0x100;

    /// On average, one in this many single-stepped instructions gives up the CPU.
    const YIELD_EVERY: u32 = 64;

    /// SIGTRAP handler: keeps the trap flag set while the thread single-steps, and after a
    /// random instruction gives up the CPU, so the thread stops there while its peers
    /// (pinned to the same CPU) run: a preemption at an instruction chosen uniformly, not
    /// weighted by time as an OS preemption is.
    extern "C" fn step(_: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
        // SAFETY: the kernel passes the interrupted context, ours alone until we return.
        let gregs = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
        let mut x = STEPPING.with(|s| s.get());
        // A panicking worker (the failure this test looks for) stops single-stepping, so its
        // panic report is printed at full speed. (`panicking` only reads a global and a
        // const-initialised thread-local counter: fine in a signal handler.)
        if x == 0 || std::thread::panicking() {
            gregs[libc::REG_EFL as usize] &= !EFLAGS_TF;
            return;
        }
        gregs[libc::REG_EFL as usize] |= EFLAGS_TF;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        STEPPING.with(|s| s.set(x));
        if x % YIELD_EVERY == 0 {
            // SAFETY: a plain system call (async-signal-safe; cannot fail, errno untouched).
            unsafe { libc::sched_yield() };
        }
    }

    /// Schedulers passing two actors through a capacity-2 ring, all pinned to ONE CPU and
    /// single-stepped, each giving up the CPU after random instructions. So a consumer stops
    /// between its head CAS and its sequence store (its cell frozen), a producer laps onto
    /// that cell and stops inside its occupancy check while the others run on. Every actor is
    /// queued at most once, so no push may report "over capacity".
    #[test]
    fn lap_behind_push_on_one_cpu_never_reports_over_capacity() {
        use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
        use std::sync::Arc;
        const THREADS: u32 = 3;
        const REQUEUES: usize = 300;

        /// Stops single-stepping when the worker ends, and if it panicked, stops the others
        /// (the actor it held will never come back).
        struct Finish<'a>(&'a AtomicBool);
        impl Drop for Finish<'_> {
            fn drop(&mut self) {
                STEPPING.with(|s| s.set(0));
                if std::thread::panicking() {
                    self.0.store(true, SeqCst);
                }
            }
        }

        // SAFETY: installs a handler that touches only its thread's `STEPPING` and the
        // interrupted context; it is restored below, once no thread single-steps any more.
        let previous = unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = step as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            let mut previous: libc::sigaction = std::mem::zeroed();
            assert_eq!(libc::sigaction(libc::SIGTRAP, &sa, &mut previous), 0);
            previous
        };

        let cpu = first_allowed_cpu();
        let ring = Arc::new(MpmcRing::new(2));
        ring.push(0);
        ring.push(1);
        let failed = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..THREADS)
            .map(|k| {
                let (ring, failed) = (ring.clone(), failed.clone());
                std::thread::spawn(move || {
                    pin_to_cpu(cpu);
                    let _finish = Finish(&failed);
                    STEPPING.with(|s| s.set(0x9e37_79b9 ^ (k + 1).wrapping_mul(0x85eb_ca6b)));
                    // SAFETY: the handler installed above sets the trap flag in our context.
                    unsafe { libc::raise(libc::SIGTRAP) };
                    let mut done = 0;
                    while done < REQUEUES && !failed.load(SeqCst) {
                        match ring.pop() {
                            Some(v) => {
                                ring.push(v);
                                done += 1;
                            }
                            // Both actors are elsewhere: give the CPU to their holders, as a
                            // scheduler thread with nothing to run would sleep.
                            None => std::thread::yield_now(),
                        }
                    }
                })
            })
            .collect();
        let results: Vec<_> = workers.into_iter().map(|w| w.join()).collect();
        // SAFETY: restores the action saved above; the workers have ended.
        unsafe { libc::sigaction(libc::SIGTRAP, &previous, std::ptr::null_mut()) };
        for r in results {
            r.unwrap();
        }
        let mut all: Vec<u32> = std::iter::from_fn(|| ring.pop()).collect();
        all.sort_unstable();
        assert_eq!(all, [0, 1]);
    }

    /// The interface the runtime uses, so one test body covers every backend.
    trait Queue: Send + Sync + 'static {
        fn push(&self, v: u32);
        fn pop(&self) -> Option<u32>;
        fn len(&self) -> usize;
        fn is_empty(&self) -> bool;
    }

    macro_rules! impl_queue {
        ($($t:ty),*) => {$(
            impl Queue for $t {
                fn push(&self, v: u32) {
                    <$t>::push_from(self, v, None)
                }
                fn pop(&self) -> Option<u32> {
                    <$t>::pop_from(self, None)
                }
                fn len(&self) -> usize {
                    <$t>::len(self)
                }
                fn is_empty(&self) -> bool {
                    <$t>::is_empty(self)
                }
            }
        )*};
    }
    impl_queue!(MpmcRing, StripedRing, MutexQueue);

    /// Pops everything left, checking that every value in `0..n` came out exactly once
    /// (counting `seen` from earlier pops) and that the queue then reads empty.
    fn drain_exactly_once(q: &impl Queue, n: u32, mut seen: Vec<u8>) {
        while let Some(v) = q.pop() {
            seen[v as usize] += 1;
        }
        assert!(q.is_empty());
        assert_eq!(q.len(), 0);
        assert_eq!(q.pop(), None);
        for (v, &c) in seen.iter().enumerate().take(n as usize) {
            assert_eq!(c, 1, "value {v} came out {c} times");
        }
    }

    /// Single thread: every value in, every value out once; `len` counts across the queue.
    fn no_loss_no_duplication(q: impl Queue) {
        assert_eq!(q.pop(), None);
        let n = 64u32;
        for v in 0..n {
            q.push(v);
            assert_eq!(q.len(), v as usize + 1);
        }
        assert!(!q.is_empty());
        // Half out, half again in (each value queued at most once at a time, as the runtime
        // does), then drain.
        let mut seen = vec![0u8; n as usize];
        for _ in 0..n / 2 {
            let v = q.pop().expect("queue holds values");
            seen[v as usize] += 1;
        }
        assert_eq!(q.len(), (n / 2) as usize);
        drain_exactly_once(&q, n, seen);
    }

    /// Two producers and two consumers: every value out exactly once. Producers keep the
    /// occupancy below the capacity as the runtime does (here by waiting for room).
    fn concurrent_no_loss(q: impl Queue, capacity: usize) {
        use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
        use std::sync::Arc;
        let q = Arc::new(q);
        let per = 20_000u32;
        let got = Arc::new(std::sync::Mutex::new(vec![0u8; (per * 2) as usize]));
        let count = Arc::new(AtomicU32::new(0));
        let mut hs = vec![];
        for p in 0..2u32 {
            let q = q.clone();
            hs.push(std::thread::spawn(move || {
                for i in 0..per {
                    while q.len() >= capacity - 4 {
                        std::thread::yield_now();
                    }
                    q.push(p * per + i);
                }
            }));
        }
        for _ in 0..2 {
            let (q, got, count) = (q.clone(), got.clone(), count.clone());
            hs.push(std::thread::spawn(move || {
                // Relaxed: a progress counter; the values themselves go through the queue
                // and the Mutex.
                while count.load(Relaxed) < per * 2 {
                    if let Some(v) = q.pop() {
                        got.lock().unwrap()[v as usize] += 1;
                        count.fetch_add(1, Relaxed);
                    }
                }
            }));
        }
        for h in hs {
            h.join().unwrap();
        }
        assert!(q.is_empty());
        assert!(got.lock().unwrap().iter().all(|&c| c == 1));
    }

    #[test]
    fn concurrent_producers_consumers_lose_nothing() {
        concurrent_no_loss(MpmcRing::new(64), 64);
    }

    #[test]
    fn mpmc_no_loss_no_duplication() {
        no_loss_no_duplication(MpmcRing::new(64));
    }

    // ---- rq-striped ----

    #[test]
    fn striped_no_loss_no_duplication() {
        no_loss_no_duplication(StripedRing::with_stripes(64, 4));
        no_loss_no_duplication(StripedRing::new(64));
    }

    #[test]
    fn striped_concurrent_lose_nothing() {
        concurrent_no_loss(StripedRing::with_stripes(64, 4), 64);
    }

    /// One stripe is a plain ring: FIFO. (Several are FIFO per stripe only.)
    #[test]
    fn striped_single_stripe_is_fifo() {
        let q = StripedRing::with_stripes(8, 1);
        for i in 0..8 {
            q.push(i);
        }
        for i in 0..8 {
            assert_eq!(q.pop(), Some(i));
        }
        assert_eq!(q.pop(), None);
    }

    /// Off the runtime a push goes to the stripe its value selects; `len`/`is_empty` must
    /// see a value in any stripe, and `pop` must find it from any starting stripe.
    #[test]
    fn striped_counts_and_finds_every_stripe() {
        let q = StripedRing::with_stripes(8, 4);
        for stripe in 0..4u32 {
            q.push(stripe + 4);
            assert_eq!(q.stripes[stripe as usize].len(), 1, "value {} went to its stripe", stripe + 4);
            assert_eq!(q.len(), 1);
            assert!(!q.is_empty());
            assert_eq!(q.pop(), Some(stripe + 4));
            assert!(q.is_empty());
        }
    }

    /// Each stripe holds the whole capacity: every value may land in one stripe.
    #[test]
    fn striped_one_stripe_holds_everything() {
        let q = StripedRing::with_stripes(8, 4);
        for i in 0..8 {
            q.push(i * 4); // all select stripe 0
        }
        assert_eq!(q.stripes[0].len(), 8);
        assert_eq!(q.len(), 8);
        let mut got: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
        got.sort_unstable();
        assert_eq!(got, (0..8).map(|i| i * 4).collect::<Vec<_>>());
    }

    /// A consumer stalled between its head CAS and its sequence store freezes its cell; a
    /// push that would lap onto it goes to the next stripe instead of waiting.
    #[test]
    fn striped_push_skips_a_stalled_stripe() {
        use std::sync::Arc;
        let q = Arc::new(StripedRing::with_stripes(2, 2));
        q.push(0);
        q.push(2); // both in stripe 0, which is now at its (power-of-two) capacity
        let s0 = &q.stripes[0];
        // Play the stalled consumer: claim position 0 without releasing its cell.
        assert!(s0.head.compare_exchange(0, 1, Ordering::Relaxed, Ordering::Relaxed).is_ok());
        assert!(StripedRing::looks_stalled(s0));
        let pusher = {
            let q = q.clone();
            std::thread::spawn(move || q.push(4)) // selects stripe 0
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pusher.is_finished() && std::time::Instant::now() < deadline {
            std::thread::yield_now();
        }
        let skipped = pusher.is_finished();
        // Un-stall (the consumer releases its cell), so a waiting pusher can finish.
        s0.set_seq(0, s0.capacity());
        pusher.join().unwrap();
        assert!(skipped, "push waited on the stalled stripe instead of probing the next");
        assert_eq!(q.stripes[1].len(), 1);
        let mut got: Vec<u32> = std::iter::from_fn(|| q.pop()).collect();
        got.sort_unstable();
        assert_eq!(got, [2, 4]);
    }

    // ---- rq-mutex ----

    #[test]
    fn mutex_fifo_order_and_empty() {
        let q = MutexQueue::new(8);
        assert_eq!(q.pop(), None);
        for i in 0..8 {
            q.push(i);
        }
        assert_eq!(q.len(), 8);
        for i in 0..8 {
            assert_eq!(q.pop(), Some(i));
        }
        assert_eq!(q.pop(), None);
        assert!(q.is_empty());
    }

    #[test]
    fn mutex_wraps_and_stays_fifo() {
        let q = MutexQueue::new(4);
        for i in 0..1000u32 {
            q.push(i);
            q.push(i + 1);
            assert_eq!(q.pop(), Some(i));
            assert_eq!(q.pop(), Some(i + 1));
        }
    }

    #[test]
    #[should_panic(expected = "over capacity")]
    fn mutex_overfilling_is_a_loud_bug() {
        let q = MutexQueue::new(2);
        q.push(1);
        q.push(2);
        q.push(3);
    }

    #[test]
    fn mutex_no_loss_no_duplication() {
        no_loss_no_duplication(MutexQueue::new(64));
    }

    #[test]
    fn mutex_concurrent_lose_nothing() {
        concurrent_no_loss(MutexQueue::new(64), 64);
    }
}

/// Loom models of [`MpmcRing`]. Run with
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::{MpmcRing, StripedRing};
    use crate::loom_shim::loom_check;
    use crate::runtime::idle::Idle;
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

    /// `got` plus what is left in `ring`, sorted; the ring is then empty.
    fn with_rest_sorted(ring: &MpmcRing, mut got: Vec<u32>) -> Vec<u32> {
        while let Some(v) = ring.pop() {
            got.push(v);
        }
        got.sort_unstable();
        assert!(ring.is_empty());
        got
    }

    /// A batch push races a batch pop and a single pop: every value comes out exactly once.
    #[test]
    fn mpmc_batch_push_races_batch_pop() {
        loom_check(3, || {
            let ring = Arc::new(shifted_ring());
            let consumer = {
                let ring = ring.clone();
                thread::spawn(move || {
                    let mut out = [0u32; 2];
                    let n = ring.pop_batch(&mut out);
                    out[..n].to_vec()
                })
            };
            ring.push_batch(&[1, 2]);
            assert_eq!(with_rest_sorted(&ring, consumer.join().unwrap()), [1, 2]);
        });
    }

    /// A batch pop races a single pop for two values: each value is taken once.
    #[test]
    fn mpmc_batch_pop_races_pop() {
        loom_check(3, || {
            let ring = Arc::new(shifted_ring());
            ring.push_batch(&[1, 2]);
            let other = {
                let ring = ring.clone();
                thread::spawn(move || ring.pop())
            };
            let mut out = [0u32; 2];
            let n = ring.pop_batch(&mut out);
            let mut got = out[..n].to_vec();
            got.extend(other.join().unwrap());
            assert_eq!(with_rest_sorted(&ring, got), [1, 2]);
        });
    }

    /// Two batch pushes race: both batches arrive whole and in order, each a contiguous run
    /// (each claims its cells with one CAS).
    #[test]
    fn mpmc_two_batch_pushes() {
        loom_check(3, || {
            let ring = Arc::new(MpmcRing::new(4));
            let other = {
                let ring = ring.clone();
                thread::spawn(move || ring.push_batch(&[3, 4]))
            };
            ring.push_batch(&[1, 2]);
            other.join().unwrap();
            let mut out = [0u32; 4];
            assert_eq!(ring.pop_batch(&mut out), 4);
            assert!(out == [1, 2, 3, 4] || out == [3, 4, 1, 2], "{out:?}");
        });
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
            let got: Vec<u32> = consumers.into_iter().flat_map(|c| c.join().unwrap()).flatten().collect();
            assert_eq!(with_rest_sorted(&ring, got), [1, 2]);
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

    /// The lap-behind check must never overestimate occupancy. Two actors (0 and 1) in a
    /// capacity-2 ring, three schedulers: X and the main thread each pop an actor and push it
    /// back; Y pops one and keeps it. The interleaving the check must survive: X claims
    /// position 0 and stalls before releasing its cell; the main thread pops position 1 and
    /// its push of position 2 laps onto X's frozen cell (the lap-behind branch); before the
    /// main thread reads the counters, X releases the cell and pushes at position 2, and Y
    /// pops position 2. `head` (3) is now past the main thread's `tail` guess (2): an
    /// occupancy computed from that guess wraps and the push panics as "over capacity"
    /// although each actor was queued at most once.
    ///
    /// Each thread pops once without waiting for a value (a spurious or real empty just
    /// skips its push): blocking pops in three threads make executions longer than loom's
    /// branch limit.
    #[test]
    fn mpmc_lap_behind_push_outpaced_by_head_does_not_panic() {
        loom_check(3, || {
            let ring = Arc::new(MpmcRing::new(2));
            ring.push(0);
            ring.push(1);
            let requeue = |ring: &MpmcRing| {
                if let Some(v) = ring.pop() {
                    ring.push(v);
                }
            };
            let x = {
                let ring = ring.clone();
                thread::spawn(move || requeue(&ring))
            };
            let y = {
                let ring = ring.clone();
                thread::spawn(move || ring.pop())
            };
            requeue(&ring);
            x.join().unwrap();
            let mut all: Vec<u32> = y.join().unwrap().into_iter().collect();
            while let Some(v) = ring.pop() {
                all.push(v);
            }
            all.sort_unstable();
            assert_eq!(all, [0, 1]);
            assert!(ring.is_empty());
        });
    }

    /// `rq-striped` under the idle protocol (`runtime::idle`): the value lands in stripe 1
    /// (off the runtime the value selects the stripe) while the sleeper's `pop` starts at
    /// stripe 0. The sleeper's re-check must sum every stripe: either it sees the value or
    /// the waker sees its bit; otherwise it parks forever and loom reports a deadlock.
    #[test]
    fn striped_no_lost_wakeup() {
        loom_check(4, || {
            let idle = Arc::new(Idle::new(1));
            let q = Arc::new(StripedRing::with_stripes(2, 2));
            let sleeper = {
                let (idle, q) = (idle.clone(), q.clone());
                thread::spawn(move || loop {
                    if let Some(v) = q.pop() {
                        return v;
                    }
                    if idle.prepare_park(0, || !q.is_empty()) {
                        thread::park();
                        idle.clear(0);
                    }
                })
            };
            q.push(1);
            if let Some(k) = idle.wake_any() {
                assert_eq!(k, 0);
                sleeper.thread().unpark();
            }
            assert_eq!(sleeper.join().unwrap(), 1);
            assert!(q.is_empty());
        });
    }
}
