//! Query filters: a MongoDB-compatible subset, parsed from JSON into a
//! public syntax tree ([`Filter`], [`Cond`]) that the planner reads, and
//! evaluated either on encoded documents ([`Filter::matches`], which reads
//! only the fields the filter names) or on decoded values
//! ([`Filter::matches_value`]). The two evaluators agree (property-tested).
//!
//! # The filter language
//!
//! A filter is a JSON object. Each key is either a field path or one of the
//! logical operators `$and`, `$or`, `$nor`; all the keys must hold (an
//! implicit AND). `{}` matches every document.
//!
//! ```json
//! {"status": "active", "age": {"$gte": 18, "$lt": 65}, "address.city": "Lisbon"}
//! {"$or": [{"tags": "red"}, {"tags": {"$size": 0}}]}
//! ```
//!
//! ```
//! use cairndb::document::{to_vec, Filter, Value};
//! let f = Filter::parse_str(r#"{"tags": "red", "n": {"$gte": 2, "$lt": 5}}"#)?;
//! let doc = Value::from_json(serde_json::json!({"tags": ["red", "blue"], "n": 2.5}))?;
//! assert!(f.matches_value(&doc)?);
//! assert!(f.matches_bytes(&to_vec(&doc)?)?);
//! # Ok::<(), cairndb::document::DocumentError>(())
//! ```
//!
//! A field path is dotted (`address.city`); see [`path`](super::path) for
//! how paths go through arrays (`tags.name` reaches the `name` of every
//! object in `tags`; a decimal segment such as `tags.0` also selects an
//! element by position). The value at a field is either a literal, meaning
//! equality (`{"a": 5}` is `{"a": {"$eq": 5}}`, `{"a": {"x": 1}}` is
//! equality with that embedded object), or an object of operators, all of
//! which must hold. An object mixing operators and plain names is an error.
//!
//! | operator | operand | matches when |
//! |---|---|---|
//! | `$eq` | any value | the field equals it (see *Equality* below) |
//! | `$ne` | any value | not `$eq` (also when the field is missing) |
//! | `$gt` `$gte` `$lt` `$lte` | any value | the field compares so, within the operand's type bracket |
//! | `$in` | array | the field equals one of the values |
//! | `$nin` | array | not `$in` (also when the field is missing) |
//! | `$exists` | bool (or a number: 0 is false) | the path reaches a value (or does not) |
//! | `$size` | non-negative integer | the field is an array of that length |
//! | `$elemMatch` | object | the field is an array with one element matching all of it (below) |
//! | `$not` | object of operators | the operators do not all match (also when the field is missing) |
//! | `$prefix` | string | the field is a string starting with it (a CairnDB extension) |
//! | `$regex` | string (with `$options`: a subset of `imsx`) | the field is a string the regular expression matches (below) |
//! | `$all` | array | every value matches as `$eq` (an element may be `{"$elemMatch": …}`); `[]` matches nothing |
//! | `$type` | type name or number, or an array of them | the field (or an element) has one of the types (below) |
//! | `$mod` | `[divisor, remainder]` | the field is a number whose truncated integer value leaves that remainder |
//! | `$allOf` | array of operator objects | all of them match (a CairnDB extension used to print filters) |
//! | `$and` `$or` `$nor` | non-empty array of filters | all / any / none of them match (top level or inside an element filter) |
//! | `$expr` | an aggregation expression ([`aggregate`](super::aggregate)) | the expression is true on the document (top level) |
//! | `$text` | `{"$search": "...", "$language", "$caseSensitive", "$diacriticSensitive"}` | the document's text-indexed fields match the search ([`text`](super::text); top level or in a top-level `$and`, at most one, not inside `$or`, `$nor`, `$elemMatch`) |
//!
//! Values are written in the document layer's JSON forms
//! ([`value`](super::value)): `{"$oid": "<24 hex>"}` for an id,
//! `{"$binary": "<base64>"}` for bytes, `{"$float": "NaN"}` for non-finite
//! floats, `{"$date": "2024-01-02T03:04:05.678Z"}` (or
//! `{"$date": {"$numberLong": "<ms>"}}`) for a date, `{"$uuid": "<hex>"}`
//! for a UUID (MongoDB Extended JSON v2). Any other unknown `$` name is [`DocumentError::UnknownOperator`];
//! an operand of the wrong type is [`DocumentError::InvalidOperand`]; a
//! malformed structure is [`DocumentError::InvalidQuery`]; a bad path is
//! [`DocumentError::InvalidPath`].
//!
//! ## Arrays
//! As in MongoDB, a path that ends at an array matches a condition when the
//! array itself matches **or any of its elements** does: `{"tags": "red"}`
//! matches `{"tags": ["red", "blue"]}`, and `{"tags": ["red", "blue"]}`
//! matches it too (the whole array). Only one level is expanded: `{"a": 1}`
//! does not match `{"a": [[1]]}`. `$size` and `$elemMatch` look at the
//! array itself only. Several conditions on one path are independent:
//! `{"a": {"$gt": 1, "$lt": 5}}` matches `{"a": [0, 10]}` (10 > 1 and
//! 0 < 5); use `$elemMatch` to require one element to satisfy both.
//! (For the planner: bounds of two conditions on one path may be
//! intersected only where no document holds an array there.)
//!
//! ## Equality and comparison
//! Values compare in the order of [`keys::compare`], MongoDB's
//! "Comparison/Sort Order": integers and floats numerically (`2 == 2.0`,
//! `-0.0 == 0.0`), strings bytewise, binary by length then bytewise,
//! embedded objects pair by pair **in order** (the values' type brackets,
//! then the names, then the values). A range operator only matches values
//! of the operand's type bracket (null, numbers, strings, objects, arrays,
//! binary and UUIDs, ids, booleans, dates): `{"a": {"$gt": 5}}` never
//! matches a string or a date, `{"a": 5}` never matches a date, and
//! `{"a": {"$gt": false}}` matches only `true`. NaN equals NaN and is
//! matched by `$eq`, `$gte`, `$lte` and `$in` with a NaN operand, but no
//! range comparison with a number matches it (so `$lt: 5` does not match
//! NaN, as in MongoDB).
//!
//! ## Null and missing fields
//! As in MongoDB (manual, "Query for Null or Missing Fields"),
//! `{"a.b": null}` (and `$gte: null`, `$lte: null`, `$in: [null, …]`)
//! matches a document where a value the path reaches is null, is an array
//! holding null, **or where the path dies in an object or at a scalar**
//! (the field is missing): `{}`, `{"a": 5}`, `{"a": {"c": 1}}`, and
//! `{"a": [{"b": 1}, {}]}` (one element lacks `b`). Elements of an array on
//! the way that are not objects reach nothing, so `{"a": [1, 2]}` and
//! `{"a": []}` do not match. `$ne`, `$nin` and `$not` are the exact
//! negations of their positive forms: they match missing fields, and
//! `{"a.b": {"$ne": null}}` means "every place the path reaches has a
//! non-null `b`", so `{"a": [{"b": 1}, {}]}` does not match it; `$ne: v`
//! over an array matches only when no element (nor the array) equals `v`.
//! `{"$exists": true}` matches when the path reaches a value, null
//! included, and `$exists: false` is its negation.
//!
//! ## `$elemMatch`
//! With an object of operators (`{"scores": {"$elemMatch": {"$gte": 80,
//! "$lt": 85}}}`), one element must satisfy all of them; the element is
//! tested as it is (an element that is itself an array is not expanded).
//! With a filter (`{"items": {"$elemMatch": {"sku": "x", "qty": {"$gt":
//! 2}}}}`), one element that is an object must match the whole filter;
//! other elements are skipped. The form is chosen by the operand's keys: a
//! `$` name other than `$and`/`$or`/`$nor` selects the operator form.
//!
//! ## Prefix matching and regular expressions
//! `{"name": {"$prefix": "Ad"}}` matches strings starting with `Ad`
//! (bytewise, case-sensitive); an index on the path can answer it with a
//! range scan. `{"$regex": "^Ad"}` without options is the same condition
//! when the pattern is `^` followed by literal characters (a
//! metacharacter escaped with a backslash). Any other `$regex` is a
//! [`RegexCond`]: the `regex` crate's syntax (no look-around or
//! back-references, unlike MongoDB's PCRE), unanchored, matched against
//! string values and string elements of arrays, with the options `i`, `m`,
//! `s`, `x`. Anchored case-sensitive patterns without `|` (`^abc\d+`) let
//! the planner scan the range of their literal prefix (`abc`) and check
//! the expression on the documents found.
//!
//! ## `$type`
//! Names and numbers are MongoDB's: `double` (1), `string` (2), `object`
//! (3), `array` (4), `binData` (5), `objectId` (7), `bool` (8), `null`
//! (10), `int` (16) and `long` (18) — both for the engine's one 64-bit
//! integer type — and the alias `number`. MongoDB's other types (`date`,
//! `decimal`, ...) are accepted and match nothing. As for every positive
//! condition, an array matches when it or one of its elements has the
//! type; a missing field matches nothing.
//!
//! ## `$expr`
//! `{"$expr": {"$gt": ["$spent", "$budget"]}}` evaluates an aggregation
//! expression on the document. An expression that fails on a document
//! (`$add` of a string) makes [`Filter::matches`] (and so `find`) return
//! [`DocumentError::InvalidQuery`], and so does [`Filter::matches_value`].
//! As in MongoDB, `$expr` applies to the top-level document only: inside
//! `$elemMatch` it is refused. The planner uses no index for it.
//!
//! ## Answering conditions from an index (for the planner)
//! For `$eq`, `$gt`, `$gte`, `$lt`, `$lte`, `$in` and `$prefix` whose
//! operand holds no array and no null, a document matches exactly when one
//! of its index keys for the path ([`LookupMode::Index`](super::path::LookupMode)) satisfies the
//! condition as a single value; this is property-tested. (Null operands
//! also match missing fields in arrays of objects, which keys do not
//! record; a range operand longer than an index key holds whole,
//! [`keys::is_long`], has no bounds, and equality with one is looked up by
//! its cut key and re-checked.) Equality with an array operand matches whole arrays,
//! which index keys (elements) do not hold: scan for its elements (or all)
//! and filter. Negations (`$ne`, `$nin`, `$not`, `$nor`), `$exists`,
//! `$size` and `$elemMatch` need the filter on the fetched documents.
//!
//! ## JSON input and field order
//! [`Filter::parse_str`] keeps the field order of the text, which matters for
//! equality with embedded objects. [`Filter::parse`] takes a
//! `serde_json::Value`, whose objects (without serde_json's
//! `preserve_order` feature) arrive sorted by key.

use std::cmp::Ordering;
use std::fmt;

use super::aggregate::expr::{truthy, Expr};
use super::codec::ValueRef;
use super::error::{DocResult, DocumentError};
use super::keys;
use super::path::FieldPath;
use super::text::{TextFilter, TextSearch};
use super::update;
use super::value::{parse_index, Document, Value, ValueKind};

/// A parsed filter (see the module docs for the language).
///
/// [`Filter::parse`] never produces an `And`, `Or` or `Nor` with no
/// members, nor a `Field` whose condition is a [`Cond::All`]: several
/// operators on one field become separate `Field`s inside an `And`.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// Matches every document (`{}`).
    True,
    /// All of the filters match.
    And(Vec<Filter>),
    /// At least one of the filters matches.
    Or(Vec<Filter>),
    /// None of the filters matches.
    Nor(Vec<Filter>),
    /// A condition on the values a path reaches.
    Field {
        /// The field path.
        path: FieldPath,
        /// What the values there must satisfy.
        cond: Cond,
    },
    /// `$expr`: an aggregation expression, true for the document.
    Expr(ExprFilter),
    /// `$text`: a search of the collection's text index
    /// ([`text`](super::text)).
    Text(TextFilter),
}

/// The operand of `$expr`: an aggregation expression
/// ([`aggregate`](super::aggregate)) evaluated on the whole document; the
/// document matches when the result is true (not false, null, missing or
/// zero).
#[derive(Debug, Clone)]
pub struct ExprFilter {
    source: Value,
    expr: Expr,
}

impl PartialEq for ExprFilter {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl ExprFilter {
    fn parse(v: Value) -> DocResult<ExprFilter> {
        let expr =
            Expr::parse(&v).map_err(|e| invalid(format!("$expr: {}: {}", e.operator, e.reason)))?;
        Ok(ExprFilter { source: v, expr })
    }

