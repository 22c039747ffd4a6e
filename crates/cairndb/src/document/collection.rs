//! Collections: named sets of documents with an `_id`, secondary indexes
//! kept in the same transaction as the documents, and the write operations
//! (insert, upsert, replace, update, delete; single and bulk).
//!
//! Storage (FORMAT.md, "Documents: collections and indexes"): the catalog
//! `$docs` maps a collection name to its metadata (id, indexes); the
//! documents of collection `c` live in `$docs.c` keyed by the index-key
//! encoding of their `_id`; index `i` lives in `$docs.c.i`, one entry per
//! (indexed values, `_id`) with an empty value. Every write changes the
//! document and its index entries in one transaction; an operation that
//! fails on a rule (duplicate `_id` or unique value, a bad document) is
//! undone before the error is returned, so nothing of it is written.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::marker::PhantomData;
use std::rc::Rc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::codec::{self, ValueRef};
use super::error::{DocResult, DocumentError};
use super::filter;
use super::keys::{self, SortOrder};
use super::path::{self, FieldPath, LookupMode};
use super::text::{self, TextIndex, TextIndexOptions, TextReader};
use super::value::{Document, ObjectId, Value};
use crate::db::{Database, Durability};
use crate::seam::{SeamRead, SeamTable, SeamTableMut, SeamWrite, LAYER};
use crate::table::TableDefinition;
use crate::txn::WriteTransaction;

/// The catalog of collections: name -> [`CollectionMeta`] (document-encoded).
pub(crate) const CATALOG: TableDefinition<&str, &[u8]> = TableDefinition::internal("$docs");

/// The largest encoded document, in bytes (16 MiB, as MongoDB).
pub const MAX_DOCUMENT_BYTES: usize = 16 << 20;
/// The longest collection name, in bytes of UTF-8.
pub const MAX_COLLECTION_NAME_BYTES: usize = 255;
/// The most indexes on one collection.
pub const MAX_INDEXES: usize = 64;
/// The most index entries one document may produce for one index.
pub const MAX_INDEX_ENTRIES_PER_DOCUMENT: usize = 10_000;

/// Checks a collection name: 1 ..= 255 bytes of UTF-8, no control
/// characters, not starting with `$`.
pub fn check_collection_name(name: &str) -> DocResult<()> {
    let bad = |reason| {
        Err(DocumentError::InvalidCollectionName {
            name: name.to_string(),
            reason,
        })
    };
    if name.is_empty() {
        return bad("a collection name must not be empty");
    }
    if name.len() > MAX_COLLECTION_NAME_BYTES {
        return bad("a collection name must be at most 255 bytes of UTF-8");
    }
    if name.chars().any(char::is_control) {
        return bad("a collection name must not contain control characters");
    }
    if name.starts_with('$') {
        return bad("collection names starting with '$' are reserved");
    }
    Ok(())
}

/// What [`TxnCollection::define_index`] defined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexDefinition {
    /// The index.
    pub info: IndexInfo,
    /// Whether this call added it (`false`: it existed with the same
    /// options).
    pub created: bool,
    /// The collection's data table (its keys are the documents' `_id`
    /// keys, in `_id` order).
    pub data_table: String,
    /// The index's table.
    pub index_table: String,
}

/// One index's definition, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexInfo {
    /// Its name (by default the paths and orders, e.g. `a.b_1_c_-1`).
    pub name: String,
    /// The indexed paths with their order (1 ascending, -1 descending).
    pub fields: Vec<(String, i8)>,
    /// At most one document per indexed value.
    pub unique: bool,
    /// Documents missing every indexed field get no entry.
    pub sparse: bool,
    /// Its number within the collection (names its table).
    pub id: u64,
    /// A TTL index: documents whose indexed date (an integer of
    /// milliseconds since the Unix epoch, or an array holding some) is
    /// more than this many seconds in the past are deleted (see
    /// [`Collection::create_ttl_index`]). Stored only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expire_after_seconds: Option<u64>,
    /// A text index ([`Collection::create_text_index`]): its fields,
    /// weights and language; `fields` is then empty. Stored only when set
    /// (FORMAT.md, "Text indexes").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<TextIndex>,
    /// Its entries include null for a document that reaches values on the
    /// path but also matches `{path: null}` (an array element lacking the
    /// field), as MongoDB's multikey keys do, so null conditions on dotted
    /// paths may use it (FORMAT.md, "Null entries for array elements").
    /// Set by [`Collection::create_index`] on indexes neither unique nor
    /// sparse; indexes created by older builds lack it. Stored only when
    /// set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub null_elements: bool,
    /// Its entries' values hold the document's fields that the index
    /// covers (`_id` and its paths), so a query naming only those is
    /// answered from the index alone (FORMAT.md, "Covered values in index
    /// entries"). Set by [`Collection::create_index`] on indexes that are
    /// not sparse and whose paths allow it (no numeric segment, no path
    /// a prefix of another, none under `_id`); indexes
    /// created by older builds lack it. Stored only when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub covering: bool,
    /// With `covering`: its entries' values hold only what the key loses
    /// of the covered fields (their types, the objects on the way, their
    /// order), and a covered read rebuilds them from the key (FORMAT.md,
    /// "Shape values in index entries"). Set by
    /// [`Collection::create_index`] with `covering`; indexes created by
    /// older builds lack it and keep whole covered fields. Stored only
    /// when set.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub shapes: bool,
    /// For each field, whether a document written since the index was
    /// created had an array at a proper prefix of its path (`a` of
    /// `a.b`): MongoDB's multikey paths, for the prefixes. While a dotted
    /// field's flag is false, every document reaches at most one value
    /// on it, so `$ne: null` (and `$exists: true` on a sparse index) are
    /// answered from the index's keys other than null (FORMAT.md,
    /// "Array prefixes of index paths"). Flags are set by the write that
    /// first meets such an array and never cleared. `None`: not tracked
    /// (an index of top-level paths only, or created by an older build),
    /// read as "arrays may be there". Stored only when tracked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_arrays: Option<Vec<bool>>,
}

impl IndexInfo {
    /// The orders of its fields (what finding an entry's `_id` needs;
    /// no path parsed).
    pub(crate) fn orders(&self) -> Vec<SortOrder> {
        self.fields
            .iter()
            .map(|(_, o)| {
                if *o < 0 {
                    SortOrder::Descending
                } else {
                    SortOrder::Ascending
                }
            })
            .collect()
    }

    pub(crate) fn paths(&self) -> DocResult<Vec<(FieldPath, SortOrder)>> {
        self.fields
            .iter()
            .map(|(p, o)| {
                Ok((
                    FieldPath::parse(p)?,
                    if *o < 0 {
                        SortOrder::Descending
                    } else {
                        SortOrder::Ascending
                    },
                ))
            })
            .collect()
    }

    /// Whether no document has had an array at a proper prefix of the
    /// path of field `field` since the index was created (see
    /// [`IndexInfo::prefix_arrays`]); `true` for a top-level path.
    pub(crate) fn prefix_flat(&self, field: &str) -> bool {
        if !field.contains('.') {
            return true;
        }
        let Some(flags) = &self.prefix_arrays else {
            return false;
        };
        self.fields
            .iter()
            .zip(flags)
            .any(|((p, _), arrays)| p == field && !arrays)
    }
}

/// The flags of [`IndexInfo::prefix_arrays`] that document `doc` sets:
/// for each path, whether it meets an array before its last segment.
/// Only the objects on the way are followed (the first array met
/// decides), so most documents cost one field lookup per segment.
pub(crate) fn arrays_on_prefixes(
    doc: ValueRef<'_>,
    paths: &[(FieldPath, SortOrder)],
) -> DocResult<Vec<bool>> {
    let mut out = Vec::with_capacity(paths.len());
    for (p, _) in paths {
        let segs = p.segments();
        let mut at = doc;
        let mut found = false;
        for seg in segs.iter().take(segs.len().saturating_sub(1)) {
            let ValueRef::Object(o) = at else {
                break;
            };
            match o.get(seg)? {
                Some(ValueRef::Array(_)) => {
                    found = true;
                    break;
                }
                Some(v) => at = v,
                None => break,
            }
        }
        out.push(found);
    }
    Ok(out)
}

/// Options of [`Collection::create_index`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IndexOptions {
    /// A name; default: the paths and orders joined (`a_1_b_-1`).
    pub name: Option<String>,
    /// At most one document per value (documents missing the field count as
    /// null unless the index is sparse).
    pub unique: bool,
    /// Documents missing every indexed field get no entry.
    pub sparse: bool,
}

/// A collection's stored metadata.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CollectionMeta {
    pub id: u64,
    pub indexes: Vec<IndexInfo>,
    pub next_index_id: u64,
    /// The document-layer format of the collection's keys (FORMAT.md,
    /// "Documents: collections and indexes"): absent in format 1.
    #[serde(default = "format_v1")]
    pub format: u32,
    /// Whether its writes are recorded in the change log (see
    /// `changes.rs`). Stored only when set, so the metadata of a
    /// collection nobody watches keeps its bytes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub change_stream: bool,
    /// What the writer derives from the fields above, once per decoded
    /// form (`decode_meta`); not stored.
    #[serde(skip)]
    derived: Derived,
}

/// The document-layer format this build writes: 3, MongoDB's type order
/// in keys with dates, UUIDs and a subtype byte in binary keys (FORMAT.md).
/// A collection at 1 or 2 is read without its indexes and upgraded by the
/// first write transaction that touches it; a build of format 2 refuses a
/// collection at 3 (which may hold dates it cannot read) by its metadata.
pub(crate) const DOC_FORMAT: u32 = 3;

/// The format of a collection that has a text index: 3's keys, plus a
/// text index, which builds without text indexes must not maintain (they
/// refuse a format above theirs). Dropping the text index returns the
/// collection to [`DOC_FORMAT`] (FORMAT.md, "Text indexes").
pub(crate) const DOC_FORMAT_TEXT: u32 = 4;

/// The format of a collection that has an index with null entries for
/// array elements ([`IndexInfo::null_elements`]): 4's, plus those entries,
/// which builds without them must not maintain (FORMAT.md, "Null entries
/// for array elements").
pub(crate) const DOC_FORMAT_NULLS: u32 = 5;

/// The format of a collection that has an index with covered values in
/// its entries ([`IndexInfo::covering`]): 5's, plus those values, which
/// builds without them must not maintain (FORMAT.md, "Covered values in
/// index entries").
pub(crate) const DOC_FORMAT_COVER: u32 = 6;

/// The format of a collection that has an index with shape values in its
/// entries ([`IndexInfo::shapes`]): 6's, plus those values, which older
/// builds would read as covered fields (FORMAT.md, "Shape values in index
/// entries").
pub(crate) const DOC_FORMAT_SHAPES: u32 = 7;

/// The format of a collection that has an index tracking the arrays on
/// its paths' prefixes ([`IndexInfo::prefix_arrays`]): 7's, plus those
/// flags, which older builds would not set when a write meets such an
/// array (FORMAT.md, "Array prefixes of index paths").
pub(crate) const DOC_FORMAT_PREFIXES: u32 = 8;

/// The longest covered value an index entry holds (its encoded bytes);
/// a document whose covered fields are longer has an empty value, and a
/// covered query reads that document from the data table.
pub const COVERED_VALUE_MAX_BYTES: usize = 1024;

/// The projection that gives an index entry's covered value: `_id` and
/// the index's paths. `None` when the paths cannot be covered: a canonical
/// decimal segment (a filter reads `a.0` as an array position, a
/// projection as a field name), paths that collide (one a prefix of
/// another) or a path under `_id`.
pub(crate) fn cover_projection(fields: &[(String, i8)]) -> Option<super::projection::Projection> {
    let mut spec = serde_json::Map::new();
    spec.insert("_id".into(), 1.into());
    for (p, _) in fields {
        let fp = FieldPath::parse(p).ok()?;
        let decimal = |s: &String| {
            !s.is_empty()
                && s.bytes().all(|b| b.is_ascii_digit())
                && (s == "0" || !s.starts_with('0'))
        };
        if fp.segments().iter().any(decimal) {
            return None;
        }
        spec.insert(p.clone(), 1.into());
    }
    super::projection::Projection::parse(serde_json::Value::Object(spec)).ok()
}

fn format_v1() -> u32 {
    1
}

/// Parsed index paths with their orders.
type IndexPaths = Vec<(FieldPath, SortOrder)>;

/// A collection's table names and parsed index paths, derived from its
/// stored metadata (empty until `CollectionMeta::derive`).
#[derive(Debug, Clone, Default)]
struct Derived {
    data_table: String,
    /// Per index, in `indexes` order: its id, table name and parsed paths.
    indexes: Vec<(u64, String, IndexPaths)>,
    /// Per index, in `indexes` order: the projection of its covered
    /// values (for an index with `covering`).
    covers: Vec<Option<std::sync::Arc<super::projection::Projection>>>,
    /// Whether some index is a TTL index (writes then delete a batch of
    /// expired documents).
    has_ttl: bool,
    /// The text index's reader (its paths parsed once), or why its
    /// stored definition does not read (kept, so that each write reports
    /// it without parsing the definition again); `None` without a text
    /// index.
    text: Option<Result<std::sync::Arc<TextReader>, String>>,
    /// The planner's cache of choices by query shape (`plan_cache.rs`):
    /// a new decoded form, after any change of the metadata (an index
    /// created or dropped), starts empty.
    plan_cache: super::plan_cache::PlanCache,
}

// Derived data is a function of the stored fields: two metas are equal when
// those are.
impl PartialEq for Derived {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}
impl Eq for Derived {}

