//! The guard's verdicts on an in-memory database, one family per test.

use super::*;

fn rules(policy: Policy) -> Rules {
    Rules {
        policy,
        paths: PathRules {
            files_dir: Some("/srv/files/".into()),
            s3_scope: vec!["s3://data/".into()],
            s3: true,
            s3_refused: Vec::new(),
            redacted: false,
        },
        client_schema: None,
        writable: match policy {
            Policy::ReadOnly => Vec::new(),
            Policy::ReadWrite => vec!["memory".into()],
        },
        access: None,
        confined_plans: false,
    }
}

/// The guard on an in-memory database (no extensions), after `setup`.
fn verdict(policy: Policy, setup: &str, sql: &str) -> Result<Accepted, Refusal> {
    let db = std::sync::Arc::new(crate::engine::ffi::RawDatabase::open(None, &[]).unwrap());
    let conn = db.connect().unwrap();
    if !setup.is_empty() {
        conn.execute_batch(setup).unwrap();
    }
    let raw = db.connect_raw().unwrap();
    check(&raw, sql, &rules(policy))
}

fn refused_as(policy: Policy, setup: &str, sql: &str) -> String {
    match verdict(policy, setup, sql) {
        Err(Refusal::Forbidden { kind, .. }) => kind,
        other => format!("not forbidden: {other:?}"),
    }
}

fn ro(sql: &str) -> String {
    refused_as(Policy::ReadOnly, "", sql)
}

fn rw(setup: &str, sql: &str) -> String {
    refused_as(Policy::ReadWrite, setup, sql)
}

#[test]
fn plain_queries_are_accepted_with_their_kind() {
    for (sql, kind) in [
        ("SELECT 42", "SELECT"),
        ("WITH t AS (SELECT 1 a) SELECT a FROM t", "SELECT"),
        ("FROM range(3)", "SELECT"),
        ("VALUES (1), (2)", "SELECT"),
        (
            "SELECT upper('a'), sum(i) OVER () FROM range(3) t(i)",
            "SELECT",
        ),
        ("DESCRIBE SELECT 1 AS a", "DESCRIBE"),
        // Method calls and qualified names are judged by the name called.
        ("SELECT x.upper() FROM (SELECT 'a' AS x)", "SELECT"),
        ("SELECT system.main.upper('a')", "SELECT"),
        ("SELECT [1, 2].list_sum()", "SELECT"),
        ("SUMMARIZE SELECT 1 AS a", "SUMMARIZE"),
        ("SELECT * FROM information_schema.tables", "SELECT"),
        ("SELECT * FROM duckdb_tables()", "SELECT"),
        ("EXPLAIN SELECT 1", "EXPLAIN SELECT"),
        ("EXPLAIN ANALYZE SELECT 1", "EXPLAIN ANALYZE SELECT"),
        ("SELECT $1::INTEGER + 1", "SELECT"),
        ("SELECT\u{a0}42\u{3000}AS\u{2003}x", "SELECT"),
        ("SELECT '\u{a0}' AS \"\u{a0}\"", "SELECT"),
        (
            "SELECT 'duckdb_secrets()' AS s, 1 AS current_setting",
            "SELECT",
        ),
    ] {
        let a = verdict(Policy::ReadOnly, "", sql).unwrap_or_else(|e| panic!("{sql}: {e:?}"));
        assert_eq!(a.kind, kind, "{sql}");
        assert!(a.read_only);
    }
}

