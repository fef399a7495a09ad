//! Start-up, in named steps, each taking what the ones before made:
//!
//! 1. [`Config::resolve`]: every setting checked, the TOML file read once,
//!    secrets, catalogs and time limits derived once;
//! 2. [`open_identities`]: the OIDC issuer's keys, when one is configured;
//!    [`open_engine`]: DuckDB opened, its pool shaped by the shares;
//! 3. [`install_credentials`]: the rotator installs every S3 secret;
//! 4. [`attach_and_lock_down`]: catalogs attached, the database locked;
//! 5. [`open_statements`]: the shared state, the spool and the statements;
//! 6. [`open_flight`]: the Flight SQL listener, when one is configured
//!    (bound before the loops start, so a refused address stops nothing),
//!    and [`open_pg`]: the PostgreSQL wire listener, likewise;
//! 7. [`Tasks::start`]: the background loops;
//! 8. [`serve`]: the API until the signal, then the drain.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use secrecy::ExposeSecret;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::api::{self, AppState};
use crate::config::{self, Config, ConfigError, Resolved};
use crate::credentials::Rotator;
use crate::engine::{self, catalogs::Catalog, Engine};
use crate::identity::directory::{self, Directory};
use crate::identity::oidc::Verifier;
use crate::identity::Authenticator;
use crate::state::Health;
use crate::statements::{self, Statements};

mod serve;

use serve::serve;

/// The body of [`crate::run_with_metrics`], not generic over the shutdown
/// future, so it is compiled once whatever future callers pass.
pub(crate) async fn serve_until(
    config: Config,
    listener: TcpListener,
    shutdown: std::pin::Pin<Box<dyn Future<Output = ()> + Send>>,
    metrics: metrics_exporter_prometheus::PrometheusHandle,
) -> anyhow::Result<()> {
    let addr = listener
        .local_addr()
        .context("reading the listen address")?;
    let plan = config.resolve()?;
    let reload = reload_sources(&plan, addr)?;
    let directory = Directory::read(&reload, plan.roles.clone())?;
    api::metrics::register_zeroes(
        &plan
            .secrets
            .iter()
            .map(|s| s.name.clone())
            .collect::<Vec<_>>(),
    );
    let health = Arc::new(Health::new(Engine::duckdb_version()));
    let oidc = open_identities(&plan, &health).await?;
    let parties = crate::identity::parties(&directory.tokens, oidc.is_some());
    let engine = open_engine(&plan, &health, parties).await?;
    let rotator = install_credentials(&plan, &engine, &health).await?;
    let catalogs = attach_and_lock_down(&plan, &engine, &rotator).await?;
    open_roles(&plan, &engine, &catalogs, &directory).await?;
    let statements = open_statements(&plan, &engine, &rotator, &health, parties).await?;
    let config = plan.config;
    let state = AppState::new(api::Shared {
        engine: engine.clone(),
        health: health.clone(),
        rotator: rotator.clone(),
        identities: Arc::new(Authenticator::new(
            Arc::new(arc_swap::ArcSwap::from_pointee(directory)),
            oidc,
        )),
        reload,
        queries: Arc::new(crate::audit_registry(&config)?),
        config,
        metrics,
        shutdown: CancellationToken::new(),
        statements,
        catalogs: Arc::new(catalogs),
        addr,
    });
    let flight = open_flight(&state).await?;
    let pg = open_pg(&state).await?;
    let tasks = Tasks::start(&state);
    serve(state, listener, shutdown, tasks, flight, pg).await
}

/// Step 6: the Arrow Flight SQL listener on `DUCKGATE_FLIGHT_LISTEN`, over
/// the same state as the HTTP API (tokens, guard, pool, registry).
async fn open_flight(state: &AppState) -> anyhow::Result<Option<crate::flight::Listener>> {
    match state.config.server.flight_listen {
        Some(addr) => Ok(Some(
            crate::flight::Listener::start(state.clone(), addr).await?,
        )),
        None => Ok(None),
    }
}

/// Step 6 too: the PostgreSQL wire listener on `DUCKGATE_PG_LISTEN`.
async fn open_pg(state: &AppState) -> anyhow::Result<Option<crate::pg::Listener>> {
    match state.config.server.pg_listen {
        Some(addr) => Ok(Some(crate::pg::Listener::start(state.clone(), addr).await?)),
        None => Ok(None),
    }
}

