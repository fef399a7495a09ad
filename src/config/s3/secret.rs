//! The S3 secrets as start-up resolves them: where their credentials come
//! from, their scope and the rotation timing, checked one by one.

use std::path::PathBuf;
use std::time::Duration;

use secrecy::SecretString;

use super::super::ConfigError;

/// Where a secret's credentials come from.
#[derive(Clone)]
pub enum SourceSpec {
    /// STS AssumeRole, signed with base credentials from a file or, without
    /// one, from the standard AWS chain.
    AssumeRole {
        /// The role to assume.
        role_arn: String,
        /// The session name sent to STS.
        session_name: String,
        /// The external id sent to STS, if any.
        external_id: Option<String>,
        /// The session lifetime asked of STS.
        duration: Duration,
        /// The file holding the base credentials; `None` means the standard
        /// AWS chain.
        base_credentials: Option<BaseCredentials>,
    },
    /// STS AssumeRoleWithWebIdentity with a token file re-read each time.
    WebIdentity {
        /// The role to assume.
        role_arn: String,
        /// The session name sent to STS.
        session_name: String,
        /// The file holding the web identity token.
        token_file: PathBuf,
        /// The session lifetime asked of STS.
        duration: Duration,
    },
    /// Fixed credentials.
    Static {
        /// The access key id.
        key_id: String,
        /// The secret access key.
        secret: SecretString,
        /// The session token, if any.
        session_token: Option<SecretString>,
    },
}

/// Base credentials for STS AssumeRole from a file in the AWS
/// shared-credentials format, read by the AWS SDK's profile-file provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseCredentials {
    /// The file (its path may be logged; its content never is).
    pub file: PathBuf,
    /// The profile in it.
    pub profile: String,
    /// The setting that named the file, for messages about it.
    pub setting: String,
}

/// The profile read from a base credentials file when none is named.
pub const DEFAULT_BASE_PROFILE: &str = "default";

impl std::fmt::Debug for SourceSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.kind())
    }
}

impl SourceSpec {
    /// The source's name: `assume-role`, `web-identity` or `static`.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceSpec::AssumeRole { .. } => "assume-role",
            SourceSpec::WebIdentity { .. } => "web-identity",
            SourceSpec::Static { .. } => "static",
        }
    }

    /// The session lifetime asked of STS; `None` for static credentials.
    pub fn duration(&self) -> Option<Duration> {
        match self {
            SourceSpec::AssumeRole { duration, .. } | SourceSpec::WebIdentity { duration, .. } => {
                Some(*duration)
            }
            SourceSpec::Static { .. } => None,
        }
    }
}

/// One S3 secret the gateway installs into DuckDB.
#[derive(Debug, Clone)]
pub struct SecretSpec {
    /// DuckDB secret name (an identifier: letters, digits, `_`).
    pub name: String,
    /// Where its credentials come from.
    pub source: SourceSpec,
    /// AWS region of the bucket(s).
    pub region: String,
    /// S3 endpoint DuckDB talks to, `host:port`; `None` means AWS.
    pub endpoint: Option<String>,
    /// `vhost` or `path`; `None` leaves DuckDB's default.
    pub url_style: Option<String>,
    /// Whether DuckDB reaches S3 over TLS.
    pub use_ssl: bool,
    /// Prefixes such as `s3://bucket/`; empty means every S3 path.
    pub scope: Vec<String>,
    /// STS endpoint URL; `None` means AWS.
    pub sts_endpoint: Option<String>,
    /// Prefixes the gateway itself writes with these credentials (the data
    /// of read-write catalogs, the shared spool); clients never write to S3.
    /// Set at start from the rest of the configuration.
    pub write_scope: Vec<String>,
}

/// The rotator's timing settings.
#[derive(Debug, Clone, Copy)]
pub struct RotationTiming {
    /// Whether credentials are refreshed before they expire.
    pub enabled: bool,
    /// Extra time the credentials must outlive the longest query when refreshed.
    pub lead: Duration,
    /// How often the rotator wakes to check lifetimes.
    pub check_interval: Duration,
    /// The longest time limit a query or statement may run under.
    pub max_query_timeout: Duration,
}

impl RotationTiming {
    /// Refresh once the remaining lifetime falls below this: the larger of 20%
    /// of the lifetime and the longest query plus the lead, so a query that
    /// starts just before the refresh still finishes on valid credentials.
    pub fn refresh_threshold(&self, lifetime: Duration) -> Duration {
        (lifetime / 5).max(self.max_query_timeout + self.lead)
    }
}

pub(super) fn check_secret(s: &SecretSpec) -> Result<(), ConfigError> {
    let valid_name = !s.name.is_empty()
        && s.name.len() <= 64
        && s.name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !s.name.starts_with(|c: char| c.is_ascii_digit());
    if !valid_name {
        return Err(ConfigError::new(
            "DUCKGATE_S3_SECRET_NAME",
            format!("`{}` is not a valid secret name (letters, digits and _, not starting with a digit)", s.name),
        ));
    }
    if let Some(style) = &s.url_style {
        if style != "path" && style != "vhost" {
            return Err(ConfigError::new(
                "DUCKGATE_S3_URL_STYLE",
                format!("`{style}` must be `path` or `vhost`"),
            ));
        }
    }
    for prefix in &s.scope {
        if !(prefix.starts_with("s3://") && prefix.len() > 5) {
            return Err(ConfigError::new(
                "DUCKGATE_S3_SCOPE",
                format!("`{prefix}` is not an S3 prefix such as s3://bucket/"),
            ));
        }
    }
    if let Some(ep) = &s.endpoint {
        if ep.contains("://") || ep.contains('/') || ep.is_empty() {
            return Err(ConfigError::new(
                "DUCKGATE_S3_ENDPOINT",
                format!("`{ep}` must be host:port without a scheme"),
            ));
        }
    }
    Ok(())
}
