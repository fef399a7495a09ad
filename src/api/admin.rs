//! `/admin/secrets`: credential metadata, the declared catalogs and
//! on-demand rotation. Never a secret value, session token or catalog
//! password; the key id at most as its last 4 characters.

use std::time::{Duration, SystemTime};

use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::api::auth::AdminAuth;
use crate::api::error::{ApiError, Problem};
use crate::api::AppState;
use crate::config::attach::{check_in_scope, CatalogKind};
use crate::engine::catalogs as engine_catalogs;

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

/// How long a command asked of every replica waits for their answers.
const FLEET_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Every replica's outcome of a command asked of all.
pub struct FleetOutcome {
    /// Each replica's answer, this one first.
    pub replicas: Vec<ReplicaAnswer>,
    /// Why the others were not asked, if they were not.
    pub not_asked: Option<String>,
}

impl FleetOutcome {
    /// The answer's status: 200 when every replica carried the command
    /// out; 504 when one did not answer within the wait (the list says
    /// which); 207 when one failed or the others could not be asked
    /// (the list says what was done where). Never a failure's status for
    /// what was done.
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        if self
            .replicas
            .iter()
            .any(|r| matches!(r.outcome, "no_answer" | "not_reached"))
        {
            StatusCode::GATEWAY_TIMEOUT
        } else if self.not_asked.is_some() || self.replicas.iter().any(|r| r.outcome != "ok") {
            StatusCode::MULTI_STATUS
        } else {
            StatusCode::OK
        }
    }
}

/// Carries out `command` here (a rotation of every secret or of
/// `argument`, a reload of the tokens and keys); its errors, none when done.
pub async fn carry_out(state: &AppState, command: &str, argument: Option<&str>) -> Vec<String> {
    match command {
        "rotate" => match state.rotator.rotate_now(argument).await {
            Err(e) => vec![e.to_string()],
            Ok(results) => {
                let names: Vec<String> = match argument {
                    Some(n) => vec![n.to_string()],
                    None => state.rotator.names(),
                };
                names
                    .iter()
                    .zip(results)
                    .filter_map(|(n, r)| r.err().map(|e| format!("{n}: {e}")))
                    .collect()
            }
        },
        "reload" => match reload_here(state, "admin request").await {
            Ok(_) => Vec::new(),
            Err(e) => vec![format!(
                "the reload was refused and the current tokens and roles stay: {e}"
            )],
        },
        other => vec![format!("unknown command {other}")],
    }
}

/// Reads the tokens, the URL key and the roles again and puts them in
/// place whole (see [`crate::identity::directory`]): what changed, or why
/// it was refused.
pub async fn reload_here(
    state: &AppState,
    why: &'static str,
) -> Result<crate::identity::directory::Changes, String> {
    let engine = state.engine.clone();
    let catalogs = state.catalogs.clone();
    crate::identity::directory::reload(
        state.identities.directory_cell(),
        &state.reload,
        why,
        |roles| async move {
            crate::identity::directory::check_roles(&engine, &catalogs, &roles).await
        },
    )
    .await
}

