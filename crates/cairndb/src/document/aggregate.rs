//! The aggregation pipeline ([`Collection::aggregate`]) and `distinct`
//! ([`Collection::distinct`]): a MongoDB-compatible subset.
//!
//! A pipeline is a JSON array of stages, each an object with one key:
//!
//! | stage | argument |
//! |---|---|
//! | `$match` | a filter ([`filter`](super::filter)) |
//! | `$group` | `{"_id": <expr>, "<field>": {"<accumulator>": <expr>}, ...}` |
//! | `$sort` | a sort spec (`{"total": -1, "_id": 1}`) |
//! | `$project` | `{"f": 1, "g": 0, "h": <expr>, "a.b": 1, "k": {"x": 1}}` |
//! | `$addFields` / `$set` | `{"<path>": <expr>, ...}` |
//! | `$unset` | a field path or an array of them |
//! | `$limit` | a positive integer |
//! | `$skip` | a non-negative integer |
//! | `$unwind` | `"$path"` or `{"path": "$path", "includeArrayIndex": "i", "preserveNullAndEmptyArrays": true}` |
//! | `$count` | the output field name |
//! | `$lookup` | `{"from": "coll", "localField": "a", "foreignField": "b", "as": "out"}` |
//! | `$replaceRoot` / `$replaceWith` | `{"newRoot": <expr>}` / `<expr>` (an object) |
//! | `$sortByCount` | `<expr>`: `$group` by it with a `count`, sorted by count descending |
//!
//! Accumulators: `$sum`, `$avg`, `$min`, `$max`, `$push`, `$addToSet`,
//! `$first`, `$last`, `$count` (`{}`).
//!
//! Expressions: `"$a.b"` (a field path; through an array it gives the
//! array of the values found), `"$$ROOT"` / `"$$ROOT.a"` (also
//! `$$CURRENT`), literals (`{"$literal": v}` for a string starting with
//! `$`), objects and arrays of expressions, and the operators `$add`,
//! `$subtract`, `$multiply`, `$divide`, `$concat`, `$toLower`,
//! `$toUpper`, `$cond`, `$ifNull`, `$eq`, `$ne`, `$gt`, `$gte`, `$lt`,
//! `$lte`, `$cmp`, `$and`, `$or`, `$not`, `$size`, `$arrayElemAt`, and
//! `{"$meta": "textScore"}`.
//!
//! # Text scores
//! A pipeline whose first stage is a `$match` with `$text` carries each
//! document's score (MongoDB's text score metadata) through the stages
//! that pass documents on (`$match`, `$sort`, `$skip`, `$limit`,
//! `$project`, `$addFields`, `$unset`, `$unwind`, `$lookup`,
//! `$replaceRoot`); `$group`, `$sortByCount` and `$count` make new
//! documents without one. `{"$meta": "textScore"}` reads it in any
//! expression, and as a `$sort` key sorts by it, highest first; in
//! `$project` it adds a field without making the projection an inclusion
//! (`{"s": {"$meta": "textScore"}}` keeps every field). Where no document
//! can have a score, the pipeline is refused with MongoDB's "query
//! requires text score metadata, but it is not available".
//!
//! # Semantics (as MongoDB's, with these choices)
//! - Comparisons (`$eq`, `$min`, `$sort`, `$group` keys) use the engine's
//!   value order ([`keys::compare`]); in expressions a missing value sorts
//!   before null, so `{"$eq": ["$missing", null]}` is false.
//! - `$group` output is in the order each group was first seen (MongoDB
//!   leaves it unspecified); group keys are equal when they compare equal
//!   (`1` and `1.0` are one group). A missing `_id` expression is `null`.
//!   Nothing in, nothing out (also for `$count`).
//! - `$sum` adds numbers only (others are ignored), giving an integer while
//!   every term is an integer and the total fits, else a float; `$avg`
//!   ignores non-numbers and gives a float or null; `$min` / `$max` ignore
//!   null and missing; `$push` / `$addToSet` skip missing values;
//!   `$addToSet` keeps the first-seen order; `$first` / `$last` give null
//!   for a missing value.
//! - `$project` keeps included fields in the document's order, then adds
//!   computed fields in the spec's order; `_id` is kept unless excluded.
//!   `$addFields` through a value that is not an object replaces it with
//!   an object (MongoDB applies the path to each element of an array).
//! - `$unwind` of a value that is not an array keeps the document as is;
//!   null, missing and `[]` drop it unless `preserveNullAndEmptyArrays`
//!   (then `[]` becomes a missing field).
//! - `$lookup` matches a local value (each element of a local array; a
//!   missing local value is null) with the foreign documents whose field
//!   (each element, null for missing) compares equal. The foreign
//!   collection is read once, from the same snapshot, into an in-memory
//!   hash (counted against the memory bound); the pipeline form
//!   (`let`/`pipeline`) is not supported.
//!
//! # Execution
//! A leading `$match` (several are merged), then a `$sort`, then `$skip`
//! and `$limit` run as one `find` through the query planner, so indexes
//! are used (see [`Collection::explain_aggregate`]). The other stages run
//! over decoded documents one at a time; `$group`, `$sort`, `$count` and
//! `$sortByCount` wait for their whole input. What `$group`, `$sort` and
//! `$lookup` hold is bounded by [`AggregateOptions::memory_limit`]
//! ([`DEFAULT_MEMORY_LIMIT`], 100 MiB, as MongoDB's per-stage limit);
//! beyond it a stage fails with [`DocumentError::PipelineMemoryLimit`]
//! (nothing spills to disk). A `$limit` reached stops reading the input.
//!
//! Errors name the stage's index and the operator:
//! [`DocumentError::Pipeline`] for an invalid pipeline or a failed
//! expression.

pub(crate) mod expr;

use std::collections::{HashMap, HashSet, VecDeque};

use serde::de::DeserializeOwned;
use serde::Serialize;

use self::expr::{Cx, Expr, ExprError};
use super::codec;
use super::collection::{check_collection_name, meta_in, Collection, TxnCollection};
use super::cursor::Results;
use super::error::{DocResult, DocumentError};
use super::filter::{value_from_text, Filter};
use super::keys::{self, SortOrder};
use super::path::{self, FieldPath, LookupMode};
use super::planner::Snapshot;
use super::query::{
    in_collection, run_query_values, run_query_values_in_txn, text_score, Explain, FindOptions,
    IntoFilter,
};
use super::sort::SortSpec;
use super::value::{Document, Value};
use crate::seam::{SeamRead, SeamTable, SeamWrite};
use crate::table::TableDefinition;

/// The default memory bound of a blocking stage: 100 MiB.
pub const DEFAULT_MEMORY_LIMIT: usize = 100 << 20;

/// Options of [`Collection::aggregate_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AggregateOptions {
    /// The most bytes (of values, estimated by their encoded size) that
    /// one `$group`, `$sort` or `$lookup` stage may hold.
    pub memory_limit: usize,
}

impl Default for AggregateOptions {
    fn default() -> Self {
        AggregateOptions {
            memory_limit: DEFAULT_MEMORY_LIMIT,
        }
    }
}

// ---------------------------------------------------------------------------
// Parsed pipeline

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AccOp {
    Sum,
    Avg,
    Min,
    Max,
    Push,
    AddToSet,
    First,
    Last,
    Count,
}

#[derive(Debug, Clone, PartialEq)]
enum ProjNode {
    Include,
    Exclude,
    Compute(Expr),
    Sub(Vec<(String, ProjNode)>),
}

#[derive(Debug, Clone, PartialEq)]
enum Stage {
    Match(Filter),
    Group {
        id: Expr,
        accs: Vec<(String, AccOp, Expr)>,
    },
    Sort(SortSpec),
    /// An inclusion (`true`) or exclusion projection.
    Project(Vec<(String, ProjNode)>, bool),
    AddFields(Vec<(Vec<String>, Expr)>),
    Limit(u64),
    Skip(u64),
    Unwind {
        path: Vec<String>,
        index: Option<String>,
        preserve: bool,
    },
    Count(String),
    Lookup {
        from: String,
        local: FieldPath,
        foreign: FieldPath,
        as_: Vec<String>,
    },
    ReplaceRoot(Expr),
    SortByCount(Expr),
}

