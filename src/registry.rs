//! Registered names of one runtime (`register`, `unregister`, `whereis`, `registered`). The
//! map lives in the process layer's per-runtime `World`; a name is also recorded in its
//! holder's process state, so the exit path releases it (under the holder's proc lock, before
//! any monitor or link learns of the exit). Lock order: the holder's proc lock (rank
//! `Process`), then the map (rank `Registry`).
//!
//! A name names at most one live actor and an actor has at most one name (OTP's
//! `register/2`). The map may keep the entry of a holder that has ended and not yet been
//! swept by its exit path; every lookup filters by liveness, so such an entry is never seen.
//!
//! Off a runtime (a plain OS thread) there is no registry to look in: lookups find nothing
//! (`whereis` is `None`, `registered` empty) and `register` fails with
//! [`RegisterError::NoRuntime`]; nothing panics.
//!
//! ```
//! smarm::run(|| {
//!     let me = smarm::current_pid();
//!     smarm::register("root", me).unwrap();
//!     assert_eq!(smarm::whereis("root"), Some(me));
//!     assert_eq!(smarm::registered(), ["root"]);
//!     assert_eq!(smarm::unregister("root"), Some(me));
//!     assert_eq!(smarm::whereis("root"), None);
//! });
//! ```

use std::collections::HashMap;
use std::fmt;

use crate::process::{alive_locked, current_runtime, proc_lock, world};
use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::Shared;
use crate::slot_state::Pid;

/// Why [`register`] failed.
///
/// ```
/// use smarm::RegisterError;
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     smarm::register("a", me).unwrap();
///     assert_eq!(smarm::register("b", me), Err(RegisterError::AlreadyNamed("a".into())));
///     let other = smarm::spawn(|| ());
///     assert_eq!(smarm::register("a", other.pid()), Err(RegisterError::NameTaken(me)));
/// });
/// ```
///
/// `#[non_exhaustive]` (variants are added, e.g. for the cluster): a `match` needs a `_` arm.
///
/// ```compile_fail,E0004
/// fn f(e: smarm::RegisterError) {
///     use smarm::RegisterError::*;
///     match e { NameTaken(_) | AlreadyNamed(_) | NoProc | NoRuntime => {} }
/// }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegisterError {
    /// The name is taken by a live actor.
    NameTaken(Pid),
    /// The actor already has a name.
    AlreadyNamed(String),
    /// The actor is not alive.
    NoProc,
    /// Called outside a smarm runtime (a plain thread): there is no registry to write.
    NoRuntime,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::NameTaken(p) => write!(f, "smarm: name already registered to {p}"),
            RegisterError::AlreadyNamed(n) => write!(f, "smarm: actor already registered as {n:?}"),
            RegisterError::NoProc => f.write_str("smarm: cannot register a dead actor"),
            RegisterError::NoRuntime => f.write_str("smarm: register called outside a smarm runtime"),
        }
    }
}
impl std::error::Error for RegisterError {}

/// Names of live actors in one runtime (rank `Registry`, above `Process`).
pub(crate) struct Registry {
    names: RawMutex<HashMap<String, Pid>>,
}

impl Registry {
    pub(crate) fn new() -> Registry {
        Registry { names: RawMutex::new(Rank::Registry, HashMap::new()) }
    }

    pub(crate) fn release(&self, name: &str, pid: Pid) {
        let mut names = self.names.lock();
        if names.get(name) == Some(&pid) {
            names.remove(name);
        }
    }

    pub(crate) fn lookup(&self, name: &str) -> Option<Pid> {
        self.names.lock().get(name).copied()
    }
}

/// Registers `pid` under `name` in the caller's runtime (OTP's `register/2`). The name is
/// released when the actor ends, before its monitors and links are told, so a monitor that
/// handles the Down can register it again at once.
///
/// Fails if the name is taken by a live actor, if `pid` already has a name, if `pid` is
/// not alive, or outside a runtime (see [`RegisterError`]).
///
/// ```
/// smarm::run(|| {
///     let h = smarm::spawn(|| ());
///     let pid = h.pid();
///     smarm::register("short-lived", pid).unwrap();
///     h.join().unwrap();
///     // Released on exit.
///     assert_eq!(smarm::whereis("short-lived"), None);
///     assert_eq!(smarm::register("short-lived", pid), Err(smarm::RegisterError::NoProc));
/// });
/// ```
pub fn register(name: impl Into<String>, pid: Pid) -> Result<(), RegisterError> {
    let sh = current_runtime().ok_or(RegisterError::NoRuntime)?;
    register_in(sh, name.into(), pid)
}

