//! Credential sources: where fresh S3 credentials come from.

use std::time::{Duration, SystemTime};

use aws_config::profile::ProfileFileCredentialsProvider;
use aws_config::provider_config::ProviderConfig;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::future::ProvideCredentials as ProvideCredentialsFuture;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_runtime::env_config::file::{EnvConfigFileKind, EnvConfigFiles};
use aws_sdk_sts::error::ProvideErrorMetadata;
use secrecy::{ExposeSecret, SecretString};
use tracing::instrument::WithSubscriber as _;

use crate::config::s3::{BaseCredentials, SecretSpec, SourceSpec};

/// One set of credentials. The secret parts redact themselves.
#[derive(Clone)]
pub struct Credentials {
    /// The access key id.
    pub key_id: String,
    /// The secret access key.
    pub secret: SecretString,
    /// The session token, if any.
    pub session_token: Option<SecretString>,
    /// `None` for credentials that do not expire.
    pub expires_at: Option<SystemTime>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("key_id", &key_id_suffix(&self.key_id))
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// The last four characters of a key id: enough to tell two apart, never
/// enough to use.
pub fn key_id_suffix(key_id: &str) -> String {
    let n = key_id.chars().count();
    let tail: String = key_id.chars().skip(n.saturating_sub(4)).collect();
    format!("…{tail}")
}

/// Why fetching failed, as a class with no secret in it.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct FetchError(pub String);

/// Fetches credentials for one secret.
pub struct CredentialSource {
    spec: SourceSpec,
    sts: Option<aws_sdk_sts::Client>,
    /// The provider of the base credentials file, when one is set: the STS
    /// client signs with it, and `fetch` asks it first so that a bad file
    /// fails with a clear class.
    base: Option<SharedCredentialsProvider>,
    /// The STS session policy that narrows the role to the secret's scope
    /// (`None`: the scope is every S3 path).
    policy: Option<String>,
}

impl CredentialSource {
    /// The source of `secret`, with an STS client for its region and STS
    /// endpoint unless its credentials are static.
    pub async fn new(secret: &SecretSpec) -> Self {
        let base = match &secret.source {
            SourceSpec::AssumeRole {
                base_credentials: Some(b),
                ..
            } => Some(base_provider(b)),
            _ => None,
        };
        let sts = match &secret.source {
            SourceSpec::Static { .. } => None,
            source => {
                let mut loader = aws_config::defaults(BehaviorVersion::latest())
                    .http_client(super::http::client())
                    .region(aws_config::Region::new(secret.region.clone()))
                    .timeout_config(
                        TimeoutConfig::builder()
                            .operation_attempt_timeout(Duration::from_secs(10))
                            .operation_timeout(Duration::from_secs(20))
                            .build(),
                    )
                    // The rotator retries with its own backoff.
                    .retry_config(RetryConfig::standard().with_max_attempts(2));
                if let Some(url) = &secret.sts_endpoint {
                    loader = loader.endpoint_url(url.clone());
                }
                if matches!(source, SourceSpec::WebIdentity { .. }) {
                    // AssumeRoleWithWebIdentity is not signed.
                    loader = loader.no_credentials();
                } else if let Some(base) = &base {
                    // The file's keys and nothing else: the standard chain
                    // (process environment, ~/.aws, instance role) is never
                    // consulted.
                    loader = loader.credentials_provider(base.clone());
                }
                let config = loader.load().await;
                Some(aws_sdk_sts::Client::new(&config))
            }
        };
        Self {
            spec: secret.source.clone(),
            sts,
            base,
            policy: session_policy(&secret.scope, &secret.write_scope),
        }
    }

    /// The source's name: `assume-role`, `web-identity` or `static`.
    pub fn kind(&self) -> &'static str {
        self.spec.kind()
    }

