//! The hand-off: a parking actor hands its thread straight to the actor in the wake slot,
//! and a yielding one to the head of the local queue: one switch instead of two and no
//! scheduler round (see "Where runnable actors go" in
//! `worker`). The slot, the lifo limit, the timer cadence and the pinned inbox are honoured
//! exactly as a scheduler round would honour them.

use std::sync::atomic::Ordering;

use super::unwind::actor_unwinding;
use super::worker::{resumed, update_pin, Worker, GLOBAL_FIRST_INTERVAL, NONE};
use crate::context::fp_control_read;
use crate::slot_state::{Slot, UNPINNED};

/// Parks the running actor by handing this thread straight to the actor in the wake slot,
/// without a round through the scheduler stack (two switches and a loop iteration saved
/// per message hop). Returns None, having done nothing, when the scheduler must decide
/// instead: the slot is empty or has had its `lifo_run_limit` turns, timers are due for a
/// look, pinned actors wait in the inbox, or the parking actor is unwinding (it must be
/// pinned, which the scheduler does).
///
/// The parking actor stays RUNNING until its context is saved: the actor we resume
/// performs the park transition (`finish_hand_off`), exactly as the scheduler would after
/// a switch back, so no waker can resume it while its stack is still in use.
#[inline(always)]
pub(super) fn hand_off_park(w: &Worker) -> Option<(&'static Slot, &'static Worker)> {
    let next = w.wake_slot.get();
    if next == NONE {
        return None;
    }
    let sh = &*w.shared;
    let tick = w.tick.get().wrapping_add(1);
    // The scheduler's periodic round work, at its cadence (the timers' 64 is a multiple of
    // GLOBAL_FIRST_INTERVAL), and pinned actors, which go before the slot.
    if tick % GLOBAL_FIRST_INTERVAL == 0 {
        // The round work's counter publication (see `stats`), which a chain of hand-offs
        // would otherwise put off.
        w.publish_counts();
        if w.round_due() {
            return None;
        }
    }
    if !w.inbox().is_empty() {
        return None;
    }
    // The lifo limit keeps queued work from waiting behind the slot forever. With nothing
    // queued, the scheduler would push the occupant to the local queue and pop it straight
    // back: the new run of turns starts here instead.
    let lifo_runs = if w.lifo_runs.get() < w.lifo_run_limit {
        w.lifo_runs.get()
    } else if w.local().is_empty() && sh.run_queue.is_empty() {
        0
    } else {
        return None;
    };
    let index = w.current.get();
    // SAFETY: as in `switch_out`: the slab outlives the runtime's actors.
    let slot: &'static Slot = unsafe { &*(sh.slab.slot(index) as *const Slot) };
    if actor_unwinding(slot) {
        return None;
    }
    // Committed: the wake slot's occupant runs next, as the scheduler's step 3 would do.
    w.wake_slot.set(NONE);
    w.lifo_runs.set(lifo_runs + 1);
    w.tick.set(tick);
    // Not unwinding: only a thread-bound actor stays pinned (here, where it runs). The pin is
    // published to wakers by the Release park transition in `finish_hand_off`.
    let pin = update_pin(slot, w.index as u32, false);
    Some(hand_over(w, slot, index, pin, next, false))
}

/// Yields the running actor by handing this thread straight to the actor the scheduler would
/// run next, the head of the local queue, without a round through the scheduler stack (one
/// switch instead of two). The yielder joins the back of the local queue once its context is
/// saved (`finish_hand_off`), which is where the scheduler would have put it: the order of
/// the queue is the same as after a scheduler round. Returns None, having done nothing, when
/// the scheduler must decide instead: something is in the wake slot (its lifo accounting is
/// the scheduler's), the tick is one where the shared queue goes first or the round's
/// periodic work is due, pinned actors wait in the inbox, the shared queue holds work (a
/// yielder queues behind it), the yielder is pinned or unwinding (it goes to the inbox), or
/// the local queue is empty (the scheduler resumes the yielder at once).
#[inline(always)]
pub(super) fn hand_off_yield(w: &Worker) -> Option<(&'static Slot, &'static Worker)> {
    // The local queue first: when it is empty (a lone yielder) nothing else is looked at.
    if w.local().is_empty() || w.wake_slot.get() != NONE {
        return None;
    }
    let sh = &*w.shared;
    let tick = w.tick.get().wrapping_add(1);
    if tick % GLOBAL_FIRST_INTERVAL == 0 || !w.inbox().is_empty() || !sh.run_queue.is_empty() {
        return None;
    }
    let index = w.current.get();
    // SAFETY: as in `switch_out`: the slab outlives the runtime's actors.
    let slot: &'static Slot = unsafe { &*(sh.slab.slot(index) as *const Slot) };
    // Relaxed: the running actor's own field (see `update_pin`).
    if slot.pinned.load(Ordering::Relaxed) != UNPINNED || actor_unwinding(slot) {
        return None;
    }
    // Committed once the pop succeeds: the local queue's head runs next, as the scheduler's
    // step 4 would do (a thief may take it first; then there is nothing to hand to).
    let next = w.pop_own()?;
    w.lifo_runs.set(0);
    w.tick.set(tick);
    Some(hand_over(w, slot, index, UNPINNED, next, true))
}

