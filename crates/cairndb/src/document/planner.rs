//! The query planner: picks how to find a filter's documents.
//!
//! Candidate plans:
//! - `_id` lookups for `_id` equality or `$in`, and `_id` ranges read from
//!   the data table's key order;
//! - for each index, one scan over compound bounds: equality (or `$in`)
//!   on a prefix of its fields, then a range (or anchored string prefix)
//!   on the next field; all conditions on one field combine into one range
//!   when the index is *single-key* (see below); a null (or `$exists:
//!   false`) condition reads the null and empty-array entries of an index
//!   that is not sparse (documents missing the field are indexed under
//!   null; on a dotted path only an index with null entries for array
//!   elements lacking the field, `IndexInfo::null_elements`, has every
//!   document matching null there, and only such an index gives the order
//!   of a sort on a dotted path); `$ne: null` (and `$nin` with null,
//!   `$not: {$eq: null}`) reads every key but null's on an index of a
//!   top-level path, or of a dotted one on which no document has had an
//!   array before the last segment (`IndexInfo::prefix_arrays`, MongoDB's
//!   "not multikey on that path"); `$exists: true` reads every key of a
//!   sparse index, on the same terms; the conditions of an `$elemMatch`
//!   document bound the index on the subfield (`items.sku` for `{items:
//!   {$elemMatch: {sku: …}}}`);
//! - the same scan read in the index's order (or reversed) when the sort
//!   matches the index's fields after a one-value equality prefix, stopping
//!   after skip + limit results; after an `$in` prefix (several point
//!   prefixes) the ranges are merged by the keys after their prefixes
//!   (`Source::Merge`, MongoDB's `SORT_MERGE`), on a single-key index
//!   with no cut long value in a prefix;
//! - index intersection for an `$and` whose conditions use several indexes
//!   (its `_id`s collected, then the documents read), and index union for
//!   an `$or` whose every branch can use one, read branch after branch with
//!   a document found twice delivered once (`Source::Parts`: the first
//!   results come from the first branch, and a limit stops the reading, as
//!   MongoDB's `OR` stage; an `$in` over an index reads its ranges so too);
//! - `$in` with regular expressions, bounded by each value's point and each
//!   expression's literal-prefix range (none when one has no such prefix);
//! - a full scan;
//! - for a filter with `$text`, only the text plan: the documents the text
//!   index finds for the search's positive terms, with their scores, then
//!   the whole filter (the rest of the search included) on each.
//!
//! A [`Hint`] leaves only the candidates of the index it names (its
//! bounds, its order, or the whole index when nothing bounds it).
//! Planning reads through `Snapshot`: a read snapshot or a write
//! transaction (which sees its own changes), so queries inside a write
//! transaction are planned the same way.
//!
//! The planner estimates each candidate's keys examined by counting the
//! index (or data) entries within its bounds, capped at [`TRIAL_CAP`] (a
//! sorted candidate that reads only matches stops after skip + limit), and
//! picks the smallest estimate; ties go to a candidate that gives the sort
//! order, then to more bounded fields, then to the earlier candidate, so
//! the choice is deterministic. The winner is then weighed against the
//! full scan: a plan that fetches a document per entry and would read
//! more than 30 % of a collection of at least 1,000 documents loses to
//! the collection scan (its count goes on past the cap to find out),
//! unless it is covered, gives the sort order, or is hinted.
//!
//! The choice is cached per query shape (`plan_cache.rs`): a later query
//! of the same shape builds only the chosen candidate for its values,
//! without a trial, until the collection's metadata changes.
//!
//! Index bounds only narrow the candidates: every candidate is checked
//! against the whole filter, so a plan never changes the results, only how
//! many entries are read. An index whose entries number the collection's
//! documents (not sparse) has exactly one entry per document, so no
//! document has an array of several values in its fields: only then may
//! two conditions on one field (`$gt` and `$lte`) bound one scan, since
//! over an array each condition may match a different element (MongoDB's
//! semantics), and only then is a bounded scan read in index order (a
//! document with an array would be at its smallest element's entry, which
//! the bounds may exclude). Other sorts are done in memory after filtering.

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;

use super::collection::{id_key, CollectionMeta, IndexInfo};
use super::cursor::{slice_bound, split_id, Cursor, MergePart, Part, Source};
use super::error::{DocResult, DocumentError};
use super::filter::{Cond, ElemMatch, Filter};
use super::keys::{self, SortOrder};
use super::path::FieldPath;
use super::plan_cache::{self, Choice, Origin};
use super::text::{self, BoundText, TextFilter};
use super::value::{Document, ObjectId, Value};
use crate::seam::{SeamRead, SeamTable};
use crate::table::TableDefinition;

/// How a query finds its documents (see [`crate::document::Collection::explain`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Plan {
    /// Read every document.
    FullScan,
    /// Look these `_id`s up directly.
    IdLookup {
        /// How many `_id`s.
        ids: usize,
    },
    /// Read the documents whose `_id` lies within bounds, in `_id` order.
    IdRange {
        /// The bounds on `_id`, as readable text.
        bounds: Vec<String>,
        /// Read from the end (a descending `_id` sort).
        reverse: bool,
    },
    /// Scan an index between bounds (several bounds for `$in`).
    IndexScan {
        /// The index name.
        index: String,
        /// The bounds on its first field, as readable text.
        bounds: Vec<String>,
        /// Scanned from the end (a descending sort).
        reverse: bool,
        /// Read for its order (the sort is not done in memory).
        ordered: bool,
    },
    /// The documents found by every sub-plan (`$and` over several indexes).
    Intersection(Vec<Plan>),
    /// The documents found by any sub-plan (`$or`).
    Union(Vec<Plan>),
    /// A `$text` search: the documents the text index holds for any of the
    /// search's positive terms.
    Text {
        /// The text index's name.
        index: String,
        /// The search as the index reads it: terms, `-`negated terms,
        /// phrases.
        search: String,
    },
    /// An index scan answered from the index alone (MongoDB's
    /// `PROJECTION_COVERED` over an `IXSCAN`, without `FETCH`): the
    /// entries' covered values are the documents (FORMAT.md, "Covered
    /// values in index entries").
    Covered(Box<Plan>),
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Plan::FullScan => f.write_str("full scan"),
            Plan::IdLookup { ids } => write!(f, "_id lookup ({ids})"),
            Plan::IdRange { bounds, reverse } => write!(
                f,
                "_id range {}{}",
                bounds.join(" ∪ "),
                if *reverse { " reversed" } else { "" }
            ),
            Plan::IndexScan {
                index,
                bounds,
                reverse,
                ordered,
            } => write!(
                f,
                "index scan {index} {}{}{}",
                bounds.join(" ∪ "),
                match (*ordered, bounds.len() > 1) {
                    (true, true) => " merged in index order",
                    (true, false) => " in index order",
                    _ => "",
                },
                if *reverse { " reversed" } else { "" }
            ),
            Plan::Intersection(p) => write!(
                f,
                "intersection({})",
                p.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Plan::Union(p) => write!(
                f,
                "union({})",
                p.iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Plan::Text { index, search } => write!(f, "text {index} {search}"),
            Plan::Covered(p) => write!(f, "covered {p}"),
        }
    }
}

/// One contiguous range of index keys, with its readable form.
#[derive(Debug, Clone)]
struct KeyRange {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    text: Desc,
    /// Exactly the keys whose component is one value (`lo` is that value's
    /// encoding and `hi` the end of the keys starting with it).
    point: bool,
    /// The length of the point components every key in the range starts
    /// with (a compound bound's equality and `$in` prefix): a merge of
    /// several ranges in index order compares the keys after it.
    prefix: usize,
}

/// The readable form of a [`KeyRange`], kept in parts and written out only
/// when an explain asks for it (formatting every bound's values cost a
/// query as much as the rest of its planning).
#[derive(Debug, Clone)]
enum Desc {
    /// Text without values (`[MinKey, null)`, `(all)`).
    Fixed(&'static str),
    /// An operator and its operand (`= 5`, `> 3`).
    Op(&'static str, Value),
    /// Equality with a long value, looked up by its cut key.
    Cut(Value),
    /// An anchored string prefix.
    Prefix(String),
    /// A lower and an upper bound (inclusive flags).
    Between((Value, bool), (Value, bool)),
    /// Both ranges.
    And(Box<Desc>, Box<Desc>),
    /// Compound bounds: each field's part, in index order.
    Fields(Vec<(String, Desc)>),
}

impl std::fmt::Display for Desc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Desc::Fixed(t) => f.write_str(t),
            Desc::Op(op, v) => write!(f, "{op} {}", v.to_json()),
            Desc::Cut(v) => write!(f, "= {} (cut)", v.to_json()),
            Desc::Prefix(s) => write!(f, "prefix {s:?}"),
            Desc::Between((l, li), (h, hi)) => write!(
                f,
                "{} {} and {} {}",
                if *li { ">=" } else { ">" },
                l.to_json(),
                if *hi { "<=" } else { "<" },
                h.to_json()
            ),
            Desc::And(a, b) => write!(f, "{a} and {b}"),
            Desc::Fields(parts) if parts.is_empty() => f.write_str("(all)"),
            Desc::Fields(parts) => {
                for (i, (field, d)) in parts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{field} {d}")?;
                }
                Ok(())
            }
        }
    }
}

/// A plan with what executing it needs.
#[derive(Debug, Clone)]
enum Node {
    Full,
    Ids(Vec<Value>),
    /// Data-table key ranges (`_id` bounds).
    IdRanges {
        ranges: Vec<KeyRange>,
        reverse: bool,
    },
    Index {
        idx: IndexInfo,
        ranges: Vec<KeyRange>,
        reverse: bool,
    },
    And(Vec<Node>),
    Or(Vec<Node>),
}

