//! Where the document commands' collections live: a database file or an
//! etcd cluster's prefix, behind one small trait ([`Docs`]), so that
//! `import`, `export`, `find`, `count`, `distinct`, `aggregate`, `update`,
//! `delete`, `collections` and `index` (docs.rs, docs_query.rs) are one
//! code path on both backends, as the event commands are (events.rs).
//!
//! On a cluster the same document layer runs through the storage seam
//! (`cairndb_etcd::EtcdCollection`): the same planner, cursor, index
//! maintenance and update code, so the commands print the same output
//! for the same data, TTL indexes included (on a cluster only
//! `delete_expired` deletes expired documents, not every write; README,
//! "On an etcd cluster"). `cairn watch` picks its backend itself
//! (watch.rs).

use std::path::Path;

use cairndb::document::query::{Explain, FindOptions, UpdateOptions, UpdateResult};
use cairndb::document::{
    AggregateExplain, Document, DocumentError, IndexInfo, IndexOptions, TextIndexOptions, Value,
};
use cairndb::Database;
use cairndb_etcd::EtcdDatabase;

use crate::etcd::Backend;
use crate::{CliError, Res};

/// How a command opens a database file (a cluster is always connected to
/// the same way).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only (queries, `export`, `collections`, `index list`).
    Read,
    /// Read-write; the file must exist (`update`, `delete`, `index
    /// create/drop`).
    Write,
    /// Read-write, created if missing (`import`).
    Create,
}

/// A function called with each document a query streams out.
pub type Each<'a> = &'a mut dyn FnMut(Document) -> Res;

