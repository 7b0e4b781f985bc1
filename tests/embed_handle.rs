//! Embedding: a `Handle` spawns and stops a runtime from plain threads (a SIGTERM watcher
//! included), `shutdown` off an actor does nothing, `send_after` from plain threads shares
//! one timer thread, and the runtime's threads carry the builder's name and hooks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use smarm::{DownReason, Envelope, Handle, Mailbox, RunError, Runtime, SpawnError};

fn thread_names() -> Vec<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_string())
        .collect()
}

#[test]
fn a_handle_spawns_from_a_plain_thread_and_addr_sends_reach_the_actor() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let handle = rt.handle();
    let (ready_tx, ready_rx) = mpsc::channel::<()>();
    let outside = std::thread::spawn(move || {
        ready_rx.recv().unwrap(); // the root runs: the runtime is up
        let (tx, rx) = mpsc::channel();
        let addr = handle.spawn_actor(move |mb: Mailbox<u32>| {
            while let Envelope::Msg(n) = mb.recv() {
                tx.send((n, smarm::current_pid())).unwrap();
            }
        });
        for n in 0..100 {
            addr.send(n);
        }
        let got: Vec<u32> = (0..100).map(|_| rx.recv().unwrap().0).collect();
        assert_eq!(got, (0..100).collect::<Vec<_>>(), "in order, from a plain thread");
        let joined = handle.spawn(smarm::current_pid).join();
        assert!(joined.is_ok());
        assert!(handle.shutdown());
    });
    let r = rt.run(move || {
        ready_tx.send(()).unwrap();
        loop {
            smarm::sleep(Duration::from_millis(1));
        }
    });
    assert!(matches!(r, Err(RunError::Root(DownReason::Shutdown))), "{r:?}");
    outside.join().unwrap();
}

#[test]
fn a_handle_outside_the_runs_lifetime_is_not_running() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    let handle = rt.handle();
    assert!(!handle.is_running());
    assert!(matches!(handle.try_spawn(|| ()), Err(SpawnError::NotRunning)));
    assert!(!handle.shutdown());
    let inner = handle.clone();
    rt.run(move || assert!(inner.is_running())).unwrap();
    assert!(!handle.is_running());
    let probe = Arc::new(());
    let p = probe.clone();
    assert!(matches!(handle.try_spawn(move || drop(p)), Err(SpawnError::NotRunning)));
    assert_eq!(Arc::strong_count(&probe), 1, "the refused closure was dropped");
    assert!(!handle.shutdown(), "an ended runtime cannot be stopped again");
    assert!(Handle::try_current().is_none());
}

#[test]
fn shutdown_off_an_actor_does_nothing() {
    assert!(!smarm::shutdown());
}

#[test]
fn handle_spawns_racing_the_end_of_the_runtime_never_strand_an_actor() {
    // Spawns from a plain thread while the root returns: each spawn either fails or makes
    // an actor that ends (its join returns) — the runtime never finishes under a spawn.
    for _ in 0..50 {
        let rt = Runtime::builder().threads(2).build().unwrap();
        let handle = rt.handle();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let spammer = std::thread::spawn(move || {
            go_rx.recv().unwrap();
            let mut joined = 0;
            loop {
                match handle.try_spawn(smarm::yield_now) {
                    Ok(h) => {
                        let _ = h.join(); // would hang if the actor were stranded
                        joined += 1;
                    }
                    Err(SpawnError::ShuttingDown | SpawnError::NotRunning) => return joined,
                    Err(e) => panic!("{e}"),
                }
            }
        });
        rt.run(move || {
            go_tx.send(()).unwrap();
            smarm::yield_now();
        })
        .unwrap();
        spammer.join().unwrap();
    }
}

