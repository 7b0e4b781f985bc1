//! The builder rejects settings that cannot work with typed errors, the spawn API reports
//! why it could not spawn, the pid accessors behave outside actors, runtimes refuse to nest
//! on an actor, and large slabs cost nothing until used.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use smarm::{BuildError, RunError, Runtime, SpawnError};

/// The error of a build that must fail; `what` names the setting if it is accepted.
#[track_caller]
fn build_err(b: smarm::Builder, what: &str) -> BuildError {
    match b.build() {
        Ok(rt) => panic!("{what}: build succeeded ({rt:?})"),
        Err(e) => e,
    }
}

#[track_caller]
fn assert_display_mentions(e: &dyn std::fmt::Display, words: &[&str]) {
    let s = e.to_string();
    assert!(!s.is_empty());
    for w in words {
        assert!(s.contains(w), "error message {s:?} does not mention {w:?}");
    }
}

#[test]
fn zero_threads_is_rejected() {
    let e = build_err(Runtime::builder().threads(0), "threads(0)");
    assert!(matches!(e, BuildError::ZeroThreads), "{e:?}");
    assert_display_mentions(&e, &["thread"]);
    assert_eq!(Runtime::builder().threads(1).build().unwrap().threads(), 1);
}

#[test]
fn zero_max_actors_is_rejected() {
    let e = build_err(Runtime::builder().max_actors(0), "max_actors(0)");
    assert!(matches!(e, BuildError::ZeroMaxActors), "{e:?}");
    assert_display_mentions(&e, &["max_actors"]);
    Runtime::builder().max_actors(1).build().unwrap();
}

#[test]
fn too_many_actors_is_rejected_with_the_maximum() {
    let e = build_err(Runtime::builder().max_actors(usize::MAX), "max_actors(usize::MAX)");
    let maximum = match e {
        BuildError::TooManyActors { requested, maximum } => {
            assert_eq!(requested, usize::MAX);
            maximum
        }
        ref other => panic!("expected TooManyActors, got {other:?}"),
    };
    assert!(maximum >= smarm::DEFAULT_MAX_ACTORS, "maximum {maximum} below the default");
    assert_display_mentions(&e, &["max_actors", &usize::MAX.to_string(), &maximum.to_string()]);
    // The boundary is exact: the maximum itself is accepted, one more is not.
    Runtime::builder().max_actors(maximum).build().expect("max_actors(maximum)");
    let e = build_err(Runtime::builder().max_actors(maximum + 1), "max_actors(maximum + 1)");
    assert!(matches!(e, BuildError::TooManyActors { requested, .. } if requested == maximum + 1), "{e:?}");
}

#[test]
fn small_stack_is_rejected_with_the_minimum() {
    let e = build_err(Runtime::builder().stack_size(1024), "stack_size(1024)");
    match e {
        BuildError::StackTooSmall { requested, minimum } => {
            assert_eq!(requested, 1024);
            assert_eq!(minimum, smarm::MIN_STACK_SIZE);
        }
        ref other => panic!("expected StackTooSmall, got {other:?}"),
    }
    assert_display_mentions(&e, &["stack_size", "1024", &smarm::MIN_STACK_SIZE.to_string()]);
    let e = build_err(Runtime::builder().stack_size(smarm::MIN_STACK_SIZE - 1), "stack_size(MIN - 1)");
    assert!(matches!(e, BuildError::StackTooSmall { .. }), "{e:?}");
    // The minimum is accepted and really runs an actor.
    let rt = Runtime::builder().threads(1).stack_size(smarm::MIN_STACK_SIZE).build().unwrap();
    assert_eq!(rt.run(|| smarm::spawn(|| 6 * 7).join().unwrap()).unwrap(), 42);
}