    /// The expression as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Evaluates on a decoded document: an expression that fails (`$add`
    /// of a string, ...) is [`DocumentError::InvalidQuery`].
    pub fn matches_value(&self, doc: &Value) -> DocResult<bool> {
        self.expr
            .eval(doc)
            .map(|v| truthy(v.as_ref()))
            .map_err(|e| invalid(format!("$expr: {}: {}", e.operator, e.reason)))
    }
}

/// The operand of `$regex` (with `$options`): a regular expression of the
/// `regex` crate's syntax (no look-around or back-references, unlike
/// MongoDB's PCRE), matched against string values (unanchored: `^`
/// anchors). Options: `i` (case-insensitive), `m` (`^`/`$` at line
/// ends), `s` (`.` matches a newline), `x` (whitespace and `#` comments
/// ignored).
#[derive(Debug, Clone)]
pub struct RegexCond {
    pattern: String,
    options: String,
    re: regex::Regex,
    prefix: Option<String>,
}

impl PartialEq for RegexCond {
    fn eq(&self, other: &Self) -> bool {
        self.pattern == other.pattern && self.options == other.options
    }
}

/// The largest compiled regular expression (bytes of the `regex` crate's
/// program): a bound on what one filter can make the engine allocate.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

impl RegexCond {
    /// Compiles `pattern` with `options` (a subset of `imsx`).
    pub fn new(pattern: &str, options: &str) -> DocResult<RegexCond> {
        let mut b = regex::RegexBuilder::new(pattern);
        for c in options.chars() {
            match c {
                'i' => b.case_insensitive(true),
                'm' => b.multi_line(true),
                's' => b.dot_matches_new_line(true),
                'x' => b.ignore_whitespace(true),
                other => {
                    return Err(invalid(format!(
                    "regular expression option {other:?} is not supported (options are i, m, s, x)"
                )))
                }
            };
        }
        b.size_limit(REGEX_SIZE_LIMIT);
        let re = b.build().map_err(|e| {
            invalid(format!(
                "regular expression {pattern:?} does not compile: {e}"
            ))
        })?;
        let prefix = if options.chars().all(|c| c == 's') {
            literal_prefix(pattern)
        } else {
            None
        };
        Ok(RegexCond {
            pattern: pattern.to_string(),
            options: options.to_string(),
            re,
            prefix,
        })
    }

    /// The pattern as written.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// The options as written.
    pub fn options(&self) -> &str {
        &self.options
    }

    /// Whether `s` matches.
    pub fn is_match(&self, s: &str) -> bool {
        self.re.is_match(s)
    }

    /// A literal prefix every match starts with (for an index range scan):
    /// from a pattern anchored with `^`, case-sensitive, without `|`.
    pub(crate) fn literal_prefix(&self) -> Option<&str> {
        self.prefix.as_deref()
    }
}

/// The literal characters after a leading `^`, up to the first
/// metacharacter (the last one dropped if a quantifier follows it).
fn literal_prefix(pattern: &str) -> Option<String> {
    let body = pattern.strip_prefix('^')?;
    if pattern.contains('|') {
        return None;
    }
    let mut out = String::new();
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        let lit = match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() || e == ' ' => e,
                _ => break,
            },
            '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' | '^' | '$' => break,
            c => c,
        };
        if matches!(chars.peek(), Some('*' | '?' | '{' | '+')) {
            break;
        }
        out.push(lit);
    }
    (!out.is_empty()).then_some(out)
}

/// The canonical `$type` names (MongoDB's aliases) and numbers. The
/// engine's types: `double` (Float), `string`, `object`, `array`,
/// `binData` (Binary and Uuid), `objectId` (Id), `bool`, `date` (Date),
/// `null`, and both `int` and `long` for its one 64-bit integer type;
/// `number` is any number (not a date).
/// The other MongoDB types are accepted and match nothing.
const TYPE_NAMES: &[(&str, i64)] = &[
    ("double", 1),
    ("string", 2),
    ("object", 3),
    ("array", 4),
    ("binData", 5),
    ("undefined", 6),
    ("objectId", 7),
    ("bool", 8),
    ("date", 9),
    ("null", 10),
    ("regex", 11),
    ("dbPointer", 12),
    ("javascript", 13),
    ("symbol", 14),
    ("javascriptWithScope", 15),
    ("int", 16),
    ("timestamp", 17),
    ("long", 18),
    ("decimal", 19),
    ("minKey", -1),
    ("maxKey", 127),
];

fn type_name_of(v: &Value) -> DocResult<String> {
    let bad = || operand_err("$type", "a type name or number, or an array of them", v);
    match v {
        Value::String(s) if s == "number" => Ok(s.clone()),
        Value::String(s) => TYPE_NAMES
            .iter()
            .find(|(n, _)| n == s)
            .map(|(n, _)| n.to_string())
            .ok_or_else(|| invalid(format!("$type: unknown type name {s:?}"))),
        Value::Int(_) | Value::Float(_) => {
            let code = match v {
                Value::Int(i) => *i,
                Value::Float(f) if f.fract() == 0.0 && f.abs() < 1e6 => *f as i64,
                _ => return Err(bad()),
            };
            TYPE_NAMES
                .iter()
                .find(|(_, c)| *c == code)
                .map(|(n, _)| n.to_string())
                .ok_or_else(|| invalid(format!("$type: unknown type number {code}")))
        }
        _ => Err(bad()),
    }
}

/// Whether a value is of the `$type` name `t`.
fn type_matches(t: &str, v: &Value) -> bool {
    matches!(
        (t, v),
        ("double" | "number", Value::Float(_))
            | ("int" | "long" | "number", Value::Int(_))
            | ("string", Value::String(_))
            | ("object", Value::Object(_))
            | ("array", Value::Array(_))
            | ("binData", Value::Binary(_) | Value::Uuid(_))
            | ("date", Value::Date(_))
            | ("objectId", Value::Id(_))
            | ("bool", Value::Bool(_))
            | ("null", Value::Null)
    )
}

/// `$mod`: the number truncated to an integer, then `% divisor == rem`.
fn mod_matches(d: i64, r: i64, v: &Value) -> bool {
    let n = match v {
        Value::Int(i) => *i,
        Value::Float(f) if f.is_finite() && f.abs() < 9.2e18 => f.trunc() as i64,
        _ => return false,
    };
    n.checked_rem(d).unwrap_or(0) == r
}

/// A condition on one field (see the module docs for each operator's
/// semantics, including arrays and missing fields).
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    /// `$eq` (and implicit equality).
    Eq(Value),
    /// `$ne`: not `Eq`.
    Ne(Value),
    /// `$gt`.
    Gt(Value),
    /// `$gte`.
    Gte(Value),
    /// `$lt`.
    Lt(Value),
    /// `$lte`.
    Lte(Value),
    /// `$in`: equal to one of the values.
    In(Vec<Value>),
    /// `$nin`: not `In`.
    Nin(Vec<Value>),
    /// `$in` holding regular expressions (MongoDB manual, "$in": "Use the
    /// $in Operator with a Regular Expression"): equal to one of the
    /// values, or a string one of the expressions matches. An `$in`
    /// without expressions is `In`.
    InRegex(Vec<Value>, Vec<RegexCond>),
    /// `$nin` holding regular expressions: not `InRegex`.
    NinRegex(Vec<Value>, Vec<RegexCond>),
    /// `$exists`.
    Exists(bool),
    /// `$size`: an array of this length.
    Size(u64),
    /// `$elemMatch`.
    ElemMatch(ElemMatch),
    /// `$prefix` (and `$regex: "^literal"`): a string starting with this.
    Prefix(String),
    /// `$not`: the inner condition does not match.
    Not(Box<Cond>),
    /// Every condition matches (several operators under `$not` or in an
    /// element condition; `$allOf`; `$all`, one equality or `$elemMatch`
    /// per value).
    All(Vec<Cond>),
    /// `$type`: a value of one of these types (canonical names).
    Type(Vec<String>),
    /// `$mod`: `[divisor, remainder]` of a number truncated to an integer.
    Mod(i64, i64),
    /// `$regex` (with `$options`): a string the expression matches.
    Regex(RegexCond),
}

/// The operand of `$elemMatch` (and of `$pull`): what one array element
/// must satisfy.
#[derive(Debug, Clone, PartialEq)]
pub enum ElemMatch {
    /// An element that is an object and matches this filter.
    Document(Box<Filter>),
    /// An element that satisfies this condition, tested on the element
    /// itself (an array element is not expanded).
    Element(Box<Cond>),
}

/// The comparison of a range operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

// ---------------------------------------------------------------------------
// Parsing

/// Reads JSON text into a [`Value`], keeping object field order. Syntax
/// errors are [`DocumentError::MalformedJson`]; a bad `$oid` / `$binary` /
/// `$float` form or a repeated key is [`DocumentError::InvalidJson`].
pub(crate) fn value_from_text(text: &str) -> DocResult<Value> {
    serde_json::from_str::<Value>(text).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => DocumentError::InvalidJson {
            reason: e.to_string(),
        },
        _ => DocumentError::MalformedJson {
            reason: e.to_string(),
        },
    })
}

fn invalid(reason: impl Into<String>) -> DocumentError {
    DocumentError::InvalidQuery {
        reason: reason.into(),
    }
}

fn operand_err(operator: &str, expected: &'static str, found: &Value) -> DocumentError {
    DocumentError::InvalidOperand {
        operator: operator.to_string(),
        expected,
        found: found.kind().name().to_string(),
    }
}

/// Whether an object's keys make it an operator object in a field position
/// (any key starting with `$`); an object mixing both is an error.
fn is_operator_object(doc: &Document, what: &str) -> DocResult<bool> {
    let ops = doc.keys().filter(|k| k.starts_with('$')).count();
    if ops > 0 && ops < doc.len() {
        return Err(invalid(format!(
            "{what} mixes operators and field names (an embedded object cannot have $ names)"
        )));
    }
    Ok(ops > 0)
}

impl Filter {
    /// Parses a filter from a JSON value (see the module docs). Objects of a
    /// `serde_json::Value` arrive with sorted keys; use
    /// [`parse_str`](Self::parse_str) where the field order of embedded
    /// objects matters.
    pub fn parse(json: serde_json::Value) -> DocResult<Filter> {
        Filter::from_value(Value::from_json(json)?)
    }

    /// Parses a filter from JSON text, keeping field order.
    pub fn parse_str(text: &str) -> DocResult<Filter> {
        Filter::from_value(value_from_text(text)?)
    }

    /// Parses a filter already read into a [`Value`] (an object).
    pub fn from_value(value: Value) -> DocResult<Filter> {
        let f = Filter::parse_at(value, true)?;
        if f.text_count() > 1 {
            // MongoDB: "Too many text expressions".
            return Err(invalid("a filter may hold at most one $text"));
        }
        Ok(f)
    }

    /// How many `$text` conditions the filter holds.
    fn text_count(&self) -> usize {
        match self {
            Filter::Text(_) => 1,
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) => {
                fs.iter().map(Filter::text_count).sum()
            }
            _ => 0,
        }
    }

    /// Whether the filter holds an `$expr` condition outside `$elemMatch`.
    fn has_expr(&self) -> bool {
        match self {
            Filter::Expr(_) => true,
            Filter::And(fs) | Filter::Or(fs) | Filter::Nor(fs) => fs.iter().any(Filter::has_expr),
            _ => false,
        }
    }

    /// Whether the filter holds a `$text` condition.
    pub fn has_text(&self) -> bool {
        self.text_count() > 0
    }

    /// Parses a filter; `text_ok`: `$text` may appear here (the top level
    /// and top-level `$and`s, as in MongoDB).
    fn parse_at(value: Value, text_ok: bool) -> DocResult<Filter> {
        let Value::Object(doc) = value else {
            return Err(invalid(format!(
                "a filter must be an object, found {}",
                value.kind().name()
            )));
        };
        let mut parts = Vec::with_capacity(doc.len());
        for (key, v) in doc {
            if key.starts_with('$') {
                let list = |v: Value, text_ok: bool| parse_list(&key, v, text_ok);
                parts.push(match key.as_str() {
                    "$and" => Filter::And(list(v, text_ok)?),
                    "$or" => Filter::Or(list(v, false)?),
                    "$nor" => Filter::Nor(list(v, false)?),
                    "$expr" => Filter::Expr(ExprFilter::parse(v)?),
                    "$text" if text_ok => Filter::Text(TextFilter::new(TextSearch::parse(v)?)),
                    "$text" => {
                        // MongoDB refuses `$text` under `$or`/`$nor` without
                        // a text index on every branch, and always under
                        // `$elemMatch` and `$not`.
                        return Err(invalid(
                            "$text is allowed only at the top level of a filter or in a top-level $and \
                             (not inside $or, $nor or $elemMatch)",
                        ));
                    }
                    _ => {
                        return Err(DocumentError::UnknownOperator {
                            operator: key,
                            context: "filter (top-level operators are $and, $or, $nor, $expr, $text)",
                        })
                    }
                });
            } else {
                let path = FieldPath::parse(&key)?;
                match v {
                    Value::Object(ops) if is_operator_object(&ops, &key)? => {
                        for cond in parse_ops(ops)? {
                            parts.push(Filter::Field {
                                path: path.clone(),
                                cond,
                            });
                        }
                    }
                    v => parts.push(Filter::Field {
                        path,
                        cond: Cond::Eq(v),
                    }),
                }
            }
        }
        Ok(match parts.len() {
            0 => Filter::True,
            1 => parts.pop().unwrap_or(Filter::True),
            _ => Filter::And(parts),
        })
    }
}

