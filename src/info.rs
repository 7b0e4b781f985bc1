//! Introspection of a running system (layer 5): every actor, what it is doing and where it
//! waits, the scheduler threads' counters, and a dump of all of it grouped by where actors
//! are parked (Go's goroutine dump, Erlang's `process_info` and `observer`).
//!
//! # Where the facts come from
//!
//! - Each actor slot carries a small record (`Probe`, in the slab) written by the actor's
//!   owner with plain single-writer stores: where it last parked and on what (the blocking
//!   call's `#[track_caller]` location, stored at park time: one store on the park path),
//!   resumes, where it was spawned, its closure's type, its parent, its stack, and, with
//!   `Builder::cpu_time`, its CPU time.
//! - The process layer reports names, links, monitors, `pg` groups and the mailbox (its
//!   length and message type), under the actor's `proc` lock and then its mailbox's lock.
//! - Scheduler threads keep counters of their own (`runtime::stats`).
//!
//! A report is a snapshot taken while the system runs: each actor's facts are consistent
//! with one occupancy of its slot (the slot's generation is read before and after, and a
//! slot reused meanwhile is left out), not with each other's.
//!
//! # Cost
//!
//! Nothing here runs unless asked; what the runtime records all the time is a handful of
//! single-writer stores per spawn, resume and park (measured in `outputs/history.md`).
//!
//! ```
//! use std::time::Duration;
//! smarm::run(|| {
//!     let h = smarm::spawn(|| smarm::sleep(Duration::from_millis(50)));
//!     smarm::register("napper", h.pid()).unwrap();
//!     while smarm::info::process_info(h.pid()).and_then(|p| p.parked_on()).is_none() {
//!         smarm::yield_now();
//!     }
//!     let p = smarm::info::process_info(h.pid()).unwrap();
//!     assert_eq!(p.name.as_deref(), Some("napper"));
//!     assert_eq!(p.parked_on(), Some(smarm::info::WaitKind::Sleep));
//!     let mut out = Vec::new();
//!     smarm::info::dump(&mut out).unwrap();
//!     assert!(String::from_utf8(out).unwrap().contains("parked on sleep"));
//! });
//! ```

use std::io::{self, Write};
use std::panic::Location;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::runtime::{current_worker, stats, Shared};
pub use crate::slot_state::WaitKind;
use crate::slot_state::{Pid, Slot};

/// What an actor is doing at the moment of the report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProcessState {
    /// Running on a scheduler thread.
    Running,
    /// Ready to run, waiting for a thread.
    Runnable,
    /// Parked on `kind`, in the blocking call at `at`.
    Parked {
        /// What it waits for.
        kind: WaitKind,
        /// The blocking call (the caller's source location, through `#[track_caller]`; a
        /// location inside smarm where a call reached the park through a trait object or
        /// a closure, e.g. `std::io::Read::read_exact`).
        at: &'static Location<'static>,
    },
    /// Finished, its slot not yet free.
    Exiting,
}

/// One actor, as [`processes`] and [`process_info`] report it.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ProcessInfo {
    /// The actor.
    pub pid: Pid,
    /// Its registered name, if any.
    pub name: Option<String>,
    /// Running, runnable or parked (and where).
    pub state: ProcessState,
    /// Messages and signals waiting in its mailbox (None: the actor has no mailbox).
    pub mailbox_len: Option<usize>,
    /// The mailbox's message type (None: no mailbox).
    pub message_type: Option<&'static str>,
    /// Times it was resumed (first run included): Erlang's reductions, roughly.
    pub resumes: u64,
    /// CPU time it ran, if the runtime counts it (`Builder::cpu_time`).
    pub cpu_time: Option<Duration>,
    /// Pages of its stack resident in memory (touched by it or, for a stack reused from
    /// the pool, by an earlier actor), as `mincore` reports them; 0 before its first run.
    pub stack_pages: usize,
    /// Its stack's usable size in bytes (0 before its first run).
    pub stack_size: usize,
    /// Its links.
    pub links: Vec<Pid>,
    /// Actors monitoring it (those whose pid is known; a watcher that is not an actor's
    /// mailbox, such as a call in progress, counts in `monitors_unknown`).
    pub monitored_by: Vec<Pid>,
    /// Monitors on it whose owner is not known (calls in progress, remote watchers).
    pub monitors_unknown: usize,
    /// Whether it traps exits.
    pub trap_exit: bool,
    /// The `pg` groups it joined.
    pub groups: Vec<String>,
    /// The actor that spawned it (None if spawned from outside an actor).
    pub parent: Option<Pid>,
    /// The spawn call's source location.
    pub spawned_at: Option<&'static Location<'static>>,
    /// The spawned closure's type name.
    pub closure_type: Option<&'static str>,
}

