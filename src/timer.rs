//! The timer API: [`send_after`], [`send_after_addr`] and [`cancel`]. Deadlines live on the
//! runtime's timing wheel (`wheel`, layer 1); timed waits use lazy timeouts
//! (`runtime::lazy`). Layer 3.

use std::time::{Duration, Instant};

use crate::runtime::user_drop::DropOnActor;
pub(crate) use crate::wheel::deadline_after;
use crate::wheel::{Action, TimerKey};

/// A pending [`send_after`]; pass it to [`cancel`].
#[derive(Debug)]
pub struct TimerRef {
    kind: RefKind,
}

#[derive(Debug)]
enum RefKind {
    /// On a runtime's timing wheel (the runtime may be gone: then the timer is too).
    Runtime { rt: std::sync::Weak<crate::runtime::Shared>, key: TimerKey },
    /// Off-runtime: a helper thread waiting on a condition variable.
    Thread(std::sync::Arc<ThreadTimer>),
}

#[derive(Debug)]
struct ThreadTimer {
    deadline: Instant,
    /// 0 pending, 1 fired, 2 cancelled.
    state: std::sync::Mutex<u8>,
    cv: std::sync::Condvar,
}

/// Sends `msg` on `sender` once `delay` has passed (never earlier). Returns a handle for
/// [`cancel`]. From an actor the runtime's timer structure holds it; from a plain thread a
/// helper thread does. A delay too long for `Instant` (`Duration::MAX`) counts as 100 years,
/// as does every timeout in smarm (a "wait forever" never panics on the addition).
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     let t = smarm::send_after(Duration::from_millis(5), &tx, "tick");
///     assert_eq!(rx.recv(), Ok("tick"));
///     assert_eq!(smarm::cancel_timer(t), None); // already fired
/// });
/// ```
pub fn send_after<T: Send + 'static>(delay: Duration, sender: &crate::channel::Sender<T>, msg: T) -> TimerRef {
    let deadline = deadline_after(Instant::now(), delay);
    let tx = sender.clone();
    let w = crate::runtime::current_worker();
    if !w.is_null() {
        // SAFETY: this thread's live worker.
        let shared = unsafe { (*w).shared_arc() };
        let rt = std::sync::Arc::downgrade(&shared);
        // Runs on a scheduler thread: it must never block it, nor drop the message there
        // (`DropOnActor`). A full bounded channel gets the message from a short-lived actor
        // that waits for room instead; that actor returns nothing, so its detached join
        // handle, dropped here, never holds the message.
        let msg = DropOnActor::new(msg);
        let action = Action::Run(Box::new(move || match tx.try_send(msg.into_inner()) {
            Ok(()) => {}
            Err(crate::channel::TrySendError::Full(msg)) => {
                let msg = DropOnActor::new(msg);
                if let Some(sh) = rt.upgrade() {
                    let _ = sh.spawn(
                        move || {
                            let _ = tx.send(msg.into_inner());
                        },
                        false,
                    );
                }
            }
            Err(crate::channel::TrySendError::Disconnected(msg)) => drop(DropOnActor::new(msg)),
        }));
        let (key, earliest) = shared.timers.insert_action(deadline, action);
        if earliest {
            shared.wake_one();
        }
        return TimerRef { kind: RefKind::Runtime { rt: std::sync::Arc::downgrade(&shared), key } };
    }
    let t =
        std::sync::Arc::new(ThreadTimer { deadline, state: std::sync::Mutex::new(0), cv: std::sync::Condvar::new() });
    let t2 = t.clone();
    std::thread::Builder::new()
        .name("smarm-send-after".into())
        .spawn(move || {
            let mut st = t2.state.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if *st == 2 {
                    return;
                }
                let now = Instant::now();
                if now >= t2.deadline {
                    *st = 1;
                    drop(st);
                    let _ = tx.send(msg);
                    return;
                }
                st = t2.cv.wait_timeout(st, t2.deadline - now).unwrap_or_else(|e| e.into_inner()).0;
            }
        })
        .expect("smarm: could not start a send_after helper thread");
    TimerRef { kind: RefKind::Thread(t) }
}

/// Cancels a [`send_after`]. Returns the time that was left, or `None` if it already fired
/// (or its runtime has ended).
pub fn cancel(timer: TimerRef) -> Option<Duration> {
    match timer.kind {
        RefKind::Runtime { rt, key } => {
            let rt = rt.upgrade()?;
            let deadline = rt.timers.deadline_of(key);
            rt.timers.cancel(key).then(|| deadline.saturating_duration_since(Instant::now()))
        }
        RefKind::Thread(t) => {
            let mut st = t.state.lock().unwrap_or_else(|e| e.into_inner());
            if *st != 0 {
                return None;
            }
            *st = 2;
            t.cv.notify_one();
            Some(t.deadline.saturating_duration_since(Instant::now()))
        }
    }
}

/// Sends `msg` to `addr` once `delay` has passed (never earlier); cancelled automatically if
/// the target actor ends first. Must be called from an actor of the target's runtime.
///
/// # Panics
/// Outside an actor.
pub fn send_after_addr<M: Send + 'static>(delay: Duration, addr: &crate::mailbox::Addr<M>, msg: M) -> TimerRef {
    let deadline = deadline_after(Instant::now(), delay);
    let w = crate::runtime::current_worker();
    assert!(!w.is_null(), "smarm::send_after_addr called outside an actor");
    // SAFETY: this thread's live worker.
    let shared = unsafe { (*w).shared_arc() };
    let target = addr.clone();
    let pid = addr.pid();
    // Runs on a scheduler thread: a message the target can no longer take is dropped
    // through a `DropOnActor`.
    let msg = DropOnActor::new(msg);
    let action = Action::Run(Box::new(move || {
        if let Err(crate::channel::SendError(msg)) = target.try_send(msg.into_inner()) {
            drop(DropOnActor::new(msg));
        }
    }));
    let (key, earliest) = shared.timers.insert_action(deadline, action);
    if !crate::process::track_timer(&shared, pid, key) {
        shared.timers.cancel(key); // the target is already gone
    }
    if earliest {
        shared.wake_one();
    }
    TimerRef { kind: RefKind::Runtime { rt: std::sync::Arc::downgrade(&shared), key } }
}
