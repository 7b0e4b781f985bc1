//! Actor stacks: mmap'd regions with a guard page below, a bounded pool of warm stacks, and
//! the handler that turns a guard-page fault into a clear message.
//!
//! # Layout
//!
//! ```text
//!  base                 base + GUARD                                  base + len = top
//!  | guard page (no access) | usable stack, grows downwards  <------------------ |
//! ```
//!
//! Memory is mapped `MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE`: the kernel commits pages
//! only when the actor touches them, so a parked actor costs the pages its frames used.
//!
//! # Guard pages
//!
//! On Linux >= 6.13 the guard is installed with `madvise(MADV_GUARD_INSTALL)`, which marks
//! page-table entries and does not split the mapping: neighbouring stacks stay one kernel
//! memory map, so a million guarded stacks fit under `vm.max_map_count`. Older kernels
//! reject the advice with `EINVAL`; smarm then falls back to `mprotect(PROT_NONE)`, where
//! each stack costs two maps. When mapping fails, the error names the limit and the sysctl.
//!
//! # Pool
//!
//! [`StackPool`] keeps at most `max_warm` released stacks for reuse (a spawn then does no
//! syscall and deep actors find their pages resident); stacks released beyond that bound
//! are unmapped, so RSS falls back after a burst. When a runtime ends, its warm stacks move
//! to a process-wide cache of at most 1,024 stacks that the next runtime draws from first.
//!
//! Each scheduler thread keeps a [`StackCache`] in front of the pool, as Go keeps a free
//! list of goroutines per P: the stacks its actors released (at most 64, the hottest on
//! top), reservations taken from the pool 32 at a time, and the count of reservations it
//! has kept from its own stacks, paid back to the pool 32 at a time. So a spawn, a first
//! run and an end on a scheduler thread lock the pool once per 32 on average instead of
//! once each; with a spawner on one thread and its actors running on another, that lock
//! was about a tenth of the time (history 60).
//!
//! # Batches
//!
//! A pool with no spare stack maps a batch of them with one `mmap` (16 the first time, then
//! as many as the pool has mapped so far, at most 1,024) and installs their guards with one
//! `process_madvise` per 1,024 (recent kernels, 6.18 here, accept any advice there for the
//! calling process; where it is refused, one `madvise` per stack). One stack at a time costs a
//! spawn two syscalls. A C program on this project's VM, mapping, guarding and touching the top
//! page of each stack: 6.0 us per stack one by one, 2.1-2.8 us in batches of 1,024, of which
//! the batched guard install is 0.55-0.6 us (history 55). Each stack of a batch
//! still owns its own range: dropping one unmaps just that range. Stacks released beyond the
//! bound are unmapped 64 at a time, sorted, with one `munmap` per run of adjacent stacks
//! (the actors of a burst end in bursts, and their stacks were mapped side by side). The
//! batch's unused stacks cost address space and page tables, not memory: their pages are
//! only committed when an actor first runs on them.
//!
//! # Overflow
//!
//! [`install_overflow_handler`] installs (once per process) a `SIGSEGV`/`SIGBUS` handler
//! that runs on an alternate signal stack ([`AltStack`], one per scheduler thread). If the
//! faulting address is in the guard page of an actor whose stack that thread may be using
//! (the running actor, and during a hand-off also the actor handing the thread over, whose
//! switch pushes its last registers after the thread already names the next actor as
//! running) it prints `smarm: actor <pid> overflowed its N KiB stack` and aborts, like std
//! does for threads; any other fault is passed to the previously installed handler (std's
//! own, or the default action).

use std::io;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Once;

use parking_lot::Mutex;

/// Size of the guard region below every stack.
pub(crate) const GUARD_BYTES: usize = 4096;
const PAGE: usize = 4096;

/// `MADV_GUARD_INSTALL` (include/uapi/asm-generic/mman-common.h, Linux 6.13).
const MADV_GUARD_INSTALL: libc::c_int = 102;

/// How guards are installed: probed on first use.
/// 0 = unknown, 1 = madvise(MADV_GUARD_INSTALL), 2 = mprotect.
static GUARD_METHOD: AtomicU8 = AtomicU8::new(0);
const GUARD_UNKNOWN: u8 = 0;
const GUARD_MADVISE: u8 = 1;
const GUARD_MPROTECT: u8 = 2;

/// One mapped stack with its guard page. Unmapped on drop.
pub(crate) struct Stack {
    base: *mut u8,
    len: usize,
}

// SAFETY: a Stack is exclusively owned memory; nothing in it is tied to a thread.
unsafe impl Send for Stack {}

impl Stack {
    /// The mapped length (guard page included) of a stack of `usable` bytes.
    pub(crate) fn mapped_len(usable: usize) -> usize {
        usable.div_ceil(PAGE) * PAGE + GUARD_BYTES
    }

