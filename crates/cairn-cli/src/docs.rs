//! Document commands: `import`, `export`, `collections`, `index`, and the
//! query commands. Documents are JSON lines; ids and bytes use the document
//! layer's JSON forms (`{"$oid": "<24 hex>"}`, `{"$binary": "<base64>"}`).

use std::io::{self, BufRead, Write};
use std::path::Path;

use cairndb::document::{
    Collection, Document, DocumentError, IndexInfo, IndexOptions, TextIndexOptions, Value,
};
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
        /// descending (e.g. `address.city,age:-1`), or `:text` for the
        /// fields of a text index (`title:text,body:text`; every field then).
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
        /// — a date, integer milliseconds since the Unix epoch, or an array
        /// of them — is more than SECS seconds old are deleted by later
        /// writes, `cairn expire` and `cairn serve`'s TTL sweep.
        #[arg(long, value_name = "SECS")]
        expire_after: Option<u64>,
        /// A text index's field weights (`title=10,body=2`; default 1).
        #[arg(long, value_name = "PATH=N,...")]
        weights: Option<String>,
        /// A text index's language: `english` (default) or `none`.
        #[arg(long)]
        language: Option<String>,
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

/// How `cairn import` treats a bad line (one that is not a document, or
/// that the collection refuses).
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    /// Commit every line before it, then stop naming it and the line to
    /// resume from (mongoimport's `--stopOnError`).
    Stop,
    /// Skip it, report it on standard error, and go on; exit status 1 at
    /// the end if any line was skipped.
    Continue,
}

/// Whether an import error is about the line's document (skippable), not
/// the file or the engine (I/O, corruption, a poisoned handle).
fn is_line_error(e: &CliError) -> bool {
    match e {
        CliError::User(_) => true,
        CliError::Db(cairndb::Error::Document(d)) => !matches!(d, DocumentError::Core(_)),
        _ => false,
    }
}

/// `cairn import`: JSON lines from stdin into a collection, `batch` lines
/// per transaction. A line the collection refuses is undone alone (the
/// document layer undoes a failed write in its transaction), so the lines
/// before it are committed whatever `on_error` says.
pub fn import(path: &Path, collection: &str, upsert: bool, batch: usize, on_error: OnError) -> Res {
    let db = Database::create(path)?;
    let coll = db.collection::<Document>(collection);
    // A bad name fails before any line is read (not as every line's error).
    cairndb::document::collection::check_collection_name(collection)?;
    let batch = batch.max(1) as u64;
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template("{spinner} {pos} documents imported ({per_sec})")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    let mut imp = Importer {
        db: &db,
        collection,
        upsert,
        on_error,
        txn: None,
        in_txn: 0,
        done: 0,
        skipped: Vec::new(),
    };
    for (i, line) in io::stdin().lock().lines().enumerate() {
        let n = i as u64 + 1;
        let line = match line {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                imp.bad_line(n, user("not valid UTF-8"))?;
                continue;
            }
            Err(e) => {
                // The documents read so far are good: keep them.
                imp.commit()?;
                return Err(CliError::AtLine {
                    line: n,
                    loaded: imp.done,
                    err: Box::new(CliError::User(format!("cannot read standard input: {e}"))),
                });
            }
        };
        if line.trim().is_empty() {
            continue;
        }
        // Parsed from the text, so the document keeps its field order.
        let doc = match serde_json::from_str::<Value>(&line) {
            Ok(Value::Object(d)) => d,
            Ok(other) => {
                let why = format!(
                    "a document must be a JSON object, not {}",
                    other.kind().name()
                );
                imp.bad_line(n, user(why))?;
                continue;
            }
            Err(e) => {
                let why = match e.classify() {
                    serde_json::error::Category::Data => format!("not a document: {e}"),
                    _ => format!("not valid JSON: {e}"),
                };
                imp.bad_line(n, user(why))?;
                continue;
            }
        };
        // An index line: commit the documents before it, then create it.
        if doc.len() == 1 && doc.contains_key(INDEX_KEY) {
            imp.commit()?;
            let def = as_index_line(&Value::Object(doc).to_json());
            if let Some(Err(e)) = def.map(|d| d.and_then(|d| create_index(&coll, &d))) {
                imp.bad_line(n, e)?;
            }
            continue;
        }
        imp.write(n, &doc)?;
        if imp.in_txn >= batch {
            imp.commit()?;
            bar.set_position(imp.done);
        }
    }
    imp.commit()?;
    bar.finish_and_clear();
    eprintln!("imported {} documents into {collection:?}", imp.done);
    let skipped = std::mem::take(&mut imp.skipped);
    drop(imp);
    db.close()?;
    if skipped.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = skipped.iter().map(u64::to_string).collect();
    Err(user(format!(
        "{} bad line(s) skipped (reported above): {}",
        skipped.len(),
        lines.join(", ")
    )))
}

