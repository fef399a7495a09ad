//! The queries running now: each has an id, an owner (a token's name, never
//! the token), its state and what it has sent, and a cancellation token that
//! `DELETE /queries/{id}` fires. A query is registered before it waits for a
//! connection and leaves the registry when its last byte is sent or its
//! request goes away; leaving writes one audit line.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Instant, SystemTime};

use tokio_util::sync::CancellationToken;

/// The longest query id a client may choose.
pub const MAX_ID_LEN: usize = 128;

/// Where a query is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum QueryState {
    /// Waiting for a connection, or for the guard to read it.
    Queued,
    /// Accepted and executing on its connection.
    Running,
    /// Its first bytes went to the client; the rest follows.
    Streaming,
}

/// One registered query.
#[derive(Debug)]
pub struct Running {
    /// The client's `duckgate-query-id`, or a generated one.
    pub id: String,
    /// The name of the token that started it (`anonymous` without tokens),
    /// or of the OIDC identity (`oidc:<name>`).
    pub owner: Arc<str>,
    /// The owner's roles (an OIDC identity's; none for query tokens).
    pub roles: Vec<Arc<str>>,
    /// How it came: `query` (`POST /query`, `GET /query`), `statement` (`POST /statements`),
    /// `flight` (a Flight SQL statement) or `flight-describe` (a Flight SQL prepared statement
    /// described at its create).
    pub api: &'static str,
    /// The SQL, cut to the registry's limit (on a character boundary).
    pub sql: String,
    /// The SQL's length in bytes, before any cut.
    pub sql_len: usize,
    /// The first 16 hex digits of the SHA-256 of the whole SQL: correlates
    /// audit lines, shows nothing.
    pub sql_hash: String,
    /// The statement kind, once the guard has read it.
    pub kind: OnceLock<String>,
    /// When it was registered, on the wall clock (for listings).
    pub started_at: SystemTime,
    /// A random value that tells this query apart from an earlier one
    /// with the same id and owner (a signed link names it).
    pub instance: String,
    /// When it was registered, for elapsed times and ordering.
    pub started: Instant,
    /// The credential epoch it started under.
    pub epoch: u64,
    state: AtomicU8,
    /// Result rows produced so far.
    pub rows: AtomicU64,
    /// Body bytes handed to the client so far.
    pub bytes: AtomicU64,
    /// Fired by a cancel request; the engine interrupts the query.
    pub cancel: CancellationToken,
    /// DuckDB's id of the connection it executes on, plus one (0: none), so
    /// its progress can be read while it runs.
    pub connection: AtomicU64,
    /// How it ended, as the HTTP layer reports it (status, problem type,
    /// DuckDB's error class), for the audit line.
    outcome: Mutex<Option<Outcome>>,
}

/// A duration in milliseconds to the microsecond, as logs and answers show
/// it (`0.096`, not `0.09652000000000001`).
pub fn elapsed_ms(d: std::time::Duration) -> f64 {
    d.as_micros() as f64 / 1000.0
}

/// How a query ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The HTTP status (499 when the request went away unanswered).
    pub status: u16,
    /// `ok`, or the problem's short type (`sql-error`, `query-cancelled`, ...).
    pub kind: String,
    /// DuckDB's error class, for SQL errors.
    pub error_class: Option<String>,
}

impl Outcome {
    /// A query answered in full.
    pub fn ok() -> Self {
        Self {
            status: 200,
            kind: "ok".into(),
            error_class: None,
        }
    }
}

impl Running {
    /// Where the query is now.
    pub fn state(&self) -> QueryState {
        match self.state.load(Ordering::Relaxed) {
            0 => QueryState::Queued,
            1 => QueryState::Running,
            _ => QueryState::Streaming,
        }
    }

    /// Moves forward only (queued → running → streaming).
    pub fn advance(&self, to: QueryState) {
        let v = match to {
            QueryState::Queued => 0,
            QueryState::Running => 1,
            QueryState::Streaming => 2,
        };
        self.state.fetch_max(v, Ordering::Relaxed);
    }

    /// Records how the query ended (the first report wins).
    pub fn set_outcome(&self, outcome: Outcome) {
        let mut o = self.outcome.lock().unwrap_or_else(|p| p.into_inner());
        if o.is_none() {
            *o = Some(outcome);
        }
    }

