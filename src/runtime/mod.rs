//! The runtime: configuration ([`Builder`]), the state shared by all scheduler threads
//! ([`Shared`]), spawning, waking, and the shutdown that follows the root actor's return.
//!
//! The per-thread scheduler loop, the wake slot and the actor-side switch live in
//! [`worker`]; the sleep/wake protocol of idle threads in [`idle`]; the live count and the
//! shutdown handshake in [`lifecycle`]; lazy park timeouts in `lazy`; stop requests in
//! `cancel`; unwinding marks and the panic hook in `unwind`; the per-thread block cache in
//! `blocks`.
//!
//! # Shutdown (root exit), step by step
//!
//! 1. The root actor returns (or panics); the scheduler thread that retires it calls
//!    [`Shared::begin_shutdown`].
//! 2. The shutdown flag is set by an RMW on the word that also counts the live actors
//!    ([`lifecycle`]). If no actor is live, the runtime finishes at once (step 5).
//!    Otherwise, after a SeqCst fence, the sweep visits the slots below the slab's
//!    high-water mark, lock-free: each live one has its `cancel` code raised to SHUTDOWN and
//!    is woken. Codes are only ever raised, by a CAS ([`CancelCell::raise`](crate::slot_state::CancelCell::raise)): a kill or exit
//!    request that is already pending, or that races the sweep, stays. The sweep does not
//!    lock or walk the whole slab: an empty `run(|| ())` looks at one slot.
//! 3. A spawn that raced with the sweep publishes its slot, fences, then reads the flag; if
//!    set it raises its own child's code to SHUTDOWN. (Dekker pair with step 2: the sweep
//!    sees the slot or the spawner sees the flag.) New spawns fail with `ShuttingDown`.
//! 4. Cancelled actors unwind at their next runtime call (destructors run) and end with
//!    [`DownReason::Shutdown`]. Every retirement decrements the live count (an RMW on the
//!    same word).
//! 5. The RMW that takes the count to zero with the flag set (the last retirement), or that
//!    sets the flag with the count at zero (step 2), makes its caller finish: it sets
//!    `finished` and unparks every scheduler thread. One word, so exactly one caller does.
//! 6. Scheduler threads see `finished` when idle and exit; `run` joins them, takes the
//!    root's value, and drops the shared state (slab, queues, pooled stacks).
//!
//! 7. Actors that have not ended `shutdown_timeout` (default 5 s) after step 2 have their
//!    code raised to KILL (a timer holding a `Weak` to the runtime).
//!
//! An actor that never makes a runtime call (`loop {}`) cannot be stopped, and neither can
//! one that catches every unwind in a loop (`loop { let _ = catch_unwind(|| sleep(..)); }`):
//! stopping is an unwind delivered at runtime calls, because abandoning a suspended stack
//! would skip the destructors that deregister it from channels and timers. `run` then waits
//! for it. That is the documented limit of cooperative scheduling.

pub(crate) mod blocking;
mod blocks;
mod cancel;
mod hand_off;
pub(crate) mod idle;
pub(crate) mod lazy;
mod lifecycle;
pub(crate) mod locals;
mod park;
mod placement;
#[cfg(feature = "tracing")]
pub(crate) mod spans;
pub(crate) mod stats;
mod unwind;
pub(crate) mod user_drop;
pub(crate) mod worker;
pub(crate) use worker::yield_now as worker_yield;

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::Thread;

use parking_lot::Mutex;

use crate::actor::{self, ActorCell, JoinHandle};
use crate::context;
use crate::error::{BuildError, RunError, SpawnError};
use crate::exit::DownReason;
use crate::loom_shim::CachePadded;
use crate::run_queue::RunQueue;
use crate::slot_state::{Cancel, Pid, Slab, Slot, Wake, UNPINNED};
use crate::stack::StackPool;
use crate::wheel::Timers;
pub use blocking::DEFAULT_MAX_BLOCKING_THREADS;
pub(crate) use blocks::{alloc_block, free_block};
pub(crate) use cancel::{check_cancelled_current, current_cancel_reason, defer_stops};
use idle::Idle;
pub(crate) use lazy::{park_until, sleep, WaitLimit};
use lifecycle::Lifecycle;
pub use unwind::ActorPanic;
pub(crate) use unwind::{mark_current_unwinding, set_current_exit_override, take_current_exit_override};
pub(crate) use worker::{
    current_actor_pid as current_shared, current_actor_slot, current_cpu_ticks, current_worker, park_current,
};

/// Smallest stack an actor can start, panic, print and unwind on.
pub const MIN_STACK_SIZE: usize = 32 * 1024;
/// Largest accepted stack size (1 GiB): far beyond any actor's needs, and small enough that
/// the stack's length with its guard page cannot overflow.
pub const MAX_STACK_SIZE: usize = 1 << 30;
/// Largest accepted number of scheduler threads: the runtime allocates per-thread queues
/// and parkers up front and starts every thread in `run`.
pub const MAX_THREADS: usize = 4096;
/// Default usable stack size: enough for `deep_recursion` (1,000 frames of 256 bytes) with
/// room to spare; committed lazily by the kernel.
pub const DEFAULT_STACK_SIZE: usize = 512 * 1024;
/// Default slab size: 262,144 live actors, OTP's default process limit (`+P`). The slab,
/// the run queue and the process table are zero-mapped and committed only as slots are
/// used, so the default costs address space (about 50 MB more than 16,384 slots), not
/// memory: a runtime of either size starts in the same ~0.2 ms with the same ~0.3 MB of
/// RSS.
pub const DEFAULT_MAX_ACTORS: usize = 262_144;
/// Default timeslice in rdtsc ticks (about 40 us at 2.5 GHz).
pub const DEFAULT_TIMESLICE_CYCLES: u64 = 100_000;
/// Default number of consecutive wake-slot runs before a thread serves the shared queue.
pub const DEFAULT_LIFO_RUN_LIMIT: u32 = 16;
/// Default time actors get to end after the root returns before they are killed.
pub const DEFAULT_SHUTDOWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Default number of released stacks each runtime keeps mapped for reuse.
pub const DEFAULT_WARM_STACKS: usize = 1024;

#[derive(Clone, Debug)]
pub(crate) struct Config {
    pub(crate) threads: usize,
    pub(crate) max_actors: usize,
    pub(crate) stack_size: usize,
    pub(crate) timeslice_cycles: u64,
    pub(crate) lifo_run_limit: u32,
    pub(crate) quiet_panics: bool,
    pub(crate) shutdown_timeout: std::time::Duration,
    pub(crate) warm_stacks: usize,
    pub(crate) max_blocking_threads: usize,
    pub(crate) threads_setup: ThreadSetup,
    /// `Builder::busy_poll`: how long the polling idle thread keeps polling without
    /// blocking before it sleeps in `epoll_wait` (zero: off).
    pub(crate) busy_poll: std::time::Duration,
    /// `Builder::cpu_time`: count each actor's CPU time (a clock read per switch).
    pub(crate) cpu_time: bool,
    /// `Builder::trace_records`: records each scheduler thread's ring holds.
    #[cfg(feature = "smarm-trace")]
    pub(crate) trace_records: usize,
    /// `Builder::on_actor_panic`.
    pub(crate) on_actor_panic: Option<PanicHook>,
}

/// The hook of [`Builder::on_actor_panic`] (its `Debug` names it, so the configuration's
/// `Debug` can be derived).
#[derive(Clone)]
pub(crate) struct PanicHook(pub(crate) Arc<dyn Fn(&ActorPanic<'_>) + Send + Sync>);

impl std::fmt::Debug for PanicHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PanicHook")
    }
}