/// The state of one `cairn import`.
struct Importer<'a> {
    db: &'a Database,
    collection: &'a str,
    upsert: bool,
    on_error: OnError,
    /// The open transaction and how many documents it holds.
    txn: Option<cairndb::WriteTransaction>,
    in_txn: u64,
    /// Documents committed.
    done: u64,
    /// The lines skipped (`OnError::Continue`).
    skipped: Vec<u64>,
}

impl Importer<'_> {
    /// Writes one document in the open transaction (opening one if needed).
    fn write(&mut self, line: u64, doc: &Document) -> Res {
        if self.txn.is_none() {
            self.txn = Some(self.db.begin_write()?);
        }
        let Some(txn) = self.txn.as_ref() else {
            return Ok(());
        };
        let c = txn.collection::<Document>(self.collection);
        let res = if self.upsert {
            c.upsert(doc).map(|_| ())
        } else {
            c.insert(doc).map(|_| ())
        };
        match res {
            Ok(()) => {
                self.in_txn += 1;
                Ok(())
            }
            Err(e) => self.bad_line(line, e.into()),
        }
    }

    /// Commits the open transaction, if any.
    fn commit(&mut self) -> Res {
        if let Some(txn) = self.txn.take() {
            txn.commit()?;
            self.done += self.in_txn;
            self.in_txn = 0;
        }
        Ok(())
    }

    /// A line that cannot be imported: skipped and reported, or the end of
    /// the import once the lines before it are committed.
    fn bad_line(&mut self, line: u64, err: CliError) -> Res {
        if self.on_error == OnError::Continue && is_line_error(&err) {
            eprintln!("cairn: line {line}: {err} (skipped)");
            self.skipped.push(line);
            return Ok(());
        }
        self.fail(line, err)
    }

    /// Stops at `line`: commits what came before it when the error is the
    /// line's own, and says where to resume.
    fn fail(&mut self, line: u64, err: CliError) -> Res {
        if !is_line_error(&err) {
            return Err(CliError::AtLine {
                line,
                loaded: self.done,
                err: Box::new(err),
            });
        }
        self.commit()?;
        Err(user(format!(
            "line {line}: {err}\n{} documents imported into {:?}, from every line before line \
             {line}; nothing from line {line} on was imported. Fix the line and import the rest \
             with `tail -n +{line} FILE | cairn import …`, or skip bad lines with \
             --continue-on-error",
            self.done, self.collection
        )))
    }
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
    if let (Some(t), Some(d)) = (&i.text, def.as_object_mut()) {
        let weights: serde_json::Map<String, serde_json::Value> = t
            .weights
            .iter()
            .map(|(p, w)| (p.clone(), serde_json::Value::from(*w)))
            .collect();
        d.insert(
            "text".into(),
            serde_json::json!({"weights": weights, "default_language": t.default_language}),
        );
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
    #[serde(default)]
    text: Option<TextLine>,
}

/// A text index's definition in an index line.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TextLine {
    weights: serde_json::Map<String, serde_json::Value>,
    default_language: String,
}

impl TextLine {
    fn weights(&self) -> Result<Vec<(String, u32)>, CliError> {
        self.weights
            .iter()
            .map(
                |(p, w)| match w.as_u64().and_then(|w| u32::try_from(w).ok()) {
                    Some(w) => Ok((p.clone(), w)),
                    None => Err(user(format!(
                        "the weight of {p:?} must be a positive integer, not {w}"
                    ))),
                },
            )
            .collect()
    }
}

