//! Process groups (SEMANTICS.md, "pg (process groups)", and the visible-resources rule of
//! "Exit reasons and signals").
//!
//! Statement -> tests:
//!
//! - `join(group, pid)` for local pids only:
//!   join_adds_a_live_local_actor, join_of_a_dead_pid_is_noproc,
//!   join_of_a_stale_pid_is_noproc, join_of_a_pid_from_another_runtime_is_refused
//! - atomic with respect to the member's exit (a dead pid never stays a member):
//!   join_racing_the_members_exit_never_leaves_a_dead_member
//! - counted (join twice, leave twice):
//!   join_is_counted_join_twice_needs_two_leaves
//! - `leave` of a non-member says `NotJoined`:
//!   leave_of_a_non_member_is_not_joined
//! - `members`, `local_members`:
//!   members_lists_one_entry_per_join_in_join_order, local_members_are_the_members
//! - `which_groups` (non-empty only):
//!   which_groups_lists_only_non_empty_groups
//! - a dead member leaves automatically:
//!   dead_member_leaves_all_its_groups_automatically
//! - pg memberships are released before Down/Exit go out:
//!   membership_is_released_before_the_down_is_delivered,
//!   membership_is_released_before_the_first_of_many_downs_is_delivered,
//!   membership_is_released_before_the_link_exit_is_delivered
//! - `monitor_scope` streams join/leave events after a snapshot:
//!   monitor_scope_gives_a_snapshot_then_every_later_change_in_order,
//!   monitor_scope_reports_a_dead_members_leave_per_membership

use std::time::Duration;

use smarm::channel::oneshot;
use smarm::pg::{self, PgError, PgEvent};
use smarm::{DownReason, JoinHandle, Pid, Runtime, Signal};

const GUARD: Duration = Duration::from_secs(10);

fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

/// An actor parked until it is told to end (then returns) or stopped.
fn member() -> (JoinHandle<()>, smarm::channel::OneshotSender<()>) {
    let (go_tx, go_rx) = oneshot::<()>();
    let h = smarm::spawn(move || {
        let _ = go_rx.recv();
    });
    (h, go_tx)
}

