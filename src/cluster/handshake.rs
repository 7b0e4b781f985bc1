//! The Erlang distribution handshake, version 6 (OTP 23+), as sans-IO state machines.
//!
//! What this module owns: the handshake messages (`send_name` 'N' and the old 'n', status 's',
//! challenge 'N', complement 'c', challenge reply 'r', challenge ack 'a'), their 2-byte framing,
//! the MD5 digest, the capability flags ([`OUR_FLAGS`], [`REQUIRED_FLAGS`]), node-name
//! validation, and the two roles: [`Initiator`] (node A, connects) and [`Acceptor`] (node B,
//! accepts). The caller moves bytes: it writes what the machines return and feeds each received
//! frame's payload (see [`read_frame`]) to `on_frame`; this module never touches a socket, a
//! clock or the node table.
//!
//! Invariants:
//! - Every machine accepts only the message its state expects; anything else (wrong tag, wrong
//!   length, a frame after the end) is an error, after which the machine is dead: every later
//!   call fails too. The caller closes the connection on any error.
//! - A machine reaches `Done` only after the peer proved the cookie (the digest of our challenge
//!   matched) and, for the initiator, after the peer's name equalled the expected one.
//! - The peer's flags must contain [`REQUIRED_FLAGS`] (OTP 25's mandatory set; a peer that sets
//!   `DFLAG_MANDATORY_25_DIGEST` has them by definition, as OTP 25+ reads it). The flags
//!   reported for a peer have that digest expanded ([`effective_flags`]); the flags to use on
//!   the connection are `OUR_FLAGS & peer.flags`.
//! - Nothing here panics on peer input and no allocation exceeds [`MAX_FRAME`] per frame.
//!
//! Limits: no dynamic node names (`DFLAG_NAME_ME`: we never request one, a `named:` status is
//! an error, and a peer asking us to name it is refused); the old 'n' name (version 5) is
//! accepted from an initiator only with `DFLAG_HANDSHAKE_23`, followed by the 'c' complement,
//! as the spec describes; we always send 'N'. Challenges come from the caller (see
//! [`gen_challenge`]). One cookie per machine (the spec's in/out cookies are the same here).
//!
//! Note on `DFLAG_MANDATORY_25_DIGEST`: the protocol guide gives it as `1 bsl 36`, but OTP's own
//! `dist.hrl` and `dist.h` (OTP 25 through 28) define it as `16#04000000` (bit 26), which is what
//! real nodes send; this module uses the source's value.

// The complete codec of its protocol: smarm uses part of it; the rest (e.g. NAMES, the
// flag names, the fuzz entry points) serves the tests, the fuzz targets and diagnostics.
#![allow(dead_code)]
// Items re-exported (doc-hidden) through `cluster::__wire` link to private ones in their docs.
#![allow(rustdoc::private_intra_doc_links)]

use std::fmt;
use std::io::{self, Read};

use md5::{Digest, Md5};

/// The node is published (part of the global namespace; hidden nodes leave it out).
pub const DFLAG_PUBLISHED: u64 = 0x1;
/// The node implements an atom cache (obsolete).
pub const DFLAG_ATOM_CACHE: u64 = 0x2;
/// Extended (3 x 32 bit) references. Mandatory.
pub const DFLAG_EXTENDED_REFERENCES: u64 = 0x4;
/// Distributed process monitoring.
pub const DFLAG_DIST_MONITOR: u64 = 0x8;
/// Separate tags for funs. Mandatory.
pub const DFLAG_FUN_TAGS: u64 = 0x10;
/// Distributed monitoring of named processes.
pub const DFLAG_DIST_MONITOR_NAME: u64 = 0x20;
/// The (hidden) node implements an atom cache (obsolete).
pub const DFLAG_HIDDEN_ATOM_CACHE: u64 = 0x40;
/// `NEW_FUN_EXT`. Mandatory.
pub const DFLAG_NEW_FUN_TAGS: u64 = 0x80;
/// Extended pids and ports. Mandatory.
pub const DFLAG_EXTENDED_PIDS_PORTS: u64 = 0x100;
/// `EXPORT_EXT`. Mandatory.
pub const DFLAG_EXPORT_PTR_TAG: u64 = 0x200;
/// `BIT_BINARY_EXT`. Mandatory.
pub const DFLAG_BIT_BINARIES: u64 = 0x400;
/// `NEW_FLOAT_EXT`. Mandatory.
pub const DFLAG_NEW_FLOATS: u64 = 0x800;
/// Unicode I/O.
pub const DFLAG_UNICODE_IO: u64 = 0x1000;
/// Atom cache in the distribution header.
pub const DFLAG_DIST_HDR_ATOM_CACHE: u64 = 0x2000;
/// `SMALL_ATOM_EXT`.
pub const DFLAG_SMALL_ATOM_TAGS: u64 = 0x4000;
/// UTF-8 atoms. Mandatory.
pub const DFLAG_UTF8_ATOMS: u64 = 0x1_0000;
/// `MAP_EXT`. Mandatory.
pub const DFLAG_MAP_TAG: u64 = 0x2_0000;
/// 32-bit creations (`NEW_PID_EXT`, `NEW_PORT_EXT`, `NEWER_REFERENCE_EXT`). Mandatory.
pub const DFLAG_BIG_CREATION: u64 = 0x4_0000;
/// `SEND_SENDER` / `SEND_SENDER_TT` instead of `SEND` / `SEND_TT`.
pub const DFLAG_SEND_SENDER: u64 = 0x8_0000;
/// Any term as sequential trace label.
pub const DFLAG_BIG_SEQTRACE_LABELS: u64 = 0x10_0000;
/// The `PAYLOAD_EXIT*` and `PAYLOAD_MONITOR_P_EXIT` control messages.
pub const DFLAG_EXIT_PAYLOAD: u64 = 0x40_0000;
/// Fragmented distribution messages.
pub const DFLAG_FRAGMENTS: u64 = 0x80_0000;
/// The version 6 handshake (OTP 23). Mandatory.
pub const DFLAG_HANDSHAKE_23: u64 = 0x100_0000;
/// The new link protocol (`UNLINK_ID`, `UNLINK_ID_ACK`); mandatory from OTP 26.
pub const DFLAG_UNLINK_ID: u64 = 0x200_0000;
/// Shorthand for every flag in [`REQUIRED_FLAGS`] (OTP 25). The guide says `1 bsl 36`; OTP's
/// source says bit 26, which is what nodes send (see the module doc).
pub const DFLAG_MANDATORY_25_DIGEST: u64 = 0x400_0000;
/// `SPAWN_REQUEST` / `SPAWN_REPLY` control messages.
pub const DFLAG_SPAWN: u64 = 1 << 32;
/// Dynamic node name request (never set by smarm).
pub const DFLAG_NAME_ME: u64 = 1 << 33;
/// Node container types version 4 (full 32-bit pid fields, 64-bit ports, 5-word refs).
pub const DFLAG_V4_NC: u64 = 1 << 34;
/// Process aliases (`ALIAS_SEND`, `ALIAS_SEND_TT`).
pub const DFLAG_ALIAS: u64 = 1 << 35;

/// The flags a peer must have, or the handshake fails: OTP 25's mandatory set.
pub const REQUIRED_FLAGS: u64 = DFLAG_EXTENDED_REFERENCES
    | DFLAG_FUN_TAGS
    | DFLAG_EXTENDED_PIDS_PORTS
    | DFLAG_NEW_FUN_TAGS
    | DFLAG_EXPORT_PTR_TAG
    | DFLAG_BIT_BINARIES
    | DFLAG_NEW_FLOATS
    | DFLAG_UTF8_ATOMS
    | DFLAG_MAP_TAG
    | DFLAG_BIG_CREATION
    | DFLAG_HANDSHAKE_23;

/// The flags smarm advertises. Deliberately absent: `DIST_HDR_ATOM_CACHE` and `FRAGMENTS`
/// (peers then send every message whole, with no distribution header), `SPAWN` and `NAME_ME`
/// (not implemented), and `SEND_SENDER` / `EXIT_PAYLOAD`: without them a peer sends plain
/// `SEND` {2,..} and `EXIT`/`EXIT2`/`MONITOR_P_EXIT` {3,8,21,..} with the reason inside the
/// control tuple, so the receive side need not parse {22,..} or {24..28,..}.
/// Includes everything OTP 26-28 require of a peer (`V4_NC`, `UNLINK_ID`, the 25 digest).
pub const OUR_FLAGS: u64 = DFLAG_PUBLISHED
    | DFLAG_EXTENDED_REFERENCES
    | DFLAG_DIST_MONITOR
    | DFLAG_FUN_TAGS
    | DFLAG_DIST_MONITOR_NAME
    | DFLAG_NEW_FUN_TAGS
    | DFLAG_EXTENDED_PIDS_PORTS
    | DFLAG_EXPORT_PTR_TAG
    | DFLAG_BIT_BINARIES
    | DFLAG_NEW_FLOATS
    | DFLAG_SMALL_ATOM_TAGS
    | DFLAG_UTF8_ATOMS
    | DFLAG_MAP_TAG
    | DFLAG_BIG_CREATION
    | DFLAG_HANDSHAKE_23
    | DFLAG_UNLINK_ID
    | DFLAG_V4_NC
    | DFLAG_ALIAS
    | DFLAG_MANDATORY_25_DIGEST;

