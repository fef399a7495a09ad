//! Step 8: serving until the signal, then the drain (HTTP, Flight SQL and
//! PostgreSQL doors, statements, the loops and the probes), in named steps.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::Tasks;
use crate::api::{self, AppState};
use crate::config::Config;
use crate::engine::{self, Engine};
use crate::state::Health;
use crate::statements;

/// Step 8: serves until `shutdown`, then drains: readiness off, new work
/// (queries, statements, Flight SQL statements) refused with 503
/// `shutting-down` (Flight: UNAVAILABLE), while running queries and
/// statements finish within the grace period, their results spooled and
/// their ends published, and clients keep polling and paging
/// ([`drain_statements`]) and fetching Flight results ([`drain_flight`]). Then it stops
/// accepting, lets open connections finish, interrupts what still runs at
/// the end of the grace period (a statement ends `failed` with
/// `shutting-down`, published before the replica leaves), and stops the
/// loops and the probes.
pub(super) async fn serve(
    state: AppState,
    listener: TcpListener,
    shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    tasks: Tasks,
    flight: Option<crate::flight::Listener>,
    pg: Option<crate::pg::Listener>,
) -> anyhow::Result<()> {
    let (config, health, engine) = (
        state.config.clone(),
        state.health.clone(),
        state.engine.clone(),
    );
    let addr: SocketAddr = state.addr;
    let drain = state.shutdown.clone();
    let statements = state.statements_context();
    let probe_app = api::probe_router(state.clone());
    let secrets = state.rotator.names();
    let app = api::router(state);
    announce(&health, &config, addr, &secrets);

    let grace = Duration::from_millis(config.server.shutdown_grace_ms);
    let graceful = begin_drain(shutdown, grace, health.clone(), drain.clone());
    let limits = api::server::ConnectionLimits {
        header_read_timeout: Duration::from_millis(config.limits.header_read_timeout_ms),
        max_connections: config.limits.max_connections as usize,
    };
    let stop_probes = CancellationToken::new();
    let probe_thread = config
        .server
        .probe_listen
        .map(|addr| crate::spawn_probe_listener(addr, probe_app, limits, stop_probes.clone()))
        .transpose()?;
    let stop_accepting = CancellationToken::new();
    let server = api::server::serve(listener, app, limits, stop_accepting.clone());
    tokio::pin!(server);
    // Serve until the signal; then, still serving polls and pages, let the
    // statements drain; then stop accepting and let open connections
    // finish, up to a hard cap, so a peer that keeps a connection open
    // cannot hold the process.
    let mut pg_stopped = None;
    let mut pg = pg;
    let mut deadline = tokio::time::Instant::now() + grace;
    let tracker = tokio::select! {
        t = &mut server => t,
        end = graceful => {
            deadline = end;
            // Flight SQL, like HTTP, takes no new statement from here on
            // (`flight::results`) but serves the rest, the DoGet of a
            // result that runs among it, until its statements end too.
            // The PostgreSQL door takes no new connection; its open ones
            // finish.
            pg_stopped = pg.take().map(|p| tokio::spawn(p.stop(grace + Duration::from_secs(5))));
            tokio::select! {
                t = &mut server => t,
                () = async {
                    drain_statements(&statements, end, &drain).await;
                    drain_flight(&statements.queries, end).await;
                } => {
                    stop_accepting.cancel();
                    server.await
                }
            }
        }
    };
    let cap =
        deadline.saturating_duration_since(tokio::time::Instant::now()) + Duration::from_secs(5);
    stop_doors(cap, tracker, flight, pg_stopped, pg).await;
    drain.cancel();
    stop_the_rest(&statements, tasks, &engine, &stop_probes, probe_thread).await;
    tracing::info!("stopped");
    Ok(())
}

/// Ready, and says so with what serves.
fn announce(health: &Health, config: &Config, addr: SocketAddr, secrets: &[String]) {
    health
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        duckdb = %health.duckdb_version,
        replica = %health.replica,
        pool_size = config.pool_size(),
        policy = ?config.engine.policy,
        secrets = ?secrets,
        "listening on http://{addr}"
    );
}

/// Waits for `shutdown`, then begins the drain: not ready, shutting down,
/// and `drain` cancelled (what still runs interrupted) after `grace`. Ends
/// with the drain's deadline.
async fn begin_drain(
    shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    grace: Duration,
    health: Arc<Health>,
    drain: CancellationToken,
) -> tokio::time::Instant {
    shutdown.await;
    tracing::info!(
        grace_ms = grace.as_millis() as u64,
        "shutting down: new work refused, running queries and statements drain"
    );
    health
        .ready
        .store(false, std::sync::atomic::Ordering::Relaxed);
    health
        .shutting_down
        .store(true, std::sync::atomic::Ordering::Relaxed);
    // After the grace period, interrupt whatever still runs.
    tokio::spawn(async move {
        tokio::time::sleep(grace).await;
        drain.cancel();
    });
    tokio::time::Instant::now() + grace
}

