//! Projections: which fields of a document a query returns.
//!
//! # The projection language
//!
//! A projection is a JSON object of field paths, each `1` / `true`
//! (include) or `0` / `false` (exclude); any other number counts as
//! include. It is either an **inclusion** (only the listed paths, plus
//! `_id`) or an **exclusion** (everything but the listed paths):
//!
//! ```json
//! {"name": 1, "address.city": 1}          // _id, name, address: {city}
//! {"name": 1, "_id": 0}                   // name only
//! {"history": 0, "stats.raw": 0}          // all but these
//! {}                                      // the whole document
//! ```
//!
//! - `_id` is included unless the projection says `"_id": 0`; it is the only
//!   field an inclusion may exclude. Mixing inclusion and exclusion
//!   otherwise is [`DocumentError::InvalidProjection`], as are colliding
//!   paths (`"a"` with `"a.b"`) and sub-paths of `_id`.
//! - Paths go through embedded objects by name. Through arrays they apply to
//!   every element: an inclusion of `"items.sku"` keeps, in `items`, each
//!   object element with only its `sku` (possibly `{}`), nested arrays
//!   likewise, and drops scalar elements; an exclusion removes `sku` from
//!   each object element and keeps the rest. A decimal segment is a field
//!   name here, not an array position (as in MongoDB).
//! - An inclusion through a scalar (`"a.b"` when `a` is 5) leaves the field
//!   out; an embedded object keeps its place even if nothing in it is
//!   included (`"a": {}`).
//! - Fields keep their order in the document, not in the projection.
//! - `{"score": {"$meta": "textScore"}}` adds a top-level field holding the
//!   document's `$text` score (a float; see [`text`](super::text)), in an
//!   inclusion or an exclusion alike, replacing a field of that name; the
//!   query must have a `$text` condition.
//! - Other projection operators (`$slice`, `$elemMatch`, `$`) are
//!   [`DocumentError::UnknownOperator`].

/// Sorts live in [`sort`](super::sort); re-exported here beside projections
/// (both shape a query's results).
pub use super::sort::SortSpec;

use super::codec::ValueRef;
use super::error::{DocResult, DocumentError};
use super::filter;
use super::path::FieldPath;
use super::value::{Document, Value};

/// A trie of projected paths; a leaf is a whole listed path.
#[derive(Debug, Clone, Default, PartialEq)]
struct Node {
    leaf: bool,
    children: Vec<(String, Node)>,
}

impl Node {
    fn child(&self, name: &str) -> Option<&Node> {
        self.children
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, n)| n)
    }

    fn insert(&mut self, path: &FieldPath) -> DocResult<()> {
        let collision = || DocumentError::InvalidProjection {
            reason: format!("the path {path} collides with another path of the projection"),
        };
        let mut node = self;
        for seg in path.segments() {
            if node.leaf {
                return Err(collision());
            }
            let i = match node.children.iter().position(|(k, _)| k == seg) {
                Some(i) => i,
                None => {
                    node.children.push((seg.clone(), Node::default()));
                    node.children.len() - 1
                }
            };
            node = match node.children.get_mut(i) {
                Some((_, n)) => n,
                None => return Err(collision()),
            };
        }
        if node.leaf || !node.children.is_empty() {
            return Err(collision());
        }
        node.leaf = true;
        Ok(())
    }
}

/// A validated projection (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    include: bool,
    id: bool,
    paths: Vec<FieldPath>,
    tree: Node,
    /// The field `{"$meta": "textScore"}` names.
    text_score: Option<String>,
}

fn invalid(reason: impl Into<String>) -> DocumentError {
    DocumentError::InvalidProjection {
        reason: reason.into(),
    }
}

impl Default for Projection {
    /// The projection that returns whole documents (`{}`).
    fn default() -> Projection {
        Projection {
            include: false,
            id: true,
            paths: Vec::new(),
            tree: Node::default(),
            text_score: None,
        }
    }
}

impl Projection {
    /// Parses a projection from a JSON value.
    pub fn parse(json: serde_json::Value) -> DocResult<Projection> {
        Projection::from_value(Value::from_json(json)?)
    }

