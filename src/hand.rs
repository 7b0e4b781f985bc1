//! A value handed straight into the frame of a parked receiver.
//!
//! A receiver that finds its queue empty (a mailbox or a channel) registers a [`Hand`], a
//! cell in its own stack frame that also holds its waiter, under the queue's lock. The next send
//! moves its value into that cell instead of queueing it, so the woken receiver returns it
//! without taking the lock again (one lock round per message for the receiver, not two,
//! and none of the queue's cache lines touched after the wake).
//!
//! # Protocol (all registration changes happen under the queue's lock)
//!
//! - The receiver registers ([`HandPtr::register`]) only while the queue is empty, so FIFO
//!   order holds: a handed value is older than anything queued after it.
//! - A sender takes the registration ([`HandPtr::take`]) and calls [`HandSlot::fill`]: it
//!   writes the value, wakes the receiver (the waiter in the hand), and only then sets
//!   `filled` (Release). After that store it touches nothing, so a receiver that sees
//!   `filled` may leave at once, and its runtime may end, without a wake still in flight
//!   (the argument of `reply`'s "Why the wake comes before DONE"). A wake without a value
//!   (the channel closed) is [`HandSlot::wake_empty`], under the lock, which the receiver
//!   must take before it can leave.
//! - The waiter lives in the hand, not in the queue's state, so the queue's hot fields (lock,
//!   queue, registration) fit one cache line: a send to a parked receiver touches that line
//!   and the receiver's frame, which the receiver reads next anyway.
//! - The receiver, resumed, calls [`Hand::take`]. If the cell is not filled (woken early by
//!   that very send, a timeout, or a spurious wake) it takes the lock, which orders it after
//!   any send in progress, looks again, and otherwise clears the registration itself.
//! - A receiver leaving by unwinding clears the registration under the lock first (its
//!   deregistration guard is declared after the `Hand`, so it drops first); the `Hand`'s own
//!   `Drop` then drops a value handed to it that it never returned.

use std::cell::UnsafeCell;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::runtime::Waiter;

/// The cell in a parked receiver's frame that a send fills directly. Must not move while
/// registered (keep it in a local and only borrow it).
pub(crate) struct Hand<T> {
    value: UnsafeCell<MaybeUninit<T>>,
    /// Set once, by the sender, after its wake; the value is then the receiver's.
    filled: AtomicBool,
    /// The receiver; written by it before each registration, read by the sender that
    /// takes the registration (both under the queue's lock).
    waiter: UnsafeCell<Option<Waiter>>,
}

impl<T> Hand<T> {
    pub(crate) fn new() -> Hand<T> {
        Hand {
            value: UnsafeCell::new(MaybeUninit::uninit()),
            filled: AtomicBool::new(false),
            waiter: UnsafeCell::new(None),
        }
    }

    /// The handed value, if a send filled the cell.
    #[inline]
    pub(crate) fn take(&self) -> Option<T> {
        // Acquire: pairs with the sender's Release store, so the value is in the cell and
        // the sender is done with it and with the wake.
        if !self.filled.load(Ordering::Acquire) {
            return None;
        }
        // Relaxed: only the receiver reads the flag once it is set (no sender can reach a
        // cell whose registration it took and filled).
        self.filled.store(false, Ordering::Relaxed);
        // SAFETY: `filled` (seen with Acquire) says a sender moved a value in; it is read
        // out once (the flag is cleared first).
        Some(unsafe { (*self.value.get()).assume_init_read() })
    }
}

impl<T> Drop for Hand<T> {
    #[inline]
    fn drop(&mut self) {
        // A value handed to a receive that then unwound (its registration was cleared under
        // the lock first, so no send can still be writing).
        drop(self.take());
    }
}

/// The registration slot in a queue's locked state: a registered [`Hand`], or none.
pub(crate) struct HandPtr<T>(*const Hand<T>);

// SAFETY: the pointer is only followed under the queue's lock, while the receiver that
// registered it is parked in the receive whose frame holds the cell (it deregisters under
// the same lock before leaving); a `T` moves through it, so `T: Send` suffices.
unsafe impl<T: Send> Send for HandPtr<T> {}

impl<T> HandPtr<T> {
    pub(crate) const NONE: HandPtr<T> = HandPtr(std::ptr::null());

    /// Registers `hand` with the calling actor (or thread) as its waiter. Call under the
    /// queue's lock, with no registration present.
    #[inline]
    pub(crate) fn register(&mut self, hand: &Hand<T>) {
        debug_assert!(self.0.is_null(), "smarm: a second receiver registered");
        // SAFETY: the hand is ours and unregistered, so no sender reads its waiter now.
        unsafe { *hand.waiter.get() = Some(Waiter::current()) };
        self.0 = hand;
    }

    /// Takes the registration, if any, leaving none.
    #[inline]
    pub(crate) fn take(&mut self) -> Option<HandSlot<T>> {
        let p = std::mem::replace(&mut self.0, std::ptr::null());
        (!p.is_null()).then_some(HandSlot(p))
    }
}

/// A registration taken by a sender: fill it exactly once.
pub(crate) struct HandSlot<T>(*const Hand<T>);

impl<T> HandSlot<T> {
    /// Moves `value` into the receiver's cell, wakes the receiver, then publishes the value.
    ///
    /// # Safety
    /// Taken from the registration under the queue's lock, which is still held: the
    /// receiver is then parked in (or about to return to) the frame holding the cell and
    /// cannot leave it before it takes that lock or sees `filled` (module doc).
    #[inline]
    pub(crate) unsafe fn fill(self, value: T) {
        // SAFETY: per the contract the cell is alive, empty and ours to write until
        // `filled` is set; its waiter was written before the registration (under the lock).
        unsafe {
            (*(*self.0).value.get()).write(value);
            wake(&*(*self.0).waiter.get());
            // Release: the value and the finished wake before the receiver's Acquire.
            (*self.0).filled.store(true, Ordering::Release);
        }
    }

    /// Wakes the receiver without a value (it looks at the queue's state under the lock).
    ///
    /// # Safety
    /// As for [`fill`](Self::fill); the lock is held until after this returns.
    pub(crate) unsafe fn wake_empty(self) {
        // SAFETY: per the contract: the receiver cannot leave before it takes the lock.
        unsafe { wake(&*(*self.0).waiter.get()) }
    }
}

#[inline]
fn wake(w: &Option<Waiter>) {
    w.as_ref().expect("smarm: a hand registered without its waiter").wake();
}
