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
        let len = Stack::mapped_len(usable);
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing; no
        // existing memory is affected.
        let base = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(map_error(io::Error::last_os_error(), "mmap"));
        }
        let stack = Stack { base: base as *mut u8, len };
        install_guard(stack.base)?; // on error `stack` is dropped and unmapped
        Ok(stack)
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
/// Spawning *reserves* a stack (mapping one into the pool if none is spare, so a failing
/// `mmap` is the spawner's error) and the actor *takes* one at its first run: the most
/// recently released one, whose pages are resident and likely still in cache. So 100 actors
/// spawned at once and run one after another on one thread all run on the same hot stack,
/// instead of streaming through 100 cold ones.
pub(crate) struct StackPool {
    usable: usize,
    max_warm: usize,
    /// Released stacks (LIFO) and how many of them are promised to spawned actors that have
    /// not run yet.
    warm: Mutex<(std::collections::VecDeque<Stack>, usize)>,
}

impl StackPool {
    pub(crate) fn new(usable: usize, max_warm: usize) -> StackPool {
        StackPool { usable, max_warm, warm: Mutex::new((std::collections::VecDeque::new(), 0)) }
    }

    /// Promises a stack to a spawned actor, mapping one (or taking one from the process-wide
    /// cache) if the pool has none spare.
    pub(crate) fn reserve(&self) -> io::Result<()> {
        {
            let mut w = self.warm.lock();
            if w.0.len() > w.1 {
                w.1 += 1;
                return Ok(());
            }
        }
        let stack = self.fresh()?;
        let mut w = self.warm.lock();
        // Cold (fresh or cached) stacks go to the bottom: the top of the pool stays the most
        // recently released, hottest stack, which `take_reserved` hands out first.
        w.0.push_front(stack);
        w.1 += 1;
        Ok(())
    }

    /// Takes a reserved stack (an actor's first run).
    pub(crate) fn take_reserved(&self) -> Stack {
        let mut w = self.warm.lock();
        debug_assert!(w.1 > 0, "stack taken without a reservation");
        w.1 -= 1;
        w.0.pop_back().expect("smarm: a reserved stack is always in the pool")
    }

    fn fresh(&self) -> io::Result<Stack> {
        let len = Stack::mapped_len(self.usable);
        {
            let mut global = GLOBAL_WARM.lock();
            if let Some(i) = global.iter().rposition(|s| s.len == len) {
                return Ok(global.swap_remove(i));
            }
        }
        Stack::new(self.usable)
    }

    /// Returns a stack; beyond `max_warm` spare stacks it is unmapped.
    pub(crate) fn put(&self, stack: Stack) {
        let mut w = self.warm.lock();
        if w.0.len() - w.1 < self.max_warm {
            w.0.push_back(stack);
            return;
        }
        drop(w);
        drop(stack);
    }
}

impl Drop for StackPool {
    /// A runtime's warm stacks outlive it in the process-wide cache (bounded), so the next
    /// runtime of the process does not page-fault fresh stacks in — as glibc keeps the
    /// stacks of exited threads for new ones. Beyond the bound they are unmapped.
    fn drop(&mut self) {
        let warm = std::mem::take(&mut self.warm.lock().0);
        let mut global = GLOBAL_WARM.lock();
        for s in warm {
            if global.len() < GLOBAL_MAX_WARM {
                global.push(s);
            }
        }
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
