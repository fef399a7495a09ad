//! Read-write: client objects live in schema `client` of the gateway's
//! database; `main` is the operator's (issue 20). On a database file the
//! operator prepared (a table, a view, a type, a sequence in `main`, made
//! here with DuckDB in-process), a client may read and write the rows of
//! `main`'s tables, and create, alter and drop objects of its own, which
//! land in `client`. It may not create, alter, drop or index anything in
//! `main` in any spelling DuckDB resolves there (unqualified, `main.x`,
//! `<db>.x`, `<db>.main.x`), nor create or rename an object to a name of
//! `main`'s that it would shadow for every other client. Afterwards `main`
//! is what DuckDB itself read from the file before the gateway opened it, and
//! another token's unqualified reads still reach the operator's objects.

use crate::common::Gateway;
use serde_json::{json, Value};

const ALICE: &str = "alice-token-0123456789abcdef";
const BOB: &str = "bob-token-0123456789abcdef01";

/// `main`'s objects, as DuckDB lists them (name, kind, SQL).
const MAIN_OBJECTS: &str = "
    SELECT 'table', table_name, sql FROM duckdb_tables() WHERE schema_name = 'main'
    UNION ALL SELECT 'view', view_name, sql FROM duckdb_views() WHERE schema_name = 'main' AND NOT internal
    UNION ALL SELECT 'sequence', sequence_name, sql FROM duckdb_sequences() WHERE schema_name = 'main'
    UNION ALL SELECT 'index', index_name, sql FROM duckdb_indexes() WHERE schema_name = 'main'
    UNION ALL SELECT 'type', type_name, NULL FROM duckdb_types() WHERE schema_name = 'main' AND NOT internal
    ORDER BY ALL";

/// What the operator's database holds: built by DuckDB, read back by it.
fn operator_database(path: &std::path::Path) -> Vec<Vec<Option<String>>> {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE orders (id INTEGER, amount INTEGER);
         INSERT INTO orders VALUES (1, 10), (2, 20);
         CREATE VIEW big_orders AS SELECT * FROM orders WHERE amount > 15;
         CREATE TYPE mood AS ENUM ('calm', 'busy');
         CREATE SEQUENCE order_ids;",
    )
    .unwrap();
    let mut stmt = conn.prepare(MAIN_OBJECTS).unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((0..3)
                .map(|i| r.get::<_, Option<String>>(i).unwrap())
                .collect::<Vec<_>>())
        })
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    assert!(rows.len() >= 4, "{rows:?}");
    rows
}

async fn rows(g: &Gateway, token: &str, sql: &str) -> Value {
    let (status, body) = g.run_sql(token, sql).await;
    assert_eq!(status, 200, "{sql}: {body}");
    body["rows"].clone()
}

