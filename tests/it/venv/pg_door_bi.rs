//! BI tools through the PostgreSQL door (issue 58), driven as their drivers
//! drive it; every answer compared with DuckDB's over a copy of the same
//! database holding what the identity may read:
//! - Grafana's PostgreSQL data source: `tests/support/go/bidrivers` (built
//!   by scripts/test-env) connects with github.com/jackc/pgx/v5 as
//!   Grafana's backend does (the health check's `Ping`, every query in the
//!   simple protocol, values decoded as Grafana's frames hold them), with
//!   pgx's own default (the extended protocol, binary results, parameters)
//!   and with github.com/lib/pq (Grafana's older backend), and runs the
//!   settings page's version and TimescaleDB checks, the query builder's
//!   table and column lists (Grafana's SQL: `quote_ident`, `parse_ident`,
//!   the schemas of `current_setting('search_path')`) and a time series
//!   and a table with `$__timeGroupAlias`, `$__timeFilter` and `$__timeEpoch`
//!   expanded as Grafana expands them;
//! - Apache Superset: SQLAlchemy 2 over psycopg2 (Superset's default
//!   postgresql driver), the inspector's calls Superset makes when a
//!   dataset is added, and pandas' `read_sql` of a table.
//!
//! A confined identity (`carol`: one table, a row filter) sees in each list
//! only what it may read.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::{json, Value};

use super::pg_door::{pg_addr, PRELUDE};
use crate::common::{python, App, Gateway};

const ALICE_SECRET: &str = "bi-door-alice-5c1d";
const CAROL_SECRET: &str = "bi-door-carol-93e0";

const ROLES: &str = r#"
[[role]]
name = "web"
members = ["carol"]
read = ["ops.main.metrics"]
[role.rows]
"ops.main.metrics" = "host = 'web-1'"
"#;

/// The operator's database: a time series of three hosts, a table with a
/// key, a view, and a table in a schema of its own.
fn operator_database(path: &Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE metrics AS SELECT TIMESTAMP '2024-01-01 00:00:00' + INTERVAL (i * 7) MINUTE AS ts,
                ['web-1', 'web-2', 'db-1'][i % 3 + 1] AS host, (i * 37 % 101) / 4.0 AS value,
                (i * 1.25)::DECIMAL(10,2) AS reading, i::BIGINT AS n,
                DATE '2024-01-01' + (i // 200)::INTEGER AS day, i % 2 = 0 AS ok
            FROM range(600) t(i);
         CREATE TABLE billing(id INTEGER PRIMARY KEY, card VARCHAR);
         INSERT INTO billing VALUES (1, '4111-1111');
         CREATE VIEW web AS SELECT * FROM metrics WHERE host LIKE 'web%';
         CREATE SCHEMA sales;
         CREATE TABLE sales.orders(id INTEGER PRIMARY KEY, amount DOUBLE, placed DATE);
         INSERT INTO sales.orders VALUES (1, 9.5, DATE '2024-01-02'), (2, 0.25, NULL);",
    )
    .unwrap();
}

/// What `carol` may read of it: the rows of `web-1`, nothing else.
fn confine_to_carol(path: &Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "DELETE FROM metrics WHERE host <> 'web-1';
         DROP VIEW web; DROP TABLE billing; DROP TABLE sales.orders; DROP SCHEMA sales;",
    )
    .unwrap();
}

struct Bi {
    _app: App,
    addr: String,
    dir: tempfile::TempDir,
}

/// An identity: its name, its token, and DuckDB's copy of what it may read.
struct Who {
    user: &'static str,
    secret: &'static str,
    reference: PathBuf,
}

async fn door() -> (Bi, [Who; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    operator_database(&db);
    // Each reference is named `ops` too, as the gateway's catalog is.
    let mut refs = Vec::new();
    for user in ["alice", "carol"] {
        let r = dir.path().join(user).join("ops.duckdb");
        std::fs::create_dir_all(r.parent().unwrap()).unwrap();
        std::fs::copy(&db, &r).unwrap();
        refs.push(r);
    }
    confine_to_carol(&refs[1]);
    let roles = dir.path().join("roles.toml");
    std::fs::write(&roles, ROLES).unwrap();
    let app = Gateway::builder()
        .env("DUCKGATE_PG_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", roles.display())
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("alice:{ALICE_SECRET},carol:{CAROL_SECRET}"),
        )
        .spawn_app()
        .await;
    let addr = pg_addr(&app).await;
    let carol = refs.pop().unwrap();
    let alice = refs.pop().unwrap();
    (
        Bi {
            _app: app,
            addr,
            dir,
        },
        [
            Who {
                user: "alice",
                secret: ALICE_SECRET,
                reference: alice,
            },
            Who {
                user: "carol",
                secret: CAROL_SECRET,
                reference: carol,
            },
        ],
    )
}