/// The switch of both hand-offs: resumes `next` (queued, not yet claimed) in place of the
/// running actor `index` (in `slot`, pinned to `pin`), which the resumed actor then parks
/// (`yielded` false) or queues (`yielded` true) in `finish_hand_off`. Returns what the
/// hand-off returns, once the actor is resumed again.
#[inline(always)]
fn hand_over(
    w: &Worker,
    slot: &'static Slot,
    index: u32,
    pin: u32,
    next: u32,
    yielded: bool,
) -> (&'static Slot, &'static Worker) {
    let sh = &*w.shared;
    let cell = slot.cell.get();
    let next_slot = sh.slab.slot(next);
    next_slot.claim();
    let next_cell = next_slot.cell.get();
    // SAFETY: our own control block (we are RUNNING) and the claimed one of `next`.
    unsafe {
        // Our floating-point control state leaves the registers: save it (see `run_actor`).
        let fp = fp_control_read();
        (*cell).fp = fp;
        w.live_fp.set(fp);
        w.prepare_to_run(next_slot, next);
        // `next` returns to the scheduler we would have returned to.
        (*next_cell).sched_sp = (*cell).sched_sp;
    }
    // `handed_from` first: from the moment `next` is `current` until our switch has pushed
    // its last register, an overflow of our stack is found through it (`guard_owner`).
    w.handed_from.set(index);
    w.handed_slot.set(slot);
    w.handed_yield.set(yielded);
    w.current.set(next);
    w.slice_start.set(0);
    #[cfg(debug_assertions)]
    crate::raw_mutex::order::assert_none_held();
    #[cfg(smarm_asan)]
    let mut asan_save = core::ptr::null_mut();
    #[cfg(smarm_asan)]
    // SAFETY: `next`'s control block, claimed and prepared (its stack bound).
    crate::context::asan::leave(Some(&mut asan_save), unsafe { super::worker::actor_stack(&*next_cell) });
    // `next`'s saved sp is a suspended (or freshly bound) context and its `sched_sp` is set.
    // SAFETY: `next` is claimed (above); `handed_from` names us, and nobody resumes us
    // before `next` has completed our park or yield (we are RUNNING until then).
    let resume_value =
        unsafe { crate::context::hand_off((*next_cell).sp, &raw mut (*cell).sp, w as *const Worker as usize) };
    #[cfg(smarm_asan)]
    crate::context::asan::arrive(asan_save);
    (slot, resumed(slot, index, pin, false, resume_value))
}

/// Run by every resumed actor before anything else: if a hand-off resumed it, the park
/// transition of the actor that handed over, whose context is now saved.
#[inline(always)]
pub(super) fn complete_hand_off(w: &Worker) {
    let prev = w.handed_from.get();
    if prev != NONE {
        w.handed_from.set(NONE);
        // SAFETY: set with `handed_from`: the slot of that actor, in the slab, which outlives
        // the runtime's actors.
        finish_hand_off(w, prev, unsafe { &*w.handed_slot.get() }, w.handed_yield.get());
    }
}

/// The park transition of `prev`, which handed this thread over (or, if it `yielded`, its
/// queueing at the back of the local queue). If a wake arrived since it decided to park, it
/// is queued to run again.
#[inline(never)]
fn finish_hand_off(w: &Worker, prev: u32, prev_slot: &Slot, yielded: bool) {
    if yielded {
        // Not pinned: `hand_off_yield` checked.
        prev_slot.yield_queued();
        w.push_local(prev);
        // Work this thread is not running: an idle thread may take it. Without this, a yielder
        // behind an actor that spins without runtime calls would wait for a thread that
        // sleeps. The full wake protocol (`Idle::wake_any`: SeqCst fence, then claim), not
        // the fence-free `nudge` that `next_runnable` uses after its pop: here nothing
        // orders the push's store before the read of the sleepers' bitmap (the scheduler
        // path has its pop's CAS in between), so without the fence a thread that is just
        // going to sleep could miss the yielder, and we its bit. With one scheduler thread
        // there is nobody to wake: this thread is the only one that sleeps in `idle`, and it
        // is running.
        if !w.solo {
            w.shared.wake_one();
        }
    } else if !prev_slot.try_park() {
        // Woken meanwhile: still RUNNING (the flag consumed); make it runnable. A
        // thread-bound actor is pinned here (it handed this thread over), and only this
        // thread may run it.
        prev_slot.yield_queued();
        // Relaxed: written by `hand_off_park` on this thread.
        if prev_slot.pinned.load(Ordering::Relaxed) == UNPINNED {
            w.push_local(prev);
        } else {
            w.inbox().push(prev);
        }
    }
}
