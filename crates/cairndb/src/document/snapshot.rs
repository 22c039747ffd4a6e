//! Read-only views of collections in one snapshot: [`SnapshotCollection`],
//! made by [`ReadTransaction::collection`] (borrowing the snapshot) or
//! [`SnapshotCollection::new`] (owning it, e.g. in an `Arc`). Every read of
//! a view — `find`, `count`, `explain`, `aggregate`, `distinct`, `get`,
//! `len`, `list_indexes` — sees the same commit, whatever is committed
//! meanwhile, as the reads of a MongoDB session with
//! `readConcern: "snapshot"` do. A view has no write method: writing
//! through one does not compile.
//!
//! The queries run the same planner and cursor as [`Collection`]'s
//! (`super::query::find_in` and friends), over the view's snapshot instead
//! of a fresh one.

use std::borrow::Borrow;
use std::marker::PhantomData;

use serde::de::DeserializeOwned;

use super::aggregate::{
    aggregate_in, distinct_in, AggregateExplain, AggregateOptions, Aggregation, IntoPipeline,
};
#[cfg(doc)]
use super::collection::Collection;
use super::collection::{check_collection_name, get_in, meta_in, IndexInfo, CATALOG};
use super::cursor::Results;
use super::error::DocResult;
use super::path::FieldPath;
use super::planner::Snapshot;
use super::query::{count_of, explain_in, find_in, Explain, FindOptions, IntoFilter};
use super::value::Value;
use crate::seam::{SeamRead, SeamTable};
use crate::txn::ReadTransaction;

/// A collection as of one read snapshot, read-only: what
/// [`ReadTransaction::collection`] returns (`S` = `&ReadTransaction`), or
/// [`SnapshotCollection::new`] over a shared `Arc<ReadTransaction>` (whose
/// [`Results`] then own their share of the snapshot and may outlive the
/// view). Its reads are [`Collection`]'s, on that snapshot.
///
/// ```
/// use serde_json::json;
/// use cairndb::document::Document;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("s.cairn"))?;
/// let people = db.collection::<Document>("people");
/// people.insert(&Document::new().with("name", "ada"))?;
/// let snap = db.begin_read()?;
/// people.insert(&Document::new().with("name", "bob"))?; // after the snapshot
/// let then = snap.collection::<Document>("people");
/// assert_eq!(then.count(json!({}))?, 1);
/// assert_eq!(people.count(json!({}))?, 2);
/// # Ok::<(), cairndb::Error>(())
/// ```
///
/// It has no write method, so a write through it does not compile:
///
/// ```compile_fail
/// use cairndb::document::Document;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("s.cairn")).unwrap();
/// let snap = db.begin_read().unwrap();
/// snap.collection::<Document>("people").insert(&Document::new());
/// ```
pub struct SnapshotCollection<S, T> {
    snapshot: S,
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<S, T> std::fmt::Debug for SnapshotCollection<S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotCollection")
            .field("name", &self.name)
            .finish()
    }
}

