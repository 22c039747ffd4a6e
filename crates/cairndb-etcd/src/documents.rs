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
//! **Change streams** ([`EtcdCollection::watch`]) are the embedded
//! [`ChangeStream`] over this database ([`ChangeSource`]): writes to a
//! collection with its change stream on append to the change log
//! `$docs.changes` in their own `Txn`, at the log's last position + 1 read
//! in that transaction (the counter key `P/n/$docs.changes`, else the
//! log's last key; FORMAT.md), so two writes to watched collections on
//! any clients conflict and one runs again: positions are dense and in
//! commit order. A stream reads batches from snapshots from its checkpoint
//! and, caught up, waits with an etcd `Watch` on the log's version key
//! from the revision it read (a wake-up only): nothing is skipped or
//! repeated, and a resume token from any client resumes it.
//!
//! **Operations over many documents** run in batches, each one
//! serializable transaction, so that no collection size runs into etcd's
//! `--max-txn-ops` or `--max-request-bytes`:
//! [`EtcdCollection::update_many`] and [`EtcdCollection::delete_many`]
//! take the matching `_id`s from one snapshot and update or delete them
//! [`MANY_BATCH_DOCS`] at a time, each batch reading its documents again by
//! `_id` and checking the filter again (exactly once each; exact counts;
//! not atomic as a whole, as MongoDB's). Inside a caller's transaction
//! ([`TxnCollection`] in [`EtcdDatabase::run_in_transaction`]) they stay
//! one `Txn`, refused whole with [`Error::TooLarge`] when too large.
//!
//! **Index builds** ([`EtcdCollection::create_index`],
//! [`EtcdCollection::create_ttl_index`]) run in batches too, keeping the
//! state in this crate's own key `P/b/<index table>` (FORMAT.md, "etcd key
//! layout"; the document layer's catalog is unchanged):
//! 1. one `Txn` adds the index's definition to the collection's metadata
//!    ([`TxnCollection::define_index`]) and the building mark: from then
//!    on every write maintains the index for the documents it writes (its
//!    `Txn` compares the metadata), and the planner leaves it out (the
//!    storage seam's `incomplete_tables`);
//! 2. each batch lists up to [`INDEX_BATCH_DOCS`] data keys after the
//!    mark's, then in one `Txn` checks the mark, reads those documents by
//!    key, adds their entries ([`TxnCollection::build_index_entries`]) and
//!    moves the mark on; a conflicting batch runs again alone, one too
//!    large is halved;
//! 3. when no key is left, one `Txn` checks the mark and that the
//!    catalog still holds the index as defined, and deletes the mark: the
//!    index is ready.
//!
//! A unique violation met by a batch drops the index and returns the
//! duplicate key error naming the value and the document. A builder that
//! dies leaves the index building (maintained, unused, shown by
//! [`EtcdCollection::list_indexes_with_state`]): the next `create_index` of
//! the same name and options resumes it from its mark (two builders of
//! the same index share the work through the mark's compare), and
//! `drop_index` deletes it with its mark. Text indexes are built in one
//! transaction.
//!
//! **TTL indexes** are created as on a file, but on a cluster a
//! collection's writes do not delete expired documents (a batch in every
//! write would read the TTL index, conflicting with every concurrent
//! writer of the collection, and could push the write past etcd's
//! `--max-txn-ops`): [`EtcdCollection::delete_expired`] deletes them, in
//! bounded transactions, when the application runs it (periodically, from
//! one process, as MongoDB's TTL monitor runs every 60 seconds).

