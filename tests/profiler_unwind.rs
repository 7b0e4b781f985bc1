//! A sampling profiler's view of the context switch. `setitimer(ITIMER_PROF)` fires SIGPROF
//! every 50 us of CPU time (in practice every scheduler tick) while actors yield and hand
//! off on two scheduler threads, and the handler walks the interrupted stack with libgcc's
//! `_Unwind_Backtrace`, as a profiler that calls `backtrace(3)` from its handler does.
//! Wherever the signal lands, including inside the switch routines after the stack pointer
//! has moved to the other context, the unwind info must describe the frame exactly:
//!
//! - every walk ends within `MAX_FRAMES` frames, reports only addresses in mapped code, and
//!   nothing faults;
//! - a walk interrupted inside a switch routine continues at a return address that follows
//!   a call to a switch routine (the switch's caller, or the resumed context's suspended
//!   switch call), or at the entry of the fresh-stack trampoline: that is the frame the CFI
//!   must name at every instruction of the routine.
//!
//! The sampling runs in a child process (this test binary re-executed with
//! `SMARM_PROFILER_CHILD=1`, selecting the `#[ignore]`d child test with `--exact`): a walk
//! that follows a garbage return address may fault inside the signal handler, which must
//! fail this test, not kill the test harness.

use std::ffi::c_void;
use std::ops::Range;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::OnceLock;

use smarm::Runtime;

const CHILD_ENV: &str = "SMARM_PROFILER_CHILD";

/// A walk that reaches this many frames is counted as unbounded and stopped.
const MAX_FRAMES: usize = 256;
/// Samples that must land in the switch routines' tails (after the stack switch) before the
/// workload stops. About 2% of the samples of this workload land in a tail.
const TAIL_SAMPLES_WANTED: usize = 25;
/// Upper bound on each actor's rounds, in case samples never come.
const MAX_ROUNDS: u64 = 50_000_000;
/// The profiling timer's period, in microseconds of process CPU time. The kernel expires
/// CPU-time timers on its tick, so the real rate is at most one sample per tick.
const SAMPLE_PERIOD_US: libc::suseconds_t = 50;

// ------------------------------------------------------------------------------------------
// libgcc's unwinder (std links libgcc_s on linux-gnu)
// ------------------------------------------------------------------------------------------

#[repr(C)]
struct UnwindContext {
    _opaque: [u8; 0],
}

/// `_Unwind_Reason_Code` values used here.
const URC_NO_REASON: i32 = 0;
const URC_NORMAL_STOP: i32 = 4;

type TraceFn = extern "C" fn(ctx: *mut UnwindContext, arg: *mut c_void) -> i32;

#[link(name = "gcc_s")]
extern "C" {
    fn _Unwind_Backtrace(trace: TraceFn, arg: *mut c_void) -> i32;
    fn _Unwind_GetIPInfo(ctx: *mut UnwindContext, ip_before_insn: *mut libc::c_int) -> usize;
}

// ------------------------------------------------------------------------------------------
// What the handler records (atomics only: it runs in signal context)
// ------------------------------------------------------------------------------------------

static SAMPLES: AtomicUsize = AtomicUsize::new(0);
/// Samples whose interrupted instruction lies in a switch routine, and in its tail.
static IN_SWITCH: AtomicUsize = AtomicUsize::new(0);
static IN_TAIL: AtomicUsize = AtomicUsize::new(0);
/// Walks stopped at `MAX_FRAMES`.
static BOUND_HIT: AtomicUsize = AtomicUsize::new(0);
/// Walks that reported a frame whose instruction pointer is in no executable mapping.
static OUTSIDE_CODE: AtomicUsize = AtomicUsize::new(0);
/// Walks interrupted in a switch routine whose next frame is not a switch call site.
static WRONG_CALLER: AtomicUsize = AtomicUsize::new(0);
/// Walks that never reached the interrupted frame (no signal frame found).
static NO_SIGNAL_FRAME: AtomicUsize = AtomicUsize::new(0);
/// The first wrong walk: offset of the interrupted instruction in its routine (+1, 0 for
/// none) and the frame the unwinder produced after it.
static FIRST_WRONG: [AtomicUsize; 2] = [AtomicUsize::new(0), AtomicUsize::new(0)];
/// Set once the workload has sampled enough; the actors then stop.
static ENOUGH: AtomicBool = AtomicBool::new(false);

