//! The process-wide node table: every (node name, creation) pair a remote [`Pid`] can name,
//! interned once, so a remote pid is an index (12 bytes, `Copy`) rather than a string.
//!
//! Entries are never removed (a pid of a node that left must keep printing and comparing
//! the same way), so the table is capped at [`MAX_NODES`] entries: a peer that sends pids of
//! ever new node names or creations cannot grow it without bound. Interning past the cap
//! fails, and the connection that carried the term is closed (the term is malformed for us).
//! Only authenticated peers reach this table: nothing a peer sends before the handshake
//! completes is interned.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use parking_lot::RwLock;

use crate::slot_state::Pid;

/// The most (node name, creation) pairs a process ever interns.
pub(crate) const MAX_NODES: usize = 1 << 16;

#[derive(Default)]
struct Table {
    index: HashMap<(Arc<str>, u32), u32>,
    entries: Vec<(Arc<str>, u32)>,
}

fn table() -> &'static RwLock<Table> {
    static TABLE: OnceLock<RwLock<Table>> = OnceLock::new();
    TABLE.get_or_init(Default::default)
}

/// The table index of `(name, creation)`, interning it; `None` past [`MAX_NODES`].
pub(crate) fn intern(name: &str, creation: u32) -> Option<u32> {
    let key: (Arc<str>, u32) = (Arc::from(name), creation);
    if let Some(&i) = table().read().index.get(&key) {
        return Some(i);
    }
    let mut t = table().write();
    if let Some(&i) = t.index.get(&key) {
        return Some(i);
    }
    if t.entries.len() >= MAX_NODES {
        return None;
    }
    let i = t.entries.len() as u32;
    t.entries.push(key.clone());
    t.index.insert(key, i);
    Some(i)
}

/// The node name and creation of table entry `i`.
pub(crate) fn entry(i: u32) -> Option<(Arc<str>, u32)> {
    table().read().entries.get(i as usize).cloned()
}

/// The remote pid `id`/`serial` of node `name` (incarnation `creation`); `None` past the cap.
pub(crate) fn remote_pid(name: &str, creation: u32, id: u32, serial: u32) -> Option<Pid> {
    intern(name, creation).map(|n| Pid::remote(n, id, serial))
}

/// The node name and creation of a remote pid.
pub(crate) fn node_of(pid: Pid) -> Option<(Arc<str>, u32)> {
    entry(pid.remote_node()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interning_is_stable_and_creation_distinguishes_incarnations() {
        let a = intern("t_nodes_a@h", 1).unwrap();
        assert_eq!(intern("t_nodes_a@h", 1), Some(a));
        let b = intern("t_nodes_a@h", 2).unwrap();
        assert_ne!(a, b, "a restarted node (new creation) is a new entry");
        let p1 = remote_pid("t_nodes_a@h", 1, 5, 0).unwrap();
        let p2 = remote_pid("t_nodes_a@h", 2, 5, 0).unwrap();
        assert_ne!(p1, p2, "pids of two incarnations never alias");
        assert!(p1.is_remote());
        assert_eq!(node_of(p1).unwrap().0.as_ref(), "t_nodes_a@h");
        assert_eq!(node_of(p2).unwrap().1, 2);
    }
}
