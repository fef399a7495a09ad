//! The embedded DuckDB: one database per process, a bounded pool of
//! connections for client queries, and a control connection (outside the pool)
//! for the gateway's own secret DDL.

pub mod encode;
pub mod execute;
pub mod ffi;
pub mod guard;
pub mod pool;
pub mod priority;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::{Config, Policy};
use crate::health::Health;

pub use execute::{Param, QueryError, QueryJob, QueryOutput};

/// Extension platform directory DuckDB v1.5.5 looks in.
#[cfg(target_arch = "aarch64")]
pub const EXTENSION_SUBDIR: &str = "v1.5.5/linux_arm64";
/// Extension platform directory DuckDB v1.5.5 looks in.
#[cfg(not(target_arch = "aarch64"))]
pub const EXTENSION_SUBDIR: &str = "v1.5.5/linux_amd64";

/// Everything needed to run client queries and secret DDL.
pub struct Engine {
    /// The database; connections keep it alive on their own.
    pub db: Arc<ffi::RawDatabase>,
    /// Client queries run here, bounded.
    pub pool: pool::QueryPool,
    /// Secret DDL runs here and nowhere else; no client can reach it.
    pub control: Arc<Mutex<duckdb::Connection>>,
    /// Statement policy for clients.
    pub policy: Policy,
    /// Canonical data directory.
    pub data_dir: PathBuf,
}

/// Start-up failures of the engine, each with a message for the operator.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot prepare the data directory {path}: {source}")]
    DataDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot open the database: {0}")]
    Open(String),
    #[error("cannot set up the database ({step}): {message}")]
    Setup { step: &'static str, message: String },
    #[error(
        "the httpfs extension is missing: expected {expected}. Install it offline with \
         `pip install duckdb-extension-httpfs==1.5.5` and copy extensions/v1.5.5/httpfs.duckdb_extension \
         from the wheel there (scripts/test-env does this), then set DUCKGATE_EXTENSION_DIR"
    )]
    MissingExtension { expected: String },
}

impl Engine {
    /// Opens the database and its connections, without the lockdown (which
    /// comes after the gateway's secrets exist: see [`Engine::lock_down`]).
    pub fn open(
        config: &Config,
        health: Arc<Health>,
        needs_httpfs: bool,
    ) -> Result<Self, EngineError> {
        let data_dir = prepare_data_dir(&config.engine.data_dir)?;
        let secrets_dir = data_dir.join("secrets");
        // A restart is a recycle: secrets persisted by an earlier run (or
        // planted) must never load.
        if secrets_dir.exists() {
            std::fs::remove_dir_all(&secrets_dir).map_err(|source| EngineError::DataDir {
                path: secrets_dir.clone(),
                source,
            })?;
        }
        create_private_dir(&secrets_dir)?;
        let tmp_dir = data_dir.join("tmp");
        create_private_dir(&tmp_dir)?;

        let mut options: Vec<(&str, String)> = vec![
            ("autoinstall_known_extensions", "false".into()),
            ("autoload_known_extensions", "false".into()),
            ("allow_community_extensions", "false".into()),
            (
                "secret_directory",
                secrets_dir.to_string_lossy().into_owned(),
            ),
            ("temp_directory", tmp_dir.to_string_lossy().into_owned()),
        ];
        if let Some(dir) = &config.engine.extension_dir {
            options.push(("extension_directory", dir.to_string_lossy().into_owned()));
        }
        if let Some(t) = config.engine.threads {
            options.push(("threads", t.to_string()));
        }
        if let Some(m) = &config.engine.memory_limit {
            options.push(("memory_limit", m.clone()));
        }
        if let Some(m) = &config.engine.max_temp_directory_size {
            options.push(("max_temp_directory_size", m.clone()));
        }
        // DuckDB's worker threads start now and inherit this thread's
        // niceness; the threads that run client statements lower theirs too.
        priority::set_query_nice(config.engine.query_nice);
        let db = Arc::new(
            ffi::RawDatabase::open(config.database_path(), &options).map_err(EngineError::Open)?,
        );

        let control = db.connect().map_err(|e| EngineError::Setup {
            step: "control connection",
            message: e.to_string(),
        })?;
        if needs_httpfs {
            let dir = config.engine.extension_dir.clone().unwrap_or_else(|| {
                std::env::var_os("HOME")
                    .map(PathBuf::from)
                    .unwrap_or_default()
                    .join(".duckdb/extensions")
            });
            let file = dir.join(EXTENSION_SUBDIR).join("httpfs.duckdb_extension");
            if !file.is_file() {
                return Err(EngineError::MissingExtension {
                    expected: file.display().to_string(),
                });
            }
            control
                .execute_batch("LOAD httpfs")
                .map_err(|e| EngineError::Setup {
                    step: "LOAD httpfs",
                    message: e.to_string(),
                })?;
        }
        // Initialise the secret manager now, while external access is still
        // on (DuckDB fails later with "Secret Storage with name 'memory'
        // already registered" otherwise).
        control
            .execute_batch("SELECT count(*) FROM duckdb_secrets()")
            .map_err(|e| EngineError::Setup {
                step: "secret manager",
                message: e.to_string(),
            })?;

        let pool = pool::QueryPool::new(
            db.clone(),
            config.pool_size(),
            config.acquire_timeout(),
            health,
        )
        .map_err(|e| EngineError::Setup {
            step: "connection pool",
            message: e,
        })?;
        Ok(Self {
            db,
            pool,
            control: Arc::new(Mutex::new(control)),
            policy: config.engine.policy,
            data_dir,
        })
    }

    /// Defense in depth under the guard: queries may touch only the data
    /// directory and the configured S3 prefixes, and nothing may change a
    /// setting afterwards. The order matters: allowed directories can only be
    /// set while external access is on.
    pub fn lock_down(&self, s3_prefixes: &[String]) -> Result<(), EngineError> {
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let mut allowed: Vec<String> = vec![format!("{}/", self.data_dir.display())];
        allowed.extend(s3_prefixes.iter().cloned());
        let list = allowed
            .iter()
            .map(|p| sql_string(p))
            .collect::<Vec<_>>()
            .join(", ");
        for (step, sql) in [
            (
                "allowed_directories",
                format!("SET allowed_directories = [{list}]"),
            ),
            (
                "enable_external_access",
                "SET enable_external_access = false".to_string(),
            ),
            (
                "lock_configuration",
                "SET lock_configuration = true".to_string(),
            ),
        ] {
            control
                .execute_batch(&sql)
                .map_err(|e| EngineError::Setup {
                    step,
                    message: e.to_string(),
                })?;
        }
        Ok(())
    }

    /// DuckDB's version, e.g. `v1.5.5`.
    pub fn duckdb_version() -> String {
        ffi::library_version()
    }
}

/// Quotes a value as an SQL string literal.
pub fn sql_string(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

fn prepare_data_dir(dir: &Path) -> Result<PathBuf, EngineError> {
    std::fs::create_dir_all(dir).map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    dir.canonicalize().map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })
}

fn create_private_dir(dir: &Path) -> Result<(), EngineError> {
    std::fs::create_dir_all(dir).map_err(|source| EngineError::DataDir {
        path: dir.to_path_buf(),
        source,
    })?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}
