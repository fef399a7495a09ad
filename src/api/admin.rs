//! `/admin/secrets`: credential metadata and on-demand rotation. Never a
//! secret value or session token; the key id at most as its last 4 characters.

use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::api::auth::AdminAuth;
use crate::api::error::{ApiError, Problem};
use crate::api::AppState;

/// One secret's metadata.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretInfo {
    /// The secret's name in DuckDB.
    pub name: String,
    /// `assume-role`, `web-identity` or `static`.
    pub source: String,
    /// The S3 prefixes the secret serves.
    pub scope: Vec<String>,
    /// Increments on every installed rotation of this secret.
    pub epoch: u64,
    /// When the installed credentials expire (RFC 3339), if they do.
    pub expires_at: Option<String>,
    /// Seconds until they expire (negative once expired).
    pub seconds_to_expiry: Option<f64>,
    /// When the installed credentials were installed (RFC 3339).
    pub rotated_at: Option<String>,
    /// Last 4 characters of the access key id.
    pub key_id_suffix: Option<String>,
    /// Why the last refresh failed, if it did.
    pub last_error: Option<String>,
    /// Refreshes failed in a row since the last success.
    pub consecutive_failures: u32,
    /// Rotations installed since start.
    pub rotations: u64,
}

/// The answer of both admin routes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretsReport {
    /// Every configured secret.
    pub secrets: Vec<SecretInfo>,
    /// Per-secret errors of this rotation (rotate only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The query string of `POST /admin/secrets/rotate`.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RotateParams {
    /// Rotate only this secret.
    pub name: Option<String>,
}

fn report(state: &AppState, only: Option<&str>, errors: Vec<String>) -> SecretsReport {
    let view = state.health.credentials.load();
    let now = SystemTime::now();
    SecretsReport {
        secrets: view
            .secrets
            .iter()
            .filter(|s| only.is_none_or(|n| n == s.name))
            .map(|s| SecretInfo {
                name: s.name.clone(),
                source: s.source.clone(),
                scope: s.scope.clone(),
                epoch: s.epoch,
                expires_at: s.expires_at.clone(),
                seconds_to_expiry: s.seconds_to_expiry(now).map(|x| (x * 10.0).round() / 10.0),
                rotated_at: s.rotated_at.clone(),
                key_id_suffix: s.key_id_suffix.clone(),
                last_error: s.last_error.clone(),
                consecutive_failures: s.consecutive_failures,
                rotations: s.rotations,
            })
            .collect(),
        errors,
    }
}

/// Lists the S3 secrets and their credential state.
#[utoipa::path(get, path = "/admin/secrets", tag = "admin",
    responses(
        (status = 200, description = "Secret metadata", body = SecretsReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, _auth: AdminAuth) -> Json<SecretsReport> {
    Json(report(&state, None, Vec::new()))
}

/// Rotates now (all secrets, or `?name=`), sharing any refresh in flight.
#[utoipa::path(post, path = "/admin/secrets/rotate", tag = "admin",
    params(RotateParams),
    responses(
        (status = 200, description = "Rotated; per-secret errors, if any, are listed", body = SecretsReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such secret", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = [])))]
pub async fn rotate(
    State(state): State<AppState>,
    _auth: AdminAuth,
    params: Result<Query<RotateParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<SecretsReport>, ApiError> {
    let params = crate::api::request::query_options(params)?;
    let results = state
        .rotator
        .rotate_now(params.name.as_deref())
        .await
        .map_err(|e| ApiError::NotFound(e.to_string()))?;
    let names: Vec<String> = match &params.name {
        Some(n) => vec![n.clone()],
        None => state.rotator.names(),
    };
    let errors = names
        .iter()
        .zip(results)
        .filter_map(|(n, r)| r.err().map(|e| format!("{n}: {e}")))
        .collect();
    Ok(Json(report(&state, params.name.as_deref(), errors)))
}
