//! Running one client statement: guard, prepare, bind, stream, encode, all on
//! a blocking thread that owns a pooled connection; the async side (this
//! file) only waits for encoded chunks, enforces the deadline, and interrupts
//! DuckDB when the deadline passes, the client goes away, or the process
//! shuts down.
//!
//! - [`job`]: what the HTTP layer hands in, and the output it gets back.
//! - [`error`]: why a query did not produce a complete result.
//! - `control`: what may interrupt a query, and the watchdog.
//! - `worker`: the blocking half, from the guard to the writer.
//! - `verdict`: the guard's verdicts remembered on a pooled connection.
//! - `stream`, `csv_copy`, `spool`: the three writers (encoded batches,
//!   DuckDB's own CSV COPY, an async statement's spool).
//! - [`describe`]: a statement's result and parameter schemas, not run.
//! - `wrap`: the statement wrappers that let DuckDB render values as text.
//! - `sender`: the channel between the two halves, and how a begun body ends.

mod control;
mod csv_copy;
pub mod describe;
pub mod error;
mod inline;
pub mod job;
mod parquet_copy;
mod sender;
mod sentinel;
mod spool;
mod stream;
mod verdict;
mod worker;
mod wrap;

pub use error::{sql_error, QueryError, StoreFault};
pub use job::{OutputBody, Param, QueryJob, QueryOutput, RunLimits};

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::encode::Format;
use crate::engine::admission::AcquireError;
use crate::engine::pool::{Lease, Pooled, QueryPool};

use control::{watchdog, CancelOnDrop, CancelReason, Phase, QueryControl};
use sender::{error_record_for, record_failure, Msg};
use worker::work;

/// Chunks in flight between the DuckDB thread and the HTTP body.
const CHANNEL_CHUNKS: usize = 4;

/// Runs `job` on a pooled connection. Returns once the first rows (or the
/// error) are known; the rest streams through the returned body.
pub async fn run(
    pool: &QueryPool,
    job: QueryJob,
    shutdown: CancellationToken,
) -> Result<QueryOutput, QueryError> {
    let deadline = tokio::time::Instant::from_std(job.started) + job.timeout;
    let requested = job
        .tracker
        .as_ref()
        .map(|t| t.cancel.clone())
        .unwrap_or_default();
    // A new text is parsed here, once: the parse tells admission whether it
    // reads S3 and goes on to the guard on the pooled connection.
    let classified = pool.classify(&job.sql);
    let s3 = classified.s3;
    // A loan taken back stops the query (before its answer began; see
    // `admission::Reclaim`): its caller runs it again.
    let stops = Stops {
        shutdown,
        requested,
        reclaimed: job.reclaim.as_ref().map(|r| r.token()).unwrap_or_default(),
    };
    let (slot, lease) = admit(pool, &job, deadline, s3, &stops).await?;
    let lease = Arc::new(lease);
    // A short read this connection ran before runs here, on the request's
    // own thread: no hand-off to a blocking thread and back.
    let slot = if inline::eligible(&job, &slot, s3) {
        match inline::run(slot, &lease, &job, &stops.shutdown, &stops.requested) {
            Ok((rx, control)) => {
                let guard = CancelOnDrop(control.clone());
                return answer(rx, control, guard, Reply::of(&job)).await;
            }
            Err(slot) => *slot,
        }
    } else {
        slot
    };
    let reply = Reply::of(&job);
    let (rx, control, guard) =
        spawn_work(pool, slot, lease, job, classified.parsed, deadline, stops);
    answer(rx, control, guard, reply).await
}

/// What stops a query before its end: the gateway shutting down, a cancel
/// requested, its loan taken back.
struct Stops {
    /// The gateway's shutdown.
    shutdown: CancellationToken,
    /// A cancel the statement's owner requested.
    requested: CancellationToken,
    /// Admission taking its loan back.
    reclaimed: CancellationToken,
}

