//! Content negotiation: which result format a request asks for, by its
//! `format` option or its `Accept` header.

use axum::http::{header, HeaderMap};

use crate::api::error::ApiError;
use crate::encode::Format;

/// The format an `Accept` header asks for. `Ok(None)` when it accepts
/// anything; `Err` when it accepts nothing we produce.
pub fn format_from_accept(accept: &str) -> Result<Option<Format>, NotAcceptable> {
    let mut best: Option<(f32, Option<Format>)> = None;
    for part in accept.split(',') {
        let mut pieces = part.split(';');
        let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = pieces
            .filter_map(|p| p.trim().strip_prefix("q="))
            .find_map(|q| q.trim().parse::<f32>().ok())
            .unwrap_or(1.0);
        if q <= 0.0 {
            continue;
        }
        let format = match media.as_str() {
            "application/json" | "application/problem+json" => Some(Format::Json),
            "application/x-ndjson" | "application/ndjson" | "application/jsonl" => {
                Some(Format::Ndjson)
            }
            "text/csv" => Some(Format::Csv),
            "application/vnd.apache.arrow.stream" => Some(Format::Arrow),
            "application/vnd.apache.parquet" | "application/x-parquet" => Some(Format::Parquet),
            "*/*" | "application/*" | "text/*" => None,
            _ => continue,
        };
        if best.as_ref().is_none_or(|(bq, _)| q > *bq) {
            best = Some((q, format));
        }
    }
    match best {
        Some((_, f)) => Ok(f),
        None if accept.trim().is_empty() => Ok(None),
        None => Err(NotAcceptable),
    }
}

/// An `Accept` header that allows none of the result formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAcceptable;

/// The format a request asks for: `explicit` (the `format` option) if
/// given, else the `Accept` header's, else JSON.
pub(crate) fn choose_format(
    explicit: Option<&str>,
    headers: &HeaderMap,
) -> Result<Format, ApiError> {
    if let Some(name) = explicit {
        return Format::from_name(name).ok_or_else(|| {
            ApiError::bad_request(
                "unknown-format",
                "Unknown format",
                format!("format `{name}` is not one of json, ndjson, csv, arrow, parquet"),
            )
        });
    }
    match headers.get(header::ACCEPT).map(|v| v.to_str()) {
        None => Ok(Format::Json),
        Some(Err(_)) => Err(ApiError::NotAcceptable(
            "the Accept header is not readable".into(),
        )),
        Some(Ok(accept)) => match format_from_accept(accept) {
            Ok(Some(f)) => Ok(f),
            Ok(None) => Ok(Format::Json),
            Err(_) => Err(ApiError::NotAcceptable(format!(
                "nothing in `{accept}` is a result format"
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_negotiation() {
        assert_eq!(format_from_accept("text/csv"), Ok(Some(Format::Csv)));
        assert_eq!(format_from_accept("*/*"), Ok(None));
        assert_eq!(
            format_from_accept("application/json;q=0.5, application/vnd.apache.arrow.stream"),
            Ok(Some(Format::Arrow))
        );
        assert_eq!(format_from_accept("image/png"), Err(NotAcceptable));
        assert_eq!(
            format_from_accept("application/vnd.apache.parquet"),
            Ok(Some(Format::Parquet))
        );
    }
}
