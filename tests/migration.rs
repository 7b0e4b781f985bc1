//! The thread-local migration rule (src/context.rs): an actor may resume on another
//! scheduler thread after any blocking call, and whatever it then reads through smarm's
//! thread-local accessors must describe the thread it now runs on.
//!
//! Each test runs many actors that block (yield, or yield and sleep) in a loop and, after
//! every resume, compare
//! - `current_pid()` with the pid the actor had at start (the running actor, read through
//!   the thread-local worker, must still be this actor), and
//! - `current_thread_index()` (the thread-local's notion of the thread) with
//!   `__private::scheduler_assigned_thread()` (the index the scheduler that resumed the
//!   actor wrote into its control block).
//!
//! A cached thread-local address would make the first disagree with the second after a
//! migration. The tests also count migrations and require some, so they cannot pass
//! vacuously on a schedule that never moves an actor.
//!
//! Built under `[profile.reltest]` (no LTO) and `[profile.fatlto]`
//! (`cargo test --profile fatlto --test migration`).

use std::time::{Duration, Instant};

use smarm::{Pid, Runtime};

/// What one actor saw.
#[derive(Debug, Default)]
struct Observed {
    /// Resumes after which the thread index differed from the one before the block.
    migrations: u64,
    /// Resumes checked.
    resumes: u64,
    /// First disagreement, if any (reported instead of panicking mid-loop so the message
    /// says which check failed).
    mismatch: Option<String>,
    /// Sleeps that returned before the requested duration had elapsed.
    early_sleeps: u64,
}

/// The checks after one resume; returns the thread index now.
#[inline(never)]
fn check_resume(me: Pid, before: usize, obs: &mut Observed) -> usize {
    obs.resumes += 1;
    let pid = smarm::current_pid();
    let now = smarm::current_thread_index().expect("an actor runs on a scheduler thread");
    let assigned = smarm::__private::scheduler_assigned_thread();
    if obs.mismatch.is_none() {
        if pid != me {
            obs.mismatch = Some(format!("current_pid() is {pid} after a resume, the actor is {me}"));
        } else if assigned != Some(now) {
            obs.mismatch =
                Some(format!("current_thread_index() is {now} but the scheduler assigned the actor to {assigned:?}"));
        }
    }
    if now != before {
        obs.migrations += 1;
    }
    now
}

/// Runs `actors` actors on `threads` scheduler threads; each blocks `iters` times, sleeping
/// `sleep` on every `sleep_every`-th block (if given) and yielding otherwise.
fn run_blockers(threads: usize, actors: usize, iters: u64, sleep_every: Option<(u64, Duration)>) -> Vec<Observed> {
    let rt = Runtime::builder().threads(threads).build().unwrap();
    rt.run(move || {
        let handles: Vec<_> = (0..actors)
            .map(|_| {
                smarm::spawn(move || {
                    let me = smarm::current_pid();
                    let mut obs = Observed::default();
                    let mut thread = smarm::current_thread_index().expect("an actor runs on a scheduler thread");
                    // Stack-resident state that must survive every switch unchanged.
                    let mut checksum = 0u64;
                    for i in 0..iters {
                        match sleep_every {
                            Some((every, d)) if i % every == 0 => {
                                let start = Instant::now();
                                smarm::sleep(d);
                                if start.elapsed() < d {
                                    obs.early_sleeps += 1;
                                }
                            }
                            _ => smarm::yield_now(),
                        }
                        checksum = checksum.wrapping_add(i);
                        thread = check_resume(me, thread, &mut obs);
                    }
                    assert_eq!(checksum, iters * (iters - 1) / 2, "stack state corrupted across switches");
                    obs
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a migrating actor failed")).collect::<Vec<_>>()
    })
    .expect("the root actor failed")
}

fn assert_rule_held_and_migrated(observed: &[Observed], expected_resumes: u64) {
    for (k, obs) in observed.iter().enumerate() {
        assert_eq!(obs.mismatch, None, "actor {k} saw stale thread-local state");
        assert_eq!(obs.resumes, expected_resumes, "actor {k} did not check every resume");
        assert_eq!(obs.early_sleeps, 0, "actor {k} woke from sleep early");
    }
    let migrated_actors = observed.iter().filter(|o| o.migrations > 0).count();
    let migrations: u64 = observed.iter().map(|o| o.migrations).sum();
    assert!(
        migrated_actors > 0,
        "no actor ever changed thread ({migrations} migrations): the test did not exercise migration"
    );
}

fn all_cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get()).max(2)
}

#[test]
fn yielding_actors_on_two_threads_see_their_own_pid_and_thread_after_every_migration() {
    let observed = run_blockers(2, 64, 20_000, None);
    assert_rule_held_and_migrated(&observed, 20_000);
}

#[test]
fn yielding_actors_on_all_cores_see_their_own_pid_and_thread_after_every_migration() {
    let observed = run_blockers(all_cores(), 64, 20_000, None);
    assert_rule_held_and_migrated(&observed, 20_000);
}

#[test]
fn actors_mixing_sleep_and_yield_see_their_own_pid_and_thread_after_every_migration() {
    let observed = run_blockers(2, 64, 2_000, Some((4, Duration::from_micros(50))));
    assert_rule_held_and_migrated(&observed, 2_000);
}

#[test]
fn actors_mixing_sleep_and_yield_on_all_cores_keep_the_rule() {
    let observed = run_blockers(all_cores(), 64, 2_000, Some((4, Duration::from_micros(50))));
    assert_rule_held_and_migrated(&observed, 2_000);
}

/// `thread_local!` values are per scheduler thread: after a migration an actor reading a
/// thread-local through an out-of-line accessor sees the new thread's value, which must
/// match `current_thread_index()`.
#[test]
fn user_thread_locals_read_out_of_line_follow_the_actor_to_its_new_thread() {
    use std::cell::Cell;
    thread_local! {
        static TAG: Cell<Option<usize>> = const { Cell::new(None) };
    }
    /// Tags this scheduler thread with its index (once) and returns the tag.
    #[inline(never)]
    fn tag_here() -> (Option<usize>, usize) {
        std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
        let idx = smarm::current_thread_index().unwrap();
        let tag = TAG.with(|t| {
            if t.get().is_none() {
                t.set(Some(idx));
            }
            t.get()
        });
        (tag, idx)
    }
    let rt = Runtime::builder().threads(2).build().unwrap();
    let (mismatches, migrations) = rt
        .run(|| {
            let handles: Vec<_> = (0..32)
                .map(|_| {
                    smarm::spawn(|| {
                        let (mut mismatches, mut migrations) = (0u64, 0u64);
                        let mut last = tag_here().1;
                        for _ in 0..5_000 {
                            smarm::yield_now();
                            let (tag, idx) = tag_here();
                            if tag != Some(idx) {
                                mismatches += 1;
                            }
                            if idx != last {
                                migrations += 1;
                            }
                            last = idx;
                        }
                        (mismatches, migrations)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
        })
        .unwrap();
    assert_eq!(mismatches, 0, "a thread-local read after a resume belonged to another thread");
    assert!(migrations > 0, "no actor migrated: the test did not exercise migration");
}
