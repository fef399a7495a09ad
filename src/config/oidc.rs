//! The OIDC settings: bearer JWTs of one issuer, checked against its keys
//! (JWKS), as identities beside the static query tokens. Off unless
//! `DUCKGATE_OIDC_ISSUER` is set; [`OidcConfig::resolve`] checks them once.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use jsonwebtoken::Algorithm;

use super::ConfigError;

/// Bearer JWTs of an OIDC issuer as identities (`src/identity/oidc.rs`).
#[derive(Debug, Clone, Args)]
pub struct OidcConfig {
    /// The OIDC issuer whose JWTs are accepted as identities, exactly as
    /// its tokens' `iss` says (e.g. `https://login.example.com/realms/data`).
    /// Unset: OIDC is off and only the static tokens authenticate.
    #[arg(long, env = "DUCKGATE_OIDC_ISSUER")]
    pub oidc_issuer: Option<String>,

    /// The audiences this gateway answers to, comma-separated: a token's
    /// `aud` must name one of them. Required with DUCKGATE_OIDC_ISSUER (a
    /// token the issuer made for another application is refused).
    #[arg(long, env = "DUCKGATE_OIDC_AUDIENCE", value_delimiter = ',')]
    pub oidc_audience: Vec<String>,

    /// Where the issuer's signing keys (a JWKS) are fetched: an `https://`
    /// URL (plain `http://` only to a loopback host). Default: the
    /// `jwks_uri` of the issuer's `/.well-known/openid-configuration`.
    #[arg(
        long,
        env = "DUCKGATE_OIDC_JWKS_URL",
        conflicts_with = "oidc_jwks_file"
    )]
    pub oidc_jwks_url: Option<String>,

    /// A file holding the issuer's JWKS instead of a URL; read again on
    /// every refresh, so replacing it rotates the keys.
    #[arg(long, env = "DUCKGATE_OIDC_JWKS_FILE")]
    pub oidc_jwks_file: Option<PathBuf>,

    /// The signature algorithms a token may use, comma-separated, from
    /// RS256, RS384, RS512, PS256, PS384, PS512, ES256, ES384, EdDSA. Never
    /// `none` and never HS256/HS384/HS512 (a shared secret is not a key a
    /// JWKS can publish): start-up refuses them.
    #[arg(
        long,
        env = "DUCKGATE_OIDC_ALGORITHMS",
        value_delimiter = ',',
        default_value = "RS256,ES256"
    )]
    pub oidc_algorithms: Vec<String>,

    /// How far `exp` and `nbf` may be off the gateway's clock (clock skew
    /// between the issuer and the gateway).
    #[arg(long, env = "DUCKGATE_OIDC_LEEWAY_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub oidc_leeway_ms: u64,

    /// The claim that lists the identity's roles: a JSON array of strings
    /// or a space-separated string. A name with dots that is no top-level
    /// claim is a path (`realm_access.roles`). Absent from a token: no roles.
    #[arg(long, env = "DUCKGATE_OIDC_ROLES_CLAIM", default_value = "roles")]
    pub oidc_roles_claim: String,

    /// The claim that names the identity (a string). Lists, logs, audit
    /// lines and statement ownership show it as `oidc:<value>`, so it never
    /// equals a static token's name.
    #[arg(long, env = "DUCKGATE_OIDC_NAME_CLAIM", default_value = "sub")]
    pub oidc_name_claim: String,

    /// How often the issuer's keys are fetched again. A token naming a key
    /// (`kid`) the gateway does not know triggers a fetch too, at most once
    /// per DUCKGATE_OIDC_JWKS_COOLDOWN_MS.
    #[arg(long, env = "DUCKGATE_OIDC_JWKS_REFRESH_MS", default_value_t = 300_000, value_parser = clap::value_parser!(u64).range(100..=86_400_000))]
    pub oidc_jwks_refresh_ms: u64,

    /// Keys not fetched again for this long are stale: tokens are still
    /// checked against them (the last good keys), and `/healthz` and
    /// `/readyz` report `degraded` naming the dependency `oidc`. Longer than
    /// DUCKGATE_OIDC_JWKS_REFRESH_MS.
    #[arg(long, env = "DUCKGATE_OIDC_JWKS_STALE_MS", default_value_t = 3_600_000, value_parser = clap::value_parser!(u64).range(200..=604_800_000))]
    pub oidc_jwks_stale_ms: u64,

    /// The least time between two fetches of the keys that tokens with
    /// unknown `kid`s trigger (a flood of made-up `kid`s costs the issuer
    /// one fetch per period); also the first wait before retrying a failed
    /// fetch, doubled after each further failure up to the refresh period.
    #[arg(long, env = "DUCKGATE_OIDC_JWKS_COOLDOWN_MS", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub oidc_jwks_cooldown_ms: u64,

    /// How long one fetch of the keys (or of the discovery document) may
    /// take, connecting included.
    #[arg(long, env = "DUCKGATE_OIDC_JWKS_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(100..=60_000))]
    pub oidc_jwks_timeout_ms: u64,
}