/// A pooled connection for `job`, within its wait: a client waits the
/// acquire timeout; a kept result (an async statement) waits as long as its
/// own deadline allows.
async fn admit(
    pool: &QueryPool,
    job: &QueryJob,
    deadline: tokio::time::Instant,
    s3: bool,
    stops: &Stops,
) -> Result<(Pooled, Lease), QueryError> {
    let owner = job.tracker.as_ref().map(|t| t.owner.clone());
    let role = job
        .rules
        .access
        .as_ref()
        .and_then(|a| a.quota(|l| l.queries_at_once));
    let (wait, count_timeout) = match job.sink {
        None => (pool.acquire_timeout(), true),
        Some(_) => (
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            false,
        ),
    };
    let acquired = pool.acquire_within(
        wait,
        count_timeout,
        owner.as_ref(),
        role.as_ref(),
        s3,
        job.reclaim.as_ref(),
    );
    tokio::select! {
        r = acquired => r.map_err(|e| not_admitted(e, job, pool)),
        _ = stops.shutdown.cancelled() => Err(QueryError::ShuttingDown),
        _ = stops.requested.cancelled() => Err(QueryError::CancelledByRequest),
        _ = stops.reclaimed.cancelled() => Err(QueryError::TokenShare(job.timeout)),
    }
}

/// Hands the job and its connection to a blocking thread (with a CSV COPY
/// place if one is free) under a watchdog of its deadline and stops; the
/// answer's channel, its control and the guard that cancels it if dropped.
fn spawn_work(
    pool: &QueryPool,
    slot: Pooled,
    lease: Arc<Lease>,
    job: QueryJob,
    parsed: Option<crate::engine::guard::Parsed>,
    deadline: tokio::time::Instant,
    stops: Stops,
) -> (mpsc::Receiver<Msg>, Arc<QueryControl>, CancelOnDrop) {
    let control = Arc::new(QueryControl::new(slot.interrupt.clone()));
    let guard = CancelOnDrop(control.clone());
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    tokio::spawn(watchdog(
        control.clone(),
        lease.clone(),
        deadline,
        stops.shutdown.clone(),
        pool.spill_token(),
        stops.requested,
        stops.reclaimed,
    ));
    // A CSV answer is DuckDB's COPY while a place for one is free.
    let csv_copy = (job.format == Format::Csv && job.sink.is_none())
        .then(|| pool.csv_copy())
        .flatten();
    {
        let control = control.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            work(slot, lease, job, parsed, tx, control, runtime, csv_copy)
        });
    }
    (rx, control, guard)
}

/// The error of a query admission turned away: a client's waits are the
/// pool's; a kept result's (an async statement's) are its own time limit.
fn not_admitted(e: AcquireError, job: &QueryJob, pool: &QueryPool) -> QueryError {
    match e {
        AcquireError::Timeout
        | AcquireError::TokenShare
        | AcquireError::RoleShare(_)
        | AcquireError::S3Share
        | AcquireError::Shed { .. }
            if job.sink.is_some() =>
        {
            QueryError::Timeout(job.timeout)
        }
        e => admission_error(e, pool),
    }
}

/// The error of a client's request admission turned away.
pub fn admission_error(e: AcquireError, pool: &QueryPool) -> QueryError {
    match e {
        AcquireError::Timeout => QueryError::PoolExhausted(pool.acquire_timeout()),
        AcquireError::TokenShare => QueryError::TokenShare(pool.acquire_timeout()),
        AcquireError::RoleShare(quota) => QueryError::RoleShare {
            role: quota.role,
            cap: quota.cap,
            waited: pool.acquire_timeout(),
        },
        AcquireError::S3Share => QueryError::S3Share(pool.acquire_timeout()),
        AcquireError::Shed { expected, ahead } => QueryError::Shed {
            expected,
            ahead,
            limit: pool.acquire_timeout(),
        },
        AcquireError::Closed => QueryError::ShuttingDown,
        AcquireError::Backend(e) => QueryError::Internal(e.to_string()),
    }
}

/// What the answer needs of the job (which the worker takes).
struct Reply {
    format: Format,
    timeout: Duration,
    tracker: Option<Arc<crate::engine::queries::Running>>,
}

impl Reply {
    fn of(job: &QueryJob) -> Self {
        Self {
            format: job.format,
            timeout: job.timeout,
            tracker: job.tracker.clone(),
        }
    }
}

