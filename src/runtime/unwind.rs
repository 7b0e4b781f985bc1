//! Unwinding actors: which actor of a thread is unwinding (std's panic count is per thread),
//! the exit reason a behaviour chose for itself, and the process-wide panic hook and
//! stack-overflow handler.

use std::sync::atomic::Ordering;
use std::sync::Once;

use super::worker::{current_actor_pid, current_worker, thread_panicking, NONE};
use crate::exit::DownReason;
use crate::slot_state::{Pid, Slot};
use crate::stack::{self, GUARD_BYTES};

/// The running actor (slot) is itself unwinding. std's `panicking()` is per *thread*: while
/// actor A is parked mid-unwind on this thread, every other actor here sees `true`. So an
/// actor counts as unwinding if the thread panics and either it marked itself (the panic
/// hook, or `check_cancelled`, mark the actor that starts an unwind) or no parked unwinder
/// on this thread could explain the panic. A stale mark (a panic the actor caught) is
/// cleared once the thread no longer panics.
#[inline(always)]
pub(super) fn actor_unwinding(slot: &Slot) -> bool {
    if !thread_panicking() {
        let cell = slot.cell.get();
        // SAFETY: the running actor's own control block.
        unsafe {
            if (*cell).unwinding {
                (*cell).unwinding = false;
            }
        }
        return false;
    }
    actor_unwinding_slow(slot)
}

#[cold]
#[inline(never)]
fn actor_unwinding_slow(slot: &Slot) -> bool {
    let cell = slot.cell.get();
    // SAFETY: as above.
    if unsafe { (*cell).unwinding } {
        return true;
    }
    let w = current_worker();
    // SAFETY: called from a running actor, so this thread has a live worker.
    if unsafe { &*w }.parked_unwinders.get() != 0 {
        // Another actor parked mid-unwind explains the panic count (std's count reads only
        // as a boolean, so an unwind this actor began without the hook is invisible here).
        return false;
    }
    // No parked unwinder: the panic is this actor's. Mark it, so that it is still known
    // to be unwinding at a later park, when other unwinders may be parked beside it.
    // SAFETY: the running actor's own control block.
    unsafe { (*cell).unwinding = true };
    true
}

/// Makes the running actor end with `reason` when its body returns (see
/// `ActorCell::exit_override`). Off an actor it does nothing.
pub(crate) fn set_current_exit_override(reason: DownReason) {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker.
    if let Some(slot) = unsafe { &*w }.current_slot() {
        // SAFETY: the running actor's own control block.
        unsafe { (*slot.cell.get()).exit_override = Some(Box::new(reason)) };
    }
}

/// Takes the running actor's exit override, if it set one.
pub(crate) fn take_current_exit_override() -> Option<DownReason> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker.
    let slot = unsafe { &*w }.current_slot()?;
    // SAFETY: the running actor's own control block.
    unsafe { (*slot.cell.get()).exit_override.take() }.map(|b| *b)
}

/// Marks the running actor as unwinding. smarm's panic hook does it for panics; every
/// `resume_unwind` inside smarm calls it first (a `resume_unwind` bypasses the hook).
pub(crate) fn mark_current_unwinding() {
    let w = current_worker();
    if w.is_null() {
        return;
    }
    // SAFETY: this thread's live worker.
    if let Some(slot) = unsafe { &*w }.current_slot() {
        // SAFETY: the running actor's own control block.
        unsafe { (*slot.cell.get()).unwinding = true };
    }
}

/// Installs, once per process, the panic hook that names actors and the stack-overflow
/// handler. A panic outside any actor goes to the hook installed before this one; a panic
/// in an actor is marked (see `actor_unwinding`) and reported by [`report_actor_panic`].
pub(crate) fn install_process_hooks() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            mark_current_unwinding();
            let Some((shared, pid)) = current_actor_pid() else { return prev(info) };
            // SAFETY: the runtime outlives its running actor.
            let shared = unsafe { &*shared };
            let config = &shared.config;
            if config.quiet_panics && config.on_actor_panic.is_none() {
                return;
            }
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(|s| s.as_str()))
                .unwrap_or("Box<dyn Any>");
            let name = (shared.hooks.name_of)(shared, pid);
            report_actor_panic(shared, &ActorPanic { pid, name: name.as_deref(), message, location: info.location() });
        }));
    });
    stack::install_overflow_handler(guard_owner);
}

