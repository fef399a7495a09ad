//! Async statements: `POST /statements` submits (and waits up to `wait_ms`
//! for the result), `GET /statements/{id}` polls, `GET
//! /statements/{id}/result` pages the spooled result in any format, `DELETE
//! /statements/{id}` cancels or discards. A query token sees its own
//! statements; the admin token sees all. Another token's statement is
//! answered exactly like one that does not exist.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::auth::{Caller, QueryAuth};
use crate::api::error::ApiError;
use crate::api::query::{EPOCH_HEADER, QUERY_ID_HEADER, RETRIED_HEADER, STATEMENT_HEADER};
use crate::api::request::{id_error, read_request, QueryOptions, RequestParts};
use crate::api::AppState;
use crate::encode::Format;
use crate::engine::{QueryError, QueryJob};
use crate::statements::pages::{self, Page};
use crate::statements::shared::Row;
use crate::statements::{AdmitError, Runner, State as StatementState, Statement};

mod views;

use views::status_of;
pub use views::{Discarded, PageOptions, StatementList, StatementStatus};

/// Header with a statement's state on its answers.
pub const STATE_HEADER: &str = "duckgate-statement-state";
/// Header with the rows of the whole result, on result pages.
pub const TOTAL_ROWS_HEADER: &str = "duckgate-total-rows";