/// Every flag this module names, with its name (for error messages and logs).
pub const FLAG_NAMES: &[(u64, &str)] = &[
    (DFLAG_PUBLISHED, "PUBLISHED"),
    (DFLAG_ATOM_CACHE, "ATOM_CACHE"),
    (DFLAG_EXTENDED_REFERENCES, "EXTENDED_REFERENCES"),
    (DFLAG_DIST_MONITOR, "DIST_MONITOR"),
    (DFLAG_FUN_TAGS, "FUN_TAGS"),
    (DFLAG_DIST_MONITOR_NAME, "DIST_MONITOR_NAME"),
    (DFLAG_HIDDEN_ATOM_CACHE, "HIDDEN_ATOM_CACHE"),
    (DFLAG_NEW_FUN_TAGS, "NEW_FUN_TAGS"),
    (DFLAG_EXTENDED_PIDS_PORTS, "EXTENDED_PIDS_PORTS"),
    (DFLAG_EXPORT_PTR_TAG, "EXPORT_PTR_TAG"),
    (DFLAG_BIT_BINARIES, "BIT_BINARIES"),
    (DFLAG_NEW_FLOATS, "NEW_FLOATS"),
    (DFLAG_UNICODE_IO, "UNICODE_IO"),
    (DFLAG_DIST_HDR_ATOM_CACHE, "DIST_HDR_ATOM_CACHE"),
    (DFLAG_SMALL_ATOM_TAGS, "SMALL_ATOM_TAGS"),
    (DFLAG_UTF8_ATOMS, "UTF8_ATOMS"),
    (DFLAG_MAP_TAG, "MAP_TAG"),
    (DFLAG_BIG_CREATION, "BIG_CREATION"),
    (DFLAG_SEND_SENDER, "SEND_SENDER"),
    (DFLAG_BIG_SEQTRACE_LABELS, "BIG_SEQTRACE_LABELS"),
    (DFLAG_EXIT_PAYLOAD, "EXIT_PAYLOAD"),
    (DFLAG_FRAGMENTS, "FRAGMENTS"),
    (DFLAG_HANDSHAKE_23, "HANDSHAKE_23"),
    (DFLAG_UNLINK_ID, "UNLINK_ID"),
    (DFLAG_MANDATORY_25_DIGEST, "MANDATORY_25_DIGEST"),
    (DFLAG_SPAWN, "SPAWN"),
    (DFLAG_NAME_ME, "NAME_ME"),
    (DFLAG_V4_NC, "V4_NC"),
    (DFLAG_ALIAS, "ALIAS"),
];

/// `flags` as `NAME|NAME|...`; bits without a name show as `0x..`.
pub fn flag_names(flags: u64) -> String {
    let mut parts = Vec::new();
    let mut rest = flags;
    for &(bit, name) in FLAG_NAMES {
        if flags & bit != 0 {
            parts.push(name.to_string());
            rest &= !bit;
        }
    }
    if rest != 0 {
        parts.push(format!("{rest:#x}"));
    }
    if parts.is_empty() {
        "(none)".to_string()
    } else {
        parts.join("|")
    }
}

/// A peer's flags as OTP 25+ reads them: `DFLAG_MANDATORY_25_DIGEST` stands for all of
/// [`REQUIRED_FLAGS`].
pub fn effective_flags(flags: u64) -> u64 {
    if flags & DFLAG_MANDATORY_25_DIGEST != 0 {
        flags | REQUIRED_FLAGS
    } else {
        flags
    }
}

/// The required flags a peer lacks (0 if none).
pub fn missing_required(flags: u64) -> u64 {
    REQUIRED_FLAGS & !effective_flags(flags)
}

/// Largest handshake frame payload accepted. The largest message the protocol defines is the
/// challenge: 1 + 8 + 4 + 4 + 2 + 255 (name) = 274 bytes. The spec lets both name messages carry
/// trailing data that must be ignored, so 1 KiB leaves ample room for that while an
/// unauthenticated peer cannot make us buffer more than 1 KiB per frame.
pub const MAX_FRAME: usize = 1024;

/// Longest full node name (`alive@host`) in bytes, as Erlang's atoms allow.
pub const MAX_NODE_NAME: usize = 255;

/// Reads one handshake frame (2-byte big-endian length, then the payload) and returns the
/// payload. The length is checked against [`MAX_FRAME`] before anything is allocated.
pub fn read_frame<R: Read>(r: &mut R) -> Result<Vec<u8>, HandshakeError> {
    let mut len = [0u8; 2];
    r.read_exact(&mut len).map_err(HandshakeError::Io)?;
    let len = usize::from(u16::from_be_bytes(len));
    if len > MAX_FRAME {
        return Err(HandshakeError::FrameTooLarge { len });
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload).map_err(HandshakeError::Io)?;
    Ok(payload)
}

/// `payload` with its 2-byte big-endian length in front.
///
/// # Panics
///
/// If `payload` is longer than [`MAX_FRAME`]: every message this module builds is shorter, so
/// that is a caller bug, never a consequence of peer input.
pub fn frame(payload: &[u8]) -> Vec<u8> {
    assert!(payload.len() <= MAX_FRAME, "handshake frame of {} bytes exceeds MAX_FRAME", payload.len());
    let mut out = Vec::with_capacity(2 + payload.len());
    out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The handshake digest: MD5 of the cookie followed by the challenge in decimal (unsigned).
pub fn digest(challenge: u32, cookie: &str) -> [u8; 16] {
    let mut h = Md5::new();
    h.update(cookie.as_bytes());
    h.update(challenge.to_string().as_bytes());
    h.finalize().into()
}

/// A fresh random challenge, from the kernel (the node's one source: `conn::random_u32`).
pub fn gen_challenge() -> u32 {
    super::conn::random_u32()
}

/// Compares two digests without an early exit.
fn digest_eq(a: &[u8; 16], b: &[u8; 16]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Checks a full node name: `alive@host`, at most [`MAX_NODE_NAME`] bytes, with a non-empty
/// alive part of `[A-Za-z0-9_-]` and a non-empty host of ASCII letters, digits, `.`, `-`, `_`
/// and `:` (IPv6 literals) that does not start with `.` or `-`.
pub fn validate_node_name(name: &str) -> Result<(), HandshakeError> {
    let bad = |what| Err(HandshakeError::BadName { what });
    if name.len() > MAX_NODE_NAME {
        return bad("longer than 255 bytes");
    }
    let Some((alive, host)) = name.split_once('@') else {
        return bad("no '@'");
    };
    if alive.is_empty() {
        return bad("empty alive part");
    }
    if !alive.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
        return bad("alive part has a character outside [A-Za-z0-9_-]");
    }
    if host.is_empty() {
        return bad("empty host");
    }
    if !host.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':')) {
        return bad("host has a character outside [A-Za-z0-9._:-] (or a second '@')");
    }
    if host.starts_with(['.', '-']) {
        return bad("host starts with '.' or '-'");
    }
    Ok(())
}

/// A node's identity as exchanged in the handshake.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdent {
    /// Full node name, `alive@host`.
    pub name: String,
    /// Capability flags (`DFLAG_*`).
    pub flags: u64,
    /// Incarnation number.
    pub creation: u32,
}

/// The acceptor's verdict on a connection attempt (the 's' message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Go on.
    Ok,
    /// Go on; the acceptor drops its own simultaneous attempt.
    OkSimultaneous,
    /// Stop: the acceptor has its own attempt going and keeps it.
    Nok,
    /// Stop: the connection is not allowed.
    NotAllowed,
    /// The acceptor has a live connection to this name; the initiator answers whether to go on.
    Alive,
}

impl Status {
    /// The status as it is spelled on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::OkSimultaneous => "ok_simultaneous",
            Status::Nok => "nok",
            Status::NotAllowed => "not_allowed",
            Status::Alive => "alive",
        }
    }

    fn parse(bytes: &[u8]) -> Option<Status> {
        Some(match bytes {
            b"ok" => Status::Ok,
            b"ok_simultaneous" => Status::OkSimultaneous,
            b"nok" => Status::Nok,
            b"not_allowed" => Status::NotAllowed,
            b"alive" => Status::Alive,
            _ => return None,
        })
    }
}

