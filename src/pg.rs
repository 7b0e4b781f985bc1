//! `pg`: local process groups, as in OTP's `pg` (one scope per runtime).
//!
//! - [`join`] is counted: joining twice needs two [`leave`]s; `leave` of a non-member is
//!   [`PgError::NotJoined`].
//! - A member that ends leaves all its groups automatically, before its monitors and links
//!   are told (memberships are visible resources, released like names).
//! - [`monitor_scope`] returns a snapshot of every group and a channel of [`PgEvent`]s for
//!   every later change, in order.
//!
//! State: one map `group -> members` (a pid appears once per join; `groups::Groups`, held
//! by the process layer's per-runtime `World`) under a lock ranked between the registry and
//! primitives; each member's process state lists its groups so the exit path can remove
//! them. A join or leave changes both under the member's proc lock, which its exit holds
//! while it removes the memberships: join and exit are atomic with respect to each other
//! (see the `groups` module).

use std::collections::BTreeMap;
use std::fmt;

use crate::channel::{channel, Receiver};
pub use crate::groups::PgEvent;
use crate::runtime::Shared;
use crate::slot_state::Pid;

/// Why a `pg` operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgError {
    /// `leave` of a pid that is not a member.
    NotJoined,
    /// `join` of a pid that is not a live actor of this runtime.
    NoProc,
}

impl fmt::Display for PgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PgError::NotJoined => f.write_str("pg: not a member of that group"),
            PgError::NoProc => f.write_str("pg: not a live local actor"),
        }
    }
}
impl std::error::Error for PgError {}

fn shared() -> &'static Shared {
    let (sh, _) = crate::runtime::current_shared().expect("smarm::pg called outside an actor");
    // SAFETY: the runtime outlives its running actor.
    unsafe { &*sh }
}

/// Adds `pid` (a live local actor) to `group`, once more. Atomic with respect to `pid`'s
/// exit: if it ends, this membership is removed with its others (and if it has already
/// ended, [`PgError::NoProc`]).
pub fn join(group: &str, pid: Pid) -> Result<(), PgError> {
    if crate::process::pg_join(shared(), pid, group) {
        Ok(())
    } else {
        Err(PgError::NoProc)
    }
}

/// Removes one membership of `pid` in `group`.
pub fn leave(group: &str, pid: Pid) -> Result<(), PgError> {
    if crate::process::pg_leave(shared(), pid, group) {
        Ok(())
    } else {
        Err(PgError::NotJoined)
    }
}

/// Members of `group` (one entry per join), in join order.
pub fn members(group: &str) -> Vec<Pid> {
    crate::process::world(shared()).groups.lock().groups.get(group).cloned().unwrap_or_default()
}

/// Members of `group` on this node (all of them, without `cluster`).
pub fn local_members(group: &str) -> Vec<Pid> {
    members(group)
}

/// Groups with at least one member.
pub fn which_groups() -> Vec<String> {
    crate::process::world(shared()).groups.lock().groups.keys().cloned().collect()
}

/// A snapshot of every group, and a channel of every later change.
pub fn monitor_scope() -> (BTreeMap<String, Vec<Pid>>, Receiver<PgEvent>) {
    let sh = shared();
    let (tx, rx) = channel();
    let mut pg = crate::process::world(sh).groups.lock();
    pg.watchers.push(tx);
    (pg.groups.clone(), rx)
}
