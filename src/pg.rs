//! `pg`: local process groups, as in OTP's `pg` (one scope per runtime).
//!
//! ```
//! use smarm::pg;
//!
//! smarm::run(|| {
//!     let (events_before, events) = pg::monitor_scope();
//!     assert!(events_before.is_empty());
//!     let worker = smarm::spawn(|| { smarm::recv_signal(); });
//!     let pid = worker.pid();
//!     pg::join("workers", pid).unwrap();
//!     pg::join("workers", smarm::current_pid()).unwrap();
//!     assert_eq!(pg::members("workers"), [pid, smarm::current_pid()]);
//!
//!     // A member that ends leaves its groups by itself.
//!     smarm::kill(pid);
//!     let _ = worker.join();
//!     assert_eq!(pg::members("workers"), [smarm::current_pid()]);
//!     let first = events.recv().unwrap();
//!     assert_eq!(first, pg::PgEvent::Join { group: "workers".into(), pids: vec![pid] });
//! });
//! ```
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
#[non_exhaustive]
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
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     pg::join("g", me).unwrap();
///     pg::join("g", me).unwrap(); // counted: a member twice
///     assert_eq!(pg::members("g"), [me, me]);
///     let gone = smarm::spawn(|| ());
///     let pid = gone.pid();
///     gone.join().unwrap();
///     assert_eq!(pg::join("g", pid), Err(pg::PgError::NoProc));
/// });
/// ```
pub fn join(group: &str, pid: Pid) -> Result<(), PgError> {
    if crate::process::pg_join(shared(), pid, group) {
        Ok(())
    } else {
        Err(PgError::NoProc)
    }
}

/// Removes one membership of `pid` in `group` ([`PgError::NotJoined`] if it has none).
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     pg::join("g", me).unwrap();
///     pg::leave("g", me).unwrap();
///     assert_eq!(pg::leave("g", me), Err(pg::PgError::NotJoined));
/// });
/// ```
pub fn leave(group: &str, pid: Pid) -> Result<(), PgError> {
    if crate::process::pg_leave(shared(), pid, group) {
        Ok(())
    } else {
        Err(PgError::NotJoined)
    }
}

/// Members of `group` (one entry per join), in join order; empty for an unknown group.
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     assert!(pg::members("nobody").is_empty());
///     pg::join("g", smarm::current_pid()).unwrap();
///     assert_eq!(pg::members("g"), [smarm::current_pid()]);
/// });
/// ```
pub fn members(group: &str) -> Vec<Pid> {
    crate::process::world(shared()).groups.lock().groups.get(group).cloned().unwrap_or_default()
}

/// Members of `group` on this node (all of them, without `cluster`; with it, [`members`]
/// also lists the members on other nodes that the node's `pg` scope learned of).
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     pg::join("g", smarm::current_pid()).unwrap();
///     assert_eq!(pg::local_members("g"), pg::members("g"));
/// });
/// ```
pub fn local_members(group: &str) -> Vec<Pid> {
    let mut m = members(group);
    m.retain(|p| !p.is_remote());
    m
}

/// A member of `group` picked at random (`None` if it has none): spreads work over a group's
/// members, local and (with `cluster`) remote.
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     assert_eq!(pg::pick_any("g"), None);
///     pg::join("g", smarm::current_pid()).unwrap();
///     assert_eq!(pg::pick_any("g"), Some(smarm::current_pid()));
/// });
/// ```
pub fn pick_any(group: &str) -> Option<Pid> {
    let members = crate::process::world(shared()).groups.lock().groups.get(group).cloned()?;
    // A cheap, well-spread index: the cycle counter mixed (splitmix64's finaliser).
    let mut x = crate::context::rdtsc();
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^= x >> 31;
    members.get((x % members.len() as u64) as usize).copied()
}

/// Groups with at least one member, in name order.
///
/// ```
/// use smarm::pg;
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     pg::join("b", me).unwrap();
///     pg::join("a", me).unwrap();
///     assert_eq!(pg::which_groups(), ["a", "b"]);
///     pg::leave("a", me).unwrap();
///     assert_eq!(pg::which_groups(), ["b"]);
/// });
/// ```
pub fn which_groups() -> Vec<String> {
    crate::process::world(shared()).groups.lock().groups.keys().cloned().collect()
}

/// A snapshot of every group, and a channel of every later change, in order (OTP's
/// `pg:monitor_scope`).
///
/// ```
/// use smarm::pg::{self, PgEvent};
/// smarm::run(|| {
///     let me = smarm::current_pid();
///     pg::join("a", me).unwrap();
///     let (snapshot, events) = pg::monitor_scope();
///     assert_eq!(snapshot["a"], [me]);
///     pg::leave("a", me).unwrap();
///     assert_eq!(events.recv().unwrap(), PgEvent::Leave { group: "a".into(), pids: vec![me] });
/// });
/// ```
pub fn monitor_scope() -> (BTreeMap<String, Vec<Pid>>, Receiver<PgEvent>) {
    let sh = shared();
    let (tx, rx) = channel();
    let mut pg = crate::process::world(sh).groups.lock();
    pg.watchers.push(tx);
    (pg.groups.clone(), rx)
}
