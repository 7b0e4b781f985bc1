//! The EPMD (Erlang Port Mapper Daemon) protocol: request/response codecs, a blocking client
//! generic over any `Read + Write` stream, and an in-process server ([`EpmdServer`]).
//!
//! What this module owns:
//! - the byte layout of `ALIVE2_REQ`, `ALIVE2_X_RESP` (and the old 16-bit `ALIVE2_RESP`),
//!   `PORT_PLEASE2_REQ`, `PORT2_RESP`, `NAMES_REQ` and `NAMES_RESP`, as
//!   `erts/doc/guides/erl_dist_protocol.md` of Erlang/OTP describes them;
//! - the client calls [`register`], [`port_please`] and [`names`]: each writes one request on a
//!   stream the caller connected and reads the answer. The stream is the caller's (smarm passes
//!   its own `TcpStream`, which parks the calling actor), so this module never opens a socket;
//! - an EPMD registry ([`EpmdServer`]) that serves one connection per
//!   [`EpmdServer::serve_connection`] call, as `erts/epmd/src/epmd_srv.c` does.
//!
//! Invariants and limits:
//! - Every request is one 2-byte big-endian length followed by that many bytes; the server
//!   refuses lengths of 0 or above [`MAX_REQUEST`] (epmd's own input buffer) before reading the
//!   body, so one connection costs at most a few KiB.
//! - Node names (the part before `@`) are at most [`MAX_NAME_BYTES`] bytes of UTF-8 without NUL
//!   or `@` and at most 255 characters, the `Extra` field at most [`MAX_EXTRA`] bytes: epmd's
//!   limits (epmd itself does not reject `@`). Every length read from the peer is checked against
//!   these caps before anything is allocated from it (so at most ~1 KiB per field; a parsed
//!   request is a slice already read), and a `NAMES_RESP` is read to at most [`MAX_NAMES_RESP`].
//! - A registration lives exactly as long as the connection that made it: it is removed when that
//!   connection reaches end of stream, fails, or sends anything more (epmd's rule). A name is
//!   registered at most once at a time; a second `ALIVE2_REQ` for it is refused with result 1.
//! - The creation handed out for a registration is a random non-zero 32-bit number that differs
//!   from the previous creation of that name (the last creations of up to
//!   [`MAX_REMEMBERED_NAMES`] names are remembered).
//! - Nothing here panics on peer input; malformed input is an [`EpmdError`].
//!
//! Not implemented: `DUMP_REQ`, `KILL_REQ` and `STOP_REQ` (the server answers them with
//! [`EpmdError::Unsupported`] and closes, like a request it does not know). Unlike the C epmd the
//! server cannot see the peer's address (it is generic over the stream), so restricting
//! `ALIVE2_REQ` to local peers is the caller's job: bind the listener to loopback.

// The complete codec of its protocol: smarm uses part of it; the rest (e.g. NAMES, the
// flag names, the fuzz entry points) serves the tests, the fuzz targets and diagnostics.
#![allow(dead_code)]
// Items re-exported (doc-hidden) through `cluster::__wire` link to private ones in their docs.
#![allow(rustdoc::private_intra_doc_links)]

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::{self, Read, Write};
use std::sync::{Mutex, MutexGuard};

/// Request tag: register a node (`ALIVE2_REQ`).
pub const ALIVE2_REQ: u8 = 120;
/// Response tag: registration result with a 32-bit creation (`ALIVE2_X_RESP`).
pub const ALIVE2_X_RESP: u8 = 118;
/// Response tag: registration result with a 16-bit creation (`ALIVE2_RESP`, before OTP 23).
pub const ALIVE2_RESP: u8 = 121;
/// Request tag: look up a node's distribution port (`PORT_PLEASE2_REQ`).
pub const PORT_PLEASE2_REQ: u8 = 122;
/// Response tag: the answer to `PORT_PLEASE2_REQ` (`PORT2_RESP`).
pub const PORT2_RESP: u8 = 119;
/// Request tag: list the registered names (`NAMES_REQ`).
pub const NAMES_REQ: u8 = 110;

/// Node type of a normal (visible) Erlang node.
pub const NODE_TYPE_NORMAL: u8 = 77;
/// Node type of a hidden node (C node).
pub const NODE_TYPE_HIDDEN: u8 = 72;
/// Protocol number of TCP/IPv4, the only one defined.
pub const PROTOCOL_TCP: u8 = 0;
/// The distribution protocol version smarm speaks (highest = lowest = 6, as OTP 25 does).
pub const DIST_VERSION: u16 = 6;

/// Longest node name (alive part) in bytes: 255 characters of up to 4 UTF-8 bytes (epmd's
/// `MAXSYMLEN`).
pub const MAX_NAME_BYTES: usize = 255 * 4;
/// Longest node name (alive part) in characters.
pub const MAX_NAME_CHARS: usize = 255;
/// Longest `Extra` field in bytes (epmd's `MAXSYMLEN`).
pub const MAX_EXTRA: usize = 255 * 4;
/// Longest request body the server accepts: epmd's input buffer (`3 * MAXSYMLEN`) less the
/// 2-byte length header and one byte epmd keeps for a terminating NUL.
pub const MAX_REQUEST: usize = 3 * MAX_NAME_BYTES - 3;
/// Most bytes of a `NAMES_RESP` the client reads (one line is at most ~1 KiB).
pub const MAX_NAMES_RESP: usize = 1 << 20;
/// How many unregistered names the server remembers the last creation of (epmd's
/// `MAX_UNREG_COUNT`).
pub const MAX_REMEMBERED_NAMES: usize = 1000;

/// An EPMD client or server failure.
#[derive(Debug)]
#[non_exhaustive]
pub enum EpmdError {
    /// The stream failed, or ended before a complete message.
    Io(io::Error),
    /// The daemon answered with a non-zero result code (for `ALIVE2_REQ`: 1 = name in use or
    /// invalid).
    Refused(u8),
    /// A message did not follow the protocol; the text says what was wrong.
    Malformed(&'static str),
    /// A node name given to the client (or received by the server) is not acceptable to epmd.
    InvalidName(&'static str),
    /// The server does not implement this request (the tag is given).
    Unsupported(u8),
}

impl fmt::Display for EpmdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpmdError::Io(e) => write!(f, "epmd: i/o error: {e}"),
            EpmdError::Refused(r) => write!(f, "epmd refused the request (result {r})"),
            EpmdError::Malformed(what) => write!(f, "epmd: malformed message: {what}"),
            EpmdError::InvalidName(what) => write!(f, "epmd: invalid node name: {what}"),
            EpmdError::Unsupported(tag) => write!(f, "epmd: unsupported request (tag {tag})"),
        }
    }
}

