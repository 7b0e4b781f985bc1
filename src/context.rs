//! The context switch: the only place where one stack hands the CPU to another.
//!
//! The switch itself lives in `asm/x86_64.S`; this module wraps it, lays out fresh stacks,
//! and states the thread-local rule that every actor-reachable part of smarm obeys.
//!
//! # Saved context
//!
//! A suspended context (an actor, or a scheduler thread waiting for its actor) is one
//! stack pointer. At that address:
//!
//! ```text
//!  high addresses
//!  +--------------------------+ <- saved sp + 56
//!  | return address           |    where the context resumes (`pop rcx; jmp rcx`)
//!  | rbp                      |
//!  | rbx                      |
//!  | r12                      |
//!  | r13                      |
//!  | r14                      |
//!  | r15                      | <- saved sp
//!  +--------------------------+
//!  low addresses
//! ```
//!
//! # A fresh actor stack
//!
//! [`init_stack`] writes a fake saved context at the top of a new stack, so the first
//! `switch_to_actor` "returns" into the trampoline (`smarm_actor_trampoline_entry`):
//!
//! ```text
//!  top (16-aligned, end of the mapping)
//!  top-8   trampoline entry         <- popped into rcx and jumped to; rsp becomes `top`
//!  top-16  rbp = 0
//!  top-24  rbx = entry argument     -> moved to rdi by the trampoline
//!  top-32  r12 = entry function     -> called by the trampoline
//!  top-40  r13 = 0
//!  top-48  r14 = 0
//!  top-56  r15 = 0                  <- initial saved sp
//! ```
//!
//! The trampoline's CFI marks the return address as undefined, so unwinders and debuggers
//! stop at the actor's entry function instead of walking off the top of the stack.
//!
//! Both switch directions resume the other side with `pop rcx; jmp rcx` rather than `ret`
//! (see the header of `asm/x86_64.S` for why and what it measured).
//!
//! # Unwinding through a switch
//!
//! The switch routines carry CFI that is exact at every instruction (header of
//! `asm/x86_64.S`, "Unwind info"): a profiler's signal that interrupts a switch unwinds
//! through the leaving context's frames while the registers are being pushed, and through
//! the resumed context's frames once the stack pointer has moved, ending at the
//! trampoline (an actor stack) or at the thread's own root (a scheduler stack).
//! `tests/profiler_unwind.rs` samples switching actors with `SIGPROF` and walks every
//! sample.
//!
//! # Floating-point control state
//!
//! The SysV ABI makes the MXCSR control bits and the x87 control word callee-saved, and an
//! actor that sets a rounding mode must neither leak it to the next actor nor lose it when
//! it migrates. Measured on this machine (AMD Zen 4, rdtsc ticks, `outputs/history.md`):
//! `stmxcsr` ~20, `fnstcw` ~2.5, `ldmxcsr` of a different value ~69, `fldcw` of a different
//! value ~238. Saving both on every switch would cost more than the rest of a switch pair,
//! so the control state is not part of the asm switch; the scheduler owns it:
//!
//! - every actor's control block holds its saved control state ([`FpControl`]), initially
//!   the ABI defaults;
//! - each scheduler thread tracks the control state live in its registers;
//! - before resuming an actor it loads the actor's state only if it differs from the live
//!   one (a compare; the expensive loads happen only when modes really differ);
//! - when an actor switches back and will *not* be resumed at once on the same thread, the
//!   scheduler reads the live state into the actor's control block ([`fp_control_read`])
//!   before anyone else can resume it, so a mode change survives migration;
//! - scheduler code does no floating-point arithmetic, so it is indifferent to the mode it
//!   runs under, and each scheduler thread restores its original state before it exits.
//!
//! # Running and suspended states
//!
//! While an actor runs, its scheduler thread's context is saved on the scheduler's own
//! stack and its saved sp is in the actor's control block (`sched_sp`), written by
//! `switch_to_actor` through its second argument. The actor switches back with
//! `switch_to_scheduler(sched_sp)`, which returns the actor's new saved sp to the
//! scheduler as the result of its `switch_to_actor` call. No thread-local is touched by the
//! switch itself, so an actor may be resumed by any scheduler thread.
//!
//! An actor may also switch straight to another actor ([`hand_off`], the same asm routine):
//! it saves its own sp into its control block and copies its `sched_sp` to the target
//! (which will return to that same scheduler). Every resume passes a *resume value* that
//! the target's pending switch call returns (rax); the runtime passes the resuming
//! thread's worker, so a resumed actor learns the thread it now runs on without reading a
//! thread-local (the worker records whether the resume was a hand-off, and from whom).
//!
//! # Thread-locals and migration (the rule)
//!
//! LLVM treats the address of a thread-local as a constant within a function: it may
//! compute `%fs:0` once and keep it in a callee-saved register across a call. If that call
//! blocks (it switches, directly or deeper down) and the actor resumes on another thread,
//! the function then reads and writes the *old* thread's thread-locals, even through
//! accesses written after the call. Nothing at the switch can repair an address cached in
//! a caller's frame. Whether it happens depends on the optimiser (measured without LTO: a
//! `const`-initialised `Cell` was re-read, a `RefCell<Vec<_>>`'s address was kept across
//! `yield_now`). So:
//!
//! 1. every thread-local accessor reachable from an actor stack is `#[inline(never)]`,
//!    contains a non-`pure` `asm!` barrier (so LLVM can neither inline it nor prove it
//!    side-effect free and merge two calls across a switch), and returns values, never
//!    references, so no caller holds a thread-local's address;
//! 2. the set of such thread-locals is tiny: the current worker (see `runtime::worker`),
//!    std's panic count (read through `runtime::worker::thread_panicking`) and, in ASan
//!    builds, the thread's stack bounds (`asan::thread_stack`); everything else hangs off
//!    the actor control block or the worker struct reached through the worker;
//! 3. every switch is followed by [`tls_fence`] (memory accesses stay on their side of
//!    the switch; it cannot help a cached thread-local address, which is rule 1's job);
//! 4. debug builds assert after every resume that the actor runs on the thread the
//!    scheduler handed it to;
//! 5. an actor never migrates while `std::thread::panicking()` is true on its thread
//!    (std's panic count is per thread: an unwind that parks must resume where it started);
//! 6. `[profile.reltest]` (release without LTO) runs the whole test suite, so a broken rule
//!    has an oracle.
//!
//! User code cannot follow rule 1 for `thread_local!`s it does not own (std's, those of
//! crates it calls), so the crate docs state the rule for it ("Soundness contract"): a
//! function that blocks may reach the previous thread's value through any `thread_local!`
//! access in it. Its sound alternatives are per-actor storage (`actor_local`, found afresh
//! through the accessors of rule 1 at every access, its values boxed off the control block)
//! and thread-bound actors (`spawn_pinned`: `Slot::pinned` set at the first run and kept,
//! so the actor never migrates).