thread_local! {
    /// The metadata the writer decoded last, by their stored bytes (a pure
    /// function of them): most operations of a thread touch a few
    /// collections, whose metadata changes only with their indexes.
    static META_MEMO: std::cell::RefCell<Vec<MemoEntry>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// Stored metadata bytes and their decoded form.
type MemoEntry = (Box<[u8]>, Rc<CollectionMeta>);

/// Entries `META_MEMO` keeps per thread.
const META_MEMO_LEN: usize = 8;

/// The metadata stored as `bytes`, decoded and derived once per thread and
/// distinct stored form.
fn decode_meta(bytes: &[u8]) -> DocResult<Rc<CollectionMeta>> {
    let hit = META_MEMO.with(|memo| {
        memo.borrow()
            .iter()
            .find(|(b, _)| **b == *bytes)
            .map(|(_, m)| m.clone())
    });
    if let Some(m) = hit {
        return Ok(m);
    }
    let mut m: CollectionMeta = codec::from_slice(bytes)?;
    m.derive();
    let m = Rc::new(m);
    META_MEMO.with(|memo| {
        let mut memo = memo.borrow_mut();
        if memo.len() >= META_MEMO_LEN {
            memo.remove(0);
        }
        memo.push((bytes.into(), m.clone()));
    });
    Ok(m)
}

impl CollectionMeta {
    fn new(id: u64) -> Self {
        let mut m = CollectionMeta {
            id,
            indexes: Vec::new(),
            next_index_id: 0,
            format: DOC_FORMAT,
            change_stream: false,
            derived: Derived::default(),
        };
        m.derive();
        m
    }

    /// Fills the derived table names and paths (an index whose paths do not
    /// parse gets none: its users parse them again and report the error).
    fn derive(&mut self) {
        self.derived = Derived {
            data_table: format!("$docs.{}", self.id),
            indexes: self
                .indexes
                .iter()
                .map(|i| {
                    (
                        i.id,
                        format!("$docs.{}.{}", self.id, i.id),
                        i.paths().unwrap_or_default(),
                    )
                })
                .collect(),
            covers: self
                .indexes
                .iter()
                .map(|i| {
                    i.covering
                        .then(|| cover_projection(&i.fields))
                        .flatten()
                        .map(std::sync::Arc::new)
                })
                .collect(),
            has_ttl: self
                .indexes
                .iter()
                .any(|i| i.expire_after_seconds.is_some()),
            text: self.text_index().map(|(_, t)| {
                t.reader()
                    .map(std::sync::Arc::new)
                    .map_err(|e| e.to_string())
            }),
            plan_cache: Default::default(),
        };
    }

    /// The planner's cache of choices by query shape for this form of the
    /// metadata (see `plan_cache.rs`).
    pub(crate) fn plan_cache(&self) -> &super::plan_cache::PlanCache {
        &self.derived.plan_cache
    }

    /// This metadata without the indexes whose tables are named in
    /// `tables` (derived afresh, with an empty plan cache): what the
    /// planner sees while a backend fills those indexes.
    pub(crate) fn without_index_tables(&self, tables: &[String]) -> CollectionMeta {
        let mut m = self.clone();
        m.indexes
            .retain(|i| !tables.iter().any(|t| *t == self.index_table(i)));
        m.derive();
        m
    }

    /// Index `i`'s table name and parsed paths, derived or computed.
    #[allow(clippy::type_complexity)]
    fn index_parts(
        &self,
        i: usize,
    ) -> DocResult<(Cow<'_, str>, Cow<'_, [(FieldPath, SortOrder)]>)> {
        let idx = self
            .indexes
            .get(i)
            .ok_or_else(|| DocumentError::IndexError {
                collection: String::new(),
                index: String::new(),
                reason: format!("no index number {i}"),
            })?;
        match self.derived.indexes.get(i) {
            // (An index's definition never changes under its id.)
            Some((id, t, p)) if *id == idx.id && p.len() == idx.fields.len() => {
                Ok((Cow::Borrowed(t.as_str()), Cow::Borrowed(p.as_slice())))
            }
            _ => Ok((self.index_table(idx), Cow::Owned(idx.paths()?))),
        }
    }

    /// The value of a document's entries in index `i` (FORMAT.md,
    /// "Covered values in index entries"): empty unless the index has
    /// `covering` and the document has exactly one entry (`entries`), in
    /// which case its covered fields, encoded, if they fit
    /// [`COVERED_VALUE_MAX_BYTES`].
    pub(crate) fn entry_value(&self, i: usize, doc: &[u8], entries: usize) -> DocResult<Vec<u8>> {
        let Some(idx) = self.indexes.get(i) else {
            return Ok(Vec::new());
        };
        if !idx.covering || entries != 1 {
            return Ok(Vec::new());
        }
        if idx.shapes {
            let (_, paths) = self.index_parts(i)?;
            return super::cover::shape_value(&paths, doc);
        }
        let derived;
        let proj = match self.derived.covers.get(i) {
            Some(Some(p)) if self.derived.indexes.get(i).map(|d| d.0) == Some(idx.id) => &**p,
            _ => match cover_projection(&idx.fields) {
                Some(p) => {
                    derived = p;
                    &derived
                }
                None => return Ok(Vec::new()),
            },
        };
        let projected = proj.apply_ref(codec::value_ref(doc)?)?;
        let mut out = Vec::new();
        codec::encode_value(&Value::Object(projected), &mut out)?;
        if out.len() > COVERED_VALUE_MAX_BYTES {
            out.clear();
        }
        Ok(out)
    }

    /// Whether some index is a TTL index.
    pub(crate) fn has_ttl(&self) -> bool {
        if self.derived.data_table.is_empty() {
            // Not derived (a copy being changed): look.
            self.indexes
                .iter()
                .any(|i| i.expire_after_seconds.is_some())
        } else {
            self.derived.has_ttl
        }
    }

    /// The data table's name (derived, or formatted for a meta not
    /// derived).
    pub fn data_table(&self) -> Cow<'_, str> {
        if self.derived.data_table.is_empty() {
            Cow::Owned(format!("$docs.{}", self.id))
        } else {
            Cow::Borrowed(&self.derived.data_table)
        }
    }

    /// Whether the collection's keys are in this build's format (else its
    /// first write upgrades it; until then queries scan the documents).
    pub fn is_current_format(&self) -> bool {
        (DOC_FORMAT..=DOC_FORMAT_PREFIXES).contains(&self.format)
    }

    /// The format the collection's indexes need (FORMAT.md): 8 with an
    /// index tracking arrays on its paths' prefixes, else 7 with an index
    /// with shape values, else 6 with one with covered values, else 5
    /// with an index with null entries for array elements, else 4 with a
    /// text index, else 3.
    fn required_format(&self) -> u32 {
        if self.indexes.iter().any(|i| i.prefix_arrays.is_some()) {
            DOC_FORMAT_PREFIXES
        } else if self.indexes.iter().any(|i| i.shapes) {
            DOC_FORMAT_SHAPES
        } else if self.indexes.iter().any(|i| i.covering) {
            DOC_FORMAT_COVER
        } else if self.indexes.iter().any(|i| i.null_elements) {
            DOC_FORMAT_NULLS
        } else if self.text_index().is_some() {
            DOC_FORMAT_TEXT
        } else {
            DOC_FORMAT
        }
    }

    /// The collection's text index, if it has one.
    pub(crate) fn text_index(&self) -> Option<(&IndexInfo, &TextIndex)> {
        self.indexes
            .iter()
            .find_map(|i| i.text.as_ref().map(|t| (i, t)))
    }

    /// The collection's text index with its reader (derived, or read now
    /// from a copy being changed).
    pub(crate) fn text_reader(
        &self,
    ) -> DocResult<Option<(&IndexInfo, std::sync::Arc<TextReader>)>> {
        let Some((idx, spec)) = self.text_index() else {
            return Ok(None);
        };
        let unreadable = |reason: String| DocumentError::IndexError {
            collection: String::new(),
            index: idx.name.clone(),
            reason: format!("the stored text index definition does not read: {reason}"),
        };
        let reader = match &self.derived.text {
            Some(Ok(r)) => r.clone(),
            Some(Err(e)) => return Err(unreadable(e.clone())),
            // Not derived (a copy being changed): read it now.
            None => std::sync::Arc::new(spec.reader().map_err(|e| unreadable(e.to_string()))?),
        };
        Ok(Some((idx, reader)))
    }

    /// The key of `_id` `id` in this collection's data table: format 1
    /// encoded booleans and binary `_id`s otherwise, format 2 binary `_id`s
    /// (no subtype byte) (FORMAT.md).
    pub fn id_key(&self, id: &Value) -> DocResult<Vec<u8>> {
        if self.is_current_format() {
            return id_key(id);
        }
        if self.format == 2 {
            return match id {
                Value::Binary(b) => keys::format2_binary_key(b),
                other => id_key(other),
            };
        }
        Ok(match id {
            Value::Bool(b) => vec![0x10 | u8::from(*b)],
            Value::Binary(b) => {
                let mut k = vec![0x38];
                for &x in b {
                    k.push(x);
                    if x == 0 {
                        k.push(0xFF);
                    }
                }
                k.extend_from_slice(&[0x00, 0x01]);
                k
            }
            other => id_key(other)?,
        })
    }

    fn check_format(&self, coll: &str) -> DocResult<()> {
        if self.format > DOC_FORMAT_PREFIXES {
            return Err(DocumentError::Custom(format!(
                "collection {coll:?} is at document-layer format {}, newer than this build's {DOC_FORMAT_PREFIXES}",
                self.format
            )));
        }
        Ok(())
    }
    /// Index `idx`'s table name (derived, or formatted for an index the
    /// derived data does not have: a meta not derived, or being changed).
    pub fn index_table(&self, idx: &IndexInfo) -> Cow<'_, str> {
        // (A table name is a function of the collection's and the index's
        // ids, and neither changes.)
        match self.derived.indexes.iter().find(|(id, ..)| *id == idx.id) {
            Some((_, t, _)) => Cow::Borrowed(t.as_str()),
            None => Cow::Owned(format!("$docs.{}.{}", self.id, idx.id)),
        }
    }
}

fn data_def(name: &str) -> TableDefinition<'_, &'static [u8], &'static [u8]> {
    TableDefinition::internal(name)
}

fn read_meta(
    t: &impl SeamTable<&'static str, &'static [u8]>,
    name: &str,
) -> DocResult<Option<CollectionMeta>> {
    match t.get(name)? {
        Some(g) => Ok(Some(codec::from_slice(g.value())?)),
        None => Ok(None),
    }
}

/// The meta of `name` in a read snapshot (`None`: no such collection),
/// decoded and derived once per thread and stored form (`decode_meta`).
pub(crate) fn meta_in<R: SeamRead + ?Sized>(
    r: &R,
    name: &str,
) -> DocResult<Option<Rc<CollectionMeta>>> {
    let m = match r.open_table_if_exists(CATALOG)? {
        Some(t) => match t.get(name)? {
            Some(g) => Some(decode_meta(g.value())?),
            None => None,
        },
        None => None,
    };
    if let Some(m) = &m {
        m.check_format(name)?;
    }
    Ok(m)
}

/// The name of the collection whose id is `id` in a read snapshot
/// (`None`: no collection has it now).
pub(crate) fn name_of_id<R: SeamRead + ?Sized>(r: &R, id: u64) -> DocResult<Option<String>> {
    let Some(t) = r.open_table_if_exists(CATALOG)? else {
        return Ok(None);
    };
    for item in t.iter()? {
        let (k, v) = item?;
        if k.value().is_empty() {
            continue;
        }
        let m: CollectionMeta = codec::from_slice(v.value())?;
        if m.id == id {
            return Ok(Some(k.value().to_string()));
        }
    }
    Ok(None)
}

/// The key of a document's `_id` in its collection's table.
pub(crate) fn id_key(id: &Value) -> DocResult<Vec<u8>> {
    let mut k = Vec::new();
    keys::encode_component(id, SortOrder::Ascending, &mut k)?;
    Ok(k)
}

/// A document's `_id` as JSON, from its key in the data table (`None`
/// if the key does not decode).
fn id_json(idk: &[u8]) -> Option<String> {
    let mut v = keys::decode_key(idk, &[SortOrder::Ascending]).ok()?;
    (v.len() == 1).then(|| v.remove(0).to_json().to_string())
}

fn check_id(id: &ValueRef<'_>) -> DocResult<()> {
    match id {
        ValueRef::Int(_)
        | ValueRef::String(_)
        | ValueRef::Binary(_)
        | ValueRef::Uuid(_)
        | ValueRef::Date(_)
        | ValueRef::Id(_)
        | ValueRef::Float(_)
        | ValueRef::Bool(_) => Ok(()),
        other => Err(DocumentError::InvalidId {
            found: other.kind().name(),
        }),
    }
}

/// An encoded document ready to store: its bytes and its `_id`.
pub(crate) struct Prepared {
    pub bytes: Vec<u8>,
    pub id: Value,
    /// The document's index entries under one version of its collection's
    /// metadata, computed before the write transaction began (see
    /// `Prepared::with_entries`); `store` uses them if the transaction
    /// finds that same metadata.
    pub entries: Option<(Rc<CollectionMeta>, IndexEntries)>,
}

/// Each index's entries of one document (see `index_entries`) and their
/// value (`CollectionMeta::entry_value`).
type IndexEntries = Vec<(Vec<Vec<u8>>, Vec<u8>)>;

/// The key of the collection catalog's stamp in the engine's per-commit
/// memo (`Shared::memo`): a number that names one state of the catalog
/// table. A one-operation write that commits without changing the catalog
/// stamps its commit with the stamp of the commit it started from (or a new
/// one) and files the metadata it read under it; the next write that starts
/// from that commit, with the catalog untouched, takes its metadata from
/// the file instead of opening the catalog and decoding its entry (3,400
/// instructions of a document delete's 43,000). A commit that changed the
/// catalog, or that the document layer did not make, has no stamp: the
/// write after it reads the catalog.
const CATALOG_STAMP: &str = "documents.catalog";

/// Stamps are never reused in a process (so one database's stamp can never
/// name another's catalog).
static NEXT_CATALOG_STAMP: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

thread_local! {
    /// The metadata this thread last wrote each collection under, by
    /// collection name (a few), with the catalog stamp it was read under
    /// when one is known (`CATALOG_STAMP`): a write computes its new
    /// document's index entries under it before it takes the writer lock,
    /// and takes it instead of reading the catalog when the commit it
    /// starts from carries that stamp.
    static LAST_META: std::cell::RefCell<Vec<LastMeta>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

struct LastMeta {
    name: String,
    meta: Rc<CollectionMeta>,
    /// The catalog state `meta` was read in (`None`: not known).
    stamp: Option<u64>,
}

/// The metadata this thread last wrote collection `name` under.
fn last_meta(name: &str) -> Option<Rc<CollectionMeta>> {
    LAST_META.with(|last| {
        last.borrow()
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.meta.clone())
    })
}

