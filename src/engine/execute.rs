//! Running one client statement: guard, prepare, bind, stream, encode, all on
//! a blocking thread that owns a pooled connection; the async side only waits
//! for encoded chunks, enforces the deadline, and interrupts DuckDB when the
//! deadline passes, the client goes away, or the process shuts down.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch};
use bytes::Bytes;
use duckdb::types::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::encode::{self, Column, Format, ResultEncoder, Summary};
use crate::engine::guard::{self, Refusal};
use crate::engine::pipe;
use crate::engine::pool::{AcquireError, Lease, Pooled, QueryPool};
use crate::engine::sink::{self, BatchSink, ResultLayout, SinkError};

/// Encoded bytes are sent in chunks of about this size.
const CHUNK_BYTES: usize = 256 * 1024;
/// Batches a result encodes one at a time before encoding goes parallel.
const SERIAL_BATCHES: usize = 4;
/// Batches encoded together, split across threads.
const WINDOW_BATCHES: usize = 8;

/// Encodes `window` (consecutive batches, after at least one row) across the
/// machine's cores and appends the bytes in order.
fn encode_window(
    enc: &encode::RowsEncoder,
    window: Vec<RecordBatch>,
    out: &mut Vec<u8>,
) -> Result<(), arrow::error::ArrowError> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let threads = cores.min(window.len()).max(1);
    let per = window.len().div_ceil(threads);
    let mut chunks = window.chunks(per);
    let first = chunks.next().unwrap_or(&[]);
    let rest: Vec<&[RecordBatch]> = chunks.collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = rest
            .iter()
            .map(|chunk| {
                scope.spawn(move || -> Result<Vec<u8>, arrow::error::ArrowError> {
                    let mut bytes = Vec::new();
                    for b in chunk.iter() {
                        enc.encode(b, 1, &mut bytes)?;
                    }
                    Ok(bytes)
                })
            })
            .collect();
        for b in first {
            enc.encode(b, 1, out)?;
        }
        for h in handles {
            let bytes = h.join().map_err(|_| {
                arrow::error::ArrowError::ComputeError("an encoder thread panicked".into())
            })??;
            out.extend_from_slice(&bytes);
        }
        Ok(())
    })
}

/// The longest text wrapper the gateway builds (nested types can make the
/// rendering expressions grow); beyond it, Arrow's values serve.
const MAX_WRAPPER_BYTES: usize = 256 * 1024;
/// Accepted statement texts remembered per connection.
const VERDICT_CACHE: usize = 256;
/// Chunks in flight between the DuckDB thread and the HTTP body.
const CHANNEL_CHUNKS: usize = 4;

/// A positional parameter.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    /// JSON `null`: SQL NULL.
    Null,
    /// A JSON boolean.
    Bool(bool),
    /// An integer that fits i64 (DuckDB's BIGINT).
    Int(i64),
    /// An integer beyond i64 that fits u64 (DuckDB's UBIGINT).
    UInt(u64),
    /// An integer beyond u64 (DuckDB's HUGEINT).
    HugeInt(i128),
    /// An integer beyond i128 (DuckDB's UHUGEINT).
    UHugeInt(u128),
    /// A number with a fraction and no exponent, exactly as written:
    /// DuckDB's DECIMAL(width, scale), as DuckDB types such a literal.
    Decimal {
        /// Digits written, before and after the point.
        width: u8,
        /// Digits after the point.
        scale: u8,
        /// The digits as an integer, with the sign.
        value: i128,
    },
    /// A number with an exponent (DuckDB's DOUBLE).
    Float(f64),
    /// A JSON string (DuckDB's VARCHAR).
    Text(String),
}

impl Param {
    fn to_value(&self) -> Value {
        match self {
            Param::Null => Value::Null,
            Param::Bool(b) => Value::Boolean(*b),
            Param::Int(i) => Value::BigInt(*i),
            Param::UInt(u) => Value::UBigInt(*u),
            Param::HugeInt(i) => Value::HugeInt(*i),
            Param::UHugeInt(u) => Value::UHugeInt(*u),
            Param::Decimal {
                width,
                scale,
                value,
            } => match duckdb::types::Decimal::new(*width, *scale, *value) {
                Ok(d) => Value::Decimal(d),
                // `from_number` only builds valid widths.
                Err(_) => Value::Null,
            },
            Param::Float(f) => Value::Double(*f),
            Param::Text(s) => Value::Text(s.clone()),
        }
    }

    /// A JSON number, typed the way DuckDB types the same literal in SQL:
    /// integers as BIGINT, UBIGINT, HUGEINT or UHUGEINT (whichever holds
    /// them), `12.50` as DECIMAL(4,2), `1e3` as DOUBLE. A number none of
    /// these holds exactly is an error, never a silently rounded DOUBLE.
    pub fn from_number(text: &str) -> Result<Param, String> {
        if let Ok(i) = text.parse::<i64>() {
            return Ok(Param::Int(i));
        }
        if let Ok(u) = text.parse::<u64>() {
            return Ok(Param::UInt(u));
        }
        if let Ok(i) = text.parse::<i128>() {
            return Ok(Param::HugeInt(i));
        }
        if let Ok(u) = text.parse::<u128>() {
            return Ok(Param::UHugeInt(u));
        }
        let too_big = || {
            format!(
                "{text} has more digits than DuckDB's widest exact types hold; pass it as a string and cast it in SQL (e.g. $1::DOUBLE)"
            )
        };
        if text.bytes().all(|b| b == b'-' || b.is_ascii_digit()) {
            return Err(too_big());
        }
        if text.contains(['e', 'E']) {
            return text
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(Param::Float)
                .ok_or_else(too_big);
        }
        // JSON's grammar: -?digits.digits
        let (int, frac) = text.split_once('.').ok_or_else(too_big)?;
        let negative = int.starts_with('-');
        let int = int.trim_start_matches('-');
        // DuckDB counts every digit written: `0.05` is DECIMAL(3,2).
        let width = int.len() + frac.len();
        if width > 38 {
            return Err(too_big());
        }
        let magnitude: i128 = format!("{int}{frac}").parse().map_err(|_| too_big())?;
        Ok(Param::Decimal {
            width: width as u8,
            scale: frac.len() as u8,
            value: if negative { -magnitude } else { magnitude },
        })
    }
}