impl std::error::Error for EpmdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            EpmdError::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for EpmdError {
    fn from(e: io::Error) -> Self {
        EpmdError::Io(e)
    }
}

/// Checks a node name (the alive part, without `@host`) against epmd's rules: non-empty, no
/// NUL, no `@`, at most [`MAX_NAME_BYTES`] bytes and [`MAX_NAME_CHARS`] characters.
pub fn validate_alive_name(name: &str) -> Result<(), EpmdError> {
    if name.is_empty() {
        return Err(EpmdError::InvalidName("empty"));
    }
    if name.len() > MAX_NAME_BYTES || name.chars().count() > MAX_NAME_CHARS {
        return Err(EpmdError::InvalidName("longer than 255 characters"));
    }
    if name.contains('\0') {
        return Err(EpmdError::InvalidName("contains NUL"));
    }
    if name.contains('@') {
        return Err(EpmdError::InvalidName("contains '@' (give the alive part only)"));
    }
    Ok(())
}

/// A length-prefixed request frame: 2-byte big-endian length, then `body`.
fn framed(body: &[u8]) -> Result<Vec<u8>, EpmdError> {
    if body.is_empty() || body.len() > MAX_REQUEST {
        return Err(EpmdError::Malformed("request too long"));
    }
    let mut out = Vec::with_capacity(2 + body.len());
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
    Ok(out)
}

/// A cursor over a received message that never reads past its end.
struct Bytes<'a> {
    rest: &'a [u8],
}

impl<'a> Bytes<'a> {
    fn u8(&mut self, what: &'static str) -> Result<u8, EpmdError> {
        let (&b, rest) = self.rest.split_first().ok_or(EpmdError::Malformed(what))?;
        self.rest = rest;
        Ok(b)
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, EpmdError> {
        let b = self.take(2, what)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], EpmdError> {
        if self.rest.len() < n {
            return Err(EpmdError::Malformed(what));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }
}

/// Reads a big-endian `u16` from a stream.
fn read_u16<R: Read + ?Sized>(r: &mut R) -> io::Result<u16> {
    let mut b = [0u8; 2];
    r.read_exact(&mut b)?;
    Ok(u16::from_be_bytes(b))
}

/// Reads exactly `len` bytes after checking `len` against `cap`.
fn read_capped<R: Read + ?Sized>(r: &mut R, len: usize, cap: usize, what: &'static str) -> Result<Vec<u8>, EpmdError> {
    if len > cap {
        return Err(EpmdError::Malformed(what));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}

/// Decodes a node name received from the peer: UTF-8 that passes [`validate_alive_name`].
fn decode_name(bytes: &[u8]) -> Result<String, EpmdError> {
    let s = std::str::from_utf8(bytes).map_err(|_| EpmdError::InvalidName("not UTF-8"))?;
    validate_alive_name(s)?;
    Ok(s.to_owned())
}

/// The fields of an `ALIVE2_REQ` (register a node).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alive2Req {
    /// The port the node accepts distribution connections on.
    pub port: u16,
    /// [`NODE_TYPE_NORMAL`] or [`NODE_TYPE_HIDDEN`].
    pub node_type: u8,
    /// [`PROTOCOL_TCP`].
    pub protocol: u8,
    /// Highest distribution version the node speaks.
    pub highest: u16,
    /// Lowest distribution version the node speaks.
    pub lowest: u16,
    /// The node name, alive part only.
    pub name: String,
    /// The `Extra` field (empty for Erlang nodes).
    pub extra: Vec<u8>,
}

impl Alive2Req {
    /// The request smarm sends: a normal node over TCP speaking version 6 only, no extra data.
    pub fn new(name: &str, port: u16) -> Result<Self, EpmdError> {
        validate_alive_name(name)?;
        Ok(Alive2Req {
            port,
            node_type: NODE_TYPE_NORMAL,
            protocol: PROTOCOL_TCP,
            highest: DIST_VERSION,
            lowest: DIST_VERSION,
            name: name.to_owned(),
            extra: Vec::new(),
        })
    }

    /// The request as sent on the wire, length header included.
    pub fn encode(&self) -> Result<Vec<u8>, EpmdError> {
        validate_alive_name(&self.name)?;
        if self.extra.len() > MAX_EXTRA {
            return Err(EpmdError::Malformed("ALIVE2_REQ extra field too long"));
        }
        let mut b = Vec::with_capacity(13 + self.name.len() + self.extra.len());
        b.push(ALIVE2_REQ);
        b.extend_from_slice(&self.port.to_be_bytes());
        b.push(self.node_type);
        b.push(self.protocol);
        b.extend_from_slice(&self.highest.to_be_bytes());
        b.extend_from_slice(&self.lowest.to_be_bytes());
        b.extend_from_slice(&(self.name.len() as u16).to_be_bytes());
        b.extend_from_slice(self.name.as_bytes());
        b.extend_from_slice(&(self.extra.len() as u16).to_be_bytes());
        b.extend_from_slice(&self.extra);
        framed(&b)
    }

    /// Parses a request body (tag included, length header excluded). Sizes that do not fit the
    /// body and NUL in the name are [`EpmdError::Malformed`]; a name epmd would refuse (not
    /// UTF-8, over 255 characters) is [`EpmdError::InvalidName`]. Bytes after `Extra` are
    /// ignored, as epmd does.
    pub fn parse(body: &[u8]) -> Result<Self, EpmdError> {
        let mut b = Bytes { rest: body };
        if b.u8("empty request")? != ALIVE2_REQ {
            return Err(EpmdError::Malformed("not an ALIVE2_REQ"));
        }
        let port = b.u16("ALIVE2_REQ too short")?;
        let node_type = b.u8("ALIVE2_REQ too short")?;
        let protocol = b.u8("ALIVE2_REQ too short")?;
        let highest = b.u16("ALIVE2_REQ too short")?;
        let lowest = b.u16("ALIVE2_REQ too short")?;
        let nlen = b.u16("ALIVE2_REQ too short")? as usize;
        let name = b.take(nlen, "ALIVE2_REQ name length exceeds the request")?;
        let elen = b.u16("ALIVE2_REQ extra length missing")? as usize;
        let extra = b.take(elen, "ALIVE2_REQ extra length exceeds the request")?;
        if name.contains(&0) {
            return Err(EpmdError::Malformed("ALIVE2_REQ name contains NUL"));
        }
        if extra.len() > MAX_EXTRA {
            return Err(EpmdError::Malformed("ALIVE2_REQ extra field too long"));
        }
        let name = decode_name(name)?;
        Ok(Alive2Req { port, node_type, protocol, highest, lowest, name, extra: extra.to_vec() })
    }
}

/// An `ALIVE2_X_RESP` or `ALIVE2_RESP` (the answer to a registration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alive2Resp {
    /// 0 = registered; anything else = refused.
    pub result: u8,
    /// The creation assigned to the node (meaningful only when `result` is 0).
    pub creation: u32,
    /// `true` for `ALIVE2_X_RESP` (32-bit creation), `false` for the old 16-bit `ALIVE2_RESP`.
    pub extended: bool,
}

impl Alive2Resp {
    /// The response as sent on the wire (responses have no length header). The old form carries
    /// only the low 16 bits of `creation`.
    pub fn encode(&self) -> Vec<u8> {
        if self.extended {
            let mut b = vec![ALIVE2_X_RESP, self.result];
            b.extend_from_slice(&self.creation.to_be_bytes());
            b
        } else {
            let mut b = vec![ALIVE2_RESP, self.result];
            b.extend_from_slice(&(self.creation as u16).to_be_bytes());
            b
        }
    }

