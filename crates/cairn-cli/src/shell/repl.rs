//! The interactive loop: `rustyline` line editing, history in the user's
//! data directory, completion, multi-line statements, Ctrl-C / Ctrl-D.

use std::borrow::Cow;
use std::path::PathBuf;

use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::{FileHistory, History};
use rustyline::validate::{ValidationContext, ValidationResult, Validator};
use rustyline::{CompletionType, Config, Context, Editor, Helper};

use super::dot::DOT_COMMANDS;
use super::output::Mode;
use super::parse::{is_complete, KEYWORDS, METHODS, MODIFIERS};
use super::Shell;

/// Query and update operators offered after `$`.
const OPERATORS: &[&str] = &[
    "$eq",
    "$ne",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exists",
    "$type",
    "$and",
    "$or",
    "$nor",
    "$not",
    "$elemMatch",
    "$size",
    "$all",
    "$regex",
    "$set",
    "$unset",
    "$inc",
    "$mul",
    "$min",
    "$max",
    "$rename",
    "$push",
    "$pull",
    "$addToSet",
    "$pop",
    "$currentDate",
];

/// The history file: `$XDG_DATA_HOME/cairn/history`, else
/// `$HOME/.local/share/cairn/history`; `CAIRN_HISTORY` overrides both.
pub fn history_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CAIRN_HISTORY") {
        return Some(PathBuf::from(p));
    }
    let base = match std::env::var_os("XDG_DATA_HOME").filter(|v| !v.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".local/share"),
    };
    Some(base.join("cairn").join("history"))
}

/// What completion offers: names in the file, refreshed before each prompt.
#[derive(Default)]
struct Names {
    collections: Vec<String>,
    tables: Vec<String>,
    streams: Vec<String>,
    /// Field paths seen in a sample of each collection.
    fields: Vec<(String, Vec<String>)>,
}

#[derive(Default)]
struct ShellHelper {
    names: Names,
}

fn word_start(line: &str, pos: usize) -> usize {
    line[..pos]
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_alphanumeric() || "_$.-/".contains(*c))
        .last()
        .map_or(pos, |(i, _)| i)
}

fn matching(prefix: &str, cands: impl IntoIterator<Item = String>) -> Vec<Pair> {
    let mut v: Vec<Pair> = cands
        .into_iter()
        .filter(|c| c.starts_with(prefix))
        .map(|c| Pair {
            display: c.clone(),
            replacement: c,
        })
        .collect();
    v.sort_by(|a, b| a.replacement.cmp(&b.replacement));
    v.dedup_by(|a, b| a.replacement == b.replacement);
    v
}

impl ShellHelper {
    /// The collection of a `db.NAME.` statement.
    fn collection_of(line: &str) -> Option<&str> {
        let rest = line.trim_start().strip_prefix("db.")?;
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '$'))
            .unwrap_or(rest.len());
        Some(&rest[..end])
    }

    fn candidates(&self, line: &str, pos: usize) -> (usize, Vec<Pair>) {
        let start = word_start(line, pos);
        let word = &line[start..pos];
        let before = line[..start].trim_start();
        let owned = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        // The first word: a statement or a dot-command.
        if before.is_empty() {
            if let Some(rest) = word.strip_prefix("db.") {
                return match rest.split_once('.') {
                    None => {
                        let mut c: Vec<String> = self
                            .names
                            .collections
                            .iter()
                            .map(|n| format!("db.{n}."))
                            .collect();
                        c.push("db.getCollectionNames()".into());
                        c.push("db.getCollection(".into());
                        (start, matching(word, c))
                    }
                    Some((coll, _)) => {
                        let c = METHODS.iter().map(|m| format!("db.{coll}.{m}("));
                        (start, matching(word, c))
                    }
                };
            }
            if word.starts_with('.') {
                let c = DOT_COMMANDS.iter().map(|(d, _, _)| d.to_string());
                return (start, matching(word, c));
            }
            return (start, matching(word, owned(KEYWORDS)));
        }
        // A modifier after `find(...)`.
        if let Some(m) = word.strip_prefix('.') {
            if line[..start].ends_with(')') {
                let c = MODIFIERS.iter().map(|x| format!(".{x}("));
                return (start, matching(&format!(".{m}"), c));
            }
        }
        if word.starts_with('$') {
            return (start, matching(word, owned(OPERATORS)));
        }
        // Inside the arguments of a collection method: field paths.
        if let Some(coll) = Self::collection_of(line) {
            if line[..start].contains('(') {
                let fields = self
                    .names
                    .fields
                    .iter()
                    .find(|(c, _)| c == coll)
                    .map(|(_, f)| f.clone())
                    .unwrap_or_default();
                return (start, matching(word, fields));
            }
        }
        // The arguments of other statements.
        let words: Vec<&str> = before.split_whitespace().collect();
        let first = words.first().copied().unwrap_or("");
        let arg = words.len();
        let list: Vec<String> = match (first, arg) {
            ("show", 1) => owned(&["collections", "tables", "streams"]),
            ("get" | "put" | "del" | "scan", 1) => self.names.tables.clone(),
            ("append" | "read" | "tail", 1) => self.names.streams.clone(),
            (".schema" | ".indexes" | ".export", 1) | (".import", 2) => {
                self.names.collections.clone()
            }
            (".mode", 1) => owned(Mode::NAMES),
            (".timer", 1) => owned(&["on", "off"]),
            _ => Vec::new(),
        };
        (start, matching(word, list))
    }
}

