//! The shell's language: one statement at a time, parsed into a [`Stmt`].
//!
//! - `db.NAME.method(args).modifier(args)…` in the MongoDB shell's shape;
//!   arguments are relaxed JSON ([`Parser::value`]): unquoted keys, single
//!   or double quotes, trailing commas, `ObjectId('…')` (`ObjectId()`: a
//!   new id).
//! - `show collections|tables|streams`, `it`, `help`, `exit`, `quit`.
//! - Key-value tables: `get T KEY`, `put T KEY VALUE`, `del T KEY`,
//!   `scan T [PREFIX]`; event streams: `append S TYPE [DATA]`,
//!   `read S [FROM [LIMIT]]`, `tail S [N]`. Words are bare (no blanks) or
//!   quoted.
//! - Dot-commands `.name args…` (see `commands.rs`), words as above.
//! - `//` starts a comment line.
//!
//! Errors carry the character offset in the statement they point at.

use serde_json::{Map, Number, Value as Json};

/// A parse error: what was wrong, at which character of the statement.
#[derive(Debug, Clone, PartialEq)]
pub struct ParseError {
    /// Character offset into the statement text.
    pub pos: usize,
    /// What was expected or wrong.
    pub msg: String,
}

/// A parsed statement.
#[derive(Debug, Clone, PartialEq)]
pub enum Stmt {
    /// Blank or a comment.
    Empty,
    /// `.name args…`
    Dot { name: String, args: Vec<String> },
    /// `show collections|tables|streams`
    Show(String),
    /// `it`: the next batch of the last query's results.
    It,
    /// A collection operation.
    Docs { coll: String, op: Box<DocOp> },
    /// `db.getCollectionNames()`
    CollectionNames,
    /// `get T KEY`
    Get { table: String, key: String },
    /// `put T KEY VALUE`
    Put {
        table: String,
        key: String,
        value: String,
    },
    /// `del T KEY`
    Del { table: String, key: String },
    /// `scan T [PREFIX]`
    Scan { table: String, prefix: String },
    /// `append S TYPE [DATA]`
    Append {
        stream: String,
        event_type: String,
        data: Option<Json>,
    },
    /// `read S [FROM [LIMIT]]`
    Read {
        stream: String,
        from: u64,
        limit: Option<u64>,
    },
    /// `tail S [N]`: the last N events (10 by default).
    Tail { stream: String, n: u64 },
}

/// A find and its modifiers.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Find {
    pub filter: Json,
    pub projection: Option<Json>,
    pub sort: Option<Json>,
    pub skip: u64,
    pub limit: Option<u64>,
    /// `findOne`: at most one document, printed on its own.
    pub one: bool,
    /// `.count()`
    pub count: bool,
    /// `.explain()`
    pub explain: bool,
    /// `.hint(index name or key pattern)`
    pub hint: Option<Json>,
}

/// A `findOneAnd…()` call.
#[derive(Debug, Clone, PartialEq)]
pub struct FindOneAnd {
    pub filter: Json,
    pub modify: Modify,
    pub sort: Option<Json>,
    pub projection: Option<Json>,
    pub upsert: bool,
    /// `returnDocument: "after"`.
    pub after: bool,
}

/// What a `findOneAnd…()` does to the document it finds.
#[derive(Debug, Clone, PartialEq)]
pub enum Modify {
    Update(Json),
    Replace(Json),
    Delete,
}

/// An operation on a collection.
#[derive(Debug, Clone, PartialEq)]
pub enum DocOp {
    Find(Find),
    Count(Json),
    Insert {
        docs: Vec<Json>,
        many: bool,
    },
    Update {
        filter: Json,
        update: Json,
        many: bool,
        upsert: bool,
    },
    Replace {
        filter: Json,
        doc: Json,
        upsert: bool,
    },
    Delete {
        filter: Json,
        many: bool,
    },
    CreateIndex {
        fields: Vec<(String, i8)>,
        unique: bool,
        sparse: bool,
        name: Option<String>,
        /// `{expireAfterSeconds: n}`: a TTL index (one ascending field).
        expire_after: Option<u64>,
    },
    /// `createIndex({field: "text", …}, {weights, name, default_language})`.
    CreateTextIndex {
        fields: Vec<(String, u32)>,
        name: Option<String>,
        default_language: Option<String>,
    },
    GetIndexes,
    DropIndex(String),
    Drop,
    /// `aggregate([stages])`, with `{explain: true}` as options.
    Aggregate {
        pipeline: Json,
        explain: bool,
    },
    /// `distinct('field', {filter})`.
    Distinct {
        field: String,
        filter: Json,
    },
    /// `findOneAndUpdate/Replace/Delete(filter, …, {sort, projection,
    /// upsert, returnDocument})`.
    FindOneAnd(FindOneAnd),
    /// `renameCollection('new name', dropTarget)`.
    Rename {
        to: String,
        drop_target: bool,
    },
}

/// The collection methods, for `.help` and completion.
pub const METHODS: &[&str] = &[
    "find",
    "findOne",
    "count",
    "countDocuments",
    "aggregate",
    "distinct",
    "insertOne",
    "insertMany",
    "updateOne",
    "updateMany",
    "replaceOne",
    "deleteOne",
    "deleteMany",
    "createIndex",
    "getIndexes",
    "dropIndex",
    "findOneAndUpdate",
    "findOneAndReplace",
    "findOneAndDelete",
    "renameCollection",
    "drop",
];

