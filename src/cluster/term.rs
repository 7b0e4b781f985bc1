//! Serde mapping between Rust values and Erlang terms ([`eetf::Term`]).
//!
//! This module owns the *typed* side of smarm's Erlang interop: [`to_term`] turns any
//! [`Serialize`] value into an [`eetf::Term`], [`from_term`] turns a term back into any
//! [`DeserializeOwned`](serde::de::DeserializeOwned) value. It does not touch bytes on the wire
//! (the connection layer encodes and decodes terms) except for [`RawTerm`], whose content travels
//! through serde as External Term Format bytes (see below).
//!
//! # The mapping
//!
//! The table is the contract: it tells the Erlang or Elixir side what to send and what it gets.
//! Names of fields and variants are used verbatim; Rust's `CamelCase` variants become quoted
//! atoms such as `'Stop'`, so annotate enums with `#[serde(rename_all = "snake_case")]` (the
//! enum examples below assume it).
//!
//! | Rust (serde data model)                     | Erlang term                          | Erlang example                  | Elixir example               |
//! |---------------------------------------------|--------------------------------------|---------------------------------|------------------------------|
//! | `bool`                                      | atom `true` / `false`                | `true`                          | `true`                       |
//! | `i8` … `i128`, `u8` … `u128`                | integer (fixnum or bignum)           | `-7`, `1 bsl 70`                | `-7`, `Bitwise.bsl(1, 70)`   |
//! | `f32`, `f64` (finite only)                  | float                                | `1.5`                           | `1.5`                        |
//! | `char`                                      | integer (the code point)             | `$a` (`97`)                     | `?a` (`97`)                  |
//! | `String`, `&str`                            | UTF-8 binary                         | `<<"héllo"/utf8>>`              | `"héllo"`                    |
//! | bytes (`serde_bytes`, `serialize_bytes`)    | binary                               | `<<1,2,3>>`                     | `<<1, 2, 3>>`                |
//! | `Vec<T>`, `&[T]`, `VecDeque<T>`, sets       | proper list                          | `[1,2,3]`                       | `[1, 2, 3]`                  |
//! | non-empty `Vec<u8>`, `&[u8]`, `[u8; N]`     | binary                               | `<<1,2,3>>`                     | `<<1, 2, 3>>`                |
//! | empty `Vec<u8>`                             | empty list                           | `[]`                            | `[]`                         |
//! | `(A, B)`, tuple struct `S(A, B)`            | tuple                                | `{1, <<"a">>}`                  | `{1, "a"}`                   |
//! | `[T; N]` (serde sees a tuple)               | tuple                                | `{1,2,3}`                       | `{1, 2, 3}`                  |
//! | `()`                                        | empty tuple                          | `{}`                            | `{}`                         |
//! | `Option<T>`: `None` / `Some(x)`             | atom `undefined` / `x` itself        | `undefined` / `5`               | `:undefined` / `5`           |
//! | unit struct `struct Ping;`                  | atom of the struct's name            | `'Ping'`                        | `:Ping`                      |
//! | newtype struct `Meters(5)`                  | the content (transparent)            | `5`                             | `5`                          |
//! | struct `S { id: 1, name: "x" }`             | map with atom keys                   | `#{id => 1, name => <<"x">>}`   | `%{id: 1, name: "x"}`        |
//! | `HashMap`, `BTreeMap`                       | map, keys mapped like values         | `#{<<"k">> => 1}`               | `%{"k" => 1}`                |
//! | unit variant `E::Stop`                      | atom                                 | `stop`                          | `:stop`                      |
//! | newtype variant `E::Cast(5)`                | `{Variant, Value}`                   | `{cast, 5}`                     | `{:cast, 5}`                 |
//! | tuple variant `E::Move(1, 2)`               | `{Variant, A, B}`                    | `{move, 1, 2}`                  | `{:move, 1, 2}`              |
//! | struct variant `E::Call { id: 1 }`          | `{Variant, #{field => ...}}`         | `{call, #{id => 1}}`            | `{:call, %{id: 1}}`          |
//! | [`RawTerm`]                                 | any term, carried through            | `{any, [thing], #{}}`           | `{:any, [:thing], %{}}`      |
//! | newtype named [`PID_MAGIC`] (smarm's `Pid`) | pid                                  | `self()`                        | `self()`                     |
//! | newtype named [`REF_MAGIC`] (smarm's `Ref`) | reference                            | `make_ref()`                    | `make_ref()`                 |
//!
//! Details of the encoding direction:
//!
//! * Integers become a fixnum (`FixInteger`) when they fit an `i32`, a bignum otherwise.
//! * Non-finite floats (NaN, ±∞) have no Erlang representation: serialising one is an error.
//! * A sequence becomes a binary when it is non-empty and *every* element was serialised by a
//!   direct `serialize_u8` call (`Vec<u8>`, `&[u8]`, `[u8; N]`, `VecDeque<u8>`). An empty
//!   `Vec<u8>` is therefore `[]`; use `serde_bytes` to always get a binary. Serde serialises
//!   arrays as tuples, so the same rule applies to tuples: `[u8; 4]` is a binary, `[u32; 4]` a
//!   4-tuple, and a bare tuple whose elements are all `u8`, such as `(1u8, 2u8)`, is the binary
//!   `<<1,2>>` (a tuple struct `Version(u8, u8)` stays a tuple).
//! * Map keys are mapped like any value: `String` keys become binaries, not atoms. Structs
//!   flattened with `#[serde(flatten)]` go through serde's map path, so their fields get binary
//!   keys too (decoding accepts both).
//! * Atoms (field, variant and unit struct names, pid and reference nodes) are limited to 255
//!   characters, as in Erlang.
//!
//! # Decoding
//!
//! Decoding accepts everything the table produces, plus these leniencies:
//!
//! * an integer where a float is expected (into `f32`, values beyond its range are an error);
//! * a charlist where a string is expected: Erlang's string list (`"abc"` in Erlang,
//!   `~c"abc"` in Elixir, eetf `ByteList`) or any proper list of character code points; `[]`
//!   is the empty string;
//! * a character where a `char` is expected: an integer code point or a one-character binary;
//! * for a sequence: a proper list, a string list, or a binary (its bytes visited as `u8`);
//! * for a tuple, a tuple struct or an array of length N: a tuple of exactly N elements, a
//!   proper list of N elements, or a binary / string list of N bytes;
//! * for `Option`: the atoms `undefined` (Erlang) and `nil` (Elixir) both mean `None`;
//! * for a unit struct: the atom of its name, or `{}`;
//! * for a struct: keys may be atoms or UTF-8 binaries; unknown keys are ignored (serde's
//!   `#[serde(deny_unknown_fields)]` still rejects them). Other key types are an error;
//! * for an enum: an atom for a unit variant (a 1-tuple `{Variant}` is accepted too), a tuple
//!   whose first element is the variant's atom for the others.
//!
//! Integers are range-checked against the target width: `300` into a `u8` is an error, never a
//! wrap. Errors ([`TermError`]) name what was expected and what was found, for example
//! `expected a UTF-8 binary (string), found atom foo`; an error inside a map value is prefixed
//! with the key (`in field age: ...`).
//!
//! ## Untyped targets (`deserialize_any`)
//!
//! Self-describing targets (`#[serde(untagged)]` enums, a JSON value type, ...) see:
//!
//! | Erlang term                          | serde visit                                        |
//! |--------------------------------------|----------------------------------------------------|
//! | `true`, `false`                      | `bool`                                             |
//! | `undefined`, `nil`, `{}`             | unit (so `Option` fields read them as `None`)      |
//! | any other atom                       | string (its name)                                  |
//! | integer                              | `i64`, else `u64`, else `i128`, else `u128`        |
//! | float                                | `f64`                                              |
//! | binary                               | string if valid UTF-8, bytes otherwise             |
//! | list, string list, non-empty tuple   | sequence                                           |
//! | map                                  | map                                                |
//! | pid / reference                      | the sequence of its [`PID_MAGIC`] / [`REF_MAGIC`] content |
//! | integer beyond 128 bits, port, fun, improper list, bitstring | error                      |
//!
//! # Terms that map to nothing
//!
//! Ports, funs, improper lists and bitstrings (eetf `BitBinary`) have no Rust counterpart:
//! decoding one into anything but [`RawTerm`] (or an ignored field) is a [`TermError`] naming
//! the kind. Neither direction panics on any input.
//!
//! # Invariants
//!
//! * No input panics: every term from a peer and every value handed to [`to_term`] yields a
//!   value or a [`TermError`]. Nothing here indexes out of range or unwraps.
//! * Allocation follows the data: capacity reserved from a length hint is capped (1024
//!   elements); bignums are measured (`bits()`) before they are copied.
//! * eetf's codec sees only what it handles safely: [`RawTerm`] content is checked before eetf
//!   encodes it and its bytes are walked, iteratively, before eetf decodes them (eetf 0.12
//!   panics on some inputs and reserves capacity from unchecked lengths).
//!
//! # Limits
//!
//! * Both directions recurse once per nesting level of the value. Incoming terms are bounded by
//!   the ETF decoder's depth limit upstream; values built locally are bounded by the program.
//! * [`RawTerm`] content crosses serde as ETF bytes: it is validated (iteratively, nesting at
//!   most 128 containers deep) before eetf decodes it, so hostile bytes from another format are
//!   an error, not a panic. The trip through eetf's encoder canonicalises the term as the wire
//!   would: a list of integers `0..=255` comes back as eetf's `ByteList` (the same Erlang term).
//! * [`RawTerm`] needs the format to support newtype structs end to end: inside
//!   `#[serde(untagged)]` or `#[serde(flatten)]` (which buffer content) it does not decode.
//! * `Option<Option<T>>`: `Some(None)` is `undefined`, which decodes as `None`. A unit variant
//!   or unit struct spelled `undefined` or `nil` inside an `Option` reads as `None`.
//! * Deserialisation produces owned data only (`DeserializeOwned`).

use std::cell::Cell;
use std::collections::hash_map;
use std::collections::HashMap;
use std::fmt;

use eetf::{Atom, BigInteger, Binary, ByteList, FixInteger, Float, List, Map, Pid, Reference, Term, Tuple};
use serde::de::{self, DeserializeSeed, Visitor};
use serde::ser::{self, Serialize};

/// Name of the newtype struct whose content is a term encoded as ETF bytes; see [`RawTerm`].
///
/// A serializer that does not know the name sees an ordinary newtype struct around bytes.
///
/// ```
/// assert_eq!(smarm::cluster::term::TERM_MAGIC, "$smarm::Term");
/// ```
pub const TERM_MAGIC: &str = "$smarm::Term";

/// Name of the newtype struct that stands for an Erlang pid.
///
/// Its content is the 4-tuple `(node: &str, id: u32, serial: u32, creation: u32)`. [`to_term`]
/// turns it into `Term::Pid`; [`from_term`], asked for this newtype, turns a `Term::Pid` into
/// the same 4-tuple. Other formats see a plain newtype around a tuple.
///
/// ```
/// use serde::de::{Deserialize, Deserializer, Visitor};
/// use serde::ser::{Serialize, Serializer};
/// use smarm::cluster::term::{from_term, to_term, PID_MAGIC};
///
/// #[derive(Debug, PartialEq)]
/// struct MyPid { node: String, id: u32, serial: u32, creation: u32 }
///
/// impl Serialize for MyPid {
///     fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
///         s.serialize_newtype_struct(PID_MAGIC, &(self.node.as_str(), self.id, self.serial, self.creation))
///     }
/// }
///
/// impl<'de> Deserialize<'de> for MyPid {
///     fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
///         struct V;
///         impl<'de> Visitor<'de> for V {
///             type Value = MyPid;
///             fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
///                 f.write_str("a pid")
///             }
///             fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<MyPid, D::Error> {
///                 let (node, id, serial, creation) = <(String, u32, u32, u32)>::deserialize(d)?;
///                 Ok(MyPid { node, id, serial, creation })
///             }
///         }
///         d.deserialize_newtype_struct(PID_MAGIC, V)
///     }
/// }
///
/// let pid = MyPid { node: "a@host".into(), id: 42, serial: 0, creation: 7 };
/// let term = to_term(&pid).unwrap();
/// assert_eq!(term, eetf::Term::Pid(eetf::Pid::new("a@host", 42, 0, 7)));
/// assert_eq!(from_term::<MyPid>(term).unwrap(), pid);
/// ```
pub const PID_MAGIC: &str = "$smarm::Pid";

