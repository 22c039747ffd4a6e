//! The document layer's typed error. Decoders name the byte offset where the
//! input stopped making sense; nothing in this layer panics on bad bytes.

use std::fmt;

/// Result alias for the document layer.
pub type DocResult<T> = std::result::Result<T, DocumentError>;

/// Every error the document layer returns.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The input ended inside a value.
    #[error("unexpected end of input at byte {offset}")]
    UnexpectedEnd {
        /// Offset where more bytes were needed.
        offset: usize,
    },
    /// A byte that is not a known type tag where a value starts.
    #[error("unknown type tag {tag:#04x} at byte {offset}")]
    InvalidTag {
        /// The tag byte found.
        tag: u8,
        /// Its offset.
        offset: usize,
    },
    /// A string or field name that is not valid UTF-8.
    #[error("invalid UTF-8 at byte {offset}")]
    InvalidUtf8 {
        /// Offset of the string's first byte.
        offset: usize,
    },
    /// Structurally invalid bytes (bad length, count, varint, ...).
    #[error("malformed value at byte {offset}: {reason}")]
    Malformed {
        /// Offset of the offending structure.
        offset: usize,
        /// What check failed.
        reason: &'static str,
    },
    /// Bytes left over after the top-level value.
    #[error("{count} trailing bytes after the value at byte {offset}")]
    TrailingBytes {
        /// Offset of the first unexpected byte.
        offset: usize,
        /// How many bytes are left over.
        count: usize,
    },
    /// Containers nested deeper than [`MAX_DEPTH`](super::codec::MAX_DEPTH).
    #[error("nesting deeper than {limit} levels")]
    DepthLimit {
        /// The limit in force.
        limit: usize,
    },
    /// An object holds the same field name twice.
    #[error("duplicate field name {name:?}")]
    DuplicateField {
        /// The repeated name.
        name: String,
    },
    /// A map key that cannot be written as a string.
    #[error("map keys must be strings (or integers, chars, booleans)")]
    KeyMustBeString,
    /// An integer outside the stored range (`i64`).
    #[error("integer {value} is outside the range of i64")]
    IntegerOutOfRange {
        /// The value, as text.
        value: String,
    },
    /// A container over 4 GiB (its length field is 32 bits).
    #[error("container larger than 4 GiB")]
    TooLarge,
    /// A field path that does not parse.
    #[error("invalid field path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// JSON that has no document form (bad `$binary`, `$oid`, `$float`).
    #[error("invalid JSON for a document value: {reason}")]
    InvalidJson {
        /// What was wrong.
        reason: String,
    },
    /// An index key whose bytes do not decode.
    #[error("malformed index key at byte {offset}: {reason}")]
    InvalidKey {
        /// Offset in the key.
        offset: usize,
        /// What check failed.
        reason: &'static str,
    },
    /// A serde-level error: a type mismatch, a missing field, a failed
    /// validating constructor (`#[serde(try_from)]`), ...
    #[error("{0}")]
    Custom(String),
}

impl serde::ser::Error for DocumentError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DocumentError::Custom(msg.to_string())
    }
}

impl serde::de::Error for DocumentError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        DocumentError::Custom(msg.to_string())
    }
}
