//! Async statements: `POST /statements` submits (and waits up to `wait_ms`
//! for the result), `GET /statements/{id}` polls, `GET
//! /statements/{id}/result` pages the spooled result in any format, `DELETE
//! /statements/{id}` cancels or discards. A query token sees its own
//! statements; the admin token sees all. Another token's statement is
//! answered exactly like one that does not exist.

//!
//! The statement domain (submission, admission, replicas, status, the one
//! answer path of local and remote results) is [`crate::statements`];
//! these handlers parse the request, call it, and render what it returns.

use std::time::Instant;

use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::query::QUERY_ID_HEADER;
use crate::api::request::{read_request, QueryOptions};
use crate::api::AppState;
use crate::identity::Identity;
use crate::statements::answer::{self, Found, Ident};
use crate::statements::pages::Page;
use crate::statements::submit::Submitted;

mod render;
mod views;

pub use crate::statements::status::{Discarded, StatementList, StatementStatus};
use render::{accepted, decorate, page_response};
pub use views::PageOptions;

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
#[utoipa::path(post, path = "/statements", operation_id = "submit_statement", tag = "statements",
    params(QueryOptions,
        ("wait_ms" = Option<i64>, Query, minimum = 0, description = "How long to wait for the finished result before answering 202 with the statement's status (milliseconds, default 10000, clamped to the gateway's maximum; 0 answers at once)"),
        ("duckgate-query-id" = Option<String>, Header, pattern = r"^[A-Za-z0-9._-]{1,128}$", description = "The statement's id (1-128 of A-Za-z0-9._-, unique among the token's statements and running queries); generated when absent")),
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
    auth: Identity,
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
    auth: &Identity,
    id: &str,
    started: Instant,
    options: Result<Query<QueryOptions>, axum::extract::rejection::QueryRejection>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let request = read_request(state, options, &headers, body).await?;
    if request.arrow_compression.is_some() {
        // Pages are kept and served by format, offset and limit; a codec
        // would be one more key. Refused rather than ignored.
        return Err(ApiError::bad_request(
            "invalid-option",
            "Option not accepted here",
            "arrow_compression belongs to /query; statement pages are Arrow uncompressed",
        ));
    }
    let core = state.core();
    let submitted = core
        .submit(
            auth,
            crate::core::Request {
                sql: request.sql,
                params: request.params,
                timeout_ms: request.timeout_ms,
                max_rows: request.max_rows,
                read_only: request.read_only,
                id: Some(id.to_string()),
                client_chose_id: headers.contains_key(QUERY_ID_HEADER),
                door: "statement",
                started,
            },
            request.wait_ms,
        )
        .await?;
    let ctx = core.ctx;
    match submitted {
        Submitted::Finished(statement, result) => {
            let page = Page {
                format: request.format,
                offset: 0,
                limit: None,
            };
            let ident = Ident::of(&ctx.statements, &statement);
            // A POST's answer is whole: no byte ranges.
            page_response(state, &ident, result, page, &HeaderMap::new(), false).await
        }
        Submitted::Running(statement) => Ok(accepted(&ctx, &statement)),
    }
}

/// The statements the caller may see (its own; all for admin), oldest first.
#[utoipa::path(get, path = "/statements", operation_id = "list_statements", tag = "statements",
    responses(
        (status = 200, description = "Kept statements", body = StatementList),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn list(State(state): State<AppState>, caller: Caller) -> Result<Response, ApiError> {
    let listing = answer::list(&state.statements_context(), caller.owner()).await?;
    Ok(Json(listing).into_response())
}

/// One statement's status.
#[utoipa::path(get, path = "/statements/{id}", operation_id = "show_statement", tag = "statements",
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
    let ctx = state.statements_context();
    let found = answer::find(&ctx, caller.owner(), &id).await?;
    let (status, ident) = answer::status(&ctx, found).await?;
    let mut response = Json(status).into_response();
    decorate(response.headers_mut(), &ident);
    Ok(response)
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
#[utoipa::path(get, path = "/statements/{id}/result", operation_id = "statement_result", tag = "statements",
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
    let ctx = state.statements_context();
    let found = answer::find(&ctx, caller.owner(), &id).await?;
    // A signed link reads the statement it was minted for, not a later one
    // that took its id.
    if let Some(axum::Extension(signed)) = &signed {
        if signed.0 != found.instance() {
            return Err(ApiError::NotFound(format!(
                "the signed URL was made for an earlier statement with id {id}, which is gone"
            )));
        }
    }
    let page = views::page(&options, &headers)?;
    let (ident, result) = answer::result(&ctx, found).await?;
    page_response(&state, &ident, result, page, &headers, as_file).await
}

/// Cancels a queued or running statement, or discards a finished one and
/// its result. Either way it is forgotten at once.
#[utoipa::path(delete, path = "/statements/{id}", operation_id = "discard_statement", tag = "statements",
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
    let ctx = state.statements_context();
    let found = answer::find(&ctx, caller.owner(), &id).await?;
    Ok(Json(answer::discard(&ctx, found, id).await?))
}

/// The caller's statement with this id (for signed links).
pub(crate) async fn visible(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Found, ApiError> {
    Ok(answer::find(&state.statements_context(), caller.owner(), id).await?)
}
