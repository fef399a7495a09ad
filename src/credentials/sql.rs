//! The secret DDL. Every value is an escaped SQL string literal, the statement
//! is always `CREATE OR REPLACE` (never drop-then-create, which would leave a
//! window with no secret) and always carries `SESSION_TOKEN` (httpfs would
//! otherwise take one from the process environment and sign with a
//! mismatched pair).

use crate::config::s3::SecretSpec;
use crate::credentials::source::{expose, Credentials};
use crate::engine::sql_string;

/// The statement that installs `creds` as the secret `spec.name`. The text
/// holds secret values: it is never logged, and errors from running it are
/// reduced to their class (DuckDB echoes statement text in messages).
pub fn create_secret(spec: &SecretSpec, creds: &Credentials) -> String {
    let mut parts = vec![
        "TYPE s3".to_string(),
        "PROVIDER config".to_string(),
        format!("KEY_ID {}", sql_string(&creds.key_id)),
        format!("SECRET {}", sql_string(expose(&creds.secret))),
        format!(
            "SESSION_TOKEN {}",
            sql_string(creds.session_token.as_ref().map(expose).unwrap_or(""))
        ),
        format!("REGION {}", sql_string(&spec.region)),
        format!("USE_SSL {}", if spec.use_ssl { "true" } else { "false" }),
    ];
    if let Some(endpoint) = &spec.endpoint {
        parts.push(format!("ENDPOINT {}", sql_string(endpoint)));
    }
    if let Some(style) = &spec.url_style {
        parts.push(format!("URL_STYLE {}", sql_string(style)));
    }
    match spec.scope.len() {
        0 => {}
        1 => parts.push(format!("SCOPE {}", sql_string(&spec.scope[0]))),
        _ => parts.push(format!(
            "SCOPE [{}]",
            spec.scope
                .iter()
                .map(|s| sql_string(s))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
    format!(
        "CREATE OR REPLACE TEMPORARY SECRET \"{}\" ({})",
        spec.name.replace('"', "\"\""),
        parts.join(", ")
    )
}

/// A DuckDB error from secret DDL, reduced to its class so no fragment of the
/// statement (and so of a credential) reaches a log or an answer.
pub fn reduce_error(e: &duckdb::Error) -> String {
    let text = e.to_string();
    let (class, _) = crate::engine::errors::split_class(&text);
    format!("DuckDB {class} error while installing the secret")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::s3::SourceSpec;
    use secrecy::SecretString;

    #[test]
    fn values_are_escaped_literals() {
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
        };
        let creds = Credentials {
            key_id: "AKIA'X".into(),
            secret: SecretString::from("se'cr'et".to_string()),
            session_token: Some(SecretString::from("tok'en".to_string())),
            expires_at: None,
        };
        let sql = create_secret(&spec, &creds);
        assert!(sql.starts_with(
            "CREATE OR REPLACE TEMPORARY SECRET \"s3_main\" (TYPE s3, PROVIDER config"
        ));
        assert!(sql.contains("KEY_ID 'AKIA''X'"));
        assert!(sql.contains("SECRET 'se''cr''et'"));
        assert!(sql.contains("SESSION_TOKEN 'tok''en'"));
        assert!(sql.contains("SCOPE ['s3://a/', 's3://b/']"));
        assert!(sql.contains("USE_SSL false"));
    }
}
