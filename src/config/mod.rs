//! Every setting, with its default and its validation.
//!
//! One `clap` struct, nested by concern, each field settable by flag or by a
//! `DUCKGATE_*` environment variable. Limits are fields, never constants.

use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use secrecy::{ExposeSecret, SecretString};

pub mod attach;
mod auth;
mod engine;
mod file;
pub mod grants;
mod limits;
pub mod oidc;
pub mod reference;
pub mod roles;
pub mod s3;
mod server;
mod sizes;
pub mod sources;
mod statements;

pub use auth::AuthConfig;
pub use engine::{EngineConfig, Policy};
pub use file::{ConfigError, ConfigFile};
pub use limits::LimitsConfig;
use s3::S3Settings;
pub use server::{LogFormat, ServerConfig};
pub use sizes::byte_size;
pub use statements::StatementsConfig;

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
    /// Print the settings reference (docs/configuration.md) and exit.
    #[command(hide = true)]
    SettingsDoc,
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
        self.validate_limits()?;
        self.validate_admin_token()?;
        self.validate_shared_state()?;
        self.validate_statement_limits()
    }

    /// The defaults of a request's limits within their maxima, the SQL
    /// within the body.
    fn validate_limits(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// The admin token long enough to resist guessing.
    fn validate_admin_token(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// The settings that need the shared state (its CA file, an S3 spool)
    /// given with it, and the spool's URL one the gateway can use.
    fn validate_shared_state(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// A statement's spool within the whole spool, its time limit no
    /// shorter than a query's.
    fn validate_statement_limits(&self) -> Result<(), ConfigError> {
        let l = &self.limits;
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

#[cfg(test)]
mod tests {
    use super::server::{parse_compression_min_bytes, parse_origin};
    use super::sizes::{bytes_between, parse_byte_size_setting};
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
