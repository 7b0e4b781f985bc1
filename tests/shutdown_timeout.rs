//! SEMANTICS.md "Runtime shutdown": remaining actors get `Shutdown`, then `Killed` after the
//! runtime's shutdown timeout.

use std::time::{Duration, Instant};

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
                smarm::sleep(Duration::from_secs(10)); // the next runtime call: now a kill
            });
            tx.send(h).unwrap();
            smarm::sleep(Duration::from_millis(5));
            7
        });
    assert_eq!(r.unwrap(), 7);
    assert_eq!(rx.recv().unwrap().join(), Err(smarm::DownReason::Killed));
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