/// Reloads on `SIGHUP` and when a token, key or TOML file changes
/// (checked every 2 s: a Kubernetes Secret's or ConfigMap's volume is
/// updated in place), until `stop`.
pub async fn watch(state: AppState, stop: tokio_util::sync::CancellationToken) {
    use crate::identity::directory::{stamps, watched};
    let files = watched(&state.reload);
    let mut last = stamps(&files);
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    let mut every = tokio::time::interval(std::time::Duration::from_secs(2));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        #[cfg(unix)]
        let hup = async {
            match hangup.as_mut() {
                Some(s) => {
                    s.recv().await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        #[cfg(not(unix))]
        let hup = std::future::pending::<()>();
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = hup => {
                last = stamps(&files);
                let _ = reload_here(&state, "SIGHUP").await;
            }
            _ = every.tick() => {
                let now = stamps(&files);
                if now != last {
                    last = now;
                    let _ = reload_here(&state, "file changed").await;
                }
            }
        }
    }
}

/// Commands asked of this replica through another one are carried out as
/// if asked here.
impl crate::statements::replication::Commands for AppState {
    fn carry_out<'a>(
        &'a self,
        command: &'a str,
        argument: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, Vec<String>> {
        Box::pin(carry_out(self, command, argument))
    }
}

/// Asks every other live replica (through the shared state) to carry out
/// `command` as this one did (`here`: its errors), and gathers their
/// answers for up to 30 s, less once every replica still asked answered or
/// was taken for dead. A command not taken by then is withdrawn (never
/// carried out late). One replica with no shared state answers alone; with
/// the shared state out of reach, this replica's outcome still stands.
async fn everywhere(
    state: &AppState,
    command: &'static str,
    argument: Option<&str>,
    here: Vec<String>,
) -> FleetOutcome {
    let answer = |replica: String, errors: Vec<String>| ReplicaAnswer {
        replica,
        outcome: if errors.is_empty() { "ok" } else { "failed" },
        errors,
    };
    let mut out = FleetOutcome {
        replicas: vec![answer(state.health.replica.clone(), here)],
        not_asked: None,
    };
    let Some(shared) = &state.statements.shared else {
        return out;
    };
    let unreachable = |e: String| {
        tracing::warn!(command, error.cause = %e, "the shared state could not be reached: the other replicas were not asked");
        "the shared state could not be reached: the other replicas were not asked (this replica's outcome stands); retry".to_string()
    };
    let (id, asked) = match shared.broadcast(command, argument).await {
        Ok(a) => a,
        Err(e) => {
            out.not_asked = Some(unreachable(e));
            return out;
        }
    };
    tracing::info!(command, replicas = asked.len(), "asked every replica");
    let deadline = tokio::time::Instant::now() + FLEET_WAIT;
    let mut last = Vec::new();
    loop {
        match shared.command_answers(&id).await {
            Ok(got) => last = got,
            Err(e) => {
                // What was seen stands; the rest did not answer.
                tracing::warn!(command, error.cause = %e, "reading the replicas' answers failed");
                break;
            }
        }
        let waiting = last.iter().any(|a| a.answer.is_none() && a.alive);
        if !waiting || tokio::time::Instant::now() >= deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Not taken by now: withdrawn, so it is never carried out late.
    let withdrawn = shared.withdraw_command(&id).await.unwrap_or_default();
    let mut unanswered = 0u64;
    for replica in asked {
        let seen = last.iter().find(|a| a.replica == replica);
        out.replicas
            .push(match seen.and_then(|a| a.answer.as_ref()) {
                Some(v) => answer(
                    replica,
                    v["errors"]
                        .as_array()
                        .map(|e| {
                            e.iter()
                                .filter_map(|x| x.as_str().map(String::from))
                                .collect()
                        })
                        .unwrap_or_default(),
                ),
                None => {
                    unanswered += 1;
                    let taken = seen.is_some_and(|a| a.taken) && !withdrawn.contains(&replica);
                    ReplicaAnswer {
                        replica,
                        outcome: if taken { "no_answer" } else { "not_reached" },
                        errors: Vec::new(),
                    }
                }
            });
    }
    if unanswered > 0 {
        metrics::counter!("duckgate_admin_fanout_unanswered_total", "command" => command)
            .increment(unanswered);
        tracing::warn!(
            command,
            unanswered,
            "replicas did not answer a command asked of every replica"
        );
    }
    out
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

/// How long `GET /admin/secrets` waits for a pooled connection to read the
/// lakes' snapshots: the admin view never queues behind client queries.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(250);

/// The declared catalogs, with the current snapshot of each DuckLake.
async fn catalogs(state: &AppState) -> Vec<CatalogInfo> {
    let view = state.health.credentials.load();
    let mut out: Vec<CatalogInfo> = state
        .catalogs
        .iter()
        .map(|c| {
            let serving = serving_secret(&c.location, &view.secrets);
            CatalogInfo {
                name: c.name.clone(),
                kind: c.kind.as_str().into(),
                read_only: c.read_only,
                metadata: c.metadata.clone(),
                location: c.location.clone(),
                secret: serving.as_ref().map(|(n, _)| n.clone()),
                scope: serving.map(|(_, s)| s),
                snapshot: None,
                snapshot_error: None,
            }
        })
        .collect();
    let lakes: Vec<String> = state
        .catalogs
        .iter()
        .filter(|c| c.kind == CatalogKind::DuckLake)
        .map(|c| c.name.clone())
        .collect();
    if lakes.is_empty() {
        return out;
    }
    let snapshots = match state
        .engine
        .pool
        .acquire_within(SNAPSHOT_WAIT, false, None, None, false, None)
        .await
    {
        Err(_) => Err("no pooled connection free to read it".to_string()),
        Ok((slot, lease)) => tokio::task::spawn_blocking(move || {
            let out: Vec<_> = lakes
                .iter()
                .map(|l| (l.clone(), engine_catalogs::current_snapshot(&slot.conn, l)))
                .collect();
            lease.release(slot);
            out
        })
        .await
        .map_err(|e| format!("snapshot worker: {e}")),
    };
    for c in out.iter_mut().filter(|c| c.kind == "ducklake") {
        let found = match &snapshots {
            Err(e) => Err(e.clone()),
            Ok(all) => match all.iter().find(|(l, _)| *l == c.name) {
                Some((_, Ok(Some(s)))) => Ok(s.clone()),
                Some((_, Ok(None))) => Err("the lake has no snapshot".to_string()),
                Some((_, Err(e))) => {
                    tracing::warn!(catalog = %c.name, error.cause_chain = ?e, "reading a lake's snapshot");
                    Err("reading it failed (see the gateway's log)".to_string())
                }
                None => Err("not read".to_string()),
            },
        };
        match found {
            Ok(s) => {
                c.snapshot = Some(SnapshotInfo {
                    id: s.id,
                    time: s.time,
                    schema_version: s.schema_version,
                })
            }
            Err(e) => c.snapshot_error = Some(e),
        }
    }
    out
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
