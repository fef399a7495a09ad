//! `GET /metrics` (Prometheus text) and the HTTP request metrics layer.
//! Gauges are read from the health snapshot at scrape time; nothing here
//! touches the pool.

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
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

/// HELP text for every metric (a test checks that every series scraped
/// has it), and the process metrics' own.
pub fn describe() {
    metrics::describe_counter!(
        "duckgate_audit_records_lost_total",
        "Audit records that could not be written (the audit log's disk full or failing)."
    );
    metrics::describe_counter!(
        "duckgate_auth_failures_total",
        "Requests refused for their token, by route and reason (missing, wrong, signature; a bearer JWT's: jwt_expired, jwt_audience, ...)."
    );
    metrics::describe_counter!(
        "duckgate_oidc_jwks_fetches_total",
        "Fetches of the OIDC issuer's keys (on the refresh interval, at start-up, for an unknown kid), by outcome."
    );
    metrics::describe_counter!("duckgate_config_reloads_total", "Reloads of the tokens, admin token and signing key (SIGHUP or a changed file), by outcome.");
    metrics::describe_counter!(
        "duckgate_dependency_failures_total",
        "Failed uses of a dependency (shared_state, spool, catalog:<name>) since start."
    );
    metrics::describe_counter!(
        "duckgate_duckdb_memory_refusals_total",
        "Allocations DuckDB was refused at the memory ceiling."
    );
    metrics::describe_counter!(
        "duckgate_http_requests_total",
        "HTTP requests answered, by route, method and status."
    );
    metrics::describe_counter!(
        "duckgate_http_client_timeouts_total",
        "Answers 504 query-timeout at the time limit the client asked for (timeout_ms), by route: the client's choice, not a fault of the gateway (they count in duckgate_http_requests_total too)."
    );
    metrics::describe_counter!(
        "duckgate_pool_acquire_timeouts_total",
        "Requests that found no pooled connection within the acquire timeout."
    );
    metrics::describe_counter!(
        "duckgate_pool_connections_replaced_total",
        "Pooled connections closed and opened again after a fault."
    );
    metrics::describe_counter!(
        "duckgate_pool_shed_total",
        "Requests refused at once because the expected wait passed the acquire timeout."
    );
    metrics::describe_counter!(
        "duckgate_pool_s3_share_timeouts_total",
        "Queries that read S3 and found the S3 share of the pool taken for the acquire timeout."
    );
    metrics::describe_counter!(
        "duckgate_queries_inline_moved_total",
        "Inline queries moved to a pooled thread, by reason."
    );
    metrics::describe_counter!(
        "duckgate_grant_decisions_total",
        "Statements of identities that roles confine, by the roles held (joined with +) and the grants' decision (allowed, refused)."
    );
    metrics::describe_counter!(
        "duckgate_share_loans_total",
        "Queries and statements that ran past their token's share of the pool on a connection nobody else was waiting for."
    );
    metrics::describe_counter!(
        "duckgate_share_reclaims_total",
        "Borrowed connections taken back for a token within its share: the borrowing query, whose answer had not started, runs again from its own token's queue."
    );
    metrics::describe_counter!(
        "duckgate_queries_inline_total",
        "Queries run inline on the request's worker."
    );
    metrics::describe_counter!(
        "duckgate_describes_remembered_total",
        "Statements described (a Flight SQL prepare, a PostgreSQL Describe) from what the connection found describing the same text before, not planned again."
    );
    metrics::describe_counter!(
        "duckgate_queries_total",
        "Queries (POST /query) ended, by outcome."
    );
    metrics::describe_counter!(
        "duckgate_query_cancellations_total",
        "Queries cancelled on request (DELETE /queries/{id})."
    );
    metrics::describe_counter!(
        "duckgate_rotations_total",
        "Credential rotations of each S3 secret, by outcome."
    );
    metrics::describe_counter!(
        "duckgate_spill_cap_interrupts_total",
        "Queries interrupted because the spill directory passed its cap."
    );
    metrics::describe_counter!(
        "duckgate_spool_orphans_removed_total",
        "S3 spool objects no kept statement named, removed by the orphan sweep."
    );
    metrics::describe_counter!(
        "duckgate_statements_total",
        "Async statements (POST /statements) ended, by outcome."
    );
    metrics::describe_counter!(
        "duckgate_statements_lost_total",
        "Statements this replica marked lost in the shared state, by reason: their replica was taken for dead (replica_gone), or left the shared state, shutting down, without ending them (shutdown). Each is counted once, by the replica that marked it."
    );
    metrics::describe_counter!(
        "duckgate_statement_lost_answers_total",
        "Answers 410 statement-lost this replica gave (polls, pages)."
    );
    metrics::describe_counter!(
        "duckgate_admin_fanout_unanswered_total",
        "Replicas that did not answer a command asked of every replica (POST /admin/secrets/rotate, /admin/reload) within the wait, or that it could not reach, by command."
    );
    metrics::describe_counter!(
        "duckgate_storage_full_total",
        "Writes refused because the disk under a store (spool) was full."
    );
    metrics::describe_counter!(
        "duckgate_sts_unusable_answers_total",
        "STS answers whose credentials could not be used."
    );
    metrics::describe_counter!(
        "duckgate_token_share_timeouts_total",
        "Queries that waited the acquire timeout for their token's share of the pool."
    );
    metrics::describe_counter!(
        "duckgate_role_share_timeouts_total",
        "Queries that waited the acquire timeout for their role's queries_at_once, by role."
    );
    metrics::describe_gauge!(
        "duckgate_build_info",
        "Always 1; the labels say the gateway's and DuckDB's versions."
    );
    metrics::describe_gauge!(
        "duckgate_credential_epoch",
        "The credential epoch: bumped at every installed rotation."
    );
    metrics::describe_gauge!(
        "duckgate_credentials_consecutive_failures",
        "Failed refreshes in a row of each S3 secret."
    );
    metrics::describe_gauge!(
        "duckgate_credentials_seconds_to_expiry",
        "Seconds until each S3 secret's installed credentials expire."
    );
    metrics::describe_gauge!(
        "duckgate_dependency_up",
        "1 while a dependency's last use succeeded, else 0."
    );
    metrics::describe_gauge!(
        "duckgate_duckdb_threads",
        "DuckDB's scheduler threads now, the caller's included: its background threads stop while only short reads run."
    );
    metrics::describe_gauge!(
        "duckgate_duckdb_memory_bytes",
        metrics::Unit::Bytes,
        "Bytes DuckDB holds now."
    );
    metrics::describe_gauge!(
        "duckgate_duckdb_memory_ceiling_bytes",
        metrics::Unit::Bytes,
        "The memory ceiling DuckDB's allocations are held under."
    );
    metrics::describe_gauge!("duckgate_pool_in_use", "Pooled connections in use.");
    metrics::describe_gauge!("duckgate_pool_size", "Pooled connections that exist.");
    metrics::describe_gauge!(
        "duckgate_pool_waiting",
        "Requests waiting for a pooled connection."
    );
    metrics::describe_gauge!(
        "duckgate_queries_running",
        "Queries and statements running now."
    );
    metrics::describe_gauge!(
        "duckgate_spool_bytes",
        metrics::Unit::Bytes,
        "Bytes of results in the local spool."
    );
    metrics::describe_gauge!(
        "duckgate_spool_s3_bytes",
        metrics::Unit::Bytes,
        "Bytes under the S3 spool's prefix at the last orphan sweep."
    );
    metrics::describe_gauge!(
        "duckgate_spool_s3_objects",
        "Objects under the S3 spool's prefix at the last orphan sweep."
    );
    metrics::describe_gauge!("duckgate_statements", "Kept async statements, by state.");
    metrics::describe_gauge!(
        "duckgate_uptime_seconds",
        metrics::Unit::Seconds,
        "Seconds since the gateway started."
    );
    metrics::describe_histogram!(
        "duckgate_http_request_duration_seconds",
        metrics::Unit::Seconds,
        "Time to answer an HTTP request (to its response head), by route."
    );
    metrics::describe_histogram!(
        "duckgate_query_duration_seconds",
        metrics::Unit::Seconds,
        "Time a query ran, by outcome."
    );
    metrics::describe_histogram!(
        "duckgate_rotation_duration_seconds",
        metrics::Unit::Seconds,
        "Time a credential rotation took."
    );
    metrics_process::Collector::default().describe();
}

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
    describe();
    metrics::gauge!(
        "duckgate_build_info",
        "version" => env!("CARGO_PKG_VERSION"),
        "duckdb_version" => crate::engine::Engine::duckdb_version()
    )
    .set(1.0);
    for outcome in crate::problems::outcomes() {
        metrics::counter!("duckgate_queries_total", "outcome" => outcome).increment(0);
        metrics::counter!("duckgate_statements_total", "outcome" => outcome).increment(0);
    }
    // Creating the handle registers the histogram (no sample recorded).
    let _ = metrics::histogram!("duckgate_query_duration_seconds", "outcome" => "ok");
    for state in crate::statements::State::ALL {
        metrics::gauge!("duckgate_statements", "state" => state.as_str()).set(0.0);
    }
    for route in ["query", "admin"] {
        for reason in ["missing", "wrong"] {
            metrics::counter!("duckgate_auth_failures_total", "route" => route, "reason" => reason)
                .increment(0);
        }
    }
    metrics::counter!("duckgate_auth_failures_total", "route" => "query", "reason" => "signature")
        .increment(0);
    for reason in crate::identity::oidc::Refusal::REASONS {
        metrics::counter!("duckgate_auth_failures_total", "route" => "query", "reason" => *reason)
            .increment(0);
    }
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
    metrics::counter!("duckgate_describes_remembered_total").increment(0);
    metrics::counter!("duckgate_share_loans_total").increment(0);
    metrics::counter!("duckgate_share_reclaims_total").increment(0);
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
    for reason in ["replica_gone", "shutdown"] {
        metrics::counter!("duckgate_statements_lost_total", "reason" => reason).increment(0);
    }
    for route in CLIENT_TIMEOUT_ROUTES {
        metrics::counter!("duckgate_http_client_timeouts_total", "route" => route).increment(0);
    }
    metrics::counter!("duckgate_statement_lost_answers_total").increment(0);
    for command in ["rotate", "reload"] {
        metrics::counter!("duckgate_admin_fanout_unanswered_total", "command" => command)
            .increment(0);
    }
    for outcome in ["ok", "refused"] {
        metrics::counter!("duckgate_config_reloads_total", "outcome" => outcome).increment(0);
    }
    metrics::gauge!("duckgate_queries_running").set(0.0);
    metrics::gauge!("duckgate_spool_bytes").set(0.0);
}

