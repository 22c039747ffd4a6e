//! Document collections with pymongo's method names, and their cursors.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use cairndb::document::{
    Document, FindOneAndOptions, FindOptions, IndexOptions, Pipeline, Results, ReturnDocument,
    SortSpec, TextIndexOptions, Update, UpdateOptions, Value,
};
use cairndb::ReadTransaction;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyString};

use crate::convert::{document_to_dict, from_value, to_document, to_value};
use crate::db::{
    durability_arg, durability_name, in_txn, lock, DbShared, FResult, Fail, Reads, TxInner,
};
use crate::errors::{doc_err, InvalidArgumentError};

/// What `insert_one` did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct InsertOneResult {
    /// The `_id` of the inserted document (generated if it had none).
    inserted_id: PyObject,
}

#[pymethods]
impl InsertOneResult {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "InsertOneResult(inserted_id={})",
            repr(py, &self.inserted_id)
        )
    }
}

/// What `insert_many` did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct InsertManyResult {
    /// The `_id`s of the inserted documents, in order.
    inserted_ids: PyObject,
}

#[pymethods]
impl InsertManyResult {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "InsertManyResult(inserted_ids={})",
            repr(py, &self.inserted_ids)
        )
    }
}

/// What `update_one`, `update_many` or `replace_one` did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct UpdateResult {
    /// Documents the filter matched.
    matched_count: u64,
    /// Documents changed.
    modified_count: u64,
    /// The `_id` of the document an upsert inserted, else None.
    upserted_id: PyObject,
}

#[pymethods]
impl UpdateResult {
    fn __repr__(&self, py: Python<'_>) -> String {
        format!(
            "UpdateResult(matched_count={}, modified_count={}, upserted_id={})",
            self.matched_count,
            self.modified_count,
            repr(py, &self.upserted_id)
        )
    }
}

/// What `delete_one` or `delete_many` did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct DeleteResult {
    /// Documents deleted.
    deleted_count: u64,
}

#[pymethods]
impl DeleteResult {
    fn __repr__(&self) -> String {
        format!("DeleteResult(deleted_count={})", self.deleted_count)
    }
}

/// What `upsert_many` did.
#[pyclass(module = "cairndb", frozen, get_all)]
pub struct BulkUpsertResult {
    /// Documents inserted (new `_id`s).
    inserted_count: u64,
    /// Documents replaced (existing `_id`s).
    replaced_count: u64,
}

#[pymethods]
impl BulkUpsertResult {
    fn __repr__(&self) -> String {
        format!(
            "BulkUpsertResult(inserted_count={}, replaced_count={})",
            self.inserted_count, self.replaced_count
        )
    }
}

fn repr(py: Python<'_>, o: &PyObject) -> String {
    o.bind(py).repr().map(|s| s.to_string()).unwrap_or_default()
}

fn update_result(py: Python<'_>, r: cairndb::document::UpdateResult) -> PyResult<UpdateResult> {
    Ok(UpdateResult {
        matched_count: r.matched,
        modified_count: r.modified,
        upserted_id: match &r.upserted_id {
            Some(v) => from_value(py, v)?,
            None => py.None(),
        },
    })
}

/// A filter argument: None (everything) or a dict.
fn filter_arg(f: Option<&Bound<'_, PyAny>>) -> PyResult<Document> {
    match f {
        Some(f) if !f.is_none() => to_document(f, "a filter"),
        _ => Ok(Document::new()),
    }
}

/// An update with operators (`{"$set": ...}`).
fn update_arg(u: &Bound<'_, PyAny>) -> PyResult<Update> {
    let d = to_document(u, "an update")?;
    if d.iter().next().is_some_and(|(k, _)| !k.starts_with('$')) {
        return Err(PyValueError::new_err(
            "update_one/update_many take update operators ({\"$set\": ...}); use replace_one to replace a document",
        ));
    }
    Update::from_value(Value::Object(d)).map_err(doc_err)
}

/// A replacement document (no operators).
fn replacement_arg(u: &Bound<'_, PyAny>) -> PyResult<Update> {
    let d = to_document(u, "a replacement")?;
    if d.iter().any(|(k, _)| k.starts_with('$')) {
        return Err(PyValueError::new_err(
            "a replacement document must not contain update operators; use update_one",
        ));
    }
    Update::replacement(d).map_err(doc_err)
}

/// Index keys: "field", or a list of `(field, 1 | -1)` pairs.
fn index_keys(keys: &Bound<'_, PyAny>) -> PyResult<Vec<(String, i8)>> {
    if let Ok(s) = keys.downcast::<PyString>() {
        return Ok(vec![(s.to_cow()?.to_string(), 1)]);
    }
    if let Ok(d) = keys.downcast::<PyDict>() {
        return d
            .iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v.extract::<i8>()?)))
            .collect();
    }
    let mut out = Vec::new();
    for item in keys.try_iter()? {
        let item = item?;
        if let Ok(s) = item.downcast::<PyString>() {
            out.push((s.to_cow()?.to_string(), 1));
        } else {
            let (f, o): (String, i8) = item.extract().map_err(|_| {
                PyTypeError::new_err(
                    "index keys are a field name or a list of (field, 1 | -1) pairs",
                )
            })?;
            out.push((f, o));
        }
    }
    Ok(out)
}

/// The fields of a text index key spec (`[("title", "text"), ...]` or
/// `{"title": "text"}`, pymongo's `TEXT`), or `None` when `keys` has no
/// `"text"` value; a spec mixing text and ordered fields is refused.
fn text_keys(keys: &Bound<'_, PyAny>) -> PyResult<Option<Vec<String>>> {
    let pairs: Vec<(String, Bound<'_, PyAny>)> = if let Ok(d) = keys.downcast::<PyDict>() {
        d.iter()
            .map(|(k, v)| Ok((k.extract::<String>()?, v)))
            .collect::<PyResult<_>>()?
    } else if keys.downcast::<PyString>().is_ok() {
        return Ok(None);
    } else {
        let mut out = Vec::new();
        for item in keys.try_iter()? {
            // An item that is not a (field, kind) pair makes this no text
            // spec: the ordinary index parser refuses it with its message
            // (it was skipped, so `[("a", "text"), "b"]` indexed `a` alone).
            match item?.extract::<(String, Bound<'_, PyAny>)>() {
                Ok(pair) => out.push(pair),
                Err(_) => return Ok(None),
            }
        }
        out
    };
    let is_text = |o: &Bound<'_, PyAny>| o.extract::<String>().is_ok_and(|s| s == "text");
    if !pairs.iter().any(|(_, o)| is_text(o)) {
        return Ok(None);
    }
    if !pairs.iter().all(|(_, o)| is_text(o)) {
        return Err(PyValueError::new_err(
            "a text index has only \"text\" fields (compound text indexes are not supported)",
        ));
    }
    Ok(Some(pairs.into_iter().map(|(f, _)| f).collect()))
}