impl Bi {
    fn port(&self) -> &str {
        self.addr.rsplit(':').next().unwrap_or_default()
    }
}

/// The schemas on the search path, as Grafana's query builder reads them
/// (its `buildSchemaConstraint`).
const SEARCH_PATH_SCHEMAS: &str = r#"
          quote_ident(table_schema) IN (
          SELECT
            CASE WHEN trim(s[i]) = '"$user"' THEN user ELSE trim(s[i]) END
          FROM
            generate_series(
              array_lower(string_to_array(current_setting('search_path'),','),1),
              array_upper(string_to_array(current_setting('search_path'),','),1)
            ) as i,
            string_to_array(current_setting('search_path'),',') s
          )"#;

/// The query builder's table list (Grafana's `showTables()`).
fn grafana_tables() -> String {
    format!(
        r#"SELECT
    CASE WHEN {SEARCH_PATH_SCHEMAS}
      THEN quote_ident(table_name)
      ELSE quote_ident(table_schema) || '.' || quote_ident(table_name)
    END AS "table"
    FROM information_schema.tables
    WHERE quote_ident(table_schema) NOT IN ('information_schema',
                             'pg_catalog',
                             '_timescaledb_cache',
                             '_timescaledb_catalog',
                             '_timescaledb_internal',
                             '_timescaledb_config',
                             'timescaledb_information',
                             'timescaledb_experimental')
    ORDER BY CASE WHEN {SEARCH_PATH_SCHEMAS} THEN 0 ELSE 1 END, 1"#
    )
}

/// The query builder's columns of `table` (Grafana's `getSchema(table)`).
fn grafana_columns(table: &str) -> String {
    let t = format!("'{}'", table.replace('\'', "''"));
    format!(
        r#"SELECT quote_ident(column_name) AS "column", data_type AS "type"
    FROM information_schema.columns
    WHERE
      CASE WHEN array_length(parse_ident({t}),1) = 2
        THEN quote_ident(table_schema) = (parse_ident({t}))[1]
          AND quote_ident(table_name) = (parse_ident({t}))[2]
        ELSE quote_ident(table_name) = {t}
          AND {SEARCH_PATH_SCHEMAS}
      END"#
    )
}

/// A query Grafana sends, the SQL DuckDB answers it with, and whether the
/// rows' order is the query's (else compared as sets).
struct Case {
    name: &'static str,
    sql: String,
    args: Vec<Value>,
    reference: String,
    ordered: bool,
}

/// The schemas Grafana's lists leave out, for the references.
const NOT_LISTED: &str = "('information_schema', 'pg_catalog')";

