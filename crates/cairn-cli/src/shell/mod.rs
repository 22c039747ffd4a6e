//! `cairn shell FILE` (and `cairn FILE`), or `cairn shell etcd://…`: an
//! interactive shell over the library's public API, on a database file or
//! an etcd cluster's prefix ([`Db`]). The statements run the same code on
//! both: the document layer's collections (`Collection` on a file,
//! `EtcdCollection` on a cluster, `TxnCollection` over either backend's
//! write transaction inside `.begin … .commit`), tables and event streams;
//! only what needs the file itself (`.dump FILE`, `.stats`, `.backup`) is
//! refused on a cluster. On a cluster `.begin … .commit` is one optimistic
//! etcd `Txn`: a conflict at `.commit` writes nothing and says so.
//!
//! - [`parse`]: the language (MongoDB-shell commands with relaxed JSON,
//!   key-value and event commands, dot-commands) into statements.
//! - [`exec`]: runs statements on the open [`Shell`].
//! - [`dot`]: the dot-commands.
//! - [`output`]: the output modes.
//! - [`repl`]: the interactive loop (line editing, history, completion,
//!   paging).
//!
//! A script (standard input that is not a terminal, `-c`, `.read`) runs
//! the same statements; it stops at the first error unless `--keep-going`.

mod dot;
mod exec;
mod output;
mod parse;
mod repl;
mod schema;

use std::fs::File;
use std::io::{self, BufRead, BufWriter, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use cairndb::{Database, WriteTransaction};
use cairndb_etcd::EtcdDatabase;
use clap::Args;

use crate::{CliError, Res};
use output::{Mode, Printer};
use parse::{ParseError, Stmt};

/// `cairn shell`.
#[derive(Args)]
pub struct ShellArgs {
    /// The database file (created if missing), or an
    /// etcd://host:port,…/prefix URL.
    db: PathBuf,
    /// Run this statement and exit (repeatable; runs in order) instead of
    /// reading standard input.
    #[arg(short = 'c', long = "command", allow_hyphen_values = true)]
    commands: Vec<String>,
    /// Go on after a failed statement in a script (the exit status is
    /// still 1 if any statement failed).
    #[arg(long)]
    keep_going: bool,
}

/// What went wrong with a statement.
#[derive(Debug)]
pub enum ShellError {
    /// The text did not parse.
    Parse(ParseError),
    /// It parsed but failed.
    Run(CliError),
}

impl<E: Into<CliError>> From<E> for ShellError {
    fn from(e: E) -> Self {
        ShellError::Run(e.into())
    }
}

impl ShellError {
    fn exit_code(&self) -> u8 {
        match self {
            ShellError::Parse(_) => 1,
            ShellError::Run(e) => e.exit_code(),
        }
    }
}

/// Set by Ctrl-C (SIGINT) while a statement runs in the interactive shell.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// Fails with "interrupted" once Ctrl-C was pressed during this statement.
/// Checked between the rows a statement prints, imports, exports or dumps;
/// a single library call (a count, a selective scan, an in-memory sort,
/// `explain()`) runs to its end first.
pub fn check_interrupt() -> Result<(), CliError> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Err(CliError::User("interrupted".into()));
    }
    Ok(())
}

/// Catches Ctrl-C so that it interrupts the running statement instead of
/// ending the shell (while a line is edited, the terminal is raw and
/// Ctrl-C is a key that cancels the line).
fn catch_interrupts() {
    if let Err(e) = ctrlc::set_handler(|| INTERRUPTED.store(true, Ordering::SeqCst)) {
        eprintln!("cairn: Ctrl-C will end the shell ({e})");
    }
}

/// A user error.
pub fn user(msg: impl Into<String>) -> ShellError {
    ShellError::Run(CliError::User(msg.into()))
}

type SRes<T = ()> = Result<T, ShellError>;

/// Rows a statement prints (results waiting for `it` hold their
/// snapshot, which on a cluster borrows the connection `'a`).
type Rows<'a> = Box<dyn Iterator<Item = Result<serde_json::Value, CliError>> + 'a>;

/// Results waiting for `it`.
struct Pending<'a> {
    rows: Rows<'a>,
    shown: u64,
}

/// The database the shell runs on.
pub enum Db<'a> {
    /// A database file.
    File(Database),
    /// An etcd cluster's prefix (the connection lives as long as the
    /// shell).
    Etcd(&'a EtcdDatabase),
}

