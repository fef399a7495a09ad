//! Every setting, with its default and its validation.
//!
//! One `clap` struct, nested by concern, each field settable by flag or by a
//! `DUCKGATE_*` environment variable. Limits are fields, never constants.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use secrecy::{ExposeSecret, SecretString};

pub mod attach;
pub mod grants;
pub mod oidc;
pub mod roles;
pub mod s3;
pub mod sources;

use s3::S3Settings;

/// duckgate: an HTTP SQL gateway over an embedded DuckDB that keeps S3 STS
/// credentials fresh.
#[derive(Debug, Clone, Parser)]
#[command(name = "duckgate", version, about, long_about = None)]
pub struct Cli {
    /// What to run; none serves.
    #[command(subcommand)]
    pub command: Option<Command>,

    /// The settings given without a subcommand (`serve` takes its own).
    #[command(flatten)]
    pub config: Config,
}

impl Cli {
    /// The configuration to serve with: `duckgate serve` takes every flag
    /// that `duckgate` alone takes.
    pub fn serve_config(self) -> Config {
        match self.command {
            Some(Command::Serve(serve)) => *serve.config,
            _ => self.config,
        }
    }
}

/// The subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// Run the gateway (the default).
    Serve(ServeArgs),
    /// Print the OpenAPI document of the HTTP API as JSON and exit.
    Openapi,
}

/// `duckgate serve`: the same settings as `duckgate` alone.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// The settings to serve with.
    #[command(flatten)]
    pub config: Box<Config>,
}

/// The whole configuration of one gateway process.
#[derive(Debug, Clone, Args)]
pub struct Config {
    /// Where and how the HTTP server listens.
    #[command(flatten, next_help_heading = "Server")]
    pub server: ServerConfig,
    /// The embedded DuckDB and its connection pool.
    #[command(flatten, next_help_heading = "Engine (DuckDB and its pool)")]
    pub engine: EngineConfig,
    /// Per-request limits.
    #[command(flatten, next_help_heading = "Limits of a request")]
    pub limits: LimitsConfig,
    /// Async statements and their result spool.
    #[command(
        flatten,
        next_help_heading = "Async statements, the spool and replicas"
    )]
    pub statements: StatementsConfig,
    /// Who may call what.
    #[command(flatten, next_help_heading = "Authentication")]
    pub auth: AuthConfig,
    /// The S3 secrets and their rotation.
    #[command(flatten, next_help_heading = "S3 credentials and their rotation")]
    pub s3: S3Settings,
}

/// Async statements (`POST /statements`) and their result spool.
#[derive(Debug, Clone, Args)]
pub struct StatementsConfig {
    /// Largest time limit a statement may ask for. Default: one hour, or
    /// less when the shortest STS session allows less (80% of it minus the
    /// refresh lead), never below DUCKGATE_MAX_QUERY_TIMEOUT_MS.
    #[arg(long, env = "DUCKGATE_MAX_STATEMENT_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..=604_800_000))]
    pub max_statement_timeout_ms: Option<u64>,

    /// The share of the pool (0-1) async statements may hold at once: at
    /// least one connection, and never the whole of a pool of two or more,
    /// so `/query` always keeps capacity.
    #[arg(long, env = "DUCKGATE_STATEMENT_POOL_SHARE", default_value_t = 0.5, value_parser = parse_share)]
    pub statement_pool_share: f64,

    /// Longest `wait_ms` a submission may ask for (keep it below the idle
    /// limit of the proxies in front, often 60 s).
    #[arg(long, env = "DUCKGATE_MAX_STATEMENT_WAIT_MS", default_value_t = 50_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub max_statement_wait_ms: u64,

    /// How long a finished statement and its spooled result are kept.
    #[arg(long, env = "DUCKGATE_STATEMENT_TTL_MS", default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(100..=604_800_000))]
    pub statement_ttl_ms: u64,

    /// Statements kept at once (queued, running and finished); a submission
    /// beyond it gets 429.
    #[arg(long, env = "DUCKGATE_MAX_STATEMENTS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_statements: u64,

    /// Bytes all spooled results may take together (`<data dir>/spool`);
    /// a statement that would pass it fails with 507.
    #[arg(long, env = "DUCKGATE_SPOOL_BYTES", default_value = "10GB", value_parser = bytes_between(1024, u64::MAX))]
    pub spool_bytes: u64,

    /// Statements one token may keep at once, so no token takes every
    /// place.
    #[arg(long, env = "DUCKGATE_MAX_STATEMENTS_PER_TOKEN", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_statements_per_token: u64,

    /// Bytes the spooled results of one token's statements may take
    /// together, so no token fills the spool for the others.
    #[arg(long, env = "DUCKGATE_SPOOL_TOKEN_BYTES", default_value = "4GB", value_parser = bytes_between(1024, u64::MAX))]
    pub spool_token_bytes: u64,

    /// Bytes one statement's spooled result may take.
    #[arg(long, env = "DUCKGATE_SPOOL_STATEMENT_BYTES", default_value = "2GB", value_parser = bytes_between(1024, u64::MAX))]
    pub spool_statement_bytes: u64,

    /// PostgreSQL connection string of the state several replicas share
    /// (statements, cancels, running queries). Unset: this process alone,
    /// its state in memory.
    #[arg(long, env = "DUCKGATE_STATE_DSN", hide_env_values = true, value_parser = s3::parse_secret)]
    pub state_dsn: Option<SecretString>,

    /// File holding DUCKGATE_STATE_DSN (it carries the password): a
    /// Kubernetes Secret mounted as a file.
    #[arg(long, env = "DUCKGATE_STATE_DSN_FILE", conflicts_with = "state_dsn")]
    pub state_dsn_file: Option<PathBuf>,

