//! Change streams: the change log the writer keeps for collections that
//! ask for it, and [`ChangeStream`], which reads it in commit order.
//!
//! **Recording** (FORMAT.md, "Change log and TTL indexes"). A collection
//! whose metadata has `change_stream` (see
//! [`Collection::enable_change_stream`]) gets one record per insert,
//! update, replace and delete — and one for its drop, rename or
//! `disable_change_stream` — in the database's change log `$docs.changes`,
//! written by the same `Writer` operation as the document, so in the same
//! transaction and undone with it. A record's position is the last
//! position + 1, taken under the writer lock: positions are dense and in
//! commit order, and a read snapshot holds a prefix of them. The writer
//! trims the oldest records past the log's retention (`max_entries`,
//! [`Database::set_change_log_retention`]) a few per appended record.
//! Collections without the option never reach this module: the write path
//! tests one `bool` of the metadata it already holds.
//!
//! **Reading** follows the event store's subscriptions
//! (`events/subscription.rs`): a stream *pulls* batches from a fresh read
//! snapshot from its checkpoint (the next position), and when it has read
//! everything committed it sleeps on the database's commit notification
//! ([`Database::wait_for_commit`]) — no polling, a slow reader holds nobody
//! up, and its checkpoint is all it needs to resume. Since a snapshot holds
//! a prefix of the dense positions, reading from the checkpoint skips
//! nothing and repeats nothing; a first position above the checkpoint
//! means the writer trimmed it (`ChangeStreamHistoryLost`).
//!
//! Events have MongoDB's shape: `_id` (the resume token `{_data}`),
//! `operationType`, `clusterTime` (the position), `wallTime` (milliseconds
//! since the Unix epoch), `ns: {coll}`, `documentKey: {_id}`,
//! `fullDocument` (insert and replace; update with
//! [`FullDocument::UpdateLookup`]: the document as that update left it),
//! `updateDescription: {updatedFields, removedFields, truncatedArrays}`
//! (update), `to: {coll}` (rename). A drop, rename or disable is followed
//! by `invalidate`, after which the stream ends.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::aggregate::{IntoPipeline, PerDocument};
use super::codec;
use super::collection::{
    check_collection_name, meta_in, name_of_id, Collection, CollectionMeta, StoreMode, Writer,
};
use super::error::{DocResult, DocumentError};
use super::ttl::{Clock, SystemClock};
use super::value::{Document, Value};
use crate::db::Database;
use crate::ids::TxnId;
use crate::seam::{SeamRead, SeamTable, SeamWrite};
use crate::table::TableDefinition;
use crate::txn::ReadTransaction;

/// The change log's table.
const LOG: &str = "$docs.changes";

/// The change log's settings key (sorts before every position).
const SETTINGS_KEY: &[u8] = b"";

/// The retention of a log without settings, in records.
pub const DEFAULT_CHANGE_LOG_ENTRIES: u64 = 100_000;

/// Records the writer trims at most per record it appends.
const TRIM_PER_APPEND: usize = 4;

/// Records one read of the log takes at most.
const READ_BATCH: usize = 256;

/// How long one wait on the commit notification lasts before the stream
/// looks at its deadline again.
const WAIT_SLICE: Duration = Duration::from_millis(50);

/// The record format this build writes and reads.
const RECORD_VERSION: i64 = 1;

fn log_def() -> TableDefinition<'static, &'static [u8], &'static [u8]> {
    TableDefinition::internal(LOG)
}

/// The first position key (positions start at 1; the settings key is
/// shorter and sorts before).
const FIRST_KEY: [u8; 8] = [0; 8];

/// What a change record records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Insert,
    Update,
    Replace,
    Delete,
    Drop,
    Rename,
    Disable,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Insert => "insert",
            Op::Update => "update",
            Op::Replace => "replace",
            Op::Delete => "delete",
            Op::Drop => "drop",
            Op::Rename => "rename",
            Op::Disable => "disable",
        }
    }

    fn parse(s: &str) -> Option<Op> {
        Some(match s {
            "insert" => Op::Insert,
            "update" => Op::Update,
            "replace" => Op::Replace,
            "delete" => Op::Delete,
            "drop" => Op::Drop,
            "rename" => Op::Rename,
            "disable" => Op::Disable,
            _ => return None,
        })
    }

    /// Whether the stream ends after this record (with `invalidate`).
    fn invalidates(self) -> bool {
        matches!(self, Op::Drop | Op::Rename | Op::Disable)
    }
}

