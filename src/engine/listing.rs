//! The documents of running queries: what `GET /queries` lists and what a
//! replica publishes of its own in the shared state's heartbeat. Views of
//! the registry ([`crate::engine::queries`]), with DuckDB's progress read
//! from the database.

use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use crate::engine::queries::{QueryState, Running};

/// A running query.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct QueryInfo {
    /// The query id (`duckgate-query-id`).
    pub id: String,
    /// The name of the token that started it, or of the OIDC identity
    /// (`oidc:<name>`).
    pub token: String,
    /// The roles of the identity that started it (an OIDC identity's roles
    /// claim; empty for query tokens).
    pub roles: Vec<String>,
    /// How it came: `query` (`POST /query`, `GET /query`), `statement` (`POST /statements`),
    /// `flight` (a Flight SQL statement) or `flight-describe` (a Flight SQL prepared statement
    /// described at its create).
    pub api: String,
    /// The statement kind, once the guard has read it.
    pub kind: Option<String>,
    /// The SQL, cut to `DUCKGATE_LISTED_SQL_BYTES`.
    pub sql: String,
    /// Whether `sql` was cut.
    pub sql_truncated: bool,
    /// `queued` (waiting for a connection or the guard), `running` or
    /// `streaming`.
    #[schema(value_type = String)]
    pub state: QueryState,
    /// When it started, milliseconds since the Unix epoch.
    pub started_at_ms: u64,
    /// Milliseconds since it started.
    pub elapsed_ms: f64,
    /// Result rows produced so far.
    pub rows: u64,
    /// Body bytes sent so far.
    pub bytes: u64,
    /// The credential epoch it started under.
    pub credential_epoch: u64,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
    /// DuckDB's own progress of the query while it executes on its
    /// connection (absent while queued, and once its connection let go).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressInfo>,
}

/// DuckDB's own progress of a query (its progress bar's numbers).
#[derive(Debug, Clone, Copy, serde::Serialize, utoipa::ToSchema)]
pub struct ProgressInfo {
    /// Percentage done (0-100); absent while DuckDB cannot tell (it knows
    /// once every pipeline of the plan reports progress).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub percentage: Option<f64>,
    /// Rows (for some sources, bytes) processed so far.
    pub rows_processed: u64,
    /// Rows (or bytes) to process in all, as DuckDB estimates them.
    pub total_rows: u64,
}

impl From<crate::engine::progress::Progress> for ProgressInfo {
    fn from(p: crate::engine::progress::Progress) -> Self {
        ProgressInfo {
            percentage: p.percentage,
            rows_processed: p.rows_processed,
            total_rows: p.total_rows,
        }
    }
}

impl QueryInfo {
    /// `r` as listed, with its progress read from `db`.
    pub fn of(r: &Running, db: &crate::engine::ffi::RawDatabase) -> Self {
        let connection = r.connection.load(Ordering::SeqCst);
        QueryInfo {
            progress: connection
                .checked_sub(1)
                .and_then(|id| crate::engine::progress::read(db, id))
                .map(ProgressInfo::from),
            id: r.id.clone(),
            token: r.owner.to_string(),
            roles: r.roles.iter().map(|x| x.to_string()).collect(),
            api: r.api.to_string(),
            kind: r.kind.get().cloned(),
            sql: r.sql.clone(),
            sql_truncated: r.sql.len() < r.sql_len,
            state: r.state(),
            started_at_ms: r
                .started_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            elapsed_ms: crate::engine::queries::elapsed_ms(r.started.elapsed()),
            rows: r.rows.load(Ordering::Relaxed),
            bytes: r.bytes.load(Ordering::Relaxed),
            credential_epoch: r.epoch,
            cancel_requested: r.cancel.is_cancelled(),
        }
    }
}
