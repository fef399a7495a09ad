//! The query pool's connections. A query admitted by
//! [`crate::engine::admission`] (a permit of the pool's `size`, its token's
//! and S3 share's) takes a connection from deadpool, leased until it
//! comes back.
//!
//! A connection can be held inside DuckDB long after its query was
//! interrupted (an HTTP read in flight inside httpfs does not see the
//! interrupt). Such a lease can be *replaced*: its permit goes back to the
//! semaphore at once, deadpool (sized with room for `spares` extra
//! connections) opens a fresh connection for the next request, and the stuck
//! one is closed when it finally returns. Replacements are bounded by
//! `spares`, counted in the health snapshot and in `/metrics`.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult, Timeouts};
use deadpool::Runtime;
use tokio::sync::OwnedSemaphorePermit;

use crate::engine::admission::{
    AcquireError, Admission, Classified, Held, OwnedS3Permit, Part, Reclaim, Shares,
};
use crate::engine::cache::BoundedCache;
use crate::engine::ffi::{RawConnection, RawDatabase};
use crate::engine::guard::access::RoleQuota;
use crate::engine::guard::Accepted;
use crate::engine::threads::{self, SchedulerThreads};
use crate::state::{Health, OwnedCounterGuard};

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
    pub verdicts: BoundedCache<Verdict>,
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
    pub copies: BoundedCache<Option<String>>,
    /// DuckDB's progress tracking on `conn`: off for inline runs. Private:
    /// it is `conn`'s own switch, never moved to another slot or past
    /// `conn`'s life (see [`Slot::track_progress`]).
    progress: Option<crate::engine::progress::ProgressSwitch>,
    /// The row policy installed on `conn` (a policy document, see
    /// [`crate::engine::policy`]), if any.
    policy: Option<String>,
}

/// The guard's verdict on one text, remembered on its connection. What a
/// verdict depends on is the text, the catalog (its epoch) and the policy
/// it was judged under (read-only or read-write); the rest of the guard's
/// rules (paths, the client schema, writable databases) are the gateway's
/// for its life. The caller's grants are checked after it, per call.
pub struct Verdict {
    /// The catalog epoch the guard judged the text in.
    pub epoch: u64,
    /// The policy the guard judged it under.
    pub policy: crate::config::Policy,
    /// What the guard found.
    pub accepted: Arc<Accepted>,
    /// The text's last run here was short and its answer small: the next
    /// may run on the request's own thread (see `execute::inline`).
    pub quick: bool,
    /// What describing the text found (its Arrow answer's columns and its
    /// parameters): a prepared statement's describe is DuckDB's whole
    /// planning, and drivers that prepare every statement they run (ADBC's
    /// cursor) describe the same text again and again. Judged with the
    /// verdict, so it is as current as the verdict.
    pub described: Option<crate::engine::execute::describe::Described>,
}

impl Slot {
    /// Tracks the progress of the next statement on `conn`, or not.
    pub fn track_progress(&mut self, on: bool) {
        if let Some(p) = &mut self.progress {
            // SAFETY: `p` came from `conn` (`Manager::create` made both)
            // and stays with it in this slot (the field is private), so
            // `conn` is open; whoever holds the slot by `&mut` runs nothing
            // on `conn` meanwhile and runs its next query on this thread.
            unsafe { p.set(on) };
        }
    }

    /// Installs `spec` as `conn`'s row policy (or none), unless it is the
    /// one installed. A change flushes `conn`'s prepared statements: their
    /// plans hold the policy (and claims) they were optimized under.
    pub fn use_policy(&mut self, spec: Option<String>) -> Result<(), String> {
        if self.policy == spec {
            return Ok(());
        }
        crate::engine::policy::install(self.conn.database(), self.connection_id, spec.as_deref())?;
        self.conn.flush_prepared_statement_cache();
        self.policy = spec;
        Ok(())
    }