    fn outcome(&self) -> Option<Outcome> {
        self.outcome
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Why a query could not be registered.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    /// The client's id is empty, too long, or has other characters.
    #[error("a query id is 1 to {MAX_ID_LEN} characters of A-Z, a-z, 0-9, '.', '_' and '-'")]
    Invalid,
    /// The owner already has a running query with this id.
    #[error("a query with id {0} is running")]
    Taken(String),
}

/// A query's key: ids are unique per owner, so a client can neither squat
/// another token's id nor learn from a conflict that it is in use.
type Key = (Arc<str>, String);

/// The running queries of one gateway.
#[derive(Debug)]
pub struct Registry {
    queries: Mutex<HashMap<Key, Arc<Running>>>,
    /// How much of a query's SQL is kept for listing.
    sql_limit: usize,
    cancellations: AtomicU64,
    /// Where audit records also go, one JSON object per line
    /// (`DUCKGATE_AUDIT_LOG`).
    audit_file: Option<Mutex<std::fs::File>>,
    /// Whether records reach the audit file, for the health snapshot.
    audit: AuditStatus,
}

/// Whether audit records reach `DUCKGATE_AUDIT_LOG`: written by the
/// registry, read by `/healthz` with atomic loads only.
#[derive(Debug, Default)]
pub struct AuditStatus {
    /// The last record could not be written (cleared by the next one that is).
    failing: AtomicBool,
    /// Records that did not reach the file since start.
    lost: AtomicU64,
    /// Why the last record could not be written, while records are lost.
    last_error: arc_swap::ArcSwapOption<String>,
}

impl AuditStatus {
    /// Whether records are being lost now (the last one was).
    pub fn failing(&self) -> bool {
        self.failing.load(Ordering::Relaxed)
    }

    /// Records lost since start.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Why the last record was lost, while records are being lost.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.load_full().map(|e| e.to_string())
    }

    fn written(&self) {
        if self.failing.swap(false, Ordering::Relaxed) {
            self.last_error.store(None);
            tracing::info!(
                lost_total = self.lost(),
                "DUCKGATE_AUDIT_LOG takes records again"
            );
        }
    }

    fn lost_one(&self, query_id: &str, e: &std::io::Error) {
        self.lost.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("duckgate_audit_records_lost_total").increment(1);
        // The error's text names no path (io::Error's Display never does).
        self.last_error.store(Some(Arc::new(e.to_string())));
        self.failing.store(true, Ordering::Relaxed);
        tracing::error!(
            query_id,
            error = %e,
            lost_total = self.lost(),
            "an audit record could not be appended to DUCKGATE_AUDIT_LOG (it is in this log, target duckgate::audit)"
        );
    }
}

/// Appends `line` to `file` whole or not at all: a failed or short write
/// is cut back to the length the file had, so the file holds complete
/// NDJSON lines only. The registry is the file's only writer in this
/// process (its mutex); another process appending to the same file
/// between the length and the cut could lose its line, which is why the
/// setting names a file of this gateway's own.
fn append_whole(file: &mut std::fs::File, line: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let before = file.metadata()?.len();
    if let Err(e) = file.write_all(line) {
        if file.metadata().is_ok_and(|m| m.len() > before) {
            if let Err(cut) = file.set_len(before) {
                tracing::error!(error = %cut, "a partial audit record could not be cut from DUCKGATE_AUDIT_LOG");
            }
        }
        return Err(e);
    }
    Ok(())
}

impl Registry {
    /// An empty registry that keeps up to `sql_limit` bytes of each SQL text.
    pub fn new(sql_limit: usize) -> Self {
        Self {
            queries: Mutex::new(HashMap::new()),
            sql_limit,
            cancellations: AtomicU64::new(0),
            audit_file: None,
            audit: AuditStatus::default(),
        }
    }

    /// Also appends every audit record to `file` as a line of JSON.
    pub fn with_audit_file(mut self, file: std::fs::File) -> Self {
        self.audit_file = Some(Mutex::new(file));
        self
    }