/// How the runtime's OS threads are named, and the hooks they run
/// ([`Builder::thread_name`], [`Builder::on_thread_start`], [`Builder::on_thread_stop`]).
#[derive(Clone, Default)]
pub(crate) struct ThreadSetup {
    /// Scheduler threads are `{name}-{k}` (k >= 1; thread 0 is the caller of `run`),
    /// blocking-pool threads `{name}-blocking`; without a name, `smarm-worker-{k}` and
    /// `smarm-blocking`.
    pub(crate) name: Option<Arc<str>>,
    pub(crate) on_start: Option<ThreadHook>,
    pub(crate) on_stop: Option<ThreadHook>,
}

/// A thread hook of the builder.
pub(crate) type ThreadHook = Arc<dyn Fn() + Send + Sync>;

impl std::fmt::Debug for ThreadSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadSetup")
            .field("name", &self.name)
            .field("on_start", &self.on_start.is_some())
            .field("on_stop", &self.on_stop.is_some())
            .finish()
    }
}

impl ThreadSetup {
    /// The name of scheduler thread `k` (k >= 1).
    pub(crate) fn scheduler_name(&self, k: usize) -> String {
        match &self.name {
            Some(name) => format!("{name}-{k}"),
            None => format!("smarm-worker-{k}"),
        }
    }

    /// The name of blocking-pool threads.
    pub(crate) fn blocking_name(&self) -> String {
        match &self.name {
            Some(name) => format!("{name}-blocking"),
            None => "smarm-blocking".to_owned(),
        }
    }

    /// Runs the start hook, if any, on the calling thread.
    pub(crate) fn started(&self) {
        if let Some(h) = &self.on_start {
            run_thread_hook(h, "on_thread_start");
        }
    }

    /// Runs the stop hook, if any, on the calling thread.
    pub(crate) fn stopped(&self) {
        if let Some(h) = &self.on_stop {
            run_thread_hook(h, "on_thread_stop");
        }
    }
}

/// Runs a thread hook; a panic in it aborts the process, naming the hook (a runtime thread
/// that vanished would take the actors pinned to it, or a pool slot, with it).
fn run_thread_hook(hook: &ThreadHook, what: &str) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| hook())).is_err() {
        use std::io::Write;
        let thread = std::thread::current();
        let _ = writeln!(
            std::io::stderr(),
            "smarm: the {what} hook panicked on thread {:?}; aborting",
            thread.name().unwrap_or("<unnamed>")
        );
        std::process::abort();
    }
}

/// Configures a [`Runtime`].
///
/// ```
/// let rt = smarm::Runtime::builder().threads(2).max_actors(1024).build().unwrap();
/// assert_eq!(rt.run(|| 1 + 1).unwrap(), 2);
/// ```
#[derive(Clone, Debug)]
pub struct Builder {
    threads: Option<usize>,
    max_actors: usize,
    stack_size: usize,
    timeslice_cycles: u64,
    lifo_run_limit: u32,
    quiet_panics: bool,
    warm_stacks: usize,
    shutdown_timeout: std::time::Duration,
    max_blocking_threads: usize,
    threads_setup: ThreadSetup,
    busy_poll: std::time::Duration,
    cpu_time: bool,
    #[cfg(feature = "smarm-trace")]
    trace_records: usize,
    on_actor_panic: Option<PanicHook>,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            threads: None,
            max_actors: DEFAULT_MAX_ACTORS,
            stack_size: DEFAULT_STACK_SIZE,
            timeslice_cycles: DEFAULT_TIMESLICE_CYCLES,
            lifo_run_limit: DEFAULT_LIFO_RUN_LIMIT,
            quiet_panics: false,
            warm_stacks: DEFAULT_WARM_STACKS,
            shutdown_timeout: DEFAULT_SHUTDOWN_TIMEOUT,
            max_blocking_threads: blocking::DEFAULT_MAX_BLOCKING_THREADS,
            threads_setup: ThreadSetup::default(),
            busy_poll: std::time::Duration::ZERO,
            cpu_time: false,
            #[cfg(feature = "smarm-trace")]
            trace_records: DEFAULT_TRACE_RECORDS,
            on_actor_panic: None,
        }
    }
}

