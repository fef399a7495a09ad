//! Why a query did not produce a complete result ([`QueryError`]), and
//! DuckDB's errors read as class plus message, placed in the client's SQL
//! where DuckDB points into it.

use std::sync::Arc;
use std::time::Duration;

use crate::engine::errors::{self, SqlPosition};
use crate::engine::guard::Refusal;
use crate::engine::sink::SinkError;

use super::control::{cancel_error, QueryControl};
use super::job::QueryJob;

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
        /// DuckDB's message, without the class and without the excerpt
        /// DuckDB appends (that is in `at`).
        message: String,
        /// Where DuckDB says the error is in the client's SQL.
        at: Option<SqlPosition>,
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
    /// The connections queries that read S3 may use stayed busy for the
    /// acquire timeout (held here): S3 slow or stalled.
    #[error("the S3 share of the pool stayed taken")]
    S3Share(Duration),
    /// Every pooled connection was busy and the expected wait for one was
    /// beyond the acquire timeout: refused at once.
    #[error("the expected wait for a connection is beyond the acquire timeout")]
    Shed {
        /// The wait the request could expect.
        expected: Duration,
        /// Requests queued in front of it.
        ahead: u64,
        /// The acquire timeout.
        limit: Duration,
    },
    /// The token's own share of the pool stayed taken by its own queries
    /// for the acquire timeout (held here).
    #[error("the token's share of the pool stayed taken")]
    TokenShare(Duration),
    /// The caller's role's `queries_at_once` stayed taken by its members'
    /// queries for the acquire timeout.
    #[error("the role's share of the pool stayed taken")]
    RoleShare {
        /// The role.
        role: Arc<str>,
        /// Its `queries_at_once`.
        cap: u64,
        /// How long the request waited.
        waited: Duration,
    },
    /// The result passed a server-side cap the client did not ask for
    /// (`what`: `rows` or `bytes`, `limit`: the cap): the gateway's, or
    /// that of `role` (its `max_rows`, `max_result_bytes`).
    #[error("the result passed its {what} cap of {limit}")]
    ResultCap {
        /// `rows` or `bytes`.
        what: &'static str,
        /// The cap.
        limit: u64,
        /// The role whose cap it is; `None`: the gateway's.
        role: Option<Arc<str>>,
    },
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
    /// The disk under one of the gateway's stores (`store`: `spool`) has
    /// no space left.
    #[error("no space left for the {store}")]
    StorageFull {
        /// The store: `spool`.
        store: &'static str,
    },
    /// Writing to one of the gateway's stores failed otherwise (`cause`
    /// is logged, never sent).
    #[error("writing the {store} failed: {cause}")]
    Storage {
        /// The store: `spool`.
        store: &'static str,
        /// The I/O error, for the log.
        cause: String,
    },
    /// The S3 spool (`store`) failed; `fault` says whose it is, `cause`
    /// is logged, never sent.
    #[error("the {store} failed ({fault:?}): {cause}")]
    RemoteStore {
        /// The store: `spool`.
        store: &'static str,
        /// Missing, unavailable or refusing.
        fault: StoreFault,
        /// The SDK's error, for the log.
        cause: String,
    },
    /// The statement has no answer in the format asked for (a statement
    /// that returns no rows, asked for Parquet); the text says why.
    #[error("{0}")]
    FormatUnavailable(String),
    /// A failure of the gateway itself (encoding, the spool's I/O, ...).
    #[error("internal error: {0}")]
    Internal(String),
}

/// How a remote store failed: the status a client sees follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreFault {
    /// The object is not there (removed underneath, or by a lifecycle
    /// rule): 410, a retry cannot bring it back.
    Missing,
    /// No answer, a timeout, a server error or throttling: 503 with
    /// Retry-After.
    Unavailable,
    /// The store refused the request (access denied, no such bucket): the
    /// operator's configuration, 502.
    Refused,
}

impl QueryError {
    /// The metrics label of the outcome: its kind's in the catalogue.
    pub fn outcome(&self) -> &'static str {
        crate::problems::of_query(self)
            .kind
            .and_then(|k| k.outcome)
            .unwrap_or("internal_error")
    }

    /// Whether this looks like S3 rejecting expired credentials.
    pub fn is_expired_token(&self) -> bool {
        match self {
            QueryError::Sql { message, .. }
            | QueryError::Refused(Refusal::Bind { message, .. }) => {
                message.contains("ExpiredToken")
            }
            _ => false,
        }
    }
}

