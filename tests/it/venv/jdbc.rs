//! Arrow's Flight SQL JDBC driver (`org.apache.arrow:flight-sql-jdbc-driver`
//! from Maven Central, `$DUCKGATE_TEST_FLIGHT_JDBC`, fetched by
//! scripts/test-env) against the Flight SQL listener, as DBeaver, DataGrip
//! and other JDBC tools use it: the token as the password (the driver's
//! basic-auth handshake), plain and over TLS. `tests/support/jdbc/FlightJdbc.java`
//! is compiled by the test with Java 17 and reads `DatabaseMetaData`
//! (catalogs, schemas, tables, columns with their type names), runs a query
//! and a prepared statement with parameters, and cancels a running query.
//! Every answer is compared with Python DuckDB 1.5.5's over a copy of the
//! same database file.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{eventually, python, App, Gateway};

const TOKEN: &str = "analyst:jdbc-token-2b9e";
const SECRET: &str = "jdbc-token-2b9e";

/// The data: a schema with a table and a view, a table in `main`.
const SEED: &str = r#"
import sys, duckdb
c = duckdb.connect(sys.argv[1])
c.execute("""
CREATE SCHEMA sales;
CREATE TABLE sales.orders AS
    SELECT i AS id, 'item-' || i AS name, (i * 1.25)::DECIMAL(10, 2) AS amount,
           DATE '2024-01-01' + i::INTEGER AS placed, i % 3 = 0 AS flagged,
           TIMESTAMP '2024-01-02 03:04:05' + INTERVAL (i) MINUTE AS seen,
           i / 7 AS ratio, [i, i + 1] AS pair, gen_random_uuid() AS token
    FROM range(200) t(i);
CREATE VIEW sales.big AS SELECT id, amount FROM sales.orders WHERE amount > 100;
CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, joined TIMESTAMP, score HUGEINT);
INSERT INTO customers VALUES (1, 'Ada', '2024-01-02 03:04:05', 12), (2, 'Grace', NULL, NULL);
""")
c.close()
"#;

/// The query and the prepared statement both sides run.
const QUERY: &str = "SELECT id, name, amount, placed, flagged, seen, ratio FROM sales.orders WHERE id % 17 = 0 ORDER BY id";
const PREPARED: &str =
    "SELECT id, name, amount FROM sales.orders WHERE id BETWEEN ? AND ? AND name <> ? ORDER BY id";
const PARAMS: [&str; 3] = ["long:10", "long:20", "string:item-15"];

/// DuckDB's answers over the copy, in the form `FlightJdbc.java` prints.
const REFERENCE: &str = r#"
import datetime, decimal, json, sys
import duckdb

REF, QUERY, PREPARED = sys.argv[1], sys.argv[2], sys.argv[3]
c = duckdb.connect(REF, read_only=True)

def value(v):
    if isinstance(v, decimal.Decimal):
        return format(v, "f")
    if isinstance(v, datetime.datetime):
        return v.strftime("%Y-%m-%d %H:%M:%S")
    if isinstance(v, datetime.date):
        return v.isoformat()
    return v

def rows(sql, params=None):
    return [[value(v) for v in r] for r in c.execute(sql, params).fetchall()]

out = {
    "catalogs": rows("SELECT DISTINCT database_name FROM duckdb_databases() WHERE NOT internal ORDER BY 1"),
    "schemas": rows("""SELECT schema_name, database_name FROM duckdb_schemas()
                       WHERE database_name NOT IN ('system', 'temp')
                       AND schema_name NOT IN ('information_schema', 'pg_catalog')
                       ORDER BY database_name, schema_name"""),
    "tables": rows("""SELECT database_name, schema_name, table_name, 'TABLE' FROM duckdb_tables() WHERE NOT internal
                      UNION ALL
                      SELECT database_name, schema_name, view_name, 'VIEW' FROM duckdb_views() WHERE NOT internal
                      ORDER BY 4, 1, 2, 3"""),
    "columns": rows("""SELECT database_name, schema_name, table_name, column_name, data_type, column_index
                       FROM duckdb_columns() WHERE NOT internal
                       ORDER BY database_name, schema_name, table_name, column_index"""),
    "query": rows(QUERY),
    "prepared": [rows(PREPARED, [10, 20, "item-15"]), rows(PREPARED, [11, 21, "item-15"])],
}
print(json.dumps(out))
"#;