impl Stage {
    fn name(&self) -> &'static str {
        match self {
            Stage::Match(_) => "$match",
            Stage::Group { .. } => "$group",
            Stage::Sort(_) => "$sort",
            Stage::Project(..) => "$project",
            Stage::AddFields(_) => "$addFields",
            Stage::Limit(_) => "$limit",
            Stage::Skip(_) => "$skip",
            Stage::Unwind { .. } => "$unwind",
            Stage::Count(_) => "$count",
            Stage::Lookup { .. } => "$lookup",
            Stage::ReplaceRoot(_) => "$replaceRoot",
            Stage::SortByCount(_) => "$sortByCount",
        }
    }
}

/// A parsed aggregation pipeline (see the module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Pipeline {
    stages: Vec<Stage>,
}

fn perr(stage: usize, operator: &str, reason: impl Into<String>) -> DocumentError {
    DocumentError::Pipeline {
        stage,
        operator: operator.to_string(),
        reason: reason.into(),
    }
}

fn from_expr(stage: usize, e: ExprError) -> DocumentError {
    DocumentError::Pipeline {
        stage,
        operator: e.operator,
        reason: e.reason,
    }
}

/// A non-negative integer argument (a float with no fraction is accepted).
fn count_arg(stage: usize, op: &str, v: &Value) -> DocResult<u64> {
    match *v {
        Value::Int(i) if i >= 0 => Ok(i as u64),
        Value::Float(f) if f >= 0.0 && f.fract() == 0.0 && f < 9.0e18 => Ok(f as u64),
        _ => Err(perr(
            stage,
            op,
            format!("needs a non-negative integer, found {}", v.to_json()),
        )),
    }
}

/// A field path written as `"$a.b"` (for `$unwind`).
fn dollar_path(stage: usize, op: &str, v: &Value) -> DocResult<Vec<String>> {
    match v {
        Value::String(s) if s.starts_with('$') && !s.starts_with("$$") => {
            Ok(FieldPath::parse(&s[1..])
                .map_err(|e| perr(stage, op, e.to_string()))?
                .segments()
                .to_vec())
        }
        other => Err(perr(
            stage,
            op,
            format!(
                "the path must be a string starting with '$', found {}",
                other.to_json()
            ),
        )),
    }
}

fn plain_path(stage: usize, op: &str, what: &str, v: Option<&Value>) -> DocResult<FieldPath> {
    match v {
        Some(Value::String(s)) => {
            FieldPath::parse(s).map_err(|e| perr(stage, op, format!("{what}: {e}")))
        }
        Some(other) => Err(perr(
            stage,
            op,
            format!("{what} must be a string, found {}", other.kind().name()),
        )),
        None => Err(perr(stage, op, format!("{what} is required"))),
    }
}

fn new_field_name(stage: usize, op: &str, name: &str) -> DocResult<String> {
    if name.is_empty() || name.starts_with('$') || name.contains('.') {
        return Err(perr(
            stage,
            op,
            format!("{name:?} is not a valid field name (non-empty, no '$' start, no '.')"),
        ));
    }
    Ok(name.to_string())
}

fn insert_proj(
    stage: usize,
    nodes: &mut Vec<(String, ProjNode)>,
    path: &[String],
    node: ProjNode,
    whole: &str,
) -> DocResult<()> {
    let Some((first, rest)) = path.split_first() else {
        return Ok(());
    };
    let conflict = || {
        perr(
            stage,
            "$project",
            format!("path {whole:?} collides with another"),
        )
    };
    let pos = nodes.iter().position(|(k, _)| k == first);
    if rest.is_empty() {
        if pos.is_some() {
            return Err(conflict());
        }
        nodes.push((first.clone(), node));
        return Ok(());
    }
    let i = match pos {
        Some(i) => i,
        None => {
            nodes.push((first.clone(), ProjNode::Sub(Vec::new())));
            nodes.len() - 1
        }
    };
    match &mut nodes[i].1 {
        ProjNode::Sub(children) => insert_proj(stage, children, rest, node, whole),
        _ => Err(conflict()),
    }
}

/// Parses a `$project` spec into nodes; `prefix` is the path so far.
fn parse_projection(
    stage: usize,
    spec: &Document,
    prefix: &[String],
    nodes: &mut Vec<(String, ProjNode)>,
    kinds: &mut (bool, bool),
) -> DocResult<()> {
    for (k, v) in spec.iter() {
        let path = FieldPath::parse(k).map_err(|e| perr(stage, "$project", e.to_string()))?;
        let mut full = prefix.to_vec();
        full.extend(path.segments().iter().cloned());
        let whole = full.join(".");
        let node = match v {
            Value::Bool(b) => {
                if *b {
                    ProjNode::Include
                } else {
                    ProjNode::Exclude
                }
            }
            Value::Int(i) => {
                if *i != 0 {
                    ProjNode::Include
                } else {
                    ProjNode::Exclude
                }
            }
            Value::Float(f) => {
                if *f != 0.0 {
                    ProjNode::Include
                } else {
                    ProjNode::Exclude
                }
            }
            Value::Object(d) if !d.is_empty() && !d.keys().any(|k| k.starts_with('$')) => {
                parse_projection(stage, d, &full, nodes, kinds)?;
                continue;
            }
            Value::Object(d) if d.is_empty() => {
                return Err(perr(
                    stage,
                    "$project",
                    format!("an empty object for {whole:?} is not a projection"),
                ))
            }
            other => ProjNode::Compute(Expr::parse(other).map_err(|e| from_expr(stage, e))?),
        };
        let is_id = whole == "_id";
        match node {
            ProjNode::Exclude if !is_id => kinds.1 = true,
            // `{"$meta": "textScore"}` adds a field without making the
            // projection an inclusion (MongoDB's projection rule).
            ProjNode::Compute(Expr::TextScore) => {}
            ProjNode::Include | ProjNode::Compute(_) => kinds.0 = true,
            _ => {}
        }
        insert_proj(stage, nodes, &full, node, &whole)?;
    }
    Ok(())
}