fn grafana_cases() -> Vec<Case> {
    // A dashboard's range, 00:00 to 06:00, as `$__timeFilter` writes it.
    let (from, to) = ("2024-01-01T00:00:00Z", "2024-01-01T06:00:00Z");
    let series = format!(
        r#"SELECT floor(extract(epoch from ts)/300)*300 AS "time", host AS metric, avg(value) AS "value" FROM metrics WHERE ts BETWEEN '{from}' AND '{to}' GROUP BY 1, 2 ORDER BY 1, 2"#
    );
    let table = r#"SELECT ts AS "time", host, value, reading, n, day, ok FROM metrics WHERE ts BETWEEN '2024-01-01T01:00:00Z' AND '2024-01-01T02:30:00Z' ORDER BY 1"#.to_string();
    let epoch = format!(
        r#"SELECT extract(epoch from ts) as "time", value FROM metrics WHERE ts BETWEEN '{from}' AND '{to}' AND host = 'web-1' ORDER BY 1"#
    );
    let same = |name, sql: String| Case {
        name,
        reference: sql.clone(),
        sql,
        args: vec![],
        ordered: true,
    };
    vec![
        // The settings page: the server's version (DuckDB divides as it
        // does; Grafana parses the integer part) and TimescaleDB.
        Case {
            name: "version",
            sql: "SELECT current_setting('server_version_num')::int/100 as version".into(),
            args: vec![],
            reference: "SELECT '160006'::int/100 AS version".into(),
            ordered: true,
        },
        Case {
            name: "timescaledb",
            sql: "SELECT extversion FROM pg_extension WHERE extname = 'timescaledb'".into(),
            args: vec![],
            reference: "SELECT NULL::VARCHAR AS extversion WHERE false".into(),
            ordered: true,
        },
        // The query builder: tables (those of the search path's `main`
        // unqualified), then a table's columns by both spellings.
        Case {
            name: "tables",
            sql: grafana_tables(),
            args: vec![],
            reference: format!(
                r#"SELECT CASE WHEN table_schema = 'main' THEN table_name ELSE table_schema || '.' || table_name END AS "table"
                   FROM information_schema.tables WHERE table_schema NOT IN {NOT_LISTED}
                   ORDER BY CASE WHEN table_schema = 'main' THEN 0 ELSE 1 END, 1"#
            ),
            ordered: true,
        },
        Case {
            name: "columns",
            sql: grafana_columns("metrics"),
            args: vec![],
            reference: r#"SELECT column_name AS "column", data_type AS "type" FROM information_schema.columns WHERE table_schema = 'main' AND table_name = 'metrics'"#.into(),
            ordered: false,
        },
        Case {
            name: "columns_of_schema_table",
            sql: grafana_columns("sales.orders"),
            args: vec![],
            reference: r#"SELECT column_name AS "column", data_type AS "type" FROM information_schema.columns WHERE table_schema = 'sales' AND table_name = 'orders'"#.into(),
            ordered: false,
        },
        // Panels: `$__timeGroupAlias(ts, '5m')`, `$__timeFilter(ts)`,
        // `$__timeEpoch(ts)` expanded.
        same("time_series", series),
        same("table", table),
        same("epoch", epoch),
        // A driver's parameters (pgx and lib/pq; Grafana sends none).
        Case {
            name: "parameters",
            sql: "SELECT host, count(*) AS n, sum(reading) AS r FROM metrics WHERE host <> $1 GROUP BY 1 ORDER BY 1".into(),
            args: vec![json!("db-1")],
            reference: "SELECT host, count(*) AS n, sum(reading) AS r FROM metrics WHERE host <> 'db-1' GROUP BY 1 ORDER BY 1".into(),
            ordered: true,
        },
    ]
}

/// DuckDB's columns and rows for `sql` on `path`, values as the Go
/// program writes them.
fn duckdb_answer(path: &Path, sql: &str) -> (Vec<String>, Vec<Value>) {
    let conn = duckdb::Connection::open_with_flags(
        path,
        duckdb::Config::default()
            .access_mode(duckdb::AccessMode::ReadOnly)
            .unwrap(),
    )
    .unwrap();
    let mut stmt = conn.prepare(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut rows = stmt.query([]).unwrap_or_else(|e| panic!("{sql}: {e}"));
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let n = row.as_ref().column_count();
        out.push(Value::Array(
            (0..n).map(|i| go_value(sql, row.get(i).unwrap())).collect(),
        ));
    }
    drop(rows);
    (stmt.column_names(), out)
}

/// A DuckDB value as `bidrivers` writes a driver's: numbers as numbers,
/// times as microseconds since the epoch.
fn go_value(sql: &str, v: duckdb::types::Value) -> Value {
    use duckdb::types::{TimeUnit, Value as V};
    match v {
        V::Null => Value::Null,
        V::Boolean(b) => json!(b),
        V::TinyInt(x) => json!(x),
        V::SmallInt(x) => json!(x),
        V::Int(x) => json!(x),
        V::BigInt(x) => json!(x),
        V::HugeInt(x) => json!(x as f64),
        V::Float(x) => json!(x),
        V::Double(x) => json!(x),
        V::Decimal(d) => json!(d.to_string().parse::<f64>().unwrap()),
        V::Text(s) => json!(s),
        V::Date32(days) => json!({"us": i64::from(days) * 86_400_000_000}),
        V::Timestamp(unit, t) => json!({"us": match unit {
            TimeUnit::Second => t * 1_000_000,
            TimeUnit::Millisecond => t * 1_000,
            TimeUnit::Microsecond => t,
            TimeUnit::Nanosecond => t / 1_000,
        }}),
        other => panic!("{sql}: a type the reference does not render: {other:?}"),
    }
}

/// `v` with every number a float (a driver's `3600.0` is written `3600`).
fn canon(v: &Value) -> Value {
    match v {
        Value::Number(n) => json!(n.as_f64().unwrap()),
        Value::Array(a) => Value::Array(a.iter().map(canon).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), canon(v))).collect()),
        other => other.clone(),
    }
}

/// Rows made comparable; sorted when their order is not the query's.
fn comparable(rows: &[Value], ordered: bool) -> Vec<Value> {
    let mut rows: Vec<Value> = rows.iter().map(canon).collect();
    if !ordered {
        rows.sort_by_key(|r| r.to_string());
    }
    rows
}

