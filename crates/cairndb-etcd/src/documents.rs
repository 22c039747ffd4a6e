//! Documents on a cluster: the embedded engine's document layer — the same
//! planner, cursor, index maintenance and update code, generic over the
//! storage seam ([`cairndb::seam`]) — run in this crate's transactions.
//!
//! Each write is one transaction ([`cairndb::document::TxnCollection`]
//! over a [`WriteTransaction`]), committed as one etcd `Txn` and run again
//! from the start while it conflicts
//! ([`EtcdDatabase::run_in_transaction`]): it reads the collection's
//! metadata, the document's `_id` key and, for a unique index, the
//! entries of the value it adds, so of two writers that insert the same
//! `_id` or the same unique value only the first commits, and the other
//! runs again on the new state (and gets the duplicate key error there).
//! Each read is one snapshot at one revision
//! ([`cairndb::document::SnapshotCollection`] over a [`ReadTransaction`]),
//! whose results page through the cluster lazily.
//!
//! What does not carry over (README, "etcd mode"): change streams are
//! recorded by the writes of a collection that has them on, but cannot be
//! watched or switched on here, and TTL indexes are not created or
//! enforced here (an existing one's documents do not expire on a cluster):
//! both are [`Error::Unsupported`].

use std::marker::PhantomData;
use std::sync::Arc;

use cairndb::document::query::{Explain, FindOptions, IntoFilter, IntoUpdate, UpdateOptions};
use cairndb::document::{
    AggregateOptions, Aggregation, BulkResult, DocResult, IndexInfo, IndexOptions, IntoPipeline,
    Results, SnapshotCollection, TextIndexOptions, TxnCollection, UpdateResult, Value,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::db::EtcdDatabase;
use crate::error::{Error, Result};
use crate::txn::{ReadTransaction, WriteTransaction};

/// A snapshot shared by a view and the results it hands out.
pub type SharedSnapshot<'db> = Arc<ReadTransaction<'db>>;

/// The collection `name` of a database on a cluster, holding documents of
/// type `T`: the embedded [`cairndb::document::Collection`]'s API for what
/// runs over the storage seam, each call its own transaction. Errors of
/// the document layer are [`Error::Documents`] (a duplicate key, a bad
/// filter, …, the same as the embedded engine's); the cluster's are this
/// crate's own (`Unavailable`, `CommitIndeterminate`, `TooLarge`, …; a
/// `Conflict` only once [`Options::max_attempts`](crate::Options) runs
/// all conflicted).
///
/// Moving an application from a file to a cluster changes the open call:
///
/// ```no_run
/// use serde_json::json;
/// use cairndb::document::Document;
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // let db = cairndb::Database::open("app.cairn")?;
/// let db = cairndb_etcd::EtcdDatabase::connect("etcd://127.0.0.1:2379/app")?;
/// let people = db.collection::<Document>("people");
/// people.insert(&Document::new().with("name", "ada").with("age", 36))?;
/// assert_eq!(people.count(json!({"age": {"$gt": 30}}))?, 1);
/// # Ok(()) }
/// ```
pub struct EtcdCollection<'db, T> {
    db: &'db EtcdDatabase,
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for EtcdCollection<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdCollection")
            .field("name", &self.name)
            .finish()
    }
}

impl<T> Clone for EtcdCollection<'_, T> {
    fn clone(&self) -> Self {
        EtcdCollection {
            db: self.db,
            name: self.name.clone(),
            _t: PhantomData,
        }
    }
}

impl EtcdDatabase {
    /// The collection `name` holding documents of type `T`. Nothing is
    /// created until the first write.
    pub fn collection<T>(&self, name: &str) -> EtcdCollection<'_, T> {
        EtcdCollection {
            db: self,
            name: name.to_string(),
            _t: PhantomData,
        }
    }

    /// The names of every collection, in order (one snapshot).
    pub fn list_collections(&self) -> Result<Vec<String>> {
        let r = self.begin_read()?;
        Ok(cairndb::document::snapshot::list_collections_in(&r)?)
    }
}

