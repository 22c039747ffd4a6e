//! Text indexes and `$text` search, as MongoDB's ("Text Indexes", `$text`,
//! `$meta: "textScore"` in its manual).
//!
//! # Tokenization
//!
//! One string is turned into **terms** as follows, for indexing and for
//! search strings alike ([`tokens`] gives them):
//! 1. it is split at Unicode word boundaries (UAX #29, the
//!    `unicode-segmentation` crate's `unicode_words`): runs of letters,
//!    digits and the characters joining them inside a word (`don't`,
//!    `3.14`, `e-mail` is two words) are words, and spaces and punctuation
//!    are not;
//! 2. each word is **folded**: diacritics are removed (canonical
//!    decomposition, NFD, then every combining mark dropped, then NFC:
//!    `café` → `cafe`, `Ångström` → `Angstrom`; letters that do not decompose,
//!    such as `ø` or `ł`, stay) and it is lowercased (Unicode's lowercase
//!    mapping, `str::to_lowercase`: `ÉCOLE` → `ecole`; no further case
//!    folding, so `ß` stays `ß`);
//! 3. with the language `"english"`, a folded word in the English stop word
//!    list ([`ENGLISH_STOP_WORDS`], the Snowball project's list) is
//!    dropped, and the others are stemmed with the Snowball English
//!    (Porter2) stemmer (`rust-stemmers`): `running` → `run`, `shops` →
//!    `shop`; with `"none"` every word is a term as folded, nothing dropped;
//! 4. a term longer than [`MAX_TERM_BYTES`] bytes is cut to that length (at a
//!    character boundary).
//!
//! A `$text` search with `$caseSensitive` or `$diacriticSensitive` keeps
//! that dimension unfolded when it checks the documents the index found
//! (see [`TextSearch`]).
//!
//! # Scores
//!
//! Each indexed string (each string element of an array separately) of a
//! field with weight `w` adds to the document's score of each of its terms
//! `t`: `w × freq(t) × (0.5 + 0.5 × count(t) / n) × adj`, where `n` is the
//! number of terms of the string, `count(t)` how many of them are `t`,
//! `freq(t) = 1 + 1/2 + … + 1/2^(count−1)` (repeats count less and less),
//! and `adj` is 1.1 when the whole string, folded, is the term itself and 1
//! otherwise. This is MongoDB's formula (its text index version 3). The
//! index stores each (term, document) score, so a search's score of a
//! document — the sum of its scores for the search's distinct positive
//! terms, phrase words included — needs no document read.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use unicode_normalization::char::is_combining_mark;
use unicode_normalization::UnicodeNormalization;
use unicode_segmentation::UnicodeSegmentation;

use super::codec::{self, ValueRef};
use super::error::{DocResult, DocumentError};
use super::keys::{self, SortOrder};
use super::path::{self, FieldPath, LookupMode};
use super::planner::Snapshot;
use super::value::{Document, Value};
use crate::seam::SeamTable;

/// The longest term, in bytes of UTF-8; a longer word is cut (at a
/// character boundary) to this length, in the index and in searches.
pub const MAX_TERM_BYTES: usize = 128;

/// The largest weight of a field of a text index (MongoDB's bound).
pub const MAX_TEXT_WEIGHT: u32 = 99_999;

