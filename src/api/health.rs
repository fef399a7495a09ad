//! `/healthz` and `/readyz`: answered from the health snapshot alone.

use std::sync::atomic::Ordering;
use std::time::SystemTime;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::Json;
use serde::Serialize;

use crate::api::AppState;

/// Pool figures.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PoolHealth {
    /// Connections in the pool.
    pub size: u64,
    /// Connections serving a request.
    pub in_use: u64,
    /// Requests waiting for a connection.
    pub waiting: u64,
    /// Requests turned away after the acquire timeout, since start.
    pub acquire_timeouts: u64,
    /// Requests turned away at once, since start: their expected wait for a
    /// connection was beyond the acquire timeout.
    pub shed: u64,
    /// Connections queries that read S3 may hold at once (the rest is
    /// local work's).
    pub s3_share: u64,
    /// Connections held by queries that read S3.
    pub s3_in_use: u64,
    /// Connections interrupted but still inside DuckDB (a hung S3 read),
    /// each already replaced by a fresh one.
    pub stuck: u64,
    /// Connections replaced that way since start.
    pub replaced_total: u64,
    /// Stuck connections with no spare left: capacity lost until they return.
    pub lost: u64,
    /// How many tokens' queries hold the stuck connections. The probes
    /// are unauthenticated, so they give the count only; the names are in
    /// `GET /admin/pool`.
    pub stuck_tokens: u64,
    /// Stuck connections (replaced and lost) by the token whose query holds
    /// them (`-`: the gateway's own work). Only in `GET /admin/pool` (admin
    /// token), never in the probes; absent when none is stuck.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub stuck_by_token: std::collections::BTreeMap<String, u64>,
}

/// The pool's figures; the stuck connections' token names only when
/// `names` (the admin's view).
pub fn pool_health(state: &AppState, names: bool) -> PoolHealth {
    let p = &state.health.pool;
    let stuck_by_token = p.stuck_by_token.load_full();
    PoolHealth {
        size: p.size.load(Ordering::Relaxed),
        in_use: p.in_use.load(Ordering::Relaxed),
        waiting: p.waiting.load(Ordering::Relaxed),
        acquire_timeouts: p.acquire_timeouts.load(Ordering::Relaxed),
        shed: p.shed.load(Ordering::Relaxed),
        s3_share: p.s3_share.load(Ordering::Relaxed),
        s3_in_use: p.s3_in_use.load(Ordering::Relaxed),
        stuck: p.stuck.load(Ordering::Relaxed),
        replaced_total: p.replaced_total.load(Ordering::Relaxed),
        lost: p.lost.load(Ordering::Relaxed),
        stuck_tokens: stuck_by_token.len() as u64,
        stuck_by_token: if names {
            std::collections::BTreeMap::clone(&stuck_by_token)
        } else {
            Default::default()
        },
    }
}

/// One secret's credential state.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SecretHealth {
    /// The secret's name in DuckDB.
    pub name: String,
    /// Increments on every installed rotation of this secret.
    pub epoch: u64,
    /// Seconds until the credentials expire (negative once expired).
    pub seconds_to_expiry: Option<f64>,
    /// When the installed credentials expire (RFC 3339), if they do.
    pub expires_at: Option<String>,
    /// When the installed credentials were installed (RFC 3339).
    pub rotated_at: Option<String>,
    /// Why the last refresh failed, if it did.
    pub last_error: Option<String>,
}

/// Whether audit records reach `DUCKGATE_AUDIT_LOG`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AuditHealth {
    /// The last record was written; false while records are being lost.
    pub ok: bool,
    /// Records that did not reach the file since start (each one is still
    /// in the log, target `duckgate::audit`).
    pub lost: u64,
    /// Why the last record could not be written, while records are lost.
    pub last_error: Option<String>,
}

