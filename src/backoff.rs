//! Spin-then-yield backoff for lock-free retries and short lock waits (after crossbeam-utils'
//! `Backoff`). Layer 0: used by the run queue and `raw_mutex`.
#![cfg_attr(loom, allow(dead_code))]

use crate::loom_shim::{spin_hint, yield_thread};

/// Spin-then-yield backoff (after crossbeam-utils' `Backoff`): `spin` when a peer made
/// progress and we only lost a race, `snooze` when waiting for a peer that may be
/// descheduled, which after a few rounds yields the OS thread so that peer can run.
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Up to 2^SPIN_LIMIT spin hints per `spin`.
    const SPIN_LIMIT: u32 = 6;
    /// After this many `snooze` steps the wait is considered long (`is_completed`).
    const YIELD_LIMIT: u32 = 10;

    pub(crate) fn new() -> Backoff {
        Backoff { step: 0 }
    }

    /// Lost a race with a peer that made progress: retry soon.
    pub(crate) fn spin(&mut self) {
        for _ in 0..1u32 << self.step.min(Self::SPIN_LIMIT) {
            spin_hint();
        }
        if self.step <= Self::SPIN_LIMIT {
            self.step += 1;
        }
    }

    /// Waiting on a peer that may be descheduled: spin briefly, then yield the OS thread.
    pub(crate) fn snooze(&mut self) {
        if self.step <= Self::SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                spin_hint();
            }
        } else {
            yield_thread();
        }
        if self.step <= Self::YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// True once the wait has escalated to yielding for a while.
    pub(crate) fn is_completed(&self) -> bool {
        self.step > Self::YIELD_LIMIT
    }
}