impl Builder {
    /// Number of scheduler threads (default: `available_parallelism()`; 1 to
    /// [`MAX_THREADS`], checked by [`build`](Builder::build)).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().threads(2).build().unwrap();
    /// assert_eq!(rt.threads(), 2);
    /// assert!(matches!(smarm::Runtime::builder().threads(0).build(), Err(smarm::BuildError::ZeroThreads)));
    /// ```
    pub fn threads(mut self, n: usize) -> Self {
        self.threads = Some(n);
        self
    }
    /// Maximum number of live actors (default [`DEFAULT_MAX_ACTORS`], 262,144 as in OTP; 1 to
    /// 16,777,216, checked by [`build`](Builder::build)). A spawn beyond it fails with
    /// [`SpawnError::Full`]. Unused slots cost address space, not memory.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().max_actors(2).build().unwrap();
    /// rt.run(|| {
    ///     let _second = smarm::spawn(|| smarm::sleep(std::time::Duration::from_millis(5)));
    ///     assert!(matches!(smarm::try_spawn(|| ()), Err(smarm::SpawnError::Full { max_actors: 2 })));
    /// }).unwrap();
    /// ```
    pub fn max_actors(mut self, n: usize) -> Self {
        self.max_actors = n;
        self
    }
    /// Usable stack bytes per actor (default 512 KiB; [`MIN_STACK_SIZE`] to
    /// [`MAX_STACK_SIZE`], checked by [`build`](Builder::build); rounded up to pages).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().stack_size(2 << 20).build().unwrap();
    /// // 64 frames of 4 KiB (more in a debug build) fit in 2 MiB.
    /// fn deep(n: u32) -> u32 { let pad = std::hint::black_box([0u8; 4096]); if n == 0 { pad[0] as u32 } else { 1 + deep(n - 1) } }
    /// assert_eq!(rt.run(|| deep(64)).unwrap(), 64);
    /// ```
    pub fn stack_size(mut self, bytes: usize) -> Self {
        self.stack_size = bytes;
        self
    }
    /// Timeslice in rdtsc ticks after which `maybe_preempt` and runtime calls yield
    /// (default 100,000).
    ///
    /// ```
    /// // A short slice: CPU-bound actors that call `maybe_preempt` take turns more often.
    /// let rt = smarm::Runtime::builder().timeslice_cycles(20_000).build().unwrap();
    /// rt.run(|| (0..1000).for_each(|_| smarm::maybe_preempt())).unwrap();
    /// ```
    pub fn timeslice_cycles(mut self, ticks: u64) -> Self {
        self.timeslice_cycles = ticks;
        self
    }
    /// Consecutive wake-slot runs before a thread serves the shared queue (default 16; at
    /// least 1; `u32::MAX` in effect never limits them).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().lifo_run_limit(4).build().unwrap();
    /// rt.run(|| ()).unwrap();
    /// assert!(smarm::Runtime::builder().lifo_run_limit(0).build().is_err());
    /// ```
    pub fn lifo_run_limit(mut self, n: u32) -> Self {
        self.lifo_run_limit = n;
        self
    }
    /// Busy-polls the network before sleeping (default: off). When every actor is parked and
    /// some wait on sockets, the one idle thread that watches the reactor keeps polling it
    /// without blocking for up to `spin` before it sleeps in `epoll_wait`, so a reply that
    /// arrives within that window is picked up without the kernel waking a sleeping thread
    /// (on a VM, a wake costs several microseconds, per hop). The price is CPU: that thread
    /// spins for `spin` every time the runtime runs out of work. Erlang's schedulers do the
    /// same by default (`+sbwt`); Linux's `SO_BUSY_POLL` is the kernel's form.
    ///
    /// Worth it for round-trip-bound services on dedicated cores (a cluster node answering
    /// calls, a proxy); leave it off where CPU is shared or idle power matters. Tens of
    /// microseconds cover a loopback or same-rack round trip.
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = smarm::Runtime::builder().busy_poll(Duration::from_micros(50)).build().unwrap();
    /// rt.run(|| ()).unwrap();
    /// ```
    pub fn busy_poll(mut self, spin: std::time::Duration) -> Self {
        self.busy_poll = spin;
        self
    }
    /// Counts each actor's CPU time (default: off), reported by `info::process_info` and the
    /// observer. It reads the CPU's time-stamp counter at every switch between actors
    /// (`rdtsc`, about 14 ns where measured: 10-15% of a message round trip between two
    /// actors), which is why it is not on by default. Scheduler threads' busy and idle time
    /// are counted either way.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().cpu_time(true).build().unwrap();
    /// rt.run(|| ()).unwrap();
    /// ```
    pub fn cpu_time(mut self, on: bool) -> Self {
        self.cpu_time = on;
        self
    }
    /// How many of its latest records each scheduler thread's trace ring keeps (feature
    /// `smarm-trace`; default 4,095, 128 KiB per thread; a message hand-off between two actors
    /// is one record). Rounded up to a power of two minus one (at least 1, at most 2^32 - 1);
    /// each takes 32 bytes, allocated when the runtime starts. A larger ring holds a longer
    /// past for `info::write_trace`, at a price on every event: the ring is written through
    /// the CPU's caches, and one bigger than they are evicts the actors' own data (with a
    /// 65,535-record ring, 2 MiB, a message round trip between two actors cost 8-20% more
    /// than with the default: outputs/history.md, finding 53).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().trace_records(1 << 20).build().unwrap();
    /// rt.run(|| ()).unwrap();
    /// ```
    #[cfg(feature = "smarm-trace")]
    pub fn trace_records(mut self, records: usize) -> Self {
        self.trace_records = records;
        self
    }
    /// How long actors still running when the root returns have to end after being told
    /// `Shutdown`, before they are killed (default 5 s).
    ///
    /// ```
    /// use std::time::Duration;
    /// let rt = smarm::Runtime::builder().shutdown_timeout(Duration::from_millis(100)).build().unwrap();
    /// rt.run(|| {
    ///     // Still running when the root returns: told Shutdown, and it ends at its next runtime call.
    ///     smarm::spawn(|| loop { smarm::sleep(Duration::from_millis(1)) });
    /// }).unwrap();
    /// ```
    pub fn shutdown_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.shutdown_timeout = timeout;
        self
    }
    /// Silences the report printed on stderr when an actor panics (default: printed, naming
    /// the pid, the registered name and the location). Has no effect with an
    /// [`on_actor_panic`](Builder::on_actor_panic) hook, which replaces the report.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().quiet_panics(true).build().unwrap();
    /// let r = rt.run(|| smarm::spawn(|| panic!("not printed")).join()).unwrap();
    /// assert!(r.is_err());
    /// ```
    pub fn quiet_panics(mut self, quiet: bool) -> Self {
        self.quiet_panics = quiet;
        self
    }

    /// Calls `hook` for every panic in an actor of this runtime, on the panicking actor at
    /// the point of the panic (as a `std::panic` hook is called), instead of printing the
    /// report: the place to send actor crashes to Sentry, `tracing` or a log. The
    /// [`ActorPanic`] carries the pid, the registered name, the message and the location;
    /// its `Display` is the report smarm prints by default.
    ///
    /// Every panic of an actor reaches it, including one the actor catches with
    /// `catch_unwind` (as with std's hook); stop requests (kill, exit signals, shutdown)
    /// are not panics and do not. Panics outside actors go to the process's panic hook as
    /// usual. The hook runs while the actor unwinds: it should not block for long, and a
    /// panic inside it aborts the process (as in any panic hook).
    ///
    /// smarm installs one process-wide `std::panic` hook (when the first runtime starts)
    /// that serves this, and passes panics outside actors to the hook that was installed
    /// before it. A hook installed with `std::panic::set_hook` after that replaces smarm's,
    /// and then sees actor panics itself (`smarm::try_current_pid()` names the actor), at
    /// the cost described under "Soundness contract" in the crate docs.
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let s = seen.clone();
    /// let rt = smarm::Runtime::builder()
    ///     .on_actor_panic(move |p: &smarm::ActorPanic<'_>| {
    ///         s.lock().unwrap().push((p.pid(), p.name().map(str::to_owned), p.message().to_owned(), p.location().is_some()));
    ///     })
    ///     .build()
    ///     .unwrap();
    /// let pid = rt.run(|| {
    ///     let h = smarm::SpawnOptions::new().name("db").spawn(|| panic!("lost connection"));
    ///     let pid = h.pid();
    ///     assert!(h.join().is_err());
    ///     pid
    /// }).unwrap();
    /// assert_eq!(*seen.lock().unwrap(), [(pid, Some("db".to_owned()), "lost connection".to_owned(), true)]);
    /// ```
    pub fn on_actor_panic(mut self, hook: impl Fn(&ActorPanic<'_>) + Send + Sync + 'static) -> Self {
        self.on_actor_panic = Some(PanicHook(Arc::new(hook)));
        self
    }
    /// Released stacks kept mapped for reuse (default 1,024); more are unmapped, 64 at a
    /// time. Nothing is allocated up front, and the pool holds no more used stacks than
    /// there were actors, so any value is accepted (`usize::MAX`: keep every released
    /// stack). Stacks are mapped in batches (16 at first, then as many as the runtime has
    /// mapped so far, at most 1,024); a batch's unused stacks hold address space and page
    /// tables, not memory. Each scheduler thread also keeps up to 64 stacks its actors
    /// released in front of the pool (so that an actor that ends and one that starts on the
    /// same thread do not lock the pool), which may stay mapped beyond this bound.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().warm_stacks(16).build().unwrap();
    /// rt.run(|| (0..64).map(|i| smarm::spawn(move || i)).for_each(|h| { h.join().unwrap(); })).unwrap();
    /// ```
    pub fn warm_stacks(mut self, n: usize) -> Self {
        self.warm_stacks = n;
        self
    }

    /// Maximum number of OS threads of the pool that runs
    /// [`spawn_blocking`](crate::spawn_blocking) closures (default 512, at least 1). The pool
    /// starts threads on demand and lets them go after 10 s idle; beyond the maximum,
    /// closures queue.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().max_blocking_threads(2).build().unwrap();
    /// let v = rt.run(|| smarm::spawn_blocking(|| 40 + 2).join().unwrap()).unwrap();
    /// assert_eq!(v, 42);
    /// ```
    pub fn max_blocking_threads(mut self, n: usize) -> Self {
        self.max_blocking_threads = n;
        self
    }

    /// Names the runtime's OS threads: scheduler threads are `{name}-1`, `{name}-2`, ...
    /// (thread 0 is the thread that calls [`Runtime::run`], which keeps its name), blocking-pool
    /// threads are `{name}-blocking` (default: `smarm-worker-1`, ... and `smarm-blocking`). Linux shows
    /// the first 15 bytes in `top` and `/proc`; Rust's `Thread::name` has all of it.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().threads(2).thread_name("api").build().unwrap();
    /// let names = rt.run(|| {
    ///     // Run one actor on each scheduler thread that is not the caller's.
    ///     (0..16).map(|_| smarm::spawn(|| std::thread::current().name().map(str::to_owned)).join().unwrap())
    ///         .collect::<Vec<_>>()
    /// }).unwrap();
    /// assert!(names.iter().flatten().all(|n| n == "api-1" || !n.starts_with("api")));
    /// ```
    pub fn thread_name(mut self, name: impl Into<String>) -> Self {
        self.threads_setup.name = Some(Arc::from(name.into()));
        self
    }

    /// Runs `hook` on each of the runtime's OS threads as it starts serving: every scheduler
    /// thread (the caller of [`Runtime::run`] included, when `run` starts) and every
    /// blocking-pool thread, before it runs any actor or job (as tokio's
    /// `Builder::on_thread_start`). For per-thread setup: a tracing span, CPU affinity, a
    /// thread-local of a C library. It runs outside any actor. It must not panic: a panic
    /// aborts the process, since a runtime thread cannot be lost.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let started = Arc::new(AtomicUsize::new(0));
    /// let s = started.clone();
    /// let rt = smarm::Runtime::builder()
    ///     .threads(3)
    ///     .on_thread_start(move || { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.run(|| ()).unwrap();
    /// assert_eq!(started.load(Ordering::SeqCst), 3); // the three scheduler threads
    /// ```
    pub fn on_thread_start(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.threads_setup.on_start = Some(Arc::new(hook));
        self
    }

    /// Runs `hook` on each of the runtime's OS threads as it stops serving: scheduler
    /// threads when the runtime ends (the caller of [`Runtime::run`] before `run` returns),
    /// blocking-pool threads when they exit. Pairs with [`on_thread_start`](Builder::on_thread_start);
    /// the same rules apply.
    ///
    /// ```
    /// use std::sync::atomic::{AtomicUsize, Ordering};
    /// use std::sync::Arc;
    /// let stopped = Arc::new(AtomicUsize::new(0));
    /// let s = stopped.clone();
    /// let rt = smarm::Runtime::builder()
    ///     .threads(2)
    ///     .on_thread_stop(move || { s.fetch_add(1, Ordering::SeqCst); })
    ///     .build()
    ///     .unwrap();
    /// rt.run(|| ()).unwrap();
    /// assert_eq!(stopped.load(Ordering::SeqCst), 2); // both scheduler threads, before run returned
    /// ```
    pub fn on_thread_stop(mut self, hook: impl Fn() + Send + Sync + 'static) -> Self {
        self.threads_setup.on_stop = Some(Arc::new(hook));
        self
    }

    /// Validates the configuration.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().threads(1).build().unwrap();
    /// assert_eq!(rt.run(|| 1).unwrap(), 1);
    /// let e = smarm::Runtime::builder().max_actors(0).build().unwrap_err();
    /// assert!(matches!(e, smarm::BuildError::ZeroMaxActors));
    /// ```
    pub fn build(self) -> Result<Runtime, BuildError> {
        let threads = match self.threads {
            Some(0) => return Err(BuildError::ZeroThreads),
            Some(n) if n > MAX_THREADS => {
                return Err(BuildError::TooManyThreads { requested: n, maximum: MAX_THREADS })
            }
            Some(n) => n,
            None => std::thread::available_parallelism().map_or(1, |n| n.get().min(MAX_THREADS)),
        };
        if self.max_actors == 0 {
            return Err(BuildError::ZeroMaxActors);
        }
        if self.max_actors > Slab::MAX {
            return Err(BuildError::TooManyActors { requested: self.max_actors, maximum: Slab::MAX });
        }
        if self.stack_size < MIN_STACK_SIZE {
            return Err(BuildError::StackTooSmall { requested: self.stack_size, minimum: MIN_STACK_SIZE });
        }
        if self.stack_size > MAX_STACK_SIZE {
            return Err(BuildError::StackTooLarge { requested: self.stack_size, maximum: MAX_STACK_SIZE });
        }
        if self.lifo_run_limit == 0 {
            return Err(BuildError::ZeroLifoRunLimit);
        }
        if self.timeslice_cycles == 0 {
            return Err(BuildError::ZeroTimeslice);
        }
        if self.max_blocking_threads == 0 {
            return Err(BuildError::ZeroBlockingThreads);
        }
        Ok(Runtime {
            config: Config {
                threads,
                max_actors: self.max_actors,
                stack_size: self.stack_size,
                timeslice_cycles: self.timeslice_cycles,
                lifo_run_limit: self.lifo_run_limit,
                quiet_panics: self.quiet_panics,
                warm_stacks: self.warm_stacks,
                shutdown_timeout: self.shutdown_timeout,
                max_blocking_threads: self.max_blocking_threads,
                threads_setup: self.threads_setup,
                busy_poll: self.busy_poll,
                cpu_time: self.cpu_time,
                #[cfg(feature = "smarm-trace")]
                trace_records: self.trace_records,
                on_actor_panic: self.on_actor_panic,
            },
            cell: Arc::new(RuntimeCell::default()),
        })
    }
}