fn parse_stage(i: usize, v: &Value) -> DocResult<Stage> {
    let Value::Object(d) = v else {
        return Err(perr(
            i,
            "stage",
            format!("a stage must be an object, found {}", v.kind().name()),
        ));
    };
    if d.len() != 1 {
        return Err(perr(
            i,
            "stage",
            format!("a stage must have exactly one field, found {}", d.len()),
        ));
    }
    let Some((name, arg)) = d.iter().next() else {
        return Err(perr(i, "stage", "empty stage"));
    };
    let expr = |v: &Value| Expr::parse(v).map_err(|e| from_expr(i, e));
    let obj = |what: &'static str| -> DocResult<&Document> {
        arg.as_object().ok_or_else(|| {
            perr(
                i,
                name,
                format!("needs {what}, found {}", arg.kind().name()),
            )
        })
    };
    Ok(match name {
        "$match" => {
            Stage::Match(Filter::from_value(arg.clone()).map_err(|e| perr(i, name, e.to_string()))?)
        }
        "$group" => {
            let spec = obj("an object with an _id")?;
            let mut id = None;
            let mut accs = Vec::new();
            for (field, a) in spec.iter() {
                if field == "_id" {
                    id = Some(expr(a)?);
                    continue;
                }
                let field = new_field_name(i, name, field)?;
                let Value::Object(ad) = a else {
                    return Err(perr(
                        i,
                        name,
                        format!("the field {field:?} must be an accumulator object like {{\"$sum\": 1}}"),
                    ));
                };
                let (Some((op, operand)), 1) = (ad.iter().next(), ad.len()) else {
                    return Err(perr(
                        i,
                        name,
                        format!("the field {field:?} must hold exactly one accumulator"),
                    ));
                };
                let acc = match op {
                    "$sum" => AccOp::Sum,
                    "$avg" => AccOp::Avg,
                    "$min" => AccOp::Min,
                    "$max" => AccOp::Max,
                    "$push" => AccOp::Push,
                    "$addToSet" => AccOp::AddToSet,
                    "$first" => AccOp::First,
                    "$last" => AccOp::Last,
                    "$count" => AccOp::Count,
                    other => {
                        return Err(perr(
                            i,
                            other,
                            format!("unknown accumulator for the field {field:?} of $group"),
                        ))
                    }
                };
                if acc == AccOp::Count && !matches!(operand, Value::Object(o) if o.is_empty()) {
                    return Err(perr(i, op, "the $count accumulator takes {}"));
                }
                if matches!(operand, Value::Array(_)) {
                    return Err(perr(
                        i,
                        op,
                        "an accumulator takes one expression, not an array",
                    ));
                }
                accs.push((field, acc, expr(operand)?));
            }
            let id =
                id.ok_or_else(|| perr(i, name, "a group specification must include an _id"))?;
            Stage::Group { id, accs }
        }
        "$sort" => {
            let spec = obj("a sort specification object")?;
            if spec.is_empty() {
                return Err(perr(i, name, "needs at least one sort key"));
            }
            Stage::Sort(
                SortSpec::from_value(arg.clone()).map_err(|e| perr(i, name, e.to_string()))?,
            )
        }
        "$project" => {
            let spec = obj("an object")?;
            if spec.is_empty() {
                return Err(perr(i, name, "needs at least one field"));
            }
            let mut nodes = Vec::new();
            let mut kinds = (false, false);
            parse_projection(i, spec, &[], &mut nodes, &mut kinds)?;
            if kinds.0 && kinds.1 {
                return Err(perr(
                    i,
                    name,
                    "cannot mix inclusion (or computed fields) with exclusion (other than _id)",
                ));
            }
            let mut plain = nodes
                .iter()
                .filter(|(_, n)| !matches!(n, ProjNode::Compute(Expr::TextScore)));
            let inclusion = kinds.0
                || !kinds.1 && {
                    // Only `_id` given: `{_id: 1}` includes, `{_id: 0}`
                    // excludes; only scores: every field and the scores.
                    plain
                        .next()
                        .is_some_and(|(_, n)| !matches!(n, ProjNode::Exclude))
                };
            Stage::Project(nodes, inclusion)
        }
        "$addFields" | "$set" => {
            let spec = obj("an object")?;
            let mut fields = Vec::with_capacity(spec.len());
            for (k, v) in spec.iter() {
                let p = FieldPath::parse(k).map_err(|e| perr(i, name, e.to_string()))?;
                if p.segments().iter().any(|s| s.starts_with('$')) {
                    return Err(perr(i, name, format!("{k:?} is not a valid field path")));
                }
                fields.push((p.segments().to_vec(), expr(v)?));
            }
            Stage::AddFields(fields)
        }
        "$unset" => {
            let names: Vec<&Value> = match arg {
                Value::Array(a) if !a.is_empty() => a.iter().collect(),
                Value::String(_) => vec![arg],
                _ => {
                    return Err(perr(
                        i,
                        name,
                        "needs a field path or a non-empty array of them",
                    ))
                }
            };
            let mut nodes = Vec::new();
            for n in names {
                let p = plain_path(i, name, "a field", Some(n))?;
                insert_proj(i, &mut nodes, p.segments(), ProjNode::Exclude, p.as_str())?;
            }
            Stage::Project(nodes, false)
        }
        "$limit" => {
            let n = count_arg(i, name, arg)?;
            if n == 0 {
                return Err(perr(i, name, "the limit must be positive"));
            }
            Stage::Limit(n)
        }
        "$skip" => Stage::Skip(count_arg(i, name, arg)?),
        "$unwind" => match arg {
            Value::String(_) => Stage::Unwind {
                path: dollar_path(i, name, arg)?,
                index: None,
                preserve: false,
            },
            Value::Object(o) => {
                let mut path = None;
                let mut index = None;
                let mut preserve = false;
                for (k, v) in o.iter() {
                    match k {
                        "path" => path = Some(dollar_path(i, name, v)?),
                        "includeArrayIndex" => match v {
                            Value::String(s) => index = Some(new_field_name(i, name, s)?),
                            _ => return Err(perr(i, name, "includeArrayIndex must be a string")),
                        },
                        "preserveNullAndEmptyArrays" => match v {
                            Value::Bool(b) => preserve = *b,
                            _ => {
                                return Err(perr(
                                    i,
                                    name,
                                    "preserveNullAndEmptyArrays must be a boolean",
                                ))
                            }
                        },
                        other => return Err(perr(i, name, format!("unknown option {other:?}"))),
                    }
                }
                Stage::Unwind {
                    path: path.ok_or_else(|| perr(i, name, "path is required"))?,
                    index,
                    preserve,
                }
            }
            _ => {
                return Err(perr(
                    i,
                    name,
                    "needs a path \"$field\" or an object {path: ...}",
                ))
            }
        },
        "$count" => match arg {
            Value::String(s) => Stage::Count(new_field_name(i, name, s)?),
            other => {
                return Err(perr(
                    i,
                    name,
                    format!("needs a field name string, found {}", other.kind().name()),
                ))
            }
        },
        "$lookup" => {
            let spec = obj("an object {from, localField, foreignField, as}")?;
            for k in spec.keys() {
                if !matches!(k, "from" | "localField" | "foreignField" | "as") {
                    return Err(perr(
                        i,
                        name,
                        format!(
                            "unsupported option {k:?} (only from, localField, foreignField, as)"
                        ),
                    ));
                }
            }
            let from = match spec.get("from") {
                Some(Value::String(s)) => {
                    check_collection_name(s).map_err(|e| perr(i, name, e.to_string()))?;
                    s.clone()
                }
                _ => return Err(perr(i, name, "from must be a collection name")),
            };
            Stage::Lookup {
                from,
                local: plain_path(i, name, "localField", spec.get("localField"))?,
                foreign: plain_path(i, name, "foreignField", spec.get("foreignField"))?,
                as_: plain_path(i, name, "as", spec.get("as"))?
                    .segments()
                    .to_vec(),
            }
        }
        "$replaceRoot" => {
            let spec = obj("an object {newRoot: <expression>}")?;
            match (spec.get("newRoot"), spec.len()) {
                (Some(e), 1) => Stage::ReplaceRoot(expr(e)?),
                _ => return Err(perr(i, name, "needs exactly the field newRoot")),
            }
        }
        "$replaceWith" => Stage::ReplaceRoot(expr(arg)?),
        "$sortByCount" => match arg {
            Value::String(s) if s.starts_with('$') => Stage::SortByCount(expr(arg)?),
            Value::Object(o) if o.keys().next().is_some_and(|k| k.starts_with('$')) => {
                Stage::SortByCount(expr(arg)?)
            }
            _ => {
                return Err(perr(
                    i,
                    name,
                    "needs a field path \"$f\" or an expression object",
                ))
            }
        },
        other => {
            return Err(perr(i, other, "unknown pipeline stage"));
        }
    })
}

/// `$text` only in the first stage, a `$match` (as MongoDB); the text
/// score (`{"$meta": "textScore"}` in an expression or a `$sort` key) only
/// where documents still have it: after a `$text` first stage and before
/// any `$group`, `$sortByCount` or `$count` (which make new documents).
fn check_text_stages(stages: &[Stage]) -> DocResult<()> {
    let mut scored = matches!(stages.first(), Some(Stage::Match(f)) if f.has_text());
    for (i, st) in stages.iter().enumerate() {
        if let Stage::Match(f) = st {
            if i > 0 && f.has_text() {
                return Err(perr(
                    i,
                    "$match",
                    "$text is allowed only in the first stage of a pipeline",
                ));
            }
        }
        if !scored && st.uses_text_score() {
            return Err(perr(i, st.name(), expr::NO_TEXT_SCORE));
        }
        if matches!(
            st,
            Stage::Group { .. } | Stage::SortByCount(_) | Stage::Count(_)
        ) {
            scored = false;
        }
    }
    Ok(())
}

impl Stage {
    /// Whether the stage reads the `$text` score.
    fn uses_text_score(&self) -> bool {
        fn in_nodes(nodes: &[(String, ProjNode)]) -> bool {
            nodes.iter().any(|(_, n)| match n {
                ProjNode::Compute(e) => e.uses_text_score(),
                ProjNode::Sub(c) => in_nodes(c),
                _ => false,
            })
        }
        match self {
            Stage::Sort(s) => s.has_text_score(),
            Stage::Project(nodes, _) => in_nodes(nodes),
            Stage::AddFields(fields) => fields.iter().any(|(_, e)| e.uses_text_score()),
            Stage::Group { id, accs } => {
                id.uses_text_score() || accs.iter().any(|(_, _, e)| e.uses_text_score())
            }
            Stage::SortByCount(e) | Stage::ReplaceRoot(e) => e.uses_text_score(),
            _ => false,
        }
    }
}

impl Pipeline {
    /// Parses a pipeline from JSON (an array of stages).
    pub fn parse(json: serde_json::Value) -> DocResult<Pipeline> {
        Pipeline::from_value(Value::from_json(json)?)
    }

    /// Parses a pipeline from JSON text, keeping field order.
    pub fn parse_str(text: &str) -> DocResult<Pipeline> {
        Pipeline::from_value(value_from_text(text)?)
    }

