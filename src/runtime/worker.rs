//! One scheduler thread: its loop, its wake slot, the thread-locals, and the actor side of
//! every switch (yield, park, finish).
//!
//! # Thread-locals (see the rule in `context`)
//!
//! Exactly one: `CURRENT_WORKER`, a pointer to this thread's [`Worker`]. Everything else
//! (the running actor, its timeslice start, the wake slot) hangs off the worker or the
//! actor's control block. [`current_worker`] is the only accessor: `#[inline(never)]`, with
//! a non-`pure` asm barrier, returning a value. Actor code calls it afresh after every
//! switch and never keeps the pointer across one.
//!
//! # The loop
//!
//! In order, each round takes the first of:
//! 1. due timers (every 64 rounds, and whenever idle), then lazy timeouts old enough to arm
//!    (see `lazy`);
//! 2. this thread's private inbox (actors pinned here: thread-bound ones, see
//!    `spawn_pinned`, and any actor that switched out while unwinding);
//! 3. the wake slot, unless it has served `lifo_run_limit` runs in a row, in which case its
//!    occupant goes to this thread's local queue, behind the work it kept waiting (with
//!    nothing queued that is a no-op: a hand-off then simply starts a new run of turns);
//! 4. this thread's local queue, then the shared run queue (every `GLOBAL_FIRST_INTERVAL`-th
//!    round the other way round, so work queued from outside is never starved, and with a
//!    rebalancing steal in between); if more remain and a thread sleeps, nudge it (it will
//!    steal);
//! 5. if actors wait on I/O, a non-blocking poll of the reactor (what it wakes lands in the
//!    wake slot and the local queue);
//! 6. the oldest actor of another thread's local queue (a steal). A queue's only actor is
//!    left to its owner, which is running and takes it next: the thief naps (without
//!    announcing sleep) and takes it only if it is still there afterwards (see `steal`);
//! 7. otherwise go idle (`idle` module protocol), parked until woken or the next deadline;
//!    the one idle thread that gets the reactor's poll waits in `epoll_wait` instead.
//!
//! Every `GLOBAL_FIRST_INTERVAL`-th round a thread also polls the reactor without blocking
//! if nobody has for `io::BUSY_POLL_INTERVAL` while actors wait on I/O, so a runtime whose
//! threads are all busy still sees the network.
//!
//! # Where runnable actors go
//!
//! - Woken by the actor running on this thread (`Shared::enqueue_woken`): the wake slot; it
//!   runs next here, where its waker's data is in cache. When the waker parks, it hands the
//!   thread straight to the slot's occupant (`hand_off_park`): one switch instead of two
//!   and no scheduler round. What a new occupant displaces goes to the local queue.
//! - Yielded here, or displaced: this thread's local queue (`local_queue`), which other
//!   threads steal from, so nothing queued here is ever invisible to idle threads. A yield
//!   goes to the shared queue instead while that one holds work (older work that the
//!   yielder must not keep overtaking). Otherwise a yield hands the thread straight to the
//!   local queue's head (`hand_off_yield`), which queues the yielder at the back once its
//!   context is saved: the order a scheduler round gives, with one switch instead of two.
//!   Every `GLOBAL_FIRST_INTERVAL`-th round a thread
//!   also takes one actor from a local queue at least two longer than its own, so threads
//!   that are all busy (and so never run dry and steal) still even out.
//! - Spawned by an actor of this runtime: the spawning thread's local queue, and a sleeper
//!   is woken (to steal).
//! - Spawned from outside, or woken from another thread or a plain thread: the shared run
//!   queue, and a sleeper is woken.
//!
//! The wake slot is empty whenever the thread parks (it is drained by step 3 before step 6
//! is reached), and so is the local queue (step 4).
//!
//! # A panic in scheduler code
//!
//! User code never runs on a scheduler thread's own stack (user `Drop`s released there go
//! to an actor, see `user_drop`), so a panic in scheduler code is a smarm bug, or a fault
//! injected by a test. It aborts the process, naming the thread and the panic's message
//! ([`thread_main`]); `run` neither returns nor hangs. A clean return cannot be made sound:
//! - actors pinned to the dead thread (suspended mid-unwind: std's panic count is per
//!   thread), and the one in its wake slot (known to that thread only), can never run again,
//!   so `run` could only return by abandoning them mid-frame: their destructors would never
//!   run and their join handles never complete (a plain thread joining one would hang);
//! - their stacks and the runtime could never be freed (waiters registered in channels
//!   that outlive the runtime point into them), only leaked;
//! - the state the scheduler was changing when it panicked (a slot's state word, a queue)
//!   cannot be trusted by the other threads.
//!
//! # Why displaced work stays on this thread, and a park may hand the thread over
//!
//! - What the wake slot displaces goes to the thread's local queue, which is never private:
//!   any thread steals from it, an idle thread finds it (`stealable` is part of the idle
//!   re-check), and a thread with more than one queued job nudges a sleeper. Keeping it off
//!   the shared queue keeps yields and spawns free of cross-core cache-line transfers
//!   (outputs/history.md, findings 15 and 17).
//! - A parking actor may hand the thread straight to the wake slot's occupant instead of
//!   returning to the scheduler stack (`hand_off_park`): one switch instead of two, and no
//!   scheduler round. The slot, the lifo limit, the timer cadence and the pinned inbox are
//!   honoured exactly as a scheduler round would (finding 16).

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::actor::{self, Intent};
use crate::context::{fp_control_read, fp_control_switch, switch_to_actor, switch_to_scheduler, FpControl};
use crate::slot_state::{Pid, Slot, WaitKind, UNPINNED};
use crate::stack::{AltStack, Stack};

use super::blocks::BlockCache;
use super::cancel::{cancel_reason, check_cancelled};
use super::hand_off::{complete_hand_off, hand_off_park};
use super::lazy::{PendingRing, LAZY_ARM_ROUNDS};
use super::stats::{self, LocalCounts, ThreadStats};
use super::unwind::actor_unwinding;
use super::{Inbox, Shared};
use crate::local_queue::LocalQueue;
use crate::run_queue::Caller;

/// Sends between two preemption checks made by sends (`preempt::charge_send`, which counts
/// them in `Worker::sends_left`). A check reads the clock (`rdtsc`, ~50 ticks on this
/// machine): every 64th send keeps that under a tick per send, and a loop of sends
/// overshoots its slice by at most 64 sends.
pub(crate) const SENDS_PER_CHECK: u32 = 64;

/// `Worker::current` / wake slot value for "none".
pub(super) const NONE: u32 = u32::MAX;

/// Every this many rounds the shared run queue is served before the local one, and a
/// thread rebalances. A power of two dividing the timer cadence (64): see
/// `nothing_else_runnable`.
pub(super) const GLOBAL_FIRST_INTERVAL: u32 = 32;
const _: () = assert!(GLOBAL_FIRST_INTERVAL.is_power_of_two() && 64 % GLOBAL_FIRST_INTERVAL == 0);

/// Rounds of looking at the queues before announcing sleep: a park/unpark pair costs a few
/// microseconds of syscalls, which a message ping-pong between threads would pay per hop.
const IDLE_SPINS: u32 = 64;
/// How long an idle thread naps before it looks again at an actor it left to its owner
/// (`Worker::steal`). Go's `runqgrab` sleeps 3 us; the sleep lasts longer by the thread's
/// timer slack (50 us by default): a median of 58 us on this project's VM (history 58).
const LONE_NAP: Duration = Duration::from_micros(3);

thread_local! {
    static CURRENT_WORKER: Cell<*const Worker> = const { Cell::new(core::ptr::null()) };
}

