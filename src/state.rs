//! The health snapshot: written by its owners (the pool's counters, the
//! rotator), read by `/healthz`, `/readyz` and `/metrics` with atomic loads
//! only. Nothing here waits on the pool, a connection, or a lock either holds.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use serde::Serialize;

/// Pool figures, updated by the pool wrapper on every acquire and release.
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Connections in the pool.
    pub size: AtomicU64,
    /// Extra connections that may replace stuck ones.
    pub spares: AtomicU64,
    /// Connections checked out by a request.
    pub in_use: AtomicU64,
    /// Requests waiting for a connection.
    pub waiting: AtomicU64,
    /// Requests that gave up waiting (503).
    pub acquire_timeouts: AtomicU64,
    /// Requests refused at once: their expected wait was beyond the
    /// acquire timeout (503).
    pub shed: AtomicU64,
    /// The acquire timeout, in milliseconds.
    pub acquire_timeout_ms: AtomicU64,
    /// The recent mean time a connection is held, in microseconds (0: none
    /// came back yet).
    pub hold_mean_us: AtomicU64,
    /// When a connection last came back, in milliseconds since start.
    pub last_release_ms: AtomicU64,
    /// Connections queries that read S3 may hold at once.
    pub s3_share: AtomicU64,
    /// Connections held by queries that read S3.
    pub s3_in_use: AtomicU64,
    /// Connections interrupted but not yet back from DuckDB, whose capacity
    /// was given to a fresh connection (at most the pool's spares).
    pub stuck: AtomicU64,
    /// Connections replaced that way since start.
    pub replaced_total: AtomicU64,
    /// Connections stuck with no spare left: capacity lost until they return.
    pub lost: AtomicU64,
    /// Stuck connections (replaced or lost) by the token whose query holds
    /// them, so health can say whose work pinned the spares. Changes only
    /// when a connection gets stuck or comes back.
    pub stuck_by_token: ArcSwap<std::collections::BTreeMap<String, u64>>,
}

impl PoolCounters {
    /// Counts one more (`up`) or one fewer stuck connection of `token`.
    pub fn count_stuck(&self, token: &str, up: bool) {
        self.stuck_by_token.rcu(|m| {
            let mut m = std::collections::BTreeMap::clone(m);
            let n = m.entry(token.to_string()).or_insert(0);
            *n = if up { *n + 1 } else { n.saturating_sub(1) };
            if *n == 0 {
                m.remove(token);
            }
            m
        });
    }
}

/// Decrements a counter when dropped.
pub struct CounterGuard<'a>(&'a AtomicU64);

impl<'a> CounterGuard<'a> {
    /// Increments `counter`; dropping the guard decrements it.
    pub fn new(counter: &'a AtomicU64) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        Self(counter)
    }
}

impl Drop for CounterGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Like [`CounterGuard`] but owning, so it can move into a blocking task.
pub struct OwnedCounterGuard(Arc<Health>, fn(&Health) -> &AtomicU64);

impl OwnedCounterGuard {
    /// Increments the counter `field` picks from `health`; dropping the
    /// guard decrements it.
    pub fn new(health: Arc<Health>, field: fn(&Health) -> &AtomicU64) -> Self {
        field(&health).fetch_add(1, Ordering::Relaxed);
        Self(health, field)
    }
}

impl Drop for OwnedCounterGuard {
    fn drop(&mut self) {
        (self.1)(&self.0).fetch_sub(1, Ordering::Relaxed);
    }
}

/// The state of one secret's credentials, as the rotator last published it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct SecretState {
    /// DuckDB secret name.
    pub name: String,
    /// `assume-role`, `web-identity` or `static`.
    pub source: String,
    /// Scope prefixes.
    pub scope: Vec<String>,
    /// Increments on every installed rotation of this secret.
    pub epoch: u64,
    /// When the installed credentials expire (RFC 3339), if they do.
    pub expires_at: Option<String>,
    /// The same instant as `expires_at`, for computing time left.
    #[serde(skip)]
    pub expires_at_system: Option<SystemTime>,
    /// When the installed credentials were installed (RFC 3339).
    pub rotated_at: Option<String>,
    /// Last four characters of the access key id.
    pub key_id_suffix: Option<String>,
    /// The last refresh error (its class only), cleared by a success.
    pub last_error: Option<String>,
    /// Consecutive failed refreshes.
    pub consecutive_failures: u32,
    /// After a failure: the earliest instant of the next automatic attempt.
    #[serde(skip)]
    pub next_attempt_at: Option<SystemTime>,
    /// Successful rotations since start.
    pub rotations: u64,
}

impl SecretState {
    /// Seconds until expiry (negative once expired), if the credentials expire.
    pub fn seconds_to_expiry(&self, now: SystemTime) -> Option<f64> {
        self.expires_at_system
            .map(|exp| match exp.duration_since(now) {
                Ok(d) => d.as_secs_f64(),
                Err(e) => -e.duration().as_secs_f64(),
            })
    }
}

