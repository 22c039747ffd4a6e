//! Query commands on collections: `find`, `count`, `aggregate`,
//! `distinct`, `update`, `delete`.
//! Filters, sort specs, projections and updates are MongoDB-style JSON
//! (see `cairndb::document::filter` and `cairndb::document::update`).

use std::io::Write;
use std::path::Path;

use cairndb::document::query::{FindOptions, UpdateOptions};
use cairndb::document::{AggregateExplain, DocumentError, Update, Value};

use crate::docstore::{with_docs, Access, Docs};
use crate::{CliError, Res};

fn json(text: &str, what: &str) -> Result<serde_json::Value, CliError> {
    serde_json::from_str(text)
        .map_err(|e| CliError::User(format!("the {what} is not valid JSON: {e}")))
}

/// Refuses a collection the database does not hold (a misspelled name
/// would otherwise read as an empty collection), naming the ones it
/// holds.
pub(crate) fn existing(docs: &dyn Docs, collection: &str) -> Res {
    let names = docs.list_collections()?;
    if names.iter().any(|n| n == collection) {
        return Ok(());
    }
    let holder = docs.holder();
    Err(CliError::User(if names.is_empty() {
        format!("no collection {collection:?}: {holder} holds none")
    } else {
        format!(
            "no collection {collection:?}; {holder} holds: {}",
            names.join(", ")
        )
    }))
}

/// Runs `f` on the collections of `path` (a file opened as `access` says,
/// or an etcd:// URL's prefix) once `collection` is found there (see
/// [`existing`]).
fn on_existing<T>(
    path: &Path,
    collection: &str,
    access: Access,
    f: impl FnOnce(&dyn Docs) -> Result<T, CliError>,
) -> Result<T, CliError> {
    with_docs(path, access, |docs| {
        existing(docs, collection)?;
        f(docs)
    })
}

/// The options of `cairn find`.
pub struct FindArgs<'a> {
    /// A sort spec (JSON).
    pub sort: Option<&'a str>,
    /// At most this many documents (0: no limit).
    pub limit: Option<u64>,
    /// Documents skipped first.
    pub skip: u64,
    /// A projection (JSON).
    pub project: Option<&'a str>,
    /// An index name or key pattern (JSON), as MongoDB's `hint`.
    pub hint: Option<&'a str>,
    /// Print the plan and what it read instead of the documents.
    pub explain: bool,
}

/// `cairn find`.
pub fn find(
    path: &Path,
    collection: &str,
    filter: &str,
    args: FindArgs<'_>,
    out: &mut impl Write,
) -> Res {
    let FindArgs {
        sort,
        limit,
        skip,
        project,
        hint,
        explain,
    } = args;
    let filter = json(filter, "filter")?;
    let mut opts = FindOptions::new().skip(skip);
    // As MongoDB's: a limit of 0 is no limit.
    if let Some(n) = limit.filter(|&n| n > 0) {
        opts = opts.limit(n);
    }
    if let Some(s) = sort {
        opts = opts.sort(json(s, "sort spec")?)?;
    }
    if let Some(p) = project {
        opts = opts.projection(json(p, "projection")?)?;
    }
    if let Some(h) = hint {
        // An index name may be given bare; JSON text is a name in quotes
        // or a key pattern.
        let spec = match serde_json::from_str::<serde_json::Value>(h) {
            Ok(v @ (serde_json::Value::Object(_) | serde_json::Value::String(_))) => v,
            _ => serde_json::Value::String(h.to_string()),
        };
        opts = opts.hint(spec)?;
    }
    on_existing(path, collection, Access::Read, |docs| {
        if explain {
            let report = docs.explain(collection, filter, opts)?.to_json();
            writeln!(out, "{report}")?;
            return Ok(());
        }
        docs.find(collection, filter, opts, &mut |doc| {
            writeln!(out, "{}", doc.to_json_string())?;
            Ok(())
        })
    })
}

/// `cairn count`.
pub fn count(path: &Path, collection: &str, filter: Option<&str>, out: &mut impl Write) -> Res {
    let filter = json(filter.unwrap_or("{}"), "filter")?;
    let n = on_existing(path, collection, Access::Read, |docs| {
        docs.count(collection, filter)
    })?;
    writeln!(out, "{n}")?;
    Ok(())
}

