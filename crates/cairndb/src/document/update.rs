//! Updates: MongoDB-style update documents, parsed into an [`Update`] and
//! applied to decoded [`Document`]s.
//!
//! # The update language
//!
//! An update is a JSON object. If none of its keys starts with `$` it is a
//! **replacement**: the document's fields become exactly these (the `_id`
//! is kept; `{}` leaves only the `_id`). Otherwise every key must be an
//! operator, each holding an object of dotted paths and operands:
//!
//! ```json
//! {"$set": {"status": "done", "stats.runs": 1}, "$inc": {"attempts": 1}, "$push": {"log": "ok"}}
//! ```
//!
//! | operator | operand | effect |
//! |---|---|---|
//! | `$set` | any value | sets the field, creating missing parents as objects |
//! | `$unset` | anything (ignored) | removes the field; in an array, sets the element to null; a missing path is a no-op |
//! | `$inc` | number | adds to the field (missing: set to the operand) |
//! | `$mul` | number | multiplies the field (missing: set to 0 of the operand's type) |
//! | `$min` / `$max` | any value | sets the field if the operand is smaller / larger (missing: set) |
//! | `$rename` | string (the new path) | moves the field's value (missing: no-op); replaces what is at the target |
//! | `$push` | value, or `{"$each": [values]}` | appends to the array (missing: a new array) |
//! | `$addToSet` | value, or `{"$each": [values]}` | appends each value not already present |
//! | `$pull` | value, or a condition | removes every element equal to the value / matching the condition |
//! | `$setOnInsert` | any value | like `$set`, only when an upsert inserts a new document |
//! | `$currentDate` | `true` (any boolean) or `{"$type": "date"}` | sets the field to the current time as a date (one time for the whole update); `{"$type": "timestamp"}` is refused (no timestamp type) |
//!
//! Values use the document layer's JSON forms (`{"$oid": …}`,
//! `{"$binary": …}`, `{"$float": …}`, `{"$date": …}`, `{"$uuid": …}`). [`Update::parse_str`] keeps the field
//! order of objects in the text; a `serde_json::Value` (without serde_json's
//! `preserve_order` feature) has its object keys sorted.
//!
//! ## Paths
//! A path goes through objects by field name and through arrays by decimal
//! position (`"items.2.qty"`); setting past the end of an array pads it with
//! nulls (up to [`MAX_ARRAY_PAD`] elements). Missing parents are created as
//! objects, even for a decimal segment (`$set` of `"a.0"` on a document
//! without `a` gives `{"a": {"0": …}}`), as in MongoDB. A path through a
//! value that is not an object, or through an array by a non-decimal name,
//! is [`DocumentError::NotTraversable`] (`$set` of `"a.b"` when `a` is 5).
//! `$rename` goes through objects only.
//!
//! ## Rules
//! - One update may not touch a path twice, nor a path and a path inside it
//!   (`$set: {"a": 1}, $inc: {"a.b": 1}`): [`DocumentError::UpdateConflict`].
//!   `$rename` counts both its paths.
//! - An existing `_id` cannot change (a `$set` to an equal value is
//!   allowed): [`DocumentError::ImmutableId`]. Values are compared exactly
//!   here: `1` and `1.0` are different `_id`s.
//! - `$inc` and `$mul` need a number at the field (else
//!   [`DocumentError::FieldType`]); integer results that overflow `i64` are
//!   [`DocumentError::IntegerOverflow`] (as MongoDB does for 64-bit
//!   integers; there is no silent promotion to float). An integer combined
//!   with a float gives a float.
//! - `$push`, `$addToSet` and `$pull` need an array (or nothing) at the
//!   field. `$push` takes only the `$each` modifier (`$slice`, `$sort`,
//!   `$position` are [`DocumentError::UnknownOperator`]).
//! - `$min`, `$max`, `$addToSet` and `$pull` compare values in the query
//!   order of [`keys::compare`] (`1` equals `1.0`).
//! - `$pull` with an object of operators (`{"$gte": 6}`) removes the
//!   elements satisfying them; with an object of fields (`{"sku": "x"}`) it
//!   removes the object elements matching it as a filter; any other value
//!   removes the elements equal to it (the operand forms of `$elemMatch`,
//!   see [`filter`]).
//! - Applying is all or nothing: on error the document is unchanged.
//!
//! ## Upserts
//! [`Update::apply_upsert`] builds the document an upsert inserts when no
//! document matches: from the seed ([`Filter::upsert_seed`]: the filter's
//! equality fields), apply the operators, `$setOnInsert` included; a
//! replacement keeps only the seed's `_id`. Generating a missing `_id` is
//! the collection's job.
//!
//! [`Filter::upsert_seed`]: super::filter::Filter::upsert_seed

use std::cmp::Ordering;

use super::error::{DocResult, DocumentError};
use super::filter::{self, Cond, ElemMatch};
use super::keys;
use super::path::FieldPath;
use super::value::{parse_index, Document, Value, ValueKind};

/// The largest array position a `$set` may create (arrays are padded with
/// nulls up to it), as in MongoDB.
pub const MAX_ARRAY_PAD: usize = 1_500_000;

/// One operator applied to one path.
#[derive(Debug, Clone, PartialEq)]
pub enum UpdateOp {
    /// `$set`.
    Set {
        /// The field.
        path: FieldPath,
        /// Its new value.
        value: Value,
    },
    /// `$setOnInsert`: a `$set` applied only by [`Update::apply_upsert`].
    SetOnInsert {
        /// The field.
        path: FieldPath,
        /// Its value in an inserted document.
        value: Value,
    },
    /// `$unset`.
    Unset {
        /// The field.
        path: FieldPath,
    },
    /// `$inc`.
    Inc {
        /// The field.
        path: FieldPath,
        /// The amount (an `Int` or a `Float`).
        by: Value,
    },
    /// `$mul`.
    Mul {
        /// The field.
        path: FieldPath,
        /// The factor (an `Int` or a `Float`).
        by: Value,
    },
    /// `$min`.
    Min {
        /// The field.
        path: FieldPath,
        /// The candidate value.
        value: Value,
    },
    /// `$max`.
    Max {
        /// The field.
        path: FieldPath,
        /// The candidate value.
        value: Value,
    },
    /// `$rename`.
    Rename {
        /// The field moved.
        from: FieldPath,
        /// Where it goes.
        to: FieldPath,
    },
    /// `$push` (with `$each`: several items).
    Push {
        /// The array field.
        path: FieldPath,
        /// The items appended, in order.
        items: Vec<Value>,
    },
    /// `$addToSet` (with `$each`: several items).
    AddToSet {
        /// The array field.
        path: FieldPath,
        /// The items appended where not present.
        items: Vec<Value>,
    },
    /// `$pull`.
    Pull {
        /// The array field.
        path: FieldPath,
        /// What the removed elements satisfy.
        cond: ElemMatch,
    },
    /// `$currentDate`: sets the field to the time of the update, a date.
    CurrentDate {
        /// The field.
        path: FieldPath,
    },
}

