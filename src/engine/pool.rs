//! The bounded query pool. Capacity is a semaphore of `size` permits: a
//! request waits at most the acquire timeout for one (an async wait, never a
//! blocked runtime thread), then takes a connection from deadpool.
//!
//! A connection can be held inside DuckDB long after its query was
//! interrupted (an HTTP read in flight inside httpfs does not see the
//! interrupt). Such a lease can be *replaced*: its permit goes back to the
//! semaphore at once, deadpool (sized with room for `spares` extra
//! connections) opens a fresh connection for the next request, and the stuck
//! one is closed when it finally returns. Replacements are bounded by
//! `spares`, counted in the health snapshot and in `/metrics`.
//!
//! Overload is shed at once: a request that finds every permit taken
//! estimates its wait (the requests queued ahead of it, plus itself, times
//! the recent mean time a permit is held, over the pool size). When that is
//! beyond what it may wait, it is refused now instead of after the whole
//! acquire timeout, so time in the queue stays bounded by the expected wait
//! and the pool's throughput goes to requests that will be served.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult, Timeouts};
use deadpool::Runtime;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::engine::ffi::{RawConnection, RawDatabase};
use crate::engine::guard::Accepted;
use crate::state::{CounterGuard, Health, OwnedCounterGuard};

/// The share of the pool that queries reading S3 may use, and what tells
/// such queries apart (fixed at start, see [`Shares`]).
struct S3Share {
    /// `share` permits: S3 queries that may hold a connection at once.
    gate: Arc<Semaphore>,
    /// Operator-declared catalogs (lakes): their tables live on S3.
    lakes: Vec<String>,
}

/// One pooled connection.
pub struct Slot {
    /// Runs client statements once the guard accepted them.
    pub conn: crate::engine::ffi::Connection,
    /// Parses client statements for the guard (never executes them).
    pub raw: RawConnection,
    /// Interrupts whatever `conn` runs.
    pub interrupt: Arc<duckdb::InterruptHandle>,
    /// Statement texts the guard accepted on this connection, with the
    /// catalog epoch it judged them in.
    pub verdicts: std::collections::HashMap<String, Verdict>,
    /// Bumped by every statement that may change the catalog (any that is
    /// not read-only), on any connection: a verdict from an older epoch may
    /// hold stale column types, so it is judged again.
    pub catalog_epoch: Arc<std::sync::atomic::AtomicU64>,
    /// The epoch this connection's prepared statements were made in: a
    /// statement prepared before a write may hold what binding computed
    /// from the data then (e.g. `stats()`), so the cache is flushed.
    pub prepared_epoch: u64,
    /// DuckDB's id of `conn` (`current_connection_id()`), by which the
    /// progress shim finds its context.
    pub connection_id: u64,
    /// The database's token for the CSV pipe (see `pipe::attach`).
    pub pipe_token: u64,
    /// Query texts whose CSV COPY was checked on this connection: the COPY,
    /// or `None` when DuckDB's parse did not match (a pure parse, so it
    /// never goes stale).
    pub copies: std::collections::HashMap<String, Option<String>>,
    /// DuckDB's progress tracking on `conn`: off for inline runs.
    pub progress: Option<crate::engine::progress::ProgressSwitch>,
}

/// The guard's verdict on one text, remembered on its connection.
pub struct Verdict {
    /// The catalog epoch the guard judged the text in.
    pub epoch: u64,
    /// What the guard found.
    pub accepted: Arc<Accepted>,
    /// The text's last run here was short and its answer small: the next
    /// may run on the request's own thread (see `execute::inline`).
    pub quick: bool,
}

impl Slot {
    /// Tracks the progress of the next statement on `conn`, or not.
    pub fn track_progress(&mut self, on: bool) {
        if let Some(p) = &mut self.progress {
            p.set(on);
        }
    }

    /// The verdict on `sql`, if it is current (judged in `epoch`).
    pub fn verdict(&self, sql: &str, epoch: u64) -> Option<&Verdict> {
        self.verdicts.get(sql).filter(|v| v.epoch == epoch)
    }