use core::arch::global_asm;

global_asm!(include_str!("../asm/x86_64.S"));

extern "sysv64" {
    fn smarm_switch_to_actor(target_sp: usize, save_sp_out: *mut usize, resume_value: usize) -> usize;
    fn smarm_switch_to_scheduler(sched_sp: usize) -> usize;
    fn smarm_actor_trampoline();
    fn smarm_actor_trampoline_entry();
}

// Labels inside the asm routines (code addresses, never read or called): where each switch
// routine's tail (the part after the stack switch) starts and where the routine ends.
extern "C" {
    static smarm_switch_to_actor_tail: u8;
    static smarm_switch_to_actor_end: u8;
    static smarm_switch_to_scheduler_tail: u8;
    static smarm_switch_to_scheduler_end: u8;
    static smarm_actor_trampoline_end: u8;
}

/// Where one of the asm routines lies in memory, for tests that sample the instruction
/// pointer (a profiler's view, `tests/profiler_unwind.rs`).
#[doc(hidden)]
#[derive(Clone, Debug)]
pub struct AsmRoutine {
    /// The routine's symbol.
    pub name: &'static str,
    /// Its instructions.
    pub code: core::ops::Range<usize>,
    /// Where execution enters it: the symbol for a switch routine; for the trampoline, the
    /// fake return address of a fresh stack.
    pub entry: usize,
    /// For a switch routine, its first instruction after the stack switch.
    pub tail: Option<usize>,
}

