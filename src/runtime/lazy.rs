//! Lazy park timeouts: the protocol between a parking actor, the scheduler thread that
//! noted its request, and the timer wheel.
//!
//!
//! Most timed waits end long before their deadline (a `call`'s reply arrives in
//! microseconds; its timeout is 5 s), so a timed park does not touch the wheel or the clock
//! up front. The parking actor writes the timeout into its slot (`Slot::lazy_timeout`),
//! marks request `seq` PENDING in `Slot::lazy`, and notes `(index, seq, round)` on its
//! scheduler thread. That thread arms the request (puts it on the wheel at *arming time* +
//! timeout) only if, `LAZY_ARM_ROUNDS` scheduling rounds later or when the thread is about
//! to idle, the actor is still parked on that same request. So a timeout never fires early;
//! it may fire late by at most those rounds (each bounded by the preemption timeslice for
//! actors that make runtime calls). The actor ends the request when it resumes. If it
//! resumes on the thread it parked on and its note is still that thread's newest (the
//! usual case: a call's reply is handed straight back), it takes the note back and stores
//! IDLE: no other thread reads that note or arms that request. Otherwise `disarm_lazy`:
//! PENDING -> IDLE with one CAS when it was never armed, else under the timer lock, where
//! ARMED -> FIRED (by `fire_due`) and the key live, so the wheel never keeps an entry for
//! an actor that moved on. A thread holds at most 256 notes; a further one first arms the
//! oldest (early arming only makes that timeout count from later, never fire earlier).
//!
//! Limitation: only the noting thread arms its notes. While an actor holds that thread
//! without yielding it (a blocking OS call, a long `NoPreempt` section, a loop without
//! runtime calls), the timeouts noted there wait for it, even if other threads are idle;
//! and a wait woken without its condition before its note was armed counts its limit afresh
//! from that wake (an armed note hands its deadline back instead, see `LazyEnd`).
//!

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::worker::{
    current_actor_pid, current_worker, park_current, park_running, running_actor, yield_now, Worker, NONE,
};

use crate::runtime::Shared;
use crate::slot_state::{Pid, Slot, WaitKind};
use crate::wheel::{Action, LazyToken, Timers};

/// `Slot::lazy` states (low two bits; the request's sequence number is above them).
pub(crate) const LAZY_IDLE: u64 = 0;
/// Requested by a parking actor, not yet on the wheel.
pub(crate) const LAZY_PENDING: u64 = 1;
/// On the wheel; the key is in `Slot::lazy_key`.
pub(crate) const LAZY_ARMED: u64 = 2;
/// Fired: the actor was woken by its timeout.
pub(crate) const LAZY_FIRED: u64 = 3;

/// The `Slot::lazy` word of request `seq` in `state`.
#[inline]
pub(crate) fn lazy_word(seq: u64, state: u64) -> u64 {
    (seq << 2) | state
}

/// How a lazy park timeout ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LazyEnd {
    /// The timeout fired.
    Fired,
    /// The actor was woken first. If the request had been armed, the deadline it had on the
    /// wheel (the park's timeout counted from the arming, which came after the park began);
    /// None if it was never armed (the wake came within the rounds before arming).
    Woken(Option<Instant>),
}

/// Fires an armed request (from `Timers::fire_due`, under the timer lock): ARMED -> FIRED and
/// wake, unless the actor already disarmed it.
pub(crate) fn fire(sh: &Shared, t: LazyToken) {
    let Some(slot) = sh.slab.try_slot(t.index) else { return };
    // Relaxed: ARMED/FIRED transitions happen only under the timer lock we hold; the wake
    // below publishes with its own Release.
    let armed = lazy_word(t.seq, LAZY_ARMED);
    if slot.lazy.compare_exchange(armed, lazy_word(t.seq, LAZY_FIRED), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        sh.wake(sh.slab.pid(t.index, t.gen));
    }
}