#[test]
fn stack_size_above_the_maximum_is_rejected_with_the_maximum() {
    for requested in [usize::MAX, usize::MAX - 4095, smarm::MAX_STACK_SIZE + 1] {
        let e = build_err(Runtime::builder().stack_size(requested), &format!("stack_size({requested})"));
        match e {
            BuildError::StackTooLarge { requested: r, maximum } => {
                assert_eq!(r, requested);
                assert_eq!(maximum, smarm::MAX_STACK_SIZE);
            }
            ref other => panic!("expected StackTooLarge, got {other:?}"),
        }
        assert_display_mentions(&e, &["stack_size", &requested.to_string(), &smarm::MAX_STACK_SIZE.to_string()]);
    }
    // The maximum is accepted and runs an actor (its stack is reserved, not committed).
    let rt = Runtime::builder().threads(1).stack_size(smarm::MAX_STACK_SIZE).max_actors(4).build().unwrap();
    assert_eq!(rt.run(|| smarm::spawn(|| 6 * 7).join().unwrap()).unwrap(), 42);
}

#[test]
fn too_many_threads_is_rejected_with_the_maximum() {
    for requested in [usize::MAX, 1 << 40, smarm::MAX_THREADS + 1] {
        let e = build_err(Runtime::builder().threads(requested), &format!("threads({requested})"));
        match e {
            BuildError::TooManyThreads { requested: r, maximum } => {
                assert_eq!(r, requested);
                assert_eq!(maximum, smarm::MAX_THREADS);
            }
            ref other => panic!("expected TooManyThreads, got {other:?}"),
        }
        assert_display_mentions(&e, &["threads", &requested.to_string(), &smarm::MAX_THREADS.to_string()]);
    }
    // The boundary is exact (building starts no thread; `run` would start them all).
    assert_eq!(Runtime::builder().threads(smarm::MAX_THREADS).build().unwrap().threads(), smarm::MAX_THREADS);
}

