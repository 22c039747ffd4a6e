//! `cairn` on an etcd cluster: the KV-level commands (`tables`, `get`,
//! `put`, `del`, `dump`, `load`) take an `etcd://host:port,…/prefix` URL
//! where they take a file, and `cairn migrate` copies a database between a
//! file and a cluster (README, "On an etcd cluster"; ARCHITECTURE.md,
//! "etcd mode"); `cairn events` (events.rs) and the document commands
//! (docstore.rs: `import`, `export`, `find`, `count`, `distinct`,
//! `aggregate`, `update`, `delete`, `collections`, `index`, TTL indexes
//! included) and `cairn watch` (watch.rs: the cluster's change streams)
//! run on a cluster through the storage seam, the same code as on a file,
//! and so does the shell (shell/). `cairn check` and `cairn expire` on a
//! cluster are here. What needs the file itself is refused, naming it
//! (`serve`, `info`, `stats`, `compact`, `backup`).
//!
//! [`route`] picks the backend of a parsed command: a file goes on to
//! `main.rs`'s code unchanged, a URL is served here.

use std::collections::BTreeMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use cairndb::document::{Document, SnapshotCollection};
use cairndb::{Database, Durability, ReadableTable};
use cairndb_etcd::{EtcdDatabase, Options};

use crate::dump_input::{self, DumpReader, Item};
use crate::{jsonl, raw, CliError, Command, Res};

/// Where a command's database lives.
#[derive(Debug)]
pub enum Backend {
    /// A database file.
    File(PathBuf),
    /// A prefix of an etcd cluster (the `etcd://` URL).
    Etcd(String),
}

/// How an etcd URL starts.
const SCHEME: &str = "etcd://";

impl Backend {
    /// The backend a command-line database argument names.
    pub fn of(arg: &Path) -> Backend {
        match arg.to_str() {
            Some(s) if s.starts_with(SCHEME) => Backend::Etcd(s.to_string()),
            _ => Backend::File(arg.to_path_buf()),
        }
    }
}

/// The layers' errors from a cluster as the same errors from a file (the
/// same messages and exit statuses); the cluster's own as themselves.
impl From<cairndb_etcd::Error> for CliError {
    fn from(e: cairndb_etcd::Error) -> Self {
        match e {
            cairndb_etcd::Error::Documents(d) => CliError::Db(cairndb::Error::Document(*d)),
            cairndb_etcd::Error::Events(e) => CliError::Db(cairndb::Error::Event(*e)),
            cairndb_etcd::Error::Engine(c) => CliError::Db(cairndb::Error::Core(c)),
            other => CliError::Etcd(other),
        }
    }
}

/// What `cairn` does on an etcd cluster, named in the refusal of the rest.
const SUPPORTED: &str = "on an etcd:// database cairn runs the shell, tables, get, put, del, \
     dump, load, migrate, check, expire, events, watch and the document commands (import, \
     export, find, count, distinct, aggregate, update, delete, collections, index \
     create/list/drop, TTL indexes included); serve, info, stats, compact and backup need a \
     database file";

