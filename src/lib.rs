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
//! An actor may resume on a different OS thread after *any* blocking call: every smarm call
//! that can suspend the actor (`yield_now`, `sleep`, `join`, a receive, a send that blocks
//! or is preempted, a lock, `maybe_preempt`, ...) and any function that makes one. Consequently:
//!
//! - **The rule.** In a function that makes a blocking call, any `thread_local!` access
//!   (`with`, `set`, `get`, `take`, `replace`, ..., before or after the call, inlined from
//!   another crate or not) may reach the value of the thread the actor ran on *before* the
//!   call: the compiler may compute a thread-local's address once per function and keep it
//!   in a register across the call, and no runtime can repair an address cached in your
//!   function's frame. It depends on the optimiser (seen with a `RefCell<Vec<_>>`
//!   thread-local and no LTO: "already mutably borrowed" on the other thread's `RefCell`,
//!   and a corrupted heap), so treat it as undefined behaviour: without pinning, keep `thread_local!` accesses out
//!   of functions that block, and know that crates using thread-locals internally (random
//!   number generators, tracing dispatchers, allocator caches with thread-local state) are
//!   covered by the same rule.
//! - The sound alternatives: [`actor_local!`] storage, one value per actor that follows
//!   it to every thread; and [`spawn_pinned`], an actor that never migrates, in which
//!   thread-locals and the crates that use them behave as on a plain thread.
//! - `thread_local!` values are per *scheduler thread*, not per actor: even when read
//!   soundly they may change across any blocking call.
//! - Holding a thread-bound value across a blocking call (a `std::sync::MutexGuard`, a
//!   reference into a `thread_local!`, an `Rc` shared with a thread-local) is the known hole
//!   of every migrating stackful runtime: the value may be used or dropped on another
//!   thread (a pinned actor is the exception). smarm's own guards are migration-safe.
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
//!   destructor aborts the process. End an actor with `panic!` or [`exit`](fn@exit) instead.
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
pub mod actor_local;
mod backoff;
#[cfg(not(loom))]
mod behaviour;
#[cfg(not(loom))]
pub mod channel;
#[cfg(all(feature = "cluster", not(loom)))]
pub mod cluster;
#[cfg(not(loom))]
mod context;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod exit;
mod free_chain;
#[cfg(not(loom))]
pub mod gen_server;
#[cfg(not(loom))]
pub mod gen_statem;
#[cfg(not(loom))]
mod groups;
#[cfg(not(loom))]
mod hand;
#[cfg(not(loom))]
pub mod info;
#[cfg(not(loom))]
mod io;
mod local_queue;
mod loom_shim;
#[cfg(not(loom))]
mod mailbox;
#[cfg(not(loom))]
pub mod net;
#[cfg(all(feature = "observer", not(loom)))]
pub mod observer;
#[cfg(not(loom))]
mod offload;
#[cfg(not(loom))]
pub mod pg;
#[cfg(not(loom))]
mod preempt;
#[cfg(not(loom))]
mod process;
#[cfg(not(loom))]
pub mod profile;
#[cfg(not(loom))]
mod raw_mutex;
#[cfg(not(loom))]
mod receive;
#[cfg(not(loom))]
mod registry;
#[cfg(not(loom))]
mod reply;
#[cfg(not(loom))]
mod run;
#[doc(hidden)]
#[cfg_attr(loom, allow(dead_code))] // under loom only the models use it
pub mod run_queue;
#[cfg(not(loom))]
mod runtime;
#[cfg(loom)]
#[doc(hidden)]
pub mod runtime {
    //! Under loom only the idle protocol and the lifecycle counters are compiled (for their
    //! models).
    // An out-of-line module inside an inline module of the crate root resolves to
    // `src/runtime/idle.rs` (and `lifecycle.rs`), the same files `runtime/mod.rs` declares
    // in the normal build.
    #[allow(dead_code)] // only the loom models use it
    pub(crate) mod idle;
    #[allow(dead_code)] // only the loom models use it
    pub(crate) mod lifecycle;
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
mod task;
#[cfg(not(loom))]
pub mod timer;
#[cfg(any(feature = "smarm-trace", loom))]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) mod trace_ring;
#[cfg(not(loom))]
mod wheel;
#[cfg(not(loom))]
mod zeroed;

#[cfg(not(loom))]
pub use api::*;

#[cfg(not(loom))]
mod api {

    pub use crate::actor::JoinHandle;
    pub use crate::channel::{RecvTimeoutError, TryRecvError};
    #[cfg(feature = "cluster")]
    pub use crate::cluster::{connect, disconnect, monitor_nodes, node, nodes};
    pub use crate::error::{BuildError, LookupError, RunError, SpawnError};
    pub use crate::mailbox::{Addr, Envelope, Mailbox, RecvMark};
    pub use crate::offload::{block_on, spawn_blocking, BlockingHandle};
    pub use crate::preempt::{maybe_preempt, NoPreempt};
    #[doc(hidden)]
    pub use crate::process::__signal_box;
    pub use crate::process::{
        demonitor, demonitor_flush, exit, kill, link, monitor, monitor_name, recv_signal, recv_signal_timeout,
        register, registered, trap_exit, unlink, unregister, whereis, Down, DownReason, Exit, MonitorRef,
        RegisterError, Signal,
    };
    pub use crate::process::{shutdown, shutdown_handle, ShutdownHandle};
    pub use crate::run::run;
    pub use crate::runtime::{
        ActorPanic, Builder, Runtime, DEFAULT_LIFO_RUN_LIMIT, DEFAULT_MAX_ACTORS, DEFAULT_MAX_BLOCKING_THREADS,
        DEFAULT_SHUTDOWN_TIMEOUT, DEFAULT_STACK_SIZE, DEFAULT_TIMESLICE_CYCLES, MAX_STACK_SIZE, MAX_THREADS,
        MIN_STACK_SIZE,
    };
    pub use crate::slot_state::Pid;
    pub use crate::task::{
        current_pid, current_thread_index, send_named, sleep, spawn, spawn_actor, spawn_link, spawn_monitor,
        spawn_pinned, try_current_pid, try_spawn, try_spawn_actor, try_spawn_pinned, whereis_addr, yield_now,
    };
    pub use crate::task::{
        spawn_actor_link, spawn_actor_monitor, try_spawn_actor_link, try_spawn_actor_monitor, try_spawn_link,
        try_spawn_monitor, Handle, SpawnOptions,
    };
    pub use crate::timer::{cancel as cancel_timer, send_after, send_after_addr, TimerRef};

    /// Internals exposed for benchmarks and tests; not a stable API.
    #[doc(hidden)]
    pub mod __private {
        pub use crate::context::{asm_routines, raw_switch_pair_ticks, AsmRoutine};
        pub use crate::preempt::rdtsc;
        pub use crate::runtime::worker::scheduler_assigned_thread;
        pub use crate::runtime::Diagnostics;
        pub use crate::stack::guard_method;
    }
}
