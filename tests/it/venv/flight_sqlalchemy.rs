//! SQLAlchemy over `flightsql-dbapi` (its `datafusion+flightsql` dialect,
//! the DB-API driver Superset and other SQLAlchemy tools use for Flight SQL)
//! against the Flight SQL listener: Core and text queries, parameters bound
//! by prepared statements and rendered as literals, and reflection (schema
//! names, table names, columns, `Table(autoload_with=...)`). The client
//! needs SQLAlchemy 1.4, which the test venv's SQLAlchemy 2 excludes, so it
//! runs in a venv of its own (`scripts/requirements-flightsql-dbapi.txt`,
//! `$DUCKGATE_TEST_PYTHON_FLIGHTSQL_DBAPI`), with Python DuckDB 1.5.5 for
//! the reference answers: the same queries on a copy of the gateway's
//! database file, their Arrow turned into rows by the client's own code.

use serde_json::Value;

use crate::common::{python_in, App, Gateway};

const TOKEN: &str = "analyst:sqlalchemy-token-51f0";
const SECRET: &str = "sqlalchemy-token-51f0";

/// The venv scripts/test-env installs for flightsql-dbapi.
fn dbapi_python() -> String {
    std::env::var("DUCKGATE_TEST_PYTHON_FLIGHTSQL_DBAPI").unwrap_or_else(|_| {
        panic!("DUCKGATE_TEST_PYTHON_FLIGHTSQL_DBAPI is not set: run the suite with scripts/test (scripts/test-env installs the flightsql-dbapi venv)")
    })
}

/// A gateway over `db` with the Flight SQL listener, and its host:port.
async fn gateway(db: &std::path::Path) -> (App, String) {
    let app = Gateway::builder()
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_DATABASE", db.to_str().unwrap())
        .spawn_app()
        .await;
    let uri = app.flight_uri().await;
    let addr = uri.trim_start_matches("grpc://").to_string();
    (app, addr)
}

/// The data: a schema with a table and a view, a table in `main`.
const SEED: &str = r#"
import sys, duckdb
c = duckdb.connect(sys.argv[1])
c.execute("""
CREATE SCHEMA sales;
CREATE TABLE sales.orders AS
    SELECT i AS id, 'item-' || i AS name, (i * 1.25)::DECIMAL(10, 2) AS amount,
           DATE '2024-01-01' + i::INTEGER AS placed, i % 3 = 0 AS flagged,
           i / 7 AS ratio
    FROM range(1000) t(i);
CREATE VIEW sales.big AS SELECT * FROM sales.orders WHERE amount > 1000;
CREATE TABLE customers (id INTEGER PRIMARY KEY, name VARCHAR NOT NULL, joined TIMESTAMP);
INSERT INTO customers VALUES (1, 'Ada', '2024-01-02 03:04:05'), (2, 'Grace', NULL);
""")
c.close()
"#;

const SCRIPT: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import duckdb
import flightsql.sqlalchemy  # registers datafusion+flightsql
from flightsql.dbapi import column_specs, dbapi_results
import sqlalchemy as sa

ADDR, TOKEN, REF = sys.argv[1], sys.argv[2], sys.argv[3]
ref = duckdb.connect(REF, read_only=True)
ref.sql("SET TimeZone = 'UTC'")
url = f"datafusion+flightsql://{ADDR}?insecure=true&token={TOKEN}"
# The dialect's default renders parameters into the SQL text; with this
# feature it prepares the statement and binds them (DoPut of a union row).
literal = sa.create_engine(url)
prepared = sa.create_engine(url + "&feature-sqlalchemy-prepared-statements=on")

def duck(sql, params=None):
    """DuckDB's answer, through the client's own Arrow-to-rows code."""
    reader = ref.execute(sql, params).arrow() if params is not None else ref.sql(sql).arrow()
    return dbapi_results(reader.read_all())[0]

def plain(rows):
    # Rows as lists, NULLs (pandas' NaT and NaN) as None. Values compare
    # with ==: a reflected DECIMAL has no scale in this dialect, so
    # SQLAlchemy returns Decimal('1.2500000000') for DuckDB's Decimal('1.25').
    return [[None if v is None or v != v else v for v in r] for r in rows]

def compare(name, got, want):
    got, want = plain(got), plain(want)
    kinds = lambda rows: [[type(v).__name__ for v in r] for r in rows]
    out[name] = {"same": got == want and kinds(got) == kinds(want), "rows": len(got),
                 "got": repr(got)[:300], "want": repr(want)[:300]}

def error_of(f):
    try:
        f()
    except Exception as e:
        return type(e).__name__ + ": " + str(e)
    return None

