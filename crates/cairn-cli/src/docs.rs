//! Document commands: `import`, `export`, `collections`, `index`, and the
//! query commands. Documents are JSON lines; ids and bytes use the document
//! layer's JSON forms (`{"$oid": "<24 hex>"}`, `{"$binary": "<base64>"}`).

use std::io::{self, BufRead, Write};
use std::path::Path;

use cairndb::document::{Collection, Document, IndexInfo, IndexOptions, Value};
use cairndb::{Database, Durability};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::{CliError, Res};

/// `cairn index …`.
#[derive(Subcommand)]
pub enum IndexCommand {
    /// Create an index (built over the existing documents).
    Create {
        /// The database file.
        db: std::path::PathBuf,
        /// The collection.
        collection: String,
        /// Comma-separated paths, each optionally followed by `:-1` for
        /// descending (e.g. `address.city,age:-1`).
        paths: String,
        /// At most one document per value.
        #[arg(long)]
        unique: bool,
        /// Skip documents missing every indexed field.
        #[arg(long)]
        sparse: bool,
        /// The index name (default: paths and orders joined).
        #[arg(long)]
        name: Option<String>,
        /// A TTL index: documents whose date in this (one, ascending) field
        /// — integer milliseconds since the Unix epoch, or an array of them
        /// — is more than SECS seconds old are deleted by later writes and
        /// `delete_expired`.
        #[arg(long, value_name = "SECS")]
        expire_after: Option<u64>,
    },
    /// Drop an index by name.
    Drop {
        /// The database file.
        db: std::path::PathBuf,
        /// The collection.
        collection: String,
        /// The index name (see `cairn index list`).
        name: String,
    },
    /// List a collection's indexes: name, fields, options (tab-separated).
    List {
        /// The database file.
        db: std::path::PathBuf,
        /// The collection.
        collection: String,
    },
}

fn user(e: impl std::fmt::Display) -> CliError {
    CliError::User(e.to_string())
}

/// `cairn import`: JSON lines from stdin into a collection, `batch` per
/// transaction.
pub fn import(path: &Path, collection: &str, upsert: bool, batch: usize) -> Res {
    let db = Database::create(path)?;
    let coll = db.collection::<Document>(collection);
    let batch = batch.max(1);
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos} documents imported ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    // The documents of the current batch, each with its line.
    let mut pending: Vec<(u64, Document)> = Vec::with_capacity(batch);
    let mut done = 0u64;
    // One write transaction per batch, a document at a time, so that an
    // error names the document's line; the batch is written whole or not
    // at all.
    let flush = |pending: &mut Vec<(u64, Document)>, done: &mut u64| -> Res {
        let Some(&(first, _)) = pending.first() else {
            return Ok(());
        };
        let txn = db.begin_write()?;
        {
            let c = txn.collection::<Document>(collection);
            for (line, doc) in pending.iter() {
                let res = if upsert {
                    c.upsert(doc).map(|_| ())
                } else {
                    c.insert(doc).map(|_| ())
                };
                res.map_err(|e| CliError::AtLine {
                    line: *line,
                    loaded: *done,
                    err: Box::new(CliError::User(format!(
                        "{e} (nothing from the batch that starts at line {first} was written)"
                    ))),
                })?;
            }
        }
        txn.commit()?;
        *done += pending.len() as u64;
        pending.clear();
        Ok(())
    };
    for (i, line) in io::stdin().lock().lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let n = i as u64 + 1;
        let at_line = |e: CliError, done: u64| CliError::AtLine {
            line: n,
            loaded: done,
            err: Box::new(e),
        };
        let json = serde_json::from_str::<serde_json::Value>(&line)
            .map_err(|e| at_line(user(format!("not valid JSON: {e}")), done))?;
        // An index line: write the documents before it, then create it.
        if let Some(def) = as_index_line(&json) {
            flush(&mut pending, &mut done)?;
            def.and_then(|d| create_index(&coll, &d))
                .map_err(|e| at_line(e, done))?;
            continue;
        }
        let doc = Value::from_json(json)
            .map_err(user)
            .and_then(|v| match v {
                Value::Object(d) => Ok(d),
                other => Err(user(format!(
                    "a document must be a JSON object, not {}",
                    other.kind().name()
                ))),
            })
            .map_err(|e| CliError::AtLine {
                line: n,
                loaded: done,
                err: Box::new(e),
            })?;
        pending.push((n, doc));
        if pending.len() >= batch {
            flush(&mut pending, &mut done)?;
            bar.set_position(done);
        }
    }
    flush(&mut pending, &mut done)?;
    bar.finish_and_clear();
    eprintln!("imported {done} documents into {collection:?}");
    db.close()?;
    Ok(())
}

