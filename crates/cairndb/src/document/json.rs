//! Direct conversions between [`Document`] and `serde_json`: `TryFrom` a
//! `serde_json::Value` (or `Map`), `From` a document into either, and JSON
//! text both ways ([`Document::from_json_str`], [`Document::to_json_string`]).
//!
//! They use the JSON form of [`Value`](super::value) (the same as
//! [`Value::to_json`] / [`Value::from_json`]). What JSON cannot hold as such:
//!
//! | document value | JSON | back |
//! |---|---|---|
//! | `Id` (an [`ObjectId`](super::ObjectId)) | `{"$oid": "<24 hex>"}` | the same id |
//! | `Binary` | `{"$binary": "<base64>"}` | the same bytes |
//! | `Float` NaN / ±infinity | `{"$float": "NaN" / "Infinity" / "-Infinity"}` | the same float |
//! | `Int` (64-bit) | a JSON number, exact | the same `Int`; a JavaScript reader keeps only 53 bits |
//! | `Float` with no fraction (`2.0`) | `2.0` | a `Float` again |
//! | `Date` in the years 1970–9999 | `{"$date": "2024-01-02T03:04:05.678Z"}` | the same date |
//! | `Date` before 1970 or after 9999 | `{"$date": {"$numberLong": "<ms>"}}` | the same date |
//! | `Uuid` | `{"$uuid": "<8-4-4-4-12 hex>"}` | the same UUID |
//!
//! From JSON, numbers that are integers within `i64` become `Int`, larger
//! integers (up to `u64`) become the nearest `Float`, and other numbers
//! `Float`; an object with exactly one key `$oid`, `$binary`, `$float`,
//! `$date` or `$uuid` is the value above (malformed content is
//! [`DocumentError::InvalidJson`]; [`value`](super::value) lists the other
//! input forms MongoDB Extended JSON allows).
//! Nesting deeper than [`MAX_DEPTH`](super::MAX_DEPTH) is refused.
//!
//! **Field order.** A document keeps its fields in order. A
//! `serde_json::Map` keeps insertion order only with serde_json's
//! `preserve_order` feature (this crate's default feature of the same name
//! turns it on; see ARCHITECTURE.md); without it a `Map` is sorted by key,
//! so a document that went through one comes back sorted. The text
//! conversions never go through a `Map` and keep the order either way.
//!
//! ```
//! use cairndb::document::Document;
//! use serde_json::json;
//!
//! let doc = Document::try_from(json!({"_id": {"$oid": "65a1b2c3d4e5f60718293a4b"}, "n": 1}))?;
//! assert_eq!(doc["n"], 1.into());
//! let back: serde_json::Value = doc.clone().into();
//! assert_eq!(back["_id"]["$oid"], "65a1b2c3d4e5f60718293a4b");
//! // Text keeps the field order, whatever serde_json's features.
//! let text = r#"{"z":1,"a":{"$binary":"AAE="}}"#;
//! assert_eq!(Document::from_json_str(text)?.to_json_string(), text);
//! # Ok::<(), cairndb::document::DocumentError>(())
//! ```

use super::error::{DocResult, DocumentError};
use super::value::{Document, Value};

impl Document {
    /// Converts a JSON object (see the module docs for what maps how).
    /// Anything else is [`DocumentError::NotAnObject`].
    pub fn from_json(json: serde_json::Value) -> DocResult<Document> {
        match Value::from_json(json)? {
            Value::Object(d) => Ok(d),
            other => Err(DocumentError::NotAnObject {
                found: other.kind().name(),
            }),
        }
    }

    /// The JSON object of this document (see the module docs).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::Value::Object(self.to_json_map())
    }

    /// The JSON object of this document, as a `serde_json::Map`.
    pub fn to_json_map(&self) -> serde_json::Map<String, serde_json::Value> {
        self.iter()
            .map(|(k, v)| (k.to_string(), v.to_json()))
            .collect()
    }

    /// Parses JSON text into a document, keeping its field order (no
    /// `serde_json::Map` in between). Syntax errors are
    /// [`DocumentError::MalformedJson`]; a value that is not an object, a
    /// repeated field name or a bad `$oid` / `$binary` / `$float` form is
    /// [`DocumentError::InvalidJson`].
    pub fn from_json_str(text: &str) -> DocResult<Document> {
        serde_json::from_str::<Document>(text).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => DocumentError::InvalidJson {
                reason: e.to_string(),
            },
            _ => DocumentError::MalformedJson {
                reason: e.to_string(),
            },
        })
    }

    /// This document as compact JSON text, fields in order (the form of
    /// [`to_json`](Self::to_json)).
    pub fn to_json_string(&self) -> String {
        let mut out = Vec::new();
        // Writing to a Vec cannot fail, and a Document's keys are strings.
        if serde_json::to_writer(&mut out, self).is_err() {
            return self.to_json().to_string();
        }
        String::from_utf8(out).unwrap_or_else(|_| self.to_json().to_string())
    }
}