out = {}
orders = sa.Table("orders", sa.MetaData(), schema="sales", autoload_with=literal)
out["reflected"] = [[c.name, type(c.type).__name__] for c in orders.columns]
want_cols = column_specs(ref.sql("SELECT * FROM sales.orders LIMIT 0").arrow().schema)
out["want_reflected"] = [[c["name"], type(c["type"]()).__name__] for c in want_cols]

core = (sa.select(orders.c.id, orders.c.name, orders.c.amount, orders.c.placed, orders.c.flagged, orders.c.ratio)
        .where(orders.c.amount > 100).order_by(orders.c.id.desc()).limit(50))
core_sql = "SELECT id, name, amount, placed, flagged, ratio FROM sales.orders WHERE amount > 100 ORDER BY id DESC LIMIT 50"
agg = sa.select(sa.func.count(), sa.func.sum(orders.c.amount), sa.func.min(orders.c.placed)).where(orders.c.flagged == sa.true())
agg_sql = "SELECT count(*), sum(amount), min(placed) FROM sales.orders WHERE flagged"
for mode, engine in (("literal", literal), ("prepared", prepared)):
    with engine.connect() as c:
        r = c.execute(core)
        out[mode + "_core_sql"] = str(r.context.statement)
        compare(mode + "_core", r.fetchall(), duck(core_sql))
        compare(mode + "_agg", c.execute(agg).fetchall(), duck(agg_sql))
        compare(mode + "_customers",
                c.execute(sa.text("SELECT * FROM customers ORDER BY id")).fetchall(),
                duck("SELECT * FROM customers ORDER BY id"))

# Parameters passed at execute time, bound by the prepared statement.
params_sql = ("SELECT id, name, amount, flagged FROM sales.orders WHERE id BETWEEN :lo AND :hi "
              "AND name LIKE :pat AND flagged = :flag AND amount > :min ORDER BY id")
values = {"lo": 10, "hi": 600, "pat": "item-1%", "flag": True, "min": 12.5}
with prepared.connect() as c:
    r = c.execute(sa.text(params_sql), values)
    out["params_sql"] = str(r.context.statement)
    compare("params", r.fetchall(),
            duck(params_sql.replace(":lo", "?").replace(":hi", "?").replace(":pat", "?")
                 .replace(":flag", "?").replace(":min", "?"), [10, 600, "item-1%", True, 12.5]))
    compare("params_text", c.execute(sa.text("SELECT :s || '!' AS s, :n * 2 AS n"), {"s": "héllo ✓", "n": 21}).fetchall(),
            duck("SELECT ? || '!' AS s, ? * 2 AS n", ["héllo ✓", 21]))
# The literal mode: values bound into the construct are rendered (quoted)...
with literal.connect() as c:
    q = sa.text("SELECT id, name FROM customers WHERE name = :n").bindparams(n="Ada")
    compare("literal_bound", c.execute(q).fetchall(), duck("SELECT id, name FROM customers WHERE name = 'Ada'"))
    q = sa.text("SELECT :s AS s").bindparams(s="it's")
    compare("literal_quote", c.execute(q).fetchall(), duck("SELECT 'it''s' AS s"))
    # ...but values passed at execute time are not in the construct: the
    # client renders them as NULL (its LiteralBindCompiler), which is why
    # docs/clients.md names the prepared-statements feature.
    r = c.execute(sa.text("SELECT :x AS x"), {"x": 1})
    out["literal_execute_time"] = str(r.context.statement)

# Reflection, against DuckDB's own catalog of the same file.
insp = sa.inspect(literal)
this_db = "current_database()"
out["schemas"] = sorted(insp.get_schema_names())
out["want_schemas"] = sorted(r[0] for r in ref.sql(
    f"SELECT schema_name FROM duckdb_schemas() WHERE database_name = {this_db}").fetchall())
def listed(schema_filter):
    q = (f"SELECT table_name FROM duckdb_tables() WHERE database_name = {this_db} {schema_filter} "
         f"UNION ALL SELECT view_name FROM duckdb_views() WHERE database_name = {this_db} AND NOT internal {schema_filter}")
    return sorted(r[0] for r in ref.sql(q).fetchall())
out["tables_sales"] = sorted(insp.get_table_names(schema="sales"))
out["want_tables_sales"] = listed("AND schema_name = 'sales'")
out["tables_main"] = sorted(insp.get_table_names(schema="main"))
out["want_tables_main"] = listed("AND schema_name = 'main'")
out["tables_all"] = sorted(insp.get_table_names())
out["want_tables_all"] = listed("")
def columns(specs):
    # The inspector gives type instances, column_specs the classes.
    kind = lambda t: (t if isinstance(t, type) else type(t)).__name__
    return [[c["name"], kind(c["type"]), c["nullable"]] for c in specs]
