//! Order-preserving index keys: byte order (memcmp) of encoded components
//! equals the value order of [`compare`], across types, with integers and
//! floats compared numerically. Components concatenate into compound keys
//! that order component by component; a descending component is the
//! bitwise inversion of its ascending bytes. FORMAT.md ("Documents: value
//! encoding and index keys", layer format v2) gives the bytes.
//!
//! The order is MongoDB's (manual, "Comparison/Sort Order"), for the types
//! CairnDB has: `null < numbers < strings < objects < arrays < binary < ids
//! < booleans < dates`; numbers: `NaN < -inf < negatives < 0 < positives < +inf`
//! (all NaNs equal, `-0.0 == 0.0`, `2 == 2.0`); strings bytewise; binary
//! (UUIDs included: BinData of subtype 4) by length, then subtype, then
//! bytewise; ids by their bytes; dates by time; objects pair by pair (the
//! type bracket of the values, then the names, then the values; an object
//! without further pairs is smaller); arrays element by element (a prefix
//! is smaller). A whole value that is an empty array sorts before null (as
//! MongoDB's sort, which reads it as `undefined`); inside an array or an
//! object it is an array like any other.
//!
//! Index entries ([`encode_index_component`]) store a component longer
//! than [`INDEX_COMPONENT_MAX_BYTES`] as its first bytes and a hash; such
//! keys order correctly against every other value but not among values
//! sharing those first bytes, and [`is_exact`] tells them apart.

use std::cmp::Ordering;

use super::codec::{ValueRef, MAX_DEPTH};
use super::error::{DocResult, DocumentError};
use super::value::{Document, ObjectId, Value, ValueKind};

/// Direction of one key component.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SortOrder {
    /// Smallest first.
    #[default]
    Ascending,
    /// Largest first (the component's bytes are inverted).
    Descending,
}

/// Ends an array or object; also the first byte of a string terminator.
const K_END: u8 = 0x00;
/// A whole component that is an empty array (MongoDB's `undefined` key).
const K_UNDEFINED: u8 = 0x04;
const K_NULL: u8 = 0x08;
const K_NAN: u8 = 0x20;
const K_NEG_INF: u8 = 0x21;
const K_NEG: u8 = 0x22;
const K_ZERO: u8 = 0x23;
const K_POS: u8 = 0x24;
const K_POS_INF: u8 = 0x25;
const K_STRING: u8 = 0x30;
const K_OBJECT: u8 = 0x34;
const K_ARRAY: u8 = 0x36;
const K_BINARY: u8 = 0x3C;
const K_ID: u8 = 0x40;
const K_FALSE: u8 = 0x44;
const K_TRUE: u8 = 0x45;
const K_DATE: u8 = 0x48;

/// BSON's binary subtypes as binary keys record them (format 3).
const SUBTYPE_GENERIC: u8 = 0x00;
const SUBTYPE_UUID: u8 = 0x04;

/// The longest index-entry component stored whole: a longer one is stored
/// as its first `INDEX_COMPONENT_MAX_BYTES` bytes and an 8-byte hash of
/// all of it ([`encode_index_component`]). Three such components and an
/// `_id` fit the key limit of 4 KiB pages (987 bytes).
pub const INDEX_COMPONENT_MAX_BYTES: usize = 256;
/// The hash after a cut component.
const HASH_BYTES: usize = 8;

/// Added to the binary exponent so that it is stored as a positive u16.
const EXP_BIAS: i32 = 1075;
const MIN_EXP: i32 = -1074;
const MAX_EXP: i32 = 1023;

// ---------------------------------------------------------------------------
// The reference order

/// The type bracket of a kind in MongoDB's order (1 = null .. 9 =
/// dates); values of different brackets compare by it, and range
/// operators stay within one. A UUID is binary data (bracket 6).
pub fn bracket(k: ValueKind) -> u8 {
    match k {
        ValueKind::Null => 1,
        ValueKind::Int | ValueKind::Float => 2,
        ValueKind::String => 3,
        ValueKind::Object => 4,
        ValueKind::Array => 5,
        ValueKind::Binary | ValueKind::Uuid => 6,
        ValueKind::Id => 7,
        ValueKind::Bool => 8,
        ValueKind::Date => 9,
    }
}

/// Binary data as MongoDB compares it: (length, subtype, bytes), for the
/// bytes of a UUID (`uuid`) or of generic binary data.
pub(crate) fn bin_data(bytes: &[u8], uuid: bool) -> (usize, u8, &[u8]) {
    let subtype = if uuid { SUBTYPE_UUID } else { SUBTYPE_GENERIC };
    (bytes.len(), subtype, bytes)
}

/// [`bin_data`] of a value (empty for other kinds).
fn bin_data_of(v: &Value) -> (usize, u8, &[u8]) {
    match v {
        Value::Uuid(u) => bin_data(u, true),
        Value::Binary(b) => bin_data(b, false),
        _ => bin_data(&[], false),
    }
}

fn is_empty_array(v: &Value) -> bool {
    matches!(v, Value::Array(a) if a.is_empty())
}

/// Compares an integer with a float exactly (the float is not NaN).
fn cmp_int_float(i: i64, f: f64) -> Ordering {
    if f == f64::INFINITY {
        return Ordering::Less;
    }
    if f == f64::NEG_INFINITY {
        return Ordering::Greater;
    }
    let t = f.trunc();
    // Exact: |t| < 2^1024 saturates to the i128 range, beyond every i64.
    match i128::from(i).cmp(&(t as i128)) {
        Ordering::Equal => {
            let frac = f - t;
            if frac > 0.0 {
                Ordering::Less
            } else if frac < 0.0 {
                Ordering::Greater
            } else {
                Ordering::Equal
            }
        }
        o => o,
    }
}

