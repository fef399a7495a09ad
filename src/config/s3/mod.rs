//! S3 secret settings: one secret from `DUCKGATE_S3_*` variables, any number
//! from a TOML file (`--config`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use secrecy::SecretString;

use super::ConfigError;

mod file;
mod secret;

use file::parse_file;
use secret::check_secret;
pub use secret::{BaseCredentials, RotationTiming, SecretSpec, SourceSpec, DEFAULT_BASE_PROFILE};

/// Settings for the S3 secrets the gateway installs and keeps fresh.
#[derive(Debug, Clone, Args)]
pub struct S3Settings {
    /// TOML file with `[[secret]]` tables, one per S3 secret (docs/credentials.md), `[[attach]]` tables, one per catalog, and `[[source]]` tables, one per named source (docs/operations.md), and `[[role]]` tables (docs/security.md).
    #[arg(long = "config", env = "DUCKGATE_CONFIG")]
    pub config_file: Option<PathBuf>,

    /// Name of the DuckDB secret for the one-secret configuration.
    #[arg(long, env = "DUCKGATE_S3_SECRET_NAME", default_value = "duckgate_s3")]
    pub s3_secret_name: String,

    /// Role to assume with STS AssumeRole (selects the `assume-role` source).
    #[arg(long, env = "DUCKGATE_S3_ROLE_ARN")]
    pub s3_role_arn: Option<String>,

    /// Session name sent to STS.
    #[arg(long, env = "DUCKGATE_S3_SESSION_NAME", default_value = "duckgate")]
    pub s3_session_name: String,

    /// External id sent to STS AssumeRole.
    #[arg(long, env = "DUCKGATE_S3_EXTERNAL_ID")]
    pub s3_external_id: Option<String>,

    /// File in the AWS shared-credentials format (`[default]` with
    /// `aws_access_key_id`, `aws_secret_access_key`, optional
    /// `aws_session_token`) whose keys sign the `assume-role` source's STS
    /// calls instead of the standard AWS chain; read at start-up.
    #[arg(long, env = "DUCKGATE_S3_BASE_CREDENTIALS_FILE")]
    pub s3_base_credentials_file: Option<PathBuf>,

    /// Profile of DUCKGATE_S3_BASE_CREDENTIALS_FILE to read [default: default].
    #[arg(long, env = "DUCKGATE_S3_BASE_PROFILE")]
    pub s3_base_profile: Option<String>,

    /// Token file for AssumeRoleWithWebIdentity (selects the `web-identity`
    /// source together with DUCKGATE_S3_ROLE_ARN); re-read at each refresh.
    #[arg(long, env = "DUCKGATE_S3_WEB_IDENTITY_TOKEN_FILE")]
    pub s3_web_identity_token_file: Option<PathBuf>,

    /// Static access key id (selects the `static` source).
    #[arg(long, env = "DUCKGATE_S3_KEY_ID", hide_env_values = true)]
    pub s3_key_id: Option<String>,

    /// Static secret access key.
    #[arg(long, env = "DUCKGATE_S3_SECRET", hide_env_values = true, value_parser = parse_secret)]
    pub s3_secret: Option<SecretString>,

    /// Static session token.
    #[arg(long, env = "DUCKGATE_S3_SESSION_TOKEN", hide_env_values = true, value_parser = parse_secret)]
    pub s3_session_token: Option<SecretString>,

    /// Lifetime requested for STS sessions, in seconds.
    #[arg(long, env = "DUCKGATE_S3_SESSION_DURATION_SECS", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..=43_200))]
    pub s3_session_duration_secs: u64,

    /// AWS region of the bucket(s).
    #[arg(long, env = "DUCKGATE_S3_REGION", default_value = "us-east-1")]
    pub s3_region: String,

    /// S3 endpoint DuckDB talks to, `host:port` (default: AWS).
    #[arg(long, env = "DUCKGATE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,

    /// `vhost` or `path`.
    #[arg(long, env = "DUCKGATE_S3_URL_STYLE")]
    pub s3_url_style: Option<String>,

    /// Use TLS to reach S3.
    #[arg(long, env = "DUCKGATE_S3_USE_SSL", default_value_t = true, action = clap::ArgAction::Set)]
    pub s3_use_ssl: bool,

    /// Comma-separated prefixes the secret applies to, e.g. `s3://bucket/`.
    /// They are also the only S3 locations queries may read.
    #[arg(long, env = "DUCKGATE_S3_SCOPE", value_delimiter = ',')]
    pub s3_scope: Vec<String>,

    /// STS endpoint URL (default: AWS).
    #[arg(long, env = "DUCKGATE_STS_ENDPOINT")]
    pub sts_endpoint: Option<String>,

