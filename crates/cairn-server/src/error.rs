//! Errors as RFC 9457 problem details (`application/problem+json`): a
//! status, a stable machine-readable `code`, a title and the typed error's
//! message as `detail`, plus extension members where they help (the
//! current version of a stream on a version conflict, the line of a bulk
//! write).

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use cairndb::document::DocumentError;
use cairndb::events::EventError;
use cairndb::{CoreError, Error};
use serde_json::{Map, Value};

/// The media type of problem details.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// The extension member behind [`ApiError::retry_after`].
const RETRY_AFTER: &str = "retry_after";

/// An error of the HTTP API, rendered as problem+json.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// A stable snake_case code (e.g. `duplicate_key`).
    pub code: String,
    /// The human-readable explanation.
    pub detail: String,
    /// Extension members (boxed: errors stay small).
    pub extra: Option<Box<Map<String, Value>>>,
}

/// The result of a handler.
pub type ApiResult<T> = Result<T, ApiError>;

impl ApiError {
    /// An error with `status`, `code` and `detail`.
    pub fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            detail: detail.into(),
            extra: None,
        }
    }

    /// A 400 with `code`.
    pub fn bad_request(code: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, detail)
    }

    /// A 404 with `code`.
    pub fn not_found(code: &str, detail: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, detail)
    }

    /// A 500 `internal`.
    pub fn internal(detail: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", detail)
    }

    /// Adds an extension member.
    pub fn with(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.extra
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.into());
        self
    }

    /// Asks the client to retry after `secs` seconds: a `Retry-After`
    /// header and a `retry_after` member.
    pub fn retry_after(self, secs: u64) -> Self {
        self.with(RETRY_AFTER, secs)
    }

    /// The problem document.
    pub fn body(&self) -> Value {
        let mut m = Map::new();
        m.insert("type".into(), Value::String("about:blank".into()));
        m.insert(
            "title".into(),
            Value::String(
                self.status
                    .canonical_reason()
                    .unwrap_or("Error")
                    .to_string(),
            ),
        );
        m.insert("status".into(), Value::from(self.status.as_u16()));
        m.insert("code".into(), Value::String(self.code.clone()));
        m.insert("detail".into(), Value::String(self.detail.clone()));
        for (k, v) in self.extra.iter().flat_map(|m| m.iter()) {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = self.body().to_string();
        let mut r = (self.status, body).into_response();
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        let retry = self
            .extra
            .as_ref()
            .and_then(|m| m.get(RETRY_AFTER))
            .and_then(Value::as_u64);
        if let Some(secs) = retry {
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        r
    }
}

/// `CamelCase` → `camel_case`.
fn snake(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 4);
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The variant name of an error from its `Debug` form (`Foo { .. }`,
/// `Foo(..)`, `Foo`), as the stable code.
fn variant_code(debug: &str) -> String {
    let end = debug
        .find(|c: char| !c.is_ascii_alphanumeric())
        .unwrap_or(debug.len());
    snake(&debug[..end])
}

fn core_status(e: &CoreError) -> StatusCode {
    match e {
        CoreError::TableNotFound(_) | CoreError::NotFound { .. } => StatusCode::NOT_FOUND,
        CoreError::DatabaseLocked { .. }
        | CoreError::ReadersActive(_)
        | CoreError::TransactionBusy => StatusCode::LOCKED,
        CoreError::ReadOnly => StatusCode::FORBIDDEN,
        CoreError::KeyTooLarge { .. }
        | CoreError::ValueTooLarge { .. }
        | CoreError::InvalidTableName { .. }
        | CoreError::InvalidOption(_)
        | CoreError::AppendOutOfOrder => StatusCode::BAD_REQUEST,
        CoreError::TableTypeMismatch(_)
        | CoreError::TableAlreadyOpen(_)
        | CoreError::NotEmpty { .. } => StatusCode::CONFLICT,
        CoreError::TooManyReaders { .. } | CoreError::Poisoned { .. } => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        CoreError::FileSizeLimit { .. } => StatusCode::INSUFFICIENT_STORAGE,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

fn doc_status(e: &DocumentError) -> StatusCode {
    match e {
        DocumentError::Core(c) => core_status(c),
        DocumentError::DuplicateKey { .. } => StatusCode::CONFLICT,
        DocumentError::CollectionNotFound(_) => StatusCode::NOT_FOUND,
        // MongoDB's ChangeStreamHistoryLost: the history asked for is gone.
        DocumentError::ChangeStreamHistoryLost { .. } => StatusCode::GONE,
        DocumentError::ChangeStreamNotEnabled { .. } => StatusCode::CONFLICT,
        // Stored bytes that do not decode: the file, not the request.
        DocumentError::UnexpectedEnd { .. }
        | DocumentError::InvalidTag { .. }
        | DocumentError::Malformed { .. }
        | DocumentError::TrailingBytes { .. }
        | DocumentError::InvalidKey { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        DocumentError::DocumentTooLarge { .. } | DocumentError::IdTooLarge { .. } => {
            StatusCode::PAYLOAD_TOO_LARGE
        }
        _ => StatusCode::BAD_REQUEST,
    }
}

fn event_status(e: &EventError) -> StatusCode {
    match e {
        EventError::Core(c) => core_status(c),
        EventError::Payload(d) => doc_status(d),
        EventError::WrongExpectedVersion { .. } | EventError::IdempotencyConflict { .. } => {
            StatusCode::CONFLICT
        }
        EventError::StreamDeleted(_) => StatusCode::GONE,
        EventError::StreamNotFound(_) => StatusCode::NOT_FOUND,
        _ => StatusCode::BAD_REQUEST,
    }
}

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        let (status, code) = match &e {
            Error::Core(c) => (core_status(c), variant_code(&format!("{c:?}"))),
            Error::Document(d) => (doc_status(d), variant_code(&format!("{d:?}"))),
            Error::Event(v) => (event_status(v), variant_code(&format!("{v:?}"))),
            _ => (StatusCode::INTERNAL_SERVER_ERROR, "internal".to_string()),
        };
        let code = if e.is_corruption() {
            "corruption".to_string()
        } else {
            code
        };
        let mut err = ApiError::new(status, &code, e.to_string());
        if let Error::Event(EventError::WrongExpectedVersion { stream, actual, .. }) = &e {
            err = err
                .with("stream", stream.as_str())
                .with("current_version", actual.map(|v| Value::from(v.0)));
        }
        if status.is_server_error() {
            tracing::error!(code = %err.code, "engine error: {}", err.detail);
        }
        err
    }
}

impl From<CoreError> for ApiError {
    fn from(e: CoreError) -> Self {
        Error::from(e).into()
    }
}

impl From<DocumentError> for ApiError {
    fn from(e: DocumentError) -> Self {
        Error::from(e).into()
    }
}

impl From<EventError> for ApiError {
    fn from(e: EventError) -> Self {
        Error::from(e).into()
    }
}

/// A problem document for a bare status (a response of the router or of a
/// layer that carries no problem body of its own).
pub fn for_status(status: StatusCode, detail: String) -> ApiError {
    let code = match status {
        StatusCode::NOT_FOUND => "no_route",
        StatusCode::METHOD_NOT_ALLOWED => "method_not_allowed",
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        StatusCode::UNSUPPORTED_MEDIA_TYPE => "unsupported_media_type",
        StatusCode::REQUEST_TIMEOUT => "request_timeout",
        StatusCode::BAD_REQUEST => "bad_request",
        s if s.is_server_error() => "internal",
        _ => "error",
    };
    ApiError::new(status, code, detail)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_snake_case_variant_names() {
        assert_eq!(
            variant_code("WrongExpectedVersion { stream: \"a\" }"),
            "wrong_expected_version"
        );
        assert_eq!(variant_code("TableNotFound(\"x\")"), "table_not_found");
        assert_eq!(variant_code("ReadOnly"), "read_only");
    }
}

/// The shape of a problem document (for the OpenAPI document).
#[derive(utoipa::ToSchema)]
#[schema(as = Problem)]
#[allow(dead_code)]
pub struct ProblemSchema {
    /// Always `about:blank`.
    #[schema(rename = "type")]
    kind: String,
    /// The status's reason phrase.
    title: String,
    /// The HTTP status.
    status: u16,
    /// A stable machine-readable code (e.g. `duplicate_key`,
    /// `wrong_expected_version`, `malformed_json`).
    code: String,
    /// The error's message.
    detail: String,
}
