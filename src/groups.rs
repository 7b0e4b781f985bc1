//! The `pg` membership table of one runtime (layer 3): groups and their members, and the
//! watchers of the scope. The process layer owns it so that an actor's exit releases its
//! memberships in the same step that releases its name, before any monitor or link learns of
//! the exit; the `pg` API (layer 4) reads and changes it.

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
