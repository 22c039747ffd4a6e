//! Documents: JSON-like values, their compact binary encoding, and the
//! order-preserving index key encoding. A layer over the public KV API only:
//! nothing here sees a page.
//!
//! - [`value`]: [`Value`], [`Document`], [`ObjectId`] and their JSON forms.
//! - [`json`]: [`Document`] to and from `serde_json` values and JSON text.
//! - [`codec`]: the stored encoding; serde `Encoder` / `Decoder` that map
//!   typed values straight to and from bytes; borrowed [`ValueRef`] views.
//! - [`path`]: dotted field paths and field lookup in encoded bytes with
//!   MongoDB multikey semantics.
//! - [`keys`]: order-preserving index keys and the value order they follow.
//! - [`filter`]: the query filter language ([`Filter`], [`Cond`]) and its
//!   evaluation on encoded and decoded documents.
//! - [`update`]: update documents ([`Update`]): operators and replacements.
//! - [`projection`]: which fields a query returns ([`Projection`]).
//! - [`sort`]: sort specifications and the document order ([`SortSpec`]).
//! - [`snapshot`]: read-only views of collections in one read snapshot
//!   ([`SnapshotCollection`], from [`ReadTransaction::collection`](crate::ReadTransaction::collection)).
//! - [`aggregate`]: the aggregation pipeline ([`Pipeline`]) and `distinct`.
//! - [`changes`]: change streams ([`ChangeStream`]) over the change log.
//! - [`ttl`]: TTL indexes' expiry and the [`Clock`] they read.
//! - [`text`]: text indexes: the tokenizer, scores and `$text` search.
//!
//! Any serde type reads documents back, `serde_json::Value` included: a
//! generated id (an [`ObjectId`]) reaches a visitor that asks for bytes or
//! for the id's own type as its 12 bytes, and one that asks for anything
//! else, such as `serde_json::Value`'s, as MongoDB Extended JSON,
//! `{"$oid": "<24 lowercase hex digits>"}` (the form [`Value::to_json`]
//! writes and filters accept). Binary values (`Value::Binary`) are bytes
//! to every visitor, so `serde_json::Value` cannot read a document that
//! holds one; read it as [`Document`].
//!
//! The byte formats are in FORMAT.md, "Documents: value encoding and index
//! keys (layer format v1)".

pub mod aggregate;
pub mod changes;
pub mod codec;
pub mod collection;
mod cover;
pub mod cursor;
mod error;
pub mod filter;
pub mod json;
pub mod keys;
pub mod path;
mod plan_cache;
pub mod planner;
pub mod projection;
pub mod query;
pub mod snapshot;
pub mod sort;
pub mod text;
pub mod ttl;
pub mod update;
pub mod value;

#[cfg(test)]
pub(crate) mod gen;
#[cfg(test)]
mod testing;

pub use aggregate::{
    AggregateExplain, AggregateOptions, Aggregation, IntoPipeline, Pipeline, DEFAULT_MEMORY_LIMIT,
};
pub use changes::{
    ChangeStream, ChangeStreamOptions, FullDocument, ResumeToken, DEFAULT_CHANGE_LOG_ENTRIES,
};
pub use codec::{
    decode_value, encode_into, encode_value, from_slice, to_vec, ArrayRef, ObjectRef, ValueRef,
    MAX_DEPTH,
};
pub use collection::{
    BulkResult, Collection, CollectionDefinition, IndexDefinition, IndexInfo, IndexOptions,
    TxnCollection, MAX_DOCUMENT_BYTES,
};
pub use cursor::Results;
pub use error::{DocResult, DocumentError};
pub use filter::{Cond, ElemMatch, ExprFilter, Filter, RegexCond};
pub use keys::SortOrder;
pub use path::{FieldPath, LookupMode};
pub use planner::{Hint, Snapshot};
pub use projection::Projection;
pub use query::{
    Explain, FindOneAndOptions, FindOptions, IntoFilter, IntoUpdate, ReturnDocument, UpdateOptions,
    UpdateResult,
};
pub use snapshot::SnapshotCollection;
pub use sort::SortSpec;
pub use text::{TextFilter, TextIndex, TextIndexOptions, TextSearch};
pub use ttl::{Clock, ManualClock, SystemClock};
pub use update::{Update, UpdateOp};
pub use value::{Document, ObjectId, Value, ValueKind};
