//! Bearer tokens: query tokens open `/query`, the admin token opens
//! `/admin/...`, and neither opens the other; `/queries` takes either (a
//! query token sees its own queries, the admin token all). Comparisons take
//! constant time; tokens never reach a log line, only their names do.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use secrecy::{ExposeSecret, SecretString};
use subtle::ConstantTimeEq;

use crate::api::error::ApiError;
use crate::api::AppState;

/// A query token and the name lists, logs and metrics show for it.
pub struct NamedToken {
    /// The token's name: the one given as `name:token`, else `token-<position>`.
    pub name: Arc<str>,
    /// The token itself.
    pub secret: SecretString,
}

impl NamedToken {
    /// `name:token` names a token (a name is 1-64 of `A-Za-z0-9._-`); a bare
    /// token is named by its place in the configured list (`token-1`,
    /// `token-2`, ...). Not by a hash of it: query tokens have no minimum
    /// length, and a hash in every log line would let anyone who reads the
    /// logs test guesses of a short token offline.
    pub fn parse(text: &str, position: usize) -> Self {
        if let Some((name, secret)) = text.split_once(':') {
            if crate::engine::queries::valid_id(name) && name.len() <= 64 && !secret.is_empty() {
                return Self {
                    name: name.into(),
                    secret: SecretString::from(secret.to_string()),
                };
            }
        }
        Self {
            name: format!("token-{position}").into(),
            secret: SecretString::from(text.to_string()),
        }
    }
}

/// The configured tokens.
pub struct Tokens {
    /// Empty means anonymous queries are allowed (start-up checked that the
    /// address or `--allow-anonymous` permits it).
    pub query: Vec<NamedToken>,
    /// `None`: the admin API is off.
    pub admin: Option<SecretString>,
    /// Signs and checks result URLs that need no header (`api::links`).
    pub signer: crate::api::links::UrlSigner,
}

/// Compares `given` with every token, without an early exit.
fn matches_any(given: &[u8], tokens: &[SecretString]) -> bool {
    let mut found = subtle::Choice::from(0u8);
    for t in tokens {
        found |= given.ct_eq(t.expose_secret().as_bytes());
    }
    found.into()
}

/// The index of the query token `given` is, compared with every token
/// without an early exit.
fn which_token(given: &[u8], tokens: &[NamedToken]) -> Option<usize> {
    use subtle::ConditionallySelectable;
    let mut found = subtle::Choice::from(0u8);
    let mut index = 0u32;
    for (i, t) in tokens.iter().enumerate() {
        let eq = given.ct_eq(t.secret.expose_secret().as_bytes());
        index.conditional_assign(&(i as u32), eq);
        found |= eq;
    }
    bool::from(found).then_some(index as usize)
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

/// Proof that the request may run queries, and whose token it is.
pub struct QueryAuth {
    /// The token's name (`anonymous` when no tokens are configured).
    pub name: Arc<str>,
}

impl FromRequestParts<AppState> for QueryAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let tokens = &state.tokens.query;
        if tokens.is_empty() {
            return Ok(QueryAuth {
                name: "anonymous".into(),
            });
        }
        match bearer(parts) {
            None => {
                failed("query", "missing");
                Err(ApiError::Unauthorized {
                    detail: "a bearer token is required: Authorization: Bearer <token>",
                })
            }
            Some(given) => match which_token(given, tokens) {
                Some(i) => Ok(QueryAuth {
                    name: tokens[i].name.clone(),
                }),
                None => {
                    failed("query", "wrong");
                    Err(ApiError::Unauthorized {
                        detail: "the bearer token is not valid for queries",
                    })
                }
            },
        }
    }
}

/// Who asks about running queries: the admin (every query) or a query
/// token's holder (its own).
pub enum Caller {
    /// The admin token.
    Admin,
    /// A query token, by its name (`anonymous` when no tokens are configured).
    Owner(Arc<str>),
}

impl Caller {
    /// Whether this caller may see and cancel a query of `owner`.
    pub fn may_see(&self, owner: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Owner(name) => name.as_ref() == owner,
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
        if let (Some(admin), Some(given)) = (&state.tokens.admin, bearer(parts)) {
            if matches_any(given, std::slice::from_ref(admin)) {
                return Ok(Caller::Admin);
            }
        }
        match QueryAuth::from_request_parts(parts, state).await {
            Ok(q) => Ok(Caller::Owner(q.name)),
            Err(e) => Err(e),
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
