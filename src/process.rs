//! Erlang process semantics: monitors, links, exit signals, `kill`, and the registry of
//! names (the exit reasons themselves are defined in `exit`). `../shared/SEMANTICS.md` is
//! the specification.
//!
//! ```
//! use smarm::{DownReason, Signal};
//! smarm::run(|| {
//!     // A supervisor-like actor: trap exits, link to a worker, monitor another.
//!     smarm::trap_exit(true);
//!     let linked = smarm::spawn_link(|| panic!("worker failed"));
//!     let (watched, m) = smarm::spawn_monitor(|| ());
//!     let mut seen = Vec::new();
//!     for _ in 0..2 {
//!         match smarm::recv_signal() {
//!             Signal::Exit(x) => seen.push((x.from, x.reason)),
//!             Signal::Down(d) if d.monitor == m => seen.push((d.pid, d.reason)),
//!             Signal::Down(_) => unreachable!(),
//!         }
//!     }
//!     seen.sort_by_key(|(pid, _)| *pid == watched.pid());
//!     assert_eq!(seen, [
//!         (linked.pid(), DownReason::Panic("worker failed".into())),
//!         (watched.pid(), DownReason::Normal),
//!     ]);
//! });
//! ```
//!
//! # Per-actor process state
//!
//! The process layer keeps its per-actor state in a side table of the runtime's [`World`],
//! indexed like the slab (the slab slot holds none of it): one `proc` lock per slot (rank
//! `Process`, the lowest) guarding a [`ProcSlot`]: the generation whose exit has been
//! processed, and a lazily allocated [`ProcState`] (signal sink, links, monitors on this
//! actor, trap flag, registered name, pending exit reason, timers, `pg` groups). Actors
//! that never use monitors, links or names never allocate one. A slot's
//! state is reused, with its new generation, when the slot is reused.
//!
//! Only one `proc` lock is held at a time. Signal sinks (mailboxes) rank above it, so a
//! Down can be pushed into a watcher's mailbox while the dying actor's `proc` lock is held:
//! that is what makes `demonitor` exact (see below).
//!
//! # Exit, step by step ([`on_exit`]: the scheduler's exit hook, on the dying actor's stack)
//!
//! 1. Lock own `proc`; mark this generation exited (from here `monitor`/`link` see it as
//!    dead).
//! 2. While holding it, release what others can observe: the registered name (so a
//!    monitor can re-register it as soon as it handles the Down), the `pg` memberships, and
//!    the timers aimed at the actor (a `cancel` after the Down reports them as not pending).
//! 3. Still holding it, push `Down` into every monitor's sink (so a concurrent `demonitor`
//!    either removes the monitor first or returns after the Down is queued).
//! 4. Unlock; drop the cancelled timers' messages; send an exit signal to every linked
//!    actor.
//!
//! Messages the actor sent before it died are already in their receivers' mailboxes, so a
//! Down or Exit always arrives after them (mailboxes are FIFO).
//!
//! # Exit signals ([`exit`], links)
//!
//! A signal with reason R from F to T: if T traps exits it becomes an [`Exit`] message in
//! T's mailbox; otherwise `Normal` is ignored and any other reason stops T with R (its
//! `cancel` byte is set and T is woken; it unwinds at its next runtime call, destructors run).
//! [`kill`] is not trappable and stops T with `Killed`; linked actors then receive `Killed`.
//!
//! `kill` and `Killed` are distinct, as OTP's `kill` signal and `killed` reason: the
//! untrappable signal is a stop request of kind `Cancel::Kill`, made only by [`kill`] (and
//! the runtime's kill after its shutdown timeout); [`DownReason::Killed`] is the reason it
//! produces. Sent as a signal reason (`exit(pid, Killed)`, or the exit signal of a link to
//! a killed actor) `Killed` is an ordinary exit signal: trappable, and ending a non-trapping
//! target with `Killed`.

use std::any::Any;
use std::collections::HashSet;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Arc;

use crate::channel::RecvTimeoutError;
pub use crate::error::LookupError;
pub use crate::exit::DownReason;
pub(crate) use crate::exit::{reason_from_payload, Cancelled};
use crate::raw_mutex::{Rank, RawMutex};
pub(crate) use crate::registry::Registry;
pub use crate::registry::{register, registered, unregister, whereis, RegisterError};
use crate::runtime::{current_shared, Hooks, Shared, WaitLimit};
use crate::slot_state::{Cancel, Pid};

/// Identifies one monitor (each `monitor` call creates an independent one).
///
/// ```
/// smarm::run(|| {
///     let h = smarm::spawn(|| ());
///     let (a, b) = (smarm::monitor(h.pid()), smarm::monitor(h.pid()));
///     assert_ne!(a, b); // two monitors, two Downs
/// });
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct MonitorRef {
    id: u64,
    target: Pid,
}

impl MonitorRef {
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// The monitored actor.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::spawn(|| ());
    ///     assert_eq!(smarm::monitor(h.pid()).target(), h.pid());
    /// });
    /// ```
    pub fn target(&self) -> Pid {
        self.target
    }
}

/// A monitored actor ended (or was not alive when the monitor was set up: `NoProc`).
///
/// ```
/// use smarm::{DownReason, Signal};
/// smarm::run(|| {
///     let (h, m) = smarm::spawn_monitor(|| panic!("boom"));
///     let Signal::Down(d) = smarm::recv_signal() else { unreachable!() };
///     assert_eq!((d.monitor, d.pid, d.reason, d.name), (m, h.pid(), DownReason::Panic("boom".into()), None));
/// });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Down {
    /// The monitor that fired.
    pub monitor: MonitorRef,
    /// The actor that ended. For a [`monitor_name`] of a name that named nobody, a pid that
    /// names no actor.
    pub pid: Pid,
    /// Why.
    pub reason: DownReason,
    /// The registered name the monitor was set up with ([`monitor_name`]; OTP's Down of
    /// `monitor(process, Name)` carries the name); `None` for a monitor of a pid.
    pub name: Option<String>,
}

/// An exit signal received by an actor that traps exits.
///
/// ```
/// use smarm::{DownReason, Signal};
/// smarm::run(|| {
///     smarm::trap_exit(true);
///     let h = smarm::spawn_link(|| ());
///     let Signal::Exit(x) = smarm::recv_signal() else { unreachable!() };
///     assert_eq!((x.from, x.reason), (h.pid(), DownReason::Normal));
/// });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Exit {
    /// Who sent it (the linked actor that ended, or the caller of `exit`).
    pub from: Pid,
    /// Why.
    pub reason: DownReason,
}

/// A signal as delivered into a mailbox.
///
/// ```
/// use smarm::Signal;
/// smarm::run(|| {
///     let (_h, _m) = smarm::spawn_monitor(|| ());
///     assert!(matches!(smarm::recv_signal(), Signal::Down(_)));
/// });
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signal {
    /// A monitor fired.
    Down(Down),
    /// An exit signal (trapping actors only).
    Exit(Exit),
}

