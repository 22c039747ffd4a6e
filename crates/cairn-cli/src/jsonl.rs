//! The JSON-lines format of `cairn dump` and `cairn load` (docs/dump-format.md).
//!
//! A whole-database dump starts with a header line,
//! `{"cairn_dump":1,"format_version":…,"page_size":…}`, and ends with an end
//! line, `{"cairn_dump_end":{"tables":N,"entries":M}}`, so that a truncated
//! dump is refused. Between them, each table starts with a schema line
//! naming its declared types, `{"table":"T","key_type":"…","value_type":"…"}`,
//! followed by one line per entry, `{"table":"T","key":"…","value":"…"}`,
//! with `key_b64` / `value_b64` (standard base64, padded) in place of `key`
//! / `value` when the bytes are not valid UTF-8. Schema lines let empty
//! tables and each table's types survive a round trip; `load` also accepts
//! entry lines without one, and table lines without header and end (a
//! `dump --table`, or lines written by hand).

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct EntryOut<'a> {
    table: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    key_b64: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value_b64: Option<String>,
}

#[derive(Serialize)]
struct SchemaOut<'a> {
    table: &'a str,
    key_type: &'a str,
    value_type: &'a str,
}

/// The version of the dump format this build writes and reads.
pub const DUMP_VERSION: u64 = 1;

#[derive(Serialize)]
struct HeaderOut {
    cairn_dump: u64,
    format_version: u32,
    page_size: usize,
}

#[derive(Serialize, Deserialize, Debug, PartialEq, Eq, Clone, Copy)]
#[serde(deny_unknown_fields)]
pub struct Counts {
    pub tables: u64,
    pub entries: u64,
}

#[derive(Serialize)]
struct EndOut {
    cairn_dump_end: Counts,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineIn {
    table: Option<String>,
    cairn_dump: Option<u64>,
    format_version: Option<u32>,
    page_size: Option<usize>,
    cairn_dump_end: Option<Counts>,
    key: Option<String>,
    key_b64: Option<String>,
    value: Option<String>,
    value_b64: Option<String>,
    key_type: Option<String>,
    value_type: Option<String>,
}

/// One entry of a dump.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub table: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
}

/// A table's declared key and value type names.
#[derive(Debug, PartialEq, Eq)]
pub struct Schema {
    pub table: String,
    pub key_type: String,
    pub value_type: String,
}

/// The header of a whole-database dump.
#[derive(Debug, PartialEq, Eq)]
pub struct Header {
    /// The dump format's version ([`DUMP_VERSION`]).
    pub version: u64,
    /// The source file's format version (FORMAT.md).
    pub format_version: u32,
    /// The source file's page size: a restore into a new file uses it, so
    /// every key that fitted fits again.
    pub page_size: usize,
}

/// One line of a dump.
#[derive(Debug, PartialEq, Eq)]
pub enum Line {
    Header(Header),
    Schema(Schema),
    Entry(Entry),
    End(Counts),
}

fn text_or_b64(bytes: &[u8]) -> (Option<&str>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (Some(s), None),
        Err(_) => (None, Some(STANDARD.encode(bytes))),
    }
}

/// The JSON line (without its newline) for one entry.
pub fn encode(table: &str, key: &[u8], value: &[u8]) -> Result<String, serde_json::Error> {
    let (key, key_b64) = text_or_b64(key);
    let (value, value_b64) = text_or_b64(value);
    serde_json::to_string(&EntryOut {
        table,
        key,
        key_b64,
        value,
        value_b64,
    })
}

/// The header line (without its newline) of a whole-database dump.
pub fn encode_header(format_version: u32, page_size: usize) -> Result<String, serde_json::Error> {
    serde_json::to_string(&HeaderOut {
        cairn_dump: DUMP_VERSION,
        format_version,
        page_size,
    })
}

/// The end line (without its newline) of a whole-database dump.
pub fn encode_end(counts: Counts) -> Result<String, serde_json::Error> {
    serde_json::to_string(&EndOut {
        cairn_dump_end: counts,
    })
}

/// The JSON line (without its newline) that declares a table's types.
pub fn encode_schema(
    table: &str,
    key_type: &str,
    value_type: &str,
) -> Result<String, serde_json::Error> {
    serde_json::to_string(&SchemaOut {
        table,
        key_type,
        value_type,
    })
}

fn field(name: &str, text: Option<String>, b64: Option<String>) -> Result<Vec<u8>, String> {
    match (text, b64) {
        (Some(t), None) => Ok(t.into_bytes()),
        (None, Some(b)) => STANDARD
            .decode(b.as_bytes())
            .map_err(|e| format!("\"{name}_b64\" is not valid base64: {e}")),
        (Some(_), Some(_)) => Err(format!(
            "has both \"{name}\" and \"{name}_b64\"; give exactly one"
        )),
        (None, None) => Err(format!("needs \"{name}\" or \"{name}_b64\"")),
    }
}

