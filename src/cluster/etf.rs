//! Hardened External Term Format (ETF) decoding and encoding in front of `eetf` 0.12.
//!
//! # What this module owns
//!
//! Every ETF byte that arrives from a peer node passes through [`decode_versioned`] (or
//! [`check_term`]) before `eetf` sees it, and every term smarm sends is written by
//! [`encode_versioned`]. `eetf` 0.12's decoder is not safe on untrusted input, and its encoder
//! can panic or change a term's meaning:
//!
//! * decoder: `unimplemented!()` on `ATOM_CACHE_REF` and on a top-level `DISTRIBUTION_HEADER`;
//!   `Vec::with_capacity`/`vec![0; n]` straight from u32 length fields (tuples, lists, maps'
//!   entries, binaries, big integers, fun free variables: up to 4 G elements, an allocation abort);
//!   unbounded recursion (about 1.4 KB of stack per nesting level, see [`Limits::max_depth`]);
//!   `COMPRESSED_TERM` inflated without any size check (a zlib bomb); `BIT_BINARY_EXT` with 0 or
//!   more than 8 tail bits shifts a `u8` by 8 or more (an overflow panic with overflow checks on);
//!   latin-1 atoms decoded as UTF-8 (so `'é'` fails and some latin-1 byte pairs decode to the
//!   wrong characters); `FLOAT_EXT` parsed as an `f32` (precision silently lost); map entries with
//!   duplicate keys silently merged (OTP rejects them).
//! * encoder: recursion; `BitBinary` with 0 or more than 8 tail bits panics; a list of small
//!   integers is sent as `STRING_EXT` even when an element is negative (`[-1]` arrives as `[255]`),
//!   and a `List` of bytes comes back as a `ByteList`.
//!
//! # How
//!
//! [`check_term`] is an iterative validator (an explicit stack of pending-children counts, bounded
//! by [`Limits::max_depth`]; no recursion) that walks the bytes of exactly one term and proves that
//! `eetf` decodes them without panicking, without recursing deeper than `max_depth` and without
//! allocating more than the input justifies. [`decode_versioned`] runs it, then hands the validated
//! slice to `eetf`. Two encodings `eetf` gets wrong are rewritten in a copy first (only when
//! present): latin-1 atoms with non-ASCII bytes become UTF-8 atoms, and `FLOAT_EXT` becomes
//! `NEW_FLOAT_EXT` (parsed as `f64`). [`encode_versioned`] is an iterative encoder of its own.
//!
//! # Invariants
//!
//! * No input makes this module or `eetf` panic, abort, or overflow the stack when the caller's
//!   stack holds `max_depth` levels of `eetf` recursion (sizes below).
//! * Every element count is checked against the bytes actually present before any allocation:
//!   each element takes at least one byte, each map entry at least two. Big integers are capped by
//!   [`Limits::max_bigint_bytes`], atoms by [`Limits::max_atom_chars`] (never above OTP's 255).
//! * Allocation is linear in the input: the decoded [`eetf::Term`] holds at most one `Term` (56
//!   bytes) per input byte, plus hash-map overhead for maps (each entry takes at least 3 input
//!   bytes for 112 bytes of entry, with growth slack): under about 150 bytes of heap per input byte
//!   in the worst case. A rewrite copy is at most twice the input. Callers bound the frame size.
//! * Whatever [`decode_versioned`] returns, [`encode_versioned`] encodes, and decoding that gives
//!   the same term (structurally; see Limits for `==` on maps used as map keys).
//!
//! # Accepted
//!
//! Exactly what OTP 25 `binary_to_term/1` accepts among: the four atom tags (latin-1 and UTF-8, at
//! most 255 characters), small/integer/small big/large big integers, new and old floats (finite),
//! pid/new pid, port/new port/v4 port, reference/new reference/newer reference (at most 5 id words),
//! new fun/export/old fun (their pid, module, index and arity fields type-checked, `NEW_FUN_EXT`'s
//! size field checked), binary, bit binary (1..=8 tail bits, or empty with 0), string, list (any
//! tail, improper allowed), nil, small/large tuple and map (duplicate keys rejected).
//! Rejected with a typed error: `COMPRESSED_TERM` (80), `ATOM_CACHE_REF` (82),
//! `DISTRIBUTION_HEADER` (68), `LOCAL_EXT` (121) and any unknown tag.
//!
//! # Limits
//!
//! `eetf::Map` hashes its entries in iteration order, so eetf's `Hash` and `==` are unreliable for
//! terms that use maps inside map keys (two equal such terms can compare unequal). Decoding is not
//! affected: duplicate keys are found with an order-independent hash of its own. Callers should
//! not rely on `Term` equality or hashing for such terms.

// The complete codec: smarm uses part of it; `check_term` serves the tests and fuzzing.
#![allow(dead_code)]
// Items re-exported (doc-hidden) through `cluster::__wire` link to private ones in their docs.
#![allow(rustdoc::private_intra_doc_links)]
use std::collections::HashSet;
use std::fmt;
use std::hash::{BuildHasher, RandomState};

use eetf::Term;

const VERSION: u8 = 131;

const DISTRIBUTION_HEADER: u8 = 68;
pub(crate) const NEW_FLOAT_EXT: u8 = 70;
pub(crate) const BIT_BINARY_EXT: u8 = 77;
pub(crate) const COMPRESSED_TERM: u8 = 80;
pub(crate) const ATOM_CACHE_REF: u8 = 82;
pub(crate) const NEW_PID_EXT: u8 = 88;
pub(crate) const NEW_PORT_EXT: u8 = 89;
pub(crate) const NEWER_REFERENCE_EXT: u8 = 90;
pub(crate) const SMALL_INTEGER_EXT: u8 = 97;
pub(crate) const INTEGER_EXT: u8 = 98;
pub(crate) const FLOAT_EXT: u8 = 99;
pub(crate) const ATOM_EXT: u8 = 100;
pub(crate) const REFERENCE_EXT: u8 = 101;
pub(crate) const PORT_EXT: u8 = 102;
pub(crate) const PID_EXT: u8 = 103;
pub(crate) const SMALL_TUPLE_EXT: u8 = 104;
pub(crate) const LARGE_TUPLE_EXT: u8 = 105;
pub(crate) const NIL_EXT: u8 = 106;
pub(crate) const STRING_EXT: u8 = 107;
pub(crate) const LIST_EXT: u8 = 108;
pub(crate) const BINARY_EXT: u8 = 109;
pub(crate) const SMALL_BIG_EXT: u8 = 110;
pub(crate) const LARGE_BIG_EXT: u8 = 111;
pub(crate) const NEW_FUN_EXT: u8 = 112;
pub(crate) const EXPORT_EXT: u8 = 113;
pub(crate) const NEW_REFERENCE_EXT: u8 = 114;
pub(crate) const SMALL_ATOM_EXT: u8 = 115;
pub(crate) const MAP_EXT: u8 = 116;
pub(crate) const FUN_EXT: u8 = 117;
pub(crate) const ATOM_UTF8_EXT: u8 = 118;
pub(crate) const SMALL_ATOM_UTF8_EXT: u8 = 119;
pub(crate) const V4_PORT_EXT: u8 = 120;
pub(crate) const LOCAL_EXT: u8 = 121;

/// OTP's hard limit on the length of an atom, in characters.
const OTP_MAX_ATOM_CHARS: u32 = 255;
/// The most 32-bit id words OTP 25 accepts in a (new/newer) reference.
const MAX_REFERENCE_WORDS: usize = 5;

/// Bounds applied to one incoming term by [`check_term`] and [`decode_versioned`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Deepest nesting accepted; the outermost term is at depth 1, the elements of a tuple, list,
    /// map or fun environment one deeper, and the node atom of a pid (port, reference) one deeper
    /// than the pid. `eetf` decodes recursively, one call chain per level: measured with eetf 0.12
    /// on x86_64, rustc 1.95, about 1375 bytes of stack per level in release (with or without
    /// overflow checks) and 1000 to 1700 bytes per level in a debug build. So the default of 64
    /// needs about 90 KiB of stack for `eetf`, plus the caller's own frames: decode on an actor
    /// stack of at least 128 KiB (smarm's default is 512 KiB), or lower this limit (a 64 KiB stack
    /// fits about 32 levels).
    pub max_depth: u32,
    /// Longest atom accepted, in characters. OTP's limit is 255 and values above 255 act as 255.
    pub max_atom_chars: u32,
    /// Most magnitude bytes accepted in one big integer (`SMALL_BIG_EXT`/`LARGE_BIG_EXT`).
    pub max_bigint_bytes: u32,
}

impl Default for Limits {
    /// `max_depth` 64 (about 90 KiB of `eetf` stack in release, see [`Limits::max_depth`]; real
    /// distribution traffic nests far less, and a list's length adds no depth in ETF, only nested
    /// containers do), `max_atom_chars` 255 (OTP's), `max_bigint_bytes` 16384 (131072 bits: far
    /// beyond what applications exchange, while keeping any later arithmetic or formatting cheap).
    fn default() -> Self {
        Limits { max_depth: 64, max_atom_chars: OTP_MAX_ATOM_CHARS, max_bigint_bytes: 16 * 1024 }
    }
}

/// Why a term was rejected (decoding) or could not be written (encoding).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EtfError {
    /// The input ended before the term did (also: a count claims more elements than bytes remain).
    Truncated,
    /// A tag byte that is not part of the term format.
    UnknownTag(u8),
    /// The term nests deeper than [`Limits::max_depth`].
    TooDeep,
    /// Something is longer than allowed: `what` names it (`"atom"`, `"integer"`, `"reference id"`,
    /// or when encoding a length that does not fit its field).
    TooLong {
        /// What was too long.
        what: &'static str,
    },
    /// A UTF-8 atom whose bytes are not valid UTF-8.
    BadAtom,
    /// The first byte is not the version byte 131.
    BadVersion(u8),
    /// A valid tag this decoder refuses: compressed terms, atom cache references, distribution
    /// headers, `LOCAL_EXT`.
    Unsupported(&'static str),
    /// Structurally wrong data: the message says what.
    Invalid(String),
    /// `eetf` rejected bytes this module had validated. This should not happen; it indicates a gap
    /// in the validator and should be reported as a bug.
    Eetf(String),
}

impl fmt::Display for EtfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EtfError::Truncated => write!(f, "ETF: input ends before the term does"),
            EtfError::UnknownTag(tag) => write!(f, "ETF: unknown tag {tag}"),
            EtfError::TooDeep => write!(f, "ETF: term nests too deeply"),
            EtfError::TooLong { what } => write!(f, "ETF: {what} too long"),
            EtfError::BadAtom => write!(f, "ETF: atom is not valid UTF-8"),
            EtfError::BadVersion(v) => write!(f, "ETF: version byte {v}, expected {VERSION}"),
            EtfError::Unsupported(what) => write!(f, "ETF: unsupported {what}"),
            EtfError::Invalid(msg) => write!(f, "ETF: invalid term: {msg}"),
            EtfError::Eetf(msg) => write!(f, "ETF: eetf rejected a validated term (bug): {msg}"),
        }
    }
}

impl std::error::Error for EtfError {}

