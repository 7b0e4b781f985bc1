//! Monitors, links and exit signals across nodes (MONITOR_P, DEMONITOR_P, MONITOR_P_EXIT,
//! LINK, UNLINK_ID and its ack, EXIT, EXIT2), and what a lost connection does to them.
//!
//! Each connection keeps, in its [`ConnLinks`], everything that crossed it: the monitors local
//! actors hold on the peer's processes (their Downs come back as MONITOR_P_EXIT), the
//! monitors the peer's processes hold on local actors (a proxy [`RemoteWatcher`] sink in the
//! target's monitor list turns the Down into a MONITOR_P_EXIT), and the links between a local
//! and a remote process. When the connection is lost, after everything received on it was
//! delivered: every monitor of a remote process fires with `noconnection`, every local actor
//! linked to a remote process receives an exit signal with `noconnection`, and the remote
//! watchers' monitors on local actors are removed.
//!
//! Lock order: a target's `proc` lock may be held when its Down is pushed into a
//! [`RemoteWatcher`], which then takes the connection's `ConnLinks` lock; so code holding a
//! `ConnLinks` lock never takes a `proc` lock (it collects, releases, then acts).
//!
//! The link protocol is OTP 26's (`UNLINK_ID`): an unlink removes the local half at once
//! and sends `UNLINK_ID`; an incoming `UNLINK_ID` is answered with `UNLINK_ID_ACK` before
//! anything else is sent to its sender (the connection's single FIFO gives that).

use std::any::Any;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};

use eetf::Term;
use parking_lot::Mutex;

use super::conn::{self, Conn, Slot};
use super::ctrl::{as_atom, atom, elem, int, tag, tuple};
use super::{nodes, NodeShared};
use crate::channel::OneshotSender;
use crate::exit::DownReason;
use crate::process::{Down, MonitorRef, RemoteOps, Signal, SignalSink};
use crate::slot_state::Pid;

/// What crossed one connection (see the module doc).
#[derive(Default)]
pub(crate) struct ConnLinks {
    state: Mutex<LinksState>,
}

#[derive(Default)]
struct LinksState {
    /// Monitors held by local actors on the peer's processes, by our reference's id words.
    out: HashMap<Vec<u32>, OutMonitor>,
    /// Monitors held by the peer's processes on local actors, by the peer's reference.
    inbound: HashMap<Vec<u32>, MonitorRef>,
    /// (local, remote) linked pairs.
    links: HashSet<(Pid, Pid)>,
    /// Set once the connection is gone: nothing more is registered.
    lost: bool,
    /// Told when the connection has left the table and its losses were delivered.
    removed: Vec<OneshotSender<()>>,
    removed_done: bool,
}

struct OutMonitor {
    mref: MonitorRef,
    watcher: Pid,
    sink: Arc<dyn SignalSink>,
}

impl ConnLinks {
    /// `tx` is told once the connection's loss has been handled (at once if it was).
    pub(crate) fn on_removed(&self, tx: OneshotSender<()>) {
        let mut st = self.state.lock();
        if st.removed_done {
            drop(st);
            let _ = tx.send(());
        } else {
            st.removed.push(tx);
        }
    }

    pub(crate) fn removed(&self) {
        let waiters = {
            let mut st = self.state.lock();
            st.removed_done = true;
            std::mem::take(&mut st.removed)
        };
        for w in waiters {
            let _ = w.send(());
        }
    }
}

/// The wire form of an exit reason.
pub(crate) fn reason_term(r: &DownReason) -> Term {
    match r {
        DownReason::Normal => atom("normal"),
        DownReason::Killed => atom("killed"),
        DownReason::NoProc => atom("noproc"),
        DownReason::NoConnection => atom("noconnection"),
        DownReason::Shutdown => atom("shutdown"),
        DownReason::ShutdownWith(s) => tuple(vec![atom("shutdown"), binary(s)]),
        DownReason::Panic(m) => tuple(vec![atom("panic"), binary(m)]),
        DownReason::Custom(s) if s.chars().count() <= 255 => atom(s),
        DownReason::Custom(s) => binary(s),
    }
}

fn binary(s: &str) -> Term {
    Term::Binary(eetf::Binary::from(s.as_bytes()))
}

