//! [`Barrier`]: `n` participants wait until all have arrived; one of them is the leader.
//!
//! ```
//! let b = smarm::sync::Barrier::new(1);
//! assert!(b.wait().is_leader());
//! ```

use crate::slot_state::WaitKind;
use std::fmt;

use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::{park_until, Waiter};

struct State {
    arrived: usize,
    generation: u64,
    /// Parked participants of the current generation. Pre-sized to `n - 1`, at most
    /// `PRESIZED_WAITERS`: arrival allocates only beyond that, and `n` can be any size.
    waiters: Vec<Waiter>,
}

/// Waiter slots a barrier allocates up front: a barrier of up to this many participants
/// plus one never allocates on arrival; a larger one grows its list as participants arrive.
const PRESIZED_WAITERS: usize = 64;

/// A reusable barrier for `n` actors or threads.
///
/// ```
/// use std::sync::Arc;
/// smarm::run(|| {
///     let b = Arc::new(smarm::sync::Barrier::new(3));
///     let hs: Vec<_> = (0..3).map(|_| { let b = b.clone(); smarm::spawn(move || b.wait().is_leader()) }).collect();
///     let leaders = hs.into_iter().map(|h| h.join().unwrap()).filter(|l| *l).count();
///     assert_eq!(leaders, 1);
/// });
/// ```
pub struct Barrier {
    n: usize,
    state: RawMutex<State>,
}

/// Returned by [`Barrier::wait`].
///
/// ```
/// let b = smarm::sync::Barrier::new(1);
/// assert!(b.wait().is_leader()); // the only participant is the last to arrive
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BarrierWaitResult(bool);

impl BarrierWaitResult {
    /// True for exactly one participant per generation (the last to arrive).
    ///
    /// ```
    /// let b = smarm::sync::Barrier::new(1);
    /// assert!(b.wait().is_leader());
    /// ```
    pub fn is_leader(&self) -> bool {
        self.0
    }
}

impl Barrier {
    /// A barrier for `n` participants (`n == 0` behaves like 1: `wait` returns at once). Any
    /// `n` is accepted: the list of waiting participants grows as they arrive.
    ///
    /// ```
    /// let b = smarm::sync::Barrier::new(0); // behaves like 1
    /// assert!(b.wait().is_leader());
    /// ```
    pub fn new(n: usize) -> Barrier {
        let presized = n.saturating_sub(1).min(PRESIZED_WAITERS);
        Barrier {
            n: n.max(1),
            state: RawMutex::new(
                Rank::Primitive,
                State { arrived: 0, generation: 0, waiters: Vec::with_capacity(presized) },
            ),
        }
    }

    /// Arrives and waits for the others (parks an actor, blocks a thread).
    ///
    /// ```
    /// use std::sync::Arc;
    /// smarm::run(|| {
    ///     let b = Arc::new(smarm::sync::Barrier::new(2));
    ///     let b2 = b.clone();
    ///     let other = smarm::spawn(move || b2.wait().is_leader());
    ///     let me = b.wait().is_leader();
    ///     assert!(me ^ other.join().unwrap()); // exactly one leader
    ///     // Reusable: the next generation starts at once.
    /// });
    /// ```
    #[track_caller]
    pub fn wait(&self) -> BarrierWaitResult {
        let mut s = self.state.lock();
        s.arrived += 1;
        if s.arrived == self.n {
            s.arrived = 0;
            s.generation += 1;
            for w in s.waiters.drain(..) {
                w.wake();
            }
            return BarrierWaitResult(true);
        }
        let generation = s.generation;
        s.waiters.push(Waiter::current());
        drop(s);
        let mut guard = Leave { barrier: self, generation, released: false };
        loop {
            park_until(None, WaitKind::Barrier);
            if self.state.lock().generation != generation {
                guard.released = true;
                return BarrierWaitResult(false);
            }
        }
    }
}

/// A participant unwinding out of `wait` (its actor is being stopped) withdraws its
/// arrival, so the barrier never wakes a waiter that is gone.
struct Leave<'a> {
    barrier: &'a Barrier,
    generation: u64,
    released: bool,
}

impl Drop for Leave<'_> {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let me = Waiter::current();
        let mut s = self.barrier.state.lock();
        if s.generation == self.generation {
            if let Some(i) = s.waiters.iter().position(|w| w.same_as(&me)) {
                s.waiters.swap_remove(i);
                s.arrived -= 1;
            }
        }
    }
}

impl fmt::Debug for Barrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Barrier").field("n", &self.n).finish()
    }
}
