//! Several replicas, one service: the loop that keeps this replica's part
//! of the shared state current (heartbeat, running queries, the status of
//! its statements), honours what other replicas recorded for it (cancels,
//! statements deleted through them), and does the shared housekeeping
//! (lost and expired statements, their S3 results). Also the local copies
//! of other replicas' results, fetched from the S3 spool to be paged.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::engine::listing::QueryInfo;
use crate::engine::queries::{IdError, Registration};
use crate::engine::sink::SinkError;
use crate::engine::QueryError;

use super::shared::{Reservation, Row, Shared, SharedError};
use super::spool::{ResultMeta, SpoolResult};
use super::status::status_of;
use super::{Context, Error, Statement};

/// Commands another replica asks of this one through the shared state (a
/// rotation, a reload): carried out by the gateway (`api::admin`), which
/// the statement domain does not know.
pub trait Commands: Send + Sync + 'static {
    /// Carries out `command` (with its `argument`) here; its errors, none
    /// when done.
    fn carry_out<'a>(
        &'a self,
        command: &'a str,
        argument: Option<&'a str>,
    ) -> futures::future::BoxFuture<'a, Vec<String>>;
}

/// A local copy of another replica's result unused this long is removed.
const COPY_IDLE: Duration = Duration::from_secs(60);

/// How often the loop runs: a fifth of the staleness, at most half a
/// second, so a cancel recorded by another replica is honoured within one.
pub fn interval(shared: &Shared) -> Duration {
    (shared.stale / 5).clamp(Duration::from_millis(100), Duration::from_millis(500))
}

/// Runs until `stop`, then leaves the shared state: beats this replica's
/// heartbeat on a session of its own ([`Shared::beat`]), watches the other
/// replicas' heartbeats for one that stopped ([`Watch`]), and runs the
/// rounds (what others asked of it, its statements' status, the shared
/// housekeeping). Each has a loop of its own: a round slowed by a slow
/// PostgreSQL (publishing many statements at 1.5 s a query) never delays a
/// heartbeat. Before it leaves, the end of every statement that ended here
/// is published (a drained replica's statements are answered by the
/// others).
pub async fn run(
    ctx: Context,
    commands: Arc<dyn Commands>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    let every = interval(&shared);
    let beat = {
        let (ctx, shared, stop) = (ctx.clone(), shared.clone(), stop.clone());
        let queries = move || {
            let queries: Vec<QueryInfo> = ctx
                .queries
                .list()
                .iter()
                .map(|r| QueryInfo::of(r, ctx.db()))
                .collect();
            serde_json::to_string(&queries).unwrap_or_else(|_| "[]".into())
        };
        tokio::spawn(shared.beat(every, queries, stop))
    };
    let watch = {
        let (ttl, shared, stop) = (ctx.statements.settings.ttl, shared.clone(), stop.clone());
        tokio::spawn(async move {
            let mut watch = Watch::new(every * 2);
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Err(e) = watch.round(&shared, ttl).await {
                    tracing::warn!(error.cause = %e, "watching the other replicas' heartbeats failed");
                }
            }
        })
    };
    let mut last_sweep = Instant::now();
    let grace = ctx.orphan_grace;
    let orphan_every = (grace / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    let mut last_orphans = Instant::now();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(every) => {}
        }
        match tick(&ctx, &commands, &shared).await {
            Ok(()) => shared.dependency.ok(),
            Err(e) => {
                shared.dependency.failed(&e);
                tracing::warn!(error.cause = %e, "updating the shared state failed");
            }
        }
        if last_sweep.elapsed() >= Duration::from_secs(2) {
            last_sweep = Instant::now();
            sweep(&ctx, &shared).await;
        }
        if last_orphans.elapsed() >= orphan_every {
            last_orphans = Instant::now();
            sweep_orphans(&ctx, &shared, grace).await;
        }
    }
    let _ = watch.await;
    // The last word: every statement that ended here is published before
    // the heartbeat stops and the row goes (what did not end is lost).
    if let Err(e) = publish_all(&ctx, &shared).await {
        tracing::warn!(error.cause = %e, "publishing the statements' ends before leaving failed");
    }
    let _ = beat.await;
    if let Err(e) = shared.leave().await {
        tracing::warn!(error.cause = %e, "leaving the shared state failed");
    }
}

