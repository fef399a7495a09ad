//! duckgate: an HTTP SQL gateway over an embedded DuckDB that keeps S3 STS
//! credentials fresh.
//!
//! - `config`: every setting (S3 secrets in `config::s3`), with defaults and
//!   validation.
//! - `api`: axum routes (query, health, admin, metrics, docs), content
//!   negotiation, errors, auth: everything HTTP.
//! - `engine`: DuckDB: database set-up and lockdown, the query pool, the
//!   statement guard, execution. No HTTP.
//! - `encode`: result formats (JSON, NDJSON, CSV, Arrow). No HTTP.
//! - `credentials`: credential sources, the rotator, the secret DDL.
//! - `state`: the health snapshot that probes read with atomic loads.
//! - `telemetry`: logging.
//!
//! [`run`] wires them together and serves until the shutdown future resolves.
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod api;
pub mod cli;
pub mod config;
pub mod credentials;
pub mod encode;
pub mod engine;
pub mod state;
pub mod statements;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::api::auth::Tokens;
use crate::api::AppState;
use crate::config::{Config, ConfigError};
use crate::credentials::Rotator;
use crate::engine::Engine;
use crate::state::Health;

/// A multi-threaded tokio runtime whose threads (workers, which run short
/// queries inline, and blocking threads, which run the rest and the guard)
/// have the stack DuckDB's deepest recursion needs
/// ([`engine::nesting::STACK_BYTES`]; tokio's default of 2 MiB let one
/// deeply nested JSON document abort the process). A program that serves
/// the gateway on a runtime of its own builds it from this; the engine
/// refuses to open on a thread with less.
pub fn runtime_builder() -> tokio::runtime::Builder {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder
        .enable_all()
        .thread_stack_size(engine::nesting::STACK_BYTES);
    builder
}

/// Checks the token settings against the listen address and reads the
/// tokens, their files included (read again by a reload; see
/// [`api::auth::reload`]).
pub fn load_tokens(config: &Config, addr: SocketAddr) -> Result<Tokens, ConfigError> {
    api::auth::load(&config.auth, addr)
}

/// The registry of running queries, with the audit file if one is set.
fn audit_registry(config: &Config) -> anyhow::Result<engine::queries::Registry> {
    let registry = engine::queries::Registry::new(config.limits.listed_sql_bytes as usize);
    Ok(match &config.limits.audit_log {
        None => registry,
        Some(path) => {
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| {
                    ConfigError::new(
                        "DUCKGATE_AUDIT_LOG",
                        format!("cannot open {}: {}", path.display(), e.kind()),
                    )
                })?;
            registry.with_audit_file(file)
        }
    })
}

/// Builds the gateway on `listener` and serves until `shutdown` resolves,
/// then drains: stops accepting, lets running queries finish within the
/// grace period, interrupts the rest. Metrics go to the process's global
/// recorder ([`api::metrics::recorder`]).
pub async fn run(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    run_with_metrics(config, listener, shutdown, api::metrics::recorder()).await
}

/// [`run`], with `/metrics` rendering `metrics`: for a program that runs
/// several gateways in one process (the tests do), each with a recorder of
/// its own ([`api::metrics::new_recorder`]) installed as the local recorder
/// of every thread that gateway runs on (`metrics::set_default_local_recorder`),
/// since the gateway records through the `metrics` macros.
pub async fn run_with_metrics(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    serve_until(config, listener, Box::pin(shutdown), metrics).await
}

/// [`run_with_metrics`] on `runtime`, blocking the calling thread until
/// `stop` fires or is dropped. Neither async nor generic, so a program that
/// calls it (the tests do) links the gateway compiled here instead of
/// compiling its futures again.
pub fn run_blocking(
    runtime: &tokio::runtime::Runtime,
    config: Config,
    listener: std::net::TcpListener,
    stop: tokio::sync::oneshot::Receiver<()>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    runtime.block_on(async move {
        listener
            .set_nonblocking(true)
            .context("the listener: non-blocking mode")?;
        let listener = TcpListener::from_std(listener).context("the listener")?;
        let shutdown = async move {
            let _ = stop.await;
        };
        serve_until(config, listener, Box::pin(shutdown), metrics).await
    })
}

