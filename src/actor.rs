//! The actor control block, the type-erased spawned task, join handles, and outcome
//! publication.
//!
//! # Control block ([`ActorCell`])
//!
//! Lives inline in its slab slot (`slot_state`). All-zero bytes are its empty value, so the
//! slab is allocated zeroed and costs nothing until used. Ownership: the spawner writes it
//! before publishing the slot; afterwards only the scheduler thread that claimed the actor
//! and the actor itself (while running there) touch it, never concurrently, because the
//! actor runs only between that thread's `switch_to_actor` and the actor's switch back.
//!
//! # Task
//!
//! A spawn makes one allocation: a `Task<F, T>` holding the closure, the join [`Packet`]
//! and a count of its two references. The control block keeps a thin type-erased pointer
//! to it (`TaskHeader` at offset 0, with the functions that know `F` and `T`); the
//! [`JoinHandle`] keeps the other. It is a block of the scheduler threads' block caches
//! (`runtime::alloc_block`) when it fits one: a task is made by its spawner and freed
//! wherever its last reference goes, usually on the thread the actor ended on, and those
//! caches hand such blocks back between threads in batches. The closure is taken and run (under `catch_unwind`) on the actor's
//! stack; the outcome is published to the packet from the actor, so user `Drop` code
//! (the closure's captures, an unjoined result) runs on the actor stack and never on a
//! scheduler thread. Nothing of it escapes: the entry that calls [`run`] cannot unwind, so
//! every user `Drop` after the body (a value the exit reason replaces, an unjoined result,
//! a panic's payload) runs under `catch_unwind` (`runtime::user_drop::drop_caught`).

use std::alloc::Layout;
use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::exit::{reason_from_payload, DownReason};
use crate::runtime::user_drop::drop_caught;
use crate::runtime::Waiter;
use crate::runtime::{alloc_block, free_block};
use crate::slot_state::Pid;

/// What the actor asked for when it switched back to its scheduler (written by the actor
/// just before the switch, read by the scheduler just after it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Intent {
    /// Not switched out yet since it was resumed (zero: a zeroed control block's value).
    Running = 0,
    /// Requeue me.
    Yield = 1,
    /// Park me until woken (unless a wake already came: NOTIFIED).
    Park = 2,
    /// My body has ended: retire me.
    Done = 3,
}

/// The actor control block. See the module doc for ownership; all-zero is "empty".
///
/// Field order matters: the fields touched on every switch come first, so that together
/// with the head of [`Slot`](crate::slot_state::Slot) they share one cache line.
#[repr(C)]
pub(crate) struct ActorCell {
    /// Saved sp while the actor is suspended. Before its first run: the length of a stack
    /// its spawn mapped for it alone (at `stack_base`), or 0 if it takes one from the pool.
    pub(crate) sp: usize,
    /// Saved sp of the scheduler thread currently running the actor (written by
    /// `switch_to_actor`).
    pub(crate) sched_sp: usize,
    /// The actor's saved floating-point control state (see `context`), valid while the
    /// actor is not live in some thread's registers.
    pub(crate) fp: crate::context::FpControl,
    /// Scheduler thread index that resumed the actor last (debug migration check).
    pub(crate) assigned_thread: usize,
    /// Nesting depth of `NoPreempt` guards.
    pub(crate) no_preempt: u32,
    /// Set by the actor before switching back.
    pub(crate) intent: Intent,
    /// This actor itself started a panic (or a cancellation) that may still be unwinding.
    pub(crate) unwinding: bool,
    /// A stop request (kill, exit signal, shutdown) was raised in this actor as an unwind.
    /// Only then does the request decide the exit reason over a panic of the actor's own: a
    /// signal that arrives while the actor unwinds its own panic finds it already dying.
    pub(crate) stop_raised: bool,
    /// Stop requests other than a kill are neither raised in this actor nor decide its exit
    /// reason (the root, once its body has returned, while it stops the supervision trees).
    pub(crate) defer_stops: bool,
    /// The root actor: its end starts the runtime's shutdown.
    pub(crate) is_root: bool,
    /// Bound to one thread (`spawn_pinned`): its first run pins it (`Slot::pinned`) to the
    /// thread running it, for good.
    pub(crate) thread_bound: bool,
    /// The actor's stack as `Stack::into_raw` parts; `(0, 0)` when none. `stack_len` is 0
    /// until the first run binds the stack (the first-run test); `stack_base` may be set
    /// before, by a spawn that mapped a stack of its own (see `sp`).
    pub(crate) stack_len: usize,
    pub(crate) stack_base: usize,
    /// The spawned task (closure + join packet), or None.
    pub(crate) task: Option<NonNull<TaskHeader>>,
    /// The exit reason a behaviour chose for itself before returning (`gen_server` ending
    /// with a non-normal reason): the body then returns instead of unwinding a second time.
    pub(crate) exit_override: Option<Box<DownReason>>,
    /// The actor's `actor_local!` values (see `runtime::locals`); all-zero is "none yet".
    pub(crate) locals: crate::runtime::locals::ActorLocals,
    /// Its `tracing` spans while suspended (feature `tracing`, see `runtime::spans`).
    #[cfg(feature = "tracing")]
    pub(crate) spans: crate::runtime::spans::ActorSpans,
}

