//! The plan cache: the planner's choice for each query *shape*, as
//! MongoDB's plan cache keeps a winning plan per shape.
//!
//! A shape is the filter's structure with its paths and operators but not
//! its values (only what decides which index bounds a value gives: null,
//! arrays and documents, the type bracket, a value too long for a key, a
//! regular expression with a literal prefix), with the sort, the paths a
//! projection reads (or whether it reads whole documents), the hint and
//! whether there is a limit. The cache keeps, per shape, which candidate
//! won: the full scan, the `_id` order, index number *n* of the collection
//! (its bounded scan or its ordered one), the filter's own
//! intersection/union plan, or the hinted index's scan.
//!
//! A cached choice is bound to a query's values by building that one
//! candidate again, with the code that builds it for a fresh plan, over
//! the live collection (so a bound plan is always one a fresh plan could
//! have chosen, and every candidate is checked against the whole filter:
//! results never depend on the cache). What the cache saves is building
//! the other candidates and counting their entries (the trial). When the
//! chosen candidate cannot be built for these values (its bounds vanish,
//! or the index stopped being single-key), the query is planned afresh
//! and the entry replaced.
//!
//! Invalidation: the cache lives in the collection's decoded metadata
//! (`CollectionMeta`), which is decoded again whenever its stored form
//! changes, so creating or dropping an index (any metadata change) starts
//! an empty cache, as MongoDB clears a collection's plan cache on index
//! builds and drops. MongoDB also re-plans a cached plan that reads far
//! more than when it won; here an entry is re-planned when the
//! collection's size has halved or doubled since the entry was made.
//! Like the decoded metadata, the cache is per thread, and holds at most
//! [`PLAN_CACHE_MAX_ENTRIES`] shapes per collection (the least recently
//! used is dropped first).

use std::cell::RefCell;
use std::collections::HashMap;

use super::filter::{Cond, ElemMatch, Filter};
use super::keys::SortOrder;
use super::path::FieldPath;
use super::planner::Hint;
use super::value::Value;

/// The most shapes one collection's cache holds.
pub const PLAN_CACHE_MAX_ENTRIES: usize = 256;

/// Which candidate generator produced a candidate (what a cache entry
/// names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// The full scan.
    Full,
    /// The `_id` order (a range of the data table's keys).
    Id,
    /// The index at this position of the collection's indexes.
    Index(usize),
    /// The filter's own plan (`_id` lookup, intersection, union).
    Legacy,
    /// The hinted index (or order).
    Hinted,
}

/// A cached choice: the generator and whether its candidate was the one
/// read in index order (for the sort).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Choice {
    pub origin: Origin,
    pub sorted: bool,
}

#[derive(Debug, Clone)]
struct Entry {
    choice: Choice,
    /// The collection's documents when the choice was made.
    data_len: u64,
    /// When it was last used (the cache's clock), for eviction.
    used: u64,
}

/// One collection's plan cache (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct PlanCache {
    inner: RefCell<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    entries: HashMap<Vec<u8>, Entry>,
    clock: u64,
}

// A copy of the metadata starts with an empty cache: the cache is a
// memo, never part of the metadata's value.
impl Clone for PlanCache {
    fn clone(&self) -> Self {
        PlanCache::default()
    }
}

impl PlanCache {
    /// The choice cached for `shape`, if it is still fresh for a
    /// collection of `data_len` documents (an entry made when the
    /// collection was less than half or more than twice as large is
    /// dropped).
    pub(crate) fn get(&self, shape: &[u8], data_len: u64) -> Option<Choice> {
        let mut inner = self.inner.borrow_mut();
        inner.clock += 1;
        let now = inner.clock;
        let e = inner.entries.get_mut(shape)?;
        let then = e.data_len;
        if data_len > then.saturating_mul(2).max(1) || data_len.saturating_mul(2) < then {
            inner.entries.remove(shape);
            return None;
        }
        e.used = now;
        Some(e.choice)
    }

