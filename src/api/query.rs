//! `POST /query`: one SQL statement in, rows out in the format asked for.

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use tracing::Instrument;

use crate::api::auth::QueryAuth;
use crate::api::error::{ApiError, Problem};
use crate::api::AppState;
use crate::credentials::retry::with_fresh_credentials;
use crate::encode::{Column, Format};
use crate::engine::queries::{valid_id, IdError, Outcome, Registration};
use crate::engine::{execute, Param, QueryError, QueryJob};

/// Header naming the statement kind the guard saw.
pub const STATEMENT_HEADER: &str = "duckgate-statement";
/// Header carrying the credential epoch the query ran under.
pub const EPOCH_HEADER: &str = "duckgate-credential-epoch";
/// The query's id: the client's, or one the gateway made.
pub const QUERY_ID_HEADER: &str = "duckgate-query-id";
/// Header present when the query was retried after a credential refresh.
pub const RETRIED_HEADER: &str = "duckgate-retried";

/// A query request as JSON.
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
    pub format: Option<String>,
    /// Time limit in milliseconds, clamped to the gateway's maximum.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit, clamped to the gateway's maximum.
    #[serde(default)]
    #[schema(minimum = 1)]
    pub max_rows: Option<i64>,
    /// `POST /statements` only: how long to wait for the finished result
    /// before answering 202 with the statement's status (milliseconds,
    /// clamped to the gateway's maximum; 0 answers at once).
    #[serde(default)]
    #[schema(minimum = 0)]
    pub wait_ms: Option<i64>,
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

// The OpenAPI schemas of `encode::Column` and `encode::Format` (encoding
// knows nothing of HTTP or OpenAPI).

/// A column of the result, as the JSON answer names it.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Column)]
#[allow(dead_code)]
pub struct ColumnSchema {
    /// The column's name as DuckDB gave it.
    pub name: String,
    /// DuckDB's type name, e.g. `INTEGER`, `DECIMAL(18,3)`, `STRUCT(a INTEGER)`.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// A response format.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Format)]
#[serde(rename_all = "lowercase")]
#[allow(dead_code)]
pub enum FormatSchema {
    /// One JSON document: columns, rows as arrays, row count, truncation, time.
    Json,
    /// One JSON object per row and line.
    Ndjson,
    /// RFC 4180 CSV with a header line.
    Csv,
    /// Arrow IPC stream.
    Arrow,
}

/// Options for raw SQL bodies, from the query string.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct QueryOptions {
    /// Response format (`json`, `ndjson`, `csv`, `arrow`).
    pub format: Option<String>,
    /// Time limit in milliseconds.
    #[param(minimum = 1)]
    pub timeout_ms: Option<i64>,
    /// Row limit.
    #[param(minimum = 1)]
    pub max_rows: Option<i64>,
    /// `POST /statements` only: how long to wait for the result.
    #[param(minimum = 0)]
    pub wait_ms: Option<i64>,
}

/// The JSON answer.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QueryResult {
    /// The result's columns, in order.
    #[schema(value_type = Vec<ColumnSchema>)]
    pub columns: Vec<Column>,
    /// One array per row, values in column order (any JSON value).
    #[schema(value_type = Vec<Vec<serde_json::Value>>)]
    pub rows: Vec<Vec<serde_json::Value>>,
    /// Rows in `rows`.
    pub row_count: u64,
    /// Whether rows were cut by `max_rows` or the result byte limit.
    pub truncated: bool,
    /// Milliseconds from the request's start to the end of the result.
    pub elapsed_ms: f64,
    /// Present and true when the query was retried after a credential refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried: Option<bool>,
}