/// [`register`] in the runtime `sh`, from any thread (`SpawnOptions::name`).
pub(crate) fn register_in(sh: &Shared, name: String, pid: Pid) -> Result<(), RegisterError> {
    let lock = proc_lock(sh, pid).ok_or(RegisterError::NoProc)?;
    let mut slot = lock.lock();
    if !alive_locked(sh, &slot, pid) {
        return Err(RegisterError::NoProc);
    }
    let st = slot.state_for(pid.generation());
    if let Some(n) = &st.name {
        return Err(RegisterError::AlreadyNamed(n.clone()));
    }
    {
        let mut names = world(sh).registry.names.lock();
        if let Some(&holder) = names.get(&name) {
            if sh.slab.is_live(holder) {
                return Err(RegisterError::NameTaken(holder));
            }
        }
        names.insert(name.clone(), pid);
    }
    st.name = Some(name);
    Ok(())
}

/// Removes a name; returns the pid it named (`None` if it named nobody, and outside a
/// runtime). The actor lives on without a name. OTP's `unregister/1` raises `badarg` for an
/// unknown name; here that is `None`.
///
/// ```
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     smarm::register("me", me).unwrap();
///     assert_eq!(smarm::unregister("me"), Some(me));
///     assert_eq!(smarm::unregister("me"), None);
/// });
/// ```
pub fn unregister(name: &str) -> Option<Pid> {
    let sh = current_runtime()?;
    let pid = world(sh).registry.names.lock().remove(name)?;
    if let Some(lock) = proc_lock(sh, pid) {
        if let Some(st) = lock.lock().existing(pid.generation()) {
            if st.name.as_deref() == Some(name) {
                st.name = None;
            }
        }
    }
    Some(pid)
}

/// The live actor registered under `name`, if any (OTP's `whereis/1`). Outside a runtime (a
/// plain thread) there is no registry to look in: `None`.
///
/// ```
/// smarm::run(|| {
///     assert_eq!(smarm::whereis("nobody"), None);
///     smarm::register("root", smarm::current_pid()).unwrap();
///     assert_eq!(smarm::whereis("root"), Some(smarm::current_pid()));
/// });
/// assert_eq!(smarm::whereis("root"), None); // a plain thread
/// ```
pub fn whereis(name: &str) -> Option<Pid> {
    whereis_in(current_runtime()?, name)
}

/// [`whereis`] in the runtime `sh` (for callers that hold a runtime, on any thread).
pub(crate) fn whereis_in(sh: &Shared, name: &str) -> Option<Pid> {
    world(sh).registry.lookup(name).filter(|p| sh.slab.is_live(*p))
}

/// The names registered to live actors of the caller's runtime, sorted (OTP's
/// `registered/0`, whose order is unspecified; sorted here so that it is reproducible).
/// Empty outside a runtime.
///
/// ```
/// smarm::run(|| {
///     let (_keep, wait) = smarm::channel::oneshot::<()>();
///     let h = smarm::spawn(move || wait.recv());
///     smarm::register("b", h.pid()).unwrap();
///     smarm::register("a", smarm::current_pid()).unwrap();
///     assert_eq!(smarm::registered(), ["a", "b"]);
/// });
/// ```
pub fn registered() -> Vec<String> {
    current_runtime().map_or_else(Vec::new, registered_in)
}

/// [`registered`] in the runtime `sh` (for callers that hold a runtime, on any thread).
pub(crate) fn registered_in(sh: &Shared) -> Vec<String> {
    let mut names: Vec<String> =
        world(sh).registry.names.lock().iter().filter(|(_, p)| sh.slab.is_live(**p)).map(|(n, _)| n.clone()).collect();
    names.sort_unstable();
    names
}
