//! Mailboxes: one FIFO per actor carrying its typed messages *and* its signals (Down, Exit)
//! in arrival order, so "a message sent before an actor died arrives before its Down" falls
//! out of the queue order, as in Erlang.
//!
//! [`spawn_actor`](crate::task::spawn_actor) gives the actor a [`Mailbox<M>`] and returns an [`Addr<M>`]: a cheap,
//! cloneable handle carrying the pid. Sending to a dead actor is a silent no-op: the
//! mailbox belongs to one occupancy of a slot, so a newer actor in the same slot never
//! receives it. Plain `spawn` actors get a signal-only mailbox on first use (monitor,
//! trap_exit), read with [`recv_signal`](crate::recv_signal).
//!
//! ```
//! use smarm::{Envelope, Mailbox};
//! smarm::run(|| {
//!     let (tx, rx) = smarm::channel::oneshot();
//!     let counter = smarm::spawn_actor(move |mb: Mailbox<u32>| {
//!         let mut total = 0;
//!         loop {
//!             match mb.recv() {
//!                 Envelope::Msg(0) => break,
//!                 Envelope::Msg(n) => total += n,
//!                 Envelope::Down(_) | Envelope::Exit(_) => {}
//!             }
//!         }
//!         tx.send(total).unwrap();
//!     });
//!     for n in [1, 2, 3, 0] {
//!         counter.send(n);
//!     }
//!     assert_eq!(rx.recv(), Ok(6));
//! });
//! ```
//!
//! # Hand-off into a parked receive
//!
//! An owner parked in a receive that takes the first envelope (`recv`, `recv_timeout`,
//! `recv_signal`) registers a [`Hand`] in its own frame: the next push moves its envelope
//! straight into it (protocol in the `hand` module). Selective receives do not take part:
//! what they are handed might not match.

use crate::slot_state::WaitKind;
use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::channel::{RecvTimeoutError, SelectRecv, SelectWaiter, Selectable, SendError, TryRecvError};
use crate::error::LookupError;
use crate::hand::{Hand, HandPtr};
use crate::process::{Down, Exit, Signal, SignalSink};
use crate::raw_mutex::{Rank, RawGuard, RawMutex};
use crate::runtime::{Shared, WaitLimit, Waiter};
use crate::slot_state::Pid;

