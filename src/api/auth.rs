//! Bearer tokens: query tokens open `/query`, the admin token opens
//! `/admin/...`, and neither opens the other. Comparisons take constant time;
//! tokens never reach a log line.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::api::AppState;

/// The configured tokens.
pub struct Tokens {
    /// Empty means anonymous queries are allowed (start-up checked that the
    /// address or `--allow-anonymous` permits it).
    pub query: Vec<SecretString>,
    /// `None`: the admin API is off.
    pub admin: Option<SecretString>,
}

/// Compares `given` with every token, without an early exit.
fn matches_any(given: &[u8], tokens: &[SecretString]) -> bool {
    let mut found = subtle::Choice::from(0u8);
    for t in tokens {
        found |= given.ct_eq(t.expose_secret().as_bytes());
    }
    found.into()
}

fn bearer(parts: &Parts) -> Option<&[u8]> {
    let value = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)?
        .as_bytes();
    let rest = value
        .strip_prefix(b"Bearer ")
        .or_else(|| value.strip_prefix(b"bearer "))?;
    Some(rest.trim_ascii())
}

fn failed(route: &'static str, reason: &'static str) {
    metrics::counter!("duckgate_auth_failures_total", "route" => route, "reason" => reason)
        .increment(1);
    tracing::warn!(route, reason, "authentication failed");
}

/// Proof that the request may run queries.
pub struct QueryAuth;

impl FromRequestParts<AppState> for QueryAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tokens = &state.tokens.query;
        if tokens.is_empty() {
            return Ok(QueryAuth);
        }
        match bearer(parts) {
            None => {
                failed("query", "missing");
                Err(ApiError::Unauthorized {
                    detail: "a bearer token is required: Authorization: Bearer <token>",
                })
            }
            Some(given) if matches_any(given, tokens) => Ok(QueryAuth),
            Some(_) => {
                failed("query", "wrong");
                Err(ApiError::Unauthorized {
                    detail: "the bearer token is not valid for queries",
                })
            }
        }
    }
}

/// Proof that the request may use the admin API.
pub struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let Some(admin) = &state.tokens.admin else {
            return Err(ApiError::AdminDisabled);
        };
        match bearer(parts) {
            None => {
                failed("admin", "missing");
                Err(ApiError::Unauthorized {
                    detail: "the admin API needs Authorization: Bearer <DUCKGATE_ADMIN_TOKEN>",
                })
            }
            Some(given) if matches_any(given, std::slice::from_ref(admin)) => Ok(AdminAuth),
            Some(_) => {
                failed("admin", "wrong");
                Err(ApiError::Unauthorized {
                    detail: "the bearer token is not the admin token",
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_match() {
        let tokens = vec![
            SecretString::from("alpha-token".to_string()),
            SecretString::from("beta".to_string()),
        ];
        assert!(matches_any(b"beta", &tokens));
        assert!(matches_any(b"alpha-token", &tokens));
        assert!(!matches_any(b"alpha", &tokens));
        assert!(!matches_any(b"", &tokens));
    }
}