/// The body of [`run_with_metrics`], not generic over the shutdown future,
/// so it is compiled once whatever future callers pass.
async fn serve_until(
    config: Config,
    listener: TcpListener,
    shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    config.validate()?;
    let addr = listener
        .local_addr()
        .context("reading the listen address")?;
    let tokens = load_tokens(&config, addr)?;
    let mut secrets = config.s3.secrets()?;
    // What the gateway writes to S3 itself: the data of catalogs declared
    // read-write. Each secret's STS session policy allows writes there only.
    // And the shared result spool, when it is on S3.
    let writes: Vec<String> = config
        .catalogs()?
        .iter()
        .filter(|c| !c.read_only)
        .flat_map(|c| c.s3_locations().into_iter().map(str::to_string))
        .chain(
            config
                .statements
                .spool_url
                .iter()
                .filter(|u| u.starts_with("s3://"))
                .cloned(),
        )
        .collect();
    for secret in &mut secrets {
        secret.write_scope = writes.clone();
    }
    api::metrics::register_zeroes(&secrets.iter().map(|s| s.name.clone()).collect::<Vec<_>>());
    let timing = config.s3.timing(config.longest_time_limit());
    let config = Arc::new(config);

    let health = Arc::new(Health::new(Engine::duckdb_version()));
    let engine = {
        let (config, health) = (config.clone(), health.clone());
        let needs_httpfs = !secrets.is_empty();
        tokio::task::spawn_blocking(move || Engine::open(&config, health, needs_httpfs))
            .await
            .context("opening the database")??
    };
    let engine = Arc::new(engine);

    let rotator = Arc::new(
        Rotator::new(
            secrets,
            engine.control_raw.clone(),
            health.clone(),
            timing,
            Duration::from_millis(config.server.test_control_stall_ms),
        )
        .await,
    );
    rotator
        .install_all(5)
        .await
        .map_err(|e| anyhow::anyhow!("installing S3 credentials at start-up: {e}"))?;
    let catalogs = {
        let (engine, prefixes, config) = (engine.clone(), rotator.s3_prefixes(), config.clone());
        let specs = config.catalogs()?;
        let dirs: Vec<String> = specs.iter().flat_map(|s| s.local_dirs()).collect();
        tokio::task::spawn_blocking(move || {
            let catalogs = engine.attach_catalogs(&config, &specs, &prefixes)?;
            // Queries never read the S3 spool (every token's results).
            let refused: Vec<String> = config
                .statements
                .spool_url
                .iter()
                .filter(|u| u.starts_with("s3://"))
                .cloned()
                .collect();
            let writable: Vec<String> = catalogs
                .iter()
                .filter(|c| !c.read_only)
                .map(|c| c.name.clone())
                .collect();
            engine.lock_down(&prefixes, &dirs, &refused, &writable)?;
            Ok::<_, engine::EngineError>(catalogs)
        })
        .await
        .context("attaching catalogs and locking the database down")??
    };
    engine
        .pool
        .warm_up()
        .await
        .map_err(|e| anyhow::anyhow!("opening pool connections: {e}"))?;

    let shared = match &config.statements.state_dsn()? {
        None => None,
        Some(dsn) => Some(Arc::new(
            statements::shared::Shared::connect(
                dsn.expose_secret(),
                config.statements.state_ca_file.as_deref(),
                Duration::from_millis(config.statements.replica_stale_ms),
                health.dependency("shared_state"),
                health.replica.clone(),
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("connecting to the shared state (DUCKGATE_STATE_DSN): {e}")
            })?,
        )),
    };
    let (spool_dir, s3_spool) = match config.statements.spool_url.as_deref() {
        Some(url) if url.starts_with("s3://") => (
            engine.data_dir.join("spool"),
            Some(Arc::new(
                statements::s3::S3Spool::new(url, rotator.clone(), health.dependency("spool"))
                    .map_err(|e| ConfigError::new("DUCKGATE_SPOOL_URL", e))?,
            )),
        ),
        Some(dir) => (std::path::PathBuf::from(dir), None),
        None => (engine.data_dir.join("spool"), None),
    };
    let statements = {
        let s = &config.statements;
        let spool = statements::spool::Spool::open(
            spool_dir,
            s.spool_bytes,
            s.spool_statement_bytes,
            s.spool_token_bytes,
        )
        .context("preparing the spool directory")?;
        statements::Statements::new_shared(
            spool,
            statements::Settings {
                ttl: Duration::from_millis(s.statement_ttl_ms),
                max_statements: s.max_statements as usize,
                max_per_token: s.max_statements_per_token as usize,
                max_timeout: config.max_statement_timeout(),
                max_wait: Duration::from_millis(s.max_statement_wait_ms),
                share: statements::Settings::share_of(config.pool_size(), s.statement_pool_share),
                token_share: statements::Settings::token_share_of(
                    statements::Settings::share_of(config.pool_size(), s.statement_pool_share),
                    tokens.query.len(),
                ),
            },
            shared.clone(),
            s3_spool,
        )
    };
    let share = engine.pool.set_token_share(
        config.engine.max_queries_per_token.map(|n| n as usize),
        tokens.query.len(),
    );
    tracing::debug!(?share, "queries per token");
    let s3_share = engine.pool.set_s3_share(
        config.engine.max_s3_queries.map(|n| n as usize),
        catalogs.iter().map(|c| c.name.clone()).collect(),
    );
    tracing::debug!(s3_share, "queries that read S3 at once");
    let drain = CancellationToken::new();
    let rotator_stop = CancellationToken::new();
    let state = AppState::new(api::Shared {
        engine: engine.clone(),
        health: health.clone(),
        rotator: rotator.clone(),
        tokens: Arc::new(arc_swap::ArcSwap::from_pointee(tokens)),
        config: config.clone(),
        metrics,
        shutdown: drain.clone(),
        queries: Arc::new(audit_registry(&config)?),
        statements: statements.clone(),
        catalogs: Arc::new(catalogs),
        addr,
    });
    let reload_task = tokio::spawn(api::auth::watch(
        state.tokens.clone(),
        config.auth.clone(),
        addr,
        rotator_stop.clone(),
    ));
    let replicas_task = shared.clone().map(|shared| {
        tokio::spawn(api::replicas::run(
            state.clone(),
            shared,
            rotator_stop.clone(),
        ))
    });
    let catalog_task = tokio::spawn(engine::catalogs::watch(
        engine.db.clone(),
        state.catalogs.to_vec(),
        health.clone(),
        rotator_stop.clone(),
    ));
    let probe_app = api::probe_router(state.clone());
    let app = api::router(state);

    let rotator_task = tokio::spawn(rotator.clone().run(rotator_stop.clone()));
    let sweep_task = tokio::spawn(statements.clone().sweep(rotator_stop.clone()));
    let spill_task = config
        .engine
        .max_temp_directory_size
        .as_deref()
        .and_then(config::byte_size)
        .map(|cap| {
            tokio::spawn(engine::spill::watch(
                engine.pool.clone(),
                engine.data_dir.join("tmp"),
                cap,
                rotator_stop.clone(),
            ))
        });

    health
        .ready
        .store(true, std::sync::atomic::Ordering::Relaxed);
    tracing::info!(
        duckdb = %health.duckdb_version,
        pool_size = config.pool_size(),
        policy = ?config.engine.policy,
        secrets = ?rotator.names(),
        "listening on http://{addr}"
    );

    let grace = Duration::from_millis(config.server.shutdown_grace_ms);
    let graceful = {
        let (health, drain) = (health.clone(), drain.clone());
        async move {
            shutdown.await;
            tracing::info!(
                grace_ms = grace.as_millis() as u64,
                "shutting down: no new connections, draining"
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
        }
    };
    let limits = api::server::ConnectionLimits {
        header_read_timeout: Duration::from_millis(config.limits.header_read_timeout_ms),
        max_connections: config.limits.max_connections as usize,
    };
    let stop_probes = CancellationToken::new();
    let probe_thread = config
        .server
        .probe_listen
        .map(|addr| spawn_probe_listener(addr, probe_app, limits, stop_probes.clone()))
        .transpose()?;
    let stop_accepting = CancellationToken::new();
    let server = api::server::serve(listener, app, limits, stop_accepting.clone());
    tokio::pin!(server);
    // Serve until the signal; then stop accepting and let open connections
    // finish, up to a hard cap, so a peer that keeps a connection open
    // cannot hold the process.
    let tracker = tokio::select! {
        t = &mut server => t,
        _ = graceful => {
            stop_accepting.cancel();
            server.await
        }
    };
    if tokio::time::timeout(grace + Duration::from_secs(5), tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the grace period; exiting anyway");
    }
    drain.cancel();
    rotator_stop.cancel();
    let _ = rotator_task.await;
    let _ = reload_task.await;
    let _ = sweep_task.await;
    let _ = catalog_task.await;
    if let Some(t) = replicas_task {
        let _ = t.await;
    }
    if let Some(t) = spill_task {
        let _ = t.await;
    }
    engine.pool.close();
    // The probes answered (not ready) through the drain; now they stop too.
    stop_probes.cancel();
    if let Some(t) = probe_thread {
        let _ = tokio::task::spawn_blocking(move || t.join()).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// Serves `app` (the probes) on `addr` from a thread of its own with a
/// single-threaded event loop: a probe there never waits for the main
/// runtime's workers, which carry every query's I/O. The thread keeps the
/// process's normal priority (query threads run niced).
fn spawn_probe_listener(
    addr: std::net::SocketAddr,
    app: axum::Router,
    limits: api::server::ConnectionLimits,
    stop: CancellationToken,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let listener = std::net::TcpListener::bind(addr)
        .with_context(|| format!("DUCKGATE_PROBE_LISTEN: cannot listen on {addr}"))?;
    listener
        .set_nonblocking(true)
        .context("DUCKGATE_PROBE_LISTEN: a non-blocking listener")?;
    let local = listener.local_addr().context("reading the probe address")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("the probe listener's event loop")?;
    let thread = std::thread::Builder::new()
        .name("duckgate-probes".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::error!(error = %e, "the probe listener could not start");
                        return;
                    }
                };
                let tracker = api::server::serve(listener, app, limits, stop).await;
                let _ = tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await;
            })
        })
        .context("starting the probe thread")?;
    tracing::info!("probe listener on http://{local} (/healthz, /readyz only)");
    Ok(thread)
}