impl From<SinkError> for QueryError {
    fn from(e: SinkError) -> Self {
        match e {
            SinkError::Full { limit, scope } => QueryError::SpoolFull { limit, scope },
            SinkError::NoSpace => {
                tracing::error!(
                    store = "spool",
                    "the spool's disk is full: a statement's result was dropped"
                );
                metrics::counter!("duckgate_storage_full_total", "store" => "spool").increment(1);
                QueryError::StorageFull { store: "spool" }
            }
            SinkError::Io(m) => {
                tracing::error!(store = "spool", error.cause = %m, "writing the spool failed");
                QueryError::Storage {
                    store: "spool",
                    cause: m,
                }
            }
        }
    }
}

/// DuckDB's class of an error, for a log line: its message may quote the
/// client's SQL, which never reaches the log.
pub(super) fn error_class(e: &duckdb::Error) -> String {
    match sql_error(e) {
        QueryError::Sql { class, .. } => class,
        _ => "Unknown".into(),
    }
}

/// A DuckDB error as class plus message, without a place: for SQL of the
/// gateway's own. DuckDB prefixes messages with their class ("Catalog
/// Error: ...").
pub fn sql_error(e: &duckdb::Error) -> QueryError {
    let failure = Failure::of(e);
    QueryError::Sql {
        class: failure.class,
        message: failure.message,
        at: None,
    }
}

/// DuckDB's error from running a client's statement, or the cancellation
/// that caused it: the error placed in the client's SQL where DuckDB points
/// into it, through the wrapper the gateway ran if it ran one
/// ([`QueryControl::ran`]).
pub(super) fn run_error(e: &duckdb::Error, control: &QueryControl, job: &QueryJob) -> QueryError {
    cancel_error(control, job).unwrap_or_else(|| {
        let failure = Failure::of(e);
        let ran = control.ran.lock().unwrap_or_else(|p| p.into_inner());
        let at = failure.place(&job.sql, ran.as_ref());
        QueryError::Sql {
            class: failure.class,
            message: failure.message,
            at,
        }
    })
}

/// A text the gateway built around the client's statement and ran in its
/// place (a CSV or Parquet COPY, a wrapper that lets DuckDB render values):
/// DuckDB's places are in it, and those within the statement are places in
/// the client's SQL.
#[derive(Debug, Clone)]
pub(super) struct Wrapper {
    /// What DuckDB ran.
    pub(super) text: String,
    /// The statement as the wrapper holds it: DuckDB's span of its reading
    /// of the client's SQL (a prefix of that reading), on lines of its own.
    pub(super) statement: String,
}

impl Wrapper {
    /// Where the statement starts in the wrapper: its byte and its line (as
    /// DuckDB counts lines). Every wrapper ends in the gateway's own text
    /// after the statement's line, which never holds the statement again.
    fn start(&self) -> Option<(usize, usize)> {
        let at = self.text.rfind(&format!("\n{}\n", self.statement))? + 1;
        let (line, _) = errors::line_and_column(&self.text, at)?;
        Some((at, line))
    }
}

/// Where DuckDB points in the text it ran.
enum Pointer {
    /// The caret excerpt DuckDB appended to its message.
    Excerpt(String),
    /// The `position` of the error's JSON form (DuckDB's Arrow export).
    Position(usize),
    None,
}

/// A DuckDB error read: its class, its message without the excerpt, and
/// where it points.
struct Failure {
    class: String,
    message: String,
    pointer: Pointer,
}

impl Failure {
    fn of(e: &duckdb::Error) -> Self {
        let text = match e {
            duckdb::Error::DuckDBFailure(_, Some(msg)) => msg.clone(),
            other => other.to_string(),
        };
        let (class, message) = errors::split_class(&text);
        if let Some(position) = errors::json_position(&text) {
            return Failure {
                class,
                message,
                pointer: Pointer::Position(position),
            };
        }
        let (message, excerpt) = errors::split_excerpt(&message);
        Failure {
            class,
            message: message.to_string(),
            pointer: excerpt.map_or(Pointer::None, |x| Pointer::Excerpt(x.to_string())),
        }
    }

    /// Where the error is in `sql` (the client's), DuckDB having run `sql`
    /// itself or `ran`.
    fn place(&self, sql: &str, ran: Option<&Wrapper>) -> Option<SqlPosition> {
        // A byte offset into DuckDB's reading of `sql`.
        let position = match (ran, &self.pointer) {
            (_, Pointer::None) => return None,
            (None, Pointer::Position(p)) => *p,
            (None, Pointer::Excerpt(x)) => errors::excerpt_position(sql, x)?,
            (Some(w), Pointer::Position(p)) => {
                let (start, _) = w.start()?;
                p.checked_sub(start).filter(|p| *p <= w.statement.len())?
            }
            (Some(w), Pointer::Excerpt(x)) => {
                let (_, first_line) = w.start()?;
                let own = errors::shift_excerpt(x, first_line)?;
                errors::excerpt_position(&w.statement, &own)?
            }
        };
        errors::place(sql, position)
    }
}
