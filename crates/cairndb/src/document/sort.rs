//! Sort specifications and the document order they define.
//!
//! # The sort language
//!
//! A sort is a JSON object of field paths, each `1` (ascending) or `-1`
//! (descending), applied in the order written: `{"age": -1, "name": 1}`.
//! Because key order matters, pass JSON text ([`SortSpec::parse_str`]) or
//! a list of one-key objects (`[{"age": -1}, {"name": 1}]`, also accepted by
//! [`SortSpec::parse`]); a `serde_json::Value` object with several keys is
//! refused unless serde_json keeps insertion order (its `preserve_order`
//! feature), since it would otherwise have been sorted by name.
//!
//! # The order
//!
//! Each key compares the value a document has at the path, in the order of
//! [`keys::compare`], MongoDB's "Comparison/Sort Order" (null < numbers <
//! strings < objects < arrays < binary < ids < booleans; `2 == 2.0`):
//! - a missing field sorts as null;
//! - a path reaching an array (or several values through arrays of
//!   objects) sorts by the **smallest** value it reaches when ascending and
//!   the **largest** when descending, as in MongoDB;
//! - the values are those an index on the path stores
//!   ([`LookupMode::Index`]): an array contributes its elements, and an
//!   empty array contributes itself, which sorts before null (MongoDB's
//!   "an empty array is less than null or a missing field"), so first when
//!   ascending and last when descending; a document that also matches
//!   `{path: null}` (an array element lacking the field: `{a: [{b: 1},
//!   {}]}` for `a.b`) has null among its values too, as in MongoDB.
//!
//! This is the order a scan of an index on the same paths and orders gives
//! when each document is taken at its first entry (for a dotted path, an
//! index with null entries for array elements, FORMAT.md format 5), so a
//! planner can serve the sort from the index. [`SortSpec::key_bytes`] encodes a document's
//! sort key so that byte order is this order (for external sorting).
//! Ties are left in input order by a stable sort.
//!
//! A key `{"score": {"$meta": "textScore"}}` (any name) sorts by the
//! `$text` score, highest first; the query must have a `$text` condition.
//! [`compare`](SortSpec::compare) and [`key_bytes`](SortSpec::key_bytes),
//! which do not know scores, leave it out.

use std::cmp::Ordering;

use super::codec::ValueRef;
use super::error::{DocResult, DocumentError};
use super::filter::{self, cmp_ref};
use super::keys::{self, SortOrder};
use super::path::{self, FieldPath, LookupMode};
use super::update::check_conflicts;
use super::value::{Document, Value};

/// A validated sort: paths with directions, in priority order.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SortSpec {
    keys: Vec<(FieldPath, SortOrder)>,
    /// The place of a `{"$meta": "textScore"}` key among `keys` (before
    /// `keys[i]`).
    text_score: Option<usize>,
}

fn invalid(reason: impl Into<String>) -> DocumentError {
    DocumentError::InvalidSort {
        reason: reason.into(),
    }
}

/// Whether `serde_json::Map` iterates in insertion order.
fn json_keeps_order() -> bool {
    let mut m = serde_json::Map::new();
    m.insert("b".into(), serde_json::Value::Null);
    m.insert("a".into(), serde_json::Value::Null);
    m.keys().next().is_some_and(|k| k == "b")
}

fn direction(path: &str, v: &Value) -> DocResult<SortOrder> {
    match v {
        Value::Int(1) => Ok(SortOrder::Ascending),
        Value::Int(-1) => Ok(SortOrder::Descending),
        Value::Float(f) if *f == 1.0 => Ok(SortOrder::Ascending),
        Value::Float(f) if *f == -1.0 => Ok(SortOrder::Descending),
        other => Err(invalid(format!(
            "the direction of {path:?} must be 1 or -1, found {}",
            other.to_json()
        ))),
    }
}

impl SortSpec {
    /// A sort over `keys`. The same path twice, or a path and a path
    /// inside it, is [`DocumentError::InvalidSort`].
    pub fn new(keys: Vec<(FieldPath, SortOrder)>) -> DocResult<SortSpec> {
        check_conflicts(&keys.iter().map(|(p, _)| p).collect::<Vec<_>>()).map_err(|e| match e {
            DocumentError::UpdateConflict { path, other } => {
                invalid(format!("the paths {path:?} and {other:?} overlap"))
            }
            e => e,
        })?;
        Ok(SortSpec {
            keys,
            text_score: None,
        })
    }

