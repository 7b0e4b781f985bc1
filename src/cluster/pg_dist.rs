//! Distributed `pg`: the node's scope process, speaking OTP's `pg` scope protocol (OTP 23+,
//! `lib/kernel/src/pg.erl`) with the scope processes of the same name on other nodes, smarm
//! or Erlang, so each side's [`pg::members`](crate::pg::members) includes the other's.
//!
//! The scope actor is registered as `pg` (OTP's default scope) and:
//! - on start, and on every node up, sends `{discover, Self}` to `{pg, Node}`;
//! - on `{discover, Peer}`: answers `Peer` with the cast `{sync, Self, LocalGroups}`, and, if it
//!   did not know `Peer`, monitors it and sends it `{discover, Self}`;
//! - on `{sync, Peer, Groups}` (a `$gen_cast`): replaces what it knew of `Peer`'s members;
//! - on `{join, Peer, Group, Pids}` / `{leave, Peer, Pids, Groups}` from a known peer: adds or
//!   removes those remote members;
//! - on a local join or leave (it watches the runtime's scope, in order): broadcasts
//!   `{join, Self, Group, Pids}` / `{leave, Self, Pids, [Group]}` to every known peer;
//! - when a peer's scope goes down (its monitor fires, `noconnection` included), removes all
//!   of that peer's members.
//!
//! It sends the peers nothing outside this protocol (OTP's scope crashes on anything else),
//! and sends it only over connections that are up (`noconnect`, as OTP's scope sends): a
//! node up handled after that connection was closed does not reconnect to the node.
//! Groups are strings in smarm and atoms in Erlang (a group name becomes an atom of the same
//! text); a remote group that is not an atom is known under its Erlang text. The members it
//! reports for itself come from its own ordered view of local joins and leaves, so a `sync`
//! never counts a join that a later `join` broadcast will announce again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use eetf::Term;
use serde::Deserialize;

use super::ctrl::{as_atom, atom, elem, erl_text, tuple};
use super::{conn, NodeEvent, NodeShared, RawTerm};
use crate::groups::PgEvent;
use crate::mailbox::{Envelope, Mailbox};
use crate::process::MonitorRef;
use crate::slot_state::Pid;

/// The registered name of the scope (OTP's default scope).
pub(crate) const SCOPE: &str = "pg";

enum ScopeMsg {
    Remote(Term),
    Node(NodeEvent),
    Local(PgEvent),
}

impl From<NodeEvent> for ScopeMsg {
    fn from(e: NodeEvent) -> ScopeMsg {
        ScopeMsg::Node(e)
    }
}

impl<'de> Deserialize<'de> for ScopeMsg {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<ScopeMsg, D::Error> {
        RawTerm::deserialize(d).map(|r| ScopeMsg::Remote(r.0))
    }
}

/// Starts the scope actor (from `cluster::start`), unless the name is taken.
pub(crate) fn start(sh: &Arc<NodeShared>) {
    let sh2 = sh.clone();
    let (tx, rx) = crate::channel::oneshot();
    let addr = crate::task::spawn_actor(move |mb: Mailbox<ScopeMsg>| {
        if rx.recv() != Ok(true) {
            return;
        }
        scope(sh2, mb)
    });
    let registered = crate::registry::register(SCOPE, addr.pid()).is_ok();
    if !registered {
        sh.log(format_args!("`{SCOPE}` is registered by another actor: pg is not distributed"));
    }
    let _ = tx.send(registered);
}

fn group_term(g: &str) -> Term {
    atom(g)
}

fn group_name(t: &Term) -> String {
    as_atom(t).map_or_else(|| erl_text(t), str::to_string)
}

fn pids_of(sh: &NodeShared, t: &Term) -> Vec<Pid> {
    let one = |t: &Term| match t {
        Term::Pid(p) => sh.local.pid_of(p),
        _ => None,
    };
    match t {
        Term::List(l) => l.elements.iter().filter_map(one).collect(),
        other => one(other).into_iter().collect(),
    }
}

fn pid_list(sh: &NodeShared, pids: &[Pid]) -> Term {
    Term::List(eetf::List::from(pids.iter().map(|p| Term::Pid(sh.local.pid_term(*p))).collect::<Vec<_>>()))
}