/// `cairn aggregate`.
pub fn aggregate(
    path: &Path,
    collection: &str,
    pipeline: &str,
    explain: bool,
    out: &mut impl Write,
) -> Res {
    let pipeline = json(pipeline, "pipeline")?;
    on_existing(path, collection, Access::Read, |docs| {
        if explain {
            let e = docs.explain_aggregate(collection, pipeline)?;
            writeln!(out, "{}", aggregate_explain_json(&e))?;
            return Ok(());
        }
        docs.aggregate(collection, pipeline, &mut |doc| {
            writeln!(out, "{}", doc.to_json_string())?;
            Ok(())
        })
    })
}

/// `cairn distinct`.
pub fn distinct(
    path: &Path,
    collection: &str,
    field: &str,
    filter: Option<&str>,
    out: &mut impl Write,
) -> Res {
    let filter = json(filter.unwrap_or("{}"), "filter")?;
    let values = on_existing(path, collection, Access::Read, |docs| {
        docs.distinct(collection, field, filter)
    })?;
    for v in values {
        writeln!(out, "{}", v.to_json())?;
    }
    Ok(())
}

/// An aggregate's explain as JSON (`cairn aggregate --explain`, the shell).
pub(crate) fn aggregate_explain_json(e: &AggregateExplain) -> serde_json::Value {
    serde_json::json!({
        "pushed_down": e.pushed_down,
        "query": e.query.to_json(),
        "in_memory": e.in_memory,
        "returned": e.returned,
    })
}

/// `cairn update`.
pub fn update(
    path: &Path,
    collection: &str,
    filter: &str,
    update: &str,
    many: bool,
    upsert: bool,
    out: &mut impl Write,
) -> Res {
    let (filter, update) = (json(filter, "filter")?, json(update, "update")?);
    let opts = UpdateOptions { upsert };
    let r = with_docs(path, Access::Write, |docs| {
        if !upsert {
            existing(docs, collection)?;
        }
        docs.update(collection, filter.clone(), update.clone(), many, opts)
            .map_err(|e| name_failed_document(docs, collection, filter, update, many, e))
    })?;
    match &r.upserted_id {
        Some(id) => writeln!(out, "matched 0, upserted _id {}", id.to_json())?,
        None => writeln!(out, "matched {}, modified {}", r.matched, r.modified)?,
    }
    Ok(())
}

/// The error of a failed update, naming the document it failed on (by
/// `_id`) when the update cannot apply to one of the matches: the update
/// wrote nothing (it is one transaction), so the matches are read again
/// and the update applied to each in memory until one fails the same way.
fn name_failed_document(
    docs: &dyn Docs,
    collection: &str,
    filter: serde_json::Value,
    update: serde_json::Value,
    many: bool,
    err: CliError,
) -> CliError {
    let CliError::Db(cairndb::Error::Document(d)) = &err else {
        return err;
    };
    if matches!(d, DocumentError::Core(_)) {
        return err;
    }
    let Ok(u) = Update::parse(update) else {
        return err;
    };
    let opts = if many {
        FindOptions::new()
    } else {
        FindOptions::new().limit(1)
    };
    // The matches, streamed from a snapshot after the failed update (which
    // wrote nothing), until one fails the same way.
    let expected = err.to_string();
    let mut named = None;
    let _ = docs.find(collection, filter, opts, &mut |mut doc| {
        let id = doc.get("_id").map(Value::to_json);
        let failed = match u.apply(&mut doc) {
            Err(e) => Some(e.to_string()),
            // As the engine: an update may not change or remove the _id;
            // a replacement may leave it out.
            Ok(())
                if doc.get("_id").map(Value::to_json) != id
                    && !(u.is_replacement() && doc.get("_id").is_none()) =>
            {
                Some(DocumentError::ImmutableId.to_string())
            }
            Ok(()) => None,
        };
        if let (Some(msg), Some(id)) = (failed, id) {
            if msg == expected {
                named = Some(CliError::User(format!(
                    "the update failed on the document with _id {id} (nothing was \
                     modified): {msg}"
                )));
                // Found: stop reading (this error goes no further).
                return Err(CliError::Reported(1));
            }
        }
        Ok(())
    });
    if let Some(named) = named {
        return named;
    }
    err
}

/// `cairn delete`.
pub fn delete(
    path: &Path,
    collection: &str,
    filter: &str,
    many: bool,
    out: &mut impl Write,
) -> Res {
    let filter = json(filter, "filter")?;
    let n = on_existing(path, collection, Access::Write, |docs| {
        docs.delete(collection, filter, many)
    })?;
    writeln!(out, "deleted {n}")?;
    Ok(())
}