/// What an actor receives: a message, or a signal, in one FIFO (a message sent before an
/// actor died arrives before its Down).
///
/// ```
/// use smarm::{Envelope, Mailbox};
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     smarm::spawn_actor(move |mb: Mailbox<&str>| {
///         let child = smarm::spawn_actor(|mb: Mailbox<()>| drop(mb));
///         smarm::monitor(child.pid());
///         match mb.recv() {
///             Envelope::Down(d) => tx.send(d.pid == child.pid()).unwrap(),
///             Envelope::Msg(_) | Envelope::Exit(_) => unreachable!("nothing else is sent"),
///         }
///     });
///     assert_eq!(rx.recv(), Ok(true));
/// });
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Envelope<M> {
    /// A message sent to the actor's [`Addr`].
    Msg(M),
    /// A monitor fired.
    Down(Down),
    /// An exit signal (the actor traps exits).
    Exit(Exit),
}

impl<M> Envelope<M> {
    /// The message, if this is one.
    ///
    /// ```
    /// let e: smarm::Envelope<u32> = smarm::Envelope::Msg(3);
    /// assert_eq!(e.into_msg(), Some(3));
    /// ```
    pub fn into_msg(self) -> Option<M> {
        match self {
            Envelope::Msg(m) => Some(m),
            _ => None,
        }
    }
}

/// `repr(C)`, hot fields first (see the channel's `State`).
#[repr(C)]
struct State<M> {
    queue: VecDeque<Envelope<M>>,
    /// A receive that takes the first envelope, parked on an empty queue, with its waiter:
    /// the next push hands its envelope to this cell (see the module doc).
    hand: HandPtr<Envelope<M>>,
    /// False once the owning `Mailbox` is gone: sends are dropped.
    alive: bool,
    /// The owner parked in a selective receive or a `select`.
    waiter: Option<Waiter>,
    /// Envelopes taken out of `queue` so far, by any path. Pushes only append, so while this
    /// stays the same the first `k` queued envelopes stay the same `k` envelopes: a selective
    /// receive woken up resumes its search where it stopped (its save marker), and a
    /// [`RecvMark`] stays valid. A change sends both back to the head of the queue.
    removed: u64,
}

/// A place in a mailbox's queue: its end when [`Mailbox::mark`] was called. A selective
/// receive given the mark ([`Mailbox::recv_match_from`]) does not look at what was queued
/// before it, as OTP's compiler arranges for a `receive` that matches a reference made just
/// before it (a monitor's, an alias's, a request's): such a receive costs what arrived since,
/// however long the mailbox is.
///
/// If any envelope was taken out of the mailbox between the mark and the receive, the
/// receive searches the whole queue (the mark no longer names a place in it): correct, only
/// slower.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecvMark {
    owner: Pid,
    len: usize,
    removed: u64,
}

/// Line-aligned: the lock and the hot fields of `State` share the first line.
#[repr(C, align(64))]
pub(crate) struct MailboxInner<M> {
    state: RawMutex<State<M>>,
    pid: Pid,
    /// How a term from another node becomes an `M` (feature `cluster`): set once by
    /// `Mailbox::accept_remote`; unset, remote messages to this actor are dropped and counted.
    #[cfg(feature = "cluster")]
    pub(crate) decode: std::sync::OnceLock<RemoteDecode<M>>,
}

/// Decodes a term from another node into a mailbox's message type (feature `cluster`).
#[cfg(feature = "cluster")]
pub(crate) type RemoteDecode<M> = fn(eetf::Term) -> Result<M, String>;

/// Why a term from another node did not reach a mailbox (feature `cluster`).
#[cfg(feature = "cluster")]
#[derive(Debug)]
pub(crate) enum TermRejected {
    /// The actor never called `accept_remote`.
    NotAccepted,
    /// The term does not decode into the mailbox's type (the decoder's message).
    Undecodable(String),
    /// The mailbox is gone.
    Dead,
}

impl<M> MailboxInner<M> {
    fn new(pid: Pid) -> Arc<Self> {
        Arc::new(MailboxInner {
            state: RawMutex::new(
                Rank::Primitive,
                State { queue: VecDeque::new(), waiter: None, hand: HandPtr::NONE, alive: true, removed: 0 },
            ),
            pid,
            #[cfg(feature = "cluster")]
            decode: std::sync::OnceLock::new(),
        })
    }

    fn push(&self, e: Envelope<M>) -> Result<(), Envelope<M>> {
        let mut s = self.state.lock();
        if !s.alive {
            return Err(e);
        }
        if let Some(hand) = s.hand.take() {
            // SAFETY: taken from the registration under the lock (the `hand` contract).
            unsafe { hand.fill(e) };
            return Ok(());
        }
        if s.queue.capacity() == 0 {
            s.queue.reserve(16);
        }
        s.queue.push_back(e);
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
        Ok(())
    }

    /// The first envelope, parking until one arrives or the limit passes.
    #[track_caller]
    fn recv_first(&self, limit: WaitLimit) -> Option<Envelope<M>> {
        self.recv_where(limit, true, None, |_| true)
    }

    /// Takes the first envelope accepted by `pred`, parking until one arrives or the limit
    /// passes. `any` says `pred` accepts everything: the receive may then be handed the next
    /// envelope directly (see the module doc). With a `mark`, the envelopes queued before
    /// it are not looked at (see [`RecvMark`]).
    ///
    /// `pred` is asked about each envelope once per call: after a wake the search resumes
    /// after the envelopes it already rejected (Erlang's save marker), unless an envelope was
    /// taken out meanwhile (`State::removed`), which sends it back to the head.
    #[inline(always)]
    #[track_caller]
    fn recv_where(
        &self,
        mut limit: WaitLimit,
        any: bool,
        mark: Option<RecvMark>,
        mut pred: impl FnMut(&Envelope<M>) -> bool,
    ) -> Option<Envelope<M>> {
        if let Some(m) = mark {
            // Before the lock: the panic must not unwind while holding it.
            assert_eq!(m.owner, self.pid, "smarm: a RecvMark of another actor's mailbox");
        }
        let mut s = self.state.lock();
        let hand = Hand::new();
        // The envelopes before `from` were rejected (or are before the mark) as long as
        // `s.removed` is still `epoch`.
        let (mut from, mut epoch) = match mark {
            Some(m) => (m.len, m.removed),
            None => (0, s.removed),
        };
        loop {
            if s.removed != epoch || from > s.queue.len() {
                (from, epoch) = (0, s.removed);
            }
            if let Some(i) = s.queue.range(from..).position(&mut pred) {
                return s.take_at(from + i);
            }
            from = s.queue.len();
            if any {
                s.hand.register(&hand);
            } else {
                s.waiter = Some(Waiter::current());
            }
            drop(s);
            // Deregisters if the park unwinds (the actor was killed); on a normal return the
            // registration is cleared under the lock taken next anyway. Declared after
            // `hand`, so it runs first: the cell is out of reach before it goes.
            let guard = Deregister(self);
            let timed_out = limit.park(WaitKind::Mailbox);
            std::mem::forget(guard);
            if let Some(e) = hand.take() {
                return Some(e);
            }
            s = self.state.lock();
            // A push may have finished between the look above and this lock.
            if let Some(e) = hand.take() {
                return Some(e);
            }
            s.waiter = None;
            s.hand = HandPtr::NONE;
            if timed_out {
                // The limit passed: one last look, then time out.
                if s.removed != epoch {
                    from = 0;
                }
                let i = s.queue.range(from..).position(&mut pred)?;
                return s.take_at(from + i);
            }
        }
    }
}

impl<M> State<M> {
    /// Takes the envelope at `i` out of the queue (counted in `removed`).
    fn take_at(&mut self, i: usize) -> Option<Envelope<M>> {
        let e = if i == 0 { self.queue.pop_front() } else { self.queue.remove(i) };
        self.removed += u64::from(e.is_some());
        e
    }
}

impl<M> MailboxInner<M> {
    /// The park of the selective receives (`recv_owned`, `recv_all_where`): registers the
    /// owner as the waiter, releases the lock and parks within `limit` (deregistered if the
    /// park unwinds, as in `recv_where`), then relocks and clears the registration. Returns
    /// the relocked state and whether the limit passed.
    #[track_caller]
    fn park_selective<'a>(
        &'a self,
        mut s: RawGuard<'a, State<M>>,
        limit: &mut WaitLimit,
    ) -> (RawGuard<'a, State<M>>, bool) {
        s.waiter = Some(Waiter::current());
        drop(s);
        let guard = Deregister(self);
        let timed_out = limit.park(WaitKind::Mailbox);
        std::mem::forget(guard);
        let mut s = self.state.lock();
        s.waiter = None;
        (s, timed_out)
    }

    /// Takes the first envelope that `test` accepts, parking until one arrives or the limit
    /// passes. `test` gets each envelope *by value* and hands it back with its verdict (see
    /// [`find_owned`]), so that [`receive!`](macro@crate::receive) can match it with by-value
    /// patterns and guards without taking it. As [`recv_where`](Self::recv_where) with
    /// `any = false`: a selective receive, not handed envelopes directly.
    #[track_caller]
    fn recv_owned(
        &self,
        mut limit: WaitLimit,
        mut test: impl FnMut(Envelope<M>) -> (bool, Envelope<M>),
    ) -> Option<Envelope<M>> {
        let mut s = self.state.lock();
        // The save marker, as in `recv_where`.
        let (mut from, mut epoch) = (0, s.removed);
        loop {
            if s.removed != epoch {
                (from, epoch) = (0, s.removed);
            }
            let st = &mut *s;
            if let Some(i) = find_owned(&mut st.queue, &mut st.removed, from, &mut test) {
                return s.take_at(i);
            }
            from = s.queue.len();
            let timed_out;
            (s, timed_out) = self.park_selective(s, &mut limit);
            if timed_out {
                // The limit passed: one last look, then time out.
                if s.removed != epoch {
                    from = 0;
                }
                let st = &mut *s;
                let i = find_owned(&mut st.queue, &mut st.removed, from, &mut test)?;
                return s.take_at(i);
            }
        }
    }

    /// Moves every envelope accepted by `pred` into `out` (in arrival order, the others
    /// staying queued in order), parking until at least one is taken or the limit passes;
    /// false if it passed with none taken.
    ///
    /// The first `*seen` queued envelopes are skipped: an earlier call looked at them, and
    /// the caller promises that `pred` still rejects them. On return `*seen` covers every
    /// envelope left queued, so a loop of calls looks at each envelope once, however many
    /// others stay queued ahead of the ones it takes. Only the owner takes envelopes out, and
    /// pushes only append, so the skipped prefix stays the same envelopes between the calls
    /// as long as the owner receives nothing else meanwhile.
    #[track_caller]
    fn recv_all_where(
        &self,
        mut limit: WaitLimit,
        seen: &mut usize,
        mut pred: impl FnMut(&Envelope<M>) -> bool,
        out: &mut Vec<Envelope<M>>,
    ) -> bool {
        let before = out.len();
        let mut s = self.state.lock();
        loop {
            let st = &mut *s;
            st.removed += take_unseen(&mut st.queue, seen, &mut pred, out);
            if out.len() > before {
                return true;
            }
            let timed_out;
            (s, timed_out) = self.park_selective(s, &mut limit);
            if timed_out {
                // The limit passed: one last look, then time out.
                let st = &mut *s;
                st.removed += take_unseen(&mut st.queue, seen, &mut pred, out);
                return out.len() > before;
            }
        }
    }
}

