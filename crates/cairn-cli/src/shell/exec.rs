//! Running statements: collections, key-value tables and event streams.
//!
//! Without `.begin` every write is its own transaction (the collection and
//! event APIs commit it). Inside `.begin … .commit` writes go through the
//! open [`WriteTransaction`] (`txn.collection(..)`, an `EventWriter`, the
//! raw tables), and reads of collections and tables see its changes; queries
//! go through the transaction's planner ([`TxnCollection::find_with`],
//! [`TxnCollection::explain`]: sort, skip, limit, projection, hint and
//! explain as outside one, the results collected in memory).
//! Event reads (`read`, `tail`), `getIndexes()` and the listings of
//! collections, streams and indexes show what is committed: the library has no
//! listing of collections or streams within a write transaction. `.backup`,
//! `.stats` and `.check` are refused there (see `dot.rs`).
//!
//! On a cluster ([`Db::Etcd`]) the same statements run through
//! `EtcdCollection` and the cluster's tables and event streams; inside
//! `.begin … .commit` through `TxnCollection`, the tables and an
//! `EventWriter` over the cluster's write transaction (one etcd `Txn`).
//!
//! [`TxnCollection::find_with`]: cairndb::document::collection::TxnCollection::find_with
//! [`TxnCollection::explain`]: cairndb::document::collection::TxnCollection::explain

use std::io::Write;

use base64::Engine;
use cairndb::document::query::{FindOneAndOptions, FindOptions, ReturnDocument, UpdateOptions};
use cairndb::document::{Document, IndexOptions, Projection, SortSpec, TextIndexOptions, Value};
use cairndb::events::{
    Direction, EventData, EventStore, EventWriter, ExpectedVersion, ReadFrom, StreamVersion,
};
use cairndb::{ReadableTable, WriteTransaction};
use cairndb_etcd::EtcdDatabase;
use serde_json::{json, Value as Json};

use super::parse::{DocOp, Find, FindOneAnd, Modify, Stmt};
use super::{user, with_coll, with_txn_coll, Db, SRes, Shell, Txn};
use crate::{raw, CliError};

/// A JSON object as a document.
pub fn to_doc(j: Json) -> SRes<Document> {
    match Value::from_json(j)? {
        Value::Object(d) => Ok(d),
        other => Err(user(format!(
            "a document must be an object, not {}",
            other.kind().name()
        ))),
    }
}

/// A document as JSON (ids and bytes in their `$oid` / `$binary` forms).
pub fn doc_json(d: Document) -> Json {
    Value::Object(d).to_json()
}

/// Bytes as a JSON field: the text if UTF-8, else `<name>_b64`.
fn bytes_field(m: &mut serde_json::Map<String, Json>, name: &str, b: &[u8]) {
    match std::str::from_utf8(b) {
        Ok(s) => {
            m.insert(name.into(), Json::String(s.into()));
        }
        Err(_) => {
            m.insert(
                format!("{name}_b64"),
                Json::String(base64::engine::general_purpose::STANDARD.encode(b)),
            );
        }
    }
}

fn kv_row(k: &[u8], v: &[u8]) -> Json {
    let mut m = serde_json::Map::new();
    bytes_field(&mut m, "key", k);
    bytes_field(&mut m, "value", v);
    Json::Object(m)
}

/// The user's tables: the catalog less the upper layers' `$` tables.
pub fn user_tables(names: Vec<String>) -> Vec<String> {
    names.into_iter().filter(|n| !n.starts_with('$')).collect()
}

fn key_not_found(table: &str, key: &str) -> super::ShellError {
    user(format!("key {key:?} not found in table {table:?}"))
}

/// A table of a cluster that does not exist, as the file's message says.
fn no_table(table: &str) -> CliError {
    CliError::User(format!("table {table:?} does not exist"))
}

/// Puts a text entry into a cluster's table in write transaction `tx`
/// (creating the table), refusing a table whose types are not text or
/// bytes, as on a file (`raw::open_for_text`): `Ok(Err(_))` is the
/// refusal, nothing written.
fn etcd_put(
    tx: &cairndb_etcd::WriteTransaction<'_>,
    table: &str,
    key: &str,
    value: &str,
) -> cairndb_etcd::Result<Result<(), CliError>> {
    if let Some((k, v)) = tx.table_types(table)? {
        let text = |t: &str| t == "&[u8]" || t == "&str";
        if !text(&k) || !text(&v) {
            return Ok(Err(CliError::UnsupportedTypes {
                table: table.to_string(),
                key_type: k,
                value_type: v,
            }));
        }
    }
    tx.open_table(table)?
        .insert(key.as_bytes(), value.as_bytes())?;
    Ok(Ok(()))
}

