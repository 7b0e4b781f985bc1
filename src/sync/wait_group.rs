//! [`WaitGroup`]: wait until a counter of outstanding tasks drops to zero (Go's
//! `sync.WaitGroup`). Clones share one counter.
//!
//! Two ways to count a task:
//! - a [`Participant`] ([`WaitGroup::participant`]): one task for as long as the handle
//!   lives. Dropping it marks the task done, so a task that panics or is killed (its stack
//!   unwinds, destructors run) is counted as done and cannot hang the waiter. Cloning it adds
//!   one more task (crossbeam's `WaitGroup` and the `waitgroup` crate work the same way).
//! - [`WaitGroup::add`] / [`WaitGroup::done`] (Go's form): the caller keeps the count right,
//!   on every path; a task that ends without `done` leaves the count above zero for good.
//!
//! The count, and the waiters parked until it is zero, live under one lock; the call that
//! takes the count to zero wakes every waiter under it, and a waiter checks the count under
//! it before parking, so no wake-up is lost.

use crate::slot_state::WaitKind;
use std::fmt;
use std::sync::Arc;

use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

struct State {
    count: usize,
    waiters: Vec<Waiter>,
}

type Shared = Arc<RawMutex<State>>;

/// A counter of outstanding work; `wait` parks until it is zero. Cloning shares the counter.
///
/// With [`Participant`]s (a task is done when its handle is dropped, even by a panic):
///
/// ```
/// smarm::run(|| {
///     let wg = smarm::sync::WaitGroup::new();
///     for i in 0..3 {
///         let p = wg.participant();
///         smarm::spawn(move || {
///             let _p = p; // dropped when the actor ends, however it ends
///             assert!(i < 2, "the third task fails");
///         });
///     }
///     wg.wait(); // returns although one task panicked
/// });
/// ```
///
/// With `add` and `done`:
///
/// ```
/// smarm::run(|| {
///     let wg = smarm::sync::WaitGroup::new();
///     for _ in 0..3 {
///         wg.add(1);
///         let wg = wg.clone();
///         smarm::spawn(move || wg.done());
///     }
///     wg.wait();
/// });
/// ```
#[derive(Clone)]
pub struct WaitGroup {
    inner: Shared,
}

impl Default for WaitGroup {
    fn default() -> Self {
        WaitGroup::new()
    }
}

impl WaitGroup {
    /// A group with a zero count.
    ///
    /// ```
    /// assert_eq!(smarm::sync::WaitGroup::new().count(), 0);
    /// ```
    pub fn new() -> WaitGroup {
        WaitGroup { inner: Arc::new(RawMutex::new(Rank::Primitive, State { count: 0, waiters: Vec::new() })) }
    }

    /// Adds one task, counted until the returned handle (and each of its clones) is dropped.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// let p = wg.participant();
    /// let q = p.clone();
    /// assert_eq!(wg.count(), 2);
    /// drop(p);
    /// q.done(); // the same as dropping it
    /// assert_eq!(wg.count(), 0);
    /// wg.wait();
    /// ```
    ///
    /// # Panics
    /// If the count would exceed `usize::MAX`.
    pub fn participant(&self) -> Participant {
        self.add(1);
        Participant { inner: self.inner.clone() }
    }

    /// Adds `n` outstanding tasks.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// wg.add(2);
    /// assert_eq!(wg.count(), 2);
    /// ```
    ///
    /// # Panics
    /// If the count would exceed `usize::MAX`.
    pub fn add(&self, n: usize) {
        add(&self.inner, n);
    }

    /// Marks one task done; wakes the waiters when the count reaches zero.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// wg.add(1);
    /// std::thread::scope(|s| {
    ///     s.spawn(|| wg.done());
    ///     wg.wait();
    /// });
    /// ```
    ///
    /// # Panics
    /// If the count is already zero.
    pub fn done(&self) {
        let mut s = self.inner.lock();
        assert!(s.count > 0, "smarm::sync::WaitGroup::done called more times than add");
        release(&mut s);
    }

    /// Current count.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// let _p = wg.participant();
    /// assert_eq!(wg.count(), 1);
    /// ```
    pub fn count(&self) -> usize {
        self.inner.lock().count
    }

    /// Parks until the count is zero (returns at once if it is). Blocks a plain thread.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// wg.wait(); // zero: returns at once
    /// ```
    #[track_caller]
    pub fn wait(&self) {
        loop {
            let mut s = self.inner.lock();
            if s.count == 0 {
                return;
            }
            s.waiters.push(Waiter::current());
            drop(s);
            let guard = Deregister(self);
            park_until(None, WaitKind::Barrier);
            drop(guard);
        }
    }
}

/// Adds `n` to the count, or panics (leaving it as it was) if that would overflow.
fn add(inner: &Shared, n: usize) {
    let mut s = inner.lock();
    match s.count.checked_add(n) {
        Some(count) => s.count = count,
        None => {
            let count = s.count;
            drop(s);
            panic!("smarm::sync::WaitGroup::add({n}) overflows the count {count}")
        }
    }
}

/// Takes one from a count above zero; wakes every waiter when that makes it zero.
fn release(s: &mut State) {
    s.count -= 1;
    if s.count == 0 {
        for w in s.waiters.drain(..) {
            w.wake();
        }
    }
}

/// One outstanding task of a [`WaitGroup`] (from [`WaitGroup::participant`]): the task is
/// done when the handle is dropped, so a task that returns, panics or is killed is counted
/// as done. Cloning adds one more task.
///
/// Hand one to each actor or thread whose end the group waits for:
///
/// ```
/// let wg = smarm::sync::WaitGroup::new();
/// let p = wg.participant();
/// let t = std::thread::spawn(move || {
///     let _p = p;
///     panic!("the task fails before it is done");
/// });
/// wg.wait(); // the panic dropped `_p`: returns
/// assert!(t.join().is_err());
/// ```
///
/// Dropping never panics: a count that an extra [`WaitGroup::done`] already took to zero
/// stays at zero.
#[must_use = "the task is done as soon as the participant is dropped"]
pub struct Participant {
    inner: Shared,
}

impl Participant {
    /// Marks this task done (the same as dropping the handle).
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// let p = wg.participant();
    /// p.done();
    /// assert_eq!(wg.count(), 0);
    /// ```
    pub fn done(self) {}

    /// The group this participant counts in.
    ///
    /// ```
    /// let wg = smarm::sync::WaitGroup::new();
    /// let p = wg.participant();
    /// assert_eq!(p.wait_group().count(), 1);
    /// ```
    pub fn wait_group(&self) -> WaitGroup {
        WaitGroup { inner: self.inner.clone() }
    }
}

impl Clone for Participant {
    /// Adds one more task to the group.
    ///
    /// # Panics
    /// If the count would exceed `usize::MAX`.
    fn clone(&self) -> Participant {
        add(&self.inner, 1);
        Participant { inner: self.inner.clone() }
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        // May run while a panic unwinds, where a second panic aborts: no assert here.
        let mut s = self.inner.lock();
        if s.count > 0 {
            release(&mut s);
        }
    }
}

impl fmt::Debug for Participant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Participant").field("count", &self.inner.lock().count).finish()
    }
}

struct Deregister<'a>(&'a WaitGroup);

impl Drop for Deregister<'_> {
    fn drop(&mut self) {
        let me = Waiter::current();
        let mut s = self.0.inner.lock();
        if let Some(i) = s.waiters.iter().position(|w| w.same_as(&me)) {
            s.waiters.swap_remove(i);
        }
    }
}

impl fmt::Debug for WaitGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WaitGroup").field("count", &self.count()).finish()
    }
}
