//! Supervisors: start children from specs, restart them by strategy when they end, within a
//! restart intensity, and shut them down in order (OTP's `supervisor`).
//!
//! ```
//! use smarm::supervisor::{self, ChildSpec, ChildState, Strategy, SupFlags};
//!
//! smarm::run(|| {
//!     // One worker, restarted whenever it ends (a `Permanent` child).
//!     let worker = ChildSpec::worker("ticker", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
//!     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne).named("app"), vec![worker]).unwrap();
//!     let first = sup.which_children().unwrap()[0].pid().unwrap();
//!
//!     smarm::kill(first); // the supervisor restarts it, with a new pid
//!     let again = loop {
//!         match sup.which_children().unwrap()[0].state {
//!             ChildState::Running(pid) if pid != first => break pid,
//!             _ => smarm::yield_now(),
//!         }
//!     };
//!     assert_ne!(again, first);
//!     // Named supervisors are found by name.
//!     assert_eq!(supervisor::whereis("app").unwrap().pid(), sup.pid());
//!     sup.stop().unwrap();
//! });
//! ```
//!
//! # Children and start functions
//!
//! A supervisor is an actor that traps exits and is linked to each child. Children are
//! started in spec order by calling each spec's start function *in the supervisor*, which
//! should return the pid of a child linked to the caller (`spawn_link`,
//! `gen_server::start_link`, or a nested [`start_link`]), as OTP requires of start functions.
//! A start function that returns a child it did not link (`spawn`, `gen_server::start`) is
//! not refused: the supervisor links the child itself, so that its end is seen and the child
//! is restarted and stopped like any other (OTP does not check, and such a child would go
//! unsupervised). If that child has already ended, the link fails with `NoProc`, which the
//! supervisor takes as the child's exit with reason `NoProc` (a trapping process linking a
//! dead pid in OTP gets `{'EXIT', Pid, noproc}` too): an abnormal exit, restarted by the
//! child's restart type.
//!
//! A start function returns [`Started`]: a pid (`Ok(pid)` converts), or [`Started::Ignore`]
//! (OTP's `ignore`): nothing is started. As in OTP, a static child's spec is then kept with no
//! pid ([`ChildState::Undefined`]; a `Temporary` one is forgotten), and a dynamic child of a
//! `SimpleOneForOne` supervisor is not kept at all; `start_child` answers `Ok(None)`.
//!
//! A start function that panics fails like one that returns `Err`, with the panic as the
//! reason (smarm's own stop unwinds, kill and exit signals, are not caught: they go on).
//!
//! # Restarts
//!
//! When a child ends with reason R:
//! - restart decision: `Permanent` always; `Transient` unless R is `Normal`, `Shutdown` or
//!   `ShutdownWith(_)` ([`DownReason::is_normal_or_shutdown`], OTP's `normal`, `shutdown`,
//!   `{shutdown, Term}`): a transient child stops quietly with
//!   `exit(current_pid(), DownReason::ShutdownWith(..))`; `Temporary` never (the child is
//!   forgotten). A static child not restarted keeps its spec ([`ChildState::Undefined`]);
//!   a dynamic one is forgotten;
//! - intensity: more than `intensity` restarts within `period` makes the supervisor shut
//!   all children down and exit with `Shutdown` (its own supervisor then decides). `period`
//!   must not be zero ([`SupStartError::ZeroPeriod`]);
//! - strategy: `OneForOne` restarts the child; `OneForAll` stops every other child (reverse
//!   start order) and restarts all in start order; `RestForOne` does that for the children
//!   started after it; `SimpleOneForOne` restarts that dynamic instance, with the arguments
//!   it was first started with. `Temporary` children stopped with the group are forgotten,
//!   not restarted.
//!
//! A restart whose start function fails (OTP's `try_again_restart`): the child is marked as
//! restarting ([`ChildState::Restarting`]; the children of its group not started yet stay
//! down) and the supervisor sends itself a message to try again, so the requests and exit
//! signals already queued are handled first. Each attempt is a restart: it counts toward the
//! intensity, which is what ends a start function that keeps failing. A dynamic child is
//! retried the same way.
//!
//! # Dynamic children
//!
//! [`start_simple`] starts a `SimpleOneForOne` supervisor over a [`DynamicSpec<A>`], whose
//! start function takes an argument of type `A`; the returned [`SimpleSupervisorRef<A>`]
//! starts instances with [`SimpleSupervisorRef::start_child`]`(args)`. A restart calls the
//! start function again with a clone of the same `args` (OTP appends the `start_child`
//! arguments to the template's, and restarts reuse them). The argument type is checked by
//! the compiler:
//!
//! ```compile_fail
//! use smarm::supervisor::{self, DynamicSpec, SupFlags, Strategy};
//! smarm::run(|| {
//!     let spec = DynamicSpec::worker("conn", |port: u16| Ok(smarm::spawn_link(move || { let _ = port; }).pid()));
//!     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
//!     sup.start_child("not a port"); // error: expected `u16`
//! });
//! ```
//!
//! The other strategies add children at run time with [`SupervisorRef::start_child`]`(spec)`,
//! and manage them by id with [`SupervisorRef::terminate_child`],
//! [`SupervisorRef::restart_child`] and [`SupervisorRef::delete_child`], as OTP does.
//!
//! # Names
//!
//! [`SupFlags::named`] registers the supervisor under a name *before* its children start,
//! so their start functions (and the children) can find it with [`whereis`]. A taken name
//! fails the start with [`SupStartError::AlreadyStarted`] (OTP's `{already_started, Pid}`).
//!
//! # Requests
//!
//! Every [`SupervisorRef`] method is a request to the supervisor actor and waits for its
//! answer (parking an actor, blocking a plain thread: requests work from either). Made by the supervisor itself (from a start function), it would wait forever;
//! it fails at once with [`SupervisorError::CallingSelf`] instead (OTP: `calling_self`). A
//! supervisor that has ended answers [`SupervisorError::NoProc`].
//!
//! # Shutdown
//!
//! Shutting a child down follows its [`Shutdown`] spec: `BrutalKill` kills it;
//! `Timeout(d)` sends an exit signal `Shutdown` and kills it if it has not ended within `d`;
//! `Infinity` waits for it. Children are stopped in reverse start order. As in OTP's
//! `shutdown/2`, the child is monitored for the wait (a child that unlinked itself sends no
//! exit signal, but its Down comes), then unlinked, and an exit signal it sent is dropped.
//!
//! The dynamic children of a `SimpleOneForOne` supervisor are stopped all at once, in time
//! linear in their number (`Sup::stop_dynamic`): as OTP's `monitor_child` did, each is
//! monitored and unlinked, and the exit signals they already sent are dropped in one pass
//! over the mailbox, *before* any is signalled; so their ends send the supervisor only
//! Downs, which it collects looking at each queued envelope once. (A supervisor killed
//! meanwhile leaves the children it had not stopped yet unlinked and running, as in OTP,
//! whose documentation asks for an `Infinity` shutdown for supervisors for this reason.)
//!
//! A supervisor started by a non-supervisor actor is a *root* supervisor: when the runtime's
//! root actor returns (or [`crate::shutdown`] is called), root supervisors are stopped in
//! reverse start order, each stopping its tree, before the remaining actors are shut down.
//!
//! # State
//!
//! The children live in a map ordered by a key taken from a counter when a child is added
//! (so key order is start order, and a restarted child keeps its key and place), with a
//! second map from each running child's pid to its key: the exit of one child, and each
//! request about one dynamic child, costs O(log n) in the number of children, not O(n).
//! `by_pid` holds exactly the children whose `pid` is `Some`.

use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::marker::PhantomData;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{oneshot, OneshotSender};
use crate::error::LookupError;
use crate::error::SpawnError;
use crate::mailbox::{Addr, Envelope, Mailbox, RecvMark};
use crate::process::{reason_from_payload, Cancelled, DownReason, Exit, MonitorRef, RegisterError};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;

/// When a child is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Always.
    Permanent,
    /// Only after an abnormal exit (not `Normal`, `Shutdown` or `ShutdownWith(_)`).
    Transient,
    /// Never.
    Temporary,
}

/// How a child is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shutdown {
    /// `kill` at once.
    BrutalKill,
    /// Exit signal `Shutdown`, then `kill` after the timeout.
    Timeout(Duration),
    /// Exit signal `Shutdown`, wait as long as it takes (the default for supervisors).
    Infinity,
}

/// What a child is (informational, and the default shutdown: `Infinity` for supervisors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildType {
    /// A worker.
    Worker,
    /// A nested supervisor.
    Supervisor,
}

/// Restart strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Restart only the child that ended.
    OneForOne,
    /// Restart every child.
    OneForAll,
    /// Restart the child and those started after it.
    RestForOne,
    /// One spec, many dynamic instances ([`start_simple`]).
    SimpleOneForOne,
}

/// What a start function started: OTP's `{ok, Pid}` or `ignore`.
///
/// `Ok(pid)` in a start function converts (`From<Pid>`), so most start functions never name
/// this type.
///
/// ```
/// use smarm::supervisor::Started;
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     assert_eq!(Started::from(me).pid(), Some(me));
///     assert_eq!(Started::Ignore.pid(), None);
/// });
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Started {
    /// The child runs, with this pid.
    Pid(Pid),
    /// Nothing was started (OTP's `ignore`): see the module doc.
    Ignore,
}

