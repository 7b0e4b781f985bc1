//! smarm keeps the floating-point *control* state (MXCSR control bits and the x87 control
//! word, callee-saved in the SysV ABI) per actor: a rounding mode set by one actor never
//! leaks into another actor, it survives every switch (including migration to another
//! scheduler thread), a fresh actor starts with the ABI's initial modes, and the thread that
//! called `Runtime::run` gets its own modes back.
//!
//! Every check reads the registers *and* performs real roundings (an SSE division and an
//! x87 float-to-int store), so a mode that is merely recorded but not in effect also fails.

use std::arch::asm;
use std::fmt;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use smarm::Runtime;

/// The SysV ABI's initial MXCSR: all exceptions masked, round to nearest.
const DEFAULT_MXCSR: u32 = 0x1F80;
/// The SysV ABI's initial x87 control word: exceptions masked, 64-bit precision, nearest.
const DEFAULT_FPUCW: u16 = 0x037F;
/// MXCSR bits 0-5 are sticky exception *status* flags, not control state.
const MXCSR_STATUS_BITS: u32 = 0x3F;
const MXCSR_RC_SHIFT: u32 = 13;
const FPUCW_RC_SHIFT: u32 = 10;

/// An x86 rounding-control value (the same encoding in MXCSR bits 13-14 and x87 CW bits 10-11).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Rounding {
    Nearest = 0b00,
    Down = 0b01,
    Up = 0b10,
    TowardZero = 0b11,
}

impl Rounding {
    fn rc(self) -> u32 {
        self as u32
    }
}

fn read_mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: `stmxcsr` stores 4 bytes to the address of a live, 4-aligned u32 we own; it
    // changes no register.
    unsafe { asm!("stmxcsr [{}]", in(reg) &mut v as *mut u32, options(nostack, preserves_flags)) };
    v
}

fn write_mxcsr(v: u32) {
    // SAFETY: `ldmxcsr` reads 4 bytes from a live u32. Every value written here is a value
    // read with `stmxcsr` with only the rounding-control field changed, so no reserved bit is
    // set (which would fault). Changing the rounding mode is the point of this test; only
    // code in this file, whose results are checked explicitly, runs under a changed mode.
    unsafe { asm!("ldmxcsr [{}]", in(reg) &v as *const u32, options(nostack, preserves_flags, readonly)) };
}

fn read_fpucw() -> u16 {
    let mut v: u16 = 0;
    // SAFETY: `fnstcw` stores 2 bytes to the address of a live u16 we own; it changes no
    // register and does not touch the x87 register stack.
    unsafe { asm!("fnstcw [{}]", in(reg) &mut v as *mut u16, options(nostack, preserves_flags)) };
    v
}

fn write_fpucw(v: u16) {
    // SAFETY: `fldcw` reads 2 bytes from a live u16; the value is one read with `fnstcw` with
    // only the rounding-control field changed. See `write_mxcsr` on changing the mode.
    unsafe { asm!("fldcw [{}]", in(reg) &v as *const u16, options(nostack, preserves_flags, readonly)) };
}

/// `x` rounded to an integer by the x87 unit under the current x87 rounding mode.
fn x87_round_to_int(x: f32) -> i32 {
    let mut out: i32 = 0;
    // SAFETY: `fld` pushes one value from a live f32 and `fistp` pops it into a live i32, so
    // the x87 register stack is empty again on exit (st(0) is declared clobbered).
    unsafe {
        asm!(
            "fld dword ptr [{src}]",
            "fistp dword ptr [{dst}]",
            src = in(reg) &x as *const f32,
            dst = in(reg) &mut out as *mut i32,
            out("st(0)") _,
            options(nostack, preserves_flags),
        )
    };
    out
}

/// `a / b` on the SSE unit, as Rust code: out of line, with opaque operands, so it is
/// neither constant-folded nor moved out of the region where the mode is set.
#[inline(never)]
fn sse_divide_bits(a: f32, b: f32) -> u32 {
    (black_box(a) / black_box(b)).to_bits()
}

/// The floating-point control state as this actor sees it, plus the effect it has.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FpState {
    /// MXCSR without the sticky status flags.
    mxcsr_control: u32,
    fpucw: u16,
    /// Bit patterns of `1/3` and `-1/3` computed on the SSE unit: distinct for every mode.
    sse_thirds: (u32, u32),
    /// `1.5` and `-1.5` rounded to integers by the x87 unit: distinct for every mode.
    x87_halves: (i32, i32),
}

