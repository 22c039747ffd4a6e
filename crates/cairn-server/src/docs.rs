//! Documents: collections, indexes, documents by `_id`, queries with
//! snapshot cursors, query-driven writes and bulk JSON-lines writes.

use std::sync::Arc;
use std::time::Instant;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use cairndb::document::{
    Collection, Document, FindOptions, IndexInfo, IndexOptions, TxnCollection, UpdateOptions,
};
use cairndb::{Database, Durability};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ApiResult};
use crate::state::{begin_write, lock, AppState, OpenCursor};
use crate::util::{blocking, doc_json, no_collection, parse_body, parse_id, to_document};

type St = State<Arc<AppState>>;
type JsonValue = serde_json::Value;

fn exists(db: &Database, name: &str) -> ApiResult<bool> {
    Ok(db.list_collections()?.iter().any(|c| c == name))
}

/// Runs `f` on the collection `name` in a write transaction and commits
/// only if it changed something (`true`); otherwise aborts (nothing to
/// commit) and answers `missing()` (a 404).
fn write_or(
    db: &Database,
    dur: Durability,
    name: &str,
    f: impl FnOnce(&TxnCollection<'_, Document>) -> ApiResult<bool>,
    missing: impl FnOnce() -> ApiError,
) -> ApiResult<()> {
    let txn = begin_write(db, dur)?;
    let changed = f(&txn.collection::<Document>(name))?;
    if changed {
        txn.commit()?;
        Ok(())
    } else {
        txn.abort();
        Err(missing())
    }
}

pub(crate) fn existing(db: &Database, name: &str) -> ApiResult<()> {
    if exists(db, name)? {
        Ok(())
    } else {
        Err(no_collection(name))
    }
}

/// Runs `f` on the blocking pool with the collection `name`, which must
/// exist (a 404 otherwise).
async fn on_existing<T: Send + 'static>(
    st: &AppState,
    name: String,
    f: impl FnOnce(Collection<'_, Document>) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        existing(&db, &name)?;
        f(db.collection::<Document>(&name).with_durability(dur))
    })
    .await
}

/// A request's optional filter; none is every document.
fn filter_or_all(filter: Option<JsonValue>) -> JsonValue {
    filter.unwrap_or_else(|| json!({}))
}

fn no_document(name: &str, id: &str) -> ApiError {
    ApiError::not_found(
        "document_not_found",
        format!("collection {name:?} has no document with _id {id}"),
    )
}

/// The names of every collection.
#[utoipa::path(get, path = "/collections", tag = "documents",
    responses((status = 200, description = "Collection names, in order", body = Object, example = json!({"collections": ["people"]}))))]
