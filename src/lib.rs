//! smarm: a stackful green-thread, Erlang-style actor runtime.
//!
//! Actors are ordinary blocking Rust closures, each on its own mmap'd stack. Hand-written
//! x86_64 assembly switches between an actor and its scheduler thread; scheduler threads
//! take runnable actors from a lock-free MPMC run queue, so an actor may resume on any
//! thread.
//!
//! ```
//! let total = smarm::run(|| {
//!     let handles: Vec<_> = (0..10u64).map(|i| smarm::spawn(move || i * i)).collect();
//!     handles.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
//! });
//! assert_eq!(total, 285);
//! ```
//!
//! # Soundness contract: thread-locals and migration
//!
//! An actor may resume on a different OS thread after *any* blocking runtime call
//! (`yield_now`, `sleep`, `join`, a preemption in `maybe_preempt`, ...). Consequently:
//!
//! - `thread_local!` values are per *scheduler thread*, not per actor, and may change
//!   across any blocking call. Keep per-actor state in the actor's own variables.
//! - Holding a thread-bound value across a blocking call (a `std::sync::MutexGuard`, a
//!   reference into a `thread_local!`, an `Rc` shared with a thread-local) is the known hole
//!   of every migrating stackful runtime: the value may be used or dropped on another
//!   thread. smarm's own guards are migration-safe.
//! - An actor that is unwinding (`std::thread::panicking()`) never migrates: std's panic
//!   count is per thread. While such an actor is parked mid-unwind, other actors on that
//!   thread observe `std::thread::panicking() == true`.
//! - smarm tells an unwinding actor from its neighbours by marking it when its unwind
//!   starts (its panic hook, and every `resume_unwind` inside smarm), since std's panic count
//!   reads only as a boolean. An unwind that bypasses the hook (a direct
//!   `std::panic::resume_unwind`, or a panic after the hook was replaced with
//!   `std::panic::set_hook`) is still recognised while no other actor of its thread is
//!   parked mid-unwind. The one case it cannot see: such an unwind that *begins* while
//!   another actor of its thread is parked mid-unwind, and then parks in a destructor. That
//!   actor is treated as running normally: it may migrate, and a `kill` raised in its
//!   destructor aborts the process. End an actor with `panic!` or [`exit`] instead.
//! - Internally smarm obeys the rule documented in `context.rs`: every thread-local
//!   accessor reachable from an actor stack is out of line behind an asm barrier.
//!
//! # Cooperative preemption
//!
//! Actors are preempted only at runtime calls and [`maybe_preempt`]. An actor spinning in a
//! loop without either keeps its scheduler thread and cannot be shut down.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

#[cfg(not(loom))]
mod actor;
#[cfg(not(loom))]
pub mod channel;
#[cfg(not(loom))]
mod context;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
pub mod gen_server;
#[cfg(not(loom))]
pub mod gen_statem;
#[cfg(not(loom))]
mod hand;
mod local_queue;
mod loom_shim;
#[cfg(not(loom))]
mod mailbox;
#[cfg(not(loom))]
pub mod pg;
#[cfg(not(loom))]
mod preempt;
#[cfg(not(loom))]
mod process;
#[cfg(not(loom))]
mod reply;
#[doc(hidden)]
#[cfg_attr(loom, allow(dead_code))] // under loom only the models use it
pub mod run_queue;
#[cfg(not(loom))]
mod runtime;
#[cfg(loom)]
#[doc(hidden)]
pub mod runtime {
    //! Under loom only the idle protocol is compiled (for its model).
    // An out-of-line module inside an inline module of the crate root resolves to
    // `src/runtime/idle.rs`, the same file `runtime/mod.rs` declares in the normal build.
    #[allow(dead_code)] // only the loom models use it
    pub(crate) mod idle;
}
#[cfg(not(loom))]
mod slot_state;
#[cfg(not(loom))]
mod stack;
#[cfg(not(loom))]
pub mod supervisor;
#[cfg(not(loom))]
pub mod sync;
#[cfg(not(loom))]
pub mod timer;
#[cfg(not(loom))]
mod zeroed;