    /// Maps a stack with `usable` bytes (rounded up to whole pages) above a guard page.
    pub(crate) fn new(usable: usize) -> io::Result<Stack> {
        let mut one = Stack::new_batch(usable, 1)?;
        Ok(one.pop().expect("a batch of one holds one stack"))
    }

    /// Maps `count` (>= 1) stacks of `usable` bytes each with one `mmap`, side by side, and
    /// installs their guards (batched, see the module doc). Each stack owns its own range.
    pub(crate) fn new_batch(usable: usize, count: usize) -> io::Result<Vec<Stack>> {
        debug_assert!(count >= 1);
        let len = Stack::mapped_len(usable);
        let total = len.checked_mul(count).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "smarm: a batch of actor stacks overflows the address space")
        })?;
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(map_error(io::Error::last_os_error(), "mmap"));
        }
        let base = base as *mut u8;
        // SAFETY (the `add`): every offset is inside the `total` bytes just mapped.
        let stacks: Vec<Stack> = (0..count).map(|i| Stack { base: unsafe { base.add(i * len) }, len }).collect();
        install_guards(&stacks)?; // on error the stacks are dropped, so all is unmapped
        Ok(stacks)
    }

    /// One past the highest usable byte (16-byte aligned).
    pub(crate) fn top(&self) -> *mut u8 {
        // SAFETY: base + len is the end of our own mapping.
        unsafe { self.base.add(self.len) }
    }

    /// Clears AddressSanitizer's poisoning of the usable stack (see build.rs): a new actor
    /// starts on it with none of the previous one's frames.
    #[cfg(smarm_asan)]
    pub(crate) fn asan_unpoison(&self) {
        extern "C" {
            fn __asan_unpoison_memory_region(addr: *const u8, size: usize);
        }
        // SAFETY: the usable part of our own mapping, above the guard; ASan's runtime is linked
        // whenever this cfg is set (the build runs with `-Zsanitizer=address`).
        unsafe { __asan_unpoison_memory_region(self.base.add(GUARD_BYTES), self.len - GUARD_BYTES) };
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: we own the mapping [base, base+len) and nothing references it any more
        // (the actor that ran on it is done or never started).
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
    }
}

/// `PIDFD_SELF_THREAD_GROUP` (include/uapi/linux/pidfd.h, a recent kernel's): the calling
/// process, for `process_madvise` without opening a pidfd.
const PIDFD_SELF: libc::c_int = -10001;

/// Ranges per `process_madvise` call (the kernel's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Whether `process_madvise(PIDFD_SELF, .., MADV_GUARD_INSTALL)` works: probed on first use.
/// 0 = unknown, 1 = yes, 2 = no (one `madvise` per stack).
static BATCH_GUARDS: AtomicU8 = AtomicU8::new(0);
const BATCH_NO: u8 = 2;

/// Installs the guard page at the base of each of `stacks` (fresh mappings of ours).
fn install_guards(stacks: &[Stack]) -> io::Result<()> {
    // Relaxed (every access of both probes): caches of probe results; nothing else is
    // published with them, and racing probes store the same values.
    let mut rest = stacks;
    if GUARD_METHOD.load(Ordering::Relaxed) != GUARD_MPROTECT && BATCH_GUARDS.load(Ordering::Relaxed) != BATCH_NO {
        rest = guard_batch(rest);
    }
    for s in rest {
        install_guard(s.base)?;
    }
    Ok(())
}

/// Installs guards with `process_madvise`, [`IOV_MAX`] stacks a call; returns the stacks it
/// could not do (all of them when the kernel does not take the call: then it is never tried
/// again). Errors are left to the per-stack path, which reports them.
fn guard_batch(mut rest: &[Stack]) -> &[Stack] {
    while !rest.is_empty() {
        let n = rest.len().min(IOV_MAX);
        let iov: Vec<libc::iovec> =
            rest[..n].iter().map(|s| libc::iovec { iov_base: s.base.cast(), iov_len: GUARD_BYTES }).collect();
        // SAFETY: `iov` holds `n` valid iovecs naming the first pages of our own mappings;
        // the advice installs guard markers there and touches nothing else.
        let r =
            unsafe { libc::syscall(libc::SYS_process_madvise, PIDFD_SELF, iov.as_ptr(), n, MADV_GUARD_INSTALL, 0u32) };
        if r <= 0 {
            // An older kernel (no PIDFD_SELF: EBADF; the advice not allowed there: EINVAL)
            // or before 5.10 (ENOSYS). Any other error is the per-stack path's to report.
            let err = io::Error::last_os_error().raw_os_error();
            if r < 0 && matches!(err, Some(libc::EBADF | libc::EINVAL | libc::ENOSYS | libc::EPERM)) {
                BATCH_GUARDS.store(BATCH_NO, Ordering::Relaxed);
            }
            return rest;
        }
        BATCH_GUARDS.store(1, Ordering::Relaxed);
        GUARD_METHOD.store(GUARD_MADVISE, Ordering::Relaxed);
        // The call advises the ranges in order and reports the bytes done: a short count
        // leaves the rest for the next call.
        rest = &rest[(r as usize / GUARD_BYTES).min(n)..];
    }
    rest
}

