//! Process semantics: exit reasons, exit signals, `kill`, `trap_exit`, links, monitors,
//! ordering, names and timers aimed at actors (SEMANTICS.md, "Exit reasons and signals",
//! "Links and monitors", "Timers").
//!
//! Statement -> tests:
//!
//! Exit reasons and signals
//! - `DownReason::{Normal, Panic, Killed, NoProc, Shutdown, Custom}`; returning is `Normal`:
//!   body_return_is_a_normal_exit
//! - a panic is `Panic(message)`:
//!   panic_exit_reason_carries_the_panic_message
//! - `exit(pid, Normal)` from another actor is ignored by a non-trapping target:
//!   exit_normal_from_another_actor_is_ignored_by_a_non_trapping_target,
//!   (OTP, where silent: to oneself it ends the caller)
//!   exit_normal_to_self_ends_a_non_trapping_caller_normally
//! - any other reason kills a non-trapping target with that reason:
//!   exit_with_custom_reason_kills_a_non_trapping_target_with_that_reason,
//!   exit_with_shutdown_reason_kills_a_non_trapping_target_with_shutdown,
//!   exit_signal_to_an_actor_that_has_not_run_yet_kills_it_with_that_reason,
//!   exit_signal_runs_the_destructors_of_the_target,
//!   (OTP, where silent: the first exit decides; later signals reach a dying actor)
//!   the_first_exit_signal_decides_the_reason_and_only_a_kill_overrides_it,
//!   a_signal_during_an_actors_own_panic_does_not_change_its_reason,
//!   exit_to_self_cannot_be_swallowed_by_catch_unwind
//! - `kill(pid)` cannot be trapped; the target ends with `Killed`; destructors run:
//!   kill_ends_the_target_with_killed_and_runs_its_destructors,
//!   kill_cannot_be_trapped,
//!   kill_of_self_does_not_return, kill_of_self_is_not_trapped_but_exit_killed_to_self_is,
//!   kill_reaches_an_actor_that_keeps_making_runtime_calls,
//!   kill_is_raised_again_after_a_catch_unwind_swallowed_it,
//!   kill_cannot_be_swallowed_by_catch_unwind_around_every_runtime_call,
//!   an_unwinder_found_without_the_hook_stays_known_when_another_parks_beside_it,
//!   kill_of_actors_parked_in_destructors_mid_unwind_does_not_abort (gap, ignored)
//! - (OTP: the `kill` signal and the `killed` reason are distinct) `exit(pid, Killed)` is an
//!   ordinary, trappable exit signal; to a non-trapping caller itself it does not return:
//!   exit_with_killed_reason_is_trappable_unlike_kill,
//!   exit_with_killed_reason_ends_a_non_trapping_target_with_killed,
//!   exit_killed_to_self_does_not_return_to_a_non_trapping_caller
//! - a trapping actor receives exit signals as `Exit { from, reason }` (except `kill`):
//!   trapping_actor_receives_exit_signals_as_messages,
//!   trapping_actor_receives_exit_normal_as_a_message,
//!   trapping_mailbox_actor_receives_exit_in_its_mailbox,
//!   trap_exit_returns_the_previous_setting_and_can_be_turned_off
//! - ordering: messages, exit signals and Down from one actor arrive in send order; a
//!   message sent before an actor dies arrives before the Down:
//!   messages_sent_before_death_arrive_before_the_down,
//!   messages_sent_before_death_arrive_before_the_link_exit_signal,
//!   messages_and_exit_signals_from_one_sender_keep_their_order
//! - visible resources (name, pg) are released before Down/Exit go out:
//!   name_is_free_when_the_down_is_handled, name_is_free_before_the_first_of_many_downs_is_delivered,
//!   name_of_a_killed_actor_is_free_when_the_down_is_handled,
//!   name_is_free_when_the_link_exit_signal_is_handled
//!   (pg memberships: tests/pg.rs, membership_is_released_before_the_down_is_delivered)
//!
//! Links and monitors
//! - links are bidirectional:
//!   link_carries_the_targets_exit_to_the_caller, link_carries_the_callers_exit_to_the_target,
//!   linked_non_trapping_actor_dies_with_the_same_reason,
//!   normal_exit_over_a_link_does_not_kill_a_non_trapping_peer,
//!   killed_propagates_over_links_as_a_trappable_killed
//! - at most one link per pair; `link` twice then `unlink` once removes it:
//!   link_twice_delivers_a_single_exit, link_twice_then_unlink_once_removes_the_link,
//!   (an actor with many links, which smarm keeps in a set) many_links_keep_one_link_per_pair
//! - after `unlink` returns the link has no further effect:
//!   unlink_removes_the_link_for_both_sides, non_trapping_caller_survives_peer_death_after_unlink,
//!   no_exit_signal_arrives_after_unlink_returns_while_the_peer_is_exiting,
//!   no_exit_signal_arrives_after_unlink_returns_even_when_racing_the_peers_death
//! - linking to a dead pid: non-trapping caller gets `Err(NoProc)`, trapping caller receives
//!   `Exit { from, NoProc }`:
//!   link_to_a_dead_pid_is_a_noproc_error_for_a_non_trapping_caller,
//!   link_to_a_dead_pid_delivers_exit_noproc_to_a_trapping_caller,
//!   link_racing_the_targets_exit_reports_that_exit_exactly_once
//! - `monitor` is one-way:
//!   monitor_is_one_way
//! - fires exactly once:
//!   monitor_fires_exactly_once
//! - each call creates an independent monitor:
//!   each_monitor_call_creates_an_independent_monitor
//! - monitoring a dead or stale pid delivers `Down { NoProc }` at once:
//!   monitor_of_a_dead_pid_reports_noproc_at_once,
//!   signals_to_a_stale_pid_never_reach_the_new_occupant_of_its_slot
//! - after `demonitor(m)` returns no new Down for `m`; `demonitor_flush` also removes a
//!   queued one:
//!   demonitor_prevents_a_later_down, demonitor_leaves_other_monitors_alone,
//!   demonitor_keeps_an_already_queued_down, demonitor_flush_removes_an_already_queued_down,
//!   demonitor_flush_removes_a_queued_down_from_a_typed_mailbox,
//!   demonitor_racing_with_exit_never_lets_a_down_through_after_returning_true
//! - `spawn_link` / `spawn_monitor` set up before the child runs (real reason, never NoProc):
//!   spawn_monitor_reports_an_immediate_death_with_its_real_reason,
//!   spawn_link_reports_an_immediate_death_with_its_real_reason,
//!   spawn_link_child_dying_at_once_takes_a_non_trapping_parent_with_it,
//!   spawn_monitor_reports_a_child_that_dies_before_the_parent_resumes,
//!   spawn_link_reports_a_child_that_dies_before_the_parent_resumes
//! - pids carry a generation; messages/signals to a dead pid never reach a newer actor in
//!   its slot; sending to a dead pid is silently dropped:
//!   messages_to_a_dead_actor_never_reach_the_new_occupant_of_its_slot,
//!   signals_to_a_stale_pid_never_reach_the_new_occupant_of_its_slot,
//!   timer_aimed_at_a_dead_actor_never_reaches_the_new_occupant_of_its_slot,
//!   sending_to_a_dead_actor_is_silently_dropped
//! - sending to an unknown registered name is an error:
//!   sending_to_an_unknown_registered_name_is_an_error,
//!   send_named_reaches_the_registered_actor, registry_names_are_unique_and_released
//!
//! Timers
//! - `send_after(d, pid, msg)` delivers once, never earlier than `d`:
//!   send_after_addr_delivers_once_and_never_before_the_delay
//! - `cancel_timer(t)` returns the time left, or `None` if it already fired or never existed:
//!   cancel_timer_returns_the_time_left_and_stops_delivery,
//!   (timers.rs) cancel_timer_returns_the_time_left_to_the_deadline_not_the_delay,
//!   cancel_timer_after_it_fired_returns_none,
//!   cancel_timer_of_a_timer_aimed_at_an_ended_actor_returns_none
//! - timers aimed at a pid are cancelled when that actor exits:
//!   timers_aimed_at_an_actor_are_cancelled_when_it_exits,
//!   timers_aimed_at_an_actor_are_cancelled_before_its_down_is_delivered
//!
//! Selective receive (issue 4, "Mailboxes and signals"; OTP's `receive ... after`)
//! - the first matching envelope is taken, the others stay in order:
//!   (hand_off.rs) a_selective_receive_takes_its_match_and_leaves_the_rest_queued_in_order
//! - the timeout counts from the start of the receive, whatever else arrives meanwhile:
//!   selective_receive_keeps_its_deadline_while_other_messages_arrive

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use smarm::channel::{channel, oneshot, RecvTimeoutError, SendError, Sender, TryRecvError};
use smarm::{Addr, Down, DownReason, Envelope, Exit, LookupError, Mailbox, Pid, RegisterError, Runtime, Signal};

/// Bounds waits that only end if the behaviour under test works (a failure, not a hang).
const GUARD: Duration = Duration::from_secs(10);
const MS: Duration = Duration::from_millis(1);

fn custom(s: &str) -> DownReason {
    DownReason::Custom(s.to_string())
}

/// Runs `root` on a two-thread runtime (panics quiet: many actors panic on purpose) and
/// fails the test with the root's reason if it did not return.
fn run<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