/// The metadata of collection `name` in the catalog state `stamp`, if this
/// thread read it there.
fn stamped_meta(stamp: u64, name: &str) -> Option<Rc<CollectionMeta>> {
    LAST_META.with(|last| {
        last.borrow()
            .iter()
            .find(|l| l.name == name && l.stamp == Some(stamp))
            .map(|l| l.meta.clone())
    })
}

/// Notes that this thread wrote collection `name` under `m`, read in the
/// catalog state `stamp` if known (else a stamp already noted for that
/// same metadata stays: a stamp names one state for good).
fn note_meta(name: &str, m: &Rc<CollectionMeta>, stamp: Option<u64>) {
    LAST_META.with(|last| {
        let mut last = last.borrow_mut();
        match last.iter_mut().find(|l| l.name == name) {
            Some(l) => {
                if !Rc::ptr_eq(&l.meta, m) {
                    l.meta = m.clone();
                    l.stamp = None;
                }
                if stamp.is_some() {
                    l.stamp = stamp;
                }
            }
            None => {
                if last.len() >= META_MEMO_LEN {
                    last.remove(0);
                }
                last.push(LastMeta {
                    name: name.to_string(),
                    meta: m.clone(),
                    stamp,
                });
            }
        }
    });
}

/// Notes that this thread wrote collection `name` under `m`.
fn note_last_meta(name: &str, m: &Rc<CollectionMeta>) {
    note_meta(name, m, None);
}

impl Prepared {
    /// Computes the index entries of the document under the metadata this
    /// thread last wrote collection `coll` under, outside the writer lock
    /// (they are most of a document write's own work). The transaction
    /// uses them only if it reads that same metadata (the memo gives one
    /// shared value per stored form), and computes them again otherwise; an
    /// error here is left for the transaction to find.
    fn with_entries(mut self, coll: &str) -> Self {
        let Some(m) = last_meta(coll) else {
            return self;
        };
        let Ok(idk) = id_key(&self.id) else {
            return self;
        };
        let mut all = Vec::with_capacity(m.indexes.len());
        for (i, idx) in m.indexes.iter().enumerate() {
            let Ok((_, paths)) = m.index_parts(i) else {
                return self;
            };
            let Ok(e) = index_entries(idx, &paths, &self.bytes, &idk) else {
                return self;
            };
            let Ok(v) = m.entry_value(i, &self.bytes, e.len()) else {
                return self;
            };
            all.push((e, v));
        }
        self.entries = Some((m, all));
        self
    }
}

/// Encodes `doc`; gives it a generated `_id` as its first field if it has
/// none. Checks that it is an object within the size limit.
pub(crate) fn prepare<T: Serialize + ?Sized>(doc: &T) -> DocResult<Prepared> {
    let mut bytes = codec::to_vec(doc)?;
    let root = codec::value_ref(&bytes)?;
    let ValueRef::Object(obj) = root else {
        return Err(DocumentError::NotAnObject {
            found: root.kind().name(),
        });
    };
    check_field_names(root, &mut Vec::new())?;
    let id = match obj.get("_id")? {
        Some(v) => {
            check_id(&v)?;
            v.to_value()?
        }
        None => {
            let id = Value::Id(ObjectId::new());
            let mut d = Document::new();
            d.insert("_id", id.clone());
            if let Value::Object(rest) = codec::decode_value(&bytes)? {
                for (k, v) in rest {
                    d.insert(k, v);
                }
            }
            bytes.clear();
            codec::encode_value(&Value::Object(d), &mut bytes)?;
            id
        }
    };
    if bytes.len() > MAX_DOCUMENT_BYTES {
        return Err(DocumentError::DocumentTooLarge {
            len: bytes.len(),
            max: MAX_DOCUMENT_BYTES,
        });
    }
    Ok(Prepared {
        bytes,
        id,
        entries: None,
    })
}