fn install_guard(base: *mut u8) -> io::Result<()> {
    // Relaxed (every access): a cache of a probe result; nothing else is published with it.
    let mut method = GUARD_METHOD.load(Ordering::Relaxed);
    if method != GUARD_MPROTECT {
        // SAFETY: the first page of our own fresh mapping.
        let rc = unsafe { libc::madvise(base as *mut libc::c_void, GUARD_BYTES, MADV_GUARD_INSTALL) };
        if rc == 0 {
            if method == GUARD_UNKNOWN {
                // Relaxed: a cache of a probe result; racing probes store the same value.
                GUARD_METHOD.store(GUARD_MADVISE, Ordering::Relaxed);
            }
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINVAL) {
            return Err(map_error(err, "madvise(MADV_GUARD_INSTALL)"));
        }
        // Kernel older than 6.13: fall back for good. Relaxed: as above.
        GUARD_METHOD.store(GUARD_MPROTECT, Ordering::Relaxed);
        method = GUARD_MPROTECT;
    }
    debug_assert_eq!(method, GUARD_MPROTECT);
    // SAFETY: the first page of our own mapping.
    let rc = unsafe { libc::mprotect(base as *mut libc::c_void, GUARD_BYTES, libc::PROT_NONE) };
    if rc != 0 {
        return Err(map_error(io::Error::last_os_error(), "mprotect(guard page)"));
    }
    Ok(())
}

/// Unmaps `stacks` with one `munmap` per run of adjacent ones.
fn unmap_batch(stacks: Vec<Stack>) {
    let mut ranges: Vec<(usize, usize)> = stacks.into_iter().map(Stack::into_raw).collect();
    ranges.sort_unstable();
    let mut i = 0;
    while i < ranges.len() {
        let (start, mut end) = (ranges[i].0, ranges[i].0 + ranges[i].1);
        i += 1;
        while i < ranges.len() && ranges[i].0 == end {
            end += ranges[i].1;
            i += 1;
        }
        // SAFETY: [start, end) is a run of adjacent stacks we owned (given up with
        // `into_raw` above), so nothing references it any more.
        unsafe { libc::munmap(start as *mut libc::c_void, end - start) };
    }
}

/// Adds the likely cause to a mapping failure: ENOMEM from mmap/mprotect is either memory or
/// the per-process map limit.
fn map_error(err: io::Error, what: &str) -> io::Error {
    if err.raw_os_error() == Some(libc::ENOMEM) {
        let limit = std::fs::read_to_string("/proc/sys/vm/max_map_count")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        io::Error::new(
            io::ErrorKind::OutOfMemory,
            format!(
                "smarm: {what} for an actor stack failed: out of memory or out of memory maps \
                 (vm.max_map_count = {limit}; raise it with `sysctl -w vm.max_map_count=N`, \
                 or lower max_actors/stack_size)"
            ),
        )
    } else {
        io::Error::new(err.kind(), format!("smarm: {what} for an actor stack failed: {err}"))
    }
}

/// Which guard mechanism is in use ("madvise", "mprotect" or "unknown" before the first stack).
pub fn guard_method() -> &'static str {
    // Relaxed: a cached probe result (see `install_guard`).
    match GUARD_METHOD.load(Ordering::Relaxed) {
        GUARD_MADVISE => "madvise(MADV_GUARD_INSTALL)",
        GUARD_MPROTECT => "mprotect",
        _ => "unknown",
    }
}

/// A bounded pool of equally sized stacks.
///
/// Spawning *reserves* a stack (mapping a batch into the pool if none is spare, so a failing
/// `mmap` is the spawner's error) and the actor *takes* one at its first run: the most
/// recently released one, whose pages are resident and likely still in cache. So 100 actors
/// spawned at once and run one after another on one thread all run on the same hot stack,
/// instead of streaming through 100 cold ones.
pub(crate) struct StackPool {
    usable: usize,
    max_warm: usize,
    inner: Mutex<Pool>,
}

struct Pool {
    /// Stacks that have been used (released, or from the process-wide cache), hottest last.
    warm: std::collections::VecDeque<Stack>,
    /// Stacks of a batch no actor has run on yet (no committed pages).
    fresh: Vec<Stack>,
    /// Stacks promised to spawned actors that have not run yet (taken from `warm` first),
    /// plus the caches' unused credits and the promises they kept and have not paid back:
    /// never less than the promises outstanding, so never more than the pool holds.
    reserved: usize,
    /// Stacks this pool has mapped: the next batch maps as many (see the module doc).
    mapped: usize,
}