impl IndexLine {
    fn fields(&self) -> Result<Vec<(String, i8)>, CliError> {
        if self.text.is_some() && self.fields.is_empty() {
            return Ok(Vec::new());
        }
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
    if let Some(t) = &def.text {
        let weights = t.weights()?;
        let w: Vec<(&str, u32)> = weights.iter().map(|(p, w)| (p.as_str(), *w)).collect();
        let opts = TextIndexOptions {
            name: Some(def.name.clone()),
            default_language: Some(t.default_language.clone()),
        };
        coll.create_text_index(&w, opts)?;
        return Ok(());
    }
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
        writeln!(out, "{}", doc?.to_json_string())?;
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
            weights,
            language,
        } => {
            let text_fields: Vec<&str> = paths
                .split(',')
                .filter_map(|p| p.trim().strip_suffix(":text"))
                .collect();
            if !text_fields.is_empty() || weights.is_some() || language.is_some() {
                return create_text_index(
                    &db,
                    &collection,
                    &paths,
                    &text_fields,
                    weights.as_deref(),
                    language,
                    name,
                    (unique || sparse || expire_after.is_some(), out),
                );
            }
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
            crate::docs_query::existing(&db, &collection)?;
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
            crate::docs_query::existing(&db, &collection)?;
            for i in db.collection::<Document>(&collection).list_indexes()? {
                writeln!(out, "{}", index_listing(&i))?;
            }
        }
    }
    Ok(())
}

/// `cairn index create … title:text,body:text [--weights title=10]
/// [--language none]`: the collection's text index.
#[allow(clippy::too_many_arguments)]
fn create_text_index(
    db: &std::path::Path,
    collection: &str,
    paths: &str,
    text_fields: &[&str],
    weights: Option<&str>,
    language: Option<String>,
    name: Option<String>,
    (other_options, out): (bool, &mut impl Write),
) -> Res {
    if text_fields.len() != paths.split(',').count() {
        return Err(user(format!(
            "a text index has only text fields (each PATH:text), not {paths:?}"
        )));
    }
    if other_options {
        return Err(user(
            "a text index takes no --unique, --sparse or --expire-after",
        ));
    }
    let mut fields: Vec<(&str, u32)> = text_fields.iter().map(|p| (p.trim(), 1)).collect();
    for w in weights.unwrap_or("").split(',').filter(|w| !w.is_empty()) {
        let Some((p, n)) = w.split_once('=') else {
            return Err(user(format!("a weight is PATH=N, not {w:?}")));
        };
        let n: u32 = n.trim().parse().map_err(|_| {
            user(format!(
                "the weight of {p:?} must be a positive integer, not {n:?}"
            ))
        })?;
        match fields.iter_mut().find(|(f, _)| *f == p.trim()) {
            Some(f) => f.1 = n,
            None => {
                return Err(user(format!(
                    "--weights names {p:?}, which is not a text field of the index"
                )))
            }
        }
    }
    let db = Database::open(db)?;
    let c = db
        .collection::<Document>(collection)
        .with_durability(Durability::Immediate);
    let info = c.create_text_index(
        &fields,
        TextIndexOptions {
            name,
            default_language: language,
        },
    )?;
    writeln!(out, "index {:?} ready", info.name)?;
    db.close()?;
    Ok(())
}

/// An index as `cairn index list` and the shell's `.indexes` print it: name,
/// fields (`path:order`, comma-separated; `path:text=weight` for a text
/// index) and options, tab-separated.
pub fn index_listing(i: &IndexInfo) -> String {
    let mut fields: Vec<String> = i.fields.iter().map(|(p, o)| format!("{p}:{o}")).collect();
    let mut opts = Vec::new();
    if let Some(t) = &i.text {
        fields.extend(t.weights.iter().map(|(p, w)| format!("{p}:text={w}")));
        opts.push(format!("language={}", t.default_language));
    }
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