impl From<Pid> for Started {
    fn from(pid: Pid) -> Started {
        Started::Pid(pid)
    }
}

impl Started {
    /// The started child's pid, if one was started.
    ///
    /// ```
    /// use smarm::supervisor::Started;
    /// assert_eq!(Started::Ignore.pid(), None);
    /// ```
    pub fn pid(self) -> Option<Pid> {
        match self {
            Started::Pid(p) => Some(p),
            Started::Ignore => None,
        }
    }
}

/// The start function of a child: runs in the supervisor, returns a child linked to it (one
/// it did not link, the supervisor links: see the module doc), or [`Started::Ignore`].
pub type StartFn = Arc<dyn Fn() -> Result<Started, DownReason> + Send + Sync>;

/// The start function of a dynamic child: [`StartFn`] with the `start_child` argument.
pub type StartWithFn<A> = Arc<dyn Fn(A) -> Result<Started, DownReason> + Send + Sync>;

/// How to start and manage one child.
#[derive(Clone)]
pub struct ChildSpec {
    /// Name within the supervisor (unique among its children).
    pub id: String,
    /// Starts the child (linked to the caller; if not, the supervisor links it) and returns
    /// its pid, or [`Started::Ignore`].
    pub start: StartFn,
    /// When to restart.
    pub restart: Restart,
    /// How to stop.
    pub shutdown: Shutdown,
    /// Worker or supervisor.
    pub child_type: ChildType,
}

impl fmt::Debug for ChildSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChildSpec")
            .field("id", &self.id)
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown)
            .field("child_type", &self.child_type)
            .finish()
    }
}

fn erase<S: Into<Started>>(start: impl Fn() -> Result<S, DownReason> + Send + Sync + 'static) -> StartFn {
    Arc::new(move || start().map(Into::into))
}

impl ChildSpec {
    /// A permanent worker with a 5 s shutdown timeout. `start` returns `Ok(pid)` (or
    /// `Ok(Started::Ignore)`).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    ///     assert_eq!(sup.count_children().unwrap().workers, 1);
    /// });
    /// ```
    pub fn worker<S: Into<Started>>(
        id: impl Into<String>,
        start: impl Fn() -> Result<S, DownReason> + Send + Sync + 'static,
    ) -> Self {
        ChildSpec {
            id: id.into(),
            start: erase(start),
            restart: Restart::Permanent,
            shutdown: Shutdown::Timeout(Duration::from_secs(5)),
            child_type: ChildType::Worker,
        }
    }

    /// A permanent nested supervisor (shutdown `Infinity`).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, ChildType, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let inner = ChildSpec::supervisor("inner", || {
    ///         let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![])
    ///             .map_err(|e| smarm::DownReason::Custom(e.to_string()))?;
    ///         Ok(sup.pid())
    ///     });
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![inner]).unwrap();
    ///     assert_eq!(sup.which_children().unwrap()[0].child_type, ChildType::Supervisor);
    /// });
    /// ```
    pub fn supervisor<S: Into<Started>>(
        id: impl Into<String>,
        start: impl Fn() -> Result<S, DownReason> + Send + Sync + 'static,
    ) -> Self {
        ChildSpec {
            id: id.into(),
            start: erase(start),
            restart: Restart::Permanent,
            shutdown: Shutdown::Infinity,
            child_type: ChildType::Supervisor,
        }
    }

    /// Sets the restart type.
    ///
    /// ```
    /// use smarm::supervisor::{ChildSpec, Restart};
    /// let spec = ChildSpec::worker("w", || Ok(smarm::supervisor::Started::Ignore)).restart(Restart::Transient);
    /// assert_eq!(spec.restart, Restart::Transient);
    /// ```
    pub fn restart(mut self, r: Restart) -> Self {
        self.restart = r;
        self
    }

    /// Sets the shutdown spec.
    ///
    /// ```
    /// use smarm::supervisor::{ChildSpec, Shutdown};
    /// let spec = ChildSpec::worker("w", || Ok(smarm::supervisor::Started::Ignore)).shutdown(Shutdown::BrutalKill);
    /// assert_eq!(spec.shutdown, Shutdown::BrutalKill);
    /// ```
    pub fn shutdown(mut self, s: Shutdown) -> Self {
        self.shutdown = s;
        self
    }
}

/// The template of a `SimpleOneForOne` supervisor's dynamic children: a [`ChildSpec`] whose
/// start function takes the argument given to [`SimpleSupervisorRef::start_child`].
pub struct DynamicSpec<A> {
    /// The children's id (all instances share it; OTP reports `undefined`).
    pub id: String,
    /// Starts one instance from its arguments (a restart passes a clone of the same ones).
    pub start: StartWithFn<A>,
    /// When to restart an instance.
    pub restart: Restart,
    /// How to stop an instance.
    pub shutdown: Shutdown,
    /// Worker or supervisor.
    pub child_type: ChildType,
}

impl<A> Clone for DynamicSpec<A> {
    fn clone(&self) -> Self {
        DynamicSpec {
            id: self.id.clone(),
            start: self.start.clone(),
            restart: self.restart,
            shutdown: self.shutdown,
            child_type: self.child_type,
        }
    }
}

impl<A> fmt::Debug for DynamicSpec<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynamicSpec")
            .field("id", &self.id)
            .field("restart", &self.restart)
            .field("shutdown", &self.shutdown)
            .field("child_type", &self.child_type)
            .finish()
    }
}

impl<A: 'static> DynamicSpec<A> {
    /// A permanent worker template with a 5 s shutdown timeout.
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("echo", |word: String| {
    ///         Ok(smarm::spawn_link(move || { let _ = word; loop { smarm::recv_signal(); } }).pid())
    ///     });
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     assert!(sup.start_child("hi".to_string()).unwrap().is_some());
    /// });
    /// ```
    pub fn worker<S: Into<Started>>(
        id: impl Into<String>,
        start: impl Fn(A) -> Result<S, DownReason> + Send + Sync + 'static,
    ) -> Self {
        DynamicSpec {
            id: id.into(),
            start: Arc::new(move |a| start(a).map(Into::into)),
            restart: Restart::Permanent,
            shutdown: Shutdown::Timeout(Duration::from_secs(5)),
            child_type: ChildType::Worker,
        }
    }

    /// A permanent nested-supervisor template (shutdown `Infinity`).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildType, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::supervisor("pool", |n: u32| {
    ///         let flags = SupFlags { intensity: n, ..SupFlags::new(Strategy::OneForOne) };
    ///         let sup = supervisor::start_link(flags, vec![]).map_err(|e| smarm::DownReason::Custom(e.to_string()))?;
    ///         Ok(sup.pid())
    ///     });
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     sup.start_child(5).unwrap();
    ///     assert_eq!(sup.count_children().unwrap().supervisors, 1);
    /// });
    /// ```
    pub fn supervisor<S: Into<Started>>(
        id: impl Into<String>,
        start: impl Fn(A) -> Result<S, DownReason> + Send + Sync + 'static,
    ) -> Self {
        DynamicSpec { shutdown: Shutdown::Infinity, child_type: ChildType::Supervisor, ..Self::worker(id, start) }
    }

    /// Sets the restart type.
    ///
    /// ```
    /// use smarm::supervisor::{DynamicSpec, Restart};
    /// let spec = DynamicSpec::worker("w", |_: u8| Ok(smarm::supervisor::Started::Ignore)).restart(Restart::Temporary);
    /// assert_eq!(spec.restart, Restart::Temporary);
    /// ```
    pub fn restart(mut self, r: Restart) -> Self {
        self.restart = r;
        self
    }

    /// Sets the shutdown spec.
    ///
    /// ```
    /// use smarm::supervisor::{DynamicSpec, Shutdown};
    /// let spec = DynamicSpec::worker("w", |_: u8| Ok(smarm::supervisor::Started::Ignore)).shutdown(Shutdown::BrutalKill);
    /// assert_eq!(spec.shutdown, Shutdown::BrutalKill);
    /// ```
    pub fn shutdown(mut self, s: Shutdown) -> Self {
        self.shutdown = s;
        self
    }
}

/// A [`ChildSpec`] is the template of dynamic children started without arguments
/// (`start_child(())`).
impl From<ChildSpec> for DynamicSpec<()> {
    fn from(spec: ChildSpec) -> Self {
        let start = spec.start;
        DynamicSpec {
            id: spec.id,
            start: Arc::new(move |()| start()),
            restart: spec.restart,
            shutdown: spec.shutdown,
            child_type: spec.child_type,
        }
    }
}

/// Supervisor configuration.
#[derive(Debug, Clone)]
pub struct SupFlags {
    /// Restart strategy.
    pub strategy: Strategy,
    /// Maximum restarts within `period` (default 3).
    pub intensity: u32,
    /// Window for `intensity` (default 5 s). Must not be zero.
    pub period: Duration,
    /// The name to register the supervisor under, before its children start (default none).
    /// OTP passes it to `start_link` apart from the flags; here every start function takes it
    /// with the flags.
    pub name: Option<String>,
}

impl SupFlags {
    /// `strategy` with the default intensity (3 restarts per 5 s), no name.
    ///
    /// ```
    /// use smarm::supervisor::{Strategy, SupFlags};
    /// let f = SupFlags::new(Strategy::OneForAll);
    /// assert_eq!((f.intensity, f.period.as_secs()), (3, 5));
    /// ```
    pub fn new(strategy: Strategy) -> SupFlags {
        SupFlags { strategy, intensity: 3, period: Duration::from_secs(5), name: None }
    }

    /// Registers the supervisor as `name` before its children start (see the module doc).
    ///
    /// ```
    /// use smarm::supervisor::{self, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne).named("top"), vec![]).unwrap();
    ///     assert_eq!(smarm::whereis("top"), Some(sup.pid()));
    /// });
    /// ```
    pub fn named(mut self, name: impl Into<String>) -> SupFlags {
        self.name = Some(name.into());
        self
    }
}

/// Which child a request is about: its id, or its pid (OTP's `terminate_child` takes
/// either; a `SimpleOneForOne` supervisor's dynamic children only by pid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChildRef {
    /// The child's spec id.
    Id(String),
    /// The running child's pid.
    Pid(Pid),
}