/// The one pass of [`MailboxInner::recv_all_where`]: looks at the envelopes after the first
/// `*seen` (those that arrived since the last pass), moves the accepted ones to `out`, and
/// puts the others back in order after the prefix. O(envelopes looked at). Returns how many
/// it took.
fn take_unseen<M>(
    queue: &mut VecDeque<Envelope<M>>,
    seen: &mut usize,
    pred: &mut impl FnMut(&Envelope<M>) -> bool,
    out: &mut Vec<Envelope<M>>,
) -> u64 {
    let before = out.len();
    if *seen < queue.len() {
        for e in queue.split_off(*seen) {
            if pred(&e) {
                out.push(e);
            } else {
                queue.push_back(e);
            }
        }
    }
    *seen = queue.len();
    (out.len() - before) as u64
}

/// The index of the first envelope of `queue` from index `from` on that `test` accepts.
/// Each envelope is moved out to `test` and put back where it was (a swap with the last, O(1), no allocation: the
/// length and capacity come back to what they were), so the queue is unchanged on return.
/// If `test` panics, the envelope it holds is dropped and the last envelope stands in its
/// place: the panic goes on to the receiving actor, which loses that one envelope. The loss
/// counts in `removed` (the mailbox's count of envelopes taken out), so a [`RecvMark`] made
/// before it no longer skips by position.
fn find_owned<M>(
    queue: &mut VecDeque<Envelope<M>>,
    removed: &mut u64,
    from: usize,
    test: &mut impl FnMut(Envelope<M>) -> (bool, Envelope<M>),
) -> Option<usize> {
    /// Counts the envelope `test` holds as taken out if `test` unwinds (forgotten otherwise).
    struct LostOnUnwind<'a>(&'a mut u64);
    impl Drop for LostOnUnwind<'_> {
        fn drop(&mut self) {
            *self.0 += 1;
        }
    }
    for i in from..queue.len() {
        let e = queue.swap_remove_back(i).expect("index in bounds");
        let lost = LostOnUnwind(removed);
        let (hit, e) = test(e);
        core::mem::forget(lost);
        queue.push_back(e);
        let last = queue.len() - 1;
        queue.swap(i, last);
        if hit {
            return Some(i);
        }
    }
    None
}

