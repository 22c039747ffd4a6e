//! Query commands on collections: `find`, `count`, `aggregate`,
//! `distinct`, `update`, `delete`.
//! Filters, sort specs, projections and updates are MongoDB-style JSON
//! (see `cairndb::document::filter` and `cairndb::document::update`).

use std::io::Write;
use std::path::Path;

use cairndb::document::query::{FindOptions, UpdateOptions};
use cairndb::document::{AggregateExplain, Collection, Document, DocumentError, Update, Value};
use cairndb::Database;

use crate::{CliError, Res};

fn json(text: &str, what: &str) -> Result<serde_json::Value, CliError> {
    serde_json::from_str(text)
        .map_err(|e| CliError::User(format!("the {what} is not valid JSON: {e}")))
}

/// Refuses a collection the file does not hold (a misspelled name would
/// otherwise read as an empty collection), naming the ones it holds.
pub(crate) fn existing(db: &Database, collection: &str) -> Res {
    let names = db.list_collections()?;
    if names.iter().any(|n| n == collection) {
        return Ok(());
    }
    Err(CliError::User(if names.is_empty() {
        format!("no collection {collection:?}: the file holds none")
    } else {
        format!(
            "no collection {collection:?}; the file holds: {}",
            names.join(", ")
        )
    }))
}

/// Opens the file (read-only unless `writable`) and refuses a collection
/// it does not hold (see [`existing`]).
fn open_existing(path: &Path, collection: &str, writable: bool) -> Result<Database, CliError> {
    let db = if writable {
        Database::open(path)?
    } else {
        Database::open_read_only(path)?
    };
    existing(&db, collection)?;
    Ok(db)
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
    let db = open_existing(path, collection, false)?;
    let c = db.collection::<Document>(collection);
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
    if explain {
        let e = c.explain(filter, opts)?;
        let report = e.to_json();
        writeln!(out, "{report}")?;
        return Ok(());
    }
    for doc in c.find_with(filter, opts)? {
        writeln!(out, "{}", doc?.to_json_string())?;
    }
    Ok(())
}

/// `cairn count`.
pub fn count(path: &Path, collection: &str, filter: Option<&str>, out: &mut impl Write) -> Res {
    let db = open_existing(path, collection, false)?;
    let filter = json(filter.unwrap_or("{}"), "filter")?;
    writeln!(
        out,
        "{}",
        db.collection::<Document>(collection).count(filter)?
    )?;
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
    let db = open_existing(path, collection, false)?;
    let c = db.collection::<Document>(collection);
    let pipeline = json(pipeline, "pipeline")?;
    if explain {
        let e = c.explain_aggregate(pipeline)?;
        writeln!(out, "{}", aggregate_explain_json(&e))?;
        return Ok(());
    }
    for doc in c.aggregate(pipeline)? {
        writeln!(out, "{}", doc?.to_json_string())?;
    }
    Ok(())
}

/// `cairn distinct`.
pub fn distinct(
    path: &Path,
    collection: &str,
    field: &str,
    filter: Option<&str>,
    out: &mut impl Write,
) -> Res {
    let db = open_existing(path, collection, false)?;
    let filter = json(filter.unwrap_or("{}"), "filter")?;
    for v in db
        .collection::<Document>(collection)
        .distinct(field, filter)?
    {
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
    let db = Database::open(path)?;
    if !upsert {
        existing(&db, collection)?;
    }
    let c = db.collection::<Document>(collection);
    let (filter, update) = (json(filter, "filter")?, json(update, "update")?);
    let opts = UpdateOptions { upsert };
    let r = if many {
        c.update_many(filter.clone(), update.clone(), opts)
    } else {
        c.update_one(filter.clone(), update.clone(), opts)
    };
    let r = match r {
        Ok(r) => r,
        Err(e) => return Err(name_failed_document(&c, filter, update, many, e)),
    };
    match &r.upserted_id {
        Some(id) => writeln!(out, "matched 0, upserted _id {}", id.to_json())?,
        None => writeln!(out, "matched {}, modified {}", r.matched, r.modified)?,
    }
    db.close()?;
    Ok(())
}

/// The error of a failed update, naming the document it failed on (by
/// `_id`) when the update cannot apply to one of the matches: the update
/// wrote nothing (it is one transaction), so the matches are read again
/// and the update applied to each in memory until one fails the same way.
fn name_failed_document(
    c: &Collection<'_, Document>,
    filter: serde_json::Value,
    update: serde_json::Value,
    many: bool,
    err: DocumentError,
) -> CliError {
    if matches!(err, DocumentError::Core(_)) {
        return err.into();
    }
    let Ok(u) = Update::parse(update) else {
        return err.into();
    };
    let opts = if many {
        FindOptions::new()
    } else {
        FindOptions::new().limit(1)
    };
    let Ok(docs) = c.find_with(filter, opts) else {
        return err.into();
    };
    let expected = err.to_string();
    for doc in docs {
        let Ok(mut doc) = doc else {
            break;
        };
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
                return CliError::User(format!(
                    "the update failed on the document with _id {id} (nothing was \
                     modified): {msg}"
                ));
            }
        }
    }
    err.into()
}

/// `cairn delete`.
pub fn delete(
    path: &Path,
    collection: &str,
    filter: &str,
    many: bool,
    out: &mut impl Write,
) -> Res {
    let db = open_existing(path, collection, true)?;
    let c = db.collection::<Document>(collection);
    let filter = json(filter, "filter")?;
    let n = if many {
        c.delete_many(filter)?
    } else {
        c.delete_one(filter)?
    };
    writeln!(out, "deleted {n}")?;
    db.close()?;
    Ok(())
}
