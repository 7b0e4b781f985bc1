//! The timer API: [`send_after`] (to a channel `Sender` or an actor's `Addr`, the
//! [`Destination`] trait), [`send_after_addr`] and [`cancel`]. Deadlines live on the
//! runtime's timing wheel (`wheel`, layer 1); timed waits use lazy timeouts
//! (`runtime::lazy`). Layer 3.
//!
//! # Example
//!
//! A periodic tick to oneself (re-armed on each tick), and a timeout that is cancelled.
//!
//! ```
//! use std::time::Duration;
//! smarm::run(|| {
//!     let (tx, rx) = smarm::channel::oneshot();
//!     let ticker = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
//!         let me = mb.addr();
//!         smarm::send_after_addr(Duration::from_millis(1), &me, 1);
//!         while let smarm::Envelope::Msg(n) = mb.recv() {
//!             if n == 3 {
//!                 tx.send(n).unwrap();
//!                 return;
//!             }
//!             smarm::send_after_addr(Duration::from_millis(1), &me, n + 1);
//!         }
//!     });
//!     assert_eq!(rx.recv(), Ok(3));
//!     let (alarm_tx, alarm_rx) = smarm::channel::channel::<&str>();
//!     let alarm = smarm::send_after(Duration::from_secs(30), &alarm_tx, "too late");
//!     assert!(smarm::cancel_timer(alarm).is_some());
//!     drop((alarm_tx, ticker));
//!     assert!(alarm_rx.recv().is_err());
//! });
//! ```

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
    /// Off-runtime: on the process's one timer thread (`off_runtime`).
    Thread { id: u64, deadline: Instant },
}

/// Sends `msg` to `dest` once `delay` has passed (never earlier): a channel
/// [`Sender`](crate::channel::Sender) or an actor's [`Addr`](crate::Addr), addressed the same
/// way (the [`Destination`] trait). Returns a handle for [`cancel`]. From an actor the
/// runtime's timer structure holds it; from a plain thread the process's one timer thread
/// does (started on demand, it ends when no timer is left: never a thread per timer). A
/// delay too long for `Instant` (`Duration::MAX`) counts as 100 years, as does every timeout
/// in smarm (a "wait forever" never panics on the addition).
///
/// A timer to an actor is cancelled automatically if the actor ends first (set from one of
/// its runtime's actors; from a plain thread the message is simply dropped then).
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel();
///     let t = smarm::send_after(Duration::from_millis(5), &tx, "tick");
///     assert_eq!(rx.recv(), Ok("tick"));
///     assert_eq!(smarm::cancel_timer(t), None); // already fired
///
///     // The same call for an actor's address.
///     let (done_tx, done_rx) = smarm::channel::oneshot();
///     let addr = smarm::spawn_actor(move |mb: smarm::Mailbox<&str>| {
///         if let smarm::Envelope::Msg(m) = mb.recv() { done_tx.send(m).unwrap(); }
///     });
///     smarm::send_after(Duration::from_millis(1), &addr, "tock");
///     assert_eq!(done_rx.recv(), Ok("tock"));
/// });
/// ```
pub fn send_after<T, D: Destination<T> + ?Sized>(delay: Duration, dest: &D, msg: T) -> TimerRef {
    dest.send_after_from_now(delay, msg)
}

/// Where [`send_after`] delivers: implemented for a channel
/// [`Sender<T>`](crate::channel::Sender) and an actor's [`Addr<T>`](crate::Addr). Sealed.
pub trait Destination<T>: sealed::Sealed {
    /// Arms the timer ([`send_after`] calls this).
    #[doc(hidden)]
    fn send_after_from_now(&self, delay: Duration, msg: T) -> TimerRef;
}

mod sealed {
    pub trait Sealed {}
    impl<T> Sealed for crate::channel::Sender<T> {}
    impl<M> Sealed for crate::mailbox::Addr<M> {}
}

impl<T: Send + 'static> Destination<T> for crate::channel::Sender<T> {
    fn send_after_from_now(&self, delay: Duration, msg: T) -> TimerRef {
        send_after_sender(delay, self, msg)
    }
}

