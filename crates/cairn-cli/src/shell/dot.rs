//! The dot-commands, as in sqlite3.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;

use cairndb::document::Document;
use cairndb::events::{Direction, EventFilter, EventStore, ReadFrom};
use cairndb::ReadableTable;
use serde_json::Value as Json;

use super::exec::{doc_json, to_doc, user_tables};
use super::output::{self, Mode, Printer};
use super::parse::Parser;
use super::schema::Schema;
use super::{check_interrupt, user, with_coll, with_txn_coll, Db, SRes, Shell, Txn};
use crate::raw;

/// The dot-commands with their arguments and what they do.
pub const DOT_COMMANDS: &[(&str, &str, &str)] = &[
    (".help", "", "this help"),
    (".tables", "", "tables and their number of entries"),
    (
        ".collections",
        "",
        "collections and their number of documents",
    ),
    (
        ".indexes",
        "[COLL]",
        "the indexes of one or every collection",
    ),
    (".streams", "", "event streams: name, version, state"),
    (
        ".schema",
        "COLL [N]",
        "field paths, kinds and frequencies in N documents (1000)",
    ),
    (
        ".mode",
        "[MODE]",
        "output mode: json, jsonl, table, line or csv",
    ),
    (
        ".output",
        "[FILE]",
        "send results to FILE (no FILE: back to the screen)",
    ),
    (".timer", "on|off", "print how long each command took"),
    (".pagesize", "N", "results per batch before `it` (0: all)"),
    (
        ".import",
        "FILE COLL",
        "insert documents from JSON lines (or FILE.csv, with a header)",
    ),
    (
        ".export",
        "COLL FILE",
        "write documents as JSON lines (or FILE.csv)",
    ),
    (".dump", "[FILE]", "the whole file, every table exactly, as `cairn dump` writes it (restore: `cairn load`); `.dump --script`: documents, UTF-8 table entries and JSON events as shell commands `.read` replays (event ids, metadata and times are not kept)"),
    (".read", "FILE", "run the commands in FILE"),
    (".stats", "", "pages, fill factor and per-table statistics"),
    (
        ".check",
        "",
        "verify every page, the indexes and the event streams",
    ),
    (
        ".backup",
        "FILE",
        "write a consistent copy of the file to FILE",
    ),
    (
        ".begin",
        "",
        "start a transaction spanning the following commands",
    ),
    (".commit", "", "commit the transaction"),
    (".rollback", "", "discard the transaction"),
    (".quit", "", "leave (also .exit, exit, Ctrl-D)"),
];

const HELP: &str = "\
Collections (arguments are relaxed JSON: {name: 'ada', age: {$gt: 30}}):
  db.COLL.find({filter}, {projection}).sort({f: -1}).skip(N).limit(N)
  db.COLL.find(...).count()         db.COLL.find(...).explain()
  db.COLL.findOne({filter})         db.COLL.countDocuments({filter})
  db.COLL.aggregate([{$match: {...}}, {$group: {_id: '$f', n: {$sum: 1}}}], {explain: true})
  db.COLL.distinct('field', {filter})
  db.COLL.insertOne({doc})          db.COLL.insertMany([{doc}, ...])
  db.COLL.updateOne({filter}, {$set: {...}}, {upsert: true})   (also updateMany)
  db.COLL.replaceOne({filter}, {doc})
  db.COLL.deleteOne({filter})       db.COLL.deleteMany({filter})
  db.COLL.createIndex({f: 1, g: -1}, {unique: true, sparse: true, name: 'x'})
  db.COLL.getIndexes()              db.COLL.dropIndex('name')    db.COLL.drop()
  show collections | tables | streams          it   (the next batch of results)
Tables:   get TABLE KEY    put TABLE KEY VALUE    del TABLE KEY    scan TABLE [PREFIX]
Streams:  append STREAM TYPE [DATA]    read STREAM [FROM [LIMIT]]    tail STREAM [N]
Words with blanks are quoted: put t 'my key' \"my value\".  // starts a comment.
Tab completes commands, names and field paths; a statement continues on the
next line until its brackets close; Ctrl-C cancels the line (or stops a
statement printing rows), Ctrl-D leaves.
";

