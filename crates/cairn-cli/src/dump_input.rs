//! `cairn load`'s input, for a file and an etcd prefix alike: the lines of
//! a dump (docs/dump-format.md) read from standard input, numbered, decoded
//! and checked in order. A whole dump's header must be one this build
//! reads (dump format version, page size, the source file's format); a
//! header only as the first line, an end line only after a header, nothing
//! after the end line, and the end line's counts equal to the lines read;
//! a whole dump without its end line is truncated. The loaders see only
//! table and entry lines.

use std::io::BufRead;

use indicatif::ProgressBar;

use crate::jsonl::{self, Counts, Entry, Header, Line, Schema};
use crate::CliError;

/// A table or an entry line of a dump.
pub enum Item {
    Schema(Schema),
    Entry(Entry),
}

/// An error at input line `line`, with nothing committed yet (the loader
/// sets what it committed with [`committed`]).
fn at(line: u64, message: impl Into<String>) -> CliError {
    CliError::AtLine {
        line,
        loaded: 0,
        err: Box::new(CliError::User(message.into())),
    }
}

/// `e` saying that `loaded` entries of earlier lines were committed (an
/// error at a line; other errors are returned as they are).
pub fn committed(e: CliError, loaded: u64) -> CliError {
    match e {
        CliError::AtLine { line, err, .. } => CliError::AtLine { line, loaded, err },
        e => e,
    }
}

/// The lines of a dump on a reader, checked as they are read.
pub struct DumpReader<R> {
    r: R,
    buf: Vec<u8>,
    line_no: u64,
    bar: Option<ProgressBar>,
    header: Option<Header>,
    /// The first line, when it is not a header, with its number.
    pending: Option<(u64, Line)>,
    /// The tables and entries read so far.
    counts: Counts,
    /// The end line's number, once read.
    ended: Option<u64>,
}

impl<R: BufRead> DumpReader<R> {
    /// Reads the first line; a whole dump's header is checked: a dump
    /// format or a source file format newer than this build's, or a page
    /// size it cannot create, is refused. `bar` shows the bytes read.
    pub fn open(r: R, bar: Option<ProgressBar>) -> Result<Self, CliError> {
        let mut reader = DumpReader {
            r,
            buf: Vec::new(),
            line_no: 0,
            bar,
            header: None,
            pending: None,
            counts: Counts {
                tables: 0,
                entries: 0,
            },
            ended: None,
        };
        match reader.read_line()? {
            Some((n, Line::Header(h))) => {
                check_header(&h).map_err(|m| at(n, m))?;
                reader.header = Some(h);
            }
            Some(first) => reader.pending = Some(first),
            None => {}
        }
        Ok(reader)
    }

    /// The header of a whole dump; `None` for table lines alone.
    pub fn header(&self) -> Option<&Header> {
        self.header.as_ref()
    }

    /// The number of the last line read.
    pub fn line_no(&self) -> u64 {
        self.line_no
    }

    /// The progress bar, to update or finish.
    pub fn bar(&self) -> Option<&ProgressBar> {
        self.bar.as_ref()
    }

    /// The next table or entry line with its number; `None` at the end of
    /// the input (a whole dump's end line read).
    pub fn next(&mut self) -> Result<Option<(u64, Item)>, CliError> {
        loop {
            let line = match self.pending.take() {
                Some(l) => Some(l),
                None => self.read_line()?,
            };
            let Some((n, line)) = line else {
                if self.header.is_some() && self.ended.is_none() {
                    return Err(at(
                        self.line_no,
                        "the dump ends without its end line (\"cairn_dump_end\"): it is truncated",
                    ));
                }
                return Ok(None);
            };
            if let Some(end) = self.ended {
                return Err(at(n, format!("a line after the end line (line {end})")));
            }
            match line {
                Line::Header(_) => {
                    return Err(at(
                        n,
                        "a header line (\"cairn_dump\") must be the first line",
                    ))
                }
                Line::End(c) => {
                    if self.header.is_none() {
                        return Err(at(
                            n,
                            "an end line (\"cairn_dump_end\") without a header line",
                        ));
                    }
                    if c != self.counts {
                        return Err(at(
                            n,
                            format!(
                                "the end line counts {} table(s) and {} entries, but the dump \
                                 holds {} and {}",
                                c.tables, c.entries, self.counts.tables, self.counts.entries
                            ),
                        ));
                    }
                    self.ended = Some(n);
                }
                Line::Schema(s) => {
                    self.counts.tables += 1;
                    return Ok(Some((n, Item::Schema(s))));
                }
                Line::Entry(e) => {
                    self.counts.entries += 1;
                    return Ok(Some((n, Item::Entry(e))));
                }
            }
        }
    }