fn corrupt(position: u64, reason: impl Into<String>) -> DocumentError {
    DocumentError::Custom(format!(
        "change log record at position {position}: {}",
        reason.into()
    ))
}

/// The log's retention in records, as `t` holds it.
fn max_entries(t: &impl SeamTable<&'static [u8], &'static [u8]>) -> DocResult<u64> {
    match t.get(SETTINGS_KEY)? {
        None => Ok(DEFAULT_CHANGE_LOG_ENTRIES),
        Some(g) => match codec::decode_value(g.value())? {
            Value::Object(d) => match d.get("max_entries") {
                Some(Value::Int(n)) if *n >= 1 => Ok(*n as u64),
                _ => Err(corrupt(0, "the settings lack a positive max_entries")),
            },
            _ => Err(corrupt(0, "the settings are not an object")),
        },
    }
}

fn position_of(key: &[u8]) -> DocResult<u64> {
    let b: [u8; 8] = key
        .try_into()
        .map_err(|_| corrupt(0, format!("a key of {} bytes", key.len())))?;
    Ok(u64::from_be_bytes(b))
}

/// The last position in the log `t` (0 if none): its last key (the
/// settings key, which sorts first, is no position).
fn last_position(t: &impl SeamTable<&'static [u8], &'static [u8]>) -> DocResult<u64> {
    match t.last()? {
        Some((k, _)) if k.value() == SETTINGS_KEY => Ok(0),
        Some((k, _)) => position_of(k.value()),
        None => Ok(0),
    }
}

/// The last position of the log `t` of snapshot `r`: the backend's
/// counter kept with the log when it has a valid one (cairndb-etcd: one
/// point read instead of a sorted read of the log), else its last key.
fn last_position_in<R: SeamRead + ?Sized>(
    r: &R,
    t: &impl SeamTable<&'static [u8], &'static [u8]>,
) -> DocResult<u64> {
    match r.table_counter(LOG)? {
        Some(last) => Ok(last),
        None => last_position(t),
    }
}

/// Appends a record for collection `m` and trims the log's oldest records
/// past its retention, in the writer's operation. The position is the
/// log's last + 1, read in the writer's transaction (from the backend's
/// counter kept with the log, else the log's last key), so two
/// transactions that both append cannot both commit (the seam's
/// serializable commits): positions stay dense on every backend.
fn append<W: SeamWrite + SeamRead>(w: &mut Writer<'_, W>, mut rec: Document) -> DocResult<()> {
    rec.insert("t", SystemClock.now_ms());
    let mut bytes = Vec::new();
    codec::encode_value(&Value::Object(rec), &mut bytes)?;
    let counted = SeamWrite::table_counter(w.txn, LOG)?;
    let (next, max) = {
        let t = w.txn.open_table(log_def())?;
        let last = match counted {
            Some(last) => last,
            None => last_position(&t)?,
        };
        (last + 1, max_entries(&t)?)
    };
    w.put_raw(LOG, &next.to_be_bytes(), Some(&bytes))?;
    // The backend's counter (cairndb-etcd: `P/n/$docs.changes`, the last
    // position; nothing on the embedded engine).
    w.set_counter(LOG, next, next - 1)?;
    if next > max {
        let upto = (next - max).to_be_bytes();
        let old: Vec<Vec<u8>> = {
            let t = w.txn.open_table(log_def())?;
            let mut v = Vec::new();
            for item in t.range(FIRST_KEY.as_slice()..=upto.as_slice())? {
                if v.len() >= TRIM_PER_APPEND {
                    break;
                }
                let (k, _) = item?;
                v.push(k.value().to_vec());
            }
            v
        };
        for k in old {
            w.put_raw(LOG, &k, None)?;
        }
    }
    Ok(())
}

/// A record's common fields.
fn record(op: Op, coll: &str, m: &CollectionMeta) -> Document {
    Document::new()
        .with("v", RECORD_VERSION)
        .with("op", op.name())
        .with("coll", m.id as i64)
        .with("ns", coll)
}

/// Records a store (insert, update, replace) of `new` over `old`.
pub(crate) fn record_store<W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    coll: &str,
    m: &CollectionMeta,
    mode: StoreMode,
    old: Option<&[u8]>,
    new: &[u8],
) -> DocResult<()> {
    let op = match (mode, old) {
        (StoreMode::Update, Some(_)) => Op::Update,
        (_, None) => Op::Insert,
        (_, Some(_)) => Op::Replace,
    };
    let doc = codec::decode_value(new)?;
    let key = doc.get("_id").cloned().unwrap_or(Value::Null);
    let mut rec = record(op, coll, m).with("key", key);
    if op == Op::Update {
        if let Some(old) = old {
            rec.insert("upd", update_description(&codec::decode_value(old)?, &doc));
        }
    }
    rec.insert("doc", doc);
    append(w, rec)
}

