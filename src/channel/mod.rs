//! Channels: unbounded and bounded MPSC ([`channel`], [`bounded`]), [`oneshot`](fn@oneshot), [`watch`](fn@watch),
//! and [`select!`](crate::select).
//!
//! ```
//! use smarm::channel::{bounded, oneshot};
//! smarm::run(|| {
//!     // A pipeline: a producer, a bounded queue (back-pressure), a consumer that reports
//!     // its total through a oneshot.
//!     let (tx, rx) = bounded::<u64>(8);
//!     let (done_tx, done_rx) = oneshot();
//!     smarm::spawn(move || done_tx.send(rx.iter().sum::<u64>()).unwrap());
//!     for i in 1..=100 {
//!         tx.send(i).unwrap(); // parks while 8 are queued
//!     }
//!     drop(tx); // closes the channel: the consumer's iterator ends
//!     assert_eq!(done_rx.recv(), Ok(5050));
//! });
//! ```
//!
//! The error types follow std's `mpsc` and crossbeam's: [`SendError`] and [`TrySendError`]
//! hand the value back, [`RecvError`], [`TryRecvError`] and [`RecvTimeoutError`] say why
//! nothing was received; the enums are `#[non_exhaustive]`. A oneshot's `send` hands the
//! value back as is, as tokio's oneshot does.
//!
//! Every blocking operation parks the calling actor (never its scheduler thread) and also
//! works from a plain OS thread, which it blocks. Wakes go through the runtime: when the
//! waker is an actor on a scheduler thread of the receiver's runtime, the woken receiver
//! goes to that thread's wake slot and runs next there; from a plain thread it goes to the
//! shared run queue.
//!
//! # MPSC state and invariants
//!
//! One `RawMutex` guards the queue, the parked receiver (at most one: the receiver is
//! unique), parked senders (bounded only), the sender count and the receiver-alive flag.
//! - A send that finds room pushes and wakes the parked receiver, if any, under the lock
//!   (so the `Waiter`'s runtime is alive: a receiver deregisters under the same lock before
//!   it can go away). A receiver parked in `recv` also registers a cell in its frame, and
//!   the send hands the value straight into it instead (protocol in the `hand` module):
//!   the woken receiver returns it without touching the channel again.
//! - Closure: when the last `Sender` drops, the receiver is woken; `recv` drains what is
//!   queued, then reports [`RecvError`]. When the `Receiver` drops, queued values are
//!   dropped (once, outside the lock) and sends return the value in [`SendError`].
//! - Zero allocation on ready paths: bounded queues of up to 1,024 messages allocate their
//!   ring at creation (larger ones grow by doubling as they fill); an unbounded queue reserves 16 slots on its first push and then grows by doubling (at
//!   most one allocation per 16 messages, none in steady state).

mod oneshot;
mod select;
mod watch;

use crate::slot_state::WaitKind;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::hand::{Hand, HandPtr};
use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

pub use oneshot::{oneshot, OneshotReceiver, OneshotSender};
pub use select::{__deadline_after, select_ready, SelectRecv, SelectWaiter, Selectable};
pub use watch::{watch, WatchReceiver, WatchSender};

/// First allocation of an unbounded queue, in messages.
const UNBOUNDED_FIRST_BLOCK: usize = 16;

/// A bounded channel allocates room for its capacity up front, up to this many messages
/// (sends then never reallocate); a larger capacity grows as the queue fills, so any
/// capacity is accepted.
const BOUNDED_PRESIZED: usize = 1024;

/// The receiver is gone; the value is handed back.
///
/// ```
/// let (tx, rx) = smarm::channel::channel();
/// drop(rx);
/// assert_eq!(tx.send(5), Err(smarm::channel::SendError(5)));
/// ```
#[derive(PartialEq, Eq, Clone, Copy)]
pub struct SendError<T>(pub T);

impl<T> fmt::Debug for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SendError(..)")
    }
}
impl<T> fmt::Display for SendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("sending on a channel whose receiver is gone")
    }
}
impl<T> std::error::Error for SendError<T> {}