/// The JDBC driver's jar (`scripts/test-env` fetches it).
fn driver() -> String {
    std::env::var("DUCKGATE_TEST_FLIGHT_JDBC").unwrap_or_else(|_| {
        panic!("DUCKGATE_TEST_FLIGHT_JDBC is not set: run the suite with scripts/test (scripts/test-env fetches the driver)")
    })
}

/// `FlightJdbc.java` compiled into `dir`.
fn compile(dir: &Path) {
    let source = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/jdbc/FlightJdbc.java"
    );
    let out = Command::new("javac")
        .args(["-d", dir.to_str().unwrap(), "-cp", &driver(), source])
        .output()
        .expect("javac (Java 17, scripts/test-env installs it)");
    assert!(
        out.status.success(),
        "javac: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs the program: its JSON answer.
fn run_jdbc(classes: &Path, args: &[&str]) -> Value {
    let classpath = format!("{}:{}", driver(), classes.display());
    let out = Command::new("java")
        // Arrow's memory needs java.nio opened on Java 17; timestamps
        // without a zone are read in UTC.
        .args([
            "--add-opens=java.base/java.nio=ALL-UNNAMED",
            "-Duser.timezone=UTC",
            "-cp",
            &classpath,
            "FlightJdbc",
        ])
        .args(args)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str(last).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .rev()
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        )
    })
}

/// A gateway over `db` with the Flight SQL listener (with TLS when `tls`
/// names a certificate directory), and its host:port.
async fn gateway(db: &Path, tls: Option<&Path>) -> (App, String) {
    let mut b = Gateway::builder()
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_DATABASE", db.to_str().unwrap());
    if let Some(dir) = tls {
        b = b
            .env(
                "DUCKGATE_FLIGHT_TLS_CERT",
                dir.join("server.crt").to_str().unwrap(),
            )
            .env(
                "DUCKGATE_FLIGHT_TLS_KEY",
                dir.join("server.key").to_str().unwrap(),
            );
    }
    let app = b.spawn_app().await;
    let uri = app.flight_uri().await;
    let addr = uri.split("://").nth(1).unwrap().to_string();
    (app, addr)
}

/// The seeded database and a copy of it for DuckDB's reference answers.
fn seed(dir: &Path) -> (PathBuf, PathBuf) {
    let db = dir.join("shop.duckdb");
    python(SEED, &[db.to_str().unwrap()]);
    std::fs::create_dir(dir.join("ref")).unwrap();
    let reference = dir.join("ref").join("shop.duckdb");
    std::fs::copy(&db, &reference).unwrap();
    (db, reference)
}