/// Where the issuer's keys come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksLocation {
    /// Fetched from this URL.
    Url(String),
    /// Read from this file.
    File(PathBuf),
    /// The `jwks_uri` of the discovery document at this URL.
    Discovery(String),
}

/// The OIDC settings, checked ([`OidcConfig::resolve`]).
#[derive(Debug, Clone)]
pub struct OidcSettings {
    /// The issuer, as tokens' `iss` must say it.
    pub issuer: String,
    /// A token's `aud` must name one of these.
    pub audiences: Vec<String>,
    /// Where the keys come from.
    pub jwks: JwksLocation,
    /// The algorithms a token may be signed with (never `none`, never HS*).
    pub algorithms: Vec<Algorithm>,
    /// Clock skew allowed on `exp` and `nbf`.
    pub leeway: Duration,
    /// The claim that lists the roles.
    pub roles_claim: String,
    /// The claim that names the identity.
    pub name_claim: String,
    /// How often the keys are fetched again.
    pub refresh: Duration,
    /// Keys older than this are stale.
    pub stale_after: Duration,
    /// The least time between fetches that unknown `kid`s trigger.
    pub cooldown: Duration,
    /// How long one fetch may take.
    pub timeout: Duration,
}

/// The algorithms the gateway verifies, as their names are written.
const ASYMMETRIC: &[(&str, Algorithm)] = &[
    ("RS256", Algorithm::RS256),
    ("RS384", Algorithm::RS384),
    ("RS512", Algorithm::RS512),
    ("PS256", Algorithm::PS256),
    ("PS384", Algorithm::PS384),
    ("PS512", Algorithm::PS512),
    ("ES256", Algorithm::ES256),
    ("ES384", Algorithm::ES384),
    ("EdDSA", Algorithm::EdDSA),
];

/// Checks that `url` is `https://`, or `http://` to a loopback host (keys
/// fetched in clear text from elsewhere could be swapped on the way).
fn check_url(setting: &'static str, url: &str) -> Result<(), ConfigError> {
    let uri: axum::http::Uri = url
        .parse()
        .map_err(|_| ConfigError::new(setting, format!("`{url}` is not a URL")))?;
    let host = uri
        .host()
        .ok_or_else(|| ConfigError::new(setting, format!("`{url}` names no host")))?;
    match uri.scheme_str() {
        Some("https") => Ok(()),
        Some("http") if is_loopback(host) => Ok(()),
        Some("http") => Err(ConfigError::new(
            setting,
            format!(
                "`{url}` is plain http to a host that is not loopback: the issuer's keys must come over https"
            ),
        )),
        _ => Err(ConfigError::new(
            setting,
            format!("`{url}` is not an https:// URL"),
        )),
    }
}

