//! Admission to the query pool: who may take one of its `size`
//! connections, and when. The pool's permits are a semaphore; before one,
//! a query waits for its token's share (`DUCKGATE_MAX_QUERIES_PER_TOKEN`,
//! or a fair share among the tokens) and, when it reads S3, for the S3
//! share (`DUCKGATE_MAX_S3_QUERIES`), so a slow S3 or a busy token queues
//! its own work, never another's.
//!
//! Fair shares conserve work ([`Fair`], the one fair-share system: the
//! pool's and the async statements' share both use it). A token's share
//! is what it is guaranteed, not all it may use: past it, a token borrows
//! a free connection when nobody else waits for one, so a token alone uses
//! the whole pool. A loan is given back when another token, within its own
//! share, finds no connection free: the youngest borrowed query is
//! interrupted before its first rows and goes back to its token's own
//! queue (an async statement starts again), so shares bind only when
//! tokens contend.
//!
//! Overload is shed at once: a request that finds every permit taken
//! estimates its wait (the requests queued ahead of it, plus itself, times
//! the recent mean time a permit is held, over the pool size). When that is
//! beyond what it may wait, it is refused now instead of after the whole
//! acquire timeout, so time in the queue stays bounded by the expected wait
//! and the pool's throughput goes to requests that will be served.
//!
//! Also here: the permits of CSV answers written by DuckDB's COPY, and the
//! spill cap's cancel token. The connections themselves are
//! [`crate::engine::pool`]'s.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::engine::ffi::RawDatabase;
use crate::engine::guard::access::RoleQuota;
use crate::engine::pool::PoolError;
use crate::state::{CounterGuard, Health, OwnedCounterGuard};

mod classify;
mod fair;
mod hold;

use crate::engine::cache::BoundedCache;
pub use classify::Classified;
use classify::{Classifier, S3Share, CLASSIFIED_TEXTS};
pub use fair::{Fair, FairError, Part, Reclaim, Shares};
pub(crate) use hold::Held;
pub use hold::{expected_wait, HoldTime};

/// A role's semaphore and the cap it was made for.
type RoleGate = (u64, Arc<Semaphore>);

/// Who may take a pooled connection, and when.
pub struct Admission {
    /// `size` permits: the queries that may hold a connection at once.
    gate: Arc<Semaphore>,
    size: usize,
    health: Arc<Health>,
    /// Each token's share of the pool (`None`: no per-token bound,
    /// anonymous access or one token), and its loans past it.
    fair: Arc<Fair>,
    /// Each capped role's statements at once (`[role.limits]
    /// queries_at_once`), as a semaphore with the cap it was made for: the
    /// role's members wait here together.
    role_gates: Mutex<HashMap<Arc<str>, RoleGate>>,
    /// Requests waiting for a permit now (background work included).
    queued: AtomicU64,
    /// The share of S3 queries.
    s3: S3Share,
    /// Parses SQL (DuckDB's parser, nothing bound or read) to tell S3
    /// queries apart before they take a connection; a new text's parse goes
    /// on to the guard ([`Classified`]).
    classifier: Mutex<Classifier>,
    /// How long permits are held lately, for the expected wait.
    hold: Arc<HoldTime>,
    /// Whether a request whose expected wait is beyond its wait is refused
    /// at once (`DUCKGATE_SHED_EARLY`); else it waits the full timeout.
    shed_early: bool,
    /// Cancelled when the spill directory passes its cap: every query
    /// running then is interrupted (spill files have no owner DuckDB names).
    spill: Mutex<CancellationToken>,
    /// CSV answers written by DuckDB's COPY at once (see `pipe`): a slow
    /// reader holds the DuckDB worker thread that writes its COPY, so fewer
    /// than DuckDB's threads may; the rest stream through Arrow.
    csv_copies: Arc<Semaphore>,
}

/// What admission handed out: the pool permit (timed while held), and the
/// token's and S3 share's permits, held until the connection comes back.
pub(crate) struct Admitted {
    /// The pool permit.
    pub(crate) permit: Held,
    /// The token's share, or its loan past it.
    pub(crate) token: Part,
    /// The role's share.
    pub(crate) role: Option<OwnedSemaphorePermit>,
    /// The S3 share.
    pub(crate) s3: Option<OwnedS3Permit>,
}

