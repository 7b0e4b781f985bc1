//! Spawning and the calling actor's own identity: [`spawn`] and its variants, name lookups
//! that yield an [`Addr`], `yield_now`, `sleep`, `current_pid`. Layer 3 (actors' world):
//! built on the scheduler's `Shared::spawn_custom` and the process layer's child setup.
//!
//! # The spawn family
//!
//! | returns | plain | linked | monitored |
//! |---|---|---|---|
//! | [`JoinHandle`] | [`spawn`] | [`spawn_link`] | [`spawn_monitor`] (+ [`MonitorRef`]) |
//! | [`Addr`] (typed [`Mailbox`]) | [`spawn_actor`] | [`spawn_actor_link`] | [`spawn_actor_monitor`] (+ [`MonitorRef`]) |
//!
//! plus [`spawn_pinned`], and [`SpawnOptions`] for a name, a stack size, a link or pinning
//! on any of them. Each has a `try_` twin that returns [`SpawnError`] instead of panicking
//! (`try_spawn`, `try_spawn_link`, ...). A link or monitor exists before the child can run,
//! so a child that dies at once is reported with its real reason, as OTP's `spawn_link`
//! and `spawn_monitor` promise. `spawn` and `try_spawn` are the benchmarked fast path: the
//! other forms add only the process setup they name.

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use crate::actor::JoinHandle;
use crate::error::LookupError;
use crate::error::SpawnError;
use crate::mailbox::{Addr, Mailbox};
use crate::preempt::maybe_preempt;
#[cfg(doc)]
use crate::process::whereis;
use crate::process::{MonitorRef, SignalSink};
use crate::registry::RegisterError;
use crate::runtime::{current_worker, Runtime, RuntimeCell, Shared, SpawnSettings, MAX_STACK_SIZE, MIN_STACK_SIZE};
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
#[track_caller]
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
#[track_caller]
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
#[track_caller]
pub fn spawn_pinned<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_pinned(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_pinned`], or why it could not (as [`try_spawn`]).
///
/// ```
/// assert!(matches!(smarm::try_spawn_pinned(|| ()), Err(smarm::SpawnError::NoRuntime)));
/// smarm::run(|| assert_eq!(smarm::try_spawn_pinned(|| 3).unwrap().join(), Ok(3)));
/// ```
#[track_caller]
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
#[track_caller]
pub fn spawn_actor<M, F, T>(f: F) -> Addr<M>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_actor(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_actor`], or why it could not (as [`try_spawn`]).
///
/// ```
/// assert!(matches!(
///     smarm::try_spawn_actor(|_mb: smarm::Mailbox<u8>| ()),
///     Err(smarm::SpawnError::NoRuntime)
/// ));
/// ```
#[track_caller]
pub fn try_spawn_actor<M, F, T>(f: F) -> Result<Addr<M>, SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    spawn_actor_opts(f, None)
}

/// `try_spawn_actor`, optionally linked to `link_to` (the caller) before the child runs.
#[track_caller]
pub(crate) fn spawn_actor_opts<M, F, T>(f: F, link_to: Option<Pid>) -> Result<Addr<M>, SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: see `current_shared_ptr`.
    let sh = unsafe { &*current_shared_ptr()? };
    let mut addr = None;
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

/// Spawns an actor linked to the caller (the link exists before the child can run): if
/// either ends abnormally, the other gets the exit signal (OTP's `spawn_link`).
///
/// ```
/// smarm::run(|| {
///     smarm::trap_exit(true);
///     let h = smarm::spawn_link(|| panic!("boom"));
///     match smarm::recv_signal() {
///         smarm::Signal::Exit(e) => {
///             assert_eq!(e.from, h.pid());
///             assert_eq!(e.reason, smarm::DownReason::Panic("boom".into()));
///         }
///         other => panic!("unexpected {other:?}"),
///     }
/// });
/// ```
///
/// # Panics
/// Outside an actor, or where [`spawn`] panics; see [`try_spawn_link`].
#[track_caller]
pub fn spawn_link<F, T>(f: F) -> JoinHandle<T>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_link(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_link`], or why it could not ([`SpawnError::NoRuntime`] outside an actor, else as
/// [`try_spawn`]).
///
/// ```
/// assert!(matches!(smarm::try_spawn_link(|| ()), Err(smarm::SpawnError::NoRuntime)));
/// smarm::run(|| assert_eq!(smarm::try_spawn_link(|| 7).unwrap().join(), Ok(7)));
/// ```
#[track_caller]
pub fn try_spawn_link<F, T>(f: F) -> Result<JoinHandle<T>, SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: see `current_shared_ptr`.
    let sh = unsafe { &*current_shared_ptr()? };
    let parent = try_current_pid().ok_or(SpawnError::NoRuntime)?;
    let h = sh.spawn_with(false, |sh, pid| {
        crate::process::setup_child(sh, pid, None, Some(parent));
        f
    })?;
    maybe_preempt();
    Ok(h)
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
/// Outside an actor, or where [`spawn`] panics; see [`try_spawn_monitor`].
#[track_caller]
pub fn spawn_monitor<F, T>(f: F) -> (JoinHandle<T>, MonitorRef)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_monitor(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_monitor`], or why it could not ([`SpawnError::NoRuntime`] outside an actor, else
/// as [`try_spawn`]).
///
/// ```
/// assert!(matches!(smarm::try_spawn_monitor(|| ()), Err(smarm::SpawnError::NoRuntime)));
/// smarm::run(|| {
///     let (h, mref) = smarm::try_spawn_monitor(|| ()).unwrap();
///     assert_eq!(mref.target(), h.pid());
/// });
/// ```
#[track_caller]
pub fn try_spawn_monitor<F, T>(f: F) -> Result<(JoinHandle<T>, MonitorRef), SpawnError>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: see `current_shared_ptr`.
    let sh = unsafe { &*current_shared_ptr()? };
    if try_current_pid().is_none() {
        return Err(SpawnError::NoRuntime);
    }
    let sink = crate::process::current_sink();
    let mut mref = None;
    let h = sh.spawn_with(false, |sh, pid| {
        mref = Some(crate::process::setup_child_monitor(sh, pid, sink));
        f
    })?;
    maybe_preempt();
    Ok((h, mref.expect("make ran")))
}

/// [`spawn_actor`] linked to the caller, as [`spawn_link`].
///
/// ```
/// smarm::run(|| {
///     smarm::trap_exit(true);
///     let addr = smarm::spawn_actor_link(|mb: smarm::Mailbox<&str>| {
///         if let smarm::Envelope::Msg(m) = mb.recv() { panic!("{m}") }
///     });
///     addr.send("stop");
///     match smarm::recv_signal() {
///         smarm::Signal::Exit(e) => assert_eq!(e.reason, smarm::DownReason::Panic("stop".into())),
///         other => panic!("unexpected {other:?}"),
///     }
/// });
/// ```
///
/// # Panics
/// Outside an actor, or where [`spawn`] panics; see [`try_spawn_actor_link`].
#[track_caller]
pub fn spawn_actor_link<M, F, T>(f: F) -> Addr<M>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_actor_link(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_actor_link`], or why it could not (as [`try_spawn_link`]).
///
/// ```
/// let r = smarm::try_spawn_actor_link(|_mb: smarm::Mailbox<u8>| ());
/// assert!(matches!(r, Err(smarm::SpawnError::NoRuntime)));
/// ```
#[track_caller]
pub fn try_spawn_actor_link<M, F, T>(f: F) -> Result<Addr<M>, SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    current_shared_ptr()?;
    let parent = try_current_pid().ok_or(SpawnError::NoRuntime)?;
    spawn_actor_opts(f, Some(parent))
}

/// [`spawn_actor`] monitored by the caller, as [`spawn_monitor`]: the [`Addr`] to talk to
/// it and the [`MonitorRef`] its `Down` will carry.
///
/// ```
/// smarm::run(|| {
///     let (addr, mref) = smarm::spawn_actor_monitor(|mb: smarm::Mailbox<u32>| {
///         let _ = mb.recv();
///     });
///     addr.send(1);
///     match smarm::recv_signal() {
///         smarm::Signal::Down(d) => {
///             assert_eq!(d.monitor, mref);
///             assert_eq!(d.reason, smarm::DownReason::Normal);
///         }
///         other => panic!("unexpected {other:?}"),
///     }
/// });
/// ```
///
/// # Panics
/// Outside an actor, or where [`spawn`] panics; see [`try_spawn_actor_monitor`].
#[track_caller]
pub fn spawn_actor_monitor<M, F, T>(f: F) -> (Addr<M>, MonitorRef)
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    try_spawn_actor_monitor(f).unwrap_or_else(|e| panic!("{e}"))
}

/// [`spawn_actor_monitor`], or why it could not (as [`try_spawn_monitor`]).
///
/// ```
/// let r = smarm::try_spawn_actor_monitor(|_mb: smarm::Mailbox<u8>| ());
/// assert!(matches!(r, Err(smarm::SpawnError::NoRuntime)));
/// ```
#[track_caller]
pub fn try_spawn_actor_monitor<M, F, T>(f: F) -> Result<(Addr<M>, MonitorRef), SpawnError>
where
    M: Send + 'static,
    F: FnOnce(Mailbox<M>) -> T + Send + 'static,
    T: Send + 'static,
{
    SpawnOptions::new().try_spawn_actor_monitor(f)
}

/// Per-spawn options: a registered name, a stack size, a link, pinning; then one of the
/// spawn forms. The free functions ([`spawn`], [`spawn_link`], [`spawn_actor`], ...) are
/// the same spawns with default options.
///
/// The shape follows `std::thread::Builder` and `tokio::task::Builder` (options, then a
/// `spawn` that reports errors); every spawn form has a `try_` twin that returns
/// [`SpawnError`] instead of panicking. Spawning with options needs an actor of the
/// runtime (a [`Handle`] spawns from other threads).
///
/// - `name`: registered before the actor can run, so a message sent to the name once the
///   spawn returns reaches it; a name held by a live actor fails the spawn with
///   [`SpawnError::NameTaken`] and nothing runs (OTP: `{error, {already_started, Pid}}`).
///   Released when the actor ends, as by [`register`](crate::process::register).
/// - `stack_size`: a stack of its own for this actor ([`MIN_STACK_SIZE`]
///   to [`MAX_STACK_SIZE`], else [`SpawnError::InvalidStackSize`]),
///   mapped at the spawn and unmapped when the actor ends (the runtime's pool serves only
///   its own size).
/// - `link`: linked to the caller before it can run, as [`spawn_link`]. Monitors are the
///   `*_monitor` forms, which also return the [`MonitorRef`].
/// - `pinned`: runs only on the thread of its first run, as [`spawn_pinned`].
///
/// ```
/// smarm::run(|| {
///     let addr = smarm::SpawnOptions::new()
///         .name("doubler")
///         .stack_size(64 * 1024)
///         .spawn_actor(|mb: smarm::Mailbox<(u32, smarm::channel::Sender<u32>)>| {
///             while let smarm::Envelope::Msg((n, reply)) = mb.recv() {
///                 let _ = reply.send(2 * n);
///             }
///         });
///     assert_eq!(smarm::whereis("doubler"), Some(addr.pid()));
///     let (tx, rx) = smarm::channel::channel::<u32>();
///     smarm::send_named("doubler", (21u32, tx)).unwrap();
///     assert_eq!(rx.recv(), Ok(42));
///     // The name is taken while the first actor lives.
///     let again = smarm::SpawnOptions::new().name("doubler").try_spawn(|| ());
///     assert!(matches!(again, Err(smarm::SpawnError::NameTaken { holder }) if holder == addr.pid()));
/// });
/// ```
#[derive(Clone, Debug, Default)]
#[must_use = "options do nothing until one of the spawn methods is called"]
pub struct SpawnOptions {
    name: Option<String>,
    stack_size: Option<usize>,
    link: bool,
    pinned: bool,
}

impl SpawnOptions {
    /// Default options: no name, the runtime's stack size, not linked, not pinned.
    ///
    /// ```
    /// smarm::run(|| assert_eq!(smarm::SpawnOptions::new().spawn(|| 1).join(), Ok(1)));
    /// ```
    pub fn new() -> SpawnOptions {
        SpawnOptions::default()
    }

    /// Registers the actor under `name` before it can run (see the type's doc).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::SpawnOptions::new().name("worker").spawn(|| smarm::sleep(std::time::Duration::from_millis(1)));
    ///     assert_eq!(smarm::whereis("worker"), Some(h.pid()));
    ///     h.join().unwrap();
    ///     assert_eq!(smarm::whereis("worker"), None); // released when it ended
    /// });
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> SpawnOptions {
        self.name = Some(name.into());
        self
    }

    /// Usable stack bytes of this actor (rounded up to pages; see the type's doc).
    ///
    /// ```
    /// smarm::run(|| {
    ///     // 4 MiB for a deep recursion, without raising every actor's stack.
    ///     fn depth(n: u32) -> u32 { let pad = [n as u8; 1024]; if n == 0 { pad[0] as u32 } else { 1 + depth(n - 1) + pad[1] as u32 - pad[1] as u32 } }
    ///     let h = smarm::SpawnOptions::new().stack_size(4 << 20).spawn(|| depth(2_000));
    ///     assert_eq!(h.join(), Ok(2_000));
    /// });
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> SpawnOptions {
        self.stack_size = Some(bytes);
        self
    }

    /// Links the actor to the caller before it can run, as [`spawn_link`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     smarm::trap_exit(true);
    ///     let h = smarm::SpawnOptions::new().link().spawn(|| panic!("boom"));
    ///     assert!(matches!(smarm::recv_signal(), smarm::Signal::Exit(e) if e.from == h.pid()));
    /// });
    /// ```
    pub fn link(mut self) -> SpawnOptions {
        self.link = true;
        self
    }

    /// Pins the actor to the thread of its first run, as [`spawn_pinned`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::SpawnOptions::new().pinned().spawn(|| {
    ///         let home = smarm::current_thread_index();
    ///         smarm::yield_now();
    ///         smarm::current_thread_index() == home
    ///     });
    ///     assert_eq!(h.join(), Ok(true));
    /// });
    /// ```
    pub fn pinned(mut self) -> SpawnOptions {
        self.pinned = true;
        self
    }

    /// Spawns `f` with these options.
    ///
    /// ```
    /// smarm::run(|| assert_eq!(smarm::SpawnOptions::new().name("n").spawn(|| 5).join(), Ok(5)));
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn`](SpawnOptions::try_spawn) fails.
    #[track_caller]
    pub fn spawn<F, T>(self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Spawns `f` with these options, or says why it could not.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let e = smarm::SpawnOptions::new().stack_size(1).try_spawn(|| ()).unwrap_err();
    ///     assert!(matches!(e, smarm::SpawnError::InvalidStackSize { requested: 1, .. }));
    /// });
    /// ```
    #[track_caller]
    pub fn try_spawn<F, T>(self, f: F) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (h, _) = self.spawn_planned(false, |_, _| (f, None))?;
        Ok(h)
    }

    /// Spawns `f` with these options, monitored by the caller, as [`spawn_monitor`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (h, mref) = smarm::SpawnOptions::new().name("m").spawn_monitor(|| ());
    ///     assert!(matches!(smarm::recv_signal(), smarm::Signal::Down(d) if d.monitor == mref && d.pid == h.pid()));
    /// });
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn_monitor`](SpawnOptions::try_spawn_monitor) fails.
    #[track_caller]
    pub fn spawn_monitor<F, T>(self, f: F) -> (JoinHandle<T>, MonitorRef)
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn_monitor(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn_monitor`](SpawnOptions::spawn_monitor), or why it could not.
    ///
    /// ```
    /// assert!(matches!(smarm::SpawnOptions::new().try_spawn_monitor(|| ()), Err(smarm::SpawnError::NoRuntime)));
    /// ```
    #[track_caller]
    pub fn try_spawn_monitor<F, T>(self, f: F) -> Result<(JoinHandle<T>, MonitorRef), SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let (h, mref) = self.spawn_planned(true, |_, _| (f, None))?;
        Ok((h, mref.expect("monitored")))
    }

    /// Spawns an actor with a typed [`Mailbox`] with these options, as [`spawn_actor`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     let addr = smarm::SpawnOptions::new().name("sink").spawn_actor(|mb: smarm::Mailbox<u8>| { let _ = mb.recv(); });
    ///     assert_eq!(smarm::whereis_addr::<u8>("sink").unwrap(), addr);
    ///     addr.send(0);
    /// });
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn_actor`](SpawnOptions::try_spawn_actor) fails.
    #[track_caller]
    pub fn spawn_actor<M, F, T>(self, f: F) -> Addr<M>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn_actor(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn_actor`](SpawnOptions::spawn_actor), or why it could not.
    ///
    /// ```
    /// let r = smarm::SpawnOptions::new().try_spawn_actor(|_mb: smarm::Mailbox<u8>| ());
    /// assert!(matches!(r, Err(smarm::SpawnError::NoRuntime)));
    /// ```
    #[track_caller]
    pub fn try_spawn_actor<M, F, T>(self, f: F) -> Result<Addr<M>, SpawnError>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        Ok(self.spawn_actor_planned(false, f)?.0)
    }

    /// A typed-mailbox actor with these options, monitored by the caller, as
    /// [`spawn_actor_monitor`].
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (addr, mref) = smarm::SpawnOptions::new().spawn_actor_monitor(|mb: smarm::Mailbox<u8>| { let _ = mb.recv(); });
    ///     addr.send(1);
    ///     assert!(matches!(smarm::recv_signal(), smarm::Signal::Down(d) if d.monitor == mref));
    /// });
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn_actor_monitor`](SpawnOptions::try_spawn_actor_monitor) fails.
    #[track_caller]
    pub fn spawn_actor_monitor<M, F, T>(self, f: F) -> (Addr<M>, MonitorRef)
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn_actor_monitor(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn_actor_monitor`](SpawnOptions::spawn_actor_monitor), or why it could not.
    ///
    /// ```
    /// let r = smarm::SpawnOptions::new().try_spawn_actor_monitor(|_mb: smarm::Mailbox<u8>| ());
    /// assert!(matches!(r, Err(smarm::SpawnError::NoRuntime)));
    /// ```
    #[track_caller]
    pub fn try_spawn_actor_monitor<M, F, T>(self, f: F) -> Result<(Addr<M>, MonitorRef), SpawnError>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        let (addr, mref) = self.spawn_actor_planned(true, f)?;
        Ok((addr, mref.expect("monitored")))
    }

    #[track_caller]
    fn spawn_actor_planned<M, F, T>(self, monitor: bool, f: F) -> Result<(Addr<M>, Option<MonitorRef>), SpawnError>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        let mut addr = None;
        let (h, mref) = self.spawn_planned(monitor, |_, pid| {
            let (mb, sink) = crate::mailbox::new_mailbox::<M>(pid);
            addr = Some(mb.addr());
            (move || f(mb), Some(sink))
        })?;
        drop(h);
        Ok((addr.expect("make ran"), mref))
    }

    /// The spawn with these options on the caller's runtime. `body` makes the closure and
    /// the actor's sink (its mailbox) before the actor is published.
    ///
    /// Without a name, the link and the monitor are set up before the actor is published
    /// (as by `spawn_link`/`spawn_monitor`). With one, the name is registered once the actor
    /// is published (live, so no concurrent `register` can take the name from under it) and
    /// before it is queued; only then are the link and the monitor set up, so a spawn refused
    /// for its name notifies nobody (its actor is stopped before it starts).
    #[track_caller]
    fn spawn_planned<F, T>(
        self,
        monitor: bool,
        body: impl FnOnce(&Shared, Pid) -> (F, Option<Arc<dyn SignalSink>>),
    ) -> Result<(JoinHandle<T>, Option<MonitorRef>), SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // SAFETY: see `current_shared_ptr`.
        let sh = unsafe { &*current_shared_ptr()? };
        if let Some(bytes) = self.stack_size {
            if !(MIN_STACK_SIZE..=MAX_STACK_SIZE).contains(&bytes) {
                return Err(SpawnError::InvalidStackSize {
                    requested: bytes,
                    minimum: MIN_STACK_SIZE,
                    maximum: MAX_STACK_SIZE,
                });
            }
        }
        let link_to = match self.link {
            true => Some(try_current_pid().ok_or(SpawnError::NoRuntime)?),
            false => None,
        };
        let watcher = match monitor {
            true => {
                try_current_pid().ok_or(SpawnError::NoRuntime)?;
                Some(crate::process::current_sink())
            }
            false => None,
        };
        let settings = SpawnSettings { thread_bound: self.pinned, stack_size: self.stack_size };
        let name = self.name;
        let named = name.is_some();
        let mref = Cell::new(None);
        let kept_sink = Cell::new(None);
        let watcher = Cell::new(watcher);
        let h = sh.spawn_custom(
            false,
            settings,
            |sh, pid| {
                let (f, sink) = body(sh, pid);
                if named {
                    kept_sink.set(sink.clone());
                    crate::process::setup_child(sh, pid, sink, None);
                } else {
                    if sink.is_some() || link_to.is_some() {
                        crate::process::setup_child(sh, pid, sink, link_to);
                    }
                    if let Some(w) = watcher.take() {
                        mref.set(Some(crate::process::setup_child_monitor(sh, pid, w)));
                    }
                }
                f
            },
            |sh, pid| {
                let Some(name) = name else { return Ok(()) };
                match crate::registry::register_in(sh, name, pid) {
                    Ok(()) => {}
                    Err(RegisterError::NameTaken(holder)) => return Err(SpawnError::NameTaken { holder }),
                    // A new, live, unnamed actor can be neither dead nor named already.
                    Err(_) => return Err(SpawnError::NameTaken { holder: pid }),
                }
                if link_to.is_some() {
                    crate::process::setup_child(sh, pid, kept_sink.take(), link_to);
                }
                if let Some(w) = watcher.take() {
                    mref.set(Some(crate::process::setup_child_monitor(sh, pid, w)));
                }
                Ok(())
            },
        )?;
        maybe_preempt();
        Ok((h, mref.take()))
    }
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
///
/// ```
/// smarm::run(|| {
///     let other = smarm::spawn(|| 1);
///     while !other.is_finished() {
///         smarm::yield_now(); // lets the other actor run
///     }
///     assert_eq!(other.join(), Ok(1));
/// });
/// ```
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
#[track_caller]
pub fn sleep(d: Duration) {
    crate::runtime::sleep(d);
}