/// A text index's fields with their weights (`weights`: a dict, default 1).
fn text_fields(
    fields: Vec<String>,
    weights: Option<&Bound<'_, PyDict>>,
) -> PyResult<Vec<(String, u32)>> {
    let mut out: Vec<(String, u32)> = fields.into_iter().map(|f| (f, 1)).collect();
    if let Some(w) = weights {
        for (k, v) in w.iter() {
            let k: String = k.extract()?;
            let v: u32 = v.extract()?;
            match out.iter_mut().find(|(f, _)| *f == k) {
                Some(f) => f.1 = v,
                None => {
                    return Err(PyValueError::new_err(format!(
                        "weights names {k:?}, which is not a text field of the index"
                    )))
                }
            }
        }
    }
    Ok(out)
}

/// A pipeline: a list of stage dicts.
fn pipeline_arg(p: &Bound<'_, PyAny>) -> PyResult<Pipeline> {
    if p.downcast::<PyDict>().is_ok() || p.downcast::<PyString>().is_ok() {
        return Err(PyTypeError::new_err(
            "aggregate takes a pipeline: a list of stage dicts",
        ));
    }
    let stages = p
        .try_iter()
        .map_err(|_| PyTypeError::new_err("aggregate takes a pipeline: a list of stage dicts"))?
        .map(|s| to_value(&s?, 1))
        .collect::<PyResult<Vec<_>>>()?;
    Pipeline::from_value(Value::Array(stages)).map_err(doc_err)
}

fn dicts(py: Python<'_>, docs: &[Document]) -> PyResult<Vec<PyObject>> {
    docs.iter()
        .map(|d| Ok(document_to_dict(py, d)?.into_any().unbind()))
        .collect()
}

fn values(py: Python<'_>, vals: &[Value]) -> PyResult<Vec<PyObject>> {
    vals.iter().map(|v| from_value(py, v)).collect()
}

fn find_one_and_opts(
    sort: Option<&Bound<'_, PyAny>>,
    upsert: bool,
    after: bool,
) -> PyResult<FindOneAndOptions> {
    let sort = match sort {
        Some(s) if !s.is_none() => Some(SortSpec::parse(sort_spec(s, None)?).map_err(doc_err)?),
        _ => None,
    };
    Ok(FindOneAndOptions {
        sort,
        upsert,
        return_document: if after {
            ReturnDocument::After
        } else {
            ReturnDocument::Before
        },
    })
}

fn optional_dict(py: Python<'_>, d: Option<Document>) -> PyResult<PyObject> {
    match d {
        Some(d) => Ok(document_to_dict(py, &d)?.into_any().unbind()),
        None => Ok(py.None()),
    }
}

/// A sort specification: "field", `(field, dir)` pairs, or a dict, as JSON.
fn sort_spec(key: &Bound<'_, PyAny>, direction: Option<i64>) -> PyResult<serde_json::Value> {
    let mut m = serde_json::Map::new();
    if let Ok(s) = key.downcast::<PyString>() {
        m.insert(s.to_cow()?.to_string(), direction.unwrap_or(1).into());
    } else if let Ok(d) = key.downcast::<PyDict>() {
        for (k, v) in d.iter() {
            m.insert(k.extract::<String>()?, sort_direction(&v)?);
        }
    } else {
        for item in key.try_iter()? {
            let (f, o): (String, Bound<'_, PyAny>) = item?.extract().map_err(|_| {
                PyTypeError::new_err("sort takes a field name, or a list of (field, 1 | -1) pairs")
            })?;
            m.insert(f, sort_direction(&o)?);
        }
    }
    Ok(serde_json::Value::Object(m))
}

/// A sort key's direction: 1 or -1, or `{"$meta": "textScore"}`.
fn sort_direction(v: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if v.downcast::<PyDict>().is_ok() {
        return Ok(to_value(v, 0)?.to_json());
    }
    Ok(v.extract::<i64>()?.into())
}

/// A projection: a dict, or a list of field names to keep, as JSON.
fn projection_spec(p: &Bound<'_, PyAny>) -> PyResult<serde_json::Value> {
    if p.downcast::<PyDict>().is_ok() {
        return Ok(to_value(p, 0)?.to_json());
    }
    let mut m = serde_json::Map::new();
    for item in p.try_iter()? {
        m.insert(item?.extract::<String>()?, 1.into());
    }
    Ok(serde_json::Value::Object(m))
}

fn index_info(py: Python<'_>, i: &cairndb::document::IndexInfo) -> PyResult<PyObject> {
    let d = PyDict::new(py);
    d.set_item("name", &i.name)?;
    let key = PyDict::new(py);
    for (f, o) in &i.fields {
        key.set_item(f, *o)?;
    }
    if let Some(t) = &i.text {
        // MongoDB's form of a text index's key, weights and language.
        key.set_item("_fts", "text")?;
        key.set_item("_ftsx", 1)?;
        let w = PyDict::new(py);
        for (f, n) in &t.weights {
            w.set_item(f, *n)?;
        }
        d.set_item("weights", w)?;
        d.set_item("default_language", &t.default_language)?;
    }
    d.set_item("key", key)?;
    d.set_item("unique", i.unique)?;
    d.set_item("sparse", i.sparse)?;
    if let Some(secs) = i.expire_after_seconds {
        d.set_item("expireAfterSeconds", secs)?;
    }
    Ok(d.into_any().unbind())
}

/// Sets `_id` in the caller's dict if it had none (as pymongo does).
fn set_id(doc: &Bound<'_, PyAny>, id: &Value) -> PyResult<()> {
    if let Ok(d) = doc.downcast::<PyDict>() {
        if !d.contains("_id")? {
            d.set_item("_id", from_value(doc.py(), id)?)?;
        }
    }
    Ok(())
}

/// A collection of documents (dicts), named as in pymongo. Each method is
/// its own transaction: reads on a fresh snapshot, writes committed with
/// this handle's durability (the database's, unless
/// `db.collection(name, durability=...)` or `with_options(durability=...)`
/// says otherwise), or with the call's own `durability=` keyword. Made by
/// `db.collection(name)`; created by its first write.
#[pyclass(module = "cairndb", frozen)]
pub struct Collection {
    shared: Arc<DbShared>,
    name: String,
    /// The durability of this handle's writes (the database's unless
    /// `db.collection(name, durability=...)` says otherwise).
    durability: cairndb::Durability,
}

