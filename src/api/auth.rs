//! Bearer tokens at the HTTP door: query tokens and OIDC JWTs open
//! `/query`, the admin token opens `/admin/...`, and neither opens the
//! other; `/queries` takes either (a query token sees its own queries, the
//! admin token all). Who a credential is decided by
//! [`crate::identity::Authenticator`], as for every door; this file only
//! reads the header and answers refusals in the API's problem format.
//! Tokens never reach a log line, only their names do.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;

use crate::api::error::ApiError;
use crate::api::AppState;
use crate::identity::{bearer_of, Denied, Identity};

fn bearer(parts: &Parts) -> Option<&[u8]> {
    bearer_of(
        parts
            .headers
            .get(axum::http::header::AUTHORIZATION)?
            .as_bytes(),
    )
}

fn failed(route: &'static str, reason: &'static str) {
    metrics::counter!("duckgate_auth_failures_total", "route" => route, "reason" => reason)
        .increment(1);
    tracing::warn!(route, reason, "authentication failed");
}

/// The identity of a request's bearer, or the API's refusal.
pub async fn identify(parts: &Parts, state: &AppState) -> Result<Identity, ApiError> {
    let authorization = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    Ok(state
        .identities
        .identify_authorization(authorization)
        .await?)
}

impl From<Denied> for ApiError {
    fn from(denied: Denied) -> Self {
        match denied {
            Denied::Missing => ApiError::Unauthorized {
                detail: crate::identity::MISSING_DETAIL,
            },
            Denied::Wrong => ApiError::Unauthorized {
                detail: crate::identity::WRONG_DETAIL,
            },
            Denied::Token(refusal) => ApiError::TokenRefused(refusal),
        }
    }
}

impl FromRequestParts<AppState> for Identity {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        identify(parts, state).await
    }
}

/// Who asks about running queries: the admin (every query) or a query
/// token's holder or an OIDC identity (its own).
pub enum Caller {
    /// The admin token.
    Admin,
    /// A query token's holder or an OIDC identity (`anonymous` when the
    /// gateway is anonymous).
    Owner(Identity),
}

impl Caller {
    /// Whether this caller may see and cancel a query of `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Owner(auth) => auth.name.as_ref() == owner,
        }
    }

    /// The owner whose things this caller sees; `None`: the admin, every
    /// owner's.
    pub fn owner(&self) -> Option<&str> {
        match self {
            Caller::Admin => None,
            Caller::Owner(auth) => Some(&auth.name),
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        // A signed result URL stands for its owner's token (GET of exactly
        // the path it was made for; see `api::links`).
        if bearer(parts).is_none() {
            if let Some(signed) = crate::api::links::signed_caller(parts, state) {
                return signed;
            }
        }
        if let Some(given) = bearer(parts) {
            if state.identities.directory().tokens.is_admin(given) {
                tracing::Span::current().record("identity", "admin");
                return Ok(Caller::Admin);
            }
        }
        identify(parts, state).await.map(Caller::Owner)
    }
}

/// Proof that the request may use the admin API.
pub struct AdminAuth;

impl FromRequestParts<AppState> for AdminAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let directory = state.identities.directory();
        if directory.tokens.admin.is_none() {
            return Err(ApiError::AdminDisabled);
        }
        match bearer(parts) {
            None => {
                failed("admin", "missing");
                Err(ApiError::Unauthorized {
                    detail: "the admin API needs Authorization: Bearer <DUCKGATE_ADMIN_TOKEN>",
                })
            }
            Some(given) if directory.tokens.is_admin(given) => {
                tracing::Span::current().record("identity", "admin");
                Ok(AdminAuth)
            }
            Some(_) => {
                failed("admin", "wrong");
                Err(ApiError::Unauthorized {
                    detail: "the bearer token is not the admin token",
                })
            }
        }
    }
}