/// A configured runtime. [`Runtime::run`] starts its scheduler threads, runs a root actor
/// and returns the root's value once every actor has ended and every thread is joined.
#[derive(Debug)]
pub struct Runtime {
    config: Config,
    /// Where the runtime's handles find it once it runs.
    cell: Arc<RuntimeCell>,
}

/// The link from a runtime's handles to its running state: empty until [`Runtime::run`]
/// starts it; afterwards a `Weak` (handles never keep a runtime alive).
#[derive(Debug, Default)]
pub(crate) struct RuntimeCell {
    shared: std::sync::OnceLock<std::sync::Weak<Shared>>,
}

impl RuntimeCell {
    /// The runtime, if it runs now (started and not finished).
    pub(crate) fn running(&self) -> Option<Arc<Shared>> {
        let sh = self.shared.get()?.upgrade()?;
        (!sh.lifecycle.is_finished()).then_some(sh)
    }
}

impl Runtime {
    /// A builder with the defaults.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().build().unwrap();
    /// assert!(rt.threads() >= 1);
    /// ```
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// Number of scheduler threads this runtime will start.
    ///
    /// ```
    /// assert_eq!(smarm::Runtime::builder().threads(3).build().unwrap().threads(), 3);
    /// ```
    pub fn threads(&self) -> usize {
        self.config.threads
    }

    /// The link its handles use to reach it (`Runtime::handle`, in `task`).
    pub(crate) fn cell(&self) -> &Arc<RuntimeCell> {
        &self.cell
    }

    /// Runs `root` as the root actor on the calling thread plus `threads - 1` more, with the
    /// layers above the scheduler plugged in through `hooks` (the public `run` lives in the
    /// behaviours layer, `crate::run`, which wraps the root to stop the supervision trees).
    ///
    /// When the root returns, the remaining actors are shut down (`Shutdown` at their next
    /// runtime call), their stacks freed and the threads joined; then this returns the root's
    /// value, or [`RunError::Root`] if the root did not return one.
    pub(crate) fn run_hooked<F, T>(self, hooks: &'static Hooks, root: F) -> Result<T, RunError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        if !current_worker().is_null() {
            return Err(RunError::Nested);
        }
        unwind::install_process_hooks();
        let shared = Arc::new(Shared::new(self.config, hooks, self.cell.clone()));
        let _ = self.cell.shared.set(Arc::downgrade(&shared));
        let handle = shared.spawn(root, true).map_err(RunError::Spawn)?;
        let _ = shared.root_pid.set(handle.pid());

        let n = shared.config.threads;
        // Each new thread starts away from this thread's CPU (see `placement`).
        let placement = if n > 1 { placement::Placement::capture(n).map(Arc::new) } else { None };
        let mut threads = Vec::with_capacity(n - 1);
        for k in 1..n {
            let sh = shared.clone();
            let p = placement.clone();
            let spawned =
                std::thread::Builder::new().name(shared.config.threads_setup.scheduler_name(k)).spawn(move || {
                    if let Some(p) = p {
                        p.arrived(k);
                    }
                    worker::thread_main(sh, k)
                });
            match spawned {
                Ok(h) => {
                    if let Some(p) = &placement {
                        p.steer(k, std::os::unix::thread::JoinHandleExt::as_pthread_t(&h));
                    }
                    threads.push(h)
                }
                // Run on the threads we have: thread 0 (this one) always exists, and nothing is
                // ever pinned to a thread that never ran.
                Err(_) => break,
            }
        }
        worker::thread_main(shared.clone(), 0);
        for t in threads {
            // Never an error: a scheduler thread that panics aborts the process instead of
            // ending (`worker::thread_main`), since what it held cannot be finished elsewhere.
            let _ = t.join();
        }
        // Every actor has ended: nobody waits for a blocking job any more.
        shared.blocking.shutdown(shared.config.shutdown_timeout);
        match handle.try_take() {
            Some(Ok(v)) => Ok(v),
            Some(Err(reason)) => Err(RunError::Root(reason)),
            None => Err(RunError::Root(crate::exit::DownReason::Shutdown)),
        }
    }
}

