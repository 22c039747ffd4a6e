//! The document layer's error family. Decoders name the byte offset where the
//! input stopped making sense; nothing in this layer panics on bad bytes.
//! Errors of the engine underneath arrive as [`DocumentError::Core`].

use std::fmt;

use crate::error::CoreError;

/// Result alias for the document layer.
pub type DocResult<T> = std::result::Result<T, DocumentError>;

/// Every error the document layer returns.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DocumentError {
    /// The storage engine underneath failed (I/O, corruption, a limit, a
    /// transaction error): see [`CoreError`].
    #[error(transparent)]
    Core(#[from] CoreError),

    /// A write would give a unique index (or `_id`) a second entry with the
    /// same value; nothing of the operation was written.
    #[error(
        "duplicate key in collection {collection:?}, index {index:?}: {value}{}",
        document.as_ref().map(|d| format!(" (document _id {d})")).unwrap_or_default()
    )]
    DuplicateKey {
        /// The collection.
        collection: String,
        /// The index (`_id` for the primary key).
        index: String,
        /// The duplicated value, as JSON.
        value: String,
        /// The `_id`, as JSON, of the document refused its entry (a
        /// secondary index; `None` for `_id` itself, whose value is it).
        document: Option<String>,
    },

    /// The collection does not exist.
    #[error("collection {0:?} does not exist")]
    CollectionNotFound(String),

    /// A rename onto a collection that exists (without `drop_target`), or
    /// onto itself.
    #[error("collection {0:?} already exists")]
    CollectionExists(String),

    /// A collection name that breaks the naming rules in [`crate::limits`].
    #[error("invalid collection name {name:?}: {reason}")]
    InvalidCollectionName {
        /// The rejected name.
        name: String,
        /// Which rule it breaks.
        reason: &'static str,
    },

    /// The index does not exist, or an index of that name already exists
    /// with other options.
    #[error("index {index:?} on collection {collection:?}: {reason}")]
    IndexError {
        /// The collection.
        collection: String,
        /// The index name.
        index: String,
        /// What is wrong.
        reason: String,
    },

    /// A `$text` query on a collection without a text index (MongoDB's
    /// "text index required for $text query").
    #[error("text index required for $text query (collection {collection:?} has none; create one with create_text_index)")]
    TextIndexRequired {
        /// The collection.
        collection: String,
    },

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
    /// Malformed query-language JSON text (filter, update, projection, sort).
    #[error("malformed JSON: {reason}")]
    MalformedJson {
        /// The parser's message, with line and column.
        reason: String,
    },
    /// A `$` name that is not an operator of the filter, update, projection
    /// or sort language where it appears.
    #[error("unknown operator {operator:?} in {context}")]
    UnknownOperator {
        /// The name as written.
        operator: String,
        /// Where it appeared: "filter", "field condition", "update", ...
        context: &'static str,
    },
    /// An operator given an operand of the wrong type.
    #[error("{operator} needs {expected}, found {found}")]
    InvalidOperand {
        /// The operator (`"$in"`, `"$size"`, ...).
        operator: String,
        /// What it accepts.
        expected: &'static str,
        /// What it was given (a type name, or the value for bad numbers).
        found: String,
    },
    /// A filter that is not well formed (not an object, an empty `$and`,
    /// operators mixed with field names, a regular expression that does not
    /// compile, ...), or a `$expr` that fails on a document.
    #[error("invalid filter: {reason}")]
    InvalidQuery {
        /// What was wrong.
        reason: String,
    },
    /// An update document that is not well formed (operators mixed with
    /// fields, `$rename` onto itself, an unsupported `$push` modifier, ...).
    #[error("invalid update: {reason}")]
    InvalidUpdate {
        /// What was wrong.
        reason: String,
    },
    /// Two parts of one update touch the same field, or one touches a
    /// field inside the other's.
    #[error("update paths {path:?} and {other:?} conflict")]
    UpdateConflict {
        /// One path.
        path: String,
        /// The path it conflicts with.
        other: String,
    },
    /// An update path that goes through a value that is not an object (or
    /// an array indexed by a decimal position): `$set` of `a.b` when `a` is 5.
    #[error(
        "cannot use the part {field:?} of path {path:?}: the value there is {found}, not an object"
    )]
    NotTraversable {
        /// The whole path.
        path: String,
        /// The segment that cannot be followed.
        field: String,
        /// The kind of the value met (`"int"`, `"array"`, ...).
        found: &'static str,
    },
    /// An update operator applied to a field of a type it cannot work on
    /// (`$inc` on a string, `$push` on a non-array).
    #[error("{operator} cannot apply to {path:?}: it holds {found}, not {expected}")]
    FieldType {
        /// The operator.
        operator: &'static str,
        /// The field's path.
        path: String,
        /// The type the operator needs.
        expected: &'static str,
        /// The kind of the value found.
        found: &'static str,
    },
    /// Integer arithmetic (`$inc`, `$mul`) beyond the range of `i64`.
    #[error("{operator} on {path:?} overflows a 64-bit integer")]
    IntegerOverflow {
        /// The operator.
        operator: &'static str,
        /// The field's path.
        path: String,
    },
    /// An update that would change (or remove) an existing document's `_id`.
    #[error("the _id of a document cannot change")]
    ImmutableId,
    /// A projection that is not well formed (inclusion mixed with
    /// exclusion, colliding paths, a value that is neither 1 nor 0, ...).
    #[error("invalid projection: {reason}")]
    InvalidProjection {
        /// What was wrong.
        reason: String,
    },
    /// A sort specification that is not well formed.
    #[error("invalid sort: {reason}")]
    InvalidSort {
        /// What was wrong.
        reason: String,
    },
    /// A field name a stored document may not hold: one starting with `$`
    /// (the query and update operators' names) or holding a `.` (the path
    /// separator), which no filter, update or index could reach.
    #[error("field name {name:?} (at {path}) is not allowed in a document: {reason}")]
    InvalidFieldName {
        /// The name.
        name: String,
        /// Where it is: the path of the object that holds it (`(top)` for
        /// the document itself).
        path: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A document that is not an object (an array, a string, ...).
    #[error("a document must be an object, not {found}")]
    NotAnObject {
        /// The kind of value given (`"array"`, `"string"`, ...).
        found: &'static str,
    },
    /// An `_id` that is not a scalar.
    #[error("_id must be a scalar (integer, string, binary, id), not {found}")]
    InvalidId {
        /// The kind of value given.
        found: &'static str,
    },
    /// A document over [`MAX_DOCUMENT_BYTES`](super::MAX_DOCUMENT_BYTES) encoded.
    #[error("the document is {len} bytes, more than the limit of {max}")]
    DocumentTooLarge {
        /// Its encoded length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// An `_id` whose key is longer than a key can be at this page size.
    #[error("the _id is {len} bytes encoded, more than the {max} bytes a key can hold at this page size")]
    IdTooLarge {
        /// Its encoded key length.
        len: usize,
        /// The largest key the page size allows.
        max: usize,
    },
    /// An aggregation pipeline that is not well formed (an unknown stage or
    /// operator, a bad accumulator, an argument of the wrong type), or a
    /// stage that failed on a document (`$add` of a string, `$divide` by
    /// zero, `$replaceRoot` to a non-object). `stage` counts from 0.
    #[error("pipeline stage {stage} ({operator}): {reason}")]
    Pipeline {
        /// The index of the stage in the pipeline (0 for the first).
        stage: usize,
        /// The stage or expression operator at fault (`"$group"`, `"$add"`, ...).
        operator: String,
        /// What was wrong.
        reason: String,
    },
    /// A blocking stage (`$group`, `$sort`, `$lookup`'s foreign
    /// documents) would hold more than the pipeline's memory bound.
    #[error(
        "pipeline stage {stage} ({operator}) needs more than its memory bound of {limit} bytes"
    )]
    PipelineMemoryLimit {
        /// The index of the stage in the pipeline.
        stage: usize,
        /// The stage (`"$group"`, `"$sort"`, `"$lookup"`).
        operator: String,
        /// The bound, in bytes.
        limit: usize,
    },
    /// Watching a collection whose writes are not recorded for change
    /// streams (turn it on with `Collection::enable_change_stream`, or
    /// `cairn watch --enable`).
    #[error("collection {collection:?} has no change stream: turn it on with Collection::enable_change_stream (cairn watch FILE {collection} --enable)")]
    ChangeStreamNotEnabled {
        /// The collection.
        collection: String,
    },
    /// A change stream asked to resume at a position the change log no
    /// longer holds (MongoDB: `ChangeStreamHistoryLost`): the writer trimmed
    /// it to stay within the log's retention.
    #[error("change stream on {collection:?}: the change log no longer holds position {position} (its oldest is {oldest}); start a new stream, or keep more with Database::set_change_log_retention")]
    ChangeStreamHistoryLost {
        /// The collection.
        collection: String,
        /// The position the stream needed next.
        position: u64,
        /// The oldest position the log holds.
        oldest: u64,
    },
    /// A resume token that is not well formed, does not belong to this
    /// database's change log or collection, or cannot be used that way.
    #[error("invalid resume token {token:?}: {reason}")]
    InvalidResumeToken {
        /// The token as given.
        token: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A resume token of another collection's change stream (MongoDB
    /// refuses a token whose collection UUID is not the watched one's).
    #[error("resume token {token:?} belongs to the change stream of {token_collection}, not of {collection:?}: a stream resumes only on the collection its token came from")]
    ResumeTokenOtherCollection {
        /// The token as given.
        token: String,
        /// The collection being watched.
        collection: String,
        /// The token's collection: `"name"` quoted, or `a dropped
        /// collection (id N)` when no collection has its id now.
        token_collection: String,
    },
    /// A change stream's pipeline changed an event's `_id`, its resume
    /// token (MongoDB: `ChangeStreamFatalError`).
    #[error("change stream on {collection:?}: {reason}")]
    ChangeStreamFatal {
        /// The collection.
        collection: String,
        /// What happened.
        reason: String,
    },
    /// A serde-level error: a type mismatch, a missing field, a failed
    /// validating constructor (`#[serde(try_from)]`), ...
    #[error("{0}")]
    Custom(String),
}

impl DocumentError {
    /// Whether this error reports corruption of the file.
    pub fn is_corruption(&self) -> bool {
        matches!(self, DocumentError::Core(e) if e.is_corruption())
    }
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