    /// Parses a projection from JSON text.
    pub fn parse_str(text: &str) -> DocResult<Projection> {
        Projection::from_value(filter::value_from_text(text)?)
    }

    /// Parses a projection already read into a [`Value`] (an object).
    pub fn from_value(value: Value) -> DocResult<Projection> {
        let Value::Object(doc) = value else {
            return Err(invalid(format!(
                "a projection must be an object, found {}",
                value.kind().name()
            )));
        };
        let mut mode: Option<bool> = None;
        let mut id: Option<bool> = None;
        let mut paths = Vec::new();
        let mut tree = Node::default();
        let mut text_score = None;
        for (k, v) in doc {
            let on = match v {
                Value::Object(o)
                    if o.len() == 1
                        && o.get("$meta") == Some(&Value::String("textScore".into())) =>
                {
                    if k.contains('.') || k.starts_with('$') || k == "_id" {
                        return Err(invalid(format!(
                            "{k:?}: a $meta field must be a top-level field name other than _id"
                        )));
                    }
                    if text_score.is_some() {
                        return Err(invalid("a projection may hold one $meta field"));
                    }
                    text_score = Some(k);
                    continue;
                }
                Value::Bool(b) => b,
                Value::Int(i) => i != 0,
                Value::Float(f) => f != 0.0,
                Value::Object(o) if o.keys().any(|k| k.starts_with('$')) => {
                    return Err(DocumentError::UnknownOperator {
                        operator: o
                            .keys()
                            .find(|k| k.starts_with('$'))
                            .unwrap_or("")
                            .to_string(),
                        context: "projection (only 1 / 0 per path and {\"$meta\": \"textScore\"} are supported)",
                    })
                }
                other => {
                    return Err(invalid(format!(
                        "the value for {k:?} must be 1 or 0 (true or false), found {}",
                        other.kind().name()
                    )))
                }
            };
            if k == "_id" {
                id = Some(on);
                continue;
            }
            let path = FieldPath::parse(&k)?;
            if path.segments().first().is_some_and(|s| s == "_id") {
                return Err(invalid(format!(
                    "{k:?}: sub-paths of _id are not supported"
                )));
            }
            match mode {
                None => mode = Some(on),
                Some(m) if m != on => {
                    return Err(invalid(
                        "a projection mixes inclusion and exclusion (only _id may be excluded from an inclusion)",
                    ))
                }
                Some(_) => {}
            }
            tree.insert(&path)?;
            paths.push(path);
        }
        let include = mode.unwrap_or(id == Some(true));
        Ok(Projection {
            include,
            id: id.unwrap_or(true),
            paths,
            tree,
            text_score,
        })
    }

    /// The field that receives the `$text` score (`{"$meta":
    /// "textScore"}`), if any.
    pub fn text_score_field(&self) -> Option<&str> {
        self.text_score.as_deref()
    }

    /// Whether this lists the fields to keep (rather than to remove).
    pub fn is_inclusion(&self) -> bool {
        self.include
    }

    /// Whether the result keeps `_id`.
    pub fn includes_id(&self) -> bool {
        self.id
    }

    /// The listed paths other than `_id`, in the order given.
    pub fn paths(&self) -> &[FieldPath] {
        &self.paths
    }

    /// Whether the projection returns documents unchanged (`{}`).
    pub fn is_identity(&self) -> bool {
        !self.include && self.id && self.paths.is_empty()
    }

    /// The projected document.
    pub fn apply(&self, doc: &Document) -> Document {
        let mut out = Document::with_capacity(if self.include {
            self.paths.len() + 1
        } else {
            doc.len()
        });
        for (k, v) in doc.iter() {
            if k == "_id" {
                if self.id {
                    out.insert(k, v.clone());
                }
                continue;
            }
            let node = self.tree.child(k);
            if self.include {
                match node {
                    Some(n) if n.leaf => {
                        out.insert(k, v.clone());
                    }
                    Some(n) => {
                        if let Some(p) = include_value(v, n) {
                            out.insert(k, p);
                        }
                    }
                    None => {}
                }
            } else {
                match node {
                    Some(n) if n.leaf => {}
                    Some(n) => {
                        out.insert(k, exclude_value(v, n));
                    }
                    None => {
                        out.insert(k, v.clone());
                    }
                }
            }
        }
        out
    }