fn parse_list(op: &str, v: Value, text_ok: bool) -> DocResult<Vec<Filter>> {
    let Value::Array(items) = v else {
        return Err(operand_err(op, "a non-empty array of filters", &v));
    };
    if items.is_empty() {
        return Err(invalid(format!("{op} needs at least one filter")));
    }
    items
        .into_iter()
        .map(|v| Filter::parse_at(v, text_ok))
        .collect()
}

/// The conditions of an operator object (at least one), in key order.
fn parse_ops(ops: Document) -> DocResult<Vec<Cond>> {
    let mut out = Vec::with_capacity(ops.len());
    let options = match ops.get("$options") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => return Err(operand_err("$options", "a string", other)),
    };
    if options.is_some() && !ops.contains_key("$regex") {
        return Err(invalid("$options without $regex"));
    }
    for (name, operand) in ops {
        if name == "$options" {
            continue;
        }
        if name == "$regex" {
            out.push(parse_regex(operand, options.as_deref().unwrap_or(""))?);
            continue;
        }
        out.push(parse_op(&name, operand)?);
    }
    if out.is_empty() {
        return Err(invalid("an operator object needs at least one operator"));
    }
    Ok(out)
}

/// `$regex` with its options: a literal anchored prefix without options is
/// the same condition as `$prefix` (so an index can answer it); anything
/// else is a compiled [`RegexCond`].
fn parse_regex(operand: Value, options: &str) -> DocResult<Cond> {
    let Value::String(s) = operand else {
        return Err(operand_err("$regex", "a string", &operand));
    };
    if options.is_empty() {
        if let Ok(p) = regex_prefix(&s) {
            return Ok(Cond::Prefix(p));
        }
    }
    Ok(Cond::Regex(RegexCond::new(&s, options)?))
}

/// The values of an `$in` or `$nin` array, and its regular expressions:
/// an element `{"$regex": pattern}` (with `"$options"`), or Extended
/// JSON's `{"$regularExpression": {"pattern": …, "options": …}}`, as
/// MongoDB's `/pattern/options` literals there. No stored document can
/// equal such an object (field names starting with `$` are refused), so
/// reading it as an expression changes no other match.
fn split_regexes(op: &str, items: Vec<Value>) -> DocResult<(Vec<Value>, Vec<RegexCond>)> {
    let mut vs = Vec::with_capacity(items.len());
    let mut res = Vec::new();
    for item in items {
        let Value::Object(d) = &item else {
            vs.push(item);
            continue;
        };
        let text = |v: Option<&Value>, what: &str| -> DocResult<String> {
            match v {
                None => Ok(String::new()),
                Some(Value::String(s)) => Ok(s.clone()),
                Some(other) => Err(operand_err(
                    &format!("{op}'s regular expression {what}"),
                    "a string",
                    other,
                )),
            }
        };
        let keys: Vec<&str> = d.keys().collect();
        match keys.as_slice() {
            ["$regex"] | ["$regex", "$options"] | ["$options", "$regex"] => {
                let pattern = text(d.get("$regex"), "$regex")?;
                let options = text(d.get("$options"), "$options")?;
                res.push(RegexCond::new(&pattern, &options)?);
            }
            ["$regularExpression"] => {
                let Some(Value::Object(r)) = d.get("$regularExpression") else {
                    return Err(invalid(format!(
                        "{op}: $regularExpression needs an object {{\"pattern\": …, \"options\": …}}"
                    )));
                };
                if let Some(k) = r.keys().find(|k| *k != "pattern" && *k != "options") {
                    return Err(invalid(format!(
                        "{op}: $regularExpression has an unknown field {k:?} (pattern and options only)"
                    )));
                }
                let pattern = text(r.get("pattern"), "pattern")?;
                let options = text(r.get("options"), "options")?;
                res.push(RegexCond::new(&pattern, &options)?);
            }
            ks if ks.iter().any(|k| k.starts_with('$')) => {
                return Err(invalid(format!(
                    "{op} accepts values and regular expressions ({{\"$regex\": …, \"$options\": …}}), \
                     not an object of operators ({ks:?})"
                )));
            }
            _ => vs.push(item),
        }
    }
    Ok((vs, res))
}

/// An `$in` array: the values, then each expression as `{"$regex",
/// "$options"}` (what [`split_regexes`] reads back).
fn in_array(vs: &[Value], res: &[RegexCond]) -> Value {
    let mut items = vs.to_vec();
    for re in res {
        items.push(Value::Object(
            Document::new()
                .with("$regex", Value::String(re.pattern.clone()))
                .with("$options", Value::String(re.options.clone())),
        ));
    }
    Value::Array(items)
}

/// Whether `x` equals one of `vs` or is a string one of `res` matches.
fn in_regex_value(vs: &[Value], res: &[RegexCond], x: Option<&Value>) -> bool {
    vs.iter().any(|v| eq_value(v, x))
        || matches!(x, Some(Value::String(s)) if res.iter().any(|re| re.is_match(s)))
}

/// [`in_regex_value`] on an encoded value.
fn in_regex_ref(vs: &[Value], res: &[RegexCond], x: Option<ValueRef<'_>>) -> DocResult<bool> {
    if let Some(ValueRef::String(s)) = &x {
        if res.iter().any(|re| re.is_match(s)) {
            return Ok(true);
        }
    }
    in_ref(vs, x)
}

/// The conjunction of an operator object: one condition, or `All`.
fn ops_to_cond(ops: Document) -> DocResult<Cond> {
    let mut conds = parse_ops(ops)?;
    Ok(if conds.len() == 1 {
        conds.pop().unwrap_or(Cond::All(Vec::new()))
    } else {
        Cond::All(conds)
    })
}

fn parse_op(name: &str, operand: Value) -> DocResult<Cond> {
    Ok(match name {
        "$eq" => Cond::Eq(operand),
        "$ne" => Cond::Ne(operand),
        "$gt" => Cond::Gt(operand),
        "$gte" => Cond::Gte(operand),
        "$lt" => Cond::Lt(operand),
        "$lte" => Cond::Lte(operand),
        "$in" | "$nin" => {
            let Value::Array(items) = operand else {
                return Err(operand_err(name, "an array", &operand));
            };
            let (vs, res) = split_regexes(name, items)?;
            match (name == "$in", res.is_empty()) {
                (true, true) => Cond::In(vs),
                (false, true) => Cond::Nin(vs),
                (true, false) => Cond::InRegex(vs, res),
                (false, false) => Cond::NinRegex(vs, res),
            }
        }
        "$exists" => Cond::Exists(match operand {
            Value::Bool(b) => b,
            Value::Int(i) => i != 0,
            Value::Float(f) => f != 0.0,
            other => return Err(operand_err(name, "a boolean", &other)),
        }),
        "$size" => Cond::Size(non_negative_integer(name, &operand)?),
        "$elemMatch" => Cond::ElemMatch(parse_elem_match(name, operand)?),
        "$not" => match operand {
            Value::Object(ops) if !ops.is_empty() => {
                if !is_operator_object(&ops, "$not")? {
                    return Err(invalid(
                        "$not needs an object of operators, not a value (use $ne)",
                    ));
                }
                Cond::Not(Box::new(ops_to_cond(ops)?))
            }
            other => return Err(operand_err(name, "a non-empty object of operators", &other)),
        },
        "$prefix" => match operand {
            Value::String(s) => Cond::Prefix(s),
            other => return Err(operand_err(name, "a string", &other)),
        },
        "$regex" => parse_regex(operand, "")?,
        "$all" => {
            let Value::Array(items) = operand else {
                return Err(operand_err(name, "an array", &operand));
            };
            if items.is_empty() {
                // Matches nothing, as in MongoDB.
                return Ok(Cond::In(Vec::new()));
            }
            let mut conds = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Object(d) if d.len() == 1 && d.keys().next() == Some("$elemMatch") => {
                        let em = d.into_iter().next().map(|(_, v)| v).unwrap_or(Value::Null);
                        conds.push(Cond::ElemMatch(parse_elem_match("$elemMatch", em)?));
                    }
                    v => conds.push(Cond::Eq(v)),
                }
            }
            Cond::All(conds)
        }
        "$type" => {
            let names = match &operand {
                Value::Array(items) => items
                    .iter()
                    .map(type_name_of)
                    .collect::<DocResult<Vec<_>>>()?,
                v => vec![type_name_of(v)?],
            };
            Cond::Type(names)
        }
        "$mod" => {
            let bad = || operand_err(name, "an array [divisor, remainder] of numbers", &operand);
            let Value::Array(items) = &operand else {
                return Err(bad());
            };
            let int = |v: &Value| match v {
                Value::Int(i) => Some(*i),
                Value::Float(f) if f.is_finite() && f.abs() < 9.2e18 => Some(f.trunc() as i64),
                _ => None,
            };
            let (Some(d), Some(r), 2) = (
                items.first().and_then(int),
                items.get(1).and_then(int),
                items.len(),
            ) else {
                return Err(bad());
            };
            if d == 0 {
                return Err(invalid("$mod: the divisor must not be 0"));
            }
            Cond::Mod(d, r)
        }
        "$allOf" => {
            let Value::Array(items) = operand else {
                return Err(operand_err(name, "an array of operator objects", &operand));
            };
            let mut conds = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::Object(ops) if is_operator_object(&ops, "$allOf")? => {
                        conds.push(ops_to_cond(ops)?)
                    }
                    other => return Err(operand_err(name, "an array of operator objects", &other)),
                }
            }
            Cond::All(conds)
        }
        _ => {
            return Err(DocumentError::UnknownOperator {
                operator: name.to_string(),
                context: "field condition",
            })
        }
    })
}

fn non_negative_integer(op: &str, v: &Value) -> DocResult<u64> {
    let bad = || DocumentError::InvalidOperand {
        operator: op.to_string(),
        expected: "a non-negative integer",
        found: match v {
            Value::Int(_) | Value::Float(_) => format!("{}", v.to_json()),
            other => other.kind().name().to_string(),
        },
    };
    match *v {
        Value::Int(i) => u64::try_from(i).map_err(|_| bad()),
        Value::Float(f) if f >= 0.0 && f.fract() == 0.0 && f < 9.223_372_036_854_776e18 => {
            Ok(f as u64)
        }
        _ => Err(bad()),
    }
}

/// Parses the operand of `$elemMatch` (and `$pull`'s condition form).
pub(crate) fn parse_elem_match(op: &str, operand: Value) -> DocResult<ElemMatch> {
    let Value::Object(doc) = operand else {
        return Err(operand_err(op, "an object", &operand));
    };
    let value_form = doc
        .keys()
        .any(|k| k.starts_with('$') && !matches!(k, "$and" | "$or" | "$nor" | "$expr"));
    if value_form {
        if !is_operator_object(&doc, op)? {
            return Err(invalid(format!("{op} mixes operators and field names")));
        }
        Ok(ElemMatch::Element(Box::new(ops_to_cond(doc)?)))
    } else {
        let f = Filter::parse_at(Value::Object(doc), false)?;
        if f.has_expr() {
            // MongoDB: "$expr can only be applied to the top-level document".
            return Err(invalid(format!(
                "$expr can only be applied to the top-level document, not inside {op}"
            )));
        }
        Ok(ElemMatch::Document(Box::new(f)))
    }
}

/// The literal prefix of an anchored regular expression `^literal`.
fn regex_prefix(pattern: &str) -> DocResult<String> {
    let unsupported = |why: &str| {
        invalid(format!(
            "regular expression {pattern:?} is not supported: {why} (only \"^\" followed by literal characters; see also $prefix)"
        ))
    };
    let Some(body) = pattern.strip_prefix('^') else {
        return Err(unsupported("it is not anchored with ^"));
    };
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e) if e.is_ascii_punctuation() || e == ' ' => out.push(e),
                Some(e) => return Err(unsupported(&format!("the escape \\{e} is a class"))),
                None => return Err(unsupported("it ends with a backslash")),
            },
            '.' | '*' | '+' | '?' | '(' | ')' | '[' | ']' | '{' | '}' | '|' | '^' | '$' => {
                return Err(unsupported(&format!("it uses the metacharacter {c:?}")))
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Rendering

/// Whether an equality operand can be written bare (`{"a": v}`) and read
/// back as equality: anything but an object with a `$` name.
fn bare_ok(v: &Value) -> bool {
    match v {
        Value::Object(d) => !d.keys().any(|k| k.starts_with('$')),
        _ => true,
    }
}

fn single(key: &str, v: Value) -> Value {
    Value::Object(Document::new().with(key, v))
}

impl Filter {
    /// The filter as a [`Value`] in the language it was parsed from;
    /// [`from_value`](Self::from_value) reads it back as an equal filter
    /// (`And`/`Or`/`Nor` are written as `$and`/`$or`/`$nor` lists, a
    /// field's [`Cond::All`] as `$allOf`).
    pub fn to_value(&self) -> Value {
        match self {
            Filter::True => Value::Object(Document::new()),
            Filter::And(fs) => single("$and", fs.iter().map(Filter::to_value).collect()),
            Filter::Or(fs) => single("$or", fs.iter().map(Filter::to_value).collect()),
            Filter::Nor(fs) => single("$nor", fs.iter().map(Filter::to_value).collect()),
            Filter::Expr(e) => single("$expr", e.source.clone()),
            Filter::Text(t) => single("$text", t.search.to_value()),
            Filter::Field { path, cond } => {
                let v = match cond {
                    Cond::Eq(v) if bare_ok(v) => v.clone(),
                    Cond::All(cs) => single("$allOf", cs.iter().map(cond_object).collect()),
                    c => cond_object(c),
                };
                single(path.as_str(), v)
            }
        }
    }

    /// The filter as JSON (see [`to_value`](Self::to_value)).
    pub fn to_json(&self) -> serde_json::Value {
        self.to_value().to_json()
    }
}

impl fmt::Display for Filter {
    /// The filter as compact JSON text.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match serde_json::to_string(&self.to_value()) {
            Ok(s) => f.write_str(&s),
            Err(_) => Err(fmt::Error),
        }
    }
}

