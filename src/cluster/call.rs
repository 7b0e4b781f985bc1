//! gen_server calls across nodes with OTP's protocol, both ways.
//!
//! **smarm calls a server of another node** ([`call`], [`call_named`]) as OTP 24+'s
//! `gen:call` does: it monitors the server (a pid, or a registered name on its node), makes
//! the monitor's reference an alias, and sends `{'$gen_call', {Caller, [alias | Ref]}, Request}`;
//! the server's `gen:reply` sends `{[alias | Ref], Reply}` to the alias (ALIAS_SEND). The
//! monitor's Down ends the call with the server's exit reason (`noproc` for a name nobody
//! has, `noconnection` if the connection is lost); a timeout removes the alias and the
//! monitor, so a late reply is dropped, as OTP drops one to a deactivated alias.
//!
//! **A server of another node calls a smarm gen_server**: after
//! [`ServerRef::accept_remote`](crate::gen_server::ServerRef::accept_remote), the server's
//! mailbox decodes `{'$gen_call', {From, Tag}, Request}` into a call whose reply is sent back
//! as `{Tag, Reply}` (to the alias when `Tag` is `[alias | Ref]`), and `{'$gen_cast', Msg}`
//! into a cast. The caller's monitor (MONITOR_P on the name or pid) fires when the server
//! ends, so a server that dies mid-call fails the call on the Erlang side too.

use std::sync::Arc;
use std::time::Duration;

use eetf::Term;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::ctrl::{as_atom, atom, elem, int, tag, tuple};
use super::{conn, nodes, remote, to_term, NodeShared};
use crate::behaviour::CallError;
use crate::channel::{self, RecvTimeoutError, Sender};
use crate::exit::DownReason;
use crate::gen_server::{GenServer, Request, ServerRef};
use crate::process::{Signal, SignalSink};
use crate::slot_state::Pid;

/// What ends a call to another node: the reply (the whole `{Tag, Reply}` message), or the
/// server's Down.
pub(crate) enum CallOutcome {
    Reply(Term),
    Down(DownReason),
}

/// The call's monitor sink: a Down ends the call.
struct CallSink(Sender<CallOutcome>);

impl SignalSink for CallSink {
    fn push_signal(&self, signal: Signal) {
        if let Signal::Down(d) = signal {
            let _ = self.0.try_send(CallOutcome::Down(d.reason));
        }
    }
    fn remove_down(&self, _id: u64) -> bool {
        false
    }
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }
    fn push_term(&self, _term: Term) -> Result<(), crate::mailbox::TermRejected> {
        Err(crate::mailbox::TermRejected::NotAccepted)
    }
}

/// Calls the gen_server `pid` of another node (an Erlang `gen_server` or a smarm one that
/// accepts remote calls) with OTP's protocol (see the module doc), waiting at most `timeout`.
/// `Err(Down(NoConnection))` if its node cannot be reached or the connection is lost,
/// `Err(NoProc)` if it is not alive, `Err(Down(reason))` if it dies during the call,
/// `Err(BadReply)` if the reply does not decode into `R`.
///
/// # Panics
/// Outside an actor of a runtime with a running node.
pub fn call<R: DeserializeOwned>(pid: Pid, request: &impl Serialize, timeout: Duration) -> Result<R, CallError> {
    let sh = super::current_shared().expect("smarm::cluster::call: no node runs in this runtime");
    let Some((node, _)) = nodes::node_of(pid) else {
        panic!("smarm::cluster::call: {pid} is a local pid (call local servers with gen_server::call)")
    };
    let send_ctrl = |_me: &Term| tuple(vec![int(tag::SEND), atom(""), Term::Pid(sh.local.pid_term(pid))]);
    do_call(&sh, &node, Term::Pid(sh.local.pid_term(pid)), send_ctrl, request, timeout)
}

/// Calls the gen_server registered as `name` on `node` (OTP's `gen_server:call({Name, Node},
/// Request, Timeout)`); as [`call`].
///
/// # Panics
/// Outside an actor of a runtime with a running node.
pub fn call_named<R: DeserializeOwned>(
    name: &str,
    node: &str,
    request: &impl Serialize,
    timeout: Duration,
) -> Result<R, CallError> {
    let sh = super::current_shared().expect("smarm::cluster::call_named: no node runs in this runtime");
    let send_ctrl = |me: &Term| tuple(vec![int(tag::REG_SEND), me.clone(), atom(""), atom(name)]);
    do_call(&sh, node, atom(name), send_ctrl, request, timeout)
}

