//! `watch`: a latest-value broadcast. The sender replaces the value; each receiver can wait
//! for a value newer than the last one it saw.
//!
//! ```
//! smarm::run(|| {
//!     let (config_tx, mut config) = smarm::channel::watch("v1");
//!     let reader = smarm::spawn(move || {
//!         config.changed().unwrap(); // waits for something newer than "v1"
//!         config.get()
//!     });
//!     config_tx.send("v2");
//!     assert_eq!(reader.join().unwrap(), "v2");
//! });
//! ```

use crate::slot_state::WaitKind;
use std::fmt;
use std::sync::Arc;

use super::RecvError;
use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

struct State<T> {
    value: T,
    /// Bumped by every send.
    version: u64,
    /// Receivers parked in `changed`.
    waiters: Vec<Waiter>,
    sender_alive: bool,
}

struct Inner<T> {
    state: RawMutex<State<T>>,
}

/// Creates a watch channel holding `initial`.
///
/// ```
/// smarm::run(|| {
///     let (tx, mut rx) = smarm::channel::watch(0);
///     smarm::spawn(move || tx.send(5));
///     rx.changed().unwrap();
///     assert_eq!(rx.get(), 5);
/// });
/// ```
pub fn watch<T: Send>(initial: T) -> (WatchSender<T>, WatchReceiver<T>) {
    let inner = Arc::new(Inner {
        state: RawMutex::new(
            Rank::Primitive,
            State { value: initial, version: 0, waiters: Vec::new(), sender_alive: true },
        ),
    });
    (WatchSender { inner: inner.clone() }, WatchReceiver { inner, seen: 0 })
}

/// Publishes values to every [`WatchReceiver`].
///
/// ```
/// let (tx, rx) = smarm::channel::watch("v1");
/// let mut other = rx.clone();
/// tx.send("v2");
/// assert_eq!(other.get(), "v2");
/// ```
pub struct WatchSender<T> {
    inner: Arc<Inner<T>>,
}

impl<T> WatchSender<T> {
    /// Replaces the value and wakes every receiver waiting in `changed`.
    ///
    /// ```
    /// let (tx, mut rx) = smarm::channel::watch(0);
    /// tx.send(1);
    /// assert!(rx.has_changed());
    /// assert_eq!(rx.get(), 1);
    /// ```
    pub fn send(&self, value: T) {
        drop(self.send_replace(value));
    }

    /// Like [`send`](Self::send), returning the previous value.
    ///
    /// ```
    /// let (tx, _rx) = smarm::channel::watch(1);
    /// assert_eq!(tx.send_replace(2), 1);
    /// ```
    pub fn send_replace(&self, value: T) -> T {
        let mut s = self.inner.state.lock();
        let old = std::mem::replace(&mut s.value, value);
        s.version += 1;
        for w in s.waiters.drain(..) {
            w.wake();
        }
        old
    }

    /// A new receiver that has seen the current value.
    ///
    /// ```
    /// let (tx, _rx) = smarm::channel::watch(0);
    /// tx.send(1);
    /// let late = tx.subscribe();
    /// assert!(!late.has_changed()); // it has seen 1 already
    /// ```
    pub fn subscribe(&self) -> WatchReceiver<T> {
        let seen = self.inner.state.lock().version;
        WatchReceiver { inner: self.inner.clone(), seen }
    }
}

impl<T: Clone> WatchSender<T> {
    /// A clone of the current value.
    ///
    /// ```
    /// let (tx, _rx) = smarm::channel::watch(String::from("a"));
    /// assert_eq!(tx.get(), "a");
    /// ```
    pub fn get(&self) -> T {
        self.inner.state.lock().value.clone()
    }
}

impl<T> Drop for WatchSender<T> {
    fn drop(&mut self) {
        let mut s = self.inner.state.lock();
        s.sender_alive = false;
        for w in s.waiters.drain(..) {
            w.wake();
        }
    }
}

impl<T> fmt::Debug for WatchSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WatchSender { .. }")
    }
}