impl Collection {
    pub fn new(shared: Arc<DbShared>, name: String) -> Self {
        let durability = shared.durability;
        Collection {
            shared,
            name,
            durability,
        }
    }

    /// This handle with its own durability.
    pub fn with_durability(mut self, d: cairndb::Durability) -> Self {
        self.durability = d;
        self
    }

    /// `update_one` / `update_many` / `replace_one` (`u` an update or a
    /// replacement).
    fn update(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        u: Update,
        upsert: bool,
        many: bool,
        durability: Option<&str>,
    ) -> PyResult<UpdateResult> {
        let f = filter_arg(Some(filter))?;
        let opts = UpdateOptions { upsert };
        let r = self.write(py, durability, move |c| {
            Ok(if many {
                c.update_many(f, u, opts)?
            } else {
                c.update_one(f, u, opts)?
            })
        })?;
        update_result(py, r)
    }

    /// Runs the write `f` on the engine's collection without the GIL,
    /// committing with `durability` (the call's), else the handle's.
    fn write<R: Send>(
        &self,
        py: Python<'_>,
        durability: Option<&str>,
        f: impl FnOnce(&cairndb::document::Collection<'_, Document>) -> FResult<R> + Send,
    ) -> PyResult<R> {
        let d = durability_arg(durability, self.durability)?;
        let db = self.shared.for_write()?;
        let name = &self.name;
        py.allow_threads(move || {
            let c = db.collection::<Document>(name).with_durability(d);
            f(&c)
        })
        .map_err(Fail::into_py)
    }

    /// Runs the read `f` on the engine's collection without the GIL.
    fn read<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&cairndb::document::Collection<'_, Document>) -> FResult<R> + Send,
    ) -> PyResult<R> {
        let db = self.shared.get()?;
        let name = &self.name;
        py.allow_threads(move || f(&db.collection::<Document>(name)))
            .map_err(Fail::into_py)
    }

    /// Reads on a fresh snapshot each.
    fn reads(&self) -> Reads {
        Reads::Fresh(self.shared.clone())
    }
}

