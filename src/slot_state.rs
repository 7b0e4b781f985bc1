//! The actor slab: `max_actors` slots, one atomic state word per slot, and pids that carry
//! a generation so a stale pid never reaches a newer actor in the same slot.
//!
//! # The state word
//!
//! ```text
//!  63            32 31        4   3          2..0
//!  +---------------+-----------+----------+--------+
//!  |  generation   |  unused   | NOTIFIED | state  |
//!  +---------------+-----------+----------+--------+
//! ```
//!
//! `state` moves `FREE -> QUEUED -> RUNNING -> (QUEUED | PARKED | DONE)`, `PARKED -> QUEUED`,
//! `DONE -> FREE`. The generation is bumped when a slot is allocated, so the pid handed out
//! for an occupancy is `(index, generation)` and every operation on a pid first compares the
//! generation.
//!
//! Who may make which transition:
//! - `FREE -> QUEUED`: the spawner that popped the slot from the free list ([`Slab::alloc_marked`]),
//!   after writing the control block; Release, paired with the Acquire in [`Slot::claim`].
//! - `QUEUED -> RUNNING`: the scheduler thread that popped the index from a queue
//!   ([`Slot::claim`]); it then owns the control block until it gives the actor up.
//! - `RUNNING -> QUEUED` (yield) / `RUNNING -> PARKED` (park) / `RUNNING -> DONE`: that
//!   scheduler thread, after the actor switched back to it.
//! - `PARKED -> QUEUED`: a waker ([`Slot::wake`]); the waker then must enqueue the index.
//! - `DONE -> FREE`: the scheduler thread, after releasing the stack ([`Slab::free`]).
//!
//! The index is enqueued only by whoever made a `-> QUEUED` transition, so every actor is
//! in at most one queue at a time (the run queue relies on this for its capacity).
//!
//! NOTIFIED closes the park/wake race: a wake that finds the actor `QUEUED` or `RUNNING`
//! sets it instead of enqueueing, and the next park attempt consumes it and returns at once
//! instead of parking. Yield and resume preserve it. So a wake that arrives between an
//! actor's "check condition" and its park is never lost.

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::actor::ActorCell;
use crate::free_chain::{Links, PendingFree, FLUSH_AT};

pub(crate) const FREE: u64 = 0;
pub(crate) const QUEUED: u64 = 1;
pub(crate) const RUNNING: u64 = 2;
pub(crate) const PARKED: u64 = 3;
pub(crate) const DONE: u64 = 4;
const STATE_MASK: u64 = 0b111;
pub(crate) const NOTIFIED: u64 = 0b1000;
const GEN_SHIFT: u32 = 32;

#[inline]
fn gen_of(word: u64) -> u32 {
    (word >> GEN_SHIFT) as u32
}
#[inline]
fn state_of(word: u64) -> u64 {
    word & STATE_MASK
}
#[inline]
fn make(gen: u32, state: u64) -> u64 {
    ((gen as u64) << GEN_SHIFT) | state
}

/// An actor's identity: its runtime, a slot index and the generation of that slot's
/// occupancy.
///
/// Opaque: compare, hash, print and pass it around. Printed Erlang-style as `<0.index.gen>`
/// (node 0: the local node). The runtime is part of the value: pids of two
/// runtimes in one process never compare equal, and a runtime treats a pid of another one
/// as a pid of no live actor (a `monitor` gets `NoProc`, a send does nothing), even where the
/// printed forms coincide.
///
/// With feature `cluster` a pid may also name a process of another node (an Erlang node or a
/// smarm one): its node name and creation are interned in a process-wide node table and the
/// pid holds the table index, so it stays 12 bytes and `Copy`. It prints as `<N.id.serial>`
/// with `N` > 0 (the table index plus one, as Erlang prints a remote pid with a non-zero node
/// part). A node that restarts comes back with a new creation, hence a new table entry:
/// pids of its previous incarnation never alias the new one's.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pid {
    rt: u32,
    index: u32,
    gen: u32,
}

impl Pid {
    /// A pid that names no actor: no runtime owns it (runtime ids start at 1). The `pid` of
    /// the `NoProc` Down of a name monitor whose name named nobody.
    pub(crate) const NOBODY: Pid = Pid { rt: 0, index: 0, gen: 0 };

    pub(crate) fn index(self) -> u32 {
        self.index
    }
    pub(crate) fn generation(self) -> u32 {
        self.gen
    }

    /// The runtime id of a local pid (its `rt` field), `None` for a remote pid.
    #[cfg(feature = "cluster")]
    pub(crate) fn runtime_id(self) -> Option<u32> {
        (self.rt & REMOTE_BIT == 0).then_some(self.rt)
    }

    /// A pid of another node: `node` is the node table index (`cluster::nodes`), `id` and
    /// `serial` the Erlang pid's fields.
    #[cfg(feature = "cluster")]
    pub(crate) fn remote(node: u32, id: u32, serial: u32) -> Pid {
        debug_assert!(node & REMOTE_BIT == 0);
        Pid { rt: REMOTE_BIT | node, index: id, gen: serial }
    }

