//! Names and typed lookups: `Addr::from_pid`, `Addr::try_send` to an ended actor,
//! `registered`, `monitor_name`, and the name functions on a plain thread (OTP's
//! `whereis/1`, `registered/0`, `monitor(process, Name)`; SEMANTICS.md "Names across threads").

use std::time::Duration;

use smarm::channel::{oneshot, SendError};
use smarm::{pg, Addr, DownReason, Envelope, LookupError, Mailbox, Pid, RegisterError, Runtime, Signal};

/// Bounds waits that only end if the behaviour under test works (a failure, not a hang).
const GUARD: Duration = Duration::from_secs(10);

fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

fn next_down() -> smarm::Down {
    match smarm::recv_signal_timeout(GUARD) {
        Ok(Signal::Down(d)) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

/// An actor with a `Mailbox<u32>` that forwards what it receives to `out`, until told 0.
fn forwarder(out: smarm::channel::Sender<u32>) -> Addr<u32> {
    smarm::spawn_actor(move |mb: Mailbox<u32>| loop {
        match mb.recv() {
            Envelope::Msg(0) => break,
            Envelope::Msg(n) => out.send(n).unwrap(),
            _ => {}
        }
    })
}

/// A plain `spawn` actor that waits until `go` fires (or is dropped).
fn parked_plain() -> (smarm::JoinHandle<()>, smarm::channel::OneshotSender<()>) {
    let (go, wait) = oneshot::<()>();
    let h = smarm::spawn(move || {
        let _ = wait.recv();
    });
    (h, go)
}

#[test]
fn from_pid_gives_an_addr_that_reaches_the_actor() {
    run(|| {
        let (tx, rx) = smarm::channel::channel();
        let addr = forwarder(tx);
        let found = Addr::<u32>::from_pid(addr.pid()).unwrap();
        assert_eq!(found, addr);
        found.send(5);
        assert_eq!(rx.recv_timeout(GUARD), Ok(5));
        found.send(0);
    });
}

#[test]
fn from_pid_of_a_mailbox_of_another_type_is_wrong_type_naming_the_type_asked_for() {
    run(|| {
        let (tx, _rx) = smarm::channel::channel();
        let addr = forwarder(tx);
        assert_eq!(
            Addr::<String>::from_pid(addr.pid()),
            Err(LookupError::WrongType { expected: std::any::type_name::<String>() })
        );
        addr.send(0);
    });
}

#[test]
fn from_pid_of_a_plain_spawn_actor_is_no_mailbox_with_or_without_a_signal_box() {
    run(|| {
        let (h, go) = parked_plain();
        assert_eq!(Addr::<u32>::from_pid(h.pid()), Err(LookupError::NoMailbox));
        // An actor that traps exits has a signal-only mailbox: still nothing to send to.
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (go2, wait2) = oneshot::<()>();
        let trapping = smarm::spawn(move || {
            smarm::trap_exit(true);
            ready_tx.send(()).unwrap();
            let _ = wait2.recv();
        });
        ready_rx.recv().unwrap();
        assert_eq!(Addr::<u32>::from_pid(trapping.pid()), Err(LookupError::NoMailbox));
        go.send(()).unwrap();
        go2.send(()).unwrap();
        h.join().unwrap();
        trapping.join().unwrap();
    });
}

#[test]
fn from_pid_of_an_ended_actor_or_another_runtimes_pid_is_noproc() {
    let foreign: Pid = run(smarm::current_pid);
    run(move || {
        let (tx, _rx) = smarm::channel::channel();
        let addr = forwarder(tx);
        smarm::monitor(addr.pid());
        addr.send(0);
        next_down();
        assert_eq!(Addr::<u32>::from_pid(addr.pid()), Err(LookupError::NoProc));
        assert_eq!(Addr::<u32>::from_pid(foreign), Err(LookupError::NoProc));
    });
}

#[test]
fn pg_members_can_be_messaged_through_from_pid() {
    run(|| {
        let (tx, rx) = smarm::channel::channel();
        let addrs: Vec<Addr<u32>> = (0..3).map(|_| forwarder(tx.clone())).collect();
        for a in &addrs {
            pg::join("workers", a.pid()).unwrap();
        }
        for (i, pid) in pg::members("workers").into_iter().enumerate() {
            Addr::<u32>::from_pid(pid).unwrap().send(10 + i as u32);
        }
        let mut got: Vec<u32> = (0..3).map(|_| rx.recv_timeout(GUARD).unwrap()).collect();
        got.sort_unstable();
        assert_eq!(got, [10, 11, 12]);
        for a in &addrs {
            a.send(0);
        }
    });
}

#[test]
fn try_send_reports_an_ended_actor_and_hands_the_message_back() {
    run(|| {
        let (tx, rx) = smarm::channel::channel();
        let addr = forwarder(tx);
        assert_eq!(addr.try_send(3), Ok(()));
        assert_eq!(rx.recv_timeout(GUARD), Ok(3));
        smarm::monitor(addr.pid());
        addr.send(0);
        next_down();
        assert_eq!(addr.try_send(4), Err(SendError(4)));
        addr.send(5); // the fire-and-forget form stays silent
    });
}

#[test]
fn registered_lists_the_names_of_live_actors_sorted() {
    run(|| {
        assert_eq!(smarm::registered(), Vec::<String>::new());
        let (h, go) = parked_plain();
        smarm::register("zeta", h.pid()).unwrap();
        smarm::register("alpha", smarm::current_pid()).unwrap();
        assert_eq!(smarm::registered(), ["alpha", "zeta"]);
        smarm::monitor(h.pid());
        go.send(()).unwrap();
        next_down();
        // Released before the Down went out.
        assert_eq!(smarm::registered(), ["alpha"]);
        smarm::unregister("alpha");
        assert!(smarm::registered().is_empty());
    });
}

#[test]
fn monitor_name_follows_the_named_actor_and_its_down_carries_the_name() {
    run(|| {
        let (h, go) = parked_plain();
        smarm::register("svc", h.pid()).unwrap();
        let m = smarm::monitor_name("svc");
        assert_eq!(m.target(), h.pid());
        go.send(()).unwrap();
        let d = next_down();
        assert_eq!(d.monitor, m);
        assert_eq!(d.pid, h.pid());
        assert_eq!(d.name.as_deref(), Some("svc"));
        assert_eq!(d.reason, DownReason::Normal);
    });
}

#[test]
fn monitor_name_of_an_unknown_name_is_noproc_at_once() {
    run(|| {
        let m = smarm::monitor_name("nobody");
        // Queued already: a poll finds it.
        match smarm::recv_signal_timeout(Duration::ZERO) {
            Ok(Signal::Down(d)) => {
                assert_eq!(d.monitor, m);
                assert_eq!(d.reason, DownReason::NoProc);
                assert_eq!(d.name.as_deref(), Some("nobody"));
                assert_eq!(Addr::<u32>::from_pid(d.pid), Err(LookupError::NoProc));
            }
            other => panic!("expected a NoProc Down at once, got {other:?}"),
        }
    });
}

#[test]
fn monitor_name_stays_on_the_actor_when_the_name_moves() {
    run(|| {
        let (first, go_first) = parked_plain();
        let (second, go_second) = parked_plain();
        smarm::register("svc", first.pid()).unwrap();
        let m = smarm::monitor_name("svc");
        // As in OTP the monitor is on the process the name named when it was set up.
        smarm::unregister("svc");
        smarm::register("svc", second.pid()).unwrap();
        go_second.send(()).unwrap();
        second.join().unwrap();
        assert!(smarm::recv_signal_timeout(Duration::ZERO).is_err(), "the new holder's exit fired the monitor");
        go_first.send(()).unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.pid, d.name.as_deref()), (m, first.pid(), Some("svc")));
    });
}

