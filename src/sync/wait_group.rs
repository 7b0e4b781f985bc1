//! [`WaitGroup`]: wait until a counter of outstanding tasks drops to zero (Go's
//! `sync.WaitGroup`). Clones share one counter.

use std::fmt;
use std::sync::Arc;

use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

struct State {
    count: usize,
    waiters: Vec<Waiter>,
}

/// A counter of outstanding work; `wait` parks until it is zero. Cloning shares the counter.
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
    inner: Arc<RawMutex<State>>,
}

impl Default for WaitGroup {
    fn default() -> Self {
        WaitGroup::new()
    }
}

impl WaitGroup {
    /// A group with a zero count.
    pub fn new() -> WaitGroup {
        WaitGroup { inner: Arc::new(RawMutex::new(Rank::Primitive, State { count: 0, waiters: Vec::new() })) }
    }

    /// Adds `n` outstanding tasks.
    ///
    /// # Panics
    /// If the count would exceed `usize::MAX`.
    pub fn add(&self, n: usize) {
        let mut s = self.inner.lock();
        match s.count.checked_add(n) {
            Some(count) => s.count = count,
            None => {
                let count = s.count;
                drop(s);
                panic!("smarm::sync::WaitGroup::add({n}) overflows the count {count}")
            }
        }
    }

    /// Marks one task done; wakes the waiters when the count reaches zero.
    ///
    /// # Panics
    /// If the count is already zero.
    pub fn done(&self) {
        let mut s = self.inner.lock();
        assert!(s.count > 0, "smarm::sync::WaitGroup::done called more times than add");
        s.count -= 1;
        if s.count == 0 {
            for w in s.waiters.drain(..) {
                w.wake();
            }
        }
    }

    /// Current count.
    pub fn count(&self) -> usize {
        self.inner.lock().count
    }

    /// Parks until the count is zero (returns at once if it is).
    pub fn wait(&self) {
        loop {
            let mut s = self.inner.lock();
            if s.count == 0 {
                return;
            }
            s.waiters.push(Waiter::current());
            drop(s);
            let guard = Deregister(self);
            park_until(None);
            drop(guard);
        }
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