use std::marker::PhantomData;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use cairndb::document::changes::{self, ChangeSource};
use cairndb::document::query::{
    Explain, FindOneAndOptions, FindOptions, IntoFilter, IntoUpdate, UpdateOptions,
};
use cairndb::document::{
    AggregateExplain, AggregateOptions, Aggregation, BulkResult, ChangeStream, ChangeStreamOptions,
    Clock, DocResult, Document, DocumentError, Filter, IndexInfo, IndexOptions, IntoPipeline,
    Results, ResumeToken, SnapshotCollection, SystemClock, TextIndexOptions, TxnCollection,
    UpdateResult, Value,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::db::{EtcdDatabase, Revision};
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
    /// The clock TTL indexes read (`None`: the system clock).
    clock: Option<Arc<dyn Clock>>,
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
            clock: self.clock.clone(),
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
            clock: None,
            _t: PhantomData,
        }
    }

    /// The names of every collection, in order (one snapshot).
    pub fn list_collections(&self) -> Result<Vec<String>> {
        let r = self.begin_read()?;
        Ok(cairndb::document::snapshot::list_collections_in(&r)?)
    }

    /// The names of the collections with a TTL index, in order (one
    /// snapshot): the ones [`EtcdCollection::delete_expired`] has work in
    /// (as [`cairndb::Database::ttl_collections`]).
    pub fn ttl_collections(&self) -> Result<Vec<String>> {
        let r = self.begin_read()?;
        Ok(cairndb::document::snapshot::ttl_collections_in(&r)?)
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

    /// Updates every document matching `filter` (or upserts), in batches
    /// of at most [`MANY_BATCH_DOCS`] documents, each one serializable
    /// transaction (one etcd `Txn`), so that no count of matching
    /// documents runs into etcd's `--max-txn-ops` or
    /// `--max-request-bytes`:
    ///
    /// - the documents updated are those matching `filter` in one
    ///   snapshot taken at the start, each updated **exactly once** (their
    ///   `_id`s are streamed from that snapshot, so a document whose
    ///   update moves it in the index the query reads is not met again);
    /// - each batch reads its documents again by `_id` and checks `filter`
    ///   again: a document another writer deleted, or changed so that it
    ///   no longer matches, since the snapshot is skipped and not
    ///   counted; one inserted since is not updated (as a MongoDB
    ///   `updateMany` may or may not see a concurrent insert);
    /// - `matched` and `modified` count exactly what the committed batches
    ///   did; a batch that conflicts with another writer runs again alone
    ///   (earlier batches stay committed), and one too large for etcd is
    ///   halved;
    /// - an error stops the operation after the batches committed before
    ///   it (their updates stay), as MongoDB's `updateMany` is not atomic
    ///   across documents: "the modification of each document is atomic,
    ///   but the operation as a whole is not" (MongoDB manual,
    ///   `db.collection.updateMany()`, "Atomicity", and "Transactions" in
    ///   "Atomicity and Transactions"). For all or nothing, run
    ///   [`TxnCollection::update_many`] inside
    ///   [`EtcdDatabase::run_in_transaction`]: one `Txn`, refused with
    ///   [`Error::TooLarge`] naming the limit when it does not fit.
    ///
    /// With `upsert` and no document updated, the upsert runs in one
    /// transaction that matches `filter` again.
    pub fn update_many(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: UpdateOptions,
    ) -> Result<UpdateResult> {
        let (filter, update) = (filter.into_filter()?, update.into_update()?);
        let mut total = UpdateResult::default();
        self.in_batches(
            &filter,
            |c, ids| {
                let r = c.update_ids(ids, &filter, &update)?;
                Ok((r.matched, r.modified))
            },
            |(matched, modified)| {
                total.matched += matched;
                total.modified += modified;
            },
        )?;
        if total.matched == 0 && opts.upsert {
            return self.write(|c| c.update_many(filter.clone(), update.clone(), opts));
        }
        Ok(total)
    }

    /// Runs `batch` on the `_id`s of the documents matching `filter` in a
    /// snapshot taken now, a transaction per batch of at most
    /// [`MANY_BATCH_DOCS`] (halved while one does not fit etcd's limits),
    /// each run again alone while it conflicts; `done` sees each committed
    /// batch's outcome.
    fn in_batches<R>(
        &self,
        filter: &Filter,
        mut batch: impl FnMut(&TxnCollection<'_, T, WriteTransaction<'_>>, &[Value]) -> DocResult<R>,
        mut done: impl FnMut(R),
    ) -> Result<()> {
        let snapshot: SnapshotCollection<SharedSnapshot<'db>, Document> =
            SnapshotCollection::new(Arc::new(self.db.begin_read()?), &self.name);
        let opts = FindOptions::new().projection(serde_json::json!({"_id": 1}))?;
        let mut ids = snapshot.find_with(filter.clone(), opts)?;
        let mut size = MANY_BATCH_DOCS;
        let mut pending: Vec<Value> = Vec::new();
        let mut exhausted = false;
        loop {
            while pending.len() < size && !exhausted {
                match ids.next() {
                    Some(doc) => {
                        let doc = doc?;
                        let id = doc.get("_id").cloned().ok_or_else(|| {
                            Error::from(DocumentError::Custom(format!(
                                "a document of collection {:?} has no _id",
                                self.name
                            )))
                        })?;
                        pending.push(id);
                    }
                    None => exhausted = true,
                }
            }
            if pending.is_empty() {
                return Ok(());
            }
            let take = size.min(pending.len());
            let part = &pending[..take];
            match self.write(|c| batch(c, part)) {
                Ok(r) => {
                    done(r);
                    pending.drain(..take);
                }
                Err(Error::TooLarge { .. }) if take > 1 => size = take / 2,
                Err(e) => return Err(e),
            }
        }
    }

    /// Updates the first document matching `filter` (the first in
    /// `opts.sort` order, if given) and returns it as it was before or is
    /// after (`opts.return_document`); with `opts.upsert`, inserts one
    /// when nothing matches (see
    /// [`cairndb::document::Collection::find_one_and_update`]). The read of
    /// the match and the write are one etcd `Txn`, run again while it
    /// conflicts: of two clients taking the same document, one gets it and
    /// the other the next match.
    pub fn find_one_and_update(
        &self,
        filter: impl IntoFilter,
        update: impl IntoUpdate,
        opts: FindOneAndOptions,
    ) -> Result<Option<T>> {
        let (filter, update) = (filter.into_filter()?, update.into_update()?);
        self.write(|c| c.find_one_and_update(filter.clone(), update.clone(), opts.clone()))
    }

    /// Replaces the first document matching `filter` (see
    /// [`EtcdCollection::find_one_and_update`]); the `_id` is kept.
    pub fn find_one_and_replace(
        &self,
        filter: impl IntoFilter,
        replacement: &T,
        opts: FindOneAndOptions,
    ) -> Result<Option<T>> {
        let filter = filter.into_filter()?;
        self.write(|c| c.find_one_and_replace(filter.clone(), replacement, opts.clone()))
    }

    /// Deletes the first document matching `filter` (the first in
    /// `opts.sort` order, if given) and returns it, in one etcd `Txn`.
    pub fn find_one_and_delete(
        &self,
        filter: impl IntoFilter,
        opts: FindOneAndOptions,
    ) -> Result<Option<T>> {
        let filter = filter.into_filter()?;
        self.write(|c| c.find_one_and_delete(filter.clone(), opts.clone()))
    }

    /// Deletes the first document matching `filter`; returns how many (0
    /// or 1).
    pub fn delete_one(&self, filter: impl IntoFilter) -> Result<u64> {
        let filter = filter.into_filter()?;
        self.write(|c| c.delete_one(filter.clone()))
    }

    /// Deletes every document matching `filter` in batches, as
    /// [`EtcdCollection::update_many`] updates them (the documents
    /// matching in a snapshot taken at the start, each deleted at most
    /// once, checked again by its batch; not atomic as a whole, as
    /// MongoDB's `deleteMany`); returns how many the batches deleted.
    pub fn delete_many(&self, filter: impl IntoFilter) -> Result<u64> {
        let filter = filter.into_filter()?;
        let mut deleted = 0;
        self.in_batches(
            &filter,
            |c, ids| c.delete_ids(ids, &filter),
            |n| {
                deleted += n;
            },
        )?;
        Ok(deleted)
    }

    /// Creates an index on `fields` (paths with order 1 or -1) over the
    /// existing documents, built in batches (module docs, "Index
    /// builds"): the definition is added in the state *building* (the
    /// planner does not use it; every write maintains it), the existing
    /// documents are indexed [`INDEX_BATCH_DOCS`] at a time, then it
    /// becomes *ready*. A unique index meeting a duplicate drops what it
    /// built and returns the duplicate key error naming the value and the
    /// document. Creating one that exists with the same options does
    /// nothing — or, if it is still building (its builder stopped), takes
    /// its build over where it stopped.
    pub fn create_index(&self, fields: &[(&str, i8)], opts: IndexOptions) -> Result<IndexInfo> {
        self.build_index(fields, &opts, None, usize::MAX)
    }

    /// [`EtcdCollection::create_index`] that stops after `batches` batches
    /// as a builder killed between two would (the index stays building);
    /// returns the definition. For tests of a resumed build.
    #[cfg(feature = "testing")]
    pub fn create_index_stopping_after(
        &self,
        fields: &[(&str, i8)],
        opts: IndexOptions,
        batches: usize,
    ) -> Result<IndexInfo> {
        self.build_index(fields, &opts, None, batches)
    }

    /// The collection's indexes with their state: [`IndexState::Building`]
    /// while a batched build has not finished (module docs, "Index
    /// builds"), else [`IndexState::Ready`].
    pub fn list_indexes_with_state(&self) -> Result<Vec<(IndexInfo, IndexState)>> {
        let r = Arc::new(self.db.begin_read()?);
        let tables =
            SnapshotCollection::<_, Document>::new(r.clone(), &self.name).list_index_tables()?;
        let building = match tables.first() {
            Some((_, t)) => {
                let prefix = t.rsplit_once('.').map_or(t.as_str(), |(p, _)| p);
                r.building_tables(&format!("{prefix}."))?
            }
            None => Vec::new(),
        };
        Ok(tables
            .into_iter()
            .map(|(info, table)| {
                let state = match building.iter().find(|(t, _)| *t == table) {
                    Some(_) => IndexState::Building,
                    None => IndexState::Ready,
                };
                (info, state)
            })
            .collect())
    }

    /// Defines the index (or finds it), fills it in batches from where
    /// its mark says, then marks it ready (module docs, "Index builds").
    /// Stops, leaving it building, after `max_batches` batches.
    fn build_index(
        &self,
        fields: &[(&str, i8)],
        opts: &IndexOptions,
        ttl: Option<u64>,
        max_batches: usize,
    ) -> Result<IndexInfo> {
        let (def, mark) = self.db.run_in_transaction(|tx| {
            let def = TxnCollection::<T, _>::new(tx, &self.name).define_index(
                fields,
                opts.clone(),
                ttl,
            )?;
            let mark = if def.created {
                tx.set_building_mark(&def.index_table, Some(Vec::new()));
                Some(Vec::new())
            } else {
                tx.building_mark(&def.index_table)?
            };
            Ok((def, mark))
        })?;
        let Some(mut progress) = mark else {
            return Ok(def.info);
        };
        let id = def.info.id;
        let mut size = INDEX_BATCH_DOCS;
        let mut batches = 0usize;
        loop {
            // Fill: the data keys after the mark's, from a new snapshot
            // each batch (a document stored since the definition was
            // indexed by its writer).
            loop {
                if batches >= max_batches {
                    return Ok(def.info);
                }
                let revision = self.db.current_revision()?;
                let after = (!progress.is_empty()).then_some(progress.as_slice());
                let keys = self
                    .db
                    .table_keys_after(&def.data_table, after, revision, size)?;
                let Some(last) = keys.last().cloned() else {
                    break;
                };
                let step = self.db.run_in_transaction(|tx| {
                    match tx.building_mark(&def.index_table)? {
                        Some(p) if p == progress => {}
                        moved => return Ok(moved),
                    }
                    TxnCollection::<T, _>::new(tx, &self.name).build_index_entries(id, &keys)?;
                    tx.set_building_mark(&def.index_table, Some(last.clone()));
                    Ok(Some(last.clone()))
                });
                match step {
                    Ok(Some(p)) => {
                        if p == last {
                            batches += 1;
                        }
                        // (Or another builder of the same index moved it on.)
                        progress = p;
                    }
                    Ok(None) => return self.built_elsewhere(&def.info),
                    Err(Error::TooLarge { .. }) if keys.len() > 1 => size = keys.len() / 2,
                    Err(Error::Documents(d))
                        if matches!(*d, DocumentError::DuplicateKey { .. }) =>
                    {
                        // The half-built index goes (its mark with its table).
                        self.drop_index(&def.info.name)?;
                        return Err(Error::Documents(d));
                    }
                    Err(e) => return Err(e),
                }
            }
            // Ready: the mark goes, if it is still this build's and the
            // catalog still holds the index as defined.
            let flipped = self.db.run_in_transaction(|tx| {
                match tx.building_mark(&def.index_table)? {
                    Some(p) if p == progress => {}
                    Some(p) => return Ok(Some(p)),
                    None => return Ok(None),
                }
                let again = TxnCollection::<T, _>::new(tx, &self.name).define_index(
                    fields,
                    opts.clone(),
                    ttl,
                )?;
                if again.created || again.info.id != id {
                    return Err(dropped_during_build(&self.name, &def.info.name));
                }
                tx.set_building_mark(&def.index_table, None);
                Ok(None)
            })?;
            match flipped {
                None => return self.built_elsewhere(&def.info),
                // Another builder moved it on meanwhile: fill from there.
                Some(p) => progress = p,
            }
        }
    }

    /// The index `info` once its mark is gone: ready (this build's or
    /// another's flip), or dropped while it was being built.
    fn built_elsewhere(&self, info: &IndexInfo) -> Result<IndexInfo> {
        match self
            .list_indexes_with_state()?
            .into_iter()
            .find(|(i, _)| i.id == info.id && i.name == info.name)
        {
            Some((i, IndexState::Ready)) => Ok(i),
            _ => Err(dropped_during_build(&self.name, &info.name)),
        }
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

    /// Renames the collection to `to`, in one transaction (documents and
    /// indexes move with it; this handle keeps its old name). An existing
    /// `to` is dropped first with `drop_target`, else
    /// `DocumentError::CollectionExists`; its change streams end with
    /// `rename` and `invalidate`.
    pub fn rename(&self, to: &str, drop_target: bool) -> Result<()> {
        self.write(|c| c.rename(to, drop_target))
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

    /// [`EtcdCollection::aggregate`] with options (the memory bound of
    /// `$group`, `$sort`, …: [`AggregateOptions`]).
    pub fn aggregate_with(
        &self,
        pipeline: impl IntoPipeline,
        opts: AggregateOptions,
    ) -> Result<Aggregation<'db>> {
        Ok(self.snapshot()?.aggregate_with(pipeline, opts)?)
    }

    /// Runs the pipeline on one snapshot and reports the plan of the
    /// stages pushed down to the planner and the stages run in memory (see
    /// [`cairndb::document::Collection::explain_aggregate`]).
    pub fn explain_aggregate(&self, pipeline: impl IntoPipeline) -> Result<AggregateExplain> {
        Ok(self.snapshot()?.explain_aggregate(pipeline)?)
    }

    /// Runs [`EtcdCollection::count`]'s query and reports its plan and
    /// what it read (see [`cairndb::document::Collection::explain_count`]).
    pub fn explain_count(&self, filter: impl IntoFilter) -> Result<Explain> {
        Ok(self.snapshot()?.explain_count(filter)?)
    }

    /// Checks, in one snapshot (one revision), that every index of the
    /// collection equals the index recomputed from its documents: the
    /// differences found, each naming the collection and the index (empty:
    /// consistent). See [`cairndb::document::Collection::check_indexes`].
    pub fn check_indexes(&self) -> Result<Vec<String>> {
        Ok(self.snapshot()?.check_indexes()?)
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

    /// Creates a TTL index on `field` (ascending), as
    /// [`cairndb::document::Collection::create_ttl_index`] does: documents
    /// whose `field` holds a date more than `expire_after_seconds` in the
    /// past expire. On a cluster they are deleted by
    /// [`EtcdCollection::delete_expired`], not by the collection's writes
    /// (see the module docs); this call runs a first
    /// [`delete_expired`](Self::delete_expired) of up to
    /// [`TTL_PASS_DOCS`] documents after creating the index.
    pub fn create_ttl_index(
        &self,
        field: &str,
        expire_after_seconds: u64,
        opts: IndexOptions,
    ) -> Result<IndexInfo> {
        let info =
            self.build_index(&[(field, 1)], &opts, Some(expire_after_seconds), usize::MAX)?;
        self.delete_expired(TTL_PASS_DOCS)?;
        Ok(info)
    }

    /// Deletes up to `max` documents of this collection's TTL indexes
    /// that have expired (by this collection's clock:
    /// [`EtcdCollection::with_clock`]), oldest dates first; returns how
    /// many. The deletes are ordinary deletes (indexes and change log
    /// follow), in transactions of at most [`TTL_BATCH_DOCS`] documents
    /// each — fewer when one would not fit etcd's `--max-txn-ops` or
    /// request size (many indexes, multikey entries) — each a bounded
    /// read of the TTL index. Run it periodically from one process, as
    /// MongoDB's TTL monitor runs every 60 seconds; until then queries
    /// still return expired documents (as MongoDB's do between two
    /// passes).
    pub fn delete_expired(&self, max: usize) -> Result<u64> {
        let now = self.now_ms();
        let mut batch = TTL_BATCH_DOCS;
        let mut deleted = 0u64;
        while (deleted as usize) < max {
            let want = batch.min(max - deleted as usize);
            match self.write(|c| c.delete_expired(now, want)) {
                Ok(n) => {
                    deleted += n;
                    if (n as usize) < want {
                        break;
                    }
                }
                Err(Error::TooLarge { .. }) if batch > 1 => batch /= 2,
                Err(e) => return Err(e),
            }
        }
        Ok(deleted)
    }

    /// The same collection, reading `clock` for its TTL indexes instead of
    /// the system clock (tests, simulations).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    fn now_ms(&self) -> i64 {
        match &self.clock {
            Some(c) => c.now_ms(),
            None => SystemClock.now_ms(),
        }
    }

    /// Turns on this collection's change stream (creating the collection),
    /// as [`cairndb::document::Collection::enable_change_stream`]: from the
    /// next commit, its writes are recorded in the database's change log
    /// (`$docs.changes`), which [`EtcdCollection::watch`] reads.
    pub fn enable_change_stream(&self) -> Result<()> {
        self.write(|c| c.enable_change_stream())
    }

    /// Turns this collection's change stream off: its open streams end
    /// with an `invalidate` event.
    pub fn disable_change_stream(&self) -> Result<()> {
        self.write(|c| c.disable_change_stream())
    }

    /// Whether this collection's writes are recorded for change streams.
    pub fn change_stream_enabled(&self) -> Result<bool> {
        let r = self.db.begin_read()?;
        Ok(changes::change_stream_enabled_in(&r, &self.name)?)
    }

    /// A change stream over this collection from now, its events passed
    /// through `pipeline` (`[]` for none): the embedded
    /// [`cairndb::document::Collection::watch`]'s events, options and
    /// guarantees, from any client of the cluster (module docs).
    pub fn watch(&self, pipeline: impl IntoPipeline) -> Result<EtcdChangeStream<'db>> {
        self.watch_with(pipeline, ChangeStreamOptions::default())
    }

    /// [`EtcdCollection::watch`] with options: resume after a token (from
    /// this process or an earlier one), start after one, or have updates
    /// carry the document.
    pub fn watch_with(
        &self,
        pipeline: impl IntoPipeline,
        opts: ChangeStreamOptions,
    ) -> Result<EtcdChangeStream<'db>> {
        let p = pipeline.into_pipeline()?;
        Ok(EtcdChangeStream(ChangeStream::open(
            self.db,
            &self.name,
            Some(p),
            opts,
        )?))
    }
}