#[test]
fn demonitor_of_a_name_monitor_prevents_its_down() {
    run(|| {
        let (h, go) = parked_plain();
        smarm::register("svc", h.pid()).unwrap();
        let m = smarm::monitor_name("svc");
        assert!(smarm::demonitor(m));
        go.send(()).unwrap();
        h.join().unwrap();
        assert!(smarm::recv_signal_timeout(Duration::ZERO).is_err(), "a Down arrived after demonitor");
    });
}

#[test]
fn name_functions_on_a_plain_thread_report_no_runtime_without_panicking() {
    let check = |pid: Pid| {
        assert_eq!(smarm::whereis("svc"), None);
        assert_eq!(smarm::whereis_addr::<u32>("svc"), Err(LookupError::NoRuntime));
        assert_eq!(smarm::send_named("svc", 1u32), Err(LookupError::NoRuntime));
        assert!(smarm::registered().is_empty());
        assert_eq!(smarm::unregister("svc"), None);
        assert_eq!(smarm::register("svc", pid), Err(RegisterError::NoRuntime));
    };
    let old = run(smarm::current_pid);
    check(old);
    // Also while a runtime runs and the name is registered there.
    run(move || {
        smarm::register("svc", smarm::current_pid()).unwrap();
        let me = smarm::current_pid();
        std::thread::spawn(move || {
            check(me);
            assert_eq!(Addr::<u32>::from_pid(me), Err(LookupError::NoRuntime));
        })
        .join()
        .unwrap();
        assert_eq!(smarm::whereis("svc"), Some(me), "the plain thread's calls changed the registry");
    });
}

#[test]
fn lookup_and_register_errors_are_std_errors() {
    fn is_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> String {
        e.to_string()
    }
    assert!(is_error(LookupError::NoProc).contains("no live actor"));
    assert!(is_error(LookupError::WrongType { expected: "u32" }).contains("u32"));
    assert!(is_error(RegisterError::NoRuntime).contains("outside"));
}
