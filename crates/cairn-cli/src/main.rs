//! `cairn`: inspect, check, compact, query and bulk-load CairnDB files.
//!
//! Exit codes: 0 success; 1 usage or user error (bad arguments, missing or
//! locked file, not a database, table or key not found, limits); 2 the file
//! is damaged (any corruption error — a damaged header, commit slot or page,
//! a truncated file — or `cairn check` finding problems, each naming its
//! page and file offset).

mod docs;
mod docs_query;
mod docstore;
mod dump_input;
mod etcd;
mod events;
mod jsonl;
mod raw;
mod serve;
mod shell;
mod watch;

use std::collections::HashMap;
use std::fmt;
use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use cairndb::document::DocumentError;
use cairndb::events::EventError;
use cairndb::{CoreError, Database, Durability, Error, ReadableTable};
use clap::{Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;

use dump_input::{DumpReader, Item};

/// Inspect, check, compact, query and bulk-load CairnDB database files.
///
/// Exit status: 0 on success, 1 on a usage or user error (missing or locked
/// file, a file that is not a database at all, table or key not found, ...),
/// 2 if the file is a damaged database: a damaged header, commit slot or
/// page, or a truncated file (the message names the page and file offset).
#[derive(Parser)]
#[command(
    name = "cairn",
    version,
    propagate_version = true,
    after_help = "`cairn FILE` opens FILE in the interactive shell, as `cairn shell FILE` does.\n\n\
                  An etcd cluster's prefix, etcd://host:port,host:port/prefix, stands in for FILE \
                  in tables, get, put, del, dump, load, migrate, events, watch and the document \
                  commands (import, export, find, count, distinct, aggregate, update, delete, \
                  collections, index); the shell, serve and the file-level commands (info, \
                  stats, check, compact, backup) need a file."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the file's page size, format version, size, latest commit, number
    /// of tables and what recovery did when it was opened.
    Info {
        /// The database file.
        db: PathBuf,
    },
    /// Show pages by kind, tree depth, fill factor, free pages and
    /// per-table statistics.
    Stats {
        /// The database file.
        db: PathBuf,
        /// Print one JSON object instead of text.
        #[arg(long)]
        json: bool,
    },
    /// List the tables, one per line: name, a tab, the number of entries.
    Tables {
        /// The database file.
        db: PathBuf,
    },
    /// Verify every page of the latest commit; print `ok`, or each problem
    /// with its page and file offset (exit status 2). A commit slot that
    /// recovery had to skip (damaged, or torn by a crash during a commit,
    /// which the next commit repairs) is reported as a problem too. On an
    /// etcd:// URL: every collection's indexes against its documents and
    /// the event streams' invariants, read at one revision.
    Check {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
    },
    /// Move live pages to the front of the file and shrink it.
    Compact {
        /// The database file.
        db: PathBuf,
    },
    /// Print the value stored under a key (its bytes as stored, in a table
    /// of any types).
    Get {
        /// The database file.
        db: PathBuf,
        /// The table name.
        table: String,
        /// The key: its UTF-8 bytes are looked up as the stored key bytes.
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Store a value under a key (the file and the table are created if
    /// missing; new tables hold byte-string keys and values). Only tables of
    /// `&[u8]` or `&str` keys and values can be written to.
    Put {
        /// The database file.
        db: PathBuf,
        /// The table name.
        table: String,
        /// The key (UTF-8).
        #[arg(allow_hyphen_values = true)]
        key: String,
        /// The value (UTF-8).
        #[arg(allow_hyphen_values = true)]
        value: String,
    },
    /// Delete a key (from a table of any types).
    Del {
        /// The database file.
        db: PathBuf,
        /// The table name.
        table: String,
        /// The key: its UTF-8 bytes are the stored key bytes to remove.
        #[arg(allow_hyphen_values = true)]
        key: String,
    },
    /// Print the whole database as JSON lines from one read snapshot: every
    /// table, the document and event layers' own `$` tables included, so
    /// that `cairn load` restores collections (documents, index definitions
    /// and entries) and event streams (positions, versions, ids, metadata,
    /// snapshots) exactly. A header line {"cairn_dump":1,…}, then per table
    /// a schema line {"table":…,"key_type":…,"value_type":…} and one line
    /// {"table":…,"key":…,"value":…} per entry (`key_b64` / `value_b64` hold
    /// bytes that are not UTF-8, in standard base64), then an end line
    /// {"cairn_dump_end":{"tables":…,"entries":…}}. See docs/dump-format.md.
    Dump {
        /// The database file.
        db: PathBuf,
        /// Dump only this table, as table lines without header and end.
        #[arg(long)]
        table: Option<String>,
    },
    /// Read JSON lines in the format of `dump` from standard input and store
    /// them. A whole dump (with its header) is restored into a new file
    /// (written beside it and renamed into place once complete and checked)
    /// or an empty one, and must end with its end line. Table lines without
    /// a header go into a new or empty file, or with `--merge` into one that
    /// holds tables. A file that holds tables is refused otherwise. A schema
    /// line creates its table with the declared types (an existing table must
    /// have them); entries of a table with no schema line go into a new
    /// `&[u8]`/`&[u8]` table or the existing one. Commits every 10,000 lines.
    Load {
        /// The database file.
        db: PathBuf,
        /// Add table lines to a file that already holds tables (internal `$`
        /// tables are never merged: they restore only into an empty file).
        #[arg(long)]
        merge: bool,
    },
    /// Copy a database between a file and an etcd cluster: FILE
    /// etcd://host:port,…/prefix writes every table (the document and event
    /// layers' internal ones included) into an empty prefix, in batches
    /// that fit etcd's limits, which clients refuse until the last one is
    /// committed; etcd://… FILE writes a new file from one etcd revision in
    /// one durable transaction.
    Migrate {
        /// The database to copy: a file or an etcd:// URL.
        src: PathBuf,
        /// Where to copy it: an etcd:// URL (an empty prefix) or a new file.
        dest: PathBuf,
    },
    /// Serve the database over HTTP/JSON (REST API under /api/v1, OpenAPI
    /// document at /api/v1/openapi.json, live event streams as Server-Sent
    /// Events, Prometheus metrics at /metrics) until SIGTERM or Ctrl-C. A
    /// database file only: an etcd:// URL is refused (the server is built
    /// on the embedded engine; see README, "On an etcd cluster").
    Serve(serve::ServeArgs),
    /// Copy the database to DEST from one read snapshot: a valid database
    /// closed cleanly, written to a temporary file beside DEST, flushed,
    /// checked, then renamed into place. Online: it reads through a
    /// read-only handle, so a writer (`cairn serve`, an application) may
    /// hold the file and go on committing; the copy holds every commit
    /// written to the file when it began.
    Backup {
        /// The database file.
        db: PathBuf,
        /// The copy to write.
        dest: PathBuf,
        /// Replace DEST if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Import JSON lines from standard input into a collection (the file
    /// and the collection are created if missing). Documents without `_id`
    /// get a generated one. At a bad line (not a JSON object, a field name
    /// starting with `$` or holding a `.`, a duplicate `_id`, ...) the
    /// import stops, having committed every line before it, and names the
    /// line to resume from; with --continue-on-error it skips bad lines,
    /// reports each, and exits with status 1 at the end if it skipped any.
    Import {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// Replace documents whose `_id` exists instead of failing.
        #[arg(long)]
        upsert: bool,
        /// Documents per transaction (on an etcd cluster at most this many:
        /// fewer when etcd's --max-txn-ops or --max-request-bytes require).
        #[arg(long, default_value_t = 10_000)]
        batch: usize,
        /// Skip the lines that cannot be imported (each reported with its
        /// line number on standard error) instead of stopping at the first.
        #[arg(long, alias = "keep-going")]
        continue_on_error: bool,
    },
    /// Print a collection as JSON lines: one line {"$index":{…}} per index
    /// definition, then every document (`_id` order); the output imports
    /// back with `cairn import`, indexes included.
    Export {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// Print the documents only, without the index lines.
        #[arg(long)]
        no_indexes: bool,
    },
    /// Print the documents matching a filter as JSON lines.
    Find {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// A filter such as '{"age": {"$gt": 30}}' (default: every document).
        #[arg(default_value = "{}")]
        filter: String,
        /// A sort spec such as '{"age": -1}'.
        #[arg(long)]
        sort: Option<String>,
        /// At most this many documents (0: no limit, as in MongoDB).
        #[arg(long)]
        limit: Option<u64>,
        /// Skip this many documents first.
        #[arg(long, default_value_t = 0)]
        skip: u64,
        /// A projection such as '{"name": 1}'.
        #[arg(long)]
        project: Option<String>,
        /// Use this index: its name ('status_1_created_-1'), its key
        /// pattern ('{"status": 1, "created": -1}'), '_id_' for the _id
        /// order, or '{"$natural": 1}' for a collection scan. A hint naming
        /// no index is an error.
        #[arg(long)]
        hint: Option<String>,
        /// Print the plan chosen and the entries it read instead.
        #[arg(long)]
        explain: bool,
    },
    /// Run an aggregation pipeline and print its documents as JSON lines.
    Aggregate {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// The pipeline, a JSON array of stages such as
        /// '[{"$match": {"status": "paid"}}, {"$group": {"_id": "$cust", "n": {"$sum": 1}}}]'.
        pipeline: String,
        /// Print the stages run by the query planner, its plan, and the
        /// stages run in memory instead.
        #[arg(long)]
        explain: bool,
    },
    /// Print the distinct values of a field (arrays contribute their
    /// elements), one JSON value per line, in the engine's value order.
    Distinct {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// The field path, such as 'address.city'.
        field: String,
        /// Only the documents matching this filter.
        #[arg(long)]
        filter: Option<String>,
    },
    /// Print how many documents match a filter.
    Count {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// A filter (default: every document).
        filter: Option<String>,
    },
    /// Update the first (or, with --many, every) document matching a filter.
    Update {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// The filter.
        filter: String,
        /// The update, such as '{"$set": {"a": 1}}', or a replacement document.
        update: String,
        /// Update every match.
        #[arg(long)]
        many: bool,
        /// Insert a document when nothing matches.
        #[arg(long)]
        upsert: bool,
    },
    /// Delete the first (or, with --many, every) document matching a filter.
    Delete {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// The collection.
        collection: String,
        /// The filter.
        filter: String,
        /// Delete every match.
        #[arg(long)]
        many: bool,
    },
    /// Delete every expired document of the TTL indexes now (of every
    /// collection that has one, or of COLLECTION), in transactions of at
    /// most 500 deletions; print each collection's name, a tab, and how
    /// many were deleted. `cairn serve` does this on a timer
    /// (--ttl-interval). On an etcd:// URL the transactions hold at most
    /// 32 deletions each (fewer when one would not fit etcd's limits);
    /// run it periodically there, from one process.
    Expire {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
        /// Only this collection (it must exist and have a TTL index).
        collection: Option<String>,
    },
    /// List the collections: name, a tab, the number of documents.
    Collections {
        /// The database file (or an etcd://host:port,…/prefix URL).
        db: PathBuf,
    },
    /// Create, drop or list a collection's indexes.
    #[command(subcommand)]
    Index(docs::IndexCommand),
    /// Append to, read and follow event streams (JSON lines).
    Events(events::EventsArgs),
    /// Print a collection's change stream as JSON lines (inserts, updates,
    /// replaces, deletes; `invalidate` ends it), from now or from a resume
    /// token, following new commits; `--enable` turns it on.
    Watch(watch::WatchArgs),
    /// An interactive shell on a file (also `cairn FILE`) or an
    /// etcd://host:port,…/prefix URL: MongoDB-shell commands on collections, `get/put/del/scan` on tables,
    /// `append/read/tail` on event streams, and sqlite3-style dot-commands
    /// (`.help`). Reads a script from standard input when it is not a
    /// terminal; exits non-zero at the first error unless --keep-going.
    /// On etcd, `.begin … .commit` is one optimistic etcd transaction (a
    /// conflict at `.commit` writes nothing: run it again).
    Shell(shell::ShellArgs),
    /// Run the built-in benchmark.
    #[cfg(feature = "bench")]
    Bench(Box<cairn_bench::BenchCmd>),
    /// Run the built-in benchmark (not in this build: it needs `--features
    /// bench`).
    #[cfg(not(feature = "bench"))]
    #[command(disable_help_flag = true)]
    Bench {
        /// Whatever follows `bench`: this build only says how to get it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Everything a command can fail with, and its exit status.
#[derive(Debug)]
pub enum CliError {
    /// An error from the library.
    Db(Error),
    /// An error of the cluster (`etcd://` URLs): unavailable, a conflict
    /// retried too often, a limit, ... (its document, event and engine
    /// errors are [`CliError::Db`], as on a file).
    Etcd(cairndb_etcd::Error),
    /// A user error with its message.
    User(String),
    /// `put` into a table whose declared types CLI text cannot encode.
    UnsupportedTypes {
        table: String,
        key_type: String,
        value_type: String,
    },
    /// Reading standard input or writing standard output failed.
    Io(io::Error),
    /// `check` found this many problems (already printed).
    Problems(usize),
    /// `load` failed at an input line.
    AtLine {
        line: u64,
        loaded: u64,
        err: Box<CliError>,
    },
    /// The benchmark failed.
    #[cfg(feature = "bench")]
    Bench(Box<dyn std::error::Error>),
    /// The shell already printed its errors; exit with this status.
    Reported(u8),
}

impl From<Error> for CliError {
    fn from(e: Error) -> Self {
        CliError::Db(e)
    }
}

impl From<CoreError> for CliError {
    fn from(e: CoreError) -> Self {
        CliError::Db(e.into())
    }
}

impl From<DocumentError> for CliError {
    fn from(e: DocumentError) -> Self {
        CliError::Db(e.into())
    }
}

impl From<EventError> for CliError {
    fn from(e: EventError) -> Self {
        CliError::Db(e.into())
    }
}

impl From<io::Error> for CliError {
    fn from(e: io::Error) -> Self {
        CliError::Io(e)
    }
}

impl CliError {
    fn exit_code(&self) -> u8 {
        match self {
            CliError::Db(e) if e.is_corruption() => 2,
            CliError::Problems(_) => 2,
            CliError::AtLine { err, .. } => err.exit_code(),
            CliError::Reported(code) => *code,
            _ => 1,
        }
    }

    /// A closed standard output (`cairn dump db | head`) is not an error.
    fn is_broken_pipe(&self) -> bool {
        matches!(self, CliError::Io(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CliError::Db(e) => write!(f, "{e}"),
            CliError::Etcd(e) => write!(f, "{e}"),
            CliError::User(m) => write!(f, "{m}"),
            CliError::UnsupportedTypes {
                table,
                key_type,
                value_type,
            } => write!(
                f,
                "table {table:?} holds {key_type}/{value_type} entries; cairn put can \
                 only write to tables whose key and value types are &[u8] or &str"
            ),
            CliError::Io(e) => write!(f, "I/O error: {e}"),
            CliError::Problems(n) => write!(f, "{n} problem(s) found"),
            CliError::AtLine { line, loaded, err } => {
                write!(f, "line {line}: {err}")?;
                if *loaded > 0 {
                    write!(
                        f,
                        " ({loaded} entries from earlier lines were already committed)"
                    )?;
                }
                Ok(())
            }
            #[cfg(feature = "bench")]
            CliError::Bench(e) => write!(f, "bench: {e}"),
            CliError::Reported(code) => write!(f, "exit status {code}"),
        }
    }
}

type Res = Result<(), CliError>;

/// What `cairn bench` says in a build without the benchmark.
#[cfg(not(feature = "bench"))]
const NO_BENCH: &str = "this cairn was built without the benchmark: build it with \
     `--features bench` (or `--features peers` for the peer engines), e.g. \
     `cargo run --release -p cairn-cli --features peers -- bench`";

/// The arguments, with `shell` put in front of a lone file argument so that
/// `cairn FILE [OPTIONS]` opens the shell as `sqlite3 FILE` does. The first
/// argument is taken as a file when it is no subcommand of `cairn` and names
/// an existing file or looks like a path (has a `/` or a `.`); any other word
/// stays a (mistyped) subcommand for clap to report.
fn args_with_default_shell() -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let mut args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Some(first) = args.get(1).and_then(|a| a.to_str()) {
        let is_subcommand = Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == first || c.get_all_aliases().any(|a| a == first))
            || first == "help";
        let looks_like_file =
            Path::new(first).exists() || first.contains('/') || first.contains('.');
        if !is_subcommand && !first.starts_with('-') && looks_like_file {
            args.insert(1, "shell".into());
        }
    }
    args
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse_from(args_with_default_shell()) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            // Help and version go to stdout and succeed; usage errors are 1.
            return if e.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    match run(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is_broken_pipe() => ExitCode::SUCCESS,
        Err(CliError::Reported(code)) => ExitCode::from(code),
        Err(e) => {
            let _ = writeln!(io::stderr(), "cairn: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

fn run(command: Command) -> Res {
    let stdout = io::stdout();
    let mut out = BufWriter::new(stdout.lock());
    if let Some(res) = etcd::route(&command, &mut out) {
        let flushed = out.flush();
        res?;
        return Ok(flushed?);
    }
    let res = match command {
        Command::Migrate { .. } => Err(CliError::User("cairn migrate was not routed".into())),
        Command::Info { db } => cmd_info(&db, &mut out),
        Command::Stats { db, json } => cmd_stats(&db, json, &mut out),
        Command::Tables { db } => cmd_tables(&db, &mut out),
        Command::Check { db } => cmd_check(&db, &mut out),
        Command::Compact { db } => cmd_compact(&db, &mut out),
        Command::Get { db, table, key } => cmd_get(&db, &table, &key, &mut out),
        Command::Put {
            db,
            table,
            key,
            value,
        } => cmd_put(&db, &table, &key, &value),
        Command::Del { db, table, key } => cmd_del(&db, &table, &key),
        Command::Dump { db, table } => cmd_dump(&db, table.as_deref(), &mut out),
        Command::Load { db, merge } => cmd_load(&db, merge),
        Command::Backup { db, dest, force } => cmd_backup(&db, &dest, force, &mut out),
        Command::Serve(a) => serve::run(a),
        Command::Import {
            db,
            collection,
            upsert,
            batch,
            continue_on_error,
        } => docs::import(
            &db,
            &collection,
            upsert,
            batch,
            if continue_on_error {
                docs::OnError::Continue
            } else {
                docs::OnError::Stop
            },
        ),
        Command::Export {
            db,
            collection,
            no_indexes,
        } => docs::export(&db, &collection, !no_indexes, &mut out),
        Command::Collections { db } => docs::collections(&db, &mut out),
        Command::Expire { db, collection } => cmd_expire(&db, collection.as_deref(), &mut out),
        Command::Find {
            db,
            collection,
            filter,
            sort,
            limit,
            skip,
            project,
            hint,
            explain,
        } => docs_query::find(
            &db,
            &collection,
            &filter,
            docs_query::FindArgs {
                sort: sort.as_deref(),
                limit,
                skip,
                project: project.as_deref(),
                hint: hint.as_deref(),
                explain,
            },
            &mut out,
        ),
        Command::Aggregate {
            db,
            collection,
            pipeline,
            explain,
        } => docs_query::aggregate(&db, &collection, &pipeline, explain, &mut out),
        Command::Distinct {
            db,
            collection,
            field,
            filter,
        } => docs_query::distinct(&db, &collection, &field, filter.as_deref(), &mut out),
        Command::Count {
            db,
            collection,
            filter,
        } => docs_query::count(&db, &collection, filter.as_deref(), &mut out),
        Command::Update {
            db,
            collection,
            filter,
            update,
            many,
            upsert,
        } => docs_query::update(&db, &collection, &filter, &update, many, upsert, &mut out),
        Command::Delete {
            db,
            collection,
            filter,
            many,
        } => docs_query::delete(&db, &collection, &filter, many, &mut out),
        Command::Index(cmd) => docs::index(cmd, &mut out),
        Command::Events(args) => events::run(args, &mut out),
        Command::Watch(args) => watch::run(args, &mut out),
        Command::Shell(args) => {
            drop(out);
            return shell::run(args);
        }
        #[cfg(feature = "bench")]
        Command::Bench(cmd) => cairn_bench::run_cmd(*cmd, &mut out).map_err(CliError::Bench),
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => Err(CliError::User(NO_BENCH.into())),
    };
    // Print what was produced before the error too (e.g. `check` problems).
    let flushed = out.flush();
    res?;
    flushed?;
    Ok(())
}

/// `12345` → `12.1 KiB`.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut v = bytes as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

fn cmd_info(path: &Path, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    let tables = db.begin_read()?.list_tables()?.len();
    let file_bytes = std::fs::metadata(path)?.len();
    let version = db.format_version();
    let r = db.recovery_report();
    writeln!(out, "path:            {}", path.display())?;
    writeln!(out, "format version:  {version}")?;
    writeln!(out, "page size:       {} bytes", db.page_size())?;
    writeln!(
        out,
        "file size:       {file_bytes} bytes ({})",
        human(file_bytes)
    )?;
    writeln!(out, "latest txn:      {}", db.latest_commit())?;
    writeln!(out, "tables:          {tables}")?;
    let how = if r.beside_writer {
        "open for writing by another handle; its newest commit read as it stands"
    } else if r.clean {
        "closed cleanly"
    } else {
        "not closed cleanly; every page of the commit was verified"
    };
    writeln!(
        out,
        "recovery:        {how} (opened txn {} from commit slot {})",
        r.txn, r.slot
    )?;
    match &r.fell_back {
        None => writeln!(out, "fell back:       no")?,
        Some(why) => writeln!(out, "fell back:       yes: {why}")?,
    }
    if r.log_commits > 0 {
        writeln!(
            out,
            "commit log:      {} commit(s) replayed onto txn {}",
            r.log_commits, r.txn
        )?;
    }
    if let Some(c) = &r.log_incomplete {
        writeln!(out, "log discarded:   {c}")?;
    }
    Ok(())
}

#[derive(Serialize)]
struct TreeJson {
    entries: u64,
    pages: u64,
    leaf_pages: u64,
    branch_pages: u64,
    overflow_pages: u64,
    depth: u32,
    used_bytes: u64,
    overflow_bytes: u64,
}

impl From<&cairndb::TreeStats> for TreeJson {
    fn from(t: &cairndb::TreeStats) -> Self {
        TreeJson {
            entries: t.entries,
            pages: t.leaf_pages + t.branch_pages + t.overflow_pages,
            leaf_pages: t.leaf_pages,
            branch_pages: t.branch_pages,
            overflow_pages: t.overflow_pages,
            depth: t.depth,
            used_bytes: t.used_bytes,
            overflow_bytes: t.overflow_bytes,
        }
    }
}

#[derive(Serialize)]
struct TableJson {
    name: String,
    #[serde(flatten)]
    tree: TreeJson,
}

#[derive(Serialize)]
struct PagesJson {
    total: u64,
    header: u64,
    leaf: u64,
    branch: u64,
    overflow: u64,
    freelist: u64,
    free: u64,
    pending: u64,
}

#[derive(Serialize)]
struct StatsJson {
    path: String,
    txn: u64,
    page_size: usize,
    file_bytes: u64,
    pages: PagesJson,
    max_depth: u32,
    fill_factor: f64,
    catalog: TreeJson,
    tables: Vec<TableJson>,
}

fn cmd_stats(path: &Path, json: bool, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    write_stats(&db, path, json, out)
}

/// The report of `cairn stats` (and the shell's `.stats`) on an open file.
fn write_stats(db: &Database, path: &Path, json: bool, out: &mut impl Write) -> Res {
    let s = db.stats()?;
    let pages = PagesJson {
        total: s.page_count,
        header: s.header_pages,
        leaf: s.leaf_pages,
        branch: s.branch_pages,
        overflow: s.overflow_pages,
        freelist: s.freelist_pages,
        free: s.free_pages,
        pending: s.pending_pages,
    };
    if json {
        let j = StatsJson {
            path: path.display().to_string(),
            txn: s.txn,
            page_size: s.page_size,
            file_bytes: s.file_bytes,
            pages,
            max_depth: s.max_depth,
            fill_factor: s.fill_factor,
            catalog: (&s.catalog).into(),
            tables: s
                .tables
                .iter()
                .map(|t| TableJson {
                    name: t.name.clone(),
                    tree: (&t.tree).into(),
                })
                .collect(),
        };
        serde_json::to_writer(&mut *out, &j).map_err(io::Error::from)?;
        writeln!(out)?;
        return Ok(());
    }
    writeln!(
        out,
        "file size:       {} bytes ({})",
        s.file_bytes,
        human(s.file_bytes)
    )?;
    writeln!(out, "page size:       {} bytes", s.page_size)?;
    writeln!(out, "latest txn:      {}", s.txn)?;
    writeln!(out, "pages in use:    {}", pages.total)?;
    writeln!(out, "  header/slots:  {}", pages.header)?;
    writeln!(out, "  leaf:          {}", pages.leaf)?;
    writeln!(out, "  branch:        {}", pages.branch)?;
    writeln!(out, "  overflow:      {}", pages.overflow)?;
    writeln!(out, "  free-list:     {}", pages.freelist)?;
    writeln!(out, "  free:          {}", pages.free)?;
    writeln!(out, "  pending:       {}", pages.pending)?;
    writeln!(out, "max tree depth:  {}", s.max_depth)?;
    writeln!(out, "fill factor:     {:.1}%", s.fill_factor * 100.0)?;
    writeln!(out, "tables:          {}", s.tables.len())?;
    if !s.tables.is_empty() {
        let w = s.tables.iter().map(|t| t.name.len()).max().unwrap_or(0);
        let w = w.max("table".len());
        writeln!(
            out,
            "  {:<w$}  {:>12}  {:>10}  {:>5}",
            "table", "entries", "pages", "depth"
        )?;
        for t in &s.tables {
            let tj = TreeJson::from(&t.tree);
            writeln!(
                out,
                "  {:<w$}  {:>12}  {:>10}  {:>5}",
                t.name, tj.entries, tj.pages, tj.depth
            )?;
        }
    }
    Ok(())
}

fn cmd_tables(path: &Path, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    let txn = db.begin_read()?;
    for name in txn.list_tables()? {
        let len = raw::open_read(&txn, &name)?.len();
        writeln!(out, "{name}\t{len}")?;
    }
    Ok(())
}

fn cmd_check(path: &Path, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    check_db(&db, out)
}

/// The checks of `cairn check` (and the shell's `.check`) on an open file.
fn check_db(db: &Database, out: &mut impl Write) -> Res {
    let recovery = db.recovery_report();
    // A commit slot recovery had to skip is a problem too: damaged, or torn
    // by a crash during a commit (then the next commit rewrites it).
    if !recovery.skipped.is_empty() {
        let _ = writeln!(
            io::stderr(),
            "cairn: note: recovery skipped a commit slot and opened txn {} from slot {}",
            recovery.txn,
            recovery.slot
        );
    }
    let report = db.check_integrity()?;
    // So is a commit-log write recovery discarded: in flight at a crash
    // (never acknowledged), or damage in the last flushed write.
    let mut problems: Vec<String> = recovery
        .skipped
        .iter()
        .chain(&recovery.log_incomplete)
        .chain(&report.problems)
        .map(|p| p.to_string())
        .collect();
    // The pages are sound: now the upper layers' own invariants (the event
    // store's, and each collection's indexes against its documents).
    if problems.is_empty() {
        problems.extend(
            cairndb::events::EventStore::new(db)
                .check()?
                .into_iter()
                .map(|p| format!("event streams: {p}")),
        );
        for c in db.list_collections()? {
            for p in db
                .collection::<cairndb::document::Document>(&c)
                .check_indexes()?
            {
                problems.push(format!("collection {c:?}: {p}"));
            }
        }
    }
    if problems.is_empty() {
        writeln!(out, "ok")?;
        return Ok(());
    }
    for p in &problems {
        writeln!(out, "{p}")?;
    }
    Err(CliError::Problems(problems.len()))
}

fn cmd_compact(path: &Path, out: &mut impl Write) -> Res {
    let db = Database::open(path)?;
    let r = db.compact()?;
    db.close()?;
    writeln!(
        out,
        "{} → {} bytes ({} → {})",
        r.before_bytes,
        r.after_bytes,
        human(r.before_bytes),
        human(r.after_bytes)
    )?;
    Ok(())
}

fn check_key(db: &Database, key: &str) -> Res {
    cairndb::limits::check_key_len(key.len(), db.page_size())?;
    Ok(())
}

fn key_not_found(table: &str, key: &str) -> CliError {
    CliError::User(format!("key {key:?} not found in table {table:?}"))
}

fn cmd_get(path: &Path, table: &str, key: &str, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    check_key(&db, key)?;
    let txn = db.begin_read()?;
    let t = raw::open_read(&txn, table)?;
    let value = t
        .get(key.as_bytes())?
        .ok_or_else(|| key_not_found(table, key))?;
    out.write_all(value.as_bytes())?;
    writeln!(out)?;
    Ok(())
}

fn cmd_put(path: &Path, table: &str, key: &str, value: &str) -> Res {
    let db = Database::create(path)?;
    let txn = db.begin_write()?;
    raw::open_for_text(&txn, table)?.insert(key.as_bytes(), value.as_bytes())?;
    txn.commit()?;
    db.close()?;
    Ok(())
}

fn cmd_del(path: &Path, table: &str, key: &str) -> Res {
    let db = Database::open(path)?;
    check_key(&db, key)?;
    let txn = db.begin_write()?;
    if !raw::open_existing(&txn, table)?.remove(key.as_bytes())? {
        return Err(key_not_found(table, key));
    }
    txn.commit()?;
    db.close()?;
    Ok(())
}

fn cmd_dump(path: &Path, only: Option<&str>, out: &mut impl Write) -> Res {
    let db = Database::open_read_only(path)?;
    write_dump(&db, only, out)
}

/// The dump of `db` (every table, or table lines of `only`) from one
/// snapshot: `cairn dump`'s output, and the shell's `.dump`.
fn write_dump(db: &Database, only: Option<&str>, out: &mut dyn Write) -> Res {
    let txn = db.begin_read()?;
    let names = match only {
        Some(t) => vec![t.to_string()],
        None => txn.list_tables()?,
    };
    // Open every table first: a missing table fails the dump before
    // anything is printed.
    let tables = names
        .iter()
        .map(|n| {
            let t = raw::open_read(&txn, n)?;
            Ok((n.as_str(), raw::types(&txn, n)?, t))
        })
        .collect::<Result<Vec<_>, CliError>>()?;
    let whole = only.is_none();
    if whole {
        let header =
            jsonl::encode_header(db.format_version(), db.page_size()).map_err(io::Error::from)?;
        writeln!(out, "{header}")?;
    }
    let mut counts = jsonl::Counts {
        tables: 0,
        entries: 0,
    };
    for (name, (key_type, value_type), t) in &tables {
        let schema = jsonl::encode_schema(name, key_type, value_type).map_err(io::Error::from)?;
        out.write_all(schema.as_bytes())?;
        out.write_all(b"\n")?;
        counts.tables += 1;
        for entry in t.iter()? {
            let (k, v) = entry?;
            let line = jsonl::encode(name, k.as_bytes(), v.as_bytes()).map_err(io::Error::from)?;
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
            counts.entries += 1;
        }
    }
    if whole {
        writeln!(
            out,
            "{}",
            jsonl::encode_end(counts).map_err(io::Error::from)?
        )?;
    }
    Ok(())
}

/// Lines per commit in `load`.
const LOAD_BATCH: u64 = 10_000;

/// The length of standard input if it is a regular file.
#[cfg(unix)]
fn stdin_len() -> Option<u64> {
    use std::os::fd::AsFd;
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    meta.is_file().then_some(meta.len())
}

#[cfg(not(unix))]
fn stdin_len() -> Option<u64> {
    None
}

/// A progress bar over the bytes of standard input, on stderr, only when
/// stderr is a terminal.
fn load_progress() -> Option<ProgressBar> {
    if !io::stderr().is_terminal() {
        return None;
    }
    let len = stdin_len();
    let bar = ProgressBar::with_draw_target(len, ProgressDrawTarget::stderr());
    let template = if len.is_some() {
        "{wide_bar} {bytes}/{total_bytes} {msg} (eta {eta})"
    } else {
        "{spinner} {bytes} read, {msg} ({elapsed})"
    };
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}

/// Where `load` writes.
enum Target {
    /// The file itself (it exists and holds no table, or a header-less
    /// load).
    InPlace,
    /// A new file beside it, renamed into place when complete.
    Temp(PathBuf),
}

/// A temporary path beside `path` (same directory, so a rename is atomic).
fn temp_beside(path: &Path, what: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "cairn".into());
    path.with_file_name(format!(".{name}.{what}-{}.tmp", std::process::id()))
}

/// Renames `from` onto `to` and flushes their directory, so the new name
/// survives a power loss.
fn rename_durably(from: &Path, to: &Path) -> Res {
    std::fs::rename(from, to).map_err(|e| {
        CliError::User(format!(
            "cannot rename {} to {}: {e}",
            from.display(),
            to.display()
        ))
    })?;
    #[cfg(unix)]
    {
        let dir = match to.parent() {
            Some(d) if !d.as_os_str().is_empty() => d,
            _ => Path::new("."),
        };
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// The checks `cairn check` runs, on a database just written: pages, event
/// streams, every collection's indexes.
fn verify(db: &Database) -> Result<Vec<String>, CliError> {
    let mut problems: Vec<String> = db
        .check_integrity()?
        .problems
        .iter()
        .map(|p| p.to_string())
        .collect();
    if !problems.is_empty() {
        return Ok(problems);
    }
    problems.extend(
        cairndb::events::EventStore::new(db)
            .check()?
            .into_iter()
            .map(|p| format!("event streams: {p}")),
    );
    for name in db.list_collections()? {
        problems.extend(
            db.collection::<cairndb::document::Document>(&name)
                .check_indexes()?
                .into_iter()
                .map(|p| format!("collection {name:?}: {p}")),
        );
    }
    Ok(problems)
}

fn cmd_load(path: &Path, merge: bool) -> Res {
    // The first line says whether this is a whole dump (a restore).
    let mut input = DumpReader::open(io::stdin().lock(), load_progress())?;
    let header = input.header().map(|h| h.page_size);
    let exists = path.exists();
    let target = if header.is_some() && !exists {
        Target::Temp(temp_beside(path, "load"))
    } else {
        Target::InPlace
    };
    let opened = match (&target, header) {
        (Target::Temp(t), Some(page_size)) => {
            let _ = std::fs::remove_file(t);
            Database::builder().page_size(page_size).create(t)
        }
        _ => Database::create(path),
    };
    let db = opened?;
    let res = load_into(&db, path, &mut input, merge);
    let res = res.and_then(|n| {
        if let Target::Temp(_) = target {
            let problems = verify(&db)?;
            if let Some(p) = problems.first() {
                return Err(CliError::User(format!(
                    "the restored database fails its checks ({} problem(s), first: {p}); \
                     {} was not written",
                    problems.len(),
                    path.display()
                )));
            }
        }
        Ok(n)
    });
    let res = res.and_then(|n| {
        db.close()?;
        Ok(n)
    });
    let (loaded, lines) = match (res, &target) {
        (Ok(n), Target::Temp(t)) => {
            if path.exists() {
                let _ = std::fs::remove_file(t);
                return Err(CliError::User(format!(
                    "{} was created while loading; it was left alone",
                    path.display()
                )));
            }
            rename_durably(t, path)?;
            n
        }
        (Ok(n), Target::InPlace) => n,
        (Err(e), Target::Temp(t)) => {
            let _ = std::fs::remove_file(t);
            // Nothing reached the file: "committed" entries were in the
            // temporary copy.
            return Err(dump_input::committed(e, 0));
        }
        (Err(e), Target::InPlace) => return Err(e),
    };
    if let Some(bar) = input.bar() {
        bar.finish_and_clear();
    }
    let _ = writeln!(io::stderr(), "loaded {loaded} entries from {lines} lines");
    Ok(())
}

/// Loads the lines of `input` into `db`, which stands for `path`; returns
/// the entries and lines loaded.
fn load_into<R: BufRead>(
    db: &Database,
    path: &Path,
    input: &mut DumpReader<R>,
    merge: bool,
) -> Result<(u64, u64), CliError> {
    let whole = input.header().is_some();
    // A restore writes internal tables, which needs an empty database; a
    // header-less load needs one too unless --merge.
    let restore = match db.begin_restore() {
        Ok(r) => Some(r),
        Err(CoreError::NotEmpty { tables, first }) => {
            if !merge || whole {
                let how = if whole {
                    "a whole dump restores only into a new or empty file"
                } else {
                    "pass --merge to add the lines to its tables"
                };
                return Err(CliError::User(format!(
                    "refusing to load into {}: it already holds {tables} table(s) ({first:?} \
                     first); {how}",
                    path.display()
                )));
            }
            None
        }
        Err(e) => return Err(e.into()),
    };
    // Internal tables only in a whole dump, whose header was read.
    let restore = if whole { restore } else { None };
    let mut committed = 0u64;
    let mut loaded = 0u64;
    let mut eof = false;
    while !eof {
        let txn = db.begin_write()?;
        txn.set_durability(Durability::None);
        let mut in_batch = 0u64;
        {
            let mut tables: HashMap<String, raw::WriteTable<'_>> = HashMap::new();
            while in_batch < LOAD_BATCH {
                let Some((line_no, item)) = input
                    .next()
                    .map_err(|e| dump_input::committed(e, committed))?
                else {
                    eof = true;
                    break;
                };
                let at_line = |err: CliError| CliError::AtLine {
                    line: line_no,
                    loaded: committed,
                    err: Box::new(err),
                };
                let open = |name: &str, types: Option<(&str, &str)>| match &restore {
                    Some(r) => {
                        let (k, v) = types.unwrap_or(("&[u8]", "&[u8]"));
                        raw::open_for_restore(&txn, r, name, k, v)
                    }
                    None => raw::open_for_load(&txn, name, types),
                };
                let e = match item {
                    Item::Schema(s) => {
                        // Close the table if it is open, so that it can be
                        // reopened with its types checked.
                        tables.remove(&s.table);
                        let types = Some((s.key_type.as_str(), s.value_type.as_str()));
                        let t = open(&s.table, types).map_err(at_line)?;
                        tables.insert(s.table, t);
                        in_batch += 1;
                        continue;
                    }
                    Item::Entry(e) => e,
                };
                let table = match tables.entry(e.table) {
                    std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                    std::collections::hash_map::Entry::Vacant(v) => {
                        let t = open(v.key(), None).map_err(at_line)?;
                        v.insert(t)
                    }
                };
                table.insert(&e.key, &e.value).map_err(at_line)?;
                in_batch += 1;
                loaded += 1;
                if let Some(bar) = input.bar() {
                    if loaded.is_multiple_of(1000) {
                        bar.set_message(format!("{loaded} entries"));
                    }
                }
            }
        }
        if eof {
            txn.set_durability(Durability::Immediate);
        }
        txn.commit()?;
        committed = loaded;
    }
    Ok((loaded, input.line_no()))
}

fn cmd_backup(path: &Path, dest: &Path, force: bool, out: &mut impl Write) -> Res {
    if dest.exists() && !force {
        return Err(CliError::User(format!(
            "{} already exists; pass --force to replace it",
            dest.display()
        )));
    }
    if let (Ok(a), Ok(b)) = (std::fs::canonicalize(path), std::fs::canonicalize(dest)) {
        if a == b {
            return Err(CliError::User(format!(
                "{} is the database itself",
                dest.display()
            )));
        }
    }
    // Read-only, so that it works beside a writer in another process (a
    // `cairn serve`): the snapshot is every commit the writer has written
    // to the file, the ones still in its commit log applied to the copy
    // (`Database::backup_to`).
    let db = Database::open_read_only(path)?;
    let tmp = temp_beside(dest, "backup");
    let _ = std::fs::remove_file(&tmp);
    let copied = (|| -> Result<(u64, Vec<String>), CliError> {
        let txn = db.latest_commit();
        db.backup_to(&tmp)?;
        let copy = Database::open_read_only(&tmp)?;
        let problems = verify(&copy)?;
        copy.close()?;
        Ok((txn.0, problems))
    })();
    let closed = db.close();
    let (txn, problems) = match copied {
        Ok(c) => c,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Some(p) = problems.first() {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::User(format!(
            "the copy fails its checks ({} problem(s), first: {p}); {} was not written",
            problems.len(),
            dest.display()
        )));
    }
    closed?;
    if dest.exists() && !force {
        let _ = std::fs::remove_file(&tmp);
        return Err(CliError::User(format!(
            "{} was created during the backup; pass --force to replace it",
            dest.display()
        )));
    }
    rename_durably(&tmp, dest)?;
    let bytes = std::fs::metadata(dest)?.len();
    writeln!(
        out,
        "backed up {} (txn {txn}) to {}: {bytes} bytes ({})",
        path.display(),
        dest.display(),
        human(bytes)
    )?;
    Ok(())
}

/// The collections `cairn expire` visits: those with a TTL index
/// (`ttl`), or `only`, which must be one of them (a missing collection is
/// named as `find` names it, among `all` in `holder`).
fn expire_names(
    all: Vec<String>,
    ttl: Vec<String>,
    only: Option<&str>,
    holder: &str,
) -> Result<Vec<String>, CliError> {
    let Some(c) = only else {
        return Ok(ttl);
    };
    if !all.iter().any(|n| n == c) {
        return Err(CliError::User(if all.is_empty() {
            format!("no collection {c:?}: {holder} holds none")
        } else {
            format!("no collection {c:?}; {holder} holds: {}", all.join(", "))
        }));
    }
    if !ttl.iter().any(|n| n == c) {
        return Err(CliError::User(format!(
            "collection {c:?} has no TTL index (see `cairn index list`; \
             `cairn index create --expire-after SECS` makes one)"
        )));
    }
    Ok(vec![c.to_string()])
}

/// `cairn expire`: every expired document of the TTL indexes deleted now,
/// in bounded transactions (the sweep of `cairn serve`, once).
fn cmd_expire(path: &Path, only: Option<&str>, out: &mut impl Write) -> Res {
    let db = Database::open(path)?;
    let names = expire_names(
        db.list_collections()?,
        db.ttl_collections()?,
        only,
        "the file",
    )?;
    for name in &names {
        let n = db
            .collection::<cairndb::document::Document>(name)
            .delete_all_expired(cairn_server::TTL_SWEEP_BATCH, |_| true)?;
        writeln!(out, "{name}\t{n}")?;
    }
    db.close()?;
    Ok(())
}