/// Serves `command` when its database is an `etcd://` URL (`Some(result)`);
/// `None` leaves it to the file code (or, for the event and document
/// commands and the shell, to their own choice of backend). A command
/// that needs the file itself (info, stats, compact, backup, serve) is
/// refused when any of its arguments is an `etcd://` URL.
pub fn route(command: &Command, out: &mut impl Write) -> Option<Res> {
    let etcd = |db: &Path| match Backend::of(db) {
        Backend::Etcd(url) => Some(url),
        Backend::File(_) => None,
    };
    match command {
        Command::Migrate { src, dest } => return Some(migrate(src, dest, out)),
        Command::Tables { db } => {
            if let Some(url) = etcd(db) {
                return Some(tables(&url, out));
            }
        }
        Command::Get { db, table, key } => {
            if let Some(url) = etcd(db) {
                return Some(get(&url, table, key, out));
            }
        }
        Command::Put {
            db,
            table,
            key,
            value,
        } => {
            if let Some(url) = etcd(db) {
                return Some(put(&url, table, key, value));
            }
        }
        Command::Del { db, table, key } => {
            if let Some(url) = etcd(db) {
                return Some(del(&url, table, key));
            }
        }
        Command::Dump { db, table } => {
            if let Some(url) = etcd(db) {
                return Some(dump(&url, table.as_deref(), out));
            }
        }
        Command::Load { db, merge } => {
            if let Some(url) = etcd(db) {
                return Some(load(&url, *merge));
            }
        }
        Command::Check { db } => {
            if let Some(url) = etcd(db) {
                return Some(check(&url, out));
            }
        }
        Command::Expire { db, collection } => {
            if let Some(url) = etcd(db) {
                return Some(expire(&url, collection.as_deref(), out));
            }
        }
        Command::Serve(args) => {
            if let Some(url) = etcd(args.db()) {
                return Some(Err(CliError::User(format!(
                    "`cairn serve` does not work on etcd ({url}): the HTTP server is built on                      the embedded engine's file (its admin, backup and live-subscription                      endpoints need it); on a cluster use the cairndb-etcd crate's                      EtcdDatabase from your application, or `cairn shell {url}` and the                      document, event and KV commands, or serve a file (`cairn migrate {url}                      FILE` copies the prefix into one)"
                ))));
            }
        }
        // (The event and document commands pick their backend themselves:
        // events.rs, docstore.rs.)
        Command::Events(_)
        | Command::Import { .. }
        | Command::Export { .. }
        | Command::Find { .. }
        | Command::Count { .. }
        | Command::Distinct { .. }
        | Command::Aggregate { .. }
        | Command::Update { .. }
        | Command::Delete { .. }
        | Command::Collections { .. }
        | Command::Watch(_)
        | Command::Shell(_)
        | Command::Index(_) => return None,
        #[cfg(feature = "bench")]
        Command::Bench(_) => return None,
        _ => {
            let name = std::env::args().nth(1).unwrap_or_default();
            if let Some(url) = std::env::args().skip(1).find(|a| a.starts_with(SCHEME)) {
                return Some(Err(CliError::User(format!(
                    "`cairn {name}` does not work on etcd ({url}): {SUPPORTED}"
                ))));
            }
        }
    }
    None
}

/// `cairn check` on a cluster: from one snapshot (one revision), every
/// collection's indexes against its documents and the event layer's
/// invariants, the library's own checks through the storage seam; `ok`,
/// or each problem and exit status 2, as on a file. (A cluster has no
/// pages to verify: etcd checks its own data, `etcdctl check`.)
fn check(url: &str, out: &mut impl Write) -> Res {
    check_prefix(&connect(url)?, out)
}

/// [`check`] on a connected prefix (also the shell's `.check`).
pub(crate) fn check_prefix(db: &EtcdDatabase, out: &mut dyn Write) -> Res {
    let r = db.begin_read()?;
    let mut problems: Vec<String> = cairndb::events::EventSnapshot::new(&r)
        .check()?
        .into_iter()
        .map(|p| format!("event streams: {p}"))
        .collect();
    for name in cairndb::document::snapshot::list_collections_in(&r)? {
        problems.extend(SnapshotCollection::<_, Document>::new(&r, &name).check_indexes()?);
    }
    if problems.is_empty() {
        writeln!(out, "ok")?;
        return Ok(());
    }
    for p in &problems {
        writeln!(out, "{p}")?;
    }
    let _ = writeln!(
        io::stderr(),
        "cairn: checked {} at revision {}",
        db.prefix(),
        r.revision()
    );
    Err(CliError::Problems(problems.len()))
}

/// `cairn expire` on a cluster: every expired document of the TTL indexes
/// deleted now (`EtcdCollection::delete_expired`, in transactions of at
/// most `cairndb_etcd::TTL_BATCH_DOCS` documents, fewer when one would not
/// fit etcd's limits), each collection's name and count printed as on a
/// file.
fn expire(url: &str, only: Option<&str>, out: &mut impl Write) -> Res {
    let db = connect(url)?;
    let names = crate::expire_names(
        db.list_collections()?,
        db.ttl_collections()?,
        only,
        "the prefix",
    )?;
    for name in &names {
        let n = db.collection::<Document>(name).delete_expired(usize::MAX)?;
        writeln!(out, "{name}\t{n}")?;
    }
    Ok(())
}

