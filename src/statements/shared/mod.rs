//! The state several replicas share, in PostgreSQL (`DUCKGATE_STATE_DSN`):
//! every statement's row (owner replica, token, state, status document,
//! result metadata, expiry), every replica's heartbeat with the list of
//! queries it runs, and cancel requests addressed to a replica. Replicas
//! never talk to each other: what one must know of another is read here,
//! and the owner of a statement or query polls for what others asked of it.

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::State;

mod commands;
mod connect;
mod replicas;
mod rows;
mod schema;

pub use commands::CommandAnswer;
pub use rows::Reservation;

/// A replica is alive while its row is in `duckgate_replicas`. The row
/// goes when the replica leaves (a clean shutdown) or when another replica
/// takes it for dead ([`Shared::declare_dead`]): its heartbeat made no
/// progress for longer than the staleness, seen twice, a moment apart
/// ([`Watch`]). Neither a slow or locked PostgreSQL (every heartbeat is
/// late alike, and the first one after the wait moves the row on), nor an
/// idle connection cut by a middlebox (the heartbeat's session is never
/// idle), nor a frozen process whose sessions stay open (its heartbeat
/// stops) fakes it. A live replica whose row was removed writes it again
/// at its next beat; what it ran meanwhile stays lost.
const ALIVE: &str = "EXISTS (SELECT 1 FROM duckgate_replicas r WHERE r.replica = {} )";

/// [`ALIVE`] for the replica named by `column`.
fn alive(column: &str) -> String {
    ALIVE.replace("{}", column)
}

/// A statement's row, as another replica reads it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The token name that submitted it.
    pub token: String,
    /// Its id.
    pub id: String,
    /// The replica that runs (or ran) it.
    pub replica: String,
    /// Its state in the shared state's `state` column.
    pub state: State,
    /// Its status document, as its owner last published it.
    pub status: serde_json::Value,
    /// Its result's metadata ([`super::spool::ResultMeta`]), once it
    /// succeeded and until it expires.
    pub result: Option<String>,
    /// Whether its owner's heartbeat is fresh.
    pub owner_alive: bool,
    /// Whether it finished longer ago than the TTL.
    pub expired: bool,
}

impl Row {
    /// Whether its owner died before it finished.
    pub fn lost(&self) -> bool {
        self.state == State::Lost || (!self.state.finished() && !self.owner_alive)
    }

    /// The state a reader answers: `lost` once its owner died before it
    /// finished, `expired` once a success is past its expiry.
    pub fn answered_state(&self) -> State {
        if self.lost() {
            State::Lost
        } else if self.expired && self.state == State::Succeeded {
            State::Expired
        } else {
            self.state
        }
    }
}

/// A connection pool to the shared state, and who this replica is.
pub struct Shared {
    pool: Pool,
    /// Reservations of query ids whose release failed (PostgreSQL out of
    /// reach): retried every round of the replicas loop.
    unreleased: std::sync::Mutex<Vec<String>>,
    /// This replica's id (new for every process, so a restarted replica
    /// never claims the statements its predecessor lost).
    pub replica: String,
    /// A replica whose heartbeat made no progress for this long (seen
    /// twice, a moment apart) is taken for dead.
    pub stale: Duration,
    /// How to open the heartbeat's own session ([`Shared::beat`]).
    connect: (tokio_postgres::Config, MakeRustlsConnect),
    /// Whether the shared state answers, for the probes.
    pub dependency: Arc<crate::state::Dependency>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// Why the shared state could not answer. The text names no part of the
/// connection string.
pub type SharedError = String;

/// The error with its causes: tokio-postgres says "db error" or "error
/// performing TLS handshake" and keeps the why (the server's message, the
/// certificate problem) in its source. No cause quotes the connection
/// string.
fn db(e: impl std::error::Error) -> SharedError {
    let mut text = format!("PostgreSQL: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

impl Shared {
    /// A pooled session.
    async fn client(&self) -> Result<deadpool_postgres::Object, SharedError> {
        self.pool.get().await.map_err(db)
    }

    /// The staleness, in seconds, as the SQL compares it.
    fn stale_secs(&self) -> f64 {
        self.stale.as_secs_f64()
    }
}
