//! The runtime's lifecycle: how many actors are live, whether shutdown has begun, whether the
//! runtime has finished, and which thread must finish it.
//!
//! # State
//!
//! - `state` packs two fields into one word: bit 0 ([`SHUTTING_DOWN`]) is set once, when the
//!   root actor has retired; the other bits (`state / LIVE_ONE`) count the actors spawned
//!   and not yet retired.
//! - `finished` is set once, by the thread that finishes the runtime; scheduler threads poll
//!   it when idle and exit.
//!
//! # The protocol
//!
//! 1. Spawn ([`Lifecycle::spawned`]): add one live actor. The spawner is itself a live actor
//!    (the root is spawned before any scheduler thread runs), or counts as one for the
//!    spawn's duration (`Shared::spawn_outside`: one increment before, one retirement
//!    after), so the count is not zero here and cannot reach zero before this increment
//!    unless the runtime has finished, and then the spawn sees the flag and refuses.
//! 2. A non-root actor retires ([`Lifecycle::retire`]): subtract one. If the RMW saw one live
//!    actor and the flag set, it retired the last actor after shutdown began: the caller
//!    finishes (step 4).
//! 3. The root retires: [`Lifecycle::retire`] (the flag is not yet set, so it never
//!    finishes), then [`Lifecycle::begin_shutdown`] sets the flag with an RMW. If that saw
//!    no live actor, the caller finishes (step 4); otherwise the actors still live are asked
//!    to stop, and the last of them finishes at step 2. Spawns that race with the flag see
//!    it and cancel their own child (`runtime` module doc, shutdown step 3), and are counted
//!    in the meantime, so a retirement that saw the count at one is the last one.
//! 4. [`Lifecycle::finish`]: set `finished`; the caller that set it wakes every scheduler
//!    thread.
//!
//! Steps 2 and 3 decide with RMWs on the same word, which its modification order totally
//! orders: of the root's flag RMW and the last actor's decrement, whichever comes second
//! reads the other's effect, so exactly one of them finishes and `run` always returns. Two
//! separate words (store the flag then load the count, decrement the count then load the
//! flag) would be the store-buffering pattern: without a SeqCst fence on *both* sides each
//! load may miss the other side's write, and nobody finishes. The loom model below checks
//! the race through the shim's atomics.

use crate::loom_shim::{AtomicBool, AtomicUsize, CachePadded, Ordering};

/// Bit 0 of `state`: shutdown has begun (the root has retired).
const SHUTTING_DOWN: usize = 1;
/// One live actor in `state`.
const LIVE_ONE: usize = 2;

pub(crate) struct Lifecycle {
    /// `live * LIVE_ONE | SHUTTING_DOWN` (see the module doc). Every spawn and retirement
    /// writes it: on its own line, away from the read-mostly flags below.
    state: CachePadded<AtomicUsize>,
    /// The read-mostly copy of the SHUTTING_DOWN bit, written once by `begin_shutdown`
    /// before its caller's fence: spawns read it (twice each) without pulling in the line
    /// that spawns and retirements keep writing.
    shutting_down: CachePadded<AtomicBool>,
    /// Set once, by the finisher (step 4); polled by idle threads.
    finished: AtomicBool,
}

impl Lifecycle {
    pub(crate) fn new() -> Lifecycle {
        Lifecycle {
            state: CachePadded(AtomicUsize::new(0)),
            shutting_down: CachePadded(AtomicBool::new(false)),
            finished: AtomicBool::new(false),
        }
    }

    /// Step 1: an actor was spawned.
    pub(crate) fn spawned(&self) {
        // Relaxed: the count cannot reach zero before this increment (the spawner is live,
        // step 1), and every decision is an RMW on this word, ordered after it in its
        // modification order; the actor's data is published by the slot, not by the count.
        self.state.fetch_add(LIVE_ONE, Ordering::Relaxed);
    }