/// The context-switch routines and the fresh-stack trampoline, with their address ranges.
#[doc(hidden)]
pub fn asm_routines() -> [AsmRoutine; 3] {
    let to_actor = smarm_switch_to_actor as *const () as usize;
    let to_sched = smarm_switch_to_scheduler as *const () as usize;
    let tramp = smarm_actor_trampoline as *const () as usize;
    let tramp_entry = smarm_actor_trampoline_entry as *const () as usize;
    // `&raw const` of an extern static takes its address without reading it.
    let (a_tail, a_end, s_tail, s_end, t_end) = (
        &raw const smarm_switch_to_actor_tail as usize,
        &raw const smarm_switch_to_actor_end as usize,
        &raw const smarm_switch_to_scheduler_tail as usize,
        &raw const smarm_switch_to_scheduler_end as usize,
        &raw const smarm_actor_trampoline_end as usize,
    );
    [
        AsmRoutine { name: "smarm_switch_to_actor", code: to_actor..a_end, entry: to_actor, tail: Some(a_tail) },
        AsmRoutine { name: "smarm_switch_to_scheduler", code: to_sched..s_end, entry: to_sched, tail: Some(s_tail) },
        AsmRoutine { name: "smarm_actor_trampoline", code: tramp..t_end, entry: tramp_entry, tail: None },
    ]
}

/// Entry function of a fresh stack: called by the trampoline with the argument given to
/// [`init_stack`] and the `resume_value` of the switch that first resumed the stack (the
/// resuming thread's worker, see "Running and suspended states"). It must never return (it
/// switches away for good instead).
pub(crate) type EntryFn = unsafe extern "sysv64" fn(arg: *mut u8, resume_value: usize) -> !;

/// Lays out the initial saved context described in the module doc and returns the saved sp.
///
/// # Safety
/// `top` must be 16-byte aligned and the end of a writable region of at least 56 bytes that
/// stays valid for as long as the context may be resumed.
pub(crate) unsafe fn init_stack(top: *mut u8, entry: EntryFn, arg: *mut u8) -> usize {
    debug_assert_eq!(top as usize % 16, 0, "stack top must be 16-byte aligned");
    let top = top as *mut u64;
    let words: [u64; 7] = [
        0,                                                         // top-56: r15
        0,                                                         // top-48: r14
        0,                                                         // top-40: r13
        entry as *const () as usize as u64,                        // top-32: r12 = entry function
        arg as u64,                                                // top-24: rbx = entry argument
        0,                                                         // top-16: rbp
        smarm_actor_trampoline_entry as *const () as usize as u64, // top-8: return address
    ];
    // SAFETY: the caller guarantees `top - 56 .. top` is writable and aligned; we write
    // exactly those seven words.
    unsafe {
        let base = top.sub(7);
        core::ptr::copy_nonoverlapping(words.as_ptr(), base, 7);
        base as usize
    }
}

/// Floating-point control state: MXCSR in the low 32 bits, x87 control word in bits 32-47.
pub(crate) type FpControl = u64;

/// The ABI's initial state: MXCSR 0x1F80 (exceptions masked, round to nearest) and x87 CW
/// 0x037F (exceptions masked, 64-bit precision, round to nearest).
pub(crate) const FP_DEFAULT: FpControl = 0x1F80 | (0x037F << 32);

/// MXCSR bits 0-5 are sticky exception flags, caller-saved per the ABI; only the rest is
/// compared and carried.
const FP_CONTROL_MASK: FpControl = 0xFFFF_FFFF_FFC0;

/// Reads the control state live in this thread's registers.
#[inline(always)]
pub(crate) fn fp_control_read() -> FpControl {
    let mut mxcsr: u32 = 0;
    let mut cw: u16 = 0;
    // SAFETY: stmxcsr/fnstcw store 4 and 2 bytes into our locals.
    unsafe {
        core::arch::asm!(
            "stmxcsr [{m}]",
            "fnstcw [{c}]",
            m = in(reg) &mut mxcsr,
            c = in(reg) &mut cw,
            options(nostack, preserves_flags)
        );
    }
    (mxcsr as u64 | ((cw as u64) << 32)) & FP_CONTROL_MASK
}

/// Makes `target` the live control state, given that `live` is. Loads only what differs.
#[inline(always)]
pub(crate) fn fp_control_switch(live: FpControl, target: FpControl) {
    let diff = (live ^ target) & FP_CONTROL_MASK;
    if diff != 0 {
        fp_control_load(diff, target);
    }
}

#[cold]
#[inline(never)]
fn fp_control_load(diff: FpControl, target: FpControl) {
    let mxcsr = target as u32;
    let cw = (target >> 32) as u16;
    if diff as u32 != 0 {
        // SAFETY: loads a control/status value that was read from MXCSR (or the ABI
        // default), so no reserved bit is set.
        unsafe { core::arch::asm!("ldmxcsr [{}]", in(reg) &mxcsr, options(nostack, readonly, preserves_flags)) };
    }
    if diff >> 32 != 0 {
        // SAFETY: loads an x87 control word read by fnstcw (or the ABI default).
        unsafe { core::arch::asm!("fldcw [{}]", in(reg) &cw, options(nostack, readonly, preserves_flags)) };
    }
}