/// One statement to run, fully validated by the HTTP layer.
#[derive(Debug, Clone)]
pub struct QueryJob {
    /// The client's SQL text: one statement.
    pub sql: String,
    /// Values for `$1`, `$2`, ..., in order.
    pub params: Vec<Param>,
    /// How the result is encoded.
    pub format: Format,
    /// How long the query may take, counted from `started`.
    pub timeout: Duration,
    /// Rows beyond this are cut and the result marked truncated.
    pub max_rows: u64,
    /// Encoded bytes after which the result is cut.
    pub max_bytes: u64,
    /// What the guard enforces.
    pub rules: Arc<guard::Rules>,
    /// When the request arrived; the deadline and `elapsed_ms` count from it.
    pub started: Instant,
    /// Set on the second run after an expired-credentials failure.
    pub retried: bool,
    /// How long a client may accept no bytes before it is cut off.
    pub stall_timeout: Duration,
    /// Largest single value (or one-row batch) the gateway will encode.
    pub max_value_bytes: u64,
    /// Renders an error that ends a streamed body (NDJSON's last record):
    /// the HTTP layer's problem document, handed in so the engine needs no
    /// knowledge of HTTP.
    pub render_error: fn(&QueryError) -> serde_json::Value,
    /// The query's entry in the registry of running queries: its state and
    /// counts are kept current, and a cancel request stops it.
    pub tracker: Option<Arc<crate::engine::queries::Running>>,
    /// Keep the result here (an async statement's spool) instead of
    /// encoding it: `format` is then unused, and the answer's body is empty.
    pub sink: Option<Arc<dyn BatchSink>>,
}

/// Why a query did not produce a complete result.
#[derive(Debug, Clone, thiserror::Error)]
pub enum QueryError {
    /// The guard refused the statement.
    #[error("{0:?}")]
    Refused(Refusal),
    /// DuckDB failed to prepare or run the statement.
    #[error("{class} error: {message}")]
    Sql {
        /// DuckDB's error class, e.g. `Catalog`, or `Unknown`.
        class: String,
        /// DuckDB's message, without the class.
        message: String,
    },
    /// The number of parameters differs from the statement's placeholders.
    #[error("expected {expected} parameters, got {got}")]
    ParamCount {
        /// Placeholders in the statement.
        expected: usize,
        /// Parameters the client sent.
        got: usize,
    },
    /// A parameter value did not convert to a DuckDB value.
    #[error("parameter {index}: {message}")]
    Param {
        /// The parameter's position, 1-based as in `$n`.
        index: usize,
        /// Why it did not convert.
        message: String,
    },
    /// The deadline passed; holds the job's timeout.
    #[error("query timed out")]
    Timeout(Duration),
    /// The client went away, or the result could no longer be delivered.
    #[error("query cancelled")]
    Cancelled,
    /// A cancel request (`DELETE /queries/{id}`) stopped it.
    #[error("query cancelled on request")]
    CancelledByRequest,
    /// The client accepted no bytes for the stall timeout.
    #[error("the client accepted no data for too long")]
    ClientStalled,
    /// The spill directory passed `DUCKGATE_MAX_TEMP_DIRECTORY_SIZE`.
    #[error("the spill directory passed its cap")]
    TempSpace,
    /// A value (or a one-row batch, or a CSV row) is larger than the job's
    /// `max_value_bytes`.
    #[error("a value of {size} bytes is larger than the limit of {limit}")]
    ValueTooLarge {
        /// The oversized value's bytes.
        size: u64,
        /// The job's `max_value_bytes`.
        limit: u64,
    },
    /// The process is shutting down.
    #[error("shutting down")]
    ShuttingDown,
    /// No pooled connection came free within the acquire timeout (held here).
    #[error("no connection within the acquire timeout")]
    PoolExhausted(Duration),
    /// S3 credentials are expired (S3 said so, or they are known to be), and
    /// no retry with fresh ones succeeded.
    #[error("S3 credentials expired")]
    CredentialsExpired,
    /// A kept result would pass a byte quota (`scope`: `statement`, `token` or `spool`).
    #[error("the result passed the {scope} spool quota of {limit} bytes")]
    SpoolFull {
        /// The quota, in bytes.
        limit: u64,
        /// Which quota: `statement`, `token` or `spool`.
        scope: &'static str,
    },
    /// A failure of the gateway itself (encoding, the spool's I/O, ...).
    #[error("internal error: {0}")]
    Internal(String),
}

impl QueryError {
    /// The metrics label of the outcome.
    pub fn outcome(&self) -> &'static str {
        match self {
            QueryError::Refused(Refusal::Forbidden { .. }) => "refused",
            QueryError::Refused(_)
            | QueryError::Sql { .. }
            | QueryError::ParamCount { .. }
            | QueryError::Param { .. } => "sql_error",
            QueryError::Timeout(_) => "timeout",
            QueryError::Cancelled | QueryError::CancelledByRequest | QueryError::ShuttingDown => {
                "cancelled"
            }
            QueryError::ClientStalled => "client_stalled",
            QueryError::TempSpace => "temp_space",
            QueryError::ValueTooLarge { .. } => "value_too_large",
            QueryError::PoolExhausted(_) => "pool_exhausted",
            QueryError::CredentialsExpired => "credentials_expired",
            QueryError::SpoolFull { .. } => "spool_full",
            QueryError::Internal(_) => "internal_error",
        }
    }

    /// Whether this looks like S3 rejecting expired credentials.
    pub fn is_expired_token(&self) -> bool {
        match self {
            QueryError::Sql { message, .. } | QueryError::Refused(Refusal::Bind(message)) => {
                message.contains("ExpiredToken")
            }
            _ => false,
        }
    }
}

/// What the HTTP layer gets once the first rows are ready.
pub struct QueryOutput {
    /// Human name of the statement kind, e.g. `SELECT`.
    pub kind: String,
    /// The `Content-Type` of the body's format.
    pub content_type: &'static str,
    /// The body: encoded chunks, or an error that aborts the body.
    pub body: futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>,
}

enum Msg {
    /// Execution succeeded; the first bytes of the body.
    Start {
        kind: String,
        first: Bytes,
    },
    Data(Bytes),
    /// A failure before anything was sent.
    Fail(QueryError),
    /// A failure after the body began, for formats that cannot carry it.
    Abort(String),
}

/// Why a running query is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CancelReason {
    Timeout,
    ClientGone,
    /// `DELETE /queries/{id}` asked for it.
    Requested,
    /// The client accepted no bytes for the stall limit.
    ClientStalled,
    /// The spill directory passed `DUCKGATE_MAX_TEMP_DIRECTORY_SIZE`.
    TempSpace,
    Shutdown,
}

/// Where the worker is with its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Not yet executing (guard, prepare).
    Pending,
    /// Executing or streaming: an interrupt reaches it.
    Running,
    /// The connection is no longer the query's: never interrupt it again.
    Done,
}

#[derive(Debug)]
struct ControlState {
    phase: Phase,
    /// Why the query is being stopped, once it is.
    reason: Option<CancelReason>,
}

/// Lets the async side interrupt the query exactly while it runs on its
/// connection, never after the connection went back to the pool.
struct QueryControl {
    state: Mutex<ControlState>,
    interrupt: Arc<duckdb::InterruptHandle>,
    /// Fires on any cancellation, so a worker blocked on a full channel
    /// (a slow reader) wakes at once.
    cancelled: CancellationToken,
    /// Fires when the worker is done with the connection.
    finished: CancellationToken,
    /// Set when the body's last bytes were queued: the whole result, or
    /// the ending of a failed one.
    complete: std::sync::atomic::AtomicBool,
    /// The error that ended a body after it began, for the body to report
    /// if the worker could not queue it.
    error: Mutex<Option<QueryError>>,
}