/// The operator entries of a condition: one entry, or several for an `All`
/// of distinct operators that are not themselves `All`.
fn cond_entries(c: &Cond) -> Vec<(&'static str, Value)> {
    let one = |k: &'static str, v: Value| vec![(k, v)];
    match c {
        Cond::Eq(v) => one("$eq", v.clone()),
        Cond::Ne(v) => one("$ne", v.clone()),
        Cond::Gt(v) => one("$gt", v.clone()),
        Cond::Gte(v) => one("$gte", v.clone()),
        Cond::Lt(v) => one("$lt", v.clone()),
        Cond::Lte(v) => one("$lte", v.clone()),
        Cond::In(vs) => one("$in", Value::Array(vs.clone())),
        Cond::Nin(vs) => one("$nin", Value::Array(vs.clone())),
        Cond::InRegex(vs, res) => one("$in", in_array(vs, res)),
        Cond::NinRegex(vs, res) => one("$nin", in_array(vs, res)),
        Cond::Exists(b) => one("$exists", Value::Bool(*b)),
        Cond::Size(n) => one("$size", Value::Int(i64::try_from(*n).unwrap_or(i64::MAX))),
        Cond::ElemMatch(em) => one(
            "$elemMatch",
            match em {
                ElemMatch::Document(f) => f.to_value(),
                ElemMatch::Element(c) => cond_object(c),
            },
        ),
        Cond::Prefix(p) => one("$prefix", Value::String(p.clone())),
        Cond::Type(ts) => one(
            "$type",
            Value::Array(ts.iter().map(|t| Value::String(t.clone())).collect()),
        ),
        Cond::Mod(d, r) => one("$mod", Value::Array(vec![Value::Int(*d), Value::Int(*r)])),
        Cond::Regex(re) => vec![
            ("$regex", Value::String(re.pattern.clone())),
            ("$options", Value::String(re.options.clone())),
        ],
        Cond::Not(c) => one("$not", cond_object(c)),
        Cond::All(cs) => {
            let mergeable = cs.len() >= 2 && cs.iter().all(|c| !matches!(c, Cond::All(_)));
            if mergeable {
                let entries: Vec<_> = cs.iter().flat_map(cond_entries).collect();
                let distinct = entries
                    .iter()
                    .enumerate()
                    .all(|(i, (k, _))| entries[..i].iter().all(|(p, _)| p != k));
                if distinct {
                    return entries;
                }
            }
            one("$allOf", cs.iter().map(cond_object).collect())
        }
    }
}

/// A condition as an operator object.
pub(crate) fn cond_object(c: &Cond) -> Value {
    Value::Object(cond_entries(c).into_iter().collect())
}

// ---------------------------------------------------------------------------
// Shared semantics

/// The type bracket a range operator stays within ([`keys::bracket`]).
fn bracket(k: ValueKind) -> u8 {
    keys::bracket(k)
}

fn is_nan(v: &Value) -> bool {
    matches!(v, Value::Float(f) if f.is_nan())
}

fn is_nan_ref(v: &ValueRef<'_>) -> bool {
    matches!(v, ValueRef::Float(f) if f.is_nan())
}

/// Whether `ord` (field compared with operand) satisfies `cmp`.
fn cmp_holds(cmp: Cmp, ord: Ordering) -> bool {
    match cmp {
        Cmp::Gt => ord == Ordering::Greater,
        Cmp::Gte => ord != Ordering::Less,
        Cmp::Lt => ord == Ordering::Less,
        Cmp::Lte => ord != Ordering::Greater,
    }
}

/// A range comparison on a missing field: only `$gte`/`$lte` null match.
fn cmp_missing(cmp: Cmp, operand: &Value) -> bool {
    matches!(cmp, Cmp::Gte | Cmp::Lte) && operand.is_null()
}

/// A range comparison when either side is NaN: only NaN `$gte`/`$lte` NaN.
fn cmp_nan(cmp: Cmp, field_nan: bool, operand_nan: bool) -> bool {
    field_nan && operand_nan && matches!(cmp, Cmp::Gte | Cmp::Lte)
}

/// [`keys::compare`] between a view and a value.
pub(crate) fn cmp_ref(a: ValueRef<'_>, b: &Value) -> DocResult<Ordering> {
    let a_empty = matches!(a, ValueRef::Array(ref x) if x.is_empty());
    let b_empty = matches!(b, Value::Array(y) if y.is_empty());
    Ok(match (a_empty, b_empty) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
        (false, false) => cmp_ref_inner(a, b)?,
    })
}

/// [`cmp_ref`] inside containers (an empty array is an array there).
fn cmp_ref_inner(a: ValueRef<'_>, b: &Value) -> DocResult<Ordering> {
    let (ra, rb) = (bracket(a.kind()), bracket(b.kind()));
    if ra != rb {
        return Ok(ra.cmp(&rb));
    }
    Ok(match (a, b) {
        (ValueRef::Bool(x), Value::Bool(y)) => x.cmp(y),
        (ValueRef::Int(x), _) => keys::compare(&Value::Int(x), b),
        (ValueRef::Float(x), _) => keys::compare(&Value::Float(x), b),
        (ValueRef::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (ValueRef::Binary(_) | ValueRef::Uuid(_), Value::Binary(_) | Value::Uuid(_)) => {
            // MongoDB's BinData order: length, subtype, bytes.
            let x = match &a {
                ValueRef::Uuid(u) => keys::bin_data(&u[..], true),
                ValueRef::Binary(x) => keys::bin_data(x, false),
                _ => keys::bin_data(&[], false),
            };
            let y = match b {
                Value::Uuid(u) => keys::bin_data(u, true),
                Value::Binary(y) => keys::bin_data(y, false),
                _ => keys::bin_data(&[], false),
            };
            x.cmp(&y)
        }
        (ValueRef::Id(x), Value::Id(y)) => x.cmp(y),
        (ValueRef::Date(x), Value::Date(y)) => x.cmp(y),
        (ValueRef::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let o = cmp_ref_inner(p?, q)?;
                if o != Ordering::Equal {
                    return Ok(o);
                }
            }
            x.len().cmp(&y.len())
        }
        (ValueRef::Object(x), Value::Object(y)) => {
            for (p, (kq, q)) in x.iter().zip(y.iter()) {
                let (kp, p) = p?;
                let o = bracket(p.kind())
                    .cmp(&bracket(q.kind()))
                    .then_with(|| kp.as_bytes().cmp(kq.as_bytes()));
                if o != Ordering::Equal {
                    return Ok(o);
                }
                let o = cmp_ref_inner(p, q)?;
                if o != Ordering::Equal {
                    return Ok(o);
                }
            }
            x.len().cmp(&y.len())
        }
        _ => Ordering::Equal,
    })
}

// ---------------------------------------------------------------------------
// Evaluation on decoded values (the reference)

/// The values `path` reaches, without expanding an array at the end.
fn leaves_value<'v>(v: &'v Value, path: &[String], out: &mut Vec<&'v Value>) {
    let Some((seg, rest)) = path.split_first() else {
        out.push(v);
        return;
    };
    match v {
        Value::Object(d) => {
            if let Some(f) = d.get(seg) {
                leaves_value(f, rest, out);
            }
        }
        Value::Array(a) => {
            if let Some(e) = parse_index(seg).and_then(|i| a.get(i)) {
                leaves_value(e, rest, out);
            }
            for e in a {
                if let Value::Object(_) = e {
                    leaves_value(e, path, out);
                }
            }
        }
        _ => {}
    }
}

fn eq_value(operand: &Value, x: Option<&Value>) -> bool {
    match x {
        None => operand.is_null(),
        Some(x) => keys::compare(x, operand) == Ordering::Equal,
    }
}

fn cmp_value(cmp: Cmp, operand: &Value, x: Option<&Value>) -> bool {
    let Some(x) = x else {
        return cmp_missing(cmp, operand);
    };
    if bracket(x.kind()) != bracket(operand.kind()) {
        return false;
    }
    if is_nan(x) || is_nan(operand) {
        return cmp_nan(cmp, is_nan(x), is_nan(operand));
    }
    cmp_holds(cmp, keys::compare(x, operand))
}

/// A condition on one value (or on nothing), without array expansion.
fn single_value(cond: &Cond, x: Option<&Value>) -> bool {
    match cond {
        Cond::Eq(v) => eq_value(v, x),
        Cond::Ne(v) => !eq_value(v, x),
        Cond::Gt(v) => cmp_value(Cmp::Gt, v, x),
        Cond::Gte(v) => cmp_value(Cmp::Gte, v, x),
        Cond::Lt(v) => cmp_value(Cmp::Lt, v, x),
        Cond::Lte(v) => cmp_value(Cmp::Lte, v, x),
        Cond::In(vs) => vs.iter().any(|v| eq_value(v, x)),
        Cond::Nin(vs) => !vs.iter().any(|v| eq_value(v, x)),
        Cond::InRegex(vs, res) => in_regex_value(vs, res, x),
        Cond::NinRegex(vs, res) => !in_regex_value(vs, res, x),
        Cond::Exists(b) => x.is_some() == *b,
        Cond::Size(n) => matches!(x, Some(Value::Array(a)) if a.len() as u64 == *n),
        Cond::ElemMatch(em) => match x {
            Some(Value::Array(a)) => a.iter().any(|e| elem_matches_value(em, e)),
            _ => false,
        },
        Cond::Prefix(p) => matches!(x, Some(Value::String(s)) if s.starts_with(p.as_str())),
        Cond::Type(ts) => x.is_some_and(|v| ts.iter().any(|t| type_matches(t, v))),
        Cond::Mod(d, r) => x.is_some_and(|v| mod_matches(*d, *r, v)),
        Cond::Regex(re) => matches!(x, Some(Value::String(s)) if re.is_match(s)),
        Cond::Not(c) => !single_value(c, x),
        Cond::All(cs) => cs.iter().all(|c| single_value(c, x)),
    }
}

/// Whether one array element satisfies an `$elemMatch` / `$pull` operand.
pub(crate) fn elem_matches_value(em: &ElemMatch, e: &Value) -> bool {
    match em {
        // Cannot fail: `parse_elem_match` refuses `$expr` and `$text`,
        // the only conditions that can.
        ElemMatch::Document(f) => {
            matches!(e, Value::Object(_)) && f.matches_value(e).unwrap_or(false)
        }
        ElemMatch::Element(c) => single_value(c, Some(e)),
    }
}

/// The values `path` reaches from `v` for a positive condition: the value
/// at the end, and the elements of an array there; `None` for each place
/// where the path dies in an object or at a scalar (a missing field, which
/// a null operand matches). Elements of arrays on the way that are not
/// objects reach nothing, and with a positional segment (`a.0.b`) neither
/// do object elements lacking a field of that name. This is MongoDB's
/// rule (manual, "Query for Null or Missing Fields"): `{"a.b": null}`
/// matches `{a: [{b: 1}, {}]}` and `{a: 5}` but not `{a: [1, 2]}` or
/// `{a: []}`.
fn reach_value<'v>(v: &'v Value, path: &[String], out: &mut Vec<Option<&'v Value>>) {
    let Some((seg, rest)) = path.split_first() else {
        out.push(Some(v));
        if let Value::Array(a) = v {
            out.extend(a.iter().map(Some));
        }
        return;
    };
    match v {
        Value::Object(d) => match d.get(seg) {
            Some(f) => reach_value(f, rest, out),
            None => out.push(None),
        },
        Value::Array(a) => {
            let index = parse_index(seg);
            if let Some(e) = index.and_then(|i| a.get(i)) {
                reach_value(e, rest, out);
            }
            for e in a {
                if let Value::Object(d) = e {
                    if index.is_some() && d.get(seg).is_none() {
                        continue;
                    }
                    reach_value(e, path, out);
                }
            }
        }
        _ => out.push(None),
    }
}