/// Records each scheduler thread's ring keeps by default (`Builder::trace_records`): 4,096
/// slots of 32 bytes, 128 KiB per thread; the newest overwrite the oldest.
#[cfg(feature = "smarm-trace")]
pub(crate) const DEFAULT_TRACE_RECORDS: usize = (1 << 12) - 1;

/// A spawn's trace event, on the spawning thread's ring if it is a scheduler thread of this
/// runtime (a spawn from outside is not traced).
#[cfg(feature = "smarm-trace")]
fn trace_spawn(sh: &Shared, pid: Pid) {
    if let Some(w) = sh.local_worker() {
        // The parent is the actor running on this thread (0: the exporter tells it).
        w.trace(crate::trace_ring::EventKind::Spawn, worker::pack(pid), 0);
    }
}

/// Records an event on the calling scheduler thread's ring (feature `smarm-trace`; nothing
/// off a scheduler thread). For the layers above (cluster frames).
#[cfg(all(feature = "smarm-trace", feature = "cluster"))]
pub(crate) fn trace_event(kind: crate::trace_ring::EventKind, arg: u64) {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker, used before any switch.
    let w = unsafe { &*w };
    w.trace(kind, w.current_pid().map_or(0, worker::pack), arg);
}

/// Per-spawn settings of [`Shared::spawn_custom`]: the runtime's defaults on every spawn
/// path but `SpawnOptions`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SpawnSettings {
    /// Runs only on the thread of its first run (`spawn_pinned`).
    pub(crate) thread_bound: bool,
    /// A stack of this many usable bytes instead of one of the runtime's pool (checked by
    /// the caller against [`MIN_STACK_SIZE`] and [`MAX_STACK_SIZE`]).
    pub(crate) stack_size: Option<usize>,
}

/// What the layers above the scheduler plug into it: the only way the scheduler reaches the
/// process layer, so its dependencies point down. One static table per build (the process
/// layer's `process::HOOKS`), passed to [`Runtime::run_hooked`].
pub(crate) struct Hooks {
    /// Makes the per-runtime state of the layers above (process table, names, groups) for a
    /// slab of `max_actors` slots. [`Shared::world`] hands it back.
    pub(crate) new_world: fn(max_actors: usize) -> Box<dyn std::any::Any + Send + Sync>,
    /// An actor's exit (monitors, links, names, groups, its timers), run on the dying
    /// actor's own stack before its slot is freed. Must not unwind (the actor's entry
    /// cannot): the user `Drop`s it runs go through `user_drop::drop_caught`.
    pub(crate) on_exit: fn(&Shared, Pid, &DownReason),
    /// The reason of a pending exit-signal stop (`Cancel::Exit`), kept by the process layer.
    pub(crate) exit_reason: fn(&Shared, Pid) -> DownReason,
    /// The registered name of a live actor, if any (the panic report, [`ActorPanic::name`]).
    pub(crate) name_of: fn(&Shared, Pid) -> Option<String>,
}

/// A private queue of work only one thread may run: actors pinned there (thread-bound
/// actors, and actors that switched out while unwinding). Rare, so a mutex; `len` lets the
/// owner skip the lock when empty.
#[derive(Default)]
pub(crate) struct Inbox {
    len: AtomicUsize,
    queue: Mutex<VecDeque<u32>>,
}

impl Inbox {
    fn push(&self, index: u32) {
        let mut q = self.queue.lock();
        q.push_back(index);
        // Release: the owner's Acquire load of `len` then sees the pushed index under its lock.
        self.len.store(q.len(), Ordering::Release);
    }

    pub(crate) fn pop(&self) -> Option<u32> {
        // Acquire: pairs with the Release in `push`.
        if self.len.load(Ordering::Acquire) == 0 {
            return None;
        }
        let mut q = self.queue.lock();
        let v = q.pop_front();
        // Release: as in `push` (the value is stored under the lock either way).
        self.len.store(q.len(), Ordering::Release);
        v
    }

    pub(crate) fn is_empty(&self) -> bool {
        // Acquire: pairs with the Release in `push`, as in `pop`.
        self.len.load(Ordering::Acquire) == 0
    }
}

/// State shared by all scheduler threads of one runtime.
pub(crate) struct Shared {
    pub(crate) config: Config,
    pub(crate) slab: Slab,
    pub(crate) run_queue: RunQueue,
    /// One per scheduler thread: work that thread queued for itself, stealable by the
    /// others (see `local_queue`).
    pub(crate) locals: Box<[crate::local_queue::LocalQueue]>,
    pub(crate) idle: Idle,
    /// One parker per scheduler thread, registered before the thread can sleep.
    pub(crate) parkers: Box<[park::Parker]>,
    /// Per thread: how many times a waker claimed it and unparked it (diagnostics and the
    /// wake-distribution tests).
    unparks: Box<[AtomicUsize]>,
    /// Per thread: its counters for introspection (see `stats`).
    pub(crate) thread_stats: Box<[CachePadded<stats::ThreadStats>]>,
    /// Per thread: its event ring (feature `smarm-trace`); the thread writes through the
    /// `TraceWriter` it claims at start, `info::write_trace` reads them all.
    #[cfg(feature = "smarm-trace")]
    pub(crate) trace_rings: Box<[Arc<crate::trace_ring::TraceRing>]>,
    pub(crate) inboxes: Box<[CachePadded<Inbox>]>,
    pub(crate) timers: Timers,
    /// User values released by scheduler code, waiting for a reaper actor (`user_drop`).
    pub(crate) graveyard: user_drop::Graveyard,
    /// The layers above the scheduler, plugged in by the caller of `run_hooked`.
    pub(crate) hooks: &'static Hooks,
    /// Their per-runtime state, made by `hooks.new_world` (see [`Shared::world`]).
    world: Box<dyn std::any::Any + Send + Sync>,
    /// The root actor.
    root_pid: std::sync::OnceLock<Pid>,
    pub(crate) stacks: StackPool,
    /// Length (guard included) of the pool's stacks: a stack of another length was mapped
    /// for one actor and is unmapped when it ends.
    pub(crate) pooled_stack_len: usize,
    /// Live actors, the shutdown flag, and whether the runtime has finished.
    pub(crate) lifecycle: Lifecycle,
    /// The reactor, made by the first socket that has to wait (`Shared::reactor`).
    reactor: std::sync::OnceLock<Arc<crate::io::Reactor>>,
    reactor_init: Mutex<()>,
    /// Threads for `spawn_blocking` (see `blocking`).
    pub(crate) blocking: blocking::BlockingPool,
    /// The link of this runtime's handles (`Handle::current` clones it).
    pub(crate) cell: Arc<RuntimeCell>,
}