impl QueryControl {
    fn new(interrupt: Arc<duckdb::InterruptHandle>) -> Self {
        Self {
            state: Mutex::new(ControlState {
                phase: Phase::Pending,
                reason: None,
            }),
            interrupt,
            cancelled: CancellationToken::new(),
            finished: CancellationToken::new(),
            complete: std::sync::atomic::AtomicBool::new(false),
            error: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the query as executing; refused once it was cancelled.
    fn start(&self) -> Result<(), CancelReason> {
        let mut s = self.lock();
        match s.reason {
            Some(r) => Err(r),
            None => {
                s.phase = Phase::Running;
                Ok(())
            }
        }
    }

    fn finish(&self) {
        self.lock().phase = Phase::Done;
        self.finished.cancel();
    }

    fn cancel(&self, reason: CancelReason) {
        let mut s = self.lock();
        if s.reason.is_some() || s.phase == Phase::Done {
            return;
        }
        s.reason = Some(reason);
        if s.phase == Phase::Running {
            self.interrupt.interrupt();
        }
        drop(s);
        self.cancelled.cancel();
    }

    /// Interrupts again while the cancelled query still runs: DuckDB clears
    /// the flag when a statement starts, so an early interrupt can be lost.
    fn reinterrupt(&self) {
        let s = self.lock();
        if s.phase == Phase::Running && s.reason.is_some() {
            self.interrupt.interrupt();
        }
    }

    fn reason(&self) -> Option<CancelReason> {
        self.lock().reason
    }
}

/// Interrupts the query if the request goes away (handler future or body
/// stream dropped) before it finished.
struct CancelOnDrop(Arc<QueryControl>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel(CancelReason::ClientGone);
    }
}

/// How long an interrupted query may keep its connection before the pool
/// replaces it.
const STUCK_AFTER: Duration = Duration::from_secs(3);

/// Watches one query independently of the HTTP body (which is not polled
/// while a client reads slowly): enforces the deadline, keeps interrupting
/// until the worker lets go, and replaces the lease if it does not.
async fn watchdog(
    control: Arc<QueryControl>,
    lease: Arc<Lease>,
    deadline: tokio::time::Instant,
    shutdown: CancellationToken,
    spill: CancellationToken,
    requested: CancellationToken,
) {
    tokio::select! {
        _ = control.finished.cancelled() => return,
        _ = control.cancelled.cancelled() => {}
        _ = requested.cancelled() => control.cancel(CancelReason::Requested),
        _ = tokio::time::sleep_until(deadline) => control.cancel(CancelReason::Timeout),
        _ = shutdown.cancelled() => control.cancel(CancelReason::Shutdown),
        _ = spill.cancelled() => control.cancel(CancelReason::TempSpace),
    }
    let stuck_at = tokio::time::Instant::now() + STUCK_AFTER;
    loop {
        tokio::select! {
            _ = control.finished.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => control.reinterrupt(),
        }
        if tokio::time::Instant::now() >= stuck_at {
            break;
        }
    }
    if !control.finished.is_cancelled() {
        lease.replace();
    }
}

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
    // A client waits the acquire timeout; a kept result (an async
    // statement) waits as long as its own deadline allows.
    let acquired = match job.sink {
        None => futures::future::Either::Left(pool.acquire()),
        Some(_) => futures::future::Either::Right(pool.acquire_within(
            deadline.saturating_duration_since(tokio::time::Instant::now()),
            false,
        )),
    };
    let (slot, lease) = tokio::select! {
        r = acquired => r.map_err(|e| match e {
            AcquireError::Timeout if job.sink.is_some() => QueryError::Timeout(job.timeout),
            AcquireError::Timeout => QueryError::PoolExhausted(pool.acquire_timeout()),
            AcquireError::Closed => QueryError::ShuttingDown,
            AcquireError::Backend(e) => QueryError::Internal(e.to_string()),
        })?,
        _ = shutdown.cancelled() => return Err(QueryError::ShuttingDown),
        _ = requested.cancelled() => return Err(QueryError::CancelledByRequest),
    };
    let lease = Arc::new(lease);
    let control = Arc::new(QueryControl::new(slot.interrupt.clone()));
    let guard = CancelOnDrop(control.clone());
    let (tx, mut rx) = mpsc::channel(CHANNEL_CHUNKS);
    let format = job.format;
    let timeout = job.timeout;
    let render_error = job.render_error;
    let tracker = job.tracker.clone();
    tokio::spawn(watchdog(
        control.clone(),
        lease.clone(),
        deadline,
        shutdown.clone(),
        pool.spill_token(),
        requested,
    ));
    // A CSV answer is DuckDB's COPY while a place for one is free.
    let csv_copy = (job.format == Format::Csv && job.sink.is_none())
        .then(|| pool.csv_copy())
        .flatten();
    {
        let control = control.clone();
        let runtime = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || work(slot, lease, job, tx, control, runtime, csv_copy));
    }

    // The watchdog interrupts at the deadline or on shutdown; the worker
    // then reports within moments (or its own result, if it finished in the
    // same instant).
    let first = tokio::select! {
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

    let state = BodyState {
        rx,
        guard: Some(guard),
        control,
        format,
        render_error,
        tracker,
        timeout,
        first: Some(first),
        done: false,
    };
    let body = futures::stream::unfold(state, next_chunk);
    Ok(QueryOutput {
        kind,
        content_type: format.content_type(),
        body: Box::pin(body),
    })
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
    render_error: fn(&QueryError) -> serde_json::Value,
    tracker: Option<Arc<crate::engine::queries::Running>>,
    timeout: Duration,
    first: Option<Bytes>,
    done: bool,
}

async fn next_chunk(mut st: BodyState) -> Option<(Result<Bytes, std::io::Error>, BodyState)> {
    if let Some(first) = st.first.take() {
        return Some((Ok(first), st));
    }
    if st.done {
        return None;
    }
    match st.rx.recv().await {
        Some(Msg::Data(b)) => Some((Ok(b), st)),
        Some(Msg::Abort(reason)) | Some(Msg::Fail(QueryError::Internal(reason))) => {
            st.done = true;
            st.guard.take();
            Some((Err(std::io::Error::other(reason)), st))
        }
        Some(Msg::Fail(e)) => {
            st.done = true;
            Some((Err(std::io::Error::other(e.to_string())), st))
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
            match error_record_for(st.format, st.render_error, &err) {
                Some(record) => Some((Ok(record), st)),
                None => Some((Err(std::io::Error::other(err.to_string())), st)),
            }
        }
    }
}