    /// Whether `sql` may run on the request's own thread: judged read-only
    /// in the current epoch, and its last run here was quick.
    pub fn is_quick(&self, sql: &str) -> bool {
        let epoch = self.catalog_epoch.load(std::sync::atomic::Ordering::SeqCst);
        self.prepared_epoch == epoch
            && self
                .verdict(sql, epoch)
                .is_some_and(|v| v.quick && v.accepted.read_only)
    }
}

/// Why the pool could not open or hand out a connection.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    /// Opening a connection failed.
    #[error("opening a pooled connection: {0}")]
    Connect(#[from] duckdb::Error),
    /// Opening the guard's parse connection failed.
    #[error("opening a parse connection: {0}")]
    Parse(#[from] crate::engine::ffi::FfiError),
    /// Setting up a new connection failed.
    #[error("setting up a pooled connection: {0}")]
    Setup(String),
    /// deadpool could not be built (a configuration error).
    #[error("building the pool: {0}")]
    Build(String),
    /// deadpool failed to hand out a connection (e.g. creating one failed).
    #[error("taking a pooled connection: {0}")]
    Take(String),
}

/// Prepared statements cached per connection.
pub const STATEMENT_CACHE: usize = 64;

/// Texts whose S3 classification is remembered (a pure parse: it never goes
/// stale, the lakes being fixed at start).
const CLASSIFIED_TEXTS: usize = 1024;
/// Longer texts are classified each time (the memory stays bounded).
const CLASSIFIED_TEXT_BYTES: usize = 4096;

/// The S3 classifier's parse connection, and what it already classified.
struct Classifier {
    raw: RawConnection,
    seen: std::collections::HashMap<String, bool>,
}

/// Opens and checks pooled connections for deadpool.
pub struct Manager {
    db: Arc<RawDatabase>,
    catalog_epoch: Arc<std::sync::atomic::AtomicU64>,
    /// Set on every new connection and its guard twin: where unqualified
    /// names resolve and land (see [`crate::engine::CLIENT_SCHEMA`]).
    search_path: Option<String>,
}

impl managed::Manager for Manager {
    type Type = Slot;
    type Error = PoolError;

    async fn create(&self) -> Result<Slot, PoolError> {
        let conn = self.db.connect()?;
        let raw = self.db.connect_raw()?;
        if let Some(path) = &self.search_path {
            // The guard binds on `raw`: both must resolve names alike.
            let set = format!("SET search_path = {}", crate::engine::sql_string(path));
            conn.execute_batch(&set)?;
            raw.execute(&set).map_err(PoolError::Setup)?;
        }
        let interrupt = conn.interrupt_handle();
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let connection_id = conn.connection_id()?;
        let progress = crate::engine::progress::track(&self.db, connection_id);
        if progress.is_none() {
            tracing::warn!(
                connection_id,
                "DuckDB's query progress is not tracked on a pooled connection"
            );
        }
        Ok(Slot {
            conn,
            raw,
            interrupt,
            verdicts: Default::default(),
            catalog_epoch: self.catalog_epoch.clone(),
            prepared_epoch: 0,
            connection_id,
            pipe_token: crate::engine::pipe::token(&self.db),
            copies: Default::default(),
            progress,
        })
    }

    async fn recycle(&self, slot: &mut Slot, _: &Metrics) -> RecycleResult<PoolError> {
        // Each request is its own transaction; a connection that somehow kept
        // one open is not handed to the next client.
        if !slot.conn.is_autocommit() {
            return Err(RecycleError::message("connection left a transaction open"));
        }
        Ok(())
    }
}

/// A connection checked out of the pool.
pub type Pooled = managed::Object<Manager>;

/// The pool plus the counters it publishes into the health snapshot.
#[derive(Clone)]
pub struct QueryPool {
    inner: managed::Pool<Manager>,
    /// `size` permits: the queries that may run at once.
    gate: Arc<Semaphore>,
    size: usize,
    /// How many stuck leases may be replaced at once.
    spares: usize,
    acquire_timeout: Duration,
    health: Arc<Health>,
    /// Cancelled when the spill directory passes its cap: every query
    /// running then is interrupted (spill files have no owner DuckDB names).
    spill: Arc<Mutex<tokio_util::sync::CancellationToken>>,
    /// CSV answers written by DuckDB's COPY at once (see `pipe`): a slow
    /// reader holds the DuckDB worker thread that writes its COPY, so fewer
    /// than DuckDB's threads may; the rest stream through Arrow.
    csv_copies: Arc<Semaphore>,
    /// Queries one token may run at once (its share of the pool), or
    /// `None`: no per-token bound (anonymous access, or one token).
    token_share: Option<usize>,
    /// Each token's share, as a semaphore: its own work waits here, in its
    /// own queue, never in front of another token's.
    token_gates: Arc<Mutex<std::collections::HashMap<Arc<str>, Arc<Semaphore>>>>,
    /// Requests waiting for a permit now (background work included).
    queued: Arc<AtomicU64>,
    /// The share of S3 queries.
    s3: Arc<S3Share>,
    /// Parses SQL (DuckDB's parser, nothing bound or read) to tell S3
    /// queries apart before they take a connection.
    classifier: Arc<Mutex<Classifier>>,
    /// How long permits are held lately, for the expected wait.
    hold: Arc<HoldTime>,
    /// Whether a request whose expected wait is beyond its wait is refused
    /// at once (`DUCKGATE_SHED_EARLY`); else it waits the full timeout.
    shed_early: bool,
}

/// The recent mean time a permit is held: an exponentially weighted moving
/// average (weight 1/8 per sample, as TCP smooths round-trip times), in
/// microseconds; 0 until the first permit comes back.
#[derive(Default)]
pub struct HoldTime(AtomicU64);

impl HoldTime {
    /// Folds one hold time into the mean.
    fn record(&self, held: Duration, health: &Health) {
        let sample = (held.as_micros() as u64).max(1);
        let before = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |mean| {
                Some(Self::fold(mean, sample))
            })
            .unwrap_or_default();
        // Published for the readiness probe (which reads atomics only).
        health
            .pool
            .hold_mean_us
            .store(Self::fold(before, sample), Ordering::Relaxed);
    }

    /// mean + (sample - mean) / 8, in integers; the first sample as it is.
    fn fold(mean: u64, sample: u64) -> u64 {
        if mean == 0 {
            sample
        } else {
            (mean * 7 + sample) / 8
        }
    }

    /// The mean, or `None` before any permit came back.
    fn mean(&self) -> Option<Duration> {
        match self.0.load(Ordering::Relaxed) {
            0 => None,
            us => Some(Duration::from_micros(us)),
        }
    }
}

