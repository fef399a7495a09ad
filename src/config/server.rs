//! Where and how the HTTP server (and the other listeners) listen.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, ValueEnum};

use super::sizes::bytes_between;

/// `DUCKGATE_COMPRESSION_MIN_BYTES`: a byte setting of at most 65535.
pub(super) fn parse_compression_min_bytes(s: &str) -> Result<u16, String> {
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
pub(super) fn parse_origin(s: &str) -> Result<String, String> {
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