/// Where an actor's signals go: its mailbox.
pub(crate) trait SignalSink: Send + Sync {
    /// Appends a signal (FIFO with the actor's messages) and wakes the actor.
    fn push_signal(&self, signal: Signal);
    /// Removes a queued Down of monitor `id` (for `demonitor_flush`).
    fn remove_down(&self, id: u64) -> bool;
    /// The mailbox as `Any`, for typed name lookup.
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
    /// Messages and signals waiting, and the message type's name (introspection); None
    /// for a sink that is not a mailbox.
    fn queue_report(&self) -> Option<(usize, &'static str)> {
        None
    }
    /// The actor a sink belongs to, for a sink that watches on behalf of one (the
    /// introspected `monitored_by`); None if unknown.
    fn owner(&self) -> Option<Pid> {
        None
    }
    /// Decodes a term from another node into the mailbox's type and queues it (feature
    /// `cluster`).
    #[cfg(feature = "cluster")]
    fn push_term(&self, term: eetf::Term) -> Result<(), crate::mailbox::TermRejected>;
}

/// The links of one actor, at most one per peer. A short vector, which an actor with a few
/// links never outgrows; past [`LINKS_IN_VEC`] a hash set, so that adding, finding and
/// removing a link stays O(1) for an actor with many (a supervisor of thousands of dynamic
/// children unlinks each one as it stops them, and learns of each one's end).
///
/// The set is boxed (one more allocation, once, for the rare actor with many links), so that
/// `Links` stays the size of a `Vec` in every actor's `ProcState` (asserted below).
#[allow(clippy::box_collection)]
enum Links {
    Few(Vec<Pid>),
    Many(Box<HashSet<Pid>>),
}

const _: () = assert!(std::mem::size_of::<Links>() == std::mem::size_of::<Vec<Pid>>());

/// The most links kept in a vector: 16 pids of 12 bytes are three cache lines, compared
/// without hashing (a `HashSet` lookup SipHashes the pid first).
const LINKS_IN_VEC: usize = 16;

impl Default for Links {
    fn default() -> Links {
        Links::Few(Vec::new())
    }
}

impl Links {
    fn contains(&self, p: Pid) -> bool {
        match self {
            Links::Few(v) => v.contains(&p),
            Links::Many(set) => set.contains(&p),
        }
    }

    /// Adds the link to `p` unless it exists.
    fn insert(&mut self, p: Pid) {
        match self {
            Links::Few(v) if v.contains(&p) => {}
            Links::Few(v) if v.len() < LINKS_IN_VEC => v.push(p),
            Links::Few(v) => {
                let mut set: Box<HashSet<Pid>> = Box::new(v.drain(..).collect());
                set.insert(p);
                *self = Links::Many(set);
            }
            Links::Many(set) => {
                set.insert(p);
            }
        }
    }

    /// Removes the link to `p`; false if there was none.
    fn remove(&mut self, p: Pid) -> bool {
        match self {
            Links::Few(v) => match v.iter().position(|x| *x == p) {
                Some(i) => {
                    v.swap_remove(i);
                    true
                }
                None => false,
            },
            Links::Many(set) => set.remove(&p),
        }
    }

    /// Removes every link (a reused slot keeps a vector's allocation, not a set's).
    fn clear(&mut self) {
        match self {
            Links::Few(v) => v.clear(),
            Links::Many(_) => *self = Links::default(),
        }
    }

    /// The linked pids, in no particular order.
    fn into_pids(self) -> impl Iterator<Item = Pid> {
        let (few, many) = match self {
            Links::Few(v) => (Some(v), None),
            Links::Many(set) => (None, Some(set)),
        };
        few.into_iter().flatten().chain(many.into_iter().flat_map(|set| *set))
    }
}

pub(crate) struct MonitorEntry {
    id: u64,
    sink: Arc<dyn SignalSink>,
    /// The name of a [`monitor_name`], given back in the Down.
    name: Option<String>,
}

/// Lazily allocated process state of one occupancy of a slot.
pub(crate) struct ProcState {
    pub(crate) gen: u32,
    pub(crate) sink: Option<Arc<dyn SignalSink>>,
    pub(crate) trap_exit: bool,
    links: Links,
    monitors: Vec<MonitorEntry>,
    pub(crate) name: Option<String>,
    /// Reason for a pending `Cancel::Exit`.
    exit_reason: Option<DownReason>,
    /// Timers aimed at this actor, cancelled when it exits.
    pub(crate) timers: Vec<crate::wheel::TimerKey>,
    /// Behaviour data found by pid (a gen_server's exit cell, for `gen_server::named`).
    ext: Option<Arc<dyn Any + Send + Sync>>,
    /// `pg` groups joined (one entry per join), removed on exit.
    groups: Vec<String>,
}

impl ProcState {
    fn reset(&mut self, gen: u32) {
        self.gen = gen;
        self.sink = None;
        self.trap_exit = false;
        self.links.clear();
        self.monitors.clear();
        self.name = None;
        self.exit_reason = None;
        self.timers.clear();
        self.ext = None;
        self.groups.clear();
    }
}

/// The value behind a slot's `proc` lock (in [`World`]'s side table). All-zero is "no
/// state, nothing exited".
pub(crate) struct ProcSlot {
    /// Generation whose exit has been processed (0: none yet).
    exited_gen: u32,
    state: Option<Box<ProcState>>,
}

pub(crate) type ProcLock = RawMutex<ProcSlot>;

impl ProcSlot {
    /// The state of occupancy `gen`, allocating or recycling it.
    pub(crate) fn state_for(&mut self, gen: u32) -> &mut ProcState {
        let st = self.state.get_or_insert_with(|| {
            Box::new(ProcState {
                gen,
                sink: None,
                trap_exit: false,
                links: Links::default(),
                monitors: Vec::new(),
                name: None,
                exit_reason: None,
                timers: Vec::new(),
                ext: None,
                groups: Vec::new(),
            })
        });
        if st.gen != gen {
            st.reset(gen);
        }
        st
    }

    /// The state of occupancy `gen` if it exists.
    pub(crate) fn existing(&mut self, gen: u32) -> Option<&mut ProcState> {
        self.state.as_deref_mut().filter(|s| s.gen == gen)
    }
}

static NEXT_MONITOR: AtomicU64 = AtomicU64::new(1);

/// The process layer's per-runtime state, the scheduler's `Shared::world` (made by
/// [`HOOKS`]): every slot's process state in a side table indexed like the slab, the name
/// registry, the `pg` memberships, and the root supervisors.
pub(crate) struct World {
    /// One `proc` lock per slab slot (see [`ProcTable`]).
    procs: ProcTable,
    pub(crate) registry: Registry,
    /// `pg` memberships of this runtime (one scope).
    pub(crate) groups: RawMutex<crate::groups::Groups>,
    /// Supervisors started by non-supervisors, in start order (stopped in reverse when the
    /// root ends, before the shutdown sweep).
    root_sups: RawMutex<Vec<Pid>>,
    /// The node of this runtime (feature `cluster`), through which monitors, links and exit
    /// signals reach remote pids.
    #[cfg(feature = "cluster")]
    pub(crate) remote: std::sync::OnceLock<Arc<dyn RemoteOps>>,
}