fn next_down() -> smarm::Down {
    match smarm::recv_signal_timeout(GUARD) {
        Ok(Signal::Down(d)) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

fn join_ev(group: &str, pids: Vec<Pid>) -> PgEvent {
    PgEvent::Join { group: group.into(), pids }
}

fn leave_ev(group: &str, pids: Vec<Pid>) -> PgEvent {
    PgEvent::Leave { group: group.into(), pids }
}

#[test]
fn join_adds_a_live_local_actor() {
    run(|| {
        let (a, _ga) = member();
        assert_eq!(pg::join("g", a.pid()), Ok(()));
        assert_eq!(pg::members("g"), [a.pid()]);
        // Joining oneself works too.
        let me = smarm::current_pid();
        assert_eq!(pg::join("g", me), Ok(()));
        assert_eq!(pg::members("g"), [a.pid(), me]);
    });
}

#[test]
fn join_of_a_dead_pid_is_noproc() {
    run(|| {
        let h = smarm::spawn(|| ());
        let dead = h.pid();
        h.join().unwrap();
        assert_eq!(pg::join("g", dead), Err(PgError::NoProc));
        assert_eq!(pg::members("g"), []);
        assert_eq!(pg::which_groups(), Vec::<String>::new());
    });
}

#[test]
fn join_of_a_stale_pid_is_noproc() {
    let rt = Runtime::builder().threads(2).max_actors(2).build().unwrap();
    rt.run(|| {
        let h = smarm::spawn(|| ());
        let stale = h.pid();
        h.join().unwrap();
        // The spare slot is reused by a new actor.
        let (new, go_tx) = loop {
            let (go_tx, go_rx) = oneshot::<()>();
            match smarm::try_spawn(move || {
                let _ = go_rx.recv();
            }) {
                Ok(h) => break (h, go_tx),
                Err(smarm::SpawnError::Full { .. }) => smarm::yield_now(),
                Err(e) => panic!("{e}"),
            }
        };
        assert_eq!(slot_of(new.pid()), slot_of(stale), "setup: the slot was not reused");
        assert_ne!(new.pid(), stale);
        assert_eq!(pg::join("g", stale), Err(PgError::NoProc));
        assert_eq!(pg::members("g"), []);
        go_tx.send(()).unwrap();
        new.join().unwrap();
    })
    .unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn join_of_a_pid_from_another_runtime_is_refused() {
    // A pid of a live actor in another runtime.
    let (pid_tx, pid_rx) = std::sync::mpsc::channel::<Pid>();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        Runtime::builder().threads(1).build().unwrap().run(move || {
            let h = smarm::spawn(|| ());
            pid_tx.send(h.pid()).unwrap();
            h.join().unwrap();
            // Keep this runtime alive while the other one runs.
            let _ = stop_rx.recv();
        })
    });
    let foreign = pid_rx.recv().unwrap();
    run(move || {
        // A local actor in the same slot with the same generation.
        let (local, _go) = member();
        assert_eq!(
            local.pid().to_string(),
            foreign.to_string(),
            "setup: the local actor is not in the foreign pid's slot and generation"
        );
        assert_ne!(local.pid(), foreign, "pids of two runtimes compared equal");
        assert_eq!(pg::join("g", foreign), Err(PgError::NoProc), "a pid of another runtime was joined");
    });
    stop_tx.send(()).unwrap();
    other.join().unwrap().unwrap();
}

#[test]
fn join_is_counted_join_twice_needs_two_leaves() {
    run(|| {
        let (a, _ga) = member();
        let p = a.pid();
        pg::join("g", p).unwrap();
        pg::join("g", p).unwrap();
        assert_eq!(pg::members("g"), [p, p]);
        assert_eq!(pg::leave("g", p), Ok(()));
        assert_eq!(pg::members("g"), [p]);
        assert_eq!(pg::which_groups(), ["g"]);
        assert_eq!(pg::leave("g", p), Ok(()));
        assert_eq!(pg::members("g"), []);
        assert_eq!(pg::leave("g", p), Err(PgError::NotJoined));
    });
}

#[test]
fn leave_of_a_non_member_is_not_joined() {
    run(|| {
        let (a, _ga) = member();
        let (b, _gb) = member();
        assert_eq!(pg::leave("nowhere", a.pid()), Err(PgError::NotJoined));
        pg::join("g", a.pid()).unwrap();
        assert_eq!(pg::leave("g", b.pid()), Err(PgError::NotJoined));
        assert_eq!(pg::members("g"), [a.pid()]);
    });
}

#[test]
fn members_lists_one_entry_per_join_in_join_order() {
    run(|| {
        let (a, _ga) = member();
        let (b, _gb) = member();
        let (c, _gc) = member();
        pg::join("g", b.pid()).unwrap();
        pg::join("g", a.pid()).unwrap();
        pg::join("g", c.pid()).unwrap();
        pg::join("g", a.pid()).unwrap();
        pg::join("h", c.pid()).unwrap();
        assert_eq!(pg::members("g"), [b.pid(), a.pid(), c.pid(), a.pid()]);
        assert_eq!(pg::members("h"), [c.pid()]);
        assert_eq!(pg::members("unknown"), []);
    });
}

#[test]
fn local_members_are_the_members() {
    run(|| {
        let (a, _ga) = member();
        let (b, _gb) = member();
        pg::join("g", a.pid()).unwrap();
        pg::join("g", b.pid()).unwrap();
        assert_eq!(pg::local_members("g"), pg::members("g"));
        assert_eq!(pg::local_members("g"), [a.pid(), b.pid()]);
    });
}

#[test]
fn which_groups_lists_only_non_empty_groups() {
    run(|| {
        let (a, _ga) = member();
        assert_eq!(pg::which_groups(), Vec::<String>::new());
        pg::join("x", a.pid()).unwrap();
        pg::join("y", a.pid()).unwrap();
        let mut g = pg::which_groups();
        g.sort();
        assert_eq!(g, ["x", "y"]);
        pg::leave("x", a.pid()).unwrap();
        assert_eq!(pg::which_groups(), ["y"]);
        pg::leave("y", a.pid()).unwrap();
        assert_eq!(pg::which_groups(), Vec::<String>::new());
    });
}

#[test]
fn dead_member_leaves_all_its_groups_automatically() {
    run(|| {
        let (a, ga) = member();
        let (b, _gb) = member();
        let p = a.pid();
        pg::join("x", p).unwrap();
        pg::join("x", p).unwrap();
        pg::join("y", p).unwrap();
        pg::join("x", b.pid()).unwrap();
        ga.send(()).unwrap();
        a.join().unwrap();
        assert_eq!(pg::members("x"), [b.pid()]);
        assert_eq!(pg::members("y"), []);
        assert_eq!(pg::which_groups(), ["x"]);

        // Killed and panicking members too.
        let (k, _gk) = member();
        pg::join("z", k.pid()).unwrap();
        smarm::kill(k.pid());
        assert_eq!(k.join(), Err(DownReason::Killed));
        let p = smarm::spawn(|| {
            pg::join("z", smarm::current_pid()).unwrap();
            panic!("member crash");
        });
        assert!(p.join().is_err());
        assert_eq!(pg::members("z"), []);
    });
}

#[test]
fn membership_is_released_before_the_down_is_delivered() {
    run(|| {
        for round in 0..100 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let (h, m) = smarm::spawn_monitor(move || {
                pg::join("g", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                if round % 2 == 1 {
                    panic!("member crash");
                }
            });
            ready_rx.recv().unwrap();
            assert_eq!(pg::members("g"), [h.pid()]);
            go_tx.send(()).unwrap();
            assert_eq!(next_down().monitor, m);
            assert_eq!(pg::members("g"), [], "round {round}: still a member when its Down arrived");
            assert_eq!(pg::which_groups(), Vec::<String>::new());
        }
    });
}

#[test]
fn membership_is_released_before_the_first_of_many_downs_is_delivered() {
    const CROWD: usize = 5000;
    run(|| {
        for round in 0..20 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let target = smarm::spawn(move || {
                pg::join("crowded", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            ready_rx.recv().unwrap();
            // A watcher with many monitors spins on its own thread; the target, still
            // queueing Downs when the first one is seen, runs on the other.
            let t = target.pid();
            let (set_tx, set_rx) = oneshot::<()>();
            let (res_tx, res_rx) = oneshot::<Vec<Pid>>();
            smarm::spawn(move || {
                for _ in 0..CROWD {
                    smarm::monitor(t);
                }
                // Told from a plain thread, so the test goes on on the other scheduler thread
                // (a wake from here would wait in this thread's wake slot while we spin).
                std::thread::spawn(move || set_tx.send(()).unwrap()).join().unwrap();
                while smarm::recv_signal_timeout(Duration::ZERO).is_err() {
                    std::hint::spin_loop();
                }
                let members = pg::members("crowded");
                for _ in 1..CROWD {
                    next_down();
                }
                res_tx.send(members).unwrap();
            });
            set_rx.recv().unwrap();
            go_tx.send(()).unwrap();
            assert_eq!(res_rx.recv().unwrap(), [], "round {round}: still a member at the first Down");
        }
    });
}

#[test]
fn membership_is_released_before_the_link_exit_is_delivered() {
    run(|| {
        smarm::trap_exit(true);
        for round in 0..50 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let h = smarm::spawn_link(move || {
                pg::join("g", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            ready_rx.recv().unwrap();
            go_tx.send(()).unwrap();
            match smarm::recv_signal_timeout(GUARD) {
                Ok(Signal::Exit(x)) => assert_eq!(x.from, h.pid()),
                other => panic!("expected an Exit, got {other:?}"),
            }
            assert_eq!(pg::members("g"), [], "round {round}");
        }
    });
}

#[test]
fn monitor_scope_gives_a_snapshot_then_every_later_change_in_order() {
    run(|| {
        let (a, _ga) = member();
        let (b, _gb) = member();
        pg::join("g", a.pid()).unwrap();
        pg::join("g", a.pid()).unwrap();
        pg::join("h", b.pid()).unwrap();
        let (snapshot, events) = pg::monitor_scope();
        assert_eq!(snapshot.len(), 2);
        assert_eq!(snapshot["g"], [a.pid(), a.pid()]);
        assert_eq!(snapshot["h"], [b.pid()]);
        // Nothing from before the snapshot.
        assert!(events.try_recv().is_err());

        pg::join("h", a.pid()).unwrap();
        pg::leave("g", a.pid()).unwrap();
        pg::leave("h", b.pid()).unwrap();
        assert_eq!(pg::leave("h", b.pid()), Err(PgError::NotJoined));
        let got: Vec<PgEvent> = (0..3).map(|_| events.recv_timeout(GUARD).unwrap()).collect();
        assert_eq!(got, [join_ev("h", vec![a.pid()]), leave_ev("g", vec![a.pid()]), leave_ev("h", vec![b.pid()])]);
        // A failed leave publishes nothing.
        assert!(events.try_recv().is_err());
    });
}

#[test]
fn monitor_scope_reports_a_dead_members_leave_per_membership() {
    run(|| {
        let (a, ga) = member();
        let p = a.pid();
        let (snapshot, events) = pg::monitor_scope();
        assert!(snapshot.is_empty());
        pg::join("g", p).unwrap();
        pg::join("g", p).unwrap();
        pg::join("h", p).unwrap();
        ga.send(()).unwrap();
        a.join().unwrap();
        let got: Vec<PgEvent> = events.try_iter().collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert_eq!(got[..3], [join_ev("g", vec![p]), join_ev("g", vec![p]), join_ev("h", vec![p])]);
        // One Leave per group, naming the member once per membership (group order unspecified).
        let mut leaves = got[3..].to_vec();
        leaves.sort_by_key(|e| format!("{e:?}"));
        assert_eq!(leaves, [leave_ev("g", vec![p, p]), leave_ev("h", vec![p])]);
    });
}

/// The slot index of a pid, from its `<0.index.gen>` rendering.
fn slot_of(pid: Pid) -> String {
    pid.to_string().trim_matches(|c| c == '<' || c == '>').split('.').nth(1).unwrap().to_string()
}

/// `join` and the member's exit are atomic with respect to each other (SEMANTICS.md: "a
/// dead pid never stays a member"). A join of a target that is ending on another thread
/// either fails with `NoProc` or adds a membership that the target's exit removes.
///
/// The target spins on its own scheduler thread and returns when told; the join is made
/// right after telling it. A hog keeps the pg lock busy (cloning a big group), so that the
/// join (past its liveness check) and the target's exit often both wait for that lock: the
/// interleaving in which a join that records the membership in two steps, under two locks,
/// adds the pid after the exit removed its memberships.
#[test]
fn join_racing_the_members_exit_never_leaves_a_dead_member() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    const BIG: usize = 100_000;
    const ROUNDS: usize = 300;
    let rt = Runtime::builder().threads(3).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let me = smarm::current_pid();
        for _ in 0..BIG {
            pg::join("big", me).unwrap();
        }
        // SeqCst for every flag below: test flags, no ordering argument wanted.
        let stop = Arc::new(AtomicBool::new(false));
        let hog_stop = stop.clone();
        let hog = smarm::spawn(move || {
            while !hog_stop.load(Ordering::SeqCst) {
                std::hint::black_box(pg::members("big"));
                smarm::maybe_preempt();
            }
        });
        let mut noproc = 0;
        for round in 0..ROUNDS {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let go = Arc::new(AtomicBool::new(false));
            let go2 = go.clone();
            let t = smarm::spawn(move || {
                // Told from a plain thread, so that we go on on another scheduler thread
                // (a wake from here would wait in this thread's wake slot while it spins).
                std::thread::spawn(move || ready_tx.send(()).unwrap()).join().unwrap();
                while !go2.load(Ordering::SeqCst) {
                    std::hint::spin_loop();
                }
            });
            let target = t.pid();
            let mref = smarm::monitor(target);
            ready_rx.recv().unwrap();
            go.store(true, Ordering::SeqCst);
            match pg::join("g", target) {
                Ok(()) => {}
                Err(PgError::NoProc) => noproc += 1,
                Err(e) => panic!("join: {e}"),
            }
            let d = next_down();
            assert_eq!((d.monitor, d.reason), (mref, DownReason::Normal));
            assert!(
                !pg::members("g").contains(&target),
                "round {round}: {target} ended but is still a member of g (joins refused so far: {noproc})"
            );
        }
        stop.store(true, Ordering::SeqCst);
        hog.join().unwrap();
        assert_eq!(pg::members("g"), []);
    })
    .unwrap_or_else(|e| panic!("{e}"));
}
