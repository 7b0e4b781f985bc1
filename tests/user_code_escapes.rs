//! User `Drop` code that runs after an actor's body, or that the runtime releases from
//! scheduler code, stays contained: it runs on an actor's stack under `catch_unwind`, so a
//! `Drop` that panics (even with a payload whose own `Drop` panics) or blocks while a kill is
//! pending neither aborts the process nor takes a scheduler thread down. A panic in
//! scheduler code itself aborts the process with a message naming the thread.
//!
//! Each scenario runs in a child process: this test binary re-executed with
//! `SMARM_ESCAPE_CHILD=1`, selecting one `#[ignore]`d child test with `--exact`. A scenario
//! that aborts, panics out of `run`, or hangs then fails its parent test instead of killing
//! or stalling the harness.

use std::os::unix::process::ExitStatusExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use smarm::channel::{self, Sender};
use smarm::{DownReason, JoinHandle, Mailbox, Runtime};

const CHILD_ENV: &str = "SMARM_ESCAPE_CHILD";
/// A child still running after this long is taken to hang (a healthy one ends in well under
/// a second; the bound only keeps a hang from stalling the suite forever).
const HANG_LIMIT: Duration = Duration::from_secs(120);

/// Runs one child test of this binary in a fresh process; returns its status (None if it
/// hung and was killed), its stderr and its stdout.
fn run_child(test_name: &str) -> (Option<ExitStatus>, String, String) {
    let exe = std::env::current_exe().expect("path of the test binary");
    let mut child = Command::new(exe)
        .env(CHILD_ENV, "1")
        .env("RUST_BACKTRACE", "0")
        .args(["--exact", test_name, "--ignored", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test process");
    let stderr = read_all(child.stderr.take().expect("piped stderr"));
    let stdout = read_all(child.stdout.take().expect("piped stdout"));
    let limit = Instant::now() + HANG_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if Instant::now() >= limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (status, stderr.join().expect("stderr reader"), stdout.join().expect("stdout reader"))
}

/// Reads a child's pipe to the end on a thread of its own (so neither pipe can fill up and
/// stall the child).
fn read_all(mut pipe: impl std::io::Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = pipe.read_to_string(&mut s);
        s
    })
}

/// Asserts that the child test ran to completion and passed.
fn assert_child_passes(test_name: &str) {
    let (status, stderr, stdout) = run_child(test_name);
    match status {
        None => panic!("{test_name} hung (killed after {HANG_LIMIT:?}); stderr:\n{stderr}"),
        Some(s) if !s.success() => {
            panic!("{test_name} failed: {s} (signal {:?}); stderr:\n{stderr}", s.signal())
        }
        Some(_) => assert!(stdout.contains("1 passed"), "{test_name} did not run; stdout:\n{stdout}"),
    }
}

/// True in the child process. Child tests return at once otherwise, so running them by
/// hand (`--ignored`) never crashes the test binary.
fn in_child() -> bool {
    std::env::var_os(CHILD_ENV).is_some()
}

/// A value whose `Drop` panics.
struct PanicOnDrop;

impl Drop for PanicOnDrop {
    fn drop(&mut self) {
        panic!("PanicOnDrop dropped");
    }
}

/// A value whose `Drop` makes blocking runtime calls (a sleep, then a receive with a
/// timeout): made while a kill is pending, each is a point where the kill is raised.
struct BlockOnDrop;

impl Drop for BlockOnDrop {
    fn drop(&mut self) {
        smarm::sleep(Duration::from_millis(20));
        let (_tx, rx) = channel::channel::<()>();
        let _ = rx.recv_timeout(Duration::from_millis(20));
    }
}

/// A panic payload whose own `Drop` panics.
struct PanickingPayload;

impl Drop for PanickingPayload {
    fn drop(&mut self) {
        panic!("the panic payload's own Drop panicked");
    }
}

/// Where a `Drop` ran.
#[derive(Debug, PartialEq, Eq)]
enum DroppedOn {
    /// An actor's stack.
    Actor,
    /// A scheduler thread's own stack (scheduler code).
    Scheduler,
    /// A thread that is not running a scheduler.
    PlainThread,
}

fn dropped_on() -> DroppedOn {
    match (smarm::try_current_pid(), smarm::current_thread_index()) {
        (Some(_), _) => DroppedOn::Actor,
        (None, Some(_)) => DroppedOn::Scheduler,
        (None, None) => DroppedOn::PlainThread,
    }
}

/// A message whose `Drop` reports where it runs, then panics with a [`PanickingPayload`].
struct DoublePanicMsg {
    report: Sender<DroppedOn>,
}

impl Drop for DoublePanicMsg {
    fn drop(&mut self) {
        let _ = self.report.send(dropped_on());
        std::panic::panic_any(PanickingPayload);
    }
}

const BYSTANDERS: u64 = 4;
const BYSTANDER_YIELDS: u64 = 200;