/// What the process layer asks of the node for a remote pid (feature `cluster`; implemented
/// by the cluster module, installed when a node starts).
#[cfg(feature = "cluster")]
pub(crate) trait RemoteOps: Send + Sync {
    /// Monitors the remote `mref.target()` for `me`; the Down goes to `sink` (at once, with
    /// `NoConnection`, if its node cannot be reached).
    fn monitor(&self, me: Pid, sink: Arc<dyn SignalSink>, mref: MonitorRef);
    /// Removes a monitor of a remote pid; true if it was active.
    fn demonitor(&self, mref: MonitorRef) -> bool;
    /// Sends the link request for `me` - `to` (remote); false if its node cannot be reached.
    fn link(&self, me: Pid, to: Pid) -> bool;
    /// Sends the unlink of `me` - `to` (remote).
    fn unlink(&self, me: Pid, to: Pid);
    /// An exit signal from `from` (local) to the remote `to`: of a link (`link`), or of
    /// `exit`/`kill` (`Killed` from `kill` is sent as Erlang's untrappable `kill`).
    fn exit_signal(&self, from: Pid, to: Pid, reason: &DownReason, link: bool, kill: bool);
    /// The node, as `Any` (the cluster module's own state).
    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync>;
}

/// The node's hooks, if a node runs in `sh` and `pid` is remote.
#[cfg(feature = "cluster")]
fn remote_ops(sh: &Shared, pid: Pid) -> Option<&Arc<dyn RemoteOps>> {
    if !pid.is_remote() {
        return None;
    }
    world(sh).remote.get()
}

impl World {
    fn new_boxed(max_actors: usize) -> Box<dyn Any + Send + Sync> {
        Box::new(World {
            procs: ProcTable::new(max_actors),
            registry: Registry::new(),
            groups: RawMutex::new(Rank::Pg, Default::default()),
            root_sups: RawMutex::new(Rank::Primitive, Vec::new()),
            #[cfg(feature = "cluster")]
            remote: std::sync::OnceLock::new(),
        })
    }

    /// The `proc` lock of slot `index` (which the slab bounds-checked).
    #[inline]
    fn proc(&self, index: u32) -> &ProcLock {
        self.procs.get(index as usize)
    }
}

/// Slots per chunk of the [`ProcTable`].
const PROC_CHUNK: usize = 256;

/// A chunk of `proc` locks, allocated zeroed (all-zero is "no state").
struct ProcChunk([ProcLock; PROC_CHUNK]);

/// The side table of `proc` locks, in chunks allocated on first use: a runtime that touches
/// the process state of a few slots allocates a few small zeroed chunks from the heap, not
/// a table sized to `max_actors` (which would cost a mapping per runtime).
///
/// A chunk pointer goes from null to its chunk once (a CAS: a racing allocation of the same
/// chunk loses and frees its copy) and stays until the table is dropped, so a `&ProcLock`
/// lives as long as the table.
struct ProcTable {
    chunks: Box<[AtomicPtr<ProcChunk>]>,
}

impl ProcTable {
    fn new(slots: usize) -> ProcTable {
        ProcTable { chunks: (0..slots.div_ceil(PROC_CHUNK)).map(|_| AtomicPtr::new(core::ptr::null_mut())).collect() }
    }

    #[inline]
    fn get(&self, i: usize) -> &ProcLock {
        let cell = &self.chunks[i / PROC_CHUNK];
        // Acquire: pairs with the AcqRel CAS that published the chunk, so its zeroed memory
        // (and any state a locker wrote, through the locks themselves) is visible.
        let mut chunk = cell.load(Ordering::Acquire);
        if chunk.is_null() {
            chunk = Self::alloc_chunk(cell);
        }
        // SAFETY: a published chunk lives until the table is dropped, which needs `&mut self`.
        unsafe { &(*chunk).0[i % PROC_CHUNK] }
    }

    #[cold]
    #[inline(never)]
    fn alloc_chunk(cell: &AtomicPtr<ProcChunk>) -> *mut ProcChunk {
        let layout = std::alloc::Layout::new::<ProcChunk>();
        // SAFETY: a non-zero-size layout; all-zero bytes are a valid `ProcLock` (its
        // `ZeroValid` impl), so the zeroed block is a valid, initialised chunk.
        let new = unsafe { std::alloc::alloc_zeroed(layout) } as *mut ProcChunk;
        if new.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // AcqRel on success: Release publishes the zeroed chunk to `get`'s Acquire. Acquire on
        // failure: we use the winner's chunk.
        match cell.compare_exchange(core::ptr::null_mut(), new, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => new,
            Err(winner) => {
                // SAFETY: our own allocation, never published.
                unsafe { std::alloc::dealloc(new as *mut u8, layout) };
                winner
            }
        }
    }
}

impl Drop for ProcTable {
    fn drop(&mut self) {
        let layout = std::alloc::Layout::new::<ProcChunk>();
        for cell in self.chunks.iter_mut() {
            let chunk = *cell.get_mut();
            if !chunk.is_null() {
                // SAFETY: a chunk this table allocated and published; nothing uses the table
                // any more (`&mut self`), so its locks are dropped once and freed.
                unsafe {
                    core::ptr::drop_in_place(chunk);
                    std::alloc::dealloc(chunk as *mut u8, layout);
                }
            }
        }
    }
}

// SAFETY: a `ProcLock` is a `RawMutex<ProcSlot>`: all-zero is an unlocked flag, rank
// `Process` (= 0), exited generation 0 and `Option<Box<_>>::None` (a null pointer), whose
// drop is a no-op.
unsafe impl crate::zeroed::ZeroValid for ProcLock {}

/// The scheduler's hooks into the process layer (passed to `Runtime::run_hooked`).
pub(crate) static HOOKS: Hooks =
    Hooks { new_world: World::new_boxed, on_exit, exit_reason: pending_exit_reason, name_of: registered_name };

/// The name `pid` is registered under (for the scheduler's panic report). Takes the actor's
/// process lock: called from the panicking actor itself, which never runs user code (and so
/// never panics) while holding it.
fn registered_name(sh: &Shared, pid: Pid) -> Option<String> {
    proc_lock(sh, pid)?.lock().existing(pid.generation())?.name.clone()
}

/// The process layer's state of `sh`.
#[inline]
pub(crate) fn world(sh: &Shared) -> &World {
    sh.world::<World>()
}