#[test]
fn unbounded_counts_that_size_nothing_are_accepted_and_run() {
    // Neither allocates up front nor feeds arithmetic that could overflow: the extremes
    // mean "never limit" (lifo runs, kept stacks), "never preempt" and "wait forever".
    let rt = Runtime::builder()
        .threads(2)
        .warm_stacks(usize::MAX)
        .lifo_run_limit(u32::MAX)
        .timeslice_cycles(u64::MAX)
        .shutdown_timeout(std::time::Duration::MAX)
        .build()
        .unwrap();
    let sum = rt
        .run(|| {
            let hs: Vec<_> = (0..64u64)
                .map(|i| {
                    smarm::spawn(move || {
                        smarm::yield_now();
                        smarm::maybe_preempt();
                        i
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
        })
        .unwrap();
    assert_eq!(sum, 63 * 64 / 2);
}

#[test]
fn zero_lifo_run_limit_is_rejected() {
    let e = build_err(Runtime::builder().lifo_run_limit(0), "lifo_run_limit(0)");
    assert!(matches!(e, BuildError::ZeroLifoRunLimit), "{e:?}");
    assert_display_mentions(&e, &["lifo_run_limit"]);
    Runtime::builder().lifo_run_limit(1).build().unwrap();
}

#[test]
fn zero_timeslice_is_rejected() {
    let e = build_err(Runtime::builder().timeslice_cycles(0), "timeslice_cycles(0)");
    assert!(matches!(e, BuildError::ZeroTimeslice), "{e:?}");
    assert_display_mentions(&e, &["timeslice_cycles"]);
    Runtime::builder().timeslice_cycles(1).build().unwrap();
}

#[test]
fn try_spawn_outside_a_runtime_is_no_runtime() {
    let ran = Arc::new(AtomicBool::new(false));
    let r = {
        let ran = ran.clone();
        smarm::try_spawn(move || ran.store(true, Ordering::SeqCst))
    };
    match r {
        Err(ref e @ SpawnError::NoRuntime) => assert_display_mentions(e, &["outside"]),
        other => panic!("expected NoRuntime, got {other:?}"),
    }
    assert!(!ran.load(Ordering::SeqCst));
    assert_eq!(Arc::strong_count(&ran), 1, "the rejected closure was dropped");
}

#[test]
fn current_pid_outside_an_actor_panics_and_try_current_pid_is_none() {
    assert_eq!(smarm::try_current_pid(), None);
    assert_eq!(smarm::current_thread_index(), None);
    let payload = std::panic::catch_unwind(smarm::current_pid).expect_err("current_pid outside an actor");
    let msg = payload
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| payload.downcast_ref::<&str>().copied())
        .expect("a string panic payload");
    assert!(msg.contains("outside"), "panic message {msg:?}");
}

#[test]
fn pid_accessors_inside_an_actor_agree_with_the_join_handle() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    rt.run(|| {
        let me = smarm::current_pid();
        assert_eq!(smarm::try_current_pid(), Some(me));
        let h = smarm::spawn(smarm::current_pid);
        let child_pid = h.pid();
        assert_ne!(child_pid, me);
        assert_eq!(h.join().unwrap(), child_pid);
        assert_eq!(smarm::current_pid(), me, "the pid is stable across a park");
    })
    .unwrap();
}

/// A joined actor's slot can be reused at once, at two threads too, where freed slots wait
/// on the freeing thread's own list and move to the shared one in batches, and where the
/// other thread may be in the middle of moving them (its actor ending) when the slab looks
/// full (history 60). Three slots: the root, the child in flight and the next one, whose
/// spawn needs the slot of the child joined just before.
#[test]
fn a_full_slab_at_two_threads_always_reuses_the_joined_slots() {
    let rt = Runtime::builder().threads(2).max_actors(3).build().unwrap();
    rt.run(|| {
        let mut in_flight = smarm::spawn(|| 0u32);
        for round in 1..50_000u32 {
            let next = match smarm::try_spawn(move || round) {
                Ok(h) => h,
                Err(e) => panic!("round {round}: spawn refused with every earlier child but one joined: {e}"),
            };
            assert_eq!(in_flight.join().unwrap(), round - 1);
            in_flight = next;
        }
        in_flight.join().unwrap();
    })
    .unwrap();
}

#[test]
fn full_slab_refuses_spawn_until_a_slot_is_freed() {
    // One thread: the child's slot is freed before the root, woken by the child's end, runs.
    let rt = Runtime::builder().threads(1).max_actors(2).build().unwrap();
    rt.run(|| {
        let release = Arc::new(AtomicBool::new(false));
        let child = {
            let release = release.clone();
            smarm::spawn(move || {
                while !release.load(Ordering::Acquire) {
                    smarm::yield_now();
                }
                7
            })
        };
        // Root + child fill both slots.
        let probe = Arc::new(());
        let r = {
            let probe = probe.clone();
            smarm::try_spawn(move || drop(probe))
        };
        match r {
            Err(ref e @ SpawnError::Full { max_actors }) => {
                assert_eq!(max_actors, 2);
                assert_display_mentions(e, &["2", "max_actors"]);
            }
            other => panic!("expected Full, got {other:?}"),
        }
        assert_eq!(Arc::strong_count(&probe), 1, "the rejected closure was dropped, not leaked");
        // Still full on a second attempt (a failed spawn does not consume or leak a slot).
        assert!(matches!(smarm::try_spawn(|| ()), Err(SpawnError::Full { max_actors: 2 })));

        release.store(true, Ordering::Release);
        assert_eq!(child.join().unwrap(), 7);
        let again = smarm::try_spawn(|| 8).expect("a slot is free again after the child ended");
        assert_eq!(again.join().unwrap(), 8);
        // And the freed slot can be reused repeatedly.
        for i in 0..100 {
            let h = smarm::try_spawn(move || i).expect("slot reuse");
            assert_eq!(h.join().unwrap(), i);
        }
    })
    .unwrap();
}

#[test]
fn run_inside_an_actor_is_nested_error() {
    let inner_ran = Arc::new(AtomicBool::new(false));
    let rt = Runtime::builder().threads(1).build().unwrap();
    let r = {
        let inner_ran = inner_ran.clone();
        rt.run(move || {
            let inner = Runtime::builder().threads(1).build().unwrap();
            inner.run(move || inner_ran.store(true, Ordering::SeqCst))
        })
        .unwrap()
    };
    match r {
        Err(ref e @ RunError::Nested) => assert_display_mentions(e, &["inside an actor"]),
        other => panic!("expected RunError::Nested, got {other:?}"),
    }
    assert!(!inner_ran.load(Ordering::SeqCst), "the nested root must not run");
    assert_eq!(Arc::strong_count(&inner_ran), 1, "the rejected root closure was dropped");
}

#[test]
fn runtime_on_a_plain_thread_started_from_an_actor_works() {
    // The documented alternative to nesting: a plain OS thread may run its own runtime.
    let rt = Runtime::builder().threads(1).build().unwrap();
    let v = rt
        .run(|| {
            std::thread::spawn(|| {
                let inner = Runtime::builder().threads(1).build().unwrap();
                inner.run(|| smarm::spawn(|| 40).join().unwrap() + 2).unwrap()
            })
            .join()
            .unwrap()
        })
        .unwrap();
    assert_eq!(v, 42);
}

#[test]
fn runtime_with_a_million_slots_runs() {
    let rt = Runtime::builder().threads(2).max_actors(1_048_576).build().unwrap();
    let n = rt
        .run(|| {
            let count = Arc::new(AtomicUsize::new(0));
            let hs: Vec<_> = (0..64)
                .map(|_| {
                    let count = count.clone();
                    smarm::spawn(move || count.fetch_add(1, Ordering::Relaxed))
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
            count.load(Ordering::Relaxed)
        })
        .unwrap();
    assert_eq!(n, 64);
}

/// Resident set size of this process in bytes (Linux).
fn rss_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kb: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kb * 1024
}

#[test]
fn largest_slab_is_allocated_lazily() {
    // The largest slab is millions of control blocks (plus a run queue as long): hundreds of
    // megabytes at least. It must be zero-mapped, not written: building and running a small
    // root commits almost none of it.
    let maximum = match build_err(Runtime::builder().max_actors(usize::MAX), "max_actors(usize::MAX)") {
        BuildError::TooManyActors { maximum, .. } => maximum,
        other => panic!("expected TooManyActors, got {other:?}"),
    };
    let before = rss_bytes();
    let rt = Runtime::builder().threads(1).max_actors(maximum).build().unwrap();
    let during = rt
        .run(|| {
            let hs: Vec<_> = (0..16).map(|i| smarm::spawn(move || i)).collect();
            let sum: usize = hs.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(sum, 120);
            rss_bytes()
        })
        .unwrap();
    let grew = during.saturating_sub(before);
    // Other tests run concurrently in this process, so allow generous slack; an eagerly
    // initialised slab of `maximum` slots would add far more than the bound.
    assert!(
        grew < 256 << 20,
        "RSS grew by {} MiB for a runtime with max_actors({maximum}) running 16 actors",
        grew >> 20
    );
}

/// Every public error is a `std::error::Error` that can cross threads and be boxed.
fn assert_std_error<E: std::error::Error + Send + Sync + 'static>(e: E) -> Box<dyn std::error::Error + Send + Sync> {
    Box::new(e)
}

#[test]
fn runtime_errors_are_std_errors_with_sources() {
    let build = assert_std_error(Runtime::builder().threads(0).build().unwrap_err());
    assert!(build.source().is_none());
    // A failed root spawn keeps the spawn error as its source.
    let run = assert_std_error(RunError::Spawn(SpawnError::Full { max_actors: 1 }));
    let source = run.source().expect("RunError::Spawn has a source");
    assert_eq!(source.to_string(), SpawnError::Full { max_actors: 1 }.to_string());
    let stack = assert_std_error(SpawnError::Stack(std::io::Error::other("no maps")));
    assert_eq!(stack.source().expect("SpawnError::Stack has a source").to_string(), "no maps");
    assert!(assert_std_error(RunError::Nested).source().is_none());
}

#[test]
fn the_default_slab_is_otps_process_limit_and_commits_no_memory_up_front() {
    assert_eq!(smarm::DEFAULT_MAX_ACTORS, 262_144, "OTP's default process limit");
    let before = rss_bytes();
    let during = Runtime::builder().threads(1).build().unwrap().run(rss_bytes).unwrap();
    // 262,144 control blocks, queue cells and process-table slots written eagerly would be
    // tens of megabytes.
    let grown = during.saturating_sub(before);
    assert!(grown < 8 << 20, "a default runtime committed {grown} bytes up front");
}