/// Like [`run`] with room for the root and exactly one more actor, so that a new actor
/// reuses the slot of the previous one.
fn run_two_slots<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(2).max_actors(2).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs `f` in a fresh actor with a typed mailbox and returns its result; a panic in `f`
/// (a failed assertion) fails the test with its message.
fn in_actor<M, T, F>(f: F) -> T
where
    M: Send + 'static,
    T: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
{
    let (tx, rx) = oneshot::<Result<T, String>>();
    smarm::spawn_actor(move |mb: Mailbox<M>| {
        let r = catch_unwind(AssertUnwindSafe(|| f(mb))).map_err(panic_message);
        let _ = tx.send(r);
    });
    match rx.recv() {
        Ok(Ok(v)) => v,
        Ok(Err(msg)) => panic!("{msg}"),
        Err(_) => panic!("the test actor ended without a result"),
    }
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic".into())
}

/// Parks the caller until it is stopped from outside.
fn park_forever() {
    loop {
        smarm::sleep(Duration::from_secs(3600));
    }
}

fn next_signal() -> Signal {
    smarm::recv_signal_timeout(GUARD).expect("no signal arrived within the guard time")
}

fn next_down() -> Down {
    match next_signal() {
        Signal::Down(d) => d,
        other => panic!("expected a Down, got {other:?}"),
    }
}

fn next_exit() -> Exit {
    match next_signal() {
        Signal::Exit(x) => x,
        other => panic!("expected an Exit, got {other:?}"),
    }
}

/// Asserts that the caller's signal box holds nothing (no waiting).
fn assert_no_signal_queued() {
    let s = smarm::recv_signal_timeout(Duration::ZERO);
    assert_eq!(s, Err(RecvTimeoutError::Timeout), "unexpected signal");
}

/// Sets a flag when dropped (destructor probe).
struct SetOnDrop(Arc<AtomicBool>);
impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The slot index of a pid, from its `<0.index.gen>` rendering.
fn slot_index(pid: Pid) -> String {
    let s = pid.to_string();
    s.trim_matches(|c| c == '<' || c == '>').split('.').nth(1).unwrap().to_string()
}

/// Spawns a parked actor and returns its handle once it is parked in its body.
fn spawn_parked() -> smarm::JoinHandle<()> {
    let (ready_tx, ready_rx) = oneshot::<()>();
    let h = smarm::spawn(move || {
        ready_tx.send(()).unwrap();
        park_forever();
    });
    ready_rx.recv().unwrap();
    h
}

// ------------------------------------------------------------------------------------------
// Exit reasons
// ------------------------------------------------------------------------------------------

#[test]
fn body_return_is_a_normal_exit() {
    run(|| {
        let (h, m) = smarm::spawn_monitor(|| 42);
        let d = next_down();
        assert_eq!(d.monitor, m);
        assert_eq!(d.pid, h.pid());
        assert_eq!(d.reason, DownReason::Normal);
        assert_eq!(h.join(), Ok(42));
    });
}

#[test]
fn panic_exit_reason_carries_the_panic_message() {
    run(|| {
        let (h, _) = smarm::spawn_monitor(|| -> () { panic!("boom {}", 7) });
        assert_eq!(next_down().reason, DownReason::Panic("boom 7".into()));
        assert_eq!(h.join(), Err(DownReason::Panic("boom 7".into())));

        let (h, _) = smarm::spawn_monitor(|| -> () { panic!("static message") });
        assert_eq!(next_down().reason, DownReason::Panic("static message".into()));
        assert_eq!(h.join(), Err(DownReason::Panic("static message".into())));
    });
}

// ------------------------------------------------------------------------------------------
// Exit signals
// ------------------------------------------------------------------------------------------

#[test]
fn exit_normal_from_another_actor_is_ignored_by_a_non_trapping_target() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (go_tx, go_rx) = oneshot::<()>();
        let (h, m) = smarm::spawn_monitor(move || {
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
            // A runtime call after the signal: a pending stop would fire here.
            smarm::yield_now();
            7
        });
        ready_rx.recv().unwrap();
        smarm::exit(h.pid(), DownReason::Normal);
        go_tx.send(()).unwrap();
        assert_eq!(h.join(), Ok(7));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
    });
}

#[test]
fn exit_normal_to_self_ends_a_non_trapping_caller_normally() {
    run(|| {
        let (h, m) = smarm::spawn_monitor(|| {
            smarm::exit(smarm::current_pid(), DownReason::Normal);
            smarm::yield_now();
            "still running"
        });
        assert!(h.join().is_err(), "the caller kept running after exit(self, Normal)");
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
    });
}

/// Reports when its drop starts, then parks until released (keeps an actor dying).
struct Lingers(Sender<()>, smarm::channel::Receiver<()>);
impl Drop for Lingers {
    fn drop(&mut self) {
        let _ = self.0.send(());
        let _ = self.1.recv();
    }
}

#[test]
fn the_first_exit_signal_decides_the_reason_and_only_a_kill_overrides_it() {
    run(|| {
        // `Some(reason)`: `exit(pid, reason)`; `None`: `kill(pid)`.
        let send = |pid, signal: Option<DownReason>| match signal {
            Some(reason) => smarm::exit(pid, reason),
            None => smarm::kill(pid),
        };
        for (signals, expected) in [
            (vec![Some(custom("first")), Some(custom("second"))], custom("first")),
            (vec![Some(DownReason::Shutdown), Some(custom("other"))], DownReason::Shutdown),
            (vec![Some(custom("first")), None], DownReason::Killed),
            // `Killed` as an exit signal's reason is no kill: the first signal still decides.
            (vec![Some(custom("first")), Some(DownReason::Killed)], custom("first")),
        ] {
            // A destructor that parks keeps the target dying while the later signals arrive.
            let (reached_tx, reached_rx) = channel::<()>();
            let (release_tx, release_rx) = channel::<()>();
            let (ready_tx, ready_rx) = oneshot::<()>();
            let h = smarm::spawn(move || {
                let _l = Lingers(reached_tx, release_rx);
                ready_tx.send(()).unwrap();
                park_forever();
            });
            ready_rx.recv().unwrap();
            let m = smarm::monitor(h.pid());
            let mut signals = signals.into_iter();
            send(h.pid(), signals.next().unwrap());
            reached_rx.recv_timeout(GUARD).expect("the first signal did not stop the target");
            for s in signals {
                send(h.pid(), s);
            }
            drop(release_tx);
            let d = next_down();
            assert_eq!((d.monitor, d.reason), (m, expected.clone()));
            assert_eq!(h.join(), Err(expected));
        }
    });
}

#[test]
fn a_signal_during_an_actors_own_panic_does_not_change_its_reason() {
    run(|| {
        let (reached_tx, reached_rx) = channel::<()>();
        let (release_tx, release_rx) = channel::<()>();
        let (h, m) = smarm::spawn_monitor(move || -> () {
            let _l = Lingers(reached_tx, release_rx);
            panic!("boom");
        });
        reached_rx.recv_timeout(GUARD).unwrap(); // unwinding its panic, parked in the drop
        smarm::exit(h.pid(), custom("late"));
        drop(release_tx);
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Panic("boom".into())));
    });
}

#[test]
fn exit_to_self_cannot_be_swallowed_by_catch_unwind() {
    run(|| {
        let kept_running = Arc::new(AtomicBool::new(false));
        let k = kept_running.clone();
        let (h, m) = smarm::spawn_monitor(move || {
            let me = smarm::current_pid();
            let caught = catch_unwind(|| smarm::exit(me, custom("bye")));
            assert!(caught.is_err(), "exit(self) returned");
            // The next runtime call raises it again.
            smarm::yield_now();
            k.store(true, Ordering::SeqCst);
        });
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, custom("bye")));
        assert_eq!(h.join(), Err(custom("bye")));
        assert!(!kept_running.load(Ordering::SeqCst), "the actor ran on after exit(self)");
    });
}

#[test]
fn exit_with_custom_reason_kills_a_non_trapping_target_with_that_reason() {
    run(|| {
        let h = spawn_parked();
        let m = smarm::monitor(h.pid());
        smarm::exit(h.pid(), custom("bye"));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, custom("bye")));
        assert_eq!(h.join(), Err(custom("bye")));
    });
}

#[test]
fn exit_with_shutdown_reason_kills_a_non_trapping_target_with_shutdown() {
    run(|| {
        let h = spawn_parked();
        smarm::monitor(h.pid());
        smarm::exit(h.pid(), DownReason::Shutdown);
        assert_eq!(next_down().reason, DownReason::Shutdown);
        assert_eq!(h.join(), Err(DownReason::Shutdown));
    });
}

#[test]
fn exit_signal_to_an_actor_that_has_not_run_yet_kills_it_with_that_reason() {
    // One scheduler thread: the child cannot run before the root parks.
    let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let ran = Arc::new(AtomicBool::new(false));
        let ran2 = ran.clone();
        let (h, m) = {
            // No preemption between the spawn and the signal.
            let _np = smarm::NoPreempt::new();
            let (h, m) = smarm::spawn_monitor(move || ran2.store(true, Ordering::SeqCst));
            smarm::exit(h.pid(), custom("early"));
            (h, m)
        };
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, custom("early")));
        assert!(!ran.load(Ordering::SeqCst), "the body ran despite the exit signal");
        assert_eq!(h.join(), Err(custom("early")));
    })
    .unwrap();
}

#[test]
fn exit_signal_runs_the_destructors_of_the_target() {
    run(|| {
        let dropped = Arc::new(AtomicBool::new(false));
        let d2 = dropped.clone();
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (h, _) = smarm::spawn_monitor(move || {
            let _guard = SetOnDrop(d2);
            ready_tx.send(()).unwrap();
            park_forever();
        });
        ready_rx.recv().unwrap();
        smarm::exit(h.pid(), custom("x"));
        assert_eq!(next_down().reason, custom("x"));
        assert!(dropped.load(Ordering::SeqCst), "destructor did not run before the Down");
    });
}

