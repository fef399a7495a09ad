//! Signed result URLs: for clients that cannot send an `Authorization`
//! header (polars, a browser link, a BI tool), the owner of a statement
//! mints a URL for its result pages that needs no header until it expires.
//!
//! The URL carries its expiry, the owner token's *name*, the statement's
//! instance (a random value of the statement it was minted for, so a later
//! statement that takes the id does not inherit it) and an HMAC-SHA256 over
//! the method, path, expiry, name and instance, keyed by the gateway's URL key
//! (`DUCKGATE_URL_SIGNING_KEY_FILE`, shared by every replica; a random key
//! per process when unset). Never the token itself: a leaked URL reads one
//! statement's result until it expires, nothing else. A signature is checked
//! only for a `GET` of exactly the path it was made for.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::extract::{Path, Query, State};
use axum::http::request::Parts;
use axum::http::{header, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};

use crate::api::auth::Caller;
use crate::api::error::ApiError;
use crate::api::AppState;

pub use crate::identity::signer::{UrlSigner, MAX_TTL};
/// A signed URL's lifetime when the request names none.
pub const DEFAULT_TTL: Duration = Duration::from_secs(15 * 60);

/// The signed-URL parameters of a request's query string, if it has any.
#[derive(Debug, Default, Deserialize)]
struct Signed {
    expires: Option<String>,
    owner: Option<String>,
    instance: Option<String>,
    sig: Option<String>,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The statement instance a signed URL was minted for (a request
/// extension): the result handler reads only that statement.
#[derive(Debug, Clone)]
pub struct SignedInstance(pub String);

/// The caller a signed URL stands for: `None` when the request carries no
/// signature; an error when it carries one that does not hold. A URL that
/// holds leaves its statement instance in the request's extensions.
pub(crate) fn signed_caller(
    parts: &mut Parts,
    state: &AppState,
) -> Option<Result<Caller, ApiError>> {
    let signed: Signed = serde_urlencoded::from_str(parts.uri.query()?).ok()?;
    let sig = signed.sig?;
    let refuse = |detail: &'static str| {
        metrics::counter!("duckgate_auth_failures_total", "route" => "query", "reason" => "signature")
            .increment(1);
        tracing::warn!(
            route = "query",
            reason = "signature",
            "authentication failed"
        );
        Some(Err(ApiError::Unauthorized { detail }))
    };
    let (Some(expires), Some(owner), Some(instance)) =
        (signed.expires, signed.owner, signed.instance)
    else {
        return refuse("a signed URL needs expires, owner, instance and sig");
    };
    let Ok(expires) = expires.parse::<u64>() else {
        return refuse("the signed URL's expiry is not a number");
    };
    if parts.method != Method::GET && parts.method != Method::HEAD {
        return refuse("a signed URL is for GET only");
    }
    let directory = state.identities.directory();
    if !directory.signer.verify(
        crate::api::formats::plain_path(parts.uri.path()),
        expires,
        &owner,
        &instance,
        &sig,
    ) {
        return refuse("the URL's signature does not hold for this path");
    }
    if expires < now_secs() {
        return refuse("the signed URL has expired; mint another with POST /statements/{id}/links");
    }
    // The owner must still hold a token: removing it revokes its URLs.
    let current = state.identities.still_named(&owner);
    parts.extensions.insert(SignedInstance(instance));
    match current {
        Some(identity) => {
            tracing::Span::current().record("identity", format!("{} (signed link)", identity.name));
            Some(Ok(Caller::Owner(identity)))
        }
        None => refuse("the signed URL's token is no longer configured"),
    }
}

/// What a signed URL is asked for.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LinkOptions {
    /// The format the URL asks for (`json`, `ndjson`, `csv`, `arrow`); the
    /// reader may change it, the signature covers the statement only.
    #[param(value_type = Option<crate::api::query::FormatSchema>)]
    pub format: Option<String>,
    /// Seconds the URL holds, 1 to 86400 (default 900).
    #[param(minimum = 1, maximum = 86400)]
    pub expires_in_s: Option<i64>,
}

/// A signed result URL.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SignedLink {
    /// The URL, absolute by the request's `Host` (and `X-Forwarded-Proto`).
    pub url: String,
    /// The same URL's path and query, for clients that know the base.
    pub path: String,
    /// When it stops holding, Unix seconds.
    pub expires_at: u64,
}

