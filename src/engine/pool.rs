//! The bounded query pool, on deadpool: waiting for a connection is an async
//! wait with a deadline, so it never blocks a runtime thread (r2d2's `get`
//! would). Every slot pairs a duckdb-rs connection with a raw connection of the
//! same database for the statement guard.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use deadpool::managed::{self, Metrics, PoolError, RecycleError, RecycleResult, Timeouts};
use deadpool::Runtime;

use crate::engine::ffi::{RawConnection, RawDatabase};
use crate::engine::guard::Accepted;
use crate::health::{CounterGuard, Health, OwnedCounterGuard};

/// One pooled connection.
pub struct Slot {
    /// Runs client statements once the guard accepted them.
    pub conn: duckdb::Connection,
    /// Parses and classifies client statements (never executes them).
    pub raw: RawConnection,
    /// Interrupts whatever `conn` runs.
    pub interrupt: Arc<duckdb::InterruptHandle>,
    /// Statement texts the guard accepted on this connection, and its verdict.
    pub verdicts: HashMap<String, Accepted>,
}

pub struct Manager {
    db: Arc<RawDatabase>,
}

impl managed::Manager for Manager {
    type Type = Slot;
    type Error = String;

    async fn create(&self) -> Result<Slot, String> {
        let conn = self.db.connect().map_err(|e| e.to_string())?;
        let raw = self.db.connect_raw()?;
        let interrupt = conn.interrupt_handle();
        conn.set_prepared_statement_cache_capacity(crate::engine::execute::STATEMENT_CACHE);
        Ok(Slot {
            conn,
            raw,
            interrupt,
            verdicts: HashMap::new(),
        })
    }

    async fn recycle(&self, slot: &mut Slot, _: &Metrics) -> RecycleResult<String> {
        // Each request is its own transaction; a connection that somehow kept
        // one open is not handed to the next client.
        if !slot.conn.is_autocommit() {
            return Err(RecycleError::message("connection left a transaction open"));
        }
        Ok(())
    }
}

pub type Pooled = managed::Object<Manager>;

/// The pool plus the counters it publishes into the health snapshot.
pub struct QueryPool {
    inner: managed::Pool<Manager>,
    acquire_timeout: Duration,
    health: Arc<Health>,
}

/// Why no connection was handed out.
#[derive(Debug)]
pub enum AcquireError {
    /// Waited the full acquire timeout.
    Timeout,
    /// The pool is closed (shutting down).
    Closed,
    /// A connection could not be created.
    Backend(String),
}

impl QueryPool {
    pub fn new(
        db: Arc<RawDatabase>,
        size: usize,
        acquire_timeout: Duration,
        health: Arc<Health>,
    ) -> Result<Self, String> {
        let inner = managed::Pool::builder(Manager { db })
            .max_size(size)
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| e.to_string())?;
        health.pool.size.store(size as u64, Ordering::Relaxed);
        Ok(Self {
            inner,
            acquire_timeout,
            health,
        })
    }

    /// Creates every connection up front, so the first requests do not pay
    /// for it and a broken database fails start-up rather than a request.
    pub async fn warm_up(&self) -> Result<(), String> {
        let mut held = Vec::new();
        for _ in 0..self.inner.status().max_size {
            held.push(self.inner.get().await.map_err(|e| e.to_string())?);
        }
        Ok(())
    }

    /// Waits at most the acquire timeout for a connection. The returned guard
    /// counts the connection as in use until it is dropped.
    pub async fn acquire(&self) -> Result<(Pooled, OwnedCounterGuard), AcquireError> {
        let waiting = CounterGuard::new(&self.health.pool.waiting);
        let timeouts = Timeouts {
            wait: Some(self.acquire_timeout),
            create: Some(self.acquire_timeout),
            recycle: Some(self.acquire_timeout),
        };
        let result = self.inner.timeout_get(&timeouts).await;
        drop(waiting);
        match result {
            Ok(obj) => Ok((
                obj,
                OwnedCounterGuard::new(self.health.clone(), |h| &h.pool.in_use),
            )),
            Err(PoolError::Timeout(_)) => {
                self.health
                    .pool
                    .acquire_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                metrics::counter!("duckgate_pool_acquire_timeouts_total").increment(1);
                Err(AcquireError::Timeout)
            }
            Err(PoolError::Closed) => Err(AcquireError::Closed),
            Err(e) => Err(AcquireError::Backend(e.to_string())),
        }
    }

    pub fn acquire_timeout(&self) -> Duration {
        self.acquire_timeout
    }

    pub fn close(&self) {
        self.inner.close();
    }
}