/// The type-erased head of a `Task<F, T>` (at offset 0): the three functions that know `F`
/// and `T`. Each is unsafe to call: its argument must be the header of a live `Task` of the
/// types the function was instantiated for (true when it is called through that same
/// header, as the wrappers [`run`], [`notify`] and [`release`] do), and the wrapper's
/// `# Safety` contract must hold.
#[repr(C)]
pub(crate) struct TaskHeader {
    /// Runs the closure (or drops it if the actor was cancelled before starting) and
    /// publishes the outcome. Returns the exit reason. Never unwinds.
    run: unsafe fn(NonNull<TaskHeader>, Option<DownReason>) -> DownReason,
    /// Marks the outcome joinable and wakes the joiner (called by the scheduler once the
    /// actor's slot and stack are free).
    notify: unsafe fn(NonNull<TaskHeader>),
    /// Drops one reference; the last one drops the task and frees it.
    release: unsafe fn(NonNull<TaskHeader>),
}

#[repr(C)]
struct Task<F, T> {
    header: TaskHeader,
    /// The control block's reference and the handle's: the last one released frees it.
    refs: AtomicUsize,
    f: UnsafeCell<Option<F>>,
    packet: Packet<T>,
}

// SAFETY: `f` is taken exactly once, by the actor on its own stack (the control block's
// ownership protocol orders it after the spawner's write); the packet is a Mutex.
unsafe impl<F: Send, T: Send> Sync for Task<F, T> {}
// SAFETY: as above.
unsafe impl<F: Send, T: Send> Send for Task<F, T> {}

/// Allocates a task for `f`; returns the control block's reference and the join handle's.
pub(crate) fn new_task<F, T>(f: F) -> (NonNull<TaskHeader>, JoinRef<T>)
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    let layout = Layout::new::<Task<F, T>>();
    let Some(p) = NonNull::new(alloc_block(layout) as *mut Task<F, T>) else {
        std::alloc::handle_alloc_error(layout);
    };
    // SAFETY: a fresh allocation of `Task<F, T>`'s layout (non-zero size: the header).
    unsafe {
        p.as_ptr().write(Task {
            header: TaskHeader { run: run_task::<F, T>, notify: notify_task::<F, T>, release: release_task::<F, T> },
            refs: AtomicUsize::new(2),
            f: UnsafeCell::new(Some(f)),
            packet: Packet::new(),
        })
    };
    // SAFETY: initialised above; the task lives until both references are released.
    let packet = NonNull::from(unsafe { &p.as_ref().packet });
    // The header is at offset 0 (repr(C)).
    let header = p.cast::<TaskHeader>();
    (header, JoinRef { packet, task: header, _t: PhantomData })
}

