//! switch_cost: the cost of one yield round trip (actor -> scheduler -> same actor) on one
//! pinned scheduler thread, and of a raw context-switch pair with no scheduler in between,
//! in rdtsc ticks and ns (mean over >= 1,000,000 round trips per sample, median of samples).
//! Also the fixed cost of an empty `run(|| ())` beyond starting and joining its threads.
//!
//! Run: `cargo bench --bench switch_cost`

use std::time::{Duration, Instant};

use smarm::__private::{raw_switch_pair_ticks, rdtsc};

const ROUNDS: u64 = 2_000_000;
const SAMPLES: usize = 9;

fn pin_to_cpu(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is valid; CPU_SET writes within it; sched_setaffinity on the
    // calling thread (pid 0) only changes where it may run.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn unpin() {
    // SAFETY: as in `pin_to_cpu`, with every CPU allowed.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for cpu in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(cpu, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// ns per rdtsc tick, from a 100 ms calibration against the monotonic clock.
fn ns_per_tick() -> f64 {
    let t0 = Instant::now();
    let c0 = rdtsc();
    while t0.elapsed() < Duration::from_millis(100) {}
    let c1 = rdtsc();
    t0.elapsed().as_nanos() as f64 / (c1 - c0) as f64
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn yield_round_trip_ticks() -> f64 {
    let rt = smarm::Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        for _ in 0..10_000 {
            smarm::yield_now();
        }
        let start = rdtsc();
        for _ in 0..ROUNDS {
            smarm::yield_now();
        }
        (rdtsc() - start) as f64 / ROUNDS as f64
    })
    .unwrap()
}

fn empty_run_us(threads: usize) -> f64 {
    let t = Instant::now();
    smarm::Runtime::builder().threads(threads).build().unwrap().run(|| ()).unwrap();
    t.elapsed().as_nanos() as f64 / 1e3
}

fn bare_threads_us(threads: usize) -> f64 {
    let t = Instant::now();
    let hs: Vec<_> = (1..threads).map(|_| std::thread::spawn(|| ())).collect();
    for h in hs {
        h.join().unwrap();
    }
    t.elapsed().as_nanos() as f64 / 1e3
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` compatibility
    }
    // Before pinning: available_parallelism honours the affinity mask.
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    pin_to_cpu(0);
    let nspt = ns_per_tick();
    println!("switch_cost: {ROUNDS} round trips per sample, {SAMPLES} samples, median; 1 tick = {nspt:.3} ns");

    let mut y: Vec<f64> = (0..SAMPLES).map(|_| yield_round_trip_ticks()).collect();
    let (ymin, ymax) = (y.iter().cloned().fold(f64::MAX, f64::min), y.iter().cloned().fold(0.0, f64::max));
    let ym = median(&mut y);
    println!("yield round trip    {ym:7.1} ticks  {:6.1} ns   (min {ymin:.1}, max {ymax:.1} ticks)", ym * nspt);

    raw_switch_pair_ticks(100_000);
    let mut r: Vec<f64> = (0..SAMPLES).map(|_| raw_switch_pair_ticks(ROUNDS) as f64 / ROUNDS as f64).collect();
    let (rmin, rmax) = (r.iter().cloned().fold(f64::MAX, f64::min), r.iter().cloned().fold(0.0, f64::max));
    let rm = median(&mut r);
    println!("raw switch pair     {rm:7.1} ticks  {:6.1} ns   (min {rmin:.1}, max {rmax:.1} ticks)", rm * nspt);

    // The empty-run measurement uses every core, like a user's `main`.
    unpin();
    for t in [1, threads] {
        for _ in 0..5 {
            empty_run_us(t);
            bare_threads_us(t);
        }
        let mut runs: Vec<f64> = (0..31).map(|_| empty_run_us(t)).collect();
        let mut bare: Vec<f64> = (0..31).map(|_| bare_threads_us(t)).collect();
        let (rm, bm) = (median(&mut runs), median(&mut bare));
        println!(
            "empty run(|| ()) {t}T: {rm:7.1} us; spawn+join of its {} extra threads alone: {bm:6.1} us; \
             runtime's own cost {:6.1} us (default 16,384 slots)",
            t - 1,
            rm - bm
        );
    }
}
