//! The exception hierarchy under `cairndb.Error`, and the mapping of the
//! engine's typed errors onto it.

use cairndb::document::DocumentError as RsDocErr;
use cairndb::events::EventError as RsEvErr;
use cairndb::CoreError;
use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;

create_exception!(
    _native,
    Error,
    PyException,
    "The base of every error CairnDB raises."
);
create_exception!(
    _native,
    StorageError,
    Error,
    "The device or file system failed (the handle may then be poisoned)."
);
create_exception!(
    _native,
    CorruptionError,
    Error,
    "The file failed a checksum or structural check; `page` and `offset` say where."
);
create_exception!(
    _native,
    PoisonedError,
    Error,
    "An earlier write or sync failed: reopen the database to recover."
);
create_exception!(
    _native,
    DatabaseLockedError,
    Error,
    "Another process or handle holds the database file's lock."
);
create_exception!(
    _native,
    NotADatabaseError,
    Error,
    "The file is not a CairnDB database, or uses a newer format."
);
create_exception!(
    _native,
    DatabaseNotFoundError,
    Error,
    "The database file does not exist (opened with create=False)."
);
create_exception!(
    _native,
    LimitError,
    Error,
    "A documented limit was exceeded (key, value, document, file size, readers)."
);
create_exception!(
    _native,
    ReadOnlyError,
    Error,
    "A write was attempted on a database opened read-only."
);
create_exception!(
    _native,
    TableTypeError,
    Error,
    "A table was opened with other key or value types than it holds."
);
create_exception!(
    _native,
    TransactionError,
    Error,
    "A transaction cannot go on: finished, failed part-way, busy, or readers are alive."
);
create_exception!(
    _native,
    InvalidArgumentError,
    Error,
    "An option, table name or argument is invalid."
);
create_exception!(
    _native,
    ClosedError,
    Error,
    "The database (or cursor, snapshot, subscription) was closed."
);
create_exception!(
    _native,
    DocumentError,
    Error,
    "The document layer: bad documents, collections and indexes."
);
create_exception!(
    _native,
    DuplicateKeyError,
    DocumentError,
    "A write would give `_id` or a unique index a second entry with the same value."
);
create_exception!(
    _native,
    InvalidQueryError,
    DocumentError,
    "A filter, update, projection or sort specification does not parse or apply."
);
create_exception!(
    _native,
    ChangeStreamError,
    DocumentError,
    "A change stream cannot be opened or go on: the collection's change stream is off, a resume token is malformed or of another collection, or a pipeline changed an event's _id."
);
create_exception!(
    _native,
    ChangeStreamHistoryLostError,
    ChangeStreamError,
    "The change log no longer holds the position a change stream needs (MongoDB's ChangeStreamHistoryLost); `position` and `oldest` say which."
);
create_exception!(
    _native,
    EventError,
    Error,
    "The event layer: streams and events."
);
create_exception!(
    _native,
    WrongExpectedVersionError,
    EventError,
    "An append's or delete's expected version does not match the stream."
);
create_exception!(
    _native,
    StreamDeletedError,
    EventError,
    "The stream was hard-deleted (tombstoned)."
);
create_exception!(
    _native,
    IdempotencyConflictError,
    EventError,
    "An append repeats the first events of an earlier one (same event ids) but not all: neither a retry nor new events; nothing was written."
);
create_exception!(
    _native,
    StreamNotFoundError,
    EventError,
    "The stream does not exist."
);