/// Arms the pending lazy timeout `seq` of the parked actor `pid` (in `slot`) to fire
/// at `now` + its timeout. Does nothing if the actor has disarmed it meanwhile. Returns
/// whether this lowered the earliest deadline.
pub(crate) fn arm(timers: &Timers, slot: &Slot, pid: Pid, seq: u64, now: Instant) -> bool {
    // Relaxed: the caller's Acquire load of the PENDING word made this visible.
    let timeout = slot.lazy_timeout.load(Ordering::Relaxed);
    let at = timers.nanos(now).saturating_add(timeout).min(u64::MAX - 1);
    let mut wheel = timers.lock();
    // Relaxed: PENDING -> ARMED races only with the actor's PENDING -> IDLE (exactly one
    // CAS wins); every later transition of this request happens under the lock we hold.
    let pending = lazy_word(seq, LAZY_PENDING);
    if slot.lazy.compare_exchange(pending, lazy_word(seq, LAZY_ARMED), Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return false;
    }
    let token = LazyToken { index: pid.index(), gen: pid.generation(), seq };
    let (key, earliest) = timers.insert_locked(&mut wheel, at, Action::WakeLazy(token));
    // SAFETY: `lazy_key` is accessed only under the timer lock, which we hold.
    unsafe { *slot.lazy_key.get() = key };
    earliest
}

/// The parking actor's side, once resumed: ends lazy request `seq`, taking it off the
/// wheel if it was armed.
pub(crate) fn disarm(timers: &Timers, slot: &Slot, seq: u64) -> LazyEnd {
    let idle = lazy_word(seq, LAZY_IDLE);
    // Relaxed: a request never armed ends with this CAS (see `arm_lazy`).
    if slot.lazy.compare_exchange(lazy_word(seq, LAZY_PENDING), idle, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        return LazyEnd::Woken(None);
    }
    let mut wheel = timers.lock();
    // Relaxed: under the lock that orders every ARMED/FIRED transition.
    let cur = slot.lazy.load(Ordering::Relaxed);
    let (removed, end) = if cur == lazy_word(seq, LAZY_ARMED) {
        // SAFETY: accessed under the timer lock.
        let key = unsafe { *slot.lazy_key.get() };
        (wheel.cancel(key), LazyEnd::Woken(Some(timers.deadline_of(key))))
    } else {
        debug_assert_eq!(cur, lazy_word(seq, LAZY_FIRED), "smarm: lazy request in an unexpected state");
        (None, LazyEnd::Fired)
    };
    // Relaxed: the next reader of the word is this actor (numbering its next request; a
    // migration is ordered by the state word), or an arming thread holding an older note,
    // whose CAS fails on the seq whatever it sees.
    slot.lazy.store(idle, Ordering::Relaxed);
    drop(wheel);
    drop(removed);
    end
}

// ------------------------------------------------------------------------------------------
// The noting thread's side: a ring of pending requests, armed after a few rounds
// ------------------------------------------------------------------------------------------

/// A lazy park timeout not yet on the wheel.
#[derive(Clone, Copy)]
pub(super) struct PendingTimeout {
    pub(super) index: u32,
    /// The worker's round counter when the actor parked.
    pub(super) tick: u32,
    pub(super) seq: u64,
}

/// Rounds a lazy timeout waits before it is armed: an actor woken within that many
/// scheduling rounds (the common case for a call's reply) never touches the wheel.
pub(super) const LAZY_ARM_ROUNDS: u32 = 2;

/// A worker's pending lazy timeouts: a bounded FIFO touched only by its own thread (the
/// scheduler and the actor it runs), so plain `Cell`s suffice. The newest entry can also be
/// taken back by the actor that made it ([`PendingRing::take_newest`]).
pub(super) struct PendingRing {
    /// An array, not a slice: its length is a constant, so indexing needs no bounds check.
    buf: Box<[Cell<PendingTimeout>; PENDING_CAP as usize]>,
    /// Free-running positions; `tail - head` entries, at `pos % PENDING_CAP`.
    head: Cell<u32>,
    tail: Cell<u32>,
}

/// Entries a worker holds before it arms the oldest at once (a power of two).
const PENDING_CAP: u32 = 256;

impl PendingRing {
    pub(super) fn new() -> PendingRing {
        let empty = PendingTimeout { index: NONE, tick: 0, seq: 0 };
        PendingRing { buf: Box::new(std::array::from_fn(|_| Cell::new(empty))), head: Cell::new(0), tail: Cell::new(0) }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.head.get() == self.tail.get()
    }

