//! `Database`, transactions, snapshots and key-value tables.

use std::collections::VecDeque;
use std::ops::Bound as Edge;
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::thread::ThreadId;

use cairndb::{
    Builder, Database as RsDatabase, Durability, ReadTransaction, ReadableTable, Value as KvValue,
    WriteTransaction,
};
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyInt, PyList, PyString, PyType};

use crate::convert::obj;
use crate::errors::{
    any_err, ClosedError, InvalidArgumentError, ReadOnlyError, TableTypeError, TransactionError,
};

/// Locks a mutex, recovering the data if a thread panicked while holding it
/// (every critical section here leaves the data consistent).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A failure inside engine work done without the GIL, turned into a Python
/// exception once the GIL is held again.
pub enum Fail {
    /// An engine error.
    Engine(cairndb::Error),
    /// A `TransactionError` with this message.
    Transaction(&'static str),
    /// A `ClosedError` with this message.
    Closed(&'static str),
    /// A `TableTypeError` with this message.
    Types(String),
}

impl Fail {
    /// The Python exception.
    pub fn into_py(self) -> PyErr {
        match self {
            Fail::Engine(e) => any_err(e),
            Fail::Transaction(m) => TransactionError::new_err(m),
            Fail::Closed(m) => ClosedError::new_err(m),
            Fail::Types(m) => TableTypeError::new_err(m),
        }
    }
}

impl<E: Into<cairndb::Error>> From<E> for Fail {
    fn from(e: E) -> Self {
        Fail::Engine(e.into())
    }
}

/// Result of engine work done without the GIL.
pub type FResult<T> = Result<T, Fail>;

/// What every object of one open database shares: the handle (gone once
/// closed), the default durability, and which thread holds the write
/// transaction (so that the same thread asking for a second one gets an
/// error instead of waiting for itself forever).
pub struct DbShared {
    db: RwLock<Option<Arc<RsDatabase>>>,
    /// The durability of commits made through this handle.
    pub durability: Durability,
    /// The path it was opened with.
    pub path: String,
    writer_thread: Mutex<Option<ThreadId>>,
}

impl DbShared {
    /// The open handle, or `ClosedError`.
    pub fn get(&self) -> PyResult<Arc<RsDatabase>> {
        self.db
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| ClosedError::new_err("the database is closed"))
    }

    /// `TransactionError` if this thread holds the open write transaction:
    /// a write outside it would wait for it forever.
    pub fn check_not_writing(&self) -> PyResult<()> {
        if *lock(&self.writer_thread) == Some(std::thread::current().id()) {
            return Err(TransactionError::new_err(
                "this thread has an open transaction: write through it (tx.table(...), \
                 tx.collection(...), tx.append(...)) or end it first; another write would \
                 wait for it forever",
            ));
        }
        Ok(())
    }

    /// The handle for a write: open, and no transaction of this thread's.
    pub fn for_write(&self) -> PyResult<Arc<RsDatabase>> {
        self.check_not_writing()?;
        self.get()
    }

    fn set_writer(&self, t: Option<ThreadId>) {
        *lock(&self.writer_thread) = t;
    }
}

/// Runs `f` in its own write transaction committed with durability `d`
/// (the call's `durability=`, else the handle's), without the GIL.
pub fn autocommit_with<R: Send>(
    py: Python<'_>,
    shared: &DbShared,
    d: Durability,
    f: impl FnOnce(&WriteTransaction) -> FResult<R> + Send,
) -> PyResult<R> {
    let db = shared.for_write()?;
    py.allow_threads(move || {
        let t = db.begin_write()?;
        t.set_durability(d);
        let r = f(&t)?;
        t.commit()?;
        Ok(r)
    })
    .map_err(Fail::into_py)
}

/// Runs `f` on a fresh read snapshot, without the GIL.
pub fn read_op<R: Send>(
    py: Python<'_>,
    shared: &DbShared,
    f: impl FnOnce(&ReadTransaction) -> FResult<R> + Send,
) -> PyResult<R> {
    let db = shared.get()?;
    py.allow_threads(move || {
        let r = db.begin_read()?;
        f(&r)
    })
    .map_err(Fail::into_py)
}

fn parse_durability(s: &str) -> PyResult<Durability> {
    match s {
        "immediate" => Ok(Durability::Immediate),
        "none" => Ok(Durability::None),
        _ => Err(PyValueError::new_err(format!(
            "durability must be \"immediate\" or \"none\", not {s:?}"
        ))),
    }
}

/// A call's `durability=` argument: "immediate", "none", or None (then
/// `default`, the handle's).
pub fn durability_arg(arg: Option<&str>, default: Durability) -> PyResult<Durability> {
    arg.map_or(Ok(default), parse_durability)
}

/// The Python name of a durability.
pub fn durability_name(d: Durability) -> &'static str {
    match d {
        Durability::None => "none",
        _ => "immediate",
    }
}

/// `InvalidArgumentError` for a `durability=` given to a write inside a
/// transaction (whose commit has one durability, given when it began).
fn no_durability_in_txn(arg: Option<&str>) -> PyResult<()> {
    match arg {
        Some(_) => Err(InvalidArgumentError::new_err(
            "a write inside a transaction commits with the transaction: give durability to \
             db.transaction(durability=...)",
        )),
        None => Ok(()),
    }
}

/// Where a read runs: a fresh snapshot of the latest commit (one per
/// call or cursor), or an open `Snapshot`'s.
#[derive(Clone)]
pub enum Reads {
    /// A fresh snapshot of the database.
    Fresh(Arc<DbShared>),
    /// The snapshot of a `with db.snapshot() as s:` block.
    Snap(Arc<SnapInner>),
}

/// What a read starts from, taken with the GIL held (the database handle or
/// the snapshot; a fresh snapshot itself is begun without the GIL).
pub enum ReadStart {
    Db(Arc<RsDatabase>),
    Txn(Arc<ReadTransaction>),
}

impl Reads {
    /// The handle or snapshot to read from (`ClosedError` if closed).
    pub fn start(&self) -> PyResult<ReadStart> {
        Ok(match self {
            Reads::Fresh(s) => ReadStart::Db(s.get()?),
            Reads::Snap(s) => ReadStart::Txn(s.get()?),
        })
    }
}

impl ReadStart {
    /// The snapshot: the open one, or a fresh one begun now (call without
    /// the GIL).
    pub fn snapshot(self) -> FResult<Arc<ReadTransaction>> {
        Ok(match self {
            ReadStart::Db(db) => Arc::new(db.begin_read()?),
            ReadStart::Txn(r) => r,
        })
    }
}

/// Runs `f` on the snapshot `reads` names, without the GIL.
pub fn read_in<R: Send>(
    py: Python<'_>,
    reads: &Reads,
    f: impl FnOnce(&ReadTransaction) -> FResult<R> + Send,
) -> PyResult<R> {
    let start = reads.start()?;
    py.allow_threads(move || {
        let r = start.snapshot()?;
        f(&r)
    })
    .map_err(Fail::into_py)
}

// ---------------------------------------------------------------------------
// Key and value kinds of tables

/// The Python-facing kind of a table's keys or values.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// `bytes` (stored as `&[u8]`); `str` input is stored as its UTF-8 bytes.
    Bytes,
    /// `str` (stored as `&str`).
    Str,
    /// `int`, 64-bit signed (stored as `i64`, ordered numerically).
    Int,
}