/// This thread's worker, or null off the runtime. See the module doc for the rule.
#[inline(never)]
pub(crate) fn current_worker() -> *const Worker {
    // SAFETY: an empty, non-pure asm block: LLVM must assume it has side effects, so it can
    // neither treat this function as pure nor merge two calls across a context switch.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
    CURRENT_WORKER.with(|c| c.get())
}

#[inline(never)]
fn set_current_worker(w: *const Worker) {
    // SAFETY: as in `current_worker`.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
    CURRENT_WORKER.with(|c| c.set(w));
}

/// `std::thread::panicking()`, out of line: it reads std's thread-local panic count, whose
/// address must not be cached across a switch either.
#[inline(never)]
pub(crate) fn thread_panicking() -> bool {
    // SAFETY: as in `current_worker`.
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
    std::thread::panicking()
}

/// One scheduler thread's state. Only its own thread touches the `Cell`s: the scheduler
/// code and the actor it is running, never at the same time.
pub(crate) struct Worker {
    pub(crate) index: usize,
    pub(super) shared: Arc<Shared>,
    /// `&shared.inboxes[index]` and `&shared.locals[index]`, looked up once (the hot paths
    /// test them on every park).
    pub(super) inbox: *const Inbox,
    pub(super) local: *const LocalQueue,
    pub(super) wake_slot: Cell<u32>,
    pub(super) lifo_runs: Cell<u32>,
    /// Index of the actor this thread is running, or NONE while in scheduler code.
    pub(super) current: Cell<u32>,
    /// The actor that just handed this thread over (`hand_off_park`), whose park the resumed
    /// actor completes first thing (`resumed`); NONE otherwise. `handed_slot` is its slot.
    pub(super) handed_from: Cell<u32>,
    pub(super) handed_slot: Cell<*const Slot>,
    /// The hand-off from `handed_from` was a yield (`hand_off_yield`): it is queued, not
    /// parked.
    pub(super) handed_yield: Cell<bool>,
    /// Per thread, the head position of its queue when `steal` last left its lone actor to
    /// it (`usize::MAX`: none), and whether `idle_wait` should nap before looking again.
    lone_seen: Box<[Cell<usize>]>,
    lone_pending: Cell<bool>,
    /// rdtsc at the running actor's first preemption check since it was resumed; 0 until
    /// then (see `preempt`).
    pub(crate) slice_start: Cell<u64>,
    /// Sends left until a send runs the preemption check (`preempt::charge_send`).
    pub(crate) sends_left: Cell<u32>,
    /// Floating-point control state live in this thread's registers (see `context`).
    pub(super) live_fp: Cell<FpControl>,
    pub(crate) slice_cycles: u64,
    pub(super) lifo_run_limit: u32,
    pub(super) tick: Cell<u32>,
    /// A pinned actor yielded: serve other work once before the inbox again.
    pub(super) inbox_yielded: Cell<bool>,
    /// Actors pinned here (switched out while unwinding) and not yet resumed. While it is
    /// zero, a panicking thread can only mean the running actor is unwinding, even if the
    /// panic hook that marks actors was replaced by the user.
    pub(super) parked_unwinders: Cell<u32>,
    /// Lazy park timeouts requested by actors that parked on this thread, oldest first
    /// (see the `lazy` module doc).
    pub(super) pending_timeouts: PendingRing,
    /// This thread's cache of small blocks (see `blocks`).
    pub(super) blocks: BlockCache,
    /// This thread's front of the stack pool (see `stack`).
    pub(crate) stacks: crate::stack::StackCache,
    /// The runtime has this one scheduler thread only: no other thread steals from its
    /// local queue or sleeps in `idle`, and nobody contends for the slab's free list (see
    /// `pop_own`, `finish_hand_off`, `retire`).
    pub(super) solo: bool,
    /// Slots freed onto this thread's list since it last moved them to the shared one
    /// (`Slab::free_local`).
    freed: Cell<u32>,
    /// `&shared.thread_stats[index]`, looked up once.
    pub(super) stats: *const ThreadStats,
    /// The counters bumped per message, published to `stats` now and then (see `stats`).
    pub(super) counts: LocalCounts,
    /// What `prepare_to_run` compares each resumed actor's last thread with: `index`, or
    /// `usize::MAX - 1` (no thread's index) when the runtime counts CPU time, so that every
    /// resume takes the out-of-line path, which charges it. One compare covers both the
    /// migration count and the CPU-time switch.
    resume_key: usize,
    /// This thread's event ring's writer (feature `smarm-trace`).
    #[cfg(feature = "smarm-trace")]
    pub(crate) trace: crate::trace_ring::TraceWriter,
    /// The running actor's park or yield not yet recorded (its reason plus one; 0: none):
    /// the next resume on this thread records it in its `Resume`, any other event records it
    /// first as a `Park` (see [`Worker::trace`]).
    #[cfg(feature = "smarm-trace")]
    trace_park: Cell<u64>,
    /// The actor (packed pid) woken on this thread and not yet recorded (0: none); see
    /// [`Worker::trace_wake`].
    #[cfg(feature = "smarm-trace")]
    trace_wake_pid: Cell<u64>,
    /// `Builder::cpu_time`, copied here from the configuration (read at every resume).
    pub(super) cpu_time: bool,
    /// `Builder::cpu_time`: the actor whose CPU time runs since `cpu_stamp` (null: none).
    pub(super) cpu_last: Cell<*const Slot>,
    pub(super) cpu_stamp: Cell<u64>,
}

impl Worker {
    /// This thread's inbox of pinned actors.
    #[inline(always)]
    pub(super) fn inbox(&self) -> &Inbox {
        // SAFETY: points into `self.shared`, which `self` keeps alive.
        unsafe { &*self.inbox }
    }

    /// This thread's local run queue.
    #[inline(always)]
    pub(super) fn local(&self) -> &LocalQueue {
        // SAFETY: points into `self.shared`, which `self` keeps alive.
        unsafe { &*self.local }
    }

    /// Pops this thread's local queue: without a CAS when this is the runtime's only
    /// scheduler thread (nobody steals from it).
    #[inline(always)]
    pub(super) fn pop_own(&self) -> Option<u32> {
        if self.solo {
            self.local().pop_unshared()
        } else {
            self.local().pop()
        }
    }

