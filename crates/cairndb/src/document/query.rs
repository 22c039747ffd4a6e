//! Queries and query-driven writes on collections: `find` (with sort, skip,
//! limit, projection), `count`, `explain`, `update_one` / `update_many`
//! (with upsert), `delete_one` / `delete_many`. Filters, updates,
//! projections and sort specs are the MongoDB-style JSON of
//! [`super::filter`], [`super::update`] and [`super::projection`].

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::codec;
use super::collection::{
    check_collection_name, meta_in, prepare, Collection, CollectionMeta, StoreMode, TxnCollection,
    Writer,
};
use super::cursor::{Cursor, Results, Source};
use super::error::{DocResult, DocumentError};
use super::filter::Filter;
use super::planner::{self, Candidate, Hint, Plan, Snapshot};
use super::projection::Projection;
use super::sort::SortSpec;
use super::update::Update;
use super::value::{Document, Value};
use crate::seam::{SeamRead, SeamTable, SeamWrite};
use crate::table::TableDefinition;
use crate::txn::ReadTransaction;

/// Something that can be read as a filter: JSON (a `serde_json::Value` or
/// JSON text), a [`Document`], or a parsed [`Filter`].
pub trait IntoFilter {
    /// The filter.
    fn into_filter(self) -> DocResult<Filter>;
}

impl IntoFilter for Filter {
    fn into_filter(self) -> DocResult<Filter> {
        Ok(self)
    }
}
impl IntoFilter for serde_json::Value {
    fn into_filter(self) -> DocResult<Filter> {
        Filter::parse(self)
    }
}
impl IntoFilter for &str {
    fn into_filter(self) -> DocResult<Filter> {
        Filter::parse_str(self)
    }
}
impl IntoFilter for &String {
    fn into_filter(self) -> DocResult<Filter> {
        Filter::parse_str(self)
    }
}
impl IntoFilter for Document {
    fn into_filter(self) -> DocResult<Filter> {
        Filter::from_value(Value::Object(self))
    }
}

/// Something that can be read as an update: JSON or a parsed [`Update`].
pub trait IntoUpdate {
    /// The update.
    fn into_update(self) -> DocResult<Update>;
}

impl IntoUpdate for Update {
    fn into_update(self) -> DocResult<Update> {
        Ok(self)
    }
}
impl IntoUpdate for serde_json::Value {
    fn into_update(self) -> DocResult<Update> {
        Update::parse(self)
    }
}
impl IntoUpdate for &str {
    fn into_update(self) -> DocResult<Update> {
        Update::parse_str(self)
    }
}

/// Sort, skip, limit and projection of a `find`.
#[derive(Debug, Clone, Default)]
pub struct FindOptions {
    sort: Option<SortSpec>,
    skip: u64,
    limit: Option<u64>,
    projection: Option<Projection>,
    hint: Option<Hint>,
    /// Only the number of results is read (a count): a query on one
    /// index's paths is then answered from the index alone.
    count_only: bool,
}

impl FindOptions {
    /// No sort, skip, limit or projection.
    pub fn new() -> Self {
        FindOptions::default()
    }

    /// Sorts by a spec such as `{"age": -1, "name": 1}`.
    pub fn sort(mut self, spec: serde_json::Value) -> DocResult<Self> {
        self.sort = Some(SortSpec::parse(spec)?);
        Ok(self)
    }

    /// Sorts by a parsed spec.
    pub fn with_sort(mut self, spec: SortSpec) -> Self {
        self.sort = Some(spec);
        self
    }

    /// Skips the first `n` results.
    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    /// Returns at most `n` results.
    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }

    /// Keeps (`{"a": 1}`) or drops (`{"a": 0}`) fields of each result.
    pub fn projection(mut self, spec: serde_json::Value) -> DocResult<Self> {
        self.projection = Some(Projection::parse(spec)?);
        Ok(self)
    }

    /// Makes the query use one index, as MongoDB's `hint`: its name
    /// (`"status_1_created_-1"`), its key pattern (`{"status": 1,
    /// "created": -1}`), `"_id_"` for the `_id` order, or `{"$natural":
    /// 1}` for a collection scan (see [`Hint`]). A hint naming no index of
    /// the collection makes the query fail with
    /// [`DocumentError::IndexError`]; a hint never changes the results.
    pub fn hint(mut self, spec: serde_json::Value) -> DocResult<Self> {
        self.hint = Some(Hint::parse(spec)?);
        Ok(self)
    }

    /// [`FindOptions::hint`] with a parsed hint.
    pub fn with_hint(mut self, hint: Hint) -> Self {
        self.hint = Some(hint);
        self
    }

    /// The options of a count: only the number of results is read.
    pub(crate) fn counting(mut self) -> Self {
        self.count_only = true;
        self
    }

    /// The paths a caller reads from each result besides the filter's and
    /// the sort's: none for a count, an inclusion projection's paths, or
    /// `None` when it reads whole documents (no projection, an exclusion,
    /// a `$meta` field), which no index covers.
    fn cover_paths(&self) -> Option<Vec<super::path::FieldPath>> {
        if self.count_only {
            return Some(Vec::new());
        }
        match &self.projection {
            Some(p) if p.is_inclusion() && p.text_score_field().is_none() => {
                Some(p.paths().to_vec())
            }
            _ => None,
        }
    }
}