impl Kind {
    fn type_name(self) -> String {
        match self {
            Kind::Bytes => <&[u8] as KvValue>::type_name(),
            Kind::Str => <&str as KvValue>::type_name(),
            Kind::Int => <i64 as KvValue>::type_name(),
        }
    }

    fn from_type_name(s: &str) -> Option<Kind> {
        [Kind::Bytes, Kind::Str, Kind::Int]
            .into_iter()
            .find(|k| k.type_name() == s)
    }

    fn py_name(self) -> &'static str {
        match self {
            Kind::Bytes => "bytes",
            Kind::Str => "str",
            Kind::Int => "int",
        }
    }

    /// Reads `bytes`, `str`, `int` (the types or their names).
    fn parse(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Kind>> {
        let Some(v) = v else { return Ok(None) };
        if v.is_none() {
            return Ok(None);
        }
        let name = if let Ok(t) = v.downcast::<PyType>() {
            t.name()?.to_string()
        } else if let Ok(s) = v.downcast::<PyString>() {
            s.to_cow()?.to_string()
        } else {
            String::new()
        };
        match name.as_str() {
            "bytes" => Ok(Some(Kind::Bytes)),
            "str" => Ok(Some(Kind::Str)),
            "int" => Ok(Some(Kind::Int)),
            _ => Err(PyTypeError::new_err(
                "a table's key_type and value_type are bytes, str or int",
            )),
        }
    }

    /// The stored bytes of a Python key or value of this kind.
    fn encode(self, v: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
        let wrong = || {
            PyTypeError::new_err(format!(
                "expected {} for this table, got {}",
                match self {
                    Kind::Bytes => "bytes (or str)",
                    Kind::Str => "str",
                    Kind::Int => "int",
                },
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        };
        match self {
            Kind::Bytes => {
                if let Ok(b) = v.downcast::<PyBytes>() {
                    Ok(b.as_bytes().to_vec())
                } else if let Ok(b) = v.downcast::<PyByteArray>() {
                    Ok(b.to_vec())
                } else if let Ok(s) = v.downcast::<PyString>() {
                    Ok(s.to_cow()?.as_bytes().to_vec())
                } else {
                    Err(wrong())
                }
            }
            Kind::Str => match v.downcast::<PyString>() {
                Ok(s) => Ok(s.to_cow()?.as_bytes().to_vec()),
                Err(_) => Err(wrong()),
            },
            Kind::Int => {
                if !v.is_instance_of::<PyInt>() || v.is_instance_of::<pyo3::types::PyBool>() {
                    return Err(wrong());
                }
                let i: i64 = v.extract().map_err(|_| {
                    pyo3::exceptions::PyOverflowError::new_err(
                        "integer keys and values must fit in 64 bits (-2**63 .. 2**63-1)",
                    )
                })?;
                Ok(<i64 as KvValue>::as_bytes(&i).to_vec())
            }
        }
    }

    /// The Python object for stored bytes of this kind.
    fn decode(self, py: Python<'_>, b: &[u8]) -> PyResult<PyObject> {
        match self {
            Kind::Bytes => Ok(PyBytes::new(py, b).into_any().unbind()),
            Kind::Str => match std::str::from_utf8(b) {
                Ok(s) => Ok(obj(py, s)),
                Err(_) => Err(TableTypeError::new_err("stored bytes are not valid UTF-8")),
            },
            Kind::Int => {
                if !<i64 as KvValue>::validate(b) {
                    return Err(TableTypeError::new_err("stored bytes are not an i64"));
                }
                Ok(obj(py, <i64 as KvValue>::from_bytes(b)))
            }
        }
    }
}

/// A key-value table name (not one of the layers' own `$` tables).
fn check_table_name(name: &str) -> PyResult<()> {
    cairndb::limits::check_table_name(name)
        .map_err(|e| InvalidArgumentError::new_err(e.to_string()))
}

/// Checks a table's stored types against the kinds asked for.
fn check_types(name: &str, stored: Option<(String, String)>, k: Kind, v: Kind) -> FResult<()> {
    match stored {
        Some((sk, sv)) if sk != k.type_name() || sv != v.type_name() => Err(Fail::Types(format!(
            "table {name:?} holds {sk}/{sv} but was opened as {}/{} ({}/{})",
            k.type_name(),
            v.type_name(),
            k.py_name(),
            v.py_name()
        ))),
        _ => Ok(()),
    }
}

/// The kinds of table `name`: those asked for, checked against the stored
/// ones, or the stored ones, or bytes/bytes for a new table.
fn resolve_kinds(
    name: &str,
    stored: Option<(String, String)>,
    key: Option<Kind>,
    value: Option<Kind>,
) -> FResult<(Kind, Kind)> {
    let from_stored = match &stored {
        Some((sk, sv)) => match (Kind::from_type_name(sk), Kind::from_type_name(sv)) {
            (Some(a), Some(b)) => Some((a, b)),
            _ => {
                return Err(Fail::Types(format!(
                    "table {name:?} holds {sk}/{sv}, which the Python API cannot read \
                     (it reads &[u8], &str and i64 keys and values)"
                )))
            }
        },
        None => None,
    };
    let k = key.or(from_stored.map(|s| s.0)).unwrap_or(Kind::Bytes);
    let v = value.or(from_stored.map(|s| s.1)).unwrap_or(Kind::Bytes);
    check_types(name, stored, k, v)?;
    Ok((k, v))
}

// ---------------------------------------------------------------------------
// Raw table operations

type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

fn as_ref_bound(b: &Edge<Vec<u8>>) -> Edge<&[u8]> {
    match b {
        Edge::Included(k) => Edge::Included(k.as_slice()),
        Edge::Excluded(k) => Edge::Excluded(k.as_slice()),
        Edge::Unbounded => Edge::Unbounded,
    }
}

/// Whether the range `lo..hi` is empty by construction (start past end).
fn empty_bounds(lo: &Edge<Vec<u8>>, hi: &Edge<Vec<u8>>) -> bool {
    match (lo, hi) {
        (Edge::Included(a), Edge::Included(b)) => a > b,
        (Edge::Included(a) | Edge::Excluded(a), Edge::Excluded(b))
        | (Edge::Excluded(a), Edge::Included(b)) => a >= b,
        _ => false,
    }
}

/// One raw entry of an untyped table range.
type RawEntry<'a> = Result<
    (
        cairndb::AccessGuard<'a, &'static [u8]>,
        cairndb::AccessGuard<'a, &'static [u8]>,
    ),
    cairndb::CoreError,
>;

fn take_batch<'a, I>(it: I, reverse: bool, n: usize) -> FResult<Pairs>
where
    I: DoubleEndedIterator<Item = RawEntry<'a>>,
{
    let mut out = Vec::new();
    let mut push = |item: RawEntry<'a>| -> FResult<()> {
        let (k, v) = item?;
        out.push((k.value().to_vec(), v.value().to_vec()));
        Ok(())
    };
    if reverse {
        for item in it.rev().take(n) {
            push(item)?;
        }
    } else {
        for item in it.take(n) {
            push(item)?;
        }
    }
    Ok(out)
}

/// Where a table's operations run.
#[derive(Clone)]
pub enum Scope {
    /// Each call in its own transaction (reads on a fresh snapshot).
    Auto,
    /// Inside an open write transaction.
    Txn(Arc<TxInner>),
    /// On a read snapshot.
    Snapshot(Arc<SnapInner>),
}

/// A table's identity and kinds.
#[derive(Clone)]
struct TableSpec {
    name: String,
    key: Kind,
    value: Kind,
}

/// The key-value table operations on any table that can be read (a read
/// snapshot's or the write transaction's).
fn table_get<T>(t: &T, key: &[u8]) -> FResult<Option<Vec<u8>>>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    Ok(t.get(key)?.map(|g| g.value().to_vec()))
}

