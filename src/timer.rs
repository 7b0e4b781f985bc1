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

/// What a deadline does when it fires.
pub(crate) enum Action {
    /// Wake a blocked actor or thread (done under the timer lock: see `Waiter`).
    Wake(Waiter),
    /// Run a closure (`send_after`), outside the timer lock.
    Run(Box<dyn FnOnce() + Send>),
}

/// A registered deadline; pass it to [`Timers::cancel`] to remove it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerKey {
    at: u64,
    seq: u64,
}

pub(crate) struct Timers {
    epoch: Instant,
    map: RawMutex<(BTreeMap<TimerKey, Action>, u64)>,
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
        self.insert_action(deadline, Action::Wake(waiter))
    }

    /// Registers `action` at `deadline`; see [`Timers::insert`].
    pub(crate) fn insert_action(&self, deadline: Instant, action: Action) -> (TimerKey, bool) {
        let at = self.nanos(deadline);
        let mut g = self.map.lock();
        let seq = g.1;
        g.1 += 1;
        let key = TimerKey { at, seq };
        g.0.insert(key, action);
        let earliest = at < self.next.load(Ordering::Relaxed);
        if earliest {
            // Relaxed: `next` is a hint read without the lock; readers that act on it take
            // the lock, and a stale value only delays the check to the next poll.
            self.next.store(at, Ordering::Relaxed);
        }
        (key, earliest)
    }

    /// Removes a deadline if it has not fired; returns whether it was still pending.
    pub(crate) fn cancel(&self, key: TimerKey) -> bool {
        let mut g = self.map.lock();
        let removed = g.0.remove(&key);
        let pending = removed.is_some();
        if pending {
            let next = g.0.keys().next().map_or(u64::MAX, |k| k.at);
            self.next.store(next, Ordering::Relaxed);
        }
        drop(g);
        drop(removed); // a cancelled send_after's message is dropped outside the lock
        pending
    }

    /// The instant a key fires at.
    pub(crate) fn deadline_of(&self, key: TimerKey) -> Instant {
        self.epoch + Duration::from_nanos(key.at)
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
        let mut run = Vec::new();
        let mut g = self.map.lock();
        while let Some(entry) = g.0.first_entry() {
            if entry.key().at > now_ns {
                break;
            }
            match entry.remove() {
                // Woken under the lock: a sleeper deregisters (cancel) under the same lock
                // before it can end, so the waiter is alive.
                Action::Wake(w) => w.wake(),
                Action::Run(f) => run.push(f),
            }
            fired += 1;
        }
        let next = g.0.keys().next().map_or(u64::MAX, |k| k.at);
        self.next.store(next, Ordering::Relaxed);
        drop(g);
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
/// helper thread does.
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
    let deadline = Instant::now() + delay;
    let tx = sender.clone();
    let w = crate::runtime::current_worker();
    if !w.is_null() {
        // SAFETY: this thread's live worker.
        let shared = unsafe { (*w).shared_arc() };
        let action = Action::Run(Box::new(move || {
            let _ = tx.send(msg);
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
pub fn send_after_addr<M: Send + 'static>(delay: Duration, addr: &crate::Addr<M>, msg: M) -> TimerRef {
    let deadline = Instant::now() + delay;
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