impl Node {
    fn plan(&self) -> Plan {
        match self {
            Node::Full => Plan::FullScan,
            Node::Ids(ids) => Plan::IdLookup { ids: ids.len() },
            Node::IdRanges { ranges, reverse } => Plan::IdRange {
                bounds: ranges.iter().map(|r| r.text.to_string()).collect(),
                reverse: *reverse,
            },
            Node::Index {
                idx,
                ranges,
                reverse,
            } => Plan::IndexScan {
                index: idx.name.clone(),
                bounds: ranges.iter().map(|r| r.text.to_string()).collect(),
                reverse: *reverse,
                ordered: false,
            },
            Node::And(n) => Plan::Intersection(n.iter().map(Node::plan).collect()),
            Node::Or(n) => Plan::Union(n.iter().map(Node::plan).collect()),
        }
    }

    /// A rough cost: lower is better.
    fn cost(&self) -> u32 {
        match self {
            Node::Full => 1000,
            Node::Ids(_) | Node::IdRanges { .. } => 1,
            Node::Index { ranges, .. } => index_cost(ranges),
            Node::And(n) => n.iter().map(Node::cost).min().unwrap_or(1000),
            Node::Or(n) => n.iter().map(Node::cost).sum::<u32>().min(999),
        }
    }
}

/// [`Node::cost`] of an index scan of `ranges`.
fn index_cost(ranges: &[KeyRange]) -> u32 {
    let point = ranges.iter().all(|r| r.point);
    (if point { 10 } else { 100 }) + ranges.len() as u32
}

/// The smallest byte string greater than every string starting with `p`.
pub(crate) fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xFF {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

fn enc(v: &Value, order: SortOrder) -> DocResult<Vec<u8>> {
    let mut out = Vec::new();
    keys::encode_component(v, order, &mut out)?;
    Ok(out)
}

/// The smallest value of `v`'s type bracket and the smallest value of the
/// next bracket (`None` for brackets the planner does not range over), in
/// the order of [`keys::compare`] (MongoDB's: numbers < strings < objects
/// < arrays < binary and UUIDs < ids < booleans < dates).
fn bracket(v: &Value) -> Option<(Value, Option<Value>)> {
    Some(match v {
        Value::Int(_) | Value::Float(_) => {
            (Value::Float(f64::NAN), Some(Value::String(String::new())))
        }
        Value::String(_) => (
            Value::String(String::new()),
            Some(Value::Object(Document::new())),
        ),
        Value::Binary(_) | Value::Uuid(_) => (
            Value::Binary(Vec::new()),
            Some(Value::Id(ObjectId::from_bytes([0; 12]))),
        ),
        Value::Bool(_) => (Value::Bool(false), Some(Value::Date(i64::MIN))),
        Value::Date(_) => (Value::Date(i64::MIN), None),
        _ => return None,
    })
}

/// All keys whose first component is exactly `v`.
fn point(v: &Value, order: SortOrder) -> DocResult<KeyRange> {
    let p = enc(v, order)?;
    Ok(KeyRange {
        hi: prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded),
        lo: Bound::Included(p),
        text: Desc::Op("=", v.clone()),
        point: true,
        prefix: 0,
    })
}

/// The keys a null condition reads: null (documents missing the field
/// are indexed under it) and the empty array.
fn null_points(order: SortOrder) -> DocResult<Vec<KeyRange>> {
    Ok(vec![
        point(&Value::Null, order)?,
        point(&Value::Array(Vec::new()), order)?,
    ])
}

/// Keys whose first component lies between `lo` and `hi` (value bounds;
/// inclusive flags), in the index's byte order for `order`.
fn between(
    lo: Option<(&Value, bool)>,
    hi: Option<(&Value, bool)>,
    order: SortOrder,
    text: Desc,
) -> DocResult<KeyRange> {
    // Ascending byte bounds of the value range.
    let lo_b = match lo {
        Some((v, true)) => Bound::Included(enc(v, SortOrder::Ascending)?),
        Some((v, false)) => {
            let p = enc(v, SortOrder::Ascending)?;
            prefix_end(&p).map_or(Bound::Unbounded, Bound::Included)
        }
        None => Bound::Unbounded,
    };
    let hi_b = match hi {
        Some((v, true)) => {
            let p = enc(v, SortOrder::Ascending)?;
            prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded)
        }
        Some((v, false)) => Bound::Excluded(enc(v, SortOrder::Ascending)?),
        None => Bound::Unbounded,
    };
    if order == SortOrder::Ascending {
        return Ok(KeyRange {
            lo: lo_b,
            hi: hi_b,
            text,
            point: false,
            prefix: 0,
        });
    }
    // Descending components are the inverted bytes: the range flips.
    let inv = |b: &[u8]| b.iter().map(|x| !x).collect::<Vec<u8>>();
    let new_lo = match &hi_b {
        Bound::Excluded(b) => Bound::Excluded(inv(b)),
        Bound::Included(b) => Bound::Included(inv(b)),
        Bound::Unbounded => Bound::Unbounded,
    };
    // An ascending inclusive lower bound `b` covers every key starting
    // with it; inverted, those keys start with inv(b) and may run past it.
    let new_hi = match &lo_b {
        Bound::Included(b) => prefix_end(&inv(b)).map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Excluded(b) => Bound::Excluded(inv(b)),
        Bound::Unbounded => Bound::Unbounded,
    };
    Ok(KeyRange {
        lo: new_lo,
        hi: new_hi,
        text,
        point: false,
        prefix: 0,
    })
}

/// The ranges an index whose first field is `order` can use for `cond`.
fn ranges_for(cond: &Cond, order: SortOrder) -> DocResult<Option<Vec<KeyRange>>> {
    // An operand too long for an index component is cut in index entries
    // (keys.rs, "Long values"): no range bounds for it (the filter
    // decides); equality looks up both its whole key (an `_id`, never cut)
    // and its cut one (an index entry), the documents re-checked.
    let long = match cond {
        Cond::Gt(v) | Cond::Gte(v) | Cond::Lt(v) | Cond::Lte(v) => keys::is_long(v),
        Cond::Prefix(p) => keys::is_long(&Value::String(p.clone())),
        _ => false,
    };
    if long {
        return Ok(None);
    }
    let points = |v: &Value, out: &mut Vec<KeyRange>| -> DocResult<()> {
        out.push(point(v, order)?);
        if keys::is_long(v) {
            let mut p = Vec::new();
            keys::encode_index_component(v, order, &mut p)?;
            out.push(KeyRange {
                hi: prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded),
                lo: Bound::Included(p),
                text: Desc::Cut(v.clone()),
                point: true,
                prefix: 0,
            });
        }
        Ok(())
    };
    Ok(match cond {
        // Null matches a missing field too (MongoDB): documents missing it
        // have a null entry (a sparse index has none and is not asked),
        // and the empty array's entry is read as well (its own entry).
        Cond::Eq(Value::Null) => Some(null_points(order)?),
        Cond::Exists(false) => Some(vec![point(&Value::Null, order)?]),
        // Exists: every key, asked of a sparse index only (`null_ok`),
        // which lacks the documents without the field (MongoDB uses a
        // sparse index for `$exists: true` the same way).
        Cond::Exists(true) => Some(vec![KeyRange {
            lo: Bound::Unbounded,
            hi: Bound::Unbounded,
            text: Desc::Fixed("[MinKey, MaxKey]"),
            point: false,
            prefix: 0,
        }]),
        // Not null: every key but null's (MongoDB's bounds `[MinKey,
        // null), (null, MaxKey]`). A document matching it has a value
        // other than null there, so an entry outside null's keys (a whole
        // empty array has its own, below null); `null_ok` keeps dotted
        // paths out. The filter rejects the documents that also hold a
        // null (`[null, 1]`).
        c if not_null(c) => {
            let p = enc(&Value::Null, order)?;
            Some(vec![
                KeyRange {
                    lo: Bound::Unbounded,
                    hi: Bound::Excluded(p.clone()),
                    text: Desc::Fixed("[MinKey, null)"),
                    point: false,
                    prefix: 0,
                },
                KeyRange {
                    lo: prefix_end(&p).map_or(Bound::Unbounded, Bound::Included),
                    hi: Bound::Unbounded,
                    text: Desc::Fixed("(null, MaxKey]"),
                    point: false,
                    prefix: 0,
                },
            ])
        }
        Cond::Eq(v) if !matches!(v, Value::Array(_) | Value::Object(_)) => {
            let mut r = Vec::new();
            points(v, &mut r)?;
            Some(r)
        }
        Cond::In(vs)
            if !vs.is_empty()
                && vs
                    .iter()
                    .all(|v| !matches!(v, Value::Array(_) | Value::Object(_))) =>
        {
            let mut r = Vec::new();
            for v in vs {
                if matches!(v, Value::Null) {
                    r.extend(null_points(order)?);
                } else {
                    points(v, &mut r)?;
                }
            }
            Some(r)
        }
        // `$in` with regular expressions (MongoDB's bounds: each value's
        // point and each expression's range): used when every expression
        // has a literal prefix (`/^ab/`), whose range it scans; one
        // without would read every string.
        Cond::InRegex(vs, res)
            if vs
                .iter()
                .all(|v| !matches!(v, Value::Array(_) | Value::Object(_))) =>
        {
            let mut r = Vec::new();
            if let Some(rs) = ranges_for(&Cond::In(vs.clone()), order)? {
                r.extend(rs);
            }
            for re in res {
                let Some(p) = re.literal_prefix() else {
                    return Ok(None);
                };
                match ranges_for(&Cond::Prefix(p.to_string()), order)? {
                    Some(rs) => r.extend(rs),
                    None => return Ok(None),
                }
            }
            (!r.is_empty()).then_some(r)
        }
        Cond::Gt(v) | Cond::Gte(v) | Cond::Lt(v) | Cond::Lte(v) => {
            let Some((min, next)) = bracket(v) else {
                return Ok(None);
            };
            let (lo, hi) = match cond {
                Cond::Gt(_) => (Some((v, false)), next.as_ref().map(|n| (n, false))),
                Cond::Gte(_) => (Some((v, true)), next.as_ref().map(|n| (n, false))),
                Cond::Lt(_) => (Some((&min, true)), Some((v, false))),
                _ => (Some((&min, true)), Some((v, true))),
            };
            let op = match cond {
                Cond::Gt(_) => ">",
                Cond::Gte(_) => ">=",
                Cond::Lt(_) => "<",
                _ => "<=",
            };
            Some(vec![between(lo, hi, order, Desc::Op(op, v.clone()))?])
        }
        Cond::Prefix(s) => {
            let full = enc(&Value::String(s.clone()), SortOrder::Ascending)?;
            // The string's bytes without its 2-byte terminator.
            let p = full
                .get(..full.len().saturating_sub(2))
                .unwrap_or(&[])
                .to_vec();
            let (lo, hi) = match order {
                SortOrder::Ascending => (p.clone(), prefix_end(&p)),
                SortOrder::Descending => {
                    let ip: Vec<u8> = p.iter().map(|x| !x).collect();
                    (ip.clone(), prefix_end(&ip))
                }
            };
            Some(vec![KeyRange {
                lo: Bound::Included(lo),
                hi: hi.map_or(Bound::Unbounded, Bound::Excluded),
                text: Desc::Prefix(s.clone()),
                point: false,
                prefix: 0,
            }])
        }
        Cond::Regex(re) => match re.literal_prefix() {
            // Every match starts with the literal prefix: scan its range,
            // the regular expression is checked on the documents.
            Some(p) => ranges_for(&Cond::Prefix(p.to_string()), order)?,
            None => None,
        },
        Cond::ElemMatch(ElemMatch::Element(c)) => {
            // One element must satisfy every condition: the bounds combine.
            match c.as_ref() {
                Cond::All(cs) => combined(cs, order)?,
                c => ranges_for(c, order)?,
            }
        }
        Cond::All(cs) => {
            // Several conditions on one field: use the most selective one
            // (`$exists: true` bounds nothing but a sparse index's
            // documents, which the other conditions are asked of too).
            let mut best: Option<Vec<KeyRange>> = None;
            for c in cs.iter().filter(|c| !matches!(c, Cond::Exists(true))) {
                if let Some(r) = ranges_for(c, order)? {
                    let point = r.iter().all(|x| x.point);
                    if best.is_none() || point {
                        best = Some(r);
                    }
                }
            }
            best
        }
        _ => None,
    })
}

