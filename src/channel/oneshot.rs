//! `oneshot`: one value, one sender, one receiver.
//!
//! ```
//! smarm::run(|| {
//!     let (reply_tx, reply_rx) = smarm::channel::oneshot();
//!     smarm::spawn(move || reply_tx.send(2 + 2).unwrap());
//!     assert_eq!(reply_rx.recv(), Ok(4));
//! });
//! ```
//!
//! # Ownership without reference counting
//!
//! The shared cell is a plain heap allocation, not an `Arc`: each end records, inside the
//! critical section it already takes to send or receive, that it is done (`sender_alive` /
//! `receiver_alive` = false). Whichever end finds the other already done, in that same
//! critical section, is the last user and frees the cell after unlocking. Exactly one end
//! can see the other gone (both decisions are made under the cell's lock), so the cell is
//! freed exactly once and never used after. A create + send + recv round trip thus costs
//! two locked instructions (one lock per end) and no reference-count traffic.

use crate::slot_state::WaitKind;
use std::cell::Cell;
use std::fmt;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use super::{RecvError, RecvTimeoutError, SelectRecv, SelectWaiter, Selectable, TryRecvError};
use crate::raw_mutex::{Rank, RawGuard, RawMutex};
use crate::runtime::{WaitLimit, Waiter};

struct State<T> {
    value: Option<T>,
    sender_alive: bool,
    receiver_alive: bool,
    /// The parked receiver.
    waiter: Option<Waiter>,
}

struct Inner<T> {
    state: RawMutex<State<T>>,
}

/// Frees the cell.
///
/// # Safety
/// `inner` came from `alloc_block` in [`oneshot`], both ends are done, and the caller is
/// the one that observed the other end done (see the module doc); no guard is alive.
unsafe fn free<T>(inner: NonNull<Inner<T>>) {
    // SAFETY: forwarded from the caller: the cell is initialised and nobody uses it again;
    // it came from `alloc_block` with this layout (see `oneshot`).
    unsafe {
        core::ptr::drop_in_place(inner.as_ptr());
        crate::runtime::free_block(inner.as_ptr() as *mut u8, std::alloc::Layout::new::<Inner<T>>());
    }
}

/// Creates a oneshot channel.
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     smarm::spawn(move || tx.send("done").unwrap());
///     assert_eq!(rx.recv(), Ok("done"));
/// });
/// ```
pub fn oneshot<T: Send>() -> (OneshotSender<T>, OneshotReceiver<T>) {
    // The cell comes from the scheduler thread's block cache (a call creates one per
    // request): no malloc/free pair on the hot path once warm.
    let layout = std::alloc::Layout::new::<Inner<T>>();
    let Some(inner) = NonNull::new(crate::runtime::alloc_block(layout) as *mut Inner<T>) else {
        std::alloc::handle_alloc_error(layout)
    };
    // SAFETY: a fresh block of `layout`'s size and alignment, ours to initialise.
    unsafe {
        inner.as_ptr().write(Inner {
            state: RawMutex::new(
                Rank::Primitive,
                State { value: None, sender_alive: true, receiver_alive: true, waiter: None },
            ),
        })
    };
    (OneshotSender { inner, sent: false }, OneshotReceiver { inner, done: Cell::new(false) })
}

/// Sends the one value of a [`oneshot`] channel.
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let worker = smarm::spawn(move || tx.send(6 * 7).unwrap());
///     assert_eq!(rx.recv(), Ok(42));
///     worker.join().unwrap();
/// });
/// ```
pub struct OneshotSender<T> {
    inner: NonNull<Inner<T>>,
    /// `send` already finished this end.
    sent: bool,
}

// SAFETY: the cell is only reached under its lock, and a `T: Send` value moves through it.
unsafe impl<T: Send> Send for OneshotSender<T> {}
// SAFETY: `&OneshotSender` only allows `is_closed`, which takes the lock.
unsafe impl<T: Send> Sync for OneshotSender<T> {}