/// What the process layer knows of one live actor (for `info`).
pub(crate) struct ProcReport {
    pub(crate) name: Option<String>,
    pub(crate) trap_exit: bool,
    pub(crate) links: Vec<Pid>,
    /// Watchers of this actor: their pid where the sink knows it.
    pub(crate) monitored_by: Vec<Option<Pid>>,
    /// Mailbox length and message type, if the actor has a mailbox.
    pub(crate) mailbox: Option<(usize, &'static str)>,
    pub(crate) groups: Vec<String>,
}

/// The process layer's report on `pid`, if it is live (one `proc` lock round, then the
/// mailbox's own lock for its length).
pub(crate) fn proc_report(sh: &Shared, pid: Pid) -> Option<ProcReport> {
    let lock = proc_lock(sh, pid)?;
    let (mut report, sink) = {
        let mut g = lock.lock();
        if g.exited_gen == pid.generation() {
            return None;
        }
        match g.state.as_mut().filter(|st| st.gen == pid.generation()) {
            None => (
                ProcReport {
                    name: None,
                    trap_exit: false,
                    links: Vec::new(),
                    monitored_by: Vec::new(),
                    mailbox: None,
                    groups: Vec::new(),
                },
                None,
            ),
            Some(st) => {
                let links = match &st.links {
                    Links::Few(v) => v.clone(),
                    Links::Many(set) => set.iter().copied().collect(),
                };
                (
                    ProcReport {
                        name: st.name.clone(),
                        trap_exit: st.trap_exit,
                        links,
                        monitored_by: st.monitors.iter().map(|m| m.sink.owner()).collect(),
                        mailbox: None,
                        groups: st.groups.clone(),
                    },
                    st.sink.clone(),
                )
            }
        }
    };
    // Outside the `proc` lock: no lock is held while the mailbox is locked.
    report.mailbox = sink.and_then(|s| s.queue_report());
    Some(report)
}

pub(crate) fn proc_lock(sh: &Shared, pid: Pid) -> Option<&ProcLock> {
    // A pid of another runtime names no actor here, whatever its index.
    if !sh.slab.owns(pid) {
        return None;
    }
    sh.slab.try_slot(pid.index())?;
    Some(world(sh).proc(pid.index()))
}

/// True if `pid` is alive and its exit has not been processed, judged under its proc lock.
pub(crate) fn alive_locked(sh: &Shared, slot: &ProcSlot, pid: Pid) -> bool {
    slot.exited_gen != pid.generation() && sh.slab.is_live(pid)
}

/// The calling actor's runtime and pid, or a panic naming `what`.
pub(crate) fn me(what: &str) -> (&'static Shared, Pid) {
    match current_shared() {
        // SAFETY: the runtime outlives its running actor; 'static is not observable past it.
        Some((sh, pid)) => (unsafe { &*sh }, pid),
        None => panic!("smarm::{what} called outside an actor"),
    }
}

/// The sink of the calling actor, creating its signal-only mailbox if it has none.
fn own_sink(sh: &Shared, pid: Pid) -> Arc<dyn SignalSink> {
    let lock = proc_lock(sh, pid).expect("own slot");
    let mut slot = lock.lock();
    let st = slot.state_for(pid.generation());
    if let Some(s) = &st.sink {
        return s.clone();
    }
    let mb: Arc<dyn SignalSink> = crate::mailbox::new_signal_box();
    st.sink = Some(mb.clone());
    mb
}

/// Installs `sink` as the signal sink of a not-yet-published actor (spawn_actor), and sets
/// up the optional link with `link_to` (the spawning actor: spawn_link).
///
/// Both halves of the link exist before the child is published: an exit signal is only
/// delivered to a holder of the link's half ([`send_link_exit`]), so a child that ran and
/// died on another thread before the parent's half was added would go unreported.
pub(crate) fn setup_child(sh: &Shared, child: Pid, sink: Option<Arc<dyn SignalSink>>, link_to: Option<Pid>) {
    {
        let lock = proc_lock(sh, child).expect("child slot");
        let mut slot = lock.lock();
        let st = slot.state_for(child.generation());
        st.sink = sink;
        if let Some(p) = link_to {
            st.links.insert(p);
        }
    }
    if let Some(parent) = link_to {
        // One proc lock at a time: the child's is released above.
        add_link(sh, parent, child);
    }
}

/// Adds a monitor on a not-yet-published child (spawn_monitor).
pub(crate) fn setup_child_monitor(sh: &Shared, child: Pid, watcher_sink: Arc<dyn SignalSink>) -> MonitorRef {
    // Relaxed: only uniqueness matters, which the RMW gives in any ordering.
    let id = NEXT_MONITOR.fetch_add(1, Ordering::Relaxed);
    let lock = proc_lock(sh, child).expect("child slot");
    let mut slot = lock.lock();
    slot.state_for(child.generation()).monitors.push(MonitorEntry { id, sink: watcher_sink, name: None });
    MonitorRef { id, target: child }
}

/// Adds `child` to the links of `parent` (the parent's half of a spawn_link).
fn add_link(sh: &Shared, parent: Pid, child: Pid) {
    if let Some(lock) = proc_lock(sh, parent) {
        let mut slot = lock.lock();
        slot.state_for(parent.generation()).links.insert(child);
    }
}

/// The calling actor's sink (for spawn_monitor).
pub(crate) fn current_sink() -> Arc<dyn SignalSink> {
    let (sh, pid) = me("spawn_monitor");
    own_sink(sh, pid)
}

/// Monitors `pid`: when it ends, a [`Down`] is delivered to the caller's mailbox (plain
/// `spawn` actors: read it with [`recv_signal`]). Monitoring a dead or stale pid delivers
/// `Down { reason: NoProc }` at once. Each call creates an independent monitor.
///
/// # Panics
/// Outside an actor.
///
/// ```
/// use smarm::{DownReason, Signal};
/// smarm::run(|| {
///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || go_rx.recv().unwrap());
///     let m = smarm::monitor(h.pid());
///     go_tx.send(()).unwrap();
///     let Signal::Down(d) = smarm::recv_signal() else { unreachable!() };
///     assert_eq!((d.monitor, d.reason), (m, DownReason::Normal));
///     // Already gone: NoProc at once.
///     smarm::monitor(h.pid());
///     let Signal::Down(d) = smarm::recv_signal() else { unreachable!() };
///     assert_eq!(d.reason, DownReason::NoProc);
/// });
/// ```
pub fn monitor(pid: Pid) -> MonitorRef {
    let (sh, me) = me("monitor");
    monitor_as(sh, me, pid, None)
}

/// Monitors the actor registered under `name` now (OTP's `monitor(process, Name)`): the
/// name is resolved once, and the monitor then follows that actor, as a [`monitor`] of its
/// pid does (unregistering or re-registering the name later does not move it). Its [`Down`]
/// carries the name. If no live actor has the name, `Down { reason: NoProc }` is delivered at
/// once, with a `pid` that names no actor.
///
/// ```
/// use smarm::{DownReason, Signal};
/// smarm::run(|| {
///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || go_rx.recv().unwrap());
///     smarm::register("worker", h.pid()).unwrap();
///     let m = smarm::monitor_name("worker");
///     assert_eq!(m.target(), h.pid());
///     go_tx.send(()).unwrap();
///     let Signal::Down(d) = smarm::recv_signal() else { panic!("expected a Down") };
///     assert_eq!((d.monitor, d.name.as_deref(), d.reason), (m, Some("worker"), DownReason::Normal));
///
///     // Nobody has the name (any more): NoProc at once.
///     smarm::monitor_name("worker");
///     let Signal::Down(d) = smarm::recv_signal() else { panic!("expected a Down") };
///     assert_eq!((d.name.as_deref(), d.reason), (Some("worker"), DownReason::NoProc));
/// });
/// ```
///
/// # Panics
/// Outside an actor (the Down needs a mailbox to go to).
pub fn monitor_name(name: &str) -> MonitorRef {
    let (sh, me) = me("monitor_name");
    let pid = crate::registry::whereis_in(sh, name).unwrap_or(Pid::NOBODY);
    monitor_as(sh, me, pid, Some(name.to_string()))
}

/// A monitor of `pid` by `me`, set up with `name` ([`monitor_name`]) or none ([`monitor`]).
fn monitor_as(sh: &Shared, me: Pid, pid: Pid, name: Option<String>) -> MonitorRef {
    let sink = own_sink(sh, me);
    // Relaxed: only uniqueness matters, which the RMW gives in any ordering.
    let id = NEXT_MONITOR.fetch_add(1, Ordering::Relaxed);
    let mref = MonitorRef { id, target: pid };
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, pid) {
        r.monitor(me, sink, mref);
        return mref;
    }
    if let Some(lock) = proc_lock(sh, pid) {
        let mut slot = lock.lock();
        if alive_locked(sh, &slot, pid) {
            slot.state_for(pid.generation()).monitors.push(MonitorEntry { id, sink, name });
            return mref;
        }
    }
    sink.push_signal(Signal::Down(Down { monitor: mref, pid, reason: DownReason::NoProc, name }));
    mref
}

