//! One error type for the HTTP API, answered as RFC 9457 problem details
//! (`application/problem+json`). User mistakes are 4xx with a useful detail;
//! server faults are logged with their cause and answered with generic text.

use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::engine::QueryError;
use crate::problems::{kind, Kind};

pub use crate::problems::Problem;

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
    /// A bearer JWT was refused (401): what was wrong, in general terms
    /// (never a claim's value or key material); or it could not be checked
    /// because the issuer's keys cannot be fetched (503).
    #[error("token refused")]
    TokenRefused(crate::identity::oidc::Refusal),
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
    /// A statement request failed in the statement domain; its problem is
    /// [`crate::statements::Error::problem`]'s. (Its query, shared-state
    /// and internal failures arrive as [`ApiError::Query`],
    /// [`ApiError::SharedState`] and [`ApiError::Internal`], whose causes
    /// are logged.)
    #[error("{0}")]
    Statement(crate::statements::Error),
}

impl From<crate::statements::Error> for ApiError {
    fn from(e: crate::statements::Error) -> Self {
        use crate::statements::Error as E;
        match e {
            E::Query(e) => ApiError::Query(e),
            E::SharedState(cause) => ApiError::SharedState(cause),
            E::Internal(cause) => ApiError::Internal(cause),
            E::SqlTooLarge { limit } => ApiError::PayloadTooLarge { limit },
            E::NoSql => {
                ApiError::bad_request("empty-sql", "No SQL", "the request holds no SQL text")
            }
            e => ApiError::Statement(e),
        }
    }
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

/// The header every problem answer carries: its title and the first line of
/// its detail, for readers that show a failed answer's status and headers
/// but not its body (DuckDB's `read_csv(url)` keeps them in its exception).
pub const ERROR_HEADER: &str = "duckgate-error";

/// The longest `duckgate-error` value, in bytes (the line is cut there).
const ERROR_HEADER_BYTES: usize = 300;

/// `duckgate-error`'s value for a problem's `title` and `detail`: `<title>:
/// <first line of the detail>` on one line of at most [`ERROR_HEADER_BYTES`], control
/// characters as spaces, and `%`, non-ASCII characters and anything else a
/// header cannot carry percent-encoded as UTF-8 (so
/// `urllib.parse.unquote` gives the text back). It says no more than the
/// body does, whose detail never holds a secret.
pub fn error_header(title: &str, detail: &str) -> HeaderValue {
    let first = detail.lines().next().unwrap_or_default().trim();
    let text = if first.is_empty() {
        title.to_string()
    } else {
        format!("{title}: {first}")
    };
    let mut out = String::with_capacity(text.len().min(ERROR_HEADER_BYTES));
    for c in text.chars() {
        let piece = match c {
            '%' => "%25".to_string(),
            ' '..='~' => c.to_string(),
            c if c.is_control() => " ".to_string(),
            c => {
                let mut buf = [0u8; 4];
                c.encode_utf8(&mut buf)
                    .bytes()
                    .map(|b| format!("%{b:02X}"))
                    .collect()
            }
        };
        if out.len() + piece.len() > ERROR_HEADER_BYTES - 3 {
            out.push_str("...");
            break;
        }
        out.push_str(&piece);
    }
    HeaderValue::from_str(out.trim_end()).unwrap_or_else(|_| HeaderValue::from_static("error"))
}

/// The answer's header and HTTP/1 reason phrase for a problem of `title`
/// and `detail`: a reader that shows only the status line (pandas' "HTTP
/// Error 400: ...", DuckDB's "(HTTP 400 ...)") shows the problem's title.
pub fn mark_problem(response: &mut Response, title: &str, detail: &str) {
    response
        .headers_mut()
        .insert(ERROR_HEADER, error_header(title, detail));
    if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(title.to_string()) {
        response.extensions_mut().insert(reason);
    }
}

/// The problem for an error that happens after a streamed body began.
pub use crate::problems::json_for_stream as problem_json_for_stream;

/// A kind of the catalogue by its slug and status (a request refused with
/// a more precise slug of a kind: `invalid-limit` is a bad request).
fn kind_for(slug: &str, status: u16, otherwise: &'static Kind) -> &'static Kind {
    crate::problems::ALL
        .iter()
        .copied()
        .find(|k| k.slug == slug && k.status == status)
        .unwrap_or(otherwise)
}

impl ApiError {
    fn parts(&self) -> (Problem, Option<(header::HeaderName, HeaderValue)>) {
        match self {
            ApiError::BadRequest { slug, title, detail } => (
                Problem::with_slug(&kind::BAD_REQUEST, slug, title, detail.clone()),
                None,
            ),
            ApiError::Query(e) => (crate::problems::of_query(e), None),
            ApiError::Forbidden { slug, title, detail } => (
                Problem::with_slug(
                    kind_for(slug, 403, &kind::CROSS_SITE_REQUEST),
                    slug,
                    title,
                    detail.clone(),
                ),
                None,
            ),
            ApiError::Unauthorized { detail } => (
                Problem::new(&kind::UNAUTHORIZED, *detail),
                Some((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))),
            ),
            // The issuer's keys cannot be had: the service's fault, a retry
            // may succeed (503 with Retry-After), never the client's 401.
            ApiError::TokenRefused(refusal) if refusal.issuer_unavailable() => {
                (refusal.problem(), None)
            }
            ApiError::TokenRefused(refusal) => (
                refusal.problem(),
                // RFC 6750: the token was there and is not good.
                Some((
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer error=\"invalid_token\""),
                )),
            ),
            ApiError::AdminDisabled => (
                Problem::new(&kind::ADMIN_DISABLED,
                    "the admin API is off; start the gateway with DUCKGATE_ADMIN_TOKEN set to enable it",
                ),
                None,
            ),
            ApiError::NotFound(what) => (Problem::new(&kind::NOT_FOUND, what.clone()), None),
            ApiError::PayloadTooLarge { limit } => (
                Problem::new(&kind::PAYLOAD_TOO_LARGE,
                    format!("the request body or SQL text exceeds the limit of {limit} bytes"),
                ),
                None,
            ),
            ApiError::UnsupportedMediaType(ct) => (
                Problem::new(&kind::UNSUPPORTED_MEDIA_TYPE,
                    format!(
                        "content type `{ct}` is not accepted; send application/json, text/plain or application/sql"
                    ),
                ),
                None,
            ),
            ApiError::NotAcceptable(what) => (
                Problem::new(&kind::NOT_ACCEPTABLE,
                    format!(
                        "{what}; available: application/json, application/x-ndjson, text/csv, application/vnd.apache.arrow.stream, application/vnd.apache.parquet (/query only)"
                    ),
                ),
                None,
            ),
            ApiError::Overloaded => (
                Problem::new(&kind::OVERLOADED,
                    "the gateway is serving as many requests as it may; retry later",
                ),
                None,
            ),
            ApiError::Conflict {
                slug,
                title,
                detail,
            } => (
                Problem::with_slug(
                    kind_for(slug, 409, &kind::QUERY_ID_TAKEN),
                    slug,
                    title,
                    detail.clone(),
                ),
                None,
            ),
            ApiError::RequestTimeout => (
                Problem::new(&kind::REQUEST_TIMEOUT,
                    "the request did not complete in time",
                ),
                None,
            ),
            ApiError::TooManyStatements { limit, setting } => (
                Problem::new(&kind::TOO_MANY_STATEMENTS,
                    format!("at most {limit} statements are kept ({setting}) and that many are; DELETE finished ones or retry once some expire"),
                ),
                None,
            ),
            ApiError::Gone(detail) => (
                Problem::new(&kind::STATEMENT_EXPIRED, detail.clone()),
                None,
            ),
            ApiError::Lost(detail) => (
                Problem::new(&kind::STATEMENT_LOST, detail.clone()),
                None,
            ),
            ApiError::SharedState(_) => (Problem::shared_state_unavailable(), None),
            ApiError::Internal(_) => (Problem::internal(), None),
            ApiError::Statement(e) => (e.problem(), None),
        }
    }
}

