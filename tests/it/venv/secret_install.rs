//! Secrets reach DuckDB without SQL text (issue 20): the rotator installs
//! S3 credentials through DuckDB's secret manager (`engine::secrets`, a C++
//! shim), so DuckDB's query log, which records every statement of every
//! connection once logging is on, never holds a key. The control case shows
//! the log does record a `CREATE SECRET` statement with its values, which is
//! how the gateway installed secrets before.

use crate::common;

use std::sync::Arc;

use duckgate::engine::{ffi, secrets};

const KEY_ID: &str = "AKIASHIMTEST00000001";
const SECRET: &str = "shim-secret-value-9d1f";
const TOKEN: &str = "shim-session-token-77a2";

fn database() -> Arc<ffi::RawDatabase> {
    let db = ffi::RawDatabase::open(
        None,
        &[
            ("extension_directory", common::extension_dir()),
            ("autoinstall_known_extensions", "false".into()),
            ("autoload_known_extensions", "false".into()),
        ],
    )
    .unwrap();
    Arc::new(db)
}

fn logged(conn: &ffi::Connection) -> Vec<String> {
    let mut stmt = conn
        .prepare("SELECT message FROM duckdb_logs WHERE type = 'QueryLog' ORDER BY timestamp")
        .unwrap();
    stmt.query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn secrets_are_installed_without_statement_text() {
    let db = database();
    let conn = db.connect().unwrap();
    conn.execute_batch("LOAD httpfs; CALL enable_logging(['QueryLog'])")
        .unwrap();
    let raw = db.connect_raw().unwrap();
    let options = [
        ("key_id", KEY_ID),
        ("secret", SECRET),
        ("session_token", TOKEN),
        ("region", "eu-west-3"),
        ("use_ssl", "false"),
        ("endpoint", "127.0.0.1:9"),
        ("url_style", "path"),
    ];
    let scope = ["s3://shim-bucket/prefix/".to_string()];
    secrets::install_s3(&raw, "s3_shim", &options, &scope).unwrap();
    // Replacing it works the same way (a rotation), without ambiguity.
    secrets::install_s3(&raw, "s3_shim", &options, &scope).unwrap();

    // DuckDB holds the secret as CREATE SECRET would have made it.
    let which: String = conn
        .prepare("SELECT name FROM which_secret('s3://shim-bucket/prefix/x.csv', 's3')")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    assert_eq!(which, "s3_shim");
    let described: String = conn
        .prepare("SELECT secret_string FROM duckdb_secrets() WHERE name = 's3_shim'")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    // (DuckDB redacts the secret and the token here; the S3 rotation tests
    // sign real requests with them.)
    for part in [
        KEY_ID,
        "eu-west-3",
        "127.0.0.1:9",
        "path",
        "s3://shim-bucket/prefix/",
    ] {
        assert!(described.contains(part), "{part} missing from {described}");
    }
    let persistent: bool = conn
        .prepare("SELECT persistent FROM duckdb_secrets() WHERE name = 's3_shim'")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    assert!(!persistent, "the secret is temporary");

    // The query log records statements (the ones above), never the values.
    let log = logged(&conn);
    assert!(log.iter().any(|m| m.contains("which_secret")), "{log:?}");
    for value in [KEY_ID, SECRET, TOKEN] {
        assert!(
            !log.iter().any(|m| m.contains(value)),
            "a credential reached DuckDB's query log: {log:?}"
        );
    }

    // Control: the statement text the gateway used to run is logged whole,
    // from any connection.
    let other = db.connect().unwrap();
    other
        .execute_batch(&format!(
            "CREATE OR REPLACE TEMPORARY SECRET s3_text (TYPE s3, KEY_ID '{KEY_ID}', SECRET '{SECRET}', SESSION_TOKEN '{TOKEN}')"
        ))
        .unwrap();
    assert!(
        logged(&conn).iter().any(|m| m.contains(SECRET)),
        "the control case shows the query log records secret DDL"
    );
}

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn an_install_fails_while_logging_is_on_and_names_no_value() {
    let db = database();
    let conn = db.connect().unwrap();
    conn.execute_batch("LOAD httpfs").unwrap();
    let raw = db.connect_raw().unwrap();
    assert_eq!(secrets::logging_off(&raw), Ok(()));
    conn.execute_batch("CALL enable_logging()").unwrap();
    let on = secrets::logging_off(&raw).unwrap_err();
    assert!(on.contains("enable_logging"), "{on}");
    conn.execute_batch("CALL disable_logging()").unwrap();
    assert_eq!(secrets::logging_off(&raw), Ok(()));
    // The query log file, DuckDB's other record of statements (a global
    // setting: set from another connection, seen on the control one).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("queries.log");
    conn.execute_batch(&format!("SET GLOBAL log_query_path = '{}'", log.display()))
        .unwrap();
    let on = secrets::logging_off(&raw).unwrap_err();
    assert!(on.contains("log_query_path"), "{on}");
    conn.execute_batch("RESET GLOBAL log_query_path").unwrap();
    assert_eq!(secrets::logging_off(&raw), Ok(()));
    conn.execute_batch("CALL enable_logging()").unwrap();
    // A refused install (an unknown option) names DuckDB's error class only.
    let err = secrets::install_s3(
        &raw,
        "s3_bad",
        &[
            ("key_id", KEY_ID),
            ("secret", SECRET),
            ("no_such_option", TOKEN),
        ],
        &[],
    )
    .unwrap_err();
    for value in [KEY_ID, SECRET, TOKEN] {
        assert!(!err.contains(value), "{err}");
    }
    assert!(err.contains("error while installing the secret"), "{err}");
}

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn a_catalogs_password_is_installed_without_statement_text() {
    // What a DuckLake catalog on PostgreSQL names with META_SECRET: the
    // password goes through the secret manager as the S3 keys do.
    const PASSWORD: &str = "catalog-password-5e0c";
    let db = database();
    let conn = db.connect().unwrap();
    conn.execute_batch("LOAD postgres_scanner; CALL enable_logging(['QueryLog'])")
        .unwrap();
    let raw = db.connect_raw().unwrap();
    secrets::install_postgres_password(&raw, "duckgate_catalog_lake", PASSWORD).unwrap();
    secrets::install_postgres_password(&raw, "duckgate_catalog_lake", PASSWORD).unwrap();
    let (kind, persistent): (String, bool) = conn
        .prepare(
            "SELECT type, persistent FROM duckdb_secrets() WHERE name = 'duckgate_catalog_lake'",
        )
        .unwrap()
        .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap();
    assert_eq!((kind.as_str(), persistent), ("postgres", false));
    // DuckDB shows the option redacted (the lake suite attaches with the
    // password for real).
    let shown: String = conn
        .prepare("SELECT secret_string FROM duckdb_secrets() WHERE name = 'duckgate_catalog_lake'")
        .unwrap()
        .query_row([], |r| r.get(0))
        .unwrap();
    assert!(shown.contains("password=redacted"), "{shown}");
    let log = logged(&conn);
    assert!(!log.is_empty());
    assert!(
        !log.iter().any(|m| m.contains(PASSWORD)),
        "the password reached DuckDB's query log: {log:?}"
    );
    // Control: the statement the gateway used to run is logged with it.
    let other = db.connect().unwrap();
    other
        .execute_batch(&format!(
            "CREATE OR REPLACE TEMPORARY SECRET pw_text (TYPE postgres, PASSWORD '{PASSWORD}')"
        ))
        .unwrap();
    assert!(logged(&conn).iter().any(|m| m.contains(PASSWORD)));
}
