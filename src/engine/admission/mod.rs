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
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::engine::cache::{sha256_hex, BoundedCache};
use crate::engine::ffi::{RawConnection, RawDatabase};
use crate::engine::guard::access::RoleQuota;
use crate::engine::pool::PoolError;
use crate::state::{CounterGuard, Health, OwnedCounterGuard};

/// The share of the pool that queries reading S3 may use, and what tells
/// such queries apart (fixed at start, see [`Shares`]).
struct S3Share {
    /// `share` permits: S3 queries that may hold a connection at once.
    gate: Arc<Semaphore>,
    /// Operator-declared catalogs (lakes): their tables live on S3.
    lakes: Vec<String>,
}

/// Texts whose S3 classification is remembered (a pure parse: it never goes
/// stale, the lakes being fixed at start).
const CLASSIFIED_TEXTS: usize = 1024;
/// Longer texts are remembered by their SHA-256 (the memory stays bounded;
/// hashing is far cheaper than DuckDB's parse of the same bytes).
const CLASSIFIED_TEXT_BYTES: usize = 4096;

/// The S3 classifier's parse connection, and what it already classified:
/// short texts by themselves, longer ones by their digest.
struct Classifier {
    raw: RawConnection,
    seen: BoundedCache<bool>,
    seen_long: BoundedCache<bool>,
}

impl Classifier {
    /// Whether `sql` is kept by its digest, and its key.
    fn key(sql: &str) -> (bool, std::borrow::Cow<'_, str>) {
        if sql.len() <= CLASSIFIED_TEXT_BYTES {
            return (false, std::borrow::Cow::Borrowed(sql));
        }
        (true, std::borrow::Cow::Owned(sha256_hex(sql, 32)))
    }

    fn cache(&mut self, long: bool) -> &mut BoundedCache<bool> {
        if long {
            &mut self.seen_long
        } else {
            &mut self.seen
        }
    }
}