/// Records requests by route and status, and their duration: a plain
/// layer rather than `from_fn`, which boxes the rest of the stack and its
/// future for every request.
#[derive(Clone, Copy, Default)]
pub struct TrackLayer;

impl<S> tower::Layer<S> for TrackLayer {
    type Service = Track<S>;

    fn layer(&self, inner: S) -> Track<S> {
        Track { inner }
    }
}

/// See [`TrackLayer`].
#[derive(Clone)]
pub struct Track<S> {
    inner: S,
}

impl<S> tower::Service<Request> for Track<S>
where
    S: tower::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Tracked<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request) -> Self::Future {
        let route = req.extensions().get::<MatchedPath>().cloned();
        let method = req.method().clone();
        // The handler's future does the work (axum's `call` only makes
        // it), so the scope around it covers the request's reading.
        let inner = self.inner.call(req);
        Tracked {
            started: Instant::now(),
            route,
            method,
            inner: TIME_LIMIT_ASKED.scope(Cell::new(None), inner),
        }
    }
}

/// The routes whose answers may be a 504 `query-timeout` at the client's
/// `timeout_ms`: their `duckgate_http_client_timeouts_total` exists from
/// start-up.
const CLIENT_TIMEOUT_ROUTES: [&str; 3] = ["/query", "/query/{format}", "/statements"];