/// One range for conditions that one index entry must meet together (the
/// element conditions of `$elemMatch`): a lower and an upper bound of the
/// same type bracket combine; otherwise the most selective condition.
fn combined(cs: &[Cond], order: SortOrder) -> DocResult<Option<Vec<KeyRange>>> {
    let lo = cs.iter().find_map(|c| match c {
        Cond::Gt(v) => Some((v, false)),
        Cond::Gte(v) => Some((v, true)),
        _ => None,
    });
    let hi = cs.iter().find_map(|c| match c {
        Cond::Lt(v) => Some((v, false)),
        Cond::Lte(v) => Some((v, true)),
        _ => None,
    });
    if let (Some((l, li)), Some((h, hi_inc))) = (lo, hi) {
        if bracket(l).is_some() && bracket(l).map(|b| b.0.kind()) == bracket(h).map(|b| b.0.kind())
        {
            let text = Desc::Between((l.clone(), li), (h.clone(), hi_inc));
            return Ok(Some(vec![between(
                Some((l, li)),
                Some((h, hi_inc)),
                order,
                text,
            )?]));
        }
    }
    ranges_for(&Cond::All(cs.to_vec()), order)
}

fn id_values(cond: &Cond) -> Option<Vec<Value>> {
    let scalar = |v: &Value| !matches!(v, Value::Array(_) | Value::Object(_) | Value::Null);
    match cond {
        Cond::Eq(v) if scalar(v) => Some(vec![v.clone()]),
        Cond::In(vs) if vs.iter().all(scalar) => Some(vs.clone()),
        _ => None,
    }
}

/// The best node for one filter.
fn plan_filter(f: &Filter, meta: &CollectionMeta) -> DocResult<Node> {
    match f {
        Filter::Field { path, cond } => {
            if path.as_str() == "_id" {
                if let Some(ids) = id_values(cond) {
                    return Ok(Node::Ids(ids));
                }
            }
            let mut best = Node::Full;
            for idx in meta.indexes.iter().filter(|i| i.text.is_none()) {
                let Some((first, o)) = idx.fields.first() else {
                    continue;
                };
                if first != path.as_str() || !null_ok(idx, path.as_str(), cond) {
                    continue;
                }
                let order = if *o < 0 {
                    SortOrder::Descending
                } else {
                    SortOrder::Ascending
                };
                if let Some(ranges) = ranges_for(cond, order)? {
                    // The index is cloned into a node only when it wins.
                    if index_cost(&ranges) < best.cost() {
                        best = Node::Index {
                            idx: idx.clone(),
                            ranges,
                            reverse: false,
                        };
                    }
                }
            }
            Ok(best)
        }
        Filter::And(fs) => {
            let mut nodes: Vec<Node> = Vec::new();
            for f in fs {
                let n = plan_filter(f, meta)?;
                if !matches!(n, Node::Full) {
                    nodes.push(n);
                }
            }
            nodes.sort_by_key(Node::cost);
            // Intersect at most the three most selective indexes.
            nodes.truncate(3);
            Ok(match nodes.len() {
                0 => Node::Full,
                1 => nodes.remove(0),
                _ if matches!(nodes[0], Node::Ids(_)) => nodes.remove(0),
                _ => Node::And(nodes),
            })
        }
        Filter::Or(fs) => {
            let mut nodes = Vec::new();
            for f in fs {
                let n = plan_filter(f, meta)?;
                if matches!(n, Node::Full) {
                    return Ok(Node::Full);
                }
                nodes.push(n);
            }
            Ok(if nodes.is_empty() {
                Node::Full
            } else {
                Node::Or(nodes)
            })
        }
        Filter::Nor(_) | Filter::True | Filter::Expr(_) | Filter::Text(_) => Ok(Node::Full),
    }
}

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::internal(name)
}

/// The `_id` keys a node finds, in `_id` order, and the entries read.
fn ids_of<S: Snapshot + ?Sized>(
    node: &Node,
    r: &S,
    meta: &CollectionMeta,
) -> DocResult<(BTreeSet<Vec<u8>>, u64)> {
    let mut examined = 0;
    let mut out = BTreeSet::new();
    match node {
        Node::Full => {
            if let Some(t) = r.table(&meta.data_table())? {
                for item in t.iter()? {
                    let (k, _) = item?;
                    examined += 1;
                    out.insert(k.value().to_vec());
                }
            }
        }
        Node::Ids(ids) => {
            for id in ids {
                out.insert(id_key(id)?);
            }
        }
        Node::IdRanges { ranges, .. } => {
            if let Some(t) = r.table(&meta.data_table())? {
                for range in ranges {
                    for item in
                        t.range::<&[u8]>((slice_bound(&range.lo), slice_bound(&range.hi)))?
                    {
                        let (k, _) = item?;
                        examined += 1;
                        out.insert(k.value().to_vec());
                    }
                }
            }
        }
        Node::Index { idx, ranges, .. } => {
            let orders = idx.orders();
            let Some(t) = r.table(&meta.index_table(idx))? else {
                return Ok((out, 0));
            };
            for range in ranges {
                for item in t.range::<&[u8]>((slice_bound(&range.lo), slice_bound(&range.hi)))? {
                    let (k, _) = item?;
                    examined += 1;
                    out.insert(split_id(k.value(), &orders)?.to_vec());
                }
            }
        }
        Node::And(nodes) => {
            let mut acc: Option<BTreeSet<Vec<u8>>> = None;
            for n in nodes {
                let (s, e) = ids_of(n, r, meta)?;
                examined += e;
                acc = Some(match acc {
                    None => s,
                    Some(a) => a.intersection(&s).cloned().collect(),
                });
            }
            out = acc.unwrap_or_default();
        }
        Node::Or(nodes) => {
            for n in nodes {
                let (s, e) = ids_of(n, r, meta)?;
                examined += e;
                out.extend(s);
            }
        }
    }
    Ok((out, examined))
}

/// The parts a union (or a node of several ranges) reads, in its branches'
/// order ([`Source::Parts`]); an intersection within it is planned as a
/// whole (its `_id`s, counted in `examined`).
fn parts_of<S: Snapshot + ?Sized>(
    node: &Node,
    r: &S,
    meta: &CollectionMeta,
    parts: &mut VecDeque<Part>,
    examined: &mut u64,
) -> DocResult<()> {
    match node {
        Node::Index { idx, ranges, .. } => {
            let table = meta.index_table(idx).into_owned();
            let orders = idx.orders();
            parts.extend(ranges.iter().map(|range| Part::Index {
                table: table.clone(),
                lo: range.lo.clone(),
                hi: range.hi.clone(),
                orders: orders.clone(),
            }));
        }
        Node::IdRanges { ranges, .. } => parts.extend(ranges.iter().map(|range| Part::Keys {
            lo: range.lo.clone(),
            hi: range.hi.clone(),
        })),
        Node::Ids(ids) => {
            parts.push_back(Part::Ids(ids.iter().map(id_key).collect::<DocResult<_>>()?))
        }
        Node::Or(nodes) => {
            for n in nodes {
                parts_of(n, r, meta, parts, examined)?;
            }
        }
        Node::And(_) | Node::Full => {
            let (ids, e) = ids_of(node, r, meta)?;
            *examined += e;
            parts.push_back(Part::Ids(ids.into_iter().collect()));
        }
    }
    Ok(())
}

/// The most entries counted to estimate one candidate's keys examined.
pub const TRIAL_CAP: u64 = 10_000;

/// At most this many point prefixes (`$in` values multiplied over the
/// equality fields of a compound index) in one candidate.
const MAX_PREFIXES: usize = 256;

