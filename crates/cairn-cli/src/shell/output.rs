//! How results are printed: `.mode json` (pretty, coloured on a terminal),
//! `jsonl` (one compact line per document), `table` (fitted to the
//! terminal's width), `line` (one `field = value` per line) and `csv`.

use std::io::{self, Write};

use serde_json::Value as Json;

/// The output mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Json,
    Jsonl,
    Table,
    Line,
    Csv,
}

impl Mode {
    pub const NAMES: &'static [&'static str] = &["json", "jsonl", "table", "line", "csv"];

    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "json" => Mode::Json,
            "jsonl" => Mode::Jsonl,
            "table" => Mode::Table,
            "line" => Mode::Line,
            "csv" => Mode::Csv,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Mode::Json => "json",
            Mode::Jsonl => "jsonl",
            Mode::Table => "table",
            Mode::Line => "line",
            Mode::Csv => "csv",
        }
    }
}

/// The printing settings.
#[derive(Debug, Clone)]
pub struct Printer {
    pub mode: Mode,
    /// ANSI colours (only when writing to a terminal).
    pub color: bool,
    /// The width tables must fit in, if any.
    pub width: Option<usize>,
}

const KEY: &str = "\x1b[36m";
const STR: &str = "\x1b[32m";
const NUM: &str = "\x1b[33m";
const LIT: &str = "\x1b[35m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

impl Printer {
    /// Prints a batch of rows (objects, usually documents). `first` says
    /// whether this is the first batch of a result (CSV prints its header
    /// then).
    pub fn rows(&self, out: &mut dyn Write, rows: &[Json], first: bool) -> io::Result<()> {
        match self.mode {
            Mode::Json => {
                for r in rows {
                    self.pretty(out, r, 0)?;
                    writeln!(out)?;
                }
            }
            Mode::Jsonl => {
                for r in rows {
                    writeln!(out, "{r}")?;
                }
            }
            Mode::Line => {
                let cols = columns(rows);
                let w = cols.iter().map(|c| c.chars().count()).max().unwrap_or(0);
                for (i, r) in rows.iter().enumerate() {
                    if i > 0 || !first {
                        writeln!(out)?;
                    }
                    for c in &cols {
                        if let Some(v) = r.get(c) {
                            writeln!(out, "{c:>w$} = {}", cell(v))?;
                        }
                    }
                    if !r.is_object() {
                        writeln!(out, "{}", cell(r))?;
                    }
                }
            }
            Mode::Csv => {
                let cols = columns(rows);
                if first {
                    let head: Vec<String> = cols.iter().map(|c| csv_field(c)).collect();
                    writeln!(out, "{}", head.join(","))?;
                }
                for r in rows {
                    let line: Vec<String> = cols
                        .iter()
                        .map(|c| r.get(c).map(|v| csv_field(&cell(v))).unwrap_or_default())
                        .collect();
                    writeln!(out, "{}", line.join(","))?;
                }
            }
            Mode::Table => self.table(out, rows)?,
        }
        Ok(())
    }

    /// Prints one value on its own (a single document, an explain report).
    pub fn value(&self, out: &mut dyn Write, v: &Json) -> io::Result<()> {
        match self.mode {
            Mode::Jsonl => writeln!(out, "{v}"),
            Mode::Json => {
                self.pretty(out, v, 0)?;
                writeln!(out)
            }
            _ if v.is_object() => self.rows(out, std::slice::from_ref(v), true),
            _ => writeln!(out, "{}", cell(v)),
        }
    }

    fn paint(&self, out: &mut dyn Write, color: &str, text: &str) -> io::Result<()> {
        if self.color {
            write!(out, "{color}{text}{RESET}")
        } else {
            write!(out, "{text}")
        }
    }

    /// Pretty JSON, two spaces per level, short arrays of scalars on one
    /// line.
    fn pretty(&self, out: &mut dyn Write, v: &Json, level: usize) -> io::Result<()> {
        let pad = "  ".repeat(level + 1);
        let end_pad = "  ".repeat(level);
        match v {
            Json::Object(m) if m.is_empty() => write!(out, "{{}}"),
            Json::Object(m) => {
                writeln!(out, "{{")?;
                for (i, (k, val)) in m.iter().enumerate() {
                    write!(out, "{pad}")?;
                    self.paint(out, KEY, &Json::String(k.clone()).to_string())?;
                    write!(out, ": ")?;
                    self.pretty(out, val, level + 1)?;
                    if i + 1 < m.len() {
                        write!(out, ",")?;
                    }
                    writeln!(out)?;
                }
                write!(out, "{end_pad}}}")
            }
            Json::Array(a) if a.is_empty() => write!(out, "[]"),
            Json::Array(a) if a.len() <= 8 && a.iter().all(|x| !x.is_object() && !x.is_array()) => {
                write!(out, "[")?;
                for (i, x) in a.iter().enumerate() {
                    if i > 0 {
                        write!(out, ", ")?;
                    }
                    self.pretty(out, x, level + 1)?;
                }
                write!(out, "]")
            }
            Json::Array(a) => {
                writeln!(out, "[")?;
                for (i, x) in a.iter().enumerate() {
                    write!(out, "{pad}")?;
                    self.pretty(out, x, level + 1)?;
                    if i + 1 < a.len() {
                        write!(out, ",")?;
                    }
                    writeln!(out)?;
                }
                write!(out, "{end_pad}]")
            }
            Json::String(_) => self.paint(out, STR, &v.to_string()),
            Json::Number(_) => self.paint(out, NUM, &v.to_string()),
            Json::Bool(_) | Json::Null => self.paint(out, LIT, &v.to_string()),
        }
    }