/// A pool permit that records how long it was held when it goes back.
struct Held {
    _permit: OwnedSemaphorePermit,
    since: Instant,
    hold: Arc<HoldTime>,
    health: Arc<Health>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.hold.record(self.since.elapsed(), &self.health);
        self.health.pool.last_release_ms.store(
            self.health.started.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
    }
}

/// The wait a request can expect for a permit with `ahead` requests queued
/// in front of it, permits held `mean` on average, and `size` of them: the
/// pool serves `size` requests every `mean`.
pub fn expected_wait(ahead: u64, mean: Duration, size: usize) -> Duration {
    mean.saturating_mul((ahead + 1).min(u32::MAX as u64) as u32) / (size.max(1) as u32)
}

/// The right to use one pooled connection; dropping it gives the capacity
/// back (unless it was already given back by [`Lease::replace`]).
pub struct Lease {
    permit: Mutex<Option<Held>>,
    /// Stuck with no spare left to replace it: counted in `pool.lost`.
    lost: std::sync::atomic::AtomicBool,
    /// The token whose query holds it (`-` for the gateway's own work),
    /// named in health while the connection is stuck.
    owner: Arc<str>,
    /// Counts the lease in `pool.in_use` while it lives.
    _in_use: OwnedCounterGuard,
    /// The token's share: held until the connection really comes back,
    /// even when a stuck one is replaced, so one token's stuck queries
    /// never take the spares beyond its share.
    _token: Option<OwnedSemaphorePermit>,
    /// The S3 share's permit, held the same way: S3 queries stuck on a hung
    /// read never take more than their share, spares included.
    _s3: Option<OwnedS3Permit>,
    pool: QueryPool,
}

