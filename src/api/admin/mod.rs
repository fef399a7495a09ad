//! `/admin/secrets`: credential metadata, the declared catalogs and
//! on-demand rotation. Never a secret value, session token or catalog
//! password; the key id at most as its last 4 characters.

use std::time::SystemTime;

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::api::auth::AdminAuth;
use crate::api::error::{ApiError, Problem};
use crate::api::AppState;
use crate::config::attach::{check_in_scope, CatalogKind};
use crate::engine::catalogs as engine_catalogs;

mod catalogs;
mod fleet;

use catalogs::catalogs;
use fleet::everywhere;
pub use fleet::{carry_out, reload_here, watch, FleetOutcome};

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
    /// After a failed refresh: milliseconds until the next automatic
    /// attempt (at most half the check interval, so a recovered STS is
    /// used within one interval); absent after a success.
    pub next_attempt_in_ms: Option<u64>,
    /// Rotations installed since start.
    pub rotations: u64,
}

/// A DuckLake snapshot.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    /// Its id.
    pub id: i64,
    /// When it was committed.
    pub time: String,
    /// The lake's schema version at it.
    pub schema_version: i64,
}

/// One operator-declared catalog (`[[attach]]`) and what serves its data.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CatalogInfo {
    /// The database name queries use.
    pub name: String,
    /// `ducklake`, `iceberg`, `delta` or `duckdb`.
    pub kind: String,
    /// Whether clients may only read it.
    pub read_only: bool,
    /// DuckLake only: the metadata path, which never holds a password (the
    /// password is in a secret of its own, shown nowhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metadata: Option<String>,
    /// Where its data lies (a DuckLake's data path as its metadata
    /// records it).
    pub location: String,
    /// The S3 secret whose credentials read it (the one with the longest
    /// matching scope, as DuckDB picks); `null` off S3.
    pub secret: Option<String>,
    /// That secret's scope prefix holding `location`.
    pub scope: Option<String>,
    /// DuckLake only: the current snapshot, read on a pooled connection if
    /// one is free within a moment.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotInfo>,
    /// DuckLake only: why there is no snapshot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_error: Option<String>,
}

/// The answer of both admin routes.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretsReport {
    /// Every configured secret.
    pub secrets: Vec<SecretInfo>,
    /// Every declared catalog (`GET /admin/secrets` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub catalogs: Option<Vec<CatalogInfo>>,
    /// Per-secret errors of this rotation (rotate only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
    /// What each replica answered (rotate only): this one first, then
    /// every other live replica sharing DUCKGATE_STATE_DSN.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaAnswer>>,
    /// Why the other replicas were not asked (rotate only; the shared
    /// state could not be reached): this replica's own outcome stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_asked: Option<String>,
}

/// One replica's answer to a command asked of every replica.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReplicaAnswer {
    /// The replica (its host name and a random part, as in `/healthz`).
    pub replica: String,
    /// `ok` (carried out), `failed` (carried out in part or not at all:
    /// `errors` says why), `not_reached` (it did not take the command
    /// within the wait, or was taken for dead meanwhile: the command was
    /// withdrawn and it will not carry it out), or `no_answer` (it took
    /// the command but did not answer within the wait: it may still carry
    /// it out).
    pub outcome: &'static str,
    /// Why it failed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The answer of `POST /admin/reload`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReloadReport {
    /// What each replica answered: this one first.
    pub replicas: Vec<ReplicaAnswer>,
    /// What the reload changed on this replica, one line each (tokens by
    /// name, roles by name); empty when nothing changed or it was refused.
    pub changed: Vec<String>,
    /// Sections of the TOML file that changed but take effect only after a
    /// restart (this replica keeps what it started with).
    pub restart_required: Vec<String>,
    /// Why the other replicas were not asked (the shared state could not
    /// be reached): this replica's own outcome stands.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_asked: Option<String>,
}

/// Reloads the query tokens, the admin token, the URL signing key and the
/// roles (`[[role]]` of the TOML file) on every replica, as SIGHUP does on
/// one: all or nothing on each. The answer says what changed here, and
/// which other sections of the TOML file changed but need a restart.
#[utoipa::path(post, path = "/admin/reload", tag = "admin",
    responses(
        (status = 200, description = "Every replica reloaded", body = ReloadReport),
        (status = 207, description = "A partial outcome: a replica's reload was refused (it keeps its tokens and roles), or the shared state could not be reached and only this replica reloaded (`not_asked`); each replica's outcome is listed", body = ReloadReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "A replica did not answer within 30 s (`no_answer`, `not_reached`); each replica's outcome is listed", body = ReloadReport)
    ),
    security(("bearer" = [])))]
