//! Who may call what: query and admin tokens, signing key, anonymous access, OIDC.

use std::path::PathBuf;

use clap::Args;
use secrecy::SecretString;

use super::{oidc, s3};

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