/// Registers the exception classes in the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("Error", py.get_type::<Error>())?;
    m.add("StorageError", py.get_type::<StorageError>())?;
    m.add("CorruptionError", py.get_type::<CorruptionError>())?;
    m.add("PoisonedError", py.get_type::<PoisonedError>())?;
    m.add("DatabaseLockedError", py.get_type::<DatabaseLockedError>())?;
    m.add("NotADatabaseError", py.get_type::<NotADatabaseError>())?;
    m.add(
        "DatabaseNotFoundError",
        py.get_type::<DatabaseNotFoundError>(),
    )?;
    m.add("LimitError", py.get_type::<LimitError>())?;
    m.add("ReadOnlyError", py.get_type::<ReadOnlyError>())?;
    m.add("TableTypeError", py.get_type::<TableTypeError>())?;
    m.add("TransactionError", py.get_type::<TransactionError>())?;
    m.add(
        "InvalidArgumentError",
        py.get_type::<InvalidArgumentError>(),
    )?;
    m.add("ClosedError", py.get_type::<ClosedError>())?;
    m.add("DocumentError", py.get_type::<DocumentError>())?;
    m.add("DuplicateKeyError", py.get_type::<DuplicateKeyError>())?;
    m.add("InvalidQueryError", py.get_type::<InvalidQueryError>())?;
    m.add("ChangeStreamError", py.get_type::<ChangeStreamError>())?;
    m.add(
        "ChangeStreamHistoryLostError",
        py.get_type::<ChangeStreamHistoryLostError>(),
    )?;
    // MongoDB's name for the same error.
    m.add(
        "ChangeStreamHistoryLost",
        py.get_type::<ChangeStreamHistoryLostError>(),
    )?;
    m.add("EventError", py.get_type::<EventError>())?;
    m.add(
        "IdempotencyConflictError",
        py.get_type::<IdempotencyConflictError>(),
    )?;
    m.add(
        "WrongExpectedVersionError",
        py.get_type::<WrongExpectedVersionError>(),
    )?;
    m.add("StreamDeletedError", py.get_type::<StreamDeletedError>())?;
    m.add("StreamNotFoundError", py.get_type::<StreamNotFoundError>())?;
    Ok(())
}

/// Sets attributes on a fresh exception; attribute errors are ignored (the
/// message already carries the same facts).
fn with_attrs(err: PyErr, attrs: &[(&str, PyObject)]) -> PyErr {
    Python::with_gil(|py| {
        let v = err.value(py);
        for (k, a) in attrs {
            let _ = v.setattr(*k, a.clone_ref(py));
        }
    });
    err
}

/// The Python exception for a core error.
pub fn core_err(e: CoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        CoreError::Storage(_) | CoreError::CannotOpen { .. } => StorageError::new_err(msg),
        CoreError::Corruption(c) => Python::with_gil(|py| {
            with_attrs(
                CorruptionError::new_err(msg),
                &[
                    ("page", crate::convert::obj(py, c.page.0)),
                    ("offset", crate::convert::obj(py, c.offset)),
                ],
            )
        }),
        CoreError::Poisoned { .. } => PoisonedError::new_err(msg),
        CoreError::NotADatabase { .. } | CoreError::UnsupportedVersion { .. } => {
            NotADatabaseError::new_err(msg)
        }
        CoreError::DatabaseLocked { .. } => DatabaseLockedError::new_err(msg),
        CoreError::NotFound { .. } => DatabaseNotFoundError::new_err(msg),
        CoreError::KeyTooLarge { .. }
        | CoreError::ValueTooLarge { .. }
        | CoreError::FileSizeLimit { .. }
        | CoreError::TooManyReaders { .. } => LimitError::new_err(msg),
        CoreError::ReadOnly => ReadOnlyError::new_err(msg),
        CoreError::TableTypeMismatch(_) | CoreError::Decode { .. } => TableTypeError::new_err(msg),
        CoreError::TableAlreadyOpen(_)
        | CoreError::ReadersActive(_)
        | CoreError::TransactionFailed { .. }
        | CoreError::TransactionBusy => TransactionError::new_err(msg),
        CoreError::InvalidTableName { .. } | CoreError::InvalidOption(_) => {
            InvalidArgumentError::new_err(msg)
        }
        _ => Error::new_err(msg),
    }
}

/// `err` with a pipeline error's `stage` and `operator` as attributes.
fn with_stage(err: PyErr, stage: usize, operator: String) -> PyErr {
    Python::with_gil(|py| {
        with_attrs(
            err,
            &[
                ("stage", crate::convert::obj(py, stage)),
                ("operator", crate::convert::obj(py, operator)),
            ],
        )
    })
}