/// One scheduler thread's front of a [`StackPool`] (only that thread touches it). See the
/// module doc.
///
/// Accounting: the pool's `reserved` counts every promise not yet kept, plus the credits
/// caches hold and the promises they kept from their own stacks without telling the pool
/// yet (`owed`). Stacks in caches are outside the pool. So the pool always holds a stack for
/// every promise it counts, and a cache that kept a promise from its own stack only makes
/// the pool's count too high until it pays back, never too low.
#[derive(Default)]
pub(crate) struct StackCache {
    /// Released stacks, hottest last.
    stacks: std::cell::RefCell<Vec<Stack>>,
    /// Reservations taken from the pool and not yet given to a spawn.
    credits: std::cell::Cell<usize>,
    /// Promises kept from `stacks`, still counted in the pool's `reserved`.
    owed: std::cell::Cell<usize>,
}

/// The first batch a pool maps, and the most one maps at a time.
const MIN_BATCH: usize = 16;
const MAX_BATCH: usize = 1024;
/// Released stacks beyond the pool's bound are unmapped this many at a time.
const TRIM_BATCH: usize = 64;
/// A thread's cache takes this many reservations from the pool at a time, and pays back
/// the ones it kept from its own stacks this many at a time.
const CREDIT_BATCH: usize = 32;
/// Stacks a thread's cache holds at most; beyond, its colder half goes to the pool.
const CACHE_MAX: usize = 64;

impl StackPool {
    pub(crate) fn new(usable: usize, max_warm: usize) -> StackPool {
        StackPool {
            usable,
            max_warm,
            inner: Mutex::new(Pool {
                warm: std::collections::VecDeque::new(),
                fresh: Vec::new(),
                reserved: 0,
                mapped: 0,
            }),
        }
    }

    /// Promises a stack to a spawned actor, mapping a batch (or taking stacks from the
    /// process-wide cache) if the pool has none spare.
    pub(crate) fn reserve(&self) -> io::Result<()> {
        self.reserve_n(1)
    }

    /// Promises `n` stacks.
    fn reserve_n(&self, n: usize) -> io::Result<()> {
        loop {
            let (want, need) = {
                let mut p = self.inner.lock();
                let spare = p.warm.len() + p.fresh.len() - p.reserved;
                if spare >= n {
                    p.reserved += n;
                    return Ok(());
                }
                (p.mapped.clamp(MIN_BATCH, MAX_BATCH).max(n), n - spare)
            };
            // Stacks other runtimes left first; a batch is mapped only if they are too few
            // (a runtime's first reservation must not map a batch it does not need).
            let cached = take_cached(Stack::mapped_len(self.usable), want);
            let batch = if cached.len() < need { Some(Stack::new_batch(self.usable, want)) } else { None };
            let mut p = self.inner.lock();
            // Cached stacks go to the cold end: the top of `warm` stays the most recently
            // released, hottest stack, which `take_local` hands out first.
            for s in cached {
                p.warm.push_front(s);
            }
            if let Some(batch) = batch {
                let batch = batch?;
                p.mapped += batch.len();
                p.fresh.extend(batch);
            }
            // Others may have reserved meanwhile: look again. Each round adds at least what
            // was missing then, so only a reserver that keeps losing the race loops again.
        }
    }

    /// [`Self::reserve`] for a spawn on one of this pool's scheduler threads: from the
    /// thread's cache, which takes [`CREDIT_BATCH`] reservations at a time.
    #[inline]
    pub(crate) fn reserve_local(&self, cache: &StackCache) -> io::Result<()> {
        let credits = cache.credits.get();
        if credits > 0 {
            cache.credits.set(credits - 1);
            return Ok(());
        }
        self.refill_credits(cache)
    }

    #[cold]
    #[inline(never)]
    fn refill_credits(&self, cache: &StackCache) -> io::Result<()> {
        // A batch that cannot be mapped may still leave room for one.
        match self.reserve_n(CREDIT_BATCH) {
            Ok(()) => {
                cache.credits.set(CREDIT_BATCH - 1);
                Ok(())
            }
            Err(_) => self.reserve(),
        }
    }

    /// Takes a reserved stack (an actor's first run) on one of this pool's scheduler
    /// threads: the thread's hottest cached stack if it has one (the reservation it keeps
    /// is paid back to the pool later, [`CREDIT_BATCH`] at a time), else the pool's hottest.
    #[inline]
    pub(crate) fn take_local(&self, cache: &StackCache) -> Stack {
        let top = cache.stacks.borrow_mut().pop();
        match top {
            Some(s) => {
                let owed = cache.owed.get() + 1;
                if owed >= CREDIT_BATCH {
                    self.inner.lock().reserved -= owed;
                    cache.owed.set(0);
                } else {
                    cache.owed.set(owed);
                }
                s
            }
            None => self.take_refill(cache),
        }
    }

