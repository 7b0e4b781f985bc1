//! Terms of the distribution protocol: pids, references and atoms between smarm's and the
//! wire's forms, and the control messages smarm sends and understands
//! (`erts/doc/guides/erl_dist_protocol.md`, "Protocol between Connected Nodes").
//!
//! A frame after the handshake is `112` (pass-through: smarm negotiates no atom cache, so no
//! distribution header), the control message as a versioned term, and for the messages that
//! carry one, the payload as a second versioned term.

use eetf::{Atom, FixInteger, Term, Tuple};

use super::etf;
use super::nodes;
use crate::slot_state::Pid;

/// The control message tags smarm handles (`{Tag, ...}`).
pub(crate) mod tag {
    pub(crate) const LINK: i32 = 1;
    pub(crate) const SEND: i32 = 2;
    pub(crate) const EXIT: i32 = 3;
    pub(crate) const REG_SEND: i32 = 6;
    pub(crate) const GROUP_LEADER: i32 = 7;
    pub(crate) const EXIT2: i32 = 8;
    pub(crate) const SEND_TT: i32 = 12;
    pub(crate) const EXIT_TT: i32 = 13;
    pub(crate) const REG_SEND_TT: i32 = 16;
    pub(crate) const EXIT2_TT: i32 = 18;
    pub(crate) const MONITOR_P: i32 = 19;
    pub(crate) const DEMONITOR_P: i32 = 20;
    pub(crate) const MONITOR_P_EXIT: i32 = 21;
    pub(crate) const SEND_SENDER: i32 = 22;
    pub(crate) const SEND_SENDER_TT: i32 = 23;
    pub(crate) const ALIAS_SEND: i32 = 33;
    pub(crate) const ALIAS_SEND_TT: i32 = 34;
    pub(crate) const UNLINK_ID: i32 = 35;
    pub(crate) const UNLINK_ID_ACK: i32 = 36;
}

/// The pass-through byte that starts every frame smarm sends and accepts.
pub(crate) const PASS_THROUGH: u8 = 112;

/// This node's identity, for converting pids and references.
#[derive(Clone, Debug)]
pub(crate) struct Local {
    pub(crate) name: std::sync::Arc<str>,
    pub(crate) creation: u32,
    /// The runtime id of the runtime the node runs in (local pids carry it).
    pub(crate) rt: u32,
}

impl Local {
    /// The wire form of `pid`: a local pid as this node's, a remote one as its node's.
    pub(crate) fn pid_term(&self, pid: Pid) -> eetf::Pid {
        match nodes::node_of(pid) {
            Some((name, creation)) => eetf::Pid::new(name.as_ref(), pid.index(), pid.generation(), creation),
            None => eetf::Pid::new(self.name.as_ref(), pid.index(), pid.generation(), self.creation),
        }
    }

    /// The smarm pid of a wire pid: ours if it names this node and incarnation, else a remote
    /// pid (interned). `None` if the node table is full.
    pub(crate) fn pid_of(&self, p: &eetf::Pid) -> Option<Pid> {
        if p.node.name == *self.name && p.creation == self.creation {
            Some(Pid::local(self.rt, p.id, p.serial))
        } else {
            nodes::remote_pid(&p.node.name, p.creation, p.id, p.serial)
        }
    }

    /// A new reference of this node (three id words, as OTP's).
    pub(crate) fn make_ref(&self, id: u64) -> eetf::Reference {
        eetf::Reference {
            node: Atom::from(self.name.as_ref()),
            id: vec![(id & 0x3_ffff) as u32, (id >> 18) as u32, (id >> 50) as u32],
            creation: self.creation,
        }
    }
}

pub(crate) fn atom(s: &str) -> Term {
    Term::Atom(Atom::from(s))
}

pub(crate) fn int(i: i32) -> Term {
    Term::FixInteger(FixInteger::from(i))
}

pub(crate) fn tuple(elements: Vec<Term>) -> Term {
    Term::Tuple(Tuple::from(elements))
}

/// The `i`-th element of a tuple term.
pub(crate) fn elem(t: &Term, i: usize) -> Option<&Term> {
    match t {
        Term::Tuple(tp) => tp.elements.get(i),
        _ => None,
    }
}

pub(crate) fn as_atom(t: &Term) -> Option<&str> {
    match t {
        Term::Atom(a) => Some(&a.name),
        _ => None,
    }
}

pub(crate) fn as_int(t: &Term) -> Option<i64> {
    match t {
        Term::FixInteger(i) => Some(i.value as i64),
        _ => None,
    }
}