    /// Whether audit records reach `DUCKGATE_AUDIT_LOG`; `None` when no
    /// audit file is set.
    pub fn audit_status(&self) -> Option<&AuditStatus> {
        self.audit_file.as_ref().map(|_| &self.audit)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Arc<Running>>> {
        self.queries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a query under the client's id (validated, unique among
    /// its owner's running ones) or a generated one. It stays listed while the
    /// returned registration lives.
    pub fn register(
        self: &Arc<Self>,
        id: Option<&str>,
        owner: Arc<str>,
        roles: Vec<Arc<str>>,
        sql: &str,
        epoch: u64,
    ) -> Result<Registration, IdError> {
        self.register_as("query", id, owner, roles, sql, epoch)
    }

    /// [`Registry::register`] for work that came through `api`.
    pub fn register_as(
        self: &Arc<Self>,
        api: &'static str,
        id: Option<&str>,
        owner: Arc<str>,
        roles: Vec<Arc<str>>,
        sql: &str,
        epoch: u64,
    ) -> Result<Registration, IdError> {
        let id = match id {
            Some(id) if valid_id(id) => id.to_string(),
            Some(_) => return Err(IdError::Invalid),
            None => uuid::Uuid::new_v4().to_string(),
        };
        let mut cut = sql.len().min(self.sql_limit);
        while !sql.is_char_boundary(cut) {
            cut -= 1;
        }
        let key = (owner.clone(), id.clone());
        let running = Arc::new(Running {
            id: id.clone(),
            owner,
            roles,
            api,
            sql: sql[..cut].to_string(),
            sql_len: sql.len(),
            sql_hash: crate::engine::cache::sha256_hex(sql, 8),
            kind: OnceLock::new(),
            started_at: SystemTime::now(),
            instance: uuid::Uuid::new_v4().simple().to_string()[..16].to_string(),
            started: Instant::now(),
            epoch,
            state: AtomicU8::new(0),
            rows: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            cancel: CancellationToken::new(),
            connection: AtomicU64::new(0),
            outcome: Mutex::new(None),
        });
        let mut queries = self.lock();
        if queries.contains_key(&key) {
            return Err(IdError::Taken(id));
        }
        queries.insert(key, running.clone());
        metrics::gauge!("duckgate_queries_running").set(queries.len() as f64);
        Ok(Registration {
            registry: self.clone(),
            running,
            held: None,
        })
    }

    /// Every running query, oldest first.
    pub fn list(&self) -> Vec<Arc<Running>> {
        let mut all: Vec<_> = self.lock().values().cloned().collect();
        all.sort_by_key(|r| r.started);
        all
    }

    /// The running queries with this id: of `owner` only, or of every
    /// owner (`None`, the admin's view).
    pub fn find(&self, owner: Option<&str>, id: &str) -> Vec<Arc<Running>> {
        self.lock()
            .iter()
            .filter(|((o, i), _)| i == id && owner.is_none_or(|w| w == o.as_ref()))
            .map(|(_, r)| r.clone())
            .collect()
    }

    /// Whether this very query is still registered.
    pub fn contains(&self, r: &Arc<Running>) -> bool {
        self.lock()
            .get(&(r.owner.clone(), r.id.clone()))
            .is_some_and(|now| Arc::ptr_eq(now, r))
    }

    /// Asks this query to stop.
    pub fn cancel(&self, r: &Running) {
        if !r.cancel.is_cancelled() {
            self.cancellations.fetch_add(1, Ordering::Relaxed);
            metrics::counter!("duckgate_query_cancellations_total").increment(1);
        }
        r.cancel.cancel();
    }

    /// Cancel requests honoured since start.
    pub fn cancellations(&self) -> u64 {
        self.cancellations.load(Ordering::Relaxed)
    }
}

/// Whether `id` may name a query: short, and safe in a header, a URL path
/// segment and a log line as it is.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// A query's place in the registry: dropping it removes the query and
/// writes the audit line (never the SQL text, parameters or tokens).
#[derive(Debug)]
pub struct Registration {
    registry: Arc<Registry>,
    /// The registered query.
    pub running: Arc<Running>,
    /// What must live exactly as long as the registration (the query id's
    /// reservation in the shared state): dropped after it left the registry.
    held: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Registration {
    /// Keeps `guard` until the registration goes.
    pub fn hold(&mut self, guard: impl std::any::Any + Send + Sync) {
        self.held = Some(Box::new(guard));
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let r = &self.running;
        {
            let mut queries = self.registry.lock();
            let key = (r.owner.clone(), r.id.clone());
            if queries.get(&key).is_some_and(|now| Arc::ptr_eq(now, r)) {
                queries.remove(&key);
            }
            metrics::gauge!("duckgate_queries_running").set(queries.len() as f64);
        }
        let outcome = r.outcome().unwrap_or_else(|| Outcome {
            // The request went away before it was answered in full.
            status: 499,
            kind: if r.cancel.is_cancelled() {
                "query-cancelled".into()
            } else {
                "client-gone".into()
            },
            error_class: None,
        });
        let rows = r.rows.load(Ordering::Relaxed);
        let bytes = r.bytes.load(Ordering::Relaxed);
        let elapsed_ms = elapsed_ms(r.started.elapsed());
        if let Some(file) = &self.registry.audit_file {
            let record = serde_json::json!({
                "ended_at_ms": std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis() as u64)
                    .unwrap_or(0),
                "query_id": r.id,
                "api": r.api,
                "token": &*r.owner,
                "roles": r.roles.iter().map(|x| &**x).collect::<Vec<&str>>(),
                "kind": r.kind.get(),
                "sql_sha256": r.sql_hash,
                "sql_bytes": r.sql_len,
                "outcome": outcome.kind,
                "status": outcome.status,
                "rows": rows,
                "bytes": bytes,
                "elapsed_ms": elapsed_ms,
                "credential_epoch": r.epoch,
                "error_class": outcome.error_class,
            });
            let mut line = record.to_string();
            line.push('\n');
            // The status changes under the file's lock, in the order of the writes.
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            match append_whole(&mut f, line.as_bytes()) {
                Ok(()) => self.registry.audit.written(),
                Err(e) => self.registry.audit.lost_one(&r.id, &e),
            }
            drop(f);
        }
        // After the answer is written, when the connection's task asks for
        // it (the audit file above is written at once).
        let r = Arc::clone(r);
        crate::telemetry::after_this_turn(move || {
            tracing::info!(
                target: "duckgate::audit",
                query_id = %r.id,
                api = r.api,
                token = %r.owner,
                roles = ?r.roles.iter().map(|x| &**x).collect::<Vec<&str>>(),
                kind = r.kind.get().map(String::as_str).unwrap_or("-"),
                sql_sha256 = %r.sql_hash,
                sql_bytes = r.sql_len,
                outcome = %outcome.kind,
                status = outcome.status,
                rows,
                bytes,
                elapsed_ms,
                credential_epoch = r.epoch,
                error_class = outcome.error_class.as_deref().unwrap_or("-"),
                "query ended"
            );
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elapsed_times_print_to_the_microsecond() {
        let d = std::time::Duration::from_nanos(96_520);
        assert_eq!(serde_json::json!(elapsed_ms(d)).to_string(), "0.096");
        assert_eq!(format!("{}", elapsed_ms(d * 1000)), "96.52");
    }

    #[test]
    fn ids_are_validated_unique_and_released() {
        let reg = Arc::new(Registry::new(8));
        assert_eq!(
            reg.register(Some("a b"), "t".into(), Vec::new(), "SELECT 1", 0)
                .unwrap_err(),
            IdError::Invalid
        );
        assert_eq!(
            reg.register(
                Some(&"x".repeat(MAX_ID_LEN + 1)),
                "t".into(),
                Vec::new(),
                "SELECT 1",
                0
            )
            .unwrap_err(),
            IdError::Invalid
        );
        let first = reg.register(
            Some("job-1.a_b"),
            "t".into(),
            Vec::new(),
            "SELECT 'héllo wörld'",
            0,
        );
        let first = first.unwrap();
        assert_eq!(first.running.sql, "SELECT '");
        assert!(matches!(
            reg.register(Some("job-1.a_b"), "t".into(), Vec::new(), "SELECT 2", 0),
            Err(IdError::Taken(_))
        ));
        let generated = reg
            .register(None, "t".into(), Vec::new(), "SELECT 3", 0)
            .unwrap();
        assert!(valid_id(&generated.running.id));
        // Another owner may use the same id; neither sees the other's.
        let other = reg
            .register(Some("job-1.a_b"), "u".into(), Vec::new(), "SELECT 4", 0)
            .unwrap();
        assert_eq!(reg.find(Some("u"), "job-1.a_b").len(), 1);
        assert_eq!(reg.find(None, "job-1.a_b").len(), 2);
        assert_eq!(reg.list().len(), 3);
        drop(first);
        assert!(reg.find(Some("t"), "job-1.a_b").is_empty());
        assert!(reg.contains(&other.running));
        assert!(reg
            .register(Some("job-1.a_b"), "t".into(), Vec::new(), "SELECT 2", 0)
            .is_ok());
    }
}
