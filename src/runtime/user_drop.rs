//! Where user `Drop` code runs when smarm, not the user, lets go of a value.
//!
//! # Invariants
//!
//! 1. No user `Drop` runs on a scheduler thread's own stack. Scheduler code that has to let
//!    go of a user value (a `send_after` message whose receiver is gone when its timer
//!    fires, the payload of a panic caught there) holds it in a [`DropOnActor`]. Dropped on
//!    a scheduler stack, that moves the value to its runtime's [`Graveyard`], from which a
//!    reaper actor drops it; dropped anywhere else (an actor's stack, a plain thread), it
//!    drops the value in place.
//! 2. Every user `Drop` the runtime runs for an actor after its body (a return value that a
//!    stop request or an exit override replaces, an unjoined result, its actor-local values,
//!    the messages of its pending timers) runs through [`drop_caught`], on the actor's own stack: a panic there,
//!    a panic while dropping that panic's payload, and so on, is contained; so is a stop
//!    request raised at a blocking call inside such a `Drop` (the actor is being killed):
//!    the `Drop` is cut short, as it would be in the body. A kill keeps its force: a `Drop`
//!    that would block forever cannot hold the actor, or the runtime's shutdown, up.
//!
//! # Why a reaper actor
//!
//! A user `Drop` may panic, block or take long. On a scheduler stack a panic ends the
//! scheduler thread (which aborts the process, see `worker`), and a blocking call blocks
//! the OS thread with every actor queued on it, its wake slot included. On an actor's stack
//! all three are harmless (a `Drop` that blocks delays the values buried after it, until a
//! stop request, at shutdown the runtime's, cuts it short).
//!
//! Handing the value to a reaper costs one spawn per batch, paid only by values that
//! scheduler code actually drops (a receiver that went away before its timer fired); a
//! delivered timer message never comes here. Running every timer action on an actor would
//! instead put a switch on every `send_after`, and handing the value to its target is not
//! possible: the target is gone.
//!
//! # Reaper protocol
//!
//! The graveyard is a list and a `reaper` flag under one mutex.
//! 1. [`bury`]: push the value; if `reaper` is clear, set it and spawn a reaper.
//! 2. The reaper takes the whole list and drops each value with [`drop_caught`], until it
//!    finds the list empty; then it clears `reaper` under the same lock. So a burial either
//!    sees the flag set, and the running reaper's next round takes its value, or sees it
//!    clear and spawns a new reaper.
//! 3. The reaper's work is done by the `Drop` of a guard its closure owns, so it runs on
//!    the reaper's stack whether the body ran or the reaper was stopped before its first
//!    run (its closure is then dropped unrun, on its own stack). If the spawn fails (the
//!    runtime is shutting down, the slab is full, no stack could be mapped), the guard is
//!    dropped by the spawn on the burying scheduler stack: there it only clears the flag.
//!    The values wait for the next burial's reaper, or are dropped with the runtime (on
//!    the thread that drops it once `run` has joined the scheduler threads, never on a
//!    scheduler stack), each through [`drop_caught`].

use std::mem::ManuallyDrop;
use std::panic::{catch_unwind, AssertUnwindSafe};

use parking_lot::Mutex;

use super::{current_worker, Shared};

/// Panics in a row (a payload whose `Drop` panics, whose payload's `Drop` panics, ...)
/// [`drop_caught`] drops before it leaks the last payload instead.
const NESTED_PANICS: usize = 16;

/// Drops `value` under `catch_unwind`; a panic's payload is dropped the same way. A chain
/// of more than [`NESTED_PANICS`] payloads each panicking in its `Drop` is cut by leaking
/// the last one (leaking is safe; an endless chain would never end).
pub(crate) fn drop_caught<T>(value: T) {
    let Err(mut payload) = catch_unwind(AssertUnwindSafe(move || drop(value))) else { return };
    for _ in 0..NESTED_PANICS {
        match catch_unwind(AssertUnwindSafe(move || drop(payload))) {
            Ok(()) => return,
            Err(p) => payload = p,
        }
    }
    std::mem::forget(payload);
}