fn table_batch<T>(
    t: &T,
    lo: &Edge<Vec<u8>>,
    hi: &Edge<Vec<u8>>,
    reverse: bool,
    n: usize,
) -> FResult<Pairs>
where
    T: ReadableTable<&'static [u8], &'static [u8]>,
{
    let it = t.range::<&[u8]>((as_ref_bound(lo), as_ref_bound(hi)))?;
    take_batch(it, reverse, n)
}

impl TableSpec {
    /// Whether the table exists (checking its stored types against this
    /// handle's kinds if it does).
    fn exists(&self, stored: Option<(String, String)>) -> FResult<bool> {
        if stored.is_none() {
            return Ok(false);
        }
        check_types(&self.name, stored, self.key, self.value)?;
        Ok(true)
    }

    fn read_get(&self, r: &ReadTransaction, key: &[u8]) -> FResult<Option<Vec<u8>>> {
        if !self.exists(r.table_types(&self.name)?)? {
            return Ok(None);
        }
        table_get(&r.open_untyped_table(&self.name)?, key)
    }

    fn read_len(&self, r: &ReadTransaction) -> FResult<u64> {
        if !self.exists(r.table_types(&self.name)?)? {
            return Ok(0);
        }
        Ok(r.open_untyped_table(&self.name)?.len())
    }

    fn read_batch(
        &self,
        r: &ReadTransaction,
        lo: &Edge<Vec<u8>>,
        hi: &Edge<Vec<u8>>,
        reverse: bool,
        n: usize,
    ) -> FResult<Pairs> {
        if empty_bounds(lo, hi) || !self.exists(r.table_types(&self.name)?)? {
            return Ok(Vec::new());
        }
        table_batch(&r.open_untyped_table(&self.name)?, lo, hi, reverse, n)
    }

    fn txn_get(&self, w: &WriteTransaction, key: &[u8]) -> FResult<Option<Vec<u8>>> {
        if !self.exists(w.table_types(&self.name)?)? {
            return Ok(None);
        }
        table_get(&w.open_untyped_table(&self.name)?, key)
    }

    fn txn_len(&self, w: &WriteTransaction) -> FResult<u64> {
        if !self.exists(w.table_types(&self.name)?)? {
            return Ok(0);
        }
        Ok(w.open_untyped_table(&self.name)?.len())
    }

    fn txn_batch(
        &self,
        w: &WriteTransaction,
        lo: &Edge<Vec<u8>>,
        hi: &Edge<Vec<u8>>,
        reverse: bool,
        n: usize,
    ) -> FResult<Pairs> {
        if empty_bounds(lo, hi) || !self.exists(w.table_types(&self.name)?)? {
            return Ok(Vec::new());
        }
        table_batch(&w.open_untyped_table(&self.name)?, lo, hi, reverse, n)
    }

    fn put(&self, w: &WriteTransaction, key: &[u8], value: &[u8]) -> FResult<()> {
        let mut t = w.open_untyped_table_with_types(
            &self.name,
            &self.key.type_name(),
            &self.value.type_name(),
        )?;
        t.insert(key, value)?;
        Ok(())
    }

    fn delete(&self, w: &WriteTransaction, key: &[u8]) -> FResult<bool> {
        let stored = w.table_types(&self.name)?;
        if stored.is_none() {
            return Ok(false);
        }
        check_types(&self.name, stored, self.key, self.value)?;
        let mut t = w.open_untyped_table(&self.name)?;
        let removed = t.remove(key)?.is_some();
        Ok(removed)
    }
}

// ---------------------------------------------------------------------------
// Transactions and snapshots

/// The state of an open write transaction, shared by the `Transaction`
/// object and the tables and collections opened in it.
pub struct TxInner {
    shared: Arc<DbShared>,
    txn: Mutex<Option<WriteTransaction>>,
}

impl TxInner {
    /// Runs `f` on the open transaction (without the GIL: call inside
    /// `allow_threads`).
    pub fn with<R>(&self, f: impl FnOnce(&WriteTransaction) -> FResult<R>) -> FResult<R> {
        let g = lock(&self.txn);
        match g.as_ref() {
            Some(t) => f(t),
            None => Err(Fail::Transaction(
                "the transaction has ended (committed or aborted)",
            )),
        }
    }

    fn take(&self) -> Option<WriteTransaction> {
        let t = lock(&self.txn).take();
        if t.is_some() {
            self.shared.set_writer(None);
        }
        t
    }
}

impl Drop for TxInner {
    fn drop(&mut self) {
        // An unfinished transaction aborts (dropping it does).
        let _ = self.take();
    }
}

/// Runs `f` in the transaction without the GIL.
pub fn in_txn<R: Send>(
    py: Python<'_>,
    tx: &TxInner,
    f: impl FnOnce(&WriteTransaction) -> FResult<R> + Send,
) -> PyResult<R> {
    py.allow_threads(|| tx.with(f)).map_err(Fail::into_py)
}

/// A read snapshot shared by a `Snapshot` object and its tables.
pub struct SnapInner {
    txn: Mutex<Option<Arc<ReadTransaction>>>,
}

impl SnapInner {
    fn get(&self) -> PyResult<Arc<ReadTransaction>> {
        lock(&self.txn)
            .clone()
            .ok_or_else(|| ClosedError::new_err("the snapshot is closed"))
    }
}

/// A write transaction: `with db.transaction() as tx:` commits when the
/// block ends normally and aborts (discards every change) when it raises.
/// Only one is open at a time per database; another thread asking for one
/// waits (without holding the GIL). Tables and collections opened with
/// `tx.table(...)` / `tx.collection(...)` read and write inside it.
#[pyclass(module = "cairndb", frozen)]
pub struct Transaction {
    inner: Arc<TxInner>,
}

