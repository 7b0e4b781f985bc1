//! Per-scheduler-thread counters for introspection (`info::schedulers`), and the optional
//! per-actor CPU-time accounting (`Builder::cpu_time`).
//!
//! Each [`ThreadStats`] has one writer, its scheduler thread, which bumps its counters with a
//! plain load and store (no read-modify-write instruction: nothing else writes them), so a
//! count costs what a non-atomic increment costs. Readers on other threads see each counter
//! as some recent value; counters are reports, not synchronisation, so Relaxed suffices for
//! every access here.
//!
//! CPU time per actor needs a clock read at every switch (`rdtsc`, about 14 ns on the
//! machine this was measured on: 10-15% of a message round trip between two actors), so it
//! is off unless the builder asks for it. The thread's idle time is always measured: it costs
//! two clock reads per sleep, which is noise next to the sleep itself.

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
