//! The embedded DuckDB: one database per process, a bounded pool of
//! connections for client queries, and a control connection (outside the pool)
//! for the gateway's own secret DDL.

pub mod admission;
pub mod cache;
pub mod catalogs;
pub mod errors;
pub mod execute;
pub mod ffi;
pub mod guard;
pub mod listing;
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
#[cfg(test)]
mod shims_abi;
pub mod sink;
pub mod spill;
pub mod threads;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::config::{Config, Policy};
use crate::state::Health;

pub use execute::{Param, QueryError, QueryJob, QueryOutput};

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
        // CSV answers are DuckDB's own COPY, written through this file system.
        if !pipe::register(&db) {
            return Err(EngineError::Setup {
                step: "CSV pipe",
                message: "DuckDB refused the pipe file system".into(),
            });
        }
        // Roles' row filters and masks are applied by DuckDB's optimizer.
        if !policy::register(&db) {
            return Err(EngineError::Setup {
                step: "row policies",
                message: "DuckDB refused the policy optimizer extension".into(),
            });
        }

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
            pool::PoolOptions {
                size: config.pool_size(),
                spares: config
                    .engine
                    .pool_spares
                    .map(|n| n as usize)
                    .unwrap_or_else(|| config.pool_size()),
                acquire_timeout: config.acquire_timeout(),
                threads: config
                    .engine
                    .threads
                    .map(|t| t as usize)
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                shed_early: config.engine.shed_early,
                search_path: client_schema.as_ref().map(|c| format!("{},main", c.schema)),
                shares,
            },
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

    /// Defense in depth under the guard: queries may touch only the readable
    /// directory and the configured S3 prefixes, and nothing may change a
    /// setting afterwards. The order matters: allowed directories can only be
    /// set while external access is on. `catalog_dirs`: local directories
    /// that declared catalogs read ([`catalogs`]), which clients reach only
    /// through those catalogs.
    pub fn lock_down(
        &self,
        s3_prefixes: &[String],
        catalog_dirs: &[String],
        s3_refused: &[String],
        writable_catalogs: &[String],
    ) -> Result<(), EngineError> {
        let files = format!("{}/", self.files_dir.display());
        let scope: Vec<String> = s3_prefixes
            .iter()
            .map(|p| {
                if p.ends_with('/') {
                    p.clone()
                } else {
                    format!("{p}/")
                }
            })
            .collect();
        // Declared catalogs are attached by now, and clients cannot attach.
        let client_schema = match self.client_schema.clone() {
            Some(mut home) => {
                let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
                home.databases = control
                    .prepare("SELECT database_name FROM duckdb_databases()")
                    .and_then(|mut s| {
                        s.query_map([], |r| r.get::<_, String>(0))?
                            .collect::<Result<Vec<_>, _>>()
                    })
                    .map_err(|e| EngineError::Setup {
                        step: "client schema",
                        message: e.to_string(),
                    })?;
                Some(home)
            }
            None => None,
        };
        let writable = match &client_schema {
            Some(home) => std::iter::once(home.database.clone())
                .chain(writable_catalogs.iter().cloned())
                .collect(),
            None => Vec::new(),
        };
        let _ = self.rules.set(Arc::new(guard::Rules {
            policy: self.policy,
            client_schema,
            writable,
            paths: guard::paths::PathRules {
                files_dir: Some(files.clone()),
                s3: !scope.is_empty(),
                s3_scope: scope,
                s3_refused: s3_refused.to_vec(),
                redacted: false,
            },
            access: None,
            confined_plans: self.confined_plans,
        }));
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let mut allowed: Vec<String> = vec![files];
        allowed.extend(s3_prefixes.iter().cloned());
        allowed.extend(catalog_dirs.iter().cloned());
        let list = allowed
            .iter()
            .map(|p| sql_string(p))
            .collect::<Vec<_>>()
            .join(", ");
        for (step, sql) in [
            (
                "allowed_paths",
                format!(
                    "SET allowed_paths = [{}, {}]",
                    sql_string(pipe::CopyFormat::Csv.target()),
                    sql_string(pipe::CopyFormat::Parquet.target())
                ),
            ),
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

pub use crate::sql::sql_string;

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

/// Takes the exclusive lock on `<dir>/duckgate.lock` (released by the OS when
/// the process ends, however it ends) and writes the holder's pid into it.
fn lock_data_dir(dir: &Path) -> Result<std::fs::File, EngineError> {
    use std::io::{Read, Seek, Write};
    let path = dir.join("duckgate.lock");
    let io = |source| EngineError::DataDir {
        path: path.clone(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(io)?;
    match file.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Err(EngineError::Locked {
                path: dir.to_path_buf(),
                holder: if holder.is_empty() {
                    "holder unknown".into()
                } else {
                    holder.to_string()
                },
            });
        }
        Err(std::fs::TryLockError::Error(e)) => return Err(io(e)),
    }
    file.set_len(0).map_err(io)?;
    file.rewind().map_err(io)?;
    write!(file, "pid {}", std::process::id()).map_err(io)?;
    file.flush().map_err(io)?;
    Ok(file)
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

/// The gateway's directories, prepared and locked at start.
struct Dirs {
    data: PathBuf,
    secrets: PathBuf,
    tmp: PathBuf,
    files: PathBuf,
    lock: std::fs::File,
}

impl Dirs {
    fn prepare(config: &Config) -> Result<Self, EngineError> {
        let data_dir = prepare_data_dir(&config.engine.data_dir)?;
        // Nothing in the directory is touched before this lock is held: two
        // processes on one directory would share spill files and wipe each
        // other's secrets.
        let lock = lock_data_dir(&data_dir)?;
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
        // Spill files left by a process that was killed are nobody's now.
        let tmp_dir = data_dir.join("tmp");
        if tmp_dir.exists() {
            std::fs::remove_dir_all(&tmp_dir).map_err(|source| EngineError::DataDir {
                path: tmp_dir.clone(),
                source,
            })?;
        }
        create_private_dir(&tmp_dir)?;
        let files_dir = match &config.engine.files_dir {
            Some(dir) => prepare_data_dir(dir)?,
            None => prepare_data_dir(&data_dir.join("files"))?,
        };
        let spool_dir = data_dir.join("spool");
        let private = [&tmp_dir, &secrets_dir, &spool_dir];
        if private
            .iter()
            .any(|p| files_dir.starts_with(p) || p.starts_with(&files_dir))
        {
            return Err(EngineError::Setup {
                step: "DUCKGATE_FILES_DIR",
                message: "the readable directory may neither be inside nor hold the spill, secret or spool directory".into(),
            });
        }
        Ok(Self {
            data: data_dir,
            secrets: secrets_dir,
            tmp: tmp_dir,
            files: files_dir,
            lock,
        })
    }
}

/// DuckDB's options at open: no extension installed or loaded behind the
/// gateway's back, its secret and spill directories, the operator's limits.
fn database_options(config: &Config, dirs: &Dirs) -> Vec<(&'static str, String)> {
    let mut options: Vec<(&'static str, String)> = vec![
        ("autoinstall_known_extensions", "false".into()),
        ("autoload_known_extensions", "false".into()),
        ("allow_community_extensions", "false".into()),
        (
            "secret_directory",
            dirs.secrets.to_string_lossy().into_owned(),
        ),
        ("temp_directory", dirs.tmp.to_string_lossy().into_owned()),
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
    options
}

/// DuckDB's scheduler threads start with the process's default thread
/// attributes: their stacks must fit its recursion as the gateway's
/// threads do (`nesting`).
fn check_thread_stacks() -> Result<(), EngineError> {
    // DuckDB's scheduler threads start now too, with the process's
    // default thread attributes: their stacks must fit its recursion as
    // the gateway's threads do (`nesting`).
    if !nesting::thread_fits() {
        return Err(EngineError::Setup {
            step: "thread stacks",
            message: format!(
                "this thread has {} bytes of stack and DuckDB needs {}: build the runtime with duckgate::runtime_builder()",
                nesting::current_thread_stack().unwrap_or(0),
                nesting::STACK_BYTES
            ),
        });
    }
    if !nesting::set_default_thread_stack() {
        return Err(EngineError::Setup {
            step: "thread stacks",
            message: "the C library refused a default thread stack size".into(),
        });
    }
    Ok(())
}

/// Caps DuckDB's allocations at its buffer pool plus an allowance, both
/// inside the memory DuckDB sees (a container's limit included).
fn cap_memory(db: &Arc<ffi::RawDatabase>, config: &Config) -> Result<(), EngineError> {
    let (available, buffer_pool) = memory::budget(db).ok_or(EngineError::Setup {
        step: "DUCKGATE_MAX_UNMANAGED_MEMORY",
        message: "DuckDB did not report its memory".into(),
    })?;
    let allowance = config
        .engine
        .max_unmanaged_memory
        .unwrap_or_else(|| memory::default_allowance(available, buffer_pool));
    // With DuckDB's default buffer pool (80%) in a small container
    // (its cgroup limit is what DuckDB sees), the allowance's floor put
    // the ceiling past the container (1.13 GB in 1 GiB): unless the
    // operator chose the pool, it shrinks so both fit in 90%.
    let buffer_pool = match memory::fitted_pool(available, buffer_pool, allowance) {
        Some(pool) if config.engine.memory_limit.is_none() => {
            let conn = db.connect().map_err(|e| EngineError::Setup {
                step: "memory_limit",
                message: e.to_string(),
            })?;
            conn.execute_batch(&format!("SET GLOBAL memory_limit = '{}MiB'", pool >> 20))
                .map_err(|e| EngineError::Setup {
                    step: "memory_limit",
                    message: e.to_string(),
                })?;
            drop(conn);
            memory::budget(db).map_or(pool, |(_, p)| p)
        }
        _ => buffer_pool,
    };
    let ceiling = buffer_pool.saturating_add(allowance);
    memory::set_ceiling(ceiling);
    tracing::info!(
        buffer_pool_bytes = buffer_pool,
        allowance_bytes = allowance,
        ceiling_bytes = ceiling,
        "DuckDB's allocations are capped at its buffer pool's limit plus an allowance"
    );
    Ok(())
}

/// Loads httpfs (when S3 secrets are configured) and icu from the
/// extension directory, with httpfs's globals locked down; the extensions
/// loaded.
fn load_extensions(
    db: &ffi::RawDatabase,
    control: &ffi::Connection,
    config: &Config,
    needs_httpfs: bool,
) -> Result<Vec<&'static str>, EngineError> {
    let setup = |step: &'static str, sql: &str| {
        control.execute_batch(sql).map_err(|e| EngineError::Setup {
            step,
            message: e.to_string(),
        })
    };
    let ext_dir = config.engine.extension_dir.clone().unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".duckdb/extensions")
    });
    let ext_file = |name: &str| {
        ext_dir
            .join(EXTENSION_SUBDIR)
            .join(format!("{name}.duckdb_extension"))
    };
    let mut extensions = Vec::new();
    if needs_httpfs {
        let file = ext_file("httpfs");
        if !file.is_file() {
            return Err(EngineError::MissingExtension {
                expected: file.display().to_string(),
            });
        }
        setup("LOAD httpfs", "LOAD httpfs")?;
        // httpfs copies AWS_ACCESS_KEY_ID and friends from the process
        // environment into global settings that any query could read;
        // the gateway's credentials live only in its secrets. URL query
        // parameters (`?s3_endpoint=`) would let a path redirect signed
        // requests: no path with a `?` reaches httpfs (the guard refuses
        // it in what clients write, `s3_paths` in every path httpfs is
        // asked for, a glob's listed keys included), so httpfs's
        // URL-compatibility mode, which would also make glob characters
        // literal, stays off.
        // A hung S3 read does not see DuckDB's interrupt: bound it by
        // httpfs's own inactivity timeout and retries, derived from the
        // default query limit (the pool replaces a connection that stays
        // stuck longer; this bounds how long the stuck one lives).
        let http_timeout_s = (config.limits.default_query_timeout_ms() / 2000).clamp(2, 30);
        setup(
            "httpfs timeouts",
            &format!("SET GLOBAL http_timeout = {http_timeout_s}; SET GLOBAL http_retries = 1"),
        )?;
        setup(
            "httpfs lockdown",
            "SET GLOBAL s3_access_key_id = ''; SET GLOBAL s3_secret_access_key = ''; \
             SET GLOBAL s3_session_token = ''; SET GLOBAL s3_url_compatibility_mode = false",
        )?;
        if !s3_paths::guard(db) {
            return Err(EngineError::Setup {
                step: "S3 path guard",
                message: "httpfs's S3 file system was not where DuckDB 1.5.5's httpfs has it"
                    .into(),
            });
        }
        extensions.push("httpfs");
    }
    // Time zones: ICU ships like httpfs; without it TIMESTAMPTZ still
    // works in UTC, and the health snapshot says which extensions loaded.
    if ext_file("icu").is_file() {
        setup("LOAD icu", "LOAD icu")?;
        setup(
            "DUCKGATE_TIMEZONE",
            &format!(
                "SET GLOBAL TimeZone = {}",
                sql_string(&config.engine.timezone)
            ),
        )?;
        extensions.push("icu");
    } else {
        tracing::warn!(
            expected = %ext_file("icu").display(),
            "the icu extension is missing: time zone functions are unavailable"
        );
    }
    Ok(extensions)
}

/// The schema read-write clients create their objects in, under a
/// read-write policy.
fn client_schema(
    control: &ffi::Connection,
    policy: Policy,
) -> Result<Option<guard::ClientSchema>, EngineError> {
    Ok(match policy {
        Policy::ReadOnly => None,
        Policy::ReadWrite => {
            control
                .execute_batch(&format!("CREATE SCHEMA IF NOT EXISTS {CLIENT_SCHEMA}"))
                .map_err(|e| EngineError::Setup {
                    step: "client schema",
                    message: e.to_string(),
                })?;
            let database: String = control
                .prepare("SELECT current_database()")
                .and_then(|mut s| s.query_row([], |r| r.get(0)))
                .map_err(|e| EngineError::Setup {
                    step: "client schema",
                    message: e.to_string(),
                })?;
            Some(guard::ClientSchema {
                database,
                schema: CLIENT_SCHEMA.to_string(),
                databases: Vec::new(),
            })
        }
    })
}