    /// [`apply`](Self::apply) on an encoded document: an inclusion decodes
    /// only the fields it keeps. A view that is not an object gives an
    /// empty document.
    pub fn apply_ref(&self, doc: ValueRef<'_>) -> DocResult<Document> {
        let ValueRef::Object(o) = doc else {
            return Ok(Document::new());
        };
        if !self.include {
            return Ok(match doc.to_value()? {
                Value::Object(d) => self.apply(&d),
                _ => Document::new(),
            });
        }
        let mut out = Document::with_capacity(self.paths.len() + 1);
        for field in o.iter() {
            let (k, v) = field?;
            if k == "_id" {
                if self.id {
                    out.insert(k, v.to_value()?);
                }
                continue;
            }
            match self.tree.child(k) {
                Some(n) if n.leaf => {
                    out.insert(k, v.to_value()?);
                }
                Some(n) => {
                    if let Some(p) = include_ref(v, n)? {
                        out.insert(k, p);
                    }
                }
                None => {}
            }
        }
        Ok(out)
    }
}

/// The part of `v` under the inner node `n` of an inclusion.
fn include_value(v: &Value, n: &Node) -> Option<Value> {
    match v {
        Value::Object(d) => {
            let mut out = Document::new();
            for (k, x) in d.iter() {
                match n.child(k) {
                    Some(c) if c.leaf => {
                        out.insert(k, x.clone());
                    }
                    Some(c) => {
                        if let Some(p) = include_value(x, c) {
                            out.insert(k, p);
                        }
                    }
                    None => {}
                }
            }
            Some(Value::Object(out))
        }
        Value::Array(a) => Some(Value::Array(
            a.iter().filter_map(|e| include_value(e, n)).collect(),
        )),
        _ => None,
    }
}

fn include_ref(v: ValueRef<'_>, n: &Node) -> DocResult<Option<Value>> {
    Ok(match v {
        ValueRef::Object(o) => {
            let mut out = Document::new();
            for field in o.iter() {
                let (k, x) = field?;
                match n.child(k) {
                    Some(c) if c.leaf => {
                        out.insert(k, x.to_value()?);
                    }
                    Some(c) => {
                        if let Some(p) = include_ref(x, c)? {
                            out.insert(k, p);
                        }
                    }
                    None => {}
                }
            }
            Some(Value::Object(out))
        }
        ValueRef::Array(a) => {
            let mut out = Vec::new();
            for e in a.iter() {
                if let Some(p) = include_ref(e?, n)? {
                    out.push(p);
                }
            }
            Some(Value::Array(out))
        }
        _ => None,
    })
}