/// The modifiers of `find`.
pub const MODIFIERS: &[&str] = &[
    "sort", "limit", "skip", "hint", "count", "explain", "pretty", "toArray",
];

/// The statement keywords (not dot-commands), for completion.
pub const KEYWORDS: &[&str] = &[
    "db.", "show", "it", "get", "put", "del", "scan", "append", "read", "tail", "help", "exit",
    "quit",
];

/// Whether the brackets and quotes of `text` are all closed: a statement
/// continues on the next line while they are not.
pub fn is_complete(text: &str) -> bool {
    // Only statements that take JSON go on over several lines.
    let t = text.trim_start();
    let first = t.split_whitespace().next().unwrap_or("");
    if t.starts_with('.')
        || t.starts_with("//")
        || matches!(
            first,
            "get"
                | "put"
                | "del"
                | "scan"
                | "read"
                | "tail"
                | "show"
                | "it"
                | "help"
                | "exit"
                | "quit"
        )
    {
        return true;
    }
    let mut depth = 0i64;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    let mut comment = false;
    let mut prev = ' ';
    let mut chars = t.chars().peekable();
    while let Some(c) = chars.next() {
        if comment {
            comment = c != '\n';
        } else if let Some(q) = quote {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == q {
                quote = None;
            }
        } else {
            match c {
                // A quote opens a string where a value or word starts (as
                // the parser reads them), not inside a bare word (`don't`).
                '\'' | '"' if prev.is_whitespace() || "{[(:,".contains(prev) => quote = Some(c),
                '/' if chars.peek() == Some(&'/') => comment = true,
                '{' | '[' | '(' => depth += 1,
                '}' | ']' | ')' => depth -= 1,
                _ => {}
            }
        }
        prev = c;
    }
    // Too many closers is complete: the parser reports it.
    depth <= 0 && quote.is_none()
}

/// Parses one statement.
pub fn parse(text: &str) -> Result<Stmt, ParseError> {
    let mut p = Parser::new(text);
    p.ws();
    if p.at_end() || p.rest_starts_with("//") {
        return Ok(Stmt::Empty);
    }
    if p.peek() == Some('.') {
        p.pos += 1;
        let name = p.bare_word();
        if name.is_empty() {
            return Err(p.err("expected a dot-command name after `.` (try .help)"));
        }
        let mut args = Vec::new();
        loop {
            p.ws();
            if p.at_end() {
                break;
            }
            args.push(p.word("an argument")?);
        }
        return Ok(Stmt::Dot { name, args });
    }
    let start = p.pos;
    let kw = p.ident();
    let stmt = match kw.as_str() {
        "db" => p.db()?,
        "show" => {
            p.ws();
            let at = p.pos;
            let what = p.ident();
            match what.as_str() {
                "collections" | "tables" | "streams" => Stmt::Show(what),
                "dbs" | "databases" => {
                    return Err(ParseError {
                        pos: at,
                        msg: "a CairnDB file is one database: try `show collections`, \
                              `show tables` or `show streams`"
                            .into(),
                    })
                }
                _ => {
                    return Err(ParseError {
                        pos: at,
                        msg: "expected `collections`, `tables` or `streams` after `show`".into(),
                    })
                }
            }
        }
        "it" => Stmt::It,
        "help" => Stmt::Dot {
            name: "help".into(),
            args: Vec::new(),
        },
        "exit" | "quit" => Stmt::Dot {
            name: "quit".into(),
            args: Vec::new(),
        },
        "get" | "del" => {
            let table = p.word("a table name")?;
            let key = p.word("a key")?;
            if kw == "get" {
                Stmt::Get { table, key }
            } else {
                Stmt::Del { table, key }
            }
        }
        "put" => Stmt::Put {
            table: p.word("a table name")?,
            key: p.word("a key")?,
            value: p.word("a value")?,
        },
        "scan" => {
            let table = p.word("a table name")?;
            p.ws();
            let prefix = if p.at_end() || p.peek() == Some(';') {
                String::new()
            } else {
                p.word("a key prefix")?
            };
            Stmt::Scan { table, prefix }
        }
        "append" => {
            let stream = p.word("a stream name")?;
            let event_type = p.word("an event type")?;
            p.ws();
            let data = if p.at_end() || p.peek() == Some(';') {
                None
            } else {
                Some(p.value()?)
            };
            Stmt::Append {
                stream,
                event_type,
                data,
            }
        }
        "read" => {
            let stream = p.word("a stream name")?;
            let from = p.opt_number("a version to start at")?.unwrap_or(0);
            let limit = p.opt_number("a number of events")?;
            Stmt::Read {
                stream,
                from,
                limit,
            }
        }
        "tail" => {
            let stream = p.word("a stream name")?;
            let n = p.opt_number("a number of events")?.unwrap_or(10);
            Stmt::Tail { stream, n }
        }
        "" => return Err(p.err("expected a command (try `help`)")),
        other => {
            return Err(ParseError {
                pos: start,
                msg: format!("unknown command `{other}` (try `help`)"),
            })
        }
    };
    p.ws();
    if p.peek() == Some(';') {
        p.pos += 1;
        p.ws();
    }
    if !p.at_end() {
        return Err(p.err("unexpected text after the end of the command"));
    }
    Ok(stmt)
}

/// A method call in a chain: its name and arguments, with positions.
struct Call {
    name: String,
    pos: usize,
    args: Vec<(Json, usize)>,
    close: usize,
}

