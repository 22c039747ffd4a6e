//! Key-value tables: list, get/put/delete by key, range pages. Keys are
//! UTF-8 text or base64 (`?encoding=base64`); values are returned as UTF-8
//! text when they are (`value`), else as base64 (`value_b64`). A PUT's body
//! is the value's bytes.

use std::ops::Bound;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use cairndb::{CoreError, ReadableTable};
use serde::Deserialize;
use serde_json::{json, Map};
use utoipa::IntoParams;

use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::util::{blocking, decode, put_bytes, Encoding};

type St = State<Arc<AppState>>;
type JsonValue = serde_json::Value;

/// The type names of byte-string and UTF-8 keys and values.
const BYTES: &str = "&[u8]";
const STR: &str = "&str";

#[derive(Deserialize, IntoParams)]
pub struct KeyParams {
    /// How the key in the path is written: `utf8` (default) or `base64`.
    encoding: Option<Encoding>,
}

fn internal_table(name: &str) -> ApiResult<()> {
    if name.starts_with('$') {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "internal_table",
            format!("{name:?} is a table of the document or event layer; use their endpoints"),
        ));
    }
    Ok(())
}

/// The key-value tables (not the document and event layers' own), with
/// their key and value types and lengths.
#[utoipa::path(get, path = "/kv", tag = "kv",
    responses((status = 200, description = "`tables`: name, key_type, value_type, len", body = Object)))]
pub async fn list_tables(State(st): St) -> ApiResult<Json<JsonValue>> {
    let db = st.db.clone();
    blocking(move || {
        let r = db.begin_read()?;
        let mut out = Vec::new();
        for name in r.list_tables()? {
            if name.starts_with('$') {
                continue;
            }
            let (k, v) = r.table_types(&name)?.unwrap_or_default();
            let len = r.open_untyped_table(&name)?.len();
            out.push(json!({"name": name, "key_type": k, "value_type": v, "len": len}));
        }
        Ok(Json(json!({ "tables": out })))
    })
    .await
}

fn entry(key: &[u8], value: &[u8], enc: Encoding) -> JsonValue {
    let mut m = Map::new();
    put_bytes(&mut m, "key", key, enc);
    put_bytes(&mut m, "value", value, enc);
    JsonValue::Object(m)
}

