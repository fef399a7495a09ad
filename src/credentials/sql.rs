//! What an S3 secret holds. The secret is always created or replaced in one
//! step (never drop-then-create, which would leave a window with no secret)
//! and always carries `session_token` (httpfs would otherwise take one from
//! the process environment and sign with a mismatched pair).

use crate::config::s3::SecretSpec;
use crate::credentials::source::{expose, Credentials};

/// The options of the S3 secret that holds `creds` for `spec`, as DuckDB's
/// `CREATE SECRET (TYPE s3, PROVIDER config, ...)` names them. They go to
/// DuckDB's secret manager directly (`engine::secrets`), never into SQL text.
pub fn secret_options<'a>(
    spec: &'a SecretSpec,
    creds: &'a Credentials,
) -> Vec<(&'static str, &'a str)> {
    let mut options = vec![
        ("key_id", creds.key_id.as_str()),
        ("secret", expose(&creds.secret)),
        (
            "session_token",
            creds.session_token.as_ref().map(expose).unwrap_or(""),
        ),
        ("region", spec.region.as_str()),
        ("use_ssl", if spec.use_ssl { "true" } else { "false" }),
    ];
    if let Some(endpoint) = &spec.endpoint {
        options.push(("endpoint", endpoint.as_str()));
    }
    if let Some(style) = &spec.url_style {
        options.push(("url_style", style.as_str()));
    }
    options
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::s3::SourceSpec;
    use secrecy::SecretString;

    #[test]
    fn options_carry_every_value_verbatim() {
        let spec = SecretSpec {
            name: "s3_main".into(),
            source: SourceSpec::Static {
                key_id: "k".into(),
                secret: SecretString::from("s".to_string()),
                session_token: None,
            },
            region: "us-east-1".into(),
            endpoint: Some("127.0.0.1:9000".into()),
            url_style: Some("path".into()),
            use_ssl: false,
            scope: vec!["s3://a/".into(), "s3://b/".into()],
            sts_endpoint: None,
            write_scope: Vec::new(),
        };
        let creds = Credentials {
            key_id: "AKIA'X".into(),
            secret: SecretString::from("se'cr'et".to_string()),
            session_token: Some(SecretString::from("tok'en".to_string())),
            expires_at: None,
        };
        let options = secret_options(&spec, &creds);
        let get = |k: &str| options.iter().find(|(n, _)| *n == k).map(|(_, v)| *v);
        assert_eq!(get("key_id"), Some("AKIA'X"));
        assert_eq!(get("secret"), Some("se'cr'et"));
        assert_eq!(get("session_token"), Some("tok'en"));
        assert_eq!(get("use_ssl"), Some("false"));
        assert_eq!(get("endpoint"), Some("127.0.0.1:9000"));
        assert_eq!(get("url_style"), Some("path"));
    }
}
