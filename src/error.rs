//! Typed errors of the public API.

use std::fmt;
use std::io;

use crate::exit::DownReason;
use crate::slot_state::Pid;

/// A [`Builder`](crate::Builder) setting that cannot work.
///
/// ```
/// let e = smarm::Runtime::builder().threads(0).build().unwrap_err();
/// assert!(matches!(e, smarm::BuildError::ZeroThreads));
/// assert!(e.to_string().contains("thread"));
/// ```
///
/// `#[non_exhaustive]`: settings may be added, so a match needs a wildcard arm.
///
/// ```compile_fail,E0004
/// fn describe(e: smarm::BuildError) -> &'static str {
///     use smarm::BuildError::*;
///     match e {
///         ZeroThreads | TooManyThreads { .. } | ZeroMaxActors | TooManyActors { .. } => "counts",
///         StackTooSmall { .. } | StackTooLarge { .. } => "stack",
///         ZeroLifoRunLimit | ZeroTimeslice | ZeroBlockingThreads => "scheduling",
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum BuildError {
    /// `threads(0)`.
    ZeroThreads,
    /// `threads` above the supported maximum ([`MAX_THREADS`](crate::MAX_THREADS)).
    TooManyThreads {
        /// The value passed to the builder.
        requested: usize,
        /// The largest accepted value.
        maximum: usize,
    },
    /// `max_actors(0)`.
    ZeroMaxActors,
    /// `max_actors` above the supported maximum.
    TooManyActors {
        /// The value passed to the builder.
        requested: usize,
        /// The largest accepted value.
        maximum: usize,
    },
    /// `stack_size` below what an actor needs to start, panic and unwind.
    StackTooSmall {
        /// The value passed to the builder.
        requested: usize,
        /// The smallest accepted value.
        minimum: usize,
    },
    /// `stack_size` above the supported maximum ([`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE)).
    StackTooLarge {
        /// The value passed to the builder.
        requested: usize,
        /// The largest accepted value.
        maximum: usize,
    },
    /// `lifo_run_limit(0)`: an actor placed in the wake slot would never run.
    ZeroLifoRunLimit,
    /// `timeslice_cycles(0)`.
    ZeroTimeslice,
    /// `max_blocking_threads(0)`: `spawn_blocking` could never run anything.
    ZeroBlockingThreads,
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::ZeroThreads => f.write_str("smarm: a runtime needs at least one scheduler thread"),
            BuildError::TooManyThreads { requested, maximum } => {
                write!(f, "smarm: threads {requested} exceeds the supported maximum {maximum}")
            }
            BuildError::ZeroMaxActors => f.write_str("smarm: max_actors must be at least 1"),
            BuildError::TooManyActors { requested, maximum } => {
                write!(f, "smarm: max_actors {requested} exceeds the supported maximum {maximum}")
            }
            BuildError::StackTooSmall { requested, minimum } => {
                write!(f, "smarm: stack_size {requested} bytes is below the minimum of {minimum} bytes")
            }
            BuildError::StackTooLarge { requested, maximum } => {
                write!(f, "smarm: stack_size {requested} bytes exceeds the maximum of {maximum} bytes")
            }
            BuildError::ZeroLifoRunLimit => f.write_str("smarm: lifo_run_limit must be at least 1"),
            BuildError::ZeroTimeslice => f.write_str("smarm: timeslice_cycles must be at least 1"),
            BuildError::ZeroBlockingThreads => f.write_str("smarm: max_blocking_threads must be at least 1"),
        }
    }
}

impl std::error::Error for BuildError {}

/// Why [`try_spawn`](crate::try_spawn) (or any other `try_` spawn) could not create an
/// actor.
///
/// ```
/// // Outside a runtime there is nothing to spawn on.
/// let e = smarm::try_spawn(|| ()).unwrap_err();
/// assert!(matches!(e, smarm::SpawnError::NoRuntime));
/// ```
///
/// `#[non_exhaustive]`: a match needs a wildcard arm.
///
/// ```compile_fail,E0004
/// fn retry(e: &smarm::SpawnError) -> bool {
///     use smarm::SpawnError::*;
///     match e {
///         Full { .. } | Stack(_) => true,
///         ShuttingDown | NoRuntime => false,
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum SpawnError {
    /// All `max_actors` slots are in use.
    Full {
        /// The runtime's slab size.
        max_actors: usize,
    },
    /// The runtime is shutting down and accepts no new actors.
    ShuttingDown,
    /// Called outside a smarm runtime (not from an actor).
    NoRuntime,
    /// Mapping the actor's stack failed (out of memory or out of memory maps; the message
    /// names `vm.max_map_count`).
    Stack(io::Error),
    /// [`SpawnOptions::stack_size`](crate::SpawnOptions::stack_size) outside
    /// [`MIN_STACK_SIZE`](crate::MIN_STACK_SIZE)..=[`MAX_STACK_SIZE`](crate::MAX_STACK_SIZE).
    InvalidStackSize {
        /// The value passed to the options.
        requested: usize,
        /// The smallest accepted value.
        minimum: usize,
        /// The largest accepted value.
        maximum: usize,
    },
    /// [`SpawnOptions::name`](crate::SpawnOptions::name) names a live actor already (OTP's
    /// `{error, {already_started, Pid}}`); nothing ran.
    NameTaken {
        /// The actor registered under the name.
        holder: Pid,
    },
    /// A [`Handle`](crate::Handle)'s runtime is not running: [`Runtime::run`](crate::Runtime::run)
    /// has not started it yet, or it has ended.
    NotRunning,
}

