//! Runtime shutdown: the shutdown timeout (SEMANTICS.md, "Runtime shutdown").
//!
//! Statement -> tests:
//!
//! - remaining actors get `Shutdown`, then `Killed` after the runtime's shutdown timeout:
//!   an_actor_still_running_after_the_shutdown_timeout_is_killed,
//!   the_kill_comes_no_earlier_than_the_shutdown_timeout,
//!   an_actor_that_ends_within_the_timeout_reports_shutdown,
//!   an_actor_whose_cleanup_ends_within_the_timeout_reports_shutdown,
//!   a_shutdown_timeout_of_duration_max_waits_for_the_actors

use std::panic::catch_unwind;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smarm::{DownReason, JoinHandle};

const MS: Duration = Duration::from_millis(1);

#[test]
fn an_actor_still_running_after_the_shutdown_timeout_is_killed() {
    let (tx, rx) = std::sync::mpsc::channel();
    let r = smarm::Runtime::builder()
        .threads(2)
        .quiet_panics(true)
        .shutdown_timeout(Duration::from_millis(50))
        .build()
        .unwrap()
        .run(move || {
            let h = smarm::spawn(|| {
                // Swallow the Shutdown once, then stay busy (no runtime call) past the timeout.
                let first = std::panic::catch_unwind(|| smarm::sleep(Duration::from_secs(10)));
                assert!(first.is_err(), "the first sleep must be interrupted by the shutdown");
                let spin = Instant::now();
                while spin.elapsed() < Duration::from_millis(200) {
                    std::hint::spin_loop();
                }
                // The spin outlasted the 50 ms timeout, so the stop request this call raises
                // is the kill by now (an actor ends with the request it holds at its end).
                smarm::sleep(Duration::from_secs(10));
            });
            tx.send(h).unwrap();
            smarm::sleep(Duration::from_millis(5));
            7
        });
    assert_eq!(r.unwrap(), 7);
    assert_eq!(rx.recv().unwrap().join(), Err(smarm::DownReason::Killed));
}

/// Samples when the kill comes. A probe swallows the stop request that each of its runtime
/// calls raises (a caught one is raised again at the next call) and keeps going until it is
/// released; then it returns, and an actor that returns ends with the stop request it holds
/// at that moment: `Shutdown` if the kill has not come yet, `Killed` if it has. A thread
/// outside the runtime releases the probes one at a time, 10 ms apart, and joins each; the
/// time of a join is measured from just before the root returned (so from no later than the
/// shutdown's start). A probe that ends `Killed` was killed before its join returned, so the
/// first one's join time bounds the kill from above: it must be at least the timeout.
#[test]
fn the_kill_comes_no_earlier_than_the_shutdown_timeout() {
    const T: Duration = Duration::from_millis(200);
    // Released at least 10 ms apart: the last one at least 640 ms after the root returned.
    const PROBES: usize = 64;
    let released = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<(Instant, Vec<JoinHandle<()>>)>();
    let rel = released.clone();
    let sampler = std::thread::spawn(move || {
        let mut samples = Vec::new();
        let Ok((began, probes)) = rx.recv() else { return samples };
        for (i, probe) in probes.into_iter().enumerate() {
            // After the first kill there is nothing left to wait for.
            if !samples.iter().any(|(r, _)| *r == Err(DownReason::Killed)) {
                std::thread::sleep(10 * MS);
            }
            rel.store(i + 1, Ordering::Release);
            let reason = probe.join();
            samples.push((reason, began.elapsed()));
        }
        samples
    });
    smarm::Runtime::builder()
        .threads(2)
        .quiet_panics(true)
        .shutdown_timeout(T)
        .build()
        .unwrap()
        .run(move || {
            let (ready_tx, ready_rx) = smarm::channel::channel::<()>();
            let probes: Vec<JoinHandle<()>> = (0..PROBES)
                .map(|i| {
                    let (released, ready_tx) = (released.clone(), ready_tx.clone());
                    smarm::spawn(move || {
                        ready_tx.send(()).unwrap();
                        // The give-up only keeps a broken test from hanging `run`.
                        let give_up = Instant::now() + Duration::from_secs(30);
                        while released.load(Ordering::Acquire) <= i && Instant::now() < give_up {
                            let _ = catch_unwind(smarm::yield_now);
                        }
                    })
                })
                .collect();
            // All running (a never-run actor has no frame to unwind, it just ends).
            for _ in 0..PROBES {
                ready_rx.recv().unwrap();
            }
            tx.send((Instant::now(), probes)).unwrap();
        })
        .unwrap();
    let samples = sampler.join().unwrap();
    assert_eq!(samples.len(), PROBES);
    let first = samples
        .iter()
        .position(|(r, _)| *r == Err(DownReason::Killed))
        .unwrap_or_else(|| panic!("no probe was killed: {samples:?}"));
    let at = samples[first].1;
    assert!(at >= T, "probe {first} was killed within {at:?} of the shutdown, before the {T:?} timeout: {samples:?}");
    assert!(samples[..first].iter().all(|(r, _)| *r == Err(DownReason::Shutdown)), "{samples:?}");
    assert!(samples[first..].iter().all(|(r, _)| *r == Err(DownReason::Killed)), "a kill was undone: {samples:?}");
}