impl Completer for ShellHelper {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        Ok(self.candidates(line, pos))
    }
}

impl Hinter for ShellHelper {
    type Hint = String;
}

impl Highlighter for ShellHelper {
    fn highlight_prompt<'b, 's: 'b, 'p: 'b>(
        &'s self,
        prompt: &'p str,
        _default: bool,
    ) -> Cow<'b, str> {
        Cow::Borrowed(prompt)
    }
}

impl Validator for ShellHelper {
    fn validate(&self, ctx: &mut ValidationContext<'_>) -> rustyline::Result<ValidationResult> {
        Ok(if is_complete(ctx.input()) {
            ValidationResult::Valid(None)
        } else {
            ValidationResult::Incomplete
        })
    }
}

impl Helper for ShellHelper {}

impl Shell<'_> {
    fn names(&self) -> Names {
        let collections = self.list_collections().unwrap_or_default();
        let tables = self.table_names().unwrap_or_default();
        let streams = self.stream_names().unwrap_or_default();
        let fields = collections
            .iter()
            .take(50)
            .map(|c| {
                let paths = self
                    .sample(c, 100)
                    .map(|s| s.fields.into_iter().map(|(p, _)| p).collect())
                    .unwrap_or_default();
                (c.clone(), paths)
            })
            .collect();
        Names {
            collections,
            tables,
            streams,
            fields,
        }
    }
}

/// Runs the interactive loop until `.quit` or Ctrl-D.
pub fn run(sh: &mut Shell) {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .auto_add_history(false)
        .max_history_size(10_000)
        .map(|b| b.build());
    let config = config.unwrap_or_default();
    let mut ed: Editor<ShellHelper, FileHistory> = match Editor::with_config(config) {
        Ok(e) => e,
        Err(e) => {
            eprintln!("cairn: cannot start line editing ({e}); reading plain lines");
            return plain(sh);
        }
    };
    ed.set_helper(Some(ShellHelper::default()));
    let history = history_path();
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = ed.load_history(h);
    }
    println!(
        "cairn shell on {} — .help for help, Ctrl-D to leave",
        sh.path.display()
    );
    while !sh.quit {
        if let Some(h) = ed.helper_mut() {
            h.names = sh.names();
        }
        if sh.to_stdout {
            sh.printer.width = super::term_width();
        }
        let prompt = if sh.txn.is_some() {
            "cairn*> "
        } else {
            "cairn> "
        };
        match ed.readline(prompt) {
            Ok(line) => {
                if line.trim().is_empty() {
                    continue;
                }
                if ed.history_mut().add(&line).unwrap_or(false) {
                    if let Some(h) = &history {
                        let _ = ed.append_history(h);
                    }
                }
                // A paste may hold several statements: each runs, in
                // order, whatever the others do.
                let stmts = super::statements(&line);
                let several = stmts.len() > 1;
                for (n, stmt) in stmts {
                    sh.run_reporting(&stmt, if several { n } else { 0 }, None);
                    if sh.quit {
                        break;
                    }
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("cairn: {e}");
                break;
            }
        }
    }
}

/// Without line editing: statements from standard input, one prompt each.
fn plain(sh: &mut Shell) {
    let mut text = String::new();
    let _ = std::io::Read::read_to_string(&mut std::io::stdin(), &mut text);
    sh.keep_going = true;
    sh.run_script(&text, None);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper() -> ShellHelper {
        ShellHelper {
            names: Names {
                collections: vec!["orders".into(), "people".into()],
                tables: vec!["kv".into()],
                streams: vec!["order-1".into()],
                fields: vec![(
                    "people".into(),
                    vec!["name".into(), "age".into(), "address.city".into()],
                )],
            },
        }
    }

    fn complete(line: &str) -> Vec<String> {
        helper()
            .candidates(line, line.len())
            .1
            .into_iter()
            .map(|p| p.replacement)
            .collect()
    }

    #[test]
    fn completes_names_methods_fields_and_commands() {
        assert_eq!(complete("db.pe"), ["db.people."]);
        assert_eq!(complete("db.people.insertM"), ["db.people.insertMany("]);
        assert_eq!(complete("db.people.find({ad"), ["address.city"]);
        assert_eq!(complete("db.people.find({a"), ["address.city", "age"]);
        assert_eq!(complete("db.people.find().so"), [".sort("]);
        assert_eq!(complete("db.people.find({age: {$g"), ["$gt", "$gte"]);
        assert_eq!(complete(".sch"), [".schema"]);
        assert_eq!(complete(".schema p"), ["people"]);
        assert_eq!(complete("get k"), ["kv"]);
        assert_eq!(complete("tail o"), ["order-1"]);
        assert_eq!(complete("show c"), ["collections"]);
        assert_eq!(complete("sh"), ["show"]);
    }
}