/// Why `try_send` did not send; the value is handed back.
///
/// ```
/// use smarm::channel::TrySendError;
/// let (tx, rx) = smarm::channel::bounded(1);
/// tx.try_send(1).unwrap();
/// assert_eq!(tx.try_send(2), Err(TrySendError::Full(2)));
/// drop(rx);
/// assert_eq!(tx.try_send(3), Err(TrySendError::Disconnected(3)));
/// ```
///
/// `#[non_exhaustive]` (variants are added, e.g. for the cluster): a `match` needs a `_` arm.
///
/// ```compile_fail,E0004
/// fn f(e: smarm::channel::TrySendError<u32>) {
///     use smarm::channel::TrySendError::*;
///     match e { Full(_) | Disconnected(_) => {} }
/// }
/// ```
#[derive(PartialEq, Eq, Clone, Copy)]
#[non_exhaustive]
pub enum TrySendError<T> {
    /// A bounded channel is at capacity.
    Full(T),
    /// The receiver is gone.
    Disconnected(T),
}

impl<T> TrySendError<T> {
    /// The value that was not sent.
    ///
    /// ```
    /// let (tx, _rx) = smarm::channel::bounded(1);
    /// tx.try_send("a").unwrap();
    /// assert_eq!(tx.try_send("b").unwrap_err().into_inner(), "b");
    /// ```
    pub fn into_inner(self) -> T {
        match self {
            TrySendError::Full(v) | TrySendError::Disconnected(v) => v,
        }
    }
}
impl<T> fmt::Debug for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("Full(..)"),
            TrySendError::Disconnected(_) => f.write_str("Disconnected(..)"),
        }
    }
}
impl<T> fmt::Display for TrySendError<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrySendError::Full(_) => f.write_str("the channel is full"),
            TrySendError::Disconnected(_) => f.write_str("the receiver is gone"),
        }
    }
}
impl<T> std::error::Error for TrySendError<T> {}

/// Every sender is gone and nothing is queued.
///
/// ```
/// let (tx, rx) = smarm::channel::channel::<u32>();
/// drop(tx);
/// assert_eq!(rx.recv(), Err(smarm::channel::RecvError));
/// ```
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub struct RecvError;

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("receiving on a closed channel")
    }
}
impl std::error::Error for RecvError {}

/// Why `try_recv` returned nothing.
///
/// ```
/// use smarm::channel::TryRecvError;
/// let (tx, rx) = smarm::channel::channel::<u32>();
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
/// drop(tx);
/// assert_eq!(rx.try_recv(), Err(TryRecvError::Disconnected));
/// ```
///
/// `#[non_exhaustive]` (variants are added, e.g. for the cluster): a `match` needs a `_` arm.
///
/// ```compile_fail,E0004
/// fn f(e: smarm::channel::TryRecvError) {
///     use smarm::channel::TryRecvError::*;
///     match e { Empty | Disconnected => {} }
/// }
/// ```
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[non_exhaustive]
pub enum TryRecvError {
    /// Nothing queued right now.
    Empty,
    /// Nothing queued and every sender is gone.
    Disconnected,
}

impl fmt::Display for TryRecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TryRecvError::Empty => f.write_str("the channel is empty"),
            TryRecvError::Disconnected => f.write_str("the channel is empty and closed"),
        }
    }
}
impl std::error::Error for TryRecvError {}

/// Why `recv_timeout`/`recv_deadline` returned nothing.
///
/// ```
/// use std::time::Duration;
/// use smarm::channel::RecvTimeoutError;
/// let (tx, rx) = smarm::channel::channel::<u32>();
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Timeout));
/// drop(tx);
/// assert_eq!(rx.recv_timeout(Duration::from_millis(1)), Err(RecvTimeoutError::Disconnected));
/// ```
///
/// `#[non_exhaustive]` (variants are added, e.g. for the cluster): a `match` needs a `_` arm.
///
/// ```compile_fail,E0004
/// fn f(e: smarm::channel::RecvTimeoutError) {
///     use smarm::channel::RecvTimeoutError::*;
///     match e { Timeout | Disconnected => {} }
/// }
/// ```
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
#[non_exhaustive]
pub enum RecvTimeoutError {
    /// The deadline passed with nothing queued.
    Timeout,
    /// Nothing queued and every sender is gone.
    Disconnected,
}