/// Actors that keep running beside the scenario; each returns a value it computed while
/// yielding.
fn spawn_bystanders() -> Vec<JoinHandle<u64>> {
    (0..BYSTANDERS)
        .map(|i| {
            smarm::spawn(move || {
                let mut sum = 0;
                for k in 0..BYSTANDER_YIELDS {
                    sum += k;
                    smarm::yield_now();
                }
                sum + i
            })
        })
        .collect()
}

fn check_bystanders(handles: Vec<JoinHandle<u64>>) {
    let base = BYSTANDER_YIELDS * (BYSTANDER_YIELDS - 1) / 2;
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join(), Ok(base + i as u64), "bystander {i}");
    }
}

/// The actor `h` ended killed, without a value.
fn assert_killed<T>(h: JoinHandle<T>) {
    match h.join() {
        Err(DownReason::Killed) => {}
        Err(other) => panic!("expected Killed, the actor ended with {other:?}"),
        Ok(v) => {
            std::mem::forget(v);
            panic!("expected Killed, the actor returned its value");
        }
    }
}

/// Kills an actor that swallows the kill's unwind and then returns `make()`; checks that it
/// ends `Killed` while bystanders finish, and that the runtime still spawns afterwards.
fn kill_swallowing_actor_returning<T: Send + 'static>(make: fn() -> T) {
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    let out = rt.run(move || {
        let bystanders = spawn_bystanders();
        let (ready_tx, ready_rx) = channel::channel();
        let h = smarm::spawn(move || {
            let _ = catch_unwind(AssertUnwindSafe(|| {
                ready_tx.send(()).unwrap();
                loop {
                    smarm::yield_now();
                }
            }));
            make()
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        assert_killed(h);
        check_bystanders(bystanders);
        smarm::spawn(|| 7).join().unwrap()
    });
    assert_eq!(out.unwrap(), 7);
}

#[test]
#[ignore = "child process body of a killed actor's panicking return value"]
fn child_killed_actor_returns_value_whose_drop_panics() {
    if in_child() {
        kill_swallowing_actor_returning(|| PanicOnDrop);
    }
}

#[test]
fn killed_actor_returning_a_value_whose_drop_panics_ends_killed() {
    assert_child_passes("child_killed_actor_returns_value_whose_drop_panics");
}

#[test]
#[ignore = "child process body of a killed actor's blocking return value"]
fn child_killed_actor_returns_value_whose_drop_blocks() {
    if in_child() {
        kill_swallowing_actor_returning(|| BlockOnDrop);
    }
}

#[test]
fn killed_actor_returning_a_value_whose_drop_blocks_ends_killed() {
    assert_child_passes("child_killed_actor_returns_value_whose_drop_blocks");
}

/// A value whose `Drop` receives on a channel nobody sends on (the sender is kept alive
/// elsewhere): only a stop request raised at the receive ends it.
struct BlockForeverOnDrop(channel::Receiver<()>);

impl Drop for BlockForeverOnDrop {
    fn drop(&mut self) {
        let _ = self.0.recv();
    }
}

#[test]
#[ignore = "child process body of a killed actor whose return value blocks for good"]
fn child_killed_actor_returns_value_whose_drop_blocks_for_good() {
    if !in_child() {
        return;
    }
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    let out = rt.run(|| {
        let bystanders = spawn_bystanders();
        let (ready_tx, ready_rx) = channel::channel();
        let (never_tx, never_rx) = channel::channel::<()>();
        let (wait_tx, wait_rx) = channel::channel::<()>();
        let h = smarm::spawn(move || {
            // The kill's wake resumes this receive (or the first park after it), which raises
            // the kill; the unwind is swallowed, so the wake is spent.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                ready_tx.send(()).unwrap();
                let _ = wait_rx.recv();
            }));
            BlockForeverOnDrop(never_rx)
        });
        ready_rx.recv().unwrap();
        smarm::kill(h.pid());
        assert_killed(h);
        drop((never_tx, wait_tx));
        check_bystanders(bystanders);
        smarm::spawn(|| 7).join().unwrap()
    });
    assert_eq!(out.unwrap(), 7);
}

#[test]
fn killed_actor_whose_return_value_blocks_for_good_in_drop_still_ends_killed() {
    assert_child_passes("child_killed_actor_returns_value_whose_drop_blocks_for_good");
}

#[test]
#[ignore = "child process body of a pending send_after_addr to an actor that returns"]
fn child_pending_send_after_addr_with_panicking_drop() {
    if !in_child() {
        return;
    }
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    let out = rt.run(|| {
        let bystanders = spawn_bystanders();
        let (go_tx, go_rx) = channel::channel();
        let addr = smarm::spawn_actor(move |mb: Mailbox<PanicOnDrop>| {
            go_rx.recv().unwrap();
            let _timer = smarm::send_after_addr(Duration::from_secs(3600), &mb.addr(), PanicOnDrop);
            17
        });
        // Monitored before it can end: it waits for the go.
        let mon = smarm::monitor(addr.pid());
        go_tx.send(()).unwrap();
        let down = loop {
            if let smarm::Signal::Down(d) = smarm::recv_signal() {
                if d.monitor == mon {
                    break d;
                }
            }
        };
        assert_eq!(down.reason, DownReason::Normal);
        check_bystanders(bystanders);
        smarm::spawn(|| 7).join().unwrap()
    });
    assert_eq!(out.unwrap(), 7);
}

