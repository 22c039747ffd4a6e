//! Field paths (`"address.city"`) and reading fields out of encoded
//! documents without decoding them: containers on the way are skipped by
//! their stored lengths, and the results are borrowed [`ValueRef`] views.
//!
//! # Multikey semantics (as in MongoDB)
//! [`lookup`] follows a path through a document and reports every value it
//! reaches:
//! - at an object, a segment selects the field of that name (a missing field
//!   reaches nothing);
//! - at an array, a segment that is a canonical decimal index (`"0"`, `"12"`)
//!   selects that element, **and** the segment is applied to every element
//!   that is an object (so `"tags.name"` reaches each tag's name). Elements
//!   that are arrays are not entered implicitly;
//! - at a scalar, a remaining segment reaches nothing;
//! - at the end of the path, a non-array value is reported as is; an array is
//!   reported according to [`LookupMode`]: its elements for index keys (an
//!   empty array reports itself, so every document has an entry in a
//!   non-sparse index), itself **and** its elements for filter matching (so
//!   `{tags: "a"}` matches an element and `{tags: ["a", "b"]}` the whole
//!   array).
//!
//! Reported values may repeat (`{a: [1, 1]}`); the index layer deduplicates
//! keys per document. A document that reports nothing for an index path is
//! indexed under `null` unless the index is sparse (the collection's rule).

use std::fmt;
use std::str::FromStr;

use super::codec::{self, ValueRef, MAX_DEPTH};
use super::error::{DocResult, DocumentError};
use super::value::{parse_index, Value};

/// The longest path accepted by [`FieldPath::parse`], in bytes.
pub const MAX_PATH_BYTES: usize = 1024;

/// A validated dotted field path.
///
/// Rules: 1 ..= [`MAX_PATH_BYTES`] bytes; segments separated by `.` are
/// non-empty, do not start with `$` (reserved for operators), and contain no
/// NUL; at most [`MAX_DEPTH`] segments.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct FieldPath {
    text: String,
    segments: Vec<String>,
}

impl FieldPath {
    /// Parses and validates a dotted path.
    pub fn parse(path: &str) -> DocResult<FieldPath> {
        let bad = |reason| DocumentError::InvalidPath {
            path: path.chars().take(200).collect(),
            reason,
        };
        if path.is_empty() {
            return Err(bad("empty path"));
        }
        if path.len() > MAX_PATH_BYTES {
            return Err(bad("longer than 1024 bytes"));
        }
        let mut segments = Vec::new();
        for seg in path.split('.') {
            if seg.is_empty() {
                return Err(bad("empty segment (leading, trailing or double dot)"));
            }
            if seg.starts_with('$') {
                return Err(bad("a segment starts with '$'"));
            }
            if seg.contains('\0') {
                return Err(bad("NUL in a segment"));
            }
            segments.push(seg.to_string());
        }
        if segments.len() > MAX_DEPTH {
            return Err(bad("more segments than the nesting limit"));
        }
        Ok(FieldPath {
            text: path.to_string(),
            segments,
        })
    }

    /// The segments in order.
    pub fn segments(&self) -> &[String] {
        &self.segments
    }

    /// The path as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl FromStr for FieldPath {
    type Err = DocumentError;
    fn from_str(s: &str) -> DocResult<FieldPath> {
        FieldPath::parse(s)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FieldPath({:?})", self.text)
    }
}

/// What a path that ends at an array reports (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LookupMode {
    /// Index keys: the array's elements (an empty array: the array itself).
    Index,
    /// Filter matching: the array itself, then its elements.
    Filter,
}

/// Every value `path` reaches in the encoded document `bytes` (see the
/// module docs), in document order. Only the containers on the path are
/// looked into; malformed bytes met on the way are an error.
pub fn lookup<'a, S: AsRef<str>>(
    bytes: &'a [u8],
    path: &[S],
    mode: LookupMode,
) -> DocResult<Vec<ValueRef<'a>>> {
    let mut out = Vec::new();
    lookup_each(codec::value_ref(bytes)?, path, mode, &mut |v| {
        out.push(v);
        Ok(())
    })?;
    Ok(out)
}