impl Lease {
    /// Gives this lease's capacity back to the pool while its connection is
    /// still held (stuck inside DuckDB after an interrupt). Returns whether
    /// it did: replacements are bounded by the pool's spares.
    pub fn replace(&self) -> bool {
        let mut permit = self.permit.lock().unwrap_or_else(|p| p.into_inner());
        if permit.is_none() {
            return true;
        }
        let stuck = &self.pool.health.pool.stuck;
        let taken = stuck.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
            ((n as usize) < self.pool.spares).then_some(n + 1)
        });
        if taken.is_err() {
            if !self.lost.swap(true, Ordering::SeqCst) {
                self.pool.health.pool.lost.fetch_add(1, Ordering::SeqCst);
                self.pool.health.pool.count_stuck(&self.owner, true);
                tracing::error!(
                    "a pooled connection is stuck after its interrupt and no spare is left; \
                     capacity is reduced until it returns"
                );
            }
            return false;
        }
        permit.take();
        self.pool.health.pool.count_stuck(&self.owner, true);
        self.pool
            .health
            .pool
            .replaced_total
            .fetch_add(1, Ordering::Relaxed);
        metrics::counter!("duckgate_pool_connections_replaced_total").increment(1);
        tracing::warn!("a pooled connection did not come back after its interrupt; replaced it");
        true
    }

    /// Returns the connection and then the capacity; a replaced lease's
    /// connection is closed instead (its capacity went back already).
    pub fn release(&self, slot: Pooled) {
        if self.lost.load(Ordering::SeqCst) {
            self.pool.health.pool.lost.fetch_sub(1, Ordering::SeqCst);
            self.pool.health.pool.count_stuck(&self.owner, false);
        }
        let mut permit = self.permit.lock().unwrap_or_else(|p| p.into_inner());
        match permit.take() {
            Some(p) => {
                drop(slot);
                drop(p);
            }
            None => {
                drop(managed::Object::take(slot));
                self.pool.health.pool.stuck.fetch_sub(1, Ordering::SeqCst);
                self.pool.health.pool.count_stuck(&self.owner, false);
            }
        }
    }
}

/// An S3 share permit, counted in `pool.s3_in_use` while held.
struct OwnedS3Permit {
    _permit: OwnedSemaphorePermit,
    _counted: OwnedCounterGuard,
}

/// Why no connection was handed out.
#[derive(Debug)]
pub enum AcquireError {
    /// Waited the full acquire timeout.
    Timeout,
    /// The token's own share of the pool stayed taken (by its own queries)
    /// for the whole wait.
    TokenShare,
    /// The share of queries that read S3 stayed taken for the whole wait
    /// (S3 slow or stalled); local queries keep the rest of the pool.
    S3Share,
    /// Refused at once: the expected wait (held here) is beyond the wait
    /// allowed, with `ahead` requests queued in front.
    Shed {
        /// The wait this request could expect.
        expected: Duration,
        /// Requests queued in front of it.
        ahead: u64,
    },
    /// The pool is closed (shutting down).
    Closed,
    /// A connection could not be created.
    Backend(PoolError),
}

/// deadpool's error around ours: the backend's own as it is, the rest as
/// deadpool words it.
fn take_error(e: managed::PoolError<PoolError>) -> PoolError {
    match e {
        managed::PoolError::Backend(e) => e,
        other => PoolError::Take(other.to_string()),
    }
}

/// How a [`QueryPool`] is shaped.
pub struct PoolOptions {
    /// Connections clients share.
    pub size: usize,
    /// Room for replacements of stuck connections.
    pub spares: usize,
    /// How long a request waits for a connection.
    pub acquire_timeout: Duration,
    /// DuckDB's worker thread count.
    pub threads: usize,
    /// Refuse at once what could not start within the acquire timeout.
    pub shed_early: bool,
    /// Set on every connection (read-write: `client,main`).
    pub search_path: Option<String>,
    /// How the pool is shared between tokens and S3 reads.
    pub shares: Shares,
}