impl fmt::Display for RecvTimeoutError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecvTimeoutError::Timeout => f.write_str("timed out waiting on a channel"),
            RecvTimeoutError::Disconnected => f.write_str("the channel is empty and closed"),
        }
    }
}
impl std::error::Error for RecvTimeoutError {}

/// `repr(C)`, hot fields first: with the lock in front (`RawMutex` is `repr(C)`) and the
/// channel line-aligned, a send to a parked `recv` and the `recv` that parks touch one line
/// of the channel (8 + 32 + 8 + 8 + 4 + 1 bytes; hence the `u32` sender count).
#[repr(C)]
struct State<T> {
    queue: VecDeque<T>,
    /// A `recv` parked on an empty queue, with its waiter (`hand` module).
    hand: HandPtr<T>,
    /// `usize::MAX` for unbounded.
    cap: usize,
    senders: u32,
    receiver_alive: bool,
    /// A parked `select` that includes this receiver.
    receiver: Option<Waiter>,
    /// Senders parked on a full bounded queue, FIFO.
    senders_waiting: VecDeque<Waiter>,
}

#[repr(align(64))]
struct Chan<T> {
    state: RawMutex<State<T>>,
}

impl<T> Chan<T> {
    fn new(cap: usize) -> Arc<Chan<T>> {
        let queue =
            if cap == usize::MAX { VecDeque::new() } else { VecDeque::with_capacity(cap.min(BOUNDED_PRESIZED)) };
        Arc::new(Chan {
            state: RawMutex::new(
                Rank::Primitive,
                State {
                    queue,
                    cap,
                    receiver: None,
                    hand: HandPtr::NONE,
                    senders_waiting: VecDeque::new(),
                    senders: 1,
                    receiver_alive: true,
                },
            ),
        })
    }
}

/// Creates an unbounded multi-producer, single-consumer channel.
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     smarm::spawn(move || tx.send(42).unwrap());
///     assert_eq!(rx.recv(), Ok(42));
/// });
/// ```
pub fn channel<T: Send>() -> (Sender<T>, Receiver<T>) {
    let chan = Chan::new(usize::MAX);
    (Sender { chan: chan.clone() }, Receiver { chan, _one_receiver: std::marker::PhantomData })
}

/// Creates a bounded channel holding at most `cap` messages: `send` parks while it is full,
/// `try_send` hands the value back. Room for up to 1,024 messages is allocated at once; a
/// larger capacity is allocated as the queue fills (`usize::MAX` is unbounded).
///
/// # Panics
/// If `cap` is 0: a zero-capacity (rendezvous) channel is not provided; use
/// [`oneshot`](fn@oneshot) for a single hand-over or `bounded(1)`.
///
/// ```
/// let (tx, rx) = smarm::channel::bounded(1);
/// tx.try_send(1).unwrap();
/// assert!(tx.try_send(2).is_err());
/// assert_eq!(rx.try_recv(), Ok(1));
/// ```
pub fn bounded<T: Send>(cap: usize) -> (Sender<T>, Receiver<T>) {
    assert!(
        cap > 0,
        "smarm::channel::bounded(cap): cap must be at least 1 (got 0); zero-capacity channels are not provided"
    );
    let chan = Chan::new(cap);
    (Sender { chan: chan.clone() }, Receiver { chan, _one_receiver: std::marker::PhantomData })
}