/// [`lookup`] from a view, calling `f` for each value reached (no
/// allocation); an error from `f` stops the walk and is returned.
pub fn lookup_each<'a, S: AsRef<str>>(
    root: ValueRef<'a>,
    path: &[S],
    mode: LookupMode,
    f: &mut dyn FnMut(ValueRef<'a>) -> DocResult<()>,
) -> DocResult<()> {
    let Some((seg, rest)) = path.split_first() else {
        return terminal_ref(root, mode, f);
    };
    let seg = seg.as_ref();
    match root {
        ValueRef::Object(o) => {
            if let Some(v) = o.get(seg)? {
                lookup_each(v, rest, mode, f)?;
            }
        }
        ValueRef::Array(a) => {
            if let Some(i) = parse_index(seg) {
                if let Some(v) = a.get(i)? {
                    lookup_each(v, rest, mode, f)?;
                }
            }
            for e in a.iter() {
                let e = e?;
                if let ValueRef::Object(_) = e {
                    lookup_each(e, path, mode, f)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

fn terminal_ref<'a>(
    v: ValueRef<'a>,
    mode: LookupMode,
    f: &mut dyn FnMut(ValueRef<'a>) -> DocResult<()>,
) -> DocResult<()> {
    match v {
        ValueRef::Array(a) => {
            if mode == LookupMode::Filter || a.is_empty() {
                f(v)?;
            }
            for e in a.iter() {
                f(e?)?;
            }
            Ok(())
        }
        _ => f(v),
    }
}

/// The same walk as [`lookup`] over a decoded [`Value`].
pub fn lookup_value<'v, S: AsRef<str>>(
    root: &'v Value,
    path: &[S],
    mode: LookupMode,
) -> Vec<&'v Value> {
    let mut out = Vec::new();
    walk_value(root, path, mode, &mut out);
    out
}

fn walk_value<'v, S: AsRef<str>>(
    v: &'v Value,
    path: &[S],
    mode: LookupMode,
    out: &mut Vec<&'v Value>,
) {
    let Some((seg, rest)) = path.split_first() else {
        match v {
            Value::Array(a) => {
                if mode == LookupMode::Filter || a.is_empty() {
                    out.push(v);
                }
                out.extend(a.iter());
            }
            _ => out.push(v),
        }
        return;
    };
    let seg = seg.as_ref();
    match v {
        Value::Object(d) => {
            if let Some(f) = d.get(seg) {
                walk_value(f, rest, mode, out);
            }
        }
        Value::Array(a) => {
            if let Some(e) = parse_index(seg).and_then(|i| a.get(i)) {
                walk_value(e, rest, mode, out);
            }
            for e in a {
                if let Value::Object(_) = e {
                    walk_value(e, path, mode, out);
                }
            }
        }
        _ => {}
    }
}

/// The value at exactly `path` (object fields by name, array elements by
/// decimal index; no multikey expansion), or `None` when it is missing.
pub fn get<'a, S: AsRef<str>>(bytes: &'a [u8], path: &[S]) -> DocResult<Option<ValueRef<'a>>> {
    let mut cur = codec::value_ref(bytes)?;
    for seg in path {
        let seg = seg.as_ref();
        let next = match cur {
            ValueRef::Object(o) => o.get(seg)?,
            ValueRef::Array(a) => match parse_index(seg) {
                Some(i) => a.get(i)?,
                None => None,
            },
            _ => None,
        };
        match next {
            Some(v) => cur = v,
            None => return Ok(None),
        }
    }
    Ok(Some(cur))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::document::testing::*;
    use crate::document::{to_vec, Document};

    fn doc() -> Value {
        let tags = Value::from(vec![
            Value::from(Document::new().with("b", 1)),
            Value::from(Document::new().with("b", vec![2, 3])),
            Value::from(4),
            Value::from(vec![Value::from(Document::new().with("b", 5))]),
            Value::from(Document::new().with("c", 6)),
        ]);
        Document::new()
            .with("a", tags)
            .with("empty", Value::Array(vec![]))
            .with(
                "x",
                Document::new().with("y", Document::new().with("z", "deep")),
            )
            .into()
    }

    fn values(bytes: &[u8], path: &str, mode: LookupMode) -> Vec<Value> {
        let p = FieldPath::parse(path).unwrap();
        lookup(bytes, p.segments(), mode)
            .unwrap()
            .iter()
            .map(|v| v.to_value().unwrap())
            .collect()
    }

    #[test]
    fn multikey_examples() {
        let bytes = to_vec(&doc()).unwrap();
        let ints = |v: &[i64]| v.iter().map(|&i| Value::Int(i)).collect::<Vec<_>>();
        // Through an array of objects; the nested array at the end expands;
        // arrays inside arrays are not entered.
        assert_eq!(values(&bytes, "a.b", LookupMode::Index), ints(&[1, 2, 3]));
        assert_eq!(
            values(&bytes, "a.b", LookupMode::Filter),
            vec![
                Value::Int(1),
                Value::from(vec![2, 3]),
                Value::Int(2),
                Value::Int(3)
            ]
        );
        // Positional segments.
        assert_eq!(values(&bytes, "a.1.b", LookupMode::Index), ints(&[2, 3]));
        assert_eq!(values(&bytes, "a.2", LookupMode::Index), ints(&[4]));
        assert_eq!(values(&bytes, "a.3.0.b", LookupMode::Index), ints(&[5]));
        // An empty array reports itself for index keys.
        assert_eq!(
            values(&bytes, "empty", LookupMode::Index),
            vec![Value::Array(vec![])]
        );
        assert_eq!(
            values(&bytes, "empty", LookupMode::Filter),
            vec![Value::Array(vec![])]
        );
        assert_eq!(
            values(&bytes, "x.y.z", LookupMode::Index),
            vec![Value::from("deep")]
        );
        assert!(values(&bytes, "x.y.z.w", LookupMode::Index).is_empty());
        assert!(values(&bytes, "missing", LookupMode::Filter).is_empty());
        // Exact get: no expansion.
        let p = ["a", "1", "b"];
        let got = get(&bytes, &p).unwrap().unwrap().to_value().unwrap();
        assert_eq!(got, Value::from(vec![2, 3]));
        assert!(get(&bytes, &["a", "b"]).unwrap().is_none());
        assert_eq!(doc().get_path("a.1.b"), Some(&got));
    }

    #[test]
    fn path_validation() {
        for bad in ["", ".", "a.", ".a", "a..b", "$a", "a.$b", "a\0b"] {
            assert!(
                matches!(
                    FieldPath::parse(bad),
                    Err(DocumentError::InvalidPath { .. })
                ),
                "{bad:?}"
            );
        }
        assert!(FieldPath::parse(&"a".repeat(MAX_PATH_BYTES + 1)).is_err());
        assert!(FieldPath::parse(&vec!["a"; MAX_DEPTH + 1].join(".")).is_err());
        let p: FieldPath = "address.city".parse().unwrap();
        assert_eq!(p.segments(), ["address", "city"]);
        assert_eq!(p.to_string(), "address.city");
        assert!(FieldPath::parse("a.0.b-c d.é").is_ok());
    }

    fn arb_path() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec(arb_key().prop_filter("non-empty", |k| !k.is_empty()), 0..4)
    }

    proptest! {
        #[test]
        fn lookup_in_bytes_equals_lookup_in_value(v in arb_document(), path in arb_path()) {
            let bytes = to_vec(&v).unwrap();
            for mode in [LookupMode::Index, LookupMode::Filter] {
                let from_bytes: Vec<Value> = lookup(&bytes, &path, mode)
                    .unwrap()
                    .iter()
                    .map(|r| r.to_value().unwrap())
                    .collect();
                let from_value: Vec<Value> =
                    lookup_value(&v, &path, mode).into_iter().cloned().collect();
                prop_assert_eq!(from_bytes, from_value);
            }
            let exact = get(&bytes, &path).unwrap().map(|r| r.to_value().unwrap());
            let dotted = path.join(".");
            let expected = if path.is_empty() { Some(&v) } else { v.get_path(&dotted) };
            prop_assert_eq!(exact.as_ref(), expected);
        }

        #[test]
        fn lookup_on_damaged_bytes_never_panics(
            v in arb_document(),
            path in arb_path(),
            flip in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let mut bytes = to_vec(&v).unwrap();
            let i = flip.index(bytes.len());
            bytes[i] ^= mask;
            let _ = lookup(&bytes, &path, LookupMode::Filter);
            let _ = get(&bytes, &path);
        }
    }
}
