//! Spawning and the calling actor's own identity: [`spawn`] and its variants (typed mailbox,
//! linked, monitored, pinned to a thread), name lookups that yield an [`Addr`],
//! `yield_now`, `sleep`, `current_pid`. Layer 3 (actors' world): built on the scheduler's `Shared::spawn_with` and
//! the process layer's child setup.

use std::time::Duration;

use crate::actor::JoinHandle;
use crate::error::LookupError;
use crate::error::SpawnError;
use crate::mailbox::{Addr, Mailbox};
use crate::preempt::maybe_preempt;
#[cfg(doc)]
use crate::process::whereis;
use crate::process::MonitorRef;
use crate::runtime::current_worker;
use crate::slot_state::Pid;

/// Spawns an actor running `f` on the current runtime.
///
/// # Panics
/// Outside a runtime, or when [`try_spawn`] would fail (slab full, out of memory maps,
/// shutting down). Use [`try_spawn`] to handle those.
///
/// ```
/// smarm::run(|| {
///     let h = smarm::spawn(|| 2 + 2);
///     assert_eq!(h.join().unwrap(), 4);
/// });
/// ```
pub fn spawn<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn(f).unwrap_or_else(|e| panic!("{e}"))
}

/// Spawns an actor running `f`, or says why it could not.
///
/// ```
/// let rt = smarm::Runtime::builder().max_actors(1).build().unwrap();
/// rt.run(|| {
///     // the root occupies the only slot
///     assert!(matches!(smarm::try_spawn(|| ()), Err(smarm::SpawnError::Full { .. })));
/// }).unwrap();
/// assert!(matches!(smarm::try_spawn(|| ()), Err(smarm::SpawnError::NoRuntime)));
/// ```
pub fn try_spawn<F, T>(f: F) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let shared = current_shared_ptr()?;
    // SAFETY: see `current_shared_ptr`.
    let h = unsafe { &*shared }.spawn(f, false)?;
    maybe_preempt();
    Ok(h)
}

/// Spawns an actor that always runs on one scheduler thread: the thread that first runs it
/// (usually the spawning one). It never migrates, so it may use `thread_local!` values, and
/// crates that keep state in them, across blocking calls (see "Soundness contract" in the
/// crate docs).
///
/// A pinned actor waits for its thread: while an actor that never blocks holds that thread,
/// the pinned one does not run even if other threads are idle. Pinned actors suit code that
/// needs a thread; others balance better.
///
/// ```
/// use std::cell::RefCell;
/// thread_local! { static LOG: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) }; }
///
/// let rt = smarm::Runtime::builder().threads(2).build().unwrap();
/// rt.run(|| {
///     let h = smarm::spawn_pinned(|| {
///         let home = smarm::current_thread_index();
///         for i in 0..100 {
///             LOG.with(|l| l.borrow_mut().push(i));
///             smarm::yield_now();
///             assert_eq!(smarm::current_thread_index(), home);
///         }
///         LOG.with(|l| l.borrow().len())
///     });
///     assert_eq!(h.join().unwrap(), 100);
/// }).unwrap();
/// ```
///
/// # Panics
/// Where [`spawn`] panics; see [`try_spawn_pinned`].
pub fn spawn_pinned<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_pinned(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_pinned`], or why it could not (as [`try_spawn`]).
pub fn try_spawn_pinned<F, T>(f: F) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let shared = current_shared_ptr()?;
    // SAFETY: see `current_shared_ptr`.
    let h = unsafe { &*shared }.spawn_with_binding(false, true, |_, _| f)?;
    maybe_preempt();
    Ok(h)
}

fn current_shared_ptr() -> Result<*const crate::runtime::Shared, SpawnError> {
    let w = current_worker();
    if w.is_null() {
        return Err(SpawnError::NoRuntime);
    }
    // SAFETY: this thread's live worker; the runtime outlives the calling actor.
    Ok(unsafe { (*w).shared() } as *const crate::runtime::Shared)
}

/// Spawns an actor with a typed [`Mailbox`] and returns its [`Addr`].
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let echo = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
///         if let smarm::Envelope::Msg(n) = mb.recv() { tx.send(n * 2).unwrap(); }
///     });
///     echo.send(21);
///     assert_eq!(rx.recv(), Ok(42));
/// });
/// ```
///
/// # Panics
/// Where [`spawn`] panics; see [`try_spawn_actor`].
pub fn spawn_actor<M, F, T>(f: F) -> Addr<M>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_actor(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_actor`], or why it could not.
pub fn try_spawn_actor<M, F, T>(f: F) -> Result<Addr<M>, SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_actor_opts(f, None)
}

/// `try_spawn_actor`, optionally linked to `link_to` (the caller) before the child runs.
pub(crate) fn spawn_actor_opts<M, F, T>(f: F, link_to: Option<Pid>) -> Result<Addr<M>, SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    let shared = current_shared_ptr()?;
    let mut addr = None;
    // SAFETY: see `current_shared_ptr`.
    let sh = unsafe { &*shared };
    let h = sh.spawn_with(false, |sh, pid| {
        let (mb, sink) = crate::mailbox::new_mailbox::<M>(pid);
        addr = Some(mb.addr());
        crate::process::setup_child(sh, pid, Some(sink), link_to);
        move || f(mb)
    })?;
    drop(h);
    maybe_preempt();
    Ok(addr.expect("make ran"))
}

/// Spawns an actor linked to the caller (the link exists before the child can run).
///
/// # Panics
/// Outside an actor, or where [`spawn`] panics.
pub fn spawn_link<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let shared = current_shared_ptr().unwrap_or_else(|e| panic!("{e}"));
    let parent = current_pid();
    // SAFETY: see `current_shared_ptr`.
    let sh = unsafe { &*shared };
    let h = sh
        .spawn_with(false, |sh, pid| {
            crate::process::setup_child(sh, pid, None, Some(parent));
            f
        })
        .unwrap_or_else(|e| panic!("{e}"));
    maybe_preempt();
    h
}

/// Spawns an actor monitored by the caller (the monitor exists before the child can run,
/// so a child that dies at once is reported with its real reason).
///
/// ```
/// smarm::run(|| {
///     let (_h, mref) = smarm::spawn_monitor(|| panic!("boom"));
///     match smarm::recv_signal() {
///         smarm::Signal::Down(d) => {
///             assert_eq!(d.monitor, mref);
///             assert_eq!(d.reason, smarm::DownReason::Panic("boom".into()));
///         }
///         other => panic!("unexpected {other:?}"),
///     }
/// });
/// ```
///
/// # Panics
/// Outside an actor, or where [`spawn`] panics.
pub fn spawn_monitor<F, T>(f: F) -> (JoinHandle<T>, MonitorRef)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let shared = current_shared_ptr().unwrap_or_else(|e| panic!("{e}"));
    let sink = crate::process::current_sink();
    let mut mref = None;
    // SAFETY: see `current_shared_ptr`.
    let h = unsafe { &*shared }
        .spawn_with(false, |sh, pid| {
            mref = Some(crate::process::setup_child_monitor(sh, pid, sink));
            f
        })
        .unwrap_or_else(|e| panic!("{e}"));
    maybe_preempt();
    (h, mref.expect("make ran"))
}

/// The [`Addr`] of the actor registered under `name`, typed: [`whereis`] then
/// [`Addr::from_pid`]. A wrong message type is an error, not a panic; on a plain thread the
/// error is [`LookupError::NoRuntime`].
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let echo = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
///         tx.send(mb.recv().into_msg()).unwrap();
///     });
///     smarm::register("echo", echo.pid()).unwrap();
///     assert!(matches!(smarm::whereis_addr::<String>("echo"), Err(smarm::LookupError::WrongType { .. })));
///     smarm::whereis_addr::<u32>("echo").unwrap().send(7);
///     assert_eq!(rx.recv(), Ok(Some(7)));
/// });
/// ```
pub fn whereis_addr<M: Send + 'static>(name: &str) -> Result<Addr<M>, LookupError> {
    whereis_addr_in(crate::process::current_runtime().ok_or(LookupError::NoRuntime)?, name)
}

