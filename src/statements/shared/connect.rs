//! Opening the pool to the shared state: TLS as the DSN asks, and the schema
//! migrated before first use.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::{db, Shared, SharedError};

/// How long opening a pooled session may take (see [`Shared::connect`]).
const CREATE_TIMEOUT: Duration = Duration::from_secs(20);

/// The TLS of the connections: rustls (with ring, as the AWS SDK's client)
/// verifying the server's certificate and host name against the system's
/// roots plus, if given, the PEM certificates of `ca_file`. Used as the
/// DSN's `sslmode` says: `disable` never, `prefer` (the default) when the
/// server offers it, `require` always; verified whenever used.
fn tls(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, SharedError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a system CA certificate could not be read");
    }
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                format!(
                    "DUCKGATE_STATE_CA_FILE: cannot read PEM certificates from {}: {e}",
                    path.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!(
                "DUCKGATE_STATE_CA_FILE: {} holds no PEM certificate",
                path.display()
            ));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                format!(
                    "DUCKGATE_STATE_CA_FILE: a certificate in {} is not a usable CA: {e}",
                    path.display()
                )
            })?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

impl Shared {
    /// Connects to `dsn` (over TLS as its `sslmode` says, trusting the
    /// system's roots and `ca_file`) with a pool of at most `pool_size`
    /// sessions (DUCKGATE_STATE_POOL_SIZE), and creates the schema if it
    /// is missing.
    pub async fn connect(
        dsn: &str,
        pool_size: usize,
        ca_file: Option<&Path>,
        stale: Duration,
        dependency: Arc<crate::state::Dependency>,
        replica: String,
    ) -> Result<Self, SharedError> {
        // The parser's error could quote the string: it is not passed on.
        let mut config: tokio_postgres::Config = dsn.parse().map_err(|_| {
            if dsn.contains("verify-full") || dsn.contains("verify-ca") {
                "DUCKGATE_STATE_DSN: sslmode verify-full and verify-ca are not accepted; \
                 sslmode=require verifies the server's certificate and host name here"
                    .to_string()
            } else {
                "DUCKGATE_STATE_DSN is not a PostgreSQL connection string".to_string()
            }
        })?;
        if config.get_application_name().is_none() {
            // So the server's pg_stat_activity says whose connections these are.
            config.application_name("duckgate");
        }
        let tls = tls(ca_file)?;
        tracing::info!(
            sslmode = match config.get_ssl_mode() {
                SslMode::Disable => "disable",
                SslMode::Prefer => "prefer",
                _ => "require",
            },
            ca_file = ca_file.map(|p| p.display().to_string()).unwrap_or_default(),
            "connecting to the shared state"
        );
        // A dead replica's session, and so its lock, must go: keepalives
        // find a peer that vanished without closing.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.keepalives_interval(Duration::from_secs(5));
        config.keepalives_retries(3);
        config.connect_timeout(Duration::from_secs(10));
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(Duration::from_secs(5)))
            // A new session takes four or five round trips (TLS or its
            // refusal, start-up, SCRAM): 6 s at 1.5 s a round trip.
            .create_timeout(Some(CREATE_TIMEOUT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(db)?;
        let shared = Shared {
            pool,
            unreleased: std::sync::Mutex::new(Vec::new()),
            replica,
            stale,
            connect: (config, tls),
            dependency,
        };
        shared.migrate().await?;
        shared.heartbeat("[]").await?;
        Ok(shared)
    }
}