    /// Parses a sort from a JSON value: an object (one key, or several when
    /// serde_json keeps key order) or a list of one-key objects.
    pub fn parse(json: serde_json::Value) -> DocResult<SortSpec> {
        if let serde_json::Value::Object(m) = &json {
            if m.len() > 1 && !json_keeps_order() {
                return Err(invalid(
                    "a serde_json object with several keys has lost their order; pass the JSON text \
                     (SortSpec::parse_str) or a list such as [{\"a\": 1}, {\"b\": -1}]",
                ));
            }
        }
        SortSpec::from_value(Value::from_json(json)?)
    }

    /// Parses a sort from JSON text, in the order written.
    pub fn parse_str(text: &str) -> DocResult<SortSpec> {
        SortSpec::from_value(filter::value_from_text(text)?)
    }

    /// Parses a sort already read into a [`Value`]: an object, or an array
    /// of one-key objects.
    pub fn from_value(value: Value) -> DocResult<SortSpec> {
        let mut keys = Vec::new();
        let mut text_score = None;
        let mut add = |d: &Document| -> DocResult<()> {
            for (k, v) in d.iter() {
                if let Value::Object(o) = v {
                    if o.len() == 1 && o.get("$meta") == Some(&Value::String("textScore".into())) {
                        if text_score.is_some() {
                            return Err(invalid("a sort may hold one $meta key"));
                        }
                        text_score = Some(keys.len());
                        continue;
                    }
                }
                if k.starts_with('$') {
                    return Err(DocumentError::UnknownOperator {
                        operator: k.to_string(),
                        context: "sort",
                    });
                }
                keys.push((FieldPath::parse(k)?, direction(k, v)?));
            }
            Ok(())
        };
        match &value {
            Value::Object(d) => add(d)?,
            Value::Array(items) => {
                for item in items {
                    match item {
                        Value::Object(d) if d.len() == 1 => add(d)?,
                        _ => return Err(invalid("a sort list holds objects of one key each")),
                    }
                }
            }
            other => {
                return Err(invalid(format!(
                    "a sort must be an object, found {}",
                    other.kind().name()
                )))
            }
        }
        let mut spec = SortSpec::new(keys)?;
        spec.text_score = text_score;
        Ok(spec)
    }

    /// Whether it sorts by the `$text` score.
    pub fn has_text_score(&self) -> bool {
        self.text_score.is_some()
    }