/// The sending half of a [`channel`] or [`bounded`] channel. Cloneable.
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     for i in 0..3 {
///         let tx = tx.clone();
///         smarm::spawn(move || tx.send(i).unwrap());
///     }
///     drop(tx);
///     let mut got: Vec<i32> = rx.iter().collect(); // ends when every sender is gone
///     got.sort();
///     assert_eq!(got, [0, 1, 2]);
/// });
/// ```
pub struct Sender<T> {
    chan: Arc<Chan<T>>,
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        let mut s = self.chan.state.lock();
        s.senders = s.senders.checked_add(1).expect("smarm: more than u32::MAX senders of one channel");
        drop(s);
        Sender { chan: self.chan.clone() }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.chan.state.lock();
        s.senders -= 1;
        if s.senders == 0 {
            if let Some(w) = s.receiver.take() {
                w.wake();
            }
            if let Some(hand) = s.hand.take() {
                // SAFETY: taken from the registration under the lock (the `hand` contract).
                unsafe { hand.wake_empty() };
            }
        }
    }
}

impl<T> fmt::Debug for Sender<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Sender { .. }")
    }
}

impl<T> Sender<T> {
    /// Sends `value`, parking while a bounded channel is full. Returns the value if the
    /// receiver is gone. A send that does not park counts toward the sender's timeslice: a
    /// loop of sends is preempted like a CPU-bound loop calling
    /// [`maybe_preempt`](crate::maybe_preempt).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::bounded(1);
    ///     let producer = smarm::spawn(move || {
    ///         for i in 0..3 {
    ///             tx.send(i).unwrap(); // parks while the channel is full
    ///         }
    ///     });
    ///     assert_eq!(rx.iter().collect::<Vec<_>>(), [0, 1, 2]);
    ///     producer.join().unwrap();
    /// });
    /// ```
    #[track_caller]
    pub fn send(&self, value: T) -> Result<(), SendError<T>> {
        let mut value = value;
        loop {
            match self.try_send(value) {
                Ok(()) => {
                    crate::preempt::charge_send();
                    return Ok(());
                }
                Err(TrySendError::Disconnected(v)) => {
                    crate::preempt::charge_send();
                    return Err(SendError(v));
                }
                Err(TrySendError::Full(v)) => value = v,
            }
            self.wait_for_room();
        }
    }

    /// [`send`](Self::send) found the channel full: registers, re-checks under the lock and
    /// parks. Out of line, so the common path carries neither the park nor its report.
    #[cold]
    #[inline(never)]
    #[track_caller]
    fn wait_for_room(&self) {
        let mut s = self.chan.state.lock();
        if s.queue.len() < s.cap || !s.receiver_alive {
            return;
        }
        s.senders_waiting.push_back(Waiter::current());
        drop(s);
        let guard = DeregisterSender(&self.chan);
        park_until(None, WaitKind::Channel);
        drop(guard);
    }

    /// Sends without blocking; a full bounded channel or a gone receiver hands the value back.
    /// Unlike [`send`](Self::send) it does not count toward the timeslice: a loop of
    /// `try_send`s that never blocks should call [`maybe_preempt`](crate::maybe_preempt).
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::bounded(1);
    /// assert!(tx.try_send(1).is_ok());
    /// assert!(tx.try_send(2).is_err()); // full: handed back
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    pub fn try_send(&self, value: T) -> Result<(), TrySendError<T>> {
        let mut s = self.chan.state.lock();
        if !s.receiver_alive {
            return Err(TrySendError::Disconnected(value));
        }
        if s.queue.len() >= s.cap {
            return Err(TrySendError::Full(value));
        }
        if let Some(hand) = s.hand.take() {
            // SAFETY: taken from the registration under the lock (the `hand` contract).
            unsafe { hand.fill(value) };
            return Ok(());
        }
        if s.queue.capacity() == 0 {
            s.queue.reserve(UNBOUNDED_FIRST_BLOCK);
        }
        s.queue.push_back(value);
        if let Some(w) = s.receiver.take() {
            w.wake();
        }
        Ok(())
    }

    /// True if the receiver has been dropped.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::channel::<u32>();
    /// assert!(!tx.is_closed());
    /// drop(rx);
    /// assert!(tx.is_closed());
    /// ```
    pub fn is_closed(&self) -> bool {
        !self.chan.state.lock().receiver_alive
    }
}

/// Removes the calling sender's registration if it is still queued (woken or unwinding).
struct DeregisterSender<'a, T>(&'a Chan<T>);