/// Scheduler side of a switch: runs the context saved at `target_sp` until it switches
/// back, and returns that context's new saved sp. The resumed context's pending switch
/// call returns `resume_value`.
///
/// # Safety
/// `target_sp` must be a saved sp produced by [`init_stack`] or returned by a previous
/// `switch_to_actor`, not resumed since, on a stack that is still mapped. `sched_sp_out`
/// must be valid for writes and must be where the resumed context reads its scheduler's sp.
#[inline(always)]
pub(crate) unsafe fn switch_to_actor(target_sp: usize, sched_sp_out: *mut usize, resume_value: usize) -> usize {
    // SAFETY: forwarded to the caller's contract; the asm follows the SysV ABI for the
    // registers it does not save.
    let sp = unsafe { smarm_switch_to_actor(target_sp, sched_sp_out, resume_value) };
    tls_fence();
    sp
}

/// Actor-to-actor switch (a hand-off): suspends the running actor, storing its saved sp
/// through `save_sp_out`, and resumes the actor saved at `target_sp`, whose pending switch
/// call returns `resume_value`. Returns the `resume_value` of whichever context resumes the
/// caller later.
///
/// # Safety
/// As for [`switch_to_actor`] for `target_sp`; in addition the target's `sched_sp` must
/// already hold the scheduler the caller would have returned to (the target will return
/// there), and the caller must not be resumed by anyone before the target has finished the
/// caller's post-switch bookkeeping.
#[inline(always)]
pub(crate) unsafe fn hand_off(target_sp: usize, save_sp_out: *mut usize, resume_value: usize) -> usize {
    // SAFETY: forwarded to the caller's contract.
    let v = unsafe { smarm_switch_to_actor(target_sp, save_sp_out, resume_value) };
    tls_fence();
    v
}

/// Actor side of a switch: suspends the running actor and resumes its scheduler. Returns
/// when some scheduler thread (possibly another one) or a handing-off actor resumes the
/// actor, with that switch's `resume_value`.
///
/// # Safety
/// Must run on an actor stack entered through [`switch_to_actor`], with `sched_sp` the value
/// that call stored through `sched_sp_out`.
#[inline(always)]
pub(crate) unsafe fn switch_to_scheduler(sched_sp: usize) -> usize {
    // SAFETY: forwarded to the caller's contract.
    let v = unsafe { smarm_switch_to_scheduler(sched_sp) };
    tls_fence();
    v
}

/// A compiler barrier placed after every switch: an `asm!` block that is not `pure` and may
/// read and write memory, so no load or store is moved across the point where the thread
/// may have changed.
///
/// It does *not* make thread-local accesses after it safe: LLVM treats a thread-local's
/// address as a value that is constant within a function, and may compute it before the
/// barrier (before the switch) and keep it in a callee-saved register, which the barrier
/// neither clobbers nor invalidates. Rule 1 of "Thread-locals and migration" (module doc)
/// is what keeps smarm's own accesses sound; this barrier only keeps memory accesses on
/// their side of the switch.
#[inline(always)]
pub(crate) fn tls_fence() {
    // SAFETY: an empty asm block; it only constrains compiler reordering.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
}

/// Raw switch pair for `benches/switch_cost.rs`: a context that does nothing but switch
/// back, driven `rounds` times. Returns the total rdtsc ticks of the loop.
#[doc(hidden)]
pub fn raw_switch_pair_ticks(rounds: u64) -> u64 {
    struct Ping {
        sched_sp: usize,
    }
    unsafe extern "sysv64" fn bounce(arg: *mut u8, _resume_value: usize) -> ! {
        let ping = arg as *mut Ping;
        loop {
            // SAFETY: `ping` outlives the loop below (it is on the driving frame, which
            // never resumes this context after the last round), and `sched_sp` was written
            // by the switch that resumed us.
            unsafe { switch_to_scheduler((*ping).sched_sp) };
        }
    }
    let stack = crate::stack::Stack::new(64 * 1024).expect("mmap for the raw switch bench");
    let mut ping = Ping { sched_sp: 0 };
    // SAFETY: the stack top is aligned and mapped; the context is resumed only below,
    // while `stack` and `ping` are alive. After the last round it is simply abandoned
    // (it owns no resources).
    unsafe {
        let mut sp = init_stack(stack.top(), bounce, &mut ping as *mut Ping as *mut u8);
        sp = switch_to_actor(sp, &mut ping.sched_sp, 0); // first entry, not timed
        let start = rdtsc();
        for _ in 0..rounds {
            sp = switch_to_actor(sp, &mut ping.sched_sp, 0);
        }
        let end = rdtsc();
        let _ = sp;
        end - start
    }
}

