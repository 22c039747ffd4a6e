//! Python values to and from document values, and the `ObjectId` class.
//!
//! Dates and UUIDs: a `datetime.datetime` is stored as a date (BSON's:
//! milliseconds since the Unix epoch, UTC). An aware datetime is converted
//! to UTC; a naive one is taken as UTC (as pymongo does); microseconds are
//! truncated to milliseconds toward the past (BSON keeps milliseconds).
//! Dates come back as timezone-aware datetimes in UTC (`tzinfo` is
//! `datetime.timezone.utc`): they compare and subtract with aware
//! datetimes, and `.replace(tzinfo=None)` gives pymongo's default naive
//! form. A stored date outside `datetime`'s years 1–9999 raises
//! `OverflowError` when read. A `uuid.UUID` is stored as a UUID (BSON
//! binary subtype 4) and comes back as a `uuid.UUID`.

use cairndb::document::{Document, ObjectId as RsObjectId, Value, MAX_DEPTH};
use pyo3::basic::CompareOp;
use pyo3::exceptions::{PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{
    PyBool, PyByteArray, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType,
};
use pyo3::BoundObject;

use crate::errors::doc_err;

/// Any value as a Python object (`None` if the conversion fails, which the
/// types used here never do).
pub fn obj<'py, T: IntoPyObject<'py>>(py: Python<'py>, v: T) -> PyObject {
    v.into_pyobject(py)
        .map(|o| o.into_any().unbind())
        .unwrap_or_else(|_| py.None())
}

/// A 12-byte document id, as the engine generates for documents inserted
/// without an `_id`: 4 bytes of seconds, 5 random bytes, 3 bytes of a
/// counter (MongoDB's layout). `ObjectId()` makes a new one;
/// `ObjectId("65a1...")` parses 24 hex digits. `str(oid)` is the hex form.
#[pyclass(module = "cairndb", frozen)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ObjectId(pub RsObjectId);

#[pymethods]
impl ObjectId {
    #[new]
    #[pyo3(signature = (hex=None))]
    fn new(hex: Option<&str>) -> PyResult<Self> {
        match hex {
            None => Ok(ObjectId(RsObjectId::new())),
            Some(h) => RsObjectId::parse_hex(h).map(ObjectId).map_err(doc_err),
        }
    }

    /// The 24-digit lowercase hex form.
    #[getter]
    fn hex(&self) -> String {
        self.0.to_hex()
    }

    /// When the id was generated, in milliseconds since the Unix epoch
    /// (second resolution).
    #[getter]
    fn timestamp_millis(&self) -> u64 {
        self.0.timestamp_millis()
    }

    fn __str__(&self) -> String {
        self.0.to_hex()
    }

    fn __repr__(&self) -> String {
        format!("ObjectId('{}')", self.0.to_hex())
    }

    fn __richcmp__(&self, other: &Bound<'_, PyAny>, op: CompareOp) -> PyResult<PyObject> {
        let py = other.py();
        let Ok(o) = other.downcast::<ObjectId>() else {
            return Ok(py.NotImplemented());
        };
        let (a, b) = (self.0, o.get().0);
        Ok(obj(py, op.matches(a.cmp(&b))))
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.0.hash(&mut h);
        h.finish()
    }
}

static DATETIME: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static UUID: GILOnceCell<Py<PyType>> = GILOnceCell::new();
static TIMEDELTA: GILOnceCell<Py<PyType>> = GILOnceCell::new();
/// 1970-01-01T00:00:00 in UTC (aware) and naive.
static EPOCH_UTC: GILOnceCell<PyObject> = GILOnceCell::new();
static EPOCH_NAIVE: GILOnceCell<PyObject> = GILOnceCell::new();

fn epoch<'py>(py: Python<'py>, aware: bool) -> PyResult<&'py Bound<'py, PyAny>> {
    let cell = if aware { &EPOCH_UTC } else { &EPOCH_NAIVE };
    let e = cell.get_or_try_init(py, || -> PyResult<PyObject> {
        let dt = DATETIME.import(py, "datetime", "datetime")?;
        let tz = if aware {
            py.import("datetime")?.getattr("timezone")?.getattr("utc")?
        } else {
            py.None().into_bound(py)
        };
        Ok(dt.call1((1970, 1, 1, 0, 0, 0, 0, tz))?.unbind())
    })?;
    Ok(e.bind(py))
}

/// A `datetime.datetime` as milliseconds since the Unix epoch (naive: UTC;
/// sub-millisecond digits truncated toward the past, as BSON).
fn datetime_ms(v: &Bound<'_, PyAny>) -> PyResult<i64> {
    let py = v.py();
    let aware = !v.getattr("tzinfo")?.is_none() && !v.call_method0("utcoffset")?.is_none();
    let delta = v.sub(epoch(py, aware)?)?;
    let days: i64 = delta.getattr("days")?.extract()?;
    let secs: i64 = delta.getattr("seconds")?.extract()?;
    let micros: i64 = delta.getattr("microseconds")?.extract()?;
    // timedelta keeps seconds and microseconds non-negative, so integer
    // division floors; datetime's range (years 1-9999) fits i64 ms.
    Ok(days * 86_400_000 + secs * 1000 + micros.div_euclid(1000))
}

