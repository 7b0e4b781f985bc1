//! Leaving the actor model for a while: [`spawn_blocking`] runs a blocking closure on the
//! runtime's pool of OS threads, and [`block_on`] drives a `Future` inside an actor.
//!
//! Both park the calling actor, never its scheduler thread, so other actors keep running.
//!
//! # Async crates inside an actor
//!
//! `block_on` polls a future with a `Waker` that wakes the actor from any thread; the actor
//! parks between polls. Futures that need no particular runtime (hyper's connection
//! drivers over an I/O adapter, `futures` combinators, runtime-agnostic clients) run as
//! they are; with feature `futures-io`, smarm's `TcpStream` and `UnixStream` implement
//! `futures_io::AsyncRead`/`AsyncWrite` on smarm's own reactor, so nothing else polls the
//! network (`examples/hyper_in_actor.rs`). A crate that requires *tokio's* reactor or timer
//! (it calls `tokio::spawn`, `tokio::time::sleep`, or uses tokio's sockets) needs a tokio
//! runtime: run one on its own threads (a `tokio::runtime::Runtime` built outside smarm) and
//! hand it work with `tokio_rt.spawn(fut)`, then wait on the `JoinHandle` with
//! `smarm::block_on(handle)`: the actor parks until tokio's thread completes it.

use crate::slot_state::WaitKind;
use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll, Wake, Waker};

use crate::channel::{oneshot, OneshotReceiver};
use crate::exit::{reason_from_payload, DownReason};
use crate::runtime::{current_worker, park_current, Shared};
use crate::slot_state::Pid;

/// Runs `f` on the runtime's blocking pool (outside a runtime: on a new OS thread) and
/// returns a handle whose [`join`](BlockingHandle::join) parks the calling actor until `f`
/// returns. For file I/O, DNS, C libraries: anything that would hold a scheduler thread.
///
/// ```
/// let len = smarm::run(|| {
///     let h = smarm::spawn_blocking(|| std::fs::read("Cargo.toml").map(|b| b.len()));
///     h.join().unwrap().unwrap()
/// });
/// assert!(len > 0);
/// ```
pub fn spawn_blocking<F, T>(f: F) -> BlockingHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let (tx, rx) = oneshot();
    let job: Box<dyn FnOnce() + Send> = Box::new(move || {
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(reason_from_payload);
        let _ = tx.send(out);
    });
    match runtime_of_caller() {
        // A pool that has shut down drops the job: `join` then reports `Shutdown`.
        Some(sh) => drop(sh.blocking.submit(job)),
        None => {
            let _ = std::thread::Builder::new().name("smarm-blocking".into()).spawn(job);
        }
    }
    BlockingHandle { rx }
}

/// The runtime of the calling scheduler thread (actor or not), if any.
fn runtime_of_caller() -> Option<&'static Shared> {
    let w = current_worker();
    // SAFETY: this thread's live worker; the runtime outlives it, and we use the reference
    // only before the caller's next switch.
    (!w.is_null()).then(|| unsafe { &*(*w).shared_ptr() })
}

/// The result of a [`spawn_blocking`] closure.
#[derive(Debug)]
pub struct BlockingHandle<T> {
    rx: OneshotReceiver<Result<T, DownReason>>,
}

impl<T: Send> BlockingHandle<T> {
    /// Waits for the closure (parking the actor, or blocking a plain thread). Its value, or
    /// `Panic(message)` if it panicked, or `Shutdown` if the runtime shut down before it ran.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::spawn_blocking(|| std::fs::metadata("/").is_ok());
    ///     assert_eq!(h.join(), Ok(true)); // parks the actor, not its thread
    ///     let failed = smarm::spawn_blocking(|| -> u8 { panic!("in the pool") });
    ///     assert!(matches!(failed.join(), Err(smarm::DownReason::Panic(_))));
    /// });
    /// ```
    #[track_caller]
    pub fn join(self) -> Result<T, DownReason> {
        self.rx.recv().unwrap_or(Err(DownReason::Shutdown))
    }
}

/// Runs `future` to completion on the calling actor (or thread), parking between polls.
///
/// The future's `Waker` may be called from any thread; each wake resumes the actor for one
/// more poll. Nothing else runs on the actor meanwhile: spawn actors for concurrency.
///
/// ```
/// let v = smarm::run(|| smarm::block_on(async { 40 + 2 }));
/// assert_eq!(v, 42);
/// ```
#[track_caller]
pub fn block_on<F: Future>(future: F) -> F::Output {
    let signal = Arc::new(Signal { notified: AtomicBool::new(false), target: Target::current() });
    let waker = Waker::from(signal.clone());
    let mut cx = Context::from_waker(&waker);
    let mut future = pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        // Acquire: pairs with the waker's Release; what the waker's thread did before waking
        // is visible to the next poll.
        while !signal.notified.swap(false, Ordering::Acquire) {
            park_current(WaitKind::Future);
        }
    }
}

/// Whom a `block_on` waker wakes. A `Weak` runtime (not the raw pointer of `Waiter`): a
/// waker may outlive the actor and the runtime (a future's waker kept by a channel), and a
/// wake after that must do nothing.
enum Target {
    Actor(Weak<Shared>, Pid),
    Thread(std::thread::Thread),
}

impl Target {
    fn current() -> Target {
        let w = current_worker();
        if !w.is_null() {
            // SAFETY: this thread's live worker, used before any switch.
            let w = unsafe { &*w };
            if let Some(pid) = w.current_pid() {
                return Target::Actor(Arc::downgrade(&w.shared_arc()), pid);
            }
        }
        Target::Thread(std::thread::current())
    }
}

struct Signal {
    notified: AtomicBool,
    target: Target,
}

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        // Release: see `block_on`. A wake that finds the flag already set needs no unpark:
        // the earlier one's is still pending or has been consumed by a poll yet to look.
        if self.notified.swap(true, Ordering::Release) {
            return;
        }
        match &self.target {
            Target::Actor(rt, pid) => {
                // The pid's generation makes a wake of an actor that has ended (its slot
                // reused) a no-op; one that is parked elsewhere re-checks and parks again.
                if let Some(sh) = rt.upgrade() {
                    sh.wake(*pid);
                }
            }
            Target::Thread(t) => t.unpark(),
        }
    }
}
