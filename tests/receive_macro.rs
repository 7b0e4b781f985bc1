//! `smarm::receive!`: Erlang's selective receive. It takes the oldest envelope an arm
//! accepts and leaves the others queued in order; guards see bindings by value; `down` and
//! `exit` arms take signals; `after` times out (zero polls); bodies run in the caller's
//! frame (`break`, `return`, `?`).

use std::time::Duration;

use smarm::channel::oneshot;
use smarm::{receive, DownReason, Envelope, Mailbox, Runtime};

/// Bounds waits that only end if the behaviour under test works (a failure, not a hang).
const GUARD: Duration = Duration::from_secs(10);

#[derive(Debug, PartialEq, Eq)]
enum Msg {
    Num(u32),
    Text(String),
    Stop,
}

/// Runs `f` in an actor with a `Mailbox<Msg>` after `setup` has sent it what it needs
/// (`setup` gets the actor's address), and returns `f`'s result.
fn with_mailbox<T: Send + 'static>(
    setup: impl FnOnce(&smarm::Addr<Msg>) + Send + 'static,
    f: impl FnOnce(Mailbox<Msg>) -> T + Send + 'static,
) -> T {
    let rt = Runtime::builder().threads(2).build().unwrap();
    rt.run(move || {
        let (go_tx, go_rx) = oneshot::<()>();
        let (res_tx, mut res_rx) = oneshot();
        let addr = smarm::spawn_actor(move |mb: Mailbox<Msg>| {
            go_rx.recv().unwrap();
            assert!(res_tx.send(f(mb)).is_ok(), "the test stopped waiting");
        });
        setup(&addr);
        go_tx.send(()).unwrap();
        res_rx.recv_timeout(GUARD).expect("the receiving actor did not finish")
    })
    .unwrap()
}

/// What is left in the mailbox, oldest first.
fn drain(mb: &Mailbox<Msg>) -> Vec<Envelope<Msg>> {
    std::iter::from_fn(|| mb.try_recv().ok()).collect()
}

#[test]
fn receive_takes_the_oldest_accepted_message_and_leaves_the_others_queued_in_order() {
    let (got, left) = with_mailbox(
        |a| {
            for m in [Msg::Num(1), Msg::Text("a".into()), Msg::Num(5), Msg::Num(7), Msg::Stop] {
                a.send(m);
            }
        },
        |mb| {
            let got = receive!(mb, { Msg::Num(n) if n > 3 => n });
            (got, drain(&mb))
        },
    );
    assert_eq!(got, 5);
    assert_eq!(
        left,
        [
            Envelope::Msg(Msg::Num(1)),
            Envelope::Msg(Msg::Text("a".into())),
            Envelope::Msg(Msg::Num(7)),
            Envelope::Msg(Msg::Stop)
        ]
    );
}

#[test]
fn the_oldest_accepted_envelope_wins_whichever_arm_accepts_it() {
    let got = with_mailbox(
        |a| {
            a.send(Msg::Stop);
            a.send(Msg::Num(9));
        },
        |mb| {
            // The Num arm comes first, but Stop is older.
            receive!(mb, {
                Msg::Num(_) => "num",
                Msg::Stop => "stop",
            })
        },
    );
    assert_eq!(got, "stop");
}

#[test]
fn guards_see_non_copy_bindings_by_value_and_bodies_take_them() {
    let (taken, left) = with_mailbox(
        |a| {
            a.send(Msg::Text("no".into()));
            a.send(Msg::Text("long enough".into()));
        },
        |mb| {
            let taken: String = receive!(mb, { Msg::Text(s) if s.len() > 3 => s });
            (taken, drain(&mb))
        },
    );
    assert_eq!(taken, "long enough");
    assert_eq!(left, [Envelope::Msg(Msg::Text("no".into()))]);
}

#[test]
fn after_runs_when_nothing_is_accepted_in_time_and_keeps_every_envelope() {
    let (timed_out, left) = with_mailbox(
        |a| {
            a.send(Msg::Num(1));
            a.send(Msg::Num(2));
        },
        |mb| {
            let timed_out = receive!(mb, {
                Msg::Num(n) if n > 10 => false,
                Msg::Stop => false,
                after Duration::from_millis(5) => true,
            });
            (timed_out, drain(&mb))
        },
    );
    assert!(timed_out);
    assert_eq!(left, [Envelope::Msg(Msg::Num(1)), Envelope::Msg(Msg::Num(2))]);
}

