//! Deadlines for `sleep`, receive and call timeouts, and `send_after`.
//!
//! # Structure: a hashed timing wheel
//!
//! One wheel per runtime, under a short `RawMutex` (rank `Timers`). Time is cut into ticks
//! of 2^20 ns (~1.05 ms); tick `t` hashes to slot `t % SLOTS`. Each slot heads an intrusive
//! doubly linked list of entries kept in a slab (`entries`, with a free list), so:
//! - `insert` and `cancel` are O(1) and, once the slab has grown to the peak number of
//!   pending timers, allocation-free (a call's 5 s timeout is inserted and cancelled on
//!   every call, so this is on the hot path);
//! - `fire_due` walks the slots of the ticks that passed since the last poll and fires the
//!   entries whose deadline is `<= now` (entries of later laps stay). Deadlines are never
//!   fired early: an entry fires only once `now >= at`.
//!
//! # Lazy timeouts
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
//! `next` is a *lower bound* on the earliest deadline, readable without the lock: insert
//! lowers it; firing recomputes it exactly (`Wheel::next_bound`: slot by slot, stopping at
//! the first slot that starts after the best deadline found; a slot holds entries of every
//! lap, so no slot's start alone bounds the others); cancel leaves it. An idle scheduler thread parks until `next` (at worst it wakes early, finds
//! nothing due, and recomputes), so an idle runtime with one far timer does not spin.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::raw_mutex::{Rank, RawMutex};

/// What a deadline does when it fires.
pub(crate) enum Action {
    /// Fire an actor's lazily armed park timeout (done under the timer lock).
    WakeLazy(LazyWake),
    /// Run a closure (`send_after`), outside the timer lock.
    Run(Box<dyn FnOnce() + Send>),
}

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

/// The longest wait a deadline expresses: a delay past what `Instant` can hold (such as
/// `Duration::MAX`, "wait forever") counts as this long.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `from + d`, clamped to [`FAR_FUTURE`] from `from` when `Instant` cannot hold it (std's
/// `+` panics there).
pub(crate) fn deadline_after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d.min(FAR_FUTURE)).expect("smarm: Instant cannot hold a deadline 100 years ahead")
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

/// The wheel entry of an armed lazy timeout.
pub(crate) struct LazyWake {
    shared: *const crate::runtime::Shared,
    pid: crate::slot_state::Pid,
    seq: u64,
}

// SAFETY: the pointer is only dereferenced by `fire_due` of the runtime it points to (the
// wheel lives inside that runtime's `Shared`), so it is alive whenever it is used.
unsafe impl Send for LazyWake {}

impl LazyWake {
    /// Under the timer lock: ARMED -> FIRED and wake, unless the actor already disarmed.
    fn fire(&self) {
        // SAFETY: see the `Send` impl.
        let sh = unsafe { &*self.shared };
        let Some(slot) = sh.slab.try_slot(self.pid.index()) else { return };
        // Relaxed: ARMED/FIRED transitions happen only under the timer lock we hold; the
        // wake below publishes with its own Release.
        let armed = lazy_word(self.seq, LAZY_ARMED);
        if slot
            .lazy
            .compare_exchange(armed, lazy_word(self.seq, LAZY_FIRED), Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
        {
            sh.wake(self.pid);
        }
    }
}

/// A registered deadline; pass it to [`Timers::cancel`] to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct TimerKey {
    idx: u32,
    gen: u32,
    at: u64,
}

const TICK_SHIFT: u32 = 20;
const SLOTS: usize = 1024;
const NIL: u32 = u32::MAX;

struct Entry {
    /// Deadline, ns since the epoch.
    at: u64,
    /// `None` when the entry is free.
    action: Option<Action>,
    /// Slot whose list holds the entry.
    slot: u32,
    prev: u32,
    next: u32,
    /// Bumped when the entry is freed, so a stale key cannot cancel a newer timer.
    gen: u32,
}