#[pymethods]
impl Transaction {
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        if exc_type.is_some_and(|e| !e.is_none()) {
            self.abort(py);
        } else if lock(&self.inner.txn).is_some() {
            self.commit(py)?;
        }
        Ok(false)
    }

    /// Commits every change; returns the commit's id. With durability
    /// "immediate" (the default) the commit is on disk when this returns.
    fn commit(&self, py: Python<'_>) -> PyResult<u64> {
        let t = self.inner.take().ok_or_else(|| {
            TransactionError::new_err("the transaction has ended (committed or aborted)")
        })?;
        py.allow_threads(move || t.commit())
            .map(|id| id.0)
            .map_err(any_err)
    }

    /// Discards every change (does nothing if the transaction has ended).
    fn abort(&self, py: Python<'_>) {
        if let Some(t) = self.inner.take() {
            py.allow_threads(move || t.abort());
        }
    }

    /// Whether the transaction is still open.
    #[getter]
    fn active(&self) -> bool {
        lock(&self.inner.txn).is_some()
    }

    /// The key-value table `name` inside this transaction (created on the
    /// first write). See `Database.table` for `key_type` / `value_type`.
    #[pyo3(signature = (name, key_type=None, value_type=None))]
    fn table(
        &self,
        py: Python<'_>,
        name: String,
        key_type: Option<&Bound<'_, PyAny>>,
        value_type: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Table> {
        let (k, v) = (Kind::parse(key_type)?, Kind::parse(value_type)?);
        check_table_name(&name)?;
        let n = name.clone();
        let (key, value) = in_txn(py, &self.inner, move |w| {
            resolve_kinds(&n, w.table_types(&n)?, k, v)
        })?;
        Ok(Table {
            shared: self.inner.shared.clone(),
            spec: TableSpec { name, key, value },
            scope: Scope::Txn(self.inner.clone()),
            durability: self.inner.shared.durability,
        })
    }

    /// The collection `name` inside this transaction: its reads see this
    /// transaction's writes.
    fn collection(&self, name: String) -> crate::collection::TxCollection {
        crate::collection::TxCollection::new(self.inner.clone(), name)
    }

    /// Appends events to a stream inside this transaction; see
    /// `Database.append`.
    #[pyo3(signature = (stream, events, expected_version=None))]
    fn append(
        &self,
        py: Python<'_>,
        stream: String,
        events: &Bound<'_, PyAny>,
        expected_version: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::events::AppendResult> {
        crate::events::append_in_txn(py, &self.inner, stream, events, expected_version)
    }

    /// Sets how much of `stream` reads show, in this transaction:
    /// `max_count` (only the newest that many events) and
    /// `truncate_before` (hide versions below it); None clears a setting.
    /// A stream never written gets its settings ahead of its first event.
    #[pyo3(signature = (stream, *, max_count=None, truncate_before=None))]
    fn set_stream_metadata(
        &self,
        py: Python<'_>,
        stream: String,
        max_count: Option<u64>,
        truncate_before: Option<u64>,
    ) -> PyResult<()> {
        crate::events::set_stream_metadata_in_txn(
            py,
            &self.inner,
            stream,
            max_count,
            truncate_before,
        )
    }

    /// Saves `state` (bytes or str) as the snapshot of `stream` at
    /// `version` (an existing version of the live stream), in this
    /// transaction.
    fn save_snapshot(
        &self,
        py: Python<'_>,
        stream: String,
        version: u64,
        state: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        crate::events::save_snapshot_in_txn(py, &self.inner, stream, version, state)
    }
}

/// A consistent read snapshot: `with db.snapshot() as s:`. Everything read
/// through it — `s.table(...)`, `s.collection(...)` (find, count_documents,
/// aggregate, distinct, ...), `s.read(...)`, `s.read_all(...)` and the other
/// event reads — sees the database as of the moment it began, whatever
/// commits happen meanwhile (MongoDB's `readConcern: "snapshot"`). It is
/// read-only, and can be shared between threads.
#[pyclass(module = "cairndb", frozen)]
pub struct Snapshot {
    shared: Arc<DbShared>,
    inner: Arc<SnapInner>,
}

#[pymethods]
impl Snapshot {
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
    }

    /// Ends the snapshot (iterators already made from it keep it alive
    /// until they are exhausted or dropped).
    fn close(&self) {
        lock(&self.inner.txn).take();
    }

    /// The id of the commit this snapshot shows.
    #[getter]
    fn txn_id(&self) -> PyResult<u64> {
        Ok(self.inner.get()?.txn_id().0)
    }

    /// The table `name` as of this snapshot (read-only).
    #[pyo3(signature = (name, key_type=None, value_type=None))]
    fn table(
        &self,
        py: Python<'_>,
        name: String,
        key_type: Option<&Bound<'_, PyAny>>,
        value_type: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Table> {
        let (k, v) = (Kind::parse(key_type)?, Kind::parse(value_type)?);
        check_table_name(&name)?;
        let r = self.inner.get()?;
        let n = name.clone();
        let (key, value) = py
            .allow_threads(move || resolve_kinds(&n, r.table_types(&n)?, k, v))
            .map_err(Fail::into_py)?;
        Ok(Table {
            shared: self.shared.clone(),
            spec: TableSpec { name, key, value },
            scope: Scope::Snapshot(self.inner.clone()),
            durability: self.shared.durability,
        })
    }

    /// The names of the key-value tables in this snapshot.
    fn list_tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        read_in(py, &self.reads(), |r| {
            Ok(r.list_tables()?
                .into_iter()
                .filter(|n| !n.starts_with('$'))
                .collect())
        })
    }

    /// The names of every collection in this snapshot.
    fn list_collections(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        read_in(py, &self.reads(), |r| Ok(r.list_collections()?))
    }

    /// The collection `name` as of this snapshot, read-only: `find`,
    /// `find_one`, `count_documents`, `estimated_document_count`,
    /// `aggregate`, `distinct`, `list_indexes`, as `Collection`'s.
    fn collection(&self, name: String) -> crate::collection::SnapshotCollection {
        crate::collection::SnapshotCollection::new(self.reads(), name)
    }

    /// Reads up to `limit` events of `stream` as of this snapshot; see
    /// `Database.read`.
    #[pyo3(signature = (stream, from_version=None, *, backward=false, limit=None))]
    fn read(
        &self,
        py: Python<'_>,
        stream: String,
        from_version: Option<u64>,
        backward: bool,
        limit: Option<usize>,
    ) -> PyResult<Vec<crate::events::RecordedEvent>> {
        crate::events::read(py, &self.reads(), stream, from_version, backward, limit)
    }

    /// Reads up to `limit` events of the global log as of this snapshot;
    /// see `Database.read_all`.
    #[pyo3(signature = (from_position=None, *, backward=false, limit=None, event_types=None, stream_prefix=None))]
    fn read_all(
        &self,
        py: Python<'_>,
        from_position: Option<u64>,
        backward: bool,
        limit: Option<usize>,
        event_types: Option<Vec<String>>,
        stream_prefix: Option<String>,
    ) -> PyResult<Vec<crate::events::RecordedEvent>> {
        crate::events::read_all(
            py,
            &self.reads(),
            from_position,
            backward,
            limit,
            event_types,
            stream_prefix,
        )
    }

    /// The version of the stream's last event in this snapshot.
    fn stream_version(&self, py: Python<'_>, stream: String) -> PyResult<Option<u64>> {
        crate::events::stream_version(py, &self.reads(), stream)
    }

    /// Every stream whose name starts with `prefix` in this snapshot; see
    /// `Database.list_streams`.
    #[pyo3(signature = (prefix=String::new()))]
    fn list_streams(&self, py: Python<'_>, prefix: String) -> PyResult<Vec<PyObject>> {
        crate::events::list_streams(py, &self.reads(), prefix)
    }

    /// One stream's state and settings in this snapshot, or None.
    fn stream_info(&self, py: Python<'_>, stream: String) -> PyResult<Option<PyObject>> {
        crate::events::stream_info(py, &self.reads(), stream)
    }

    /// The global position the next event committed after this snapshot
    /// gets.
    fn next_position(&self, py: Python<'_>) -> PyResult<u64> {
        crate::events::next_position(py, &self.reads())
    }

    /// Loads an aggregate as of this snapshot; see `Database.load`.
    #[pyo3(signature = (stream, version=None))]
    fn load(
        &self,
        py: Python<'_>,
        stream: String,
        version: Option<u64>,
    ) -> PyResult<crate::events::LoadedStream> {
        crate::events::load(py, &self.reads(), stream, version)
    }
}

impl Snapshot {
    fn reads(&self) -> Reads {
        Reads::Snap(self.inner.clone())
    }
}

// ---------------------------------------------------------------------------
// Tables