    /// Parses a pipeline read into a [`Value`] (an array of objects).
    pub fn from_value(v: Value) -> DocResult<Pipeline> {
        let Value::Array(items) = v else {
            return Err(perr(
                0,
                "pipeline",
                format!(
                    "a pipeline must be an array of stages, found {}",
                    v.kind().name()
                ),
            ));
        };
        let stages = items
            .iter()
            .enumerate()
            .map(|(i, s)| parse_stage(i, s))
            .collect::<DocResult<Vec<Stage>>>()?;
        check_text_stages(&stages)?;
        Ok(Pipeline { stages })
    }

    /// The stage names, in order.
    pub fn stage_names(&self) -> Vec<&'static str> {
        self.stages.iter().map(Stage::name).collect()
    }

    /// Splits off the prefix that runs as a `find`: `$match`es, then a
    /// `$sort`, then `$skip`, then `$limit`. Returns the filter, the find
    /// options and how many stages were taken.
    pub(crate) fn pushdown(&self) -> (Filter, FindOptions, usize) {
        let mut filters = Vec::new();
        let mut i = 0;
        while let Some(Stage::Match(f)) = self.stages.get(i) {
            filters.push(f.clone());
            i += 1;
        }
        let mut opts = FindOptions::new();
        if let Some(Stage::Sort(s)) = self.stages.get(i) {
            opts = opts.with_sort(s.clone());
            i += 1;
        }
        if let Some(Stage::Skip(n)) = self.stages.get(i) {
            opts = opts.skip(*n);
            i += 1;
        }
        if let Some(Stage::Limit(n)) = self.stages.get(i) {
            opts = opts.limit(*n);
            i += 1;
        }
        let filter = match filters.len() {
            0 => Filter::True,
            1 => filters.pop().unwrap_or(Filter::True),
            _ => Filter::And(filters),
        };
        (filter, opts, i)
    }
}

/// Something that can be read as a pipeline: JSON (a `serde_json::Value`
/// or JSON text), or a parsed [`Pipeline`].
pub trait IntoPipeline {
    /// The pipeline.
    fn into_pipeline(self) -> DocResult<Pipeline>;
}

impl IntoPipeline for Pipeline {
    fn into_pipeline(self) -> DocResult<Pipeline> {
        Ok(self)
    }
}
impl IntoPipeline for serde_json::Value {
    fn into_pipeline(self) -> DocResult<Pipeline> {
        Pipeline::parse(self)
    }
}
impl IntoPipeline for &str {
    fn into_pipeline(self) -> DocResult<Pipeline> {
        Pipeline::parse_str(self)
    }
}
impl IntoPipeline for &String {
    fn into_pipeline(self) -> DocResult<Pipeline> {
        Pipeline::parse_str(self)
    }
}
impl IntoPipeline for Vec<Document> {
    fn into_pipeline(self) -> DocResult<Pipeline> {
        Pipeline::from_value(Value::Array(self.into_iter().map(Value::Object).collect()))
    }
}

// ---------------------------------------------------------------------------
// Execution

/// The estimated memory a value holds (its encoded size, roughly).
fn approx_size(v: &Value) -> usize {
    match v {
        Value::Null | Value::Bool(_) => 2,
        Value::Int(_) | Value::Float(_) => 9,
        Value::String(s) => s.len() + 5,
        Value::Binary(b) => b.len() + 5,
        Value::Id(_) => 13,
        Value::Date(_) => 9,
        Value::Uuid(_) => 17,
        Value::Array(a) => 5 + a.iter().map(approx_size).sum::<usize>(),
        Value::Object(d) => {
            5 + d
                .iter()
                .map(|(k, v)| k.len() + 2 + approx_size(v))
                .sum::<usize>()
        }
    }
}

/// The equality key of a value (equal values, `1` and `1.0` included,
/// give equal bytes).
fn eq_key(stage: usize, op: &str, v: &Value) -> DocResult<Vec<u8>> {
    let mut out = Vec::new();
    keys::encode_component(v, SortOrder::Ascending, &mut out)
        .map_err(|e| perr(stage, op, e.to_string()))?;
    Ok(out)
}

struct Budget {
    used: usize,
    limit: usize,
    stage: usize,
    op: &'static str,
}