/// Parses one line of a dump.
pub fn decode(line: &str) -> Result<Line, String> {
    let l: LineIn = serde_json::from_str(line).map_err(|e| format!("not a dump entry: {e}"))?;
    let entry_fields = [
        &l.key,
        &l.key_b64,
        &l.value,
        &l.value_b64,
        &l.key_type,
        &l.value_type,
    ]
    .iter()
    .any(|f| f.is_some())
        || l.table.is_some();
    if let Some(version) = l.cairn_dump {
        if entry_fields || l.cairn_dump_end.is_some() {
            return Err("a header line (with \"cairn_dump\") holds nothing else".into());
        }
        let (Some(format_version), Some(page_size)) = (l.format_version, l.page_size) else {
            return Err(
                "a header line needs \"format_version\" and \"page_size\" beside \"cairn_dump\""
                    .into(),
            );
        };
        return Ok(Line::Header(Header {
            version,
            format_version,
            page_size,
        }));
    }
    if l.format_version.is_some() || l.page_size.is_some() {
        return Err("\"format_version\" and \"page_size\" belong in the header line".into());
    }
    if let Some(counts) = l.cairn_dump_end {
        if entry_fields {
            return Err("an end line (with \"cairn_dump_end\") holds nothing else".into());
        }
        return Ok(Line::End(counts));
    }
    let Some(table) = l.table else {
        return Err("not a dump entry: missing field `table`".into());
    };
    if l.key_type.is_some() || l.value_type.is_some() {
        if [&l.key, &l.key_b64, &l.value, &l.value_b64]
            .iter()
            .any(|f| f.is_some())
        {
            return Err(
                "a schema line (with \"key_type\"/\"value_type\") cannot hold a key or value"
                    .into(),
            );
        }
        let (Some(key_type), Some(value_type)) = (l.key_type, l.value_type) else {
            return Err("a schema line needs both \"key_type\" and \"value_type\"".into());
        };
        return Ok(Line::Schema(Schema {
            table,
            key_type,
            value_type,
        }));
    }
    Ok(Line::Entry(Entry {
        key: field("key", l.key, l.key_b64)?,
        value: field("value", l.value, l.value_b64)?,
        table,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(line: &str) -> Entry {
        match decode(line) {
            Ok(Line::Entry(e)) => e,
            other => panic!("not an entry: {other:?}"),
        }
    }

    #[test]
    fn text_and_binary_round_trip() {
        let line = encode("t", b"k\n\"", &[0xff, 0, 1]).unwrap();
        assert_eq!(line, r#"{"table":"t","key":"k\n\"","value_b64":"/wAB"}"#);
        let e = entry(&line);
        assert_eq!(e.key, b"k\n\"");
        assert_eq!(e.value, [0xff, 0, 1]);
    }

    #[test]
    fn schema_lines_round_trip() {
        let line = encode_schema("t", "(u64,u64)", "&str").unwrap();
        assert_eq!(
            line,
            r#"{"table":"t","key_type":"(u64,u64)","value_type":"&str"}"#
        );
        assert_eq!(
            decode(&line).unwrap(),
            Line::Schema(Schema {
                table: "t".into(),
                key_type: "(u64,u64)".into(),
                value_type: "&str".into(),
            })
        );
    }

    #[test]
    fn malformed_lines_are_rejected() {
        assert!(decode("{").is_err());
        assert!(decode(r#"{"table":"t","key":"a"}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","key_b64":"YQ==","value":""}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value_b64":"!!"}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value":"","extra":1}"#).is_err());
        assert!(decode(r#"{"table":"t","key_type":"u64"}"#).is_err());
        assert!(decode(r#"{"table":"t","value_type":"u64"}"#).is_err());
        assert!(decode(r#"{"table":"t","key_type":"u64","value_type":"u64","key":""}"#).is_err());
        assert!(decode(r#"{"table":"t","key_type":1,"value_type":"u64"}"#).is_err());
        assert!(decode(r#"{"table":"t"}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value":""}"#).is_ok());
        assert!(decode(r#"{"cairn_dump":1}"#).is_err());
        assert!(
            decode(r#"{"cairn_dump":1,"format_version":2,"page_size":4096,"table":"t"}"#).is_err()
        );
        assert!(decode(r#"{"table":"t","key":"a","value":"","page_size":1}"#).is_err());
        assert!(decode(r#"{"cairn_dump_end":{"tables":1}}"#).is_err());
        assert!(decode(r#"{"cairn_dump_end":{"tables":1,"entries":2},"table":"t"}"#).is_err());
    }

    #[test]
    fn header_and_end_lines_round_trip() {
        let h = encode_header(2, 4096).unwrap();
        assert_eq!(h, r#"{"cairn_dump":1,"format_version":2,"page_size":4096}"#);
        assert_eq!(
            decode(&h).unwrap(),
            Line::Header(Header {
                version: 1,
                format_version: 2,
                page_size: 4096
            })
        );
        let c = Counts {
            tables: 3,
            entries: 10,
        };
        let e = encode_end(c).unwrap();
        assert_eq!(e, r#"{"cairn_dump_end":{"tables":3,"entries":10}}"#);
        assert_eq!(decode(&e).unwrap(), Line::End(c));
    }
}