#[pymethods]
impl Collection {
    /// The collection's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The durability of this handle's writes: "immediate" or "none".
    #[getter(durability)]
    fn durability_name(&self) -> &'static str {
        durability_name(self.durability)
    }

    /// This collection with other options, as pymongo's `with_options`:
    /// `durability` ("immediate" or "none"; pymongo's
    /// `write_concern=WriteConcern(j=True)` / `j=False`) for its writes.
    #[pyo3(signature = (*, durability=None))]
    fn with_options(&self, durability: Option<&str>) -> PyResult<Collection> {
        Ok(Collection {
            shared: self.shared.clone(),
            name: self.name.clone(),
            durability: durability_arg(durability, self.durability)?,
        })
    }

    /// Inserts a document; an `_id` is generated (an `ObjectId`) if it has
    /// none, and set in the dict passed. A duplicate `_id` or unique index
    /// value raises `DuplicateKeyError`. `durability` ("immediate": on
    /// disk when this returns; "none": no device flush, so a crash may
    /// lose it until the next durable commit or `db.sync()`) overrides the
    /// handle's for this call, as on every write method.
    #[pyo3(signature = (document, *, durability=None))]
    fn insert_one(
        &self,
        py: Python<'_>,
        document: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<InsertOneResult> {
        let doc = to_document(document, "a document")?;
        let id = self.write(py, durability, move |c| Ok(c.insert(&doc)?))?;
        set_id(document, &id)?;
        Ok(InsertOneResult {
            inserted_id: from_value(py, &id)?,
        })
    }

    /// Inserts every document in one transaction: all or none.
    #[pyo3(signature = (documents, *, durability=None))]
    fn insert_many(
        &self,
        py: Python<'_>,
        documents: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<InsertManyResult> {
        let items: Vec<Bound<'_, PyAny>> = documents.try_iter()?.collect::<PyResult<_>>()?;
        let docs = items
            .iter()
            .map(|d| to_document(d, "a document"))
            .collect::<PyResult<Vec<_>>>()?;
        let ids = self.write(py, durability, move |c| Ok(c.insert_many(docs.iter())?))?;
        let out = PyList::empty(py);
        for (d, id) in items.iter().zip(&ids) {
            set_id(d, id)?;
            out.append(from_value(py, id)?)?;
        }
        Ok(InsertManyResult {
            inserted_ids: out.into_any().unbind(),
        })
    }

    /// Inserts each document, or replaces the one with its `_id` (bulk
    /// upsert), in one transaction.
    #[pyo3(signature = (documents, *, durability=None))]
    fn upsert_many(
        &self,
        py: Python<'_>,
        documents: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<BulkUpsertResult> {
        let docs = documents
            .try_iter()?
            .map(|d| to_document(&d?, "a document"))
            .collect::<PyResult<Vec<_>>>()?;
        let r = self.write(py, durability, move |c| Ok(c.upsert_many(docs.iter())?))?;
        Ok(BulkUpsertResult {
            inserted_count: r.inserted,
            replaced_count: r.replaced,
        })
    }

    /// A lazy cursor over the documents matching `filter` (a MongoDB-style
    /// query dict; None or {} matches all). `projection` is a dict
    /// (`{"a": 1}` keeps, `{"a": 0}` drops) or a list of fields to keep;
    /// `sort` a field name or a list of `(field, 1 | -1)` pairs.
    #[pyo3(signature = (filter=None, projection=None, *, sort=None, skip=0, limit=0))]
    fn find(
        &self,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
        skip: u64,
        limit: u64,
    ) -> PyResult<Cursor> {
        find_cursor(
            self.reads(),
            &self.name,
            filter,
            projection,
            sort,
            skip,
            limit,
        )
    }

    /// The first document matching `filter` (in `sort` order if given), or
    /// None.
    #[pyo3(signature = (filter=None, projection=None, *, sort=None))]
    fn find_one(
        &self,
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let c = find_cursor(self.reads(), &self.name, filter, projection, sort, 0, 1)?;
        Ok(c.__next__(py)?.unwrap_or_else(|| py.None()))
    }

    /// How many documents match `filter`.
    #[pyo3(signature = (filter=None))]
    fn count_documents(&self, py: Python<'_>, filter: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        count_documents(py, &self.reads(), &self.name, filter)
    }

    /// Runs an aggregation pipeline (a list of stage dicts: `$match`,
    /// `$group`, `$sort`, `$project`, `$limit`, `$skip`, `$unwind`,
    /// `$count`, `$lookup`, ...) on one snapshot; returns the documents as
    /// a list. An invalid pipeline raises `InvalidQueryError` with `stage`
    /// and `operator` attributes.
    fn aggregate(&self, py: Python<'_>, pipeline: &Bound<'_, PyAny>) -> PyResult<Vec<PyObject>> {
        aggregate(py, &self.reads(), &self.name, pipeline)
    }

    /// The distinct values of `key` among the documents matching `filter`
    /// (arrays contribute their elements), sorted in the engine's value
    /// order.
    #[pyo3(signature = (key, filter=None))]
    fn distinct(
        &self,
        py: Python<'_>,
        key: &str,
        filter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyObject>> {
        distinct(py, &self.reads(), &self.name, key, filter)
    }

    /// Updates the first document matching `filter` (the first in `sort`
    /// order if given) and returns it as it was (`return_document=False`,
    /// pymongo's `ReturnDocument.BEFORE`) or is after (`True`,
    /// `ReturnDocument.AFTER`); None when nothing matched. With
    /// `upsert=True` inserts one when nothing matches.
    #[pyo3(signature = (filter, update, *, sort=None, upsert=false, return_document=false, durability=None))]
    #[allow(clippy::too_many_arguments)]
    fn find_one_and_update(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        update: &Bound<'_, PyAny>,
        sort: Option<&Bound<'_, PyAny>>,
        upsert: bool,
        return_document: bool,
        durability: Option<&str>,
    ) -> PyResult<PyObject> {
        let f = filter_arg(Some(filter))?;
        let u = update_arg(update)?;
        let opts = find_one_and_opts(sort, upsert, return_document)?;
        let d = self.write(py, durability, move |c| {
            Ok(c.find_one_and_update(f, u, opts)?)
        })?;
        optional_dict(py, d)
    }

    /// Replaces the first document matching `filter` (see
    /// `find_one_and_update`); the `_id` is kept.
    #[pyo3(signature = (filter, replacement, *, sort=None, upsert=false, return_document=false, durability=None))]
    #[allow(clippy::too_many_arguments)]
    fn find_one_and_replace(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        replacement: &Bound<'_, PyAny>,
        sort: Option<&Bound<'_, PyAny>>,
        upsert: bool,
        return_document: bool,
        durability: Option<&str>,
    ) -> PyResult<PyObject> {
        let f = filter_arg(Some(filter))?;
        let r = to_document(replacement, "a replacement")?;
        if r.keys().any(|k| k.starts_with('$')) {
            return Err(PyValueError::new_err(
                "a replacement document must not contain update operators; use find_one_and_update",
            ));
        }
        let opts = find_one_and_opts(sort, upsert, return_document)?;
        let d = self.write(py, durability, move |c| {
            Ok(c.find_one_and_replace(f, &r, opts)?)
        })?;
        optional_dict(py, d)
    }

    /// Deletes the first document matching `filter` (the first in `sort`
    /// order if given) and returns it, or None.
    #[pyo3(signature = (filter, *, sort=None, durability=None))]
    fn find_one_and_delete(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        sort: Option<&Bound<'_, PyAny>>,
        durability: Option<&str>,
    ) -> PyResult<PyObject> {
        let f = filter_arg(Some(filter))?;
        let opts = find_one_and_opts(sort, false, false)?;
        let d = self.write(py, durability, move |c| Ok(c.find_one_and_delete(f, opts)?))?;
        optional_dict(py, d)
    }

    /// Renames the collection (documents and indexes move with it). An
    /// existing target raises `DocumentError` unless `drop_target=True`.
    /// This object keeps its old name.
    #[pyo3(signature = (new_name, *, drop_target=false, durability=None))]
    fn rename(
        &self,
        py: Python<'_>,
        new_name: &str,
        drop_target: bool,
        durability: Option<&str>,
    ) -> PyResult<()> {
        let to = new_name.to_string();
        self.write(py, durability, move |c| Ok(c.rename(&to, drop_target)?))
    }

    /// The number of documents (no filter; reads the table length).
    fn estimated_document_count(&self, py: Python<'_>) -> PyResult<u64> {
        view_op(py, &self.reads(), &self.name, |v| Ok(v.len()?))
    }

    /// Applies update operators to the first document matching `filter`;
    /// with `upsert=True` inserts one built from the filter's equalities
    /// and the update if none matches.
    #[pyo3(signature = (filter, update, upsert=false, *, durability=None))]
    fn update_one(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        update: &Bound<'_, PyAny>,
        upsert: bool,
        durability: Option<&str>,
    ) -> PyResult<UpdateResult> {
        self.update(py, filter, update_arg(update)?, upsert, false, durability)
    }

    /// Applies update operators to every document matching `filter`, in one
    /// transaction.
    #[pyo3(signature = (filter, update, upsert=false, *, durability=None))]
    fn update_many(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        update: &Bound<'_, PyAny>,
        upsert: bool,
        durability: Option<&str>,
    ) -> PyResult<UpdateResult> {
        self.update(py, filter, update_arg(update)?, upsert, true, durability)
    }

    /// Replaces the first document matching `filter` (keeping its `_id`).
    #[pyo3(signature = (filter, replacement, upsert=false, *, durability=None))]
    fn replace_one(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        replacement: &Bound<'_, PyAny>,
        upsert: bool,
        durability: Option<&str>,
    ) -> PyResult<UpdateResult> {
        let r = replacement_arg(replacement)?;
        self.update(py, filter, r, upsert, false, durability)
    }

    /// Deletes the first document matching `filter`.
    #[pyo3(signature = (filter, *, durability=None))]
    fn delete_one(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<DeleteResult> {
        let f = filter_arg(Some(filter))?;
        let n = self.write(py, durability, move |c| Ok(c.delete_one(f)?))?;
        Ok(DeleteResult { deleted_count: n })
    }

    /// Deletes every document matching `filter`, in one transaction.
    #[pyo3(signature = (filter, *, durability=None))]
    fn delete_many(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        durability: Option<&str>,
    ) -> PyResult<DeleteResult> {
        let f = filter_arg(Some(filter))?;
        let n = self.write(py, durability, move |c| Ok(c.delete_many(f)?))?;
        Ok(DeleteResult { deleted_count: n })
    }

    /// Creates a secondary index on `keys` ("field" or a list of
    /// `(field, 1 | -1)` pairs), built over the existing documents; returns
    /// its name. `unique=True` rejects duplicates (`DuplicateKeyError`);
    /// `sparse=True` skips documents missing every indexed field.
    /// `expireAfterSeconds=N` (pymongo's name) makes it a TTL index, on one
    /// ascending field: documents whose field holds a date (a `datetime`,
    /// or an int of milliseconds since the Unix epoch; in a list, the
    /// earliest counts) more than N seconds in the past are deleted by the
    /// collection's writes and by `delete_expired()` (and a first batch by
    /// this call); other values never expire. `[(field, "text"), ...]`
    /// makes the collection's text index, with `weights` per field and
    /// `default_language` ("english" or "none").
    #[pyo3(signature = (keys, *, unique=false, sparse=false, name=None, expireAfterSeconds=None, weights=None, default_language=None, durability=None))]
    #[allow(non_snake_case, clippy::too_many_arguments)]
    fn create_index(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        unique: bool,
        sparse: bool,
        name: Option<String>,
        expireAfterSeconds: Option<u64>,
        weights: Option<&Bound<'_, PyDict>>,
        default_language: Option<String>,
        durability: Option<&str>,
    ) -> PyResult<String> {
        if let Some(fields) = text_keys(keys)? {
            if expireAfterSeconds.is_some() {
                return Err(InvalidArgumentError::new_err(
                    "a text index cannot be a TTL index (expireAfterSeconds)",
                ));
            }
            let fields = text_fields(fields, weights)?;
            let opts = TextIndexOptions {
                name,
                default_language,
            };
            let info = self.write(py, durability, move |c| {
                let f: Vec<(&str, u32)> = fields.iter().map(|(p, w)| (p.as_str(), *w)).collect();
                Ok(c.create_text_index(&f, opts)?)
            })?;
            return Ok(info.name);
        }
        let fields = index_keys(keys)?;
        let ttl = match (expireAfterSeconds, fields.as_slice()) {
            (None, _) => None,
            (Some(secs), [(f, 1)]) => Some((f.clone(), secs)),
            (Some(_), _) => {
                return Err(InvalidArgumentError::new_err(
                    "a TTL index (expireAfterSeconds) has exactly one field, ascending (1)",
                ))
            }
        };
        let opts = IndexOptions {
            name,
            unique,
            sparse,
        };
        let info = self.write(py, durability, move |c| {
            if let Some((f, secs)) = ttl {
                return Ok(c.create_ttl_index(&f, secs, opts)?);
            }
            let f: Vec<(&str, i8)> = fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
            Ok(c.create_index(&f, opts)?)
        })?;
        Ok(info.name)
    }

    /// Deletes up to `max` expired documents of this collection's TTL
    /// indexes now, in one transaction; returns how many. The collection's
    /// writes delete a batch each; call this when it is rarely written.
    #[pyo3(signature = (max=10_000, *, durability=None))]
    fn delete_expired(
        &self,
        py: Python<'_>,
        max: usize,
        durability: Option<&str>,
    ) -> PyResult<u64> {
        self.write(py, durability, move |c| Ok(c.delete_expired(max)?))
    }

    /// Turns this collection's change stream on (creating the collection):
    /// from the next commit its writes are recorded in the database's
    /// change log, which `watch()` reads. pymongo has no such call
    /// (MongoDB records every collection in its oplog); here a collection
    /// nobody watches pays nothing.
    #[pyo3(signature = (*, durability=None))]
    fn enable_change_stream(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<()> {
        self.write(py, durability, |c| Ok(c.enable_change_stream()?))
    }

    /// Turns this collection's change stream off: its open streams end with
    /// an `invalidate` event, and `watch()` raises `ChangeStreamError`.
    #[pyo3(signature = (*, durability=None))]
    fn disable_change_stream(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<()> {
        self.write(py, durability, |c| Ok(c.disable_change_stream()?))
    }

    /// Whether this collection's writes are recorded for change streams.
    fn change_stream_enabled(&self, py: Python<'_>) -> PyResult<bool> {
        self.read(py, |c| Ok(c.change_stream_enabled()?))
    }

    /// A change stream over this collection (see `ChangeStream`): from now,
    /// or after `resume_after` / `start_after` (an event's `_id` or a
    /// stream's `resume_token`; `start_after` also passes an `invalidate`).
    /// `pipeline` filters and reshapes events (`$match`, `$project`,
    /// `$addFields`/`$set`, `$unset`, `$replaceRoot`/`$replaceWith`).
    /// `full_document="updateLookup"`: update events carry the document as
    /// the update left it. `max_await_time_ms`: how long `try_next()` waits
    /// by default. The collection's change stream must be on
    /// (`enable_change_stream()`), else `ChangeStreamError`; a token older
    /// than the change log's retention raises `ChangeStreamHistoryLost`.
    #[pyo3(signature = (pipeline=None, *, resume_after=None, start_after=None, full_document=None, max_await_time_ms=None))]
    fn watch(
        &self,
        py: Python<'_>,
        pipeline: Option<&Bound<'_, PyAny>>,
        resume_after: Option<&Bound<'_, PyAny>>,
        start_after: Option<&Bound<'_, PyAny>>,
        full_document: Option<&str>,
        max_await_time_ms: Option<u64>,
    ) -> PyResult<crate::changes::ChangeStream> {
        let p = crate::changes::pipeline(pipeline)?;
        let opts = crate::changes::options(resume_after, start_after, full_document)?;
        let wait = std::time::Duration::from_millis(max_await_time_ms.unwrap_or(0));
        let db = self.shared.get()?;
        let name = self.name.clone();
        py.allow_threads(move || crate::changes::ChangeStream::open(db, name, p, opts, wait))
            .map_err(Fail::into_py)
    }

    /// The secondary indexes, as dicts `{"name", "key": {field: 1 | -1},
    /// "unique", "sparse"}` and, for a TTL index, `"expireAfterSeconds"`
    /// (the `_id` primary key is not listed).
    fn list_indexes(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        list_indexes(py, &self.reads(), &self.name)
    }

    /// Drops the index `name`; returns whether it existed.
    #[pyo3(signature = (name, *, durability=None))]
    fn drop_index(&self, py: Python<'_>, name: String, durability: Option<&str>) -> PyResult<bool> {
        self.write(py, durability, move |c| Ok(c.drop_index(&name)?))
    }

    /// Drops the collection with its indexes; returns whether it existed.
    #[pyo3(signature = (*, durability=None))]
    fn drop(&self, py: Python<'_>, durability: Option<&str>) -> PyResult<bool> {
        self.write(py, durability, |c| Ok(c.drop()?))
    }

    fn __repr__(&self) -> String {
        format!("Collection({:?})", self.name)
    }
}

// ---------------------------------------------------------------------------
// Reads shared by `Collection` (a fresh snapshot per call) and
// `SnapshotCollection` (an open snapshot's)

/// The engine's read-only view of a collection in one snapshot.
type View = cairndb::document::SnapshotCollection<Arc<ReadTransaction>, Document>;

/// Runs `f` on the view of collection `name` in the snapshot `reads` names
/// (a fresh one is begun here), without the GIL.
fn view_op<R: Send>(
    py: Python<'_>,
    reads: &Reads,
    name: &str,
    f: impl FnOnce(&View) -> FResult<R> + Send,
) -> PyResult<R> {
    let start = reads.start()?;
    py.allow_threads(move || f(&View::new(start.snapshot()?, name)))
        .map_err(Fail::into_py)
}

/// `find`: a lazy cursor (see `Collection.find`).
fn find_cursor(
    reads: Reads,
    name: &str,
    filter: Option<&Bound<'_, PyAny>>,
    projection: Option<&Bound<'_, PyAny>>,
    sort: Option<&Bound<'_, PyAny>>,
    skip: u64,
    limit: u64,
) -> PyResult<Cursor> {
    let filter = filter_arg(filter)?;
    let projection = match projection {
        Some(p) if !p.is_none() => Some(projection_spec(p)?),
        _ => None,
    };
    let sort = match sort {
        Some(s) if !s.is_none() => Some(sort_spec(s, None)?),
        _ => None,
    };
    Ok(Cursor {
        reads,
        name: name.to_string(),
        state: Mutex::new(CursorState {
            filter,
            projection,
            sort,
            skip,
            limit,
            results: None,
            buf: VecDeque::new(),
            done: false,
        }),
    })
}

fn count_documents(
    py: Python<'_>,
    reads: &Reads,
    name: &str,
    filter: Option<&Bound<'_, PyAny>>,
) -> PyResult<u64> {
    let filter = filter_arg(filter)?;
    view_op(py, reads, name, move |v| Ok(v.count(filter)?))
}

fn aggregate(
    py: Python<'_>,
    reads: &Reads,
    name: &str,
    pipeline: &Bound<'_, PyAny>,
) -> PyResult<Vec<PyObject>> {
    let p = pipeline_arg(pipeline)?;
    let docs = view_op(py, reads, name, move |v| {
        Ok(v.aggregate(p)?.collect::<Result<Vec<_>, _>>()?)
    })?;
    dicts(py, &docs)
}

fn distinct(
    py: Python<'_>,
    reads: &Reads,
    name: &str,
    key: &str,
    filter: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<PyObject>> {
    let f = filter_arg(filter)?;
    let vals = view_op(py, reads, name, move |v| Ok(v.distinct(key, f)?))?;
    values(py, &vals)
}

fn list_indexes(py: Python<'_>, reads: &Reads, name: &str) -> PyResult<Vec<PyObject>> {
    let infos = view_op(py, reads, name, |v| Ok(v.list_indexes()?))?;
    infos.iter().map(|i| index_info(py, i)).collect()
}

/// A collection as of a snapshot, read-only: `with db.snapshot() as s:
/// s.collection(name)`. Every read sees the snapshot's commit, whatever is
/// committed meanwhile (MongoDB's `readConcern: "snapshot"` in a session);
/// cursors made by `find` keep the snapshot alive until they end, even
/// after the snapshot is closed. It has no write methods.
#[pyclass(module = "cairndb", frozen)]
pub struct SnapshotCollection {
    reads: Reads,
    name: String,
}

impl SnapshotCollection {
    pub fn new(reads: Reads, name: String) -> Self {
        SnapshotCollection { reads, name }
    }
}

#[pymethods]
impl SnapshotCollection {
    /// The collection's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// A lazy cursor over the documents matching `filter` in the snapshot
    /// (see `Collection.find`).
    #[pyo3(signature = (filter=None, projection=None, *, sort=None, skip=0, limit=0))]
    fn find(
        &self,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
        skip: u64,
        limit: u64,
    ) -> PyResult<Cursor> {
        find_cursor(
            self.reads.clone(),
            &self.name,
            filter,
            projection,
            sort,
            skip,
            limit,
        )
    }

    /// The first document matching `filter` (in `sort` order if given), or
    /// None.
    #[pyo3(signature = (filter=None, projection=None, *, sort=None))]
    fn find_one(
        &self,
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let c = find_cursor(
            self.reads.clone(),
            &self.name,
            filter,
            projection,
            sort,
            0,
            1,
        )?;
        Ok(c.__next__(py)?.unwrap_or_else(|| py.None()))
    }

    /// How many documents match `filter` in the snapshot.
    #[pyo3(signature = (filter=None))]
    fn count_documents(&self, py: Python<'_>, filter: Option<&Bound<'_, PyAny>>) -> PyResult<u64> {
        count_documents(py, &self.reads, &self.name, filter)
    }

    /// The number of documents in the snapshot (no filter).
    fn estimated_document_count(&self, py: Python<'_>) -> PyResult<u64> {
        view_op(py, &self.reads, &self.name, |v| Ok(v.len()?))
    }

    /// Runs an aggregation pipeline on the snapshot (see
    /// `Collection.aggregate`); `$lookup` reads the snapshot too.
    fn aggregate(&self, py: Python<'_>, pipeline: &Bound<'_, PyAny>) -> PyResult<Vec<PyObject>> {
        aggregate(py, &self.reads, &self.name, pipeline)
    }

    /// The distinct values of `key` among the documents matching `filter`
    /// in the snapshot (see `Collection.distinct`).
    #[pyo3(signature = (key, filter=None))]
    fn distinct(
        &self,
        py: Python<'_>,
        key: &str,
        filter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyObject>> {
        distinct(py, &self.reads, &self.name, key, filter)
    }

    /// The secondary indexes in the snapshot (see `Collection.list_indexes`).
    fn list_indexes(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        list_indexes(py, &self.reads, &self.name)
    }

    fn __repr__(&self) -> String {
        format!("SnapshotCollection({:?})", self.name)
    }
}

// ---------------------------------------------------------------------------
// Cursors

struct CursorState {
    filter: Document,
    projection: Option<serde_json::Value>,
    sort: Option<serde_json::Value>,
    skip: u64,
    limit: u64,
    results: Option<Results<Document, Arc<ReadTransaction>>>,
    buf: VecDeque<Document>,
    done: bool,
}

impl CursorState {
    fn options(&self) -> FResult<FindOptions> {
        find_options(
            self.projection.clone(),
            self.sort.clone(),
            self.skip,
            self.limit,
        )
    }
}

/// A find's options from its projection and sort (as JSON), skip and
/// limit (0: none).
fn find_options(
    projection: Option<serde_json::Value>,
    sort: Option<serde_json::Value>,
    skip: u64,
    limit: u64,
) -> FResult<FindOptions> {
    let mut o = FindOptions::new().skip(skip);
    if limit > 0 {
        o = o.limit(limit);
    }
    if let Some(s) = sort {
        o = o.sort(s)?;
    }
    if let Some(p) = projection {
        o = o.projection(p)?;
    }
    Ok(o)
}

/// Documents read per batch by a cursor.
const CURSOR_BATCH: usize = 64;

/// A lazy query: nothing runs until the first document is asked for; then
/// the results stream from one read snapshot (a fresh one, or the
/// `Snapshot`'s the collection came from). `.sort()`, `.skip()` and
/// `.limit()` (before iterating) return the cursor; `.explain()` reports
/// the plan.
#[pyclass(module = "cairndb", frozen)]
pub struct Cursor {
    reads: Reads,
    name: String,
    state: Mutex<CursorState>,
}

impl Cursor {
    fn unstarted(&self) -> PyResult<std::sync::MutexGuard<'_, CursorState>> {
        let st = lock(&self.state);
        if st.results.is_some() || st.done {
            return Err(InvalidArgumentError::new_err(
                "cannot change a cursor after iterating it has begun",
            ));
        }
        Ok(st)
    }
}

#[pymethods]
impl Cursor {
    /// Orders the results: `sort("age", -1)` or `sort([("age", -1), ("name", 1)])`.
    #[pyo3(signature = (key_or_list, direction=None))]
    fn sort<'py>(
        slf: &Bound<'py, Self>,
        key_or_list: &Bound<'_, PyAny>,
        direction: Option<i64>,
    ) -> PyResult<Bound<'py, Self>> {
        let spec = sort_spec(key_or_list, direction)?;
        slf.get().unstarted()?.sort = Some(spec);
        Ok(slf.clone())
    }

    /// Skips the first `n` results.
    fn skip<'py>(slf: &Bound<'py, Self>, n: u64) -> PyResult<Bound<'py, Self>> {
        slf.get().unstarted()?.skip = n;
        Ok(slf.clone())
    }

    /// Returns at most `n` results (0: no limit).
    fn limit<'py>(slf: &Bound<'py, Self>, n: u64) -> PyResult<Bound<'py, Self>> {
        slf.get().unstarted()?.limit = n;
        Ok(slf.clone())
    }

    /// Runs the query and reports `{"plan": str, "examined": int,
    /// "keys_examined": int, "docs_examined": int, "returned": int,
    /// "sorted_in_memory": bool, "plan_cache_key": str | None,
    /// "from_plan_cache": bool}` (MongoDB's `planCacheKey`: the same for
    /// every query of one shape; `from_plan_cache`: the plan is the cached
    /// choice of an earlier query of that shape).
    fn explain<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (filter, opts) = {
            let st = lock(&self.state);
            (st.filter.clone(), st.options().map_err(Fail::into_py)?)
        };
        let e = view_op(py, &self.reads, &self.name, move |v| {
            Ok(v.explain(filter, opts)?)
        })?;
        let d = PyDict::new(py);
        d.set_item("plan", e.plan.to_string())?;
        d.set_item("examined", e.examined)?;
        d.set_item("keys_examined", e.keys_examined)?;
        d.set_item("docs_examined", e.docs_examined)?;
        d.set_item("returned", e.returned)?;
        d.set_item("sorted_in_memory", e.sorted_in_memory)?;
        d.set_item("plan_cache_key", e.plan_cache_key)?;
        d.set_item("from_plan_cache", e.from_plan_cache)?;
        Ok(d)
    }

    /// Every remaining document as a list.
    fn to_list(&self, py: Python<'_>) -> PyResult<Vec<PyObject>> {
        let mut out = Vec::new();
        while let Some(d) = self.__next__(py)? {
            out.push(d);
        }
        Ok(out)
    }

    /// Ends the cursor and releases its snapshot.
    fn close(&self) {
        let mut st = lock(&self.state);
        st.results = None;
        st.buf.clear();
        st.done = true;
    }

    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        // The snapshot to start from, taken with the GIL (only before the
        // first batch: a started cursor holds its own share of it).
        let start = {
            let st = lock(&self.state);
            if !st.buf.is_empty() || st.results.is_some() {
                None
            } else if st.done {
                return Ok(None);
            } else {
                Some(self.reads.start()?)
            }
        };
        let name = &self.name;
        let doc = py
            .allow_threads(|| -> FResult<Option<Document>> {
                let mut st = lock(&self.state);
                if st.buf.is_empty() && !st.done {
                    if st.results.is_none() {
                        let Some(start) = start else { return Ok(None) };
                        let opts = st.options()?;
                        let filter = st.filter.clone();
                        let r = View::new(start.snapshot()?, name).find_with(filter, opts)?;
                        st.results = Some(r);
                    }
                    let mut batch = Vec::new();
                    if let Some(r) = st.results.as_mut() {
                        for item in r.by_ref().take(CURSOR_BATCH) {
                            batch.push(item?);
                        }
                    }
                    if batch.len() < CURSOR_BATCH {
                        st.done = true;
                        st.results = None;
                    }
                    st.buf.extend(batch);
                }
                Ok(st.buf.pop_front())
            })
            .map_err(Fail::into_py)?;
        match doc {
            Some(d) => Ok(Some(document_to_dict(py, &d)?.into_any().unbind())),
            None => Ok(None),
        }
    }
}