/// Past this many owners' gates, the idle ones are forgotten.
const GATES_KEPT: usize = 1024;

/// Forgets the gates no one holds or waits for, once there are more than
/// [`GATES_KEPT`]: OIDC identities are not a fixed list, and each one that
/// ever queried would otherwise keep a gate for the life of the process.
/// A gate only the map holds has all its permits (every permit and waiter
/// holds a clone), so it is the same as a new one.
pub(crate) fn forget_idle_gates(gates: &mut std::collections::HashMap<Arc<str>, Arc<Semaphore>>) {
    if gates.len() > GATES_KEPT {
        gates.retain(|_, gate| Arc::strong_count(gate) > 1);
    }
}

/// How the pool is shared, as configured: known before the pool exists
/// (no setting after construction).
#[derive(Debug, Clone, Default)]
pub struct Shares {
    /// `DUCKGATE_MAX_QUERIES_PER_TOKEN`.
    pub per_token: Option<usize>,
    /// How many query tokens there are (a fair share needs two).
    pub tokens: usize,
    /// `DUCKGATE_MAX_S3_QUERIES`.
    pub s3: Option<usize>,
    /// Operator-declared catalogs (lakes): their tables are read from S3.
    pub lakes: Vec<String>,
}

impl Shares {
    /// How many queries one token may run at once in a pool of `size`:
    /// the setting, else with two or more tokens a fair share (the size
    /// over the tokens, rounded up), never the whole pool, at least one;
    /// with fewer tokens, no bound.
    pub fn per_token_of(&self, size: usize) -> Option<usize> {
        match self.per_token {
            Some(n) => Some(n.clamp(1, size)),
            None if self.tokens >= 2 => Some(
                size.div_ceil(self.tokens)
                    .min(size.saturating_sub(1))
                    .max(1),
            ),
            None => None,
        }
    }

    /// How many queries that read S3 may hold connections of a pool of
    /// `size` at once: the setting (at most the pool), else all but one
    /// connection, so a slow or stalled S3 never takes the connection
    /// local work needs (a pool of one has nothing to spare).
    pub fn s3_of(&self, size: usize) -> usize {
        self.s3.unwrap_or(size.saturating_sub(1)).clamp(1, size)
    }
}

impl QueryPool {
    /// A pool of connections of `db`, shaped by `options`.
    pub fn new(
        db: Arc<RawDatabase>,
        options: PoolOptions,
        health: Arc<Health>,
    ) -> Result<Self, PoolError> {
        let PoolOptions {
            size,
            spares,
            acquire_timeout,
            threads,
            shed_early,
            search_path,
            shares,
        } = options;
        let token_share = shares.per_token_of(size);
        let s3_share = shares.s3_of(size);
        tracing::debug!(?token_share, s3_share, "the pool's shares");
        health
            .pool
            .s3_share
            .store(s3_share as u64, Ordering::Relaxed);
        let classifier = Arc::new(Mutex::new(Classifier {
            raw: db.connect_raw()?,
            seen: Default::default(),
        }));
        let inner = managed::Pool::builder(Manager {
            db,
            catalog_epoch: Default::default(),
            search_path,
        })
        .max_size(size + spares)
        .runtime(Runtime::Tokio1)
        .build()
        .map_err(|e| PoolError::Build(e.to_string()))?;
        health.pool.size.store(size as u64, Ordering::Relaxed);
        health.pool.spares.store(spares as u64, Ordering::Relaxed);
        health
            .pool
            .acquire_timeout_ms
            .store(acquire_timeout.as_millis() as u64, Ordering::Relaxed);
        Ok(Self {
            inner,
            gate: Arc::new(Semaphore::new(size)),
            size,
            spares,
            acquire_timeout,
            health,
            spill: Default::default(),
            csv_copies: Arc::new(Semaphore::new(threads.saturating_sub(1).max(1))),
            token_share,
            token_gates: Default::default(),
            queued: Default::default(),
            s3: Arc::new(S3Share {
                gate: Arc::new(Semaphore::new(s3_share)),
                lakes: shares.lakes,
            }),
            classifier,
            hold: Default::default(),
            shed_early,
        })
    }