fn connect(url: &str) -> Result<EtcdDatabase, CliError> {
    Ok(EtcdDatabase::connect(url)?)
}

fn tables(url: &str, out: &mut impl Write) -> Res {
    let db = connect(url)?;
    let rx = db.begin_read()?;
    for name in rx.list_tables()? {
        let len = rx.open_table(&name)?.len()?;
        writeln!(out, "{name}\t{len}")?;
    }
    Ok(())
}

fn get(url: &str, table: &str, key: &str, out: &mut impl Write) -> Res {
    let db = connect(url)?;
    let rx = db.begin_read()?;
    let value = rx
        .open_table(table)?
        .get(key.as_bytes())?
        .ok_or_else(|| crate::key_not_found(table, key))?;
    out.write_all(&value)?;
    writeln!(out)?;
    Ok(())
}

/// Whether CLI text can be written as a key or value of this type (as in
/// `raw.rs`).
fn text_writable(type_name: &str) -> bool {
    type_name == "&[u8]" || type_name == "&str"
}

fn put(url: &str, table: &str, key: &str, value: &str) -> Res {
    let db = connect(url)?;
    let mut refused = None;
    db.run_in_transaction(|tx| {
        refused = None;
        if let Some((k, v)) = tx.table_types(table)? {
            if !text_writable(&k) || !text_writable(&v) {
                refused = Some(CliError::UnsupportedTypes {
                    table: table.to_string(),
                    key_type: k,
                    value_type: v,
                });
                return Ok(());
            }
        }
        tx.open_table(table)?
            .insert(key.as_bytes(), value.as_bytes())
    })?;
    refused.map_or(Ok(()), Err)
}

fn del(url: &str, table: &str, key: &str) -> Res {
    let db = connect(url)?;
    // Whether the table and the key were there, as the transaction that
    // committed saw them.
    let mut found = (false, false);
    db.run_in_transaction(|tx| {
        found = (tx.table_types(table)?.is_some(), false);
        if found.0 {
            let t = tx.open_table(table)?;
            found.1 = t.get(key.as_bytes())?.is_some();
            if found.1 {
                t.remove(key.as_bytes())?;
            }
        }
        Ok(())
    })?;
    match found {
        (false, _) => Err(CliError::User(format!("table {table:?} does not exist"))),
        (true, false) => Err(crate::key_not_found(table, key)),
        (true, true) => Ok(()),
    }
}

/// The file format version an etcd dump's header names: a prefix has no
/// file format, and version 1 is one every `cairn load` accepts.
const ETCD_DUMP_FORMAT_VERSION: u32 = 1;

fn dump(url: &str, only: Option<&str>, out: &mut impl Write) -> Res {
    write_dump(&connect(url)?, only, out)
}

/// [`dump`] of a connected prefix (also the shell's `.dump`).
pub(crate) fn write_dump(db: &EtcdDatabase, only: Option<&str>, out: &mut dyn Write) -> Res {
    let rx = db.begin_read()?;
    let names = match only {
        Some(t) => vec![t.to_string()],
        None => rx.list_tables()?,
    };
    let mut tables = Vec::new();
    for name in &names {
        let t = rx.open_table(name)?;
        let types = rx
            .table_types(name)?
            .ok_or_else(|| CliError::User(format!("table {name:?} does not exist")))?;
        tables.push((name, types, t));
    }
    let whole = only.is_none();
    let enc = |e: serde_json::Error| CliError::Io(io::Error::from(e));
    if whole {
        let header =
            jsonl::encode_header(ETCD_DUMP_FORMAT_VERSION, cairndb::limits::DEFAULT_PAGE_SIZE)
                .map_err(enc)?;
        writeln!(out, "{header}")?;
    }
    let mut counts = jsonl::Counts {
        tables: 0,
        entries: 0,
    };
    for (name, (k, v), t) in tables {
        writeln!(out, "{}", jsonl::encode_schema(name, &k, &v).map_err(enc)?)?;
        counts.tables += 1;
        for (key, value) in t.range(..)? {
            writeln!(out, "{}", jsonl::encode(name, &key, &value).map_err(enc)?)?;
            counts.entries += 1;
        }
    }
    if whole {
        writeln!(out, "{}", jsonl::encode_end(counts).map_err(enc)?)?;
    }
    Ok(())
}