#[test]
fn functions_off_the_allow_list_are_refused_wherever_they_hide() {
    for sql in [
        "SELECT current_setting('s3_secret_access_key')",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM duckdb_secrets()",
        "SELECT * FROM which_secret('s3://data/x', 's3')",
        "SELECT getenv('HOME')",
        "SELECT * FROM query('SELECT 1')",
        "SELECT * FROM query_table('t')",
        "SELECT * FROM enable_logging('HTTP')",
        "SELECT * FROM checkpoint()",
        "SELECT * FROM duckdb_logs()",
        "SELECT * FROM duckdb_external_file_cache()",
        "SELECT * FROM duckdb_temporary_files()",
        "SELECT setseed(0.5)",
        "SELECT json_serialize_plan('SELECT 1')",
        "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))",
        "SELECT (SELECT current_setting('threads'))",
        "SELECT 1 WHERE EXISTS (SELECT * FROM duckdb_secrets())",
        "WITH s AS (SELECT * FROM duckdb_secrets()) SELECT * FROM s",
        "SELECT list_transform([1], x -> current_setting('threads'))",
        "SELECT system.main.current_setting('threads')",
        "SELECT ('threads').current_setting()",
        "SELECT s.getenv() FROM (SELECT 'HOME' AS s)",
        "SELECT pg_catalog.current_setting('threads')",
        "SELECT * FROM pg_catalog.pg_settings",
        "SELECT * FROM pg_settings",
        "SELECT * FROM duckdb_databases",
        "SELECT * FROM system.main.duckdb_tables",
        "DESCRIBE SELECT current_setting('threads')",
        "SUMMARIZE SELECT * FROM duckdb_secrets()",
        "EXPLAIN ANALYZE SELECT * FROM duckdb_secrets()",
        "SELECT no_such_function_x(1)",
        "SELECT * FROM pragma_version()",
    ] {
        let kind = ro(sql);
        assert!(
            kind.starts_with("function ")
                || kind.starts_with("view ")
                || kind.starts_with("table "),
            "{sql}: {kind}"
        );
    }
}

#[test]
fn lexer_tricks_cannot_hide_calls() {
    // The trick of issue 9 (#4): a no-break space after a comment made a
    // second tokenizer see a string where DuckDB saw a call.
    let t = "CREATE TYPE \"a\u{a0}e\" AS VARCHAR";
    for blank in [
        "\u{a0}", "\u{2000}", "\u{200b}", "\u{202f}", "\u{3000}", "\u{feff}", "\u{85}",
    ] {
        let sql = format!(
            "CREATE VIEW v1 AS SELECT /*'*/ a{blank}e'\\' AS x, * FROM duckdb_secrets() --'"
        );
        let got = rw(t, &sql);
        assert!(
            got == "function duckdb_secrets()" || got.starts_with("not forbidden: Err(Parse"),
            "{blank:?}: {got}"
        );
        for sql in [
            format!("SELECT /*{blank}*/ * FROM duckdb_secrets()"),
            format!("SELECT 1 --{blank}\n, current_setting('threads')"),
            format!("SELECT $x${blank}$x$, current_setting('threads')"),
            format!("SELECT e'\\''{blank}, current_setting('threads')"),
        ] {
            assert_eq!(
                ro(&sql),
                if sql.contains("duckdb_secrets") {
                    "function duckdb_secrets()"
                } else {
                    "function current_setting()"
                },
                "{sql:?}"
            );
        }
    }
}

#[test]
fn paths_are_literal_scoped_and_plain() {
    for sql in [
        "SELECT * FROM 's3://data/t.parquet?s3_endpoint=127.0.0.1:47001'",
        "SELECT * FROM read_parquet('s3://data/t.parquet?s3_endpoint=127.0.0.1:47001')",
        "SELECT * FROM read_parquet(['s3://data/a.parquet', 's3://data/b?s3_url_style=vhost'])",
        "SELECT content FROM read_text('s3://data/moto-api/data.json?s3_endpoint=u@127.0.0.1:1&s3_url_style=vhost')",
        "SELECT * FROM parquet_metadata('s3://data/t.parquet?s3_endpoint=x')",
        "SELECT * FROM glob('s3://data/*?s3_endpoint=x')",
        "DESCRIBE SELECT * FROM 's3://data/t.parquet?s3_endpoint=x'",
        "SELECT * FROM 's3://data/../other/t.parquet'",
        "SELECT * FROM 's3://data/%2e%2e/other/t.parquet'",
        "SELECT * FROM 's3://other/t.parquet'",
        "SELECT * FROM read_csv('http://127.0.0.1:1/x.csv')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_text('/srv/files/../secrets/x')",
        "SELECT * FROM 'relative.csv'",
        "SELECT * FROM read_parquet('s3://data/x' || '.parquet')",
        "SELECT * FROM read_parquet(concat('s3://data/t.parquet', chr(63), 's3_endpoint=x'))",
        "SELECT * FROM read_parquet(?)",
        "SELECT * FROM read_parquet('s3://data/a.parquet', 's3://data/b.parquet')",
        // Qualified names DuckDB joins into a path (replacement scans).
        "SELECT * FROM \"/etc/passwd\".csv",
        "SELECT * FROM \"/srv\".\"files/../x\".csv",
        "SELECT * FROM \"s3://data/t\".\"parquet?s3_endpoint=x\"",
        "SELECT * FROM \"s3://other/t\".parquet",
        "SELECT * FROM relative.csv",
    ] {
        let kind = ro(sql);
        assert!(
            kind.starts_with("path ") || kind.starts_with("function "),
            "{sql}: {kind}"
        );
    }
}