/// Documents one batch of [`EtcdCollection::update_many`] or
/// [`EtcdCollection::delete_many`] writes at most (halved while a batch
/// would not fit one etcd `Txn`): a document's write is its key, its
/// changed index entries and one compare, so 32 leave room under the
/// default `--max-txn-ops` (128) for a few indexes.
pub const MANY_BATCH_DOCS: usize = 32;

/// Documents one batch of an index build indexes at most (halved while a
/// batch would not fit one etcd `Txn`: a multikey index's entries).
pub const INDEX_BATCH_DOCS: usize = 64;

/// The state of an index on a cluster
/// ([`EtcdCollection::list_indexes_with_state`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IndexState {
    /// Complete: the planner uses it.
    Ready,
    /// Being built in batches (or its builder stopped: the next
    /// `create_index` of the same spec resumes it, `drop_index` removes
    /// it): writes maintain it, the planner does not use it.
    Building,
}

fn dropped_during_build(coll: &str, index: &str) -> Error {
    Error::Documents(Box::new(DocumentError::IndexError {
        collection: coll.to_string(),
        index: index.to_string(),
        reason: "the index was dropped while it was being built".into(),
    }))
}

/// Documents one [`EtcdCollection::delete_expired`] transaction deletes at
/// most (halved while it would not fit one etcd `Txn`).
pub const TTL_BATCH_DOCS: usize = 32;