    /// Reads a response from a stream. On a non-zero result it stops after the result byte
    /// (the creation field means nothing then) and returns `creation` 0.
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, EpmdError> {
        let mut head = [0u8; 2];
        r.read_exact(&mut head)?;
        let [tag, result] = head;
        let extended = match tag {
            ALIVE2_X_RESP => true,
            ALIVE2_RESP => false,
            _ => return Err(EpmdError::Malformed("expected ALIVE2_X_RESP or ALIVE2_RESP")),
        };
        if result != 0 {
            return Ok(Alive2Resp { result, creation: 0, extended });
        }
        let creation = if extended {
            let mut c = [0u8; 4];
            r.read_exact(&mut c)?;
            u32::from_be_bytes(c)
        } else {
            u32::from(read_u16(r)?)
        };
        Ok(Alive2Resp { result, creation, extended })
    }
}

/// A `PORT_PLEASE2_REQ` (look up a node by name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPlease2Req {
    /// The node name, alive part only.
    pub name: String,
}

impl PortPlease2Req {
    /// The request as sent on the wire, length header included.
    pub fn encode(&self) -> Result<Vec<u8>, EpmdError> {
        validate_alive_name(&self.name)?;
        let mut b = Vec::with_capacity(1 + self.name.len());
        b.push(PORT_PLEASE2_REQ);
        b.extend_from_slice(self.name.as_bytes());
        framed(&b)
    }

    /// Parses a request body (tag included). One trailing NUL is ignored, as epmd does; an empty
    /// name, NUL inside it, or a name that is not 1..=255 characters of UTF-8 is malformed.
    pub fn parse(body: &[u8]) -> Result<Self, EpmdError> {
        let (&tag, mut name) = body.split_first().ok_or(EpmdError::Malformed("empty request"))?;
        if tag != PORT_PLEASE2_REQ {
            return Err(EpmdError::Malformed("not a PORT_PLEASE2_REQ"));
        }
        if let Some((&0, rest)) = name.split_last() {
            name = rest;
        }
        if name.is_empty() {
            return Err(EpmdError::Malformed("PORT_PLEASE2_REQ without a name"));
        }
        if name.contains(&0) {
            return Err(EpmdError::Malformed("PORT_PLEASE2_REQ name contains NUL"));
        }
        let name = decode_name(name).map_err(|_| EpmdError::Malformed("PORT_PLEASE2_REQ name is invalid"))?;
        Ok(PortPlease2Req { name })
    }
}

/// What epmd knows about a registered node (the body of a successful `PORT2_RESP`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEntry {
    /// The node's distribution port.
    pub port: u16,
    /// [`NODE_TYPE_NORMAL`] or [`NODE_TYPE_HIDDEN`].
    pub node_type: u8,
    /// [`PROTOCOL_TCP`].
    pub protocol: u8,
    /// Highest distribution version the node speaks.
    pub highest: u16,
    /// Lowest distribution version the node speaks.
    pub lowest: u16,
    /// The node name, alive part only.
    pub name: String,
    /// The `Extra` field it registered with.
    pub extra: Vec<u8>,
}

/// A `PORT2_RESP`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Port2Resp {
    /// Result 0: the node is registered.
    Found(NodeEntry),
    /// A non-zero result: no such node (epmd uses 1).
    NotFound(u8),
}

impl Port2Resp {
    /// The response as sent on the wire (no length header).
    pub fn encode(&self) -> Result<Vec<u8>, EpmdError> {
        match self {
            Port2Resp::NotFound(result) => Ok(vec![PORT2_RESP, (*result).max(1)]),
            Port2Resp::Found(e) => {
                validate_alive_name(&e.name)?;
                if e.extra.len() > MAX_EXTRA {
                    return Err(EpmdError::Malformed("PORT2_RESP extra field too long"));
                }
                let mut b = Vec::with_capacity(14 + e.name.len() + e.extra.len());
                b.extend_from_slice(&[PORT2_RESP, 0]);
                b.extend_from_slice(&e.port.to_be_bytes());
                b.push(e.node_type);
                b.push(e.protocol);
                b.extend_from_slice(&e.highest.to_be_bytes());
                b.extend_from_slice(&e.lowest.to_be_bytes());
                b.extend_from_slice(&(e.name.len() as u16).to_be_bytes());
                b.extend_from_slice(e.name.as_bytes());
                b.extend_from_slice(&(e.extra.len() as u16).to_be_bytes());
                b.extend_from_slice(&e.extra);
                Ok(b)
            }
        }
    }