fn text(t: &Term) -> String {
    match t {
        Term::Binary(b) => String::from_utf8_lossy(&b.bytes).into_owned(),
        Term::Atom(a) => a.name.clone(),
        other => super::ctrl::erl_text(other),
    }
}

/// The exit reason of a wire term (the inverse of [`reason_term`]; any other term becomes
/// `Custom` with its Erlang text).
pub(crate) fn reason_of(t: &Term) -> DownReason {
    match as_atom(t) {
        Some("normal") => return DownReason::Normal,
        Some("killed") => return DownReason::Killed,
        Some("noproc") => return DownReason::NoProc,
        Some("noconnection") => return DownReason::NoConnection,
        Some("shutdown") => return DownReason::Shutdown,
        Some(other) => return DownReason::Custom(other.to_string()),
        None => {}
    }
    match (elem(t, 0).and_then(as_atom), elem(t, 1), elem(t, 2)) {
        (Some("shutdown"), Some(x), None) => DownReason::ShutdownWith(text(x)),
        (Some("panic"), Some(x), None) => DownReason::Panic(text(x)),
        _ => DownReason::Custom(text(t)),
    }
}

fn ref_key(t: &Term) -> Option<Vec<u32>> {
    match t {
        Term::Reference(r) => Some(r.id.clone()),
        _ => None,
    }
}

/// The live connection to `pid`'s node and incarnation, if up.
fn conn_of(sh: &NodeShared, pid: Pid) -> Option<Arc<Conn>> {
    let (name, creation) = nodes::node_of(pid)?;
    match sh.conns.lock().get(&*name) {
        Some(Slot::Up(c)) if c.peer.creation == creation => Some(c.clone()),
        _ => None,
    }
}

fn pid_t(sh: &NodeShared, p: Pid) -> Term {
    Term::Pid(sh.local.pid_term(p))
}

fn runtime() -> Option<&'static crate::runtime::Shared> {
    crate::process::current_runtime()
}

impl RemoteOps for NodeShared {
    fn monitor(&self, me: Pid, sink: Arc<dyn SignalSink>, mref: MonitorRef) {
        let target = mref.target();
        let down = |reason| Signal::Down(Down { monitor: mref, pid: target, reason, name: None });
        let c = match conn_of(self, target) {
            Some(c) => Some(c),
            None => match nodes::node_of(target) {
                // Not connected: connect now (Erlang connects on demand); an unreachable node
                // fires the monitor at once.
                Some((name, creation)) => match current_node_arc(self) {
                    Some(arc) => conn::connect(&arc, &name).filter(|c| c.peer.creation == creation),
                    None => None,
                },
                None => None,
            },
        };
        let Some(c) = c else {
            let connected_other_incarnation =
                nodes::node_of(target).is_some_and(|(n, _)| matches!(self.conns.lock().get(&*n), Some(Slot::Up(_))));
            // A pid of an earlier incarnation of a connected node names no process: noproc.
            sink.push_signal(down(if connected_other_incarnation {
                DownReason::NoProc
            } else {
                DownReason::NoConnection
            }));
            return;
        };
        let r = self.local.make_ref(mref.id());
        {
            let mut st = c.remote.state.lock();
            if st.lost {
                drop(st);
                sink.push_signal(down(DownReason::NoConnection));
                return;
            }
            st.out.insert(r.id.clone(), OutMonitor { mref, watcher: me, sink });
        }
        c.send_frame(
            &tuple(vec![int(tag::MONITOR_P), pid_t(self, me), pid_t(self, target), Term::Reference(Box::new(r))]),
            None,
        );
    }

    fn demonitor(&self, mref: MonitorRef) -> bool {
        let Some(c) = conn_of(self, mref.target()) else { return false };
        let r = self.local.make_ref(mref.id());
        let Some(m) = c.remote.state.lock().out.remove(&r.id) else { return false };
        c.send_frame(
            &tuple(vec![
                int(tag::DEMONITOR_P),
                pid_t(self, m.watcher),
                pid_t(self, mref.target()),
                Term::Reference(Box::new(r)),
            ]),
            None,
        );
        true
    }