    /// Step 2 (and the first half of step 3): an actor retired. True if the caller retired
    /// the last actor after shutdown began and must finish the runtime (step 4).
    pub(crate) fn retire(&self) -> bool {
        // AcqRel: the decrements form a release sequence, so the finisher's RMW acquires the
        // end of every actor retired before it; the decision itself needs only the
        // modification order of this word.
        let prev = self.state.fetch_sub(LIVE_ONE, Ordering::AcqRel);
        prev == LIVE_ONE | SHUTTING_DOWN
    }

    /// Step 3: the root has retired; shutdown begins. True if no actor is live, so the caller
    /// must finish the runtime (step 4); otherwise the last actor to retire will.
    ///
    /// The caller issues a SeqCst fence after this before it sweeps the slots (the Dekker
    /// pair with a racing spawn, `runtime` shutdown step 3).
    pub(crate) fn begin_shutdown(&self) -> bool {
        // SeqCst: this is also the flag write of that Dekker pair.
        let prev = self.state.fetch_or(SHUTTING_DOWN, Ordering::SeqCst);
        debug_assert_eq!(prev & SHUTTING_DOWN, 0, "shutdown begun twice");
        // SeqCst: the flag write of the Dekker pair with a racing spawn, before the caller's
        // fence (the spawn reads this copy, not the bit in `state`).
        self.shutting_down.store(true, Ordering::SeqCst);
        prev < LIVE_ONE
    }

    /// True once shutdown has begun. Relaxed: an early refusal of a spawn reads it as a hint;
    /// the spawn's re-check after publishing its slot orders it with the caller's own SeqCst
    /// fence (`runtime` shutdown step 3).
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Relaxed)
    }

    /// Step 4. True for the one caller that set `finished`: it must wake every scheduler
    /// thread.
    pub(crate) fn finish(&self) -> bool {
        // AcqRel: Release pairs with `is_finished`; Acquire makes the finisher's view
        // include a racing finisher's (there is none by the protocol; the swap makes it cheap
        // to be sure).
        !self.finished.swap(true, Ordering::AcqRel)
    }

    /// True once the runtime has finished: every actor has retired.
    pub(crate) fn is_finished(&self) -> bool {
        // Acquire: pairs with the Release in `finish`, so a thread that sees it also sees
        // everything the finisher saw (every retirement, through `state`'s release sequence).
        self.finished.load(Ordering::Acquire)
    }
}

/// Loom model of the lifecycle protocol. Run with
/// `RUSTFLAGS="--cfg loom" cargo test --release --lib loom_models`.
#[cfg(all(test, loom))]
mod loom_models {
    use super::Lifecycle;
    use crate::loom_shim::loom_check;
    use loom::sync::atomic::{AtomicUsize, Ordering};
    use loom::sync::Arc;
    use loom::thread;

    /// The root and one other actor retire concurrently, the root then beginning shutdown,
    /// as `Shared::retired` does. Exactly one of them must finish: none means `run` waits
    /// forever, two means the wake-everybody step runs twice.
    #[test]
    fn retire_racing_begin_shutdown_finishes_exactly_once() {
        loom_check(4, || {
            let lc = Arc::new(Lifecycle::new());
            lc.spawned(); // the root
            lc.spawned(); // an actor the root spawned
            let finishers = Arc::new(AtomicUsize::new(0));
            let actor = {
                let (lc, finishers) = (lc.clone(), finishers.clone());
                thread::spawn(move || {
                    if lc.retire() && lc.finish() {
                        finishers.fetch_add(1, Ordering::Relaxed);
                    }
                })
            };
            assert!(!lc.retire(), "the root's retirement precedes shutdown; it never finishes");
            if lc.begin_shutdown() && lc.finish() {
                finishers.fetch_add(1, Ordering::Relaxed);
            }
            actor.join().unwrap();
            assert_eq!(finishers.load(Ordering::Relaxed), 1, "nobody (or twice) finished the runtime");
            assert!(lc.is_finished());
        });
    }
}