/// What [`Collection::explain`] reports: the plan chosen, the candidates
/// considered, and what running it read (as MongoDB's `executionStats`).
#[derive(Debug, Clone, PartialEq)]
pub struct Explain {
    /// The chosen plan.
    pub plan: Plan,
    /// Every plan considered, with its estimated entries examined; the
    /// chosen one is marked.
    pub candidates: Vec<Candidate>,
    /// Table entries read (index entries and documents).
    pub examined: u64,
    /// Index entries read (and `_id` keys read to collect a plan's
    /// documents), as MongoDB's `totalKeysExamined`.
    pub keys_examined: u64,
    /// Documents read, as MongoDB's `totalDocsExamined`.
    pub docs_examined: u64,
    /// Documents returned.
    pub returned: u64,
    /// Whether the results were sorted in memory (no index gave the order).
    pub sorted_in_memory: bool,
    /// The query's shape's key in the plan cache (MongoDB's
    /// `planCacheKey`: the same for every query of the shape, values
    /// aside), or `None` for a plan the cache does not hold (`$text`, no
    /// collection).
    pub plan_cache_key: Option<String>,
    /// Whether the plan came from the plan cache (MongoDB's `isCached`):
    /// the choice made for an earlier query of the same shape, bound to
    /// this query's values, without a trial (its candidate's estimate is
    /// `None`).
    pub from_plan_cache: bool,
}

impl Explain {
    /// Whether the query was answered from an index alone (a covered
    /// query: [`Plan::Covered`]).
    pub fn covered(&self) -> bool {
        matches!(self.plan, Plan::Covered(_))
    }

    /// The report as JSON: `plan`, `covered`, `examined`, `keys_examined`,
    /// `docs_examined`, `returned`, `sorted_in_memory`, `plan_cache_key`,
    /// `from_plan_cache` and `candidates` (each with `plan`, `estimate`,
    /// `sorted`, `chosen`), as the CLI and the server print it.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "plan": self.plan.to_string(),
            "covered": self.covered(),
            "examined": self.examined,
            "keys_examined": self.keys_examined,
            "docs_examined": self.docs_examined,
            "returned": self.returned,
            "sorted_in_memory": self.sorted_in_memory,
            "plan_cache_key": self.plan_cache_key,
            "from_plan_cache": self.from_plan_cache,
            "candidates": self
                .candidates
                .iter()
                .map(|c| serde_json::json!({
                    "plan": c.plan.to_string(),
                    "estimate": c.estimate,
                    "sorted": c.sorted,
                    "chosen": c.chosen,
                }))
                .collect::<Vec<_>>(),
        })
    }
}

/// Options of the update operations.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UpdateOptions {
    /// Insert a document built from the filter's equalities and the update
    /// when nothing matches.
    pub upsert: bool,
}

/// Which version of the document `find_one_and_update` /
/// `find_one_and_replace` return.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReturnDocument {
    /// The document as it was before (`None` when an upsert inserted it).
    #[default]
    Before,
    /// The document as it is after (the inserted one for an upsert).
    After,
}

/// Options of `find_one_and_update` / `_replace` / `_delete`.
#[derive(Debug, Clone, Default)]
pub struct FindOneAndOptions {
    /// Which of the matching documents: the first in this order (else the
    /// first the planner finds).
    pub sort: Option<SortSpec>,
    /// Insert a document when nothing matches (update and replace only).
    pub upsert: bool,
    /// Return the document before or after the change.
    pub return_document: ReturnDocument,
}

/// What an update did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UpdateResult {
    /// Documents the filter matched.
    pub matched: u64,
    /// Documents changed (matched and different afterwards).
    pub modified: u64,
    /// The `_id` of the document an upsert inserted.
    pub upserted_id: Option<Value>,
}

fn data_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::internal(name)
}

/// A query's plan: the chosen one, the candidates, whether it sorted in
/// memory.
struct QueryPlan {
    /// The plan and the candidates, written out when explain asks.
    described: planner::Described,
    in_memory: bool,
    /// The `$text` scores by `_id` key, for a query with `$text`.
    scores: Option<TextScores>,
}

impl QueryPlan {
    /// The explain of this plan, run: index keys and documents read,
    /// entries read, documents returned.
    fn explain(&self, [keys, docs]: [u64; 2], examined: u64, returned: u64) -> Explain {
        let cache = self.described.cache();
        Explain {
            plan: self.described.plan(),
            candidates: self.described.candidates(),
            examined,
            keys_examined: keys,
            docs_examined: docs,
            returned,
            sorted_in_memory: self.in_memory,
            plan_cache_key: cache.map(|c| format!("{:08X}", c.key)),
            from_plan_cache: cache.is_some_and(|c| c.from_cache),
        }
    }
}

/// Fills in the collection's name in an error the planner raised without
/// it (a hint naming no index).
pub(crate) fn in_collection(e: DocumentError, name: &str) -> DocumentError {
    match e {
        DocumentError::IndexError {
            collection,
            index,
            reason,
        } if collection.is_empty() => DocumentError::IndexError {
            collection: name.to_string(),
            index,
            reason,
        },
        DocumentError::TextIndexRequired { collection } if collection.is_empty() => {
            DocumentError::TextIndexRequired {
                collection: name.to_string(),
            }
        }
        e => e,
    }
}

