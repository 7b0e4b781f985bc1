//! Selective receive over a long mailbox: the save marker (a receive woken by new envelopes
//! looks only at those) and marks (a receive for something made after a mark skips what was
//! queued before it). Each test counts how often the predicate is asked, which is what both
//! promise to bound.

use std::cell::Cell;

use smarm::{Envelope, Mailbox, Runtime};

const QUEUED: u32 = 1_000;

/// One scheduler thread: a `yield_now` of the root runs the actor it just woke, so the
/// receive parks between the sends below.
fn one_thread<T: Send + 'static>(body: impl FnOnce() -> T + Send + 'static) -> T {
    Runtime::builder().threads(1).build().unwrap().run(body).unwrap()
}

#[test]
fn a_woken_selective_receive_looks_only_at_what_arrived_since() {
    let asked = one_thread(|| {
        let (tx, rx) = smarm::channel::oneshot();
        let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            let asked = Cell::new(0u64);
            let got = mb.recv_match(|e| {
                asked.set(asked.get() + 1);
                matches!(e, Envelope::Msg(u32::MAX))
            });
            assert_eq!(got, Envelope::Msg(u32::MAX));
            tx.send((asked.get(), mb.len())).unwrap();
        });
        for n in 0..QUEUED {
            a.send(n);
        }
        smarm::yield_now(); // the receive looks at the 1,000 and parks
        for n in 0..10 {
            a.send(QUEUED + n); // each wakes it; none matches
            smarm::yield_now();
        }
        a.send(u32::MAX);
        rx.recv().unwrap()
    });
    // Each envelope asked about once: 1,000 + 10 + the match. Rescanning on every wake
    // would ask 1,000 + 1,001 + ... + 1,010 + 1,011 times.
    assert_eq!(asked, (u64::from(QUEUED) + 11, QUEUED as usize + 10));
}

#[test]
fn receive_macro_has_the_save_marker_too() {
    let asked = one_thread(|| {
        let (tx, rx) = smarm::channel::oneshot();
        let a = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            let asked = Cell::new(0u64);
            let count = || {
                asked.set(asked.get() + 1);
                true
            };
            let got = smarm::receive!(mb, {
                n if count() && n == u32::MAX => n,
            });
            assert_eq!(got, u32::MAX);
            tx.send(asked.get()).unwrap();
        });
        for n in 0..QUEUED {
            a.send(n);
        }
        smarm::yield_now();
        for n in 0..10 {
            a.send(QUEUED + n);
            smarm::yield_now();
        }
        a.send(u32::MAX);
        rx.recv().unwrap()
    });
    // Each envelope once (1,011), and the guard once more for the match: the macro
    // matches the taken envelope again to bind its arm.
    assert_eq!(asked, u64::from(QUEUED) + 12);
}

#[test]
fn a_receive_from_a_mark_skips_what_was_queued_before_it() {
    let (asked, left) = one_thread(|| {
        let (tx, rx) = smarm::channel::oneshot();
        smarm::spawn_actor(move |mb: Mailbox<u32>| {
            for n in 0..QUEUED {
                mb.addr().send(n);
            }
            let child = smarm::spawn(|| ());
            let mark = mb.mark();
            let m = smarm::monitor(child.pid());
            let asked = Cell::new(0u64);
            let down = mb.recv_match_from(mark, |e| {
                asked.set(asked.get() + 1);
                matches!(e, Envelope::Down(d) if d.monitor == m)
            });
            assert!(matches!(down, Envelope::Down(d) if d.pid == child.pid()));
            tx.send((asked.get(), mb.len())).unwrap();
        });
        rx.recv().unwrap()
    });
    assert_eq!((asked, left), (1, QUEUED as usize), "only the Down was looked at; the rest stay queued");
}

#[test]
fn a_mark_after_which_an_envelope_was_taken_searches_the_whole_queue() {
    let got = one_thread(|| {
        let (tx, rx) = smarm::channel::oneshot();
        smarm::spawn_actor(move |mb: Mailbox<u32>| {
            mb.addr().send(1);
            mb.addr().send(2);
            let mark = mb.mark(); // the queue's end: index 2
            assert_eq!(mb.try_recv(), Ok(Envelope::Msg(1))); // the 2 moves to index 0
            mb.addr().send(3); // after the mark, now at index 1
                               // Skipping the mark's 2 envelopes would skip the 3: the taken envelope makes
                               // the receive search from the head instead.
            let three = mb.recv_match_from_timeout(mark, std::time::Duration::ZERO, |e| *e == Envelope::Msg(3));
            tx.send((three, mb.try_recv())).unwrap();
        });
        rx.recv().unwrap()
    });
    assert_eq!(got, (Ok(Envelope::Msg(3)), Ok(Envelope::Msg(2))));
}

#[test]
fn a_mark_of_another_mailbox_is_refused() {
    let outcome = one_thread(|| {
        let (tx, rx) = smarm::channel::oneshot();
        let other = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            tx.send(mb.mark()).unwrap();
            let _ = mb.recv();
        });
        let mark = rx.recv().unwrap();
        let h = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            let _ = mb.recv_match_from_timeout(mark, std::time::Duration::ZERO, |_| true);
        });
        smarm::monitor(h.pid());
        let signal = smarm::recv_signal();
        other.send(0);
        signal
    });
    let down = match outcome {
        smarm::Signal::Down(d) => d,
        other => panic!("expected a Down, got {other:?}"),
    };
    assert!(format!("{:?}", down.reason).contains("another actor's mailbox"), "{:?}", down.reason);
}

#[test]
fn an_envelope_lost_to_a_panicking_receive_guard_invalidates_a_mark() {
    let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    let got = rt
        .run(|| {
            let (tx, rx) = smarm::channel::oneshot();
            smarm::spawn_actor(move |mb: Mailbox<u32>| {
                mb.addr().send(1);
                mb.addr().send(2);
                let mark = mb.mark(); // two envelopes before it
                mb.addr().send(3);
                // A guard that panics on the 1: the receive loses it, and the 3 (the last
                // envelope) takes its place at the head, before the mark's position.
                let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    smarm::receive!(mb, {
                        n if n == 1 && panic!("guard failed") => n,
                        n if n == 99 => n,
                        after std::time::Duration::ZERO => 0,
                    })
                }));
                assert!(caught.is_err());
                let three = mb.recv_match_from_timeout(mark, std::time::Duration::ZERO, |e| *e == Envelope::Msg(3));
                tx.send((three, mb.len())).unwrap();
            });
            rx.recv().unwrap()
        })
        .unwrap();
    assert_eq!(got, (Ok(Envelope::Msg(3)), 1), "the 3 was skipped by a stale mark");
}