/// Submits one SQL statement to run in the background, and waits up to
/// `wait_ms` for it.
///
/// The body is `/query`'s, plus `wait_ms` (default 10000, clamped to
/// `DUCKGATE_MAX_STATEMENT_WAIT_MS`). Finished in time: the result in the
/// format asked for, as `/query` gives it (a failure: its problem).
/// Otherwise 202 with `Location` and the status document; poll it, then
/// page the result from `GET /statements/{id}/result`. Statements run on a
/// share of the pool (`DUCKGATE_STATEMENT_POOL_SHARE`), with their own time
/// limits (`DUCKGATE_MAX_STATEMENT_TIMEOUT_MS`, also the default) and no
/// row limit but `max_rows` and the spool quotas.
#[utoipa::path(post, path = "/statements", tag = "statements",
    params(QueryOptions,
        ("wait_ms" = Option<i64>, Query, minimum = 0, description = "How long to wait for the finished result before answering 202 with the statement's status (milliseconds, default 10000, clamped to the gateway's maximum; 0 answers at once)"),
        ("duckgate-query-id" = Option<String>, Header, description = "The statement's id (1-128 of A-Za-z0-9._-, unique among the token's statements and running queries); generated when absent")),
    request_body(content(
        (crate::api::request::StatementRequest = "application/json"),
        (String = "text/plain"),
        (String = "application/sql")
    )),
    responses(
        (status = 200, description = "Finished within wait_ms: the result", content(
            (crate::api::query::QueryResult = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.apache.arrow.stream"),
            (Vec<u8> = "application/vnd.apache.parquet")
        ), headers(
            ("duckgate-query-id" = String, description = "The statement's id"),
            ("duckgate-statement-state" = String, description = "succeeded")
        )),
        (status = 202, description = "Still running: its status", body = StatementStatus, headers(
            ("Location" = String, description = "/statements/{id}"),
            ("duckgate-query-id" = String, description = "The statement's id")
        )),
        (status = 400, description = "Malformed request, or the statement's SQL error", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 403, description = "Statement not allowed", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 408, description = "The body did not arrive in time (`request-timeout`), or the client stopped reading a result answered at once (`client-stalled`)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "The id is in use, or the statement was cancelled", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body or SQL too large", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 415, description = "Unsupported content type", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 410, description = "`result-missing`: the result was removed from the S3 spool underneath", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`value-too-large`: a value past DUCKGATE_MAX_VALUE_BYTES", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 429, description = "As many statements as allowed are kept", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 500, description = "`internal` or `storage-error`: a fault of the gateway or of writing its spool (the cause is in its log)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "`upstream-error` (S3 or a lake's catalog database), or `spool-refused` (the S3 spool refused the gateway)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "Shutting down, S3 credentials expired, or `shared-state-unavailable`", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 504, description = "The statement ran past its time limit", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 507, description = "The result passed a spool quota, the spool's disk is full, DuckDB's memory limit, or spill files past their cap", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn submit(
    State(state): State<AppState>,
    auth: QueryAuth,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = match crate::api::request::query_id(&headers) {
        Ok(id) => id,
        Err(e) => return e.into_response(),
    };
    let started = Instant::now();
    match submit_inner(&state, &auth, &id, started, options, headers, body).await {
        Ok(r) => r,
        Err(e) => e.into_response_for(&id),
    }
}

async fn submit_inner(
    state: &AppState,
    auth: &QueryAuth,
    id: &str,
    started: Instant,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let RequestParts {
        sql,
        params,
        format,
        timeout_ms,
        max_rows,
        wait_ms,
        read_only,
    } = read_request(state, options, &headers, body).await?;
    let settings = &state.statements.settings;
    let limits = &state.config.limits;
    let max_timeout = settings.max_timeout;
    let timeout = timeout_ms.map_or(max_timeout, |t| Duration::from_millis(t).min(max_timeout));
    let rows_asked = max_rows.is_some_and(|r| r <= limits.max_rows);
    let max_rows = max_rows.map_or(limits.max_rows, |r| r.min(limits.max_rows));
    let wait = Duration::from_millis(wait_ms.unwrap_or(10_000)).min(settings.max_wait);

    let epoch = state.health.epoch();
    let mut registration = state
        .queries
        .register_as(
            "statement",
            Some(id),
            auth.name.clone(),
            auth.roles.clone(),
            &sql,
            epoch,
        )
        .map_err(id_error)?;
    let client_chose = headers.contains_key(crate::api::query::QUERY_ID_HEADER);
    if let Err(e) = crate::api::replicas::reserve_id(state, &mut registration, client_chose).await {
        // Its audit line says why it never ran.
        registration.running.set_outcome(e.outcome());
        return Err(e);
    }
    let statement = match state
        .statements
        .admit(registration.running.clone(), timeout)
    {
        Ok(s) => s,
        Err(e) => {
            let e = match e {
                AdmitError::Taken(id) => ApiError::Conflict {
                    slug: "query-id-taken",
                    title: "Statement id in use",
                    detail: format!(
                        "a statement with id {id} is kept; DELETE it or choose another id"
                    ),
                },
                AdmitError::TooMany(limit) => ApiError::TooManyStatements {
                    limit,
                    setting: "DUCKGATE_MAX_STATEMENTS",
                },
                AdmitError::TooManyForToken(limit) => ApiError::TooManyStatements {
                    limit,
                    setting: "DUCKGATE_MAX_STATEMENTS_PER_TOKEN",
                },
            };
            // Its audit line says why it never ran.
            registration.running.set_outcome(e.outcome());
            return Err(e);
        }
    };
    if let Some(shared) = &state.statements.shared {
        // The id must be free on every replica: the shared state decides.
        let claimed = shared
            .claim(&auth.name, id, &status_json(state, &statement).to_string())
            .await;
        let e = match claimed {
            Ok(true) => None,
            Ok(false) => Some(ApiError::Conflict {
                slug: "query-id-taken",
                title: "Statement id in use",
                detail: format!("a statement with id {id} is kept; DELETE it or choose another id"),
            }),
            Err(e) => Some(ApiError::SharedState(e)),
        };
        if let Some(e) = e {
            registration.running.set_outcome(e.outcome());
            state.statements.discard(&statement);
            return Err(e);
        }
        statement
            .claimed
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
    let writer = state.statements.writer(auth.name.clone());
    let job = QueryJob {
        sql,
        params,
        format: Format::Arrow,
        timeout,
        max_rows,
        rows_asked,
        max_bytes: u64::MAX,
        rules: if read_only {
            crate::api::query::read_only(state.engine.rules_for(auth.access.clone()))
        } else {
            state.engine.rules_for(auth.access.clone())
        },
        started,
        retried: false,
        stall_timeout: Duration::from_millis(limits.send_stall_timeout_ms),
        max_value_bytes: limits.max_value_bytes,
        tracker: Some(registration.running.clone()),
        sink: Some(writer.clone()),
    };
    let runner = Runner {
        engine: state.engine.clone(),
        rotator: state.rotator.clone(),
        health: state.health.clone(),
        shutdown: state.shutdown.clone(),
    };
    state
        .statements
        .start(statement.clone(), job, writer, registration, runner);
    if let Some(shared) = state.statements.shared.clone() {
        // Its end is published at once (the replicas loop would within
        // half a second).
        let (state, statement) = (state.clone(), statement.clone());
        tokio::spawn(async move {
            statement.done.cancelled().await;
            if let Err(e) = crate::api::replicas::publish(&state, &shared, &statement).await {
                tracing::warn!(error.cause = %e, "publishing a statement's end failed; retried");
            }
        });
    }

    tokio::select! {
        _ = statement.done.cancelled() => {}
        _ = tokio::time::sleep(wait) => {}
    }
    let snap = statement.snapshot(settings.ttl);
    end_published(state, &statement, snap.state).await?;
    match (snap.state, snap.result, snap.error) {
        (StatementState::Succeeded, Some(result), _) => {
            page_response(
                state,
                &Ident::of(state, &statement),
                result,
                Page {
                    format,
                    offset: 0,
                    limit: None,
                },
                // A POST's answer is whole: no byte ranges.
                &HeaderMap::new(),
                false,
            )
            .await
        }
        (StatementState::Failed | StatementState::Cancelled, _, Some(e)) => Err(e.into()),
        _ => Ok(accepted(state, &statement)),
    }
}

/// 202: the statement runs; here is where to poll.
fn accepted(state: &AppState, statement: &Statement) -> Response {
    let status = status_of(state, statement);
    let location = format!("/statements/{}", status.id);
    let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, v);
    }
    decorate(h, &Ident::of(state, statement));
    response
}

/// What the headers of a statement answer name.
struct Ident {
    id: String,
    epoch: u64,
    retried: bool,
}

impl Ident {
    fn of(state: &AppState, statement: &Statement) -> Self {
        Ident {
            id: statement.running.id.clone(),
            epoch: statement.running.epoch,
            retried: statement.snapshot(state.statements.settings.ttl).retried,
        }
    }

    /// Of another replica's statement, from its status document.
    fn of_status(status: &serde_json::Value) -> Self {
        Ident {
            id: status["id"].as_str().unwrap_or_default().to_string(),
            epoch: status["credential_epoch"].as_u64().unwrap_or(0),
            retried: status["retried"].as_bool().unwrap_or(false),
        }
    }
}

/// The id, state and credential headers every statement answer carries.
fn decorate(h: &mut HeaderMap, ident: &Ident) {
    if let Ok(v) = HeaderValue::from_str(&ident.id) {
        h.insert(QUERY_ID_HEADER, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(EPOCH_HEADER, HeaderValue::from(ident.epoch));
}

/// The status document of a local statement, as JSON.
pub(crate) fn status_json(state: &AppState, statement: &Statement) -> serde_json::Value {
    serde_json::to_value(status_of(state, statement)).unwrap_or_default()
}

/// The status document of a statement another replica keeps (or kept),
/// as read from the shared state: expired once past its expiry.
fn remote_status(row: &Row) -> serde_json::Value {
    let mut status = row.status.clone();
    if row.lost() {
        status["state"] = "lost".into();
    } else if row.expired && row.state == "succeeded" {
        status["state"] = "expired".into();
        if let Some(o) = status.as_object_mut() {
            o.remove("result");
        }
    }
    status
}

fn lost(row: &Row) -> ApiError {
    ApiError::Lost(format!(
        "statement {} was {} on a replica that stopped before it finished; its state is lost and it has no result: submit it again",
        row.id,
        if row.state == "lost" { "running" } else { row.state.as_str() }
    ))
}

/// A page of a finished statement's result: from a file with its length
/// and byte ranges (a Parquet page, one asked `as_file`, one already kept),
/// else encoded as it is sent.
async fn page_response(
    state: &AppState,
    ident: &Ident,
    result: Arc<crate::statements::spool::SpoolResult>,
    page: Page,
    headers: &HeaderMap,
    as_file: bool,
) -> Result<Response, ApiError> {
    if page.format == Format::Arrow {
        if let Some(column) = &result.arrow_refusal {
            return Err(ApiError::bad_request(
                "sql-error",
                "SQL error",
                crate::engine::sink::arrow_interval_refusal(column),
            ));
        }
    }
    let total = result.rows;
    let rows = page.rows(&result);
    let next = (page.offset + rows < total && page.limit.is_some()).then(|| {
        format!(
            "</statements/{}/result?format={}&offset={}&limit={}>; rel=\"next\"",
            ident.id,
            page.format.name(),
            page.offset + rows,
            page.limit.unwrap_or(rows)
        )
    });
    let kind = result.layout.kind.clone();
    let retried = ident.retried;
    let from_file = page.format == Format::Parquet || as_file || result.pages.get(page).is_some();
    let mut response = if from_file {
        file_page(result, page, headers).await?
    } else {
        streamed_page(state, result, page)
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(page.format.content_type()),
    );
    decorate(h, ident);
    h.insert(STATE_HEADER, HeaderValue::from_static("succeeded"));
    h.insert(TOTAL_ROWS_HEADER, HeaderValue::from(total));
    if let Ok(v) = HeaderValue::from_str(&kind) {
        h.insert(STATEMENT_HEADER, v);
    }
    if let Some(v) = next.and_then(|n| HeaderValue::from_str(&n).ok()) {
        h.insert(header::LINK, v);
    }
    if retried {
        h.insert(
            RETRIED_HEADER,
            HeaderValue::from_static("expired-credentials"),
        );
    }
    Ok(response)
}

/// A page in a streamed format (JSON, NDJSON, CSV, Arrow), encoded from
/// the spool as it is sent.
fn streamed_page(
    state: &AppState,
    result: Arc<crate::statements::spool::SpoolResult>,
    page: Page,
) -> Response {
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let stall = Duration::from_millis(state.config.limits.send_stall_timeout_ms);
    let runtime = tokio::runtime::Handle::current();
    let complete = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let complete = complete.clone();
        tokio::task::spawn_blocking(move || {
            pages::serve(result, page, tx, runtime, stall, &complete)
        });
    }
    // A page that stopped short (its client stalled, the spool could not be
    // read) ends with an error, never as a complete-looking body.
    let body = futures::stream::unfold(Some(rx), move |rx| {
        let complete = complete.clone();
        async move {
            let mut rx = rx?;
            match rx.recv().await {
                Some(chunk) => Some((chunk, Some(rx))),
                None if complete.load(std::sync::atomic::Ordering::SeqCst) => None,
                None => Some((Err(std::io::Error::other("the page stopped short")), None)),
            }
        }
    });
    Response::new(Body::from_stream(body))
}

/// A page from a file: the whole page written first (a Parquet file is
/// only whole once its footer is written; DuckDB writes it), kept with the
/// result, then sent by tower-http's `ServeFile`: with its length, and the
/// byte ranges readers ask for (`Range`, `If-Range`; 206, 416).
async fn file_page(
    result: Arc<crate::statements::spool::SpoolResult>,
    page: Page,
    headers: &HeaderMap,
) -> Result<Response, ApiError> {
    use crate::statements::pages::PageError;
    use tower::ServiceExt;
    let dir = result
        .path
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let written = tokio::task::spawn_blocking(move || {
        result.pages.get_or_write(page, || match page.format {
            Format::Parquet => crate::statements::parquet::write_page(&result, page, &dir),
            _ => crate::statements::pages::write_page(&result, page, &dir),
        })
    })
    .await
    .map_err(|e| ApiError::Internal(format!("the page's task failed: {e}")))?;
    let file = match written {
        Ok(file) => file,
        Err(PageError::Unrepresentable(message)) => {
            return Err(ApiError::bad_request(
                "format-unavailable",
                "No answer in this format",
                format!("this result cannot be written as Parquet: {message}"),
            ))
        }
        Err(PageError::Full { limit, scope }) => {
            return Err(ApiError::Query(QueryError::SpoolFull { limit, scope }))
        }
        Err(PageError::Internal(message)) => return Err(ApiError::Internal(message)),
    };
    let mut request = axum::http::Request::builder().method(axum::http::Method::GET);
    for name in [header::RANGE, header::IF_RANGE] {
        if let Some(v) = headers.get(&name) {
            request = request.header(name, v);
        }
    }
    let request = request
        .body(Body::empty())
        .map_err(|e| ApiError::Internal(format!("the page's request: {e}")))?;
    // The file is open once ServeFile answers: it stays readable even if
    // the result (and its pages) goes meanwhile.
    let response = tower_http::services::ServeFile::new(&file.path)
        .oneshot(request)
        .await
        .map_err(|e| ApiError::Internal(format!("sending the page: {e}")))?;
    if response.status() == StatusCode::NOT_FOUND {
        return Err(ApiError::Internal("the page's file is gone".into()));
    }
    Ok(response.map(Body::new))
}

/// A statement a request names: kept here, or (shared state) by another
/// replica.
pub(crate) enum Found {
    Local(Arc<Statement>),
    Remote(Row),
}

impl Found {
    /// The statement's instance (see [`views::StatementStatus::instance`]).
    pub(crate) fn instance(&self) -> String {
        match self {
            Found::Local(s) => s.running.instance.clone(),
            Found::Remote(row) => row.status["instance"].as_str().unwrap_or("").to_string(),
        }
    }

    /// The statement's owner (token name) and id.
    pub(crate) fn owner_and_id(&self) -> (Arc<str>, String) {
        match self {
            Found::Local(s) => (s.running.owner.clone(), s.running.id.clone()),
            Found::Remote(row) => (row.token.as_str().into(), row.id.clone()),
        }
    }
}

/// The caller's statement with this id (the admin's: any owner's, if one).
/// With shared state, the shared rows decide (a statement deleted through
/// another replica is gone here too), and one this replica keeps is
/// answered from its own, live, state.
pub(crate) async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Found, ApiError> {
    let owner = caller.owner();
    let Some(shared) = &state.statements.shared else {
        return visible_here(state, owner, id).map(Found::Local);
    };
    let mut rows = shared
        .find(owner, id)
        .await
        .map_err(ApiError::SharedState)?;
    match rows.len() {
        0 => Err(ApiError::NotFound(format!(
            "no statement with id {id} is yours to see"
        ))),
        1 => {
            let row = rows.remove(0);
            if row.replica == shared.replica {
                if let Some(s) = state.statements.find(Some(&row.token), id).pop() {
                    return Ok(Found::Local(s));
                }
            }
            Ok(Found::Remote(row))
        }
        n => Err(ApiError::Conflict {
            slug: "ambiguous-id",
            title: "Ambiguous id",
            detail: format!("{n} tokens have a statement with id {id}; ask with the owner's token"),
        }),
    }
}

/// The caller's statement with this id, in this process alone.
fn visible_here(
    state: &AppState,
    owner: Option<&str>,
    id: &str,
) -> Result<Arc<Statement>, ApiError> {
    let mut found = state.statements.find(owner, id);
    match found.len() {
        0 => Err(ApiError::NotFound(format!(
            "no statement with id {id} is yours to see"
        ))),
        1 => Ok(found.remove(0)),
        n => Err(ApiError::Conflict {
            slug: "ambiguous-id",
            title: "Ambiguous id",
            detail: format!("{n} tokens have a statement with id {id}; ask with the owner's token"),
        }),
    }
}

/// The statements the caller may see (its own; all for admin), oldest first.
#[utoipa::path(get, path = "/statements", tag = "statements",
    responses(
        (status = 200, description = "Kept statements", body = StatementList),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let owner = caller.owner();
    let local = state.statements.list(owner);
    let Some(shared) = &state.statements.shared else {
        let statements = local.iter().map(|s| status_of(&state, s)).collect();
        return Ok(Json(StatementList { statements }).into_response());
    };
    // Every replica's, from the shared rows; this replica's own live.
    let rows = shared.list(owner).await.map_err(ApiError::SharedState)?;
    let mut statements: Vec<serde_json::Value> = rows
        .iter()
        .map(|row| {
            let here = (row.replica == shared.replica)
                .then(|| {
                    local
                        .iter()
                        .find(|s| *s.running.owner == *row.token && s.running.id == row.id)
                })
                .flatten();
            match here {
                Some(s) => status_json(&state, s),
                None => remote_status(row),
            }
        })
        .collect();
    statements.sort_by_key(|s| s["submitted_at_ms"].as_u64().unwrap_or(0));
    Ok(Json(serde_json::json!({ "statements": statements })).into_response())
}

/// One statement's status.
#[utoipa::path(get, path = "/statements/{id}", tag = "statements",
    params(("id" = String, Path, description = "The statement id")),
    responses(
        (status = 200, description = "Its status", body = StatementStatus),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not kept, or not the caller's", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Several owners use this id (admin)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 410, description = "`statement-lost`: the replica that ran it stopped before it finished (shared state)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`shared-state-unavailable`: the shared state (DUCKGATE_STATE_DSN) cannot be reached", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn show(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    match visible(&state, &caller, &id).await? {
        Found::Local(s) => {
            let status = status_of(&state, &s);
            end_published(&state, &s, status.state).await?;
            let mut response = Json(status).into_response();
            decorate(response.headers_mut(), &Ident::of(&state, &s));
            Ok(response)
        }
        Found::Remote(row) if row.lost() => Err(lost(&row)),
        Found::Remote(row) => {
            let status = remote_status(&row);
            let mut response = Json(&status).into_response();
            decorate(response.headers_mut(), &Ident::of_status(&status));
            Ok(response)
        }
    }
}

/// A page of a finished statement's result, in any format.
///
/// `offset` (from 0) and `limit` choose the rows; without `limit`, every
/// row from `offset` on. Each page is a whole document of its format (JSON
/// with `columns` and the page's `row_count`; CSV with its header line;
/// Arrow a whole IPC stream; Parquet a whole file, written by DuckDB and
/// sent with its length), encoded exactly as `/query` encodes the same
/// rows. `Link: rel="next"` names the next page; `duckgate-total-rows` the
/// result's rows. A page is streamed as it is encoded, except for readers
/// of URLs: a signed link, a HEAD or a `Range` gets the page written to a
/// file first (kept with the result, the last 4 pages), with its
/// `Content-Length` and byte ranges, as polars 2 needs to read a CSV by URL.
#[utoipa::path(get, path = "/statements/{id}/result", tag = "statements",
    params(("id" = String, Path, description = "The statement id"), PageOptions),
    responses(
        (status = 200, description = "The page", content(
            (crate::api::query::QueryResult = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.apache.arrow.stream"),
            (Vec<u8> = "application/vnd.apache.parquet")
        ), headers(
            ("duckgate-total-rows" = u64, description = "Rows of the whole result"),
            ("Link" = String, description = "The next page, if any")
        )),
        (status = 206, description = "Part of a page served from a file: the byte range a `Range` header asked for. Parquet pages, and pages asked for with HEAD, a `Range` or a signed link, are files with `Content-Length` and `Accept-Ranges: bytes`", content(
            (crate::api::query::QueryResult = "application/json"),
            (String = "application/x-ndjson"),
            (String = "text/csv"),
            (Vec<u8> = "application/vnd.apache.arrow.stream"),
            (Vec<u8> = "application/vnd.apache.parquet")
        )),
        (status = 416, description = "A `Range` past the end of the page"),
        (status = 400, description = "Bad page options, an Arrow page of an INTERVAL Arrow cannot hold, or a Parquet page of a value Parquet cannot hold (`format-unavailable`)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not kept, or not the caller's", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 406, description = "No acceptable format", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Still running, failed (`statement-failed`, its problem in the detail and in its status), or cancelled", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 410, description = "Expired: the result was removed (`statement-expired`), `statement-lost`: the replica that ran it stopped before it finished, or `result-missing`: removed from the S3 spool underneath", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 422, description = "`value-too-large`: a value of the page past DUCKGATE_MAX_VALUE_BYTES", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 500, description = "`storage-error`: reading or writing the spool failed (the cause is in the gateway's log), or `internal`", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "`spool-refused`: the S3 spool refused the gateway", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`overloaded`, `spool-unavailable` (the S3 spool did not answer in time), or `shared-state-unavailable`: the shared state (DUCKGATE_STATE_DSN) cannot be reached", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 507, description = "A Parquet page's file passed a spool quota (`spool-quota-exceeded`), or the spool's disk is full (`spool-full`)", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn result(
    State(state): State<AppState>,
    caller: Caller,
    signed: Option<axum::Extension<crate::api::links::SignedInstance>>,
    Path(id): Path<String>,
    options: Result<Query<PageOptions>, axum::extract::rejection::QueryRejection>,
    method: axum::http::Method,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let options = crate::api::request::query_options(options)?;
    // A reader of a URL (a signed link; one that asks the length first with
    // HEAD, or for byte ranges: polars 2 needs both) gets the page as a
    // file, with its length and ranges; the rest stream it as it is
    // encoded.
    let as_file = signed.is_some()
        || method == axum::http::Method::HEAD
        || headers.contains_key(header::RANGE);
    let found = visible(&state, &caller, &id).await?;
    // A signed link reads the statement it was minted for, not a later one
    // that took its id.
    if let Some(axum::Extension(signed)) = &signed {
        if signed.0 != found.instance() {
            return Err(ApiError::NotFound(format!(
                "the signed URL was made for an earlier statement with id {id}, which is gone"
            )));
        }
    }
    let format = crate::api::negotiate::choose_format(options.format.as_deref(), &headers)?;
    let offset = match options.offset {
        Some(o) if o < 0 => {
            return Err(ApiError::bad_request(
                "invalid-offset",
                "Invalid offset",
                "offset must not be negative",
            ))
        }
        o => o.unwrap_or(0) as u64,
    };
    let limit = match options.limit {
        Some(l) if l <= 0 => {
            return Err(ApiError::bad_request(
                "invalid-limit",
                "Invalid limit",
                "limit must be positive",
            ))
        }
        l => l.map(|l| l as u64),
    };
    let page = Page {
        format,
        offset,
        limit,
    };
    let s = match found {
        Found::Local(s) => s,
        Found::Remote(row) => return remote_page(&state, &row, page, &headers, as_file).await,
    };
    let snap = s.snapshot(state.statements.settings.ttl);
    end_published(&state, &s, snap.state).await?;
    let result = match (snap.state, snap.result, snap.error) {
        (StatementState::Succeeded, Some(r), _) => r,
        (StatementState::Queued | StatementState::Running, _, _) => {
            return Err(ApiError::Conflict {
                slug: "statement-running",
                title: "Statement still running",
                detail: format!(
                    "statement {id} has not finished; poll GET /statements/{id} until its state is succeeded"
                ),
            })
        }
        (StatementState::Expired | StatementState::Lost, _, _)
        | (StatementState::Succeeded, None, _) => {
            return Err(ApiError::Gone(format!(
                "statement {id} finished longer ago than DUCKGATE_STATEMENT_TTL_MS; its result was removed"
            )))
        }
        (_, _, Some(QueryError::CancelledByRequest)) => {
            return Err(QueryError::CancelledByRequest.into())
        }
        (_, _, Some(e)) => {
            let problem = crate::api::error::problem_json_for_stream(&e);
            return Err(ApiError::Conflict {
                slug: "statement-failed",
                title: "Statement failed",
                detail: format!(
                    "statement {id} failed and has no result: {} ({}): {}",
                    problem["title"].as_str().unwrap_or("error"),
                    problem["status"],
                    problem["detail"].as_str().unwrap_or("")
                ),
            });
        }
        (_, _, None) => return Err(ApiError::Internal("a failed statement without an error".into())),
    };
    page_response(
        &state,
        &Ident::of(&state, &s),
        result,
        page,
        &headers,
        as_file,
    )
    .await
}

/// With shared state, a local statement's end is in it before an answer
/// shows the statement finished (`answered`, the state the answer was made
/// of): the client's next request may land on another replica, which must
/// not answer that it still runs (a page there was 409 `statement-running`
/// for the few milliseconds the end took to publish, seen by
/// `k6/run-soak --replicas 3`). Usually a no-op: the statement's own task
/// publishes its end at once.
async fn end_published(
    state: &AppState,
    s: &Statement,
    answered: StatementState,
) -> Result<(), ApiError> {
    let Some(shared) = &state.statements.shared else {
        return Ok(());
    };
    if matches!(answered, StatementState::Queued | StatementState::Running)
        || !s.claimed.load(std::sync::atomic::Ordering::SeqCst)
    {
        return Ok(());
    }
    // The final state is set just before `done` fires, with no await
    // between: publish only once it did (the published status is final then).
    if tokio::time::timeout(Duration::from_secs(1), s.done.cancelled())
        .await
        .is_err()
    {
        return Ok(());
    }
    crate::api::replicas::publish(state, shared, s)
        .await
        .map_err(ApiError::SharedState)
}

/// A page of another replica's statement, from the S3 spool.
async fn remote_page(
    state: &AppState,
    row: &Row,
    page: Page,
    headers: &HeaderMap,
    as_file: bool,
) -> Result<Response, ApiError> {
    let id = &row.id;
    if row.lost() {
        return Err(lost(row));
    }
    match row.state.as_str() {
        "queued" | "running" => Err(ApiError::Conflict {
            slug: "statement-running",
            title: "Statement still running",
            detail: format!(
                "statement {id} has not finished; poll GET /statements/{id} until its state is succeeded"
            ),
        }),
        "succeeded" if !row.expired && row.result.is_some() => {
            let result = crate::api::replicas::copy_of(state, row).await?;
            page_response(
                state,
                &Ident::of_status(&row.status),
                result,
                page,
                headers,
                as_file,
            )
            .await
        }
        "succeeded" | "expired" => Err(ApiError::Gone(format!(
            "statement {id} finished longer ago than DUCKGATE_STATEMENT_TTL_MS; its result was removed"
        ))),
        "cancelled" => Err(QueryError::CancelledByRequest.into()),
        _ => {
            let problem = &row.status["problem"];
            Err(ApiError::Conflict {
                slug: "statement-failed",
                title: "Statement failed",
                detail: format!(
                    "statement {id} failed and has no result: {} ({}): {}",
                    problem["title"].as_str().unwrap_or("error"),
                    problem["status"],
                    problem["detail"].as_str().unwrap_or("")
                ),
            })
        }
    }
}

/// Cancels a queued or running statement, or discards a finished one and
/// its result. Either way it is forgotten at once.
#[utoipa::path(delete, path = "/statements/{id}", tag = "statements",
    params(("id" = String, Path, description = "The statement id")),
    responses(
        (status = 200, description = "Cancelled or discarded", body = Discarded),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "Not kept, or not the caller's", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 409, description = "Several owners use this id (admin)", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "`shared-state-unavailable`: the shared state (DUCKGATE_STATE_DSN) cannot be reached", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn discard(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Discarded>, ApiError> {
    let found = visible(&state, &caller, &id).await?;
    // With shared state the row goes first: a statement of another replica
    // is stopped by its owner, which sees its row gone (within a second).
    let url = match (&state.statements.shared, &found) {
        (Some(shared), Found::Local(s)) => shared
            .forget(&s.running.owner, &id)
            .await
            .map_err(ApiError::SharedState)?,
        (Some(shared), Found::Remote(row)) => shared
            .forget(&row.token, &id)
            .await
            .map_err(ApiError::SharedState)?,
        (None, _) => None,
    };
    if let Some(url) = url {
        crate::api::replicas::remove_result(&state, &url).await;
    }
    let s = match found {
        Found::Local(s) => s,
        Found::Remote(row) => {
            let before = if row.lost() {
                StatementState::Lost
            } else {
                serde_json::from_value(serde_json::Value::String(
                    remote_status(&row)["state"]
                        .as_str()
                        .unwrap_or("queued")
                        .into(),
                ))
                .unwrap_or(StatementState::Queued)
            };
            return Ok(Json(Discarded {
                id,
                state: before,
                cancelled: !before.finished(),
            }));
        }
    };
    let before = s.snapshot(state.statements.settings.ttl).state;
    let cancelled = !before.finished();
    if cancelled {
        state.queries.cancel(&s.running);
    }
    state.statements.discard(&s);
    Ok(Json(Discarded {
        id,
        state: before,
        cancelled,
    }))
}