    /// The verdict on `sql` under `policy`, if it is current (judged in
    /// `epoch` under that policy).
    pub fn verdict(
        &mut self,
        sql: &str,
        epoch: u64,
        policy: crate::config::Policy,
    ) -> Option<&Verdict> {
        self.verdicts
            .get(sql)
            .filter(|v| v.epoch == epoch && v.policy == policy)
    }

    /// Whether `sql` may run on the request's own thread: judged read-only
    /// under `policy` in the current epoch, and its last run here was quick.
    pub fn is_quick(&self, sql: &str, policy: crate::config::Policy) -> bool {
        let epoch = self.catalog_epoch.load(std::sync::atomic::Ordering::SeqCst);
        self.prepared_epoch == epoch
            && self.verdicts.peek(sql).is_some_and(|v| {
                v.epoch == epoch && v.policy == policy && v.quick && v.accepted.read_only
            })
    }

    /// The connection with no row policy installed: the gateway's own
    /// reads of the catalog (listings for `/catalog`, the grants' check,
    /// what a refusal may name) see all of it, whoever ran here last.
    pub fn unconfined(&mut self) -> Result<&crate::engine::ffi::Connection, String> {
        self.use_policy(None)?;
        Ok(&self.conn)
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

/// Prepared statements cached per connection, least recently used out.
/// A rotation of more texts than this (a dashboard's, a benchmark's) finds
/// none of them: at 64, TPC-DS's 99 queries were planned again on every run
/// (17 of them over 1.1x in-process, against 0-1 at 128). DuckDB keeps a
/// statement's plan outside its buffer pool (what it holds beyond the pool
/// is capped by `DUCKGATE_MAX_UNMANAGED_MEMORY`): the 99 held on one
/// connection took 19 MiB.
pub const STATEMENT_CACHE: usize = 128;

/// Guard verdicts (and CSV COPYs) remembered per connection.
pub const VERDICT_CACHE: usize = 256;

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
            verdicts: BoundedCache::new(VERDICT_CACHE),
            catalog_epoch: self.catalog_epoch.clone(),
            prepared_epoch: 0,
            connection_id,
            pipe_token: crate::engine::pipe::token(&self.db),
            copies: BoundedCache::new(VERDICT_CACHE),
            progress,
            policy: None,
        })
    }

    async fn recycle(&self, slot: &mut Slot, _: &Metrics) -> RecycleResult<PoolError> {
        // Each request is its own transaction; a connection that somehow kept
        // one open is not handed to the next client.
        if !slot.conn.is_autocommit() {
            return Err(RecycleError::message("connection left a transaction open"));
        }
        // Every connection is lent with no row policy: the one its last
        // caller ran under is taken off before anyone else can use it, so
        // what runs before the next caller's is installed (the guard's
        // verdict and what a refusal may name) sees the whole catalog,
        // whoever ran before. A connection whose policy cannot be removed
        // is not lent again.
        slot.use_policy(None).map_err(|e| {
            RecycleError::message(format!("its row policy could not be removed: {e}"))
        })?;
        Ok(())
    }
}

/// A connection checked out of the pool.
pub type Pooled = managed::Object<Manager>;

/// The pool plus the counters it publishes into the health snapshot.
#[derive(Clone)]
pub struct QueryPool {
    inner: managed::Pool<Manager>,
    /// Who may take a connection, and when.
    admission: Arc<Admission>,
    size: usize,
    /// How many stuck leases may be replaced at once.
    spares: usize,
    acquire_timeout: Duration,
    health: Arc<Health>,
    /// DuckDB's background threads, held by statements that may use them.
    threads: Arc<SchedulerThreads>,
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
    /// The token's share (or its loan past it): held until the connection
    /// really comes back, even when a stuck one is replaced, so one token's
    /// stuck queries never take the spares beyond its share.
    _token: Part,
    /// The role's share (`queries_at_once`), held the same way.
    _role: Option<OwnedSemaphorePermit>,
    /// The S3 share's permit, held the same way: S3 queries stuck on a hung
    /// read never take more than their share, spares included.
    _s3: Option<OwnedS3Permit>,
    pool: QueryPool,
}

