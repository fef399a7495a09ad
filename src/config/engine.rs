//! The embedded DuckDB, its connection pool and the statement policy.

use std::path::PathBuf;

use clap::{Args, ValueEnum};

use super::sizes::{bytes_between, parse_byte_size_setting};

/// The embedded DuckDB and its connection pool.
#[derive(Debug, Clone, Args)]
pub struct EngineConfig {
    /// Database file to open; unset (or `:memory:`) keeps the database in memory.
    #[arg(long, env = "DUCKGATE_DATABASE")]
    pub database: Option<PathBuf>,

    /// Directory for the gateway's own files: DuckDB's secret directory
    /// (`<dir>/secrets`, wiped at start-up), spill files (`<dir>/tmp`) and the
    /// default readable directory (`<dir>/files`).
    #[arg(long, env = "DUCKGATE_DATA_DIR", default_value = "duckgate-data")]
    pub data_dir: PathBuf,

    /// The one local directory queries may read files from (absolute paths
    /// inside it only). Default: `<data dir>/files`. The rest of the data
    /// directory (spill files, secrets, spool) is never readable.
    #[arg(long, env = "DUCKGATE_FILES_DIR")]
    pub files_dir: Option<PathBuf>,

    /// Time zone of TIMESTAMPTZ values and time zone functions (ICU).
    #[arg(long, env = "DUCKGATE_TIMEZONE", default_value = "UTC")]
    pub timezone: String,

    /// Number of pooled DuckDB connections, i.e. queries that run at once.
    /// Default: the number of cores.
    #[arg(long, env = "DUCKGATE_POOL_SIZE", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub pool_size: Option<u32>,

    /// How many pooled connections that do not come back after an interrupt
    /// (a hung S3 read inside DuckDB) may be replaced by fresh ones at once.
    /// Default: the pool size.
    #[arg(long, env = "DUCKGATE_POOL_SPARES", value_parser = clap::value_parser!(u32).range(0..=1024))]
    pub pool_spares: Option<u32>,

    /// Queries one token (or OIDC identity) is guaranteed at once; past it a
    /// token borrows free connections nobody else waits for, and gives one
    /// back when another token within its share finds none free. Default:
    /// with two or more query tokens, or with OIDC on (its identities count
    /// as one more token, and as two at least), a fair share of the pool
    /// (its size over the number of tokens, rounded up, never the whole
    /// pool, at least one); else no bound.
    #[arg(long, env = "DUCKGATE_MAX_QUERIES_PER_TOKEN", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_queries_per_token: Option<u32>,

    /// Queries that read S3 (an `s3://` path or a lake's table, by DuckDB's
    /// parse) that may hold pooled connections at once; more wait for their
    /// share, never for the rest of the pool. Default: all connections but
    /// one, so a slow or stalled S3 leaves one to local work (a pool of one
    /// has none to spare).
    #[arg(long, env = "DUCKGATE_MAX_S3_QUERIES", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub max_s3_queries: Option<u32>,

    /// How long a request waits for a pooled connection before it gets 503.
    #[arg(long, env = "DUCKGATE_ACQUIRE_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub acquire_timeout_ms: u64,

    /// Refuse a request at once (503 with Retry-After) when every connection
    /// is busy and its expected wait (the requests queued ahead times the
    /// recent mean hold time, over the pool size) is beyond the acquire
    /// timeout, instead of letting it wait the whole timeout. `false`: every
    /// request waits up to the acquire timeout.
    #[arg(long, env = "DUCKGATE_SHED_EARLY", default_value_t = true, action = clap::ArgAction::Set)]
    pub shed_early: bool,

    /// DuckDB worker threads (DuckDB's `threads`). Default: DuckDB's own choice.
    #[arg(long, env = "DUCKGATE_THREADS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub threads: Option<u32>,

    /// DuckDB's `memory_limit`, e.g. `4GB`. Default: DuckDB's own (80% of RAM).
    #[arg(long, env = "DUCKGATE_MEMORY_LIMIT", value_parser = parse_byte_size_setting)]
    pub memory_limit: Option<String>,

    /// How much DuckDB may hold beyond its buffer pool's limit (the values a
    /// query computes, which `memory_limit` does not cover), e.g. `2GB`:
    /// everything DuckDB allocates is counted against the pool's limit plus
    /// this, and an allocation past it fails the query that asked with 507
    /// out-of-memory. Default: what is left of 90% of the memory DuckDB
    /// sees (its cgroup's limit if lower) once its buffer pool is full, at
    /// least 256MB.
    #[arg(long, env = "DUCKGATE_MAX_UNMANAGED_MEMORY", value_parser = bytes_between(1024, u64::MAX))]
    pub max_unmanaged_memory: Option<u64>,

    /// DuckDB's `max_temp_directory_size`, e.g. `20GB`.
    #[arg(long, env = "DUCKGATE_MAX_TEMP_DIRECTORY_SIZE", value_parser = parse_byte_size_setting)]
    pub max_temp_directory_size: Option<String>,

    /// Directory that holds DuckDB extensions as
    /// `<dir>/v1.5.5/linux_amd64/httpfs.duckdb_extension`. Extensions are never
    /// downloaded at run time.
    #[arg(long, env = "DUCKGATE_EXTENSION_DIR")]
    pub extension_dir: Option<PathBuf>,

    /// Scheduling niceness (0-19) of the threads that run DuckDB, so the HTTP
    /// workers, and with them the probes, win the CPU when queries saturate it.
    #[arg(long, env = "DUCKGATE_QUERY_NICE", default_value_t = 10, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub query_nice: i32,

    /// Which statements clients may run: `read-only` (queries only) or
    /// `read-write` (adds DML and DDL on the gateway's own database).
    #[arg(long, env = "DUCKGATE_POLICY", value_enum, default_value_t = Policy::ReadOnly)]
    pub policy: Policy,
}

/// The statement policy for client SQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Policy {
    /// SELECT, WITH, VALUES, FROM-first, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN, PIVOT.
    ReadOnly,
    /// Adds INSERT, UPDATE, DELETE and CREATE/DROP/ALTER of tables, views,
    /// schemas, sequences, indexes and types (never temporary objects or
    /// macros: they would carry state between clients).
    ReadWrite,
}