    pub(super) fn is_full(&self) -> bool {
        self.tail.get().wrapping_sub(self.head.get()) == PENDING_CAP
    }

    pub(super) fn cell(&self, pos: u32) -> &Cell<PendingTimeout> {
        // The index is reduced modulo the buffer's length: never out of bounds.
        &self.buf[(pos % PENDING_CAP) as usize]
    }

    /// Appends an entry; the caller made room (`is_full` is false).
    pub(super) fn push(&self, p: PendingTimeout) {
        debug_assert!(!self.is_full());
        let t = self.tail.get();
        self.cell(t).set(p);
        self.tail.set(t.wrapping_add(1));
    }

    pub(super) fn front(&self) -> Option<PendingTimeout> {
        (!self.is_empty()).then(|| self.cell(self.head.get()).get())
    }

    pub(super) fn pop_front(&self) {
        debug_assert!(!self.is_empty());
        self.head.set(self.head.get().wrapping_add(1));
    }

    /// Removes the newest entry if it is request `seq` of actor `index`.
    pub(super) fn take_newest(&self, index: u32, seq: u64) -> bool {
        if self.is_empty() {
            return false;
        }
        let last = self.tail.get().wrapping_sub(1);
        let p = self.cell(last).get();
        if p.index != index || p.seq != seq {
            return false;
        }
        self.tail.set(last);
        true
    }
}

impl Worker {
    /// Moves lazy timeouts onto the wheel: those at least `LAZY_ARM_ROUNDS` rounds old, or
    /// all of them (`all`, before this thread idles). Requests whose actor was woken or
    /// disarmed meanwhile are dropped with one load each.
    pub(super) fn arm_timeouts(&self, all: bool) {
        let q = &self.pending_timeouts;
        if q.is_empty() {
            return;
        }
        let tick = self.tick.get();
        let mut now = None;
        let mut earliest = false;
        while let Some(p) = q.front() {
            if !all && tick.wrapping_sub(p.tick) < LAZY_ARM_ROUNDS {
                break;
            }
            q.pop_front();
            earliest |= self.arm_one(p, &mut now);
        }
        if earliest && !all {
            // As in `park_until`: an idle thread may be parked with a later timeout.
            self.shared.wake_one();
        }
    }

    /// Puts one pending request on the wheel if it is still pending and its actor still
    /// parked. Returns whether it became the wheel's earliest deadline.
    fn arm_one(&self, p: PendingTimeout, now: &mut Option<Instant>) -> bool {
        let sh = &*self.shared;
        let slot = sh.slab.slot(p.index);
        // Acquire: pairs with the Release store of PENDING (makes `lazy_timeout` visible).
        if slot.lazy.load(Ordering::Acquire) != lazy_word(p.seq, LAZY_PENDING) {
            return false;
        }
        // Woken already (QUEUED or running again): it disarms itself when it resumes.
        let Some(pid) = sh.slab.parked_pid(p.index) else { return false };
        let now = *now.get_or_insert_with(Instant::now);
        arm(&sh.timers, slot, pid, p.seq, now)
    }

    /// Notes a lazy timeout request of the running actor `index` (see `park_timeout`). A
    /// full ring first arms its oldest entry (early arming is never early firing: the
    /// timeout then counts from now, after the park began).
    ///
    /// Inlined into `park_timeout` (every timed park, a `call` among them), with the rare
    /// full-ring case out of line: out of line as a whole it cost ~15 instructions per
    /// gen_server call (callgrind, history 45).
    #[inline]
    pub(super) fn note_pending_timeout(&self, index: u32, seq: u64) {
        let q = &self.pending_timeouts;
        if q.is_full() {
            self.arm_oldest_pending();
        }
        q.push(PendingTimeout { index, tick: self.tick.get(), seq });
    }