/// Removes `key` from a cluster's table in `tx`: whether it was there;
/// a missing table is refused.
fn etcd_del(
    tx: &cairndb_etcd::WriteTransaction<'_>,
    table: &str,
    key: &str,
) -> cairndb_etcd::Result<Result<bool, CliError>> {
    if tx.table_types(table)?.is_none() {
        return Ok(Err(no_table(table)));
    }
    let t = tx.open_table(table)?;
    if t.get(key.as_bytes())?.is_none() {
        return Ok(Ok(false));
    }
    t.remove(key.as_bytes())?;
    Ok(Ok(true))
}

/// Runs `f` on a cluster in a transaction of its own, again while it
/// conflicts (as every single statement does); `f`'s refusal is returned
/// after a commit that wrote nothing.
fn etcd_write<R>(
    db: &EtcdDatabase,
    f: impl Fn(&cairndb_etcd::WriteTransaction<'_>) -> cairndb_etcd::Result<Result<R, CliError>>,
) -> SRes<R> {
    let mut out = None;
    db.run_in_transaction(|tx| {
        // A refusal wrote nothing: its commit writes nothing either.
        out = Some(f(tx)?);
        Ok(())
    })?;
    match out {
        Some(r) => Ok(r?),
        None => Err(user("the cluster's transaction ran no statement")),
    }
}

impl<'a> Shell<'a> {
    /// Runs a statement other than a dot-command or `it`.
    pub(super) fn exec(&mut self, stmt: Stmt) -> SRes {
        match stmt {
            Stmt::Docs { coll, op } => self.docs(&coll, *op),
            Stmt::CollectionNames => {
                let names = self.list_collections()?;
                self.printer.value(&mut self.out, &json!(names))?;
                Ok(())
            }
            Stmt::Show(what) => self.show(&what),
            Stmt::Get { table, key } => self.get(&table, &key),
            Stmt::Put { table, key, value } => {
                match (&self.db, &self.txn) {
                    (Db::File(db), _) => {
                        crate::check_key(db, &key)?;
                        self.write(|txn| {
                            raw::open_for_text(txn, &table)?
                                .insert(key.as_bytes(), value.as_bytes())?;
                            Ok(())
                        })?;
                    }
                    (Db::Etcd(_), Some(Txn::Etcd(tx))) => etcd_put(tx, &table, &key, &value)??,
                    (Db::Etcd(db), _) => {
                        etcd_write(db, |tx| etcd_put(tx, &table, &key, &value))?;
                    }
                }
                writeln!(self.out, "ok")?;
                Ok(())
            }
            Stmt::Del { table, key } => {
                let found = match (&self.db, &self.txn) {
                    (Db::File(db), _) => {
                        crate::check_key(db, &key)?;
                        self.write(|txn| raw::open_existing(txn, &table)?.remove(key.as_bytes()))?
                    }
                    (Db::Etcd(_), Some(Txn::Etcd(tx))) => etcd_del(tx, &table, &key)??,
                    (Db::Etcd(db), _) => etcd_write(db, |tx| etcd_del(tx, &table, &key))?,
                };
                if !found {
                    return Err(key_not_found(&table, &key));
                }
                writeln!(self.out, "ok")?;
                Ok(())
            }
            Stmt::Scan { table, prefix } => self.scan(&table, &prefix),
            Stmt::Append {
                stream,
                event_type,
                data,
            } => {
                let bytes = match &data {
                    None => Vec::new(),
                    Some(d) => serde_json::to_vec(d).map_err(|e| user(e.to_string()))?,
                };
                let events = [EventData::new(event_type, bytes)];
                let r = match (&self.txn, &self.db) {
                    (Some(Txn::File(txn)), _) => {
                        EventWriter::new(&**txn).append(&stream, ExpectedVersion::Any, &events)?
                    }
                    (Some(Txn::Etcd(tx)), _) => {
                        EventWriter::new(tx).append(&stream, ExpectedVersion::Any, &events)?
                    }
                    (None, Db::File(db)) => {
                        EventStore::new(db).append(&stream, ExpectedVersion::Any, &events)?
                    }
                    (None, Db::Etcd(db)) => {
                        db.events().append(&stream, ExpectedVersion::Any, &events)?
                    }
                };
                let version = r.version.map_or_else(|| "-".to_string(), |v| v.to_string());
                let pos = r
                    .first_position
                    .map_or_else(|| "-".to_string(), |p| p.to_string());
                writeln!(
                    self.out,
                    "appended {} event(s) to {stream:?}; version {version}; position {pos}",
                    r.count
                )?;
                Ok(())
            }
            Stmt::Read {
                stream,
                from,
                limit,
            } => {
                let limit = limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
                let from = ReadFrom::At(StreamVersion(from));
                let events = match &self.db {
                    Db::File(db) => {
                        EventStore::new(db).read_stream(&stream, from, Direction::Forward, limit)?
                    }
                    Db::Etcd(db) => {
                        db.events()
                            .read_stream(&stream, from, Direction::Forward, limit)?
                    }
                };
                let rows: Vec<Json> = events.iter().map(crate::events::event_json).collect();
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            Stmt::Tail { stream, n } => {
                let n = usize::try_from(n).unwrap_or(usize::MAX);
                let mut events = match &self.db {
                    Db::File(db) => EventStore::new(db).read_stream(
                        &stream,
                        ReadFrom::End,
                        Direction::Backward,
                        n,
                    )?,
                    Db::Etcd(db) => {
                        db.events()
                            .read_stream(&stream, ReadFrom::End, Direction::Backward, n)?
                    }
                };
                events.reverse();
                let rows: Vec<Json> = events.iter().map(crate::events::event_json).collect();
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            Stmt::Empty | Stmt::Dot { .. } | Stmt::It => Ok(()),
        }
    }

    /// Runs `f` in the open transaction of a file, or in one of its own,
    /// committed (the file's raw tables; a cluster's are `etcd_put` /
    /// `etcd_del`'s).
    pub(super) fn write<R>(
        &mut self,
        f: impl FnOnce(&WriteTransaction) -> Result<R, CliError>,
    ) -> SRes<R> {
        match (&self.txn, &self.db) {
            (Some(Txn::File(txn)), _) => Ok(f(txn)?),
            (None, Db::File(db)) => {
                let txn = db.begin_write()?;
                let r = f(&txn)?;
                txn.commit()?;
                Ok(r)
            }
            _ => Err(user("a file's table write on a cluster")),
        }
    }

    fn show(&mut self, what: &str) -> SRes {
        let names = match what {
            "collections" => self.list_collections()?,
            "tables" => self.table_names()?,
            _ => self.stream_names()?,
        };
        for n in names {
            writeln!(self.out, "{n}")?;
        }
        Ok(())
    }

    /// The user's tables, as the open transaction sees them if any.
    pub(super) fn table_names(&self) -> SRes<Vec<String>> {
        Ok(user_tables(match (&self.txn, &self.db) {
            (Some(Txn::File(txn)), _) => txn.list_tables()?,
            (Some(Txn::Etcd(tx)), _) => tx.list_tables()?,
            (None, Db::File(db)) => db.begin_read()?.list_tables()?,
            (None, Db::Etcd(db)) => db.begin_read()?.list_tables()?,
        }))
    }

    /// The number of entries of the user's table `t`, as the open
    /// transaction sees it if any.
    pub(super) fn table_len(&self, t: &str) -> SRes<u64> {
        Ok(match (&self.txn, &self.db) {
            (Some(Txn::File(txn)), _) => raw::open_existing(txn, t)?.table().len(),
            (Some(Txn::Etcd(tx)), _) => tx.open_table(t)?.len()?,
            (None, Db::File(db)) => raw::open_read(&db.begin_read()?, t)?.len(),
            (None, Db::Etcd(db)) => db.begin_read()?.open_table(t)?.len()?,
        })
    }

    fn get(&mut self, table: &str, key: &str) -> SRes {
        let value = match (&self.txn, &self.db) {
            (Some(Txn::File(txn)), Db::File(db)) => {
                crate::check_key(db, key)?;
                let t = raw::open_existing(txn, table)?;
                let v = t.table().get(key.as_bytes())?;
                v.map(|g| g.value().to_vec())
            }
            (None, Db::File(db)) => {
                crate::check_key(db, key)?;
                let r = db.begin_read()?;
                let t = raw::open_read(&r, table)?;
                let v = t.get(key.as_bytes())?;
                v.map(|g| g.value().to_vec())
            }
            (Some(Txn::Etcd(tx)), _) => {
                if tx.table_types(table)?.is_none() {
                    return Err(no_table(table).into());
                }
                tx.open_table(table)?.get(key.as_bytes())?
            }
            (_, Db::Etcd(db)) => {
                let r = db.begin_read()?;
                if r.table_types(table)?.is_none() {
                    return Err(no_table(table).into());
                }
                r.open_table(table)?.get(key.as_bytes())?
            }
        };
        let value = value.ok_or_else(|| key_not_found(table, key))?;
        match std::str::from_utf8(&value) {
            Ok(s) => writeln!(self.out, "{s}")?,
            Err(_) => writeln!(
                self.out,
                "(not UTF-8; base64) {}",
                base64::engine::general_purpose::STANDARD.encode(&value)
            )?,
        }
        Ok(())
    }

    fn scan(&mut self, table: &str, prefix: &str) -> SRes {
        let p = prefix.as_bytes();
        let mut rows = Vec::new();
        let mut collect = |k: &[u8], v: &[u8]| -> bool {
            if !k.starts_with(p) {
                return false;
            }
            rows.push(kv_row(k, v));
            true
        };
        match (&self.txn, &self.db) {
            (Some(Txn::File(txn)), _) => {
                let t = raw::open_existing(txn, table)?;
                for e in t.table().range::<&[u8]>(p..)? {
                    let (k, v) = e?;
                    if !collect(k.value(), v.value()) {
                        break;
                    }
                }
            }
            (None, Db::File(db)) => {
                let r = db.begin_read()?;
                let t = raw::open_read(&r, table)?;
                for e in t.range::<&[u8]>(p..)? {
                    let (k, v) = e?;
                    if !collect(k.value(), v.value()) {
                        break;
                    }
                }
            }
            (Some(Txn::Etcd(tx)), _) => {
                if tx.table_types(table)?.is_none() {
                    return Err(no_table(table).into());
                }
                for (k, v) in tx.open_table(table)?.range(p..)? {
                    if !collect(&k, &v) {
                        break;
                    }
                }
            }
            (None, Db::Etcd(db)) => {
                let r = db.begin_read()?;
                if r.table_types(table)?.is_none() {
                    return Err(no_table(table).into());
                }
                for (k, v) in r.open_table(table)?.range(p..)? {
                    if !collect(&k, &v) {
                        break;
                    }
                }
            }
        }
        self.show_rows(Box::new(rows.into_iter().map(Ok)))
    }

    fn docs(&mut self, coll: &str, op: DocOp) -> SRes {
        match op {
            DocOp::Find(f) => self.find(coll, f),
            DocOp::Aggregate { pipeline, explain } => {
                let rows: Vec<Json> = match &self.txn {
                    Some(_) if explain => {
                        return Err(user(
                            "an aggregation's explain is not available inside a transaction \
                             (.commit or .rollback first)",
                        ))
                    }
                    Some(txn) => with_txn_coll!(txn, coll, |c| c
                        .aggregate(pipeline)?
                        .into_iter()
                        .map(doc_json)
                        .collect()),
                    None => {
                        if explain {
                            let e =
                                with_coll!(&self.db, coll, |c| c.explain_aggregate(pipeline)?);
                            let report = crate::docs_query::aggregate_explain_json(&e);
                            self.printer.value(&mut self.out, &report)?;
                            return Ok(());
                        }
                        with_coll!(&self.db, coll, |c| c
                            .aggregate(pipeline)?
                            .map(|d| d.map(doc_json))
                            .collect::<Result<_, _>>()?)
                    }
                };
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            DocOp::Distinct { field, filter } => {
                let vals = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.distinct(&field, filter)?),
                    None => with_coll!(&self.db, coll, |c| c.distinct(&field, filter)?),
                };
                let v = Json::Array(vals.iter().map(Value::to_json).collect());
                self.printer.value(&mut self.out, &v)?;
                Ok(())
            }
            DocOp::Count(filter) => {
                let n = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.find(filter)?.len() as u64),
                    None => with_coll!(&self.db, coll, |c| c.count(filter)?),
                };
                writeln!(self.out, "{n}")?;
                Ok(())
            }
            DocOp::Insert { docs, many } => {
                let docs = docs.into_iter().map(to_doc).collect::<SRes<Vec<_>>>()?;
                let ids = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.insert_many(docs.iter())?),
                    None => with_coll!(&self.db, coll, |c| c.insert_many(docs.iter())?),
                };
                if many {
                    writeln!(self.out, "inserted {} documents", ids.len())?;
                } else if let Some(id) = ids.first() {
                    writeln!(self.out, "inserted 1 document, _id {}", id.to_json())?;
                }
                Ok(())
            }
            DocOp::Update {
                filter,
                update,
                many,
                upsert,
            } => self.update(coll, filter, update, many, upsert),
            DocOp::Replace {
                filter,
                doc,
                upsert,
            } => self.update(coll, filter, doc, false, upsert),
            DocOp::Delete { filter, many } => {
                let n = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| if many {
                        c.delete_many(filter)?
                    } else {
                        c.delete_one(filter)?
                    }),
                    None => with_coll!(&self.db, coll, |c| if many {
                        c.delete_many(filter)?
                    } else {
                        c.delete_one(filter)?
                    }),
                };
                writeln!(self.out, "deleted {n}")?;
                Ok(())
            }
            DocOp::CreateIndex {
                fields,
                unique,
                sparse,
                name,
                expire_after,
            } => {
                let fields: Vec<(&str, i8)> =
                    fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
                let opts = IndexOptions {
                    name,
                    unique,
                    sparse,
                };
                if let Some(secs) = expire_after {
                    if self.txn.is_some() {
                        return Err(user(
                            "a TTL index is created outside a transaction (.commit or \
                             .rollback first)",
                        ));
                    }
                    let field = fields.first().map_or("", |f| f.0);
                    let info =
                        with_coll!(&self.db, coll, |c| c.create_ttl_index(field, secs, opts)?);
                    writeln!(self.out, "index {:?} ready", info.name)?;
                    return Ok(());
                }
                let info = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.create_index(&fields, opts)?),
                    None => with_coll!(&self.db, coll, |c| c.create_index(&fields, opts)?),
                };
                writeln!(self.out, "index {:?} ready", info.name)?;
                Ok(())
            }
            DocOp::CreateTextIndex {
                fields,
                name,
                default_language,
            } => {
                let fields: Vec<(&str, u32)> =
                    fields.iter().map(|(p, w)| (p.as_str(), *w)).collect();
                let opts = TextIndexOptions {
                    name,
                    default_language,
                };
                let info = match &self.txn {
                    Some(txn) => {
                        with_txn_coll!(txn, coll, |c| c.create_text_index(&fields, opts)?)
                    }
                    None => with_coll!(&self.db, coll, |c| c.create_text_index(&fields, opts)?),
                };
                writeln!(self.out, "index {:?} ready", info.name)?;
                Ok(())
            }
            DocOp::FindOneAnd(f) => {
                let FindOneAnd {
                    filter,
                    modify,
                    sort,
                    projection,
                    upsert,
                    after,
                } = f;
                let opts = FindOneAndOptions {
                    sort: sort.map(SortSpec::parse).transpose()?,
                    upsert,
                    return_document: if after {
                        ReturnDocument::After
                    } else {
                        ReturnDocument::Before
                    },
                };
                let proj = projection.map(Projection::parse).transpose()?;
                // Inside `.begin … .commit` the transaction's own
                // TxnCollection::find_one_and_* (its earlier writes seen).
                let found = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| match modify {
                        Modify::Update(u) => c.find_one_and_update(filter, u, opts)?,
                        Modify::Replace(d) => c.find_one_and_replace(filter, &to_doc(d)?, opts)?,
                        Modify::Delete => c.find_one_and_delete(filter, opts)?,
                    }),
                    None => with_coll!(&self.db, coll, |c| match modify {
                        Modify::Update(u) => c.find_one_and_update(filter, u, opts)?,
                        Modify::Replace(d) => c.find_one_and_replace(filter, &to_doc(d)?, opts)?,
                        Modify::Delete => c.find_one_and_delete(filter, opts)?,
                    }),
                };
                let v = match found {
                    Some(d) => doc_json(proj.as_ref().map_or(d.clone(), |p| p.apply(&d))),
                    None => Json::Null,
                };
                self.printer.value(&mut self.out, &v)?;
                Ok(())
            }
            DocOp::Rename { to, drop_target } => {
                match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.rename(&to, drop_target)?),
                    None => with_coll!(&self.db, coll, |c| c.rename(&to, drop_target)?),
                }
                writeln!(self.out, "renamed collection {coll:?} to {to:?}")?;
                Ok(())
            }
            DocOp::GetIndexes => {
                let rows: Vec<Json> = with_coll!(&self.db, coll, |c| c.list_indexes()?)
                    .into_iter()
                    .map(|i| {
                        let key: serde_json::Map<String, Json> =
                            i.fields.into_iter().map(|(p, o)| (p, json!(o))).collect();
                        json!({"name": i.name, "key": key, "unique": i.unique, "sparse": i.sparse})
                    })
                    .collect();
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            DocOp::DropIndex(name) => {
                let dropped = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.drop_index(&name)?),
                    None => with_coll!(&self.db, coll, |c| c.drop_index(&name)?),
                };
                if !dropped {
                    return Err(user(format!(
                        "collection {coll:?} has no index {name:?} (see getIndexes())"
                    )));
                }
                writeln!(self.out, "index {name:?} dropped")?;
                Ok(())
            }
            DocOp::Drop => {
                let dropped = match &self.txn {
                    Some(txn) => with_txn_coll!(txn, coll, |c| c.drop_collection()?),
                    None => with_coll!(&self.db, coll, |c| c.drop()?),
                };
                if dropped {
                    writeln!(self.out, "dropped collection {coll:?}")?;
                } else {
                    writeln!(self.out, "no collection {coll:?} to drop")?;
                }
                Ok(())
            }
        }
    }

    fn update(&mut self, coll: &str, filter: Json, update: Json, many: bool, upsert: bool) -> SRes {
        let opts = UpdateOptions { upsert };
        let r = match &self.txn {
            Some(txn) => with_txn_coll!(txn, coll, |c| if many {
                c.update_many(filter, update, opts)?
            } else {
                c.update_one(filter, update, opts)?
            }),
            None => with_coll!(&self.db, coll, |c| if many {
                c.update_many(filter, update, opts)?
            } else {
                c.update_one(filter, update, opts)?
            }),
        };
        match &r.upserted_id {
            Some(id) => writeln!(self.out, "matched 0, upserted _id {}", id.to_json())?,
            None => writeln!(self.out, "matched {}, modified {}", r.matched, r.modified)?,
        }
        Ok(())
    }

    fn find(&mut self, coll: &str, f: Find) -> SRes {
        let mut opts = FindOptions::new().skip(f.skip);
        if let Some(n) = f.limit {
            opts = opts.limit(n);
        }
        if let Some(s) = f.sort.clone() {
            opts = opts.sort(s)?;
        }
        if let Some(p) = f.projection.clone() {
            opts = opts.projection(p)?;
        }
        if let Some(h) = f.hint.clone() {
            opts = opts.hint(h)?;
        }
        if let Some(txn) = &self.txn {
            // The transaction's own planner (it sees the transaction's
            // writes): explain, hint, sort, skip, limit and projection as
            // outside one; the results are collected in memory.
            if f.explain {
                let e = with_txn_coll!(txn, coll, |c| c.explain(f.filter, opts)?);
                self.printer.value(&mut self.out, &e.to_json())?;
                return Ok(());
            }
            if f.count {
                let n = with_txn_coll!(txn, coll, |c| c.find(f.filter)?).len();
                writeln!(self.out, "{n}")?;
                return Ok(());
            }
            let docs = with_txn_coll!(txn, coll, |c| c.find_with(f.filter, opts)?);
            let rows: Vec<Json> = docs.into_iter().map(doc_json).collect();
            if f.one {
                let v = rows.into_iter().next().unwrap_or(Json::Null);
                self.printer.value(&mut self.out, &v)?;
                return Ok(());
            }
            return self.show_rows(Box::new(rows.into_iter().map(Ok)));
        }
        if f.count {
            let n = with_coll!(&self.db, coll, |c| c.count(f.filter)?);
            writeln!(self.out, "{n}")?;
            return Ok(());
        }
        if f.explain {
            let e = with_coll!(&self.db, coll, |c| c.explain(f.filter, opts)?);
            let report = e.to_json();
            self.printer.value(&mut self.out, &report)?;
            return Ok(());
        }
        let rows: super::Rows<'a> = match &self.db {
            Db::File(db) => {
                let results = db.collection::<Document>(coll).find_with(f.filter, opts)?;
                Box::new(results.map(|d| d.map(doc_json).map_err(|e| CliError::Db(e.into()))))
            }
            Db::Etcd(db) => {
                let db: &'a EtcdDatabase = db;
                let results = db.collection::<Document>(coll).find_with(f.filter, opts)?;
                Box::new(results.map(|d| d.map(doc_json).map_err(|e| CliError::Db(e.into()))))
            }
        };
        if f.one {
            let mut rows = rows;
            let v = match rows.next() {
                Some(d) => d?,
                None => Json::Null,
            };
            self.printer.value(&mut self.out, &v)?;
            return Ok(());
        }
        self.show_rows(rows)
    }
}
