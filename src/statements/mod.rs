//! Async statements: work that outlives a request. A statement is submitted,
//! runs in the background on a bounded share of the pool, keeps its result
//! in the spool, and is polled, paged, cancelled or discarded by id. Finished
//! statements are kept for a TTL, then expire (their files are removed); a
//! bounded number is kept at once.

pub mod answer;
mod context;
mod error;
pub mod pages;
pub mod parquet;
pub mod replication;
mod run;
pub mod s3;
pub mod shared;
pub mod spool;
mod state;
pub mod status;
pub mod submit;

pub use context::Context;
pub use error::Error;
pub use state::State;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::credentials::retry::with_fresh_credentials;
use crate::credentials::Rotator;
use crate::engine::admission::{Fair, FairError, Reclaim};
use crate::engine::queries::{Outcome, Registration, Running};
use crate::engine::{execute, Engine, QueryError, QueryJob};
use crate::state::Health;

use self::spool::{Spool, SpoolResult, SpoolWriter};

/// How statements are bounded.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long a finished statement is kept.
    pub ttl: Duration,
    /// Statements kept at once.
    pub max_statements: usize,
    /// Statements one token may keep at once (expired ones not counted).
    pub max_per_token: usize,
    /// Largest time limit of a statement.
    pub max_timeout: Duration,
    /// Longest wait a submission may ask for.
    pub max_wait: Duration,
    /// Pool connections statements may hold at once.
    pub share: usize,
    /// Of those, how many one token's statements are guaranteed at once
    /// (`None`: no bound, a single token or none), so that one token's long
    /// statements never keep another token's from starting; past it a
    /// token borrows what nobody waits for ([`Fair`]).
    pub token_share: Option<usize>,
}

impl Settings {
    /// Connections async statements may hold in a pool of `pool_size`: the
    /// share, at least one, and never all of a pool of two or more.
    pub fn share_of(pool_size: usize, share: f64) -> usize {
        let n = (pool_size as f64 * share).floor() as usize;
        if pool_size > 1 {
            n.clamp(1, pool_size - 1)
        } else {
            1
        }
    }

    /// One token's part of `share` among `tokens` tokens: a fair share
    /// (rounded up), never all of a share of two or more, at least one;
    /// `None` with fewer than two tokens.
    pub fn token_share_of(share: usize, tokens: usize) -> Option<usize> {
        (tokens >= 2).then(|| share.div_ceil(tokens).min(share.saturating_sub(1)).max(1))
    }
}

#[derive(Debug)]
struct Inner {
    state: State,
    result: Option<Arc<SpoolResult>>,
    error: Option<QueryError>,
    finished: Option<(Instant, SystemTime)>,
    retried: bool,
    /// Its result's metadata for other replicas (JSON of
    /// [`spool::ResultMeta`]), once uploaded to the S3 spool.
    shared_result: Option<String>,
}

/// One statement.
#[derive(Debug)]
pub struct Statement {
    /// Its entry among the running queries (id, owner, SQL, rows, cancel,
    /// progress), kept after it ended for the status document.
    pub running: Arc<Running>,
    /// Its time limit.
    pub timeout: Duration,
    inner: Mutex<Inner>,
    /// Fires when it has finished.
    pub done: CancellationToken,
    /// Its row is in the shared state.
    pub claimed: std::sync::atomic::AtomicBool,
    /// Its final state is published in the shared state.
    pub published: std::sync::atomic::AtomicBool,
    /// Its client has what it ended with: a page of its result was served,
    /// or its status once it ended otherwise (the drain of a process whose
    /// results leave with it waits for that).
    pub collected: std::sync::atomic::AtomicBool,
}

/// What a statement is now.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Where it is.
    pub state: State,
    /// Its kept result, once it succeeded and until it expires.
    pub result: Option<Arc<SpoolResult>>,
    /// Why it failed or was cancelled.
    pub error: Option<QueryError>,
    /// When it ended.
    pub finished_at: Option<SystemTime>,
    /// When it expires: its end plus the TTL.
    pub expires_at: Option<SystemTime>,
    /// From submission to its end (or now).
    pub elapsed: Duration,
    /// Whether it ran again after a credential refresh.
    pub retried: bool,
}