/// `v` without what the inner node `n` of an exclusion lists.
fn exclude_value(v: &Value, n: &Node) -> Value {
    match v {
        Value::Object(d) => {
            let mut out = Document::with_capacity(d.len());
            for (k, x) in d.iter() {
                match n.child(k) {
                    Some(c) if c.leaf => {}
                    Some(c) => {
                        out.insert(k, exclude_value(x, c));
                    }
                    None => {
                        out.insert(k, x.clone());
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(|e| exclude_value(e, n)).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::document::codec::{to_vec, value_ref};
    use crate::document::gen;

    fn project(p: serde_json::Value, d: serde_json::Value) -> serde_json::Value {
        let p = Projection::parse(p).unwrap();
        let Value::Object(doc) = Value::from_json(d).unwrap() else {
            panic!()
        };
        let out = p.apply(&doc);
        let bytes = to_vec(&doc).unwrap();
        assert_eq!(p.apply_ref(value_ref(&bytes).unwrap()).unwrap(), out);
        Value::Object(out).to_json()
    }

    #[test]
    fn inclusion() {
        let d = json!({"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 1, "x": 2}, 5, [{"c": 3}], {"x": 1}], "f": 5});
        assert_eq!(
            project(json!({"a": 1}), d.clone()),
            json!({"_id": 1, "a": 1})
        );
        assert_eq!(
            project(json!({"a": 1, "_id": 0}), d.clone()),
            json!({"a": 1})
        );
        assert_eq!(project(json!({"_id": 1}), d.clone()), json!({"_id": 1}));
        assert_eq!(
            project(json!({"b.c": true}), d.clone()),
            json!({"_id": 1, "b": {"c": 2}})
        );
        assert_eq!(
            project(json!({"e.c": 1}), d.clone()),
            json!({"_id": 1, "e": [{"c": 1}, [{"c": 3}], {}]})
        );
        assert_eq!(project(json!({"f.g": 1}), d.clone()), json!({"_id": 1}));
        assert_eq!(
            project(json!({"b.z": 1}), d.clone()),
            json!({"_id": 1, "b": {}})
        );
        assert_eq!(project(json!({"zz": 1}), d.clone()), json!({"_id": 1}));
        // Document order, not projection order.
        let p = Projection::parse_str(r#"{"f": 1, "a": 1}"#).unwrap();
        let Value::Object(doc) = Value::from_json(d.clone()).unwrap() else {
            panic!()
        };
        assert_eq!(p.apply(&doc).keys().collect::<Vec<_>>(), ["_id", "a", "f"]);
        assert!(p.is_inclusion() && p.includes_id());
    }

    #[test]
    fn exclusion() {
        let d = json!({"_id": 1, "a": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 1, "x": 2}, 5, [{"c": 3}]]});
        assert_eq!(
            project(json!({"a": 0}), d.clone()),
            json!({"_id": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 1, "x": 2}, 5, [{"c": 3}]]})
        );
        assert_eq!(
            project(json!({"b.c": 0, "e.c": false, "_id": 0}), d.clone()),
            json!({"a": 1, "b": {"d": 3}, "e": [{"x": 2}, 5, [{}]]})
        );
        assert_eq!(
            project(json!({"_id": 0}), d.clone()),
            json!({"a": 1, "b": {"c": 2, "d": 3}, "e": [{"c": 1, "x": 2}, 5, [{"c": 3}]]})
        );
        assert_eq!(project(json!({}), d.clone()), d);
        assert!(Projection::parse(json!({})).unwrap().is_identity());
        assert!(Projection::default().is_identity());
        assert_eq!(
            project(json!({"a": 0, "_id": 1}), d.clone())["_id"],
            json!(1)
        );
    }

    #[test]
    fn errors() {
        let e = |j| Projection::parse(j).unwrap_err();
        assert!(matches!(
            e(json!({"a": 1, "b": 0})),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!({"a": 1, "a.b": 1})),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!({"a.b": 0, "a": 0})),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!({"a": "yes"})),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!({"_id.x": 1})),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!(5)),
            DocumentError::InvalidProjection { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$slice": 2}})),
            DocumentError::UnknownOperator { operator, .. } if operator == "$slice"
        ));
        assert!(matches!(
            e(json!({"a..b": 1})),
            DocumentError::InvalidPath { .. }
        ));
        assert!(Projection::parse(json!({"a": 1, "_id": 0})).is_ok());
        assert!(Projection::parse(json!({"a": 0, "_id": 1})).is_ok());
        assert!(Projection::parse(json!({"a.b": 1, "a.c": 1})).is_ok());
    }

    proptest! {
        #[test]
        fn projections_behave(d in gen::document(), p in gen::projection()) {
            let Value::Object(doc) = d else { return Ok(()) };
            let out = p.apply(&doc);
            let bytes = to_vec(&doc).unwrap();
            prop_assert_eq!(&p.apply_ref(value_ref(&bytes).unwrap()).unwrap(), &out);
            prop_assert_eq!(out.contains_key("_id"), p.includes_id() && doc.contains_key("_id"));
            for (k, _) in out.iter() {
                prop_assert!(doc.contains_key(k));
            }
            if !p.is_inclusion() {
                // Top-level fields not listed are untouched.
                for (k, v) in doc.iter() {
                    if k != "_id" && !p.paths().iter().any(|q| q.segments()[0] == k) {
                        prop_assert_eq!(out.get(k), Some(v));
                    }
                }
            } else {
                // Listed top-level paths are copied whole.
                for q in p.paths() {
                    if q.segments().len() == 1 {
                        prop_assert_eq!(out.get(q.as_str()), doc.get(q.as_str()));
                    }
                }
            }
        }
    }
}