#[test]
fn kill_ends_the_target_with_killed_and_runs_its_destructors() {
    run(|| {
        let dropped = Arc::new(AtomicBool::new(false));
        let d2 = dropped.clone();
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (h, m) = smarm::spawn_monitor(move || {
            let _guard = SetOnDrop(d2);
            ready_tx.send(()).unwrap();
            park_forever();
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
        assert!(dropped.load(Ordering::SeqCst), "destructor did not run before the Down");
        assert_eq!(h.join(), Err(DownReason::Killed));
    });
}

/// A trapping actor that forwards every Exit it receives until it is stopped.
fn spawn_trapping_recorder() -> (smarm::JoinHandle<()>, smarm::channel::Receiver<Exit>) {
    let (seen_tx, seen_rx) = channel();
    let (ready_tx, ready_rx) = oneshot::<()>();
    let h = smarm::spawn(move || {
        smarm::trap_exit(true);
        ready_tx.send(()).unwrap();
        loop {
            if let Signal::Exit(x) = smarm::recv_signal() {
                seen_tx.send(x).unwrap();
            }
        }
    });
    ready_rx.recv().unwrap();
    (h, seen_rx)
}

#[test]
fn kill_cannot_be_trapped() {
    run(|| {
        let (h, seen) = spawn_trapping_recorder();
        smarm::monitor(h.pid());
        smarm::kill(h.pid());
        assert_eq!(next_down().reason, DownReason::Killed);
        assert_eq!(seen.try_recv().ok(), None, "kill arrived as an Exit message");
    });
}

#[test]
fn exit_with_killed_reason_is_trappable_unlike_kill() {
    run(|| {
        let (h, seen) = spawn_trapping_recorder();
        let m = smarm::monitor(h.pid());
        smarm::exit(h.pid(), DownReason::Killed);
        let x = seen.recv_timeout(GUARD).expect("exit(pid, Killed) did not arrive as an Exit message");
        assert_eq!((x.from, x.reason), (smarm::current_pid(), DownReason::Killed));
        assert!(!h.is_finished(), "the trapping target died of exit(pid, Killed)");
        // `kill` still ends it.
        smarm::kill(h.pid());
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
    });
}

#[test]
fn exit_with_killed_reason_ends_a_non_trapping_target_with_killed() {
    run(|| {
        let (h, m) = smarm::spawn_monitor(|| loop {
            smarm::yield_now();
        });
        smarm::exit(h.pid(), DownReason::Killed);
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
    });
}

/// Spawns a monitored actor that calls `end_itself` and then records that the call returned
/// (with no runtime call in between, so a call that returns is seen even though the actor
/// ends at its next runtime call). Returns whether it returned, and the Down's reason.
fn end_self_with(end_itself: fn()) -> (bool, DownReason) {
    let returned = Arc::new(AtomicBool::new(false));
    let r = returned.clone();
    let (_h, m) = smarm::spawn_monitor(move || {
        end_itself();
        // SeqCst: a test flag.
        r.store(true, Ordering::SeqCst);
    });
    let d = next_down();
    assert_eq!(d.monitor, m);
    (returned.load(Ordering::SeqCst), d.reason)
}

#[test]
fn kill_of_self_does_not_return() {
    run(|| {
        let (returned, reason) = end_self_with(|| smarm::kill(smarm::current_pid()));
        assert!(!returned, "kill(self) returned to the caller");
        assert_eq!(reason, DownReason::Killed);
    });
}

#[test]
fn exit_killed_to_self_does_not_return_to_a_non_trapping_caller() {
    run(|| {
        let (returned, reason) = end_self_with(|| smarm::exit(smarm::current_pid(), DownReason::Killed));
        assert!(!returned, "exit(self, Killed) returned to the caller");
        assert_eq!(reason, DownReason::Killed);
    });
}

#[test]
fn kill_of_self_is_not_trapped_but_exit_killed_to_self_is() {
    run(|| {
        // OTP: `exit(self(), killed)` in a trapping process is an `{'EXIT', self(), killed}`
        // message; `exit(self(), kill)` ends it with `killed`.
        let (got_tx, got_rx) = channel();
        let h = smarm::spawn(move || {
            smarm::trap_exit(true);
            let me = smarm::current_pid();
            smarm::exit(me, DownReason::Killed);
            got_tx.send((me, smarm::recv_signal_timeout(GUARD))).unwrap();
            smarm::kill(me);
            "kill(self) returned to a trapping caller"
        });
        let (me, got) = got_rx.recv_timeout(GUARD).expect("exit(self, Killed) ended a trapping caller");
        assert_eq!(got, Ok(Signal::Exit(Exit { from: me, reason: DownReason::Killed })));
        assert_eq!(h.join(), Err(DownReason::Killed));
    });
}

/// Set in the child process that runs a crashing scenario (see `run_child`).
const CHILD_ENV: &str = "SMARM_PROCESS_CHILD";

/// Runs one `#[ignore]`d child test of this binary in a fresh process; returns its status
/// and stderr.
fn run_child(test_name: &str) -> (std::process::ExitStatus, String) {
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .env(CHILD_ENV, "1")
        .args(["--exact", test_name, "--ignored", "--nocapture", "--test-threads=1"])
        .stdin(std::process::Stdio::null())
        .output()
        .expect("spawn the child test process");
    (out.status, String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A destructor that reports, then blocks (parks the actor) for a while.
struct SlowDestructor(Sender<()>);
impl Drop for SlowDestructor {
    fn drop(&mut self) {
        let _ = self.0.send(());
        smarm::sleep(50 * MS);
    }
}

#[test]
#[ignore = "child process of kill_of_actors_parked_in_destructors_mid_unwind_does_not_abort"]
fn child_kill_two_actors_parked_in_destructors_mid_unwind() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let mut victims = Vec::new();
        let (reached_tx, reached_rx) = channel::<()>();
        for _ in 0..2 {
            // `resume_unwind` does not run the panic hook.
            let slow = SlowDestructor(reached_tx.clone());
            let h = smarm::spawn(move || {
                let _slow = slow;
                std::panic::resume_unwind(Box::new(String::from("leaving")));
            });
            victims.push(h);
        }
        // One thread: each report is read once its sender has parked in its destructor.
        for _ in 0..2 {
            reached_rx.recv().unwrap();
        }
        for h in &victims {
            smarm::kill(h.pid());
        }
        for h in victims {
            assert!(h.join().is_err());
        }
    })
    .unwrap();
}

#[test]
#[ignore = "gap (documented in the crate doc, thread-locals and migration): an unwind that \
            bypasses the panic hook (here a user-level resume_unwind) and begins while another actor \
            of the same thread is parked mid-unwind is invisible, since std's per-thread panic count \
            reads only as a boolean; a kill is then raised inside its cleanup and the process aborts. \
            smarm's own resume_unwind paths mark the actor first; panics are marked by the hook"]
fn kill_of_actors_parked_in_destructors_mid_unwind_does_not_abort() {
    let (status, stderr) = run_child("child_kill_two_actors_parked_in_destructors_mid_unwind");
    assert!(status.success(), "the child process failed ({status}):\n{stderr}");
}

/// Parks twice in its `Drop`: reports, waits for `first`, reports, waits for `second`.
struct TwoParkDrop {
    reached: Sender<u8>,
    first: smarm::channel::Receiver<()>,
    second: smarm::channel::Receiver<()>,
}
impl Drop for TwoParkDrop {
    fn drop(&mut self) {
        // A failed assert here would abort: report instead.
        self.reached.send(if std::thread::panicking() { 1 } else { 0 }).unwrap();
        self.first.recv().unwrap();
        self.reached.send(2).unwrap();
        // Err once every sender is gone: ends the drop without a second message.
        let _ = self.second.recv();
    }
}

#[test]
#[ignore = "child process of an_unwinder_found_without_the_hook_stays_known_when_another_parks_beside_it"]
fn child_unwinder_found_without_the_hook_then_another_parks_beside_it() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    // One scheduler thread: every step below runs only once the actor before it parked.
    let rt = Runtime::builder().threads(1).quiet_panics(true).build().unwrap();
    rt.run(|| {
        let (reached_tx, reached_rx) = channel::<u8>();
        let (a_tx, a_rx) = channel::<()>();
        let (c_tx, c_rx) = channel::<()>();
        // v1 unwinds without the panic hook, alone: the runtime learns it is the unwinder
        // from "the thread panics and nobody else is parked mid-unwind".
        let guard = TwoParkDrop { reached: reached_tx.clone(), first: a_rx, second: c_rx };
        let v1 = smarm::spawn(move || {
            let _guard = guard;
            std::panic::resume_unwind(Box::new(String::from("v1 leaving")));
        });
        // v1 is parked in its drop.
        assert_eq!(reached_rx.recv().unwrap(), 1);
        // v2 panics (the hook marks it) and parks in its drop beside v1.
        let (b_tx, b_rx) = channel::<()>();
        let (v2_tx, v2_reached) = channel::<u8>();
        let v2 = smarm::spawn(move || {
            let _guard = TwoParkDrop { reached: v2_tx, first: b_rx, second: channel::<()>().1 };
            panic!("v2 leaving");
        });
        // v2 is parked in its drop.
        assert_eq!(v2_reached.recv().unwrap(), 1);
        // v1 parks again, now with v2 parked mid-unwind on the same thread: it must still
        // count as unwinding, so the kill below is not raised inside its cleanup (a second
        // unwind there aborts the process).
        a_tx.send(()).unwrap();
        assert_eq!(reached_rx.recv().unwrap(), 2);
        smarm::kill(v1.pid());
        c_tx.send(()).unwrap();
        // The kill found v1 dying of its own unwind: that stays its reason (the first exit).
        assert_eq!(v1.join(), Err(DownReason::Panic("v1 leaving".into())));
        // v2's second receiver has no sender: one message ends its drop.
        b_tx.send(()).unwrap();
        assert!(v2.join().is_err());
    })
    .unwrap();
}

