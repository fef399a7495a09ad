//! `POST /query`: one SQL statement in, rows out in the format asked for.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::error::{ApiError, Problem};
use crate::api::request::{
    query_id, read_request, read_url_request, QueryOptions, QueryRequest, RequestParts, UrlQuery,
};
use crate::api::AppState;
use crate::encode::Column;
use crate::engine::execute::OutputBody;
use crate::engine::queries::{Outcome, Registration};
use crate::identity::Identity;

// Names, not strings: a name made from a string is allocated per answer.

/// Header naming the statement kind the guard saw.
pub const STATEMENT_HEADER: HeaderName = HeaderName::from_static("duckgate-statement");
/// Header carrying the credential epoch the query ran under.
pub const EPOCH_HEADER: HeaderName = HeaderName::from_static("duckgate-credential-epoch");
/// The query's id: the client's, or one the gateway made.
pub const QUERY_ID_HEADER: HeaderName = HeaderName::from_static("duckgate-query-id");
/// Header present when the query was retried after a credential refresh.
pub const RETRIED_HEADER: HeaderName = HeaderName::from_static("duckgate-retried");

// The OpenAPI schemas of `encode::Column` and `encode::Format` (encoding
// knows nothing of HTTP or OpenAPI).

pub use crate::statements::status::ColumnSchema;

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
    /// A Parquet file written by DuckDB.
    Parquet,
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
    /// Whether the result had more rows than the `max_rows` the client asked
    /// for: the answer ends cleanly at that row, as asked. Never a silent cut
    /// of the gateway's: a result past a cap the client did not ask for (its
    /// row cap, `DUCKGATE_MAX_RESULT_BYTES`) fails with 422
    /// `result-too-large` instead.
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
        ("duckgate-query-id" = Option<String>, Header, pattern = r"^[A-Za-z0-9._-]{1,128}$", description = "The query's id (1-128 of A-Za-z0-9._-, unique among the token's running queries, on every replica); generated when absent")),
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
            (Vec<u8> = "application/vnd.apache.arrow.stream"),
            (Vec<u8> = "application/vnd.apache.parquet")
        ), headers(
            ("duckgate-query-id" = String, description = "The query's id: the client's, or a generated one"),
            ("duckgate-statement" = String, description = "The statement kind"),
            ("duckgate-credential-epoch" = u64, description = "Credential epoch the query ran under")
        )),
        (status = 400, description = "Malformed request or SQL error", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Statement not allowed", body = Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time (`request-timeout`), or the client stopped reading the answer (`client-stalled`, usually seen as an aborted body)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Cancelled by DELETE /queries/{id}, or the query id is in use", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body or SQL too large", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Unsupported content type", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The result passed a cap the client did not ask for (result-too-large), or a value is too large", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The token already runs its share of the pool (token-concurrency)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`internal`: a fault of the gateway (the cause is in its log)", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "`upstream-error`: S3 or a lake's catalog database unreachable or failing", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy, shutting down, S3 credentials expired, or (a client-chosen id, replicas sharing state) `shared-state-unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "The query ran past its time limit", body = Problem, content_type = "application/problem+json"),
        (status = 507, description = "DuckDB's memory limit or the gateway's memory ceiling (`out-of-memory`), or spill files past DUCKGATE_MAX_TEMP_DIRECTORY_SIZE (`temp-space-exhausted`)", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn query(
    State(state): State<AppState>,
    auth: Identity,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    // The request rather than `HeaderMap` and `Body`: its headers are
    // taken, not copied.
    request: axum::extract::Request,
) -> Response {
    let (parts, body) = request.into_parts();
    answer(state, auth, parts.headers, Source::Body(options, body)).await
}

/// Runs one read-only SQL statement given in the URL: a result that tools
/// read like a file (`pandas.read_csv(url)`, DuckDB's
/// `read_csv('http://…/query?sql=…&format=csv')`).
///
/// The same guard, limits, token (`Authorization` header), query id and
/// audit as `POST /query`, and whatever the gateway's policy, only
/// statements that read (a GET may be repeated by proxies and tools). The
/// URL holds the SQL: proxies in front may log it (the gateway never does).
#[utoipa::path(get, path = "/query", tag = "query",
    params(UrlQuery,
        ("duckgate-query-id" = Option<String>, Header, pattern = r"^[A-Za-z0-9._-]{1,128}$", description = "The query's id (1-128 of A-Za-z0-9._-, unique among the token's running queries, on every replica); generated when absent")),
    responses(
        (status = 200, description = "The result", content(
            (QueryResult = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.apache.arrow.stream"),
            (Vec<u8> = "application/vnd.apache.parquet")
        ), headers(
            ("duckgate-query-id" = String, description = "The query's id: the client's, or a generated one"),
            ("duckgate-statement" = String, description = "The statement kind"),
            ("duckgate-credential-epoch" = u64, description = "Credential epoch the query ran under")
        )),
        (status = 400, description = "Malformed request or SQL error", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Statement not allowed (a GET runs only statements that read)", body = Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time (`request-timeout`), or the client stopped reading the answer (`client-stalled`, usually seen as an aborted body)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Cancelled by DELETE /queries/{id}, or the query id is in use", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "SQL too large", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "The result passed a cap the client did not ask for (result-too-large), or a value is too large", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The token already runs its share of the pool (token-concurrency)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "`internal`: a fault of the gateway (the cause is in its log)", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "`upstream-error`: S3 or a lake's catalog database unreachable or failing", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "Busy, shutting down, S3 credentials expired, or (a client-chosen id, replicas sharing state) `shared-state-unavailable`", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "The query ran past its time limit", body = Problem, content_type = "application/problem+json"),
        (status = 507, description = "DuckDB's memory limit or the gateway's memory ceiling (`out-of-memory`), or spill files past DUCKGATE_MAX_TEMP_DIRECTORY_SIZE (`temp-space-exhausted`)", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn query_by_url(
    State(state): State<AppState>,
    auth: Identity,
    options: Result<Query<UrlQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    answer(state, auth, headers, Source::Url(options)).await
}

/// What `GET /query` would answer with, without running the query: the
/// request is checked (token, options, SQL size, format) and the answer's
/// headers sent, with no body and no length. Tools send HEAD before they
/// read a URL (DuckDB's httpfs, fsspec) to learn its size and whether it
/// exists; running the query for that would run every read twice, and its
/// length is not known before it has run anyway. An error in the SQL
/// itself shows on the GET that follows.
#[utoipa::path(head, path = "/query", tag = "query",
    params(UrlQuery),
    responses(
        (status = 200, description = "The request is well formed: a GET would run it. No body, no Content-Length"),
        (status = 400, description = "Malformed request", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "SQL too large", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn query_by_url_head(
    State(state): State<AppState>,
    auth: Identity,
    options: Result<Query<UrlQuery>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let checked =
        query_id(&headers).and_then(|id| Ok((id, read_url_request(&state, options, &headers)?)));
    let (id, request) = match checked {
        Ok(c) => c,
        Err(e) => return e.into_response(),
    };
    tracing::debug!(query_id = %id, token = %auth.name, "HEAD /query: checked, not run");
    // A body of unknown length (never sent): a HEAD answer must not claim
    // `Content-Length: 0`, which a reader takes for an empty file.
    let mut response = Response::new(Body::from_stream(futures::stream::empty::<
        Result<bytes::Bytes, std::io::Error>,
    >()));
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(request.format.content_type()),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Where a `/query` request's statement comes from.
enum Source {
    /// `POST`: the body (JSON or the SQL itself), options in the URL.
    Body(
        Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
        Body,
    ),
    /// `GET`: the URL; only statements that read.
    Url(Result<Query<UrlQuery>, axum::extract::rejection::QueryRejection>),
}

/// Runs a `/query` request and answers it.
async fn answer(state: AppState, auth: Identity, headers: HeaderMap, source: Source) -> Response {
    // The client's id, else a generated one: in the answer's header, every
    // problem, the request's log lines and the audit line.
    let id = match query_id(&headers) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    // On the request's span (which already names the identity), rather
    // than a span of its own: every line of the request from here on, the
    // access line included, carries it.
    tracing::Span::current().record("query_id", &*id);
    let mut registration = None;
    let answer = run_query(&state, &auth, &id, &mut registration, source, headers).await;
    match answer {
        Ok(mut response) => {
            if let Ok(v) = HeaderValue::from_str(&id) {
                response.headers_mut().insert(QUERY_ID_HEADER, v);
            }
            response
        }
        Err(e) => {
            if let Some(r) = &registration {
                r.running.set_outcome(e.outcome());
            }
            // The registration (if any) ends here: the audit line.
            e.into_response_for(&id)
        }
    }
}

/// Runs one `/query` request (its body, or its URL for a GET) through the
/// core and answers with the result's body and headers.
async fn run_query(
    state: &AppState,
    auth: &Identity,
    id: &str,
    registration: &mut Option<Registration>,
    source: Source,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let started = Instant::now();
    let (request, by_url) = match source {
        Source::Body(options, body) => (read_request(state, options, &headers, body).await?, false),
        Source::Url(options) => (read_url_request(state, options, &headers)?, true),
    };
    if request.wait_ms.is_some() {
        return Err(ApiError::bad_request(
            "invalid-option",
            "Option not accepted here",
            "wait_ms belongs to POST /statements; /query always waits for the result",
        ));
    }
    let (request, leave) = core_request(request, by_url, id, &headers, started);
    let ran = state.core().run(auth, request, leave).await?;
    let tracker = ran.registration.running.clone();
    let (output, epoch, retried) = (ran.output, ran.epoch, ran.retried);
    *registration = Some(ran.registration);
    let body = match output.body {
        OutputBody::Whole(data) => Body::new(Whole::new(data, registration.take())),
        OutputBody::Streamed(inner) => Body::from_stream(Tracked {
            inner,
            registration: registration.take(),
            cancelled: Box::pin(tracker.cancel.clone().cancelled_owned()),
        }),
    };
    Ok(ok_response(
        body,
        output.content_type,
        &output.kind,
        epoch,
        retried,
    ))
}

/// The core's request of a `/query` request, and how its answer leaves:
/// encoded in its format, or as Arrow IPC compressed with its codec.
fn core_request(
    request: RequestParts,
    by_url: bool,
    id: &str,
    headers: &HeaderMap,
    started: Instant,
) -> (crate::core::Request, crate::core::Leave) {
    let RequestParts {
        sql,
        params,
        format,
        arrow_compression,
        timeout_ms,
        max_rows,
        read_only,
        ..
    } = request;
    (
        crate::core::Request {
            sql,
            params,
            timeout_ms,
            max_rows,
            // A GET runs only statements that read, whatever the
            // policy: proxies, browsers and tools repeat GETs.
            read_only: by_url || read_only,
            id: Some(id.to_string()),
            client_chose_id: headers.contains_key(QUERY_ID_HEADER),
            door: "query",
            started,
        },
        match arrow_compression {
            Some(codec) => crate::core::Leave::CompressedArrow(codec),
            None => crate::core::Leave::Encoded(format),
        },
    )
}

/// The 200 answer: the body with its content type, the statement's kind,
/// the credentials epoch it ran under and whether it was retried.
fn ok_response(
    body: Body,
    content_type: &'static str,
    kind: &str,
    epoch: u64,
    retried: bool,
) -> Response {
    let mut response = Response::new(body);
    *response.status_mut() = StatusCode::OK;
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Ok(v) = HeaderValue::from_str(kind) {
        h.insert(STATEMENT_HEADER, v);
    }
    h.insert(EPOCH_HEADER, HeaderValue::from(epoch));
    if retried {
        h.insert(
            RETRIED_HEADER,
            HeaderValue::from_static("expired-credentials"),
        );
    }
    response.into_response()
}

/// A whole answer, sent with its length, that keeps its query registered
/// (listed, cancellable) until hyper takes it.
struct Whole {
    data: Option<bytes::Bytes>,
    registration: Option<Registration>,
}

impl Whole {
    fn new(data: bytes::Bytes, registration: Option<Registration>) -> Self {
        let mut whole = Self {
            data: Some(data),
            registration,
        };
        // An empty answer may never be asked for: it is over now.
        if whole.data.as_ref().is_some_and(|d| d.is_empty()) {
            whole.data = None;
            whole.taken(0);
        }
        whole
    }

    /// The answer's `bytes` went to hyper: the query ends (its audit line).
    fn taken(&mut self, bytes: usize) {
        if let Some(r) = self.registration.take() {
            r.running
                .bytes
                .fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
            r.running.set_outcome(Outcome::ok());
        }
    }
}

impl http_body::Body for Whole {
    type Data = bytes::Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, std::io::Error>>> {
        let data = self.data.take();
        if let Some(d) = &data {
            self.taken(d.len());
        }
        std::task::Poll::Ready(data.map(|d| Ok(http_body::Frame::data(d))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.data.as_ref().map_or(0, |d| d.len() as u64))
    }
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
                Poll::Ready(None) => running.set_outcome(Outcome::ok()),
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