/// An explicit transaction (`.begin`): the file's, or one optimistic etcd
/// `Txn` (reads at one revision with the transaction's own writes, the
/// writes buffered until `.commit`).
pub enum Txn<'a> {
    /// (Boxed: the file's transaction is several times the size of the
    /// cluster's.)
    File(Box<WriteTransaction>),
    Etcd(cairndb_etcd::WriteTransaction<'a>),
}

impl Txn<'_> {
    fn abort(self) {
        match self {
            Txn::File(t) => (*t).abort(),
            Txn::Etcd(t) => t.abort(),
        }
    }
}

/// `$body` with `$c` the collection `$name` of `$db` ([`Db`]): a file's
/// `Collection` or a cluster's `EtcdCollection`, whose methods have the
/// same names and results (their errors both convert to `CliError`).
macro_rules! with_coll {
    ($db:expr, $name:expr, |$c:ident| $body:expr) => {
        match $db {
            $crate::shell::Db::File(db) => {
                let $c = db.collection::<cairndb::document::Document>($name);
                $body
            }
            $crate::shell::Db::Etcd(db) => {
                let $c = db.collection::<cairndb::document::Document>($name);
                $body
            }
        }
    };
}

/// `$body` with `$c` the collection `$name` inside the open transaction
/// `$txn` ([`Txn`]): `TxnCollection` over either backend's transaction.
macro_rules! with_txn_coll {
    ($txn:expr, $name:expr, |$c:ident| $body:expr) => {
        match $txn {
            $crate::shell::Txn::File(t) => {
                let $c = t.collection::<cairndb::document::Document>($name);
                $body
            }
            $crate::shell::Txn::Etcd(t) => {
                let $c = cairndb::document::TxnCollection::<cairndb::document::Document, _>::new(
                    t, $name,
                );
                $body
            }
        }
    };
}
pub(crate) use {with_coll, with_txn_coll};

/// The open database and the shell's settings.
pub struct Shell<'a> {
    db: Db<'a>,
    /// The file's path or the cluster's URL, for messages.
    path: PathBuf,
    /// The explicit transaction (`.begin`), if any.
    txn: Option<Txn<'a>>,
    printer: Printer,
    /// Where results go: standard output or `.output FILE`.
    out: Box<dyn Write>,
    to_stdout: bool,
    timer: bool,
    /// Results per batch before `it` (0: all).
    page_size: usize,
    pending: Option<Pending<'a>>,
    keep_going: bool,
    quit: bool,
    /// `.read` nesting.
    depth: usize,
    /// The highest exit status of the errors so far.
    last_error_code: u8,
}

/// Runs `cairn shell`.
pub fn run(args: ShellArgs) -> Res {
    match crate::etcd::Backend::of(&args.db) {
        crate::etcd::Backend::Etcd(url) => {
            let conn = EtcdDatabase::connect(&url)?;
            run_on(Db::Etcd(&conn), args)
        }
        crate::etcd::Backend::File(path) => run_on(Db::File(Database::create(&path)?), args),
    }
}

fn run_on(db: Db<'_>, args: ShellArgs) -> Res {
    let interactive = args.commands.is_empty() && io::stdin().is_terminal();
    let mut sh = Shell::new(db, args.db.clone(), interactive, args.keep_going);
    let ok = if !args.commands.is_empty() {
        let mut ok = true;
        for (i, c) in args.commands.iter().enumerate() {
            let label = format!("-c #{}", i + 1);
            if !sh.run_script(c, Some(&label)) {
                ok = false;
                if !sh.keep_going {
                    break;
                }
            }
            if sh.quit {
                break;
            }
        }
        ok
    } else if interactive {
        catch_interrupts();
        repl::run(&mut sh);
        true
    } else {
        let mut text = String::new();
        io::stdin().lock().read_to_string_lossy(&mut text)?;
        sh.run_script(&text, None)
    };
    let flush_failed = sh.finish();
    let failed = sh.last_error_code.max(1);
    // Close the file: the last flush's errors are reported, not dropped.
    let Shell { db, .. } = sh;
    if let Db::File(db) = db {
        if let Err(e) = db.close() {
            let e = CliError::from(e);
            eprintln!("cairn: {e}");
            return Err(CliError::Reported(e.exit_code()));
        }
    }
    match (ok, flush_failed) {
        (_, Some(c)) => Err(CliError::Reported(c)),
        (false, None) => Err(CliError::Reported(failed)),
        (true, None) => Ok(()),
    }
}

trait ReadLossy {
    fn read_to_string_lossy(&mut self, s: &mut String) -> io::Result<()>;
}

