//! Registered names of one runtime (`register`, `unregister`, `whereis`). The map lives in
//! the process layer's per-runtime `World`; a name is also recorded in its holder's process
//! state, so the exit path releases it (under the holder's proc lock, before any monitor or
//! link learns of the exit). Lock order: the holder's proc lock (rank `Process`), then the
//! map (rank `Registry`).

use std::collections::HashMap;
use std::fmt;

use crate::process::{alive_locked, me, proc_lock, world};
use crate::raw_mutex::{Rank, RawMutex};
use crate::runtime::Shared;
use crate::slot_state::Pid;

/// Why [`register`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegisterError {
    /// The name is taken by a live actor.
    NameTaken(Pid),
    /// The actor already has a name.
    AlreadyNamed(String),
    /// The actor is not alive.
    NoProc,
}

impl fmt::Display for RegisterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RegisterError::NameTaken(p) => write!(f, "smarm: name already registered to {p}"),
            RegisterError::AlreadyNamed(n) => write!(f, "smarm: actor already registered as {n:?}"),
            RegisterError::NoProc => f.write_str("smarm: cannot register a dead actor"),
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

/// Registers `pid` under `name` in the caller's runtime. The name is released when the
/// actor ends, before its monitors and links are told.
pub fn register(name: impl Into<String>, pid: Pid) -> Result<(), RegisterError> {
    let (sh, _) = me("register");
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

/// Removes a name; returns the pid it named.
pub fn unregister(name: &str) -> Option<Pid> {
    let (sh, _) = me("unregister");
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

/// The live actor registered under `name`, if any.
pub fn whereis(name: &str) -> Option<Pid> {
    let (sh, _) = me("whereis");
    world(sh).registry.lookup(name).filter(|p| sh.slab.is_live(*p))
}