/// `TaskHeader::run` of a `Task<F, T>`.
///
/// # Safety
/// `h` is the header of a live `Task<F, T>` (the control block's reference); called once,
/// on the actor's own stack (see [`run`]).
unsafe fn run_task<F, T>(h: NonNull<TaskHeader>, cancelled: Option<DownReason>) -> DownReason
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: `h` points at a live Task<F, T> (the control block holds a reference).
    let task = unsafe { &*(h.as_ptr() as *const Task<F, T>) };
    // SAFETY: only the actor, once, takes the closure (see the Sync impl).
    let f = unsafe { (*task.f.get()).take() };
    let outcome = catch_unwind(AssertUnwindSafe(move || {
        let f = f.expect("smarm: actor task run twice");
        match cancelled {
            Some(reason) => {
                drop(f);
                Err(reason)
            }
            None => call_caught(f).map_err(reason_from_payload),
        }
    }))
    // (Err: the closure's Drop panicked.)
    .unwrap_or_else(|p| Err(reason_from_payload(p)));
    // Values the exit reason replaces are dropped once the reason is decided (a drop can
    // raise a pending stop request, which must not count as raised for the decision), and
    // through `drop_caught`: this frame has no `catch_unwind` around it.
    let mut replaced_value = None;
    let mut replaced_outcome = None;
    // A reason the body chose for itself (a behaviour's crash or stop) replaces a return.
    let outcome = match (outcome, crate::runtime::take_current_exit_override()) {
        (Ok(v), Some(reason)) => {
            replaced_value = Some(v);
            Err(reason)
        }
        (outcome, _) => outcome,
    };
    // A stop request (kill, exit signal, shutdown) decides the exit reason even if the actor
    // swallowed its unwind with `catch_unwind` and then returned or failed otherwise: a kill
    // cannot be undone. A request that was never raised here, because the actor was already
    // unwinding its own panic when it came, finds the actor dying: the panic stays the reason
    // (as in OTP, the first exit wins).
    let outcome = match crate::runtime::current_cancel_reason() {
        Some((stop, raised)) if outcome.as_ref().err() != Some(&stop) && (raised || outcome.is_ok()) => {
            replaced_outcome = Some(outcome);
            Err(stop)
        }
        _ => outcome,
    };
    if let Some(v) = replaced_value {
        drop_caught(v);
    }
    if let Some(outcome) = replaced_outcome {
        drop_caught(outcome);
    }
    let reason = match &outcome {
        Ok(_) => DownReason::Normal,
        Err(r) => r.clone(),
    };
    // Publishing may drop an unjoined result (user Drop code): keep it off the unwinder's
    // path out of this frame.
    if let Err(payload) = catch_unwind(AssertUnwindSafe(|| task.packet.complete(outcome))) {
        drop_caught(payload);
    }
    reason
}

/// Runs the actor's body under `catch_unwind`, in a frame of its own: a panic's unwinder
/// reads the call-site table and the CFA program of every frame it passes (twice: search,
/// then cleanup), and those of this small frame are short; inlined into `run_task` they
/// would be that whole function's.
#[inline(never)]
fn call_caught<F: FnOnce() -> T, T>(f: F) -> std::thread::Result<T> {
    catch_unwind(AssertUnwindSafe(f))
}

/// `TaskHeader::notify` of a `Task<F, T>`.
///
/// # Safety
/// `h` is the header of a live `Task<F, T>` whose closure has run (see [`notify`]).
unsafe fn notify_task<F, T>(h: NonNull<TaskHeader>) {
    // SAFETY: `h` points at a live Task<F, T> (the control block still holds a reference).
    let task = unsafe { &*(h.as_ptr() as *const Task<F, T>) };
    task.packet.notify();
}