#[test]
fn after_zero_polls_what_is_queued() {
    let got = with_mailbox(
        |a| a.send(Msg::Num(4)),
        |mb| {
            let first = receive!(mb, { Msg::Num(n) => Some(n), after Duration::ZERO => None });
            let second = receive!(mb, { Msg::Num(n) => Some(n), after Duration::ZERO => None });
            (first, second)
        },
    );
    assert_eq!(got, (Some(4), None));
}

#[test]
fn receive_without_after_parks_until_an_accepted_message_arrives() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let got = rt
        .run(|| {
            let (res_tx, mut res_rx) = oneshot();
            let (parked_tx, parked_rx) = oneshot::<()>();
            let addr = smarm::spawn_actor(move |mb: Mailbox<Msg>| {
                parked_tx.send(()).unwrap();
                let got = receive!(mb, { Msg::Num(n) if n % 2 == 0 => n });
                res_tx.send((got, drain(&mb))).unwrap();
            });
            parked_rx.recv().unwrap();
            // Sent while it waits (or before it parks): the odd one stays, the even one wakes it.
            addr.send(Msg::Num(3));
            smarm::yield_now();
            addr.send(Msg::Num(8));
            res_rx.recv_timeout(GUARD).expect("the receive was not woken by an accepted message")
        })
        .unwrap();
    assert_eq!(got, (8, vec![Envelope::Msg(Msg::Num(3))]));
}

#[test]
fn down_and_exit_arms_take_signals_and_leave_messages() {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    let got = rt
        .run(|| {
            let (res_tx, mut res_rx) = oneshot();
            let addr = smarm::spawn_actor(move |mb: Mailbox<Msg>| {
                smarm::trap_exit(true);
                let child = smarm::spawn(|| panic!("child boom"));
                let m = smarm::monitor(child.pid());
                let linked = smarm::spawn(|| ());
                let _ = smarm::link(linked.pid());
                let reason = receive!(mb, { down(d) if d.monitor == m => d.reason });
                let from = receive!(mb, {
                    exit(x) if x.from == linked.pid() => Some(x.reason),
                    after GUARD => None,
                });
                res_tx.send((reason, from, drain(&mb))).unwrap();
            });
            addr.send(Msg::Stop);
            res_rx.recv_timeout(GUARD).expect("the receiving actor did not finish")
        })
        .unwrap();
    assert_eq!(got.0, DownReason::Panic("child boom".into()));
    // The linked actor ended normally: either its Exit(Normal) arrived, or it had ended
    // before the link and a trapping caller gets Exit(NoProc).
    assert!(matches!(got.1, Some(DownReason::Normal | DownReason::NoProc)), "{:?}", got.1);
    assert_eq!(got.2, [Envelope::Msg(Msg::Stop)]);
}

#[test]
fn bodies_run_in_the_callers_frame_break_and_question_mark_work() {
    fn sum_until_stop(mb: &Mailbox<Msg>) -> Result<u32, String> {
        let mut sum = 0;
        loop {
            receive!(mb, {
                Msg::Num(n) => sum += n,
                Msg::Text(t) => return Err(t),
                Msg::Stop => break,
                after GUARD => Err::<(), _>("nothing arrived".to_string())?,
            });
        }
        Ok(sum)
    }
    let got = with_mailbox(
        |a| {
            for m in [Msg::Num(1), Msg::Num(2), Msg::Stop, Msg::Text("bad".into())] {
                a.send(m);
            }
        },
        |mb| (sum_until_stop(&mb), sum_until_stop(&mb)),
    );
    assert_eq!(got, (Ok(3), Err("bad".to_string())));
}

#[test]
fn block_bodies_need_no_comma_and_or_patterns_work() {
    let got = with_mailbox(
        |a| {
            a.send(Msg::Num(2));
            a.send(Msg::Stop);
        },
        |mb| {
            let mut seen = Vec::new();
            for _ in 0..2 {
                receive!(mb, {
                    Msg::Num(1 | 2) | Msg::Stop => {
                        seen.push("hit");
                    }
                    Msg::Num(_) => { seen.push("other") }
                    _ => seen.push("text"),
                });
            }
            seen
        },
    );
    assert_eq!(got, ["hit", "hit"]);
}