/// Removes a monitor. After it returns no new Down for `mref` is delivered (one already
/// queued stays; see [`demonitor_flush`]). Returns true if the monitor was still active.
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || go_rx.recv().unwrap());
///     let m = smarm::monitor(h.pid());
///     assert!(smarm::demonitor(m));
///     go_tx.send(()).unwrap();
///     h.join().unwrap();
///     assert!(smarm::recv_signal_timeout(Duration::ZERO).is_err()); // no Down
///     assert!(!smarm::demonitor(m)); // no longer active
/// });
/// ```
pub fn demonitor(mref: MonitorRef) -> bool {
    let (sh, _) = me("demonitor");
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, mref.target) {
        return r.demonitor(mref);
    }
    demonitor_in(sh, mref)
}

/// Removes the monitor `mref` of a local actor of `sh`.
pub(crate) fn demonitor_in(sh: &Shared, mref: MonitorRef) -> bool {
    let Some(lock) = proc_lock(sh, mref.target) else { return false };
    let mut slot = lock.lock();
    match slot.existing(mref.target.generation()) {
        Some(st) => match st.monitors.iter().position(|m| m.id == mref.id) {
            Some(i) => {
                st.monitors.swap_remove(i);
                true
            }
            None => false,
        },
        None => false,
    }
}

/// [`demonitor`], and also removes a Down for `mref` already in the caller's mailbox.
///
/// ```
/// use std::time::Duration;
/// smarm::run(|| {
///     let h = smarm::spawn(|| ());
///     let m = smarm::monitor(h.pid());
///     h.join().unwrap();
///     // The Down may already be queued: flush removes it too.
///     assert!(smarm::demonitor_flush(m));
///     assert!(smarm::recv_signal_timeout(Duration::ZERO).is_err());
/// });
/// ```
pub fn demonitor_flush(mref: MonitorRef) -> bool {
    let active = demonitor(mref);
    let (sh, me) = me("demonitor_flush");
    let removed = own_sink(sh, me).remove_down(mref.id);
    active || removed
}

/// Links the caller and `pid` (bidirectional; at most one link per pair). If `pid` is not
/// alive: a trapping caller receives `Exit { from: pid, reason: NoProc }`, a non-trapping
/// caller gets `Err(DownReason::NoProc)`.
///
/// ```
/// use smarm::{DownReason, Signal};
/// smarm::run(|| {
///     smarm::trap_exit(true);
///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || {
///         go_rx.recv().unwrap();
///         panic!("linked boom");
///     });
///     smarm::link(h.pid()).unwrap();
///     go_tx.send(()).unwrap();
///     let Signal::Exit(x) = smarm::recv_signal() else { unreachable!() };
///     assert_eq!((x.from, x.reason), (h.pid(), DownReason::Panic("linked boom".into())));
/// });
/// ```
pub fn link(pid: Pid) -> Result<(), DownReason> {
    let (sh, me) = me("link");
    if pid == me {
        return Ok(());
    }
    // Own half first: `pid`'s exit signal is delivered only to a holder of the half
    // ([`send_link_exit`]), so it must exist before `pid` can see the link and die with it.
    let had_half = {
        let mut slot = proc_lock(sh, me).expect("own slot").lock();
        let st = slot.state_for(me.generation());
        let had = st.links.contains(pid);
        if !had {
            st.links.insert(pid);
        }
        had
    };
    #[cfg(feature = "cluster")]
    let remote = remote_ops(sh, pid);
    #[cfg(not(feature = "cluster"))]
    let remote: Option<&()> = None;
    let linked = match proc_lock(sh, pid) {
        #[cfg(feature = "cluster")]
        _ if remote.is_some() => remote.is_some_and(|r| had_half || r.link(me, pid)),
        Some(lock) => {
            let mut slot = lock.lock();
            if alive_locked(sh, &slot, pid) {
                slot.state_for(pid.generation()).links.insert(me);
                true
            } else {
                false
            }
        }
        None => false,
    };
    if linked {
        return Ok(());
    }
    // `pid` was already dead (or, remote, its node unreachable): it never held our half, so
    // no signal of this link can come.
    let trapping = {
        let mut slot = proc_lock(sh, me).expect("own slot").lock();
        let st = slot.state_for(me.generation());
        if !had_half {
            st.links.remove(pid);
        }
        st.trap_exit
    };
    let reason = if remote.is_some() { DownReason::NoConnection } else { DownReason::NoProc };
    if trapping {
        own_sink(sh, me).push_signal(Signal::Exit(Exit { from: pid, reason }));
        Ok(())
    } else {
        Err(reason)
    }
}

/// Removes the link between the caller and `pid`, if any. After it returns, the link has
/// no further effect.
///
/// ```
/// smarm::run(|| {
///     let (go_tx, go_rx) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn_link(move || {
///         go_rx.recv().unwrap();
///         panic!("not our problem any more");
///     });
///     smarm::unlink(h.pid());
///     go_tx.send(()).unwrap();
///     assert!(h.join().is_err()); // it died; the caller did not
/// });
/// ```
pub fn unlink(pid: Pid) {
    let (sh, me) = me("unlink");
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, pid) {
        let had = proc_lock(sh, me)
            .is_some_and(|l| l.lock().existing(me.generation()).is_some_and(|st| st.links.remove(pid)));
        if had {
            r.unlink(me, pid);
        }
        return;
    }
    for (a, b) in [(me, pid), (pid, me)] {
        if let Some(lock) = proc_lock(sh, a) {
            let mut slot = lock.lock();
            if let Some(st) = slot.existing(a.generation()) {
                st.links.remove(b);
            }
        }
    }
}

/// Sets whether the caller traps exits (receives exit signals as [`Exit`] messages instead of
/// dying). Returns the previous setting.
///
/// ```
/// smarm::run(|| {
///     assert!(!smarm::trap_exit(true)); // was off
///     assert!(smarm::trap_exit(false)); // was on
/// });
/// ```
pub fn trap_exit(on: bool) -> bool {
    let (sh, me) = me("trap_exit");
    if on {
        own_sink(sh, me); // a trapping actor needs somewhere to receive Exit
    }
    let mut slot = proc_lock(sh, me).expect("own slot").lock();
    let st = slot.state_for(me.generation());
    std::mem::replace(&mut st.trap_exit, on)
}

