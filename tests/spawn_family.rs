//! The spawn family: every spawn form has a `try_` twin that reports instead of panicking,
//! links and monitors exist before the child runs, and `SpawnOptions` registers a name
//! before the actor runs, gives one actor its own stack size, links and pins.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use smarm::{DownReason, Envelope, Mailbox, Runtime, Signal, SpawnError, SpawnOptions};

fn rt(threads: usize) -> Runtime {
    Runtime::builder().threads(threads).quiet_panics(true).build().unwrap()
}

/// A closure that records whether it ran and whether it was dropped.
fn probe() -> (Arc<AtomicBool>, Arc<()>, impl FnOnce() + Send + 'static) {
    let ran = Arc::new(AtomicBool::new(false));
    let alive = Arc::new(());
    let (r, a) = (ran.clone(), alive.clone());
    (ran, alive, move || {
        let _a = a;
        r.store(true, Ordering::SeqCst);
    })
}

#[test]
fn every_try_spawn_outside_a_runtime_is_no_runtime_and_drops_the_closure() {
    let (ran, alive, f) = probe();
    assert!(matches!(smarm::try_spawn_link(f), Err(SpawnError::NoRuntime)));
    let (_, alive2, g) = probe();
    assert!(matches!(smarm::try_spawn_monitor(g), Err(SpawnError::NoRuntime)));
    assert!(matches!(smarm::try_spawn_actor_link(|_: Mailbox<u8>| ()), Err(SpawnError::NoRuntime)));
    assert!(matches!(smarm::try_spawn_actor_monitor(|_: Mailbox<u8>| ()), Err(SpawnError::NoRuntime)));
    assert!(matches!(SpawnOptions::new().name("x").try_spawn(|| ()), Err(SpawnError::NoRuntime)));
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(Arc::strong_count(&alive), 1);
    assert_eq!(Arc::strong_count(&alive2), 1);
}

#[test]
fn try_spawn_link_and_monitor_on_a_full_slab_report_full() {
    let rt = Runtime::builder().threads(1).max_actors(1).build().unwrap();
    rt.run(|| {
        let (ran, alive, f) = probe();
        assert!(matches!(smarm::try_spawn_link(f), Err(SpawnError::Full { max_actors: 1 })));
        let (_, alive2, g) = probe();
        assert!(matches!(smarm::try_spawn_monitor(g), Err(SpawnError::Full { .. })));
        assert!(matches!(smarm::try_spawn_actor_link(|_: Mailbox<u8>| ()), Err(SpawnError::Full { .. })));
        assert!(matches!(smarm::try_spawn_actor_monitor(|_: Mailbox<u8>| ()), Err(SpawnError::Full { .. })));
        assert!(!ran.load(Ordering::SeqCst));
        assert_eq!(Arc::strong_count(&alive), 1);
        assert_eq!(Arc::strong_count(&alive2), 1);
    })
    .unwrap();
}

#[test]
fn spawn_actor_link_reports_a_child_that_dies_at_once_with_its_real_reason() {
    rt(2)
        .run(|| {
            smarm::trap_exit(true);
            let addr = smarm::spawn_actor_link(|_: Mailbox<u8>| panic!("early"));
            match smarm::recv_signal() {
                Signal::Exit(e) => {
                    assert_eq!(e.from, addr.pid());
                    assert_eq!(e.reason, DownReason::Panic("early".into()));
                }
                other => panic!("unexpected {other:?}"),
            }
        })
        .unwrap();
}

#[test]
fn spawn_actor_link_kills_a_non_trapping_parent_when_the_child_panics() {
    let r = rt(2).run(|| {
        let addr = smarm::spawn_actor_link(|mb: Mailbox<u8>| {
            let _ = mb.recv();
            panic!("child");
        });
        addr.send(0);
        loop {
            smarm::sleep(Duration::from_millis(1)); // the exit signal stops us here
        }
    });
    assert!(matches!(r, Err(smarm::RunError::Root(DownReason::Panic(ref m))) if m == "child"), "{r:?}");
}

#[test]
fn spawn_actor_monitor_reports_a_child_that_dies_at_once_with_its_real_reason() {
    rt(2)
        .run(|| {
            let (addr, mref) = smarm::spawn_actor_monitor(|_: Mailbox<u8>| panic!("early"));
            assert_eq!(mref.target(), addr.pid());
            match smarm::recv_signal() {
                Signal::Down(d) => {
                    assert_eq!(d.monitor, mref);
                    assert_eq!(d.reason, DownReason::Panic("early".into()));
                }
                other => panic!("unexpected {other:?}"),
            }
        })
        .unwrap();
}

#[test]
fn a_named_spawn_is_registered_before_the_actor_runs() {
    rt(4)
        .run(|| {
            for i in 0..200 {
                let name = format!("early-{i}");
                let n = name.clone();
                let h = SpawnOptions::new()
                    .name(name.clone())
                    .spawn(move || smarm::whereis(&n) == Some(smarm::current_pid()));
                assert_eq!(h.join(), Ok(true), "{name} was not registered when the actor started");
                assert_eq!(smarm::whereis(&name), None, "{name} released when the actor ended");
            }
        })
        .unwrap();
}