/// Refuses field names no filter, update or index could reach: `$` first
/// or a `.` anywhere (MongoDB's classic rule). `at` is the path walked so
/// far (for the error).
fn check_field_names<'a>(v: ValueRef<'a>, at: &mut Vec<&'a str>) -> DocResult<()> {
    match v {
        ValueRef::Object(o) => {
            for f in o.iter() {
                let (k, v) = f?;
                let reason = if k.starts_with('$') {
                    Some("names starting with '$' are the operators'")
                } else if k.contains('.') {
                    Some("'.' separates the fields of a path")
                } else {
                    None
                };
                if let Some(reason) = reason {
                    return Err(DocumentError::InvalidFieldName {
                        name: k.to_string(),
                        path: if at.is_empty() {
                            "(top)".into()
                        } else {
                            at.join(".")
                        },
                        reason,
                    });
                }
                at.push(k);
                check_field_names(v, at)?;
                at.pop();
            }
        }
        ValueRef::Array(a) => {
            for e in a.iter() {
                check_field_names(e?, at)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// The index entries (full keys: values then `_id`) of an encoded document,
/// in order and without repeats.
pub(crate) fn index_entries(
    idx: &IndexInfo,
    paths: &[(FieldPath, SortOrder)],
    doc: &[u8],
    idk: &[u8],
) -> DocResult<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if idx.text.is_some() {
        // Text entries carry a score: `Writer::store_text` keeps them.
        return Ok(out);
    }
    let root = codec::value_ref(doc)?;
    // Format 5: a document that reaches values but matches `{path: null}`
    // also gets a null (FORMAT.md, "Null entries for array elements").
    // Only a path that meets an array can match null while reaching a
    // value other than null (`may_need_extra_null`), so most writes skip
    // the walk of `matches_null`.
    let extra_null = |p: &FieldPath, vals_have_null: bool| -> DocResult<bool> {
        Ok(idx.null_elements
            && !vals_have_null
            && may_need_extra_null(root, p.segments())?
            && filter::matches_null(root, p.segments())?)
    };
    if let [(p, order)] = paths {
        // One field (most indexes): each value is an entry.
        let mut has_null = false;
        path::lookup_each(root, p.segments(), LookupMode::Index, &mut |v| {
            has_null |= matches!(v, ValueRef::Null);
            out.push(entry_key(&[(v, *order)], idk)?);
            Ok(())
        })?;
        if out.is_empty() {
            if idx.sparse {
                return Ok(out);
            }
            out.push(entry_key(&[(ValueRef::Null, *order)], idk)?);
        } else if extra_null(p, has_null)? {
            out.push(entry_key(&[(ValueRef::Null, *order)], idk)?);
        }
    } else {
        let mut per_path: Vec<Vec<ValueRef<'_>>> = Vec::with_capacity(paths.len());
        let mut missing_all = true;
        for (p, _) in paths {
            let mut vals = Vec::new();
            path::lookup_each(root, p.segments(), LookupMode::Index, &mut |v| {
                vals.push(v);
                Ok(())
            })?;
            if vals.is_empty() {
                vals.push(ValueRef::Null);
            } else {
                missing_all = false;
            }
            per_path.push(vals);
        }
        if missing_all && idx.sparse {
            return Ok(out);
        }
        // The array-valued paths, before any extra null (which does not
        // make a path count as one).
        let multi = per_path.iter().filter(|v| v.len() > 1).count();
        for ((p, _), vals) in paths.iter().zip(per_path.iter_mut()) {
            let has_null = vals.iter().any(|v| matches!(v, ValueRef::Null));
            if extra_null(p, has_null)? {
                vals.push(ValueRef::Null);
            }
        }
        if multi > 1 {
            return Err(DocumentError::IndexError {
                collection: String::new(),
                index: idx.name.clone(),
                reason: "a document may not have arrays in two fields of one compound index".into(),
            });
        }
        // The cartesian product (at most one path has several values).
        let mut keys: Vec<Vec<u8>> = vec![Vec::new()];
        for ((_, order), vals) in paths.iter().zip(&per_path) {
            let mut next = Vec::with_capacity(keys.len() * vals.len());
            for k in &keys {
                for v in vals {
                    let mut k2 = k.clone();
                    keys::encode_index_component_ref(v, *order, &mut k2)?;
                    next.push(k2);
                }
            }
            keys = next;
        }
        for mut k in keys {
            k.extend_from_slice(idk);
            out.push(k);
        }
    }
    if out.len() > MAX_INDEX_ENTRIES_PER_DOCUMENT {
        return Err(DocumentError::IndexError {
            collection: String::new(),
            index: idx.name.clone(),
            reason: format!(
                "a document would give it {} entries, more than the limit of {MAX_INDEX_ENTRIES_PER_DOCUMENT}",
                out.len()
            ),
        });
    }
    if out.len() > 1 {
        out.sort_unstable();
        out.dedup();
    }
    Ok(out)
}

/// Whether `doc` may match `{path: null}` while `path` reaches values,
/// none of them null (so that an index with null entries for array
/// elements needs one more): only when `path` is dotted and meets an
/// array (as a field's value on the way or at its end). A one-segment path
/// matches null only when the field is missing or null or an array holding
/// null, and then it reaches nothing or a null. A path that meets no array
/// reaches at most one value, and matches null exactly when that value is
/// null or it reaches none. `index_entries` skips `filter::matches_null`
/// when this says no: for the six indexes of `examples/doc_writes.rs`
/// (three dotted paths through objects, three top-level arrays) no write
/// calls it any more (before: six walks per document written).
fn may_need_extra_null(doc: ValueRef<'_>, path: &[String]) -> DocResult<bool> {
    if path.len() < 2 {
        return Ok(false);
    }
    let mut at = doc;
    for seg in path {
        let ValueRef::Object(o) = at else {
            return Ok(matches!(at, ValueRef::Array(_)));
        };
        match o.get(seg)? {
            Some(v) => at = v,
            None => return Ok(false),
        }
    }
    Ok(matches!(at, ValueRef::Array(_)))
}

/// One index entry: the encoded components, then the `_id` key.
fn entry_key(components: &[(ValueRef<'_>, SortOrder)], idk: &[u8]) -> DocResult<Vec<u8>> {
    let mut k = Vec::with_capacity(24 + idk.len());
    for (v, order) in components {
        keys::encode_index_component_ref(v, *order, &mut k)?;
    }
    k.extend_from_slice(idk);
    Ok(k)
}

/// The entries of sorted, repeat-free `a` that `b` (also sorted) has too.
fn sorted_intersection<'a>(a: &'a [Vec<u8>], b: &[Vec<u8>]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut j = 0;
    for x in a {
        while j < b.len() && b[j] < *x {
            j += 1;
        }
        if b.get(j) == Some(x) {
            out.push(x.as_slice());
        }
    }
    out
}

/// The entries of sorted, repeat-free `a` that `b` (also sorted) lacks.
fn sorted_difference<'a>(a: &'a [Vec<u8>], b: &[Vec<u8>]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut j = 0;
    for x in a {
        while j < b.len() && b[j] < *x {
            j += 1;
        }
        if b.get(j) != Some(x) {
            out.push(x.as_slice());
        }
    }
    out
}

/// The `_id` key at the end of an index entry whose value part is
/// `values_len` bytes long.
fn split_entry(entry: &[u8], idk_len: usize) -> (&[u8], &[u8]) {
    entry.split_at(entry.len().saturating_sub(idk_len))
}

/// A change made by the current operation, undone if it fails.
enum Undo {
    Data {
        table: String,
        key: Vec<u8>,
        old: Option<Vec<u8>>,
    },
    IndexAdded {
        table: String,
        key: Vec<u8>,
    },
    IndexRemoved {
        table: String,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Meta {
        name: String,
        old: Option<Vec<u8>>,
    },
    TableCreated {
        table: String,
    },
    /// The backend's counter kept with `table` held `value` before the
    /// operation set it (`SeamWrite::set_table_counter`).
    Counter {
        table: String,
        value: u64,
    },
}

/// Document writes inside one write transaction. Each public operation is
/// all-or-nothing: on a rule violation it undoes its own changes.
pub(crate) struct Writer<'t, W: SeamWrite + SeamRead = WriteTransaction> {
    pub txn: &'t W,
    undo: Vec<Undo>,
    /// Whether a failed operation must undo its own changes: not when it
    /// is the whole transaction (a failure aborts it, and the abort undoes
    /// everything), so single-operation commits record nothing.
    keep_undo: bool,
    /// A collection with a TTL index this writer wrote to: the operation's
    /// own transaction then deletes a batch of its expired documents
    /// (`ttl.rs`). Set by `meta`, only for such collections.
    pub(crate) ttl_due: Option<String>,
    /// The collection catalog's stamp in the commit the transaction
    /// started from, looked up by the first `meta` (`CATALOG_STAMP`):
    /// `Some(None)` when the commit has none.
    base_stamp: Option<Option<u64>>,
    /// Metadata `meta` read from the catalog in this transaction, which
    /// the commit files under the catalog's stamp if it leaves the
    /// catalog as it was.
    read_metas: Vec<(String, Rc<CollectionMeta>)>,
}

impl<'t, W: SeamWrite + SeamRead> Writer<'t, W> {
    /// A writer for operations inside a caller's transaction: each one is
    /// undone on its own if it fails.
    pub fn new(txn: &'t W) -> Self {
        Writer {
            txn,
            undo: Vec::new(),
            keep_undo: true,
            ttl_due: None,
            base_stamp: None,
            read_metas: Vec::new(),
        }
    }

    /// A writer whose one operation is the whole of `txn`, which the caller
    /// aborts if the operation fails.
    pub fn whole_txn(txn: &'t W) -> Self {
        Writer {
            txn,
            undo: Vec::new(),
            keep_undo: false,
            ttl_due: None,
            base_stamp: None,
            read_metas: Vec::new(),
        }
    }

    /// Records how to undo a change (built only if it may be needed).
    #[inline]
    fn note(&mut self, undo: impl FnOnce() -> Undo) {
        if self.keep_undo {
            self.undo.push(undo());
        }
    }

    /// Runs `f` as one operation: undone entirely if it fails.
    pub fn op<R>(&mut self, f: impl FnOnce(&mut Self) -> DocResult<R>) -> DocResult<R> {
        self.undo.clear();
        match f(self) {
            Ok(r) => {
                self.undo.clear();
                Ok(r)
            }
            Err(e) => {
                self.rollback()?;
                Err(e)
            }
        }
    }

    fn rollback(&mut self) -> DocResult<()> {
        while let Some(u) = self.undo.pop() {
            match u {
                Undo::Data { table, key, old } => {
                    let mut t = self.txn.open_table(data_def(&table))?;
                    match old {
                        Some(v) => {
                            t.insert(key.as_slice(), v.as_slice())?;
                        }
                        None => {
                            t.remove(key.as_slice())?;
                        }
                    }
                }
                Undo::IndexAdded { table, key } => {
                    self.txn
                        .open_table(data_def(&table))?
                        .remove(key.as_slice())?;
                }
                Undo::IndexRemoved { table, key, value } => {
                    self.txn
                        .open_table(data_def(&table))?
                        .insert(key.as_slice(), value.as_slice())?;
                }
                Undo::Meta { name, old } => {
                    let mut t = self.txn.open_table(CATALOG)?;
                    match old {
                        Some(v) => {
                            t.insert(name.as_str(), v.as_slice())?;
                        }
                        None => {
                            t.remove(name.as_str())?;
                        }
                    }
                }
                Undo::TableCreated { table } => {
                    self.txn.delete_table(data_def(&table))?;
                }
                Undo::Counter { table, value } => {
                    self.txn.set_table_counter(&table, value)?;
                }
            }
        }
        Ok(())
    }

    /// The collection's metadata, creating the collection if `create`.
    pub fn meta(&mut self, name: &str, create: bool) -> DocResult<Option<Rc<CollectionMeta>>> {
        check_collection_name(name)?;
        // The catalog as of the commit this transaction started from, if a
        // commit stamped it and this transaction has not opened it since:
        // then the metadata this thread read under that stamp is current,
        // with no catalog lookup (`CATALOG_STAMP`).
        let stamp = self.txn.base_memo(CATALOG_STAMP, CATALOG.name(), LAYER);
        self.base_stamp.get_or_insert(stamp);
        if let Some(m) = stamp.and_then(|st| stamped_meta(st, name)) {
            if m.has_ttl() && self.ttl_due.as_deref() != Some(name) {
                self.ttl_due = Some(name.to_string());
            }
            return Ok(Some(m));
        }
        let mut cat = self.txn.open_table(CATALOG)?;
        if let Some(g) = cat.get(name)? {
            let m = decode_meta(g.value())?;
            drop(g);
            drop(cat);
            if m.has_ttl() && self.ttl_due.as_deref() != Some(name) {
                self.ttl_due = Some(name.to_string());
            }
            if m.is_current_format() {
                if !self.read_metas.iter().any(|(n, _)| n == name) {
                    self.read_metas.push((name.to_string(), m.clone()));
                }
                return Ok(Some(m));
            }
            m.check_format(name)?;
            return self.upgrade(name, &m).map(Some);
        }
        if !create {
            return Ok(None);
        }
        // Ids are never reused: one more than the largest ever given, kept
        // under the reserved key "" (not a valid collection name).
        let next = match cat.get("")? {
            Some(g) => codec::from_slice::<u64>(g.value())?,
            None => 0,
        };
        let old_next = cat.get("")?.map(|g| g.value().to_vec());
        cat.insert("", codec::to_vec(&(next + 1))?.as_slice())?;
        let m = CollectionMeta::new(next);
        cat.insert(name, codec::to_vec(&m)?.as_slice())?;
        drop(cat);
        self.note(|| Undo::Meta {
            name: String::new(),
            old: old_next,
        });
        self.note(|| Undo::Meta {
            name: name.to_string(),
            old: None,
        });
        self.txn.open_table(data_def(&m.data_table()))?;
        self.note(|| Undo::TableCreated {
            table: m.data_table().into_owned(),
        });
        Ok(Some(Rc::new(m)))
    }

    /// Upgrades collection `name` from document-layer format 1 or 2 to 3
    /// (FORMAT.md, "Formats 1 and 2 and their upgrade"): the data table's
    /// keys of boolean (from 1) and binary `_id`s are re-encoded, every
    /// index table is emptied and rebuilt from the documents, and the
    /// metadata records format 3. The upgrade is part of the transaction (an abort discards
    /// it, as when a one-operation write is refused) but not of the
    /// operation that triggered it: inside a caller's transaction an
    /// operation that fails afterwards undoes only its own changes.
    fn upgrade(&mut self, name: &str, old: &CollectionMeta) -> DocResult<Rc<CollectionMeta>> {
        let mut m = old.clone();
        // The indexes keep their definitions: 3 (or what they need).
        m.format = m.required_format();
        m.derive();
        let docs = self.all_documents(&m)?;
        // New `_id` keys: documents whose key changes move (all removed
        // first, so an old key never meets a new one).
        let mut rekeyed: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(docs.len());
        let mut moved = Vec::new();
        for (old_key, doc) in docs {
            let id = match codec::value_ref(&doc)? {
                ValueRef::Object(o) => o.get("_id")?.map(|v| v.to_value()).transpose()?,
                _ => None,
            }
            .ok_or_else(|| {
                DocumentError::Custom(format!("collection {name:?}: a stored document has no _id"))
            })?;
            let new_key = id_key(&id)?;
            if new_key != old_key {
                moved.push((old_key, new_key.clone(), doc.clone()));
            }
            rekeyed.push((new_key, doc));
        }
        if !moved.is_empty() {
            let mut t = self.txn.open_table(data_def(&m.data_table()))?;
            for (old_key, _, _) in &moved {
                t.remove(old_key.as_slice())?;
            }
            for (_, new_key, doc) in &moved {
                t.insert(new_key.as_slice(), doc.as_slice())?;
            }
        }
        let max = self.txn.max_key_bytes(LAYER);
        for (i, idx) in m.indexes.iter().enumerate() {
            let table = m.index_table(idx);
            self.txn.delete_table(data_def(&table))?;
            let paths = idx.paths()?;
            let mut t = self.txn.open_table(data_def(&table))?;
            for (idk, doc) in &rekeyed {
                let entries = index_entries(idx, &paths, doc, idk).map_err(|e| named(e, name))?;
                let value = m.entry_value(i, doc, entries.len())?;
                for e in entries {
                    if e.len() > max {
                        return Err(index_err(
                            name,
                            &idx.name,
                            format!(
                                "upgrading to document-layer format {DOC_FORMAT}: an entry would be {} bytes, more than the {max} bytes an index key can hold at this page size",
                                e.len()
                            ),
                        ));
                    }
                    // Uniqueness held in the old format and equality is
                    // the same in every format.
                    t.insert(e.as_slice(), value.as_slice())?;
                }
            }
        }
        let mut cat = self.txn.open_table(CATALOG)?;
        cat.insert(name, codec::to_vec(&m)?.as_slice())?;
        Ok(Rc::new(m))
    }

    /// Every document of the collection with metadata `m`: its `_id` key
    /// and bytes, in key order (read whole, so that the caller may write
    /// the tables while it goes through them).
    fn all_documents(&self, m: &CollectionMeta) -> DocResult<Vec<(Vec<u8>, Vec<u8>)>> {
        let t = self.txn.open_table(data_def(&m.data_table()))?;
        let mut v = Vec::new();
        for item in t.iter()? {
            let (k, d) = item?;
            v.push((k.value().to_vec(), d.value().to_vec()));
        }
        Ok(v)
    }

    /// Writes (`Some`) or removes (`None`) `key` in the internal table
    /// `table` (byte keys and values), undone with the operation.
    pub(crate) fn put_raw(
        &mut self,
        table: &str,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> DocResult<()> {
        let mut t = self.txn.open_table(data_def(table))?;
        let old = match value {
            Some(v) => t.insert_old(key, v, LAYER)?,
            None => t.remove_old(key, LAYER)?,
        };
        drop(t);
        self.note(|| Undo::Data {
            table: table.to_string(),
            key: key.to_vec(),
            old,
        });
        Ok(())
    }

    /// Sets the backend's counter kept with `table` to `value`; `before` is
    /// what the table's counter is in the transaction's view now (undone
    /// to it if the operation fails).
    pub(crate) fn set_counter(&mut self, table: &str, value: u64, before: u64) -> DocResult<()> {
        self.txn.set_table_counter(table, value)?;
        self.note(|| Undo::Counter {
            table: table.to_string(),
            value: before,
        });
        Ok(())
    }

    /// Turns collection `coll`'s change log on or off (creating the
    /// collection); returns its metadata as it is now.
    pub(crate) fn set_change_stream(
        &mut self,
        coll: &str,
        on: bool,
    ) -> DocResult<Rc<CollectionMeta>> {
        let m = self
            .meta(coll, true)?
            .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?;
        if m.change_stream == on {
            return Ok(m);
        }
        if !on {
            super::changes::record_event(self, coll, &m, super::changes::Op::Disable, None)?;
        }
        let mut changed = Rc::unwrap_or_clone(m);
        changed.change_stream = on;
        self.put_meta(coll, &changed)?;
        changed.derive();
        Ok(Rc::new(changed))
    }

    /// Turns an existing collection's change log off
    /// ([`Collection::disable_change_stream`]); a missing collection is
    /// `CollectionNotFound`.
    pub(crate) fn disable_change_stream(&mut self, coll: &str) -> DocResult<()> {
        if self.meta(coll, false)?.is_none() {
            return Err(DocumentError::CollectionNotFound(coll.to_string()));
        }
        self.set_change_stream(coll, false).map(|_| ())
    }

    fn put_meta(&mut self, name: &str, m: &CollectionMeta) -> DocResult<()> {
        let mut cat = self.txn.open_table(CATALOG)?;
        let old = cat.get(name)?.map(|g| g.value().to_vec());
        cat.insert(name, codec::to_vec(m)?.as_slice())?;
        self.note(|| Undo::Meta {
            name: name.to_string(),
            old,
        });
        Ok(())
    }

    /// Adds `entries` of index `idx` (table `table`) for the document
    /// with `_id` key `idk`, each with value `value`, checking the key
    /// limit and uniqueness.
    fn add_entries(
        &mut self,
        coll: &str,
        table: &str,
        idx: &IndexInfo,
        entries: &[&[u8]],
        idk: &[u8],
        value: &[u8],
    ) -> DocResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let txn = self.txn;
        let mut t = txn.open_table(data_def(table))?;
        self.add_entries_in(&mut t, coll, table, idx, entries, idk, value)
    }

    /// [`Writer::add_entries`] into the index table `t` (named `table`),
    /// already open.
    #[allow(clippy::too_many_arguments)]
    fn add_entries_in(
        &mut self,
        t: &mut <W as SeamWrite>::Table<'t, &'static [u8], &'static [u8]>,
        coll: &str,
        table: &str,
        idx: &IndexInfo,
        entries: &[&[u8]],
        idk: &[u8],
        value: &[u8],
    ) -> DocResult<()> {
        let max = self.txn.max_key_bytes(LAYER);
        for e in entries {
            if e.len() > max {
                return Err(DocumentError::IndexError {
                    collection: coll.to_string(),
                    index: idx.name.clone(),
                    reason: format!(
                        "an entry would be {} bytes, more than the {max} bytes an index key can hold at this page size; index shorter values",
                        e.len()
                    ),
                });
            }
            if idx.unique {
                let (vals, _) = split_entry(e, idk.len());
                // Any entry with the same values and another `_id`? The
                // range ends with the entries of `vals`: a backend that
                // reads a range whole (cairndb-etcd's write transactions)
                // then reads only those, not every entry after them.
                let end = super::planner::prefix_end(vals);
                let same = match &end {
                    Some(end) => t.range(vals..end.as_slice())?,
                    None => t.range(vals..)?,
                };
                for item in same {
                    let (k, _) = item?;
                    let k = k.value();
                    if !k.starts_with(vals) {
                        break;
                    }
                    if &k[vals.len()..] != idk {
                        // A cut long value is compared by its first bytes
                        // and a 64-bit hash (FORMAT.md, "Long values").
                        let shown = if keys::is_exact(vals) {
                            keys::decode_key(vals, &idx.orders())
                                .map(|v| {
                                    if v.len() == 1 {
                                        v[0].to_json().to_string()
                                    } else {
                                        Value::Array(v).to_json().to_string()
                                    }
                                })
                                .unwrap_or_else(|_| "(undecodable)".into())
                        } else {
                            "(a value longer than an index key holds whole)".into()
                        };
                        return Err(DocumentError::DuplicateKey {
                            collection: coll.to_string(),
                            index: idx.name.clone(),
                            value: shown,
                            document: id_json(idk),
                        });
                    }
                }
            }
            // A document's entries are exactly those its stored version
            // gave (every caller adds only entries that version lacked):
            // `e` is absent, no need to look it up.
            t.insert_known(*e, value, false, LAYER)?;
            self.note(|| Undo::IndexAdded {
                table: table.to_string(),
                key: e.to_vec(),
            });
        }
        Ok(())
    }

    /// Removes `entries` (whose value is `value`) from the index table
    /// `table`.
    fn remove_entries(&mut self, table: &str, entries: &[&[u8]], value: &[u8]) -> DocResult<()> {
        if entries.is_empty() {
            return Ok(());
        }
        let txn = self.txn;
        let mut t = txn.open_table(data_def(table))?;
        self.remove_entries_in(&mut t, table, entries, value)
    }

    /// [`Writer::remove_entries`] from the index table `t` (named
    /// `table`), already open.
    fn remove_entries_in(
        &mut self,
        t: &mut <W as SeamWrite>::Table<'t, &'static [u8], &'static [u8]>,
        table: &str,
        entries: &[&[u8]],
        value: &[u8],
    ) -> DocResult<()> {
        for e in entries {
            // Entries the stored version of the document gave: present.
            t.remove_known(*e, true, LAYER)?;
            self.note(|| Undo::IndexRemoved {
                table: table.to_string(),
                key: e.to_vec(),
                value: value.to_vec(),
            });
        }
        Ok(())
    }

    /// Rewrites the value of `entries` (present, with value `old`) in the
    /// index table `table` to `new`.
    fn revalue_entries_in(
        &mut self,
        t: &mut <W as SeamWrite>::Table<'t, &'static [u8], &'static [u8]>,
        table: &str,
        entries: &[&[u8]],
        old: &[u8],
        new: &[u8],
    ) -> DocResult<()> {
        if entries.is_empty() || old == new {
            return Ok(());
        }
        for e in entries {
            t.insert_known(*e, new, true, LAYER)?;
            self.note(|| Undo::Data {
                table: table.to_string(),
                key: e.to_vec(),
                old: Some(old.to_vec()),
            });
        }
        Ok(())
    }

    /// Stores a prepared document. `mode`: insert (fails on an existing
    /// `_id`), upsert (insert or replace), replace (fails on a missing one).
    /// Returns whether a document was replaced.
    pub fn store(
        &mut self,
        coll: &str,
        m: &CollectionMeta,
        doc: &Prepared,
        mode: StoreMode,
    ) -> DocResult<bool> {
        let idk = id_key(&doc.id)?;
        let max = self.txn.max_key_bytes(LAYER);
        if idk.len() > max {
            return Err(DocumentError::IdTooLarge {
                len: idk.len(),
                max,
            });
        }
        let table = m.data_table();
        let old = {
            // One lookup: the old version decides the mode's outcome and
            // the index changes, and the write needs no second one.
            let mut t = self.txn.open_table(data_def(&table))?;
            let old = t.get(idk.as_slice())?.map(|g| g.value().to_vec());
            match (&old, mode) {
                (None, StoreMode::Replace | StoreMode::Update) => return Ok(false),
                (Some(_), StoreMode::Insert) => {
                    return Err(DocumentError::DuplicateKey {
                        collection: coll.to_string(),
                        index: "_id".into(),
                        value: doc.id.to_json().to_string(),
                        document: None,
                    })
                }
                _ => {}
            }
            t.insert_known(idk.as_slice(), doc.bytes.as_slice(), old.is_some(), LAYER)?;
            old
        };
        self.note(|| Undo::Data {
            table: table.into_owned(),
            key: idk.clone(),
            old: old.clone(),
        });
        // Entries computed before the transaction under this same
        // metadata, if any (see `Prepared::with_entries`).
        let pre = doc
            .entries
            .as_ref()
            .filter(|(pm, e)| std::ptr::eq(&**pm, m) && e.len() == m.indexes.len())
            .map(|(_, e)| e);
        for (i, idx) in m.indexes.iter().enumerate() {
            if idx.text.is_some() {
                // Entries with scores: moved by `store_text` below.
                continue;
            }
            let (table, paths) = m.index_parts(i)?;
            let computed;
            let (new, new_value) = match pre.and_then(|e| e.get(i)) {
                Some((e, v)) => (e, v),
                None => {
                    let e =
                        index_entries(idx, &paths, &doc.bytes, &idk).map_err(|e| named(e, coll))?;
                    let v = m.entry_value(i, &doc.bytes, e.len())?;
                    computed = (e, v);
                    (&computed.0, &computed.1)
                }
            };
            if idx.prefix_arrays.is_some() {
                self.note_prefix_arrays(coll, m, i, &paths, &doc.bytes)?;
            }
            match &old {
                Some(old_bytes) => {
                    let prev =
                        index_entries(idx, &paths, old_bytes, &idk).map_err(|e| named(e, coll))?;
                    let gone = sorted_difference(&prev, new);
                    let added = sorted_difference(new, &prev);
                    let kept = sorted_intersection(new, &prev);
                    // The old entries' value is needed to undo a removal,
                    // and to know whether kept entries change value; a
                    // one-operation commit whose entries all change (the
                    // usual replace) needs neither.
                    let old_value = if self.keep_undo || !kept.is_empty() {
                        m.entry_value(i, old_bytes, prev.len())?
                    } else {
                        Vec::new()
                    };
                    if gone.is_empty() && added.is_empty() && old_value == *new_value {
                        continue;
                    }
                    // One handle for the index's removals, new values and
                    // additions.
                    let txn = self.txn;
                    let mut t = txn.open_table(data_def(&table))?;
                    self.remove_entries_in(&mut t, &table, &gone, &old_value)?;
                    // Entries the document keeps get the new value.
                    self.revalue_entries_in(&mut t, &table, &kept, &old_value, new_value)?;
                    self.add_entries_in(&mut t, coll, &table, idx, &added, &idk, new_value)?;
                }
                None => {
                    let all: Vec<&[u8]> = new.iter().map(Vec::as_slice).collect();
                    self.add_entries(coll, &table, idx, &all, &idk, new_value)?
                }
            }
        }
        if let Some((idx, reader)) = m.text_reader()? {
            self.store_text(
                coll,
                m,
                idx,
                &reader,
                &idk,
                old.as_deref(),
                Some(&doc.bytes),
            )?;
        }
        if m.change_stream {
            super::changes::record_store(self, coll, m, mode, old.as_deref(), &doc.bytes)?;
        }
        Ok(old.is_some())
    }

    /// Deletes the document with `_id` key `idk`; returns its bytes.
    pub fn delete(
        &mut self,
        coll: &str,
        m: &CollectionMeta,
        idk: &[u8],
    ) -> DocResult<Option<Vec<u8>>> {
        let table = m.data_table();
        let old = self
            .txn
            .open_table(data_def(&table))?
            .remove_old(idk, LAYER)?;
        let Some(old) = old else {
            return Ok(None);
        };
        self.note(|| Undo::Data {
            table: table.into_owned(),
            key: idk.to_vec(),
            old: Some(old.clone()),
        });
        for (i, idx) in m.indexes.iter().enumerate() {
            if idx.text.is_some() {
                continue;
            }
            let (table, paths) = m.index_parts(i)?;
            let prev = index_entries(idx, &paths, &old, idk).map_err(|e| named(e, coll))?;
            // The value is needed only to undo the removal.
            let value = if self.keep_undo {
                m.entry_value(i, &old, prev.len())?
            } else {
                Vec::new()
            };
            let prev: Vec<&[u8]> = prev.iter().map(Vec::as_slice).collect();
            self.remove_entries(&table, &prev, &value)?;
        }
        if let Some((idx, reader)) = m.text_reader()? {
            self.store_text(coll, m, idx, &reader, idk, Some(&old), None)?;
        }
        if m.change_stream {
            super::changes::record_delete(self, coll, m, &old)?;
        }
        Ok(Some(old))
    }

    /// Creates an index over the existing documents.
    pub fn create_index(
        &mut self,
        coll: &str,
        fields: &[(&str, i8)],
        opts: &IndexOptions,
    ) -> DocResult<IndexInfo> {
        self.create_index_with_ttl(coll, fields, opts, None)
    }

    /// Creates an index over the existing documents, a TTL index if
    /// `expire_after_seconds` is given.
    pub fn create_index_with_ttl(
        &mut self,
        coll: &str,
        fields: &[(&str, i8)],
        opts: &IndexOptions,
        expire_after_seconds: Option<u64>,
    ) -> DocResult<IndexInfo> {
        let (idx, m, created) = self.define_index(coll, fields, opts, expire_after_seconds)?;
        if !created {
            return Ok(idx);
        }
        // Build from the existing documents in this transaction.
        let docs = self.all_documents(&m)?;
        self.index_documents(coll, &m, m.indexes.len() - 1, docs)?;
        // (Indexing may have set prefix-array flags in the stored metadata.)
        let stored = self
            .meta(coll, false)?
            .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?;
        Ok(stored
            .indexes
            .iter()
            .find(|x| x.id == idx.id)
            .cloned()
            .unwrap_or(idx))
    }

    /// Adds an index's definition to collection `coll` (created if
    /// missing) with no entries: the first half of
    /// [`Writer::create_index_with_ttl`], for a backend that fills the
    /// index in later transactions ([`Writer::build_index_entries`]) while
    /// it keeps the planner off it ([`SeamRead::incomplete_tables`]).
    /// From this write on, every write of the collection maintains the
    /// index for the documents it writes. Returns the definition, the
    /// metadata and whether it is new (`false`: an index of that name
    /// and options exists, nothing is written).
    fn define_index(
        &mut self,
        coll: &str,
        fields: &[(&str, i8)],
        opts: &IndexOptions,
        expire_after_seconds: Option<u64>,
    ) -> DocResult<(IndexInfo, CollectionMeta, bool)> {
        if fields.is_empty() {
            return Err(index_err(
                coll,
                "",
                "an index needs at least one field".into(),
            ));
        }
        for (p, o) in fields {
            FieldPath::parse(p)?;
            if *o != 1 && *o != -1 {
                return Err(index_err(
                    coll,
                    p,
                    format!("order must be 1 or -1, not {o}"),
                ));
            }
        }
        let name = opts.name.clone().unwrap_or_else(|| {
            fields
                .iter()
                .map(|(p, o)| format!("{p}_{o}"))
                .collect::<Vec<_>>()
                .join("_")
        });
        let mut m = Rc::unwrap_or_clone(
            self.meta(coll, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?,
        );
        let wanted: Vec<(String, i8)> = fields.iter().map(|(p, o)| (p.to_string(), *o)).collect();
        if let Some(existing) = m.indexes.iter().find(|i| i.name == name) {
            if existing.fields == wanted
                && existing.unique == opts.unique
                && existing.sparse == opts.sparse
                && existing.expire_after_seconds == expire_after_seconds
            {
                return Ok((existing.clone(), m.clone(), false));
            }
        }
        room_for_index(coll, &name, &m)?;
        let covering = !opts.sparse && cover_projection(&wanted).is_some();
        let idx = IndexInfo {
            name,
            fields: wanted,
            unique: opts.unique,
            sparse: opts.sparse,
            id: m.next_index_id,
            expire_after_seconds,
            text: None,
            null_elements: !opts.unique && !opts.sparse,
            covering,
            shapes: covering,
            // Tracked for dotted paths only: an index of top-level paths
            // has no prefix to track (and stays readable by format-7
            // builds).
            prefix_arrays: fields
                .iter()
                .any(|(p, _)| p.contains('.'))
                .then(|| vec![false; fields.len()]),
        };
        m.next_index_id += 1;
        m.indexes.push(idx.clone());
        m.format = m.required_format();
        m.derive();
        self.put_meta(coll, &m)?;
        let table = m.index_table(&idx).into_owned();
        self.note(|| Undo::TableCreated {
            table: table.clone(),
        });
        // The index table exists even when the collection is empty.
        self.txn.open_table(data_def(&table))?;
        Ok((idx, m, true))
    }

    /// Adds the entries of index `index_id` of collection `coll` for the
    /// documents stored under the `_id` keys `keys` (each read here; a key
    /// no longer stored is skipped), checking uniqueness and noting
    /// arrays on the paths' prefixes as a write does: a step of a build
    /// begun by [`Writer::define_index`]. A document already indexed (a
    /// writer stored it after the definition) gets the same entries
    /// again. Returns how many documents were indexed.
    pub fn build_index_entries(
        &mut self,
        coll: &str,
        index_id: u64,
        keys: &[Vec<u8>],
    ) -> DocResult<u64> {
        let m = self
            .meta(coll, false)?
            .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?;
        let i = m
            .indexes
            .iter()
            .position(|x| x.id == index_id && x.text.is_none())
            .ok_or_else(|| {
                index_err(
                    coll,
                    "",
                    format!("no index with id {index_id} (dropped while it was being built)"),
                )
            })?;
        let docs = {
            let t = self.txn.open_table(data_def(&m.data_table()))?;
            let mut docs = Vec::with_capacity(keys.len());
            for idk in keys {
                if let Some(g) = t.get(idk.as_slice())? {
                    docs.push((idk.clone(), g.value().to_vec()));
                }
            }
            docs
        };
        self.index_documents(coll, &m, i, docs)
    }

    /// Adds index `i`'s entries (collection `coll`, metadata `m`) for
    /// `docs` (`_id` key, bytes), checking uniqueness and noting arrays on
    /// the paths' prefixes as a write does; returns how many documents.
    fn index_documents(
        &mut self,
        coll: &str,
        m: &CollectionMeta,
        i: usize,
        docs: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> DocResult<u64> {
        let idx = m.indexes[i].clone();
        let (table, paths) = {
            let (t, p) = m.index_parts(i)?;
            (t.into_owned(), p.into_owned())
        };
        let mut n = 0;
        for (idk, doc) in docs {
            let entries = index_entries(&idx, &paths, &doc, &idk).map_err(|e| named(e, coll))?;
            let value = m.entry_value(i, &doc, entries.len())?;
            let entries: Vec<&[u8]> = entries.iter().map(Vec::as_slice).collect();
            self.add_entries(coll, &table, &idx, &entries, &idk, &value)?;
            self.note_prefix_arrays(coll, m, i, &paths, &doc)?;
            n += 1;
        }
        Ok(n)
    }

    /// Sets the flags of [`IndexInfo::prefix_arrays`] that document `doc`
    /// needs on index `i` of collection `coll` (`m`, as the caller read
    /// it), writing the metadata in the operation when one changes. The
    /// stored metadata is read again, so flags set by an earlier document
    /// of the same call (whose `m` is older) are kept.
    fn note_prefix_arrays(
        &mut self,
        coll: &str,
        m: &CollectionMeta,
        i: usize,
        paths: &[(FieldPath, SortOrder)],
        doc: &[u8],
    ) -> DocResult<()> {
        let Some(flags) = m.indexes.get(i).and_then(|x| x.prefix_arrays.as_ref()) else {
            return Ok(());
        };
        if !flags.contains(&false) {
            return Ok(());
        }
        let found = arrays_on_prefixes(codec::value_ref(doc)?, paths)?;
        if found.iter().zip(flags).all(|(x, f)| !x || *f) {
            return Ok(());
        }
        let id = m.indexes[i].id;
        let stored = {
            let cat = self.txn.open_table(CATALOG)?;
            let g = cat
                .get(coll)?
                .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?;
            decode_meta(g.value())?
        };
        let mut changed = Rc::unwrap_or_clone(stored);
        let Some(flags) = changed
            .indexes
            .iter_mut()
            .find(|x| x.id == id)
            .and_then(|x| x.prefix_arrays.as_mut())
        else {
            return Ok(());
        };
        if found.iter().zip(flags.iter()).all(|(x, f)| !x || *f) {
            return Ok(());
        }
        flags.iter_mut().zip(found).for_each(|(f, x)| *f |= x);
        changed.derive();
        self.put_meta(coll, &changed)
    }

    /// Creates the collection's text index over its existing documents
    /// (at most one per collection, as MongoDB); the collection moves to
    /// format [`DOC_FORMAT_TEXT`].
    pub fn create_text_index(
        &mut self,
        coll: &str,
        fields: &[(&str, u32)],
        opts: &TextIndexOptions,
    ) -> DocResult<IndexInfo> {
        let spec = TextIndex::new(fields, opts).map_err(|e| named(e, coll))?;
        let name = opts.name.clone().unwrap_or_else(|| spec.default_name());
        let mut m = Rc::unwrap_or_clone(
            self.meta(coll, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(coll.into()))?,
        );
        if let Some((existing, t)) = m.text_index() {
            if existing.name == name && *t == spec {
                return Ok(existing.clone());
            }
            return Err(index_err(
                coll,
                &name,
                format!(
                    "a collection has at most one text index, and it has {:?}",
                    existing.name
                ),
            ));
        }
        room_for_index(coll, &name, &m)?;
        let idx = IndexInfo {
            name,
            fields: Vec::new(),
            unique: false,
            sparse: false,
            id: m.next_index_id,
            expire_after_seconds: None,
            text: Some(spec.clone()),
            null_elements: false,
            covering: false,
            shapes: false,
            prefix_arrays: None,
        };
        m.next_index_id += 1;
        m.indexes.push(idx.clone());
        m.format = m.required_format();
        self.put_meta(coll, &m)?;
        let table = m.index_table(&idx);
        self.note(|| Undo::TableCreated {
            table: table.to_string(),
        });
        let docs = self.all_documents(&m)?;
        self.txn.open_table(data_def(&table))?;
        let reader = spec.reader()?;
        for (idk, doc) in docs {
            self.store_text(coll, &m, &idx, &reader, &idk, None, Some(&doc))?;
        }
        Ok(idx)
    }

    /// Moves the text index `idx`'s entries of the document with `_id` key
    /// `idk` from its version `old` to `new` (either absent): entries no
    /// longer given are removed, new ones and those whose score changed
    /// are written.
    #[allow(clippy::too_many_arguments)]
    fn store_text(
        &mut self,
        coll: &str,
        m: &CollectionMeta,
        idx: &IndexInfo,
        reader: &TextReader,
        idk: &[u8],
        old: Option<&[u8]>,
        new: Option<&[u8]>,
    ) -> DocResult<()> {
        if let (Some(a), Some(b)) = (old, new) {
            // An update that leaves the indexed strings alone (the usual
            // one) changes no entry: no tokenizing.
            if reader.same_text(a, b)? {
                return Ok(());
            }
        }
        let prev = match old {
            Some(d) => text::entries(reader, d, idk)?,
            None => Vec::new(),
        };
        let next = match new {
            Some(d) => text::entries(reader, d, idk)?,
            None => Vec::new(),
        };
        let max = self.txn.max_key_bytes(LAYER);
        let table = m.index_table(idx);
        let mut t = self.txn.open_table(data_def(&table))?;
        let prev_map: std::collections::HashMap<&[u8], &[u8; 8]> =
            prev.iter().map(|(k, v)| (k.as_slice(), v)).collect();
        let next_keys: BTreeSet<&[u8]> = next.iter().map(|(k, _)| k.as_slice()).collect();
        for (k, v) in &prev {
            if !next_keys.contains(k.as_slice()) {
                t.remove(k.as_slice())?;
                self.note(|| Undo::Data {
                    table: table.to_string(),
                    key: k.clone(),
                    old: Some(v.to_vec()),
                });
            }
        }
        for (k, v) in &next {
            let before = prev_map.get(k.as_slice()).copied();
            if before == Some(v) {
                continue;
            }
            if k.len() > max {
                return Err(index_err(
                    coll,
                    &idx.name,
                    format!(
                        "a text entry would be {} bytes, more than the {max} bytes an index key can hold at this page size",
                        k.len()
                    ),
                ));
            }
            t.insert(k.as_slice(), v.as_slice())?;
            self.note(|| Undo::Data {
                table: table.to_string(),
                key: k.clone(),
                old: before.map(|b| b.to_vec()),
            });
        }
        Ok(())
    }

    /// Drops an index; returns whether it existed.
    pub fn drop_index(&mut self, coll: &str, name: &str) -> DocResult<bool> {
        let Some(m) = self.meta(coll, false)? else {
            return Ok(false);
        };
        let mut m = Rc::unwrap_or_clone(m);
        let Some(pos) = m.indexes.iter().position(|i| i.name == name) else {
            return Ok(false);
        };
        let idx = m.indexes.remove(pos);
        // Without a text index (or an index with null entries for array
        // elements) left, builds without them can read it again.
        m.format = m.required_format();
        self.put_meta(coll, &m)?;
        self.txn.delete_table(data_def(&m.index_table(&idx)))?;
        Ok(true)
    }

    /// Renames collection `from` to `to` (its documents and indexes keep
    /// their tables, which are named by the collection's id). An existing
    /// `to` is dropped first with `drop_target`, else
    /// [`DocumentError::CollectionExists`].
    pub fn rename_collection(&mut self, from: &str, to: &str, drop_target: bool) -> DocResult<()> {
        check_collection_name(from)?;
        check_collection_name(to)?;
        if from == to {
            return Err(DocumentError::CollectionExists(to.to_string()));
        }
        let old = {
            let cat = self.txn.open_table(CATALOG)?;
            let got = cat.get(from)?.map(|g| g.value().to_vec());
            got
        };
        let Some(bytes) = old else {
            return Err(DocumentError::CollectionNotFound(from.to_string()));
        };
        let from_meta = decode_meta(&bytes)?;
        if from_meta.change_stream {
            super::changes::record_event(
                self,
                from,
                &from_meta,
                super::changes::Op::Rename,
                Some(to),
            )?;
        }
        if self.meta(to, false)?.is_some() {
            if !drop_target {
                return Err(DocumentError::CollectionExists(to.to_string()));
            }
            self.drop_collection(to)?;
        }
        let mut cat = self.txn.open_table(CATALOG)?;
        cat.remove(from)?;
        cat.insert(to, bytes.as_slice())?;
        drop(cat);
        self.note(|| Undo::Meta {
            name: from.to_string(),
            old: Some(bytes),
        });
        self.note(|| Undo::Meta {
            name: to.to_string(),
            old: None,
        });
        Ok(())
    }

    /// Drops a collection and its indexes; returns whether it existed.
    pub fn drop_collection(&mut self, coll: &str) -> DocResult<bool> {
        let Some(m) = self.meta(coll, false)? else {
            return Ok(false);
        };
        if m.change_stream {
            super::changes::record_event(self, coll, &m, super::changes::Op::Drop, None)?;
        }
        for idx in &m.indexes {
            self.txn.delete_table(data_def(&m.index_table(idx)))?;
        }
        self.txn.delete_table(data_def(&m.data_table()))?;
        let mut cat = self.txn.open_table(CATALOG)?;
        cat.remove(coll)?;
        Ok(true)
    }
}

/// Whether index `name` can be added to `m`: refused when an index of that
/// name exists (with other options: an identical one is returned before
/// this is asked) or the collection has [`MAX_INDEXES`] already.
fn room_for_index(coll: &str, name: &str, m: &CollectionMeta) -> DocResult<()> {
    if m.indexes.iter().any(|i| i.name == name) {
        return Err(index_err(
            coll,
            name,
            "an index of that name exists with other options".into(),
        ));
    }
    if m.indexes.len() >= MAX_INDEXES {
        return Err(index_err(
            coll,
            name,
            format!("a collection has at most {MAX_INDEXES} indexes"),
        ));
    }
    Ok(())
}

fn index_err(coll: &str, index: &str, reason: String) -> DocumentError {
    DocumentError::IndexError {
        collection: coll.to_string(),
        index: index.to_string(),
        reason,
    }
}

/// Fills in the collection name of an index error raised below.
fn named(e: DocumentError, coll: &str) -> DocumentError {
    match e {
        DocumentError::IndexError {
            collection,
            index,
            reason,
        } if collection.is_empty() => DocumentError::IndexError {
            collection: coll.to_string(),
            index,
            reason,
        },
        other => other,
    }
}

/// How [`Writer::store`] treats an existing `_id`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StoreMode {
    Insert,
    Upsert,
    Replace,
    /// A replace made by an update operator (`$set`, ...): the same write,
    /// recorded as an `update` in the change log.
    Update,
}

/// A typed handle on a collection of a database: each operation is its own
/// transaction. `T` is any serde type (a struct, or [`Document`] for
/// schemaless use).
///
/// ```
/// use cairndb::document::{Document, Value};
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("d.cairn"))?;
/// #[derive(serde::Serialize, serde::Deserialize, Debug, PartialEq)]
/// struct User { _id: u64, name: String }
/// let users = db.collection::<User>("users");
/// let id: u64 = 1;
/// users.insert(&User { _id: id, name: "Ada".into() })?;
/// assert_eq!(users.get(id)?.unwrap().name, "Ada"); // any integer type is an id
/// assert_eq!(users.get(2u8)?, None);
/// # Ok::<(), cairndb::Error>(())
/// ```
pub struct Collection<'db, T> {
    db: &'db Database,
    name: String,
    durability: Durability,
    /// The clock TTL indexes read (`None`: the system clock).
    clock: Option<std::sync::Arc<dyn super::ttl::Clock>>,
    _t: PhantomData<fn() -> T>,
}

impl<T> std::fmt::Debug for Collection<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collection")
            .field("name", &self.name)
            .finish()
    }
}