/// `TaskHeader::release` of a `Task<F, T>`.
///
/// # Safety
/// `h` is the header of a `Task<F, T>` from [`new_task`], this reference has not been
/// released before, and `h` is not used afterwards.
unsafe fn release_task<F, T>(h: NonNull<TaskHeader>) {
    let p = h.cast::<Task<F, T>>();
    // Release: this owner's uses of the task happen before the last owner frees it, as in
    // `Arc`'s drop.
    // SAFETY: the task is live while this reference is.
    if unsafe { p.as_ref() }.refs.fetch_sub(1, Ordering::Release) != 1 {
        return;
    }
    // Acquire: pairs with the other owner's Release above, so its uses happen before the
    // drop and the free.
    fence(Ordering::Acquire);
    // SAFETY: the last reference: nobody else can reach the task. It came from
    // `alloc_block` with this layout (`new_task`).
    unsafe {
        core::ptr::drop_in_place(p.as_ptr());
        free_block(p.as_ptr() as *mut u8, Layout::new::<Task<F, T>>());
    }
}

/// Runs a task from the actor entry. Never unwinds.
///
/// # Safety
/// `h` is the control block's live task reference; called once, on the actor's stack.
pub(crate) unsafe fn run(h: NonNull<TaskHeader>, cancelled: Option<DownReason>) -> DownReason {
    // SAFETY: forwarded.
    unsafe { (h.as_ref().run)(h, cancelled) }
}

/// Makes the outcome visible to `join` and wakes the joiner. Called by the scheduler after
/// the actor's slot is free, so a `join` that returns guarantees the slot can be reused.
///
/// # Safety
/// `h` is a live reference; the task has run.
pub(crate) unsafe fn notify(h: NonNull<TaskHeader>) {
    // SAFETY: forwarded.
    unsafe { (h.as_ref().notify)(h) }
}

/// Drops the control block's task reference.
///
/// # Safety
/// `h` is a live reference not released before.
pub(crate) unsafe fn release(h: NonNull<TaskHeader>) {
    // SAFETY: forwarded.
    unsafe { (h.as_ref().release)(h) }
}

/// The one-shot result cell between an actor and its [`JoinHandle`].
pub(crate) struct Packet<T> {
    state: Mutex<PacketState<T>>,
}

struct PacketState<T> {
    /// Stored by the actor when its closure ends.
    result: Option<Result<T, DownReason>>,
    /// Set by the scheduler once the actor's slot and stack are released: only then does
    /// `join` return.
    done: bool,
    /// The handle was dropped: results are dropped on arrival.
    detached: bool,
    /// Who blocks in `join`. Woken while the lock is held: a waiter deregisters under the
    /// same lock before it can go away, so a woken `Waiter::Actor`'s runtime is alive.
    waiter: Option<Waiter>,
}

impl<T> Packet<T> {
    fn new() -> Self {
        Packet { state: Mutex::new(PacketState { result: None, done: false, detached: false, waiter: None }) }
    }

    /// Stores the outcome (from the actor). A detached handle's value is dropped here, on
    /// the actor's stack.
    fn complete(&self, outcome: Result<T, DownReason>) {
        let mut s = self.state.lock();
        if s.detached {
            drop(s);
            drop(outcome);
            return;
        }
        s.result = Some(outcome);
    }

    /// Publishes the stored outcome to `join` (from the scheduler, after retirement).
    fn notify(&self) {
        let mut s = self.state.lock();
        s.done = true;
        if let Some(w) = s.waiter.take() {
            w.wake();
        }
    }
}

/// The join handle's reference to a task (knows `T`, not `F`).
pub(crate) struct JoinRef<T> {
    packet: NonNull<Packet<T>>,
    task: NonNull<TaskHeader>,
    _t: PhantomData<T>,
}

// SAFETY: the packet is a Mutex around a `T: Send`; the task reference is counted atomically.
unsafe impl<T: Send> Send for JoinRef<T> {}
// SAFETY: all access to the packet goes through its Mutex.
unsafe impl<T: Send> Sync for JoinRef<T> {}