/// The process's mappings and the switch routines, computed before the handler is
/// installed and only read inside it (`OnceLock::get` is an atomic load).
struct Layout {
    /// Executable `PT_LOAD` segments of the program and its shared objects (vDSO included).
    code: Vec<Range<usize>>,
    /// Every `PT_LOAD` segment (where a call's GOT slot may lie).
    mapped: Vec<Range<usize>>,
    switches: Vec<smarm::__private::AsmRoutine>,
    /// The fake return address of a fresh stack (the trampoline's entry).
    trampoline_entry: usize,
}
static LAYOUT: OnceLock<Layout> = OnceLock::new();

fn within(ranges: &[Range<usize>], r: Range<usize>) -> bool {
    ranges.iter().any(|m| m.start <= r.start && r.end <= m.end)
}

fn segments() -> (Vec<Range<usize>>, Vec<Range<usize>>) {
    unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut c_void) -> libc::c_int {
        // SAFETY: dl_iterate_phdr passes a valid info for the duration of the call; `data`
        // is the pair of Vecs passed below.
        unsafe {
            let (code, mapped) = &mut *(data as *mut (Vec<Range<usize>>, Vec<Range<usize>>));
            let info = &*info;
            for i in 0..info.dlpi_phnum as usize {
                let ph = &*info.dlpi_phdr.add(i);
                if ph.p_type == libc::PT_LOAD {
                    let lo = info.dlpi_addr as usize + ph.p_vaddr as usize;
                    let r = lo..lo + ph.p_memsz as usize;
                    if ph.p_flags & libc::PF_X != 0 {
                        code.push(r.clone());
                    }
                    mapped.push(r);
                }
            }
        }
        0
    }
    let mut out: (Vec<Range<usize>>, Vec<Range<usize>>) = (Vec::new(), Vec::new());
    // SAFETY: the callback matches dl_iterate_phdr's contract and only touches `out`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut _ as *mut c_void) };
    assert!(!out.0.is_empty(), "dl_iterate_phdr found no executable segment");
    out
}

/// True if `ra` is where a suspended switch call resumes: it follows a call to one of the
/// switch routines (`call rel32`, or `call [rip + disp32]` through a GOT slot, which is how
/// rustc calls them from a position-independent executable), or it is the fake return
/// address of a fresh stack.
fn resumes_a_switch_call(layout: &Layout, ra: usize) -> bool {
    if ra == layout.trampoline_entry {
        return true;
    }
    let is_switch = |target: usize| layout.switches.iter().any(|r| r.code.start == target);
    // SAFETY (both reads below): the bytes lie in an executable segment, the GOT slot in a
    // mapped one; unaligned reads of plain integers.
    if ra >= 5 && within(&layout.code, ra - 5..ra) && unsafe { *((ra - 5) as *const u8) } == 0xE8 {
        let rel = unsafe { ((ra - 4) as *const i32).read_unaligned() };
        if is_switch(ra.wrapping_add_signed(rel as isize)) {
            return true;
        }
    }
    if ra >= 6 && within(&layout.code, ra - 6..ra) && unsafe { ((ra - 6) as *const [u8; 2]).read() } == [0xFF, 0x15] {
        let disp = unsafe { ((ra - 4) as *const i32).read_unaligned() };
        let slot = ra.wrapping_add_signed(disp as isize);
        if within(&layout.mapped, slot..slot + 8) && is_switch(unsafe { (slot as *const usize).read_unaligned() }) {
            return true;
        }
    }
    false
}

/// One walk's state, on the handler's stack.
struct Walk {
    frames: usize,
    /// The interrupted instruction (the first frame the unwinder marks as a signal frame).
    interrupted: Option<usize>,
    /// The frame after the interrupted one (what the CFI at the interrupted instruction
    /// says its caller is).
    caller: Option<usize>,
    outside_code: bool,
}

impl Walk {
    const fn new() -> Walk {
        Walk { frames: 0, interrupted: None, caller: None, outside_code: false }
    }
}