/// Records the delete of the document stored as `old`.
pub(crate) fn record_delete<W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    coll: &str,
    m: &CollectionMeta,
    old: &[u8],
) -> DocResult<()> {
    let key = match super::path::get(old, &["_id"])? {
        Some(v) => v.to_value()?,
        None => Value::Null,
    };
    append(w, record(Op::Delete, coll, m).with("key", key))
}

/// Records a drop, rename (to `to`) or disable of collection `coll`.
pub(crate) fn record_event<W: SeamWrite + SeamRead>(
    w: &mut Writer<'_, W>,
    coll: &str,
    m: &CollectionMeta,
    op: Op,
    to: Option<&str>,
) -> DocResult<()> {
    let mut rec = record(op, coll, m);
    if let Some(to) = to {
        rec.insert("to", to);
    }
    append(w, rec)
}

/// MongoDB's `updateDescription` of the change from `old` to `new`:
/// dotted paths of the fields set (changed or added) and removed,
/// descending into objects present on both sides; arrays compared whole.
fn update_description(old: &Value, new: &Value) -> Document {
    let mut updated = Document::new();
    let mut removed = Vec::new();
    if let (Value::Object(a), Value::Object(b)) = (old, new) {
        diff(a, b, "", &mut updated, &mut removed);
    }
    Document::new()
        .with("updatedFields", updated)
        .with("removedFields", Value::Array(removed))
        .with("truncatedArrays", Value::Array(Vec::new()))
}

fn diff(a: &Document, b: &Document, prefix: &str, set: &mut Document, removed: &mut Vec<Value>) {
    let path = |k: &str| {
        if prefix.is_empty() {
            k.to_string()
        } else {
            format!("{prefix}.{k}")
        }
    };
    for (k, nv) in b.iter() {
        match a.get(k) {
            Some(ov) if ov == nv && ov.kind() == nv.kind() => {}
            Some(Value::Object(oa)) if matches!(nv, Value::Object(_)) => {
                if let Value::Object(nb) = nv {
                    diff(oa, nb, &path(k), set, removed);
                }
            }
            _ => {
                set.insert(path(k), nv.clone());
            }
        }
    }
    for (k, _) in a.iter() {
        if !b.contains_key(k) {
            removed.push(Value::String(path(k)));
        }
    }
}

/// Where a change stream resumes: a position in the change log and the
/// collection it belongs to. Its text form is MongoDB's `_data`: 34
/// hexadecimal digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResumeToken {
    /// The position of the event (or of the record an `invalidate`
    /// follows).
    pub position: u64,
    /// The collection's id.
    pub collection: u64,
    /// Whether it is the token of an `invalidate` event (only
    /// `start_after` takes those).
    pub invalidate: bool,
}

impl ResumeToken {
    /// The token as the hexadecimal `_data` string.
    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(34);
        for b in self.position.to_be_bytes() {
            s.push_str(&format!("{b:02x}"));
        }
        for b in self.collection.to_be_bytes() {
            s.push_str(&format!("{b:02x}"));
        }
        s.push_str(if self.invalidate { "01" } else { "00" });
        s
    }

    /// Parses the `_data` string, or a JSON `{"_data": "..."}` as events
    /// carry it.
    pub fn parse(text: &str) -> DocResult<ResumeToken> {
        let bad = |reason: &str| DocumentError::InvalidResumeToken {
            token: text.to_string(),
            reason: reason.to_string(),
        };
        let t = text.trim();
        let hex = if t.starts_with('{') {
            let v: serde_json::Value =
                serde_json::from_str(t).map_err(|e| bad(&format!("not JSON: {e}")))?;
            match v.get("_data").and_then(|d| d.as_str()) {
                Some(s) => s.to_string(),
                None => return Err(bad("a JSON token must be {\"_data\": \"<hex>\"}")),
            }
        } else {
            t.to_string()
        };
        if hex.len() != 34 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad("a token is 34 hexadecimal digits"));
        }
        let num = |r: std::ops::Range<usize>| {
            hex.get(r)
                .and_then(|s| u64::from_str_radix(s, 16).ok())
                .ok_or_else(|| bad("a token is 34 hexadecimal digits"))
        };
        let position = num(0..16)?;
        let collection = num(16..32)?;
        let invalidate = match num(32..34)? {
            0 => false,
            1 => true,
            _ => return Err(bad("its last byte must be 00 or 01")),
        };
        Ok(ResumeToken {
            position,
            collection,
            invalidate,
        })
    }

    /// The token as an event's `_id`: `{_data: "<hex>"}`.
    pub fn to_value(&self) -> Value {
        Value::Object(Document::new().with("_data", self.to_hex()))
    }

    /// The token of a change event (its `_id`).
    pub fn of_event(event: &Document) -> DocResult<ResumeToken> {
        match event.get("_id").and_then(|v| v.get("_data")) {
            Some(Value::String(s)) => ResumeToken::parse(s),
            _ => Err(DocumentError::InvalidResumeToken {
                token: event
                    .get("_id")
                    .map(|v| v.to_json().to_string())
                    .unwrap_or_default(),
                reason: "an event's _id must be {_data: \"<hex>\"}".into(),
            }),
        }
    }
}