    /// Caches `choice` for `shape`.
    pub(crate) fn put(&self, shape: Vec<u8>, choice: Choice, data_len: u64) {
        let mut inner = self.inner.borrow_mut();
        inner.clock += 1;
        let used = inner.clock;
        if inner.entries.len() >= PLAN_CACHE_MAX_ENTRIES && !inner.entries.contains_key(&shape) {
            let oldest = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                inner.entries.remove(&k);
            }
        }
        inner.entries.insert(
            shape,
            Entry {
                choice,
                data_len,
                used,
            },
        );
    }

    /// Forgets every entry.
    pub(crate) fn clear(&self) {
        self.inner.borrow_mut().entries.clear();
    }

    /// How many shapes are cached.
    pub(crate) fn len(&self) -> usize {
        self.inner.borrow().entries.len()
    }
}

/// A shape's digest (FNV-1a, 32 bits), the same for every query of the
/// shape: explain shows it as MongoDB's `planCacheKey`, in hexadecimal.
pub(crate) fn digest(shape: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in shape {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The shape of a query (see the module documentation), as bytes.
pub(crate) fn shape(
    filter: &Filter,
    sort: &[(FieldPath, SortOrder)],
    limited: bool,
    hint: Option<&Hint>,
    cover: Option<&[FieldPath]>,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    filter_shape(filter, &mut out);
    out.push(b'|');
    for (p, o) in sort {
        text(p.as_str(), &mut out);
        out.push(if *o == SortOrder::Descending {
            b'-'
        } else {
            b'+'
        });
    }
    out.push(b'|');
    out.push(if limited { b'L' } else { b'-' });
    match cover {
        None => out.push(b'D'),
        Some(paths) => {
            out.push(b'P');
            for p in paths {
                text(p.as_str(), &mut out);
            }
        }
    }
    if let Some(h) = hint {
        out.push(b'H');
        text(&h.to_string(), &mut out);
    }
    out
}

/// A length-prefixed string (so that no two shapes run together).
fn text(s: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn filter_shape(f: &Filter, out: &mut Vec<u8>) {
    let list = |tag: u8, fs: &[Filter], out: &mut Vec<u8>| {
        out.push(tag);
        out.extend_from_slice(&(fs.len() as u32).to_le_bytes());
        for f in fs {
            filter_shape(f, out);
        }
    };
    match f {
        Filter::True => out.push(b'T'),
        Filter::And(fs) => list(b'&', fs, out),
        Filter::Or(fs) => list(b'|', fs, out),
        Filter::Nor(fs) => list(b'!', fs, out),
        Filter::Field { path, cond } => {
            out.push(b'F');
            text(path.as_str(), out);
            cond_shape(cond, out);
        }
        // Neither is planned by shape: `$expr` reads no bounds, `$text`
        // is planned by its own plan (never cached).
        Filter::Expr(_) => out.push(b'E'),
        Filter::Text(_) => out.push(b'X'),
    }
}

fn cond_shape(c: &Cond, out: &mut Vec<u8>) {
    let one = |tag: u8, v: &Value, out: &mut Vec<u8>| {
        out.push(tag);
        value_class(v, out);
    };
    let many = |tag: u8, vs: &[Value], out: &mut Vec<u8>| {
        out.push(tag);
        // The classes present (not how many values: MongoDB's shape of an
        // `$in` ignores its length too).
        let mut seen: Vec<[u8; 2]> = Vec::new();
        for v in vs {
            let mut c = Vec::with_capacity(2);
            value_class(v, &mut c);
            let k = [c[0], c.get(1).copied().unwrap_or(0)];
            if !seen.contains(&k) {
                seen.push(k);
            }
        }
        seen.sort_unstable();
        out.push(seen.len() as u8);
        for k in seen {
            out.extend_from_slice(&k);
        }
    };
    match c {
        Cond::Eq(v) => one(b'=', v, out),
        Cond::Ne(v) => one(b'~', v, out),
        Cond::Gt(v) => one(b'>', v, out),
        Cond::Gte(v) => one(b'G', v, out),
        Cond::Lt(v) => one(b'<', v, out),
        Cond::Lte(v) => one(b'L', v, out),
        Cond::In(vs) => many(b'i', vs, out),
        Cond::Nin(vs) => many(b'n', vs, out),
        // Bounds when every expression has a literal prefix (one that
        // would be cut in index keys gives none): the values' classes and
        // whether each expression gives a range decide the plan.
        Cond::InRegex(vs, res) => {
            many(b'j', vs, out);
            // (As `ranges_for`: a prefix too long for an index component
            // gives no range.)
            let ranged = |re: &super::filter::RegexCond| {
                re.literal_prefix().is_some_and(|p| {
                    p.len() <= 64 || !super::keys::is_long(&Value::String(p.to_string()))
                })
            };
            out.push(u8::from(res.iter().all(ranged)));
        }
        Cond::NinRegex(..) => out.push(b'k'),
        Cond::Exists(b) => out.extend_from_slice(&[b'e', u8::from(*b)]),
        Cond::Size(_) => out.push(b's'),
        Cond::ElemMatch(ElemMatch::Document(f)) => {
            out.push(b'M');
            filter_shape(f, out);
        }
        Cond::ElemMatch(ElemMatch::Element(c)) => {
            out.push(b'm');
            cond_shape(c, out);
        }
        Cond::Prefix(p) => {
            out.push(b'p');
            out.push(u8::from(p.len() > 64));
        }
        Cond::Not(c) => {
            out.push(b'N');
            cond_shape(c, out);
        }
        Cond::All(cs) => {
            out.push(b'A');
            out.extend_from_slice(&(cs.len() as u32).to_le_bytes());
            for c in cs {
                cond_shape(c, out);
            }
        }
        Cond::Type(_) => out.push(b't'),
        Cond::Mod(..) => out.push(b'%'),
        Cond::Regex(re) => {
            out.push(b'r');
            out.push(match re.literal_prefix() {
                None => 0,
                Some(p) if p.len() > 64 => 2,
                Some(_) => 1,
            });
        }
    }
}

/// What of a value decides the bounds it gives: its type bracket (and
/// null, arrays and documents, which give none or special ones), and
/// whether it is long enough to be cut in index keys.
fn value_class(v: &Value, out: &mut Vec<u8>) {
    let (class, len) = match v {
        Value::Null => (0, 0),
        Value::Bool(_) => (1, 0),
        Value::Int(_) | Value::Float(_) => (2, 0),
        Value::String(s) => (3, s.len()),
        Value::Binary(b) => (4, b.len()),
        Value::Uuid(_) => (4, 0),
        Value::Id(_) => (5, 0),
        Value::Date(_) => (6, 0),
        Value::Array(_) => (7, 0),
        Value::Object(_) => (8, 0),
    };
    out.push(class);
    // Long values (keys.rs, "Long values") give no range bounds; only a
    // value of a few hundred bytes may be one.
    out.push(u8::from(len > 64 && super::keys::is_long(v)));
}

impl<T: serde::Serialize + serde::de::DeserializeOwned> super::Collection<'_, T> {
    /// Empties this collection's plan cache (MongoDB's
    /// `PlanCache.clear()`): the next query of each shape is planned
    /// afresh, with a trial. The cache is kept per thread (see
    /// [`Explain::from_plan_cache`](super::query::Explain::from_plan_cache)),
    /// so this clears the calling thread's. Needed only to measure or
    /// compare plans: the cache never changes a result, and creating or
    /// dropping an index empties it.
    pub fn clear_plan_cache(&self) -> super::DocResult<()> {
        super::collection::check_collection_name(self.name())?;
        let r = self.database().begin_read()?;
        if let Some(meta) = super::collection::meta_in(&r, self.name())? {
            meta.plan_cache().clear();
        }
        Ok(())
    }

    /// How many query shapes this collection's plan cache holds (on the
    /// calling thread; see [`clear_plan_cache`](Self::clear_plan_cache)).
    pub fn plan_cache_len(&self) -> super::DocResult<usize> {
        super::collection::check_collection_name(self.name())?;
        let r = self.database().begin_read()?;
        Ok(super::collection::meta_in(&r, self.name())?.map_or(0, |m| m.plan_cache().len()))
    }
}
