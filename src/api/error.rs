//! One error type for the HTTP API, answered as RFC 9457 problem details
//! (`application/problem+json`). User mistakes are 4xx with a useful detail;
//! server faults are logged with their cause and answered with generic text.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use crate::engine::execute::StoreFault;
use crate::engine::guard::Refusal;
use crate::engine::QueryError;

/// An RFC 9457 problem details body.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Problem {
    /// A URI naming the kind of problem.
    #[serde(rename = "type")]
    pub type_uri: String,
    /// Short summary of the kind of problem.
    pub title: String,
    /// The HTTP status.
    pub status: u16,
    /// What went wrong with this request.
    pub detail: String,
    /// DuckDB's error class (Parser, Binder, Catalog, Conversion, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// The refused statement kind, for 403 refusals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement_kind: Option<String>,
    /// The query's id (`duckgate-query-id`), on answers to `/query`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_id: Option<String>,
}

/// Every way a request can fail.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// The request is malformed: its body, query string, options or id (400).
    #[error("{detail}")]
    BadRequest {
        /// The problem type's last part (`urn:duckgate:problem:<slug>`).
        slug: &'static str,
        /// The problem's short title.
        title: &'static str,
        /// What is wrong with the request.
        detail: String,
    },
    /// A query failed; its status follows the kind of failure.
    #[error("query failed")]
    Query(#[from] QueryError),
    /// The bearer token is missing or not valid for the route (401).
    #[error("unauthorized")]
    Unauthorized {
        /// Which token the route needs, or why the one given was refused.
        detail: &'static str,
    },
    /// The request is refused for where it comes from: a web page of
    /// another site, or a `Host` the gateway does not answer (403).
    #[error("{detail}")]
    Forbidden {
        /// The problem type's last part (`urn:duckgate:problem:<slug>`).
        slug: &'static str,
        /// The problem's short title.
        title: &'static str,
        /// Why.
        detail: String,
    },
    /// An admin route was called while no admin token is configured (403).
    #[error("admin API disabled")]
    AdminDisabled,
    /// No such route, query, statement or secret (404); the text says which.
    #[error("not found")]
    NotFound(String),
    /// The request body or its SQL text is larger than allowed (413).
    #[error("payload too large")]
    PayloadTooLarge {
        /// The limit passed, in bytes.
        limit: u64,
    },
    /// The body's content type is not one the API reads (415); holds that type.
    #[error("unsupported media type")]
    UnsupportedMediaType(String),
    /// The Accept header is unreadable or names no result format (406).
    #[error("not acceptable")]
    NotAcceptable(String),
    /// A group of routes already serves as many requests as it may (503).
    #[error("overloaded")]
    Overloaded,
    /// The request body did not arrive within DUCKGATE_BODY_READ_TIMEOUT_MS (408).
    #[error("request timed out")]
    RequestTimeout,
    /// The request clashes with what is kept: an id in use, an id several
    /// tokens share, or a statement result not there yet or never (409).
    #[error("{detail}")]
    Conflict {
        /// The problem type's last part (`urn:duckgate:problem:<slug>`).
        slug: &'static str,
        /// The problem's short title.
        title: &'static str,
        /// What the request clashes with.
        detail: String,
    },
    /// As many async statements as allowed are kept.
    #[error("too many statements")]
    TooManyStatements {
        /// The number of statements that may be kept.
        limit: usize,
        /// The setting that sets `limit`.
        setting: &'static str,
    },
    /// A statement's result expired.
    #[error("{0}")]
    Gone(String),
    /// A fault of the gateway (500): the cause is logged, never sent.
    #[error("internal error: {0}")]
    Internal(String),
    /// The replica that ran a statement stopped (its heartbeat in the
    /// shared state went stale) before the statement finished (410).
    #[error("{0}")]
    Lost(String),
    /// The shared state (PostgreSQL) could not be reached (503): the
    /// cause is logged, never sent.
    #[error("shared state unavailable: {0}")]
    SharedState(String),
}

impl ApiError {
    /// A [`ApiError::BadRequest`] with this slug, title and detail.
    pub fn bad_request(slug: &'static str, title: &'static str, detail: impl Into<String>) -> Self {
        ApiError::BadRequest {
            slug,
            title,
            detail: detail.into(),
        }
    }
}

fn problem(status: StatusCode, slug: &str, title: &str, detail: impl Into<String>) -> Problem {
    Problem {
        type_uri: format!("urn:duckgate:problem:{slug}"),
        title: title.to_string(),
        status: status.as_u16(),
        detail: detail.into(),
        error_class: None,
        statement_kind: None,
        query_id: None,
    }
}