/// A term as Erlang prints it (`~p` without line breaks): atoms unquoted when they need no
/// quotes, binaries as `<<"text">>` when printable. For exit reasons and log lines. Recurses
/// once per nesting level (terms from the wire are depth-limited by the decoder).
pub(crate) fn erl_text(t: &Term) -> String {
    fn plain_atom(a: &str) -> bool {
        let mut c = a.chars();
        c.next().is_some_and(|f| f.is_ascii_lowercase())
            && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '@')
    }
    fn go(t: &Term, out: &mut String) {
        use std::fmt::Write;
        let join = |items: &[Term], out: &mut String| {
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                go(x, out);
            }
        };
        match t {
            Term::Atom(a) if plain_atom(&a.name) => out.push_str(&a.name),
            Term::Tuple(tp) => {
                out.push('{');
                join(&tp.elements, out);
                out.push('}');
            }
            Term::List(l) => {
                out.push('[');
                join(&l.elements, out);
                out.push(']');
            }
            Term::Binary(b) if b.bytes.iter().all(|&c| (0x20..0x7f).contains(&c) && c != b'"' && c != b'\\') => {
                let _ = write!(out, "<<\"{}\">>", String::from_utf8_lossy(&b.bytes));
            }
            other => {
                let _ = write!(out, "{other}");
            }
        }
    }
    let mut out = String::new();
    go(t, &mut out);
    out
}

/// Appends one frame (length, pass-through, control, optional payload) to `out`.
pub(crate) fn encode_frame(out: &mut Vec<u8>, ctrl: &Term, payload: Option<&Term>) -> Result<(), etf::EtfError> {
    let start = out.len();
    out.extend_from_slice(&[0, 0, 0, 0, PASS_THROUGH]);
    etf::encode_versioned(ctrl, out)?;
    if let Some(p) = payload {
        etf::encode_versioned(p, out)?;
    }
    let len = (out.len() - start - 4) as u32;
    out[start..start + 4].copy_from_slice(&len.to_be_bytes());
    Ok(())
}

/// A frame split into its control message and optional payload.
pub(crate) struct Frame {
    pub(crate) ctrl: Term,
    pub(crate) payload: Option<Term>,
}

/// Decodes the body of a non-tick frame (after the 4-byte length).
pub(crate) fn decode_frame(body: &[u8], limits: &etf::Limits) -> Result<Frame, String> {
    let Some((&first, rest)) = body.split_first() else { return Err("empty frame".into()) };
    if first != PASS_THROUGH {
        return Err(format!("frame starts with {first}, not 112 (pass-through): no atom cache was negotiated"));
    }
    let (ctrl, n) = etf::decode_versioned(rest, limits).map_err(|e| format!("control message: {e}"))?;
    let rest = &rest[n..];
    let payload = if rest.is_empty() {
        None
    } else {
        let (p, m) = etf::decode_versioned(rest, limits).map_err(|e| format!("payload: {e}"))?;
        if m != rest.len() {
            return Err(format!("{} bytes after the payload", rest.len() - m));
        }
        Some(p)
    };
    Ok(Frame { ctrl, payload })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn local() -> Local {
        Local { name: "ctrl_test@h".into(), creation: 7, rt: 3 }
    }

    #[test]
    fn pids_round_trip_and_remote_pids_intern() {
        let l = local();
        let mine = Pid::local(3, 10, 2);
        let t = l.pid_term(mine);
        assert_eq!((t.node.name.as_str(), t.id, t.serial, t.creation), ("ctrl_test@h", 10, 2, 7));
        assert_eq!(l.pid_of(&t), Some(mine));
        // The same node name with another creation is an earlier incarnation: remote.
        let old = eetf::Pid::new("ctrl_test@h", 10, 2, 6);
        let p = l.pid_of(&old).unwrap();
        assert!(p.is_remote());
        assert_eq!(l.pid_term(p), old);
    }

    #[test]
    fn frames_round_trip() {
        let mut out = Vec::new();
        let ctrl = tuple(vec![int(tag::SEND), atom(""), Term::Pid(local().pid_term(Pid::local(3, 1, 1)))]);
        let payload = tuple(vec![atom("hello"), int(5)]);
        encode_frame(&mut out, &ctrl, Some(&payload)).unwrap();
        let len = u32::from_be_bytes(out[..4].try_into().unwrap()) as usize;
        assert_eq!(len, out.len() - 4);
        let f = decode_frame(&out[4..], &etf::Limits::default()).unwrap();
        assert_eq!((f.ctrl, f.payload), (ctrl, Some(payload)));
        assert!(decode_frame(&[111, 131, 106], &etf::Limits::default()).is_err());
        assert!(decode_frame(&[], &etf::Limits::default()).is_err());
    }
}