    /// Extra seconds the credentials must outlive the longest query when
    /// refreshed.
    #[arg(long, env = "DUCKGATE_S3_REFRESH_LEAD_SECS", default_value_t = 60, value_parser = clap::value_parser!(u64).range(0..=86_400))]
    pub s3_refresh_lead_secs: u64,

    /// How often the rotator wakes to check lifetimes, in milliseconds.
    #[arg(long, env = "DUCKGATE_S3_CHECK_INTERVAL_MS", default_value_t = 1_000, value_parser = clap::value_parser!(u64).range(10..=600_000))]
    pub s3_check_interval_ms: u64,

    /// Refresh credentials before they expire (on by default; off only for
    /// experiments that must watch them expire).
    #[arg(long, env = "DUCKGATE_S3_ROTATION", default_value_t = true, action = clap::ArgAction::Set)]
    pub s3_rotation: bool,
}

/// Reads a secret setting into a type whose Debug output is redacted.
pub fn parse_secret(s: &str) -> Result<SecretString, String> {
    Ok(SecretString::from(s.to_string()))
}

impl S3Settings {
    /// The rotator's timing, with `max_query_timeout` as the longest time
    /// limit a query or statement may run under.
    pub fn timing(&self, max_query_timeout: Duration) -> RotationTiming {
        RotationTiming {
            enabled: self.s3_rotation,
            lead: Duration::from_secs(self.s3_refresh_lead_secs),
            check_interval: Duration::from_millis(self.s3_check_interval_ms),
            max_query_timeout,
        }
    }

    /// Every configured secret: the TOML file's, then the one from
    /// `DUCKGATE_S3_*` if a source is selected there.
    pub fn secrets(&self) -> Result<Vec<SecretSpec>, ConfigError> {
        let file = match &self.config_file {
            Some(path) => Some(super::ConfigFile::read(path)?),
            None => None,
        };
        self.secrets_in(file.as_ref())
    }

    /// Every configured secret, the TOML file's read from `file` (read
    /// once at start: [`super::Config::resolve`]).
    pub fn secrets_in(
        &self,
        file: Option<&super::ConfigFile>,
    ) -> Result<Vec<SecretSpec>, ConfigError> {
        let mut out = Vec::new();
        if let Some(file) = file {
            out.extend(parse_file(file)?);
        }
        if let Some(source) = self.env_source()? {
            out.push(SecretSpec {
                name: self.s3_secret_name.clone(),
                source,
                region: self.s3_region.clone(),
                endpoint: self.s3_endpoint.clone(),
                url_style: self.s3_url_style.clone(),
                use_ssl: self.s3_use_ssl,
                scope: self.s3_scope.clone(),
                sts_endpoint: self.sts_endpoint.clone(),
                write_scope: Vec::new(),
            });
        }
        let mut names = std::collections::HashSet::new();
        for s in &out {
            check_secret(s)?;
            if !names.insert(s.name.to_ascii_lowercase()) {
                return Err(ConfigError::new(
                    "DUCKGATE_CONFIG",
                    format!("secret name `{}` is used twice", s.name),
                ));
            }
        }
        Ok(out)
    }

    fn env_source(&self) -> Result<Option<SourceSpec>, ConfigError> {
        let duration = Duration::from_secs(self.s3_session_duration_secs);
        let base_credentials = self.env_base_credentials()?;
        // The base credentials sign AssumeRole; any other source would
        // silently ignore them.
        let refuse_base = |selected: &str| match &base_credentials {
            Some(_) => Err(ConfigError::new(
                "DUCKGATE_S3_BASE_CREDENTIALS_FILE",
                format!("applies to the assume-role source only, not {selected}"),
            )),
            None => Ok(()),
        };
        match (&self.s3_role_arn, &self.s3_key_id) {
            (Some(_), Some(_)) => Err(ConfigError::new(
                "DUCKGATE_S3_ROLE_ARN",
                "set either DUCKGATE_S3_ROLE_ARN or DUCKGATE_S3_KEY_ID, not both",
            )),
            (Some(role_arn), None) => Ok(Some(match &self.s3_web_identity_token_file {
                Some(token_file) => {
                    refuse_base(
                        "web-identity (DUCKGATE_S3_WEB_IDENTITY_TOKEN_FILE is set): AssumeRoleWithWebIdentity is not signed",
                    )?;
                    SourceSpec::WebIdentity {
                        role_arn: role_arn.clone(),
                        session_name: self.s3_session_name.clone(),
                        token_file: token_file.clone(),
                        duration,
                    }
                }
                None => SourceSpec::AssumeRole {
                    role_arn: role_arn.clone(),
                    session_name: self.s3_session_name.clone(),
                    external_id: self.s3_external_id.clone(),
                    duration,
                    base_credentials,
                },
            })),
            (None, Some(key_id)) => {
                refuse_base("static (DUCKGATE_S3_KEY_ID is set)")?;
                let secret = self.s3_secret.clone().ok_or_else(|| {
                    ConfigError::new("DUCKGATE_S3_SECRET", "required with DUCKGATE_S3_KEY_ID")
                })?;
                Ok(Some(SourceSpec::Static {
                    key_id: key_id.clone(),
                    secret,
                    session_token: self.s3_session_token.clone(),
                }))
            }
            (None, None) => {
                refuse_base("no source (DUCKGATE_S3_ROLE_ARN is not set)")?;
                Ok(None)
            }
        }
    }

