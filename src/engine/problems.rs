//! The catalogue of problems: every kind of failure a client can see, with
//! its slug (`urn:duckgate:problem:<slug>`), HTTP status, title,
//! `Retry-After` and, for a query's failures, the `outcome` label of
//! `duckgate_queries_total` and the audit line. One row each; the HTTP
//! answers, the metrics' label set, the audit outcome and the docs' error
//! table (checked by a test) all read it. No HTTP types: the engine builds
//! the problem of an error that ends a stream itself.

use serde::Serialize;

use crate::engine::errors::SqlPosition;
use crate::engine::execute::StoreFault;
use crate::engine::guard::Refusal;
use crate::engine::QueryError;

/// One kind of problem.
#[derive(Debug, PartialEq, Eq)]
pub struct Kind {
    /// The problem type's last part.
    pub slug: &'static str,
    /// The HTTP status.
    pub status: u16,
    /// The problem's short title.
    pub title: &'static str,
    /// Seconds a client should wait before retrying, where a retry can
    /// succeed (the server's side, not the request).
    pub retry_after: Option<u32>,
    /// A query's `outcome` (metrics and audit); `None` for kinds only the
    /// HTTP layer answers (the request never became a query).
    pub outcome: Option<&'static str>,
}

macro_rules! catalogue {
    ($( $(#[$doc:meta])* $name:ident = $status:literal $slug:literal $title:literal, retry $retry:expr, outcome $outcome:expr; )*) => {
        /// The kinds, by name.
        pub mod kind {
            use super::Kind;
            $( $(#[$doc])* pub const $name: Kind = Kind {
                slug: $slug,
                status: $status,
                title: $title,
                retry_after: $retry,
                outcome: $outcome,
            }; )*
        }
        /// Every kind, in the order of the docs' table.
        pub const ALL: &[&Kind] = &[$(&kind::$name),*];
    };
}

catalogue! {
    /// The SQL does not parse or bind (the client's SQL).
    SQL_ERROR = 400 "sql-error" "SQL error", retry None, outcome Some("sql_error");
    /// The body holds no statement.
    NO_STATEMENT = 400 "no-statement" "No statement", retry None, outcome Some("sql_error");
    /// The body holds more than one statement.
    MULTIPLE_STATEMENTS = 400 "multiple-statements" "Several statements", retry None, outcome Some("sql_error");
    /// Parameters and placeholders differ in number.
    PARAMETER_COUNT = 400 "parameter-count" "Wrong number of parameters", retry None, outcome Some("sql_error");
    /// A parameter does not convert.
    PARAMETER_INVALID = 400 "parameter-invalid" "Invalid parameter", retry None, outcome Some("sql_error");
    /// The statement has no answer in the format asked for.
    FORMAT_UNAVAILABLE = 400 "format-unavailable" "No answer in this format", retry None, outcome Some("sql_error");
    /// The guard or the lockdown refused the statement.
    STATEMENT_FORBIDDEN = 403 "statement-forbidden" "Statement not allowed", retry None, outcome Some("refused");
    /// S3 refused the gateway's credentials access (HTTP 403).
    STORAGE_FORBIDDEN = 403 "storage-forbidden" "Storage refused access", retry None, outcome Some("storage_forbidden");
    /// The client stopped reading the answer.
    CLIENT_STALLED = 408 "client-stalled" "Client stopped reading", retry None, outcome Some("client_stalled");
    /// The client went away, or the answer could no longer be delivered.
    QUERY_CANCELLED = 408 "query-cancelled" "Query cancelled", retry None, outcome Some("cancelled");
    /// A cancel request stopped the query.
    CANCELLED_BY_REQUEST = 409 "query-cancelled" "Query cancelled", retry None, outcome Some("cancelled");
    /// A statement's result was removed from the S3 spool underneath.
    RESULT_MISSING = 410 "result-missing" "Result missing", retry None, outcome Some("storage_error");
    /// A value past DUCKGATE_MAX_VALUE_BYTES.
    VALUE_TOO_LARGE = 422 "value-too-large" "Value too large", retry None, outcome Some("value_too_large");
    /// The result passed a cap the client did not ask for: the gateway's
    /// or the caller's role's (the detail says which).
    RESULT_TOO_LARGE = 422 "result-too-large" "Result larger than its cap", retry None, outcome Some("result_cap");
    /// The token already runs its share of the pool.
    TOKEN_CONCURRENCY = 429 "token-concurrency" "Too many queries for this token", retry Some(1), outcome Some("token_share");
    /// The caller's role already runs its `queries_at_once`.
    ROLE_CONCURRENCY = 429 "role-concurrency" "Too many queries for this role", retry Some(1), outcome Some("role_share");
    /// A fault of the gateway; the cause is in its log.
    INTERNAL = 500 "internal" "Internal error", retry None, outcome Some("internal_error");
    /// Writing the spool failed otherwise than a full disk.
    STORAGE_ERROR = 500 "storage-error" "Storage failed", retry Some(30), outcome Some("storage_error");
    /// S3 or another store (a lake's catalog database) unreachable or failing.
    UPSTREAM_ERROR = 502 "upstream-error" "Storage unreachable or failing", retry Some(5), outcome Some("upstream_error");
    /// The S3 spool refused the gateway (its bucket, the role's rights).
    SPOOL_REFUSED = 502 "spool-refused" "Spool refused", retry Some(30), outcome Some("storage_error");
    /// No connection within the acquire timeout, or refused at once.
    POOL_EXHAUSTED = 503 "pool-exhausted" "All connections busy", retry Some(1), outcome Some("pool_exhausted");
    /// S3 credentials expired and no refresh succeeded.
    CREDENTIALS_EXPIRED = 503 "credentials-expired" "S3 credentials expired", retry Some(5), outcome Some("credentials_expired");
    /// DuckDB was interrupted for a reason the client did not ask for.
    INTERRUPTED = 503 "interrupted" "Query interrupted", retry Some(5), outcome Some("interrupted");
    /// The gateway is draining.
    SHUTTING_DOWN = 503 "shutting-down" "Shutting down", retry Some(1), outcome Some("cancelled");
    /// The S3 spool did not answer in time, failed or throttled.
    SPOOL_UNAVAILABLE = 503 "spool-unavailable" "Spool unavailable", retry Some(5), outcome Some("storage_error");
    /// The query ran past its time limit.
    QUERY_TIMEOUT = 504 "query-timeout" "Query timed out", retry None, outcome Some("timeout");
    /// DuckDB's memory limit or the gateway's memory ceiling.
    OUT_OF_MEMORY = 507 "out-of-memory" "Out of memory", retry Some(5), outcome Some("out_of_memory");
    /// Spill files passed DUCKGATE_MAX_TEMP_DIRECTORY_SIZE.
    TEMP_SPACE_EXHAUSTED = 507 "temp-space-exhausted" "Temporary space exhausted", retry Some(5), outcome Some("temp_space");
    /// A result passed a spool quota.
    SPOOL_QUOTA_EXCEEDED = 507 "spool-quota-exceeded" "Spool quota exceeded", retry Some(5), outcome Some("spool_full");
    /// The spool's disk is full.
    SPOOL_FULL = 507 "spool-full" "Storage full", retry Some(30), outcome Some("storage_full");

    /// A malformed request: its body, query string, options or id.
    BAD_REQUEST = 400 "bad-request" "Bad request", retry None, outcome None;
    /// No token, or not one valid for the route.
    UNAUTHORIZED = 401 "unauthorized" "Unauthorized", retry None, outcome None;
    /// An admin route with no admin token configured.
    ADMIN_DISABLED = 403 "admin-disabled" "Admin API disabled", retry None, outcome None;
    /// A web page of another site, on an anonymous gateway.
    CROSS_SITE_REQUEST = 403 "cross-site-request" "Cross-site request refused", retry None, outcome None;
    /// A Host the gateway does not answer.
    HOST_NOT_ALLOWED = 403 "host-not-allowed" "Host not allowed", retry None, outcome None;
    /// No such route, query, statement or secret.
    NOT_FOUND = 404 "not-found" "Not found", retry None, outcome None;
    /// The Accept header names no result format.
    NOT_ACCEPTABLE = 406 "not-acceptable" "No acceptable format", retry None, outcome None;
    /// The body did not arrive in time.
    REQUEST_TIMEOUT = 408 "request-timeout" "Request timed out", retry None, outcome None;
    /// The client's query id names one of its running queries or kept statements.
    QUERY_ID_TAKEN = 409 "query-id-taken" "Id in use", retry None, outcome None;
    /// The admin named an id several tokens use.
    AMBIGUOUS_ID = 409 "ambiguous-id" "Ambiguous id", retry None, outcome None;
    /// A page of a statement still running.
    STATEMENT_RUNNING = 409 "statement-running" "Statement still running", retry None, outcome None;
    /// A page of a statement that failed or was cancelled.
    STATEMENT_FAILED = 409 "statement-failed" "Statement failed", retry None, outcome None;
    /// The statement's result expired.
    STATEMENT_EXPIRED = 410 "statement-expired" "Statement expired", retry None, outcome None;
    /// The replica that ran the statement stopped.
    STATEMENT_LOST = 410 "statement-lost" "Statement lost", retry None, outcome None;
    /// The body or its SQL past its limit.
    PAYLOAD_TOO_LARGE = 413 "payload-too-large" "Request too large", retry None, outcome None;
    /// A body that is not JSON, text or SQL.
    UNSUPPORTED_MEDIA_TYPE = 415 "unsupported-media-type" "Unsupported content type", retry None, outcome None;
    /// As many statements as allowed are kept.
    TOO_MANY_STATEMENTS = 429 "too-many-statements" "Too many statements", retry Some(5), outcome None;
    /// A group of routes already serves as many requests as it may.
    OVERLOADED = 503 "overloaded" "Overloaded", retry Some(1), outcome None;
    /// PostgreSQL of the shared state is out of reach.
    SHARED_STATE_UNAVAILABLE = 503 "shared-state-unavailable" "Shared state unavailable", retry Some(1), outcome None;
    /// A bearer JWT cannot be checked: the OIDC issuer's keys cannot be fetched.
    ISSUER_UNAVAILABLE = 503 "issuer-unavailable" "Identity issuer unavailable", retry Some(5), outcome None;
}

/// The `outcome` labels of queries: every query kind's, and `ok`.
pub fn outcomes() -> Vec<&'static str> {
    let mut out = vec!["ok"];
    for k in ALL {
        if let Some(o) = k.outcome {
            if !out.contains(&o) {
                out.push(o);
            }
        }
    }
    out
}

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
    /// What went wrong with this request. A DuckDB error's is DuckDB's
    /// message: its first line says what, further lines (candidate
    /// functions, bindings) follow; the excerpt DuckDB appends is `excerpt`.
    pub detail: String,
    /// DuckDB's error class (Parser, Binder, Catalog, Conversion, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_class: Option<String>,
    /// The line of the submitted SQL where DuckDB places the error, from 1
    /// (lines end at `\n`, `\r\n` or a lone `\r`). Present with `column` and
    /// `offset` where DuckDB gives a place.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub line: Option<usize>,
    /// The column on that line, from 1, in characters (Unicode code points).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub column: Option<usize>,
    /// The same place as a byte offset into the submitted SQL (UTF-8), from 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0)]
    pub offset: Option<usize>,
    /// DuckDB's excerpt of the submitted SQL at that place: `LINE n: ` and
    /// the line (cut with `...` when long), then a line with a caret under
    /// the place, as DuckDB prints it.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "LINE 3: GROUPBY channel\n                ^")]
    pub excerpt: Option<String>,
    /// The refused statement kind, for 403 refusals.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub statement_kind: Option<String>,
    /// The query's id (`duckgate-query-id`), on answers to `/query`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub query_id: Option<String>,
    /// Its kind (not sent: the type, title and status say it).
    #[serde(skip)]
    #[schema(ignore)]
    pub kind: Option<&'static Kind>,
    /// Seconds for `Retry-After`: the kind's, or one this answer computed.
    #[serde(skip)]
    #[schema(ignore)]
    pub retry_after: Option<u32>,
}