/// Name of the newtype struct that stands for an Erlang reference.
///
/// Its content is the 3-tuple `(node: &str, ids: Vec<u32>, creation: u32)` with 1 to 5 ids, as
/// OTP allows; it maps to and from `Term::Reference` exactly as [`PID_MAGIC`] does for pids.
///
/// ```
/// use serde::ser::{Serialize, Serializer};
/// use smarm::cluster::term::{to_term, REF_MAGIC};
///
/// struct MyRef(Vec<u32>);
/// impl Serialize for MyRef {
///     fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
///         s.serialize_newtype_struct(REF_MAGIC, &("a@host", &self.0, 3u32))
///     }
/// }
///
/// let term = to_term(&MyRef(vec![1, 2, 3])).unwrap();
/// let eetf::Term::Reference(r) = term else { panic!("not a reference") };
/// assert_eq!((r.node.name.as_str(), r.id.as_slice(), r.creation), ("a@host", &[1, 2, 3][..], 3));
/// ```
pub const REF_MAGIC: &str = "$smarm::Ref";

/// Deepest container nesting accepted inside [`RawTerm`] content (both the term handed to the
/// encoder and the ETF bytes handed to eetf's recursive decoder).
pub(crate) const RAW_TERM_MAX_DEPTH: usize = 128;

/// Longest atom, in characters, that Erlang accepts.
const MAX_ATOM_CHARS: usize = 255;

/// Most words an Erlang reference carries (OTP 25: 3 for plain refs, up to 5 for others).
const MAX_REF_WORDS: usize = 5;

/// Cap on capacity reserved from a caller's length hint.
const PREALLOC_CAP: usize = 1024;

/// Longest atom name quoted verbatim in an error message.
const ERROR_NAME_CHARS: usize = 64;

/// Turns a Rust value into an Erlang term, following the mapping table in this module's documentation.
///
/// Fails on values Erlang cannot represent: non-finite floats, atoms longer than 255
/// characters, malformed [`PID_MAGIC`] / [`REF_MAGIC`] / [`TERM_MAGIC`] content, or an error
/// raised by the value's own `Serialize` implementation.
///
/// ```
/// use eetf::{Atom, FixInteger, Term, Tuple};
/// use serde::Serialize;
///
/// #[derive(Serialize)]
/// #[serde(rename_all = "snake_case")]
/// enum Cmd { Add(i32) }
///
/// let term = smarm::cluster::to_term(&Cmd::Add(5)).unwrap();
/// let expected = Term::from(Tuple::from(vec![Term::from(Atom::from("add")), Term::from(FixInteger::from(5))]));
/// assert_eq!(term, expected);
/// ```
pub fn to_term<T: ?Sized + Serialize>(value: &T) -> Result<Term, TermError> {
    value.serialize(TermSerializer::plain())
}

/// Builds a Rust value from an Erlang term, following the mapping table in this module's
/// documentation and its decoding leniencies.
///
/// ```
/// use eetf::{Atom, Binary, FixInteger, Map, Term};
/// use serde::Deserialize;
///
/// #[derive(Deserialize, Debug, PartialEq)]
/// struct User { id: u32, name: String }
///
/// let term = Term::from(Map::from([
///     (Term::from(Atom::from("id")), Term::from(FixInteger::from(7))),
///     (Term::from(Atom::from("name")), Term::from(Binary::from("ann".as_bytes()))),
/// ]));
/// let user: User = smarm::cluster::from_term(term).unwrap();
/// assert_eq!(user, User { id: 7, name: "ann".into() });
///
/// let err = smarm::cluster::from_term::<String>(Term::from(Atom::from("foo"))).unwrap_err();
/// assert_eq!(err.to_string(), "expected a UTF-8 binary (string), found atom foo");
/// ```
pub fn from_term<T: de::DeserializeOwned>(term: Term) -> Result<T, TermError> {
    T::deserialize(TermDeserializer { term })
}

/// Why a value could not be mapped to a term or a term to a value.
///
/// The message names what was expected and what was found, e.g.
/// `expected an integer in the range of u8 (0..=255), found integer 300`.
///
/// ```
/// let err = smarm::cluster::from_term::<u8>(eetf::Term::from(eetf::FixInteger::from(300))).unwrap_err();
/// assert_eq!(err.to_string(), "expected an integer in the range of u8 (0..=255), found integer 300");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TermError {
    message: String,
}

impl TermError {
    fn new(message: impl Into<String>) -> Self {
        TermError { message: message.into() }
    }

    /// "expected {expected}, found {what `found` is}".
    fn mismatch(expected: impl fmt::Display, found: &Term) -> Self {
        TermError::new(format!("expected {expected}, found {}", describe(found)))
    }

    /// Prefixes the message with where in the value the error happened.
    fn context(self, context: impl fmt::Display) -> Self {
        TermError::new(format!("{context}: {}", self.message))
    }
}

impl fmt::Display for TermError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for TermError {}

impl ser::Error for TermError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TermError::new(msg.to_string())
    }
}

impl de::Error for TermError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TermError::new(msg.to_string())
    }
}

/// An arbitrary Erlang term inside a typed value: a field of this type carries the term through
/// [`to_term`] and [`from_term`] as it is (up to the canonicalisation described in the
/// limits in this module's documentation), for untyped interop inside typed messages.
///
/// It serialises as a newtype struct named [`TERM_MAGIC`] around the term's ETF bytes (eetf's
/// encoding, version byte included); with other formats it is just those bytes, and
/// deserialising validates them before decoding. A term that eetf cannot encode faithfully
/// (non-finite float, bitstring with a tail of 0 or more than 8 bits, string list longer than
/// 65535 bytes, nesting deeper than 128) is a serialisation error.
///
/// ```
/// use eetf::{Atom, FixInteger, Term, Tuple};
/// use serde::{Deserialize, Serialize};
/// use smarm::cluster::{from_term, to_term, RawTerm};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Envelope { tag: u32, payload: RawTerm }
///
/// let payload = Term::from(Tuple::from(vec![Term::from(Atom::from("any")), Term::from(FixInteger::from(-1))]));
/// let msg = Envelope { tag: 1, payload: RawTerm(payload.clone()) };
/// let term = to_term(&msg).unwrap();
/// let back: Envelope = from_term(term).unwrap();
/// assert_eq!(back.payload.0, payload);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RawTerm(pub Term);

impl Serialize for RawTerm {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let bytes = encode_raw(&self.0).map_err(<S::Error as ser::Error>::custom)?;
        serializer.serialize_newtype_struct(TERM_MAGIC, &EtfBytes(&bytes))
    }
}

impl<'de> de::Deserialize<'de> for RawTerm {
    fn deserialize<D: de::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_newtype_struct(TERM_MAGIC, RawTermVisitor)
    }
}

/// Serialises its slice with `serialize_bytes`.
struct EtfBytes<'a>(&'a [u8]);

impl Serialize for EtfBytes<'_> {
    fn serialize<S: ser::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(self.0)
    }
}

/// Accepts the [`TERM_MAGIC`] newtype, or its bytes directly.
struct RawTermVisitor;

impl<'de> Visitor<'de> for RawTermVisitor {
    type Value = RawTerm;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an Erlang term as ETF bytes")
    }

    fn visit_newtype_struct<D: de::Deserializer<'de>>(self, deserializer: D) -> Result<RawTerm, D::Error> {
        deserializer.deserialize_byte_buf(EtfBytesVisitor)
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<RawTerm, E> {
        EtfBytesVisitor.visit_bytes(bytes)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<RawTerm, A::Error> {
        EtfBytesVisitor.visit_seq(seq)
    }
}

/// Decodes ETF bytes handed over as bytes or as a sequence of `u8` (formats without a byte type).
struct EtfBytesVisitor;

impl<'de> Visitor<'de> for EtfBytesVisitor {
    type Value = RawTerm;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ETF bytes")
    }

    fn visit_bytes<E: de::Error>(self, bytes: &[u8]) -> Result<RawTerm, E> {
        decode_raw(bytes).map(RawTerm).map_err(E::custom)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawTerm, A::Error> {
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(PREALLOC_CAP));
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        self.visit_bytes(&bytes)
    }
}

// ---------------------------------------------------------------------------------------------
// Serializer
// ---------------------------------------------------------------------------------------------

/// Builds a [`Term`] from a Rust value.
///
/// `byte_probe` is set only by a direct `serialize_u8` call; sequence builders hand each element
/// a fresh probe to learn whether the element was a `u8` (the binary rule). Every nested value is
/// serialised with a probe-less serializer, so `Some(5u8)` or a newtype around a `u8` is not a
/// byte.
#[derive(Clone, Copy)]
struct TermSerializer<'p> {
    byte_probe: Option<&'p Cell<bool>>,
}

impl TermSerializer<'static> {
    fn plain() -> Self {
        TermSerializer { byte_probe: None }
    }
}

impl<'p> ser::Serializer for TermSerializer<'p> {
    type Ok = Term;
    type Error = TermError;
    type SerializeSeq = SeqSerializer;
    type SerializeTuple = SeqSerializer;
    type SerializeTupleStruct = TupleSerializer;
    type SerializeTupleVariant = TupleSerializer;
    type SerializeMap = MapSerializer;
    type SerializeStruct = StructSerializer;
    type SerializeStructVariant = StructSerializer;

    fn serialize_bool(self, v: bool) -> Result<Term, TermError> {
        Ok(Term::Atom(Atom::from(if v { "true" } else { "false" })))
    }

    fn serialize_i8(self, v: i8) -> Result<Term, TermError> {
        Ok(Term::FixInteger(FixInteger::from(v)))
    }

    fn serialize_i16(self, v: i16) -> Result<Term, TermError> {
        Ok(Term::FixInteger(FixInteger::from(v)))
    }

    fn serialize_i32(self, v: i32) -> Result<Term, TermError> {
        Ok(Term::FixInteger(FixInteger::from(v)))
    }

    fn serialize_i64(self, v: i64) -> Result<Term, TermError> {
        Ok(int_term(i128::from(v)))
    }

    fn serialize_i128(self, v: i128) -> Result<Term, TermError> {
        Ok(int_term(v))
    }

    fn serialize_u8(self, v: u8) -> Result<Term, TermError> {
        if let Some(probe) = self.byte_probe {
            probe.set(true);
        }
        Ok(Term::FixInteger(FixInteger::from(v)))
    }

    fn serialize_u16(self, v: u16) -> Result<Term, TermError> {
        Ok(Term::FixInteger(FixInteger::from(v)))
    }

    fn serialize_u32(self, v: u32) -> Result<Term, TermError> {
        Ok(int_term(i128::from(v)))
    }

    fn serialize_u64(self, v: u64) -> Result<Term, TermError> {
        Ok(int_term(i128::from(v)))
    }

    fn serialize_u128(self, v: u128) -> Result<Term, TermError> {
        Ok(uint_term(v))
    }