#[test]
fn a_sigterm_watcher_thread_stops_the_runtime_through_its_handle() {
    // The canonical embedding: SIGTERM blocked in the watcher, which waits for it with
    // sigwait and asks the runtime to shut down. The signal is sent to the watcher thread
    // itself (pthread_kill), so the other test threads of this process never see it.
    let rt = Runtime::builder().threads(2).build().unwrap();
    let handle = rt.handle();
    let (tid_tx, tid_rx) = mpsc::channel::<libc::pthread_t>();
    let watcher = std::thread::spawn(move || {
        // SAFETY: plain libc signal-set calls on a local set; the mask is this thread's.
        let got = unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGTERM);
            assert_eq!(libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()), 0);
            tid_tx.send(libc::pthread_self()).unwrap();
            let mut sig = 0;
            assert_eq!(libc::sigwait(&set, &mut sig), 0);
            sig
        };
        assert_eq!(got, libc::SIGTERM);
        assert!(handle.shutdown());
    });
    let tid = tid_rx.recv().unwrap();
    let stopped = Arc::new(AtomicUsize::new(0));
    let s = stopped.clone();
    let r = rt.run(move || {
        // A worker that cleans up when shut down. It says when its guard exists: signalled
        // before the worker first ran, the shutdown would find no guard to drop (CI saw it).
        let (started_tx, started_rx) = smarm::channel::oneshot();
        let worker = smarm::spawn(move || {
            struct Cleanup(Arc<AtomicUsize>);
            impl Drop for Cleanup {
                fn drop(&mut self) {
                    self.0.fetch_add(1, Ordering::SeqCst);
                }
            }
            let _c = Cleanup(s);
            started_tx.send(()).unwrap();
            loop {
                smarm::sleep(Duration::from_millis(1));
            }
        });
        started_rx.recv().unwrap();
        // SAFETY: a valid thread id of a live thread (it waits in sigwait until signalled).
        assert_eq!(unsafe { libc::pthread_kill(tid, libc::SIGTERM) }, 0);
        let _ = worker.join();
        loop {
            smarm::sleep(Duration::from_millis(1));
        }
    });
    assert!(matches!(r, Err(RunError::Root(DownReason::Shutdown))), "{r:?}");
    assert_eq!(stopped.load(Ordering::SeqCst), 1, "the worker's destructor ran");
    watcher.join().unwrap();
}

#[test]
fn send_after_from_plain_threads_shares_one_timer_thread() {
    let (tx, rx) = smarm::channel::channel::<u32>();
    let mut refs = Vec::new();
    for i in 0..64 {
        refs.push(smarm::send_after(Duration::from_millis(20 + (i % 8) as u64), &tx, i));
    }
    let timer_threads = thread_names().iter().filter(|n| *n == "smarm-timer").count();
    assert!(timer_threads <= 1, "{timer_threads} timer threads for 64 timers");
    assert!(!thread_names().iter().any(|n| n == "smarm-send-after"), "no thread per timer");
    // Cancel every other one before it fires (20 ms is far away for this loop).
    let mut cancelled = std::collections::BTreeSet::new();
    for (i, t) in refs.into_iter().enumerate() {
        if i % 2 == 1 && smarm::cancel_timer(t).is_some() {
            cancelled.insert(i as u32);
        }
    }
    drop(tx);
    let mut got: Vec<u32> = std::iter::from_fn(|| rx.recv().ok()).collect();
    got.sort_unstable();
    // Exactly the timers not cancelled fired, each once.
    assert_eq!(got, (0..64).filter(|i| !cancelled.contains(i)).collect::<Vec<_>>());
}

