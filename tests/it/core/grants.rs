//! Roles and grants (issue 39): a caller holding a role reads and changes
//! only what its roles grant, checked on the bound plan. On an operator's
//! database built here by DuckDB in-process, `alice` (role `analyst`) may
//! read `orders`, three columns of `customers` and two views, and create in
//! schema `client`; `bob` holds no role and sees everything.
//!
//! The corpus, each attempt against DuckDB's own answer:
//! - what alice may read, in every spelling of its names (joins, subqueries,
//!   CTEs, windows, aggregates, samples, set operations, EXPLAIN): the
//!   gateway's rows equal DuckDB's over a copy of the database;
//! - what she may not see (a table, a schema, through a CTE-free join, a
//!   subquery, an INSERT, an UPDATE, ...): answered exactly as the gateway
//!   answers her for a table that does not exist (same status, class,
//!   detail but for the name, line and column), and that detail is DuckDB's
//!   own message for a missing table with its hints dropped; DuckDB's hints,
//!   which could name what she cannot see, never reach her;
//! - columns outside her column grant, views over what she may not read,
//!   files and DuckDB's catalog functions, writes outside her grant: 403,
//!   and the same statements run for bob;
//! - `GET /catalog` lists exactly what she may read.
//!
//! A grant naming nothing that exists stops start-up, naming it.

use crate::common::Gateway;
use serde_json::{json, Value};
use std::collections::HashMap;

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

const ROLES: &str = r#"
[[role]]
name = "analyst"
members = ["alice"]
read = ["ops.main.orders", "ops.main.customers", "ops.main.v_orders", "ops.main.v_payroll"]
write = ["ops.client.*"]
[role.columns]
"ops.main.customers" = ["id", "name", "tenant_id"]
"#;

/// The operator's database, made by DuckDB.
fn operator_database(path: &std::path::Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE orders AS SELECT i AS id, i % 3 AS tenant_id, i * 10 - 50 AS amount,
                'o' || i AS label FROM range(40) t(i);
         CREATE TABLE customers AS SELECT i AS id, 'c' || i AS name, 'c' || i || '@x.test' AS email,
                i % 3 AS tenant_id FROM range(12) t(i);
         CREATE TABLE payroll AS SELECT i AS emp, 1000 * i AS salary FROM range(5) t(i);
         CREATE SCHEMA sales;
         CREATE TABLE sales.deals AS SELECT i AS deal FROM range(3) t(i);
         CREATE VIEW v_orders AS SELECT id, amount FROM orders WHERE amount > 0;
         CREATE VIEW v_payroll AS SELECT emp FROM payroll;
         CREATE VIEW v_deals AS SELECT deal FROM sales.deals;
         CREATE SCHEMA client;
         CREATE INDEX orders_id ON orders (id);
         CREATE INDEX payroll_salary ON payroll (salary);
         CREATE SEQUENCE client.ticket_no START 7;
         CREATE SEQUENCE sales.deal_no START 9;
         CREATE TYPE client.mood AS ENUM ('calm', 'busy');
         CREATE TYPE sales.tier AS ENUM ('gold', 'tin');",
    )
    .unwrap();
}

/// DuckDB's answer to `sql` on `conn`: rows of JSON values, or its error.
pub(super) use crate::common::reference::rows as reference;

/// The spellings of a table of `main` in database `ops`.
pub(super) fn spellings(name: &str) -> Vec<String> {
    vec![
        name.to_string(),
        format!("main.{name}"),
        format!("ops.{name}"),
        format!("ops.main.{name}"),
        format!("\"{}\"", name.to_uppercase()),
    ]
}