    /// Reads a response from a stream; name and extra lengths are checked against
    /// [`MAX_NAME_BYTES`] and [`MAX_EXTRA`] before they are read.
    pub fn read_from<R: Read + ?Sized>(r: &mut R) -> Result<Self, EpmdError> {
        let mut head = [0u8; 2];
        r.read_exact(&mut head)?;
        let [tag, result] = head;
        if tag != PORT2_RESP {
            return Err(EpmdError::Malformed("expected PORT2_RESP"));
        }
        if result != 0 {
            return Ok(Port2Resp::NotFound(result));
        }
        let mut fixed = [0u8; 8];
        r.read_exact(&mut fixed)?;
        let port = u16::from_be_bytes([fixed[0], fixed[1]]);
        let node_type = fixed[2];
        let protocol = fixed[3];
        let highest = u16::from_be_bytes([fixed[4], fixed[5]]);
        let lowest = u16::from_be_bytes([fixed[6], fixed[7]]);
        let nlen = read_u16(r)? as usize;
        let name = read_capped(r, nlen, MAX_NAME_BYTES, "PORT2_RESP name too long")?;
        let name = decode_name(&name).map_err(|_| EpmdError::Malformed("PORT2_RESP name is invalid"))?;
        let elen = read_u16(r)? as usize;
        let extra = read_capped(r, elen, MAX_EXTRA, "PORT2_RESP extra field too long")?;
        Ok(Port2Resp::Found(NodeEntry { port, node_type, protocol, highest, lowest, name, extra }))
    }
}

/// A `NAMES_RESP`: the daemon's port, then one `name NAME at port PORT\n` line per node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamesResp {
    /// The port the daemon listens on.
    pub epmd_port: u32,
    /// The registered names and their distribution ports.
    pub nodes: Vec<(String, u16)>,
}

impl NamesResp {
    /// The response as sent on the wire (no length header; the server closes after it).
    pub fn encode(&self) -> Vec<u8> {
        let mut b = self.epmd_port.to_be_bytes().to_vec();
        for (name, port) in &self.nodes {
            b.extend_from_slice(format!("name {name} at port {port}\n").as_bytes());
        }
        b
    }

    /// Parses a complete response (everything up to end of stream). Lines must be
    /// `name NAME at port PORT`, newline-terminated.
    pub fn parse(bytes: &[u8]) -> Result<Self, EpmdError> {
        let mut b = Bytes { rest: bytes };
        let p = b.take(4, "NAMES_RESP shorter than its port field")?;
        let epmd_port = u32::from_be_bytes([p[0], p[1], p[2], p[3]]);
        let text = std::str::from_utf8(b.rest).map_err(|_| EpmdError::Malformed("NAMES_RESP is not UTF-8"))?;
        let mut nodes = Vec::new();
        let mut lines = text.split('\n');
        let last = lines.next_back().unwrap_or("");
        if !last.is_empty() {
            return Err(EpmdError::Malformed("NAMES_RESP line without a newline"));
        }
        for line in lines {
            let rest = line.strip_prefix("name ").ok_or(EpmdError::Malformed("NAMES_RESP line without 'name '"))?;
            let (name, port) =
                rest.rsplit_once(" at port ").ok_or(EpmdError::Malformed("NAMES_RESP line without ' at port '"))?;
            if name.is_empty() {
                return Err(EpmdError::Malformed("NAMES_RESP line with an empty name"));
            }
            let port: u16 = port.parse().map_err(|_| EpmdError::Malformed("NAMES_RESP port is not a port number"))?;
            nodes.push((name.to_owned(), port));
        }
        Ok(NamesResp { epmd_port, nodes })
    }
}

/// The port and versions of a node, as [`port_please`] returns them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodePort {
    /// The node's distribution port.
    pub port: u16,
    /// Highest distribution version it speaks.
    pub highest: u16,
    /// Lowest distribution version it speaks.
    pub lowest: u16,
    /// [`NODE_TYPE_NORMAL`] or [`NODE_TYPE_HIDDEN`].
    pub node_type: u8,
}

impl NodePort {
    /// Whether the node speaks distribution version 6, the only one smarm speaks.
    pub fn supports_v6(&self) -> bool {
        self.lowest <= DIST_VERSION && DIST_VERSION <= self.highest
    }
}

/// Registers `name` (alive part, no `@host`) with distribution port `port`, and returns the
/// creation epmd assigned. The registration lasts while `s` stays open: the caller keeps the
/// stream (and sends nothing more on it); closing it unregisters the node.
///
/// Errors: [`EpmdError::Refused`] if epmd refused (the name is taken, result 1), or the stream
/// or response failed.
pub fn register<S: Read + Write>(s: &mut S, name: &str, port: u16) -> Result<u32, EpmdError> {
    let req = Alive2Req::new(name, port)?.encode()?;
    s.write_all(&req)?;
    s.flush()?;
    let resp = Alive2Resp::read_from(s)?;
    if resp.result != 0 {
        return Err(EpmdError::Refused(resp.result));
    }
    Ok(resp.creation)
}

/// Asks for the distribution port of node `name` (alive part); `None` if it is not registered.
/// epmd closes the stream after answering, so use a fresh connection per call.
pub fn port_please<S: Read + Write>(s: &mut S, name: &str) -> Result<Option<NodePort>, EpmdError> {
    let req = PortPlease2Req { name: name.to_owned() }.encode()?;
    s.write_all(&req)?;
    s.flush()?;
    match Port2Resp::read_from(s)? {
        Port2Resp::NotFound(_) => Ok(None),
        Port2Resp::Found(e) if e.name != name => Err(EpmdError::Malformed("PORT2_RESP names another node")),
        Port2Resp::Found(e) => {
            Ok(Some(NodePort { port: e.port, highest: e.highest, lowest: e.lowest, node_type: e.node_type }))
        }
    }
}

/// Lists the registered names and their ports. Reads until epmd closes the stream (at most
/// [`MAX_NAMES_RESP`] bytes), so use a fresh connection per call.
pub fn names<S: Read + Write>(s: &mut S) -> Result<Vec<(String, u16)>, EpmdError> {
    s.write_all(&framed(&[NAMES_REQ])?)?;
    s.flush()?;
    let mut buf = Vec::new();
    Read::by_ref(s).take(MAX_NAMES_RESP as u64 + 1).read_to_end(&mut buf)?;
    if buf.len() > MAX_NAMES_RESP {
        return Err(EpmdError::Malformed("NAMES_RESP too long"));
    }
    Ok(NamesResp::parse(&buf)?.nodes)
}

