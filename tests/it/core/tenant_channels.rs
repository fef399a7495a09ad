//! Side channels between tenants (issue 55): nothing a confined identity
//! can observe (rows, errors, plans, profiles, names) depends on rows or
//! objects its roles hide. On an operator's database made here by DuckDB,
//! `acme` reads the orders of tenant `acme` through a row filter that
//! stays above the scan (`lower(tenant) = 'acme'`: not a plain comparison),
//! `whole` through one that DuckDB's scan takes whole (`tenant = 'acme'`),
//! `writer` writes the schema `client`, `bob` holds no role. The classes:
//! - a join's build-side bounds and a Top-N's bound, derived from the
//!   client's side, never evaluated in a filtered scan before the policy:
//!   the scan's count in a profile does not move with the bounds the client
//!   picks (a control shows that it does for an unconfined caller);
//! - plans and profiles of what is read through a policy are not shown;
//! - row ids of a filtered table (they count hidden rows) are refused;
//! - views granted like tables: an ungranted view is as missing as a name
//!   that exists nowhere, one that reads no table included, and a view a
//!   confined writer publishes is not another tenant's to read;
//! - one connection, identities alternating: each answer is DuckDB's over
//!   that identity's rows, refusals the same whoever ran before.

use std::path::Path;

use serde_json::{json, Value};

use super::grants::reference;
use crate::common::{App, Gateway};

const ACME: &str = "acme-token-0123456789abcdef";
const WHOLE: &str = "whole-token-0123456789abcde";
const WRITER: &str = "writer-token-0123456789abcd";
const BOB: &str = "bob-token-0123456789abcdef01";

const ROLES: &str = r#"
[[role]]
name = "acme"
members = ["acme"]
read = ["ops.main.orders", "ops.main.regions"]
[role.rows]
"ops.main.orders" = "lower(tenant) = 'acme'"

[[role]]
name = "whole"
members = ["whole"]
read = ["ops.main.orders"]
[role.rows]
"ops.main.orders" = "tenant = 'acme'"

[[role]]
name = "writer"
members = ["writer"]
read = ["ops.main.regions"]
write = ["ops.client.*"]
"#;

/// The operator's database, made by DuckDB: 30,000 orders of three
/// tenants, amounts shuffled so that every range holds every tenant's; a
/// constant view no role grants; a view over the orders no role grants.
fn operator_database(path: &Path) {
    let conn = duckdb::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TABLE orders AS SELECT i AS id,
                ['acme', 'globex', 'initech'][i % 3 + 1] AS tenant,
                (i * 7919) % 30000 AS amount
            FROM range(30000) t(i);
         CREATE TABLE regions AS SELECT i AS id, 'r' || i AS region FROM range(10) t(i);
         CREATE VIEW constants AS SELECT 42 AS answer;
         CREATE VIEW all_orders AS SELECT * FROM orders;
         CREATE SCHEMA client;",
    )
    .unwrap();
}

async fn gateway(db: &Path, roles: &Path, extra: &[(&str, &str)]) -> App {
    let mut b = Gateway::builder()
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("acme:{ACME},whole:{WHOLE},writer:{WRITER},bob:{BOB}"),
        )
        .env("DUCKGATE_DATABASE", db.display())
        .env("DUCKGATE_CONFIG", roles.display());
    for (k, v) in extra {
        b = b.env(k, v);
    }
    b.spawn_app().await
}

fn setup() -> (tempfile::TempDir, std::path::PathBuf, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("ops.duckdb");
    operator_database(&db);
    let roles = dir.path().join("roles.toml");
    std::fs::write(&roles, ROLES).unwrap();
    (dir, db, roles)
}