#[test]
fn statement_kinds_outside_the_policy_are_refused() {
    for (sql, kind) in [
        ("PRAGMA show_tables", "PRAGMA"),
        ("PRAGMA version", "PRAGMA"),
        ("SET threads = 1", "SET"),
        ("RESET threads", "RESET"),
        ("SET VARIABLE x = 1", "SET VARIABLE"),
        ("ATTACH ':memory:' AS m", "ATTACH"),
        ("INSTALL httpfs", "INSTALL"),
        ("LOAD httpfs", "LOAD"),
        ("COPY (SELECT 1) TO '/tmp/x.csv'", "COPY"),
        ("EXPORT DATABASE '/tmp/x'", "EXPORT DATABASE"),
        (
            "IMPORT DATABASE '/nonexistent-duckgate-dir'",
            "IMPORT DATABASE",
        ),
        ("CHECKPOINT", "CHECKPOINT"),
        ("BEGIN", "TRANSACTION"),
        ("CALL duckdb_secrets()", "CALL"),
        ("PREPARE p AS SELECT 1", "PREPARE"),
        ("USE memory", "USE"),
        ("CREATE SECRET s (TYPE s3)", "CREATE SECRET"),
        ("CREATE\u{a0}SECRET s (TYPE s3)", "CREATE SECRET"),
        ("DROP SECRET s", "DROP SECRET"),
        ("CREATE TABLE t (a INT)", "CREATE TABLE"),
        ("INSERT INTO nope VALUES (1)", "INSERT"),
        ("DELETE FROM nope", "DELETE"),
    ] {
        assert_eq!(ro(sql), kind, "{sql}");
    }
    assert_eq!(
        verdict(Policy::ReadOnly, "", "SELECT 1; DROP SECRET s").unwrap_err(),
        Refusal::StatementCount(2)
    );
}

#[test]
fn read_write_admits_plain_writes_but_no_connection_state() {
    let t = "CREATE TABLE t (a INTEGER, s VARCHAR)";
    for sql in [
        "INSERT INTO t VALUES (1, 'x')",
        "INSERT INTO t SELECT 1, upper('x')",
        "UPDATE t SET s = lower(s) WHERE a = 1",
        "DELETE FROM t WHERE a = 1",
        "CREATE TABLE u AS SELECT * FROM range(3)",
        "CREATE VIEW v AS SELECT a FROM t",
        "CREATE SCHEMA s2",
        "CREATE SEQUENCE q",
        "DROP TABLE t",
        "ALTER TABLE t ADD COLUMN b INTEGER",
    ] {
        assert!(
            verdict(Policy::ReadWrite, t, sql).is_ok(),
            "{sql}: {:?}",
            verdict(Policy::ReadWrite, t, sql)
        );
    }
    for (sql, kind) in [
        ("CREATE MACRO upper(x) AS 'pwned'", "CREATE MACRO"),
        ("CREATE TEMP MACRO lower(x) AS 'pwned-temp'", "CREATE MACRO"),
        ("CREATE TEMP TABLE tt (i INT)", "CREATE TEMP TABLE"),
        ("CREATE TEMPORARY VIEW tv AS SELECT 1", "CREATE TEMP VIEW"),
        (
            "CREATE OR REPLACE PERSISTENT SECRET s (TYPE s3)",
            "CREATE SECRET",
        ),
        (
            "INSERT INTO t SELECT 1, secret_string FROM duckdb_secrets()",
            "function duckdb_secrets()",
        ),
        (
            "INSERT INTO t VALUES (1, current_setting('threads'))",
            "function current_setting()",
        ),
        ("UPDATE t SET s = getenv('HOME')", "function getenv()"),
        (
            "DELETE FROM t WHERE s IN (SELECT name FROM duckdb_secrets())",
            "function duckdb_secrets()",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM duckdb_secrets()",
            "function duckdb_secrets()",
        ),
        (
            "CREATE TABLE u (a VARCHAR DEFAULT current_setting('threads'))",
            "function current_setting()",
        ),
        (
            "CREATE VIEW v AS SELECT * FROM 's3://data/x?s3_endpoint=y'",
            "path 's3://data/x?s3_endpoint=y'",
        ),
        (
            "WITH x AS (SELECT * FROM duckdb_secrets()) INSERT INTO t SELECT 1, name FROM x",
            "function duckdb_secrets()",
        ),
    ] {
        assert_eq!(rw(t, sql), kind, "{sql}");
    }
    // DuckDB makes this several statements (refused as such, or for getenv).
    let got = rw(
        t,
        "ALTER TABLE t ADD COLUMN c VARCHAR DEFAULT getenv('HOME')",
    );
    assert!(got == "MULTI" || got == "function getenv()", "{got}");
}

