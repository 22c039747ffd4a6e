//! Running statements: collections, key-value tables and event streams.
//!
//! Without `.begin` every write is its own transaction (the collection and
//! event APIs commit it). Inside `.begin … .commit` writes go through the
//! open [`WriteTransaction`] (`txn.collection(..)`, an `EventWriter`, the
//! raw tables), and reads of collections and tables see its changes; those
//! reads are scans ([`TxnCollection::find`] plans no index), and `explain()`
//! is refused there since the library plans only committed snapshots.
//! Event reads (`read`, `tail`), `getIndexes()` and the listings of
//! collections, streams and indexes show what is committed: the library has no
//! listing of collections or streams within a write transaction. `.backup`,
//! `.stats` and `.check` are refused there (see `dot.rs`).
//!
//! [`TxnCollection::find`]: cairndb::document::collection::TxnCollection::find

use std::io::Write;

use base64::Engine;
use cairndb::document::query::{FindOneAndOptions, FindOptions, ReturnDocument, UpdateOptions};
use cairndb::document::{Document, IndexOptions, Projection, SortSpec, TextIndexOptions, Value};
use cairndb::events::{
    Direction, EventData, EventStore, EventWriter, ExpectedVersion, ReadFrom, StreamVersion,
};
use cairndb::{ReadableTable, WriteTransaction};
use serde_json::{json, Value as Json};

use super::parse::{DocOp, Find, FindOneAnd, Modify, Stmt};
use super::{user, SRes, Shell};
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

