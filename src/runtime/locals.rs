//! Per-actor storage hanging off the control block, on which `actor_local` (layer 3) keeps
//! its values: a list of `(key id, boxed value)` per actor, created at the first access and
//! dropped by the actor's entry when its body has ended.
//!
//! # Invariants
//!
//! 1. Only the running actor touches its storage (`ActorCell::locals`, under the control
//!    block's ownership rule, see `actor`), so there is no lock; [`current_store`] finds it
//!    afresh through the out-of-line thread-local accessor at every access and nothing
//!    thread-specific is kept.
//! 2. A value is never moved or dropped while a reference to it may exist: entries are only
//!    appended (an initialiser that finds its key filled meanwhile, by a reentrant access,
//!    drops its own value and returns the first), and removed only by [`destroy`], when no
//!    access of the owner can be running any more. Each value is boxed on its own, so its
//!    address survives the list growing, and the actor migrating.
//! 3. No borrow of a store is held while user code runs (initialisers, destructors): every
//!    lookup, insertion and removal is a short borrow through a raw pointer, so a reentrant
//!    access to any key, the same one included, is sound.
//! 4. [`destroy`] marks the store destroyed before it drops anything, and drops the values
//!    newest first, each through `drop_caught` (on the actor's stack, never unwinding). From
//!    the mark on every access fails with [`AccessError`], so no value is created that would
//!    outlive its actor (or thread).
//! 5. All-zero bytes are the empty store (no list: a null box; not destroyed), as the
//!    control block requires; the spawner writes [`ActorLocals::NONE`], and the entry's
//!    [`destroy_current`] leaves an empty list behind, so a slot never carries values over.

use std::any::Any;
use std::fmt;

use super::user_drop::drop_caught;

/// `(key id, value)` in creation order.
type Entries = Vec<(usize, Box<dyn Any>)>;

/// One actor's (or, for `actor_local`'s fallback off an actor, one OS thread's) values.
pub(crate) struct ActorLocals {
    /// None until the first access.
    map: Option<Box<Entries>>,
    /// Set by [`destroy`]: every later access fails.
    destroyed: bool,
}

impl ActorLocals {
    /// The empty store (what a fresh control block holds).
    pub(crate) const NONE: ActorLocals = ActorLocals { map: None, destroyed: false };
}

/// An actor-local value was accessed while its storage is being dropped or after: from a
/// destructor of an actor-local value, or of anything else that runs after the actor's body
/// has ended (see `smarm::actor_local::LocalKey::try_with`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessError;

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(
            "smarm: actor-local value accessed while its actor's (or thread's) local storage is dropped or gone",
        )
    }
}

impl std::error::Error for AccessError {}

/// The running actor's store, if called from an actor. Valid until the actor ends; it does
/// not depend on the thread (it is reached through the actor's slot).
#[inline]
pub(crate) fn current_store() -> Option<*mut ActorLocals> {
    let (_, _, slot) = super::current_actor_slot()?;
    // SAFETY: the running actor's own control block: taking a field's address reads nothing.
    Some(unsafe { &raw mut (*slot.cell.get()).locals })
}

/// Looks up `id` in `store`, creating its value with `init` if absent; returns the value.
///
/// # Safety
/// `store` stays valid for the whole call (the running actor's, or this thread's) and is
/// accessed only through this module, by the calling actor (thread) only.
pub(crate) unsafe fn get_or_init(
    store: *mut ActorLocals,
    id: usize,
    init: &dyn Fn() -> Box<dyn Any>,
) -> Result<*const dyn Any, AccessError> {
    // SAFETY: forwarded; a short borrow, no user code runs under it.
    if let Some(found) = unsafe { find(store, id) }? {
        return Ok(found);
    }
    // User code, possibly blocking (and migrating) or reentrant: no borrow is held.
    let value = init();
    // SAFETY: as above; `store` did not move (it is reached through the actor's slot, or is
    // this thread's, alive until the thread ends).
    match unsafe { find(store, id) } {
        Ok(Some(first)) => {
            // A reentrant access from `init` created the value first: keep that one (it
            // may be borrowed), drop ours, no borrow held.
            drop(value);
            Ok(first)
        }
        Ok(None) => {
            let ptr = &*value as *const dyn Any;
            // SAFETY: as above; a short borrow (the push runs no user code).
            unsafe { (*store).map.get_or_insert_with(Box::default).push((id, value)) };
            Ok(ptr)
        }
        Err(e) => {
            drop(value);
            Err(e)
        }
    }
}

/// The value of `id` in `store`, if present.
///
/// # Safety
/// As for [`get_or_init`].
unsafe fn find(store: *const ActorLocals, id: usize) -> Result<Option<*const dyn Any>, AccessError> {
    // SAFETY: forwarded; the borrow ends with this function.
    let store = unsafe { &*store };
    if store.destroyed {
        return Err(AccessError);
    }
    let Some(map) = &store.map else { return Ok(None) };
    Ok(map.iter().find(|(k, _)| *k == id).map(|(_, v)| &**v as *const dyn Any))
}

/// Marks `store` destroyed, then drops its values newest first, each through `drop_caught`.
/// Never unwinds.
///
/// # Safety
/// As for [`get_or_init`], and no reference into the store's values is alive.
pub(crate) unsafe fn destroy(store: *mut ActorLocals) {
    // SAFETY: forwarded; short borrows only, none across a value's drop.
    unsafe { (*store).destroyed = true };
    // SAFETY: as above (each pop is its own borrow).
    while let Some((_, value)) = unsafe { (*store).map.as_mut().and_then(|m| m.pop()) } {
        drop_caught(value);
    }
    // SAFETY: as above; the list is empty.
    drop(unsafe { (*store).map.take() });
}

/// Drops the running actor's values (invariant 4); does nothing off an actor. Called once
/// by the actor's entry, on the actor's stack, when its body has ended and before its exit
/// is published (so monitors, links and `join` see the values dropped). Never unwinds.
pub(crate) fn destroy_current() {
    if let Some(store) = current_store() {
        // SAFETY: the running actor's store; its body has ended, so no access of it runs.
        unsafe { destroy(store) };
    }
}