/// Statements alice may run, over `{o}` (orders) and `{c}` (customers):
/// every one ordered, so DuckDB's answer is one.
const READS: &[&str] = &[
    "SELECT * FROM {o} ORDER BY ALL",
    "SELECT count(*), sum(amount), min(label) FROM {o}",
    "SELECT tenant_id, count(*) AS n, avg(amount) FROM {o} GROUP BY ALL ORDER BY ALL",
    "SELECT o.id, c.name FROM {o} o JOIN {c} c ON o.tenant_id = c.tenant_id AND o.id = c.id ORDER BY ALL",
    "SELECT id FROM {o} WHERE tenant_id IN (SELECT tenant_id FROM {c} WHERE name = 'c1') ORDER BY ALL",
    "SELECT id, (SELECT max(id) FROM {c} c WHERE c.tenant_id = o.tenant_id) FROM {o} o ORDER BY ALL",
    "WITH big AS (SELECT * FROM {o} WHERE amount > 100) SELECT count(*) FROM big",
    "WITH orders AS (SELECT 1 AS id) SELECT * FROM orders",
    "SELECT id, sum(amount) OVER (PARTITION BY tenant_id ORDER BY id) FROM {o} ORDER BY ALL",
    "SELECT id, name, tenant_id FROM {c} ORDER BY ALL",
    "SELECT count(*) FROM (SELECT * FROM {o} USING SAMPLE 10 ROWS (reservoir, 7))",
    "SELECT id FROM {o} WHERE id < 5 UNION ALL SELECT id FROM {c} WHERE id < 3 ORDER BY ALL",
    "SELECT id FROM {o} EXCEPT SELECT id FROM {c} ORDER BY ALL",
    "SELECT * FROM v_orders ORDER BY ALL",
    "SELECT EXISTS (SELECT 1 FROM {o} WHERE amount = 0)",
    "SELECT * FROM range(3) r JOIN {o} ON r.range = {o}.id ORDER BY ALL",
];

/// Statements over `{x}`, a table alice may not see.
const HIDDEN: &[&str] = &[
    "SELECT * FROM {x}",
    "SELECT count(*) FROM {x}",
    "SELECT nosuchcolumn FROM {x}",
    "SELECT * FROM orders JOIN {x} ON true",
    "SELECT id FROM orders WHERE id IN (SELECT 1 FROM {x})",
    "SELECT (SELECT count(*) FROM {x}) AS n",
    "SELECT * FROM orders WHERE EXISTS (SELECT * FROM {x} WHERE 1/0 = 1)",
    "WITH t AS (SELECT * FROM {x}) SELECT * FROM t",
    "INSERT INTO {x} VALUES (1, 2)",
    "UPDATE {x} SET emp = 1",
    "DELETE FROM {x}",
    "SELECT * FROM {x} USING SAMPLE 1",
];

/// Names alice may not see: an operator table in every spelling, and a
/// table of a schema she has no grant in.
fn hidden_names() -> Vec<String> {
    let mut names = spellings("payroll");
    names.extend(["sales.deals".to_string(), "ops.sales.deals".to_string()]);
    names
}

/// The name as DuckDB's message names a table (its last part, unquoted).
fn last_part(spelled: &str) -> String {
    spelled
        .rsplit('.')
        .next()
        .unwrap()
        .trim_matches('"')
        .to_string()
}

/// The gateway over the operator's database in `dir`, alice confined by
/// [`ROLES`] and bob holding no role.
fn serve(dir: &std::path::Path, db: &std::path::Path) -> Gateway {
    let config = dir.join("roles.toml");
    std::fs::write(&config, ROLES).unwrap();
    Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", config.display())
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .start()
}

/// DuckDB over a copy of the database at `path`, under the gateway's name
/// for it (`ops`).
fn duckdb_over(path: &std::path::Path) -> duckdb::Connection {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!("ATTACH '{}' AS ops; USE ops;", path.display()))
        .unwrap();
    conn
}

/// The gateway serving the operator's database and DuckDB over a copy of
/// it: what each step asks both.
struct Ops {
    /// The gateway, alice and bob its callers.
    g: Gateway,
    /// DuckDB over a copy of the database; alice's writes are replayed here.
    reference_db: duckdb::Connection,
    /// Holds the database files.
    _dir: tempfile::TempDir,
}

impl Ops {
    fn start() -> Ops {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ops.duckdb");
        operator_database(&db);
        let copy = dir.path().join("reference.duckdb");
        std::fs::copy(&db, &copy).unwrap();
        let reference_db = duckdb_over(&copy);
        let g = serve(dir.path(), &db);
        Ops {
            g,
            reference_db,
            _dir: dir,
        }
    }
}