/// One plan the planner considered, with its estimate (see
/// [`crate::document::Explain::candidates`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The plan.
    pub plan: Plan,
    /// Estimated entries examined: index (or data) entries within its
    /// bounds, counted up to [`TRIAL_CAP`] (the winner, when it fetches
    /// documents, on up to the share of the collection where a
    /// collection scan becomes cheaper); for a plan that delivers the
    /// sort order and reads only matches, at most skip + limit. `None`
    /// when the plan came from the plan cache ([`Explain::from_plan_cache`](crate::document::query::Explain::from_plan_cache)):
    /// it is then the only candidate, not counted.
    pub estimate: Option<u64>,
    /// Whether it delivers the requested sort order.
    pub sorted: bool,
    /// Whether it was chosen.
    pub chosen: bool,
}

/// The lower of two lower bounds' positions: `true` when `a` starts at or
/// after `b`.
fn lo_at_or_after(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> bool {
    match (a, b) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(x), Bound::Included(y)) => x >= y,
        (Bound::Excluded(x), Bound::Excluded(y)) => x >= y,
        (Bound::Excluded(x), Bound::Included(y)) => x >= y,
        (Bound::Included(x), Bound::Excluded(y)) => x > y,
    }
}

/// `true` when upper bound `a` ends at or before `b`.
fn hi_at_or_before(a: &Bound<Vec<u8>>, b: &Bound<Vec<u8>>) -> bool {
    match (a, b) {
        (_, Bound::Unbounded) => true,
        (Bound::Unbounded, _) => false,
        (Bound::Included(x), Bound::Included(y)) => x <= y,
        (Bound::Excluded(x), Bound::Excluded(y)) => x <= y,
        (Bound::Excluded(x), Bound::Included(y)) => x <= y,
        (Bound::Included(x), Bound::Excluded(y)) => x < y,
    }
}

/// Whether no key lies between `lo` and `hi`.
fn is_empty(lo: &Bound<Vec<u8>>, hi: &Bound<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Bound::Unbounded, _) | (_, Bound::Unbounded) => false,
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
    }
}

/// The keys in both ranges (`None` when there are none).
fn intersect(a: &KeyRange, b: &KeyRange) -> Option<KeyRange> {
    let lo = if lo_at_or_after(&a.lo, &b.lo) {
        a.lo.clone()
    } else {
        b.lo.clone()
    };
    let hi = if hi_at_or_before(&a.hi, &b.hi) {
        a.hi.clone()
    } else {
        b.hi.clone()
    };
    if is_empty(&lo, &hi) {
        return None;
    }
    // Still exactly one value's keys when it is a point's whole range.
    let point = [a, b].iter().any(|r| r.point && r.lo == lo && r.hi == hi);
    let text = if a.point && point {
        a.text.clone()
    } else if b.point && point {
        b.text.clone()
    } else {
        Desc::And(Box::new(a.text.clone()), Box::new(b.text.clone()))
    };
    Some(KeyRange {
        lo,
        hi,
        text,
        point,
        prefix: 0,
    })
}

/// The conditions that every matching document meets, by path: the
/// fields of the filter's top-level conjunction (`Cond::All` split), and
/// those of an `$elemMatch` document under its array's path (`{items:
/// {$elemMatch: {sku: "a"}}}` needs an `items.sku` equal to `"a"`).
fn conjuncts<'f>(f: &'f Filter, out: &mut Vec<(String, &'f Cond)>) {
    conjuncts_under(f, "", out);
}

fn conjuncts_under<'f>(f: &'f Filter, prefix: &str, out: &mut Vec<(String, &'f Cond)>) {
    // Null conditions on dotted paths (and inside `$elemMatch`, whose
    // paths are dotted) are kept: `null_ok` decides per index whether its
    // entries answer them.
    let push = |out: &mut Vec<(String, &'f Cond)>, path: String, c: &'f Cond| {
        out.push((path, c));
    };
    match f {
        Filter::And(fs) => fs.iter().for_each(|f| conjuncts_under(f, prefix, out)),
        Filter::Field { path, cond } => {
            let full = format!("{prefix}{}", path.as_str());
            match cond {
                Cond::All(cs) => {
                    for c in cs {
                        match c {
                            Cond::ElemMatch(ElemMatch::Document(inner)) => {
                                conjuncts_under(inner, &format!("{full}."), out)
                            }
                            c => push(out, full.clone(), c),
                        }
                    }
                }
                Cond::ElemMatch(ElemMatch::Document(inner)) => {
                    conjuncts_under(inner, &format!("{full}."), out)
                }
                c => push(out, full, c),
            }
        }
        _ => {}
    }
}

/// Whether index `idx` may answer condition `c` on `path` (its field).
/// A sparse index lacks documents missing the field: only conditions that
/// need the field to exist may use it. On a dotted path an array element
/// lacking the field matches a null condition (MongoDB: `{"a.b": null}`
/// matches `{a: [{b: 1}, {}]}`), and only an index with null entries for
/// such elements (`null_elements`, FORMAT.md format 5) has the document
/// under null; an older one gives null no bounds there (a scan).
///
/// `$ne: null` (and `$nin` with null, `$not: {$eq: null}`) reads every
/// key but null's (MongoDB's bounds `[MinKey, null), (null, MaxKey]`).
/// On a dotted path that holds only while no document has an array on
/// the way (MongoDB: while the index is not multikey there): `{a: [1,
/// 2]}` and `{a: []}` reach nothing on `a.b`, so their only entry is
/// null, yet match `{"a.b": {$ne: null}}` (MongoDB's "Query for Null or
/// Missing Fields"). Without such an array a document reaches at most
/// one value there, and matches exactly when that value is not null (nor
/// an array holding null): its entries then include one other than null.
/// [`IndexInfo::prefix_flat`] tells, from the flags the writer keeps;
/// any index may answer it on a top-level path, a sparse one too (a
/// document missing the field does not match it).
///
/// `$exists: true` reads every key of a sparse index (MongoDB's use of a
/// sparse index for it), which has an entry for every document that
/// reaches a value on the path, on a dotted path with the same proviso
/// (an index path's lookup and the filter's then meet only objects, so
/// they agree on whether the field exists).
fn null_ok(idx: &IndexInfo, path: &str, c: &Cond) -> bool {
    if has_not_null(c) && !idx.prefix_flat(path) {
        return false;
    }
    if matches!(c, Cond::Exists(true)) && !(idx.sparse && idx.prefix_flat(path)) {
        return false;
    }
    !needs_null(c) || !(idx.sparse || (path.contains('.') && !idx.null_elements))
}

/// Whether `c` is `$ne: null`, a `$nin` holding null or the `$not` of a
/// null equality (or of an `$in` holding null): a document matches only
/// with a value other than null at the path (`$ne` is `$not: {$eq}`).
fn not_null(c: &Cond) -> bool {
    let in_null = |vs: &[Value]| vs.iter().any(|v| matches!(v, Value::Null));
    match c {
        Cond::Ne(Value::Null) => true,
        Cond::Nin(vs) => in_null(vs),
        Cond::Not(inner) => match inner.as_ref() {
            Cond::Eq(Value::Null) => true,
            Cond::In(vs) => in_null(vs),
            _ => false,
        },
        _ => false,
    }
}

/// Whether `c` or one of the conditions it combines is [`not_null`].
fn has_not_null(c: &Cond) -> bool {
    match c {
        Cond::All(cs) => cs.iter().any(has_not_null),
        c => not_null(c),
    }
}

/// Whether `c` matches a missing field (so an index can answer it only
/// through the null entries of documents missing the field, which a
/// sparse index lacks).
fn needs_null(c: &Cond) -> bool {
    match c {
        Cond::Eq(Value::Null) | Cond::Exists(false) => true,
        Cond::In(vs) | Cond::InRegex(vs, _) => vs.iter().any(|v| matches!(v, Value::Null)),
        Cond::All(cs) => cs.iter().any(needs_null),
        _ => false,
    }
}

/// The key ranges of one index field for the conditions on it. With
/// `single_key` (one value per document) every condition's ranges
/// intersect; otherwise only one condition's ranges are used (the first
/// with points, else the first usable).
fn field_ranges(
    conds: &[&Cond],
    order: SortOrder,
    single_key: bool,
) -> DocResult<Option<Vec<KeyRange>>> {
    let mut acc: Option<Vec<KeyRange>> = None;
    for c in conds {
        let Some(rs) = ranges_for(c, order)? else {
            continue;
        };
        acc = Some(match acc {
            None => rs,
            Some(prev) if single_key => {
                let mut out = Vec::new();
                for a in &prev {
                    for b in &rs {
                        out.extend(intersect(a, b));
                    }
                }
                out
            }
            Some(prev) => {
                let prev_points = prev.iter().all(|r| r.point);
                let new_points = rs.iter().all(|r| r.point);
                // Points first, then any range before every key's.
                if (new_points && !prev_points) || (every_key(&prev) && !every_key(&rs)) {
                    rs
                } else {
                    prev
                }
            }
        });
    }
    Ok(acc)
}

/// Whether `rs` is the one range of every key (`$exists: true`).
fn every_key(rs: &[KeyRange]) -> bool {
    matches!(rs, [r] if r.lo == Bound::Unbounded && r.hi == Bound::Unbounded)
}

/// `p` followed by the keys of `b` (a bound within the keys starting
/// with `p`), as a lower (`upper == false`) or upper bound.
fn prefixed(p: &[u8], b: &Bound<Vec<u8>>, upper: bool) -> Bound<Vec<u8>> {
    let cat = |x: &[u8]| [p, x].concat();
    match b {
        Bound::Included(x) => Bound::Included(cat(x)),
        Bound::Excluded(x) => Bound::Excluded(cat(x)),
        Bound::Unbounded if !upper => {
            if p.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Included(p.to_vec())
            }
        }
        Bound::Unbounded => prefix_end(p).map_or(Bound::Unbounded, Bound::Excluded),
    }
}

/// Each bounded field of a compound bound with its readable part.
type FieldDescs = Vec<(String, Desc)>;

