//! Reading a `/query` or `/statements` request: its options, its body
//! (JSON or raw SQL, within its time and size limits), its parameters, and
//! its query id.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Query;
use axum::http::{header, HeaderMap};
use serde::Deserialize;

use crate::api::error::ApiError;
use crate::api::negotiate::choose_format;
use crate::api::query::QUERY_ID_HEADER;
use crate::api::AppState;
use crate::encode::{ArrowCodec, Format};
use crate::engine::queries::{valid_id, IdError};
use crate::engine::{Param, QueryError};

/// A query request as JSON (`POST /query`; `POST /statements` takes
/// [`StatementRequest`], which adds `wait_ms`).
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueryRequest {
    /// Exactly one SQL statement.
    #[schema(example = "SELECT 42 AS answer")]
    pub sql: String,
    /// Positional parameters for `$1`, `$2`, ... or `?`: null, booleans,
    /// numbers and strings.
    #[serde(default)]
    #[schema(value_type = Vec<QueryParam>)]
    pub params: Vec<Box<serde_json::value::RawValue>>,
    /// Response format; overrides the Accept header.
    #[serde(default)]
    #[schema(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// With `format` Arrow: compress the stream's buffers with Arrow IPC's
    /// own codec (`zstd` or `lz4`; default `none`), which every Arrow
    /// reader undoes. Arrow answers never get `Content-Encoding`.
    #[serde(default)]
    #[schema(value_type = Option<ArrowCompressionSchema>)]
    pub arrow_compression: Option<String>,
    /// Time limit in milliseconds, clamped to the gateway's maximum.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit, clamped to the gateway's maximum. The answer ends
    /// cleanly at this row (`truncated` says whether rows were left).
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_rows: Option<i64>,
    /// `POST /statements` only (`POST /query` refuses it: 400
    /// `invalid-option`); see [`StatementRequest`].
    #[serde(default)]
    #[schema(ignore)]
    pub wait_ms: Option<i64>,
    /// Run the statement only if it reads: a write is refused (403), as
    /// under the read-only policy, whatever the gateway's policy. For
    /// tools that must not change data, and for the console's shared links.
    #[serde(default)]
    pub read_only: Option<bool>,
}

/// A statement request as JSON (`POST /statements`): a query request and
/// how long to wait for its result. Its schema only; the body is read as a
/// [`QueryRequest`].
#[derive(utoipa::ToSchema)]
#[allow(dead_code)]
pub struct StatementRequest {
    /// Exactly one SQL statement.
    #[schema(example = "SELECT 42 AS answer")]
    pub sql: String,
    /// Positional parameters for `$1`, `$2`, ... or `?`: null, booleans,
    /// numbers and strings.
    #[schema(value_type = Option<Vec<QueryParam>>)]
    pub params: Option<Vec<QueryParam>>,
    /// Response format of a result answered at once (within `wait_ms`);
    /// pages take any format later. Overrides the Accept header.
    #[schema(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// Time limit in milliseconds, clamped to the gateway's maximum for
    /// statements.
    #[schema(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit of the kept result.
    #[schema(minimum = 1)]
    pub max_rows: Option<i64>,
    /// How long to wait for the finished result before answering 202 with
    /// the statement's status (milliseconds, default 10000, clamped to the
    /// gateway's maximum; 0 answers at once).
    #[schema(minimum = 0)]
    pub wait_ms: Option<i64>,
    /// Run the statement only if it reads: a write is refused (403).
    pub read_only: Option<bool>,
}

/// A positional parameter: null, a boolean, a number or a string (the
/// schema of what `params` accepts; values are read as JSON).
#[derive(serde::Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub enum QueryParam {
    /// SQL NULL.
    Null,
    /// BOOLEAN.
    Bool(bool),
    /// A number, typed as DuckDB types the same literal.
    Number(f64),
    /// VARCHAR (cast it in SQL for other types).
    Text(String),
}