impl Admission {
    /// Admission to a pool of `size` connections of `db` (whose parser
    /// classifies S3 queries), with DuckDB's `threads`, shared by `shares`.
    pub fn new(
        db: &RawDatabase,
        size: usize,
        threads: usize,
        shed_early: bool,
        shares: Shares,
        health: Arc<Health>,
    ) -> Result<Self, PoolError> {
        let token_share = shares.per_token_of(size);
        let s3_share = shares.s3_of(size);
        tracing::debug!(?token_share, s3_share, "the pool's shares");
        health
            .pool
            .s3_share
            .store(s3_share as u64, Ordering::Relaxed);
        Ok(Admission {
            gate: Arc::new(Semaphore::new(size)),
            size,
            health,
            fair: Fair::new(token_share),
            role_gates: Default::default(),
            queued: Default::default(),
            s3: S3Share {
                gate: Arc::new(Semaphore::new(s3_share)),
                lakes: shares.lakes,
            },
            classifier: Mutex::new(Classifier {
                raw: db.connect_raw()?,
                seen: BoundedCache::new(CLASSIFIED_TEXTS),
                seen_long: BoundedCache::new(CLASSIFIED_TEXTS),
            }),
            hold: Default::default(),
            shed_early,
            spill: Default::default(),
            csv_copies: Arc::new(Semaphore::new(threads.saturating_sub(1).max(1))),
        })
    }

    /// A place for a CSV answer written by DuckDB's COPY, if one is free.
    pub fn csv_copy(&self) -> Option<OwnedSemaphorePermit> {
        self.csv_copies.clone().try_acquire_owned().ok()
    }

    /// The token a query watches for the spill cap (see [`Admission::spill_exceeded`]).
    pub fn spill_token(&self) -> CancellationToken {
        self.spill.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The spill directory passed its cap: interrupts the queries running now;
    /// later ones start with a fresh token.
    pub fn spill_exceeded(&self) {
        let mut t = self.spill.lock().unwrap_or_else(|p| p.into_inner());
        t.cancel();
        *t = CancellationToken::new();
    }

    /// The semaphore of `quota`'s role (made anew when its cap changed,
    /// on a reload).
    fn role_gate(&self, quota: &RoleQuota) -> Arc<Semaphore> {
        let mut gates = self.role_gates.lock().unwrap_or_else(|p| p.into_inner());
        let permits = usize::try_from(quota.cap)
            .unwrap_or(usize::MAX)
            .min(Semaphore::MAX_PERMITS);
        let gate = gates
            .entry(quota.role.clone())
            .or_insert_with(|| (quota.cap, Arc::new(Semaphore::new(permits))));
        if gate.0 != quota.cap {
            *gate = (quota.cap, Arc::new(Semaphore::new(permits)));
        }
        gate.1.clone()
    }

    /// Waits at most `wait` for `owner`'s share (or a loan past it, when
    /// the job can give it back: `reclaim`), its role's share (`role`: the
    /// role whose `queries_at_once` it counts against), the S3 share (`s3`:
    /// the query reads S3) and a pool permit, in that order. Background
    /// work passes `count_timeout: false` (see
    /// [`crate::engine::pool::QueryPool::acquire_within`]).
    pub(crate) async fn admit(
        &self,
        wait: Duration,
        count_timeout: bool,
        owner: Option<&Arc<str>>,
        role: Option<&RoleQuota>,
        s3: bool,
        reclaim: Option<&Reclaim>,
    ) -> Result<Admitted, AcquireError> {
        let start = tokio::time::Instant::now();
        loop {
            if let Some(admitted) = self
                .admit_once(start, wait, count_timeout, owner, role, s3, reclaim)
                .await?
            {
                return Ok(admitted);
            }
        }
    }

    /// One try of [`Admission::admit`]: `None` when a loan found the free
    /// connection it was made for taken meanwhile (it is given back; the
    /// caller tries again, its wait counting from `start`).
    #[allow(clippy::too_many_arguments)]
    async fn admit_once(
        &self,
        start: tokio::time::Instant,
        wait: Duration,
        count_timeout: bool,
        owner: Option<&Arc<str>>,
        role: Option<&RoleQuota>,
        s3: bool,
        reclaim: Option<&Reclaim>,
    ) -> Result<Option<Admitted>, AcquireError> {
        // A token past its share borrows a free connection nobody waits for.
        let free = || self.gate.available_permits() > 0 && self.queued.load(Ordering::Relaxed) == 0;
        let left = wait.saturating_sub(start.elapsed());
        let token = match self.fair.part(owner, reclaim, left, free).await {
            Ok(part) => part,
            Err(FairError::Closed) => return Err(AcquireError::Closed),
            Err(FairError::Timeout) => {
                metrics::counter!("duckgate_token_share_timeouts_total").increment(1);
                return Err(AcquireError::TokenShare);
            }
        };
        // The role's members wait together after each one's own share, so
        // one member's burst queues behind its own work first.
        let role = match role {
            None => None,
            Some(quota) => Some(
                self.role_share(quota, wait.saturating_sub(start.elapsed()))
                    .await?,
            ),
        };
        // A query that reads S3 waits for its share first, so a slow S3
        // queues its own work there, never in the pool's queue.
        let s3 = if s3 {
            Some(self.s3_share(wait.saturating_sub(start.elapsed())).await?)
        } else {
            None
        };
        let wait = wait.saturating_sub(start.elapsed());
        let permit = match self.gate.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(tokio::sync::TryAcquireError::Closed) => return Err(AcquireError::Closed),
            // A loan is of a free connection: never queued for one.
            Err(tokio::sync::TryAcquireError::NoPermits) if !token.guaranteed() => return Ok(None),
            Err(tokio::sync::TryAcquireError::NoPermits) => {
                // Within its share, a token takes back a connection another
                // token borrowed; it waits for it rather than being shed.
                let reclaimed = owner.is_some_and(|o| self.fair.reclaim_for(o));
                self.wait_for_permit(wait, count_timeout, reclaimed).await?
            }
        };
        let permit = Held {
            _permit: Some(permit),
            since: Instant::now(),
            hold: self.hold.clone(),
            health: self.health.clone(),
            fair: self.fair.clone(),
        };
        Ok(Some(Admitted {
            permit,
            token,
            role,
            s3,
        }))
    }