impl<'db, T: Serialize + DeserializeOwned> EtcdCollection<'db, T> {
    /// The collection name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `f` on the collection in a write transaction, again from the
    /// start while the commit conflicts.
    fn write<R>(
        &self,
        mut f: impl FnMut(&TxnCollection<'_, T, WriteTransaction<'_>>) -> DocResult<R>,
    ) -> Result<R> {
        self.db
            .run_in_transaction(|tx| Ok(f(&TxnCollection::new(tx, &self.name))?))
    }

    /// A read-only view of the collection in a new snapshot; its results
    /// share the snapshot.
    pub fn snapshot(&self) -> Result<SnapshotCollection<SharedSnapshot<'db>, T>> {
        let r = Arc::new(self.db.begin_read()?);
        Ok(SnapshotCollection::new(r, &self.name))
    }

    /// Inserts a document; returns its `_id` (generated if it had none).
    /// An existing `_id` is a duplicate key error.
    pub fn insert(&self, doc: &T) -> Result<Value> {
        self.write(|c| c.insert(doc))
    }

    /// Inserts every document in one transaction (all or none); returns
    /// their `_id`s.
    pub fn insert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> Result<Vec<Value>>
    where
        T: 'a,
    {
        let docs: Vec<&T> = docs.into_iter().collect();
        self.write(|c| c.insert_many(docs.iter().copied()))
    }

    /// Inserts the document, or replaces the one with its `_id`; returns
    /// whether one was replaced.
    pub fn upsert(&self, doc: &T) -> Result<bool> {
        self.write(|c| c.upsert(doc))
    }

    /// [`EtcdCollection::upsert`] for every document, in one transaction.
    pub fn upsert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> Result<BulkResult>
    where
        T: 'a,
    {
        let docs: Vec<&T> = docs.into_iter().collect();
        self.write(|c| c.upsert_many(docs.iter().copied()))
    }

    /// Replaces the document with this one's `_id`; returns whether it
    /// existed (nothing is written if not).
    pub fn replace(&self, doc: &T) -> Result<bool> {
        self.write(|c| c.replace(doc))
    }

    /// Deletes the document with this `_id`; returns whether it existed.
    pub fn delete_id(&self, id: impl Into<Value>) -> Result<bool> {
        let id = id.into();
        self.write(|c| c.delete_id(id.clone()))
    }

    /// Updates the first document matching `filter` (or upserts).
    pub fn update_one(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> Result<UpdateResult> {
        let (filter, update) = (filter.into_filter()?, update.into_update()?);
        self.write(|c| c.update_one(filter.clone(), update.clone(), opts))
    }

    /// Updates every document matching `filter` (or upserts), in one
    /// transaction.
    pub fn update_many(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> Result<UpdateResult> {
        let (filter, update) = (filter.into_filter()?, update.into_update()?);
        self.write(|c| c.update_many(filter.clone(), update.clone(), opts))
    }

    /// Deletes the first document matching `filter`; returns how many (0
    /// or 1).
    pub fn delete_one(&self, filter: impl IntoFilter) -> Result<u64> {
        let filter = filter.into_filter()?;
        self.write(|c| c.delete_one(filter.clone()))
    }

    /// Deletes every document matching `filter`, in one transaction.
    pub fn delete_many(&self, filter: impl IntoFilter) -> Result<u64> {
        let filter = filter.into_filter()?;
        self.write(|c| c.delete_many(filter.clone()))
    }

    /// Creates an index on `fields` (paths with order 1 or -1), built over
    /// the existing documents in the same transaction (which must fit one
    /// etcd `Txn`). Creating one that exists with the same options does
    /// nothing.
    pub fn create_index(&self, fields: &[(&str, i8)], opts: IndexOptions) -> Result<IndexInfo> {
        self.write(|c| c.create_index(fields, opts.clone()))
    }

    /// Creates the collection's text index (see
    /// [`cairndb::document::Collection::create_text_index`]).
    pub fn create_text_index(
        &self,
        fields: &[(&str, u32)],
        opts: TextIndexOptions,
    ) -> Result<IndexInfo> {
        self.write(|c| c.create_text_index(fields, opts.clone()))
    }

    /// Drops an index; returns whether it existed.
    pub fn drop_index(&self, name: &str) -> Result<bool> {
        self.write(|c| c.drop_index(name))
    }

    /// Drops the collection with its indexes; returns whether it existed.
    pub fn drop(&self) -> Result<bool> {
        self.write(|c| c.drop_collection())
    }

    /// The collection's indexes.
    pub fn list_indexes(&self) -> Result<Vec<IndexInfo>> {
        Ok(self.snapshot()?.list_indexes()?)
    }

    /// The documents matching `filter`, streamed from one snapshot.
    pub fn find(&self, filter: impl IntoFilter) -> Result<Results<T, SharedSnapshot<'db>>> {
        self.find_with(filter, FindOptions::default())
    }

    /// [`EtcdCollection::find`] with sort, skip, limit, projection and
    /// hint.
    pub fn find_with(
        &self,
        filter: impl IntoFilter,
        opts: FindOptions,
    ) -> Result<Results<T, SharedSnapshot<'db>>> {
        Ok(self.snapshot()?.find_with(filter, opts)?)
    }

    /// The first document matching `filter`.
    pub fn find_one(&self, filter: impl IntoFilter) -> Result<Option<T>> {
        Ok(self.snapshot()?.find_one(filter)?)
    }

    /// How many documents match `filter`.
    pub fn count(&self, filter: impl IntoFilter) -> Result<u64> {
        Ok(self.snapshot()?.count(filter)?)
    }

    /// Runs the query and reports the plan chosen and what it read.
    pub fn explain(&self, filter: impl IntoFilter, opts: FindOptions) -> Result<Explain> {
        Ok(self.snapshot()?.explain(filter, opts)?)
    }

    /// Runs an aggregation pipeline on one snapshot (`$lookup` reads the
    /// same snapshot).
    pub fn aggregate(&self, pipeline: impl IntoPipeline) -> Result<Aggregation<'db>> {
        Ok(self
            .snapshot()?
            .aggregate_with(pipeline, AggregateOptions::default())?)
    }

    /// The distinct values of `field` among the documents matching
    /// `filter`.
    pub fn distinct(&self, field: &str, filter: impl IntoFilter) -> Result<Vec<Value>> {
        Ok(self.snapshot()?.distinct(field, filter)?)
    }

    /// The document with this `_id`.
    pub fn get(&self, id: impl Into<Value>) -> Result<Option<T>> {
        Ok(self.snapshot()?.get(id)?)
    }

    /// The number of documents.
    pub fn len(&self) -> Result<u64> {
        Ok(self.snapshot()?.len()?)
    }

    /// Whether the collection holds no document.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// TTL indexes do not carry over to a cluster (nothing there deletes
    /// expired documents): always [`Error::Unsupported`].
    pub fn create_ttl_index(
        &self,
        field: &str,
        expire_after_seconds: u64,
        opts: IndexOptions,
    ) -> Result<IndexInfo> {
        let _ = (field, expire_after_seconds, opts);
        Err(Error::Unsupported {
            what: "TTL indexes",
            reason: "nothing on a cluster deletes expired documents",
        })
    }

    /// Change streams do not carry over to a cluster (no watch of a
    /// collection's change log): always [`Error::Unsupported`].
    pub fn enable_change_stream(&self) -> Result<()> {
        Err(Error::Unsupported {
            what: "change streams",
            reason: "a collection's change log cannot be watched on a cluster",
        })
    }
}
