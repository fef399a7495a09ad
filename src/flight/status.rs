//! The gateway's problems as gRPC statuses: the code from the problem's HTTP
//! status (and slug, where one HTTP status covers two gRPC meanings), the
//! message `<title>: <detail>`, the slug in the `duckgate-problem` metadata
//! and, where a retry can succeed, HTTP's `Retry-After` seconds in the
//! `retry-after` metadata.
//! The problem's text is what the HTTP answer says, so nothing reaches a
//! Flight client that an HTTP client would not see (never a token, never
//! the cause of a 500).

use tonic::{Code, Status};

use crate::engine::QueryError;
use crate::problems::Problem;

/// The gRPC code of a problem.
pub fn code_of(problem: &Problem) -> Code {
    match (problem.status, problem.slug()) {
        (400, _) | (406, _) | (415, _) => Code::InvalidArgument,
        (401, _) => Code::Unauthenticated,
        (403, _) => Code::PermissionDenied,
        (404, _) | (410, _) => Code::NotFound,
        (408, _) | (504, _) => Code::DeadlineExceeded,
        (409, "query-cancelled") => Code::Cancelled,
        (409, _) => Code::AlreadyExists,
        (413, _) | (422, _) | (429, _) | (507, _) => Code::ResourceExhausted,
        // The pool is full or sheds: the client's load, worth a retry.
        (503, "pool-exhausted") | (503, "overloaded") | (503, "load-shed") => {
            Code::ResourceExhausted
        }
        (503, _) | (502, _) => Code::Unavailable,
        _ => Code::Internal,
    }
}

/// The status of `problem`, naming the query (`query_id`) where one ran.
pub fn of_problem(problem: &Problem, query_id: Option<&str>) -> Status {
    let mut message = format!("{}: {}", problem.title, problem.detail);
    if let Some(excerpt) = &problem.excerpt {
        message.push('\n');
        message.push_str(excerpt);
    }
    if let Some(id) = query_id {
        message.push_str(&format!(" (query id {id})"));
    }
    let mut status = Status::new(code_of(problem), message);
    if let Ok(v) = problem.slug().parse() {
        status.metadata_mut().insert("duckgate-problem", v);
    }
    if let Some(secs) = problem.retry_after {
        status.metadata_mut().insert("retry-after", secs.into());
    }
    if let Some(id) = query_id.and_then(|i| i.parse().ok()) {
        status.metadata_mut().insert("duckgate-query-id", id);
    }
    status
}

/// The status of the core's error (its cause logged where it is the
/// gateway's fault, never sent).
pub fn of_core(e: &crate::core::Error, query_id: Option<&str>) -> Status {
    if let crate::core::Error::Internal(cause) | crate::core::Error::SharedState(cause) = e {
        tracing::error!(error = %cause, "Flight SQL call failed");
    }
    of_problem(&e.problem(), query_id)
}

/// The status of a query's failure.
pub fn of_query(e: QueryError, query_id: Option<&str>) -> Status {
    of_core(&crate::core::Error::Query(e), query_id)
}

/// A status for a request that is malformed (the client's mistake).
pub fn invalid(detail: impl Into<String>) -> Status {
    Status::invalid_argument(detail.into())
}
