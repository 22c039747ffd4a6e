//! The query planner: picks how to find a filter's documents.
//!
//! Plans, cheapest first:
//! - `_id` lookups for `_id` equality or `$in`;
//! - an index scan with bounds on the index's first field, for equality,
//!   ranges, `$in` (several bounds) and anchored string prefixes;
//! - index intersection for an `$and` whose conditions use several indexes,
//!   and index union for an `$or` whose every branch can use one;
//! - a full scan otherwise.
//!
//! Index bounds only narrow the candidates: every candidate is checked
//! against the whole filter, so a plan never changes the results, only how
//! many entries are read. A sort whose fields match an index's leading
//! fields (all the same direction or all reversed) is read in index order;
//! other sorts are done in memory after filtering.

use std::collections::{BTreeSet, VecDeque};
use std::ops::Bound;

use super::collection::{id_key, CollectionMeta, IndexInfo};
use super::cursor::{split_id, Cursor, Source};
use super::error::DocResult;
use super::filter::{Cond, ElemMatch, Filter};
use super::keys::{self, SortOrder};
use super::path::FieldPath;
use super::value::{ObjectId, Value};
use crate::error::CoreError;
use crate::table::{ReadableTable, TableDefinition};
use crate::txn::ReadTransaction;

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
    /// Scan an index between bounds (several bounds for `$in`).
    IndexScan {
        /// The index name.
        index: String,
        /// The bounds on its first field, as readable text.
        bounds: Vec<String>,
        /// Scanned from the end (a descending sort).
        reverse: bool,
    },
    /// The documents found by every sub-plan (`$and` over several indexes).
    Intersection(Vec<Plan>),
    /// The documents found by any sub-plan (`$or`).
    Union(Vec<Plan>),
}

impl std::fmt::Display for Plan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Plan::FullScan => f.write_str("full scan"),
            Plan::IdLookup { ids } => write!(f, "_id lookup ({ids})"),
            Plan::IndexScan {
                index,
                bounds,
                reverse,
            } => write!(
                f,
                "index scan {index} {}{}",
                bounds.join(" ∪ "),
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
        }
    }
}

/// One contiguous range of index keys, with its readable form.
#[derive(Debug, Clone)]
struct KeyRange {
    lo: Bound<Vec<u8>>,
    hi: Bound<Vec<u8>>,
    text: String,
}

/// A plan with what executing it needs.
#[derive(Debug, Clone)]
enum Node {
    Full,
    Ids(Vec<Value>),
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
            Node::Index {
                idx,
                ranges,
                reverse,
            } => Plan::IndexScan {
                index: idx.name.clone(),
                bounds: ranges.iter().map(|r| r.text.clone()).collect(),
                reverse: *reverse,
            },
            Node::And(n) => Plan::Intersection(n.iter().map(Node::plan).collect()),
            Node::Or(n) => Plan::Union(n.iter().map(Node::plan).collect()),
        }
    }

    /// A rough cost: lower is better.
    fn cost(&self) -> u32 {
        match self {
            Node::Full => 1000,
            Node::Ids(_) => 1,
            Node::Index { ranges, .. } => {
                let point = ranges.iter().all(|r| r.text.starts_with('='));
                (if point { 10 } else { 100 }) + ranges.len() as u32
            }
            Node::And(n) => n.iter().map(Node::cost).min().unwrap_or(1000),
            Node::Or(n) => n.iter().map(Node::cost).sum::<u32>().min(999),
        }
    }
}

/// The smallest byte string greater than every string starting with `p`.
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
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
/// next bracket (`None` for brackets the planner does not range over).
fn bracket(v: &Value) -> Option<(Value, Option<Value>)> {
    Some(match v {
        Value::Int(_) | Value::Float(_) => {
            (Value::Float(f64::NAN), Some(Value::String(String::new())))
        }
        Value::String(_) => (
            Value::String(String::new()),
            Some(Value::Binary(Vec::new())),
        ),
        Value::Binary(_) => (
            Value::Binary(Vec::new()),
            Some(Value::Id(ObjectId::from_bytes([0; 12]))),
        ),
        Value::Bool(_) => (Value::Bool(false), Some(Value::Float(f64::NAN))),
        _ => return None,
    })
}