/// Step 2a: the verifier of the OIDC issuer's JWTs, with the issuer's keys
/// fetched once. A key file that cannot be read stops start-up (the
/// operator's to fix); an issuer out of reach does not: query tokens keep
/// working, JWTs are refused until the keys arrive (the refresh retries),
/// and the dependency `oidc` says so in `/healthz` and `/readyz`.
async fn open_identities(
    plan: &Resolved,
    health: &Health,
) -> anyhow::Result<Option<Arc<Verifier>>> {
    let Some(settings) = plan.oidc.clone() else {
        return Ok(None);
    };
    let issuer = settings.issuer.clone();
    let verifier = Arc::new(
        Verifier::new(settings, health.dependency("oidc"))
            .map_err(|e| anyhow::anyhow!("OIDC (DUCKGATE_OIDC_ISSUER): {e}"))?,
    );
    match verifier.refresh("start-up").await {
        Ok(()) => tracing::info!(
            issuer = %issuer,
            keys = verifier.keys().keys.len(),
            "OIDC: bearer JWTs of the issuer are identities"
        ),
        Err(e) if verifier.from_file() => {
            return Err(ConfigError::new("DUCKGATE_OIDC_JWKS_FILE", e).into())
        }
        Err(e) => tracing::error!(
            issuer = %issuer,
            error.cause = %e,
            "OIDC: the issuer's keys could not be fetched at start-up: bearer JWTs are refused until a refresh gets them (query tokens work)"
        ),
    }
    Ok(Some(verifier))
}

/// Step 2b: DuckDB, with the pool shaped by the parties and the lakes.
async fn open_engine(
    plan: &Resolved,
    health: &Arc<Health>,
    parties: usize,
) -> anyhow::Result<Arc<Engine>> {
    let shares = engine::admission::Shares {
        per_token: plan.config.engine.max_queries_per_token.map(|n| n as usize),
        tokens: parties,
        s3: plan.config.engine.max_s3_queries.map(|n| n as usize),
        lakes: plan.catalogs.iter().map(|c| c.name.clone()).collect(),
    };
    let (config, health) = (plan.config.clone(), health.clone());
    let needs_httpfs = !plan.secrets.is_empty();
    let engine =
        tokio::task::spawn_blocking(move || Engine::open(&config, health, needs_httpfs, shares))
            .await
            .context("opening the database")??;
    Ok(Arc::new(engine))
}

/// Step 3: the rotator, with every secret's first credentials installed.
async fn install_credentials(
    plan: &Resolved,
    engine: &Engine,
    health: &Arc<Health>,
) -> anyhow::Result<Arc<Rotator>> {
    let rotator = Arc::new(
        Rotator::new(
            plan.secrets.clone(),
            engine.control_raw.clone(),
            health.clone(),
            plan.timing,
            control_stall(&plan.config),
        )
        .await,
    );
    rotator
        .install_all(5)
        .await
        .map_err(|e| anyhow::anyhow!("installing S3 credentials at start-up: {e}"))?;
    Ok(rotator)
}

/// How long each install holds the control connection: a test hook,
/// compiled in only with the feature `test-hooks`.
fn control_stall(config: &Config) -> Duration {
    #[cfg(feature = "test-hooks")]
    return Duration::from_millis(config.server.test_control_stall_ms);
    #[cfg(not(feature = "test-hooks"))]
    {
        let _ = config;
        Duration::ZERO
    }
}

/// Step 4: the declared catalogs attached, then the lockdown (no client
/// attaches, reads the spool, or writes where it may not), then the pool's
/// connections opened.
async fn attach_and_lock_down(
    plan: &Resolved,
    engine: &Arc<Engine>,
    rotator: &Rotator,
) -> anyhow::Result<Vec<Catalog>> {
    let (engine2, prefixes, config) = (engine.clone(), rotator.s3_prefixes(), plan.config.clone());
    let specs = plan.catalogs.clone();
    let dirs: Vec<String> = specs.iter().flat_map(|s| s.local_dirs()).collect();
    let catalogs = tokio::task::spawn_blocking(move || {
        let catalogs = engine2.attach_catalogs(&config, &specs, &prefixes)?;
        // Queries never read the S3 spool (every token's results).
        let refused: Vec<String> = config.s3_spool().map(str::to_string).into_iter().collect();
        let writable: Vec<String> = catalogs
            .iter()
            .filter(|c| !c.read_only)
            .map(|c| c.name.clone())
            .collect();
        engine2.lock_down(&prefixes, &dirs, &refused, &writable)?;
        Ok::<_, engine::EngineError>(catalogs)
    })
    .await
    .context("attaching catalogs and locking the database down")??;
    engine
        .pool
        .warm_up()
        .await
        .map_err(|e| anyhow::anyhow!("opening pool connections: {e}"))?;
    Ok(catalogs)
}

/// What a reload reads again: the token and key settings, the TOML file
/// (its other sections as start-up read them, to tell a change that needs
/// a restart), the named sources start-up creates.
fn reload_sources(
    plan: &Resolved,
    addr: std::net::SocketAddr,
) -> anyhow::Result<directory::Sources> {
    let file = plan
        .config
        .s3
        .config_file
        .as_deref()
        .map(config::ConfigFile::read)
        .transpose()?;
    Ok(directory::Sources {
        auth: plan.config.auth.clone(),
        config_file: plan.config.s3.config_file.clone(),
        fixed: directory::fixed_sections(file.as_ref())?,
        sources: plan
            .catalogs
            .iter()
            .flat_map(|c| c.sources.iter().cloned())
            .collect(),
        addr,
    })
}

