//! One route per file format: `GET /query/{format}` and
//! `GET /statements/{id}/result/{format}` answer what `GET /query` and
//! `GET /statements/{id}/result` answer with `format={format}`.
//!
//! Why they exist: an OpenAPI operation whose answer may be JSON or a file
//! is read by generated clients as its first media type (JSON), so a CSV or
//! Parquet answer failed to decode in every generated client. An operation
//! per format has one media type, declared as bytes, which generators hand
//! back as bytes. The OpenAPI document lists each of them (`/query/csv`,
//! ...) from the code's formats, see [`crate::api::docs`].

use axum::extract::{FromRequestParts, Path, Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Response};

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::links::SignedInstance;
use crate::api::request::UrlQuery;
use crate::api::statements::PageOptions;
use crate::api::AppState;
use crate::encode::Format;
use crate::identity::Identity;

/// The formats that have a route of their own: every format but JSON,
/// whose answer the plain routes document as their model.
pub fn file_formats() -> impl Iterator<Item = Format> {
    Format::ALL.into_iter().filter(|f| *f != Format::Json)
}

/// The format a path segment names, if it has a route of its own.
fn format_of(segment: &str) -> Result<Format, ApiError> {
    file_formats()
        .find(|f| f.name() == segment)
        .ok_or_else(|| ApiError::NotFound("no such route".into()))
}

/// A `format` option that the path already fixes: absent, or the same.
fn same_format(asked: Option<&str>, path: Format) -> Result<(), ApiError> {
    match asked.map(Format::from_name) {
        None => Ok(()),
        Some(Some(f)) if f == path => Ok(()),
        Some(_) => Err(ApiError::bad_request(
            "format-conflict",
            "Conflicting formats",
            format!(
                "the path asks for {}, the `format` option for another: leave the option out",
                path.name()
            ),
        )),
    }
}

/// `GET /query`'s options with the path's format in them.
type UrlOptions = Result<Query<UrlQuery>, axum::extract::rejection::QueryRejection>;

/// `options` with `format` fixed by the path, or why they are refused.
fn fixed(format: &str, options: UrlOptions) -> Result<UrlOptions, ApiError> {
    let format = format_of(format)?;
    match options {
        Ok(Query(mut o)) => {
            same_format(o.format.as_deref(), format)?;
            o.format = Some(format.name().to_string());
            Ok(Ok(Query(o)))
        }
        Err(e) => Ok(Err(e)),
    }
}

/// `GET /query/{format}`: `GET /query` in one format.
pub async fn query_as(
    State(state): State<AppState>,
    auth: Identity,
    Path(format): Path<String>,
    options: UrlOptions,
    headers: HeaderMap,
) -> Response {
    match fixed(&format, options) {
        Ok(options) => crate::api::query::query_by_url(State(state), auth, options, headers).await,
        Err(refused) => refused.into_response(),
    }
}

/// `HEAD /query/{format}`: `HEAD /query` in one format; checks the request
/// without running it (a reader of a URL asks first, then reads).
pub async fn query_as_head(
    State(state): State<AppState>,
    auth: Identity,
    Path(format): Path<String>,
    options: UrlOptions,
    headers: HeaderMap,
) -> Response {
    match fixed(&format, options) {
        Ok(options) => {
            crate::api::query::query_by_url_head(State(state), auth, options, headers).await
        }
        Err(refused) => refused.into_response(),
    }
}

/// `GET /statements/{id}/result/{format}`: a page in one format. A signed
/// link holds here as on the plain route (its signature covers the
/// statement, not the format).
pub async fn result_as(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    let (mut parts, _) = request.into_parts();
    let Path((id, format)) = Path::<(String, String)>::from_request_parts(&mut parts, &state)
        .await
        .map_err(|e| ApiError::NotFound(e.body_text()))?;
    let format = format_of(&format)?;
    let caller = Caller::from_request_parts(&mut parts, &state).await?;
    let options = match Query::<PageOptions>::try_from_uri(&parts.uri) {
        Ok(Query(mut o)) => {
            same_format(o.format.as_deref(), format)?;
            o.format = Some(format.name().to_string());
            Ok(Query(o))
        }
        Err(e) => Err(e),
    };
    let signed = parts
        .extensions
        .get::<SignedInstance>()
        .cloned()
        .map(axum::Extension);
    let method: Method = parts.method.clone();
    crate::api::statements::result(
        State(state),
        caller,
        signed,
        Path(id),
        options,
        method,
        parts.headers,
    )
    .await
}

/// The plain route a per-format path stands for: `/query/csv` is
/// `/query`, `/statements/a/result/csv` is `/statements/a/result`; any
/// other path is itself.
pub fn plain_path(path: &str) -> &str {
    if let Some((base, last)) = path.rsplit_once('/') {
        let fixed =
            base == "/query" || base.ends_with("/result") && base.starts_with("/statements/");
        if fixed && file_formats().any(|f| f.name() == last) {
            return base;
        }
    }
    path
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_per_format_path_stands_for_its_plain_route() {
        assert_eq!(plain_path("/query/csv"), "/query");
        assert_eq!(
            plain_path("/statements/a/result/parquet"),
            "/statements/a/result"
        );
        assert_eq!(plain_path("/statements/a/result"), "/statements/a/result");
        assert_eq!(
            plain_path("/statements/a/result/json"),
            "/statements/a/result/json"
        );
        assert_eq!(
            plain_path("/statements/a/links/csv"),
            "/statements/a/links/csv"
        );
        assert_eq!(plain_path("/query"), "/query");
    }
}