impl Budget {
    fn add(&mut self, n: usize) -> DocResult<()> {
        self.used = self.used.saturating_add(n);
        if self.used > self.limit {
            return Err(DocumentError::PipelineMemoryLimit {
                stage: self.stage,
                operator: self.op.to_string(),
                limit: self.limit,
            });
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Acc {
    Sum {
        int: i128,
        float: f64,
        any_float: bool,
    },
    Avg {
        sum: f64,
        n: u64,
    },
    Min(Option<Value>),
    Max(Option<Value>),
    Push(Vec<Value>),
    AddToSet(Vec<Value>, HashSet<Vec<u8>>),
    First(Option<Value>),
    Last(Value),
    Count(i64),
}

impl Acc {
    fn new(op: AccOp) -> Acc {
        match op {
            AccOp::Sum => Acc::Sum {
                int: 0,
                float: 0.0,
                any_float: false,
            },
            AccOp::Avg => Acc::Avg { sum: 0.0, n: 0 },
            AccOp::Min => Acc::Min(None),
            AccOp::Max => Acc::Max(None),
            AccOp::Push => Acc::Push(Vec::new()),
            AccOp::AddToSet => Acc::AddToSet(Vec::new(), HashSet::new()),
            AccOp::First => Acc::First(None),
            AccOp::Last => Acc::Last(Value::Null),
            AccOp::Count => Acc::Count(0),
        }
    }

    /// Adds one value; returns the bytes newly held.
    fn add(&mut self, stage: usize, v: Option<Value>) -> DocResult<usize> {
        match self {
            Acc::Sum {
                int,
                float,
                any_float,
            } => match v {
                Some(Value::Int(i)) => *int = int.saturating_add(i128::from(i)),
                Some(Value::Float(f)) => {
                    *float += f;
                    *any_float = true;
                }
                _ => {}
            },
            Acc::Avg { sum, n } => {
                if let Some(f) = v.as_ref().and_then(|v| match v {
                    Value::Int(_) | Value::Float(_) => v.as_f64(),
                    _ => None,
                }) {
                    *sum += f;
                    *n += 1;
                }
            }
            Acc::Min(_) | Acc::Max(_) => {
                let want = if matches!(self, Acc::Min(_)) {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Greater
                };
                let (Acc::Min(cur) | Acc::Max(cur)) = self else {
                    return Ok(0);
                };
                match v {
                    None | Some(Value::Null) => {}
                    Some(v) => {
                        let better = match cur {
                            None => true,
                            Some(c) => keys::compare(&v, c) == want,
                        };
                        if better {
                            let n = approx_size(&v);
                            *cur = Some(v);
                            return Ok(n);
                        }
                    }
                }
            }
            Acc::Push(items) => {
                if let Some(v) = v {
                    let n = approx_size(&v);
                    items.push(v);
                    return Ok(n);
                }
            }
            Acc::AddToSet(items, seen) => {
                if let Some(v) = v {
                    let k = eq_key(stage, "$addToSet", &v)?;
                    if seen.insert(k) {
                        let n = approx_size(&v) * 2;
                        items.push(v);
                        return Ok(n);
                    }
                }
            }
            Acc::First(cur) => {
                if cur.is_none() {
                    let v = v.unwrap_or(Value::Null);
                    let n = approx_size(&v);
                    *cur = Some(v);
                    return Ok(n);
                }
            }
            Acc::Last(cur) => {
                let v = v.unwrap_or(Value::Null);
                let n = approx_size(&v);
                *cur = v;
                return Ok(n);
            }
            Acc::Count(n) => *n = n.saturating_add(1),
        }
        Ok(0)
    }

    fn finish(self) -> Value {
        match self {
            Acc::Sum {
                int,
                float,
                any_float,
            } => {
                if any_float {
                    Value::Float(int as f64 + float)
                } else {
                    match i64::try_from(int) {
                        Ok(i) => Value::Int(i),
                        Err(_) => Value::Float(int as f64),
                    }
                }
            }
            Acc::Avg { sum, n } => {
                if n == 0 {
                    Value::Null
                } else {
                    Value::Float(sum / n as f64)
                }
            }
            Acc::Min(v) | Acc::Max(v) => v.unwrap_or(Value::Null),
            Acc::Push(items) | Acc::AddToSet(items, _) => Value::Array(items),
            Acc::First(v) => v.unwrap_or(Value::Null),
            Acc::Last(v) => v,
            Acc::Count(n) => Value::Int(n),
        }
    }
}

/// Sorts in the engine order as [`SortSpec`] sees it, a `{"$meta":
/// "textScore"}` key by the items' scores (highest first; the pipeline's
/// check made sure they have them). Stable.
fn sort_items(spec: &SortSpec, docs: &mut Vec<Item>) {
    if spec.has_text_score() {
        docs.sort_by(|a, b| {
            spec.compare_scored(
                (&a.doc, a.score.unwrap_or(0.0)),
                (&b.doc, b.score.unwrap_or(0.0)),
            )
        });
        return;
    }
    let mut keyed: Vec<(Vec<Value>, Item)> = std::mem::take(docs)
        .into_iter()
        .map(|d| (spec.sort_key_value(&d.doc), d))
        .collect();
    keyed.sort_by(|a, b| spec.compare_keys(&a.0, &b.0));
    docs.extend(keyed.into_iter().map(|(_, d)| d));
}

/// A document going through the stages, with its `$text` score while it
/// has one (MongoDB's text score metadata: from a `$text` `$match` first
/// stage until a `$group`, `$sortByCount` or `$count` makes new documents).
#[derive(Debug)]
pub(crate) struct Item {
    pub doc: Value,
    pub score: Option<f64>,
}

impl Item {
    /// A document without metadata.
    pub(crate) fn plain(doc: Value) -> Item {
        Item { doc, score: None }
    }

    fn cx(&self) -> Cx<'_> {
        Cx {
            doc: &self.doc,
            score: self.score,
        }
    }

    /// Another document with this one's metadata.
    fn with(&self, doc: Value) -> Item {
        Item {
            doc,
            score: self.score,
        }
    }
}

/// The fields of a projection computed as `{"$meta": ...}` (the only
/// computed fields of an exclusion), with their paths.
fn meta_fields<'n>(
    nodes: &'n [(String, ProjNode)],
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, &'n Expr)>,
) {
    for (k, n) in nodes {
        prefix.push(k.clone());
        match n {
            ProjNode::Compute(e) => out.push((prefix.clone(), e)),
            ProjNode::Sub(children) => meta_fields(children, prefix, out),
            _ => {}
        }
        prefix.pop();
    }
}

/// Removes `path` from `v` (through arrays: from each object element).
fn remove_path(v: &mut Value, path: &[String]) {
    let Some((first, rest)) = path.split_first() else {
        return;
    };
    match v {
        Value::Object(d) => {
            if rest.is_empty() {
                d.remove(first);
            } else if let Some(child) = d.get_mut(first) {
                remove_path(child, rest);
            }
        }
        Value::Array(a) => {
            for e in a {
                remove_path(e, path);
            }
        }
        _ => {}
    }
}

fn exclude(v: &mut Value, nodes: &[(String, ProjNode)]) {
    for (k, n) in nodes {
        match n {
            ProjNode::Exclude => remove_path(v, std::slice::from_ref(k)),
            ProjNode::Sub(children) => {
                if let Some(d) = v.as_object_mut() {
                    if let Some(c) = d.get_mut(k) {
                        exclude_in(c, children);
                    }
                }
            }
            _ => {}
        }
    }
}

fn exclude_in(v: &mut Value, nodes: &[(String, ProjNode)]) {
    match v {
        Value::Array(a) => {
            for e in a {
                exclude_in(e, nodes);
            }
        }
        Value::Object(_) => exclude(v, nodes),
        _ => {}
    }
}

fn has_compute(nodes: &[(String, ProjNode)]) -> bool {
    nodes.iter().any(|(_, n)| match n {
        ProjNode::Compute(_) => true,
        ProjNode::Sub(c) => has_compute(c),
        _ => false,
    })
}

/// An inclusion projection of the object `obj` (`None`: nothing there),
/// computing expressions on `root`.
fn include(
    obj: Option<&Document>,
    nodes: &[(String, ProjNode)],
    root: &Cx<'_>,
    top: bool,
) -> Result<Document, ExprError> {
    let mut out = Document::new();
    let find = |k: &str| nodes.iter().find(|(n, _)| n == k).map(|(_, n)| n);
    // `_id` first and kept unless excluded, at the top level.
    if top && find("_id").is_none() {
        if let Some(id) = obj.and_then(|o| o.get("_id")) {
            out.insert("_id", id.clone());
        }
    }
    if let Some(o) = obj {
        for (k, v) in o.iter() {
            match find(k) {
                Some(ProjNode::Include) => {
                    out.insert(k, v.clone());
                }
                Some(ProjNode::Sub(children)) => {
                    if let Some(x) = include_value(v, children, root)? {
                        out.insert(k, x);
                    }
                }
                _ => {}
            }
        }
    }
    for (k, n) in nodes {
        match n {
            ProjNode::Compute(e) => {
                if let Some(v) = e.eval_in(root)? {
                    out.insert(k.clone(), v);
                }
            }
            ProjNode::Sub(children) if !out.contains_key(k) && has_compute(children) => {
                out.insert(
                    k.clone(),
                    Value::Object(include(None, children, root, false)?),
                );
            }
            _ => {}
        }
    }
    Ok(out)
}

fn include_value(
    v: &Value,
    nodes: &[(String, ProjNode)],
    root: &Cx<'_>,
) -> Result<Option<Value>, ExprError> {
    Ok(match v {
        Value::Object(o) => Some(Value::Object(include(Some(o), nodes, root, false)?)),
        Value::Array(a) => {
            let mut out = Vec::new();
            for e in a {
                if let Some(x) = include_value(e, nodes, root)? {
                    out.push(x);
                }
            }
            Some(Value::Array(out))
        }
        _ if has_compute(nodes) => Some(Value::Object(include(None, nodes, root, false)?)),
        _ => None,
    })
}

/// Sets `path` in `v` (creating objects; a non-object on the way is
/// replaced by an object).
fn set_path(v: &mut Value, path: &[String], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        *v = value;
        return;
    };
    if !matches!(v, Value::Object(_)) {
        *v = Value::Object(Document::new());
    }
    if let Value::Object(d) = v {
        if rest.is_empty() {
            d.insert(first.clone(), value);
        } else {
            if d.get(first).is_none() {
                d.insert(first.clone(), Value::Object(Document::new()));
            }
            if let Some(child) = d.get_mut(first) {
                set_path(child, rest, value);
            }
        }
    }
}

/// The foreign documents of a `$lookup`, hashed by their field's values.
struct LookupTable {
    docs: Vec<Value>,
    by_key: HashMap<Vec<u8>, Vec<usize>>,
}

/// Reads the foreign collection of each `$lookup` stage.
pub(crate) type ForeignReader<'a> = dyn FnMut(&str) -> DocResult<Vec<Value>> + 'a;

enum Exec {
    Match(Filter),
    Group {
        id: Expr,
        accs: Vec<(String, AccOp, Expr)>,
        index: HashMap<Vec<u8>, usize>,
        groups: Vec<(Value, Vec<Acc>)>,
        budget: Budget,
        then_sort: bool,
    },
    Sort(SortSpec, Vec<Item>, Budget),
    Project(Vec<(String, ProjNode)>, bool),
    AddFields(Vec<(Vec<String>, Expr)>),
    Limit {
        left: u64,
    },
    Skip {
        left: u64,
    },
    Unwind {
        path: Vec<String>,
        index: Option<String>,
        preserve: bool,
    },
    Count(String, i64),
    Lookup {
        local: FieldPath,
        as_: Vec<String>,
        table: LookupTable,
    },
    ReplaceRoot(Expr),
}