    /// The next non-blank line, decoded, with its number.
    fn read_line(&mut self) -> Result<Option<(u64, Line)>, CliError> {
        loop {
            self.buf.clear();
            let n = self.r.read_until(b'\n', &mut self.buf)?;
            if n == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            if let Some(bar) = &self.bar {
                bar.inc(n as u64);
            }
            let text =
                std::str::from_utf8(&self.buf).map_err(|_| at(self.line_no, "not valid UTF-8"))?;
            if !text.trim().is_empty() {
                let line = jsonl::decode(text).map_err(|m| at(self.line_no, m))?;
                return Ok(Some((self.line_no, line)));
            }
        }
    }
}

/// Whether this build can load a dump with this header.
fn check_header(h: &Header) -> Result<(), String> {
    if h.version > jsonl::DUMP_VERSION {
        return Err(format!(
            "dump format version {} is newer than this cairn reads ({}); use a newer cairn",
            h.version,
            jsonl::DUMP_VERSION
        ));
    }
    if h.format_version > cairndb::FORMAT_VERSION {
        return Err(format!(
            "the dump comes from a file of format version {}, newer than this cairn writes \
             ({}); use a newer cairn",
            h.format_version,
            cairndb::FORMAT_VERSION
        ));
    }
    cairndb::limits::check_page_size(h.page_size).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(input: &str) -> Result<Vec<(u64, String)>, String> {
        let mut r = DumpReader::open(input.as_bytes(), None).map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some((n, item)) = r.next().map_err(|e| e.to_string())? {
            out.push((
                n,
                match item {
                    Item::Schema(s) => format!("schema {}", s.table),
                    Item::Entry(e) => format!("entry {}", e.table),
                },
            ));
        }
        Ok(out)
    }

    const HEADER: &str = "{\"cairn_dump\":1,\"format_version\":3,\"page_size\":4096}\n";
    const SCHEMA: &str = "{\"table\":\"t\",\"key_type\":\"&[u8]\",\"value_type\":\"&[u8]\"}\n";
    const ENTRY: &str = "{\"table\":\"t\",\"key\":\"a\",\"value\":\"1\"}\n";
    const END: &str = "{\"cairn_dump_end\":{\"tables\":1,\"entries\":1}}\n";

    #[test]
    fn a_whole_dump_and_table_lines_read_back() {
        let whole = format!("{HEADER}{SCHEMA}\n{ENTRY}{END}");
        assert_eq!(
            items(&whole).unwrap(),
            [(2, "schema t".to_string()), (4, "entry t".to_string())]
        );
        assert_eq!(
            items(&format!("{ENTRY}{ENTRY}")).unwrap(),
            [(1, "entry t".to_string()), (2, "entry t".to_string())]
        );
        assert_eq!(items("").unwrap(), []);
    }

    #[test]
    fn bad_dumps_are_refused_naming_the_line() {
        let cases = [
            (
                "{\"cairn_dump\":2,\"format_version\":3,\"page_size\":4096}\n".to_string(),
                "line 1: dump format version 2 is newer than this cairn reads (1)",
            ),
            (
                format!(
                    "{{\"cairn_dump\":1,\"format_version\":{},\"page_size\":4096}}\n",
                    cairndb::FORMAT_VERSION + 1
                ),
                "line 1: the dump comes from a file of format version",
            ),
            (
                "{\"cairn_dump\":1,\"format_version\":3,\"page_size\":100}\n".to_string(),
                "line 1: ",
            ),
            (
                format!("{HEADER}{SCHEMA}{ENTRY}"),
                "line 3: the dump ends without its end line",
            ),
            (
                format!("{HEADER}{SCHEMA}{ENTRY}{END}{ENTRY}"),
                "line 5: a line after the end line (line 4)",
            ),
            (
                format!("{SCHEMA}{HEADER}"),
                "line 2: a header line (\"cairn_dump\") must be the first line",
            ),
            (
                format!("{SCHEMA}{END}"),
                "line 2: an end line (\"cairn_dump_end\") without a header line",
            ),
            (
                format!("{HEADER}{SCHEMA}{END}"),
                "line 3: the end line counts 1 table(s) and 1 entries, but the dump holds 1 and 0",
            ),
            (
                "{\"table\":\"t\",\"key\":\"a\"}\n".to_string(),
                "line 1: needs \"value\"",
            ),
        ];
        for (input, message) in cases {
            let err = items(&input).unwrap_err();
            assert!(err.starts_with(message), "{input}: {err}");
        }
        let mut bytes = ENTRY.as_bytes().to_vec();
        bytes.extend_from_slice(b"\xff\n");
        let mut r = DumpReader::open(&bytes[..], None).unwrap();
        assert!(r.next().unwrap().is_some());
        let err = r.next().err().map(|e| committed(e, 7).to_string());
        assert_eq!(
            err.as_deref(),
            Some("line 2: not valid UTF-8 (7 entries from earlier lines were already committed)")
        );
    }
}