/// The blocking half. Owns the pooled connection until it returns.
fn work(
    mut slot: Pooled,
    lease: Arc<Lease>,
    job: QueryJob,
    tx: mpsc::Sender<Msg>,
    control: Arc<QueryControl>,
    runtime: tokio::runtime::Handle,
    csv_copy: Option<tokio::sync::OwnedSemaphorePermit>,
) {
    crate::engine::priority::lower_for_queries();
    let started = Instant::now();
    let sender = Sender {
        tx,
        control: control.clone(),
        runtime,
        stall: job.stall_timeout,
    };
    let outcome = work_inner(&mut slot, &job, &sender, &control, csv_copy.is_some());
    drop(csv_copy);
    if let Some(t) = &job.tracker {
        // The connection is about to serve someone else: its progress is
        // no longer this query's.
        t.connection.store(0, std::sync::atomic::Ordering::SeqCst);
    }
    // If the connection still holds a transaction (it should not), roll back
    // so the pool's recycle check does not have to discard it.
    if !slot.conn.is_autocommit() {
        let _ = slot.conn.execute_batch("ROLLBACK");
    }
    // Counted before the connection goes back, so whoever sees the pool
    // drained also sees the outcome.
    let label = match &outcome {
        Ok(()) => "ok",
        Err(e) => e.outcome(),
    };
    metrics::counter!("duckgate_queries_total", "outcome" => label).increment(1);
    metrics::histogram!("duckgate_query_duration_seconds", "outcome" => label)
        .record(started.elapsed().as_secs_f64());
    control.finish();
    drop(sender);
    lease.release(slot);
}

/// Sends encoded chunks to the HTTP body, waking on cancellation and
/// cutting off a client that accepts nothing for the stall limit.
#[derive(Clone)]
struct Sender {
    tx: mpsc::Sender<Msg>,
    control: Arc<QueryControl>,
    runtime: tokio::runtime::Handle,
    stall: Duration,
}

impl Sender {
    /// Queues `msg`; false when the query was cancelled or the client
    /// stalled or left.
    fn send(&self, msg: Msg) -> bool {
        self.runtime.block_on(async {
            tokio::select! {
                r = self.tx.send(msg) => r.is_ok(),
                _ = self.control.cancelled.cancelled() => false,
                _ = tokio::time::sleep(self.stall) => {
                    self.control.cancel(CancelReason::ClientStalled);
                    false
                }
            }
        })
    }

    /// Queues `msg` only if there is room now (the answer before any body).
    fn try_send(&self, msg: Msg) {
        let _ = self.tx.try_send(msg);
    }

    /// Records the error that ends a begun body, then queues its last
    /// bytes; if they cannot be queued (the client stopped reading, or the
    /// query was cancelled), the body ends itself with the recorded error.
    fn end(&self, err: &QueryError, last: Vec<Msg>) {
        *self.control.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(err.clone());
        for msg in last {
            if !self.send_final(msg) {
                return;
            }
        }
        // Delivered: the body ends as queued and reports nothing twice.
        self.control
            .complete
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Like `send`, but a cancellation does not stop it: only a full
    /// channel for the stall limit does.
    fn send_final(&self, msg: Msg) -> bool {
        self.runtime.block_on(async {
            tokio::time::timeout(self.stall, self.tx.send(msg))
                .await
                .is_ok_and(|r| r.is_ok())
        })
    }
}

fn cancel_error(control: &QueryControl, job: &QueryJob) -> Option<QueryError> {
    control.reason().map(|r| match r {
        CancelReason::Timeout => QueryError::Timeout(job.timeout),
        CancelReason::ClientGone => QueryError::Cancelled,
        CancelReason::Requested => QueryError::CancelledByRequest,
        CancelReason::ClientStalled => QueryError::ClientStalled,
        CancelReason::TempSpace => QueryError::TempSpace,
        CancelReason::Shutdown => QueryError::ShuttingDown,
    })
}

fn work_inner(
    slot: &mut Pooled,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
    csv_copy: bool,
) -> Result<(), QueryError> {
    let fail = |e: QueryError| {
        tx.try_send(Msg::Fail(e.clone()));
        Err(e)
    };
    // A verdict depends only on the text and the policy, so a text this
    // connection has accepted before is not parsed and bound a second time.
    use std::sync::atomic::Ordering::SeqCst;
    let epoch = slot.catalog_epoch.load(SeqCst);
    if slot.prepared_epoch != epoch {
        slot.conn.flush_prepared_statement_cache();
        slot.prepared_epoch = epoch;
    }
    let accepted = match slot.verdicts.get(&job.sql).filter(|(e, _)| *e == epoch) {
        Some((_, a)) => a.clone(),
        None => match guard::check(&slot.raw, &job.sql, &job.rules) {
            Ok(a) => {
                if slot.verdicts.len() >= VERDICT_CACHE {
                    slot.verdicts.clear();
                }
                slot.verdicts.insert(job.sql.clone(), (epoch, a.clone()));
                a
            }
            Err(r) => return fail(QueryError::Refused(r)),
        },
    };
    if let Some(t) = &job.tracker {
        let _ = t.kind.set(accepted.kind.clone());
        t.advance(crate::engine::queries::QueryState::Running);
    }
    // A statement that may change the catalog makes every verdict older
    // than it stale, whatever its outcome: the epoch moves when it starts
    // (so nothing judged while it runs is kept) and when it is over.
    let _epoch = (!accepted.read_only).then(|| {
        slot.catalog_epoch.fetch_add(1, SeqCst);
        BumpOnDrop(slot.catalog_epoch.clone())
    });
    if let Err(r) = control.start() {
        let _ = r;
        return fail(cancel_error(control, job).unwrap_or(QueryError::Cancelled));
    }
    if let Some(t) = &job.tracker {
        t.connection.store(slot.connection_id + 1, SeqCst);
    }
    if let Some(sink) = &job.sink {
        return spool_statement(slot, &accepted, job, tx, control, sink.as_ref(), epoch);
    }
    // CSV is DuckDB's own COPY writer, streamed (see `pipe`), for every
    // query DuckDB can COPY while a place for it is free; the rest take the
    // Arrow path below (the same bytes, written from DuckDB's casts).
    if job.format == Format::Csv && csv_copy {
        let copy = accepted
            .result
            .as_ref()
            .and_then(|r| r.sql.as_deref())
            .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES)
            .and_then(|sql| {
                // Parsed once per text and connection, like verdicts.
                if !slot.copies.contains_key(sql) {
                    if slot.copies.len() >= VERDICT_CACHE {
                        slot.copies.clear();
                    }
                    slot.copies.insert(sql.to_string(), pipe::copy_sql(sql));
                }
                slot.copies[sql].clone()
            });
        let (token, connection_id) = (slot.pipe_token, slot.connection_id);
        if let Some(copy) = copy {
            match slot.conn.prepare_cached(&copy) {
                Ok(mut stmt) => {
                    return copy_csv(&mut stmt, token, connection_id, &accepted, job, tx, control)
                }
                Err(e) => {
                    if let Some(err) = cancel_error(control, job) {
                        return fail(err);
                    }
                    tracing::warn!(error_class = %error_class(&e), "the CSV COPY did not prepare; using Arrow values");
                }
            }
        }
    }
    // Prepared statements are cached per connection (DuckDB rebinds them
    // when the catalog changes); one whose result was not read to the end is
    // discarded rather than kept with its pending result.
    // CSV is DuckDB's own text: the query wrapped so DuckDB casts every
    // column to VARCHAR, as its COPY ... (FORMAT csv) writer does. Should
    // DuckDB's rendering of the query not prepare, the Arrow path serves.
    // JSON and NDJSON likewise let DuckDB render the few values Arrow
    // cannot carry faithfully (intervals, TIMETZ, BIT, BIGNUM, map keys).
    let text_sql = match job.format {
        Format::Csv => csv_text_sql(&accepted),
        Format::Json | Format::Ndjson => json_text_sql(&accepted),
        Format::Arrow => arrow_interval_sql(&accepted),
    }
    .filter(|sql| sql.len() <= MAX_WRAPPER_BYTES);
    // What runs is what the guard judged: the wrapper too (once per text
    // and catalog epoch, like any statement).
    let text_sql = text_sql.filter(|sql| judged(slot, sql, &job.rules, epoch));
    let wrapped = text_sql
        .as_deref()
        .and_then(|sql| match slot.conn.prepare_cached(sql) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error_class = %error_class(&e), "text wrapper did not prepare; using Arrow values");
                None
            }
        });
    let csv_names = wrapped
        .as_ref()
        .filter(|_| job.format == Format::Csv)
        .and_then(|_| accepted.result.as_ref().map(|r| r.names.clone()));
    let mut stmt = match wrapped {
        Some(s) => s,
        None => match slot.conn.prepare_cached(&job.sql) {
            Ok(s) => s,
            Err(e) => return fail(cancel_error(control, job).unwrap_or_else(|| sql_error(&e))),
        },
    };
    match stream_statement(&mut stmt, &accepted, csv_names, job, tx, control) {
        Ok(true) => Ok(()),
        Ok(false) => {
            stmt.discard();
            Ok(())
        }
        Err(e) => {
            stmt.discard();
            Err(e)
        }
    }
}