fn cmp_numbers(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Int(x), Value::Int(y)) => x.cmp(y),
        (Value::Float(x), Value::Float(y)) => match (x.is_nan(), y.is_nan()) {
            (true, true) => Ordering::Equal,
            (true, false) => Ordering::Less,
            (false, true) => Ordering::Greater,
            _ => x.partial_cmp(y).unwrap_or(Ordering::Equal),
        },
        (Value::Int(x), Value::Float(y)) => {
            if y.is_nan() {
                Ordering::Greater
            } else {
                cmp_int_float(*x, *y)
            }
        }
        (Value::Float(x), Value::Int(y)) => {
            if x.is_nan() {
                Ordering::Less
            } else {
                cmp_int_float(*y, *x).reverse()
            }
        }
        _ => Ordering::Equal,
    }
}

/// The total order that index keys preserve (see the module docs). Two
/// values compare `Equal` exactly when their key encodings are identical.
/// A whole value that is an empty array is smaller than everything else.
pub fn compare(a: &Value, b: &Value) -> Ordering {
    match (is_empty_array(a), is_empty_array(b)) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => compare_inner(a, b),
    }
}

/// [`compare`] for values inside arrays and objects (an empty array is an
/// array there).
fn compare_inner(a: &Value, b: &Value) -> Ordering {
    let (ra, rb) = (bracket(a.kind()), bracket(b.kind()));
    if ra != rb {
        return ra.cmp(&rb);
    }
    match (a, b) {
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Binary(_) | Value::Uuid(_), Value::Binary(_) | Value::Uuid(_)) => {
            bin_data_of(a).cmp(&bin_data_of(b))
        }
        (Value::Id(x), Value::Id(y)) => x.cmp(y),
        (Value::Date(x), Value::Date(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = compare_inner(p, q);
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            for ((kp, p), (kq, q)) in x.iter().zip(y.iter()) {
                let o = bracket(p.kind())
                    .cmp(&bracket(q.kind()))
                    .then_with(|| kp.as_bytes().cmp(kq.as_bytes()))
                    .then_with(|| compare_inner(p, q));
                if o != Ordering::Equal {
                    return o;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Null, Value::Null) => Ordering::Equal,
        _ => cmp_numbers(a, b),
    }
}

// ---------------------------------------------------------------------------
// Encoding

/// A number as sign, binary exponent and the bits after the leading one
/// (left-aligned): `±2^exp × (1 + frac / 2^64)`.
enum Num {
    NaN,
    NegInf,
    PosInf,
    Zero,
    Finite { neg: bool, exp: i32, frac: u64 },
}

fn num_of_i64(i: i64) -> Num {
    if i == 0 {
        return Num::Zero;
    }
    let mag = i.unsigned_abs();
    let lz = mag.leading_zeros();
    Num::Finite {
        neg: i < 0,
        exp: 63 - lz as i32,
        frac: mag.checked_shl(lz + 1).unwrap_or(0),
    }
}

fn num_of_f64(f: f64) -> Num {
    if f.is_nan() {
        return Num::NaN;
    }
    if f.is_infinite() {
        return if f > 0.0 { Num::PosInf } else { Num::NegInf };
    }
    if f == 0.0 {
        return Num::Zero;
    }
    let bits = f.to_bits();
    let neg = bits >> 63 == 1;
    let e = ((bits >> 52) & 0x7FF) as i32;
    let m = bits & ((1 << 52) - 1);
    if e == 0 {
        let lz = m.leading_zeros();
        Num::Finite {
            neg,
            exp: (63 - lz as i32) - 1074,
            frac: m.checked_shl(lz + 1).unwrap_or(0),
        }
    } else {
        Num::Finite {
            neg,
            exp: e - 1023,
            frac: m << 12,
        }
    }
}

fn put_num(n: Num, out: &mut Vec<u8>) {
    let (neg, exp, mut frac) = match n {
        Num::NaN => return out.push(K_NAN),
        Num::NegInf => return out.push(K_NEG_INF),
        Num::PosInf => return out.push(K_POS_INF),
        Num::Zero => return out.push(K_ZERO),
        Num::Finite { neg, exp, frac } => (neg, exp, frac),
    };
    let inv = if neg { 0xFF } else { 0x00 };
    out.push(if neg { K_NEG } else { K_POS });
    let e = ((exp + EXP_BIAS) as u16).to_be_bytes();
    out.extend_from_slice(&[e[0] ^ inv, e[1] ^ inv]);
    if frac == 0 {
        out.push(inv);
        return;
    }
    while frac != 0 {
        let chunk = (frac >> 57) as u8;
        frac <<= 7;
        let more = u8::from(frac != 0);
        out.push((chunk << 1 | more) ^ inv);
    }
}

/// Escaped bytes: `00` → `00 FF`, then the terminator `00 01`.
fn put_escaped(bytes: &[u8], out: &mut Vec<u8>) {
    let mut rest = bytes;
    while let Some(i) = rest.iter().position(|&b| b == 0) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(&[0x00, 0xFF]);
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
    out.extend_from_slice(&[0x00, 0x01]);
}

fn invert_from(out: &mut [u8], mark: usize) {
    if let Some(tail) = out.get_mut(mark..) {
        for b in tail {
            *b = !*b;
        }
    }
}

fn depth_err() -> DocumentError {
    DocumentError::DepthLimit { limit: MAX_DEPTH }
}

/// The data-table key of a binary `_id` in document-layer format 2: the
/// binary tag, the length (u32 big-endian) and the bytes, without format
/// 3's subtype byte (FORMAT.md, "Formats 1 and 2 and their upgrade").
pub(crate) fn format2_binary_key(b: &[u8]) -> DocResult<Vec<u8>> {
    let mut out = Vec::with_capacity(b.len() + 5);
    put_binary_with(b, None, &mut out)?;
    Ok(out)
}

fn put_binary(b: &[u8], subtype: u8, out: &mut Vec<u8>) -> DocResult<()> {
    put_binary_with(b, Some(subtype), out)
}

/// The binary tag, the length and, from format 3 on, the subtype byte;
/// then the bytes.
fn put_binary_with(b: &[u8], subtype: Option<u8>, out: &mut Vec<u8>) -> DocResult<()> {
    let n = u32::try_from(b.len()).map_err(|_| DocumentError::InvalidKey {
        offset: out.len(),
        reason: "binary value of 4 GiB or more",
    })?;
    out.push(K_BINARY);
    out.extend_from_slice(&n.to_be_bytes());
    out.extend(subtype);
    out.extend_from_slice(b);
    Ok(())
}

/// A date: the i64 big-endian with its sign bit flipped (byte order is
/// numeric order).
fn put_date(ms: i64, out: &mut Vec<u8>) {
    out.push(K_DATE);
    out.extend_from_slice(&((ms as u64) ^ (1 << 63)).to_be_bytes());
}

fn put_value(v: &Value, out: &mut Vec<u8>, depth: usize) -> DocResult<()> {
    match v {
        Value::Null => out.push(K_NULL),
        Value::Bool(b) => out.push(if *b { K_TRUE } else { K_FALSE }),
        Value::Int(i) => put_num(num_of_i64(*i), out),
        Value::Float(f) => put_num(num_of_f64(*f), out),
        Value::String(s) => {
            out.push(K_STRING);
            put_escaped(s.as_bytes(), out);
        }
        Value::Binary(b) => put_binary(b, SUBTYPE_GENERIC, out)?,
        Value::Uuid(u) => put_binary(u, SUBTYPE_UUID, out)?,
        Value::Date(ms) => put_date(*ms, out),
        Value::Id(id) => {
            out.push(K_ID);
            out.extend_from_slice(id.as_bytes());
        }
        Value::Array(a) if a.is_empty() && depth == 0 => out.push(K_UNDEFINED),
        Value::Array(a) => {
            if depth >= MAX_DEPTH {
                return Err(depth_err());
            }
            out.push(K_ARRAY);
            for e in a {
                put_value(e, out, depth + 1)?;
            }
            out.push(K_END);
        }
        Value::Object(d) => {
            if depth >= MAX_DEPTH {
                return Err(depth_err());
            }
            out.push(K_OBJECT);
            for (k, e) in d.iter() {
                out.push(bracket(e.kind()));
                put_escaped(k.as_bytes(), out);
                put_value(e, out, depth + 1)?;
            }
            out.push(K_END);
        }
    }
    Ok(())
}

fn put_ref(v: &ValueRef<'_>, out: &mut Vec<u8>, depth: usize) -> DocResult<()> {
    match v {
        ValueRef::Null => out.push(K_NULL),
        ValueRef::Bool(b) => out.push(if *b { K_TRUE } else { K_FALSE }),
        ValueRef::Int(i) => put_num(num_of_i64(*i), out),
        ValueRef::Float(f) => put_num(num_of_f64(*f), out),
        ValueRef::String(s) => {
            out.push(K_STRING);
            put_escaped(s.as_bytes(), out);
        }
        ValueRef::Binary(b) => put_binary(b, SUBTYPE_GENERIC, out)?,
        ValueRef::Uuid(u) => put_binary(u, SUBTYPE_UUID, out)?,
        ValueRef::Date(ms) => put_date(*ms, out),
        ValueRef::Id(id) => {
            out.push(K_ID);
            out.extend_from_slice(id.as_bytes());
        }
        ValueRef::Array(a) if a.is_empty() && depth == 0 => out.push(K_UNDEFINED),
        ValueRef::Array(a) => {
            if depth >= MAX_DEPTH {
                return Err(depth_err());
            }
            out.push(K_ARRAY);
            for e in a.iter() {
                put_ref(&e?, out, depth + 1)?;
            }
            out.push(K_END);
        }
        ValueRef::Object(o) => {
            if depth >= MAX_DEPTH {
                return Err(depth_err());
            }
            out.push(K_OBJECT);
            for f in o.iter() {
                let (k, e) = f?;
                out.push(bracket(e.kind()));
                put_escaped(k.as_bytes(), out);
                put_ref(&e, out, depth + 1)?;
            }
            out.push(K_END);
        }
    }
    Ok(())
}

/// Appends one key component for `value`. Errors only for nesting deeper
/// than [`MAX_DEPTH`]; on error `out` is left as it was.
pub fn encode_component(value: &Value, order: SortOrder, out: &mut Vec<u8>) -> DocResult<()> {
    let mark = out.len();
    if let Err(e) = put_value(value, out, 0) {
        out.truncate(mark);
        return Err(e);
    }
    if order == SortOrder::Descending {
        invert_from(out, mark);
    }
    Ok(())
}

/// Appends one key component for a borrowed view (the same bytes as for
/// the decoded value). Malformed bytes inside containers are an error; on
/// error `out` is left as it was.
pub fn encode_component_ref(
    value: &ValueRef<'_>,
    order: SortOrder,
    out: &mut Vec<u8>,
) -> DocResult<()> {
    let mark = out.len();
    if let Err(e) = put_ref(value, out, 0) {
        out.truncate(mark);
        return Err(e);
    }
    if order == SortOrder::Descending {
        invert_from(out, mark);
    }
    Ok(())
}

/// A compound key: one component per `(value, order)`.
pub fn encode_key(parts: &[(&Value, SortOrder)]) -> DocResult<Vec<u8>> {
    let mut out = Vec::new();
    for (v, o) in parts {
        encode_component(v, *o, &mut out)?;
    }
    Ok(out)
}

/// Cuts the ascending component that starts at `mark` in `out` when it is
/// longer than [`INDEX_COMPONENT_MAX_BYTES`]: its first bytes, then the
/// big-endian xxh3-64 of the whole component.
fn cut_long(out: &mut Vec<u8>, mark: usize) {
    let Some(comp) = out.get(mark..) else {
        return;
    };
    if comp.len() <= INDEX_COMPONENT_MAX_BYTES {
        return;
    }
    let h = xxhash_rust::xxh3::xxh3_64(comp).to_be_bytes();
    out.truncate(mark + INDEX_COMPONENT_MAX_BYTES);
    out.extend_from_slice(&h);
}

/// Appends one component of an index entry for `value`: the bytes of
/// [`encode_component`], or for a component longer than
/// [`INDEX_COMPONENT_MAX_BYTES`] its first bytes and a hash (FORMAT.md,
/// "Long values"). Equal values give equal bytes; a cut component orders
/// correctly against every value whose encoding differs from it in those
/// first bytes (so against every uncut one), and among values sharing
/// them by hash. Readers of such entries re-check the document.
pub fn encode_index_component(value: &Value, order: SortOrder, out: &mut Vec<u8>) -> DocResult<()> {
    let mark = out.len();
    if let Err(e) = put_value(value, out, 0) {
        out.truncate(mark);
        return Err(e);
    }
    cut_long(out, mark);
    if order == SortOrder::Descending {
        invert_from(out, mark);
    }
    Ok(())
}

/// [`encode_index_component`] for a borrowed view.
pub fn encode_index_component_ref(
    value: &ValueRef<'_>,
    order: SortOrder,
    out: &mut Vec<u8>,
) -> DocResult<()> {
    let mark = out.len();
    if let Err(e) = put_ref(value, out, 0) {
        out.truncate(mark);
        return Err(e);
    }
    cut_long(out, mark);
    if order == SortOrder::Descending {
        invert_from(out, mark);
    }
    Ok(())
}

/// Whether `value`'s index component is cut ([`encode_index_component`]):
/// its encoding is longer than [`INDEX_COMPONENT_MAX_BYTES`]. A range on
/// such an operand has no exact key bounds; equality with it is looked up
/// by its cut key and re-checked.
pub fn is_long(value: &Value) -> bool {
    let mut out = Vec::new();
    put_value(value, &mut out, 0).is_err() || out.len() > INDEX_COMPONENT_MAX_BYTES
}

/// Whether every component of the index key (or key prefix) `key` holds
/// its value exactly, so that the key decodes to the document's values: no
/// component is a cut long value (see [`encode_index_component`]). Each
/// component's direction is told by its first byte. A key that does not
/// parse is not exact. A planner answering a query from index keys alone
/// (a covered query) must fetch the document when this is false.
pub fn is_exact(key: &[u8]) -> bool {
    let mut pos = 0;
    while pos < key.len() {
        let order = if key[pos] < 0x80 {
            SortOrder::Ascending
        } else {
            SortOrder::Descending
        };
        match component_len(&key[pos..], order) {
            Ok((n, true)) => pos += n,
            _ => return false,
        }
    }
    true
}

/// The length of the component at the start of `bytes` and whether it is
/// exact (`false`: a cut long value, [`INDEX_COMPONENT_MAX_BYTES`] bytes
/// and a hash).
pub fn component_len(bytes: &[u8], order: SortOrder) -> DocResult<(usize, bool)> {
    let window = bytes.len().min(INDEX_COMPONENT_MAX_BYTES);
    let mut r = KeyReader {
        buf: &bytes[..window],
        pos: 0,
        inv: inv_of(order),
        ran_out: false,
    };
    match r.value(0) {
        Ok(_) => Ok((r.pos, true)),
        Err(_) if r.ran_out && window == INDEX_COMPONENT_MAX_BYTES => {
            if bytes.len() < INDEX_COMPONENT_MAX_BYTES + HASH_BYTES {
                return Err(DocumentError::InvalidKey {
                    offset: bytes.len(),
                    reason: "key ends inside the hash of a long value",
                });
            }
            Ok((INDEX_COMPONENT_MAX_BYTES + HASH_BYTES, false))
        }
        Err(e) => Err(e),
    }
}

fn inv_of(order: SortOrder) -> u8 {
    if order == SortOrder::Descending {
        0xFF
    } else {
        0
    }
}

// ---------------------------------------------------------------------------
// Decoding

struct KeyReader<'a> {
    buf: &'a [u8],
    pos: usize,
    inv: u8,
    /// Set when a read ran past the end of `buf`.
    ran_out: bool,
}

impl KeyReader<'_> {
    fn err(&self, reason: &'static str) -> DocumentError {
        DocumentError::InvalidKey {
            offset: self.pos,
            reason,
        }
    }

    fn byte(&mut self) -> DocResult<u8> {
        let Some(b) = self.buf.get(self.pos).copied() else {
            self.ran_out = true;
            return Err(self.err("key ends inside a component"));
        };
        self.pos += 1;
        Ok(b ^ self.inv)
    }

    fn escaped(&mut self) -> DocResult<Vec<u8>> {
        let mut out = Vec::new();
        loop {
            match self.byte()? {
                0x00 => match self.byte()? {
                    0xFF => out.push(0),
                    0x01 => return Ok(out),
                    _ => return Err(self.err("bad escape in a string")),
                },
                b => out.push(b),
            }
        }
    }

    fn string(&mut self) -> DocResult<String> {
        let at = self.pos;
        String::from_utf8(self.escaped()?).map_err(|_| DocumentError::InvalidKey {
            offset: at,
            reason: "string is not UTF-8",
        })
    }

    fn number(&mut self, neg: bool) -> DocResult<Value> {
        let inv = if neg { 0xFF } else { 0x00 };
        let e = u16::from_be_bytes([self.byte()? ^ inv, self.byte()? ^ inv]);
        let exp = i32::from(e) - EXP_BIAS;
        if !(MIN_EXP..=MAX_EXP).contains(&exp) {
            return Err(self.err("number exponent out of range"));
        }
        let mut frac: u64 = 0;
        let mut shift: i32 = 57;
        let mut n = 0;
        loop {
            let b = self.byte()? ^ inv;
            n += 1;
            let data = u64::from(b >> 1);
            let more = b & 1 == 1;
            if shift >= 0 {
                frac |= data << shift;
            } else if data >> (-shift) << (-shift) != data {
                return Err(self.err("number fraction longer than 64 bits"));
            } else {
                frac |= data >> (-shift);
            }
            if !more {
                if data == 0 && n > 1 {
                    return Err(self.err("number fraction not canonical"));
                }
                break;
            }
            if n == 10 {
                return Err(self.err("number fraction longer than 64 bits"));
            }
            shift -= 7;
        }
        number_value(neg, exp, frac).ok_or_else(|| self.err("number not representable"))
    }

    fn value(&mut self, depth: usize) -> DocResult<Value> {
        let at = self.pos;
        Ok(match self.byte()? {
            K_NULL => Value::Null,
            K_FALSE => Value::Bool(false),
            K_TRUE => Value::Bool(true),
            K_NAN => Value::Float(f64::NAN),
            K_NEG_INF => Value::Float(f64::NEG_INFINITY),
            K_POS_INF => Value::Float(f64::INFINITY),
            K_ZERO => Value::Int(0),
            K_NEG => self.number(true)?,
            K_POS => self.number(false)?,
            K_STRING => Value::String(self.string()?),
            K_BINARY => {
                let mut n = [0u8; 4];
                for b in &mut n {
                    *b = self.byte()?;
                }
                let n = u32::from_be_bytes(n) as usize;
                let subtype = self.byte()?;
                let mut out = Vec::with_capacity(n.min(self.buf.len()));
                for _ in 0..n {
                    out.push(self.byte()?);
                }
                match subtype {
                    SUBTYPE_GENERIC => Value::Binary(out),
                    SUBTYPE_UUID => match <[u8; 16]>::try_from(out.as_slice()) {
                        Ok(u) => Value::Uuid(u),
                        Err(_) => return Err(self.err("a UUID key is not 16 bytes")),
                    },
                    _ => return Err(self.err("unknown binary subtype")),
                }
            }
            K_DATE => {
                let mut b = [0u8; 8];
                for x in &mut b {
                    *x = self.byte()?;
                }
                Value::Date((u64::from_be_bytes(b) ^ (1 << 63)) as i64)
            }
            K_ID => {
                let mut id = [0u8; 12];
                for b in &mut id {
                    *b = self.byte()?;
                }
                Value::Id(ObjectId::from_bytes(id))
            }
            K_UNDEFINED if depth == 0 => Value::Array(Vec::new()),
            K_ARRAY => {
                if depth >= MAX_DEPTH {
                    return Err(depth_err());
                }
                let mut items = Vec::new();
                while self.peek()? != K_END {
                    items.push(self.value(depth + 1)?);
                }
                self.pos += 1;
                if items.is_empty() && depth == 0 {
                    return Err(DocumentError::InvalidKey {
                        offset: at,
                        reason: "a whole empty array is written as undefined",
                    });
                }
                Value::Array(items)
            }
            K_OBJECT => {
                if depth >= MAX_DEPTH {
                    return Err(depth_err());
                }
                let mut fields = Vec::new();
                loop {
                    match self.byte()? {
                        K_END => break,
                        b @ 1..=9 => {
                            let k = self.string()?;
                            let v = self.value(depth + 1)?;
                            if bracket(v.kind()) != b {
                                return Err(self.err("object field type does not match its value"));
                            }
                            fields.push((k, v));
                        }
                        _ => return Err(self.err("bad object field type")),
                    }
                }
                Value::Object(Document::from_fields(fields)?)
            }
            _ => {
                return Err(DocumentError::InvalidKey {
                    offset: at,
                    reason: "unknown key tag",
                })
            }
        })
    }

    fn peek(&mut self) -> DocResult<u8> {
        let Some(b) = self.buf.get(self.pos) else {
            self.ran_out = true;
            return Err(self.err("key ends inside a container"));
        };
        Ok(b ^ self.inv)
    }
}