/// Publishes the status of every statement of this replica kept in the
/// shared state (the ends not yet published).
pub async fn publish_all(ctx: &Context, shared: &Shared) -> Result<(), SharedError> {
    for s in ctx.statements.list(None) {
        if s.claimed.load(std::sync::atomic::Ordering::SeqCst) {
            publish(ctx, shared, &s).await?;
        }
    }
    Ok(())
}

/// Which other replicas stopped: a replica whose heartbeat is older than
/// the staleness is a suspect; one still a suspect, with the same
/// heartbeat, `confirm` later is taken for dead ([`Shared::declare_dead`]).
/// The second look is what a locked or slow PostgreSQL cannot fake: when
/// the lock goes, the heartbeats that waited behind it land at once, and
/// a look taken in that moment is not trusted alone.
pub struct Watch {
    /// Replicas seen stale: their heartbeat then, and when first seen so.
    suspects: std::collections::HashMap<String, (String, Instant)>,
    /// How long a suspect stays one before it is taken for dead.
    confirm: Duration,
}

impl Watch {
    /// A watch that confirms a suspect after `confirm`.
    pub fn new(confirm: Duration) -> Self {
        Self {
            suspects: Default::default(),
            confirm,
        }
    }

    /// One look at the heartbeats.
    pub async fn round(&mut self, shared: &Shared, ttl: Duration) -> Result<(), SharedError> {
        let stale = shared.stale_replicas().await?;
        self.suspects
            .retain(|r, (hb, _)| stale.iter().any(|(r2, hb2)| r2 == r && hb2 == hb));
        for (replica, heartbeat) in stale {
            let since = match self.suspects.get(&replica) {
                Some((_, since)) => *since,
                None => {
                    self.suspects
                        .insert(replica.clone(), (heartbeat.clone(), Instant::now()));
                    continue;
                }
            };
            if since.elapsed() < self.confirm {
                continue;
            }
            self.suspects.remove(&replica);
            if let Some(lost) = shared.declare_dead(&replica, &heartbeat, ttl).await? {
                metrics::counter!("duckgate_statements_lost_total", "reason" => "replica_gone")
                    .increment(lost);
                tracing::warn!(
                    dead = %replica,
                    last_heartbeat = %heartbeat,
                    statements_lost = lost,
                    "a replica made no progress past DUCKGATE_REPLICA_STALE_MS: taken for dead, its unfinished statements are lost"
                );
            }
        }
        Ok(())
    }
}

/// One round: cancels asked of this replica, statements deleted elsewhere,
/// the status of running ones, and the repair of any row whose statement
/// ended here but whose end did not reach it.
pub async fn tick(
    ctx: &Context,
    commands: &Arc<dyn Commands>,
    shared: &Shared,
) -> Result<(), SharedError> {
    shared.release_pending().await;
    // Commands asked of every replica through another one: each runs in a
    // task of its own (a rotation waits for STS) and writes its answer.
    for (id, command, argument) in shared.take_commands().await? {
        let (statements, commands) = (ctx.statements.clone(), commands.clone());
        tokio::spawn(async move {
            tracing::info!(command = %command, "carrying out a command asked through another replica");
            let errors = commands.carry_out(&command, argument.as_deref()).await;
            let answer = serde_json::json!({ "errors": errors });
            if let Some(shared) = &statements.shared {
                if let Err(e) = shared.answer_command(&id, &answer).await {
                    tracing::warn!(error.cause = %e, "answering a command failed");
                }
            }
        });
    }
    for (token, id) in shared.take_cancels().await? {
        for r in ctx.queries.find(Some(&token), &id) {
            tracing::info!(query_id = %r.id, owner = %r.owner, by = "another replica", "cancel requested");
            ctx.queries.cancel(&r);
        }
    }
    // Local claimed statements first: any of them has its row by the time
    // the rows are read. (Whether one is claimed is read before the rows
    // too: one claimed while they were read has a row they may lack, and
    // was taken for deleted elsewhere and cancelled at once.)
    let local: Vec<_> = ctx
        .statements
        .list(None)
        .into_iter()
        .filter(|s| s.claimed.load(std::sync::atomic::Ordering::SeqCst))
        .collect();
    let rows = shared.mine().await?;
    for s in local {
        let key = (s.running.owner.to_string(), s.running.id.clone());
        let Some(row_state) = rows.get(&key) else {
            // Deleted through another replica: stop it and forget it.
            ctx.queries.cancel(&s.running);
            ctx.statements.discard(&s);
            continue;
        };
        if *row_state == super::State::Lost {
            // This replica was taken for dead (frozen past the staleness)
            // and its statements answered lost everywhere: so they stay,
            // here too (its row answers).
            tracing::warn!(query_id = %s.running.id, owner = %s.running.owner, "a statement of this replica was taken for lost while it stalled; it is stopped");
            ctx.queries.cancel(&s.running);
            ctx.statements.discard(&s);
            continue;
        }
        // Its end is published once; a row still `queued` or `running`
        // for a statement that ended here is published again (repaired).
        if s.done.is_cancelled() && !row_state.finished() {
            s.published
                .store(false, std::sync::atomic::Ordering::SeqCst);
        }
        publish(ctx, shared, &s).await?;
    }
    Ok(())
}

