//! The options of a result page, as the query string gives them.

use axum::http::HeaderMap;
use serde::Deserialize;

use crate::api::error::ApiError;
use crate::statements::pages::Page;

/// Which rows of a result, in which format.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageOptions {
    /// The page's format; else the Accept header decides.
    #[param(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// The first row, from 0.
    #[param(minimum = 0)]
    pub offset: Option<i64>,
    /// Rows at most; absent: to the end.
    #[param(minimum = 1)]
    pub limit: Option<i64>,
    /// Signed URL (`POST /statements/{id}/links`): when it stops holding,
    /// Unix seconds. With `owner` and `sig`, stands for the bearer token.
    pub expires: Option<String>,
    /// Signed URL: the owner token's name.
    pub owner: Option<String>,
    /// Signed URL: the statement it was minted for (a later statement of
    /// the same id does not inherit the link).
    pub instance: Option<String>,
    /// Signed URL: its signature.
    pub sig: Option<String>,
}

/// The page `options` (and, without `format`, the Accept header) ask for.
pub(super) fn page(options: &PageOptions, headers: &HeaderMap) -> Result<Page, ApiError> {
    let format = crate::api::negotiate::choose_format(options.format.as_deref(), headers)?;
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
    Ok(Page {
        format,
        offset,
        limit,
    })
}