/// An ordered key-value table. Keys and values are `bytes` (the default for
/// a new table), `str` or `int` (64-bit signed), fixed per table when it is
/// created. Made by `db.table(name)` (each call its own transaction),
/// `tx.table(name)` (inside a transaction) or `snapshot.table(name)`
/// (read-only, as of the snapshot). Supports `t[key]`, `t[key] = value`,
/// `del t[key]`, `key in t`, `len(t)` and iteration over keys in order.
#[pyclass(module = "cairndb", frozen)]
pub struct Table {
    shared: Arc<DbShared>,
    spec: TableSpec,
    scope: Scope,
    /// The durability of this handle's writes outside a transaction.
    durability: Durability,
}

impl Table {
    fn get_raw(&self, py: Python<'_>, key: Vec<u8>) -> PyResult<Option<Vec<u8>>> {
        let spec = self.spec.clone();
        match &self.scope {
            Scope::Auto => read_op(py, &self.shared, move |r| spec.read_get(r, &key)),
            Scope::Snapshot(s) => {
                let r = s.get()?;
                py.allow_threads(move || spec.read_get(&r, &key))
                    .map_err(Fail::into_py)
            }
            Scope::Txn(t) => in_txn(py, t, move |w| spec.txn_get(w, &key)),
        }
    }

    /// Runs a write: its own commit (with `durability`, else the handle's),
    /// or in the transaction.
    fn write<R: Send>(
        &self,
        py: Python<'_>,
        durability: Option<&str>,
        f: impl FnOnce(&TableSpec, &WriteTransaction) -> FResult<R> + Send,
    ) -> PyResult<R> {
        let spec = &self.spec;
        match &self.scope {
            Scope::Auto => {
                let d = durability_arg(durability, self.durability)?;
                autocommit_with(py, &self.shared, d, move |w| f(spec, w))
            }
            Scope::Txn(t) => {
                no_durability_in_txn(durability)?;
                in_txn(py, t, move |w| f(spec, w))
            }
            Scope::Snapshot(_) => Err(ReadOnlyError::new_err("a snapshot's tables are read-only")),
        }
    }

    fn iter(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        reverse: bool,
        mode: IterMode,
    ) -> PyResult<RangeIter> {
        let enc = |b: Option<&Bound<'_, PyAny>>, incl: bool| -> PyResult<Edge<Vec<u8>>> {
            Ok(match b {
                Some(x) if !x.is_none() => {
                    let k = self.spec.key.encode(x)?;
                    if incl {
                        Edge::Included(k)
                    } else {
                        Edge::Excluded(k)
                    }
                }
                _ => Edge::Unbounded,
            })
        };
        let lo = enc(start, true)?;
        let hi = enc(end, false)?;
        let src = match &self.scope {
            Scope::Auto => {
                let db = self.shared.get()?;
                Source::Snap(Arc::new(db.begin_read().map_err(any_err)?))
            }
            Scope::Snapshot(s) => Source::Snap(s.get()?),
            Scope::Txn(t) => Source::Txn(t.clone()),
        };
        Ok(RangeIter {
            spec: self.spec.clone(),
            src,
            mode,
            state: Mutex::new(RangeState {
                lo,
                hi,
                reverse,
                buf: VecDeque::new(),
                done: false,
            }),
        })
    }
}

#[pymethods]
impl Table {
    /// The table's name.
    #[getter]
    fn name(&self) -> &str {
        &self.spec.name
    }

    /// The key type: "bytes", "str" or "int".
    #[getter]
    fn key_type(&self) -> &'static str {
        self.spec.key.py_name()
    }

    /// The value type: "bytes", "str" or "int".
    #[getter]
    fn value_type(&self) -> &'static str {
        self.spec.value.py_name()
    }

    /// The value stored under `key`, or `default`.
    #[pyo3(signature = (key, default=None))]
    fn get(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        default: Option<PyObject>,
    ) -> PyResult<PyObject> {
        let k = self.spec.key.encode(key)?;
        match self.get_raw(py, k)? {
            Some(v) => self.spec.value.decode(py, &v),
            None => Ok(default.unwrap_or_else(|| py.None())),
        }
    }

    /// The durability of this handle's writes: "immediate" or "none".
    #[getter(durability)]
    fn durability_name(&self) -> &'static str {
        durability_name(self.durability)
    }

    /// Stores `value` under `key` (replacing any value there).
    /// `durability` ("immediate" or "none") overrides the handle's for
    /// this write's commit (not allowed inside a transaction).
    #[pyo3(signature = (key, value, *, durability=None))]
    fn put(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let k = self.spec.key.encode(key)?;
        let v = self.spec.value.encode(value)?;
        self.write(py, durability, move |s, w| s.put(w, &k, &v))
    }

    /// Removes `key`; returns whether it was there. `durability` as for
    /// `put`.
    #[pyo3(signature = (key, *, durability=None))]
    fn delete(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<bool> {
        let k = self.spec.key.encode(key)?;
        self.write(py, durability, move |s, w| s.delete(w, &k))
    }

    /// The number of entries.
    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        let spec = self.spec.clone();
        let n = match &self.scope {
            Scope::Auto => read_op(py, &self.shared, move |r| spec.read_len(r))?,
            Scope::Snapshot(s) => {
                let r = s.get()?;
                py.allow_threads(move || spec.read_len(&r))
                    .map_err(Fail::into_py)?
            }
            Scope::Txn(t) => in_txn(py, t, move |w| spec.txn_len(w))?,
        };
        Ok(usize::try_from(n).unwrap_or(usize::MAX))
    }

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        let k = self.spec.key.encode(key)?;
        match self.get_raw(py, k)? {
            Some(v) => self.spec.value.decode(py, &v),
            None => Err(PyKeyError::new_err(key.clone().unbind())),
        }
    }

    fn __setitem__(
        &self,
        py: Python<'_>,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.put(py, key, value, None)
    }

    fn __delitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<()> {
        if self.delete(py, key, None)? {
            Ok(())
        } else {
            Err(PyKeyError::new_err(key.clone().unbind()))
        }
    }

    fn __contains__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<bool> {
        let k = self.spec.key.encode(key)?;
        Ok(self.get_raw(py, k)?.is_some())
    }

    /// Iterates over the keys in order, on one snapshot.
    fn __iter__(&self) -> PyResult<RangeIter> {
        self.iter(None, None, false, IterMode::Keys)
    }

    /// `(key, value)` pairs with `start <= key < end` (either bound may be
    /// None), in key order or `reverse`d. The iterator reads one snapshot,
    /// taken now (in a transaction: the transaction's own state), in
    /// batches.
    #[pyo3(signature = (start=None, end=None, reverse=false))]
    fn range(
        &self,
        start: Option<&Bound<'_, PyAny>>,
        end: Option<&Bound<'_, PyAny>>,
        reverse: bool,
    ) -> PyResult<RangeIter> {
        self.iter(start, end, reverse, IterMode::Items)
    }

    /// Every `(key, value)` pair in key order (`range()` without bounds).
    fn items(&self) -> PyResult<RangeIter> {
        self.iter(None, None, false, IterMode::Items)
    }

    /// Every key in order.
    fn keys(&self) -> PyResult<RangeIter> {
        self.iter(None, None, false, IterMode::Keys)
    }

    fn __repr__(&self) -> String {
        format!(
            "Table({:?}, key_type={}, value_type={})",
            self.spec.name,
            self.spec.key.py_name(),
            self.spec.value.py_name()
        )
    }
}

/// Where a range iterator reads.
enum Source {
    Snap(Arc<ReadTransaction>),
    Txn(Arc<TxInner>),
}