/// Documents [`EtcdCollection::create_ttl_index`]'s first pass deletes at
/// most (the embedded engine's batch per write).
pub const TTL_PASS_DOCS: usize = cairndb::document::ttl::EXPIRE_BATCH;

impl EtcdDatabase {
    /// Sets the change log's retention, as
    /// [`cairndb::Database::set_change_log_retention`]: appends keep the
    /// newest `max_entries` records (at least 1) of every watched
    /// collection together; a stream that falls further behind gets
    /// [`DocumentError::ChangeStreamHistoryLost`](cairndb::document::DocumentError::ChangeStreamHistoryLost).
    pub fn set_change_log_retention(&self, max_entries: u64) -> Result<()> {
        self.run_in_transaction(|tx| Ok(changes::set_change_log_retention_in(tx, max_entries)?))
    }

    /// The change log's retention in records.
    pub fn change_log_retention(&self) -> Result<u64> {
        Ok(changes::change_log_retention_in(&self.begin_read()?)?)
    }

    /// The positions the change log holds, oldest and newest (`None`:
    /// empty).
    pub fn change_log_bounds(&self) -> Result<Option<(u64, u64)>> {
        Ok(changes::change_log_bounds_in(&self.begin_read()?)?)
    }
}

/// A stop flag never set: a change stream's waits end by their timeout or
/// a commit.
static NEVER_STOPPED: AtomicBool = AtomicBool::new(false);