/// Runs one SQL statement.
///
/// The body is JSON (`application/json`), or the SQL itself (`text/plain`,
/// `application/sql`, or what `curl --data-binary` sends). The format comes
/// from the body's `format`, then the `format` query parameter, then Accept.
#[utoipa::path(post, path = "/query", tag = "query",
    params(QueryOptions,
        ("duckgate-query-id" = Option<String>, Header, description = "The query's id (1-128 of A-Za-z0-9._-, unique among running queries); generated when absent")),
    request_body(content(
        (QueryRequest = "application/json"),
        (String = "text/plain"),
        (String = "application/sql")
    )),
    responses(
        (status = 200, description = "The result", content(
            (QueryResult = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.apache.arrow.stream")
        ), headers(
            ("duckgate-query-id" = String, description = "The query's id: the client's, or a generated one"),
            ("duckgate-statement" = String, description = "The statement kind"),
            ("duckgate-credential-epoch" = u64, description = "Credential epoch the query ran under")
        )),
        (status = 400, description = "Malformed request or SQL error", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Statement not allowed", body = Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Cancelled by DELETE /queries/{id}, or the query id is in use", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body or SQL too large", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Unsupported content type", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy, shutting down, or S3 credentials expired", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "The query ran past its time limit", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn query(
    State(state): State<AppState>,
    auth: QueryAuth,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // The client's id, else a generated one: in the answer's header, every
    // problem, the request's log lines and the audit line.
    let id = match query_id(&headers) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let span = tracing::info_span!("query", query_id = %id, token = %auth.name);
    let mut registration = None;
    let answer = run_query(
        &state,
        &auth,
        &id,
        &mut registration,
        options,
        headers,
        body,
    )
    .instrument(span)
    .await;
    match answer {
        Ok(mut response) => {
            if let Ok(v) = HeaderValue::from_str(&id) {
                response.headers_mut().insert(QUERY_ID_HEADER, v);
            }
            response
        }
        Err(e) => {
            if let Some(r) = &registration {
                let (status, kind, error_class) = e.summary();
                r.running.set_outcome(Outcome {
                    status,
                    kind,
                    error_class,
                });
            }
            // The registration (if any) ends here: the audit line.
            e.into_response_for(&id)
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_query(
    state: &AppState,
    auth: &QueryAuth,
    id: &str,
    registration: &mut Option<Registration>,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let request = read_request(state, options, &headers, body).await?;
    if request.wait_ms.is_some() {
        return Err(ApiError::bad_request(
            "invalid-option",
            "Option not accepted here",
            "wait_ms belongs to POST /statements; /query always waits for the result",
        ));
    }
    let limits = &state.config.limits;
    let RequestParts {
        sql,
        params,
        format,
        timeout_ms,
        max_rows,
        ..
    } = request;
    let timeout_ms = timeout_ms.map_or(limits.default_query_timeout_ms(), |t| {
        t.min(limits.max_query_timeout_ms)
    });
    let max_rows = max_rows.map_or(limits.default_rows(), |r| r.min(limits.max_rows));

    // Whether a statement reads S3 is DuckDB's to say: with expired
    // credentials S3 refuses its request, and the retry below answers.
    let epoch = state.health.epoch();
    let reg = state
        .queries
        .register(Some(id), auth.name.clone(), &sql, epoch)
        .map_err(id_error)?;
    let tracker = reg.running.clone();
    *registration = Some(reg);

    let job = QueryJob {
        sql,
        params,
        format,
        timeout: Duration::from_millis(timeout_ms),
        max_rows,
        max_bytes: limits.max_result_bytes,
        rules: state.engine.rules(),
        started,
        retried: false,
        stall_timeout: Duration::from_millis(limits.send_stall_timeout_ms),
        max_value_bytes: limits.max_value_bytes,
        render_error: crate::api::error::problem_json_for_stream,
        tracker: Some(tracker.clone()),
        sink: None,
    };
    // Expired credentials (revoked early, clock skew): the credentials
    // layer refreshes them and runs the query once more.
    let deadline = started + Duration::from_millis(timeout_ms);
    let (pool, shutdown) = (&state.engine.pool, &state.shutdown);
    let (output, retried) =
        with_fresh_credentials(&state.rotator, &state.health, deadline, |retried| {
            let mut job = job.clone();
            job.retried = retried;
            execute::run(pool, job, shutdown.clone())
        })
        .await?;
    let epoch = if retried { state.health.epoch() } else { epoch };

    let body = Tracked {
        inner: output.body,
        registration: registration.take(),
        cancelled: Box::pin(tracker.cancel.clone().cancelled_owned()),
    };
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(output.content_type),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(&output.kind) {
        h.insert(STATEMENT_HEADER, v);
    }
    h.insert(EPOCH_HEADER, HeaderValue::from(epoch));
    if retried {
        h.insert(
            RETRIED_HEADER,
            HeaderValue::from_static("expired-credentials"),
        );
    }
    Ok(response.into_response())
}

/// A request read and checked, with its limits still as asked.
pub(crate) struct RequestParts {
    pub sql: String,
    pub params: Vec<Param>,
    pub format: Format,
    /// As asked (positive), not yet clamped.
    pub timeout_ms: Option<u64>,
    pub max_rows: Option<u64>,
    pub wait_ms: Option<u64>,
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
                format!("format `{f}` is not one of json, ndjson, csv, arrow"),
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
        timeout_ms,
        max_rows,
        wait_ms,
    })
}

/// A result body that counts what it hands out and keeps its query
/// registered (listed, cancellable) until it ends or the client goes away.
struct Tracked {
    inner: futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    registration: Option<Registration>,
    /// A cancel request ends the body whenever the query has nothing more
    /// to give at once (normally the engine ends it first, with its own
    /// ending: NDJSON's error record).
    cancelled: std::pin::Pin<Box<tokio_util::sync::WaitForCancellationFutureOwned>>,
}

impl futures::Stream for Tracked {
    type Item = Result<bytes::Bytes, std::io::Error>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::future::Future as _;
        use std::task::Poll;
        if self.registration.is_none() {
            return Poll::Ready(None);
        }
        let polled = self.inner.as_mut().poll_next(cx);
        // Nothing more from the query (its worker may be gone, only a slow
        // reader's queued bytes left): a cancel request ends the body now.
        if polled.is_pending() && self.cancelled.as_mut().poll(cx).is_ready() {
            if let Some(r) = self.registration.take() {
                r.running.set_outcome(Outcome {
                    status: 200,
                    kind: "query-cancelled".into(),
                    error_class: None,
                });
            }
            return Poll::Ready(Some(Err(std::io::Error::other("query cancelled"))));
        }
        if let Some(r) = &self.registration {
            let running = &r.running;
            match &polled {
                Poll::Ready(Some(Ok(chunk))) => {
                    running
                        .bytes
                        .fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                }
                Poll::Ready(Some(Err(_))) => running.set_outcome(Outcome {
                    status: 200,
                    kind: "failed-while-streaming".into(),
                    error_class: None,
                }),
                Poll::Ready(None) => running.set_outcome(Outcome {
                    status: 200,
                    kind: "ok".into(),
                    error_class: None,
                }),
                Poll::Pending => {}
            }
        }
        if matches!(polled, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) {
            // The audit line, as soon as the answer is over.
            self.registration.take();
        }
        polled
    }
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
        request.timeout_ms = request.timeout_ms.or(options.timeout_ms);
        request.max_rows = request.max_rows.or(options.max_rows);
        request.wait_ms = request.wait_ms.or(options.wait_ms);
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
            timeout_ms: options.timeout_ms,
            max_rows: options.max_rows,
            wait_ms: options.wait_ms,
        })
    }
}

pub(crate) fn choose_format(
    explicit: Option<&str>,
    headers: &HeaderMap,
) -> Result<Format, ApiError> {
    if let Some(name) = explicit {
        return Format::from_name(name).ok_or_else(|| {
            ApiError::bad_request(
                "unknown-format",
                "Unknown format",
                format!("format `{name}` is not one of json, ndjson, csv, arrow"),
            )
        });
    }
    match headers.get(header::ACCEPT).map(|v| v.to_str()) {
        None => Ok(Format::Json),
        Some(Err(_)) => Err(ApiError::NotAcceptable(
            "the Accept header is not readable".into(),
        )),
        Some(Ok(accept)) => match crate::api::negotiate::format_from_accept(accept) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Ok(Format::Json),
            Err(_) => Err(ApiError::NotAcceptable(format!(
                "nothing in `{accept}` is a result format"
            ))),
        },
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