/// The sort of documents no index orders, keeping only the first
/// `window` (skip + limit) when there is a limit: a bounded top-k that
/// holds at most twice that many documents at a time (sorted and cut
/// back whenever it fills), so a limited sort never holds every match.
/// Ties stay in arrival order (a stable sort of an ordered prefix).
struct TopK<'s> {
    spec: &'s SortSpec,
    keep: Option<usize>,
    /// Each document with its `$text` score (0 without one).
    docs: Vec<(Value, Vec<u8>, f64)>,
    scores: Option<TextScores>,
}

/// A `$text` query's scores by `_id` key.
pub(crate) type TextScores = std::sync::Arc<std::collections::HashMap<Vec<u8>, f64>>;

/// The `$text` score of an encoded document.
fn score_of(scores: &TextScores, bytes: &[u8]) -> DocResult<f64> {
    Ok(scores.get(&id_key_of(bytes)?).copied().unwrap_or(0.0))
}

/// MongoDB's refusal of `{"$meta": "textScore"}` in a query without `$text`.
fn check_meta(opts: &FindOptions, scores: Option<&TextScores>) -> DocResult<()> {
    let wants = opts
        .projection
        .as_ref()
        .is_some_and(|p| p.text_score_field().is_some())
        || opts.sort.as_ref().is_some_and(SortSpec::has_text_score);
    if wants && scores.is_none() {
        return Err(DocumentError::InvalidQuery {
            reason: "query requires text score metadata ({\"$meta\": \"textScore\"}), but it is not available: the filter has no $text".into(),
        });
    }
    Ok(())
}

impl<'s> TopK<'s> {
    fn new(spec: &'s SortSpec, window: Option<u64>, scores: Option<TextScores>) -> Self {
        TopK {
            spec,
            keep: window.map(|w| usize::try_from(w).unwrap_or(usize::MAX)),
            docs: Vec::new(),
            scores,
        }
    }

    fn push(&mut self, bytes: Vec<u8>) -> DocResult<()> {
        let score = match &self.scores {
            Some(s) if self.spec.has_text_score() => score_of(s, &bytes)?,
            _ => 0.0,
        };
        self.docs.push((codec::decode_value(&bytes)?, bytes, score));
        if let Some(k) = self.keep {
            if self.docs.len() >= k.saturating_mul(2).max(64) {
                self.cut(k);
            }
        }
        Ok(())
    }

    fn cut(&mut self, k: usize) {
        let spec = self.spec;
        if spec.has_text_score() {
            self.docs
                .sort_by(|a, b| spec.compare_scored((&a.0, a.2), (&b.0, b.2)));
        } else {
            self.docs.sort_by(|a, b| spec.compare(&a.0, &b.0));
        }
        self.docs.truncate(k);
    }

    fn finish(mut self) -> Vec<Vec<u8>> {
        self.cut(self.keep.unwrap_or(usize::MAX));
        self.docs.into_iter().map(|(_, b, _)| b).collect()
    }
}

/// The projection of `opts` as a cursor mapper (a `$meta` field filled
/// from `scores`).
fn mapper_of(opts: &FindOptions, scores: Option<TextScores>) -> Option<super::cursor::Mapper> {
    opts.projection.clone().map(|p| {
        Box::new(move |bytes: &[u8]| -> DocResult<Vec<u8>> {
            let mut doc = p.apply_ref(codec::value_ref(bytes)?)?;
            if let (Some(field), Some(s)) = (p.text_score_field(), &scores) {
                doc.insert(field, Value::Float(score_of(s, bytes)?));
            }
            let mut out = Vec::new();
            codec::encode_value(&Value::Object(doc), &mut out)?;
            Ok(out)
        }) as super::cursor::Mapper
    })
}

/// A query on a collection that does not exist finds nothing, except
/// that a `$text` condition is [`DocumentError::TextIndexRequired`] (no
/// collection, so no text index: MongoDB answers the same).
fn no_collection(filter: &Filter) -> DocResult<()> {
    if filter.has_text() {
        return Err(DocumentError::TextIndexRequired {
            collection: String::new(),
        });
    }
    Ok(())
}