/// One write of a batch: a table (created with its types) or an entry.
enum Op {
    Table {
        name: String,
    },
    Entry {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
}

/// Writes tables and entries into an etcd prefix in transactions that fit
/// the cluster's limits (`--max-txn-ops`, `--max-request-bytes`), each
/// committed before the next is filled.
struct Batches<'a> {
    db: &'a EtcdDatabase,
    ops: Vec<Op>,
    /// The types of every table this writer opened (`None`: whatever
    /// the existing table has, `&[u8]` for a new one).
    types: BTreeMap<String, Option<(String, String)>>,
    /// The etcd operations and request bytes of the batch so far.
    cost: (usize, usize),
    /// The tables the batch writes (each costs a version key, a catalog
    /// key and a compare).
    batch_tables: std::collections::BTreeSet<String>,
    /// The batches committed.
    committed: u64,
    /// The entries given to the writer.
    entries: u64,
    /// The entries of the batches committed.
    committed_entries: u64,
}

/// Bytes kept free in each request for the protobuf framing of the whole.
const REQUEST_MARGIN_BYTES: usize = 4096;

impl<'a> Batches<'a> {
    fn new(db: &'a EtcdDatabase) -> Self {
        Batches {
            db,
            ops: Vec::new(),
            types: BTreeMap::new(),
            cost: (1, REQUEST_MARGIN_BYTES),
            batch_tables: Default::default(),
            committed: 0,
            entries: 0,
            committed_entries: 0,
        }
    }

    /// The etcd operations and bytes `op` adds to the batch (its table's
    /// catalog put, version put and compare the first time the batch
    /// names it).
    fn cost_of(&self, table: &str, bytes: usize) -> (usize, usize) {
        let per_key =
            self.db.prefix().len() + 4 + table.len() + cairndb_etcd::REQUEST_OVERHEAD_BYTES_PER_OP;
        let (mut ops, mut size) = (0, 0);
        if bytes > 0 {
            ops += 1;
            size += per_key + bytes;
        }
        if !self.batch_tables.contains(table) {
            let type_names = match self.types.get(table) {
                Some(Some((k, v))) => k.len() + v.len() + 2,
                _ => 0,
            };
            ops += 2;
            size += 3 * per_key + "table".len() + type_names;
        }
        (ops, size)
    }

    fn push(&mut self, table: &str, op: Op, bytes: usize) -> Res {
        let (ops, size) = self.cost_of(table, bytes);
        let limits = self.db.options();
        let fits = |c: (usize, usize)| {
            c.0 + ops <= limits.max_txn_ops && c.1 + size <= limits.max_request_bytes
        };
        if !fits(self.cost) && !self.ops.is_empty() {
            self.flush()?;
        }
        let (ops, size) = self.cost_of(table, bytes);
        self.cost = (self.cost.0 + ops, self.cost.1 + size);
        self.batch_tables.insert(table.to_string());
        self.ops.push(op);
        Ok(())
    }

    fn table(&mut self, name: &str, types: Option<(&str, &str)>) -> Res {
        let types = types.map(|(k, v)| (k.to_string(), v.to_string()));
        self.types.insert(name.to_string(), types);
        self.push(
            name,
            Op::Table {
                name: name.to_string(),
            },
            0,
        )
    }

    fn entry(&mut self, table: &str, key: &[u8], value: &[u8]) -> Res {
        self.types.entry(table.to_string()).or_insert(None);
        self.entries += 1;
        self.push(
            table,
            Op::Entry {
                table: table.to_string(),
                key: key.to_vec(),
                value: value.to_vec(),
            },
            key.len() + value.len(),
        )
    }