    fn table(&self, out: &mut dyn Write, rows: &[Json]) -> io::Result<()> {
        let cols = columns(rows);
        if cols.is_empty() {
            for r in rows {
                writeln!(out, "{}", cell(r))?;
            }
            return Ok(());
        }
        let cells: Vec<Vec<String>> = rows
            .iter()
            .map(|r| {
                cols.iter()
                    .map(|c| r.get(c).map(cell).unwrap_or_default())
                    .collect()
            })
            .collect();
        let mut widths: Vec<usize> = cols
            .iter()
            .enumerate()
            .map(|(i, c)| {
                cells
                    .iter()
                    .map(|row| width(&row[i]))
                    .chain([width(c)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        if let Some(limit) = self.width {
            fit(&mut widths, limit);
        }
        let rule: String = widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("+");
        let rule = format!("+{rule}+");
        writeln!(out, "{rule}")?;
        write!(out, "|")?;
        for (c, w) in cols.iter().zip(&widths) {
            let text = pad(&clip(c, *w), *w);
            if self.color {
                write!(out, " {BOLD}{text}{RESET} |")?;
            } else {
                write!(out, " {text} |")?;
            }
        }
        writeln!(out)?;
        writeln!(out, "{rule}")?;
        for row in &cells {
            write!(out, "|")?;
            for (v, w) in row.iter().zip(&widths) {
                write!(out, " {} |", pad(&clip(v, *w), *w))?;
            }
            writeln!(out)?;
        }
        writeln!(out, "{rule}")
    }
}

/// Shrinks the widest columns until the table (with its borders, 3 per
/// column and 1) fits in `limit`, keeping each column at least 3 wide.
fn fit(widths: &mut [usize], limit: usize) {
    let total = |w: &[usize]| w.iter().sum::<usize>() + 3 * w.len() + 1;
    while total(widths) > limit {
        let Some((i, &w)) = widths.iter().enumerate().max_by_key(|(_, w)| **w) else {
            return;
        };
        if w <= 3 {
            return;
        }
        widths[i] = w - 1;
    }
}

fn width(s: &str) -> usize {
    s.chars().count()
}

fn clip(s: &str, w: usize) -> String {
    if width(s) <= w {
        return s.to_string();
    }
    let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
    t.push('…');
    t
}

fn pad(s: &str, w: usize) -> String {
    let n = width(s);
    format!("{s}{}", " ".repeat(w.saturating_sub(n)))
}

/// The fields of the rows, in order of first appearance.
pub fn columns(rows: &[Json]) -> Vec<String> {
    let mut cols: Vec<String> = Vec::new();
    for r in rows {
        if let Json::Object(m) = r {
            for k in m.keys() {
                if !cols.iter().any(|c| c == k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    cols
}

/// A value as a table or CSV cell: strings bare, other values as JSON, and
/// line breaks escaped so that a cell stays on its line.
pub fn cell(v: &Json) -> String {
    let s = match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    };
    s.replace('\n', "\\n").replace('\r', "\\r")
}

/// A CSV field, quoted when it holds a comma, quote or line break.
pub fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) || s.starts_with(' ') || s.ends_with(' ') {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Splits one CSV record (RFC 4180 quoting; no line breaks inside fields).
pub fn csv_split(line: &str) -> Vec<String> {
    let mut fields = Vec::new();
    let mut cur = String::new();
    let mut chars = line.chars().peekable();
    let mut quoted = false;
    while let Some(c) = chars.next() {
        if quoted {
            if c == '"' {
                if chars.peek() == Some(&'"') {
                    cur.push('"');
                    chars.next();
                } else {
                    quoted = false;
                }
            } else {
                cur.push(c);
            }
        } else if c == '"' {
            quoted = true;
        } else if c == ',' {
            fields.push(std::mem::take(&mut cur));
        } else {
            cur.push(c);
        }
    }
    fields.push(cur);
    fields
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn table_fits_the_width() {
        let p = Printer {
            mode: Mode::Table,
            color: false,
            width: Some(30),
        };
        let rows = [json!({"a": 1, "b": "a rather long string value here"})];
        let mut out = Vec::new();
        p.rows(&mut out, &rows, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        for line in text.lines() {
            assert!(line.chars().count() <= 30, "{line:?}");
        }
        assert!(text.contains('…'), "{text}");
    }

    #[test]
    fn csv_round_trip() {
        let f = ["a", "b,c", "say \"hi\""];
        let line: Vec<String> = f.iter().map(|s| csv_field(s)).collect();
        assert_eq!(csv_split(&line.join(",")), f);
    }
}
