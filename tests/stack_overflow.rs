//! An actor that overflows its stack hits the guard page; smarm's SIGSEGV handler (on the
//! scheduler thread's alternate signal stack) names the actor and aborts. Faults that are
//! not guard-page hits are passed on and kill the process with SIGSEGV as usual.
//!
//! Each scenario runs in a child process: this test binary re-executed with
//! `SMARM_OVERFLOW_CHILD=1`, selecting one `#[ignore]`d child test with `--exact`.

use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};

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