    pub(crate) fn shared_ptr(&self) -> *const Shared {
        Arc::as_ptr(&self.shared)
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    pub(crate) fn shared_arc(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// True while an actor (not scheduler code) runs on this thread.
    pub(crate) fn running_actor(&self) -> bool {
        self.current.get() != NONE
    }

    /// The running actor's slot.
    pub(crate) fn current_slot(&self) -> Option<&Slot> {
        let i = self.current.get();
        (i != NONE).then(|| self.shared.slab.slot(i))
    }

    /// The running actor's pid.
    #[inline]
    pub(crate) fn current_pid(&self) -> Option<Pid> {
        let i = self.current.get();
        if i == NONE {
            return None;
        }
        // Relaxed: the running actor's generation cannot change under it.
        let gen = (self.shared.slab.slot(i).state.load(Ordering::Relaxed) >> 32) as u32;
        Some(self.shared.slab.pid(i, gen))
    }

    /// This thread's scheduling-round counter (advances once per round of the loop). The
    /// striped run queue uses it as a per-thread rotation (`run_queue::StripedRing::pop`).
    pub(crate) fn round(&self) -> u32 {
        self.tick.get()
    }

    /// This thread as a run-queue caller (home stripe and round for `rq-striped`).
    #[inline]
    pub(crate) fn caller(&self) -> Option<Caller> {
        Some(Caller { thread: self.index, round: self.round() })
    }

    /// Places a woken actor in the wake slot; returns the displaced occupant.
    pub(crate) fn put_in_wake_slot(&self, index: u32) -> Option<u32> {
        let old = self.wake_slot.replace(index);
        (old != NONE).then_some(old)
    }

    fn run_loop(&self) {
        loop {
            if let Some(i) = self.next_runnable() {
                self.run_actor(i);
                continue;
            }
            // What the last actor did and was held back is recorded now, at the time it
            // happened, not at the next resume after an idle spell.
            #[cfg(feature = "smarm-trace")]
            self.flush_held();
            if self.shared.lifecycle.is_finished() {
                return;
            }
            self.idle_wait();
        }
    }

    /// Queues a runnable actor on this thread's local queue. A full local queue first moves
    /// its older half to the shared queue (in order), as tokio's does: the overflow then
    /// waits in FIFO order with the shared queue's work instead of the newest work
    /// overtaking it, and the local queue has room again.
    pub(crate) fn push_local(&self, index: u32) {
        let local = self.local();
        if let Err(index) = local.push(index) {
            // The older half moves to the shared queue in one batch: one CAS on each queue
            // instead of two per actor (tokio's `push_overflow`, Go's `runqputslow`).
            let mut batch = [0u32; crate::local_queue::CAP / 2];
            let n = local.pop_batch(&mut batch);
            self.shared.run_queue.push_batch_from(&batch[..n], self.caller());
            if let Err(index) = local.push(index) {
                // Thieves cannot refill it, so only a CAP of 1 could get here.
                self.shared.run_queue.push_from(index, self.caller());
            }
        }
    }

    fn next_runnable(&self) -> Option<u32> {
        let sh = &*self.shared;
        let tick = self.tick.get().wrapping_add(1);
        self.tick.set(tick);
        if tick % 64 == 0 && !sh.timers.is_empty() {
            sh.fire_due(Instant::now());
        }
        if tick % GLOBAL_FIRST_INTERVAL == 0 {
            self.publish_counts();
            // A busy runtime still sees the network (see `io`): what is ready joins the queues.
            if let Some(r) = sh.reactor_if_made() {
                if r.busy_poll_due() {
                    r.poll_now();
                    stats::bump(&self.stats().polls);
                }
            }
        }
        self.arm_timeouts(false);
        if !self.inbox_yielded.replace(false) {
            if let Some(i) = self.inbox().pop() {
                return Some(i);
            }
        }
        let slot = self.wake_slot.replace(NONE);
        if slot != NONE {
            if self.lifo_runs.get() < self.lifo_run_limit {
                self.lifo_runs.set(self.lifo_runs.get() + 1);
                return Some(slot);
            }
            // Fairness boundary: the slot has run `lifo_run_limit` times in a row; its
            // occupant queues behind the work it has been keeping waiting.
            self.push_local(slot);
        }
        self.lifo_runs.set(0);
        let local = self.local();
        // Fairness between the queues: now and then the shared queue goes first, so work
        // queued from outside is not starved by a thread that keeps refilling its own.
        let found = if tick % GLOBAL_FIRST_INTERVAL == 0 {
            sh.run_queue.pop_from(self.caller()).or_else(|| self.rebalance()).or_else(|| self.pop_own())
        } else {
            self.pop_own().or_else(|| self.pop_shared())
        };
        if let Some(i) = found {
            if !local.is_empty() || !sh.run_queue.is_empty() {
                if let Some(k) = sh.idle.nudge() {
                    sh.unpark(k);
                }
            }
            return Some(i);
        }
        // Out of queued work: what the network has ready comes before stealing (Go's
        // `findRunnable`). The woken actors land in this thread's wake slot and local queue.
        if let Some(r) = sh.reactor_if_made() {
            if r.has_waiters() && self.count_poll(r.poll_now()) > 0 {
                #[cfg(feature = "smarm-trace")]
                self.trace(crate::trace_ring::EventKind::IoReady, 0, 0);
                let slot = self.wake_slot.replace(NONE);
                if slot != NONE {
                    return Some(slot);
                }
                if let Some(i) = self.pop_own() {
                    return Some(i);
                }
            }
        }
        self.steal().or_else(|| self.inbox().pop())
    }

    /// Takes work from the shared queue when the local queue is empty: this thread's share
    /// of it (its length over the thread count, plus one, at most `SHARED_BATCH`) in one
    /// batch, as Go's `globrunqget`; the first is returned and the rest queued locally, so a
    /// backlog spilled by a busy thread (a spawn loop's overflow) is not fetched one CAS on
    /// a shared line per actor.
    fn pop_shared(&self) -> Option<u32> {
        const SHARED_BATCH: usize = 32;
        let sh = &*self.shared;
        let local = self.local();
        let n = (sh.run_queue.len() / sh.locals.len() + 1).min(SHARED_BATCH);
        if n <= 1 {
            return sh.run_queue.pop_from(self.caller());
        }
        let mut batch = [0u32; SHARED_BATCH];
        let k = sh.run_queue.pop_batch_from(&mut batch[..n], self.caller());
        let (&first, rest) = batch[..k].split_first()?;
        for &i in rest {
            // The local queue was empty and only this thread pushes to it: there is room
            // (SHARED_BATCH < CAP). Back to the shared queue if that ever changes.
            if let Err(i) = local.push(i) {
                sh.run_queue.push_from(i, self.caller());
            }
        }
        Some(first)
    }

    /// Takes the oldest actor from another thread's local queue, trying each once.
    fn steal(&self) -> Option<u32> {
        let locals = &self.shared.locals;
        let n = locals.len();
        // A queue's only actor is left to its owner, which is running and takes it next (a
        // spawn chain, a hand-off partner displaced from the wake slot): taking it would
        // move it to another core for nothing. It is taken only if it is still the same one
        // after a nap (`idle_wait`): then its owner is stuck (an actor that makes no runtime
        // call), and it must not wait for it. Go's `runqgrab` does the same with `runnext`.
        // Each thread's lone actor is remembered by its queue's head position (which changes
        // with every pop), so one owner's progress never hides another owner being stuck.
        let mut any_lone = false;
        let mut found = (1..n).find_map(|k| {
            let q = &locals[(self.index + k) % n];
            match q.len() {
                0 => None,
                1 => {
                    any_lone = true;
                    None
                }
                _ => q.pop(),
            }
        });
        if found.is_none() && any_lone {
            for j in 1..n {
                let k = (self.index + j) % n;
                let q = &locals[k];
                if q.len() != 1 {
                    continue;
                }
                let head = q.head();
                if self.lone_seen[k].replace(head) == head {
                    found = q.pop();
                    if found.is_some() {
                        break;
                    }
                } else {
                    self.lone_pending.set(true);
                }
            }
        }
        if found.is_some() {
            self.lone_pending.set(false);
            stats::bump(&self.stats().steals);
        }
        found
    }

    /// Records an event on this thread's ring (feature `smarm-trace`).
    ///
    /// Timestamps are read every [`CLOCK_EVERY`](crate::trace_ring::CLOCK_EVERY)-th record
    /// (and after every sleep), not at each: an `rdtsc` costs about 14 ns on the machine this
    /// was measured on, several times the record itself. The records in between share the
    /// last reading; the exporter spreads them evenly up to the next (`info::write_trace`), so
    /// their order is exact and their times are interpolated within a few microseconds.
    ///
    /// Records leave out what the exporter can tell from the actor running on the thread
    /// (`trace_ring::expand`): wakes and spawns do not name the actor that made them, and a
    /// park and a wake are held back ([`Worker::trace_wake`]) and, in the common case of a
    /// message hand-off (the running actor wakes another and parks, and the thread resumes
    /// the one it woke), merged into the resume's record: one record per message, not three.
    #[cfg(feature = "smarm-trace")]
    #[inline(always)]
    pub(crate) fn trace(&self, kind: crate::trace_ring::EventKind, pid: u64, arg: u64) {
        self.flush_held();
        self.trace.record_clocked(kind, pid, arg, crate::context::rdtsc);
    }

    /// Records what is held back, in the order it happened: a held wake always came before a
    /// held park (a wake flushes a held park before it is held itself).
    #[cfg(feature = "smarm-trace")]
    #[inline(always)]
    pub(super) fn flush_held(&self) {
        let wake = self.trace_wake_pid.get();
        if wake != 0 {
            self.trace_wake_pid.set(0);
            self.trace.record_clocked(crate::trace_ring::EventKind::Wake, wake, 0, crate::context::rdtsc);
        }
        let park = self.trace_park.get();
        if park != 0 {
            self.trace_park.set(0);
            self.trace.record_clocked(crate::trace_ring::EventKind::Park, 0, park - 1, crate::context::rdtsc);
        }
    }

    /// A wake of actor `pid` (packed) made on this thread: held back, to be merged into the
    /// resume of that actor if it is the next thing this thread records.
    #[cfg(feature = "smarm-trace")]
    #[inline(always)]
    pub(crate) fn trace_wake(&self, pid: u64) {
        self.flush_held();
        self.trace_wake_pid.set(pid);
    }

    /// Records the resume of actor `index` (in `slot`), with what is held back: the park of
    /// the actor that ran before (its reason plus one in the low byte of `arg`) and, if this
    /// actor is the one it woke, that wake (bit `RESUME_WOKEN_BIT` of `arg`); a held wake of another
    /// actor is recorded first on its own (see `trace_ring::EventKind::Resume`).
    #[cfg(feature = "smarm-trace")]
    #[inline(always)]
    fn trace_resume(&self, slot: &Slot, index: u32) {
        let pid = packed_pid(slot, index);
        let wake = self.trace_wake_pid.replace(0);
        if wake != 0 && wake != pid {
            self.trace.record_clocked(crate::trace_ring::EventKind::Wake, wake, 0, crate::context::rdtsc);
        }
        let arg = self.trace_park.replace(0) | (u64::from(wake == pid) << crate::trace_ring::RESUME_WOKEN_BIT);
        self.trace.record_clocked(crate::trace_ring::EventKind::Resume, pid, arg, crate::context::rdtsc);
    }

    /// This thread's counters.
    #[inline(always)]
    pub(crate) fn stats(&self) -> &ThreadStats {
        // SAFETY: points into `shared.thread_stats`, which lives as long as `shared`.
        unsafe { &*self.stats }
    }

    /// `Builder::cpu_time`: charges the CPU time since the last stamp to the actor that ran
    /// then, and starts the next period for `next` (null: the thread goes idle or the actor
    /// ends).
    #[cold]
    pub(super) fn charge_cpu(&self, next: *const Slot) {
        let now = crate::context::rdtsc();
        let last = self.cpu_last.replace(next);
        if !last.is_null() {
            // SAFETY: a slot of this runtime's slab (which outlives its workers); `last` is
            // reset before its actor's slot is freed (`retire`), so it is still that actor's.
            let probe = unsafe { &(*last).probe };
            // Relaxed: a report. An RMW, unlike the thread counters: an actor that parked
            // here and was resumed elsewhere before this thread moved on has two chargers.
            probe.cpu.fetch_add(now.saturating_sub(self.cpu_stamp.get()), Ordering::Relaxed);
        }
        self.cpu_stamp.set(now);
    }

    /// Steals one actor from the longest other local queue if it holds at least two more
    /// than ours: a thread that always has its own work never steals otherwise, so this is
    /// what evens out threads that are all busy.
    fn rebalance(&self) -> Option<u32> {
        let locals = &self.shared.locals;
        let mine = locals[self.index].len();
        let (k, len) = locals
            .iter()
            .enumerate()
            .filter(|&(k, _)| k != self.index)
            .map(|(k, q)| (k, q.len()))
            .max_by_key(|&(_, l)| l)?;
        (len >= mine + 2).then(|| locals[k].pop()).flatten()
    }

    /// True if some other thread's local queue holds work this thread could steal.
    fn stealable(&self) -> bool {
        self.shared.locals.iter().enumerate().any(|(k, q)| k != self.index && !q.is_empty())
    }

    /// Nothing but the current actor could run here now: its yield can resume it at once.
    ///
    /// Every `GLOBAL_FIRST_INTERVAL`-th tick the answer is also no if the full round the
    /// fast path would skip has something to do at that cadence: poll the timers (their
    /// cadence, 64, is a multiple), arm lazy timeouts, or rebalance. One power-of-two test
    /// keeps those three checks off the other ticks.
    #[inline(always)]
    fn nothing_else_runnable(&self) -> bool {
        let sh = &*self.shared;
        self.wake_slot.get() == NONE
            && self.local().is_empty()
            && sh.run_queue.is_empty()
            && self.inbox().is_empty()
            // `next_runnable` advances the tick first: test the tick it would use.
            && (self.tick.get().wrapping_add(1) % GLOBAL_FIRST_INTERVAL != 0 || !self.round_due())
    }

    /// The full round has periodic work: due-timer polling, lazy timeouts to arm, or a
    /// rebalancing steal.
    #[cold]
    #[inline(never)]
    pub(super) fn round_due(&self) -> bool {
        !self.shared.timers.is_empty()
            || self.timeouts_to_arm()
            || self.stealable()
            || self.shared.reactor_if_made().is_some_and(|r| r.busy_poll_due())
    }

    /// The oldest lazy timeout is old enough to arm (what `arm_timeouts(false)` would do).
    fn timeouts_to_arm(&self) -> bool {
        self.pending_timeouts.front().is_some_and(|p| self.tick.get().wrapping_sub(p.tick) >= LAZY_ARM_ROUNDS)
    }

    fn run_actor(&self, index: u32) {
        let sh = &*self.shared;
        let slot = sh.slab.slot(index);
        slot.claim();
        // SAFETY: we claimed the actor (QUEUED -> RUNNING), so its control block is ours.
        unsafe { self.prepare_to_run(slot, index) };
        self.current.set(index);
        loop {
            let index = self.current.get();
            let cell = sh.slab.slot(index).cell.get();
            self.slice_start.set(0);
            #[cfg(smarm_asan)]
            let mut asan_save = core::ptr::null_mut();
            #[cfg(smarm_asan)]
            // SAFETY: the claimed actor's control block, its stack bound by `prepare_to_run`.
            crate::context::asan::leave(Some(&mut asan_save), unsafe { actor_stack(&*cell) });
            // SAFETY: the actor is ours (claimed) and its saved sp is a suspended context on
            // its live stack.
            let sp = unsafe { switch_to_actor((*cell).sp, &raw mut (*cell).sched_sp, self as *const Worker as usize) };
            #[cfg(smarm_asan)]
            crate::context::asan::arrive(asan_save);
            // Whoever switched back: the actor we resumed, or one it (transitively) handed
            // the thread to (`hand_off_park`), which set `current` before running.
            let index = self.current.replace(NONE);
            let slot = sh.slab.slot(index);
            let cell = slot.cell.get();
            // SAFETY: the actor switched back; the control block is ours again.
            let intent = unsafe {
                (*cell).sp = sp;
                (*cell).intent
            };
            // Relaxed `pinned`: the actor wrote it in `switch_out` on this very thread, just
            // before it switched back.
            if intent == Intent::Yield
                && self.nothing_else_runnable()
                && slot.pinned.load(Ordering::Relaxed) == UNPINNED
            {
                // Fast path: resume the same actor at once. Its floating-point state is
                // still live in our registers, so nothing needs saving.
                self.tick.set(self.tick.get().wrapping_add(1));
                // Its slice goes on: the yield it held back is not an end (see `trace`).
                #[cfg(feature = "smarm-trace")]
                self.trace_park.set(0);
                self.current.set(index);
                continue;
            }
            // The actor leaves this thread's registers: save its control state before anyone
            // else can resume it (migration keeps its modes). Read even for a finished actor:
            // it may have changed the live modes, and `live_fp` must stay exact.
            let fp = fp_control_read();
            self.live_fp.set(fp);
            // SAFETY: the control block is ours until we publish the state change below.
            unsafe { (*cell).fp = fp };
            match intent {
                Intent::Yield => {
                    // Relaxed: written by the actor on this thread.
                    let pinned = slot.pinned.load(Ordering::Relaxed);
                    if pinned != UNPINNED {
                        debug_assert_eq!(pinned, self.index as u32, "smarm: a pinned actor ran elsewhere");
                        sh.slab.yield_queued(index);
                        self.inbox().push(index);
                        self.inbox_yielded.set(true);
                        return;
                    }
                    sh.slab.yield_queued(index);
                    if sh.run_queue.is_empty() {
                        self.push_local(index);
                    } else {
                        // Older work waits in the shared queue (spawns and wakes from
                        // outside, a local queue's overflow): queue behind it, so a busy
                        // yielder (or a preempted spawner) cannot keep overtaking it.
                        sh.run_queue.push_from(index, self.caller());
                    }
                    return;
                }
                Intent::Park => {
                    if sh.slab.try_park(index) {
                        return;
                    }
                    // A wake arrived since the actor decided to park: resume it.
                    self.current.set(index);
                }
                Intent::Done => {
                    self.retire(index);
                    return;
                }
                Intent::Running => unreachable!("smarm: an actor switched back without saying why"),
            }
        }
    }

    /// Makes a claimed actor ready to be resumed on this thread: binds the stack reserved
    /// at spawn if it has never run (and pins a thread-bound actor here), loads its
    /// floating-point control state (only if it differs from the live one), and records
    /// this thread as its own.
    ///
    /// # Safety
    /// The caller owns the actor's control block (it claimed the actor), and `live_fp` is
    /// exact (the previous actor's state was saved).
    #[inline(always)]
    pub(super) unsafe fn prepare_to_run(&self, slot: &Slot, index: u32) {
        let cell = slot.cell.get();
        // SAFETY: forwarded from the caller.
        unsafe {
            if (*cell).stack_len == 0 {
                // First run: bind the stack its spawn reserved (the pool's hottest), or the
                // one its spawn mapped for it (`SpawnOptions::stack_size`: `sp` holds its
                // length until now, see `ActorCell::sp`).
                let stack = if (*cell).stack_base == 0 {
                    self.shared.stacks.take_local(&self.stacks)
                } else {
                    Stack::from_raw((*cell).stack_base, (*cell).sp)
                };
                #[cfg(smarm_asan)]
                stack.asan_unpoison();
                (*cell).sp = crate::context::init_stack(stack.top(), actor_entry, slot as *const Slot as *mut u8);
                let (base, len) = stack.into_raw();
                (*cell).stack_base = base;
                (*cell).stack_len = len;
                // A first run is no migration.
                (*cell).assigned_thread = self.index;
                if self.cpu_time {
                    self.charge_cpu(slot);
                }
                // Relaxed: reports for `info` (see `Probe`).
                slot.probe.stack_base.store(base as u64, Ordering::Relaxed);
                slot.probe.stack_len.store(len as u64, Ordering::Relaxed);
                if (*cell).thread_bound {
                    // Relaxed: published to wakers by the Release of the actor's next state
                    // transition, as in `switch_out`.
                    slot.pinned.store(self.index as u32, Ordering::Relaxed);
                }
            } else if (*cell).assigned_thread != self.resume_key {
                self.arrived(slot, index);
            }
            fp_control_switch(self.live_fp.get(), (*cell).fp);
            self.live_fp.set((*cell).fp);
        }
        #[cfg(feature = "smarm-trace")]
        self.trace_resume(slot, index);
        stats::bump(&slot.resumes);
    }

    /// The out-of-line part of `prepare_to_run` (see `resume_key`): the actor last ran on
    /// another thread, or the runtime counts CPU time.
    ///
    /// # Safety
    /// As `prepare_to_run`.
    #[cold]
    #[inline(never)]
    unsafe fn arrived(&self, slot: &Slot, index: u32) {
        let cell = slot.cell.get();
        // SAFETY: forwarded from the caller (we own the control block).
        let last = unsafe { std::mem::replace(&mut (*cell).assigned_thread, self.index) };
        if last != self.index && last != usize::MAX {
            LocalCounts::bump(&self.counts.migrations);
            // Recorded before the resume, so any held-back park goes first as a `Park`: a
            // migration is rare next to the resumes the merging saves.
            #[cfg(feature = "smarm-trace")]
            self.trace(crate::trace_ring::EventKind::Migrate, packed_pid(slot, index), last as u64);
        }
        #[cfg(not(feature = "smarm-trace"))]
        let _ = index;
        if self.cpu_time {
            self.charge_cpu(slot);
        }
    }

    /// Copies this thread's hot counters to its shared ones (see `stats`).
    pub(crate) fn publish_counts(&self) {
        self.counts.publish(self.stats());
    }

    fn retire(&self, index: u32) {
        let sh = &*self.shared;
        if self.cpu_time {
            let slot = sh.slab.slot(index);
            if core::ptr::eq(self.cpu_last.get(), slot) {
                self.charge_cpu(core::ptr::null());
            }
            // Relaxed: a report; the next occupant starts from zero (see `note_spawn`).
            slot.probe.cpu.store(0, Ordering::Relaxed);
        }
        let cell = sh.slab.slot(index).cell.get();
        // SAFETY: the actor finished and switched away for good; its stack and task are ours.
        let was_root = unsafe {
            let stack = Stack::from_raw((*cell).stack_base, (*cell).stack_len);
            let len = (*cell).stack_len;
            (*cell).stack_base = 0;
            (*cell).stack_len = 0;
            if len == sh.pooled_stack_len {
                sh.stacks.put_local(&self.stacks, stack);
            } else {
                drop(stack); // mapped for this actor alone (`SpawnOptions::stack_size`)
            }
            ((*cell).task.take(), (*cell).is_root)
        };
        let (task, was_root) = was_root;
        sh.slab.mark_done(index);
        if self.solo {
            sh.slab.free(index);
        } else {
            sh.slab.free_local(index, self.index, &self.freed);
        }
        if let Some(t) = task {
            // SAFETY: the control block's reference, released once; the actor ran.
            unsafe {
                actor::notify(t);
                actor::release(t);
            }
        }
        Shared::retired(&self.shared, was_root);
    }

    /// `Builder::busy_poll`: polls the reactor without blocking until something is runnable
    /// or the spin (or the next timer) is over. Only the thread holding the poll spins; the
    /// others go on to sleep (one spinner per runtime is enough to see the network, and more
    /// would take CPU from the threads that run actors). Returns true if work appeared.
    #[cold]
    fn busy_poll(&self, now: Instant) -> bool {
        let sh = &*self.shared;
        let Some(reactor) = sh.reactor_if_made() else { return false };
        if !reactor.has_waiters() {
            return false;
        }
        let mut end = now + sh.config.busy_poll;
        if let Some(next) = sh.timers.until_next(now) {
            end = end.min(now + next);
        }
        let inbox = self.inbox();
        loop {
            let Some(mut poll) = reactor.try_lock_poll() else { return false };
            reactor.wait(&mut poll, Some(Duration::ZERO));
            stats::bump(&self.stats().polls);
            if reactor.dispatch(&poll) > 0 {
                #[cfg(feature = "smarm-trace")]
                self.trace(crate::trace_ring::EventKind::IoReady, 0, 0);
                return true;
            }
            drop(poll);
            for _ in 0..IDLE_SPINS {
                if !sh.run_queue.is_empty() || !inbox.is_empty() || self.stealable() {
                    return true;
                }
                core::hint::spin_loop();
            }
            if sh.lifecycle.is_finished() || Instant::now() >= end {
                return false;
            }
        }
    }

    /// Counts a reactor poll; returns `woken`.
    #[inline(always)]
    fn count_poll(&self, woken: usize) -> usize {
        stats::bump(&self.stats().polls);
        woken
    }

    fn idle_wait(&self) {
        let sh = &*self.shared;
        if sh.config.cpu_time {
            self.charge_cpu(core::ptr::null());
        }
        self.arm_timeouts(true);
        if self.lone_pending.replace(false) {
            // Without announcing sleep, so no spawn or wake will cut the nap short: the owner
            // of the lone actor is running, and work that appears meanwhile waits at most one
            // nap for this thread (a wake that cut it short, on a queue growing past one, cost
            // the spawn of a pair a cross-core steal per round: history 58).
            std::thread::sleep(LONE_NAP);
            return;
        }
        let inbox = self.inbox();
        for _ in 0..IDLE_SPINS {
            if !sh.run_queue.is_empty() || !inbox.is_empty() || self.stealable() {
                return;
            }
            core::hint::spin_loop();
        }
        let now = Instant::now();
        if sh.fire_due(now) > 0 {
            return;
        }
        if !sh.config.busy_poll.is_zero() && self.busy_poll(now) {
            return;
        }
        let has_work = || {
            !sh.run_queue.is_empty()
                || !inbox.is_empty()
                || self.stealable()
                || sh.lifecycle.is_finished()
                || sh.timers.due(Instant::now())
        };
        let timeout = || sh.timers.until_next(now).map(|d| d.max(Duration::from_micros(1)));
        // One idle thread waits in the reactor instead of on its token (see `io`): whoever
        // gets the poll. Its `PollFlag` is set before it announces sleep.
        if let Some(reactor) = sh.reactor_if_made() {
            if let Some(mut poll) = reactor.try_lock_poll() {
                let parker = &sh.parkers[self.index];
                parker.in_poll.enter();
                if sh.idle.prepare_park(self.index, has_work) {
                    let t0 = crate::context::rdtsc();
                    reactor.wait(&mut poll, timeout());
                    self.count_sleep(t0);
                    stats::bump(&self.stats().polls);
                    sh.idle.clear(self.index);
                    parker.in_poll.leave();
                    // After withdrawing the bit: the wakes below must not claim this thread.
                    let _woken = reactor.dispatch(&poll);
                    #[cfg(feature = "smarm-trace")]
                    if _woken > 0 {
                        self.trace(crate::trace_ring::EventKind::IoReady, 0, _woken as u64);
                    }
                } else {
                    parker.in_poll.leave();
                }
                return;
            }
        }
        if sh.idle.prepare_park(self.index, has_work) {
            self.publish_counts();
            let t0 = crate::context::rdtsc();
            sh.parkers[self.index].park(timeout());
            self.count_sleep(t0);
            sh.idle.clear(self.index);
        }
    }

    /// Counts a sleep that began at TSC `t0`.
    fn count_sleep(&self, t0: u64) {
        let now = crate::context::rdtsc();
        // The events after a sleep do not share the reading from before it (see `trace`).
        #[cfg(feature = "smarm-trace")]
        self.trace.set_clock(now);
        let st = self.stats();
        stats::bump(&st.sleeps);
        stats::add(&st.idle_ticks, now.saturating_sub(t0));
    }
}

/// Body of every scheduler thread (including the one that called `Runtime::run`). A panic
/// in it aborts the process (see "A panic in scheduler code" in the module doc).
pub(crate) fn thread_main(shared: Arc<Shared>, index: usize) {
    let setup = shared.config.threads_setup.clone();
    setup.started();
    if let Err(payload) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_thread(shared, index))) {
        scheduler_panicked(index, &*payload);
    }
    setup.stopped();
}

