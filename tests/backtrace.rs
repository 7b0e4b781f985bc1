//! `std::backtrace` works on actor stacks: the unwinder walks the actor's frames, names the
//! actor's functions, and stops cleanly at the trampoline (its CFI marks the return address
//! undefined) instead of walking off the top of the mmap'd stack, before and after the
//! actor has been switched out and resumed (possibly on another thread), and while the
//! actor is unwinding from a panic.

use std::backtrace::{Backtrace, BacktraceStatus};
use std::sync::{Arc, Mutex};

use smarm::{DownReason, Runtime};

/// What an actor learned about a backtrace it captured and resolved on its own stack.
struct Captured {
    status: BacktraceStatus,
    text: String,
}

#[inline(never)]
fn capture() -> Captured {
    let bt = Backtrace::force_capture();
    // Resolving the symbols (done by Display) also runs on the actor stack.
    let text = bt.to_string();
    Captured { status: bt.status(), text }
}

#[inline(never)]
fn actor_body_with_distinct_name(yields: usize) -> Captured {
    for _ in 0..yields {
        smarm::yield_now();
    }
    let c = capture();
    // Keep this frame from becoming a tail call into `capture`.
    std::hint::black_box(&c);
    c
}

#[inline(never)]
fn outer_actor_function_with_distinct_name(yields: usize) -> Captured {
    let c = actor_body_with_distinct_name(yields);
    std::hint::black_box(&c);
    c
}

fn check(c: &Captured, context: &str) {
    assert_eq!(c.status, BacktraceStatus::Captured, "{context}: backtrace not captured");
    for name in ["actor_body_with_distinct_name", "outer_actor_function_with_distinct_name"] {
        assert!(c.text.contains(name), "{context}: backtrace does not name `{name}`:\n{}", c.text);
    }
    assert_ends_at_trampoline(&c.text, context);
}

/// The walk ends at the actor's entry: the trampoline's CFI says it has no caller. Scheduler
/// frames live on another stack and can only appear if the unwinder left the actor stack.
fn assert_ends_at_trampoline(text: &str, context: &str) {
    for sched in ["run_loop", "thread_main", "run_actor"] {
        assert!(!text.contains(sched), "{context}: backtrace walked into scheduler frame `{sched}`:\n{text}");
    }
    // Frame lines look like "  16: name"; location lines like "      at file:line".
    let last_frame = text
        .lines()
        .rev()
        .find(|l| l.trim_start().split_once(": ").is_some_and(|(n, _)| n.parse::<usize>().is_ok()))
        .unwrap_or_else(|| panic!("{context}: no frames in backtrace:\n{text}"));
    assert!(
        last_frame.contains("smarm_actor_trampoline"),
        "{context}: the backtrace does not end at the actor trampoline (last frame {last_frame:?}):\n{text}"
    );
}

#[test]
fn backtrace_in_actor_names_the_actor_function() {
    let rt = Runtime::builder().threads(1).build().unwrap();
    let c = rt.run(|| outer_actor_function_with_distinct_name(0)).unwrap();
    check(&c, "root actor, before any switch");
}

#[test]
fn backtrace_in_actor_works_after_switches_and_migration() {
    let rt = Runtime::builder().threads(2).build().unwrap();
    let results = rt
        .run(|| {
            let handles: Vec<_> =
                (0..8).map(|k| smarm::spawn(move || outer_actor_function_with_distinct_name(10 + k))).collect();
            handles.into_iter().map(|h| h.join().expect("capturing actor")).collect::<Vec<_>>()
        })
        .unwrap();
    for (k, c) in results.iter().enumerate() {
        check(c, &format!("actor {k} after {} yields", 10 + k));
    }
}

#[test]
fn backtrace_on_minimum_size_stack() {
    // Capturing and resolving must fit the smallest stack the builder accepts.
    let rt = Runtime::builder().threads(1).stack_size(smarm::MIN_STACK_SIZE).build().unwrap();
    let c = rt
        .run(|| {
            // Resolve a first time: the symbolizer's caches are then warm for the next.
            let first = outer_actor_function_with_distinct_name(1);
            let second = outer_actor_function_with_distinct_name(1);
            (first, second)
        })
        .unwrap();
    check(&c.0, "minimum-size stack, first capture");
    check(&c.1, "minimum-size stack, second capture");
}

/// Captures a backtrace in its destructor, which runs while the actor unwinds.
struct CaptureOnDrop(Arc<Mutex<Option<Captured>>>);

impl Drop for CaptureOnDrop {
    #[inline(never)]
    fn drop(&mut self) {
        assert!(std::thread::panicking(), "the guard is dropped by the unwinder");
        let c = capture();
        *self.0.lock().unwrap() = Some(c);
    }
}

#[inline(never)]
fn panicking_actor_body_with_distinct_name(out: Arc<Mutex<Option<Captured>>>, yields: usize) {
    for _ in 0..yields {
        smarm::yield_now();
    }
    let _guard = CaptureOnDrop(out);
    std::hint::black_box(&_guard);
    panic!("deliberate panic to unwind through CaptureOnDrop");
}

#[test]
fn backtrace_during_unwinding_in_actor() {
    let out = Arc::new(Mutex::new(None));
    let rt = Runtime::builder().threads(2).quiet_panics(true).build().unwrap();
    let reason = {
        let out = out.clone();
        rt.run(move || smarm::spawn(move || panicking_actor_body_with_distinct_name(out, 5)).join()).unwrap()
    };
    match reason {
        Err(DownReason::Panic(msg)) => assert!(msg.contains("deliberate panic"), "{msg}"),
        other => panic!("expected the actor to end with its panic, got {other:?}"),
    }
    let c = out.lock().unwrap().take().expect("the guard's destructor ran and captured a backtrace");
    assert_eq!(c.status, BacktraceStatus::Captured);
    for name in ["CaptureOnDrop", "panicking_actor_body_with_distinct_name"] {
        assert!(c.text.contains(name), "backtrace during unwinding does not name `{name}`:\n{}", c.text);
    }
    assert_ends_at_trampoline(&c.text, "during unwinding");
}