    /// Sessions this replica's pool opens to the shared state's PostgreSQL
    /// at most (statements, heartbeats' readers, ids, cancels, commands);
    /// a request that finds them all busy waits up to 5 s. The replica
    /// holds one more session of its own for its liveness, so it opens at
    /// most this plus one: size the server's `max_connections` for every
    /// replica (docs/operations.md).
    #[arg(long, env = "DUCKGATE_STATE_POOL_SIZE", default_value_t = 8, value_parser = clap::value_parser!(u32).range(2..=256))]
    pub state_pool_size: u32,

    /// PEM file of CA certificates trusted for the shared state's TLS, on
    /// top of the system's roots (a private CA). Needs DUCKGATE_STATE_DSN.
    #[arg(long, env = "DUCKGATE_STATE_CA_FILE")]
    pub state_ca_file: Option<PathBuf>,

    /// Where results are spooled: a local directory (default
    /// `<data dir>/spool`, emptied at start) or `s3://bucket/prefix/` inside
    /// the scope of a configured S3 secret (needs DUCKGATE_STATE_DSN), so
    /// that any replica serves any finished result.
    #[arg(long, env = "DUCKGATE_SPOOL_URL")]
    pub spool_url: Option<String>,

    /// A replica whose heartbeat in the shared state made no progress for
    /// this long (seen twice, a moment apart, by another replica) is taken
    /// for dead: its running statements answer 410 statement-lost. Each
    /// replica beats every fifth of this (at most 0.5 s) on a session of
    /// its own; a frozen process is taken for dead though its sessions stay
    /// open.
    #[arg(long, env = "DUCKGATE_REPLICA_STALE_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1_000..=600_000))]
    pub replica_stale_ms: u64,

    /// An object in the S3 spool that no kept statement names (its
    /// statement was deleted while it uploaded, or expired, or was lost
    /// with its replica) is removed once it is this old. Longer than an
    /// upload takes to be published: a younger object may be one whose
    /// statement is about to name it.
    #[arg(long, env = "DUCKGATE_SPOOL_ORPHAN_GRACE_MS", default_value_t = 600_000, value_parser = clap::value_parser!(u64).range(1_000..=86_400_000))]
    pub spool_orphan_grace_ms: u64,
}

fn parse_share(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if (0.0..=1.0).contains(&v) => Ok(v),
        _ => Err(format!("`{s}` is not a share between 0 and 1")),
    }
}

/// The one parser of byte settings: a count of bytes (`1048576`) or a
/// size with its unit (`1MB`, `512 MiB`, see [`byte_size`]), from `min` to
/// `max` bytes.
fn bytes_between(
    min: u64,
    max: u64,
) -> impl Fn(&str) -> Result<u64, String> + Clone + Send + Sync + 'static {
    move |s| match byte_size(s) {
        Some(n) if (min..=max).contains(&n) => Ok(n),
        Some(n) => Err(format!("{n} bytes is not between {min} and {max}")),
        None => Err(format!(
            "`{s}` is not a byte size such as 1048576, 512MB, 4GB or 2GiB"
        )),
    }
}

/// `DUCKGATE_COMPRESSION_MIN_BYTES`: a byte setting of at most 65535.
fn parse_compression_min_bytes(s: &str) -> Result<u16, String> {
    bytes_between(0, u16::MAX.into())(s).map(|n| n as u16)
}

/// Where and how the HTTP server listens.
#[derive(Debug, Clone, Args)]
pub struct ServerConfig {
    /// Address to listen on. Port 0 picks a free port (the real address is logged).
    #[arg(long, env = "DUCKGATE_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,

    /// A second address that serves only the probes (`/healthz`,
    /// `/readyz`), from a thread of its own with its own event loop, so a
    /// probe never waits behind query traffic on the main listener. Off by
    /// default; the main listener serves the probes either way.
    #[arg(long, env = "DUCKGATE_PROBE_LISTEN")]
    pub probe_listen: Option<SocketAddr>,

    /// Address of the Arrow Flight SQL listener (gRPC): ADBC, JDBC and
    /// other Flight SQL clients run statements there with the same tokens,
    /// guard, pool, limits and audit as `POST /query`. Off by default.
    #[arg(long, env = "DUCKGATE_FLIGHT_LISTEN")]
    pub flight_listen: Option<SocketAddr>,

    /// PEM certificate chain of the Flight SQL listener: with
    /// DUCKGATE_FLIGHT_TLS_KEY it serves TLS (`grpc+tls://`); without both,
    /// plain gRPC (`grpc://`).
    #[arg(long, env = "DUCKGATE_FLIGHT_TLS_CERT", requires = "flight_tls_key")]
    pub flight_tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of DUCKGATE_FLIGHT_TLS_CERT.
    #[arg(long, env = "DUCKGATE_FLIGHT_TLS_KEY", requires = "flight_tls_cert")]
    pub flight_tls_key: Option<std::path::PathBuf>,

    /// Flight SQL results and prepared statements kept at once (all
    /// identities together): a ticket or handle beyond that is refused with
    /// RESOURCE_EXHAUSTED until some are fetched, closed or expire.
    #[arg(long, env = "DUCKGATE_FLIGHT_MAX_TICKETS", default_value_t = 256)]
    pub flight_max_tickets: usize,

    /// How long a Flight SQL ticket may wait for its DoGet (the query runs
    /// from GetFlightInfo on, holding its connection), and how long an
    /// unused prepared statement is kept.
    #[arg(long, env = "DUCKGATE_FLIGHT_TICKET_TTL_MS", default_value_t = 60_000)]
    pub flight_ticket_ttl_ms: u64,

