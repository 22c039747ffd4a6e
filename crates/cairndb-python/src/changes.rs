//! Change streams of collections (`collection.watch()`), shaped as
//! pymongo's `ChangeStream`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use cairndb::document::{
    ChangeStreamOptions, Document, FullDocument, Pipeline, ResumeToken, Value,
};
use cairndb::Database as RsDatabase;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

use crate::convert::{document_to_dict, to_value};
use crate::db::{lock, Fail};
use crate::errors::{doc_err, ClosedError};
use crate::wait::{self, Slice};

self_cell::self_cell!(
    /// An engine change stream together with the database handle it
    /// borrows.
    struct StreamCell {
        owner: Arc<RsDatabase>,
        #[covariant]
        dependent: EngineStream,
    }
);

type EngineStream<'a> = cairndb::document::ChangeStream<'a>;

/// A resume token argument: the event's `_id` (`{"_data": "<hex>"}`, as
/// pymongo passes it) or the hex string.
fn token_arg(v: &Bound<'_, PyAny>, what: &str) -> PyResult<ResumeToken> {
    let text = if let Ok(s) = v.downcast::<PyString>() {
        s.to_cow()?.to_string()
    } else if let Ok(d) = v.downcast::<PyDict>() {
        match d.get_item("_data")? {
            Some(s) => s
                .extract::<String>()
                .map_err(|_| PyTypeError::new_err(format!("{what}: \"_data\" must be a str")))?,
            None => {
                return Err(PyTypeError::new_err(format!(
                "{what} must be a change event's _id ({{\"_data\": \"<hex>\"}}) or its hex string"
            )))
            }
        }
    } else {
        return Err(PyTypeError::new_err(format!(
            "{what} must be a change event's _id ({{\"_data\": \"<hex>\"}}) or its hex string"
        )));
    };
    ResumeToken::parse(&text).map_err(doc_err)
}

/// `watch`'s options.
pub fn options(
    resume_after: Option<&Bound<'_, PyAny>>,
    start_after: Option<&Bound<'_, PyAny>>,
    full_document: Option<&str>,
) -> PyResult<ChangeStreamOptions> {
    let full_document = match full_document {
        None | Some("default") => FullDocument::Default,
        Some("updateLookup") => FullDocument::UpdateLookup,
        Some(other) => {
            return Err(PyValueError::new_err(format!(
                "full_document must be \"default\" or \"updateLookup\", not {other:?}"
            )))
        }
    };
    Ok(ChangeStreamOptions {
        full_document,
        resume_after: resume_after
            .map(|t| token_arg(t, "resume_after"))
            .transpose()?,
        start_after: start_after
            .map(|t| token_arg(t, "start_after"))
            .transpose()?,
    })
}

/// A pipeline over change events: a list of stage dicts (or None).
pub fn pipeline(p: Option<&Bound<'_, PyAny>>) -> PyResult<Pipeline> {
    let none = || Pipeline::from_value(Value::Array(Vec::new())).map_err(doc_err);
    let Some(p) = p else {
        return none();
    };
    if p.is_none() {
        return none();
    }
    if p.downcast::<PyDict>().is_ok() || p.downcast::<PyString>().is_ok() {
        return Err(PyTypeError::new_err(
            "watch takes a pipeline: a list of stage dicts",
        ));
    }
    let stages = p
        .try_iter()
        .map_err(|_| PyTypeError::new_err("watch takes a pipeline: a list of stage dicts"))?
        .map(|s| to_value(&s?, 1))
        .collect::<PyResult<Vec<_>>>()?;
    Pipeline::from_value(Value::Array(stages)).map_err(doc_err)
}

/// A collection's changes in commit order, as pymongo's `ChangeStream`:
/// iterating yields change events as dicts (`_id` — the resume token
/// `{"_data": "<hex>"}` —, `operationType`, `clusterTime` (the change
/// log position), `wallTime` (milliseconds since the Unix epoch), `ns`,
/// `documentKey`, `fullDocument`, `updateDescription`, `to`), blocking
/// without the GIL until the next one (Ctrl-C raises KeyboardInterrupt);
/// iteration ends after an `invalidate` event (the collection dropped,
/// renamed or its change stream turned off) or `close()`. `try_next()`
/// waits at most `max_await_time_ms` (or the `timeout` given) and returns
/// None if nothing came. `resume_token` is where a new stream resumes
/// (`collection.watch(resume_after=stream.resume_token)`), across a reopen
/// of the file too. Made by `collection.watch()`.
#[pyclass(module = "cairndb", frozen)]
pub struct ChangeStream {
    cell: Mutex<Option<StreamCell>>,
    closed: AtomicBool,
    /// `try_next`'s wait, by default.
    max_await: Duration,
}

