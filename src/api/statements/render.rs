//! Rendering a statement's answers: 202 with where to poll, the headers
//! every statement answer carries, and a result page, streamed as it is
//! encoded or sent from a file with its length and byte ranges.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::api::error::ApiError;
use crate::api::query::{EPOCH_HEADER, QUERY_ID_HEADER, RETRIED_HEADER, STATEMENT_HEADER};
use crate::api::AppState;
use crate::encode::Format;
use crate::engine::QueryError;
use crate::statements::answer::Ident;
use crate::statements::pages::{self, Page};
use crate::statements::spool::SpoolResult;
use crate::statements::status::status_of;
use crate::statements::{Context, Statement};

use super::{STATE_HEADER, TOTAL_ROWS_HEADER};

/// 202: the statement runs; here is where to poll.
pub(super) fn accepted(ctx: &Context, statement: &Statement) -> Response {
    let status = status_of(&ctx.statements, ctx.db(), statement);
    let location = format!("/statements/{}", status.id);
    let mut response = (StatusCode::ACCEPTED, Json(status)).into_response();
    let h = response.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&location) {
        h.insert(header::LOCATION, v);
    }
    decorate(h, &Ident::of(&ctx.statements, statement));
    response
}

/// The id, state and credential headers every statement answer carries.
pub(super) fn decorate(h: &mut HeaderMap, ident: &Ident) {
    if let Ok(v) = HeaderValue::from_str(&ident.id) {
        h.insert(QUERY_ID_HEADER, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(EPOCH_HEADER, HeaderValue::from(ident.epoch));
}

/// A page of a finished statement's result: from a file with its length
/// and byte ranges (a Parquet page, one asked `as_file`, one already kept),
/// else encoded as it is sent.
pub(super) async fn page_response(
    state: &AppState,
    ident: &Ident,
    result: Arc<SpoolResult>,
    page: Page,
    headers: &HeaderMap,
    as_file: bool,
) -> Result<Response, ApiError> {
    if page.format == Format::Arrow {
        if let Some(column) = &result.arrow_refusal {
            return Err(crate::statements::Error::ArrowInterval(column.clone()).into());
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
fn streamed_page(state: &AppState, result: Arc<SpoolResult>, page: Page) -> Response {
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
    result: Arc<SpoolResult>,
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
            return Err(crate::statements::Error::FormatUnavailable(message).into())
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