/// The value of `±2^exp × (1 + frac / 2^64)`: an `Int` when it is an
/// integer in the `i64` range, else a `Float` when exactly representable.
fn number_value(neg: bool, exp: i32, frac: u64) -> Option<Value> {
    if (0..64).contains(&exp) && frac.checked_shl(exp as u32).unwrap_or(0) == 0 {
        let mag = (1u128 << exp) | (u128::from(frac) >> (64 - exp));
        let signed = if neg { -(mag as i128) } else { mag as i128 };
        if let Ok(i) = i64::try_from(signed) {
            return Some(Value::Int(i));
        }
    }
    let sign = if neg { 1u64 << 63 } else { 0 };
    if exp >= -1022 {
        // Normal: 52 fraction bits.
        if frac & 0xFFF != 0 || exp > MAX_EXP {
            return None;
        }
        let bits = sign | (((exp + 1023) as u64) << 52) | (frac >> 12);
        return Some(Value::Float(f64::from_bits(bits)));
    }
    // Subnormal: the leading one is bit `exp + 1074` of the 52-bit field.
    let p = (exp + 1074) as u32;
    let keep = frac.checked_shr(64 - p).unwrap_or(0);
    if frac.checked_shl(p).unwrap_or(0) != 0 {
        return None;
    }
    Some(Value::Float(f64::from_bits(sign | (1u64 << p) | keep)))
}

