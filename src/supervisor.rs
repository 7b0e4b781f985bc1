//! Supervisors: start children from specs, restart them by strategy when they end, within a
//! restart intensity, and shut them down in order.
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
//! A start function that panics fails like one that returns `Err`, with the panic as the
//! reason (smarm's own stop unwinds, kill and exit signals, are not caught: they go on).
//!
//! When a child ends with reason R:
//! - restart decision: `Permanent` always; `Transient` unless R is `Normal` or `Shutdown`;
//!   `Temporary` never (the child is forgotten);
//! - intensity: more than `intensity` restarts within `period` makes the supervisor shut
//!   all children down and exit with `Shutdown` (its own supervisor then decides). `period`
//!   must not be zero ([`SupStartError::ZeroPeriod`]);
//! - strategy: `OneForOne` restarts the child; `OneForAll` stops every other child (reverse
//!   start order) and restarts all in start order; `RestForOne` does that for the children
//!   started after it; `SimpleOneForOne` restarts that dynamic instance. `Temporary`
//!   children stopped with the group are forgotten, not restarted.
//!
//! A restart whose start function fails (OTP's `try_again_restart`): the child is marked as
//! restarting (no pid; the children of its group not started yet stay down) and the
//! supervisor sends itself a message to try again, so the requests and exit signals already
//! queued are handled first. Each attempt is a restart: it counts toward the intensity,
//! which is what ends a start function that keeps failing. A dynamic child is retried the
//! same way.
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

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::channel::{oneshot, OneshotSender};
use crate::mailbox::{Addr, Envelope, Mailbox};
use crate::process::{reason_from_payload, Cancelled, DownReason, Exit, MonitorRef};
use crate::runtime::WaitLimit;
use crate::slot_state::Pid;

/// When a child is restarted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restart {
    /// Always.
    Permanent,
    /// Only after an abnormal exit (not `Normal`, not `Shutdown`).
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
    /// One spec, many dynamic instances ([`SupervisorRef::start_child`]).
    SimpleOneForOne,
}

/// The start function of a child: runs in the supervisor, returns a child linked to it (one
/// it did not link, the supervisor links: see the module doc).
pub type StartFn = Arc<dyn Fn() -> Result<Pid, DownReason> + Send + Sync>;

/// How to start and manage one child.
#[derive(Clone)]
pub struct ChildSpec {
    /// Name within the supervisor.
    pub id: String,
    /// Starts the child (linked to the caller; if not, the supervisor links it) and returns
    /// its pid.
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

impl ChildSpec {
    /// A permanent worker with a 5 s shutdown timeout.
    pub fn worker(id: impl Into<String>, start: impl Fn() -> Result<Pid, DownReason> + Send + Sync + 'static) -> Self {
        ChildSpec {
            id: id.into(),
            start: Arc::new(start),
            restart: Restart::Permanent,
            shutdown: Shutdown::Timeout(Duration::from_secs(5)),
            child_type: ChildType::Worker,
        }
    }

    /// A permanent nested supervisor (shutdown `Infinity`).
    pub fn supervisor(
        id: impl Into<String>,
        start: impl Fn() -> Result<Pid, DownReason> + Send + Sync + 'static,
    ) -> Self {
        ChildSpec {
            id: id.into(),
            start: Arc::new(start),
            restart: Restart::Permanent,
            shutdown: Shutdown::Infinity,
            child_type: ChildType::Supervisor,
        }
    }

    /// Sets the restart type.
    pub fn restart(mut self, r: Restart) -> Self {
        self.restart = r;
        self
    }