// ---------------------------------------------------------------------------
// Collections inside a transaction

/// A collection inside a write transaction: its reads see the
/// transaction's own writes, and nothing is visible to others until the
/// transaction commits. Queries are planned as `Collection`'s (indexes
/// included) and return lists; `aggregate` and `distinct` scan.
#[pyclass(module = "cairndb", frozen)]
pub struct TxCollection {
    tx: Arc<TxInner>,
    name: String,
}

impl TxCollection {
    pub fn new(tx: Arc<TxInner>, name: String) -> Self {
        TxCollection { tx, name }
    }

    /// `update_one` / `update_many` / `replace_one` in the transaction.
    fn update(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        u: Update,
        upsert: bool,
        many: bool,
    ) -> PyResult<UpdateResult> {
        let f = filter_arg(Some(filter))?;
        let opts = UpdateOptions { upsert };
        let r = self.run(py, move |c| {
            Ok(if many {
                c.update_many(f, u, opts)?
            } else {
                c.update_one(f, u, opts)?
            })
        })?;
        update_result(py, r)
    }

    fn run<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&cairndb::document::TxnCollection<'_, Document>) -> FResult<R> + Send,
    ) -> PyResult<R> {
        let name = &self.name;
        in_txn(py, &self.tx, move |w| {
            let c = w.collection::<Document>(name);
            f(&c)
        })
    }
}

