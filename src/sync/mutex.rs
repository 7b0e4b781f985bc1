//! An actor-aware [`Mutex`]: contended `lock` parks the actor (or blocks a plain thread),
//! never the scheduler thread.
//!
//! ```
//! let m = smarm::sync::Mutex::new(0);
//! *m.lock() += 1;
//! assert_eq!(m.into_inner(), 1);
//! ```
//!
//! # State
//!
//! `state` bits: `LOCKED` (someone owns the value), `WAITERS` (the wait list may be
//! non-empty). Fast paths are one CAS each: `lock` 0 -> LOCKED, `unlock` LOCKED -> 0.
//!
//! # Fairness: direct hand-off
//!
//! When `unlock` finds waiters it does not release the lock: it hands it to the oldest
//! waiter (FIFO) and wakes it, so a waiter can never be overtaken by a stream of newcomers
//! (no starvation). The cost is that the lock stays held until the new owner runs; that is
//! the usual price of fairness and only paid under contention.

use crate::slot_state::WaitKind;
use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use std::collections::VecDeque;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

const LOCKED: u8 = 1;
const WAITERS: u8 = 2;

struct WaitList {
    /// Parked lockers, oldest first, each with its ticket.
    queue: VecDeque<(u64, Waiter)>,
    next_ticket: u64,
    /// Ticket that `unlock` handed the lock to and that has not yet taken it.
    granted: Option<u64>,
}

/// A mutual-exclusion lock whose contended `lock` parks the calling actor.
///
/// The guard is migration-safe: an actor may hold it across blocking calls and resume on
/// another scheduler thread.
///
/// ```
/// use std::sync::Arc;
/// smarm::run(|| {
///     let m = Arc::new(smarm::sync::Mutex::new(0));
///     let hs: Vec<_> = (0..4).map(|_| { let m = m.clone(); smarm::spawn(move || *m.lock() += 1) }).collect();
///     for h in hs { h.join().unwrap(); }
///     assert_eq!(*m.lock(), 4);
/// });
/// ```
pub struct Mutex<T: ?Sized> {
    state: AtomicU8,
    waiters: RawMutex<WaitList>,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and `LOCKED` admits one guard at a time
// (Acquire on lock, Release on unlock).
unsafe impl<T: ?Sized + Send> Send for Mutex<T> {}
// SAFETY: as above.
unsafe impl<T: ?Sized + Send> Sync for Mutex<T> {}

impl<T> Mutex<T> {
    /// A new unlocked mutex.
    ///
    /// ```
    /// let m = smarm::sync::Mutex::new(0);
    /// *m.lock() += 1;
    /// assert_eq!(*m.lock(), 1);
    /// ```
    pub fn new(value: T) -> Self {
        Mutex {
            state: AtomicU8::new(0),
            waiters: RawMutex::new(Rank::Primitive, WaitList { queue: VecDeque::new(), next_ticket: 0, granted: None }),
            value: UnsafeCell::new(value),
        }
    }

    /// Consumes the mutex, returning the value.
    ///
    /// ```
    /// let m = smarm::sync::Mutex::new(vec![1]);
    /// m.lock().push(2);
    /// assert_eq!(m.into_inner(), [1, 2]);
    /// ```
    pub fn into_inner(self) -> T {
        self.value.into_inner()
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, parking the caller while another holds the lock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// smarm::run(|| {
    ///     let total = Arc::new(smarm::sync::Mutex::new(0u32));
    ///     let hs: Vec<_> = (0..4)
    ///         .map(|_| {
    ///             let total = total.clone();
    ///             smarm::spawn(move || {
    ///                 for _ in 0..100 {
    ///                     let mut t = total.lock();
    ///                     *t += 1;
    ///                     smarm::yield_now(); // held across a switch: others park, in turn
    ///                 }
    ///             })
    ///         })
    ///         .collect();
    ///     hs.into_iter().for_each(|h| h.join().unwrap());
    ///     assert_eq!(*total.lock(), 400);
    /// });
    /// ```
    #[inline]
    #[track_caller]
    pub fn lock(&self) -> MutexGuard<'_, T> {
        // Acquire: pairs with the Release in `unlock`.
        if self.state.compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed).is_err() {
            self.lock_slow();
        }
        MutexGuard { mutex: self }
    }

