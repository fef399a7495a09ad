//! The steps of opening the database: its options, the shims it takes,
//! the memory cap, the extensions, the client schema and the pool's
//! options.

use std::sync::Arc;

use super::data_dir::Dirs;
use super::*;

/// The shims DuckDB must take before anything runs: the pipe file system
/// CSV answers are DuckDB's own COPY written through, and the optimizer
/// extension that applies roles' row filters and masks.
pub(super) fn register_shims(db: &ffi::RawDatabase) -> Result<(), EngineError> {
    // CSV answers are DuckDB's own COPY, written through this file system.
    if !pipe::register(db) {
        return Err(EngineError::Setup {
            step: "CSV pipe",
            message: "DuckDB refused the pipe file system".into(),
        });
    }
    // Roles' row filters and masks are applied by DuckDB's optimizer.
    if !policy::register(db) {
        return Err(EngineError::Setup {
            step: "row policies",
            message: "DuckDB refused the policy optimizer extension".into(),
        });
    }
    Ok(())
}

/// The pool's options from the settings.
pub(super) fn pool_options(
    config: &Config,
    client_schema: Option<&guard::ClientSchema>,
    shares: admission::Shares,
) -> pool::PoolOptions {
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
        search_path: client_schema.map(|c| format!("{},main", c.schema)),
        shares,
    }
}

/// DuckDB's options at open: no extension installed or loaded behind the
/// gateway's back, its secret and spill directories, the operator's limits.
pub(super) fn database_options(config: &Config, dirs: &Dirs) -> Vec<(&'static str, String)> {
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
pub(super) fn check_thread_stacks() -> Result<(), EngineError> {
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
pub(super) fn cap_memory(db: &Arc<ffi::RawDatabase>, config: &Config) -> Result<(), EngineError> {
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
pub(super) fn load_extensions(
    db: &ffi::RawDatabase,
    control: &ffi::Connection,
    config: &Config,
    needs_httpfs: bool,
) -> Result<Vec<&'static str>, EngineError> {
    let setup = |step: &'static str, sql: &str| setup_step(control, step, sql);
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
        load_httpfs(db, control, config)?;
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

/// Runs one step of the engine's setup on the control connection; its
/// error names the step.
fn setup_step(control: &ffi::Connection, step: &'static str, sql: &str) -> Result<(), EngineError> {
    control.execute_batch(sql).map_err(|e| EngineError::Setup {
        step,
        message: e.to_string(),
    })
}

/// Loads httpfs, its timeouts bounded and its own credentials and URL
/// options locked down, and puts the S3 path guard in place.
fn load_httpfs(
    db: &ffi::RawDatabase,
    control: &ffi::Connection,
    config: &Config,
) -> Result<(), EngineError> {
    let setup = |step: &'static str, sql: &str| setup_step(control, step, sql);
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
            message: "httpfs's S3 file system was not where DuckDB 1.5.5's httpfs has it".into(),
        });
    }
    Ok(())
}

/// The schema read-write clients create their objects in, under a
/// read-write policy.
pub(super) fn client_schema(
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