/// A date as an aware UTC `datetime.datetime`.
fn date_to_py(py: Python<'_>, ms: i64) -> PyResult<PyObject> {
    let td = TIMEDELTA.import(py, "datetime", "timedelta")?;
    let kwargs = PyDict::new(py);
    kwargs.set_item("milliseconds", ms)?;
    let out = td
        .call((), Some(&kwargs))
        .and_then(|d| epoch(py, true)?.add(d));
    out.map(Bound::unbind).map_err(|_| {
        PyOverflowError::new_err(format!(
            "the stored date {ms} ms since 1970 is outside datetime's range (years 1-9999)"
        ))
    })
}

/// A Python value as a document value. `depth` guards against cycles and
/// nesting past the engine's limit.
pub fn to_value(v: &Bound<'_, PyAny>, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "value nested deeper than {MAX_DEPTH} levels (or a cycle)"
        )));
    }
    if v.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = v.downcast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if v.is_instance_of::<PyInt>() {
        return match v.extract::<i64>() {
            Ok(i) => Ok(Value::Int(i)),
            Err(_) => Err(PyOverflowError::new_err(format!(
                "integer {} does not fit in 64 bits (the document integer range is -2**63 .. 2**63-1)",
                v.str().map(|s| s.to_string()).unwrap_or_default()
            ))),
        };
    }
    if let Ok(f) = v.downcast::<PyFloat>() {
        return Ok(Value::Float(f.value()));
    }
    if let Ok(s) = v.downcast::<PyString>() {
        return Ok(Value::String(s.to_cow()?.to_string()));
    }
    if let Ok(b) = v.downcast::<PyBytes>() {
        return Ok(Value::Binary(b.as_bytes().to_vec()));
    }
    if let Ok(b) = v.downcast::<PyByteArray>() {
        return Ok(Value::Binary(b.to_vec()));
    }
    if let Ok(o) = v.downcast::<ObjectId>() {
        return Ok(Value::Id(o.get().0));
    }
    if let Ok(d) = v.downcast::<PyDict>() {
        return Ok(Value::Object(dict_to_document(d, depth)?));
    }
    if let Ok(l) = v.downcast::<PyList>() {
        return l
            .iter()
            .map(|x| to_value(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    if let Ok(t) = v.downcast::<PyTuple>() {
        return t
            .iter()
            .map(|x| to_value(&x, depth + 1))
            .collect::<PyResult<Vec<_>>>()
            .map(Value::Array);
    }
    // (Tested after the containers: an import lookup and an `isinstance`
    // each, which nested dicts and lists need not pay.)
    let py = v.py();
    if v.is_instance(DATETIME.import(py, "datetime", "datetime")?)? {
        return datetime_ms(v).map(Value::Date);
    }
    if v.is_instance(UUID.import(py, "uuid", "UUID")?)? {
        let b = v.getattr("bytes")?;
        let bytes: &[u8] = b.downcast::<PyBytes>()?.as_bytes();
        return <[u8; 16]>::try_from(bytes)
            .map(Value::Uuid)
            .map_err(|_| PyValueError::new_err("uuid.UUID.bytes is not 16 bytes"));
    }
    let tn = v
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into());
    Err(PyTypeError::new_err(format!(
        "cannot store a value of type {tn} in a document (supported: dict, list, tuple, str, int, float, bool, None, bytes, bytearray, ObjectId, datetime.datetime, uuid.UUID)"
    )))
}

/// A dict as a document (keys must be strings).
pub fn dict_to_document(d: &Bound<'_, PyDict>, depth: usize) -> PyResult<Document> {
    let mut doc = Document::with_capacity(d.len());
    for (k, x) in d.iter() {
        let Ok(key) = k.downcast::<PyString>() else {
            return Err(PyTypeError::new_err(format!(
                "document keys must be str, not {}",
                k.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            )));
        };
        doc.insert(key.to_cow()?.to_string(), to_value(&x, depth + 1)?);
    }
    Ok(doc)
}

/// A Python object that must be a dict (a document, filter, update).
pub fn to_document(v: &Bound<'_, PyAny>, what: &str) -> PyResult<Document> {
    match v.downcast::<PyDict>() {
        Ok(d) => dict_to_document(d, 0),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{what} must be a dict, not {}",
            v.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))),
    }
}

/// A document value as a Python object.
pub fn from_value(py: Python<'_>, v: &Value) -> PyResult<PyObject> {
    Ok(match v {
        Value::Null => py.None(),
        Value::Bool(b) => obj(py, *b),
        Value::Int(i) => obj(py, *i),
        Value::Float(f) => obj(py, *f),
        Value::String(s) => obj(py, s.as_str()),
        Value::Binary(b) => PyBytes::new(py, b).into_any().unbind(),
        Value::Id(id) => Py::new(py, ObjectId(*id))?.into_any(),
        Value::Date(ms) => date_to_py(py, *ms)?,
        Value::Uuid(u) => {
            let kwargs = PyDict::new(py);
            kwargs.set_item("bytes", PyBytes::new(py, u))?;
            UUID.import(py, "uuid", "UUID")?
                .call((), Some(&kwargs))?
                .unbind()
        }
        Value::Array(a) => {
            let l = PyList::empty(py);
            for x in a {
                l.append(from_value(py, x)?)?;
            }
            l.into_any().unbind()
        }
        Value::Object(d) => document_to_dict(py, d)?.into_any().unbind(),
    })
}

/// A document as a dict.
pub fn document_to_dict<'py>(py: Python<'py>, d: &Document) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    for (k, x) in d.iter() {
        out.set_item(k, from_value(py, x)?)?;
    }
    Ok(out)
}