/// A collection's name and document type, usable as a `const`.
///
/// ```
/// use cairndb::document::{CollectionDefinition, Document};
/// const EVENTS: CollectionDefinition<Document> = CollectionDefinition::new("events");
/// ```
pub struct CollectionDefinition<'a, T> {
    name: &'a str,
    _t: PhantomData<fn() -> T>,
}

impl<'a, T> CollectionDefinition<'a, T> {
    /// A definition.
    pub const fn new(name: &'a str) -> Self {
        CollectionDefinition {
            name,
            _t: PhantomData,
        }
    }

    /// The collection name.
    pub fn name(&self) -> &str {
        self.name
    }

    /// The collection of `db` this defines.
    pub fn open<'db>(&self, db: &'db Database) -> Collection<'db, T> {
        db.collection(self.name)
    }
}

impl<T> Clone for CollectionDefinition<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for CollectionDefinition<'_, T> {}

impl Database {
    /// The collection `name` holding documents of type `T`. Nothing is
    /// created until the first write.
    pub fn collection<T>(&self, name: &str) -> Collection<'_, T> {
        Collection {
            db: self,
            name: name.to_string(),
            durability: Durability::Immediate,
            clock: None,
            _t: PhantomData,
        }
    }

    /// Renames a collection, in one transaction (see
    /// [`Collection::rename`]).
    pub fn rename_collection(&self, from: &str, to: &str, drop_target: bool) -> DocResult<()> {
        let txn = self.begin_write()?;
        {
            let mut w = Writer::whole_txn(&txn);
            w.op(|w| w.rename_collection(from, to, drop_target))?;
        }
        txn.commit()?;
        Ok(())
    }

    /// The names of every collection, in order.
    pub fn list_collections(&self) -> DocResult<Vec<String>> {
        self.begin_read()?.list_collections()
    }

    /// The names of the collections that have a TTL index, in order, from
    /// one read snapshot: the ones a periodic expiry pass visits (`cairn
    /// serve`'s sweep, `cairn expire`; see [`Collection::delete_all_expired`]).
    pub fn ttl_collections(&self) -> DocResult<Vec<String>> {
        super::snapshot::ttl_collections_in(&self.begin_read()?)
    }
}