/// A DuckDB error, with the status that says whose it is: the client's SQL
/// (400), a refusal by the database's lockdown (403, like the guard's), or
/// the server's side: memory or temp space (507), S3 or another upstream
/// unreachable or failing (502), an interrupt the client did not ask for
/// (503). Server-side ones carry `Retry-After`.
fn sql_problem(
    class: String,
    message: String,
) -> (Problem, Option<(header::HeaderName, HeaderValue)>) {
    let retry = Some((header::RETRY_AFTER, HeaderValue::from_static("5")));
    let (status, slug, title, extra) = match class.as_str() {
        "Permission" => (
            StatusCode::FORBIDDEN,
            "statement-forbidden",
            "Statement not allowed",
            None,
        ),
        "Out of Memory" => (
            StatusCode::INSUFFICIENT_STORAGE,
            "out-of-memory",
            "Out of memory",
            retry,
        ),
        "IO" | "HTTP" | "Network" if names_missing_object(&message) => {
            (StatusCode::BAD_REQUEST, "sql-error", "SQL error", None)
        }
        "IO" | "HTTP" | "Network" if message.contains("HTTP 403") => (
            StatusCode::FORBIDDEN,
            "storage-forbidden",
            "Storage refused access",
            None,
        ),
        "IO" | "HTTP" | "Network" => (
            StatusCode::BAD_GATEWAY,
            "upstream-error",
            "Storage unreachable or failing",
            retry,
        ),
        "Interrupt" => (
            StatusCode::SERVICE_UNAVAILABLE,
            "interrupted",
            "Query interrupted",
            retry,
        ),
        "Fatal" | "FATAL" | "Internal" | "INTERNAL" => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            None,
        ),
        _ => (StatusCode::BAD_REQUEST, "sql-error", "SQL error", None),
    };
    // An upstream's message may quote a catalog's connection string.
    let message = if status == StatusCode::BAD_GATEWAY || status == StatusCode::FORBIDDEN {
        crate::engine::errors::scrub_dsn(&message)
    } else {
        message
    };
    let mut p = problem(status, slug, title, message);
    p.error_class = Some(class);
    (p, extra)
}

/// An IO error about a file or object that is not there: the client named it.
fn names_missing_object(message: &str) -> bool {
    [
        "No files found",
        "HTTP 404",
        "does not exist",
        "Not Found",
        "No such file",
    ]
    .iter()
    .any(|p| message.contains(p))
}

