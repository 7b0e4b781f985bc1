//! Per-scheduler-thread counters for introspection (`info::schedulers`), and the optional
//! per-actor CPU-time accounting (`Builder::cpu_time`).
//!
//! Each [`ThreadStats`] has one writer, its scheduler thread, which bumps its counters with a
//! plain load and store (no read-modify-write instruction: nothing else writes them), so a
//! count costs what a non-atomic increment costs. Readers on other threads see each counter
//! as some recent value; counters are reports, not synchronisation, so Relaxed suffices for
//! every access here.
//!
//! The counters bumped once per message (parks, wakes) and the migration count live in
//! [`LocalCounts`] instead: plain cells in the thread's `Worker`, one `inc` instruction each
//! (an atomic's load and store would be three, behind a pointer), copied into the shared
//! [`ThreadStats`] by [`LocalCounts::publish`] at the scheduler's round work (every
//! `GLOBAL_FIRST_INTERVAL` scheduling decisions), before the thread sleeps, when it stops,
//! and when an actor on that thread asks `info::schedulers`. A busy thread's published
//! figures may so lag by up to a round; an idle one's are exact. This is what keeps the
//! counters within the 2% budget on a message round trip (outputs/history.md, finding 53).
//!
//! CPU time per actor needs a clock read at every switch (`rdtsc`, about 14 ns on the
//! machine this was measured on: 10-15% of a message round trip between two actors), so it
//! is off unless the builder asks for it. The thread's idle time is always measured: it costs
//! two clock reads per sleep, which is noise next to the sleep itself.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

/// One scheduler thread's counters (see the module doc).
#[derive(Default)]
pub(crate) struct ThreadStats {
    /// Resumes of an actor that last ran on another thread.
    pub(crate) migrations: AtomicU64,
    /// Actors that parked on this thread.
    pub(crate) parks: AtomicU64,
    /// Wakes made by actors running on this thread.
    pub(crate) wakes: AtomicU64,
    /// Actors taken from another thread's local queue.
    pub(crate) steals: AtomicU64,
    /// Reactor polls made by this thread (blocking or not).
    pub(crate) polls: AtomicU64,
    /// Times the thread went to sleep for lack of work.
    pub(crate) sleeps: AtomicU64,
    /// TSC ticks spent asleep (or waiting in `epoll_wait`).
    pub(crate) idle_ticks: AtomicU64,
    /// TSC at the thread's start (0 until it starts).
    pub(crate) started: AtomicU64,
}

/// Adds one to a counter of this thread's own (single writer: see the module doc).
#[inline(always)]
pub(crate) fn bump(c: &AtomicU64) {
    add(c, 1);
}

/// Adds `n` to a single-writer counter.
#[inline(always)]
pub(crate) fn add(c: &AtomicU64, n: u64) {
    // Relaxed: single writer, report-only (module doc).
    c.store(c.load(Ordering::Relaxed).wrapping_add(n), Ordering::Relaxed);
}

/// A counter's current value.
#[inline]
pub(crate) fn get(c: &AtomicU64) -> u64 {
    // Relaxed: a report (module doc).
    c.load(Ordering::Relaxed)
}

/// The hot per-thread counters, in plain cells owned by the scheduler thread (see the module
/// doc); published to the thread's [`ThreadStats`] by [`LocalCounts::publish`].
#[derive(Default)]
pub(crate) struct LocalCounts {
    /// Actors that parked on this thread.
    pub(crate) parks: Cell<u64>,
    /// Wakes made by actors running on this thread.
    pub(crate) wakes: Cell<u64>,
    /// Resumes of an actor that last ran on another thread.
    pub(crate) migrations: Cell<u64>,
}

impl LocalCounts {
    /// Adds one to a cell of this thread's own.
    #[inline(always)]
    pub(crate) fn bump(c: &Cell<u64>) {
        c.set(c.get().wrapping_add(1));
    }

    /// Copies the totals into the thread's shared counters.
    pub(crate) fn publish(&self, to: &ThreadStats) {
        // Relaxed: single writer, report-only (module doc).
        to.parks.store(self.parks.get(), Ordering::Relaxed);
        to.wakes.store(self.wakes.get(), Ordering::Relaxed);
        to.migrations.store(self.migrations.get(), Ordering::Relaxed);
    }
}