extern "C" fn trace_frame(ctx: *mut UnwindContext, arg: *mut c_void) -> i32 {
    // SAFETY: `arg` is the `Walk` passed to `_Unwind_Backtrace`, which calls us synchronously.
    let walk = unsafe { &mut *(arg as *mut Walk) };
    walk.frames += 1;
    if walk.frames >= MAX_FRAMES {
        return URC_NORMAL_STOP;
    }
    let mut before_insn: libc::c_int = 0;
    // SAFETY: `ctx` is the live context the unwinder passes to its trace callback.
    let ip = unsafe { _Unwind_GetIPInfo(ctx, &mut before_insn) };
    if walk.interrupted.is_some() && walk.caller.is_none() {
        walk.caller = Some(ip);
    }
    if before_insn != 0 && walk.interrupted.is_none() {
        walk.interrupted = Some(ip);
    }
    let Some(layout) = LAYOUT.get() else { return URC_NORMAL_STOP };
    // IP 0 is how libgcc reports the frame past an undefined return address (the end).
    if ip != 0 && !within(&layout.code, ip..ip + 1) {
        walk.outside_code = true;
    }
    URC_NO_REASON
}

extern "C" fn on_sigprof(_sig: libc::c_int) {
    // SAFETY: errno is a plain thread-local int; restored below for the interrupted code.
    let saved_errno = unsafe { *libc::__errno_location() };
    let mut walk = Walk::new();
    // SAFETY: libgcc's unwinder; the callback only writes `walk` and reads `LAYOUT`. No
    // actor unwinds while the timer runs, so the unwinder's own lock is free.
    unsafe { _Unwind_Backtrace(trace_frame, &mut walk as *mut Walk as *mut c_void) };
    record(&walk);
    // SAFETY: as above.
    unsafe { *libc::__errno_location() = saved_errno };
}

fn record(walk: &Walk) {
    let Some(layout) = LAYOUT.get() else { return };
    // Relaxed throughout: independent counters, read after the runtime has joined every
    // scheduler thread and the timer is disarmed.
    SAMPLES.fetch_add(1, Ordering::Relaxed);
    if walk.frames >= MAX_FRAMES {
        BOUND_HIT.fetch_add(1, Ordering::Relaxed);
    }
    if walk.outside_code {
        OUTSIDE_CODE.fetch_add(1, Ordering::Relaxed);
    }
    let Some(ip) = walk.interrupted else {
        NO_SIGNAL_FRAME.fetch_add(1, Ordering::Relaxed);
        return;
    };
    let Some(r) = layout.switches.iter().find(|r| r.code.contains(&ip)) else { return };
    IN_SWITCH.fetch_add(1, Ordering::Relaxed);
    if r.tail.is_some_and(|tail| ip >= tail) && IN_TAIL.fetch_add(1, Ordering::Relaxed) + 1 >= TAIL_SAMPLES_WANTED {
        ENOUGH.store(true, Ordering::Relaxed);
    }
    let caller = walk.caller.unwrap_or(0);
    if !resumes_a_switch_call(layout, caller) && WRONG_CALLER.fetch_add(1, Ordering::Relaxed) == 0 {
        FIRST_WRONG[0].store(ip - r.code.start + 1, Ordering::Relaxed);
        FIRST_WRONG[1].store(caller, Ordering::Relaxed);
    }
}

fn set_profiling_timer(period_us: libc::suseconds_t) {
    let tv = libc::timeval { tv_sec: 0, tv_usec: period_us };
    let it = libc::itimerval { it_interval: tv, it_value: tv };
    // SAFETY: setitimer reads a valid itimerval; a zero period disarms the timer.
    let rc = unsafe { libc::setitimer(libc::ITIMER_PROF, &it, core::ptr::null_mut()) };
    assert_eq!(rc, 0, "setitimer(ITIMER_PROF)");
}

/// Yields until enough samples landed in the switch tails (or the round bound). `ENOUGH`
/// is read Relaxed here and in the ping actor: a stop hint, nothing is read through it.
fn yielder() -> u64 {
    let mut rounds = 0u64;
    while rounds < MAX_ROUNDS && !ENOUGH.load(Ordering::Relaxed) {
        for _ in 0..256 {
            smarm::yield_now();
        }
        rounds += 256;
    }
    rounds
}

