//! The `[[secret]]` tables of the TOML file (`--config`), read into secrets.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::super::{ConfigError, ConfigFile};
use super::{check_readable, BaseCredentials, SecretSpec, SourceSpec, DEFAULT_BASE_PROFILE};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    #[serde(default, rename = "secret")]
    secrets: Vec<FileSecret>,
    /// Declared catalogs, read by `config::attach`.
    #[serde(default, rename = "attach")]
    _attach: Vec<toml::Value>,
    /// Roles, read by `config::roles`.
    #[serde(default, rename = "role")]
    _role: Vec<toml::Value>,
    /// Named sources, read by `config::sources`.
    #[serde(default, rename = "source")]
    _source: Vec<toml::Value>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileSecret {
    name: String,
    source: String,
    #[serde(default)]
    role_arn: Option<String>,
    #[serde(default)]
    session_name: Option<String>,
    #[serde(default)]
    external_id: Option<String>,
    #[serde(default)]
    session_duration_secs: Option<u64>,
    #[serde(default)]
    base_credentials_file: Option<PathBuf>,
    #[serde(default)]
    base_profile: Option<String>,
    #[serde(default)]
    web_identity_token_file: Option<PathBuf>,
    #[serde(default)]
    key_id: Option<String>,
    #[serde(default)]
    secret: Option<String>,
    #[serde(default)]
    session_token: Option<String>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default)]
    endpoint: Option<String>,
    #[serde(default)]
    url_style: Option<String>,
    #[serde(default)]
    use_ssl: Option<bool>,
    #[serde(default)]
    scope: Vec<String>,
    #[serde(default)]
    sts_endpoint: Option<String>,
}

pub(super) fn parse_file(config: &ConfigFile) -> Result<Vec<SecretSpec>, ConfigError> {
    let file: FileConfig = config.parse()?;
    file.secrets
        .into_iter()
        .map(|f| {
            let duration = Duration::from_secs(f.session_duration_secs.unwrap_or(3600));
            let need = |v: Option<String>, what: &str| {
                v.ok_or_else(|| {
                    ConfigError::new(
                        "DUCKGATE_CONFIG",
                        format!(
                            "secret `{}`: `{what}` is required for source `{}`",
                            f.name, f.source
                        ),
                    )
                })
            };
            if f.source != "assume-role" {
                for (set, what) in [
                    (f.base_credentials_file.is_some(), "base_credentials_file"),
                    (f.base_profile.is_some(), "base_profile"),
                ] {
                    if set {
                        return Err(ConfigError::new(
                            "DUCKGATE_CONFIG",
                            format!(
                                "secret `{}`: `{what}` applies to source `assume-role` only, not `{}`",
                                f.name, f.source
                            ),
                        ));
                    }
                }
            }
            let source = match f.source.as_str() {
                "assume-role" => SourceSpec::AssumeRole {
                    role_arn: need(f.role_arn.clone(), "role_arn")?,
                    session_name: f.session_name.clone().unwrap_or_else(|| "duckgate".into()),
                    external_id: f.external_id.clone(),
                    duration,
                    base_credentials: file_base_credentials(&f)?,
                },
                "web-identity" => SourceSpec::WebIdentity {
                    role_arn: need(f.role_arn.clone(), "role_arn")?,
                    session_name: f.session_name.clone().unwrap_or_else(|| "duckgate".into()),
                    token_file: f.web_identity_token_file.clone().ok_or_else(|| {
                        ConfigError::new(
                            "DUCKGATE_CONFIG",
                            format!("secret `{}`: `web_identity_token_file` is required", f.name),
                        )
                    })?,
                    duration,
                },
                "static" => SourceSpec::Static {
                    key_id: need(f.key_id.clone(), "key_id")?,
                    secret: need(f.secret.clone(), "secret")?.into(),
                    session_token: f.session_token.clone().map(Into::into),
                },
                other => {
                    return Err(ConfigError::new(
                        "DUCKGATE_CONFIG",
                        format!(
                        "secret `{}`: unknown source `{other}` (assume-role, web-identity, static)",
                        f.name
                    ),
                    ))
                }
            };
            Ok(SecretSpec {
                name: f.name,
                source,
                region: f.region.unwrap_or_else(|| "us-east-1".into()),
                endpoint: f.endpoint,
                url_style: f.url_style,
                use_ssl: f.use_ssl.unwrap_or(true),
                scope: f.scope,
                sts_endpoint: f.sts_endpoint,
                write_scope: Vec::new(),
            })
        })
        .collect()
}

/// The base credentials file of a `[[secret]]` table, checked readable.
fn file_base_credentials(f: &FileSecret) -> Result<Option<BaseCredentials>, ConfigError> {
    let Some(file) = &f.base_credentials_file else {
        return match f.base_profile {
            Some(_) => Err(ConfigError::new(
                "DUCKGATE_CONFIG",
                format!(
                    "secret `{}`: `base_profile` names a profile of `base_credentials_file`, which is not set",
                    f.name
                ),
            )),
            None => Ok(None),
        };
    };
    check_readable(file).map_err(|e| {
        ConfigError::new(
            "DUCKGATE_CONFIG",
            format!(
                "secret `{}`: `base_credentials_file` {}: cannot read: {}",
                f.name,
                file.display(),
                e.kind()
            ),
        )
    })?;
    Ok(Some(BaseCredentials {
        file: file.clone(),
        profile: f
            .base_profile
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_PROFILE.into()),
        setting: format!(
            "`base_credentials_file` of secret `{}` (DUCKGATE_CONFIG)",
            f.name
        ),
    }))
}