/// An index's bounds for a filter's conjunction.
struct IndexBounds {
    ranges: Vec<KeyRange>,
    /// Leading fields bounded to one value each.
    eq_fields: usize,
    /// Fields bounded (points, then at most one range).
    bounded: usize,
    /// Leading fields bounded by points (one value or several).
    point_fields: usize,
    /// Whether every point prefix holds its values whole (none is a cut
    /// long value, `keys::is_exact`): the keys after it are then in the
    /// order of the fields that follow.
    exact_prefixes: bool,
}

/// The compound bounds index `idx` gives the conjunction `conj`.
fn index_bounds(
    idx: &IndexInfo,
    conj: &[(String, &Cond)],
    single_key: bool,
) -> DocResult<IndexBounds> {
    // Each prefix: the encoded point components so far and their text.
    let mut prefixes: Vec<(Vec<u8>, FieldDescs)> = vec![(Vec::new(), Vec::new())];
    let mut terminal: Option<(String, Vec<KeyRange>)> = None;
    let mut bounded = 0;
    let mut eq_fields = 0;
    let mut point_fields = 0;
    let mut single_prefix = true;
    for (field, o) in &idx.fields {
        let order = if *o < 0 {
            SortOrder::Descending
        } else {
            SortOrder::Ascending
        };
        let conds: Vec<&Cond> = conj
            .iter()
            .filter(|(p, c)| p == field && null_ok(idx, p, c))
            .map(|(_, c)| *c)
            .collect();
        let Some(rs) = field_ranges(&conds, order, single_key)? else {
            break;
        };
        bounded += 1;
        if rs.iter().all(|r| r.point) && prefixes.len() * rs.len() <= MAX_PREFIXES {
            let mut next = Vec::with_capacity(prefixes.len() * rs.len());
            for (p, t) in &prefixes {
                for r in &rs {
                    let Bound::Included(c) = &r.lo else {
                        continue;
                    };
                    let mut t = t.clone();
                    t.push((field.clone(), r.text.clone()));
                    next.push(([p.as_slice(), c].concat(), t));
                }
            }
            prefixes = next;
            point_fields += 1;
            single_prefix &= rs.len() == 1;
            if single_prefix {
                eq_fields += 1;
            }
            continue;
        }
        terminal = Some((field.clone(), rs));
        break;
    }
    let mut ranges = Vec::new();
    for (p, t) in &prefixes {
        match &terminal {
            Some((field, rs)) => {
                for r in rs {
                    let mut t = t.clone();
                    t.push((field.clone(), r.text.clone()));
                    ranges.push(KeyRange {
                        lo: prefixed(p, &r.lo, false),
                        hi: prefixed(p, &r.hi, true),
                        text: Desc::Fields(t),
                        point: false,
                        prefix: p.len(),
                    });
                }
            }
            None => ranges.push(KeyRange {
                lo: prefixed(p, &Bound::Unbounded, false),
                hi: prefixed(p, &Bound::Unbounded, true),
                text: Desc::Fields(t.clone()),
                point: false,
                prefix: p.len(),
            }),
        }
    }
    let exact_prefixes = prefixes.iter().all(|(p, _)| keys::is_exact(p));
    Ok(IndexBounds {
        ranges,
        eq_fields,
        bounded,
        point_fields,
        exact_prefixes,
    })
}

/// Whether every condition of `filter` is a top-level field condition on
/// one of `fields` that the bounds express exactly (so that every entry in
/// the bounds is a match): equality, `$in` and ranges of scalars.
fn bounds_exact(filter: &Filter, fields: &[&str]) -> bool {
    let scalar = |v: &Value| bracket(v).is_some() && !keys::is_long(v);
    let simple = |c: &Cond| match c {
        Cond::Eq(v) | Cond::Gt(v) | Cond::Gte(v) | Cond::Lt(v) | Cond::Lte(v) => scalar(v),
        Cond::In(vs) => vs.iter().all(scalar),
        _ => false,
    };
    let field_exact = |f: &Filter| match f {
        Filter::Field { path, cond } => {
            fields.contains(&path.as_str())
                && match cond {
                    Cond::All(cs) => cs.iter().all(simple),
                    c => simple(c),
                }
        }
        _ => false,
    };
    match filter {
        Filter::True => true,
        Filter::Field { .. } => field_exact(filter),
        Filter::And(fs) => fs.iter().all(field_exact),
        _ => false,
    }
}

/// Entries of `table` within `ranges`, counted up to `cap`.
fn count_capped<S: Snapshot + ?Sized>(
    r: &S,
    table: &str,
    ranges: &[KeyRange],
    cap: u64,
) -> DocResult<u64> {
    let Some(t) = r.table(table)? else {
        return Ok(0);
    };
    let mut n = 0;
    for range in ranges {
        for item in t.range::<&[u8]>((slice_bound(&range.lo), slice_bound(&range.hi)))? {
            item?;
            n += 1;
            if n >= cap {
                return Ok(n);
            }
        }
    }
    Ok(n)
}

/// Estimated entries a node examines (capped at `cap`).
fn estimate<S: Snapshot + ?Sized>(
    node: &Node,
    r: &S,
    meta: &CollectionMeta,
    data_len: u64,
    cap: u64,
) -> DocResult<u64> {
    Ok(match node {
        Node::Full => data_len,
        Node::Ids(ids) => ids.len() as u64,
        Node::IdRanges { ranges, .. } => count_capped(r, &meta.data_table(), ranges, cap)?,
        Node::Index { idx, ranges, .. } => count_capped(r, &meta.index_table(idx), ranges, cap)?,
        Node::And(ns) | Node::Or(ns) => {
            let mut sum = 0u64;
            for n in ns {
                sum = sum.saturating_add(estimate(n, r, meta, data_len, cap.saturating_sub(sum))?);
                if sum >= cap {
                    break;
                }
            }
            sum
        }
    })
}

/// Whether index `idx`'s fields from `from` on give `sort`'s order: `Some`
/// with whether reversed, or `None`.
fn sort_direction(
    fields: &[(String, i8)],
    from: usize,
    sort: &[(FieldPath, SortOrder)],
) -> Option<bool> {
    let rest = fields.get(from..)?;
    if sort.is_empty() || rest.len() < sort.len() {
        return None;
    }
    let pairs = || rest.iter().zip(sort);
    let same = pairs()
        .all(|((p, o), (sp, so))| p == sp.as_str() && (*o < 0) == (*so == SortOrder::Descending));
    let flipped = pairs()
        .all(|((p, o), (sp, so))| p == sp.as_str() && (*o < 0) != (*so == SortOrder::Descending));
    if same {
        Some(false)
    } else if flipped {
        Some(true)
    } else {
        None
    }
}

/// The plan of a candidate (an index scan marked when read for its order).
fn plan_of(c: &Cand) -> Plan {
    match c.node.plan() {
        Plan::IndexScan {
            index,
            bounds,
            reverse,
            ..
        } => Plan::IndexScan {
            index,
            bounds,
            reverse,
            ordered: c.sorted,
        },
        p => p,
    }
}

/// One candidate while planning.
pub(crate) struct Cand {
    node: Node,
    sorted: bool,
    /// Bounded index fields (a tie-break: more is better).
    bounded: usize,
    /// Every entry in its bounds is a match (a sorted plan with a limit
    /// stops after skip + limit entries).
    exact: bool,
    /// What built it (what the plan cache keeps when it wins).
    origin: Origin,
}

/// A planned query over one snapshot.
pub(crate) struct Planned {
    pub source: Source,
    pub index_orders: Vec<SortOrder>,
    /// Entries read while planning (eager id sets).
    pub examined: u64,
    /// Whether the source already delivers the requested sort order.
    pub sorted: bool,
    /// The plan chosen and every plan considered, for explain.
    pub described: Described,
    /// The filter to check candidates with, when planning changed it: its
    /// `$text` resolved against the text index.
    pub filter: Option<Filter>,
    /// A `$text` query's score of each document it found, by `_id` key.
    pub text_scores: Option<std::sync::Arc<std::collections::HashMap<Vec<u8>, f64>>>,
}

fn table_len<S: Snapshot + ?Sized>(r: &S, name: &str) -> DocResult<u64> {
    r.table(name)?.map_or(Ok(0), |t| Ok(t.len()?))
}

/// The candidate plans for `filter` and `sort`, in a fixed order.
fn candidates<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    hint: Option<&Hint>,
) -> DocResult<Vec<Cand>> {
    if let Some(h) = hint {
        return hinted(r, meta, filter, sort, data_len, h);
    }
    let mut conj = Vec::new();
    conjuncts(filter, &mut conj);
    // The filter's own plan: `_id` lookup, one index, intersection, union
    // (considered after the single scans: on a tie, one scan is simpler;
    // a single index scan there is one of the index candidates).
    let legacy = plan_filter(filter, meta)?;
    let legacy_is_ids = matches!(legacy, Node::Ids(_));
    let mut out = id_candidates(&conj, filter, sort, legacy_is_ids, false)?;
    for (pos, idx) in meta.indexes.iter().enumerate() {
        if idx.text.is_none() {
            out.extend(index_candidates(
                r, meta, idx, &conj, filter, sort, data_len, false, pos,
            )?);
        }
    }
    if matches!(legacy, Node::Ids(_) | Node::And(_) | Node::Or(_)) {
        out.push(Cand {
            node: legacy,
            sorted: false,
            bounded: 1,
            exact: false,
            origin: Origin::Legacy,
        });
    }
    out.push(full_scan());
    Ok(out)
}

/// A range over every key.
fn all_keys() -> KeyRange {
    KeyRange {
        lo: Bound::Unbounded,
        hi: Bound::Unbounded,
        text: Desc::Fixed("(all)"),
        point: false,
        prefix: 0,
    }
}

