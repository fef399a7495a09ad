//! The embedded DuckDB: one database per process, a bounded pool of
//! connections for client queries, and a control connection (outside the pool)
//! for the gateway's own secret DDL.

pub mod admission;
pub mod cache;
pub mod catalogs;
mod data_dir;
pub mod errors;
pub mod execute;
pub mod ffi;
pub mod guard;
pub mod listing;
mod lockdown;
pub mod memory;
pub mod nesting;
pub mod pipe;
pub mod policy;
pub mod pool;
pub mod priority;
pub mod problems;
pub mod progress;
pub mod queries;
pub mod s3_paths;
pub mod secrets;
mod setup;
#[cfg(test)]
mod shims_abi;
pub mod sink;
pub mod spill;
pub mod threads;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use crate::config::{Config, Policy};
use crate::state::Health;

use data_dir::Dirs;
pub use execute::{Param, QueryError, QueryJob, QueryOutput};
use setup::{
    cap_memory, check_thread_stacks, client_schema, database_options, load_extensions,
    pool_options, register_shims,
};

/// Extension platform directory DuckDB v1.5.5 looks in.
#[cfg(target_arch = "aarch64")]
pub const EXTENSION_SUBDIR: &str = "v1.5.5/linux_arm64";
/// Extension platform directory DuckDB v1.5.5 looks in.
#[cfg(not(target_arch = "aarch64"))]
pub const EXTENSION_SUBDIR: &str = "v1.5.5/linux_amd64";

/// Under the read-write policy, the schema of the gateway's own database
/// where client objects live: every pooled connection's search path is
/// `client,main`, so unqualified names are created here and read here
/// first. `main` holds the operator's objects, which clients may read and
/// write rows of but not create, alter or drop (see `guard::check_schema`).
pub const CLIENT_SCHEMA: &str = "client";

/// Everything needed to run client queries and secret DDL.
pub struct Engine {
    /// The database; connections keep it alive on their own.
    pub db: Arc<ffi::RawDatabase>,
    /// Client queries run here, bounded.
    pub pool: pool::QueryPool,
    /// Secret DDL runs here and nowhere else; no client can reach it.
    pub control: Arc<Mutex<crate::engine::ffi::Connection>>,
    /// The control connection's twin on DuckDB's C++ API: the rotator
    /// installs secrets here, through DuckDB's secret manager. Outside the
    /// pool, like `control`.
    pub control_raw: Arc<Mutex<ffi::RawConnection>>,
    /// Statement policy for clients.
    pub policy: Policy,
    /// Read-write: the gateway's database and the schema client objects
    /// live in.
    client_schema: Option<guard::ClientSchema>,
    /// Canonical data directory.
    pub data_dir: PathBuf,
    /// Canonical directory queries may read files from.
    pub files_dir: PathBuf,
    /// What the guard enforces; set by [`Engine::lock_down`], once the S3
    /// scope is known.
    rules: std::sync::OnceLock<Arc<guard::Rules>>,
    /// Extensions loaded at start (`httpfs`, `icu`).
    pub extensions: Vec<&'static str>,
    /// See [`guard::Rules::confined_plans`].
    confined_plans: bool,
    /// The exclusive lock on the data directory, held for the process's life.
    _lock: std::fs::File,
}

/// Start-up failures of the engine, each with a message for the operator.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// A directory the engine uses, or its lock file, could not be prepared.
    #[error("cannot prepare the data directory {path}: {source}")]
    DataDir {
        /// The directory or file that failed.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Another process holds the data directory's lock.
    #[error(
        "DUCKGATE_DATA_DIR {path} is in use by another duckgate ({holder}); give each \
         instance its own data directory"
    )]
    Locked {
        /// The data directory.
        path: PathBuf,
        /// What the lock file says of its holder, e.g. `pid 123`.
        holder: String,
    },
    /// DuckDB could not open the database.
    #[error("cannot open the database: {0}")]
    Open(#[from] ffi::FfiError),
    /// A step of setting up the database failed.
    #[error("cannot set up the database ({step}): {message}")]
    Setup {
        /// The step, e.g. `LOAD httpfs`.
        step: &'static str,
        /// Why it failed.
        message: String,
    },
    /// The connection pool could not be opened.
    #[error("cannot open the connection pool: {0}")]
    Pool(#[from] pool::PoolError),
    /// S3 secrets are configured but the httpfs extension file is missing.
    #[error(
        "the httpfs extension is missing: expected {expected}. Install it offline with \
         `pip install duckdb-extension-httpfs==1.5.5` and copy extensions/v1.5.5/httpfs.duckdb_extension \
         from the wheel there (scripts/test-env does this), then set DUCKGATE_EXTENSION_DIR"
    )]
    MissingExtension {
        /// The path the extension file was expected at.
        expected: String,
    },
}

