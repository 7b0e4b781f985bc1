//! An actor that overflows its stack hits the guard page; smarm's SIGSEGV handler (on the
//! scheduler thread's alternate signal stack) names the actor and aborts. Faults that are
//! not guard-page hits are passed on and kill the process with SIGSEGV as usual.
//!
//! Each scenario runs in a child process: this test binary re-executed with
//! `SMARM_OVERFLOW_CHILD=1`, selecting one `#[ignore]`d child test with `--exact`.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use smarm::Runtime;

const CHILD_ENV: &str = "SMARM_OVERFLOW_CHILD";
/// Printed by a child just before it faults, so the parent can match the reported pid.
const PID_MARKER: &str = "child: faulting actor is ";

/// Runs one child test of this binary in a fresh process; returns its status and stderr.
fn run_child(test_name: &str) -> (ExitStatus, String) {
    let exe = std::env::current_exe().expect("path of the test binary");
    let out = Command::new(exe)
        .env(CHILD_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .args(["--exact", test_name, "--ignored", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .output()
        .expect("spawn the child test process");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// True in the child process. Child tests return at once otherwise, so running them by
/// hand (`--ignored`) never crashes the test binary.
fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// The child is expected to die of a signal: do not leave core files behind.
fn disable_core_dumps() {
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads a valid rlimit struct; lowering RLIMIT_CORE only affects
    // whether this (child) process dumps core.
    let rc = unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) };
    assert_eq!(rc, 0, "setrlimit(RLIMIT_CORE, 0)");
}

/// Recurses until the stack runs out: every frame holds a 1 KiB buffer that escapes through
/// `black_box`, and uses the recursive result afterwards, so the frames can be neither
/// elided nor turned into a loop.
#[inline(never)]
fn recurse_without_bound(depth: u64) -> u64 {
    let mut buf = [0u8; 1024];
    buf[(depth % 1024) as usize] = depth as u8;
    std::hint::black_box(&mut buf);
    if depth == u64::MAX {
        return 0; // unreachable in practice; keeps the recursion conditional for rustc
    }
    let r = recurse_without_bound(depth + 1);
    r.wrapping_add(u64::from(buf[(depth % 1024) as usize]))
}

/// The pid the child printed before faulting.
fn reported_pid(stderr: &str) -> &str {
    let line = stderr
        .lines()
        .find_map(|l| l.strip_prefix(PID_MARKER))
        .unwrap_or_else(|| panic!("the child did not reach the faulting actor; stderr:\n{stderr}"));
    line.trim()
}

#[test]
#[ignore = "child process body of actor_stack_overflow_is_reported_and_aborts"]
fn child_root_actor_overflows_its_stack() {
    if !in_child() {
        return;
    }
    disable_core_dumps();
    let rt = Runtime::builder().threads(1).stack_size(64 * 1024).build().unwrap();
    let r = rt.run(|| {
        eprintln!("{PID_MARKER}{}", smarm::current_pid());
        recurse_without_bound(0)
    });
    eprintln!("child: the runtime returned after an unbounded recursion: {r:?}");
}

#[test]
fn actor_stack_overflow_is_reported_and_aborts() {
    let (status, stderr) = run_child("child_root_actor_overflows_its_stack");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "child status {status:?}; stderr:\n{stderr}");
    assert!(stderr.contains("smarm: actor <0."), "stderr:\n{stderr}");
    assert!(stderr.contains("overflowed its 64 KiB stack"), "stderr:\n{stderr}");
    let pid = reported_pid(&stderr);
    let want = format!("smarm: actor {pid} overflowed its 64 KiB stack\n");
    assert!(stderr.contains(&want), "expected {want:?} naming the faulting actor; stderr:\n{stderr}");
}

#[test]
#[ignore = "child process body of overflow_of_migrated_actor_on_multithreaded_runtime_is_reported"]
fn child_spawned_actor_overflows_after_switches() {
    if !in_child() {
        return;
    }
    disable_core_dumps();
    let rt = Runtime::builder().threads(2).stack_size(64 * 1024).build().unwrap();
    let r = rt.run(|| {
        // Siblings that keep both threads busy, so the faulting actor is switched and may
        // run on either scheduler thread (each has its own alternate signal stack).
        let _siblings: Vec<_> = (0..3)
            .map(|_| {
                smarm::spawn(|| {
                    for _ in 0..100_000 {
                        smarm::yield_now();
                    }
                })
            })
            .collect();
        let h = smarm::spawn(|| {
            for _ in 0..1_000 {
                smarm::yield_now();
            }
            eprintln!("{PID_MARKER}{} (on scheduler thread {:?})", smarm::current_pid(), smarm::current_thread_index());
            recurse_without_bound(0)
        });
        h.join()
    });
    eprintln!("child: the runtime returned after an unbounded recursion: {r:?}");
}

#[test]
fn overflow_of_migrated_actor_on_multithreaded_runtime_is_reported() {
    let (status, stderr) = run_child("child_spawned_actor_overflows_after_switches");
    assert_eq!(status.signal(), Some(libc::SIGABRT), "child status {status:?}; stderr:\n{stderr}");
    let pid = reported_pid(&stderr);
    let pid = pid.split_whitespace().next().expect("a pid");
    assert_ne!(pid, "<0.0.1>", "the faulting actor is not the root");
    let want = format!("smarm: actor {pid} overflowed its 64 KiB stack\n");
    assert!(stderr.contains(&want), "expected {want:?} naming the faulting actor; stderr:\n{stderr}");
}

#[test]
#[ignore = "child process body of null_pointer_write_in_actor_is_not_reported_as_overflow"]
fn child_actor_writes_near_null() {
    if !in_child() {
        return;
    }
    disable_core_dumps();
    let rt = Runtime::builder().threads(1).stack_size(64 * 1024).build().unwrap();
    let r = rt.run(|| {
        eprintln!("{PID_MARKER}{}", smarm::current_pid());
        // SAFETY: none; this is a deliberate write to an unmapped address (page 0), in a
        // child process that is meant to die of it: it checks how the runtime's fault
        // handler treats a fault outside any guard page.
        unsafe { std::ptr::write_volatile(std::hint::black_box(8usize) as *mut u8, 1) };
    });
    eprintln!("child: the runtime returned after a write to address 8: {r:?}");
}

#[test]
fn null_pointer_write_in_actor_is_not_reported_as_overflow() {
    let (status, stderr) = run_child("child_actor_writes_near_null");
    reported_pid(&stderr); // the child got as far as the faulting write
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "child status {status:?}; stderr:\n{stderr}");
    assert!(!stderr.contains("overflowed"), "a wild write was reported as a stack overflow; stderr:\n{stderr}");
}

