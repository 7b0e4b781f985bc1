//! `tracing` spans that follow actors (feature `tracing`).
//!
//! A `tracing` subscriber keeps the current span per OS thread. An actor that enters a span
//! and parks would leave it current on its thread, where the next actor's spans would nest
//! inside it, and would resume on another thread without it. So at every suspension the
//! runtime exits, innermost first, the spans the actor entered (those above the thread's own
//! span at the time the actor was resumed: its *base*), keeps their ids in the actor's
//! control block, and at resumption, on whatever thread, records that thread's base and
//! enters them again, outermost first. The user's `Entered` guards stay valid: when one is
//! dropped, its span is current again on the actor's present thread.
//!
//! Both halves are `#[inline(never)]` functions that read the subscriber's thread-locals
//! afresh, so nothing thread-local is carried across the switch (see `context`). Cost: one
//! `current_span` lookup per suspension and resumption, only with the feature on.

use tracing::dispatcher;
use tracing::Id;

/// The spans of one actor while it is suspended, and the base of its current resumption.
#[derive(Default)]
pub(crate) struct ActorSpans {
    /// The thread's current span when the actor was (re)started on it.
    base: Option<Id>,
    /// The actor's entered spans, innermost first, while it is suspended.
    stack: Vec<Id>,
}

/// Most spans exited per suspension: a guard against a subscriber whose current span does
/// not move on `exit`.
const MAX_DEPTH: usize = 64;

/// The actor starts on this thread: what is current now is the thread's, not the actor's.
#[inline(never)]
pub(crate) fn on_start(spans: &mut ActorSpans) {
    if dispatcher::has_been_set() {
        spans.base = dispatcher::get_default(|d| d.current_span().id().cloned());
    }
}

/// The actor is about to switch out: exit its spans (innermost first) and keep them.
#[inline(never)]
pub(crate) fn suspend(spans: &mut ActorSpans) {
    if !dispatcher::has_been_set() {
        return;
    }
    dispatcher::get_default(|d| {
        for _ in 0..MAX_DEPTH {
            let Some(id) = d.current_span().id().cloned() else { break };
            if spans.base.as_ref() == Some(&id) {
                break;
            }
            d.exit(&id);
            let moved = d.current_span().id() != Some(&id);
            spans.stack.push(id);
            if !moved {
                break;
            }
        }
    });
}

/// The actor was resumed (on any thread): note the thread's base, enter its spans again.
#[inline(never)]
pub(crate) fn resume(spans: &mut ActorSpans) {
    if !dispatcher::has_been_set() {
        return;
    }
    dispatcher::get_default(|d| {
        spans.base = d.current_span().id().cloned();
        while let Some(id) = spans.stack.pop() {
            d.enter(&id);
        }
    });
}

/// The `tracing` event of a spawn (level TRACE, target `smarm`).
#[cold]
pub(crate) fn spawn_event(pid: crate::slot_state::Pid, site: &'static core::panic::Location<'static>) {
    tracing::trace!(target: "smarm", pid = %pid, site = %site, "actor spawned");
}

/// The `tracing` event of an actor's end, at the level OTP's SASL would report it: a panic
/// is an ERROR (a crash report), another abnormal reason a WARN, a kill or a shutdown a
/// DEBUG, a normal end a TRACE.
#[cold]
pub(crate) fn exit_event(pid: crate::slot_state::Pid, reason: &crate::exit::DownReason) {
    use crate::exit::DownReason;
    match reason {
        DownReason::Normal => tracing::trace!(target: "smarm", pid = %pid, "actor exited normally"),
        DownReason::Panic(msg) => tracing::error!(target: "smarm", pid = %pid, panic = %msg, "actor panicked"),
        DownReason::Killed | DownReason::Shutdown => {
            tracing::debug!(target: "smarm", pid = %pid, reason = %reason, "actor stopped")
        }
        other => tracing::warn!(target: "smarm", pid = %pid, reason = %other, "actor exited abnormally"),
    }
}