    fn link(&self, me: Pid, to: Pid) -> bool {
        let c = conn_of(self, to).or_else(|| {
            let (name, creation) = nodes::node_of(to)?;
            conn::connect(&current_node_arc(self)?, &name).filter(|c| c.peer.creation == creation)
        });
        let Some(c) = c else { return false };
        {
            let mut st = c.remote.state.lock();
            if st.lost {
                return false;
            }
            st.links.insert((me, to));
        }
        c.send_frame(&tuple(vec![int(tag::LINK), pid_t(self, me), pid_t(self, to)]), None)
    }

    fn unlink(&self, me: Pid, to: Pid) {
        let Some(c) = conn_of(self, to) else { return };
        c.remote.state.lock().links.remove(&(me, to));
        let id = self.next_id() as i64;
        let id_t = Term::FixInteger(eetf::FixInteger::from((id & 0x7fff_ffff) as i32 | 1));
        c.send_frame(&tuple(vec![int(tag::UNLINK_ID), id_t, pid_t(self, me), pid_t(self, to)]), None);
    }

    fn exit_signal(&self, from: Pid, to: Pid, reason: &DownReason, link: bool, kill: bool) {
        let Some(c) = conn_of(self, to) else { return };
        let reason_t = if kill { atom("kill") } else { reason_term(reason) };
        if link {
            // Only a link that still exists on our side sends its exit signal.
            if !c.remote.state.lock().links.remove(&(from, to)) {
                return;
            }
            c.send_frame(&tuple(vec![int(tag::EXIT), pid_t(self, from), pid_t(self, to), reason_t]), None);
        } else {
            c.send_frame(&tuple(vec![int(tag::EXIT2), pid_t(self, from), pid_t(self, to), reason_t]), None);
        }
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

/// Monitors the peer's process `proc_term` (a pid or a registered name) for `me` with the
/// reference `r`; its Down (or the connection's loss) goes to `sink`. False if the connection
/// is already lost.
pub(crate) fn monitor_proc(
    sh: &NodeShared,
    c: &Conn,
    me: Pid,
    proc_term: Term,
    r: eetf::Reference,
    sink: Arc<dyn SignalSink>,
) -> bool {
    {
        let mut st = c.remote.state.lock();
        if st.lost {
            return false;
        }
        let mref = crate::process::new_monitor_ref(Pid::NOBODY);
        st.out.insert(r.id.clone(), OutMonitor { mref, watcher: me, sink });
    }
    c.send_frame(&tuple(vec![int(tag::MONITOR_P), pid_t(sh, me), proc_term, Term::Reference(Box::new(r))]), None)
}

/// Removes a monitor made by [`monitor_proc`] (sending DEMONITOR_P if it was still active).
pub(crate) fn demonitor_proc(sh: &NodeShared, c: &Conn, me: Pid, proc_term: Term, r: eetf::Reference) {
    if c.remote.state.lock().out.remove(&r.id).is_some() {
        c.send_frame(&tuple(vec![int(tag::DEMONITOR_P), pid_t(sh, me), proc_term, Term::Reference(Box::new(r))]), None);
    }
}

/// The `Arc` of the node `sh` (the runtime's installed one).
fn current_node_arc(sh: &NodeShared) -> Option<Arc<NodeShared>> {
    super::current_shared().filter(|a| std::ptr::eq(Arc::as_ptr(a), sh))
}

/// The proxy sink of a remote process's monitor on a local actor: the Down becomes a
/// MONITOR_P_EXIT on the connection.
struct RemoteWatcher {
    conn: Weak<Conn>,
    /// The monitored process as the peer named it (a pid or a registered name).
    proc_term: Term,
    watcher: Term,
    reference: Term,
    key: Vec<u32>,
}

impl SignalSink for RemoteWatcher {
    fn push_signal(&self, signal: Signal) {
        let Signal::Down(d) = signal else { return };
        let Some(c) = self.conn.upgrade() else { return };
        // Called under the target's proc lock: ConnLinks ranks above it (module doc).
        c.remote.state.lock().inbound.remove(&self.key);
        c.send_frame(
            &tuple(vec![
                int(tag::MONITOR_P_EXIT),
                self.proc_term.clone(),
                self.watcher.clone(),
                self.reference.clone(),
                reason_term(&d.reason),
            ]),
            None,
        );
    }

    fn remove_down(&self, _id: u64) -> bool {
        false
    }

    fn as_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }

    fn push_term(&self, _term: Term) -> Result<(), crate::mailbox::TermRejected> {
        Err(crate::mailbox::TermRejected::NotAccepted)
    }
}

fn pid_at(sh: &NodeShared, t: &Term, i: usize) -> Result<Pid, String> {
    match elem(t, i) {
        Some(Term::Pid(p)) => sh.local.pid_of(p).ok_or_else(|| "node table full".to_string()),
        other => Err(format!("expected a pid at position {i}, found {other:?}")),
    }
}

fn local_pid_at(sh: &NodeShared, t: &Term, i: usize) -> Result<Pid, String> {
    let p = pid_at(sh, t, i)?;
    if p.is_remote() {
        return Err(format!("{p} at position {i} is not a pid of this node"));
    }
    Ok(p)
}

/// Handles an incoming monitor/link/exit control message.
pub(crate) fn signal(
    sh: &Arc<NodeShared>,
    c: &Arc<Conn>,
    t: i32,
    m: &Term,
    payload: Option<Term>,
) -> Result<(), String> {
    let _ = payload;
    let rt = runtime().ok_or("no runtime")?;
    match t {
        tag::LINK => {
            let (from, to) = (pid_at(sh, m, 1)?, local_pid_at(sh, m, 2)?);
            if crate::process::add_remote_link(rt, to, from) {
                c.remote.state.lock().links.insert((to, from));
            } else {
                c.send_frame(&tuple(vec![int(tag::EXIT), pid_t(sh, to), pid_t(sh, from), atom("noproc")]), None);
            }
        }
        tag::EXIT | tag::EXIT_TT => {
            let (from, to) = (pid_at(sh, m, 1)?, local_pid_at(sh, m, 2)?);
            let reason = elem(m, if t == tag::EXIT { 3 } else { 4 }).ok_or("EXIT without a reason")?;
            c.remote.state.lock().links.remove(&(to, from));
            crate::process::send_link_exit(rt, from, to, &reason_of(reason));
        }
        tag::EXIT2 | tag::EXIT2_TT => {
            let (from, to) = (pid_at(sh, m, 1)?, local_pid_at(sh, m, 2)?);
            let reason = elem(m, if t == tag::EXIT2 { 3 } else { 4 }).ok_or("EXIT2 without a reason")?;
            if as_atom(reason) == Some("kill") {
                crate::process::kill_in(rt, to);
            } else {
                crate::process::send_exit_signal(rt, from, to, reason_of(reason));
            }
        }
        tag::UNLINK_ID => {
            let id = elem(m, 1).ok_or("UNLINK_ID without an id")?.clone();
            let (from, to) = (pid_at(sh, m, 2)?, local_pid_at(sh, m, 3)?);
            crate::process::remove_link(rt, to, from);
            c.remote.state.lock().links.remove(&(to, from));
            c.send_frame(&tuple(vec![int(tag::UNLINK_ID_ACK), id, pid_t(sh, to), pid_t(sh, from)]), None);
        }
        tag::UNLINK_ID_ACK => {} // our unlink removed our half at once
        tag::MONITOR_P => {
            let watcher = pid_at(sh, m, 1)?;
            let proc_term = elem(m, 2).ok_or("MONITOR_P without a target")?.clone();
            let reference = elem(m, 3).ok_or("MONITOR_P without a reference")?.clone();
            let key = ref_key(&reference).ok_or("MONITOR_P reference is not a reference")?;
            let target = match &proc_term {
                Term::Pid(_) => Some(local_pid_at(sh, m, 2)?),
                Term::Atom(a) if conn::SYSTEM_NAMES.contains(&a.name.as_str()) => {
                    // A service smarm answers itself (a ping's gen:call monitors net_kernel):
                    // it lives as long as the node, so the monitor only ever fires with the
                    // connection. Nothing to register.
                    return Ok(());
                }
                Term::Atom(a) => crate::registry::whereis_in(rt, &a.name),
                _ => return Err("MONITOR_P target is neither a pid nor a name".into()),
            };
            let proxy = Arc::new(RemoteWatcher {
                conn: Arc::downgrade(c),
                proc_term: proc_term.clone(),
                watcher: pid_t(sh, watcher),
                reference: reference.clone(),
                key: key.clone(),
            });
            // Registered before the monitor exists, so a Down pushed at once finds it.
            c.remote.state.lock().inbound.insert(key.clone(), crate::process::new_monitor_ref(Pid::NOBODY));
            match target.and_then(|p| crate::process::monitor_for(rt, p, proxy)) {
                Some(mref) => {
                    let mut st = c.remote.state.lock();
                    if let Some(e) = st.inbound.get_mut(&key) {
                        *e = mref;
                    }
                }
                None => {
                    c.remote.state.lock().inbound.remove(&key);
                    c.send_frame(
                        &tuple(vec![
                            int(tag::MONITOR_P_EXIT),
                            proc_term,
                            pid_t(sh, watcher),
                            reference,
                            atom("noproc"),
                        ]),
                        None,
                    );
                }
            }
        }
        tag::DEMONITOR_P => {
            let reference = elem(m, 3).ok_or("DEMONITOR_P without a reference")?;
            let key = ref_key(reference).ok_or("DEMONITOR_P reference is not a reference")?;
            let mref = c.remote.state.lock().inbound.remove(&key);
            if let Some(mref) = mref {
                crate::process::demonitor_in(rt, mref);
            }
        }
        tag::MONITOR_P_EXIT => {
            let reference = elem(m, 3).ok_or("MONITOR_P_EXIT without a reference")?;
            let key = ref_key(reference).ok_or("MONITOR_P_EXIT reference is not a reference")?;
            let reason = reason_of(elem(m, 4).ok_or("MONITOR_P_EXIT without a reason")?);
            let om = c.remote.state.lock().out.remove(&key);
            if let Some(om) = om {
                let pid = om.mref.target();
                om.sink.push_signal(Signal::Down(Down { monitor: om.mref, pid, reason, name: None }));
            }
        }
        _ => unreachable!("dispatch routes only these tags here"),
    }
    Ok(())
}

/// The connection-loss steps (module doc), run by the connection's reader after its last
/// frame was delivered.
pub(crate) fn connection_lost(sh: &NodeShared, c: &Conn) {
    let _ = sh;
    let (out, inbound, links) = {
        let mut st = c.remote.state.lock();
        st.lost = true;
        (std::mem::take(&mut st.out), std::mem::take(&mut st.inbound), std::mem::take(&mut st.links))
    };
    let Some(rt) = runtime() else { return };
    for (_, om) in out {
        let pid = om.mref.target();
        om.sink.push_signal(Signal::Down(Down { monitor: om.mref, pid, reason: DownReason::NoConnection, name: None }));
    }
    for (local, remote) in links {
        crate::process::send_link_exit(rt, remote, local, &DownReason::NoConnection);
    }
    for (_, mref) in inbound {
        crate::process::demonitor_in(rt, mref);
    }
}

/// A message to an alias (OTP 24+ process aliases: replies to `gen:call`s). smarm makes
/// aliases only for its own calls to other nodes (see `call`); anything else is dropped.
pub(crate) fn alias_send(sh: &NodeShared, alias: &Term, msg: Term) {
    let Some(key) = ref_key(alias) else {
        sh.count_drop(format_args!("ALIAS_SEND to {alias}, which is not a reference"));
        return;
    };
    let waiter = sh.aliases.lock().remove(&key);
    match waiter {
        Some(tx) => {
            let _ = tx.try_send(super::call::CallOutcome::Reply(msg));
        }
        None => sh.count_drop(format_args!("ALIAS_SEND to an unknown or expired alias")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_round_trip() {
        for r in [
            DownReason::Normal,
            DownReason::Killed,
            DownReason::NoProc,
            DownReason::NoConnection,
            DownReason::Shutdown,
            DownReason::ShutdownWith("done".into()),
            DownReason::Panic("boom".into()),
            DownReason::Custom("bad_thing".into()),
        ] {
            assert_eq!(reason_of(&reason_term(&r)), r);
        }
        assert_eq!(reason_of(&tuple(vec![atom("badarg"), int(1)])), DownReason::Custom("{badarg,1}".into()));
    }
}