/// Reports a panic that ended scheduler thread `index` and aborts. The payload is not
/// dropped: its `Drop` could be user code.
#[cold]
#[inline(never)]
fn scheduler_panicked(index: usize, payload: &(dyn std::any::Any + Send)) -> ! {
    use std::io::Write;
    let message = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
        .unwrap_or("Box<dyn Any>");
    // Not `eprintln!`: it panics if stderr is gone, and nothing may unwind out of here.
    let _ = writeln!(
        std::io::stderr(),
        "smarm: scheduler thread {index} panicked outside any actor: {message}\n\
         smarm: aborting: actors suspended on that thread can be neither resumed elsewhere nor released"
    );
    std::process::abort();
}

fn run_thread(shared: Arc<Shared>, index: usize) {
    let solo = shared.locals.len() == 1;
    let _alt = AltStack::ensure();
    shared.register_thread(index);
    let stats: *const ThreadStats = &*shared.thread_stats[index];
    #[cfg(feature = "smarm-trace")]
    let trace = shared.trace_rings[index].writer().expect("smarm: a scheduler thread's ring has one writer");
    let cpu_time = shared.config.cpu_time;
    let lone_seen = (0..shared.locals.len()).map(|_| Cell::new(usize::MAX)).collect();
    let worker = Worker {
        index,
        inbox: &*shared.inboxes[index],
        local: &shared.locals[index],
        slice_cycles: shared.config.timeslice_cycles,
        lifo_run_limit: shared.config.lifo_run_limit,
        shared,
        wake_slot: Cell::new(NONE),
        lifo_runs: Cell::new(0),
        current: Cell::new(NONE),
        handed_from: Cell::new(NONE),
        handed_slot: Cell::new(core::ptr::null()),
        handed_yield: Cell::new(false),
        lone_seen,
        lone_pending: Cell::new(false),
        slice_start: Cell::new(0),
        sends_left: Cell::new(SENDS_PER_CHECK),
        live_fp: Cell::new(crate::context::FP_DEFAULT),
        tick: Cell::new(0),
        inbox_yielded: Cell::new(false),
        parked_unwinders: Cell::new(0),
        pending_timeouts: PendingRing::new(),
        blocks: BlockCache::default(),
        stacks: Default::default(),
        solo,
        freed: Cell::new(0),
        stats,
        counts: LocalCounts::default(),
        resume_key: if cpu_time { usize::MAX - 1 } else { index },
        #[cfg(feature = "smarm-trace")]
        trace,
        #[cfg(feature = "smarm-trace")]
        trace_park: Cell::new(0),
        #[cfg(feature = "smarm-trace")]
        trace_wake_pid: Cell::new(0),
        cpu_time,
        cpu_last: Cell::new(core::ptr::null()),
        cpu_stamp: Cell::new(0),
    };
    // Relaxed: a report (see `stats`).
    worker.stats().started.store(crate::context::rdtsc(), Ordering::Relaxed);
    set_current_worker(&worker);
    let initial_fp = fp_control_read();
    worker.live_fp.set(initial_fp);
    worker.run_loop();
    worker.publish_counts();
    worker.shared.stacks.drain(&worker.stacks);
    // The calling thread of `Runtime::run` gets its own modes back.
    fp_control_switch(worker.live_fp.get(), initial_fp);
    set_current_worker(core::ptr::null());
}

