//! The cost of one `smarm::profile::site` entry/exit pair, inside an actor, with and without
//! the runtime's CPU-time counting (`Builder::cpu_time`), against an empty loop; median of 7
//! runs of 1,000,000 pairs. Run: `cargo bench --bench profile_site`.

use std::time::{Duration, Instant};

const N: u32 = 1_000_000;
const RUNS: usize = 7;

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn measure(cpu_time: bool) -> (f64, f64) {
    smarm::Runtime::builder()
        .threads(1)
        .cpu_time(cpu_time)
        .build()
        .unwrap()
        .run(|| {
            let empty = median(
                (0..RUNS)
                    .map(|_| {
                        let t = Instant::now();
                        for i in 0..N {
                            std::hint::black_box(i);
                        }
                        t.elapsed()
                    })
                    .collect(),
            );
            let sites = median(
                (0..RUNS)
                    .map(|_| {
                        let t = Instant::now();
                        for i in 0..N {
                            let _s = smarm::profile::site("bench_site");
                            std::hint::black_box(i);
                        }
                        t.elapsed()
                    })
                    .collect(),
            );
            let per = |d: Duration| d.as_nanos() as f64 / N as f64;
            (per(sites), per(empty))
        })
        .unwrap()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    for cpu_time in [false, true] {
        let (sites, empty) = measure(cpu_time);
        println!(
            "profile::site enter+exit, cpu_time {}: {:.1} ns per pair ({:.1} ns loop overhead included in neither)",
            if cpu_time { "on " } else { "off" },
            sites - empty,
            empty
        );
    }
}