impl Shell {
    /// Runs a statement other than a dot-command or `it`.
    pub(super) fn exec(&mut self, stmt: Stmt) -> SRes {
        match stmt {
            Stmt::Docs { coll, op } => self.docs(&coll, *op),
            Stmt::CollectionNames => {
                let names = self.db.list_collections()?;
                self.printer.value(&mut self.out, &json!(names))?;
                Ok(())
            }
            Stmt::Show(what) => self.show(&what),
            Stmt::Get { table, key } => self.get(&table, &key),
            Stmt::Put { table, key, value } => {
                crate::check_key(&self.db, &key)?;
                self.write(|txn| {
                    raw::open_for_text(txn, &table)?.insert(key.as_bytes(), value.as_bytes())?;
                    Ok(())
                })?;
                writeln!(self.out, "ok")?;
                Ok(())
            }
            Stmt::Del { table, key } => {
                crate::check_key(&self.db, &key)?;
                let found =
                    self.write(|txn| raw::open_existing(txn, &table)?.remove(key.as_bytes()))?;
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
                let r = match &self.txn {
                    Some(txn) => {
                        EventWriter::new(txn).append(&stream, ExpectedVersion::Any, &events)?
                    }
                    None => {
                        EventStore::new(&self.db).append(&stream, ExpectedVersion::Any, &events)?
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
                let events = EventStore::new(&self.db).read_stream(
                    &stream,
                    ReadFrom::At(StreamVersion(from)),
                    Direction::Forward,
                    limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX)),
                )?;
                let rows: Vec<Json> = events.iter().map(crate::events::event_json).collect();
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            Stmt::Tail { stream, n } => {
                let mut events = EventStore::new(&self.db).read_stream(
                    &stream,
                    ReadFrom::End,
                    Direction::Backward,
                    usize::try_from(n).unwrap_or(usize::MAX),
                )?;
                events.reverse();
                let rows: Vec<Json> = events.iter().map(crate::events::event_json).collect();
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            Stmt::Empty | Stmt::Dot { .. } | Stmt::It => Ok(()),
        }
    }

    /// Runs `f` in the open transaction, or in one of its own, committed.
    pub(super) fn write<R>(
        &mut self,
        f: impl FnOnce(&WriteTransaction) -> Result<R, CliError>,
    ) -> SRes<R> {
        match &self.txn {
            Some(txn) => Ok(f(txn)?),
            None => {
                let txn = self.db.begin_write()?;
                let r = f(&txn)?;
                txn.commit()?;
                Ok(r)
            }
        }
    }

    fn show(&mut self, what: &str) -> SRes {
        let names = match what {
            "collections" => self.db.list_collections()?,
            "tables" => self.table_names()?,
            _ => EventStore::new(&self.db)
                .list_streams("")?
                .into_iter()
                .map(|s| s.name)
                .collect(),
        };
        for n in names {
            writeln!(self.out, "{n}")?;
        }
        Ok(())
    }

    /// The user's tables, as the open transaction sees them if any.
    pub(super) fn table_names(&self) -> SRes<Vec<String>> {
        Ok(user_tables(match &self.txn {
            Some(txn) => txn.list_tables()?,
            None => self.db.begin_read()?.list_tables()?,
        }))
    }

    fn get(&mut self, table: &str, key: &str) -> SRes {
        crate::check_key(&self.db, key)?;
        let value = match &self.txn {
            Some(txn) => {
                let t = raw::open_existing(txn, table)?;
                let v = t.table().get(key.as_bytes())?;
                v.map(|g| g.value().to_vec())
            }
            None => {
                let r = self.db.begin_read()?;
                let t = raw::open_read(&r, table)?;
                let v = t.get(key.as_bytes())?;
                v.map(|g| g.value().to_vec())
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
        match &self.txn {
            Some(txn) => {
                let t = raw::open_existing(txn, table)?;
                for e in t.table().range::<&[u8]>(p..)? {
                    let (k, v) = e?;
                    if !collect(k.value(), v.value()) {
                        break;
                    }
                }
            }
            None => {
                let r = self.db.begin_read()?;
                let t = raw::open_read(&r, table)?;
                for e in t.range::<&[u8]>(p..)? {
                    let (k, v) = e?;
                    if !collect(k.value(), v.value()) {
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
                            "explain is not available inside a transaction: the library plans \
                             queries on committed snapshots only (.commit or .rollback first)",
                        ))
                    }
                    Some(txn) => txn
                        .collection::<Document>(coll)
                        .aggregate(pipeline)?
                        .into_iter()
                        .map(doc_json)
                        .collect(),
                    None => {
                        let c = self.db.collection::<Document>(coll);
                        if explain {
                            let e = c.explain_aggregate(pipeline)?;
                            let report = crate::docs_query::aggregate_explain_json(&e);
                            self.printer.value(&mut self.out, &report)?;
                            return Ok(());
                        }
                        c.aggregate(pipeline)?
                            .map(|d| d.map(doc_json))
                            .collect::<Result<_, _>>()?
                    }
                };
                self.show_rows(Box::new(rows.into_iter().map(Ok)))
            }
            DocOp::Distinct { field, filter } => {
                let vals = match &self.txn {
                    Some(txn) => txn.collection::<Document>(coll).distinct(&field, filter)?,
                    None => self
                        .db
                        .collection::<Document>(coll)
                        .distinct(&field, filter)?,
                };
                let v = Json::Array(vals.iter().map(Value::to_json).collect());
                self.printer.value(&mut self.out, &v)?;
                Ok(())
            }
            DocOp::Count(filter) => {
                let n = match &self.txn {
                    Some(txn) => txn.collection::<Document>(coll).find(filter)?.len() as u64,
                    None => self.db.collection::<Document>(coll).count(filter)?,
                };
                writeln!(self.out, "{n}")?;
                Ok(())
            }
            DocOp::Insert { docs, many } => {
                let docs = docs.into_iter().map(to_doc).collect::<SRes<Vec<_>>>()?;
                let ids = match &self.txn {
                    Some(txn) => txn.collection::<Document>(coll).insert_many(docs.iter())?,
                    None => self
                        .db
                        .collection::<Document>(coll)
                        .insert_many(docs.iter())?,
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
                    Some(txn) => {
                        let c = txn.collection::<Document>(coll);
                        if many {
                            c.delete_many(filter)?
                        } else {
                            // No delete_one in a transaction: the first
                            // match's _id.
                            let first = c.find(filter)?.into_iter().next();
                            match first.and_then(|d| d.get("_id").cloned()) {
                                Some(id) => u64::from(c.delete_id(id)?),
                                None => 0,
                            }
                        }
                    }
                    None => {
                        let c = self.db.collection::<Document>(coll);
                        if many {
                            c.delete_many(filter)?
                        } else {
                            c.delete_one(filter)?
                        }
                    }
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
                    let info = self
                        .db
                        .collection::<Document>(coll)
                        .create_ttl_index(field, secs, opts)?;
                    writeln!(self.out, "index {:?} ready", info.name)?;
                    return Ok(());
                }
                let info = match &self.txn {
                    Some(txn) => txn
                        .collection::<Document>(coll)
                        .create_index(&fields, opts)?,
                    None => self
                        .db
                        .collection::<Document>(coll)
                        .create_index(&fields, opts)?,
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
                    Some(txn) => txn
                        .collection::<Document>(coll)
                        .create_text_index(&fields, opts)?,
                    None => self
                        .db
                        .collection::<Document>(coll)
                        .create_text_index(&fields, opts)?,
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
                if self.txn.is_some() {
                    return Err(user(
                        "findOneAnd…() runs in a transaction of its own (.commit or \
                         .rollback first)",
                    ));
                }
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
                let c = self.db.collection::<Document>(coll);
                let found = match modify {
                    Modify::Update(u) => c.find_one_and_update(filter, u, opts)?,
                    Modify::Replace(d) => c.find_one_and_replace(filter, &to_doc(d)?, opts)?,
                    Modify::Delete => c.find_one_and_delete(filter, opts)?,
                };
                let v = match found {
                    Some(d) => doc_json(proj.as_ref().map_or(d.clone(), |p| p.apply(&d))),
                    None => Json::Null,
                };
                self.printer.value(&mut self.out, &v)?;
                Ok(())
            }
            DocOp::Rename { to, drop_target } => {
                if self.txn.is_some() {
                    return Err(user(
                        "renameCollection() runs in a transaction of its own (.commit or \
                         .rollback first)",
                    ));
                }
                self.db
                    .collection::<Document>(coll)
                    .rename(&to, drop_target)?;
                writeln!(self.out, "renamed collection {coll:?} to {to:?}")?;
                Ok(())
            }
            DocOp::GetIndexes => {
                let rows: Vec<Json> = self
                    .db
                    .collection::<Document>(coll)
                    .list_indexes()?
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
                    Some(txn) => txn.collection::<Document>(coll).drop_index(&name)?,
                    None => self.db.collection::<Document>(coll).drop_index(&name)?,
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
                    Some(txn) => txn.collection::<Document>(coll).drop_collection()?,
                    None => self.db.collection::<Document>(coll).drop()?,
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
            Some(txn) => {
                let c = txn.collection::<Document>(coll);
                if many {
                    c.update_many(filter, update, opts)?
                } else {
                    c.update_one(filter, update, opts)?
                }
            }
            None => {
                let c = self.db.collection::<Document>(coll);
                if many {
                    c.update_many(filter, update, opts)?
                } else {
                    c.update_one(filter, update, opts)?
                }
            }
        };
        match &r.upserted_id {
            Some(id) => writeln!(self.out, "matched 0, upserted _id {}", id.to_json())?,
            None => writeln!(self.out, "matched {}, modified {}", r.matched, r.modified)?,
        }
        Ok(())
    }

    fn find(&mut self, coll: &str, f: Find) -> SRes {
        if let Some(txn) = &self.txn {
            if f.hint.is_some() {
                return Err(user(
                    "hint() is not available inside a transaction: its queries read every \
                     match (.commit or .rollback first)",
                ));
            }
            if f.explain {
                return Err(user(
                    "explain() is not available inside a transaction: the library plans \
                     queries on committed snapshots only (.commit or .rollback first)",
                ));
            }
            let c = txn.collection::<Document>(coll);
            let mut docs = c.find(f.filter)?;
            if f.count {
                writeln!(self.out, "{}", docs.len())?;
                return Ok(());
            }
            if let Some(sort) = f.sort {
                let spec = SortSpec::parse(sort)?;
                let mut keyed: Vec<(Vec<Value>, Document)> = docs
                    .into_iter()
                    .map(|d| {
                        let v = Value::Object(d);
                        let k = spec.sort_key_value(&v);
                        match v {
                            Value::Object(d) => (k, d),
                            _ => (k, Document::new()),
                        }
                    })
                    .collect();
                keyed.sort_by(|a, b| spec.compare_keys(&a.0, &b.0));
                docs = keyed.into_iter().map(|(_, d)| d).collect();
            }
            let proj = f.projection.map(Projection::parse).transpose()?;
            let skip = usize::try_from(f.skip).unwrap_or(usize::MAX);
            let limit = f
                .limit
                .map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX));
            let rows: Vec<Json> = docs
                .into_iter()
                .skip(skip)
                .take(limit)
                .map(|d| doc_json(proj.as_ref().map_or(d.clone(), |p| p.apply(&d))))
                .collect();
            if f.one {
                let v = rows.into_iter().next().unwrap_or(Json::Null);
                self.printer.value(&mut self.out, &v)?;
                return Ok(());
            }
            return self.show_rows(Box::new(rows.into_iter().map(Ok)));
        }
        let c = self.db.collection::<Document>(coll);
        if f.count {
            writeln!(self.out, "{}", c.count(f.filter)?)?;
            return Ok(());
        }
        let mut opts = FindOptions::new().skip(f.skip);
        if let Some(n) = f.limit {
            opts = opts.limit(n);
        }
        if let Some(s) = f.sort {
            opts = opts.sort(s)?;
        }
        if let Some(p) = f.projection {
            opts = opts.projection(p)?;
        }
        if let Some(h) = f.hint {
            opts = opts.hint(h)?;
        }
        if f.explain {
            let e = c.explain(f.filter, opts)?;
            let report = e.to_json();
            self.printer.value(&mut self.out, &report)?;
            return Ok(());
        }
        let results = c.find_with(f.filter, opts)?;
        if f.one {
            let v = match results.into_iter().next() {
                Some(d) => doc_json(d?),
                None => Json::Null,
            };
            self.printer.value(&mut self.out, &v)?;
            return Ok(());
        }
        self.show_rows(Box::new(
            results.map(|d| d.map(doc_json).map_err(|e| CliError::Db(e.into()))),
        ))
    }
}