    /// Locks if free, without blocking.
    ///
    /// ```
    /// let m = smarm::sync::Mutex::new(());
    /// let held = m.lock();
    /// assert!(m.try_lock().is_none());
    /// drop(held);
    /// assert!(m.try_lock().is_some());
    /// ```
    pub fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        // Acquire: pairs with the Release in `unlock`, as in `lock`.
        self.state
            .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .ok()
            .map(|_| MutexGuard { mutex: self })
    }

    /// Mutable access without locking (the borrow proves exclusivity).
    ///
    /// ```
    /// let mut m = smarm::sync::Mutex::new(1);
    /// *m.get_mut() = 2;
    /// assert_eq!(*m.lock(), 2);
    /// ```
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    #[cold]
    #[track_caller]
    fn lock_slow(&self) {
        let mut list = self.waiters.lock();
        // Announce waiters before the last attempt, so an unlock that races with us either
        // sees WAITERS (and hands off / wakes) or leaves the lock free for this attempt.
        // AcqRel: Acquire makes the previous owner's writes visible if we take the lock here.
        let prev = self.state.fetch_or(WAITERS, Ordering::AcqRel);
        if prev & LOCKED == 0 {
            // Free: take it. WAITERS stays set only if someone is queued.
            let next = if list.queue.is_empty() { LOCKED } else { LOCKED | WAITERS };
            // Relaxed: the fetch_or above already acquired; while WAITERS is set no CAS can
            // take the lock, and every other writer of `state` holds the wait-list lock.
            self.state.store(next, Ordering::Relaxed);
            return;
        }
        let ticket = list.next_ticket;
        list.next_ticket += 1;
        list.queue.push_back((ticket, Waiter::current()));
        drop(list);
        let mut guard = Dequeue { mutex: self, ticket, owned: false };
        loop {
            park_until(None, WaitKind::Mutex);
            let mut list = self.waiters.lock();
            if list.granted == Some(ticket) {
                list.granted = None;
                guard.owned = true;
                drop(list);
                core::mem::forget(guard);
                // The hand-off kept LOCKED set for us; Acquire pairs with the granter's
                // Release of its critical section (the RawMutex handed it over too).
                core::sync::atomic::fence(Ordering::Acquire);
                return;
            }
        }
    }

    fn unlock(&self) {
        // Release: publishes the critical section to the next owner.
        if self.state.compare_exchange(LOCKED, 0, Ordering::Release, Ordering::Relaxed).is_ok() {
            return;
        }
        let mut list = self.waiters.lock();
        match list.queue.pop_front() {
            Some((ticket, w)) => {
                // Hand off: the lock stays LOCKED and now belongs to `ticket`.
                list.granted = Some(ticket);
                let next = if list.queue.is_empty() { LOCKED } else { LOCKED | WAITERS };
                // Release: publishes the critical section (the new owner also receives it
                // through the wait-list lock it takes to see `granted`).
                self.state.store(next, Ordering::Release);
                w.wake();
            }
            // Release: publishes the critical section to the next locker's Acquire.
            None => self.state.store(0, Ordering::Release),
        }
    }
}

/// Leaves the wait list if the waiter unwinds before it was granted the lock; passes the
/// lock on if it was granted but never taken.
struct Dequeue<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
    ticket: u64,
    owned: bool,
}

impl<T: ?Sized> Drop for Dequeue<'_, T> {
    fn drop(&mut self) {
        if self.owned {
            return;
        }
        let mut list = self.mutex.waiters.lock();
        if list.granted == Some(self.ticket) {
            list.granted = None;
            drop(list);
            self.mutex.unlock();
            return;
        }
        list.queue.retain(|(t, _)| *t != self.ticket);
        if list.queue.is_empty() {
            // Relaxed: clearing the bit publishes nothing; the slow paths that read it hold
            // the wait-list lock we hold.
            self.mutex.state.fetch_and(!WAITERS, Ordering::Relaxed);
        }
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.try_lock() {
            Some(g) => f.debug_struct("Mutex").field("value", &&*g).finish(),
            None => f.write_str("Mutex { <locked> }"),
        }
    }
}

impl<T: Default> Default for Mutex<T> {
    fn default() -> Self {
        Mutex::new(T::default())
    }
}

/// Holds a [`Mutex`] locked; unlocks on drop.
///
/// ```
/// let m = smarm::sync::Mutex::new(String::new());
/// {
///     let mut g = m.lock();
///     g.push_str("hi");
/// } // unlocked here
/// assert_eq!(*m.lock(), "hi");
/// ```
pub struct MutexGuard<'a, T: ?Sized> {
    mutex: &'a Mutex<T>,
}

// SAFETY: sharing a guard shares `&T`.
unsafe impl<T: ?Sized + Sync> Sync for MutexGuard<'_, T> {}

impl<T: ?Sized> Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard owns the lock.
        unsafe { &*self.mutex.value.get() }
    }
}

impl<T: ?Sized> DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard owns the lock exclusively.
        unsafe { &mut *self.mutex.value.get() }
    }
}

impl<T: ?Sized> Drop for MutexGuard<'_, T> {
    fn drop(&mut self) {
        self.mutex.unlock();
    }
}

impl<T: ?Sized + fmt::Debug> fmt::Debug for MutexGuard<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&**self, f)
    }
}