    /// Whether `sql` reads S3 by DuckDB's parse of it (an `s3://` path, or a
    /// table of a lake). Unparsable SQL is not: the guard refuses it on its
    /// connection.
    pub fn reads_s3(&self, sql: &str) -> bool {
        let share = &self.s3;
        let mut classifier = self.classifier.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(&s3) = classifier.seen.get(sql) {
            return s3;
        }
        let s3 = crate::engine::guard::reads_s3(&classifier.raw, sql, &share.lakes);
        if sql.len() <= CLASSIFIED_TEXT_BYTES {
            if classifier.seen.len() >= CLASSIFIED_TEXTS {
                classifier.seen.clear();
            }
            classifier.seen.insert(sql.to_string(), s3);
        }
        s3
    }

    /// A place for a CSV answer written by DuckDB's COPY, if one is free.
    pub fn csv_copy(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.csv_copies.clone().try_acquire_owned().ok()
    }

    /// The token a query watches for the spill cap (see [`QueryPool::spill_exceeded`]).
    pub fn spill_token(&self) -> tokio_util::sync::CancellationToken {
        self.spill.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The spill directory passed its cap: interrupts the queries running now;
    /// later ones start with a fresh token.
    pub fn spill_exceeded(&self) {
        let mut t = self.spill.lock().unwrap_or_else(|p| p.into_inner());
        t.cancel();
        *t = tokio_util::sync::CancellationToken::new();
    }

    /// Creates every connection up front, so the first requests do not pay
    /// for it and a broken database fails start-up rather than a request.
    pub async fn warm_up(&self) -> Result<(), PoolError> {
        let mut held = Vec::new();
        for _ in 0..self.size {
            held.push(self.inner.get().await.map_err(take_error)?);
        }
        Ok(())
    }

    /// Waits at most the acquire timeout for capacity, then takes a
    /// connection. The lease counts it as in use until released.
    pub async fn acquire(
        &self,
        owner: Option<&Arc<str>>,
        s3: bool,
    ) -> Result<(Pooled, Lease), AcquireError> {
        self.acquire_within(self.acquire_timeout, true, owner, s3)
            .await
    }

    /// The semaphore of `owner`'s share, if shares are bounded.
    fn token_gate(&self, owner: &Arc<str>) -> Option<Arc<Semaphore>> {
        let share = self.token_share?;
        let mut gates = self.token_gates.lock().unwrap_or_else(|p| p.into_inner());
        crate::engine::pool::forget_idle_gates(&mut gates);
        Some(
            gates
                .entry(owner.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(share)))
                .clone(),
        )
    }