/// The status, problem body and extra headers for a query error.
fn query_problem(e: &QueryError) -> (Problem, Option<(header::HeaderName, HeaderValue)>) {
    match e {
        QueryError::Refused(Refusal::Parse(msg)) => {
            let (class, message) = crate::engine::errors::split_class(msg);
            let mut p = problem(StatusCode::BAD_REQUEST, "sql-error", "SQL error", message);
            p.error_class = Some(if class == "Unknown" { "Parser".into() } else { class });
            (p, None)
        }
        QueryError::Refused(Refusal::Bind(msg)) => {
            let (class, message) = crate::engine::errors::split_class(msg);
            sql_problem(class, message)
        }
        QueryError::Refused(Refusal::StatementCount(0)) => (
            problem(StatusCode::BAD_REQUEST, "no-statement", "No statement", "the request holds no SQL statement"),
            None,
        ),
        QueryError::Refused(Refusal::StatementCount(n)) => (
            problem(
                StatusCode::BAD_REQUEST,
                "multiple-statements",
                "Several statements",
                format!("the request holds {n} statements; send exactly one per request"),
            ),
            None,
        ),
        QueryError::Refused(Refusal::Forbidden { kind, reason }) => {
            let mut p = problem(
                StatusCode::FORBIDDEN,
                "statement-forbidden",
                "Statement not allowed",
                format!("{kind} is not allowed: {reason}"),
            );
            p.statement_kind = Some(kind.clone());
            (p, None)
        }
        QueryError::Sql { class, message } => sql_problem(class.clone(), message.clone()),
        QueryError::ParamCount { expected, got } => (
            problem(
                StatusCode::BAD_REQUEST,
                "parameter-count",
                "Wrong number of parameters",
                format!("the statement has {expected} parameters but {got} were given"),
            ),
            None,
        ),
        QueryError::Param { index, message } => (
            problem(
                StatusCode::BAD_REQUEST,
                "parameter-invalid",
                "Invalid parameter",
                format!("parameter {index}: {message}"),
            ),
            None,
        ),
        QueryError::Timeout(limit) => (
            problem(
                StatusCode::GATEWAY_TIMEOUT,
                "query-timeout",
                "Query timed out",
                format!("the query ran past its time limit of {} ms and was interrupted", limit.as_millis()),
            ),
            None,
        ),
        QueryError::ValueTooLarge { size, limit } => (
            problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "value-too-large",
                "Value too large",
                format!("the result holds a value of {size} bytes; the gateway sends values of at most {limit} bytes (DUCKGATE_MAX_VALUE_BYTES)"),
            ),
            None,
        ),
        QueryError::TempSpace => (
            problem(
                StatusCode::INSUFFICIENT_STORAGE,
                "temp-space-exhausted",
                "Temporary space exhausted",
                "the queries running spilled more than DUCKGATE_MAX_TEMP_DIRECTORY_SIZE to disk and were interrupted",
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("5"))),
        ),
        QueryError::SpoolFull { limit, scope } => (
            problem(
                StatusCode::INSUFFICIENT_STORAGE,
                "spool-quota-exceeded",
                "Spool quota exceeded",
                match *scope {
                    "token" => format!("the spooled results of this token's statements (and their Parquet pages) passed {limit} bytes (DUCKGATE_SPOOL_TOKEN_BYTES); what was being written, a statement's result or a Parquet page of one, was removed. Fetch and DELETE finished statements, or retry later"),
                    "statement" => format!("the statement's result passed the spool quota of one statement, {limit} bytes (DUCKGATE_SPOOL_STATEMENT_BYTES); its spooled part was removed. Narrow the query, or ask for fewer rows with max_rows"),
                    _ => format!("the spooled results of all statements (and their Parquet pages) passed {limit} bytes (DUCKGATE_SPOOL_BYTES); what was being written, a statement's result or a Parquet page of one, was removed. Fetch or DELETE finished statements, or retry later"),
                },
            ),
            // Shared quotas free up as statements expire or are deleted; one
            // statement's own quota does not, so a retry would fail the same.
            (*scope != "statement").then(|| (header::RETRY_AFTER, HeaderValue::from_static("5"))),
        ),
        QueryError::StorageFull { store } => (
            problem(
                StatusCode::INSUFFICIENT_STORAGE,
                &format!("{store}-full"),
                "Storage full",
                format!("the disk under the gateway's {store} has no space left (the server's storage, not the request); this statement's partial result was removed. Retry later"),
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("30"))),
        ),
        QueryError::Storage { store, .. } => (
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "storage-error",
                "Storage failed",
                format!("writing the gateway's {store} failed (the server's storage, not the request); the cause is in its log"),
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("30"))),
        ),
        QueryError::RemoteStore { store, fault, .. } => match fault {
            StoreFault::Missing => (
                problem(
                    StatusCode::GONE,
                    "result-missing",
                    "Result missing",
                    format!("the statement's result is no longer in the S3 {store}: it was removed there (by hand or by a lifecycle rule); run the statement again"),
                ),
                None,
            ),
            StoreFault::Unavailable => (
                problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    &format!("{store}-unavailable"),
                    "Spool unavailable",
                    format!("the S3 {store} did not answer in time or failed (the server's storage, not the request); the cause is in the gateway's log, retry later"),
                ),
                Some((header::RETRY_AFTER, HeaderValue::from_static("5"))),
            ),
            StoreFault::Refused => (
                problem(
                    StatusCode::BAD_GATEWAY,
                    &format!("{store}-refused"),
                    "Spool refused",
                    format!("the S3 {store} refused the gateway's request (its bucket, or the rights of the gateway's credentials: the operator's to fix); the cause is in the gateway's log"),
                ),
                Some((header::RETRY_AFTER, HeaderValue::from_static("30"))),
            ),
        },
        QueryError::ClientStalled => (
            problem(
                StatusCode::REQUEST_TIMEOUT,
                "client-stalled",
                "Client stopped reading",
                "the client accepted no data for longer than the gateway allows; the query was interrupted",
            ),
            None,
        ),
        QueryError::Cancelled => (
            problem(StatusCode::REQUEST_TIMEOUT, "query-cancelled", "Query cancelled", "the query was cancelled"),
            None,
        ),
        QueryError::CancelledByRequest => (
            problem(
                StatusCode::CONFLICT,
                "query-cancelled",
                "Query cancelled",
                "the query was cancelled by a DELETE /queries/{id} request (its owner or the admin)",
            ),
            None,
        ),
        QueryError::ShuttingDown => (
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "shutting-down",
                "Shutting down",
                "the gateway is shutting down; retry on another instance",
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
        ),
        QueryError::PoolExhausted(waited) => (
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "pool-exhausted",
                "All connections busy",
                format!(
                    "no database connection became free within {} ms; retry later",
                    waited.as_millis()
                ),
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
        ),
        QueryError::ResultCap { what, limit } => (
            problem(
                StatusCode::UNPROCESSABLE_ENTITY,
                "result-too-large",
                "Result larger than the gateway's cap",
                match *what {
                    "rows" => format!(
                        "the result has more than {limit} rows, the gateway's cap for an answer that asks for no limit; ask for fewer rows with max_rows (the answer then ends cleanly at that row), narrow the query, or use POST /statements"
                    ),
                    _ => format!(
                        "the answer passed {limit} bytes, the gateway's cap (DUCKGATE_MAX_RESULT_BYTES); ask for fewer rows with max_rows, narrow the query, or use POST /statements"
                    ),
                },
            ),
            None,
        ),
        QueryError::Shed {
            expected,
            ahead,
            limit,
        } => (
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "pool-exhausted",
                "All connections busy",
                format!(
                    "every database connection is busy and {ahead} requests wait ahead; the \
                     expected wait of {} ms is beyond the {} ms this gateway lets a request \
                     wait, so it is refused now; retry later",
                    expected.as_millis(),
                    limit.as_millis()
                ),
            ),
            // When the queue ahead should have drained (at least a second).
            Some((
                header::RETRY_AFTER,
                HeaderValue::from(expected.as_secs_f64().ceil().clamp(1.0, 60.0) as u64),
            )),
        ),
        QueryError::S3Share(waited) => (
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "pool-exhausted",
                "All connections for S3 queries busy",
                format!(
                    "the connections queries that read S3 may use (DUCKGATE_MAX_S3_QUERIES) \
                     stayed busy for {} ms: S3 is slow or stalled; queries that do not read \
                     S3 keep the rest of the pool; retry later",
                    waited.as_millis()
                ),
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
        ),
        QueryError::TokenShare(waited) => (
            problem(
                StatusCode::TOO_MANY_REQUESTS,
                "token-concurrency",
                "Too many queries for this token",
                format!(
                    "this token already runs as many queries as its share of the pool allows, \
                     and none ended within {} ms; other tokens keep their share",
                    waited.as_millis()
                ),
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
        ),
        QueryError::CredentialsExpired => (
            problem(
                StatusCode::SERVICE_UNAVAILABLE,
                "credentials-expired",
                "S3 credentials expired",
                "the gateway's S3 credentials have expired; S3 queries fail until fresh credentials are installed (see /healthz for the refresh state)",
            ),
            Some((header::RETRY_AFTER, HeaderValue::from_static("5"))),
        ),
        QueryError::FormatUnavailable(detail) => (
            problem(
                StatusCode::BAD_REQUEST,
                "format-unavailable",
                "No answer in this format",
                detail.clone(),
            ),
            None,
        ),
        QueryError::Internal(_) => (
            problem(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "Internal error",
                "the gateway failed to answer; the cause is in its log",
            ),
            None,
        ),
    }
}