/// Validates the one term at the start of `buf` (which begins with the term's tag byte, no version
/// byte) and returns its length in bytes; bytes after it are ignored. On `Ok(n)`, `eetf` decodes
/// `[131] ++ buf[..n]` without panicking, recursing deeper than `limits.max_depth`, or
/// over-allocating. Use it to skip or bound a term; to decode, use [`decode_versioned`], which
/// also rewrites what `eetf` misreads (non-ASCII latin-1 atoms, `FLOAT_EXT`) and rejects maps with
/// duplicate keys (only visible after decoding).
pub fn check_term(buf: &[u8], limits: &Limits) -> Result<usize, EtfError> {
    let mut walker = Walker::new(buf, 0, limits, false);
    walker.walk()?;
    Ok(walker.pos)
}

/// Decodes the versioned term at the start of `buf` (131, then one term) and returns it with the
/// number of bytes it took (1 + the term's length). Trailing bytes are allowed and left alone: a
/// distribution frame carries the control message and the payload as two such terms back to back.
/// Needs about `limits.max_depth` × 1.4 KB of stack for `eetf`'s recursion (see [`Limits`]).
pub fn decode_versioned(buf: &[u8], limits: &Limits) -> Result<(Term, usize), EtfError> {
    let version = *buf.first().ok_or(EtfError::Truncated)?;
    if version != VERSION {
        return Err(EtfError::BadVersion(version));
    }
    let mut walker = Walker::new(buf, 1, limits, true);
    walker.walk()?;
    let end = walker.pos;
    let map_entries = walker.map_entries;
    let term = match walker.finish() {
        Some(rewritten) => eetf_decode(&rewritten)?,
        None => eetf_decode(buf.get(..end).ok_or(EtfError::Truncated)?)?,
    };
    if map_entries > 0 && has_duplicate_keys(&term, map_entries) {
        return Err(EtfError::Invalid("map with duplicate keys".to_string()));
    }
    Ok((term, end))
}

/// Appends `term` to `out` as a versioned term (131, then the term), in encodings OTP 25 accepts
/// and [`decode_versioned`] decodes back to an equal term. Iterative: any depth encodes. On error
/// `out` is left as it was. Fails on what OTP would reject: atoms over 255 characters, non-finite
/// floats, references with more than 5 id words, bit binaries whose tail bits are not 1..=8 (or 0
/// for an empty one), and lengths that do not fit their fields.
pub fn encode_versioned(term: &Term, out: &mut Vec<u8>) -> Result<(), EtfError> {
    let mark = out.len();
    out.push(VERSION);
    let result = encode_term(term, out);
    if result.is_err() {
        out.truncate(mark);
    }
    result
}

fn eetf_decode(bytes: &[u8]) -> Result<Term, EtfError> {
    let mut reader = bytes;
    let term = Term::decode(&mut reader).map_err(|e| EtfError::Eetf(e.to_string()))?;
    if !reader.is_empty() {
        return Err(EtfError::Eetf(format!("{} validated bytes left unread", reader.len())));
    }
    Ok(term)
}

/// Calls `f` on each direct sub-term of `term` (map entries as key, value, key, value, ...).
fn for_each_child<'t>(term: &'t Term, mut f: impl FnMut(&'t Term)) {
    match term {
        Term::List(l) => l.elements.iter().for_each(f),
        Term::ImproperList(l) => {
            l.elements.iter().for_each(&mut f);
            f(&l.last);
        }
        Term::Tuple(t) => t.elements.iter().for_each(f),
        Term::Map(m) => {
            for (k, v) in &m.map {
                f(k);
                f(v);
            }
        }
        Term::InternalFun(fun) => match &**fun {
            eetf::InternalFun::Old { free_vars, .. } | eetf::InternalFun::New { free_vars, .. } => {
                free_vars.iter().for_each(f)
            }
        },
        _ => {}
    }
}

fn is_container(term: &Term) -> bool {
    matches!(term, Term::List(_) | Term::ImproperList(_) | Term::Tuple(_) | Term::Map(_) | Term::InternalFun(_))
}

/// Whether a map in `term` had duplicate keys. eetf's `HashMap` merges equal keys, leaving fewer
/// entries than the input declared (`declared_entries` in all); but eetf hashes a map in iteration
/// order, so keys containing maps can be equal yet not merged: container keys are also compared
/// by [`canonical_hash`]. Walked without recursion.
fn has_duplicate_keys(term: &Term, declared_entries: u64) -> bool {
    let state = RandomState::new();
    let mut seen = HashSet::new();
    let mut total = 0u64;
    let mut pending = vec![term];
    while let Some(t) = pending.pop() {
        if let Term::Map(m) = t {
            total = total.saturating_add(m.map.len() as u64);
            seen.clear();
            for key in m.map.keys() {
                if is_container(key) && !seen.insert(canonical_hash(key, &state)) {
                    return true;
                }
            }
        }
        for_each_child(t, |c| pending.push(c));
    }
    total != declared_entries
}

/// A structural hash of `root` that, unlike eetf's `Hash`, does not depend on map iteration order
/// (map entries are combined commutatively). Keyed by `state`, so a peer cannot aim collisions (a
/// collision would only make a map with distinct keys be rejected). Walked without recursion.
fn canonical_hash(root: &Term, state: &RandomState) -> u64 {
    enum Visit<'t> {
        Enter(&'t Term),
        Exit(&'t Term, usize),
    }
    let mut visits = vec![Visit::Enter(root)];
    let mut values: Vec<u64> = Vec::new();
    while let Some(visit) = visits.pop() {
        match visit {
            Visit::Enter(t) if is_container(t) => {
                let exit_at = visits.len();
                visits.push(Visit::Exit(t, 0));
                let mut n = 0;
                for_each_child(t, |c| {
                    visits.push(Visit::Enter(c));
                    n += 1;
                });
                // Children are popped (entered) in order.
                if let Some(children) = visits.get_mut(exit_at + 1..) {
                    children.reverse();
                }
                if let Some(exit) = visits.get_mut(exit_at) {
                    *exit = Visit::Exit(t, n);
                }
            }
            // No maps inside: eetf's own hash is consistent with its equality.
            Visit::Enter(leaf) => values.push(state.hash_one(leaf)),
            Visit::Exit(t, n) => {
                let children = values.split_off(values.len().saturating_sub(n));
                let hash = match t {
                    Term::Map(_) => {
                        let sum = children.chunks(2).fold(0u64, |acc, pair| acc.wrapping_add(state.hash_one(pair)));
                        state.hash_one((4u8, n, sum))
                    }
                    Term::List(_) => state.hash_one((1u8, &children)),
                    Term::ImproperList(_) => state.hash_one((2u8, &children)),
                    Term::Tuple(_) => state.hash_one((3u8, &children)),
                    Term::InternalFun(f) => match &**f {
                        eetf::InternalFun::Old { module, pid, index, uniq, .. } => {
                            state.hash_one((5u8, module, pid, index, uniq, &children))
                        }
                        eetf::InternalFun::New { module, arity, pid, index, uniq, old_index, old_uniq, .. } => {
                            state.hash_one((6u8, module, arity, pid, index, uniq, old_index, old_uniq, &children))
                        }
                    },
                    leaf => state.hash_one(leaf),
                };
                values.push(hash);
            }
        }
    }
    values.pop().unwrap_or(0)
}

fn invalid(msg: impl Into<String>) -> EtfError {
    EtfError::Invalid(msg.into())
}

fn finite(value: f64) -> Result<(), EtfError> {
    if value.is_finite() {
        Ok(())
    } else {
        Err(invalid("non-finite float"))
    }
}

fn usize_len(n: u32) -> Result<usize, EtfError> {
    usize::try_from(n).map_err(|_| EtfError::Truncated)
}

/// Children still to read for one open container.
struct Frame {
    left: u64,
    /// For `NEW_FUN_EXT`: where its size field starts and what it says.
    fun_size: Option<(usize, u32)>,
}

/// The validator's cursor over one term.
struct Walker<'a> {
    buf: &'a [u8],
    pos: usize,
    max_depth: u32,
    max_atom_chars: usize,
    max_bigint_bytes: usize,
    /// Build a rewritten copy when a latin-1 atom or `FLOAT_EXT` needs it.
    rewrite: bool,
    out: Option<Vec<u8>>,
    /// `buf[..copied]` is already in `out`.
    copied: usize,
    /// Sum of the entry counts of every map in the term.
    map_entries: u64,
}