#[tokio::test]
async fn client_objects_live_in_their_schema_and_main_stays_the_operators() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("operator.duckdb");
    let main_before = operator_database(&db);
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .start();

    // What a client may do: rows of main's tables, objects of its own.
    let allowed = [
        "INSERT INTO orders VALUES (3, 30)",
        "UPDATE orders SET amount = 31 WHERE id = 3",
        "CREATE TABLE notes (id INTEGER, body VARCHAR)",
        "CREATE VIEW note_ids AS SELECT id FROM notes",
        "CREATE INDEX notes_id ON notes (id)",
        "CREATE TABLE client.drafts AS SELECT * FROM big_orders",
        "ALTER TABLE notes ADD COLUMN seen BOOLEAN",
        "CREATE SCHEMA scratch",
        // Not on the search path: shadows nothing.
        "CREATE TABLE scratch.orders (id INTEGER)",
        "DROP TABLE scratch.orders",
        "DROP SCHEMA scratch",
        "DROP TABLE client.drafts",
    ];
    for sql in allowed {
        let (status, body) = g.run_sql(ALICE, sql).await;
        assert_eq!(status, 200, "{sql}: {body}");
    }
    // Every spelling that reaches main, and names that would shadow it.
    let db_name = "operator";
    let refused = [
        "CREATE TABLE main.evil (a INTEGER)".to_string(),
        format!("CREATE TABLE {db_name}.evil (a INTEGER)"),
        format!("CREATE TABLE {db_name}.main.evil (a INTEGER)"),
        "CREATE VIEW main.evil AS SELECT 1".to_string(),
        "CREATE TABLE orders (id INTEGER)".to_string(),
        "CREATE OR REPLACE VIEW big_orders AS SELECT 1 AS id".to_string(),
        "CREATE TABLE client.orders (id INTEGER)".to_string(),
        format!("CREATE TABLE {db_name}.client.big_orders (id INTEGER)"),
        "CREATE TYPE mood AS ENUM ('spoofed')".to_string(),
        "CREATE SEQUENCE order_ids".to_string(),
        "ALTER TABLE notes RENAME TO orders".to_string(),
        "ALTER VIEW note_ids RENAME TO big_orders".to_string(),
        "DROP TABLE orders".to_string(),
        "DROP TABLE main.orders".to_string(),
        format!("DROP TABLE {db_name}.orders"),
        "DROP VIEW big_orders".to_string(),
        "DROP TYPE mood".to_string(),
        "DROP SEQUENCE order_ids".to_string(),
        "ALTER TABLE orders ADD COLUMN evil INTEGER".to_string(),
        "ALTER TABLE orders RENAME TO gone".to_string(),
        "COMMENT ON TABLE orders IS 'spoofed'".to_string(),
        "CREATE INDEX orders_id ON orders (id)".to_string(),
        "CREATE INDEX orders_id ON main.orders (id)".to_string(),
        "DROP SCHEMA main CASCADE".to_string(),
        "DROP SCHEMA client CASCADE".to_string(),
        format!("DROP SCHEMA {db_name}.client CASCADE"),
        "CREATE TABLE temp.main.evil (a INTEGER)".to_string(),
        "CREATE TABLE system.main.evil (a INTEGER)".to_string(),
        "CREATE TABLE __ducklake_metadata_lake.main.evil (a INTEGER)".to_string(),
        // Issue 36: EXPLAIN ANALYZE runs what it explains; each is judged
        // as if sent alone.
        "EXPLAIN ANALYZE CREATE TABLE client.orders AS SELECT -1 AS id".to_string(),
        "EXPLAIN ANALYZE DROP TABLE main.orders".to_string(),
        "EXPLAIN ANALYZE DROP TABLE orders".to_string(),
        "EXPLAIN ANALYZE CREATE TYPE json AS INTEGER".to_string(),
        "EXPLAIN ANALYZE CREATE VIEW duckdb_tables AS SELECT 1".to_string(),
        "EXPLAIN ANALYZE DROP SCHEMA client CASCADE".to_string(),
        "EXPLAIN ANALYZE CREATE TABLE main.evil (a INTEGER)".to_string(),
        "EXPLAIN ANALYZE ALTER TABLE orders ADD COLUMN evil INTEGER".to_string(),
        "EXPLAIN ANALYZE CREATE SCHEMA operator".to_string(),
        "CREATE SCHEMA operator".to_string(),
        "CREATE SCHEMA system".to_string(),
    ];
    let mut wrong = Vec::new();
    for sql in &refused {
        let (status, body) = g.run_sql(ALICE, sql).await;
        let kind = body["type"].as_str().unwrap_or("");
        if status != 403 || !kind.ends_with("statement-forbidden") {
            wrong.push(format!("{sql}: {status} {body}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} reached main or shadowed it:\n{}",
        wrong.len(),
        refused.len(),
        wrong.join("\n")
    );

    // Where things are, by DuckDB's catalog.
    assert_eq!(
        rows(
            &g,
            BOB,
            "SELECT schema_name, table_name FROM duckdb_tables() ORDER BY ALL"
        )
        .await,
        json!([["client", "notes"], ["main", "orders"]])
    );
    assert_eq!(
        rows(&g, BOB, "SELECT current_schema()").await,
        json!([["client"]])
    );
    // Bob's unqualified names still mean the operator's objects.
    assert_eq!(
        rows(&g, BOB, "SELECT id, amount FROM orders ORDER BY id").await,
        json!([[1, 10], [2, 20], [3, 31]])
    );
    assert_eq!(
        rows(&g, BOB, "SELECT count(*) FROM big_orders").await,
        json!([[2]])
    );
    assert_eq!(
        rows(&g, BOB, "SELECT 'busy'::mood").await,
        json!([["busy"]])
    );
    // main's objects are exactly what DuckDB read from the file before.
    let main_after = rows(&g, BOB, MAIN_OBJECTS).await;
    let expected: Value = main_before
        .iter()
        .map(|r| r.iter().map(|v| json!(v)).collect::<Value>())
        .collect();
    assert_eq!(main_after, expected, "main changed");
}
