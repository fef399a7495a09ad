//! `GET /whoami`: who the caller's credential makes it, as every door
//! decides it ([`crate::identity::Authenticator::identify`]): its name, its
//! roles, and when a JWT's proof runs out. The console shows it and files
//! the browser's workspace under it; a client checks its token with it
//! without running anything.

use axum::Json;
use serde::Serialize;

use crate::identity::Identity;

/// The caller's identity.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct Whoami {
    /// The identity's name: a query token's, `oidc:<name claim>` for a JWT,
    /// `anonymous` on a gateway without tokens. Statements and running
    /// queries list it as their `token`.
    #[schema(example = "alice")]
    pub name: String,
    /// `token` (a query token), `oidc` (a JWT of the issuer) or
    /// `anonymous`.
    #[schema(example = "token")]
    pub kind: &'static str,
    /// The roles it holds (by membership, or named by a JWT's roles claim),
    /// in the order they are declared.
    pub roles: Vec<String>,
    /// Whether roles confine what it reads and writes (a query token that
    /// holds no role is not confined).
    pub confined: bool,
    /// When a JWT expires (its `exp`), in milliseconds since the Unix
    /// epoch; absent for query tokens, which do not expire.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl Whoami {
    /// What `identity` is, as this route says it.
    pub fn of(identity: &Identity, anonymous: bool) -> Self {
        let kind = if anonymous {
            "anonymous"
        } else if identity.name.starts_with("oidc:") {
            "oidc"
        } else {
            "token"
        };
        Self {
            name: identity.name.to_string(),
            kind,
            roles: identity.roles.iter().map(|r| r.to_string()).collect(),
            confined: identity.access.is_some(),
            expires_at_ms: identity.expires_at().map(|s| s.saturating_mul(1000)),
        }
    }
}

/// Who the bearer credential is: name, roles, expiry.
///
/// Runs nothing and needs no connection: the same check every query's
/// credential passes. A JWT that does not hold is 401 with the problem
/// that says why (`token-expired`, ...).
#[utoipa::path(get, path = "/whoami", operation_id = "whoami", tag = "identity",
    responses(
        (status = 200, description = "The caller's identity", body = Whoami),
        (status = 401, description = "Missing, wrong or expired token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn whoami(
    axum::extract::State(state): axum::extract::State<crate::api::AppState>,
    identity: Identity,
) -> Json<Whoami> {
    let anonymous = state.identities.directory().tokens.anonymous;
    Json(Whoami::of(&identity, anonymous))
}