/// Whether `host` (as a URL writes it) is a loopback address or name.
pub fn is_loopback(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The algorithm list of DUCKGATE_OIDC_ALGORITHMS, each checked.
fn algorithms(names: &[String]) -> Result<Vec<Algorithm>, ConfigError> {
    const SETTING: &str = "DUCKGATE_OIDC_ALGORITHMS";
    let mut out = Vec::new();
    for name in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("none") {
            return Err(ConfigError::new(
                SETTING,
                "`none` is never allowed: a token without a signature proves nothing",
            ));
        }
        if name.to_ascii_uppercase().starts_with("HS") {
            return Err(ConfigError::new(
                SETTING,
                format!(
                    "`{name}` is a shared-secret (HMAC) algorithm and is never allowed: keys from a JWKS are public, and with HS* anyone holding them could sign tokens; list asymmetric algorithms (RS256, ES256, ...)"
                ),
            ));
        }
        let Some((_, alg)) = ASYMMETRIC.iter().find(|(n, _)| *n == name) else {
            let known: Vec<&str> = ASYMMETRIC.iter().map(|(n, _)| *n).collect();
            return Err(ConfigError::new(
                SETTING,
                format!(
                    "`{name}` is not an algorithm the gateway verifies ({})",
                    known.join(", ")
                ),
            ));
        };
        if !out.contains(alg) {
            out.push(*alg);
        }
    }
    if out.is_empty() {
        return Err(ConfigError::new(SETTING, "lists no algorithm"));
    }
    Ok(out)
}

impl OidcConfig {
    /// Whether OIDC is on.
    pub fn enabled(&self) -> bool {
        self.oidc_issuer.is_some()
    }

