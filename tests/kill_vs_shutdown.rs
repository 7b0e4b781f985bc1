//! A kill racing the runtime's shutdown sweep is never downgraded to a shutdown request.
//!
//! The sweep (`stop_all`) and `kill` each raise the victim's `cancel` code, the sweep without
//! the process lock. A downgrade needs the kill to land between the sweep's read of the code
//! and its write, a window of a few instructions. To reach it, the scheduler thread that
//! retires the root (and so runs the sweep) is single-stepped (the x86 trap flag) and gives
//! up the CPU after random instructions, with every thread of the test pinned to one CPU:
//! the killer, on the other scheduler thread, runs exactly at those points.
//!
//! One test in this file: it installs a SIGTRAP handler for the whole process.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use smarm::__private::Diagnostics;
use smarm::channel::channel;
use smarm::{DownReason, Runtime};

/// Set while the root's thread is to be single-stepped.
static STEPPING: AtomicBool = AtomicBool::new(false);
/// xorshift state of the single-step handler (only the stepped thread uses it).
static RANDOM: AtomicU32 = AtomicU32::new(0x9e37_79b9);

/// The x86 trap flag: the CPU raises a debug trap (SIGTRAP) after every instruction.
const EFLAGS_TF: libc::greg_t = 0x100;
/// On average, one in this many single-stepped instructions gives up the CPU.
const YIELD_EVERY: u32 = 64;
/// Fresh runtimes raced (each one kill against one shutdown sweep).
const ITERATIONS: usize = 200;

/// SIGTRAP handler: keeps the trap flag set while `STEPPING`, and after a random instruction
/// gives up the CPU, so the stepped thread stops there while the other (pinned to the same
/// CPU) runs.
extern "C" fn step(_: libc::c_int, _: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes the interrupted context, ours alone until we return.
    let gregs = unsafe { &mut (*ctx.cast::<libc::ucontext_t>()).uc_mcontext.gregs };
    if !STEPPING.load(SeqCst) {
        gregs[libc::REG_EFL as usize] &= !EFLAGS_TF;
        return;
    }
    gregs[libc::REG_EFL as usize] |= EFLAGS_TF;
    let mut x = RANDOM.load(SeqCst);
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    RANDOM.store(x, SeqCst);
    if x % YIELD_EVERY == 0 {
        // SAFETY: a plain system call (async-signal-safe; cannot fail, errno untouched).
        unsafe { libc::sched_yield() };
    }
}

/// Pins the calling thread to the first CPU it may use; threads it starts inherit this.
fn pin_to_one_cpu() {
    // SAFETY: `cpu_set_t` is plain bits (all-zero is the empty set); the calls only read and
    // write the set we pass, and pid 0 names the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set), 0);
        let cpu = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).expect("an allowed CPU");
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
    }
}

/// Sets its flag when dropped (also when its owner unwinds).
struct SetOnDrop(Arc<AtomicBool>);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, SeqCst);
    }
}

/// One race on a fresh two-thread runtime. Thread 0 runs the root, then (single-stepped) its
/// retirement and the shutdown sweep. Thread 1 runs the killer, which kills the victim as
/// soon as it sees shutdown begin, then holds thread 1 until the sweep is over (the sweep
/// arms the shutdown timer when it is done). The victim cannot run before that: thread 1 is
/// the killer's until then, and thread 0, after the sweep, runs the blocker (woken by the
/// sweep after the victim, so first in line), which holds the thread until the killer is
/// done. So the victim's reason is its final code. Returns whether the kill was issued, and
/// the victim's outcome.
fn race() -> (bool, Result<(), DownReason>) {
    let killed = Arc::new(AtomicBool::new(false));
    let rt = Runtime::builder().threads(2).build().unwrap();
    let killed2 = killed.clone();
    let victim = rt
        .run(move || {
            let diag = Diagnostics::current().unwrap();
            let parked = Arc::new(AtomicUsize::new(0));
            let killer_started = Arc::new(AtomicBool::new(false));
            let killer_done = Arc::new(AtomicBool::new(false));
            let park_until_stopped = |parked: Arc<AtomicUsize>| {
                move || {
                    let (tx, rx) = channel::<()>();
                    parked.fetch_add(1, SeqCst);
                    let _ = rx.recv();
                    drop(tx);
                }
            };
            // Spawned first, so the sweep reaches it first.
            let victim = smarm::spawn(park_until_stopped(parked.clone()));
            let blocker = smarm::spawn({
                let (parked, done) = (parked.clone(), killer_done.clone());
                move || {
                    /// Holds the thread while unwinding from the sweep's stop, until the
                    /// killer is done (OS yields only: no runtime call).
                    struct Hold(Arc<AtomicBool>);
                    impl Drop for Hold {
                        fn drop(&mut self) {
                            while !self.0.load(SeqCst) {
                                std::thread::yield_now();
                            }
                        }
                    }
                    let _hold = Hold(done);
                    park_until_stopped(parked)()
                }
            });
            // The root keeps thread 0 (OS yields only), so both run, and park, on thread 1.
            while parked.load(SeqCst) < 2 {
                std::thread::yield_now();
            }
            let victim_pid = victim.pid();
            let _killer = smarm::spawn({
                let started = killer_started.clone();
                move || {
                    let _done = SetOnDrop(killer_done);
                    started.store(true, SeqCst);
                    while !diag.shutting_down() {
                        std::thread::yield_now();
                    }
                    smarm::kill(victim_pid);
                    killed2.store(true, SeqCst);
                    STEPPING.store(false, SeqCst);
                    while diag.pending_timers() == 0 {
                        std::thread::yield_now();
                    }
                }
            });
            while !killer_started.load(SeqCst) {
                std::thread::yield_now();
            }
            drop(blocker);
            STEPPING.store(true, SeqCst);
            // SAFETY: the handler installed by the test sets the trap flag in our context.
            unsafe { libc::raise(libc::SIGTRAP) };
            victim
        })
        .unwrap();
    STEPPING.store(false, SeqCst);
    (killed.load(SeqCst), victim.join())
}

/// A kill issued before the victim ran ends it with `Killed`, however it interleaves with
/// the shutdown sweep's request.
#[test]
fn kill_is_never_downgraded_to_shutdown() {
    // SAFETY: installs a handler that touches only two statics and the interrupted context;
    // nothing else in this test binary uses SIGTRAP.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = step as *const () as usize;
        sa.sa_flags = libc::SA_SIGINFO;
        assert_eq!(libc::sigaction(libc::SIGTRAP, &sa, std::ptr::null_mut()), 0);
    }
    pin_to_one_cpu();
    let mut kills = 0;
    for i in 0..ITERATIONS {
        let (killed, outcome) = race();
        if killed {
            kills += 1;
            assert_eq!(outcome, Err(DownReason::Killed), "race {i}: the kill was downgraded");
        }
    }
    // The killer only misses its kill if it is stopped first; most races must issue one.
    assert!(kills > ITERATIONS / 2, "only {kills} of {ITERATIONS} races issued their kill");
}