/// One gateway for the whole corpus: later steps read earlier state (the
/// catalog lists the table alice creates, the decisions counted are every
/// step's) and the attempts are counted over all of them.
#[tokio::test]
async fn a_role_reads_what_it_is_granted_and_nothing_else_exists_for_it() {
    let ops = Ops::start();
    let mut attempts = 0;
    attempts += what_she_may_read_equals_duckdbs_answer(&ops).await;
    attempts += what_she_may_not_see_is_a_missing_table(&ops).await;
    attempts += a_hint_names_nothing(&ops).await;
    attempts += refusals_are_403_naming_what(&ops).await;
    attempts += she_changes_her_schemas_tables(&ops).await;
    attempts += the_catalog_lists_what_she_may_read(&ops).await;
    decisions_count_by_role(&ops).await;
    assert!(attempts >= 200, "{attempts} attempts");
    eprintln!("grants corpus: {attempts} attempts");
}

/// What she may read equals DuckDB's answer, in every spelling.
async fn what_she_may_read_equals_duckdbs_answer(ops: &Ops) -> usize {
    let (g, reference_db) = (&ops.g, &ops.reference_db);
    let mut attempts = 0;
    for (o, c) in spellings("orders").iter().zip(spellings("customers")) {
        for template in READS {
            let sql = template.replace("{o}", o).replace("{c}", &c);
            let want = reference(reference_db, &sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
            let (status, body) = g.run_sql(ALICE, &sql).await;
            assert_eq!(status, 200, "{sql}: {body}");
            assert_eq!(body["rows"], want, "{sql}");
            attempts += 1;
        }
    }
    let (status, body) = g.run_sql(ALICE, "EXPLAIN SELECT * FROM orders").await;
    assert_eq!(status, 200, "{body}");
    attempts + 1
}

/// What she may not see is a missing table: the gateway's answer to her
/// for a name that exists nowhere, and DuckDB's own message for it; bob,
/// who holds no role, reads it.
async fn what_she_may_not_see_is_a_missing_table(ops: &Ops) -> usize {
    let (g, reference_db) = (&ops.g, &ops.reference_db);
    let mut attempts = 0;
    for name in hidden_names() {
        let missing_name = format!("{}_{}", "nosuch", last_part(&name).len());
        let missing = name.replace(&last_part(&name), &missing_name);
        let missing = missing.replace(&last_part(&name).to_uppercase(), &missing_name);
        for template in HIDDEN {
            let sql = template.replace("{x}", &name);
            let control = template.replace("{x}", &missing);
            let (status, body) = g.run_sql(ALICE, &sql).await;
            let (want_status, want) = g.run_sql(ALICE, &control).await;
            assert_eq!(status, 400, "{sql}: {body}");
            assert_eq!(status, want_status, "{sql}: {body} vs {control}: {want}");
            for key in ["type", "title", "error_class", "line", "column"] {
                assert_eq!(body[key], want[key], "{key} of {sql}: {body} vs {want}");
            }
            let detail = body["detail"].as_str().unwrap();
            let expected = want["detail"]
                .as_str()
                .unwrap()
                .replace(&missing_name, &last_part(&name));
            assert!(
                detail.eq_ignore_ascii_case(&expected),
                "{sql}: {detail} vs {expected}"
            );
            // DuckDB's own message for the missing name, its hints dropped.
            let duckdb = reference(reference_db, &control).unwrap_err();
            let first = duckdb.lines().next().unwrap();
            assert!(
                first.ends_with(want["detail"].as_str().unwrap().lines().next().unwrap()),
                "{control}: DuckDB says {duckdb:?}, the gateway {want}"
            );
            assert!(!body.to_string().contains("Did you mean"), "{sql}: {body}");
            attempts += 1;
        }
        // Bob, who holds no role, reads it.
        if !name.contains("deals") {
            let sql = format!("SELECT count(*) FROM {name}");
            let (status, body) = g.run_sql(BOB, &sql).await;
            assert_eq!(status, 200, "{sql}: {body}");
            assert_eq!(body["rows"], reference(reference_db, &sql).unwrap());
            attempts += 1;
        }
    }
    attempts
}

/// A hint DuckDB would give her names nothing: `ordrs` is close to a
/// table she reads and to none she cannot, and no candidate is listed.
async fn a_hint_names_nothing(ops: &Ops) -> usize {
    let mut attempts = 0;
    for sql in [
        "SELECT * FROM payrol",
        "SELECT salary FROM orders",
        "SELECT * FROM deal",
    ] {
        let (status, body) = ops.g.run_sql(ALICE, sql).await;
        assert_eq!(status, 400, "{sql}: {body}");
        let text = body.to_string();
        assert!(
            !text.contains("Did you mean")
                && !text.contains("Candidate")
                && !text.contains("payroll"),
            "{sql}: {body}"
        );
        assert!(reference(&ops.reference_db, sql).is_err());
        attempts += 1;
    }
    attempts
}

/// Refused with a 403 naming what: columns outside her grant, a view
/// over what she may not read, DuckDB's catalog, files, writes outside
/// her grant, DDL but CREATE TABLE/VIEW. Bob runs each (or DuckDB does).
async fn refusals_are_403_naming_what(ops: &Ops) -> usize {
    let refused = [
        ("SELECT email FROM customers", "column email"),
        ("SELECT * FROM customers", "column email"),
        (
            "SELECT c.* FROM orders o JOIN customers c USING (id)",
            "column email",
        ),
        ("SELECT count(email) FROM customers", "column email"),
        ("SELECT * FROM v_payroll", "view"),
        ("SELECT * FROM duckdb_constraints()", "duckdb_constraints"),
        (
            "SELECT * FROM information_schema.table_constraints",
            "duckdb_constraints",
        ),
        ("DESCRIBE customers", "column email"),
        ("SELECT * FROM (DESCRIBE orders)", "DESCRIBE"),
        (
            "INSERT INTO orders VALUES (100, 1, 1, 'x')",
            "table ops.main.orders",
        ),
        ("UPDATE orders SET amount = 0", "table ops.main.orders"),
        ("DELETE FROM customers", "table ops.main.customers"),
        ("CREATE SEQUENCE client.s", "DDL"),
    ];
    let mut attempts = 0;
    for (sql, what) in refused {
        let (status, body) = ops.g.run_sql(ALICE, sql).await;
        assert_eq!(status, 403, "{sql}: {body}");
        assert!(
            body["detail"].as_str().unwrap().contains(what),
            "{sql}: {body}"
        );
        attempts += 1;
    }
    for (sql, _) in &refused[..10] {
        let (status, body) = ops.g.run_sql(BOB, sql).await;
        assert_eq!(status, 200, "bob: {sql}: {body}");
        attempts += 1;
    }
    attempts
}

/// What she may change: her schema's tables, and she reads them (each
/// change replayed on DuckDB's copy).
async fn she_changes_her_schemas_tables(ops: &Ops) -> usize {
    let (g, reference_db) = (&ops.g, &ops.reference_db);
    let mut attempts = 0;
    for sql in [
        "CREATE TABLE client.mine AS SELECT id, amount FROM orders WHERE id < 4",
        "INSERT INTO client.mine VALUES (99, 1)",
        "UPDATE client.mine SET amount = 2 WHERE id = 99",
        "DELETE FROM client.mine WHERE id = 0",
    ] {
        let (status, body) = g.run_sql(ALICE, sql).await;
        assert_eq!(status, 200, "{sql}: {body}");
        reference_db.execute_batch(sql).unwrap();
        attempts += 1;
    }
    let sql = "SELECT * FROM client.mine ORDER BY ALL";
    let (status, body) = g.run_sql(ALICE, sql).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"], reference(reference_db, sql).unwrap());
    attempts + 1
}

/// The catalog lists what she may read (her table made above included),
/// nothing else; a table she may not see is as missing there as one that
/// does not exist.
async fn the_catalog_lists_what_she_may_read(ops: &Ops) -> usize {
    let g = &ops.g;
    let catalog = g.get("/catalog", ALICE).await.1;
    let mut listed = Vec::new();
    for d in catalog["databases"].as_array().unwrap() {
        for s in d["schemas"].as_array().unwrap() {
            for t in s["tables"].as_array().unwrap() {
                listed.push(format!(
                    "{}.{}.{}",
                    d["name"].as_str().unwrap(),
                    s["name"].as_str().unwrap(),
                    t["name"].as_str().unwrap()
                ));
            }
        }
    }
    listed.sort();
    assert_eq!(
        listed,
        [
            "ops.client.mine",
            "ops.main.customers",
            "ops.main.orders",
            "ops.main.v_orders",
            "ops.main.v_payroll"
        ],
        "{catalog}"
    );
    let bob_catalog = g.get("/catalog", BOB).await.1.to_string();
    assert!(bob_catalog.contains("payroll") && bob_catalog.contains("deals"));
    let (hidden, hidden_body) = g.get("/catalog/ops/main/payroll", ALICE).await;
    let (missing, missing_body) = g.get("/catalog/ops/main/nosuch_7", ALICE).await;
    assert_eq!(
        (hidden, missing),
        (404, 404),
        "{hidden_body} {missing_body}"
    );
    assert_eq!(hidden_body["type"], missing_body["type"]);
    let (status, customers) = g.get("/catalog/ops/main/customers", ALICE).await;
    assert_eq!(status, 200);
    let columns: Vec<&str> = customers["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(columns, ["id", "name", "tenant_id"]);
    4
}

/// Decisions count by role: the steps above were each allowed and refused
/// at least 20 times.
async fn decisions_count_by_role(ops: &Ops) {
    let scrape = ops.g.get_text("/metrics").await;
    for decision in ["allowed", "refused"] {
        let count: f64 = scrape
            .lines()
            .find(|l| {
                l.starts_with("duckgate_grant_decisions_total{")
                    && l.contains(r#"role="analyst""#)
                    && l.contains(&format!(r#"decision="{decision}""#))
            })
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        assert!(count >= 20.0, "{decision}: {count}");
    }
}

/// What alice's part of the catalog is, made by DuckDB: the operator's
/// database without what she may not see.
fn alices_part(path: &std::path::Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "DROP TABLE payroll; DROP VIEW v_deals; DROP SCHEMA sales CASCADE;
         ALTER TABLE customers DROP COLUMN email;",
    )
    .unwrap();
}

/// The gateway serving the operator's database, and DuckDB over two copies
/// of it: the whole (what bob sees) and alice's part.
struct Listings {
    /// The gateway, alice and bob its callers.
    g: Gateway,
    /// DuckDB over a copy of the whole database.
    whole_db: duckdb::Connection,
    /// DuckDB over a copy holding only alice's part.
    part_db: duckdb::Connection,
    /// Holds the database files.
    _dir: tempfile::TempDir,
}

impl Listings {
    fn start() -> Listings {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("ops.duckdb");
        operator_database(&db);
        let whole = dir.path().join("whole.duckdb");
        std::fs::copy(&db, &whole).unwrap();
        let part = dir.path().join("part.duckdb");
        std::fs::copy(&db, &part).unwrap();
        alices_part(&part);
        let (whole_db, part_db) = (duckdb_over(&whole), duckdb_over(&part));
        let g = serve(dir.path(), &db);
        Listings {
            g,
            whole_db,
            part_db,
            _dir: dir,
        }
    }
}

/// Catalog listings: DuckDB's `duckdb_tables()`, `duckdb_columns()`,
/// `information_schema`, `SHOW` and `DESCRIBE` answer a confined caller
/// from its part of the catalog: each answer equals DuckDB's over a copy
/// of the database holding only that part, and bob's over the whole one.
#[tokio::test]
async fn an_identity_lists_only_what_it_may_read() {
    let l = Listings::start();
    let mut attempts = 0;
    attempts += each_listing_is_duckdbs_over_her_part(&l).await;
    attempts += no_definition_reads_but_null(&l).await;
    attempts += show_and_describe_answer_from_her_part(&l).await;
    attempts += a_hidden_table_described_is_missing(&l).await;
    assert!(attempts >= 28, "{attempts} attempts");
    eprintln!("listing corpus: {attempts} attempts");
}

/// Each listing, restricted to database ops where DuckDB's own answer
/// has more (its in-memory database): alice's answer has nothing else.
const LISTINGS: &[&str] = &[
    "SELECT database_name, schema_name, table_name, estimated_size, has_primary_key \
     FROM duckdb_tables() {where} ORDER BY ALL",
    "SELECT table_name, column_count FROM duckdb_tables() {where} \
     AND table_name <> 'customers' ORDER BY ALL",
    "SELECT database_name, schema_name, view_name, comment FROM duckdb_views() \
     {where} AND NOT internal ORDER BY ALL",
    "SELECT database_name, schema_name, table_name, column_name, data_type, is_nullable \
     FROM duckdb_columns() {where} ORDER BY ALL",
    "SELECT table_name, column_name FROM duckdb_columns() {where} \
     ORDER BY table_name, column_index",
    "SELECT database_name, schema_name FROM duckdb_schemas() {where} AND NOT internal \
     ORDER BY ALL",
    "SELECT table_catalog, table_schema, table_name, table_type FROM \
     information_schema.tables {where_tc} ORDER BY ALL",
    "SELECT table_schema, table_name, column_name, data_type FROM \
     information_schema.columns {where_tc} ORDER BY ALL",
    "SELECT catalog_name, schema_name FROM information_schema.schemata \
     WHERE catalog_name = 'ops' ORDER BY ALL",
    "SELECT schemaname, tablename FROM pg_catalog.pg_tables ORDER BY ALL",
    "SELECT t.table_name, count(*) FROM duckdb_tables() t JOIN duckdb_columns() c \
     USING (table_oid) {where_t} GROUP BY ALL ORDER BY ALL",
    "SELECT o.id, t.table_name FROM orders o, duckdb_tables() t {where_t} \
     AND o.id < 2 ORDER BY ALL",
    "SELECT database_name, schema_name, index_name, table_name, is_unique \
     FROM duckdb_indexes() {where} ORDER BY ALL",
    "SELECT database_name, schema_name, sequence_name, start_value \
     FROM duckdb_sequences() {where} ORDER BY ALL",
    "SELECT database_name, schema_name, type_name, logical_type \
     FROM duckdb_types() {where} AND NOT internal ORDER BY ALL",
];

/// Each of [`LISTINGS`] answers alice as DuckDB does over her part, bob as
/// over the whole, and the two differ.
async fn each_listing_is_duckdbs_over_her_part(l: &Listings) -> usize {
    let mut attempts = 0;
    for template in LISTINGS {
        let alice_sql = template
            .replace("{where}", "WHERE true")
            .replace("{where_tc}", "")
            .replace("{where_t}", "WHERE true");
        let ops_sql = template
            .replace("{where}", "WHERE database_name = 'ops'")
            .replace("{where_tc}", "WHERE table_catalog = 'ops'")
            .replace("{where_t}", "WHERE t.database_name = 'ops'");
        let (status, body) = l.g.run_sql(ALICE, &alice_sql).await;
        assert_eq!(status, 200, "{alice_sql}: {body}");
        let want = reference(&l.part_db, &ops_sql).unwrap_or_else(|e| panic!("{ops_sql}: {e}"));
        assert_eq!(body["rows"], want, "alice: {alice_sql}");
        let text = body.to_string();
        assert!(
            !text.contains("\"payroll\"") && !text.contains(" payroll"),
            "{alice_sql}: {body}"
        );
        let (status, body) = l.g.run_sql(BOB, &ops_sql).await;
        assert_eq!(status, 200, "{ops_sql}: {body}");
        let whole_rows = reference(&l.whole_db, &ops_sql).unwrap();
        assert_eq!(body["rows"], whole_rows, "bob: {ops_sql}");
        assert_ne!(
            whole_rows, want,
            "{ops_sql}: the control shows nothing hidden"
        );
        attempts += 2;
    }
    attempts
}

/// A table narrowed to some columns has no column count (it would count
/// the others; its columns keep their positions), and no definition reads anything but NULL (a view's
/// query or a key may name what she cannot see).
async fn no_definition_reads_but_null(l: &Listings) -> usize {
    let mut attempts = 0;
    for (sql, nulls) in [
        (
            "SELECT column_count FROM duckdb_tables() WHERE table_name = 'customers'",
            json!([[null]]),
        ),
        (
            "SELECT count(*) FROM duckdb_tables() WHERE sql IS NOT NULL",
            json!([[0]]),
        ),
        (
            "SELECT count(*) FROM information_schema.views WHERE view_definition IS NOT NULL",
            json!([[0]]),
        ),
        (
            "SELECT count(*) FROM duckdb_indexes() WHERE sql IS NOT NULL OR expressions IS NOT NULL",
            json!([[0]]),
        ),
        (
            "SELECT count(*) FROM duckdb_sequences() WHERE sql IS NOT NULL",
            json!([[0]]),
        ),
    ] {
        let (status, body) = l.g.run_sql(ALICE, sql).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["rows"], nulls, "{sql}");
        let (_, body) = l.g.run_sql(BOB, sql).await;
        let bobs = reference(&l.whole_db, sql).unwrap();
        assert_eq!(body["rows"], bobs, "bob: {sql}");
        assert_ne!(bobs, nulls, "{sql}");
        attempts += 2;
    }
    attempts
}

/// SHOW and DESCRIBE, sent alone, in their parts of the catalog.
async fn show_and_describe_answer_from_her_part(l: &Listings) -> usize {
    let mut attempts = 0;
    for sql in [
        "SHOW TABLES",
        "SHOW ALL TABLES",
        "SHOW TABLES FROM main",
        "DESCRIBE orders",
        "DESCRIBE ops.main.v_orders",
        "DESCRIBE SELECT id, name FROM customers",
        "SHOW orders",
        "SUMMARIZE orders",
        "SUMMARIZE SELECT id, name FROM customers",
    ] {
        let (status, body) = l.g.run_sql(ALICE, sql).await;
        assert_eq!(status, 200, "{sql}: {body}");
        let rows = |v: &Value| -> Value {
            // SHOW ALL TABLES lists DuckDB's in-memory database too.
            Value::Array(
                v.as_array()
                    .unwrap()
                    .iter()
                    .filter(|r| r[0] != "memory")
                    .cloned()
                    .collect(),
            )
        };
        let want = reference(&l.part_db, sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert_eq!(rows(&body["rows"]), rows(&want), "{sql}");
        attempts += 1;
    }
    attempts
}

/// A hidden table described is as missing as one that does not exist.
async fn a_hidden_table_described_is_missing(l: &Listings) -> usize {
    let (status, body) = l.g.run_sql(ALICE, "DESCRIBE payroll").await;
    let (_, control) = l.g.run_sql(ALICE, "DESCRIBE nosuch_7").await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        body["detail"]
            .as_str()
            .unwrap()
            .replace("payroll", "nosuch_7"),
        control["detail"].as_str().unwrap()
    );
    1
}

#[tokio::test]
async fn a_grant_that_names_nothing_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    operator_database(&db);
    for (grant, named) in [
        ("read = [\"ops.main.ordrs\"]", "ops.main.ordrs"),
        ("write = [\"ops.nosuch.*\"]", "ops.nosuch.*"),
        ("read = [\"ops.main\"]", "ops.main"),
        (
            "read = [\"ops.main.orders\"]\n[role.columns]\n\"ops.main.orders\" = [\"nope\"]",
            "nope",
        ),
        // A view's columns cannot be narrowed (its plan scans tables).
        (
            "read = [\"ops.main.v_orders\"]\n[role.columns]\n\"ops.main.v_orders\" = [\"id\"]",
            "is a view",
        ),
    ] {
        let config = dir.path().join("roles.toml");
        std::fs::write(&config, format!("[[role]]\nname = \"r\"\n{grant}\n")).unwrap();
        let started = Gateway::builder()
            .env("DUCKGATE_DATABASE", db.display())
            .env("DUCKGATE_CONFIG", config.display())
            .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
            .try_start();
        let Err((code, log)) = started else {
            panic!("{grant}: the gateway started");
        };
        assert_eq!(code, Some(2), "{grant}: {log:?}");
        let log = log.join("\n");
        assert!(
            log.contains("DUCKGATE_CONFIG") && log.contains(named),
            "{grant}: {log}"
        );
    }
}

/// What `/catalog/functions` offers the caller of `token`: each name with
/// its kinds.
async fn offered(g: &Gateway, token: &str) -> HashMap<String, Vec<String>> {
    let (status, body) = g.get("/catalog/functions", token).await;
    assert_eq!(status, 200, "{body}");
    body["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["name"].as_str().unwrap().to_string(),
                f["kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|k| k.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

/// GET /catalog/functions (the console's autocompletion): alice, confined
/// by her role, is offered the generators but no reader, and what she is
/// offered runs while what she is not is refused; bob, holding no role,
/// is offered the readers too. Refused names are offered to no one.
#[tokio::test]
async fn the_functions_listed_are_the_ones_each_caller_may_call() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    operator_database(&db);
    let g = serve(dir.path(), &db);
    let alice = offered(&g, ALICE).await;
    let bob = offered(&g, BOB).await;
    assert_eq!(g.get("/catalog/functions", "wrong-token").await.0, 401);
    a_confined_caller_is_offered_no_reader(&alice, &bob);
    refused_names_are_offered_to_no_one(&g, &alice, &bob).await;
    what_alice_is_offered_runs_and_the_rest_is_refused(&g, dir.path()).await;
    the_listing_is_sorted_and_holds_no_helper(&g).await;
}

/// Both are offered the scalars, aggregates and generators; only bob a
/// reader.
fn a_confined_caller_is_offered_no_reader(
    alice: &HashMap<String, Vec<String>>,
    bob: &HashMap<String, Vec<String>>,
) {
    for name in ["upper", "sum", "range"] {
        assert!(alice.contains_key(name) && bob.contains_key(name), "{name}");
    }
    assert!(
        alice["range"].contains(&"table".to_string()),
        "{:?}",
        alice["range"]
    );
    assert!(bob.contains_key("read_parquet"));
    assert!(
        !alice.contains_key("read_parquet"),
        "a reader offered to a confined caller"
    );
}

/// A name refused to everyone is offered to no one, and refused to bob.
async fn refused_names_are_offered_to_no_one(
    g: &Gateway,
    alice: &HashMap<String, Vec<String>>,
    bob: &HashMap<String, Vec<String>>,
) {
    for (refused, sql) in [
        ("current_setting", "SELECT current_setting('threads')"),
        ("duckdb_secrets", "SELECT * FROM duckdb_secrets()"),
        (
            "json_execute_serialized_sql",
            "SELECT json_execute_serialized_sql('{}')",
        ),
    ] {
        assert!(
            !alice.contains_key(refused) && !bob.contains_key(refused),
            "{refused}"
        );
        let (status, body) = g.run_sql(BOB, sql).await;
        assert_eq!(status, 403, "{sql}: {body}");
    }
}

/// What each is offered runs; what alice is not offered is refused her.
async fn what_alice_is_offered_runs_and_the_rest_is_refused(g: &Gateway, dir: &std::path::Path) {
    let (status, body) = g
        .run_sql(
            ALICE,
            "SELECT upper('a') AS u, (SELECT count(*) FROM range(3)) AS n",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let parquet = dir.join("t.parquet");
    duckdb::Connection::open_in_memory()
        .unwrap()
        .execute_batch(&format!("COPY (SELECT 1 AS x) TO '{}'", parquet.display()))
        .unwrap();
    let (status, body) = g
        .run_sql(
            ALICE,
            &format!("SELECT * FROM read_parquet('{}')", parquet.display()),
        )
        .await;
    assert_eq!(status, 403, "alice read a file: {body}");
}

/// The listing is sorted and holds no operator or internal helper.
async fn the_listing_is_sorted_and_holds_no_helper(g: &Gateway) {
    let (_, body) = g.get("/catalog/functions", BOB).await;
    let names: Vec<&str> = body["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted);
    assert!(names.iter().all(|n| !n.starts_with("__")
        && n.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')));
}
