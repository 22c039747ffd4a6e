//! Document commands: `import`, `export`, `collections`, `index`, and the
//! query commands. Documents are JSON lines; ids and bytes use the document
//! layer's JSON forms (`{"$oid": "<24 hex>"}`, `{"$binary": "<base64>"}`).

use std::io::{self, BufRead, Write};
use std::path::Path;

use cairndb::document::{
    Document, DocumentError, IndexInfo, IndexOptions, TextIndexOptions, Value,
};
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::docstore::{is_line_error, with_docs, Access, Docs};
use crate::{CliError, Res};

/// `cairn index …`.
#[derive(Subcommand)]
pub enum IndexCommand {
    /// Create an index (built over the existing documents).
    Create {
        /// The database file (or an etcd:// URL).
        db: std::path::PathBuf,
        /// The collection.
        collection: String,
        /// Comma-separated paths, each optionally followed by `:-1` for
        /// descending (e.g. `address.city,age:-1`), or `:text` for the
        /// fields of a text index (`title:text,body:text`; every field then);
        /// or a MongoDB key pattern, a JSON object whose keys are the paths
        /// in order and whose values are 1, -1 or "text" (e.g.
        /// `'{"price": 1, "item.name": -1}'`).
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
        /// The database file (or an etcd:// URL).
        db: std::path::PathBuf,
        /// The collection.
        collection: String,
        /// The index name (see `cairn index list`).
        name: String,
    },
    /// List a collection's indexes: name, fields, options (tab-separated).
    List {
        /// The database file (or an etcd:// URL).
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

/// `cairn import`: JSON lines from stdin into a collection of a file or
/// a cluster, `batch` lines per transaction (on a cluster, fewer when
/// etcd's limits require). A line the collection refuses is undone alone
/// (the document layer undoes a failed write in its transaction), so the
/// lines before it are committed whatever `on_error` says.
pub fn import(path: &Path, collection: &str, upsert: bool, batch: usize, on_error: OnError) -> Res {
    let skipped = with_docs(path, Access::Create, |docs| {
        // A bad name fails before any line is read (not as every line's
        // error).
        cairndb::document::collection::check_collection_name(collection)?;
        let mut imp = Importer {
            docs,
            collection,
            upsert,
            on_error,
            pending: Vec::new(),
            done: 0,
            skipped: Vec::new(),
        };
        imp.run(batch.max(1))?;
        Ok(imp.skipped)
    })?;
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
    docs: &'a dyn Docs,
    collection: &'a str,
    upsert: bool,
    on_error: OnError,
    /// The documents read and not yet written, with their lines.
    pending: Vec<(u64, Document)>,
    /// Documents committed.
    done: u64,
    /// The lines skipped (`OnError::Continue`).
    skipped: Vec<u64>,
}

impl Importer<'_> {
    /// Reads standard input to its end, `batch` documents per commit.
    fn run(&mut self, batch: usize) -> Res {
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template("{spinner} {pos} documents imported ({per_sec})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        for (i, line) in io::stdin().lock().lines().enumerate() {
            let n = i as u64 + 1;
            let line = match line {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::InvalidData => {
                    self.bad_line(n, user("not valid UTF-8"))?;
                    continue;
                }
                Err(e) => {
                    // The documents read so far are good: keep them.
                    self.commit()?;
                    return Err(CliError::AtLine {
                        line: n,
                        loaded: self.done,
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
                    self.bad_line(n, user(why))?;
                    continue;
                }
                Err(e) => {
                    let why = match e.classify() {
                        serde_json::error::Category::Data => format!("not a document: {e}"),
                        _ => format!("not valid JSON: {e}"),
                    };
                    self.bad_line(n, user(why))?;
                    continue;
                }
            };
            // An index line: commit the documents before it, then create it.
            if doc.len() == 1 && doc.contains_key(INDEX_KEY) {
                self.commit()?;
                let def = as_index_line(&Value::Object(doc).to_json());
                if let Some(Err(e)) =
                    def.map(|d| d.and_then(|d| create_index(self.docs, self.collection, &d)))
                {
                    self.bad_line(n, e)?;
                }
                continue;
            }
            self.pending.push((n, doc));
            if self.pending.len() >= batch {
                self.commit()?;
                bar.set_position(self.done);
            }
        }
        self.commit()?;
        bar.finish_and_clear();
        eprintln!(
            "imported {} documents into {:?}",
            self.done, self.collection
        );
        Ok(())
    }

    /// Writes and commits the documents read so far; reports (or stops
    /// at) the ones the collection refuses.
    fn commit(&mut self) -> Res {
        if self.pending.is_empty() {
            return Ok(());
        }
        let docs = std::mem::take(&mut self.pending);
        let w = self.docs.write_batch(
            self.collection,
            self.upsert,
            &docs,
            self.on_error == OnError::Stop,
        );
        self.done += w.written;
        for (line, err) in w.refused {
            self.bad_line(line, err)?;
        }
        match w.failed {
            Some((line, err)) => Err(CliError::AtLine {
                line,
                loaded: self.done,
                err: Box::new(err),
            }),
            None => Ok(()),
        }
    }

    /// A line that cannot be imported: skipped and reported (after the
    /// lines before it are committed, so that reports come in line order),
    /// or the end of the import once the lines before it are committed.
    fn bad_line(&mut self, line: u64, err: CliError) -> Res {
        if !is_line_error(&err) {
            return Err(CliError::AtLine {
                line,
                loaded: self.done,
                err: Box::new(err),
            });
        }
        self.commit()?;
        if self.on_error == OnError::Continue {
            eprintln!("cairn: line {line}: {err} (skipped)");
            self.skipped.push(line);
            return Ok(());
        }
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
fn create_index(docs: &dyn Docs, coll: &str, def: &IndexLine) -> Res {
    if let Some(t) = &def.text {
        let weights = t.weights()?;
        let w: Vec<(&str, u32)> = weights.iter().map(|(p, w)| (p.as_str(), *w)).collect();
        let opts = TextIndexOptions {
            name: Some(def.name.clone()),
            default_language: Some(t.default_language.clone()),
        };
        docs.create_text_index(coll, &w, opts)?;
        return Ok(());
    }
    let fields = def.fields()?;
    if let Some(have) = docs
        .list_indexes(coll)?
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
            docs.create_index(coll, &fields, opts)?;
        }
        (Some(secs), [(path, 1)]) => {
            docs.create_ttl_index(coll, path, secs, opts)?;
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
/// false), then every document, as JSON lines, from a file or a cluster.
pub fn export(path: &Path, collection: &str, indexes: bool, out: &mut impl Write) -> Res {
    with_docs(path, Access::Read, |docs| {
        if !docs.list_collections()?.iter().any(|c| c == collection) {
            return Err(DocumentError::CollectionNotFound(collection.to_string()).into());
        }
        if indexes {
            for i in docs.list_indexes(collection)? {
                writeln!(out, "{}", index_line(&i))?;
            }
        }
        docs.all(collection, &mut |doc| {
            writeln!(out, "{}", doc.to_json_string())?;
            Ok(())
        })
    })
}

/// `cairn collections`: name and document count, tab-separated.
pub fn collections(path: &Path, out: &mut impl Write) -> Res {
    with_docs(path, Access::Read, |docs| {
        for name in docs.list_collections()? {
            writeln!(out, "{name}\t{}", docs.len(&name)?)?;
        }
        Ok(())
    })
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
            let keys = index_keys(&paths)?;
            let text_fields: Vec<&str> = keys
                .iter()
                .filter(|(_, k)| *k == IndexKey::Text)
                .map(|(p, _)| p.as_str())
                .collect();
            if !text_fields.is_empty() || weights.is_some() || language.is_some() {
                if text_fields.len() != keys.len() {
                    return Err(user(format!(
                        "a text index has only text fields (each PATH:text), not {paths:?}"
                    )));
                }
                return create_text_index(
                    &db,
                    &collection,
                    &text_fields,
                    weights.as_deref(),
                    language,
                    name,
                    (unique || sparse || expire_after.is_some(), out),
                );
            }
            let fields: Vec<(&str, i8)> = keys
                .iter()
                .map(|(p, k)| (p.as_str(), if *k == IndexKey::Desc { -1 } else { 1 }))
                .collect();
            let opts = IndexOptions {
                name,
                unique,
                sparse,
            };
            if expire_after.is_some() && !matches!(fields.as_slice(), [(_, 1)]) {
                return Err(user(
                    "--expire-after needs one ascending path (a TTL index has one field)",
                ));
            }
            let info = with_docs(&db, Access::Write, |docs| match expire_after {
                None => docs.create_index(&collection, &fields, opts),
                Some(secs) => docs.create_ttl_index(&collection, fields[0].0, secs, opts),
            })?;
            writeln!(out, "index {:?} ready", info.name)?;
        }
        IndexCommand::Drop {
            db,
            collection,
            name,
        } => {
            if !with_docs(&db, Access::Write, |docs| {
                crate::docs_query::existing(docs, &collection)?;
                docs.drop_index(&collection, &name)
            })? {
                return Err(user(format!(
                    "collection {collection:?} has no index {name:?} (see `cairn index list`)"
                )));
            }
            writeln!(out, "index {name:?} dropped")?;
        }
        IndexCommand::List { db, collection } => {
            let (indexes, building) = with_docs(&db, Access::Read, |docs| {
                crate::docs_query::existing(docs, &collection)?;
                Ok((
                    docs.list_indexes(&collection)?,
                    docs.building_indexes(&collection)?,
                ))
            })?;
            for i in indexes {
                let mut line = index_listing(&i);
                // A cluster's index still being built (its builder stopped,
                // or running now): `building` among its options.
                if building.contains(&i.name) {
                    line.push_str(if line.ends_with('\t') {
                        "building"
                    } else {
                        ",building"
                    });
                }
                writeln!(out, "{line}")?;
            }
        }
    }
    Ok(())
}

/// One key of an index specification.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IndexKey {
    Asc,
    Desc,
    Text,
}

/// The keys of `cairn index create`'s specification, in order: either
/// `path[:1|:-1|:text],…` or a MongoDB key pattern (a JSON object, `{"price":
/// 1, "item.name": -1}`, whose values are 1, -1 or "text"). A bad order
/// is an error naming its field.
fn index_keys(spec: &str) -> Result<Vec<(String, IndexKey)>, CliError> {
    let spec = spec.trim();
    if spec.starts_with('{') {
        // The document layer's reader keeps the keys' order.
        let pattern: Value = serde_json::from_str(spec)
            .map_err(|e| user(format!("the key pattern {spec} is not a JSON object: {e}")))?;
        let Value::Object(pattern) = pattern else {
            return Err(user(format!("the key pattern {spec} is not a JSON object")));
        };
        if pattern.is_empty() {
            return Err(user(
                "the key pattern {} names no field: an index needs one",
            ));
        }
        let mut keys = Vec::with_capacity(pattern.len());
        for (path, v) in pattern.iter() {
            let key = match v {
                Value::Int(1) => IndexKey::Asc,
                Value::Int(-1) => IndexKey::Desc,
                Value::Float(f) if *f == 1.0 => IndexKey::Asc,
                Value::Float(f) if *f == -1.0 => IndexKey::Desc,
                Value::String(t) if t == "text" => IndexKey::Text,
                other => {
                    return Err(user(format!(
                        "field {path:?} of the key pattern: the order must be 1 or -1 (or \"text\" for a text index), not {}",
                        other.to_json()
                    )))
                }
            };
            keys.push((path.to_string(), key));
        }
        return Ok(keys);
    }
    let mut keys = Vec::new();
    for p in spec.split(',') {
        let (path, key) = match p.rsplit_once(':') {
            Some((path, "1")) => (path, IndexKey::Asc),
            Some((path, "-1")) => (path, IndexKey::Desc),
            Some((path, "text")) => (path, IndexKey::Text),
            Some((path, o)) => {
                return Err(user(format!(
                "field {:?}: the order {o:?} must be 1 or -1 (or text for a text index), in {p:?}",
                path.trim()
            )))
            }
            None => (p, IndexKey::Asc),
        };
        keys.push((path.trim().to_string(), key));
    }
    Ok(keys)
}

/// `cairn index create … title:text,body:text [--weights title=10]
/// [--language none]`: the collection's text index.
fn create_text_index(
    db: &std::path::Path,
    collection: &str,
    text_fields: &[&str],
    weights: Option<&str>,
    language: Option<String>,
    name: Option<String>,
    (other_options, out): (bool, &mut impl Write),
) -> Res {
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
    let opts = TextIndexOptions {
        name,
        default_language: language,
    };
    let info = with_docs(db, Access::Write, |docs| {
        docs.create_text_index(collection, &fields, opts)
    })?;
    writeln!(out, "index {:?} ready", info.name)?;
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