/// The usable stack of an actor as `(bottom, size)` (ASan fiber annotations).
///
/// # Safety
/// `cell` is a control block the caller owns, with its stack bound.
#[cfg(smarm_asan)]
pub(super) unsafe fn actor_stack(cell: &crate::actor::ActorCell) -> (usize, usize) {
    let g = crate::stack::GUARD_BYTES;
    (cell.stack_base + g, cell.stack_len - g)
}

/// First function on every actor stack (called by the trampoline with the slot).
///
/// # Safety
/// Called only by the context trampoline, as the `context::EntryFn` of a stack bound by
/// `prepare_to_run`: `arg` is the actor's `Slot` (of a live runtime, which
/// outlives the actor), the actor is claimed and its control block holds its task, and
/// `resume_value` is the resuming thread's worker.
pub(crate) unsafe extern "sysv64" fn actor_entry(arg: *mut u8, resume_value: usize) -> ! {
    #[cfg(smarm_asan)]
    crate::context::asan::arrive(core::ptr::null_mut());
    complete_hand_off(resumed_on(resume_value));
    // SAFETY: the spawner passed the actor's slot, which lives as long as the runtime.
    let slot = unsafe { &*(arg as *const Slot) };
    let cell = slot.cell.get();
    let cancelled = cancel_reason(slot);
    #[cfg(feature = "tracing")]
    // SAFETY: the running actor's own control block.
    super::spans::on_start(unsafe { &mut (*cell).spans });
    // SAFETY: we are the running actor; the task reference is the control block's.
    unsafe {
        let task = (*cell).task.expect("smarm: actor started without a task");
        let reason = actor::run(task, cancelled);
        // Its actor-local values, on its own stack, before anyone learns that it ended.
        super::locals::destroy_current();
        // Process exit (names, monitors, links) on our own stack, before the slot is freed.
        // Neither call unwinds: the user Drops they run go through `user_drop::drop_caught`.
        if let Some((shared, pid)) = current_actor_pid() {
            #[cfg(feature = "tracing")]
            super::spans::exit_event(pid, &reason);
            #[cfg(feature = "smarm-trace")]
            trace_exit(pid, &reason);
            ((*shared).hooks.on_exit)(&*shared, pid, &reason);
        }
        // This frame never returns: nothing in it is dropped unless dropped here.
        drop(reason);
        (*cell).intent = Intent::Done;
        #[cfg(smarm_asan)]
        crate::context::asan::leave(None, crate::context::asan::thread_stack());
        switch_to_scheduler((*cell).sched_sp);
    }
    // A retired actor is never resumed.
    std::process::abort();
}

