//! Lazy park timeouts: the protocol between a parking actor, the scheduler thread that
//! noted its request, and the timer wheel.
//!
//!
//! Most timed waits end long before their deadline (a `call`'s reply arrives in
//! microseconds; its timeout is 5 s), so a timed park does not touch the wheel or the clock
//! up front. The parking actor writes the timeout into its slot (`Slot::lazy_timeout`),
//! marks request `seq` PENDING in `Slot::lazy`, and notes `(index, seq, round)` on its
//! scheduler thread. That thread arms the request (puts it on the wheel at *arming time* +
//! timeout) only if, `LAZY_ARM_ROUNDS` scheduling rounds later or when the thread is about
//! to idle, the actor is still parked on that same request. So a timeout never fires early;
//! it may fire late by at most those rounds (each bounded by the preemption timeslice for
//! actors that make runtime calls). The actor ends the request when it resumes. If it
//! resumes on the thread it parked on and its note is still that thread's newest (the
//! usual case: a call's reply is handed straight back), it takes the note back and stores
//! IDLE: no other thread reads that note or arms that request. Otherwise `disarm_lazy`:
//! PENDING -> IDLE with one CAS when it was never armed, else under the timer lock, where
//! ARMED -> FIRED (by `fire_due`) and the key live, so the wheel never keeps an entry for
//! an actor that moved on. A thread holds at most 256 notes; a further one first arms the
//! oldest (early arming only makes that timeout count from later, never fire earlier).
//!
//! Limitation: only the noting thread arms its notes. While an actor holds that thread
//! without yielding it (a blocking OS call, a long `NoPreempt` section, a loop without
//! runtime calls), the timeouts noted there wait for it, even if other threads are idle;
//! and a wait woken without its condition before its note was armed counts its limit afresh
//! from that wake (an armed note hands its deadline back instead, see `LazyEnd`).
//!

use std::sync::atomic::Ordering;
use std::time::Instant;

use crate::runtime::Shared;
use crate::slot_state::{Pid, Slot};
use crate::wheel::{Action, LazyToken, Timers};

/// `Slot::lazy` states (low two bits; the request's sequence number is above them).
pub(crate) const LAZY_IDLE: u64 = 0;
/// Requested by a parking actor, not yet on the wheel.
pub(crate) const LAZY_PENDING: u64 = 1;
/// On the wheel; the key is in `Slot::lazy_key`.
pub(crate) const LAZY_ARMED: u64 = 2;
/// Fired: the actor was woken by its timeout.
pub(crate) const LAZY_FIRED: u64 = 3;

/// The `Slot::lazy` word of request `seq` in `state`.
#[inline]
pub(crate) fn lazy_word(seq: u64, state: u64) -> u64 {
    (seq << 2) | state
}

/// How a lazy park timeout ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LazyEnd {
    /// The timeout fired.
    Fired,
    /// The actor was woken first. If the request had been armed, the deadline it had on the
    /// wheel (the park's timeout counted from the arming, which came after the park began);
    /// None if it was never armed (the wake came within the rounds before arming).
    Woken(Option<Instant>),
}

/// Fires an armed request (from `Timers::fire_due`, under the timer lock): ARMED -> FIRED and
/// wake, unless the actor already disarmed it.
pub(crate) fn fire(sh: &Shared, t: LazyToken) {
    let Some(slot) = sh.slab.try_slot(t.index) else { return };
    // Relaxed: ARMED/FIRED transitions happen only under the timer lock we hold; the wake
    // below publishes with its own Release.
    let armed = lazy_word(t.seq, LAZY_ARMED);
    if slot.lazy.compare_exchange(armed, lazy_word(t.seq, LAZY_FIRED), Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        sh.wake(sh.slab.pid(t.index, t.gen));
    }
}

/// Arms the pending lazy timeout `seq` of the parked actor `pid` (in `slot`) to fire
/// at `now` + its timeout. Does nothing if the actor has disarmed it meanwhile. Returns
/// whether this lowered the earliest deadline.
pub(crate) fn arm(timers: &Timers, slot: &Slot, pid: Pid, seq: u64, now: Instant) -> bool {
    // Relaxed: the caller's Acquire load of the PENDING word made this visible.
    let timeout = slot.lazy_timeout.load(Ordering::Relaxed);
    let at = timers.nanos(now).saturating_add(timeout).min(u64::MAX - 1);
    let mut wheel = timers.lock();
    // Relaxed: PENDING -> ARMED races only with the actor's PENDING -> IDLE (exactly one
    // CAS wins); every later transition of this request happens under the lock we hold.
    let pending = lazy_word(seq, LAZY_PENDING);
    if slot.lazy.compare_exchange(pending, lazy_word(seq, LAZY_ARMED), Ordering::Relaxed, Ordering::Relaxed).is_err() {
        return false;
    }
    let token = LazyToken { index: pid.index(), gen: pid.generation(), seq };
    let (key, earliest) = timers.insert_locked(&mut wheel, at, Action::WakeLazy(token));
    // SAFETY: `lazy_key` is accessed only under the timer lock, which we hold.
    unsafe { *slot.lazy_key.get() = key };
    earliest
}

/// The parking actor's side, once resumed: ends lazy request `seq`, taking it off the
/// wheel if it was armed.
pub(crate) fn disarm(timers: &Timers, slot: &Slot, seq: u64) -> LazyEnd {
    let idle = lazy_word(seq, LAZY_IDLE);
    // Relaxed: a request never armed ends with this CAS (see `arm_lazy`).
    if slot.lazy.compare_exchange(lazy_word(seq, LAZY_PENDING), idle, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
        return LazyEnd::Woken(None);
    }
    let mut wheel = timers.lock();
    // Relaxed: under the lock that orders every ARMED/FIRED transition.
    let cur = slot.lazy.load(Ordering::Relaxed);
    let (removed, end) = if cur == lazy_word(seq, LAZY_ARMED) {
        // SAFETY: accessed under the timer lock.
        let key = unsafe { *slot.lazy_key.get() };
        (wheel.cancel(key), LazyEnd::Woken(Some(timers.deadline_of(key))))
    } else {
        debug_assert_eq!(cur, lazy_word(seq, LAZY_FIRED), "smarm: lazy request in an unexpected state");
        (None, LazyEnd::Fired)
    };
    slot.lazy.store(idle, Ordering::Relaxed);
    drop(wheel);
    drop(removed);
    end
}