    /// Makes room in a full ring: arms its oldest entry now.
    #[cold]
    #[inline(never)]
    fn arm_oldest_pending(&self) {
        let q = &self.pending_timeouts;
        if let Some(oldest) = q.front() {
            q.pop_front();
            if self.arm_one(oldest, &mut None) {
                self.shared.wake_one();
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// Timed parks
// ------------------------------------------------------------------------------------------

/// Parks the caller (actor or thread) until woken or until `deadline` passes. Returns false,
/// without parking, if the deadline has already passed; true otherwise. May return
/// spuriously: callers re-check their condition and the clock.
#[inline(always)]
#[track_caller]
pub(crate) fn park_until(deadline: Option<Instant>, kind: WaitKind) -> bool {
    let Some(deadline) = deadline else {
        park_current(kind);
        return true;
    };
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    if park_timeout(deadline - now, kind).is_none() {
        std::thread::park_timeout(deadline - now);
    }
    true
}

/// Parks the running actor until woken or until at least `timeout` has passed. Returns
/// None, doing nothing, off an actor; otherwise how the timeout ended. May return
/// spuriously (woken with nothing to see): callers re-check their condition.
///
/// The timeout is *lazy* (see the module doc): the request is noted on this thread and put
/// on the timer wheel only if the actor is still parked a couple of rounds
/// later, counting from then, so it never fires early and a prompt wake costs no wheel
/// traffic and no clock read.
#[track_caller]
pub(crate) fn park_timeout(timeout: Duration, kind: WaitKind) -> Option<LazyEnd> {
    let site = core::panic::Location::caller();
    // The worker is not used after the switch in `park_current`.
    let (w, index, slot) = running_actor()?;
    // Relaxed: only this actor starts requests on its slot, and it ended the last one itself.
    let seq = (slot.lazy.load(Ordering::Relaxed) >> 2) + 1;
    // Relaxed: published by the Release store of the PENDING word just below.
    // Saturating nanoseconds without `as_nanos`'s u128 arithmetic.
    let nanos = timeout.as_secs().saturating_mul(1_000_000_000).saturating_add(u64::from(timeout.subsec_nanos()));
    slot.lazy_timeout.store(nanos, Ordering::Relaxed);
    // Release: publishes `lazy_timeout` to the arming thread's Acquire load of this word.
    slot.lazy.store(lazy_word(seq, LAZY_PENDING), Ordering::Release);
    w.note_pending_timeout(index, seq);
    /// Ends the request on return or unwind, before this actor can end: the wheel never
    /// holds a timeout of an actor that is gone (the `Waiter` contract).
    struct Disarm {
        shared: *const Shared,
        slot: &'static Slot,
        index: u32,
        seq: u64,
    }
    impl Disarm {
        /// `w`: the worker of the thread the actor now runs on.
        #[inline(always)]
        fn finish(&self, w: &Worker) -> LazyEnd {
            // Resumed on the thread it parked on, before that thread looked at the request:
            // it is still the newest entry there, never seen by anyone (only this thread
            // reads its ring), so it ends without the CAS against a concurrent arming.
            if w.pending_timeouts.take_newest(self.index, self.seq) {
                // Relaxed: nobody else looks at a request that is on no ring and no wheel.
                self.slot.lazy.store(lazy_word(self.seq, LAZY_IDLE), Ordering::Relaxed);
                return LazyEnd::Woken(None);
            }
            // SAFETY: the runtime outlives its running actor.
            disarm(&unsafe { &*self.shared }.timers, self.slot, self.seq)
        }
    }
    impl Drop for Disarm {
        fn drop(&mut self) {
            // Unwinding out of the park (the actor was stopped): on some thread's actor.
            // SAFETY: a running actor's thread has a live worker.
            self.finish(unsafe { &*current_worker() });
        }
    }
    let guard = Disarm { shared: w.shared_ptr(), slot, index, seq };
    let w = park_running(w, slot, kind, site);
    let end = guard.finish(w);
    std::mem::forget(guard);
    Some(end)
}

/// How long a blocking receive may wait, in the form that costs the least: a relative
/// timeout is handed to the lazy park timeout as is, and turned into a deadline (one clock
/// read) only if the wait has to park a second time.
#[derive(Clone, Copy, Debug)]
pub(crate) enum WaitLimit {
    /// No limit.
    Forever,
    /// Until this instant.
    Until(Instant),
    /// At most this long from now (nothing parked yet).
    For(Duration),
    /// Parked once for this long and woken before its lazy timeout was armed, that is
    /// within the few scheduling rounds before arming: from the next park on it counts from
    /// a fresh clock read (late by at most those rounds, never early). Woken after the
    /// arming, the limit becomes `Until` the armed deadline instead, so a wait that is woken
    /// without its condition (a selective receive seeing other messages) keeps its deadline.
    Resumed(Duration),
}

impl WaitLimit {
    /// A limit of `timeout` from now (None: forever).
    pub(crate) fn from_timeout(timeout: Option<Duration>) -> WaitLimit {
        timeout.map_or(WaitLimit::Forever, WaitLimit::For)
    }

    /// The limit as a deadline (reads the clock for a relative limit).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        match *self {
            WaitLimit::Forever => None,
            WaitLimit::Until(d) => Some(d),
            WaitLimit::For(t) | WaitLimit::Resumed(t) => Some(crate::wheel::deadline_after(Instant::now(), t)),
        }
    }

    /// Parks the caller (actor or thread) within the limit. Returns true when the limit has
    /// passed (the caller takes a last look at its condition and times out); false when
    /// woken, possibly spuriously. Registers the caller's waiter before calling this.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn park(&mut self, kind: WaitKind) -> bool {
        // The two common cases inline; the rest (and a thread's park) out of line.
        match *self {
            WaitLimit::Forever => {
                park_current(kind);
                false
            }
            WaitLimit::For(t) if !t.is_zero() => match park_timeout(t, kind) {
                Some(LazyEnd::Fired) => true,
                // Woken first: the next park waits for what is left of the limit.
                Some(LazyEnd::Woken(Some(deadline))) => {
                    *self = WaitLimit::Until(deadline);
                    false
                }
                Some(LazyEnd::Woken(None)) => {
                    *self = WaitLimit::Resumed(t);
                    false
                }
                None => self.park_slow(kind),
            },
            _ => self.park_slow(kind),
        }
    }

    /// `park` for a deadline, a poll, a second park, and a thread's timed park (a relative
    /// limit reaches here only off an actor: `park` tried the lazy timeout first).
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn park_slow(&mut self, kind: WaitKind) -> bool {
        match *self {
            WaitLimit::Forever => {
                park_current(kind);
                false
            }
            WaitLimit::Until(d) => !park_until(Some(d), kind),
            // A zero timeout polls: the limit has passed without parking.
            WaitLimit::For(t) if t.is_zero() => true,
            WaitLimit::For(t) | WaitLimit::Resumed(t) => {
                *self = WaitLimit::Until(crate::wheel::deadline_after(Instant::now(), t));
                self.park_slow(kind)
            }
        }
    }
}

/// Parks the calling actor for at least `d`; see [`crate::sleep`].
#[track_caller]
pub(crate) fn sleep(d: Duration) {
    if current_actor_pid().is_none() {
        std::thread::sleep(d);
        return;
    }
    if d.is_zero() {
        yield_now();
        return;
    }
    let deadline = crate::wheel::deadline_after(Instant::now(), d);
    while park_until(Some(deadline), WaitKind::Sleep) {}
}

#[cfg(test)]
mod tests {
    use super::{PendingRing, PendingTimeout, PENDING_CAP};

    fn entry(index: u32, seq: u64) -> PendingTimeout {
        PendingTimeout { index, tick: 0, seq }
    }

    #[test]
    fn pending_ring_is_fifo_across_wraparound_and_reports_full() {
        let q = PendingRing::new();
        for round in 0..3u64 {
            for i in 0..PENDING_CAP {
                assert!(!q.is_full());
                q.push(entry(i, round));
            }
            assert!(q.is_full());
            for i in 0..PENDING_CAP {
                let p = q.front().expect("entry");
                assert_eq!((p.index, p.seq), (i, round));
                q.pop_front();
            }
            assert!(q.is_empty() && q.front().is_none());
        }
    }

    #[test]
    fn pending_ring_gives_back_only_the_matching_newest_entry() {
        let q = PendingRing::new();
        assert!(!q.take_newest(1, 1));
        q.push(entry(1, 1));
        q.push(entry(2, 7));
        assert!(!q.take_newest(1, 1), "not the newest");
        assert!(!q.take_newest(2, 6), "another request of the same actor");
        assert!(q.take_newest(2, 7));
        assert!(q.take_newest(1, 1));
        assert!(q.is_empty());
    }
}