/// Runs a query in snapshot `r` (a read snapshot, or a write transaction
/// with its own changes); returns the cursor and its plan.
fn run_query<T, S: Snapshot>(
    r: S,
    meta: Option<&CollectionMeta>,
    filter: Filter,
    opts: &FindOptions,
) -> DocResult<(Results<T, S>, QueryPlan)> {
    let Some(meta) = meta else {
        no_collection(&filter)?;
        return Ok((
            Results {
                cursor: Cursor::new(r, None, Source::Scan),
                index_orders: Vec::new(),
            },
            QueryPlan {
                described: planner::Described::Fixed(Plan::FullScan, Vec::new(), None),
                in_memory: false,
                scores: None,
            },
        ));
    };
    let sort: Vec<_> = opts
        .sort
        .as_ref()
        .map(|s| s.keys().to_vec())
        .unwrap_or_default();
    let window = opts.limit.map(|l| l.saturating_add(opts.skip));
    let cover = opts.cover_paths();
    let planned = planner::plan(
        &r,
        meta,
        &filter,
        &sort,
        window,
        opts.hint.as_ref(),
        cover.as_deref(),
    )?;
    let scores = planned.text_scores.clone();
    check_meta(opts, scores.as_ref())?;
    let sorted = planned.sorted;
    let orders = planned.index_orders.clone();
    let (mut cursor, described): (Cursor<T, S>, _) = planner::cursor(r, meta, planned, filter);
    if sorted {
        // The index's order, but for long values it holds cut.
        cursor = cursor.with_resort(opts.sort.clone());
    }
    let mut in_memory = false;
    if let (Some(spec), false) = (&opts.sort, sorted) {
        // Sort in memory: the first skip + limit matches (every match
        // without a limit), ordered by the sort spec.
        in_memory = true;
        let mut top = TopK::new(spec, window, scores.clone());
        while let Some(b) = cursor.next_bytes(&orders)? {
            top.push(b)?;
        }
        let (examined, keys, docs_read) =
            (cursor.examined, cursor.keys_examined, cursor.docs_examined);
        let r = cursor.into_txn();
        cursor = Cursor::new(
            r,
            Some(meta.data_table().into_owned()),
            Source::Docs(top.finish().into()),
        );
        cursor.examined = examined;
        cursor.keys_examined = keys;
        cursor.docs_examined = docs_read;
    }
    let cursor = cursor
        .with_window(opts.skip, opts.limit)
        .with_mapper(mapper_of(opts, scores.clone()));
    let orders = if in_memory { Vec::new() } else { orders };
    Ok((
        Results {
            cursor,
            index_orders: orders,
        },
        QueryPlan {
            described,
            in_memory,
            scores,
        },
    ))
}

/// Runs a query in write transaction `txn` (its own changes included)
/// through the same planner and cursor as a snapshot's, collecting the
/// results' bytes (projected), and the plan and the index keys and
/// documents examined.
fn run_query_in_txn<W: SeamRead>(
    txn: &W,
    meta: &CollectionMeta,
    filter: &Filter,
    opts: &FindOptions,
) -> DocResult<(Vec<Vec<u8>>, QueryPlan, [u64; 2])> {
    let (mut res, qp): (Results<Document, _>, _) =
        run_query(txn, Some(meta), filter.clone(), opts)?;
    let mut out = Vec::new();
    while let Some(b) = res.next_raw()? {
        out.push(b);
    }
    Ok((out, qp, [res.keys_examined(), res.docs_examined()]))
}

/// `find` on the collection `name` in read snapshot `r` (owned, borrowed
/// or shared): what [`Collection::find_with`] and
/// [`SnapshotCollection::find_with`](super::SnapshotCollection::find_with)
/// run. The name is checked by the caller.
pub(crate) fn find_in<T, S>(
    r: S,
    name: &str,
    filter: Filter,
    opts: &FindOptions,
) -> DocResult<Results<T, S>>
where
    S: Snapshot,
{
    let meta = meta_in(&r, name)?;
    Ok(run_query(r, meta.as_deref(), filter, opts)
        .map_err(|e| in_collection(e, name))?
        .0)
}