#[test]
fn pending_send_after_addr_message_whose_drop_panics_does_not_abort() {
    assert_child_passes("child_pending_send_after_addr_with_panicking_drop");
}

/// `send_after` of a [`DoublePanicMsg`] to a channel whose receiver is gone: the message is
/// dropped when the timer fires. Its `Drop` must run on an actor, and neither its panic nor
/// its payload's must reach a scheduler thread.
fn undeliverable_timer_message_with_double_panic(threads: usize) {
    let rt = Runtime::builder().threads(threads).quiet_panics(true).build().unwrap();
    let out = rt.run(|| {
        let bystanders = spawn_bystanders();
        let (report_tx, report_rx) = channel::channel();
        let (tx, rx) = channel::channel::<DoublePanicMsg>();
        drop(rx);
        let _timer = smarm::send_after(Duration::from_millis(1), &tx, DoublePanicMsg { report: report_tx });
        assert_eq!(report_rx.recv(), Ok(DroppedOn::Actor), "where the undeliverable message was dropped");
        check_bystanders(bystanders);
        smarm::spawn(|| 7).join().unwrap()
    });
    assert_eq!(out.unwrap(), 7);
}

#[test]
#[ignore = "child process body of an undeliverable send_after message (one thread)"]
fn child_undeliverable_timer_message_one_thread() {
    if in_child() {
        undeliverable_timer_message_with_double_panic(1);
    }
}

#[test]
#[ignore = "child process body of an undeliverable send_after message (two threads)"]
fn child_undeliverable_timer_message_two_threads() {
    if in_child() {
        undeliverable_timer_message_with_double_panic(2);
    }
}

#[test]
fn undeliverable_timer_message_is_dropped_on_an_actor_and_its_panics_are_contained() {
    assert_child_passes("child_undeliverable_timer_message_one_thread");
    assert_child_passes("child_undeliverable_timer_message_two_threads");
}

#[test]
#[ignore = "child process body of an undeliverable send_after message with no slot for a reaper"]
fn child_undeliverable_timer_message_without_a_free_slot() {
    if !in_child() {
        return;
    }
    let (report_tx, report_rx) = channel::channel();
    // The root takes the only slot: the reaper cannot be spawned.
    let rt = Runtime::builder().threads(1).max_actors(1).quiet_panics(true).build().unwrap();
    let out = rt.run(move || {
        let (tx, rx) = channel::channel::<DoublePanicMsg>();
        drop(rx);
        let _timer = smarm::send_after(Duration::from_millis(1), &tx, DoublePanicMsg { report: report_tx });
        let diag = smarm::__private::Diagnostics::current().unwrap();
        // One thread: once the wheel is empty, the round that fired the timer has ended.
        while diag.pending_timers() != 0 {
            smarm::yield_now();
        }
        assert!(matches!(smarm::try_spawn(|| ()), Err(smarm::SpawnError::Full { .. })));
        7
    });
    assert_eq!(out.unwrap(), 7);
    // Kept until the runtime was dropped, then dropped off the scheduler threads.
    assert_eq!(report_rx.try_recv(), Ok(DroppedOn::PlainThread));
}

#[test]
fn undeliverable_timer_message_waits_for_the_runtimes_end_when_no_reaper_can_start() {
    assert_child_passes("child_undeliverable_timer_message_without_a_free_slot");
}

const FAULT: &str = "injected scheduler fault";

#[test]
#[ignore = "child process body of a panic in scheduler code"]
fn child_scheduler_code_panics() {
    if !in_child() {
        return;
    }
    let zero = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: setrlimit reads a valid rlimit struct; lowering RLIMIT_CORE only affects
    // whether this (child) process dumps core.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_CORE, &zero) }, 0);
    let rt = Runtime::builder().threads(2).build().unwrap();
    let _ = rt.run(|| {
        smarm::__private::Diagnostics::current().unwrap().inject_scheduler_panic(FAULT);
        let (_tx, rx) = channel::channel::<()>();
        let _ = rx.recv();
    });
    eprintln!("child: run returned");
}

#[test]
fn panic_in_scheduler_code_aborts_naming_the_thread_and_the_cause() {
    let (status, stderr, _) = run_child("child_scheduler_code_panics");
    let status = status.unwrap_or_else(|| panic!("the child hung; stderr:\n{stderr}"));
    assert_eq!(status.signal(), Some(libc::SIGABRT), "expected an abort ({status}); stderr:\n{stderr}");
    let line = stderr
        .lines()
        .find(|l| l.starts_with("smarm: scheduler thread "))
        .unwrap_or_else(|| panic!("no scheduler panic report; stderr:\n{stderr}"));
    assert!(line.contains(FAULT), "the report does not name the cause: {line}");
    assert!(!stderr.contains("child: run returned"));
}
