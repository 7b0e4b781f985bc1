//! Cooperative preemption with a clock.
//!
//! When a scheduler thread resumes an actor it stamps `slice_start = rdtsc()` in its worker.
//! [`maybe_preempt`] (and the runtime calls that invoke it) compares the elapsed ticks
//! against `timeslice_cycles` and yields when the slice is spent, unless a [`NoPreempt`]
//! guard is held. `rdtsc` is used without `lfence`: the stamp and the check compare against
//! a ~100,000-tick slice, and a speculatively early read only makes the slice look slightly
//! more used, so serialising the pipeline on every resume would buy nothing.

use crate::runtime::current_worker;
use crate::slot_state::Slot;
use core::marker::PhantomData;

/// The time-stamp counter (invariant TSC on the machines smarm targets).
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Yields if the running actor has used up its timeslice (and holds no [`NoPreempt`]).
///
/// Call it in long CPU-bound loops; every blocking runtime call does the equivalent. Off a
/// runtime (a plain thread) it does nothing.
///
/// ```
/// smarm::run(|| {
///     let mut x = 0u64;
///     for i in 0..1_000_000u64 {
///         x = x.wrapping_add(i);
///         smarm::maybe_preempt();
///     }
///     x
/// });
/// ```
#[inline]
pub fn maybe_preempt() {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker; used only before any switch.
    let w = unsafe { &*w };
    if !w.running_actor() || rdtsc().wrapping_sub(w.slice_start.get()) < w.slice_cycles {
        return;
    }
    preempt_slow();
}

#[cold]
#[inline(never)]
fn preempt_slow() {
    let w = current_worker();
    // SAFETY: non-null (checked by the caller on this thread, no switch since).
    let slot = unsafe { &*w }.current_slot();
    if let Some(slot) = slot {
        // SAFETY: the running actor's control block, read on its own thread.
        if unsafe { (*slot.cell.get()).no_preempt } > 0 {
            return;
        }
    }
    crate::runtime::worker_yield();
}

/// While alive, [`maybe_preempt`] does not yield the running actor (explicit blocking calls
/// still do). Nestable. Not `Send`: it belongs to the actor that created it.
///
/// ```
/// smarm::run(|| {
///     let _g = smarm::NoPreempt::new();
///     smarm::maybe_preempt(); // never yields here
/// });
/// ```
pub struct NoPreempt {
    slot: Option<&'static Slot>,
    _not_send: PhantomData<*const ()>,
}

impl NoPreempt {
    /// Suppresses preemption of the calling actor until dropped. Off a runtime it is inert.
    pub fn new() -> NoPreempt {
        let w = current_worker();
        let slot = if w.is_null() {
            None
        } else {
            // SAFETY: this thread's live worker. The slab outlives the running actor, and
            // the guard cannot leave the actor (not Send), so 'static is not observable.
            unsafe { (*w).current_slot().map(|s| &*(s as *const Slot)) }
        };
        if let Some(s) = slot {
            // SAFETY: the running actor's own control block.
            unsafe { (*s.cell.get()).no_preempt += 1 };
        }
        NoPreempt { slot, _not_send: PhantomData }
    }
}

impl Default for NoPreempt {
    fn default() -> Self {
        NoPreempt::new()
    }
}

impl Drop for NoPreempt {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            // SAFETY: the guard's actor is the one running (the guard is not Send).
            unsafe { (*s.cell.get()).no_preempt -= 1 };
        }
    }
}
