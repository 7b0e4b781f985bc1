//! The runtime's deadlines: a hashed timing wheel that fires by handing back what is due.
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
//! `next` is a *lower bound* on the earliest deadline, readable without the lock: insert
//! lowers it; firing recomputes it exactly (`Wheel::next_bound`: slot by slot, stopping at
//! the first slot that starts after the best deadline found; a slot holds entries of every
//! lap, so no slot's start alone bounds the others); cancel leaves it. An idle scheduler thread parks until `next` (at worst it wakes early, finds
//! nothing due, and recomputes), so an idle runtime with one far timer does not spin.

//!
//! Layer 1: the wheel holds no scheduler state. An entry is a closure or a [`LazyToken`]
//! (numbers naming a parked actor); [`Timers::fire_due`] hands lazy tokens to the caller's
//! callback under the lock and returns the closures, which the scheduler runs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::raw_mutex::{Rank, RawGuard, RawMutex};

/// What a deadline does when it fires.
pub(crate) enum Action {
    /// An actor's lazily armed park timeout, handed to the caller's `fire_lazy` under the
    /// wheel's lock (see `runtime::lazy`).
    WakeLazy(LazyToken),
    /// A closure (`send_after`), handed back to the caller to run outside the lock.
    Run(Box<dyn FnOnce() + Send>),
}

/// The wheel entry of an armed lazy timeout: the parked actor's slot index and generation,
/// and the request's sequence number. Plain numbers: this layer knows no scheduler.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LazyToken {
    pub(crate) index: u32,
    pub(crate) gen: u32,
    pub(crate) seq: u64,
}

/// The longest wait a deadline expresses: a delay past what `Instant` can hold (such as
/// `Duration::MAX`, "wait forever") counts as this long.
const FAR_FUTURE: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `from + d`, clamped to [`FAR_FUTURE`] from `from` when `Instant` cannot hold it (std's
/// `+` panics there).
pub(crate) fn deadline_after(from: Instant, d: Duration) -> Instant {
    from.checked_add(d.min(FAR_FUTURE)).expect("smarm: Instant cannot hold a deadline 100 years ahead")
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

pub(crate) struct Wheel {
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

    pub(crate) fn cancel(&mut self, key: TimerKey) -> Option<Action> {
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

    /// `t` as ns since the wheel's epoch.
    pub(crate) fn nanos(&self, t: Instant) -> u64 {
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

    /// Takes every pending action off the wheel (for the runtime's drop, which drops them one
    /// by one).
    pub(crate) fn take_all(&self) -> Vec<Action> {
        let mut wheel = self.wheel.lock();
        (0..wheel.entries.len() as u32)
            .filter_map(|idx| if wheel.entries[idx as usize].action.is_some() { wheel.take(idx) } else { None })
            .collect()
    }

    /// Removes a deadline if it has not fired; returns whether it was still pending.
    pub(crate) fn cancel(&self, key: TimerKey) -> bool {
        let removed = self.wheel.lock().cancel(key);
        let pending = removed.is_some();
        drop(removed); // a cancelled send_after's message is dropped outside the lock
        pending
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
        // Relaxed: a hint (see `insert_action`); the idle re-check reads it after its SeqCst
        // fence, and an insert that lowers it wakes a sleeper after its own.
        let next = self.next.load(Ordering::Relaxed);
        next != u64::MAX && next <= self.nanos(now)
    }

    /// True if no deadline is registered (as far as the lower bound knows).
    pub(crate) fn is_empty(&self) -> bool {
        // Relaxed: a hint, as in `due`.
        self.next.load(Ordering::Relaxed) == u64::MAX
    }

    /// Time until the earliest deadline (a lower bound), if any.
    pub(crate) fn until_next(&self, now: Instant) -> Option<Duration> {
        // Relaxed: a hint, as in `due` (a sleep that ends early re-checks).
        let next = self.next.load(Ordering::Relaxed);
        (next != u64::MAX).then(|| Duration::from_nanos(next.saturating_sub(self.nanos(now))))
    }

    /// Fires what is due at `now`: each lazy token goes to `fire_lazy` under the wheel's
    /// lock (a parked actor ends its request under the same lock before it can go away, so
    /// the actor named is alive); due closures are appended to `run`, for the caller to run
    /// after the lock is released. Returns how many entries fired.
    pub(crate) fn fire_due(
        &self,
        now: Instant,
        mut fire_lazy: impl FnMut(LazyToken),
        run: &mut Vec<Box<dyn FnOnce() + Send>>,
    ) -> usize {
        if !self.due(now) {
            return 0;
        }
        let now_ns = self.nanos(now);
        let mut wheel = self.wheel.lock();
        let mut due = std::mem::take(&mut wheel.scratch);
        wheel.expire(now_ns, &mut due);
        let fired = due.len();
        for a in due.drain(..) {
            match a {
                Action::WakeLazy(l) => fire_lazy(l),
                Action::Run(f) => run.push(f),
            }
        }
        wheel.scratch = due;
        // Relaxed: see `insert_action`.
        self.next.store(wheel.next_bound(), Ordering::Relaxed);
        fired
    }

    /// Inserts under a lock the caller holds (see [`Self::lock`]), for protocols that change
    /// other state in the same critical section (lazy timeouts). Returns the key and whether
    /// this lowered the earliest deadline.
    pub(crate) fn insert_locked(&self, wheel: &mut Wheel, deadline_ns: u64, action: Action) -> (TimerKey, bool) {
        let key = wheel.insert(deadline_ns, action);
        // Relaxed: see `insert_action`.
        (key, self.next.fetch_min(deadline_ns, Ordering::Relaxed) > deadline_ns)
    }

    /// The wheel's lock, for [`Self::insert_locked`] and [`Wheel::cancel`].
    pub(crate) fn lock(&self) -> RawGuard<'_, Wheel> {
        self.wheel.lock()
    }
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