#[test]
fn an_unwinder_found_without_the_hook_stays_known_when_another_parks_beside_it() {
    let (status, stderr) = run_child("child_unwinder_found_without_the_hook_then_another_parks_beside_it");
    assert!(status.success(), "the child process failed ({status}):\n{stderr}");
}

#[test]
fn selective_receive_keeps_its_deadline_while_other_messages_arrive() {
    run(|| {
        // The receive waits 1 s for `1`; a `0` comes at 0.8 s and the `1` at 1.6 s. A
        // receive that restarted its timeout on the `0` (until 1.8 s) would take the `1`.
        let (tx, rx) = oneshot::<(Result<Envelope<u32>, RecvTimeoutError>, Vec<u32>)>();
        let addr = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            let got = mb.recv_match_timeout(1000 * MS, |e| matches!(e, Envelope::Msg(1)));
            let mut rest = Vec::new();
            while let Ok(Envelope::Msg(m)) = mb.recv_timeout(Duration::ZERO) {
                rest.push(m);
            }
            tx.send((got, rest)).unwrap();
        });
        let start = Instant::now();
        smarm::sleep(800 * MS);
        addr.send(0);
        smarm::sleep((1600 * MS).saturating_sub(start.elapsed()));
        addr.send(1);
        let (got, rest) = rx.recv().unwrap();
        assert_eq!(got, Err(RecvTimeoutError::Timeout), "the receive outlived its 1 s timeout");
        // Whatever arrived before it ended is still queued, in order.
        assert!(rest == [0] || rest == [0, 1], "queue after the timeout: {rest:?}");
    });
}

#[test]
fn kill_reaches_an_actor_that_keeps_making_runtime_calls() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (h, _) = smarm::spawn_monitor(move || {
            ready_tx.send(()).unwrap();
            loop {
                smarm::yield_now();
            }
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        assert_eq!(next_down().reason, DownReason::Killed);
    });
}

#[test]
fn kill_is_raised_again_after_a_catch_unwind_swallowed_it() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<()>();
        let caught = Arc::new(AtomicBool::new(false));
        let caught2 = caught.clone();
        let (h, _) = smarm::spawn_monitor(move || {
            ready_tx.send(()).unwrap();
            let r = catch_unwind(park_forever);
            caught2.store(r.is_err(), Ordering::SeqCst);
            // The next runtime call must end the actor with Killed.
            smarm::sleep(Duration::from_millis(1));
            "survived"
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        assert_eq!(next_down().reason, DownReason::Killed);
        assert!(caught.load(Ordering::SeqCst));
        assert_eq!(h.join(), Err(DownReason::Killed));
    });
}

#[test]
fn kill_cannot_be_swallowed_by_catch_unwind_around_every_runtime_call() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (h, _) = smarm::spawn_monitor(move || {
            ready_tx.send(()).unwrap();
            // Give up after a bounded number of swallowed unwinds so the test ends.
            for _ in 0..50 {
                let _ = catch_unwind(|| smarm::sleep(Duration::from_millis(1)));
            }
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        assert_eq!(next_down().reason, DownReason::Killed);
    });
}

#[test]
fn trapping_actor_receives_exit_signals_as_messages() {
    run(|| {
        let me = smarm::current_pid();
        let (got_tx, got_rx) = channel::<Exit>();
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (go_tx, go_rx) = oneshot::<()>();
        let (h, m) = smarm::spawn_monitor(move || {
            smarm::trap_exit(true);
            ready_tx.send(()).unwrap();
            for _ in 0..2 {
                got_tx.send(next_exit()).unwrap();
            }
            go_rx.recv().unwrap();
            smarm::yield_now();
            "alive"
        });
        ready_rx.recv().unwrap();
        smarm::exit(h.pid(), custom("first"));
        smarm::exit(h.pid(), DownReason::Shutdown);
        assert_eq!(got_rx.recv_timeout(GUARD), Ok(Exit { from: me, reason: custom("first") }));
        assert_eq!(got_rx.recv_timeout(GUARD), Ok(Exit { from: me, reason: DownReason::Shutdown }));
        go_tx.send(()).unwrap();
        assert_eq!(h.join(), Ok("alive"));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
    });
}

#[test]
fn trapping_actor_receives_exit_normal_as_a_message() {
    run(|| {
        let me = smarm::current_pid();
        let (ready_tx, ready_rx) = oneshot::<()>();
        let h = smarm::spawn(move || {
            smarm::trap_exit(true);
            ready_tx.send(()).unwrap();
            next_exit()
        });
        ready_rx.recv().unwrap();
        smarm::exit(h.pid(), DownReason::Normal);
        assert_eq!(h.join(), Ok(Exit { from: me, reason: DownReason::Normal }));
    });
}

#[test]
fn trapping_mailbox_actor_receives_exit_in_its_mailbox() {
    run(|| {
        let me = smarm::current_pid();
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (res_tx, res_rx) = oneshot();
        let addr = smarm::spawn_actor(move |mb: Mailbox<u32>| {
            smarm::trap_exit(true);
            ready_tx.send(()).unwrap();
            let a = mb.recv_timeout(GUARD);
            let b = mb.recv_timeout(GUARD);
            res_tx.send((a, b)).unwrap();
        });
        ready_rx.recv().unwrap();
        smarm::exit(addr.pid(), custom("x"));
        addr.send(5);
        let (a, b) = res_rx.recv().unwrap();
        assert_eq!(a, Ok(Envelope::Exit(Exit { from: me, reason: custom("x") })));
        assert_eq!(b, Ok(Envelope::Msg(5)));
    });
}

#[test]
fn trap_exit_returns_the_previous_setting_and_can_be_turned_off() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<(bool, bool)>();
        let (h, _) = smarm::spawn_monitor(move || {
            let first = smarm::trap_exit(true);
            let second = smarm::trap_exit(false);
            ready_tx.send((first, second)).unwrap();
            park_forever();
        });
        assert_eq!(ready_rx.recv().unwrap(), (false, true));
        // No longer trapping: the signal is fatal again.
        smarm::exit(h.pid(), custom("off"));
        assert_eq!(next_down().reason, custom("off"));
    });
}

// ------------------------------------------------------------------------------------------
// Ordering
// ------------------------------------------------------------------------------------------

const N_ORDERED: u32 = 1000;

#[test]
fn messages_sent_before_death_arrive_before_the_down() {
    run(|| {
        for how in ["return", "panic"] {
            let (got, down) = in_actor(move |mb: Mailbox<u32>| {
                let addr = mb.addr();
                let (_h, m) = smarm::spawn_monitor(move || {
                    for i in 0..N_ORDERED {
                        addr.send(i);
                    }
                    if how == "panic" {
                        panic!("after sending");
                    }
                });
                let mut got = Vec::new();
                loop {
                    match mb.recv_timeout(GUARD).expect("nothing arrived") {
                        Envelope::Msg(i) => got.push(i),
                        Envelope::Down(d) => {
                            assert_eq!(d.monitor, m);
                            return (got, d.reason);
                        }
                        Envelope::Exit(x) => panic!("unexpected {x:?}"),
                    }
                }
            });
            assert_eq!(got, (0..N_ORDERED).collect::<Vec<_>>(), "messages lost or reordered ({how})");
            let want = if how == "panic" { DownReason::Panic("after sending".into()) } else { DownReason::Normal };
            assert_eq!(down, want);
        }
    });
}

#[test]
fn messages_sent_before_death_arrive_before_the_link_exit_signal() {
    run(|| {
        let (got, exit, child) = in_actor(move |mb: Mailbox<u32>| {
            smarm::trap_exit(true);
            let addr = mb.addr();
            let h = smarm::spawn_link(move || {
                for i in 0..N_ORDERED {
                    addr.send(i);
                }
                panic!("linked sender done");
            });
            let mut got = Vec::new();
            loop {
                match mb.recv_timeout(GUARD).expect("nothing arrived") {
                    Envelope::Msg(i) => got.push(i),
                    Envelope::Exit(x) => return (got, x, h.pid()),
                    Envelope::Down(d) => panic!("unexpected {d:?}"),
                }
            }
        });
        assert_eq!(got, (0..N_ORDERED).collect::<Vec<_>>());
        assert_eq!(exit, Exit { from: child, reason: DownReason::Panic("linked sender done".into()) });
    });
}

#[test]
fn messages_and_exit_signals_from_one_sender_keep_their_order() {
    run(|| {
        let (got, sender) = in_actor(move |mb: Mailbox<u32>| {
            smarm::trap_exit(true);
            let addr = mb.addr();
            let me = mb.pid();
            let h = smarm::spawn(move || {
                for round in 0..100 {
                    addr.send(round * 3);
                    smarm::exit(me, custom("a"));
                    addr.send(round * 3 + 1);
                    smarm::exit(me, DownReason::Normal);
                    addr.send(round * 3 + 2);
                }
            });
            let sender = h.pid();
            h.join().unwrap();
            let mut got = Vec::new();
            while let Ok(e) = mb.try_recv() {
                got.push(e);
            }
            (got, sender)
        });
        let mut want = Vec::new();
        for round in 0..100 {
            want.push(Envelope::Msg(round * 3));
            want.push(Envelope::Exit(Exit { from: sender, reason: custom("a") }));
            want.push(Envelope::Msg(round * 3 + 1));
            want.push(Envelope::Exit(Exit { from: sender, reason: DownReason::Normal }));
            want.push(Envelope::Msg(round * 3 + 2));
        }
        assert_eq!(got, want);
    });
}