impl From<&str> for ChildRef {
    fn from(id: &str) -> ChildRef {
        ChildRef::Id(id.to_string())
    }
}
impl From<String> for ChildRef {
    fn from(id: String) -> ChildRef {
        ChildRef::Id(id)
    }
}
impl From<Pid> for ChildRef {
    fn from(pid: Pid) -> ChildRef {
        ChildRef::Pid(pid)
    }
}

/// A child's state in [`ChildInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildState {
    /// Running, with this pid.
    Running(Pid),
    /// Its restart failed and is to be tried again (OTP's `restarting`).
    Restarting,
    /// Not running: terminated, not restarted, or ignored at start (OTP's `undefined`).
    Undefined,
}

/// One entry of [`SupervisorRef::which_children`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildInfo {
    /// The spec id (for a dynamic child, its template's id: OTP reports `undefined`).
    pub id: String,
    /// Running, restarting or not running.
    pub state: ChildState,
    /// Worker or supervisor.
    pub child_type: ChildType,
}

impl ChildInfo {
    /// The child's pid, if it is running.
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    ///     assert!(sup.which_children().unwrap()[0].pid().is_some());
    /// });
    /// ```
    pub fn pid(&self) -> Option<Pid> {
        match self.state {
            ChildState::Running(p) => Some(p),
            _ => None,
        }
    }
}

/// The answer of [`SupervisorRef::count_children`] (OTP's `count_children`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ChildCounts {
    /// Child specs: every static child, running or not; 1 for a `SimpleOneForOne` supervisor
    /// (its template).
    pub specs: usize,
    /// Children running.
    pub active: usize,
    /// Children (running or not) of type `Supervisor`.
    pub supervisors: usize,
    /// Children (running or not) of type `Worker`.
    pub workers: usize,
}

/// Why a supervisor did not start.
#[derive(Debug)]
#[non_exhaustive]
pub enum SupStartError {
    /// A child's start function failed; the supervisor stopped the children it had started.
    Child {
        /// The failing child's id.
        id: String,
        /// Its reason.
        reason: DownReason,
    },
    /// The supervisor could not be spawned.
    Spawn(SpawnError),
    /// The supervisor ended before its children had started: it was killed, or its parent
    /// ended, while a start function ran.
    Ended,
    /// `SupFlags::period` is zero (OTP: `invalid_period`): no restart intensity could hold.
    ZeroPeriod,
    /// `SupFlags::name` is registered to this live actor (OTP: `{already_started, Pid}`).
    AlreadyStarted(Pid),
    /// Registering `SupFlags::name` failed otherwise.
    Register(RegisterError),
    /// Two child specs have this id (OTP: `duplicate_child_name`).
    DuplicateId(String),
    /// A `SimpleOneForOne` supervisor needs exactly one child spec; it got this many (OTP:
    /// `bad_start_spec`).
    SimpleSpecCount(usize),
}

impl fmt::Display for SupStartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupStartError::Child { id, reason } => write!(f, "supervisor child {id:?} failed to start: {reason}"),
            SupStartError::Spawn(e) => write!(f, "supervisor could not be spawned: {e}"),
            SupStartError::Ended => f.write_str("supervisor ended before its children had started"),
            SupStartError::ZeroPeriod => f.write_str("supervisor period must be greater than zero"),
            SupStartError::AlreadyStarted(p) => write!(f, "supervisor name already registered to {p}"),
            SupStartError::Register(e) => write!(f, "supervisor name could not be registered: {e}"),
            SupStartError::DuplicateId(id) => write!(f, "two supervisor child specs have the id {id:?}"),
            SupStartError::SimpleSpecCount(n) => {
                write!(f, "a simple_one_for_one supervisor needs exactly one child spec, got {n}")
            }
        }
    }
}

impl std::error::Error for SupStartError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SupStartError::Child { reason, .. } => Some(reason),
            SupStartError::Spawn(e) => Some(e),
            SupStartError::Register(e) => Some(e),
            _ => None,
        }
    }
}

/// Why a request to a running supervisor failed (OTP's `{error, _}` answers).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SupervisorError {
    /// The supervisor is not running.
    NoProc,
    /// The supervisor made the request itself (from a start function): OTP's `calling_self`.
    CallingSelf,
    /// No child has that id (or pid): `terminate_child`, `restart_child`, `delete_child`.
    NotFound,
    /// The child is running: `restart_child`, `delete_child`.
    Running,
    /// The child's restart failed and is to be tried again: `restart_child`, `delete_child`.
    Restarting,
    /// `start_child(spec)`: a child with that id is running, with this pid.
    AlreadyStarted(Pid),
    /// `start_child(spec)`: a child with that id exists, not running (OTP's
    /// `already_present`): `restart_child` or `delete_child` it.
    AlreadyPresent,
    /// The request is by id, or about static children, and the supervisor is
    /// `SimpleOneForOne` (OTP's `simple_one_for_one`).
    SimpleOneForOne,
    /// The request starts a dynamic child, and the supervisor is not `SimpleOneForOne`.
    NotSimple,
    /// [`SupervisorRef::into_simple`]: the dynamic children take another argument type.
    ArgType,
    /// The child's start function failed with this reason (it returned `Err` or panicked).
    Start(DownReason),
}

impl fmt::Display for SupervisorError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupervisorError::NoProc => f.write_str("supervisor not running"),
            SupervisorError::CallingSelf => f.write_str("supervisor request made by the supervisor itself"),
            SupervisorError::NotFound => f.write_str("no such child"),
            SupervisorError::Running => f.write_str("child is running"),
            SupervisorError::Restarting => f.write_str("child is restarting"),
            SupervisorError::AlreadyStarted(p) => write!(f, "child already started as {p}"),
            SupervisorError::AlreadyPresent => f.write_str("child spec already present"),
            SupervisorError::SimpleOneForOne => f.write_str("not supported by a simple_one_for_one supervisor"),
            SupervisorError::NotSimple => f.write_str("dynamic children need a simple_one_for_one supervisor"),
            SupervisorError::ArgType => f.write_str("the dynamic children take another argument type"),
            SupervisorError::Start(r) => write!(f, "child failed to start: {r}"),
        }
    }
}

impl std::error::Error for SupervisorError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SupervisorError::Start(r) => Some(r),
            _ => None,
        }
    }
}

type Reply<T> = OneshotSender<Result<T, SupervisorError>>;

/// Requests a supervisor's mailbox carries.
pub(crate) enum SupMsg {
    StartChild(ChildSpec, Reply<Option<Pid>>),
    /// Arguments of a new dynamic child (the template's argument type, checked on receipt).
    StartDynamic(Box<dyn Any + Send>, Reply<Option<Pid>>),
    TerminateChild(ChildRef, Reply<()>),
    RestartChild(String, Reply<Option<Pid>>),
    DeleteChild(String, Reply<()>),
    WhichChildren(Reply<Vec<ChildInfo>>),
    CountChildren(Reply<ChildCounts>),
    /// The template's argument type (`NotSimple` without one).
    ArgType(Reply<TypeId>),
    Stop(Reply<()>),
    /// Retry the failed restart of the child with this key (sent to itself).
    TryAgain(u64),
}

/// Stops the calling runtime's root supervisors in reverse start order (each stops its tree).
pub(crate) fn stop_root_supervisors() {
    while let Some(pid) = crate::process::pop_root_supervisor() {
        // An ended supervisor has no mailbox any more: nothing to stop.
        if let Ok(addr) = crate::task::addr_of::<SupMsg>(pid) {
            let _ = SupervisorRef { addr }.stop();
        }
    }
}

/// A handle to a running supervisor.
#[derive(Clone)]
pub struct SupervisorRef {
    addr: Addr<SupMsg>,
}

impl fmt::Debug for SupervisorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SupervisorRef").field(&self.addr.pid()).finish()
    }
}

