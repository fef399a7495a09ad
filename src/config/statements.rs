//! Async statements (`POST /statements`), their result spool and the state replicas share.

use std::path::PathBuf;

use clap::Args;
use secrecy::SecretString;

use super::sizes::bytes_between;
use super::{s3, ConfigError};

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