impl std::fmt::Display for ResumeToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// What an `update` event carries of the document (MongoDB's
/// `fullDocument` option).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FullDocument {
    /// Only inserts and replaces carry `fullDocument`.
    #[default]
    Default,
    /// Updates carry it too: the document as that update left it (MongoDB's
    /// `updateLookup` reads the current one instead, which may be newer).
    UpdateLookup,
}

/// Options of [`Collection::watch_with`].
#[derive(Debug, Clone, Default)]
pub struct ChangeStreamOptions {
    /// Whether updates carry the document.
    pub full_document: FullDocument,
    /// Resume after this event (not after an `invalidate`).
    pub resume_after: Option<ResumeToken>,
    /// Start after this event, an `invalidate` included (then the stream
    /// watches the collection now under the name).
    pub start_after: Option<ResumeToken>,
}

/// Where a change stream reads the change log and waits for commits: the
/// embedded [`Database`], or another backend of the storage seam
/// (`cairndb-etcd`'s `EtcdDatabase`, which waits with an etcd `Watch`). A
/// stream reads only from snapshots: the wait is a wake-up, so however
/// early or late it returns nothing is skipped or repeated.
pub trait ChangeSource {
    /// A read snapshot of the database.
    type Snapshot<'a>: SeamRead
    where
        Self: 'a;
    /// What a snapshot saw, to wait for a commit after it.
    type Seen: Copy;
    /// The longest single wait (the stream looks at its deadline between
    /// two).
    const WAIT_SLICE: Duration;

    /// A snapshot of the newest commit, and what it saw.
    fn snapshot(&self) -> DocResult<(Self::Snapshot<'_>, Self::Seen)>;

    /// Waits until a commit after `seen` (it may return earlier: a
    /// timeout, a spurious wake-up), at most `timeout`.
    fn wait_for_commit(&self, seen: Self::Seen, timeout: Duration) -> DocResult<()>;
}

impl ChangeSource for Database {
    type Snapshot<'a> = ReadTransaction;
    type Seen = TxnId;
    const WAIT_SLICE: Duration = WAIT_SLICE;

    fn snapshot(&self) -> DocResult<(ReadTransaction, TxnId)> {
        let r = self.begin_read()?;
        let seen = r.txn_id();
        Ok((r, seen))
    }

    fn wait_for_commit(&self, seen: TxnId, timeout: Duration) -> DocResult<()> {
        Database::wait_for_commit(self, seen, timeout);
        Ok(())
    }
}

/// Changes to one collection, in commit order. Use it as a blocking
/// iterator (ends after `invalidate`), with
/// [`ChangeStream::next_timeout`], or with [`ChangeStream::try_next`]
/// (never waits). `S` is where it reads: the embedded [`Database`], or
/// another backend's ([`ChangeSource`]).
pub struct ChangeStream<'db, S: ChangeSource + ?Sized = Database> {
    db: &'db S,
    name: String,
    /// The collection's id (whose records this stream delivers).
    coll: u64,
    /// The next position to read.
    checkpoint: u64,
    stages: Option<PerDocument>,
    full_document: FullDocument,
    buffer: VecDeque<(Document, ResumeToken)>,
    /// The token of the last event delivered (or where the stream began).
    delivered: ResumeToken,
    /// The token of the last record read (delivered or passed over).
    scanned: ResumeToken,
    /// The invalidate has been read: nothing follows it.
    ended: bool,
}