/// A request the server understands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// `ALIVE2_REQ`.
    Alive2(Alive2Req),
    /// `PORT_PLEASE2_REQ`.
    PortPlease2(PortPlease2Req),
    /// `NAMES_REQ`.
    Names,
}

impl Request {
    /// Parses a request body (tag included, length header excluded).
    pub fn parse(body: &[u8]) -> Result<Self, EpmdError> {
        match body.first() {
            None => Err(EpmdError::Malformed("empty request")),
            Some(&ALIVE2_REQ) => Alive2Req::parse(body).map(Request::Alive2),
            Some(&PORT_PLEASE2_REQ) => PortPlease2Req::parse(body).map(Request::PortPlease2),
            Some(&NAMES_REQ) => Ok(Request::Names),
            Some(&other) => Err(EpmdError::Unsupported(other)),
        }
    }
}

/// Reads one request body: a 2-byte length in `1..=MAX_REQUEST`, then that many bytes.
fn read_request<R: Read + ?Sized>(r: &mut R) -> Result<Vec<u8>, EpmdError> {
    let len = read_u16(r)? as usize;
    if len == 0 {
        return Err(EpmdError::Malformed("empty request"));
    }
    read_capped(r, len, MAX_REQUEST, "request longer than epmd accepts")
}

/// A registration held by an [`EpmdServer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registration {
    /// What `PORT_PLEASE2_REQ` answers for the node.
    pub entry: NodeEntry,
    /// The creation assigned to this registration.
    pub creation: u32,
}

struct Registered {
    reg: Registration,
    /// Which connection made the registration (only it removes it).
    conn: u64,
}

#[derive(Default)]
struct Registry {
    nodes: HashMap<String, Registered>,
    /// The last creation handed out per name, bounded by `MAX_REMEMBERED_NAMES`.
    last_creation: HashMap<String, u32>,
    /// Names in `last_creation`, oldest first.
    remembered: VecDeque<String>,
    next_conn: u64,
}

impl Registry {
    fn remember(&mut self, name: &str, creation: u32) {
        if self.last_creation.insert(name.to_owned(), creation).is_none() {
            self.remembered.push_back(name.to_owned());
            while self.remembered.len() > MAX_REMEMBERED_NAMES {
                if let Some(old) = self.remembered.pop_front() {
                    self.last_creation.remove(&old);
                }
            }
        }
    }
}

/// An in-process EPMD: a registry of node names (name -> port, node type, protocol, versions,
/// creation), shared by the connections it serves. Thread-safe: serve each connection on its
/// own thread (or actor) with [`EpmdServer::serve_connection`].
pub struct EpmdServer {
    epmd_port: u16,
    registry: Mutex<Registry>,
}

impl fmt::Debug for EpmdServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpmdServer").field("epmd_port", &self.epmd_port).finish_non_exhaustive()
    }
}

/// Removes a registration when the connection that made it is done, however it ends.
struct Unregister<'a> {
    server: &'a EpmdServer,
    name: String,
    conn: u64,
}

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        let mut reg = self.server.lock();
        if reg.nodes.get(&self.name).is_some_and(|r| r.conn == self.conn) {
            reg.nodes.remove(&self.name);
        }
    }
}

impl EpmdServer {
    /// An empty registry. `epmd_port` is the port the caller listens on; `NAMES_RESP` reports it.
    pub fn new(epmd_port: u16) -> Self {
        EpmdServer { epmd_port, registry: Mutex::new(Registry::default()) }
    }

    fn lock(&self) -> MutexGuard<'_, Registry> {
        // The registry stays consistent across a panic elsewhere (every update is a single map
        // operation), so a poisoned lock is still usable.
        self.registry.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The registration of `name` (alive part), if any.
    pub fn lookup(&self, name: &str) -> Option<Registration> {
        self.lock().nodes.get(name).map(|r| r.reg.clone())
    }

    /// The registered names and ports, sorted by name.
    pub fn names(&self) -> Vec<(String, u16)> {
        let mut v: Vec<(String, u16)> =
            self.lock().nodes.values().map(|r| (r.reg.entry.name.clone(), r.reg.entry.port)).collect();
        v.sort();
        v
    }

    /// Serves one connection: reads one request and answers it.
    ///
    /// - `ALIVE2_REQ`: registers the node and answers `ALIVE2_X_RESP` (or `ALIVE2_RESP` to a
    ///   node whose highest version is below 6), then holds the registration until the stream
    ///   reaches end of stream or fails (`Ok(())` / `Err`), or the peer sends more bytes (`Err`,
    ///   epmd's rule); the registration is removed in every case. A name already registered, or
    ///   one epmd would refuse, gets result 1 and `Ok(())`. This call blocks for as long as the
    ///   registration lives; a read timeout on `s` is fine (the wait goes on), a non-blocking
    ///   stream is not (it would spin).
    /// - `PORT_PLEASE2_REQ`: answers `PORT2_RESP` and returns.
    /// - `NAMES_REQ`: answers `NAMES_RESP` and returns (dropping `s` closes it, which ends the
    ///   response).
    ///
    /// A length of 0 or above [`MAX_REQUEST`], or a malformed body, is an error and nothing is
    /// answered; other requests are [`EpmdError::Unsupported`].
    pub fn serve_connection<S: Read + Write>(&self, mut s: S) -> Result<(), EpmdError> {
        let body = read_request(&mut s)?;
        let request = match Request::parse(&body) {
            Ok(r) => r,
            Err(EpmdError::InvalidName(what)) => {
                // epmd answers a registration it cannot accept with result 1.
                let extended = body.get(5..7).map_or(true, |h| u16::from_be_bytes([h[0], h[1]]) >= DIST_VERSION);
                s.write_all(&Alive2Resp { result: 1, creation: 0, extended }.encode())?;
                s.flush()?;
                return Err(EpmdError::InvalidName(what));
            }
            Err(e) => return Err(e),
        };
        match request {
            Request::Alive2(req) => self.serve_alive(s, req),
            Request::PortPlease2(req) => {
                let resp = match self.lookup(&req.name) {
                    Some(r) => Port2Resp::Found(r.entry),
                    None => Port2Resp::NotFound(1),
                };
                s.write_all(&resp.encode()?)?;
                s.flush()?;
                Ok(())
            }
            Request::Names => {
                let resp = NamesResp { epmd_port: u32::from(self.epmd_port), nodes: self.names() };
                s.write_all(&resp.encode())?;
                s.flush()?;
                Ok(())
            }
        }
    }