impl<T> Drop for DeregisterSender<'_, T> {
    fn drop(&mut self) {
        let me = Waiter::current();
        let mut s = self.0.state.lock();
        if let Some(i) = s.senders_waiting.iter().position(|w| w.same_as(&me)) {
            s.senders_waiting.remove(i);
        }
        // A slot we were woken for but will not use (unwinding) goes to the next sender.
        if s.queue.len() < s.cap {
            if let Some(w) = s.senders_waiting.pop_front() {
                w.wake();
            }
        }
    }
}

/// The receiving half of a [`channel`] or [`bounded`] channel.
///
/// One receiver: it can move to another actor or thread (`Send`) but not be shared
/// (`!Sync`), as with `std::sync::mpsc`:
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<smarm::channel::Receiver<u32>>();
/// ```
pub struct Receiver<T> {
    chan: Arc<Chan<T>>,
    /// `!Sync`: a parked `recv` registers itself as *the* receiver (`hand` module).
    _one_receiver: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl<T> fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Receiver { .. }")
    }
}

impl<T> Receiver<T> {
    /// Takes the next message, parking until one arrives. After every sender is gone it
    /// drains what is queued, then returns [`RecvError`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::channel();
    ///     smarm::spawn(move || tx.send("hello").unwrap());
    ///     assert_eq!(rx.recv(), Ok("hello"));
    ///     assert!(rx.recv().is_err()); // the sender is gone
    /// });
    /// ```
    #[track_caller]
    pub fn recv(&self) -> Result<T, RecvError> {
        self.recv_deadline_opt(None).map_err(|_| RecvError)
    }

    /// Takes the next message without blocking.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::channel();
    /// assert!(rx.try_recv().is_err());
    /// tx.send(1).unwrap();
    /// assert_eq!(rx.try_recv(), Ok(1));
    /// ```
    pub fn try_recv(&self) -> Result<T, TryRecvError> {
        let mut s = self.chan.state.lock();
        match Self::pop(&mut s) {
            Some(v) => Ok(v),
            None if s.senders == 0 => Err(TryRecvError::Disconnected),
            None => Err(TryRecvError::Empty),
        }
    }

    /// Like [`recv`](Self::recv), giving up after `timeout`. A zero timeout polls without
    /// parking.
    ///
    /// ```
    /// use std::time::Duration;
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::channel();
    ///     smarm::spawn(move || tx.send(1).unwrap());
    ///     assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(1));
    /// });
    /// ```
    #[track_caller]
    pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
        self.recv_deadline_opt(Some(crate::timer::deadline_after(Instant::now(), timeout)))
    }

    /// Like [`recv`](Self::recv), giving up at `deadline`.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let (_tx, rx) = smarm::channel::channel::<u32>();
    /// let deadline = Instant::now() + Duration::from_millis(1);
    /// assert_eq!(rx.recv_deadline(deadline), Err(smarm::channel::RecvTimeoutError::Timeout));
    /// ```
    #[track_caller]
    pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
        self.recv_deadline_opt(Some(deadline))
    }

    /// A blocking iterator over messages; ends when every sender is gone and the queue is empty.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::channel();
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// drop(tx);
    /// assert_eq!(rx.iter().collect::<Vec<_>>(), [1, 2]);
    /// ```
    pub fn iter(&self) -> Iter<'_, T> {
        Iter { rx: self }
    }

    /// A non-blocking iterator over the messages queued now.
    ///
    /// ```
    /// let (tx, rx) = smarm::channel::channel();
    /// tx.send(1).unwrap();
    /// tx.send(2).unwrap();
    /// assert_eq!(rx.try_iter().collect::<Vec<_>>(), [1, 2]); // does not wait for more
    /// tx.send(3).unwrap();
    /// ```
    pub fn try_iter(&self) -> TryIter<'_, T> {
        TryIter { rx: self }
    }

    fn pop(s: &mut State<T>) -> Option<T> {
        let v = s.queue.pop_front()?;
        if let Some(w) = s.senders_waiting.pop_front() {
            w.wake();
        }
        Some(v)
    }

    #[track_caller]
    fn recv_deadline_opt(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
        let mut timed_out = false;
        let mut s = self.chan.state.lock();
        let hand = Hand::new();
        loop {
            if let Some(v) = Self::pop(&mut s) {
                return Ok(v);
            }
            if s.senders == 0 {
                return Err(RecvTimeoutError::Disconnected);
            }
            if timed_out {
                return Err(RecvTimeoutError::Timeout);
            }
            s.hand.register(&hand);
            drop(s);
            // Deregisters if the park unwinds (the actor was killed); on a normal return the
            // registration is cleared under the lock taken next anyway (one lock round per
            // wake, not two). Declared after `hand`, so it drops first.
            let guard = DeregisterReceiver(&self.chan);
            // `park_until` reads the clock once and declines to park once the deadline has
            // passed; the condition is then looked at one last time before timing out.
            timed_out = !park_until(deadline, WaitKind::Channel);
            std::mem::forget(guard);
            if let Some(v) = hand.take() {
                return Ok(v);
            }
            s = self.chan.state.lock();
            // A send may have finished between the look above and this lock.
            if let Some(v) = hand.take() {
                return Ok(v);
            }
            s.hand = HandPtr::NONE;
        }
    }
}