/// Suspends the running actor (on `w`'s thread) with `intent`; returns once resumed,
/// possibly on another thread. Returns the actor's slot (stable across migration).
///
/// Always inlined (with `yield_now` and `check_cancelled`'s fast path): after a resume, every
/// `ret` executed before the next switch pops a return-stack-buffer entry that belongs to the
/// other context and mispredicts, so the resumed path should return as little as possible.
/// Out of line, `switch_out` costs ~23 ticks more per yield round trip (outputs/history.md,
/// finding 5).
#[inline(always)]
pub(super) fn switch_out(w: &Worker, intent: Intent) -> (&'static Slot, &'static Worker) {
    let index = w.current.get();
    // SAFETY: the slab lives as long as the runtime, which outlives its actors; detaching
    // the lifetime from `w` lets us use the slot after `w` is gone (after migration).
    let slot: &'static Slot = unsafe { &*(w.shared.slab.slot(index) as *const Slot) };
    let cell = slot.cell.get();
    // An unwinding actor must resume on this thread (std's panic count is per thread), and a
    // thread-bound one runs nowhere else (it runs here: it was pinned at its first run).
    let unwinding = actor_unwinding(slot);
    let pin = update_pin(slot, w.index as u32, unwinding);
    if unwinding {
        w.parked_unwinders.set(w.parked_unwinders.get() + 1);
    }
    #[cfg(debug_assertions)]
    crate::raw_mutex::order::assert_none_held();
    #[cfg(smarm_asan)]
    let mut asan_save = core::ptr::null_mut();
    #[cfg(smarm_asan)]
    crate::context::asan::leave(Some(&mut asan_save), crate::context::asan::thread_stack());
    // SAFETY: we are the running actor; `sched_sp` was written by the switch that resumed us.
    let resume_value = unsafe {
        (*cell).intent = intent;
        switch_to_scheduler((*cell).sched_sp)
    };
    #[cfg(smarm_asan)]
    crate::context::asan::arrive(asan_save);
    (slot, resumed(slot, index, pin, unwinding, resume_value))
}