tokio::task_local! {
    /// The time limit the client asked for (`timeout_ms`), in ms, noted by
    /// the request's reader ([`note_time_limit_asked`]) for [`Tracked`],
    /// which tells a 504 at the client's own limit from one at the
    /// gateway's or a role's.
    static TIME_LIMIT_ASKED: Cell<Option<u64>>;
}

/// Notes the time limit the client asked for in this request (see
/// [`TIME_LIMIT_ASKED`]); nothing outside a tracked request.
pub(crate) fn note_time_limit_asked(ms: Option<u64>) {
    let _ = TIME_LIMIT_ASKED.try_with(|asked| asked.set(ms));
}

/// Marks a 504 `query-timeout` answer with the time limit the query ran
/// past, in ms (put there by the problem's response, `api/error.rs`).
#[derive(Debug, Clone, Copy)]
pub struct TimedOut(pub u64);

pin_project_lite::pin_project! {
    /// A request's answer, recorded when it is ready.
    pub struct Tracked<F> {
        #[pin]
        inner: tokio::task::futures::TaskLocalFuture<Cell<Option<u64>>, F>,
        started: Instant,
        route: Option<MatchedPath>,
        method: axum::http::Method,
    }
}

impl<F, E> std::future::Future for Tracked<F>
where
    F: std::future::Future<Output = Result<Response, E>>,
{
    type Output = Result<Response, E>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let mut this = self.project();
        let out = std::task::ready!(this.inner.as_mut().poll(cx));
        if let Ok(response) = &out {
            let route = this.route.as_ref().map_or("unmatched", |p| p.as_str());
            let (requests, duration) = http_handles(route, this.method, response.status().as_u16());
            requests.increment(1);
            duration.record(this.started.elapsed().as_secs_f64());
            // A 504 at the very limit the client asked for: its choice.
            let asked = this.inner.take_value().and_then(Cell::into_inner);
            if let (Some(TimedOut(limit)), Some(asked)) =
                (response.extensions().get::<TimedOut>(), asked)
            {
                if response.status() == axum::http::StatusCode::GATEWAY_TIMEOUT && *limit == asked {
                    metrics::counter!("duckgate_http_client_timeouts_total", "route" => route.to_owned())
                        .increment(1);
                }
            }
        }
        std::task::Poll::Ready(out)
    }
}