impl Shared {
    fn new(config: Config, hooks: &'static Hooks, cell: Arc<RuntimeCell>) -> Shared {
        Shared {
            hooks,
            world: (hooks.new_world)(config.max_actors),
            slab: Slab::new(config.max_actors, config.threads),
            run_queue: RunQueue::new(config.max_actors),
            locals: (0..config.threads).map(|_| crate::local_queue::LocalQueue::new()).collect(),
            idle: Idle::new(config.threads),
            parkers: (0..config.threads).map(|_| park::Parker::default()).collect(),
            unparks: (0..config.threads).map(|_| AtomicUsize::new(0)).collect(),
            thread_stats: (0..config.threads).map(|_| CachePadded(stats::ThreadStats::default())).collect(),
            #[cfg(feature = "smarm-trace")]
            trace_rings: (0..config.threads)
                .map(|_| Arc::new(crate::trace_ring::TraceRing::new(config.trace_records)))
                .collect(),
            inboxes: (0..config.threads).map(|_| CachePadded(Inbox::default())).collect(),
            timers: Timers::new(),
            graveyard: Default::default(),
            root_pid: std::sync::OnceLock::new(),
            stacks: StackPool::new(config.stack_size, config.warm_stacks),
            pooled_stack_len: crate::stack::Stack::mapped_len(config.stack_size),
            lifecycle: Lifecycle::new(),
            reactor: std::sync::OnceLock::new(),
            reactor_init: Mutex::new(()),
            blocking: blocking::BlockingPool::new(config.max_blocking_threads, blocking::KEEP_ALIVE)
                .with_threads(config.threads_setup.clone()),
            cell,
            config,
        }
    }

    /// The runtime's reactor, made on first use (an epoll fd and an eventfd).
    pub(crate) fn reactor(&self) -> std::io::Result<&Arc<crate::io::Reactor>> {
        if let Some(r) = self.reactor.get() {
            return Ok(r);
        }
        let _init = self.reactor_init.lock();
        if let Some(r) = self.reactor.get() {
            return Ok(r);
        }
        let r = Arc::new(crate::io::Reactor::new()?);
        Ok(self.reactor.get_or_init(|| r))
    }

    /// The reactor if one has been made (the scheduler's polls look here).
    #[inline]
    pub(crate) fn reactor_if_made(&self) -> Option<&Arc<crate::io::Reactor>> {
        self.reactor.get()
    }

    /// The per-runtime state of the layers above, as the type `hooks.new_world` made.
    ///
    /// # Panics
    /// If `W` is not that type (a wrong hook table; never happens with `process::HOOKS`).
    #[inline]
    pub(crate) fn world<W: std::any::Any>(&self) -> &W {
        self.world.downcast_ref::<W>().expect("smarm: the runtime's world is not of the expected type")
    }

    /// The root actor's pid (set before any scheduler thread starts).
    pub(crate) fn root_pid(&self) -> Option<Pid> {
        self.root_pid.get().copied()
    }

    pub(crate) fn register_thread(&self, k: usize) {
        self.parkers[k].register();
    }

    pub(crate) fn unpark(&self, k: usize) {
        // Relaxed: a statistic.
        self.unparks[k].fetch_add(1, Ordering::Relaxed);
        // Thread k may idle in the reactor rather than on its token (`PollFlag`: the caller
        // claimed k's bit, which makes the flag readable here).
        if self.parkers[k].in_poll.get() {
            if let Some(r) = self.reactor.get() {
                r.wake();
                return;
            }
        }
        self.parkers[k].unpark();
    }