/// Options for raw SQL bodies, from the query string. `wait_ms` is read
/// here for both routes but documented for `POST /statements` alone
///: `POST /query` refuses it.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QueryOptions {
    /// Response format; else the Accept header's, else JSON.
    #[param(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// With an Arrow answer: Arrow IPC's own buffer compression.
    #[param(value_type = Option<ArrowCompressionSchema>)]
    pub arrow_compression: Option<String>,
    /// Time limit in milliseconds.
    #[param(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit: the answer ends cleanly at this row.
    #[param(minimum = 1)]
    pub max_rows: Option<i64>,
    /// `POST /statements` only: how long to wait for the result.
    #[param(ignore)]
    pub wait_ms: Option<i64>,
    /// Refuse a statement that writes (403), whatever the policy.
    pub read_only: Option<bool>,
}

/// `GET /query` (and `HEAD`): the statement and its options in the URL, so
/// a tool that reads files by URL (pandas, polars, DuckDB's httpfs) can read
/// a result.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct UrlQuery {
    /// Exactly one read-only SQL statement (URL-encoded).
    #[param(example = "SELECT 42 AS answer")]
    pub sql: String,
    /// Response format; else the Accept header's, else JSON.
    #[param(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// With an Arrow answer: Arrow IPC's own buffer compression.
    #[param(value_type = Option<ArrowCompressionSchema>)]
    pub arrow_compression: Option<String>,
    /// Time limit in milliseconds.
    #[param(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit.
    #[param(minimum = 1)]
    pub max_rows: Option<i64>,
}

/// Arrow IPC's buffer compression codecs (`lz4` is LZ4 frames).
#[derive(utoipa::ToSchema)]
#[schema(as = ArrowCompression)]
#[allow(dead_code)]
pub enum ArrowCompressionSchema {
    /// Zstandard.
    #[schema(rename = "zstd")]
    Zstd,
    /// LZ4 frames.
    #[schema(rename = "lz4")]
    Lz4,
    /// Buffers as they are (the default).
    #[schema(rename = "none")]
    None,
}

/// A request read and checked, with its limits still as asked.
pub(crate) struct RequestParts {
    pub sql: String,
    pub params: Vec<Param>,
    pub format: Format,
    /// Arrow IPC's buffer compression (only with `format` Arrow).
    pub arrow_compression: Option<ArrowCodec>,
    /// As asked (positive), not yet clamped.
    pub timeout_ms: Option<u64>,
    pub max_rows: Option<u64>,
    pub wait_ms: Option<u64>,
    /// Only statements that read may run.
    pub read_only: bool,
}

/// The request's query id: the client's `duckgate-query-id` (validated),
/// else a generated one.
pub(crate) fn query_id(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get(QUERY_ID_HEADER).map(|v| v.to_str()) {
        None => Ok(uuid::Uuid::new_v4().to_string()),
        Some(Ok(v)) if valid_id(v) => Ok(v.to_string()),
        Some(_) => Err(id_error(IdError::Invalid)),
    }
}

/// Query-string options, or the problem that says why they do not parse.
pub(crate) fn query_options<T>(
    parsed: Result<Query<T>, axum::extract::rejection::QueryRejection>,
) -> Result<T, ApiError> {
    parsed.map(|Query(t)| t).map_err(|e| {
        ApiError::bad_request(
            "invalid-query-string",
            "Invalid query string",
            e.body_text(),
        )
    })
}

/// The registry's refusal of an id, as a problem.
pub(crate) fn id_error(e: IdError) -> ApiError {
    match e {
        IdError::Taken(_) => ApiError::Conflict {
            slug: "query-id-taken",
            title: "Query id in use",
            detail: e.to_string(),
        },
        IdError::Invalid => {
            ApiError::bad_request("invalid-query-id", "Invalid query id", e.to_string())
        }
    }
}

