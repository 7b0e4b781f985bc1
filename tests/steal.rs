//! Stealing between scheduler threads (`Worker::steal`): a queue's only actor is left to
//! its running owner for a nap, then taken if it is still there; longer queues are shared at
//! once. Each test ends only if the steal it needs happens (an actor that makes no runtime
//! call holds its thread), so a missing steal shows as a hang, not as a wrong count.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use smarm::Runtime;

fn run<T: Send + 'static>(threads: usize, root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(threads).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

/// The only actor queued behind a running actor that never makes a runtime call is taken by
/// the other thread after its nap: the owner waits for it, so otherwise this never ends.
#[test]
fn a_lone_actor_behind_a_stuck_owner_is_taken_after_a_nap() {
    run(2, || {
        for _ in 0..50 {
            let ran = Arc::new(AtomicBool::new(false));
            let r = ran.clone();
            let h = smarm::spawn(move || r.store(true, Ordering::Release));
            // No runtime call: this thread is stuck until the other one runs `h`.
            while !ran.load(Ordering::Acquire) {
                std::hint::spin_loop();
            }
            h.join().unwrap();
        }
    });
}

/// Actors queued two or more deep are shared without waiting: each of these spins (no
/// runtime call) until two of them run at once, which needs the other thread to take one.
#[test]
fn a_queue_of_several_is_shared_at_once() {
    let seen_both = run(2, || {
        let running = Arc::new(AtomicUsize::new(0));
        let hs: Vec<_> = (0..8)
            .map(|_| {
                let running = running.clone();
                smarm::spawn(move || {
                    let before = running.fetch_add(1, Ordering::AcqRel);
                    while running.load(Ordering::Acquire) < 2 {
                        std::hint::spin_loop();
                    }
                    before
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).any(|before| before >= 1)
    });
    assert!(seen_both);
}