impl Exec {
    fn new(
        i: usize,
        stage: &Stage,
        limit: usize,
        foreign: &mut ForeignReader<'_>,
    ) -> DocResult<Exec> {
        let budget = |op| Budget {
            used: 0,
            limit,
            stage: i,
            op,
        };
        Ok(match stage {
            Stage::Match(f) => Exec::Match(f.clone()),
            Stage::Group { id, accs } => Exec::Group {
                id: id.clone(),
                accs: accs.clone(),
                index: HashMap::new(),
                groups: Vec::new(),
                budget: budget("$group"),
                then_sort: false,
            },
            Stage::SortByCount(e) => Exec::Group {
                id: e.clone(),
                accs: vec![("count".to_string(), AccOp::Sum, Expr::Lit(Value::Int(1)))],
                index: HashMap::new(),
                groups: Vec::new(),
                budget: budget("$sortByCount"),
                then_sort: true,
            },
            Stage::Sort(s) => Exec::Sort(s.clone(), Vec::new(), budget("$sort")),
            Stage::Project(n, inc) => Exec::Project(n.clone(), *inc),
            Stage::AddFields(f) => Exec::AddFields(f.clone()),
            Stage::Limit(n) => Exec::Limit { left: *n },
            Stage::Skip(n) => Exec::Skip { left: *n },
            Stage::Unwind {
                path,
                index,
                preserve,
            } => Exec::Unwind {
                path: path.clone(),
                index: index.clone(),
                preserve: *preserve,
            },
            Stage::Count(name) => Exec::Count(name.clone(), 0),
            Stage::Lookup {
                from,
                local,
                foreign: ff,
                as_,
            } => {
                let docs = foreign(from)?;
                let mut b = budget("$lookup");
                let mut by_key: HashMap<Vec<u8>, Vec<usize>> = HashMap::new();
                for (n, d) in docs.iter().enumerate() {
                    b.add(approx_size(d))?;
                    let mut vals = path::lookup_value(d, ff.segments(), LookupMode::Index);
                    let null = Value::Null;
                    if vals.is_empty() {
                        vals.push(&null);
                    }
                    let mut mine = HashSet::new();
                    for v in vals {
                        let k = eq_key(i, "$lookup", v)?;
                        if mine.insert(k.clone()) {
                            by_key.entry(k).or_default().push(n);
                        }
                    }
                }
                Exec::Lookup {
                    local: local.clone(),
                    as_: as_.clone(),
                    table: LookupTable { docs, by_key },
                }
            }
            Stage::ReplaceRoot(e) => Exec::ReplaceRoot(e.clone()),
        })
    }

    /// Whether the stage takes no more input (a `$limit` reached).
    fn done(&self) -> bool {
        matches!(self, Exec::Limit { left: 0 })
    }

    fn push(&mut self, i: usize, item: Item, out: &mut Vec<Item>) -> DocResult<()> {
        let ex = |e: ExprError| from_expr(i, e);
        match self {
            Exec::Match(f) => {
                if f.matches_value(&item.doc)
                    .map_err(|e| perr(i, "$match", e.to_string()))?
                {
                    out.push(item);
                }
            }
            Exec::Group {
                id,
                accs,
                index,
                groups,
                budget,
                ..
            } => {
                let cx = item.cx();
                let key = id.eval_in(&cx).map_err(ex)?.unwrap_or(Value::Null);
                let k = eq_key(i, "$group", &key)?;
                let g = match index.get(&k) {
                    Some(g) => *g,
                    None => {
                        budget.add(approx_size(&key) * 2 + 64)?;
                        groups.push((key, accs.iter().map(|(_, op, _)| Acc::new(*op)).collect()));
                        index.insert(k, groups.len() - 1);
                        groups.len() - 1
                    }
                };
                for ((_, op, e), acc) in accs.iter().zip(groups[g].1.iter_mut()) {
                    let v = if *op == AccOp::Count {
                        None
                    } else {
                        e.eval_in(&cx).map_err(ex)?
                    };
                    let n = acc.add(i, v)?;
                    budget.add(n)?;
                }
            }
            Exec::Sort(_, docs, budget) => {
                budget.add(approx_size(&item.doc))?;
                docs.push(item);
            }
            Exec::Project(nodes, inclusion) => {
                if *inclusion {
                    let d = include(item.doc.as_object(), nodes, &item.cx(), true).map_err(ex)?;
                    out.push(item.with(Value::Object(d)));
                } else {
                    // An exclusion, whose only computed fields are
                    // `{"$meta": ...}`, evaluated on the input.
                    let mut metas = Vec::new();
                    meta_fields(nodes, &mut Vec::new(), &mut metas);
                    let mut vals = Vec::with_capacity(metas.len());
                    for (p, e) in metas {
                        vals.push((p, e.eval_in(&item.cx()).map_err(ex)?));
                    }
                    let mut item = item;
                    exclude(&mut item.doc, nodes);
                    for (p, v) in vals {
                        if let Some(v) = v {
                            set_path(&mut item.doc, &p, v);
                        }
                    }
                    out.push(item);
                }
            }
            Exec::AddFields(fields) => {
                // Every expression sees the document as it came in
                // (MongoDB evaluates them all on the input document).
                let mut vals = Vec::with_capacity(fields.len());
                for (p, e) in fields.iter() {
                    vals.push((p, e.eval_in(&item.cx()).map_err(ex)?));
                }
                let mut item = item;
                for (p, v) in vals {
                    if let Some(v) = v {
                        set_path(&mut item.doc, p, v);
                    }
                }
                out.push(item);
            }
            Exec::Limit { left } => {
                if *left > 0 {
                    *left -= 1;
                    out.push(item);
                }
            }
            Exec::Skip { left } => {
                if *left > 0 {
                    *left -= 1;
                } else {
                    out.push(item);
                }
            }
            Exec::Unwind {
                path,
                index,
                preserve,
            } => {
                let at = item.doc.get_path(&path.join(".")).cloned();
                let index: &Option<String> = index;
                let with_index = |mut d: Value, n: Option<usize>| {
                    if let Some(name) = index {
                        let v = n
                            .and_then(|n| i64::try_from(n).ok())
                            .map(Value::Int)
                            .unwrap_or(Value::Null);
                        set_path(&mut d, std::slice::from_ref(name), v);
                    }
                    d
                };
                match at {
                    Some(Value::Array(items)) if !items.is_empty() => {
                        for (n, elem) in items.into_iter().enumerate() {
                            let mut d = item.doc.clone();
                            set_path(&mut d, path, elem);
                            out.push(item.with(with_index(d, Some(n))));
                        }
                    }
                    Some(Value::Array(_)) => {
                        if *preserve {
                            let mut d = item.doc.clone();
                            remove_path(&mut d, path);
                            out.push(item.with(with_index(d, None)));
                        }
                    }
                    None | Some(Value::Null) => {
                        if *preserve {
                            let d = with_index(item.doc.clone(), None);
                            out.push(item.with(d));
                        }
                    }
                    Some(_) => {
                        let d = with_index(item.doc.clone(), None);
                        out.push(item.with(d));
                    }
                }
            }
            Exec::Count(_, n) => *n = n.saturating_add(1),
            Exec::Lookup { local, as_, table } => {
                let mut vals = path::lookup_value(&item.doc, local.segments(), LookupMode::Index);
                let null = Value::Null;
                if vals.is_empty() {
                    vals.push(&null);
                }
                let mut hits: Vec<usize> = Vec::new();
                for v in vals {
                    if let Some(ns) = table.by_key.get(&eq_key(i, "$lookup", v)?) {
                        hits.extend(ns);
                    }
                }
                hits.sort_unstable();
                hits.dedup();
                let matched = hits
                    .into_iter()
                    .filter_map(|n| table.docs.get(n).cloned())
                    .collect();
                let mut item = item;
                set_path(&mut item.doc, as_, Value::Array(matched));
                out.push(item);
            }
            Exec::ReplaceRoot(e) => match e.eval_in(&item.cx()).map_err(ex)? {
                // The new root keeps the document's metadata (as MongoDB's).
                Some(v @ Value::Object(_)) => out.push(item.with(v)),
                other => {
                    return Err(perr(
                        i,
                        "$replaceRoot",
                        format!(
                            "the new root must be an object, found {}",
                            other.map(|v| v.kind().name()).unwrap_or("missing")
                        ),
                    ))
                }
            },
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<Item>) -> DocResult<()> {
        match self {
            Exec::Group {
                accs,
                groups,
                then_sort,
                ..
            } => {
                // New documents: no metadata.
                let mut res: Vec<Value> = std::mem::take(groups)
                    .into_iter()
                    .map(|(key, states)| {
                        let mut d = Document::with_capacity(states.len() + 1);
                        d.insert("_id", key);
                        for ((name, _, _), s) in accs.iter().zip(states) {
                            d.insert(name.clone(), s.finish());
                        }
                        Value::Object(d)
                    })
                    .collect();
                if *then_sort {
                    // Stable: ties keep first-seen order.
                    res.sort_by(|a, b| keys::compare(&b["count"], &a["count"]));
                }
                out.extend(res.into_iter().map(Item::plain));
            }
            Exec::Sort(spec, docs, _) => {
                let mut docs = std::mem::take(docs);
                sort_items(spec, &mut docs);
                out.extend(docs);
            }
            Exec::Count(name, n) => {
                if *n > 0 {
                    out.push(Item::plain(Value::Object(
                        Document::new().with(name.clone(), *n),
                    )));
                }
                *n = 0;
            }
            _ => {}
        }
        Ok(())
    }
}

/// The documents a pipeline produces, streamed: each item is one output
/// document (see the module docs for what runs when).
pub struct Aggregation<'a> {
    source: Box<dyn FnMut() -> DocResult<Option<Item>> + 'a>,
    /// The stage index of `execs[0]` (stages before it were pushed down).
    first: usize,
    execs: Vec<Exec>,
    ready: VecDeque<Item>,
    finished: bool,
    failed: bool,
}