impl Statement {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What it is now, with its expiry `ttl` after its end.
    pub fn snapshot(&self, ttl: Duration) -> Snapshot {
        let inner = self.lock();
        Snapshot {
            state: inner.state,
            result: inner.result.clone(),
            error: inner.error.clone(),
            finished_at: inner.finished.map(|(_, at)| at),
            expires_at: inner.finished.map(|(_, at)| at + ttl),
            elapsed: match inner.finished {
                Some((at, _)) => at.duration_since(self.running.started),
                None => self.running.started.elapsed(),
            },
            retried: inner.retried,
        }
    }

    /// Its result's metadata for other replicas, once in the S3 spool.
    pub fn shared_result(&self) -> Option<String> {
        self.lock().shared_result.clone()
    }

    fn set_state(&self, state: State) {
        let mut inner = self.lock();
        if !inner.state.finished() {
            inner.state = state;
        }
    }
}

/// Why a statement could not be admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdmitError {
    /// Its owner already has a statement with this id.
    Taken(String),
    /// As many statements as allowed are kept.
    TooMany(usize),
    /// Its token keeps as many statements as one token may.
    TooManyForToken(usize),
}

/// What a statement needs to run, from the gateway.
#[derive(Clone)]
pub struct Runner {
    /// The engine whose pool runs the statement.
    pub engine: Arc<Engine>,
    /// Refreshes S3 credentials S3 rejected as expired, for one retry.
    pub rotator: Arc<Rotator>,
    /// The gateway's health, which tells whether credentials are expired.
    pub health: Arc<Health>,
    /// Fires when the gateway shuts down.
    pub shutdown: CancellationToken,
}

type Key = (Arc<str>, String);

/// Every kept statement of one gateway.
#[derive(Debug)]
pub struct Statements {
    map: Mutex<HashMap<Key, Arc<Statement>>>,
    share: Arc<Semaphore>,
    /// Statements waiting for `share` within their token's part.
    share_waiting: std::sync::atomic::AtomicU64,
    /// Each token's part of `share` ([`Settings::token_share`]), waited for
    /// first, in the token's own queue, and its loans past it: the
    /// admission's one fair-share system ([`Fair`]).
    fair: Arc<Fair>,
    /// Where results are kept.
    pub spool: Arc<Spool>,
    /// How statements are bounded.
    pub settings: Settings,
    files: std::sync::atomic::AtomicU64,
    /// The state replicas share, when several serve statements.
    pub shared: Option<Arc<shared::Shared>>,
    /// The S3 spool finished results are uploaded to.
    pub s3: Option<Arc<s3::S3Spool>>,
    /// Local copies of other replicas' results, by URL, with their last use.
    pub copies: Mutex<HashMap<String, (Arc<SpoolResult>, Instant)>>,
}

impl Statements {
    /// No statements yet; results go to `spool`.
    pub fn new(spool: Arc<Spool>, settings: Settings) -> Arc<Self> {
        Self::new_shared(spool, settings, None, None)
    }