/// Sends an exit signal with `reason` to `pid` (see the module doc). `exit(pid, Normal)` is
/// ignored by a non-trapping target. Every reason is trappable, `Killed` included: as OTP's
/// `exit(Pid, killed)`, it is an ordinary exit signal (a trapping target receives
/// `Exit { from, reason: Killed }`, a non-trapping one ends with `Killed`); the untrappable
/// signal is [`kill`].
///
/// To the caller itself: a trapping caller receives the signal as a message and the call
/// returns; otherwise the caller ends at once with `reason` (`Normal` included, as
/// `exit(self(), normal)`) and the call does not return, unless the caller is already
/// unwinding (a destructor running during a panic): then it returns and the panic stays the
/// exit reason.
///
/// ```
/// use smarm::DownReason;
/// smarm::run(|| {
///     let (_keep, wait) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || wait.recv().unwrap());
///     smarm::exit(h.pid(), DownReason::Custom("enough".into()));
///     assert_eq!(h.join(), Err(DownReason::Custom("enough".into())));
/// });
/// ```
pub fn exit(pid: Pid, reason: DownReason) {
    let (sh, me) = me("exit");
    if pid == me {
        let trapping =
            proc_lock(sh, me).is_some_and(|l| l.lock().existing(me.generation()).is_some_and(|s| s.trap_exit));
        if trapping {
            own_sink(sh, me).push_signal(Signal::Exit(Exit { from: me, reason }));
            return;
        }
        // A stop request like any exit signal's (the first one decides the reason), raised
        // at once: a `catch_unwind` cannot swallow it for good, the next runtime call raises
        // it again.
        stop(sh, me, Cancel::Exit, Some(reason));
        crate::runtime::check_cancelled_current();
        return;
    }
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, pid) {
        r.exit_signal(me, pid, &reason, false, false);
        return;
    }
    send_exit_signal(sh, me, pid, reason);
}

/// Stops `pid` with [`DownReason::Killed`]; not trappable (OTP's `exit(Pid, kill)`): the
/// target ends with `Killed`, and its links receive an ordinary exit signal with reason
/// `Killed`, which a trapping linked actor receives as an [`Exit`] message (OTP's `killed`).
/// Delivered at the target's next runtime call (at once if it is parked) as an unwind that
/// runs destructors and that a `catch_unwind` cannot swallow for good (it is raised again at
/// the next runtime call). An actor spinning without runtime calls is out of reach until it
/// makes one.
///
/// `kill(current_pid())` does not return: the caller unwinds from the call (unless it is
/// already unwinding, as for [`exit`] to itself).
///
/// ```
/// use smarm::DownReason;
/// smarm::run(|| {
///     let h = smarm::spawn(|| {
///         smarm::trap_exit(true); // no help against kill
///         loop {
///             smarm::yield_now();
///         }
///     });
///     smarm::kill(h.pid());
///     assert_eq!(h.join(), Err(DownReason::Killed));
/// });
/// ```
pub fn kill(pid: Pid) {
    let (sh, me) = me("kill");
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, pid) {
        r.exit_signal(me, pid, &DownReason::Killed, false, true);
        return;
    }
    stop(sh, pid, Cancel::Kill, None);
    if pid == me {
        crate::runtime::check_cancelled_current();
    }
}

/// Stops `pid` with `reason` as if by an untrappable exit signal (graceful runtime shutdown).
pub(crate) fn stop_with(sh: &Shared, pid: Pid, reason: DownReason) {
    stop(sh, pid, Cancel::Exit, Some(reason));
}

/// Records a stop request for the live actor `pid` in its state `st` (its process slot
/// locked): the first request decides the exit reason, as in OTP, where the first exit
/// signal kills the process and later ones reach a dead one; a kill still overrides an
/// earlier request (a stop that is taking too long is forced: shutdown timeouts).
///
/// The code is raised with a CAS ([`CancelCell::raise`](crate::slot_state::CancelCell::raise)), not stored: the runtime's shutdown sweep
/// and a spawn racing it raise codes without this lock. The reason is recorded only when
/// this request was the first; the target reads it under the lock we still hold, so it
/// cannot see the code and miss the reason.
fn request_stop(sh: &Shared, st: &mut ProcState, pid: Pid, code: Cancel, reason: Option<DownReason>) {
    let cancel = &sh.slab.slot(pid.index()).cancel;
    if cancel.raise(code) == Some(Cancel::None) {
        if let Some(r) = reason {
            st.exit_reason = Some(r);
        }
    }
}

/// Kills the local actor `pid` (an untrappable `kill` from another node).
#[cfg(feature = "cluster")]
pub(crate) fn kill_in(sh: &Shared, pid: Pid) {
    stop(sh, pid, Cancel::Kill, None);
}

/// A monitor of the local actor `target` whose Down goes to `sink` (a remote watcher's proxy);
/// `None` if `target` is not alive (feature `cluster`).
#[cfg(feature = "cluster")]
pub(crate) fn monitor_for(sh: &Shared, target: Pid, sink: Arc<dyn SignalSink>) -> Option<MonitorRef> {
    let lock = proc_lock(sh, target)?;
    let mut slot = lock.lock();
    if !alive_locked(sh, &slot, target) {
        return None;
    }
    // Relaxed: only uniqueness matters.
    let id = NEXT_MONITOR.fetch_add(1, Ordering::Relaxed);
    slot.state_for(target.generation()).monitors.push(MonitorEntry { id, sink, name: None });
    Some(MonitorRef { id, target })
}

/// A new monitor reference for a monitor of the remote `target` (feature `cluster`).
#[cfg(feature = "cluster")]
pub(crate) fn new_monitor_ref(target: Pid) -> MonitorRef {
    // Relaxed: only uniqueness matters.
    MonitorRef { id: NEXT_MONITOR.fetch_add(1, Ordering::Relaxed), target }
}

/// Adds the remote `peer` to the links of the local actor `pid` (an incoming LINK); false
/// if `pid` is not alive (feature `cluster`).
#[cfg(feature = "cluster")]
pub(crate) fn add_remote_link(sh: &Shared, pid: Pid, peer: Pid) -> bool {
    let Some(lock) = proc_lock(sh, pid) else { return false };
    let mut slot = lock.lock();
    if !alive_locked(sh, &slot, pid) {
        return false;
    }
    slot.state_for(pid.generation()).links.insert(peer);
    true
}

/// Removes the remote `peer` from the links of the local actor `pid` (an incoming UNLINK_ID;
/// feature `cluster`).
#[cfg(feature = "cluster")]
pub(crate) fn remove_link(sh: &Shared, pid: Pid, peer: Pid) -> bool {
    proc_lock(sh, pid).is_some_and(|l| l.lock().existing(pid.generation()).is_some_and(|st| st.links.remove(peer)))
}

/// Marks `pid` for stopping and wakes it.
fn stop(sh: &Shared, pid: Pid, code: Cancel, reason: Option<DownReason>) {
    let Some(lock) = proc_lock(sh, pid) else { return };
    {
        let mut slot = lock.lock();
        if !alive_locked(sh, &slot, pid) {
            return;
        }
        request_stop(sh, slot.state_for(pid.generation()), pid, code, reason);
    }
    sh.wake(pid);
}

/// Delivers an exit signal from `from` to `to` with `reason`.
pub(crate) fn send_exit_signal(sh: &Shared, from: Pid, to: Pid, reason: DownReason) {
    let Some(lock) = proc_lock(sh, to) else { return };
    let sink = {
        let mut slot = lock.lock();
        if !alive_locked(sh, &slot, to) {
            return;
        }
        match slot.existing(to.generation()) {
            Some(st) if st.trap_exit => st.sink.clone(),
            _ => None,
        }
    };
    match sink {
        Some(sink) => sink.push_signal(Signal::Exit(Exit { from, reason })),
        None if reason == DownReason::Normal => {}
        None => stop(sh, to, Cancel::Exit, Some(reason)),
    }
}

/// The reason for the caller's pending `Cancel::Exit`.
pub(crate) fn pending_exit_reason(sh: &Shared, pid: Pid) -> DownReason {
    proc_lock(sh, pid)
        .and_then(|l| l.lock().existing(pid.generation()).and_then(|s| s.exit_reason.clone()))
        .unwrap_or(DownReason::Killed)
}