/// [`whereis_addr`] in the runtime `sh` (for callers that hold a runtime, on any thread).
pub(crate) fn whereis_addr_in<M: Send + 'static>(
    sh: &crate::runtime::Shared,
    name: &str,
) -> Result<Addr<M>, LookupError> {
    let pid = crate::registry::whereis_in(sh, name).ok_or(LookupError::NotFound)?;
    // Ended since the lookup: the name named nobody.
    Addr::from_pid_in(sh, pid).map_err(|e| if e == LookupError::NoProc { LookupError::NotFound } else { e })
}

/// The typed [`Addr`] of the live actor `pid` of the caller's runtime.
pub(crate) fn addr_of<M: Send + 'static>(pid: Pid) -> Result<Addr<M>, LookupError> {
    Addr::from_pid(pid)
}

/// Sends `msg` to the actor registered under `name` (Erlang's `Name ! Msg`). Unlike a send
/// to an [`Addr`], an unknown name is an error ([`LookupError::NotFound`]), as OTP's
/// `badarg`; so is a mailbox of another message type, and a call on a plain thread
/// ([`LookupError::NoRuntime`]).
///
/// ```
/// smarm::run(|| {
///     let (tx, rx) = smarm::channel::oneshot();
///     let echo = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
///         tx.send(mb.recv().into_msg()).unwrap();
///     });
///     smarm::register("echo", echo.pid()).unwrap();
///     smarm::send_named("echo", 9u32).unwrap();
///     assert_eq!(rx.recv(), Ok(Some(9)));
///     assert_eq!(smarm::send_named("nobody", 1u32), Err(smarm::LookupError::NotFound));
/// });
/// ```
pub fn send_named<M: Send + 'static>(name: &str, msg: M) -> Result<(), LookupError> {
    whereis_addr::<M>(name)?.send(msg);
    Ok(())
}

/// Lets other actors run; the caller is resumed later, possibly on another thread. Off a
/// runtime it yields the OS thread.
#[inline]
pub fn yield_now() {
    crate::runtime::worker_yield();
}

/// Parks the calling actor for at least `d` (never less). Off a runtime it sleeps the
/// OS thread.
///
/// ```
/// smarm::run(|| smarm::sleep(std::time::Duration::from_millis(1)));
/// ```
pub fn sleep(d: Duration) {
    crate::runtime::sleep(d);
}

/// The calling actor's pid.
///
/// # Panics
/// Outside an actor; see [`try_current_pid`].
pub fn current_pid() -> Pid {
    try_current_pid().expect("smarm::current_pid called outside an actor")
}

/// The calling actor's pid, or `None` outside an actor.
pub fn try_current_pid() -> Option<Pid> {
    crate::runtime::worker::current_actor_pid().map(|(_, pid)| pid)
}

/// Index of the scheduler thread running the caller (`None` outside a runtime). It can
/// change across any blocking call.
pub fn current_thread_index() -> Option<usize> {
    let w = current_worker();
    // SAFETY: this thread's live worker.
    (!w.is_null()).then(|| unsafe { (*w).index })
}