    /// Address of the PostgreSQL wire listener: psql, PostgreSQL drivers
    /// and BI tools run statements there with the same identities, guard,
    /// grants, limits and audit as `POST /query` (docs/postgres.md). Off
    /// by default.
    #[arg(long, env = "DUCKGATE_PG_LISTEN")]
    pub pg_listen: Option<SocketAddr>,

    /// PEM certificate chain of the PostgreSQL listener: with
    /// DUCKGATE_PG_TLS_KEY it accepts TLS (`sslmode=require`,
    /// `verify-full`), and takes a query token or an OIDC JWT as a
    /// cleartext password inside it; without both, plain TCP with
    /// SCRAM-SHA-256 for query tokens.
    #[arg(long, env = "DUCKGATE_PG_TLS_CERT", requires = "pg_tls_key")]
    pub pg_tls_cert: Option<std::path::PathBuf>,

    /// PEM private key of DUCKGATE_PG_TLS_CERT.
    #[arg(long, env = "DUCKGATE_PG_TLS_KEY", requires = "pg_tls_cert")]
    pub pg_tls_key: Option<std::path::PathBuf>,

    /// PostgreSQL connections open at once, all identities together; one
    /// more is answered `53300` (too many connections) and closed.
    #[arg(long, env = "DUCKGATE_PG_MAX_CONNECTIONS", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub pg_max_connections: u64,

    /// PostgreSQL connections one identity may hold at once; one more is
    /// answered `53300` once it has authenticated.
    #[arg(long, env = "DUCKGATE_PG_MAX_CONNECTIONS_PER_IDENTITY", default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=100_000))]
    pub pg_max_connections_per_identity: u64,

    /// How long a PostgreSQL connection may take from its first byte to
    /// the end of its authentication (TLS included) before it is closed.
    #[arg(long, env = "DUCKGATE_PG_STARTUP_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub pg_startup_timeout_ms: u64,

    /// How long an authenticated PostgreSQL connection may wait between
    /// statements before it is closed (`57P05`, as PostgreSQL's
    /// idle_session_timeout); 0: no limit. An idle connection holds no
    /// DuckDB connection, only its socket.
    #[arg(long, env = "DUCKGATE_PG_IDLE_TIMEOUT_MS", default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(0..=604_800_000))]
    pub pg_idle_timeout_ms: u64,

    /// The largest message a PostgreSQL client may send (a statement with
    /// its parameters); the connection is closed at a larger one's header.
    #[arg(long, env = "DUCKGATE_PG_MAX_MESSAGE_BYTES", default_value = "16MiB", value_parser = bytes_between(1024, 1 << 30))]
    pub pg_max_message_bytes: u64,

    /// How long a graceful shutdown lets running queries finish before it
    /// interrupts them.
    #[arg(long, env = "DUCKGATE_SHUTDOWN_GRACE_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub shutdown_grace_ms: u64,

    /// Test hook: hold the control connection this long during each secret
    /// install, to prove that nothing else waits on it (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    #[arg(
        long,
        env = "DUCKGATE_TEST_CONTROL_STALL_MS",
        hide = true,
        default_value_t = 0
    )]
    pub test_control_stall_ms: u64,

    /// Test hook: show confined callers the plans of what they read through
    /// a row policy (refused otherwise), so the tests can see where the
    /// policy's filters land (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    #[arg(
        long,
        env = "DUCKGATE_TEST_SHOW_CONFINED_PLANS",
        hide = true,
        default_value_t = false,
        action = clap::ArgAction::Set
    )]
    pub test_show_confined_plans: bool,

    /// Log format: `text` for people, `json` for log pipelines.
    #[arg(long, env = "DUCKGATE_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,

    /// Origins whose web pages may call the gateway (CORS), comma-separated,
    /// e.g. `https://app.example.com,http://localhost:3000`; `*` allows every
    /// origin. Empty (the default): CORS is off and no CORS header is sent.
    #[arg(long, env = "DUCKGATE_CORS_ORIGINS", value_delimiter = ',', value_parser = parse_origin)]
    pub cors_origins: Vec<String>,

    /// Host names (the `Host` header, port aside) the gateway answers
    /// besides loopback ones (`localhost`, `*.localhost`, 127.0.0.0/8,
    /// `::1`) and the listen address, comma-separated; `*.example.com`
    /// takes every subdomain. Checked when the gateway serves anonymous
    /// queries (no query tokens), where a DNS-rebinding page could
    /// otherwise reach it by a name of its own, and whenever it is set.
    #[arg(long, env = "DUCKGATE_ALLOWED_HOSTS", value_delimiter = ',')]
    pub allowed_hosts: Vec<String>,

    /// How long a browser may cache a CORS preflight answer, in
    /// milliseconds (sent in whole seconds, as `Access-Control-Max-Age`
    /// counts them). Default: 600000.
    #[arg(long, env = "DUCKGATE_CORS_MAX_AGE_MS", value_parser = clap::value_parser!(u64).range(0..=86_400_000))]
    pub cors_max_age_ms: Option<u64>,

    /// Deprecated: DUCKGATE_CORS_MAX_AGE_MS in seconds, read when that is
    /// not set (a warning at start says so).
    #[arg(long, env = "DUCKGATE_CORS_MAX_AGE_SECS", value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub cors_max_age_secs: Option<u64>,

    /// Answers shorter than this many bytes are sent uncompressed even when
    /// the client accepts gzip or zstd (compressing a few hundred bytes
    /// saves nothing and costs a round of CPU).
    #[arg(long, env = "DUCKGATE_COMPRESSION_MIN_BYTES", default_value_t = 1024, value_parser = parse_compression_min_bytes)]
    pub compression_min_bytes: u16,

    /// Serve the browser console at `/ui` (and redirect `/` there). The
    /// console is static files embedded in the binary; every request it
    /// makes carries the user's token, like curl's. `false`: `/` and `/ui`
    /// answer 404.
    #[arg(long, env = "DUCKGATE_UI", default_value_t = true, action = clap::ArgAction::Set)]
    pub ui: bool,
}

