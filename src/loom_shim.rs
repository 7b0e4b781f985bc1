//! The one door to atomics, cells and spinning for the lock-free parts of smarm
//! (`run_queue`, the idle/park protocol). Under `cfg(loom)` it switches to loom's
//! model-checked equivalents, so the loom models exercise exactly the production code.
//!
//! Under loom only this module, `backoff`, `run_queue`, `local_queue`, `free_chain`, `runtime::idle` and
//! `runtime::lifecycle` are compiled, so most of their crate-private items have no user
//! outside the models.
#![cfg_attr(loom, allow(dead_code))]

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Gives way to a peer that is mid-operation. Under loom every wait is a yield, so the
/// model explores the stalled peer's progress instead of spinning forever. (A no-op spin
/// hint under loom is worse, not better: the backoff's spin rounds become runs of loads
/// whose stale-value choices loom must permute, and the models take minutes instead of
/// seconds.)
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

/// Yields the OS thread (a peer may be descheduled mid-operation).
#[inline]
pub(crate) fn yield_thread() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    std::thread::yield_now();
}

/// An `UnsafeCell` with loom's closure-based API, so loom can track accesses.
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

#[cfg(not(loom))]
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[allow(dead_code)]
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }
    #[inline(always)]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }
    #[inline(always)]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

/// Pads and aligns a value to 128 bytes: two 64-byte lines, because the adjacent-line
/// prefetcher on x86 pulls pairs of lines, so 64 alone still lets neighbours false-share.
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct CachePadded<T>(pub(crate) T);

impl<T> core::ops::Deref for CachePadded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Runs a loom model with the given preemption bound, unless `LOOM_MAX_PREEMPTIONS` sets
/// one (the other `LOOM_*` environment variables apply as usual).
#[cfg(all(test, loom))]
pub(crate) fn loom_check(preemption_bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound.get_or_insert(preemption_bound);
    builder.check(f);
}