fn need<'a>(args: &'a [String], i: usize, usage: &str) -> SRes<&'a str> {
    args.get(i)
        .map(String::as_str)
        .ok_or_else(|| user(format!("usage: {usage}")))
}

fn at_most(args: &[String], n: usize, usage: &str) -> SRes {
    if args.len() > n {
        return Err(user(format!("too many arguments; usage: {usage}")));
    }
    Ok(())
}

fn is_csv(path: &str) -> bool {
    Path::new(path)
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("csv"))
}

/// A CSV cell as a value: numbers, true/false/null as themselves, else a
/// string; an empty cell is a missing field.
fn csv_value(s: &str) -> Option<Json> {
    if s.is_empty() {
        return None;
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(Json::from(i));
    }
    if let Some(n) = s
        .parse::<f64>()
        .ok()
        .filter(|f| f.is_finite() && s.chars().all(|c| c.is_ascii_digit() || ".eE+-".contains(c)))
        .and_then(serde_json::Number::from_f64)
    {
        return Some(Json::Number(n));
    }
    Some(match s {
        "true" => Json::Bool(true),
        "false" => Json::Bool(false),
        "null" => Json::Null,
        _ => Json::String(s.to_string()),
    })
}

impl Shell<'_> {
    pub(super) fn dot(&mut self, name: &str, args: &[String]) -> SRes {
        // These write out the latest commit first, which takes the writer
        // lock: the open transaction holds it, so they would wait forever.
        if matches!(name, "backup" | "stats" | "check") && self.txn.is_some() {
            return Err(user(format!(
                ".{name} needs the writer lock, which the open transaction holds: \
                 .commit or .rollback first"
            )));
        }
        match name {
            "help" => {
                write!(self.out, "{HELP}")?;
                writeln!(self.out, "Dot-commands:")?;
                for (cmd, a, what) in DOT_COMMANDS {
                    writeln!(self.out, "  {:<22} {what}", format!("{cmd} {a}"))?;
                }
            }
            "quit" | "exit" | "q" => {
                at_most(args, 0, ".quit")?;
                self.quit = true;
            }
            "tables" => {
                for t in self.table_names()? {
                    let n = self.table_len(&t)?;
                    writeln!(self.out, "{t}\t{n}")?;
                }
            }
            "collections" => {
                for c in self.list_collections()? {
                    let n = with_coll!(&self.db, &c, |coll| coll.len()?);
                    writeln!(self.out, "{c}\t{n}")?;
                }
            }
            "streams" => {
                let streams = match &self.db {
                    Db::File(db) => EventStore::new(db).list_streams("")?,
                    Db::Etcd(db) => db.events().list_streams("")?,
                };
                for s in streams {
                    let version = s.version.map_or_else(|| "-".to_string(), |v| v.to_string());
                    let state = match s.state {
                        cairndb::events::StreamState::Live => "live",
                        cairndb::events::StreamState::SoftDeleted => "deleted",
                        cairndb::events::StreamState::HardDeleted => "tombstoned",
                    };
                    writeln!(self.out, "{}\t{version}\t{state}", s.name)?;
                }
            }
            "indexes" => {
                at_most(args, 1, ".indexes [COLL]")?;
                let colls = match args.first() {
                    Some(c) => {
                        if !self.list_collections()?.contains(c) {
                            return Err(user(format!("no collection {c:?}")));
                        }
                        vec![c.clone()]
                    }
                    None => self.list_collections()?,
                };
                for c in colls {
                    for i in with_coll!(&self.db, &c, |coll| coll.list_indexes()?) {
                        writeln!(self.out, "{c}\t{}", crate::docs::index_listing(&i))?;
                    }
                }
            }
            "schema" => {
                let usage = ".schema COLL [N]";
                at_most(args, 2, usage)?;
                let coll = need(args, 0, usage)?;
                let n: u64 = match args.get(1) {
                    None => 1000,
                    Some(s) => s
                        .parse()
                        .map_err(|_| user(format!("N must be a whole number, not {s:?}")))?,
                };
                if !self.list_collections()?.iter().any(|c| c == coll) {
                    return Err(user(format!("no collection {coll:?}")));
                }
                let schema = self.sample(coll, n)?;
                if schema.sampled == 0 {
                    writeln!(self.out, "collection {coll:?} is empty")?;
                    return Ok(());
                }
                let table = Printer {
                    mode: match self.printer.mode {
                        Mode::Json | Mode::Line => Mode::Table,
                        m => m,
                    },
                    ..self.printer.clone()
                };
                table.rows(&mut self.out, &schema.rows(), true)?;
            }
            "mode" => {
                at_most(args, 1, ".mode [MODE]")?;
                match args.first() {
                    None => writeln!(self.out, "{}", self.printer.mode.name())?,
                    Some(m) => {
                        self.printer.mode = Mode::parse(m).ok_or_else(|| {
                            user(format!(
                                "unknown mode {m:?}: use one of {}",
                                Mode::NAMES.join(", ")
                            ))
                        })?;
                    }
                }
            }
            "output" => {
                at_most(args, 1, ".output [FILE]")?;
                self.set_output(args.first().map(String::as_str))?;
            }
            "timer" => {
                at_most(args, 1, ".timer on|off")?;
                self.timer = match args.first().map(String::as_str) {
                    Some("on") => true,
                    Some("off") => false,
                    _ => return Err(user("usage: .timer on|off")),
                };
            }
            "pagesize" => {
                at_most(args, 1, ".pagesize N")?;
                let n = need(args, 0, ".pagesize N")?;
                self.page_size = n
                    .parse()
                    .map_err(|_| user(format!("N must be a whole number, not {n:?}")))?;
            }
            "import" => {
                let usage = ".import FILE COLL";
                at_most(args, 2, usage)?;
                let (file, coll) = (need(args, 0, usage)?, need(args, 1, usage)?);
                let n = self.import(file, coll)?;
                writeln!(self.out, "imported {n} documents into {coll:?}")?;
            }
            "export" => {
                let usage = ".export COLL FILE";
                at_most(args, 2, usage)?;
                let (coll, file) = (need(args, 0, usage)?, need(args, 1, usage)?);
                let n = self.export(coll, file)?;
                writeln!(self.out, "exported {n} documents to {file:?}")?;
            }
            "dump" => {
                let usage = ".dump [FILE] | .dump --script";
                at_most(args, 1, usage)?;
                match args.first().map(String::as_str) {
                    Some("--script") => self.dump()?,
                    Some(file) => {
                        let f = std::fs::File::create(file)
                            .map_err(|e| user(format!("cannot create {file:?}: {e}")))?;
                        let mut w = std::io::BufWriter::new(f);
                        self.write_dump(&mut w)?;
                        w.flush()?;
                        writeln!(self.out, "dumped to {file:?} (restore with `cairn load`)")?;
                    }
                    None => {
                        let mut buf = Vec::new();
                        self.write_dump(&mut buf)?;
                        self.out.write_all(&buf)?;
                    }
                }
            }
            "read" => {
                at_most(args, 1, ".read FILE")?;
                let file = need(args, 0, ".read FILE")?;
                if self.depth >= 16 {
                    return Err(user(".read is nested too deeply (16 levels)"));
                }
                let text =
                    std::fs::read(file).map_err(|e| user(format!("cannot read {file:?}: {e}")))?;
                let text = String::from_utf8_lossy(&text).into_owned();
                self.depth += 1;
                let label = file.to_string();
                let ok = self.run_script(&text, Some(&label));
                self.depth -= 1;
                if !ok {
                    return Err(user(format!("{file}: a command failed")));
                }
            }
            "stats" => {
                at_most(args, 0, ".stats")?;
                let mut buf = Vec::new();
                crate::write_stats(self.file(".stats")?, &self.path, false, &mut buf)?;
                self.out.write_all(&buf)?;
            }
            "check" => {
                at_most(args, 0, ".check")?;
                let mut buf = Vec::new();
                let res = match &self.db {
                    // (`check_db` checks the collections' indexes.)
                    Db::File(db) => crate::check_db(db, &mut buf),
                    Db::Etcd(db) => crate::etcd::check_prefix(db, &mut buf),
                };
                self.out.write_all(&buf)?;
                res?;
            }
            "backup" => {
                at_most(args, 1, ".backup FILE")?;
                let file = need(args, 0, ".backup FILE")?;
                self.file(".backup")?.backup_to(file)?;
                writeln!(self.out, "backed up to {file:?}")?;
            }
            "begin" => {
                at_most(args, 0, ".begin")?;
                if self.txn.is_some() {
                    return Err(user("a transaction is already open (.commit or .rollback)"));
                }
                self.txn = Some(match &self.db {
                    Db::File(db) => Txn::File(Box::new(db.begin_write()?)),
                    Db::Etcd(db) => Txn::Etcd(db.begin_write()?),
                });
                writeln!(self.out, "transaction open")?;
            }
            "commit" => {
                at_most(args, 0, ".commit")?;
                let txn = self
                    .txn
                    .take()
                    .ok_or_else(|| user("no transaction is open (.begin starts one)"))?;
                match txn {
                    Txn::File(t) => {
                        (*t).commit()?;
                    }
                    Txn::Etcd(t) => {
                        t.commit().map_err(|e| match e {
                            cairndb_etcd::Error::Conflict { read_revision } => user(format!(
                                "the transaction was not committed: another client changed \
                                 what it read after revision {read_revision}, so nothing of \
                                 it was written; run it again (.begin, the statements, \
                                 .commit)"
                            )),
                            other => other.into(),
                        })?;
                    }
                }
                writeln!(self.out, "committed")?;
            }
            "rollback" => {
                at_most(args, 0, ".rollback")?;
                let txn = self
                    .txn
                    .take()
                    .ok_or_else(|| user("no transaction is open (.begin starts one)"))?;
                txn.abort();
                writeln!(self.out, "rolled back")?;
            }
            other => {
                return Err(user(format!(
                    "unknown dot-command .{other} (.help lists them)"
                )))
            }
        }
        Ok(())
    }

    /// The schema of up to `n` documents of `coll` (as the open transaction
    /// sees them, if any).
    pub(super) fn sample(&self, coll: &str, n: u64) -> SRes<Schema> {
        let mut s = Schema::default();
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        match &self.txn {
            Some(txn) => {
                for d in with_txn_coll!(txn, coll, |c| c.find(serde_json::json!({}))?)
                    .iter()
                    .take(n)
                {
                    s.add(d);
                }
            }
            None => with_coll!(&self.db, coll, |c| {
                for d in c.find(serde_json::json!({}))?.take(n) {
                    s.add(&d?);
                }
            }),
        }
        Ok(s)
    }

    fn import(&mut self, file: &str, coll: &str) -> SRes<u64> {
        let f = File::open(file).map_err(|e| user(format!("cannot read {file:?}: {e}")))?;
        let mut docs = Vec::new();
        let mut header: Option<Vec<String>> = None;
        for (i, line) in BufReader::new(f).lines().enumerate() {
            check_interrupt()?;
            let line = line.map_err(|e| user(format!("{file}: {e}")))?;
            let at = |msg: String| user(format!("{file}, line {}: {msg}", i + 1));
            if line.trim().is_empty() {
                continue;
            }
            let doc = if is_csv(file) {
                let fields = output::csv_split(&line);
                let Some(h) = &header else {
                    header = Some(fields);
                    continue;
                };
                if fields.len() > h.len() {
                    return Err(at(format!(
                        "{} fields, more than the header's {}",
                        fields.len(),
                        h.len()
                    )));
                }
                let mut m = serde_json::Map::new();
                for (k, v) in h.iter().zip(&fields) {
                    if let Some(v) = csv_value(v) {
                        m.insert(k.clone(), v);
                    }
                }
                Json::Object(m)
            } else {
                let mut p = Parser::new(&line);
                p.whole_value()
                    .map_err(|e| at(format!("column {}: {}", e.pos + 1, e.msg)))?
            };
            match to_doc(doc) {
                Ok(d) => docs.push(d),
                Err(super::ShellError::Run(e)) => return Err(at(e.to_string())),
                Err(e) => return Err(e),
            }
        }
        let n = docs.len() as u64;
        match &self.txn {
            Some(txn) => with_txn_coll!(txn, coll, |c| c.insert_many(docs.iter())?),
            None => with_coll!(&self.db, coll, |c| c.insert_many(docs.iter())?),
        };
        Ok(n)
    }

    fn export(&mut self, coll: &str, file: &str) -> SRes<u64> {
        if !self.list_collections()?.iter().any(|c| c == coll) {
            return Err(user(format!("no collection {coll:?}")));
        }
        let docs: Vec<Json> = match &self.txn {
            Some(txn) => with_txn_coll!(txn, coll, |c| c.find(serde_json::json!({}))?)
                .into_iter()
                .map(doc_json)
                .collect(),
            // A scan with no sort: `_id` order, on both backends.
            None => with_coll!(&self.db, coll, |c| c
                .find(serde_json::json!({}))?
                .map(|d| d.map(doc_json))
                .collect::<Result<_, _>>()?),
        };
        let f = File::create(file).map_err(|e| user(format!("cannot write {file:?}: {e}")))?;
        let mut w = BufWriter::new(f);
        if is_csv(file) {
            let p = Printer {
                mode: Mode::Csv,
                color: false,
                width: None,
            };
            p.rows(&mut w, &docs, true)?;
        } else {
            for d in &docs {
                check_interrupt()?;
                writeln!(w, "{d}")?;
            }
        }
        w.flush()?;
        Ok(docs.len() as u64)
    }

    /// The file as a script that `.read` replays into an empty file:
    /// tables (UTF-8 entries), collections (indexes, then documents) and
    /// events (JSON data, in global order; ids, metadata and timestamps
    /// are not kept).
    fn dump(&mut self) -> SRes {
        let db = match &self.db {
            Db::File(db) => db,
            Db::Etcd(_) => {
                return Err(user(
                    ".dump --script needs a database file; on a cluster .dump [FILE] writes \
                     the prefix as `cairn dump` does",
                ))
            }
        };
        let out = &mut self.out;
        writeln!(out, "// CairnDB dump of {}", self.path.display())?;
        let r = db.begin_read()?;
        for t in user_tables(r.list_tables()?) {
            let table = raw::open_read(&r, &t)?;
            for e in table.iter()? {
                check_interrupt()?;
                let (k, v) = e?;
                match (
                    std::str::from_utf8(k.value()),
                    std::str::from_utf8(v.value()),
                ) {
                    (Ok(k), Ok(v)) => writeln!(
                        out,
                        "put {} {} {}",
                        Json::from(t.as_str()),
                        Json::from(k),
                        Json::from(v)
                    )?,
                    _ => writeln!(out, "// skipped an entry of {t:?} that is not UTF-8")?,
                }
            }
        }
        drop(r);
        for c in db.list_collections()? {
            let coll = db.collection::<Document>(&c);
            let name = Json::from(c.as_str());
            for i in coll.list_indexes()? {
                let key: serde_json::Map<String, Json> = i
                    .fields
                    .iter()
                    .map(|(p, o)| (p.clone(), Json::from(*o)))
                    .collect();
                let opts =
                    serde_json::json!({"name": i.name, "unique": i.unique, "sparse": i.sparse});
                writeln!(
                    out,
                    "db.getCollection({name}).createIndex({}, {opts})",
                    Json::Object(key)
                )?;
            }
            for d in coll.all()? {
                check_interrupt()?;
                writeln!(out, "db.getCollection({name}).insertOne({})", doc_json(d?))?;
            }
        }
        let store = EventStore::new(db);
        let mut from = ReadFrom::Start;
        loop {
            let batch = store.read_all(from, Direction::Forward, 1000, &EventFilter::all())?;
            let Some(last) = batch.last().map(|e| e.position) else {
                break;
            };
            for e in &batch {
                check_interrupt()?;
                let data = if e.data.is_empty() {
                    Some(String::new())
                } else {
                    serde_json::from_slice::<Json>(&e.data)
                        .ok()
                        .map(|j| format!(" {j}"))
                };
                match data {
                    Some(d) => writeln!(
                        out,
                        "append {} {}{d}",
                        Json::from(e.stream.as_str()),
                        Json::from(e.event_type.as_str())
                    )?,
                    None => writeln!(
                        out,
                        "// skipped event {} of {:?}: its data is not JSON",
                        e.version, e.stream
                    )?,
                }
            }
            from = ReadFrom::At(last.next());
        }
        Ok(())
    }

    /// `.dump` as `cairn dump` writes it: the file's tables, or the
    /// cluster prefix's (as `cairn dump etcd://…`).
    fn write_dump(&self, out: &mut dyn Write) -> SRes {
        match &self.db {
            Db::File(db) => crate::write_dump(db, None, out)?,
            Db::Etcd(db) => crate::etcd::write_dump(db, None, out)?,
        }
        Ok(())
    }
}