/// What the document commands need from a database: each call is one
/// transaction (one read snapshot, or one write committed), on a file's
/// [`cairndb::document::Collection`] or a cluster's
/// [`cairndb_etcd::EtcdCollection`], whose errors carry the same document
/// layer errors.
pub trait Docs {
    /// What holds the collections, for messages: "the file", "the prefix".
    fn holder(&self) -> &'static str;
    /// The collections' names, in order.
    fn list_collections(&self) -> Result<Vec<String>, CliError>;
    /// How many documents `coll` holds.
    fn len(&self, coll: &str) -> Result<u64, CliError>;
    /// `coll`'s indexes.
    fn list_indexes(&self, coll: &str) -> Result<Vec<IndexInfo>, CliError>;
    /// The names of `coll`'s indexes still being built (a cluster's
    /// batched builds; none on a file, where a build is one transaction).
    fn building_indexes(&self, coll: &str) -> Result<Vec<String>, CliError>;
    /// Every document of `coll` in `_id` order, from one snapshot.
    fn all(&self, coll: &str, each: Each<'_>) -> Res;
    /// The documents matching `filter`, from one snapshot.
    fn find(&self, coll: &str, filter: serde_json::Value, opts: FindOptions, each: Each<'_>)
        -> Res;
    /// The plan of a `find` and what it read.
    fn explain(
        &self,
        coll: &str,
        filter: serde_json::Value,
        opts: FindOptions,
    ) -> Result<Explain, CliError>;
    /// How many documents match `filter`.
    fn count(&self, coll: &str, filter: serde_json::Value) -> Result<u64, CliError>;
    /// The distinct values of `field` among the matches of `filter`.
    fn distinct(
        &self,
        coll: &str,
        field: &str,
        filter: serde_json::Value,
    ) -> Result<Vec<Value>, CliError>;
    /// The documents an aggregation pipeline returns.
    fn aggregate(&self, coll: &str, pipeline: serde_json::Value, each: Each<'_>) -> Res;
    /// The plan of an aggregation pipeline.
    fn explain_aggregate(
        &self,
        coll: &str,
        pipeline: serde_json::Value,
    ) -> Result<AggregateExplain, CliError>;
    /// `update_one` (or `update_many` with `many`), one transaction.
    fn update(
        &self,
        coll: &str,
        filter: serde_json::Value,
        update: serde_json::Value,
        many: bool,
        opts: UpdateOptions,
    ) -> Result<UpdateResult, CliError>;
    /// `delete_one` (or `delete_many` with `many`); how many were deleted.
    fn delete(&self, coll: &str, filter: serde_json::Value, many: bool) -> Result<u64, CliError>;
    /// Creates an index (built over the existing documents).
    fn create_index(
        &self,
        coll: &str,
        fields: &[(&str, i8)],
        opts: IndexOptions,
    ) -> Result<IndexInfo, CliError>;
    /// Creates a TTL index.
    fn create_ttl_index(
        &self,
        coll: &str,
        field: &str,
        expire_after_seconds: u64,
        opts: IndexOptions,
    ) -> Result<IndexInfo, CliError>;
    /// Creates the collection's text index.
    fn create_text_index(
        &self,
        coll: &str,
        fields: &[(&str, u32)],
        opts: TextIndexOptions,
    ) -> Result<IndexInfo, CliError>;
    /// Drops an index; whether it existed.
    fn drop_index(&self, coll: &str, name: &str) -> Result<bool, CliError>;
    /// Writes `docs` (each with its input line) into `coll`, in order, and
    /// commits them (in one transaction on a file; on a cluster in as many
    /// as etcd's limits require, each committed before the next). A
    /// document the collection refuses is undone alone and returned with
    /// its line; with `stop`, nothing after the first one is written. An
    /// error that is not a document's (I/O, the cluster) ends the batch:
    /// it is returned with the first line whose document was not written
    /// ([`Written::failed`]).
    fn write_batch(
        &self,
        coll: &str,
        upsert: bool,
        docs: &[(u64, Document)],
        stop: bool,
    ) -> Written;
}

/// What [`Docs::write_batch`] did.
#[derive(Default)]
pub struct Written {
    /// Documents written (committed).
    pub written: u64,
    /// The lines the collection refused, in order, with why.
    pub refused: Vec<(u64, CliError)>,
    /// The error that ended the batch, with the first line not written
    /// (nothing from it on was).
    pub failed: Option<(u64, CliError)>,
}

/// A database file's collections.
pub struct FileDocs {
    db: Database,
}

/// A cluster prefix's collections.
pub struct EtcdDocs {
    db: EtcdDatabase,
}

/// The methods whose calls read the same on both backends (the file's
/// `Collection` and the cluster's `EtcdCollection` have the same methods
/// and errors carrying the same document layer errors); each backend adds
/// the few of its own.
macro_rules! docs_for {
    ($backend:ty, { $($own:tt)* }) => {
        impl Docs for $backend {
            $($own)*

            fn list_collections(&self) -> Result<Vec<String>, CliError> {
                Ok(self.db.list_collections()?)
            }
            fn len(&self, coll: &str) -> Result<u64, CliError> {
                Ok(self.db.collection::<Document>(coll).len()?)
            }
            fn list_indexes(&self, coll: &str) -> Result<Vec<IndexInfo>, CliError> {
                Ok(self.db.collection::<Document>(coll).list_indexes()?)
            }
            fn find(
                &self,
                coll: &str,
                filter: serde_json::Value,
                opts: FindOptions,
                each: Each<'_>,
            ) -> Res {
                for doc in self.db.collection::<Document>(coll).find_with(filter, opts)? {
                    each(doc?)?;
                }
                Ok(())
            }
            fn explain(
                &self,
                coll: &str,
                filter: serde_json::Value,
                opts: FindOptions,
            ) -> Result<Explain, CliError> {
                Ok(self.db.collection::<Document>(coll).explain(filter, opts)?)
            }
            fn count(&self, coll: &str, filter: serde_json::Value) -> Result<u64, CliError> {
                Ok(self.db.collection::<Document>(coll).count(filter)?)
            }
            fn distinct(
                &self,
                coll: &str,
                field: &str,
                filter: serde_json::Value,
            ) -> Result<Vec<Value>, CliError> {
                Ok(self.db.collection::<Document>(coll).distinct(field, filter)?)
            }
            fn aggregate(&self, coll: &str, pipeline: serde_json::Value, each: Each<'_>) -> Res {
                for doc in self.db.collection::<Document>(coll).aggregate(pipeline)? {
                    each(doc?)?;
                }
                Ok(())
            }
            fn update(
                &self,
                coll: &str,
                filter: serde_json::Value,
                update: serde_json::Value,
                many: bool,
                opts: UpdateOptions,
            ) -> Result<UpdateResult, CliError> {
                let c = self.db.collection::<Document>(coll);
                Ok(if many {
                    c.update_many(filter, update, opts)?
                } else {
                    c.update_one(filter, update, opts)?
                })
            }
            fn delete(
                &self,
                coll: &str,
                filter: serde_json::Value,
                many: bool,
            ) -> Result<u64, CliError> {
                let c = self.db.collection::<Document>(coll);
                Ok(if many {
                    c.delete_many(filter)?
                } else {
                    c.delete_one(filter)?
                })
            }
            fn create_index(
                &self,
                coll: &str,
                fields: &[(&str, i8)],
                opts: IndexOptions,
            ) -> Result<IndexInfo, CliError> {
                Ok(self.db.collection::<Document>(coll).create_index(fields, opts)?)
            }
            fn create_ttl_index(
                &self,
                coll: &str,
                field: &str,
                expire_after_seconds: u64,
                opts: IndexOptions,
            ) -> Result<IndexInfo, CliError> {
                Ok(self
                    .db
                    .collection::<Document>(coll)
                    .create_ttl_index(field, expire_after_seconds, opts)?)
            }
            fn create_text_index(
                &self,
                coll: &str,
                fields: &[(&str, u32)],
                opts: TextIndexOptions,
            ) -> Result<IndexInfo, CliError> {
                Ok(self
                    .db
                    .collection::<Document>(coll)
                    .create_text_index(fields, opts)?)
            }
            fn drop_index(&self, coll: &str, name: &str) -> Result<bool, CliError> {
                Ok(self.db.collection::<Document>(coll).drop_index(name)?)
            }
        }
    };
}

docs_for!(FileDocs, {
    fn holder(&self) -> &'static str {
        "the file"
    }
    fn building_indexes(&self, _coll: &str) -> Result<Vec<String>, CliError> {
        Ok(Vec::new())
    }
    fn all(&self, coll: &str, each: Each<'_>) -> Res {
        for doc in self.db.collection::<Document>(coll).all()? {
            each(doc?)?;
        }
        Ok(())
    }
    fn explain_aggregate(
        &self,
        coll: &str,
        pipeline: serde_json::Value,
    ) -> Result<AggregateExplain, CliError> {
        Ok(self
            .db
            .collection::<Document>(coll)
            .explain_aggregate(pipeline)?)
    }
    fn write_batch(
        &self,
        coll: &str,
        upsert: bool,
        docs: &[(u64, Document)],
        stop: bool,
    ) -> Written {
        let first = docs.first().map_or(0, |d| d.0);
        let mut out = Written::default();
        let wrote = (|| -> Res {
            let txn = self.db.begin_write()?;
            let c = txn.collection::<Document>(coll);
            for (line, doc) in docs {
                let res = if upsert {
                    c.upsert(doc).map(|_| ())
                } else {
                    c.insert(doc).map(|_| ())
                };
                match res.map_err(CliError::from) {
                    Ok(()) => out.written += 1,
                    Err(e) if is_line_error(&e) => {
                        out.refused.push((*line, e));
                        if stop {
                            break;
                        }
                    }
                    // The transaction is dropped: nothing of it is written.
                    Err(e) => return Err(e),
                }
            }
            txn.commit()?;
            Ok(())
        })();
        if let Err(e) = wrote {
            // One transaction: none of the batch was written.
            out = Written {
                failed: Some((first, e)),
                ..Written::default()
            };
        }
        out
    }
});

docs_for!(EtcdDocs, {
    fn holder(&self) -> &'static str {
        "the prefix"
    }
    fn building_indexes(&self, coll: &str) -> Result<Vec<String>, CliError> {
        Ok(self
            .db
            .collection::<Document>(coll)
            .list_indexes_with_state()?
            .into_iter()
            .filter(|(_, s)| *s == cairndb_etcd::IndexState::Building)
            .map(|(i, _)| i.name)
            .collect())
    }
    fn all(&self, coll: &str, each: Each<'_>) -> Res {
        // A collection scan with no sort streams the documents in `_id`
        // order, as the file's `all` does.
        self.find(coll, serde_json::json!({}), FindOptions::new(), each)
    }
    fn explain_aggregate(
        &self,
        coll: &str,
        pipeline: serde_json::Value,
    ) -> Result<AggregateExplain, CliError> {
        Ok(self
            .db
            .collection::<Document>(coll)
            .snapshot()?
            .explain_aggregate(pipeline)
            .map_err(cairndb_etcd::Error::from)?)
    }
    fn write_batch(
        &self,
        coll: &str,
        upsert: bool,
        docs: &[(u64, Document)],
        stop: bool,
    ) -> Written {
        let mut out = Written::default();
        let mut rest = docs;
        let mut chunk = docs.len().min(ETCD_FIRST_CHUNK_DOCS);
        while let Some(&(first, _)) = rest.first() {
            let part = &rest[..chunk.min(rest.len())];
            match self.write_chunk(coll, upsert, part, stop) {
                Ok((n, refused)) => {
                    out.written += n;
                    let stopped = stop && !refused.is_empty();
                    out.refused.extend(refused);
                    if stopped {
                        break;
                    }
                    rest = &rest[part.len()..];
                }
                // The chunk is over one of etcd's limits: fewer documents
                // per transaction (an import's transactions are its own
                // batches, not the user's units).
                Err(cairndb_etcd::Error::TooLarge { .. }) if part.len() > 1 => {
                    chunk = part.len() / 2;
                }
                Err(e) => {
                    out.failed = Some((first, e.into()));
                    break;
                }
            }
        }
        out
    }
});

/// The documents an import first puts in one etcd transaction (halved
/// while the transaction is over etcd's `--max-txn-ops` or
/// `--max-request-bytes`): a document with a few indexes takes a few
/// operations of the 128 a cluster allows by default.
pub const ETCD_FIRST_CHUNK_DOCS: usize = 32;

impl EtcdDocs {
    /// Writes `docs` in one etcd transaction, run again from the start
    /// while it conflicts: how many were written, and the lines refused.
    fn write_chunk(
        &self,
        coll: &str,
        upsert: bool,
        docs: &[(u64, Document)],
        stop: bool,
    ) -> cairndb_etcd::Result<(u64, Vec<(u64, CliError)>)> {
        self.db.run_in_transaction(|tx| {
            let c = cairndb::document::TxnCollection::<Document, _>::new(tx, coll);
            let (mut written, mut lines) = (0, Vec::new());
            for (line, doc) in docs {
                let res = if upsert {
                    c.upsert(doc).map(|_| ())
                } else {
                    c.insert(doc).map(|_| ())
                };
                match res.map_err(cairndb_etcd::Error::from) {
                    Ok(()) => written += 1,
                    Err(e @ cairndb_etcd::Error::Documents(_))
                    | Err(e @ cairndb_etcd::Error::EntryTooLarge { .. }) => {
                        lines.push((*line, CliError::from(e)));
                        if stop {
                            break;
                        }
                    }
                    // A conflict runs the transaction again; the rest
                    // end it unwritten.
                    Err(e) => return Err(e),
                }
            }
            Ok((written, lines))
        })
    }
}

/// Whether an error is about one document (skippable by an import), not
/// the file, the cluster or the engine (I/O, corruption, a poisoned
/// handle, an unreachable cluster).
pub fn is_line_error(e: &CliError) -> bool {
    match e {
        CliError::User(_) => true,
        CliError::Db(cairndb::Error::Document(d)) => !matches!(d, DocumentError::Core(_)),
        _ => false,
    }
}

/// Runs `f` on the collections of `db`: a file opened as `access` says
/// (and closed after a write, so that its commits are flushed), or an
/// `etcd://` URL's prefix.
pub fn with_docs<T>(
    db: &Path,
    access: Access,
    f: impl FnOnce(&dyn Docs) -> Result<T, CliError>,
) -> Result<T, CliError> {
    match Backend::of(db) {
        Backend::Etcd(url) => f(&EtcdDocs {
            db: EtcdDatabase::connect(&url)?,
        }),
        Backend::File(path) => {
            let db = match access {
                Access::Read => Database::open_read_only(&path)?,
                Access::Write => Database::open(&path)?,
                Access::Create => Database::create(&path)?,
            };
            let docs = FileDocs { db };
            let value = f(&docs)?;
            if access != Access::Read {
                docs.db.close()?;
            }
            Ok(value)
        }
    }
}