    /// Fresh credentials (for `static`, the fixed ones).
    pub async fn fetch(&self) -> Result<Credentials, FetchError> {
        match &self.spec {
            SourceSpec::Static {
                key_id,
                secret,
                session_token,
            } => Ok(Credentials {
                key_id: key_id.clone(),
                secret: secret.clone(),
                session_token: session_token.clone(),
                expires_at: None,
            }),
            SourceSpec::AssumeRole {
                role_arn,
                session_name,
                external_id,
                duration,
                base_credentials,
            } => {
                if let (Some(base), Some(spec)) = (&self.base, base_credentials) {
                    // Cached by the provider after the first read.
                    base.provide_credentials()
                        .await
                        .map_err(|e| base_error(spec, &e))?;
                }
                let client = self.sts.as_ref().expect("STS client for assume-role");
                let out = client
                    .assume_role()
                    .role_arn(role_arn)
                    .role_session_name(session_name)
                    .set_external_id(external_id.clone())
                    .set_policy(self.policy.clone())
                    .duration_seconds(duration.as_secs() as i32)
                    .send()
                    .await
                    .map_err(|e| sts_error("AssumeRole", &e))?;
                convert(out.credentials())
            }
            SourceSpec::WebIdentity {
                role_arn,
                session_name,
                token_file,
                duration,
            } => {
                // Re-read at every refresh: Kubernetes rotates the file.
                let token = tokio::fs::read_to_string(token_file).await.map_err(|e| {
                    FetchError(format!(
                        "cannot read the web identity token file: {}",
                        e.kind()
                    ))
                })?;
                let client = self.sts.as_ref().expect("STS client for web-identity");
                let out = client
                    .assume_role_with_web_identity()
                    .role_arn(role_arn)
                    .role_session_name(session_name)
                    .web_identity_token(token.trim())
                    .set_policy(self.policy.clone())
                    .duration_seconds(duration.as_secs() as i32)
                    .send()
                    .await
                    .map_err(|e| sts_error("AssumeRoleWithWebIdentity", &e))?;
                convert(out.credentials())
            }
        }
    }
}

/// The AWS SDK's profile-file provider reading only `base`'s file and
/// profile (no `AWS_PROFILE`, no `~/.aws` files), silenced.
fn base_provider(base: &BaseCredentials) -> SharedCredentialsProvider {
    let files = EnvConfigFiles::builder()
        .with_file(EnvConfigFileKind::Credentials, &base.file)
        .build();
    SharedCredentialsProvider::new(Silenced(
        ProfileFileCredentialsProvider::builder()
            // A profile that assumes a role calls STS with this client.
            .configure(&ProviderConfig::default().with_http_client(super::http::client()))
            .profile_files(files)
            .profile_name(&base.profile)
            .build(),
    ))
}

/// A credentials provider whose own logging goes nowhere: the profile-file
/// provider logs the whole access key id at `info` ("loaded base
/// credentials"), and its parser may quote lines of the file. Its failures
/// reach the log as [`base_error`]'s class instead.
#[derive(Debug)]
struct Silenced<P>(P);

impl<P: ProvideCredentials> ProvideCredentials for Silenced<P> {
    fn provide_credentials<'a>(&'a self) -> ProvideCredentialsFuture<'a>
    where
        Self: 'a,
    {
        ProvideCredentialsFuture::new(
            self.0
                .provide_credentials()
                .with_subscriber(tracing::subscriber::NoSubscriber::default()),
        )
    }
}

/// Why the base credentials file gave no credentials, as a class: the SDK's
/// messages about a profile file may quote its lines.
fn base_error(base: &BaseCredentials, e: &CredentialsError) -> FetchError {
    let class = match e {
        CredentialsError::CredentialsNotLoaded(_) => format!(
            "holds no credentials for profile `{}` (is there a [{}] section with aws_access_key_id and aws_secret_access_key?)",
            base.profile, base.profile
        ),
        CredentialsError::InvalidConfiguration(_) => {
            "is not a valid AWS shared-credentials file".to_string()
        }
        CredentialsError::ProviderTimedOut(_) => "timed out".to_string(),
        _ => "could not be used".to_string(),
    };
    FetchError(format!(
        "base credentials file {} ({}): {class}",
        base.file.display(),
        base.setting
    ))
}

/// Longest session policy STS takes (its packed size limit is about the
/// same; a policy past this would fail every AssumeRole).
const MAX_POLICY_CHARS: usize = 2048;