/// Records where the switching-out actor `slot` may resume, before the scheduler (or a
/// hand-off) publishes it as queued or parked: on this thread (`here`) if it is unwinding
/// (std's panic count is per thread) or thread-bound (pinned here since its first run);
/// anywhere otherwise. Returns the pin. The common case (neither, and no pin set) is one
/// load and a compare: `thread_bound` is read only when a pin is already set.
#[inline(always)]
pub(super) fn update_pin(slot: &Slot, here: u32, unwinding: bool) -> u32 {
    // Relaxed (the load and the stores): the running actor's own field; wakers read it after
    // the scheduler's Release state transition, which publishes it.
    let pinned = slot.pinned.load(Ordering::Relaxed);
    if unwinding {
        if pinned != here {
            slot.pinned.store(here, Ordering::Relaxed);
        }
        return here;
    }
    if pinned == UNPINNED {
        return UNPINNED;
    }
    // SAFETY: the running actor's own control block.
    if unsafe { (*slot.cell.get()).thread_bound } {
        // Pinned at its first run, to the thread it runs on now.
        debug_assert_eq!(pinned, here, "smarm: a thread-bound actor runs off its thread");
        return pinned;
    }
    // It was pinned while it unwound, and has stopped unwinding.
    slot.pinned.store(UNPINNED, Ordering::Relaxed);
    UNPINNED
}

/// The worker a resume value names: every resume passes the resuming thread's worker (see
/// `context`), so an actor learns the thread it now runs on without a thread-local read.
/// Like [`current_worker`]'s result, it must not be kept across a switch.
#[inline(always)]
fn resumed_on(resume_value: usize) -> &'static Worker {
    debug_assert!(
        core::ptr::eq(resume_value as *const Worker, current_worker()),
        "smarm: resumed by another thread's worker"
    );
    // SAFETY: the resuming thread's live worker, on whose thread we now run; the 'static
    // only spares callers a lifetime they cannot name (they drop it before any switch).
    unsafe { &*(resume_value as *const Worker) }
}

/// The common tail of every actor suspension, run once the actor is resumed: the debug
/// checks of the thread-local rule and of the pin, the parked-unwinder count (`unwinding`:
/// the actor was counted when it switched out), and the bookkeeping of a hand-off that
/// resumed us. Returns the worker of the thread we now run on.
#[inline(always)]
pub(super) fn resumed(slot: &Slot, index: u32, pin: u32, unwinding: bool, resume_value: usize) -> &'static Worker {
    let w = resumed_on(resume_value);
    complete_hand_off(w);
    #[cfg(debug_assertions)]
    {
        let cell = slot.cell.get();
        let now = w;
        // SAFETY: we are running again; whoever resumed us wrote assigned_thread.
        let assigned = unsafe { (*cell).assigned_thread };
        assert_eq!(
            now.index, assigned,
            "smarm: actor resumed on thread {} but the scheduler handed it to thread {} \
             (a thread-local was cached across a switch)",
            now.index, assigned
        );
        assert_eq!(now.current.get(), index, "smarm: resumed actor is not the worker's current actor");
        if pin != UNPINNED {
            assert_eq!(now.index as u32, pin, "smarm: a pinned actor migrated");
        }
    }
    #[cfg(not(debug_assertions))]
    let _ = (slot, index, pin);
    if unwinding {
        // Pinned, so this is the same thread (and worker) we left.
        w.parked_unwinders.set(w.parked_unwinders.get() - 1);
    }
    w
}

/// The running actor, as `(runtime, pid)`, if called from an actor.
#[inline]
pub(crate) fn current_actor_pid() -> Option<(*const Shared, Pid)> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: a non-null worker pointer is this thread's live worker.
    let w = unsafe { &*w };
    w.current_pid().map(|pid| (w.shared_ptr(), pid))
}