/// Decodes one component from the start of `bytes`; returns it and the
/// number of bytes it took. Numbers come back as `Int` when integral and in
/// the `i64` range, else `Float` (the key does not record which it was).
pub fn decode_component(bytes: &[u8], order: SortOrder) -> DocResult<(Value, usize)> {
    let mut r = KeyReader {
        buf: bytes,
        pos: 0,
        inv: inv_of(order),
        ran_out: false,
    };
    let v = r.value(0)?;
    Ok((v, r.pos))
}

/// Decodes a compound key of exactly `orders.len()` components.
pub fn decode_key(bytes: &[u8], orders: &[SortOrder]) -> DocResult<Vec<Value>> {
    let mut pos = 0;
    let mut out = Vec::with_capacity(orders.len());
    for o in orders {
        let rest = bytes.get(pos..).unwrap_or(&[]);
        let (v, n) = decode_component(rest, *o).map_err(|e| match e {
            DocumentError::InvalidKey { offset, reason } => DocumentError::InvalidKey {
                offset: offset + pos,
                reason,
            },
            e => e,
        })?;
        out.push(v);
        pos += n;
    }
    if pos != bytes.len() {
        return Err(DocumentError::InvalidKey {
            offset: pos,
            reason: "bytes after the last component",
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::document::testing::*;

    fn key(v: &Value, o: SortOrder) -> Vec<u8> {
        let mut out = Vec::new();
        encode_component(v, o, &mut out).unwrap();
        out
    }

    fn asc(v: impl Into<Value>) -> Vec<u8> {
        key(&v.into(), SortOrder::Ascending)
    }

    #[test]
    fn equal_numbers_encode_identically() {
        assert_eq!(asc(2), asc(2.0));
        assert_eq!(asc(-7), asc(-7.0));
        assert_eq!(asc(0), asc(-0.0));
        assert_eq!(asc(1i64 << 53), asc(9007199254740992.0));
        assert_eq!(asc(i64::MIN), asc(-9.223372036854776e18));
        assert_eq!(asc(f64::NAN), asc(-f64::NAN));
        assert_ne!(asc((1i64 << 53) + 1), asc(9007199254740992.0));
        assert!(asc((1i64 << 53) + 1) > asc(9007199254740992.0));
        assert!(asc(i64::MAX) < asc(9.223372036854776e18));
        assert!(asc(i64::MAX - 1) < asc(i64::MAX));
        assert_eq!(asc(5), [K_POS, 0x04, 0x35, 0x40]); // 5 = 1.01b × 2^2: exp 2 + 1075, fraction 01
    }

    #[test]
    fn type_and_number_order() {
        // MongoDB's "Comparison/Sort Order": a whole empty array (as the
        // sort reads it), null, numbers, strings, objects, arrays, binary
        // (by length first), ids, booleans, dates.
        let ascending: Vec<Value> = vec![
            Value::Array(vec![]),
            Value::Null,
            f64::NAN.into(),
            f64::NEG_INFINITY.into(),
            f64::MIN.into(),
            i64::MIN.into(),
            (-1.5).into(),
            (-1).into(),
            (-5e-324).into(),
            0.into(),
            5e-324.into(),
            f64::MIN_POSITIVE.into(),
            0.5.into(),
            1.into(),
            i64::MAX.into(),
            1e300.into(),
            f64::INFINITY.into(),
            "".into(),
            "a".into(),
            "a\0".into(),
            "a\0b".into(),
            "ab".into(),
            "é".into(),
            Document::new().into(),
            // Objects: the pair's value type first, then its name, then
            // the value; fewer pairs are smaller.
            Document::new().with("b", Value::Null).into(),
            Document::new().with("a", 1).into(),
            Document::new().with("a", 1).with("a\0", 0).into(),
            Document::new().with("a", 2).into(),
            Document::new().with("b", 1).into(),
            Document::new().with("a", "x").into(),
            Document::new().with("a", Value::Array(vec![])).into(),
            Document::new().with("a", false).into(),
            // Arrays: element by element; an empty array inside is an
            // array (after numbers).
            Value::from(vec![Value::Null]),
            Value::from(vec![1, 2]),
            Value::from(vec![1, 2, 0]),
            Value::from(vec![2]),
            Value::from(vec![Value::Array(vec![])]),
            Value::from(vec![true]),
            Value::binary(vec![]),
            Value::binary(vec![0xFF]),
            Value::binary(vec![0, 0]),
            Value::binary(vec![0, 1]),
            // BinData: length, then subtype, then bytes (manual,
            // "Comparison/Sort Order": "MongoDB sorts BinData in the
            // following order: First, the length or size of the data. Then,
            // by the BSON one-byte subtype. Finally, by the data, performing
            // a byte-by-byte comparison"). A UUID is 16 bytes of subtype 4.
            Value::binary(vec![0xFF; 15]),
            Value::binary(vec![0; 16]),
            Value::binary(vec![0xFF; 16]),
            Value::Uuid([0; 16]),
            Value::Uuid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]),
            Value::Uuid([0xFF; 16]),
            Value::binary(vec![0; 17]),
            Value::Id(ObjectId::from_bytes([0; 12])),
            Value::Id(ObjectId::from_bytes([0xFF; 12])),
            false.into(),
            true.into(),
            // Dates after booleans ("... ObjectId, Boolean, Date,
            // Timestamp ..."), by time, before 1970 included.
            Value::Date(i64::MIN),
            Value::Date(-1),
            Value::Date(0),
            Value::Date(1),
            Value::Date(i64::MAX),
        ];
        for w in ascending.windows(2) {
            assert_eq!(
                compare(&w[0], &w[1]),
                Ordering::Less,
                "{:?} < {:?}",
                w[0],
                w[1]
            );
            for o in [SortOrder::Ascending, SortOrder::Descending] {
                let (a, b) = (key(&w[0], o), key(&w[1], o));
                let want = if o == SortOrder::Ascending {
                    Ordering::Less
                } else {
                    Ordering::Greater
                };
                assert_eq!(a.cmp(&b), want, "{:?} vs {:?} {o:?}", w[0], w[1]);
            }
        }
    }

    #[test]
    fn date_and_uuid_key_bytes() {
        // FORMAT.md: a date is 0x48 then the i64 big-endian with its sign
        // bit flipped; binary is 0x3C, the length, the subtype, the bytes.
        assert_eq!(
            key(&Value::Date(0), SortOrder::Ascending),
            [0x48, 0x80, 0, 0, 0, 0, 0, 0, 0]
        );
        assert_eq!(
            key(&Value::Date(-1), SortOrder::Ascending),
            [0x48, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        );
        let mut u = vec![0x3C, 0, 0, 0, 16, 0x04];
        u.extend_from_slice(&[7; 16]);
        assert_eq!(key(&Value::Uuid([7; 16]), SortOrder::Ascending), u);
        assert_eq!(
            key(&Value::binary(vec![9]), SortOrder::Ascending),
            [0x3C, 0, 0, 0, 1, 0x00, 9]
        );
        // Dates never equal numbers (their own bracket), nor UUIDs bytes.
        assert_ne!(compare(&Value::Date(5), &Value::Int(5)), Ordering::Equal);
        assert_ne!(
            compare(&Value::Uuid([7; 16]), &Value::binary(vec![7; 16])),
            Ordering::Equal
        );
        // Other subtypes, and a UUID key of another length, are refused.
        for bad in [
            vec![0x3C, 0, 0, 0, 1, 0x05, 9],
            vec![0x3C, 0, 0, 0, 1, 0x04, 9],
        ] {
            assert!(matches!(
                decode_component(&bad, SortOrder::Ascending),
                Err(DocumentError::InvalidKey { .. })
            ));
        }
    }

    #[test]
    fn decode_examples() {
        for v in [
            Value::from(2.0),
            Value::from(-0.0),
            Value::from(0.1),
            Value::from(-3.75e-310),
            Value::from(9.3e18),
            Value::from(i64::MIN),
            Value::from("a\0b"),
            Value::from(vec![Value::from("x"), Value::Null]),
            Document::new()
                .with("k", Value::binary(vec![0, 0xFF]))
                .into(),
        ] {
            for o in [SortOrder::Ascending, SortOrder::Descending] {
                let k = key(&v, o);
                let (back, n) = decode_component(&k, o).unwrap();
                assert_eq!(n, k.len());
                assert_eq!(compare(&back, &v), Ordering::Equal, "{v:?}");
            }
        }
        assert_eq!(
            decode_component(&asc(2.0), SortOrder::Ascending).unwrap().0,
            Value::Int(2)
        );
        assert_eq!(
            decode_component(&asc(0.1), SortOrder::Ascending).unwrap().0,
            Value::Float(0.1)
        );
        let k = encode_key(&[
            (&"x".into(), SortOrder::Descending),
            (&7.into(), SortOrder::Ascending),
        ])
        .unwrap();
        assert_eq!(
            decode_key(&k, &[SortOrder::Descending, SortOrder::Ascending]).unwrap(),
            vec![Value::from("x"), Value::Int(7)]
        );
        assert!(decode_key(&k, &[SortOrder::Descending]).is_err());
    }

    #[test]
    fn depth_limit() {
        let mut v = Value::Null;
        for _ in 0..=MAX_DEPTH {
            v = Value::Array(vec![v]);
        }
        let mut out = vec![1];
        assert!(encode_component(&v, SortOrder::Ascending, &mut out).is_err());
        assert_eq!(out, [1]);
        let bytes = [vec![K_ARRAY; MAX_DEPTH + 1], vec![K_END; MAX_DEPTH + 1]].concat();
        assert!(matches!(
            decode_component(&bytes, SortOrder::Ascending),
            Err(DocumentError::DepthLimit { .. })
        ));
    }

    fn index_key(v: &Value, o: SortOrder) -> Vec<u8> {
        let mut out = Vec::new();
        encode_index_component(v, o, &mut out).unwrap();
        out
    }

    #[test]
    fn long_values_are_cut_and_marked_inexact() {
        let long = Value::from("x".repeat(1000));
        for o in [SortOrder::Ascending, SortOrder::Descending] {
            let k = index_key(&long, o);
            assert_eq!(k.len(), INDEX_COMPONENT_MAX_BYTES + HASH_BYTES);
            assert_eq!(k[..100], key(&long, o)[..100]);
            assert_eq!(component_len(&k, o).unwrap(), (k.len(), false));
            assert!(!is_exact(&k));
            // Followed by an `_id` component, still one cut component.
            let mut entry = k.clone();
            encode_component(&Value::Int(7), SortOrder::Ascending, &mut entry).unwrap();
            assert!(!is_exact(&entry));
            assert_eq!(component_len(&entry, o).unwrap(), (k.len(), false));
            // Short values are whole and exact.
            let short = index_key(&Value::from("x".repeat(10)), o);
            assert_eq!(short, key(&Value::from("x".repeat(10)), o));
            assert!(is_exact(&short));
            assert_eq!(component_len(&short, o).unwrap(), (short.len(), true));
        }
        // The longest whole component and the shortest cut one.
        let edge = |n: usize| Value::from("y".repeat(n));
        let whole = key(&edge(INDEX_COMPONENT_MAX_BYTES - 3), SortOrder::Ascending);
        assert_eq!(whole.len(), INDEX_COMPONENT_MAX_BYTES);
        assert_eq!(
            index_key(&edge(INDEX_COMPONENT_MAX_BYTES - 3), SortOrder::Ascending),
            whole
        );
        assert!(!is_long(&edge(INDEX_COMPONENT_MAX_BYTES - 3)));
        assert!(is_long(&edge(INDEX_COMPONENT_MAX_BYTES - 2)));
        let cut = index_key(&edge(INDEX_COMPONENT_MAX_BYTES - 2), SortOrder::Ascending);
        assert_eq!(cut.len(), INDEX_COMPONENT_MAX_BYTES + HASH_BYTES);
        assert!(!is_exact(&cut));
        // Two long values sharing their first bytes: different keys, each
        // canonical.
        let a = Value::from(format!("{}a", "p".repeat(600)));
        let b = Value::from(format!("{}b", "p".repeat(600)));
        assert_ne!(
            index_key(&a, SortOrder::Ascending),
            index_key(&b, SortOrder::Ascending)
        );
        assert_eq!(
            index_key(&a, SortOrder::Ascending),
            index_key(&a.clone(), SortOrder::Ascending)
        );
        // Truncated hashes are errors, not panics.
        assert!(component_len(&cut[..cut.len() - 1], SortOrder::Ascending).is_err());
    }

    fn long_string() -> impl Strategy<Value = Value> {
        // Long strings sharing prefixes, around the cut.
        (
            0usize..3,
            200usize..320,
            prop::collection::vec(prop::sample::select(vec!['a', 'b', '\0']), 0..4),
        )
            .prop_map(|(p, n, tail)| {
                let mut s: String = ["q", "qq", "r"][p].repeat(n / ["q", "qq", "r"][p].len());
                s.extend(tail);
                Value::String(s)
            })
    }

    fn order_strategy() -> impl Strategy<Value = SortOrder> {
        prop_oneof![Just(SortOrder::Ascending), Just(SortOrder::Descending)]
    }

    fn directed(o: Ordering, d: SortOrder) -> Ordering {
        if d == SortOrder::Descending {
            o.reverse()
        } else {
            o
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn byte_order_is_value_order(a in arb_value(), b in arb_value(), o in order_strategy()) {
            let (ka, kb) = (key(&a, o), key(&b, o));
            prop_assert_eq!(ka.cmp(&kb), directed(compare(&a, &b), o), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn scalar_order_with_many_ties(a in arb_scalar(), b in arb_scalar(), o in order_strategy()) {
            let (ka, kb) = (key(&a, o), key(&b, o));
            prop_assert_eq!(ka.cmp(&kb), directed(compare(&a, &b), o), "{:?} vs {:?}", a, b);
        }

        #[test]
        fn compound_keys_order_componentwise(
            a in prop::collection::vec(arb_value(), 3),
            b in prop::collection::vec(arb_value(), 3),
            orders in prop::collection::vec(order_strategy(), 3),
            // Often share a prefix so later components decide.
            share in 0usize..3,
        ) {
            let mut b = b;
            b[..share].clone_from_slice(&a[..share]);
            let ka = encode_key(&[(&a[0], orders[0]), (&a[1], orders[1]), (&a[2], orders[2])]).unwrap();
            let kb = encode_key(&[(&b[0], orders[0]), (&b[1], orders[1]), (&b[2], orders[2])]).unwrap();
            let want = (0..3)
                .map(|i| directed(compare(&a[i], &b[i]), orders[i]))
                .find(|o| *o != Ordering::Equal)
                .unwrap_or(Ordering::Equal);
            prop_assert_eq!(ka.cmp(&kb), want);
            let back = decode_key(&ka, &orders).unwrap();
            for (x, y) in back.iter().zip(&a) {
                prop_assert_eq!(compare(x, y), Ordering::Equal);
            }
        }

        #[test]
        fn decode_then_encode_is_identity(v in arb_value(), o in order_strategy()) {
            let k = key(&v, o);
            let (back, n) = decode_component(&k, o).unwrap();
            prop_assert_eq!(n, k.len());
            prop_assert_eq!(compare(&back, &v), Ordering::Equal);
            prop_assert_eq!(key(&back, o), k);
        }

        #[test]
        fn views_encode_like_values(v in arb_value(), o in order_strategy()) {
            let bytes = crate::document::to_vec(&v).unwrap();
            let view = crate::document::codec::value_ref(&bytes).unwrap();
            let mut k = Vec::new();
            encode_component_ref(&view, o, &mut k).unwrap();
            prop_assert_eq!(k, key(&v, o));
        }

        /// Index components order as the values do, except between two cut
        /// values sharing their first bytes (then by hash); equal values
        /// have equal keys.
        #[test]
        fn index_components_order_like_values(
            a in prop_oneof![long_string(), arb_value()],
            b in prop_oneof![long_string(), arb_value()],
            o in order_strategy(),
        ) {
            let (ka, kb) = (index_key(&a, o), index_key(&b, o));
            let (fa, fb) = (key(&a, SortOrder::Ascending), key(&b, SortOrder::Ascending));
            let shared_cut = is_long(&a) && is_long(&b)
                && fa[..INDEX_COMPONENT_MAX_BYTES] == fb[..INDEX_COMPONENT_MAX_BYTES];
            if compare(&a, &b) == Ordering::Equal {
                prop_assert_eq!(&ka, &kb);
            } else if !shared_cut {
                prop_assert_eq!(ka.cmp(&kb), directed(compare(&a, &b), o), "{:?} vs {:?}", a, b);
            } else {
                prop_assert_ne!(&ka, &kb);
            }
            prop_assert_eq!(is_exact(&ka), !is_long(&a));
        }

        #[test]
        fn random_keys_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..40), o in order_strategy()) {
            if let Ok((v, n)) = decode_component(&bytes, o) {
                // Whatever decodes re-encodes to the same bytes.
                prop_assert_eq!(key(&v, o), bytes[..n].to_vec());
            }
            let _ = decode_key(&bytes, &[o, o]);
        }

        #[test]
        fn truncated_keys_are_errors(v in arb_value(), o in order_strategy(), cut in any::<prop::sample::Index>()) {
            let k = key(&v, o);
            let short = &k[..cut.index(k.len())];
            prop_assert!(decode_key(short, &[o]).is_err());
        }
    }
}