    fn serialize_f32(self, v: f32) -> Result<Term, TermError> {
        float_term(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<Term, TermError> {
        float_term(v)
    }

    fn serialize_char(self, v: char) -> Result<Term, TermError> {
        Ok(int_term(i128::from(u32::from(v))))
    }

    fn serialize_str(self, v: &str) -> Result<Term, TermError> {
        Ok(Term::Binary(Binary::from(v.as_bytes())))
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<Term, TermError> {
        Ok(Term::Binary(Binary::from(v)))
    }

    fn serialize_none(self) -> Result<Term, TermError> {
        Ok(Term::Atom(Atom::from("undefined")))
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<Term, TermError> {
        value.serialize(TermSerializer::plain())
    }

    fn serialize_unit(self) -> Result<Term, TermError> {
        Ok(Term::Tuple(Tuple::nil()))
    }

    fn serialize_unit_struct(self, name: &'static str) -> Result<Term, TermError> {
        atom_term(name)
    }

    fn serialize_unit_variant(self, _: &'static str, _: u32, variant: &'static str) -> Result<Term, TermError> {
        atom_term(variant)
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(self, name: &'static str, value: &T) -> Result<Term, TermError> {
        match name {
            TERM_MAGIC => raw_from_content(value.serialize(TermSerializer::plain())?),
            PID_MAGIC => pid_from_content(value.serialize(TermSerializer::plain())?),
            REF_MAGIC => ref_from_content(value.serialize(TermSerializer::plain())?),
            _ => value.serialize(TermSerializer::plain()),
        }
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<Term, TermError> {
        let tag = atom_term(variant)?;
        Ok(Term::Tuple(Tuple::from(vec![tag, value.serialize(TermSerializer::plain())?])))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<SeqSerializer, TermError> {
        Ok(SeqSerializer::new(false, len.unwrap_or(0)))
    }

    fn serialize_tuple(self, len: usize) -> Result<SeqSerializer, TermError> {
        Ok(SeqSerializer::new(true, len))
    }

    fn serialize_tuple_struct(self, _: &'static str, len: usize) -> Result<TupleSerializer, TermError> {
        Ok(TupleSerializer { elements: Vec::with_capacity(len.min(PREALLOC_CAP)) })
    }

    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<TupleSerializer, TermError> {
        let mut elements = Vec::with_capacity(len.saturating_add(1).min(PREALLOC_CAP));
        elements.push(atom_term(variant)?);
        Ok(TupleSerializer { elements })
    }

    fn serialize_map(self, _: Option<usize>) -> Result<MapSerializer, TermError> {
        Ok(MapSerializer { map: HashMap::new(), key: None })
    }

    fn serialize_struct(self, _: &'static str, _: usize) -> Result<StructSerializer, TermError> {
        Ok(StructSerializer { map: HashMap::new(), variant: None })
    }

    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        variant: &'static str,
        _: usize,
    ) -> Result<StructSerializer, TermError> {
        Ok(StructSerializer { map: HashMap::new(), variant: Some(atom_term(variant)?) })
    }
}

/// Sequences and tuples: a binary while every element so far was a direct `u8`, a list or tuple
/// of terms from the first element that was not.
struct SeqSerializer {
    /// `true` for `serialize_tuple` (tuples and arrays), `false` for sequences.
    tuple: bool,
    /// `Some` while every element so far was a direct `u8`; then `terms` is empty.
    bytes: Option<Vec<u8>>,
    terms: Vec<Term>,
}

impl SeqSerializer {
    fn new(tuple: bool, len: usize) -> Self {
        SeqSerializer { tuple, bytes: Some(Vec::with_capacity(len.min(PREALLOC_CAP))), terms: Vec::new() }
    }

    fn push<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        let probe = Cell::new(false);
        let term = value.serialize(TermSerializer { byte_probe: Some(&probe) })?;
        if let Some(bytes) = self.bytes.as_mut() {
            if let (true, Term::FixInteger(FixInteger { value })) = (probe.get(), &term) {
                if let Ok(byte) = u8::try_from(*value) {
                    bytes.push(byte);
                    return Ok(());
                }
            }
        }
        if let Some(bytes) = self.bytes.take() {
            self.terms.reserve(bytes.len().saturating_add(1));
            self.terms.extend(bytes.into_iter().map(|b| Term::FixInteger(FixInteger::from(b))));
        }
        self.terms.push(term);
        Ok(())
    }

    fn finish(self) -> Term {
        match self.bytes {
            Some(bytes) if !bytes.is_empty() => Term::Binary(Binary::from(bytes)),
            _ if self.tuple => Term::Tuple(Tuple::from(self.terms)),
            _ => Term::List(List::from(self.terms)),
        }
    }
}

impl ser::SerializeSeq for SeqSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        self.push(value)
    }

    fn end(self) -> Result<Term, TermError> {
        Ok(self.finish())
    }
}

impl ser::SerializeTuple for SeqSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_element<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        self.push(value)
    }

    fn end(self) -> Result<Term, TermError> {
        Ok(self.finish())
    }
}

/// Tuple structs and tuple variants (the variant's atom already in `elements[0]`).
struct TupleSerializer {
    elements: Vec<Term>,
}

impl ser::SerializeTupleStruct for TupleSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        self.elements.push(value.serialize(TermSerializer::plain())?);
        Ok(())
    }

    fn end(self) -> Result<Term, TermError> {
        Ok(Term::Tuple(Tuple::from(self.elements)))
    }
}

impl ser::SerializeTupleVariant for TupleSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        ser::SerializeTupleStruct::serialize_field(self, value)
    }

    fn end(self) -> Result<Term, TermError> {
        ser::SerializeTupleStruct::end(self)
    }
}

/// Maps: keys and values mapped like any value; a repeated key keeps the last value.
struct MapSerializer {
    map: HashMap<Term, Term>,
    key: Option<Term>,
}

impl ser::SerializeMap for MapSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), TermError> {
        self.key = Some(key.serialize(TermSerializer::plain())?);
        Ok(())
    }

    fn serialize_value<T: ?Sized + Serialize>(&mut self, value: &T) -> Result<(), TermError> {
        let key = self.key.take().ok_or_else(|| TermError::new("map value serialised without a key"))?;
        self.map.insert(key, value.serialize(TermSerializer::plain())?);
        Ok(())
    }

    fn end(self) -> Result<Term, TermError> {
        match self.key {
            Some(_) => Err(TermError::new("map key serialised without a value")),
            None => Ok(Term::Map(Map::from(self.map))),
        }
    }
}

/// Structs (a map with atom keys) and struct variants (`{Variant, Map}`).
struct StructSerializer {
    map: HashMap<Term, Term>,
    variant: Option<Term>,
}

impl ser::SerializeStruct for StructSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), TermError> {
        self.map.insert(atom_term(key)?, value.serialize(TermSerializer::plain())?);
        Ok(())
    }

    fn end(self) -> Result<Term, TermError> {
        let map = Term::Map(Map::from(self.map));
        Ok(match self.variant {
            Some(tag) => Term::Tuple(Tuple::from(vec![tag, map])),
            None => map,
        })
    }
}

impl ser::SerializeStructVariant for StructSerializer {
    type Ok = Term;
    type Error = TermError;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, key: &'static str, value: &T) -> Result<(), TermError> {
        ser::SerializeStruct::serialize_field(self, key, value)
    }

    fn end(self) -> Result<Term, TermError> {
        ser::SerializeStruct::end(self)
    }
}

/// An atom, refusing names Erlang would reject.
fn atom_term(name: &str) -> Result<Term, TermError> {
    Ok(Term::Atom(checked_atom(name.to_owned())?))
}

fn checked_atom(name: String) -> Result<Atom, TermError> {
    let chars = name.chars().count();
    if chars > MAX_ATOM_CHARS {
        return Err(TermError::new(format!(
            "atom of {chars} characters exceeds Erlang's limit of {MAX_ATOM_CHARS}: {}...",
            clip(&name)
        )));
    }
    Ok(Atom::from(name))
}

fn float_term(v: f64) -> Result<Term, TermError> {
    Float::try_from(v)
        .map(Term::Float)
        .map_err(|_| TermError::new(format!("float {v:?} has no Erlang representation (not finite)")))
}

/// A fixnum when the value fits an `i32`, a bignum otherwise.
fn int_term(v: i128) -> Term {
    if let Ok(small) = i32::try_from(v) {
        return Term::FixInteger(FixInteger::from(small));
    }
    if let Ok(v64) = i64::try_from(v) {
        return Term::BigInteger(BigInteger::from(v64));
    }
    // Assembled from two 64-bit halves: eetf's `BigInteger` has no `From<i128>` and the bignum
    // type is reachable only through it. `v >> 64` is an arithmetic shift, so it fits an i64.
    let high = BigInteger::from((v >> 64) as i64).value;
    let low = BigInteger::from(v as u64).value;
    Term::BigInteger(BigInteger { value: (high << 64u32) + low })
}

fn uint_term(v: u128) -> Term {
    if let Ok(signed) = i128::try_from(v) {
        return int_term(signed);
    }
    let high = BigInteger::from((v >> 64) as u64).value;
    let low = BigInteger::from(v as u64).value;
    Term::BigInteger(BigInteger { value: (high << 64u32) + low })
}

/// `TERM_MAGIC` content: the ETF bytes of the term (a binary after mapping `serialize_bytes`).
fn raw_from_content(content: Term) -> Result<Term, TermError> {
    match content {
        Term::Binary(binary) => decode_raw(&binary.bytes),
        other => Err(TermError::mismatch("ETF bytes (a binary) inside a TERM_MAGIC newtype", &other)),
    }
}

/// `PID_MAGIC` content: `{Node, Id, Serial, Creation}`.
fn pid_from_content(content: Term) -> Result<Term, TermError> {
    let [node, id, serial, creation] =
        tuple_of::<4>(content, "(node, id, serial, creation) inside a PID_MAGIC newtype")?;
    Ok(Term::Pid(Pid {
        node: node_atom(node)?,
        id: u32_of(id, "pid id")?,
        serial: u32_of(serial, "pid serial")?,
        creation: u32_of(creation, "pid creation")?,
    }))
}

/// `REF_MAGIC` content: `{Node, [Id], Creation}`.
fn ref_from_content(content: Term) -> Result<Term, TermError> {
    let [node, ids, creation] = tuple_of::<3>(content, "(node, ids, creation) inside a REF_MAGIC newtype")?;
    let id = match ids {
        Term::List(list) => list.elements.into_iter().map(|t| u32_of(t, "reference id")).collect::<Result<_, _>>()?,
        Term::Binary(Binary { bytes }) | Term::ByteList(ByteList { bytes }) => {
            bytes.into_iter().map(u32::from).collect()
        }
        other => return Err(TermError::mismatch("a list of reference ids", &other)),
    };
    let id: Vec<u32> = id;
    if id.is_empty() || id.len() > MAX_REF_WORDS {
        return Err(TermError::new(format!("expected 1 to {MAX_REF_WORDS} reference ids, found {}", id.len())));
    }
    Ok(Term::Reference(Box::new(Reference {
        node: node_atom(node)?,
        id,
        creation: u32_of(creation, "reference creation")?,
    })))
}

fn tuple_of<const N: usize>(content: Term, what: &str) -> Result<[Term; N], TermError> {
    match content {
        Term::Tuple(tuple) if tuple.elements.len() == N => {
            tuple.elements.try_into().map_err(|_| TermError::new(format!("expected a tuple of arity {N} for {what}")))
        }
        other => Err(TermError::mismatch(format_args!("a tuple of arity {N} {what}"), &other)),
    }
}

fn node_atom(term: Term) -> Result<Atom, TermError> {
    match term {
        Term::Atom(atom) => checked_atom(atom.name),
        Term::Binary(binary) => match String::from_utf8(binary.bytes) {
            Ok(name) => checked_atom(name),
            Err(_) => Err(TermError::new("expected a UTF-8 node name, found a binary that is not valid UTF-8")),
        },
        other => Err(TermError::mismatch("a node name (string)", &other)),
    }
}

fn u32_of(term: Term, what: &str) -> Result<u32, TermError> {
    match wide(&term).and_then(narrow::<u32>) {
        Some(v) => Ok(v),
        None => Err(TermError::mismatch(format_args!("a {what} in the range of u32"), &term)),
    }
}

// ---------------------------------------------------------------------------------------------
// Integers
// ---------------------------------------------------------------------------------------------

/// An Erlang integer seen through Rust's widest integer types.
#[derive(Clone, Copy)]
enum Wide {
    Signed(i128),
    /// Above `i128::MAX`, up to `u128::MAX`.
    Unsigned(u128),
    /// Outside `i128::MIN..=u128::MAX`: fits no Rust integer.
    Huge,
}

fn wide(term: &Term) -> Option<Wide> {
    match term {
        Term::FixInteger(i) => Some(Wide::Signed(i128::from(i.value))),
        Term::BigInteger(big) => Some(big_to_wide(big)),
        _ => None,
    }
}

fn big_to_wide(big: &BigInteger) -> Wide {
    // `bits()` is the magnitude's length; checking it first keeps a huge bignum from being
    // copied into a byte vector.
    if big.value.bits() > 128 {
        return Wide::Huge;
    }
    // Two's complement, little endian, at most 17 bytes here.
    let bytes = big.value.to_signed_bytes_le();
    let negative = bytes.last().is_some_and(|top| top & 0x80 != 0);
    let mut buf = if negative { [0xff; 16] } else { [0; 16] };
    for (dst, src) in buf.iter_mut().zip(&bytes) {
        *dst = *src;
    }
    if bytes.len() <= 16 {
        Wide::Signed(i128::from_le_bytes(buf))
    } else if !negative && bytes.iter().skip(16).all(|b| *b == 0) {
        Wide::Unsigned(u128::from_le_bytes(buf))
    } else {
        Wide::Huge
    }
}

fn narrow<T: TryFrom<i128> + TryFrom<u128>>(w: Wide) -> Option<T> {
    match w {
        Wide::Signed(v) => T::try_from(v).ok(),
        Wide::Unsigned(v) => T::try_from(v).ok(),
        Wide::Huge => None,
    }
}

/// The integer `term` as a `T`, or an error naming the type and its range.
fn int_in<T>(term: &Term, type_name: &str, min: impl fmt::Display, max: impl fmt::Display) -> Result<T, TermError>
where
    T: TryFrom<i128> + TryFrom<u128>,
{
    match wide(term) {
        None => Err(TermError::mismatch(format_args!("an integer ({type_name})"), term)),
        Some(w) => narrow(w).ok_or_else(|| {
            TermError::mismatch(format_args!("an integer in the range of {type_name} ({min}..={max})"), term)
        }),
    }
}

fn float_of(term: &Term) -> Result<f64, TermError> {
    match term {
        Term::Float(f) => Ok(f.value),
        _ => match wide(term) {
            Some(Wide::Signed(v)) => Ok(v as f64),
            Some(Wide::Unsigned(v)) => Ok(v as f64),
            _ => Err(TermError::mismatch("a float", term)),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Deserializer
// ---------------------------------------------------------------------------------------------

const EXPECT_STRING: &str = "a UTF-8 binary (string)";

/// Reads a Rust value out of an owned [`Term`].
struct TermDeserializer {
    term: Term,
}

impl TermDeserializer {
    fn new(term: Term) -> Self {
        TermDeserializer { term }
    }
}

macro_rules! deserialize_int {
    ($($method:ident => $visit:ident : $ty:ty),* $(,)?) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
            let v: $ty = int_in(&self.term, stringify!($ty), <$ty>::MIN, <$ty>::MAX)?;
            visitor.$visit(v)
        }
    )*};
}

