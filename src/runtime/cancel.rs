//! Stop requests (kill, exit signals, shutdown) as the running actor sees them: the reason a
//! request means, raising it as an unwind at a runtime call, and deferring it (the root while
//! it stops the supervision trees).

use std::sync::atomic::Ordering;

use super::unwind::actor_unwinding;
use super::worker::{current_actor_pid, current_worker};
use crate::exit::{Cancelled, DownReason};
use crate::slot_state::{Cancel, Slot};

/// The reason the running actor has been asked to stop, if any (None off an actor, and for
/// a request the actor defers, see `defer_stops`), and whether that request was raised in it
/// as an unwind (`ActorCell::stop_raised`).
pub(crate) fn current_cancel_reason() -> Option<(DownReason, bool)> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker.
    let slot = unsafe { &*w }.current_slot()?;
    // SAFETY: the running actor's own control block.
    let (raised, deferred) = unsafe { ((*slot.cell.get()).stop_raised, (*slot.cell.get()).defer_stops) };
    cancel_request(slot).filter(|(code, _)| !deferred || *code == Cancel::Kill).map(|(_, r)| (r, raised))
}

/// From now on the running actor neither raises nor ends with a stop request other than a
/// kill (`ActorCell::defer_stops`): the root, whose body has returned, while it stops the
/// supervision trees. A request already pending still decides its exit reason (it came
/// first), without cutting the stop of the trees short.
pub(crate) fn defer_stops() {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker.
    let Some(slot) = (unsafe { &*w }).current_slot() else { return };
    if let Some((code, reason)) = cancel_request(slot) {
        if code != Cancel::Kill {
            // SAFETY: the running actor's own control block.
            unsafe { (*slot.cell.get()).exit_override = Some(Box::new(reason)) };
        }
    }
    // SAFETY: the running actor's own control block.
    unsafe { (*slot.cell.get()).defer_stops = true };
}

/// Unwinds the running actor if it has been asked to stop, unless it is already unwinding.
#[inline(always)]
pub(super) fn check_cancelled(slot: &Slot) {
    // Acquire: pairs with the Release store of the request.
    if slot.cancel.is_set(Ordering::Acquire) {
        check_cancelled_slow(slot);
    }
}

#[cold]
#[inline(never)]
fn check_cancelled_slow(slot: &Slot) {
    if let Some((code, reason)) = cancel_request(slot) {
        // SAFETY: the running actor's own control block.
        if unsafe { (*slot.cell.get()).defer_stops } && code != Cancel::Kill {
            return;
        }
        if !actor_unwinding(slot) {
            // SAFETY: the running actor's own control block.
            unsafe {
                (*slot.cell.get()).unwinding = true;
                (*slot.cell.get()).stop_raised = true;
            }
            std::panic::resume_unwind(Box::new(Cancelled(reason)));
        }
    }
}

/// The reason the running actor has been asked to stop, if any.
pub(super) fn cancel_reason(slot: &Slot) -> Option<DownReason> {
    cancel_request(slot).map(|(_, reason)| reason)
}

/// The running actor's stop request, if any: its kind and the reason it means. Only
/// `Cancel::Kill` (`kill`, the shutdown timeout's kill) is untrappable and never deferred; an
/// exit signal whose reason is `Killed` (`exit(pid, Killed)`, a link to a killed actor) is an
/// ordinary exit signal (OTP's `killed` reason, unlike its `kill` signal).
fn cancel_request(slot: &Slot) -> Option<(Cancel, DownReason)> {
    // Acquire: pairs with the Release store of the request (and of an exit reason).
    let code = slot.cancel.load(Ordering::Acquire);
    let reason = match code {
        Cancel::None => return None,
        Cancel::Shutdown => DownReason::Shutdown,
        Cancel::Kill => DownReason::Killed,
        Cancel::Exit => {
            let (shared, pid) = current_actor_pid()?;
            // SAFETY: the runtime outlives its running actor.
            let sh = unsafe { &*shared };
            (sh.hooks.exit_reason)(sh, pid)
        }
    };
    Some((code, reason))
}

/// Unwinds the running actor if it has been asked to stop (for runtime calls that do not
/// switch, e.g. `maybe_preempt`).
pub(crate) fn check_cancelled_current() {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker.
    if let Some(slot) = unsafe { &*w }.current_slot() {
        check_cancelled(slot);
    }
}