/// Reads and checks a `/query` or `/statements` request: options, body
/// (within its time and size limits), SQL, format and parameters.
pub(crate) async fn read_request(
    state: &AppState,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: &HeaderMap,
    body: Body,
) -> Result<RequestParts, ApiError> {
    let options = query_options(options)?;
    // Every option given is checked, even where the body overrides it.
    for (name, value) in [
        ("timeout_ms", options.timeout_ms),
        ("max_rows", options.max_rows),
    ] {
        if value.is_some_and(|v| v <= 0) {
            return Err(ApiError::bad_request(
                "invalid-query-string",
                "Invalid query string",
                format!("{name} must be positive"),
            ));
        }
    }
    if options.wait_ms.is_some_and(|v| v < 0) {
        return Err(ApiError::bad_request(
            "invalid-query-string",
            "Invalid query string",
            "wait_ms must not be negative",
        ));
    }
    if let Some(f) = options.format.as_deref() {
        if Format::from_name(f).is_none() {
            return Err(ApiError::bad_request(
                "unknown-format",
                "Unknown format",
                format!("format `{f}` is not one of json, ndjson, csv, arrow, parquet"),
            ));
        }
    }
    let limits = &state.config.limits;
    // A body sent slowly holds a concurrency slot: it gets a time limit of
    // its own (408), far below the request backstop.
    let bytes = tokio::time::timeout(
        Duration::from_millis(limits.body_read_timeout_ms),
        axum::body::to_bytes(body, limits.max_body_bytes as usize),
    )
    .await
    .map_err(|_| ApiError::RequestTimeout)?
    .map_err(|_| ApiError::PayloadTooLarge {
        limit: limits.max_body_bytes,
    })?;

    let request = parse_body(headers, &bytes, options)?;
    checked(state, request, headers)
}

/// Reads and checks a `GET /query` (or `HEAD`) request: the SQL and options
/// from its URL, the format by them or by Accept.
pub(crate) fn read_url_request(
    state: &AppState,
    options: Result<Query<UrlQuery>, axum::extract::rejection::QueryRejection>,
    headers: &HeaderMap,
) -> Result<RequestParts, ApiError> {
    let url = query_options(options)?;
    let request = QueryRequest {
        sql: url.sql,
        params: Vec::new(),
        format: url.format,
        arrow_compression: url.arrow_compression,
        timeout_ms: url.timeout_ms,
        max_rows: url.max_rows,
        wait_ms: None,
        read_only: Some(true),
    };
    checked(state, request, headers)
}