impl ProcessInfo {
    /// What it is parked on, if it is parked.
    pub fn parked_on(&self) -> Option<WaitKind> {
        match self.state {
            ProcessState::Parked { kind, .. } => Some(kind),
            _ => None,
        }
    }

    /// Where it is parked, if it is parked.
    pub fn parked_at(&self) -> Option<&'static Location<'static>> {
        match self.state {
            ProcessState::Parked { at, .. } => Some(at),
            _ => None,
        }
    }
}

/// One scheduler thread's counters, as [`schedulers`] reports them.
///
/// `migrations`, `parks` and `wakes` are kept by each thread in plain cells and published
/// every few dozen scheduling decisions and whenever the thread sleeps: those of a busy
/// thread other than the caller's may lag by that much; those of an idle thread and of the
/// caller's own are exact.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct SchedulerInfo {
    /// The thread's index (0 is the thread that called `run`).
    pub index: usize,
    /// Time since the thread started.
    pub uptime: Duration,
    /// Time it spent asleep for lack of work (in a futex wait or in `epoll_wait`).
    pub idle: Duration,
    /// Resumes of actors that last ran on another thread.
    pub migrations: u64,
    /// Actors that parked on it.
    pub parks: u64,
    /// Wakes made by actors running on it.
    pub wakes: u64,
    /// Actors it took from other threads' queues.
    pub steals: u64,
    /// Reactor polls it made.
    pub polls: u64,
    /// Times it went to sleep.
    pub sleeps: u64,
}

impl SchedulerInfo {
    /// Time it was not asleep: `uptime - idle`.
    pub fn busy(&self) -> Duration {
        self.uptime.saturating_sub(self.idle)
    }
}

/// The runtime of the calling actor. Panics off the runtime (documented on each caller).
fn current() -> &'static Shared {
    try_current().expect("smarm::info: called outside an actor of a runtime")
}

/// The calling actor's runtime, owned.
fn current_arc() -> Arc<Shared> {
    let w = current_worker();
    assert!(!w.is_null(), "smarm::info: called outside an actor of a runtime");
    // SAFETY: this thread's live worker.
    unsafe { (*w).shared_arc() }
}

fn try_current() -> Option<&'static Shared> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker; its runtime outlives the calling actor, and the
    // reference is used only within the call (the 'static is never stored).
    Some(unsafe { &*((*w).shared() as *const Shared) })
}

/// Every live actor of the calling actor's runtime, in slot order.
///
/// # Panics
/// Outside an actor.
pub fn processes() -> Vec<ProcessInfo> {
    processes_in(current())
}

/// One actor of the calling actor's runtime, or None if it is not live (or not of this
/// runtime).
///
/// # Panics
/// Outside an actor.
pub fn process_info(pid: Pid) -> Option<ProcessInfo> {
    let sh = current();
    if !sh.slab.owns(pid) {
        return None;
    }
    let slot = sh.slab.try_slot(pid.index())?;
    report(sh, slot, pid.index(), Some(pid.generation()))
}

/// Registered names and their actors, sorted by name.
///
/// # Panics
/// Outside an actor.
pub fn registered() -> Vec<(String, Pid)> {
    registered_in(current())
}

/// The scheduler threads' counters.
///
/// # Panics
/// Outside an actor.
pub fn schedulers() -> Vec<SchedulerInfo> {
    schedulers_in(current())
}

pub(crate) fn registered_in(sh: &Shared) -> Vec<(String, Pid)> {
    let mut v: Vec<(String, Pid)> = crate::registry::registered_in(sh)
        .into_iter()
        .filter_map(|n| crate::registry::whereis_in(sh, &n).map(|p| (n, p)))
        .collect();
    v.sort();
    v
}

pub(crate) fn processes_in(sh: &Shared) -> Vec<ProcessInfo> {
    (0..sh.slab.high_water() as u32)
        .filter_map(|i| sh.slab.try_slot(i).and_then(|slot| report(sh, slot, i, None)))
        .collect()
}

use crate::context::tsc_duration as ticks_to_duration;

