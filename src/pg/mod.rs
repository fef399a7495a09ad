//! The PostgreSQL wire door (`DUCKGATE_PG_LISTEN`): psql, PostgreSQL
//! drivers and the BI tools that speak the protocol run statements with the
//! same identities, guard, grants, row policies, limits, audit and cancel
//! as `POST /query`.
//!
//! The door translates a protocol, nothing more; the protocol itself is
//! the `pgwire` crate's (messages, startup, SCRAM, the extended protocol's
//! statements and portals). Its parts:
//!
//! - [`server`]: the listener, TLS, and each connection's loop with the
//!   door's limits (connections in all, startup and idle timeouts, a
//!   message size cap);
//! - [`auth`]: startup and credentials (SCRAM-SHA-256 for a query token,
//!   a cleartext token or JWT inside TLS), the identity's connection
//!   limit, the cancel key;
//! - [`session`]: the settings a session keeps and the commands the door
//!   answers itself (`SET`, `SHOW`, `BEGIN`, `COPY ... TO STDOUT`);
//! - [`query`]: the simple and extended query protocols;
//! - [`types`]: DuckDB's Arrow values as PostgreSQL's, text and binary;
//! - [`bulk`]: a batch's rows at once, as COPY's lines or `DataRow`s;
//! - [`errors`]: problems as `ErrorResponse`s with a SQLSTATE and DuckDB's
//!   position;
//! - [`backend`]: the one adapter to the gateway's core.
//!
//! A connection holds no pooled DuckDB connection while idle: a statement
//! takes one when it starts and gives it back when its answer ends.

pub mod auth;
pub mod backend;
pub mod bulk;
pub mod compat;
pub mod errors;
pub mod keys;
pub mod query;
pub mod server;
pub mod session;
pub mod types;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::pg::backend::State;
use crate::pg::session::{Defaults, Session};

pub use server::Listener;

/// The door's limits (see `DUCKGATE_PG_*` in docs/configuration.md).
#[derive(Debug, Clone)]
pub struct Limits {
    /// Connections open at once, all identities together.
    pub max_connections: usize,
    /// Connections one identity may hold at once.
    pub max_connections_per_identity: usize,
    /// How long a connection may take from its first byte to the end of
    /// its authentication.
    pub startup_timeout: Duration,
    /// How long an authenticated connection may wait between statements
    /// (0: no limit).
    pub idle_timeout: Option<Duration>,
    /// The largest message a client may send.
    pub max_message_bytes: usize,
}

/// What every connection of the door shares.
pub struct Door {
    /// The gateway.
    pub state: State,
    /// What the door reports for settings no client set.
    pub defaults: Defaults,
    /// The door's limits.
    pub limits: Limits,
    /// Connections per identity.
    identities: Mutex<HashMap<Arc<str>, usize>>,
    /// The sessions a cancel request may name: key, session.
    cancels: Mutex<HashMap<i32, CancelTarget>>,
}

/// What a cancel request's process id leads to: its key, and the session.
type CancelTarget = (Vec<u8>, Weak<Session>);

impl std::fmt::Debug for Defaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Defaults")
            .field("server_version", &self.server_version)
            .finish()
    }
}