/// An origin as browsers send it (`scheme://host[:port]`, lowercase, no
/// path), or `*`; an empty item (a trailing comma) is skipped later.
fn parse_origin(s: &str) -> Result<String, String> {
    let t = s.trim().trim_end_matches('/').to_ascii_lowercase();
    if t.is_empty() || t == "*" {
        return Ok(t);
    }
    let rest = t
        .strip_prefix("https://")
        .or_else(|| t.strip_prefix("http://"));
    match rest {
        Some(host)
            if !host.is_empty()
                && host
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-.:[]".contains(c)) =>
        {
            Ok(t)
        }
        _ => Err(format!(
            "`{s}` is not an origin such as https://app.example.com or http://localhost:3000 (scheme and host, no path)"
        )),
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl ServerConfig {
    /// How long a browser may cache a CORS preflight answer:
    /// `DUCKGATE_CORS_MAX_AGE_MS`, else the deprecated
    /// `DUCKGATE_CORS_MAX_AGE_SECS`, else 10 minutes.
    pub fn cors_max_age(&self) -> Duration {
        match (self.cors_max_age_ms, self.cors_max_age_secs) {
            (Some(ms), _) => Duration::from_millis(ms),
            (None, Some(secs)) => Duration::from_secs(secs),
            (None, None) => Duration::from_secs(600),
        }
    }
}

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

/// Per-request limits.
#[derive(Debug, Clone, Args)]
pub struct LimitsConfig {
    /// Time limit of a query that does not ask for one [default: 30000, or the
    /// maximum if that is lower].
    #[arg(long, env = "DUCKGATE_QUERY_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub query_timeout_ms: Option<u64>,

    /// Largest time limit a query may ask for; `timeout_ms` is clamped to it.
    #[arg(long, env = "DUCKGATE_MAX_QUERY_TIMEOUT_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(1..=86_400_000))]
    pub max_query_timeout_ms: u64,

    /// Row cap of a `/query` answer that does not ask for a limit [default:
    /// DUCKGATE_MAX_ROWS]. A result past it fails (never a silent cut): a
    /// problem document, or a body that ends in an error its reader sees.
    #[arg(long, env = "DUCKGATE_DEFAULT_MAX_ROWS", value_parser = clap::value_parser!(u64).range(1..))]
    pub default_max_rows: Option<u64>,

    /// Largest row limit a request may ask for; `max_rows` is clamped to it.
    #[arg(long, env = "DUCKGATE_MAX_ROWS", default_value_t = 100_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_rows: u64,

    /// Largest encoded `/query` answer; a result past it fails (a problem
    /// document, or a body that ends in an error its reader sees), never a
    /// silent cut.
    #[arg(long, env = "DUCKGATE_MAX_RESULT_BYTES", default_value_t = 4 << 30, value_parser = bytes_between(1024, u64::MAX))]
    pub max_result_bytes: u64,

    /// Largest single value (a string or blob, or a one-row result) the
    /// gateway encodes; a larger one fails the query with 422 before it is
    /// buffered.
    #[arg(long, env = "DUCKGATE_MAX_VALUE_BYTES", default_value_t = 64 << 20, value_parser = bytes_between(1024, u64::MAX))]
    pub max_value_bytes: u64,

    /// How much of a running query's SQL `GET /queries` shows (bytes).
    #[arg(long, env = "DUCKGATE_LISTED_SQL_BYTES", default_value_t = 4096, value_parser = bytes_between(0, 1 << 20))]
    pub listed_sql_bytes: u64,

    /// Also append one JSON line per ended query (the audit record) to this
    /// file, created if missing. Unset: audit records go to the log only.
    #[arg(long, env = "DUCKGATE_AUDIT_LOG")]
    pub audit_log: Option<std::path::PathBuf>,

    /// Largest request body.
    #[arg(long, env = "DUCKGATE_MAX_BODY_BYTES", default_value_t = 1 << 20, value_parser = bytes_between(64, 1 << 30))]
    pub max_body_bytes: u64,

    /// Longest SQL text, in bytes.
    #[arg(long, env = "DUCKGATE_MAX_SQL_BYTES", default_value_t = 256 * 1024, value_parser = bytes_between(16, 1 << 30))]
    pub max_sql_bytes: u64,

    /// How long a client may accept no bytes of a streamed answer before it
    /// is cut off and its query interrupted (its connection goes back).
    #[arg(long, env = "DUCKGATE_SEND_STALL_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub send_stall_timeout_ms: u64,

    /// How long a client may take to send a request's headers (then the
    /// connection is closed), and how long an idle keep-alive connection
    /// stays open.
    #[arg(long, env = "DUCKGATE_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=600_000))]
    pub header_read_timeout_ms: u64,

    /// How long a client may take to send a request body (then 408).
    #[arg(long, env = "DUCKGATE_BODY_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub body_read_timeout_ms: u64,

    /// Open client connections at most; more wait in the listen backlog.
    #[arg(long, env = "DUCKGATE_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,

    /// Requests served at once (all routes); more are shed with 503.
    #[arg(long, env = "DUCKGATE_MAX_CONCURRENT_REQUESTS", default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_concurrent_requests: u64,
}

/// Who may call what. Tokens are `SecretString`s: Debug redacts them.
#[derive(Debug, Clone, Args)]
pub struct AuthConfig {
    /// Comma-separated bearer tokens that may call `/query`. Empty (and no
    /// DUCKGATE_OIDC_ISSUER): anonymous queries, allowed only on a loopback
    /// address unless `--allow-anonymous`.
    #[arg(
        long,
        env = "DUCKGATE_QUERY_TOKENS",
        hide_env_values = true,
        value_delimiter = ',',
        value_parser = s3::parse_secret
    )]
    pub query_tokens: Vec<SecretString>,

    /// File with one query token per line (blank lines and `#` comments
    /// skipped); read again on SIGHUP or when it changes.
    #[arg(long, env = "DUCKGATE_QUERY_TOKENS_FILE")]
    pub query_tokens_file: Option<PathBuf>,

    /// Bearer token for `/admin/...`. Unset: the admin API is off.
    #[arg(long, env = "DUCKGATE_ADMIN_TOKEN", hide_env_values = true, value_parser = s3::parse_secret)]
    pub admin_token: Option<SecretString>,

    /// File holding the admin token (instead of DUCKGATE_ADMIN_TOKEN); read
    /// again on SIGHUP or when it changes.
    #[arg(
        long,
        env = "DUCKGATE_ADMIN_TOKEN_FILE",
        conflicts_with = "admin_token"
    )]
    pub admin_token_file: Option<PathBuf>,

    /// File holding the key (at least 32 bytes) that signs result URLs
    /// (`POST /statements/{id}/links`); every replica needs the same one.
    /// Unset: a random key per process, so signed URLs hold on that
    /// process only.
    #[arg(long, env = "DUCKGATE_URL_SIGNING_KEY_FILE")]
    pub url_signing_key_file: Option<PathBuf>,

    /// Allow anonymous queries on a non-loopback address.
    #[arg(long, env = "DUCKGATE_ALLOW_ANONYMOUS", default_value_t = false)]
    pub allow_anonymous: bool,

    /// Bearer JWTs of an OIDC issuer as identities.
    #[command(flatten)]
    pub oidc: oidc::OidcConfig,
}