/// The calling actor's pid.
///
/// # Panics
/// Outside an actor; see [`try_current_pid`].
///
/// ```
/// smarm::run(|| {
///     let h = smarm::spawn(smarm::current_pid);
///     let pid = h.pid();
///     assert_eq!(h.join(), Ok(pid));
/// });
/// ```
pub fn current_pid() -> Pid {
    try_current_pid().expect("smarm::current_pid called outside an actor")
}

/// The calling actor's pid, or `None` outside an actor.
///
/// ```
/// assert_eq!(smarm::try_current_pid(), None);
/// smarm::run(|| assert!(smarm::try_current_pid().is_some()));
/// ```
pub fn try_current_pid() -> Option<Pid> {
    crate::runtime::worker::current_actor_pid().map(|(_, pid)| pid)
}

/// Index of the scheduler thread running the caller (`None` outside a runtime). It can
/// change across any blocking call.
///
/// ```
/// assert_eq!(smarm::current_thread_index(), None);
/// let rt = smarm::Runtime::builder().threads(2).build().unwrap();
/// rt.run(|| assert!(smarm::current_thread_index().unwrap() < 2)).unwrap();
/// ```
pub fn current_thread_index() -> Option<usize> {
    let w = current_worker();
    // SAFETY: this thread's live worker.
    (!w.is_null()).then(|| unsafe { (*w).index })
}