/// AddressSanitizer fiber annotations (only in `-Zsanitizer=address` builds, see build.rs):
/// ASan must be told about every stack switch, or it takes the actor stack for the thread's
/// own, ignores `__asan_handle_no_return` on panics and reports stale redzones as overflows.
/// Every switch is bracketed: [`asan::leave`] with the target stack's bounds before it,
/// [`asan::arrive`] after it returns (in the resumed context).
#[cfg(smarm_asan)]
pub(crate) mod asan {
    use core::ffi::c_void;
    use std::cell::Cell;

    extern "C" {
        fn __sanitizer_start_switch_fiber(fake_stack_save: *mut *mut c_void, bottom: *const c_void, size: usize);
        fn __sanitizer_finish_switch_fiber(
            fake_stack_save: *mut c_void,
            bottom_old: *mut *const c_void,
            size_old: *mut usize,
        );
    }

    thread_local! {
        /// This OS thread's own stack (where its scheduler runs): (bottom, size).
        static THREAD_STACK: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    }

    /// The calling OS thread's stack bounds. Reached from actor stacks (every switch back
    /// to the scheduler), so it obeys the thread-local rule of the module doc: out of line,
    /// with a non-`pure` asm barrier, returning values.
    #[inline(never)]
    pub(crate) fn thread_stack() -> (usize, usize) {
        // SAFETY: an empty, non-pure asm block: LLVM must assume it has side effects, so it
        // can neither treat this function as pure nor merge two calls across a switch.
        unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
        let cached = THREAD_STACK.with(|c| c.get());
        if cached.1 != 0 {
            return cached;
        }
        // SAFETY: pthread_getattr_np fills `attr` for the calling thread, which we destroy.
        let bounds = unsafe {
            let mut attr: libc::pthread_attr_t = core::mem::zeroed();
            assert_eq!(libc::pthread_getattr_np(libc::pthread_self(), &mut attr), 0);
            let mut addr: *mut c_void = core::ptr::null_mut();
            let mut size = 0usize;
            assert_eq!(libc::pthread_attr_getstack(&attr, &mut addr, &mut size), 0);
            libc::pthread_attr_destroy(&mut attr);
            (addr as usize, size)
        };
        THREAD_STACK.with(|c| c.set(bounds));
        bounds
    }

    /// Before a switch to the stack `(bottom, size)`; `save` is the leaving context's slot
    /// (None when it will never be resumed).
    pub(crate) fn leave(save: Option<&mut *mut c_void>, (bottom, size): (usize, usize)) {
        let save = save.map_or(core::ptr::null_mut(), |s| s as *mut *mut c_void);
        // SAFETY: the documented ASan interface; the bounds are those of a mapped stack.
        unsafe { __sanitizer_start_switch_fiber(save, bottom as *const c_void, size) };
    }

    /// First thing after a switch returns (or an actor starts: `save` null).
    pub(crate) fn arrive(save: *mut c_void) {
        // SAFETY: the documented ASan interface; `save` is what `leave` stored for this context.
        unsafe { __sanitizer_finish_switch_fiber(save, core::ptr::null_mut(), core::ptr::null_mut()) };
    }
}

/// The time-stamp counter (invariant TSC on the machines smarm targets).
#[inline(always)]
pub fn rdtsc() -> u64 {
    // SAFETY: rdtsc is available on every x86_64 CPU and has no memory effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// TSC ticks per nanosecond, measured once per process (a 2 ms spin against the monotonic
/// clock on first use). The introspection reports (`info`, `profile`) convert with it.
pub(crate) fn tsc_ticks_per_ns() -> f64 {
    static RATE: std::sync::OnceLock<f64> = std::sync::OnceLock::new();
    *RATE.get_or_init(|| {
        let (t, c) = (std::time::Instant::now(), rdtsc());
        while t.elapsed() < std::time::Duration::from_millis(2) {
            core::hint::spin_loop();
        }
        rdtsc().wrapping_sub(c) as f64 / t.elapsed().as_nanos() as f64
    })
}

/// `ticks` TSC ticks as a duration (see [`tsc_ticks_per_ns`]).
pub(crate) fn tsc_duration(ticks: u64) -> std::time::Duration {
    std::time::Duration::from_nanos((ticks as f64 / tsc_ticks_per_ns()) as u64)
}