#[cfg(not(loom))]
pub use api::*;

#[cfg(not(loom))]
mod api {
    use std::time::Duration;

    pub use crate::actor::JoinHandle;
    pub use crate::context::tls_fence;
    pub use crate::error::{BuildError, RunError, SpawnError};
    pub use crate::mailbox::{Addr, Envelope, Mailbox};
    pub use crate::preempt::{maybe_preempt, NoPreempt};
    pub use crate::process::{
        demonitor, demonitor_flush, exit, kill, link, monitor, recv_signal, recv_signal_timeout, register, trap_exit,
        unlink, unregister, whereis, Down, DownReason, Exit, MonitorRef, RegisterError, Signal,
    };
    use crate::runtime::current_worker;
    pub use crate::runtime::{
        shutdown, Builder, Runtime, DEFAULT_LIFO_RUN_LIMIT, DEFAULT_MAX_ACTORS, DEFAULT_SHUTDOWN_TIMEOUT,
        DEFAULT_STACK_SIZE, DEFAULT_TIMESLICE_CYCLES, MIN_STACK_SIZE,
    };
    pub use crate::slot_state::Pid;
    pub use crate::timer::{cancel as cancel_timer, send_after, send_after_addr, TimerRef};

    /// Runs `root` on a runtime with the default configuration and returns its value.
    ///
    /// # Panics
    /// If the root actor panics (with its message), or if the runtime cannot start.
    ///
    /// ```
    /// assert_eq!(smarm::run(|| "hello"), "hello");
    /// ```
    pub fn run<F, T>(root: F) -> T
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        let rt = Runtime::builder().build().unwrap_or_else(|e| panic!("{e}"));
        match rt.run(root) {
            Ok(v) => v,
            Err(RunError::Root(DownReason::Panic(msg))) => panic!("smarm: the root actor panicked: {msg}"),
            Err(e) => panic!("{e}"),
        }
    }

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
        let w = current_worker();
        if w.is_null() {
            return Err(SpawnError::NoRuntime);
        }
        // SAFETY: this thread's live worker; the runtime outlives the spawning actor, and we
        // do not switch before using it.
        let shared = unsafe { (*w).shared() } as *const crate::runtime::Shared;
        // SAFETY: as above.
        let h = unsafe { (*shared).spawn(f, false) }?;
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

    /// The [`Addr`] of the actor registered under `name`, typed. A wrong message type is an
    /// error, not a panic.
    pub fn whereis_addr<M: Send + 'static>(name: &str) -> Result<Addr<M>, LookupError> {
        let pid = whereis(name).ok_or(LookupError::NotFound)?;
        let shared = current_shared_ptr().map_err(|_| LookupError::NotFound)?;
        // SAFETY: see `current_shared_ptr`.
        let any = crate::process::sink_any(unsafe { &*shared }, pid).ok_or(LookupError::NotFound)?;
        Addr::from_any(any).ok_or(LookupError::WrongType)
    }

    /// Sends `msg` to the actor registered under `name`.
    pub fn send_named<M: Send + 'static>(name: &str, msg: M) -> Result<(), LookupError> {
        whereis_addr::<M>(name)?.send(msg);
        Ok(())
    }

    /// Why a name lookup failed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum LookupError {
        /// No live actor has that name.
        NotFound,
        /// The actor's mailbox carries another message type.
        WrongType,
    }

    impl std::fmt::Display for LookupError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                LookupError::NotFound => f.write_str("smarm: no actor is registered under that name"),
                LookupError::WrongType => f.write_str("smarm: the registered actor takes another message type"),
            }
        }
    }
    impl std::error::Error for LookupError {}

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
        crate::runtime::worker::sleep(d);
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

    /// Internals exposed for benchmarks and tests; not a stable API.
    #[doc(hidden)]
    pub mod __private {
        pub use crate::context::raw_switch_pair_ticks;
        pub use crate::preempt::rdtsc;
        pub use crate::runtime::worker::scheduler_assigned_thread;
        pub use crate::runtime::Diagnostics;
        pub use crate::stack::guard_method;
    }
}
