//! STS over HTTPS, as every real deployment calls it (`sts.amazonaws.com`):
//! the S3/STS emulation behind a TLS proxy whose certificate a CA made for
//! the test signed. With that CA among the process's trusted roots
//! (`SSL_CERT_FILE`, which the AWS SDK's client reads with the system's),
//! the gateway assumes the role over TLS and reads S3 with the session's
//! credentials; without it the certificate does not verify, so start-up
//! fails (exit 2) and the log says why, never showing a key.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};

use crate::common::S3Server;
use serde_json::json;

/// tests/support/tls_proxy.py: TLS on a free port of 127.0.0.1 with
/// `certs/server.crt`, plain TCP to `target`.
struct TlsProxy {
    child: Child,
    _stdin: ChildStdin,
    port: u16,
    log: PathBuf,
}

impl TlsProxy {
    fn start(certs: &Path, target: &str) -> TlsProxy {
        let log = certs.join("proxy.log");
        let mut child = Command::new(common::test_python())
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/support/tls_proxy.py"
            ))
            .arg("--cert")
            .arg(certs.join("server.crt"))
            .arg("--key")
            .arg(certs.join("server.key"))
            .args(["--target", target])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("spawn the TLS proxy");
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .strip_prefix("READY ")
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "the TLS proxy did not start: {line}{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        TlsProxy {
            child,
            _stdin: stdin,
            port,
            log,
        }
    }

    /// The handshakes it completed (`TLS <version> <cipher>` lines).
    fn handshakes(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("TLS "))
            .map(str::to_string)
            .collect()
    }
}

impl Drop for TlsProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn sts_over_verified_tls() {
    let s3 = S3Server::start(&[]);
    let certs = tempfile::tempdir().unwrap();
    common::pg_tls::make_certificates(certs.path());
    let target = s3.str("sts_endpoint");
    let target = target
        .strip_prefix("http://")
        .unwrap()
        .trim_end_matches('/');
    let proxy = TlsProxy::start(certs.path(), target);
    // `localhost`, a name the certificate carries, as a real endpoint's.
    let sts = format!("https://localhost:{}", proxy.port);
    let keys = [s3.str("secret_access_key"), s3.str("access_key_id")];

    // The test's CA trusted: the role is assumed over TLS, S3 reads work.
    let g = s3
        .app(3600)
        .env("DUCKGATE_STS_ENDPOINT", &sts)
        .env("SSL_CERT_FILE", certs.path().join("ca.pem").display())
        .start();
    let v = g
        .query_ok("SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')")
        .await;
    assert_eq!(v["rows"], json!([[3]]), "{v}");
    assert_eq!(g.health().await["credential_epoch"], 1);
    let handshakes = proxy.handshakes();
    eprintln!("handshakes: {handshakes:?}");
    assert!(!handshakes.is_empty(), "no STS call went through the proxy");
    assert!(
        handshakes.iter().all(|h| h.starts_with("TLS TLSv1.")),
        "{handshakes:?}"
    );
    let log = g.log_text();
    for k in &keys {
        assert!(!log.contains(&k[..16]), "a key reached the log");
    }
    drop(g);

    // Not trusted: the certificate does not verify, start-up stops, the
    // log names the certificate.
    let before = proxy.handshakes().len();
    let b = s3.app(3600).env("DUCKGATE_STS_ENDPOINT", &sts);
    let (code, log) = match tokio::task::spawn_blocking(move || b.try_start())
        .await
        .unwrap()
    {
        Ok(g) => panic!(
            "started with an STS certificate it cannot verify:\n{}",
            g.log_text()
        ),
        Err((code, log)) => (code, log.join("\n")),
    };
    eprintln!(
        "untrusted: exit {code:?}: {}",
        log.lines().last().unwrap_or("")
    );
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("STS AssumeRole"), "{log}");
    assert!(log.contains("certificate"), "{log}");
    for k in &keys {
        assert!(!log.contains(&k[..16]), "a key reached the log");
    }
    // No handshake completed: the client refused the server's certificate.
    assert_eq!(proxy.handshakes().len(), before, "{:?}", proxy.handshakes());
}