/// Everything the rotator publishes, swapped as one value.
#[derive(Debug, Clone, Default)]
pub struct CredentialsView {
    /// Every secret's state, in configuration order.
    pub secrets: Vec<SecretState>,
    /// Sum of all epochs: increments whenever any secret rotates.
    pub epoch: u64,
    /// Set by the rotator once any secret's credentials have expired, so the
    /// query path needs no clock.
    pub any_expired: bool,
}

/// One service the gateway depends on (the shared state, the S3 spool, a
/// lake's catalog), as the code that talks to it last found it: written on
/// every success and failure, read by the probes and `/metrics` with
/// atomic loads.
#[derive(Debug)]
pub struct Dependency {
    /// What it is, e.g. `shared_state`, `spool`, `catalog:lake`.
    pub name: String,
    /// Whether its last use succeeded.
    up: AtomicBool,
    /// When it last went up or down, in milliseconds since the Unix epoch.
    since_ms: AtomicU64,
    /// Failed uses since start.
    failures: AtomicU64,
    /// The last failure, while down (no connection string, no secret: the
    /// callers pass their scrubbed error text).
    last_error: ArcSwap<Option<String>>,
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Dependency {
    fn new(name: String) -> Self {
        Self {
            name,
            up: AtomicBool::new(true),
            since_ms: AtomicU64::new(unix_ms()),
            failures: AtomicU64::new(0),
            last_error: ArcSwap::from_pointee(None),
        }
    }

    /// A use succeeded.
    pub fn ok(&self) {
        if !self.up.swap(true, Ordering::Relaxed) {
            self.since_ms.store(unix_ms(), Ordering::Relaxed);
            self.last_error.store(Arc::new(None));
            tracing::info!(dependency = %self.name, "dependency is back");
        }
    }

    /// A use failed, for `why`.
    pub fn failed(&self, why: &str) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.last_error.store(Arc::new(Some(why.to_string())));
        if self.up.swap(false, Ordering::Relaxed) {
            self.since_ms.store(unix_ms(), Ordering::Relaxed);
            tracing::warn!(dependency = %self.name, error.cause = %why, "dependency is failing");
        }
    }

    /// Whether its last use succeeded.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    /// When it last went up or down (ms since the Unix epoch).
    pub fn since_ms(&self) -> u64 {
        self.since_ms.load(Ordering::Relaxed)
    }

    /// Failed uses since start.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// The last failure, while down.
    pub fn last_error(&self) -> Option<String> {
        Option::clone(&self.last_error.load())
    }
}

/// `<host name>-<8 random hex digits>`.
fn replica_name() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && h.len() <= 63)
        .unwrap_or_else(|| "duckgate".into());
    let random = uuid::Uuid::new_v4().simple().to_string();
    format!("{host}-{}", &random[..8])
}

/// The process-wide health snapshot.
pub struct Health {
    /// When the snapshot was made at start-up; uptime counts from it.
    pub started: Instant,
    /// The gateway's version.
    pub version: &'static str,
    /// The embedded DuckDB's version.
    pub duckdb_version: String,
    /// This process among the replicas: its host name (a pod's name) and
    /// a random part, so a restarted pod is a new replica. Every access
    /// line, `/healthz` and the shared state name it.
    pub replica: String,
    /// Pool figures.
    pub pool: PoolCounters,
    /// Serving: set after start-up, cleared when shutdown begins.
    pub ready: AtomicBool,
    /// Set when shutdown begins.
    pub shutting_down: AtomicBool,
    /// What the rotator last published.
    pub credentials: ArcSwap<CredentialsView>,
    /// The services the gateway depends on, registered at start-up.
    pub dependencies: ArcSwap<Vec<Arc<Dependency>>>,
}

impl Health {
    /// A snapshot of a gateway not ready yet, with no credentials published.
    pub fn new(duckdb_version: String) -> Self {
        Self {
            started: Instant::now(),
            version: env!("CARGO_PKG_VERSION"),
            duckdb_version,
            replica: replica_name(),
            pool: PoolCounters::default(),
            ready: AtomicBool::new(false),
            shutting_down: AtomicBool::new(false),
            credentials: ArcSwap::from_pointee(CredentialsView::default()),
            dependencies: ArcSwap::from_pointee(Vec::new()),
        }
    }

    /// Registers a dependency named `name` (once, at start-up) and hands
    /// its state to the code that uses it.
    pub fn dependency(&self, name: impl Into<String>) -> Arc<Dependency> {
        let d = Arc::new(Dependency::new(name.into()));
        self.dependencies.rcu(|all| {
            let mut all = Vec::clone(all);
            all.push(d.clone());
            all
        });
        d
    }

    /// The credential epoch a query runs under: one atomic load.
    pub fn epoch(&self) -> u64 {
        self.credentials.load().epoch
    }
}