/// Reserves the client's query id on every replica for as long as
/// `registration` lives, when replicas share state: a token's id then names
/// one running query wherever it runs, so `GET`/`DELETE /queries/{id}` mean
/// one query. A live replica running that token's query with this id: 409,
/// as a local one. Generated ids are unique without it (no round trip).
pub async fn reserve_id(
    ctx: &Context,
    registration: &mut Registration,
    client_chose: bool,
) -> Result<(), Error> {
    let Some(shared) = &ctx.statements.shared else {
        return Ok(());
    };
    if !client_chose {
        return Ok(());
    }
    let r = registration.running.clone();
    match Reservation::take(shared, &r.owner, &r.id).await {
        Ok(Some(reservation)) => {
            registration.hold(reservation);
            Ok(())
        }
        Ok(None) => Err(Error::QueryId(IdError::Taken(r.id.clone()))),
        Err(e) => Err(Error::SharedState(e)),
    }
}

/// Publishes a statement's status: while it runs, every round; once it
/// finished, once (with its result's metadata and expiry).
pub async fn publish(ctx: &Context, shared: &Shared, s: &Statement) -> Result<(), SharedError> {
    use std::sync::atomic::Ordering;
    if s.published.load(Ordering::SeqCst) {
        return Ok(());
    }
    // Read before the status: once `done` fired, the status is final.
    let finished = s.done.is_cancelled();
    let status = status_of(&ctx.statements, ctx.db(), s);
    let state = status.state;
    // Its state is set a moment before `done` fires: a status that says it
    // ended, read in that moment, waits for the next round, which publishes
    // it with its result. (Published without, another replica answered the
    // succeeded statement's page 410 statement-expired: 4 of 5,000
    // hand-offs under load.)
    if !finished && state.finished() {
        return Ok(());
    }
    let result = finished.then(|| s.shared_result()).flatten();
    shared
        .publish(
            &s.running.owner,
            &s.running.id,
            state,
            &serde_json::to_string(&status).unwrap_or_default(),
            result.as_deref(),
            finished.then_some(ctx.statements.settings.ttl),
        )
        .await?;
    if finished {
        s.published.store(true, Ordering::SeqCst);
    }
    Ok(())
}

/// Shared housekeeping, then local copies unused for a while go.
async fn sweep(ctx: &Context, shared: &Shared) {
    match shared.sweep(ctx.statements.settings.ttl).await {
        Ok((urls, lost)) => {
            if lost > 0 {
                // Their replica's row went without a death declared: it
                // left (a shutdown) before their ends were published.
                metrics::counter!("duckgate_statements_lost_total", "reason" => "shutdown")
                    .increment(lost);
                tracing::warn!(
                    statements_lost = lost,
                    "statements of replicas that left before they finished are lost"
                );
            }
            for url in urls {
                remove_result(ctx, &url).await;
            }
        }
        Err(e) => tracing::warn!(error.cause = %e, "shared housekeeping failed"),
    }
    let idle: Vec<Arc<SpoolResult>> = {
        let mut copies = ctx
            .statements
            .copies
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let gone: Vec<String> = copies
            .iter()
            .filter(|(_, (_, used))| used.elapsed() >= COPY_IDLE)
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter()
            .filter_map(|k| copies.remove(k).map(|(r, _)| r))
            .collect()
    };
    drop(idle);
}