impl StatementsConfig {
    /// The shared state's connection string, from DUCKGATE_STATE_DSN or its
    /// file; `None`: this process alone.
    pub fn state_dsn(&self) -> Result<Option<SecretString>, ConfigError> {
        match (&self.state_dsn, &self.state_dsn_file) {
            (Some(dsn), _) => Ok(Some(dsn.clone())),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError::new(
                        "DUCKGATE_STATE_DSN_FILE",
                        format!("cannot read {}: {}", path.display(), e.kind()),
                    )
                })?;
                Ok(Some(SecretString::from(text.trim().to_string())))
            }
            (None, None) => Ok(None),
        }
    }
}

impl LimitsConfig {
    /// The time limit of a query that asks for none.
    pub fn default_query_timeout_ms(&self) -> u64 {
        self.query_timeout_ms
            .unwrap_or(30_000)
            .min(self.max_query_timeout_ms)
    }

    /// The row limit of a result that asks for none.
    pub fn default_rows(&self) -> u64 {
        self.default_max_rows
            .unwrap_or(self.max_rows)
            .min(self.max_rows)
    }

    /// The time limit of a query whose client asked for `asked` ms: that,
    /// clamped to `DUCKGATE_MAX_QUERY_TIMEOUT_MS`; none asked, the default.
    pub fn query_timeout_ms(&self, asked: Option<u64>) -> u64 {
        asked.map_or(self.default_query_timeout_ms(), |t| {
            t.min(self.max_query_timeout_ms)
        })
    }

    /// The row limit of a result whose client asked for `asked` rows, and
    /// whether a cut there is the client's (a clean end) rather than the
    /// server's cap (an error: see `QueryJob::rows_asked`).
    pub fn rows(&self, asked: Option<u64>) -> (u64, bool) {
        (
            asked.map_or(self.default_rows(), |r| r.min(self.max_rows)),
            asked.is_some_and(|r| r <= self.max_rows),
        )
    }
}

/// A configuration that cannot run: the message names the setting.
#[derive(Debug, thiserror::Error)]
#[error("{setting}: {message}")]
pub struct ConfigError {
    /// The setting at fault, by its environment variable.
    pub setting: &'static str,
    /// What is wrong with it.
    pub message: String,
}

impl ConfigError {
    /// An error about `setting`.
    pub fn new(setting: &'static str, message: impl Into<String>) -> Self {
        Self {
            setting,
            message: message.into(),
        }
    }
}

/// The TOML file named by `DUCKGATE_CONFIG`, read once.
#[derive(Debug)]
pub struct ConfigFile {
    path: PathBuf,
    text: String,
}

impl ConfigFile {
    /// Reads `path`; the error names it.
    pub fn read(path: &std::path::Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(
                "DUCKGATE_CONFIG",
                format!("cannot read {}: {e}", path.display()),
            )
        })?;
        Ok(Self {
            path: path.to_path_buf(),
            text,
        })
    }

    /// The file as `T` (each part of the configuration reads its tables).
    /// An error names the file, then the line and column where the parser
    /// or the table's type stopped (from the toml crate's span), never the
    /// line's text, which may hold a value.
    pub fn parse<T: serde::de::DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::from_str(&self.text).map_err(|e| {
            let at = e
                .span()
                .map(|span| {
                    let (line, column) = line_and_column(&self.text, span.start);
                    format!(", line {line}, column {column}")
                })
                .unwrap_or_default();
            ConfigError::new(
                "DUCKGATE_CONFIG",
                format!("{}{at}: {}", self.path.display(), e.message()),
            )
        })
    }
}

/// The 1-based line and column (in characters) of byte `offset` of `text`.
fn line_and_column(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[start..].chars().count() + 1)
}