/// The STS session policy for `scope` (read: `s3:GetObject` under each
/// prefix, `s3:ListBucket` of its bucket for keys under it) and `writes`
/// (`s3:PutObject`, `s3:DeleteObject`, `s3:AbortMultipartUpload` under each
/// prefix the gateway itself writes, inside the scope). The credentials STS
/// returns can then do no more than the scope, whatever the role allows: a
/// key that ever leaks reads nothing else. `None` when the scope is every
/// S3 path (nothing to narrow). A scope whose policy would pass STS's size
/// limit is narrowed to whole buckets instead.
pub fn session_policy(scope: &[String], writes: &[String]) -> Option<String> {
    if scope.is_empty() {
        return None;
    }
    let split = |p: &str| -> (String, String) {
        let rest = p.strip_prefix("s3://").unwrap_or(p);
        match rest.split_once('/') {
            Some((bucket, prefix)) => (bucket.to_string(), prefix.to_string()),
            None => (rest.to_string(), String::new()),
        }
    };
    let inside = |w: &str| scope.iter().any(|s| w.starts_with(s.as_str()));
    let build = |whole_buckets: bool| -> String {
        let mut reads = Vec::new();
        let mut lists: Vec<(String, Vec<String>)> = Vec::new();
        for p in scope {
            let (bucket, prefix) = split(p);
            let prefix = if whole_buckets { String::new() } else { prefix };
            reads.push(format!("arn:aws:s3:::{bucket}/{prefix}*"));
            match lists.iter_mut().find(|(b, _)| *b == bucket) {
                Some((_, prefixes)) => prefixes.push(format!("{prefix}*")),
                None => lists.push((bucket, vec![format!("{prefix}*")])),
            }
        }
        reads.dedup();
        let mut statements = vec![serde_json::json!({
            "Sid": "ReadScope",
            "Effect": "Allow",
            "Action": ["s3:GetObject"],
            "Resource": reads,
        })];
        for (bucket, mut prefixes) in lists {
            prefixes.dedup();
            let mut list = serde_json::json!({
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": format!("arn:aws:s3:::{bucket}"),
            });
            if !prefixes.iter().any(|p| p == "*") {
                list["Condition"] = serde_json::json!({"StringLike": {"s3:prefix": prefixes}});
            }
            statements.push(list);
        }
        let written: Vec<String> = writes
            .iter()
            .filter(|w| inside(w))
            .map(|w| {
                let (bucket, prefix) = split(w);
                format!("arn:aws:s3:::{bucket}/{prefix}*")
            })
            .collect();
        if !written.is_empty() {
            statements.push(serde_json::json!({
                "Sid": "GatewayWrites",
                "Effect": "Allow",
                "Action": ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload"],
                "Resource": written,
            }));
        }
        serde_json::json!({"Version": "2012-10-17", "Statement": statements}).to_string()
    };
    let exact = build(false);
    if exact.len() <= MAX_POLICY_CHARS {
        return Some(exact);
    }
    let buckets = build(true);
    (buckets.len() <= MAX_POLICY_CHARS).then_some(buckets)
}

fn convert(c: Option<&aws_sdk_sts::types::Credentials>) -> Result<Credentials, FetchError> {
    let c = c.ok_or_else(|| FetchError("STS answered without credentials".into()))?;
    let expires_at = SystemTime::try_from(*c.expiration())
        .map_err(|_| FetchError("STS answered with an unreadable expiration".into()))?;
    Ok(Credentials {
        key_id: c.access_key_id().to_string(),
        secret: SecretString::from(c.secret_access_key().to_string()),
        session_token: Some(SecretString::from(c.session_token().to_string())),
        expires_at: Some(expires_at),
    })
}