/// A handle to a running `SimpleOneForOne` supervisor whose dynamic children take an
/// argument of type `A` (see [`start_simple`]).
pub struct SimpleSupervisorRef<A> {
    sup: SupervisorRef,
    _args: PhantomData<fn(A)>,
}

impl<A> Clone for SimpleSupervisorRef<A> {
    fn clone(&self) -> Self {
        SimpleSupervisorRef { sup: self.sup.clone(), _args: PhantomData }
    }
}

impl<A> fmt::Debug for SimpleSupervisorRef<A> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("SimpleSupervisorRef").field(&self.sup.pid()).finish()
    }
}

/// How a child is started again: its own start function, or the template's with its
/// arguments.
enum Start {
    Static(StartFn),
    Dynamic(Box<dyn Any + Send>),
}

struct Child {
    id: Option<String>,
    start: Start,
    restart: Restart,
    shutdown: Shutdown,
    child_type: ChildType,
    pid: Option<Pid>,
    /// A restart failed and a `TryAgain` for it is queued (OTP's `{restarting, _}`).
    restarting: bool,
}

/// A template's start function, taking its arguments type-erased.
type ErasedStartFn = Arc<dyn Fn(&(dyn Any + Send)) -> Result<Started, DownReason> + Send + Sync>;

/// The dynamic children's template, type-erased.
struct Template {
    id: String,
    restart: Restart,
    shutdown: Shutdown,
    child_type: ChildType,
    arg_type: TypeId,
    /// Whether a `StartDynamic` payload is of the argument type.
    accepts: fn(&(dyn Any + Send)) -> bool,
    /// Starts an instance from its arguments (a clone of them).
    start: ErasedStartFn,
}

fn accepts<A: 'static>(a: &(dyn Any + Send)) -> bool {
    a.is::<A>()
}

impl Template {
    fn new<A: Clone + Send + 'static>(spec: DynamicSpec<A>) -> Template {
        let f = spec.start;
        Template {
            id: spec.id,
            restart: spec.restart,
            shutdown: spec.shutdown,
            child_type: spec.child_type,
            arg_type: TypeId::of::<A>(),
            accepts: accepts::<A>,
            start: Arc::new(move |a| match a.downcast_ref::<A>() {
                Some(a) => f(a.clone()),
                // `accepts` was checked when the arguments came in.
                None => Err(DownReason::Custom("smarm: dynamic child arguments of another type".into())),
            }),
        }
    }
}

struct Sup {
    flags: SupFlags,
    /// `Some` iff the strategy is `SimpleOneForOne`.
    template: Option<Template>,
    /// Key order is start order (keys come from `next_key`).
    children: BTreeMap<u64, Child>,
    /// The key of every child whose `pid` is `Some`.
    by_pid: HashMap<Pid, u64>,
    restarts: VecDeque<Instant>,
    mb: Mailbox<SupMsg>,
    next_key: u64,
}

/// What a new supervisor starts with.
enum Init {
    Static(Vec<ChildSpec>),
    Simple(Template),
}

/// Starts a supervisor linked to the caller; returns once every child has started.
///
/// Fails with [`SupStartError::ZeroPeriod`] for a zero `flags.period`,
/// [`SupStartError::DuplicateId`] for two specs with one id, and
/// [`SupStartError::SimpleSpecCount`] for a `SimpleOneForOne` strategy without exactly one
/// spec (nothing is spawned); with [`SupStartError::AlreadyStarted`] if `flags.name` is
/// taken; with [`SupStartError::Child`] when a child's start function returns `Err` or
/// panics.
///
/// With `Strategy::SimpleOneForOne`, the one spec is the template of dynamic children that
/// take no argument: [`SupervisorRef::into_simple`]`::<()>` gives the handle that starts
/// them. [`start_simple`] is the direct form.
///
/// ```
/// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags};
/// smarm::run(|| {
///     let spec = |id: &str| ChildSpec::worker(id, || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
///     let sup = supervisor::start_link(SupFlags::new(Strategy::RestForOne), vec![spec("db"), spec("web")]).unwrap();
///     let ids: Vec<String> = sup.which_children().unwrap().into_iter().map(|c| c.id).collect();
///     assert_eq!(ids, ["db", "web"]);
/// });
/// ```
pub fn start_link(flags: SupFlags, children: Vec<ChildSpec>) -> Result<SupervisorRef, SupStartError> {
    let init = if flags.strategy == Strategy::SimpleOneForOne {
        if children.len() != 1 {
            return Err(SupStartError::SimpleSpecCount(children.len()));
        }
        let spec = children.into_iter().next().expect("one spec");
        Init::Simple(Template::new(DynamicSpec::<()>::from(spec)))
    } else {
        let mut seen = HashSet::new();
        if let Some(dup) = children.iter().find(|c| !seen.insert(c.id.as_str())) {
            return Err(SupStartError::DuplicateId(dup.id.clone()));
        }
        Init::Static(children)
    };
    spawn_sup(flags, init)
}

/// Starts a `SimpleOneForOne` supervisor linked to the caller, over the template `spec`,
/// whose dynamic children take an argument of type `A` (the strategy of `flags` is not
/// read). A [`ChildSpec`] converts to the template of children without argument (`A = ()`).
///
/// Fails with [`SupStartError::ZeroPeriod`] or [`SupStartError::AlreadyStarted`] as
/// [`start_link`] does.
///
/// ```
/// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
/// smarm::run(|| {
///     let spec = DynamicSpec::worker("job", |n: u64| Ok(smarm::spawn_link(move || { let _ = n * 2; loop { smarm::recv_signal(); } }).pid()));
///     let jobs = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
///     for n in 0..3 {
///         jobs.start_child(n).unwrap();
///     }
///     assert_eq!(jobs.count_children().unwrap().active, 3);
/// });
/// ```
pub fn start_simple<A: Clone + Send + 'static>(
    flags: SupFlags,
    spec: impl Into<DynamicSpec<A>>,
) -> Result<SimpleSupervisorRef<A>, SupStartError> {
    let flags = SupFlags { strategy: Strategy::SimpleOneForOne, ..flags };
    let sup = spawn_sup(flags, Init::Simple(Template::new(spec.into())))?;
    Ok(SimpleSupervisorRef { sup, _args: PhantomData })
}

/// The supervisor registered as `name`.
///
/// Fails with [`LookupError::NotFound`] if no live actor has that name, and
/// [`LookupError::WrongType`] or [`LookupError::NoMailbox`] if the actor is not a supervisor
/// (an actor with another mailbox type, a plain actor).
///
/// ```
/// use smarm::supervisor::{self, Strategy, SupFlags};
/// smarm::run(|| {
///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne).named("root_sup"), vec![]).unwrap();
///     assert_eq!(supervisor::whereis("root_sup").unwrap().pid(), sup.pid());
///     assert_eq!(supervisor::whereis("nobody").unwrap_err(), smarm::LookupError::NotFound);
/// });
/// ```
pub fn whereis(name: &str) -> Result<SupervisorRef, LookupError> {
    SupervisorRef::from_pid(crate::process::whereis(name).ok_or(LookupError::NotFound)?)
}

fn spawn_sup(flags: SupFlags, init: Init) -> Result<SupervisorRef, SupStartError> {
    if flags.period.is_zero() {
        return Err(SupStartError::ZeroPeriod);
    }
    let parent = crate::task::current_pid();
    let parent_is_sup = crate::process::ext_of(parent).is_some_and(|e| e.is::<SupMarker>());
    let (ready_tx, ready_rx) = oneshot::<Result<(), SupStartError>>();
    let addr = crate::task::try_spawn_actor(move |mb: Mailbox<SupMsg>| {
        crate::process::set_ext(Arc::new(SupMarker));
        crate::process::trap_exit(true);
        let _ = crate::process::link(parent);
        if let Some(name) = &flags.name {
            if let Err(e) = crate::process::register(name.clone(), crate::task::current_pid()) {
                let e = match e {
                    RegisterError::NameTaken(pid) => SupStartError::AlreadyStarted(pid),
                    other => SupStartError::Register(other),
                };
                let _ = ready_tx.send(Err(e));
                return;
            }
        }
        let mut sup = Sup {
            flags,
            template: None,
            children: BTreeMap::new(),
            by_pid: HashMap::new(),
            restarts: VecDeque::new(),
            mb,
            next_key: 0,
        };
        match init {
            Init::Simple(t) => sup.template = Some(t),
            Init::Static(specs) => {
                for spec in specs {
                    match call_start(|| (spec.start)()) {
                        Ok(Started::Ignore) if spec.restart == Restart::Temporary => {}
                        Ok(started) => {
                            sup.insert(
                                Some(spec.id),
                                Start::Static(spec.start),
                                spec.restart,
                                spec.shutdown,
                                spec.child_type,
                                started.pid(),
                            );
                        }
                        Err(reason) => {
                            sup.stop_all();
                            let _ = ready_tx.send(Err(SupStartError::Child { id: spec.id, reason }));
                            return;
                        }
                    }
                }
            }
        }
        let _ = ready_tx.send(Ok(()));
        sup.run(parent);
    })
    .map_err(SupStartError::Spawn)?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(SupStartError::Ended),
    }
    let sref = SupervisorRef { addr };
    if !parent_is_sup {
        crate::process::register_root_supervisor(sref.addr.pid());
    }
    Ok(sref)
}