/// A user value held by scheduler code: its `Drop` never runs on a scheduler stack (see the
/// module doc, invariant 1).
pub(crate) struct DropOnActor<T: Send + 'static>(ManuallyDrop<T>);

impl<T: Send + 'static> DropOnActor<T> {
    pub(crate) fn new(value: T) -> Self {
        DropOnActor(ManuallyDrop::new(value))
    }

    /// Takes the value out (its drop is then the caller's business).
    pub(crate) fn into_inner(self) -> T {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so the value is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.0) }
    }
}

impl<T: Send + 'static> Drop for DropOnActor<T> {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads the field afterwards.
        let value = unsafe { ManuallyDrop::take(&mut self.0) };
        let w = current_worker();
        // SAFETY: a non-null worker pointer is this thread's live worker.
        if !w.is_null() && !unsafe { &*w }.running_actor() {
            // Scheduler code on a scheduler thread's own stack.
            // SAFETY: as above.
            bury(unsafe { &*w }.shared(), Box::new(value));
        }
        // Otherwise `value` drops here: on an actor's stack, or on a plain thread.
    }
}

/// Values waiting for a reaper (see the module doc).
#[derive(Default)]
pub(crate) struct Graveyard {
    state: Mutex<Graves>,
}

#[derive(Default)]
struct Graves {
    items: Vec<Box<dyn Send>>,
    /// A reaper has been spawned and has not yet found `items` empty.
    reaper: bool,
}

impl Drop for Graveyard {
    fn drop(&mut self) {
        for item in std::mem::take(&mut self.state.get_mut().items) {
            drop_caught(item);
        }
    }
}

/// Step 1 of the reaper protocol: hands `item` to a reaper actor of `sh`.
fn bury(sh: &Shared, item: Box<dyn Send>) {
    let spawn = {
        let mut g = sh.graveyard.state.lock();
        g.items.push(item);
        !std::mem::replace(&mut g.reaper, true)
    };
    if spawn {
        let guard = Reaper;
        // A failed spawn drops the closure, and so the guard, here (step 3).
        let _ = sh.spawn(move || drop(guard), false);
    }
}

/// The reaper's work, done by its `Drop` (step 3 of the protocol).
struct Reaper;

impl Drop for Reaper {
    fn drop(&mut self) {
        let w = current_worker();
        if w.is_null() {
            // Dropped unrun with a runtime that never ran it (`Shared`'s drop): the graveyard
            // goes with the runtime.
            return;
        }
        // SAFETY: a non-null worker pointer is this thread's live worker.
        let w = unsafe { &*w };
        if !w.running_actor() {
            // The spawn failed: the next burial tries again.
            w.shared().graveyard.state.lock().reaper = false;
            return;
        }
        // Drops may block and move us to another thread: keep the runtime, not the worker.
        let sh: *const Shared = w.shared();
        // SAFETY: the runtime outlives its actors, the reaper among them.
        let graveyard = unsafe { &(*sh).graveyard };
        loop {
            let items = {
                let mut g = graveyard.state.lock();
                if g.items.is_empty() {
                    g.reaper = false;
                    return;
                }
                std::mem::take(&mut g.items)
            };
            for item in items {
                drop_caught(item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{drop_caught, NESTED_PANICS};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A value whose `Drop` counts itself, then, while `.0 > 0`, panics with the next link
    /// of the chain as the payload.
    struct Chain(usize, &'static AtomicUsize);

    impl Drop for Chain {
        fn drop(&mut self) {
            // Relaxed: counted and read on this thread.
            self.1.fetch_add(1, Ordering::Relaxed);
            if self.0 > 0 {
                std::panic::panic_any(Chain(self.0 - 1, self.1));
            }
        }
    }

    #[test]
    fn drop_caught_drops_every_payload_of_a_chain_of_panicking_drops() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        drop_caught(Chain(5, &DROPS));
        assert_eq!(DROPS.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn drop_caught_leaks_the_rest_of_an_endless_chain_after_a_bound() {
        static DROPS: AtomicUsize = AtomicUsize::new(0);
        drop_caught(Chain(usize::MAX, &DROPS));
        assert_eq!(DROPS.load(Ordering::Relaxed), NESTED_PANICS + 1);
    }
}