impl Engine {
    /// Opens the database and its connections, without the lockdown (which
    /// comes after the gateway's secrets exist: see [`Engine::lock_down`]).
    pub fn open(
        config: &Config,
        health: Arc<Health>,
        needs_httpfs: bool,
        shares: admission::Shares,
    ) -> Result<Self, EngineError> {
        let dirs = Dirs::prepare(config)?;
        let options = database_options(config, &dirs);
        // DuckDB's worker threads start now and inherit this thread's
        // niceness; the threads that run client statements lower theirs too.
        priority::set_query_nice(config.engine.query_nice);
        check_thread_stacks()?;
        let db = Arc::new(ffi::RawDatabase::open(config.database_path(), &options)?);
        cap_memory(&db, config)?;
        register_shims(&db)?;

        let control = db.connect().map_err(|e| EngineError::Setup {
            step: "control connection",
            message: e.to_string(),
        })?;
        let extensions = load_extensions(&db, &control, config, needs_httpfs)?;
        // Initialise the secret manager now, while external access is still
        // on (DuckDB fails later with "Secret Storage with name 'memory'
        // already registered" otherwise).
        control
            .execute_batch("SELECT count(*) FROM duckdb_secrets()")
            .map_err(|e| EngineError::Setup {
                step: "secret manager",
                message: e.to_string(),
            })?;

        let control_raw = db.connect_raw().map_err(|e| EngineError::Setup {
            step: "control connection",
            message: e.to_string(),
        })?;
        if !nesting::cap_json_depth(&control_raw) {
            return Err(EngineError::Setup {
                step: "JSON depth cap",
                message: "DuckDB's recursive JSON functions were not where DuckDB 1.5.5 has them"
                    .into(),
            });
        }
        let client_schema = client_schema(&control, config.engine.policy)?;

        let pool = pool::QueryPool::new(
            db.clone(),
            pool_options(config, client_schema.as_ref(), shares),
            health,
        )?;
        Ok(Self {
            db,
            pool,
            control: Arc::new(Mutex::new(control)),
            control_raw: Arc::new(Mutex::new(control_raw)),
            policy: config.engine.policy,
            client_schema,
            data_dir: dirs.data,
            files_dir: dirs.files,
            rules: std::sync::OnceLock::new(),
            extensions,
            #[cfg(feature = "test-hooks")]
            confined_plans: config.server.test_show_confined_plans,
            #[cfg(not(feature = "test-hooks"))]
            confined_plans: false,
            _lock: dirs.lock,
        })
    }

    /// The guard's rules (after [`Engine::lock_down`]).
    pub fn rules(&self) -> Arc<guard::Rules> {
        self.rules
            .get()
            .cloned()
            .expect("the engine is locked down before it serves queries")
    }

    /// The guard's rules for a caller confined by `access` (its roles'
    /// grants), or the rules of every unconfined caller.
    pub fn rules_for(&self, access: Option<Arc<guard::access::Access>>) -> Arc<guard::Rules> {
        let rules = self.rules();
        match access {
            None => rules,
            Some(access) => {
                let mut confined = (*rules).clone();
                confined.access = Some(access);
                // What it may read is what its grants say, not the
                // gateway's layout: refusals name no server path.
                confined.paths.redacted = true;
                Arc::new(confined)
            }
        }
    }

    /// DuckDB's version, e.g. `v1.5.5`.
    pub fn duckdb_version() -> String {
        ffi::library_version()
    }
}

pub use crate::sql::sql_string;
