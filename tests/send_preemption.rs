//! Sends count toward the sender's timeslice: a send to a live receiver never blocks, so
//! actors that loop on sends must still be preempted, or they keep their scheduler thread
//! from everything else, the receiver included. Each test runs unbounded senders on a
//! one-thread runtime until the consumer has received `K` messages and tells them to stop.
//!
//! Without preemption on the send path the consumer never runs and the test would hang;
//! a watchdog thread turns that into a failure (it aborts the test process with a message
//! after a generous limit; the limit only detects the hang, nothing waits for it).

use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use smarm::{Envelope, Mailbox, Runtime};

/// Messages the consumer must receive.
const K: u64 = 20_000;
const SENDERS: usize = 4;
/// Far beyond what the tests take (well under a second); only a hang reaches it.
const WATCHDOG: Duration = Duration::from_secs(60);

/// Runs `body`; aborts the process with a message if it has not returned within `WATCHDOG`.
fn with_watchdog<T>(what: &'static str, body: impl FnOnce() -> T) -> T {
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let dog = std::thread::spawn(move || {
        if let Err(RecvTimeoutError::Timeout) = done_rx.recv_timeout(WATCHDOG) {
            // Straight to the stream: the harness's capture of `eprintln!` dies with us.
            let _ = writeln!(
                std::io::stderr(),
                "{what}: the consumer did not receive {K} messages within {WATCHDOG:?}: the senders never yield"
            );
            std::process::abort();
        }
    });
    let r = body();
    done_tx.send(()).unwrap();
    dog.join().unwrap();
    r
}

#[test]
fn consumer_keeps_up_with_unbounded_addr_senders_on_one_thread() {
    let received = with_watchdog("Addr::send", || {
        let rt = Runtime::builder().threads(1).build().unwrap();
        rt.run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let received = Arc::new(AtomicU64::new(0));
            let consumer = {
                let (stop, received) = (stop.clone(), received.clone());
                smarm::spawn_actor(move |mb: Mailbox<u64>| {
                    while received.load(Ordering::SeqCst) < K {
                        if let Envelope::Msg(_) = mb.recv() {
                            received.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    stop.store(true, Ordering::SeqCst);
                })
            };
            let senders: Vec<_> = (0..SENDERS)
                .map(|_| {
                    let (stop, consumer) = (stop.clone(), consumer.clone());
                    smarm::spawn(move || {
                        let mut sent = 0u64;
                        while !stop.load(Ordering::SeqCst) {
                            consumer.send(sent);
                            sent += 1;
                        }
                        sent
                    })
                })
                .collect();
            let sent: u64 = senders.into_iter().map(|h| h.join().unwrap()).sum();
            assert!(sent >= K, "{sent} messages sent in all");
            received.load(Ordering::SeqCst)
        })
        .unwrap()
    });
    assert_eq!(received, K);
}

#[test]
fn consumer_keeps_up_with_unbounded_channel_senders_on_one_thread() {
    let received = with_watchdog("channel Sender::send", || {
        let rt = Runtime::builder().threads(1).build().unwrap();
        rt.run(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (tx, rx) = smarm::channel::channel::<u64>();
            let consumer = {
                let stop = stop.clone();
                smarm::spawn(move || {
                    let mut received = 0;
                    while received < K {
                        rx.recv().unwrap();
                        received += 1;
                    }
                    stop.store(true, Ordering::SeqCst);
                    received
                })
            };
            let senders: Vec<_> = (0..SENDERS)
                .map(|_| {
                    let (stop, tx) = (stop.clone(), tx.clone());
                    smarm::spawn(move || {
                        let mut sent = 0u64;
                        // Ends on the flag, or when the consumer (and its receiver) is gone.
                        while !stop.load(Ordering::SeqCst) && tx.send(sent).is_ok() {
                            sent += 1;
                        }
                        sent
                    })
                })
                .collect();
            drop(tx);
            let sent: u64 = senders.into_iter().map(|h| h.join().unwrap()).sum();
            assert!(sent >= K, "{sent} messages sent in all");
            consumer.join().unwrap()
        })
        .unwrap()
    });
    assert_eq!(received, K);
}