    /// The local pid `index`/`gen` of runtime `rt` (a pid of ours decoded from the wire).
    #[cfg(feature = "cluster")]
    pub(crate) fn local(rt: u32, index: u32, gen: u32) -> Pid {
        Pid { rt, index, gen }
    }

    /// The node table index of a remote pid.
    pub(crate) fn remote_node(self) -> Option<u32> {
        (self.rt & REMOTE_BIT != 0).then_some(self.rt & !REMOTE_BIT)
    }

    /// True if the pid names a process of another node (feature `cluster`; always false
    /// without it).
    ///
    /// ```
    /// smarm::run(|| assert!(!smarm::current_pid().is_remote()));
    /// ```
    #[inline]
    pub fn is_remote(self) -> bool {
        self.rt & REMOTE_BIT != 0
    }
}

/// The `rt` bit of a remote pid (local runtime ids stay below it: see `Slab::new`).
const REMOTE_BIT: u32 = 1 << 31;

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let node = self.remote_node().map_or(0, |n| n as u64 + 1);
        write!(f, "<{node}.{}.{}>", self.index, self.gen)
    }
}

impl fmt::Debug for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// "No thread": the `pinned` value of an actor that may run anywhere.
pub(crate) const UNPINNED: u32 = u32::MAX;

/// Why an actor is asked to stop (the value in a slot's [`CancelCell`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Cancel {
    /// No request (zero: a zeroed slot's value).
    None = 0,
    /// The runtime is shutting down.
    Shutdown = 1,
    /// `kill`, or the runtime's kill after its shutdown timeout: cannot be trapped or deferred.
    Kill = 2,
    /// An exit signal; its reason is kept by the process layer (`Hooks::exit_reason`).
    Exit = 3,
}

impl Cancel {
    /// How strongly a request binds. A kill outranks every other request; shutdown and exit
    /// requests rank equal (the first one decides the exit reason, as in OTP, where the first
    /// exit signal kills the process); any request outranks none.
    const fn rank(self) -> u8 {
        match self {
            Cancel::None => 0,
            Cancel::Shutdown | Cancel::Exit => 1,
            Cancel::Kill => 2,
        }
    }

    /// The request a cell's byte holds (only `CancelCell` writes it, always from a `Cancel`).
    #[inline]
    fn from_byte(b: u8) -> Cancel {
        match b {
            0 => Cancel::None,
            1 => Cancel::Shutdown,
            2 => Cancel::Kill,
            3 => Cancel::Exit,
            _ => unreachable!("smarm: a cancel byte holds {b}, which no Cancel has"),
        }
    }
}

/// A slot's pending stop request: a [`Cancel`] in one byte, which only ever rises
/// (None < Shutdown = Exit < Kill) while the slot is occupied, whoever raises it, with or
/// without the process lock, so a kill is never downgraded. All-zero is `Cancel::None`.
#[repr(transparent)]
pub(crate) struct CancelCell(AtomicU8);

impl CancelCell {
    /// The pending request.
    #[inline]
    pub(crate) fn load(&self, order: Ordering) -> Cancel {
        Cancel::from_byte(self.0.load(order))
    }

    /// True if any request is pending (the hot-path check: one load and a compare).
    #[inline(always)]
    pub(crate) fn is_set(&self, order: Ordering) -> bool {
        self.0.load(order) != Cancel::None as u8
    }

    /// Raises the request to `code` unless one of equal or higher rank is pending. Returns
    /// the request it replaced, or `None` if it left the cell as it was. Every raise goes
    /// through here; the only other store is [`Self::reset`].
    pub(crate) fn raise(&self, code: Cancel) -> Option<Cancel> {
        // Relaxed: a first guess, validated by the CAS.
        let mut cur = self.0.load(Ordering::Relaxed);
        loop {
            if code.rank() <= Cancel::from_byte(cur).rank() {
                return None;
            }
            // Release on success: the target reads the code with Acquire (and then, for
            // `Exit`, the reason under the process lock). Relaxed on failure: a new guess.
            match self.0.compare_exchange_weak(cur, code as u8, Ordering::Release, Ordering::Relaxed) {
                Ok(_) => return Some(Cancel::from_byte(cur)),
                Err(now) => cur = now,
            }
        }
    }

    /// Clears the request of a FREE slot, before the slot is published again.
    pub(crate) fn reset(&self) {
        // Relaxed: published by the Release of the slot's publication (`publish_queued`).
        self.0.store(Cancel::None as u8, Ordering::Relaxed);
    }
}