    fn serve_alive<S: Read + Write>(&self, mut s: S, req: Alive2Req) -> Result<(), EpmdError> {
        let extended = req.highest >= DIST_VERSION;
        let registered = {
            let mut reg = self.lock();
            if reg.nodes.contains_key(&req.name) {
                None
            } else {
                let previous = reg.last_creation.get(&req.name).copied();
                let creation = loop {
                    let c = if extended { random_u32() } else { random_u32() % 3 + 1 };
                    if c != 0 && Some(c) != previous {
                        break c;
                    }
                };
                reg.remember(&req.name, creation);
                let conn = reg.next_conn;
                reg.next_conn += 1;
                let entry = NodeEntry {
                    port: req.port,
                    node_type: req.node_type,
                    protocol: req.protocol,
                    highest: req.highest,
                    lowest: req.lowest,
                    name: req.name.clone(),
                    extra: req.extra,
                };
                reg.nodes.insert(req.name.clone(), Registered { reg: Registration { entry, creation }, conn });
                Some((creation, conn))
            }
        };
        let Some((creation, conn)) = registered else {
            s.write_all(&Alive2Resp { result: 1, creation: 0, extended }.encode())?;
            s.flush()?;
            return Ok(());
        };
        let _unregister = Unregister { server: self, name: req.name, conn };
        s.write_all(&Alive2Resp { result: 0, creation, extended }.encode())?;
        s.flush()?;
        let mut buf = [0u8; 64];
        loop {
            match s.read(&mut buf) {
                Ok(0) => return Ok(()),
                Ok(_) => return Err(EpmdError::Malformed("data after ALIVE2_REQ")),
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::Interrupted | io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(EpmdError::Io(e)),
            }
        }
    }
}

/// Fuzz entry point: runs every parser and one [`EpmdServer::serve_connection`] over `data`
/// (as the bytes a peer sends; what the server writes is discarded). Asserts nothing but the
/// absence of panics.
pub fn fuzz_epmd(data: &[u8]) {
    struct Stream<'a> {
        input: &'a [u8],
    }
    impl Read for Stream<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }
    impl Write for Stream<'_> {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let _ = Request::parse(data);
    let _ = NamesResp::parse(data);
    let _ = Alive2Resp::read_from(&mut &data[..]);
    let _ = Port2Resp::read_from(&mut &data[..]);
    let server = EpmdServer::new(4369);
    let _ = server.serve_connection(Stream { input: data });
    let _ = server.serve_connection(Stream { input: data });
    let _ = register(&mut Stream { input: data }, "fuzz", 1);
    let _ = port_please(&mut Stream { input: data }, "fuzz");
    let _ = names(&mut Stream { input: data });
}