/// The rows each scan of `table` returned, in a JSON profile
/// (`EXPLAIN (ANALYZE, FORMAT JSON)`'s text).
fn scans(profile: &str, table: &str) -> Vec<u64> {
    fn walk(node: &Value, table: &str, out: &mut Vec<u64>) {
        let name = node["operator_name"].as_str().unwrap_or("");
        let extra = node["extra_info"].to_string();
        if name.contains("SCAN") && extra.contains(table) {
            out.push(node["operator_cardinality"].as_u64().unwrap_or(0));
        }
        for child in node["children"].as_array().into_iter().flatten() {
            walk(child, table, out);
        }
    }
    let tree: Value = serde_json::from_str(profile).unwrap_or_else(|e| panic!("{e}: {profile}"));
    let mut out = Vec::new();
    walk(&tree, table, &mut out);
    assert!(!out.is_empty(), "no scan of {table} in {profile}");
    out
}

/// The profile text of an `EXPLAIN (ANALYZE, FORMAT JSON)` answer.
fn profile_of(rows: &Value) -> String {
    rows[0][1].as_str().unwrap_or_default().to_string()
}

/// A join whose build side (the client's `range`) bounds the orders it
/// probes: DuckDB pushes the build side's min and max (and a Bloom filter)
/// into the scan of `orders`. A Top-N over `orders` pushes its bound the
/// same way. For `acme`, whose filter stays above the scan, the scan's
/// count must not depend on the bounds: what it counts would be every
/// tenant's rows inside them. For `bob` (no policy) it does: the control
/// that the plan pushes them at all.
#[tokio::test]
async fn bounds_the_client_picks_never_reach_a_filtered_scan() {
    let (_dir, db, roles) = setup();
    let g = gateway(
        &db,
        &roles,
        &[("DUCKGATE_TEST_SHOW_CONFINED_PLANS", "true")],
    )
    .await;
    let join = |lo: u32, hi: u32| {
        format!(
            "EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM orders o \
             JOIN (SELECT v FROM range({lo}, {hi}) r(v)) r ON o.amount = r.v"
        )
    };
    let top = |k: u32| {
        format!("EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM orders ORDER BY amount LIMIT {k}")
    };
    for (who, token) in [("acme", ACME), ("bob", BOB)] {
        let mut joins = Vec::new();
        for (lo, hi) in [(0, 10), (0, 3000), (10000, 25000)] {
            let (status, body) = g.run_sql(token, &join(lo, hi)).await;
            assert_eq!(status, 200, "{who}: {body}");
            joins.push(scans(&profile_of(&body["rows"]), "orders"));
        }
        let mut tops = Vec::new();
        for k in [1, 100, 5000] {
            let (status, body) = g.run_sql(token, &top(k)).await;
            assert_eq!(status, 200, "{who}: {body}");
            tops.push(scans(&profile_of(&body["rows"]), "orders"));
        }
        if who == "acme" {
            // Every scan returns every row of the table to the policy
            // filter above it, whatever the bounds (a Top-N's late
            // materialization scans it twice): nothing else ran first.
            assert!(
                joins.iter().chain(&tops).flatten().all(|&n| n == 30_000),
                "acme's scans counted {joins:?} (joins) and {tops:?} (Top-N): they moved with the client's bounds"
            );
        } else {
            assert!(
                joins.windows(2).any(|w| w[0] != w[1]),
                "the control: bob's scans should count only rows inside the join's bounds: {joins:?}"
            );
        }
    }
    // The answers themselves are DuckDB's over acme's rows.
    let conn = duckdb::Connection::open(&db).unwrap();
    for sql in [
        "SELECT count(*) FROM orders o JOIN (SELECT v FROM range(0, 3000) r(v)) r ON o.amount = r.v",
        "SELECT id FROM orders ORDER BY amount, id LIMIT 100",
    ] {
        let want = reference(
            &conn,
            &sql.replace("FROM orders", "FROM (SELECT * FROM orders WHERE tenant = 'acme')"),
        )
        .unwrap();
        let (status, body) = g.run_sql(ACME, sql).await;
        assert_eq!((status, &body["rows"]), (200, &want), "{sql}: {body}");
    }
}