/// Step 4b: the roles of the TOML file, each grant checked against the
/// catalog as attached: a grant that names nothing that exists stops
/// start-up, naming it (a reload checks the same way).
async fn open_roles(
    plan: &Resolved,
    engine: &Arc<Engine>,
    catalogs: &[Catalog],
    directory: &Directory,
) -> anyhow::Result<()> {
    if !directory.roles.any() {
        return Ok(());
    }
    directory::check_roles(engine, catalogs, &directory.roles).await?;
    for role in &plan.roles {
        for decision in ["allowed", "refused"] {
            metrics::counter!("duckgate_grant_decisions_total", "role" => role.name.clone(), "decision" => decision)
                .increment(0);
        }
    }
    tracing::info!(roles = plan.roles.len(), "roles and grants checked");
    Ok(())
}

/// Step 5: the state replicas share (if any), the spool (local, or S3 for
/// every replica), and the statements kept in them.
async fn open_statements(
    plan: &Resolved,
    engine: &Engine,
    rotator: &Arc<Rotator>,
    health: &Arc<Health>,
    parties: usize,
) -> anyhow::Result<Arc<Statements>> {
    let config = &plan.config;
    let s = &config.statements;
    let shared = match &plan.state_dsn {
        None => None,
        Some(dsn) => Some(Arc::new(
            statements::shared::Shared::connect(
                dsn.expose_secret(),
                s.state_pool_size as usize,
                s.state_ca_file.as_deref(),
                Duration::from_millis(s.replica_stale_ms),
                health.dependency("shared_state"),
                health.replica.clone(),
            )
            .await
            .map_err(|e| {
                anyhow::anyhow!("connecting to the shared state (DUCKGATE_STATE_DSN): {e}")
            })?,
        )),
    };
    let (spool_dir, s3_spool) = match (config.s3_spool(), s.spool_url.as_deref()) {
        (Some(url), _) => (
            engine.data_dir.join("spool"),
            Some(Arc::new(
                statements::s3::S3Spool::new(url, rotator.clone(), health.dependency("spool"))
                    .map_err(|e| ConfigError::new("DUCKGATE_SPOOL_URL", e))?,
            )),
        ),
        (None, Some(dir)) => (std::path::PathBuf::from(dir), None),
        (None, None) => (engine.data_dir.join("spool"), None),
    };
    let spool = statements::spool::Spool::open(
        spool_dir,
        s.spool_bytes,
        s.spool_statement_bytes,
        s.spool_token_bytes,
    )
    .context("preparing the spool directory")?;
    let share = statements::Settings::share_of(plan.pool_size, s.statement_pool_share);
    Ok(Statements::new_shared(
        spool,
        statements::Settings {
            ttl: Duration::from_millis(s.statement_ttl_ms),
            max_statements: s.max_statements as usize,
            max_per_token: s.max_statements_per_token as usize,
            max_timeout: plan.max_statement_timeout,
            max_wait: Duration::from_millis(s.max_statement_wait_ms),
            share,
            token_share: statements::Settings::token_share_of(share, parties),
        },
        shared,
        s3_spool,
    ))
}

/// Step 7: the loops that run beside the API, stopped together.
struct Tasks {
    stop: CancellationToken,
    handles: Vec<JoinHandle<()>>,
}

impl Tasks {
    fn start(state: &AppState) -> Self {
        let stop = CancellationToken::new();
        let mut handles = vec![
            tokio::spawn(state.rotator.clone().run(stop.clone())),
            tokio::spawn(api::admin::watch(state.clone(), stop.clone())),
            tokio::spawn(state.statements.clone().sweep(stop.clone())),
            tokio::spawn(engine::catalogs::watch(
                state.engine.db.clone(),
                state.catalogs.to_vec(),
                state.health.clone(),
                stop.clone(),
            )),
        ];
        if let Some(verifier) = state.identities.oidc().cloned() {
            handles.push(tokio::spawn(verifier.run(stop.clone())));
        }
        if let Some(shared) = state.statements.shared.clone() {
            handles.push(tokio::spawn(crate::statements::replication::run(
                state.statements_context(),
                Arc::new(state.clone()),
                shared,
                stop.clone(),
            )));
        }
        if let Some(cap) = state
            .config
            .engine
            .max_temp_directory_size
            .as_deref()
            .and_then(config::byte_size)
        {
            handles.push(tokio::spawn(engine::spill::watch(
                state.engine.pool.clone(),
                state.engine.data_dir.join("tmp"),
                cap,
                stop.clone(),
            )));
        }
        Self { stop, handles }
    }

    async fn stop(self) {
        self.stop.cancel();
        for h in self.handles {
            let _ = h.await;
        }
    }
}