    #[cold]
    #[inline(never)]
    fn take_refill(&self, cache: &StackCache) -> Stack {
        let mut p = self.inner.lock();
        let owed = cache.owed.replace(0);
        debug_assert!(p.reserved > owed, "stack taken without a reservation");
        p.reserved -= 1 + owed;
        // Just the one: spare stacks taken along would sit in this cache while another
        // thread, finding the pool without warm ones, faulted in a fresh stack (measured:
        // deep_recursion 2T, 30% slower with 16 taken along).
        match p.warm.pop_back() {
            Some(s) => s,
            None => p.fresh.pop().expect("smarm: a reserved stack is always in the pool"),
        }
    }

    /// Returns a stack (an actor's end) on one of this pool's scheduler threads: onto the
    /// thread's cache; past [`CACHE_MAX`], its colder half goes to the pool, and once more
    /// than `max_warm` used stacks are spare there, its coldest are unmapped
    /// ([`TRIM_BATCH`] at a time, adjacent ones together).
    #[inline]
    pub(crate) fn put_local(&self, cache: &StackCache, stack: Stack) {
        let mut stacks = cache.stacks.borrow_mut();
        stacks.push(stack);
        if stacks.len() > CACHE_MAX {
            self.spill(&mut stacks, CACHE_MAX / 2);
        }
    }

    /// Moves the `n` coldest stacks of a cache to the pool (hottest of them on top).
    #[cold]
    #[inline(never)]
    fn spill(&self, stacks: &mut Vec<Stack>, n: usize) {
        let mut p = self.inner.lock();
        p.warm.extend(stacks.drain(..n));
        let spare = p.warm.len().saturating_sub(p.reserved);
        if spare > self.max_warm.saturating_add(TRIM_BATCH) {
            self.trim(p, spare);
        }
    }

    /// Empties a scheduler thread's cache into the pool as the thread ends: its stacks, its
    /// unused reservations and the ones it owes.
    pub(crate) fn drain(&self, cache: &StackCache) {
        let mut stacks = cache.stacks.borrow_mut();
        let n = stacks.len();
        {
            let mut p = self.inner.lock();
            p.reserved -= cache.credits.replace(0) + cache.owed.replace(0);
        }
        self.spill(&mut stacks, n);
    }

    /// Unmaps the coldest spare stacks down to `max_warm`.
    #[cold]
    #[inline(never)]
    fn trim(&self, mut p: parking_lot::MutexGuard<'_, Pool>, spare: usize) {
        // `warm` keeps at least `reserved + max_warm` stacks, so every promise still holds.
        let cold: Vec<Stack> = p.warm.drain(..spare - self.max_warm).collect();
        drop(p);
        unmap_batch(cold);
    }
}

/// Up to `want` stacks of `len` bytes from the process-wide cache.
fn take_cached(len: usize, want: usize) -> Vec<Stack> {
    let mut global = GLOBAL_WARM.lock();
    let mut taken = Vec::new();
    let mut i = global.len();
    while i > 0 && taken.len() < want {
        i -= 1;
        if global[i].len == len {
            taken.push(global.swap_remove(i));
        }
    }
    taken
}

impl Drop for StackPool {
    /// A runtime's warm stacks outlive it in the process-wide cache (bounded), so the next
    /// runtime of the process does not page-fault fresh stacks in — as glibc keeps the
    /// stacks of exited threads for new ones. Beyond the bound they are unmapped, and so is
    /// the unused part of the last batch.
    fn drop(&mut self) {
        let p = self.inner.get_mut();
        let warm = std::mem::take(&mut p.warm);
        let mut rest = std::mem::take(&mut p.fresh);
        {
            let mut global = GLOBAL_WARM.lock();
            for s in warm {
                if global.len() < GLOBAL_MAX_WARM {
                    global.push(s);
                } else {
                    rest.push(s);
                }
            }
        }
        unmap_batch(rest);
    }
}

/// Stacks kept across runtimes, at most this many (of any size).
const GLOBAL_MAX_WARM: usize = 1024;
static GLOBAL_WARM: Mutex<Vec<Stack>> = Mutex::new(Vec::new());

// ------------------------------------------------------------------------------------------
// Overflow handler
// ------------------------------------------------------------------------------------------

/// Provided by the runtime, called by the overflow handler on the faulting thread: the actor
/// whose guard page holds the faulting address, among those whose stacks this thread may
/// be using (see the module doc), as `(pid_index, pid_generation, usable_bytes)`.
pub(crate) type GuardOwnerFn = fn(fault_addr: usize) -> Option<(u32, u32, usize)>;