/// Whether the guard accepts a wrapper the gateway built (judged once per
/// text and catalog epoch, like any statement).
fn judged(slot: &mut Pooled, sql: &str, rules: &guard::Rules, epoch: u64) -> bool {
    if slot.verdicts.get(sql).is_some_and(|(e, _)| *e == epoch) {
        return true;
    }
    match guard::check(&slot.raw, sql, rules) {
        Ok(a) => {
            slot.verdicts.insert(sql.to_string(), (epoch, a));
            true
        }
        Err(r) => {
            tracing::warn!(refusal = ?r, "the guard refused a wrapper; using the statement's own values");
            false
        }
    }
}

/// The job's parameters as DuckDB values, once their count is right.
fn param_values(stmt: &duckdb::Statement<'_>, job: &QueryJob) -> Result<Vec<Value>, QueryError> {
    let expected = stmt.parameter_count();
    if expected != job.params.len() {
        return Err(QueryError::ParamCount {
            expected,
            got: job.params.len(),
        });
    }
    Ok(job.params.iter().map(Param::to_value).collect())
}

/// Why binding `values` or executing failed: the cancellation, if there was
/// one, else the parameter or DuckDB's error.
fn execution_error(
    e: &duckdb::Error,
    values: &[Value],
    control: &QueryControl,
    job: &QueryJob,
) -> QueryError {
    cancel_error(control, job).unwrap_or_else(|| match e {
        duckdb::Error::ToSqlConversionFailure(inner) => QueryError::Param {
            // The first value that does not convert (1-based, as `$n`).
            index: values
                .iter()
                .position(|v| duckdb::ToSql::to_sql(v).is_err())
                .map_or(1, |i| i + 1),
            message: inner.to_string(),
        },
        _ => sql_error(e),
    })
}

/// Binds the parameters and executes, ready to step through Arrow batches.
fn execute_arrow(
    stmt: &mut duckdb::Statement<'_>,
    job: &QueryJob,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let values = param_values(stmt, job)?;
    stmt.stream_arrow(duckdb::params_from_iter(values.iter()))
        .map(|_| ())
        .map_err(|e| execution_error(&e, &values, control, job))
}

/// A CSV answer in the making: what DuckDB's COPY writes, cut at the row
/// and byte limits (after the row that passes them), sent in chunks.
struct CsvPipe {
    tx: Sender,
    kind: String,
    max_rows: u64,
    max_bytes: u64,
    max_value_bytes: u64,
    tracker: Option<Arc<crate::engine::queries::Running>>,
    state: Mutex<CsvState>,
}

#[derive(Default)]
struct CsvState {
    buf: Vec<u8>,
    bytes: u64,
    rows: pipe::RowEnds,
    /// The body began (its first chunk was queued).
    started: bool,
    /// Stopped at a limit: DuckDB's failure to write more is the end.
    cut: bool,
    /// No more bytes are taken (cut, cancelled, or the client left).
    closed: bool,
    /// Why the pipe stopped DuckDB, when it was not a limit or the client.
    failed: Option<QueryError>,
}

impl CsvPipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, CsvState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues what is buffered; the first chunk starts the body.
    fn flush(&self, st: &mut CsvState) -> bool {
        let chunk = Bytes::from(std::mem::take(&mut st.buf));
        if st.started {
            return self.tx.send(Msg::Data(chunk));
        }
        // Begun only once the start is queued: a start lost to a
        // cancellation leaves the answer a problem document.
        let queued = self.tx.send(Msg::Start {
            kind: self.kind.clone(),
            first: chunk,
        });
        if queued {
            st.started = true;
            if let Some(t) = &self.tracker {
                t.advance(crate::engine::queries::QueryState::Streaming);
            }
        }
        queued
    }
}

impl pipe::Output for CsvPipe {
    fn write(&self, data: &[u8]) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        let (before, max_rows, max_bytes) = (st.bytes, self.max_rows, self.max_bytes);
        // The header's end is the first row end.
        let cut = st.rows.feed(data, |ends, at| {
            ends > max_rows || before + at as u64 >= max_bytes
        });
        // One huge row would be held whole: refuse it before buffering,
        // like a huge value in the other formats.
        let widest = st.rows.widest.max(st.rows.open_row);
        if widest > self.max_value_bytes {
            st.failed = Some(QueryError::ValueTooLarge {
                size: widest,
                limit: self.max_value_bytes,
            });
            st.closed = true;
            return false;
        }
        let take = cut.unwrap_or(data.len());
        st.buf.extend_from_slice(&data[..take]);
        st.bytes += take as u64;
        if let Some(t) = &self.tracker {
            let rows = st.rows.ends.saturating_sub(1);
            t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
        }
        if cut.is_some() {
            st.cut = true;
            st.closed = true;
            return false;
        }
        // The first row goes out at once (time to first byte); later ones
        // in chunks of CHUNK_BYTES.
        let first_row = !st.started && st.rows.ends >= 2;
        if (first_row || st.buf.len() >= CHUNK_BYTES) && !self.flush(&mut st) {
            st.closed = true;
            return false;
        }
        true
    }
}

