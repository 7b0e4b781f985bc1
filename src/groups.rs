//! The `pg` membership table of one runtime (layer 3): groups and their members, and the
//! watchers of the scope. The process layer owns it so that an actor's exit releases its
//! memberships in the same step that releases its name, before any monitor or link learns of
//! the exit; the `pg` API (layer 4) reads it, and changes it through the process layer.
//!
//! # Join and exit are atomic with respect to each other
//!
//! A membership is recorded twice: in this table, and in the member's process state (its
//! list of groups, which the exit path reads to know what to remove). Both records of a join
//! or leave are made in one critical section of the member's proc lock, the table's lock
//! taken inside it (`process::pg_join`, `process::pg_leave`); the exit path
//! (`process::on_exit`) marks the actor exited and removes its memberships in one critical
//! section of the same proc lock. So a join either sees the actor alive and is complete
//! before its exit starts (which then removes it), or sees it exited and adds nothing: a dead
//! pid never stays a member. Lock order: proc lock (rank `Process`), then this table (rank
//! `Pg`), then the watchers' channels.

use std::collections::BTreeMap;

use crate::channel::Sender;
use crate::slot_state::Pid;

/// A group membership change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgEvent {
    /// `pids` joined `group`.
    Join {
        /// The group.
        group: String,
        /// Who joined (one entry per join).
        pids: Vec<Pid>,
    },
    /// `pids` left `group` (explicitly or by ending).
    Leave {
        /// The group.
        group: String,
        /// Who left (one entry per membership removed).
        pids: Vec<Pid>,
    },
}

#[derive(Default)]
pub(crate) struct Groups {
    pub(crate) groups: BTreeMap<String, Vec<Pid>>,
    pub(crate) watchers: Vec<Sender<PgEvent>>,
}

impl Groups {
    /// Runs under the `pg` lock: `try_send` (unbounded channels, so never `Full`), which is
    /// no preemption point, unlike `send`.
    pub(crate) fn publish(&mut self, ev: PgEvent) {
        self.watchers.retain(|w| w.try_send(ev.clone()).is_ok());
    }

    /// Adds one membership of `pid` in `group` (the caller holds `pid`'s proc lock and has
    /// recorded the membership in its process state: see `process::pg_join`).
    pub(crate) fn add_member(&mut self, group: &str, pid: Pid) {
        self.groups.entry(group.to_string()).or_default().push(pid);
        self.publish(PgEvent::Join { group: group.to_string(), pids: vec![pid] });
    }

    /// Removes one membership of `pid` in `group` (its first, in join order); false if it
    /// had none.
    pub(crate) fn remove_one(&mut self, group: &str, pid: Pid) -> bool {
        let Some(members) = self.groups.get_mut(group) else { return false };
        let Some(i) = members.iter().position(|p| *p == pid) else { return false };
        members.remove(i);
        if members.is_empty() {
            self.groups.remove(group);
        }
        self.publish(PgEvent::Leave { group: group.to_string(), pids: vec![pid] });
        true
    }

    /// Removes every membership of `pid` in `groups` (the exit path).
    pub(crate) fn remove_member(&mut self, pid: Pid, groups: &[String]) {
        for g in groups {
            let Some(members) = self.groups.get_mut(g) else { continue };
            let before = members.len();
            members.retain(|p| *p != pid);
            let removed = before - members.len();
            if members.is_empty() {
                self.groups.remove(g);
            }
            if removed > 0 {
                self.publish(PgEvent::Leave { group: g.clone(), pids: vec![pid; removed] });
            }
        }
    }
}