    /// Spawns an actor running `f`.
    #[track_caller]
    pub(crate) fn spawn<F, T>(&self, f: F, is_root: bool) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_with(is_root, |_, _| f)
    }

    /// Spawns an actor whose closure is made by `make` once the pid is known, before the
    /// actor is published (so process state — mailbox, link, monitor — can be set up before
    /// it can run).
    #[track_caller]
    pub(crate) fn spawn_with<F, T>(
        &self,
        is_root: bool,
        make: impl FnOnce(&Shared, Pid) -> F,
    ) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_with_binding(is_root, false, make)
    }

    /// [`Shared::spawn_with`]; a `thread_bound` actor runs only on the thread of its first
    /// run (`spawn_pinned`).
    #[track_caller]
    pub(crate) fn spawn_with_binding<F, T>(
        &self,
        is_root: bool,
        thread_bound: bool,
        make: impl FnOnce(&Shared, Pid) -> F,
    ) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        self.spawn_custom(is_root, SpawnSettings { thread_bound, stack_size: None }, make, |_, _| Ok(()))
    }

    /// The one spawn path. `settings` are constants on every path but `SpawnOptions`, so
    /// what they select folds away where they are the defaults. `make` builds the closure
    /// before the actor is published; `after_publish` runs once it is published (live to
    /// lookups, e.g. under a registered name) but before it is queued, so it cannot run yet:
    /// if that fails, the actor is stopped before it starts (its closure is dropped, it ends
    /// with `Shutdown`; whatever `after_publish` set up before failing must not notify
    /// anyone) and the error is returned.
    #[inline(always)]
    #[track_caller]
    pub(crate) fn spawn_custom<F, T>(
        &self,
        is_root: bool,
        settings: SpawnSettings,
        make: impl FnOnce(&Shared, Pid) -> F,
        after_publish: impl FnOnce(&Shared, Pid) -> Result<(), SpawnError>,
    ) -> Result<JoinHandle<T>, SpawnError>
    where
        F: FnOnce() -> T + Send + 'static,
        T: Send + 'static,
    {
        // An early refusal is only an optimisation; step 3 of the shutdown protocol (below)
        // is what makes the race safe.
        if self.lifecycle.is_shutting_down() {
            return Err(SpawnError::ShuttingDown);
        }
        let (index, gen, fresh) = self.slab.alloc_marked().ok_or(SpawnError::Full { max_actors: self.slab.len() })?;
        // The stack is bound at the actor's first run (the pool's most recently used one,
        // still in cache); here we only reserve one, so a failing mmap is a spawn error. A
        // stack of another size is mapped here and bound at the first run (see
        // `ActorCell::sp`).
        let (own_base, own_len) = match settings.stack_size {
            None => {
                let reserved = match self.local_worker() {
                    Some(w) => self.stacks.reserve_local(&w.stacks),
                    None => self.stacks.reserve(),
                };
                if let Err(e) = reserved {
                    self.slab.unalloc(index);
                    return Err(SpawnError::Stack(e));
                }
                (0, 0)
            }
            Some(bytes) => match crate::stack::Stack::new(bytes) {
                Ok(stack) => stack.into_raw(),
                Err(e) => {
                    self.slab.unalloc(index);
                    return Err(SpawnError::Stack(e));
                }
            },
        };
        let pid = self.slab.pid(index, gen);
        let (task, join) = actor::new_task(make(self, pid));
        let slot = self.slab.slot(index);
        // SAFETY: the slot was just popped from the free list, so it is FREE and ours alone
        // until `publish_queued`.
        unsafe {
            let cell = slot.cell.get();
            if !fresh {
                // What a previous occupant may have left (nothing, normally) is dropped here.
                // A fresh slot's all-zero cell holds nothing to drop, and is not read: see
                // `Slab::alloc_marked` (the first access to a fresh page must be a write).
                core::ptr::drop_in_place(cell);
            }
            cell.write(ActorCell {
                sp: own_len,
                sched_sp: 0,
                stack_base: own_base,
                stack_len: 0,
                task: Some(task),
                intent: actor::Intent::Running,
                is_root,
                thread_bound: settings.thread_bound,
                no_preempt: 0,
                assigned_thread: usize::MAX,
                unwinding: false,
                stop_raised: false,
                defer_stops: false,
                exit_override: None,
                locals: locals::ActorLocals::NONE,
                fp: context::FP_DEFAULT,
                #[cfg(feature = "tracing")]
                spans: Default::default(),
            });
        }
        // Relaxed: published by the Release in `publish_queued`.
        slot.cancel.reset();
        slot.pinned.store(UNPINNED, Ordering::Relaxed);
        self.note_spawn(slot, core::panic::Location::caller(), std::any::type_name::<F>);
        self.lifecycle.spawned();
        self.slab.publish_queued(index, gen);
        let refused = after_publish(self, pid).err();
        if refused.is_some() {
            // Not queued yet, so it has not run: it drops its closure at its first run.
            slot.cancel.raise(Cancel::Shutdown);
        }
        #[cfg(feature = "tracing")]
        spans::spawn_event(pid, core::panic::Location::caller());
        #[cfg(feature = "smarm-trace")]
        trace_spawn(self, pid);
        self.push_spawned(slot, index);
        self.wake_one(); // includes the SeqCst fence of shutdown step 3
                         // A kill that reached the child since it was published stays a kill.
        if self.lifecycle.is_shutting_down() && slot.cancel.raise(Cancel::Shutdown).is_some() {
            self.wake(pid);
        }
        let handle = JoinHandle::new(join, pid);
        match refused {
            None => Ok(handle),
            Some(e) => Err(e), // the handle is dropped: the stopped actor is detached
        }
    }

    /// Fills a new actor's introspection record (`Probe`) before its publication: where it
    /// was spawned, its closure's type, no resumes yet. The rest needs no reset per
    /// occupancy: the parent is stored by `push_spawned` (which looks up the spawning
    /// thread's worker anyway), the park word is read only while the actor is parked (it
    /// parks after storing it), the stack only once it has been resumed (its first run
    /// stores it), and the CPU time is reset when the previous occupant retires.
    #[inline(always)]
    fn note_spawn(&self, slot: &Slot, site: &'static core::panic::Location<'static>, type_name: fn() -> &'static str) {
        let p = &slot.probe;
        // Relaxed (all): published with the slot by the Release in `publish_queued`, and
        // read by `info` only as reports (see `Probe`).
        p.spawned_at.store(site as *const _ as u64, Ordering::Relaxed);
        p.type_name.store(type_name as usize as u64, Ordering::Relaxed);
        slot.resumes.store(0, Ordering::Relaxed);
    }

    /// Runs `spawn` (a spawn on this runtime) from a thread that is not one of its live
    /// actors (a [`Handle`](crate::Handle) on a plain thread, scheduler code): the caller
    /// counts as a live actor meanwhile, as lifecycle step 1 requires of a spawner, so the
    /// runtime cannot finish under the spawn and strand its actor. If the caller's count
    /// was the last one after shutdown began, the caller finishes the runtime.
    pub(crate) fn spawn_outside<R>(self: &Arc<Self>, spawn: impl FnOnce(&Shared) -> R) -> R {
        self.lifecycle.spawned();
        let r = spawn(self);
        self.retired(false);
        r
    }

    /// Queues a newly spawned actor (`index`, in `slot`): on the spawning thread's local
    /// queue when the spawner runs on a scheduler thread of this runtime (FIFO with that
    /// thread's other work, so a spawner that is preempted queues behind its children; idle
    /// threads steal), else on the shared queue. The caller then wakes a sleeper.
    ///
    /// Also records the new actor's parent: the running actor of this thread, if the spawn
    /// is made by one of this runtime's actors. The parent is stored after the publication
    /// but before the child can run (it is not queued yet); a report read meanwhile shows
    /// none.
    fn push_spawned(&self, slot: &Slot, index: u32) {
        if let Some(w) = self.local_worker() {
            let i = w.current.get();
            // Relaxed: the running actor's generation cannot change under it.
            let parent = if i == worker::NONE {
                0
            } else {
                // SAFETY: `i` is the running actor of one of this runtime's workers
                // (`local_worker` checked whose), an index its slab handed out.
                let running = unsafe { self.slab.slot_unchecked(i) };
                (u64::from(i) << 32) | (running.state.load(Ordering::Relaxed) >> 32)
            };
            // Relaxed: a report (see `Probe`).
            slot.probe.parent.store(parent, Ordering::Relaxed);
            w.push_local(index);
            return;
        }
        // Relaxed: a report (see `Probe`).
        slot.probe.parent.store(0, Ordering::Relaxed);
        self.run_queue.push_from(index, None);
    }

    /// After publishing stealable work: fence, then claim and unpark one sleeper.
    pub(crate) fn wake_one(&self) {
        if let Some(k) = self.idle.wake_any() {
            self.unpark(k);
        }
    }

    /// Wakes `pid` if it is parked (and sets NOTIFIED otherwise). Safe from any thread.
    pub(crate) fn wake(&self, pid: Pid) {
        if let Some(slot) = self.slab.slot_of(pid) {
            if slot.wake(pid.generation()) == Wake::Enqueue {
                self.enqueue_woken(slot, pid.index());
            }
        }
    }

    /// Puts an actor that a wake moved to QUEUED where it will run:
    /// - pinned to thread k (thread-bound, or unwinding): k's inbox, and wake k specifically;
    /// - woken on a scheduler thread of this runtime (by its running actor, or by the
    ///   scheduler retiring a joined actor or firing a timer): that thread's wake slot (it
    ///   runs next there; the displaced occupant goes to the shared queue);
    /// - otherwise the shared queue, and wake a sleeper.
    fn enqueue_woken(&self, slot: &Slot, index: u32) {
        // Relaxed: ordered after the Acquire half of the wake RMW, which read the state the
        // owner published (Release) after storing `pinned`.
        let pinned = slot.pinned.load(Ordering::Relaxed);
        if pinned != UNPINNED {
            self.inboxes[pinned as usize].push(index);
            if self.idle.wake_specific(pinned as usize) {
                self.unpark(pinned as usize);
            }
            return;
        }
        if let Some(w) = self.local_worker() {
            stats::LocalCounts::bump(&w.counts.wakes);
            // Held back: see `Worker::trace_wake`. The waker is the actor running on this
            // thread (the exporter tells it).
            #[cfg(feature = "smarm-trace")]
            w.trace_wake(worker::packed_pid(slot, index));
            if let Some(displaced) = w.put_in_wake_slot(index) {
                // Not woken: this thread is awake and reaches its local queue itself
                // (after `lifo_run_limit` slot runs at the latest); a sleeper is nudged
                // when a queue is found holding more than one job.
                w.push_local(displaced);
            }
            return;
        }
        self.run_queue.push_from(index, None);
        self.wake_one();
    }

    /// This thread's worker, if the thread is one of this runtime's scheduler threads (in
    /// scheduler code or running an actor). Callers use it before any switch and drop it:
    /// after a switch the actor may run on another thread, whose worker this is not.
    #[inline(always)]
    pub(crate) fn local_worker(&self) -> Option<&worker::Worker> {
        let w = current_worker();
        if w.is_null() {
            return None;
        }
        // SAFETY: a non-null worker pointer is this thread's live worker, valid while the
        // thread runs scheduler or actor code; the callers do not hold it across a switch.
        let w = unsafe { &*w };
        core::ptr::eq(w.shared_ptr(), self).then_some(w)
    }

    /// A retired actor's bookkeeping; called by its scheduler thread once its stack is free.
    pub(crate) fn retired(self: &Arc<Self>, was_root: bool) {
        let last = self.lifecycle.retire();
        if was_root {
            self.begin_shutdown();
        } else if last {
            self.finish();
        }
    }

    /// Shutdown steps 2 and 5 (see the module doc).
    fn begin_shutdown(self: &Arc<Self>) {
        if self.lifecycle.begin_shutdown() {
            self.finish();
            return;
        }
        // Shutdown step 3's Dekker pair: the flag (set above) before the sweep's reads.
        fence(Ordering::SeqCst);
        self.stop_all(Cancel::Shutdown);
        // Whoever has not ended within the shutdown timeout is killed. The timer holds a Weak:
        // it must not keep the runtime alive, and it dies with the runtime's timer wheel.
        let rt = Arc::downgrade(self);
        let deadline = crate::wheel::deadline_after(std::time::Instant::now(), self.config.shutdown_timeout);
        let kill = crate::wheel::Action::Run(Box::new(move || {
            if let Some(sh) = rt.upgrade() {
                sh.stop_all(Cancel::Kill);
            }
        }));
        let (_, earliest) = self.timers.insert_action(deadline, kill);
        if earliest {
            self.wake_one();
        }
    }

    /// Asks every live actor to stop with `code` (never downgrading a pending kill).
    fn stop_all(&self, code: Cancel) {
        for index in 0..self.slab.high_water() as u32 {
            if let Some(pid) = self.slab.live_pid(index) {
                // Raised, never lowered: a racing kill, or a pending kill or exit request,
                // stays as it is.
                if self.slab.slot(index).cancel.raise(code).is_some() {
                    self.wake(pid);
                }
            }
        }
    }

    /// Fires the timers due at `now` (lazy timeouts under the wheel's lock, then the due
    /// closures). Returns how many fired.
    pub(crate) fn fire_due(&self, now: std::time::Instant) -> usize {
        let mut run = Vec::new();
        let fired = self.timers.fire_due(now, |t| lazy::fire(self, t), &mut run);
        // Closures (channel sends) take primitive locks, which rank below the timer lock. They
        // run on this scheduler thread's own stack and run no user code (a message they
        // cannot deliver is dropped through a `DropOnActor`).
        for f in run {
            if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
                if let Some(InjectedFault(message)) = payload.downcast_ref::<InjectedFault>() {
                    panic!("{message}");
                }
                // Should one panic all the same, its payload may be user code: to an actor.
                drop(user_drop::DropOnActor::new(payload));
            }
        }
        fired
    }

    fn finish(&self) {
        if !self.lifecycle.finish() {
            return;
        }
        self.idle.claim_all();
        for k in 0..self.parkers.len() {
            self.unpark(k);
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // Normally every actor has retired. If `run` bailed out early (no thread could
        // start), release what the unrun actors own.
        for index in 0..self.slab.high_water() as u32 {
            if self.slab.live_pid(index).is_some() {
                // SAFETY: no thread runs any more; we are the only owner of every cell.
                unsafe {
                    let cell = &mut *self.slab.slot(index).cell.get();
                    if let Some(t) = cell.task.take() {
                        actor::release(t);
                    }
                    if cell.stack_len != 0 {
                        drop(crate::stack::Stack::from_raw(cell.stack_base, cell.stack_len));
                        cell.stack_len = 0;
                    } else if cell.stack_base != 0 {
                        // Never ran, with a stack mapped for it alone (see `ActorCell::sp`).
                        drop(crate::stack::Stack::from_raw(cell.stack_base, cell.sp));
                        cell.stack_base = 0;
                    }
                }
            }
        }
        // Timers still pending hold user values (messages): each is dropped on its own, so
        // one panicking `Drop` neither skips the rest nor, panicking again while the first
        // unwinds, aborts.
        for action in self.timers.take_all() {
            user_drop::drop_caught(action);
        }
    }
}