/// Whether a text reads S3, and, when this is its first reading, DuckDB's
/// parse of it: the first layer of the guard's verdict, handed on so the
/// guard judges that parse instead of parsing the text again.
pub struct Classified {
    /// The text reads S3 (it waits for the S3 share).
    pub s3: bool,
    /// The parse the class came from; `None` when the class was remembered.
    pub parsed: Option<crate::engine::guard::Parsed>,
}

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

    /// Whether `sql` reads S3 by DuckDB's parse of it (an `s3://` path, or a
    /// table of a lake). Unparsable SQL is not: the guard refuses it on its
    /// connection. A text classified before is not parsed again; a new one
    /// is parsed here, once, and its parse goes on to the guard
    /// ([`crate::engine::guard::check_parsed`]).
    pub fn classify(&self, sql: &str) -> Classified {
        let mut classifier = self.classifier.lock().unwrap_or_else(|p| p.into_inner());
        let (long, key) = Classifier::key(sql);
        if let Some(&s3) = classifier.cache(long).get(&key) {
            return Classified { s3, parsed: None };
        }
        let parsed = crate::engine::guard::parse(&classifier.raw, sql);
        let s3 = parsed.reads_s3(&self.s3.lakes);
        classifier.cache(long).insert(key.into_owned(), s3);
        Classified {
            s3,
            parsed: Some(parsed),
        }
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
            Some(quota) => {
                let left = wait.saturating_sub(start.elapsed());
                let gate = self.role_gate(quota);
                match tokio::time::timeout(left, gate.acquire_owned()).await {
                    Ok(Ok(p)) => Some(p),
                    Ok(Err(_)) => return Err(AcquireError::Closed),
                    Err(_) => {
                        metrics::counter!("duckgate_role_share_timeouts_total", "role" => quota.role.to_string())
                            .increment(1);
                        return Err(AcquireError::RoleShare(quota.clone()));
                    }
                }
            }
        };
        // A query that reads S3 waits for its share first, so a slow S3
        // queues its own work there, never in the pool's queue.
        let s3 = match Some(&self.s3).filter(|_| s3) {
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
pub(crate) struct Held {
    _permit: Option<OwnedSemaphorePermit>,
    since: Instant,
    hold: Arc<HoldTime>,
    health: Arc<Health>,
    /// Told when the permit is back (tokens past their share may borrow it).
    fair: Arc<Fair>,
}

impl Drop for Held {
    fn drop(&mut self) {
        self.hold.record(self.since.elapsed(), &self.health);
        self.health.pool.last_release_ms.store(
            self.health.started.elapsed().as_millis() as u64,
            Ordering::Relaxed,
        );
        drop(self._permit.take());
        self.fair.freed();
    }
}

/// The wait a request can expect for a permit with `ahead` requests queued
/// in front of it, permits held `mean` on average, and `size` of them: the
/// pool serves `size` requests every `mean`.
pub fn expected_wait(ahead: u64, mean: Duration, size: usize) -> Duration {
    mean.saturating_mul((ahead + 1).min(u32::MAX as u64) as u32) / (size.max(1) as u32)
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

/// A job's hold on what it borrowed past its token's share: fired when the
/// loan is taken back (the job's query is interrupted and runs again from
/// its token's own queue), or settled once its answer began (a loan is
/// never taken back from a client that is reading rows).
#[derive(Debug, Clone, Default)]
pub struct Reclaim(Arc<ReclaimState>);

#[derive(Debug, Default)]
struct ReclaimState {
    /// [`OPEN`], [`SETTLED`] or [`RECLAIMED`].
    state: AtomicU8,
    /// Fires when reclaimed.
    token: CancellationToken,
}

const OPEN: u8 = 0;
const SETTLED: u8 = 1;
const RECLAIMED: u8 = 2;

impl Reclaim {
    /// A hold on nothing yet, open.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires when what the job borrowed is taken back.
    pub fn token(&self) -> CancellationToken {
        self.0.token.clone()
    }

    /// The job's answer began: what it borrowed is kept until it ends.
    /// False when it was taken back first (the answer is being interrupted).
    pub fn settle(&self) -> bool {
        match self
            .0
            .state
            .compare_exchange(OPEN, SETTLED, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => true,
            Err(state) => state == SETTLED,
        }
    }

    /// Whether what the job borrowed was taken back.
    pub fn reclaimed(&self) -> bool {
        self.0.state.load(Ordering::Acquire) == RECLAIMED
    }

    /// Takes the loan back, unless the answer began or it was taken
    /// already: whether this call took it.
    pub fn take_back(&self) -> bool {
        let taken = self
            .0
            .state
            .compare_exchange(OPEN, RECLAIMED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if taken {
            self.0.token.cancel();
        }
        taken
    }
}

/// A loan given out: its owner and its job's hold.
struct LoanEntry {
    id: u64,
    owner: Arc<str>,
    reclaim: Reclaim,
}

/// Fair shares of some capacity (the pool's connections, or the async
/// statements' share of them) among tokens, conserving work: each token
/// is guaranteed `share` at once (a semaphore of its own: its work waits
/// there, in its own queue, never in front of another token's); past it,
/// a token borrows capacity that is free and nobody waits for, and gives
/// it back when a token within its share finds none free
/// ([`Fair::reclaim_for`]). The capacity itself is its caller's.
pub struct Fair {
    /// What one token is guaranteed; `None`: no per-token bound.
    share: Option<usize>,
    /// Each token's guaranteed share.
    gates: Mutex<HashMap<Arc<str>, Arc<Semaphore>>>,
    /// Loans out now, oldest first.
    loans: Mutex<Vec<LoanEntry>>,
    /// Numbers loans.
    next: AtomicU64,
    /// Wakes tokens waiting past their share when capacity comes back.
    freed: Notify,
}

/// Why [`Fair::part`] gave nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FairError {
    /// The token's share stayed taken by its own work for the whole wait,
    /// and nothing was free to borrow.
    Timeout,
    /// Shutting down.
    Closed,
}

/// A token's part of the capacity: a permit of its share, or a loan past
/// it (given back when dropped), or nothing to hold (no per-token bound).
#[derive(Default)]
pub struct Part {
    _permit: Option<OwnedSemaphorePermit>,
    loan: Option<Loan>,
}

impl Part {
    /// Whether this is within the token's share (not a loan).
    pub fn guaranteed(&self) -> bool {
        self.loan.is_none()
    }
}

/// A loan out: forgotten when dropped (the capacity came back).
struct Loan {
    fair: Arc<Fair>,
    id: u64,
}

impl Drop for Loan {
    fn drop(&mut self) {
        let mut loans = self.fair.loans.lock().unwrap_or_else(|p| p.into_inner());
        loans.retain(|l| l.id != self.id);
    }
}

impl std::fmt::Debug for Fair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let loans = self.loans.lock().map(|l| l.len()).unwrap_or_default();
        f.debug_struct("Fair")
            .field("share", &self.share)
            .field("loans", &loans)
            .finish()
    }
}