#[derive(Clone, Copy)]
enum IterMode {
    Keys,
    Items,
}

struct RangeState {
    lo: Edge<Vec<u8>>,
    hi: Edge<Vec<u8>>,
    reverse: bool,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    done: bool,
}

/// Entries read per batch by a range iterator.
const BATCH: usize = 256;

/// An iterator over a table range, reading one snapshot in batches.
#[pyclass(module = "cairndb", frozen)]
pub struct RangeIter {
    spec: TableSpec,
    src: Source,
    mode: IterMode,
    state: Mutex<RangeState>,
}

#[pymethods]
impl RangeIter {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        let next = py
            .allow_threads(|| -> FResult<Option<(Vec<u8>, Vec<u8>)>> {
                let mut st = lock(&self.state);
                if st.buf.is_empty() && !st.done {
                    let batch = match &self.src {
                        Source::Snap(r) => {
                            self.spec.read_batch(r, &st.lo, &st.hi, st.reverse, BATCH)?
                        }
                        Source::Txn(t) => {
                            t.with(|w| self.spec.txn_batch(w, &st.lo, &st.hi, st.reverse, BATCH))?
                        }
                    };
                    if batch.len() < BATCH {
                        st.done = true;
                    }
                    if let Some((k, _)) = batch.last() {
                        if st.reverse {
                            st.hi = Edge::Excluded(k.clone());
                        } else {
                            st.lo = Edge::Excluded(k.clone());
                        }
                    }
                    st.buf.extend(batch);
                }
                Ok(st.buf.pop_front())
            })
            .map_err(Fail::into_py)?;
        let Some((k, v)) = next else { return Ok(None) };
        let key = self.spec.key.decode(py, &k)?;
        Ok(Some(match self.mode {
            IterMode::Keys => key,
            IterMode::Items => {
                let value = self.spec.value.decode(py, &v)?;
                pyo3::types::PyTuple::new(py, [key, value])?
                    .into_any()
                    .unbind()
            }
        }))
    }
}

/// For `python -m cairndb.bench`: reads each of `keys` from the bytes-keyed
/// table `table` as `table.get` does (a fresh snapshot and a lookup each),
/// in a Rust loop without the GIL; returns the seconds taken. The
/// difference to the same reads from Python is the binding's cost.
#[pyfunction]
pub fn _rust_timed_gets(py: Python<'_>, table: &Table, keys: Vec<Vec<u8>>) -> PyResult<f64> {
    if !matches!(table.scope, Scope::Auto) || table.spec.key != Kind::Bytes {
        return Err(PyValueError::new_err(
            "_rust_timed_gets takes a bytes-keyed table from db.table(...)",
        ));
    }
    let db = table.shared.get()?;
    let spec = table.spec.clone();
    py.allow_threads(move || {
        let t0 = std::time::Instant::now();
        for k in &keys {
            let r = db.begin_read()?;
            std::hint::black_box(spec.read_get(&r, k)?);
        }
        Ok(t0.elapsed().as_secs_f64())
    })
    .map_err(Fail::into_py)
}

// ---------------------------------------------------------------------------
// Database

/// An open CairnDB database file. Use `cairndb.open(path)` or
/// `Database(path)`, ideally as a context manager (`with ... as db:`),
/// which closes it at the end. Every method can be called from any thread;
/// the GIL is released while the engine works.
///
/// Options: `create` (make the file if missing, default True),
/// `read_only`, `durability` ("immediate": every commit is on disk when it
/// returns, the default; "none": no device flush, so a crash may lose the
/// latest such commits, each whole, until the next durable commit or
/// `sync()`; every write method, `table()`, `collection()` and
/// `transaction()` also take `durability=`), `page_size`, `cache_size`,
/// `max_file_size`, `max_readers`.
#[pyclass(module = "cairndb", frozen)]
pub struct Database {
    pub(crate) shared: Arc<DbShared>,
}