/// How deeply objects and arrays may nest in a statement: above the
/// document layer's limit (`cairndb::document::codec::MAX_DEPTH`, 100), so
/// that its typed error speaks for documents, and low enough that the
/// recursive descent cannot run out of stack.
pub const MAX_NESTING: usize = 128;

/// A recursive-descent parser over the characters of one statement.
pub struct Parser {
    chars: Vec<char>,
    pos: usize,
    depth: usize,
}

impl Parser {
    /// A parser at the start of `text`.
    pub fn new(text: &str) -> Self {
        Parser {
            chars: text.chars().collect(),
            pos: 0,
            depth: 0,
        }
    }

    fn err(&self, msg: impl Into<String>) -> ParseError {
        ParseError {
            pos: self.pos,
            msg: msg.into(),
        }
    }

    fn at_end(&self) -> bool {
        self.pos >= self.chars.len()
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn rest_starts_with(&self, s: &str) -> bool {
        let want: Vec<char> = s.chars().collect();
        self.chars.get(self.pos..self.pos + want.len()) == Some(&want[..])
    }

    /// Skips blanks and `//` comments (to the end of their line).
    fn ws(&mut self) {
        loop {
            while self.peek().is_some_and(char::is_whitespace) {
                self.pos += 1;
            }
            if !self.rest_starts_with("//") {
                return;
            }
            while self.peek().is_some_and(|c| c != '\n') {
                self.pos += 1;
            }
        }
    }

    fn expect(&mut self, c: char, what: &str) -> Result<(), ParseError> {
        self.ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(format!("expected {what}")))
        }
    }

    fn ident(&mut self) -> String {
        let start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$')
        {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    fn bare_word(&mut self) -> String {
        let start = self.pos;
        while self.peek().is_some_and(|c| !c.is_whitespace()) {
            self.pos += 1;
        }
        self.chars[start..self.pos].iter().collect()
    }

    /// A bare word (up to a blank or `;` at the end) or a quoted string.
    fn word(&mut self, what: &str) -> Result<String, ParseError> {
        self.ws();
        match self.peek() {
            None => Err(self.err(format!("expected {what}"))),
            Some(q @ ('\'' | '"')) => self.string(q),
            Some(_) => {
                let start = self.pos;
                while self.peek().is_some_and(|c| !c.is_whitespace()) {
                    self.pos += 1;
                }
                // A trailing `;` ends the statement rather than the word.
                if self.pos > start + 1 && self.chars[self.pos - 1] == ';' && self.at_end() {
                    self.pos -= 1;
                }
                Ok(self.chars[start..self.pos].iter().collect())
            }
        }
    }

    fn opt_number(&mut self, what: &str) -> Result<Option<u64>, ParseError> {
        self.ws();
        if self.at_end() || self.peek() == Some(';') {
            return Ok(None);
        }
        let at = self.pos;
        let w = self.word(what)?;
        w.parse().map(Some).map_err(|_| ParseError {
            pos: at,
            msg: format!("expected {what} (a whole number), not `{w}`"),
        })
    }

    /// `db.` already read as `db`: the rest of a `db…` statement.
    fn db(&mut self) -> Result<Stmt, ParseError> {
        self.ws();
        let coll = match self.peek() {
            Some('.') => {
                self.pos += 1;
                self.ws();
                let at = self.pos;
                let name = self.ident();
                if name.is_empty() {
                    return Err(self.err("expected a collection name after `db.`"));
                }
                self.ws();
                if self.peek() == Some('(') {
                    // A database method.
                    let call = self.call_args(name, at)?;
                    return match call.name.as_str() {
                        "getCollectionNames" => {
                            no_args(&call)?;
                            Ok(Stmt::CollectionNames)
                        }
                        "getCollection" => {
                            let name = self.string_arg(&call)?;
                            self.chain(name)
                        }
                        other => Err(ParseError {
                            pos: at,
                            msg: format!(
                                "unknown database method `{other}` (there are \
                                 getCollectionNames() and getCollection(name))"
                            ),
                        }),
                    };
                }
                name
            }
            Some('[') => {
                self.pos += 1;
                self.ws();
                let name = match self.peek() {
                    Some(q @ ('\'' | '"')) => self.string(q)?,
                    _ => return Err(self.err("expected a quoted collection name")),
                };
                self.expect(']', "`]`")?;
                name
            }
            _ => return Err(self.err("expected `.` and a collection name after `db`")),
        };
        self.chain(coll)
    }

    fn string_arg(&self, call: &Call) -> Result<String, ParseError> {
        match call.args.as_slice() {
            [(Json::String(s), _)] => Ok(s.clone()),
            [(_, at)] => Err(ParseError {
                pos: *at,
                msg: "expected a string".into(),
            }),
            _ => Err(ParseError {
                pos: call.pos,
                msg: format!("{}() takes one string argument", call.name),
            }),
        }
    }

    /// `.method(args)` and the modifiers after it.
    fn chain(&mut self, coll: String) -> Result<Stmt, ParseError> {
        self.expect('.', "`.` and a method name (e.g. `.find()`)")?;
        self.ws();
        let at = self.pos;
        let name = self.ident();
        if name.is_empty() {
            return Err(self.err("expected a method name (e.g. `find`)"));
        }
        let call = self.call_args(name, at)?;
        let mut mods = Vec::new();
        loop {
            self.ws();
            if self.peek() != Some('.') {
                break;
            }
            self.pos += 1;
            self.ws();
            let at = self.pos;
            let name = self.ident();
            if name.is_empty() {
                return Err(self.err("expected a method name after `.`"));
            }
            mods.push(self.call_args(name, at)?);
        }
        let op = doc_op(&call, &mods)?;
        Ok(Stmt::Docs {
            coll,
            op: Box::new(op),
        })
    }

    fn call_args(&mut self, name: String, pos: usize) -> Result<Call, ParseError> {
        self.ws();
        if self.peek() != Some('(') {
            return Err(self.err(format!("expected `(` after `{name}`")));
        }
        self.pos += 1;
        let mut args = Vec::new();
        loop {
            self.ws();
            if self.peek() == Some(')') {
                let close = self.pos;
                self.pos += 1;
                return Ok(Call {
                    name,
                    pos,
                    args,
                    close,
                });
            }
            let at = self.pos;
            args.push((self.value()?, at));
            self.ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(')') => {}
                _ => return Err(self.err("expected `,` or `)`")),
            }
        }
    }

    /// A relaxed JSON value that is the whole text (blanks aside).
    pub fn whole_value(&mut self) -> Result<Json, ParseError> {
        let v = self.value()?;
        self.ws();
        if !self.at_end() {
            return Err(self.err("unexpected text after the value"));
        }
        Ok(v)
    }

    /// A relaxed JSON value.
    pub fn value(&mut self) -> Result<Json, ParseError> {
        if self.depth >= MAX_NESTING {
            return Err(self.err(format!(
                "objects and arrays nest more than {MAX_NESTING} deep here"
            )));
        }
        self.depth += 1;
        let v = self.value_inner();
        self.depth -= 1;
        v
    }

    fn value_inner(&mut self) -> Result<Json, ParseError> {
        self.ws();
        match self.peek() {
            None => Err(self.err("expected a value, found the end of the input")),
            Some('{') => self.object(),
            Some('[') => self.array(),
            Some(q @ ('\'' | '"')) => Ok(Json::String(self.string(q)?)),
            Some(c) if c == '-' || c == '+' || c == '.' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_alphabetic() || c == '_' || c == '$' => {
                let at = self.pos;
                let id = self.ident();
                match id.as_str() {
                    "true" => Ok(Json::Bool(true)),
                    "false" => Ok(Json::Bool(false)),
                    "null" => Ok(Json::Null),
                    "ObjectId" => {
                        let call = self.call_args(id, at)?;
                        // `ObjectId()` is a new id, as in the MongoDB shell.
                        let hex = if call.args.is_empty() {
                            cairndb::document::ObjectId::new().to_hex()
                        } else {
                            self.string_arg(&call)?
                        };
                        let mut m = Map::new();
                        m.insert("$oid".into(), Json::String(hex));
                        Ok(Json::Object(m))
                    }
                    _ => Err(ParseError {
                        pos: at,
                        msg: format!(
                            "unexpected `{id}`: a value is an object, array, string \
                             (quoted), number, true, false, null or ObjectId('…')"
                        ),
                    }),
                }
            }
            Some(c) => Err(self.err(format!("unexpected `{c}`: expected a value"))),
        }
    }

    fn object(&mut self) -> Result<Json, ParseError> {
        self.pos += 1;
        let mut m = Map::new();
        loop {
            self.ws();
            match self.peek() {
                Some('}') => {
                    self.pos += 1;
                    return Ok(Json::Object(m));
                }
                None => return Err(self.err("expected `}` to close the object")),
                _ => {}
            }
            let key = match self.peek() {
                Some(q @ ('\'' | '"')) => self.string(q)?,
                _ => {
                    let start = self.pos;
                    while self
                        .peek()
                        .is_some_and(|c| c.is_alphanumeric() || "_$.-".contains(c))
                    {
                        self.pos += 1;
                    }
                    if self.pos == start {
                        return Err(self.err("expected a field name or `}`"));
                    }
                    self.chars[start..self.pos].iter().collect()
                }
            };
            self.expect(':', "`:` after the field name")?;
            let v = self.value()?;
            m.insert(key, v);
            self.ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some('}') => {}
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn array(&mut self) -> Result<Json, ParseError> {
        self.pos += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                Some(']') => {
                    self.pos += 1;
                    return Ok(Json::Array(items));
                }
                None => return Err(self.err("expected `]` to close the array")),
                _ => {}
            }
            items.push(self.value()?);
            self.ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(']') => {}
                _ => return Err(self.err("expected `,` or `]`")),
            }
        }
    }

    fn string(&mut self, quote: char) -> Result<String, ParseError> {
        let start = self.pos;
        self.pos += 1;
        let mut s = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(ParseError {
                    pos: start,
                    msg: "this string is not closed".into(),
                });
            };
            self.pos += 1;
            if c == quote {
                return Ok(s);
            }
            if c != '\\' {
                s.push(c);
                continue;
            }
            let at = self.pos - 1;
            let Some(e) = self.peek() else {
                return Err(self.err("expected an escaped character"));
            };
            self.pos += 1;
            match e {
                'n' => s.push('\n'),
                't' => s.push('\t'),
                'r' => s.push('\r'),
                'b' => s.push('\u{8}'),
                'f' => s.push('\u{c}'),
                '0' => s.push('\0'),
                'u' => {
                    let hex: String = self.chars.iter().skip(self.pos).take(4).collect();
                    let code = u32::from_str_radix(&hex, 16)
                        .ok()
                        .filter(|_| hex.len() == 4);
                    match code.and_then(char::from_u32) {
                        Some(ch) => {
                            s.push(ch);
                            self.pos += 4;
                        }
                        None => {
                            return Err(ParseError {
                                pos: at,
                                msg: "expected \\u and 4 hex digits of a character".into(),
                            })
                        }
                    }
                }
                other => s.push(other),
            }
        }
    }

    fn number(&mut self) -> Result<Json, ParseError> {
        let start = self.pos;
        if matches!(self.peek(), Some('-' | '+')) {
            self.pos += 1;
        }
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == '.' || c == '+' || c == '-')
        {
            // A sign only right after an exponent mark.
            let c = self.peek().unwrap_or(' ');
            if (c == '+' || c == '-') && !matches!(self.chars[self.pos - 1], 'e' | 'E') {
                break;
            }
            self.pos += 1;
        }
        let text: String = self.chars[start..self.pos].iter().collect();
        let text = text.strip_prefix('+').unwrap_or(&text);
        let bad = || ParseError {
            pos: start,
            msg: format!("`{text}` is not a number"),
        };
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Json::Number(i.into()));
        }
        let is_float_text = text
            .chars()
            .all(|c| c.is_ascii_digit() || ".eE+-".contains(c));
        match text.parse::<f64>() {
            Ok(f) if is_float_text => Number::from_f64(f).map(Json::Number).ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

fn no_args(call: &Call) -> Result<(), ParseError> {
    if call.args.is_empty() {
        Ok(())
    } else {
        Err(ParseError {
            pos: call.args[0].1,
            msg: format!("{}() takes no arguments", call.name),
        })
    }
}

fn arity(call: &Call, min: usize, max: usize, usage: &str) -> Result<(), ParseError> {
    let n = call.args.len();
    if n < min {
        return Err(ParseError {
            pos: call.close,
            msg: format!("{}() needs {usage}", call.name),
        });
    }
    if n > max {
        return Err(ParseError {
            pos: call.args[max].1,
            msg: format!("{}() takes {usage}: too many arguments", call.name),
        });
    }
    Ok(())
}

fn object_arg(call: &Call, i: usize, what: &str) -> Result<Json, ParseError> {
    match call.args.get(i) {
        None => Ok(Json::Object(Map::new())),
        Some((v @ Json::Object(_), _)) => Ok(v.clone()),
        Some((_, at)) => Err(ParseError {
            pos: *at,
            msg: format!("the {what} must be an object"),
        }),
    }
}

fn count_arg(call: &Call) -> Result<u64, ParseError> {
    arity(call, 1, 1, "one number")?;
    let (v, at) = &call.args[0];
    v.as_u64().ok_or_else(|| ParseError {
        pos: *at,
        msg: format!("{}() takes a whole number ≥ 0", call.name),
    })
}

/// Options such as `{upsert: true}`: only booleans of the names given.
fn options(call: &Call, i: usize, allowed: &[&str]) -> Result<Map<String, Json>, ParseError> {
    let Some((v, at)) = call.args.get(i) else {
        return Ok(Map::new());
    };
    let Json::Object(m) = v else {
        return Err(ParseError {
            pos: *at,
            msg: "the options must be an object".into(),
        });
    };
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            return Err(ParseError {
                pos: *at,
                msg: format!(
                    "unknown option `{k}` for {}() (it takes {})",
                    call.name,
                    allowed.join(", ")
                ),
            });
        }
    }
    Ok(m.clone())
}