/// Marks supervisor actors (their process `ext`).
struct SupMarker;

/// Calls a child's start function (in the supervisor). A panic is a failure with the
/// panic's reason, as OTP runs start functions under `catch`; smarm's own stop unwind (a
/// kill, an exit signal, the runtime's shutdown, raised while the function waited) is not
/// the child's failure but the supervisor's end: it goes on.
///
/// A started child is linked to the supervisor on return, whether or not the start function
/// linked it (the module doc): `link` adds nothing to an existing link, and for a child
/// already gone it queues the trapping supervisor an `Exit { from: child, reason: NoProc }`
/// (or the child's own exit signal is already queued), which the supervisor handles as the
/// child's exit.
#[inline(never)]
fn call_start(start: impl FnOnce() -> Result<Started, DownReason>) -> Result<Started, DownReason> {
    match catch_unwind(AssertUnwindSafe(start)) {
        Ok(Ok(started)) => {
            if let Started::Pid(pid) = started {
                // The supervisor traps exits: `link` reports a dead child as a queued `Exit`,
                // never as an error.
                let _ = crate::process::link(pid);
            }
            Ok(started)
        }
        Ok(Err(reason)) => Err(reason),
        Err(payload) => match payload.downcast::<Cancelled>() {
            Ok(stop) => {
                // `resume_unwind` skips the panic hook, which is what marks an actor as
                // unwinding (as in `gen_server::exit_with`).
                crate::runtime::mark_current_unwinding();
                resume_unwind(stop)
            }
            Err(payload) => Err(reason_from_payload(payload)),
        },
    }
}

/// Ends the calling supervisor with `reason` (its children already stopped).
fn exit_self(reason: DownReason) -> ! {
    crate::runtime::mark_current_unwinding();
    resume_unwind(Box::new(Cancelled(reason)))
}

impl Sup {
    fn simple(&self) -> bool {
        self.template.is_some()
    }

    /// Adds a child after every other (last in start order); returns its key.
    fn insert(
        &mut self,
        id: Option<String>,
        start: Start,
        restart: Restart,
        shutdown: Shutdown,
        child_type: ChildType,
        pid: Option<Pid>,
    ) -> u64 {
        let key = self.next_key;
        self.next_key += 1;
        if let Some(p) = pid {
            self.by_pid.insert(p, key);
        }
        self.children.insert(key, Child { id, start, restart, shutdown, child_type, pid, restarting: false });
        key
    }

    /// Sets child `key`'s pid, keeping `by_pid` in step.
    fn set_pid(&mut self, key: u64, pid: Option<Pid>) {
        let child = self.children.get_mut(&key).expect("child key");
        if let Some(old) = std::mem::replace(&mut child.pid, pid) {
            self.by_pid.remove(&old);
        }
        if let Some(p) = pid {
            self.by_pid.insert(p, key);
        }
    }

    /// Forgets child `key` (not running).
    fn remove(&mut self, key: u64) {
        if let Some(c) = self.children.remove(&key) {
            if let Some(p) = c.pid {
                self.by_pid.remove(&p);
            }
        }
    }

    fn id_of<'a>(&'a self, c: &'a Child) -> &'a str {
        match (&c.id, &self.template) {
            (Some(id), _) => id,
            (None, Some(t)) => &t.id,
            (None, None) => "",
        }
    }

    /// The key of the static child with this id (static children are few: a scan).
    fn key_of_id(&self, id: &str) -> Option<u64> {
        self.children.iter().find(|(_, c)| c.id.as_deref() == Some(id)).map(|(k, _)| *k)
    }

    /// Runs child `key`'s start function (the supervisor's state is not borrowed meanwhile:
    /// a start function may take long, but cannot reach this state).
    fn start_of(&self, key: u64) -> Result<Started, DownReason> {
        let child = &self.children[&key];
        match &child.start {
            Start::Static(f) => {
                let f = f.clone();
                call_start(|| f())
            }
            Start::Dynamic(args) => {
                let t = self.template.as_ref().expect("dynamic child without a template");
                call_start(|| (t.start)(&**args))
            }
        }
    }

    fn run(&mut self, parent: Pid) {
        loop {
            match self.mb.recv() {
                Envelope::Exit(Exit { from, reason }) if from == parent => {
                    // Our parent is going away (or asks us to): stop the tree, exit likewise.
                    self.stop_all();
                    exit_self(reason);
                }
                Envelope::Exit(Exit { from, reason }) => {
                    if !self.child_exited(from, reason) {
                        self.stop_all();
                        exit_self(DownReason::Shutdown);
                    }
                }
                Envelope::Msg(SupMsg::TryAgain(key)) => {
                    // Ignored if the child was restarted (with its group) or removed meanwhile.
                    if self.children.get(&key).is_some_and(|c| c.restarting) && !self.restart(key) {
                        self.stop_all();
                        exit_self(DownReason::Shutdown);
                    }
                }
                Envelope::Down(_) => {}
                Envelope::Msg(SupMsg::StartChild(spec, reply)) => {
                    let r = self.start_static(spec);
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::StartDynamic(args, reply)) => {
                    let r = self.start_dynamic(args);
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::TerminateChild(child, reply)) => {
                    let r = self.terminate(child);
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::RestartChild(id, reply)) => {
                    let r = self.restart_by_id(&id);
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::DeleteChild(id, reply)) => {
                    let r = self.delete(&id);
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::WhichChildren(reply)) => {
                    let _ = reply.send(Ok(self.which()));
                }
                Envelope::Msg(SupMsg::CountChildren(reply)) => {
                    let _ = reply.send(Ok(self.count()));
                }
                Envelope::Msg(SupMsg::ArgType(reply)) => {
                    let _ = reply.send(self.template.as_ref().map(|t| t.arg_type).ok_or(SupervisorError::NotSimple));
                }
                Envelope::Msg(SupMsg::Stop(done)) => {
                    self.stop_all();
                    let _ = done.send(Ok(()));
                    return;
                }
            }
        }
    }

    /// `start_child(spec)` (OTP's `handle_start_child`).
    fn start_static(&mut self, spec: ChildSpec) -> Result<Option<Pid>, SupervisorError> {
        if self.simple() {
            return Err(SupervisorError::SimpleOneForOne);
        }
        if let Some(key) = self.key_of_id(&spec.id) {
            return Err(match self.children[&key].pid {
                Some(pid) => SupervisorError::AlreadyStarted(pid),
                None => SupervisorError::AlreadyPresent,
            });
        }
        match call_start(|| (spec.start)()).map_err(SupervisorError::Start)? {
            Started::Ignore if spec.restart == Restart::Temporary => Ok(None),
            started => {
                let pid = started.pid();
                self.insert(
                    Some(spec.id),
                    Start::Static(spec.start),
                    spec.restart,
                    spec.shutdown,
                    spec.child_type,
                    pid,
                );
                Ok(pid)
            }
        }
    }

    /// `start_child(args)` of a `SimpleOneForOne` supervisor: an ignored or failed start
    /// keeps nothing.
    fn start_dynamic(&mut self, args: Box<dyn Any + Send>) -> Result<Option<Pid>, SupervisorError> {
        let t = self.template.as_ref().ok_or(SupervisorError::NotSimple)?;
        if !(t.accepts)(&*args) {
            return Err(SupervisorError::ArgType);
        }
        let (restart, shutdown, child_type) = (t.restart, t.shutdown, t.child_type);
        match call_start(|| (t.start)(&*args)).map_err(SupervisorError::Start)? {
            Started::Ignore => Ok(None),
            Started::Pid(pid) => {
                self.insert(None, Start::Dynamic(args), restart, shutdown, child_type, Some(pid));
                Ok(Some(pid))
            }
        }
    }

    /// `terminate_child`: stops the child; a static child's spec is kept (not running), a
    /// dynamic or `Temporary` child is forgotten.
    fn terminate(&mut self, child: ChildRef) -> Result<(), SupervisorError> {
        let key = match child {
            ChildRef::Id(_) if self.simple() => return Err(SupervisorError::SimpleOneForOne),
            ChildRef::Id(id) => self.key_of_id(&id),
            ChildRef::Pid(pid) => self.by_pid.get(&pid).copied(),
        };
        let key = key.ok_or(SupervisorError::NotFound)?;
        self.stop_child(key);
        let child = self.children.get_mut(&key).expect("child key");
        child.restarting = false;
        if self.template.is_some() || child.restart == Restart::Temporary {
            self.remove(key);
        }
        Ok(())
    }

    /// `restart_child(id)`: starts a static child that is not running (no restart counted,
    /// as in OTP).
    fn restart_by_id(&mut self, id: &str) -> Result<Option<Pid>, SupervisorError> {
        let key = self.not_running(id)?;
        let pid = self.start_of(key).map_err(SupervisorError::Start)?.pid();
        self.set_pid(key, pid);
        Ok(pid)
    }