/// Without the test hook, no plan or profile of what a confined caller
/// reads through a row filter (or a filtered catalog listing) is shown, in
/// any form: their estimates, shape and counts come from every row.
/// Plans of what it reads whole are, and unconfined callers see theirs.
#[tokio::test]
async fn plans_of_filtered_reads_are_not_shown() {
    let (_dir, db, roles) = setup();
    let g = gateway(&db, &roles, &[]).await;
    for sql in [
        "EXPLAIN SELECT * FROM orders",
        "EXPLAIN ANALYZE SELECT count(*) FROM orders",
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT * FROM orders WHERE amount < 5",
        "EXPLAIN SELECT * FROM orders a JOIN orders b ON a.id = b.amount",
        "EXPLAIN ANALYZE SELECT * FROM information_schema.tables",
        "EXPLAIN ANALYZE SELECT * FROM duckdb_tables()",
    ] {
        for token in [ACME, WHOLE] {
            let (status, body) = g.run_sql(token, sql).await;
            assert_eq!(status, 403, "{sql}: {body}");
            assert!(
                body["type"]
                    .as_str()
                    .unwrap()
                    .ends_with("statement-forbidden"),
                "{body}"
            );
        }
        let (status, body) = g.run_sql(BOB, sql).await;
        assert_eq!(status, 200, "bob, {sql}: {body}");
    }
    let (status, body) = g
        .run_sql(ACME, "EXPLAIN ANALYZE SELECT count(*) FROM regions")
        .await;
    assert_eq!(status, 200, "a table acme reads whole: {body}");
}

/// A filtered table's row ids count the rows before each row, the hidden
/// ones too: refused to a confined caller, in any spelling; bob reads them.
#[tokio::test]
async fn row_ids_of_a_filtered_table_are_refused() {
    let (_dir, db, roles) = setup();
    let g = gateway(&db, &roles, &[]).await;
    for sql in [
        "SELECT rowid FROM orders",
        "SELECT rowid, id FROM orders WHERE id < 10",
        "SELECT max(o.rowid) FROM orders o",
        "SELECT id FROM orders ORDER BY rowid LIMIT 3",
    ] {
        for token in [ACME, WHOLE] {
            let (status, body) = g.run_sql(token, sql).await;
            assert_eq!(status, 403, "{sql}: {body}");
            let text = body.to_string();
            assert!(
                !text.contains("30000") && !text.contains("globex"),
                "{text}"
            );
        }
        let (status, body) = g.run_sql(BOB, sql).await;
        assert_eq!(status, 200, "bob, {sql}: {body}");
    }
    // A count still runs (its scan reads no column).
    let (status, body) = g.run_sql(ACME, "SELECT count(*) FROM orders").await;
    assert_eq!(
        (status, body["rows"].clone()),
        (200, json!([[10000]])),
        "{body}"
    );
}

/// Views are granted like tables. An ungranted view is answered exactly as
/// a name that exists nowhere, whether it reads a hidden table, a granted
/// one or none; a view a confined writer publishes is not another
/// tenant's to read; the writer reads what it made.
#[tokio::test]
async fn an_ungranted_view_is_as_missing_as_no_view() {
    let (_dir, db, roles) = setup();
    let g = gateway(&db, &roles, &[("DUCKGATE_POLICY", "read-write")]).await;
    let missing = |name: &str| format!("Table with name {name} does not exist!");
    let text = |body: &Value| body["detail"].as_str().unwrap_or_default().to_string();
    for (view, nowhere) in [("constants", "constantz"), ("all_orders", "all_orderz")] {
        let (s1, b1) = g.run_sql(ACME, &format!("SELECT * FROM {view}")).await;
        let (s2, b2) = g.run_sql(ACME, &format!("SELECT * FROM {nowhere}")).await;
        assert_eq!((s1, s2), (400, 400), "{b1} / {b2}");
        assert!(text(&b1).starts_with(&missing(view)), "{b1}");
        assert_eq!(
            text(&b1).replace(view, "X"),
            text(&b2).replace(nowhere, "X"),
            "the view's answer tells it from a missing one"
        );
        let (status, _) = g.run_sql(BOB, &format!("SELECT * FROM {view}")).await;
        assert_eq!(status, 200, "bob reads {view}");
    }
    // A confined writer publishes a view over nothing of anyone's.
    let (status, body) = g
        .run_sql(
            WRITER,
            "CREATE VIEW client.note AS SELECT 'for globex' AS msg",
        )
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = g.run_sql(WRITER, "SELECT msg FROM client.note").await;
    assert_eq!(
        (status, body["rows"].clone()),
        (200, json!([["for globex"]]))
    );
    let (status, body) = g.run_sql(ACME, "SELECT msg FROM client.note").await;
    assert_eq!(status, 400, "{body}");
    assert!(text(&body).starts_with(&missing("note")), "{body}");
}