struct Wheel {
    heads: Box<[u32]>,
    entries: Vec<Entry>,
    /// Free list through `next`.
    free: u32,
    pending: usize,
    /// Every tick before this one has been processed.
    processed_tick: u64,
    /// Reused by `fire_due` so that firing does not allocate.
    scratch: Vec<Action>,
}

impl Wheel {
    fn new() -> Wheel {
        Wheel {
            heads: vec![NIL; SLOTS].into_boxed_slice(),
            entries: Vec::new(),
            free: NIL,
            pending: 0,
            processed_tick: 0,
            scratch: Vec::new(),
        }
    }

    fn slot_of(tick: u64) -> u32 {
        (tick % SLOTS as u64) as u32
    }

    fn insert(&mut self, at: u64, action: Action) -> TimerKey {
        // A deadline in an already-processed tick is filed under the current one, so the
        // next poll sees it.
        let slot = Self::slot_of((at >> TICK_SHIFT).max(self.processed_tick));
        let idx = if self.free != NIL {
            let idx = self.free;
            self.free = self.entries[idx as usize].next;
            idx
        } else {
            self.entries.push(Entry { at: 0, action: None, slot: 0, prev: NIL, next: NIL, gen: 0 });
            (self.entries.len() - 1) as u32
        };
        let head = self.heads[slot as usize];
        {
            let e = &mut self.entries[idx as usize];
            e.at = at;
            e.action = Some(action);
            e.slot = slot;
            e.prev = NIL;
            e.next = head;
        }
        if head != NIL {
            self.entries[head as usize].prev = idx;
        }
        self.heads[slot as usize] = idx;
        self.pending += 1;
        TimerKey { idx, gen: self.entries[idx as usize].gen, at }
    }

    fn unlink(&mut self, idx: u32) {
        let (prev, next, slot) = {
            let e = &self.entries[idx as usize];
            (e.prev, e.next, e.slot)
        };
        if prev != NIL {
            self.entries[prev as usize].next = next;
        } else {
            self.heads[slot as usize] = next;
        }
        if next != NIL {
            self.entries[next as usize].prev = prev;
        }
    }

    /// Unlinks and frees entry `idx`, returning its action.
    fn take(&mut self, idx: u32) -> Option<Action> {
        self.unlink(idx);
        let free = self.free;
        let e = &mut self.entries[idx as usize];
        let action = e.action.take();
        e.gen = e.gen.wrapping_add(1);
        e.next = free;
        self.free = idx;
        self.pending -= 1;
        action
    }

    fn cancel(&mut self, key: TimerKey) -> Option<Action> {
        match self.entries.get(key.idx as usize) {
            Some(e) if e.gen == key.gen && e.action.is_some() => self.take(key.idx),
            _ => None,
        }
    }

    /// Takes every entry due at `now_ns` into `out`.
    fn expire(&mut self, now_ns: u64, out: &mut Vec<Action>) {
        let now_tick = now_ns >> TICK_SHIFT;
        if now_tick < self.processed_tick {
            return;
        }
        let ticks = (now_tick - self.processed_tick + 1).min(SLOTS as u64);
        for t in 0..ticks {
            let slot = Self::slot_of(self.processed_tick + t);
            let mut idx = self.heads[slot as usize];
            while idx != NIL {
                let next = self.entries[idx as usize].next;
                if self.entries[idx as usize].at <= now_ns {
                    if let Some(a) = self.take(idx) {
                        out.push(a);
                    }
                }
                idx = next;
            }
        }
        // The current tick may still hold entries due later within it: re-check it next time.
        self.processed_tick = now_tick;
    }