/// Exit steps 1-4 (module doc), run on the dying actor's own stack.
pub(crate) fn on_exit(sh: &Shared, pid: Pid, reason: &DownReason) {
    let w = world(sh);
    let lock = w.proc(pid.index());
    let (name, links, timers) = {
        let mut slot = lock.lock();
        slot.exited_gen = pid.generation();
        let Some(st) = slot.existing(pid.generation()) else { return };
        let name = st.name.take();
        if let Some(n) = &name {
            // Step 2: the name is released before step 3 publishes the Downs.
            w.registry.release(n, pid);
        }
        if !st.groups.is_empty() {
            // pg memberships are visible resources too: gone before any Down is queued.
            let groups = std::mem::take(&mut st.groups);
            w.groups.lock().remove_member(pid, &groups);
        }
        // Timers aimed at the actor go before anyone learns it is gone (a `cancel_timer` after
        // the Down must report the timer as not pending). Timers rank above Process. Their
        // actions (messages with user Drop code) are dropped after the locks are released.
        let cancelled: Vec<_> = st.timers.drain(..).filter_map(|key| sh.timers.take(key)).collect();
        for m in st.monitors.drain(..) {
            m.sink.push_signal(Signal::Down(Down {
                monitor: MonitorRef { id: m.id, target: pid },
                pid,
                reason: reason.clone(),
                name: m.name,
            }));
        }
        st.sink = None;
        st.ext = None;
        (name, std::mem::take(&mut st.links), cancelled)
    };
    drop(name);
    // Their messages' Drops are user code, run here in the actor's entry, which cannot
    // unwind: each under `catch_unwind`, one at a time.
    for action in timers {
        crate::runtime::user_drop::drop_caught(action);
    }
    // Links: `Killed` propagates as `Killed` (trappable for the receivers).
    for l in links.into_pids() {
        send_link_exit(sh, pid, l, reason);
    }
}

/// The exit signal of a link: delivered only if `to` still holds its half of the link, and
/// in the same critical section of `to`'s proc lock that removes it. `unlink` removes the
/// half under that lock too, so once `unlink` has returned no signal of the link can reach
/// the caller any more (SEMANTICS.md, links): either it was delivered (queued, or the stop
/// requested) before, or it never will be.
pub(crate) fn send_link_exit(sh: &Shared, from: Pid, to: Pid, reason: &DownReason) {
    #[cfg(feature = "cluster")]
    if let Some(r) = remote_ops(sh, to) {
        r.exit_signal(from, to, reason, true, false);
        return;
    }
    let Some(lock) = proc_lock(sh, to) else { return };
    let stop_target = {
        let mut slot = lock.lock();
        if !alive_locked(sh, &slot, to) {
            return;
        }
        let Some(st) = slot.existing(to.generation()) else { return };
        if !st.links.remove(from) {
            return; // unlinked meanwhile
        }
        if st.trap_exit {
            if let Some(sink) = &st.sink {
                // Mailbox locks rank above Process: queued under this lock.
                sink.push_signal(Signal::Exit(Exit { from, reason: reason.clone() }));
            }
            false
        } else if *reason == DownReason::Normal {
            false
        } else {
            request_stop(sh, st, to, Cancel::Exit, Some(reason.clone()));
            true
        }
    };
    if stop_target {
        sh.wake(to);
    }
}

/// Registers a timer aimed at `pid`, cancelled when it exits. Returns false if `pid` is dead.
pub(crate) fn track_timer(sh: &Shared, pid: Pid, key: crate::wheel::TimerKey) -> bool {
    let Some(lock) = proc_lock(sh, pid) else { return false };
    let mut slot = lock.lock();
    if !alive_locked(sh, &slot, pid) {
        return false;
    }
    let timers = &mut slot.state_for(pid.generation()).timers;
    // Fired and cancelled timers leave their keys here; drop those before the list would
    // grow, so an actor that lives on with a periodic timer keeps a bounded list. Then at
    // most half full, so the pruning stays amortised O(1) per timer. Timers rank above
    // Process (as in `on_exit`).
    if timers.len() == timers.capacity() && timers.len() >= 8 {
        sh.timers.retain_pending(timers);
        timers.reserve(timers.len());
    }
    timers.push(key);
    true
}

/// The mailbox of a live actor (for typed lookup by pid or name), as `Any`: `NoProc` if
/// `pid` is not alive, `NoMailbox` if it has none yet (a plain `spawn` actor that never
/// used signals).
pub(crate) fn sink_of(sh: &Shared, pid: Pid) -> Result<Arc<dyn Any + Send + Sync>, LookupError> {
    let mut slot = proc_lock(sh, pid).ok_or(LookupError::NoProc)?.lock();
    if !alive_locked(sh, &slot, pid) {
        return Err(LookupError::NoProc);
    }
    let sink = slot.existing(pid.generation()).and_then(|s| s.sink.clone()).ok_or(LookupError::NoMailbox)?;
    drop(slot);
    Ok(sink.as_any())
}

/// The signal sink (mailbox) of a live actor: `NoProc` if `pid` is not alive, `NoMailbox` if
/// it has none (feature `cluster`: where a term from another node is delivered).
#[cfg(feature = "cluster")]
pub(crate) fn signal_sink_of(sh: &Shared, pid: Pid) -> Result<Arc<dyn SignalSink>, LookupError> {
    let mut slot = proc_lock(sh, pid).ok_or(LookupError::NoProc)?.lock();
    if !alive_locked(sh, &slot, pid) {
        return Err(LookupError::NoProc);
    }
    slot.existing(pid.generation()).and_then(|s| s.sink.clone()).ok_or(LookupError::NoMailbox)
}

/// The runtime of the calling thread: the one whose scheduler thread this is (an actor's,
/// or the scheduler's own code), `None` on a plain thread.
pub(crate) fn current_runtime() -> Option<&'static Shared> {
    let w = crate::runtime::current_worker();
    // SAFETY: this thread's live worker; its runtime outlives everything running on the
    // thread, and 'static is not observable past it (the callers use it and return).
    (!w.is_null()).then(|| unsafe { &*((*w).shared() as *const Shared) })
}

/// True if `pid` is alive and traps exits.
pub(crate) fn traps_exits(pid: Pid) -> bool {
    let (sh, _) = me("traps_exits");
    proc_lock(sh, pid).is_some_and(|l| l.lock().existing(pid.generation()).is_some_and(|s| s.trap_exit))
}

/// Attaches behaviour data to the calling actor (found by pid with [`ext_of`]).
pub(crate) fn set_ext(ext: Arc<dyn Any + Send + Sync>) {
    let (sh, pid) = me("set_ext");
    let mut slot = proc_lock(sh, pid).expect("own slot").lock();
    slot.state_for(pid.generation()).ext = Some(ext);
}

/// Behaviour data of a live actor.
pub(crate) fn ext_of(pid: Pid) -> Option<Arc<dyn Any + Send + Sync>> {
    let (sh, _) = me("ext_of");
    let mut slot = proc_lock(sh, pid)?.lock();
    if !alive_locked(sh, &slot, pid) {
        return None;
    }
    slot.existing(pid.generation()).and_then(|s| s.ext.clone())
}

