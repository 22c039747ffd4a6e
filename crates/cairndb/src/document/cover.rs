//! Shape values of index entries (FORMAT.md, "Shape values in index
//! entries", document-layer format 7): what an index key loses of the
//! fields a covered query reads (an integer from the equal float, a
//! missing field from null, the objects on a dotted path and the fields'
//! order), kept in a few bytes beside the key, and the covered projection
//! of a document rebuilt from key and value.
//!
//! MongoDB keeps the same "type bits" beside its keys. Format 6 kept the
//! whole projection instead, computed and encoded on every write; a shape
//! value comes from one walk of the index's paths.

use super::codec::{self, ValueRef};
use super::error::{DocResult, DocumentError};
use super::keys::{self, SortOrder};
use super::path::FieldPath;
use super::value::Value;

/// The first byte of a shape value (a format-6 value is an encoded object
/// and starts with its tag, `0x0C`).
pub(crate) const SHAPE_TAG: u8 = 0xC5;

/// Segments per path a shape value describes (a deeper path: no value).
const MAX_SEGMENTS: usize = 8;

/// Leaves per value (`_id` and the index's paths; one byte numbers them).
const MAX_LEAVES: usize = 255;

/// Kind: the key's component as it decodes.
const KIND_EXACT: u8 = 0;
/// Kind: the component's number as an `i64`.
const KIND_INT: u8 = 1;
/// Kind: the component's number as an `f64`.
const KIND_FLOAT: u8 = 2;
/// Kind: the path stops after `kind >> 2` objects.
const KIND_ABSENT: u8 = 3;

/// One leaf of the covered projection: where it sits (the position of
/// each segment's field within its object), its field number and kind.
struct Leaf {
    pos: [u32; MAX_SEGMENTS],
    len: usize,
    field: u8,
    kind: u8,
}

impl Leaf {
    fn at(&self) -> &[u32] {
        &self.pos[..self.len]
    }
}

/// The kind of a value at a path's end, or `None` when the key cannot give
/// it back (an object or array, −0.0, NaN).
fn kind_of(v: &ValueRef<'_>) -> Option<u8> {
    match v {
        ValueRef::Null
        | ValueRef::Bool(_)
        | ValueRef::String(_)
        | ValueRef::Binary(_)
        | ValueRef::Id(_)
        | ValueRef::Date(_)
        | ValueRef::Uuid(_) => Some(KIND_EXACT),
        ValueRef::Int(_) => Some(KIND_INT),
        ValueRef::Float(f) if f.is_nan() || (*f == 0.0 && f.is_sign_negative()) => None,
        ValueRef::Float(_) => Some(KIND_FLOAT),
        ValueRef::Array(_) | ValueRef::Object(_) => None,
    }
}

/// The shape value of the encoded document `doc` for an index over `paths`
/// (the document having exactly one entry in it): [`SHAPE_TAG`] and a
/// (field, kind) pair per leaf in the projection's order, or empty when
/// the key cannot give the covered fields back (an array on a path, an
/// object, −0.0 or NaN at a path's end, a path deeper than
/// [`MAX_SEGMENTS`]); a covered read then reads the document.
pub(crate) fn shape_value(paths: &[(FieldPath, SortOrder)], doc: &[u8]) -> DocResult<Vec<u8>> {
    let ValueRef::Object(root) = codec::value_ref(doc)? else {
        return Ok(Vec::new());
    };
    if paths.len() + 1 > MAX_LEAVES {
        return Ok(Vec::new());
    }
    let mut leaves: Vec<Leaf> = Vec::with_capacity(paths.len() + 1);
    let Some((pos, id)) = root.get_indexed("_id")? else {
        return Ok(Vec::new());
    };
    let Some(kind) = kind_of(&id) else {
        return Ok(Vec::new());
    };
    let mut first = Leaf {
        pos: [0; MAX_SEGMENTS],
        len: 1,
        field: 0,
        kind,
    };
    first.pos[0] = pos as u32;
    leaves.push(first);
    for (i, (p, _)) in paths.iter().enumerate() {
        let segs = p.segments();
        if segs.is_empty() || segs.len() > MAX_SEGMENTS {
            return Ok(Vec::new());
        }
        let mut leaf = Leaf {
            pos: [0; MAX_SEGMENTS],
            len: 0,
            field: (i + 1) as u8,
            kind: KIND_ABSENT,
        };
        let mut at = root;
        for (j, seg) in segs.iter().enumerate() {
            let Some((pos, v)) = at.get_indexed(seg)? else {
                break;
            };
            if j + 1 == segs.len() {
                let Some(kind) = kind_of(&v) else {
                    return Ok(Vec::new());
                };
                leaf.pos[j] = pos as u32;
                leaf.len = j + 1;
                leaf.kind = kind;
                break;
            }
            match v {
                ValueRef::Object(o) => {
                    leaf.pos[j] = pos as u32;
                    leaf.len = j + 1;
                    at = o;
                }
                // An array on the way: the projection keeps it (its
                // objects' fields), which the key cannot give back.
                ValueRef::Array(_) => return Ok(Vec::new()),
                // A scalar on the way: the projection drops it.
                _ => break,
            }
        }
        if leaf.kind == KIND_ABSENT {
            if leaf.len == 0 {
                // Stops at the root: the projection keeps nothing of it.
                continue;
            }
            leaf.kind = KIND_ABSENT | (leaf.len as u8) << 2;
        }
        leaves.push(leaf);
    }
    leaves.sort_by(|a, b| a.at().cmp(b.at()));
    let mut out = Vec::with_capacity(1 + 2 * leaves.len());
    out.push(SHAPE_TAG);
    for l in &leaves {
        out.push(l.field);
        out.push(l.kind);
    }
    Ok(out)
}

