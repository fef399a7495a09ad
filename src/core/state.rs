//! What every door shares: one pointer to the gateway's parts (engine,
//! health, rotator, identities, statements, settings), cloned per call.
//! Built once by the composition root (`startup.rs`); HTTP, Flight SQL
//! and the PostgreSQL door each take it, none owns it.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::credentials::Rotator;
use crate::engine::Engine;
use crate::state::Health;

/// Shared state of every door: one pointer, cloned for every call.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl AppState {
    /// The state every handler shares.
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }
}

impl Shared {
    /// The one way to run a statement ([`crate::core`]).
    pub fn core(&self) -> crate::core::Core {
        crate::core::Core {
            ctx: self.statements_context(),
            config: self.config.clone(),
        }
    }

    /// What the statement domain works with, from this gateway.
    pub fn statements_context(&self) -> crate::statements::Context {
        let limits = &self.config.limits;
        crate::statements::Context {
            statements: self.statements.clone(),
            queries: self.queries.clone(),
            runner: crate::statements::Runner {
                engine: self.engine.clone(),
                rotator: self.rotator.clone(),
                health: self.health.clone(),
                shutdown: self.shutdown.clone(),
            },
            max_rows: limits.max_rows,
            stall_timeout: std::time::Duration::from_millis(limits.send_stall_timeout_ms),
            max_value_bytes: limits.max_value_bytes,
            orphan_grace: std::time::Duration::from_millis(
                self.config.statements.spool_orphan_grace_ms,
            ),
            download_limit: std::time::Duration::from_millis(limits.default_query_timeout_ms()),
        }
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// What [`AppState`] holds.
pub struct Shared {
    /// Database, query pool and control connection.
    pub engine: Arc<Engine>,
    /// The health snapshot.
    pub health: Arc<Health>,
    /// The credential lifecycle.
    pub rotator: Arc<Rotator>,
    /// Who may call what (tokens, roles, OIDC, the URL key); its directory
    /// is replaced whole by a reload ([`crate::identity::directory`]).
    pub identities: Arc<crate::identity::Authenticator>,
    /// What a reload reads again.
    pub reload: crate::identity::directory::Sources,
    /// Every setting.
    pub config: Arc<Config>,
    /// Prometheus renderer.
    pub metrics: PrometheusHandle,
    /// Cancelled when shutdown's grace period ends: running queries stop.
    pub shutdown: CancellationToken,
    /// The queries running now (`GET /queries`, `DELETE /queries/{id}`).
    pub queries: Arc<crate::engine::queries::Registry>,
    /// Async statements and their spool.
    pub statements: Arc<crate::statements::Statements>,
    /// The operator-declared catalogs attached at start.
    pub catalogs: Arc<Vec<crate::engine::catalogs::Catalog>>,
    /// The address the API listens on.
    pub addr: std::net::SocketAddr,
}