#[test]
fn runtime_threads_carry_the_builders_name_and_run_its_hooks() {
    let started = Arc::new(Mutex::new(Vec::new()));
    let stopped = Arc::new(AtomicUsize::new(0));
    let (s, t) = (started.clone(), stopped.clone());
    let rt = Runtime::builder()
        .threads(3)
        .thread_name("embedtest")
        .on_thread_start(move || {
            s.lock().unwrap().push(std::thread::current().name().unwrap_or("").to_string());
            assert!(smarm::try_current_pid().is_none(), "hooks run outside actors");
        })
        .on_thread_stop(move || {
            t.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let (names, blocking_name) = rt
        .run(|| {
            let blocking = smarm::spawn_blocking(|| std::thread::current().name().map(str::to_string)).join().unwrap();
            // A new thread names itself when it starts running: until then /proc shows it
            // under its creator's name. Look again until both scheduler threads have (a
            // bounded number of times, so that a missing name fails instead of hanging).
            let mut names = thread_names();
            for _ in 0..100_000 {
                if ["embedtest-1", "embedtest-2"].iter().all(|w| names.iter().any(|n| n == w)) {
                    break;
                }
                smarm::yield_now();
                names = thread_names();
            }
            (names, blocking)
        })
        .unwrap();
    assert!(names.iter().any(|n| n == "embedtest-1"), "{names:?}");
    assert!(names.iter().any(|n| n == "embedtest-2"), "{names:?}");
    assert_eq!(blocking_name.as_deref(), Some("embedtest-blocking"));
    let started = started.lock().unwrap().clone();
    // Three scheduler threads (the caller's among them) and one blocking thread.
    assert_eq!(started.len(), 4, "{started:?}");
    assert!(started.iter().any(|n| n == "embedtest-blocking"));
    assert_eq!(stopped.load(Ordering::SeqCst), 4, "every thread ran its stop hook before run returned");
}

/// The calling thread's CPU mask, as a list of CPUs.
fn cpu_mask() -> Vec<usize> {
    // SAFETY: `cpu_set_t` is plain bits (all-zero is the empty set); the call writes only the
    // set passed with its size, and pid 0 names the calling thread.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set), 0);
        (0..libc::CPU_SETSIZE as usize).filter(|&c| libc::CPU_ISSET(c, &set)).collect()
    }
}

/// `run` starts each scheduler thread away from the caller's CPU (a narrowed mask until the
/// thread runs); by the time user code sees the thread (its start hook, its actors) the
/// mask is the caller's again. Several runs, since which of the two sides of the
/// steering handshake comes first varies.
#[test]
fn scheduler_threads_run_with_the_callers_cpu_mask() {
    let caller = cpu_mask();
    assert!(caller.len() >= 2, "this test needs two CPUs, the caller may use {caller:?}");
    for _ in 0..20 {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let rt =
            Runtime::builder().threads(3).on_thread_start(move || s.lock().unwrap().push(cpu_mask())).build().unwrap();
        let in_actors = rt
            .run(|| {
                let hs: Vec<_> = (0..8).map(|_| smarm::spawn(cpu_mask)).collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
            })
            .unwrap();
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 3, "{seen:?}");
        for m in seen.iter().chain(&in_actors) {
            assert_eq!(m, &caller);
        }
    }
}

/// Sets the calling thread's CPU mask to `cpus`.
fn set_cpu_mask(cpus: &[usize]) {
    // SAFETY: as in `cpu_mask`; the call reads the set passed with its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cpus {
            libc::CPU_SET(c, &mut set);
        }
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set), 0);
    }
}

/// The restore of the caller's mask comes before `on_thread_start`: a mask the hook sets is
/// the one the thread's actors run with.
#[test]
fn a_mask_set_in_the_start_hook_is_kept() {
    let caller = cpu_mask();
    assert!(caller.len() >= 2, "this test needs two CPUs, the caller may use {caller:?}");
    let last = *caller.last().unwrap();
    let rt = Runtime::builder()
        .threads(2)
        .on_thread_start(move || {
            // Only scheduler thread 1: the caller's own mask is left alone.
            if std::thread::current().name() == Some("smarm-worker-1") {
                set_cpu_mask(&[last]);
            }
        })
        .build()
        .unwrap();
    let seen = rt
        .run(|| {
            // Two actors that each wait, spinning without a runtime call, for the other to
            // have started: they cannot share a thread, so one of them runs on thread 1.
            let started = Arc::new(AtomicUsize::new(0));
            let both: Vec<_> = (0..2)
                .map(|_| {
                    let started = started.clone();
                    smarm::spawn(move || {
                        let seen = (smarm::current_thread_index(), cpu_mask());
                        started.fetch_add(1, Ordering::SeqCst);
                        while started.load(Ordering::SeqCst) < 2 {
                            std::hint::spin_loop();
                        }
                        seen
                    })
                })
                .collect();
            both.into_iter().map(|h| h.join().unwrap()).collect::<Vec<_>>()
        })
        .unwrap();
    let on_1: Vec<_> = seen.iter().filter(|(k, _)| *k == Some(1)).collect();
    assert!(!on_1.is_empty(), "no actor ran on thread 1");
    for (_, m) in on_1 {
        assert_eq!(m, &vec![last]);
    }
    assert_eq!(cpu_mask(), caller, "the caller's mask is untouched");
}