/// This thread's worker, the running actor's index and its slot (stable across migration),
/// if called from an actor. The worker must not be used after a switch.
#[inline(always)]
pub(super) fn running_actor() -> Option<(&'static Worker, u32, &'static Slot)> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: a non-null worker pointer is this thread's live worker; callers drop it
    // before any switch (the 'static only spares them a lifetime they cannot name).
    let w: &'static Worker = unsafe { &*w };
    let index = w.current.get();
    if index == NONE {
        return None;
    }
    // SAFETY: the slab outlives the runtime's actors (as in `switch_out`).
    let slot: &'static Slot = unsafe { &*(w.shared.slab.slot(index) as *const Slot) };
    Some((w, index, slot))
}

/// The running actor, as `(runtime, pid, slot)`, if called from an actor.
#[inline]
pub(crate) fn current_actor_slot() -> Option<(*const Shared, Pid, &'static Slot)> {
    let (w, index, slot) = running_actor()?;
    // Relaxed: the running actor's generation cannot change under it.
    let gen = (slot.state.load(Ordering::Relaxed) >> 32) as u32;
    Some((w.shared_ptr(), w.shared.slab.pid(index, gen), slot))
}

/// Gives other actors a turn; see [`crate::yield_now`].
#[inline]
pub(crate) fn yield_now() {
    let w = current_worker();
    if w.is_null() {
        std::thread::yield_now();
        return;
    }
    // SAFETY: this thread's live worker; not used after the switch.
    let w = unsafe { &*w };
    if !w.running_actor() {
        std::thread::yield_now();
        return;
    }
    #[cfg(feature = "tracing")]
    if let Some(slot) = w.current_slot() {
        // SAFETY: the running actor's own control block.
        super::spans::suspend(unsafe { &mut (*slot.cell.get()).spans });
    }
    // A yield ends the slice too: a park of reason 0, held back (see `Worker::trace`).
    #[cfg(feature = "smarm-trace")]
    if w.running_actor() {
        w.trace_park.set(1);
    }
    let (slot, _) = match super::hand_off::hand_off_yield(w) {
        Some(resumed) => resumed,
        None => switch_out(w, Intent::Yield),
    };
    #[cfg(feature = "tracing")]
    // SAFETY: the running actor's own control block.
    super::spans::resume(unsafe { &mut (*slot.cell.get()).spans });
    check_cancelled(slot);
}

/// Blocks the calling actor until woken (or the calling thread until unparked). May return
/// spuriously: callers re-check their condition. `kind` and the caller's location (through
/// `#[track_caller]` up to the public blocking call) are what introspection reports.
#[inline(always)]
#[track_caller]
pub(crate) fn park_current(kind: WaitKind) {
    match running_actor() {
        Some((w, _, slot)) => {
            park_running(w, slot, kind, core::panic::Location::caller());
        }
        None => std::thread::park(),
    }
}

/// Parks the running actor `slot` of worker `w` (see [`park_current`]); returns the worker
/// of the thread it was resumed on.
#[inline(always)]
pub(super) fn park_running(
    w: &Worker,
    slot: &'static Slot,
    kind: WaitKind,
    site: &'static core::panic::Location<'static>,
) -> &'static Worker {
    // Release: orders the `resumes` bump of this run before the park record, for a reader
    // that pairs them (see `Slot::wait`). A compiler barrier only, on x86_64.
    std::sync::atomic::fence(Ordering::Release);
    // Relaxed: reports for `info` (see `Slot::wait`); the actor's own fields.
    slot.wait_kind.store(kind as u8, Ordering::Relaxed);
    slot.wait.store(site as *const _ as u64, Ordering::Relaxed);
    LocalCounts::bump(&w.counts.parks);
    // Held back, to be merged with the next resume on this thread (see `Worker::trace`).
    #[cfg(feature = "smarm-trace")]
    w.trace_park.set(kind as u64 + 1);
    // An actor being shut down while it unwinds must not block on something that may never
    // come; it yields instead and its caller's loop re-checks.
    // Acquire: pairs with the Release store of a stop request (`stop_all`, `request_stop`),
    // as in `check_cancelled`.
    let cancelled = slot.cancel.is_set(Ordering::Acquire);
    #[cfg(feature = "tracing")]
    // SAFETY: the running actor's own control block.
    super::spans::suspend(unsafe { &mut (*slot.cell.get()).spans });
    let (slot, w) = if cancelled && actor_unwinding(slot) {
        switch_out(w, Intent::Yield)
    } else {
        if cancelled {
            // A pending stop request (one the actor swallowed with `catch_unwind`, or one that
            // came while it ran) is raised here rather than after a park: the wake that came
            // with it may have been consumed already, and nothing else may ever wake us.
            // Returns only for a request the actor defers.
            check_cancelled(slot);
        }
        match hand_off_park(w) {
            Some(resumed) => resumed,
            None => switch_out(w, Intent::Park),
        }
    };
    #[cfg(feature = "tracing")]
    // SAFETY: the running actor's own control block.
    super::spans::resume(unsafe { &mut (*slot.cell.get()).spans });
    check_cancelled(slot);
    w
}

/// The scheduler thread index recorded in the running actor's control block by the
/// scheduler that resumed it (the scheduler's notion of where the actor runs), for tests
/// that compare it with `current_worker`'s (the thread-local's notion).
pub fn scheduler_assigned_thread() -> Option<usize> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker.
    let slot = unsafe { &*w }.current_slot()?;
    // SAFETY: the running actor's own control block.
    Some(unsafe { (*slot.cell.get()).assigned_thread })
}

/// An actor as a trace record's `pid` field: `index << 32 | generation` (feature `smarm-trace`).
#[cfg(feature = "smarm-trace")]
#[inline(always)]
pub(crate) fn pack(pid: Pid) -> u64 {
    (u64::from(pid.index()) << 32) | u64::from(pid.generation())
}

/// [`pack`] for the actor in `slot` (slab index `index`), reading its generation.
#[cfg(feature = "smarm-trace")]
#[inline(always)]
pub(crate) fn packed_pid(slot: &Slot, index: u32) -> u64 {
    // Relaxed: the generation of an actor that is running or being woken is stable.
    (u64::from(index) << 32) | (slot.state.load(Ordering::Relaxed) >> 32)
}

/// The trace event of an actor's end: `Panic`, or `Exit` with 0 for a normal end, 1 for a
/// kill or shutdown, 2 otherwise.
#[cfg(feature = "smarm-trace")]
fn trace_exit(pid: Pid, reason: &crate::exit::DownReason) {
    use crate::exit::DownReason;
    use crate::trace_ring::EventKind;
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker, used before any switch.
    let w = unsafe { &*w };
    let (kind, code) = match reason {
        DownReason::Normal => (EventKind::Exit, 0),
        DownReason::Panic(_) => (EventKind::Panic, 0),
        DownReason::Killed | DownReason::Shutdown => (EventKind::Exit, 1),
        _ => (EventKind::Exit, 2),
    };
    w.trace(kind, pack(pid), code);
}

/// The running actor's CPU time in TSC ticks up to `now` (what its probe holds plus the
/// period running since the last charge), if the runtime counts CPU time
/// (`Builder::cpu_time`); None off an actor or without it. For `profile`.
pub(crate) fn current_cpu_ticks(now: u64) -> Option<u64> {
    let (w, _, slot) = running_actor()?;
    if !w.cpu_time {
        return None;
    }
    // Relaxed: the running actor's own counter (see `Probe`).
    let charged = slot.probe.cpu.load(Ordering::Relaxed);
    let running = if core::ptr::eq(w.cpu_last.get(), slot) { now.saturating_sub(w.cpu_stamp.get()) } else { 0 };
    Some(charged + running)
}