struct Deregister<'a, M>(&'a MailboxInner<M>);

impl<M> Drop for Deregister<'_, M> {
    fn drop(&mut self) {
        let mut s = self.0.state.lock();
        s.waiter = None;
        s.hand = HandPtr::NONE;
    }
}

impl<M: Send + 'static> SignalSink for MailboxInner<M> {
    fn queue_report(&self) -> Option<(usize, &'static str)> {
        Some((self.state.lock().queue.len(), std::any::type_name::<M>()))
    }

    fn owner(&self) -> Option<Pid> {
        Some(self.pid)
    }

    fn push_signal(&self, signal: Signal) {
        let e = match signal {
            Signal::Down(d) => Envelope::Down(d),
            Signal::Exit(x) => Envelope::Exit(x),
        };
        let _ = self.push(e);
    }

    fn remove_down(&self, id: u64) -> bool {
        let mut s = self.state.lock();
        match s.queue.iter().position(|e| matches!(e, Envelope::Down(d) if d.monitor.id() == id)) {
            Some(i) => {
                s.take_at(i);
                true
            }
            None => false,
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    #[cfg(feature = "cluster")]
    fn push_term(&self, term: eetf::Term) -> Result<(), TermRejected> {
        let decode = self.decode.get().ok_or(TermRejected::NotAccepted)?;
        let msg = decode(term).map_err(TermRejected::Undecodable)?;
        self.push(Envelope::Msg(msg)).map_err(|_| TermRejected::Dead)
    }
}

/// An actor's own mailbox (given to the body by [`spawn_actor`](crate::spawn_actor)).
///
/// A mailbox has one receiver at a time: it can move to another actor or thread (`Send`)
/// but not be shared by several (`!Sync`):
///
/// ```compile_fail
/// fn shared<T: Sync>() {}
/// shared::<smarm::Mailbox<u32>>();
/// ```
pub struct Mailbox<M> {
    pub(crate) inner: Arc<MailboxInner<M>>,
    /// `!Sync`: a parked receive registers itself as *the* receiver (module doc).
    _one_receiver: std::marker::PhantomData<std::cell::Cell<()>>,
}

impl<M> fmt::Debug for Mailbox<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Mailbox").field("pid", &self.inner.pid).finish()
    }
}