/// The request counter and duration histogram of a route, method and
/// status, looked up by label once per thread rather than per request (a
/// thread records into one recorder for its life: the process's, or its
/// gateway's in a program that runs several).
fn http_handles(
    route: &str,
    method: &axum::http::Method,
    status: u16,
) -> (metrics::Counter, metrics::Histogram) {
    type ByRoute = std::collections::HashMap<String, HttpHandles>;
    thread_local! {
        static HANDLES: std::cell::RefCell<ByRoute> = Default::default();
    }
    HANDLES.with_borrow_mut(|handles| {
        // Bounded: routes are the route table's; methods and statuses few.
        if handles.len() > 256 {
            handles.clear();
        }
        if !handles.contains_key(route) {
            let owned = route.to_owned();
            let duration = metrics::histogram!("duckgate_http_request_duration_seconds", "route" => owned.clone());
            handles.insert(
                owned,
                HttpHandles {
                    duration,
                    requests: Vec::new(),
                },
            );
        }
        let h = handles.get_mut(route).expect("inserted above");
        let counter = match h
            .requests
            .iter()
            .find(|(m, s, _)| m == method && *s == status)
        {
            Some((_, _, c)) => c.clone(),
            None => {
                let c = metrics::counter!("duckgate_http_requests_total", "route" => route.to_owned(), "method" => method.to_string(), "status" => status.to_string());
                if h.requests.len() < 64 {
                    h.requests.push((method.clone(), status, c.clone()));
                }
                c
            }
        };
        (counter, h.duration.clone())
    })
}

/// A route's cached metric handles.
struct HttpHandles {
    duration: metrics::Histogram,
    /// By method and status.
    requests: Vec<(axum::http::Method, u16, metrics::Counter)>,
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
    metrics::gauge!("duckgate_duckdb_threads").set(state.engine.pool.duckdb_threads() as f64);
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
    // The process's CPU, memory, threads and file descriptors.
    metrics_process::Collector::default().collect();
    let body = state.metrics.render();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}