// ------------------------------------------------------------------------------------------
// An overflow inside a hand-off. A parking actor that hands its thread to the actor in the
// wake slot names that actor as the thread's running one before it switches; the switch's
// own pushes (the parking actor's last writes to its stack) follow. An overflow there must
// still be reported as the parking actor's.
// ------------------------------------------------------------------------------------------

/// Written over the free part of an actor's stack to see how deep a call reaches.
const PATTERN: usize = 0x5A5A_A5A5_DEAD_BEEF;
const HANDOFF_STACK: usize = 64 * 1024;

/// Runs `body` with the stack pointer moved down to `sp` (16-aligned) on the current
/// stack, then moves it back. `body` may park: the actor's saved context is then below `sp`.
#[inline(never)]
fn with_stack_pointer_at(sp: usize, body: &mut dyn FnMut()) {
    extern "C" fn run(body: *mut &mut dyn FnMut()) {
        // SAFETY: `body` points to the reference passed below, alive for the whole call.
        unsafe { (*body)() }
    }
    assert_eq!(sp % 16, 0, "the ABI wants rsp 16-aligned before a call");
    let mut body = body;
    // SAFETY: `sp` lies in the free part of this actor's stack, below our frames (the test
    // may place it so that `body`'s deepest write hits the guard page, which is the point);
    // r12 (callee-saved) keeps the real stack pointer across the call and restores it; `run`
    // follows the C ABI and `clobber_abi` tells the compiler what it may clobber.
    unsafe {
        core::arch::asm!(
            "mov r12, rsp",
            "mov rsp, {sp}",
            "call {run}",
            "mov rsp, r12",
            sp = in(reg) sp,
            run = in(reg) run as extern "C" fn(*mut &mut dyn FnMut()),
            in("rdi") &mut body as *mut &mut dyn FnMut(),
            out("r12") _,
            clobber_abi("C"),
        );
    }
}