/// The Python exception for a document-layer error.
pub fn doc_err(e: RsDocErr) -> PyErr {
    let msg = e.to_string();
    match e {
        RsDocErr::Core(c) => core_err(c),
        RsDocErr::DuplicateKey {
            collection,
            index,
            value,
            ..
        } => Python::with_gil(|py| {
            with_attrs(
                DuplicateKeyError::new_err(msg),
                &[
                    ("collection", crate::convert::obj(py, collection)),
                    ("index", crate::convert::obj(py, index)),
                    ("value", crate::convert::obj(py, value)),
                ],
            )
        }),
        RsDocErr::DocumentTooLarge { .. }
        | RsDocErr::IdTooLarge { .. }
        | RsDocErr::DepthLimit { .. }
        | RsDocErr::TooLarge => LimitError::new_err(msg),
        RsDocErr::InvalidPath { .. }
        | RsDocErr::MalformedJson { .. }
        | RsDocErr::UnknownOperator { .. }
        | RsDocErr::InvalidOperand { .. }
        | RsDocErr::InvalidQuery { .. }
        | RsDocErr::InvalidUpdate { .. }
        | RsDocErr::UpdateConflict { .. }
        | RsDocErr::NotTraversable { .. }
        | RsDocErr::FieldType { .. }
        | RsDocErr::IntegerOverflow { .. }
        | RsDocErr::ImmutableId
        | RsDocErr::InvalidProjection { .. }
        | RsDocErr::InvalidSort { .. }
        | RsDocErr::TextIndexRequired { .. } => InvalidQueryError::new_err(msg),
        RsDocErr::InvalidCollectionName { .. } => InvalidArgumentError::new_err(msg),
        RsDocErr::Pipeline {
            stage, operator, ..
        } => with_stage(InvalidQueryError::new_err(msg), stage, operator),
        RsDocErr::PipelineMemoryLimit {
            stage, operator, ..
        } => with_stage(LimitError::new_err(msg), stage, operator),
        RsDocErr::ChangeStreamHistoryLost {
            collection,
            position,
            oldest,
        } => Python::with_gil(|py| {
            with_attrs(
                ChangeStreamHistoryLostError::new_err(msg),
                &[
                    ("collection", crate::convert::obj(py, collection)),
                    ("position", crate::convert::obj(py, position)),
                    ("oldest", crate::convert::obj(py, oldest)),
                ],
            )
        }),
        RsDocErr::ChangeStreamNotEnabled { .. }
        | RsDocErr::InvalidResumeToken { .. }
        | RsDocErr::ResumeTokenOtherCollection { .. }
        | RsDocErr::ChangeStreamFatal { .. } => ChangeStreamError::new_err(msg),
        _ => DocumentError::new_err(msg),
    }
}

/// The Python exception for an event-layer error.
pub fn event_err(e: RsEvErr) -> PyErr {
    let msg = e.to_string();
    match e {
        RsEvErr::Core(c) => core_err(c),
        RsEvErr::Payload(d) => doc_err(d),
        RsEvErr::WrongExpectedVersion {
            stream,
            expected,
            actual,
        } => Python::with_gil(|py| {
            with_attrs(
                WrongExpectedVersionError::new_err(msg),
                &[
                    ("stream", crate::convert::obj(py, stream)),
                    ("expected", crate::convert::obj(py, expected)),
                    (
                        "actual",
                        match actual {
                            Some(v) => crate::convert::obj(py, v.0),
                            None => py.None(),
                        },
                    ),
                ],
            )
        }),
        RsEvErr::IdempotencyConflict {
            stream,
            repeated,
            count,
            version,
        } => Python::with_gil(|py| {
            with_attrs(
                IdempotencyConflictError::new_err(msg),
                &[
                    ("stream", crate::convert::obj(py, stream)),
                    ("repeated", crate::convert::obj(py, repeated)),
                    ("count", crate::convert::obj(py, count)),
                    ("version", crate::convert::obj(py, version.0)),
                ],
            )
        }),
        RsEvErr::StreamDeleted(_) => StreamDeletedError::new_err(msg),
        RsEvErr::StreamNotFound(_) => StreamNotFoundError::new_err(msg),
        RsEvErr::InvalidStreamName { .. } | RsEvErr::InvalidEvent { .. } => {
            InvalidArgumentError::new_err(msg)
        }
        _ => EventError::new_err(msg),
    }
}

/// The Python exception for any engine error.
pub fn any_err<E: Into<cairndb::Error>>(e: E) -> PyErr {
    match e.into() {
        cairndb::Error::Core(c) => core_err(c),
        cairndb::Error::Document(d) => doc_err(d),
        cairndb::Error::Event(v) => event_err(v),
        e => Error::new_err(e.to_string()),
    }
}