/// How many results `res` has left.
pub(crate) fn count_of<T, S: Snapshot>(mut res: Results<T, S>) -> DocResult<u64> {
    let mut n = 0;
    while res.next_raw()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// `explain` of a query on the collection `name` in read snapshot `r`.
pub(crate) fn explain_in<T, S>(
    r: S,
    name: &str,
    filter: Filter,
    opts: &FindOptions,
) -> DocResult<Explain>
where
    S: Snapshot,
{
    let meta = meta_in(&r, name)?;
    let (mut res, qp): (Results<T, S>, _) =
        run_query(r, meta.as_deref(), filter, opts).map_err(|e| in_collection(e, name))?;
    let mut returned = 0;
    while res.next_raw()?.is_some() {
        returned += 1;
    }
    Ok(qp.explain(
        [res.keys_examined(), res.docs_examined()],
        res.examined(),
        returned,
    ))
}

/// Runs a query in snapshot `r` for callers that read the results' bytes
/// (the aggregation pipeline, `distinct`), with the `$text` scores of a
/// query with `$text` ([`text_score`] reads a document's).
pub(crate) fn run_query_values<S: Snapshot>(
    r: S,
    meta: Option<&CollectionMeta>,
    filter: Filter,
    opts: &FindOptions,
) -> DocResult<(Results<Document, S>, Option<TextScores>)> {
    let (res, qp) = run_query(r, meta, filter, opts)?;
    Ok((res, qp.scores))
}

/// Runs a query in write transaction `txn` (its own changes included) for
/// callers that read the results' bytes (the transaction's aggregation
/// pipeline and `distinct`), with the `$text` scores of a query with
/// `$text`. No collection: nothing (or, with `$text`, no text index).
pub(crate) fn run_query_values_in_txn<W: SeamRead>(
    txn: &W,
    meta: Option<&CollectionMeta>,
    filter: &Filter,
    opts: &FindOptions,
) -> DocResult<(Vec<Vec<u8>>, Option<TextScores>)> {
    let Some(meta) = meta else {
        no_collection(filter)?;
        return Ok((Vec::new(), None));
    };
    let (docs, qp, _) = run_query_in_txn(txn, meta, filter, opts)?;
    Ok((docs, qp.scores))
}

/// The `$text` score of the encoded document `bytes` among `scores` (none
/// without a `$text` query).
pub(crate) fn text_score(scores: Option<&TextScores>, bytes: &[u8]) -> DocResult<Option<f64>> {
    scores.map(|s| score_of(s, bytes)).transpose()
}

/// The `_id` keys of the documents matching `filter` (at most `limit`),
/// found with the planner in snapshot `r`.
fn matching_ids(
    r: ReadTransaction,
    meta: &CollectionMeta,
    filter: Filter,
    limit: Option<u64>,
) -> DocResult<Vec<Vec<u8>>> {
    let planned = planner::plan(&r, meta, &filter, &[], limit, None, None)?;
    let orders = planned.index_orders.clone();
    let mut cursor: Cursor<Document> = planner::cursor(r, meta, planned, filter)
        .0
        .with_window(0, limit);
    let mut ids = Vec::new();
    while let Some(b) = cursor.next_bytes(&orders)? {
        ids.push(id_key_of(&b)?);
    }
    Ok(ids)
}

/// The `_id` key of an encoded document.
fn id_key_of(bytes: &[u8]) -> DocResult<Vec<u8>> {
    let root = codec::value_ref(bytes)?;
    let id = match root {
        codec::ValueRef::Object(o) => o.get("_id")?,
        _ => None,
    };
    let id = id
        .ok_or_else(|| DocumentError::Custom("a stored document has no _id".into()))?
        .to_value()?;
    super::collection::id_key(&id)
}

/// Applies `update` to the documents with `_id` keys `ids`, then upserts if
/// asked and nothing matched. Runs inside the writer's operation.
fn apply_updates<W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    coll: &str,
    meta: &CollectionMeta,
    ids: Vec<Vec<u8>>,
    filter: &Filter,
    update: &Update,
    opts: UpdateOptions,
) -> DocResult<UpdateResult> {
    let mut res = UpdateResult::default();
    for idk in ids {
        let Some(old) = w
            .txn
            .open_table(data_def(&meta.data_table()))?
            .get(idk.as_slice())?
            .map(|g| g.value().to_vec())
        else {
            continue;
        };
        res.matched += 1;
        let Value::Object(mut doc) = codec::decode_value(&old)? else {
            continue;
        };
        let id_before = doc.get("_id").cloned();
        update.apply(&mut doc)?;
        if update.is_replacement() {
            // A replacement keeps the _id (and may not change it).
            match (doc.get("_id"), &id_before) {
                (None, Some(id)) => {
                    let mut d = Document::new().with("_id", id.clone());
                    for (k, v) in doc {
                        d.insert(k, v);
                    }
                    doc = d;
                }
                (Some(a), Some(b)) if a != b => return Err(DocumentError::ImmutableId),
                _ => {}
            }
        } else if doc.get("_id") != id_before.as_ref() {
            return Err(DocumentError::ImmutableId);
        }
        let p = prepare(&doc)?;
        if p.bytes != old {
            let mode = if update.is_replacement() {
                StoreMode::Replace
            } else {
                StoreMode::Update
            };
            w.store(coll, meta, &p, mode)?;
            res.modified += 1;
        }
    }
    if res.matched == 0 && opts.upsert {
        let doc = update.apply_upsert(filter.upsert_seed()?)?;
        let p = prepare(&doc)?;
        w.store(coll, meta, &p, StoreMode::Insert)?;
        res.upserted_id = Some(p.id);
    }
    Ok(res)
}

/// `find_one_and_update` / `find_one_and_replace` inside the writer's
/// operation, for [`Collection`] and [`TxnCollection`] alike: updates the
/// document `first` finds (or upserts) and returns it as it was before or
/// is after, as `opts.return_document` asks.
fn find_one_and_modify_in<T: DeserializeOwned, W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    name: &str,
    filter: &Filter,
    update: &Update,
    opts: &FindOneAndOptions,
) -> DocResult<Option<T>> {
    let Some(meta) = w.meta(name, opts.upsert)? else {
        return Ok(None);
    };
    let found = first_match_in_txn(w, &meta, filter, opts.sort.as_ref())?;
    let ids: Vec<Vec<u8>> = found.iter().map(|(k, _)| k.clone()).collect();
    let uopts = UpdateOptions {
        upsert: opts.upsert,
    };
    let res = apply_updates(w, name, &meta, ids, filter, update, uopts)?;
    match opts.return_document {
        ReturnDocument::Before => match found {
            Some((_, before)) => Ok(Some(codec::from_slice(&before)?)),
            None => Ok(None),
        },
        ReturnDocument::After => {
            let key = match (&found, &res.upserted_id) {
                (Some((k, _)), _) => k.clone(),
                (None, Some(id)) => super::collection::id_key(id)?,
                (None, None) => return Ok(None),
            };
            let t = w.txn.open_table(data_def(&meta.data_table()))?;
            let got = t.get(key.as_slice())?;
            match got {
                Some(g) => Ok(Some(codec::from_slice(g.value())?)),
                None => Ok(None),
            }
        }
    }
}