/// One actor slot. `repr(C)` and line-aligned, hot fields first: the state word, `pinned`,
/// `cancel` and the head of the control block (saved sps, FP state, intent) share the first
/// cache line, which is all a wake, a switch and a resume touch.
#[repr(C, align(64))]
pub(crate) struct Slot {
    /// See the module doc.
    pub(crate) state: AtomicU64,
    /// Thread the actor must resume on, or `UNPINNED`: the thread it runs on while it
    /// switches out unwinding (std's panic count is per thread), and for good from the first
    /// run of a thread-bound actor (`spawn_pinned`). Set by the owning scheduler thread or
    /// the running actor before the actor is published as QUEUED/PARKED (so a waker that
    /// acquired the state transition reads the current value); read by wakers to route the
    /// index to that thread's inbox.
    pub(crate) pinned: AtomicU32,
    /// The stop request the actor must unwind with at its next runtime call, if any.
    pub(crate) cancel: CancelCell,
    /// What the actor last parked on: a [`WaitKind`] (0: never parked), stored with `wait`
    /// at every park (see `wait` for how a reader pairs them).
    pub(crate) wait_kind: AtomicU8,
    /// The control block. Accessed only by the thread that owns the actor (the spawner
    /// before publication, then the scheduler thread that claimed it and the actor itself
    /// while it runs there).
    pub(crate) cell: core::cell::UnsafeCell<ActorCell>,
    /// Free-list link (an index, or `u32::MAX` for the end). Only meaningful while FREE.
    next_free: AtomicU32,
    /// The actor's lazily armed park timeout: `seq << 2 | LAZY_*` (see `runtime::lazy`). `seq` only grows over the slot's life, so a stale request never matches.
    pub(crate) lazy: AtomicU64,
    /// The timeout (ns) of the pending request; published by the Release store of `lazy`.
    pub(crate) lazy_timeout: AtomicU64,
    /// The wheel key of an ARMED request. Accessed only under the runtime's timer lock.
    pub(crate) lazy_key: core::cell::UnsafeCell<crate::wheel::TimerKey>,
    /// The reply word of the actor's current `call`: `seq << 3 | state` (see `reply`).
    pub(crate) reply: AtomicU64,
    /// Where the actor last parked: the `&'static Location` of the blocking call (0:
    /// never). Stored at every park, with `wait_kind`, so both sit near the slot's head, not
    /// in [`Probe`] at its far end: a park then touches no line the switch does not touch
    /// anyway. Reports for `info`, as the probe's fields are. The two are separate stores
    /// (a packed word cost a 64-bit constant, an `or` and a spill per park), so a reader
    /// could pair one park's kind with another's location; it reads `resumes` before and
    /// after them (the parker issues a Release fence before storing them, the reader an
    /// Acquire fence before the second read), and a park that began meanwhile shows as a
    /// changed count.
    pub(crate) wait: AtomicU64,
    /// Times the actor was resumed (first run included; Erlang's reductions, roughly).
    /// Bumped at every resume; placed and read as `wait`.
    pub(crate) resumes: AtomicU64,
    /// What introspection (`info`) reads of the actor (see [`Probe`]).
    pub(crate) probe: Probe,
}

/// An actor's introspection record: plain facts written by the actor's owner (the spawner
/// before publication, then the thread running it) with single-writer Relaxed stores, and
/// read by `info` from any thread. Every field is one word, so a reader never sees a torn
/// value; a reader re-reads the slot's state word after reading these and discards them if
/// the generation changed (the slot was reused meanwhile). Relaxed suffices everywhere: the
/// values are reports, not synchronisation, and each field is meaningful on its own.
#[derive(Default)]
pub(crate) struct Probe {
    /// TSC ticks the actor ran, when the runtime counts CPU time (`Builder::cpu_time`);
    /// reset to 0 when the actor retires.
    pub(crate) cpu: AtomicU64,
    /// `&'static Location` of the spawn call.
    pub(crate) spawned_at: AtomicU64,
    /// `fn() -> &'static str` naming the spawned closure's type.
    pub(crate) type_name: AtomicU64,
    /// The spawning actor (`index << 32 | generation`), 0 if spawned from outside an actor.
    pub(crate) parent: AtomicU64,
    /// The actor's stack (`Stack::into_raw` parts, guard included), once its first run
    /// bound it; before that (no resumes yet) it may still name the previous occupant's,
    /// and `info` does not read it.
    pub(crate) stack_base: AtomicU64,
    pub(crate) stack_len: AtomicU64,
}

/// What a parked actor waits for (`smarm::info` reports it for each parked actor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
#[non_exhaustive]
pub enum WaitKind {
    /// A message in its mailbox (`Mailbox::recv`, `receive!`, `recv_signal`).
    Mailbox = 1,
    /// A channel (`Receiver::recv`, `Sender::send` on a full channel, oneshot, watch).
    Channel,
    /// One of several channels (`select`).
    Select,
    /// A `sync::Mutex`.
    Mutex,
    /// A `sync::Barrier` or `sync::WaitGroup`.
    Barrier,
    /// `sleep`.
    Sleep,
    /// A socket's readiness (`net`).
    Socket,
    /// Another actor's end (`JoinHandle::join`) or a blocking task's (`spawn_blocking`).
    Join,
    /// The reply to a `gen_server`/`gen_statem` call.
    Call,
    /// A future (`block_on`).
    Future,
}