    /// Sets the shutdown spec.
    pub fn shutdown(mut self, s: Shutdown) -> Self {
        self.shutdown = s;
        self
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
}

impl SupFlags {
    /// `strategy` with the default intensity (3 restarts per 5 s).
    pub fn new(strategy: Strategy) -> SupFlags {
        SupFlags { strategy, intensity: 3, period: Duration::from_secs(5) }
    }
}

/// Requests a supervisor's mailbox carries.
#[doc(hidden)]
pub enum SupMsg {
    StartChild(OneshotSender<Result<Pid, DownReason>>),
    TerminateChild(Pid, OneshotSender<bool>),
    WhichChildren(OneshotSender<Vec<(String, Pid)>>),
    Stop(OneshotSender<()>),
    /// Retry the failed restart of the child with this key (sent to itself).
    TryAgain(u64),
}

/// Stops the calling runtime's root supervisors in reverse start order (each stops its tree).
pub(crate) fn stop_root_supervisors() {
    while let Some(pid) = crate::process::pop_root_supervisor() {
        // An ended supervisor has no mailbox any more: nothing to stop.
        if let Ok(addr) = crate::task::addr_of::<SupMsg>(pid) {
            SupervisorRef { addr }.stop();
        }
    }
}

/// A handle to a running supervisor.
#[derive(Clone, Debug)]
pub struct SupervisorRef {
    addr: Addr<SupMsg>,
}

struct Child {
    spec: ChildSpec,
    pid: Option<Pid>,
    /// Identifies the child for a `TryAgain` (indices shift when children are removed).
    key: u64,
    /// A restart failed and a `TryAgain` for it is queued (OTP's `{restarting, _}`).
    restarting: bool,
}

struct Sup {
    flags: SupFlags,
    children: Vec<Child>,
    restarts: VecDeque<Instant>,
    mb: Mailbox<SupMsg>,
    next_key: u64,
}

/// Why a supervisor did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SupStartError {
    /// A child's start function failed; the supervisor stopped the children it had started.
    Child {
        /// The failing child's id.
        id: String,
        /// Its reason.
        reason: DownReason,
    },
    /// The supervisor could not be spawned.
    Spawn(String),
    /// `SupFlags::period` is zero (OTP: `invalid_period`): no restart intensity could hold.
    ZeroPeriod,
}

impl fmt::Display for SupStartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SupStartError::Child { id, reason } => write!(f, "supervisor child {id:?} failed to start: {reason}"),
            SupStartError::Spawn(e) => write!(f, "supervisor could not be spawned: {e}"),
            SupStartError::ZeroPeriod => f.write_str("supervisor period must be greater than zero"),
        }
    }
}
impl std::error::Error for SupStartError {}