    /// [`Statements::new`], sharing its statements with other replicas
    /// through `shared`, results through `s3`.
    pub fn new_shared(
        spool: Arc<Spool>,
        settings: Settings,
        shared: Option<Arc<shared::Shared>>,
        s3: Option<Arc<s3::S3Spool>>,
    ) -> Arc<Self> {
        Arc::new(Statements {
            map: Mutex::new(HashMap::new()),
            share: Arc::new(Semaphore::new(settings.share)),
            share_waiting: Default::default(),
            fair: Fair::new(settings.token_share),
            spool,
            settings,
            files: Default::default(),
            shared,
            s3,
            copies: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Statement>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(map: &HashMap<Key, Arc<Statement>>) {
        let mut counts = [0usize; State::ALL.len()];
        for s in map.values() {
            counts[s.lock().state as usize] += 1;
        }
        for (state, n) in State::ALL.iter().zip(counts) {
            metrics::gauge!("duckgate_statements", "state" => state.as_str()).set(n as f64);
        }
    }

    /// Keeps a new statement (its registry entry made), if its owner has
    /// none with this id and fewer than the maximum are kept (expired ones
    /// make room first).
    pub fn admit(
        &self,
        running: Arc<Running>,
        timeout: Duration,
    ) -> Result<Arc<Statement>, AdmitError> {
        let key = (running.owner.clone(), running.id.clone());
        let mut map = self.lock();
        if map.contains_key(&key) {
            return Err(AdmitError::Taken(running.id.clone()));
        }
        let mine = map
            .iter()
            .filter(|((o, _), s)| *o == running.owner && s.lock().state != State::Expired)
            .count();
        if mine >= self.settings.max_per_token {
            return Err(AdmitError::TooManyForToken(self.settings.max_per_token));
        }
        if map.len() >= self.settings.max_statements {
            let mut expired: Vec<(Instant, Key)> = map
                .iter()
                .filter_map(|(k, s)| {
                    let inner = s.lock();
                    (inner.state == State::Expired)
                        .then(|| (inner.finished.map_or(s.running.started, |f| f.0), k.clone()))
                })
                .collect();
            expired.sort();
            let excess = map.len() + 1 - self.settings.max_statements;
            for (_, k) in expired.into_iter().take(excess) {
                map.remove(&k);
            }
            if map.len() >= self.settings.max_statements {
                return Err(AdmitError::TooMany(self.settings.max_statements));
            }
        }
        let statement = Arc::new(Statement {
            running,
            timeout,
            inner: Mutex::new(Inner {
                state: State::Queued,
                result: None,
                error: None,
                finished: None,
                retried: false,
                shared_result: None,
            }),
            done: CancellationToken::new(),
            claimed: Default::default(),
            published: Default::default(),
            collected: Default::default(),
        });
        map.insert(key, statement.clone());
        Self::publish(&map);
        Ok(statement)
    }

    /// A writer for a new statement's spool file.
    pub fn writer(&self, payer: spool::Payer) -> Arc<SpoolWriter> {
        let n = self
            .files
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Arc::new(self.spool.writer(payer, &format!("{n}.arrow")))
    }

    /// The statements with this id: of `owner` only, or of every owner
    /// (`None`, the admin's view).
    pub fn find(&self, owner: Option<&str>, id: &str) -> Vec<Arc<Statement>> {
        self.lock()
            .iter()
            .filter(|((o, i), _)| i == id && owner.is_none_or(|w| w == o.as_ref()))
            .map(|(_, s)| s.clone())
            .collect()
    }

    /// Kept statements of `owner` (every owner's for `None`), oldest first.
    pub fn list(&self, owner: Option<&str>) -> Vec<Arc<Statement>> {
        let mut all: Vec<_> = self
            .lock()
            .iter()
            .filter(|((o, _), _)| owner.is_none_or(|w| w == o.as_ref()))
            .map(|(_, s)| s.clone())
            .collect();
        all.sort_by_key(|s| s.running.started);
        all
    }

    /// Stops the statement if it runs and forgets it; its spooled result is
    /// removed once nobody reads it.
    pub fn discard(&self, statement: &Statement) {
        statement.running.cancel.cancel();
        let key = (
            statement.running.owner.clone(),
            statement.running.id.clone(),
        );
        let mut map = self.lock();
        let removed = if map
            .get(&key)
            .is_some_and(|s| std::ptr::eq(s.as_ref(), statement))
        {
            map.remove(&key)
        } else {
            None
        };
        Self::publish(&map);
        drop(map);
        // Its result (and file) goes after the lock.
        let result = removed.and_then(|s| s.lock().result.take());
        drop(result);
    }

    /// Expires finished statements older than the TTL (their results are
    /// removed) and forgets expired ones after another TTL, until `stop`.
    pub async fn sweep(self: Arc<Self>, stop: CancellationToken) {
        let ttl = self.settings.ttl;
        let every = (ttl / 4).clamp(Duration::from_millis(50), Duration::from_secs(10));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
            let now = Instant::now();
            // Results (and their files) are released after the locks.
            let mut expired: Vec<Arc<SpoolResult>> = Vec::new();
            let mut map = self.lock();
            map.retain(|_, s| {
                let mut inner = s.lock();
                let Some((at, _)) = inner.finished else {
                    return true;
                };
                if inner.state == State::Expired {
                    return now.duration_since(at) < ttl * 2;
                }
                if now.duration_since(at) >= ttl {
                    inner.state = State::Expired;
                    expired.extend(inner.result.take());
                }
                true
            });
            Self::publish(&map);
            drop(map);
            drop(expired);
        }
    }
}