impl fmt::Debug for FpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FpState {{ mxcsr_control: {:#06x}, fpucw: {:#06x}, sse 1/3: {:#010x}, sse -1/3: {:#010x}, \
             x87 round(1.5): {}, x87 round(-1.5): {} }}",
            self.mxcsr_control, self.fpucw, self.sse_thirds.0, self.sse_thirds.1, self.x87_halves.0, self.x87_halves.1
        )
    }
}

fn observe() -> FpState {
    FpState {
        mxcsr_control: read_mxcsr() & !MXCSR_STATUS_BITS,
        fpucw: read_fpucw(),
        sse_thirds: (sse_divide_bits(1.0, 3.0), sse_divide_bits(-1.0, 3.0)),
        x87_halves: (x87_round_to_int(1.5), x87_round_to_int(-1.5)),
    }
}

/// What `observe` must return under `mode` (starting from the ABI defaults).
fn expected(mode: Rounding) -> FpState {
    // 1/3 = 0x3EAAAAAA.AAA...: the exact value lies between ...AA and ...AB, nearer ...AB.
    let (lo, hi) = (0x3EAA_AAAA_u32, 0x3EAA_AAAB_u32);
    let neg = 0x8000_0000_u32;
    let (sse_thirds, x87_halves) = match mode {
        Rounding::Nearest => ((hi, neg | hi), (2, -2)),
        Rounding::Down => ((lo, neg | hi), (1, -2)),
        Rounding::Up => ((hi, neg | lo), (2, -1)),
        Rounding::TowardZero => ((lo, neg | lo), (1, -1)),
    };
    FpState {
        mxcsr_control: (DEFAULT_MXCSR & !(0b11 << MXCSR_RC_SHIFT)) | (mode.rc() << MXCSR_RC_SHIFT),
        fpucw: (DEFAULT_FPUCW & !(0b11 << FPUCW_RC_SHIFT)) | ((mode.rc() as u16) << FPUCW_RC_SHIFT),
        sse_thirds,
        x87_halves,
    }
}

#[track_caller]
fn assert_mode(mode: Rounding, context: fmt::Arguments<'_>) {
    let seen = observe();
    let want = expected(mode);
    assert_eq!(seen, want, "{context}: expected {mode:?} rounding");
}

/// Sets both rounding modes for the calling actor; restores the previous control state on
/// drop (also when an assertion unwinds), so no actor returns with a changed mode.
struct ModeGuard {
    mxcsr: u32,
    fpucw: u16,
}

impl ModeGuard {
    fn set(mode: Rounding) -> ModeGuard {
        let g = ModeGuard { mxcsr: read_mxcsr(), fpucw: read_fpucw() };
        write_mxcsr((g.mxcsr & !(0b11 << MXCSR_RC_SHIFT)) | (mode.rc() << MXCSR_RC_SHIFT));
        write_fpucw((g.fpucw & !(0b11 << FPUCW_RC_SHIFT)) | ((mode.rc() as u16) << FPUCW_RC_SHIFT));
        g
    }
}

impl Drop for ModeGuard {
    fn drop(&mut self) {
        write_mxcsr(self.mxcsr);
        write_fpucw(self.fpucw);
    }
}

/// Sets a flag when dropped, also while unwinding (stops helper actors if a check fails).
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[test]
fn expected_signatures_match_the_hardware_on_a_plain_thread() {
    // Sanity check of the oracle itself, off any runtime: each mode, once set, produces
    // exactly the signature `expected` predicts, and the defaults are what the ABI says.
    std::thread::spawn(|| {
        assert_mode(Rounding::Nearest, format_args!("plain thread, defaults"));
        for mode in [Rounding::Down, Rounding::Up, Rounding::TowardZero, Rounding::Nearest] {
            let _g = ModeGuard::set(mode);
            assert_mode(mode, format_args!("plain thread"));
        }
        assert_mode(Rounding::Nearest, format_args!("plain thread, restored"));
    })
    .join()
    .unwrap();
}