// ------------------------------------------------------------------------------------------
// Visible resources are released before notifications
// ------------------------------------------------------------------------------------------

#[test]
fn name_is_free_when_the_down_is_handled() {
    run(|| {
        for round in 0..100 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let (h, m) = smarm::spawn_monitor(move || {
                smarm::register("svc", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                if round % 2 == 0 {
                    panic!("crash");
                }
            });
            ready_rx.recv().unwrap();
            assert_eq!(smarm::whereis("svc"), Some(h.pid()));
            go_tx.send(()).unwrap();
            let d = next_down();
            assert_eq!(d.monitor, m);
            assert_eq!(smarm::whereis("svc"), None, "round {round}: name still registered at Down");
            assert_eq!(smarm::register("svc", smarm::current_pid()), Ok(()), "round {round}");
            assert_eq!(smarm::unregister("svc"), Some(smarm::current_pid()));
        }
    });
}

/// Number of monitors a crowded target has: it is still queueing Downs well after the
/// first one can be seen.
const CROWD: usize = 5000;

/// Sets `CROWD` monitors on `target`, lets it end, and runs `check` the moment the first
/// Down is seen (spinning on its own scheduler thread while the target runs on the other).
fn at_first_of_many_downs<T: Send + 'static>(
    target: Pid,
    go: smarm::channel::OneshotSender<()>,
    check: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (ready_tx, ready_rx) = oneshot::<()>();
    let (res_tx, res_rx) = oneshot::<T>();
    smarm::spawn(move || {
        for _ in 0..CROWD {
            smarm::monitor(target);
        }
        // Told from a plain thread, so the test goes on on the other scheduler thread (a
        // wake from here would wait in this thread's wake slot while this actor spins).
        std::thread::spawn(move || ready_tx.send(()).unwrap()).join().unwrap();
        while smarm::recv_signal_timeout(Duration::ZERO).is_err() {
            std::hint::spin_loop();
        }
        let r = check();
        for _ in 1..CROWD {
            next_down();
        }
        let _ = res_tx.send(r);
    });
    ready_rx.recv().unwrap();
    go.send(()).unwrap();
    res_rx.recv().unwrap()
}

#[test]
fn name_is_free_before_the_first_of_many_downs_is_delivered() {
    run(|| {
        for round in 0..20 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let target = smarm::spawn(move || {
                smarm::register("crowded", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
            });
            ready_rx.recv().unwrap();
            let holder = at_first_of_many_downs(target.pid(), go_tx, || smarm::whereis("crowded"));
            assert_eq!(holder, None, "round {round}: the name was still registered at the first Down");
        }
    });
}

#[test]
fn name_of_a_killed_actor_is_free_when_the_down_is_handled() {
    run(|| {
        for round in 0..50 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (h, _) = smarm::spawn_monitor(move || {
                smarm::register("victim", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                park_forever();
            });
            ready_rx.recv().unwrap();
            smarm::kill(h.pid());
            assert_eq!(next_down().reason, DownReason::Killed);
            assert_eq!(smarm::register("victim", smarm::current_pid()), Ok(()), "round {round}");
            smarm::unregister("victim");
        }
    });
}

#[test]
fn name_is_free_when_the_link_exit_signal_is_handled() {
    run(|| {
        smarm::trap_exit(true);
        for round in 0..50 {
            let (ready_tx, ready_rx) = oneshot::<()>();
            let (go_tx, go_rx) = oneshot::<()>();
            let h = smarm::spawn_link(move || {
                smarm::register("linked", smarm::current_pid()).unwrap();
                ready_tx.send(()).unwrap();
                go_rx.recv().unwrap();
                panic!("linked crash");
            });
            ready_rx.recv().unwrap();
            go_tx.send(()).unwrap();
            let x = next_exit();
            assert_eq!(x.from, h.pid());
            assert_eq!(smarm::whereis("linked"), None, "round {round}");
            assert_eq!(smarm::register("linked", smarm::current_pid()), Ok(()), "round {round}");
            smarm::unregister("linked");
        }
    });
}

// ------------------------------------------------------------------------------------------
// Links
// ------------------------------------------------------------------------------------------

#[test]
fn link_carries_the_targets_exit_to_the_caller() {
    run(|| {
        smarm::trap_exit(true);
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || {
            go_rx.recv().unwrap();
            panic!("target died");
        });
        smarm::link(h.pid()).unwrap();
        go_tx.send(()).unwrap();
        assert_eq!(next_exit(), Exit { from: h.pid(), reason: DownReason::Panic("target died".into()) });
    });
}

#[test]
fn link_carries_the_callers_exit_to_the_target() {
    run(|| {
        let (target, seen) = spawn_trapping_recorder();
        let t = target.pid();
        let caller = smarm::spawn(move || {
            smarm::link(t).unwrap();
            panic!("caller died");
        });
        let caller_pid = caller.pid();
        assert!(caller.join().is_err());
        assert_eq!(
            seen.recv_timeout(GUARD),
            Ok(Exit { from: caller_pid, reason: DownReason::Panic("caller died".into()) })
        );
        assert!(!target.is_finished());
    });
}

#[test]
fn linked_non_trapping_actor_dies_with_the_same_reason() {
    run(|| {
        let victim = spawn_parked();
        let v = victim.pid();
        smarm::monitor(v);
        let h = smarm::spawn(move || {
            smarm::link(v).unwrap();
            smarm::exit(smarm::current_pid(), custom("chain"));
            smarm::yield_now();
        });
        assert_eq!(h.join(), Err(custom("chain")));
        assert_eq!(next_down().reason, custom("chain"));
        assert_eq!(victim.join(), Err(custom("chain")));
    });
}

#[test]
fn normal_exit_over_a_link_does_not_kill_a_non_trapping_peer() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let peer = smarm::spawn(move || {
            go_rx.recv().unwrap();
            smarm::yield_now();
            "peer alive"
        });
        let p = peer.pid();
        let h = smarm::spawn(move || smarm::link(p).unwrap());
        h.join().unwrap();
        go_tx.send(()).unwrap();
        assert_eq!(peer.join(), Ok("peer alive"));
    });
}

#[test]
fn killed_propagates_over_links_as_a_trappable_killed() {
    run(|| {
        let victim = spawn_parked();
        let v = victim.pid();
        // A non-trapping actor linked to the victim dies with Killed.
        let (linked_tx, linked_rx) = oneshot::<()>();
        let (bystander, m) = smarm::spawn_monitor(move || {
            smarm::link(v).unwrap();
            linked_tx.send(()).unwrap();
            park_forever();
        });
        linked_rx.recv().unwrap();
        // A trapping actor linked to the victim receives Exit { Killed } and lives on.
        let (trap_linked_tx, trap_linked_rx) = oneshot::<()>();
        let (seen_tx, seen_rx) = oneshot::<Exit>();
        let trapping = smarm::spawn(move || {
            smarm::trap_exit(true);
            smarm::link(v).unwrap();
            trap_linked_tx.send(()).unwrap();
            seen_tx.send(next_exit()).unwrap();
            smarm::yield_now();
            "trapper alive"
        });
        trap_linked_rx.recv().unwrap();
        smarm::kill(v);
        assert_eq!(seen_rx.recv().unwrap(), Exit { from: v, reason: DownReason::Killed });
        assert_eq!(trapping.join(), Ok("trapper alive"));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Killed));
        assert_eq!(bystander.join(), Err(DownReason::Killed));
        assert_eq!(victim.join(), Err(DownReason::Killed));
    });
}

#[test]
fn link_twice_then_unlink_once_removes_the_link() {
    run(|| {
        smarm::trap_exit(true);
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || {
            go_rx.recv().unwrap();
            panic!("after unlink");
        });
        smarm::link(h.pid()).unwrap();
        smarm::link(h.pid()).unwrap();
        smarm::unlink(h.pid());
        go_tx.send(()).unwrap();
        assert!(h.join().is_err());
        assert_no_signal_queued();
    });
}

#[test]
fn many_links_keep_one_link_per_pair() {
    run(|| {
        smarm::trap_exit(true);
        const N: usize = 40;
        let (go_tx, go_rx) = smarm::channel::watch(false);
        let peers: Vec<_> = (0..N)
            .map(|_| {
                let mut go = go_rx.clone();
                let h = smarm::spawn(move || {
                    go.changed().unwrap();
                    panic!("peer ends");
                });
                smarm::link(h.pid()).unwrap();
                smarm::link(h.pid()).unwrap();
                h
            })
            .collect();
        // Every other link removed (one `unlink` after two `link`s).
        let mut linked = std::collections::HashSet::new();
        for (i, h) in peers.iter().enumerate() {
            if i % 2 == 0 {
                smarm::unlink(h.pid());
            } else {
                linked.insert(h.pid());
            }
        }
        go_tx.send(true);
        for h in peers {
            assert!(h.join().is_err());
        }
        // One exit signal per remaining link, none from the unlinked peers.
        for _ in 0..N / 2 {
            let x = next_exit();
            assert!(linked.remove(&x.from), "unexpected or repeated exit from {}", x.from);
        }
        assert_no_signal_queued();
    });
}