/// Removes the S3 spool's orphans: objects older than `grace` that no kept
/// statement names. Any replica may do it (a removal is idempotent); each
/// also reports the spool's objects and bytes.
async fn sweep_orphans(ctx: &Context, shared: &Shared, grace: Duration) {
    let Some(s3) = &ctx.statements.s3 else {
        return;
    };
    let objects = match s3.list().await {
        Ok(o) => o,
        Err(e) => {
            tracing::warn!(error.cause = %e, "listing the S3 spool failed");
            return;
        }
    };
    metrics::gauge!("duckgate_spool_s3_objects").set(objects.len() as f64);
    metrics::gauge!("duckgate_spool_s3_bytes")
        .set(objects.iter().map(|o| o.bytes).sum::<u64>() as f64);
    let now = std::time::SystemTime::now();
    let old: Vec<String> = objects
        .iter()
        .filter(|o| now.duration_since(o.modified).is_ok_and(|age| age >= grace))
        .map(|o| o.url.clone())
        .collect();
    if old.is_empty() {
        return;
    }
    let kept = match shared.referenced(&old).await {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(error.cause = %e, "finding the spool's orphans failed");
            return;
        }
    };
    for url in old.iter().filter(|u| !kept.contains(*u)) {
        match s3.delete(url).await {
            Ok(()) => {
                tracing::info!(spool.url = %url, "removed an orphaned spool object");
                metrics::counter!("duckgate_spool_orphans_removed_total").increment(1);
            }
            Err(e) => tracing::warn!(error.cause = %e, "removing an orphaned spool object failed"),
        }
    }
}

/// Removes a result from the S3 spool (and its local copy).
pub async fn remove_result(ctx: &Context, url: &str) {
    let copy = ctx
        .statements
        .copies
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(url);
    drop(copy);
    if let Some(s3) = &ctx.statements.s3 {
        if let Err(e) = s3.delete(url).await {
            tracing::warn!(error.cause = %e, "removing a spooled result failed");
        }
    }
}

/// The result of another replica's statement, copied from the S3 spool
/// (once; later pages read the copy).
pub async fn copy_of(ctx: &Context, row: &Row) -> Result<Arc<SpoolResult>, Error> {
    let meta: ResultMeta = serde_json::from_str(row.result.as_deref().unwrap_or(""))
        .map_err(|e| Error::Internal(format!("a statement's result metadata: {e}")))?;
    let url = meta.url.clone();
    let hit = {
        let mut copies = ctx
            .statements
            .copies
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        copies.get_mut(&url).map(|(r, used)| {
            *used = Instant::now();
            r.clone()
        })
    };
    if let Some(r) = hit {
        return Ok(r);
    }
    let s3 = ctx.statements.s3.clone().ok_or_else(|| {
        Error::Internal("another replica's result, and no S3 spool is configured here".into())
    })?;
    // A full disk under the local spool is the server's storage: 507
    // spool-full with Retry-After, like a statement's own result; the S3
    // spool's faults are its own (410 missing, 503 unavailable, 502
    // refused), bounded by the limit a query gets by default.
    let dir = ctx.statements.spool.dir().join("copies");
    tokio::fs::create_dir_all(&dir)
        .await
        .map_err(|e| Error::Query(QueryError::from(SinkError::from_io(&e))))?;
    let path = dir.join(format!("{}.arrow", uuid::Uuid::new_v4()));
    s3.download(&url, &path, ctx.download_limit).await?;
    let spool = ctx.statements.spool.clone();
    let token: Arc<str> = row.token.as_str().into();
    let result = {
        let path = path.clone();
        tokio::task::spawn_blocking(move || SpoolResult::copy(spool, token, path, meta))
            .await
            .map_err(|e| e.to_string())
            .and_then(|r| r)
    };
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            // Unreadable: the copy goes rather than filling the disk.
            let _ = tokio::fs::remove_file(&path).await;
            return Err(Error::Internal(e));
        }
    };
    let result = Arc::new(result);
    let mut copies = ctx
        .statements
        .copies
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    // Another request may have fetched it meanwhile: keep one.
    let kept = copies
        .entry(url)
        .or_insert_with(|| (result.clone(), Instant::now()));
    Ok(kept.0.clone())
}