static INSTALL: Once = Once::new();
static mut PREV_SEGV: core::mem::MaybeUninit<libc::sigaction> = core::mem::MaybeUninit::zeroed();
static mut PREV_BUS: core::mem::MaybeUninit<libc::sigaction> = core::mem::MaybeUninit::zeroed();
static mut GUARD_OWNER: Option<GuardOwnerFn> = None;

/// Installs the SIGSEGV/SIGBUS handler once per process.
pub(crate) fn install_overflow_handler(owner: GuardOwnerFn) {
    INSTALL.call_once(|| {
        // SAFETY: runs once, before any handler that reads these statics is installed; the
        // handler only reads them after `sigaction` below publishes it.
        unsafe {
            GUARD_OWNER = Some(owner);
            let mut sa: libc::sigaction = core::mem::zeroed();
            sa.sa_sigaction = overflow_handler as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(libc::SIGSEGV, &sa, (&raw mut PREV_SEGV).cast());
            libc::sigaction(libc::SIGBUS, &sa, (&raw mut PREV_BUS).cast());
        }
    });
}

extern "C" fn overflow_handler(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    // SAFETY: GUARD_OWNER is written once before the handler is installed.
    let owner = unsafe { GUARD_OWNER };
    if let Some((idx, gen, usable)) = owner.and_then(|f| f(addr)) {
        report_overflow(idx, gen, usable / 1024);
    }
    // Not ours: hand the fault to whoever was installed before us.
    // SAFETY: PREV_* were filled by the sigaction calls that installed this handler.
    let prev = unsafe {
        if sig == libc::SIGBUS {
            (&raw const PREV_BUS).read().assume_init()
        } else {
            (&raw const PREV_SEGV).read().assume_init()
        }
    };
    if prev.sa_sigaction == libc::SIG_DFL || prev.sa_sigaction == libc::SIG_IGN {
        // Restore the default action and return: the faulting instruction runs again and
        // the kernel applies the default (core dump), exactly as if we were never here.
        // SAFETY: resetting a signal disposition is async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = core::mem::zeroed();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, core::ptr::null_mut());
        }
    } else if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous handler was installed for SA_SIGINFO with this signature.
        unsafe {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                core::mem::transmute(prev.sa_sigaction);
            f(sig, info, ctx);
        }
    } else {
        // SAFETY: the previous handler was installed without SA_SIGINFO.
        unsafe {
            let f: extern "C" fn(libc::c_int) = core::mem::transmute(prev.sa_sigaction);
            f(sig);
        }
    }
}

/// Prints the overflow message with async-signal-safe calls only, then aborts.
fn report_overflow(idx: u32, gen: u32, kib: usize) -> ! {
    let mut buf = [0u8; 128];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        let k = bytes.len().min(buf.len() - n);
        buf[n..n + k].copy_from_slice(&bytes[..k]);
        n += k;
    };
    let mut num = [0u8; 20];
    put(b"smarm: actor <0.");
    put(fmt_u64(idx as u64, &mut num));
    put(b".");
    put(fmt_u64(gen as u64, &mut num));
    put(b"> overflowed its ");
    put(fmt_u64(kib as u64, &mut num));
    put(b" KiB stack\n");
    // SAFETY: write(2) and abort(3) are async-signal-safe; `buf[..n]` is initialised.
    unsafe {
        libc::write(2, buf.as_ptr() as *const libc::c_void, n);
        libc::abort();
    }
}