/// The English stop words (the Snowball project's English list): dropped
/// from indexed text and from searches with the language `"english"`.
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "a",
    "about",
    "above",
    "after",
    "again",
    "against",
    "all",
    "am",
    "an",
    "and",
    "any",
    "are",
    "aren't",
    "as",
    "at",
    "be",
    "because",
    "been",
    "before",
    "being",
    "below",
    "between",
    "both",
    "but",
    "by",
    "can't",
    "cannot",
    "could",
    "couldn't",
    "did",
    "didn't",
    "do",
    "does",
    "doesn't",
    "doing",
    "don't",
    "down",
    "during",
    "each",
    "few",
    "for",
    "from",
    "further",
    "had",
    "hadn't",
    "has",
    "hasn't",
    "have",
    "haven't",
    "having",
    "he",
    "he'd",
    "he'll",
    "he's",
    "her",
    "here",
    "here's",
    "hers",
    "herself",
    "him",
    "himself",
    "his",
    "how",
    "how's",
    "i",
    "i'd",
    "i'll",
    "i'm",
    "i've",
    "if",
    "in",
    "into",
    "is",
    "isn't",
    "it",
    "it's",
    "its",
    "itself",
    "let's",
    "me",
    "more",
    "most",
    "mustn't",
    "my",
    "myself",
    "no",
    "nor",
    "not",
    "of",
    "off",
    "on",
    "once",
    "only",
    "or",
    "other",
    "ought",
    "our",
    "ours",
    "ourselves",
    "out",
    "over",
    "own",
    "same",
    "shan't",
    "she",
    "she'd",
    "she'll",
    "she's",
    "should",
    "shouldn't",
    "so",
    "some",
    "such",
    "than",
    "that",
    "that's",
    "the",
    "their",
    "theirs",
    "them",
    "themselves",
    "then",
    "there",
    "there's",
    "these",
    "they",
    "they'd",
    "they'll",
    "they're",
    "they've",
    "this",
    "those",
    "through",
    "to",
    "too",
    "under",
    "until",
    "up",
    "very",
    "was",
    "wasn't",
    "we",
    "we'd",
    "we'll",
    "we're",
    "we've",
    "were",
    "weren't",
    "what",
    "what's",
    "when",
    "when's",
    "where",
    "where's",
    "which",
    "while",
    "who",
    "who's",
    "whom",
    "why",
    "why's",
    "with",
    "won't",
    "would",
    "wouldn't",
    "you",
    "you'd",
    "you'll",
    "you're",
    "you've",
    "your",
    "yours",
    "yourself",
    "yourselves",
];

/// A text language: how words become terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextLanguage {
    /// English stop words dropped, Snowball English stemming.
    English,
    /// Every word a term, as folded.
    None,
}

impl TextLanguage {
    /// Reads a language name: `"english"` (or `"en"`) or `"none"`.
    /// Others are [`DocumentError::InvalidQuery`] naming it.
    pub fn parse(name: &str) -> DocResult<TextLanguage> {
        match name {
            "english" | "en" => Ok(TextLanguage::English),
            "none" => Ok(TextLanguage::None),
            other => Err(DocumentError::InvalidQuery {
                reason: format!(
                    "unsupported text language {other:?}: the languages are \"english\" and \"none\""
                ),
            }),
        }
    }

    /// Its name as stored.
    pub fn name(self) -> &'static str {
        match self {
            TextLanguage::English => "english",
            TextLanguage::None => "none",
        }
    }
}

/// Which dimensions a tokenization folds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Folding {
    case: bool,
    diacritics: bool,
}

/// Both folded: the index's form.
const FOLD_ALL: Folding = Folding {
    case: true,
    diacritics: true,
};

fn stemmer() -> &'static rust_stemmers::Stemmer {
    static STEMMER: OnceLock<rust_stemmers::Stemmer> = OnceLock::new();
    STEMMER.get_or_init(|| rust_stemmers::Stemmer::create(rust_stemmers::Algorithm::English))
}

fn stop_words() -> &'static std::collections::HashSet<&'static str> {
    static STOP: OnceLock<std::collections::HashSet<&'static str>> = OnceLock::new();
    STOP.get_or_init(|| ENGLISH_STOP_WORDS.iter().copied().collect())
}

/// `s` folded as `fold` says (always in NFC).
fn fold_str(s: &str, fold: Folding) -> String {
    let s: String = if fold.diacritics {
        s.nfd()
            .filter(|c| !is_combining_mark(*c))
            .collect::<String>()
            .nfc()
            .collect()
    } else {
        s.nfc().collect()
    };
    if fold.case {
        s.to_lowercase()
    } else {
        s
    }
}