/// The lowest usable address of the calling actor's stack. The trampoline's `call` left its
/// return address (the address of its final `ud2`) in the top word of every actor stack.
fn own_stack_bottom(usable: usize) -> usize {
    let tramp = smarm::__private::asm_routines()
        .into_iter()
        .find(|r| r.name == "smarm_actor_trampoline")
        .expect("the trampoline is listed");
    let ud2 = tramp.code.end - 2;
    let here = 0usize;
    let mut p = std::hint::black_box(&here) as *const usize as usize;
    let limit = p + 16 * 1024;
    // SAFETY: reads words of our own stack from this frame up to its top, where the scan
    // stops; the limit keeps a failed search within the stack (64 KiB).
    while p < limit && unsafe { (p as *const usize).read() } != ud2 {
        p += 8;
    }
    assert!(p < limit, "the trampoline's return address is not within 16 KiB above this frame");
    let top = p + 8;
    assert_eq!(top % 4096, 0, "an actor stack ends on a page boundary");
    top - usable
}

fn fill_with_pattern(lo: usize, hi: usize) {
    let mut p = lo;
    while p < hi {
        // SAFETY: the caller passes free stack of its own, below its frames.
        unsafe { (p as *mut usize).write_volatile(PATTERN) };
        p += 8;
    }
}

/// Lowest word of `[lo, hi)` that no longer holds `PATTERN`.
fn lowest_written(lo: usize, hi: usize) -> usize {
    let mut p = lo;
    // SAFETY: `[lo, hi)` is free stack of a parked actor on this thread: mapped, and nothing
    // writes it while we read.
    while p < hi && unsafe { (p as *const usize).read_volatile() } == PATTERN {
        p += 8;
    }
    p
}

/// True if `ra` follows a call to `target`: `call rel32`, or `call [rip + disp32]` through
/// a GOT slot (how rustc calls an extern function from a position-independent executable).
fn follows_call_to(ra: usize, target: usize) -> bool {
    let mapped = |a: usize| {
        // SAFETY: dladdr only looks the address up in the loaded objects' tables.
        let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
        unsafe { libc::dladdr(a as *const libc::c_void, &mut info) != 0 && info.dli_fbase as usize <= a - 6 }
    };
    if ra < 4096 || !mapped(ra) {
        return false;
    }
    // SAFETY: `ra - 6 .. ra` lies in a loaded object (checked above); plain byte reads.
    let code = unsafe { ((ra - 6) as *const [u8; 6]).read() };
    let rel = i32::from_le_bytes([code[2], code[3], code[4], code[5]]) as isize;
    if code[1] == 0xE8 {
        return ra.wrapping_add_signed(rel) == target;
    }
    let slot = ra.wrapping_add_signed(rel);
    // SAFETY: the GOT slot lies in a loaded object (checked); an aligned pointer-sized read.
    code[..2] == [0xFF, 0x15] && mapped(slot) && unsafe { (slot as *const usize).read() } == target
}

/// What B found on A's stack while A was parked: the lowest written word, and whether it
/// is the bottom of the saved context of a hand-off switch.
static LOWEST_WRITTEN: AtomicUsize = AtomicUsize::new(0);
static SAVED_BY_HAND_OFF: AtomicBool = AtomicBool::new(false);