impl<M: Send + 'static> Mailbox<M> {
    /// The next message or signal, parking until one arrives.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: smarm::Mailbox<&str>| tx.send(mb.recv()).unwrap());
    ///     a.send("hi");
    ///     assert_eq!(rx.recv(), Ok(smarm::Envelope::Msg("hi")));
    /// });
    /// ```
    #[track_caller]
    pub fn recv(&self) -> Envelope<M> {
        self.inner.recv_first(WaitLimit::Forever).expect("no deadline")
    }

    /// The next message or signal, if one is queued. A mailbox is never disconnected (its
    /// owner holds it, and anyone may still find the actor by pid or name), so the only
    /// error is [`TryRecvError::Empty`].
    ///
    /// ```
    /// use smarm::{channel::TryRecvError, Envelope, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         mb.addr().send(1); // to itself: queued at once
    ///         tx.send((mb.try_recv(), mb.try_recv())).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok((Ok(Envelope::Msg(1)), Err(TryRecvError::Empty))));
    /// });
    /// ```
    pub fn try_recv(&self) -> Result<Envelope<M>, TryRecvError> {
        self.inner.state.lock().take_at(0).ok_or(TryRecvError::Empty)
    }

    /// The next message or signal, waiting at most `timeout` (zero polls). The only error
    /// is [`RecvTimeoutError::Timeout`] (a mailbox is never disconnected).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::{channel::RecvTimeoutError, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         tx.send(mb.recv_timeout(Duration::from_millis(1))).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok(Err(RecvTimeoutError::Timeout)));
    /// });
    /// ```
    #[track_caller]
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Envelope<M>, RecvTimeoutError> {
        self.inner.recv_first(WaitLimit::For(timeout)).ok_or(RecvTimeoutError::Timeout)
    }

    /// Selective receive: the first queued envelope accepted by `pred`, parking until one
    /// arrives. The others stay queued, in order (Erlang's `receive`).
    ///
    /// Each call asks `pred` about each envelope once: when the receive is woken by new
    /// envelopes it looks only at those (Erlang's save marker), so waiting behind `n` queued
    /// envelopes that `pred` rejects costs `O(n)` once per call, not once per wake. (An
    /// envelope taken out of the mailbox by another path meanwhile, such as
    /// [`demonitor_flush`](crate::demonitor_flush), sends the search back to the head.) To
    /// skip what was queued before a monitor or request was made, see [`Mailbox::mark`].
    ///
    /// ```
    /// use smarm::{Envelope, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         let even = mb.recv_match(|e| matches!(e, Envelope::Msg(n) if n % 2 == 0));
    ///         tx.send((even, mb.recv())).unwrap(); // the 1 stayed queued
    ///     });
    ///     a.send(1);
    ///     a.send(2);
    ///     assert_eq!(rx.recv(), Ok((Envelope::Msg(2), Envelope::Msg(1))));
    /// });
    /// ```
    #[track_caller]
    pub fn recv_match(&self, pred: impl FnMut(&Envelope<M>) -> bool) -> Envelope<M> {
        self.inner.recv_where(WaitLimit::Forever, false, None, pred).expect("no deadline")
    }

    /// Selective receive waiting at most `timeout` (zero polls): the first queued envelope
    /// accepted by `pred`; the others stay queued, in order (Erlang's `receive ... after`).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::{channel::RecvTimeoutError, Envelope, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         let got = mb.recv_match_timeout(Duration::from_millis(1), |e| matches!(e, Envelope::Msg(9)));
    ///         tx.send((got, mb.len())).unwrap();
    ///     });
    ///     a.send(1);
    ///     // No 9 came: it timed out, and the 1 is still queued.
    ///     assert_eq!(rx.recv(), Ok((Err(RecvTimeoutError::Timeout), 1)));
    /// });
    /// ```
    #[track_caller]
    pub fn recv_match_timeout(
        &self,
        timeout: Duration,
        pred: impl FnMut(&Envelope<M>) -> bool,
    ) -> Result<Envelope<M>, RecvTimeoutError> {
        self.inner.recv_where(WaitLimit::For(timeout), false, None, pred).ok_or(RecvTimeoutError::Timeout)
    }

    /// Marks the end of the queue now, for a selective receive that waits for something
    /// that can only arrive after this point: the Down of a monitor made after the mark, the
    /// reply to a request sent after it (see [`RecvMark`]).
    ///
    /// ```
    /// use smarm::{Envelope, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         for n in 0..10_000 {
    ///             mb.addr().send(n); // a long mailbox the wait below does not look at
    ///         }
    ///         let child = smarm::spawn(|| ());
    ///         let mark = mb.mark();
    ///         let m = smarm::monitor(child.pid());
    ///         let down = mb.recv_match_from(mark, |e| matches!(e, Envelope::Down(d) if d.monitor == m));
    ///         tx.send((matches!(down, Envelope::Down(_)), mb.len())).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok((true, 10_000)));
    /// });
    /// ```
    pub fn mark(&self) -> RecvMark {
        let s = self.inner.state.lock();
        RecvMark { owner: self.inner.pid, len: s.queue.len(), removed: s.removed }
    }

    /// Selective receive of what arrived after `mark` (see [`Mailbox::mark`]): the first
    /// envelope queued since the mark that `pred` accepts, parking until one arrives. What
    /// was queued before the mark is not looked at and stays queued. If an envelope was
    /// taken out of the mailbox since the mark, the whole queue is searched.
    ///
    /// # Panics
    /// If `mark` was made by another actor's mailbox.
    #[track_caller]
    pub fn recv_match_from(&self, mark: RecvMark, pred: impl FnMut(&Envelope<M>) -> bool) -> Envelope<M> {
        self.inner.recv_where(WaitLimit::Forever, false, Some(mark), pred).expect("no deadline")
    }

    /// [`Mailbox::recv_match_from`] waiting at most `timeout` (zero polls).
    ///
    /// ```
    /// use std::time::Duration;
    /// use smarm::{channel::RecvTimeoutError, Envelope, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: Mailbox<u32>| {
    ///         mb.addr().send(7); // before the mark: not looked at
    ///         let mark = mb.mark();
    ///         let got = mb.recv_match_from_timeout(mark, Duration::ZERO, |e| matches!(e, Envelope::Msg(7)));
    ///         tx.send((got, mb.len())).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok((Err(RecvTimeoutError::Timeout), 1)));
    /// });
    /// ```
    ///
    /// # Panics
    /// If `mark` was made by another actor's mailbox.
    #[track_caller]
    pub fn recv_match_from_timeout(
        &self,
        mark: RecvMark,
        timeout: Duration,
        pred: impl FnMut(&Envelope<M>) -> bool,
    ) -> Result<Envelope<M>, RecvTimeoutError> {
        self.inner.recv_where(WaitLimit::For(timeout), false, Some(mark), pred).ok_or(RecvTimeoutError::Timeout)
    }

    /// The selective receive behind [`receive!`](macro@crate::receive): `test` gets each queued
    /// envelope by value and hands it back with its verdict; waits at most `timeout` (`None`:
    /// forever). Not a stable API: use the macro.
    #[doc(hidden)]
    pub fn __receive(
        &self,
        timeout: Option<Duration>,
        test: impl FnMut(Envelope<M>) -> (bool, Envelope<M>),
    ) -> Option<Envelope<M>> {
        self.inner.recv_owned(WaitLimit::from_timeout(timeout), test)
    }

    /// Selective receive of what arrived after `mark` (see [`RecvMark`]) within `limit`,
    /// for the crate's own waits (a supervisor waiting for a child's Down, with or without
    /// a shutdown timeout); `None` if the limit passed.
    #[track_caller]
    pub(crate) fn recv_match_from_within(
        &self,
        mark: RecvMark,
        limit: WaitLimit,
        pred: impl FnMut(&Envelope<M>) -> bool,
    ) -> Option<Envelope<M>> {
        self.inner.recv_where(limit, false, Some(mark), pred)
    }

    /// Selective receive of every match, for the receives that wait for many envelopes at
    /// once (a supervisor collecting the Downs of its children): see
    /// [`MailboxInner::recv_all_where`]. Returns false if the limit passed with none taken.
    #[track_caller]
    pub(crate) fn recv_all_match(
        &self,
        limit: WaitLimit,
        seen: &mut usize,
        pred: impl FnMut(&Envelope<M>) -> bool,
        out: &mut Vec<Envelope<M>>,
    ) -> bool {
        self.inner.recv_all_where(limit, seen, pred, out)
    }

    /// An address for this mailbox.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
    ///         mb.addr().send(5); // a message to itself
    ///         tx.send(mb.recv().into_msg()).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok(Some(5)));
    /// });
    /// ```
    pub fn addr(&self) -> Addr<M> {
        Addr::local(self.inner.clone())
    }

    /// The owning actor's pid.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: smarm::Mailbox<()>| tx.send(mb.pid()).unwrap());
    ///     assert_eq!(rx.recv(), Ok(a.pid()));
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.inner.pid
    }

    /// Number of queued envelopes.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
    ///         let empty = (mb.len(), mb.is_empty());
    ///         mb.addr().send(1);
    ///         mb.addr().send(2);
    ///         tx.send((empty, mb.len(), mb.is_empty())).unwrap();
    ///     });
    ///     assert_eq!(rx.recv(), Ok(((0, true), 2, false)));
    /// });
    /// ```
    pub fn len(&self) -> usize {
        self.inner.state.lock().queue.len()
    }

    /// True if nothing is queued.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| tx.send(mb.is_empty()).unwrap());
    ///     assert_eq!(rx.recv(), Ok(true));
    /// });
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<M> Drop for Mailbox<M> {
    fn drop(&mut self) {
        let mut s = self.inner.state.lock();
        s.alive = false;
        let queued = std::mem::take(&mut s.queue);
        drop(s);
        drop(queued); // user Drop code outside the lock
    }
}

