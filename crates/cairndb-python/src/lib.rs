//! Python bindings for CairnDB: the native module `cairndb._native`, which
//! the `cairndb` package (python/cairndb) re-exports. A thin layer over the
//! engine's public API: every call converts its Python arguments, releases
//! the GIL while the engine works, and converts the result back. Errors
//! become the exception hierarchy under `cairndb.Error` (errors.rs).
//!
//! Soundness: nothing here holds a borrow of a Python-owned object across
//! the GIL release; transactions are owned by the engine (`WriteTransaction`
//! and `ReadTransaction` hold the database's shared state by `Arc`), and the
//! one type that borrows the database (`events::Subscription`) is stored
//! with its owner in a `self_cell`.

#![deny(unsafe_code)]

mod changes;
mod collection;
mod convert;
mod db;
mod errors;
mod events;
mod wait;

use pyo3::prelude::*;

/// Opens (creating if missing, unless `create=False`) the database at
/// `path`; keyword options as for `Database`.
#[pyfunction]
#[pyo3(signature = (path, **options))]
fn open(
    py: Python<'_>,
    path: &Bound<'_, PyAny>,
    options: Option<&Bound<'_, pyo3::types::PyDict>>,
) -> PyResult<PyObject> {
    let cls = py.get_type::<db::Database>();
    Ok(cls.call((path,), options)?.unbind())
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    errors::register(m)?;
    m.add_class::<db::Database>()?;
    m.add_class::<db::Transaction>()?;
    m.add_class::<db::Snapshot>()?;
    m.add_class::<db::Table>()?;
    m.add_class::<db::RangeIter>()?;
    m.add_class::<collection::Collection>()?;
    m.add_class::<collection::TxCollection>()?;
    m.add_class::<collection::SnapshotCollection>()?;
    m.add_class::<collection::Cursor>()?;
    m.add_class::<changes::ChangeStream>()?;
    m.add_class::<collection::InsertOneResult>()?;
    m.add_class::<collection::InsertManyResult>()?;
    m.add_class::<collection::UpdateResult>()?;
    m.add_class::<collection::DeleteResult>()?;
    m.add_class::<collection::BulkUpsertResult>()?;
    m.add_class::<convert::ObjectId>()?;
    m.add_class::<events::AppendResult>()?;
    m.add_class::<events::RecordedEvent>()?;
    m.add_class::<events::Subscription>()?;
    m.add_class::<events::LoadedStream>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(db::_rust_timed_gets, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