#[test]
fn views_over_refused_functions_are_refused_when_read() {
    // A view made before the guard existed (or by the operator): its plan
    // shows what it reads.
    let setup = "CREATE VIEW leak AS SELECT * FROM duckdb_settings()";
    assert_eq!(
        refused_as(Policy::ReadOnly, setup, "SELECT * FROM leak"),
        "function duckdb_settings()"
    );
    let setup = "CREATE MACRO upper(x) AS current_setting('threads')";
    assert_eq!(
        refused_as(Policy::ReadOnly, setup, "SELECT upper('a')"),
        "function current_setting()"
    );
}

#[test]
fn bind_errors_keep_their_class() {
    match verdict(Policy::ReadOnly, "", "SELECT * FROM no_such_table") {
        Err(Refusal::Bind { message: msg, .. }) => {
            assert!(msg.starts_with("Catalog Error: "), "{msg}")
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        verdict(Policy::ReadOnly, "", "SELEC 1"),
        Err(Refusal::Parse { .. })
    ));
    assert!(matches!(
        verdict(Policy::ReadOnly, "", "SELECT 1\0; DROP SECRET s"),
        Err(Refusal::Parse { .. })
    ));
}

#[test]
fn parse_and_bind_errors_say_where_duckdb_places_them() {
    // Where DuckDB's message says: the name it could not bind, the token it
    // stopped at. The offset is into the client's text, where the no-break
    // space DuckDB reads as one space takes two bytes.
    let sql = "SELECT\u{a0}1,\n  nope FROM range(3)";
    match verdict(Policy::ReadOnly, "", sql) {
        Err(Refusal::Bind {
            at: Some(at),
            message,
        }) => {
            assert!(message.contains("\"nope\""), "{message}");
            assert_eq!(at.offset, sql.find("nope").unwrap(), "{at:?}");
            assert_eq!((at.line, at.column), (2, 3), "{at:?}");
        }
        other => panic!("{other:?}"),
    }
    let sql = "SELECT 1\nFROM range(3)\nGROUPBY 1";
    match verdict(Policy::ReadOnly, "", sql) {
        Err(Refusal::Parse {
            at: Some(at),
            message,
        }) => {
            assert!(message.ends_with("at or near \"1\""), "{message}");
            assert_eq!(at.offset, sql.rfind('1').unwrap(), "{at:?}");
        }
        other => panic!("{other:?}"),
    }
    // A view's query is bound alone: DuckDB's place is in its text, not
    // in the client's, and is not given.
    match verdict(Policy::ReadWrite, "", "CREATE VIEW v AS SELECT\n  nope") {
        Err(Refusal::Bind { at, message }) => assert!(at.is_none(), "{message}: {at:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn long_set_operation_chains_and_deep_scalar_subqueries_are_refused_before_binding() {
    let union = |n: usize| vec!["SELECT 1"; n].join(" UNION ALL ");
    assert!(verdict(Policy::ReadOnly, "", &union(100)).is_ok());
    assert!(verdict(Policy::ReadOnly, "", &union(4001)).is_ok());
    match verdict(Policy::ReadOnly, "", &union(4002)) {
        Err(Refusal::Bind { message: m, .. }) => assert!(m.contains("4001 set operations"), "{m}"),
        other => panic!("{:.200}", format!("{other:?}")),
    }
    let nested = |d: usize| format!("SELECT {}1{}", "(SELECT ".repeat(d), ")".repeat(d));
    assert!(verdict(Policy::ReadOnly, "", &nested(10)).is_ok());
    match verdict(Policy::ReadOnly, "", &nested(30)) {
        Err(Refusal::Bind { message: m, .. }) => assert!(m.contains("exponential"), "{m}"),
        other => panic!("{:.200}", format!("{other:?}")),
    }
}