/// A condition on a field: positive operators hold when they hold for one
/// of the values [`reach_value`] reports (`None`: missing). The walk
/// starts at `start` (`None`: nothing there) with the segments `rest`.
fn field_value(cond: &Cond, start: Option<&Value>, rest: &[String]) -> bool {
    let reached = || {
        let mut out = Vec::new();
        match start {
            Some(v) => reach_value(v, rest, &mut out),
            None => out.push(None),
        }
        out
    };
    let positive = |pred: &dyn Fn(Option<&Value>) -> bool| reached().into_iter().any(pred);
    match cond {
        Cond::Ne(v) => !positive(&|x| eq_value(v, x)),
        Cond::Nin(vs) => !positive(&|x| vs.iter().any(|v| eq_value(v, x))),
        Cond::NinRegex(vs, res) => !positive(&|x| in_regex_value(vs, res, x)),
        Cond::Not(c) => !field_value(c, start, rest),
        Cond::All(cs) => cs.iter().all(|c| field_value(c, start, rest)),
        Cond::Exists(b) => reached().iter().any(Option::is_some) == *b,
        Cond::Size(_) | Cond::ElemMatch(_) => {
            let mut leaves = Vec::new();
            if let Some(v) = start {
                leaves_value(v, rest, &mut leaves);
            }
            leaves.into_iter().any(|l| single_value(cond, Some(l)))
        }
        Cond::Eq(_)
        | Cond::Gt(_)
        | Cond::Gte(_)
        | Cond::Lt(_)
        | Cond::Lte(_)
        | Cond::In(_)
        | Cond::InRegex(..)
        | Cond::Prefix(_)
        | Cond::Type(_)
        | Cond::Mod(..)
        | Cond::Regex(_) => positive(&|x| single_value(cond, x)),
    }
}