    /// The settings checked, or `None` when OIDC is off. Every error names
    /// its setting.
    pub fn resolve(&self) -> Result<Option<OidcSettings>, ConfigError> {
        let Some(issuer) = self.oidc_issuer.as_deref().map(str::trim) else {
            let orphan = [
                ("DUCKGATE_OIDC_AUDIENCE", !self.oidc_audience.is_empty()),
                ("DUCKGATE_OIDC_JWKS_URL", self.oidc_jwks_url.is_some()),
                ("DUCKGATE_OIDC_JWKS_FILE", self.oidc_jwks_file.is_some()),
            ];
            if let Some((setting, _)) = orphan.iter().find(|(_, set)| *set) {
                return Err(ConfigError::new(
                    setting,
                    "is set but DUCKGATE_OIDC_ISSUER is not: OIDC is off without an issuer",
                ));
            }
            return Ok(None);
        };
        if issuer.is_empty() {
            return Err(ConfigError::new("DUCKGATE_OIDC_ISSUER", "is empty"));
        }
        check_url("DUCKGATE_OIDC_ISSUER", issuer)?;
        let audiences: Vec<String> = self
            .oidc_audience
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty())
            .collect();
        if audiences.is_empty() {
            return Err(ConfigError::new(
                "DUCKGATE_OIDC_AUDIENCE",
                "is required with DUCKGATE_OIDC_ISSUER: without it a token the issuer made for any other application would be accepted",
            ));
        }
        let jwks = match (&self.oidc_jwks_url, &self.oidc_jwks_file) {
            (Some(url), _) => {
                check_url("DUCKGATE_OIDC_JWKS_URL", url.trim())?;
                JwksLocation::Url(url.trim().to_string())
            }
            (None, Some(file)) => JwksLocation::File(file.clone()),
            (None, None) => JwksLocation::Discovery(format!(
                "{}/.well-known/openid-configuration",
                issuer.trim_end_matches('/')
            )),
        };
        let algorithms = algorithms(&self.oidc_algorithms)?;
        for (setting, claim) in [
            ("DUCKGATE_OIDC_ROLES_CLAIM", &self.oidc_roles_claim),
            ("DUCKGATE_OIDC_NAME_CLAIM", &self.oidc_name_claim),
        ] {
            if claim.trim().is_empty() {
                return Err(ConfigError::new(setting, "names no claim"));
            }
        }
        if self.oidc_jwks_stale_ms <= self.oidc_jwks_refresh_ms {
            return Err(ConfigError::new(
                "DUCKGATE_OIDC_JWKS_STALE_MS",
                format!(
                    "{} ms is not longer than DUCKGATE_OIDC_JWKS_REFRESH_MS ({} ms): the keys would be stale before their next refresh",
                    self.oidc_jwks_stale_ms, self.oidc_jwks_refresh_ms
                ),
            ));
        }
        Ok(Some(OidcSettings {
            issuer: issuer.to_string(),
            audiences,
            jwks,
            algorithms,
            leeway: Duration::from_millis(self.oidc_leeway_ms),
            roles_claim: self.oidc_roles_claim.trim().to_string(),
            name_claim: self.oidc_name_claim.trim().to_string(),
            refresh: Duration::from_millis(self.oidc_jwks_refresh_ms),
            stale_after: Duration::from_millis(self.oidc_jwks_stale_ms),
            cooldown: Duration::from_millis(self.oidc_jwks_cooldown_ms),
            timeout: Duration::from_millis(self.oidc_jwks_timeout_ms),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    fn oidc(args: &[&str]) -> Result<Option<OidcSettings>, ConfigError> {
        let mut all = vec!["duckgate"];
        all.extend_from_slice(args);
        crate::config::Cli::try_parse_from(all)
            .unwrap()
            .config
            .auth
            .oidc
            .resolve()
    }

    #[test]
    fn off_without_an_issuer() {
        assert!(oidc(&[]).unwrap().is_none());
        let e = oidc(&["--oidc-audience", "x"]).unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_OIDC_AUDIENCE");
    }

    #[test]
    fn defaults_and_discovery() {
        let s = oidc(&[
            "--oidc-issuer",
            "https://login.example.com/realms/data/",
            "--oidc-audience",
            "duckgate",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(s.algorithms, vec![Algorithm::RS256, Algorithm::ES256]);
        assert_eq!(
            s.jwks,
            JwksLocation::Discovery(
                "https://login.example.com/realms/data/.well-known/openid-configuration".into()
            )
        );
        assert_eq!(s.leeway, Duration::from_secs(30));
        assert_eq!(
            (s.roles_claim.as_str(), s.name_claim.as_str()),
            ("roles", "sub")
        );
    }

    #[test]
    fn refusals_name_their_setting() {
        let base = [
            "--oidc-issuer",
            "https://idp.example",
            "--oidc-audience",
            "a",
        ];
        for (extra, setting, says) in [
            (
                vec!["--oidc-algorithms", "RS256,none"],
                "DUCKGATE_OIDC_ALGORITHMS",
                "never allowed",
            ),
            (
                vec!["--oidc-algorithms", "HS256"],
                "DUCKGATE_OIDC_ALGORITHMS",
                "shared-secret",
            ),
            (
                vec!["--oidc-algorithms", "hs512"],
                "DUCKGATE_OIDC_ALGORITHMS",
                "shared-secret",
            ),
            (
                vec!["--oidc-algorithms", "RS999"],
                "DUCKGATE_OIDC_ALGORITHMS",
                "not an algorithm",
            ),
            (
                vec!["--oidc-jwks-url", "http://idp.example/keys"],
                "DUCKGATE_OIDC_JWKS_URL",
                "plain http",
            ),
            (
                vec![
                    "--oidc-jwks-refresh-ms",
                    "5000",
                    "--oidc-jwks-stale-ms",
                    "5000",
                ],
                "DUCKGATE_OIDC_JWKS_STALE_MS",
                "not longer",
            ),
        ] {
            let mut args = base.to_vec();
            args.extend(extra.iter());
            let e = oidc(&args).unwrap_err();
            assert_eq!(e.setting, setting, "{args:?}");
            assert!(e.message.contains(says), "{args:?}: {}", e.message);
        }
        let e = oidc(&["--oidc-issuer", "https://idp.example"]).unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_OIDC_AUDIENCE");
        let e = oidc(&[
            "--oidc-issuer",
            "http://idp.example",
            "--oidc-audience",
            "a",
        ])
        .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_OIDC_ISSUER");
        // Loopback may be plain http (a local issuer, the tests').
        let s = oidc(&[
            "--oidc-issuer",
            "http://127.0.0.1:9000",
            "--oidc-audience",
            "a",
            "--oidc-jwks-url",
            "http://localhost:9000/jwks",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            s.jwks,
            JwksLocation::Url("http://localhost:9000/jwks".into())
        );
    }
}