#[test]
fn link_twice_delivers_a_single_exit() {
    run(|| {
        smarm::trap_exit(true);
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn_link(move || {
            go_rx.recv().unwrap();
            panic!("once");
        });
        smarm::link(h.pid()).unwrap();
        smarm::link(h.pid()).unwrap();
        let pid = h.pid();
        go_tx.send(()).unwrap();
        assert!(h.join().is_err());
        assert_eq!(next_exit().from, pid);
        assert_no_signal_queued();
    });
}

#[test]
fn no_exit_signal_arrives_after_unlink_returns_even_when_racing_the_peers_death() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            smarm::trap_exit(true);
            let me = mb.addr();
            for round in 0..2000 {
                let h = smarm::spawn(|| -> () { panic!("racing") });
                let _ = smarm::link(h.pid());
                smarm::unlink(h.pid());
                // Everything queued after this marker arrived after unlink returned.
                me.send(round);
                let _ = h.join();
                let mut after_marker = false;
                while let Ok(e) = mb.try_recv() {
                    match e {
                        Envelope::Msg(r) if r == round => after_marker = true,
                        Envelope::Exit(x) if after_marker => {
                            panic!("round {round}: {x:?} arrived after unlink returned")
                        }
                        _ => {}
                    }
                }
            }
        });
    });
}

/// A timer message whose destructor runs when its target's exit cancels the timer: after
/// the target's Downs were queued and its links taken, before its exit signals go out. It
/// announces that (if asked) and holds the exit there until `resume`.
struct HoldExit {
    dropping: Option<Sender<()>>,
    resume: std::sync::mpsc::Receiver<()>,
}
impl Drop for HoldExit {
    fn drop(&mut self) {
        if let Some(tx) = self.dropping.take() {
            // Sent from a plain thread: a wake sent from this scheduler thread could wait in
            // its wake slot, and this thread is about to block.
            std::thread::spawn(move || {
                let _ = tx.send(());
            })
            .join()
            .unwrap();
        }
        // Blocks this scheduler thread; the test goes on on the other one.
        let _ = self.resume.recv_timeout(GUARD);
    }
}

#[test]
fn no_exit_signal_arrives_after_unlink_returns_while_the_peer_is_exiting() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            smarm::trap_exit(true);
            let (go_tx, go_rx) = oneshot::<()>();
            let target = smarm::spawn_actor(move |_mb: Mailbox<HoldExit>| go_rx.recv().unwrap());
            let t = target.pid();
            smarm::link(t).unwrap();
            // A second linked actor, after us in the target's links: its Exit goes out after
            // any Exit to us.
            let (linked_tx, linked_rx) = oneshot::<()>();
            let (observed_tx, observed_rx) = oneshot::<()>();
            smarm::spawn(move || {
                smarm::trap_exit(true);
                smarm::link(t).unwrap();
                linked_tx.send(()).unwrap();
                next_exit();
                observed_tx.send(()).unwrap();
            });
            linked_rx.recv().unwrap();
            let (dropping_tx, dropping_rx) = channel();
            let (resume_tx, resume_rx) = std::sync::mpsc::channel();
            let hold = HoldExit { dropping: Some(dropping_tx), resume: resume_rx };
            let _timer = smarm::send_after_addr(Duration::from_secs(60), &target, hold);
            go_tx.send(()).unwrap();
            dropping_rx.recv_timeout(GUARD).expect("the target's exit did not reach its timers");
            // The target is mid-exit: its links are taken, no exit signal has gone out yet.
            smarm::unlink(t);
            mb.addr().send(1);
            resume_tx.send(()).unwrap();
            observed_rx.recv().unwrap();
            assert_eq!(mb.try_recv(), Ok(Envelope::Msg(1)));
            assert_eq!(mb.try_recv(), Err(TryRecvError::Empty), "an exit signal arrived after unlink returned");
        });
    });
}

#[test]
fn timers_aimed_at_an_actor_are_cancelled_before_its_down_is_delivered() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let target = smarm::spawn_actor(move |_mb: Mailbox<HoldExit>| go_rx.recv().unwrap());
        let m = smarm::monitor(target.pid());
        let (dropping_tx, dropping_rx) = channel();
        let (resume_tx, resume_rx) = std::sync::mpsc::channel();
        let hold = HoldExit { dropping: Some(dropping_tx), resume: resume_rx };
        let _t1 = smarm::send_after_addr(Duration::from_secs(60), &target, hold);
        let (_, dead_rx) = std::sync::mpsc::channel();
        let t2 = smarm::send_after_addr(Duration::from_secs(60), &target, HoldExit { dropping: None, resume: dead_rx });
        go_tx.send(()).unwrap();
        dropping_rx.recv_timeout(GUARD).expect("the target's exit did not reach its timers");
        assert_eq!(next_down().monitor, m);
        let left = smarm::cancel_timer(t2);
        resume_tx.send(()).unwrap();
        assert_eq!(left, None, "a timer aimed at the actor was still pending after its Down");
    });
}

#[test]
fn non_trapping_caller_survives_peer_death_after_unlink() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || {
            go_rx.recv().unwrap();
            smarm::exit(smarm::current_pid(), custom("peer gone"));
            smarm::yield_now();
        });
        smarm::link(h.pid()).unwrap();
        smarm::unlink(h.pid());
        go_tx.send(()).unwrap();
        assert_eq!(h.join(), Err(custom("peer gone")));
        // A pending stop would fire at this runtime call.
        smarm::yield_now();
    });
}

#[test]
fn unlink_removes_the_link_for_both_sides() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let peer = smarm::spawn(move || {
            go_rx.recv().unwrap();
            smarm::yield_now();
            "peer alive"
        });
        let p = peer.pid();
        let h = smarm::spawn(move || {
            smarm::link(p).unwrap();
            smarm::unlink(p);
            panic!("unlinked caller dies");
        });
        assert!(h.join().is_err());
        go_tx.send(()).unwrap();
        assert_eq!(peer.join(), Ok("peer alive"));
    });
}

#[test]
fn link_to_a_dead_pid_is_a_noproc_error_for_a_non_trapping_caller() {
    run(|| {
        let h = smarm::spawn(|| ());
        let dead = h.pid();
        h.join().unwrap();
        assert_eq!(smarm::link(dead), Err(DownReason::NoProc));
        assert_no_signal_queued();
    });
}

#[test]
fn link_to_a_dead_pid_delivers_exit_noproc_to_a_trapping_caller() {
    run(|| {
        smarm::trap_exit(true);
        let h = smarm::spawn(|| ());
        let dead = h.pid();
        h.join().unwrap();
        assert_eq!(smarm::link(dead), Ok(()));
        assert_eq!(next_exit(), Exit { from: dead, reason: DownReason::NoProc });
        assert_no_signal_queued();
    });
}

#[test]
fn link_racing_the_targets_exit_reports_that_exit_exactly_once() {
    run(|| {
        smarm::trap_exit(true);
        for i in 0..1000u32 {
            // The target runs on the other thread (it spins without runtime calls, so the
            // caller only gets to set `go` from the other one) and ends as soon as it sees
            // `go`. The caller's varied spin then sweeps its `link` across the target's
            // exit: either way exactly one Exit must come, `Normal` if the link was made in
            // time, else `NoProc`.
            let started = Arc::new(AtomicBool::new(false));
            let go = Arc::new(AtomicBool::new(false));
            let (s, g) = (started.clone(), go.clone());
            let h = smarm::spawn(move || {
                s.store(true, Ordering::Release);
                while !g.load(Ordering::Acquire) {
                    std::hint::spin_loop();
                }
            });
            let pid = h.pid();
            while !started.load(Ordering::Acquire) {
                smarm::yield_now();
            }
            go.store(true, Ordering::Release);
            for _ in 0..i % 100 {
                std::hint::spin_loop();
            }
            assert_eq!(smarm::link(pid), Ok(()));
            let x = next_exit();
            assert_eq!(x.from, pid);
            assert!(matches!(x.reason, DownReason::Normal | DownReason::NoProc), "{x:?}");
            h.join().unwrap();
            assert_no_signal_queued();
        }
    });
}

// ------------------------------------------------------------------------------------------
// Monitors
// ------------------------------------------------------------------------------------------

#[test]
fn monitor_is_one_way() {
    run(|| {
        let (check_tx, check_rx) = oneshot::<()>();
        let (res_tx, res_rx) = oneshot::<Result<Signal, RecvTimeoutError>>();
        let target = smarm::spawn(move || {
            check_rx.recv().unwrap();
            res_tx.send(smarm::recv_signal_timeout(Duration::ZERO)).unwrap();
            smarm::yield_now();
            "target alive"
        });
        let t = target.pid();
        let watcher = smarm::spawn(move || {
            smarm::monitor(t);
            panic!("watcher dies");
        });
        assert!(watcher.join().is_err());
        check_tx.send(()).unwrap();
        assert_eq!(
            res_rx.recv().unwrap(),
            Err(RecvTimeoutError::Timeout),
            "the monitored actor was told of its watcher's death"
        );
        assert_eq!(target.join(), Ok("target alive"));
    });
}

#[test]
fn monitor_fires_exactly_once() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || go_rx.recv().unwrap());
        let m = smarm::monitor(h.pid());
        go_tx.send(()).unwrap();
        h.join().unwrap();
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
        assert_no_signal_queued();
        assert!(!smarm::demonitor(m), "a fired monitor is no longer active");
    });
}

#[test]
fn each_monitor_call_creates_an_independent_monitor() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || go_rx.recv().unwrap());
        let m1 = smarm::monitor(h.pid());
        let m2 = smarm::monitor(h.pid());
        assert_ne!(m1, m2);
        assert_eq!(m1.target(), h.pid());
        go_tx.send(()).unwrap();
        h.join().unwrap();
        let mut fired = vec![next_down().monitor, next_down().monitor];
        fired.sort_by_key(|m| if *m == m1 { 0 } else { 1 });
        assert_eq!(fired, vec![m1, m2]);
        assert_no_signal_queued();
    });
}