impl Problem {
    /// A problem of `kind` with `detail`.
    pub fn new(kind: &'static Kind, detail: impl Into<String>) -> Self {
        Self::with_slug(kind, kind.slug, kind.title, detail)
    }

    /// A problem of `kind` whose slug and title are more precise (a
    /// malformed request's own slug).
    pub fn with_slug(
        kind: &'static Kind,
        slug: &str,
        title: &str,
        detail: impl Into<String>,
    ) -> Self {
        Problem {
            type_uri: format!("urn:duckgate:problem:{slug}"),
            title: title.to_string(),
            status: kind.status,
            detail: detail.into(),
            error_class: None,
            line: None,
            column: None,
            offset: None,
            excerpt: None,
            statement_kind: None,
            query_id: None,
            kind: Some(kind),
            retry_after: kind.retry_after,
        }
    }

    /// The shared state could not be reached (its cause is logged, never sent).
    pub fn shared_state_unavailable() -> Self {
        Self::new(&kind::SHARED_STATE_UNAVAILABLE,
            "the gateway could not reach the state its replicas share (DUCKGATE_STATE_DSN); the cause is in its log, retry later",
        )
    }

    /// A fault of the gateway (its cause is logged, never sent).
    pub fn internal() -> Self {
        Self::new(
            &kind::INTERNAL,
            "the gateway failed to answer; the cause is in its log",
        )
    }