/// What a bulk write did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BulkResult {
    /// Documents inserted (new `_id`s).
    pub inserted: u64,
    /// Documents replaced (existing `_id`s).
    pub replaced: u64,
}

impl<'db, T: Serialize + DeserializeOwned> Collection<'db, T> {
    /// The same collection, committing its writes with `durability`.
    pub fn with_durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    /// The collection name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The database.
    pub fn database(&self) -> &'db Database {
        self.db
    }

    /// Runs `f` as one operation in its own write transaction.
    pub(crate) fn write_op<R>(
        &self,
        f: impl FnOnce(&mut Writer<'_>) -> DocResult<R>,
    ) -> DocResult<R> {
        check_collection_name(&self.name)?;
        let txn = self.db.begin_write()?;
        txn.set_durability(self.durability);
        let (r, stamp) = {
            let mut w = Writer::whole_txn(&txn);
            let r = w.op(f)?;
            // A collection with a TTL index: a bounded batch of expired
            // documents goes with the write (`ttl.rs`).
            if let Some(coll) = w.ttl_due.take() {
                let now = self.now_ms();
                w.op(|w| super::ttl::expire(w, &coll, now, super::ttl::EXPIRE_BATCH))?;
            }
            // The catalog as the commit will leave it, if unchanged: the
            // stamp it started with, or a new one (`CATALOG_STAMP`).
            let stamp = (!txn.table_changed(CATALOG.name())).then(|| {
                let st = w.base_stamp.flatten().unwrap_or_else(|| {
                    NEXT_CATALOG_STAMP.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                });
                (st, std::mem::take(&mut w.read_metas))
            });
            (r, stamp)
        };
        let id = txn.txn_id();
        let committed = txn.commit()?;
        if let (Some((st, metas)), true) = (stamp, committed == id) {
            for (name, m) in &metas {
                note_meta(name, m, Some(st));
            }
            self.db.shared.set_memo(CATALOG_STAMP, id, st);
        }
        Ok(r)
    }

    /// The same collection, reading `clock` for its TTL indexes instead of
    /// the system clock (tests, simulations).
    pub fn with_clock(mut self, clock: std::sync::Arc<dyn super::ttl::Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The time TTL indexes compare with, in milliseconds since the Unix
    /// epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        match &self.clock {
            Some(c) => c.now_ms(),
            None => super::ttl::Clock::now_ms(&super::ttl::SystemClock),
        }
    }

    /// Creates a TTL index on `field` (ascending): documents whose `field`
    /// holds a date ([`Value::Date`], or a number of milliseconds since the
    /// Unix epoch), or an array holding such values (the earliest counts),
    /// are deleted once that date is more than `expire_after_seconds` in
    /// the past. Other values never expire (MongoDB: "TTL Indexes").
    /// Expired documents are deleted in bounded batches by this
    /// collection's writes, by [`Collection::delete_expired`] and
    /// [`Collection::delete_all_expired`] (which `cairn serve` calls on a
    /// timer), and a first batch by this call;
    /// until then queries still return them,
    /// as MongoDB's do between two passes of its TTL monitor.
    pub fn create_ttl_index(
        &self,
        field: &str,
        expire_after_seconds: u64,
        opts: IndexOptions,
    ) -> DocResult<IndexInfo> {
        super::ttl::check_expire_after(&self.name, field, expire_after_seconds)?;
        self.write_op(|w| {
            let info = w.create_index_with_ttl(
                &self.name,
                &[(field, 1)],
                &opts,
                Some(expire_after_seconds),
            )?;
            // A first pass over the existing documents goes with it.
            w.ttl_due = Some(self.name.clone());
            Ok(info)
        })
    }

    /// Deletes up to `max` expired documents of this collection's TTL
    /// indexes in one transaction; returns how many. Call it periodically
    /// when the collection is rarely written (its writes already delete a
    /// batch each).
    pub fn delete_expired(&self, max: usize) -> DocResult<u64> {
        let now = self.now_ms();
        self.write_op(|w| {
            w.ttl_due = None;
            super::ttl::expire(w, &self.name, now, max)
        })
    }

    /// Deletes every document of this collection's TTL indexes that has
    /// expired now, in transactions of at most `batch` deletions each (so
    /// the writer lock is never held for more than one batch: other writers
    /// take turns between them); returns how many. `go_on` is asked before
    /// each batch after the first, with the deletions so far: `false` stops
    /// (a server shutting down). The time is read once, so documents that
    /// expire meanwhile wait for the next call — a pass always ends.
    pub fn delete_all_expired(
        &self,
        batch: usize,
        mut go_on: impl FnMut(u64) -> bool,
    ) -> DocResult<u64> {
        let batch = batch.max(1);
        let now = self.now_ms();
        let mut total = 0u64;
        loop {
            let n = self.write_op(|w| {
                w.ttl_due = None;
                super::ttl::expire(w, &self.name, now, batch)
            })?;
            total += n;
            if n < batch as u64 || !go_on(total) {
                return Ok(total);
            }
        }
    }

    /// Turns on this collection's change stream (creating the collection):
    /// from the next commit, its writes are recorded in the database's
    /// change log, which [`Collection::watch`] reads. A collection without
    /// it pays nothing for change streams.
    pub fn enable_change_stream(&self) -> DocResult<()> {
        self.write_op(|w| w.set_change_stream(&self.name, true).map(|_| ()))
    }

    /// Turns this collection's change stream off: its open streams end with
    /// an `invalidate` event and its writes are no longer recorded.
    pub fn disable_change_stream(&self) -> DocResult<()> {
        self.write_op(|w| w.disable_change_stream(&self.name))
    }

    /// Whether this collection's writes are recorded for change streams.
    pub fn change_stream_enabled(&self) -> DocResult<bool> {
        let r = self.db.begin_read()?;
        Ok(meta_in(&r, &self.name)?.is_some_and(|m| m.change_stream))
    }

    /// Inserts a document; returns its `_id` (generated if it had none).
    /// An existing `_id` is [`DocumentError::DuplicateKey`].
    pub fn insert(&self, doc: &T) -> DocResult<Value> {
        let p = prepare(doc)?.with_entries(&self.name);
        self.write_op(|w| {
            let m = w
                .meta(&self.name, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(self.name.clone()))?;
            note_last_meta(&self.name, &m);
            w.store(&self.name, &m, &p, StoreMode::Insert)?;
            Ok(p.id.clone())
        })
    }

    /// Inserts every document in one transaction (all or none); returns
    /// their `_id`s.
    pub fn insert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> DocResult<Vec<Value>>
    where
        T: 'a,
    {
        let prepared = docs
            .into_iter()
            .map(prepare)
            .collect::<DocResult<Vec<_>>>()?;
        self.write_op(|w| {
            let m = w
                .meta(&self.name, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(self.name.clone()))?;
            let mut ids = Vec::with_capacity(prepared.len());
            for p in &prepared {
                w.store(&self.name, &m, p, StoreMode::Insert)?;
                ids.push(p.id.clone());
            }
            Ok(ids)
        })
    }

    /// Inserts the document, or replaces the one with its `_id`; returns
    /// whether one was replaced.
    pub fn upsert(&self, doc: &T) -> DocResult<bool> {
        let p = prepare(doc)?.with_entries(&self.name);
        self.write_op(|w| {
            let m = w
                .meta(&self.name, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(self.name.clone()))?;
            note_last_meta(&self.name, &m);
            w.store(&self.name, &m, &p, StoreMode::Upsert)
        })
    }

    /// [`Collection::upsert`] for every document, in one transaction.
    pub fn upsert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> DocResult<BulkResult>
    where
        T: 'a,
    {
        let prepared = docs
            .into_iter()
            .map(prepare)
            .collect::<DocResult<Vec<_>>>()?;
        self.write_op(|w| {
            let m = w
                .meta(&self.name, true)?
                .ok_or_else(|| DocumentError::CollectionNotFound(self.name.clone()))?;
            let mut r = BulkResult::default();
            for p in &prepared {
                if w.store(&self.name, &m, p, StoreMode::Upsert)? {
                    r.replaced += 1;
                } else {
                    r.inserted += 1;
                }
            }
            Ok(r)
        })
    }

    /// Replaces the document with this one's `_id`; returns whether it
    /// existed (nothing is written if not).
    pub fn replace(&self, doc: &T) -> DocResult<bool> {
        let p = prepare(doc)?.with_entries(&self.name);
        self.write_op(|w| {
            let Some(m) = w.meta(&self.name, false)? else {
                return Ok(false);
            };
            note_last_meta(&self.name, &m);
            w.store(&self.name, &m, &p, StoreMode::Replace)
        })
    }

    /// The document with this `_id`.
    pub fn get(&self, id: impl Into<Value>) -> DocResult<Option<T>> {
        let r = self.db.begin_read()?;
        get_in(&r, &self.name, &id.into())
    }

    /// Deletes the document with this `_id`; returns whether it existed.
    pub fn delete_id(&self, id: impl Into<Value>) -> DocResult<bool> {
        let idk = id_key(&id.into())?;
        self.write_op(|w| {
            let Some(m) = w.meta(&self.name, false)? else {
                return Ok(false);
            };
            Ok(w.delete(&self.name, &m, &idk)?.is_some())
        })
    }

    /// Every document in `_id` order, streamed from one snapshot.
    pub fn all(&self) -> DocResult<super::cursor::Results<T>> {
        let r = self.db.begin_read()?;
        let data = meta_in(&r, &self.name)?.map(|m| m.data_table().into_owned());
        Ok(super::cursor::Results {
            cursor: super::cursor::Cursor::new(r, data, super::cursor::Source::Scan),
            index_orders: Vec::new(),
        })
    }

    /// The number of documents.
    pub fn len(&self) -> DocResult<u64> {
        len_in(&self.db.begin_read()?, &self.name)
    }

    /// Whether the collection holds no document.
    pub fn is_empty(&self) -> DocResult<bool> {
        Ok(self.len()? == 0)
    }

    /// Creates an index on `fields` (paths with order 1 or -1), built over
    /// the existing documents in the same transaction. Creating an index
    /// that exists with the same options does nothing.
    pub fn create_index(&self, fields: &[(&str, i8)], opts: IndexOptions) -> DocResult<IndexInfo> {
        self.write_op(|w| w.create_index(&self.name, fields, &opts))
    }

    /// Creates the collection's text index (MongoDB's `{"title": "text",
    /// "body": "text"}` with `weights`): `fields` are the paths with their
    /// weights (1 ..= 99,999; MongoDB's default is 1). A collection has at
    /// most one text index; creating the same one again returns it, another
    /// one is [`DocumentError::IndexError`]. It is built over the existing
    /// documents in one transaction and kept by every write; `$text`
    /// filters search it ([`text`]).
    ///
    /// ```
    /// use serde_json::json;
    /// use cairndb::document::{Document, TextIndexOptions};
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = cairndb::Database::create(dir.path().join("t.cairn"))?;
    /// let c = db.collection::<Document>("posts");
    /// c.insert(&Document::new().with("title", "Cold brew at home").with("body", "Coffee steeped overnight"))?;
    /// c.insert(&Document::new().with("title", "Espresso").with("body", "Decaf beans, hot water"))?;
    /// c.create_text_index(&[("title", 10), ("body", 1)], TextIndexOptions::default())?;
    /// let found = c.find(json!({"$text": {"$search": "coffee -decaf"}}))?.count();
    /// assert_eq!(found, 1);
    /// # Ok::<(), cairndb::Error>(())
    /// ```
    pub fn create_text_index(
        &self,
        fields: &[(&str, u32)],
        opts: TextIndexOptions,
    ) -> DocResult<IndexInfo> {
        self.write_op(|w| w.create_text_index(&self.name, fields, &opts))
    }

    /// Drops an index; returns whether it existed.
    pub fn drop_index(&self, name: &str) -> DocResult<bool> {
        self.write_op(|w| w.drop_index(&self.name, name))
    }

    /// The collection's indexes.
    pub fn list_indexes(&self) -> DocResult<Vec<IndexInfo>> {
        let r = self.db.begin_read()?;
        Ok(meta_in(&r, &self.name)?
            .map(|m| m.indexes.clone())
            .unwrap_or_default())
    }

    /// Renames the collection to `to` (documents and indexes move with it,
    /// in one transaction; this handle keeps its old name). An existing
    /// collection `to` is dropped first with `drop_target`, else the
    /// rename fails with [`DocumentError::CollectionExists`]; a missing
    /// source is [`DocumentError::CollectionNotFound`].
    pub fn rename(&self, to: &str, drop_target: bool) -> DocResult<()> {
        let to = to.to_string();
        self.write_op(|w| w.rename_collection(&self.name, &to, drop_target))
    }

    /// Drops the collection with its indexes; returns whether it existed.
    pub fn drop(&self) -> DocResult<bool> {
        self.write_op(|w| w.drop_collection(&self.name))
    }

    /// Checks that every index equals the index recomputed from the
    /// documents; returns the differences found (empty: consistent).
    pub fn check_indexes(&self) -> DocResult<Vec<String>> {
        let r = self.db.begin_read()?;
        check_indexes_in(&r, &self.name)
    }
}