/// The configuration start-up runs on ([`Config::resolve`]).
#[derive(Debug)]
pub struct Resolved {
    /// Every setting.
    pub config: std::sync::Arc<Config>,
    /// Every S3 secret, with the prefixes the gateway itself writes.
    pub secrets: Vec<s3::SecretSpec>,
    /// The declared catalogs.
    pub catalogs: Vec<attach::AttachSpec>,
    /// When credentials are refreshed.
    pub timing: s3::RotationTiming,
    /// The largest time limit of an async statement.
    pub max_statement_timeout: Duration,
    /// The shared state's connection string, if replicas share state.
    pub state_dsn: Option<SecretString>,
    /// The number of pooled connections.
    pub pool_size: usize,
    /// Bearer JWTs of an OIDC issuer, when `DUCKGATE_OIDC_ISSUER` is set.
    pub oidc: Option<oidc::OidcSettings>,
    /// The roles of the TOML file (`[[role]]`).
    pub roles: Vec<roles::RoleSpec>,
}

impl Config {
    /// Checks what clap's per-field parsers cannot: relations between settings.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
        if let Some(t) = l.query_timeout_ms.filter(|&t| t > l.max_query_timeout_ms) {
            return Err(ConfigError::new(
                "DUCKGATE_QUERY_TIMEOUT_MS",
                format!(
                    "default query timeout {t} ms exceeds DUCKGATE_MAX_QUERY_TIMEOUT_MS {} ms",
                    l.max_query_timeout_ms
                ),
            ));
        }
        if let Some(r) = l.default_max_rows.filter(|&r| r > l.max_rows) {
            return Err(ConfigError::new(
                "DUCKGATE_DEFAULT_MAX_ROWS",
                format!(
                    "default row limit {r} exceeds DUCKGATE_MAX_ROWS {}",
                    l.max_rows
                ),
            ));
        }
        if l.max_sql_bytes > l.max_body_bytes {
            return Err(ConfigError::new(
                "DUCKGATE_MAX_SQL_BYTES",
                format!(
                    "SQL limit {} bytes exceeds DUCKGATE_MAX_BODY_BYTES {}",
                    l.max_sql_bytes, l.max_body_bytes
                ),
            ));
        }
        if self
            .auth
            .admin_token
            .as_ref()
            .is_some_and(|t| t.expose_secret().trim().len() < 16)
        {
            return Err(ConfigError::new(
                "DUCKGATE_ADMIN_TOKEN",
                "must be at least 16 characters",
            ));
        }
        let shared_state =
            self.statements.state_dsn.is_some() || self.statements.state_dsn_file.is_some();
        if self.statements.state_ca_file.is_some() && !shared_state {
            return Err(ConfigError::new(
                "DUCKGATE_STATE_CA_FILE",
                "trusts CAs for the shared state's TLS, and DUCKGATE_STATE_DSN is not set",
            ));
        }
        if let Some(url) = &self.statements.spool_url {
            if url.starts_with("s3://") {
                if !shared_state {
                    return Err(ConfigError::new(
                        "DUCKGATE_SPOOL_URL",
                        "an S3 spool serves other replicas, which find its results through DUCKGATE_STATE_DSN: set it too",
                    ));
                }
                if !url.ends_with('/') || url.len() <= "s3://".len() + 1 {
                    return Err(ConfigError::new(
                        "DUCKGATE_SPOOL_URL",
                        "an S3 spool is a prefix ending in `/`, such as s3://bucket/duckgate-spool/",
                    ));
                }
            } else if url.contains("://") {
                return Err(ConfigError::new(
                    "DUCKGATE_SPOOL_URL",
                    "a spool is a local directory or an s3:// prefix",
                ));
            }
        }
        if self.statements.spool_statement_bytes > self.statements.spool_bytes {
            return Err(ConfigError::new(
                "DUCKGATE_SPOOL_STATEMENT_BYTES",
                "exceeds DUCKGATE_SPOOL_BYTES",
            ));
        }
        if let Some(t) = self
            .statements
            .max_statement_timeout_ms
            .filter(|&t| t < l.max_query_timeout_ms)
        {
            return Err(ConfigError::new(
                "DUCKGATE_MAX_STATEMENT_TIMEOUT_MS",
                format!(
                    "{t} ms is below DUCKGATE_MAX_QUERY_TIMEOUT_MS {} ms",
                    l.max_query_timeout_ms
                ),
            ));
        }
        Ok(())
    }

    /// The configuration resolved once: the flags checked ([`Config::validate`]),
    /// the TOML file read once, its secrets and catalogs checked against
    /// each other and the time limits, and what start-up derives from them
    /// computed here, so no later step reads a file or re-derives a value.
    pub fn resolve(self) -> Result<Resolved, ConfigError> {
        self.validate()?;
        if self.server.cors_max_age_secs.is_some() {
            tracing::warn!(
                setting = "DUCKGATE_CORS_MAX_AGE_SECS",
                instead = "DUCKGATE_CORS_MAX_AGE_MS",
                ignored = self.server.cors_max_age_ms.is_some(),
                "a deprecated setting is set; name it in milliseconds instead"
            );
        }
        let file = match &self.s3.config_file {
            Some(path) => Some(ConfigFile::read(path)?),
            None => None,
        };
        let mut secrets = self.s3.secrets_in(file.as_ref())?;
        let catalogs = match &file {
            Some(f) => attach::catalogs_in(f, &secrets)?,
            None => Vec::new(),
        };
        let roles = match &file {
            Some(f) => roles::roles_in(f)?,
            None => Vec::new(),
        };
        let max_statement_timeout = self.statement_limit(&secrets);
        let longest = self.max_query_timeout().max(max_statement_timeout);
        self.s3.validate(
            &secrets,
            longest,
            self.statements.max_statement_timeout_ms.is_some(),
        )?;
        // What the gateway writes to S3 itself: the data of catalogs
        // declared read-write, and the shared result spool when it is on
        // S3. Each secret's STS session policy allows writes there only.
        let writes: Vec<String> = catalogs
            .iter()
            .filter(|c| !c.read_only)
            .flat_map(|c| c.s3_locations().into_iter().map(str::to_string))
            .chain(self.s3_spool().map(str::to_string))
            .collect();
        for secret in &mut secrets {
            secret.write_scope = writes.clone();
        }
        let state_dsn = self.statements.state_dsn()?;
        let oidc = self.auth.oidc.resolve()?;
        Ok(Resolved {
            oidc,
            roles,
            timing: self.s3.timing(longest),
            secrets,
            catalogs,
            max_statement_timeout,
            state_dsn,
            pool_size: self.pool_size(),
            config: std::sync::Arc::new(self),
        })
    }

    /// The spool's URL when it is on S3.
    pub fn s3_spool(&self) -> Option<&str> {
        self.statements
            .spool_url
            .as_deref()
            .filter(|u| u.starts_with("s3://"))
    }

    /// The number of pooled connections: the setting, else the number of
    /// cores (2 if that is unknown).
    pub fn pool_size(&self) -> usize {
        self.engine
            .pool_size
            .map(|n| n as usize)
            .unwrap_or_else(|| {
                std::thread::available_parallelism()
                    .map(|n| n.get())
                    .unwrap_or(2)
            })
    }

    /// How long a request waits for a pooled connection.
    pub fn acquire_timeout(&self) -> Duration {
        Duration::from_millis(self.engine.acquire_timeout_ms)
    }

    /// The largest time limit a query may ask for.
    pub fn max_query_timeout(&self) -> Duration {
        Duration::from_millis(self.limits.max_query_timeout_ms)
    }

    /// The largest time limit of an async statement: the setting, else an
    /// hour or what the shortest STS session covers (80% of it minus the
    /// refresh lead), whichever is less, never below the query maximum.
    fn statement_limit(&self, secrets: &[s3::SecretSpec]) -> Duration {
        if let Some(ms) = self.statements.max_statement_timeout_ms {
            return Duration::from_millis(ms);
        }
        let mut limit = Duration::from_secs(3600);
        let timing = self.s3.timing(self.max_query_timeout());
        if timing.enabled {
            for s in secrets {
                if let Some(lifetime) = s.source.duration() {
                    let covered = Duration::from_millis(lifetime.as_millis() as u64 * 4 / 5);
                    limit = limit.min(covered.saturating_sub(timing.lead));
                }
            }
        }
        limit.max(self.max_query_timeout())
    }

    /// The database path, or `None` for an in-memory database.
    pub fn database_path(&self) -> Option<&std::path::Path> {
        self.engine
            .database
            .as_deref()
            .filter(|p| !p.as_os_str().is_empty() && p.as_os_str() != ":memory:")
    }
}