/// A random 32-bit number from the kernel (the node's one source: `conn::random_u32`).
fn random_u32() -> u32 {
    super::conn::random_u32()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;
    use std::sync::mpsc::{channel, Receiver, Sender};
    use std::sync::Arc;
    use std::thread;
    use std::time::{Duration, Instant};

    /// One end of an in-memory duplex pipe: reads block until the other end writes or is
    /// dropped (end of stream).
    struct Pipe {
        rx: Receiver<Vec<u8>>,
        tx: Option<Sender<Vec<u8>>>,
        pending: Vec<u8>,
    }

    fn pipe() -> (Pipe, Pipe) {
        let (a_tx, b_rx) = channel();
        let (b_tx, a_rx) = channel();
        (Pipe { rx: a_rx, tx: Some(a_tx), pending: Vec::new() }, Pipe { rx: b_rx, tx: Some(b_tx), pending: Vec::new() })
    }

    impl Read for Pipe {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.pending.is_empty() {
                match self.rx.recv_timeout(Duration::from_secs(10)) {
                    Ok(v) => self.pending = v,
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Ok(0),
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        return Err(io::Error::other("test pipe: no data in 10 s"))
                    }
                }
            }
            let n = buf.len().min(self.pending.len());
            buf[..n].copy_from_slice(&self.pending[..n]);
            self.pending.drain(..n);
            Ok(n)
        }
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            match &self.tx {
                Some(tx) if !buf.is_empty() => {
                    tx.send(buf.to_vec()).map_err(|_| io::Error::from(io::ErrorKind::BrokenPipe))?;
                    Ok(buf.len())
                }
                Some(_) => Ok(0),
                None => Err(io::Error::from(io::ErrorKind::BrokenPipe)),
            }
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A stream whose reads come from a fixed buffer and whose writes are collected.
    struct Mock {
        input: Cursor<Vec<u8>>,
        output: Vec<u8>,
    }

    impl Mock {
        fn new(input: Vec<u8>) -> Self {
            Mock { input: Cursor::new(input), output: Vec::new() }
        }
    }

    impl Read for Mock {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.input.read(buf)
        }
    }

    impl Write for Mock {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.output.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            thread::yield_now();
        }
    }

    #[test]
    fn alive2_req_layout_and_roundtrip() {
        let req = Alive2Req::new("foo", 0x1234).unwrap();
        let bytes = req.encode().unwrap();
        assert_eq!(bytes, [0, 16, 120, 0x12, 0x34, 77, 0, 0, 6, 0, 6, 0, 3, b'f', b'o', b'o', 0, 0]);
        assert_eq!(Alive2Req::parse(&bytes[2..]).unwrap(), req);
        let mut with_extra = req.clone();
        with_extra.extra = vec![1, 2, 3];
        let bytes = with_extra.encode().unwrap();
        assert_eq!(Alive2Req::parse(&bytes[2..]).unwrap(), with_extra);
        // Trailing bytes after Extra are ignored, as epmd does.
        let mut trailing = bytes[2..].to_vec();
        trailing.extend_from_slice(b"junk");
        assert_eq!(Alive2Req::parse(&trailing).unwrap(), with_extra);
    }

    #[test]
    fn alive2_req_rejects_bad_input() {
        let good = Alive2Req::new("foo", 1).unwrap().encode().unwrap();
        for cut in 0..good.len() - 2 {
            assert!(Alive2Req::parse(&good[2..2 + cut]).is_err(), "truncated at {cut}");
        }
        let mut big_nlen = good[2..].to_vec();
        big_nlen[10] = 200;
        assert!(matches!(Alive2Req::parse(&big_nlen), Err(EpmdError::Malformed(_))));
        let mut nul = good[2..].to_vec();
        nul[12] = 0;
        assert!(matches!(Alive2Req::parse(&nul), Err(EpmdError::Malformed(_))));
        let mut bad_utf8 = good[2..].to_vec();
        bad_utf8[12] = 0xff;
        assert!(matches!(Alive2Req::parse(&bad_utf8), Err(EpmdError::InvalidName(_))));
        let mut at = good[2..].to_vec();
        at[12] = b'@';
        assert!(matches!(Alive2Req::parse(&at), Err(EpmdError::InvalidName(_))));
        assert!(matches!(Alive2Req::new("", 1), Err(EpmdError::InvalidName(_))));
        assert!(matches!(Alive2Req::new("a@b", 1), Err(EpmdError::InvalidName(_))));
        assert!(matches!(Alive2Req::new(&"x".repeat(256), 1), Err(EpmdError::InvalidName(_))));
        assert!(Alive2Req::new(&"x".repeat(255), 1).is_ok());
        assert!(Alive2Req::new(&"é".repeat(255), 1).is_ok());
    }

    #[test]
    fn alive2_resp_both_forms() {
        let x = Alive2Resp { result: 0, creation: 0xdead_beef, extended: true };
        assert_eq!(x.encode(), [118, 0, 0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(Alive2Resp::read_from(&mut Cursor::new(x.encode())).unwrap(), x);
        let old = Alive2Resp { result: 0, creation: 3, extended: false };
        assert_eq!(old.encode(), [121, 0, 0, 3]);
        assert_eq!(Alive2Resp::read_from(&mut Cursor::new(old.encode())).unwrap(), old);
        // A refusal: only tag and result are needed.
        let refused = Alive2Resp::read_from(&mut Cursor::new(vec![118, 1])).unwrap();
        assert_eq!(refused.result, 1);
        assert!(matches!(Alive2Resp::read_from(&mut Cursor::new(vec![119, 0])), Err(EpmdError::Malformed(_))));
        assert!(matches!(Alive2Resp::read_from(&mut Cursor::new(vec![118, 0, 1])), Err(EpmdError::Io(_))));
    }

    #[test]
    fn port_please2_roundtrip() {
        let req = PortPlease2Req { name: "bar".into() };
        let bytes = req.encode().unwrap();
        assert_eq!(bytes, [0, 4, 122, b'b', b'a', b'r']);
        assert_eq!(PortPlease2Req::parse(&bytes[2..]).unwrap(), req);
        assert_eq!(PortPlease2Req::parse(b"zbar\0").unwrap(), req, "one trailing NUL is ignored");
        assert!(PortPlease2Req::parse(b"z").is_err());
        assert!(PortPlease2Req::parse(b"z\0").is_err());
        assert!(PortPlease2Req::parse(b"zb\0r").is_err());
        assert!(PortPlease2Req::parse(b"yabc").is_err());
        assert!(PortPlease2Req::parse(&[122, 0xc3]).is_err());

        let entry = NodeEntry {
            port: 4370,
            node_type: 77,
            protocol: 0,
            highest: 6,
            lowest: 5,
            name: "bar".into(),
            extra: vec![9],
        };
        let found = Port2Resp::Found(entry);
        let bytes = found.encode().unwrap();
        assert_eq!(bytes, [119, 0, 0x11, 0x12, 77, 0, 0, 6, 0, 5, 0, 3, b'b', b'a', b'r', 0, 1, 9]);
        assert_eq!(Port2Resp::read_from(&mut Cursor::new(bytes.clone())).unwrap(), found);
        for cut in 2..bytes.len() {
            assert!(Port2Resp::read_from(&mut Cursor::new(bytes[..cut].to_vec())).is_err(), "cut {cut}");
        }
        let nf = Port2Resp::NotFound(1);
        assert_eq!(nf.encode().unwrap(), [119, 1]);
        assert_eq!(Port2Resp::read_from(&mut Cursor::new(vec![119, 1])).unwrap(), nf);
        // An oversized name length is refused before any read of the name.
        let mut huge = vec![119, 0, 0, 1, 77, 0, 0, 6, 0, 6, 0xff, 0xff];
        huge.extend_from_slice(&[b'a'; 16]);
        assert!(matches!(Port2Resp::read_from(&mut Cursor::new(huge)), Err(EpmdError::Malformed(_))));
    }

    #[test]
    fn names_roundtrip_and_errors() {
        let resp = NamesResp { epmd_port: 4369, nodes: vec![("a".into(), 1), ("with space".into(), 65535)] };
        let bytes = resp.encode();
        assert_eq!(&bytes[..4], &[0, 0, 0x11, 0x11]);
        assert_eq!(&bytes[4..], b"name a at port 1\nname with space at port 65535\n");
        assert_eq!(NamesResp::parse(&bytes).unwrap(), resp);
        assert_eq!(NamesResp::parse(&[0, 0, 0, 1]).unwrap().nodes, vec![]);
        assert!(NamesResp::parse(&[0, 0, 0]).is_err());
        assert!(NamesResp::parse(b"\0\0\0\x01name a at port 1").is_err(), "no final newline");
        assert!(NamesResp::parse(b"\0\0\0\x01nome a at port 1\n").is_err());
        assert!(NamesResp::parse(b"\0\0\0\x01name a at port 70000\n").is_err());
        assert!(NamesResp::parse(b"\0\0\0\x01name  at port 1\n").is_err());
    }

    #[test]
    fn request_parse_dispatch() {
        assert_eq!(Request::parse(&[110]).unwrap(), Request::Names);
        assert!(matches!(Request::parse(&[107]), Err(EpmdError::Unsupported(107))));
        assert!(matches!(Request::parse(&[]), Err(EpmdError::Malformed(_))));
    }

    #[test]
    fn server_request_size_bounds() {
        let server = EpmdServer::new(4369);
        let mut m = Mock::new(vec![0, 0]);
        assert!(matches!(server.serve_connection(&mut m), Err(EpmdError::Malformed(_))));
        let len = (MAX_REQUEST + 1) as u16;
        let mut m = Mock::new(len.to_be_bytes().to_vec());
        assert!(matches!(server.serve_connection(&mut m), Err(EpmdError::Malformed(_))));
        assert!(m.output.is_empty());
        // Truncated body: an i/o error, no answer.
        let mut m = Mock::new(vec![0, 10, 122, b'a']);
        assert!(matches!(server.serve_connection(&mut m), Err(EpmdError::Io(_))));
        assert!(m.output.is_empty());
        // Malformed ALIVE2_REQ: no answer, like epmd.
        let mut m = Mock::new(vec![0, 5, 120, 0, 1, 77, 0]);
        assert!(matches!(server.serve_connection(&mut m), Err(EpmdError::Malformed(_))));
        assert!(m.output.is_empty());
        // A name epmd cannot accept: result 1.
        let mut req = Alive2Req::new("x", 1).unwrap().encode().unwrap();
        req[13] = 0xff;
        let mut m = Mock::new(req);
        assert!(matches!(server.serve_connection(&mut m), Err(EpmdError::InvalidName(_))));
        assert_eq!(m.output, [118, 1, 0, 0, 0, 0]);
    }

    #[test]
    fn server_register_lookup_unregister() {
        let server = Arc::new(EpmdServer::new(4444));
        let (mut client, server_end) = pipe();
        let srv = Arc::clone(&server);
        let t = thread::spawn(move || srv.serve_connection(server_end));
        let creation = register(&mut client, "node1", 5555).unwrap();
        assert_ne!(creation, 0);
        let reg = server.lookup("node1").unwrap();
        assert_eq!(reg.creation, creation);
        assert_eq!(reg.entry.port, 5555);
        assert_eq!((reg.entry.node_type, reg.entry.highest, reg.entry.lowest), (77, 6, 6));

        // A second registration of the same name is refused while the first lives.
        let mut m = Mock::new(Alive2Req::new("node1", 1).unwrap().encode().unwrap());
        server.serve_connection(&mut m).unwrap();
        assert_eq!(m.output[..2], [118, 1]);

        // port_please and names through the server.
        let mut m = Mock::new(PortPlease2Req { name: "node1".into() }.encode().unwrap());
        server.serve_connection(&mut m).unwrap();
        let np = port_please(&mut Mock::new(m.output), "node1").unwrap().unwrap();
        assert_eq!(np, NodePort { port: 5555, highest: 6, lowest: 6, node_type: 77 });
        assert!(np.supports_v6());
        let mut m = Mock::new(PortPlease2Req { name: "nope".into() }.encode().unwrap());
        server.serve_connection(&mut m).unwrap();
        assert_eq!(m.output, [119, 1]);
        let mut m = Mock::new(vec![0, 1, 110]);
        server.serve_connection(&mut m).unwrap();
        assert_eq!(NamesResp::parse(&m.output).unwrap().nodes, vec![("node1".to_string(), 5555)]);
        assert_eq!(NamesResp::parse(&m.output).unwrap().epmd_port, 4444);

        // Closing the registering stream unregisters; the name can be registered again with
        // another creation.
        drop(client);
        t.join().unwrap().unwrap();
        assert!(server.lookup("node1").is_none());
        let (mut client, server_end) = pipe();
        let srv = Arc::clone(&server);
        let t = thread::spawn(move || srv.serve_connection(server_end));
        let creation2 = register(&mut client, "node1", 5556).unwrap();
        assert_ne!(creation2, creation);
        assert_eq!(server.lookup("node1").unwrap().entry.port, 5556);
        // Bytes after the registration end it (epmd's rule).
        client.write_all(b"x").unwrap();
        assert!(matches!(t.join().unwrap(), Err(EpmdError::Malformed(_))));
        wait_until("unregistration", || server.lookup("node1").is_none());
    }

    #[test]
    fn server_answers_old_nodes_with_16_bit_creation() {
        let server = EpmdServer::new(4369);
        let mut req = Alive2Req::new("old", 7).unwrap();
        req.highest = 5;
        req.lowest = 5;
        let mut m = Mock::new(req.encode().unwrap());
        server.serve_connection(&mut m).unwrap();
        let resp = Alive2Resp::read_from(&mut Cursor::new(m.output)).unwrap();
        assert!(!resp.extended);
        assert!((1..=3).contains(&resp.creation));
        assert!(server.lookup("old").is_none(), "the mock stream ended, so did the registration");
    }

    #[test]
    fn client_errors() {
        let mut m = Mock::new(vec![118, 1, 0, 0, 0, 99]);
        assert!(matches!(register(&mut m, "n", 1), Err(EpmdError::Refused(1))));
        let mut m = Mock::new(vec![121, 0, 0, 2]);
        assert_eq!(register(&mut m, "n", 1).unwrap(), 2);
        let mut m = Mock::new(vec![]);
        assert!(matches!(register(&mut m, "n", 1), Err(EpmdError::Io(_))));
        let mut m = Mock::new(vec![119, 1]);
        assert_eq!(port_please(&mut m, "n").unwrap(), None);
        let other = Port2Resp::Found(NodeEntry {
            port: 1,
            node_type: 77,
            protocol: 0,
            highest: 6,
            lowest: 6,
            name: "other".into(),
            extra: vec![],
        });
        let mut m = Mock::new(other.encode().unwrap());
        assert!(matches!(port_please(&mut m, "n"), Err(EpmdError::Malformed(_))));
        let mut big = vec![0, 0, 0, 1];
        big.resize(MAX_NAMES_RESP + 10, b'x');
        assert!(matches!(names(&mut Mock::new(big)), Err(EpmdError::Malformed(_))));
        assert!(matches!(port_please(&mut Mock::new(vec![]), "a@b"), Err(EpmdError::InvalidName(_))));
    }

    #[test]
    fn random_creations_are_nonzero_and_vary() {
        let v: Vec<u32> = (0..64).map(|_| random_u32()).collect();
        let distinct: std::collections::HashSet<_> = v.iter().collect();
        assert!(distinct.len() > 60);
    }

    #[test]
    fn fuzz_entry_point_survives_samples() {
        let alive = Alive2Req::new("n", 1).unwrap().encode().unwrap();
        for cut in 0..alive.len() {
            fuzz_epmd(&alive[..cut]);
        }
        fuzz_epmd(&alive);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for len in 0..200 {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            fuzz_epmd(&data);
        }
    }

    #[test]
    fn error_display() {
        assert_eq!(EpmdError::Refused(1).to_string(), "epmd refused the request (result 1)");
        assert!(EpmdError::Malformed("x").to_string().contains("malformed"));
        assert!(EpmdError::Io(io::Error::from(io::ErrorKind::UnexpectedEof)).to_string().contains("i/o"));
    }
}