    /// The earliest pending deadline (ns), or `u64::MAX` if none.
    ///
    /// Every entry in the slot `off` ticks ahead is due no earlier than that tick's start
    /// (it belongs to this lap or a later one); the current tick's slot also holds entries
    /// already due. So the scan takes the minimum slot by slot and stops at the first slot
    /// that starts at or after the best deadline found: exact, and short when something is
    /// near. With only far timers it reads every slot and entry once, and the idle thread
    /// then sleeps until the earliest of them instead of waking once per occupied slot.
    fn next_bound(&self) -> u64 {
        if self.pending == 0 {
            return u64::MAX;
        }
        let mut best = self.slot_min(self.processed_tick);
        for off in 1..SLOTS as u64 {
            let tick = self.processed_tick + off;
            if tick << TICK_SHIFT >= best {
                break;
            }
            best = best.min(self.slot_min(tick));
        }
        best
    }

    /// The earliest deadline in `tick`'s slot (of any lap), or `u64::MAX` if it is empty.
    fn slot_min(&self, tick: u64) -> u64 {
        let mut min = u64::MAX;
        let mut idx = self.heads[Self::slot_of(tick) as usize];
        while idx != NIL {
            min = min.min(self.entries[idx as usize].at);
            idx = self.entries[idx as usize].next;
        }
        min
    }
}

pub(crate) struct Timers {
    epoch: Instant,
    wheel: RawMutex<Wheel>,
    /// Lower bound on the earliest deadline in ns since `epoch`; `u64::MAX` when none.
    next: AtomicU64,
}