struct DeregisterReceiver<'a, T>(&'a Chan<T>);

impl<T> Drop for DeregisterReceiver<'_, T> {
    fn drop(&mut self) {
        self.0.state.lock().hand = HandPtr::NONE;
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut s = self.chan.state.lock();
        s.receiver_alive = false;
        let queued = std::mem::take(&mut s.queue);
        let senders = std::mem::take(&mut s.senders_waiting);
        for w in &senders {
            w.wake();
        }
        drop(s);
        // User Drop code runs outside the lock.
        drop(queued);
    }
}

impl<T> Selectable for Receiver<T> {
    fn is_ready(&self) -> bool {
        let s = self.chan.state.lock();
        !s.queue.is_empty() || s.senders == 0
    }
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool {
        let mut s = self.chan.state.lock();
        if !s.queue.is_empty() || s.senders == 0 {
            return true;
        }
        s.receiver = Some(waiter.0.clone());
        false
    }
    fn unregister_waiter(&self) {
        self.chan.state.lock().receiver = None;
    }
}

impl<T> SelectRecv for Receiver<T> {
    type Output = Result<T, RecvError>;
    fn select_recv(&self) -> Result<T, RecvError> {
        // Only this receiver consumes, so an arm found ready stays ready.
        self.try_recv().map_err(|_| RecvError)
    }
}

/// Blocking iterator returned by [`Receiver::iter`].
///
/// ```
/// let (tx, rx) = smarm::channel::channel();
/// tx.send('a').unwrap();
/// drop(tx);
/// for c in &rx {
///     assert_eq!(c, 'a');
/// }
/// ```
pub struct Iter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for Iter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

/// Non-blocking iterator returned by [`Receiver::try_iter`].
///
/// ```
/// let (_tx, rx) = smarm::channel::channel::<u32>();
/// assert_eq!(rx.try_iter().next(), None);
/// ```
pub struct TryIter<'a, T> {
    rx: &'a Receiver<T>,
}

impl<T> Iterator for TryIter<'_, T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.try_recv().ok()
    }
}

impl<'a, T> IntoIterator for &'a Receiver<T> {
    type Item = T;
    type IntoIter = Iter<'a, T>;
    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

/// Owning blocking iterator.
///
/// ```
/// let (tx, rx) = smarm::channel::channel();
/// tx.send(1).unwrap();
/// drop(tx);
/// assert_eq!(rx.into_iter().sum::<i32>(), 1);
/// ```
pub struct IntoIter<T> {
    rx: Receiver<T>,
}

impl<T> Iterator for IntoIter<T> {
    type Item = T;
    fn next(&mut self) -> Option<T> {
        self.rx.recv().ok()
    }
}

impl<T> IntoIterator for Receiver<T> {
    type Item = T;
    type IntoIter = IntoIter<T>;
    fn into_iter(self) -> IntoIter<T> {
        IntoIter { rx: self }
    }
}