    /// [`compare`](Self::compare) with each document's `$text` score for a
    /// `$meta` key (highest first).
    pub fn compare_scored(&self, a: (&Value, f64), b: (&Value, f64)) -> Ordering {
        let (ka, kb) = (self.sort_key_value(a.0), self.sort_key_value(b.0));
        for i in 0..=self.keys.len() {
            if self.text_score == Some(i) {
                let o = b.1.total_cmp(&a.1);
                if o != Ordering::Equal {
                    return o;
                }
            }
            if let (Some(x), Some(y), Some((_, order))) = (ka.get(i), kb.get(i), self.keys.get(i)) {
                let o = keys::compare(x, y);
                let o = match order {
                    SortOrder::Ascending => o,
                    SortOrder::Descending => o.reverse(),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
        Ordering::Equal
    }

    /// The paths and directions, highest priority first.
    pub fn keys(&self) -> &[(FieldPath, SortOrder)] {
        &self.keys
    }

    /// Whether there is nothing to sort by.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty() && self.text_score.is_none()
    }

    /// The value each key sorts a decoded document by (see the module docs).
    pub fn sort_key_value(&self, doc: &Value) -> Vec<Value> {
        self.keys
            .iter()
            .map(|(p, order)| {
                let want = match order {
                    SortOrder::Ascending => Ordering::Less,
                    SortOrder::Descending => Ordering::Greater,
                };
                // An array element lacking the field counts as null (as
                // in MongoDB, and in an index's entries).
                let null = Value::Null;
                let mut vals = path::lookup_value(doc, p.segments(), LookupMode::Index);
                if !vals.is_empty() && filter::matches_null_value(doc, p.segments()) {
                    vals.push(&null);
                }
                vals.into_iter()
                    .reduce(|best, v| {
                        if keys::compare(v, best) == want {
                            v
                        } else {
                            best
                        }
                    })
                    .cloned()
                    .unwrap_or(Value::Null)
            })
            .collect()
    }

    /// The value each key sorts an encoded document by, reading only the
    /// sorted fields.
    pub fn sort_key(&self, doc: ValueRef<'_>) -> DocResult<Vec<Value>> {
        let mut out = Vec::with_capacity(self.keys.len());
        for (p, order) in &self.keys {
            let want = match order {
                SortOrder::Ascending => Ordering::Less,
                SortOrder::Descending => Ordering::Greater,
            };
            let mut best: Option<Value> = None;
            path::lookup_each(doc, p.segments(), LookupMode::Index, &mut |v| {
                let better = match &best {
                    None => true,
                    Some(b) => cmp_ref(v, b)? == want,
                };
                if better {
                    best = Some(v.to_value()?);
                }
                Ok(())
            })?;
            if best.is_some() && filter::matches_null(doc, p.segments())? {
                // An array element lacking the field counts as null (as
                // in MongoDB, and in an index's entries).
                let null_wins = match &best {
                    Some(b) => keys::compare(&Value::Null, b) == want,
                    None => true,
                };
                if null_wins {
                    best = Some(Value::Null);
                }
            }
            out.push(best.unwrap_or(Value::Null));
        }
        Ok(out)
    }

    /// Compares two sort keys (from [`sort_key`](Self::sort_key) or
    /// [`sort_key_value`](Self::sort_key_value)) under the directions.
    pub fn compare_keys(&self, a: &[Value], b: &[Value]) -> Ordering {
        for ((x, y), (_, order)) in a.iter().zip(b).zip(&self.keys) {
            let o = keys::compare(x, y);
            let o = match order {
                SortOrder::Ascending => o,
                SortOrder::Descending => o.reverse(),
            };
            if o != Ordering::Equal {
                return o;
            }
        }
        Ordering::Equal
    }

    /// Compares two decoded documents.
    pub fn compare(&self, a: &Value, b: &Value) -> Ordering {
        self.compare_keys(&self.sort_key_value(a), &self.sort_key_value(b))
    }

    /// Where an index scan may have put an encoded document out of this
    /// sort's order: `None` when none of its sort values is cut in an
    /// index entry (an index orders such documents exactly); else the
    /// *run key* — its sort components as an index holds them, up to the
    /// first 256 bytes of the first cut one — and its whole sort key
    /// ([`key_bytes`](Self::key_bytes)). An index orders documents sharing
    /// a run key by the cut value's hash (FORMAT.md, "Long values"), so
    /// an index-ordered scan sorts each run of them by the whole key.
    pub(crate) fn cut_run(&self, doc: ValueRef<'_>) -> DocResult<Option<(Vec<u8>, Vec<u8>)>> {
        let vals = self.sort_key(doc)?;
        let mut run = Vec::new();
        let mut cut = false;
        for (v, (_, order)) in vals.iter().zip(&self.keys) {
            let mark = run.len();
            keys::encode_index_component(v, *order, &mut run)?;
            if !keys::component_len(&run[mark..], *order)?.1 {
                run.truncate(mark + keys::INDEX_COMPONENT_MAX_BYTES);
                cut = true;
                break;
            }
        }
        if !cut {
            return Ok(None);
        }
        let mut whole = Vec::new();
        for (v, (_, order)) in vals.iter().zip(&self.keys) {
            keys::encode_component(v, *order, &mut whole)?;
        }
        Ok(Some((run, whole)))
    }

    /// The sort key of an encoded document as bytes whose order (memcmp)
    /// is [`compare`](Self::compare)'s: one index-key component per key, in
    /// its direction.
    pub fn key_bytes(&self, doc: ValueRef<'_>) -> DocResult<Vec<u8>> {
        let mut out = Vec::new();
        for (v, (_, order)) in self.sort_key(doc)?.iter().zip(&self.keys) {
            keys::encode_component(v, *order, &mut out)?;
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::document::codec::{to_vec, value_ref};
    use crate::document::gen;

    fn sorted(spec: &str, docs: Vec<serde_json::Value>) -> Vec<serde_json::Value> {
        let s = SortSpec::parse_str(spec).unwrap();
        let mut vals: Vec<Value> = docs
            .into_iter()
            .map(|d| Value::from_json(d).unwrap())
            .collect();
        vals.sort_by(|a, b| s.compare(a, b));
        vals.iter().map(Value::to_json).collect()
    }

    #[test]
    fn mongo_order() {
        let docs = vec![
            json!({"i": 0, "a": 2}),
            json!({"i": 1}),
            json!({"i": 2, "a": [1, 5]}),
            json!({"i": 3, "a": "x"}),
            json!({"i": 4, "a": null}),
            json!({"i": 5, "a": 3.5}),
        ];
        let ids = |v: Vec<serde_json::Value>| {
            v.iter()
                .map(|d| d["i"].as_i64().unwrap())
                .collect::<Vec<_>>()
        };
        // Ascending: missing == null first (stable), the array by its min 1.
        assert_eq!(ids(sorted(r#"{"a": 1}"#, docs.clone())), [1, 4, 2, 0, 5, 3]);
        // Descending: the array by its max 5.
        assert_eq!(
            ids(sorted(r#"{"a": -1}"#, docs.clone())),
            [3, 2, 5, 0, 1, 4]
        );
        let two = vec![
            json!({"i": 0, "a": 1, "b": "y"}),
            json!({"i": 1, "a": 1.0, "b": "z"}),
            json!({"i": 2, "a": 0, "b": "a"}),
        ];
        assert_eq!(ids(sorted(r#"{"a": 1, "b": -1}"#, two.clone())), [2, 1, 0]);
        assert_eq!(
            ids(sorted(r#"[{"b": -1}, {"a": 1}]"#, two.clone())),
            [1, 0, 2]
        );
        assert_eq!(
            ids(sorted(
                r#"{"x.y": 1}"#,
                vec![
                    json!({"i": 0, "x": [{"y": 3}, {"y": 1}]}),
                    json!({"i": 1, "x": {"y": 2}})
                ]
            )),
            [0, 1]
        );
    }

    #[test]
    fn parsing() {
        let s = SortSpec::parse_str(r#"{"b": -1, "a": 1}"#).unwrap();
        assert_eq!(s.keys()[0].0.as_str(), "b");
        assert_eq!(s.keys()[0].1, SortOrder::Descending);
        assert_eq!(
            SortSpec::parse(json!({"a": 1.0})).unwrap().keys()[0].1,
            SortOrder::Ascending
        );
        assert_eq!(
            SortSpec::parse(json!([{"b": 1}, {"a": -1}]))
                .unwrap()
                .keys()[0]
                .0
                .as_str(),
            "b"
        );
        assert!(SortSpec::parse(json!({})).unwrap().is_empty());
        let e = |j| SortSpec::parse(j).unwrap_err();
        assert!(matches!(
            e(json!({"a": 2})),
            DocumentError::InvalidSort { .. }
        ));
        assert!(matches!(
            e(json!({"a": "asc"})),
            DocumentError::InvalidSort { .. }
        ));
        assert!(matches!(
            e(json!([{"a": 1, "b": 1}])),
            DocumentError::InvalidSort { .. }
        ));
        assert!(matches!(
            e(json!([{"a": 1}, {"a": -1}])),
            DocumentError::InvalidSort { .. }
        ));
        assert!(matches!(
            e(json!([{"a": 1}, {"a.b": -1}])),
            DocumentError::InvalidSort { .. }
        ));
        assert!(matches!(e(json!(1)), DocumentError::InvalidSort { .. }));
        assert!(matches!(
            e(json!({"$natural": 1})),
            DocumentError::UnknownOperator { .. }
        ));
        if !json_keeps_order() {
            assert!(matches!(
                e(json!({"a": 1, "b": 1})),
                DocumentError::InvalidSort { .. }
            ));
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn key_bytes_order_is_compare(a in gen::document(), b in gen::document(), s in gen::sort_spec()) {
            let (ba, bb) = (to_vec(&a).unwrap(), to_vec(&b).unwrap());
            let (ra, rb) = (value_ref(&ba).unwrap(), value_ref(&bb).unwrap());
            prop_assert_eq!(s.sort_key(ra).unwrap(), s.sort_key_value(&a));
            let ka = s.key_bytes(ra).unwrap();
            let kb = s.key_bytes(rb).unwrap();
            prop_assert_eq!(ka.cmp(&kb), s.compare(&a, &b));
            prop_assert_eq!(s.compare(&b, &a), s.compare(&a, &b).reverse());
        }
    }
}