/// The `_id` candidates: a range of the data table's keys bounded by the
/// `_id` conditions, and the whole table in `_id` order for an `_id` sort
/// (or, with `always`, for any query: a hint of the `_id` order).
fn id_candidates(
    conj: &[(String, &Cond)],
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    legacy_is_ids: bool,
    always: bool,
) -> DocResult<Vec<Cand>> {
    let mut out = Vec::new();
    // `_id` bounds (one value per document: the conditions combine).
    let id_conds: Vec<&Cond> = conj
        .iter()
        .filter(|(p, _)| p == "_id")
        .map(|(_, c)| *c)
        .collect();
    let id_sort = sort_direction(&[("_id".to_string(), 1)], 0, sort);
    let id_ranges = field_ranges(&id_conds, SortOrder::Ascending, true)?;
    if let Some(ranges) = &id_ranges {
        if !legacy_is_ids || id_conds.len() > 1 || always {
            out.push(Cand {
                exact: bounds_exact(filter, &["_id"]),
                sorted: id_sort.is_some() && ranges.len() <= 1,
                node: Node::IdRanges {
                    ranges: ranges.clone(),
                    reverse: id_sort == Some(true) && ranges.len() <= 1,
                },
                bounded: 1,
                origin: Origin::Id,
            });
        }
    }
    if id_ranges.is_none() && (id_sort.is_some() || always) {
        out.push(Cand {
            node: Node::IdRanges {
                ranges: vec![all_keys()],
                reverse: id_sort == Some(true),
            },
            sorted: id_sort.is_some(),
            bounded: 0,
            exact: bounds_exact(filter, &[]),
            origin: Origin::Id,
        });
    }
    Ok(out)
}

/// One index's candidates: a scan of its compound bounds, and the same
/// scan read in the index's order when that gives the sort (or, with
/// `always`, for a hint: the whole index when nothing bounds it).
#[allow(clippy::too_many_arguments)]
fn index_candidates<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    idx: &IndexInfo,
    conj: &[(String, &Cond)],
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    always: bool,
    pos: usize,
) -> DocResult<Vec<Cand>> {
    let origin = Origin::Index(pos);
    let mut out = Vec::new();
    let single_key = !idx.sparse && table_len(r, &meta.index_table(idx))? == data_len;
    let b = index_bounds(idx, conj, single_key)?;
    let fields: Vec<&str> = idx.fields.iter().map(|(p, _)| p.as_str()).collect();
    let exact = single_key && bounds_exact(filter, &fields[..b.bounded.min(fields.len())]);
    if b.bounded > 0 {
        out.push(Cand {
            node: Node::Index {
                idx: idx.clone(),
                ranges: b.ranges.clone(),
                reverse: false,
            },
            sorted: false,
            bounded: b.bounded,
            exact,
            origin,
        });
    }
    // In index order: one range, after a one-value equality prefix; a
    // bounded scan only over a single-key index, a whole-index scan over
    // any index that is not sparse.
    // An index without null entries for array elements (older than
    // format 5) orders a document lacking a dotted field in one of them by
    // its other values, not by the null the sort counts.
    let orderable = b.ranges.len() == 1
        && !idx.sparse
        && (single_key || b.bounded == 0)
        && (idx.null_elements || fields.iter().all(|f| !f.contains('.')));
    // The sort may name the equality fields too (they are constant).
    let dir = (0..=b.eq_fields)
        .rev()
        .find_map(|from| sort_direction(&idx.fields, from, sort))
        .filter(|_| orderable);
    // Several point prefixes (an `$in` on a leading field) each in index
    // order, merged by the keys after the prefix when the sort names the
    // fields after it (MongoDB's `SORT_MERGE`): on a single-key index that
    // is not sparse, with no cut long value in a prefix.
    let merge = b.ranges.len() > 1
        && b.point_fields > b.eq_fields
        && b.exact_prefixes
        && !idx.sparse
        && single_key
        && (idx.null_elements || fields.iter().all(|f| !f.contains('.')));
    let merge_dir = if merge {
        sort_direction(&idx.fields, b.point_fields, sort)
    } else {
        None
    };
    if let Some(reverse) = dir.or(merge_dir) {
        out.push(Cand {
            node: Node::Index {
                idx: idx.clone(),
                ranges: b.ranges,
                reverse,
            },
            sorted: true,
            bounded: b.bounded,
            exact,
            origin,
        });
    } else if always && b.bounded == 0 {
        if idx.sparse {
            // MongoDB would return only the documents the sparse index
            // holds; here a hint never changes a result.
            return Err(DocumentError::IndexError {
                collection: String::new(),
                index: idx.name.clone(),
                reason:
                    "the hinted index is sparse and the filter does not bound its first field, \
                         so it lacks documents that may match"
                        .into(),
            });
        }
        out.push(Cand {
            node: Node::Index {
                idx: idx.clone(),
                ranges: b.ranges,
                reverse: false,
            },
            sorted: false,
            bounded: 0,
            exact,
            origin,
        });
    }
    Ok(out)
}

/// The candidates a hint allows: the hinted index's (or the `_id`
/// order's, or a collection scan for `$natural`).
fn hinted<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    hint: &Hint,
) -> DocResult<Vec<Cand>> {
    let mut out = hinted_by(r, meta, filter, sort, data_len, hint)?;
    for c in &mut out {
        c.origin = Origin::Hinted;
    }
    Ok(out)
}

fn hinted_by<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    hint: &Hint,
) -> DocResult<Vec<Cand>> {
    let mut conj = Vec::new();
    conjuncts(filter, &mut conj);
    if let Hint::Natural { reverse } = hint {
        let id_sort = sort_direction(&[("_id".to_string(), 1)], 0, sort);
        return Ok(vec![if *reverse || id_sort.is_some() {
            Cand {
                node: Node::IdRanges {
                    ranges: vec![all_keys()],
                    reverse: *reverse,
                },
                sorted: id_sort == Some(*reverse),
                bounded: 0,
                exact: bounds_exact(filter, &[]),
                origin: Origin::Hinted,
            }
        } else {
            full_scan()
        }]);
    }
    if hint.is_id() {
        return id_candidates(&conj, filter, sort, false, true);
    }
    let (pos, idx) = meta
        .indexes
        .iter()
        .enumerate()
        .find(|(_, i)| hint.names(i) && i.text.is_none())
        .ok_or_else(|| DocumentError::IndexError {
            collection: String::new(),
            index: hint.to_string(),
            reason: "the hint names no index of the collection".into(),
        })?;
    index_candidates(r, meta, idx, &conj, filter, sort, data_len, true, pos)
}

/// The index a query must use, as MongoDB's `hint`: an index name, a key
/// pattern, or `{"$natural": 1}` (a collection scan; `-1` reversed). The
/// `_id` order is named `"_id_"` or `{"_id": 1}`. A hint never changes a
/// result (every candidate document is checked against the filter); a
/// hint naming no index is [`DocumentError::IndexError`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hint {
    /// The index of this name.
    Name(String),
    /// The index with these fields and orders (1 or -1), in this order.
    Keys(Vec<(String, i8)>),
    /// A scan of the collection in `_id` order (`reverse`: from the end).
    Natural {
        /// Read from the end.
        reverse: bool,
    },
}

impl Hint {
    /// Reads a hint: a string (an index name) or an object (a key pattern
    /// such as `{"status": 1, "created": -1}`, or `{"$natural": 1}`).
    pub fn parse(spec: serde_json::Value) -> DocResult<Hint> {
        let bad = |reason: String| DocumentError::InvalidQuery {
            reason: format!("invalid hint: {reason}"),
        };
        match spec {
            serde_json::Value::String(s) if !s.is_empty() => Ok(Hint::Name(s)),
            serde_json::Value::Object(m) if !m.is_empty() => {
                let mut keys = Vec::new();
                for (k, v) in m.iter() {
                    let dir = match v.as_f64() {
                        Some(1.0) => 1i8,
                        Some(-1.0) => -1,
                        _ => {
                            return Err(bad(format!(
                                "the direction of {k:?} must be 1 or -1, found {v}"
                            )))
                        }
                    };
                    keys.push((k.clone(), dir));
                }
                match keys.as_slice() {
                    [(k, d)] if k == "$natural" => Ok(Hint::Natural { reverse: *d < 0 }),
                    _ if keys.iter().any(|(k, _)| k.starts_with('$')) => {
                        Err(bad("only $natural may start with '$'".into()))
                    }
                    _ => Ok(Hint::Keys(keys)),
                }
            }
            other => Err(bad(format!(
                "expected an index name or a key pattern object, found {other}"
            ))),
        }
    }

    /// Whether it names the `_id` order.
    fn is_id(&self) -> bool {
        match self {
            Hint::Name(n) => n == "_id_",
            Hint::Keys(k) => matches!(k.as_slice(), [(p, _)] if p == "_id"),
            Hint::Natural { .. } => false,
        }
    }

    /// Whether it names index `idx`.
    fn names(&self, idx: &IndexInfo) -> bool {
        match self {
            Hint::Name(n) => *n == idx.name,
            Hint::Keys(k) => *k == idx.fields,
            Hint::Natural { .. } => false,
        }
    }
}

impl std::fmt::Display for Hint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Hint::Name(n) => f.write_str(n),
            Hint::Keys(k) => {
                let m: serde_json::Map<String, serde_json::Value> = k
                    .iter()
                    .map(|(p, d)| (p.clone(), serde_json::Value::from(*d)))
                    .collect();
                write!(f, "{}", serde_json::Value::Object(m))
            }
            Hint::Natural { reverse } => {
                write!(f, "{{\"$natural\":{}}}", if *reverse { -1 } else { 1 })
            }
        }
    }
}

/// What a query reads — the planner, [`Cursor`]s and
/// [`Results`](super::cursor::Results): any snapshot of the storage seam
/// ([`SeamRead`]): a read snapshot
/// ([`ReadTransaction`](crate::ReadTransaction), owned, borrowed or shared
/// in an [`Arc`](std::sync::Arc)), a write transaction (with its own uncommitted
/// changes), or another backend's (`cairndb-etcd`). Implemented for every
/// [`SeamRead`]; generic, never `dyn`, so on the embedded engine a query
/// compiles to the table calls it makes.
pub trait Snapshot: SeamRead {
    /// Table `name`, or `None` when it does not exist (a missing table is
    /// not created: a query writes nothing).
    #[doc(hidden)]
    #[inline]
    fn table(&self, name: &str) -> DocResult<Option<ByteTable<'_, Self>>> {
        Ok(self.open_table_if_exists(def(name))?)
    }
}