    /// `delete_child(id)`: forgets a static child that is not running.
    fn delete(&mut self, id: &str) -> Result<(), SupervisorError> {
        let key = self.not_running(id)?;
        self.remove(key);
        Ok(())
    }

    /// The key of static child `id`, which must not be running or restarting.
    fn not_running(&self, id: &str) -> Result<u64, SupervisorError> {
        if self.simple() {
            return Err(SupervisorError::SimpleOneForOne);
        }
        let key = self.key_of_id(id).ok_or(SupervisorError::NotFound)?;
        let c = &self.children[&key];
        if c.restarting {
            Err(SupervisorError::Restarting)
        } else if c.pid.is_some() {
            Err(SupervisorError::Running)
        } else {
            Ok(key)
        }
    }

    fn which(&self) -> Vec<ChildInfo> {
        let state = |c: &Child| match (c.pid, c.restarting) {
            (Some(p), _) => ChildState::Running(p),
            (None, true) => ChildState::Restarting,
            (None, false) => ChildState::Undefined,
        };
        self.children
            .values()
            .map(|c| ChildInfo { id: self.id_of(c).to_string(), state: state(c), child_type: c.child_type })
            .collect()
    }

    fn count(&self) -> ChildCounts {
        let mut n = ChildCounts::default();
        for c in self.children.values() {
            n.specs += 1;
            n.active += usize::from(c.pid.is_some());
            match c.child_type {
                ChildType::Worker => n.workers += 1,
                ChildType::Supervisor => n.supervisors += 1,
            }
        }
        if self.simple() {
            n.specs = 1;
        }
        n
    }

    /// Handles a child's exit. Returns false if the restart intensity was exceeded.
    fn child_exited(&mut self, from: Pid, reason: DownReason) -> bool {
        let Some(&key) = self.by_pid.get(&from) else { return true };
        self.set_pid(key, None);
        #[cfg(feature = "tracing")]
        if !reason.is_normal_or_shutdown() {
            // OTP's supervisor report `child_terminated`, at SASL's level for it.
            tracing::error!(
                target: "smarm::supervisor",
                supervisor = %crate::task::current_pid(),
                child = self.children[&key].id.as_deref().unwrap_or("undefined"),
                pid = %from,
                reason = %reason,
                "child terminated"
            );
        }
        let kind = self.children[&key].restart;
        let restart = match kind {
            Restart::Permanent => true,
            Restart::Transient => !reason.is_normal_or_shutdown(),
            Restart::Temporary => false,
        };
        if !restart {
            if kind == Restart::Temporary || self.simple() {
                self.remove(key);
            }
            return true;
        }
        self.restart(key)
    }

    /// Counts a restart; false if that makes more than `intensity` within `period`.
    fn add_restart(&mut self) -> bool {
        let now = Instant::now();
        self.restarts.push_back(now);
        while self.restarts.front().is_some_and(|t| now.duration_since(*t) > self.flags.period) {
            self.restarts.pop_front();
        }
        self.restarts.len() as u32 <= self.flags.intensity
    }

    /// Restarts child `key` (it ended, or its last restart failed) by the strategy,
    /// counting one restart. Returns false if the restart intensity was exceeded.
    ///
    /// The rest of its group is stopped in reverse start order; the `Temporary` children
    /// among them are forgotten; then the group is started in start order. If a start
    /// function fails, that child is marked restarting, a `TryAgain` for it is queued (the
    /// retry restarts its group again, as OTP's `try_again_restart`), and the children
    /// after it stay down until then. A start function that ignores leaves its static child
    /// not running (OTP's `undefined`), and forgets a dynamic one.
    fn restart(&mut self, key: u64) -> bool {
        if !self.add_restart() {
            // OTP's supervisor report `shutdown: reached_max_restart_intensity`.
            #[cfg(feature = "tracing")]
            tracing::error!(
                target: "smarm::supervisor",
                supervisor = %crate::task::current_pid(),
                child = self.children[&key].id.as_deref().unwrap_or("undefined"),
                "reached max restart intensity; shutting down"
            );
            return false;
        }
        let group: Vec<u64> = match self.flags.strategy {
            Strategy::OneForOne | Strategy::SimpleOneForOne => vec![key],
            Strategy::OneForAll => self.children.keys().copied().collect(),
            Strategy::RestForOne => self.children.range(key..).map(|(k, _)| *k).collect(),
        };
        for &k in group.iter().rev() {
            if k != key {
                self.stop_child(k);
            }
        }
        for k in group {
            if k != key && self.children[&k].restart == Restart::Temporary {
                self.remove(k);
                continue;
            }
            match self.start_of(k) {
                Ok(started) => {
                    self.children.get_mut(&k).expect("child key").restarting = false;
                    // OTP's progress report for a (re)started child.
                    #[cfg(feature = "tracing")]
                    if let Started::Pid(pid) = &started {
                        tracing::info!(
                            target: "smarm::supervisor",
                            supervisor = %crate::task::current_pid(),
                            child = self.children[&k].id.as_deref().unwrap_or("undefined"),
                            pid = %pid,
                            "child restarted"
                        );
                    }
                    match started {
                        Started::Pid(pid) => self.set_pid(k, Some(pid)),
                        Started::Ignore if self.simple() => self.remove(k),
                        Started::Ignore => {}
                    }
                }
                Err(_) => {
                    self.children.get_mut(&k).expect("child key").restarting = true;
                    self.mb.addr().send(SupMsg::TryAgain(k));
                    return true;
                }
            }
        }
        true
    }

    /// Stops child `key` per its shutdown spec and waits for its end (OTP's `shutdown/2`).
    ///
    /// The child is monitored, and its Down awaited: a child that unlinked itself from the
    /// supervisor sends no exit signal. Then the link is removed, and the exit signal of a
    /// child that was still linked is dropped (once `unlink` returns, it is queued or never
    /// comes), so that it is not taken for a new exit.
    fn stop_child(&mut self, key: u64) {
        let Some(pid) = self.children[&key].pid else { return };
        self.set_pid(key, None);
        // The Down of a monitor made now cannot be queued ahead of the mark: the wait skips
        // whatever the supervisor's mailbox already holds.
        let mark = self.mb.mark();
        let m = crate::process::monitor(pid);
        match self.children[&key].shutdown {
            Shutdown::BrutalKill => {
                crate::process::kill(pid);
                self.await_down(mark, m, None);
            }
            Shutdown::Timeout(d) => {
                crate::process::exit(pid, DownReason::Shutdown);
                if !self.await_down(mark, m, Some(d)) {
                    crate::process::kill(pid);
                    self.await_down(mark, m, None);
                }
            }
            Shutdown::Infinity => {
                crate::process::exit(pid, DownReason::Shutdown);
                self.await_down(mark, m, None);
            }
        }
        self.unlink_flush(pid);
    }

    /// Waits (at most `timeout`, if given) for the Down of monitor `m`, made after `mark`;
    /// false on timeout.
    fn await_down(&self, mark: RecvMark, m: MonitorRef, timeout: Option<Duration>) -> bool {
        self.mb
            .recv_match_from_within(
                mark,
                WaitLimit::from_timeout(timeout),
                |e| matches!(e, Envelope::Down(d) if d.monitor == m),
            )
            .is_some()
    }

    /// Unlinks the ended child `pid` and drops its queued exit signal, if any.
    fn unlink_flush(&self, pid: Pid) {
        crate::process::unlink(pid);
        let _ = self.mb.recv_match_timeout(Duration::ZERO, |e| matches!(e, Envelope::Exit(x) if x.from == pid));
    }

    /// Stops every child in reverse start order; the dynamic children of a
    /// `SimpleOneForOne` supervisor in parallel ([`Sup::stop_dynamic`]).
    fn stop_all(&mut self) {
        if self.simple() {
            self.stop_dynamic();
        } else {
            let keys: Vec<u64> = self.children.keys().rev().copied().collect();
            for k in keys {
                self.stop_child(k);
            }
        }
    }