impl<'a> Walker<'a> {
    fn new(buf: &'a [u8], pos: usize, limits: &Limits, rewrite: bool) -> Self {
        let atom_chars = limits.max_atom_chars.min(OTP_MAX_ATOM_CHARS);
        Walker {
            buf,
            pos,
            max_depth: limits.max_depth,
            max_atom_chars: usize::try_from(atom_chars).unwrap_or(usize::MAX),
            max_bigint_bytes: usize::try_from(limits.max_bigint_bytes).unwrap_or(usize::MAX),
            rewrite,
            out: None,
            copied: 0,
            map_entries: 0,
        }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], EtfError> {
        let end = self.pos.checked_add(n).ok_or(EtfError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(EtfError::Truncated)?;
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], EtfError> {
        <[u8; N]>::try_from(self.take(N)?).map_err(|_| EtfError::Truncated)
    }

    fn u8(&mut self) -> Result<u8, EtfError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    fn u16(&mut self) -> Result<u16, EtfError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, EtfError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    fn remaining(&self) -> u64 {
        self.buf.len().saturating_sub(self.pos) as u64
    }

    fn check_depth(&self, depth: u32) -> Result<(), EtfError> {
        if depth > self.max_depth {
            Err(EtfError::TooDeep)
        } else {
            Ok(())
        }
    }

    /// Replaces `buf[start..self.pos]` by `replacement` in the rewritten copy.
    fn patch(&mut self, start: usize, replacement: &[u8]) {
        if !self.rewrite {
            return;
        }
        let buf = self.buf;
        let out = self.out.get_or_insert_with(|| Vec::with_capacity(buf.len()));
        if let Some(unchanged) = buf.get(self.copied..start) {
            out.extend_from_slice(unchanged);
        }
        out.extend_from_slice(replacement);
        self.copied = self.pos;
    }

    /// The rewritten bytes up to the end of the term, if any patch was made.
    fn finish(mut self) -> Option<Vec<u8>> {
        let mut out = self.out.take()?;
        if let Some(rest) = self.buf.get(self.copied..self.pos) {
            out.extend_from_slice(rest);
        }
        Some(out)
    }

    fn walk(&mut self) -> Result<(), EtfError> {
        let mut stack: Vec<Frame> = Vec::new();
        self.term(1, &mut stack)?;
        while let Some(top) = stack.last_mut() {
            if top.left == 0 {
                if let Some((at, size)) = top.fun_size {
                    self.check_fun_size(at, size)?;
                }
                stack.pop();
                continue;
            }
            top.left -= 1;
            // Frames are pushed only by a term at depth `stack.len() + 1 <= max_depth`, so the
            // stack never holds more than `max_depth` frames.
            let depth = u32::try_from(stack.len()).unwrap_or(u32::MAX).saturating_add(1);
            self.term(depth, &mut stack)?;
        }
        Ok(())
    }

    /// Opens a container of `count` children (each at least one byte).
    fn children(&mut self, count: u64, fun_size: Option<(usize, u32)>, stack: &mut Vec<Frame>) -> Result<(), EtfError> {
        if count > self.remaining() {
            return Err(EtfError::Truncated);
        }
        if count > 0 {
            stack.push(Frame { left: count, fun_size });
        } else if let Some((at, size)) = fun_size {
            self.check_fun_size(at, size)?;
        }
        Ok(())
    }

    fn check_fun_size(&self, at: usize, size: u32) -> Result<(), EtfError> {
        let actual = self.pos.saturating_sub(at);
        if usize_len(size)? == actual {
            Ok(())
        } else {
            Err(invalid(format!("NEW_FUN_EXT size field {size}, actual size {actual}")))
        }
    }

    /// One term at `depth`; a container's children are left on `stack` for the caller's loop.
    fn term(&mut self, depth: u32, stack: &mut Vec<Frame>) -> Result<(), EtfError> {
        self.check_depth(depth)?;
        let start = self.pos;
        let tag = self.u8()?;
        let inner = depth.saturating_add(1);
        match tag {
            SMALL_INTEGER_EXT => {
                self.take(1)?;
            }
            INTEGER_EXT => {
                self.take(4)?;
            }
            NEW_FLOAT_EXT => finite(f64::from_be_bytes(self.array()?))?,
            FLOAT_EXT => self.old_float(start)?,
            ATOM_EXT | SMALL_ATOM_EXT | ATOM_UTF8_EXT | SMALL_ATOM_UTF8_EXT => self.atom_body(tag, start)?,
            SMALL_BIG_EXT => {
                let n = usize::from(self.u8()?);
                self.big_body(n)?;
            }
            LARGE_BIG_EXT => {
                let n = usize_len(self.u32()?)?;
                self.big_body(n)?;
            }
            PID_EXT | NEW_PID_EXT => self.pid_body(tag, depth)?,
            PORT_EXT | NEW_PORT_EXT | V4_PORT_EXT | REFERENCE_EXT => {
                self.atom(inner)?;
                self.take(match tag {
                    PORT_EXT | REFERENCE_EXT => 4 + 1,
                    NEW_PORT_EXT => 4 + 4,
                    _ => 8 + 4,
                })?;
            }
            NEW_REFERENCE_EXT | NEWER_REFERENCE_EXT => {
                let words = usize::from(self.u16()?);
                if words > MAX_REFERENCE_WORDS {
                    return Err(EtfError::TooLong { what: "reference id" });
                }
                self.atom(inner)?;
                self.take(if tag == NEW_REFERENCE_EXT { 1 } else { 4 })?;
                self.take(4 * words)?;
            }
            SMALL_TUPLE_EXT => {
                let n = u64::from(self.u8()?);
                self.children(n, None, stack)?;
            }
            LARGE_TUPLE_EXT => {
                let n = u64::from(self.u32()?);
                self.children(n, None, stack)?;
            }
            NIL_EXT => {}
            STRING_EXT => {
                let n = usize::from(self.u16()?);
                self.take(n)?;
            }
            LIST_EXT => {
                // The elements, then the tail (NIL_EXT for a proper list).
                let n = u64::from(self.u32()?);
                self.children(n + 1, None, stack)?;
            }
            BINARY_EXT => {
                let n = usize_len(self.u32()?)?;
                self.take(n)?;
            }
            BIT_BINARY_EXT => {
                let n = self.u32()?;
                let bits = self.u8()?;
                // As OTP: 1..=8 bits used in the last byte, or an empty bitstring with 0. eetf
                // shifts by `8 - bits` when n > 0: 0 or more than 8 would panic there.
                let valid = if n == 0 { bits == 0 } else { (1..=8).contains(&bits) };
                if !valid {
                    return Err(invalid(format!("BIT_BINARY_EXT of {n} bytes with {bits} tail bits")));
                }
                self.take(usize_len(n)?)?;
            }
            NEW_FUN_EXT => {
                let size_at = self.pos;
                let size = self.u32()?;
                self.take(1 + 16 + 4)?; // arity, uniq, index
                let free = u64::from(self.u32()?);
                self.atom(inner)?; // module
                self.fix_integer(inner)?; // old index
                self.fix_integer(inner)?; // old uniq
                self.pid(inner)?;
                self.children(free, Some((size_at, size)), stack)?;
            }
            EXPORT_EXT => {
                self.atom(inner)?; // module
                self.atom(inner)?; // function
                self.export_arity(inner)?;
            }
            FUN_EXT => {
                let free = u64::from(self.u32()?);
                self.pid(inner)?;
                self.atom(inner)?; // module
                self.fix_integer(inner)?; // index
                self.fix_integer(inner)?; // uniq
                self.children(free, None, stack)?;
            }
            MAP_EXT => {
                let n = u64::from(self.u32()?);
                self.map_entries = self.map_entries.saturating_add(n);
                self.children(2 * n, None, stack)?;
            }
            COMPRESSED_TERM => return Err(EtfError::Unsupported("compressed term")),
            ATOM_CACHE_REF => return Err(EtfError::Unsupported("atom cache reference")),
            DISTRIBUTION_HEADER => return Err(EtfError::Unsupported("distribution header")),
            LOCAL_EXT => return Err(EtfError::Unsupported("LOCAL_EXT")),
            other => return Err(EtfError::UnknownTag(other)),
        }
        Ok(())
    }

    /// An atom (any of the four tags) where the format requires one.
    fn atom(&mut self, depth: u32) -> Result<(), EtfError> {
        self.check_depth(depth)?;
        let start = self.pos;
        match self.u8()? {
            tag @ (ATOM_EXT | SMALL_ATOM_EXT | ATOM_UTF8_EXT | SMALL_ATOM_UTF8_EXT) => self.atom_body(tag, start),
            tag => Err(invalid(format!("expected an atom, found tag {tag}"))),
        }
    }

    fn atom_body(&mut self, tag: u8, start: usize) -> Result<(), EtfError> {
        let len = match tag {
            SMALL_ATOM_EXT | SMALL_ATOM_UTF8_EXT => usize::from(self.u8()?),
            _ => usize::from(self.u16()?),
        };
        let bytes = self.take(len)?;
        if tag == ATOM_UTF8_EXT || tag == SMALL_ATOM_UTF8_EXT {
            let name = std::str::from_utf8(bytes).map_err(|_| EtfError::BadAtom)?;
            if name.chars().count() > self.max_atom_chars {
                return Err(EtfError::TooLong { what: "atom" });
            }
            return Ok(());
        }
        // Latin-1: one byte per character. eetf reads these bytes as UTF-8, which is right only
        // for ASCII; anything else is rewritten as the equivalent UTF-8 atom.
        if len > self.max_atom_chars {
            return Err(EtfError::TooLong { what: "atom" });
        }
        if self.rewrite && !bytes.is_ascii() {
            let name: String = bytes.iter().map(|&b| char::from(b)).collect();
            let mut utf8 = Vec::with_capacity(name.len() + 3);
            match u8::try_from(name.len()) {
                Ok(n) => utf8.extend_from_slice(&[SMALL_ATOM_UTF8_EXT, n]),
                Err(_) => {
                    let n = u16::try_from(name.len()).map_err(|_| EtfError::TooLong { what: "atom" })?;
                    utf8.push(ATOM_UTF8_EXT);
                    utf8.extend_from_slice(&n.to_be_bytes());
                }
            }
            utf8.extend_from_slice(name.as_bytes());
            self.patch(start, &utf8);
        }
        Ok(())
    }

    fn big_body(&mut self, n: usize) -> Result<(), EtfError> {
        if n > self.max_bigint_bytes {
            return Err(EtfError::TooLong { what: "integer" });
        }
        let sign = self.u8()?;
        if sign > 1 {
            return Err(invalid(format!("big integer sign byte {sign}")));
        }
        self.take(n)?;
        Ok(())
    }

    /// `FLOAT_EXT`: 31 bytes of C-string text. Parsed as `f64` (eetf would use `f32`) and
    /// rewritten as `NEW_FLOAT_EXT`.
    fn old_float(&mut self, start: usize) -> Result<(), EtfError> {
        let raw: [u8; 31] = self.array()?;
        let text = raw.split(|&b| b == 0).next().unwrap_or(&[]);
        let text = std::str::from_utf8(text).map_err(|_| invalid("FLOAT_EXT is not text"))?;
        let value: f64 = text.parse().map_err(|_| invalid(format!("FLOAT_EXT {text:?} is not a float")))?;
        finite(value)?;
        let mut new_float = [NEW_FLOAT_EXT; 9];
        for (slot, byte) in new_float.iter_mut().skip(1).zip(value.to_be_bytes()) {
            *slot = byte;
        }
        self.patch(start, &new_float);
        Ok(())
    }

    /// `SMALL_INTEGER_EXT` or `INTEGER_EXT`, where eetf requires a `FixInteger`.
    fn fix_integer(&mut self, depth: u32) -> Result<(), EtfError> {
        self.check_depth(depth)?;
        match self.u8()? {
            SMALL_INTEGER_EXT => self.take(1).map(drop),
            INTEGER_EXT => self.take(4).map(drop),
            tag => Err(invalid(format!("expected a fixed-size integer, found tag {tag}"))),
        }
    }

    /// `EXPORT_EXT`'s arity: a fixed-size integer in 0..=255.
    fn export_arity(&mut self, depth: u32) -> Result<(), EtfError> {
        self.check_depth(depth)?;
        match self.u8()? {
            SMALL_INTEGER_EXT => self.take(1).map(drop),
            INTEGER_EXT => {
                let arity = i32::from_be_bytes(self.array()?);
                if (0..=255).contains(&arity) {
                    Ok(())
                } else {
                    Err(invalid(format!("EXPORT_EXT arity {arity}")))
                }
            }
            tag => Err(invalid(format!("EXPORT_EXT arity has tag {tag}"))),
        }
    }

    /// A pid where the format requires one (funs).
    fn pid(&mut self, depth: u32) -> Result<(), EtfError> {
        self.check_depth(depth)?;
        match self.u8()? {
            tag @ (PID_EXT | NEW_PID_EXT) => self.pid_body(tag, depth),
            tag => Err(invalid(format!("expected a pid, found tag {tag}"))),
        }
    }

    fn pid_body(&mut self, tag: u8, depth: u32) -> Result<(), EtfError> {
        self.atom(depth.saturating_add(1))?;
        self.take(if tag == PID_EXT { 4 + 4 + 1 } else { 4 + 4 + 4 })?;
        Ok(())
    }
}

/// Work left for the iterative encoder.
enum Job<'t> {
    Term(&'t Term),
    Nil,
    /// Fill in the `NEW_FUN_EXT` size field that starts at this offset.
    FunSize(usize),
}

fn encode_term(root: &Term, out: &mut Vec<u8>) -> Result<(), EtfError> {
    let mut jobs = vec![Job::Term(root)];
    while let Some(job) = jobs.pop() {
        match job {
            Job::Nil => out.push(NIL_EXT),
            Job::FunSize(at) => {
                let size =
                    u32::try_from(out.len().saturating_sub(at)).map_err(|_| EtfError::TooLong { what: "fun" })?;
                let slot = out.get_mut(at..at.saturating_add(4)).ok_or_else(|| invalid("fun size slot"))?;
                slot.copy_from_slice(&size.to_be_bytes());
            }
            Job::Term(term) => encode_one(term, out, &mut jobs)?,
        }
    }
    Ok(())
}

fn len_u32(len: usize, what: &'static str) -> Result<[u8; 4], EtfError> {
    u32::try_from(len).map(u32::to_be_bytes).map_err(|_| EtfError::TooLong { what })
}

fn encode_one<'t>(term: &'t Term, out: &mut Vec<u8>, jobs: &mut Vec<Job<'t>>) -> Result<(), EtfError> {
    match term {
        Term::Atom(atom) => put_atom(atom, out)?,
        Term::FixInteger(i) => put_fix(i.value, out),
        Term::BigInteger(big) => {
            let negative = big.value < eetf::BigInteger::from(0i32).value;
            let (_, magnitude) = big.value.to_bytes_le();
            match u8::try_from(magnitude.len()) {
                Ok(n) => out.extend_from_slice(&[SMALL_BIG_EXT, n]),
                Err(_) => {
                    out.push(LARGE_BIG_EXT);
                    out.extend_from_slice(&len_u32(magnitude.len(), "integer")?);
                }
            }
            out.push(u8::from(negative));
            out.extend_from_slice(&magnitude);
        }
        Term::Float(f) => {
            finite(f.value)?;
            out.push(NEW_FLOAT_EXT);
            out.extend_from_slice(&f.value.to_be_bytes());
        }
        Term::Pid(pid) => put_pid(pid, out)?,
        Term::Port(port) => {
            match u32::try_from(port.id) {
                Ok(id) => {
                    out.push(NEW_PORT_EXT);
                    put_atom(&port.node, out)?;
                    out.extend_from_slice(&id.to_be_bytes());
                }
                Err(_) => {
                    out.push(V4_PORT_EXT);
                    put_atom(&port.node, out)?;
                    out.extend_from_slice(&port.id.to_be_bytes());
                }
            }
            out.extend_from_slice(&port.creation.to_be_bytes());
        }
        Term::Reference(r) => {
            if r.id.len() > MAX_REFERENCE_WORDS {
                return Err(EtfError::TooLong { what: "reference id" });
            }
            out.push(NEWER_REFERENCE_EXT);
            out.extend_from_slice(&u16::try_from(r.id.len()).unwrap_or(0).to_be_bytes());
            put_atom(&r.node, out)?;
            out.extend_from_slice(&r.creation.to_be_bytes());
            for word in &r.id {
                out.extend_from_slice(&word.to_be_bytes());
            }
        }
        Term::ExternalFun(f) => {
            out.push(EXPORT_EXT);
            put_atom(&f.module, out)?;
            put_atom(&f.function, out)?;
            put_fix(i32::from(f.arity), out);
        }
        Term::InternalFun(f) => match &**f {
            eetf::InternalFun::Old { module, pid, free_vars, index, uniq } => {
                out.push(FUN_EXT);
                out.extend_from_slice(&len_u32(free_vars.len(), "fun environment")?);
                put_pid(pid, out)?;
                put_atom(module, out)?;
                put_fix(*index, out);
                put_fix(*uniq, out);
                jobs.extend(free_vars.iter().rev().map(Job::Term));
            }
            eetf::InternalFun::New { module, arity, pid, free_vars, index, uniq, old_index, old_uniq } => {
                out.push(NEW_FUN_EXT);
                let at = out.len();
                out.extend_from_slice(&[0; 4]);
                out.push(*arity);
                out.extend_from_slice(uniq);
                out.extend_from_slice(&index.to_be_bytes());
                out.extend_from_slice(&len_u32(free_vars.len(), "fun environment")?);
                put_atom(module, out)?;
                put_fix(*old_index, out);
                put_fix(*old_uniq, out);
                put_pid(pid, out)?;
                jobs.push(Job::FunSize(at));
                jobs.extend(free_vars.iter().rev().map(Job::Term));
            }
        },
        Term::Binary(b) => {
            out.push(BINARY_EXT);
            out.extend_from_slice(&len_u32(b.bytes.len(), "binary")?);
            out.extend_from_slice(&b.bytes);
        }
        Term::BitBinary(b) => {
            let tail = b.tail_bits_size;
            let valid = if b.bytes.is_empty() { tail == 0 } else { (1..=8).contains(&tail) };
            if !valid {
                return Err(invalid(format!("bit binary of {} bytes with {tail} tail bits", b.bytes.len())));
            }
            out.push(BIT_BINARY_EXT);
            out.extend_from_slice(&len_u32(b.bytes.len(), "binary")?);
            out.push(tail);
            if let Some((last, init)) = b.bytes.split_last() {
                out.extend_from_slice(init);
                // eetf keeps the used bits of the last byte right-aligned; ETF wants them at the top.
                out.push(last.checked_shl(u32::from(8 - tail)).unwrap_or(0));
            }
        }
        Term::ByteList(l) => match u16::try_from(l.bytes.len()) {
            Ok(n) => {
                out.push(STRING_EXT);
                out.extend_from_slice(&n.to_be_bytes());
                out.extend_from_slice(&l.bytes);
            }
            Err(_) => {
                out.push(LIST_EXT);
                out.extend_from_slice(&len_u32(l.bytes.len(), "list")?);
                for &b in &l.bytes {
                    out.extend_from_slice(&[SMALL_INTEGER_EXT, b]);
                }
                out.push(NIL_EXT);
            }
        },
        Term::List(l) => {
            if l.elements.is_empty() {
                out.push(NIL_EXT);
            } else {
                out.push(LIST_EXT);
                out.extend_from_slice(&len_u32(l.elements.len(), "list")?);
                jobs.push(Job::Nil);
                jobs.extend(l.elements.iter().rev().map(Job::Term));
            }
        }
        Term::ImproperList(l) => {
            out.push(LIST_EXT);
            out.extend_from_slice(&len_u32(l.elements.len(), "list")?);
            jobs.push(Job::Term(&l.last));
            jobs.extend(l.elements.iter().rev().map(Job::Term));
        }
        Term::Tuple(t) => {
            match u8::try_from(t.elements.len()) {
                Ok(n) => out.extend_from_slice(&[SMALL_TUPLE_EXT, n]),
                Err(_) => {
                    out.push(LARGE_TUPLE_EXT);
                    out.extend_from_slice(&len_u32(t.elements.len(), "tuple")?);
                }
            }
            jobs.extend(t.elements.iter().rev().map(Job::Term));
        }
        Term::Map(m) => {
            out.push(MAP_EXT);
            out.extend_from_slice(&len_u32(m.map.len(), "map")?);
            for (k, v) in &m.map {
                jobs.push(Job::Term(v));
                jobs.push(Job::Term(k));
            }
        }
    }
    Ok(())
}