/// Starts a supervisor linked to the caller; returns once every child has started.
///
/// Fails with [`SupStartError::ZeroPeriod`] for a zero `flags.period` (nothing is spawned),
/// and with [`SupStartError::Child`] when a child's start function returns `Err` or panics.
pub fn start_link(flags: SupFlags, children: Vec<ChildSpec>) -> Result<SupervisorRef, SupStartError> {
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
        let simple = flags.strategy == Strategy::SimpleOneForOne;
        let mut sup = Sup { flags, children: Vec::new(), restarts: VecDeque::new(), mb, next_key: 0 };
        for spec in children {
            if simple {
                // The template of dynamic instances: not started here.
                sup.push_child(spec, None);
                continue;
            }
            match call_start(&spec) {
                Ok(pid) => sup.push_child(spec, Some(pid)),
                Err(reason) => {
                    let id = spec.id.clone();
                    sup.stop_all();
                    let _ = ready_tx.send(Err(SupStartError::Child { id, reason: reason.clone() }));
                    return;
                }
            }
        }
        let _ = ready_tx.send(Ok(()));
        sup.run(parent);
    })
    .map_err(|e| SupStartError::Spawn(e.to_string()))?;
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(_) => return Err(SupStartError::Spawn("the supervisor died during start".into())),
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
/// The child is linked to the supervisor on return, whether or not the start function
/// linked it (the module doc): `link` adds nothing to an existing link, and for a child
/// already gone it queues the trapping supervisor an `Exit { from: child, reason: NoProc }`
/// (or the child's own exit signal is already queued), which the supervisor handles as the
/// child's exit.
#[inline(never)]
fn call_start(spec: &ChildSpec) -> Result<Pid, DownReason> {
    match catch_unwind(AssertUnwindSafe(|| (spec.start)())) {
        Ok(Ok(pid)) => {
            // The supervisor traps exits: `link` reports a dead child as a queued `Exit`,
            // never as an error.
            let _ = crate::process::link(pid);
            Ok(pid)
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
    fn push_child(&mut self, spec: ChildSpec, pid: Option<Pid>) {
        let key = self.next_key;
        self.next_key += 1;
        self.children.push(Child { spec, pid, key, restarting: false });
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
                    let found = self.children.iter().position(|c| c.key == key && c.restarting);
                    if let Some(i) = found {
                        if !self.restart(i) {
                            self.stop_all();
                            exit_self(DownReason::Shutdown);
                        }
                    }
                }
                Envelope::Down(_) => {}
                Envelope::Msg(SupMsg::StartChild(reply)) => {
                    let r = self.start_dynamic();
                    let _ = reply.send(r);
                }
                Envelope::Msg(SupMsg::TerminateChild(pid, reply)) => {
                    let found = self.children.iter().position(|c| c.pid == Some(pid));
                    if let Some(i) = found {
                        self.stop_child(i);
                        if self.flags.strategy == Strategy::SimpleOneForOne
                            || self.children[i].spec.restart == Restart::Temporary
                        {
                            self.children.remove(i);
                        }
                    }
                    let _ = reply.send(found.is_some());
                }
                Envelope::Msg(SupMsg::WhichChildren(reply)) => {
                    let list = self.children.iter().filter_map(|c| c.pid.map(|p| (c.spec.id.clone(), p))).collect();
                    let _ = reply.send(list);
                }
                Envelope::Msg(SupMsg::Stop(done)) => {
                    self.stop_all();
                    let _ = done.send(());
                    return;
                }
            }
        }
    }

    fn start_dynamic(&mut self) -> Result<Pid, DownReason> {
        let spec = match self.children.first() {
            Some(c) if self.flags.strategy == Strategy::SimpleOneForOne => c.spec.clone(),
            _ => return Err(DownReason::Custom("start_child needs a simple_one_for_one supervisor".into())),
        };
        let pid = call_start(&spec)?;
        // The first entry is the template (pid None); instances follow it.
        self.push_child(spec, Some(pid));
        Ok(pid)
    }

    /// Handles a child's exit. Returns false if the restart intensity was exceeded.
    fn child_exited(&mut self, from: Pid, reason: DownReason) -> bool {
        let Some(i) = self.children.iter().position(|c| c.pid == Some(from)) else { return true };
        self.children[i].pid = None;
        let restart = match self.children[i].spec.restart {
            Restart::Permanent => true,
            Restart::Transient => !matches!(reason, DownReason::Normal | DownReason::Shutdown),
            Restart::Temporary => false,
        };
        if !restart {
            if self.children[i].spec.restart == Restart::Temporary || self.flags.strategy == Strategy::SimpleOneForOne {
                self.children.remove(i);
            }
            return true;
        }
        self.restart(i)
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

    /// Restarts child `i` (it ended, or its last restart failed) by the strategy, counting
    /// one restart. Returns false if the restart intensity was exceeded.
    ///
    /// The rest of its group is stopped in reverse start order; the `Temporary` children
    /// among them are forgotten; then the group is started in start order. If a start
    /// function fails, that child is marked restarting, a `TryAgain` for it is queued (the
    /// retry restarts its group again, as OTP's `try_again_restart`), and the children
    /// after it stay down until then.
    fn restart(&mut self, i: usize) -> bool {
        if !self.add_restart() {
            return false;
        }
        let key = self.children[i].key;
        // For `SimpleOneForOne`, `i` is an instance, never the template (index 0, no pid).
        let (lo, mut hi) = match self.flags.strategy {
            Strategy::OneForOne | Strategy::SimpleOneForOne => (i, i + 1),
            Strategy::OneForAll => (0, self.children.len()),
            Strategy::RestForOne => (i, self.children.len()),
        };
        for j in (lo..hi).rev() {
            if j != i {
                self.stop_child(j);
            }
        }
        let mut j = lo;
        while j < hi {
            if self.children[j].spec.restart == Restart::Temporary && self.children[j].key != key {
                self.children.remove(j);
                hi -= 1;
            } else {
                j += 1;
            }
        }
        for j in lo..hi {
            let child = &mut self.children[j];
            match call_start(&child.spec) {
                Ok(pid) => {
                    child.pid = Some(pid);
                    child.restarting = false;
                }
                Err(_) => {
                    child.restarting = true;
                    let again = SupMsg::TryAgain(child.key);
                    self.mb.addr().send(again);
                    return true;
                }
            }
        }
        true
    }

    /// Stops child `i` per its shutdown spec and waits for its end (OTP's `shutdown/2`).
    ///
    /// The child is monitored, and its Down awaited: a child that unlinked itself from the
    /// supervisor sends no exit signal. Then the link is removed, and the exit signal of a
    /// child that was still linked is dropped (once `unlink` returns, it is queued or never
    /// comes), so that it is not taken for a new exit.
    fn stop_child(&mut self, i: usize) {
        let Some(pid) = self.children[i].pid.take() else { return };
        let m = crate::process::monitor(pid);
        match self.children[i].spec.shutdown {
            Shutdown::BrutalKill => {
                crate::process::kill(pid);
                self.await_down(m, None);
            }
            Shutdown::Timeout(d) => {
                crate::process::exit(pid, DownReason::Shutdown);
                if !self.await_down(m, Some(d)) {
                    crate::process::kill(pid);
                    self.await_down(m, None);
                }
            }
            Shutdown::Infinity => {
                crate::process::exit(pid, DownReason::Shutdown);
                self.await_down(m, None);
            }
        }
        self.unlink_flush(pid);
    }

    /// Waits (at most `timeout`, if given) for the Down of monitor `m`; false on timeout.
    fn await_down(&self, m: MonitorRef, timeout: Option<Duration>) -> bool {
        self.mb
            .recv_match_within(WaitLimit::from_timeout(timeout), |e| matches!(e, Envelope::Down(d) if d.monitor == m))
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
        if self.flags.strategy == Strategy::SimpleOneForOne {
            self.stop_dynamic();
        } else {
            for i in (0..self.children.len()).rev() {
                self.stop_child(i);
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
        let Some(spec) = self.children.first().map(|c| c.spec.clone()) else { return };
        let pids: Vec<Pid> = self.children.iter_mut().filter_map(|c| c.pid.take()).collect();
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
            match spec.shutdown {
                Shutdown::BrutalKill => crate::process::kill(pid),
                _ => crate::process::exit(pid, DownReason::Shutdown),
            }
        }
        let mut limit = match spec.shutdown {
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
    pub fn pid(&self) -> Pid {
        self.addr.pid()
    }

    /// Starts a new instance of a `SimpleOneForOne` supervisor's child spec.
    pub fn start_child(&self) -> Result<Pid, DownReason> {
        let (tx, rx) = oneshot();
        self.addr.try_send(SupMsg::StartChild(tx)).map_err(|_| DownReason::NoProc)?;
        rx.recv().unwrap_or(Err(DownReason::NoProc))
    }

    /// Stops a child (per its shutdown spec). Returns false if it is not a child.
    pub fn terminate_child(&self, pid: Pid) -> bool {
        let (tx, rx) = oneshot();
        if self.addr.try_send(SupMsg::TerminateChild(pid, tx)).is_err() {
            return false;
        }
        rx.recv().unwrap_or(false)
    }

    /// The running children: (id, pid), in start order.
    pub fn which_children(&self) -> Vec<(String, Pid)> {
        let (tx, rx) = oneshot();
        if self.addr.try_send(SupMsg::WhichChildren(tx)).is_err() {
            return Vec::new();
        }
        rx.recv().unwrap_or_default()
    }

    /// Stops the supervisor: its children in reverse start order (each per its shutdown
    /// spec), then itself. Returns once done.
    pub fn stop(&self) {
        let (tx, rx) = oneshot();
        if self.addr.try_send(SupMsg::Stop(tx)).is_ok() {
            let _ = rx.recv();
        }
    }
}