/// A service the gateway depends on (the shared state, the S3 spool, a
/// lake's catalog), as its last use found it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DependencyHealth {
    /// `shared_state`, `spool`, or `catalog:<name>`.
    pub name: String,
    /// Whether its last use succeeded.
    pub up: bool,
    /// When it last went up or down, milliseconds since the Unix epoch.
    pub since_ms: u64,
    /// Failed uses since start.
    pub failures: u64,
    /// Why its last use failed, while it is down.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// The health answer.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct HealthReport {
    /// `ok`, `degraded` (a refresh is failing, credentials expired, pool
    /// capacity lost, audit records not written, a dependency down) or
    /// `shutting_down`.
    pub status: &'static str,
    /// duckgate's version.
    pub version: &'static str,
    /// The embedded DuckDB's version, e.g. `v1.5.5`.
    pub duckdb_version: String,
    /// Which replica answered: its host name and a random part (the name
    /// its access lines and the shared state use).
    pub replica: String,
    /// Seconds since the gateway started.
    pub uptime_seconds: f64,
    /// The query pool's counters.
    pub pool: PoolHealth,
    /// Sum of all secrets' epochs.
    pub credential_epoch: u64,
    /// Every configured secret's credential state.
    pub secrets: Vec<SecretHealth>,
    /// The audit file's state, when `DUCKGATE_AUDIT_LOG` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditHealth>,
    /// The services it depends on, when configured: each is `degraded`
    /// while down, and none takes readiness away (what fails without it
    /// fails the same on every replica; docs/operations.md says per
    /// dependency what stops working).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<DependencyHealth>,
    /// Why the status is not `ok`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// The health answer and whether the gateway is ready: each concern's