    /// Commits the batch as one etcd transaction.
    fn flush(&mut self) -> Res {
        if self.ops.is_empty() {
            return Ok(());
        }
        let types = &self.types;
        let ops = &self.ops;
        self.db.run_in_transaction(|tx| {
            let open = |name: &str| match types.get(name).and_then(|t| t.as_ref()) {
                Some((k, v)) => tx.open_table_with_types(name, k, v),
                None => tx.open_table(name),
            };
            for op in ops {
                match op {
                    Op::Table { name, .. } => {
                        open(name)?;
                    }
                    Op::Entry { table, key, value } => open(table)?.insert(key, value)?,
                }
            }
            Ok(())
        })?;
        let entries = ops
            .iter()
            .filter(|op| matches!(op, Op::Entry { .. }))
            .count();
        self.committed_entries += entries as u64;
        self.ops.clear();
        self.batch_tables.clear();
        self.cost = (1, REQUEST_MARGIN_BYTES);
        self.committed += 1;
        abort_for_tests(self.committed);
        Ok(())
    }
}

/// Whether this build has the test hooks: debug builds (the tests' builds)
/// only, so that no environment variable can abort a user's migration.
const TEST_HOOKS: bool = cfg!(debug_assertions);

/// A test hook, in debug builds only ([`TEST_HOOKS`]):
/// `CAIRN_TEST_MIGRATE_CRASH_AFTER=n` aborts the process (no cleanup, as a
/// crash or `kill -9` would) once `n` batches are committed, so that the
/// tests can leave a partial migration behind.
fn abort_for_tests(committed: u64) {
    let value = std::env::var("CAIRN_TEST_MIGRATE_CRASH_AFTER").ok();
    if crash_after(TEST_HOOKS, value) == Some(committed) {
        let _ = writeln!(
            io::stderr(),
            "cairn: test hook: crashing after {committed} batches"
        );
        std::process::abort();
    }
}

/// After how many batches the test hook crashes: never without the hooks
/// (`hooks`), whatever the variable (`value`) says.
fn crash_after(hooks: bool, value: Option<String>) -> Option<u64> {
    if !hooks {
        return None;
    }
    value.and_then(|v| v.parse::<u64>().ok())
}

/// `cairn load` into an etcd prefix: a whole dump (with its header) is a
/// migration into an empty prefix ([`EtcdDatabase::begin_migration`]);
/// table lines go into a prefix without tables, or with `--merge` into one
/// that holds some. The lines are read and checked as for a file
/// (`dump_input.rs`); batches as the cluster's limits require. An error
/// says how many entries earlier batches committed.
fn load(url: &str, merge: bool) -> Res {
    let mut input = DumpReader::open(io::stdin().lock(), None)?;
    let whole = input.header().is_some();
    let db = if whole {
        EtcdDatabase::begin_migration(url, Options::default(), "a cairn dump on standard input")?
    } else {
        let db = connect(url)?;
        let held = db.begin_read()?.list_tables()?;
        if let (false, Some(t)) = (merge, held.first()) {
            return Err(CliError::User(format!(
                "refusing to load into {url}: it already holds {} table(s) ({t:?} first); \
                 pass --merge to add the lines to its tables",
                held.len()
            )));
        }
        db
    };
    let mut batches = Batches::new(&db);
    let loaded = (|| -> Result<u64, CliError> {
        while let Some((n, item)) = input
            .next()
            .map_err(|e| dump_input::committed(e, batches.committed_entries))?
        {
            let at_line = |e: CliError, committed: u64| CliError::AtLine {
                line: n,
                loaded: committed,
                err: Box::new(e),
            };
            match item {
                Item::Schema(s) => batches
                    .table(&s.table, Some((&s.key_type, &s.value_type)))
                    .map_err(|e| at_line(e, batches.committed_entries))?,
                Item::Entry(e) => batches
                    .entry(&e.table, &e.key, &e.value)
                    .map_err(|e| at_line(e, batches.committed_entries))?,
            }
        }
        batches.flush()?;
        Ok(batches.entries)
    })();
    drop(batches);
    let loaded = match loaded {
        Ok(n) => n,
        Err(e) => {
            if whole {
                let _ = writeln!(
                    io::stderr(),
                    "cairn: {url} holds a partial migration, which every client refuses: \
                     delete its keys (etcdctl del --prefix '{}/') and load again",
                    db.prefix()
                );
            }
            return Err(e);
        }
    };
    if whole {
        db.finish_migration()?;
    }
    let _ = writeln!(
        io::stderr(),
        "loaded {loaded} entries from {} lines",
        input.line_no()
    );
    Ok(())
}