impl fmt::Display for SpawnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpawnError::Full { max_actors } => {
                write!(f, "smarm: all {max_actors} actor slots are in use (raise Builder::max_actors)")
            }
            SpawnError::ShuttingDown => f.write_str("smarm: the runtime is shutting down"),
            SpawnError::NoRuntime => f.write_str("smarm: spawn called outside a smarm runtime (not from an actor)"),
            SpawnError::Stack(e) => write!(f, "{e}"),
            SpawnError::InvalidStackSize { requested, minimum, maximum } => {
                write!(f, "smarm: stack_size {requested} bytes is outside the accepted {minimum}..={maximum} bytes")
            }
            SpawnError::NameTaken { holder } => write!(f, "smarm: the name is already registered by {holder}"),
            SpawnError::NotRunning => f.write_str("smarm: the handle's runtime is not running (not started, or ended)"),
        }
    }
}

impl std::error::Error for SpawnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SpawnError::Stack(e) => Some(e),
            _ => None,
        }
    }
}

/// Why [`Runtime::run`](crate::Runtime::run) did not return the root's value.
///
/// ```
/// let rt = smarm::Runtime::builder().quiet_panics(true).build().unwrap();
/// let e = rt.run(|| -> u32 { panic!("boom") }).unwrap_err();
/// assert!(matches!(e, smarm::RunError::Root(smarm::DownReason::Panic(ref m)) if m == "boom"));
/// ```
///
/// `#[non_exhaustive]`: a match needs a wildcard arm.
///
/// ```compile_fail,E0004
/// fn code(e: smarm::RunError) -> i32 {
///     match e {
///         smarm::RunError::Root(_) => 1,
///         smarm::RunError::Spawn(_) => 2,
///         smarm::RunError::Nested => 3,
///     }
/// }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum RunError {
    /// The root actor did not return a value: it panicked or was shut down.
    Root(DownReason),
    /// The root actor could not be spawned.
    Spawn(SpawnError),
    /// `run` was called from inside an actor; nest runtimes on a plain thread instead.
    Nested,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Root(r) => write!(f, "smarm: the root actor ended without a value ({r})"),
            RunError::Spawn(e) => write!(f, "smarm: could not spawn the root actor: {e}"),
            RunError::Nested => f.write_str("smarm: Runtime::run called from inside an actor"),
        }
    }
}

impl std::error::Error for RunError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RunError::Spawn(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a lookup by name ([`whereis_addr`](crate::whereis_addr),
/// [`send_named`](crate::send_named)) or by pid ([`Addr::from_pid`](crate::Addr::from_pid))
/// gave no [`Addr`](crate::Addr).
///
/// ```
/// smarm::run(|| {
///     assert_eq!(smarm::whereis_addr::<u32>("nobody"), Err(smarm::LookupError::NotFound));
///     let plain = smarm::spawn(|| ());
///     let pid = plain.pid();
///     plain.join().unwrap();
///     assert_eq!(smarm::Addr::<u32>::from_pid(pid), Err(smarm::LookupError::NoProc));
/// });
/// // Off a runtime there is nothing to look in.
/// assert_eq!(smarm::whereis_addr::<u32>("nobody"), Err(smarm::LookupError::NoRuntime));
/// ```
///
/// `#[non_exhaustive]` (variants are added, e.g. for the cluster): a `match` needs a `_` arm.
///
/// ```compile_fail,E0004
/// fn f(e: smarm::LookupError) {
///     use smarm::LookupError::*;
///     match e { NotFound | NoProc | NoMailbox | WrongType { .. } | NoRuntime => {} }
/// }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LookupError {
    /// No live actor is registered under the name.
    NotFound,
    /// The pid names no live actor of this runtime: it ended, or the pid is stale or of
    /// another runtime (OTP's `noproc`).
    NoProc,
    /// The actor is alive but has no typed mailbox (a plain [`spawn`](crate::spawn) actor):
    /// there is nothing to send to.
    NoMailbox,
    /// The actor's mailbox carries another message type than the one asked for.
    WrongType {
        /// The message type asked for (`std::any::type_name`).
        expected: &'static str,
    },
    /// Called outside a smarm runtime (a plain thread): there is no registry or actor
    /// table to look in.
    NoRuntime,
}

impl fmt::Display for LookupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LookupError::NotFound => f.write_str("smarm: no live actor is registered under that name"),
            LookupError::NoProc => f.write_str("smarm: no live actor has that pid"),
            LookupError::NoMailbox => f.write_str("smarm: the actor has no typed mailbox (a plain spawn actor)"),
            LookupError::WrongType { expected } => {
                write!(f, "smarm: the actor's mailbox does not take messages of type {expected}")
            }
            LookupError::NoRuntime => f.write_str("smarm: name or pid lookup outside a smarm runtime"),
        }
    }
}

impl std::error::Error for LookupError {}