/// figures, and the reasons the status is not `ok`, in a fixed order.
fn report(state: &AppState) -> (HealthReport, bool) {
    let h = &state.health;
    let creds = h.credentials.load();
    let mut reasons = Vec::new();
    let secrets = secrets_health(&creds, SystemTime::now(), &mut reasons);
    // Expired credentials degrade the status and fail the reads of their
    // secret's scope (503 credentials-expired), but take no readiness:
    // other secrets' reads and local queries are served, and every replica
    // would fail that scope alike (one tenant's broken role took every
    // replica out of the Service, and every tenant with it).
    let pool = pool_health(state, false);
    let full = pool_reasons(state, &pool, &mut reasons);
    let audit = audit_health(state, &mut reasons);
    let dependencies = dependencies_health(state, &mut reasons);
    let no_identities = no_identities(state, &mut reasons);
    let shutting_down = h.shutting_down.load(Ordering::Relaxed);
    let status = if shutting_down {
        "shutting_down"
    } else if reasons.is_empty() {
        "ok"
    } else {
        "degraded"
    };
    let (size, lost) = (pool.size, pool.lost);
    let ready =
        h.ready.load(Ordering::Relaxed) && !shutting_down && lost < size && !full && !no_identities;
    (
        HealthReport {
            status,
            version: h.version,
            duckdb_version: h.duckdb_version.clone(),
            replica: h.replica.clone(),
            uptime_seconds: (h.started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
            pool,
            credential_epoch: creds.epoch,
            secrets,
            audit,
            dependencies,
            reasons,
        },
        ready,
    )
}

/// Every secret's credential state at `now`; an expired or failing one
/// adds its reason.
fn secrets_health(
    creds: &crate::state::CredentialsView,
    now: SystemTime,
    reasons: &mut Vec<String>,
) -> Vec<SecretHealth> {
    creds
        .secrets
        .iter()
        .map(|s| {
            let seconds = s.seconds_to_expiry(now);
            if seconds.is_some_and(|x| x <= 0.0) {
                reasons.push(format!("secret {}: credentials expired", s.name));
            }
            if let Some(e) = &s.last_error {
                reasons.push(format!("secret {}: refresh failing: {e}", s.name));
            }
            SecretHealth {
                name: s.name.clone(),
                epoch: s.epoch,
                seconds_to_expiry: seconds.map(|x| (x * 10.0).round() / 10.0),
                expires_at: s.expires_at.clone(),
                rotated_at: s.rotated_at.clone(),
                last_error: s.last_error.clone(),
            }
        })
        .collect()
}

/// The pool's reasons (capacity lost to stuck connections, no spare left,
/// every connection busy); true when it is full: queries are refused.
fn pool_reasons(state: &AppState, pool: &PoolHealth, reasons: &mut Vec<String>) -> bool {
    let h = &state.health;
    // Capacity, not only credentials: every connection stuck inside DuckDB
    // with no spare to replace it means nothing can be served.
    let (size, lost) = (pool.size, pool.lost);
    // Whose work holds them, as a count: a probe anyone can reach names no
    // client; `GET /admin/pool` does.
    let whose = || match pool.stuck_tokens {
        1 => "the queries of 1 token; GET /admin/pool names it".to_string(),
        n => format!("the queries of {n} tokens; GET /admin/pool names them"),
    };
    if lost > 0 {
        reasons.push(format!(
            "pool: {lost} of {size} connections stuck inside DuckDB (held by {})",
            whose()
        ));
    }
    // Still serving, but the next stuck connection costs capacity: every
    // spare already replaces one that has not come back from DuckDB.
    let (stuck, spares) = (pool.stuck, h.pool.spares.load(Ordering::Relaxed));
    if lost == 0 && spares > 0 && stuck >= spares {
        reasons.push(format!(
            "pool: all {spares} spare connections replace connections stuck inside DuckDB \
             (held by {}); the next stuck one reduces capacity",
            whose()
        ));
    }
    // Every connection busy and a new query would be refused: its expected
    // wait passes the acquire timeout, or none came back for that long (a
    // stalled S3 holds them all). Not ready: the capacity is gone.
    let busy = size > 0 && pool.in_use.saturating_sub(stuck) >= size;
    let timeout_ms = h.pool.acquire_timeout_ms.load(Ordering::Relaxed);
    let waiting = pool.waiting;
    let expected_ms = crate::engine::admission::expected_wait(
        waiting,
        std::time::Duration::from_micros(h.pool.hold_mean_us.load(Ordering::Relaxed)),
        size as usize,
    )
    .as_millis() as u64;
    let idle_ms = (h.started.elapsed().as_millis() as u64)
        .saturating_sub(h.pool.last_release_ms.load(Ordering::Relaxed));
    let full = busy && (expected_ms > timeout_ms || idle_ms > timeout_ms);
    if full {
        reasons.push(format!(
            "pool: all {size} connections busy, {waiting} requests waiting, none back for \
             {idle_ms} ms; a new query's expected wait ({expected_ms} ms) or the time since a \
             connection came back passes the acquire timeout ({timeout_ms} ms): queries are refused"
        ));
    }
    full
}

/// The audit file's state, when there is one; records being lost add a
/// reason.
fn audit_health(state: &AppState, reasons: &mut Vec<String>) -> Option<AuditHealth> {
    // Records lost now degrade the status but not readiness: queries are
    // still answered and each record is still in the log. The status is ok
    // again once a later record is written (the file takes records again);
    // `lost` and duckgate_audit_records_lost_total keep the history.
    let audit = state.queries.audit_status().map(|a| AuditHealth {
        ok: !a.failing(),
        lost: a.lost(),
        last_error: a.last_error(),
    });
    if let Some(a) = audit.as_ref().filter(|a| !a.ok) {
        reasons.push(format!(
            "audit: records are not reaching DUCKGATE_AUDIT_LOG ({} lost): {}",
            a.lost,
            a.last_error.as_deref().unwrap_or("unknown error")
        ));
    }
    audit
}

/// The services the gateway depends on, as their last use found them; each
/// one down adds a reason.
fn dependencies_health(state: &AppState, reasons: &mut Vec<String>) -> Vec<DependencyHealth> {
    let dependencies: Vec<DependencyHealth> = state
        .health
        .dependencies
        .load()
        .iter()
        .map(|d| DependencyHealth {
            name: d.name.clone(),
            up: d.is_up(),
            since_ms: d.since_ms(),
            failures: d.failures(),
            last_error: d.last_error(),
        })
        .collect();
    for d in dependencies.iter().filter(|d| !d.up) {
        reasons.push(format!(
            "{}: failing: {}",
            d.name,
            d.last_error.as_deref().unwrap_or("unknown error")
        ));
    }
    dependencies
}

/// Whether the gateway can authenticate nobody (adding the reason): an
/// OIDC-only gateway (no query token) without the issuer's keys. Not
/// ready, so traffic goes where it can be.
fn no_identities(state: &AppState, reasons: &mut Vec<String>) -> bool {
    let no_identities = state.identities.oidc().is_some_and(|v| {
        let directory = state.identities.directory();
        let tokens = &directory.tokens;
        tokens.query.is_empty() && !tokens.anonymous && v.keys().fetched.is_none()
    });
    if no_identities {
        reasons.push(
            "oidc: no query token is configured and the issuer's keys were never fetched: nobody can be authenticated"
                .to_string(),
        );
    }
    no_identities
}

/// Liveness: 200 while the process serves, whatever its credentials.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The gateway is alive", body = HealthReport)))]
pub async fn healthz(State(state): State<AppState>) -> Json<HealthReport> {
    Json(report(&state).0)
}

/// Readiness: 200 when the gateway can serve queries, 503 while starting,
/// shutting down, while every connection is busy and new queries are
/// refused (the expected wait, or the time since a connection came back,
/// passes the acquire timeout), or when it can authenticate nobody (OIDC
/// only, and the issuer's keys never fetched). Expired S3 credentials
/// degrade `/healthz` but leave readiness: local queries and other secrets'
/// reads are served.
#[utoipa::path(get, path = "/readyz", tag = "health",
    responses(
        (status = 200, description = "Ready to serve", body = HealthReport),
        (status = 503, description = "Not ready", body = HealthReport)))]
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let (report, ready) = report(&state);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(report))
}