/// The document with `_id` `id` in a snapshot.
pub(crate) fn get_in<T: DeserializeOwned, R: SeamRead + ?Sized>(
    r: &R,
    coll: &str,
    id: &Value,
) -> DocResult<Option<T>> {
    let Some(m) = meta_in(r, coll)? else {
        return Ok(None);
    };
    let Some(t) = r.open_table_if_exists(data_def(&m.data_table()))? else {
        return Ok(None);
    };
    let idk = m.id_key(id)?;
    match t.get(idk.as_slice())? {
        Some(g) => Ok(Some(codec::from_slice(g.value())?)),
        None => Ok(None),
    }
}

/// Recomputes every index of `coll` from its documents and compares.
pub(crate) fn check_indexes_in<R: SeamRead + ?Sized>(r: &R, coll: &str) -> DocResult<Vec<String>> {
    let mut problems = Vec::new();
    let Some(m) = meta_in(r, coll)? else {
        return Ok(problems);
    };
    if !m.is_current_format() {
        // Format 1 and 2 keys are not read by this build: its first write
        // rebuilds them from the documents (FORMAT.md).
        return Ok(problems);
    }
    let docs = r.open_table_if_exists(data_def(&m.data_table()))?;
    for idx in &m.indexes {
        if let Some(spec) = &idx.text {
            problems.extend(check_text_index(
                r,
                &m,
                coll,
                idx,
                &spec.reader()?,
                docs.as_ref(),
            )?);
            continue;
        }
        let paths = idx.paths()?;
        let i = m.indexes.iter().position(|x| x.id == idx.id).unwrap_or(0);
        // Each entry with its value (FORMAT.md, "Covered values in index
        // entries": empty unless the index has `covering`).
        let mut want = std::collections::BTreeMap::new();
        // The arrays on the paths' prefixes: a flag may be set with no
        // such document left (flags are never cleared), never the reverse.
        let mut arrays = vec![false; paths.len()];
        if let Some(t) = &docs {
            for item in t.iter()? {
                let (k, d) = item?;
                let entries = index_entries(idx, &paths, d.value(), k.value())?;
                let value = m.entry_value(i, d.value(), entries.len())?;
                for e in entries {
                    want.insert(e, value.clone());
                }
                if idx.prefix_arrays.is_some() {
                    let found = arrays_on_prefixes(codec::value_ref(d.value())?, &paths)?;
                    arrays.iter_mut().zip(found).for_each(|(a, x)| *a |= x);
                }
            }
        }
        if let Some(flags) = &idx.prefix_arrays {
            for (((p, _), flag), seen) in idx.fields.iter().zip(flags).zip(&arrays) {
                if *seen && !flag {
                    problems.push(format!(
                        "collection {coll:?}, index {:?}: a document has an array on the way to {p:?} but the index records none (prefix_arrays)",
                        idx.name
                    ));
                }
            }
            if flags.len() != idx.fields.len() {
                problems.push(format!(
                    "collection {coll:?}, index {:?}: prefix_arrays has {} flags for {} fields",
                    idx.name,
                    flags.len(),
                    idx.fields.len()
                ));
            }
        }
        let mut have = std::collections::BTreeMap::new();
        if let Some(t) = r.open_table_if_exists(data_def(&m.index_table(idx)))? {
            for item in t.iter()? {
                let (k, v) = item?;
                have.insert(k.value().to_vec(), v.value().to_vec());
            }
        }
        let missing = want.keys().filter(|k| !have.contains_key(*k)).count();
        let extra = have.keys().filter(|k| !want.contains_key(*k)).count();
        let stale = want
            .iter()
            .filter(|(k, v)| have.get(*k).is_some_and(|h| h != *v))
            .count();
        if missing + extra > 0 {
            problems.push(format!(
                "collection {coll:?}, index {:?}: {missing} entries missing, {extra} entries that no document has",
                idx.name
            ));
        }
        if stale > 0 {
            problems.push(format!(
                "collection {coll:?}, index {:?}: {stale} entries whose value is not the document's covered fields",
                idx.name
            ));
        }
    }
    Ok(problems)
}