impl<R: BufRead> ReadLossy for R {
    fn read_to_string_lossy(&mut self, s: &mut String) -> io::Result<()> {
        let mut buf = Vec::new();
        self.read_to_end(&mut buf)?;
        s.push_str(&String::from_utf8_lossy(&buf));
        Ok(())
    }
}

fn term_width() -> Option<usize> {
    if let Some((terminal_size::Width(w), _)) = terminal_size::terminal_size() {
        return Some(w as usize);
    }
    std::env::var("COLUMNS").ok()?.parse().ok()
}

impl<'a> Shell<'a> {
    fn new(db: Db<'a>, path: PathBuf, interactive: bool, keep_going: bool) -> Self {
        let tty = io::stdout().is_terminal();
        Shell {
            db,
            path,
            txn: None,
            printer: Printer {
                mode: if interactive { Mode::Json } else { Mode::Jsonl },
                color: tty && std::env::var_os("NO_COLOR").is_none(),
                width: term_width(),
            },
            out: Box::new(io::stdout()),
            to_stdout: true,
            timer: false,
            page_size: if interactive { 20 } else { 0 },
            pending: None,
            keep_going,
            quit: false,
            depth: 0,
            last_error_code: 0,
        }
    }

    /// Rolls back an open transaction and flushes; `Some(status)` if that
    /// failed.
    fn finish(&mut self) -> Option<u8> {
        if let Some(t) = self.txn.take() {
            t.abort();
            eprintln!("cairn: the open transaction was rolled back (no .commit)");
        }
        self.pending = None;
        if let Err(e) = self.out.flush() {
            eprintln!("cairn: {e}");
            return Some(1);
        }
        None
    }

    /// Sends results to standard output or to a file.
    fn set_output(&mut self, file: Option<&str>) -> SRes {
        self.out.flush()?;
        match file {
            None => {
                self.out = Box::new(io::stdout());
                self.to_stdout = true;
                self.printer.color =
                    io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
                self.printer.width = term_width();
            }
            Some(f) => {
                let file = File::create(f).map_err(|e| user(format!("cannot write {f:?}: {e}")))?;
                self.out = Box::new(BufWriter::new(file));
                self.to_stdout = false;
                self.printer.color = false;
                self.printer.width = None;
            }
        }
        Ok(())
    }

    /// Runs the statements of a script; prints each error with its line.
    /// Returns whether every statement succeeded.
    fn run_script(&mut self, text: &str, label: Option<&str>) -> bool {
        let mut ok = true;
        for (line, stmt) in statements(text) {
            if INTERRUPTED.load(Ordering::SeqCst) {
                eprintln!("interrupted");
                return false;
            }
            if !self.run_reporting(&stmt, line, label) {
                ok = false;
                if !self.keep_going {
                    return false;
                }
            }
            if self.quit {
                break;
            }
        }
        ok
    }

    /// Runs one statement, printing its error; returns whether it succeeded.
    /// `line` is its first line in a script (0 when typed).
    fn run_reporting(&mut self, text: &str, line: usize, label: Option<&str>) -> bool {
        match self.run_timed(text) {
            Ok(()) => true,
            Err(e) => {
                self.report(text, line, label, &e);
                self.last_error_code = self.last_error_code.max(e.exit_code());
                false
            }
        }
    }

    fn run_timed(&mut self, text: &str) -> SRes {
        // A statement of a `.read` script leaves the flag to stop the script.
        if self.depth == 0 {
            INTERRUPTED.store(false, Ordering::SeqCst);
        }
        let start = Instant::now();
        let res = parse::parse(text)
            .map_err(ShellError::Parse)
            .and_then(|stmt| self.run(stmt));
        let flushed = self.out.flush();
        if self.timer {
            eprintln!("Run Time: {:.6} s", start.elapsed().as_secs_f64());
        }
        res?;
        flushed?;
        Ok(())
    }

    /// Prints an error: for a parse error, the line and a caret under the
    /// column.
    fn report(&self, text: &str, line: usize, label: Option<&str>, e: &ShellError) {
        let mut where_ = String::new();
        if let Some(l) = label {
            where_.push_str(l);
            where_.push_str(": ");
        }
        match e {
            ShellError::Parse(p) => {
                let (row, col) = row_col(text, p.pos);
                let src = text.lines().nth(row).unwrap_or("");
                if line > 0 {
                    where_.push_str(&format!("line {}: ", line + row));
                } else if row > 0 {
                    where_.push_str(&format!("line {}: ", row + 1));
                }
                eprintln!("{src}");
                eprintln!("{}^", " ".repeat(col));
                eprintln!("{where_}parse error at column {}: {}", col + 1, p.msg);
            }
            ShellError::Run(e) => {
                if line > 0 {
                    where_.push_str(&format!("line {line}: "));
                }
                eprintln!("{where_}error: {e}");
            }
        }
    }