#[test]
fn monitor_of_a_dead_pid_reports_noproc_at_once() {
    run(|| {
        let h = smarm::spawn(|| ());
        let dead = h.pid();
        h.join().unwrap();
        let m = smarm::monitor(dead);
        // Already queued: no waiting.
        let s = smarm::recv_signal_timeout(Duration::ZERO);
        assert_eq!(s, Ok(Signal::Down(Down { monitor: m, pid: dead, reason: DownReason::NoProc, name: None })));
    });
}

#[test]
fn demonitor_prevents_a_later_down() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || {
            go_rx.recv().unwrap();
            panic!("dies after demonitor");
        });
        let m = smarm::monitor(h.pid());
        assert!(smarm::demonitor(m));
        go_tx.send(()).unwrap();
        assert!(h.join().is_err());
        assert_no_signal_queued();
    });
}

#[test]
fn demonitor_leaves_other_monitors_alone() {
    run(|| {
        let (go_tx, go_rx) = oneshot::<()>();
        let h = smarm::spawn(move || go_rx.recv().unwrap());
        let m1 = smarm::monitor(h.pid());
        let m2 = smarm::monitor(h.pid());
        assert!(smarm::demonitor(m1));
        go_tx.send(()).unwrap();
        h.join().unwrap();
        assert_eq!(next_down().monitor, m2);
        assert_no_signal_queued();
    });
}

#[test]
fn demonitor_keeps_an_already_queued_down() {
    run(|| {
        let h = smarm::spawn(|| ());
        let m = smarm::monitor(h.pid());
        h.join().unwrap();
        assert!(!smarm::demonitor(m), "the monitor already fired");
        assert_eq!(next_down().monitor, m);
    });
}

#[test]
fn demonitor_flush_removes_an_already_queued_down() {
    run(|| {
        let a = smarm::spawn(|| ());
        let b = smarm::spawn(|| ());
        let a_pid = a.pid();
        let ma = smarm::monitor(a.pid());
        let mb = smarm::monitor(b.pid());
        a.join().unwrap();
        b.join().unwrap();
        assert!(smarm::demonitor_flush(ma));
        // Only the flushed monitor's Down is gone.
        assert_eq!(next_down().monitor, mb);
        assert_no_signal_queued();
        // A monitor of a dead pid queues NoProc at once; flush removes it too.
        let mc = smarm::monitor(a_pid);
        assert!(smarm::demonitor_flush(mc));
        assert_no_signal_queued();
    });
}

#[test]
fn demonitor_flush_removes_a_queued_down_from_a_typed_mailbox() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            let h = smarm::spawn(|| ());
            let m = smarm::monitor(h.pid());
            mb.addr().send(1);
            h.join().unwrap();
            mb.addr().send(2);
            assert!(smarm::demonitor_flush(m));
            assert_eq!(mb.try_recv(), Ok(Envelope::Msg(1)));
            assert_eq!(mb.try_recv(), Ok(Envelope::Msg(2)));
            assert_eq!(mb.try_recv(), Err(TryRecvError::Empty));
        });
    });
}

#[test]
fn demonitor_racing_with_exit_never_lets_a_down_through_after_returning_true() {
    run(|| {
        for _ in 0..500 {
            let h = smarm::spawn(|| ());
            let m = smarm::monitor(h.pid());
            let active = smarm::demonitor(m);
            h.join().unwrap();
            match smarm::recv_signal_timeout(Duration::ZERO) {
                Err(_) => assert!(active, "demonitor returned false but no Down was queued"),
                Ok(Signal::Down(d)) => {
                    assert!(!active, "a Down was delivered after demonitor returned true");
                    assert_eq!(d.monitor, m);
                }
                Ok(other) => panic!("unexpected {other:?}"),
            }
            assert_no_signal_queued();
        }
        for _ in 0..500 {
            let h = smarm::spawn(|| ());
            let m = smarm::monitor(h.pid());
            smarm::demonitor_flush(m);
            h.join().unwrap();
            assert_no_signal_queued();
        }
    });
}

// ------------------------------------------------------------------------------------------
// spawn_link / spawn_monitor
// ------------------------------------------------------------------------------------------

#[test]
fn spawn_monitor_reports_an_immediate_death_with_its_real_reason() {
    run(|| {
        for _ in 0..300 {
            let (h, m) = smarm::spawn_monitor(|| -> () { panic!("at once") });
            let d = next_down();
            assert_eq!((d.monitor, d.pid), (m, h.pid()));
            assert_eq!(d.reason, DownReason::Panic("at once".into()));
            let (_h, m) = smarm::spawn_monitor(|| ());
            let d = next_down();
            assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
        }
    });
}

#[test]
fn spawn_link_reports_an_immediate_death_with_its_real_reason() {
    run(|| {
        smarm::trap_exit(true);
        for _ in 0..300 {
            let h = smarm::spawn_link(|| -> () { panic!("at once") });
            assert_eq!(next_exit(), Exit { from: h.pid(), reason: DownReason::Panic("at once".into()) });
            let h = smarm::spawn_link(|| ());
            assert_eq!(next_exit(), Exit { from: h.pid(), reason: DownReason::Normal });
        }
    });
}

/// One scheduler thread that preempts at every opportunity: a spawned child runs as soon
/// as its parent reaches a preemption point, e.g. the one inside `spawn_*` itself.
fn run_preempting<T: Send + 'static>(root: impl FnOnce() -> T + Send + 'static) -> T {
    let rt = Runtime::builder().threads(1).timeslice_cycles(1).quiet_panics(true).build().unwrap();
    rt.run(root).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn spawn_monitor_reports_a_child_that_dies_before_the_parent_resumes() {
    run_preempting(|| {
        for _ in 0..100 {
            // Start a timeslice: the preemption point inside spawn_monitor then yields.
            smarm::maybe_preempt();
            let (h, m) = smarm::spawn_monitor(|| -> () { panic!("first thing") });
            let d = next_down();
            assert_eq!((d.monitor, d.pid), (m, h.pid()));
            assert_eq!(d.reason, DownReason::Panic("first thing".into()));
        }
    });
}

#[test]
fn spawn_link_reports_a_child_that_dies_before_the_parent_resumes() {
    run_preempting(|| {
        smarm::trap_exit(true);
        for _ in 0..100 {
            // Start a timeslice: the preemption point inside spawn_link then yields.
            smarm::maybe_preempt();
            let h = smarm::spawn_link(|| -> () { panic!("first thing") });
            assert_eq!(next_exit(), Exit { from: h.pid(), reason: DownReason::Panic("first thing".into()) });
        }
    });
}

#[test]
fn spawn_link_child_dying_at_once_takes_a_non_trapping_parent_with_it() {
    run(|| {
        for _ in 0..100 {
            let (parent, m) = smarm::spawn_monitor(|| {
                let _child = smarm::spawn_link(|| -> () { panic!("child at once") });
                park_forever();
            });
            let d = next_down();
            assert_eq!((d.monitor, d.reason), (m, DownReason::Panic("child at once".into())));
            assert_eq!(parent.join(), Err(DownReason::Panic("child at once".into())));
        }
    });
}

// ------------------------------------------------------------------------------------------
// Generations and names
// ------------------------------------------------------------------------------------------

/// Spawns an actor with a mailbox, retrying while the only free slot is still being
/// released by its previous occupant.
fn spawn_in_freed_slot<M: Send + 'static>(make: impl Fn() -> Box<dyn FnOnce(Mailbox<M>) + Send + 'static>) -> Addr<M> {
    loop {
        match smarm::try_spawn_actor(make()) {
            Ok(a) => return a,
            Err(smarm::SpawnError::Full { .. }) => smarm::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
}

/// An actor in the one spare slot that ends at once; returns its address once it ended.
fn dead_actor() -> Addr<&'static str> {
    let old = spawn_in_freed_slot::<&'static str>(|| Box::new(|_mb| ()));
    let m = smarm::monitor(old.pid());
    let d = next_down();
    assert_eq!(d.monitor, m);
    old
}

/// The new occupant of the spare slot: reports the first thing it receives.
fn new_occupant(report: Sender<Result<Envelope<&'static str>, RecvTimeoutError>>) -> Addr<&'static str> {
    spawn_in_freed_slot::<&'static str>(move || {
        let report = report.clone();
        Box::new(move |mb: Mailbox<&'static str>| {
            report.send(mb.recv_timeout(GUARD)).unwrap();
        })
    })
}

#[test]
fn messages_to_a_dead_actor_never_reach_the_new_occupant_of_its_slot() {
    run_two_slots(|| {
        let old = dead_actor();
        let (tx, rx) = channel();
        let new = new_occupant(tx);
        assert_eq!(slot_index(new.pid()), slot_index(old.pid()), "the slot was not reused");
        assert_ne!(new.pid(), old.pid());
        old.send("stale");
        assert_eq!(old.try_send("stale again"), Err(SendError("stale again")));
        assert!(!old.is_alive());
        new.send("probe");
        assert_eq!(rx.recv_timeout(GUARD), Ok(Ok(Envelope::Msg("probe"))));
    });
}