impl WaitKind {
    const ALL: [WaitKind; 10] = [
        WaitKind::Mailbox,
        WaitKind::Channel,
        WaitKind::Select,
        WaitKind::Mutex,
        WaitKind::Barrier,
        WaitKind::Sleep,
        WaitKind::Socket,
        WaitKind::Join,
        WaitKind::Call,
        WaitKind::Future,
    ];

    /// A short lower-case name (`"mailbox"`, `"socket"`, ...).
    pub fn name(self) -> &'static str {
        match self {
            WaitKind::Mailbox => "mailbox",
            WaitKind::Channel => "channel",
            WaitKind::Select => "select",
            WaitKind::Mutex => "mutex",
            WaitKind::Barrier => "barrier",
            WaitKind::Sleep => "sleep",
            WaitKind::Socket => "socket",
            WaitKind::Join => "join",
            WaitKind::Call => "call",
            WaitKind::Future => "future",
        }
    }

    /// The park record of [`Slot::wait_kind`] and [`Slot::wait`], if the actor has parked.
    pub(crate) fn unpack(kind: u8, site: u64) -> Option<(WaitKind, &'static core::panic::Location<'static>)> {
        let kind = *WaitKind::ALL.get(usize::from(kind).checked_sub(1)?)?;
        if site == 0 {
            return None;
        }
        // SAFETY: a non-zero `wait` was stored from a `&'static Location` (`park_running`).
        Some((kind, unsafe { &*(site as *const core::panic::Location<'static>) }))
    }
}

impl Slot {
    /// QUEUED -> RUNNING for the thread that popped this actor from a queue (or took it
    /// from its wake slot).
    #[inline]
    pub(crate) fn claim(&self) {
        // Acquire: pairs with the Release of whoever made the QUEUED transition (spawner,
        // waker's RMW continuing the parker's release sequence, or the previous scheduler's
        // yield), so the control block is ours to read. An RMW because wakers may
        // concurrently set NOTIFIED, which must survive.
        let prev = self.state.fetch_add(RUNNING - QUEUED, Ordering::Acquire);
        debug_assert_eq!(state_of(prev), QUEUED, "claimed an actor that was not queued");
    }

    /// RUNNING -> QUEUED (yield). The caller then enqueues the index.
    #[inline]
    pub(crate) fn yield_queued(&self) {
        // Release: hands the control block to the next claimer.
        let prev = self.state.fetch_sub(RUNNING - QUEUED, Ordering::Release);
        debug_assert_eq!(state_of(prev), RUNNING);
    }

    /// RUNNING -> PARKED, unless NOTIFIED is set: then the flag is consumed, the actor stays
    /// RUNNING and `false` is returned (the caller resumes it at once).
    #[inline]
    pub(crate) fn try_park(&self) -> bool {
        let state = &self.state;
        // Relaxed: only this thread writes the state bits of a RUNNING actor; wakers only
        // add NOTIFIED, which the CAS below will see if it races.
        let cur = state.load(Ordering::Relaxed);
        debug_assert_eq!(state_of(cur), RUNNING);
        if cur & NOTIFIED != 0 {
            // Acquire: pairs with the waker's Release, as in the failure branch below.
            state.fetch_and(!NOTIFIED, Ordering::Acquire);
            return false;
        }
        let parked = (cur & !STATE_MASK) | PARKED;
        // Release: hands the control block to the waker's RMW and from there to the next
        // claimer. Failure: a wake set NOTIFIED meanwhile.
        match state.compare_exchange(cur, parked, Ordering::Release, Ordering::Relaxed) {
            Ok(_) => true,
            Err(_) => {
                // Acquire: pairs with the waker's Release, so what it wrote before waking us
                // is visible when the actor resumes.
                state.fetch_and(!NOTIFIED, Ordering::Acquire);
                false
            }
        }
    }

    /// Wakes occupancy `gen` of this slot if it is still there. See [`Wake`].
    #[inline]
    pub(crate) fn wake(&self, gen: u32) -> Wake {
        // Acquire: to observe the parker's Release (PARKED) before our RMW continues it.
        let mut cur = self.state.load(Ordering::Acquire);
        loop {
            if gen_of(cur) != gen {
                return Wake::Gone;
            }
            let next = match state_of(cur) {
                PARKED => (cur & !STATE_MASK) | QUEUED,
                QUEUED | RUNNING if cur & NOTIFIED == 0 => cur | NOTIFIED,
                QUEUED | RUNNING => return Wake::Notified,
                _ => return Wake::Gone,
            };
            // AcqRel: Release publishes what the waker wrote before waking (the actor reads
            // it when it resumes); Acquire keeps the PARKED hand-over chain intact.
            match self.state.compare_exchange_weak(cur, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) if state_of(cur) == PARKED => return Wake::Enqueue,
                Ok(_) => return Wake::Notified,
                Err(actual) => cur = actual,
            }
        }
    }
}

/// Outcome of [`Slot::wake`].
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// The actor was parked and is now QUEUED: the caller must enqueue it.
    Enqueue,
    /// Running or queued: NOTIFIED was set (or already was); nothing to enqueue.
    Notified,
    /// Stale pid, free or finished actor: nothing happened.
    Gone,
}

/// Free-list head: index in the low 32 bits, an ABA tag in the high 32 bits.
const NIL: u32 = u32::MAX;

pub(crate) struct Slab {
    /// This runtime's identity, carried by every pid it hands out.
    rt: u32,
    slots: crate::zeroed::Zeroed<Slot>,
    /// Treiber stack of freed slots (LIFO: a recently freed slot's control block is warm).
    free_head: AtomicU64,
    /// Slots `[0, fresh)` have been handed out at least once; `fresh` only grows (it may
    /// overshoot `len` under contention; readers clamp).
    fresh: AtomicU64,
    /// Per scheduler thread: the slots it freed that have not reached `free_head` yet (see
    /// `free_chain`).
    pending: Box<[crate::loom_shim::CachePadded<PendingFree>]>,
    /// Flushes of a `pending` list in progress (see `pop_free_hidden`).
    flushing: AtomicUsize,
}

impl Links for Slab {
    #[inline(always)]
    fn link(&self, index: u32) -> &AtomicU32 {
        &self.slot(index).next_free
    }
}

// SAFETY: `cell` is accessed only under the ownership protocol in the module doc; all other
// fields are atomics.
unsafe impl Sync for Slab {}
// SAFETY: as above.
unsafe impl Send for Slab {}

impl Slab {
    /// Maximum slab size accepted by the builder.
    pub(crate) const MAX: usize = 1 << 24;

    /// A slab of `len` slots for a runtime with `threads` scheduler threads (each gets a
    /// list of freed slots, see [`Slab::free_local`]).
    pub(crate) fn new(len: usize, threads: usize) -> Slab {
        assert!(len > 0 && len <= Self::MAX);
        /// Runtime identities, unique within the process (wrapping after 2^31 runtimes; the
        /// top bit marks a remote pid, and 0 is no runtime's).
        static NEXT_RT: AtomicU32 = AtomicU32::new(1);
        // Relaxed: only uniqueness matters, which the RMW gives.
        let rt = match NEXT_RT.fetch_add(1, Ordering::Relaxed) & !REMOTE_BIT {
            0 => 1,
            rt => rt,
        };
        Slab {
            rt,
            slots: zeroed_slots(len),
            free_head: AtomicU64::new(NIL as u64),
            fresh: AtomicU64::new(0),
            pending: (0..threads).map(|_| crate::loom_shim::CachePadded(PendingFree::new())).collect(),
            flushing: AtomicUsize::new(0),
        }
    }

    /// The pid of occupancy `gen` of slot `index` of this runtime.
    #[inline]
    pub(crate) fn pid(&self, index: u32, gen: u32) -> Pid {
        Pid { rt: self.rt, index, gen }
    }

    /// True if `pid` was handed out by this runtime (whether or not it is still live).
    #[inline]
    pub(crate) fn owns(&self, pid: Pid) -> bool {
        pid.rt == self.rt
    }

    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    #[inline]
    pub(crate) fn slot(&self, index: u32) -> &Slot {
        &self.slots[index as usize]
    }

    /// The slot at `index`, without the bounds check (the spawn path's parent lookup).
    ///
    /// # Safety
    /// `index` is in range: an index this slab handed out.
    #[inline(always)]
    pub(crate) unsafe fn slot_unchecked(&self, index: u32) -> &Slot {
        // SAFETY: forwarded from the caller.
        unsafe { self.slots.get_unchecked(index as usize) }
    }

    /// The slot at `index`, if in range (a pid from another runtime may not be).
    #[inline]
    pub(crate) fn try_slot(&self, index: u32) -> Option<&Slot> {
        self.slots.get(index as usize)
    }

    /// Slots that were ever handed out: the root-exit sweep looks only at these.
    pub(crate) fn high_water(&self) -> usize {
        // Acquire: pairs with the AcqRel fetch_add in `alloc`, so every slot below the
        // returned mark has been claimed by its spawner.
        (self.fresh.load(Ordering::Acquire) as usize).min(self.slots.len())
    }

    /// [`Slab::alloc_marked`] without the freshness (the tests' form).
    #[cfg(test)]
    pub(crate) fn alloc(&self) -> Option<(u32, u32)> {
        self.alloc_marked().map(|(index, gen, _)| (index, gen))
    }

    /// Takes a free slot and returns `(index, new generation, fresh)`: `fresh` says the
    /// slot was never used (all zero, and possibly on a page nothing has touched yet, whose
    /// first access should be a write). The slot stays FREE (with the new generation not
    /// yet visible) until [`Slab::publish_queued`].
    pub(crate) fn alloc_marked(&self) -> Option<(u32, u32, bool)> {
        let index = match self.pop_free() {
            Some(index) => index,
            None => {
                // AcqRel: see `high_water`.
                let i = self.fresh.fetch_add(1, Ordering::AcqRel);
                if (i as usize) < self.slots.len() {
                    // Never used: all zero, so its first generation is 1. Not read: the
                    // first access to a fresh page of the table must be a write. A read
                    // maps the shared zero page, and the write after it then replaces
                    // that mapping, which flushes the TLB of every thread of the process
                    // (an IPI per 16 spawns, most of a spawn's cost on a VM: history 55).
                    return Some((i as u32, 1, true));
                }
                // Lost the race for the last fresh slots, or the slab is full: a slot may have
                // been freed since, onto the shared list or a thread's own.
                match self.pop_free() {
                    Some(index) => index,
                    None => self.pop_free_hidden()?,
                }
            }
        };
        // Relaxed: the slot is FREE and exclusively ours; the generation is published with
        // the Release store in `publish_queued`.
        let gen = gen_of(self.slot(index).state.load(Ordering::Relaxed)).wrapping_add(1).max(1);
        Some((index, gen, false))
    }

    /// Undoes an `alloc` whose spawn failed before publication.
    pub(crate) fn unalloc(&self, index: u32) {
        self.push_chain(index, index);
    }

    /// FREE -> QUEUED with the new generation: the actor becomes visible. The caller then
    /// enqueues the index.
    pub(crate) fn publish_queued(&self, index: u32, gen: u32) {
        // Release: publishes the control block written by the spawner to the scheduler
        // that claims the slot (Acquire in `claim`) and to the shutdown sweep.
        self.slot(index).state.store(make(gen, QUEUED), Ordering::Release);
    }

    /// The pid of the actor in slot `index` if it is PARKED right now (a hint: it may be
    /// woken the moment after).
    #[inline]
    pub(crate) fn parked_pid(&self, index: u32) -> Option<Pid> {
        // Relaxed: a hint; whoever acts on it re-validates under a lock or with an RMW.
        let cur = self.slot(index).state.load(Ordering::Relaxed);
        (state_of(cur) == PARKED).then(|| self.pid(index, gen_of(cur)))
    }

    /// QUEUED -> RUNNING for the thread that popped `index` from a queue.
    #[cfg(test)]
    pub(crate) fn claim(&self, index: u32) {
        self.slot(index).claim();
    }

    /// RUNNING -> QUEUED (yield). The caller then enqueues the index.
    #[inline]
    pub(crate) fn yield_queued(&self, index: u32) {
        self.slot(index).yield_queued();
    }

    /// RUNNING -> PARKED unless NOTIFIED is set; see [`Slot::try_park`].
    #[inline]
    pub(crate) fn try_park(&self, index: u32) -> bool {
        self.slot(index).try_park()
    }

    /// RUNNING -> DONE: the actor finished; wakes for this generation become no-ops.
    pub(crate) fn mark_done(&self, index: u32) {
        let state = &self.slot(index).state;
        // Relaxed load: we own the RUNNING actor's state bits.
        let gen = gen_of(state.load(Ordering::Relaxed));
        // Release: orders the actor's last writes before anyone who sees DONE.
        state.store(make(gen, DONE), Ordering::Release);
    }

    /// DONE -> FREE and back on the shared free list (a runtime with one scheduler thread:
    /// nobody to contend with for the list's head).
    pub(crate) fn free(&self, index: u32) {
        self.mark_free(index);
        self.push_chain(index, index);
    }

    /// DONE -> FREE, onto scheduler thread `k`'s own list (`k` is the calling thread's
    /// index; `pushed` its count of pushes since its last flush). Every [`FLUSH_AT`] pushes
    /// the list moves to the shared one in one CAS.
    #[inline]
    pub(crate) fn free_local(&self, index: u32, k: usize, pushed: &core::cell::Cell<u32>) {
        self.mark_free(index);
        self.pending[k].push(index, self);
        let n = pushed.get() + 1;
        if n < FLUSH_AT {
            pushed.set(n);
        } else {
            pushed.set(0);
            self.flush_pending(k);
        }
    }

    #[inline(always)]
    fn mark_free(&self, index: u32) {
        let state = &self.slot(index).state;
        // Relaxed load: this thread stored DONE; nobody else writes a DONE slot's word.
        let gen = gen_of(state.load(Ordering::Relaxed));
        // Relaxed: the generation stays; the free-list push releases the slot.
        state.store(make(gen, FREE), Ordering::Relaxed);
    }

    /// Moves thread `k`'s list of freed slots to the shared list (from any thread).
    fn flush_pending(&self, k: usize) {
        // SeqCst (this, `take_all`'s swap and the decrement): see `pop_free_hidden`. Taken
        // chains are on no list until `push_chain`; the count says one may be in between.
        self.flushing.fetch_add(1, Ordering::SeqCst);
        if let Some((first, last)) = self.pending[k].take_all(self) {
            self.push_chain(first, last);
        }
        self.flushing.fetch_sub(1, Ordering::SeqCst);
    }

    /// The slab looks full: takes every thread's list of freed slots to the shared list and
    /// pops from that, so that no freed slot is missed (a `join` that returned promises
    /// its actor's slot can be reused).
    ///
    /// A flush in progress elsewhere holds a chain on no list between its swap and its
    /// push. If our swap of a list found it empty because such a flush took it first, that
    /// flush's increment, swap and ours are SeqCst and in that order, so our SeqCst load
    /// of `flushing` reads its increment or its decrement: the former makes us look again;
    /// the latter synchronises with it, so its push is visible to the last `pop_free`.
    #[cold]
    #[inline(never)]
    fn pop_free_hidden(&self) -> Option<u32> {
        let mut backoff = crate::backoff::Backoff::new();
        loop {
            for k in 0..self.pending.len() {
                self.flush_pending(k);
            }
            if let Some(index) = self.pop_free() {
                return Some(index);
            }
            if self.flushing.load(Ordering::SeqCst) == 0 {
                return self.pop_free();
            }
            backoff.spin();
        }
    }

    /// Wakes the actor `pid` if it is still that occupancy. See [`Wake`].
    #[cfg(test)]
    pub(crate) fn wake(&self, pid: Pid) -> Wake {
        match self.slot_of(pid) {
            Some(slot) => slot.wake(pid.gen),
            None => Wake::Gone,
        }
    }

    /// The slot of `pid`, if this runtime handed it out (a pid of another runtime may be
    /// out of range).
    #[inline]
    pub(crate) fn slot_of(&self, pid: Pid) -> Option<&Slot> {
        if !self.owns(pid) {
            return None;
        }
        self.try_slot(pid.index)
    }

    /// Whether `pid` is a live occupancy (not FREE or DONE, same generation). A snapshot.
    pub(crate) fn is_live(&self, pid: Pid) -> bool {
        self.owns(pid)
            && self.slots.get(pid.index as usize).is_some_and(|s| {
                // Acquire: pairs with `publish_queued` and `mark_done`, as in `live_pid`.
                let w = s.state.load(Ordering::Acquire);
                gen_of(w) == pid.gen && matches!(state_of(w), QUEUED | RUNNING | PARKED)
            })
    }

    /// The live pid in slot `index`, if any (used by the shutdown sweep).
    pub(crate) fn live_pid(&self, index: u32) -> Option<Pid> {
        // Acquire: pairs with `publish_queued`.
        let w = self.slot(index).state.load(Ordering::Acquire);
        matches!(state_of(w), QUEUED | RUNNING | PARKED).then(|| self.pid(index, gen_of(w)))
    }

    fn pop_free(&self) -> Option<u32> {
        // Acquire: pairs with the Release in `push_chain`, so the link we read is the one
        // written by the pusher.
        let mut head = self.free_head.load(Ordering::Acquire);
        loop {
            let index = head as u32;
            if index == NIL {
                return None;
            }
            // A stale `head` may make this read a link of a slot that was popped and pushed
            // again meanwhile; the tag in the CAS below then fails, so the value is unused.
            let next = self.slot(index).next_free.load(Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            // Acquire on success: pairs with the Release in `push_chain`, so the slot's FREE
            // state and its previous occupant's teardown happen before our use of it. On
            // failure too: the next round reads the link of the head it returns.
            match self.free_head.compare_exchange_weak(
                head,
                (tag << 32) | next as u64,
                Ordering::Acquire,
                Ordering::Acquire,
            ) {
                Ok(_) => return Some(index),
                Err(cur) => head = cur,
            }
        }
    }

    /// Pushes the chain `first ..= last` (linked through `next_free`, `last`'s link about to
    /// be overwritten) onto the shared free list with one CAS.
    fn push_chain(&self, first: u32, last: u32) {
        // Relaxed: a guess validated by the CAS; nothing is read through the old head.
        let mut head = self.free_head.load(Ordering::Relaxed);
        loop {
            // Relaxed: published by the Release CAS below.
            self.slot(last).next_free.store(head as u32, Ordering::Relaxed);
            let tag = (head >> 32).wrapping_add(1);
            // Release: publishes the chain's links and its slots' FREE state (for a chain
            // taken from a thread's list, ordered before us by `take_all`'s Acquire).
            // Failure Relaxed: the new head is only a guess for the next round.
            match self.free_head.compare_exchange_weak(
                head,
                (tag << 32) | first as u64,
                Ordering::Release,
                Ordering::Relaxed,
            ) {
                Ok(_) => return,
                Err(cur) => head = cur,
            }
        }
    }
}

// SAFETY: every field of `Slot` is valid as all-zero bytes, and such a slot needs no drop:
// atomics (FREE, generation 0, link 0, no cancel, pinned 0 which is overwritten before use),
// `ActorCell` (its doc states that all-zero is its empty value: `Intent::Running`, no task, no stack, no
// override, no actor-local storage), the lazy-timeout fields (LAZY_IDLE with seq 0, and a
// timer key of plain integers) and the reply word.
unsafe impl crate::zeroed::ZeroValid for Slot {}

fn zeroed_slots(len: usize) -> crate::zeroed::Zeroed<Slot> {
    crate::zeroed::Zeroed::new(len)
}

impl Drop for Slab {
    fn drop(&mut self) {
        let used = self.high_water();
        // SAFETY: slots past the high-water mark were never handed out, so they are still
        // all-zero (their drop is a no-op); nothing uses the slab after this.
        unsafe { self.slots.drop_prefix(used) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// NONE < SHUTDOWN = EXIT < KILL: a raise that does not outrank the pending code leaves it.
    #[test]
    fn raise_cancel_never_lowers_the_code() {
        let c = CancelCell(AtomicU8::new(0));
        assert_eq!(c.raise(Cancel::Shutdown), Some(Cancel::None));
        assert_eq!(c.raise(Cancel::Exit), None, "the first request decides");
        assert_eq!(c.raise(Cancel::Shutdown), None);
        assert_eq!(c.load(Ordering::Relaxed), Cancel::Shutdown);
        assert_eq!(c.raise(Cancel::Kill), Some(Cancel::Shutdown));
        for code in [Cancel::None, Cancel::Shutdown, Cancel::Exit, Cancel::Kill] {
            assert_eq!(c.raise(code), None);
            assert_eq!(c.load(Ordering::Relaxed), Cancel::Kill);
        }
        let c = CancelCell(AtomicU8::new(Cancel::Exit as u8));
        assert_eq!(c.raise(Cancel::Shutdown), None);
        assert_eq!(c.raise(Cancel::Kill), Some(Cancel::Exit));
    }

    #[test]
    fn generations_make_stale_pids_inert() {
        let slab = Slab::new(4, 1);
        let (i, g) = slab.alloc().unwrap();
        slab.publish_queued(i, g);
        let old = slab.pid(i, g);
        slab.claim(i);
        slab.mark_done(i);
        slab.free(i);
        let (i2, g2) = slab.alloc().unwrap();
        assert_eq!(i2, i, "LIFO free list reuses the slot");
        assert_ne!(g2, g);
        slab.publish_queued(i2, g2);
        assert_eq!(slab.wake(old), Wake::Gone);
        assert!(!slab.is_live(old));
        assert!(slab.is_live(slab.pid(i2, g2)));
    }

    #[test]
    fn wake_park_race_is_never_lost() {
        let slab = Slab::new(1, 1);
        let (i, g) = slab.alloc().unwrap();
        slab.publish_queued(i, g);
        let pid = slab.pid(i, g);
        slab.claim(i);
        // wake arrives while running: park must not park
        assert_eq!(slab.wake(pid), Wake::Notified);
        assert_eq!(slab.wake(pid), Wake::Notified);
        assert!(!slab.try_park(i));
        // now it can park, and a wake enqueues exactly once
        assert!(slab.try_park(i));
        assert_eq!(slab.wake(pid), Wake::Enqueue);
        assert_eq!(slab.wake(pid), Wake::Notified);
        slab.claim(i);
        // NOTIFIED survives yield + claim
        slab.yield_queued(i);
        slab.claim(i);
        assert!(!slab.try_park(i));
    }

    /// A slot freed onto a thread's own list is found by an allocation from any thread
    /// before the slab reports itself full; a thread's list moves to the shared one every
    /// FLUSH_AT frees.
    #[test]
    fn slots_on_a_threads_own_list_are_not_hidden() {
        let slab = Slab::new(2, 2);
        let pushed = [core::cell::Cell::new(0), core::cell::Cell::new(0)];
        let (a, ga) = slab.alloc().unwrap();
        let (_b, _) = slab.alloc().unwrap();
        assert!(slab.alloc().is_none());
        slab.publish_queued(a, ga);
        slab.claim(a);
        slab.mark_done(a);
        slab.free_local(a, 1, &pushed[1]);
        assert_eq!(pushed[1].get(), 1, "not flushed yet");
        let (a2, ga2) = slab.alloc().expect("the freed slot on thread 1's list");
        assert_eq!(a2, a);
        assert_ne!(ga2, ga);

        let slab = Slab::new(64, 1);
        let cell = core::cell::Cell::new(0);
        let slots: Vec<(u32, u32)> = (0..FLUSH_AT).map(|_| slab.alloc().unwrap()).collect();
        for &(i, g) in &slots {
            slab.publish_queued(i, g);
            slab.claim(i);
            slab.mark_done(i);
            slab.free_local(i, 0, &cell);
        }
        assert_eq!(cell.get(), 0, "flushed at FLUSH_AT");
        // On the shared list now, newest first.
        assert_eq!(slab.pop_free(), Some(slots[FLUSH_AT as usize - 1].0));
    }

    #[test]
    fn full_slab_reports_none() {
        let slab = Slab::new(2, 1);
        assert!(slab.alloc().is_some());
        assert!(slab.alloc().is_some());
        assert!(slab.alloc().is_none());
        assert_eq!(slab.high_water(), 2);
    }
}