/// A message for B: scan `lo..hi` of the parked root's stack, then let `c` end.
struct Scan {
    lo: usize,
    hi: usize,
    release_c: smarm::channel::Sender<()>,
}

#[test]
#[ignore = "child process body of overflow_during_a_hand_off_names_the_actor_that_overflowed"]
fn child_actor_overflows_in_a_hand_off() {
    if !in_child() {
        return;
    }
    disable_core_dumps();
    let rt = Runtime::builder().threads(1).stack_size(HANDOFF_STACK).build().unwrap();
    let r = rt.run(|| {
        let lo = own_stack_bottom(HANDOFF_STACK);
        let switch_to_actor = smarm::__private::asm_routines()[0].entry;
        let (to_b, b_rx) = smarm::channel::channel::<Scan>();
        // B: parked in a receive, so each message wakes it into this thread's wake slot,
        // and the root's join that follows hands the thread straight to it.
        let b = smarm::spawn(move || {
            while let Ok(Scan { lo, hi, release_c }) = b_rx.recv() {
                // First thing after the hand-off: the root's stack as its park left it.
                let low = lowest_written(lo, hi);
                // SAFETY: `low + 48` is within the scanned, mapped range when it was written.
                let ra = if low + 56 <= hi { unsafe { ((low + 48) as *const usize).read() } } else { 0 };
                LOWEST_WRITTEN.store(low, Ordering::SeqCst);
                SAVED_BY_HAND_OFF.store(follows_call_to(ra, switch_to_actor), Ordering::SeqCst);
                let _ = release_c.send(());
            }
        });
        smarm::yield_now(); // B parks in its receive
                            // One round: the root joins an actor C that ends once B has scanned; the join parks
                            // by handing the thread to B. Run with the stack pointer at `sp`.
        let round = |sp: usize, scan_hi: usize| {
            let (release_c, c_rx) = smarm::channel::channel::<()>();
            let c = smarm::spawn(move || {
                let _ = c_rx.recv();
            });
            smarm::yield_now(); // C parks in its receive
            to_b.send(Scan { lo, hi: scan_hi, release_c }).unwrap();
            let c = std::cell::Cell::new(Some(c));
            with_stack_pointer_at(sp, &mut || c.take().expect("one join").join().unwrap());
        };
        // Calibration: how far below its caller's stack pointer does a join that parks by
        // handing off write? Twice: the second takes the paths every later round takes.
        let x1 = lo + HANDOFF_STACK / 2;
        for _ in 0..2 {
            fill_with_pattern(lo, x1);
            round(x1, x1);
        }
        let depth = x1 - LOWEST_WRITTEN.load(Ordering::SeqCst);
        assert!(
            SAVED_BY_HAND_OFF.load(Ordering::SeqCst),
            "calibration: the deepest write of the join ({depth} bytes down) is not the saved context of a \
             hand-off switch; this scenario no longer reaches the hand-off"
        );
        // Now with the stack pointer placed so that the deepest of those writes (the last
        // push of the switch) is the first word below the usable stack.
        eprintln!("{PID_MARKER}{}", smarm::current_pid());
        round(lo + depth - 8, lo);
        drop(to_b);
        b.join()
    });
    eprintln!("child: the runtime returned after a hand-off on an exhausted stack: {r:?}");
}

#[test]
fn overflow_during_a_hand_off_names_the_actor_that_overflowed() {
    let (status, stderr) = run_child("child_actor_overflows_in_a_hand_off");
    let pid = reported_pid(&stderr);
    assert_eq!(status.signal(), Some(libc::SIGABRT), "child status {status:?}; stderr:\n{stderr}");
    let want = format!("smarm: actor {pid} overflowed its 64 KiB stack\n");
    assert!(stderr.contains(&want), "expected {want:?} naming the faulting actor; stderr:\n{stderr}");
}