fn malformed(reason: &'static str) -> DocumentError {
    DocumentError::Malformed { offset: 0, reason }
}

/// The value a present leaf of kind `kind` stands for, given the key's
/// decoded component.
fn leaf_value(component: &Value, kind: u8) -> DocResult<Value> {
    match (kind, component) {
        (KIND_INT, Value::Int(i)) => Ok(Value::Int(*i)),
        (KIND_FLOAT, Value::Int(i)) => Ok(Value::Float(*i as f64)),
        (KIND_FLOAT, Value::Float(f)) => Ok(Value::Float(*f)),
        (KIND_INT | KIND_FLOAT, _) => Err(malformed(
            "index entry's shape value: a number kind for a key component that is not a number",
        )),
        (KIND_EXACT, Value::Int(_) | Value::Float(_)) => Err(malformed(
            "index entry's shape value: no number kind for a number in the key",
        )),
        (KIND_EXACT, Value::Array(_) | Value::Object(_)) => Err(malformed(
            "index entry's shape value: a container in the key",
        )),
        (KIND_EXACT, v) => Ok(v.clone()),
        _ => Err(malformed("index entry's shape value: an unknown kind")),
    }
}

/// Writes the covered projection's encoding from its leaves, in their
/// depth-first order: the objects on each leaf's way are opened as the
/// leaf needs them and closed when a leaf leaves them, so a document is
/// one pass over its leaves with no intermediate `Document`.
struct Builder<'p> {
    out: Vec<u8>,
    /// The open objects below the root: their field names, where each
    /// starts, its fields so far and their names.
    open: Vec<(&'p str, usize, Vec<&'p str>)>,
    /// The root's start and field names.
    root: Vec<&'p str>,
}

impl<'p> Builder<'p> {
    fn new() -> Self {
        let mut out = Vec::with_capacity(64);
        codec::begin_object(&mut out);
        Builder {
            out,
            open: Vec::new(),
            root: Vec::new(),
        }
    }

    /// The names already written in the innermost open object.
    fn names(&mut self) -> &mut Vec<&'p str> {
        match self.open.last_mut() {
            Some((_, _, names)) => names,
            None => &mut self.root,
        }
    }

    fn close(&mut self) -> DocResult<()> {
        if let Some((_, start, names)) = self.open.pop() {
            codec::end_object(&mut self.out, start, names.len())?;
        }
        Ok(())
    }

    /// Makes `parents` the open objects (closing those a leaf has left,
    /// opening the ones it enters). Entering an object closed before, or
    /// one named like a field already written, means the leaves are out
    /// of order: the value is damaged.
    fn enter(&mut self, parents: &'p [String]) -> DocResult<()> {
        let common = self
            .open
            .iter()
            .zip(parents)
            .take_while(|((a, _, _), b)| *a == b.as_str())
            .count();
        while self.open.len() > common {
            self.close()?;
        }
        for seg in &parents[common..] {
            let names = self.names();
            if names.contains(&seg.as_str()) {
                return Err(malformed(
                    "index entry's shape value: leaves out of depth-first order",
                ));
            }
            names.push(seg);
            codec::put_field_name(&mut self.out, seg)?;
            let start = codec::begin_object(&mut self.out);
            self.open.push((seg, start, Vec::new()));
        }
        Ok(())
    }

    /// Writes a present leaf `name: v` in the innermost open object. Only
    /// `_id` may come twice (an index on `_id` itself repeats its leaf,
    /// with the same value), and is written once.
    fn leaf(&mut self, name: &'p str, v: &Value) -> DocResult<()> {
        let at_root = self.open.is_empty();
        let names = self.names();
        if names.contains(&name) {
            if at_root && name == "_id" {
                return Ok(());
            }
            return Err(malformed(
                "index entry's shape value: a field written twice",
            ));
        }
        names.push(name);
        codec::put_field_name(&mut self.out, name)?;
        codec::encode_value(v, &mut self.out)
    }

    fn finish(mut self) -> DocResult<Vec<u8>> {
        while !self.open.is_empty() {
            self.close()?;
        }
        let n = self.root.len();
        codec::end_object(&mut self.out, 0, n)?;
        Ok(self.out)
    }
}

