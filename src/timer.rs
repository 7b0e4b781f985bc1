//! Deadlines for `sleep` (and, as messaging lands, receive timeouts and `send_after`).
//!
//! One ordered map per runtime, keyed by (deadline, sequence number), under a short lock.
//! `next` mirrors the earliest deadline in an atomic so scheduler threads can check "is
//! anything due?" without the lock; an idle thread parks with a timeout up to that
//! deadline instead of polling.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::sync::raw_mutex::{Rank, RawMutex};

use crate::runtime::Waiter;

/// A registered deadline; pass it to [`Timers::cancel`] to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerKey {
    at: u64,
    seq: u64,
}

pub(crate) struct Timers {
    epoch: Instant,
    map: RawMutex<(BTreeMap<TimerKey, Waiter>, u64)>,
    /// Earliest deadline in nanoseconds since `epoch`, `u64::MAX` when empty.
    next: AtomicU64,
}

impl Timers {
    pub(crate) fn new() -> Timers {
        Timers {
            epoch: Instant::now(),
            map: RawMutex::new(Rank::Timers, (BTreeMap::new(), 0)),
            next: AtomicU64::new(u64::MAX),
        }
    }

    fn nanos(&self, t: Instant) -> u64 {
        // Deadlines before the epoch clamp to 0 (already due); far deadlines saturate.
        u64::try_from(t.saturating_duration_since(self.epoch).as_nanos()).unwrap_or(u64::MAX - 1)
    }

    /// Registers `waiter` to be woken at `deadline`. Returns the key and whether this is now
    /// the earliest deadline (the caller then makes sure an idle thread re-arms).
    pub(crate) fn insert(&self, deadline: Instant, waiter: Waiter) -> (TimerKey, bool) {
        let at = self.nanos(deadline);
        let mut g = self.map.lock();
        let seq = g.1;
        g.1 += 1;
        let key = TimerKey { at, seq };
        g.0.insert(key, waiter);
        let earliest = at < self.next.load(Ordering::Relaxed);
        if earliest {
            // Relaxed: `next` is a hint read without the lock; readers that act on it take
            // the lock, and a stale value only delays the check to the next poll.
            self.next.store(at, Ordering::Relaxed);
        }
        (key, earliest)
    }

    /// Removes a deadline if it has not fired.
    pub(crate) fn cancel(&self, key: TimerKey) {
        let mut g = self.map.lock();
        if g.0.remove(&key).is_some() {
            let next = g.0.keys().next().map_or(u64::MAX, |k| k.at);
            self.next.store(next, Ordering::Relaxed);
        }
    }

    /// True if some deadline is due at `now`.
    pub(crate) fn due(&self, now: Instant) -> bool {
        let next = self.next.load(Ordering::Relaxed);
        next != u64::MAX && next <= self.nanos(now)
    }

    /// True if any deadline is registered.
    pub(crate) fn is_empty(&self) -> bool {
        self.next.load(Ordering::Relaxed) == u64::MAX
    }

    /// Time until the earliest deadline, if any.
    pub(crate) fn until_next(&self, now: Instant) -> Option<Duration> {
        let next = self.next.load(Ordering::Relaxed);
        (next != u64::MAX).then(|| Duration::from_nanos(next.saturating_sub(self.nanos(now))))
    }

    /// Wakes every waiter whose deadline has passed. Returns how many.
    pub(crate) fn fire_due(&self, now: Instant) -> usize {
        if !self.due(now) {
            return 0;
        }
        let now_ns = self.nanos(now);
        let mut fired = 0;
        let mut g = self.map.lock();
        while let Some(entry) = g.0.first_entry() {
            if entry.key().at > now_ns {
                break;
            }
            // Woken under the lock: a sleeper deregisters (cancel) under the same lock before
            // it can end, so the waiter is alive.
            entry.remove().wake();
            fired += 1;
        }
        let next = g.0.keys().next().map_or(u64::MAX, |k| k.at);
        self.next.store(next, Ordering::Relaxed);
        fired
    }
}