pub use crate::problems::outcome_of;

impl ApiError {
    /// The problem this error answers with (the Flight SQL listener sends
    /// its title and detail in a gRPC status).
    pub fn problem(&self) -> Problem {
        self.parts().0
    }

    /// How a query refused with this error ended, for its audit line: the
    /// status, the problem's short type and DuckDB's error class.
    pub fn outcome(&self) -> crate::engine::queries::Outcome {
        let (p, _) = self.parts();
        crate::engine::queries::Outcome {
            status: p.status,
            kind: p.slug().to_string(),
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
        if let Some(secs) = body.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        mark_problem(&mut response, &body.title, &body.detail);
        if let ApiError::Query(QueryError::Timeout(limit)) = &self {
            // For the count of timeouts the client chose (api/metrics.rs).
            response
                .extensions_mut()
                .insert(crate::api::metrics::TimedOut(limit.as_millis() as u64));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_header_is_one_bounded_line_a_header_can_carry() {
        let v = error_header(
            "SQL error",
            "Referenced column \"crème\" 100%\nCandidate bindings: \"t\"",
        );
        assert_eq!(
            v.to_str().unwrap(),
            "SQL error: Referenced column \"cr%C3%A8me\" 100%25"
        );
        let v = error_header("SQL error", "a\u{7}b");
        assert_eq!(v.to_str().unwrap(), "SQL error: a b");
        let long = "é".repeat(400);
        let v = error_header("SQL error", &long);
        assert!(v.len() <= ERROR_HEADER_BYTES, "{}", v.len());
        assert!(v.to_str().unwrap().ends_with("%A9..."), "{v:?}");
        assert_eq!(error_header("Not found", "").to_str().unwrap(), "Not found");
    }
}