/// Runs the CSV COPY of an accepted query with its output attached to the
/// client's body.
fn copy_csv(
    stmt: &mut duckdb::Statement<'_>,
    token: u64,
    connection_id: u64,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let fail = |e: QueryError| {
        tx.try_send(Msg::Fail(e.clone()));
        Err(e)
    };
    let values = match param_values(stmt, job) {
        Ok(v) => v,
        Err(e) => return fail(e),
    };
    let out = Arc::new(CsvPipe {
        tx: tx.clone(),
        kind: accepted.kind.clone(),
        max_rows: job.max_rows,
        max_bytes: job.max_bytes,
        max_value_bytes: job.max_value_bytes,
        tracker: job.tracker.clone(),
        state: Mutex::new(CsvState::default()),
    });
    let attached = pipe::attach(token, connection_id, out.clone());
    let result = stmt.execute(duckdb::params_from_iter(values.iter()));
    drop(attached);
    let mut st = out.lock();
    st.closed = true;
    // DuckDB's failure to write past a limit is the answer's end; a
    // cancellation as it finished still means what was sent is not whole.
    let err = match result {
        Err(e) if !st.cut => Some(
            st.failed
                .take()
                .unwrap_or_else(|| execution_error(&e, &values, control, job)),
        ),
        _ => cancel_error(control, job),
    };
    if let Some(err) = err {
        if !st.started {
            return fail(err);
        }
        end_body(&mut st.buf, None, &err, tx, job);
        return Err(err);
    }
    if !out.flush(&mut st) {
        return Err(QueryError::Cancelled);
    }
    control
        .complete
        .store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// DuckDB's own type names of an executed statement's columns, where the
/// binder gave them (the guard asked), else derived from the exported type.
fn column_types(
    stmt: &duckdb::Statement<'_>,
    accepted: &guard::Accepted,
    schema: &arrow::datatypes::Schema,
) -> Vec<String> {
    let described = accepted
        .result
        .as_ref()
        .filter(|r| r.types.len() == schema.fields().len());
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| match described.map(|r| r.types[i].as_str()) {
            Some(t) if t != "UNKNOWN" => t.to_string(),
            _ => encode::logical_type_name(&stmt.column_logical_type(i), f.data_type()),
        })
        .collect()
}

impl From<SinkError> for QueryError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Full { limit, scope } => QueryError::SpoolFull { limit, scope },
            SinkError::Io(m) => QueryError::Internal(format!("writing the spool: {m}")),
        }
    }
}