/// The value under a key.
#[utoipa::path(get, path = "/kv/{table}/keys/{key}", tag = "kv",
    params(("table" = String, Path, description = "Table"), ("key" = String, Path, description = "The key (see `encoding`)"), KeyParams),
    responses((status = 200, description = "`key` and `value` (or `_b64` forms)", body = Object),
              (status = 404, description = "No such table or key", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn get_key(
    State(st): St,
    Path((table, key)): Path<(String, String)>,
    Query(p): Query<KeyParams>,
) -> ApiResult<Json<JsonValue>> {
    let enc = p.encoding.unwrap_or_default();
    let k = decode(&key, enc, "key")?;
    let db = st.db.clone();
    blocking(move || {
        cairndb::limits::check_key_len(k.len(), db.page_size())?;
        let r = db.begin_read()?;
        let t = r.open_untyped_table(&table)?;
        match t.get(k.as_slice())? {
            Some(v) => Ok(Json(entry(&k, v.as_bytes(), enc))),
            None => Err(ApiError::not_found(
                "key_not_found",
                format!("key {key:?} not found in table {table:?}"),
            )),
        }
    })
    .await
}

/// Stores the request body as the value of a key (a missing table is
/// created with byte-string keys and values; an existing one must hold
/// byte strings or UTF-8 text).
#[utoipa::path(put, path = "/kv/{table}/keys/{key}", tag = "kv",
    params(("table" = String, Path, description = "Table"), ("key" = String, Path, description = "The key (see `encoding`)"), KeyParams),
    request_body(content = String, description = "The value's bytes", content_type = "application/octet-stream"),
    responses((status = 200, description = "`replaced`: whether a value was there", body = Object),
              (status = 409, description = "The table's types are not bytes or text", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn put_key(
    State(st): St,
    Path((table, key)): Path<(String, String)>,
    Query(p): Query<KeyParams>,
    body: Bytes,
) -> ApiResult<Json<JsonValue>> {
    st.writable()?;
    internal_table(&table)?;
    let k = decode(&key, p.encoding.unwrap_or_default(), "key")?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        let txn = crate::state::begin_write(&db, dur)?;
        let replaced = {
            if let Some((kt, vt)) = txn.table_types(&table)? {
                let ok = |t: &str| t == BYTES || t == STR;
                if !ok(&kt) || !ok(&vt) {
                    return Err(ApiError::new(
                        StatusCode::CONFLICT,
                        "unsupported_types",
                        format!("table {table:?} holds {kt} keys and {vt} values; only byte strings and text can be written here"),
                    ));
                }
                let utf8 = |t: &str, b: &[u8], what: &str| {
                    if t == STR && std::str::from_utf8(b).is_err() {
                        Err(ApiError::bad_request(
                            "invalid_utf8",
                            format!("table {table:?} stores text {what}s; this {what} is not UTF-8"),
                        ))
                    } else {
                        Ok(())
                    }
                };
                utf8(&kt, &k, "key")?;
                utf8(&vt, &body, "value")?;
            }
            let mut t = txn.open_untyped_table(&table)?;
            let old = t.insert(k.as_slice(), body.as_ref())?;
            old.is_some()
        };
        txn.commit()?;
        Ok(Json(json!({ "replaced": replaced })))
    })
    .await
}

/// Removes a key.
#[utoipa::path(delete, path = "/kv/{table}/keys/{key}", tag = "kv",
    params(("table" = String, Path, description = "Table"), ("key" = String, Path, description = "The key (see `encoding`)"), KeyParams),
    responses((status = 204, description = "Removed"),
              (status = 404, description = "No such table or key", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn delete_key(
    State(st): St,
    Path((table, key)): Path<(String, String)>,
    Query(p): Query<KeyParams>,
) -> ApiResult<StatusCode> {
    st.writable()?;
    internal_table(&table)?;
    let k = decode(&key, p.encoding.unwrap_or_default(), "key")?;
    let db = st.db.clone();
    let dur = st.durability();
    blocking(move || {
        cairndb::limits::check_key_len(k.len(), db.page_size())?;
        let txn = crate::state::begin_write(&db, dur)?;
        if txn.table_types(&table)?.is_none() {
            return Err(CoreError::TableNotFound(table).into());
        }
        let removed = {
            let mut t = txn.open_untyped_table(&table)?;
            let r = t.remove(k.as_slice())?;
            r.is_some()
        };
        if !removed {
            txn.abort();
            return Err(ApiError::not_found(
                "key_not_found",
                format!("key {key:?} not found in table {table:?}"),
            ));
        }
        txn.commit()?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
pub struct RangeParams {
    /// The first key (inclusive; default: the first).
    start: Option<String>,
    /// The end key (exclusive; default: past the last).
    end: Option<String>,
    /// The most entries (default 100, at most 10000).
    limit: Option<usize>,
    /// How keys are written, in the query and in the answer: `utf8`
    /// (default) or `base64`.
    encoding: Option<Encoding>,
}

/// A page of entries in key order; `next` holds the first key of the next
/// page (`key`, or `key_b64` when it is not text), null at the end.
#[utoipa::path(get, path = "/kv/{table}/range", tag = "kv",
    params(("table" = String, Path, description = "Table"), RangeParams),
    responses((status = 200, description = "`entries` and `next`", body = Object),
              (status = 404, description = "No such table", body = crate::error::ProblemSchema, content_type = "application/problem+json")))]
pub async fn range(
    State(st): St,
    Path(table): Path<String>,
    Query(p): Query<RangeParams>,
) -> ApiResult<Json<JsonValue>> {
    let enc = p.encoding.unwrap_or_default();
    let start = p
        .start
        .as_deref()
        .map(|s| decode(s, enc, "start"))
        .transpose()?;
    let end = p
        .end
        .as_deref()
        .map(|s| decode(s, enc, "end"))
        .transpose()?;
    let limit = p.limit.unwrap_or(100).clamp(1, 10_000);
    let db = st.db.clone();
    blocking(move || {
        let r = db.begin_read()?;
        let t = r.open_untyped_table(&table)?;
        let lo = start.as_deref().map_or(Bound::Unbounded, Bound::Included);
        let hi = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
        let mut out = Vec::new();
        let mut next = JsonValue::Null;
        for item in t.range::<&[u8]>((lo, hi))? {
            let (k, v) = item?;
            if out.len() == limit {
                let mut m = Map::new();
                put_bytes(&mut m, "key", k.as_bytes(), enc);
                next = JsonValue::Object(m);
                break;
            }
            out.push(entry(k.as_bytes(), v.as_bytes(), enc));
        }
        Ok(Json(json!({ "entries": out, "next": next })))
    })
    .await
}