impl<S: ChangeSource + ?Sized> std::fmt::Debug for ChangeStream<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeStream")
            .field("collection", &self.name)
            .field("checkpoint", &self.checkpoint)
            .finish()
    }
}

type LogTable<'a, R> = <R as SeamRead>::Table<'a, &'static [u8], &'static [u8]>;

fn open_log<R: SeamRead>(r: &R) -> DocResult<Option<LogTable<'_, R>>> {
    Ok(r.open_table_if_exists(log_def())?)
}

impl<'db, S: ChangeSource + ?Sized> ChangeStream<'db, S> {
    /// A stream over collection `name` of `db`, its events passed through
    /// `pipeline`: what [`Collection::watch_with`] opens on the embedded
    /// engine, and another backend's `watch` on its own [`ChangeSource`].
    pub fn open(
        db: &'db S,
        name: &str,
        pipeline: Option<super::aggregate::Pipeline>,
        opts: ChangeStreamOptions,
    ) -> DocResult<Self> {
        check_collection_name(name)?;
        let stages = match pipeline {
            Some(p) => Some(p.per_document("a change stream pipeline")?),
            None => None,
        };
        let (r, _) = db.snapshot()?;
        let meta = meta_in(&r, name)?;
        let log = open_log(&r)?;
        let last = match &log {
            Some(t) => last_position_in(&r, t)?,
            None => 0,
        };
        let token = match (opts.resume_after, opts.start_after) {
            (Some(_), Some(_)) => {
                return Err(DocumentError::InvalidResumeToken {
                    token: String::new(),
                    reason: "give resume_after or start_after, not both".into(),
                })
            }
            (Some(t), None) if t.invalidate => {
                return Err(DocumentError::InvalidResumeToken {
                    token: t.to_hex(),
                    reason: "it is the token of an invalidate event: resume_after cannot continue past it; use start_after".into(),
                })
            }
            (a, b) => a.or(b),
        };
        let enabled = |meta: &Option<std::rc::Rc<CollectionMeta>>| match meta {
            Some(m) if m.change_stream => Ok(m.id),
            _ => Err(DocumentError::ChangeStreamNotEnabled {
                collection: name.to_string(),
            }),
        };
        let (coll, checkpoint) = match token {
            None => (enabled(&meta)?, last + 1),
            Some(t) => {
                let bad = |reason: String| DocumentError::InvalidResumeToken {
                    token: t.to_hex(),
                    reason,
                };
                if t.position > last {
                    return Err(bad(format!(
                        "position {} is past the end of this database's change log ({last})",
                        t.position
                    )));
                }
                let coll = if t.invalidate {
                    enabled(&meta)?
                } else {
                    check_token_collection(&r, log.as_ref(), name, meta.as_deref(), &t)?;
                    t.collection
                };
                (coll, t.position + 1)
            }
        };
        let mut s = ChangeStream {
            db,
            name: name.to_string(),
            coll,
            checkpoint,
            stages,
            full_document: opts.full_document,
            buffer: VecDeque::new(),
            delivered: ResumeToken {
                position: checkpoint - 1,
                collection: coll,
                invalidate: false,
            },
            scanned: ResumeToken {
                position: checkpoint - 1,
                collection: coll,
                invalidate: false,
            },
            ended: false,
        };
        // The history it resumes from must still be there.
        s.fill_from(&r)?;
        Ok(s)
    }

    /// The token to resume from: after the last event delivered (or the
    /// last record of other collections passed over).
    pub fn resume_token(&self) -> ResumeToken {
        if self.buffer.is_empty() {
            self.scanned
        } else {
            self.delivered
        }
    }

    /// Whether the stream has delivered its `invalidate` (nothing follows).
    pub fn is_ended(&self) -> bool {
        self.ended && self.buffer.is_empty()
    }

    /// Reads the next batch from a fresh snapshot; returns the commit it
    /// read.
    fn fill(&mut self) -> DocResult<S::Seen> {
        let (r, seen) = self.db.snapshot()?;
        self.fill_from(&r)?;
        Ok(seen)
    }