#[test]
fn an_actor_that_ends_within_the_timeout_reports_shutdown() {
    let (tx, rx) = std::sync::mpsc::channel();
    smarm::Runtime::builder()
        .threads(2)
        .shutdown_timeout(Duration::from_secs(30))
        .build()
        .unwrap()
        .run(move || {
            tx.send(smarm::spawn(|| smarm::sleep(Duration::from_secs(3600)))).unwrap();
            smarm::yield_now();
        })
        .unwrap();
    assert_eq!(rx.recv().unwrap().join(), Err(smarm::DownReason::Shutdown));
}

/// Cleanup on the `Shutdown` unwind that makes runtime calls: sleeps, then reports how long
/// it slept.
struct SlowCleanup(std::sync::mpsc::Sender<Duration>);
impl Drop for SlowCleanup {
    fn drop(&mut self) {
        let start = Instant::now();
        smarm::sleep(20 * MS);
        self.0.send(start.elapsed()).unwrap();
    }
}

#[test]
fn an_actor_whose_cleanup_ends_within_the_timeout_reports_shutdown() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    smarm::Runtime::builder()
        .threads(2)
        .shutdown_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
        .run(move || {
            let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
            let h = smarm::spawn(move || {
                let _cleanup = SlowCleanup(done_tx);
                ready_tx.send(()).unwrap();
                smarm::sleep(Duration::from_secs(3600));
            });
            tx.send(h).unwrap();
            ready_rx.recv().unwrap();
        })
        .unwrap();
    // `run` returned after the actor ended: its cleanup has finished, or never will.
    let slept = done_rx.try_recv().expect("the cleanup did not run to its end");
    assert!(slept >= 20 * MS, "the cleanup's sleep returned after {slept:?}");
    assert_eq!(rx.recv().unwrap().join(), Err(DownReason::Shutdown));
}

#[test]
fn a_shutdown_timeout_of_duration_max_waits_for_the_actors() {
    let (tx, rx) = std::sync::mpsc::channel();
    smarm::Runtime::builder()
        .threads(2)
        .shutdown_timeout(Duration::MAX)
        .build()
        .unwrap()
        .run(move || {
            let (ready_tx, ready_rx) = smarm::channel::oneshot::<()>();
            let h = smarm::spawn(move || {
                ready_tx.send(()).unwrap();
                smarm::sleep(Duration::from_secs(3600));
            });
            tx.send(h).unwrap();
            ready_rx.recv().unwrap();
        })
        .unwrap();
    // The remaining actor got `Shutdown` (no kill deadline overflowed on the way).
    assert_eq!(rx.recv().unwrap().join(), Err(DownReason::Shutdown));
}