/// Where in the handshake something happened (for errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Step {
    /// The name message (`send_name` / `recv_name`).
    Name,
    /// The status message.
    Status,
    /// The initiator's answer to an `alive` status.
    AliveAnswer,
    /// The acceptor's challenge.
    Challenge,
    /// The complement after an old 'n' name.
    Complement,
    /// The initiator's challenge reply.
    ChallengeReply,
    /// The acceptor's challenge ack.
    ChallengeAck,
    /// After the handshake ended (done or failed).
    Finished,
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Step::Name => "name",
            Step::Status => "status",
            Step::AliveAnswer => "alive answer",
            Step::Challenge => "challenge",
            Step::Complement => "complement",
            Step::ChallengeReply => "challenge reply",
            Step::ChallengeAck => "challenge ack",
            Step::Finished => "after the end",
        })
    }
}

/// A handshake failure. After any of these the connection must be closed.
#[derive(Debug)]
#[non_exhaustive]
pub enum HandshakeError {
    /// Reading a frame failed (including end of stream).
    Io(io::Error),
    /// A frame header announced more than [`MAX_FRAME`] bytes.
    FrameTooLarge {
        /// The announced length.
        len: usize,
    },
    /// A message had the right tag but a wrong length or content.
    Malformed {
        /// Where.
        step: Step,
        /// What was wrong.
        what: &'static str,
    },
    /// A message arrived that this step does not expect (out of order, unknown tag, or after the
    /// end).
    UnexpectedMessage {
        /// Where.
        step: Step,
        /// The message's tag byte.
        tag: u8,
    },
    /// A status the protocol does not define (truncated to 64 bytes).
    BadStatus {
        /// The status text, lossily decoded.
        status: String,
    },
    /// The peer sent `named:`, which answers a `DFLAG_NAME_ME` request we never make.
    NamedUnsupported,
    /// A node name failed [`validate_node_name`].
    BadName {
        /// What was wrong.
        what: &'static str,
    },
    /// The acceptor's name is not the node we meant to reach.
    PeerNameMismatch {
        /// The name we connected to.
        expected: String,
        /// The name in its challenge (lossily decoded).
        got: String,
    },
    /// The peer lacks flags in [`REQUIRED_FLAGS`].
    MissingFlags {
        /// Where.
        step: Step,
        /// The missing flags.
        missing: u64,
    },
    /// The peer asked for something we do not do (a dynamic name, another version).
    Unsupported {
        /// Where.
        step: Step,
        /// What.
        what: &'static str,
    },
    /// The peer's digest does not match our challenge: it does not know the cookie.
    BadDigest {
        /// Where (challenge reply on the acceptor, challenge ack on the initiator).
        step: Step,
    },
    /// A method was called in a state that does not allow it (a caller bug).
    Misuse {
        /// What was called and why it does not fit.
        what: &'static str,
    },
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Io(e) => write!(f, "handshake: reading a frame failed: {e}"),
            HandshakeError::FrameTooLarge { len } => {
                write!(f, "handshake: frame of {len} bytes exceeds the {MAX_FRAME}-byte limit")
            }
            HandshakeError::Malformed { step, what } => write!(f, "handshake step `{step}`: malformed message: {what}"),
            HandshakeError::UnexpectedMessage { step, tag } => {
                let shown = if tag.is_ascii_graphic() { char::from(*tag) } else { '?' };
                write!(f, "handshake step `{step}`: unexpected message '{shown}' (tag {tag})")
            }
            HandshakeError::BadStatus { status } => write!(f, "handshake step `status`: unknown status {status:?}"),
            HandshakeError::NamedUnsupported => {
                write!(f, "handshake step `status`: peer sent `named:` but we never ask for a dynamic name")
            }
            HandshakeError::BadName { what } => write!(f, "handshake step `name`: invalid node name: {what}"),
            HandshakeError::PeerNameMismatch { expected, got } => {
                write!(f, "handshake step `challenge`: connected to {expected:?} but the peer is {got:?}")
            }
            HandshakeError::MissingFlags { step, missing } => {
                write!(f, "handshake step `{step}`: peer lacks required flags {}", flag_names(*missing))
            }
            HandshakeError::Unsupported { step, what } => write!(f, "handshake step `{step}`: unsupported: {what}"),
            HandshakeError::BadDigest { step } => {
                write!(f, "handshake step `{step}`: digest mismatch (the peer's cookie differs)")
            }
            HandshakeError::Misuse { what } => write!(f, "handshake: API misuse: {what}"),
        }
    }
}

impl std::error::Error for HandshakeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            HandshakeError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// A cursor over a received payload that never reads past its end.
struct Fields<'a> {
    rest: &'a [u8],
    step: Step,
}

impl<'a> Fields<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], HandshakeError> {
        if self.rest.len() < n {
            return Err(HandshakeError::Malformed { step: self.step, what });
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, HandshakeError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, HandshakeError> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, HandshakeError> {
        let b = self.take(8, what)?;
        Ok(u64::from_be_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
    }

    fn digest(&mut self, what: &'static str) -> Result<[u8; 16], HandshakeError> {
        let b = self.take(16, what)?;
        let mut d = [0u8; 16];
        d.copy_from_slice(b);
        Ok(d)
    }

    fn end(&self, what: &'static str) -> Result<(), HandshakeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(HandshakeError::Malformed { step: self.step, what })
        }
    }
}

/// Splits a payload into its tag and body; an empty payload is malformed.
fn tag_of(payload: &[u8], step: Step) -> Result<(u8, &[u8]), HandshakeError> {
    match payload.split_first() {
        Some((&tag, body)) => Ok((tag, body)),
        None => Err(HandshakeError::Malformed { step, what: "empty message" }),
    }
}

/// A node name received from the peer, decoded and validated.
fn peer_name(bytes: &[u8]) -> Result<String, HandshakeError> {
    let name = std::str::from_utf8(bytes).map_err(|_| HandshakeError::BadName { what: "not UTF-8" })?;
    validate_node_name(name)?;
    Ok(name.to_owned())
}

/// Checks our own identity before a machine uses it.
fn check_ours(ours: &NodeIdent) -> Result<(), HandshakeError> {
    validate_node_name(&ours.name)?;
    if ours.flags & DFLAG_NAME_ME != 0 {
        return Err(HandshakeError::Misuse { what: "our flags must not contain DFLAG_NAME_ME" });
    }
    if ours.flags & DFLAG_HANDSHAKE_23 == 0 {
        return Err(HandshakeError::Misuse { what: "our flags must contain DFLAG_HANDSHAKE_23" });
    }
    Ok(())
}

/// The peer's flags must contain the required set.
fn check_flags(flags: u64, step: Step) -> Result<(), HandshakeError> {
    match missing_required(flags) {
        0 => Ok(()),
        missing => Err(HandshakeError::MissingFlags { step, missing }),
    }
}

fn status_frame(s: &str) -> Vec<u8> {
    let mut p = Vec::with_capacity(1 + s.len());
    p.push(b's');
    p.extend_from_slice(s.as_bytes());
    frame(&p)
}

/// What the caller does after the initiator consumed a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InitiatorStep {
    /// The acceptor's status. `Ok` / `OkSimultaneous`: keep reading. `Alive`: call
    /// [`Initiator::answer_alive`] and send what it returns. `Nok` / `NotAllowed`: give up and
    /// close (the machine is finished).
    Status(Status),
    /// Send these bytes (the framed challenge reply), then keep reading.
    Send(Vec<u8>),
    /// The handshake succeeded; this is the peer (flags with the 25 digest expanded). The
    /// connection now uses 4-byte frames.
    Done(NodeIdent),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IState {
    Fresh,
    AwaitStatus,
    AwaitAliveDecision,
    AwaitChallenge,
    AwaitAck,
    Finished,
}

/// The connecting side (node A) of the handshake.
///
/// Use: [`Initiator::new`], send [`Initiator::start`]'s bytes, then feed every received frame
/// payload to [`Initiator::on_frame`] until it returns [`InitiatorStep::Done`] or an error.
/// Its `Debug` output leaves the cookie out.
pub struct Initiator {
    ours: NodeIdent,
    cookie: String,
    expected_peer: String,
    my_challenge: u32,
    state: IState,
    /// The peer's identity, known once its challenge arrived.
    peer: Option<NodeIdent>,
}

