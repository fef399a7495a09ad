//! The project's SQLAlchemy 2 dialect (`clients/sqlalchemy`, over ADBC's
//! Flight SQL driver) against the Flight SQL listener, with the test venv's
//! SQLAlchemy 2 and pandas 2.3: reflection across catalogs (the gateway's
//! database, the named sources' catalog) where a listed name is a name a
//! query reaches, column types by DuckDB's names, Core and text queries with
//! parameters bound at execute time, pandas' `read_sql` and
//! `read_sql_table`, and a parameter the driver cannot send refused rather
//! than sent as NULL. Every answer is compared with Python DuckDB 1.5.5's
//! over a copy of the same database and the same files.

use serde_json::Value;

use crate::common::{python, Gateway};

const TOKEN: &str = "analyst:dialect-token-6f3a";
const SECRET: &str = "dialect-token-6f3a";

const SEED: &str = r#"
import os, sys, duckdb
db, events = sys.argv[1], sys.argv[2]
c = duckdb.connect(db)
c.execute("""
CREATE SCHEMA sales;
CREATE TABLE sales.orders AS
    SELECT i AS id, 'item-' || i AS name, (i * 1.25)::DECIMAL(10, 2) AS amount,
           DATE '2024-01-01' + i::INTEGER AS placed, i % 3 = 0 AS flagged, [i, i + 1] AS pair
    FROM range(50) t(i);
CREATE VIEW sales.big AS SELECT id, amount FROM sales.orders WHERE amount > 40;
CREATE TABLE customers (id INTEGER, name VARCHAR, joined TIMESTAMP, score HUGEINT);
INSERT INTO customers VALUES (1, 'Ada', '2024-01-02 03:04:05', 12), (2, 'Grace', NULL, NULL);
""")
os.makedirs(events)
c.execute(f"COPY (SELECT i AS id, 'kind-' || (i % 4) AS kind FROM range(19) t(i)) TO '{events}/part-0.parquet' (FORMAT parquet)")
c.close()
"#;

const SCRIPT: &str = r#"
import json, sys, warnings
warnings.simplefilter("ignore")
import duckdb, pandas as pd
import sqlalchemy as sa
from sqlalchemy.dialects import registry

ADDR, TOKEN, REF, EVENTS, PACKAGE = sys.argv[1:6]
sys.path.insert(0, PACKAGE)
registry.register("duckgate.flightsql", "duckgate_sqlalchemy", "DuckgateDialect")
from duckgate_sqlalchemy import column_type

# DuckDB's reference: the same database, the named source as a view of a
# catalog `sources`, as the gateway makes it.
ref = duckdb.connect(REF)
ref.sql("ATTACH ':memory:' AS sources")
ref.sql(f"CREATE VIEW sources.main.events AS SELECT * FROM read_parquet('{EVENTS}/*.parquet')")
current = ref.sql("SELECT current_database()").fetchone()[0]
def names(sql):
    return [r[0] for r in ref.sql(sql).fetchall()]

engine = sa.create_engine(f"duckgate+flightsql://{ADDR}?token={TOKEN}")
insp = sa.inspect(engine)
out = {}
out["schemas"] = sorted(insp.get_schema_names())
out["want_schemas"] = sorted(
    s if d == current else f"{d}.{s}"
    for d, s in ref.sql("""SELECT database_name, schema_name FROM duckdb_schemas()
        WHERE schema_name NOT IN ('information_schema', 'pg_catalog')
        AND database_name NOT IN ('system', 'temp')""").fetchall())
out["tables"] = {s: sorted(insp.get_table_names(schema=s)) for s in out["schemas"]}
out["views"] = {s: sorted(insp.get_view_names(schema=s)) for s in out["schemas"]}
def qualified(s):
    return (current, s) if "." not in s else tuple(s.split(".", 1))
out["want_tables"] = {s: names(f"SELECT table_name FROM duckdb_tables() WHERE database_name = '{qualified(s)[0]}' AND schema_name = '{qualified(s)[1]}' ORDER BY 1") for s in out["want_schemas"]}
out["want_views"] = {s: names(f"SELECT view_name FROM duckdb_views() WHERE NOT internal AND database_name = '{qualified(s)[0]}' AND schema_name = '{qualified(s)[1]}' ORDER BY 1") for s in out["want_schemas"]}

# Columns: DuckDB's type names, as the dialect types them.
cols = {}
want_cols = {}
for schema, table in [("sales", "orders"), (None, "customers"), ("sources.main", "events")]:
    key = f"{schema}.{table}"
    cols[key] = [[c["name"], repr(c["type"])] for c in insp.get_columns(table, schema=schema)]
    d, s = qualified(schema or "main")
    want_cols[key] = [[n, repr(column_type(t))] for n, t in ref.sql(
        f"SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = '{d}' AND schema_name = '{s}' AND table_name = '{table}' ORDER BY column_index").fetchall()]
out["columns"], out["want_columns"] = cols, want_cols

def plain(rows):
    return [[str(v) if v is not None else None for v in r] for r in rows]