impl<M: Send + 'static> Selectable for Mailbox<M> {
    fn is_ready(&self) -> bool {
        !self.inner.state.lock().queue.is_empty()
    }
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool {
        let mut s = self.inner.state.lock();
        if !s.queue.is_empty() {
            return true;
        }
        s.waiter = Some(waiter.0.clone());
        false
    }
    fn unregister_waiter(&self) {
        self.inner.state.lock().waiter = None;
    }
}

impl<M: Send + 'static> SelectRecv for Mailbox<M> {
    type Output = Envelope<M>;
    fn select_recv(&self) -> Envelope<M> {
        // Only the owner receives, so a mailbox found ready stays ready.
        self.try_recv().expect("smarm: select arm was ready")
    }
}

/// Where to send messages to an actor. Cheap to clone; carries the pid.
///
/// Two sends, never blocking (a mailbox is unbounded): [`send`](Self::send), Erlang's
/// fire-and-forget `!` (a send to an ended actor is a silent no-op), and
/// [`try_send`](Self::try_send), which reports an ended actor by handing the message back in
/// a [`SendError`], the shape of std's and tokio's `send` (tokio's `try_send` also reports a
/// full channel, which a mailbox never is). From a bare [`Pid`] (a `pg` member, a
/// supervisor's child, a [`whereis`](crate::whereis) result) [`Addr::from_pid`] gives a
/// typed address, or a [`LookupError`] saying why not.
///
/// ```
/// use smarm::{Addr, Mailbox};
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     let a: Addr<u32> = smarm::spawn_actor(move |mb: Mailbox<u32>| {
///         while let Some(n) = mb.recv().into_msg() {
///             tx.send(n).unwrap();
///         }
///     });
///     let b = a.clone();
///     a.send(1);
///     b.try_send(2).unwrap();
///     assert_eq!((rx.recv(), rx.recv()), (Ok(1), Ok(2)));
/// });
/// ```
pub struct Addr<M> {
    to: To<M>,
}

/// Where an [`Addr`] sends: a local mailbox, or (feature `cluster`) a process of another node.
/// (Without `cluster` the enum has one variant, and its matches are irrefutable.)
enum To<M> {
    Local(Arc<MailboxInner<M>>),
    #[cfg(feature = "cluster")]
    Remote(Arc<RemoteTo<M>>),
}

/// A remote [`Addr`]'s target (feature `cluster`): the pid, and the function (made where
/// `M: Serialize` is known) that encodes a message and queues it on the node's connection.
#[cfg(feature = "cluster")]
pub(crate) struct RemoteTo<M> {
    pub(crate) pid: Pid,
    pub(crate) send: fn(Pid, M) -> Result<(), M>,
}

impl<M> Addr<M> {
    /// A remote address (feature `cluster`; made by the cluster module).
    #[cfg(feature = "cluster")]
    pub(crate) fn from_remote(to: RemoteTo<M>) -> Addr<M> {
        Addr { to: To::Remote(Arc::new(to)) }
    }

    /// The mailbox of a local address (feature `cluster`: where its remote decoder is set).
    #[cfg(feature = "cluster")]
    pub(crate) fn local_inner(&self) -> Option<&Arc<MailboxInner<M>>> {
        match &self.to {
            To::Local(inner) => Some(inner),
            To::Remote(_) => None,
        }
    }

    fn local(inner: Arc<MailboxInner<M>>) -> Addr<M> {
        Addr { to: To::Local(inner) }
    }

    fn target_pid(&self) -> Pid {
        match &self.to {
            To::Local(inner) => inner.pid,
            #[cfg(feature = "cluster")]
            To::Remote(r) => r.pid,
        }
    }
}

impl<M> Clone for Addr<M> {
    fn clone(&self) -> Self {
        let to = match &self.to {
            To::Local(inner) => To::Local(inner.clone()),
            #[cfg(feature = "cluster")]
            To::Remote(r) => To::Remote(r.clone()),
        };
        Addr { to }
    }
}

impl<M> fmt::Debug for Addr<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Addr({})", self.target_pid())
    }
}

