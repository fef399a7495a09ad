//! The shared state over TLS: a PostgreSQL that takes TLS connections only
//! (`hostssl`), with a certificate from a CA made for the test. A gateway
//! with `sslmode=require` and that CA in DUCKGATE_STATE_CA_FILE starts and
//! serves a statement, its connections encrypted (`pg_stat_ssl`); without
//! the CA, or with `sslmode=disable`, it refuses to start, saying why and
//! never showing the password.

use std::path::Path;
use std::time::Duration;

use crate::common::{eventually, Gateway, GatewayBuilder, Postgres};
use serde_json::json;

const ALICE: &str = "alice-token-0123456789";
const PASSWORD: &str = "state-tls-pw-5d2b9e";

/// The state database's connection string with this `sslmode`; the
/// gateway's connections show as `app` in pg_stat_activity.
fn dsn(pg: &Postgres, sslmode: &str, app: &str) -> String {
    format!("{} sslmode={sslmode} application_name={app}", pg.dsn())
}

fn gateway(dsn: String, ca: Option<&Path>) -> GatewayBuilder {
    let mut b = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_STATE_DSN", dsn)
        .env("DUCKGATE_POOL_SIZE", 2);
    if let Some(ca) = ca {
        b = b.env("DUCKGATE_STATE_CA_FILE", ca.display());
    }
    b
}

/// The gateway does not start: its exit code and its log.
fn refused(b: GatewayBuilder) -> (Option<i32>, String) {
    match b.try_start() {
        Ok(g) => panic!("the gateway started:\n{}", g.log_text()),
        Err((code, log)) => {
            eprintln!("refused: {}", log.last().map_or("", String::as_str));
            (code, log.join("\n"))
        }
    }
}

/// (connections of `app`, of them encrypted, their TLS versions).
fn connections(pg: &Postgres, app: &str) -> (u64, u64, String) {
    let out = pg.psql(
        PASSWORD,
        "postgres",
        &format!(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl), coalesce(string_agg(DISTINCT s.version, ','), '')
             FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
             WHERE a.application_name = '{app}'"
        ),
    );
    let mut f = out.split('|');
    (
        f.next().unwrap().parse().unwrap(),
        f.next().unwrap().parse().unwrap(),
        f.next().unwrap_or_default().to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn shared_state_over_verified_tls() {
    let (pg, ca) = Postgres::start_tls(PASSWORD, "state");

    // require + the test's CA: starts, serves a statement submitted and
    // polled.
    let g = gateway(dsn(&pg, "require", "duckgate-tls"), Some(&ca)).start();
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "over-tls")
        .json(&json!({"sql": "SELECT 42 AS answer", "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    assert!(
        status == 202 || status == 200,
        "{status} {}",
        r.text().await.unwrap()
    );
    let done = eventually(
        "the statement succeeded",
        Duration::from_secs(30),
        || async {
            let (status, v) = g.get("/statements/over-tls", ALICE).await;
            match (status, v["state"].as_str()) {
                (200, Some("succeeded")) => Ok(v),
                _ => Err(format!("{status} {v}")),
            }
        },
    )
    .await;
    assert_eq!(done["rows"], 1, "{done}");
    let (status, page) = g
        .get("/statements/over-tls/result?format=json", ALICE)
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["rows"], json!([[42]]), "{page}");
    // Its row is in the shared state, written over TLS.
    assert_eq!(
        pg.psql(
            PASSWORD,
            "state",
            "SELECT state FROM duckgate_statements WHERE id = 'over-tls'"
        ),
        "succeeded"
    );
    // Every connection of the gateway is encrypted (the server would take
    // no other, and pg_stat_ssl says so).
    let (n, encrypted, versions) = connections(&pg, "duckgate-tls");
    assert!(n >= 1, "no connection of the gateway is open");
    assert_eq!(encrypted, n, "{versions}");
    assert!(versions.starts_with("TLSv1."), "{versions}");
    eprintln!("gateway connections: {n}, encrypted: {encrypted}, {versions}");
    assert!(!g.log_text().contains(PASSWORD));
    drop(g);

    // Without the CA file the server's certificate does not verify: no
    // start, exit 2, the cause named.
    let (code, log) = refused(gateway(dsn(&pg, "require", "duckgate-no-ca"), None));
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("DUCKGATE_STATE_DSN"), "{log}");
    assert!(log.contains("TLS handshake"), "{log}");
    assert!(log.contains("certificate"), "{log}");
    assert!(!log.contains(PASSWORD), "{log}");
    // prefer (the default) verifies too: a certificate that does not
    // verify is an error, not a fall back to a plain connection.
    let (code, log) = refused(gateway(dsn(&pg, "prefer", "duckgate-prefer"), None));
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("certificate"), "{log}");

    // The host name is verified: the same server under a name its
    // certificate does not carry (hostaddr connects, host names) is refused.
    let (code, log) = refused(gateway(
        dsn(&pg, "require", "duckgate-wrong-name")
            .replace("host=127.0.0.1", "host=state.invalid hostaddr=127.0.0.1"),
        Some(&ca),
    ));
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("certificate"), "{log}");

    // sslmode=disable against a hostssl-only server: refused by its
    // pg_hba.conf.
    let (code, log) = refused(gateway(dsn(&pg, "disable", "duckgate-plain"), Some(&ca)));
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("no encryption"), "{log}");
    assert!(!log.contains(PASSWORD), "{log}");

    // A CA file that holds no certificate is named as such.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("not-a-ca.pem");
    std::fs::write(&bad, "not a certificate\n").unwrap();
    let (code, log) = refused(gateway(dsn(&pg, "require", "duckgate-bad-ca"), Some(&bad)));
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("DUCKGATE_STATE_CA_FILE"), "{log}");

    // The CA file without a DSN is a configuration mistake.
    let (code, log) = refused(
        Gateway::builder()
            .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
            .env("DUCKGATE_STATE_CA_FILE", ca.display()),
    );
    assert_eq!(code, Some(2), "{log}");
    assert!(log.contains("DUCKGATE_STATE_CA_FILE"), "{log}");

    // None of the refused gateways left a connection behind.
    for app in [
        "duckgate-no-ca",
        "duckgate-prefer",
        "duckgate-wrong-name",
        "duckgate-plain",
    ] {
        assert_eq!(connections(&pg, app).0, 0, "{app}");
    }
}