impl std::fmt::Debug for Aggregation<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Aggregation")
            .field("stages", &self.execs.len())
            .finish()
    }
}

impl<'a> Aggregation<'a> {
    fn new(
        pipeline: &Pipeline,
        first: usize,
        opts: AggregateOptions,
        source: Box<dyn FnMut() -> DocResult<Option<Item>> + 'a>,
        foreign: &mut ForeignReader<'_>,
    ) -> DocResult<Self> {
        let execs = pipeline.stages[first..]
            .iter()
            .enumerate()
            .map(|(n, s)| Exec::new(first + n, s, opts.memory_limit, foreign))
            .collect::<DocResult<_>>()?;
        Ok(Aggregation {
            source,
            first,
            execs,
            ready: VecDeque::new(),
            finished: false,
            failed: false,
        })
    }

    /// Runs `docs` through the stages from `from` on.
    fn feed(&mut self, from: usize, docs: Vec<Item>) -> DocResult<()> {
        let mut cur = docs;
        for n in from..self.execs.len() {
            if cur.is_empty() {
                return Ok(());
            }
            let mut next = Vec::new();
            for d in cur {
                self.execs[n].push(self.first + n, d, &mut next)?;
            }
            cur = next;
        }
        self.ready.extend(cur);
        Ok(())
    }

    fn step(&mut self) -> DocResult<Option<Document>> {
        loop {
            if let Some(v) = self.ready.pop_front() {
                return match v.doc {
                    Value::Object(d) => Ok(Some(d)),
                    other => Err(perr(
                        self.first + self.execs.len(),
                        "pipeline",
                        format!("an output is not an object but {}", other.kind().name()),
                    )),
                };
            }
            if self.finished {
                return Ok(None);
            }
            let stop = self.execs.iter().any(Exec::done);
            let next = if stop { None } else { (self.source)()? };
            match next {
                Some(doc) => self.feed(0, vec![doc])?,
                None => {
                    self.finished = true;
                    for n in 0..self.execs.len() {
                        let mut out = Vec::new();
                        self.execs[n].finish(&mut out)?;
                        self.feed(n + 1, out)?;
                    }
                }
            }
        }
    }
}

impl Iterator for Aggregation<'_> {
    type Item = DocResult<Document>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        match self.step() {
            Ok(Some(d)) => Some(Ok(d)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// What [`Collection::explain_aggregate`] reports.
#[derive(Debug, Clone, PartialEq)]
pub struct AggregateExplain {
    /// The stages that ran as one `find` through the planner.
    pub pushed_down: Vec<String>,
    /// The plan of that `find` and what it read.
    pub query: Explain,
    /// The stages that ran over decoded documents, in order.
    pub in_memory: Vec<String>,
    /// Documents the pipeline returned.
    pub returned: u64,
}

fn data_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::internal(name)
}

fn read_all<T: SeamTable<&'static [u8], &'static [u8]>>(t: &T) -> DocResult<Vec<Value>> {
    let mut out = Vec::new();
    for item in t.iter()? {
        let (_, v) = item?;
        out.push(codec::decode_value(v.value())?);
    }
    Ok(out)
}

/// The distinct values of `field` among `docs` (see
/// [`Collection::distinct`]).
fn distinct_of(
    field: &FieldPath,
    docs: impl Iterator<Item = DocResult<Vec<u8>>>,
) -> DocResult<Vec<Value>> {
    let mut seen: HashSet<Vec<u8>> = HashSet::new();
    let mut out: Vec<Value> = Vec::new();
    for bytes in docs {
        let bytes = bytes?;
        for v in path::lookup(&bytes, field.segments(), LookupMode::Index)? {
            let v = v.to_value()?;
            // `[]` is reported by Index lookups as the array itself; as in
            // MongoDB, an empty array contributes nothing.
            if matches!(&v, Value::Array(a) if a.is_empty()) {
                continue;
            }
            let mut k = Vec::new();
            keys::encode_component(&v, SortOrder::Ascending, &mut k)?;
            if seen.insert(k) {
                out.push(v);
            }
        }
    }
    out.sort_by(keys::compare);
    Ok(out)
}

impl<'db, T: Serialize + DeserializeOwned> Collection<'db, T> {
    /// Runs an aggregation pipeline on one snapshot (see the
    /// [module docs](self) for the stages, the semantics and the memory
    /// bound).
    ///
    /// ```
    /// use serde_json::json;
    /// use cairndb::document::Document;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("a.cairn"))?;
    /// let c = db.collection::<Document>("orders");
    /// c.insert_many(&[Document::new().with("cust", "a").with("total", 5),
    ///                 Document::new().with("cust", "b").with("total", 9),
    ///                 Document::new().with("cust", "a").with("total", 2)])?;
    /// let out: Vec<Document> = c
    ///     .aggregate(json!([
    ///         {"$group": {"_id": "$cust", "sum": {"$sum": "$total"}}},
    ///         {"$sort": {"sum": -1}}
    ///     ]))?
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(out[0]["_id"].as_str(), Some("b"));
    /// assert_eq!(out[1]["sum"].as_i64(), Some(7));
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn aggregate(&self, pipeline: impl IntoPipeline) -> DocResult<Aggregation<'db>> {
        self.aggregate_with(pipeline, AggregateOptions::default())
    }

    /// [`Collection::aggregate`] with options (the memory bound).
    pub fn aggregate_with(
        &self,
        pipeline: impl IntoPipeline,
        opts: AggregateOptions,
    ) -> DocResult<Aggregation<'db>> {
        let pipeline = pipeline.into_pipeline()?;
        check_collection_name(self.name())?;
        aggregate_in(self.database().begin_read()?, self.name(), &pipeline, opts)
    }

    /// Runs the pipeline and reports the plan of the stages pushed down to
    /// the query planner (a leading `$match`, `$sort`, `$skip`, `$limit`)
    /// and the stages run in memory, the plan and the run from one
    /// snapshot ([`SnapshotCollection::explain_aggregate`](super::SnapshotCollection::explain_aggregate)).
    pub fn explain_aggregate(&self, pipeline: impl IntoPipeline) -> DocResult<AggregateExplain> {
        check_collection_name(self.name())?;
        let r = self.database().begin_read()?;
        r.collection::<T>(self.name()).explain_aggregate(pipeline)
    }

    /// The distinct values of `field` among the documents matching
    /// `filter`, as MongoDB's `distinct`: an array at the field contributes
    /// each element (not itself; an empty array contributes nothing), a
    /// missing field contributes nothing, and values that compare equal
    /// (`1` and `1.0`) count once (the first seen is kept). The result is
    /// sorted in the engine's value order ([`keys::compare`]).
    pub fn distinct(&self, field: &str, filter: impl IntoFilter) -> DocResult<Vec<Value>> {
        let field = FieldPath::parse(field)?;
        let filter = filter.into_filter()?;
        check_collection_name(self.name())?;
        distinct_in(self.database().begin_read()?, self.name(), &field, filter)
    }
}

