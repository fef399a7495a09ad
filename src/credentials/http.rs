//! The AWS SDK's HTTPS client, one for the process: STS calls and the S3
//! spool's uploads and reads share its connection pool.
//!
//! It is the client the SDK builds by default (hyper with rustls, the
//! system's trusted roots, the proxy of `HTTPS_PROXY`/`NO_PROXY`, the SDK's
//! connect and read timeouts) with ring's cryptography instead of AWS-LC's:
//! rustls supports both, and ring is what the rest of the process's TLS
//! uses (the shared state's PostgreSQL connections).

use std::sync::OnceLock;

use aws_sdk_sts::config::SharedHttpClient;
use aws_smithy_http_client::proxy::ProxyConfig;
use aws_smithy_http_client::tls::{rustls_provider::CryptoMode, Provider};
use aws_smithy_http_client::{Builder, ConnectorBuilder};

/// The process's client (made on first use).
pub fn client() -> SharedHttpClient {
    static CLIENT: OnceLock<SharedHttpClient> = OnceLock::new();
    CLIENT
        .get_or_init(|| {
            // As aws-smithy-runtime's `default_https_client` for the
            // current behaviour version, with `CryptoMode::Ring`.
            Builder::new().build_with_connector_fn(|settings, components| {
                let mut conn =
                    ConnectorBuilder::default().tls_provider(Provider::Rustls(CryptoMode::Ring));
                conn.set_connector_settings(settings.cloned());
                if let Some(components) = components {
                    conn.set_sleep_impl(components.sleep_impl());
                }
                conn.set_proxy_config(Some(ProxyConfig::from_env()));
                conn.build()
            })
        })
        .clone()
}