/// The checks every request passes however it came: SQL size and presence,
/// format, parameters, limits.
fn checked(
    state: &AppState,
    request: QueryRequest,
    headers: &HeaderMap,
) -> Result<RequestParts, ApiError> {
    let limits = &state.config.limits;
    if request.sql.len() as u64 > limits.max_sql_bytes {
        return Err(ApiError::PayloadTooLarge {
            limit: limits.max_sql_bytes,
        });
    }
    if request.sql.trim().is_empty() {
        return Err(ApiError::bad_request(
            "empty-sql",
            "No SQL",
            "the request holds no SQL text",
        ));
    }
    let format = choose_format(request.format.as_deref(), headers)?;
    let arrow_compression = arrow_codec(request.arrow_compression.as_deref(), format)?;
    let params = request
        .params
        .iter()
        .enumerate()
        .map(|(i, v)| param(i + 1, v.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    let positive = |slug: &'static str, title: &'static str, name: &str, v: Option<i64>| match v {
        Some(v) if v <= 0 => Err(ApiError::bad_request(
            slug,
            title,
            format!("{name} must be positive"),
        )),
        v => Ok(v.map(|v| v as u64)),
    };
    let timeout_ms = positive(
        "invalid-timeout",
        "Invalid timeout",
        "timeout_ms",
        request.timeout_ms,
    )?;
    // A 504 at this very limit is the client's choice, not a server error.
    crate::api::metrics::note_time_limit_asked(timeout_ms);
    let max_rows = positive(
        "invalid-max-rows",
        "Invalid row limit",
        "max_rows",
        request.max_rows,
    )?;
    let wait_ms = match request.wait_ms {
        Some(w) if w < 0 => {
            return Err(ApiError::bad_request(
                "invalid-wait",
                "Invalid wait",
                "wait_ms must not be negative",
            ))
        }
        w => w.map(|w| w as u64),
    };
    Ok(RequestParts {
        sql: request.sql,
        params,
        format,
        arrow_compression,
        timeout_ms,
        max_rows,
        wait_ms,
        read_only: request.read_only.unwrap_or(false),
    })
}

/// The Arrow compression `name` asks for, for an answer in `format`: a
/// codec only an Arrow answer can carry, so any other format refuses one
/// (400), as it refuses a codec it does not know.
fn arrow_codec(name: Option<&str>, format: Format) -> Result<Option<ArrowCodec>, ApiError> {
    let Some(name) = name else {
        return Ok(None);
    };
    let codec = ArrowCodec::from_name(name).map_err(|_| {
        ApiError::bad_request(
            "invalid-option",
            "Unknown Arrow compression",
            format!("arrow_compression `{name}` is not one of zstd, lz4, none"),
        )
    })?;
    if codec.is_some() && format != Format::Arrow {
        return Err(ApiError::bad_request(
            "invalid-option",
            "Option not accepted here",
            format!(
                "arrow_compression applies to Arrow answers; this one is {}",
                format.name()
            ),
        ));
    }
    Ok(codec)
}

/// The request, from a JSON body or a raw SQL body.
fn parse_body(
    headers: &HeaderMap,
    bytes: &[u8],
    options: QueryOptions,
) -> Result<QueryRequest, ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("invalid").to_ascii_lowercase());
    let media = content_type
        .as_deref()
        .map(|c| c.split(';').next().unwrap_or("").trim().to_string());
    let is_json = match media.as_deref() {
        Some("application/json") => true,
        Some(m) if m.starts_with("application/") && m.ends_with("+json") => true,
        Some("text/plain" | "application/sql" | "text/sql") => false,
        // curl -d and --data-binary send form encoding: a person means the
        // SQL, or (no SQL statement starts with `{`) a JSON body.
        Some("application/x-www-form-urlencoded") => {
            bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{')
        }
        None | Some("") => bytes.iter().find(|b| !b.is_ascii_whitespace()) == Some(&b'{'),
        Some(other) => return Err(ApiError::UnsupportedMediaType(other.to_string())),
    };
    if bytes.is_empty() {
        return Err(ApiError::bad_request(
            "empty-body",
            "Empty body",
            "send a JSON body with `sql`, or the SQL text itself",
        ));
    }
    if is_json {
        let mut request: QueryRequest = serde_json::from_slice(bytes).map_err(|e| {
            ApiError::bad_request(
                "malformed-json",
                "Malformed JSON",
                format!("the JSON body could not be read: {e}"),
            )
        })?;
        // Query-string options fill in what the body leaves out.
        request.format = request.format.or(options.format);
        request.arrow_compression = request.arrow_compression.or(options.arrow_compression);
        request.timeout_ms = request.timeout_ms.or(options.timeout_ms);
        request.max_rows = request.max_rows.or(options.max_rows);
        request.wait_ms = request.wait_ms.or(options.wait_ms);
        request.read_only = request.read_only.or(options.read_only);
        Ok(request)
    } else {
        let sql = std::str::from_utf8(bytes).map_err(|_| {
            ApiError::bad_request(
                "invalid-utf8",
                "Invalid text",
                "the SQL text is not valid UTF-8",
            )
        })?;
        Ok(QueryRequest {
            sql: sql.to_string(),
            params: Vec::new(),
            format: options.format,
            arrow_compression: options.arrow_compression,
            timeout_ms: options.timeout_ms,
            max_rows: options.max_rows,
            wait_ms: options.wait_ms,
            read_only: options.read_only,
        })
    }
}

/// One parameter from its JSON text: numbers keep the digits as written
/// (see `Param::from_number`), strings are VARCHAR, nested values refused.
fn param(index: usize, raw: &serde_json::value::RawValue) -> Result<Param, ApiError> {
    use serde_json::Value as J;
    let bad = |message: String| ApiError::Query(QueryError::Param { index, message });
    let v: J = serde_json::from_str(raw.get()).map_err(|e| bad(e.to_string()))?;
    Ok(match v {
        J::Null => Param::Null,
        J::Bool(b) => Param::Bool(b),
        J::Number(_) => Param::from_number(raw.get().trim()).map_err(bad)?,
        J::String(s) => Param::Text(s),
        J::Array(_) | J::Object(_) => {
            return Err(bad("parameters must be null, booleans, numbers or strings; pass nested values as JSON text and cast them in SQL (e.g. $1::JSON)".into()))
        }
    })
}
