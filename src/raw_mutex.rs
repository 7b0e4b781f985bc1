//! `RawMutex<T>`: the runtime's internal lock for short critical sections (channel queues,
//! wait lists, registries).
//!
//! - Fast path: one `swap` to acquire, one Release store to release (a plain `mov` on
//!   x86): a single locked instruction per critical section.
//! - Contended: test-and-test-and-set with the `backoff::Backoff` (spin, then yield the OS
//!   thread). Critical sections are a few dozen instructions and never block, so a waiter
//!   only ever waits for another OS thread to finish one; it never parks an actor or a
//!   scheduler thread on a futex.
//! - No runtime call happens while one is held (no switch, hence no preemption), and debug
//!   builds check it: `switch_out` asserts that the switching thread holds no `RawMutex`.
//! - Lock order: every `RawMutex` has a rank; debug builds assert that a thread acquires
//!   ranks in strictly increasing order (see [`Rank`]), so a lock-order inversion panics in
//!   tests instead of deadlocking in production.

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::backoff::Backoff;

/// Lock ranks: a thread may only acquire a lock of a higher rank than any it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum Rank {
    /// An actor's process state (`process`): links, monitors, name. Zero so that a zeroed
    /// entry of the process layer's side table holds a valid lock (such locks are made by
    /// zeroing, never by `new`).
    #[allow(dead_code)]
    Process = 0,
    /// The runtime's name registry.
    Registry = 1,
    /// The runtime's process groups (`pg`).
    Pg = 2,
    /// Channel, mailbox, oneshot, watch, mutex, barrier, wait-group state.
    Primitive = 3,
    /// The runtime's timing wheel (`wheel::Timers`).
    Timers = 4,
}

/// `repr(C)`: the flag comes first, so a lock-and-read touches the line the value starts
/// on (the channel layouts count on it).
#[repr(C)]
pub(crate) struct RawMutex<T> {
    locked: AtomicBool,
    #[cfg(debug_assertions)]
    rank: Rank,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a
// time (the `locked` flag, acquired with Acquire and released with Release).
unsafe impl<T: Send> Sync for RawMutex<T> {}
// SAFETY: as above.
unsafe impl<T: Send> Send for RawMutex<T> {}

impl<T> RawMutex<T> {
    pub(crate) const fn new(rank: Rank, value: T) -> Self {
        #[cfg(not(debug_assertions))]
        let _ = rank;
        RawMutex {
            locked: AtomicBool::new(false),
            #[cfg(debug_assertions)]
            rank,
            value: UnsafeCell::new(value),
        }
    }

    #[inline]
    pub(crate) fn lock(&self) -> RawGuard<'_, T> {
        #[cfg(debug_assertions)]
        order::acquire(self.rank);
        // Acquire: pairs with the Release in `RawGuard::drop`, so the previous holder's
        // writes to the value are visible.
        if self.locked.swap(true, Ordering::Acquire) {
            self.lock_contended();
        }
        RawGuard { lock: self }
    }

    #[cold]
    #[inline(never)]
    fn lock_contended(&self) {
        let mut backoff = Backoff::new();
        loop {
            // Relaxed read while waiting (test-and-test-and-set): no cache-line ping-pong.
            while self.locked.load(Ordering::Relaxed) {
                backoff.snooze();
            }
            // Acquire: as in `lock`, pairs with the holder's Release in `RawGuard::drop`.
            if !self.locked.swap(true, Ordering::Acquire) {
                return;
            }
        }
    }
}

pub(crate) struct RawGuard<'a, T> {
    lock: &'a RawMutex<T>,
}

impl<T> Deref for RawGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: we hold the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for RawGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: we hold the lock, exclusively.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for RawGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // Release: publishes our writes to the next holder.
        self.lock.locked.store(false, Ordering::Release);
        #[cfg(debug_assertions)]
        order::release(self.lock.rank);
    }
}

/// Debug-only bookkeeping of the ranks this thread holds. Thread-local, so (the rule in
/// `context`) accessed only through out-of-line functions with an asm barrier; and a lock is
/// never held across a switch, which `assert_none_held` checks at every switch.
#[cfg(debug_assertions)]
pub(crate) mod order {
    use super::Rank;
    use std::cell::Cell;

    thread_local! {
        /// Bit r set = a lock of rank r is held.
        static HELD: Cell<u8> = const { Cell::new(0) };
    }

    #[inline(never)]
    pub(crate) fn acquire(rank: Rank) {
        // SAFETY: an empty non-pure asm block (see `context::tls_fence`).
        unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
        HELD.with(|h| {
            let held = h.get();
            let bit = 1u8 << rank as u8;
            assert!(
                held < bit,
                "smarm: lock order violation: acquiring a rank {rank:?} lock while holding ranks {held:#b}"
            );
            h.set(held | bit);
        });
    }

    #[inline(never)]
    pub(crate) fn release(rank: Rank) {
        // SAFETY: as above.
        unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
        HELD.with(|h| h.set(h.get() & !(1u8 << rank as u8)));
    }

    /// Panics if this thread holds any runtime-internal lock (called before every switch).
    #[inline(never)]
    pub(crate) fn assert_none_held() {
        // SAFETY: as above.
        unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
        let held = HELD.with(|h| h.get());
        assert_eq!(held, 0, "smarm: a runtime-internal lock (ranks {held:#b}) is held across a context switch");
    }
}
