//! A Flight SQL call's options: `POST /query`'s `timeout_ms` and
//! `max_rows`, sent as call headers (gRPC metadata of the same names):
//! ADBC's `adbc.flight.sql.rpc.call_header.timeout_ms`, a JDBC URL's
//! `&timeout_ms=5000` (the Flight SQL JDBC driver sends the URL's unknown
//! parameters as headers). Bounds and meaning are HTTP's: the time limit is
//! clamped to `DUCKGATE_MAX_QUERY_TIMEOUT_MS` and runs from the call that
//! starts the statement to the end of its `DoGet`; `max_rows` is the
//! client's own cut, a clean end (the server's caps stay errors).

use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::flight::status;

/// What a call asked for ([`crate::core::answer::Options`]); `None`: the
/// gateway's default.
pub use crate::core::answer::Options as CallOptions;

impl CallOptions {
    /// The options in `metadata`; a value that is not a positive integer is
    /// `INVALID_ARGUMENT` with HTTP's slug (`invalid-timeout`,
    /// `invalid-max-rows`).
    pub fn of(metadata: &MetadataMap) -> Result<CallOptions, Status> {
        let positive = |name: &str, slug: &'static str, title: &'static str| {
            let Some(v) = metadata.get(name) else {
                return Ok(None);
            };
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .filter(|&v| v > 0)
                .map(Some)
                .ok_or_else(|| {
                    status::of_problem(
                        &crate::problems::Problem::with_slug(
                            &crate::problems::kind::BAD_REQUEST,
                            slug,
                            title,
                            format!("the {name} header must be a positive integer"),
                        ),
                        None,
                    )
                })
        };
        Ok(CallOptions {
            timeout_ms: positive("timeout_ms", "invalid-timeout", "Invalid timeout")?,
            max_rows: positive("max_rows", "invalid-max-rows", "Invalid row limit")?,
        })
    }
}
