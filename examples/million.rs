//! One million actors alive at once, each parked on a watch channel, on default 512 KiB stacks with guard pages;
//! then all are released and joined. Prints the spawn rate (of the spawn loop, and until every
//! actor has run and parked), peak RSS and RSS per actor.
//!
//! Run: `cargo run --release --example million` (optionally pass a count: `-- 200000`).
//! `-- 1000000 2` runs a second round in the same runtime with every released stack kept
//! (`warm_stacks(usize::MAX)`): its actors run on pages the first round already faulted in,
//! which is what a long-running server that keeps its stacks pays per accepted connection.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn rss_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU time (user, system) this process has used so far, in seconds, and its minor page faults.
fn cpu_secs() -> (f64, f64, i64) {
    // SAFETY: getrusage fills the struct we pass; RUSAGE_SELF is always valid.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    (secs(ru.ru_utime), secs(ru.ru_stime), ru.ru_minflt)
}

fn map_count() -> usize {
    std::fs::read_to_string("/proc/self/maps").map(|m| m.lines().count()).unwrap_or(0)
}

/// One round: spawns `n` actors that park, waits until all have, releases and joins them.
/// Returns (spawn loop secs, secs until all parked, (user, system, faults) until then,
/// alive at once, memory maps while parked).
fn round(n: usize) -> (f64, f64, (f64, f64, i64), usize, usize) {
    // Every actor parks in `changed()` on one watch channel until the root publishes.
    let (release, gate) = smarm::channel::watch(false);
    let parked = Arc::new(AtomicUsize::new(0));
    let cpu0 = cpu_secs();
    let start = Instant::now();
    let mut handles = Vec::with_capacity(n);
    for _ in 0..n {
        let mut gate = gate.clone();
        let parked = parked.clone();
        handles.push(smarm::spawn(move || {
            parked.fetch_add(1, Ordering::Relaxed);
            while !gate.get() {
                gate.changed().expect("release sender dropped");
            }
        }));
    }
    let spawn_secs = start.elapsed().as_secs_f64();
    // Wait until every actor has run and parked (a polling root, not a sync primitive
    // under test: this is a demo; the poll adds up to 1 ms).
    while parked.load(Ordering::Relaxed) < n {
        smarm::sleep(Duration::from_millis(1));
    }
    let parked_secs = start.elapsed().as_secs_f64();
    let (user1, sys1, faults1) = cpu_secs();
    let cpu = (user1 - cpu0.0, sys1 - cpu0.1, faults1 - cpu0.2);
    let alive = handles.iter().filter(|h| !h.is_finished()).count();
    let maps = map_count();
    release.send(true);
    for h in handles {
        h.join().expect("actor");
    }
    (spawn_secs, parked_secs, cpu, alive, maps)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let rounds: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1).max(1);
    let rss_before = rss_kib("VmRSS:");
    let mut builder = smarm::Runtime::builder().max_actors(n + 16);
    if rounds > 1 {
        builder = builder.warm_stacks(usize::MAX);
    }
    let rt = builder.build().expect("runtime");
    let threads = rt.threads();
    let results = rt.run(move || (0..rounds).map(|_| round(n)).collect::<Vec<_>>()).expect("root");
    let peak = rss_kib("VmHWM:");
    println!(
        "smarm million: {n} actors on {threads} threads, default stacks, guards by {}",
        smarm::__private::guard_method()
    );
    for (i, (spawn_secs, parked_secs, cpu, alive, maps)) in results.into_iter().enumerate() {
        if rounds > 1 {
            println!(
                "round {} ({}):",
                i + 1,
                if i == 0 { "fresh stacks" } else { "stacks kept from the round before" }
            );
        }
        println!("  spawned in {spawn_secs:.2} s ({:.0} spawns/s)", n as f64 / spawn_secs);
        println!("  all running and parked after {parked_secs:.2} s ({:.0} actors/s)", n as f64 / parked_secs);
        println!(
            "  CPU until then: {:.2} us user + {:.2} us system per actor ({threads} threads), {:.2} page faults per actor",
            cpu.0 * 1e6 / n as f64,
            cpu.1 * 1e6 / n as f64,
            cpu.2 as f64 / n as f64
        );
        println!("  alive at once: {alive}; memory maps while all parked: {maps}");
    }
    println!(
        "  peak RSS {:.2} GiB ({:.2} KiB per actor above the {} MiB baseline)",
        peak as f64 / (1024.0 * 1024.0),
        (peak - rss_before) as f64 / n as f64,
        rss_before / 1024
    );
    println!("  RSS after run returned: {} MiB", rss_kib("VmRSS:") / 1024);
}