    /// The problem's slug.
    pub fn slug(&self) -> &str {
        self.type_uri.rsplit(':').next().unwrap_or_default()
    }

    /// This problem placed where DuckDB says its error is in the SQL.
    fn at(mut self, at: Option<&SqlPosition>) -> Self {
        if let Some(at) = at {
            self.line = Some(at.line);
            self.column = Some(at.column);
            self.offset = Some(at.offset);
            self.excerpt = at.excerpt.clone();
        }
        self
    }
}

/// How a failed query or statement ends, for its audit line and metrics.
pub fn outcome_of(e: &QueryError) -> crate::engine::queries::Outcome {
    let p = of_query(e);
    crate::engine::queries::Outcome {
        status: p.status,
        kind: p.slug().to_string(),
        error_class: p.error_class,
    }
}

/// The problem of an error that ends a streamed body (NDJSON's last
/// record, CSV's and Arrow's error trailers).
pub fn json_for_stream(e: &QueryError) -> serde_json::Value {
    serde_json::to_value(of_query(e)).unwrap_or(serde_json::Value::Null)
}

/// A DuckDB error, with the status that says whose it is: the client's SQL
/// (400), a refusal by the database's lockdown (403, like the guard's), or
/// the server's side: memory or temp space (507), S3 or another upstream
/// unreachable or failing (502), an interrupt the client did not ask for
/// (503). Server-side ones carry `Retry-After`.
fn sql_problem(class: String, message: String, at: Option<&SqlPosition>) -> Problem {
    let k: &'static Kind = match class.as_str() {
        "Permission" => &kind::STATEMENT_FORBIDDEN,
        "Out of Memory" => &kind::OUT_OF_MEMORY,
        "IO" | "HTTP" | "Network" if names_missing_object(&message) => &kind::SQL_ERROR,
        "IO" | "HTTP" | "Network" if message.contains("HTTP 403") => &kind::STORAGE_FORBIDDEN,
        "IO" | "HTTP" | "Network" => &kind::UPSTREAM_ERROR,
        "Interrupt" => &kind::INTERRUPTED,
        "Fatal" | "FATAL" | "Internal" | "INTERNAL" => &kind::INTERNAL,
        _ => &kind::SQL_ERROR,
    };
    // An upstream's message may quote a catalog's connection string.
    let message = if k.status == 502 || k.status == 403 {
        crate::engine::errors::scrub_dsn(&message)
    } else {
        message
    };
    let mut p = Problem::new(k, message).at(at);
    p.error_class = Some(class);
    p
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
/// The problem of a query's error: its kind, and a detail that says what
/// to do about it.
pub fn of_query(e: &QueryError) -> Problem {
    match e {
        QueryError::Refused(Refusal::Parse { message, at }) => {
            let (class, message) = crate::engine::errors::split_class(message);
            let mut p = Problem::new(&kind::SQL_ERROR, message).at(at.as_ref());
            p.error_class = Some(if class == "Unknown" { "Parser".into() } else { class });
            p
        }
        QueryError::Refused(Refusal::Bind { message, at }) => {
            let (class, message) = crate::engine::errors::split_class(message);
            sql_problem(class, message, at.as_ref())
        }
        QueryError::Refused(Refusal::StatementCount(0)) => Problem::new(&kind::NO_STATEMENT, "the request holds no SQL statement"),
        QueryError::Refused(Refusal::StatementCount(n)) => Problem::new(&kind::MULTIPLE_STATEMENTS,
                format!("the request holds {n} statements; send exactly one per request"),
            ),
        QueryError::Refused(Refusal::Forbidden { kind, reason }) => {
            let mut p = Problem::new(&kind::STATEMENT_FORBIDDEN,
                format!("{kind} is not allowed: {reason}"),
            );
            p.statement_kind = Some(kind.clone());
            p
        }
        QueryError::Sql { class, message, at } => sql_problem(class.clone(), message.clone(), at.as_ref()),
        QueryError::ParamCount { expected, got } => Problem::new(&kind::PARAMETER_COUNT,
                format!("the statement has {expected} parameters but {got} were given"),
            ),
        QueryError::Param { index, message } => Problem::new(&kind::PARAMETER_INVALID,
                format!("parameter {index}: {message}"),
            ),
        QueryError::Timeout(limit) => Problem::new(&kind::QUERY_TIMEOUT,
                format!("the query ran past its time limit of {} ms and was interrupted", limit.as_millis()),
            ),
        QueryError::ValueTooLarge { size, limit } => Problem::new(&kind::VALUE_TOO_LARGE,
                format!("the result holds a value of {size} bytes; the gateway sends values of at most {limit} bytes (DUCKGATE_MAX_VALUE_BYTES)"),
            ),
        QueryError::TempSpace => Problem::new(&kind::TEMP_SPACE_EXHAUSTED,
                "the queries running spilled more than DUCKGATE_MAX_TEMP_DIRECTORY_SIZE to disk and were interrupted",
            ),
        QueryError::SpoolFull { limit, scope } => {
            let mut p = Problem::new(&kind::SPOOL_QUOTA_EXCEEDED,
                match *scope {
                    "token" => format!("the spooled results of this token's statements (and their Parquet pages) passed {limit} bytes (DUCKGATE_SPOOL_TOKEN_BYTES); what was being written, a statement's result or a Parquet page of one, was removed. Fetch and DELETE finished statements, or retry later"),
                    "role" => format!("the spooled results of the statements of this caller's role's members (and their Parquet pages) passed {limit} bytes, the role's spool_bytes; what was being written, a statement's result or a Parquet page of one, was removed. Fetch and DELETE finished statements, or retry later"),
                    "statement" => format!("the statement's result passed the spool quota of one statement, {limit} bytes (DUCKGATE_SPOOL_STATEMENT_BYTES); its spooled part was removed. Narrow the query, or ask for fewer rows with max_rows"),
                    _ => format!("the spooled results of all statements (and their Parquet pages) passed {limit} bytes (DUCKGATE_SPOOL_BYTES); what was being written, a statement's result or a Parquet page of one, was removed. Fetch or DELETE finished statements, or retry later"),
                },
            );
            // Shared quotas free up as statements expire or are deleted; one
            // statement's own quota does not, so a retry would fail the same.
            if *scope == "statement" {
                p.retry_after = None;
            }
            p
        }
        QueryError::StorageFull { store } => Problem::new(&kind::SPOOL_FULL,
                format!("the disk under the gateway's {store} has no space left (the server's storage, not the request); this statement's partial result was removed. Retry later"),
            ),
        QueryError::Storage { store, .. } => Problem::new(&kind::STORAGE_ERROR,
                format!("writing the gateway's {store} failed (the server's storage, not the request); the cause is in its log"),
            ),
        QueryError::RemoteStore { store, fault, .. } => match fault {
            StoreFault::Missing => Problem::new(&kind::RESULT_MISSING,
                    format!("the statement's result is no longer in the S3 {store}: it was removed there (by hand or by a lifecycle rule); run the statement again"),
                ),
            StoreFault::Unavailable => Problem::new(&kind::SPOOL_UNAVAILABLE,
                    format!("the S3 {store} did not answer in time or failed (the server's storage, not the request); the cause is in the gateway's log, retry later"),
                ),
            StoreFault::Refused => Problem::new(&kind::SPOOL_REFUSED,
                    format!("the S3 {store} refused the gateway's request (its bucket, or the rights of the gateway's credentials: the operator's to fix); the cause is in the gateway's log"),
                ),
        },
        QueryError::ClientStalled => Problem::new(&kind::CLIENT_STALLED,
                "the client accepted no data for longer than the gateway allows; the query was interrupted",
            ),
        QueryError::Cancelled => Problem::new(&kind::QUERY_CANCELLED, "the query was cancelled"),
        QueryError::CancelledByRequest => Problem::new(&kind::CANCELLED_BY_REQUEST,
                "the query was cancelled by a DELETE /queries/{id} request (its owner or the admin)",
            ),
        QueryError::ShuttingDown => Problem::new(&kind::SHUTTING_DOWN,
                "the gateway is shutting down; retry on another instance",
            ),
        QueryError::PoolExhausted(waited) => Problem::new(&kind::POOL_EXHAUSTED,
                format!(
                    "no database connection became free within {} ms; retry later",
                    waited.as_millis()
                ),
            ),
        QueryError::ResultCap { what, limit, role } => Problem::new(&kind::RESULT_TOO_LARGE,
                match (*what, role) {
                    ("rows", None) => format!(
                        "the result has more than {limit} rows, the gateway's cap for an answer that asks for no limit; ask for fewer rows with max_rows (the answer then ends cleanly at that row), narrow the query, or use POST /statements"
                    ),
                    // A role's cap holds for its members' statements too.
                    ("rows", Some(role)) => format!(
                        "the result has more than {limit} rows, the cap of role '{role}' (its max_rows) on one result of its members; ask for at most {limit} rows with max_rows (the answer then ends cleanly at that row), or narrow the query"
                    ),
                    (_, None) => format!(
                        "the answer passed {limit} bytes, the gateway's cap (DUCKGATE_MAX_RESULT_BYTES); ask for fewer rows with max_rows, narrow the query, or use POST /statements"
                    ),
                    (_, Some(role)) => format!(
                        "the answer passed {limit} bytes, the cap of role '{role}' (its max_result_bytes) on one answer of its members; ask for fewer rows with max_rows, narrow the query, or use POST /statements"
                    ),
                },
            ),
        QueryError::Shed {
            expected,
            ahead,
            limit,
        } => {
            let mut p = Problem::new(&kind::POOL_EXHAUSTED,
                format!(
                    "every database connection is busy and {ahead} requests wait ahead; the \
                     expected wait of {} ms is beyond the {} ms this gateway lets a request \
                     wait, so it is refused now; retry later",
                    expected.as_millis(),
                    limit.as_millis()
                ),
            );
            // When the queue ahead should have drained (at least a second).
            p.retry_after = Some(expected.as_secs_f64().ceil().clamp(1.0, 60.0) as u32);
            p
        },
        QueryError::S3Share(waited) => Problem::new(&kind::POOL_EXHAUSTED,
                format!(
                    "the connections queries that read S3 may use (DUCKGATE_MAX_S3_QUERIES) \
                     stayed busy for {} ms: S3 is slow or stalled; queries that do not read \
                     S3 keep the rest of the pool; retry later",
                    waited.as_millis()
                ),
            ),
        QueryError::TokenShare(waited) => Problem::new(&kind::TOKEN_CONCURRENCY,
                format!(
                    "this token already runs as many queries as its share of the pool allows, \
                     and none ended within {} ms; other tokens keep their share",
                    waited.as_millis()
                ),
            ),
        QueryError::RoleShare { role, cap, waited } => Problem::new(&kind::ROLE_CONCURRENCY,
                format!(
                    "the members of role '{role}' already run {cap} queries at once, as many as \
                     its queries_at_once allows, and none ended within {} ms; other roles keep \
                     their share",
                    waited.as_millis()
                ),
            ),
        QueryError::CredentialsExpired => Problem::new(&kind::CREDENTIALS_EXPIRED,
                "the gateway's S3 credentials have expired; S3 queries fail until fresh credentials are installed (see /healthz for the refresh state)",
            ),
        QueryError::FormatUnavailable(detail) => Problem::new(&kind::FORMAT_UNAVAILABLE,
                detail.clone(),
            ),
        QueryError::Internal(_) => Problem::new(&kind::INTERNAL,
                "the gateway failed to answer; the cause is in its log",
            ),
    }
}