/// `cairn migrate SRC DEST`: a file into an empty etcd prefix, or an etcd
/// prefix into a new file, every table (the document and event layers'
/// internal `$` tables included) byte for byte with its key and value
/// types, from one snapshot of the source.
fn migrate(src: &Path, dest: &Path, out: &mut impl Write) -> Res {
    match (Backend::of(src), Backend::of(dest)) {
        (Backend::File(file), Backend::Etcd(url)) => file_to_etcd(&file, &url, out),
        (Backend::Etcd(url), Backend::File(file)) => etcd_to_file(&url, &file, out),
        _ => Err(CliError::User(
            "cairn migrate copies a file into an etcd:// prefix or an etcd:// prefix into a \
             file: one of SRC and DEST must be an etcd:// URL, the other a file"
                .into(),
        )),
    }
}

fn file_to_etcd(file: &Path, url: &str, out: &mut impl Write) -> Res {
    let src = Database::open_read_only(file)?;
    let rx = src.begin_read()?;
    let names = rx.list_tables()?;
    let db = EtcdDatabase::begin_migration(url, Options::default(), &file.display().to_string())?;
    let mut batches = Batches::new(&db);
    for name in &names {
        let (k, v) = raw::types(&rx, name)?;
        batches.table(name, Some((&k, &v)))?;
        for entry in raw::open_read(&rx, name)?.iter()? {
            let (key, value) = entry?;
            batches.entry(name, key.as_bytes(), value.as_bytes())?;
        }
    }
    batches.flush()?;
    let (entries, commits) = (batches.entries, batches.committed);
    drop(batches);
    db.finish_migration()?;
    writeln!(
        out,
        "migrated {} table(s), {entries} entries from {} to {url} in {} etcd transaction(s)",
        names.len(),
        file.display(),
        commits + 2
    )?;
    Ok(())
}

fn etcd_to_file(url: &str, file: &Path, out: &mut impl Write) -> Res {
    if file.exists() {
        return Err(CliError::User(format!(
            "{} already exists; cairn migrate writes a new file",
            file.display()
        )));
    }
    let src = connect(url)?;
    let rx = src.begin_read()?;
    let names = rx.list_tables()?;
    let tmp = crate::temp_beside(file, "migrate");
    let _ = std::fs::remove_file(&tmp);
    let written = (|| -> Result<u64, CliError> {
        let db = Database::create(&tmp)?;
        let restore = db.begin_restore()?;
        let txn = db.begin_write()?;
        txn.set_durability(Durability::Immediate);
        let mut entries = 0u64;
        for name in &names {
            let (k, v) = rx
                .table_types(name)?
                .ok_or_else(|| CliError::User(format!("table {name:?} does not exist")))?;
            let mut t = raw::open_for_restore(&txn, &restore, name, &k, &v)?;
            for (key, value) in rx.open_table(name)?.range(..)? {
                t.insert(&key, &value)?;
                entries += 1;
            }
        }
        txn.commit()?;
        let problems = crate::verify(&db)?;
        if let Some(p) = problems.first() {
            return Err(CliError::User(format!(
                "the migrated database fails its checks ({} problem(s), first: {p}); {} was not written",
                problems.len(),
                file.display()
            )));
        }
        db.close()?;
        Ok(entries)
    })();
    let entries = match written {
        Ok(n) => n,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if file.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::User(format!(
            "{} was created during the migration; it was left alone",
            file.display()
        )));
    }
    crate::rename_durably(&tmp, file)?;
    writeln!(
        out,
        "migrated {} table(s), {entries} entries from {url} (revision {}) to {}",
        names.len(),
        rx.revision(),
        file.display()
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crash_hook_is_off_without_the_test_hooks() {
        assert_eq!(crash_after(false, Some("2".into())), None);
        assert_eq!(crash_after(true, Some("2".into())), Some(2));
        assert_eq!(crash_after(true, Some("x".into())), None);
        assert_eq!(crash_after(true, None), None);
        // The tests' builds have them; a release build has not.
        assert_eq!(TEST_HOOKS, cfg!(debug_assertions));
    }
}