impl<T> JoinRef<T> {
    fn packet(&self) -> &Packet<T> {
        // SAFETY: the task (and so its packet) lives while we hold our reference.
        unsafe { self.packet.as_ref() }
    }
}

impl<T> Drop for JoinRef<T> {
    fn drop(&mut self) {
        // SAFETY: our own reference, released once.
        unsafe { release(self.task) }
    }
}

/// An owned permission to wait for an actor's end and take its value.
///
/// Dropping the handle detaches the actor: it keeps running and its value is dropped when
/// it returns.
///
/// ```
/// let v = smarm::run(|| smarm::spawn(|| 6 * 7).join().unwrap());
/// assert_eq!(v, 42);
/// ```
pub struct JoinHandle<T> {
    inner: JoinRef<T>,
    pid: Pid,
}

impl<T> JoinHandle<T> {
    pub(crate) fn new(inner: JoinRef<T>, pid: Pid) -> Self {
        JoinHandle { inner, pid }
    }

    /// The actor's pid.
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::spawn(smarm::current_pid);
    ///     let pid = h.pid();
    ///     assert_eq!(h.join(), Ok(pid));
    /// });
    /// ```
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// True once the actor has ended (join will not block).
    ///
    /// ```
    /// smarm::run(|| {
    ///     let h = smarm::spawn(|| ());
    ///     while !h.is_finished() {
    ///         smarm::yield_now();
    ///     }
    ///     assert_eq!(h.join(), Ok(())); // does not block now
    /// });
    /// ```
    pub fn is_finished(&self) -> bool {
        self.inner.packet().state.lock().done
    }

    /// Waits for the actor to end. Returns its value, or why it ended without one
    /// ([`DownReason::Panic`] with the message, [`DownReason::Shutdown`], ...).
    ///
    /// From an actor this parks the actor; from a plain thread it blocks the thread.
    ///
    /// ```
    /// smarm::run(|| {
    ///     assert_eq!(smarm::spawn(|| 7).join(), Ok(7));
    ///     assert_eq!(smarm::spawn(|| -> u8 { panic!("no") }).join(), Err(smarm::DownReason::Panic("no".into())));
    ///     // From a plain thread too: it blocks the thread.
    ///     let h = smarm::spawn(|| 8);
    ///     assert_eq!(std::thread::spawn(move || h.join()).join().unwrap(), Ok(8));
    /// });
    /// ```
    #[track_caller]
    pub fn join(self) -> Result<T, DownReason> {
        let packet = self.inner.packet();
        loop {
            let mut s = packet.state.lock();
            if s.done {
                return s.result.take().expect("smarm: join found no outcome");
            }
            s.waiter = Some(Waiter::current());
            drop(s);
            // Deregister if the park unwinds (the joiner is being shut down), so the actor
            // that completes later never wakes a waiter that is gone.
            let guard = Deregister(packet);
            crate::runtime::park_current(crate::slot_state::WaitKind::Join);
            core::mem::forget(guard);
        }
    }

    /// Takes the value if the actor has ended.
    pub(crate) fn try_take(&self) -> Option<Result<T, DownReason>> {
        let mut s = self.inner.packet().state.lock();
        if s.done {
            s.result.take()
        } else {
            None
        }
    }
}

struct Deregister<'a, T>(&'a Packet<T>);

impl<T> Drop for Deregister<'_, T> {
    fn drop(&mut self) {
        self.0.state.lock().waiter = None;
    }
}

impl<T> Drop for JoinHandle<T> {
    fn drop(&mut self) {
        let mut s = self.inner.packet().state.lock();
        s.detached = true;
        let result = s.result.take();
        drop(s);
        drop(result);
    }
}

impl<T> std::fmt::Debug for JoinHandle<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinHandle").field("pid", &self.pid).finish()
    }
}