#[pymethods]
impl Database {
    #[new]
    #[pyo3(signature = (path, *, create=true, read_only=false, durability="immediate", page_size=None, cache_size=None, max_file_size=None, max_readers=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: std::path::PathBuf,
        create: bool,
        read_only: bool,
        durability: &str,
        page_size: Option<usize>,
        cache_size: Option<usize>,
        max_file_size: Option<u64>,
        max_readers: Option<usize>,
    ) -> PyResult<Self> {
        let d = parse_durability(durability)?;
        let mut b = Builder::new();
        if let Some(n) = page_size {
            b.page_size(n);
        }
        if let Some(n) = cache_size {
            b.cache_size(n);
        }
        if let Some(n) = max_file_size {
            b.max_file_size(n);
        }
        if let Some(n) = max_readers {
            b.max_readers(n);
        }
        let p = path.clone();
        let db = py
            .allow_threads(move || {
                if read_only {
                    b.open_read_only(&p)
                } else if create {
                    b.create(&p)
                } else {
                    b.open(&p)
                }
            })
            .map_err(any_err)?;
        Ok(Database {
            shared: Arc::new(DbShared {
                db: RwLock::new(Some(Arc::new(db))),
                durability: d,
                path: path.display().to_string(),
                writer_thread: Mutex::new(None),
            }),
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    /// Syncs and closes the file, reporting errors that dropping it would
    /// hide. Closing twice does nothing. Objects made from this database
    /// raise `ClosedError` afterwards; a cursor or iterator still reading
    /// keeps the file open until it ends.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.check_not_writing()?;
        let db = self
            .shared
            .db
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        let Some(db) = db else { return Ok(()) };
        py.allow_threads(move || match Arc::try_unwrap(db) {
            Ok(db) => db.close(),
            // Another thread is inside a call: the file closes when it ends.
            Err(_) => Ok(()),
        })
        .map_err(any_err)
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.shared
            .db
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .is_none()
    }

    /// The path the database was opened with.
    #[getter]
    fn path(&self) -> &str {
        &self.shared.path
    }

    /// The default durability of this handle's commits.
    #[getter]
    fn durability(&self) -> &'static str {
        durability_name(self.shared.durability)
    }

    /// Begins the write transaction (waiting, without the GIL, while another
    /// thread has one open). Use it as `with db.transaction() as tx:`.
    /// `durability` overrides the handle's for this commit.
    #[pyo3(signature = (durability=None))]
    fn transaction(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<Transaction> {
        let d = durability_arg(durability, self.shared.durability)?;
        let db = self.shared.for_write()?;
        let txn = py
            .allow_threads(move || {
                let t = db.begin_write()?;
                t.set_durability(d);
                Ok::<_, cairndb::Error>(t)
            })
            .map_err(any_err)?;
        self.shared.set_writer(Some(std::thread::current().id()));
        Ok(Transaction {
            inner: Arc::new(TxInner {
                shared: self.shared.clone(),
                txn: Mutex::new(Some(txn)),
            }),
        })
    }

    /// A read snapshot of the latest commit: `with db.snapshot() as s:`.
    fn snapshot(&self, py: Python<'_>) -> PyResult<Snapshot> {
        let db = self.shared.get()?;
        let r = py.allow_threads(move || db.begin_read()).map_err(any_err)?;
        Ok(Snapshot {
            shared: self.shared.clone(),
            inner: Arc::new(SnapInner {
                txn: Mutex::new(Some(Arc::new(r))),
            }),
        })
    }

    /// The key-value table `name`; each call on it is its own transaction.
    /// `key_type` / `value_type` are `bytes`, `str` or `int` (the types or
    /// their names): a new table gets them (default bytes); an existing
    /// one must have them (`TableTypeError`), and without them its own
    /// types are used. `durability` ("immediate" or "none") overrides the
    /// database's for this handle's writes.
    #[pyo3(signature = (name, key_type=None, value_type=None, *, durability=None))]
    fn table(
        &self,
        py: Python<'_>,
        name: String,
        key_type: Option<&Bound<'_, PyAny>>,
        value_type: Option<&Bound<'_, PyAny>>,
        durability: Option<&str>,
    ) -> PyResult<Table> {
        let (k, v) = (Kind::parse(key_type)?, Kind::parse(value_type)?);
        let d = durability_arg(durability, self.shared.durability)?;
        check_table_name(&name)?;
        let n = name.clone();
        let (key, value) = read_op(py, &self.shared, move |r| {
            resolve_kinds(&n, r.table_types(&n)?, k, v)
        })?;
        Ok(Table {
            shared: self.shared.clone(),
            spec: TableSpec { name, key, value },
            scope: Scope::Auto,
            durability: d,
        })
    }

    /// The names of the key-value tables (not the collections' and event
    /// streams' own tables).
    fn list_tables(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        read_op(py, &self.shared, |r| {
            Ok(r.list_tables()?
                .into_iter()
                .filter(|n| !n.starts_with('$'))
                .collect())
        })
    }

    /// Deletes a key-value table; returns whether it existed.
    /// `durability` overrides the database's for this commit.
    #[pyo3(signature = (name, *, durability=None))]
    fn drop_table(&self, py: Python<'_>, name: String, durability: Option<&str>) -> PyResult<bool> {
        let d = durability_arg(durability, self.shared.durability)?;
        check_table_name(&name)?;
        autocommit_with(py, &self.shared, d, move |w| Ok(w.delete_table(&name)?))
    }

    /// The document collection `name` (created by its first write).
    /// `durability` ("immediate" or "none") overrides the database's for
    /// every write made through this handle (as pymongo's
    /// `get_collection(name, write_concern=...)`).
    #[pyo3(signature = (name, *, durability=None))]
    fn collection(
        &self,
        name: String,
        durability: Option<&str>,
    ) -> PyResult<crate::collection::Collection> {
        let d = durability_arg(durability, self.shared.durability)?;
        Ok(crate::collection::Collection::new(self.shared.clone(), name).with_durability(d))
    }

    /// The names of every collection.
    fn list_collections(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        let db = self.shared.get()?;
        py.allow_threads(move || db.list_collections())
            .map_err(crate::errors::doc_err)
    }

    /// Makes every commit so far durable (one device flush).
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        let db = self.shared.for_write()?;
        py.allow_threads(move || db.sync()).map_err(any_err)
    }

    /// File and table statistics as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let db = self.shared.for_write()?;
        let s = py.allow_threads(move || db.stats()).map_err(any_err)?;
        let d = PyDict::new(py);
        d.set_item("txn", s.txn)?;
        d.set_item("page_size", s.page_size)?;
        d.set_item("file_bytes", s.file_bytes)?;
        d.set_item("page_count", s.page_count)?;
        d.set_item("leaf_pages", s.leaf_pages)?;
        d.set_item("branch_pages", s.branch_pages)?;
        d.set_item("overflow_pages", s.overflow_pages)?;
        d.set_item("free_pages", s.free_pages)?;
        d.set_item("pending_pages", s.pending_pages)?;
        d.set_item("log_pages", s.log_pages)?;
        d.set_item("overlay_entries", s.overlay_entries)?;
        d.set_item("fill_factor", s.fill_factor)?;
        d.set_item("max_depth", s.max_depth)?;
        let tables = PyDict::new(py);
        for t in &s.tables {
            let td = PyDict::new(py);
            td.set_item("entries", t.tree.entries)?;
            td.set_item("depth", t.tree.depth)?;
            td.set_item("leaf_pages", t.tree.leaf_pages)?;
            td.set_item("branch_pages", t.tree.branch_pages)?;
            td.set_item("overflow_pages", t.tree.overflow_pages)?;
            td.set_item("used_bytes", t.tree.used_bytes)?;
            tables.set_item(&t.name, td)?;
        }
        d.set_item("tables", tables)?;
        Ok(d)
    }

    /// Counters since this handle opened, without walking anything:
    /// `commits`, `syncs` (device flushes; a commit with durability "none"
    /// makes none), `cache_hits`, `cache_misses`, `cached_pages`, and the
    /// gauges `pinned_pages` and `pinned_bytes` (pages open read
    /// transactions keep alive, and the memory they and their lookup tables
    /// hold).
    fn io_counters<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = self.shared.get()?.io_counters();
        let d = PyDict::new(py);
        d.set_item("commits", c.commits)?;
        d.set_item("syncs", c.syncs)?;
        d.set_item("cache_hits", c.cache_hits)?;
        d.set_item("cache_misses", c.cache_misses)?;
        d.set_item("cached_pages", c.cached_pages)?;
        d.set_item("pinned_pages", c.pinned_pages)?;
        d.set_item("pinned_bytes", c.pinned_bytes)?;
        Ok(d)
    }

    /// Verifies every page of the latest commit (checksums, structure,
    /// order, free-space accounting). Returns `{"ok": bool, "problems":
    /// [str, ...], "txn": int, "page_count": int}`; corruption is reported
    /// here, not raised. I/O failures raise.
    fn check<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let db = self.shared.for_write()?;
        let r = py
            .allow_threads(move || db.check_integrity())
            .map_err(any_err)?;
        let d = PyDict::new(py);
        d.set_item("ok", r.is_ok())?;
        let problems = PyList::empty(py);
        for p in &r.problems {
            problems.append(p.to_string())?;
        }
        d.set_item("problems", problems)?;
        d.set_item("txn", r.txn)?;
        d.set_item("page_count", r.page_count)?;
        Ok(d)
    }

    /// Moves pages down and truncates the file. Needs that no snapshot,
    /// cursor or iterator is alive (`TransactionError` otherwise). Returns
    /// `{"before_bytes": int, "after_bytes": int}`.
    fn compact<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let db = self.shared.for_write()?;
        let r = py.allow_threads(move || db.compact()).map_err(any_err)?;
        let d = PyDict::new(py);
        d.set_item("before_bytes", r.before_bytes)?;
        d.set_item("after_bytes", r.after_bytes)?;
        Ok(d)
    }

    /// Writes a consistent copy of the latest commit to `path` (which must
    /// not exist) while other threads keep writing.
    fn backup(&self, py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
        let db = self.shared.for_write()?;
        py.allow_threads(move || db.backup_to(&path))
            .map_err(any_err)
    }

    /// Appends events to `stream` atomically. Each event is a dict with
    /// "type" (str), optional "data" and "metadata" (bytes or str) and
    /// optional "id" (uuid.UUID, for idempotent retries), or a
    /// `(type, data)` tuple. `expected_version`: None / "any" (no check),
    /// "no_stream", "exists", or the int version of the stream's last
    /// event; a mismatch raises `WrongExpectedVersionError`, unless the
    /// append repeats the events (by id) right after that version: then it
    /// writes nothing and returns `idempotent=True` (a safe retry).
    /// `durability` ("immediate" or "none") overrides the database's for
    /// this commit.
    #[pyo3(signature = (stream, events, expected_version=None, *, durability=None))]
    fn append(
        &self,
        py: Python<'_>,
        stream: String,
        events: &Bound<'_, PyAny>,
        expected_version: Option<&Bound<'_, PyAny>>,
        durability: Option<&str>,
    ) -> PyResult<crate::events::AppendResult> {
        let d = durability_arg(durability, self.shared.durability)?;
        crate::events::append(py, &self.shared, d, stream, events, expected_version)
    }

    /// Reads up to `limit` events of `stream` from version `from_version`
    /// (default: the first, or the last when `backward`).
    #[pyo3(signature = (stream, from_version=None, *, backward=false, limit=None))]
    fn read(
        &self,
        py: Python<'_>,
        stream: String,
        from_version: Option<u64>,
        backward: bool,
        limit: Option<usize>,
    ) -> PyResult<Vec<crate::events::RecordedEvent>> {
        crate::events::read(py, &self.fresh(), stream, from_version, backward, limit)
    }

    /// Reads up to `limit` events of the global log from position
    /// `from_position` (default: the start, or the end when `backward`),
    /// optionally only of `event_types` or of streams starting with
    /// `stream_prefix`.
    #[pyo3(signature = (from_position=None, *, backward=false, limit=None, event_types=None, stream_prefix=None))]
    fn read_all(
        &self,
        py: Python<'_>,
        from_position: Option<u64>,
        backward: bool,
        limit: Option<usize>,
        event_types: Option<Vec<String>>,
        stream_prefix: Option<String>,
    ) -> PyResult<Vec<crate::events::RecordedEvent>> {
        crate::events::read_all(
            py,
            &self.fresh(),
            from_position,
            backward,
            limit,
            event_types,
            stream_prefix,
        )
    }

    /// The version of the stream's last event (None: no such stream or no
    /// events).
    fn stream_version(&self, py: Python<'_>, stream: String) -> PyResult<Option<u64>> {
        crate::events::stream_version(py, &self.fresh(), stream)
    }

    /// Deletes a stream: soft (it can be written again, from its next
    /// version) or `hard` (a tombstone: never again). `durability`
    /// overrides the database's for this commit.
    #[pyo3(signature = (stream, expected_version=None, *, hard=false, durability=None))]
    fn delete_stream(
        &self,
        py: Python<'_>,
        stream: String,
        expected_version: Option<&Bound<'_, PyAny>>,
        hard: bool,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = durability_arg(durability, self.shared.durability)?;
        crate::events::delete_stream(py, &self.shared, d, stream, expected_version, hard)
    }

    /// A subscription to the global log from `from_position` (the next
    /// position wanted): history first, then live events as they commit.
    /// Iterate it (blocking; Ctrl-C interrupts) or call `next(timeout)`.
    #[pyo3(signature = (from_position=0, *, event_types=None, stream_prefix=None))]
    fn subscribe(
        &self,
        from_position: u64,
        event_types: Option<Vec<String>>,
        stream_prefix: Option<String>,
    ) -> PyResult<crate::events::Subscription> {
        crate::events::Subscription::new(
            self.shared.get()?,
            from_position,
            event_types,
            stream_prefix,
        )
    }

    /// Sets the change log's retention: the newest `max_entries` change
    /// records (at least 1) of every watched collection together are kept,
    /// as MongoDB's oplog size bounds all collections; a change stream
    /// further behind raises `ChangeStreamHistoryLost`.
    fn set_change_log_retention(&self, py: Python<'_>, max_entries: u64) -> PyResult<()> {
        let db = self.shared.for_write()?;
        py.allow_threads(move || db.set_change_log_retention(max_entries))
            .map_err(crate::errors::doc_err)
    }

    /// The change log's retention, in records.
    fn change_log_retention(&self, py: Python<'_>) -> PyResult<u64> {
        let db = self.shared.get()?;
        py.allow_threads(move || db.change_log_retention())
            .map_err(crate::errors::doc_err)
    }

    /// A subscription to one stream from version `from_version`: its
    /// history, then its new events as they commit (it waits for a stream
    /// that does not exist yet).
    #[pyo3(signature = (stream, from_version=0))]
    fn subscribe_stream(
        &self,
        stream: String,
        from_version: u64,
    ) -> PyResult<crate::events::Subscription> {
        crate::events::Subscription::stream(self.shared.get()?, stream, from_version)
    }

    /// Every stream whose name starts with `prefix`, in name order, as dicts
    /// `{"name", "version" (None: no events), "state" ("live", "deleted",
    /// "tombstoned"), "first_visible"}`.
    #[pyo3(signature = (prefix=String::new()))]
    fn list_streams(&self, py: Python<'_>, prefix: String) -> PyResult<Vec<PyObject>> {
        crate::events::list_streams(py, &self.fresh(), prefix)
    }

    /// One stream's state and settings as a dict (the keys of
    /// `list_streams`), or None for a stream never written.
    fn stream_info(&self, py: Python<'_>, stream: String) -> PyResult<Option<PyObject>> {
        crate::events::stream_info(py, &self.fresh(), stream)
    }

    /// The global position the next committed event will get (how many
    /// events were ever appended).
    fn next_position(&self, py: Python<'_>) -> PyResult<u64> {
        crate::events::next_position(py, &self.fresh())
    }

    /// Sets how much of `stream` reads show: `max_count` (only the newest
    /// that many events) and `truncate_before` (hide versions below it);
    /// None clears a setting. Hidden events stay in the global log
    /// (`read_all`). A stream never written gets its settings ahead of its
    /// first event; a tombstoned one raises `StreamDeletedError`.
    /// `durability` overrides the database's for this commit.
    #[pyo3(signature = (stream, *, max_count=None, truncate_before=None, durability=None))]
    fn set_stream_metadata(
        &self,
        py: Python<'_>,
        stream: String,
        max_count: Option<u64>,
        truncate_before: Option<u64>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = durability_arg(durability, self.shared.durability)?;
        crate::events::set_stream_metadata(py, &self.shared, d, stream, max_count, truncate_before)
    }

    /// Saves `state` (bytes or str, stored as UTF-8) as the snapshot of
    /// `stream` at `version`, which must be an existing version of the
    /// live stream (else `EventError`; `StreamNotFoundError` for a stream
    /// that does not exist or was deleted, `StreamDeletedError` if
    /// tombstoned). Saving again at the same version replaces it.
    /// `durability` overrides the database's for this commit.
    #[pyo3(signature = (stream, version, state, *, durability=None))]
    fn save_snapshot(
        &self,
        py: Python<'_>,
        stream: String,
        version: u64,
        state: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let d = durability_arg(durability, self.shared.durability)?;
        crate::events::save_snapshot(py, &self.shared, d, stream, version, state)
    }

    /// Loads an aggregate: the newest snapshot of `stream` at or below
    /// `version` (default: the stream's last version) and the events after
    /// it up to `version`, as a `LoadedStream`. Raises
    /// `StreamNotFoundError` for a stream that does not exist and
    /// `EventError` for a version past its end.
    #[pyo3(signature = (stream, version=None))]
    fn load(
        &self,
        py: Python<'_>,
        stream: String,
        version: Option<u64>,
    ) -> PyResult<crate::events::LoadedStream> {
        crate::events::load(py, &self.fresh(), stream, version)
    }

    fn __repr__(&self) -> String {
        format!("Database({:?})", self.shared.path)
    }
}

impl Database {
    /// Reads on a fresh snapshot each.
    fn fresh(&self) -> Reads {
        Reads::Fresh(self.shared.clone())
    }
}
