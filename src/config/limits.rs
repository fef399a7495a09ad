//! The limits of one request: time, rows, bytes, connections.

use clap::Args;

use super::sizes::bytes_between;

/// Per-request limits.
#[derive(Debug, Clone, Args)]
pub struct LimitsConfig {
    /// Time limit of a query that does not ask for one [default: 30000, or the
    /// maximum if that is lower].
    #[arg(long, env = "DUCKGATE_QUERY_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub query_timeout_ms: Option<u64>,

    /// Largest time limit a query may ask for; `timeout_ms` is clamped to it.
    #[arg(long, env = "DUCKGATE_MAX_QUERY_TIMEOUT_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub max_query_timeout_ms: u64,

    /// Row cap of a `/query` answer that does not ask for a limit [default:
    /// DUCKGATE_MAX_ROWS]. A result past it fails (never a silent cut): a
    /// problem document, or a body that ends in an error its reader sees.
    #[arg(long, env = "DUCKGATE_DEFAULT_MAX_ROWS", value_parser = clap::value_parser!(u64).range(1..))]
    pub default_max_rows: Option<u64>,

    /// Largest row limit a request may ask for; `max_rows` is clamped to it.
    #[arg(long, env = "DUCKGATE_MAX_ROWS", default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows: u64,

    /// Largest encoded `/query` answer; a result past it fails (a problem
    /// document, or a body that ends in an error its reader sees), never a
    /// silent cut.
    #[arg(long, env = "DUCKGATE_MAX_RESULT_BYTES", default_value_t = 4 << 30, value_parser = bytes_between(1024, u64::MAX))]
    pub max_result_bytes: u64,

    /// Largest single value (a string or blob, or a one-row result) the
    /// gateway encodes; a larger one fails the query with 422 before it is
    /// buffered.
    #[arg(long, env = "DUCKGATE_MAX_VALUE_BYTES", default_value_t = 64 << 20, value_parser = bytes_between(1024, u64::MAX))]
    pub max_value_bytes: u64,

    /// How much of a running query's SQL `GET /queries` shows (bytes).
    #[arg(long, env = "DUCKGATE_LISTED_SQL_BYTES", default_value_t = 4096, value_parser = bytes_between(0, 1 << 20))]
    pub listed_sql_bytes: u64,

    /// Also append one JSON line per ended query (the audit record) to this
    /// file, created if missing. Unset: audit records go to the log only.
    #[arg(long, env = "DUCKGATE_AUDIT_LOG")]
    pub audit_log: Option<std::path::PathBuf>,

    /// Largest request body.
    #[arg(long, env = "DUCKGATE_MAX_BODY_BYTES", default_value_t = 1 << 20, value_parser = bytes_between(64, 1 << 30))]
    pub max_body_bytes: u64,

    /// Longest SQL text, in bytes.
    #[arg(long, env = "DUCKGATE_MAX_SQL_BYTES", default_value_t = 256 * 1024, value_parser = bytes_between(16, 1 << 30))]
    pub max_sql_bytes: u64,

    /// How long a client may accept no bytes of a streamed answer before it
    /// is cut off and its query interrupted (its connection goes back).
    #[arg(long, env = "DUCKGATE_SEND_STALL_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub send_stall_timeout_ms: u64,

    /// How long a client may take to send a request's headers (then the
    /// connection is closed), and how long an idle keep-alive connection
    /// stays open.
    #[arg(long, env = "DUCKGATE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_read_timeout_ms: u64,

    /// How long a client may take to send a request body (then 408).
    #[arg(long, env = "DUCKGATE_BODY_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub body_read_timeout_ms: u64,

    /// Open client connections at most; more wait in the listen backlog.
    #[arg(long, env = "DUCKGATE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,

    /// Requests served at once (all routes); more are shed with 503.
    #[arg(long, env = "DUCKGATE_MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_concurrent_requests: u64,
}

impl LimitsConfig {
    /// The time limit of a query that asks for none.
    pub fn default_query_timeout_ms(&self) -> u64 {
        self.query_timeout_ms
            .unwrap_or(30_000)
            .min(self.max_query_timeout_ms)
    }

    /// The row limit of a result that asks for none.
    pub fn default_rows(&self) -> u64 {
        self.default_max_rows
            .unwrap_or(self.max_rows)
            .min(self.max_rows)
    }

    /// The time limit of a query whose client asked for `asked` ms: that,
    /// clamped to `DUCKGATE_MAX_QUERY_TIMEOUT_MS`; none asked, the default.
    pub fn query_timeout_ms(&self, asked: Option<u64>) -> u64 {
        asked.map_or(self.default_query_timeout_ms(), |t| {
            t.min(self.max_query_timeout_ms)
        })
    }

    /// The row limit of a result whose client asked for `asked` rows, and
    /// whether a cut there is the client's (a clean end) rather than the
    /// server's cap (an error: see `QueryJob::rows_asked`).
    pub fn rows(&self, asked: Option<u64>) -> (u64, bool) {
        (
            asked.map_or(self.default_rows(), |r| r.min(self.max_rows)),
            asked.is_some_and(|r| r <= self.max_rows),
        )
    }
}