/// `find_one_and_delete` inside the writer's operation, for
/// [`Collection`] and [`TxnCollection`] alike: deletes the document
/// `first` finds and returns it.
fn find_one_and_delete_in<T: DeserializeOwned, W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    name: &str,
    filter: &Filter,
    sort: Option<&SortSpec>,
) -> DocResult<Option<T>> {
    let Some(meta) = w.meta(name, false)? else {
        return Ok(None);
    };
    let Some((idk, _)) = first_match_in_txn(w, &meta, filter, sort)? else {
        return Ok(None);
    };
    match w.delete(name, &meta, &idk)? {
        Some(old) => Ok(Some(codec::from_slice(&old)?)),
        None => Ok(None),
    }
}

/// The first document matching `filter` in `sort` order as transaction
/// `w` sees it (its own earlier changes included), found with the
/// planner: `(_id key, bytes)`.
fn first_match_in_txn<W: SeamWrite + SeamRead>(
    w: &Writer<'_, W>,
    meta: &CollectionMeta,
    filter: &Filter,
    sort: Option<&SortSpec>,
) -> DocResult<Option<(Vec<u8>, Vec<u8>)>> {
    let mut opts = FindOptions::new().limit(1);
    if let Some(s) = sort {
        opts = opts.with_sort(s.clone());
    }
    let (docs, _, _) = run_query_in_txn(w.txn, meta, filter, &opts)?;
    match docs.into_iter().next() {
        Some(b) => Ok(Some((id_key_of(&b)?, b))),
        None => Ok(None),
    }
}

