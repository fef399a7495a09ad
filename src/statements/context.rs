//! What the statement domain works with, from the gateway: built once for
//! the replication loop, and per request by the HTTP layer (a few `Arc`s).

use std::sync::Arc;
use std::time::Duration;

use crate::engine::ffi::RawDatabase;
use crate::engine::queries::Registry;

use super::{Runner, Statements};

/// The statement domain's view of the gateway.
#[derive(Clone)]
pub struct Context {
    /// Every kept statement, their spool and (with replicas) shared state.
    pub statements: Arc<Statements>,
    /// The registry of running queries (a statement is one while it runs).
    pub queries: Arc<Registry>,
    /// What a statement needs to run: engine, rotator, health, shutdown.
    pub runner: Runner,
    /// Rows a statement may keep at most (`DUCKGATE_MAX_ROWS`).
    pub max_rows: u64,
    /// How long a client may accept no bytes before it is cut off.
    pub stall_timeout: Duration,
    /// Largest single value the gateway will encode.
    pub max_value_bytes: u64,
    /// S3 spool objects no statement names are removed after this long.
    pub orphan_grace: Duration,
    /// How long fetching another replica's result from the S3 spool may take.
    pub download_limit: Duration,
}

impl Context {
    /// The database, whose progress of a running statement is read.
    pub fn db(&self) -> &RawDatabase {
        &self.runner.engine.db
    }
}