    fn run(&mut self, stmt: Stmt) -> SRes {
        if !matches!(stmt, Stmt::It | Stmt::Empty) {
            self.pending = None;
        }
        match stmt {
            Stmt::Empty => Ok(()),
            Stmt::Dot { name, args } => self.dot(&name, &args),
            Stmt::It => match self.pending.take() {
                Some(p) => self.page(p),
                None => {
                    writeln!(self.out, "no more results")?;
                    Ok(())
                }
            },
            other => self.exec(other),
        }
    }

    /// Prints rows in batches of `page_size`, keeping the rest for `it`.
    fn show_rows(&mut self, rows: Rows<'a>) -> SRes {
        self.page(Pending { rows, shown: 0 })
    }

    /// The database file, for what needs the file itself (`what`); on a
    /// cluster, the error naming it.
    fn file(&self, what: &str) -> SRes<&Database> {
        match &self.db {
            Db::File(db) => Ok(db),
            Db::Etcd(_) => Err(user(format!(
                "{what} needs a database file; on an etcd:// database the shell runs the \
                 collection, table and event statements, .begin/.commit/.rollback and \
                 .check (`cairn migrate URL FILE` copies the prefix into a file)"
            ))),
        }
    }

    /// The collections' names, in order.
    fn list_collections(&self) -> SRes<Vec<String>> {
        Ok(match &self.db {
            Db::File(db) => db.list_collections()?,
            Db::Etcd(db) => db.list_collections()?,
        })
    }

    /// The event streams' names, in order.
    fn stream_names(&self) -> SRes<Vec<String>> {
        let streams = match &self.db {
            Db::File(db) => cairndb::events::EventStore::new(db).list_streams("")?,
            Db::Etcd(db) => db.events().list_streams("")?,
        };
        Ok(streams.into_iter().map(|s| s.name).collect())
    }

    fn page(&mut self, mut p: Pending<'a>) -> SRes {
        let mut batch = Vec::new();
        // Rows left to print in this page; batches of at most 1000 keep
        // memory flat when paging is off.
        let mut left = if self.page_size == 0 {
            usize::MAX
        } else {
            self.page_size
        };
        let first = p.shown == 0;
        let mut printed_any = false;
        loop {
            let want = left.min(1000);
            while batch.len() < want {
                check_interrupt()?;
                match p.rows.next() {
                    Some(r) => batch.push(r?),
                    None => break,
                }
            }
            let got = batch.len();
            self.printer
                .rows(&mut self.out, &batch, first && !printed_any)?;
            printed_any |= got > 0;
            p.shown += got as u64;
            batch.clear();
            if got < want {
                return Ok(());
            }
            left -= got;
            if left == 0 {
                break;
            }
        }
        // A full batch: is there more?
        match p.rows.next() {
            None => Ok(()),
            Some(r) => {
                let next = r?;
                let rest = p.rows;
                self.pending = Some(Pending {
                    rows: Box::new(std::iter::once(Ok(next)).chain(rest)),
                    shown: p.shown,
                });
                writeln!(self.out, "Type \"it\" for more")?;
                Ok(())
            }
        }
    }
}

/// The statements of a text with the line each starts on (1-based): a
/// statement goes on over the next lines until its brackets and quotes
/// close; blank lines between statements are skipped.
fn statements(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut stmt = String::new();
    let mut first_line = 0;
    for (i, line) in text.lines().enumerate() {
        if stmt.is_empty() {
            if line.trim().is_empty() {
                continue;
            }
            first_line = i + 1;
        } else {
            stmt.push('\n');
        }
        stmt.push_str(line);
        if parse::is_complete(&stmt) {
            out.push((first_line, std::mem::take(&mut stmt)));
        }
    }
    if !stmt.trim().is_empty() {
        out.push((first_line, stmt));
    }
    out
}

/// The row and column (0-based, in characters) of character `pos`.
fn row_col(text: &str, pos: usize) -> (usize, usize) {
    let mut row = 0;
    let mut col = 0;
    for (i, c) in text.chars().enumerate() {
        if i == pos {
            break;
        }
        if c == '\n' {
            row += 1;
            col = 0;
        } else {
            col += 1;
        }
    }
    (row, col)
}