    /// The base credentials file from `DUCKGATE_S3_BASE_*`, checked readable.
    fn env_base_credentials(&self) -> Result<Option<BaseCredentials>, ConfigError> {
        let Some(file) = &self.s3_base_credentials_file else {
            return match self.s3_base_profile {
                Some(_) => Err(ConfigError::new(
                    "DUCKGATE_S3_BASE_PROFILE",
                    "names a profile of DUCKGATE_S3_BASE_CREDENTIALS_FILE, which is not set",
                )),
                None => Ok(None),
            };
        };
        check_readable(file).map_err(|e| {
            ConfigError::new(
                "DUCKGATE_S3_BASE_CREDENTIALS_FILE",
                format!("cannot read {}: {}", file.display(), e.kind()),
            )
        })?;
        Ok(Some(BaseCredentials {
            file: file.clone(),
            profile: self
                .s3_base_profile
                .clone()
                .unwrap_or_else(|| DEFAULT_BASE_PROFILE.into()),
            setting: "DUCKGATE_S3_BASE_CREDENTIALS_FILE".into(),
        }))
    }

    /// Rejects configurations whose sessions cannot outlive the longest query.
    /// `statement_limit_set`: the longest limit is the statements' own
    /// setting (the error then names it).
    pub fn validate(
        &self,
        secrets: &[SecretSpec],
        max_query_timeout: Duration,
        statement_limit_set: bool,
    ) -> Result<(), ConfigError> {
        let timing = self.timing(max_query_timeout);
        if !timing.enabled {
            return Ok(());
        }
        for s in secrets {
            let Some(lifetime) = s.source.duration() else {
                continue;
            };
            let need = timing.max_query_timeout + timing.lead;
            // The refresh must leave the old credentials enough life for the
            // longest query, and the new ones must not be due for refresh at once.
            if need.as_secs_f64() > lifetime.as_secs_f64() * 0.8 {
                let limit = if statement_limit_set {
                    "DUCKGATE_MAX_STATEMENT_TIMEOUT_MS"
                } else {
                    "DUCKGATE_MAX_QUERY_TIMEOUT_MS"
                };
                return Err(ConfigError::new(
                    "DUCKGATE_S3_SESSION_DURATION_SECS",
                    format!(
                        "secret `{}`: sessions of {} s cannot cover the longest query or statement ({} s, {limit}) plus the refresh lead ({} s, DUCKGATE_S3_REFRESH_LEAD_SECS) with 20% to spare; \
                         lengthen the sessions or shorten the time limit or the lead",
                        s.name,
                        lifetime.as_secs(),
                        timing.max_query_timeout.as_secs_f64(),
                        timing.lead.as_secs()
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// Whether `path` can be read now (its content is not looked at here: the
/// AWS SDK parses it, and a secret must not reach a message).
pub(super) fn check_readable(path: &Path) -> std::io::Result<()> {
    std::fs::read(path).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threshold_is_the_larger_of_fraction_and_query_plus_lead() {
        let t = RotationTiming {
            enabled: true,
            lead: Duration::from_secs(60),
            check_interval: Duration::from_secs(1),
            max_query_timeout: Duration::from_secs(300),
        };
        assert_eq!(
            t.refresh_threshold(Duration::from_secs(900)),
            Duration::from_secs(360)
        );
        assert_eq!(
            t.refresh_threshold(Duration::from_secs(3600)),
            Duration::from_secs(720)
        );
    }

    #[test]
    fn toml_file_parses_every_source() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.toml");
        std::fs::write(
            &path,
            r#"
            [[secret]]
            name = "lake"
            source = "assume-role"
            role_arn = "arn:aws:iam::1:role/r"
            scope = ["s3://lake/"]
            session_duration_secs = 900

            [[secret]]
            name = "static_one"
            source = "static"
            key_id = "AKIA"
            secret = "s"
            use_ssl = false
            endpoint = "127.0.0.1:9000"
            url_style = "path"
            "#,
        )
        .unwrap();
        let specs = parse_file(&crate::config::ConfigFile::read(&path).unwrap()).unwrap();
        assert_eq!(specs.len(), 2);
        assert_eq!(specs[0].source.kind(), "assume-role");
        assert_eq!(specs[1].source.kind(), "static");
        assert_eq!(specs[0].scope, vec!["s3://lake/".to_string()]);
    }
    /// `S3Settings` from flags alone.
    fn settings(args: &[&str]) -> S3Settings {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            s3: S3Settings,
        }
        Cli::try_parse_from(std::iter::once("duckgate").chain(args.iter().copied()))
            .unwrap()
            .s3
    }

    #[test]
    fn a_base_credentials_file_selects_itself_for_assume_role() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[ci]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n",
        )
        .unwrap();
        let flag = format!("--s3-base-credentials-file={}", file.display());
        let specs = settings(&["--s3-role-arn=arn:aws:iam::1:role/r", &flag])
            .secrets()
            .unwrap();
        let SourceSpec::AssumeRole {
            base_credentials: Some(base),
            ..
        } = &specs[0].source
        else {
            panic!("{:?}", specs[0].source);
        };
        assert_eq!(
            (base.file.as_path(), base.profile.as_str()),
            (file.as_path(), "default")
        );
        let specs = settings(&[
            "--s3-role-arn=arn:aws:iam::1:role/r",
            &flag,
            "--s3-base-profile=ci",
        ])
        .secrets()
        .unwrap();
        assert!(matches!(
            &specs[0].source,
            SourceSpec::AssumeRole { base_credentials: Some(b), .. } if b.profile == "ci"
        ));
    }

    #[test]
    fn a_base_credentials_file_with_another_source_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = AKIAFILE\naws_secret_access_key = s\n",
        )
        .unwrap();
        let token = dir.path().join("token");
        std::fs::write(&token, "t").unwrap();
        let flag = format!("--s3-base-credentials-file={}", file.display());
        let token_flag = format!("--s3-web-identity-token-file={}", token.display());
        for args in [
            vec!["--s3-role-arn=arn:aws:iam::1:role/r", &token_flag, &flag],
            vec!["--s3-key-id=AKIA", "--s3-secret=s", &flag],
            vec![&flag],
        ] {
            let e = settings(&args).secrets().unwrap_err();
            assert_eq!(
                e.setting, "DUCKGATE_S3_BASE_CREDENTIALS_FILE",
                "{args:?}: {e}"
            );
            assert!(e.message.contains("assume-role source only"), "{e}");
        }
        // A profile without a file does nothing: refused too.
        let e = settings(&[
            "--s3-role-arn=arn:aws:iam::1:role/r",
            "--s3-base-profile=ci",
        ])
        .secrets()
        .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_S3_BASE_PROFILE", "{e}");

        // In a [[secret]] table: refused, naming the key.
        for (source, extra) in [
            ("static", "key_id = \"AKIA\"\nsecret = \"s\""),
            (
                "web-identity",
                "role_arn = \"arn:aws:iam::1:role/r\"\nweb_identity_token_file = \"/t\"",
            ),
        ] {
            let toml = common_toml(
                dir.path(),
                source,
                &format!("{extra}\nbase_credentials_file = \"{}\"", file.display()),
            );
            let e = settings(&[&format!("--config={}", toml.display())])
                .secrets()
                .unwrap_err();
            assert_eq!(e.setting, "DUCKGATE_CONFIG");
            assert!(
                e.message
                    .contains("`base_credentials_file` applies to source `assume-role` only"),
                "{e}"
            );
        }
    }

    #[test]
    fn an_unreadable_base_credentials_file_is_refused_naming_the_setting() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let e = settings(&[
            "--s3-role-arn=arn:aws:iam::1:role/r",
            &format!("--s3-base-credentials-file={}", missing.display()),
        ])
        .secrets()
        .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_S3_BASE_CREDENTIALS_FILE");
        assert!(e.message.contains(&missing.display().to_string()), "{e}");
        let toml = common_toml(
            dir.path(),
            "assume-role",
            &format!(
                "role_arn = \"arn:aws:iam::1:role/r\"\nbase_credentials_file = \"{}\"",
                missing.display()
            ),
        );
        let e = settings(&[&format!("--config={}", toml.display())])
            .secrets()
            .unwrap_err();
        assert_eq!(e.setting, "DUCKGATE_CONFIG");
        assert!(
            e.message.contains("`base_credentials_file`") && e.message.contains("cannot read"),
            "{e}"
        );
    }

    /// A TOML file with one `[[secret]]` of `source` and `extra` keys.
    fn common_toml(dir: &Path, source: &str, extra: &str) -> PathBuf {
        let path = dir.join(format!("{source}.toml"));
        std::fs::write(
            &path,
            format!("[[secret]]\nname = \"s\"\nsource = \"{source}\"\n{extra}\n"),
        )
        .unwrap();
        path
    }
}