/// The answer of a worker that reports through `rx`.
async fn answer(
    mut rx: mpsc::Receiver<Msg>,
    control: Arc<QueryControl>,
    guard: CancelOnDrop,
    reply: Reply,
) -> Result<QueryOutput, QueryError> {
    let Reply {
        format,
        timeout,
        tracker,
    } = reply;
    // The watchdog interrupts at the deadline or on shutdown; the worker
    // then reports within moments (or its own result, if it finished in the
    // same instant).
    let first = tokio::select! {
        biased;
        m = rx.recv() => m,
        // A worker still in the guard or prepare (a bind can hang on S3) has
        // produced nothing: answer now. One that executes may have finished
        // in the same instant: its result then stands.
        _ = control.cancelled.cancelled() => {
            let pending = control.lock().phase == Phase::Pending;
            if pending {
                rx.try_recv().ok()
            } else {
                settle(&mut rx).await
            }
        }
    };
    let (kind, first) = match first {
        Some(Msg::Start { kind, first }) => (kind, first),
        Some(Msg::Fail(e)) => return Err(e),
        Some(Msg::Data(_)) | Some(Msg::Abort(_)) => {
            return Err(QueryError::Internal("body before start".into()))
        }
        None => {
            return Err(match control.reason() {
                Some(CancelReason::Timeout) => QueryError::Timeout(timeout),
                Some(CancelReason::Requested) => QueryError::CancelledByRequest,
                Some(CancelReason::Shutdown) => QueryError::ShuttingDown,
                Some(CancelReason::TempSpace) => QueryError::TempSpace,
                _ => QueryError::Internal("query worker ended without an answer".into()),
            })
        }
    };

    let queued = match whole(&mut rx, &control, first) {
        Ok(all) => {
            // The query is over: nothing left to interrupt.
            drop(guard);
            return Ok(QueryOutput {
                kind,
                content_type: format.content_type(),
                body: OutputBody::Whole(all),
            });
        }
        Err(queued) => queued,
    };
    let state = BodyState {
        rx,
        guard: Some(guard),
        control,
        format,
        tracker,
        timeout,
        queued,
        done: false,
        abort_next: None,
    };
    let body = futures::stream::unfold(state, next_chunk);
    Ok(QueryOutput {
        kind,
        content_type: format.content_type(),
        body: OutputBody::Streamed(Box::pin(body)),
    })
}

/// The whole answer, `first` and the rest, when the worker is done and
/// left all of it queued, ended without an error (most small answers: an
/// inline run's always). Otherwise what the body sends before it reads on:
/// `first` and whatever was taken from the channel.
fn whole(
    rx: &mut mpsc::Receiver<Msg>,
    control: &QueryControl,
    first: Bytes,
) -> Result<Bytes, VecDeque<Msg>> {
    // Only a worker that is gone has queued all it will.
    if !rx.is_closed() {
        return Err(VecDeque::from([Msg::Data(first)]));
    }
    let mut taken = VecDeque::new();
    let mut data_only = true;
    while let Ok(m) = rx.try_recv() {
        data_only &= matches!(m, Msg::Data(_));
        taken.push_back(m);
    }
    let ended_well = control.complete.load(std::sync::atomic::Ordering::SeqCst)
        && control
            .error
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none();
    if !(data_only && ended_well) {
        taken.push_front(Msg::Data(first));
        return Err(taken);
    }
    if taken.is_empty() {
        return Ok(first);
    }
    let data = || {
        taken.iter().filter_map(|m| match m {
            Msg::Data(b) => Some(b),
            _ => None,
        })
    };
    let mut all = Vec::with_capacity(first.len() + data().map(Bytes::len).sum::<usize>());
    all.extend_from_slice(&first);
    for b in data() {
        all.extend_from_slice(b);
    }
    Ok(Bytes::from(all))
}

/// How long an interrupted worker gets to report back.
const SETTLE: Duration = Duration::from_millis(500);

async fn settle(rx: &mut mpsc::Receiver<Msg>) -> Option<Msg> {
    tokio::time::timeout(SETTLE, rx.recv()).await.ok().flatten()
}

struct BodyState {
    rx: mpsc::Receiver<Msg>,
    /// Dropping the body (client gone) interrupts the query.
    guard: Option<CancelOnDrop>,
    control: Arc<QueryControl>,
    format: Format,
    tracker: Option<Arc<crate::engine::queries::Running>>,
    timeout: Duration,
    /// Taken from the channel already: sent before it is read on.
    queued: VecDeque<Msg>,
    done: bool,
    /// The error record went out: the body aborts next, so every client
    /// library sees a failed transfer, not a last row.
    abort_next: Option<String>,
}

/// hyper writes a response's head with its first data and drops what it
/// has not flushed when the body fails: an abort right after the first
/// chunk would lose the status line too, and the client would see a
/// connection that closed before any answer. One turn of the scheduler lets
/// hyper flush what the body gave it before the abort.
async fn before_abort() {
    tokio::task::yield_now().await;
}