/// Runs `bidrivers` for `who`; its report (one entry per driver).
fn bidrivers(bi: &Bi, who: &Who, cases: &[Case]) -> Value {
    let bin = std::env::var("DUCKGATE_TEST_BIDRIVERS").expect(
        "DUCKGATE_TEST_BIDRIVERS: eval \"$(scripts/test-env venv)\" builds tests/support/go",
    );
    let queries: Vec<Value> = cases
        .iter()
        .map(|c| json!({"name": c.name, "sql": c.sql, "args": c.args}))
        .collect();
    let mut child = Command::new(bin)
        .args([&bi.addr, who.user, who.secret])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .current_dir(bi.dir.path())
        .spawn()
        .expect("bidrivers");
    serde_json::to_writer(child.stdin.take().unwrap(), &queries).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "bidrivers: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
#[ignore = "tier venv: needs the Go drivers' program (scripts/test-env builds it)"]
async fn grafanas_drivers_and_queries_match_duckdb() {
    let (bi, whos) = door().await;
    let cases = grafana_cases();
    for who in &whos {
        let report = bidrivers(&bi, who, &cases);
        for driver in ["grafana", "pgx", "pq"] {
            let r = &report[driver];
            assert_eq!(r["health"], "ok", "{} {driver}: {r}", who.user);
            for c in &cases {
                if driver == "grafana" && !c.args.is_empty() {
                    continue;
                }
                let got = &r["queries"][c.name];
                let (mut columns, rows) = duckdb_answer(&who.reference, &c.reference);
                // pgconn's `Result` holds the columns only with a row (as
                // from PostgreSQL): Grafana's frame of no rows has none.
                if driver == "grafana" && rows.is_empty() {
                    columns.clear();
                }
                assert_eq!(
                    got["columns"].as_array().cloned().unwrap_or_default(),
                    columns.iter().map(|c| json!(c)).collect::<Vec<_>>(),
                    "{} {driver} {}: {got}",
                    who.user,
                    c.name
                );
                assert_eq!(
                    comparable(got["rows"].as_array().unwrap(), c.ordered),
                    comparable(&rows, c.ordered),
                    "{} {driver} {}: {got}",
                    who.user,
                    c.name
                );
            }
        }
        // What each list holds, beside DuckDB's: alice every table, carol
        // the one she may read (no view, no other schema).
        let tables = &report["grafana"]["queries"]["tables"]["rows"];
        if who.user == "alice" {
            assert_eq!(
                tables,
                &json!([["billing"], ["metrics"], ["web"], ["sales.orders"]])
            );
        } else {
            assert_eq!(tables, &json!([["metrics"]]));
            assert_eq!(
                report["pgx"]["queries"]["columns_of_schema_table"]["rows"],
                json!([])
            );
        }
        // Grafana's types: a time column, floats and numerics as numbers;
        // pgx reads them in binary.
        let types = json!([
            "timestamp",
            "text",
            "float8",
            "numeric",
            "int8",
            "date",
            "bool"
        ]);
        assert_eq!(report["grafana"]["queries"]["table"]["types"], types);
        assert_eq!(report["pgx"]["queries"]["table"]["types"], types);
        assert_eq!(
            report["pgx"]["queries"]["table"]["formats"],
            json!(["binary", "text", "binary", "binary", "binary", "binary", "binary"])
        );
    }
}

/// Superset's calls when a dataset is added (SQLAlchemy's inspector over
/// psycopg2), and pandas' `read_sql` of the table, each beside DuckDB's
/// answer over the identity's reference.
const SUPERSET: &str = r#"
import warnings
import pandas as pd
import sqlalchemy as sa
PORT, USER, SECRET = ARGS
engine = sa.create_engine(f"postgresql+psycopg2://{USER}:{SECRET}@127.0.0.1:{PORT}/ops?sslmode=disable")
out = {}
with warnings.catch_warnings():
    warnings.simplefilter("error")
    i = sa.inspect(engine)
    out["schemas"] = sorted(i.get_schema_names())
    out["tables"] = {s: sorted(i.get_table_names(schema=s)) for s in out["schemas"]}
    out["views"] = {s: sorted(i.get_view_names(schema=s)) for s in out["schemas"]}
    cols = i.get_columns("metrics", schema="main")
    out["columns"] = [[c["name"], str(c["type"]), c["nullable"]] for c in cols]
    out["pk"] = {t: i.get_pk_constraint(t, schema=s)["constrained_columns"] for s in out["schemas"] for t in out["tables"][s]}
    out["fks"] = {t: i.get_foreign_keys(t, schema=s) for s in out["schemas"] for t in out["tables"][s]}
    out["indexes"] = {t: i.get_indexes(t, schema=s) for s in out["schemas"] for t in out["tables"][s]}
    try:
        out["comment"] = i.get_table_comment("metrics", schema="main")["text"]
    except Exception as e:
        out["comment"] = "error: " + type(e).__name__ + ": " + str(e).splitlines()[0]
    with engine.connect() as c:
        frame = pd.read_sql_table("metrics", c, schema="main")
        query = pd.read_sql(sa.text("SELECT host, count(*) AS n, avg(value) AS v FROM metrics WHERE ts < :t GROUP BY host ORDER BY host"), c, params={"t": "2024-01-02"})
        out["version"] = c.execute(sa.text("SELECT 1")).scalar()
engine.dispose()

# DuckDB's answers over the identity's copy.
want = {}
want["schemas"] = sorted(r[0] for r in ref.execute("SELECT DISTINCT schema_name FROM duckdb_schemas() WHERE database_name = current_database() AND NOT internal OR schema_name = 'main' AND database_name = current_database()").fetchall())
want["tables"] = {s: sorted(r[0] for r in ref.execute("SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = ?", [s]).fetchall()) for s in want["schemas"]}
want["views"] = {s: sorted(r[0] for r in ref.execute("SELECT view_name FROM duckdb_views() WHERE database_name = current_database() AND schema_name = ? AND NOT internal", [s]).fetchall()) for s in want["schemas"]}
want["pk"] = {t: [c for r in ref.execute("SELECT constraint_column_names FROM duckdb_constraints() WHERE database_name = current_database() AND schema_name = ? AND table_name = ? AND constraint_type = 'PRIMARY KEY'", [s, t]).fetchall() for c in r[0]] for s in want["schemas"] for t in want["tables"][s]}
want["column_names"] = [r[0] for r in ref.execute("SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND table_name = 'metrics' ORDER BY column_index").fetchall()]
want_query = ref.execute("SELECT host, count(*) AS n, avg(value) AS v FROM metrics WHERE ts < '2024-01-02' GROUP BY host ORDER BY host").df()
same = lambda a, b: list(a.columns) == list(b.columns) and a.astype(str).values.tolist() == b.astype(str).values.tolist()
# The table's values beside DuckDB's, in any order (the read names none);
# pandas' read_sql_table makes a numeric a float and a date a timestamp.
py = lambda v: v.item() if type(v).__module__ == "numpy" else v
got_rows = sorted(map(str, rows([tuple(py(v) for v in r) for r in frame.itertuples(index=False)])))
want_rows = sorted(map(str, reference("SELECT ts, host, value, reading::DOUBLE, n, day::TIMESTAMP, ok FROM metrics")))
done(
    got=out, want=want,
    frame_same=got_rows == want_rows and list(frame.columns) == want["column_names"], frame_rows=len(frame), frame_head=got_rows[:2], want_head=want_rows[:2],
    query_same=same(query, want_query), query=query.astype(str).values.tolist(), want_query=want_query.astype(str).values.tolist(),
)
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (SQLAlchemy 2, psycopg2, pandas); scripts/test installs it"]
async fn superset_over_psycopg2_matches_duckdb() {
    let (bi, whos) = door().await;
    for who in &whos {
        let out = python(
            &format!("{PRELUDE}\n{SUPERSET}"),
            &[
                "",
                who.reference.to_str().unwrap(),
                bi.port(),
                who.user,
                who.secret,
            ],
        );
        let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {out}"));
        let (got, want) = (&v["got"], &v["want"]);
        for key in ["schemas", "tables", "views", "pk"] {
            assert_eq!(got[key], want[key], "{} {key}: {v}", who.user);
        }
        let names: Vec<Value> = got["columns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c[0].clone())
            .collect();
        assert_eq!(
            Value::Array(names),
            want["column_names"],
            "{}: {v}",
            who.user
        );
        assert_eq!(v["frame_same"], true, "{}: {v}", who.user);
        assert_eq!(v["query_same"], true, "{}: {v}", who.user);
        assert_eq!(got["version"], 1, "{}: {v}", who.user);
        // The confined identity's lists hold only its table.
        if who.user == "carol" {
            assert_eq!(got["tables"]["main"], json!(["metrics"]), "{v}");
            assert_eq!(v["frame_rows"], 200, "{v}");
        }
    }
}