/// Mints a URL for a statement's result pages that needs no token header
/// until it expires.
///
/// For readers that cannot send `Authorization` (polars, a browser link, a
/// BI tool). The URL carries an HMAC over its path, expiry and the owner
/// token's name (never the token); it reads this statement's result and
/// nothing else, and stops at its expiry, at the statement's, or when the
/// owner's token is removed. URLs land in proxies' access logs: keep the
/// lifetime short. The gateway logs neither SQL nor signatures.
#[utoipa::path(post, path = "/statements/{id}/links", operation_id = "mint_link", tag = "statements",
    params(("id" = String, Path, description = "The statement's id"), LinkOptions),
    responses(
        (status = 201, description = "A signed URL", body = SignedLink),
        (status = 400, description = "Invalid options", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such statement of this token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn mint(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    options: Result<Query<LinkOptions>, axum::extract::rejection::QueryRejection>,
    headers: axum::http::HeaderMap,
) -> Result<Response, ApiError> {
    let Query(options) = options.map_err(|e| {
        ApiError::bad_request(
            "invalid-query-string",
            "Invalid query string",
            e.body_text(),
        )
    })?;
    let ttl = match options.expires_in_s {
        None => DEFAULT_TTL,
        Some(s) if s >= 1 && s as u64 <= MAX_TTL.as_secs() => Duration::from_secs(s as u64),
        Some(_) => {
            return Err(ApiError::bad_request(
                "invalid-expiry",
                "Invalid expiry",
                format!("expires_in_s must be 1 to {}", MAX_TTL.as_secs()),
            ))
        }
    };
    let format = match options.format.as_deref() {
        None => None,
        Some(f) => Some(crate::encode::Format::from_name(f).ok_or_else(|| {
            ApiError::bad_request(
                "unknown-format",
                "Unknown format",
                format!("format `{f}` is not one of json, ndjson, csv, arrow, parquet"),
            )
        })?),
    };
    let found = crate::api::statements::visible(&state, &caller, &id).await?;
    let instance = found.instance();
    let (owner, id) = found.owner_and_id();
    let path = format!("/statements/{id}/result");
    // A URL minted with a JWT ends when the JWT does, whatever it asked.
    let expires = match &caller {
        Caller::Owner(auth) => auth.expires_at(),
        Caller::Admin => None,
    }
    .map_or(now_secs() + ttl.as_secs(), |exp| {
        exp.min(now_secs() + ttl.as_secs())
    });
    let sig = state
        .identities
        .directory()
        .signer
        .sign(&path, expires, &owner, &instance);
    let mut query = form_urlencoded::Serializer::new(String::new());
    if let Some(f) = format {
        query.append_pair("format", f.name());
    }
    query
        .append_pair("expires", &expires.to_string())
        .append_pair("owner", &owner)
        .append_pair("instance", &instance)
        .append_pair("sig", &sig);
    let path = format!("{path}?{}", query.finish());
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = match headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
    {
        Some("https") => "https",
        _ => "http",
    };
    let link = SignedLink {
        url: format!("{scheme}://{host}{path}"),
        path,
        expires_at: expires,
    };
    Ok((StatusCode::CREATED, axum::Json(link)).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_holds_for_its_path_expiry_and_owner_only() {
        let s = UrlSigner::new(vec![7; 32]);
        let sig = s.sign("/statements/a/result", 100, "alice", "i1");
        assert!(s.verify("/statements/a/result", 100, "alice", "i1", &sig));
        assert!(!s.verify("/statements/b/result", 100, "alice", "i1", &sig));
        assert!(!s.verify("/statements/a/result", 101, "alice", "i1", &sig));
        assert!(!s.verify("/statements/a/result", 100, "bob", "i1", &sig));
        assert!(!s.verify("/statements/a/result", 100, "alice", "i2", &sig));
        assert!(!s.verify("/statements/a/result", 100, "alice", "i1", "x"));
        // Another key signs differently.
        assert!(!UrlSigner::new(vec![8; 32]).verify(
            "/statements/a/result",
            100,
            "alice",
            "i1",
            &sig
        ));
        // Fields cannot slide into each other.
        let joined = s.sign("/p", 1, "2\nx", "i");
        assert!(!s.verify("/p\n1", 2, "x", "i", &joined));
    }
}