    /// Stops the dynamic children all at once (OTP's `terminate_dynamic_children`, with the
    /// unlink first as its `monitor_child`), in time linear in their number:
    ///
    /// 1. Monitor each child (one already gone gets a `NoProc` Down), and unlink it.
    /// 2. Drop the exit signals the children sent before their unlink, in one pass over the
    ///    mailbox: once `unlink` has returned, a child's exit signal is queued or never comes.
    ///    From here a child's end reaches the supervisor as its Down only.
    /// 3. Signal each: `kill` for `BrutalKill`, else an exit signal `Shutdown`.
    /// 4. Collect the Downs, each queued envelope looked at once (`Mailbox::recv_all_match`,
    ///    not one selective receive per Down, which would rescan what is queued ahead of it).
    ///    At a `Timeout` deadline, kill the children not ended yet and wait for them.
    fn stop_dynamic(&mut self) {
        let Some(shutdown) = self.template.as_ref().map(|t| t.shutdown) else { return };
        let pids: Vec<Pid> = self.children.values_mut().filter_map(|c| c.pid.take()).collect();
        self.by_pid.clear();
        let mut left: HashSet<MonitorRef> = HashSet::with_capacity(pids.len());
        for &pid in &pids {
            left.insert(crate::process::monitor(pid));
            crate::process::unlink(pid);
        }
        let unlinked: HashSet<Pid> = pids.iter().copied().collect();
        let mut flushed = Vec::new();
        self.mb.recv_all_match(
            WaitLimit::For(Duration::ZERO),
            &mut 0,
            |e| matches!(e, Envelope::Exit(x) if unlinked.contains(&x.from)),
            &mut flushed,
        );
        drop(flushed);
        for &pid in &pids {
            match shutdown {
                Shutdown::BrutalKill => crate::process::kill(pid),
                _ => crate::process::exit(pid, DownReason::Shutdown),
            }
        }
        let mut limit = match shutdown {
            Shutdown::Timeout(d) => WaitLimit::Until(crate::timer::deadline_after(Instant::now(), d)),
            _ => WaitLimit::Forever,
        };
        // Envelopes already looked at: what stays queued ahead of the Downs is not a Down of
        // a child still `left`, and never becomes one.
        let mut seen = 0;
        let mut downs = Vec::new();
        while !left.is_empty() {
            let pred = |e: &Envelope<SupMsg>| matches!(e, Envelope::Down(d) if left.contains(&d.monitor));
            if self.mb.recv_all_match(limit, &mut seen, pred, &mut downs) {
                for e in downs.drain(..) {
                    if let Envelope::Down(d) = e {
                        left.remove(&d.monitor);
                    }
                }
            } else {
                // The deadline passed: kill the rest and wait for them.
                for m in &left {
                    crate::process::kill(m.target());
                }
                limit = WaitLimit::Forever;
            }
        }
    }
}

impl SupervisorRef {
    /// The supervisor's pid.
    ///
    /// ```
    /// use smarm::supervisor::{self, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![]).unwrap();
    ///     assert_ne!(sup.pid(), smarm::current_pid());
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// The supervisor running as `pid` ([`LookupError::WrongType`] or
    /// [`LookupError::NoMailbox`] if that actor is not a supervisor): for the nested supervisors [`which_children`](Self::which_children)
    /// lists, or a pid from elsewhere.
    ///
    /// ```
    /// use smarm::supervisor::{self, Strategy, SupFlags, SupervisorRef};
    /// smarm::run(|| {
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![]).unwrap();
    ///     assert_eq!(SupervisorRef::from_pid(sup.pid()).unwrap().pid(), sup.pid());
    ///     assert!(SupervisorRef::from_pid(smarm::current_pid()).is_err());
    /// });
    /// ```
    pub fn from_pid(pid: Pid) -> Result<SupervisorRef, LookupError> {
        crate::task::addr_of::<SupMsg>(pid).map(|addr| SupervisorRef { addr })
    }

    /// Sends a request and waits for the answer (see the module doc, "Requests").
    #[track_caller]
    fn request<T: Send + 'static>(&self, make: impl FnOnce(Reply<T>) -> SupMsg) -> Result<T, SupervisorError> {
        if crate::task::try_current_pid() == Some(self.pid()) {
            return Err(SupervisorError::CallingSelf);
        }
        let (tx, rx) = oneshot();
        self.addr.try_send(make(tx)).map_err(|_| SupervisorError::NoProc)?;
        rx.recv().unwrap_or(Err(SupervisorError::NoProc))
    }

    /// Adds `spec` as the last child and starts it (OTP's `start_child(Sup, ChildSpec)`).
    /// Returns its pid, or `None` if its start function ignored (the spec is kept, unless
    /// `Temporary`).
    ///
    /// Errors: [`SupervisorError::AlreadyStarted`] / [`SupervisorError::AlreadyPresent`] if
    /// a child has that id (running / not running), [`SupervisorError::Start`] if the start
    /// function failed (nothing is kept), [`SupervisorError::SimpleOneForOne`] for a
    /// `SimpleOneForOne` supervisor ([`SimpleSupervisorRef::start_child`] starts its
    /// children).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![]).unwrap();
    ///     let spec = ChildSpec::worker("late", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let pid = sup.start_child(spec.clone()).unwrap().unwrap();
    ///     assert_eq!(sup.start_child(spec), Err(SupervisorError::AlreadyStarted(pid)));
    /// });
    /// ```
    pub fn start_child(&self, spec: ChildSpec) -> Result<Option<Pid>, SupervisorError> {
        self.request(|r| SupMsg::StartChild(spec, r))
    }

    /// Stops a child per its shutdown spec: by id, or by pid (OTP's `terminate_child`). A
    /// static child's spec is kept, not running ([`restart_child`](Self::restart_child)
    /// starts it again); a dynamic or `Temporary` child is forgotten. The child is not
    /// restarted, whatever its restart type.
    ///
    /// Errors: [`SupervisorError::NotFound`]; [`SupervisorError::SimpleOneForOne`] for an
    /// id given to a `SimpleOneForOne` supervisor (its children are terminated by pid).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, ChildState, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    ///     sup.terminate_child("w").unwrap();
    ///     assert_eq!(sup.which_children().unwrap()[0].state, ChildState::Undefined);
    /// });
    /// ```
    pub fn terminate_child(&self, child: impl Into<ChildRef>) -> Result<(), SupervisorError> {
        let child = child.into();
        self.request(|r| SupMsg::TerminateChild(child, r))
    }

    /// Starts the static child `id` again after [`terminate_child`](Self::terminate_child)
    /// (OTP's `restart_child`; no restart is counted toward the intensity). Returns its
    /// pid, or `None` if its start function ignored.
    ///
    /// Errors: [`SupervisorError::Running`], [`SupervisorError::Restarting`],
    /// [`SupervisorError::NotFound`], [`SupervisorError::Start`] (the spec stays, not
    /// running), [`SupervisorError::SimpleOneForOne`].
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    ///     assert_eq!(sup.restart_child("w"), Err(SupervisorError::Running));
    ///     sup.terminate_child("w").unwrap();
    ///     assert!(sup.restart_child("w").unwrap().is_some());
    /// });
    /// ```
    pub fn restart_child(&self, id: &str) -> Result<Option<Pid>, SupervisorError> {
        let id = id.to_string();
        self.request(|r| SupMsg::RestartChild(id, r))
    }

    /// Removes the spec of the static child `id`, which must not be running (OTP's
    /// `delete_child`).
    ///
    /// Errors: [`SupervisorError::Running`], [`SupervisorError::Restarting`],
    /// [`SupervisorError::NotFound`], [`SupervisorError::SimpleOneForOne`].
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![spec]).unwrap();
    ///     assert_eq!(sup.delete_child("w"), Err(SupervisorError::Running));
    ///     sup.terminate_child("w").unwrap();
    ///     sup.delete_child("w").unwrap();
    ///     assert_eq!(sup.delete_child("w"), Err(SupervisorError::NotFound));
    ///     assert!(sup.which_children().unwrap().is_empty());
    /// });
    /// ```
    pub fn delete_child(&self, id: &str) -> Result<(), SupervisorError> {
        let id = id.to_string();
        self.request(|r| SupMsg::DeleteChild(id, r))
    }

    /// Every child, in start order: its id, state (running with a pid, restarting, or not
    /// running) and type (OTP's `which_children`).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, ChildState, ChildType, Started, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let idle = ChildSpec::worker("idle", || Ok(Started::Ignore));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![idle]).unwrap();
    ///     let c = &sup.which_children().unwrap()[0];
    ///     assert_eq!((c.id.as_str(), c.state, c.child_type), ("idle", ChildState::Undefined, ChildType::Worker));
    /// });
    /// ```
    pub fn which_children(&self) -> Result<Vec<ChildInfo>, SupervisorError> {
        self.request(SupMsg::WhichChildren)
    }

    /// How many specs, running children, supervisors and workers (OTP's `count_children`).
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Started, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let run = ChildSpec::worker("run", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let idle = ChildSpec::worker("idle", || Ok(Started::Ignore));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![run, idle]).unwrap();
    ///     let n = sup.count_children().unwrap();
    ///     assert_eq!((n.specs, n.active, n.workers, n.supervisors), (2, 1, 2, 0));
    /// });
    /// ```
    pub fn count_children(&self) -> Result<ChildCounts, SupervisorError> {
        self.request(SupMsg::CountChildren)
    }

    /// The typed handle of a `SimpleOneForOne` supervisor whose dynamic children take `A`
    /// (`()` for one started by [`start_link`] with a [`ChildSpec`]).
    ///
    /// Errors: [`SupervisorError::ArgType`] for another argument type,
    /// [`SupervisorError::NotSimple`] for another strategy.
    ///
    /// ```
    /// use smarm::supervisor::{self, ChildSpec, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let spec = ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::SimpleOneForOne), vec![spec]).unwrap();
    ///     assert_eq!(sup.clone().into_simple::<u32>().unwrap_err(), SupervisorError::ArgType);
    ///     let simple = sup.into_simple::<()>().unwrap();
    ///     assert!(simple.start_child(()).unwrap().is_some());
    /// });
    /// ```
    pub fn into_simple<A: Clone + Send + 'static>(self) -> Result<SimpleSupervisorRef<A>, SupervisorError> {
        if self.request(SupMsg::ArgType)? != TypeId::of::<A>() {
            return Err(SupervisorError::ArgType);
        }
        Ok(SimpleSupervisorRef { sup: self, _args: PhantomData })
    }

    /// Stops the supervisor: its children in reverse start order (each per its shutdown
    /// spec), then itself. Returns once done.
    ///
    /// Errors: [`SupervisorError::NoProc`] if it is not running,
    /// [`SupervisorError::CallingSelf`].
    ///
    /// ```
    /// use smarm::supervisor::{self, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![]).unwrap();
    ///     sup.stop().unwrap();
    ///     assert_eq!(sup.stop(), Err(SupervisorError::NoProc));
    /// });
    /// ```
    pub fn stop(&self) -> Result<(), SupervisorError> {
        self.request(SupMsg::Stop)
    }
}