/// One pooled connection, the identities taking turns on it: each answer
/// equals DuckDB's over that identity's rows, and each refusal is the same
/// whichever identity ran before (a policy left on the connection, or a
/// catalog read under it, would change them).
#[tokio::test]
async fn identities_taking_turns_on_one_connection_see_only_their_own() {
    let (_dir, db, roles) = setup();
    let g = gateway(&db, &roles, &[("DUCKGATE_POOL_SIZE", "1")]).await;
    let conn = duckdb::Connection::open(&db).unwrap();
    let acme_rows = "(SELECT * FROM orders WHERE tenant = 'acme')";
    let cases: Vec<(&str, &str, Result<Value, u16>)> = vec![
        (
            ACME,
            "SELECT count(*), sum(amount) FROM orders",
            Ok(reference(
                &conn,
                &format!("SELECT count(*), sum(amount) FROM {acme_rows}"),
            )
            .unwrap()),
        ),
        (
            WHOLE,
            "SELECT count(*), min(id) FROM orders",
            Ok(reference(&conn, &format!("SELECT count(*), min(id) FROM {acme_rows}")).unwrap()),
        ),
        (
            BOB,
            "SELECT count(*), sum(amount) FROM orders",
            Ok(reference(&conn, "SELECT count(*), sum(amount) FROM orders").unwrap()),
        ),
        (
            ACME,
            "SELECT table_name FROM duckdb_tables() ORDER BY ALL",
            Ok(json!([["orders"], ["regions"]])),
        ),
        (
            WRITER,
            "SELECT table_name FROM information_schema.tables ORDER BY ALL",
            Ok(json!([["regions"]])),
        ),
        (BOB, "SELECT count(*) FROM all_orders", Ok(json!([[30000]]))),
        (ACME, "SELECT * FROM all_orders", Err(400)),
        (WRITER, "SELECT * FROM orders", Err(400)),
        (ACME, "SELECT rowid FROM orders", Err(403)),
        // A table it may not see, named in a statement that does not bind:
        // missing, whatever the last caller's listing showed.
        (WRITER, "SELECT nocol FROM orders", Err(400)),
        (WRITER, "SELECT nocol FROM all_orders", Err(400)),
    ];
    let mut seen: std::collections::HashMap<usize, Value> = Default::default();
    // Every order of turns of neighbours, three times over.
    for round in 0..3 {
        for step in 0..cases.len() {
            let i = (step * (round + 1) * 7 + round) % cases.len();
            let (token, sql, want) = &cases[i];
            let (status, body) = g.run_sql(token, sql).await;
            match want {
                Ok(rows) => assert_eq!((status, &body["rows"]), (200, rows), "{sql}: {body}"),
                Err(code) => {
                    assert_eq!(status, *code, "{sql}: {body}");
                    let first = seen.entry(i).or_insert_with(|| body.clone());
                    assert_eq!(
                        first["detail"], body["detail"],
                        "{sql}: the refusal changed with who ran before"
                    );
                }
            }
        }
    }
}