    /// Waits at most `left` for a place in the role's share.
    async fn role_share(
        &self,
        quota: &RoleQuota,
        left: Duration,
    ) -> Result<OwnedSemaphorePermit, AcquireError> {
        let gate = self.role_gate(quota);
        match tokio::time::timeout(left, gate.acquire_owned()).await {
            Ok(Ok(p)) => Ok(p),
            Ok(Err(_)) => Err(AcquireError::Closed),
            Err(_) => {
                metrics::counter!("duckgate_role_share_timeouts_total", "role" => quota.role.to_string())
                    .increment(1);
                Err(AcquireError::RoleShare(quota.clone()))
            }
        }
    }

    /// Waits at most `left` for a place in the S3 share.
    async fn s3_share(&self, left: Duration) -> Result<OwnedS3Permit, AcquireError> {
        match tokio::time::timeout(left, self.s3.gate.clone().acquire_owned()).await {
            Ok(Ok(p)) => Ok(OwnedS3Permit {
                _permit: p,
                _counted: OwnedCounterGuard::new(self.health.clone(), |h| &h.pool.s3_in_use),
            }),
            Ok(Err(_)) => Err(AcquireError::Closed),
            Err(_) => {
                metrics::counter!("duckgate_pool_s3_share_timeouts_total").increment(1);
                Err(AcquireError::S3Share)
            }
        }
    }

    /// Every permit is taken: queues for one for at most `wait`, or refuses
    /// at once when the expected wait is beyond it (see the module doc).
    async fn wait_for_permit(
        &self,
        wait: Duration,
        count_timeout: bool,
        reclaimed: bool,
    ) -> Result<OwnedSemaphorePermit, AcquireError> {
        let ahead = self.queued.load(Ordering::Relaxed);
        if let Some(mean) = self.hold.mean().filter(|_| self.shed_early && !reclaimed) {
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

    /// Refuses every new admission (shutting down).
    pub fn close(&self) {
        self.gate.close();
    }
}

/// An S3 share permit, counted in `pool.s3_in_use` while held.
pub(crate) struct OwnedS3Permit {
    _permit: OwnedSemaphorePermit,
    _counted: OwnedCounterGuard,
}

/// Why no connection was handed out.
#[derive(Debug)]
pub enum AcquireError {
    /// Waited the full acquire timeout.
    Timeout,
    /// The token's own share of the pool stayed taken (by its own queries)
    /// for the whole wait, and no connection was free to borrow.
    TokenShare,
    /// The role's `queries_at_once` stayed taken (by its members' queries)
    /// for the whole wait.
    RoleShare(RoleQuota),
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