impl<M> PartialEq for Addr<M> {
    /// Two addresses are equal if they reach the same mailbox (local) or the same pid
    /// (remote).
    fn eq(&self, other: &Self) -> bool {
        match (&self.to, &other.to) {
            (To::Local(a), To::Local(b)) => Arc::ptr_eq(a, b),
            #[cfg(feature = "cluster")]
            (To::Remote(a), To::Remote(b)) => a.pid == b.pid,
            #[cfg(feature = "cluster")]
            _ => false,
        }
    }
}
impl<M> Eq for Addr<M> {}

impl<M: Send + 'static> Addr<M> {
    /// Sends `msg` (dropped silently if the actor has ended). A send never blocks, so it
    /// counts toward the sender's timeslice: a loop of sends is preempted like a CPU-bound
    /// loop calling [`maybe_preempt`](crate::maybe_preempt).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| tx.send(mb.recv().into_msg()).unwrap());
    ///     a.send(1);
    ///     assert_eq!(rx.recv(), Ok(Some(1)));
    ///     a.send(2); // it has ended (or soon will): dropped, no error
    /// });
    /// ```
    #[cfg_attr(not(feature = "cluster"), allow(clippy::infallible_destructuring_match))]
    pub fn send(&self, msg: M) {
        let inner = match &self.to {
            To::Local(inner) => inner,
            #[cfg(feature = "cluster")]
            To::Remote(r) => {
                // Fire-and-forget, as Erlang's `!` to a remote pid: an undeliverable message
                // is dropped (and counted by the cluster module).
                let _ = (r.send)(r.pid, msg);
                crate::preempt::charge_send();
                return;
            }
        };
        match inner.push(Envelope::Msg(msg)) {
            Ok(()) => crate::preempt::charge_send(),
            Err(e) => {
                drop(e);
                // A send that finds the actor gone: a loop of them would keep the thread
                // from the actors it may be waiting for (as `call`'s `NoProc`).
                crate::preempt::maybe_preempt();
            }
        }
    }

    /// Sends `msg`, or hands it back in a [`SendError`] if the actor has ended: the send
    /// that reports a dead target (tokio's and std's `send` shape; [`send`](Self::send) is
    /// Erlang's fire-and-forget `!`). A mailbox is unbounded, so it never blocks and never
    /// fails for any other reason. `Ok` means the message was queued while the actor lived;
    /// as in OTP, it may still end before it reads it (monitor it to know).
    ///
    /// Unlike [`send`](Self::send) it does not count toward the timeslice (the request path
    /// of `call`, which parks right after): a loop of `try_send`s that never blocks should
    /// call [`maybe_preempt`](crate::maybe_preempt).
    ///
    /// ```
    /// use smarm::channel::SendError;
    /// smarm::run(|| {
    ///     let a = smarm::spawn_actor(|_mb: smarm::Mailbox<u32>| ());
    ///     smarm::monitor(a.pid());
    ///     smarm::recv_signal(); // its Down: it has ended
    ///     assert_eq!(a.try_send(7), Err(SendError(7)));
    /// });
    /// ```
    #[cfg_attr(not(feature = "cluster"), allow(clippy::infallible_destructuring_match))]
    pub fn try_send(&self, msg: M) -> Result<(), SendError<M>> {
        let inner = match &self.to {
            To::Local(inner) => inner,
            #[cfg(feature = "cluster")]
            To::Remote(r) => return (r.send)(r.pid, msg).map_err(SendError),
        };
        inner.push(Envelope::Msg(msg)).map_err(|e| match e {
            Envelope::Msg(m) => SendError(m),
            _ => unreachable!("push hands back what it was given"),
        })
    }

    /// The actor's pid.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let a = smarm::spawn_actor(|_mb: smarm::Mailbox<u32>| ());
    ///     smarm::monitor(a.pid());
    ///     let smarm::Signal::Down(d) = smarm::recv_signal() else { unreachable!() };
    ///     assert_eq!(d.pid, a.pid());
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.target_pid()
    }

    /// True while the actor's mailbox exists.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
    ///     let a = smarm::spawn_actor(move |_mb: smarm::Mailbox<u32>| go_rx.recv().unwrap());
    ///     assert!(a.is_alive());
    ///     smarm::monitor(a.pid());
    ///     go_tx.send(()).unwrap();
    ///     smarm::recv_signal(); // its Down
    ///     assert!(!a.is_alive());
    /// });
    /// ```
    pub fn is_alive(&self) -> bool {
        match &self.to {
            To::Local(inner) => inner.state.lock().alive,
            // Not known without asking the other node: monitor it to learn of its end.
            #[cfg(feature = "cluster")]
            To::Remote(_) => true,
        }
    }

    /// The address of the live actor `pid` of the caller's runtime, if its mailbox takes
    /// messages of type `M`: the way from a pid (a `pg` member, a supervisor's child, a
    /// [`whereis`](crate::whereis) result, a [`Down`]'s pid) to something you can send to.
    ///
    /// Fails with [`LookupError::NoProc`] if `pid` names no live actor (ended, stale, or of
    /// another runtime), [`NoMailbox`](LookupError::NoMailbox) for a plain
    /// [`spawn`](crate::spawn) actor, [`WrongType`](LookupError::WrongType) if its mailbox
    /// takes another message type, and [`NoRuntime`](LookupError::NoRuntime) on a plain
    /// thread. The actor may end right after the lookup: the address then behaves as that of
    /// an ended actor (its sends are dropped; [`try_send`](Self::try_send) says so).
    ///
    /// ```
    /// use smarm::{Addr, LookupError, Mailbox};
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let a = smarm::spawn_actor(move |mb: Mailbox<u32>| tx.send(mb.recv().into_msg()).unwrap());
    ///     let pid = a.pid(); // say, from pg::members or a supervisor's which_children
    ///     assert!(matches!(Addr::<String>::from_pid(pid), Err(LookupError::WrongType { .. })));
    ///     Addr::<u32>::from_pid(pid).unwrap().send(3);
    ///     assert_eq!(rx.recv(), Ok(Some(3)));
    /// });
    /// // Off a runtime there is no actor table to look in.
    /// # let pid = smarm::run(smarm::current_pid);
    /// assert_eq!(smarm::Addr::<u32>::from_pid(pid), Err(smarm::LookupError::NoRuntime));
    /// ```
    pub fn from_pid(pid: Pid) -> Result<Addr<M>, LookupError> {
        let sh = crate::process::current_runtime().ok_or(LookupError::NoRuntime)?;
        Self::from_pid_in(sh, pid)
    }

    /// [`from_pid`](Self::from_pid) in the runtime `sh` (for callers that hold a runtime,
    /// on any thread).
    pub(crate) fn from_pid_in(sh: &Shared, pid: Pid) -> Result<Addr<M>, LookupError> {
        let any = crate::process::sink_of(sh, pid)?;
        match any.downcast::<MailboxInner<M>>() {
            Ok(inner) => Ok(Addr::local(inner)),
            Err(any) if any.is::<MailboxInner<NoMsg>>() => Err(LookupError::NoMailbox),
            Err(_) => Err(LookupError::WrongType { expected: std::any::type_name::<M>() }),
        }
    }
}