pub async fn list_collections(State(st): St) -> ApiResult<Json<JsonValue>> {
    let db = st.db.clone();
    let names = blocking(move || Ok(db.list_collections()?)).await?;
    Ok(Json(json!({ "collections": names })))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateCollection {
    /// The collection name.
    name: String,
}

/// Creates an empty collection (409 if it exists).
#[utoipa::path(post, path = "/collections", tag = "documents",
    request_body = CreateCollection,
    responses((status = 201, description = "Created", body = Object),
              (status = 409, description = "It exists", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn create_collection(State(st): St, body: Bytes) -> ApiResult<Response> {
    st.writable()?;
    let req: CreateCollection = parse_body(&body)?;
    let db = st.db.clone();
    let dur = st.durability();
    let name = req.name.clone();
    blocking(move || {
        cairndb::document::collection::check_collection_name(&name)?;
        let txn = begin_write(&db, dur)?;
        if exists(&db, &name)? {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                "collection_exists",
                format!("collection {name:?} already exists"),
            ));
        }
        {
            // The document layer creates a collection on its first write: a
            // document written and removed in the same transaction leaves
            // the collection, empty.
            let c = txn.collection::<Document>(&name);
            let id = c.insert(&Document::new())?;
            c.delete_id(id)?;
        }
        txn.commit()?;
        Ok(())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(json!({ "name": req.name }))).into_response())
}

/// Drops a collection with its indexes.
#[utoipa::path(delete, path = "/collections/{name}", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    responses((status = 204, description = "Dropped"),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn drop_collection(State(st): St, Path(name): Path<String>) -> ApiResult<StatusCode> {
    st.writable()?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        write_or(
            &db,
            dur,
            &name,
            |c| Ok(c.drop_collection()?),
            || no_collection(&name),
        )?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

fn index_json(i: &IndexInfo) -> JsonValue {
    let fields: Map<String, JsonValue> = i
        .fields
        .iter()
        .map(|(p, o)| (p.clone(), json!(o)))
        .collect();
    let mut v = json!({"name": i.name, "fields": fields, "unique": i.unique, "sparse": i.sparse});
    if let Some(secs) = i.expire_after_seconds {
        v["expire_after_seconds"] = json!(secs);
    }
    v
}

/// A collection's indexes.
#[utoipa::path(get, path = "/collections/{name}/indexes", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    responses((status = 200, description = "Indexes", body = Object),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn list_indexes(State(st): St, Path(name): Path<String>) -> ApiResult<Json<JsonValue>> {
    on_existing(&st, name, |c| {
        let list: Vec<JsonValue> = c.list_indexes()?.iter().map(index_json).collect();
        Ok(Json(json!({ "indexes": list })))
    })
    .await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateIndex {
    /// Paths and orders, e.g. `{"address.city": 1, "age": -1}` (in order).
    #[schema(value_type = Object)]
    fields: Map<String, JsonValue>,
    /// At most one document per value.
    #[serde(default)]
    unique: bool,
    /// Skip documents missing every indexed field.
    #[serde(default)]
    sparse: bool,
    /// The index name (default: paths and orders joined).
    #[serde(default)]
    name: Option<String>,
    /// A TTL index (one ascending field): documents whose field holds a
    /// date (milliseconds since the Unix epoch, or an array of them) more
    /// than this many seconds in the past are deleted by the collection's
    /// writes and by `delete_expired`.
    #[serde(default)]
    expire_after_seconds: Option<u64>,
}

/// Creates an index over the existing documents (the collection is
/// created if missing).
#[utoipa::path(post, path = "/collections/{name}/indexes", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = CreateIndex,
    responses((status = 201, description = "Created", body = Object),
              (status = 400, description = "Bad definition", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn create_index(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    st.writable()?;
    let req: CreateIndex = parse_body(&body)?;
    if req.fields.is_empty() {
        return Err(ApiError::bad_request(
            "invalid_index",
            "\"fields\" names no path",
        ));
    }
    let mut fields = Vec::new();
    for (p, o) in &req.fields {
        let o = match o.as_i64() {
            Some(1) => 1i8,
            Some(-1) => -1,
            _ => {
                return Err(ApiError::bad_request(
                    "invalid_index",
                    format!("the order of {p:?} must be 1 or -1, not {o}"),
                ))
            }
        };
        fields.push((p.clone(), o));
    }
    let db = st.db.clone();
    let dur = st.durability();
    let info = blocking(move || {
        let f: Vec<(&str, i8)> = fields.iter().map(|(p, o)| (p.as_str(), *o)).collect();
        let opts = IndexOptions {
            name: req.name,
            unique: req.unique,
            sparse: req.sparse,
        };
        let c = db.collection::<Document>(&name).with_durability(dur);
        match (req.expire_after_seconds, f.as_slice()) {
            (None, _) => Ok(c.create_index(&f, opts)?),
            (Some(secs), [(field, 1)]) => Ok(c.create_ttl_index(field, secs, opts)?),
            (Some(_), _) => Err(ApiError::bad_request(
                "invalid_index",
                "a TTL index (\"expire_after_seconds\") has exactly one field, ascending (1)",
            )),
        }
    })
    .await?;
    Ok((StatusCode::CREATED, Json(index_json(&info))).into_response())
}

/// Drops an index by name.
#[utoipa::path(delete, path = "/collections/{name}/indexes/{index}", tag = "documents",
    params(("name" = String, Path, description = "Collection"), ("index" = String, Path, description = "Index name")),
    responses((status = 204, description = "Dropped"),
              (status = 404, description = "No such index", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn drop_index(
    State(st): St,
    Path((name, index)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    st.writable()?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        existing(&db, &name)?;
        write_or(
            &db,
            dur,
            &name,
            |c| Ok(c.drop_index(&index)?),
            || {
                ApiError::not_found(
                    "index_not_found",
                    format!("collection {name:?} has no index {index:?}"),
                )
            },
        )?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct DeleteExpiredParams {
    /// The most documents deleted (default 10000).
    max: Option<usize>,
}

/// Deletes expired documents of the collection's TTL indexes now, in one
/// transaction (the collection's writes delete a batch each too).
#[utoipa::path(post, path = "/collections/{name}/delete_expired", tag = "documents",
    params(("name" = String, Path, description = "Collection"), DeleteExpiredParams),
    responses((status = 200, description = "`deleted`", body = Object, example = json!({"deleted": 3})),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn delete_expired(
    State(st): St,
    Path(name): Path<String>,
    Query(p): Query<DeleteExpiredParams>,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    // One write transaction: bounded like every other batch route.
    let max = p.max.unwrap_or(10_000).clamp(1, 10_000);
    on_existing(&st, name, move |c| {
        Ok(Json(json!({ "deleted": c.delete_expired(max)? })))
    })
    .await
}

/// Inserts a document (its `_id` is generated if missing; 409 if taken).
#[utoipa::path(post, path = "/collections/{name}/documents", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body(content = Object, description = "The document"),
    responses((status = 201, description = "Inserted; its `_id`", body = Object),
              (status = 409, description = "Duplicate key", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn insert_document(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Response> {
    st.writable()?;
    let doc = to_document(parse_body(&body)?)?;
    let db = st.db.clone();
    let dur = st.durability();
    let id = blocking(move || {
        Ok(db
            .collection::<Document>(&name)
            .with_durability(dur)
            .insert(&doc)?)
    })
    .await?;
    Ok((StatusCode::CREATED, Json(json!({ "_id": id.to_json() }))).into_response())
}

/// The ETag of a document: a strong validator of its content (a hash of
/// its JSON as served), quoted. `If-Match` on a replace compares with it.
pub fn etag_of(doc: &JsonValue) -> String {
    // FNV-1a, 64 bits: content changes show; it is not a secret.
    let text = doc.to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("\"{h:016x}\"")
}

/// Whether an `If-Match` value lets a write go ahead on a document whose
/// ETag is `current` (`None`: no such document). `*` matches any existing
/// document; weak tags never match (RFC 9110: If-Match compares strongly).
fn if_match_allows(if_match: &str, current: Option<&str>) -> bool {
    let Some(current) = current else {
        return false;
    };
    if_match
        .split(',')
        .map(str::trim)
        .any(|t| t == "*" || t == current)
}

fn with_etag<T: IntoResponse>(etag: &str, body: T) -> Response {
    let mut r = body.into_response();
    if let Ok(v) = axum::http::HeaderValue::from_str(etag) {
        r.headers_mut().insert(header::ETAG, v);
    }
    r
}

/// A document by `_id` (the path segment is JSON — `42`, `"a"`,
/// `{"$oid":"…"}` — or else a string), with its `ETag`.
#[utoipa::path(get, path = "/collections/{name}/documents/{id}", tag = "documents",
    params(("name" = String, Path, description = "Collection"), ("id" = String, Path, description = "The `_id`: JSON, or else a string")),
    responses((status = 200, description = "The document", body = Object,
                  headers(("ETag" = String, description = "The document's version, for `If-Match` on a replace"))),
              (status = 404, description = "No such document", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn get_document(
    State(st): St,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    let idv = parse_id(&id)?;
    let db = st.db.clone();
    let coll = name.clone();
    // The existence check only when nothing is found (which 404 it is).
    let found = crate::util::read(&st, move || {
        match db.collection::<Document>(&coll).get(idv)? {
            Some(d) => Ok(Some(d)),
            None => {
                existing(&db, &coll)?;
                Ok(None)
            }
        }
    })
    .await?;
    match found {
        Some(d) => {
            let j = doc_json(d);
            Ok(with_etag(&etag_of(&j), Json(j)))
        }
        None => Err(no_document(&name, &id)),
    }
}

/// Replaces the document with this `_id` (404 if there is none). With
/// `If-Match`, only if the document is still the version with that `ETag`
/// (checked in the write transaction, so of two saves from the same
/// version exactly one lands): 412 otherwise, with the current ETag.
#[utoipa::path(put, path = "/collections/{name}/documents/{id}", tag = "documents",
    params(("name" = String, Path, description = "Collection"), ("id" = String, Path, description = "The `_id`: JSON, or else a string"),
           ("If-Match" = Option<String>, Header, description = "Replace only if the document's ETag is this (or `*`: if it exists)")),
    request_body(content = Object, description = "The new document (its `_id`, if given, must match)"),
    responses((status = 200, description = "Replaced", body = Object,
                  headers(("ETag" = String, description = "The new version"))),
              (status = 404, description = "No such document", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 412, description = "Changed or deleted since that version (`current_etag`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn replace_document(
    State(st): St,
    Path((name, id)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> ApiResult<Response> {
    st.writable()?;
    let idv = parse_id(&id)?;
    let if_match = match headers.get(header::IF_MATCH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .map_err(|_| {
                    ApiError::bad_request("invalid_request", "If-Match is not visible ASCII")
                })?
                .to_owned(),
        ),
    };
    let mut doc = to_document(parse_body(&body)?)?;
    match doc.get("_id") {
        Some(given) if *given != idv => {
            return Err(ApiError::bad_request(
                "id_mismatch",
                "the document's _id differs from the one in the path",
            ))
        }
        _ => {
            doc.insert("_id", idv.clone());
        }
    }
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        let txn = begin_write(&db, dur)?;
        let etag = {
            let c = txn.collection::<Document>(&name);
            if let Some(want) = &if_match {
                let current = c.get(idv.clone())?.map(|d| etag_of(&doc_json(d)));
                if !if_match_allows(want, current.as_deref()) {
                    let detail = match &current {
                        Some(_) => format!(
                            "the document with _id {id} changed since version {want}; reload it (nothing was saved)"
                        ),
                        None => format!("collection {name:?} has no document with _id {id} (deleted?); nothing was saved"),
                    };
                    let mut e = ApiError::new(
                        StatusCode::PRECONDITION_FAILED,
                        "precondition_failed",
                        detail,
                    );
                    if let Some(cur) = current {
                        e = e.with("current_etag", cur);
                    }
                    return Err(e);
                }
            }
            if !c.replace(&doc)? {
                return Err(no_document(&name, &id));
            }
            c.get(idv.clone())?.map(|d| etag_of(&doc_json(d)))
        };
        txn.commit()?;
        let body = Json(json!({ "_id": idv.to_json() }));
        Ok(match etag {
            Some(t) => with_etag(&t, body),
            None => body.into_response(),
        })
    })
    .await
}

/// Deletes the document with this `_id`.
#[utoipa::path(delete, path = "/collections/{name}/documents/{id}", tag = "documents",
    params(("name" = String, Path, description = "Collection"), ("id" = String, Path, description = "The `_id`: JSON, or else a string")),
    responses((status = 204, description = "Deleted"),
              (status = 404, description = "No such document", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn delete_document(
    State(st): St,
    Path((name, id)): Path<(String, String)>,
) -> ApiResult<StatusCode> {
    st.writable()?;
    let idv = parse_id(&id)?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        existing(&db, &name)?;
        write_or(
            &db,
            dur,
            &name,
            |c| Ok(c.delete_id(idv)?),
            || no_document(&name, &id),
        )?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

/// A query: filter, sort, skip, limit, projection (the document layer's
/// JSON languages).
#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct QueryBody {
    /// The filter (default: every document).
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<JsonValue>,
    /// A sort spec such as `{"age": -1}`.
    #[serde(default)]
    #[schema(value_type = Object)]
    sort: Option<JsonValue>,
    /// Results to skip.
    #[serde(default)]
    skip: Option<u64>,
    /// The most results.
    #[serde(default)]
    limit: Option<u64>,
    /// Fields kept (`{"a": 1}`) or dropped (`{"a": 0}`).
    #[serde(default)]
    #[schema(value_type = Object)]
    projection: Option<JsonValue>,
    /// Documents per page (default 100, at most 10000).
    #[serde(default)]
    batch_size: Option<usize>,
}

const DEFAULT_BATCH: usize = 100;
const MAX_BATCH: usize = 10_000;

fn options(q: &QueryBody) -> ApiResult<FindOptions> {
    let mut o = FindOptions::new();
    if let Some(s) = &q.sort {
        o = o.sort(s.clone())?;
    }
    if let Some(p) = &q.projection {
        o = o.projection(p.clone())?;
    }
    if let Some(n) = q.skip {
        o = o.skip(n);
    }
    if let Some(n) = q.limit {
        o = o.limit(n);
    }
    Ok(o)
}

/// Reads up to `n` documents of a cursor; whether more remain.
fn page(c: &mut OpenCursor, n: usize) -> ApiResult<(Vec<JsonValue>, bool)> {
    let mut out = Vec::with_capacity(n.min(1024));
    if let Some(d) = c.peeked.take() {
        out.push(doc_json(d));
    }
    while out.len() < n {
        match c.results.next() {
            Some(d) => out.push(doc_json(d?)),
            None => return Ok((out, false)),
        }
    }
    // One more, to tell whether another page exists.
    match c.results.next() {
        Some(d) => {
            c.peeked = Some(d?);
            Ok((out, true))
        }
        None => Ok((out, false)),
    }
}

fn batch_of(n: Option<usize>) -> usize {
    n.unwrap_or(DEFAULT_BATCH).clamp(1, MAX_BATCH)
}

/// Runs a query; returns the first page and, if more remain, a cursor id
/// whose pages come from the same snapshot.
#[utoipa::path(post, path = "/collections/{name}/find", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = QueryBody,
    responses((status = 200, description = "`documents` and `cursor` (null when done)", body = Object),
              (status = 400, description = "Bad filter, sort or projection", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn find(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    let q: QueryBody = parse_body(&body)?;
    let opts = options(&q)?;
    let batch = batch_of(q.batch_size);
    let st2 = st.clone();
    let db = st.db.clone();
    crate::util::read(&st, move || {
        let c = db.collection::<Document>(&name);
        let results = c.find_with(filter_or_all(q.filter), opts)?;
        let mut c = OpenCursor {
            results,
            peeked: None,
            last_used: Instant::now(),
        };
        let (docs, more) = page(&mut c, batch)?;
        if docs.is_empty() {
            // Nothing found: no such collection is a 404.
            existing(&db, &name)?;
        }
        let cursor = if more { Some(st2.add_cursor(c)?) } else { None };
        Ok(Json(json!({ "documents": docs, "cursor": cursor })))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct PageParams {
    /// Documents per page (default 100, at most 10000).
    batch_size: Option<usize>,
}

/// The next page of a find cursor (same snapshot as the first page).
#[utoipa::path(get, path = "/cursors/{cursor}", tag = "documents",
    params(("cursor" = String, Path, description = "Cursor id"), PageParams),
    responses((status = 200, description = "`documents` and `cursor` (null when done)", body = Object),
              (status = 404, description = "No such cursor (done, deleted or expired)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn next_page(
    State(st): St,
    Path(cursor): Path<String>,
    Query(p): Query<PageParams>,
) -> ApiResult<Json<JsonValue>> {
    let slot = st.cursor(&cursor)?;
    let batch = batch_of(p.batch_size);
    let st2 = st.clone();
    blocking(move || {
        let (docs, more) = {
            let mut c = lock(&slot);
            c.last_used = Instant::now();
            page(&mut c, batch)?
        };
        let next = if more {
            Some(cursor)
        } else {
            st2.remove_cursor(&cursor);
            None
        };
        Ok(Json(json!({ "documents": docs, "cursor": next })))
    })
    .await
}

/// Closes a cursor (its snapshot is released).
#[utoipa::path(delete, path = "/cursors/{cursor}", tag = "documents",
    params(("cursor" = String, Path, description = "Cursor id")),
    responses((status = 204, description = "Closed"),
              (status = 404, description = "No such cursor", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn close_cursor(State(st): St, Path(cursor): Path<String>) -> ApiResult<StatusCode> {
    if st.remove_cursor(&cursor) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found(
            "cursor_not_found",
            format!("no open cursor {cursor:?}"),
        ))
    }
}

#[derive(Deserialize, ToSchema, Default)]
#[serde(deny_unknown_fields)]
pub struct FilterBody {
    /// The filter (default: every document).
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<JsonValue>,
}

/// How many documents match a filter.
#[utoipa::path(post, path = "/collections/{name}/count", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = FilterBody,
    responses((status = 200, description = "`count`", body = Object),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn count(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    let q: FilterBody = parse_body(&body)?;
    on_existing(&st, name, |c| {
        let n = c.count(filter_or_all(q.filter))?;
        Ok(Json(json!({ "count": n })))
    })
    .await
}

/// The plan a query would use and what running it reads.
#[utoipa::path(post, path = "/collections/{name}/explain", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = QueryBody,
    responses((status = 200, description = "The plan, candidates and counts", body = Object),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn explain(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    let q: QueryBody = parse_body(&body)?;
    let opts = options(&q)?;
    on_existing(&st, name, |c| {
        let e = c.explain(filter_or_all(q.filter), opts)?;
        Ok(Json(e.to_json()))
    })
    .await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateBody {
    /// The filter.
    #[serde(default)]
    #[schema(value_type = Object)]
    filter: Option<JsonValue>,
    /// The update (`{"$set": {…}}`, …).
    #[schema(value_type = Object)]
    update: JsonValue,
    /// Insert a document when nothing matches.
    #[serde(default)]
    upsert: bool,
}

/// Updates every matching document, in one transaction (the matching
/// documents are found through the planner, so indexes are used).
#[utoipa::path(post, path = "/collections/{name}/update_many", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = UpdateBody,
    responses((status = 200, description = "`matched`, `modified`, `upserted_id`", body = Object),
              (status = 400, description = "Bad filter or update", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn update_many(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let q: UpdateBody = parse_body(&body)?;
    let filter = filter_or_all(q.filter);
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        if !q.upsert {
            existing(&db, &name)?;
        }
        // One transaction; the matching documents are found through the
        // planner (indexes), on the snapshot the transaction starts from.
        let r = db
            .collection::<Document>(&name)
            .with_durability(dur)
            .update_many(filter, q.update, UpdateOptions { upsert: q.upsert })?;
        Ok(Json(json!({
            "matched": r.matched,
            "modified": r.modified,
            "upserted_id": r.upserted_id.map(|v| v.to_json()),
        })))
    })
    .await
}

/// Deletes every matching document, in one transaction.
#[utoipa::path(post, path = "/collections/{name}/delete_many", tag = "documents",
    params(("name" = String, Path, description = "Collection")),
    request_body = FilterBody,
    responses((status = 200, description = "`deleted`", body = Object),
              (status = 404, description = "No such collection", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn delete_many(
    State(st): St,
    Path(name): Path<String>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let q: FilterBody = parse_body(&body)?;
    on_existing(&st, name, |c| {
        let n = c.delete_many(filter_or_all(q.filter))?;
        Ok(Json(json!({ "deleted": n })))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct BulkParams {
    /// `insert` (default; an existing `_id` is an error) or `upsert`.
    mode: Option<String>,
    /// Documents per transaction (default 1000).
    batch: Option<usize>,
}

/// Writes one batch in one transaction; on error, nothing of it.
fn write_batch(
    db: &Database,
    dur: Durability,
    name: &str,
    upsert: bool,
    docs: &[(u64, Document)],
) -> Result<(), (u64, ApiError)> {
    let Some(&(first, _)) = docs.first() else {
        return Ok(());
    };
    let txn = begin_write(db, dur).map_err(|e| (first, e.into()))?;
    {
        let c = txn.collection::<Document>(name);
        for (line, d) in docs {
            let r = if upsert {
                c.upsert(d).map(|_| ())
            } else {
                c.insert(d).map(|_| ())
            };
            r.map_err(|e| (*line, e.into()))?;
        }
    }
    txn.commit().map_err(|e| (first, e.into()))?;
    Ok(())
}

/// A bulk write's problem at `line`, saying how many documents were
/// written before it.
fn bulk_failure(line: u64, e: ApiError, written: u64) -> ApiError {
    let detail = format!(
        "line {line}: {} (nothing of the batch holding this line was written; {written} documents were)",
        e.detail
    );
    let mut e = e.with("line", line).with("written", written);
    e.detail = detail;
    e
}

/// [`write_batch`] on the blocking pool: how many documents it wrote, or
/// the problem (after `written` documents of earlier batches).
async fn write_batch_blocking(
    st: &AppState,
    name: &str,
    upsert: bool,
    docs: Vec<(u64, Document)>,
    written: u64,
) -> ApiResult<u64> {
    let db = st.db.clone();
    let dur = st.durability();
    let name = name.to_owned();
    tokio::task::spawn_blocking(move || {
        write_batch(&db, dur, &name, upsert, &docs).map(|_| docs.len() as u64)
    })
    .await
    .map_err(|e| ApiError::internal(format!("the bulk write failed: {e}")))?
    .map_err(|(line, e)| bulk_failure(line, e, written))
}

/// Bulk insert or upsert of JSON lines (one document per line; the body is
/// streamed). Each batch of lines is one transaction: on the first bad
/// line the batch holding it is not written (earlier batches stay) and the
/// problem names the line and how many documents were written. A line
/// longer than the per-line limit, or a body longer than the bulk limit,
/// is a 413 naming the line.
#[utoipa::path(post, path = "/collections/{name}/bulk", tag = "documents",
    params(("name" = String, Path, description = "Collection"), BulkParams),
    request_body(content = String, description = "JSON lines, one document per line (the content type is not checked: `application/x-ndjson` is as good)", content_type = "text/plain"),
    responses((status = 200, description = "`written`, `batches`", body = Object),
              (status = 400, description = "A bad line (`line`, `written`)", body = crate::error::ProblemSchema, content_type = "application/problem+json"),
              (status = 413, description = "A line or the body over its limit (`line`, `written`)", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn bulk(
    State(st): St,
    Path(name): Path<String>,
    Query(p): Query<BulkParams>,
    body: Body,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    let upsert = match p.mode.as_deref() {
        None | Some("insert") => false,
        Some("upsert") => true,
        Some(m) => {
            return Err(ApiError::bad_request(
                "invalid_request",
                format!("mode must be insert or upsert, not {m:?}"),
            ))
        }
    };
    cairndb::document::collection::check_collection_name(&name)?;
    let batch = p.batch.unwrap_or(1000).clamp(1, 100_000);
    let max_line = st.config.max_bulk_line;
    let max_total = st.config.max_bulk_body;
    let too_large = |line: u64, what: String, written: u64| {
        bulk_failure(
            line,
            ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", what),
            written,
        )
    };
    let mut stream = body.into_data_stream();
    let mut buf: Vec<u8> = Vec::new();
    let mut total = 0u64;
    let mut line_no = 0u64;
    let mut pending: Vec<(u64, Document)> = Vec::new();
    let mut written = 0u64;
    let mut batches = 0u64;
    let mut done = false;
    while !done {
        let chunk = match stream.next().await {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                return Err(ApiError::bad_request(
                    "body_error",
                    format!("reading the request body: {e}"),
                ))
            }
            None => {
                done = true;
                Bytes::new()
            }
        };
        total += chunk.len() as u64;
        if total > max_total {
            // The line holding the first byte past the limit (`buf` holds
            // no newline: its complete lines were read).
            let within = (max_total - (total - chunk.len() as u64)) as usize;
            let at = line_no
                + 1
                + chunk[..within.min(chunk.len())]
                    .iter()
                    .filter(|&&b| b == b'\n')
                    .count() as u64;
            return Err(too_large(
                at,
                format!("the request body is longer than {max_total} bytes (the bulk limit)"),
                written,
            ));
        }
        buf.extend_from_slice(&chunk);
        // Every complete line (and, at the end, the rest).
        loop {
            let end = match buf.iter().position(|&b| b == b'\n') {
                Some(i) => i,
                None if done && !buf.is_empty() => buf.len(),
                None => {
                    if buf.len() > max_line {
                        return Err(too_large(
                            line_no + 1,
                            format!("a line is longer than {max_line} bytes (the per-line limit)"),
                            written,
                        ));
                    }
                    break;
                }
            };
            if end > max_line {
                return Err(too_large(
                    line_no + 1,
                    format!("a line is longer than {max_line} bytes (the per-line limit)"),
                    written,
                ));
            }
            let line: Vec<u8> = if end < buf.len() {
                let mut l: Vec<u8> = buf.drain(..=end).collect();
                l.pop();
                l
            } else {
                std::mem::take(&mut buf)
            };
            line_no += 1;
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let doc = serde_json::from_slice::<JsonValue>(&line)
                .map_err(|e| {
                    ApiError::bad_request("malformed_json", format!("not valid JSON: {e}"))
                        .with("column", e.column())
                })
                .and_then(to_document)
                .map_err(|e| bulk_failure(line_no, e, written))?;
            pending.push((line_no, doc));
            if pending.len() >= batch {
                let docs = std::mem::take(&mut pending);
                written += write_batch_blocking(&st, &name, upsert, docs, written).await?;
                batches += 1;
            }
        }
    }
    if !pending.is_empty() {
        written += write_batch_blocking(&st, &name, upsert, pending, written).await?;
        batches += 1;
    }
    Ok(Json(json!({ "written": written, "batches": batches })))
}