impl<'de> de::Deserializer<'de> for TermDeserializer {
    type Error = TermError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match self.term {
            Term::Atom(atom) => match atom.name.as_str() {
                "true" => visitor.visit_bool(true),
                "false" => visitor.visit_bool(false),
                "undefined" | "nil" => visitor.visit_unit(),
                _ => visitor.visit_string(atom.name),
            },
            Term::FixInteger(i) => visitor.visit_i64(i64::from(i.value)),
            Term::BigInteger(ref big) => match big_to_wide(big) {
                Wide::Signed(v) => match (i64::try_from(v), u64::try_from(v)) {
                    (Ok(v), _) => visitor.visit_i64(v),
                    (_, Ok(v)) => visitor.visit_u64(v),
                    _ => visitor.visit_i128(v),
                },
                Wide::Unsigned(v) => visitor.visit_u128(v),
                Wide::Huge => Err(TermError::mismatch("an integer that fits in 128 bits", &self.term)),
            },
            Term::Float(f) => visitor.visit_f64(f.value),
            Term::Binary(binary) => match String::from_utf8(binary.bytes) {
                Ok(s) => visitor.visit_string(s),
                Err(e) => visitor.visit_byte_buf(e.into_bytes()),
            },
            Term::ByteList(list) => visitor.visit_seq(ByteSeqAccess { iter: list.bytes.into_iter() }),
            Term::List(list) => visitor.visit_seq(SeqAccess::new(list.elements)),
            Term::Tuple(tuple) if tuple.elements.is_empty() => visitor.visit_unit(),
            Term::Tuple(tuple) => visitor.visit_seq(SeqAccess::new(tuple.elements)),
            Term::Map(map) => visitor.visit_map(MapAccess::new(map)),
            Term::Pid(pid) => visitor.visit_seq(SeqAccess::new(pid_content(pid))),
            Term::Reference(reference) => visitor.visit_seq(SeqAccess::new(ref_content(*reference))),
            other => Err(unmappable(&other)),
        }
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match &self.term {
            Term::Atom(atom) if atom.name == "true" => visitor.visit_bool(true),
            Term::Atom(atom) if atom.name == "false" => visitor.visit_bool(false),
            other => Err(TermError::mismatch("a boolean (atom true or false)", other)),
        }
    }

    deserialize_int! {
        deserialize_i8 => visit_i8: i8,
        deserialize_i16 => visit_i16: i16,
        deserialize_i32 => visit_i32: i32,
        deserialize_i64 => visit_i64: i64,
        deserialize_i128 => visit_i128: i128,
        deserialize_u8 => visit_u8: u8,
        deserialize_u16 => visit_u16: u16,
        deserialize_u32 => visit_u32: u32,
        deserialize_u64 => visit_u64: u64,
        deserialize_u128 => visit_u128: u128,
    }

    fn deserialize_f32<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        let v = float_of(&self.term)?;
        // Rounding to the nearest f32 is expected; overflowing to infinity is a range error.
        let narrowed = v as f32;
        if narrowed.is_infinite() {
            return Err(TermError::mismatch("a float in the range of f32", &self.term));
        }
        visitor.visit_f32(narrowed)
    }

    fn deserialize_f64<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_f64(float_of(&self.term)?)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        let c = match &self.term {
            Term::Binary(binary) => {
                let mut chars = std::str::from_utf8(&binary.bytes).ok().map(str::chars);
                match chars.as_mut().map(|c| (c.next(), c.next())) {
                    Some((Some(c), None)) => Some(c),
                    _ => None,
                }
            }
            term => wide(term).and_then(narrow::<u32>).and_then(char::from_u32),
        };
        match c {
            Some(c) => visitor.visit_char(c),
            None => Err(TermError::mismatch("a character (integer code point)", &self.term)),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_string(string_of(self.term)?)
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_string(string_of(self.term)?)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_byte_buf(bytes_of(self.term)?)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_byte_buf(bytes_of(self.term)?)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match &self.term {
            Term::Atom(atom) if atom.name == "undefined" || atom.name == "nil" => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match &self.term {
            Term::Tuple(tuple) if tuple.elements.is_empty() => visitor.visit_unit(),
            other => Err(TermError::mismatch("an empty tuple {} (unit)", other)),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(self, name: &'static str, visitor: V) -> Result<V::Value, TermError> {
        match &self.term {
            Term::Atom(atom) if atom.name == name => visitor.visit_unit(),
            Term::Tuple(tuple) if tuple.elements.is_empty() => visitor.visit_unit(),
            other => Err(TermError::mismatch(format_args!("the atom {} (unit struct)", clip(name)), other)),
        }
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        visitor: V,
    ) -> Result<V::Value, TermError> {
        match (name, self.term) {
            (TERM_MAGIC, term) => visitor.visit_byte_buf(encode_raw(&term)?),
            (PID_MAGIC, Term::Pid(pid)) => {
                visitor.visit_newtype_struct(TermDeserializer::new(Term::Tuple(Tuple::from(pid_content(pid)))))
            }
            (PID_MAGIC, other) => Err(TermError::mismatch("a pid", &other)),
            (REF_MAGIC, Term::Reference(reference)) => {
                visitor.visit_newtype_struct(TermDeserializer::new(Term::Tuple(Tuple::from(ref_content(*reference)))))
            }
            (REF_MAGIC, other) => Err(TermError::mismatch("a reference", &other)),
            (_, term) => visitor.visit_newtype_struct(TermDeserializer::new(term)),
        }
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match self.term {
            Term::List(list) => visitor.visit_seq(SeqAccess::new(list.elements)),
            Term::ByteList(ByteList { bytes }) | Term::Binary(Binary { bytes }) => {
                visitor.visit_seq(ByteSeqAccess { iter: bytes.into_iter() })
            }
            other => Err(TermError::mismatch("a list", &other)),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, TermError> {
        match self.term {
            Term::Tuple(tuple) if tuple.elements.len() == len => visitor.visit_seq(SeqAccess::new(tuple.elements)),
            Term::List(list) if list.elements.len() == len => visitor.visit_seq(SeqAccess::new(list.elements)),
            Term::ByteList(ByteList { bytes }) | Term::Binary(Binary { bytes }) if bytes.len() == len => {
                visitor.visit_seq(ByteSeqAccess { iter: bytes.into_iter() })
            }
            other => Err(TermError::mismatch(format_args!("a tuple of arity {len}"), &other)),
        }
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        len: usize,
        visitor: V,
    ) -> Result<V::Value, TermError> {
        self.deserialize_tuple(len, visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match self.term {
            Term::Map(map) => visitor.visit_map(MapAccess::new(map)),
            other => Err(TermError::mismatch("a map", &other)),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TermError> {
        match self.term {
            Term::Map(map) => visitor.visit_map(MapAccess::new(map)),
            other => Err(TermError::mismatch(format_args!("a map (struct {})", clip(name)), &other)),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        _: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TermError> {
        match self.term {
            Term::Atom(atom) => {
                visitor.visit_enum(EnumAccess { variant: atom.name, rest: Vec::new().into_iter(), bare: true })
            }
            Term::Tuple(tuple) if matches!(tuple.elements.first(), Some(Term::Atom(_))) => {
                let mut elements = tuple.elements.into_iter();
                match elements.next() {
                    Some(Term::Atom(atom)) => {
                        visitor.visit_enum(EnumAccess { variant: atom.name, rest: elements, bare: false })
                    }
                    _ => Err(TermError::new(format!("expected a variant atom first in a tuple (enum {})", clip(name)))),
                }
            }
            other => Err(TermError::mismatch(
                format_args!("an atom or a tuple {{Variant, ...}} (enum {})", clip(name)),
                &other,
            )),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        match self.term {
            Term::Atom(atom) => visitor.visit_string(atom.name),
            Term::Binary(binary) => match String::from_utf8(binary.bytes) {
                Ok(s) => visitor.visit_string(s),
                Err(e) => visitor.visit_byte_buf(e.into_bytes()),
            },
            other => Err(TermError::mismatch("an atom or a binary (a field or variant name)", &other)),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, TermError> {
        visitor.visit_unit()
    }
}

/// Error for a term kind that has no Rust counterpart.
fn unmappable(term: &Term) -> TermError {
    TermError::new(format!("{} has no Rust counterpart (only RawTerm can carry it)", describe(term)))
}

/// A string from a UTF-8 binary or a charlist.
fn string_of(term: Term) -> Result<String, TermError> {
    match term {
        Term::Binary(binary) => String::from_utf8(binary.bytes).map_err(|e| {
            TermError::new(format!(
                "expected {EXPECT_STRING}, found binary of {} that is not valid UTF-8",
                count(e.as_bytes().len(), "byte", "bytes")
            ))
        }),
        // A string list holds code points 0..=255 (Latin-1), not UTF-8 bytes.
        Term::ByteList(list) => Ok(list.bytes.iter().map(|b| char::from(*b)).collect()),
        Term::List(ref list) => {
            let mut s = String::with_capacity(list.elements.len().min(PREALLOC_CAP));
            for (index, element) in list.elements.iter().enumerate() {
                match wide(element).and_then(narrow::<u32>).and_then(char::from_u32) {
                    Some(c) => s.push(c),
                    None => {
                        return Err(TermError::new(format!(
                            "expected {EXPECT_STRING} or a charlist, found {} whose element {index} is {}",
                            describe(&term),
                            describe(element)
                        )))
                    }
                }
            }
            Ok(s)
        }
        other => Err(TermError::mismatch(EXPECT_STRING, &other)),
    }
}

/// Bytes from a binary, a string list, or a list of integers `0..=255`.
fn bytes_of(term: Term) -> Result<Vec<u8>, TermError> {
    match term {
        Term::Binary(Binary { bytes }) | Term::ByteList(ByteList { bytes }) => Ok(bytes),
        Term::List(ref list) => {
            let bytes: Option<Vec<u8>> = list.elements.iter().map(|e| wide(e).and_then(narrow::<u8>)).collect();
            bytes.ok_or_else(|| TermError::mismatch("a binary", &term))
        }
        other => Err(TermError::mismatch("a binary", &other)),
    }
}

/// `PID_MAGIC` content of a pid: `{NodeName, Id, Serial, Creation}`.
fn pid_content(pid: Pid) -> Vec<Term> {
    vec![
        Term::Binary(Binary::from(pid.node.name.into_bytes())),
        int_term(i128::from(pid.id)),
        int_term(i128::from(pid.serial)),
        int_term(i128::from(pid.creation)),
    ]
}

/// `REF_MAGIC` content of a reference: `{NodeName, [Id], Creation}`.
fn ref_content(reference: Reference) -> Vec<Term> {
    vec![
        Term::Binary(Binary::from(reference.node.name.into_bytes())),
        Term::List(List::from(reference.id.into_iter().map(|id| int_term(i128::from(id))).collect::<Vec<_>>())),
        int_term(i128::from(reference.creation)),
    ]
}

/// Elements of a list or tuple, each deserialised from its own term.
struct SeqAccess {
    iter: std::vec::IntoIter<Term>,
}

impl SeqAccess {
    fn new(elements: Vec<Term>) -> Self {
        SeqAccess { iter: elements.into_iter() }
    }
}

impl<'de> de::SeqAccess<'de> for SeqAccess {
    type Error = TermError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, TermError> {
        match self.iter.next() {
            Some(term) => seed.deserialize(TermDeserializer::new(term)).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// Bytes of a binary or string list, each visited as the integer term it stands for.
struct ByteSeqAccess {
    iter: std::vec::IntoIter<u8>,
}

impl<'de> de::SeqAccess<'de> for ByteSeqAccess {
    type Error = TermError;

    fn next_element_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<Option<T::Value>, TermError> {
        match self.iter.next() {
            Some(byte) => seed.deserialize(TermDeserializer::new(Term::FixInteger(FixInteger::from(byte)))).map(Some),
            None => Ok(None),
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// Entries of a map; a failing value is reported with its key when the key is a name.
struct MapAccess {
    iter: hash_map::IntoIter<Term, Term>,
    value: Option<(Term, Option<String>)>,
}

impl MapAccess {
    fn new(map: Map) -> Self {
        MapAccess { iter: map.map.into_iter(), value: None }
    }
}

impl<'de> de::MapAccess<'de> for MapAccess {
    type Error = TermError;

    fn next_key_seed<K: DeserializeSeed<'de>>(&mut self, seed: K) -> Result<Option<K::Value>, TermError> {
        match self.iter.next() {
            Some((key, value)) => {
                let label = match &key {
                    Term::Atom(atom) => Some(clip(&atom.name)),
                    Term::Binary(binary) => std::str::from_utf8(&binary.bytes).ok().map(clip),
                    _ => None,
                };
                self.value = Some((value, label));
                seed.deserialize(TermDeserializer::new(key)).map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, TermError> {
        let (value, label) = self.value.take().ok_or_else(|| TermError::new("map value requested before its key"))?;
        seed.deserialize(TermDeserializer::new(value)).map_err(|e| match label {
            Some(label) => e.context(format_args!("in field {label}")),
            None => e,
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

/// An enum value: the variant's name and the tuple elements after it.
struct EnumAccess {
    variant: String,
    rest: std::vec::IntoIter<Term>,
    /// The value was a bare atom rather than a tuple.
    bare: bool,
}

impl<'de> de::EnumAccess<'de> for EnumAccess {
    type Error = TermError;
    type Variant = Self;

    fn variant_seed<V: DeserializeSeed<'de>>(self, seed: V) -> Result<(V::Value, Self), TermError> {
        let value = seed.deserialize(de::value::StrDeserializer::<TermError>::new(&self.variant))?;
        Ok((value, self))
    }
}

impl EnumAccess {
    fn found(&self) -> String {
        if self.bare {
            format!("atom {}", clip(&self.variant))
        } else {
            format!("tuple of arity {}", self.rest.len().saturating_add(1))
        }
    }

    fn shape_error(&self, expected: impl fmt::Display) -> TermError {
        TermError::new(format!("expected {expected} for variant {}, found {}", clip(&self.variant), self.found()))
    }
}

impl<'de> de::VariantAccess<'de> for EnumAccess {
    type Error = TermError;

    fn unit_variant(self) -> Result<(), TermError> {
        match self.rest.len() {
            0 => Ok(()),
            _ => Err(self.shape_error("a bare atom")),
        }
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(mut self, seed: T) -> Result<T::Value, TermError> {
        if self.rest.len() != 1 {
            return Err(self.shape_error("a tuple of arity 2 {Variant, Value}"));
        }
        match self.rest.next() {
            Some(term) => seed.deserialize(TermDeserializer::new(term)),
            None => Err(self.shape_error("a tuple of arity 2 {Variant, Value}")),
        }
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, visitor: V) -> Result<V::Value, TermError> {
        if self.rest.len() != len {
            return Err(self.shape_error(format_args!("a tuple of arity {}", len.saturating_add(1))));
        }
        visitor.visit_seq(SeqAccess { iter: self.rest })
    }

    fn struct_variant<V: Visitor<'de>>(
        mut self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, TermError> {
        if self.rest.len() != 1 {
            return Err(self.shape_error("a tuple of arity 2 {Variant, #{...}}"));
        }
        match self.rest.next() {
            Some(term) => de::Deserializer::deserialize_struct(TermDeserializer::new(term), "variant", fields, visitor),
            None => Err(self.shape_error("a tuple of arity 2 {Variant, #{...}}")),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Describing terms in errors
// ---------------------------------------------------------------------------------------------

/// A short description of a term for error messages: its kind and, when small, its value.
fn describe(term: &Term) -> String {
    match term {
        Term::Atom(atom) => format!("atom {}", clip(&atom.name)),
        Term::FixInteger(i) => format!("integer {}", i.value),
        Term::BigInteger(big) => match big.value.bits() {
            bits if bits <= 128 => format!("integer {}", big.value),
            bits => format!("integer of {bits} bits"),
        },
        Term::Float(f) => format!("float {:?}", f.value),
        Term::Pid(pid) => format!("pid <{}.{}.{}>", clip(&pid.node.name), pid.id, pid.serial),
        Term::Port(port) => format!("port #Port<{}.{}>", clip(&port.node.name), port.id),
        Term::Reference(reference) => format!("reference on node {}", clip(&reference.node.name)),
        Term::ExternalFun(fun) => format!("fun {}:{}/{}", clip(&fun.module.name), clip(&fun.function.name), fun.arity),
        Term::InternalFun(_) => "fun".to_owned(),
        Term::Binary(binary) => format!("binary of {}", count(binary.bytes.len(), "byte", "bytes")),
        Term::BitBinary(bits) => {
            let full_bytes = bits.bytes.len().saturating_sub(1).saturating_mul(8);
            let tail = if bits.bytes.is_empty() { 0 } else { usize::from(bits.tail_bits_size) };
            format!("bitstring of {}", count(full_bytes.saturating_add(tail), "bit", "bits"))
        }
        Term::ByteList(list) => format!("list of {}", count(list.bytes.len(), "element", "elements")),
        Term::List(list) if list.elements.is_empty() => "empty list []".to_owned(),
        Term::List(list) => format!("list of {}", count(list.elements.len(), "element", "elements")),
        Term::ImproperList(list) => {
            format!("improper list of {} and a tail", count(list.elements.len(), "element", "elements"))
        }
        Term::Tuple(tuple) => format!("tuple of arity {}", tuple.elements.len()),
        Term::Map(map) => format!("map of {}", count(map.map.len(), "entry", "entries")),
    }
}

/// "1 byte", "3 bytes".
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `name`, cut to a readable length.
fn clip(name: &str) -> String {
    if name.chars().count() <= ERROR_NAME_CHARS {
        name.to_owned()
    } else {
        name.chars().take(ERROR_NAME_CHARS).chain("...".chars()).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// RawTerm bytes
// ---------------------------------------------------------------------------------------------
//
// eetf 0.12's codec is not total (its encoder panics on some bitstrings, its decoder on atom
// cache references, and it reserves capacity from unchecked counts), so RawTerm's bytes go
// through the cluster's hardened codec (`etf`): its own iterative encoder, and its validator in
// front of eetf's decoder, with RawTerm's depth limit.

fn raw_limits() -> super::etf::Limits {
    super::etf::Limits { max_depth: RAW_TERM_MAX_DEPTH as u32, ..Default::default() }
}

/// The term's ETF bytes (version byte first), refusing terms that cannot be encoded.
fn encode_raw(term: &Term) -> Result<Vec<u8>, TermError> {
    let mut bytes = Vec::new();
    super::etf::encode_versioned(term, &mut bytes)
        .map_err(|e| TermError::new(format!("RawTerm: cannot encode the term: {e}")))?;
    // The same bound as on the way in: what RawTerm writes, it can read back.
    decode_raw(&bytes)?;
    Ok(bytes)
}

/// Decodes ETF bytes (exactly one versioned term) after proving them safe for eetf's decoder.
fn decode_raw(bytes: &[u8]) -> Result<Term, TermError> {
    let (term, used) = super::etf::decode_versioned(bytes, &raw_limits())
        .map_err(|e| TermError::new(format!("RawTerm: invalid ETF: {e}")))?;
    if used != bytes.len() {
        return Err(TermError::new(format!("RawTerm: invalid ETF: {} bytes after the term", bytes.len() - used)));
    }
    Ok(term)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::etf::*;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;
    use std::fmt::Debug;

    fn atom(name: &str) -> Term {
        Term::Atom(Atom::from(name))
    }

    fn int(v: i32) -> Term {
        Term::FixInteger(FixInteger::from(v))
    }

    fn bin(bytes: &[u8]) -> Term {
        Term::Binary(Binary::from(bytes))
    }

    fn list(elements: Vec<Term>) -> Term {
        Term::List(List::from(elements))
    }

    fn tuple(elements: Vec<Term>) -> Term {
        Term::Tuple(Tuple::from(elements))
    }

    fn map(pairs: Vec<(Term, Term)>) -> Term {
        Term::Map(Map::from(pairs.into_iter().collect::<HashMap<_, _>>()))
    }

    fn big_decimal(term: &Term) -> String {
        match term {
            Term::BigInteger(big) => big.value.to_string(),
            other => panic!("not a bignum: {other:?}"),
        }
    }

    /// `value` -> term -> value, asserting the value survives; returns the term.
    fn round_trip<T: Serialize + de::DeserializeOwned + PartialEq + Debug>(value: &T) -> Term {
        let term = to_term(value).unwrap_or_else(|e| panic!("to_term({value:?}): {e}"));
        let back: T = from_term(term.clone()).unwrap_or_else(|e| panic!("from_term({term:?}): {e}"));
        assert_eq!(&back, value, "round trip through {term:?}");
        term
    }

    fn decode_err<T: de::DeserializeOwned + Debug>(term: Term) -> String {
        match from_term::<T>(term) {
            Ok(v) => panic!("decoded to {v:?}, expected an error"),
            Err(e) => e.to_string(),
        }
    }

    /// Stand-in for `serde_bytes::ByteBuf`: always `serialize_bytes`.
    #[derive(Debug, PartialEq)]
    struct Bytes(Vec<u8>);

    impl Serialize for Bytes {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_bytes(&self.0)
        }
    }

    impl<'de> Deserialize<'de> for Bytes {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Bytes;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("bytes")
                }
                fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                    Ok(Bytes(v))
                }
            }
            d.deserialize_byte_buf(V)
        }
    }

    /// Mimics smarm's `Pid`: a `PID_MAGIC` newtype around `(node, id, serial, creation)`.
    #[derive(Debug, PartialEq, Clone)]
    struct TestPid {
        node: String,
        id: u32,
        serial: u32,
        creation: u32,
    }

    impl Serialize for TestPid {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_newtype_struct(PID_MAGIC, &(self.node.as_str(), self.id, self.serial, self.creation))
        }
    }

    impl<'de> Deserialize<'de> for TestPid {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = TestPid;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a pid")
                }
                fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<TestPid, D::Error> {
                    let (node, id, serial, creation) = <(String, u32, u32, u32)>::deserialize(d)?;
                    Ok(TestPid { node, id, serial, creation })
                }
            }
            d.deserialize_newtype_struct(PID_MAGIC, V)
        }
    }

    /// Mimics smarm's reference type: a `REF_MAGIC` newtype around `(node, ids, creation)`.
    #[derive(Debug, PartialEq, Clone)]
    struct TestRef {
        node: String,
        ids: Vec<u32>,
        creation: u32,
    }

    impl Serialize for TestRef {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            s.serialize_newtype_struct(REF_MAGIC, &(self.node.as_str(), &self.ids, self.creation))
        }
    }

    impl<'de> Deserialize<'de> for TestRef {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = TestRef;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a reference")
                }
                fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<TestRef, D::Error> {
                    let (node, ids, creation) = <(String, Vec<u32>, u32)>::deserialize(d)?;
                    Ok(TestRef { node, ids, creation })
                }
            }
            d.deserialize_newtype_struct(REF_MAGIC, V)
        }
    }

    /// An untyped value, read through `deserialize_any` (what `serde_json::Value` would see).
    #[derive(Debug, PartialEq)]
    enum Value {
        Unit,
        Bool(bool),
        I64(i64),
        U64(u64),
        I128(i128),
        U128(u128),
        F64(f64),
        Str(String),
        Bytes(Vec<u8>),
        Seq(Vec<Value>),
        Map(Vec<(Value, Value)>),
    }

    impl<'de> Deserialize<'de> for Value {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Value;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("anything")
                }
                fn visit_unit<E>(self) -> Result<Value, E> {
                    Ok(Value::Unit)
                }
                fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
                    Ok(Value::Bool(v))
                }
                fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
                    Ok(Value::I64(v))
                }
                fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
                    Ok(Value::U64(v))
                }
                fn visit_i128<E>(self, v: i128) -> Result<Value, E> {
                    Ok(Value::I128(v))
                }
                fn visit_u128<E>(self, v: u128) -> Result<Value, E> {
                    Ok(Value::U128(v))
                }
                fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
                    Ok(Value::F64(v))
                }
                fn visit_str<E>(self, v: &str) -> Result<Value, E> {
                    Ok(Value::Str(v.to_owned()))
                }
                fn visit_bytes<E>(self, v: &[u8]) -> Result<Value, E> {
                    Ok(Value::Bytes(v.to_vec()))
                }
                fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some(v) = seq.next_element()? {
                        out.push(v);
                    }
                    Ok(Value::Seq(out))
                }
                fn visit_map<A: de::MapAccess<'de>>(self, mut m: A) -> Result<Value, A::Error> {
                    let mut out = Vec::new();
                    while let Some(entry) = m.next_entry()? {
                        out.push(entry);
                    }
                    Ok(Value::Map(out))
                }
            }
            d.deserialize_any(V)
        }
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Ping;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Meters(u32);

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Version(u8, u8);

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct User {
        id: u32,
        name: String,
        age: u8,
        tags: Vec<String>,
        email: Option<String>,
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    #[serde(rename_all = "snake_case")]
    enum Cmd {
        Stop,
        Cast(i32),
        Move(i32, i32),
        Call { id: u64, msg: String },
    }

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Nested {
        users: Vec<User>,
        cmds: Vec<Cmd>,
        by_name: BTreeMap<String, Meters>,
        pair: (i64, Option<Cmd>),
        unit: (),
        ping: Ping,
        raw: Vec<u8>,
        version: Version,
    }

    fn ann() -> User {
        User { id: 7, name: "ann".into(), age: 33, tags: vec!["a".into(), "é".into()], email: None }
    }

    fn ann_term() -> Term {
        map(vec![
            (atom("id"), int(7)),
            (atom("name"), bin(b"ann")),
            (atom("age"), int(33)),
            (atom("tags"), list(vec![bin(b"a"), bin("é".as_bytes())])),
            (atom("email"), atom("undefined")),
        ])
    }

    // --- Exact terms of the documented rows -------------------------------------------------

    #[test]
    fn bool_is_the_atoms_true_and_false() {
        assert_eq!(round_trip(&true), atom("true"));
        assert_eq!(round_trip(&false), atom("false"));
    }

    #[test]
    fn integers_are_fixnums_within_i32_and_bignums_beyond() {
        assert_eq!(round_trip(&5u8), int(5));
        assert_eq!(round_trip(&-7i8), int(-7));
        assert_eq!(round_trip(&-300i16), int(-300));
        assert_eq!(round_trip(&i32::MIN), int(i32::MIN));
        assert_eq!(round_trip(&i32::MAX), int(i32::MAX));
        assert_eq!(round_trip(&7i64), int(7));
        assert_eq!(round_trip(&7u128), int(7));
        assert_eq!(round_trip(&(1i64 << 31)), Term::BigInteger(BigInteger::from(1i64 << 31)));
        assert_eq!(round_trip(&u32::MAX), Term::BigInteger(BigInteger::from(u32::MAX)));
        assert_eq!(round_trip(&u64::MAX), Term::BigInteger(BigInteger::from(u64::MAX)));
        assert_eq!(round_trip(&i64::MIN), Term::BigInteger(BigInteger::from(i64::MIN)));
        assert_eq!(big_decimal(&round_trip(&(1i128 << 70))), (1i128 << 70).to_string());
        assert_eq!(big_decimal(&round_trip(&-(1i128 << 70))), (-(1i128 << 70)).to_string());
        assert_eq!(big_decimal(&round_trip(&i128::MIN)), i128::MIN.to_string());
        assert_eq!(big_decimal(&round_trip(&i128::MAX)), i128::MAX.to_string());
        assert_eq!(big_decimal(&round_trip(&u128::MAX)), u128::MAX.to_string());
        assert_eq!(big_decimal(&round_trip(&((1u128 << 127) + 5))), ((1u128 << 127) + 5).to_string());
        round_trip(&usize::MAX);
        round_trip(&isize::MIN);
    }

    #[test]
    fn small_bignums_decode_into_narrow_integers() {
        // Erlang may send small values as bignums; eetf decodes SMALL_BIG_EXT as BigInteger.
        assert_eq!(from_term::<u8>(Term::BigInteger(BigInteger::from(200u8))).unwrap(), 200);
        assert_eq!(from_term::<i16>(Term::BigInteger(BigInteger::from(-2i64))).unwrap(), -2);
        assert_eq!(from_term::<i128>(Term::BigInteger(BigInteger::from(u64::MAX))).unwrap(), i128::from(u64::MAX));
    }

    #[test]
    fn floats_are_floats_and_accept_integers() {
        assert_eq!(round_trip(&1.5f64), Term::Float(Float { value: 1.5 }));
        assert_eq!(round_trip(&-0.25f32), Term::Float(Float { value: -0.25 }));
        assert_eq!(from_term::<f64>(int(3)).unwrap(), 3.0);
        assert_eq!(from_term::<f32>(Term::BigInteger(BigInteger::from(1u64 << 40))).unwrap(), (1u64 << 40) as f32);
        assert_eq!(decode_err::<f64>(atom("x")), "expected a float, found atom x");
        assert_eq!(
            decode_err::<f32>(Term::Float(Float { value: 1e300 })),
            "expected a float in the range of f32, found float 1e300"
        );
    }

    #[test]
    fn non_finite_floats_are_a_serialisation_error() {
        let err = to_term(&f64::NAN).unwrap_err().to_string();
        assert_eq!(err, "float NaN has no Erlang representation (not finite)");
        assert!(to_term(&f32::INFINITY).is_err());
    }

    #[test]
    fn char_is_its_code_point() {
        assert_eq!(round_trip(&'a'), int(97));
        assert_eq!(round_trip(&'中'), int(0x4e2d));
        assert_eq!(from_term::<char>(bin("é".as_bytes())).unwrap(), 'é');
        assert_eq!(decode_err::<char>(int(0xD800)), "expected a character (integer code point), found integer 55296");
        assert!(from_term::<char>(bin(b"ab")).is_err());
    }

    #[test]
    fn strings_are_utf8_binaries() {
        assert_eq!(round_trip(&"héllo".to_owned()), bin("héllo".as_bytes()));
        assert_eq!(to_term("x").unwrap(), bin(b"x"));
    }

    #[test]
    fn strings_decode_from_charlists() {
        // Erlang "hé" as a string list holds the code points 104, 233 (not UTF-8 bytes).
        let string_list = Term::ByteList(ByteList::from(vec![104, 233]));
        assert_eq!(from_term::<String>(string_list).unwrap(), "hé");
        assert_eq!(from_term::<String>(list(vec![int(104), int(0x4e2d)])).unwrap(), "h中");
        assert_eq!(from_term::<String>(list(vec![])).unwrap(), "");
        assert_eq!(
            decode_err::<String>(list(vec![int(104), int(-1)])),
            "expected a UTF-8 binary (string) or a charlist, found list of 2 elements whose element 1 is integer -1"
        );
    }

    #[test]
    fn string_errors_name_expected_and_found() {
        assert_eq!(decode_err::<String>(atom("foo")), "expected a UTF-8 binary (string), found atom foo");
        assert_eq!(
            decode_err::<String>(bin(&[0xff, 0xfe, 0x00])),
            "expected a UTF-8 binary (string), found binary of 3 bytes that is not valid UTF-8"
        );
        assert_eq!(decode_err::<String>(int(1)), "expected a UTF-8 binary (string), found integer 1");
    }

    #[test]
    fn serialize_bytes_is_always_a_binary() {
        assert_eq!(round_trip(&Bytes(vec![1, 2, 3])), bin(&[1, 2, 3]));
        assert_eq!(round_trip(&Bytes(vec![])), bin(&[]));
        assert_eq!(from_term::<Bytes>(list(vec![int(1), int(255)])).unwrap(), Bytes(vec![1, 255]));
        assert_eq!(from_term::<Bytes>(list(vec![])).unwrap(), Bytes(vec![]));
        assert_eq!(decode_err::<Bytes>(list(vec![int(256)])), "expected a binary, found list of 1 element");
    }

    #[test]
    fn byte_sequences_are_binaries_but_empty_ones_are_empty_lists() {
        assert_eq!(round_trip(&vec![1u8, 2, 3]), bin(&[1, 2, 3]));
        assert_eq!(round_trip(&Vec::<u8>::new()), list(vec![]));
        assert_eq!(to_term(&[1u8, 2, 3][..]).unwrap(), bin(&[1, 2, 3]));
        assert_eq!(round_trip(&[9u8, 8, 7, 6]), bin(&[9, 8, 7, 6]));
        assert_eq!(round_trip(&std::collections::VecDeque::from(vec![4u8])), bin(&[4]));
    }

    #[test]
    fn only_direct_u8_elements_make_a_binary() {
        assert_eq!(round_trip(&vec![1u16, 2]), list(vec![int(1), int(2)]));
        assert_eq!(round_trip(&vec![Some(1u8), None]), list(vec![int(1), atom("undefined")]));
        assert_eq!(round_trip(&vec![Some(1u8), Some(2u8)]), list(vec![int(1), int(2)]));
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Byte(u8);
        assert_eq!(round_trip(&vec![Byte(1)]), list(vec![int(1)]));
        assert_eq!(round_trip(&vec![vec![1u8], vec![]]), list(vec![bin(&[1]), list(vec![])]));

        // A sequence that turns out not to be bytes after some bytes keeps its order.
        struct Mixed;
        impl Serialize for Mixed {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                use serde::ser::SerializeSeq;
                let mut seq = s.serialize_seq(Some(3))?;
                seq.serialize_element(&1u8)?;
                seq.serialize_element(&2u8)?;
                seq.serialize_element(&300u16)?;
                seq.end()
            }
        }
        assert_eq!(to_term(&Mixed).unwrap(), list(vec![int(1), int(2), int(300)]));
    }

    #[test]
    fn sequences_decode_from_lists_string_lists_and_binaries() {
        assert_eq!(round_trip(&vec![1i32, -2]), list(vec![int(1), int(-2)]));
        assert_eq!(from_term::<Vec<u8>>(Term::ByteList(ByteList::from(vec![1, 2]))).unwrap(), vec![1, 2]);
        assert_eq!(from_term::<Vec<u16>>(bin(&[1, 2])).unwrap(), vec![1, 2]);
        assert_eq!(from_term::<Vec<u8>>(list(vec![int(7)])).unwrap(), vec![7]);
        let set: std::collections::BTreeSet<i32> = from_term(list(vec![int(3), int(1)])).unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!(decode_err::<Vec<i32>>(atom("x")), "expected a list, found atom x");
    }

    #[test]
    fn tuples_and_tuple_structs_are_tuples() {
        assert_eq!(round_trip(&(1i32, "a".to_owned())), tuple(vec![int(1), bin(b"a")]));
        assert_eq!(round_trip(&Version(1, 2)), tuple(vec![int(1), int(2)]));
        assert_eq!(round_trip(&[1u32, 2, 3]), tuple(vec![int(1), int(2), int(3)]));
        // A bare tuple of only u8 is indistinguishable from [u8; N]: a binary (documented).
        assert_eq!(round_trip(&(1u8, 2u8)), bin(&[1, 2]));
        assert_eq!(from_term::<(u8, u8)>(tuple(vec![int(1), int(2)])).unwrap(), (1, 2));
    }

    #[test]
    fn tuples_decode_from_lists_of_the_same_length() {
        assert_eq!(from_term::<(i32, bool)>(list(vec![int(1), atom("true")])).unwrap(), (1, true));
        assert_eq!(from_term::<[u8; 2]>(Term::ByteList(ByteList::from(vec![1, 2]))).unwrap(), [1, 2]);
        assert_eq!(from_term::<[u32; 0]>(list(vec![])).unwrap(), [0u32; 0]);
    }

    #[test]
    fn wrong_tuple_arity_is_an_error() {
        assert_eq!(
            decode_err::<(i32, i32)>(tuple(vec![int(1), int(2), int(3)])),
            "expected a tuple of arity 2, found tuple of arity 3"
        );
        assert_eq!(decode_err::<Version>(list(vec![int(1)])), "expected a tuple of arity 2, found list of 1 element");
        assert_eq!(decode_err::<[u8; 4]>(bin(&[1, 2])), "expected a tuple of arity 4, found binary of 2 bytes");
    }

    #[test]
    fn unit_is_the_empty_tuple() {
        assert_eq!(round_trip(&()), tuple(vec![]));
        assert_eq!(decode_err::<()>(atom("ok")), "expected an empty tuple {} (unit), found atom ok");
    }

    #[test]
    fn option_is_undefined_or_the_value() {
        assert_eq!(round_trip(&None::<i32>), atom("undefined"));
        assert_eq!(round_trip(&Some(5i32)), int(5));
        assert_eq!(from_term::<Option<i32>>(atom("nil")).unwrap(), None);
        assert_eq!(from_term::<Option<String>>(bin(b"x")).unwrap(), Some("x".to_owned()));
        assert_eq!(decode_err::<Option<i32>>(atom("none")), "expected an integer (i32), found atom none");
    }

    #[test]
    fn unit_struct_is_the_atom_of_its_name() {
        assert_eq!(round_trip(&Ping), atom("Ping"));
        assert_eq!(decode_err::<Ping>(atom("Pong")), "expected the atom Ping (unit struct), found atom Pong");
    }

    #[test]
    fn newtype_struct_is_transparent() {
        assert_eq!(round_trip(&Meters(5)), int(5));
    }

    #[test]
    fn struct_is_a_map_with_atom_keys() {
        assert_eq!(round_trip(&ann()), ann_term());
    }

    #[test]
    fn struct_decodes_from_binary_keys_and_ignores_unknown_ones() {
        let term = map(vec![
            (bin(b"id"), int(7)),
            (bin(b"name"), bin(b"ann")),
            (atom("age"), int(33)),
            (bin(b"tags"), list(vec![bin(b"a"), bin("é".as_bytes())])),
            (atom("extra"), Term::Port(eetf::Port::from(("n@h", 1)))),
            (bin(&[0xff]), int(0)),
        ]);
        // `email` is missing: Option fields default to None.
        assert_eq!(from_term::<User>(term).unwrap(), ann());
    }

    #[test]
    fn deny_unknown_fields_still_rejects_unknown_keys() {
        #[derive(Deserialize, Debug)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Strict {
            a: i32,
        }
        let err = decode_err::<Strict>(map(vec![(atom("a"), int(1)), (atom("b"), int(2))]));
        assert_eq!(err, "unknown field `b`, expected `a`");
    }

    #[test]
    fn struct_errors_name_the_field() {
        let mut term = ann_term();
        if let Term::Map(m) = &mut term {
            m.map.insert(atom("age"), int(300));
        }
        assert_eq!(
            decode_err::<User>(term),
            "in field age: expected an integer in the range of u8 (0..=255), found integer 300"
        );
        assert_eq!(decode_err::<User>(map(vec![(atom("id"), int(1))])), "missing field `name`");
        assert_eq!(decode_err::<User>(list(vec![])), "expected a map (struct User), found empty list []");
        assert_eq!(
            decode_err::<User>(map(vec![(tuple(vec![]), int(1))])),
            "expected an atom or a binary (a field or variant name), found tuple of arity 0"
        );
    }

    #[test]
    fn maps_map_keys_like_values() {
        let mut m = HashMap::new();
        m.insert("k".to_owned(), 1i32);
        assert_eq!(round_trip(&m), map(vec![(bin(b"k"), int(1))]));
        let mut b = BTreeMap::new();
        b.insert((1i32, false), vec!["x".to_owned()]);
        b.insert((2, true), vec![]);
        round_trip(&b);
        assert_eq!(
            decode_err::<HashMap<String, i32>>(map(vec![(atom("k"), int(1))])),
            "expected a UTF-8 binary (string), found atom k"
        );
    }

    #[test]
    fn enum_variants_map_to_atoms_and_tagged_tuples() {
        assert_eq!(round_trip(&Cmd::Stop), atom("stop"));
        assert_eq!(round_trip(&Cmd::Cast(5)), tuple(vec![atom("cast"), int(5)]));
        assert_eq!(round_trip(&Cmd::Move(1, -2)), tuple(vec![atom("move"), int(1), int(-2)]));
        assert_eq!(
            round_trip(&Cmd::Call { id: 1, msg: "hi".into() }),
            tuple(vec![atom("call"), map(vec![(atom("id"), int(1)), (atom("msg"), bin(b"hi"))])])
        );
        // Names are verbatim without rename_all.
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        enum Plain {
            GoHome,
        }
        assert_eq!(round_trip(&Plain::GoHome), atom("GoHome"));
    }

    #[test]
    fn enum_decoding_leniencies() {
        assert_eq!(from_term::<Cmd>(tuple(vec![atom("stop")])).unwrap(), Cmd::Stop);
        let call = tuple(vec![atom("call"), map(vec![(bin(b"id"), int(9)), (bin(b"msg"), bin(b""))])]);
        assert_eq!(from_term::<Cmd>(call).unwrap(), Cmd::Call { id: 9, msg: String::new() });
    }

    #[test]
    fn enum_errors_name_the_variant_and_shape() {
        assert_eq!(
            decode_err::<Cmd>(atom("fly")),
            "unknown variant `fly`, expected one of `stop`, `cast`, `move`, `call`"
        );
        assert_eq!(
            decode_err::<Cmd>(atom("cast")),
            "expected a tuple of arity 2 {Variant, Value} for variant cast, found atom cast"
        );
        assert_eq!(
            decode_err::<Cmd>(tuple(vec![atom("move"), int(1)])),
            "expected a tuple of arity 3 for variant move, found tuple of arity 2"
        );
        assert_eq!(
            decode_err::<Cmd>(tuple(vec![atom("stop"), int(1)])),
            "expected a bare atom for variant stop, found tuple of arity 2"
        );
        assert_eq!(
            decode_err::<Cmd>(bin(b"stop")),
            "expected an atom or a tuple {Variant, ...} (enum Cmd), found binary of 4 bytes"
        );
        assert_eq!(
            decode_err::<Cmd>(tuple(vec![int(1), int(2)])),
            "expected an atom or a tuple {Variant, ...} (enum Cmd), found tuple of arity 2"
        );
    }

    #[test]
    fn nested_values_round_trip() {
        let mut by_name = BTreeMap::new();
        by_name.insert("x".to_owned(), Meters(1));
        by_name.insert("y".to_owned(), Meters(u32::MAX));
        let value = Nested {
            users: vec![ann(), User { id: 0, name: String::new(), age: 0, tags: vec![], email: Some("e@x".into()) }],
            cmds: vec![Cmd::Stop, Cmd::Cast(-1), Cmd::Move(0, 0), Cmd::Call { id: u64::MAX, msg: "m".into() }],
            by_name,
            pair: (i64::MIN, Some(Cmd::Cast(2))),
            unit: (),
            ping: Ping,
            raw: vec![0, 255],
            version: Version(3, 4),
        };
        round_trip(&value);
    }

    #[test]
    fn long_atoms_are_refused() {
        let long: &'static str = Box::leak("a".repeat(256).into_boxed_str());
        struct LongVariant(&'static str);
        impl Serialize for LongVariant {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_unit_variant("E", 0, self.0)
            }
        }
        let err = to_term(&LongVariant(long)).unwrap_err().to_string();
        assert!(err.starts_with("atom of 256 characters exceeds Erlang's limit of 255"), "{err}");
        assert_eq!(to_term(&LongVariant(&long[..255])).unwrap(), atom(&long[..255]));
    }

    // --- Pids, references and raw terms -----------------------------------------------------

    #[test]
    fn pid_magic_round_trips_as_a_pid() {
        let pid = TestPid { node: "a@host".into(), id: 42, serial: 1, creation: u32::MAX };
        let term = round_trip(&pid);
        assert_eq!(term, Term::Pid(Pid::new("a@host", 42, 1, u32::MAX)));
        let wrapped = round_trip(&vec![(pid.clone(), 1u8)]);
        assert_eq!(wrapped, list(vec![tuple(vec![term, int(1)])]));
        assert_eq!(decode_err::<TestPid>(atom("x")), "expected a pid, found atom x");
        let long = TestPid { node: "n".repeat(300), ..pid };
        assert!(to_term(&long).is_err());
    }

    #[test]
    fn ref_magic_round_trips_as_a_reference() {
        let r = TestRef { node: "b@host".into(), ids: vec![1, 2, u32::MAX], creation: 9 };
        let term = round_trip(&r);
        let expected = Reference { node: Atom::from("b@host"), id: vec![1, 2, u32::MAX], creation: 9 };
        assert_eq!(term, Term::Reference(Box::new(expected)));
        assert_eq!(decode_err::<TestRef>(int(1)), "expected a reference, found integer 1");
        let empty = TestRef { ids: vec![], ..r.clone() };
        assert_eq!(to_term(&empty).unwrap_err().to_string(), "expected 1 to 5 reference ids, found 0");
        assert!(to_term(&TestRef { ids: vec![1; 6], ..r }).is_err());
    }

    #[test]
    fn magic_content_of_the_wrong_shape_is_an_error() {
        struct BadPid;
        impl Serialize for BadPid {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_newtype_struct(PID_MAGIC, &("n@h", 1u32))
            }
        }
        assert_eq!(
            to_term(&BadPid).unwrap_err().to_string(),
            "expected a tuple of arity 4 (node, id, serial, creation) inside a PID_MAGIC newtype, found tuple of arity 2"
        );
        struct BadRaw;
        impl Serialize for BadRaw {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_newtype_struct(TERM_MAGIC, &5i32)
            }
        }
        assert!(to_term(&BadRaw).is_err());
    }

    /// A term with every kind eetf knows, in canonical form (what eetf's decoder produces).
    fn zoo() -> Term {
        let fun = eetf::InternalFun::New {
            module: Atom::from("m"),
            arity: 1,
            pid: Pid::new("n@h", 1, 2, 3),
            free_vars: vec![int(1), atom("v")],
            index: 4,
            uniq: [7; 16],
            old_index: 5,
            old_uniq: 6,
        };
        tuple(vec![
            atom("zoo"),
            int(-5),
            Term::BigInteger(BigInteger::from(u64::MAX)),
            Term::Float(Float { value: 2.5 }),
            Term::Pid(Pid::new("n@h", 1, 2, 3)),
            Term::Port(eetf::Port { node: Atom::from("n@h"), id: 1 << 40, creation: 2 }),
            Term::Reference(Box::new(Reference { node: Atom::from("n@h"), id: vec![1, 2, 3], creation: 4 })),
            Term::ExternalFun(Box::new(eetf::ExternalFun::from(("lists", "map", 2)))),
            Term::InternalFun(Box::new(fun)),
            bin(b"bin"),
            Term::BitBinary(eetf::BitBinary::from((vec![1, 3], 3))),
            Term::ByteList(ByteList::from(vec![1, 2, 3])),
            list(vec![atom("a"), list(vec![])]),
            Term::ImproperList(eetf::ImproperList::from((vec![int(1)], atom("tail")))),
            map(vec![(int(1), map(vec![])), (atom("k"), tuple(vec![]))]),
        ])
    }

    #[test]
    fn raw_term_carries_any_term_through_a_struct() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Envelope {
            tag: u32,
            payload: RawTerm,
            more: Vec<RawTerm>,
        }
        let msg = Envelope { tag: 1, payload: RawTerm(zoo()), more: vec![RawTerm(atom("x")), RawTerm(int(1))] };
        let term = round_trip(&msg);
        assert_eq!(
            term,
            map(vec![(atom("tag"), int(1)), (atom("payload"), zoo()), (atom("more"), list(vec![atom("x"), int(1)]))])
        );
        // Top level, both directions.
        assert_eq!(to_term(&RawTerm(zoo())).unwrap(), zoo());
        assert_eq!(from_term::<RawTerm>(zoo()).unwrap(), RawTerm(zoo()));
    }

    #[test]
    fn raw_term_keeps_integer_lists_as_lists() {
        let back: RawTerm = from_term(list(vec![int(1), int(2)])).unwrap();
        assert_eq!(back.0, list(vec![int(1), int(2)]));
    }

    #[test]
    fn raw_term_refuses_terms_that_cannot_be_encoded_without_panicking() {
        let bad = [
            Term::Float(Float { value: f64::NAN }),
            Term::BitBinary(eetf::BitBinary::from((vec![1], 0))),
            Term::BitBinary(eetf::BitBinary::from((vec![1], 9))),
            list(vec![Term::Float(Float { value: f64::INFINITY })]),
        ];
        for term in bad {
            let err = to_term(&RawTerm(term.clone())).unwrap_err().to_string();
            assert!(err.starts_with("RawTerm: cannot encode"), "{term:?}: {err}");
            assert!(from_term::<RawTerm>(term).is_err());
        }
        // A byte list too long for STRING_EXT is written as a list, not truncated.
        let long = Term::ByteList(ByteList::from(vec![b'a'; 70_000]));
        let back = to_term(&RawTerm(long)).unwrap();
        assert_eq!(crate::cluster::ctrl::erl_text(&back).matches("97").count(), 70_000);
    }

    fn nested_lists(depth: usize) -> Term {
        let mut term = list(vec![]);
        for _ in 0..depth {
            term = list(vec![term]);
        }
        term
    }

    #[test]
    fn raw_term_depth_is_bounded() {
        let deep = nested_lists(RAW_TERM_MAX_DEPTH - 2);
        assert_eq!(to_term(&RawTerm(deep.clone())).unwrap(), deep);
        let too_deep = nested_lists(RAW_TERM_MAX_DEPTH + 1);
        let err = to_term(&RawTerm(too_deep)).unwrap_err().to_string();
        assert!(err.contains("too deeply"), "{err}");
    }

    fn raw_from_bytes(bytes: &[u8]) -> Result<RawTerm, TermError> {
        RawTerm::deserialize(de::value::BytesDeserializer::<TermError>::new(bytes))
    }

    #[test]
    fn raw_term_from_another_format_is_just_etf_bytes() {
        let mut bytes = Vec::new();
        zoo().encode(&mut bytes).unwrap();
        assert_eq!(raw_from_bytes(&bytes).unwrap(), RawTerm(zoo()));
        // A sequence of u8 (formats without a byte type) works too.
        let seq = de::value::SeqDeserializer::<_, TermError>::new(bytes.iter().copied());
        assert_eq!(RawTerm::deserialize(seq).unwrap(), RawTerm(zoo()));
    }

    #[test]
    fn raw_term_rejects_hostile_etf_without_panicking() {
        let mut deep = vec![131u8];
        for _ in 0..10_000 {
            deep.extend([LIST_EXT, 0, 0, 0, 1]);
        }
        deep.extend(vec![NIL_EXT; 10_001]);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("empty", vec![]),
            ("version only", vec![131]),
            ("bad version", vec![130, SMALL_INTEGER_EXT, 1]),
            ("atom cache ref", vec![131, 82, 0]),
            ("distribution header", vec![131, 68, 0]),
            ("compressed", vec![131, 80, 0, 0, 0, 1, 0x78, 0x9c]),
            ("local ext", vec![131, 121, 0]),
            ("unknown tag", vec![131, 200]),
            ("huge list count", vec![131, LIST_EXT, 0xff, 0xff, 0xff, 0xff, NIL_EXT]),
            ("huge tuple count", vec![131, LARGE_TUPLE_EXT, 0xff, 0xff, 0xff, 0xff]),
            ("huge map count", vec![131, MAP_EXT, 0x7f, 0xff, 0xff, 0xff, 97, 1]),
            ("huge binary", vec![131, BINARY_EXT, 0xff, 0xff, 0xff, 0xff, 1]),
            ("huge bignum", vec![131, LARGE_BIG_EXT, 0xff, 0xff, 0xff, 0xff, 0]),
            ("bignum bad sign", vec![131, SMALL_BIG_EXT, 1, 7, 1]),
            ("bit binary tail 0", vec![131, BIT_BINARY_EXT, 0, 0, 0, 1, 0, 5]),
            ("bit binary tail 9", vec![131, BIT_BINARY_EXT, 0, 0, 0, 1, 9, 5]),
            ("truncated tuple", vec![131, SMALL_TUPLE_EXT, 2, SMALL_INTEGER_EXT, 1]),
            ("trailing bytes", vec![131, NIL_EXT, NIL_EXT]),
            ("pid with list node", vec![131, NEW_PID_EXT, NIL_EXT, 0, 0, 0, 0]),
            ("fun with huge free count", vec![131, FUN_EXT, 0xff, 0xff, 0xff, 0xff, NIL_EXT]),
            ("new fun with huge free count", {
                let mut b = vec![131, NEW_FUN_EXT];
                b.extend([0; 25]);
                b.extend([0xff; 4]);
                b
            }),
            ("newer reference huge id count", vec![131, NEWER_REFERENCE_EXT, 0xff, 0xff, SMALL_ATOM_UTF8_EXT, 0]),
            ("invalid utf8 atom", vec![131, SMALL_ATOM_UTF8_EXT, 1, 0xff]),
            ("export arity not an integer", vec![131, EXPORT_EXT, 119, 1, b'm', 119, 1, b'f', NIL_EXT]),
            ("float nan", vec![131, NEW_FLOAT_EXT, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0]),
            ("old float garbage", {
                let mut b = vec![131, FLOAT_EXT];
                b.extend([0xff; 31]);
                b
            }),
            ("deep nesting", deep),
        ];
        for (name, bytes) in cases {
            let result = raw_from_bytes(&bytes);
            assert!(result.is_err(), "{name}: accepted as {result:?}");
        }
    }

    #[test]
    fn raw_term_rejects_every_truncation_of_valid_etf() {
        let mut bytes = Vec::new();
        zoo().encode(&mut bytes).unwrap();
        for len in 0..bytes.len() {
            assert!(raw_from_bytes(&bytes[..len]).is_err(), "prefix of {len} bytes accepted");
        }
    }

    // --- Untyped targets --------------------------------------------------------------------

    #[test]
    fn deserialize_any_follows_the_documented_table() {
        use Value as V;
        let cases = vec![
            (atom("true"), V::Bool(true)),
            (atom("false"), V::Bool(false)),
            (atom("undefined"), V::Unit),
            (atom("nil"), V::Unit),
            (tuple(vec![]), V::Unit),
            (atom("ok"), V::Str("ok".into())),
            (int(-3), V::I64(-3)),
            (Term::BigInteger(BigInteger::from(i64::MIN)), V::I64(i64::MIN)),
            (Term::BigInteger(BigInteger::from(u64::MAX)), V::U64(u64::MAX)),
            (to_term(&i128::MIN).unwrap(), V::I128(i128::MIN)),
            (to_term(&u128::MAX).unwrap(), V::U128(u128::MAX)),
            (Term::Float(Float { value: 0.5 }), V::F64(0.5)),
            (bin(b"txt"), V::Str("txt".into())),
            (bin(&[0xff]), V::Bytes(vec![0xff])),
            (list(vec![int(1), atom("a")]), V::Seq(vec![V::I64(1), V::Str("a".into())])),
            (Term::ByteList(ByteList::from(vec![7])), V::Seq(vec![V::I64(7)])),
            (tuple(vec![int(1)]), V::Seq(vec![V::I64(1)])),
            (map(vec![(atom("k"), int(1))]), V::Map(vec![(V::Str("k".into()), V::I64(1))])),
            (Term::Pid(Pid::new("n@h", 1, 2, 3)), V::Seq(vec![V::Str("n@h".into()), V::I64(1), V::I64(2), V::I64(3)])),
            (
                Term::Reference(Box::new(Reference { node: Atom::from("n@h"), id: vec![5], creation: 6 })),
                V::Seq(vec![V::Str("n@h".into()), V::Seq(vec![V::I64(5)]), V::I64(6)]),
            ),
        ];
        for (term, expected) in cases {
            assert_eq!(from_term::<Value>(term.clone()).unwrap(), expected, "{term:?}");
        }
    }

    #[test]
    fn untagged_enums_work_through_deserialize_any() {
        #[derive(Deserialize, Debug, PartialEq)]
        #[serde(untagged)]
        enum Msg {
            Point { x: i32, y: Option<String> },
            Flag(bool),
            Name(String),
            Pair(i32, i32),
            Unit(()),
        }
        let point = map(vec![(atom("x"), int(1)), (atom("y"), atom("undefined"))]);
        assert_eq!(from_term::<Msg>(point).unwrap(), Msg::Point { x: 1, y: None });
        assert_eq!(from_term::<Msg>(atom("true")).unwrap(), Msg::Flag(true));
        assert_eq!(from_term::<Msg>(bin(b"n")).unwrap(), Msg::Name("n".into()));
        assert_eq!(from_term::<Msg>(atom("n")).unwrap(), Msg::Name("n".into()));
        assert_eq!(from_term::<Msg>(tuple(vec![int(1), int(2)])).unwrap(), Msg::Pair(1, 2));
        assert_eq!(from_term::<Msg>(tuple(vec![])).unwrap(), Msg::Unit(()));
    }

    #[test]
    fn internally_tagged_enums_and_flatten_round_trip() {
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        #[serde(tag = "type", rename_all = "snake_case")]
        enum Event {
            Joined { user: String },
            Left,
        }
        assert_eq!(
            round_trip(&Event::Joined { user: "u".into() }),
            map(vec![(atom("type"), bin(b"joined")), (atom("user"), bin(b"u"))])
        );
        round_trip(&Event::Left);

        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Inner {
            b: i32,
        }
        #[derive(Serialize, Deserialize, Debug, PartialEq)]
        struct Outer {
            a: i32,
            #[serde(flatten)]
            inner: Inner,
        }
        // Flattened structs go through serde's map path: binary keys (documented).
        assert_eq!(
            round_trip(&Outer { a: 1, inner: Inner { b: 2 } }),
            map(vec![(bin(b"a"), int(1)), (bin(b"b"), int(2))])
        );
        let atom_keys = map(vec![(atom("a"), int(1)), (atom("b"), int(2))]);
        assert_eq!(from_term::<Outer>(atom_keys).unwrap(), Outer { a: 1, inner: Inner { b: 2 } });
    }

    // --- Terms that map to nothing ----------------------------------------------------------

    fn huge_bignum() -> Term {
        // 2^1000 (1001 bits), far beyond u128.
        let mut v = BigInteger::from(1u64 << 63).value;
        for _ in 0..15 {
            v <<= 62u32;
        }
        let v = v << 7u32; // 63 + 15 * 62 + 7 = 1000
        Term::BigInteger(BigInteger { value: v })
    }

    #[test]
    fn huge_integers_are_range_errors() {
        let huge = huge_bignum();
        assert_eq!(
            decode_err::<u8>(huge.clone()),
            "expected an integer in the range of u8 (0..=255), found integer of 1001 bits"
        );
        assert!(from_term::<u128>(huge.clone()).is_err());
        assert!(from_term::<i128>(huge.clone()).is_err());
        assert!(from_term::<f64>(huge.clone()).is_err());
        assert_eq!(decode_err::<Value>(huge), "expected an integer that fits in 128 bits, found integer of 1001 bits");
        assert_eq!(
            decode_err::<u32>(int(-1)),
            "expected an integer in the range of u32 (0..=4294967295), found integer -1"
        );
        assert_eq!(
            decode_err::<i8>(int(128)),
            "expected an integer in the range of i8 (-128..=127), found integer 128"
        );
        assert_eq!(
            decode_err::<u64>(to_term(&(-(1i128 << 70))).unwrap()),
            "expected an integer in the range of u64 (0..=18446744073709551615), found integer -1180591620717411303424"
        );
        assert_eq!(decode_err::<i64>(bin(b"1")), "expected an integer (i64), found binary of 1 byte");
    }

    #[test]
    fn unmappable_kinds_are_named_errors() {
        let port = Term::Port(eetf::Port::from(("n@h", 5)));
        assert_eq!(decode_err::<Value>(port), "port #Port<n@h.5> has no Rust counterpart (only RawTerm can carry it)");
        let improper = Term::ImproperList(eetf::ImproperList::from((vec![int(1)], int(2))));
        assert_eq!(
            decode_err::<Vec<i32>>(improper.clone()),
            "expected a list, found improper list of 1 element and a tail"
        );
        assert!(decode_err::<Value>(improper).starts_with("improper list"));
        let bits = Term::BitBinary(eetf::BitBinary::from((vec![1, 2], 3)));
        assert_eq!(decode_err::<Vec<u8>>(bits), "expected a list, found bitstring of 11 bits");
        let fun = Term::ExternalFun(Box::new(eetf::ExternalFun::from(("m", "f", 1))));
        assert_eq!(decode_err::<String>(fun), "expected a UTF-8 binary (string), found fun m:f/1");
    }

    /// Adversarial terms, each decoded into every kind of target: errors are fine, panics not.
    #[test]
    fn no_target_panics_on_adversarial_terms() {
        let mut terms = vec![
            Term::ImproperList(eetf::ImproperList::from((vec![], atom("t")))),
            Term::ImproperList(eetf::ImproperList::from((vec![int(1)], list(vec![])))),
            Term::BitBinary(eetf::BitBinary::from((vec![], 0))),
            Term::BitBinary(eetf::BitBinary::from((vec![0xff], 0))),
            Term::BitBinary(eetf::BitBinary::from((vec![0xff], 200))),
            huge_bignum(),
            Term::BigInteger(BigInteger::from(0)),
            Term::Float(Float { value: f64::NAN }),
            Term::Float(Float { value: 1e300 }),
            Term::ByteList(ByteList::from(vec![0xff; 3])),
            atom(""),
            atom(&"x".repeat(70_000)),
            bin(&[0xc3]),
            list(vec![int(-1), huge_bignum()]),
            tuple(vec![atom("cast")]),
            tuple(vec![atom("call"), list(vec![])]),
            tuple(vec![bin(b"stop")]),
            map(vec![(huge_bignum(), int(1)), (atom("id"), atom("x"))]),
            Term::Pid(Pid::new("", u32::MAX, u32::MAX, u32::MAX)),
            Term::Reference(Box::new(Reference { node: Atom::from("n"), id: vec![], creation: 0 })),
            Term::Port(eetf::Port { node: Atom::from("n"), id: u64::MAX, creation: 0 }),
        ];
        terms.push(zoo());
        terms.push(nested_lists(RAW_TERM_MAX_DEPTH + 5));
        for term in terms {
            let _ = from_term::<bool>(term.clone());
            let _ = from_term::<u8>(term.clone());
            let _ = from_term::<i128>(term.clone());
            let _ = from_term::<u128>(term.clone());
            let _ = from_term::<f32>(term.clone());
            let _ = from_term::<char>(term.clone());
            let _ = from_term::<String>(term.clone());
            let _ = from_term::<Bytes>(term.clone());
            let _ = from_term::<Vec<u8>>(term.clone());
            let _ = from_term::<(i32, i32)>(term.clone());
            let _ = from_term::<[u8; 3]>(term.clone());
            let _ = from_term::<()>(term.clone());
            let _ = from_term::<Option<String>>(term.clone());
            let _ = from_term::<Ping>(term.clone());
            let _ = from_term::<HashMap<String, i32>>(term.clone());
            let _ = from_term::<User>(term.clone());
            let _ = from_term::<Cmd>(term.clone());
            let _ = from_term::<Value>(term.clone());
            let _ = from_term::<TestPid>(term.clone());
            let _ = from_term::<TestRef>(term.clone());
            let _ = from_term::<RawTerm>(term.clone());
            let _ = to_term(&RawTerm(term));
        }
    }

    #[test]
    fn term_error_implements_the_error_traits() {
        fn assert_traits<E: std::error::Error + ser::Error + de::Error + Clone + PartialEq + Send + Sync + 'static>() {}
        assert_traits::<TermError>();
        let e = <TermError as de::Error>::custom("boom");
        assert_eq!(e.clone(), e);
        assert_eq!(e.to_string(), "boom");
    }
}