#[test]
#[ignore = "child process body of profiler_stack_walks_through_switches_are_exact"]
fn child_sample_switching_actors_with_sigprof() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let routines = smarm::__private::asm_routines();
    let trampoline_entry = routines
        .iter()
        .find(|r| r.name == "smarm_actor_trampoline")
        .map(|r| r.entry)
        .expect("the trampoline is listed");
    let switches: Vec<_> = routines.into_iter().filter(|r| r.name.starts_with("smarm_switch_to_")).collect();
    assert_eq!(switches.len(), 2);
    let (code, mapped) = segments();
    assert!(LAYOUT.set(Layout { code, mapped, switches, trampoline_entry }).is_ok());

    // A first walk outside signal context: libgcc sets up its caches here, not in the handler.
    let mut warm = Walk::new();
    // SAFETY: as in the handler.
    unsafe { _Unwind_Backtrace(trace_frame, &mut warm as *mut Walk as *mut c_void) };
    assert!(warm.frames > 1 && !warm.outside_code, "a plain walk must work ({} frames)", warm.frames);

    // SAFETY: installs a handler that only unwinds and updates atomics. SA_RESTART: the
    // scheduler's own syscalls (futex waits) restart.
    unsafe {
        let mut sa: libc::sigaction = core::mem::zeroed();
        sa.sa_sigaction = on_sigprof as *const () as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(libc::SIGPROF, &sa, core::ptr::null_mut()), 0);
    }

    let rt = Runtime::builder().threads(2).build().unwrap();
    let switches = rt
        .run(|| {
            set_profiling_timer(SAMPLE_PERIOD_US);
            // Yielders switch through the scheduler; the ping-pong pair hands the thread from
            // actor to actor (smarm_switch_to_actor called on an actor stack).
            let yielders: Vec<_> = (0..4).map(|_| smarm::spawn(yielder)).collect();
            let (to_pong, pong_rx) = smarm::channel::channel::<u64>();
            let (to_ping, ping_rx) = smarm::channel::channel::<u64>();
            let pong = smarm::spawn(move || {
                while let Ok(n) = pong_rx.recv() {
                    if to_ping.send(n + 1).is_err() {
                        break;
                    }
                }
            });
            let ping = smarm::spawn(move || {
                let mut n = 0;
                while n < MAX_ROUNDS && !ENOUGH.load(Ordering::Relaxed) {
                    to_pong.send(n).unwrap();
                    n = ping_rx.recv().unwrap();
                }
                n
            });
            let rounds: u64 = yielders.into_iter().map(|h| h.join().unwrap()).sum();
            let pings = ping.join().unwrap();
            pong.join().unwrap();
            set_profiling_timer(0);
            rounds + pings
        })
        .unwrap();

    let load = |a: &AtomicUsize| a.load(Ordering::Relaxed);
    let (samples, in_switch, in_tail) = (load(&SAMPLES), load(&IN_SWITCH), load(&IN_TAIL));
    let (bound_hit, outside, wrong) = (load(&BOUND_HIT), load(&OUTSIDE_CODE), load(&WRONG_CALLER));
    let no_signal_frame = load(&NO_SIGNAL_FRAME);
    let (wrong_at, wrong_caller) = (load(&FIRST_WRONG[0]), load(&FIRST_WRONG[1]));
    eprintln!(
        "child: {switches} yields and pings; {samples} samples, {in_switch} in switch code ({in_tail} in \
         its tails); {bound_hit} unbounded walks, {outside} through non-code addresses, {wrong} with a \
         wrong caller of the switch (first: at offset {} of its routine, caller {wrong_caller:#x}), \
         {no_signal_frame} without a signal frame",
        wrong_at.wrapping_sub(1) as isize
    );
    assert_eq!(bound_hit, 0, "walks that did not end within {MAX_FRAMES} frames");
    assert_eq!(outside, 0, "walks that reported frames outside any code mapping");
    assert_eq!(wrong, 0, "walks from inside a switch whose next frame is not a switch call site");
    assert_eq!(no_signal_frame, 0, "walks that never reached the interrupted frame");
    assert!(in_tail > 0, "no sample landed in a switch tail ({samples} samples, {in_switch} in switch code)");
}

#[test]
fn profiler_stack_walks_through_switches_are_exact() {
    let exe = std::env::current_exe().expect("path of the test binary");
    let out = Command::new(exe)
        .env(CHILD_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .args(["--exact", "child_sample_switching_actors_with_sigprof", "--ignored", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn the child test process");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "child failed: {:?} (signal {:?}); stderr:\n{stderr}",
        out.status,
        out.status.signal()
    );
    assert!(stderr.contains("child: "), "the child did not run the workload; stderr:\n{stderr}");
}
