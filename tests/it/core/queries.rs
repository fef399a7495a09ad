//! Query ids, token names, `GET /queries` and `DELETE /queries/{id}`
//! (issue 13): a long query is listed to its owner and the admin only, is
//! cancelled from another request, its client hears `query-cancelled`, and
//! its connection serves the next query at once; every query ends with one
//! audit line that names the token, never the token or the SQL; the
//! progress listed is the running query's own.

use std::time::{Duration, Instant};

use crate::common::{eventually, App, Endpoint, Gateway, BUSY_MARGIN};
use serde_json::{json, Value};

const ALICE: &str = "alice-secret-token-0001";
const BOB: &str = "bob-secret-token-000002";
const BARE: &str = "bare-secret-token-00003";
const ADMIN: &str = "admin-secret-token-0004";
/// Runs until interrupted (DuckDB checks the interrupt flag as it goes).
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

async fn gateway() -> App {
    Gateway::builder()
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("alice:{ALICE},bob:{BOB},{BARE}"),
        )
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .env("DUCKGATE_POOL_SIZE", 1)
        .env("DUCKGATE_POOL_SPARES", 0)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", 20_000)
        .spawn_app()
        .await
}

async fn listed_ids(g: &Endpoint, token: &str) -> Vec<String> {
    let (status, body) = g.get("/queries", token).await;
    assert_eq!(status, 200, "{body}");
    body["queries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| q["id"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_query_is_listed_to_its_owner_and_cancelled_from_another_request() {
    let g = gateway().await;
    let long = {
        let (client, url) = (g.client.clone(), g.url("/query"));
        tokio::spawn(async move {
            let r = client
                .post(url)
                .bearer_auth(ALICE)
                .header("duckgate-query-id", "backfill-2026.11_30")
                .json(&json!({"sql": LONG, "timeout_ms": 120_000}))
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            let id = r
                .headers()
                .get("duckgate-query-id")
                .map(|v| v.to_str().unwrap().to_string());
            (status, id, r.json::<Value>().await.unwrap())
        })
    };
    // Listed, running, to alice and the admin; not to bob.
    let info = eventually("listing as running", Duration::from_secs(20), || async {
        let (status, body) = g.get("/queries/backfill-2026.11_30", ALICE).await;
        if status == 200 && body["state"] == "running" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await;
    assert_eq!(info["token"], "alice");
    assert_eq!(info["kind"], "SELECT");
    assert_eq!(info["sql"], LONG);
    assert_eq!(listed_ids(&g, ALICE).await, ["backfill-2026.11_30"]);
    assert_eq!(listed_ids(&g, ADMIN).await, ["backfill-2026.11_30"]);
    assert!(listed_ids(&g, BOB).await.is_empty());
    let (status, _) = g.get("/queries/backfill-2026.11_30", BOB).await;
    assert_eq!(status, 404, "bob must not see alice's query");
    // Bob can neither cancel it...
    let (status, _) = g.delete("/queries/backfill-2026.11_30", BOB).await;
    assert_eq!(status, 404);
    assert!(!long.is_finished(), "bob's cancel stopped alice's query");
    // Ids are per token: bob's own query may use the same id (and learns
    // nothing about alice's), alice may not reuse hers while it runs.
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "backfill-2026.11_30")
        .json(&json!({"sql": "SELECT 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409);
    drop(r);
    assert!(!long.is_finished());
    // Alice cancels it; her client hears why, and the one connection
    // serves the next query at once.
    let (status, body) = g.delete("/queries/backfill-2026.11_30", ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["ended"], true, "{body}");
    let freed = Instant::now();
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(BOB)
        .json(&json!({"sql": "SELECT 42 AS x"}))
        .send()
        .await
        .unwrap();
    let next = freed.elapsed();
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    eprintln!("next query on the freed connection answered after {next:?}");
    assert!(
        next < Duration::from_secs(2),
        "connection not free: {next:?}"
    );
    let (status, id, problem) = tokio::time::timeout(Duration::from_secs(10), long)
        .await
        .expect("the cancelled query's client got no answer")
        .unwrap();
    assert_eq!(status, 409, "{problem}");
    assert_eq!(problem["type"], "urn:duckgate:problem:query-cancelled");
    assert_eq!(problem["query_id"], "backfill-2026.11_30");
    assert_eq!(id.as_deref(), Some("backfill-2026.11_30"));
    assert!(listed_ids(&g, ADMIN).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_query_has_an_id_and_one_audit_line_without_secrets() {
    let g = gateway().await;
    // A generated id, in the header; a bare token named by its hash.
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(BARE)
        .json(&json!({"sql": "SELECT 'visible-in-sql-only' AS s", "params": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let id = r.headers()["duckgate-query-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(id.len() >= 16, "{id}");
    r.bytes().await.unwrap();
    // A client's id on a failing query: in the problem and its header.
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "bad-sql-1")
        .json(&json!({"sql": "SELECT * FROM nowhere_at_all", "params": []}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["duckgate-query-id"], "bad-sql-1");
    let problem: Value = r.json().await.unwrap();
    assert_eq!(problem["query_id"], "bad-sql-1");
    // Ids that are not short and plain are refused.
    for bad in ["has space", "a/b", &"x".repeat(200)] {
        let r = g
            .client
            .post(g.url("/query"))
            .bearer_auth(ALICE)
            .header("duckgate-query-id", bad)
            .json(&json!({"sql": "SELECT 1"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{bad:?}");
    }
    // One audit line per query that ran, naming the token, never the
    // token, the SQL text or a parameter.
    let log = eventually("audit lines", Duration::from_secs(5), || async {
        let log = g.log_text();
        if log.contains("bad-sql-1") && log.contains(&id) && log.matches("query ended").count() >= 2
        {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await;
    let audit: Vec<&str> = log.lines().filter(|l| l.contains("query ended")).collect();
    assert_eq!(audit.len(), 2, "{audit:#?}");
    let ok = audit.iter().find(|l| l.contains(&id)).unwrap();
    assert!(
        ok.contains(&format!(
            "token={}",
            duckgate::identity::tokens::bare_name(BARE)
        )) && ok.contains("outcome=ok")
            && ok.contains("status=200"),
        "{ok}"
    );
    assert!(ok.contains("rows=1"), "{ok}");
    let failed = audit.iter().find(|l| l.contains("bad-sql-1")).unwrap();
    assert!(
        failed.contains("token=alice") && failed.contains("status=400"),
        "{failed}"
    );
    assert!(
        failed.contains("error_class=\"Catalog\"") || failed.contains("error_class=Catalog"),
        "{failed}"
    );
    for secret in [ALICE, BOB, BARE, ADMIN, "visible-in-sql-only"] {
        assert!(!log.contains(secret), "{secret} reached the log");
    }
    assert!(
        !failed.contains("nowhere_at_all"),
        "SQL text in the audit line: {failed}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_records_also_go_to_the_audit_log_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.ndjson");
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_AUDIT_LOG", path.display())
        .spawn_app()
        .await;
    for sql in [
        "SELECT 'audit-sql-text' AS s",
        "SELECT * FROM no_such_table_x",
    ] {
        let r = g
            .client
            .post(g.url("/query"))
            .bearer_auth(ALICE)
            .json(&json!({"sql": sql}))
            .send()
            .await
            .unwrap();
        r.bytes().await.unwrap();
    }
    let text = eventually("two audit records", Duration::from_secs(5), || async {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if text.lines().count() >= 2 {
            Ok(text)
        } else {
            Err(text)
        }
    })
    .await;
    let records: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(records.len(), 2, "{text}");
    assert_eq!(records[0]["token"], "alice");
    assert_eq!(records[0]["outcome"], "ok");
    assert_eq!(records[0]["rows"], 1);
    assert_eq!(records[1]["status"], 400);
    assert_eq!(records[1]["error_class"], "Catalog");
    assert!(
        !text.contains(ALICE)
            && !text.contains("audit-sql-text")
            && !text.contains("no_such_table_x")
    );
}

/// The progress `GET /queries` shows is the running query's own, never a
/// figure left from the connection's previous query: on the pool's one
/// connection a table scan runs (its progress, with the table's rows as
/// the total, read while it runs), then a long recursive CTE (three times,
/// after tables of two sizes), or a long sleep. No figure seen for either
/// is a scan's total, and any total the CTE shows is the same after
/// either scan. (DuckDB
/// resets a connection's progress when a query begins and ends; the CTE's
/// "0% of 1,004 rows", which it shows on some runs, is the sum of its own
/// plan's estimated cardinalities, taken by DuckDB's first progress update
/// before the CTE's pipelines start: see docs/api.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_is_the_running_querys_own_not_the_previous_ones() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 1)
        .env("DUCKGATE_POOL_SPARES", 0)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", 20_000)
        .spawn_app()
        .await;
    let query = |sql: String, id: &'static str| {
        let (client, url) = (g.client.clone(), g.url("/query"));
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(ALICE)
                .header("duckgate-query-id", id)
                .json(&json!({"sql": sql, "timeout_ms": 120_000}))
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    for (table, rows) in [("scanned_a", 12_000_000u64), ("scanned_b", 7_000_000)] {
        let status = query(
            format!("CREATE TABLE {table} AS SELECT range AS i FROM range({rows})"),
            "create",
        )
        .await
        .unwrap();
        assert_eq!(status, 200);
    }
    let cte = "WITH RECURSIVE t(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM t WHERE i < 1000000000) SELECT count(*) FROM t";
    // DuckDB shows the CTE's own figure on about half of its runs (a race
    // between its first progress update and the pipelines' start) and none
    // on the others, where a stale figure would show; a sleep's one task
    // updates no progress until it ends, so a stale figure would always
    // show during it.
    let sleep = "SELECT sleep_ms(60000) IS NULL AS slept";
    let rounds = [
        ("scanned_a", 12_000_000u64, cte),
        ("scanned_b", 7_000_000, cte),
        ("scanned_a", 12_000_000, cte),
        ("scanned_b", 7_000_000, sleep),
    ];
    let (mut scan_totals, mut cte_totals) = (Vec::new(), Vec::new());
    for (table, rows, next) in rounds {
        // The previous query: a scan whose progress counts the table's rows.
        let scan = query(
            format!("SELECT sum(hash(i::VARCHAR || 'x')) FROM {table}"),
            "scan",
        );
        let scan_total = eventually("the scan's progress", Duration::from_secs(30), || async {
            let (_, q) = g.get("/queries/scan", ALICE).await;
            match q["progress"]["total_rows"].as_u64() {
                Some(t) if t > 0 => Ok(t),
                _ => Err(q),
            }
        })
        .await;
        // The table's rows, and a row for each pipeline after the scan.
        assert!(
            (rows..rows + 10).contains(&scan_total),
            "the scan's total: {scan_total}"
        );
        scan_totals.push(scan_total);
        assert_eq!(scan.await.unwrap(), 200);
        // Then, on the same connection, the next: watched, then cancelled.
        let long = query(next.to_string(), "next");
        // Sampled for a window on purpose (a stale figure could show at
        // any moment of it), and past it until a first figure came, for as
        // long as a busy machine may take to start the query.
        let mut seen = Vec::new();
        let started = Instant::now();
        let (window, latest) = (Duration::from_millis(1500), BUSY_MARGIN);
        while started.elapsed() < window || (seen.is_empty() && started.elapsed() < latest) {
            let (status, q) = g.get("/queries/next", ALICE).await;
            if status == 200 && !q["progress"].is_null() {
                seen.push(q["progress"].clone());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen.dedup();
        eprintln!("after a scan of {rows} rows, {next}: {seen:?}");
        assert!(!seen.is_empty(), "the progress of {next} was never read");
        for p in &seen {
            let total = p["total_rows"].as_u64().unwrap();
            assert!(
                !scan_totals.contains(&total),
                "a previous query's total ({scan_totals:?}): {p}"
            );
            if total > 0 && next == cte {
                cte_totals.push(total);
            }
        }
        let (status, body) = g.delete("/queries/next", ALICE).await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(long.await.unwrap(), 409);
    }
    cte_totals.sort_unstable();
    cte_totals.dedup();
    assert!(
        cte_totals.len() <= 1,
        "the CTE's total moved with the previous query: {cte_totals:?}"
    );
}