/// The panic payload of a fault injected by [`Diagnostics::inject_scheduler_panic`]: the
/// timer closure that raises it is not contained like others (`Shared::fire_due`).
struct InjectedFault(&'static str);

/// Who is blocked on something: an actor of some runtime, or a plain OS thread.
///
/// # Safety contract for `Actor`
/// `shared` is a raw pointer (taking an `Arc` per park would put a shared-counter RMW pair
/// on every blocking call). Whoever stores a `Waiter` must guarantee the runtime is alive
/// when it calls [`Waiter::wake`]: every registry in smarm wakes under the lock that the
/// blocked actor takes to deregister (on return or while unwinding) before it can end, and
/// a runtime outlives its actors.
#[derive(Clone)]
pub(crate) enum Waiter {
    Actor { shared: *const Shared, pid: Pid },
    Thread(Thread),
}

// SAFETY: the raw pointer is only dereferenced under the contract above; Shared is Sync.
unsafe impl Send for Waiter {}

impl Waiter {
    /// The calling actor, or the calling thread.
    #[inline]
    pub(crate) fn current() -> Waiter {
        match worker::current_actor_pid() {
            Some((shared, pid)) => Waiter::Actor { shared, pid },
            None => Waiter::Thread(std::thread::current()),
        }
    }

    /// True if both name the same actor or thread.
    pub(crate) fn same_as(&self, other: &Waiter) -> bool {
        match (self, other) {
            (Waiter::Actor { shared: a, pid: p }, Waiter::Actor { shared: b, pid: q }) => a == b && p == q,
            (Waiter::Thread(a), Waiter::Thread(b)) => a.id() == b.id(),
            _ => false,
        }
    }

    pub(crate) fn wake(&self) {
        match self {
            // SAFETY: see the type's contract.
            Waiter::Actor { shared, pid } => unsafe { (**shared).wake(*pid) },
            Waiter::Thread(t) => t.unpark(),
        }
    }
}

/// Read-only view of a runtime's scheduler state, for tests and diagnostics.
#[doc(hidden)]
#[derive(Clone)]
pub struct Diagnostics {
    shared: Arc<Shared>,
}

impl Diagnostics {
    /// The runtime of the calling actor.
    pub fn current() -> Option<Diagnostics> {
        let w = current_worker();
        // SAFETY: this thread's live worker.
        (!w.is_null()).then(|| Diagnostics { shared: unsafe { (*w).shared_arc() } })
    }
    /// Scheduler threads announced as sleeping.
    pub fn sleepers(&self) -> usize {
        self.shared.idle.sleepers()
    }
    /// Per scheduler thread: how many times a waker claimed and unparked it.
    pub fn unparks(&self) -> Vec<usize> {
        // Relaxed: a statistic.
        self.shared.unparks.iter().map(|u| u.load(Ordering::Relaxed)).collect()
    }
    /// Actors waiting in the run queues (the shared one and every thread's local one).
    pub fn run_queue_len(&self) -> usize {
        self.shared.run_queue.len() + self.shared.locals.iter().map(|q| q.len()).sum::<usize>()
    }
    /// Deadlines on the runtime's timer wheel (armed timeouts, sleeps, `send_after`).
    /// Timed waits that end promptly never reach it (lazy timeouts, see `lazy`).
    pub fn pending_timers(&self) -> usize {
        self.shared.timers.pending()
    }
    /// Actors and threads parked waiting for socket readiness.
    pub fn io_waiters(&self) -> usize {
        self.shared.reactor_if_made().map_or(0, |r| r.waiters())
    }
    /// Threads of the blocking pool alive now.
    pub fn blocking_threads(&self) -> usize {
        self.shared.blocking.threads()
    }
    /// Reactor polls that found readiness events (0 if no socket ever had to wait).
    pub fn io_polls_with_events(&self) -> u64 {
        self.shared.reactor_if_made().map_or(0, |r| r.polls_with_events())
    }
    /// Number of scheduler threads.
    pub fn threads(&self) -> usize {
        self.shared.config.threads
    }
    /// True once shutdown has begun (the root actor has retired; shutdown step 2).
    pub fn shutting_down(&self) -> bool {
        self.shared.lifecycle.is_shutting_down()
    }
    /// Makes the next scheduler thread that polls the timers panic with `message`, in
    /// scheduler code (outside any actor): for tests of what a panic there does (the process
    /// aborts, see `worker`).
    pub fn inject_scheduler_panic(&self, message: &'static str) {
        let fault = crate::wheel::Action::Run(Box::new(move || std::panic::panic_any(InjectedFault(message))));
        let (_, earliest) = self.shared.timers.insert_action(std::time::Instant::now(), fault);
        if earliest {
            self.shared.wake_one();
        }
    }
}