#[test]
fn signals_to_a_stale_pid_never_reach_the_new_occupant_of_its_slot() {
    run_two_slots(|| {
        let old = dead_actor();
        let stale = old.pid();
        let (tx, rx) = channel();
        let new = new_occupant(tx);
        assert_eq!(slot_index(new.pid()), slot_index(stale));
        let watch = smarm::monitor(new.pid());

        smarm::exit(stale, custom("stale exit"));
        smarm::kill(stale);
        assert_eq!(smarm::link(stale), Err(DownReason::NoProc));
        assert_eq!(smarm::register("stale-name", stale), Err(RegisterError::NoProc));
        let m = smarm::monitor(stale);
        assert_eq!(
            smarm::recv_signal_timeout(Duration::ZERO),
            Ok(Signal::Down(Down { monitor: m, pid: stale, reason: DownReason::NoProc, name: None }))
        );

        // The new occupant is unaffected: it receives the probe and ends normally.
        new.send("probe");
        assert_eq!(rx.recv_timeout(GUARD), Ok(Ok(Envelope::Msg("probe"))));
        let d = next_down();
        assert_eq!((d.monitor, d.reason), (watch, DownReason::Normal));
    });
}

#[test]
fn timer_aimed_at_a_dead_actor_never_reaches_the_new_occupant_of_its_slot() {
    run_two_slots(|| {
        let old = dead_actor();
        let t = smarm::send_after_addr(5 * MS, &old, "stale timer");
        let (tx, rx) = channel();
        let new = new_occupant(tx);
        assert_eq!(slot_index(new.pid()), slot_index(old.pid()));
        // Let the timer's deadline pass.
        smarm::sleep(30 * MS);
        new.send("probe");
        assert_eq!(rx.recv_timeout(GUARD), Ok(Ok(Envelope::Msg("probe"))));
        assert_eq!(smarm::cancel_timer(t), None);
    });
}

#[test]
fn sending_to_a_dead_actor_is_silently_dropped() {
    run(|| {
        let (tx, rx) = oneshot::<()>();
        let addr = smarm::spawn_actor(move |_mb: Mailbox<u32>| tx.send(()).unwrap());
        rx.recv().unwrap();
        smarm::monitor(addr.pid());
        next_down();
        addr.send(1); // no panic, no error
        assert_eq!(addr.try_send(2), Err(SendError(2)));
    });
}

#[test]
fn sending_to_an_unknown_registered_name_is_an_error() {
    run(|| {
        assert_eq!(smarm::send_named::<u32>("nobody", 1), Err(LookupError::NotFound));
        assert_eq!(smarm::whereis_addr::<u32>("nobody").err(), Some(LookupError::NotFound));

        // A name whose actor ended is unknown again.
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (go_tx, go_rx) = oneshot::<()>();
        let addr = smarm::spawn_actor(move |_mb: Mailbox<u32>| {
            smarm::register("short-lived", smarm::current_pid()).unwrap();
            ready_tx.send(()).unwrap();
            go_rx.recv().unwrap();
        });
        ready_rx.recv().unwrap();
        assert_eq!(
            smarm::send_named::<String>("short-lived", "x".into()),
            Err(LookupError::WrongType { expected: std::any::type_name::<String>() })
        );
        smarm::monitor(addr.pid());
        go_tx.send(()).unwrap();
        next_down();
        assert_eq!(smarm::send_named::<u32>("short-lived", 1), Err(LookupError::NotFound));
    });
}

#[test]
fn send_named_reaches_the_registered_actor() {
    run(|| {
        let (ready_tx, ready_rx) = oneshot::<()>();
        let (got_tx, got_rx) = oneshot();
        smarm::spawn_actor(move |mb: Mailbox<u32>| {
            smarm::register("echo", smarm::current_pid()).unwrap();
            ready_tx.send(()).unwrap();
            got_tx.send(mb.recv_timeout(GUARD)).unwrap();
        });
        ready_rx.recv().unwrap();
        assert_eq!(smarm::send_named::<u32>("echo", 9), Ok(()));
        assert_eq!(got_rx.recv().unwrap(), Ok(Envelope::Msg(9)));
    });
}

#[test]
fn registry_names_are_unique_and_released() {
    run(|| {
        let a = spawn_parked();
        let b = spawn_parked();
        assert_eq!(smarm::register("n", a.pid()), Ok(()));
        assert_eq!(smarm::register("n", b.pid()), Err(RegisterError::NameTaken(a.pid())));
        assert_eq!(smarm::register("other", a.pid()), Err(RegisterError::AlreadyNamed("n".into())));
        assert_eq!(smarm::whereis("n"), Some(a.pid()));
        assert_eq!(smarm::unregister("n"), Some(a.pid()));
        assert_eq!(smarm::whereis("n"), None);
        assert_eq!(smarm::unregister("n"), None);
        assert_eq!(smarm::register("n", b.pid()), Ok(()));
        smarm::monitor(b.pid());
        smarm::kill(b.pid());
        next_down();
        assert_eq!(smarm::whereis("n"), None);
        // `a` may take a new name now that it has none.
        assert_eq!(smarm::register("other", a.pid()), Ok(()));
    });
}

// ------------------------------------------------------------------------------------------
// Timers aimed at actors
// ------------------------------------------------------------------------------------------

#[test]
fn send_after_addr_delivers_once_and_never_before_the_delay() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            let d = 30 * MS;
            let start = Instant::now();
            let t = smarm::send_after_addr(d, &mb.addr(), 7);
            assert_eq!(mb.recv_timeout(GUARD), Ok(Envelope::Msg(7)));
            let elapsed = start.elapsed();
            assert!(elapsed >= d, "delivered after {elapsed:?}, before {d:?}");
            // Once.
            assert_eq!(mb.recv_timeout(3 * d), Err(RecvTimeoutError::Timeout));
            assert_eq!(smarm::cancel_timer(t), None);
        });
    });
}

#[test]
fn cancel_timer_returns_the_time_left_and_stops_delivery() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            let d = 400 * MS;
            let t = smarm::send_after_addr(d, &mb.addr(), 1);
            let left = smarm::cancel_timer(t).expect("the timer was pending");
            assert!(left <= d, "time left {left:?} exceeds the delay {d:?}");
            assert!(left > Duration::ZERO);
            // Past the original deadline: nothing arrives.
            assert_eq!(mb.recv_timeout(d + 100 * MS), Err(RecvTimeoutError::Timeout));
        });
    });
}

#[test]
fn cancel_timer_after_it_fired_returns_none() {
    run(|| {
        in_actor(|mb: Mailbox<u32>| {
            let t = smarm::send_after_addr(MS, &mb.addr(), 1);
            assert_eq!(mb.recv_timeout(GUARD), Ok(Envelope::Msg(1)));
            assert_eq!(smarm::cancel_timer(t), None);
        });
    });
}

#[test]
fn cancel_timer_of_a_timer_aimed_at_an_ended_actor_returns_none() {
    run(|| {
        let (tx, rx) = oneshot::<()>();
        let addr = smarm::spawn_actor(move |_mb: Mailbox<u32>| tx.send(()).unwrap());
        rx.recv().unwrap();
        smarm::monitor(addr.pid());
        next_down();
        // The timer never existed: its target was gone when it was set.
        let t = smarm::send_after_addr(Duration::from_secs(60), &addr, 1);
        assert_eq!(smarm::cancel_timer(t), None);
    });
}

/// A message that reports when it is dropped.
struct DropProbe(Sender<()>);
impl Drop for DropProbe {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

#[test]
fn timers_aimed_at_an_actor_are_cancelled_when_it_exits() {
    run(|| {
        let (dropped_tx, dropped_rx) = channel::<()>();
        let (go_tx, go_rx) = oneshot::<()>();
        let target = smarm::spawn_actor(move |_mb: Mailbox<DropProbe>| go_rx.recv().unwrap());
        // Far in the future: only the target's exit can release the message.
        let t = smarm::send_after_addr(Duration::from_secs(60), &target, DropProbe(dropped_tx.clone()));
        let t2 = smarm::send_after_addr(Duration::from_secs(60), &target, DropProbe(dropped_tx));
        go_tx.send(()).unwrap();
        // Both pending messages are dropped when the target exits, not at their deadline.
        assert_eq!(dropped_rx.recv_timeout(GUARD), Ok(()));
        assert_eq!(dropped_rx.recv_timeout(GUARD), Ok(()));
        assert_eq!(smarm::cancel_timer(t), None, "the timer outlived its target");
        assert_eq!(smarm::cancel_timer(t2), None, "the timer outlived its target");
    });
}

/// A pid of another runtime names no actor here, even when a local actor occupies the same
/// slot with the same generation: monitor reports NoProc, link refuses, kill does nothing.
#[test]
fn a_pid_of_another_runtime_names_no_local_actor() {
    let (pid_tx, pid_rx) = std::sync::mpsc::channel::<Pid>();
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let other = std::thread::spawn(move || {
        Runtime::builder().threads(1).build().unwrap().run(move || {
            let h = smarm::spawn(move || {
                let _ = stop_rx.recv();
            });
            pid_tx.send(h.pid()).unwrap();
            h.join().unwrap();
        })
    });
    let foreign = pid_rx.recv().unwrap();
    run(move || {
        let (go_tx, go_rx) = oneshot::<()>();
        let local = smarm::spawn(move || go_rx.recv().unwrap());
        assert_eq!(local.pid().to_string(), foreign.to_string(), "setup: no local alias of the foreign pid");
        assert_ne!(local.pid(), foreign);
        smarm::monitor(foreign);
        assert_eq!(next_down().reason, DownReason::NoProc);
        assert_eq!(smarm::link(foreign), Err(DownReason::NoProc));
        smarm::kill(foreign);
        go_tx.send(()).unwrap();
        assert_eq!(local.join(), Ok(()), "a kill of a foreign pid reached the local alias");
    });
    stop_tx.send(()).unwrap();
    other.join().unwrap().unwrap();
}