/// The key of an index line in `export` / `import`.
const INDEX_KEY: &str = "$index";

/// An index definition as an `export` line: `{"$index": {"name": …,
/// "fields": {"path": 1 | -1, …}, "unique": …, "sparse": …}}`.
fn index_line(i: &IndexInfo) -> serde_json::Value {
    let fields: serde_json::Map<String, serde_json::Value> = i
        .fields
        .iter()
        .map(|(p, o)| (p.clone(), serde_json::Value::from(*o)))
        .collect();
    let mut def = serde_json::json!({
        "name": i.name,
        "fields": fields,
        "unique": i.unique,
        "sparse": i.sparse,
    });
    if let (Some(secs), Some(d)) = (i.expire_after_seconds, def.as_object_mut()) {
        d.insert("expire_after_seconds".into(), secs.into());
    }
    serde_json::json!({ INDEX_KEY: def })
}

/// An index definition read from an `import` line.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexLine {
    name: String,
    fields: serde_json::Map<String, serde_json::Value>,
    #[serde(default)]
    unique: bool,
    #[serde(default)]
    sparse: bool,
    #[serde(default)]
    expire_after_seconds: Option<u64>,
}

impl IndexLine {
    fn fields(&self) -> Result<Vec<(String, i8)>, CliError> {
        if self.fields.is_empty() {
            return Err(user("an index needs at least one field"));
        }
        self.fields
            .iter()
            .map(|(p, o)| match o.as_i64() {
                Some(1) => Ok((p.clone(), 1)),
                Some(-1) => Ok((p.clone(), -1)),
                _ => Err(user(format!("the order of {p:?} must be 1 or -1, not {o}"))),
            })
            .collect()
    }
}

/// If `json` is an index line (`{"$index": …}` alone), its definition.
fn as_index_line(json: &serde_json::Value) -> Option<Result<IndexLine, CliError>> {
    let obj = json.as_object()?;
    if obj.len() != 1 {
        return None;
    }
    let def = obj.get(INDEX_KEY)?;
    Some(
        serde_json::from_value::<IndexLine>(def.clone())
            .map_err(|e| user(format!("not an index definition: {e}"))),
    )
}

/// Creates the index of an `import` line, or checks that an index of that
/// name has the same definition.
fn create_index(coll: &Collection<'_, Document>, def: &IndexLine) -> Res {
    let fields = def.fields()?;
    if let Some(have) = coll
        .list_indexes()?
        .into_iter()
        .find(|i| i.name == def.name)
    {
        if have.fields == fields
            && have.unique == def.unique
            && have.sparse == def.sparse
            && have.expire_after_seconds == def.expire_after_seconds
        {
            return Ok(());
        }
        return Err(user(format!(
            "the collection already has an index {:?} with another definition",
            def.name
        )));
    }
    let fields: Vec<(&str, i8)> = fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
    let opts = IndexOptions {
        name: Some(def.name.clone()),
        unique: def.unique,
        sparse: def.sparse,
    };
    match (def.expire_after_seconds, fields.as_slice()) {
        (None, _) => {
            coll.create_index(&fields, opts)?;
        }
        (Some(secs), [(path, 1)]) => {
            coll.create_ttl_index(path, secs, opts)?;
        }
        (Some(_), _) => {
            return Err(user(format!(
                "index {:?}: expire_after_seconds needs one ascending field",
                def.name
            )))
        }
    }
    Ok(())
}