/// Every report of an actor panic goes through here: to the runtime's
/// `Builder::on_actor_panic` hook if it has one, else to stderr unless `quiet_panics`.
fn report_actor_panic(shared: &super::Shared, panic: &ActorPanic<'_>) {
    if let Some(hook) = &shared.config.on_actor_panic {
        (hook.0)(panic);
    } else if !shared.config.quiet_panics {
        use std::io::Write;
        // Not `eprintln!`: it panics if stderr is gone, and this runs inside a panic hook.
        let _ = writeln!(std::io::stderr(), "{panic}");
    }
}

/// A panic in an actor, as given to [`Builder::on_actor_panic`](crate::Builder::on_actor_panic)
/// hooks: which actor, where, and the message. Its `Display` is the report smarm prints by
/// default: `smarm: actor <0.5.1> ("name") panicked at src/main.rs:10:5:` and the message on
/// the next line.
///
/// ```
/// let rt = smarm::Runtime::builder()
///     .on_actor_panic(|p| {
///         let report = p.to_string();
///         assert!(report.starts_with(&format!("smarm: actor {} panicked at ", p.pid())));
///         assert!(report.ends_with(":\nboom"));
///     })
///     .build()
///     .unwrap();
/// rt.run(|| smarm::spawn(|| panic!("boom")).join().unwrap_err()).unwrap();
/// ```
#[derive(Debug)]
pub struct ActorPanic<'a> {
    pid: Pid,
    name: Option<&'a str>,
    message: &'a str,
    location: Option<&'a std::panic::Location<'a>>,
}

impl<'a> ActorPanic<'a> {
    /// The panicking actor.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().on_actor_panic(|p| assert_eq!(Some(p.pid()), smarm::try_current_pid())).build().unwrap();
    /// rt.run(|| smarm::spawn(|| panic!()).join().unwrap_err()).unwrap();
    /// ```
    pub fn pid(&self) -> Pid {
        self.pid
    }

    /// The name it is registered under, if any.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().on_actor_panic(|p| assert_eq!(p.name(), Some("cache"))).build().unwrap();
    /// rt.run(|| smarm::SpawnOptions::new().name("cache").spawn(|| panic!()).join().unwrap_err()).unwrap();
    /// ```
    pub fn name(&self) -> Option<&'a str> {
        self.name
    }

    /// The panic's message (`"Box<dyn Any>"` for a payload that is neither `&str` nor
    /// `String`, as std reports it).
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().on_actor_panic(|p| assert_eq!(p.message(), "x = 3")).build().unwrap();
    /// rt.run(|| smarm::spawn(|| panic!("x = {}", 3)).join().unwrap_err()).unwrap();
    /// ```
    pub fn message(&self) -> &'a str {
        self.message
    }

    /// Where it panicked, if known.
    ///
    /// ```
    /// let rt = smarm::Runtime::builder().on_actor_panic(|p| assert!(p.location().unwrap().line() > 0)).build().unwrap();
    /// rt.run(|| smarm::spawn(|| panic!()).join().unwrap_err()).unwrap();
    /// ```
    pub fn location(&self) -> Option<&'a std::panic::Location<'a>> {
        self.location
    }
}

impl std::fmt::Display for ActorPanic<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "smarm: actor {}", self.pid)?;
        if let Some(name) = self.name {
            write!(f, " ({name:?})")?;
        }
        match self.location {
            Some(loc) => write!(f, " panicked at {loc}:\n{}", self.message),
            None => write!(f, " panicked:\n{}", self.message),
        }
    }
}

/// For the overflow handler: the actor whose guard page holds `addr`, among the running
/// actor and, during a hand-off, the actor handing this thread over (it is no longer
/// `current` while its switch pushes its registers; see `worker::hand_off_park`).
fn guard_owner(addr: usize) -> Option<(u32, u32, usize)> {
    let w = current_worker();
    if w.is_null() {
        return None;
    }
    // SAFETY: this thread's live worker (the handler runs on the faulting thread).
    let w = unsafe { &*w };
    [w.current.get(), w.handed_from.get()].into_iter().filter(|&i| i != NONE).find_map(|index| {
        let slot = w.shared.slab.slot(index);
        // SAFETY: the control block of an actor whose stack this thread is using (running,
        // or handing over and not yet parked); the fields are plain integers.
        let (base, len) = unsafe { ((*slot.cell.get()).stack_base, (*slot.cell.get()).stack_len) };
        // Relaxed: the actor's generation cannot change while this thread uses its stack.
        let gen = (slot.state.load(Ordering::Relaxed) >> 32) as u32;
        (len != 0 && addr >= base && addr < base + GUARD_BYTES).then(|| (index, gen, len - GUARD_BYTES))
    })
}