/// Cuts `s` to at most [`MAX_TERM_BYTES`] bytes at a character boundary.
fn cut(mut s: String) -> String {
    if s.len() > MAX_TERM_BYTES {
        let mut end = MAX_TERM_BYTES;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// The terms of `text` in order (repeats kept), folded as `fold` says.
fn tokenize(text: &str, lang: TextLanguage, fold: Folding, out: &mut impl FnMut(String)) {
    for word in text.unicode_words() {
        let folded = fold_str(word, fold);
        if lang == TextLanguage::English {
            let plain = if fold == FOLD_ALL {
                None
            } else {
                Some(fold_str(word, FOLD_ALL))
            };
            if stop_words().contains(plain.as_deref().unwrap_or(&folded)) {
                continue;
            }
            out(cut(stemmer().stem(&folded).into_owned()));
        } else {
            out(cut(folded));
        }
    }
}

/// The terms of `text` under `language` (`"english"` or `"none"`), in
/// order and with repeats, as a text index stores them (see the module
/// docs).
///
/// ```
/// use cairndb::document::text::tokens;
/// assert_eq!(tokens("The Cafés were RUNNING!", "english")?, ["cafe", "run"]);
/// assert_eq!(tokens("The Cafés", "none")?, ["the", "cafes"]);
/// # Ok::<(), cairndb::document::DocumentError>(())
/// ```
pub fn tokens(text: &str, language: &str) -> DocResult<Vec<String>> {
    let lang = TextLanguage::parse(language)?;
    let mut out = Vec::new();
    tokenize(text, lang, FOLD_ALL, &mut |t| out.push(t));
    Ok(out)
}

/// `text` folded as the index folds words (diacritics removed, then
/// lowercased; see the module docs): phrases are compared in this form.
///
/// ```
/// assert_eq!(cairndb::document::text::fold("Crème BRÛLÉE"), "creme brulee");
/// ```
pub fn fold(text: &str) -> String {
    fold_str(text, FOLD_ALL)
}

/// A text index's definition, as stored in its [`IndexInfo`](super::collection::IndexInfo)
/// (FORMAT.md, "Text indexes").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextIndex {
    /// The indexed paths with their weights (1 ..= 99,999), in the order
    /// given.
    pub weights: Vec<(String, u32)>,
    /// The language of the indexed text and the default of searches:
    /// `"english"` or `"none"`.
    pub default_language: String,
}

/// Options of [`Collection::create_text_index`](super::collection::Collection::create_text_index).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextIndexOptions {
    /// A name; default: MongoDB's, the paths joined with `_text`
    /// (`title_text_body_text`).
    pub name: Option<String>,
    /// `"english"` (the default) or `"none"`.
    pub default_language: Option<String>,
}

impl TextIndex {
    /// Checks and builds a definition from paths with weights.
    pub(crate) fn new(fields: &[(&str, u32)], opts: &TextIndexOptions) -> DocResult<TextIndex> {
        let name = opts.name.clone().unwrap_or_else(|| {
            fields
                .iter()
                .map(|(p, _)| format!("{p}_text"))
                .collect::<Vec<_>>()
                .join("_")
        });
        let bad = |reason: String| DocumentError::IndexError {
            collection: String::new(),
            index: name.clone(),
            reason,
        };
        if fields.is_empty() {
            return Err(bad("a text index needs at least one field".into()));
        }
        let mut seen = BTreeSet::new();
        for (p, w) in fields {
            FieldPath::parse(p)?;
            if !(1..=MAX_TEXT_WEIGHT).contains(w) {
                return Err(bad(weight_reason(p, &w.to_string())));
            }
            if !seen.insert(*p) {
                return Err(bad(format!("the field {p:?} is named twice")));
            }
        }
        let lang = TextLanguage::parse(opts.default_language.as_deref().unwrap_or("english"))
            .map_err(|e| bad(e.to_string()))?;
        Ok(TextIndex {
            weights: fields.iter().map(|(p, w)| (p.to_string(), *w)).collect(),
            default_language: lang.name().to_string(),
        })
    }

    /// The default name: `title_text_body_text`.
    pub(crate) fn default_name(&self) -> String {
        self.weights
            .iter()
            .map(|(p, _)| format!("{p}_text"))
            .collect::<Vec<_>>()
            .join("_")
    }

    /// The definition ready to read documents: its paths parsed and its
    /// language resolved, once per index rather than per document.
    pub(crate) fn reader(&self) -> DocResult<TextReader> {
        Ok(TextReader {
            fields: self
                .weights
                .iter()
                .map(|(p, w)| Ok((FieldPath::parse(p)?, *w)))
                .collect::<DocResult<_>>()?,
            lang: TextLanguage::parse(&self.default_language)?,
        })
    }
}