async fn next_chunk(mut st: BodyState) -> Option<(Result<Bytes, std::io::Error>, BodyState)> {
    if let Some(reason) = st.abort_next.take() {
        before_abort().await;
        return Some((Err(std::io::Error::other(reason)), st));
    }
    if st.done {
        return None;
    }
    let next = match st.queued.pop_front() {
        Some(m) => Some(m),
        None => st.rx.recv().await,
    };
    match next {
        Some(Msg::Data(b)) => Some((Ok(b), st)),
        Some(Msg::Abort(reason)) | Some(Msg::Fail(QueryError::Internal(reason))) => {
            st.done = true;
            st.guard.take();
            before_abort().await;
            // The error itself where the worker recorded it (same text), so
            // a reader of batches (the Flight SQL listener) can tell a cap
            // from a timeout.
            let recorded = st
                .control
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let err = match recorded {
                Some(e) if e.to_string() == reason => std::io::Error::other(e),
                _ => std::io::Error::other(reason),
            };
            Some((Err(err), st))
        }
        Some(Msg::Fail(e)) => {
            st.done = true;
            before_abort().await;
            Some((Err(std::io::Error::other(e)), st))
        }
        Some(Msg::Start { .. }) => None,
        None => {
            st.done = true;
            st.guard.take();
            if st
                .control
                .complete
                .load(std::sync::atomic::Ordering::SeqCst)
            {
                return None;
            }
            // The worker stopped before the end and could not queue its own
            // ending (the channel was full of a slow reader's data): end the
            // body here, never as a complete-looking answer.
            let recorded = st
                .control
                .error
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take();
            let err = match st.control.reason() {
                _ if recorded.is_some() => recorded.unwrap_or(QueryError::Cancelled),
                Some(CancelReason::Timeout) => QueryError::Timeout(st.timeout),
                Some(CancelReason::Requested) => QueryError::CancelledByRequest,
                Some(CancelReason::ClientStalled) => QueryError::ClientStalled,
                Some(CancelReason::TempSpace) => QueryError::TempSpace,
                Some(CancelReason::Shutdown) => QueryError::ShuttingDown,
                _ => QueryError::Cancelled,
            };
            record_failure(st.tracker.as_deref(), &err);
            match error_record_for(st.format, &err) {
                Some(record) => {
                    st.abort_next = Some(err.to_string());
                    Some((Ok(record), st))
                }
                None => {
                    before_abort().await;
                    Some((Err(std::io::Error::other(err)), st))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;

    fn control(complete: bool) -> QueryControl {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let control = QueryControl::new(conn.interrupt_handle());
        control.complete.store(complete, Ordering::SeqCst);
        control
    }

    /// A channel holding `msgs`, its sender gone unless `running`.
    fn queued(msgs: Vec<Msg>, running: bool) -> (mpsc::Receiver<Msg>, Option<mpsc::Sender<Msg>>) {
        let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
        for m in msgs {
            assert!(tx.try_send(m).is_ok());
        }
        (rx, running.then_some(tx))
    }

    fn data(s: &'static str) -> Msg {
        Msg::Data(Bytes::from_static(s.as_bytes()))
    }

    #[test]
    fn only_an_answer_queued_in_full_that_ended_well_goes_out_whole() {
        let first = || Bytes::from_static(b"a");
        // Over, all of it queued, no error: one piece, in order.
        let (mut rx, _) = queued(vec![data("b"), data("c")], false);
        let all = whole(&mut rx, &control(true), first()).ok();
        assert_eq!(all.as_deref(), Some(&b"abc"[..]));

        // Still running: it streams, nothing more taken.
        let (mut rx, _tx) = queued(vec![data("b")], true);
        let rest = whole(&mut rx, &control(false), first()).err().unwrap();
        assert_eq!(rest.len(), 1);
        assert!(matches!(rx.try_recv(), Ok(Msg::Data(_))));

        // Ended in an error after the body began: it streams, and what was
        // taken comes first, in order, the abort last.
        let (mut rx, _) = queued(vec![data("b"), Msg::Abort("late".into())], false);
        let rest = whole(&mut rx, &control(true), first()).err().unwrap();
        assert_eq!(rest.len(), 3);
        assert!(matches!(rest.back(), Some(Msg::Abort(r)) if r == "late"));

        // The worker stopped before its end (nothing says it is complete),
        // or recorded an error it could not queue: it streams, and the body
        // reports the ending.
        let (mut rx, _) = queued(vec![data("b")], false);
        assert!(whole(&mut rx, &control(false), first()).is_err());
        let failed = control(true);
        *failed.error.lock().unwrap() = Some(QueryError::Cancelled);
        let (mut rx, _) = queued(vec![data("b")], false);
        assert!(whole(&mut rx, &failed, first()).is_err());
    }
}