impl std::fmt::Debug for Door {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Door")
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Door {
    /// The door over `state` with `limits`.
    pub fn new(state: State, limits: Limits) -> Arc<Door> {
        let defaults = Defaults {
            server_version: "16.6".into(),
            read_only: backend::read_only(&state),
        };
        Arc::new(Door {
            state,
            defaults,
            limits,
            identities: Mutex::default(),
            cancels: Mutex::default(),
        })
    }

    /// Counts a connection of `name`, or `None` when it holds its limit.
    pub fn admit_identity(self: &Arc<Door>, name: &Arc<str>) -> Option<IdentitySlot> {
        let mut all = self.identities.lock().unwrap_or_else(|p| p.into_inner());
        let n = all.entry(name.clone()).or_insert(0);
        if *n >= self.limits.max_connections_per_identity {
            metrics::counter!("duckgate_pg_connections_refused_total", "reason" => "identity_limit")
                .increment(1);
            return None;
        }
        *n += 1;
        Some(IdentitySlot {
            door: self.clone(),
            name: name.clone(),
        })
    }

    /// Lets a cancel request carrying `key` reach `session`, while the
    /// returned value lives.
    pub fn register_cancel(
        self: &Arc<Door>,
        pid: i32,
        key: Vec<u8>,
        session: &Arc<Session>,
    ) -> CancelKey {
        self.cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(pid, (key, Arc::downgrade(session)));
        CancelKey {
            door: self.clone(),
            pid,
        }
    }

    /// A cancel request: the statement running on the session whose
    /// process id and key it names is cancelled as `DELETE /queries/{id}`
    /// cancels it. A wrong key does nothing (and says nothing, as
    /// PostgreSQL).
    pub fn cancel(&self, pid: i32, key: &[u8]) {
        use subtle::ConstantTimeEq;
        let session = {
            let cancels = self.cancels.lock().unwrap_or_else(|p| p.into_inner());
            cancels.get(&pid).and_then(|(k, s)| {
                (k.len() == key.len() && bool::from(k.as_slice().ct_eq(key)))
                    .then(|| s.upgrade())
                    .flatten()
            })
        };
        metrics::counter!(
            "duckgate_pg_cancel_requests_total",
            "outcome" => if session.is_some() { "matched" } else { "unmatched" }
        )
        .increment(1);
        if let Some(running) = session.and_then(|s| s.current()) {
            backend::cancel(&self.state, &running);
        }
    }

    /// Counts a refused credential.
    pub fn count_auth_failure(&self, reason: &'static str) {
        metrics::counter!("duckgate_auth_failures_total", "route" => "pg", "reason" => reason)
            .increment(1);
        tracing::warn!(route = "pg", reason, "authentication failed");
    }
}

/// A connection counted against its identity's limit, until dropped.
pub struct IdentitySlot {
    door: Arc<Door>,
    name: Arc<str>,
}

impl Drop for IdentitySlot {
    fn drop(&mut self) {
        let mut all = self
            .door
            .identities
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(n) = all.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                all.remove(&self.name);
            }
        }
    }
}

/// A session reachable by cancel requests, until dropped.
pub struct CancelKey {
    door: Arc<Door>,
    pid: i32,
}

impl Drop for CancelKey {
    fn drop(&mut self) {
        self.door
            .cancels
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.pid);
    }
}

/// HELP texts and zero values of the door's series, from start-up.
pub fn register_metrics() {
    metrics::describe_gauge!(
        "duckgate_pg_connections",
        "Connections open on the PostgreSQL door."
    );
    metrics::describe_counter!(
        "duckgate_pg_connections_total",
        "Connections the PostgreSQL door accepted."
    );
    metrics::describe_counter!(
        "duckgate_pg_connections_refused_total",
        "Connections the PostgreSQL door refused or closed by one of its limits, by reason (connection_limit, identity_limit, startup_timeout, idle_timeout, message_too_large)."
    );
    metrics::describe_counter!(
        "duckgate_pg_cancel_requests_total",
        "Cancel requests the PostgreSQL door received, by whether their key named a session."
    );
    metrics::gauge!("duckgate_pg_connections").set(0.0);
    metrics::counter!("duckgate_pg_connections_total").increment(0);
    for reason in [
        "connection_limit",
        "identity_limit",
        "startup_timeout",
        "idle_timeout",
        "message_too_large",
    ] {
        metrics::counter!("duckgate_pg_connections_refused_total", "reason" => reason).increment(0);
    }
    for outcome in ["matched", "unmatched"] {
        metrics::counter!("duckgate_pg_cancel_requests_total", "outcome" => outcome).increment(0);
    }
    metrics::counter!("duckgate_auth_failures_total", "route" => "pg", "reason" => "wrong")
        .increment(0);
}