/// Why a weight is refused: MongoDB's rule (its manual, `createIndex`'s
/// text options: "an integer ranging from 1 to 99,999").
fn weight_reason(field: &str, found: &str) -> String {
    format!(
        "the weight of the text field {field:?} must be a positive integer (1 ..= {MAX_TEXT_WEIGHT}), not {found}"
    )
}

/// Reads the weight of the text field `field` as a front end receives it
/// (a JSON value such as MongoDB's `weights: {"title": 10}`): a whole
/// number in 1 ..= [`MAX_TEXT_WEIGHT`]. Zero, a negative or fractional
/// number, or a value of another type is [`DocumentError::IndexError`]
/// naming the field, as MongoDB refuses them.
///
/// ```
/// use cairndb::document::{text::weight_from_value, Value};
/// assert_eq!(weight_from_value("title", &Value::Int(10))?, 10);
/// assert_eq!(weight_from_value("title", &Value::Float(3.0))?, 3);
/// let e = weight_from_value("title", &Value::Int(0)).unwrap_err();
/// assert!(e.to_string().contains("\"title\" must be a positive integer"), "{e}");
/// assert!(weight_from_value("title", &Value::Float(1.5)).is_err());
/// assert!(weight_from_value("title", &Value::from("9")).is_err());
/// # Ok::<(), cairndb::document::DocumentError>(())
/// ```
pub fn weight_from_value(field: &str, v: &Value) -> DocResult<u32> {
    let ok = match v {
        Value::Int(n) => u32::try_from(*n).ok(),
        Value::Float(f) if f.fract() == 0.0 && *f >= 1.0 && *f <= f64::from(MAX_TEXT_WEIGHT) => {
            Some(*f as u32)
        }
        _ => None,
    };
    match ok {
        Some(w) if (1..=MAX_TEXT_WEIGHT).contains(&w) => Ok(w),
        _ => Err(DocumentError::IndexError {
            collection: String::new(),
            index: String::new(),
            reason: weight_reason(field, &v.to_json().to_string()),
        }),
    }
}

/// A text index's definition with its paths parsed (see
/// [`TextIndex::reader`]): what indexing, scoring and checking documents
/// read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TextReader {
    fields: Vec<(FieldPath, u32)>,
    lang: TextLanguage,
}