/// `cairn export`: a collection's index definitions (unless `indexes` is
/// false), then every document, as JSON lines.
pub fn export(path: &Path, collection: &str, indexes: bool, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    if !db.list_collections()?.iter().any(|c| c == collection) {
        return Err(
            cairndb::document::DocumentError::CollectionNotFound(collection.to_string()).into(),
        );
    }
    let coll = db.collection::<Document>(collection);
    if indexes {
        for i in coll.list_indexes()? {
            writeln!(out, "{}", index_line(&i))?;
        }
    }
    for doc in coll.all()? {
        writeln!(out, "{}", Value::Object(doc?).to_json())?;
    }
    Ok(())
}

/// `cairn collections`: name and document count, tab-separated.
pub fn collections(path: &Path, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    for name in db.list_collections()? {
        let n = db.collection::<Document>(&name).len()?;
        writeln!(out, "{name}\t{n}")?;
    }
    Ok(())
}

/// `cairn index …`.
pub fn index(cmd: IndexCommand, out: &mut impl Write) -> Res {
    match cmd {
        IndexCommand::Create {
            db,
            collection,
            paths,
            unique,
            sparse,
            name,
            expire_after,
        } => {
            let mut fields: Vec<(String, i8)> = Vec::new();
            for p in paths.split(',') {
                let (path, order) = match p.rsplit_once(':') {
                    Some((path, "1")) => (path, 1),
                    Some((path, "-1")) => (path, -1),
                    Some((_, o)) => {
                        return Err(user(format!("order {o:?} must be 1 or -1 (in {p:?})")))
                    }
                    None => (p, 1),
                };
                fields.push((path.trim().to_string(), order));
            }
            let fields: Vec<(&str, i8)> = fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
            let opts = IndexOptions {
                name,
                unique,
                sparse,
            };
            let db = Database::open(&db)?;
            let c = db
                .collection::<Document>(&collection)
                .with_durability(Durability::Immediate);
            let info = match (expire_after, fields.as_slice()) {
                (None, _) => c.create_index(&fields, opts)?,
                (Some(secs), [(path, 1)]) => c.create_ttl_index(path, secs, opts)?,
                (Some(_), _) => {
                    return Err(user(
                        "--expire-after needs one ascending path (a TTL index has one field)",
                    ))
                }
            };
            writeln!(out, "index {:?} ready", info.name)?;
            db.close()?;
        }
        IndexCommand::Drop {
            db,
            collection,
            name,
        } => {
            let db = Database::open(&db)?;
            if !db.collection::<Document>(&collection).drop_index(&name)? {
                return Err(user(format!(
                    "collection {collection:?} has no index {name:?} (see `cairn index list`)"
                )));
            }
            writeln!(out, "index {name:?} dropped")?;
            db.close()?;
        }
        IndexCommand::List { db, collection } => {
            let db = Database::open_read_only(&db)?;
            for i in db.collection::<Document>(&collection).list_indexes()? {
                writeln!(out, "{}", index_listing(&i))?;
            }
        }
    }
    Ok(())
}

/// An index as `cairn index list` and the shell's `.indexes` print it: name,
/// fields (`path:order`, comma-separated) and options, tab-separated.
pub fn index_listing(i: &IndexInfo) -> String {
    let fields: Vec<String> = i.fields.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    let mut opts = Vec::new();
    if i.unique {
        opts.push("unique".to_string());
    }
    if i.sparse {
        opts.push("sparse".to_string());
    }
    if let Some(secs) = i.expire_after_seconds {
        opts.push(format!("expire_after={secs}"));
    }
    format!("{}\t{}\t{}", i.name, fields.join(","), opts.join(","))
}