/// Recomputes the text index `idx` of `coll` from its documents and
/// compares keys and scores.
fn check_text_index<R: SeamRead + ?Sized>(
    r: &R,
    m: &CollectionMeta,
    coll: &str,
    idx: &IndexInfo,
    reader: &TextReader,
    docs: Option<&impl SeamTable<&'static [u8], &'static [u8]>>,
) -> DocResult<Vec<String>> {
    let mut want = std::collections::BTreeMap::new();
    if let Some(t) = docs {
        for item in t.iter()? {
            let (k, d) = item?;
            want.extend(text::entries(reader, d.value(), k.value())?);
        }
    }
    let mut have = std::collections::BTreeMap::new();
    if let Some(t) = r.open_table_if_exists(data_def(&m.index_table(idx)))? {
        for item in t.iter()? {
            let (k, v) = item?;
            have.insert(k.value().to_vec(), v.value().to_vec());
        }
    }
    let missing = want.keys().filter(|k| !have.contains_key(*k)).count();
    let extra = have.keys().filter(|k| !want.contains_key(*k)).count();
    let wrong = want
        .iter()
        .filter(|(k, v)| have.get(*k).is_some_and(|h| h.as_slice() != v.as_slice()))
        .count();
    let mut out = Vec::new();
    if missing + extra + wrong > 0 {
        out.push(format!(
            "collection {coll:?}, text index {:?}: {missing} entries missing, {extra} entries that no document has, {wrong} entries with a wrong score",
            idx.name
        ));
    }
    Ok(out)
}

/// A collection inside the caller's write transaction, so that several
/// collections (and tables, and event streams) change in one commit. Each
/// operation is all-or-nothing on its own; the transaction commits or
/// aborts them together.
///
/// ```
/// use cairndb::document::Document;
/// # let dir = tempfile::tempdir().unwrap();
/// # let db = cairndb::Database::create(dir.path().join("d.cairn"))?;
/// let txn = db.begin_write()?;
/// txn.collection::<Document>("orders").insert(&Document::new().with("_id", 1).with("total", 9.5))?;
/// txn.collection::<Document>("audit").insert(&Document::new().with("order", 1))?;
/// txn.commit()?;
/// # Ok::<(), cairndb::Error>(())
/// ```
pub struct TxnCollection<'t, T, W: SeamWrite + SeamRead = WriteTransaction> {
    txn: &'t W,
    name: String,
    _t: PhantomData<fn() -> T>,
}

impl WriteTransaction {
    /// The collection `name` within this transaction.
    pub fn collection<T>(&self, name: &str) -> TxnCollection<'_, T> {
        TxnCollection::new(self, name)
    }
}

impl<'t, T, W: SeamWrite + SeamRead> TxnCollection<'t, T, W> {
    /// The collection `name` within write transaction `txn` of any
    /// backend of the storage seam ([`crate::seam`]): the embedded
    /// engine's (as [`WriteTransaction::collection`] makes) or another's
    /// (`cairndb-etcd`), running the same code.
    pub fn new(txn: &'t W, name: &str) -> Self {
        TxnCollection {
            txn,
            name: name.to_string(),
            _t: PhantomData,
        }
    }
}

impl<T: Serialize + DeserializeOwned, W: SeamWrite + SeamRead> TxnCollection<'_, T, W> {
    fn op<R>(&self, f: impl FnOnce(&mut Writer<'_, W>) -> DocResult<R>) -> DocResult<R> {
        check_collection_name(&self.name)?;
        Writer::new(self.txn).op(f)
    }

    /// Runs `f` as one all-or-nothing operation in this transaction.
    pub(crate) fn write_op<R>(
        &self,
        f: impl FnOnce(&mut Writer<'_, W>, &str) -> DocResult<R>,
    ) -> DocResult<R> {
        check_collection_name(&self.name)?;
        Writer::new(self.txn).op(|w| f(w, &self.name))
    }

    fn meta(&self, w: &mut Writer<'_, W>) -> DocResult<Rc<CollectionMeta>> {
        w.meta(&self.name, true)?
            .ok_or_else(|| DocumentError::CollectionNotFound(self.name.clone()))
    }

    /// See [`Collection::insert`].
    pub fn insert(&self, doc: &T) -> DocResult<Value> {
        let p = prepare(doc)?;
        self.op(|w| {
            let m = self.meta(w)?;
            w.store(&self.name, &m, &p, StoreMode::Insert)?;
            Ok(p.id.clone())
        })
    }

    /// See [`Collection::insert_many`].
    pub fn insert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> DocResult<Vec<Value>>
    where
        T: 'a,
    {
        let prepared = docs
            .into_iter()
            .map(prepare)
            .collect::<DocResult<Vec<_>>>()?;
        self.op(|w| {
            let m = self.meta(w)?;
            let mut ids = Vec::with_capacity(prepared.len());
            for p in &prepared {
                w.store(&self.name, &m, p, StoreMode::Insert)?;
                ids.push(p.id.clone());
            }
            Ok(ids)
        })
    }

    /// See [`Collection::upsert`].
    pub fn upsert(&self, doc: &T) -> DocResult<bool> {
        let p = prepare(doc)?;
        self.op(|w| {
            let m = self.meta(w)?;
            w.store(&self.name, &m, &p, StoreMode::Upsert)
        })
    }

    /// See [`Collection::upsert_many`].
    pub fn upsert_many<'a>(&self, docs: impl IntoIterator<Item = &'a T>) -> DocResult<BulkResult>
    where
        T: 'a,
    {
        let prepared = docs
            .into_iter()
            .map(prepare)
            .collect::<DocResult<Vec<_>>>()?;
        self.op(|w| {
            let m = self.meta(w)?;
            let mut r = BulkResult::default();
            for p in &prepared {
                if w.store(&self.name, &m, p, StoreMode::Upsert)? {
                    r.replaced += 1;
                } else {
                    r.inserted += 1;
                }
            }
            Ok(r)
        })
    }

    /// See [`Collection::replace`].
    pub fn replace(&self, doc: &T) -> DocResult<bool> {
        let p = prepare(doc)?;
        self.op(|w| {
            let Some(m) = w.meta(&self.name, false)? else {
                return Ok(false);
            };
            w.store(&self.name, &m, &p, StoreMode::Replace)
        })
    }

    /// See [`Collection::delete_id`].
    pub fn delete_id(&self, id: impl Into<Value>) -> DocResult<bool> {
        let idk = id_key(&id.into())?;
        self.op(|w| {
            let Some(m) = w.meta(&self.name, false)? else {
                return Ok(false);
            };
            Ok(w.delete(&self.name, &m, &idk)?.is_some())
        })
    }

    /// The document with this `_id`, as this transaction sees it.
    pub fn get(&self, id: impl Into<Value>) -> DocResult<Option<T>> {
        check_collection_name(&self.name)?;
        let cat = self.txn.open_table(CATALOG)?;
        let Some(m) = read_meta(&cat, &self.name)? else {
            return Ok(None);
        };
        drop(cat);
        m.check_format(&self.name)?;
        let t = self.txn.open_table(data_def(&m.data_table()))?;
        let idk = m.id_key(&id.into())?;
        match t.get(idk.as_slice())? {
            Some(g) => Ok(Some(codec::from_slice(g.value())?)),
            None => Ok(None),
        }
    }

    /// See [`Collection::create_index`].
    pub fn create_index(&self, fields: &[(&str, i8)], opts: IndexOptions) -> DocResult<IndexInfo> {
        self.op(|w| w.create_index(&self.name, fields, &opts))
    }

    /// Adds an index's definition without building its entries (TTL if
    /// `expire_after_seconds`): the first step of a build in several
    /// transactions, for a backend that keeps the planner off the index
    /// until it is filled ([`SeamRead::incomplete_tables`];
    /// `cairndb-etcd` builds large indexes this way). From this
    /// transaction on, every write maintains the index for the documents
    /// it writes; [`TxnCollection::build_index_entries`] fills in the
    /// others. An index of that name and options that exists is returned
    /// with `created: false`.
    pub fn define_index(
        &self,
        fields: &[(&str, i8)],
        opts: IndexOptions,
        expire_after_seconds: Option<u64>,
    ) -> DocResult<IndexDefinition> {
        if let Some(s) = expire_after_seconds {
            let field = fields.first().map_or("", |(f, _)| *f);
            super::ttl::check_expire_after(&self.name, field, s)?;
        }
        self.op(|w| {
            let (info, m, created) =
                w.define_index(&self.name, fields, &opts, expire_after_seconds)?;
            Ok(IndexDefinition {
                index_table: m.index_table(&info).into_owned(),
                data_table: m.data_table().into_owned(),
                info,
                created,
            })
        })
    }

    /// Adds the entries of the index numbered `index_id` for the documents
    /// under the data-table keys `keys` (see
    /// [`TxnCollection::define_index`]); a key no longer stored is
    /// skipped. A document whose entry would duplicate another's value in
    /// a unique index is [`DocumentError::DuplicateKey`] naming the value
    /// and the document. Returns how many documents were indexed.
    pub fn build_index_entries(&self, index_id: u64, keys: &[Vec<u8>]) -> DocResult<u64> {
        self.op(|w| w.build_index_entries(&self.name, index_id, keys))
    }

    /// Creates a TTL index (see [`Collection::create_ttl_index`]). Within
    /// a caller's transaction no expired document is deleted: the caller
    /// runs [`TxnCollection::delete_expired`] when it chooses.
    pub fn create_ttl_index(
        &self,
        field: &str,
        expire_after_seconds: u64,
        opts: IndexOptions,
    ) -> DocResult<IndexInfo> {
        super::ttl::check_expire_after(&self.name, field, expire_after_seconds)?;
        self.op(|w| {
            w.create_index_with_ttl(&self.name, &[(field, 1)], &opts, Some(expire_after_seconds))
        })
    }

    /// Deletes up to `max` documents of this collection's TTL indexes
    /// expired as of `now_ms` (milliseconds since the Unix epoch), oldest
    /// first, in this transaction; returns how many (see
    /// [`Collection::delete_expired`]).
    pub fn delete_expired(&self, now_ms: i64, max: usize) -> DocResult<u64> {
        self.op(|w| super::ttl::expire(w, &self.name, now_ms, max))
    }

    /// Turns this collection's change stream on (see
    /// [`Collection::enable_change_stream`]).
    pub fn enable_change_stream(&self) -> DocResult<()> {
        self.op(|w| w.set_change_stream(&self.name, true).map(|_| ()))
    }

    /// Turns this collection's change stream off (see
    /// [`Collection::disable_change_stream`]).
    pub fn disable_change_stream(&self) -> DocResult<()> {
        self.op(|w| w.disable_change_stream(&self.name))
    }

    /// See [`Collection::create_text_index`].
    pub fn create_text_index(
        &self,
        fields: &[(&str, u32)],
        opts: TextIndexOptions,
    ) -> DocResult<IndexInfo> {
        self.op(|w| w.create_text_index(&self.name, fields, &opts))
    }

    /// See [`Collection::drop_index`].
    pub fn drop_index(&self, name: &str) -> DocResult<bool> {
        self.op(|w| w.drop_index(&self.name, name))
    }

    /// See [`Collection::drop`].
    pub fn drop_collection(&self) -> DocResult<bool> {
        self.op(|w| w.drop_collection(&self.name))
    }

    /// Renames the collection to `to` in this transaction (see
    /// [`Collection::rename`]).
    pub fn rename(&self, to: &str, drop_target: bool) -> DocResult<()> {
        self.op(|w| w.rename_collection(&self.name, to, drop_target))
    }
}

/// The number of documents of collection `name` in snapshot `r` (0 if it
/// has none or does not exist).
pub(crate) fn len_in<R: SeamRead + ?Sized>(r: &R, name: &str) -> DocResult<u64> {
    let Some(m) = meta_in(r, name)? else {
        return Ok(0);
    };
    match r.open_table_if_exists(data_def(&m.data_table()))? {
        Some(t) => Ok(t.len()?),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::document::gen;
    use proptest::prelude::*;

    proptest! {
        /// The pre-test never skips a null entry `matches_null` would
        /// add: a path that reaches values, none null, yet matches null
        /// always meets an array.
        #[test]
        fn extra_null_pre_test_is_sound(d in gen::document(), p in gen::path()) {
            let bytes = codec::to_vec(&d).unwrap();
            let root = codec::value_ref(&bytes).unwrap();
            let mut vals = Vec::new();
            path::lookup_each(root, p.segments(), LookupMode::Index, &mut |v| {
                vals.push(v.to_value()?);
                Ok(())
            })
            .unwrap();
            let needed = !vals.is_empty()
                && !vals.iter().any(|v| matches!(v, Value::Null))
                && filter::matches_null(root, p.segments()).unwrap();
            if needed {
                prop_assert!(may_need_extra_null(root, p.segments()).unwrap(), "{d:?} {p}");
            }
        }
    }

    /// Most documents skip the walk: on a path without arrays the
    /// pre-test says no.
    #[test]
    fn extra_null_pre_test_skips_paths_without_arrays() {
        let doc = |j: serde_json::Value| codec::to_vec(&Value::from_json(j).unwrap()).unwrap();
        let seg = |p: &str| FieldPath::parse(p).unwrap().segments().to_vec();
        for (d, p, want) in [
            (serde_json::json!({"a": {"b": 1}}), "a.b", false),
            (serde_json::json!({"a": 5}), "a.b", false),
            (serde_json::json!({"a": {"c": 1}}), "a.b", false),
            (serde_json::json!({"a": 1}), "a", false),
            (serde_json::json!({"a": [1, 2]}), "a", false),
            (serde_json::json!({"a": []}), "a", false),
            (serde_json::json!({"a": [{"b": 1}, {}]}), "a.b", true),
            (serde_json::json!({"a": {"b": []}}), "a.b", true),
        ] {
            let bytes = doc(d.clone());
            let got = may_need_extra_null(codec::value_ref(&bytes).unwrap(), &seg(p)).unwrap();
            assert_eq!(got, want, "{d} {p}");
        }
    }

    /// A stored text index definition that does not read (a language
    /// this build lacks) is parsed once, when the metadata is derived,
    /// and every use reports why, naming the index (before, `derive`
    /// dropped the error and each write parsed the definition again).
    #[test]
    fn unreadable_text_definition_is_reported_not_reparsed() {
        let mut m = CollectionMeta::new(7);
        m.indexes.push(IndexInfo {
            name: "t_text".into(),
            fields: Vec::new(),
            unique: false,
            sparse: false,
            id: 0,
            expire_after_seconds: None,
            text: Some(TextIndex {
                weights: vec![("t".into(), 1)],
                default_language: "klingon".into(),
            }),
            null_elements: false,
            covering: false,
            shapes: false,
            prefix_arrays: None,
        });
        m.derive();
        assert!(matches!(m.derived.text, Some(Err(_))));
        for _ in 0..2 {
            match m.text_reader() {
                Err(DocumentError::IndexError { index, reason, .. }) => {
                    assert_eq!(index, "t_text");
                    assert!(reason.contains("klingon"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
    }
}