# A reflected table of another catalog reaches its rows.
events = sa.Table("events", sa.MetaData(), schema="sources.main", autoload_with=engine)
orders = sa.Table("orders", sa.MetaData(), schema="sales", autoload_with=engine)
with engine.connect() as conn:
    out["events"] = plain(conn.execute(sa.select(events).order_by(events.c.id)).fetchall())
    out["want_events"] = plain(ref.sql("SELECT * FROM sources.main.events ORDER BY id").fetchall())
    # Execute-time parameters, bound (not written into the SQL text).
    q = sa.select(orders.c.id, orders.c.amount).where(orders.c.id > sa.bindparam("n")).order_by(orders.c.id)
    out["core"] = [plain(conn.execute(q, {"n": n}).fetchall()) for n in (40, 45)]
    out["want_core"] = [plain(ref.execute("SELECT id, amount FROM sales.orders WHERE id > ? ORDER BY id", [n]).fetchall()) for n in (40, 45)]
    out["text"] = plain(conn.execute(sa.text("SELECT name FROM sales.orders WHERE id BETWEEN :a AND :b AND name <> :c ORDER BY id"), {"a": 3, "b": 9, "c": "item-5"}).fetchall())
    out["want_text"] = plain(ref.execute("SELECT name FROM sales.orders WHERE id BETWEEN ? AND ? AND name <> ? ORDER BY id", [3, 9, "item-5"]).fetchall())
    # A parameter the driver cannot send fails the call: never a NULL.
    try:
        conn.execute(sa.text("SELECT :x IS NULL AS is_null"), {"x": object()}).fetchall()
        out["unsendable"] = None
    except Exception as e:
        out["unsendable"] = type(e).__name__
    out["none_is_null"] = conn.execute(sa.text("SELECT :x IS NULL AS is_null"), {"x": None}).scalar()

# pandas 2.3 over the SQLAlchemy 2 engine.
df = pd.read_sql(sa.text("SELECT id, name, amount FROM sales.orders WHERE id < :n ORDER BY id"), engine, params={"n": 7})
want = ref.execute("SELECT id, name, amount FROM sales.orders WHERE id < ? ORDER BY id", [7]).df()
out["pandas_equal"] = df.astype(str).values.tolist() == want.astype(str).values.tolist()
out["pandas_rows"] = len(df)
table = pd.read_sql_table("events", engine, schema="sources.main").sort_values("id")
out["pandas_table_equal"] = table.astype(str).values.tolist() == ref.sql("SELECT * FROM sources.main.events ORDER BY id").df().astype(str).values.tolist()
print(json.dumps(out, default=str))
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (SQLAlchemy 2, pandas, ADBC's Flight SQL driver, Python DuckDB); scripts/test installs it"]
async fn the_sqlalchemy_dialect_lists_what_a_query_reaches_and_binds_parameters() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("shop.duckdb");
    let events = dir.path().join("events");
    python(SEED, &[db.to_str().unwrap(), events.to_str().unwrap()]);
    std::fs::create_dir(dir.path().join("ref")).unwrap();
    let reference = dir.path().join("ref").join("shop.duckdb");
    std::fs::copy(&db, &reference).unwrap();
    let toml = dir.path().join("gateway.toml");
    std::fs::write(
        &toml,
        format!(
            "[[source]]\nname = \"events\"\npath = \"{}/*.parquet\"\n",
            events.display()
        ),
    )
    .unwrap();
    let app = Gateway::builder()
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .env("DUCKGATE_DATABASE", db.to_str().unwrap())
        .env("DUCKGATE_CONFIG", toml.display())
        .spawn_app()
        .await;
    let uri = app.flight_uri().await;
    let addr = uri.trim_start_matches("grpc://").to_string();
    let package = concat!(env!("CARGO_MANIFEST_DIR"), "/clients/sqlalchemy");
    let out = tokio::task::spawn_blocking({
        let reference = reference.clone();
        let events = events.clone();
        move || {
            python(
                SCRIPT,
                &[
                    &addr,
                    SECRET,
                    reference.to_str().unwrap(),
                    events.to_str().unwrap(),
                    package,
                ],
            )
        }
    })
    .await
    .unwrap();
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    // Each catalog's schemas once: the gateway's as themselves, the
    // sources' qualified by their catalog.
    assert_eq!(v["schemas"], v["want_schemas"], "{v:#}");
    assert_eq!(
        v["schemas"],
        serde_json::json!(["main", "sales", "sources.main"])
    );
    assert_eq!(v["tables"], v["want_tables"], "{v:#}");
    assert_eq!(v["views"], v["want_views"], "{v:#}");
    assert_eq!(v["columns"], v["want_columns"], "{v:#}");
    assert!(
        !v["columns"].to_string().contains("NullType"),
        "every column typed: {v:#}"
    );
    for k in ["events", "core", "text"] {
        assert_eq!(v[k], v[&format!("want_{k}")], "{k}: {v:#}");
    }
    assert_eq!(v["events"].as_array().unwrap().len(), 19);
    assert!(v["unsendable"].is_string(), "{v:#}");
    assert_eq!(v["none_is_null"], true, "{v:#}");
    assert_eq!(v["pandas_equal"], true, "{v:#}");
    assert_eq!(v["pandas_rows"], 7, "{v:#}");
    assert_eq!(v["pandas_table_equal"], true, "{v:#}");
    assert!(!app.log_text().contains(SECRET));
}