impl Fair {
    /// Shares of `share` per token (`None`: unbounded).
    pub fn new(share: Option<usize>) -> Arc<Self> {
        Arc::new(Fair {
            share,
            gates: Default::default(),
            loans: Default::default(),
            next: Default::default(),
            freed: Notify::new(),
        })
    }

    /// What one token is guaranteed (`None`: no per-token bound).
    pub fn share(&self) -> Option<usize> {
        self.share
    }

    /// The semaphore of `owner`'s share, if shares are bounded.
    fn gate(&self, owner: &Arc<str>) -> Option<Arc<Semaphore>> {
        let share = self.share?;
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        forget_idle_gates(&mut gates);
        Some(
            gates
                .entry(owner.clone())
                .or_insert_with(|| Arc::new(Semaphore::new(share)))
                .clone(),
        )
    }

    /// Waits at most `wait` for `owner`'s part: a permit of its share, or,
    /// past it, a loan as soon as `free()` says capacity is free and nobody
    /// waits for it, if the job can give a loan back (`reclaim`; work that
    /// cannot, and anonymous work, only waits for its share).
    pub async fn part(
        self: &Arc<Self>,
        owner: Option<&Arc<str>>,
        reclaim: Option<&Reclaim>,
        wait: Duration,
        free: impl Fn() -> bool,
    ) -> Result<Part, FairError> {
        let Some((owner, gate)) = owner.and_then(|o| Some((o, self.gate(o)?))) else {
            return Ok(Part::default());
        };
        let give_up = tokio::time::sleep(wait);
        tokio::pin!(give_up);
        loop {
            // Registered before looking, so a release in between wakes it.
            let freed = self.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            match gate.clone().try_acquire_owned() {
                Ok(p) => {
                    return Ok(Part {
                        _permit: Some(p),
                        loan: None,
                    })
                }
                Err(tokio::sync::TryAcquireError::Closed) => return Err(FairError::Closed),
                Err(tokio::sync::TryAcquireError::NoPermits) => {}
            }
            if let Some(reclaim) = reclaim.filter(|_| free()) {
                return Ok(Part {
                    _permit: None,
                    loan: Some(self.lend(owner, reclaim)),
                });
            }
            tokio::select! {
                p = gate.clone().acquire_owned() => {
                    return p
                        .map(|p| Part { _permit: Some(p), loan: None })
                        .map_err(|_| FairError::Closed);
                }
                _ = freed => {}
                _ = &mut give_up => return Err(FairError::Timeout),
            }
        }
    }

    fn lend(self: &Arc<Self>, owner: &Arc<str>, reclaim: &Reclaim) -> Loan {
        metrics::counter!("duckgate_share_loans_total").increment(1);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.loans
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(LoanEntry {
                id,
                owner: owner.clone(),
                reclaim: reclaim.clone(),
            });
        Loan {
            fair: self.clone(),
            id,
        }
    }

    /// `owner`, within its share, found no capacity free: takes back the
    /// youngest loan of another token whose answer has not begun. Whether
    /// one was taken back (its capacity comes back once its query stops).
    pub fn reclaim_for(&self, owner: &Arc<str>) -> bool {
        let loans = self.loans.lock().unwrap_or_else(|p| p.into_inner());
        let taken = loans
            .iter()
            .rev()
            .filter(|l| l.owner != *owner)
            .any(|l| l.reclaim.take_back());
        if taken {
            metrics::counter!("duckgate_share_reclaims_total").increment(1);
        }
        taken
    }

    /// Capacity came back: tokens waiting past their share look again.
    pub fn freed(&self) {
        self.freed.notify_waiters();
    }
}

/// Past this many owners' gates, the idle ones are forgotten.
const GATES_KEPT: usize = 1024;

/// Forgets the gates no one holds or waits for, once there are more than
/// [`GATES_KEPT`]: OIDC identities are not a fixed list, and each one that
/// ever queried would otherwise keep a gate for the life of the process.
/// A gate only the map holds has all its permits (every permit and waiter
/// holds a clone), so it is the same as a new one.
pub(crate) fn forget_idle_gates(gates: &mut HashMap<Arc<str>, Arc<Semaphore>>) {
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
    /// How many queries one token is guaranteed at once in a pool of
    /// `size` (past it, it borrows what nobody else waits for, see
    /// [`Fair`]): the setting, else with two or more tokens a fair share
    /// (the size over the tokens, rounded up), never the whole pool, at
    /// least one; with fewer tokens, no bound.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_gates_are_forgotten_past_the_bound() {
        let mut gates = HashMap::new();
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