/// The problem for an error that happens after a streamed body began (used
/// for NDJSON's final error record).
pub fn problem_json_for_stream(e: &QueryError) -> serde_json::Value {
    serde_json::to_value(query_problem(e).0).unwrap_or(serde_json::Value::Null)
}

impl ApiError {
    fn parts(&self) -> (Problem, Option<(header::HeaderName, HeaderValue)>) {
        match self {
            ApiError::BadRequest { slug, title, detail } => {
                (problem(StatusCode::BAD_REQUEST, slug, title, detail.clone()), None)
            }
            ApiError::Query(e) => query_problem(e),
            ApiError::Forbidden { slug, title, detail } => {
                (problem(StatusCode::FORBIDDEN, slug, title, detail.clone()), None)
            }
            ApiError::Unauthorized { detail } => (
                problem(StatusCode::UNAUTHORIZED, "unauthorized", "Unauthorized", *detail),
                Some((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))),
            ),
            ApiError::AdminDisabled => (
                problem(
                    StatusCode::FORBIDDEN,
                    "admin-disabled",
                    "Admin API disabled",
                    "the admin API is off; start the gateway with DUCKGATE_ADMIN_TOKEN set to enable it",
                ),
                None,
            ),
            ApiError::NotFound(what) => (problem(StatusCode::NOT_FOUND, "not-found", "Not found", what.clone()), None),
            ApiError::PayloadTooLarge { limit } => (
                problem(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "payload-too-large",
                    "Request too large",
                    format!("the request body or SQL text exceeds the limit of {limit} bytes"),
                ),
                None,
            ),
            ApiError::UnsupportedMediaType(ct) => (
                problem(
                    StatusCode::UNSUPPORTED_MEDIA_TYPE,
                    "unsupported-media-type",
                    "Unsupported content type",
                    format!(
                        "content type `{ct}` is not accepted; send application/json, text/plain or application/sql"
                    ),
                ),
                None,
            ),
            ApiError::NotAcceptable(what) => (
                problem(
                    StatusCode::NOT_ACCEPTABLE,
                    "not-acceptable",
                    "No acceptable format",
                    format!(
                        "{what}; available: application/json, application/x-ndjson, text/csv, application/vnd.apache.arrow.stream, application/vnd.apache.parquet (/query only)"
                    ),
                ),
                None,
            ),
            ApiError::Overloaded => (
                problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "overloaded",
                    "Overloaded",
                    "the gateway is serving as many requests as it may; retry later",
                ),
                Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
            ),
            ApiError::Conflict {
                slug,
                title,
                detail,
            } => (problem(StatusCode::CONFLICT, slug, title, detail.clone()), None),
            ApiError::RequestTimeout => (
                problem(
                    StatusCode::REQUEST_TIMEOUT,
                    "request-timeout",
                    "Request timed out",
                    "the request did not complete in time",
                ),
                None,
            ),
            ApiError::TooManyStatements { limit, setting } => (
                problem(
                    StatusCode::TOO_MANY_REQUESTS,
                    "too-many-statements",
                    "Too many statements",
                    format!("at most {limit} statements are kept ({setting}) and that many are; DELETE finished ones or retry once some expire"),
                ),
                Some((header::RETRY_AFTER, HeaderValue::from_static("5"))),
            ),
            ApiError::Gone(detail) => (
                problem(StatusCode::GONE, "statement-expired", "Statement expired", detail.clone()),
                None,
            ),
            ApiError::Lost(detail) => (
                problem(StatusCode::GONE, "statement-lost", "Statement lost", detail.clone()),
                None,
            ),
            ApiError::SharedState(_) => (
                problem(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "shared-state-unavailable",
                    "Shared state unavailable",
                    "the gateway could not reach the state its replicas share (DUCKGATE_STATE_DSN); the cause is in its log, retry later",
                ),
                Some((header::RETRY_AFTER, HeaderValue::from_static("1"))),
            ),
            ApiError::Internal(_) => (
                problem(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "Internal error",
                    "the gateway failed to answer; the cause is in its log",
                ),
                None,
            ),
        }
    }
}