/// Reduces an SDK error to its class: the service's error code, or the kind
/// of transport failure. Never includes request or response bodies.
fn sts_error<E>(
    op: &str,
    e: &aws_sdk_sts::error::SdkError<E, aws_sdk_sts::config::http::HttpResponse>,
) -> FetchError
where
    E: ProvideErrorMetadata,
{
    use aws_sdk_sts::error::SdkError;
    let class = match e {
        SdkError::ServiceError(se) => {
            // The code and message STS gave (they name the failure, never a
            // credential), and the HTTP status when there is no code.
            let code = se.err().code().unwrap_or("no error code");
            let status = se.raw().status().as_u16();
            match se.err().message() {
                Some(m) => format!("service error {code} (HTTP {status}): {}", one_line(m, 200)),
                None => format!("service error {code} (HTTP {status})"),
            }
        }
        SdkError::TimeoutError(_) => "timeout".to_string(),
        SdkError::DispatchFailure(d) => {
            if let Some(tls) = d.as_connector_error().and_then(|c| tls_failure(c)) {
                format!("TLS: {tls}")
            } else if d.is_timeout() {
                "timeout".to_string()
            } else if d.is_io() {
                "connection failed".to_string()
            } else {
                "dispatch failure".to_string()
            }
        }
        SdkError::ResponseError(_) => "unreadable response".to_string(),
        SdkError::ConstructionFailure(_) => "request construction failed".to_string(),
        _ => "unknown failure".to_string(),
    };
    FetchError(format!("STS {op}: {class}"))
}

/// The TLS failure behind a transport error, if one is, in rustls's words
/// ("invalid peer certificate: UnknownIssuer"): they name a certificate or
/// the protocol, never a credential. An `io::Error` hides what it wraps from
/// `source()` (hyper-rustls nests two), so each one met is opened.
fn tls_failure(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let mut next = vec![e];
    // Bounded: a chain is a handful of links.
    for _ in 0..16 {
        let e = next.pop()?;
        if let Some(t) = e.downcast_ref::<rustls::Error>() {
            return Some(one_line(&t.to_string(), 200));
        }
        next.extend(e.source());
        if let Some(inner) = e
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
        {
            next.push(inner);
        }
    }
    None
}

/// `text` on one line, at most `max` characters.
fn one_line(text: &str, max: usize) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(max)
        .collect()
}

/// Renders a secret's value for the DDL only.
pub fn expose(s: &SecretString) -> &str {
    s.expose_secret()
}

#[cfg(test)]
mod tests {
    use super::session_policy;

    #[test]
    fn the_session_policy_is_the_scope() {
        assert_eq!(
            session_policy(&[], &[]),
            None,
            "every S3 path: nothing to narrow"
        );
        let scope = vec![
            "s3://lake/events/".to_string(),
            "s3://lake/dims/".to_string(),
            "s3://raw/".to_string(),
        ];
        let writes = vec![
            "s3://lake/events/ducklake/".to_string(),
            "s3://elsewhere/x/".to_string(),
        ];
        let p: serde_json::Value =
            serde_json::from_str(&session_policy(&scope, &writes).unwrap()).unwrap();
        let st = p["Statement"].as_array().unwrap();
        assert_eq!(
            st[0]["Resource"],
            serde_json::json!([
                "arn:aws:s3:::lake/events/*",
                "arn:aws:s3:::lake/dims/*",
                "arn:aws:s3:::raw/*"
            ])
        );
        // One listing grant per bucket, limited to the scope's prefixes.
        assert_eq!(st[1]["Resource"], "arn:aws:s3:::lake");
        assert_eq!(
            st[1]["Condition"]["StringLike"]["s3:prefix"],
            serde_json::json!(["events/*", "dims/*"])
        );
        assert_eq!(st[2]["Resource"], "arn:aws:s3:::raw");
        assert!(
            st[2].get("Condition").is_none(),
            "a whole bucket lists freely"
        );
        // Writes only where the gateway writes, and only inside the scope.
        assert_eq!(
            st[3]["Resource"],
            serde_json::json!(["arn:aws:s3:::lake/events/ducklake/*"])
        );
        assert_eq!(st.len(), 4);
        // Too long for STS: whole buckets instead.
        let many: Vec<String> = (0..200).map(|i| format!("s3://lake/p{i:04}/")).collect();
        let p = session_policy(&many, &[]).unwrap();
        assert!(p.len() <= 2048 && p.contains("arn:aws:s3:::lake/*"), "{p}");
    }
}