impl fmt::Debug for Initiator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Initiator")
            .field("ours", &self.ours)
            .field("expected_peer", &self.expected_peer)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Initiator {
    /// An initiator for node `ours` connecting to `expected_peer` (full name) with `cookie`;
    /// `my_challenge` should come from [`gen_challenge`]. Fails if either name is invalid or
    /// `ours.flags` lacks `DFLAG_HANDSHAKE_23` or sets `DFLAG_NAME_ME`.
    pub fn new(
        ours: NodeIdent,
        cookie: String,
        expected_peer: String,
        my_challenge: u32,
    ) -> Result<Self, HandshakeError> {
        check_ours(&ours)?;
        validate_node_name(&expected_peer)?;
        Ok(Initiator { ours, cookie, expected_peer, my_challenge, state: IState::Fresh, peer: None })
    }

    /// The framed `send_name` ('N') message; send it first. Calling it a second time is a caller
    /// bug: it returns nothing and the machine is finished (the next `on_frame` fails).
    pub fn start(&mut self) -> Vec<u8> {
        if self.state != IState::Fresh {
            self.state = IState::Finished;
            return Vec::new();
        }
        self.state = IState::AwaitStatus;
        let name = self.ours.name.as_bytes();
        let mut p = Vec::with_capacity(15 + name.len());
        p.push(b'N');
        p.extend_from_slice(&self.ours.flags.to_be_bytes());
        p.extend_from_slice(&self.ours.creation.to_be_bytes());
        p.extend_from_slice(&(name.len() as u16).to_be_bytes());
        p.extend_from_slice(name);
        frame(&p)
    }

    /// The answer to an `alive` status: `true` = go on (our old connection to the peer is
    /// dead), `false` = give up (the machine is finished; close after sending). Returns the
    /// framed status to send. Only valid right after [`InitiatorStep::Status`]`(Alive)`.
    pub fn answer_alive(&mut self, proceed: bool) -> Result<Vec<u8>, HandshakeError> {
        if self.state != IState::AwaitAliveDecision {
            self.state = IState::Finished;
            return Err(HandshakeError::Misuse { what: "answer_alive without an `alive` status" });
        }
        self.state = if proceed { IState::AwaitChallenge } else { IState::Finished };
        Ok(status_frame(if proceed { "true" } else { "false" }))
    }

    /// Consumes one received frame payload.
    pub fn on_frame(&mut self, payload: &[u8]) -> Result<InitiatorStep, HandshakeError> {
        let r = self.step(payload);
        if r.is_err() {
            self.state = IState::Finished;
        }
        r
    }

    fn step(&mut self, payload: &[u8]) -> Result<InitiatorStep, HandshakeError> {
        let step = match self.state {
            IState::AwaitStatus => Step::Status,
            IState::AwaitChallenge => Step::Challenge,
            IState::AwaitAck => Step::ChallengeAck,
            IState::AwaitAliveDecision => Step::AliveAnswer,
            IState::Fresh => return Err(HandshakeError::Misuse { what: "on_frame before start" }),
            IState::Finished => Step::Finished,
        };
        let (tag, body) = tag_of(payload, step)?;
        match (self.state, tag) {
            (IState::AwaitStatus, b's') => {
                if body.starts_with(b"named:") {
                    return Err(HandshakeError::NamedUnsupported);
                }
                let Some(status) = Status::parse(body) else {
                    let shown = &body[..body.len().min(64)];
                    return Err(HandshakeError::BadStatus { status: String::from_utf8_lossy(shown).into_owned() });
                };
                self.state = match status {
                    Status::Ok | Status::OkSimultaneous => IState::AwaitChallenge,
                    Status::Alive => IState::AwaitAliveDecision,
                    Status::Nok | Status::NotAllowed => IState::Finished,
                };
                Ok(InitiatorStep::Status(status))
            }
            (IState::AwaitChallenge, b'N') => {
                let mut f = Fields { rest: body, step };
                let flags = f.u64("challenge too short")?;
                let challenge = f.u32("challenge too short")?;
                let creation = f.u32("challenge too short")?;
                let nlen = usize::from(f.u16("challenge too short")?);
                let name = f.take(nlen, "challenge name length exceeds the message")?;
                // Anything after the name is ignored, as the spec requires.
                if name != self.expected_peer.as_bytes() {
                    let shown = &name[..name.len().min(MAX_NODE_NAME)];
                    return Err(HandshakeError::PeerNameMismatch {
                        expected: self.expected_peer.clone(),
                        got: String::from_utf8_lossy(shown).into_owned(),
                    });
                }
                check_flags(flags, step)?;
                let mut p = Vec::with_capacity(21);
                p.push(b'r');
                p.extend_from_slice(&self.my_challenge.to_be_bytes());
                p.extend_from_slice(&digest(challenge, &self.cookie));
                self.state = IState::AwaitAck;
                self.peer =
                    Some(NodeIdent { name: self.expected_peer.clone(), flags: effective_flags(flags), creation });
                Ok(InitiatorStep::Send(frame(&p)))
            }
            (IState::AwaitAck, b'a') => {
                let mut f = Fields { rest: body, step };
                let theirs = f.digest("challenge ack too short")?;
                f.end("challenge ack too long")?;
                if !digest_eq(&theirs, &digest(self.my_challenge, &self.cookie)) {
                    return Err(HandshakeError::BadDigest { step });
                }
                self.state = IState::Finished;
                self.peer.take().map(InitiatorStep::Done).ok_or(HandshakeError::Misuse { what: "no peer recorded" })
            }
            _ => Err(HandshakeError::UnexpectedMessage { step, tag }),
        }
    }
}