#[test]
fn rounding_mode_does_not_leak_to_next_actor() {
    const YIELDS: usize = 2_000;
    let rt = Runtime::builder().threads(1).build().unwrap();
    let b_saw_a_active = rt
        .run(|| {
            assert_mode(Rounding::Nearest, format_args!("root at start"));
            let a_active = Arc::new(AtomicBool::new(false));
            let a_done = Arc::new(AtomicBool::new(false));
            let b_saw_a_active = Arc::new(AtomicUsize::new(0));

            let b = {
                let (a_active, a_done, seen) = (a_active.clone(), a_done.clone(), b_saw_a_active.clone());
                smarm::spawn(move || {
                    let mut i = 0usize;
                    while !a_done.load(Ordering::Acquire) {
                        let active = a_active.load(Ordering::Acquire);
                        assert_mode(
                            Rounding::Nearest,
                            format_args!("actor B, check {i}, actor A's mode active: {active}"),
                        );
                        if active {
                            seen.fetch_add(1, Ordering::Relaxed);
                        }
                        smarm::yield_now();
                        i += 1;
                    }
                })
            };
            let a = {
                let a_active = a_active.clone();
                let a_done = a_done.clone();
                smarm::spawn(move || {
                    let _done = SetOnDrop(a_done);
                    let guard = ModeGuard::set(Rounding::TowardZero);
                    assert_mode(Rounding::TowardZero, format_args!("actor A after setting its mode"));
                    a_active.store(true, Ordering::Release);
                    for i in 0..YIELDS {
                        smarm::yield_now();
                        assert_mode(Rounding::TowardZero, format_args!("actor A after yield {i}"));
                    }
                    a_active.store(false, Ordering::Release);
                    drop(guard);
                    assert_mode(Rounding::Nearest, format_args!("actor A after restoring its mode"));
                })
            };
            a.join().expect("actor A");
            b.join().expect("actor B");
            assert_mode(Rounding::Nearest, format_args!("root after joining"));
            b_saw_a_active.load(Ordering::Relaxed)
        })
        .unwrap();
    // On one scheduler thread B can only run while A is suspended between its yields: make
    // sure it did so often, or the checks above proved nothing.
    assert!(
        b_saw_a_active >= YIELDS / 2,
        "actor B checked its modes only {b_saw_a_active} times while actor A's mode was set"
    );
}

#[test]
fn distinct_rounding_modes_coexist_on_one_thread() {
    // Four actors, one per mode, interleaved on one thread: each sees only its own mode.
    const YIELDS: usize = 1_000;
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        let handles: Vec<_> = [Rounding::Nearest, Rounding::Down, Rounding::Up, Rounding::TowardZero]
            .into_iter()
            .map(|mode| {
                smarm::spawn(move || {
                    let _g = ModeGuard::set(mode);
                    for i in 0..YIELDS {
                        smarm::yield_now();
                        assert_mode(mode, format_args!("actor with {mode:?} after yield {i}"));
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    })
    .unwrap();
}

#[test]
fn fresh_actor_starts_with_default_modes_even_if_spawner_changed_them() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        let _g = ModeGuard::set(Rounding::Up);
        for k in 0..20 {
            // Spawned (and run) while the spawner's mode is set; joining parks the spawner,
            // another kind of switch than a yield.
            let child = smarm::spawn(move || {
                assert_mode(Rounding::Nearest, format_args!("fresh child {k}"));
                smarm::yield_now();
                assert_mode(Rounding::Nearest, format_args!("child {k} after a yield"));
            });
            child.join().unwrap();
            assert_mode(Rounding::Up, format_args!("spawner after joining child {k}"));
        }
    })
    .unwrap();
}