/// The `DUCKGATE_*` names among `vars` that no argument of `cli` (or of its
/// subcommands) reads from the environment, each with the known name
/// closest to it when one is near (a typo: `DUCKGATE_POOLSIZE`). Compared
/// with clap's own model of the command, so a new setting is known the
/// moment it is declared.
pub fn unknown_env_settings(
    cli: &clap::Command,
    vars: impl IntoIterator<Item = String>,
) -> Vec<(String, Option<String>)> {
    let known: std::collections::BTreeSet<String> = std::iter::once(cli)
        .chain(cli.get_subcommands())
        .flat_map(|c| c.get_arguments())
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    let mut unknown: Vec<(String, Option<String>)> = vars
        .into_iter()
        .filter(|v| v.starts_with("DUCKGATE_") && !known.contains(v))
        .map(|v| {
            let near = known
                .iter()
                .map(|k| (strsim::levenshtein(k, &v), k))
                .filter(|(d, _)| *d <= 3)
                .min()
                .map(|(_, k)| k.clone());
            (v, near)
        })
        .collect();
    unknown.sort();
    unknown
}

/// Accepts DuckDB byte sizes such as `512MB`, `4GB`, `2GiB`, `80%`.
/// A byte size setting (`50MB`, `2GiB`) in bytes; `None` for percentages.
pub fn byte_size(s: &str) -> Option<u64> {
    let t = s.trim();
    let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == '%' || c == ' ');
    let n: f64 = digits
        .parse()
        .ok()
        .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
    let unit = t[digits.len()..].trim().to_ascii_lowercase();
    let scale: f64 = match unit.as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return None,
    };
    Some((n * scale) as u64)
}

