//! Small helpers: running engine calls off the executor, parsing request
//! bodies, ids and keys.

use axum::http::StatusCode;
use base64::Engine;
use cairndb::document::{Document, Value};
use serde::de::DeserializeOwned;
use subtle::ConstantTimeEq;

use crate::error::{ApiError, ApiResult};

/// Whether `a == b`, in time that depends on the lengths only.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// An opaque, unguessable id (cursor ids).
pub fn random_id() -> String {
    cairndb::events::Uuid::now_v7().simple().to_string()
}

/// Runs a blocking engine call on tokio's blocking pool.
pub async fn blocking<T, F>(f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> ApiResult<T> + Send + 'static,
{
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ApiError::internal(format!("the engine call failed: {e}")))?
}

/// Runs a read of the engine: on tokio's blocking pool, or inline on the
/// async worker with `Config::inline_reads`.
pub async fn read<T, F>(st: &crate::state::AppState, f: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce() -> ApiResult<T> + Send + 'static,
{
    if st.config.inline_reads {
        f()
    } else {
        blocking(f).await
    }
}

/// A JSON request body as `T`; a syntax error is a 400 `malformed_json`
/// naming the line and column, a shape error a 400 `invalid_request`.
pub fn parse_body<T: DeserializeOwned>(body: &[u8]) -> ApiResult<T> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return serde_json::from_slice(b"{}").map_err(|e| {
            ApiError::bad_request(
                "invalid_request",
                format!("the request body is required: {e}"),
            )
        });
    }
    serde_json::from_slice(body).map_err(json_error)
}

/// A serde_json error as a problem, with its position.
pub fn json_error(e: serde_json::Error) -> ApiError {
    use serde_json::error::Category;
    let code = match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => "malformed_json",
        Category::Data => "invalid_request",
    };
    ApiError::bad_request(code, format!("request body: {e}"))
        .with("line", e.line())
        .with("column", e.column())
}

/// A JSON value as a document (an object).
pub fn to_document(json: serde_json::Value) -> ApiResult<Document> {
    match Value::from_json(json)? {
        Value::Object(d) => Ok(d),
        other => Err(ApiError::bad_request(
            "not_an_object",
            format!(
                "a document must be a JSON object, not {}",
                other.kind().name()
            ),
        )),
    }
}

/// A document as JSON.
pub fn doc_json(d: Document) -> serde_json::Value {
    Value::Object(d).to_json()
}

/// An `_id` from a path segment: JSON if it parses as JSON (`42`,
/// `"abc"`, `{"$oid":"…"}`), else the text as a string.
pub fn parse_id(segment: &str) -> ApiResult<Value> {
    match serde_json::from_str::<serde_json::Value>(segment) {
        Ok(j) => Ok(Value::from_json(j)?),
        Err(_) => Ok(Value::from(segment)),
    }
}

/// How keys (and values) are written in URLs and bodies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Encoding {
    /// UTF-8 text.
    #[default]
    Utf8,
    /// Standard or URL-safe base64.
    Base64,
}

pub fn decode(s: &str, enc: Encoding, what: &str) -> ApiResult<Vec<u8>> {
    match enc {
        Encoding::Utf8 => Ok(s.as_bytes().to_vec()),
        Encoding::Base64 => {
            use base64::engine::general_purpose::{STANDARD, URL_SAFE, URL_SAFE_NO_PAD};
            STANDARD
                .decode(s)
                .or_else(|_| URL_SAFE.decode(s))
                .or_else(|_| URL_SAFE_NO_PAD.decode(s))
                .map_err(|e| {
                    ApiError::bad_request(
                        "invalid_base64",
                        format!("the {what} is not base64: {e}"),
                    )
                })
        }
    }
}

/// Bytes as JSON: a string when `enc` is UTF-8 and they are valid UTF-8,
/// else `{"base64": "…"}`-free plain base64 text under a `_b64` name.
pub fn put_bytes(
    m: &mut serde_json::Map<String, serde_json::Value>,
    name: &str,
    bytes: &[u8],
    enc: Encoding,
) {
    match (enc, std::str::from_utf8(bytes)) {
        (Encoding::Utf8, Ok(s)) => {
            m.insert(name.to_string(), serde_json::Value::String(s.to_string()));
        }
        _ => {
            m.insert(
                format!("{name}_b64"),
                serde_json::Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
            );
        }
    }
}

/// A 404 for a collection that does not exist.
pub fn no_collection(name: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "collection_not_found",
        format!("collection {name:?} does not exist"),
    )
}