    fn fill_from<R: SeamRead>(&mut self, r: &R) -> DocResult<()> {
        if self.ended {
            return Ok(());
        }
        let Some(log) = open_log(r)? else {
            return Ok(());
        };
        let from = self.checkpoint.to_be_bytes();
        let mut first = true;
        for item in log.range(from.as_slice()..)?.take(READ_BATCH) {
            let (k, v) = item?;
            let pos = position_of(k.value())?;
            if first && pos != self.checkpoint {
                return Err(DocumentError::ChangeStreamHistoryLost {
                    collection: self.name.clone(),
                    position: self.checkpoint,
                    oldest: pos,
                });
            }
            first = false;
            self.checkpoint = pos + 1;
            let (coll, op, rec) = decode_record(pos, v.value())?;
            let token = ResumeToken {
                position: pos,
                collection: coll,
                invalidate: false,
            };
            self.scanned = ResumeToken {
                collection: self.coll,
                ..token
            };
            if coll != self.coll {
                continue;
            }
            if let Some(ev) = self.event(pos, op, rec, token)? {
                self.buffer.push_back((ev, token));
            }
            if op.invalidates() {
                let t = ResumeToken {
                    invalidate: true,
                    ..token
                };
                let ev = Document::new()
                    .with("_id", t.to_value())
                    .with("operationType", "invalidate")
                    .with("clusterTime", pos as i64);
                self.buffer.push_back((ev, t));
                self.scanned = t;
                self.ended = true;
                break;
            }
        }
        Ok(())
    }

    /// The event of record `rec`, through the pipeline.
    fn event(
        &mut self,
        pos: u64,
        op: Op,
        mut rec: Document,
        token: ResumeToken,
    ) -> DocResult<Option<Document>> {
        let op_name = match op {
            Op::Disable => return Ok(None),
            other => other.name(),
        };
        let id = token.to_value();
        let mut ev = Document::new()
            .with("_id", id.clone())
            .with("operationType", op_name)
            .with("clusterTime", pos as i64)
            .with("wallTime", rec.remove("t").unwrap_or(Value::Null))
            .with(
                "ns",
                Document::new().with("coll", rec.remove("ns").unwrap_or(Value::Null)),
            );
        if let Some(key) = rec.remove("key") {
            ev.insert("documentKey", Document::new().with("_id", key));
        }
        let doc = rec.remove("doc");
        match op {
            Op::Insert | Op::Replace => {
                ev.insert("fullDocument", doc.unwrap_or(Value::Null));
            }
            Op::Update => {
                if self.full_document == FullDocument::UpdateLookup {
                    ev.insert("fullDocument", doc.unwrap_or(Value::Null));
                }
                if let Some(u) = rec.remove("upd") {
                    ev.insert("updateDescription", u);
                }
            }
            Op::Rename => {
                ev.insert(
                    "to",
                    Document::new().with("coll", rec.remove("to").unwrap_or(Value::Null)),
                );
            }
            _ => {}
        }
        let Some(stages) = &mut self.stages else {
            return Ok(Some(ev));
        };
        match stages.apply(Value::Object(ev))? {
            None => Ok(None),
            Some(Value::Object(out)) => {
                if out.get("_id") != Some(&id) {
                    return Err(DocumentError::ChangeStreamFatal {
                        collection: self.name.clone(),
                        reason: "the pipeline changed or removed an event's _id, its resume token (MongoDB refuses this too)".into(),
                    });
                }
                Ok(Some(out))
            }
            Some(other) => Err(DocumentError::ChangeStreamFatal {
                collection: self.name.clone(),
                reason: format!("the pipeline made an event {}", other.kind().name()),
            }),
        }
    }

    fn pop(&mut self) -> Option<Document> {
        let (ev, t) = self.buffer.pop_front()?;
        self.delivered = t;
        Some(ev)
    }

    /// The next event if one is committed, without waiting.
    pub fn try_next(&mut self) -> DocResult<Option<Document>> {
        self.next_timeout(Duration::ZERO)
    }

    /// The next event, waiting at most `timeout` for one; `Ok(None)` if
    /// none came in time or the stream has ended.
    pub fn next_timeout(&mut self, timeout: Duration) -> DocResult<Option<Document>> {
        if let Some(ev) = self.pop() {
            return Ok(Some(ev));
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(ev) = self.pop() {
                return Ok(Some(ev));
            }
            if self.ended {
                return Ok(None);
            }
            let before = self.checkpoint;
            let seen = self.fill()?;
            if !self.buffer.is_empty() || self.checkpoint != before {
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.db
                .wait_for_commit(seen, (deadline - now).min(S::WAIT_SLICE))?;
        }
    }
}

impl<S: ChangeSource + ?Sized> Iterator for ChangeStream<'_, S> {
    type Item = DocResult<Document>;