impl<A: Clone + Send + 'static> SimpleSupervisorRef<A> {
    /// The supervisor's pid.
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Started, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: u8| Ok(Started::Ignore));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     assert_eq!(sup.pid(), sup.supervisor().pid());
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.sup.pid()
    }

    /// The untyped handle (for the requests every supervisor answers).
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Started, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: u8| Ok(Started::Ignore));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     assert_eq!(sup.supervisor().count_children().unwrap().specs, 1);
    /// });
    /// ```
    pub fn supervisor(&self) -> &SupervisorRef {
        &self.sup
    }

    /// Starts a dynamic child: the template's start function with `args` (OTP's
    /// `start_child(Sup, ArgList)`). A restart of this child calls it again with a clone of
    /// `args`. Returns the child's pid, or `None` if the start function ignored (nothing is
    /// kept).
    ///
    /// Errors: [`SupervisorError::Start`] if the start function failed (nothing is kept),
    /// [`SupervisorError::NoProc`], [`SupervisorError::CallingSelf`].
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("greeter", |name: &'static str| {
    ///         Ok(smarm::spawn_link(move || { let _ = name; loop { smarm::recv_signal(); } }).pid())
    ///     });
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     let pid = sup.start_child("ada").unwrap().unwrap();
    ///     assert_eq!(sup.which_children().unwrap()[0].pid(), Some(pid));
    /// });
    /// ```
    pub fn start_child(&self, args: A) -> Result<Option<Pid>, SupervisorError> {
        self.sup.request(|r| SupMsg::StartDynamic(Box::new(args), r))
    }

    /// Stops the dynamic child `pid` per the template's shutdown spec, and forgets it (OTP's
    /// `terminate_child(Sup, Pid)`). Errors: [`SupervisorError::NotFound`].
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags, SupervisorError};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: ()| Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     let pid = sup.start_child(()).unwrap().unwrap();
    ///     sup.terminate_child(pid).unwrap();
    ///     assert_eq!(sup.terminate_child(pid), Err(SupervisorError::NotFound));
    /// });
    /// ```
    pub fn terminate_child(&self, pid: Pid) -> Result<(), SupervisorError> {
        self.sup.terminate_child(pid)
    }

    /// The dynamic children, in start order ([`SupervisorRef::which_children`]).
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: ()| Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     sup.start_child(()).unwrap();
    ///     assert_eq!(sup.which_children().unwrap()[0].id, "w");
    /// });
    /// ```
    pub fn which_children(&self) -> Result<Vec<ChildInfo>, SupervisorError> {
        self.sup.which_children()
    }

    /// Counts of the dynamic children ([`SupervisorRef::count_children`]; `specs` is 1).
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: ()| Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     sup.start_child(()).unwrap();
    ///     sup.start_child(()).unwrap();
    ///     let n = sup.count_children().unwrap();
    ///     assert_eq!((n.specs, n.active, n.workers), (1, 2, 2));
    /// });
    /// ```
    pub fn count_children(&self) -> Result<ChildCounts, SupervisorError> {
        self.sup.count_children()
    }

    /// Stops the supervisor and its dynamic children ([`SupervisorRef::stop`]).
    ///
    /// ```
    /// use smarm::supervisor::{self, DynamicSpec, Strategy, SupFlags};
    /// smarm::run(|| {
    ///     let spec = DynamicSpec::worker("w", |_: ()| Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
    ///     let sup = supervisor::start_simple(SupFlags::new(Strategy::SimpleOneForOne), spec).unwrap();
    ///     let pid = sup.start_child(()).unwrap().unwrap();
    ///     let m = smarm::monitor(pid);
    ///     sup.stop().unwrap();
    ///     assert!(matches!(smarm::recv_signal(), smarm::Signal::Down(d) if d.monitor == m));
    /// });
    /// ```
    pub fn stop(&self) -> Result<(), SupervisorError> {
        self.sup.stop()
    }
}

// --- supervision tree (introspection) ---

/// One node of a supervision tree, as [`tree`] reports it: a supervisor with its children,
/// or a worker (a leaf).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SupTree {
    /// The process; `None` for a child that is not running ([`ChildState::Restarting`] or
    /// [`ChildState::Undefined`]).
    pub pid: Option<Pid>,
    /// The child's spec id in its supervisor; `None` for the tree's root.
    pub id: Option<String>,
    /// The process's registered name, if any (looked up in the caller's runtime; none from a
    /// plain thread).
    pub name: Option<String>,
    /// The child's state in its supervisor; `Running` for the root.
    pub state: ChildState,
    /// Worker or supervisor; `Supervisor` for the root.
    pub child_type: ChildType,
    /// The children, in start order: a running supervisor's own [`which_children`], each
    /// expanded the same way. Empty for a worker, and for a nested supervisor that ended
    /// while the tree was taken (its `state` still says what its parent last reported).
    ///
    /// [`which_children`]: SupervisorRef::which_children
    pub children: Vec<SupTree>,
}

/// Nesting below which [`tree`] stops expanding (a guard: supervision trees are acyclic, and
/// no real one is this deep).
const TREE_MAX_DEPTH: usize = 64;

/// The supervision tree under the supervisor `pid`: its children and, recursively, those of
/// its nested supervisors (OTP observer's application view, from `which_children`). A
/// snapshot: each supervisor is asked in turn, so the tree is consistent per supervisor, not
/// across them. Works from an actor or a plain thread, as the requests it makes do.
///
/// Errors: [`SupervisorError::NoProc`] if `pid` is not a running supervisor (an actor of
/// another kind is told apart by its mailbox type at once, without a request);
/// [`SupervisorError::CallingSelf`] from the supervisor itself.
///
/// ```
/// use smarm::supervisor::{self, ChildSpec, ChildType, Strategy, SupFlags};
/// smarm::run(|| {
///     let leaf = || ChildSpec::worker("w", || Ok(smarm::spawn_link(|| loop { smarm::recv_signal(); }).pid()));
///     let inner = ChildSpec::supervisor("inner", move || {
///         let sup = supervisor::start_link(SupFlags::new(Strategy::OneForOne), vec![leaf()])
///             .map_err(|e| smarm::DownReason::Custom(e.to_string()))?;
///         Ok(sup.pid())
///     });
///     let flags = SupFlags::new(Strategy::OneForOne).named("top");
///     let sup = supervisor::start_link(flags, vec![inner]).unwrap();
///     let t = supervisor::tree(sup.pid()).unwrap();
///     assert_eq!(t.name.as_deref(), Some("top"));
///     assert_eq!(t.children[0].id.as_deref(), Some("inner"));
///     assert_eq!(t.children[0].child_type, ChildType::Supervisor);
///     assert_eq!(t.children[0].children[0].id.as_deref(), Some("w"));
///     // Not a supervisor: refused without a request.
///     assert!(supervisor::tree(smarm::current_pid()).is_err());
/// });
/// ```
pub fn tree(pid: Pid) -> Result<SupTree, SupervisorError> {
    let sup = SupervisorRef::from_pid(pid).map_err(|_| SupervisorError::NoProc)?;
    let names: HashMap<Pid, String> = crate::registry::registered()
        .into_iter()
        .filter_map(|n| crate::registry::whereis(&n).map(|p| (p, n)))
        .collect();
    let children = sup.which_children()?;
    Ok(SupTree {
        pid: Some(pid),
        id: None,
        name: names.get(&pid).cloned(),
        state: ChildState::Running(pid),
        child_type: ChildType::Supervisor,
        children: children.into_iter().map(|c| subtree(c, &names, 1)).collect(),
    })
}

/// The node for child `c` at nesting `depth`, its own children expanded if it is a running
/// supervisor that still answers.
fn subtree(c: ChildInfo, names: &HashMap<Pid, String>, depth: usize) -> SupTree {
    let pid = c.pid();
    let children = match (c.child_type, pid) {
        (ChildType::Supervisor, Some(p)) if depth < TREE_MAX_DEPTH => SupervisorRef::from_pid(p)
            .ok()
            .and_then(|s| s.which_children().ok())
            .map(|list| list.into_iter().map(|c| subtree(c, names, depth + 1)).collect())
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    SupTree {
        pid,
        name: pid.and_then(|p| names.get(&p).cloned()),
        id: Some(c.id),
        state: c.state,
        child_type: c.child_type,
        children,
    }
}