fn flag(m: &Map<String, Json>, name: &str, at: usize) -> Result<bool, ParseError> {
    match m.get(name) {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(_) => Err(ParseError {
            pos: at,
            msg: format!("option `{name}` must be true or false"),
        }),
    }
}

fn string_opt(m: &Map<String, Json>, name: &str, at: usize) -> Result<Option<String>, ParseError> {
    match m.get(name) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(ParseError {
            pos: at,
            msg: format!("option `{name}` must be a string"),
        }),
    }
}

/// `createIndex({a: "text", b: "text"}, {weights: {a: 10}, name,
/// default_language})`: every field "text" (MongoDB's compound text
/// indexes with other keys are not supported).
fn text_index(call: &Call, spec: &Map<String, Json>, at: usize) -> Result<DocOp, ParseError> {
    if let Some((k, _)) = spec.iter().find(|(_, v)| v.as_str() != Some("text")) {
        return Err(ParseError {
            pos: at,
            msg: format!(
                "a text index's fields are all \"text\" (`{k}` is not); other keys cannot be \
                 combined with a text index here"
            ),
        });
    }
    let o = options(call, 1, &["weights", "name", "default_language"])?;
    let opt_at = call.args.get(1).map_or(call.pos, |a| a.1);
    let weights = match o.get("weights") {
        None => Map::new(),
        Some(Json::Object(w)) => w.clone(),
        Some(_) => {
            return Err(ParseError {
                pos: opt_at,
                msg: "option `weights` must be an object such as {title: 10}".into(),
            })
        }
    };
    if let Some(k) = weights.keys().find(|k| !spec.contains_key(*k)) {
        return Err(ParseError {
            pos: opt_at,
            msg: format!("weights names `{k}`, which is not a field of the index"),
        });
    }
    let mut fields = Vec::new();
    for k in spec.keys() {
        let w = match weights.get(k) {
            None => 1,
            Some(v) => match v.as_u64().and_then(|w| u32::try_from(w).ok()) {
                Some(w) if w > 0 => w,
                _ => {
                    return Err(ParseError {
                        pos: opt_at,
                        msg: format!("the weight of `{k}` must be a whole number from 1"),
                    })
                }
            },
        };
        fields.push((k.clone(), w));
    }
    Ok(DocOp::CreateTextIndex {
        fields,
        name: string_opt(&o, "name", opt_at)?,
        default_language: string_opt(&o, "default_language", opt_at)?,
    })
}