#[tokio::test]
#[ignore = "tier venv: needs Java 17, the Flight SQL JDBC driver and Python DuckDB; scripts/test installs them"]
async fn the_flight_sql_jdbc_driver_reads_metadata_queries_prepares_and_cancels_like_duckdb() {
    let dir = tempfile::tempdir().unwrap();
    let (db, reference) = seed(dir.path());
    let classes = dir.path().join("classes");
    compile(&classes);
    let (app, addr) = gateway(&db, None).await;
    let url = format!("jdbc:arrow-flight-sql://{addr}/?useEncryption=false");
    let mut args = vec![url.as_str(), "dbeaver", SECRET, "full", QUERY, PREPARED];
    args.extend(PARAMS);
    let jdbc = tokio::task::spawn_blocking({
        let classes = classes.clone();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        move || {
            run_jdbc(
                &classes,
                &args.iter().map(String::as_str).collect::<Vec<_>>(),
            )
        }
    })
    .await
    .unwrap();
    let want: Value = {
        let out = python(REFERENCE, &[reference.to_str().unwrap(), QUERY, PREPARED]);
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    assert_eq!(jdbc["error"], Value::Null, "{jdbc:#}");

    // The metadata a BI tool's navigator shows, as DuckDB lists it.
    assert_eq!(jdbc["catalogs"], want["catalogs"], "{jdbc:#}");
    let mut schemas = jdbc["schemas"].as_array().unwrap().clone();
    schemas.sort_by_key(|s| (s[1].to_string(), s[0].to_string()));
    assert_eq!(Value::Array(schemas), want["schemas"], "{jdbc:#}");
    // TABLE_CAT, TABLE_SCHEM, TABLE_NAME, TABLE_TYPE of each table.
    let mut tables: Vec<Value> = jdbc["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| Value::Array(t.as_array().unwrap()[..4].to_vec()))
        .collect();
    tables.sort_by_key(|t| {
        (
            t[3].to_string(),
            t[0].to_string(),
            t[1].to_string(),
            t[2].to_string(),
        )
    });
    assert_eq!(Value::Array(tables), want["tables"], "{jdbc:#}");
    assert_eq!(jdbc["columns"], want["columns"], "{jdbc:#}");
    assert_eq!(jdbc["table_types"], json!([["TABLE"], ["VIEW"]]));
    // A query and a prepared statement, each run twice with other values.
    assert_eq!(jdbc["query"], want["query"], "{jdbc:#}");
    assert_eq!(jdbc["query"].as_array().unwrap().len(), 12);
    assert_eq!(jdbc["prepared"], want["prepared"], "{jdbc:#}");
    // Cancel (the driver cancels the result's stream): the reader stopped,
    // the gateway interrupted the query, the connection serves the next.
    let cancel = &jdbc["cancel"];
    assert_eq!(cancel["ended"], true, "{cancel:#}");
    assert_ne!(cancel["seen"], "finished", "{cancel:#}");
    assert_eq!(jdbc["after_cancel"], json!([[42]]), "{jdbc:#}");
    eventually(
        "the cancelled query's audit line",
        std::time::Duration::from_secs(10),
        || {
            let log = app.log_text();
            async move {
                log.lines()
                    .any(|l| {
                        l.contains("query ended")
                            && l.contains("api=\"flight\"")
                            && l.contains("outcome=client-gone")
                    })
                    .then_some(())
                    .ok_or("no interrupted flight query yet")
            }
        },
    )
    .await;
    // The token never reaches the log.
    assert!(!app.log_text().contains(SECRET));
}

#[tokio::test]
#[ignore = "tier venv: needs Java 17, the Flight SQL JDBC driver and Python DuckDB; scripts/test installs them"]
async fn the_jdbc_driver_connects_over_tls_and_a_wrong_token_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (db, _reference) = seed(dir.path());
    let certs = dir.path().join("certs");
    std::fs::create_dir(&certs).unwrap();
    crate::common::pg_tls::make_certificates(&certs);
    let classes = dir.path().join("classes");
    compile(&classes);
    let (_app, addr) = gateway(&db, Some(&certs)).await;
    let ca = certs.join("ca.pem");
    let sql = "SELECT count(*) AS n, sum(amount) AS total FROM sales.orders";
    let tls = format!(
        "jdbc:arrow-flight-sql://{addr}/?useEncryption=true&tlsRootCerts={}",
        ca.display()
    );
    let plain = format!("jdbc:arrow-flight-sql://{addr}/?useEncryption=false");
    let untrusted = format!("jdbc:arrow-flight-sql://{addr}/?useEncryption=true");
    let (ok, wrong, no_ca, no_tls) = tokio::task::spawn_blocking(move || {
        (
            run_jdbc(&classes, &[&tls, "dbeaver", SECRET, "query", sql]),
            run_jdbc(&classes, &[&tls, "dbeaver", "not-the-token", "query", sql]),
            run_jdbc(&classes, &[&untrusted, "dbeaver", SECRET, "query", sql]),
            run_jdbc(&classes, &[&plain, "dbeaver", SECRET, "query", sql]),
        )
    })
    .await
    .unwrap();
    let want: Value = {
        let out = python(
            r#"
import json, sys, duckdb
c = duckdb.connect(sys.argv[1], read_only=True)
n, total = c.sql(sys.argv[2]).fetchone()
print(json.dumps([[n, format(total, "f")]]))
"#,
            &[
                db.to_str()
                    .unwrap()
                    .replace("shop.duckdb", "ref/shop.duckdb")
                    .as_str(),
                sql,
            ],
        );
        serde_json::from_str(out.lines().last().unwrap()).unwrap()
    };
    assert_eq!(ok["rows"], want, "{ok:#}");
    let refused = wrong["error"].as_str().unwrap_or_default();
    assert!(
        refused.to_ascii_lowercase().contains("unauthenticated")
            || refused.to_ascii_lowercase().contains("authenticat"),
        "{wrong:#}"
    );
    assert!(!refused.contains(SECRET), "{wrong:#}");
    assert!(no_ca["error"].is_string(), "{no_ca:#}");
    assert!(no_tls["error"].is_string(), "{no_tls:#}");
}