impl<S: Clone, T> Clone for SnapshotCollection<S, T> {
    fn clone(&self) -> Self {
        SnapshotCollection {
            snapshot: self.snapshot.clone(),
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl ReadTransaction {
    /// The collection `name` as of this snapshot, read-only (see
    /// [`SnapshotCollection`]). A collection that does not exist in the
    /// snapshot reads as empty.
    pub fn collection<T>(&self, name: &str) -> SnapshotCollection<&ReadTransaction, T> {
        SnapshotCollection::new(self, name)
    }

    /// The names of every collection in this snapshot, in order.
    pub fn list_collections(&self) -> DocResult<Vec<String>> {
        list_collections_in(self)
    }
}

/// The names of every collection in snapshot `r` of any backend of the
/// storage seam, in order.
pub fn list_collections_in<R: SeamRead + ?Sized>(r: &R) -> DocResult<Vec<String>> {
    let Some(t) = r.open_table_if_exists(CATALOG)? else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for item in t.iter()? {
        let (k, _) = item?;
        // The reserved key "" holds the next collection id.
        if !k.value().is_empty() {
            out.push(k.value().to_string());
        }
    }
    Ok(out)
}

/// The names of the collections with a TTL index in snapshot `r` of any
/// backend of the storage seam, in order: the ones a periodic expiry pass
/// visits (see [`crate::Database::ttl_collections`]).
pub fn ttl_collections_in<R: SeamRead + ?Sized>(r: &R) -> DocResult<Vec<String>> {
    let mut out = Vec::new();
    for name in list_collections_in(r)? {
        let ttl = meta_in(r, &name)?
            .is_some_and(|m| m.indexes.iter().any(|i| i.expire_after_seconds.is_some()));
        if ttl {
            out.push(name);
        }
    }
    Ok(out)
}

impl<S, T> SnapshotCollection<S, T>
where
    S: Snapshot + Clone,
{
    /// The collection `name` as of `snapshot`: a `&ReadTransaction` (as
    /// [`ReadTransaction::collection`] makes) or an
    /// `Arc<ReadTransaction>`, which every [`Results`] of the view shares
    /// — or a snapshot of another backend of the storage seam
    /// ([`crate::seam::SeamRead`]: `cairndb-etcd`'s), with the same reads.
    pub fn new(snapshot: S, name: &str) -> Self {
        SnapshotCollection {
            snapshot,
            name: name.to_string(),
            _t: PhantomData,
        }
    }

    /// The collection's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<S, T> SnapshotCollection<S, T>
where
    S: Snapshot + Borrow<ReadTransaction> + Clone,
{
    /// The snapshot this view reads.
    pub fn snapshot(&self) -> &ReadTransaction {
        self.snapshot.borrow()
    }
}

impl<S, T> SnapshotCollection<S, T>
where
    S: Snapshot + Clone,
    T: DeserializeOwned,
{
    /// The documents matching `filter` in the snapshot (see
    /// [`Collection::find`]).
    pub fn find(&self, filter: impl IntoFilter) -> DocResult<Results<T, S>> {
        self.find_with(filter, FindOptions::default())
    }

    /// [`SnapshotCollection::find`] with sort, skip, limit, projection
    /// and hint.
    pub fn find_with(
        &self,
        filter: impl IntoFilter,
        opts: FindOptions,
    ) -> DocResult<Results<T, S>> {
        let filter = filter.into_filter()?;
        check_collection_name(&self.name)?;
        find_in(self.snapshot.clone(), &self.name, filter, &opts)
    }

    /// The first document matching `filter`.
    pub fn find_one(&self, filter: impl IntoFilter) -> DocResult<Option<T>> {
        self.find_with(filter, FindOptions::default().limit(1))?
            .next()
            .transpose()
    }

    /// How many documents match `filter`.
    pub fn count(&self, filter: impl IntoFilter) -> DocResult<u64> {
        count_of(self.find_with(filter, FindOptions::new().counting())?)
    }

    /// Runs the query and reports the plan chosen and what it read (see
    /// [`Collection::explain`]).
    pub fn explain(&self, filter: impl IntoFilter, opts: FindOptions) -> DocResult<Explain> {
        let filter = filter.into_filter()?;
        check_collection_name(&self.name)?;
        explain_in::<T, S>(self.snapshot.clone(), &self.name, filter, &opts)
    }

    /// Runs [`SnapshotCollection::count`]'s query and reports its plan
    /// and what it read (see [`Collection::explain_count`]).
    pub fn explain_count(&self, filter: impl IntoFilter) -> DocResult<Explain> {
        self.explain(filter, FindOptions::new().counting())
    }

    /// Checks that every index of the collection equals the index
    /// recomputed from its documents in this snapshot (see
    /// [`Collection::check_indexes`]): the differences found, each naming
    /// the collection and the index (empty: consistent).
    pub fn check_indexes(&self) -> DocResult<Vec<String>> {
        check_collection_name(&self.name)?;
        super::collection::check_indexes_in(&self.snapshot, &self.name)
    }

    /// Runs an aggregation pipeline on the snapshot (see
    /// [`Collection::aggregate`]); `$lookup` reads its foreign collections
    /// from the same snapshot.
    pub fn aggregate<'a>(&self, pipeline: impl IntoPipeline) -> DocResult<Aggregation<'a>>
    where
        S: 'a,
    {
        self.aggregate_with(pipeline, AggregateOptions::default())
    }

    /// [`SnapshotCollection::aggregate`] with options (the memory bound).
    pub fn aggregate_with<'a>(
        &self,
        pipeline: impl IntoPipeline,
        opts: AggregateOptions,
    ) -> DocResult<Aggregation<'a>>
    where
        S: 'a,
    {
        let pipeline = pipeline.into_pipeline()?;
        check_collection_name(&self.name)?;
        aggregate_in(self.snapshot.clone(), &self.name, &pipeline, opts)
    }

    /// Runs the pipeline on the snapshot and reports the plan of the
    /// stages pushed down to the query planner and the stages run in
    /// memory (see [`Collection::explain_aggregate`]); the plan and the
    /// count of documents returned come from the same snapshot.
    pub fn explain_aggregate(&self, pipeline: impl IntoPipeline) -> DocResult<AggregateExplain> {
        let pipeline = pipeline.into_pipeline()?;
        let (filter, find, first) = pipeline.pushdown();
        let query = self.explain(filter, find)?;
        let mut returned = 0;
        for d in self.aggregate(pipeline.clone())? {
            d?;
            returned += 1;
        }
        let names = pipeline.stage_names();
        Ok(AggregateExplain {
            pushed_down: names[..first].iter().map(|s| s.to_string()).collect(),
            query,
            in_memory: names[first..].iter().map(|s| s.to_string()).collect(),
            returned,
        })
    }

    /// The distinct values of `field` among the documents matching
    /// `filter` (see [`Collection::distinct`]).
    pub fn distinct(&self, field: &str, filter: impl IntoFilter) -> DocResult<Vec<Value>> {
        let field = FieldPath::parse(field)?;
        let filter = filter.into_filter()?;
        check_collection_name(&self.name)?;
        distinct_in(self.snapshot.clone(), &self.name, &field, filter)
    }

    /// The document with this `_id`.
    pub fn get(&self, id: impl Into<Value>) -> DocResult<Option<T>> {
        check_collection_name(&self.name)?;
        get_in(&self.snapshot, &self.name, &id.into())
    }

    /// The number of documents.
    pub fn len(&self) -> DocResult<u64> {
        check_collection_name(&self.name)?;
        super::collection::len_in(&self.snapshot, &self.name)
    }

    /// Whether the collection holds no document.
    pub fn is_empty(&self) -> DocResult<bool> {
        Ok(self.len()? == 0)
    }

    /// The collection's indexes in the snapshot.
    pub fn list_indexes(&self) -> DocResult<Vec<IndexInfo>> {
        check_collection_name(&self.name)?;
        Ok(meta_in(&self.snapshot, &self.name)?
            .map(|m| m.indexes.clone())
            .unwrap_or_default())
    }

    /// The collection's indexes in the snapshot, each with the name of its
    /// table (a backend's state of an index is kept by table:
    /// [`SeamRead::incomplete_tables`]).
    pub fn list_index_tables(&self) -> DocResult<Vec<(IndexInfo, String)>> {
        check_collection_name(&self.name)?;
        Ok(meta_in(&self.snapshot, &self.name)?
            .map(|m| {
                m.indexes
                    .iter()
                    .map(|i| (i.clone(), m.index_table(i).into_owned()))
                    .collect()
            })
            .unwrap_or_default())
    }
}