pub async fn reload(
    State(state): State<AppState>,
    _auth: AdminAuth,
) -> (axum::http::StatusCode, Json<ReloadReport>) {
    let (here, changes) = match reload_here(&state, "admin request").await {
        Ok(changes) => (Vec::new(), changes),
        Err(e) => (
            vec![format!(
                "the reload was refused and the current tokens and roles stay: {e}"
            )],
            Default::default(),
        ),
    };
    let fleet = everywhere(&state, "reload", None, here).await;
    (
        fleet.status(),
        Json(ReloadReport {
            replicas: fleet.replicas,
            changed: changes.changed,
            restart_required: changes.restart_required,
            not_asked: fleet.not_asked,
        }),
    )
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
                next_attempt_in_ms: s
                    .next_attempt_at
                    .map(|t| t.duration_since(now).map_or(0, |d| d.as_millis() as u64)),
                rotations: s.rotations,
            })
            .collect(),
        catalogs: None,
        errors,
        replicas: None,
        not_asked: None,
    }
}

/// The secret DuckDB reads `location` with: the longest scope prefix that
/// holds it (an unscoped secret holds every S3 location).
fn serving_secret(
    location: &str,
    secrets: &[crate::state::SecretState],
) -> Option<(String, String)> {
    if !location.starts_with("s3://") {
        return None;
    }
    let mut best: Option<(String, String)> = None;
    for s in secrets {
        let scopes: Vec<&str> = if s.scope.is_empty() {
            vec!["s3://"]
        } else {
            s.scope.iter().map(String::as_str).collect()
        };
        for scope in scopes {
            let holds = check_in_scope(location, &[scope.to_string()]).is_ok();
            if holds && best.as_ref().is_none_or(|(_, b)| scope.len() > b.len()) {
                best = Some((s.name.clone(), scope.to_string()));
            }
        }
    }
    best
}

/// Lists the S3 secrets and their credential state, and the declared
/// catalogs with the secret that serves each.
#[utoipa::path(get, path = "/admin/secrets", operation_id = "list_secrets", tag = "admin",
    responses(
        (status = 200, description = "Secret metadata and the declared catalogs", body = SecretsReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = [])))]
pub async fn list(State(state): State<AppState>, _auth: AdminAuth) -> Json<SecretsReport> {
    let mut out = report(&state, None, Vec::new());
    out.catalogs = Some(catalogs(&state).await);
    Json(out)
}

/// The query pool's figures with the names of the tokens whose queries
/// hold stuck connections (the probes, which anyone can reach, give only
/// their count).
#[utoipa::path(get, path = "/admin/pool", tag = "admin",
    responses(
        (status = 200, description = "The pool's figures, stuck connections by token", body = crate::api::health::PoolHealth),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = [])))]
pub async fn pool(
    State(state): State<AppState>,
    _auth: AdminAuth,
) -> Json<crate::api::health::PoolHealth> {
    Json(crate::api::health::pool_health(&state, true))
}

/// Rotates now (all secrets, or `?name=`), sharing any refresh in flight.
#[utoipa::path(post, path = "/admin/secrets/rotate", operation_id = "rotate_secrets", tag = "admin",
    params(RotateParams),
    responses(
        (status = 200, description = "Rotated on every replica", body = SecretsReport),
        (status = 207, description = "A partial outcome: a secret's rotation failed somewhere (`errors`, each replica's outcome), or the shared state could not be reached and only this replica rotated (`not_asked`)", body = SecretsReport),
        (status = 401, description = "Missing or wrong admin token", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Admin API disabled", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such secret", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "A replica did not answer within 30 s (`no_answer`, `not_reached`); each replica's outcome is listed", body = SecretsReport)
    ),
    security(("bearer" = [])))]
pub async fn rotate(
    State(state): State<AppState>,
    _auth: AdminAuth,
    params: Result<Query<RotateParams>, axum::extract::rejection::QueryRejection>,
) -> Result<(axum::http::StatusCode, Json<SecretsReport>), ApiError> {
    let params = crate::api::request::query_options(params)?;
    // An unknown name is the request's error, found before any replica acts.
    if let Some(name) = &params.name {
        if !state.rotator.names().contains(name) {
            return Err(ApiError::NotFound(
                crate::credentials::rotator::RotationError::UnknownSecret(name.clone()).to_string(),
            ));
        }
    }
    let errors = carry_out(&state, "rotate", params.name.as_deref()).await;
    let fleet = everywhere(&state, "rotate", params.name.as_deref(), errors.clone()).await;
    let mut report = report(&state, params.name.as_deref(), errors);
    let status = fleet.status();
    report.replicas = Some(fleet.replicas);
    report.not_asked = fleet.not_asked;
    Ok((status, Json(report)))
}
