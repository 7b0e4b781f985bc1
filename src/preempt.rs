//! Cooperative preemption with a clock.
//!
//! An actor's timeslice starts at its first preemption check after it was resumed:
//! the scheduler clears `slice_start` on resume, and [`maybe_preempt`] (and the runtime calls
//! that invoke it) stamps it with `rdtsc` if clear, otherwise compares the elapsed ticks
//! against `timeslice_cycles` and yields when the slice is spent, unless a [`NoPreempt`]
//! guard is held. Sends that do not block (`Addr::send`, channel `Sender::send`) count too:
//! every `SENDS_PER_CHECK`-th of them on a thread runs that check ([`charge_send`]).
//!
//! Why the first check stamps, not the resume: `rdtsc` costs nearly the whole budget of a
//! yield round trip (outputs/history.md, finding 1), and a yield loop never checks
//! preemption between resumes, so a stamp on resume would be paid on every switch for
//! nothing. Stamping at the first check moves the slice start by the time from resume to
//! that check; a CPU-bound loop that calls `maybe_preempt` each iteration still yields
//! within one slice plus one iteration.
//!
//! `rdtsc` is used without `lfence`: the check compares against a ~100,000-tick slice, and a
//! speculatively early read only shifts it by a few ticks, so serialising the pipeline would
//! buy nothing.

use crate::runtime::current_worker;
use crate::runtime::worker::SENDS_PER_CHECK;
use crate::slot_state::{Pid, Slot};
use core::marker::PhantomData;

pub use crate::context::rdtsc;

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
    if !w.running_actor() {
        return;
    }
    let now = rdtsc();
    let start = w.slice_start.get();
    if start == 0 {
        w.slice_start.set(now);
        return;
    }
    if now.wrapping_sub(start) < w.slice_cycles {
        return;
    }
    preempt_slow();
}

/// Charges one send to the running actor's timeslice, as Erlang charges sends against the
/// reduction budget: a send never blocks (on a live receiver), so an actor that loops on
/// sends would otherwise keep its thread from everything else, the receiver included.
/// Every `SENDS_PER_CHECK`-th send on a thread runs the [`maybe_preempt`] check; the others
/// cost a decrement of a counter on the thread's worker. Off a runtime, and in scheduler
/// code (a timer's send), the check does nothing.
#[inline]
pub(crate) fn charge_send() {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker; used only before any switch.
    let w = unsafe { &*w };
    let left = w.sends_left.get();
    if left > 1 {
        w.sends_left.set(left - 1);
        return;
    }
    w.sends_left.set(SENDS_PER_CHECK);
    send_check();
}

#[cold]
#[inline(never)]
fn send_check() {
    maybe_preempt();
}

#[cold]
#[inline(never)]
fn preempt_slow() {
    // A pending kill/exit/shutdown is delivered here too (a runtime call that may switch).
    crate::runtime::check_cancelled_current();
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
/// still do). Nestable.
///
/// A guard belongs to the actor that created it: it must be dropped by that actor. It is
/// not `Send`, so it cannot move to another thread:
///
/// ```compile_fail
/// fn assert_send<T: Send>() {}
/// assert_send::<smarm::NoPreempt>();
/// ```
///
/// but a `thread_local!` can still carry it to another actor that later runs on the same
/// thread. Dropping it there panics (unless that actor is already unwinding, when the drop
/// does nothing) and leaves the creator's nesting count alone: the creator then stays
/// unpreemptible until it ends. Dropped outside any actor (a thread-local's destructor when
/// a scheduler thread exits, after every actor has ended), it does nothing.
///
/// ```
/// smarm::run(|| {
///     let _g = smarm::NoPreempt::new();
///     smarm::maybe_preempt(); // never yields here
/// });
/// ```
pub struct NoPreempt {
    /// The actor whose nesting count this guard raised (None: created off an actor, inert).
    /// Only compared with the running actor's pid, never used to reach the actor.
    owner: Option<Pid>,
    _not_send: PhantomData<*const ()>,
}

impl NoPreempt {
    /// Suppresses preemption of the calling actor until dropped. Off a runtime it is inert.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let _guard = smarm::NoPreempt::new();
    ///     smarm::maybe_preempt(); // does not yield while the guard lives
    /// });
    /// ```
    pub fn new() -> NoPreempt {
        let owner = running_actor().map(|(slot, pid)| {
            // SAFETY: the running actor's own control block, on its own thread.
            unsafe { (*slot.cell.get()).no_preempt += 1 };
            pid
        });
        NoPreempt { owner, _not_send: PhantomData }
    }
}

/// The running actor's slot and pid, if an actor is running on this thread. The slot is
/// valid until the actor next switches (callers use it at once).
fn running_actor<'a>() -> Option<(&'a Slot, Pid)> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker; nothing here switches.
    let w = unsafe { &*w };
    Some((w.current_slot()?, w.current_pid()?))
}

impl Default for NoPreempt {
    fn default() -> Self {
        NoPreempt::new()
    }
}

impl Drop for NoPreempt {
    fn drop(&mut self) {
        let Some(owner) = self.owner else { return };
        match running_actor() {
            Some((slot, pid)) if pid == owner => {
                // SAFETY: the guard's actor is the one running: its own control block, on
                // its own thread.
                unsafe { (*slot.cell.get()).no_preempt -= 1 };
            }
            Some((_, pid)) if !crate::runtime::worker::thread_panicking() => panic!(
                "smarm::NoPreempt created by actor {owner} dropped by actor {pid}: a guard must be \
                 dropped by the actor that created it (a thread_local! carried it to another actor)"
            ),
            // Another actor that is already unwinding (a second panic would abort), or no
            // actor at all: leave the owner's count alone.
            _ => {}
        }
    }
}
