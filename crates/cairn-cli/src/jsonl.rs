//! The JSON-lines format of `cairn dump` and `cairn load`: one object per
//! entry, `{"table":"T","key":"…","value":"…"}`, with `key_b64` / `value_b64`
//! (standard base64, padded) in place of `key` / `value` when the bytes are
//! not valid UTF-8.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

#[derive(Serialize)]
struct LineOut<'a> {
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LineIn {
    table: String,
    key: Option<String>,
    key_b64: Option<String>,
    value: Option<String>,
    value_b64: Option<String>,
}

/// One entry of a dump.
#[derive(Debug, PartialEq, Eq)]
pub struct Entry {
    pub table: String,
    pub key: Vec<u8>,
    pub value: Vec<u8>,
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
    serde_json::to_string(&LineOut {
        table,
        key,
        key_b64,
        value,
        value_b64,
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
pub fn decode(line: &str) -> Result<Entry, String> {
    let l: LineIn = serde_json::from_str(line).map_err(|e| format!("not a dump entry: {e}"))?;
    Ok(Entry {
        key: field("key", l.key, l.key_b64)?,
        value: field("value", l.value, l.value_b64)?,
        table: l.table,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_binary_round_trip() {
        let line = encode("t", b"k\n\"", &[0xff, 0, 1]).unwrap();
        assert_eq!(line, r#"{"table":"t","key":"k\n\"","value_b64":"/wAB"}"#);
        let e = decode(&line).unwrap();
        assert_eq!(e.key, b"k\n\"");
        assert_eq!(e.value, [0xff, 0, 1]);
    }

    #[test]
    fn malformed_lines_are_rejected() {
        assert!(decode("{").is_err());
        assert!(decode(r#"{"table":"t","key":"a"}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","key_b64":"YQ==","value":""}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value_b64":"!!"}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value":"","extra":1}"#).is_err());
        assert!(decode(r#"{"table":"t","key":"a","value":""}"#).is_ok());
    }
}
