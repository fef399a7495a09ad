//! `GET /metrics` (Prometheus text) and the HTTP request metrics layer.
//! Gauges are read from the health snapshot at scrape time; nothing here
//! touches the pool.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{
    Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder,
};

use crate::api::AppState;

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// A Prometheus recorder with the gateway's histogram buckets (seconds).
/// [`recorder`] installs one for the process; a program that runs several
/// gateways gives each its own (see [`crate::run_with_metrics`]).
pub fn new_recorder() -> PrometheusRecorder {
    let secs = &[
        0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
        60.0, 300.0,
    ];
    PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), secs)
        .expect("static buckets")
        .build_recorder()
}

/// Installs the process-wide Prometheus recorder once and returns its
/// handle (a process may start [`crate::run`] more than once; every start
/// shares it).
pub fn recorder() -> PrometheusHandle {
    HANDLE
        .get_or_init(|| {
            let recorder = new_recorder();
            let handle = recorder.handle();
            // Another recorder may already be installed (a host program's):
            // then this handle simply renders nothing of ours.
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// The `outcome` labels of `duckgate_queries_total` and
/// `duckgate_statements_total` (`QueryError::outcome`, and `ok`).
const OUTCOMES: [&str; 16] = [
    "ok",
    "refused",
    "sql_error",
    "timeout",
    "cancelled",
    "client_stalled",
    "temp_space",
    "value_too_large",
    "pool_exhausted",
    "credentials_expired",
    "spool_full",
    "storage_full",
    "storage_error",
    "internal_error",
    "token_share",
    "result_cap",
];

/// The `state` labels of `duckgate_statements`.
const STATEMENT_STATES: [&str; 7] = [
    "queued",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "expired",
    "lost",
];

/// Creates every series the gateway records, at zero, before anything
/// happens: a counter that appears only with its first event shows "no
/// data" on dashboards, and an alert on `rate(...) > 0` or on its absence
/// cannot tell a quiet gateway from a broken scrape. Called once at start,
/// before the owners of gauges set their real values. `secrets`: the S3
/// secret names, the labels of the rotation series.
///
/// Histograms are created for their commonest label only (`ok`): one
/// empty histogram per outcome would add hundreds of bucket lines to every
/// scrape. Series labelled by route and status (`duckgate_http_*`) appear
/// with the first request of each kind; the credential gauges are set at
/// every scrape, one per secret.
pub fn register_zeroes(secrets: &[String]) {
    for outcome in OUTCOMES {
        metrics::counter!("duckgate_queries_total", "outcome" => outcome).increment(0);
        metrics::counter!("duckgate_statements_total", "outcome" => outcome).increment(0);
    }
    // Creating the handle registers the histogram (no sample recorded).
    let _ = metrics::histogram!("duckgate_query_duration_seconds", "outcome" => "ok");
    for state in STATEMENT_STATES {
        metrics::gauge!("duckgate_statements", "state" => state).set(0.0);
    }
    for route in ["query", "admin"] {
        for reason in ["missing", "wrong"] {
            metrics::counter!("duckgate_auth_failures_total", "route" => route, "reason" => reason)
                .increment(0);
        }
    }
    metrics::counter!("duckgate_auth_failures_total", "route" => "query", "reason" => "signature")
        .increment(0);
    for secret in secrets {
        for outcome in ["ok", "error"] {
            metrics::counter!("duckgate_rotations_total", "secret" => secret.clone(), "outcome" => outcome)
                .increment(0);
        }
    }
    let _ = metrics::histogram!("duckgate_rotation_duration_seconds");
    metrics::counter!("duckgate_query_cancellations_total").increment(0);
    metrics::counter!("duckgate_pool_connections_replaced_total").increment(0);
    metrics::counter!("duckgate_queries_inline_total").increment(0);
    for reason in ["answer_size", "budget"] {
        metrics::counter!("duckgate_queries_inline_moved_total", "reason" => reason).increment(0);
    }
    metrics::counter!("duckgate_pool_acquire_timeouts_total").increment(0);
    metrics::counter!("duckgate_pool_shed_total").increment(0);
    metrics::counter!("duckgate_pool_s3_share_timeouts_total").increment(0);
    metrics::counter!("duckgate_spill_cap_interrupts_total").increment(0);
    metrics::counter!("duckgate_duckdb_memory_refusals_total").increment(0);
    metrics::counter!("duckgate_storage_full_total", "store" => "spool").increment(0);
    metrics::counter!("duckgate_audit_records_lost_total").increment(0);
    metrics::counter!("duckgate_token_share_timeouts_total").increment(0);
    metrics::counter!("duckgate_sts_unusable_answers_total").increment(0);
    for outcome in ["ok", "refused"] {
        metrics::counter!("duckgate_config_reloads_total", "outcome" => outcome).increment(0);
    }
    metrics::gauge!("duckgate_queries_running").set(0.0);
    metrics::gauge!("duckgate_spool_bytes").set(0.0);
}

/// Records requests by route and status, and their duration.
pub async fn track(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let method = req.method().to_string();
    let response = next.run(req).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("duckgate_http_requests_total", "route" => route.clone(), "method" => method, "status" => status)
        .increment(1);
    metrics::histogram!("duckgate_http_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    response
}

/// Prometheus metrics.
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", body = String, content_type = "text/plain")))]
pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let h = &state.health;
    metrics::gauge!("duckgate_pool_size").set(h.pool.size.load(Ordering::Relaxed) as f64);
    metrics::gauge!("duckgate_pool_in_use").set(h.pool.in_use.load(Ordering::Relaxed) as f64);
    metrics::gauge!("duckgate_pool_waiting").set(h.pool.waiting.load(Ordering::Relaxed) as f64);
    metrics::gauge!("duckgate_uptime_seconds").set(h.started.elapsed().as_secs_f64());
    let memory = crate::engine::memory::usage();
    metrics::gauge!("duckgate_duckdb_memory_bytes").set(memory.bytes as f64);
    metrics::gauge!("duckgate_duckdb_memory_ceiling_bytes").set(memory.ceiling as f64);
    metrics::counter!("duckgate_duckdb_memory_refusals_total").absolute(memory.refusals);
    let creds = h.credentials.load();
    let now = SystemTime::now();
    metrics::gauge!("duckgate_credential_epoch").set(creds.epoch as f64);
    for s in &creds.secrets {
        if let Some(secs) = s.seconds_to_expiry(now) {
            metrics::gauge!("duckgate_credentials_seconds_to_expiry", "secret" => s.name.clone())
                .set(secs);
        }
        metrics::gauge!("duckgate_credentials_consecutive_failures", "secret" => s.name.clone())
            .set(s.consecutive_failures as f64);
    }
    for d in h.dependencies.load().iter() {
        metrics::gauge!("duckgate_dependency_up", "dependency" => d.name.clone())
            .set(if d.is_up() { 1.0 } else { 0.0 });
        metrics::counter!("duckgate_dependency_failures_total", "dependency" => d.name.clone())
            .absolute(d.failures());
    }
    let body = state.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