#[test]
fn a_named_spawn_whose_name_is_taken_runs_nothing_and_notifies_nobody() {
    rt(2)
        .run(|| {
            smarm::trap_exit(true);
            let holder = SpawnOptions::new().name("taken").spawn_actor(|mb: Mailbox<()>| {
                let _ = mb.recv();
            });
            let (ran, alive, f) = probe();
            let e = SpawnOptions::new().name("taken").link().try_spawn_monitor(f).unwrap_err();
            assert!(matches!(e, SpawnError::NameTaken { holder: h } if h == holder.pid()), "{e:?}");
            assert!(e.to_string().contains(&holder.pid().to_string()));
            let e = SpawnOptions::new().name("taken").try_spawn_actor(|_: Mailbox<u8>| ()).unwrap_err();
            assert!(matches!(e, SpawnError::NameTaken { .. }));
            assert_eq!(smarm::whereis("taken"), Some(holder.pid()), "the holder keeps its name");
            // No Exit (link) and no Down (monitor) from the refused spawn.
            assert!(matches!(
                smarm::recv_signal_timeout(Duration::from_millis(50)),
                Err(smarm::RecvTimeoutError::Timeout)
            ));
            assert!(!ran.load(Ordering::SeqCst), "the refused closure never ran");
            // Its actor was stopped before it started: the closure is dropped once it retires.
            while Arc::strong_count(&alive) > 1 {
                smarm::yield_now();
            }
            holder.send(());
        })
        .unwrap();
}

#[test]
fn concurrent_named_spawns_of_one_name_let_exactly_one_win() {
    rt(4)
        .run(|| {
            for round in 0..50 {
                let name = format!("race-{round}");
                let wins = Arc::new(AtomicUsize::new(0));
                let stop = Arc::new(AtomicBool::new(false));
                let racers: Vec<_> = (0..4)
                    .map(|_| {
                        let (name, wins, stop) = (name.clone(), wins.clone(), stop.clone());
                        smarm::spawn(move || {
                            let r = SpawnOptions::new().name(name).try_spawn(move || {
                                while !stop.load(Ordering::SeqCst) {
                                    smarm::yield_now();
                                }
                            });
                            match r {
                                Ok(_) => {
                                    wins.fetch_add(1, Ordering::SeqCst);
                                }
                                Err(SpawnError::NameTaken { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                        })
                    })
                    .collect();
                for r in racers {
                    r.join().unwrap();
                }
                assert_eq!(wins.load(Ordering::SeqCst), 1, "round {round}");
                assert!(smarm::whereis(&name).is_some());
                stop.store(true, Ordering::SeqCst); // the winner ends
            }
        })
        .unwrap();
}

/// Recurses `n` frames of about 1 KiB each.
#[inline(never)]
fn deep(n: u32) -> u32 {
    let pad = std::hint::black_box([n as u8; 1024]);
    if n == 0 {
        return 0;
    }
    let d = 1 + deep(n - 1);
    std::hint::black_box(&pad); // live across the call: the frame keeps its 1 KiB
    d
}

fn maps() -> usize {
    std::fs::read_to_string("/proc/self/maps").unwrap().lines().count()
}

#[test]
fn an_actor_given_its_own_stack_size_recurses_past_the_runtimes_and_releases_it() {
    // The runtime's stacks are the minimum (32 KiB); 256 frames of 1 KiB need 8 times that.
    let rt = Runtime::builder().threads(2).stack_size(smarm::MIN_STACK_SIZE).build().unwrap();
    rt.run(|| {
        let before = maps();
        for _ in 0..64 {
            let h = SpawnOptions::new().stack_size(1 << 20).spawn(|| deep(256));
            assert_eq!(h.join(), Ok(256));
        }
        // Each own stack is unmapped when its actor ends (not pooled): 64 of them would show.
        assert!(maps() < before + 16, "maps grew from {before} to {}", maps());
        // An own stack of an actor that never runs is released too (the runtime ends first).
        drop(SpawnOptions::new().stack_size(1 << 20).spawn(|| deep(10)));
    })
    .unwrap();
}

#[test]
fn stack_sizes_outside_the_accepted_range_are_refused() {
    rt(1)
        .run(|| {
            for bytes in [0, smarm::MIN_STACK_SIZE - 1, smarm::MAX_STACK_SIZE + 1] {
                let e = SpawnOptions::new().stack_size(bytes).try_spawn(|| ()).unwrap_err();
                match e {
                    SpawnError::InvalidStackSize { requested, minimum, maximum } => {
                        assert_eq!((requested, minimum, maximum), (bytes, smarm::MIN_STACK_SIZE, smarm::MAX_STACK_SIZE))
                    }
                    other => panic!("{other:?}"),
                }
            }
            let ok = SpawnOptions::new().stack_size(smarm::MIN_STACK_SIZE).spawn(|| 1);
            assert_eq!(ok.join(), Ok(1));
        })
        .unwrap();
}

#[test]
fn spawn_options_link_and_pinned_behave_as_spawn_link_and_spawn_pinned() {
    rt(4)
        .run(|| {
            smarm::trap_exit(true);
            let h = SpawnOptions::new().link().pinned().spawn(|| {
                let home = smarm::current_thread_index();
                for _ in 0..100 {
                    smarm::yield_now();
                    assert_eq!(smarm::current_thread_index(), home);
                }
                panic!("done");
            });
            let pid = h.pid();
            match smarm::recv_signal() {
                Signal::Exit(e) => {
                    assert_eq!(e.from, pid);
                    assert_eq!(e.reason, DownReason::Panic("done".into()));
                }
                other => panic!("unexpected {other:?}"),
            }
            let (addr, mref) = SpawnOptions::new().spawn_actor_monitor(|mb: Mailbox<u32>| match mb.recv() {
                Envelope::Msg(n) => assert_eq!(n, 3),
                other => panic!("{other:?}"),
            });
            addr.send(3);
            assert!(
                matches!(smarm::recv_signal(), Signal::Down(d) if d.monitor == mref && d.reason == DownReason::Normal)
            );
        })
        .unwrap();
}