/// A handle to a runtime, usable from any OS thread while the runtime runs: spawn actors
/// on it, request its graceful shutdown. `Clone + Send + Sync`; it never keeps the runtime
/// alive. Made by [`Runtime::handle`] before the runtime starts (for the threads a server
/// starts beside it: a signal watcher, an admin endpoint, a C library's callbacks), or by
/// [`Handle::current`] in an actor. As tokio's `Handle`, except that a smarm runtime runs
/// only inside [`Runtime::run`]: before `run` starts and after it ends, spawns fail with
/// [`SpawnError::NotRunning`] and [`shutdown`](Handle::shutdown) returns false.
///
/// Sending needs no handle: an [`Addr`] (or a channel `Sender`) works from any thread; name
/// lookups from another thread go through the handle ([`whereis`](Handle::whereis),
/// [`whereis_addr`](Handle::whereis_addr)). [`ShutdownHandle`](crate::ShutdownHandle) is
/// another name for this type.
///
/// ```
/// use std::time::Duration;
/// let rt = smarm::Runtime::builder().build().unwrap();
/// let handle = rt.handle();
/// let (up_tx, up_rx) = std::sync::mpsc::channel();
/// // A plain thread talks to the runtime while it runs, then stops it (as a SIGTERM
/// // watcher would).
/// let outside = std::thread::spawn(move || {
///     up_rx.recv().unwrap(); // the runtime runs
///     let (tx, rx) = std::sync::mpsc::channel();
///     let addr = handle.spawn_actor(move |mb: smarm::Mailbox<u32>| {
///         while let smarm::Envelope::Msg(n) = mb.recv() { tx.send(n + 1).unwrap(); }
///     });
///     addr.send(41);
///     assert_eq!(rx.recv().unwrap(), 42);
///     assert!(handle.shutdown());
/// });
/// let r = rt.run(move || {
///     up_tx.send(()).unwrap();
///     loop { smarm::sleep(Duration::from_millis(1)) }
/// });
/// assert!(matches!(r, Err(smarm::RunError::Root(smarm::DownReason::Shutdown))));
/// outside.join().unwrap();
/// ```
#[derive(Clone)]
pub struct Handle {
    cell: Arc<RuntimeCell>,
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle").field("running", &self.is_running()).finish()
    }
}