    /// Blocks until the next event; `None` after the `invalidate`.
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.next_timeout(Duration::from_secs(3600)) {
                Ok(Some(ev)) => return Some(Ok(ev)),
                Ok(None) if self.ended => return None,
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
        }
    }
}

/// Refuses a token of another collection's stream: it must name the
/// collection now under `name`, or one this name held (its record at the
/// token's position says so: a collection since dropped or renamed, whose
/// stream resumes up to its `invalidate`), or, when nothing holds the
/// name now, a collection since dropped.
fn check_token_collection<R: SeamRead>(
    r: &R,
    log: Option<&LogTable<'_, R>>,
    name: &str,
    meta: Option<&CollectionMeta>,
    t: &ResumeToken,
) -> DocResult<()> {
    if meta.is_some_and(|m| m.id == t.collection) {
        return Ok(());
    }
    if let Some(log) = log {
        if let Some(g) = log.get(t.position.to_be_bytes().as_slice())? {
            let (coll, _, rec) = decode_record(t.position, g.value())?;
            if coll == t.collection && rec.get("ns") == Some(&Value::String(name.to_string())) {
                return Ok(());
            }
        }
    }
    let token_collection = match name_of_id(r, t.collection)? {
        Some(other) => format!("{other:?}"),
        None if meta.is_none() => return Ok(()),
        None => format!("a dropped collection (id {})", t.collection),
    };
    Err(DocumentError::ResumeTokenOtherCollection {
        token: t.to_hex(),
        collection: name.to_string(),
        token_collection,
    })
}

/// A record's collection id, operation and fields.
fn decode_record(pos: u64, bytes: &[u8]) -> DocResult<(u64, Op, Document)> {
    let Value::Object(d) = codec::decode_value(bytes)? else {
        return Err(corrupt(pos, "not an object"));
    };
    match d.get("v") {
        Some(Value::Int(RECORD_VERSION)) => {}
        other => {
            return Err(corrupt(
                pos,
                format!(
                    "record version {} is not one this build reads (1)",
                    other.map(|v| v.to_json().to_string()).unwrap_or_default()
                ),
            ))
        }
    }
    let coll = match d.get("coll") {
        Some(Value::Int(c)) if *c >= 0 => *c as u64,
        _ => return Err(corrupt(pos, "no collection id")),
    };
    let op = match d.get("op") {
        Some(Value::String(s)) => {
            Op::parse(s).ok_or_else(|| corrupt(pos, format!("unknown op {s:?}")))?
        }
        _ => return Err(corrupt(pos, "no op")),
    };
    Ok((coll, op, d))
}

impl<'db, T: serde::Serialize + serde::de::DeserializeOwned> Collection<'db, T> {
    /// A change stream over this collection from now, its events passed
    /// through `pipeline` (`$match`, `$project`, `$addFields`/`$set`,
    /// `$unset`, `$replaceRoot`/`$replaceWith`; `[]` for none). The
    /// collection must have its change stream turned on
    /// ([`Collection::enable_change_stream`]), else
    /// [`DocumentError::ChangeStreamNotEnabled`].
    ///
    /// ```
    /// use cairndb::document::Document;
    /// use serde_json::json;
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("w.cairn"))?;
    /// let orders = db.collection::<Document>("orders");
    /// orders.enable_change_stream()?;
    /// let mut stream = orders.watch(json!([{"$match": {"operationType": "insert"}}]))?;
    /// orders.insert(&Document::new().with("_id", 1).with("total", 5))?;
    /// let ev = stream.try_next()?.unwrap();
    /// assert_eq!(ev.get_path("fullDocument.total"), Some(&5.into()));
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn watch(&self, pipeline: impl IntoPipeline) -> DocResult<ChangeStream<'db>> {
        self.watch_with(pipeline, ChangeStreamOptions::default())
    }

    /// [`Collection::watch`] with options: resume after a token, start
    /// after one, or have updates carry the document.
    pub fn watch_with(
        &self,
        pipeline: impl IntoPipeline,
        opts: ChangeStreamOptions,
    ) -> DocResult<ChangeStream<'db>> {
        let p = pipeline.into_pipeline()?;
        ChangeStream::open(self.database(), self.name(), Some(p), opts)
    }
}