impl<T> OneshotSender<T> {
    fn lock(&self) -> RawGuard<'_, State<T>> {
        // SAFETY: this end is not done, so the cell is alive (only the last end frees it).
        unsafe { self.inner.as_ref() }.state.lock()
    }

    /// Sends the value; returns it if the receiver is gone.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::oneshot();
    /// drop(rx);
    /// assert_eq!(tx.send(1), Err(1)); // handed back as is, like tokio's oneshot
    /// ```
    pub fn send(mut self, value: T) -> Result<(), T> {
        self.sent = true; // this end finishes below, in one critical section
        let mut s = self.lock();
        s.sender_alive = false;
        if !s.receiver_alive {
            drop(s);
            // SAFETY: the receiver is done and we saw it under the lock: we are last.
            unsafe { free(self.inner) };
            return Err(value);
        }
        s.value = Some(value);
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
        Ok(())
    }

    /// True if the receiver has been dropped.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::oneshot::<u32>();
    /// assert!(!tx.is_closed());
    /// drop(rx);
    /// assert!(tx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        !self.lock().receiver_alive
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        if self.sent {
            return;
        }
        let mut s = self.lock();
        s.sender_alive = false;
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
        let last = !s.receiver_alive;
        drop(s);
        if last {
            // SAFETY: the receiver is done and we saw it under the lock: we are last.
            unsafe { free(self.inner) };
        }
    }
}

impl<T> fmt::Debug for OneshotSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotSender { .. }")
    }
}

/// Receives the one value of a [`oneshot`] channel.
///
/// ```
/// let (tx, rx) = smarm::channel::oneshot();
/// tx.send("ready").unwrap();
/// assert_eq!(rx.recv(), Ok("ready"));
/// ```
pub struct OneshotReceiver<T> {
    inner: NonNull<Inner<T>>,
    /// This end is finished (value taken or closure seen); the cell may be freed.
    done: Cell<bool>,
}

// SAFETY: as for the sender; the receiver is not Sync (`done` is a Cell).
unsafe impl<T: Send> Send for OneshotReceiver<T> {}