#[test]
fn rounding_mode_travels_with_actor_across_threads() {
    const MAX_YIELDS: usize = 1_000_000;
    const WANTED_MIGRATIONS: usize = 50;
    const BUSY_ACTORS: usize = 3;
    let rt = Runtime::builder().threads(2).build().unwrap();
    let migrations = rt
        .run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            // Default-mode actors keep both threads busy (so the run queue is rarely empty
            // and actors move between threads), and check that nothing leaks into them.
            let busy: Vec<_> = (0..BUSY_ACTORS)
                .map(|k| {
                    let stop = stop.clone();
                    smarm::spawn(move || {
                        let mut i = 0usize;
                        while !stop.load(Ordering::Acquire) {
                            smarm::yield_now();
                            assert_mode(Rounding::Nearest, format_args!("busy actor {k} after yield {i}"));
                            i += 1;
                        }
                    })
                })
                .collect();
            let movers: Vec<_> = [Rounding::TowardZero, Rounding::Up]
                .into_iter()
                .map(|mode| {
                    // Yielded actors stay on their thread's local queue while every thread
                    // is busy, so now and then the mover parks and is woken from a plain
                    // thread: that wake goes to the shared queue, where either scheduler
                    // thread may take it.
                    let (req_tx, req_rx) = std::sync::mpsc::channel::<()>();
                    let (reply_tx, reply_rx) = smarm::channel::channel::<()>();
                    std::thread::spawn(move || {
                        while req_rx.recv().is_ok() {
                            if reply_tx.send(()).is_err() {
                                break;
                            }
                        }
                    });
                    smarm::spawn(move || {
                        let _g = ModeGuard::set(mode);
                        let mut thread = smarm::current_thread_index().expect("in an actor");
                        let mut migrations = 0usize;
                        for i in 0..MAX_YIELDS {
                            if i % 8 == 0 {
                                req_tx.send(()).unwrap();
                                reply_rx.recv().unwrap();
                            } else {
                                smarm::yield_now();
                            }
                            assert_mode(mode, format_args!("{mode:?} actor after yield {i} ({migrations} migrations)"));
                            let now = smarm::current_thread_index().expect("in an actor");
                            if now != thread {
                                thread = now;
                                migrations += 1;
                                if migrations >= WANTED_MIGRATIONS {
                                    break;
                                }
                            }
                        }
                        (mode, migrations)
                    })
                })
                .collect();
            let _stop = SetOnDrop(stop);
            let migrations: Vec<_> = movers.into_iter().map(|h| h.join().expect("mode-setting actor")).collect();
            drop(_stop);
            for h in busy {
                h.join().expect("busy actor");
            }
            migrations
        })
        .unwrap();
    for (mode, n) in migrations {
        assert!(n >= 1, "the {mode:?} actor never changed scheduler thread in {MAX_YIELDS} switches");
    }
}

#[test]
fn mode_left_set_by_a_finished_actor_does_not_leak() {
    // Deliberately *not* restored: an actor that returns with a changed mode (an ABI
    // violation a user can commit) must not hand it to the next actor on its thread, nor to
    // the thread that called `run`.
    let caller_thread = std::thread::spawn(|| {
        let rt = Runtime::builder().threads(1).build().unwrap();
        rt.run(|| {
            for (k, mode) in [Rounding::TowardZero, Rounding::Up, Rounding::Down].into_iter().enumerate() {
                let leaker = smarm::spawn(move || {
                    std::mem::forget(ModeGuard::set(mode)); // never restored
                    assert_mode(mode, format_args!("leaking actor {k}"));
                });
                leaker.join().unwrap();
                assert_mode(Rounding::Nearest, format_args!("root after leaking actor {k} ended"));
                smarm::spawn(move || assert_mode(Rounding::Nearest, format_args!("actor spawned after leaker {k}")))
                    .join()
                    .unwrap();
            }
        })
        .unwrap();
        assert_mode(Rounding::Nearest, format_args!("thread that called run, after run"));
    });
    caller_thread.join().unwrap();
}

#[test]
fn actors_start_with_defaults_and_caller_gets_its_mode_back_when_run_from_a_thread_with_changed_mode() {
    // The thread calling `run` (scheduler thread 0) and the worker threads it spawns (which
    // inherit the caller's modes) start with a non-default mode: actors must still start
    // with the ABI defaults, and the caller must find its own mode again afterwards.
    std::thread::spawn(|| {
        let _caller_mode = ModeGuard::set(Rounding::Down);
        let rt = Runtime::builder().threads(2).build().unwrap();
        rt.run(|| {
            assert_mode(Rounding::Nearest, format_args!("root actor"));
            let hs: Vec<_> = (0..8)
                .map(|k| {
                    smarm::spawn(move || {
                        for i in 0..200 {
                            assert_mode(
                                Rounding::Nearest,
                                format_args!("actor {k}, step {i}, thread {:?}", smarm::current_thread_index()),
                            );
                            smarm::yield_now();
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        })
        .unwrap();
        assert_mode(Rounding::Down, format_args!("thread that called run, after run"));
    })
    .join()
    .unwrap();
}