fn has_operators(v: &Json) -> bool {
    v.as_object()
        .is_some_and(|m| m.keys().any(|k| k.starts_with('$')))
}

/// Builds the operation from the method call and its modifiers.
fn doc_op(call: &Call, mods: &[Call]) -> Result<DocOp, ParseError> {
    let name = call.name.as_str();
    if name != "find" {
        if let Some(m) = mods.iter().find(|m| m.name != "pretty") {
            return Err(ParseError {
                pos: m.pos,
                msg: format!("`.{}()` can only follow find()", m.name),
            });
        }
    }
    let opt_at = |i: usize| call.args.get(i).map_or(call.pos, |a| a.1);
    Ok(match name {
        "find" | "findOne" => {
            arity(call, 0, 2, "a filter and a projection, both optional")?;
            let mut f = Find {
                filter: object_arg(call, 0, "filter")?,
                projection: call
                    .args
                    .get(1)
                    .map(|_| object_arg(call, 1, "projection"))
                    .transpose()?,
                one: name == "findOne",
                ..Find::default()
            };
            if f.one {
                f.limit = Some(1);
            }
            for m in mods {
                if f.count || f.explain {
                    return Err(ParseError {
                        pos: m.pos,
                        msg: "nothing can follow .count() or .explain()".into(),
                    });
                }
                match m.name.as_str() {
                    "sort" => {
                        arity(m, 1, 1, "a sort spec such as {age: -1}")?;
                        f.sort = Some(object_arg(m, 0, "sort spec")?);
                    }
                    "limit" => f.limit = Some(count_arg(m)?),
                    "hint" => {
                        arity(m, 1, 1, "an index name or key pattern such as {age: 1}")?;
                        match &m.args[0] {
                            (v @ (Json::String(_) | Json::Object(_)), _) => {
                                f.hint = Some(v.clone())
                            }
                            (_, at) => {
                                return Err(ParseError {
                                    pos: *at,
                                    msg: "hint() takes an index name or a key pattern".into(),
                                })
                            }
                        }
                    }
                    "skip" => f.skip = count_arg(m)?,
                    "count" => {
                        no_args(m)?;
                        f.count = true;
                    }
                    "explain" => {
                        arity(m, 0, 1, "an optional verbosity")?;
                        f.explain = true;
                    }
                    "pretty" | "toArray" => no_args(m)?,
                    other => {
                        return Err(ParseError {
                            pos: m.pos,
                            msg: format!(
                                "unknown cursor method `{other}` (there are {})",
                                MODIFIERS.join(", ")
                            ),
                        })
                    }
                }
            }
            DocOp::Find(f)
        }
        "count" | "countDocuments" => {
            arity(call, 0, 1, "an optional filter")?;
            DocOp::Count(object_arg(call, 0, "filter")?)
        }
        "insertOne" => {
            arity(call, 1, 1, "one document")?;
            DocOp::Insert {
                docs: vec![object_arg(call, 0, "document")?],
                many: false,
            }
        }
        "insertMany" => {
            arity(call, 1, 1, "an array of documents")?;
            let (v, at) = &call.args[0];
            let Json::Array(items) = v else {
                return Err(ParseError {
                    pos: *at,
                    msg: "insertMany() takes an array of documents".into(),
                });
            };
            if let Some(i) = items.iter().position(|d| !d.is_object()) {
                return Err(ParseError {
                    pos: *at,
                    msg: format!("item {i} of the array is not a document (an object)"),
                });
            }
            DocOp::Insert {
                docs: items.clone(),
                many: true,
            }
        }
        "updateOne" | "updateMany" => {
            arity(
                call,
                2,
                3,
                "a filter, an update and optional {upsert: true}",
            )?;
            let update = object_arg(call, 1, "update")?;
            if !has_operators(&update) {
                return Err(ParseError {
                    pos: call.args[1].1,
                    msg: format!(
                        "the update must use operators such as {{$set: {{…}}}}; \
                         to replace a whole document use replaceOne(){}",
                        ""
                    ),
                });
            }
            let o = options(call, 2, &["upsert"])?;
            DocOp::Update {
                filter: object_arg(call, 0, "filter")?,
                update,
                many: name == "updateMany",
                upsert: flag(&o, "upsert", opt_at(2))?,
            }
        }
        "replaceOne" => {
            arity(
                call,
                2,
                3,
                "a filter, a document and optional {upsert: true}",
            )?;
            let doc = object_arg(call, 1, "replacement")?;
            if has_operators(&doc) {
                return Err(ParseError {
                    pos: call.args[1].1,
                    msg: "the replacement must be a plain document, without $-operators \
                          (use updateOne() for those)"
                        .into(),
                });
            }
            let o = options(call, 2, &["upsert"])?;
            DocOp::Replace {
                filter: object_arg(call, 0, "filter")?,
                doc,
                upsert: flag(&o, "upsert", opt_at(2))?,
            }
        }
        "deleteOne" | "deleteMany" => {
            arity(call, 1, 1, "a filter ({} for every document)")?;
            DocOp::Delete {
                filter: object_arg(call, 0, "filter")?,
                many: name == "deleteMany",
            }
        }
        "createIndex" => {
            arity(
                call,
                1,
                2,
                "a key spec such as {age: 1} and optional options",
            )?;
            let (spec, at) = &call.args[0];
            let Json::Object(m) = spec else {
                return Err(ParseError {
                    pos: *at,
                    msg: "the key spec must be an object such as {age: 1, name: -1}".into(),
                });
            };
            if m.is_empty() {
                return Err(ParseError {
                    pos: *at,
                    msg: "the key spec names no field".into(),
                });
            }
            if m.values().any(|v| v.as_str() == Some("text")) {
                return text_index(call, m, *at);
            }
            let mut fields = Vec::new();
            for (k, v) in m {
                let order = match v.as_i64() {
                    Some(1) => 1,
                    Some(-1) => -1,
                    _ => {
                        return Err(ParseError {
                            pos: *at,
                            msg: format!("the order of `{k}` must be 1 or -1"),
                        })
                    }
                };
                fields.push((k.clone(), order));
            }
            let o = options(call, 1, &["unique", "sparse", "name", "expireAfterSeconds"])?;
            let name = string_opt(&o, "name", opt_at(1))?;
            let expire_after = match o.get("expireAfterSeconds") {
                None => None,
                Some(v) => match v.as_u64() {
                    Some(n) if fields.len() == 1 && fields[0].1 == 1 => Some(n),
                    Some(_) => {
                        return Err(ParseError {
                            pos: opt_at(1),
                            msg: "a TTL index (expireAfterSeconds) has one ascending field".into(),
                        })
                    }
                    None => {
                        return Err(ParseError {
                            pos: opt_at(1),
                            msg: "option `expireAfterSeconds` must be a whole number of seconds"
                                .into(),
                        })
                    }
                },
            };
            DocOp::CreateIndex {
                fields,
                unique: flag(&o, "unique", opt_at(1))?,
                sparse: flag(&o, "sparse", opt_at(1))?,
                name,
                expire_after,
            }
        }
        "findOneAndUpdate" | "findOneAndReplace" | "findOneAndDelete" => {
            let delete = name == "findOneAndDelete";
            let (min, max, what) = if delete {
                (1, 2, "a filter and optional {sort, projection}")
            } else {
                (
                    2,
                    3,
                    "a filter, an update or replacement, and optional \
                     {sort, projection, upsert, returnDocument}",
                )
            };
            arity(call, min, max, what)?;
            let modify = match name {
                "findOneAndDelete" => Modify::Delete,
                _ => {
                    let v = object_arg(call, 1, "update")?;
                    let ops = has_operators(&v);
                    if name == "findOneAndUpdate" && !ops {
                        return Err(ParseError {
                            pos: call.args[1].1,
                            msg: "the update must use operators such as {$set: {…}}; to \
                                  replace a whole document use findOneAndReplace()"
                                .into(),
                        });
                    }
                    if name == "findOneAndReplace" && ops {
                        return Err(ParseError {
                            pos: call.args[1].1,
                            msg: "the replacement must be a plain document, without \
                                  $-operators (use findOneAndUpdate() for those)"
                                .into(),
                        });
                    }
                    if ops {
                        Modify::Update(v)
                    } else {
                        Modify::Replace(v)
                    }
                }
            };
            let at = if delete { 1 } else { 2 };
            let allowed: &[&str] = if delete {
                &["sort", "projection"]
            } else {
                &["sort", "projection", "upsert", "returnDocument"]
            };
            let o = options(call, at, allowed)?;
            let object_opt = |k: &str| match o.get(k) {
                None => Ok(None),
                Some(v @ Json::Object(_)) => Ok(Some(v.clone())),
                Some(_) => Err(ParseError {
                    pos: opt_at(at),
                    msg: format!("option `{k}` must be an object"),
                }),
            };
            let after = match string_opt(&o, "returnDocument", opt_at(at))?.as_deref() {
                None | Some("before") => false,
                Some("after") => true,
                Some(other) => {
                    return Err(ParseError {
                        pos: opt_at(at),
                        msg: format!(
                            "returnDocument must be \"before\" or \"after\", not {other:?}"
                        ),
                    })
                }
            };
            DocOp::FindOneAnd(FindOneAnd {
                filter: object_arg(call, 0, "filter")?,
                modify,
                sort: object_opt("sort")?,
                projection: object_opt("projection")?,
                upsert: flag(&o, "upsert", opt_at(at))?,
                after,
            })
        }
        "renameCollection" => {
            arity(
                call,
                1,
                2,
                "the new name and optional dropTarget (true or false)",
            )?;
            let to = match &call.args[0] {
                (Json::String(s), _) => s.clone(),
                (_, at) => {
                    return Err(ParseError {
                        pos: *at,
                        msg: "renameCollection() takes the new name (a string)".into(),
                    })
                }
            };
            let drop_target = match call.args.get(1) {
                None => false,
                Some((Json::Bool(b), _)) => *b,
                Some((_, at)) => {
                    return Err(ParseError {
                        pos: *at,
                        msg: "dropTarget must be true or false".into(),
                    })
                }
            };
            DocOp::Rename { to, drop_target }
        }
        "getIndexes" => {
            no_args(call)?;
            DocOp::GetIndexes
        }
        "dropIndex" => {
            arity(call, 1, 1, "an index name")?;
            match &call.args[0] {
                (Json::String(s), _) => DocOp::DropIndex(s.clone()),
                (_, at) => {
                    return Err(ParseError {
                        pos: *at,
                        msg: "dropIndex() takes the index's name (see getIndexes())".into(),
                    })
                }
            }
        }
        "drop" => {
            no_args(call)?;
            DocOp::Drop
        }
        "aggregate" => {
            arity(
                call,
                1,
                2,
                "a pipeline (an array of stages) and optional {explain: true}",
            )?;
            let (v, at) = &call.args[0];
            if !v.is_array() {
                return Err(ParseError {
                    pos: *at,
                    msg: "aggregate() takes an array of stages".into(),
                });
            }
            let o = options(call, 1, &["explain"])?;
            DocOp::Aggregate {
                pipeline: v.clone(),
                explain: flag(&o, "explain", opt_at(1))?,
            }
        }
        "distinct" => {
            arity(call, 1, 2, "a field name and an optional filter")?;
            match &call.args[0] {
                (Json::String(s), _) => DocOp::Distinct {
                    field: s.clone(),
                    filter: object_arg(call, 1, "filter")?,
                },
                (_, at) => {
                    return Err(ParseError {
                        pos: *at,
                        msg: "distinct() takes a field name (a string) first".into(),
                    })
                }
            }
        }

        other => {
            return Err(ParseError {
                pos: call.pos,
                msg: format!(
                    "unknown collection method `{other}` (there are {})",
                    METHODS.join(", ")
                ),
            })
        }
    })
}