/// Runs one accepted statement into `sink` (an async statement's spool),
/// wrapped so that every format can be served from what is kept (see
/// `sink`). The answer is an empty body once the result is complete.
fn spool_statement(
    slot: &mut Pooled,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
    sink: &dyn BatchSink,
    epoch: u64,
) -> Result<(), QueryError> {
    let fail = |e: QueryError| {
        tx.try_send(Msg::Fail(e.clone()));
        Err(e)
    };
    let wrapped = sink::spool_sql(accepted)
        .filter(|(sql, _)| sql.len() <= MAX_WRAPPER_BYTES && judged(slot, sql, &job.rules, epoch));
    let prepared = wrapped.and_then(|(sql, layout)| match slot.conn.prepare_cached(&sql) {
        Ok(s) => Some((s, Some(layout))),
        Err(e) => {
            tracing::warn!(error_class = %error_class(&e), "spool wrapper did not prepare; keeping the statement's own values");
            None
        }
    });
    let (mut stmt, layout) = match prepared {
        Some(p) => p,
        None => match slot.conn.prepare_cached(&job.sql) {
            Ok(s) => (s, None),
            Err(e) => return fail(cancel_error(control, job).unwrap_or_else(|| sql_error(&e))),
        },
    };
    let keep = || -> Result<bool, QueryError> {
        execute_arrow(&mut stmt, job, control)?;
        let schema = stmt.schema();
        let layout = match layout {
            Some(l) => l,
            None => ResultLayout::plain(
                accepted.kind.clone(),
                schema.fields().iter().map(|f| f.name().clone()).collect(),
                column_types(&stmt, accepted, &schema),
            ),
        };
        sink.begin(&layout, &schema)?;
        let own_columns = layout.names.len();
        let mut rows: u64 = 0;
        let mut truncated = false;
        loop {
            if control.reason().is_some() {
                break;
            }
            let batch = match stmt.step() {
                Ok(Some(sa)) => RecordBatch::from(&sa),
                Ok(None) => break,
                Err(e) => return Err(cancel_error(control, job).unwrap_or_else(|| sql_error(&e))),
            };
            if batch.num_rows() == 0 {
                continue;
            }
            // The result's own values, not the text twins kept beside them
            // (a blob's CSV text is up to four times its size).
            let own: Vec<usize> = (0..own_columns.min(batch.num_columns())).collect();
            let checked = batch
                .project(&own)
                .map_err(|e| QueryError::Internal(e.to_string()))?;
            if let Some(size) = oversized_value(&checked, job.max_value_bytes) {
                return Err(QueryError::ValueTooLarge {
                    size,
                    limit: job.max_value_bytes,
                });
            }
            let Some((part, cut)) = within_row_limit(batch, rows, job.max_rows) else {
                truncated = true;
                break;
            };
            truncated = cut;
            let take = part.num_rows();
            sink.batch(&part)?;
            rows += take as u64;
            if let Some(t) = &job.tracker {
                t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
            }
            if truncated {
                break;
            }
        }
        if let Some(err) = cancel_error(control, job) {
            return Err(err);
        }
        sink.finish(rows, truncated)?;
        Ok(truncated)
    };
    match keep() {
        Ok(truncated) => {
            if truncated {
                stmt.discard();
            }
            tx.try_send(Msg::Start {
                kind: accepted.kind.clone(),
                first: Bytes::new(),
            });
            control
                .complete
                .store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
        Err(e) => {
            stmt.discard();
            fail(e)
        }
    }
}

/// Binds, executes and streams one accepted statement. `Ok(true)` when the
/// result was read to its end.
fn stream_statement(
    stmt: &mut duckdb::Statement<'_>,
    accepted: &guard::Accepted,
    csv_names: Option<Vec<String>>,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<bool, QueryError> {
    let fail = |e: QueryError| {
        tx.try_send(Msg::Fail(e.clone()));
        Err(e)
    };
    if let Err(e) = execute_arrow(stmt, job, control) {
        return fail(e);
    }
    let schema = stmt.schema();
    let type_names = column_types(stmt, accepted, &schema);
    let columns: Vec<Column> = encode::columns(&schema, &type_names);
    // JSON rules need DuckDB's type where Arrow's is ambiguous (UHUGEINT is
    // exported as a signed decimal): carried as field metadata.
    let encoder_schema = match job.format {
        Format::Json | Format::Ndjson => std::sync::Arc::new(arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .zip(&type_names)
                .map(|(f, t)| {
                    let mut m = f.metadata().clone();
                    m.insert(encode::DUCKDB_TYPE_KEY.to_string(), t.clone());
                    std::sync::Arc::new(f.as_ref().clone().with_metadata(m))
                })
                .collect::<Vec<_>>(),
        )),
        _ => schema.clone(),
    };
    let mut encoder = ResultEncoder::new(job.format, encoder_schema);
    if let Some(names) = csv_names {
        encoder.duckdb_text(names);
    }
    encoder.unsigned_huge(
        type_names
            .iter()
            .enumerate()
            .filter(|(_, t)| t.as_str() == "UHUGEINT")
            .map(|(i, _)| i)
            .collect(),
    );

    // Small answers stay small: the buffer grows to a chunk only when a
    // result needs one (a large first allocation costs small queries dearly).
    let mut buf: Vec<u8> = Vec::new();
    let mut sent_start = false;
    let mut rows: u64 = 0;
    let mut bytes: u64 = 0;
    let mut truncated = false;
    let mut pending: Option<RecordBatch> = None;

    let rows_encoder = encoder.rows_encoder();
    let mut window: Vec<RecordBatch> = Vec::new();
    let mut serial_batches = 0usize;

    if let Err(e) = encoder.begin(&columns, &mut buf) {
        return fail(QueryError::Internal(format!("encoding: {e}")));
    }

    // Send what is buffered; the first send carries the start marker.
    let flush = |buf: &mut Vec<u8>, sent_start: &mut bool, kind: &str| -> bool {
        let chunk = Bytes::from(std::mem::replace(
            buf,
            Vec::with_capacity(if buf.len() >= CHUNK_BYTES {
                CHUNK_BYTES + 64 * 1024
            } else {
                0
            }),
        ));
        let msg = if *sent_start {
            Msg::Data(chunk)
        } else {
            *sent_start = true;
            if let Some(t) = &job.tracker {
                t.advance(crate::engine::queries::QueryState::Streaming);
            }
            Msg::Start {
                kind: kind.to_string(),
                first: chunk,
            }
        };
        tx.send(msg)
    };

    loop {
        if control.reason().is_some() {
            break;
        }
        let next = match pending.take() {
            Some(b) => Ok(Some(b)),
            None => stmt.step().map(|o| o.map(|sa| RecordBatch::from(&sa))),
        };
        let batch = match next {
            Ok(Some(b)) => b,
            Ok(None) => break,
            Err(e) => {
                let err = cancel_error(control, job).unwrap_or_else(|| sql_error(&e));
                if !sent_start {
                    return fail(err);
                }
                end_with_error(&encoder, &mut buf, &err, tx, job);
                return Err(err);
            }
        };
        if batch.num_rows() == 0 {
            continue;
        }
        // One huge value would be copied again by every encoder: refuse it
        // before anything is buffered.
        if let Some(size) = oversized_value(&batch, job.max_value_bytes) {
            let err = QueryError::ValueTooLarge {
                size,
                limit: job.max_value_bytes,
            };
            if !sent_start {
                return fail(err);
            }
            end_with_error(&encoder, &mut buf, &err, tx, job);
            return Err(err);
        }
        let Some((part, cut)) = within_row_limit(batch, rows, job.max_rows) else {
            truncated = true;
            break;
        };
        truncated = cut;
        let take = part.num_rows();
        let before = buf.len();
        rows += take as u64;
        if let Some(t) = &job.tracker {
            t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
        }
        // Large results encode windows of batches on several threads (DuckDB
        // writes its own formats in parallel too); small ones stay serial.
        let encoded = if rows_encoder.parallel() && serial_batches >= SERIAL_BATCHES {
            window.push(part);
            if window.len() >= WINDOW_BATCHES || truncated {
                encode_window(&rows_encoder, std::mem::take(&mut window), &mut buf)
            } else {
                continue;
            }
        } else {
            serial_batches += 1;
            encoder.batch(&part, &mut buf)
        };
        if let Err(e) = encoded {
            let err = QueryError::Internal(format!("encoding: {e}"));
            if !sent_start {
                return fail(err);
            }
            end_with_error(&encoder, &mut buf, &err, tx, job);
            return Err(err);
        }
        bytes += (buf.len() - before) as u64;
        if truncated {
            break;
        }
        if bytes >= job.max_bytes {
            // Cut at the byte limit; whether more rows existed is unknown
            // without reading them, so say truncated only if one more row does.
            match stmt.step() {
                Ok(Some(sa)) if sa.len() > 0 => truncated = true,
                _ => {}
            }
            break;
        }
        // The first batch goes out at once (time to first byte); later ones
        // in chunks of CHUNK_BYTES.
        if (!sent_start || buf.len() >= CHUNK_BYTES)
            && !flush(&mut buf, &mut sent_start, &accepted.kind)
        {
            return Err(QueryError::Cancelled);
        }
    }
    if let Some(err) = cancel_error(control, job) {
        if !sent_start {
            return fail(err);
        }
        end_with_error(&encoder, &mut buf, &err, tx, job);
        return Err(err);
    }
    if !window.is_empty() {
        if let Err(e) = encode_window(&rows_encoder, std::mem::take(&mut window), &mut buf) {
            let err = QueryError::Internal(format!("encoding: {e}"));
            if !sent_start {
                return fail(err);
            }
            end_with_error(&encoder, &mut buf, &err, tx, job);
            return Err(err);
        }
    }
    let summary = Summary {
        row_count: rows,
        truncated,
        elapsed_ms: job.started.elapsed().as_secs_f64() * 1000.0,
        retried: job.retried,
    };
    if let Err(e) = encoder.finish(summary, &mut buf) {
        let err = QueryError::Internal(format!("encoding: {e}"));
        if !sent_start {
            return fail(err);
        }
        end_with_error(&encoder, &mut buf, &err, tx, job);
        return Err(err);
    }
    if !flush(&mut buf, &mut sent_start, &accepted.kind) {
        return Err(QueryError::Cancelled);
    }
    control
        .complete
        .store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(!truncated)
}

/// The client's statement wrapped as `SELECT <expr AS name>, ... FROM
/// (<statement>)`: `expr(i, type)` gives column `i`'s expression over its
/// position `#i` (`None`: the column as it is), so repeated names do no
/// harm. `None` when there is no statement text to wrap, or when no column
/// changes and `always` is false.
fn wrap_columns(
    accepted: &guard::Accepted,
    always: bool,
    expr: impl Fn(usize, &str) -> Option<String>,
) -> Option<String> {
    let result = accepted.result.as_ref()?;
    let inner = result.sql.as_deref()?;
    if result.names.is_empty() || result.types.len() != result.names.len() {
        return None;
    }
    let mut changed = false;
    let columns: Vec<String> = result
        .types
        .iter()
        .zip(&result.names)
        .enumerate()
        .map(|(i, (t, name))| {
            let e = expr(i, t);
            changed |= e.is_some();
            let e = e.unwrap_or_else(|| format!("#{}", i + 1));
            format!("{e} AS \"{}\"", name.replace('"', "\"\""))
        })
        .collect();
    (always || changed).then(|| {
        format!(
            "SELECT {} FROM (\n{inner}\n) AS duckgate_wrapped",
            columns.join(", ")
        )
    })
}

/// CSV: DuckDB renders every column as its VARCHAR text (what its COPY ...
/// (FORMAT csv) writer writes). Integers, booleans and VARCHAR read the same
/// in Arrow as in DuckDB's text: those pass through uncast (casting costs
/// DuckDB and the export). Always wrapped: the CSV writer expects it.
fn csv_text_sql(accepted: &guard::Accepted) -> Option<String> {
    wrap_columns(accepted, true, |i, t| {
        sink::csv_needs_cast(t).then(|| format!("CAST(#{} AS VARCHAR)", i + 1))
    })
}

/// JSON and NDJSON: DuckDB renders, as its own text, the values of the
/// columns whose JSON Arrow cannot carry (see `ResultShape::json_exprs`).
fn json_text_sql(accepted: &guard::Accepted) -> Option<String> {
    let exprs = &accepted.result.as_ref()?.json_exprs;
    wrap_columns(accepted, false, |i, _| {
        exprs.get(i).filter(|e| !e.is_empty()).cloned()
    })
}

/// Arrow's INTERVAL (month, day, nanosecond) cannot hold DuckDB's
/// microseconds beyond ±2^63 ns (about 292 years of hours), and DuckDB's
/// export wraps such values silently. For a query with INTERVAL columns the
/// Arrow answer is wrapped so that such a value fails the query with a
/// message that says so, instead of arriving wrong.
fn arrow_interval_sql(accepted: &guard::Accepted) -> Option<String> {
    let names = &accepted.result.as_ref()?.names;
    wrap_columns(accepted, false, |i, t| {
        (t == "INTERVAL").then(|| {
            let c = format!("#{}", i + 1);
            let message = sink::arrow_interval_refusal(&names[i]).replace('\'', "''");
            format!(
                "CASE WHEN {} THEN {c} ELSE error('{message}') END",
                sink::interval_fits_arrow(&c)
            )
        })
    })
}

/// Bumps the catalog epoch when the statement that may have changed the
/// catalog is over.
struct BumpOnDrop(Arc<std::sync::atomic::AtomicU64>);

impl Drop for BumpOnDrop {
    fn drop(&mut self) {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The part of `batch` that fits the row limit after `rows` rows, and
/// whether it was cut; `None` when no row fits.
fn within_row_limit(batch: RecordBatch, rows: u64, max_rows: u64) -> Option<(RecordBatch, bool)> {
    let room = max_rows.saturating_sub(rows);
    if room == 0 {
        return None;
    }
    let take = (batch.num_rows() as u64).min(room) as usize;
    Some(if take < batch.num_rows() {
        (batch.slice(0, take), true)
    } else {
        (batch, false)
    })
}

/// The size of the first value in `batch` larger than `limit` bytes, looking
/// at variable-width columns (strings, blobs) by their offsets, and at a
/// one-row batch as a whole.
fn oversized_value(batch: &RecordBatch, limit: u64) -> Option<u64> {
    use arrow::array::{AsArray, GenericByteArray};
    use arrow::datatypes::{ArrowNativeType, ByteArrayType, DataType};
    fn widest<T: ByteArrayType>(a: &GenericByteArray<T>) -> u64 {
        a.offsets()
            .windows(2)
            .map(|w| (w[1].as_usize() - w[0].as_usize()) as u64)
            .max()
            .unwrap_or(0)
    }
    for col in batch.columns() {
        let w = match col.data_type() {
            DataType::Utf8 => widest(col.as_string::<i32>()),
            DataType::LargeUtf8 => widest(col.as_string::<i64>()),
            DataType::Binary => widest(col.as_binary::<i32>()),
            DataType::LargeBinary => widest(col.as_binary::<i64>()),
            _ => 0,
        };
        if w > limit {
            return Some(w);
        }
    }
    if batch.num_rows() == 1 {
        let total = batch.get_array_memory_size() as u64;
        if total > limit {
            return Some(total);
        }
    }
    None
}

/// Ends a body that has begun: an error record where the format has one,
/// otherwise an abort, so the client never mistakes it for a complete result.
fn end_with_error(
    encoder: &ResultEncoder,
    buf: &mut Vec<u8>,
    err: &QueryError,
    tx: &Sender,
    job: &QueryJob,
) {
    let record = encoder.error_record(&(job.render_error)(err));
    end_body(buf, record, err, tx, job);
}

/// Ends a begun body with what is buffered and `record` (the format's error
/// record), or, for a format without one, with an abort.
fn end_body(
    buf: &mut Vec<u8>,
    record: Option<Vec<u8>>,
    err: &QueryError,
    tx: &Sender,
    job: &QueryJob,
) {
    record_failure(job.tracker.as_deref(), err);
    // Bounded by the stall limit: a client that stopped reading gets its
    // ending from the body itself (see `next_chunk`).
    let mut last = Vec::new();
    let aborts = record.is_none();
    if let Some(record) = record {
        buf.extend_from_slice(&record);
    }
    if !buf.is_empty() {
        last.push(Msg::Data(Bytes::from(std::mem::take(buf))));
    }
    if aborts {
        last.push(Msg::Abort(err.to_string()));
    }
    tx.end(err, last);
}

/// Records, for the audit line, that a body which had begun ended in `err`.
fn record_failure(tracker: Option<&crate::engine::queries::Running>, err: &QueryError) {
    if let Some(t) = tracker {
        t.set_outcome(crate::engine::queries::Outcome {
            status: 200,
            kind: format!("failed-while-streaming:{}", err.outcome()),
            error_class: match err {
                QueryError::Sql { class, .. } => Some(class.clone()),
                _ => None,
            },
        });
    }
}

/// The last NDJSON line for `err`, or `None` for formats that end by abort.
fn error_record_for(
    format: Format,
    render: fn(&QueryError) -> serde_json::Value,
    err: &QueryError,
) -> Option<Bytes> {
    (format == Format::Ndjson).then(|| {
        let problem = render(err);
        let mut line =
            serde_json::to_vec(&serde_json::json!({ "error": problem })).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    })
}

/// DuckDB's class of an error, for a log line: its message may quote the
/// client's SQL, which never reaches the log.
fn error_class(e: &duckdb::Error) -> String {
    match sql_error(e) {
        QueryError::Sql { class, .. } => class,
        _ => "Unknown".into(),
    }
}

/// A DuckDB error as class plus message. DuckDB prefixes messages with their
/// class ("Catalog Error: ...").
pub fn sql_error(e: &duckdb::Error) -> QueryError {
    let text = match e {
        duckdb::Error::DuckDBFailure(_, Some(msg)) => msg.clone(),
        other => other.to_string(),
    };
    let (class, message) = crate::engine::errors::split_class(&text);
    QueryError::Sql { class, message }
}
