//! What a statement is, as documents: its status (a local statement's
//! read live, another replica's as it published it), the list, and what a
//! DELETE did. Failures are the problem documents of [`crate::problems`].

use std::sync::atomic::Ordering;
use std::time::UNIX_EPOCH;

use crate::encode::Column;
use crate::engine::ffi::RawDatabase;
use crate::engine::listing::ProgressInfo;

use super::shared::Row;
use super::{State as StatementState, Statement, Statements};

/// What a statement is now.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct StatementStatus {
    /// The statement id (`duckgate-query-id` at submission, or generated).
    pub id: String,
    /// The name of the token that submitted it.
    pub token: String,
    /// `queued` (waiting for the statements' share of the pool), `running`,
    /// `succeeded`, `failed`, `cancelled`, `expired`, or (with replicas)
    /// `lost`.
    pub state: StatementState,
    /// The statement kind, once the guard has read it.
    pub kind: Option<String>,
    /// The SQL, cut to `DUCKGATE_LISTED_SQL_BYTES`.
    pub sql: String,
    /// Whether `sql` was cut.
    pub sql_truncated: bool,
    /// When it was submitted, milliseconds since the Unix epoch.
    pub submitted_at_ms: u64,
    /// A random value that tells this statement apart from an earlier one
    /// with the same id (deleted, then the id used again); a signed link
    /// reads only the statement it was minted for.
    pub instance: String,
    /// When it finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<u64>,
    /// When its result is removed (finished statements).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// From submission to its end, or to now.
    pub elapsed_ms: f64,
    /// Its time limit.
    pub timeout_ms: u64,
    /// DuckDB's own progress while it runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress: Option<ProgressInfo>,
    /// Result rows so far (all of them once it succeeded).
    pub rows: u64,
    /// Whether the result was cut by `max_rows`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// Bytes its spooled result takes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spool_bytes: Option<u64>,
    /// The result's columns, once it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<ColumnSchema>>)]
    pub columns: Option<Vec<Column>>,
    /// Where its result is paged, once it succeeded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// Why it failed or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<crate::problems::Problem>)]
    pub problem: Option<serde_json::Value>,
    /// The credential epoch it started under.
    pub credential_epoch: u64,
    /// Present and true when it was run again after a credential refresh.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retried: Option<bool>,
    /// Whether a cancel was requested.
    pub cancel_requested: bool,
}

/// Statements the caller may see.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct StatementList {
    /// Their status documents.
    pub statements: Vec<StatementStatus>,
}

/// What `DELETE /statements/{id}` did.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Discarded {
    /// The statement's id.
    pub id: String,
    /// The state it was in.
    pub state: StatementState,
    /// Whether it was running (or queued) and was asked to stop.
    pub cancelled: bool,
}

/// Milliseconds since the Unix epoch.
fn millis(t: std::time::SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The status document of `s`, with its progress read from `db` now while
/// it runs.
pub fn status_of(statements: &Statements, db: &RawDatabase, s: &Statement) -> StatementStatus {
    let snap = s.snapshot(statements.settings.ttl);
    let r = &s.running;
    let connection = r.connection.load(Ordering::SeqCst);
    let progress = (snap.state == StatementState::Running)
        .then(|| {
            connection
                .checked_sub(1)
                .and_then(|id| crate::engine::progress::read(db, id))
        })
        .flatten()
        .map(ProgressInfo::from);
    let result = snap.result.as_deref();
    StatementStatus {
        id: r.id.clone(),
        token: r.owner.to_string(),
        state: snap.state,
        kind: r.kind.get().cloned(),
        sql: r.sql.clone(),
        sql_truncated: r.sql.len() < r.sql_len,
        submitted_at_ms: millis(r.started_at),
        instance: r.instance.clone(),
        finished_at_ms: snap.finished_at.map(millis),
        expires_at_ms: snap.expires_at.map(millis),
        elapsed_ms: crate::engine::queries::elapsed_ms(snap.elapsed),
        timeout_ms: s.timeout.as_millis() as u64,
        progress,
        rows: result.map_or(r.rows.load(Ordering::Relaxed), |r| r.rows),
        truncated: result.map(|r| r.truncated),
        spool_bytes: result.map(|r| r.bytes),
        columns: result.map(|res| {
            res.layout
                .names
                .iter()
                .zip(&res.layout.types)
                .map(|(n, t)| Column {
                    name: n.clone(),
                    type_name: t.clone(),
                })
                .collect()
        }),
        result: result.map(|_| format!("/statements/{}/result", r.id)),
        problem: snap.error.as_ref().map(crate::problems::json_for_stream),
        credential_epoch: r.epoch,
        retried: snap.retried.then_some(true),
        cancel_requested: r.cancel.is_cancelled(),
    }
}

/// The status document of a local statement, as JSON.
pub fn status_json(statements: &Statements, db: &RawDatabase, s: &Statement) -> serde_json::Value {
    serde_json::to_value(status_of(statements, db, s)).unwrap_or_default()
}

/// The status document of a statement another replica keeps (or kept),
/// as read from the shared state: expired once past its expiry.
/// The document is the owner's (a newer release may add fields); its state
/// is the row's, typed ([`Row::answered_state`]).
pub fn remote_status(row: &Row) -> serde_json::Value {
    let mut status = row.status.clone();
    let state = row.answered_state();
    status["state"] = state.as_str().into();
    if state == StatementState::Expired {
        if let Some(o) = status.as_object_mut() {
            o.remove("result");
        }
    }
    status
}

/// A column of the result, as the JSON answer names it.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(as = Column)]
#[allow(dead_code)]
pub struct ColumnSchema {
    /// The column's name as DuckDB gave it.
    pub name: String,
    /// DuckDB's type name, e.g. `INTEGER`, `DECIMAL(18,3)`, `STRUCT(a INTEGER)`.
    #[serde(rename = "type")]
    pub type_name: String,
}