fn fmt_u64(mut v: u64, out: &mut [u8; 20]) -> &[u8] {
    let mut i = out.len();
    loop {
        i -= 1;
        out[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    &out[i..]
}

/// An alternate signal stack for one scheduler thread, so the overflow handler can run
/// when the actor stack itself is exhausted. Installed only if the thread has none
/// (std installs one on threads it spawns when its own handler is active); removed on drop.
pub(crate) struct AltStack {
    mapping: Option<(*mut libc::c_void, usize)>,
}

impl AltStack {
    const SIZE: usize = 64 * 1024;

    pub(crate) fn ensure() -> AltStack {
        // SAFETY: querying the current thread's alternate stack.
        unsafe {
            let mut old: libc::stack_t = core::mem::zeroed();
            libc::sigaltstack(core::ptr::null(), &mut old);
            if old.ss_flags & libc::SS_DISABLE == 0 {
                return AltStack { mapping: None };
            }
            let p = libc::mmap(
                core::ptr::null_mut(),
                Self::SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            if p == libc::MAP_FAILED {
                return AltStack { mapping: None }; // no altstack: an overflow then dies of SIGSEGV
            }
            let st = libc::stack_t { ss_sp: p, ss_flags: 0, ss_size: Self::SIZE };
            libc::sigaltstack(&st, core::ptr::null_mut());
            AltStack { mapping: Some((p, Self::SIZE)) }
        }
    }
}

impl Drop for AltStack {
    fn drop(&mut self) {
        if let Some((p, len)) = self.mapping {
            // SAFETY: we installed this altstack on this thread (AltStack is !Send because of
            // the raw pointer) and we are not running on it; disable it, then unmap it.
            unsafe {
                let st = libc::stack_t { ss_sp: core::ptr::null_mut(), ss_flags: libc::SS_DISABLE, ss_size: 0 };
                libc::sigaltstack(&st, core::ptr::null_mut());
                libc::munmap(p, len);
            }
        }
    }
}

impl Stack {
    /// Gives up ownership, returning `(base, len)` for storage in a zero-initialisable
    /// control block. `(0, 0)` is never a valid stack.
    pub(crate) fn into_raw(self) -> (usize, usize) {
        let me = core::mem::ManuallyDrop::new(self);
        (me.base as usize, me.len)
    }

    /// Re-owns a stack given up with [`Stack::into_raw`].
    ///
    /// # Safety
    /// `(base, len)` must come from `into_raw` and not have been re-owned since.
    pub(crate) unsafe fn from_raw(base: usize, len: usize) -> Stack {
        Stack { base: base as *mut u8, len }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether any page of `[addr, addr + len)` is mapped (`msync` fails with ENOMEM on an
    /// unmapped range).
    fn mapped(addr: usize, len: usize) -> bool {
        // SAFETY: msync only inspects the mappings of the range; MS_ASYNC on anonymous
        // memory does nothing else.
        unsafe { libc::msync(addr as *mut libc::c_void, len, libc::MS_ASYNC) == 0 }
    }

    /// Touches `addr` in a forked child; true if the child died of SIGSEGV or SIGBUS.
    fn faults_in_child(addr: usize) -> bool {
        // SAFETY: the child only writes one byte and exits without running any Rust code
        // that could take a lock another thread of the test harness held at the fork.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0, "fork failed");
            if pid == 0 {
                core::ptr::write_volatile(addr as *mut u8, 1);
                libc::_exit(0);
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            libc::WIFSIGNALED(status) && matches!(libc::WTERMSIG(status), libc::SIGSEGV | libc::SIGBUS)
        }
    }

    #[test]
    fn every_stack_of_a_batch_is_guarded_and_usable() {
        let stacks = Stack::new_batch(16 * 1024, 40).unwrap();
        assert_eq!(stacks.len(), 40);
        for pair in stacks.windows(2) {
            assert_eq!(
                pair[0].base as usize + pair[0].len,
                pair[1].base as usize,
                "a batch is one mapping, side by side"
            );
        }
        for s in [&stacks[0], &stacks[17], &stacks[39]] {
            // The usable part takes writes; its lowest byte sits right above the guard.
            let low = s.base as usize + GUARD_BYTES;
            // SAFETY: the usable part of our own stack.
            unsafe {
                core::ptr::write_volatile(low as *mut u8, 7);
                core::ptr::write_volatile(s.top().sub(1), 7);
            }
            assert!(faults_in_child(low - 1), "the guard page below stack at {:#x} is not guarded", s.base as usize);
        }
        assert!(!faults_in_child(stacks[5].base as usize + GUARD_BYTES));
    }

    #[test]
    fn dropping_one_stack_of_a_batch_unmaps_only_it() {
        let mut stacks = Stack::new_batch(16 * 1024, 3).unwrap();
        let mid = stacks.remove(1);
        let (base, len) = (mid.base as usize, mid.len);
        drop(mid);
        assert!(!mapped(base, len));
        assert!(mapped(stacks[0].base as usize, stacks[0].len));
        assert!(mapped(stacks[1].base as usize, stacks[1].len));
    }

    #[test]
    fn unmap_batch_unmaps_adjacent_and_scattered_stacks() {
        let mut stacks = Stack::new_batch(16 * 1024, 6).unwrap();
        let keep = stacks.remove(3);
        let ranges: Vec<(usize, usize)> = stacks.iter().map(|s| (s.base as usize, s.len)).collect();
        stacks.reverse(); // unsorted input
        unmap_batch(stacks);
        for (base, len) in ranges {
            assert!(!mapped(base, len), "stack at {base:#x} still mapped");
        }
        assert!(mapped(keep.base as usize, keep.len));
    }

    #[test]
    fn a_pool_maps_in_growing_batches_and_trims_released_stacks_beyond_its_bound() {
        let pool = StackPool::new(16 * 1024, 4);
        for _ in 0..MIN_BATCH {
            pool.reserve().unwrap();
        }
        assert_eq!(pool.inner.lock().mapped, MIN_BATCH, "one batch serves the first {MIN_BATCH} reservations");
        pool.reserve().unwrap();
        assert_eq!(pool.inner.lock().mapped, 2 * MIN_BATCH, "the next batch is as large as all before it");
        let n = 2 * MIN_BATCH + 70;
        for _ in MIN_BATCH + 1..n {
            pool.reserve().unwrap();
        }
        // The actors run and end on a thread whose cache starts empty and is never drained
        // here: what it spills past CACHE_MAX reaches the pool, which trims.
        let cache = StackCache::default();
        let taken: Vec<Stack> = (0..n).map(|_| pool.take_local(&cache)).collect();
        let ranges: Vec<(usize, usize)> = taken.iter().map(|s| (s.base as usize, s.len)).collect();
        for s in taken {
            pool.put_local(&cache, s);
        }
        assert!(cache.stacks.borrow().len() <= CACHE_MAX);
        assert_eq!(cache.stacks.borrow().last().map(|s| s.base as usize), Some(ranges[n - 1].0), "hottest on top");
        pool.drain(&cache);
        // Released beyond 4 + 64 spare: the coldest (first released) are unmapped, the 4
        // hottest stay.
        let p = pool.inner.lock();
        assert_eq!(p.reserved, 0, "every promise was kept and paid back");
        assert!(p.warm.len() <= 4 + TRIM_BATCH, "{} warm stacks kept", p.warm.len());
        assert!(!mapped(ranges[0].0, ranges[0].1), "the first released stack is still mapped");
        let last = ranges[n - 1];
        assert!(mapped(last.0, last.1), "the hottest stack was unmapped");
        assert_eq!(p.warm.back().map(|s| s.base as usize), Some(last.0));
    }

    /// (Each pool test uses a stack size of its own: the process-wide cache hands a pool
    /// stacks of its size that other tests' pools left, which `mapped` does not count.)
    ///
    /// A spawner on one thread, its actors' first runs and ends on another: the pool's count
    /// of promises is never too low (no first run finds the pool empty, nothing is mapped beyond
    /// what the promises in flight and the caches' bounds need), and draining both caches
    /// returns it to zero.
    #[test]
    fn caches_on_two_threads_keep_the_pools_promises() {
        let pool = StackPool::new(20 * 1024, usize::MAX);
        let spawner = StackCache::default();
        let runner = StackCache::default();
        let mut in_flight = 0usize;
        for round in 0..200usize {
            // Bursts of different sizes, some first runs left for later.
            let burst = 1 + round * 7 % 50;
            for _ in 0..burst {
                pool.reserve_local(&spawner).unwrap();
                in_flight += 1;
            }
            let run = if round % 3 == 0 { in_flight } else { in_flight / 2 };
            let taken: Vec<Stack> = (0..run).map(|_| pool.take_local(&runner)).collect();
            in_flight -= run;
            for s in taken {
                pool.put_local(&runner, s);
            }
            let p = pool.inner.lock();
            assert!(p.warm.len() + p.fresh.len() >= p.reserved, "the pool can keep every promise it counts");
        }
        let taken: Vec<Stack> = (0..in_flight).map(|_| pool.take_local(&runner)).collect();
        for s in taken {
            pool.put_local(&runner, s);
        }
        pool.drain(&spawner);
        pool.drain(&runner);
        let p = pool.inner.lock();
        assert_eq!(p.reserved, 0);
        assert_eq!(p.warm.len() + p.fresh.len(), p.mapped, "every mapped stack is back in the pool");
        // At most ~343 actors in flight at once (bursts up to 50 on top of a halved backlog),
        // plus one batch of credits and a full cache: batches double, so at most twice that.
        assert!(p.mapped <= 2 * (400 + CREDIT_BATCH + CACHE_MAX), "{} stacks mapped", p.mapped);
    }

    /// A thread that only takes (a consumer of another thread's spawns) pays its kept
    /// promises back, so the pool's spare count is right after every CREDIT_BATCH takes.
    #[test]
    fn kept_promises_are_paid_back_in_batches() {
        let pool = StackPool::new(24 * 1024, usize::MAX);
        let runner = StackCache::default();
        for _ in 0..MIN_BATCH {
            pool.reserve().unwrap();
        }
        let first = pool.take_local(&runner);
        assert_eq!(runner.stacks.borrow().len(), 0, "a first run takes one stack from the pool, no more");
        pool.put_local(&runner, first);
        for _ in 1..MIN_BATCH {
            let s = pool.take_local(&runner);
            pool.put_local(&runner, s);
        }
        // MIN_BATCH - 1 promises kept from the cache: owed, not yet paid.
        assert_eq!(runner.owed.get(), MIN_BATCH - 1);
        assert_eq!(pool.inner.lock().reserved, MIN_BATCH - 1);
        for _ in 0..CREDIT_BATCH {
            pool.reserve().unwrap();
            let s = pool.take_local(&runner);
            pool.put_local(&runner, s);
        }
        assert!(runner.owed.get() < CREDIT_BATCH);
        assert_eq!(pool.inner.lock().reserved, runner.owed.get());
    }
}