impl TryFrom<serde_json::Value> for Document {
    type Error = DocumentError;
    /// See [`Document::from_json`].
    fn try_from(json: serde_json::Value) -> DocResult<Document> {
        Document::from_json(json)
    }
}

impl TryFrom<serde_json::Map<String, serde_json::Value>> for Document {
    type Error = DocumentError;
    /// See [`Document::from_json`] (a one-key `$oid` / `$binary` /
    /// `$float` object is a value, not a document: refused).
    fn try_from(map: serde_json::Map<String, serde_json::Value>) -> DocResult<Document> {
        Document::from_json(serde_json::Value::Object(map))
    }
}

impl From<Document> for serde_json::Value {
    /// See [`Document::to_json`].
    fn from(doc: Document) -> serde_json::Value {
        doc.to_json()
    }
}

impl From<&Document> for serde_json::Value {
    /// See [`Document::to_json`].
    fn from(doc: &Document) -> serde_json::Value {
        doc.to_json()
    }
}

impl From<Document> for serde_json::Map<String, serde_json::Value> {
    /// See [`Document::to_json_map`].
    fn from(doc: Document) -> serde_json::Map<String, serde_json::Value> {
        doc.to_json_map()
    }
}

impl From<&Document> for serde_json::Map<String, serde_json::Value> {
    /// See [`Document::to_json_map`].
    fn from(doc: &Document) -> serde_json::Map<String, serde_json::Value> {
        doc.to_json_map()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::ObjectId;
    use serde_json::json;

    /// Every kind of value converts both ways, through `serde_json::Value`
    /// and through text, and the special forms are those documented.
    #[test]
    fn documents_convert_to_and_from_serde_json() {
        let id = ObjectId::parse_hex("65a1b2c3d4e5f60718293a4b").unwrap();
        let doc = Document::new()
            .with("_id", id)
            .with("big", i64::MAX)
            .with("f", 2.0)
            .with("nan", f64::NAN)
            .with("inf", f64::NEG_INFINITY)
            .with("bin", Value::binary(vec![0u8, 1, 255]))
            .with("s", "x")
            .with("n", Value::Null)
            .with("b", true)
            .with("a", vec![Value::from(1), Value::from("y")])
            .with("o", Document::new().with("k", 1));
        let j: serde_json::Value = (&doc).into();
        assert_eq!(j["_id"], json!({"$oid": "65a1b2c3d4e5f60718293a4b"}));
        assert_eq!(j["big"], json!(i64::MAX));
        assert_eq!(j["nan"], json!({"$float": "NaN"}));
        assert_eq!(j["inf"], json!({"$float": "-Infinity"}));
        assert_eq!(j["bin"], json!({"$binary": "AAH/"}));
        let back = Document::try_from(j.clone()).unwrap();
        // NaN != NaN: compare the JSON forms, and the kinds.
        assert_eq!(serde_json::Value::from(&back), j);
        assert_eq!(back["f"], Value::Float(2.0));
        assert_eq!(back["big"], Value::Int(i64::MAX));
        assert_eq!(back["_id"], Value::Id(id));
        let map: serde_json::Map<String, serde_json::Value> = doc.clone().into();
        assert_eq!(Document::try_from(map).unwrap().to_json(), j);
        // Text keeps field order (this document's is not sorted).
        let text = doc.to_json_string();
        assert!(text.starts_with(r#"{"_id":{"$oid":"#), "{text}");
        let again = Document::from_json_str(&text).unwrap();
        assert_eq!(
            again.keys().collect::<Vec<_>>(),
            doc.keys().collect::<Vec<_>>()
        );
        assert_eq!(again.to_json_string(), text);
        // Integers past i64 become the nearest float.
        let d = Document::try_from(json!({"u": u64::MAX})).unwrap();
        assert_eq!(d["u"], Value::Float(u64::MAX as f64));
    }

    #[test]
    fn what_is_not_a_document_is_refused() {
        assert!(matches!(
            Document::try_from(json!([1])),
            Err(DocumentError::NotAnObject { found: "array" })
        ));
        assert!(matches!(
            Document::try_from(json!({"$oid": "65a1b2c3d4e5f60718293a4b"})),
            Err(DocumentError::NotAnObject { found: "id" })
        ));
        assert!(matches!(
            Document::try_from(json!({"a": {"$binary": 5}})),
            Err(DocumentError::InvalidJson { .. })
        ));
        assert!(matches!(
            Document::from_json_str("[1]"),
            Err(DocumentError::InvalidJson { .. })
        ));
        assert!(matches!(
            Document::from_json_str(r#"{"a":1,"a":2}"#),
            Err(DocumentError::InvalidJson { .. })
        ));
        assert!(matches!(
            Document::from_json_str("{oops"),
            Err(DocumentError::MalformedJson { .. })
        ));
    }
}