#[pymethods]
impl TxCollection {
    /// The collection's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// Inserts a document (see `Collection.insert_one`).
    fn insert_one(&self, py: Python<'_>, document: &Bound<'_, PyAny>) -> PyResult<InsertOneResult> {
        let doc = to_document(document, "a document")?;
        let id = self.run(py, move |c| Ok(c.insert(&doc)?))?;
        set_id(document, &id)?;
        Ok(InsertOneResult {
            inserted_id: from_value(py, &id)?,
        })
    }

    /// Inserts every document.
    fn insert_many(
        &self,
        py: Python<'_>,
        documents: &Bound<'_, PyAny>,
    ) -> PyResult<InsertManyResult> {
        let items: Vec<Bound<'_, PyAny>> = documents.try_iter()?.collect::<PyResult<_>>()?;
        let docs = items
            .iter()
            .map(|d| to_document(d, "a document"))
            .collect::<PyResult<Vec<_>>>()?;
        let ids = self.run(py, move |c| Ok(c.insert_many(docs.iter())?))?;
        let out = PyList::empty(py);
        for (d, id) in items.iter().zip(&ids) {
            set_id(d, id)?;
            out.append(from_value(py, id)?)?;
        }
        Ok(InsertManyResult {
            inserted_ids: out.into_any().unbind(),
        })
    }