impl<T> OneshotReceiver<T> {
    fn lock(&self) -> RawGuard<'_, State<T>> {
        debug_assert!(!self.done.get(), "oneshot receiver used after it finished");
        // SAFETY: this end is not done, so the cell is alive.
        unsafe { self.inner.as_ref() }.state.lock()
    }

    /// Finishes this end under the lock; frees the cell if the sender is done too.
    fn finish(&self, mut s: RawGuard<'_, State<T>>) -> Option<T> {
        s.receiver_alive = false;
        self.done.set(true);
        let v = s.value.take();
        let last = !s.sender_alive;
        drop(s);
        if last {
            // SAFETY: the sender is done and we saw it under the lock: we are last.
            unsafe { free(self.inner) };
        }
        v
    }

    /// Waits for the value; [`RecvError`] if the sender was dropped without sending.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::oneshot::<u32>();
    /// drop(tx); // dropped without sending
    /// assert_eq!(rx.recv(), Err(smarm::channel::RecvError));
    /// ```
    #[track_caller]
    pub fn recv(self) -> Result<T, RecvError> {
        self.wait(&mut WaitLimit::Forever).map_err(|_| RecvError)
    }

    /// Takes the value if it has arrived.
    ///
    /// ```
    /// use smarm::channel::TryRecvError;
    /// let (tx, mut rx) = smarm::channel::oneshot();
    /// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
    /// tx.send(3).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(3));
    /// ```
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        if self.done.get() {
            return Err(TryRecvError::Disconnected);
        }
        let s = self.lock();
        if s.value.is_some() {
            return Ok(self.finish(s).expect("value present"));
        }
        if !s.sender_alive {
            drop(s);
            return Err(TryRecvError::Disconnected);
        }
        Err(TryRecvError::Empty)
    }

    /// Waits for the value until `deadline`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (tx, mut rx) = smarm::channel::oneshot::<u32>();
    /// let soon = Instant::now() + Duration::from_millis(1);
    /// assert_eq!(rx.recv_deadline(soon), Err(smarm::channel::RecvTimeoutError::Timeout));
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.recv_deadline(soon), Ok(1)); // still there after a timeout
    /// ```
    #[track_caller]
    pub fn recv_deadline(&mut self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.recv_within(&mut WaitLimit::Until(deadline))
    }

    /// Waits at most `timeout` for the value.
    ///
    /// ```
    /// use std::time::Duration;
    /// smarm::run(|| {
    ///     let (tx, mut rx) = smarm::channel::oneshot();
    ///     smarm::spawn(move || tx.send('x').unwrap());
    ///     assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok('x'));
    /// });
    /// ```
    #[track_caller]
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_within(&mut WaitLimit::For(timeout))
    }

    /// Waits within `limit`, which is left as what remains of it (a deadline once a park
    /// has turned it into one), for a caller that goes on waiting for something else.
    #[track_caller]
    pub(crate) fn recv_within(&mut self, limit: &mut WaitLimit) -> Result<T, RecvTimeoutError> {
        if self.done.get() {
            return Err(RecvTimeoutError::Disconnected);
        }
        self.wait(limit)
    }

    #[track_caller]
    fn wait(&self, limit: &mut WaitLimit) -> Result<T, RecvTimeoutError> {
        let mut s = self.lock();
        loop {
            if s.value.is_some() {
                return Ok(self.finish(s).expect("value present"));
            }
            if !s.sender_alive {
                return Err(RecvTimeoutError::Disconnected);
            }
            s.waiter = Some(Waiter::current());
            drop(s);
            // Deregisters if the park unwinds (the actor was killed); on a normal return the
            // registration is cleared under the lock taken next anyway.
            let guard = Deregister(self);
            let timed_out = limit.park(WaitKind::Channel);
            std::mem::forget(guard);
            s = self.lock();
            s.waiter = None;
            if timed_out {
                // The limit passed: one last look, then time out.
                if s.value.is_some() {
                    return Ok(self.finish(s).expect("value present"));
                }
                return Err(if s.sender_alive { RecvTimeoutError::Timeout } else { RecvTimeoutError::Disconnected });
            }
        }
    }
}

/// Clears the receiver's registration if its park unwinds.
struct Deregister<'a, T>(&'a OneshotReceiver<T>);

impl<T> Drop for Deregister<'_, T> {
    fn drop(&mut self) {
        self.0.lock().waiter = None;
    }
}

impl<T> Drop for OneshotReceiver<T> {
    fn drop(&mut self) {
        if self.done.get() {
            return;
        }
        let s = self.lock();
        // A value nobody will receive is dropped outside the lock (user Drop code).
        drop(self.finish(s));
    }
}

impl<T> fmt::Debug for OneshotReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotReceiver { .. }")
    }
}

impl<T> Selectable for OneshotReceiver<T> {
    fn is_ready(&self) -> bool {
        if self.done.get() {
            return true;
        }
        let s = self.lock();
        s.value.is_some() || !s.sender_alive
    }
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool {
        if self.done.get() {
            return true;
        }
        let mut s = self.lock();
        if s.value.is_some() || !s.sender_alive {
            return true;
        }
        s.waiter = Some(waiter.0.clone());
        false
    }
    fn unregister_waiter(&self) {
        if !self.done.get() {
            self.lock().waiter = None;
        }
    }
}

impl<T> SelectRecv for OneshotReceiver<T> {
    type Output = Result<T, RecvError>;
    fn select_recv(&self) -> Result<T, RecvError> {
        if self.done.get() {
            return Err(RecvError);
        }
        let s = self.lock();
        if s.value.is_some() {
            return Ok(self.finish(s).expect("value present"));
        }
        Err(RecvError)
    }
}