/// Runs `pipeline` on the collection `name` in read snapshot `r` (owned,
/// borrowed or shared): what [`Collection::aggregate_with`] and
/// [`SnapshotCollection::aggregate_with`](super::SnapshotCollection::aggregate_with)
/// run. The name is checked by the caller.
pub(crate) fn aggregate_in<'a, S>(
    r: S,
    name: &str,
    pipeline: &Pipeline,
    opts: AggregateOptions,
) -> DocResult<Aggregation<'a>>
where
    S: Snapshot + 'a,
{
    // $lookup's foreign collections are read from this snapshot before
    // the query takes it over.
    let snapshot = &r;
    let mut foreign = |name: &str| -> DocResult<Vec<Value>> {
        let Some(meta) = meta_in(snapshot, name)? else {
            return Ok(Vec::new());
        };
        match snapshot.open_table_if_exists(data_def(&meta.data_table()))? {
            Some(t) => read_all(&t),
            None => Ok(Vec::new()),
        }
    };
    let (filter, find, first) = pipeline.pushdown();
    // Build the stages (reading foreign collections) first.
    let mut agg = Aggregation::new(pipeline, first, opts, Box::new(|| Ok(None)), &mut foreign)?;
    let meta = meta_in(snapshot, name)?;
    let (mut results, scores): (Results<Document, S>, _) =
        run_query_values(r, meta.as_deref(), filter, &find).map_err(|e| in_collection(e, name))?;
    agg.source = Box::new(move || match results.next_raw()? {
        Some(b) => Ok(Some(Item {
            score: text_score(scores.as_ref(), &b)?,
            doc: codec::decode_value(&b)?,
        })),
        None => Ok(None),
    });
    Ok(agg)
}

/// `distinct` of `field` on the collection `name` in read snapshot `r`.
pub(crate) fn distinct_in<S>(
    r: S,
    name: &str,
    field: &FieldPath,
    filter: Filter,
) -> DocResult<Vec<Value>>
where
    S: Snapshot,
{
    let meta = meta_in(&r, name)?;
    let (mut results, _): (Results<Document, S>, _) =
        run_query_values(r, meta.as_deref(), filter, &FindOptions::new())
            .map_err(|e| in_collection(e, name))?;
    distinct_of(
        field,
        std::iter::from_fn(move || results.next_raw().transpose()),
    )
}

impl<T: Serialize + DeserializeOwned, W: SeamWrite + SeamRead> TxnCollection<'_, T, W> {
    /// Runs an aggregation pipeline on what this transaction sees (its
    /// own changes included): the leading `$match`/`$sort`/`$skip`/`$limit`
    /// run through the planner as [`TxnCollection::find_with`] does (a
    /// `$text` `$match` with the text index and its scores); the results
    /// are collected in memory.
    pub fn aggregate(&self, pipeline: impl IntoPipeline) -> DocResult<Vec<Document>> {
        let pipeline = pipeline.into_pipeline()?;
        let opts = AggregateOptions::default();
        self.write_op(|w, name| {
            let txn = w.txn;
            let mut foreign = |coll: &str| -> DocResult<Vec<Value>> {
                check_collection_name(coll)?;
                let Some(meta) = meta_in(txn, coll)? else {
                    return Ok(Vec::new());
                };
                match SeamRead::open_table_if_exists(txn, data_def(&meta.data_table()))? {
                    Some(t) => read_all(&t),
                    None => Ok(Vec::new()),
                }
            };
            // The leading $match/$sort/$skip/$limit run through the
            // planner on what the transaction sees, as `find` does there
            // (a `$text` $match with its scores).
            let (filter, find, first) = pipeline.pushdown();
            let meta = meta_in(txn, name)?;
            let (docs, scores) = run_query_values_in_txn(txn, meta.as_deref(), &filter, &find)
                .map_err(|e| in_collection(e, name))?;
            let mut items = Vec::with_capacity(docs.len());
            for b in docs {
                items.push(Item {
                    score: text_score(scores.as_ref(), &b)?,
                    doc: codec::decode_value(&b)?,
                });
            }
            let mut it = items.into_iter();
            let agg = Aggregation::new(
                &pipeline,
                first,
                opts,
                Box::new(move || Ok(it.next())),
                &mut foreign,
            )?;
            agg.collect()
        })
    }

    /// [`Collection::distinct`] on what this transaction sees (its filter
    /// through the planner, `$text` included).
    pub fn distinct(&self, field: &str, filter: impl IntoFilter) -> DocResult<Vec<Value>> {
        let field = FieldPath::parse(field)?;
        let filter = filter.into_filter()?;
        self.write_op(|w, name| {
            let txn = w.txn;
            let meta = meta_in(txn, name)?;
            let (docs, _) =
                run_query_values_in_txn(txn, meta.as_deref(), &filter, &FindOptions::new())
                    .map_err(|e| in_collection(e, name))?;
            let docs = docs.into_iter().map(Ok);
            distinct_of(&field, docs)
        })
    }
}

/// The stages of a pipeline that take one document and give at most one
/// (`$match`, `$project`, `$addFields`/`$set`, `$unset`, `$replaceRoot`/
/// `$replaceWith`), run one document at a time: what a change stream
/// applies to its events (MongoDB allows the same stages there).
pub(crate) struct PerDocument {
    execs: Vec<Exec>,
}

impl std::fmt::Debug for PerDocument {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PerDocument")
            .field("stages", &self.execs.len())
            .finish()
    }
}

impl Pipeline {
    /// This pipeline as per-document stages; any other stage is an error
    /// naming it and `what` the pipeline is for.
    pub(crate) fn per_document(&self, what: &str) -> DocResult<PerDocument> {
        let mut no_foreign = |_: &str| -> DocResult<Vec<Value>> { Ok(Vec::new()) };
        let mut execs = Vec::with_capacity(self.stages.len());
        for (i, s) in self.stages.iter().enumerate() {
            match s {
                Stage::Match(_) | Stage::Project(..) | Stage::AddFields(_) | Stage::ReplaceRoot(_) => {
                    execs.push(Exec::new(i, s, DEFAULT_MEMORY_LIMIT, &mut no_foreign)?)
                }
                other => {
                    return Err(perr(
                        i,
                        other.name(),
                        format!(
                            "is not allowed in {what}: use $match, $project, $addFields, $set, $unset, $replaceRoot or $replaceWith"
                        ),
                    ))
                }
            }
        }
        Ok(PerDocument { execs })
    }
}

impl PerDocument {
    /// Runs one document through the stages: `None` if a `$match` dropped
    /// it.
    pub(crate) fn apply(&mut self, doc: Value) -> DocResult<Option<Value>> {
        let mut cur = vec![Item::plain(doc)];
        for (i, e) in self.execs.iter_mut().enumerate() {
            let mut next = Vec::with_capacity(1);
            for d in cur {
                e.push(i, d, &mut next)?;
            }
            if next.is_empty() {
                return Ok(None);
            }
            cur = next;
        }
        Ok(cur.pop().map(|i| i.doc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err_of(p: serde_json::Value) -> DocumentError {
        match Pipeline::parse(p) {
            Ok(p) => panic!("parsed: {p:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn parse_errors_name_stage_and_operator() {
        let cases = [
            (json!([{"$match": {}}, {"$bogus": 1}]), 1, "$bogus"),
            (
                json!([{"$group": {"_id": null, "n": {"$median": "$a"}}}]),
                0,
                "$median",
            ),
            (json!([{"$group": {"n": {"$sum": 1}}}]), 0, "$group"),
            (json!([{"$limit": "x"}]), 0, "$limit"),
            (json!([{"$limit": 0}]), 0, "$limit"),
            (json!([{"$skip": -1}]), 0, "$skip"),
            (json!([{"$project": {"a": 1, "b": 0}}]), 0, "$project"),
            (json!([{"$unwind": "a"}]), 0, "$unwind"),
            (json!([{"$count": "$x"}]), 0, "$count"),
            (json!([{"$sort": {}}, {"$sort": {"a": 1}}]), 0, "$sort"),
            (
                json!([{"$skip": 1}, {"$project": {"x": {"$nope": 1}}}]),
                1,
                "$nope",
            ),
            (
                json!([{"$lookup": {"from": "x", "localField": "a", "foreignField": "b"}}]),
                0,
                "$lookup",
            ),
            (json!([{"$match": 1, "$limit": 2}]), 0, "stage"),
            (json!([5]), 0, "stage"),
            (json!({"$match": {}}), 0, "pipeline"),
        ];
        for (p, stage, op) in cases {
            match err_of(p.clone()) {
                DocumentError::Pipeline {
                    stage: s,
                    operator: o,
                    ..
                } => assert_eq!((s, o.as_str()), (stage, op), "{p}"),
                other => panic!("{p}: {other:?}"),
            }
        }
    }

    #[test]
    fn pushdown_prefix() {
        let p = Pipeline::parse(json!([{"$match": {"a": 1}}, {"$match": {"b": 2}}, {"$sort": {"a": 1}}, {"$skip": 1}, {"$limit": 2}, {"$limit": 1}]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.pushdown().2, 5);
        let p =
            Pipeline::parse(json!([{"$limit": 2}, {"$skip": 1}])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.pushdown().2, 1);
    }
}