/// Splits the words of a line: bare words or quoted strings.
#[cfg(test)]
fn words(text: &str) -> Result<Vec<String>, ParseError> {
    let mut p = Parser::new(text);
    let mut out = Vec::new();
    loop {
        p.ws();
        if p.at_end() {
            return Ok(out);
        }
        out.push(p.word("a word")?);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn relaxed_json() {
        let mut p = Parser::new("{a: 1, 'b': \"x\", c: [1, 2.5, -3e2,], $d: {e: null},}");
        assert_eq!(
            p.value().unwrap(),
            json!({"a": 1, "b": "x", "c": [1, 2.5, -300.0], "$d": {"e": null}})
        );
        let mut p = Parser::new("ObjectId()");
        let hex = p.value().unwrap()["$oid"].as_str().unwrap().to_string();
        assert_eq!(hex.len(), 24);
        assert_ne!(
            Parser::new("ObjectId()").value().unwrap()["$oid"],
            hex.as_str()
        );
        let mut p = Parser::new("ObjectId('65a1b2c3d4e5f60718293a4b')");
        assert_eq!(
            p.value().unwrap(),
            json!({"$oid": "65a1b2c3d4e5f60718293a4b"})
        );
    }

    #[test]
    fn find_chain() {
        let s =
            parse("db.orders.find({status: 'paid'}).sort({total: -1}).limit(5).skip(1)").unwrap();
        let Stmt::Docs { coll, op } = s else {
            panic!("{s:?}")
        };
        let DocOp::Find(f) = *op else {
            panic!("{op:?}")
        };
        assert_eq!(coll, "orders");
        assert_eq!(f.filter, json!({"status": "paid"}));
        assert_eq!(f.sort, Some(json!({"total": -1})));
        assert_eq!((f.limit, f.skip), (Some(5), 1));
    }

    #[test]
    fn comments() {
        assert_eq!(parse("// it's a comment").unwrap(), Stmt::Empty);
        assert!(matches!(
            parse("db.c.find({ // the filter\n  a: 1, // one\n}) // done").unwrap(),
            Stmt::Docs { .. }
        ));
        assert_eq!(
            parse("get t k // the key").unwrap(),
            Stmt::Get {
                table: "t".into(),
                key: "k".into()
            }
        );
    }

    #[test]
    fn error_columns() {
        let e = parse("db.c.find({a: })").unwrap_err();
        assert_eq!(e.pos, 14);
        let e = parse("db.c.fnd()").unwrap_err();
        assert_eq!(e.pos, 5);
        let e = parse("db.c.find().limit('x')").unwrap_err();
        assert!(e.msg.contains("whole number"), "{e:?}");
        assert!(parse("db.c.find({a: 'x)").is_err());
        assert!(parse("frob").is_err());
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_stack_overflow() {
        let deep = format!(
            "db.c.insertOne({}{})",
            "{a: ".repeat(100_000),
            "}".repeat(100_000)
        );
        let e = parse(&deep).unwrap_err();
        assert!(e.msg.contains("nest more than"), "{e:?}");
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(Parser::new(&deep).value().is_err());
        let ok = format!("{}1{}", "[".repeat(100), "]".repeat(100));
        assert!(Parser::new(&ok).value().is_ok());
    }

    #[test]
    fn completeness() {
        assert!(is_complete("// it's a comment"));
        assert!(is_complete("db.c.find({a: 1}) // it's done"));
        assert!(!is_complete("db.c.find({ // it's open"));
        assert!(is_complete("put t don't (x"));
        assert!(is_complete(".import it's.csv c"));
        assert!(!is_complete("append s T {a: 'x"));
        assert!(!is_complete("db.c.find({"));
        assert!(is_complete("db.c.find({a: '{'})"));
        assert!(!is_complete("db.c.find({a: 'x"));
    }

    #[test]
    fn words_and_kv() {
        assert_eq!(
            parse("put t 'a key' \"v\\n\"").unwrap(),
            Stmt::Put {
                table: "t".into(),
                key: "a key".into(),
                value: "v\n".into()
            }
        );
        assert_eq!(
            parse("append s-1 Created {a: 1}").unwrap(),
            Stmt::Append {
                stream: "s-1".into(),
                event_type: "Created".into(),
                data: Some(json!({"a": 1}))
            }
        );
        assert_eq!(
            words(".import 'my file.csv' c").unwrap(),
            vec![".import", "my file.csv", "c"]
        );
    }
}