impl<M: Send + 'static> Destination<M> for crate::mailbox::Addr<M> {
    fn send_after_from_now(&self, delay: Duration, msg: M) -> TimerRef {
        send_after_addr(delay, self, msg)
    }
}

fn send_after_sender<T: Send + 'static>(delay: Duration, sender: &crate::channel::Sender<T>, msg: T) -> TimerRef {
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
                    // From scheduler code, not an actor: counted as a spawner meanwhile.
                    let _ = sh.spawn_outside(|sh| {
                        sh.spawn(
                            move || {
                                let _ = tx.send(msg.into_inner());
                            },
                            false,
                        )
                    });
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
    let id = off_runtime::insert(
        deadline,
        Box::new(move || {
            // Never block the shared timer thread: a full bounded channel gets the message
            // from a short-lived thread of its own.
            if let Err(crate::channel::TrySendError::Full(msg)) = tx.try_send(msg) {
                let _ = std::thread::Builder::new().name("smarm-send-after".into()).spawn(move || {
                    let _ = tx.send(msg);
                });
            }
        }),
    );
    TimerRef { kind: RefKind::Thread { id, deadline } }
}

/// Cancels a [`send_after`]. Returns the time that was left, or `None` if it already fired
/// (or its runtime has ended).
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::channel::<&str>();
///     let t = smarm::send_after(Duration::from_secs(60), &tx, "never");
///     let left = smarm::cancel_timer(t).unwrap();
///     assert!(left <= Duration::from_secs(60));
///     drop(tx);
///     assert!(rx.recv().is_err()); // nothing was sent
/// });
/// ```
pub fn cancel(timer: TimerRef) -> Option<Duration> {
    match timer.kind {
        RefKind::Runtime { rt, key } => {
            let rt = rt.upgrade()?;
            let deadline = rt.timers.deadline_of(key);
            rt.timers.cancel(key).then(|| deadline.saturating_duration_since(Instant::now()))
        }
        RefKind::Thread { id, deadline } => {
            off_runtime::cancel(id).then(|| deadline.saturating_duration_since(Instant::now()))
        }
    }
}