/// The key component at the start of `rest` and its length, or `None`
/// when it is a cut long value (not exact). An exact component is shorter
/// than the cut length, so a decode that ends before it needs no second
/// look (`keys::component_len`).
fn component(rest: &[u8], order: SortOrder) -> DocResult<Option<(Value, usize)>> {
    if let Ok((v, n)) = keys::decode_component(rest, order) {
        if n < keys::INDEX_COMPONENT_MAX_BYTES {
            return Ok(Some((v, n)));
        }
    }
    let (n, exact) = keys::component_len(rest, order)?;
    if !exact {
        return Ok(None);
    }
    let (v, m) = keys::decode_component(rest, order)?;
    debug_assert_eq!(n, m);
    Ok(Some((v, m)))
}

/// The covered projection of the document whose entry in an index over
/// `paths` (their orders `orders`) has key `key` and shape value `value`,
/// encoded; `None` when a key component is a cut long value (the caller
/// reads the document). A value or key that does not decode is an error.
pub(crate) fn rebuild(
    key: &[u8],
    orders: &[SortOrder],
    paths: &[FieldPath],
    value: &[u8],
) -> DocResult<Option<Vec<u8>>> {
    let Some((&SHAPE_TAG, pairs)) = value.split_first() else {
        return Err(malformed("index entry's value is not a shape value"));
    };
    if pairs.len() % 2 != 0 {
        return Err(malformed(
            "index entry's shape value: an odd number of bytes",
        ));
    }
    if paths.len() != orders.len() {
        return Err(malformed(
            "index entry's shape value: the index's paths and orders differ in number",
        ));
    }
    let mut comps = Vec::with_capacity(orders.len());
    let mut at = 0;
    for o in orders {
        match component(key.get(at..).unwrap_or(&[]), *o)? {
            Some((v, n)) => {
                comps.push(v);
                at += n;
            }
            None => return Ok(None),
        }
    }
    let (id, n) = keys::decode_component(key.get(at..).unwrap_or(&[]), SortOrder::Ascending)?;
    if at + n != key.len() {
        return Err(DocumentError::InvalidKey {
            offset: at + n,
            reason: "bytes after the _id component",
        });
    }
    let id_path = [String::from("_id")];
    let mut b = Builder::new();
    for pair in pairs.chunks_exact(2) {
        let (field, kind) = (usize::from(pair[0]), pair[1]);
        let (segs, comp): (&[String], &Value) = if field == 0 {
            (&id_path, &id)
        } else {
            match (paths.get(field - 1), comps.get(field - 1)) {
                (Some(p), Some(c)) => (p.segments(), c),
                _ => {
                    return Err(malformed(
                        "index entry's shape value: a field number beyond the index's paths",
                    ))
                }
            }
        };
        if kind & 3 == KIND_ABSENT {
            let d = usize::from(kind >> 2);
            if d == 0 || d > segs.len() || field == 0 {
                return Err(malformed(
                    "index entry's shape value: an absent leaf's depth out of range",
                ));
            }
            b.enter(&segs[..d])?;
            continue;
        }
        let Some((last, parents)) = segs.split_last() else {
            return Err(malformed("index entry's shape value: an empty path"));
        };
        let v = leaf_value(comp, kind)?;
        b.enter(parents)?;
        b.leaf(last, &v)?;
    }
    Ok(Some(b.finish()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::collection::{cover_projection, id_key, index_entries, IndexInfo};
    use crate::document::gen;
    use crate::document::value::{Document, ObjectId};
    use proptest::prelude::*;

    const NAMES: &[&str] = &["a", "b", "c", "x"];
    const PATHS: &[&str] = &["a", "b", "x", "a.b", "a.c", "b.c", "c.a.b"];

    /// Values at a path's end or on the way: the shared scalar domain (ties,
    /// −0.0, NaN), long strings (cut keys), nested objects and arrays.
    fn value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            8 => gen::scalar(),
            1 => Just(Value::String("long".repeat(400))),
        ];
        leaf.prop_recursive(3, 16, 3, |inner| {
            prop_oneof![
                1 => prop::collection::vec(inner.clone(), 0..2).prop_map(Value::Array),
                4 => prop::collection::vec((prop::sample::select(NAMES), inner), 0..4).prop_map(
                    |f| Value::Object(f.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
                ),
            ]
        })
    }

    fn id() -> impl Strategy<Value = Value> {
        prop_oneof![
            (-3i64..3).prop_map(Value::Int),
            prop::sample::select(vec![1.0, 2.5, -0.0, f64::NAN]).prop_map(Value::Float),
            Just(Value::String("k".into())),
            any::<bool>().prop_map(Value::Bool),
            Just(Value::Id(ObjectId::from_bytes([7; 12]))),
            Just(Value::Date(5)),
            Just(Value::Uuid([3; 16])),
            Just(Value::Binary(vec![0, 1])),
        ]
    }

    /// A document: fields in random order, `_id` somewhere among them.
    fn document() -> impl Strategy<Value = Vec<u8>> {
        (
            id(),
            prop::collection::vec((prop::sample::select(NAMES), value()), 0..5),
            0usize..6,
        )
            .prop_map(|(id, fields, at)| {
                let mut d = Document::new();
                let at = at.min(fields.len());
                for (i, (k, v)) in fields.into_iter().enumerate() {
                    if i == at {
                        d.insert("_id", id.clone());
                    }
                    d.insert(k, v);
                }
                if !d.contains_key("_id") {
                    d.insert("_id", id);
                }
                let mut out = Vec::new();
                codec::encode_value(&Value::Object(d), &mut out).unwrap();
                out
            })
    }

    fn index() -> impl Strategy<Value = Vec<(String, i8)>> {
        prop::collection::vec((prop::sample::select(PATHS), any::<bool>()), 1..4).prop_map(|ps| {
            let mut out: Vec<(String, i8)> = Vec::new();
            for (p, asc) in ps {
                if !out.iter().any(|(q, _)| q == p) {
                    out.push((p.to_string(), if asc { 1 } else { -1 }));
                }
            }
            out
        })
    }

    /// Whether the key can give the covered fields back, by the rule of
    /// FORMAT.md, written over the decoded document (independently of
    /// `shape_value`'s walk).
    fn rebuildable(doc: &Value, paths: &[(String, i8)]) -> bool {
        let leaf_ok = |v: &Value| match v {
            Value::Array(_) | Value::Object(_) => false,
            Value::Float(f) => !(f.is_nan() || (*f == 0.0 && f.is_sign_negative())),
            _ => true,
        };
        let Value::Object(d) = doc else { return false };
        if !d.get("_id").is_some_and(leaf_ok) {
            return false;
        }
        paths.iter().all(|(p, _)| {
            let segs: Vec<&str> = p.split('.').collect();
            let mut at = d;
            for (j, s) in segs.iter().enumerate() {
                match at.get(s) {
                    None => return true,
                    Some(v) if j + 1 == segs.len() => return leaf_ok(v),
                    Some(Value::Object(o)) => at = o,
                    Some(Value::Array(_)) => return false,
                    Some(_) => return true,
                }
            }
            true
        })
    }

    fn info(fields: Vec<(String, i8)>) -> IndexInfo {
        IndexInfo {
            name: "i".into(),
            fields,
            unique: false,
            sparse: false,
            id: 1,
            expire_after_seconds: None,
            text: None,
            null_elements: true,
            covering: true,
            shapes: true,
            prefix_arrays: None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// A shape value is stored exactly when the rule allows one, and the
        /// document rebuilt from key and value is the covered projection of
        /// the document, byte for byte (types, objects on the way, field
        /// order); a cut long value makes the read fetch the document.
        #[test]
        fn rebuilt_documents_are_the_covered_projection(doc in document(), fields in index()) {
            let Some(proj) = cover_projection(&fields) else {
                return Ok(());
            };
            let idx = info(fields.clone());
            let paths = idx.paths().unwrap();
            let decoded = codec::decode_value(&doc).unwrap();
            let Value::Object(d) = &decoded else { unreachable!() };
            let idk = id_key(d.get("_id").unwrap()).unwrap();
            let entries = index_entries(&idx, &paths, &doc, &idk).unwrap();
            let shape = shape_value(&paths, &doc).unwrap();
            if entries.len() != 1 {
                // The caller stores no value then; nothing to check.
                return Ok(());
            }
            prop_assert_eq!(!shape.is_empty(), rebuildable(&decoded, &fields), "{:?} {:?}", decoded, fields);
            if shape.is_empty() {
                return Ok(());
            }
            let orders: Vec<SortOrder> = paths.iter().map(|(_, o)| *o).collect();
            let fps: Vec<FieldPath> = paths.iter().map(|(p, _)| p.clone()).collect();
            let got = rebuild(&entries[0], &orders, &fps, &shape).unwrap();
            let mut want = Vec::new();
            codec::encode_value(
                &Value::Object(proj.apply_ref(codec::value_ref(&doc).unwrap()).unwrap()),
                &mut want,
            )
            .unwrap();
            match got {
                Some(got) => prop_assert_eq!(
                    &got, &want, "{:?} {:?}: {:?} against {:?}", decoded, fields,
                    codec::decode_value(&got), codec::decode_value(&want)
                ),
                None => prop_assert!(!keys::is_exact(&entries[0]), "{:?}", decoded),
            }
        }

        /// Damaged values are errors, never a panic or a document.
        #[test]
        fn damaged_values_are_errors(doc in document(), fields in index(), cut in 0usize..12, flip in any::<u8>()) {
            let idx = info(fields);
            let paths = idx.paths().unwrap();
            let decoded = codec::decode_value(&doc).unwrap();
            let Value::Object(d) = &decoded else { unreachable!() };
            let idk = id_key(d.get("_id").unwrap()).unwrap();
            let entries = index_entries(&idx, &paths, &doc, &idk).unwrap();
            let mut shape = shape_value(&paths, &doc).unwrap();
            if entries.len() != 1 || shape.is_empty() {
                return Ok(());
            }
            let orders: Vec<SortOrder> = paths.iter().map(|(_, o)| *o).collect();
            let fps: Vec<FieldPath> = paths.iter().map(|(p, _)| p.clone()).collect();
            let i = cut % shape.len();
            shape[i] ^= flip | 1;
            // Anything but a panic: a document (a change that still reads,
            // e.g. another leaf order), `None` or an error.
            let _ = rebuild(&entries[0], &orders, &fps, &shape);
            shape.truncate(i);
            let r = rebuild(&entries[0], &orders, &fps, &shape);
            if i.is_multiple_of(2) {
                prop_assert!(r.is_err(), "{:?}", r);
            }
        }
    }

    /// The common shapes are stored (so covered reads read no document),
    /// and the rest are not.
    #[test]
    fn which_documents_get_a_shape_value() {
        let fields = vec![("a".to_string(), 1i8), ("b.c".to_string(), -1)];
        let idx = info(fields);
        let paths = idx.paths().unwrap();
        let enc = |j: serde_json::Value| {
            let mut out = Vec::new();
            codec::encode_value(&Value::from_json(j).unwrap(), &mut out).unwrap();
            out
        };
        for (doc, stored, len) in [
            (
                serde_json::json!({"_id": 1, "a": 5, "b": {"c": "x"}}),
                true,
                7,
            ),
            (
                serde_json::json!({"b": {"z": 1, "c": 2.5}, "_id": 1, "a": null}),
                true,
                7,
            ),
            (serde_json::json!({"_id": 1}), true, 3),
            (serde_json::json!({"_id": 1, "b": {}}), true, 5),
            (serde_json::json!({"_id": 1, "b": 7}), true, 3),
            (serde_json::json!({"_id": 1, "a": [5]}), false, 0),
            (serde_json::json!({"_id": 1, "a": {"k": 1}}), false, 0),
            (serde_json::json!({"_id": 1, "b": [{"c": 1}]}), false, 0),
            (serde_json::json!({"_id": [1]}), false, 0),
        ] {
            let v = shape_value(&paths, &enc(doc.clone())).unwrap();
            assert_eq!(!v.is_empty(), stored, "{doc}: {v:?}");
            assert_eq!(v.len(), len, "{doc}: {v:?}");
        }
    }
}