impl ChangeStream {
    /// Opens the engine stream (the GIL released by the caller).
    pub fn open(
        db: Arc<RsDatabase>,
        name: String,
        pipeline: Pipeline,
        opts: ChangeStreamOptions,
        max_await: Duration,
    ) -> Result<Self, Fail> {
        let cell = StreamCell::try_new(db, |db| {
            db.collection::<Document>(&name).watch_with(pipeline, opts)
        })?;
        Ok(ChangeStream {
            cell: Mutex::new(Some(cell)),
            closed: AtomicBool::new(false),
            max_await,
        })
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The next event, waiting up to `timeout` (None: until one comes or
    /// the stream ends).
    fn next_event(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<Option<PyObject>> {
        let ev = wait::in_slices(py, timeout, &self.closed, |slice| {
            let mut g = lock(&self.cell);
            let Some(c) = g.as_mut() else {
                return Ok(Slice::End);
            };
            c.with_dependent_mut(|_, s| {
                Ok(match s.next_timeout(slice)? {
                    Some(ev) => Slice::Item(ev),
                    None if s.is_ended() => Slice::End,
                    None => Slice::Nothing,
                })
            })
        })?;
        ev.map(|ev| Ok(document_to_dict(py, &ev)?.into_any().unbind()))
            .transpose()
    }

    /// `f` on the engine stream (`None` once closed), the lock taken
    /// without the GIL: a `next` in another thread holds it for up to one
    /// wait slice, and other Python threads must run meanwhile.
    fn with_stream<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(Option<&EngineStream<'_>>) -> T + Send,
    ) -> T {
        py.allow_threads(|| {
            let g = lock(&self.cell);
            f(g.as_ref().map(|c| c.borrow_dependent()))
        })
    }

    fn check_open(&self) -> PyResult<()> {
        if self.is_closed() {
            Err(ClosedError::new_err("the change stream is closed"))
        } else {
            Ok(())
        }
    }
}

#[pymethods]
impl ChangeStream {
    fn __iter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<PyObject>> {
        self.next_event(py, None)
    }

    /// The next change event, waiting for it (at most `timeout` seconds if
    /// given: then None if none came); raises StopIteration once the stream
    /// has ended (after `invalidate`) or was closed.
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<PyObject> {
        self.check_open()?;
        let t = timeout.map(wait::timeout_arg).transpose()?;
        match self.next_event(py, t)? {
            Some(ev) => Ok(ev),
            None if t.is_some() && !self.ended(py) => Ok(py.None()),
            None => Err(pyo3::exceptions::PyStopIteration::new_err(())),
        }
    }

    /// The next change event if one comes within `timeout` seconds
    /// (default: the stream's `max_await_time_ms`, 0 unless given to
    /// `watch`), else None (pymongo's `try_next`).
    #[pyo3(signature = (timeout=None))]
    fn try_next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<PyObject>> {
        self.check_open()?;
        let t = match timeout {
            Some(s) => wait::timeout_arg(s)?,
            None => self.max_await,
        };
        self.next_event(py, Some(t))
    }

    /// The token to resume after the last event returned, as an event's
    /// `_id`: `{"_data": "<hex>"}` (pymongo's `resume_token`).
    #[getter]
    fn resume_token<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        match self.with_stream(py, |s| s.map(|s| s.resume_token().to_hex())) {
            Some(hex) => {
                let d = PyDict::new(py);
                d.set_item("_data", hex)?;
                Ok(d)
            }
            None => Err(ClosedError::new_err("the change stream is closed")),
        }
    }

    /// Whether the stream can still return events: not closed, and its
    /// `invalidate` not yet returned (pymongo's `alive`).
    #[getter]
    fn alive(&self, py: Python<'_>) -> bool {
        !self.is_closed() && !self.ended(py)
    }

    /// Ends the stream (a `next` waiting in another thread returns within
    /// about 100 ms; iteration ends). Other Python threads run while it
    /// waits for that `next` to let go of the stream.
    fn close(&self, py: Python<'_>) {
        self.closed.store(true, Ordering::Release);
        // The engine stream is dropped without the GIL too.
        py.allow_threads(|| drop(lock(&self.cell).take()));
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.close(_args.py());
        false
    }

    /// `async for change in stream:` waits for each change in the event
    /// loop's default executor (never blocking the loop); it ends when the
    /// stream ends or is closed.
    fn __aiter__(slf: &Bound<'_, Self>) -> PyResult<PyObject> {
        let py = slf.py();
        Ok(py
            .import("cairndb._aio")?
            .getattr("changes")?
            .call1((slf,))?
            .unbind())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        match self.with_stream(py, |s| s.map(|s| s.resume_token().to_hex())) {
            Some(hex) => format!("ChangeStream(resume_token={hex:?})"),
            None => "ChangeStream(closed)".to_string(),
        }
    }
}

impl ChangeStream {
    fn ended(&self, py: Python<'_>) -> bool {
        self.with_stream(py, |s| s.is_none_or(|s| s.is_ended()))
    }
}
