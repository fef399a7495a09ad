//! What the HTTP layer hands the engine (a [`QueryJob`] with its
//! [`Param`]s) and what it gets back (a [`QueryOutput`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use duckdb::types::Value;

use crate::encode::Format;
use crate::engine::guard;
use crate::engine::sink::BatchSink;

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
    /// Bytes (DuckDB's BLOB): a Flight SQL client's binary parameter.
    Blob(Vec<u8>),
}

impl Param {
    pub(super) fn to_value(&self) -> Value {
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
            Param::Blob(b) => Value::Blob(b.clone()),
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

/// One statement to run, fully validated by the HTTP layer. Built by
/// [`QueryJob::query`] or [`QueryJob::statement`]: which of the two is
/// what `sink` says.
#[derive(Debug, Clone)]
pub struct QueryJob {
    /// The client's SQL text: one statement.
    pub sql: String,
    /// Values for `$1`, `$2`, ..., in order.
    pub params: Vec<Param>,
    /// How the result is encoded.
    pub format: Format,
    /// Arrow IPC's buffer compression of an Arrow answer, if asked for.
    pub arrow_compression: Option<crate::encode::ArrowCodec>,
    /// How long the query may take, counted from `started`.
    pub timeout: Duration,
    /// Rows beyond this are cut and the result marked truncated.
    pub max_rows: u64,
    /// Whether the client asked for `max_rows`. A cut the client did not
    /// ask for (the server's row or byte cap) is never a clean end: the
    /// answer fails (a problem document, or a body its reader sees end in
    /// an error).
    pub rows_asked: bool,
    /// Encoded bytes after which the result is cut.
    pub max_bytes: u64,
    /// The role whose `max_rows` set `max_rows` (below the gateway's): a
    /// result past it names that role's cap, not the gateway's.
    pub row_cap_role: Option<Arc<str>>,
    /// The role whose `max_result_bytes` set `max_bytes`, likewise.
    pub byte_cap_role: Option<Arc<str>>,
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
    /// The query's entry in the registry of running queries: its state and
    /// counts are kept current, and a cancel request stops it.
    pub tracker: Option<Arc<crate::engine::queries::Running>>,
    /// Keep the result here (an async statement's spool) instead of
    /// encoding it: `format` is then unused, and the answer's body is empty.
    pub sink: Option<Arc<dyn BatchSink>>,
    /// Describe the statement here instead of running it (see
    /// [`super::describe`]): the answer's body is empty.
    pub describe: Option<super::describe::DescribeSlot>,
    /// Its hold on what it may borrow past its token's share; `None`: it
    /// never borrows (it runs within its share only).
    pub reclaim: Option<crate::engine::admission::Reclaim>,
}

/// The bounds of one run, whichever way its result leaves.
#[derive(Debug, Clone)]
pub struct RunLimits {
    /// When the request arrived; the deadline and `elapsed_ms` count from it.
    pub started: Instant,
    /// How long the query may take, counted from `started`.
    pub timeout: Duration,
    /// Rows beyond this are cut and the result marked truncated.
    pub max_rows: u64,
    /// Whether the client asked for `max_rows` (see [`QueryJob::rows_asked`]).
    pub rows_asked: bool,
    /// How long a client may accept no bytes before it is cut off.
    pub stall_timeout: Duration,
    /// Largest single value (or one-row batch) the gateway will encode.
    pub max_value_bytes: u64,
}

impl QueryJob {
    /// A query answered as it runs (`/query`): its result encoded in
    /// `format` and streamed, cut after `max_bytes` encoded bytes.
    pub fn query(
        sql: String,
        params: Vec<Param>,
        rules: Arc<guard::Rules>,
        limits: RunLimits,
        tracker: Arc<crate::engine::queries::Running>,
        format: Format,
        max_bytes: u64,
    ) -> Self {
        Self::new(sql, params, rules, limits, tracker, format, max_bytes, None)
    }

    /// An async statement's run: its result kept in `spool` (its spool
    /// writer) rather than encoded; the answer's body is empty.
    pub fn statement(
        sql: String,
        params: Vec<Param>,
        rules: Arc<guard::Rules>,
        limits: RunLimits,
        tracker: Arc<crate::engine::queries::Running>,
        spool: Arc<dyn BatchSink>,
    ) -> Self {
        // The spool writes Arrow; statements have no byte cap but its quotas.
        Self::new(
            sql,
            params,
            rules,
            limits,
            tracker,
            Format::Arrow,
            u64::MAX,
            Some(spool),
        )
    }

    #[allow(clippy::too_many_arguments)]
    fn new(
        sql: String,
        params: Vec<Param>,
        rules: Arc<guard::Rules>,
        limits: RunLimits,
        tracker: Arc<crate::engine::queries::Running>,
        format: Format,
        max_bytes: u64,
        sink: Option<Arc<dyn BatchSink>>,
    ) -> Self {
        let RunLimits {
            started,
            mut timeout,
            mut max_rows,
            mut rows_asked,
            stall_timeout,
            max_value_bytes,
        } = limits;
        // A confined caller's roles may cap it lower than the gateway does;
        // a cut at a role's cap is the server's (an error), not the client's.
        // The cap is the most any of its roles allows, so it is that
        // role's: named in the problem of a result past it.
        let mut max_bytes = max_bytes;
        let (mut row_cap_role, mut byte_cap_role) = (None, None);
        if let Some(access) = rules.access.as_ref() {
            if let Some(q) = access.quota(|l| l.max_rows).filter(|q| q.cap < max_rows) {
                max_rows = q.cap;
                rows_asked = false;
                row_cap_role = Some(q.role);
            }
            if let Some(ms) = access.limits().max_query_timeout_ms {
                timeout = timeout.min(Duration::from_millis(ms));
            }
            if let Some(q) = access
                .quota(|l| l.max_result_bytes)
                .filter(|q| sink.is_none() && q.cap < max_bytes)
            {
                max_bytes = q.cap;
                byte_cap_role = Some(q.role);
            }
        }
        QueryJob {
            sql,
            params,
            format,
            arrow_compression: None,
            timeout,
            max_rows,
            rows_asked,
            max_bytes,
            row_cap_role,
            byte_cap_role,
            rules,
            started,
            retried: false,
            stall_timeout,
            max_value_bytes,
            tracker: Some(tracker),
            sink,
            describe: None,
            reclaim: None,
        }
    }

    /// A statement described, not run: after the guard and the caller's
    /// grants, DuckDB prepares it and `out` receives its result's and
    /// parameters' Arrow schemas (Flight SQL's `CreatePreparedStatement`).
    pub fn describe(
        sql: String,
        rules: Arc<guard::Rules>,
        limits: RunLimits,
        tracker: Arc<crate::engine::queries::Running>,
        out: super::describe::DescribeSlot,
    ) -> Self {
        let mut job = Self::new(
            sql,
            Vec::new(),
            rules,
            limits,
            tracker,
            Format::Arrow,
            u64::MAX,
            None,
        );
        job.describe = Some(out);
        job
    }
}

/// What the HTTP layer gets once the first rows are ready.
pub struct QueryOutput {
    /// Human name of the statement kind, e.g. `SELECT`.
    pub kind: String,
    /// The `Content-Type` of the body's format.
    pub content_type: &'static str,
    /// The body.
    pub body: OutputBody,
}

/// A query's answer body.
pub enum OutputBody {
    /// All of it: the query had ended, its whole answer queued without an
    /// error, when the answer began. HTTP sends it with its length.
    Whole(Bytes),
    /// Encoded chunks as the query makes them, or an error that aborts the
    /// body.
    Streamed(futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>>),
}

impl OutputBody {
    /// The body as chunks, for a reader that takes them as they come.
    pub fn into_stream(self) -> futures::stream::BoxStream<'static, Result<Bytes, std::io::Error>> {
        match self {
            Self::Whole(b) => Box::pin(futures::stream::iter([Ok(b)])),
            Self::Streamed(s) => s,
        }
    }
}