impl UpdateOp {
    /// The operator's name (`"$set"`, ...).
    pub fn operator(&self) -> &'static str {
        match self {
            UpdateOp::Set { .. } => "$set",
            UpdateOp::SetOnInsert { .. } => "$setOnInsert",
            UpdateOp::Unset { .. } => "$unset",
            UpdateOp::Inc { .. } => "$inc",
            UpdateOp::Mul { .. } => "$mul",
            UpdateOp::Min { .. } => "$min",
            UpdateOp::Max { .. } => "$max",
            UpdateOp::Rename { .. } => "$rename",
            UpdateOp::Push { .. } => "$push",
            UpdateOp::AddToSet { .. } => "$addToSet",
            UpdateOp::Pull { .. } => "$pull",
            UpdateOp::CurrentDate { .. } => "$currentDate",
        }
    }

    /// The paths the operator may change (two for `$rename`).
    pub fn paths(&self) -> Vec<&FieldPath> {
        match self {
            UpdateOp::Rename { from, to } => vec![from, to],
            UpdateOp::Set { path, .. }
            | UpdateOp::SetOnInsert { path, .. }
            | UpdateOp::Unset { path }
            | UpdateOp::Inc { path, .. }
            | UpdateOp::Mul { path, .. }
            | UpdateOp::Min { path, .. }
            | UpdateOp::Max { path, .. }
            | UpdateOp::Push { path, .. }
            | UpdateOp::AddToSet { path, .. }
            | UpdateOp::Pull { path, .. }
            | UpdateOp::CurrentDate { path } => vec![path],
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Replace(Document),
    Ops(Vec<UpdateOp>),
}

/// A validated update: a replacement document or a list of operators on
/// non-conflicting paths (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Update {
    kind: Kind,
    /// Some operator path starts at `_id`.
    touches_id: bool,
}

fn invalid(reason: impl Into<String>) -> DocumentError {
    DocumentError::InvalidUpdate {
        reason: reason.into(),
    }
}

fn operand_err(operator: &str, expected: &'static str, found: &Value) -> DocumentError {
    DocumentError::InvalidOperand {
        operator: operator.to_string(),
        expected,
        found: found.kind().name().to_string(),
    }
}