pub(crate) fn schedulers_in(sh: &Shared) -> Vec<SchedulerInfo> {
    // The calling thread's own counters are current (the others' lag by up to a
    // scheduling round: see `runtime::stats`).
    if let Some(w) = sh.local_worker() {
        w.publish_counts();
    }
    let now = crate::context::rdtsc();
    sh.thread_stats
        .iter()
        .enumerate()
        .map(|(index, st)| {
            let started = stats::get(&st.started);
            SchedulerInfo {
                index,
                uptime: if started == 0 { Duration::ZERO } else { ticks_to_duration(now.saturating_sub(started)) },
                idle: ticks_to_duration(stats::get(&st.idle_ticks)),
                migrations: stats::get(&st.migrations),
                parks: stats::get(&st.parks),
                wakes: stats::get(&st.wakes),
                steals: stats::get(&st.steals),
                polls: stats::get(&st.polls),
                sleeps: stats::get(&st.sleeps),
            }
        })
        .collect()
}

/// The report on slot `index` (of generation `want`, if given), or None if it holds no live
/// actor (or another generation, or was reused while being read).
fn report(sh: &Shared, slot: &Slot, index: u32, want: Option<u32>) -> Option<ProcessInfo> {
    use crate::slot_state::{DONE, FREE, PARKED, QUEUED, RUNNING};
    // Acquire: pairs with the Release of the slot's publication, so the spawner's probe
    // stores (made before it) are visible for this occupancy.
    let word = slot.state.load(Ordering::Acquire);
    let (gen, st) = ((word >> 32) as u32, word & 0b111);
    if st == FREE || want.is_some_and(|g| g != gen) {
        return None;
    }
    let pid = sh.slab.pid(index, gen);
    let p = &slot.probe;
    // Relaxed (all probe loads): reports (see `Probe`); checked against the generation below.
    let resumes = slot.resumes.load(Ordering::Relaxed);
    let wait_kind = slot.wait_kind.load(Ordering::Relaxed);
    let wait = slot.wait.load(Ordering::Relaxed);
    let cpu = p.cpu.load(Ordering::Relaxed);
    let spawned_at = p.spawned_at.load(Ordering::Relaxed);
    let type_name = p.type_name.load(Ordering::Relaxed);
    let parent = p.parent.load(Ordering::Relaxed);
    let (stack_base, stack_len) = (p.stack_base.load(Ordering::Relaxed), p.stack_len.load(Ordering::Relaxed));
    // Acquire: orders the probe loads above before these re-reads (a seqlock's second
    // read); pairs with the parker's Release fence (see `Slot::wait`).
    std::sync::atomic::fence(Ordering::Acquire);
    if (slot.state.load(Ordering::Relaxed) >> 32) as u32 != gen {
        return None; // reused meanwhile
    }
    // Relaxed: ordered by the fence above. A changed count means the actor was resumed
    // while we read, so the park record may pair two parks: it was not parked throughout.
    let steady = slot.resumes.load(Ordering::Relaxed) == resumes;
    let state = match st {
        RUNNING => ProcessState::Running,
        QUEUED => ProcessState::Runnable,
        PARKED if !steady => ProcessState::Runnable,
        PARKED => match WaitKind::unpack(wait_kind, wait) {
            Some((kind, at)) => ProcessState::Parked { kind, at },
            None => ProcessState::Runnable,
        },
        DONE => ProcessState::Exiting,
        _ => return None,
    };
    let proc = crate::process::proc_report(sh, pid);
    let (name, links, watchers, mailbox, trap_exit, groups) = match proc {
        Some(r) => (r.name, r.links, r.monitored_by, r.mailbox, r.trap_exit, r.groups),
        None => (None, Vec::new(), Vec::new(), None, false, Vec::new()),
    };
    let monitors_unknown = watchers.iter().filter(|w| w.is_none()).count();
    // Before its first run the actor has no stack (the probe may still name its slot's
    // previous occupant's).
    let (stack_pages, stack_size) =
        if resumes == 0 { (0, 0) } else { stack_residency(stack_base as usize, stack_len as usize) };
    Some(ProcessInfo {
        pid,
        name,
        state,
        mailbox_len: mailbox.map(|m| m.0),
        message_type: mailbox.map(|m| m.1),
        resumes,
        cpu_time: sh.config.cpu_time.then(|| ticks_to_duration(cpu)),
        stack_pages,
        stack_size,
        links,
        monitored_by: watchers.into_iter().flatten().collect(),
        monitors_unknown,
        trap_exit,
        groups,
        parent: (parent != 0).then(|| sh.slab.pid((parent >> 32) as u32, parent as u32)),
        // SAFETY: a non-zero value was stored from a `&'static Location` by `note_spawn`.
        spawned_at: (spawned_at != 0).then(|| unsafe { &*(spawned_at as *const Location<'static>) }),
        // SAFETY: a non-zero value was stored from a `fn() -> &'static str` by `note_spawn`.
        closure_type: (type_name != 0)
            .then(|| unsafe { std::mem::transmute::<usize, fn() -> &'static str>(type_name as usize) }()),
    })
}

/// `(resident pages, usable bytes)` of a stack mapped at `base` for `len` bytes (guard
/// included), by `mincore`. (0, 0) for no stack.
fn stack_residency(base: usize, len: usize) -> (usize, usize) {
    let guard = crate::stack::GUARD_BYTES;
    if base == 0 || len <= guard {
        return (0, 0);
    }
    let page = 4096;
    let (start, usable) = (base + guard, len - guard);
    let pages = usable / page;
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` has one byte per page of the range, as mincore requires. The range may
    // have been unmapped meanwhile (the actor ended): mincore then fails with ENOMEM and
    // touches nothing; it never faults.
    let r = unsafe { libc::mincore(start as *mut libc::c_void, usable, vec.as_mut_ptr()) };
    if r != 0 {
        return (0, usable);
    }
    (vec.iter().filter(|b| **b & 1 != 0).count(), usable)
}

/// Writes every actor of the calling actor's runtime, one line each, grouped by what they
/// are doing and where they are parked, largest group first (Go's goroutine dump), followed
/// by the scheduler threads' counters.
///
/// # Panics
/// Outside an actor.
pub fn dump(w: &mut dyn Write) -> io::Result<()> {
    dump_in(current(), w)
}

/// One dump group: a state and, for parked actors, the blocking call.
#[derive(PartialEq, Eq, Hash, Clone)]
enum Group {
    Running,
    Runnable,
    Parked(WaitKind, &'static str, u32, u32),
    Exiting,
}

impl std::fmt::Display for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Group::Running => f.write_str("running"),
            Group::Runnable => f.write_str("runnable"),
            Group::Parked(k, file, line, col) => write!(f, "parked on {} at {file}:{line}:{col}", k.name()),
            Group::Exiting => f.write_str("exiting"),
        }
    }
}

pub(crate) fn dump_in(sh: &Shared, w: &mut dyn Write) -> io::Result<()> {
    let procs = processes_in(sh);
    let mut groups: Vec<(Group, Vec<&ProcessInfo>)> = Vec::new();
    for p in &procs {
        let g = match p.state {
            ProcessState::Running => Group::Running,
            ProcessState::Runnable => Group::Runnable,
            ProcessState::Parked { kind, at } => Group::Parked(kind, at.file(), at.line(), at.column()),
            ProcessState::Exiting => Group::Exiting,
        };
        match groups.iter_mut().find(|(k, _)| *k == g) {
            Some((_, v)) => v.push(p),
            None => groups.push((g, vec![p])),
        }
    }
    groups.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.0.to_string().cmp(&b.0.to_string())));
    writeln!(w, "smarm: {} actors on {} scheduler threads", procs.len(), sh.thread_stats.len())?;
    for (g, members) in &groups {
        writeln!(w, "\n{} actor{} {g}", members.len(), if members.len() == 1 { "" } else { "s" })?;
        for p in members {
            write!(w, "  {}", p.pid)?;
            if let Some(n) = &p.name {
                write!(w, " {n:?}")?;
            }
            if let Some(len) = p.mailbox_len {
                write!(w, " mailbox={len}")?;
            }
            write!(w, " resumes={}", p.resumes)?;
            if let Some(cpu) = p.cpu_time {
                write!(w, " cpu={cpu:?}")?;
            }
            if !p.links.is_empty() {
                write!(w, " links={}", p.links.len())?;
            }
            if let Some(parent) = p.parent {
                write!(w, " parent={parent}")?;
            }
            if let Some(at) = p.spawned_at {
                write!(w, " spawned at {at}")?;
            }
            writeln!(w)?;
        }
    }
    let sites = crate::profile::sites();
    if !sites.is_empty() {
        writeln!(w, "\nprofiled sites (own time, nested sites excluded):")?;
        for s in sites {
            write!(w, "  {:?} count={} total={:?}", s.name, s.count, s.total)?;
            if let (Some(r), Some(p)) = (s.running, s.parked) {
                write!(w, " running={r:?} parked={p:?}")?;
            }
            writeln!(w)?;
        }
    }
    writeln!(w)?;
    for s in schedulers_in(sh) {
        writeln!(
            w,
            "thread {}: busy {:?} idle {:?} parks={} wakes={} steals={} migrations={} polls={} sleeps={}",
            s.index,
            s.busy(),
            s.idle,
            s.parks,
            s.wakes,
            s.steals,
            s.migrations,
            s.polls,
            s.sleeps
        )?;
    }
    Ok(())
}

/// Writes the scheduler threads' recent events (feature `smarm-trace`: spawn, resume, park
/// with its reason, wake with the waker, migration, exit, panic, I/O readiness, cluster
/// frames) as Chrome trace-event JSON to `path`: open it in <https://ui.perfetto.dev> or
/// `chrome://tracing`. Each thread keeps its newest 4,095 records by default
/// (`Builder::trace_records`; a message hand-off between two actors, wake, park and resume,
/// is one record); an actor's run is a slice named after it (its registered name, if any),
/// on the thread that ran it.
///
/// # Errors
/// If the file cannot be written.
///
/// # Panics
/// Outside an actor.
#[cfg(feature = "smarm-trace")]
pub fn write_trace(path: impl AsRef<std::path::Path>) -> io::Result<()> {
    let sh = current();
    let mut out = Vec::new();
    write_trace_in(sh, &mut out)?;
    // The file is written by a blocking-pool thread: a slow disk must not hold a scheduler.
    let path = path.as_ref().to_path_buf();
    crate::offload::spawn_blocking(move || std::fs::write(path, out))
        .join()
        .map_err(|e| io::Error::other(format!("the writer thread failed: {e:?}")))?
}

#[cfg(feature = "smarm-trace")]
pub(crate) fn write_trace_in(sh: &Shared, out: &mut Vec<u8>) -> io::Result<()> {
    use crate::trace_ring::{write_chrome_json, Record};
    let threads: Vec<(usize, Vec<Record>)> = sh
        .trace_rings
        .iter()
        .enumerate()
        .map(|(i, ring)| {
            let mut v = Vec::new();
            ring.snapshot(&mut v);
            crate::trace_ring::expand(&mut v);
            spread_shared_timestamps(&mut v);
            (i, v)
        })
        .collect();
    let names: std::collections::HashMap<u64, String> = registered_in(sh)
        .into_iter()
        .map(|(n, p)| ((u64::from(p.index()) << 32) | u64::from(p.generation()), n))
        .collect();
    let describe = |r: &Record| -> Option<String> {
        if r.pid == 0 {
            return None;
        }
        let pid = sh.slab.pid((r.pid >> 32) as u32, r.pid as u32);
        Some(match names.get(&r.pid) {
            Some(n) => format!("{pid} {n}"),
            None => pid.to_string(),
        })
    };
    write_chrome_json(out, &threads, crate::context::tsc_ticks_per_ns() * 1000.0, &describe)
}

/// Events recorded between two clock readings share the first one (`Worker::trace`): give
/// each run of equal timestamps even steps up to the next reading, at most
/// `MAX_STEP` ticks apart (a run followed by a sleep does not stretch over the sleep).
#[cfg(feature = "smarm-trace")]
fn spread_shared_timestamps(v: &mut [crate::trace_ring::Record]) {
    const MAX_STEP: u64 = 256;
    let mut i = 0;
    while i < v.len() {
        let t = v[i].tsc;
        let mut j = i + 1;
        while j < v.len() && v[j].tsc == t {
            j += 1;
        }
        let run = (j - i) as u64;
        if run > 1 {
            let room = if j < v.len() { v[j].tsc.saturating_sub(t) } else { run * MAX_STEP };
            let step = (room / run).clamp(0, MAX_STEP);
            for (k, r) in v[i..j].iter_mut().enumerate() {
                r.tsc = t + k as u64 * step;
            }
        }
        i = j;
    }
}

/// Which signal [`dump_on_signal`] answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DumpSignal {
    /// `SIGQUIT` (Ctrl-\ in a terminal), as Go's runtime does. Replaces the default action
    /// (a core dump).
    Quit,
    /// `SIGUSR1`.
    Usr1,
}

/// Opt-in: from now on, the signal writes [`dump`] of the calling actor's runtime to
/// standard error (as long as that runtime runs). The signal handler only writes a byte to
/// a pipe; a plain thread reads it and writes the dump, so the dump is never taken inside
/// a signal handler. A later call (from any runtime) replaces the earlier one's runtime.
///
/// # Errors
/// If the pipe, the thread or the handler cannot be set up.
///
/// # Panics
/// Outside an actor.
pub fn dump_on_signal(signal: DumpSignal) -> io::Result<()> {
    signal_dump::install(current_arc(), signal)
}

mod signal_dump {
    use super::*;
    use std::sync::atomic::AtomicI32;
    use std::sync::{Mutex, Weak};

    /// The pipe's write end, for the handler (-1: none yet).
    static PIPE_W: AtomicI32 = AtomicI32::new(-1);
    /// The runtime to dump.
    static TARGET: Mutex<Option<Weak<Shared>>> = Mutex::new(None);

    extern "C" fn on_signal(_: libc::c_int) {
        // Relaxed: the fd was stored before the handler was installed (sigaction orders it).
        let fd = PIPE_W.load(Ordering::Relaxed);
        if fd >= 0 {
            let b = 1u8;
            // SAFETY: write(2) is async-signal-safe; `b` outlives the call. A full pipe
            // (dumps already pending) drops this one: the non-blocking write fails.
            unsafe { libc::write(fd, &b as *const u8 as *const libc::c_void, 1) };
        }
    }

    pub(super) fn install(sh: Arc<Shared>, signal: DumpSignal) -> io::Result<()> {
        *TARGET.lock().unwrap_or_else(|e| e.into_inner()) = Some(Arc::downgrade(&sh));
        if PIPE_W.load(Ordering::Relaxed) < 0 {
            let mut fds = [0; 2];
            // SAFETY: `fds` has room for the two descriptors pipe2 writes.
            if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
                return Err(io::Error::last_os_error());
            }
            let read_fd = fds[0];
            // The reader blocks: clear O_NONBLOCK on its end.
            // SAFETY: fcntl on a descriptor we own.
            unsafe { libc::fcntl(read_fd, libc::F_SETFL, 0) };
            std::thread::Builder::new().name("smarm-dump".into()).spawn(move || reader(read_fd))?;
            // Relaxed: the handler is installed after this store, by sigaction below.
            PIPE_W.store(fds[1], Ordering::Relaxed);
        }
        let signo = match signal {
            DumpSignal::Quit => libc::SIGQUIT,
            DumpSignal::Usr1 => libc::SIGUSR1,
        };
        // SAFETY: a zeroed sigaction is valid; we set a handler that only calls write(2),
        // with SA_RESTART so interrupted system calls elsewhere are restarted.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            sa.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            if libc::sigaction(signo, &sa, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    fn reader(fd: libc::c_int) {
        let mut b = [0u8; 64];
        loop {
            // SAFETY: reads into our buffer from our descriptor.
            let n = unsafe { libc::read(fd, b.as_mut_ptr() as *mut libc::c_void, b.len()) };
            if n < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            if n <= 0 {
                return;
            }
            let target = TARGET.lock().unwrap_or_else(|e| e.into_inner()).as_ref().and_then(Weak::upgrade);
            if let Some(sh) = target {
                let mut out = Vec::new();
                let _ = dump_in(&sh, &mut out);
                let _ = io::stderr().write_all(&out);
            }
        }
    }
}

// --- pids from their printed form (for the observer) ---

/// The local pid printed as `<0.index.gen>` (or `0.index.gen`), of the calling actor's
/// runtime: the inverse of `Pid`'s `Display` for a local pid, used by the observer to read
/// pids from URLs. `None` off a runtime, for a remote pid (node part other than 0), or for
/// anything that is not of that form. The pid need not name a live actor.
#[cfg(feature = "observer")]
pub(crate) fn parse_pid(s: &str) -> Option<Pid> {
    let s = s.strip_prefix('<').and_then(|s| s.strip_suffix('>')).unwrap_or(s);
    let mut parts = s.split('.');
    let (node, index, gen) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || node != "0" {
        return None;
    }
    let number = |t: &str| -> Option<u32> {
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        t.parse().ok()
    };
    let (index, gen) = (number(index)?, number(gen)?);
    Some(try_current()?.slab.pid(index, gen))
}