/// Neither door accepts now; their open calls and connections finish,
/// within `cap`.
async fn stop_doors(
    cap: Duration,
    tracker: tokio_util::task::TaskTracker,
    flight: Option<crate::flight::Listener>,
    pg_stopped: Option<JoinHandle<()>>,
    mut pg: Option<crate::pg::Listener>,
) {
    let flight_stopped = flight.map(|f| tokio::spawn(f.stop(cap)));
    let http = tokio::time::timeout(cap, tracker.wait()).await;
    if http.is_err() {
        tracing::warn!("connections still open after the grace period; exiting anyway");
    }
    if let Some(f) = flight_stopped {
        let _ = f.await;
    }
    if let Some(p) = pg_stopped {
        let _ = p.await;
    } else if let Some(p) = pg.take() {
        p.stop(Duration::from_secs(5)).await;
    }
}

/// After the doors: the interrupted statements end, the loops stop, the
/// pool closes, and the probes, which answered (not ready) through the
/// drain, stop too.
async fn stop_the_rest(
    statements: &statements::Context,
    tasks: Tasks,
    engine: &Engine,
    stop_probes: &CancellationToken,
    probe_thread: Option<std::thread::JoinHandle<()>>,
) {
    // Statements interrupted at the end of the grace period end `failed`
    // with `shutting-down`; their ends are published by the replicas loop
    // before it leaves.
    let interrupted = statements.statements.list(None);
    let ended = futures::future::join_all(interrupted.iter().map(|s| s.done.cancelled()));
    if tokio::time::timeout(Duration::from_secs(5), ended)
        .await
        .is_err()
    {
        tracing::warn!("statements still running 5 s after they were interrupted; they are lost");
    }
    tasks.stop().await;
    engine.pool.close();
    stop_probes.cancel();
    if let Some(t) = probe_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
}

/// The Flight SQL statements' drain: each one running, or waiting for its
/// DoGet, when the drain began (or started just before) ends and is
/// fetched, until `deadline`. A result's query stays registered until
/// its stream ends (fetched, cancelled, or dropped unfetched when its
/// ticket expires), so the registry says what is left. (HTTP's `/query`
/// needs no such wait: its answer is the open connection itself.)
async fn drain_flight(queries: &engine::queries::Registry, deadline: tokio::time::Instant) {
    let mut said: Option<tokio::time::Instant> = None;
    loop {
        let left = queries
            .list()
            .iter()
            .filter(|r| r.api.starts_with("flight"))
            .count();
        if left == 0 {
            return;
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            tracing::warn!(
                flight_statements = left,
                "the grace period ended before every Flight SQL statement was fetched"
            );
            return;
        }
        if said.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            said = Some(now);
            tracing::info!(flight_statements = left, "draining Flight SQL statements");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What keeps the drain going: statements unfinished, ended but not
/// published, and (where results leave with the process) running when the
/// drain began and not read since.
fn left_to_drain(
    ctx: &statements::Context,
    running: &[Arc<statements::Statement>],
    local_results: bool,
) -> (usize, usize, usize) {
    use std::sync::atomic::Ordering;
    let kept = ctx.statements.list(None);
    let unfinished = kept.iter().filter(|s| !s.done.is_cancelled()).count();
    let unpublished = kept
        .iter()
        .filter(|s| {
            s.done.is_cancelled()
                && s.claimed.load(Ordering::SeqCst)
                && !s.published.load(Ordering::SeqCst)
        })
        .count();
    let unread = if local_results {
        running
            .iter()
            .filter(|s| {
                !s.collected.load(Ordering::SeqCst) && kept.iter().any(|k| Arc::ptr_eq(k, s))
            })
            .count()
    } else {
        0
    };
    (unfinished, unpublished, unread)
}

/// The statements' drain: every statement of this replica ends (its result
/// spooled, uploaded to the S3 spool if there is one) and, with shared
/// state, its end is published, so that every replica answers it. Where
/// results leave with the process (no S3 spool), each statement still
/// running when the drain began is also read (a page of its result, its
/// status once it failed, or its DELETE), so a client polling through the
/// drain gets it. At `deadline` what still runs is interrupted (`drain`):
/// those statements end `failed` with `shutting-down`, and that end is
/// published and may be read for up to 5 s more.
async fn drain_statements(
    ctx: &statements::Context,
    deadline: tokio::time::Instant,
    drain: &CancellationToken,
) {
    let local_results = ctx.statements.s3.is_none();
    let running: Vec<Arc<statements::Statement>> = ctx
        .statements
        .list(None)
        .into_iter()
        .filter(|s| !s.done.is_cancelled())
        .collect();
    let mut said: Option<tokio::time::Instant> = None;
    loop {
        let (unfinished, unpublished, unread) = left_to_drain(ctx, &running, local_results);
        if unfinished + unpublished + unread == 0 {
            tracing::info!("drained: every statement ended and is answered");
            return;
        }
        if unpublished > 0 {
            if let Some(shared) = &ctx.statements.shared {
                if let Err(e) = statements::replication::publish_all(ctx, shared).await {
                    tracing::warn!(error.cause = %e, "publishing the statements' ends failed; retried");
                }
            }
        }
        let now = tokio::time::Instant::now();
        if now >= deadline && !drain.is_cancelled() {
            tracing::warn!(
                unfinished,
                unpublished,
                unread,
                "the grace period ended before every statement drained: what runs is interrupted"
            );
            drain.cancel();
        }
        if now >= deadline + Duration::from_secs(5) {
            tracing::warn!(
                unfinished,
                unpublished,
                unread,
                "exiting with statements not drained"
            );
            return;
        }
        if said.is_none_or(|at| now.duration_since(at) >= Duration::from_secs(1)) {
            said = Some(now);
            tracing::info!(unfinished, unpublished, unread, "draining statements");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