/// Refuses two paths that are equal or where one is a prefix of the other
/// (by segments).
pub(crate) fn check_conflicts(paths: &[&FieldPath]) -> DocResult<()> {
    let mut sorted: Vec<&FieldPath> = paths.to_vec();
    sorted.sort_by(|a, b| a.segments().cmp(b.segments()));
    // If x is a prefix of y, every path sorted between them has x as a
    // prefix too, so neighbours suffice.
    for w in sorted.windows(2) {
        if let [a, b] = w {
            if b.segments().starts_with(a.segments()) {
                return Err(DocumentError::UpdateConflict {
                    path: a.to_string(),
                    other: b.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The document holding `fields` at their paths (see
/// [`Filter::upsert_seed`](super::filter::Filter::upsert_seed)).
pub(crate) fn seed_document(fields: Vec<(FieldPath, Value)>) -> DocResult<Document> {
    check_conflicts(&fields.iter().map(|(p, _)| p).collect::<Vec<_>>())?;
    let mut doc = Document::new();
    for (path, value) in fields {
        set_path(&mut doc, path.segments(), value, &path)?;
    }
    Ok(doc)
}

fn is_number(v: &Value) -> bool {
    matches!(v, Value::Int(_) | Value::Float(_))
}

/// The items of a `$push` / `$addToSet` operand.
fn each_items(op: &str, v: Value) -> DocResult<Vec<Value>> {
    match v {
        Value::Object(d) if d.keys().any(|k| k.starts_with('$')) => {
            let mut items = None;
            for (k, x) in d {
                match k.as_str() {
                    "$each" => match x {
                        Value::Array(a) => items = Some(a),
                        other => return Err(operand_err("$each", "an array", &other)),
                    },
                    _ if k.starts_with('$') => {
                        return Err(DocumentError::UnknownOperator {
                            operator: k,
                            context: "$push / $addToSet modifier (only $each is supported)",
                        })
                    }
                    _ => {
                        return Err(invalid(format!(
                            "the {op} operand mixes $each with the field name {k:?}"
                        )))
                    }
                }
            }
            items.ok_or_else(|| invalid(format!("the {op} operand has modifiers but no $each")))
        }
        v => Ok(vec![v]),
    }
}

impl Update {
    /// Parses an update from a JSON value (see the module docs). Objects of
    /// a `serde_json::Value` arrive with sorted keys; use
    /// [`parse_str`](Self::parse_str) to keep the field order of the text.
    pub fn parse(json: serde_json::Value) -> DocResult<Update> {
        Update::from_value(Value::from_json(json)?)
    }

    /// Parses an update from JSON text, keeping field order.
    pub fn parse_str(text: &str) -> DocResult<Update> {
        Update::from_value(filter::value_from_text(text)?)
    }

    /// Parses an update already read into a [`Value`] (an object).
    pub fn from_value(value: Value) -> DocResult<Update> {
        let Value::Object(doc) = value else {
            return Err(invalid(format!(
                "an update must be an object, found {}",
                value.kind().name()
            )));
        };
        let ops = doc.keys().filter(|k| k.starts_with('$')).count();
        if ops == 0 {
            return Update::replacement(doc);
        }
        if ops < doc.len() {
            return Err(invalid(
                "an update mixes operators and field names (a replacement has no $ names)",
            ));
        }
        let mut out = Vec::new();
        for (name, operand) in doc {
            let op: &'static str = match name.as_str() {
                "$set" => "$set",
                "$setOnInsert" => "$setOnInsert",
                "$unset" => "$unset",
                "$inc" => "$inc",
                "$mul" => "$mul",
                "$min" => "$min",
                "$max" => "$max",
                "$rename" => "$rename",
                "$push" => "$push",
                "$addToSet" => "$addToSet",
                "$pull" => "$pull",
                "$currentDate" => "$currentDate",
                _ => {
                    return Err(DocumentError::UnknownOperator {
                        operator: name,
                        context: "update",
                    })
                }
            };
            let Value::Object(fields) = operand else {
                return Err(operand_err(op, "an object of field paths", &operand));
            };
            for (p, arg) in fields {
                let path = FieldPath::parse(&p)?;
                out.push(match op {
                    "$set" => UpdateOp::Set { path, value: arg },
                    "$setOnInsert" => UpdateOp::SetOnInsert { path, value: arg },
                    "$unset" => UpdateOp::Unset { path },
                    "$inc" => UpdateOp::Inc { path, by: arg },
                    "$mul" => UpdateOp::Mul { path, by: arg },
                    "$min" => UpdateOp::Min { path, value: arg },
                    "$max" => UpdateOp::Max { path, value: arg },
                    "$rename" => match arg {
                        Value::String(to) => UpdateOp::Rename {
                            from: path,
                            to: FieldPath::parse(&to)?,
                        },
                        other => return Err(operand_err(op, "a string (the new path)", &other)),
                    },
                    "$push" => UpdateOp::Push {
                        path,
                        items: each_items(op, arg)?,
                    },
                    "$addToSet" => UpdateOp::AddToSet {
                        path,
                        items: each_items(op, arg)?,
                    },
                    "$currentDate" => current_date_op(path, arg)?,
                    _ => UpdateOp::Pull {
                        path,
                        cond: match arg {
                            Value::Object(_) => filter::parse_elem_match(op, arg)?,
                            v => ElemMatch::Element(Box::new(Cond::Eq(v))),
                        },
                    },
                });
            }
        }
        Update::from_ops(out)
    }

    /// A replacement update. Field names starting with `$` are refused.
    pub fn replacement(doc: Document) -> DocResult<Update> {
        if let Some(k) = doc.keys().find(|k| k.starts_with('$')) {
            return Err(invalid(format!(
                "a replacement document cannot have the field {k:?}"
            )));
        }
        Ok(Update {
            kind: Kind::Replace(doc),
            touches_id: false,
        })
    }

    /// An operator update from its parts, validated as
    /// [`parse`](Self::parse) does: operand types and conflicting paths.
    pub fn from_ops(ops: Vec<UpdateOp>) -> DocResult<Update> {
        for op in &ops {
            match op {
                UpdateOp::Inc { by, .. } | UpdateOp::Mul { by, .. } if !is_number(by) => {
                    return Err(operand_err(op.operator(), "a number", by));
                }
                _ => {}
            }
        }
        let paths: Vec<&FieldPath> = ops.iter().flat_map(UpdateOp::paths).collect();
        check_conflicts(&paths)?;
        let touches_id = paths
            .iter()
            .any(|p| p.segments().first().is_some_and(|s| s == "_id"));
        Ok(Update {
            kind: Kind::Ops(ops),
            touches_id,
        })
    }

    /// Whether this is a replacement document rather than operators.
    pub fn is_replacement(&self) -> bool {
        matches!(self.kind, Kind::Replace(_))
    }

    /// The replacement document, if this is one.
    pub fn replacement_document(&self) -> Option<&Document> {
        match &self.kind {
            Kind::Replace(d) => Some(d),
            Kind::Ops(_) => None,
        }
    }

    /// The operators (empty for a replacement).
    pub fn ops(&self) -> &[UpdateOp] {
        match &self.kind {
            Kind::Replace(_) => &[],
            Kind::Ops(ops) => ops,
        }
    }

    /// The paths an operator update may change (`None` for a replacement,
    /// which may change every field). An index whose paths neither contain
    /// nor lie inside any of these keeps its entries.
    pub fn modified_paths(&self) -> Option<Vec<&FieldPath>> {
        match &self.kind {
            Kind::Replace(_) => None,
            Kind::Ops(ops) => Some(ops.iter().flat_map(UpdateOp::paths).collect()),
        }
    }

    /// The update as a [`Value`] in the language it was parsed from:
    /// operators in the order they first appear, each with its paths in
    /// order. [`from_value`](Self::from_value) reads it back.
    pub fn to_value(&self) -> Value {
        let ops = match &self.kind {
            Kind::Replace(d) => return Value::Object(d.clone()),
            Kind::Ops(ops) => ops,
        };
        let mut groups: Vec<(&'static str, Document)> = Vec::new();
        for op in ops {
            let name = op.operator();
            let (path, operand) = match op {
                UpdateOp::Set { path, value }
                | UpdateOp::SetOnInsert { path, value }
                | UpdateOp::Min { path, value }
                | UpdateOp::Max { path, value } => (path, value.clone()),
                UpdateOp::Unset { path } => (path, Value::Int(1)),
                UpdateOp::CurrentDate { path } => (path, Value::Bool(true)),
                UpdateOp::Inc { path, by } | UpdateOp::Mul { path, by } => (path, by.clone()),
                UpdateOp::Rename { from, to } => (from, Value::String(to.to_string())),
                UpdateOp::Push { path, items } | UpdateOp::AddToSet { path, items } => {
                    let v = match items.as_slice() {
                        [one] if !matches!(one, Value::Object(d) if d.keys().any(|k| k.starts_with('$'))) => {
                            one.clone()
                        }
                        _ => Value::Object(
                            Document::new().with("$each", Value::Array(items.clone())),
                        ),
                    };
                    (path, v)
                }
                UpdateOp::Pull { path, cond } => {
                    let v = match cond {
                        ElemMatch::Element(c) => match c.as_ref() {
                            Cond::Eq(v) if !matches!(v, Value::Object(_)) => v.clone(),
                            c => filter::cond_object(c),
                        },
                        ElemMatch::Document(f) => f.to_value(),
                    };
                    (path, v)
                }
            };
            match groups.iter_mut().find(|(n, _)| *n == name) {
                Some((_, d)) => {
                    d.insert(path.as_str(), operand);
                }
                None => groups.push((name, Document::new().with(path.as_str(), operand))),
            }
        }
        Value::Object(groups.into_iter().collect())
    }

    /// Applies the update to `doc`. On error `doc` is unchanged.
    /// `$setOnInsert` is ignored here.
    pub fn apply(&self, doc: &mut Document) -> DocResult<()> {
        self.apply_inner(doc, false)
    }

    /// The document an upsert inserts: `seed` (usually
    /// [`Filter::upsert_seed`](super::filter::Filter::upsert_seed)) with the
    /// operators applied, `$setOnInsert` included; for a replacement, the
    /// replacement with the seed's `_id` if it has none. A seed `_id` cannot
    /// be changed.
    pub fn apply_upsert(&self, seed: Document) -> DocResult<Document> {
        match &self.kind {
            Kind::Replace(_) => {
                let mut doc = Document::new();
                if let Some(id) = seed.get("_id") {
                    doc.insert("_id", id.clone());
                }
                self.apply_inner(&mut doc, true)?;
                Ok(doc)
            }
            Kind::Ops(_) => {
                let mut doc = seed;
                self.apply_inner(&mut doc, true)?;
                Ok(doc)
            }
        }
    }

    fn apply_inner(&self, doc: &mut Document, upsert: bool) -> DocResult<()> {
        match &self.kind {
            Kind::Replace(rep) => {
                let mut new = Document::with_capacity(rep.len() + 1);
                match (doc.get("_id"), rep.get("_id")) {
                    (Some(old), Some(id)) if old != id => return Err(DocumentError::ImmutableId),
                    (Some(old), None) => {
                        new.insert("_id", old.clone());
                    }
                    _ => {}
                }
                for (k, v) in rep.iter() {
                    new.insert(k, v.clone());
                }
                *doc = new;
                Ok(())
            }
            Kind::Ops(ops) => {
                if self.touches_id && doc.contains_key("_id") {
                    let mut work = doc.clone();
                    apply_ops(ops, &mut work, upsert)?;
                    if work.get("_id") != doc.get("_id") {
                        return Err(DocumentError::ImmutableId);
                    }
                    *doc = work;
                    Ok(())
                } else {
                    apply_ops(ops, doc, upsert)
                }
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Applying: phase 1 computes every change without touching the document
// (all errors happen here), phase 2 writes them. Paths do not conflict, so
// no change affects what another one read.

enum Change<'u> {
    Set(&'u FieldPath, Value),
    Unset(&'u FieldPath),
    Append(&'u FieldPath, Vec<Value>),
    /// Remove the elements at these ascending positions.
    Remove(&'u FieldPath, Vec<usize>),
}

/// What a path leads to in a document, for reading.
enum Loc<'a> {
    Found(&'a Value),
    /// Nothing there; a `$set` can create it.
    Missing,
    /// The value at segment `at` (index in the path) is of `kind` and cannot
    /// be followed by the next segment.
    Blocked {
        at: usize,
        kind: ValueKind,
    },
}

fn locate<'a>(doc: &'a Document, path: &FieldPath, objects_only: bool) -> DocResult<Loc<'a>> {
    let segs = path.segments();
    let Some((first, rest)) = segs.split_first() else {
        return Ok(Loc::Missing);
    };
    let Some(mut cur) = doc.get(first) else {
        return Ok(Loc::Missing);
    };
    for (i, seg) in rest.iter().enumerate() {
        cur = match cur {
            Value::Object(d) => match d.get(seg) {
                Some(v) => v,
                None => return Ok(Loc::Missing),
            },
            Value::Array(a) if !objects_only => match parse_index(seg) {
                Some(idx) => match a.get(idx) {
                    Some(v) => v,
                    None if idx > MAX_ARRAY_PAD => return Err(pad_err(path, idx)),
                    None => return Ok(Loc::Missing),
                },
                None => {
                    return Ok(Loc::Blocked {
                        at: i + 1,
                        kind: ValueKind::Array,
                    })
                }
            },
            other => {
                return Ok(Loc::Blocked {
                    at: i + 1,
                    kind: other.kind(),
                })
            }
        };
    }
    Ok(Loc::Found(cur))
}

fn pad_err(path: &FieldPath, idx: usize) -> DocumentError {
    invalid(format!(
        "{path}: array position {idx} is beyond the padding limit of {MAX_ARRAY_PAD}"
    ))
}

fn blocked_err(path: &FieldPath, at: usize, kind: ValueKind) -> DocumentError {
    DocumentError::NotTraversable {
        path: path.to_string(),
        field: path.segments().get(at).cloned().unwrap_or_default(),
        found: kind.name(),
    }
}

/// The current value for an operator that may create the field.
fn current<'a>(doc: &'a Document, path: &FieldPath) -> DocResult<Option<&'a Value>> {
    match locate(doc, path, false)? {
        Loc::Found(v) => Ok(Some(v)),
        Loc::Missing => Ok(None),
        Loc::Blocked { at, kind } => Err(blocked_err(path, at, kind)),
    }
}

fn field_type(
    op: &'static str,
    path: &FieldPath,
    expected: &'static str,
    v: &Value,
) -> DocumentError {
    DocumentError::FieldType {
        operator: op,
        path: path.to_string(),
        expected,
        found: v.kind().name(),
    }
}

fn arith(op: &'static str, path: &FieldPath, cur: &Value, by: &Value) -> DocResult<Value> {
    let mul = op == "$mul";
    let f = |a: f64, b: f64| if mul { a * b } else { a + b };
    Ok(match (cur, by) {
        (Value::Int(a), Value::Int(b)) => {
            let r = if mul {
                a.checked_mul(*b)
            } else {
                a.checked_add(*b)
            };
            Value::Int(r.ok_or_else(|| DocumentError::IntegerOverflow {
                operator: op,
                path: path.to_string(),
            })?)
        }
        (Value::Int(a), Value::Float(b)) => Value::Float(f(*a as f64, *b)),
        (Value::Float(a), Value::Int(b)) => Value::Float(f(*a, *b as f64)),
        (Value::Float(a), Value::Float(b)) => Value::Float(f(*a, *b)),
        (Value::Int(_) | Value::Float(_), other) => {
            return Err(operand_err(op, "a number", other));
        }
        (other, _) => return Err(field_type(op, path, "a number", other)),
    })
}

/// `$currentDate`'s operand for one field: a boolean (MongoDB reads any
/// boolean as "a date") or `{"$type": "date"}`; `{"$type": "timestamp"}`
/// asks for a type CairnDB does not have.
fn current_date_op(path: FieldPath, arg: Value) -> DocResult<UpdateOp> {
    match &arg {
        Value::Bool(_) => return Ok(UpdateOp::CurrentDate { path }),
        Value::Object(d) if d.len() == 1 => match d.get("$type") {
            Some(Value::String(t)) if t == "date" => return Ok(UpdateOp::CurrentDate { path }),
            Some(Value::String(t)) if t == "timestamp" => {
                return Err(invalid(format!(
                    "$currentDate: {path}: {{\"$type\": \"timestamp\"}} is not supported (CairnDB has no timestamp type; use true or {{\"$type\": \"date\"}})"
                )));
            }
            _ => {}
        },
        _ => {}
    }
    Err(operand_err(
        "$currentDate",
        "true or {\"$type\": \"date\"}",
        &arg,
    ))
}

fn contains(items: &[Value], v: &Value) -> bool {
    items.iter().any(|x| keys::compare(x, v) == Ordering::Equal)
}

fn compute<'u>(
    op: &'u UpdateOp,
    doc: &Document,
    upsert: bool,
    now: &Value,
    out: &mut Vec<Change<'u>>,
) -> DocResult<()> {
    match op {
        UpdateOp::CurrentDate { path } => {
            current(doc, path)?;
            out.push(Change::Set(path, now.clone()));
        }
        UpdateOp::Set { path, value } => {
            current(doc, path)?;
            out.push(Change::Set(path, value.clone()));
        }
        UpdateOp::SetOnInsert { path, value } => {
            if upsert {
                current(doc, path)?;
                out.push(Change::Set(path, value.clone()));
            }
        }
        UpdateOp::Unset { path } => out.push(Change::Unset(path)),
        UpdateOp::Inc { path, by } | UpdateOp::Mul { path, by } => {
            let new = match current(doc, path)? {
                Some(cur) => arith(op.operator(), path, cur, by)?,
                None if matches!(op, UpdateOp::Inc { .. }) => by.clone(),
                None => match by {
                    Value::Int(_) => Value::Int(0),
                    _ => Value::Float(0.0),
                },
            };
            out.push(Change::Set(path, new));
        }
        UpdateOp::Min { path, value } | UpdateOp::Max { path, value } => {
            let want = if matches!(op, UpdateOp::Min { .. }) {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            let replace = match current(doc, path)? {
                Some(cur) => keys::compare(value, cur) == want,
                None => true,
            };
            if replace {
                out.push(Change::Set(path, value.clone()));
            }
        }
        UpdateOp::Rename { from, to } => {
            let v = match locate(doc, from, true)? {
                Loc::Found(v) => v,
                Loc::Missing => return Ok(()),
                Loc::Blocked {
                    kind: ValueKind::Array,
                    at,
                } => return Err(blocked_err(from, at, ValueKind::Array)),
                // Through a scalar: the source does not exist.
                Loc::Blocked { .. } => return Ok(()),
            };
            if let Loc::Blocked { at, kind } = locate(doc, to, true)? {
                return Err(blocked_err(to, at, kind));
            }
            out.push(Change::Unset(from));
            out.push(Change::Set(to, v.clone()));
        }
        UpdateOp::Push { path, items } => match current(doc, path)? {
            None => out.push(Change::Set(path, Value::Array(items.clone()))),
            Some(Value::Array(_)) => out.push(Change::Append(path, items.clone())),
            Some(other) => return Err(field_type("$push", path, "an array", other)),
        },
        UpdateOp::AddToSet { path, items } => {
            let existing: &[Value] = match current(doc, path)? {
                None => &[],
                Some(Value::Array(a)) => a,
                Some(other) => return Err(field_type("$addToSet", path, "an array", other)),
            };
            let mut new: Vec<Value> = Vec::new();
            for it in items {
                if !contains(existing, it) && !contains(&new, it) {
                    new.push(it.clone());
                }
            }
            match current(doc, path)? {
                None => out.push(Change::Set(path, Value::Array(new))),
                Some(_) if !new.is_empty() => out.push(Change::Append(path, new)),
                Some(_) => {}
            }
        }
        UpdateOp::Pull { path, cond } => match current(doc, path)? {
            None => {}
            Some(Value::Array(a)) => {
                let idx: Vec<usize> = a
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| filter::elem_matches_value(cond, e))
                    .map(|(i, _)| i)
                    .collect();
                if !idx.is_empty() {
                    out.push(Change::Remove(path, idx));
                }
            }
            Some(other) => return Err(field_type("$pull", path, "an array", other)),
        },
    }
    Ok(())
}

/// MongoDB's order for applying changes: segment by segment, decimal
/// names numerically and before other names, which compare as strings.
fn path_order(a: &FieldPath, b: &FieldPath) -> Ordering {
    for (x, y) in a.segments().iter().zip(b.segments()) {
        let o = match (parse_index(x), parse_index(y)) {
            (Some(i), Some(j)) => i.cmp(&j),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => x.cmp(y),
        };
        if o != Ordering::Equal {
            return o;
        }
    }
    a.segments().len().cmp(&b.segments().len())
}

impl Change<'_> {
    fn path(&self) -> &FieldPath {
        match self {
            Change::Set(p, _) | Change::Unset(p) | Change::Append(p, _) | Change::Remove(p, _) => p,
        }
    }
}

fn apply_ops(ops: &[UpdateOp], doc: &mut Document, upsert: bool) -> DocResult<()> {
    let mut changes = Vec::with_capacity(ops.len());
    // `$currentDate`: one time for every field of the update, as MongoDB.
    let now = Value::date_now();
    for op in ops {
        compute(op, doc, upsert, &now, &mut changes)?;
    }
    // In path order, a change through a position past an array's end is
    // made after every change through lower positions: it never meets a
    // null that padding for a higher position put there. New fields are
    // added in this order too (as MongoDB 5 does).
    changes.sort_by(|a, b| path_order(a.path(), b.path()));
    for c in changes {
        match c {
            Change::Set(path, v) => set_path(doc, path.segments(), v, path)?,
            Change::Unset(path) => unset_path(doc, path.segments()),
            Change::Append(path, items) => match get_mut_path(doc, path.segments()) {
                Some(Value::Array(a)) => a.extend(items),
                // Phase 1 saw an array here.
                _ => return Err(invalid(format!("{path}: the array to append to is gone"))),
            },
            Change::Remove(path, idx) => {
                if let Some(Value::Array(a)) = get_mut_path(doc, path.segments()) {
                    let mut i = 0;
                    let mut next = idx.iter().peekable();
                    a.retain(|_| {
                        let drop = next.peek() == Some(&&i);
                        if drop {
                            next.next();
                        }
                        i += 1;
                        !drop
                    });
                }
            }
        }
    }
    Ok(())
}

/// Nested objects holding `value` at `segs`.
fn nest(segs: &[String], value: Value) -> Value {
    segs.iter().rev().fold(value, |v, s| {
        Value::Object(Document::new().with(s.as_str(), v))
    })
}

fn set_path(doc: &mut Document, segs: &[String], value: Value, full: &FieldPath) -> DocResult<()> {
    let Some((first, rest)) = segs.split_first() else {
        return Err(invalid("empty path"));
    };
    if rest.is_empty() {
        doc.insert(first.as_str(), value);
        return Ok(());
    }
    match doc.get_mut(first) {
        None => {
            doc.insert(first.as_str(), nest(rest, value));
            Ok(())
        }
        Some(v) => set_in_value(v, rest, value, full),
    }
}

fn set_in_value(cur: &mut Value, segs: &[String], value: Value, full: &FieldPath) -> DocResult<()> {
    let Some((seg, rest)) = segs.split_first() else {
        *cur = value;
        return Ok(());
    };
    let blocked = |kind: ValueKind| DocumentError::NotTraversable {
        path: full.to_string(),
        field: seg.clone(),
        found: kind.name(),
    };
    match cur {
        Value::Object(d) => set_path(d, segs, value, full),
        Value::Array(a) => {
            let Some(i) = parse_index(seg) else {
                return Err(blocked(ValueKind::Array));
            };
            if i >= a.len() {
                if i > MAX_ARRAY_PAD {
                    return Err(pad_err(full, i));
                }
                a.resize(i, Value::Null);
                a.push(nest(rest, value));
                return Ok(());
            }
            match a.get_mut(i) {
                Some(slot) => set_in_value(slot, rest, value, full),
                None => Err(blocked(ValueKind::Array)),
            }
        }
        other => Err(blocked(other.kind())),
    }
}

fn unset_path(doc: &mut Document, segs: &[String]) {
    let Some((first, rest)) = segs.split_first() else {
        return;
    };
    if rest.is_empty() {
        doc.remove(first);
    } else if let Some(v) = doc.get_mut(first) {
        unset_in_value(v, rest);
    }
}

fn unset_in_value(cur: &mut Value, segs: &[String]) {
    let Some((seg, rest)) = segs.split_first() else {
        return;
    };
    match cur {
        Value::Object(d) => unset_path(d, segs),
        Value::Array(a) => {
            if let Some(slot) = parse_index(seg).and_then(|i| a.get_mut(i)) {
                if rest.is_empty() {
                    *slot = Value::Null;
                } else {
                    unset_in_value(slot, rest);
                }
            }
        }
        _ => {}
    }
}

fn get_mut_path<'a>(doc: &'a mut Document, segs: &[String]) -> Option<&'a mut Value> {
    let (first, rest) = segs.split_first()?;
    let mut cur = doc.get_mut(first)?;
    for seg in rest {
        cur = match cur {
            Value::Object(d) => d.get_mut(seg)?,
            Value::Array(a) => a.get_mut(parse_index(seg)?)?,
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::document::filter::Filter;
    use crate::document::gen;

    fn d(j: serde_json::Value) -> Document {
        match Value::from_json(j).unwrap() {
            Value::Object(d) => d,
            _ => panic!("not an object"),
        }
    }

    fn js(doc: &Document) -> serde_json::Value {
        Value::Object(doc.clone()).to_json()
    }

    /// Applies `u` (from text, keeping order) to `doc`; the JSON of the result.
    fn run(doc: serde_json::Value, u: &str) -> DocResult<serde_json::Value> {
        let u = Update::parse_str(u)?;
        let before = d(doc);
        let mut after = before.clone();
        let r = u.apply(&mut after);
        if r.is_err() {
            assert_eq!(after, before, "a failed update changed the document");
        }
        r.map(|()| js(&after))
    }

    #[test]
    fn set_unset_and_paths() {
        assert_eq!(
            run(
                json!({"_id": 1, "a": 1}),
                r#"{"$set": {"a": 2, "b.c.d": "x"}}"#
            )
            .unwrap(),
            json!({"_id": 1, "a": 2, "b": {"c": {"d": "x"}}})
        );
        assert_eq!(
            run(json!({"a": [1, 2]}), r#"{"$set": {"a.1": 9, "a.4": 5}}"#).unwrap(),
            json!({"a": [1, 9, null, null, 5]})
        );
        assert_eq!(
            run(
                json!({"a": [{"b": 1}]}),
                r#"{"$set": {"a.0.b": 2, "a.2.c": 3}}"#
            )
            .unwrap(),
            json!({"a": [{"b": 2}, null, {"c": 3}]})
        );
        assert_eq!(
            run(json!({}), r#"{"$set": {"a.0": 1}}"#).unwrap(),
            json!({"a": {"0": 1}})
        );
        assert!(matches!(
            run(json!({"a": 5}), r#"{"$set": {"a.b": 1}}"#),
            Err(DocumentError::NotTraversable { field, found: "int", .. }) if field == "b"
        ));
        assert!(matches!(
            run(json!({"a": null}), r#"{"$set": {"a.b": 1}}"#),
            Err(DocumentError::NotTraversable { found: "null", .. })
        ));
        assert!(matches!(
            run(json!({"a": [1]}), r#"{"$set": {"a.b": 1}}"#),
            Err(DocumentError::NotTraversable { found: "array", .. })
        ));
        assert!(matches!(
            run(json!({"a": [1]}), r#"{"$set": {"a.0.b": 1}}"#),
            Err(DocumentError::NotTraversable { found: "int", .. })
        ));
        assert!(matches!(
            run(json!({"a": []}), r#"{"$set": {"a.1500001": 1}}"#),
            Err(DocumentError::InvalidUpdate { .. })
        ));
        assert_eq!(
            run(
                json!({"a": 1, "b": {"c": 1, "d": 2}, "e": [1, 2]}),
                r#"{"$unset": {"a": "", "b.c": 1, "e.0": true, "x.y": 1, "e.5": 1}}"#
            )
            .unwrap(),
            json!({"b": {"d": 2}, "e": [null, 2]})
        );
        assert_eq!(
            run(json!({"a": 5}), r#"{"$unset": {"a.b": 1}}"#).unwrap(),
            json!({"a": 5})
        );
        // Field order: an existing field keeps its place, new ones go last
        // in path order (numbers first, numerically), as in MongoDB 5.
        let u =
            Update::parse_str(r#"{"$set": {"z": 1, "a": 2, "b": 3, "10": 0, "9": 0}}"#).unwrap();
        let mut doc = Document::new().with("b", 1);
        u.apply(&mut doc).unwrap();
        assert_eq!(doc.keys().collect::<Vec<_>>(), ["b", "9", "10", "a", "z"]);
        // Positions past the end: lower ones first, whatever the op order.
        assert_eq!(
            run(
                json!({"a": []}),
                r#"{"$inc": {"a.10": 1}, "$set": {"a.9.x": 1, "a.0": 0}}"#
            )
            .unwrap(),
            json!({"a": [0, null, null, null, null, null, null, null, null, {"x": 1}, 1]})
        );
    }

    #[test]
    fn arithmetic() {
        assert_eq!(
            run(
                json!({"a": 1, "b": 1.5}),
                r#"{"$inc": {"a": 2, "b": 1, "c": 3, "d.e": 0.5}}"#
            )
            .unwrap(),
            json!({"a": 3, "b": 2.5, "c": 3, "d": {"e": 0.5}})
        );
        assert_eq!(
            run(json!({"a": 1}), r#"{"$inc": {"a": 0.5}}"#).unwrap(),
            json!({"a": 1.5})
        );
        assert_eq!(
            run(
                json!({"a": 3, "b": 2.0}),
                r#"{"$mul": {"a": 4, "b": 2, "c": 5, "d": 1.5}}"#
            )
            .unwrap(),
            json!({"a": 12, "b": 4.0, "c": 0, "d": 0.0})
        );
        assert!(matches!(
            run(json!({"a": i64::MAX}), r#"{"$inc": {"a": 1}}"#),
            Err(DocumentError::IntegerOverflow {
                operator: "$inc",
                ..
            })
        ));
        assert!(matches!(
            run(json!({"a": i64::MIN}), r#"{"$mul": {"a": -1}}"#),
            Err(DocumentError::IntegerOverflow {
                operator: "$mul",
                ..
            })
        ));
        assert!(matches!(
            run(json!({"a": "x"}), r#"{"$inc": {"a": 1}}"#),
            Err(DocumentError::FieldType {
                operator: "$inc",
                found: "string",
                ..
            })
        ));
        assert!(matches!(
            run(json!({"a": null}), r#"{"$mul": {"a": 1}}"#),
            Err(DocumentError::FieldType {
                operator: "$mul",
                found: "null",
                ..
            })
        ));
        assert!(matches!(
            Update::parse(json!({"$inc": {"a": "1"}})),
            Err(DocumentError::InvalidOperand { operator, expected: "a number", .. }) if operator == "$inc"
        ));
        assert_eq!(
            run(
                json!({"a": 5, "b": 5, "c": "x"}),
                r#"{"$min": {"a": 3, "b": 7, "c": 1, "d": 0}}"#
            )
            .unwrap(),
            json!({"a": 3, "b": 5, "c": 1, "d": 0})
        );
        assert_eq!(
            run(
                json!({"a": 5, "b": 5.0}),
                r#"{"$max": {"a": 7, "b": 5, "c": "z"}}"#
            )
            .unwrap(),
            json!({"a": 7, "b": 5.0, "c": "z"})
        );
    }

    #[test]
    fn arrays() {
        assert_eq!(
            run(
                json!({"a": [1]}),
                r#"{"$push": {"a": 2, "b": [3], "c": {"$each": [4, 5]}}}"#
            )
            .unwrap(),
            json!({"a": [1, 2], "b": [[3]], "c": [4, 5]})
        );
        assert_eq!(
            run(
                json!({"a": [1, 2]}),
                r#"{"$addToSet": {"a": 2.0, "b": 1, "c": {"$each": [1, 1, 2]}}}"#
            )
            .unwrap(),
            json!({"a": [1, 2], "b": [1], "c": [1, 2]})
        );
        assert_eq!(
            run(
                json!({"a": [1]}),
                r#"{"$addToSet": {"a": {"$each": [3, 1, 3]}}}"#
            )
            .unwrap(),
            json!({"a": [1, 3]})
        );
        assert!(matches!(
            run(json!({"a": 1}), r#"{"$push": {"a": 2}}"#),
            Err(DocumentError::FieldType {
                operator: "$push",
                expected: "an array",
                ..
            })
        ));
        assert!(matches!(
            run(json!({"a": 1}), r#"{"$addToSet": {"a": 2}}"#),
            Err(DocumentError::FieldType {
                operator: "$addToSet",
                ..
            })
        ));
        assert!(matches!(
            Update::parse(json!({"$push": {"a": {"$each": [1], "$slice": 2}}})),
            Err(DocumentError::UnknownOperator { operator, .. }) if operator == "$slice"
        ));
        assert!(matches!(
            Update::parse(json!({"$push": {"a": {"$each": 1}}})),
            Err(DocumentError::InvalidOperand { .. })
        ));
        assert_eq!(
            run(
                json!({"a": [1, 2.0, 3, [2], "2"]}),
                r#"{"$pull": {"a": 2}}"#
            )
            .unwrap(),
            json!({"a": [1, 3, [2], "2"]})
        );
        assert_eq!(
            run(
                json!({"a": [1, 5, 7, 9]}),
                r#"{"$pull": {"a": {"$gte": 6}}}"#
            )
            .unwrap(),
            json!({"a": [1, 5]})
        );
        assert_eq!(
            run(
                json!({"a": [{"s": 1, "t": 2}, {"s": 2}, 3]}),
                r#"{"$pull": {"a": {"s": 1}}}"#
            )
            .unwrap(),
            json!({"a": [{"s": 2}, 3]})
        );
        assert_eq!(
            run(json!({"a": [[1, 2], [1]]}), r#"{"$pull": {"a": [1, 2]}}"#).unwrap(),
            json!({"a": [[1]]})
        );
        assert_eq!(
            run(json!({"b": 1}), r#"{"$pull": {"a": 1}}"#).unwrap(),
            json!({"b": 1})
        );
        assert!(matches!(
            run(json!({"a": 1}), r#"{"$pull": {"a": 1}}"#),
            Err(DocumentError::FieldType {
                operator: "$pull",
                ..
            })
        ));
    }

    #[test]
    fn rename() {
        assert_eq!(
            run(
                json!({"a": 1, "b": {"c": 2}}),
                r#"{"$rename": {"a": "x.y", "b.c": "z"}}"#
            )
            .unwrap(),
            json!({"b": {}, "x": {"y": 1}, "z": 2})
        );
        assert_eq!(
            run(json!({"a": 1, "b": 2}), r#"{"$rename": {"a": "b"}}"#).unwrap(),
            json!({"b": 1})
        );
        assert_eq!(
            run(json!({"b": 2}), r#"{"$rename": {"a": "c"}}"#).unwrap(),
            json!({"b": 2})
        );
        assert!(matches!(
            run(json!({"a": [{"b": 1}]}), r#"{"$rename": {"a.0.b": "c"}}"#),
            Err(DocumentError::NotTraversable { found: "array", .. })
        ));
        assert!(matches!(
            run(json!({"a": 1, "c": 5}), r#"{"$rename": {"a": "c.d"}}"#),
            Err(DocumentError::NotTraversable { found: "int", .. })
        ));
        assert!(matches!(
            Update::parse(json!({"$rename": {"a": "a"}})),
            Err(DocumentError::UpdateConflict { .. })
        ));
        assert!(matches!(
            Update::parse(json!({"$rename": {"a": 5}})),
            Err(DocumentError::InvalidOperand { .. })
        ));
    }

    #[test]
    fn structure_errors_and_conflicts() {
        let e = |j| Update::parse(j).unwrap_err();
        assert!(
            matches!(e(json!({"$foo": {"a": 1}})), DocumentError::UnknownOperator { operator, .. } if operator == "$foo")
        );
        assert!(matches!(
            e(json!({"$set": {"a": 1}, "b": 2})),
            DocumentError::InvalidUpdate { .. }
        ));
        assert!(matches!(
            e(json!({"$set": 5})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(e(json!([1])), DocumentError::InvalidUpdate { .. }));
        assert!(matches!(
            e(json!({"$set": {"a..b": 1}})),
            DocumentError::InvalidPath { .. }
        ));
        assert!(matches!(
            e(json!({"$set": {"a": 1}, "$inc": {"a.b": 1}})),
            DocumentError::UpdateConflict { .. }
        ));
        assert!(matches!(
            e(json!({"$set": {"a.b": 1}, "$unset": {"a": 1}})),
            DocumentError::UpdateConflict { .. }
        ));
        assert!(matches!(
            e(json!({"$set": {"a": 1}, "$setOnInsert": {"a": 1}})),
            DocumentError::UpdateConflict { .. }
        ));
        assert!(matches!(
            e(json!({"$rename": {"a": "b"}, "$set": {"b.c": 1}})),
            DocumentError::UpdateConflict { .. }
        ));
        assert!(Update::parse(json!({"$set": {"a.b": 1, "a.c": 1, "ab": 1}})).is_ok());
        assert!(matches!(
            Update::parse_str(r#"{"$set": {"a": 1}, "$set": {"b": 1}}"#),
            Err(DocumentError::InvalidJson { .. })
        ));
        assert!(matches!(
            Update::parse_str(r#"{"$set": "#),
            Err(DocumentError::MalformedJson { .. })
        ));
        assert!(Update::parse(json!({"$set": {}})).unwrap().ops().is_empty());
    }

    #[test]
    fn id_is_immutable() {
        assert!(matches!(
            run(json!({"_id": 1}), r#"{"$set": {"_id": 2}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert!(matches!(
            run(json!({"_id": 1}), r#"{"$set": {"_id": 1.0}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert!(matches!(
            run(json!({"_id": 1}), r#"{"$unset": {"_id": 1}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert!(matches!(
            run(json!({"_id": 1}), r#"{"$inc": {"_id": 1}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert!(matches!(
            run(json!({"_id": 1, "a": 2}), r#"{"$rename": {"a": "_id"}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert_eq!(
            run(json!({"_id": 1, "a": 1}), r#"{"$rename": {"a": "_id"}}"#).unwrap(),
            json!({"_id": 1})
        );
        assert!(matches!(
            run(json!({"_id": {"x": 1}}), r#"{"$set": {"_id.x": 2}}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert_eq!(
            run(json!({"_id": 1, "a": 1}), r#"{"$set": {"_id": 1, "a": 2}}"#).unwrap(),
            json!({"_id": 1, "a": 2})
        );
        assert_eq!(
            run(json!({"_id": 1}), r#"{"$inc": {"_id": 0}}"#).unwrap(),
            json!({"_id": 1})
        );
        assert_eq!(
            run(json!({"a": 1}), r#"{"$set": {"_id": 7}}"#).unwrap(),
            json!({"a": 1, "_id": 7})
        );
        // Replacement keeps the _id, first.
        let out = run(json!({"a": 1, "_id": 3}), r#"{"b": 2}"#).unwrap();
        assert_eq!(out, json!({"_id": 3, "b": 2}));
        assert_eq!(
            run(json!({"_id": 3}), r#"{"_id": 3, "b": 2}"#).unwrap(),
            json!({"_id": 3, "b": 2})
        );
        assert!(matches!(
            run(json!({"_id": 3}), r#"{"_id": 4}"#),
            Err(DocumentError::ImmutableId)
        ));
        assert_eq!(
            run(json!({"_id": 3, "a": 1}), "{}").unwrap(),
            json!({"_id": 3})
        );
        let u = Update::parse(json!({"b": 2})).unwrap();
        assert!(u.is_replacement());
        assert!(u.modified_paths().is_none());
        assert!(matches!(
            Update::replacement(Document::new().with("$x", 1)),
            Err(DocumentError::InvalidUpdate { .. })
        ));
    }

    #[test]
    fn upserts() {
        let seed = Filter::parse(json!({"_id": 5, "a.b": 1, "c": {"$gt": 3}}))
            .unwrap()
            .upsert_seed()
            .unwrap();
        let u = Update::parse(
            json!({"$set": {"x": 1}, "$setOnInsert": {"created": true}, "$inc": {"n": 1}}),
        )
        .unwrap();
        assert_eq!(
            js(&u.apply_upsert(seed.clone()).unwrap()),
            json!({"_id": 5, "a": {"b": 1}, "x": 1, "created": true, "n": 1})
        );
        // $setOnInsert does nothing on an existing document.
        let mut existing = d(json!({"_id": 5}));
        u.apply(&mut existing).unwrap();
        assert_eq!(js(&existing), json!({"_id": 5, "x": 1, "n": 1}));
        let rep = Update::parse(json!({"y": 2})).unwrap();
        assert_eq!(
            js(&rep.apply_upsert(seed.clone()).unwrap()),
            json!({"_id": 5, "y": 2})
        );
        assert!(matches!(
            Update::parse(json!({"_id": 6}))
                .unwrap()
                .apply_upsert(seed.clone()),
            Err(DocumentError::ImmutableId)
        ));
        assert!(matches!(
            Update::parse(json!({"$set": {"_id": 6}}))
                .unwrap()
                .apply_upsert(seed),
            Err(DocumentError::ImmutableId)
        ));
        let no_id = Filter::parse(json!({"a": 1}))
            .unwrap()
            .upsert_seed()
            .unwrap();
        assert_eq!(
            js(&Update::parse(json!({"$set": {"_id": 6}}))
                .unwrap()
                .apply_upsert(no_id)
                .unwrap()),
            json!({"a": 1, "_id": 6})
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn apply_is_all_or_nothing(doc in gen::document(), u in gen::update()) {
            let Value::Object(before) = doc else { return Ok(()) };
            let mut after = before.clone();
            match u.apply(&mut after) {
                Err(_) => prop_assert_eq!(&after, &before),
                Ok(()) => {
                    // The result encodes and keeps the _id.
                    prop_assert!(crate::document::to_vec(&after).is_ok());
                    prop_assert_eq!(after.get("_id"), before.get("_id"));
                }
            }
        }

        #[test]
        fn set_then_read_back(doc in gen::document(), path in gen::path(), v in gen::value()) {
            let Value::Object(mut doc) = doc else { return Ok(()) };
            prop_assume!(path.segments()[0] != "_id");
            let u = Update::from_ops(vec![UpdateOp::Set { path: path.clone(), value: v.clone() }]).unwrap();
            if u.apply(&mut doc).is_ok() {
                let root = Value::Object(doc);
                prop_assert_eq!(root.get_path(path.as_str()), Some(&v));
                let f = Filter::Field { path: path.clone(), cond: Cond::Eq(v.clone()) };
                prop_assert!(f.matches_value(&root).unwrap());
                let unset = Update::from_ops(vec![UpdateOp::Unset { path: path.clone() }]).unwrap();
                let Value::Object(mut d2) = root else { unreachable!() };
                unset.apply(&mut d2).unwrap();
                let root = Value::Object(d2);
                let gone = root.get_path(path.as_str());
                prop_assert!(gone.is_none() || gone == Some(&Value::Null));
            }
        }

        #[test]
        fn printed_updates_parse_back(u in gen::update()) {
            prop_assert_eq!(Update::from_value(u.to_value()).unwrap(), u);
        }
    }
}