struct Scope {
    sh: Arc<NodeShared>,
    me: Pid,
    /// Local members as this actor has seen them (in event order).
    local: BTreeMap<String, Vec<Pid>>,
    /// Known peer scopes: their monitor and their members.
    peers: HashMap<Pid, (MonitorRef, BTreeMap<String, Vec<Pid>>)>,
}

fn scope(sh: Arc<NodeShared>, mb: Mailbox<ScopeMsg>) {
    mb.accept_remote();
    super::monitor_nodes(&mb.addr());
    let rt = crate::process::current_runtime().expect("in a runtime");
    // Local joins and leaves, in order, through a forwarder into this mailbox.
    let (snapshot, events) = {
        let (tx, rx) = crate::channel::channel();
        let mut g = crate::process::world(rt).groups.lock();
        g.watchers.push(tx);
        (g.groups.clone(), rx)
    };
    let addr = mb.addr();
    crate::task::spawn(move || {
        while let Ok(ev) = events.recv() {
            if addr.try_send(ScopeMsg::Local(ev)).is_err() {
                return;
            }
        }
    });
    let mut s = Scope { me: crate::task::current_pid(), sh, local: BTreeMap::new(), peers: HashMap::new() };
    for (g, pids) in snapshot {
        let local: Vec<Pid> = pids.into_iter().filter(|p| !p.is_remote()).collect();
        if !local.is_empty() {
            s.local.insert(g, local);
        }
    }
    for node in super::nodes() {
        s.discover_node(&node);
    }
    loop {
        match mb.recv() {
            Envelope::Msg(ScopeMsg::Remote(t)) => s.remote(t),
            Envelope::Msg(ScopeMsg::Node(NodeEvent::Up(n))) => s.discover_node(&n),
            Envelope::Msg(ScopeMsg::Node(NodeEvent::Down(_))) => {} // the peers' monitors fire
            Envelope::Msg(ScopeMsg::Local(ev)) => s.local_event(ev),
            Envelope::Down(d) => s.peer_down(d.pid, d.monitor),
            Envelope::Exit(_) => {}
        }
    }
}

impl Scope {
    fn me_t(&self) -> Term {
        Term::Pid(self.sh.local.pid_term(self.me))
    }

    fn send(&self, to: Pid, t: Term) {
        conn::send_term(&self.sh, to, t, conn::Connect::No);
    }

    fn discover_node(&self, node: &str) {
        conn::send_named_term(&self.sh, SCOPE, node, tuple(vec![atom("discover"), self.me_t()]), conn::Connect::No);
    }

    fn local_groups(&self) -> Term {
        let items: Vec<Term> =
            self.local.iter().map(|(g, pids)| tuple(vec![group_term(g), pid_list(&self.sh, pids)])).collect();
        Term::List(eetf::List::from(items))
    }