/// All keys whose first component is exactly `v`.
fn point(v: &Value, order: SortOrder) -> DocResult<KeyRange> {
    let p = enc(v, order)?;
    Ok(KeyRange {
        hi: prefix_end(&p).map_or(Bound::Unbounded, Bound::Excluded),
        lo: Bound::Included(p),
        text: format!("= {}", v.to_json()),
    })
}

/// Keys whose first component lies between `lo` and `hi` (value bounds;
/// inclusive flags), in the index's byte order for `order`.
fn between(
    lo: Option<(&Value, bool)>,
    hi: Option<(&Value, bool)>,
    order: SortOrder,
    text: String,
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
    })
}

/// The ranges an index whose first field is `order` can use for `cond`.
fn ranges_for(cond: &Cond, order: SortOrder) -> DocResult<Option<Vec<KeyRange>>> {
    Ok(match cond {
        Cond::Eq(v) if !matches!(v, Value::Array(_) | Value::Object(_) | Value::Null) => {
            Some(vec![point(v, order)?])
        }
        Cond::In(vs)
            if !vs.is_empty()
                && vs
                    .iter()
                    .all(|v| !matches!(v, Value::Array(_) | Value::Object(_) | Value::Null)) =>
        {
            let mut r = Vec::new();
            for v in vs {
                r.push(point(v, order)?);
            }
            Some(r)
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
            Some(vec![between(
                lo,
                hi,
                order,
                format!("{op} {}", v.to_json()),
            )?])
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
                text: format!("prefix {s:?}"),
            }])
        }
        Cond::ElemMatch(ElemMatch::Element(c)) => {
            // One element must satisfy every condition: the bounds combine.
            match c.as_ref() {
                Cond::All(cs) => combined(cs, order)?,
                c => ranges_for(c, order)?,
            }
        }
        Cond::All(cs) => {
            // Several conditions on one field: use the most selective one.
            let mut best: Option<Vec<KeyRange>> = None;
            for c in cs {
                if let Some(r) = ranges_for(c, order)? {
                    let point = r.iter().all(|x| x.text.starts_with('='));
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
            let text = format!(
                "{} {} and {} {}",
                if li { ">=" } else { ">" },
                l.to_json(),
                if hi_inc { "<=" } else { "<" },
                h.to_json()
            );
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
            for idx in &meta.indexes {
                let Some((first, o)) = idx.fields.first() else {
                    continue;
                };
                if first != path.as_str() {
                    continue;
                }
                // A sparse index lacks documents missing the field: only
                // conditions that need the field to exist may use it.
                let order = if *o < 0 {
                    SortOrder::Descending
                } else {
                    SortOrder::Ascending
                };
                if let Some(ranges) = ranges_for(cond, order)? {
                    let n = Node::Index {
                        idx: idx.clone(),
                        ranges,
                        reverse: false,
                    };
                    if n.cost() < best.cost() {
                        best = n;
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
        Filter::Nor(_) | Filter::True => Ok(Node::Full),
    }
}

fn def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::internal(name)
}

fn to_slice_bound(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(v) => Bound::Included(v.as_slice()),
        Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// The `_id` keys a node finds, in `_id` order, and the entries read.
fn ids_of(
    node: &Node,
    r: &ReadTransaction,
    meta: &CollectionMeta,
) -> DocResult<(BTreeSet<Vec<u8>>, u64)> {
    let mut examined = 0;
    let mut out = BTreeSet::new();
    match node {
        Node::Full => {
            if let Ok(t) = r.open_table(def(&meta.data_table())) {
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
        Node::Index { idx, ranges, .. } => {
            let orders: Vec<SortOrder> = idx.paths()?.into_iter().map(|(_, o)| o).collect();
            let t = match r.open_table(def(&meta.index_table(idx))) {
                Ok(t) => t,
                Err(CoreError::TableNotFound(_)) => return Ok((out, 0)),
                Err(e) => return Err(e.into()),
            };
            for range in ranges {
                for item in
                    t.range::<&[u8]>((to_slice_bound(&range.lo), to_slice_bound(&range.hi)))?
                {
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

/// A planned query over one snapshot.
pub(crate) struct Planned {
    pub plan: Plan,
    pub source: Source,
    pub index_orders: Vec<SortOrder>,
    /// Entries read while planning (eager id sets).
    pub examined: u64,
    /// Whether the source already delivers the requested sort order.
    pub sorted: bool,
}

/// Plans `filter` (and `sort`, if any) over `meta` in snapshot `r`.
pub(crate) fn plan(
    r: &ReadTransaction,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
) -> DocResult<Planned> {
    let node = plan_filter(filter, meta)?;
    // A sort that an index can deliver, when the filter needs a full scan
    // (or the filter's index is that same index with one range).
    if !sort.is_empty() {
        for idx in &meta.indexes {
            if idx.sparse || idx.fields.len() < sort.len() {
                continue;
            }
            let same = idx.fields.iter().zip(sort).all(|((p, o), (sp, so))| {
                p == sp.as_str() && (*o < 0) == (*so == SortOrder::Descending)
            });
            let flipped = idx.fields.iter().zip(sort).all(|((p, o), (sp, so))| {
                p == sp.as_str() && (*o < 0) != (*so == SortOrder::Descending)
            });
            if !(same || flipped) {
                continue;
            }
            // Only a whole-index scan gives the sort order: a document with
            // an array is at its smallest (largest) element's entry, which a
            // range on the index may exclude (it would then come too late).
            if !matches!(node, Node::Full) {
                continue;
            }
            let range = KeyRange {
                lo: Bound::Unbounded,
                hi: Bound::Unbounded,
                text: "(all)".into(),
            };
            let n = Node::Index {
                idx: idx.clone(),
                ranges: vec![range.clone()],
                reverse: flipped,
            };
            return Ok(Planned {
                plan: n.plan(),
                source: Source::Index {
                    table: meta.index_table(idx),
                    lo: range.lo,
                    hi: range.hi,
                    reverse: flipped,
                },
                index_orders: idx.paths()?.into_iter().map(|(_, o)| o).collect(),
                examined: 0,
                sorted: true,
            });
        }
    }
    Ok(match &node {
        Node::Full => Planned {
            plan: Plan::FullScan,
            source: Source::Scan,
            index_orders: Vec::new(),
            examined: 0,
            sorted: false,
        },
        Node::Index { idx, ranges, .. } if ranges.len() == 1 => {
            let range = ranges[0].clone();
            Planned {
                plan: node.plan(),
                source: Source::Index {
                    table: meta.index_table(idx),
                    lo: range.lo,
                    hi: range.hi,
                    reverse: false,
                },
                index_orders: idx.paths()?.into_iter().map(|(_, o)| o).collect(),
                examined: 0,
                sorted: false,
            }
        }
        _ => {
            let (ids, examined) = ids_of(&node, r, meta)?;
            Planned {
                plan: node.plan(),
                source: Source::Ids(ids.into_iter().collect::<VecDeque<_>>()),
                index_orders: Vec::new(),
                examined,
                sorted: false,
            }
        }
    })
}

/// Builds the cursor of a planned query (the filter is always re-checked).
pub(crate) fn cursor<T>(
    r: ReadTransaction,
    meta: &CollectionMeta,
    planned: Planned,
    filter: Filter,
) -> Cursor<T> {
    let mut c = Cursor::new(r, Some(meta.data_table()), planned.source).with_predicate(Some(
        Box::new(move |bytes: &[u8]| filter.matches_bytes(bytes)),
    ));
    c.examined = planned.examined;
    c
}
