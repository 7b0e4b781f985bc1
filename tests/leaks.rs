//! Starting and stopping many runtimes in one process leaks nothing: no scheduler thread
//! outlives its `run`, and stacks, slabs and queues are returned.
//!
//! This file holds a single test so that no other test's threads disturb the counts.

use std::time::Duration;

use smarm::Runtime;

/// A field of `/proc/self/status` (the number before any unit).
fn status_field(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(':')))
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status"));
    line.split_whitespace().next().unwrap().parse().unwrap()
}

fn threads() -> u64 {
    status_field("Threads")
}

fn rss_kib() -> u64 {
    status_field("VmRSS")
}

/// Memory maps of the process (an unreturned actor stack is at least one).
fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// One runtime: two threads, ten actors that yield, sleep once and are joined.
fn one_runtime(round: u64) {
    let sum = Runtime::builder()
        .threads(2)
        .build()
        .unwrap()
        .run(move || {
            let handles: Vec<_> = (0..10u64)
                .map(|i| {
                    smarm::spawn(move || {
                        for _ in 0..10 {
                            smarm::yield_now();
                        }
                        if i == 0 {
                            smarm::sleep(Duration::from_micros(10));
                        }
                        i + round
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        })
        .unwrap();
    assert_eq!(sum, 45 + 10 * round);
}

#[test]
fn a_thousand_runtimes_started_and_stopped_leak_no_threads_maps_fds_or_memory() {
    for round in 0..20 {
        one_runtime(round);
    }
    let (threads0, rss0, maps0, fds0) = (threads(), rss_kib(), maps(), open_fds());
    for round in 0..1_000 {
        one_runtime(round);
    }
    let (threads1, rss1, maps1, fds1) = (threads(), rss_kib(), maps(), open_fds());
    assert_eq!(threads1, threads0, "scheduler threads outlived their runtimes");
    assert!(maps1 <= maps0 + 16, "memory maps grew from {maps0} to {maps1}: stacks or runtimes not unmapped");
    assert!(fds1 <= fds0, "open file descriptors grew from {fds0} to {fds1}");
    assert!(
        rss1 < rss0 + 8 * 1024,
        "RSS grew by {} KiB over 1,000 runtimes (from {rss0} KiB to {rss1} KiB)",
        rss1.saturating_sub(rss0)
    );
}