impl Timers {
    pub(crate) fn new() -> Timers {
        Timers {
            epoch: Instant::now(),
            wheel: RawMutex::new(Rank::Timers, Wheel::new()),
            next: AtomicU64::new(u64::MAX),
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        // Deadlines before the epoch clamp to 0 (already due); far deadlines saturate.
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Registers `action` at `deadline`. Returns the key and whether this lowered the
    /// earliest deadline (the caller then makes sure an idle thread re-arms).
    pub(crate) fn insert_action(&self, deadline: Instant, action: Action) -> (TimerKey, bool) {
        let at = self.nanos(deadline);
        let key = self.wheel.lock().insert(at, action);
        // Relaxed: `next` is a hint read without the lock; a thread that acts on it takes the
        // lock. fetch_min keeps it a lower bound under racing inserts.
        let earliest = self.next.fetch_min(at, Ordering::Relaxed) > at;
        (key, earliest)
    }

    /// Removes a deadline if it has not fired and hands back its action (to be dropped by
    /// the caller, outside any lock it holds).
    pub(crate) fn take(&self, key: TimerKey) -> Option<Action> {
        self.wheel.lock().cancel(key)
    }

    /// Removes a deadline if it has not fired; returns whether it was still pending.
    pub(crate) fn cancel(&self, key: TimerKey) -> bool {
        let removed = self.wheel.lock().cancel(key);
        let pending = removed.is_some();
        drop(removed); // a cancelled send_after's message is dropped outside the lock
        pending
    }

    /// Arms the pending lazy timeout `seq` of the parked actor `pid` (in `slot`) to fire
    /// at `now` + its timeout. Does nothing if the actor has disarmed it meanwhile. Returns
    /// whether this lowered the earliest deadline.
    pub(crate) fn arm_lazy(
        &self,
        shared: *const crate::runtime::Shared,
        slot: &crate::slot_state::Slot,
        pid: crate::slot_state::Pid,
        seq: u64,
        now: Instant,
    ) -> bool {
        // Relaxed: the caller's Acquire load of the PENDING word made this visible.
        let timeout = slot.lazy_timeout.load(Ordering::Relaxed);
        let at = self.nanos(now).saturating_add(timeout).min(u64::MAX - 1);
        let mut wheel = self.wheel.lock();
        // Relaxed: PENDING -> ARMED races only with the actor's PENDING -> IDLE (exactly one
        // CAS wins); every later transition of this request happens under the lock we hold.
        let pending = lazy_word(seq, LAZY_PENDING);
        if slot
            .lazy
            .compare_exchange(pending, lazy_word(seq, LAZY_ARMED), Ordering::Relaxed, Ordering::Relaxed)
            .is_err()
        {
            return false;
        }
        let key = wheel.insert(at, Action::WakeLazy(LazyWake { shared, pid, seq }));
        // SAFETY: `lazy_key` is accessed only under the timer lock, which we hold.
        unsafe { *slot.lazy_key.get() = key };
        drop(wheel);
        // Relaxed: see `insert_action`.
        self.next.fetch_min(at, Ordering::Relaxed) > at
    }

    /// The parking actor's side, once resumed: ends lazy request `seq`, taking it off the
    /// wheel if it was armed.
    pub(crate) fn disarm_lazy(&self, slot: &crate::slot_state::Slot, seq: u64) -> LazyEnd {
        let idle = lazy_word(seq, LAZY_IDLE);
        // Relaxed: a request never armed ends with this CAS (see `arm_lazy`).
        if slot.lazy.compare_exchange(lazy_word(seq, LAZY_PENDING), idle, Ordering::Relaxed, Ordering::Relaxed).is_ok()
        {
            return LazyEnd::Woken(None);
        }
        let mut wheel = self.wheel.lock();
        // Relaxed: under the lock that orders every ARMED/FIRED transition.
        let cur = slot.lazy.load(Ordering::Relaxed);
        let (removed, end) = if cur == lazy_word(seq, LAZY_ARMED) {
            // SAFETY: accessed under the timer lock.
            let key = unsafe { *slot.lazy_key.get() };
            (wheel.cancel(key), LazyEnd::Woken(Some(self.deadline_of(key))))
        } else {
            debug_assert_eq!(cur, lazy_word(seq, LAZY_FIRED), "smarm: lazy request in an unexpected state");
            (None, LazyEnd::Fired)
        };
        slot.lazy.store(idle, Ordering::Relaxed);
        drop(wheel);
        drop(removed);
        end
    }

    /// Keeps only the keys whose timers are still on the wheel (neither fired nor cancelled).
    pub(crate) fn retain_pending(&self, keys: &mut Vec<TimerKey>) {
        let wheel = self.wheel.lock();
        keys.retain(|k| wheel.entries.get(k.idx as usize).is_some_and(|e| e.gen == k.gen && e.action.is_some()));
    }

    /// Number of deadlines on the wheel.
    pub(crate) fn pending(&self) -> usize {
        self.wheel.lock().pending
    }

    /// The instant a key fires at.
    pub(crate) fn deadline_of(&self, key: TimerKey) -> Instant {
        self.epoch + Duration::from_nanos(key.at)
    }

    /// True if some deadline may be due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        let next = self.next.load(Ordering::Relaxed);
        next != u64::MAX && next <= self.nanos(now)
    }

    /// True if no deadline is registered (as far as the lower bound knows).
    pub(crate) fn is_empty(&self) -> bool {
        self.next.load(Ordering::Relaxed) == u64::MAX
    }

    /// Time until the earliest deadline (a lower bound), if any.
    pub(crate) fn until_next(&self, now: Instant) -> Option<Duration> {
        let next = self.next.load(Ordering::Relaxed);
        (next != u64::MAX).then(|| Duration::from_nanos(next.saturating_sub(self.nanos(now))))
    }

    /// Wakes every waiter whose deadline has passed and runs due `send_after` actions.
    /// Returns how many fired.
    pub(crate) fn fire_due(&self, now: Instant) -> usize {
        if !self.due(now) {
            return 0;
        }
        let now_ns = self.nanos(now);
        let mut run = Vec::new();
        let fired;
        {
            let mut wheel = self.wheel.lock();
            let mut due = std::mem::take(&mut wheel.scratch);
            wheel.expire(now_ns, &mut due);
            fired = due.len();
            // Wakes happen under the lock: a sleeper deregisters (cancel) under the same lock
            // before it can end, so the waiter is alive.
            for a in due.drain(..) {
                match a {
                    Action::WakeLazy(l) => l.fire(),
                    Action::Run(f) => run.push(f),
                }
            }
            wheel.scratch = due;
            self.next.store(wheel.next_bound(), Ordering::Relaxed);
        }
        // Closures (channel sends) take primitive locks, which rank below the timer lock.
        for f in run {
            // A panicking Drop of a message whose receiver is gone must not take the
            // scheduler thread down.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        }
        fired
    }
}

/// A pending [`send_after`]; pass it to [`cancel`].
#[derive(Debug)]
pub struct TimerRef {
    kind: RefKind,
}

#[derive(Debug)]
enum RefKind {
    /// On a runtime's timer map (the runtime may be gone: then the timer is too).
    Runtime { rt: std::sync::Weak<crate::runtime::Shared>, key: TimerKey },
    /// Off-runtime: a helper thread waiting on a condition variable.
    Thread(std::sync::Arc<ThreadTimer>),
}

#[derive(Debug)]
struct ThreadTimer {
    deadline: Instant,
    /// 0 pending, 1 fired, 2 cancelled.
    state: std::sync::Mutex<u8>,
    cv: std::sync::Condvar,
}

/// Sends `msg` on `sender` once `delay` has passed (never earlier). Returns a handle for
/// [`cancel`]. From an actor the runtime's timer structure holds it; from a plain thread a
/// helper thread does. A delay too long for `Instant` (`Duration::MAX`) counts as 100 years,
/// as does every timeout in smarm (a "wait forever" never panics on the addition).
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     let t = smarm::send_after(Duration::from_millis(5), &tx, "tick");
///     assert_eq!(rx.recv(), Ok("tick"));
///     assert_eq!(smarm::cancel_timer(t), None); // already fired
/// });
/// ```
pub fn send_after<T: Send + 'static>(delay: Duration, sender: &crate::channel::Sender<T>, msg: T) -> TimerRef {
    let deadline = deadline_after(Instant::now(), delay);
    let tx = sender.clone();
    let w = crate::runtime::current_worker();
    if !w.is_null() {
        // SAFETY: this thread's live worker.
        let shared = unsafe { (*w).shared_arc() };
        let rt = std::sync::Arc::downgrade(&shared);
        // Runs on a scheduler thread: it must never block it. A full bounded channel gets
        // the message from a short-lived actor that waits for room instead.
        let action = Action::Run(Box::new(move || {
            if let Err(crate::channel::TrySendError::Full(msg)) = tx.try_send(msg) {
                if let Some(sh) = rt.upgrade() {
                    let _ = sh.spawn(move || tx.send(msg), false);
                }
            }
        }));
        let (key, earliest) = shared.timers.insert_action(deadline, action);
        if earliest {
            shared.wake_one();
        }
        return TimerRef { kind: RefKind::Runtime { rt: std::sync::Arc::downgrade(&shared), key } };
    }
    let t =
        std::sync::Arc::new(ThreadTimer { deadline, state: std::sync::Mutex::new(0), cv: std::sync::Condvar::new() });
    let t2 = t.clone();
    std::thread::Builder::new()
        .name("smarm-send-after".into())
        .spawn(move || {
            let mut st = t2.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if *st == 2 {
                    return;
                }
                let now = Instant::now();
                if now >= t2.deadline {
                    *st = 1;
                    drop(st);
                    let _ = tx.send(msg);
                    return;
                }
                st = t2.cv.wait_timeout(st, t2.deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        })
        .expect("smarm: could not start a send_after helper thread");
    TimerRef { kind: RefKind::Thread(t) }
}

/// Cancels a [`send_after`]. Returns the time that was left, or `None` if it already fired
/// (or its runtime has ended).
pub fn cancel(timer: TimerRef) -> Option<Duration> {
    match timer.kind {
        RefKind::Runtime { rt, key } => {
            let rt = rt.upgrade()?;
            let deadline = rt.timers.deadline_of(key);
            rt.timers.cancel(key).then(|| deadline.saturating_duration_since(Instant::now()))
        }
        RefKind::Thread(t) => {
            let mut st = t.state.lock().unwrap_or_else(|e| e.into_inner());
            if *st != 0 {
                return None;
            }
            *st = 2;
            t.cv.notify_one();
            Some(t.deadline.saturating_duration_since(Instant::now()))
        }
    }
}

/// Sends `msg` to `addr` once `delay` has passed (never earlier); cancelled automatically if
/// the target actor ends first. Must be called from an actor of the target's runtime.
///
/// # Panics
/// Outside an actor.
pub fn send_after_addr<M: Send + 'static>(delay: Duration, addr: &crate::mailbox::Addr<M>, msg: M) -> TimerRef {
    let deadline = deadline_after(Instant::now(), delay);
    let w = crate::runtime::current_worker();
    assert!(!w.is_null(), "smarm::send_after_addr called outside an actor");
    // SAFETY: this thread's live worker.
    let shared = unsafe { (*w).shared_arc() };
    let target = addr.clone();
    let pid = addr.pid();
    let action = Action::Run(Box::new(move || target.send(msg)));
    let (key, earliest) = shared.timers.insert_action(deadline, action);
    if !crate::process::track_timer(&shared, pid, key) {
        shared.timers.cancel(key); // the target is already gone
    }
    if earliest {
        shared.wake_one();
    }
    TimerRef { kind: RefKind::Runtime { rt: std::sync::Arc::downgrade(&shared), key } }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn noop() -> Action {
        Action::Run(Box::new(|| ()))
    }

    fn tick(t: u64) -> u64 {
        t << TICK_SHIFT
    }

    /// The smallest deadline on the wheel.
    fn earliest(w: &Wheel) -> u64 {
        w.entries.iter().filter(|e| e.action.is_some()).map(|e| e.at).min().unwrap_or(u64::MAX)
    }

    #[test]
    fn next_bound_sees_an_earlier_slot_past_a_later_lap_in_the_current_one() {
        // The case that made a 2 s call timeout fire at 4 s: the current tick's slot holds
        // only an entry one lap ahead, and an earlier deadline sits in a slot further on.
        let mut w = Wheel::new();
        let p = 1029;
        let mut out = Vec::new();
        w.expire(tick(p), &mut out);
        assert_eq!(w.processed_tick, p);
        let later_lap = tick(p + SLOTS as u64) + 5;
        let sooner = tick(p + 100) + 7;
        w.insert(later_lap, noop());
        w.insert(sooner, noop());
        let bound = w.next_bound();
        assert_eq!(bound, sooner, "the bound is the sooner deadline");
    }

    #[test]
    fn next_bound_counts_a_due_entry_filed_under_the_current_tick() {
        let mut w = Wheel::new();
        let mut out = Vec::new();
        w.expire(tick(500), &mut out);
        // A deadline already past is filed under the current tick.
        w.insert(tick(10), noop());
        w.insert(tick(600), noop());
        assert_eq!(w.next_bound(), tick(10));
    }

    #[test]
    fn next_bound_is_the_earliest_deadline_as_time_moves_on() {
        // xorshift: deterministic pseudo-random deadlines up to three laps ahead, polls at
        // random later times, some cancels.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut w = Wheel::new();
        let mut keys = Vec::new();
        let mut now = 0u64;
        let mut out = Vec::new();
        for round in 0..2_000 {
            for _ in 0..(rnd() % 4) {
                let at = now + rnd() % tick(3 * SLOTS as u64);
                keys.push(w.insert(at, noop()));
            }
            if rnd() % 3 == 0 && !keys.is_empty() {
                let k = keys.swap_remove((rnd() % keys.len() as u64) as usize);
                w.cancel(k);
            }
            now += rnd() % tick(SLOTS as u64 / 2);
            out.clear();
            w.expire(now, &mut out);
            assert!(earliest(&w) > now, "round {round}: an entry due at {now} was left on the wheel");
            let (bound, first) = (w.next_bound(), earliest(&w));
            assert_eq!(bound, first, "round {round}: the bound is not the earliest deadline");
        }
    }
}