    fn remote(&mut self, t: Term) {
        let tag = elem(&t, 0).and_then(as_atom).map(str::to_string);
        match tag.as_deref() {
            Some("discover") => {
                let Some(peer) = self.peer_at(&t, 1) else { return self.bad(&t) };
                let sync = tuple(vec![atom("sync"), self.me_t(), self.local_groups()]);
                self.send(peer, tuple(vec![atom("$gen_cast"), sync]));
                if let std::collections::hash_map::Entry::Vacant(e) = self.peers.entry(peer) {
                    e.insert((crate::process::monitor(peer), BTreeMap::new()));
                    self.send(peer, tuple(vec![atom("discover"), self.me_t()]));
                }
            }
            Some("$gen_cast") => {
                let Some(sync) = elem(&t, 1) else { return self.bad(&t) };
                if elem(sync, 0).and_then(as_atom) != Some("sync") {
                    return self.bad(&t);
                }
                let (Some(peer), Some(Term::List(groups))) = (self.peer_at(sync, 1), elem(sync, 2)) else {
                    return self.bad(&t);
                };
                let mut new: BTreeMap<String, Vec<Pid>> = BTreeMap::new();
                for g in &groups.elements {
                    let (Some(name), Some(pids)) = (elem(g, 0), elem(g, 1)) else { continue };
                    new.entry(group_name(name)).or_default().extend(pids_of(&self.sh, pids));
                }
                let old = match self.peers.get_mut(&peer) {
                    Some((_, members)) => std::mem::replace(members, new.clone()),
                    None => {
                        let m = crate::process::monitor(peer);
                        self.peers.insert(peer, (m, new.clone()));
                        BTreeMap::new()
                    }
                };
                // Apply the difference only, so members that stay produce no events.
                let mut g = self.groups();
                let names: std::collections::BTreeSet<&String> = old.keys().chain(new.keys()).collect();
                for group in names {
                    let (mut was, now) = (old.get(group).cloned().unwrap_or_default(), new.get(group));
                    let mut added = Vec::new();
                    for p in now.into_iter().flatten() {
                        match was.iter().position(|x| x == p) {
                            Some(i) => {
                                was.swap_remove(i);
                            }
                            None => added.push(*p),
                        }
                    }
                    for p in was {
                        g.remove_one(group, p);
                    }
                    for p in added {
                        g.add_member(group, p);
                    }
                }
            }
            Some("join") => {
                let Some(peer) = self.peer_at(&t, 1) else { return self.bad(&t) };
                let (Some(group), Some(pids)) = (elem(&t, 2), elem(&t, 3)) else { return self.bad(&t) };
                let (group, pids) = (group_name(group), pids_of(&self.sh, pids));
                let Some((_, members)) = self.peers.get_mut(&peer) else { return };
                members.entry(group.clone()).or_default().extend(pids.iter().copied());
                let mut g = self.groups();
                for p in pids {
                    g.add_member(&group, p);
                }
            }
            Some("leave") => {
                let Some(peer) = self.peer_at(&t, 1) else { return self.bad(&t) };
                let (Some(pids), Some(Term::List(groups))) = (elem(&t, 2), elem(&t, 3)) else { return self.bad(&t) };
                let pids = pids_of(&self.sh, pids);
                let groups: Vec<String> = groups.elements.iter().map(group_name).collect();
                let Some((_, members)) = self.peers.get_mut(&peer) else { return };
                let mut removed = Vec::new();
                for group in &groups {
                    if let Some(list) = members.get_mut(group) {
                        for p in &pids {
                            if let Some(i) = list.iter().position(|x| x == p) {
                                list.remove(i);
                                removed.push((group.clone(), *p));
                            }
                        }
                        if list.is_empty() {
                            members.remove(group);
                        }
                    }
                }
                let mut g = self.groups();
                for (group, p) in removed {
                    g.remove_one(&group, p);
                }
            }
            _ => self.bad(&t),
        }
    }

    fn peer_at(&self, t: &Term, i: usize) -> Option<Pid> {
        match elem(t, i) {
            Some(Term::Pid(p)) => self.sh.local.pid_of(p).filter(|p| p.is_remote()),
            _ => None,
        }
    }

    fn bad(&self, t: &Term) {
        self.sh.count_drop(format_args!("pg scope: not a pg protocol message: {}", erl_text(t)));
    }

    fn groups(&self) -> crate::raw_mutex::RawGuard<'static, crate::groups::Groups> {
        let rt = crate::process::current_runtime().expect("in a runtime");
        crate::process::world(rt).groups.lock()
    }

    fn local_event(&mut self, ev: PgEvent) {
        let (join, group, pids) = match ev {
            PgEvent::Join { group, pids } => (true, group, pids),
            PgEvent::Leave { group, pids } => (false, group, pids),
        };
        let pids: Vec<Pid> = pids.into_iter().filter(|p| !p.is_remote()).collect();
        if pids.is_empty() {
            return;
        }
        let list = self.local.entry(group.clone()).or_default();
        if join {
            list.extend(pids.iter().copied());
        } else {
            for p in &pids {
                if let Some(i) = list.iter().position(|x| x == p) {
                    list.remove(i);
                }
            }
            if list.is_empty() {
                self.local.remove(&group);
            }
        }
        let msg = if join {
            tuple(vec![atom("join"), self.me_t(), group_term(&group), pid_list(&self.sh, &pids)])
        } else {
            tuple(vec![
                atom("leave"),
                self.me_t(),
                pid_list(&self.sh, &pids),
                Term::List(eetf::List::from(vec![group_term(&group)])),
            ])
        };
        for peer in self.peers.keys() {
            self.send(*peer, msg.clone());
        }
    }

    fn peer_down(&mut self, peer: Pid, m: MonitorRef) {
        if !matches!(self.peers.get(&peer), Some((pm, _)) if *pm == m) {
            return;
        }
        let Some((_, members)) = self.peers.remove(&peer) else { return };
        let mut g = self.groups();
        for (group, pids) in members {
            for p in pids {
                g.remove_one(&group, p);
            }
        }
    }
}