    /// Like [`QueryPool::acquire`], waiting at most `wait` for capacity.
    /// Background work (an async statement waits as long as its own time
    /// limit allows) passes `count_timeout: false`: running out of that
    /// wait is its own timeout, not a client turned away, so it is not
    /// counted in `acquire_timeouts`.
    pub async fn acquire_within(
        &self,
        wait: Duration,
        count_timeout: bool,
        owner: Option<&Arc<str>>,
        s3: bool,
    ) -> Result<(Pooled, Lease), AcquireError> {
        let start = tokio::time::Instant::now();
        let token = match owner.and_then(|o| self.token_gate(o)) {
            None => None,
            Some(gate) => match tokio::time::timeout(wait, gate.acquire_owned()).await {
                Ok(Ok(p)) => Some(p),
                Ok(Err(_)) => return Err(AcquireError::Closed),
                Err(_) => {
                    metrics::counter!("duckgate_token_share_timeouts_total").increment(1);
                    return Err(AcquireError::TokenShare);
                }
            },
        };
        // A query that reads S3 waits for its share first, so a slow S3
        // queues its own work there, never in the pool's queue.
        let s3 = match Some(&*self.s3).filter(|_| s3) {
            None => None,
            Some(share) => {
                let left = wait.saturating_sub(start.elapsed());
                match tokio::time::timeout(left, share.gate.clone().acquire_owned()).await {
                    Ok(Ok(p)) => Some(OwnedS3Permit {
                        _permit: p,
                        _counted: OwnedCounterGuard::new(self.health.clone(), |h| {
                            &h.pool.s3_in_use
                        }),
                    }),
                    Ok(Err(_)) => return Err(AcquireError::Closed),
                    Err(_) => {
                        metrics::counter!("duckgate_pool_s3_share_timeouts_total").increment(1);
                        return Err(AcquireError::S3Share);
                    }
                }
            }
        };
        let wait = wait.saturating_sub(start.elapsed());
        let permit = match self.gate.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(AcquireError::Closed),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                self.wait_for_permit(wait, count_timeout).await?
            }
        };
        let permit = Held {
            _permit: permit,
            since: Instant::now(),
            hold: self.hold.clone(),
            health: self.health.clone(),
        };
        let timeouts = Timeouts {
            wait: Some(self.acquire_timeout),
            create: Some(self.acquire_timeout),
            recycle: Some(self.acquire_timeout),
        };
        let slot = self
            .inner
            .timeout_get(&timeouts)
            .await
            .map_err(|e| match e {
                managed::PoolError::Closed => AcquireError::Closed,
                other => AcquireError::Backend(take_error(other)),
            })?;
        let lease = Lease {
            permit: Mutex::new(Some(permit)),
            lost: std::sync::atomic::AtomicBool::new(false),
            owner: owner.cloned().unwrap_or_else(|| Arc::from("-")),
            _in_use: OwnedCounterGuard::new(self.health.clone(), |h| &h.pool.in_use),
            _token: token,
            _s3: s3,
            pool: self.clone(),
        };
        Ok((slot, lease))
    }

    /// Every permit is taken: queues for one for at most `wait`, or refuses
    /// at once when the expected wait is beyond it (see the module doc).
    async fn wait_for_permit(
        &self,
        wait: Duration,
        count_timeout: bool,
    ) -> Result<OwnedSemaphorePermit, AcquireError> {
        let ahead = self.queued.load(Ordering::Relaxed);
        if let Some(mean) = self.hold.mean().filter(|_| self.shed_early) {
            let expected = expected_wait(ahead, mean, self.size);
            if expected > wait {
                if count_timeout {
                    self.health.pool.shed.fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("duckgate_pool_shed_total").increment(1);
                }
                return Err(AcquireError::Shed { expected, ahead });
            }
        }
        let _queued = CounterGuard::new(&self.queued);
        let waiting = count_timeout.then(|| CounterGuard::new(&self.health.pool.waiting));
        let permit = tokio::time::timeout(wait, self.gate.clone().acquire_owned()).await;
        drop(waiting);
        match permit {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(AcquireError::Closed),
            Err(_) => {
                if count_timeout {
                    self.health
                        .pool
                        .acquire_timeouts
                        .fetch_add(1, Ordering::Relaxed);
                    metrics::counter!("duckgate_pool_acquire_timeouts_total").increment(1);
                }
                Err(AcquireError::Timeout)
            }
        }
    }

    /// The longest wait for a connection.
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// Refuses every new acquire (shutting down).
    pub fn close(&self) {
        self.gate.close();
        self.inner.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_gates_are_forgotten_past_the_bound() {
        let mut gates = std::collections::HashMap::new();
        for i in 0..=GATES_KEPT {
            gates.insert(
                Arc::<str>::from(format!("oidc:{i}")),
                Arc::new(Semaphore::new(1)),
            );
        }
        // A gate someone holds (a permit, or a waiter) stays.
        let held = gates.get("oidc:7").cloned().unwrap();
        forget_idle_gates(&mut gates);
        assert_eq!(gates.len(), 1);
        assert!(Arc::ptr_eq(&gates["oidc:7"], &held));
        // Below the bound nothing is scanned or dropped.
        gates.insert(Arc::from("oidc:x"), Arc::new(Semaphore::new(1)));
        forget_idle_gates(&mut gates);
        assert_eq!(gates.len(), 2);
    }
}