/// How a failed query or statement ends, for its audit line.
pub fn outcome_of(e: &QueryError) -> crate::engine::queries::Outcome {
    let (p, _) = query_problem(e);
    crate::engine::queries::Outcome {
        status: p.status,
        kind: p
            .type_uri
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string(),
        error_class: p.error_class,
    }
}

impl ApiError {
    /// How a query refused with this error ended, for its audit line: the
    /// status, the problem's short type and DuckDB's error class.
    pub fn outcome(&self) -> crate::engine::queries::Outcome {
        let (p, _) = self.parts();
        let kind = p
            .type_uri
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .to_string();
        crate::engine::queries::Outcome {
            status: p.status,
            kind,
            error_class: p.error_class,
        }
    }

    /// The problem response of a query, naming its id in the body and the
    /// `duckgate-query-id` header.
    pub fn into_response_for(self, query_id: &str) -> Response {
        self.render(Some(query_id))
    }

    fn render(self, query_id: Option<&str>) -> Response {
        let (mut body, extra) = self.parts();
        body.query_id = query_id.map(str::to_string);
        let status = StatusCode::from_u16(body.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if let ApiError::SharedState(cause) = &self {
            tracing::error!(error.cause = %cause, "shared state unavailable");
        }
        if let ApiError::Internal(cause) | ApiError::Query(QueryError::Internal(cause)) = &self {
            tracing::error!(error.cause = %cause, "request failed");
        }
        let mut response = (
            status,
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/problem+json"),
            )],
            serde_json::to_vec(&body).unwrap_or_default(),
        )
            .into_response();
        if let Some((name, value)) = extra {
            response.headers_mut().insert(name, value);
        }
        if let Some(v) = query_id.and_then(|id| HeaderValue::from_str(id).ok()) {
            response
                .headers_mut()
                .insert(crate::api::query::QUERY_ID_HEADER, v);
        }
        response
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        self.render(None)
    }
}