impl<S: SeamRead + ?Sized> Snapshot for S {}

/// A snapshot's table of the document layer (byte keys and values).
type ByteTable<'a, S> = <S as SeamRead>::Table<'a, &'static [u8], &'static [u8]>;

/// Plans `filter` (and `sort`, if any; `window` is skip + limit when there
/// is a limit) over `meta` in snapshot `r`. `cover`: the paths the caller
/// reads from each result besides those of the filter and the sort (an
/// inclusion projection's; none for a count), or `None` when it needs
/// whole documents; with `Some`, a scan of one index that holds every
/// such path is answered from the index alone ([`Plan::Covered`]).
pub(crate) fn plan<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    window: Option<u64>,
    hint: Option<&Hint>,
    cover: Option<&[FieldPath]>,
) -> DocResult<Planned> {
    // An index the backend is still filling (SeamRead::incomplete_tables:
    // cairndb-etcd's batched builds) is left out, and its plans with it:
    // the planner sees the metadata without it (and a plan cache of its
    // own, dropped after the query).
    if meta.indexes.iter().any(|i| i.text.is_none()) {
        let building = r.incomplete_tables(&meta.data_table())?;
        if !building.is_empty() {
            let visible = meta.without_index_tables(&building);
            return plan_visible(r, &visible, filter, sort, window, hint, cover);
        }
    }
    plan_visible(r, meta, filter, sort, window, hint, cover)
}

/// [`plan`] over the indexes of `meta`, all complete.
fn plan_visible<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    window: Option<u64>,
    hint: Option<&Hint>,
    cover: Option<&[FieldPath]>,
) -> DocResult<Planned> {
    if !meta.is_current_format() {
        // A collection at document-layer format 1 (FORMAT.md): its keys
        // are in the old order until its first write upgrades it, so no
        // key bounds; the filter decides and sorts are done in memory.
        return Ok(Planned {
            source: Source::Scan,
            index_orders: Vec::new(),
            examined: 0,
            sorted: false,
            described: Described::Fixed(Plan::FullScan, Vec::new(), None),
            filter: None,
            text_scores: None,
        });
    }
    if let Some(t) = text_of(filter) {
        return plan_text(r, meta, filter, t, hint);
    }
    let data_len = table_len(r, &meta.data_table())?;
    let shape = plan_cache::shape(filter, sort, window.is_some(), hint, cover);
    let cache = meta.plan_cache();
    let key = plan_cache::digest(&shape);
    let rebound = match cache.get(&shape, data_len) {
        Some(choice) => rebind(r, meta, filter, sort, data_len, hint, choice)?,
        None => None,
    };
    let from_cache = rebound.is_some();
    let (cands, estimates, best) = match rebound {
        Some(c) => (vec![c], vec![None], 0),
        None => {
            let (cands, estimates, best) =
                choose(r, meta, filter, sort, data_len, window, hint, cover)?;
            let Some(chosen) = cands.get(best) else {
                return Err(DocumentError::Custom(
                    "the planner found no candidate".into(),
                ));
            };
            let choice = Choice {
                origin: chosen.origin,
                sorted: chosen.sorted,
            };
            cache.put(shape, choice, data_len);
            (cands, estimates, best)
        }
    };
    let Some(chosen) = cands.get(best) else {
        return Err(DocumentError::Custom(
            "the planner found no candidate".into(),
        ));
    };
    let node = &chosen.node;
    let sorted = chosen.sorted && !sort.is_empty();
    let covered = match (node, cover) {
        // (A merge is read for its order: not covered.)
        (Node::Index { ranges, .. }, _) if sorted && ranges.len() > 1 => false,
        (Node::Index { idx, .. }, Some(extra)) => {
            coverable(idx, filter, sort, extra) && table_len(r, &meta.index_table(idx))? == data_len
        }
        _ => false,
    };
    let unplanned = |source: Source, index_orders: Vec<SortOrder>, sorted: bool| Planned {
        source,
        index_orders,
        examined: 0,
        sorted,
        filter: None,
        text_scores: None,
        described: Described::Fixed(Plan::FullScan, Vec::new(), None),
    };
    let mut planned = match node {
        Node::Full => unplanned(Source::Scan, Vec::new(), false),
        Node::Index {
            idx,
            ranges,
            reverse,
        } if ranges.len() == 1 => unplanned(
            Source::Index {
                table: meta.index_table(idx).into_owned(),
                lo: ranges[0].lo.clone(),
                hi: ranges[0].hi.clone(),
                reverse: *reverse,
                covered: if covered {
                    Some(idx.paths()?.into_iter().map(|(p, _)| p).collect())
                } else {
                    None
                },
            },
            idx.orders(),
            sorted,
        ),
        Node::IdRanges { ranges, reverse } if ranges.len() == 1 => unplanned(
            Source::Keys {
                lo: ranges[0].lo.clone(),
                hi: ranges[0].hi.clone(),
                reverse: *reverse,
            },
            Vec::new(),
            sorted,
        ),
        // Several point prefixes read for the sort: merged.
        Node::Index {
            idx,
            ranges,
            reverse,
        } if sorted => unplanned(
            Source::Merge {
                table: meta.index_table(idx).into_owned(),
                parts: ranges
                    .iter()
                    .map(|r| MergePart::new(r.lo.clone(), r.hi.clone(), r.prefix))
                    .collect(),
                reverse: *reverse,
            },
            idx.orders(),
            true,
        ),
        // Several ranges (`$in`, `$ne: null`): read one after the other,
        // as they come.
        Node::Index { idx, ranges, .. } if covered => unplanned(
            Source::CoveredRanges {
                table: meta.index_table(idx).into_owned(),
                ranges: ranges
                    .iter()
                    .map(|r| (r.lo.clone(), r.hi.clone()))
                    .collect(),
                paths: idx.paths()?.into_iter().map(|(p, _)| p).collect(),
            },
            idx.paths()?.into_iter().map(|(_, o)| o).collect(),
            false,
        ),
        // An intersection (and `_id` lookups, delivered in `_id` order):
        // the `_id`s first.
        Node::And(_) | Node::Ids(_) => {
            let (ids, examined) = ids_of(node, r, meta)?;
            let mut p = unplanned(
                Source::Ids(ids.into_iter().collect::<VecDeque<_>>()),
                Vec::new(),
                false,
            );
            p.examined = examined;
            p
        }
        // A union, or several ranges: streamed part after part.
        Node::Or(_) | Node::Index { .. } | Node::IdRanges { .. } => {
            let mut parts = VecDeque::new();
            let mut examined = 0;
            parts_of(node, r, meta, &mut parts, &mut examined)?;
            let mut p = unplanned(Source::Parts(parts), Vec::new(), false);
            p.examined = examined;
            p
        }
    };
    planned.described = Described::Chosen {
        cands,
        estimates,
        best,
        covered,
        cache: CacheMark { key, from_cache },
    };
    Ok(planned)
}

/// The share of a collection's documents above which a collection scan
/// is cheaper than fetching each document an index plan finds (measured
/// with the `planner_crossover` example: see `choose`).
const SCAN_FRACTION_PERCENT: u64 = 30;

/// Below this many documents the index plan is kept whatever share it
/// reads: either plan takes microseconds, and small collections keep the
/// plans their indexes suggest.
const SCAN_MIN_DOCS: u64 = 1_000;

/// Plans afresh: builds every candidate, estimates each (the trial), and
/// picks the best (see the module documentation); the candidates with
/// their estimates and the chosen one's position.
#[allow(clippy::too_many_arguments)]
fn choose<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    window: Option<u64>,
    hint: Option<&Hint>,
    cover: Option<&[FieldPath]>,
) -> DocResult<(Vec<Cand>, Vec<Option<u64>>, usize)> {
    let cands = candidates(r, meta, filter, sort, data_len, hint)?;
    // Estimate each, a lone candidate too (it is weighed against the
    // full scan below); the cap keeps the trial cheap.
    let mut estimates = Vec::with_capacity(cands.len());
    for c in &cands {
        let mut e = estimate(&c.node, r, meta, data_len, TRIAL_CAP)?;
        if let (true, true, Some(w)) = (c.sorted, c.exact, window) {
            // A merge reads up to the window from each range.
            let parts = match &c.node {
                Node::Index { ranges, .. } => ranges.len().max(1) as u64,
                _ => 1,
            };
            e = e.min(w.saturating_mul(parts));
        }
        estimates.push(Some(e));
    }
    let mut best = 0;
    for i in 1..cands.len() {
        let (a, b) = (&cands[i], &cands[best]);
        let key = |c: &Cand, e: Option<u64>| {
            (
                e.unwrap_or(0),
                !c.sorted || sort.is_empty(),
                usize::MAX - c.bounded,
            )
        };
        if key(a, estimates[i]) < key(b, estimates[best]) {
            best = i;
        }
    }
    // The winner against the full scan: a plan that fetches the document
    // of each entry it reads loses to reading every document once it
    // reads more than `SCAN_FRACTION_PERCENT` of them (MongoDB's trial,
    // too, runs up to 30 % of the collection's documents). A covered
    // plan reads no document, a limited plan in the sort's order stops
    // early, a plan in the sort's order saves a sort, and a hint is
    // obeyed: those keep the index.
    let Some(full) = cands.iter().position(|c| matches!(c.node, Node::Full)) else {
        return Ok((cands, estimates, best));
    };
    let c = &cands[best];
    let fetches = matches!(c.node, Node::Index { .. } | Node::And(_) | Node::Or(_))
        && data_len >= SCAN_MIN_DOCS
        && !c.sorted
        && hint.is_none()
        && !covers(r, meta, &c.node, filter, sort, cover, data_len)?;
    if fetches {
        let limit = (data_len.saturating_mul(SCAN_FRACTION_PERCENT) / 100).max(1);
        let mut e = estimates[best].unwrap_or(0);
        if e >= TRIAL_CAP && limit > TRIAL_CAP {
            // The trial stopped at its cap: count on, up to the crossover.
            e = estimate(&c.node, r, meta, data_len, limit)?;
            estimates[best] = Some(e);
        }
        if e >= limit {
            best = full;
        }
    }
    Ok((cands, estimates, best))
}

