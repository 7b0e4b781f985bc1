//! `oneshot`: one value, one sender, one receiver.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{RecvError, RecvTimeoutError, SelectRecv, SelectWaiter, Selectable, TryRecvError};
use crate::runtime::{park_until, Waiter};
use crate::sync::raw_mutex::{Rank, RawMutex};

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
    let inner = Arc::new(Inner {
        state: RawMutex::new(
            Rank::Primitive,
            State { value: None, sender_alive: true, receiver_alive: true, waiter: None },
        ),
    });
    (OneshotSender { inner: inner.clone() }, OneshotReceiver { inner })
}

/// Sends the one value of a [`oneshot`] channel.
pub struct OneshotSender<T> {
    inner: Arc<Inner<T>>,
}

impl<T> OneshotSender<T> {
    /// Sends the value; returns it if the receiver is gone.
    pub fn send(self, value: T) -> Result<(), T> {
        let mut s = self.inner.state.lock();
        if !s.receiver_alive {
            return Err(value);
        }
        s.value = Some(value);
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
        Ok(())
        // `self` drops here: marks the sender gone (the value is already in place).
    }

    /// True if the receiver has been dropped.
    pub fn is_closed(&self) -> bool {
        !self.inner.state.lock().receiver_alive
    }
}

impl<T> Drop for OneshotSender<T> {
    fn drop(&mut self) {
        let mut s = self.inner.state.lock();
        s.sender_alive = false;
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
    }
}

impl<T> fmt::Debug for OneshotSender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotSender { .. }")
    }
}

/// Receives the one value of a [`oneshot`] channel.
pub struct OneshotReceiver<T> {
    inner: Arc<Inner<T>>,
}

impl<T> OneshotReceiver<T> {
    /// Waits for the value; [`RecvError`] if the sender was dropped without sending.
    pub fn recv(self) -> Result<T, RecvError> {
        self.wait(None).map_err(|_| RecvError)
    }

    /// Takes the value if it has arrived.
    pub fn try_recv(&mut self) -> Result<T, TryRecvError> {
        let mut s = self.inner.state.lock();
        match s.value.take() {
            Some(v) => Ok(v),
            None if !s.sender_alive => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Waits at most `timeout` for the value.
    pub fn recv_timeout(&mut self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.wait(Some(Instant::now() + timeout))
    }

    fn wait(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        loop {
            let mut s = self.inner.state.lock();
            if let Some(v) = s.value.take() {
                return Ok(v);
            }
            if !s.sender_alive {
                return Err(RecvTimeoutError::Disconnected);
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(RecvTimeoutError::Timeout);
            }
            s.waiter = Some(Waiter::current());
            drop(s);
            let guard = Deregister(&self.inner);
            park_until(deadline);
            drop(guard);
        }
    }
}

struct Deregister<'a, T>(&'a Inner<T>);

impl<T> Drop for Deregister<'_, T> {
    fn drop(&mut self) {
        self.0.state.lock().waiter = None;
    }
}

impl<T> Drop for OneshotReceiver<T> {
    fn drop(&mut self) {
        let mut s = self.inner.state.lock();
        s.receiver_alive = false;
        let v = s.value.take();
        drop(s);
        drop(v);
    }
}

impl<T> fmt::Debug for OneshotReceiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OneshotReceiver { .. }")
    }
}

impl<T> Selectable for OneshotReceiver<T> {
    fn is_ready(&self) -> bool {
        let s = self.inner.state.lock();
        s.value.is_some() || !s.sender_alive
    }
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool {
        let mut s = self.inner.state.lock();
        if s.value.is_some() || !s.sender_alive {
            return true;
        }
        s.waiter = Some(waiter.0.clone());
        false
    }
    fn unregister_waiter(&self) {
        self.inner.state.lock().waiter = None;
    }
}

impl<T> SelectRecv for OneshotReceiver<T> {
    type Output = Result<T, RecvError>;
    fn select_recv(&self) -> Result<T, RecvError> {
        self.inner.state.lock().value.take().ok_or(RecvError)
    }
}