    /// The documents matching `filter`, as this transaction sees them (a
    /// list); `projection`, `sort`, `skip` and `limit` as for
    /// `Collection.find`.
    #[pyo3(signature = (filter=None, projection=None, *, sort=None, skip=0, limit=0))]
    fn find(
        &self,
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
        skip: u64,
        limit: u64,
    ) -> PyResult<Vec<PyObject>> {
        let f = filter_arg(filter)?;
        let projection = match projection {
            Some(p) if !p.is_none() => Some(projection_spec(p)?),
            _ => None,
        };
        let sort = match sort {
            Some(s) if !s.is_none() => Some(sort_spec(s, None)?),
            _ => None,
        };
        let opts = find_options(projection, sort, skip, limit).map_err(Fail::into_py)?;
        let docs = self.run(py, move |c| Ok(c.find_with(f, opts)?))?;
        dicts(py, &docs)
    }

    /// The first document matching `filter` (in `sort` order if given), as
    /// this transaction sees it, or None.
    #[pyo3(signature = (filter=None, projection=None, *, sort=None))]
    fn find_one(
        &self,
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
        projection: Option<&Bound<'_, PyAny>>,
        sort: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        Ok(self
            .find(py, filter, projection, sort, 0, 1)?
            .into_iter()
            .next()
            .unwrap_or_else(|| py.None()))
    }