impl<T: Serialize + DeserializeOwned> Collection<'_, T> {
    /// The documents matching `filter`, streamed from one snapshot.
    ///
    /// ```
    /// use serde_json::json;
    /// use cairndb::document::Document;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("q.cairn"))?;
    /// let c = db.collection::<Document>("people");
    /// c.insert_many(&[Document::new().with("name", "ada").with("age", 36),
    ///                 Document::new().with("name", "bob").with("age", 25)])?;
    /// let names: Vec<String> = c
    ///     .find(json!({"age": {"$gt": 30}}))?
    ///     .map(|d| d.map(|d| d["name"].as_str().unwrap_or("").to_string()))
    ///     .collect::<Result<_, _>>()?;
    /// assert_eq!(names, ["ada"]);
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn find(&self, filter: impl IntoFilter) -> DocResult<Results<T>> {
        self.find_with(filter, FindOptions::default())
    }

    /// [`Collection::find`] with sort, skip, limit and projection.
    pub fn find_with(&self, filter: impl IntoFilter, opts: FindOptions) -> DocResult<Results<T>> {
        let filter = filter.into_filter()?;
        check_collection_name(self.name())?;
        find_in(self.database().begin_read()?, self.name(), filter, &opts)
    }

    /// The first document matching `filter`.
    pub fn find_one(&self, filter: impl IntoFilter) -> DocResult<Option<T>> {
        self.find_with(filter, FindOptions::default().limit(1))?
            .next()
            .transpose()
    }

    /// How many documents match `filter` (answered from an index alone
    /// when the filter names only the paths of one single-key index:
    /// see [`Collection::explain_count`]).
    pub fn count(&self, filter: impl IntoFilter) -> DocResult<u64> {
        count_of(self.find_with(filter, FindOptions::new().counting())?)
    }

    /// Runs the query and reports the plan chosen and what it read.
    pub fn explain(&self, filter: impl IntoFilter, opts: FindOptions) -> DocResult<Explain> {
        let filter = filter.into_filter()?;
        check_collection_name(self.name())?;
        explain_in::<T, _>(self.database().begin_read()?, self.name(), filter, &opts)
    }

    /// Runs [`Collection::count`]'s query and reports its plan and what
    /// it read (MongoDB's `explain().count()`): a filter on the paths of
    /// one single-key index is counted from the index alone
    /// (`docs_examined` 0).
    pub fn explain_count(&self, filter: impl IntoFilter) -> DocResult<Explain> {
        let filter = filter.into_filter()?;
        check_collection_name(self.name())?;
        explain_in::<T, _>(
            self.database().begin_read()?,
            self.name(),
            filter,
            &FindOptions::new().counting(),
        )
    }

    fn update_impl(
        &self,
        filter: Filter,
        update: Update,
        opts: UpdateOptions,
        limit: Option<u64>,
    ) -> DocResult<UpdateResult> {
        let db = self.database();
        self.write_op(|w| {
            let Some(meta) = w.meta(self.name(), opts.upsert)? else {
                return Ok(UpdateResult::default());
            };
            // The writer lock is held: a fresh snapshot is this
            // transaction's starting point (nothing else was written yet).
            let ids = matching_ids(db.begin_read()?, &meta, filter.clone(), limit)?;
            apply_updates(w, self.name(), &meta, ids, &filter, &update, opts)
        })
    }

    /// Updates the first document matching `filter` (or upserts).
    pub fn update_one(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> DocResult<UpdateResult> {
        self.update_impl(filter.into_filter()?, update.into_update()?, opts, Some(1))
    }

    /// Updates every document matching `filter` (or upserts), in one
    /// transaction.
    pub fn update_many(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> DocResult<UpdateResult> {
        self.update_impl(filter.into_filter()?, update.into_update()?, opts, None)
    }

    fn find_one_and_modify(
        &self,
        filter: Filter,
        update: Update,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.write_op(|w| find_one_and_modify_in(w, self.name(), &filter, &update, &opts))
    }

    /// Updates the first document matching `filter` (the first in
    /// `opts.sort` order, if given) and returns it as it was before or is
    /// after (`opts.return_document`); with `opts.upsert`, inserts one
    /// when nothing matches. `None`: nothing matched (and, returning the
    /// document before, also when an upsert inserted one).
    pub fn find_one_and_update(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.find_one_and_modify(filter.into_filter()?, operators_only(update)?, opts)
    }

    /// Replaces the first document matching `filter` (see
    /// [`find_one_and_update`](Self::find_one_and_update)); the `_id` is
    /// kept.
    pub fn find_one_and_replace(
        &self,
        filter: impl IntoFilter,
        replacement: &T,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.find_one_and_modify(filter.into_filter()?, replacement_of(replacement)?, opts)
    }

    /// Deletes the first document matching `filter` (the first in
    /// `opts.sort` order, if given) and returns it.
    pub fn find_one_and_delete(
        &self,
        filter: impl IntoFilter,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        let filter = filter.into_filter()?;
        self.write_op(|w| find_one_and_delete_in(w, self.name(), &filter, opts.sort.as_ref()))
    }

    fn delete_impl(&self, filter: Filter, limit: Option<u64>) -> DocResult<u64> {
        let db = self.database();
        self.write_op(|w| {
            let Some(meta) = w.meta(self.name(), false)? else {
                return Ok(0);
            };
            let ids = matching_ids(db.begin_read()?, &meta, filter, limit)?;
            let mut n = 0;
            for idk in ids {
                if w.delete(self.name(), &meta, &idk)?.is_some() {
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    /// Deletes the first document matching `filter`; returns how many (0 or 1).
    pub fn delete_one(&self, filter: impl IntoFilter) -> DocResult<u64> {
        self.delete_impl(filter.into_filter()?, Some(1))
    }

    /// Deletes every document matching `filter`, in one transaction.
    pub fn delete_many(&self, filter: impl IntoFilter) -> DocResult<u64> {
        self.delete_impl(filter.into_filter()?, None)
    }
}

/// The `_id` keys of documents matching `filter` as transaction `w` sees
/// them (its own earlier changes included), found with the planner.
/// The `_id` keys of those of `ids` stored in the collection (`meta`)
/// whose documents match `filter`, in the transaction's view (each read
/// by its key).
fn still_matching<W: SeamWrite + SeamRead>(
    w: &Writer<'_, W>,
    meta: &CollectionMeta,
    ids: &[Value],
    filter: &Filter,
) -> DocResult<Vec<Vec<u8>>> {
    let t = w.txn.open_table(data_def(&meta.data_table()))?;
    let mut keys = Vec::with_capacity(ids.len());
    for id in ids {
        let idk = meta.id_key(id)?;
        let matches = match t.get(idk.as_slice())? {
            Some(g) => filter.matches_bytes(g.value())?,
            None => false,
        };
        if matches {
            keys.push(idk);
        }
    }
    Ok(keys)
}

/// `find_one_and_update`'s update: operators only (a replacement is
/// `find_one_and_replace`'s).
fn operators_only(update: impl IntoUpdate) -> DocResult<Update> {
    let update = update.into_update()?;
    if update.is_replacement() {
        return Err(DocumentError::InvalidUpdate {
            reason: "find_one_and_update takes update operators; use find_one_and_replace".into(),
        });
    }
    Ok(update)
}

/// `find_one_and_replace`'s update: `replacement` as a whole document.
fn replacement_of<T: Serialize>(replacement: &T) -> DocResult<Update> {
    match codec::decode_value(&codec::to_vec(replacement)?)? {
        Value::Object(d) => Update::replacement(d),
        other => Err(DocumentError::NotAnObject {
            found: other.kind().name(),
        }),
    }
}

fn matching_ids_in_txn<W: SeamWrite + SeamRead>(
    w: &Writer<'_, W>,
    meta: &CollectionMeta,
    filter: &Filter,
    limit: Option<u64>,
) -> DocResult<Vec<Vec<u8>>> {
    let opts = FindOptions {
        limit,
        ..FindOptions::default()
    };
    let (docs, _, _) = run_query_in_txn(w.txn, meta, filter, &opts)?;
    docs.iter().map(|d| id_key_of(d)).collect()
}

impl<T: Serialize + DeserializeOwned, W: SeamWrite + SeamRead> TxnCollection<'_, T, W> {
    /// [`Collection::find_one_and_update`] in this transaction: the first
    /// match (in `opts.sort` order) as this transaction sees it, updated
    /// (or upserted), returned as it was before or is after.
    pub fn find_one_and_update(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.find_one_and_modify(filter.into_filter()?, operators_only(update)?, opts)
    }

    /// [`Collection::find_one_and_replace`] in this transaction (the `_id`
    /// is kept).
    pub fn find_one_and_replace(
        &self,
        filter: impl IntoFilter,
        replacement: &T,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.find_one_and_modify(filter.into_filter()?, replacement_of(replacement)?, opts)
    }

    fn find_one_and_modify(
        &self,
        filter: Filter,
        update: Update,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        self.write_op(|w, name| find_one_and_modify_in(w, name, &filter, &update, &opts))
    }

    /// [`Collection::find_one_and_delete`] in this transaction: the first
    /// match (in `opts.sort` order) as this transaction sees it, deleted
    /// and returned.
    pub fn find_one_and_delete(
        &self,
        filter: impl IntoFilter,
        opts: FindOneAndOptions,
    ) -> DocResult<Option<T>> {
        let filter = filter.into_filter()?;
        self.write_op(|w, name| find_one_and_delete_in(w, name, &filter, opts.sort.as_ref()))
    }

    /// Updates the first matching document (or upserts), seeing this
    /// transaction's earlier changes.
    pub fn update_one(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> DocResult<UpdateResult> {
        self.update_impl(filter.into_filter()?, update.into_update()?, opts, Some(1))
    }

    /// Updates every matching document (or upserts).
    pub fn update_many(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> DocResult<UpdateResult> {
        self.update_impl(filter.into_filter()?, update.into_update()?, opts, None)
    }

    fn update_impl(
        &self,
        filter: Filter,
        update: Update,
        opts: UpdateOptions,
        limit: Option<u64>,
    ) -> DocResult<UpdateResult> {
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, opts.upsert)? else {
                return Ok(UpdateResult::default());
            };
            let ids = matching_ids_in_txn(w, &meta, &filter, limit)?;
            apply_updates(w, name, &meta, ids, &filter, &update, opts)
        })
    }

    /// Applies `update` to each document with an `_id` in `ids` that
    /// still matches `filter` in this transaction (read by `_id`, the
    /// filter checked again; an `_id` no longer stored or no longer
    /// matching is skipped and not counted): one batch of an
    /// `update_many` split over several transactions (`cairndb-etcd`'s).
    /// No planner, no upsert: only the given documents are read.
    pub fn update_ids(
        &self,
        ids: &[Value],
        filter: &Filter,
        update: &Update,
    ) -> DocResult<UpdateResult> {
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, false)? else {
                return Ok(UpdateResult::default());
            };
            let keys = still_matching(w, &meta, ids, filter)?;
            apply_updates(
                w,
                name,
                &meta,
                keys,
                filter,
                update,
                UpdateOptions::default(),
            )
        })
    }

    /// Deletes each document with an `_id` in `ids` that still matches
    /// `filter` in this transaction (see [`TxnCollection::update_ids`]);
    /// returns how many.
    pub fn delete_ids(&self, ids: &[Value], filter: &Filter) -> DocResult<u64> {
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, false)? else {
                return Ok(0);
            };
            let mut n = 0;
            for idk in still_matching(w, &meta, ids, filter)? {
                if w.delete(name, &meta, &idk)?.is_some() {
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    /// Deletes every matching document; returns how many.
    pub fn delete_many(&self, filter: impl IntoFilter) -> DocResult<u64> {
        self.delete_impl(filter.into_filter()?, None)
    }

    /// Deletes the first matching document; returns how many (0 or 1).
    pub fn delete_one(&self, filter: impl IntoFilter) -> DocResult<u64> {
        self.delete_impl(filter.into_filter()?, Some(1))
    }

    fn delete_impl(&self, filter: Filter, limit: Option<u64>) -> DocResult<u64> {
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, false)? else {
                return Ok(0);
            };
            let ids = matching_ids_in_txn(w, &meta, &filter, limit)?;
            let mut n = 0;
            for idk in ids {
                if w.delete(name, &meta, &idk)?.is_some() {
                    n += 1;
                }
            }
            Ok(n)
        })
    }

    /// The documents matching `filter` as this transaction sees them
    /// (its own changes included), found with the planner as
    /// [`Collection::find`]'s are; collected in memory.
    pub fn find(&self, filter: impl IntoFilter) -> DocResult<Vec<T>> {
        self.find_with(filter, FindOptions::default())
    }

    /// [`TxnCollection::find`] with sort, skip, limit, projection and hint.
    pub fn find_with(&self, filter: impl IntoFilter, opts: FindOptions) -> DocResult<Vec<T>> {
        let filter = filter.into_filter()?;
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, false)? else {
                return Ok(Vec::new());
            };
            let (docs, _, _) = run_query_in_txn(w.txn, &meta, &filter, &opts)
                .map_err(|e| in_collection(e, name))?;
            docs.iter().map(|d| codec::from_slice(d)).collect()
        })
    }

    /// The plan a query in this transaction uses and what it read (as
    /// [`Collection::explain`]).
    pub fn explain(&self, filter: impl IntoFilter, opts: FindOptions) -> DocResult<Explain> {
        let filter = filter.into_filter()?;
        self.write_op(|w, name| {
            let Some(meta) = w.meta(name, false)? else {
                return Ok(Explain {
                    plan: Plan::FullScan,
                    candidates: Vec::new(),
                    examined: 0,
                    keys_examined: 0,
                    docs_examined: 0,
                    returned: 0,
                    sorted_in_memory: false,
                    plan_cache_key: None,
                    from_plan_cache: false,
                });
            };
            let (docs, qp, [keys, docs_read]) = run_query_in_txn(w.txn, &meta, &filter, &opts)
                .map_err(|e| in_collection(e, name))?;
            Ok(qp.explain([keys, docs_read], keys + docs_read, docs.len() as u64))
        })
    }
}