impl TextReader {
    /// Calls `f` with every string the index reads in `doc` (each string
    /// element of an array separately), with its field's weight.
    fn each_string<'a>(
        &self,
        doc: ValueRef<'a>,
        f: &mut impl FnMut(&'a str, u32),
    ) -> DocResult<()> {
        for (path, w) in &self.fields {
            path::lookup_each(doc, path.segments(), LookupMode::Index, &mut |v| {
                if let ValueRef::String(s) = v {
                    f(s, *w);
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// The document's score of each of its terms (see the module docs).
    pub(crate) fn scores(&self, doc: ValueRef<'_>) -> DocResult<BTreeMap<String, f64>> {
        let mut out = BTreeMap::new();
        self.each_string(doc, &mut |s, w| {
            score_string(s, f64::from(w), self.lang, &mut out)
        })?;
        Ok(out)
    }

    /// Whether `a` and `b` (encoded documents) hold the same indexed
    /// strings with the same weights: then their entries are the same and
    /// neither needs tokenizing.
    pub(crate) fn same_text(&self, a: &[u8], b: &[u8]) -> DocResult<bool> {
        if a == b {
            return Ok(true);
        }
        let mut sa = Vec::new();
        self.each_string(codec::value_ref(a)?, &mut |s, w| sa.push((s, w)))?;
        let mut i = 0;
        let mut same = true;
        self.each_string(codec::value_ref(b)?, &mut |s, w| {
            same &= sa.get(i) == Some(&(s, w));
            i += 1;
        })?;
        Ok(same && i == sa.len())
    }
}

/// Adds one string's term scores to `out` (MongoDB's formula, module docs).
fn score_string(raw: &str, weight: f64, lang: TextLanguage, out: &mut BTreeMap<String, f64>) {
    // Per term: (count, freq, the last repeat's divisor).
    let mut per: BTreeMap<String, (u32, f64, f64)> = BTreeMap::new();
    let mut n = 0u32;
    tokenize(raw, lang, FOLD_ALL, &mut |t| {
        let e = per.entry(t).or_insert((0, 0.0, 0.0));
        e.2 = if e.0 == 0 { 1.0 } else { e.2 * 2.0 };
        e.0 += 1;
        e.1 += 1.0 / e.2;
        n += 1;
    });
    if n == 0 {
        return;
    }
    let whole = fold_str(raw, FOLD_ALL);
    for (term, (count, freq, _)) in per {
        let coeff = 0.5 * f64::from(count) / f64::from(n) + 0.5;
        let adj = if whole == term { 1.1 } else { 1.0 };
        *out.entry(term).or_insert(0.0) += weight * freq * coeff * adj;
    }
}

/// The entry key of `term` for the document with `_id` key `idk`.
fn entry_key(term: &str, idk: &[u8]) -> DocResult<Vec<u8>> {
    let mut k = term_prefix(term)?;
    k.extend_from_slice(idk);
    Ok(k)
}

/// The keys of every entry of `term`: its string component.
fn term_prefix(term: &str) -> DocResult<Vec<u8>> {
    let mut k = Vec::with_capacity(term.len() + 3);
    keys::encode_component(
        &Value::String(term.to_string()),
        SortOrder::Ascending,
        &mut k,
    )?;
    Ok(k)
}

/// A text index entry: its key and value (the score, f64 little-endian).
pub(crate) type TextEntry = (Vec<u8>, [u8; 8]);

/// The text index entries of an encoded document, in key order (FORMAT.md,
/// "Text indexes").
pub(crate) fn entries(reader: &TextReader, doc: &[u8], idk: &[u8]) -> DocResult<Vec<TextEntry>> {
    let scores = reader.scores(codec::value_ref(doc)?)?;
    let mut out = Vec::with_capacity(scores.len());
    for (term, score) in scores {
        out.push((entry_key(&term, idk)?, score.to_le_bytes()));
    }
    // Components are prefix-free and order as their strings: the keys are
    // in term order already.
    Ok(out)
}

/// A `$text` search as written: `{"$search": "...", "$language": ...,
/// "$caseSensitive": false, "$diacriticSensitive": false}`.
///
/// The search string holds words and quoted phrases. A word is searched
/// as its terms (see the module docs; `coffee-shop` is two words); the
/// search matches documents holding **any** of the positive terms (those of
/// the words not marked `-`, and of the phrases not marked `-`), none of
/// the negated terms (`-decaf`), **every** phrase (`"cold brew"`: a
/// substring of one indexed string, compared folded) and none of the
/// negated phrases (`-"instant coffee"`). A search with no positive term
/// (only stop words or negations) matches nothing. `$caseSensitive` and
/// `$diacriticSensitive` keep case or diacritics when the documents the
/// index found are checked: then one positive term must appear with the
/// same case (diacritics), a negated term excludes only that form, and
/// phrases are compared unfolded in that dimension.
#[derive(Debug, Clone, PartialEq)]
pub struct TextSearch {
    /// The search string.
    pub search: String,
    /// The language of the search (default: the index's).
    pub language: Option<String>,
    /// `$caseSensitive`.
    pub case_sensitive: bool,
    /// `$diacriticSensitive`.
    pub diacritic_sensitive: bool,
}

fn invalid(reason: impl Into<String>) -> DocumentError {
    DocumentError::InvalidQuery {
        reason: reason.into(),
    }
}

impl TextSearch {
    /// Reads the operand of `$text`.
    pub(crate) fn parse(v: Value) -> DocResult<TextSearch> {
        let Value::Object(d) = v else {
            return Err(DocumentError::InvalidOperand {
                operator: "$text".into(),
                expected: "an object with $search",
                found: v.kind().name().to_string(),
            });
        };
        let mut out = TextSearch {
            search: String::new(),
            language: None,
            case_sensitive: false,
            diacritic_sensitive: false,
        };
        let mut has_search = false;
        for (k, v) in d {
            let flag = |v: &Value| match v {
                Value::Bool(b) => Ok(*b),
                other => Err(DocumentError::InvalidOperand {
                    operator: k.clone(),
                    expected: "a boolean",
                    found: other.kind().name().to_string(),
                }),
            };
            match k.as_str() {
                "$search" => match v {
                    Value::String(s) => {
                        out.search = s;
                        has_search = true;
                    }
                    other => {
                        return Err(DocumentError::InvalidOperand {
                            operator: "$search".into(),
                            expected: "a string",
                            found: other.kind().name().to_string(),
                        })
                    }
                },
                "$language" => match v {
                    Value::String(s) => {
                        TextLanguage::parse(&s)?;
                        out.language = Some(s);
                    }
                    other => {
                        return Err(DocumentError::InvalidOperand {
                            operator: "$language".into(),
                            expected: "a string",
                            found: other.kind().name().to_string(),
                        })
                    }
                },
                "$caseSensitive" => out.case_sensitive = flag(&v)?,
                "$diacriticSensitive" => out.diacritic_sensitive = flag(&v)?,
                _ => {
                    return Err(DocumentError::UnknownOperator {
                        operator: k,
                        context: "$text (its fields are $search, $language, $caseSensitive, $diacriticSensitive)",
                    })
                }
            }
        }
        if !has_search {
            return Err(invalid("$text needs $search"));
        }
        Ok(out)
    }

    /// The operand as written.
    pub(crate) fn to_value(&self) -> Value {
        let mut d = Document::new().with("$search", self.search.clone());
        if let Some(l) = &self.language {
            d.insert("$language", l.clone());
        }
        if self.case_sensitive {
            d.insert("$caseSensitive", true);
        }
        if self.diacritic_sensitive {
            d.insert("$diacriticSensitive", true);
        }
        Value::Object(d)
    }
}

/// The parts of a search string: words and phrases, each negated or not.
#[derive(Debug, Default)]
struct Parsed<'s> {
    words: Vec<(&'s str, bool)>,
    phrases: Vec<(&'s str, bool)>,
}

/// Splits a search string (MongoDB's rules): a `"` opens a phrase that
/// runs to the next `"` (or the end), negated when a `-` is right before
/// the quote at the start of a word; outside phrases, whitespace separates
/// words, and a word starting with `-` is negated (a `-` inside a word
/// separates words, as any punctuation).
fn split_search(s: &str) -> Parsed<'_> {
    let mut out = Parsed::default();
    let mut rest = s;
    loop {
        rest = rest.trim_start();
        if rest.is_empty() {
            break;
        }
        let (negated, body) = match rest.strip_prefix('-') {
            Some(b) => (true, b),
            None => (false, rest),
        };
        if let Some(after) = body.strip_prefix('"') {
            let end = after.find('"').unwrap_or(after.len());
            out.phrases.push((&after[..end], negated));
            rest = after.get(end + 1..).unwrap_or("");
            continue;
        }
        // A word runs to whitespace or a quote.
        let end = body
            .find(|c: char| c.is_whitespace() || c == '"')
            .unwrap_or(body.len());
        out.words.push((&body[..end], negated));
        rest = &body[end..];
    }
    out
}

/// A search resolved against a text index: its terms and phrases.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct BoundText {
    /// The index's name.
    pub index: String,
    /// Its definition, read once.
    reader: TextReader,
    /// Positive terms, folded as the index stores them (index lookups and
    /// scores).
    pub terms: BTreeSet<String>,
    /// Positive terms folded as the search says (checked on documents).
    match_terms: BTreeSet<String>,
    /// Negated terms, folded as the search says.
    negated: BTreeSet<String>,
    /// Phrases and negated phrases, folded as the search says.
    phrases: Vec<String>,
    negated_phrases: Vec<String>,
    fold: Folding,
}

impl BoundText {
    /// Resolves `search` against the text index `index` read by `reader`.
    pub(crate) fn new(
        search: &TextSearch,
        index: &str,
        reader: &TextReader,
    ) -> DocResult<BoundText> {
        let doc_lang = reader.lang;
        let lang = match &search.language {
            Some(l) => TextLanguage::parse(l)?,
            None => doc_lang,
        };
        let fold = Folding {
            case: !search.case_sensitive,
            diacritics: !search.diacritic_sensitive,
        };
        let parsed = split_search(&search.search);
        let mut b = BoundText {
            index: index.to_string(),
            reader: reader.clone(),
            terms: BTreeSet::new(),
            match_terms: BTreeSet::new(),
            negated: BTreeSet::new(),
            phrases: Vec::new(),
            negated_phrases: Vec::new(),
            fold,
        };
        let add = |text: &str, negated: bool, b: &mut BoundText| {
            if negated {
                tokenize(text, lang, fold, &mut |t| {
                    b.negated.insert(t);
                });
            } else {
                tokenize(text, lang, FOLD_ALL, &mut |t| {
                    b.terms.insert(t);
                });
                tokenize(text, lang, fold, &mut |t| {
                    b.match_terms.insert(t);
                });
            }
        };
        for (w, negated) in &parsed.words {
            add(w, *negated, &mut b);
        }
        for (p, negated) in &parsed.phrases {
            let folded = fold_str(p, fold);
            if folded.trim().is_empty() {
                continue;
            }
            if *negated {
                b.negated_phrases.push(folded);
            } else {
                add(p, false, &mut b);
                b.phrases.push(folded);
            }
        }
        Ok(b)
    }

    /// Whether the document matches the search (module docs of
    /// [`TextSearch`]); reads only the indexed fields.
    pub(crate) fn matches(&self, doc: ValueRef<'_>) -> DocResult<bool> {
        if self.terms.is_empty() {
            return Ok(false);
        }
        let mut strings = Vec::new();
        self.reader.each_string(doc, &mut |s, _| strings.push(s))?;
        let mut have = BTreeSet::new();
        for s in &strings {
            tokenize(s, self.reader.lang, self.fold, &mut |t| {
                have.insert(t);
            });
        }
        if self.match_terms.is_disjoint(&have) || !self.negated.is_disjoint(&have) {
            return Ok(false);
        }
        if self.phrases.is_empty() && self.negated_phrases.is_empty() {
            return Ok(true);
        }
        let folded: Vec<String> = strings.iter().map(|s| fold_str(s, self.fold)).collect();
        let found = |p: &String| folded.iter().any(|s| s.contains(p.as_str()));
        Ok(self.phrases.iter().all(found) && !self.negated_phrases.iter().any(found))
    }

    /// The terms as the plan shows them.
    pub(crate) fn describe(&self) -> String {
        let mut parts: Vec<String> = self.terms.iter().map(|t| format!("{t:?}")).collect();
        parts.extend(self.negated.iter().map(|t| format!("-{t:?}")));
        parts.extend(self.phrases.iter().map(|p| format!("phrase {p:?}")));
        parts.extend(
            self.negated_phrases
                .iter()
                .map(|p| format!("-phrase {p:?}")),
        );
        parts.join(" ")
    }
}

/// The `$text` condition of a filter (see [`TextSearch`]). Filters match
/// it only once the planner has resolved it against the collection's text
/// index; evaluated on its own it is [`DocumentError::InvalidQuery`].
#[derive(Debug, Clone)]
pub struct TextFilter {
    /// The search as written.
    pub search: TextSearch,
    pub(crate) bound: Option<Arc<BoundText>>,
}

impl PartialEq for TextFilter {
    fn eq(&self, other: &Self) -> bool {
        self.search == other.search
    }
}

impl TextFilter {
    pub(crate) fn new(search: TextSearch) -> TextFilter {
        TextFilter {
            search,
            bound: None,
        }
    }

    /// Evaluates on an encoded document.
    pub(crate) fn matches(&self, doc: ValueRef<'_>) -> DocResult<bool> {
        match &self.bound {
            Some(b) => b.matches(doc),
            None => Err(invalid(
                "$text is answered with a text index: it is allowed in the filter of a query \
                 (find, count, update, delete) and in a first $match stage, not here",
            )),
        }
    }
}

/// The documents a bound search's positive terms find in the text index
/// table `table`: each `_id` key with its score (the sum of its entries'
/// scores), and the entries read.
pub(crate) fn search_index<S: Snapshot + ?Sized>(
    r: &S,
    table: &str,
    bound: &BoundText,
) -> DocResult<(HashMap<Vec<u8>, f64>, u64)> {
    let mut scores: HashMap<Vec<u8>, f64> = HashMap::new();
    let mut examined = 0u64;
    let Some(t) = r.table(table)? else {
        return Ok((scores, 0));
    };
    for term in &bound.terms {
        let p = term_prefix(term)?;
        for item in t.range::<&[u8]>(p.as_slice()..)? {
            let (k, v) = item?;
            let k = k.value();
            if !k.starts_with(&p) {
                break;
            }
            examined += 1;
            let score = decode_score(v.value()).ok_or_else(|| {
                DocumentError::Custom(format!(
                    "text index table {table}: an entry's value is {} bytes, not 8",
                    v.value().len()
                ))
            })?;
            *scores.entry(k[p.len()..].to_vec()).or_insert(0.0) += score;
        }
    }
    Ok((scores, examined))
}

/// A stored score.
pub(crate) fn decode_score(v: &[u8]) -> Option<f64> {
    Some(f64::from_le_bytes(v.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::collection::meta_in;
    use crate::document::Document;

    #[test]
    fn tokenizer_folds_drops_stop_words_and_stems() {
        assert_eq!(
            tokens("The Cafés were RUNNING, naïvely; e-mail don't", "english").unwrap(),
            ["cafe", "run", "naiv", "e", "mail"]
        );
        assert_eq!(
            tokens("The Cafés were", "none").unwrap(),
            ["the", "cafes", "were"]
        );
        assert_eq!(
            tokens("Ångström ŁÓDŹ", "none").unwrap(),
            ["angstrom", "łodz"]
        );
        let long = "x".repeat(300);
        assert_eq!(tokens(&long, "none").unwrap()[0].len(), MAX_TERM_BYTES);
        let multi = "é".repeat(100);
        assert!(tokens(&multi, "none").unwrap()[0].len() <= MAX_TERM_BYTES);
        assert!(tokens("x", "french").is_err());
    }

    #[test]
    fn search_strings_split_as_mongodb() {
        let p = split_search(r#"coffee -decaf "cold brew" -"instant coffee" pre-market "open"#);
        assert_eq!(
            p.words,
            [("coffee", false), ("decaf", true), ("pre-market", false)]
        );
        assert_eq!(
            p.phrases,
            [
                ("cold brew", false),
                ("instant coffee", true),
                ("open", false)
            ]
        );
    }

    #[test]
    fn scores_follow_mongodb_formula() {
        let spec = TextIndex::new(&[("t", 2)], &TextIndexOptions::default()).unwrap();
        let doc = crate::document::to_vec(&Document::new().with("t", "shop shops coffee")).unwrap();
        let s = spec
            .reader()
            .unwrap()
            .scores(codec::value_ref(&doc).unwrap())
            .unwrap();
        // "shop" twice of 3 terms: 2 × (1 + 1/2) × (0.5 + 0.5 × 2/3).
        assert_eq!(s["shop"], 2.0 * 1.5 * (0.5 + 0.5 * 2.0 / 3.0));
        assert_eq!(s["coffe"], 2.0 * (0.5 + 0.5 / 3.0));
        let doc = crate::document::to_vec(&Document::new().with("t", "Coffee")).unwrap();
        let s = spec
            .reader()
            .unwrap()
            .scores(codec::value_ref(&doc).unwrap())
            .unwrap();
        // The whole string is not the stem: no boost; "tea" is.
        assert_eq!(s["coffe"], 2.0);
        let doc = crate::document::to_vec(&Document::new().with("t", "TEA")).unwrap();
        let s = spec
            .reader()
            .unwrap()
            .scores(codec::value_ref(&doc).unwrap())
            .unwrap();
        assert_eq!(s["tea"], 2.0 * 1.1);
    }

    #[test]
    fn a_text_index_puts_its_collection_at_format_4_until_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = crate::Database::create(dir.path().join("f.cairn")).unwrap();
        let c = db.collection::<Document>("c");
        c.insert(&Document::new().with("t", "hello")).unwrap();
        let format = || {
            meta_in(&db.begin_read().unwrap(), "c")
                .unwrap()
                .unwrap()
                .format
        };
        assert_eq!(format(), 3);
        let info = c
            .create_text_index(&[("t", 1)], TextIndexOptions::default())
            .unwrap();
        assert_eq!(format(), 4);
        assert!(c.drop_index(&info.name).unwrap());
        assert_eq!(format(), 3);
    }
}