/// Adds one `pg` membership of the live actor `pid` in `group`: recorded in its process state
/// and in the runtime's table in one critical section of its proc lock, so that its exit
/// (which removes its memberships under that lock, [`on_exit`]) comes entirely before or
/// entirely after (`groups` module doc). Returns false, adding nothing, if it is not alive.
pub(crate) fn pg_join(sh: &Shared, pid: Pid, group: &str) -> bool {
    let Some(lock) = proc_lock(sh, pid) else { return false };
    let mut slot = lock.lock();
    if !alive_locked(sh, &slot, pid) {
        return false;
    }
    slot.state_for(pid.generation()).groups.push(group.to_string());
    // Rank Pg above Process: taken inside the proc lock, as in `on_exit`.
    world(sh).groups.lock().add_member(group, pid);
    true
}

/// Removes one `pg` membership of `pid` in `group`, from the runtime's table and from its
/// process state in one critical section of its proc lock (as [`pg_join`]). Returns false if
/// it had none.
pub(crate) fn pg_leave(sh: &Shared, pid: Pid, group: &str) -> bool {
    // A pid of another runtime (or a slot never used) has no proc lock and no membership
    // here; the table is still asked, which says so.
    let Some(lock) = proc_lock(sh, pid) else { return world(sh).groups.lock().remove_one(group, pid) };
    let mut slot = lock.lock();
    if !world(sh).groups.lock().remove_one(group, pid) {
        return false;
    }
    if let Some(st) = slot.existing(pid.generation()) {
        if let Some(i) = st.groups.iter().position(|g| g == group) {
            st.groups.swap_remove(i);
        }
    }
    true
}

/// Records a supervisor started by a non-supervisor in the calling actor's runtime (stopped,
/// in reverse start order, when the root ends).
pub(crate) fn register_root_supervisor(pid: Pid) {
    let Some((sh, _)) = current_shared() else { return };
    // SAFETY: the runtime outlives its running actor.
    let sh = unsafe { &*sh };
    let mut sups = world(sh).root_sups.lock();
    // Supervisors that ended (stopped, or started and stopped by a worker) leave their
    // entries: drop those before the list would grow, then keep it at most half full, so
    // the pruning is amortised O(1) per supervisor started.
    if sups.len() == sups.capacity() && sups.len() >= 8 {
        sups.retain(|p| sh.slab.is_live(*p));
        let len = sups.len();
        sups.reserve(len);
    }
    sups.push(pid);
}

/// Takes the most recently started root supervisor of the calling actor's runtime.
pub(crate) fn pop_root_supervisor() -> Option<Pid> {
    let (sh, _) = current_shared()?;
    // SAFETY: the runtime outlives its running actor.
    world(unsafe { &*sh }).root_sups.lock().pop()
}

/// Starts a graceful shutdown of the calling actor's runtime: the root actor is stopped with
/// [`DownReason::Shutdown`] (at its next runtime call); on its way out it stops the
/// supervision trees in reverse start order, then the remaining actors are shut down and
/// [`Runtime::run`](crate::Runtime::run) returns `Err(RunError::Root(Shutdown))`.
///
/// Returns true if a shutdown was requested. Outside an actor there is no runtime to stop:
/// it does nothing and returns false; a plain thread stops a runtime through its
/// [`Handle::shutdown`](crate::Handle::shutdown).
///
/// ```
/// assert!(!smarm::shutdown()); // no runtime here
/// let r = smarm::Runtime::builder().build().unwrap().run(|| {
///     assert!(smarm::shutdown());
///     loop { smarm::sleep(std::time::Duration::from_millis(1)) } // stopped here
/// });
/// assert!(matches!(r, Err(smarm::RunError::Root(smarm::DownReason::Shutdown))));
/// ```
pub fn shutdown() -> bool {
    let Some((sh, _)) = current_shared() else { return false };
    // SAFETY: the runtime outlives its running actor.
    let sh = unsafe { &*sh };
    if let Some(root) = sh.root_pid() {
        stop_with(sh, root, DownReason::Shutdown);
    }
    true
}

/// A handle that starts the graceful [`shutdown`] of a runtime from anywhere: another
/// runtime, a plain thread, a signal-watching thread. It is the runtime's
/// [`Handle`](crate::Handle) (which also spawns and looks names up), under the name code that
/// only stops a runtime reads best with; it does not keep the runtime alive.
///
/// ```
/// let (tx, rx) = std::sync::mpsc::channel();
/// let r = smarm::Runtime::builder().build().unwrap().run(move || {
///     let handle: smarm::ShutdownHandle = smarm::shutdown_handle();
///     std::thread::spawn(move || tx.send(handle.shutdown()).unwrap());
///     loop {
///         smarm::sleep(std::time::Duration::from_millis(1)); // stopped here
///     }
/// });
/// assert!(matches!(r, Err(smarm::RunError::Root(smarm::DownReason::Shutdown))));
/// assert_eq!(rx.recv(), Ok(true));
/// ```
pub type ShutdownHandle = crate::task::Handle;

/// A [`ShutdownHandle`] for the calling actor's runtime.
///
/// ```
/// let handle = smarm::run(|| smarm::shutdown_handle());
/// // The runtime has ended: the handle does not keep it alive, and stops nothing.
/// assert!(!handle.shutdown());
/// ```
///
/// # Panics
/// Outside an actor.
pub fn shutdown_handle() -> ShutdownHandle {
    crate::task::Handle::current()
}

/// The calling actor's signal box, for `select!`'s `recv_signal()` arm. Not a stable API.
///
/// # Panics
/// Outside an actor, and in an actor with a typed [`Mailbox`](crate::Mailbox).
#[doc(hidden)]
pub fn __signal_box() -> crate::mailbox::SignalBox {
    let (sh, me) = me("recv_signal");
    crate::mailbox::SignalBox::of(own_sink(sh, me))
}

/// Receives the next signal of a plain `spawn` actor (its signal-only mailbox), parking
/// until one arrives. Mailbox actors receive signals through their [`Mailbox`](crate::Mailbox).
///
/// ```
/// smarm::run(|| {
///     let (h, m) = smarm::spawn_monitor(|| ());
///     match smarm::recv_signal() {
///         smarm::Signal::Down(d) => assert_eq!((d.monitor, d.pid), (m, h.pid())),
///         other => panic!("{other:?}"),
///     }
/// });
/// ```
pub fn recv_signal() -> Signal {
    let (sh, me) = me("recv_signal");
    crate::mailbox::recv_signal_from(own_sink(sh, me), WaitLimit::Forever).expect("no deadline")
}

/// Like [`recv_signal`], giving up after `timeout` (zero polls). The only error is
/// [`RecvTimeoutError::Timeout`].
///
/// ```
/// use std::time::Duration;
/// use smarm::RecvTimeoutError;
/// smarm::run(|| {
///     assert_eq!(smarm::recv_signal_timeout(Duration::ZERO), Err(RecvTimeoutError::Timeout));
///     let (_h, _m) = smarm::spawn_monitor(|| ());
///     assert!(smarm::recv_signal_timeout(Duration::from_secs(10)).is_ok());
/// });
/// ```
pub fn recv_signal_timeout(timeout: std::time::Duration) -> Result<Signal, RecvTimeoutError> {
    let (sh, me) = me("recv_signal_timeout");
    crate::mailbox::recv_signal_from(own_sink(sh, me), WaitLimit::For(timeout)).ok_or(RecvTimeoutError::Timeout)
}