/// Whether `node` would be answered from its index alone (see `plan`).
fn covers<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    node: &Node,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    cover: Option<&[FieldPath]>,
    data_len: u64,
) -> DocResult<bool> {
    Ok(match (node, cover) {
        (Node::Index { idx, .. }, Some(extra)) => {
            coverable(idx, filter, sort, extra) && table_len(r, &meta.index_table(idx))? == data_len
        }
        _ => false,
    })
}

/// The candidate a cached `choice` names, built for this query's values
/// by the generator that built it when it won (so it is one a fresh plan
/// could choose), or `None` when that generator gives no such candidate
/// now (the query is then planned afresh).
fn rebind<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    data_len: u64,
    hint: Option<&Hint>,
    choice: Choice,
) -> DocResult<Option<Cand>> {
    let pick = |v: Vec<Cand>| v.into_iter().find(|c| c.sorted == choice.sorted);
    let conj = || {
        let mut conj = Vec::new();
        conjuncts(filter, &mut conj);
        conj
    };
    Ok(match choice.origin {
        Origin::Full => Some(full_scan()),
        Origin::Hinted => match hint {
            Some(h) => pick(hinted(r, meta, filter, sort, data_len, h)?),
            None => None,
        },
        Origin::Id => pick(id_candidates(&conj(), filter, sort, false, false)?),
        Origin::Index(pos) => match meta.indexes.get(pos) {
            Some(idx) if idx.text.is_none() => pick(index_candidates(
                r,
                meta,
                idx,
                &conj(),
                filter,
                sort,
                data_len,
                false,
                pos,
            )?),
            _ => None,
        },
        Origin::Legacy => match plan_filter(filter, meta)? {
            Node::Full => None,
            node => Some(Cand {
                node,
                sorted: false,
                bounded: 1,
                exact: false,
                origin: Origin::Legacy,
            }),
        },
    })
}

/// The full scan candidate.
fn full_scan() -> Cand {
    Cand {
        node: Node::Full,
        sorted: false,
        bounded: 0,
        exact: false,
        origin: Origin::Full,
    }
}

/// Whether a plan came from the plan cache, and its shape's key.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CacheMark {
    /// MongoDB's `planCacheKey`: the digest of the query's shape.
    pub key: u32,
    /// The plan is the cached choice, bound to this query's values.
    pub from_cache: bool,
}

/// What explain reports about a plan, written out only when asked.
pub(crate) enum Described {
    /// A plan made without candidates to compare (a `$text` plan, a
    /// collection at format 1).
    Fixed(Plan, Vec<Candidate>, Option<CacheMark>),
    /// The candidates considered, their estimates (`None`: not counted,
    /// the plan came from the cache) and the chosen one.
    Chosen {
        cands: Vec<Cand>,
        estimates: Vec<Option<u64>>,
        best: usize,
        covered: bool,
        cache: CacheMark,
    },
}

impl Described {
    /// The chosen plan.
    pub(crate) fn plan(&self) -> Plan {
        match self {
            Described::Fixed(p, ..) => p.clone(),
            Described::Chosen {
                cands,
                best,
                covered,
                ..
            } => {
                let p = cands.get(*best).map_or(Plan::FullScan, plan_of);
                if *covered {
                    Plan::Covered(Box::new(p))
                } else {
                    p
                }
            }
        }
    }

    /// Every plan considered, with its estimate.
    pub(crate) fn candidates(&self) -> Vec<Candidate> {
        match self {
            Described::Fixed(_, c, _) => c.clone(),
            Described::Chosen {
                cands,
                estimates,
                best,
                ..
            } => cands
                .iter()
                .zip(estimates)
                .enumerate()
                .map(|(i, (c, e))| Candidate {
                    plan: plan_of(c),
                    estimate: *e,
                    sorted: c.sorted,
                    chosen: i == *best,
                })
                .collect(),
        }
    }

    /// The plan cache's mark, for a plan the cache may hold.
    pub(crate) fn cache(&self) -> Option<CacheMark> {
        match self {
            Described::Fixed(_, _, m) => *m,
            Described::Chosen { cache, .. } => Some(*cache),
        }
    }
}

/// Whether `path` is one whose values an entry of index `idx` holds whole
/// in its covered value: `_id`, an indexed path, or a path under one.
fn covers_path(idx: &IndexInfo, path: &str) -> bool {
    let under =
        |f: &str| path == f || (path.starts_with(f) && path.as_bytes().get(f.len()) == Some(&b'.'));
    under("_id") || idx.fields.iter().any(|(f, _)| under(f))
}

/// Whether every path `f` names is covered by `idx` (and it has no
/// `$text` or `$expr`, which read more than named paths).
fn filter_covered(f: &Filter, idx: &IndexInfo) -> bool {
    match f {
        Filter::True => true,
        Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) => {
            fs.iter().all(|f| filter_covered(f, idx))
        }
        Filter::Field { path, .. } => covers_path(idx, path.as_str()),
        Filter::Expr(_) | Filter::Text(_) => false,
    }
}

/// Whether a query may be answered from the covered values of index
/// `idx` alone (MongoDB's covered query): the index keeps them
/// (`covering`, not sparse) and every path the filter, the sort and the
/// caller (`extra`) read is covered. The caller also checks that the
/// index is single-key (its entries number the documents), so that each
/// document has its one entry, with its value.
fn coverable(
    idx: &IndexInfo,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    extra: &[FieldPath],
) -> bool {
    idx.covering
        && !idx.sparse
        && idx.text.is_none()
        && filter_covered(filter, idx)
        && sort.iter().all(|(p, _)| covers_path(idx, p.as_str()))
        && extra.iter().all(|p| covers_path(idx, p.as_str()))
}

/// The `$text` condition of a filter: the filter itself or a member of its
/// top-level `$and`s (the only places the parser allows it).
fn text_of(f: &Filter) -> Option<&TextFilter> {
    match f {
        Filter::Text(t) => Some(t),
        Filter::And(fs) => fs.iter().find_map(text_of),
        _ => None,
    }
}

/// `f` with its `$text` resolved as `bound`.
fn with_bound_text(f: &Filter, bound: &std::sync::Arc<BoundText>) -> Filter {
    match f {
        Filter::Text(t) => Filter::Text(TextFilter {
            search: t.search.clone(),
            bound: Some(bound.clone()),
        }),
        Filter::And(fs) => Filter::And(fs.iter().map(|f| with_bound_text(f, bound)).collect()),
        other => other.clone(),
    }
}

/// The plan of a filter with `$text` (MongoDB's: the text index gives the
/// candidates, whatever else the filter says): its positive terms looked
/// up in the collection's text index, the documents found read in `_id`
/// order and checked against the whole filter (negations, phrases and the
/// other conditions); sorts are done in memory. Without a text index it is
/// [`DocumentError::TextIndexRequired`]; a hint must name the text index.
fn plan_text<S: Snapshot + ?Sized>(
    r: &S,
    meta: &CollectionMeta,
    filter: &Filter,
    t: &TextFilter,
    hint: Option<&Hint>,
) -> DocResult<Planned> {
    let Some((idx, reader)) = meta.text_reader()? else {
        return Err(DocumentError::TextIndexRequired {
            collection: String::new(),
        });
    };
    if let Some(h) = hint {
        if !hint_names_text(h, idx) {
            return Err(DocumentError::IndexError {
                collection: String::new(),
                index: h.to_string(),
                reason: format!(
                    "a $text query uses the text index {:?}; the hint names another",
                    idx.name
                ),
            });
        }
    }
    let bound = std::sync::Arc::new(BoundText::new(&t.search, &idx.name, &reader)?);
    let (scores, examined) = text::search_index(r, &meta.index_table(idx), &bound)?;
    let mut ids: Vec<Vec<u8>> = scores.keys().cloned().collect();
    ids.sort_unstable();
    let plan = Plan::Text {
        index: idx.name.clone(),
        search: bound.describe(),
    };
    Ok(Planned {
        source: Source::Ids(ids.into()),
        index_orders: Vec::new(),
        examined,
        sorted: false,
        described: Described::Fixed(
            plan.clone(),
            vec![Candidate {
                plan,
                estimate: None,
                sorted: false,
                chosen: true,
            }],
            None,
        ),
        filter: Some(with_bound_text(filter, &bound)),
        text_scores: Some(std::sync::Arc::new(scores)),
    })
}

/// Whether hint `h` names the text index `idx` (by name, or as MongoDB's
/// key pattern `{"_fts": "text", "_ftsx": 1}` cannot be written as a
/// [`Hint::Keys`], by name only).
fn hint_names_text(h: &Hint, idx: &IndexInfo) -> bool {
    matches!(h, Hint::Name(n) if *n == idx.name)
}

/// Builds the cursor of a planned query (the filter is always re-checked),
/// and hands back what explain reports of the plan.
pub(crate) fn cursor<T, S: Snapshot>(
    r: S,
    meta: &CollectionMeta,
    mut planned: Planned,
    filter: Filter,
) -> (Cursor<T, S>, Described) {
    let filter = planned.filter.take().unwrap_or(filter);
    let mut c = Cursor::new(r, Some(meta.data_table().into_owned()), planned.source)
        .with_predicate(Some(Box::new(move |bytes: &[u8]| {
            filter.matches_bytes(bytes)
        })));
    c.examined = planned.examined;
    c.keys_examined = planned.examined;
    (c, planned.described)
}