impl Runtime {
    /// A [`Handle`] to this runtime, for other threads. It works once [`Runtime::run`] has
    /// started the runtime, and until `run` is about to return.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// let handle = rt.handle();
    /// assert!(!handle.is_running()); // not started yet
    /// let h2 = handle.clone();
    /// rt.run(move || assert!(h2.is_running())).unwrap();
    /// assert!(!handle.is_running()); // ended
    /// ```
    pub fn handle(&self) -> Handle {
        Handle { cell: self.cell().clone() }
    }
}

impl Handle {
    /// The handle of the calling actor's runtime.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let handle = smarm::Handle::current();
    ///     let h = std::thread::spawn(move || handle.spawn(|| 6 * 7).join()).join().unwrap();
    ///     assert_eq!(h, Ok(42));
    /// });
    /// ```
    ///
    /// # Panics
    /// Outside an actor; see [`try_current`](Handle::try_current).
    pub fn current() -> Handle {
        Handle::try_current().expect("smarm::Handle::current called outside an actor")
    }

    /// The handle of the calling actor's runtime, or `None` outside an actor.
    ///
    /// ```
    /// assert!(smarm::Handle::try_current().is_none());
    /// smarm::run(|| assert!(smarm::Handle::try_current().is_some()));
    /// ```
    pub fn try_current() -> Option<Handle> {
        try_current_pid()?;
        // SAFETY: an actor runs, so this thread's worker is live.
        let sh = unsafe { &*current_shared_ptr().ok()? };
        Some(Handle { cell: sh.cell.clone() })
    }