/// DuckDB's own byte settings (`DUCKGATE_MEMORY_LIMIT`,
/// `DUCKGATE_MAX_TEMP_DIRECTORY_SIZE`): a byte size [`byte_size`] reads,
/// or a percentage; kept as written, for DuckDB.
fn parse_byte_size_setting(s: &str) -> Result<String, String> {
    let t = s.trim();
    let ok = match t.strip_suffix('%') {
        Some(n) => n.trim().parse::<f64>().is_ok_and(|n| n >= 0.0),
        None => byte_size(t).is_some(),
    };
    if ok
        && t.chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '.')
    {
        Ok(t.to_string())
    } else {
        Err(format!(
            "`{s}` is not a byte size such as 512MB, 4GB or 2GiB"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_sizes() {
        assert!(parse_byte_size_setting("4GB").is_ok());
        assert!(parse_byte_size_setting("512 MiB").is_ok());
        assert!(parse_byte_size_setting("75%").is_ok());
        assert!(parse_byte_size_setting("lots").is_err());
        assert!(parse_byte_size_setting("4GB'; DROP").is_err());
        assert!(parse_byte_size_setting("").is_err());
        assert_eq!(byte_size("50MB"), Some(50_000_000));
        assert_eq!(byte_size("2 GiB"), Some(2 << 30));
        assert_eq!(byte_size("75%"), None);
        assert_eq!(byte_size("-5"), None);
    }

    #[test]
    fn every_byte_setting_takes_a_count_or_a_size() {
        let max_body = bytes_between(64, 1 << 30);
        assert_eq!(max_body("4096"), Ok(4096));
        assert_eq!(max_body("4KiB"), Ok(4096));
        assert_eq!(max_body("1MB"), Ok(1_000_000));
        assert!(max_body("32").is_err());
        assert!(max_body("2GiB").is_err());
        assert!(max_body("-1").is_err());
        assert!(max_body("lots").is_err());
        assert_eq!(parse_compression_min_bytes("1KiB"), Ok(1024));
        assert!(parse_compression_min_bytes("1MB").is_err());
        let cli = Cli::try_parse_from([
            "duckgate",
            "--max-value-bytes",
            "100KB",
            "--spool-bytes",
            "1073741824",
        ])
        .unwrap();
        assert_eq!(cli.config.limits.max_value_bytes, 100_000);
        assert_eq!(cli.config.statements.spool_bytes, 1 << 30);
    }

    #[test]
    fn the_cors_max_age_is_in_milliseconds_and_the_seconds_name_still_works() {
        let age = |args: &[&str]| {
            let mut all = vec!["duckgate"];
            all.extend_from_slice(args);
            Cli::try_parse_from(all)
                .unwrap()
                .config
                .server
                .cors_max_age()
        };
        assert_eq!(age(&[]), Duration::from_secs(600));
        assert_eq!(
            age(&["--cors-max-age-ms", "90000"]),
            Duration::from_secs(90)
        );
        assert_eq!(
            age(&["--cors-max-age-secs", "120"]),
            Duration::from_secs(120)
        );
        assert_eq!(
            age(&["--cors-max-age-secs", "120", "--cors-max-age-ms", "5000"]),
            Duration::from_secs(5)
        );
    }

    #[test]
    fn defaults_validate() {
        let cli = Cli::try_parse_from(["duckgate"]).unwrap();
        cli.config.validate().unwrap();
        assert_eq!(cli.config.server.listen.to_string(), "127.0.0.1:8080");
    }

    #[test]
    fn cors_origins_are_origins() {
        assert_eq!(
            parse_origin(" HTTPS://App.Example.com/ ").unwrap(),
            "https://app.example.com"
        );
        assert_eq!(
            parse_origin("http://localhost:3000").unwrap(),
            "http://localhost:3000"
        );
        assert_eq!(parse_origin("*").unwrap(), "*");
        assert!(parse_origin("app.example.com").is_err());
        assert!(parse_origin("https://app.example.com/path").is_err());
        assert!(parse_origin("ftp://x").is_err());
        let cli = Cli::try_parse_from([
            "duckgate",
            "--cors-origins",
            "https://a.example,http://localhost:3000",
        ])
        .unwrap();
        assert_eq!(cli.config.server.cors_origins.len(), 2);
    }

    #[test]
    fn a_mistyped_variable_is_found_with_the_setting_it_meant() {
        use clap::CommandFactory;
        let vars = [
            "DUCKGATE_POOLSIZE",
            "DUCKGATE_POOL_SIZE",
            "DUCKGATE_OIDC_ISUER",
            "DUCKGATE_NOTHING_LIKE_ANY_SETTING",
            "HOME",
            "duckgate_pool_size",
        ]
        .map(String::from);
        let unknown = unknown_env_settings(&Cli::command(), vars);
        assert_eq!(
            unknown,
            [
                ("DUCKGATE_NOTHING_LIKE_ANY_SETTING".to_string(), None),
                (
                    "DUCKGATE_OIDC_ISUER".to_string(),
                    Some("DUCKGATE_OIDC_ISSUER".to_string())
                ),
                (
                    "DUCKGATE_POOLSIZE".to_string(),
                    Some("DUCKGATE_POOL_SIZE".to_string())
                ),
            ]
        );
    }

    #[test]
    fn a_bad_toml_file_is_named_with_its_line_and_column() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Source {
            name: String,
            paths: Vec<String>,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct File {
            source: Vec<Source>,
        }
        let file = |text: &str| ConfigFile {
            path: PathBuf::from("/etc/duckgate.toml"),
            text: text.to_string(),
        };
        // A value of the wrong type, on line 3 after a multi-byte name.
        let e = file("[[source]]\nname = \"événements\"\npaths = 5\n")
            .parse::<File>()
            .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_CONFIG");
        assert!(
            e.message
                .starts_with("/etc/duckgate.toml, line 3, column 9: "),
            "{e}"
        );
        // A syntax error: columns count characters, not bytes.
        let e = file("[[source]]\nname = \"é\" x\n")
            .parse::<File>()
            .unwrap_err();
        assert!(
            e.message
                .starts_with("/etc/duckgate.toml, line 2, column 12: "),
            "{e}"
        );
        assert_eq!(line_and_column("a\nbc", 4), (2, 3));
        assert_eq!(line_and_column("", 0), (1, 1));
    }

    #[test]
    fn timeout_relation_is_checked() {
        let cli = Cli::try_parse_from([
            "duckgate",
            "--query-timeout-ms",
            "10",
            "--max-query-timeout-ms",
            "5",
        ])
        .unwrap();
        let err = cli.config.validate().unwrap_err();
        assert_eq!(err.setting, "DUCKGATE_QUERY_TIMEOUT_MS");
    }
}