fn put_fix(value: i32, out: &mut Vec<u8>) {
    match u8::try_from(value) {
        Ok(b) => out.extend_from_slice(&[SMALL_INTEGER_EXT, b]),
        Err(_) => {
            out.push(INTEGER_EXT);
            out.extend_from_slice(&value.to_be_bytes());
        }
    }
}

fn put_atom(atom: &eetf::Atom, out: &mut Vec<u8>) -> Result<(), EtfError> {
    let name = atom.name.as_bytes();
    if atom.name.chars().count() > OTP_MAX_ATOM_CHARS as usize {
        return Err(EtfError::TooLong { what: "atom" });
    }
    match u8::try_from(name.len()) {
        Ok(n) => out.extend_from_slice(&[SMALL_ATOM_UTF8_EXT, n]),
        Err(_) => {
            // At most 255 characters of at most 4 bytes: fits a u16.
            let n = u16::try_from(name.len()).map_err(|_| EtfError::TooLong { what: "atom" })?;
            out.push(ATOM_UTF8_EXT);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
    out.extend_from_slice(name);
    Ok(())
}

fn put_pid(pid: &eetf::Pid, out: &mut Vec<u8>) -> Result<(), EtfError> {
    out.push(NEW_PID_EXT);
    put_atom(&pid.node, out)?;
    out.extend_from_slice(&pid.id.to_be_bytes());
    out.extend_from_slice(&pid.serial.to_be_bytes());
    out.extend_from_slice(&pid.creation.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use eetf::{
        Atom, BigInteger, Binary, BitBinary, ByteList, ExternalFun, FixInteger, Float, ImproperList, InternalFun, List,
        Map, Pid, Port, Reference, Tuple,
    };
    use std::collections::HashMap;
    use std::io::Read;
    use std::process::{Child, Command, Stdio};
    use std::sync::mpsc;
    use std::time::Duration;

    fn lim() -> Limits {
        Limits::default()
    }

    fn atom(name: &str) -> Term {
        Term::from(Atom::from(name))
    }

    fn int(v: i32) -> Term {
        Term::from(FixInteger::from(v))
    }

    /// Decodes a whole buffer, asserting it is exactly one term.
    fn dec(bytes: &[u8]) -> Result<Term, EtfError> {
        let (term, used) = decode_versioned(bytes, &lim())?;
        assert_eq!(used, bytes.len(), "decoded length of {bytes:?}");
        assert_eq!(check_term(&bytes[1..], &lim()), Ok(used - 1));
        Ok(term)
    }

    fn enc(term: &Term) -> Vec<u8> {
        let mut out = Vec::new();
        encode_versioned(term, &mut out).expect("encode");
        out
    }

    fn eetf_enc(term: &Term) -> Vec<u8> {
        let mut out = Vec::new();
        term.encode(&mut out).expect("eetf encode");
        out
    }

    /// `[131, tag, ...]` from parts.
    fn v(parts: &[&[u8]]) -> Vec<u8> {
        let mut out = vec![VERSION];
        for p in parts {
            out.extend_from_slice(p);
        }
        out
    }

    /// Structural equality that does not depend on `eetf::Map`'s iteration-order hash.
    fn same(a: &Term, b: &Term) -> bool {
        fn all(a: &[Term], b: &[Term]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| same(x, y))
        }
        match (a, b) {
            (Term::List(x), Term::List(y)) => all(&x.elements, &y.elements),
            (Term::Tuple(x), Term::Tuple(y)) => all(&x.elements, &y.elements),
            (Term::ImproperList(x), Term::ImproperList(y)) => all(&x.elements, &y.elements) && same(&x.last, &y.last),
            (Term::Map(x), Term::Map(y)) => {
                x.map.len() == y.map.len()
                    && x.map.iter().all(|(k, v)| y.map.iter().any(|(k2, v2)| same(k, k2) && same(v, v2)))
            }
            (Term::InternalFun(x), Term::InternalFun(y)) => {
                let strip = |f: &InternalFun| {
                    let mut f = f.clone();
                    match &mut f {
                        InternalFun::Old { free_vars, .. } | InternalFun::New { free_vars, .. } => free_vars.clear(),
                    }
                    f
                };
                let vars = |f: &InternalFun| match f {
                    InternalFun::Old { free_vars, .. } | InternalFun::New { free_vars, .. } => free_vars.clone(),
                };
                strip(x) == strip(y) && all(&vars(x), &vars(y))
            }
            _ => a == b,
        }
    }

    fn roundtrip(term: &Term) {
        let bytes = enc(term);
        let back = dec(&bytes).unwrap_or_else(|e| panic!("{term:?} -> {bytes:?}: {e}"));
        assert!(same(term, &back), "{term:?} came back as {back:?}");
        let by_eetf = Term::decode(&bytes[..]).expect("eetf decodes our encoding");
        assert!(same(term, &by_eetf), "{term:?}: eetf decoded {by_eetf:?}");
    }

    fn nested(open: &[u8], close: &[u8], depth: usize) -> Vec<u8> {
        let mut out = vec![VERSION];
        for _ in 0..depth {
            out.extend_from_slice(open);
        }
        out.push(NIL_EXT);
        for _ in 0..depth {
            out.extend_from_slice(close);
        }
        out
    }

    // ---------------------------------------------------------------- accepted, per tag

    #[test]
    fn integers() {
        assert_eq!(dec(&eetf_enc(&int(7))), Ok(int(7)));
        assert_eq!(dec(&eetf_enc(&int(-70000))), Ok(int(-70000)));
        assert_eq!(dec(&v(&[&[INTEGER_EXT, 0, 0, 0, 5]])), Ok(int(5)));
        let big = Term::from(BigInteger::from(u64::MAX));
        assert_eq!(dec(&eetf_enc(&big)), Ok(big.clone()));
        roundtrip(&big);
        let neg = Term::from(BigInteger::from(i64::MIN));
        assert_eq!(dec(&eetf_enc(&neg)), Ok(neg.clone()));
        roundtrip(&neg);
        // Zero digits, "negative zero", and a LARGE_BIG_EXT.
        assert_eq!(dec(&v(&[&[SMALL_BIG_EXT, 0, 0]])), Ok(Term::from(BigInteger::from(0))));
        assert_eq!(dec(&v(&[&[SMALL_BIG_EXT, 0, 1]])), Ok(Term::from(BigInteger::from(0))));
        let mut large = v(&[&[LARGE_BIG_EXT, 0, 0, 1, 44, 1]]);
        large.extend(std::iter::repeat_n(0xAB, 300));
        let t = dec(&large).unwrap();
        roundtrip(&t);
        match &t {
            Term::BigInteger(b) => assert!(b.value < BigInteger::from(0).value),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn floats() {
        let f = Term::from(Float::try_from(-2.5e300).unwrap());
        assert_eq!(dec(&eetf_enc(&f)), Ok(f.clone()));
        roundtrip(&f);
        // FLOAT_EXT as OTP writes it ("%.20e", NUL padded), decoded as an f64 (eetf: f32).
        let mut old = v(&[&[FLOAT_EXT], b"1.00000000000000005551e-01"]);
        old.resize(2 + 31, 0);
        assert_eq!(dec(&old), Ok(Term::from(Float { value: 0.1 })));
        // Text stops at the first NUL, as in C.
        let mut old = v(&[&[FLOAT_EXT], b"1.5\0junk"]);
        old.resize(2 + 31, 0);
        assert_eq!(dec(&old), Ok(Term::from(Float { value: 1.5 })));
        // Inside a container, with bytes after it (the rewrite keeps positions right).
        let mut t = v(&[&[SMALL_TUPLE_EXT, 3, SMALL_INTEGER_EXT, 1, FLOAT_EXT], b"2.5"]);
        t.resize(t.len() + 28, 0);
        t.extend_from_slice(&[SMALL_INTEGER_EXT, 3]);
        assert_eq!(dec(&t), Ok(Term::from(Tuple::from(vec![int(1), Term::from(Float { value: 2.5 }), int(3)]))));
    }

    #[test]
    fn atoms_all_tags() {
        assert_eq!(dec(&v(&[&[ATOM_EXT, 0, 3], b"abc"])), Ok(atom("abc")));
        assert_eq!(dec(&v(&[&[SMALL_ATOM_EXT, 3], b"abc"])), Ok(atom("abc")));
        assert_eq!(dec(&v(&[&[ATOM_UTF8_EXT, 0, 3], b"abc"])), Ok(atom("abc")));
        assert_eq!(dec(&v(&[&[SMALL_ATOM_UTF8_EXT, 3], b"abc"])), Ok(atom("abc")));
        assert_eq!(dec(&v(&[&[SMALL_ATOM_UTF8_EXT, 0]])), Ok(atom("")));
        let emoji = atom("h\u{e9}llo\u{1F600}");
        assert_eq!(dec(&eetf_enc(&emoji)), Ok(emoji.clone()));
        roundtrip(&emoji);
    }

    #[test]
    fn latin1_atoms_are_transcoded() {
        // 'é' as OTP 25 term_to_binary writes it.
        assert_eq!(dec(&[131, 100, 0, 1, 233]), Ok(atom("\u{e9}")));
        assert_eq!(dec(&[131, 115, 1, 233]), Ok(atom("\u{e9}")));
        // Latin-1 "Ã©" is two characters; eetf alone would read the bytes as UTF-8 "é".
        assert_eq!(dec(&[131, 115, 2, 0xC3, 0xA9]), Ok(atom("\u{c3}\u{a9}")));
        // 255 latin-1 characters: 510 UTF-8 bytes, rewritten as ATOM_UTF8_EXT.
        let mut long = v(&[&[ATOM_EXT, 0, 255]]);
        long.extend(std::iter::repeat_n(0xE9, 255));
        let name: String = std::iter::repeat_n('\u{e9}', 255).collect();
        assert_eq!(dec(&long), Ok(atom(&name)));
        // Nested in a pid, a fun and a tuple, with other terms around the patches.
        let mut t = v(&[&[SMALL_TUPLE_EXT, 3, SMALL_ATOM_EXT, 1, 0xFF, NEW_PID_EXT, SMALL_ATOM_EXT, 2, b'n', 0xE9]]);
        t.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, SMALL_ATOM_EXT, 1, b'z']);
        let want = Term::from(Tuple::from(vec![atom("\u{ff}"), Term::from(Pid::new("n\u{e9}", 1, 2, 3)), atom("z")]));
        assert_eq!(dec(&t), Ok(want));
        // check_term does not rewrite and reports the original length.
        assert_eq!(check_term(&t[1..], &lim()), Ok(t.len() - 1));
    }

    #[test]
    fn pids_ports_references() {
        let pid = Term::from(Pid::new("a@b", 1, 2, 3));
        assert_eq!(dec(&eetf_enc(&pid)), Ok(pid.clone()));
        roundtrip(&pid);
        let old_pid = v(&[&[PID_EXT, SMALL_ATOM_UTF8_EXT, 3], b"a@b", &[0, 0, 0, 1, 0, 0, 0, 2, 3]]);
        assert_eq!(dec(&old_pid), Ok(pid));

        let port = Term::from(Port { node: Atom::from("a@b"), id: 9, creation: 4 });
        assert_eq!(dec(&eetf_enc(&port)), Ok(port.clone()));
        roundtrip(&port);
        assert_eq!(dec(&v(&[&[PORT_EXT, SMALL_ATOM_UTF8_EXT, 3], b"a@b", &[0, 0, 0, 9, 4]])), Ok(port));
        let v4 = Term::from(Port { node: Atom::from("a@b"), id: 1 << 40, creation: 4 });
        assert_eq!(dec(&eetf_enc(&v4)), Ok(v4.clone()));
        roundtrip(&v4);

        let r = Term::from(Reference { node: Atom::from("a@b"), id: vec![1, 2, 3], creation: 7 });
        assert_eq!(dec(&eetf_enc(&r)), Ok(r.clone()));
        roundtrip(&r);
        let new_ref =
            v(&[&[NEW_REFERENCE_EXT, 0, 3, SMALL_ATOM_EXT, 3], b"a@b", &[7, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]]);
        assert_eq!(dec(&new_ref), Ok(r));
        let old_ref = v(&[&[REFERENCE_EXT, SMALL_ATOM_EXT, 3], b"a@b", &[0, 0, 0, 1, 7]]);
        assert_eq!(dec(&old_ref), Ok(Term::from(Reference { node: Atom::from("a@b"), id: vec![1], creation: 7 })));
        // OTP accepts 0 to 5 id words.
        for words in 0..=5u32 {
            roundtrip(&Term::from(Reference { node: Atom::from("n"), id: (0..words).collect(), creation: 1 }));
        }
    }

    fn new_fun(free_vars: Vec<Term>) -> Term {
        Term::from(InternalFun::New {
            module: Atom::from("m"),
            arity: 2,
            pid: Pid::new("a@b", 1, 2, 3),
            free_vars,
            index: 5,
            uniq: [9; 16],
            old_index: -1,
            old_uniq: 123456,
        })
    }

    #[test]
    fn funs() {
        for f in
            [new_fun(vec![]), new_fun(vec![int(1), Term::from(Tuple::from(vec![atom("x"), Term::from(List::nil())]))])]
        {
            // eetf's encoder writes the size field as OTP does: the checked size agrees.
            assert_eq!(dec(&eetf_enc(&f)), Ok(f.clone()));
            assert_eq!(enc(&f), eetf_enc(&f));
            roundtrip(&f);
        }
        let old = Term::from(InternalFun::Old {
            module: Atom::from("m"),
            pid: Pid::new("a@b", 1, 2, 3),
            free_vars: vec![atom("v"), int(-5)],
            index: 1,
            uniq: 2,
        });
        assert_eq!(dec(&eetf_enc(&old)), Ok(old.clone()));
        roundtrip(&old);
        let export = Term::from(ExternalFun::from(("lists", "map", 2)));
        assert_eq!(dec(&eetf_enc(&export)), Ok(export.clone()));
        roundtrip(&export);
        let wide_arity =
            v(&[&[EXPORT_EXT, SMALL_ATOM_EXT, 1, b'l', SMALL_ATOM_EXT, 1, b'm', INTEGER_EXT, 0, 0, 0, 255]]);
        assert_eq!(dec(&wide_arity), Ok(Term::from(ExternalFun::from(("l", "m", 255)))));
    }

    #[test]
    fn binaries_and_strings() {
        let b = Term::from(Binary::from(vec![1, 2, 3]));
        assert_eq!(dec(&eetf_enc(&b)), Ok(b.clone()));
        roundtrip(&b);
        roundtrip(&Term::from(Binary::from(vec![])));
        // <<1, 2:3>>: eetf keeps the 3 used bits right-aligned (2), ETF left-aligned (0x40).
        let bits = Term::from(BitBinary::from((vec![1, 2], 3)));
        assert_eq!(dec(&v(&[&[BIT_BINARY_EXT, 0, 0, 0, 2, 3, 1, 0x40]])), Ok(bits.clone()));
        assert_eq!(dec(&eetf_enc(&bits)), Ok(bits.clone()));
        roundtrip(&bits);
        roundtrip(&Term::from(BitBinary::from((vec![0xFF], 8))));
        assert_eq!(dec(&v(&[&[BIT_BINARY_EXT, 0, 0, 0, 0, 0]])), Ok(Term::from(BitBinary::from((vec![], 0)))));
        let s = Term::from(ByteList::from("hello"));
        assert_eq!(dec(&eetf_enc(&s)), Ok(s.clone()));
        roundtrip(&s);
        assert_eq!(dec(&v(&[&[STRING_EXT, 0, 0]])), Ok(Term::from(ByteList::from(vec![]))));
        // Longer than STRING_EXT allows: sent as a list of small integers.
        let long = Term::from(ByteList::from(vec![7u8; 70_000]));
        let back = dec(&enc(&long)).unwrap();
        assert_eq!(back, Term::from(List::from(vec![int(7); 70_000])));
    }

    #[test]
    fn lists_tuples_maps() {
        assert_eq!(dec(&[131, NIL_EXT]), Ok(Term::from(List::nil())));
        let l = Term::from(List::from(vec![atom("a"), int(300), Term::from(List::nil())]));
        assert_eq!(dec(&eetf_enc(&l)), Ok(l.clone()));
        roundtrip(&l);
        let improper = Term::from(ImproperList::from((vec![int(1), int(2)], int(3))));
        assert_eq!(dec(&eetf_enc(&improper)), Ok(improper.clone()));
        roundtrip(&improper);
        // LIST_EXT with no elements: OTP reads it as its tail.
        assert_eq!(dec(&[131, LIST_EXT, 0, 0, 0, 0, NIL_EXT]), Ok(Term::from(List::nil())));
        roundtrip(&Term::from(ImproperList::from((vec![], atom("t")))));
        // eetf's encoder sends [-1] as STRING_EXT [255]; ours keeps the value.
        let neg = Term::from(List::from(vec![int(-1), int(0)]));
        assert_eq!(dec(&eetf_enc(&neg)), Ok(Term::from(ByteList::from(vec![255, 0]))));
        roundtrip(&neg);
        roundtrip(&Term::from(List::from(vec![int(1), int(2)])));

        let t = Term::from(Tuple::from(vec![atom("ok"), int(1)]));
        assert_eq!(dec(&eetf_enc(&t)), Ok(t.clone()));
        roundtrip(&Term::from(Tuple::nil()));
        let large = Term::from(Tuple::from(vec![int(1); 300]));
        assert_eq!(enc(&large)[1], LARGE_TUPLE_EXT);
        roundtrip(&large);
        assert_eq!(
            dec(&[131, LARGE_TUPLE_EXT, 0, 0, 0, 1, NIL_EXT]),
            Ok(Term::from(Tuple::from(vec![Term::from(List::nil())])))
        );

        let m = Term::from(Map::from([(atom("a"), int(1)), (Term::from(Binary::from(vec![1])), l.clone())]));
        assert_eq!(dec(&eetf_enc(&m)), Ok(m.clone()));
        roundtrip(&m);
        roundtrip(&Term::from(Map::from(HashMap::<Term, Term>::new())));
    }

    #[test]
    fn trailing_bytes_are_left_alone() {
        let mut frame = enc(&Term::from(Tuple::from(vec![int(2), atom(""), Term::from(Pid::new("a@b", 1, 0, 1))])));
        let first = frame.len();
        frame.extend_from_slice(&enc(&atom("payload")));
        let (control, used) = decode_versioned(&frame, &lim()).unwrap();
        assert_eq!(used, first);
        assert!(matches!(control, Term::Tuple(_)));
        let (payload, used2) = decode_versioned(&frame[used..], &lim()).unwrap();
        assert_eq!((payload, used + used2), (atom("payload"), frame.len()));
        assert_eq!(check_term(&frame[1..], &lim()), Ok(first - 1));
    }

    // ---------------------------------------------------------------- rejected

    #[test]
    fn version_and_tags() {
        assert_eq!(decode_versioned(&[], &lim()), Err(EtfError::Truncated));
        assert_eq!(decode_versioned(&[131], &lim()), Err(EtfError::Truncated));
        assert_eq!(decode_versioned(&[130, NIL_EXT], &lim()), Err(EtfError::BadVersion(130)));
        assert_eq!(check_term(&[], &lim()), Err(EtfError::Truncated));
        for (tag, what) in [
            (COMPRESSED_TERM, "compressed term"),
            (ATOM_CACHE_REF, "atom cache reference"),
            (DISTRIBUTION_HEADER, "distribution header"),
            (LOCAL_EXT, "LOCAL_EXT"),
        ] {
            let body = [tag, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0];
            assert_eq!(decode_versioned(&v(&[&body]), &lim()), Err(EtfError::Unsupported(what)));
            // Also nested.
            assert_eq!(decode_versioned(&v(&[&[SMALL_TUPLE_EXT, 1], &body]), &lim()), Err(EtfError::Unsupported(what)));
        }
        for tag in [0u8, 69, 71, 83, 96, 122, 255] {
            assert_eq!(decode_versioned(&[131, tag, 0, 0, 0, 0], &lim()), Err(EtfError::UnknownTag(tag)));
        }
    }

    #[test]
    fn length_limits() {
        let mut latin = v(&[&[ATOM_EXT, 1, 0]]);
        latin.extend(std::iter::repeat_n(b'a', 256));
        assert_eq!(decode_versioned(&latin, &lim()), Err(EtfError::TooLong { what: "atom" }));
        let name: String = std::iter::repeat_n('\u{1F600}', 256).collect();
        let utf8 = v(&[&[ATOM_UTF8_EXT, 4, 0], name.as_bytes()]);
        assert_eq!(decode_versioned(&utf8, &lim()), Err(EtfError::TooLong { what: "atom" }));
        let ok: String = std::iter::repeat_n('\u{1F600}', 255).collect();
        assert_eq!(dec(&v(&[&[ATOM_UTF8_EXT, 3, 0xFC], ok.as_bytes()])), Ok(atom(&ok)));
        // A larger configured limit still stops at OTP's 255.
        let generous = Limits { max_atom_chars: 100_000, ..lim() };
        assert_eq!(decode_versioned(&latin, &generous), Err(EtfError::TooLong { what: "atom" }));
        let tight = Limits { max_atom_chars: 3, ..lim() };
        assert_eq!(
            decode_versioned(&[131, SMALL_ATOM_UTF8_EXT, 4, b'a', b'b', b'c', b'd'], &tight),
            Err(EtfError::TooLong { what: "atom" })
        );
        // Atoms inside pids are limited too.
        let pid = v(&[&[NEW_PID_EXT, SMALL_ATOM_UTF8_EXT, 4], b"abcd", &[0; 12]]);
        assert_eq!(decode_versioned(&pid, &tight), Err(EtfError::TooLong { what: "atom" }));

        let small = Limits { max_bigint_bytes: 4, ..lim() };
        assert_eq!(
            decode_versioned(&[131, SMALL_BIG_EXT, 5, 0, 1, 2, 3, 4, 5], &small),
            Err(EtfError::TooLong { what: "integer" })
        );
        assert!(decode_versioned(&[131, SMALL_BIG_EXT, 4, 0, 1, 2, 3, 4], &small).is_ok());
        let mut huge = v(&[&[LARGE_BIG_EXT, 0, 0, 0x40, 1, 0]]);
        huge.extend(std::iter::repeat_n(1, 0x4001));
        assert_eq!(decode_versioned(&huge, &lim()), Err(EtfError::TooLong { what: "integer" }));

        let six = v(&[&[NEWER_REFERENCE_EXT, 0, 6, SMALL_ATOM_EXT, 1, b'n'], &[0; 4 + 24]]);
        assert_eq!(decode_versioned(&six, &lim()), Err(EtfError::TooLong { what: "reference id" }));
    }

    #[test]
    fn counts_checked_against_remaining_bytes() {
        let max = Limits { max_bigint_bytes: u32::MAX, ..lim() };
        for body in [
            &[LARGE_TUPLE_EXT, 0xFF, 0xFF, 0xFF, 0xFF, NIL_EXT][..],
            &[LIST_EXT, 0xFF, 0xFF, 0xFF, 0xFF, NIL_EXT, NIL_EXT],
            &[MAP_EXT, 0xFF, 0xFF, 0xFF, 0xFF, NIL_EXT, NIL_EXT],
            &[MAP_EXT, 0, 0, 0, 2, NIL_EXT, NIL_EXT, NIL_EXT],
            &[BINARY_EXT, 0xFF, 0xFF, 0xFF, 0xFF, 1, 2],
            &[BIT_BINARY_EXT, 0xFF, 0xFF, 0xFF, 0xFF, 8, 1],
            &[STRING_EXT, 0xFF, 0xFF, 1],
            &[LARGE_BIG_EXT, 0xFF, 0xFF, 0xFF, 0xFF, 0, 1],
            &[SMALL_TUPLE_EXT, 3, NIL_EXT, NIL_EXT],
            &[SMALL_ATOM_UTF8_EXT, 9, b'a'],
            &[NEWER_REFERENCE_EXT, 0, 5, SMALL_ATOM_EXT, 1, b'n', 0, 0, 0, 0, 1, 2, 3],
            &[
                FUN_EXT,
                0xFF,
                0xFF,
                0xFF,
                0xFF,
                NEW_PID_EXT,
                SMALL_ATOM_EXT,
                1,
                b'n',
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
                SMALL_ATOM_EXT,
                1,
                b'm',
                SMALL_INTEGER_EXT,
                0,
                SMALL_INTEGER_EXT,
                0,
                NIL_EXT,
            ],
            &[NEW_FLOAT_EXT, 0, 0, 0],
            &[INTEGER_EXT, 0],
        ] {
            assert_eq!(decode_versioned(&v(&[body]), &max), Err(EtfError::Truncated), "{body:?}");
        }
        // NEW_FUN_EXT claiming 4 G free variables.
        let mut f = eetf_enc(&new_fun(vec![]));
        f[1 + 1 + 4 + 1 + 16 + 4..][..4].copy_from_slice(&[0xFF; 4]);
        assert_eq!(decode_versioned(&f, &lim()), Err(EtfError::Truncated));
    }

    #[test]
    fn bad_atoms_and_types() {
        assert_eq!(decode_versioned(&[131, SMALL_ATOM_UTF8_EXT, 1, 0xFF], &lim()), Err(EtfError::BadAtom));
        assert_eq!(decode_versioned(&[131, ATOM_UTF8_EXT, 0, 2, 0xC3, 0x28], &lim()), Err(EtfError::BadAtom));
        let bad = |bytes: &[u8]| match decode_versioned(bytes, &lim()) {
            Err(EtfError::Invalid(_)) => {}
            other => panic!("{bytes:?}: {other:?}"),
        };
        // Non-finite floats, bad FLOAT_EXT text.
        bad(&v(&[&[NEW_FLOAT_EXT], &f64::NAN.to_be_bytes()]));
        bad(&v(&[&[NEW_FLOAT_EXT], &f64::INFINITY.to_be_bytes()]));
        for text in [&b"abc"[..], b"1e400", b"inf", b"NaN", b" 1.5", b"", &[0xFF, b'1']] {
            let mut old = v(&[&[FLOAT_EXT], text]);
            old.resize(2 + 31, 0);
            bad(&old);
        }
        // Big integer sign byte.
        bad(&[131, SMALL_BIG_EXT, 1, 2, 5]);
        // Bit binaries: tail bits 0 or > 8 (eetf's shift panics), empty with bits.
        bad(&[131, BIT_BINARY_EXT, 0, 0, 0, 1, 0, 0xFF]);
        bad(&[131, BIT_BINARY_EXT, 0, 0, 0, 1, 9, 0xFF]);
        bad(&[131, BIT_BINARY_EXT, 0, 0, 0, 1, 255, 0xFF]);
        bad(&[131, BIT_BINARY_EXT, 0, 0, 0, 0, 3]);
        // Nodes, modules and functions must be atoms.
        bad(&v(&[&[NEW_PID_EXT, SMALL_INTEGER_EXT, 1], &[0; 12]]));
        bad(&v(&[&[PORT_EXT, NIL_EXT], &[0; 5]]));
        bad(&v(&[&[NEWER_REFERENCE_EXT, 0, 1, BINARY_EXT, 0, 0, 0, 0], &[0; 8]]));
        bad(&[131, EXPORT_EXT, SMALL_ATOM_EXT, 1, b'l', NIL_EXT, SMALL_INTEGER_EXT, 1]);
        // Export arity: a fixed integer in 0..=255.
        bad(&[131, EXPORT_EXT, SMALL_ATOM_EXT, 1, b'l', SMALL_ATOM_EXT, 1, b'm', INTEGER_EXT, 0, 0, 1, 0]);
        bad(&[131, EXPORT_EXT, SMALL_ATOM_EXT, 1, b'l', SMALL_ATOM_EXT, 1, b'm', INTEGER_EXT, 0xFF, 0xFF, 0xFF, 0xFF]);
        bad(&[131, EXPORT_EXT, SMALL_ATOM_EXT, 1, b'l', SMALL_ATOM_EXT, 1, b'm', SMALL_BIG_EXT, 1, 0, 1]);
        // Fun fields: size field, pid, integers.
        let good = eetf_enc(&new_fun(vec![int(1)]));
        assert!(decode_versioned(&good, &lim()).is_ok());
        let mut wrong_size = good.clone();
        wrong_size[5] += 1;
        bad(&wrong_size);
        let mut wrong_size = eetf_enc(&new_fun(vec![]));
        wrong_size[5] -= 1;
        bad(&wrong_size);
        let old_fun = eetf_enc(&Term::from(InternalFun::Old {
            module: Atom::from("m"),
            pid: Pid::new("n", 1, 2, 3),
            free_vars: vec![],
            index: 1,
            uniq: 2,
        }));
        let mut not_pid = old_fun.clone();
        not_pid[6] = PID_EXT + 1;
        bad(&not_pid);
        let mut not_int = old_fun.clone();
        let at = old_fun.len() - 2; // uniq: SMALL_INTEGER_EXT 2
        not_int[at] = NIL_EXT;
        bad(&not_int[..at + 1]);
        // Duplicate map keys (1 as SMALL_INTEGER_EXT and as INTEGER_EXT): OTP rejects them too.
        bad(&[131, MAP_EXT, 0, 0, 0, 2, SMALL_INTEGER_EXT, 1, NIL_EXT, INTEGER_EXT, 0, 0, 0, 1, NIL_EXT]);
        bad(&[131, SMALL_TUPLE_EXT, 1, MAP_EXT, 0, 0, 0, 2, NIL_EXT, NIL_EXT, NIL_EXT, NIL_EXT]);
    }

    #[test]
    fn duplicate_map_keys_that_are_maps() {
        // #{#{a => 1, b => 2} => x, #{b => 2, a => 1} => y}: the keys are equal, but eetf hashes a
        // map in iteration order and may keep both. Rejected every time, whatever the hash seeds.
        let inner_ab = [
            MAP_EXT,
            0,
            0,
            0,
            2,
            SMALL_ATOM_EXT,
            1,
            b'a',
            SMALL_INTEGER_EXT,
            1,
            SMALL_ATOM_EXT,
            1,
            b'b',
            SMALL_INTEGER_EXT,
            2,
        ];
        let inner_ba = [
            MAP_EXT,
            0,
            0,
            0,
            2,
            SMALL_ATOM_EXT,
            1,
            b'b',
            SMALL_INTEGER_EXT,
            2,
            SMALL_ATOM_EXT,
            1,
            b'a',
            SMALL_INTEGER_EXT,
            1,
        ];
        let dup =
            v(&[&[MAP_EXT, 0, 0, 0, 2], &inner_ab, &[SMALL_ATOM_EXT, 1, b'x'], &inner_ba, &[SMALL_ATOM_EXT, 1, b'y']]);
        // Distinct map keys (and the same inner maps as values) are fine.
        let mut inner_ac = inner_ba;
        inner_ac[7] = b'c';
        let distinct = v(&[&[MAP_EXT, 0, 0, 0, 2], &inner_ab, &inner_ba, &inner_ac, &inner_ab]);
        for _ in 0..64 {
            assert!(matches!(decode_versioned(&dup, &lim()), Err(EtfError::Invalid(_))));
            let nested = v(&[&[LIST_EXT, 0, 0, 0, 1], &dup[1..], &[NIL_EXT]]);
            assert!(matches!(decode_versioned(&nested, &lim()), Err(EtfError::Invalid(_))));
            roundtrip(&dec(&distinct).unwrap());
        }
    }

    #[test]
    fn encoder_rejections_leave_output_alone() {
        let long: String = std::iter::repeat_n('x', 256).collect();
        let cases = [
            (atom(&long), EtfError::TooLong { what: "atom" }),
            (Term::from(Float { value: f64::NAN }), EtfError::Invalid("non-finite float".into())),
            (
                Term::from(Reference { node: Atom::from("n"), id: vec![0; 6], creation: 0 }),
                EtfError::TooLong { what: "reference id" },
            ),
        ];
        for (term, want) in cases {
            let mut out = vec![1, 2, 3];
            let nested = Term::from(Tuple::from(vec![int(1), term]));
            assert_eq!(encode_versioned(&nested, &mut out), Err(want));
            assert_eq!(out, [1, 2, 3]);
        }
        for (bytes, tail) in [(vec![1u8], 0u8), (vec![1], 9), (vec![], 3)] {
            let mut out = Vec::new();
            let r = encode_versioned(&Term::from(BitBinary::from((bytes, tail))), &mut out);
            assert!(matches!(r, Err(EtfError::Invalid(_))), "{r:?}");
            assert!(out.is_empty());
        }
        // 255 four-byte characters is fine.
        roundtrip(&atom(&std::iter::repeat_n('\u{1F600}', 255).collect::<String>()));
    }

    // ---------------------------------------------------------------- depth

    #[test]
    fn deep_nesting_is_rejected_without_recursion() {
        // Run on a small stack: the validator must not recurse.
        std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(|| {
                let shapes: [(&[u8], &[u8]); 6] = [
                    (&[LIST_EXT, 0, 0, 0, 1], &[NIL_EXT]),
                    (&[LIST_EXT, 0, 0, 0, 0], &[]), // nested through the tail
                    (&[SMALL_TUPLE_EXT, 1], &[]),
                    (&[MAP_EXT, 0, 0, 0, 1], &[NIL_EXT]),   // nested through keys
                    (&[MAP_EXT, 0, 0, 0, 1, NIL_EXT], &[]), // through values
                    (
                        &[
                            FUN_EXT,
                            0,
                            0,
                            0,
                            1,
                            NEW_PID_EXT,
                            SMALL_ATOM_EXT,
                            1,
                            b'n',
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            0,
                            SMALL_ATOM_EXT,
                            1,
                            b'm',
                            SMALL_INTEGER_EXT,
                            0,
                            SMALL_INTEGER_EXT,
                            0,
                        ],
                        &[],
                    ),
                ];
                for (open, close) in shapes {
                    let bytes = nested(open, close, 100_000);
                    assert_eq!(decode_versioned(&bytes, &lim()), Err(EtfError::TooDeep), "{open:?}");
                    assert_eq!(check_term(&bytes[1..], &lim()), Err(EtfError::TooDeep));
                }
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn depth_limit_is_exact_and_fits_its_stack_budget() {
        let limits = Limits::default();
        let max = limits.max_depth as usize;
        let list = |d: usize| nested(&[LIST_EXT, 0, 0, 0, 1], &[NIL_EXT], d - 1);
        // The outermost list is depth 1, the innermost NIL depth `max`.
        assert_eq!(check_term(&list(max)[1..], &limits), Ok(list(max).len() - 1));
        assert_eq!(check_term(&list(max + 1)[1..], &limits), Err(EtfError::TooDeep));
        // A pid's node atom is one level below the pid.
        let mut pid_in_lists = nested(&[SMALL_TUPLE_EXT, 1], &[], max - 1);
        pid_in_lists.pop();
        pid_in_lists.extend_from_slice(&[NEW_PID_EXT, SMALL_ATOM_EXT, 1, b'n']);
        pid_in_lists.extend_from_slice(&[0; 12]);
        assert_eq!(decode_versioned(&pid_in_lists, &limits), Err(EtfError::TooDeep));
        assert_eq!(check_term(&[SMALL_ATOM_EXT, 0], &Limits { max_depth: 0, ..limits }), Err(EtfError::TooDeep));
        // eetf decodes (and drops) a term at the full default depth on a 256 KiB stack, debug
        // build included (about 1.7 KB per level there).
        std::thread::Builder::new()
            .stack_size(256 * 1024)
            .spawn(move || {
                let bytes = list(max);
                let (term, _) = decode_versioned(&bytes, &limits).unwrap();
                let mut out = Vec::new();
                encode_versioned(&term, &mut out).unwrap();
                assert_eq!(out, bytes);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    // ---------------------------------------------------------------- truncation, property

    fn sample_terms() -> Vec<Vec<u8>> {
        let mut float_ext = v(&[&[SMALL_TUPLE_EXT, 2, FLOAT_EXT], b"2.5"]);
        float_ext.resize(float_ext.len() + 28, 0);
        float_ext.extend_from_slice(&[SMALL_ATOM_EXT, 2, 0xE9, b'x']);
        vec![
            enc(&Term::from(Tuple::from(vec![
                atom("ok"),
                Term::from(Map::from([(atom("k"), Term::from(Binary::from(vec![1, 2, 3])))])),
                new_fun(vec![int(-1), Term::from(ImproperList::from((vec![atom("a")], int(5))))]),
                Term::from(Reference { node: Atom::from("a@b"), id: vec![1, 2, 3], creation: 1 }),
                Term::from(BigInteger::from(u64::MAX)),
                Term::from(BitBinary::from((vec![1, 2], 3))),
                Term::from(ByteList::from("str")),
                Term::from(Float { value: 1.5 }),
            ]))),
            eetf_enc(&Term::from(InternalFun::Old {
                module: Atom::from("m"),
                pid: Pid::new("n", 1, 2, 3),
                free_vars: vec![atom("v")],
                index: 1,
                uniq: 2,
            })),
            eetf_enc(&Term::from(ExternalFun::from(("lists", "map", 2)))),
            eetf_enc(&Term::from(Port { node: Atom::from("a@b"), id: 1 << 40, creation: 4 })),
            float_ext,
        ]
    }

    #[test]
    fn every_truncation_is_an_error() {
        for bytes in sample_terms() {
            assert!(dec(&bytes).is_ok());
            for cut in 0..bytes.len() {
                assert_eq!(decode_versioned(&bytes[..cut], &lim()), Err(EtfError::Truncated), "cut {cut} of {bytes:?}");
                if cut > 0 {
                    assert_eq!(check_term(&bytes[1..cut], &lim()), Err(EtfError::Truncated));
                }
            }
        }
    }

    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            // xorshift64
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
        fn bytes(&mut self, n: usize) -> Vec<u8> {
            (0..n).map(|_| self.next() as u8).collect()
        }
    }

    fn gen_atom(rng: &mut Rng) -> Atom {
        const CHARS: [char; 8] = ['a', 'z', '_', '@', '\u{e9}', '\u{ff}', '\u{416}', '\u{1F600}'];
        let len = if rng.below(20) == 0 { 255 } else { rng.below(12) as usize };
        Atom::from((0..len).map(|_| CHARS[rng.below(8) as usize]).collect::<String>())
    }

    fn gen_pid(rng: &mut Rng) -> Pid {
        Pid::new(gen_atom(rng), rng.next() as u32, rng.next() as u32, rng.next() as u32)
    }

    fn gen_big(rng: &mut Rng) -> Term {
        let n = rng.below(40) as u8;
        let mut bytes = vec![VERSION, SMALL_BIG_EXT, n, rng.below(2) as u8];
        bytes.extend(rng.bytes(n.into()));
        Term::decode(&bytes[..]).unwrap()
    }

    fn gen_leaf(rng: &mut Rng) -> Term {
        match rng.below(14) {
            0 => Term::from(gen_atom(rng)),
            1 => int(rng.next() as i32),
            2 => int(rng.below(256) as i32),
            3 => gen_big(rng),
            4 => loop {
                let f = f64::from_bits(rng.next());
                if f.is_finite() {
                    break Term::from(Float { value: f });
                }
            },
            5 => Term::from(gen_pid(rng)),
            6 => {
                let id = if rng.below(2) == 0 { rng.next() } else { rng.next() >> 32 };
                Term::from(Port { node: gen_atom(rng), id, creation: rng.next() as u32 })
            }
            7 => {
                let words = rng.below(6) as usize;
                Term::from(Reference {
                    node: gen_atom(rng),
                    id: (0..words).map(|_| rng.next() as u32).collect(),
                    creation: rng.next() as u32,
                })
            }
            8 => Term::from(ExternalFun { module: gen_atom(rng), function: gen_atom(rng), arity: rng.next() as u8 }),
            9 => {
                let n = rng.below(10) as usize;
                Term::from(Binary::from(rng.bytes(n)))
            }
            10 => {
                let n = rng.below(6) as usize;
                if n == 0 {
                    Term::from(BitBinary::from((vec![], 0)))
                } else {
                    let tail = 1 + rng.below(8) as u8;
                    let mut bytes = rng.bytes(n);
                    if let Some(last) = bytes.last_mut() {
                        *last &= ((1u16 << tail) - 1) as u8;
                    }
                    Term::from(BitBinary::from((bytes, tail)))
                }
            }
            11 => {
                let n = rng.below(10) as usize;
                Term::from(ByteList::from(rng.bytes(n)))
            }
            12 => Term::from(List::nil()),
            _ => Term::from(Tuple::nil()),
        }
    }

    fn gen_term(rng: &mut Rng, depth: u32) -> Term {
        if depth == 0 || rng.below(3) == 0 {
            return gen_leaf(rng);
        }
        let some = |rng: &mut Rng, max: u64| (0..rng.below(max)).map(|_| gen_term(rng, depth - 1)).collect::<Vec<_>>();
        match rng.below(7) {
            0 => Term::from(List::from(some(rng, 5))),
            1 => {
                let mut last = gen_term(rng, depth - 1);
                if last == Term::from(List::nil()) {
                    last = int(0);
                }
                Term::from(ImproperList::from((some(rng, 4), last)))
            }
            2 => Term::from(Tuple::from(some(rng, 5))),
            3 => Term::from(Tuple::from(vec![gen_leaf(rng); 256 + rng.below(10) as usize])),
            4 => {
                // Keys without maps in them: see the module doc on eetf::Map's hash.
                let n = rng.below(5);
                let map: HashMap<Term, Term> = (0..n).map(|_| (gen_leaf(rng), gen_term(rng, depth - 1))).collect();
                Term::from(Map::from(map))
            }
            5 => Term::from(InternalFun::New {
                module: gen_atom(rng),
                arity: rng.next() as u8,
                pid: gen_pid(rng),
                free_vars: some(rng, 4),
                index: rng.next() as u32,
                uniq: rng.bytes(16).try_into().unwrap(),
                old_index: rng.next() as i32,
                old_uniq: rng.next() as i32,
            }),
            _ => Term::from(InternalFun::Old {
                module: gen_atom(rng),
                pid: gen_pid(rng),
                free_vars: some(rng, 4),
                index: rng.next() as i32,
                uniq: rng.next() as i32,
            }),
        }
    }

    #[test]
    fn random_terms_roundtrip() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..3000 {
            let term = gen_term(&mut rng, 5);
            roundtrip(&term);
            // Whatever eetf's own encoder writes for it (it can change the term, e.g. lists of
            // small integers become strings) is accepted too.
            if let Ok(bytes) = std::panic::catch_unwind(|| eetf_enc(&term)) {
                decode_versioned(&bytes, &lim()).unwrap_or_else(|e| panic!("{term:?}: {e}"));
            }
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        // Mutations of valid terms: flip bytes and cut; every result is Ok or a typed error,
        // never an Eetf error (which would mean the validator let through something eetf refuses).
        let mut rng = Rng(0xDEAD_BEEF_1234_5678);
        let samples = sample_terms();
        for i in 0..20_000 {
            let mut bytes = samples[i % samples.len()].clone();
            for _ in 0..1 + rng.below(4) {
                let at = rng.below(bytes.len() as u64) as usize;
                bytes[at] = rng.next() as u8;
            }
            bytes[0] = VERSION;
            match decode_versioned(&bytes, &lim()) {
                Ok((term, used)) => {
                    assert_eq!(check_term(&bytes[1..], &lim()), Ok(used - 1));
                    let again = enc(&term);
                    let (back, _) = decode_versioned(&again, &lim()).unwrap();
                    assert!(same(&term, &back));
                }
                Err(EtfError::Eetf(e)) => panic!("{bytes:?}: {e}"),
                Err(_) => {}
            }
        }
    }

    // ---------------------------------------------------------------- real Erlang

    struct KillOnDrop(Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// Runs `erl -noshell -eval expr` (which must end in `halt().`), returns its stdout.
    fn run_erl(expr: &str) -> String {
        let child = Command::new("erl")
            .args(["-noshell", "-eval", expr])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run `erl` ({e}): install the Debian package erlang-base"));
        let mut guard = KillOnDrop(child);
        let mut stdout = guard.0.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stdout.read_to_string(&mut text);
            let _ = tx.send(text);
        });
        rx.recv_timeout(Duration::from_secs(60)).expect("erl did not finish within 60 s")
    }

    fn erl_binary(bytes: &[u8]) -> String {
        let list: Vec<String> = bytes.iter().map(u8::to_string).collect();
        format!("<<{}>>", list.join(","))
    }

    #[test]
    fn decodes_what_erlang_encodes() {
        let terms = [
            "#{a => 1, <<\"b\">> => [1,2], {t} => 2.5}",
            "self()",
            "make_ref()",
            "begin X = 42, fun(Y) -> X + Y end end",
            "fun lists:map/2",
            "1 bsl 100",
            "-(1 bsl 3000)",
            "[1,2|3]",
            "list_to_atom([233,116,233])",
            "list_to_atom([128512,97])",
            "<<1,2,3:4>>",
            "\"string\"",
            "{a,b,c}",
            "hd(erlang:ports())",
        ];
        let expr = format!(
            "[io:format(\"~w~n\", [binary_to_list(term_to_binary(T))]) || T <- [{}]], \
             io:format(\"~w~n\", [binary_to_list(term_to_binary(0.1, [{{minor_version, 0}}]))]), halt().",
            terms.join(", ")
        );
        let out = run_erl(&expr);
        let decoded: Vec<Term> = out
            .lines()
            .map(|line| {
                let bytes: Vec<u8> = line
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(',')
                    .map(|b| b.parse().unwrap_or_else(|_| panic!("erl printed {line:?}")))
                    .collect();
                dec(&bytes).unwrap_or_else(|e| panic!("{line}: {e}"))
            })
            .collect();
        assert_eq!(decoded.len(), terms.len() + 1, "erl output: {out}");
        for t in &decoded {
            roundtrip(t);
        }
        match &decoded[0] {
            Term::Map(m) => assert_eq!(m.map.get(&atom("a")), Some(&int(1))),
            other => panic!("{other:?}"),
        }
        assert!(matches!(&decoded[1], Term::Pid(p) if p.node.name == "nonode@nohost"));
        assert!(matches!(&decoded[2], Term::Reference(r) if r.id.len() >= 3));
        match &decoded[3] {
            Term::InternalFun(f) => {
                assert!(matches!(&**f, InternalFun::New { free_vars, .. } if !free_vars.is_empty()))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(decoded[4], Term::from(ExternalFun::from(("lists", "map", 2))));
        assert!(matches!(&decoded[5], Term::BigInteger(b) if b.value.to_string() == "1267650600228229401496703205376"));
        assert!(matches!(&decoded[6], Term::BigInteger(b) if b.value < BigInteger::from(0).value));
        assert_eq!(decoded[7], Term::from(ImproperList::from((vec![int(1), int(2)], int(3)))));
        assert_eq!(decoded[8], atom("\u{e9}t\u{e9}"));
        assert_eq!(decoded[9], atom("\u{1F600}a"));
        assert_eq!(decoded[10], Term::from(BitBinary::from((vec![1, 2, 3], 4))));
        assert_eq!(decoded[11], Term::from(ByteList::from("string")));
        assert_eq!(decoded[12], Term::from(Tuple::from(vec![atom("a"), atom("b"), atom("c")])));
        assert!(matches!(&decoded[13], Term::Port(_)));
        assert_eq!(decoded[14], Term::from(Float { value: 0.1 }));
    }

    #[test]
    fn erlang_decodes_what_we_encode() {
        let cases: Vec<(Term, &str)> = vec![
            (
                Term::from(Tuple::from(vec![
                    atom("a"),
                    Term::from(ImproperList::from((vec![int(1), int(2)], int(3)))),
                    Term::from(Map::from([(atom("k"), Term::from(BitBinary::from((vec![1, 2], 3))))])),
                ])),
                "{a, [1,2|3], #{k => <<1,2:3>>}}",
            ),
            (atom("\u{e9}\u{1F600}"), "list_to_atom([233,128512])"),
            (Term::from(List::from(vec![int(-1), int(255), int(70000)])), "[-1,255,70000]"),
            (Term::from(ByteList::from("abc")), "\"abc\""),
            (Term::from(BigInteger::from(u64::MAX)), "18446744073709551615"),
            (Term::from(BigInteger::from(i64::MIN)), "-9223372036854775808"),
            (Term::from(Float { value: 2.5 }), "2.5"),
            (Term::from(Binary::from(vec![])), "<<>>"),
            (Term::from(Tuple::from(vec![int(0); 300])), "list_to_tuple(lists:duplicate(300, 0))"),
            (Term::from(ExternalFun::from(("lists", "map", 2))), "fun lists:map/2"),
            (Term::from(List::nil()), "[]"),
        ];
        let mut checks = Vec::new();
        for (term, erl) in &cases {
            checks.push(format!("io:format(\"~p~n\", [binary_to_term({}) =:= {erl}])", erl_binary(&enc(term))));
        }
        // Pids, ports and references of another node: Erlang builds external ones from our bytes.
        let remote = Term::from(Tuple::from(vec![
            Term::from(Pid::new("x@h", 5, 6, 7)),
            Term::from(Reference { node: Atom::from("x@h"), id: vec![1, 2, 3], creation: 7 }),
            Term::from(Port { node: Atom::from("x@h"), id: 1 << 40, creation: 7 }),
        ]));
        checks.push(format!(
            "io:format(\"~p~n\", [case binary_to_term({}) of {{P, R, Q}} -> node(P) =:= 'x@h' andalso \
             is_reference(R) andalso node(R) =:= 'x@h' andalso is_port(Q); _ -> false end])",
            erl_binary(&enc(&remote))
        ));
        let out = run_erl(&format!("{}, halt().", checks.join(", ")));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), checks.len(), "erl output: {out}");
        for (i, line) in lines.iter().enumerate() {
            assert_eq!(*line, "true", "case {i}: {:?}", cases.get(i).map(|c| c.1));
        }
    }
}