out["columns"] = columns(insp.get_columns("customers", schema="main"))
out["want_columns"] = columns(column_specs(ref.sql("SELECT * FROM customers LIMIT 0").arrow().schema))
out["has_orders"] = insp.has_table("orders", schema="sales")
out["has_nothing"] = insp.has_table("no_such_table", schema="sales")

# What the gateway refuses reaches SQLAlchemy as the driver's error.
with literal.connect() as c:
    out["refused"] = error_of(lambda: c.execute(sa.text("SELECT current_setting('threads')")).fetchall())
    out["missing"] = error_of(lambda: c.execute(sa.text("SELECT * FROM no_such_table")).fetchall())
out["wrong_token"] = error_of(lambda: sa.create_engine(url.replace(TOKEN, "not-the-token")).connect())
print(json.dumps(out))
"#;

/// Queries, parameters and reflection through SQLAlchemy equal DuckDB's
/// answers over the same data.
#[tokio::test]
#[ignore = "tier venv: needs the flightsql-dbapi venv and Python DuckDB; scripts/test installs them"]
async fn sqlalchemy_over_flightsql_dbapi_answers_like_duckdb() {
    let py = dbapi_python();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.duckdb");
    python_in(&py, SEED, &[db.to_str().unwrap()]);
    // DuckDB's reference reads a copy: the gateway holds the file.
    std::fs::create_dir(dir.path().join("ref")).unwrap();
    let reference = dir.path().join("ref").join("shop.duckdb");
    std::fs::copy(&db, &reference).unwrap();
    let (app, addr) = gateway(&db).await;
    let out = python_in(&py, SCRIPT, &[&addr, SECRET, reference.to_str().unwrap()]);
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));

    assert_eq!(v["reflected"], v["want_reflected"], "{v:#}");
    assert_eq!(v["reflected"].as_array().unwrap().len(), 6, "{v:#}");
    for k in [
        "literal_core",
        "literal_agg",
        "literal_customers",
        "prepared_core",
        "prepared_agg",
        "prepared_customers",
        "params",
        "params_text",
        "literal_bound",
        "literal_quote",
    ] {
        assert_eq!(v[k]["same"], true, "{k}: {:#}", v[k]);
        assert!(v[k]["rows"].as_u64().unwrap() > 0, "{k}: {:#}", v[k]);
    }
    assert_eq!(v["literal_core"]["rows"], 50);
    // The literal mode sends values in the text; the prepared mode sends
    // placeholders and binds the values.
    let literal_sql = v["literal_core_sql"].as_str().unwrap();
    assert!(literal_sql.contains("> 100"), "{literal_sql}");
    let prepared_sql = v["prepared_core_sql"].as_str().unwrap();
    assert!(prepared_sql.contains("> ?"), "{prepared_sql}");
    assert!(v["params_sql"]
        .as_str()
        .unwrap()
        .contains("BETWEEN ? AND ?"));
    assert!(v["params"]["rows"].as_u64().unwrap() > 10, "{v:#}");
    assert_eq!(v["literal_execute_time"], "SELECT NULL AS x");

    assert_eq!(v["schemas"], v["want_schemas"], "{v:#}");
    assert_eq!(v["schemas"], serde_json::json!(["main", "sales"]));
    assert_eq!(v["tables_sales"], v["want_tables_sales"], "{v:#}");
    assert_eq!(v["tables_sales"], serde_json::json!(["big", "orders"]));
    assert_eq!(v["tables_main"], v["want_tables_main"], "{v:#}");
    assert_eq!(v["tables_all"], v["want_tables_all"], "{v:#}");
    assert_eq!(v["columns"], v["want_columns"], "{v:#}");
    assert_eq!(v["columns"].as_array().unwrap().len(), 3, "{v:#}");
    assert_eq!(
        (v["has_orders"].as_bool(), v["has_nothing"].as_bool()),
        (Some(true), Some(false))
    );

    let refused = v["refused"].as_str().unwrap_or_default();
    assert!(
        refused.contains("Statement not allowed") && refused.contains("current_setting"),
        "{refused}"
    );
    let missing = v["missing"].as_str().unwrap_or_default();
    assert!(missing.contains("no_such_table"), "{missing}");
    let wrong = v["wrong_token"].as_str().unwrap_or_default();
    assert!(wrong.contains("not valid for queries"), "{wrong}");

    // Each statement is audited as Flight SQL's, never with the token.
    let log = app.log_text();
    let audited = log
        .lines()
        .filter(|l| l.contains("query ended") && l.contains("api=\"flight\""))
        .count();
    assert!(audited >= 10, "{audited}");
    assert!(!log.contains(SECRET), "the token reached the log");
    assert!(!log.contains("not-the-token"));
}