    /// True while the runtime runs (started by [`Runtime::run`], not yet ended).
    ///
    /// ```
    /// smarm::run(|| assert!(smarm::Handle::current().is_running()));
    /// ```
    pub fn is_running(&self) -> bool {
        self.cell.running().is_some()
    }

    fn shared(&self) -> Result<Arc<Shared>, SpawnError> {
        self.cell.running().ok_or(SpawnError::NotRunning)
    }

    /// Spawns an actor running `f` on the runtime, from any thread.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let handle = smarm::Handle::current();
    ///     let v = std::thread::spawn(move || handle.spawn(|| "hi").join()).join().unwrap();
    ///     assert_eq!(v, Ok("hi"));
    /// });
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn`](Handle::try_spawn) fails.
    #[track_caller]
    pub fn spawn<F, T>(&self, f: F) -> JoinHandle<T>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn`](Handle::spawn), or why it could not: [`SpawnError::NotRunning`] before the
    /// runtime starts or after it ended, else as the free [`try_spawn`](fn@try_spawn).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// let handle = rt.handle();
    /// assert!(matches!(handle.try_spawn(|| ()), Err(smarm::SpawnError::NotRunning)));
    /// ```
    #[track_caller]
    pub fn try_spawn<F, T>(&self, f: F) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.shared()?.spawn_outside(|sh| sh.spawn(f, false))
    }

    /// Spawns an actor with a typed [`Mailbox`] on the runtime, from any thread.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let handle = smarm::Handle::current();
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let addr = std::thread::spawn(move || {
    ///         handle.spawn_actor(move |mb: smarm::Mailbox<u8>| {
    ///             if let smarm::Envelope::Msg(b) = mb.recv() { tx.send(b).unwrap(); }
    ///         })
    ///     }).join().unwrap();
    ///     addr.send(7);
    ///     assert_eq!(rx.recv(), Ok(7));
    /// });
    /// ```
    ///
    /// # Panics
    /// Where [`try_spawn_actor`](Handle::try_spawn_actor) fails.
    #[track_caller]
    pub fn spawn_actor<M, F, T>(&self, f: F) -> Addr<M>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        self.try_spawn_actor(f).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`spawn_actor`](Handle::spawn_actor), or why it could not (as
    /// [`try_spawn`](Handle::try_spawn)).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// let r = rt.handle().try_spawn_actor(|_mb: smarm::Mailbox<u8>| ());
    /// assert!(matches!(r, Err(smarm::SpawnError::NotRunning)));
    /// ```
    #[track_caller]
    pub fn try_spawn_actor<M, F, T>(&self, f: F) -> Result<Addr<M>, SpawnError>
    where
        M: Send + 'static,
        F: FnOnce(Mailbox<M>) -> T + Send + 'static,
        T: Send + 'static,
    {
        let mut addr = None;
        drop(self.shared()?.spawn_outside(|sh| {
            sh.spawn_with(false, |sh, pid| {
                let (mb, sink) = crate::mailbox::new_mailbox::<M>(pid);
                addr = Some(mb.addr());
                crate::process::setup_child(sh, pid, Some(sink), None);
                move || f(mb)
            })
        })?);
        Ok(addr.expect("make ran"))
    }

    /// The pid registered as `name` in this runtime, from any thread ([`whereis`] in an
    /// actor); `None` if no live actor has that name or the runtime is not running.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let me = smarm::current_pid();
    ///     smarm::register("root", me).unwrap();
    ///     let handle = smarm::Handle::current();
    ///     let found = std::thread::spawn(move || handle.whereis("root")).join().unwrap();
    ///     assert_eq!(found, Some(me));
    /// });
    /// ```
    pub fn whereis(&self, name: &str) -> Option<Pid> {
        crate::registry::whereis_in(&*self.cell.running()?, name)
    }

    /// The registered names of this runtime's live actors, sorted, from any thread
    /// ([`registered`](crate::registered) in an actor); empty if the runtime is not running.
    ///
    /// ```
    /// smarm::run(|| {
    ///     smarm::register("a", smarm::current_pid()).unwrap();
    ///     let handle = smarm::Handle::current();
    ///     let names = std::thread::spawn(move || handle.registered()).join().unwrap();
    ///     assert_eq!(names, ["a"]);
    /// });
    /// ```
    pub fn registered(&self) -> Vec<String> {
        self.cell.running().map(|sh| crate::registry::registered_in(&sh)).unwrap_or_default()
    }

    /// The typed [`Addr`] of the actor registered as `name`, from any thread (as
    /// [`whereis_addr`] in an actor; [`LookupError::NoRuntime`] if the runtime is not running).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let addr = smarm::spawn_actor(move |mb: smarm::Mailbox<u32>| {
    ///         if let smarm::Envelope::Msg(n) = mb.recv() { tx.send(n).unwrap(); }
    ///     });
    ///     smarm::register("sink", addr.pid()).unwrap();
    ///     let handle = smarm::Handle::current();
    ///     std::thread::spawn(move || handle.whereis_addr::<u32>("sink").unwrap().send(5)).join().unwrap();
    ///     assert_eq!(rx.recv(), Ok(5));
    /// });
    /// ```
    pub fn whereis_addr<M: Send + 'static>(&self, name: &str) -> Result<Addr<M>, LookupError> {
        whereis_addr_in(&*self.cell.running().ok_or(LookupError::NoRuntime)?, name)
    }

    /// The typed [`Addr`] of the live actor `pid`, from any thread (as
    /// [`Addr::from_pid`] in an actor; [`LookupError::NoRuntime`] if the runtime is not
    /// running).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let (tx, rx) = smarm::channel::oneshot();
    ///     let addr = smarm::spawn_actor(move |mb: smarm::Mailbox<&str>| {
    ///         if let smarm::Envelope::Msg(m) = mb.recv() { tx.send(m).unwrap(); }
    ///     });
    ///     let (handle, pid) = (smarm::Handle::current(), addr.pid());
    ///     std::thread::spawn(move || handle.addr_of::<&str>(pid).unwrap().send("hi")).join().unwrap();
    ///     assert_eq!(rx.recv(), Ok("hi"));
    /// });
    /// ```
    pub fn addr_of<M: Send + 'static>(&self, pid: Pid) -> Result<Addr<M>, LookupError> {
        Addr::from_pid_in(&*self.cell.running().ok_or(LookupError::NoRuntime)?, pid)
    }

    /// Sends `msg` to the actor registered as `name`, from any thread (as [`send_named`]).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// // Not running: nothing to look in.
    /// assert_eq!(rt.handle().send_named("x", 1u8), Err(smarm::LookupError::NoRuntime));
    /// ```
    pub fn send_named<M: Send + 'static>(&self, name: &str, msg: M) -> Result<(), LookupError> {
        self.whereis_addr::<M>(name)?.send(msg);
        Ok(())
    }

    /// Starts the runtime's graceful shutdown, from any thread, as [`shutdown`](crate::shutdown)
    /// does in one of its actors: the root is stopped with [`DownReason::Shutdown`], the
    /// supervision trees in reverse start order, then every other actor, and
    /// [`Runtime::run`] returns `Err(RunError::Root(Shutdown))`. Returns false if the
    /// runtime is not running (not started, or ended). A SIGTERM watcher thread calls this.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// assert!(!rt.handle().shutdown()); // not running yet: nothing to stop
    /// let r = rt.run(|| {
    ///     let handle = smarm::Handle::current();
    ///     std::thread::spawn(move || assert!(handle.shutdown()));
    ///     loop { smarm::sleep(std::time::Duration::from_millis(1)) }
    /// });
    /// assert!(matches!(r, Err(smarm::RunError::Root(smarm::DownReason::Shutdown))));
    /// ```
    ///
    /// [`DownReason::Shutdown`]: crate::DownReason::Shutdown
    pub fn shutdown(&self) -> bool {
        let Ok(sh) = self.shared() else { return false };
        if let Some(root) = sh.root_pid() {
            crate::process::stop_with(&sh, root, crate::exit::DownReason::Shutdown);
        }
        true
    }
}