/// [`send_after`] to an actor's address (kept for the explicit name; `send_after(delay,
/// &addr, msg)` is the same call). Cancelled automatically if the target actor ends first.
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let addr = smarm::spawn_actor(move |mb: smarm::Mailbox<&str>| {
///         if let smarm::Envelope::Msg(m) = mb.recv() { tx.send(m).unwrap(); }
///     });
///     smarm::send_after_addr(Duration::from_millis(2), &addr, "tick");
///     assert_eq!(rx.recv(), Ok("tick"));
/// });
/// ```
pub fn send_after_addr<M: Send + 'static>(delay: Duration, addr: &crate::mailbox::Addr<M>, msg: M) -> TimerRef {
    let deadline = deadline_after(Instant::now(), delay);
    let w = crate::runtime::current_worker();
    if w.is_null() {
        // A plain thread: the process's timer thread delivers it (an `Addr` send works from
        // any thread; a message the ended target cannot take is dropped on that thread).
        let target = addr.clone();
        let id = off_runtime::insert(
            deadline,
            Box::new(move || {
                let _ = target.try_send(msg);
            }),
        );
        return TimerRef { kind: RefKind::Thread { id, deadline } };
    }
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

/// Timers set from plain threads: one thread per process serves them all, from a min-heap
/// of deadlines. It starts with the first pending timer and ends when none is left, so a
/// process that never sets one has no such thread.
///
/// Invariants (under `STATE`'s lock): `running` is true exactly while a timer thread exists
/// that will look at the heap again before it exits; every id in `actions` is in `heap`
/// (a cancelled id leaves `actions` only, and is skipped when its deadline comes).
mod off_runtime {
    use std::cmp::Reverse;
    use std::collections::{BinaryHeap, HashMap};
    use std::sync::{Condvar, Mutex};
    use std::time::Instant;

    type Action = Box<dyn FnOnce() + Send>;

    #[derive(Default)]
    struct State {
        heap: BinaryHeap<Reverse<(Instant, u64)>>,
        actions: HashMap<u64, Action>,
        next_id: u64,
        running: bool,
    }

    static STATE: Mutex<Option<State>> = Mutex::new(None);
    /// Signalled when a timer is inserted (it may be the new earliest).
    static CHANGED: Condvar = Condvar::new();

    fn lock() -> std::sync::MutexGuard<'static, Option<State>> {
        // A panic never happens under the lock (actions run outside it); recover anyway.
        STATE.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues `action` for `deadline`; returns its id for [`cancel`].
    pub(super) fn insert(deadline: Instant, action: Action) -> u64 {
        let mut guard = lock();
        let st = guard.get_or_insert_with(State::default);
        let id = st.next_id;
        st.next_id += 1;
        st.heap.push(Reverse((deadline, id)));
        st.actions.insert(id, action);
        if !st.running {
            st.running = true;
            let started = std::thread::Builder::new().name("smarm-timer".into()).spawn(serve);
            if started.is_err() {
                st.running = false;
                drop(guard);
                panic!("smarm: could not start the send_after timer thread");
            }
        }
        CHANGED.notify_one();
        id
    }

    /// Removes timer `id`; true if it had not fired yet.
    pub(super) fn cancel(id: u64) -> bool {
        lock().as_mut().is_some_and(|st| st.actions.remove(&id).is_some())
    }

    /// The timer thread: fires what is due, sleeps until the earliest deadline, and exits
    /// once nothing is pending.
    fn serve() {
        let mut guard = lock();
        loop {
            let st = guard.as_mut().expect("made by insert");
            let now = Instant::now();
            let mut due = Vec::new();
            while let Some(&Reverse((deadline, id))) = st.heap.peek() {
                if !st.actions.contains_key(&id) {
                    st.heap.pop(); // cancelled
                    continue;
                }
                if deadline > now {
                    break;
                }
                st.heap.pop();
                due.push(st.actions.remove(&id).expect("checked"));
            }
            if !due.is_empty() {
                drop(guard);
                for action in due {
                    // An action only sends; should it panic, the thread serves on.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(action));
                }
                guard = lock();
                continue;
            }
            let Some(&Reverse((deadline, _))) = st.heap.peek() else {
                st.running = false;
                return;
            };
            guard = CHANGED.wait_timeout(guard, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        }
    }

    #[cfg(test)]
    mod tests {
        use std::sync::mpsc;
        use std::time::Duration;

        #[test]
        fn many_timers_share_one_thread_fire_in_deadline_order_and_cancel() {
            // Deterministic: a first, already-due timer holds the one timer thread inside its
            // action until the others are inserted and the odd ones cancelled, so no deadline
            // can pass before its cancel (the thread fires nothing while an action runs).
            let (held_tx, held_rx) = mpsc::channel();
            let (release_tx, release_rx) = mpsc::channel::<()>();
            let now = std::time::Instant::now();
            super::insert(
                now,
                Box::new(move || {
                    held_tx.send(()).unwrap();
                    let _ = release_rx.recv();
                }),
            );
            held_rx.recv().unwrap();
            let (tx, rx) = mpsc::channel();
            let mut ids = Vec::new();
            for i in (0..20u64).rev() {
                let tx = tx.clone();
                ids.push((i, super::insert(now + Duration::from_millis(i), Box::new(move || tx.send(i).unwrap()))));
            }
            let threads = || {
                std::fs::read_dir("/proc/self/task")
                    .unwrap()
                    .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                    .filter(|c| c.trim() == "smarm-timer")
                    .count()
            };
            assert_eq!(threads(), 1, "one timer thread for 21 timers");
            // Cancel the odd ones, then let the thread go on.
            for (i, id) in &ids {
                if i % 2 == 1 {
                    assert!(super::cancel(*id));
                }
            }
            release_tx.send(()).unwrap();
            drop(tx);
            let got: Vec<u64> = rx.iter().collect();
            assert_eq!(got, (0..20).filter(|i| i % 2 == 0).collect::<Vec<_>>());
            let (i, fired) = ids[1];
            assert_eq!(i, 18);
            assert!(!super::cancel(fired), "fired timers cannot be cancelled");
        }
    }
}