    /// Runs an aggregation pipeline on what this transaction sees (a
    /// scan; see `Collection.aggregate`).
    fn aggregate(&self, py: Python<'_>, pipeline: &Bound<'_, PyAny>) -> PyResult<Vec<PyObject>> {
        let p = pipeline_arg(pipeline)?;
        let docs = self.run(py, move |c| Ok(c.aggregate(p)?))?;
        dicts(py, &docs)
    }

    /// See `Collection.distinct`.
    #[pyo3(signature = (key, filter=None))]
    fn distinct(
        &self,
        py: Python<'_>,
        key: &str,
        filter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyObject>> {
        let f = filter_arg(filter)?;
        let key = key.to_string();
        let vals = self.run(py, move |c| Ok(c.distinct(&key, f)?))?;
        values(py, &vals)
    }

    /// How many documents match `filter`.
    #[pyo3(signature = (filter=None))]
    fn count_documents(
        &self,
        py: Python<'_>,
        filter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        Ok(self.find(py, filter, None, None, 0, 0)?.len())
    }

    /// See `Collection.update_one`.
    #[pyo3(signature = (filter, update, upsert=false))]
    fn update_one(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        update: &Bound<'_, PyAny>,
        upsert: bool,
    ) -> PyResult<UpdateResult> {
        self.update(py, filter, update_arg(update)?, upsert, false)
    }

    /// See `Collection.update_many`.
    #[pyo3(signature = (filter, update, upsert=false))]
    fn update_many(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        update: &Bound<'_, PyAny>,
        upsert: bool,
    ) -> PyResult<UpdateResult> {
        self.update(py, filter, update_arg(update)?, upsert, true)
    }

    /// See `Collection.replace_one`.
    #[pyo3(signature = (filter, replacement, upsert=false))]
    fn replace_one(
        &self,
        py: Python<'_>,
        filter: &Bound<'_, PyAny>,
        replacement: &Bound<'_, PyAny>,
        upsert: bool,
    ) -> PyResult<UpdateResult> {
        self.update(py, filter, replacement_arg(replacement)?, upsert, false)
    }

    /// Deletes every document matching `filter`.
    fn delete_many(&self, py: Python<'_>, filter: &Bound<'_, PyAny>) -> PyResult<DeleteResult> {
        let f = filter_arg(Some(filter))?;
        let n = self.run(py, move |c| Ok(c.delete_many(f)?))?;
        Ok(DeleteResult { deleted_count: n })
    }

    /// See `Collection.create_index`.
    #[pyo3(signature = (keys, *, unique=false, sparse=false, name=None, weights=None, default_language=None))]
    #[allow(clippy::too_many_arguments)]
    fn create_index(
        &self,
        py: Python<'_>,
        keys: &Bound<'_, PyAny>,
        unique: bool,
        sparse: bool,
        name: Option<String>,
        weights: Option<&Bound<'_, PyDict>>,
        default_language: Option<String>,
    ) -> PyResult<String> {
        if let Some(fields) = text_keys(keys)? {
            let fields = text_fields(fields, weights)?;
            let opts = TextIndexOptions {
                name,
                default_language,
            };
            let info = self.run(py, move |c| {
                let f: Vec<(&str, u32)> = fields.iter().map(|(p, w)| (p.as_str(), *w)).collect();
                Ok(c.create_text_index(&f, opts)?)
            })?;
            return Ok(info.name);
        }
        let fields = index_keys(keys)?;
        let opts = IndexOptions {
            name,
            unique,
            sparse,
        };
        let info = self.run(py, move |c| {
            let f: Vec<(&str, i8)> = fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
            Ok(c.create_index(&f, opts)?)
        })?;
        Ok(info.name)
    }

    fn __repr__(&self) -> String {
        format!("TxCollection({:?})", self.name)
    }
}