/// What the caller does after the acceptor consumed a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcceptorStep {
    /// The initiator introduced itself (for an old 'n' name the creation is 0 until the
    /// complement; [`AcceptorStep::Done`] has the final identity). Decide and call
    /// [`Acceptor::status`]: `Ok` / `OkSimultaneous` go on, `Nok` / `NotAllowed` refuse (close
    /// after sending), `Alive` asks the initiator whether our old connection to it is dead.
    Name(NodeIdent),
    /// The initiator's answer to `Alive`. `true`: close the old connection, then send
    /// [`Acceptor::challenge`] and keep reading. `false`: close (the machine is finished).
    AliveAnswer(bool),
    /// Nothing to send; keep reading (after the complement of an old 'n' name).
    Continue,
    /// The handshake succeeded: send `send` (the framed challenge ack); the connection then uses
    /// 4-byte frames.
    Done {
        /// The initiator (flags with the 25 digest expanded).
        peer: NodeIdent,
        /// The framed challenge ack to send.
        send: Vec<u8>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AState {
    AwaitName,
    NameReceived,
    AwaitAliveAnswer,
    AliveConfirmed,
    AwaitComplement,
    AwaitReply,
    Finished,
}

/// The accepting side (node B) of the handshake.
///
/// Use: [`Acceptor::new`], feed every received frame payload to [`Acceptor::on_frame`]; on
/// [`AcceptorStep::Name`] send [`Acceptor::status`]'s bytes; on [`AcceptorStep::AliveAnswer`]
/// `(true)` send [`Acceptor::challenge`]'s bytes; on [`AcceptorStep::Done`] send its bytes.
/// Its `Debug` output leaves the cookie out.
pub struct Acceptor {
    ours: NodeIdent,
    cookie: String,
    my_challenge: u32,
    state: AState,
    /// The initiator, known once its name arrived.
    peer: Option<NodeIdent>,
    /// The initiator sent the old 'n' name, so a complement follows our challenge.
    old_name: bool,
}

impl fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Acceptor")
            .field("ours", &self.ours)
            .field("peer", &self.peer)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Acceptor {
    /// An acceptor for node `ours` with `cookie`; `my_challenge` should come from
    /// [`gen_challenge`]. Fails if `ours.name` is invalid or `ours.flags` lacks
    /// `DFLAG_HANDSHAKE_23` or sets `DFLAG_NAME_ME`.
    pub fn new(ours: NodeIdent, cookie: String, my_challenge: u32) -> Result<Self, HandshakeError> {
        check_ours(&ours)?;
        Ok(Acceptor { ours, cookie, my_challenge, state: AState::AwaitName, peer: None, old_name: false })
    }

    /// The framed status to send after [`AcceptorStep::Name`]; for `Ok` and `OkSimultaneous`
    /// the framed challenge follows in the same buffer. After `Nok` / `NotAllowed` the machine
    /// is finished (send, then close).
    pub fn status(&mut self, s: Status) -> Result<Vec<u8>, HandshakeError> {
        if self.state != AState::NameReceived {
            self.state = AState::Finished;
            return Err(HandshakeError::Misuse { what: "status is only sent right after the name" });
        }
        let mut out = status_frame(s.as_str());
        match s {
            Status::Ok | Status::OkSimultaneous => out.extend_from_slice(&self.challenge_frame()),
            Status::Alive => self.state = AState::AwaitAliveAnswer,
            Status::Nok | Status::NotAllowed => self.state = AState::Finished,
        }
        Ok(out)
    }

    /// The framed challenge to send after [`AcceptorStep::AliveAnswer`]`(true)`, once the old
    /// connection is gone.
    pub fn challenge(&mut self) -> Result<Vec<u8>, HandshakeError> {
        if self.state != AState::AliveConfirmed {
            self.state = AState::Finished;
            return Err(HandshakeError::Misuse { what: "challenge is only sent after an alive answer `true`" });
        }
        Ok(self.challenge_frame())
    }

    /// Builds the challenge and moves to waiting for the complement or the reply.
    fn challenge_frame(&mut self) -> Vec<u8> {
        self.state = if self.old_name { AState::AwaitComplement } else { AState::AwaitReply };
        let name = self.ours.name.as_bytes();
        let mut p = Vec::with_capacity(19 + name.len());
        p.push(b'N');
        p.extend_from_slice(&self.ours.flags.to_be_bytes());
        p.extend_from_slice(&self.my_challenge.to_be_bytes());
        p.extend_from_slice(&self.ours.creation.to_be_bytes());
        p.extend_from_slice(&(name.len() as u16).to_be_bytes());
        p.extend_from_slice(name);
        frame(&p)
    }

    /// Consumes one received frame payload.
    pub fn on_frame(&mut self, payload: &[u8]) -> Result<AcceptorStep, HandshakeError> {
        let r = self.step(payload);
        if r.is_err() {
            self.state = AState::Finished;
        }
        r
    }

    fn step(&mut self, payload: &[u8]) -> Result<AcceptorStep, HandshakeError> {
        let step = match self.state {
            AState::AwaitName => Step::Name,
            AState::NameReceived => Step::Status,
            AState::AwaitAliveAnswer | AState::AliveConfirmed => Step::AliveAnswer,
            AState::AwaitComplement => Step::Complement,
            AState::AwaitReply => Step::ChallengeReply,
            AState::Finished => Step::Finished,
        };
        let (tag, body) = tag_of(payload, step)?;
        let mut f = Fields { rest: body, step };
        match (self.state, tag) {
            (AState::AwaitName, b'N') => {
                let flags = f.u64("name message too short")?;
                let creation = f.u32("name message too short")?;
                let nlen = usize::from(f.u16("name message too short")?);
                let name = f.take(nlen, "name length exceeds the message")?;
                // Anything after the name is ignored, as the spec requires.
                self.accept_name(name, flags, creation, false)
            }
            (AState::AwaitName, b'n') => {
                let version = f.u16("old name message too short")?;
                let flags = u64::from(f.u32("old name message too short")?);
                if version != 5 {
                    return Err(HandshakeError::Unsupported {
                        step,
                        what: "old name message with a version other than 5",
                    });
                }
                // The name is the rest of the message.
                self.accept_name(f.rest, flags, 0, true)
            }
            (AState::AwaitAliveAnswer, b's') => match body {
                b"true" => {
                    self.state = AState::AliveConfirmed;
                    Ok(AcceptorStep::AliveAnswer(true))
                }
                b"false" => {
                    self.state = AState::Finished;
                    Ok(AcceptorStep::AliveAnswer(false))
                }
                _ => Err(HandshakeError::Malformed { step, what: "alive answer is neither `true` nor `false`" }),
            },
            (AState::AwaitComplement, b'c') => {
                let high = f.u32("complement too short")?;
                let creation = f.u32("complement too short")?;
                f.end("complement too long")?;
                let high = u64::from(high) << 32;
                if high & DFLAG_NAME_ME != 0 {
                    return Err(HandshakeError::Unsupported { step, what: "dynamic node name (DFLAG_NAME_ME)" });
                }
                let peer = self.peer.as_mut().ok_or(HandshakeError::Misuse { what: "no peer recorded" })?;
                peer.flags = effective_flags(peer.flags | high);
                peer.creation = creation;
                self.state = AState::AwaitReply;
                Ok(AcceptorStep::Continue)
            }
            (AState::AwaitReply, b'r') => {
                let their_challenge = f.u32("challenge reply too short")?;
                let theirs = f.digest("challenge reply too short")?;
                f.end("challenge reply too long")?;
                if !digest_eq(&theirs, &digest(self.my_challenge, &self.cookie)) {
                    return Err(HandshakeError::BadDigest { step });
                }
                let mut p = Vec::with_capacity(17);
                p.push(b'a');
                p.extend_from_slice(&digest(their_challenge, &self.cookie));
                self.state = AState::Finished;
                let peer = self.peer.take().ok_or(HandshakeError::Misuse { what: "no peer recorded" })?;
                Ok(AcceptorStep::Done { peer, send: frame(&p) })
            }
            _ => Err(HandshakeError::UnexpectedMessage { step, tag }),
        }
    }

    fn accept_name(
        &mut self,
        name: &[u8],
        flags: u64,
        creation: u32,
        old: bool,
    ) -> Result<AcceptorStep, HandshakeError> {
        if flags & DFLAG_NAME_ME != 0 {
            return Err(HandshakeError::Unsupported { step: Step::Name, what: "dynamic node name (DFLAG_NAME_ME)" });
        }
        let name = peer_name(name)?;
        check_flags(flags, Step::Name)?;
        let peer = NodeIdent { name, flags: effective_flags(flags), creation };
        self.peer = Some(peer.clone());
        self.old_name = old;
        self.state = AState::NameReceived;
        Ok(AcceptorStep::Name(peer))
    }
}

/// Fuzz entry point for the acceptor: `data[0]` picks the caller's decisions (the status given
/// after a name; bit 7 patches a correct digest into any challenge reply so the fuzzer reaches
/// the end), the rest is split into frames with [`read_frame`] and fed to a fresh [`Acceptor`],
/// also after it failed. Asserts nothing but the absence of panics.
pub fn fuzz_acceptor(data: &[u8]) {
    const CHALLENGE: u32 = 0x0102_0304;
    let Some((&ctl, mut rest)) = data.split_first() else {
        return;
    };
    let ours = NodeIdent { name: "fuzz_b@localhost".into(), flags: OUR_FLAGS, creation: 7 };
    let Ok(mut acceptor) = Acceptor::new(ours, "cookie".into(), CHALLENGE) else {
        return;
    };
    let status =
        [Status::Ok, Status::OkSimultaneous, Status::Nok, Status::NotAllowed, Status::Alive][usize::from(ctl % 5)];
    while let Ok(mut payload) = read_frame(&mut rest) {
        if ctl & 0x80 != 0 && payload.len() == 21 && payload[0] == b'r' {
            payload[5..].copy_from_slice(&digest(CHALLENGE, "cookie"));
        }
        match acceptor.on_frame(&payload) {
            Ok(AcceptorStep::Name(_)) => {
                let _ = acceptor.status(status);
            }
            Ok(AcceptorStep::AliveAnswer(true)) => {
                let _ = acceptor.challenge();
            }
            Ok(_) | Err(_) => {}
        }
    }
    let _ = acceptor.status(Status::Ok);
    let _ = acceptor.challenge();
}

/// Fuzz entry point for the initiator: `data[0]` picks the caller's decisions (bit 0: the
/// answer to `alive`; bit 7 patches a correct digest into any challenge ack), the rest is split
/// into frames with [`read_frame`] and fed to a fresh, started [`Initiator`] that expects the
/// peer `fuzz_b@localhost`, also after it failed. Asserts nothing but the absence of panics.
pub fn fuzz_initiator(data: &[u8]) {
    const CHALLENGE: u32 = 0x0506_0708;
    let Some((&ctl, mut rest)) = data.split_first() else {
        return;
    };
    let ours = NodeIdent { name: "fuzz_a@localhost".into(), flags: OUR_FLAGS, creation: 9 };
    let Ok(mut initiator) = Initiator::new(ours, "cookie".into(), "fuzz_b@localhost".into(), CHALLENGE) else {
        return;
    };
    let _ = initiator.start();
    while let Ok(mut payload) = read_frame(&mut rest) {
        if ctl & 0x80 != 0 && payload.len() == 17 && payload[0] == b'a' {
            payload[1..].copy_from_slice(&digest(CHALLENGE, "cookie"));
        }
        if let Ok(InitiatorStep::Status(Status::Alive)) = initiator.on_frame(&payload) {
            let _ = initiator.answer_alive(ctl & 1 != 0);
        }
    }
    let _ = initiator.answer_alive(true);
    let _ = initiator.start();
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a_node@127.0.0.1";
    const B: &str = "b-node@host.example";

    fn ident(name: &str, creation: u32) -> NodeIdent {
        NodeIdent { name: name.into(), flags: OUR_FLAGS, creation }
    }

    fn initiator(cookie: &str) -> Initiator {
        Initiator::new(ident(A, 11), cookie.into(), B.into(), 1111).unwrap()
    }

    fn acceptor(cookie: &str) -> Acceptor {
        Acceptor::new(ident(B, 22), cookie.into(), 2222).unwrap()
    }

    /// Splits a byte stream into frame payloads.
    fn frames(mut bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut v = Vec::new();
        while !bytes.is_empty() {
            v.push(read_frame(&mut bytes).unwrap());
        }
        v
    }

    /// One frame payload from bytes holding exactly one frame.
    fn one(bytes: &[u8]) -> Vec<u8> {
        let f = frames(bytes);
        assert_eq!(f.len(), 1, "expected exactly one frame");
        f.into_iter().next().unwrap()
    }

    #[test]
    fn digest_matches_erlang() {
        // erl -noshell -eval 'io:format("~w~n",[binary_to_list(erlang:md5("cookie" ++ "123"))]), halt().'
        assert_eq!(digest(123, "cookie"), [83, 141, 134, 20, 52, 10, 118, 157, 167, 239, 52, 168, 210, 224, 147, 138]);
        // erl -noshell -eval 'io:format("~w~n",[binary_to_list(erlang:md5("SECRET" ++ integer_to_list(4294967295)))]), halt().'
        assert_eq!(
            digest(u32::MAX, "SECRET"),
            [243, 53, 255, 179, 180, 59, 32, 90, 182, 118, 69, 217, 203, 213, 87, 39]
        );
    }

    #[test]
    fn flag_constants() {
        // ?MANDATORY_DFLAGS_25 from OTP 25's kernel/include/dist.hrl, printed by erl.
        assert_eq!(REQUIRED_FLAGS, 17_239_956);
        assert_eq!(OUR_FLAGS & REQUIRED_FLAGS, REQUIRED_FLAGS);
        for forbidden in [DFLAG_DIST_HDR_ATOM_CACHE, DFLAG_FRAGMENTS, DFLAG_SPAWN, DFLAG_NAME_ME] {
            assert_eq!(OUR_FLAGS & forbidden, 0, "{}", flag_names(forbidden));
        }
        assert_eq!(OUR_FLAGS & (DFLAG_SEND_SENDER | DFLAG_EXIT_PAYLOAD), 0);
        assert_eq!(missing_required(DFLAG_MANDATORY_25_DIGEST), 0);
        assert_eq!(missing_required(REQUIRED_FLAGS & !DFLAG_MAP_TAG), DFLAG_MAP_TAG);
        assert_eq!(flag_names(DFLAG_MAP_TAG | DFLAG_ALIAS | (1 << 60)), "MAP_TAG|ALIAS|0x1000000000000000");
        assert_eq!(flag_names(0), "(none)");
        let mut all = 0u64;
        for &(bit, _) in FLAG_NAMES {
            assert_eq!(bit.count_ones(), 1);
            assert_eq!(all & bit, 0, "duplicate flag");
            all |= bit;
        }
        assert_eq!(FLAG_NAMES.len(), 29);
    }

    #[test]
    fn framing() {
        assert_eq!(frame(b"abc"), [0, 3, b'a', b'b', b'c']);
        assert_eq!(read_frame(&mut &[0u8, 3, 1, 2, 3, 9][..]).unwrap(), [1, 2, 3]);
        assert_eq!(read_frame(&mut &[0u8, 0][..]).unwrap(), Vec::<u8>::new());
        let too_big = ((MAX_FRAME + 1) as u16).to_be_bytes();
        assert!(
            matches!(read_frame(&mut &too_big[..]), Err(HandshakeError::FrameTooLarge { len }) if len == MAX_FRAME + 1)
        );
        assert!(matches!(read_frame(&mut &[0xffu8, 0xff][..]), Err(HandshakeError::FrameTooLarge { .. })));
        assert!(matches!(read_frame(&mut &[0u8, 3, 1][..]), Err(HandshakeError::Io(_))));
        assert!(matches!(read_frame(&mut &[0u8][..]), Err(HandshakeError::Io(_))));
        let max = vec![7u8; MAX_FRAME];
        assert_eq!(read_frame(&mut &frame(&max)[..]).unwrap(), max);
    }

    #[test]
    fn node_names() {
        for good in [A, B, "x@y", "a_b-C9@host", "n@::1", "n@10.0.0.1", "n@my_host"] {
            validate_node_name(good).unwrap_or_else(|e| panic!("{good}: {e}"));
        }
        let long_ok = format!("a@{}", "h".repeat(253));
        assert!(validate_node_name(&long_ok).is_ok());
        let too_long = format!("a@{}", "h".repeat(254));
        for bad in [
            "", "nohost", "@host", "alive@", "a b@host", "a@b@c", "é@host", "a@ho st", "a@.host", "a@-host",
            "a.b@host", &too_long,
        ] {
            assert!(matches!(validate_node_name(bad), Err(HandshakeError::BadName { .. })), "{bad:?} accepted");
        }
    }

    #[test]
    fn message_layouts() {
        let mut i = initiator("c");
        let name = one(&i.start());
        let mut expect = vec![b'N'];
        expect.extend_from_slice(&OUR_FLAGS.to_be_bytes());
        expect.extend_from_slice(&11u32.to_be_bytes());
        expect.extend_from_slice(&(A.len() as u16).to_be_bytes());
        expect.extend_from_slice(A.as_bytes());
        assert_eq!(name, expect);

        let mut b = acceptor("c");
        assert_eq!(b.on_frame(&name).unwrap(), AcceptorStep::Name(ident(A, 11)));
        let out = frames(&b.status(Status::Ok).unwrap());
        assert_eq!(out[0], b"sok");
        let mut expect = vec![b'N'];
        expect.extend_from_slice(&OUR_FLAGS.to_be_bytes());
        expect.extend_from_slice(&2222u32.to_be_bytes());
        expect.extend_from_slice(&22u32.to_be_bytes());
        expect.extend_from_slice(&(B.len() as u16).to_be_bytes());
        expect.extend_from_slice(B.as_bytes());
        assert_eq!(out[1], expect);

        assert_eq!(i.on_frame(&out[0]).unwrap(), InitiatorStep::Status(Status::Ok));
        let InitiatorStep::Send(reply) = i.on_frame(&out[1]).unwrap() else { panic!("no reply") };
        let reply = one(&reply);
        let mut expect = vec![b'r'];
        expect.extend_from_slice(&1111u32.to_be_bytes());
        expect.extend_from_slice(&digest(2222, "c"));
        assert_eq!(reply, expect);

        let AcceptorStep::Done { peer, send } = b.on_frame(&reply).unwrap() else { panic!("not done") };
        assert_eq!(peer, ident(A, 11));
        let ack = one(&send);
        let mut expect = vec![b'a'];
        expect.extend_from_slice(&digest(1111, "c"));
        assert_eq!(ack, expect);
        assert_eq!(i.on_frame(&ack).unwrap(), InitiatorStep::Done(ident(B, 22)));

        for s in [Status::Ok, Status::OkSimultaneous, Status::Nok, Status::NotAllowed, Status::Alive] {
            assert_eq!(Status::parse(s.as_str().as_bytes()), Some(s));
        }
    }

    /// Runs a handshake between `i` and `b` in memory; `status` is B's verdict and `alive` the
    /// answer A gives to `alive`. Returns both outcomes of the last message each consumed.
    fn run(
        mut i: Initiator,
        mut b: Acceptor,
        status: Status,
        alive: bool,
    ) -> (Result<InitiatorStep, HandshakeError>, Result<AcceptorStep, HandshakeError>) {
        let mut to_b = frames(&i.start());
        let mut to_a: Vec<Vec<u8>> = Vec::new();
        let mut last_a = Err(HandshakeError::Misuse { what: "A consumed nothing" });
        let mut last_b = Err(HandshakeError::Misuse { what: "B consumed nothing" });
        for _ in 0..10 {
            for p in std::mem::take(&mut to_b) {
                last_b = b.on_frame(&p);
                match &last_b {
                    Ok(AcceptorStep::Name(_)) => to_a.extend(frames(&b.status(status).unwrap())),
                    Ok(AcceptorStep::AliveAnswer(true)) => to_a.extend(frames(&b.challenge().unwrap())),
                    Ok(AcceptorStep::Done { send, .. }) => to_a.extend(frames(send)),
                    _ => {}
                }
            }
            for p in std::mem::take(&mut to_a) {
                last_a = i.on_frame(&p);
                match &last_a {
                    Ok(InitiatorStep::Status(Status::Alive)) => to_b.extend(frames(&i.answer_alive(alive).unwrap())),
                    Ok(InitiatorStep::Send(bytes)) => to_b.extend(frames(bytes)),
                    _ => {}
                }
            }
            if to_a.is_empty() && to_b.is_empty() {
                break;
            }
        }
        (last_a, last_b)
    }

    #[test]
    fn full_handshake_ok_and_simultaneous() {
        for status in [Status::Ok, Status::OkSimultaneous] {
            let (a, b) = run(initiator("secret"), acceptor("secret"), status, true);
            assert_eq!(a.unwrap(), InitiatorStep::Done(ident(B, 22)));
            assert!(matches!(b.unwrap(), AcceptorStep::Done { peer, .. } if peer == ident(A, 11)));
        }
    }

    #[test]
    fn wrong_cookie_is_bad_digest_on_b() {
        let (a, b) = run(initiator("one"), acceptor("two"), Status::Ok, true);
        assert!(matches!(b, Err(HandshakeError::BadDigest { step: Step::ChallengeReply })));
        // A sent its reply and got nothing back.
        assert!(matches!(a, Ok(InitiatorStep::Send(_))));
    }

    #[test]
    fn bad_ack_digest_is_refused_by_a() {
        let mut i = initiator("c");
        let mut b = acceptor("c");
        let name = one(&i.start());
        b.on_frame(&name).unwrap();
        let out = frames(&b.status(Status::Ok).unwrap());
        i.on_frame(&out[0]).unwrap();
        i.on_frame(&out[1]).unwrap();
        let mut ack = vec![b'a'];
        ack.extend_from_slice(&digest(1111, "other"));
        assert!(matches!(i.on_frame(&ack), Err(HandshakeError::BadDigest { step: Step::ChallengeAck })));
        assert!(i.on_frame(&ack).is_err(), "dead after an error");
    }

    #[test]
    fn alive_true_and_false() {
        let (a, b) = run(initiator("c"), acceptor("c"), Status::Alive, true);
        assert!(matches!(a, Ok(InitiatorStep::Done(_))));
        assert!(matches!(b, Ok(AcceptorStep::Done { .. })));

        let (a, b) = run(initiator("c"), acceptor("c"), Status::Alive, false);
        assert!(matches!(a, Ok(InitiatorStep::Status(Status::Alive))));
        assert!(matches!(b, Ok(AcceptorStep::AliveAnswer(false))));
    }

    #[test]
    fn nok_and_not_allowed_end_the_handshake() {
        for s in [Status::Nok, Status::NotAllowed] {
            let mut i = initiator("c");
            let mut b = acceptor("c");
            b.on_frame(&one(&i.start())).unwrap();
            let out = frames(&b.status(s).unwrap());
            assert_eq!(out.len(), 1, "no challenge after {s:?}");
            assert_eq!(i.on_frame(&out[0]).unwrap(), InitiatorStep::Status(s));
            // Both machines are finished.
            assert!(matches!(i.on_frame(b"sok"), Err(HandshakeError::UnexpectedMessage { step: Step::Finished, .. })));
            assert!(b.on_frame(b"r").is_err());
            assert!(matches!(b.status(Status::Ok), Err(HandshakeError::Misuse { .. })));
        }
    }

    #[test]
    fn out_of_order_messages_fail() {
        let name = one(&initiator("c").start());
        let mut reply = vec![b'r'];
        reply.extend_from_slice(&1111u32.to_be_bytes());
        reply.extend_from_slice(&digest(2222, "c"));
        let msgs: Vec<Vec<u8>> = vec![
            name.clone(),
            b"sok".to_vec(),
            b"strue".to_vec(),
            vec![b'c', 0, 0, 0, 0, 0, 0, 0, 1],
            reply.clone(),
            {
                let mut a = vec![b'a'];
                a.extend_from_slice(&digest(1111, "c"));
                a
            },
            b"x".to_vec(),
        ];
        // Acceptor states, each reached by a prefix; every message but the expected one fails.
        type Setup = fn(&mut Acceptor, &[u8]);
        let setups: Vec<(&str, Setup, Option<u8>)> = vec![
            ("await name", |_, _| {}, Some(b'N')),
            (
                "name received",
                |b, n| {
                    b.on_frame(n).unwrap();
                },
                None,
            ),
            (
                "await alive answer",
                |b, n| {
                    b.on_frame(n).unwrap();
                    b.status(Status::Alive).unwrap();
                },
                Some(b's'),
            ),
            (
                "await reply",
                |b, n| {
                    b.on_frame(n).unwrap();
                    b.status(Status::Ok).unwrap();
                },
                Some(b'r'),
            ),
        ];
        for (label, setup, expected) in setups {
            for m in &msgs {
                if Some(m[0]) == expected {
                    continue;
                }
                let mut b = acceptor("c");
                setup(&mut b, &name);
                let r = b.on_frame(m);
                assert!(r.is_err(), "acceptor in {label} accepted {:?}", m[0] as char);
                assert!(b.on_frame(&reply).is_err(), "acceptor in {label} alive after an error");
            }
        }
        // Initiator states.
        let mut b = acceptor("c");
        b.on_frame(&name).unwrap();
        let out = frames(&b.status(Status::Ok).unwrap());
        let challenge = out[1].clone();
        type ISetup = fn(&mut Initiator, &[u8]);
        let isetups: Vec<(&str, ISetup, u8)> = vec![
            (
                "await status",
                |i, _| {
                    i.start();
                },
                b's',
            ),
            (
                "await challenge",
                |i, _| {
                    i.start();
                    i.on_frame(b"sok").unwrap();
                },
                b'N',
            ),
            (
                "await ack",
                |i, ch| {
                    i.start();
                    i.on_frame(b"sok").unwrap();
                    i.on_frame(ch).unwrap();
                },
                b'a',
            ),
        ];
        let mut all = msgs.clone();
        all.push(challenge.clone());
        for (label, setup, expected) in isetups {
            for m in &all {
                if m[0] == expected {
                    continue;
                }
                let mut i = initiator("c");
                setup(&mut i, &challenge);
                assert!(i.on_frame(m).is_err(), "initiator in {label} accepted {:?}", m[0] as char);
                assert!(i.on_frame(b"sok").is_err(), "initiator in {label} alive after an error");
            }
        }
        // Initiator awaiting its own alive decision must not consume frames.
        let mut i = initiator("c");
        i.start();
        i.on_frame(b"salive").unwrap();
        assert!(matches!(
            i.on_frame(&challenge),
            Err(HandshakeError::UnexpectedMessage { step: Step::AliveAnswer, .. })
        ));
        // Empty payloads.
        assert!(matches!(acceptor("c").on_frame(&[]), Err(HandshakeError::Malformed { .. })));
    }

    #[test]
    fn misuse_is_an_error_not_a_panic() {
        let mut i = initiator("c");
        assert!(matches!(i.on_frame(b"sok"), Err(HandshakeError::Misuse { .. })));
        let mut i = initiator("c");
        assert!(!i.start().is_empty());
        assert!(i.start().is_empty(), "second start sends nothing");
        assert!(i.on_frame(b"sok").is_err(), "and kills the machine");
        let mut i = initiator("c");
        i.start();
        assert!(matches!(i.answer_alive(true), Err(HandshakeError::Misuse { .. })));
        let mut b = acceptor("c");
        assert!(matches!(b.status(Status::Ok), Err(HandshakeError::Misuse { .. })));
        let mut b = acceptor("c");
        assert!(matches!(b.challenge(), Err(HandshakeError::Misuse { .. })));
        let bad = NodeIdent { name: "nohost".into(), flags: OUR_FLAGS, creation: 1 };
        assert!(Acceptor::new(bad.clone(), "c".into(), 1).is_err());
        assert!(Initiator::new(bad, "c".into(), B.into(), 1).is_err());
        assert!(Initiator::new(ident(A, 1), "c".into(), "bad peer".into(), 1).is_err());
        let name_me = NodeIdent { name: A.into(), flags: OUR_FLAGS | DFLAG_NAME_ME, creation: 1 };
        assert!(Initiator::new(name_me, "c".into(), B.into(), 1).is_err());
        let no23 = NodeIdent { name: A.into(), flags: OUR_FLAGS & !DFLAG_HANDSHAKE_23, creation: 1 };
        assert!(Acceptor::new(no23, "c".into(), 1).is_err());
    }

    fn name_msg(flags: u64, creation: u32, name: &str, trailing: &[u8]) -> Vec<u8> {
        let mut p = vec![b'N'];
        p.extend_from_slice(&flags.to_be_bytes());
        p.extend_from_slice(&creation.to_be_bytes());
        p.extend_from_slice(&(name.len() as u16).to_be_bytes());
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(trailing);
        p
    }

    fn challenge_msg(flags: u64, challenge: u32, creation: u32, name: &str, trailing: &[u8]) -> Vec<u8> {
        let mut p = vec![b'N'];
        p.extend_from_slice(&flags.to_be_bytes());
        p.extend_from_slice(&challenge.to_be_bytes());
        p.extend_from_slice(&creation.to_be_bytes());
        p.extend_from_slice(&(name.len() as u16).to_be_bytes());
        p.extend_from_slice(name.as_bytes());
        p.extend_from_slice(trailing);
        p
    }

    #[test]
    fn acceptor_name_checks() {
        // Trailing bytes after the name are ignored.
        let mut b = acceptor("c");
        assert_eq!(b.on_frame(&name_msg(OUR_FLAGS, 5, A, b"extra")).unwrap(), AcceptorStep::Name(ident(A, 5)));
        // Only the 25 digest: all required flags implied, and reported.
        let mut b = acceptor("c");
        let AcceptorStep::Name(p) = b.on_frame(&name_msg(DFLAG_MANDATORY_25_DIGEST, 5, A, b"")).unwrap() else {
            panic!()
        };
        assert_eq!(p.flags & REQUIRED_FLAGS, REQUIRED_FLAGS);
        // Missing flags are named.
        let err = acceptor("c").on_frame(&name_msg(REQUIRED_FLAGS & !DFLAG_BIG_CREATION, 5, A, b"")).unwrap_err();
        assert!(matches!(err, HandshakeError::MissingFlags { missing: DFLAG_BIG_CREATION, step: Step::Name }));
        assert!(err.to_string().contains("BIG_CREATION"), "{err}");
        // NAME_ME is refused.
        let err = acceptor("c").on_frame(&name_msg(OUR_FLAGS | DFLAG_NAME_ME, 5, "host", b"")).unwrap_err();
        assert!(matches!(err, HandshakeError::Unsupported { .. }));
        // Bad names, lengths.
        assert!(matches!(
            acceptor("c").on_frame(&name_msg(OUR_FLAGS, 5, "no_at", b"")),
            Err(HandshakeError::BadName { .. })
        ));
        let mut long = name_msg(OUR_FLAGS, 5, A, b"");
        long[13] = 0xff;
        assert!(matches!(acceptor("c").on_frame(&long), Err(HandshakeError::Malformed { .. })));
        let full = name_msg(OUR_FLAGS, 5, A, b"");
        for cut in 1..full.len() {
            assert!(acceptor("c").on_frame(&full[..cut]).is_err(), "cut at {cut}");
        }
        let mut bad_utf8 = name_msg(OUR_FLAGS, 5, A, b"");
        bad_utf8[15] = 0xc3;
        assert!(matches!(acceptor("c").on_frame(&bad_utf8), Err(HandshakeError::BadName { .. })));
    }

    #[test]
    fn initiator_challenge_checks() {
        let started = || {
            let mut i = initiator("c");
            i.start();
            i.on_frame(b"sok").unwrap();
            i
        };
        // Trailing bytes after the name are ignored.
        let mut i = started();
        assert!(matches!(i.on_frame(&challenge_msg(OUR_FLAGS, 1, 2, B, b"more")), Ok(InitiatorStep::Send(_))));
        // Another node answered.
        let err = started().on_frame(&challenge_msg(OUR_FLAGS, 1, 2, "evil@host", b"")).unwrap_err();
        assert!(matches!(err, HandshakeError::PeerNameMismatch { .. }));
        assert!(err.to_string().contains("evil@host"));
        // Missing flags.
        let err = started().on_frame(&challenge_msg(DFLAG_PUBLISHED, 1, 2, B, b"")).unwrap_err();
        let HandshakeError::MissingFlags { missing, step: Step::Challenge } = err else { panic!("{err}") };
        assert_eq!(missing, REQUIRED_FLAGS);
        // Only the digest is enough.
        let mut i = started();
        assert!(i.on_frame(&challenge_msg(DFLAG_MANDATORY_25_DIGEST, 1, 2, B, b"")).is_ok());
        // Truncations.
        let full = challenge_msg(OUR_FLAGS, 1, 2, B, b"");
        for cut in 1..full.len() {
            assert!(started().on_frame(&full[..cut]).is_err(), "cut at {cut}");
        }
        // Status oddities.
        let mut i = initiator("c");
        i.start();
        assert!(matches!(i.on_frame(b"snamed:\0\x01x"), Err(HandshakeError::NamedUnsupported)));
        let mut i = initiator("c");
        i.start();
        let err = i.on_frame(b"sweird").unwrap_err();
        assert!(matches!(&err, HandshakeError::BadStatus { status } if status == "weird"));
        // Ack with a wrong length.
        let mut i = started();
        i.on_frame(&challenge_msg(OUR_FLAGS, 1, 2, B, b"")).unwrap();
        let mut ack = vec![b'a'];
        ack.extend_from_slice(&digest(1111, "c"));
        ack.push(0);
        assert!(matches!(i.on_frame(&ack), Err(HandshakeError::Malformed { .. })));
    }

    #[test]
    fn old_name_with_complement() {
        let mut b = acceptor("c");
        let mut old = vec![b'n', 0, 5];
        old.extend_from_slice(&((OUR_FLAGS & 0xffff_ffff) as u32).to_be_bytes());
        old.extend_from_slice(A.as_bytes());
        let AcceptorStep::Name(p) = b.on_frame(&old).unwrap() else { panic!() };
        assert_eq!((p.name.as_str(), p.creation), (A, 0));
        let out = frames(&b.status(Status::Ok).unwrap());
        assert_eq!(out[0], b"sok");
        assert_eq!(out[1][0], b'N', "we always send the new challenge");
        // The reply before the complement is out of order.
        let mut reply = vec![b'r'];
        reply.extend_from_slice(&1111u32.to_be_bytes());
        reply.extend_from_slice(&digest(2222, "c"));
        {
            let mut b2 = acceptor("c");
            b2.on_frame(&old).unwrap();
            b2.status(Status::Ok).unwrap();
            assert!(matches!(
                b2.on_frame(&reply),
                Err(HandshakeError::UnexpectedMessage { step: Step::Complement, .. })
            ));
        }
        let mut c = vec![b'c'];
        c.extend_from_slice(&((OUR_FLAGS >> 32) as u32).to_be_bytes());
        c.extend_from_slice(&77u32.to_be_bytes());
        assert_eq!(b.on_frame(&c).unwrap(), AcceptorStep::Continue);
        let AcceptorStep::Done { peer, .. } = b.on_frame(&reply).unwrap() else { panic!() };
        assert_eq!(peer, ident(A, 77));

        // Version other than 5, missing HANDSHAKE_23, NAME_ME in the complement.
        let mut v6 = old.clone();
        v6[2] = 6;
        assert!(matches!(acceptor("c").on_frame(&v6), Err(HandshakeError::Unsupported { .. })));
        let mut no23 = vec![b'n', 0, 5];
        no23.extend_from_slice(
            &(((OUR_FLAGS & !DFLAG_HANDSHAKE_23 & !DFLAG_MANDATORY_25_DIGEST) & 0xffff_ffff) as u32).to_be_bytes(),
        );
        no23.extend_from_slice(A.as_bytes());
        assert!(matches!(
            acceptor("c").on_frame(&no23),
            Err(HandshakeError::MissingFlags { missing: DFLAG_HANDSHAKE_23, .. })
        ));
        let mut b = acceptor("c");
        b.on_frame(&old).unwrap();
        b.status(Status::Ok).unwrap();
        let mut c = vec![b'c'];
        c.extend_from_slice(&((DFLAG_NAME_ME >> 32) as u32).to_be_bytes());
        c.extend_from_slice(&1u32.to_be_bytes());
        assert!(matches!(b.on_frame(&c), Err(HandshakeError::Unsupported { step: Step::Complement, .. })));
    }

    #[test]
    fn error_display_names_the_step() {
        let e = HandshakeError::BadDigest { step: Step::ChallengeReply };
        assert!(e.to_string().contains("challenge reply"), "{e}");
        let e = HandshakeError::UnexpectedMessage { step: Step::Status, tag: b'N' };
        assert!(e.to_string().contains("status") && e.to_string().contains("'N'"), "{e}");
        let e = HandshakeError::FrameTooLarge { len: 5000 };
        assert!(e.to_string().contains("5000"));
    }

    #[test]
    fn debug_output_hides_the_cookie() {
        let i = initiator("very_secret_cookie");
        let b = acceptor("very_secret_cookie");
        assert!(!format!("{i:?}{b:?}").contains("very_secret_cookie"));
    }

    #[test]
    fn gen_challenge_varies() {
        let v: std::collections::HashSet<u32> = (0..64).map(|_| gen_challenge()).collect();
        assert!(v.len() > 60);
    }

    #[test]
    fn fuzz_entry_points_survive_samples() {
        // A deterministic sample: valid transcripts, their truncations, and pseudo-random bytes.
        let mut i = initiator("cookie");
        let name = i.start();
        let mut b = Acceptor::new(ident("fuzz_b@localhost", 7), "cookie".into(), 0x0102_0304).unwrap();
        let mut good = vec![0u8];
        good.extend_from_slice(&name);
        let mut reply = vec![b'r'];
        reply.extend_from_slice(&5u32.to_be_bytes());
        reply.extend_from_slice(&[0; 16]);
        good.extend_from_slice(&frame(&reply));
        let _ = b.on_frame(&one(&name));
        good[0] = 0x80;
        for cut in 0..good.len() {
            fuzz_acceptor(&good[..cut]);
        }
        let mut init = vec![0x81u8];
        init.extend_from_slice(&frame(b"salive"));
        init.extend_from_slice(&frame(&challenge_msg(OUR_FLAGS, 3, 4, "fuzz_b@localhost", b"")));
        init.extend_from_slice(&frame(&[b'a'; 17]));
        for cut in 0..init.len() {
            fuzz_initiator(&init[..cut]);
        }
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for len in 0..300 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 7) as u8 * 20
                })
                .collect();
            fuzz_acceptor(&data);
            fuzz_initiator(&data);
        }
    }
}