impl Filter {
    /// Evaluates the filter on a decoded document. This is the reference
    /// semantics; [`matches`](Self::matches) gives the same answers on the
    /// encoded bytes, errors included: an `$expr` that fails on the
    /// document, and a `$text` condition, which only a query on a
    /// collection with a text index can answer (MongoDB: "text index
    /// required"), are [`DocumentError::InvalidQuery`].
    pub fn matches_value(&self, doc: &Value) -> DocResult<bool> {
        Ok(match self {
            Filter::True => true,
            Filter::And(fs) => {
                for f in fs {
                    if !f.matches_value(doc)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Or(fs) => {
                for f in fs {
                    if f.matches_value(doc)? {
                        return Ok(true);
                    }
                }
                false
            }
            Filter::Nor(fs) => {
                for f in fs {
                    if f.matches_value(doc)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Field { path, cond } => field_value(cond, Some(doc), path.segments()),
            Filter::Expr(e) => e.matches_value(doc)?,
            Filter::Text(t) => t.matches(super::codec::value_ref(&super::codec::to_vec(doc)?)?)?,
        })
    }

    /// [`matches_value`](Self::matches_value) on a [`Document`] (no copy
    /// of it, except for `$expr`, which evaluates on a value).
    pub fn matches_document(&self, doc: &Document) -> DocResult<bool> {
        Ok(match self {
            Filter::True => true,
            Filter::And(fs) => {
                for f in fs {
                    if !f.matches_document(doc)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Or(fs) => {
                for f in fs {
                    if f.matches_document(doc)? {
                        return Ok(true);
                    }
                }
                false
            }
            Filter::Nor(fs) => {
                for f in fs {
                    if f.matches_document(doc)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Field { path, cond } => match path.segments().split_first() {
                Some((first, rest)) => field_value(cond, doc.get(first), rest),
                None => false,
            },
            Filter::Expr(e) => e.matches_value(&Value::Object(doc.clone()))?,
            Filter::Text(t) => t.matches(super::codec::value_ref(&super::codec::to_vec(doc)?)?)?,
        })
    }
}

// ---------------------------------------------------------------------------
// Evaluation on encoded documents

/// Calls `f` on each value `path` reaches (without expanding an array at
/// the end) until it returns `true`; the same walk as
/// [`path::lookup_each`](super::path::lookup_each).
fn any_leaf<'a>(
    v: ValueRef<'a>,
    path: &[String],
    f: &mut dyn FnMut(ValueRef<'a>) -> DocResult<bool>,
) -> DocResult<bool> {
    let Some((seg, rest)) = path.split_first() else {
        return f(v);
    };
    match v {
        ValueRef::Object(o) => {
            if let Some(x) = o.get(seg)? {
                return any_leaf(x, rest, f);
            }
        }
        ValueRef::Array(a) => {
            if let Some(i) = parse_index(seg) {
                if let Some(x) = a.get(i)? {
                    if any_leaf(x, rest, f)? {
                        return Ok(true);
                    }
                }
            }
            for e in a.iter() {
                let e = e?;
                if let ValueRef::Object(_) = e {
                    if any_leaf(e, path, f)? {
                        return Ok(true);
                    }
                }
            }
        }
        _ => {}
    }
    Ok(false)
}

fn eq_ref(operand: &Value, x: Option<ValueRef<'_>>) -> DocResult<bool> {
    match x {
        None => Ok(operand.is_null()),
        Some(x) => Ok(cmp_ref(x, operand)? == Ordering::Equal),
    }
}

fn in_ref(vs: &[Value], x: Option<ValueRef<'_>>) -> DocResult<bool> {
    for v in vs {
        if eq_ref(v, x)? {
            return Ok(true);
        }
    }
    Ok(false)
}

fn cmp_ref_op(cmp: Cmp, operand: &Value, x: Option<ValueRef<'_>>) -> DocResult<bool> {
    let Some(x) = x else {
        return Ok(cmp_missing(cmp, operand));
    };
    if bracket(x.kind()) != bracket(operand.kind()) {
        return Ok(false);
    }
    if is_nan_ref(&x) || is_nan(operand) {
        return Ok(cmp_nan(cmp, is_nan_ref(&x), is_nan(operand)));
    }
    Ok(cmp_holds(cmp, cmp_ref(x, operand)?))
}

fn single_ref(cond: &Cond, x: Option<ValueRef<'_>>) -> DocResult<bool> {
    Ok(match cond {
        Cond::Eq(v) => eq_ref(v, x)?,
        Cond::Ne(v) => !eq_ref(v, x)?,
        Cond::Gt(v) => cmp_ref_op(Cmp::Gt, v, x)?,
        Cond::Gte(v) => cmp_ref_op(Cmp::Gte, v, x)?,
        Cond::Lt(v) => cmp_ref_op(Cmp::Lt, v, x)?,
        Cond::Lte(v) => cmp_ref_op(Cmp::Lte, v, x)?,
        Cond::In(vs) => in_ref(vs, x)?,
        Cond::Nin(vs) => !in_ref(vs, x)?,
        Cond::InRegex(vs, res) => in_regex_ref(vs, res, x)?,
        Cond::NinRegex(vs, res) => !in_regex_ref(vs, res, x)?,
        Cond::Exists(b) => x.is_some() == *b,
        Cond::Size(n) => matches!(x, Some(ValueRef::Array(a)) if a.len() as u64 == *n),
        Cond::ElemMatch(em) => match x {
            Some(ValueRef::Array(a)) => {
                for e in a.iter() {
                    if elem_matches_ref(em, e?)? {
                        return Ok(true);
                    }
                }
                false
            }
            _ => false,
        },
        Cond::Prefix(p) => matches!(x, Some(ValueRef::String(s)) if s.starts_with(p.as_str())),
        Cond::Regex(re) => matches!(x, Some(ValueRef::String(s)) if re.is_match(s)),
        Cond::Type(_) | Cond::Mod(..) => match x {
            None => false,
            Some(v) => single_value(cond, Some(&v.to_value()?)),
        },
        Cond::Not(c) => !single_ref(c, x)?,
        Cond::All(cs) => {
            for c in cs {
                if !single_ref(c, x)? {
                    return Ok(false);
                }
            }
            true
        }
    })
}

fn elem_matches_ref(em: &ElemMatch, e: ValueRef<'_>) -> DocResult<bool> {
    match em {
        ElemMatch::Document(f) => match e {
            ValueRef::Object(_) => f.matches(e),
            _ => Ok(false),
        },
        ElemMatch::Element(c) => single_ref(c, Some(e)),
    }
}

/// Calls `f` on what `path` reaches from `v` for a positive condition, as
/// [`reach_value`] reports it (`None`: missing), until `f` returns `true`.
fn any_reach<'a>(
    v: ValueRef<'a>,
    path: &[String],
    f: &mut dyn FnMut(Option<ValueRef<'a>>) -> DocResult<bool>,
) -> DocResult<bool> {
    let Some((seg, rest)) = path.split_first() else {
        if f(Some(v))? {
            return Ok(true);
        }
        if let ValueRef::Array(a) = v {
            for e in a.iter() {
                if f(Some(e?))? {
                    return Ok(true);
                }
            }
        }
        return Ok(false);
    };
    match v {
        ValueRef::Object(o) => match o.get(seg)? {
            Some(x) => any_reach(x, rest, f),
            None => f(None),
        },
        ValueRef::Array(a) => {
            let index = parse_index(seg);
            if let Some(x) = index.map(|i| a.get(i)).transpose()?.flatten() {
                if any_reach(x, rest, f)? {
                    return Ok(true);
                }
            }
            for e in a.iter() {
                let e = e?;
                if let ValueRef::Object(o) = e {
                    if index.is_some() && o.get(seg)?.is_none() {
                        continue;
                    }
                    if any_reach(e, path, f)? {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        }
        _ => f(None),
    }
}

/// Whether the encoded document `doc` matches `{path: null}` (MongoDB's
/// null-or-missing rule, see [`reach_value`]): what an index with null
/// entries for array elements indexes under null (FORMAT.md, "Null
/// entries for array elements").
pub(crate) fn matches_null(doc: ValueRef<'_>, path: &[String]) -> DocResult<bool> {
    field_ref(&Cond::Eq(Value::Null), doc, path)
}

/// [`matches_null`] on a decoded document.
pub(crate) fn matches_null_value(doc: &Value, path: &[String]) -> bool {
    field_value(&Cond::Eq(Value::Null), Some(doc), path)
}

/// What a field path reaches in one document, resolved once for every
/// condition on that path (a filter often tests one path several times:
/// `$or` arms, `$ne` beside an equality).
#[derive(Clone, Copy)]
enum Reached<'a> {
    /// The path went through objects only (an array, if any, is the last
    /// value): what it reaches (`None`: missing, or a scalar on the way).
    Simple(Option<ValueRef<'a>>),
    /// An array on the way: the conditions walk the path themselves
    /// ([`any_reach`], [`any_leaf`]).
    Complex,
}

/// Resolves `path` from `doc` as far as objects lead (see [`Reached`]).
fn resolve<'a>(doc: ValueRef<'a>, path: &[String]) -> DocResult<Reached<'a>> {
    let mut v = doc;
    for seg in path {
        match v {
            ValueRef::Object(o) => match o.get(seg)? {
                Some(x) => v = x,
                None => return Ok(Reached::Simple(None)),
            },
            ValueRef::Array(_) => return Ok(Reached::Complex),
            _ => return Ok(Reached::Simple(None)),
        }
    }
    Ok(Reached::Simple(Some(v)))
}

/// [`any_reach`] over a resolved path.
fn reach_any<'a>(
    doc: ValueRef<'a>,
    path: &[String],
    reached: Reached<'a>,
    f: &mut dyn FnMut(Option<ValueRef<'a>>) -> DocResult<bool>,
) -> DocResult<bool> {
    match reached {
        Reached::Simple(None) => f(None),
        Reached::Simple(Some(v)) => {
            if f(Some(v))? {
                return Ok(true);
            }
            if let ValueRef::Array(a) = v {
                for e in a.iter() {
                    if f(Some(e?))? {
                        return Ok(true);
                    }
                }
            }
            Ok(false)
        }
        Reached::Complex => any_reach(doc, path, f),
    }
}

/// [`any_leaf`] over a resolved path.
fn leaf_any<'a>(
    doc: ValueRef<'a>,
    path: &[String],
    reached: Reached<'a>,
    f: &mut dyn FnMut(ValueRef<'a>) -> DocResult<bool>,
) -> DocResult<bool> {
    match reached {
        Reached::Simple(None) => Ok(false),
        Reached::Simple(Some(v)) => f(v),
        Reached::Complex => any_leaf(doc, path, f),
    }
}

/// The paths one evaluation of a filter on one document resolved (a few;
/// more are resolved again each time).
struct PathCache<'p, 'a> {
    slots: [Option<(&'p [String], Reached<'a>)>; 8],
    len: usize,
}

impl<'p, 'a> PathCache<'p, 'a> {
    fn new() -> Self {
        PathCache {
            slots: [None; 8],
            len: 0,
        }
    }

    fn reach(&mut self, doc: ValueRef<'a>, path: &'p [String]) -> DocResult<Reached<'a>> {
        for (p, r) in self.slots[..self.len].iter().flatten() {
            if std::ptr::eq(*p, path) || *p == path {
                return Ok(*r);
            }
        }
        let r = resolve(doc, path)?;
        if let Some(slot) = self.slots.get_mut(self.len) {
            *slot = Some((path, r));
            self.len += 1;
        }
        Ok(r)
    }
}

fn field_ref(cond: &Cond, doc: ValueRef<'_>, path: &[String]) -> DocResult<bool> {
    field_reached(cond, doc, path, resolve(doc, path)?)
}

/// [`field_ref`] with the path resolved.
fn field_reached<'a>(
    cond: &Cond,
    doc: ValueRef<'a>,
    path: &[String],
    reached: Reached<'a>,
) -> DocResult<bool> {
    Ok(match cond {
        Cond::Ne(v) => !reach_any(doc, path, reached, &mut |x| eq_ref(v, x))?,
        Cond::Nin(vs) => !reach_any(doc, path, reached, &mut |x| in_ref(vs, x))?,
        Cond::NinRegex(vs, res) => {
            !reach_any(doc, path, reached, &mut |x| in_regex_ref(vs, res, x))?
        }
        Cond::Not(c) => !field_reached(c, doc, path, reached)?,
        Cond::Exists(b) => reach_any(doc, path, reached, &mut |x| Ok(x.is_some()))? == *b,
        Cond::All(cs) => {
            for c in cs {
                if !field_reached(c, doc, path, reached)? {
                    return Ok(false);
                }
            }
            true
        }
        Cond::Size(_) | Cond::ElemMatch(_) => {
            leaf_any(doc, path, reached, &mut |leaf| single_ref(cond, Some(leaf)))?
        }
        Cond::Eq(_)
        | Cond::Gt(_)
        | Cond::Gte(_)
        | Cond::Lt(_)
        | Cond::Lte(_)
        | Cond::In(_)
        | Cond::InRegex(..)
        | Cond::Prefix(_)
        | Cond::Type(_)
        | Cond::Mod(..)
        | Cond::Regex(_) => reach_any(doc, path, reached, &mut |x| single_ref(cond, x))?,
    })
}

impl Filter {
    /// Evaluates the filter on an encoded document ([`codec::value_ref`]
    /// of its bytes) without decoding it: only the fields on the filter's
    /// paths are read, and evaluation stops at the first deciding value.
    /// Malformed bytes met on the way are an error.
    ///
    /// [`codec::value_ref`]: super::codec::value_ref
    pub fn matches(&self, doc: ValueRef<'_>) -> DocResult<bool> {
        self.matches_in(doc, &mut PathCache::new())
    }

    /// [`matches`](Self::matches), each path resolved once per document.
    fn matches_in<'p, 'a>(
        &'p self,
        doc: ValueRef<'a>,
        paths: &mut PathCache<'p, 'a>,
    ) -> DocResult<bool> {
        Ok(match self {
            Filter::True => true,
            Filter::And(fs) => {
                for f in fs {
                    if !f.matches_in(doc, paths)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Or(fs) => {
                for f in fs {
                    if f.matches_in(doc, paths)? {
                        return Ok(true);
                    }
                }
                false
            }
            Filter::Nor(fs) => {
                for f in fs {
                    if f.matches_in(doc, paths)? {
                        return Ok(false);
                    }
                }
                true
            }
            Filter::Field { path, cond } => {
                let path = path.segments();
                let reached = paths.reach(doc, path)?;
                field_reached(cond, doc, path, reached)?
            }
            Filter::Expr(e) => e.matches_value(&doc.to_value()?)?,
            Filter::Text(t) => t.matches(doc)?,
        })
    }

    /// [`matches`](Self::matches) on the encoded bytes of a document.
    pub fn matches_bytes(&self, bytes: &[u8]) -> DocResult<bool> {
        self.matches(super::codec::value_ref(bytes)?)
    }
}

// ---------------------------------------------------------------------------
// Upsert support

impl Filter {
    /// The `(path, value)` of every equality (`{"a": v}` or `$eq`) that the
    /// filter requires at its top level, through nested `$and`s: the fields
    /// an upsert gives a new document (MongoDB's rule). Other conditions
    /// (ranges, `$in`, `$or`, ...) contribute nothing.
    pub fn equality_fields(&self) -> Vec<(FieldPath, Value)> {
        let mut out = Vec::new();
        self.collect_equalities(&mut out);
        out
    }

    fn collect_equalities(&self, out: &mut Vec<(FieldPath, Value)>) {
        match self {
            Filter::And(fs) => fs.iter().for_each(|f| f.collect_equalities(out)),
            Filter::Field { path, cond } => collect_cond_equalities(path, cond, out),
            Filter::True | Filter::Or(_) | Filter::Nor(_) | Filter::Expr(_) | Filter::Text(_) => {}
        }
    }

    /// The document an upsert starts from when nothing matches: the
    /// [`equality_fields`](Self::equality_fields) set at their paths
    /// (intermediate objects created). Two equalities on one path, or on a
    /// path and a path inside it, are [`DocumentError::UpdateConflict`].
    pub fn upsert_seed(&self) -> DocResult<Document> {
        update::seed_document(self.equality_fields())
    }
}

fn collect_cond_equalities(path: &FieldPath, cond: &Cond, out: &mut Vec<(FieldPath, Value)>) {
    match cond {
        Cond::Eq(v) => out.push((path.clone(), v.clone())),
        Cond::All(cs) => cs
            .iter()
            .for_each(|c| collect_cond_equalities(path, c, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::document::codec::{to_vec, value_ref};
    use crate::document::gen;
    use crate::document::path::{self, LookupMode};
    use serde_json::json;

    fn doc(j: serde_json::Value) -> Value {
        Value::from_json(j).unwrap()
    }

    fn check(filter: serde_json::Value, document: serde_json::Value) -> bool {
        let f = Filter::parse(filter.clone()).unwrap();
        let d = doc(document.clone());
        let by_value = f.matches_value(&d).unwrap();
        let bytes = to_vec(&d).unwrap();
        let by_bytes = f.matches(value_ref(&bytes).unwrap()).unwrap();
        assert_eq!(by_value, by_bytes, "{filter} on {document}");
        if let Value::Object(o) = &d {
            assert_eq!(
                f.matches_document(o).unwrap(),
                by_value,
                "{filter} on {document}"
            );
        }
        by_value
    }

    #[test]
    fn equality_and_arrays() {
        assert!(check(json!({"a": 5}), json!({"a": 5})));
        assert!(check(json!({"a": 5}), json!({"a": 5.0})));
        assert!(!check(json!({"a": 5}), json!({"a": "5"})));
        assert!(check(json!({"a": 5}), json!({"a": [1, 5]})));
        assert!(!check(json!({"a": 5}), json!({"a": [[5]]})));
        assert!(check(json!({"a": [1, 5]}), json!({"a": [1, 5]})));
        assert!(!check(json!({"a": [5, 1]}), json!({"a": [1, 5]})));
        assert!(check(json!({"a": [1]}), json!({"a": [[1], 2]})));
        assert!(check(json!({"a.b": 1}), json!({"a": [{"b": 2}, {"b": 1}]})));
        assert!(check(json!({"a.b": 1}), json!({"a": [{"b": [0, 1]}]})));
        assert!(check(json!({"a.1": 7}), json!({"a": [6, 7]})));
        assert!(!check(json!({"a.1": 6}), json!({"a": [6, 7]})));
        assert!(check(json!({"a.1": 6}), json!({"a": [{"1": 6}]})));
        assert!(check(
            json!({"a": {"x": 1, "y": 2}}),
            json!({"a": {"x": 1, "y": 2}})
        ));
        assert!(check(json!({"a": {}}), json!({"a": {}})));
        assert!(!check(
            json!({"a": {"x": 1}}),
            json!({"a": {"x": 1, "y": 2}})
        ));
        assert!(check(json!({"a": 1, "b": 2}), json!({"a": 1, "b": 2})));
        assert!(!check(json!({"a": 1, "b": 2}), json!({"a": 1, "b": 3})));
        assert!(check(json!({}), json!({})));
        // Field order matters for embedded-object equality (text keeps it).
        let f = Filter::parse_str(r#"{"a": {"y": 2, "x": 1}}"#).unwrap();
        let d: Value = serde_json::from_str(r#"{"a": {"y": 2, "x": 1}}"#).unwrap();
        assert!(f.matches_value(&d).unwrap());
        let swapped: Value = serde_json::from_str(r#"{"a": {"x": 1, "y": 2}}"#).unwrap();
        assert!(!f.matches_value(&swapped).unwrap());
    }

    #[test]
    fn null_and_missing() {
        assert!(check(json!({"a": null}), json!({})));
        assert!(check(json!({"a": null}), json!({"a": null})));
        assert!(check(json!({"a": null}), json!({"a": [1, null]})));
        assert!(!check(json!({"a": null}), json!({"a": [1, 2]})));
        assert!(!check(json!({"a": null}), json!({"a": []})));
        assert!(!check(json!({"a": null}), json!({"a": 0})));
        assert!(check(json!({"a.b": null}), json!({"a": 5})));
        assert!(check(json!({"a.b": null}), json!({"a": [{"c": 1}]})));
        // MongoDB's manual, "Query for Null or Missing Fields": an element
        // of an array of subdocuments lacking the field is missing; scalar
        // elements reach nothing.
        assert!(check(
            json!({"a.b": null}),
            json!({"a": [{"b": 1}, {"c": 1}]})
        ));
        assert!(!check(json!({"a.b": null}), json!({"a": [1, 2]})));
        assert!(!check(json!({"a.b": null}), json!({"a": []})));
        assert!(check(json!({"a.b": null}), json!({"a": null})));
        assert!(check(json!({"a.b.c": null}), json!({"a": [{"b": 5}]})));
        assert!(!check(json!({"a.b": null}), json!({"a": [{"b": 1}, 2]})));
        assert!(check(
            json!({"a.b": {"$in": [null]}}),
            json!({"a": [{"b": 1}, {}]})
        ));
        // $ne / $nin: the exact negations (MongoDB's $ne page: no element
        // equals the value).
        assert!(!check(
            json!({"a.b": {"$ne": null}}),
            json!({"a": [{"b": 1}, {"c": 1}]})
        ));
        assert!(check(json!({"a.b": {"$ne": null}}), json!({"a": [1, 2]})));
        assert!(check(
            json!({"a.b": {"$ne": 2}}),
            json!({"a": [{"b": 1}, {"c": 1}]})
        ));
        assert!(!check(
            json!({"a.b": {"$nin": [2, null]}}),
            json!({"a": [{"b": 1}, {"c": 1}]})
        ));
        assert!(!check(
            json!({"a.b": {"$nin": [3]}}),
            json!({"a": [{"b": [1, 3]}]})
        ));
        // A positional segment is not a field the other elements lack.
        assert!(!check(json!({"a.0.b": null}), json!({"a": [{"b": 1}]})));
        assert!(check(json!({"a.0.b": null}), json!({"a": [{"c": 1}]})));
        // $exists: false is the negation of $exists: true.
        assert!(!check(
            json!({"a.b": {"$exists": false}}),
            json!({"a": [{"b": 1}, {}]})
        ));
        assert!(check(json!({"a.b": {"$exists": false}}), json!({"a": [1]})));
        assert!(check(json!({"a": {"$ne": null}}), json!({"a": 0})));
        assert!(!check(json!({"a": {"$ne": null}}), json!({})));
        assert!(check(json!({"a": {"$ne": 1}}), json!({})));
        assert!(!check(json!({"a": {"$ne": 1}}), json!({"a": [0, 1]})));
        assert!(check(json!({"a": {"$nin": [1, 2]}}), json!({})));
        assert!(!check(json!({"a": {"$nin": [1, 2]}}), json!({"a": 2.0})));
        assert!(check(json!({"a": {"$in": [null, 2]}}), json!({"b": 1})));
        assert!(check(json!({"a": {"$gte": null}}), json!({})));
        assert!(check(json!({"a": {"$lte": null}}), json!({"a": null})));
        assert!(!check(json!({"a": {"$gt": null}}), json!({})));
        assert!(!check(json!({"a": {"$lt": null}}), json!({"a": null})));
        assert!(check(json!({"a": {"$exists": true}}), json!({"a": null})));
        assert!(check(json!({"a": {"$exists": true}}), json!({"a": []})));
        assert!(!check(json!({"a": {"$exists": true}}), json!({})));
        assert!(check(json!({"a": {"$exists": false}}), json!({"b": 1})));
        assert!(check(
            json!({"a.b": {"$exists": 1}}),
            json!({"a": [{"b": 1}]})
        ));
        assert!(!check(json!({"a.b": {"$exists": 1}}), json!({"a": [1]})));
    }

    #[test]
    fn ranges_and_brackets() {
        assert!(check(json!({"a": {"$gt": 1}}), json!({"a": 1.5})));
        assert!(!check(json!({"a": {"$gt": 1}}), json!({"a": "z"})));
        assert!(!check(json!({"a": {"$gt": 1}}), json!({"a": true})));
        assert!(check(json!({"a": {"$gte": 1}}), json!({"a": 1.0})));
        assert!(check(json!({"a": {"$lt": "b"}}), json!({"a": "abc"})));
        assert!(!check(json!({"a": {"$lt": "b"}}), json!({"a": 1})));
        assert!(check(
            json!({"a": {"$gt": 1, "$lt": 5}}),
            json!({"a": [0, 10]})
        ));
        assert!(!check(
            json!({"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}}),
            json!({"a": [0, 10]})
        ));
        assert!(check(
            json!({"a": {"$elemMatch": {"$gt": 1, "$lt": 5}}}),
            json!({"a": [0, 3]})
        ));
        assert!(check(json!({"a": {"$gt": false}}), json!({"a": true})));
        assert!(check(
            json!({"a": {"$gt": {"$oid": "000000000000000000000001"}}}),
            json!({"a": {"$oid": "000000000000000000000002"}})
        ));
        assert!(check(json!({"a": {"$gte": [1, 2]}}), json!({"a": [1, 3]})));
        assert!(check(
            json!({"a": {"$lt": 9007199254740993i64}}),
            json!({"a": 9007199254740992.0})
        ));
        assert!(!check(
            json!({"a": {"$lt": 9007199254740992i64}}),
            json!({"a": 9007199254740992.0})
        ));
        // NaN: equal to itself, outside every range.
        let nan = json!({"$float": "NaN"});
        assert!(check(json!({"a": nan}), json!({"a": nan})));
        assert!(check(json!({"a": {"$gte": nan}}), json!({"a": nan})));
        assert!(!check(json!({"a": {"$gt": nan}}), json!({"a": nan})));
        assert!(!check(json!({"a": {"$lt": 5}}), json!({"a": nan})));
        assert!(!check(json!({"a": {"$gt": nan}}), json!({"a": 5})));
        assert!(check(
            json!({"a": {"$lt": {"$float": "Infinity"}}}),
            json!({"a": 5})
        ));
        assert!(check(json!({"a": {"$in": [nan]}}), json!({"a": nan})));
        assert!(check(json!({"a": -0.0}), json!({"a": 0})));
    }

    #[test]
    fn all_type_mod_regex_expr() {
        // $all: every value is matched (an $and of equalities; MongoDB
        // manual, $all page: "equivalent to an $and operation of the
        // specified values"); [] matches nothing; an array value matches a
        // whole array or an element.
        assert!(check(
            json!({"t": {"$all": ["a", "b"]}}),
            json!({"t": ["b", "c", "a"]})
        ));
        assert!(!check(
            json!({"t": {"$all": ["a", "b"]}}),
            json!({"t": ["a"]})
        ));
        assert!(check(json!({"t": {"$all": ["a"]}}), json!({"t": "a"})));
        assert!(!check(json!({"t": {"$all": []}}), json!({"t": []})));
        assert!(check(
            json!({"t": {"$all": [[1, 2]]}}),
            json!({"t": [[1, 2], 3]})
        ));
        assert!(check(
            json!({"t": {"$all": [[1, 2]]}}),
            json!({"t": [1, 2]})
        ));
        assert!(check(
            json!({"q": {"$all": [{"$elemMatch": {"x": 1}}, {"$elemMatch": {"x": 2}}]}}),
            json!({"q": [{"x": 2}, {"x": 1}]})
        ));
        assert!(!check(
            json!({"q": {"$all": [{"$elemMatch": {"x": 1}}, {"$elemMatch": {"x": 3}}]}}),
            json!({"q": [{"x": 2}, {"x": 1}]})
        ));
        // $type: names and numbers; an array matches "array" and its
        // elements' types (MongoDB manual, $type page, "Querying by Array
        // Type"); missing matches nothing, null matches "null".
        assert!(check(json!({"a": {"$type": "string"}}), json!({"a": "x"})));
        assert!(check(json!({"a": {"$type": 2}}), json!({"a": ["x", 1]})));
        assert!(check(json!({"a": {"$type": "array"}}), json!({"a": []})));
        assert!(!check(json!({"a": {"$type": "array"}}), json!({"a": 1})));
        assert!(check(json!({"a": {"$type": "double"}}), json!({"a": 1.5})));
        assert!(!check(json!({"a": {"$type": "double"}}), json!({"a": 1})));
        assert!(check(
            json!({"a": {"$type": ["long", "bool"]}}),
            json!({"a": true})
        ));
        assert!(check(json!({"a": {"$type": "int"}}), json!({"a": 1})));
        assert!(check(json!({"a": {"$type": "number"}}), json!({"a": 1.5})));
        assert!(check(json!({"a": {"$type": "null"}}), json!({"a": null})));
        assert!(!check(json!({"a": {"$type": "null"}}), json!({})));
        assert!(!check(json!({"a": {"$type": "date"}}), json!({"a": 1})));
        assert!(check(
            json!({"a": {"$type": "objectId"}}),
            json!({"a": {"$oid": "65a1b2c3d4e5f60718293a4b"}})
        ));
        assert!(check(
            json!({"a": {"$not": {"$type": "string"}}}),
            json!({})
        ));
        // $mod: floats are truncated (MongoDB manual, $mod page, "Floating
        // Point Arguments"); negative numbers keep the dividend's sign.
        assert!(check(json!({"n": {"$mod": [4, 0]}}), json!({"n": 8})));
        assert!(check(json!({"n": {"$mod": [4, 0]}}), json!({"n": 8.9})));
        assert!(check(json!({"n": {"$mod": [4.5, 1]}}), json!({"n": 9})));
        assert!(check(json!({"n": {"$mod": [4, -1]}}), json!({"n": -5})));
        assert!(!check(json!({"n": {"$mod": [4, 0]}}), json!({"n": "8"})));
        assert!(check(json!({"n": {"$mod": [3, 1]}}), json!({"n": [2, 4]})));
        assert!(check(
            json!({"n": {"$mod": [-1, 0]}}),
            json!({"n": i64::MIN})
        ));
        // $regex with options; unanchored unless ^; strings only.
        assert!(check(
            json!({"s": {"$regex": "b.d"}}),
            json!({"s": "abcde"})
        ));
        assert!(!check(json!({"s": {"$regex": "^b"}}), json!({"s": "abc"})));
        assert!(check(
            json!({"s": {"$regex": "^AB", "$options": "i"}}),
            json!({"s": "abc"})
        ));
        assert!(check(
            json!({"s": {"$regex": "^c$", "$options": "m"}}),
            json!({"s": "ab\nc"})
        ));
        assert!(!check(
            json!({"s": {"$regex": "^c$"}}),
            json!({"s": "ab\nc"})
        ));
        assert!(check(
            json!({"s": {"$regex": "a.c", "$options": "s"}}),
            json!({"s": "a\nc"})
        ));
        assert!(check(
            json!({"s": {"$regex": "a b # c", "$options": "x"}}),
            json!({"s": "ab"})
        ));
        assert!(check(
            json!({"s": {"$regex": "\\d+"}}),
            json!({"s": ["x", "a1"]})
        ));
        assert!(!check(json!({"s": {"$regex": "1"}}), json!({"s": 1})));
        assert!(check(
            json!({"s": {"$not": {"$regex": "z"}}}),
            json!({"s": "abc"})
        ));
        // A literal anchored prefix without options stays a $prefix (an
        // index range); with options it is a regular expression whose
        // literal prefix the planner may scan.
        assert_eq!(
            Filter::parse(json!({"s": {"$regex": "^ab"}}))
                .unwrap()
                .to_json(),
            json!({"s": {"$prefix": "ab"}})
        );
        let r = Filter::parse(json!({"s": {"$regex": "^abc?d", "$options": "s"}})).unwrap();
        match &r {
            Filter::Field {
                cond: Cond::Regex(re),
                ..
            } => assert_eq!(re.literal_prefix(), Some("ab")),
            other => panic!("{other:?}"),
        }
        assert_eq!(Filter::from_value(r.to_value()).unwrap(), r);
        for (pat, opts, want) in [
            ("^ab|c", "", None),
            ("^ab", "i", None),
            ("^a\\.b+", "", Some("a.")),
            ("a", "", None),
        ] {
            let re = RegexCond::new(pat, opts).unwrap();
            assert_eq!(re.literal_prefix(), want, "{pat}");
        }
        // $expr: aggregation expressions over the whole document.
        assert!(check(
            json!({"$expr": {"$gt": ["$a", "$b"]}}),
            json!({"a": 3, "b": 2})
        ));
        assert!(!check(
            json!({"$expr": {"$gt": ["$a", "$b"]}}),
            json!({"a": 1, "b": 2})
        ));
        assert!(check(
            json!({"$expr": {"$eq": [{"$add": ["$a", "$b"]}, 5]}, "c": 1}),
            json!({"a": 3, "b": 2, "c": 1})
        ));
        let f = Filter::parse(json!({"$expr": {"$add": ["$a", 1]}})).unwrap();
        let d = doc(json!({"a": "x"}));
        // A failing expression is an error on every evaluator (MongoDB
        // fails the query), not "no match".
        assert!(matches!(
            f.matches_value(&d),
            Err(DocumentError::InvalidQuery { .. })
        ));
        let Value::Object(o) = &d else { unreachable!() };
        assert!(matches!(
            f.matches_document(o),
            Err(DocumentError::InvalidQuery { .. })
        ));
        // `$expr` applies to the top-level document only (MongoDB: "$expr
        // can only be applied to the top-level document").
        for bad in [
            json!({"a": {"$elemMatch": {"$expr": {"$gt": ["$x", 1]}}}}),
            json!({"a": {"$elemMatch": {"$or": [{"$expr": true}, {"b": 1}]}}}),
        ] {
            let e = Filter::parse(bad.clone()).unwrap_err();
            assert!(e.to_string().contains("top-level document"), "{bad}: {e}");
        }
        assert!(matches!(
            f.matches_bytes(&to_vec(&d).unwrap()),
            Err(DocumentError::InvalidQuery { .. })
        ));
        assert_eq!(Filter::from_value(f.to_value()).unwrap(), f);
    }

    #[test]
    fn logical_size_elem_match_prefix() {
        assert!(check(json!({"$or": [{"a": 1}, {"b": 1}]}), json!({"b": 1})));
        assert!(!check(
            json!({"$or": [{"a": 1}, {"b": 1}]}),
            json!({"b": 2})
        ));
        assert!(check(
            json!({"$and": [{"a": 1}, {"b": 1}]}),
            json!({"a": 1, "b": 1})
        ));
        assert!(check(json!({"$nor": [{"a": 1}, {"b": 1}]}), json!({})));
        assert!(!check(
            json!({"$nor": [{"a": 1}, {"b": 1}]}),
            json!({"a": [1]})
        ));
        assert!(check(json!({"a": {"$not": {"$gt": 5}}}), json!({"a": 3})));
        assert!(check(json!({"a": {"$not": {"$gt": 5}}}), json!({})));
        assert!(check(json!({"a": {"$not": {"$gt": 5}}}), json!({"a": "x"})));
        assert!(!check(
            json!({"a": {"$not": {"$gt": 5}}}),
            json!({"a": [1, 6]})
        ));
        assert!(check(json!({"a": {"$size": 2}}), json!({"a": [1, [2, 3]]})));
        assert!(!check(json!({"a": {"$size": 2}}), json!({"a": [[1, 2]]})));
        assert!(check(json!({"a": {"$size": 0}}), json!({"a": []})));
        assert!(!check(json!({"a": {"$size": 0}}), json!({})));
        assert!(check(
            json!({"a.b": {"$size": 1}}),
            json!({"a": [{"b": [1]}, {"b": 2}]})
        ));
        assert!(check(json!({"a": {"$size": 2.0}}), json!({"a": [1, 2]})));
        let items = json!({"items": [{"sku": "x", "qty": 1}, {"sku": "y", "qty": 5}, 7]});
        assert!(check(
            json!({"items": {"$elemMatch": {"sku": "y", "qty": {"$gt": 2}}}}),
            items.clone()
        ));
        assert!(!check(
            json!({"items": {"$elemMatch": {"sku": "x", "qty": {"$gt": 2}}}}),
            items.clone()
        ));
        assert!(check(
            json!({"items": {"$elemMatch": {"$or": [{"sku": "q"}, {"qty": 1}]}}}),
            items.clone()
        ));
        assert!(check(
            json!({"items": {"$elemMatch": {"$eq": 7}}}),
            items.clone()
        ));
        assert!(check(json!({"items": {"$elemMatch": {}}}), items.clone()));
        assert!(!check(
            json!({"a": {"$elemMatch": {}}}),
            json!({"a": [1, [2]]})
        ));
        assert!(!check(
            json!({"a": {"$elemMatch": {"$eq": 1}}}),
            json!({"a": [[1]]})
        ));
        assert!(check(
            json!({"a": {"$elemMatch": {"$elemMatch": {"$eq": 1}}}}),
            json!({"a": [[1]]})
        ));
        assert!(!check(
            json!({"a": {"$elemMatch": {"$eq": 1}}}),
            json!({"a": 1})
        ));
        assert!(check(json!({"n": {"$prefix": "Ad"}}), json!({"n": "Ada"})));
        assert!(check(json!({"n": {"$prefix": ""}}), json!({"n": ""})));
        assert!(!check(json!({"n": {"$prefix": "Ad"}}), json!({"n": "ada"})));
        assert!(check(
            json!({"n": {"$prefix": "Ad"}}),
            json!({"n": ["x", "Adz"]})
        ));
        assert!(!check(json!({"n": {"$prefix": "1"}}), json!({"n": 1})));
        assert!(check(
            json!({"n": {"$regex": "^a\\.b"}}),
            json!({"n": "a.bc"})
        ));
        assert!(!check(
            json!({"n": {"$regex": "^a\\.b"}}),
            json!({"n": "axbc"})
        ));
        assert!(check(
            json!({"n": {"$regex": "^é", "$options": ""}}),
            json!({"n": "été"})
        ));
    }

    #[test]
    fn parse_shapes() {
        let p = |j| Filter::parse(j).unwrap();
        let path = |s: &str| FieldPath::parse(s).unwrap();
        assert_eq!(p(json!({})), Filter::True);
        assert_eq!(
            p(json!({"a": 1})),
            Filter::Field {
                path: path("a"),
                cond: Cond::Eq(Value::Int(1))
            }
        );
        assert_eq!(
            p(json!({"a": {"$gt": 1, "$lt": 5}})),
            Filter::And(vec![
                Filter::Field {
                    path: path("a"),
                    cond: Cond::Gt(Value::Int(1))
                },
                Filter::Field {
                    path: path("a"),
                    cond: Cond::Lt(Value::Int(5))
                },
            ])
        );
        assert_eq!(
            p(json!({"a": {"$not": {"$gt": 1, "$lt": 5}}})),
            Filter::Field {
                path: path("a"),
                cond: Cond::Not(Box::new(Cond::All(vec![
                    Cond::Gt(Value::Int(1)),
                    Cond::Lt(Value::Int(5))
                ])))
            }
        );
        assert_eq!(
            p(json!({"a": {"$regex": "^x\\(y"}})),
            Filter::Field {
                path: path("a"),
                cond: Cond::Prefix("x(y".into())
            }
        );
        assert_eq!(
            p(json!({"a": {"$oid": "0102030405060708090a0b0c"}})),
            Filter::Field {
                path: path("a"),
                cond: Cond::Eq(Value::Id(crate::document::ObjectId::from_bytes([
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12
                ])))
            }
        );
        assert_eq!(
            p(json!({"a": {"$binary": "aGk="}})),
            Filter::Field {
                path: path("a"),
                cond: Cond::Eq(Value::binary(b"hi".to_vec()))
            }
        );
        assert!(matches!(
            p(json!({"a": {"$elemMatch": {"b": 1}}})),
            Filter::Field {
                cond: Cond::ElemMatch(ElemMatch::Document(_)),
                ..
            }
        ));
        assert!(matches!(
            p(json!({"a": {"$elemMatch": {"$gt": 1}}})),
            Filter::Field {
                cond: Cond::ElemMatch(ElemMatch::Element(_)),
                ..
            }
        ));
        // Text keeps order and rejects duplicates.
        let f = Filter::parse_str(r#"{"b": 1, "a": 2}"#).unwrap();
        assert_eq!(f.to_json().to_string(), r#"{"$and":[{"b":1},{"a":2}]}"#);
        assert_eq!(f.to_string(), r#"{"$and":[{"b":1},{"a":2}]}"#);
    }

    #[test]
    fn typed_errors() {
        let e = |j| Filter::parse(j).unwrap_err();
        assert!(matches!(e(json!(5)), DocumentError::InvalidQuery { .. }));
        assert!(matches!(e(json!([])), DocumentError::InvalidQuery { .. }));
        assert!(matches!(
            e(json!({"a": {"$foo": 1}})),
            DocumentError::UnknownOperator { operator, .. } if operator == "$foo"
        ));
        assert!(matches!(
            e(json!({"$where": "x"})),
            DocumentError::UnknownOperator { operator, .. } if operator == "$where"
        ));
        assert!(matches!(
            e(json!({"$not": {"a": 1}})),
            DocumentError::UnknownOperator { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$in": 5}})),
            DocumentError::InvalidOperand { operator, expected: "an array", found }
                if operator == "$in" && found == "int"
        ));
        assert!(matches!(
            e(json!({"a": {"$nin": {}}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$size": -1}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$size": 1.5}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$size": "1"}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$exists": "yes"}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$elemMatch": 1}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$not": 1}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$not": {}}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$not": {"b": 1}}})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$prefix": 1}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"$and": []})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            e(json!({"$or": {}})),
            DocumentError::InvalidOperand { .. }
        ));
        assert!(matches!(
            e(json!({"$or": [1]})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$gt": 1, "b": 2}})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            e(json!({"a..b": 1})),
            DocumentError::InvalidPath { .. }
        ));
        assert!(matches!(
            e(json!({"": 1})),
            DocumentError::InvalidPath { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$oid": "xyz"}})),
            DocumentError::InvalidJson { .. }
        ));
        // Regular expressions that do not compile, unknown options.
        for (bad, opts) in [
            ("(", ""),
            ("^a\\", ""),
            ("[z-a]", ""),
            ("a", "q"),
            ("a", "g"),
        ] {
            assert!(
                matches!(
                    e(json!({"a": {"$regex": bad, "$options": opts}})),
                    DocumentError::InvalidQuery { .. }
                ),
                "{bad} {opts}"
            );
        }
        assert!(matches!(
            e(json!({"a": {"$regex": "a", "$options": 1}})),
            DocumentError::InvalidOperand { .. }
        ));
        for bad in [
            json!({"$type": "nope"}),
            json!({"$type": 99}),
            json!({"$mod": [0, 1]}),
            json!({"$mod": [2]}),
            json!({"$mod": "x"}),
            json!({"$all": 1}),
        ] {
            assert!(
                matches!(
                    e(json!({"a": bad.clone()})),
                    DocumentError::InvalidQuery { .. } | DocumentError::InvalidOperand { .. }
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            e(json!({"$expr": {"$nope": 1}})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            e(json!({"a": {"$options": ""}})),
            DocumentError::InvalidQuery { .. }
        ));
        assert!(matches!(
            Filter::parse_str("{\"a\": "),
            Err(DocumentError::MalformedJson { .. })
        ));
        assert!(matches!(
            Filter::parse_str(r#"{"a": 1, "a": 2}"#),
            Err(DocumentError::InvalidJson { .. })
        ));
        assert!(matches!(
            Filter::parse_str(r#"{"a": {"$oid": 5}}"#),
            Err(DocumentError::InvalidJson { .. })
        ));
    }

    #[test]
    fn equality_fields_and_seed() {
        let f = Filter::parse_str(
            r#"{"a": 1, "b.c": "x", "d": {"$gt": 1}, "e": {"$eq": [1]},
                "$and": [{"f": null}, {"$or": [{"g": 1}]}]}"#,
        )
        .unwrap();
        let eq: Vec<(String, Value)> = f
            .equality_fields()
            .into_iter()
            .map(|(p, v)| (p.to_string(), v))
            .collect();
        assert_eq!(
            eq,
            vec![
                ("a".into(), Value::Int(1)),
                ("b.c".into(), Value::from("x")),
                ("e".into(), Value::from(vec![1])),
                ("f".into(), Value::Null),
            ]
        );
        let seed = f.upsert_seed().unwrap();
        assert_eq!(
            Value::Object(seed).to_json(),
            json!({"a": 1, "b": {"c": "x"}, "e": [1], "f": null})
        );
        assert!(matches!(
            Filter::parse(json!({"a": 1, "$and": [{"a": 2}]}))
                .unwrap()
                .upsert_seed(),
            Err(DocumentError::UpdateConflict { .. })
        ));
        assert!(matches!(
            Filter::parse(json!({"a": 1, "a.b": 2}))
                .unwrap()
                .upsert_seed(),
            Err(DocumentError::UpdateConflict { .. })
        ));
    }

    #[test]
    fn malformed_bytes_are_errors() {
        let d = doc(json!({"a": [1, 2, {"b": "x"}]}));
        let mut bytes = to_vec(&d).unwrap();
        let f = Filter::parse(json!({"a.b": "y"})).unwrap();
        assert!(!f.matches_bytes(&bytes).unwrap());
        let n = bytes.len();
        bytes[n - 3] = 0xEE; // a tag inside the last element
        let r = f.matches_bytes(&bytes);
        assert!(r.is_err(), "{r:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn bytes_and_value_evaluators_agree(d in gen::document(), f in gen::filter()) {
            let bytes = to_vec(&d).unwrap();
            let by_value = f.matches_value(&d).unwrap();
            let by_bytes = f.matches(value_ref(&bytes).unwrap()).unwrap();
            prop_assert_eq!(by_value, by_bytes, "{} on {:?}", f, d);
            if let Value::Object(o) = &d {
                prop_assert_eq!(f.matches_document(o).unwrap(), by_value);
            }
        }

        #[test]
        fn negations_are_exact(d in gen::document(), path in gen::path(), c in gen::cond()) {
            let pos = Filter::Field { path: path.clone(), cond: c.clone() };
            let neg = Filter::Field { path, cond: Cond::Not(Box::new(c)) };
            prop_assert_eq!(neg.matches_value(&d).unwrap(), !pos.matches_value(&d).unwrap());
            let nor = Filter::Nor(vec![pos.clone()]);
            prop_assert_eq!(nor.matches_value(&d).unwrap(), !pos.matches_value(&d).unwrap());
        }

        #[test]
        fn printed_filters_parse_back(f in gen::filter()) {
            let v = f.to_value();
            prop_assert_eq!(Filter::from_value(v.clone()).unwrap(), f.clone());
            let text = f.to_string();
            prop_assert_eq!(Filter::parse_str(&text).unwrap(), f.clone());
        }

        #[test]
        fn cmp_ref_is_keys_compare(a in gen::value(), b in gen::value()) {
            let bytes = to_vec(&a).unwrap();
            let r = value_ref(&bytes).unwrap();
            prop_assert_eq!(cmp_ref(r, &b).unwrap(), keys::compare(&a, &b));
        }

        #[test]
        fn leaves_expand_to_lookup(d in gen::document(), path in gen::path()) {
            let bytes = to_vec(&d).unwrap();
            let mut leaves = Vec::new();
            leaves_value(&d, path.segments(), &mut leaves);
            let mut expanded = Vec::new();
            for l in &leaves {
                expanded.push((*l).clone());
                if let Value::Array(a) = l {
                    expanded.extend(a.iter().cloned());
                }
            }
            let looked: Vec<Value> = path::lookup(&bytes, path.segments(), LookupMode::Filter)
                .unwrap()
                .iter()
                .map(|r| r.to_value().unwrap())
                .collect();
            prop_assert_eq!(&expanded, &looked);
            let mut from_ref = Vec::new();
            any_leaf(value_ref(&bytes).unwrap(), path.segments(), &mut |v| {
                from_ref.push(v.to_value()?);
                Ok(false)
            })
            .unwrap();
            let leaves: Vec<Value> = leaves.into_iter().cloned().collect();
            prop_assert_eq!(from_ref, leaves);
        }

        /// For the planner: a positive condition whose operand holds no
        /// array and is not null matches exactly the documents having an
        /// index key that satisfies it.
        #[test]
        fn positive_conditions_are_answered_by_index_keys(
            d in gen::document(),
            path in gen::path(),
            c in prop_oneof![
                gen::scalar().prop_map(Cond::Eq),
                gen::value().prop_map(Cond::Eq),
                gen::scalar().prop_map(Cond::Gt),
                gen::scalar().prop_map(Cond::Gte),
                gen::scalar().prop_map(Cond::Lt),
                gen::scalar().prop_map(Cond::Lte),
                prop::collection::vec(gen::scalar(), 0..4).prop_map(Cond::In),
                prop::sample::select(vec!["", "a", "b"]).prop_map(|p| Cond::Prefix(p.into())),
            ],
        ) {
            // Operands holding an array (equality with a whole array) are
            // not answered by element keys.
            prop_assume!(!matches!(&c, Cond::Eq(Value::Array(_))));
            // Null operands also match missing fields inside arrays of
            // objects, which index keys do not record: the planner never
            // answers them from an index.
            prop_assume!(!matches!(
                &c,
                Cond::Eq(Value::Null)
                    | Cond::Gt(Value::Null)
                    | Cond::Gte(Value::Null)
                    | Cond::Lt(Value::Null)
                    | Cond::Lte(Value::Null)
            ));
            prop_assume!(!matches!(&c, Cond::In(vs) if vs.iter().any(Value::is_null)));
            let keys = path::lookup_value(&d, path.segments(), LookupMode::Index);
            let by_keys = if keys.is_empty() {
                single_value(&c, None)
            } else {
                keys.iter().any(|k| single_value(&c, Some(k)))
            };
            let f = Filter::Field { path, cond: c };
            prop_assert_eq!(f.matches_value(&d).unwrap(), by_keys);
        }

        #[test]
        fn damaged_bytes_never_panic(
            d in gen::document(),
            f in gen::filter(),
            flip in any::<prop::sample::Index>(),
            mask in 1u8..,
        ) {
            let mut bytes = to_vec(&d).unwrap();
            let i = flip.index(bytes.len());
            bytes[i] ^= mask;
            let _ = f.matches_bytes(&bytes);
        }

        #[test]
        fn upsert_seed_matches_its_equalities(f in gen::equality_filter()) {
            if let Ok(seed) = f.upsert_seed() {
                prop_assert!(f.matches_value(&Value::Object(seed)).unwrap(), "{}", f);
            }
        }
    }
}