fn do_call<R: DeserializeOwned>(
    sh: &Arc<NodeShared>,
    node: &str,
    proc_term: Term,
    send_ctrl: impl Fn(&Term) -> Term,
    request: &impl Serialize,
    timeout: Duration,
) -> Result<R, CallError> {
    let me = crate::task::current_pid();
    let req = to_term(request).map_err(|e| CallError::BadReply(format!("the request did not encode: {e}")))?;
    let Some(c) = conn::connect(sh, node) else { return Err(CallError::Down(DownReason::NoConnection)) };
    let r = sh.local.make_ref(sh.next_id());
    let (tx, rx) = channel::bounded(2);
    sh.aliases.lock().insert(r.id.clone(), tx.clone());
    let me_t = Term::Pid(sh.local.pid_term(me));
    let cleanup = || {
        sh.aliases.lock().remove(&r.id);
        remote::demonitor_proc(sh, &c, me, proc_term.clone(), r.clone());
    };
    if !remote::monitor_proc(sh, &c, me, proc_term.clone(), r.clone(), Arc::new(CallSink(tx))) {
        cleanup();
        return Err(CallError::Down(DownReason::NoConnection));
    }
    let tag_t =
        Term::ImproperList(eetf::ImproperList::from((vec![atom("alias")], Term::Reference(Box::new(r.clone())))));
    let msg = tuple(vec![atom("$gen_call"), tuple(vec![me_t.clone(), tag_t]), req]);
    c.send_frame(&send_ctrl(&me_t), Some(&msg));
    let outcome = rx.recv_timeout(timeout);
    cleanup();
    match outcome {
        Ok(CallOutcome::Reply(m)) => match elem(&m, 1) {
            Some(reply) => super::from_term(reply.clone()).map_err(|e| CallError::BadReply(e.to_string())),
            None => Err(CallError::BadReply(format!("a reply that is not {{Tag, Reply}}: {m}"))),
        },
        Ok(CallOutcome::Down(DownReason::NoProc)) => Err(CallError::NoProc),
        Ok(CallOutcome::Down(reason)) => Err(CallError::Down(reason)),
        Err(RecvTimeoutError::Timeout) => Err(CallError::Timeout),
        Err(RecvTimeoutError::Disconnected) => Err(CallError::Down(DownReason::NoConnection)),
    }
}

/// Decodes a message from another node for a gen_server's mailbox (see the module doc).
fn decode_request<S>(t: Term) -> Result<Request<S>, String>
where
    S: GenServer,
    S::Call: DeserializeOwned,
    S::Reply: Serialize,
    S::Cast: DeserializeOwned,
{
    match elem(&t, 0).and_then(as_atom) {
        Some("$gen_call") => {
            let (from, tag_t, req) =
                match (elem(&t, 1).and_then(|f| elem(f, 0)), elem(&t, 1).and_then(|f| elem(f, 1)), elem(&t, 2)) {
                    (Some(Term::Pid(p)), Some(tag_t), Some(req)) => (p.clone(), tag_t.clone(), req.clone()),
                    _ => return Err(format!("a malformed $gen_call: {t}")),
                };
            let call: S::Call = super::from_term(req).map_err(|e| e.to_string())?;
            let sh = super::current_shared().ok_or("no node")?;
            let from_pid = sh.local.pid_of(&from).ok_or("node table full")?;
            // The server's reply is encoded and sent by the replier itself (no forwarder
            // actor: spawning one per call woke a second thread per call). A server that
            // ends without replying drops the hook; the caller's monitor tells it why.
            let caller = crate::behaviour::hook_caller::<S::Reply>(
                Some(from_pid),
                Box::new(move |reply| match to_term(&reply) {
                    Ok(r) => reply_to(&sh, from_pid, &tag_t, r),
                    Err(e) => sh.log(format_args!("a reply to {from_pid} did not encode: {e}")),
                }),
            );
            Ok(Request::Call(call, caller))
        }
        Some("$gen_cast") => {
            let msg = elem(&t, 1).ok_or("a $gen_cast without a message")?.clone();
            Ok(Request::Cast(super::from_term(msg).map_err(|e| e.to_string())?))
        }
        _ => Err(format!("not a gen_server call or cast: {t}")),
    }
}

/// Sends `{Tag, Reply}` for an OTP caller: to its alias if `Tag` is `[alias | Ref]`, else to
/// its pid.
pub(crate) fn reply_to(sh: &Arc<NodeShared>, to: Pid, tag_t: &Term, reply: Term) {
    let Some((node, _)) = nodes::node_of(to) else { return };
    let Some(c) = conn::up(sh, &node) else { return };
    conn::gen_reply(sh, &c, to, tag_t, reply);
}

impl<S> ServerRef<S>
where
    S: GenServer,
    S::Call: DeserializeOwned,
    S::Reply: Serialize,
    S::Cast: DeserializeOwned,
{
    /// Takes calls and casts from other nodes (feature `cluster`): OTP's
    /// `gen_server:call({Name, Node}, Request)` and `gen_server:cast` (or a smarm node's
    /// [`cluster::call`](call)) reach the server, with requests and replies encoded
    /// through the serde mapping of [`term`](super::term). Other messages from other nodes
    /// are dropped and counted. Idempotent.
    pub fn accept_remote(&self) {
        if let Some(inner) = self.mailbox_addr().local_inner() {
            let _ = inner.decode.set(decode_request::<S>);
        }
    }
}