/// A change stream reads snapshots at one revision and waits for the next
/// commit that writes the change log with an etcd `Watch` on the log's
/// version key from the next revision (every commit that appends rewrites
/// it): a wake-up only, reads come from snapshots.
impl ChangeSource for EtcdDatabase {
    type Snapshot<'a> = ReadTransaction<'a>;
    type Seen = Revision;
    const WAIT_SLICE: Duration = Duration::from_millis(1000);

    fn snapshot(&self) -> DocResult<(ReadTransaction<'_>, Revision)> {
        let r = self.begin_read().map_err(|e| e.into_core())?;
        let seen = r.revision();
        Ok((r, seen))
    }

    fn wait_for_commit(&self, seen: Revision, timeout: Duration) -> DocResult<()> {
        let key = self.layout.version(CHANGE_LOG);
        self.wait_for_change(key, seen, timeout, &NEVER_STOPPED)
            .map_err(|e| e.into_core())?;
        Ok(())
    }
}

/// The document layer's change log (FORMAT.md, "Change log and TTL
/// indexes").
const CHANGE_LOG: &str = "$docs.changes";

/// Changes to one collection on a cluster, in commit order, as the
/// embedded [`ChangeStream`]: a blocking iterator (ends after
/// `invalidate`), [`next_timeout`](Self::next_timeout) or
/// [`try_next`](Self::try_next). Errors are this crate's (the document
/// layer's as [`Error::Documents`], e.g. `ChangeStreamHistoryLost`).
#[derive(Debug)]
pub struct EtcdChangeStream<'db>(ChangeStream<'db, EtcdDatabase>);

impl EtcdChangeStream<'_> {
    /// The next event if one is committed, without waiting.
    pub fn try_next(&mut self) -> Result<Option<Document>> {
        Ok(self.0.try_next()?)
    }

    /// The next event, waiting at most `timeout` for one; `Ok(None)` if
    /// none came in time or the stream has ended.
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<Document>> {
        Ok(self.0.next_timeout(timeout)?)
    }

    /// The token to resume from (after the last event delivered).
    pub fn resume_token(&self) -> ResumeToken {
        self.0.resume_token()
    }

    /// Whether the stream has delivered its `invalidate`.
    pub fn is_ended(&self) -> bool {
        self.0.is_ended()
    }
}

impl Iterator for EtcdChangeStream<'_> {
    type Item = Result<Document>;

    /// Blocks until the next event; `None` after the `invalidate`.
    fn next(&mut self) -> Option<Result<Document>> {
        self.0.next().map(|r| r.map_err(Error::from))
    }
}