/// Signal-only mailbox of a plain `spawn` actor.
pub(crate) enum NoMsg {}

pub(crate) fn new_signal_box() -> Arc<dyn SignalSink> {
    let pid = crate::task::try_current_pid().expect("signal box of an actor");
    MailboxInner::<NoMsg>::new(pid)
}

#[track_caller]
pub(crate) fn recv_signal_from(sink: Arc<dyn SignalSink>, limit: WaitLimit) -> Option<Signal> {
    SignalBox::of(sink).0.recv_first(limit).map(|e| match e {
        Envelope::Down(d) => Signal::Down(d),
        Envelope::Exit(x) => Signal::Exit(x),
        Envelope::Msg(never) => match never {},
    })
}

/// The signal-only mailbox of the calling plain `spawn` actor, as a `select!` arm
/// (`recv_signal() -> s => ...`). Not a stable API: use the macro arm.
#[doc(hidden)]
pub struct SignalBox(Arc<MailboxInner<NoMsg>>);

impl SignalBox {
    pub(crate) fn of(sink: Arc<dyn SignalSink>) -> SignalBox {
        SignalBox(sink.as_any().downcast::<MailboxInner<NoMsg>>().unwrap_or_else(|_| {
            panic!("smarm::recv_signal: this actor has a typed Mailbox; receive signals from it instead")
        }))
    }
}

impl Selectable for SignalBox {
    fn is_ready(&self) -> bool {
        !self.0.state.lock().queue.is_empty()
    }
    fn register_waiter(&self, waiter: &SelectWaiter) -> bool {
        let mut s = self.0.state.lock();
        if !s.queue.is_empty() {
            return true;
        }
        s.waiter = Some(waiter.0.clone());
        false
    }
    fn unregister_waiter(&self) {
        self.0.state.lock().waiter = None;
    }
}

impl SelectRecv for SignalBox {
    type Output = Signal;
    fn select_recv(&self) -> Signal {
        // Only the owner receives, so a box found ready stays ready.
        match self.0.state.lock().take_at(0).expect("smarm: select arm was ready") {
            Envelope::Down(d) => Signal::Down(d),
            Envelope::Exit(x) => Signal::Exit(x),
            Envelope::Msg(never) => match never {},
        }
    }
}

/// Creates the mailbox of a not-yet-published actor (used by `spawn_actor`).
pub(crate) fn new_mailbox<M: Send + 'static>(pid: Pid) -> (Mailbox<M>, Arc<dyn SignalSink>) {
    let inner = MailboxInner::<M>::new(pid);
    let sink: Arc<dyn SignalSink> = inner.clone();
    (Mailbox { inner, _one_receiver: std::marker::PhantomData }, sink)
}