/// Sets the change log's retention in write transaction `txn` of any
/// backend of the storage seam (see [`Database::set_change_log_retention`]).
pub fn set_change_log_retention_in<W: SeamWrite + SeamRead>(
    txn: &W,
    max_entries: u64,
) -> DocResult<()> {
    if max_entries == 0 {
        return Err(DocumentError::Custom(
            "the change log's retention must be at least 1 record".into(),
        ));
    }
    let max = i64::try_from(max_entries).map_err(|_| {
        DocumentError::Custom(format!(
            "the change log's retention must be at most {}, not {max_entries}",
            i64::MAX
        ))
    })?;
    // A valid counter kept with the log stays valid: this commit writes
    // the log, so it sets the counter again (read before the write).
    let counted = SeamWrite::table_counter(txn, LOG)?;
    let mut w = Writer::whole_txn(txn);
    let mut bytes = Vec::new();
    codec::encode_value(
        &Value::Object(Document::new().with("max_entries", max)),
        &mut bytes,
    )?;
    w.op(|w| {
        w.put_raw(LOG, SETTINGS_KEY, Some(&bytes))?;
        match counted {
            Some(last) => w.set_counter(LOG, last, last),
            None => Ok(()),
        }
    })
}

/// The change log's retention in records, in snapshot `r`.
pub fn change_log_retention_in<R: SeamRead>(r: &R) -> DocResult<u64> {
    match open_log(r)? {
        Some(t) => max_entries(&t),
        None => Ok(DEFAULT_CHANGE_LOG_ENTRIES),
    }
}

/// The positions the change log holds in snapshot `r`, oldest and newest
/// (`None`: empty).
pub fn change_log_bounds_in<R: SeamRead>(r: &R) -> DocResult<Option<(u64, u64)>> {
    let Some(t) = open_log(r)? else {
        return Ok(None);
    };
    let first = match t.range(FIRST_KEY.as_slice()..)?.next() {
        Some(item) => position_of(item?.0.value())?,
        None => return Ok(None),
    };
    Ok(Some((first, last_position_in(r, &t)?)))
}

/// Whether collection `name`'s writes are recorded for change streams, in
/// snapshot `r`.
pub fn change_stream_enabled_in<R: SeamRead>(r: &R, name: &str) -> DocResult<bool> {
    Ok(meta_in(r, name)?.is_some_and(|m| m.change_stream))
}

impl Database {
    /// Sets the change log's retention: the writer keeps the newest
    /// `max_entries` records (at least 1) of every watched collection
    /// together, as MongoDB's oplog size bounds all of them. A stream that
    /// falls further behind gets [`DocumentError::ChangeStreamHistoryLost`].
    pub fn set_change_log_retention(&self, max_entries: u64) -> DocResult<()> {
        let txn = self.begin_write()?;
        set_change_log_retention_in(&txn, max_entries)?;
        txn.commit()?;
        Ok(())
    }

    /// The change log's retention in records.
    pub fn change_log_retention(&self) -> DocResult<u64> {
        change_log_retention_in(&self.begin_read()?)
    }

    /// The positions the change log holds, oldest and newest (`None`:
    /// empty).
    pub fn change_log_bounds(&self) -> DocResult<Option<(u64, u64)>> {
        change_log_bounds_in(&self.begin_read()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip_and_bad_ones_are_typed() {
        let t = ResumeToken {
            position: 0x0102,
            collection: 7,
            invalidate: true,
        };
        assert_eq!(ResumeToken::parse(&t.to_hex()).unwrap(), t);
        let json = t.to_value().to_json().to_string();
        assert_eq!(ResumeToken::parse(&json).unwrap(), t);
        for bad in ["", "zz", &"0".repeat(33), &format!("{}02", "0".repeat(32))] {
            assert!(matches!(
                ResumeToken::parse(bad),
                Err(DocumentError::InvalidResumeToken { .. })
            ));
        }
    }

    #[test]
    fn update_description_names_dotted_paths() {
        let old = Value::from_json(
            serde_json::json!({"_id": 1, "a": {"b": 1, "c": 2}, "x": [1], "gone": 0}),
        )
        .unwrap();
        let new = Value::from_json(
            serde_json::json!({"_id": 1, "a": {"b": 5, "c": 2}, "x": [1, 2], "n": true}),
        )
        .unwrap();
        let d = update_description(&old, &new).into();
        let d: Value = d;
        assert_eq!(
            d.to_json(),
            serde_json::json!({"updatedFields": {"a.b": 5, "x": [1, 2], "n": true}, "removedFields": ["gone"], "truncatedArrays": []})
        );
    }
}