/// Observes a [`watch`] channel. Cloneable; each clone tracks what it has seen.
///
/// ```
/// smarm::run(|| {
///     let (tx, mut rx) = smarm::channel::watch(0u32);
///     let reader = smarm::spawn(move || {
///         let mut last = 0;
///         while rx.changed().is_ok() {
///             last = rx.get();
///         }
///         last // the sender is gone
///     });
///     for v in 1..=3 {
///         tx.send(v);
///     }
///     drop(tx);
///     assert_eq!(reader.join().unwrap(), 3); // the latest value; some may be skipped
/// });
/// ```
pub struct WatchReceiver<T> {
    inner: Arc<Inner<T>>,
    seen: u64,
}

impl<T> Clone for WatchReceiver<T> {
    fn clone(&self) -> Self {
        WatchReceiver { inner: self.inner.clone(), seen: self.seen }
    }
}

impl<T> WatchReceiver<T> {
    /// Waits until a value newer than the last one seen by this receiver is published, and
    /// marks it seen. [`RecvError`] once the sender is gone and nothing newer is left.
    ///
    /// ```
    /// let (tx, mut rx) = smarm::channel::watch(0);
    /// tx.send(1);
    /// assert!(rx.changed().is_ok()); // 1 is new: returns at once
    /// drop(tx);
    /// assert!(rx.changed().is_err()); // nothing newer will come
    /// ```
    #[track_caller]
    pub fn changed(&mut self) -> Result<(), RecvError> {
        self.changed_until(None).map_err(|_| RecvError)
    }

    /// Like [`changed`](Self::changed), giving up at `deadline`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (_tx, mut rx) = smarm::channel::watch(0);
    /// let soon = Instant::now() + Duration::from_millis(1);
    /// assert_eq!(rx.changed_deadline(soon), Err(smarm::channel::RecvTimeoutError::Timeout));
    /// ```
    #[track_caller]
    pub fn changed_deadline(&mut self, deadline: std::time::Instant) -> Result<(), super::RecvTimeoutError> {
        self.changed_until(Some(deadline))
    }

    #[track_caller]
    fn changed_until(&mut self, deadline: Option<std::time::Instant>) -> Result<(), super::RecvTimeoutError> {
        let mut timed_out = false;
        loop {
            let mut s = self.inner.state.lock();
            if s.version != self.seen {
                self.seen = s.version;
                return Ok(());
            }
            if !s.sender_alive {
                return Err(super::RecvTimeoutError::Disconnected);
            }
            if timed_out {
                return Err(super::RecvTimeoutError::Timeout);
            }
            s.waiters.push(Waiter::current());
            drop(s);
            let guard = Deregister(&self.inner);
            // One clock read per park; see `Receiver::recv_deadline_opt`.
            timed_out = !park_until(deadline, WaitKind::Channel);
            drop(guard);
        }
    }

    /// True if a value newer than the last one seen was published.
    ///
    /// ```
    /// let (tx, mut rx) = smarm::channel::watch(0);
    /// assert!(!rx.has_changed());
    /// tx.send(1);
    /// assert!(rx.has_changed());
    /// rx.get();
    /// assert!(!rx.has_changed());
    /// ```
    pub fn has_changed(&self) -> bool {
        self.inner.state.lock().version != self.seen
    }

    /// Applies `f` to the current value and marks it seen.
    ///
    /// ```
    /// let (_tx, mut rx) = smarm::channel::watch(vec![1, 2, 3]);
    /// assert_eq!(rx.with(|v| v.len()), 3); // no clone of the vector
    /// ```
    pub fn with<R>(&mut self, f: impl FnOnce(&T) -> R) -> R {
        let s = self.inner.state.lock();
        self.seen = s.version;
        f(&s.value)
    }
}

impl<T: Clone> WatchReceiver<T> {
    /// A clone of the current value, marked seen.
    ///
    /// ```
    /// let (tx, mut rx) = smarm::channel::watch(1);
    /// tx.send(2);
    /// assert_eq!(rx.get(), 2);
    /// ```
    pub fn get(&mut self) -> T {
        self.with(T::clone)
    }
}

impl<T> fmt::Debug for WatchReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchReceiver").field("seen", &self.seen).finish()
    }
}

struct Deregister<'a, T>(&'a Inner<T>);

impl<T> Drop for Deregister<'_, T> {
    fn drop(&mut self) {
        let me = Waiter::current();
        let mut s = self.0.state.lock();
        if let Some(i) = s.waiters.iter().position(|w| w.same_as(&me)) {
            s.waiters.swap_remove(i);
        }
    }
}
