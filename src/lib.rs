//! duckgate: a SQL gateway over an embedded DuckDB, with three doors (HTTP,
//! Arrow Flight SQL, the PostgreSQL wire protocol) over one core, per-caller
//! grants, row filters and masks, and S3 credentials kept fresh.
//!
//! The layers, from the outside in (each imports only those below it):
//!
//! - [`api`], [`flight`], [`pg`]: the doors. Each turns its protocol into an
//!   [`identity::Identity`] and a [`core::Request`], and the answer back into
//!   its protocol (problem documents, gRPC status, SQLSTATEs).
//! - [`core`]: one way to run a statement ([`core::Core::run`],
//!   [`core::Core::submit`]) and what every door shares
//!   ([`core::state::AppState`]).
//! - [`identity`]: who a caller is (query tokens, OIDC JWTs) and what its
//!   roles let it read ([`identity::roles`]).
//! - [`statements`]: async statements, their spool and, with replicas, their
//!   shared state in PostgreSQL and S3.
//! - [`engine`]: DuckDB: set-up and lockdown, admission and the pool, the
//!   guard, the row policy, execution, and the error catalogue
//!   ([`problems`]). No protocol.
//! - [`encode`]: result formats (JSON, NDJSON, CSV, Arrow). No protocol.
//! - [`credentials`]: credential sources, the rotator, the secrets.
//! - [`config`]: every setting and every declared role and grant, validated
//!   once; [`state`]: the health snapshot probes read with atomic loads;
//!   [`telemetry`]: logging; [`sql`]: quoting SQL text.
//!
//! [`run`] wires them together (`startup`, in named steps) and serves until
//! the shutdown future resolves.
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod api;
pub mod cli;
pub mod config;
pub mod core;
pub mod credentials;
pub mod encode;
pub mod engine;
pub mod flight;
pub mod identity;
pub mod pg;
pub mod sql;
mod startup;
pub mod state;
pub mod statements;
pub mod telemetry;

/// The error catalogue, where every door reads it ([`engine::problems`]).
pub use engine::problems;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use anyhow::Context as _;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, ConfigError};
use crate::identity::tokens::Tokens;

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
/// [`identity::directory`]).
pub fn load_tokens(config: &Config, addr: SocketAddr) -> Result<Tokens, ConfigError> {
    identity::tokens::load(&config.auth, addr)
}

/// The registry of running queries, with the audit file if one is set.
pub(crate) fn audit_registry(config: &Config) -> anyhow::Result<engine::queries::Registry> {
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
    startup::serve_until(config, listener, Box::pin(shutdown), metrics).await
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
        startup::serve_until(config, listener, Box::pin(shutdown), metrics).await
    })
}

/// Serves `app` (the probes) on `addr` from a thread of its own with a
/// single-threaded event loop: a probe there never waits for the main
/// runtime's workers, which carry every query's I/O. The thread keeps the
/// process's normal priority (query threads run niced).
pub(crate) fn spawn_probe_listener(
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