impl Lease {
    /// Holds DuckDB's background threads for this lease's statement (see
    /// [`QueryPool::hold_threads`]).
    pub fn hold_threads(&self) -> threads::Held {
        self.pool.hold_threads()
    }

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
        let admission = Admission::new(&db, size, threads, shed_early, shares, health.clone())?;
        let scheduler = Arc::new(SchedulerThreads::start(db.clone()));
        let inner = managed::Pool::builder(Manager {
            db,
            catalog_epoch: Default::default(),
            search_path,
        })
        .max_size(size + spares)
        // The connection that came back last goes out first: the next
        // statement finds the verdicts (and the prepared statements) of
        // the one before (a Flight SQL execution the text its prepare
        // judged), and idle connections stay cold rather than all lukewarm.
        .queue_mode(managed::QueueMode::Lifo)
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
            admission: Arc::new(admission),
            size,
            spares,
            acquire_timeout,
            health,
            threads: scheduler,
        })
    }

    /// Holds DuckDB's background threads for a statement that may use them
    /// (see [`SchedulerThreads`]); a short read on the request's own thread
    /// does without.
    pub fn hold_threads(&self) -> threads::Held {
        self.threads.hold()
    }

    /// DuckDB's scheduler threads now, the callers' included.
    pub fn duckdb_threads(&self) -> usize {
        self.threads.count()
    }

    /// Whether `sql` reads S3, with its parse if it is new (see
    /// [`Admission::classify`]).
    pub fn classify(&self, sql: &str) -> Classified {
        self.admission.classify(sql)
    }

    /// A place for a CSV answer written by DuckDB's COPY, if one is free.
    pub fn csv_copy(&self) -> Option<OwnedSemaphorePermit> {
        self.admission.csv_copy()
    }

    /// The token a query watches for the spill cap.
    pub fn spill_token(&self) -> tokio_util::sync::CancellationToken {
        self.admission.spill_token()
    }

    /// The spill directory passed its cap: interrupts the queries running now.
    pub fn spill_exceeded(&self) {
        self.admission.spill_exceeded()
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
        role: Option<&RoleQuota>,
        s3: bool,
    ) -> Result<(Pooled, Lease), AcquireError> {
        self.acquire_within(self.acquire_timeout, true, owner, role, s3, None)
            .await
    }

    /// Like [`QueryPool::acquire`], waiting at most `wait` for capacity.
    /// Background work (an async statement waits as long as its own time
    /// limit allows) passes `count_timeout: false`: running out of that
    /// wait is its own timeout, not a client turned away, so it is not
    /// counted in `acquire_timeouts`. A job that can give back what it
    /// borrowed (`reclaim`) may borrow past its token's share (see
    /// [`crate::engine::admission::Fair`]).
    pub async fn acquire_within(
        &self,
        wait: Duration,
        count_timeout: bool,
        owner: Option<&Arc<str>>,
        role: Option<&RoleQuota>,
        s3: bool,
        reclaim: Option<&Reclaim>,
    ) -> Result<(Pooled, Lease), AcquireError> {
        let admitted = self
            .admission
            .admit(wait, count_timeout, owner, role, s3, reclaim)
            .await?;
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
            permit: Mutex::new(Some(admitted.permit)),
            lost: std::sync::atomic::AtomicBool::new(false),
            owner: owner.cloned().unwrap_or_else(|| Arc::from("-")),
            _in_use: OwnedCounterGuard::new(self.health.clone(), |h| &h.pool.in_use),
            _token: admitted.token,
            _role: admitted.role,
            _s3: admitted.s3,
            pool: self.clone(),
        };
        Ok((slot, lease))
    }

    /// The longest wait for a connection.
    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    /// Refuses every new acquire (shutting down).
    pub fn close(&self) {
        self.admission.close();
        self.inner.close();
    }
}
