//! Async statements (issue 13): `POST /statements`, polling, paging the
//! spooled result in every format, cancel and discard, the spool's quotas and
//! TTL, the statements' share of the pool, and DuckDB's progress of a long
//! statement. Reference answers are the same gateway's `/query` answers,
//! which `tests/conformance.rs` holds to DuckDB's own. The gateway runs in
//! the test's process (`spawn_app`): only its HTTP behaviour is under test.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{eventually, App, Gateway, BUSY_MARGIN};
use serde_json::{json, Value};

const ALICE: &str = "alice-secret-token-0001";
const BOB: &str = "bob-secret-token-000002";
const ADMIN: &str = "admin-secret-token-0004";
/// Runs until interrupted.
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

fn builder() -> common::GatewayBuilder {
    Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
}

/// POST /statements: the response.
async fn submit(g: &App, token: &str, id: Option<&str>, body: Value) -> reqwest::Response {
    let mut r = g.client.post(g.url("/statements")).bearer_auth(token);
    if let Some(id) = id {
        r = r.header("duckgate-query-id", id);
    }
    r.json(&body).send().await.unwrap()
}

/// Polls a statement until its state is not `queued` or `running`.
async fn finished(g: &App, token: &str, id: &str, within: Duration) -> Value {
    eventually("end of the statement", within, || async {
        let (status, body) = g.get(&format!("/statements/{id}"), token).await;
        assert_eq!(status, 200, "{body}");
        if body["state"] != "queued" && body["state"] != "running" {
            Ok(body)
        } else {
            Err(body)
        }
    })
    .await
}

async fn bytes_of(r: reqwest::Response) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.bytes().await.unwrap().to_vec())
}

/// `/query`'s answer to `sql` in `format`.
async fn direct(g: &App, sql: &str, format: &str) -> Vec<u8> {
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .json(&json!({"sql": sql, "format": format, "max_rows": 10_000_000, "timeout_ms": 120_000}))
        .send()
        .await
        .unwrap();
    let (status, _, body) = bytes_of(r).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    body
}

/// The batches of an Arrow IPC stream, as one batch.
fn arrow_table(bytes: &[u8]) -> arrow::array::RecordBatch {
    let reader = arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None)
        .expect("an Arrow IPC stream");
    let schema = reader.schema();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&schema, &batches).unwrap()
}

/// A JSON answer's `columns` and the text of its `rows` array's contents.
fn json_parts(body: &[u8]) -> (Value, String) {
    let text = std::str::from_utf8(body).unwrap();
    let start = text.find(",\"rows\":[").expect("rows") + ",\"rows\":[".len();
    let end = text.rfind("],\"row_count\":").expect("row_count");
    let columns: Value =
        serde_json::from_str(&format!("{}}}", &text[..start - ",\"rows\":[".len()]))
            .expect("columns");
    (columns["columns"].clone(), text[start..end].to_string())
}

/// Pages of `limit` rows of a finished statement, in `format`.
async fn pages(g: &App, id: &str, format: &str, limit: u64) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = Some(format!(
        "/statements/{id}/result?format={format}&offset=0&limit={limit}"
    ));
    while let Some(path) = next.take() {
        let r = g
            .client
            .get(g.url(&path))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        let (status, headers, body) = bytes_of(r).await;
        assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
        next = headers.get("link").map(|l| {
            let l = l.to_str().unwrap();
            l[l.find('<').unwrap() + 1..l.find('>').unwrap()].to_string()
        });
        out.push(body);
        assert!(out.len() < 100, "pages never end");
    }
    out
}

/// Whether the pages of one result equal `/query`'s answer in `format`.
fn assert_pages_equal(format: &str, pages: &[Vec<u8>], whole: &[u8]) {
    match format {
        "ndjson" => assert!(pages.concat() == whole, "NDJSON pages differ from /query"),
        "csv" => {
            let header_end = whole.iter().position(|&b| b == b'\n').unwrap() + 1;
            let mut joined = whole[..header_end].to_vec();
            for p in pages {
                assert!(
                    p.starts_with(&whole[..header_end]),
                    "a CSV page lacks the header"
                );
                joined.extend_from_slice(&p[header_end..]);
            }
            assert!(joined == whole, "CSV pages differ from /query");
        }
        "json" => {
            let (columns, rows) = json_parts(whole);
            let mut joined = Vec::new();
            for p in pages {
                let (c, r) = json_parts(p);
                assert_eq!(c, columns, "JSON page columns differ");
                if !r.is_empty() {
                    joined.push(r);
                }
            }
            assert!(
                joined.join(",") == rows,
                "JSON page rows differ from /query"
            );
        }
        "arrow" => {
            let whole = arrow_table(whole);
            let tables: Vec<_> = pages.iter().map(|p| arrow_table(p)).collect();
            let joined = arrow::compute::concat_batches(&whole.schema(), &tables).unwrap();
            assert_eq!(joined, whole, "Arrow pages differ from /query");
        }
        _ => unreachable!(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_statement_answers_like_query_in_every_format() {
    let g = builder().spawn_app().await;
    // Every type DuckDB's test_all_types() holds, and the values whose text
    // DuckDB renders for JSON (intervals, TIMETZ, BIT, map keys, UHUGEINT).
    let sql = "SELECT * FROM test_all_types()";
    for format in ["json", "ndjson", "csv", "arrow"] {
        let r = submit(
            &g,
            ALICE,
            None,
            json!({"sql": sql, "format": format, "wait_ms": 30_000}),
        )
        .await;
        let (status, headers, body) = bytes_of(r).await;
        assert_eq!(status, 200, "{format}: {}", String::from_utf8_lossy(&body));
        assert_eq!(headers["duckgate-statement-state"], "succeeded");
        let whole = direct(&g, sql, format).await;
        assert_pages_equal(format, std::slice::from_ref(&body), &whole);
        // The same result, paged a row at a time, from the spool.
        let id = headers["duckgate-query-id"].to_str().unwrap();
        let one_by_one = pages(&g, id, format, 1).await;
        assert_eq!(one_by_one.len(), 3, "test_all_types() has three rows");
        assert_pages_equal(format, &one_by_one, &whole);
    }
    // An INTERVAL Arrow cannot hold: refused as Arrow (as /query refuses
    // it), whether answered at submission or paged; JSON pages carry it.
    let r = submit(
        &g,
        ALICE,
        Some("big-interval"),
        json!({"sql": "SELECT INTERVAL '3000000 hours' AS i", "format": "arrow", "wait_ms": 30_000}),
    )
    .await;
    assert_eq!(r.status(), 400);
    assert_eq!(
        g.get("/statements/big-interval/result?format=arrow", ALICE)
            .await
            .0,
        400
    );
    let (status, page) = g
        .get("/statements/big-interval/result?format=json", ALICE)
        .await;
    assert_eq!(status, 200);
    assert_eq!(page["rows"], json!([["3000000:00:00"]]));
    // /query takes no wait_ms.
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .json(&json!({"sql": "SELECT 1", "wait_ms": 10}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_rows_are_paged_in_every_format_equal_to_query() {
    let g = builder()
        .env("DUCKGATE_MAX_RESULT_BYTES", 1u64 << 33)
        .spawn_app()
        .await;
    let sql =
        "SELECT i, i * 0.5 AS half, 'v,' || i AS s, DATE '2020-01-01' + (i % 1000)::INTEGER AS d, \
               CASE WHEN i % 10 = 0 THEN NULL ELSE i % 3 = 0 END AS b, \
               (CASE WHEN i % 2 = 0 THEN 'x' ELSE 'y' END)::ENUM('x', 'y') AS e FROM range(1000000) t(i)";
    let r = submit(
        &g,
        ALICE,
        Some("million"),
        json!({"sql": sql, "wait_ms": 0}),
    )
    .await;
    let (status, headers, body) = bytes_of(r).await;
    assert_eq!(status, 202, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["location"], "/statements/million");
    let status = finished(&g, ALICE, "million", Duration::from_secs(120)).await;
    assert_eq!(status["state"], "succeeded", "{status}");
    assert_eq!(status["rows"], 1_000_000);
    assert_eq!(status["result"], "/statements/million/result");
    assert!(status["spool_bytes"].as_u64().unwrap() > 0);
    for format in ["json", "ndjson", "csv", "arrow"] {
        let whole = direct(&g, sql, format).await;
        let paged = pages(&g, "million", format, 300_000).await;
        assert_eq!(paged.len(), 4, "{format}: 1M rows in pages of 300k");
        assert_pages_equal(format, &paged, &whole);
        eprintln!("{format}: 4 pages equal /query's {} bytes", whole.len());
    }
    // A page past the end is empty, not an error.
    let r = g
        .client
        .get(g.url("/statements/million/result?format=csv&offset=5000000"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let (status, headers, body) = bytes_of(r).await;
    assert_eq!(status, 200);
    assert_eq!(headers["duckgate-total-rows"], "1000000");
    assert_eq!(body, b"i,half,s,d,b,e\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_statement_shows_rising_progress_and_is_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    let g = builder()
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_AUDIT_LOG", audit.display())
        .data_dir(dir)
        .spawn_app()
        .await;
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .json(&json!({"sql": "CREATE TABLE big AS SELECT range AS i FROM range(60000000)", "timeout_ms": 120_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    // A scan DuckDB reports progress for, slow enough to watch.
    let sql = "SELECT sum(hash(i::VARCHAR || 'x')) FROM big";
    let r = submit(&g, ALICE, Some("scan"), json!({"sql": sql, "wait_ms": 0})).await;
    assert_eq!(r.status(), 202);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: Vec<f64> = Vec::new();
    while seen.len() < 2 {
        let (_, s) = g.get("/statements/scan", ALICE).await;
        assert_ne!(
            s["state"], "succeeded",
            "finished before progress rose twice: {seen:?}"
        );
        if let Some(p) = s["progress"]["percentage"].as_f64() {
            if p > 0.0 && seen.last().is_none_or(|&last| p > last) {
                seen.push(p);
            }
        }
        assert!(Instant::now() < deadline, "no rising progress: {s}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!("progress seen: {seen:?}");
    // GET /queries lists it too, with its progress.
    let (_, list) = g.get("/queries", ALICE).await;
    let listed = list["queries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|q| q["id"] == "scan")
        .cloned()
        .expect("the statement is listed among running queries");
    assert!(
        listed["progress"]["total_rows"].as_u64().unwrap() > 0,
        "{listed}"
    );
    assert_eq!(listed["api"], "statement");
    // Cancelled; its share of the pool serves the next statement.
    let (status, body) = g.delete("/statements/scan", ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], true);
    assert_eq!(g.get("/statements/scan", ALICE).await.0, 404);
    let started = Instant::now();
    let r = submit(
        &g,
        ALICE,
        None,
        json!({"sql": "SELECT 42 AS x", "wait_ms": 20_000}),
    )
    .await;
    // 200: answered within its `wait_ms`, long before the scan would have
    // ended had the cancel not given its connection back (a bound of the
    // request's own, not a guess at the machine's speed); and the scan is
    // no longer running.
    assert_eq!(r.status(), 200);
    eprintln!(
        "next statement answered {:?} after the cancel",
        started.elapsed()
    );
    eventually(
        "the cancelled scan gone from /queries",
        BUSY_MARGIN,
        || async {
            let (_, list) = g.get("/queries", ALICE).await;
            match list["queries"].as_array() {
                Some(q) if q.iter().all(|q| q["id"] != "scan") => Ok(()),
                _ => Err(list),
            }
        },
    )
    .await;
    // The cancelled statement's audit record says so.
    eventually(
        "audit record of the cancel",
        Duration::from_secs(10),
        || async {
            let text = std::fs::read_to_string(&audit).unwrap_or_default();
            let cancelled = text.lines().any(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["query_id"] == "scan"
                    && v["api"] == "statement"
                    && v["outcome"] == "query-cancelled"
            });
            if cancelled {
                Ok(())
            } else {
                Err(text)
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_token_can_neither_see_nor_cancel_a_statement() {
    let g = builder().spawn_app().await;
    let r = submit(&g, ALICE, Some("mine"), json!({"sql": LONG, "wait_ms": 0})).await;
    assert_eq!(r.status(), 202);
    for path in ["/statements/mine", "/statements/mine/result"] {
        assert_eq!(g.get(path, BOB).await.0, 404, "{path}");
    }
    assert_eq!(g.delete("/statements/mine", BOB).await.0, 404);
    let (_, list) = g.get("/statements", BOB).await;
    assert_eq!(list["statements"], json!([]));
    let (_, s) = g.get("/statements/mine", ALICE).await;
    assert!(s["state"] == "running" || s["state"] == "queued", "{s}");
    assert_eq!(s["cancel_requested"], false, "bob's DELETE reached it");
    // The result of a running statement is not ready.
    assert_eq!(g.get("/statements/mine/result", ALICE).await.0, 409);
    // Ids are per token: bob may use the same one (queued behind alice's:
    // statements hold one connection of this pool of two).
    let r = submit(
        &g,
        BOB,
        Some("mine"),
        json!({"sql": "SELECT 1", "wait_ms": 0}),
    )
    .await;
    assert_eq!(r.status(), 202);
    let (_, s) = g.get("/statements/mine", BOB).await;
    assert_eq!(s["state"], "queued", "{s}");
    // The admin sees both owners' and, asked by id, must say whose.
    let (_, all) = g.get("/statements", ADMIN).await;
    assert_eq!(all["statements"].as_array().unwrap().len(), 2, "{all}");
    assert_eq!(g.get("/statements/mine", ADMIN).await.0, 409);
    let (status, body) = g.delete("/statements/mine", ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], true);
    // Bob's runs once alice's share is free.
    let s = finished(&g, BOB, "mine", Duration::from_secs(20)).await;
    assert_eq!(s["state"], "succeeded", "{s}");
    let (status, body) = g.delete("/statements/mine", ADMIN).await;
    assert_eq!(
        status, 200,
        "the admin discards bob's (the only one left): {body}"
    );
    let (_, all) = g.get("/statements", ADMIN).await;
    assert_eq!(all["statements"], json!([]));
}

fn spool_files(g: &App) -> Vec<String> {
    std::fs::read_dir(g.data_dir.path().join("data/spool"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_ttl_count_and_restart_bound_the_spool() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("data/spool")).unwrap();
    std::fs::write(dir.path().join("data/spool/left-from-before.arrow"), b"x").unwrap();
    let g = builder()
        .data_dir(dir)
        .env("DUCKGATE_SPOOL_STATEMENT_BYTES", "1MB")
        .env("DUCKGATE_SPOOL_BYTES", "3MB")
        .env("DUCKGATE_STATEMENT_TTL_MS", 1500)
        .env("DUCKGATE_MAX_STATEMENTS", 3)
        .spawn_app()
        .await;
    assert!(spool_files(&g).is_empty(), "start-up keeps old spool files");
    // Past its own quota: 507, nothing left behind.
    let r = submit(&g, ALICE, Some("big"), json!({"sql": "SELECT range AS i, range::VARCHAR AS s FROM range(2000000)", "wait_ms": 60_000})).await;
    let (status, _, body) = bytes_of(r).await;
    let problem: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 507, "{problem}");
    assert_eq!(problem["type"], "urn:duckgate:problem:spool-quota-exceeded");
    assert!(problem["detail"]
        .as_str()
        .unwrap()
        .contains("DUCKGATE_SPOOL_STATEMENT_BYTES"));
    assert!(
        spool_files(&g).is_empty(),
        "partial spool file kept: {:?}",
        spool_files(&g)
    );
    let (_, s) = g.get("/statements/big", ALICE).await;
    assert_eq!(s["state"], "failed");
    assert_eq!(s["problem"]["status"], 507, "{s}");
    let (status, p) = g.get("/statements/big/result", ALICE).await;
    assert_eq!(status, 409, "{p}");
    assert_eq!(p["type"], "urn:duckgate:problem:statement-failed");
    // Three small ones fit the count; a fourth does not while they are kept.
    for id in ["a", "b"] {
        let r = submit(
            &g,
            ALICE,
            Some(id),
            json!({"sql": "SELECT range FROM range(1000)", "wait_ms": 20_000}),
        )
        .await;
        assert_eq!(r.status(), 200);
        // Read to its end: an answer still being sent holds its result
        // (and file), which DELETE below must be the last to let go.
        r.bytes().await.unwrap();
    }
    assert_eq!(spool_files(&g).len(), 2);
    let r = submit(
        &g,
        ALICE,
        Some("d"),
        json!({"sql": "SELECT 1", "wait_ms": 20_000}),
    )
    .await;
    assert_eq!(
        r.status(),
        429,
        "a fourth statement beyond DUCKGATE_MAX_STATEMENTS=3"
    );
    // DELETE removes a result: its file goes as soon as the last holder
    // lets go (on a loaded machine the server may still be dropping the
    // answer it just finished sending).
    let (status, body) = g.delete("/statements/a", ALICE).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["cancelled"], false);
    eventually(
        "the deleted result's file",
        Duration::from_secs(10),
        || async {
            match spool_files(&g).len() {
                1 => Ok(()),
                n => Err(n),
            }
        },
    )
    .await;
    // The TTL expires the rest: 410, files gone, and room again.
    eventually("expiry", Duration::from_secs(20), || async {
        let (_, s) = g.get("/statements/b", ALICE).await;
        if s["state"] == "expired" {
            Ok(())
        } else {
            Err(s)
        }
    })
    .await;
    assert_eq!(g.get("/statements/b/result", ALICE).await.0, 410);
    assert!(spool_files(&g).is_empty(), "{:?}", spool_files(&g));
    let r = submit(
        &g,
        ALICE,
        Some("e"),
        json!({"sql": "SELECT 1", "wait_ms": 20_000}),
    )
    .await;
    assert_eq!(r.status(), 200, "expired statements make room");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statements_never_take_the_interactive_share_of_the_pool() {
    let g = builder()
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_POOL_SPARES", 0)
        .env("DUCKGATE_STATEMENT_POOL_SHARE", "1.0")
        // One token may hold the whole pool here (the per-token share is
        // tested in token_share.rs): the statement must still wait its turn.
        .env("DUCKGATE_MAX_QUERIES_PER_TOKEN", 2)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", 2_000)
        .spawn_app()
        .await;
    for id in ["s1", "s2"] {
        let r = submit(&g, ALICE, Some(id), json!({"sql": LONG, "wait_ms": 0})).await;
        assert_eq!(r.status(), 202);
    }
    // Even with a share of 1.0, a pool of two keeps one connection for
    // /query: one statement runs, the other stays queued while interactive
    // queries are answered. A query that waited for a statement's
    // connection (they never end) would be refused at the acquire timeout:
    // its 200 is the proof, not its speed.
    g.health_until(
        "one statement holding a connection",
        |h| h["pool"]["in_use"] == 1,
        BUSY_MARGIN,
    )
    .await;
    for _ in 0..3 {
        let r = g
            .client
            .post(g.url("/query"))
            .bearer_auth(BOB)
            .json(&json!({"sql": "SELECT 42 AS x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "interactive query found no connection");
    }
    let states: Vec<Value> = [
        g.get("/statements/s1", ALICE).await.1["state"].clone(),
        g.get("/statements/s2", ALICE).await.1["state"].clone(),
    ]
    .into();
    assert!(states.contains(&json!("queued")), "{states:?}");
    // Control: two long /query requests do take the whole pool, and the
    // same probe then waits out the acquire timeout: the check can fail.
    for id in ["s1", "s2"] {
        g.delete(&format!("/statements/{id}"), ALICE).await;
    }
    g.health_until(
        "the cancelled statement's connection back",
        |h| h["pool"]["in_use"] == 0,
        BUSY_MARGIN,
    )
    .await;
    let mut hogs = Vec::new();
    for _ in 0..2 {
        let (client, url) = (g.client.clone(), g.url("/query"));
        hogs.push(tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth(ALICE)
                .json(&json!({"sql": LONG, "timeout_ms": 8_000}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        }));
    }
    g.health_until(
        "both long queries holding a connection",
        |h| h["pool"]["in_use"] == 2,
        BUSY_MARGIN,
    )
    .await;
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(BOB)
        .json(&json!({"sql": "SELECT 42 AS x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        503,
        "control: two queries should have held both connections"
    );
    // A statement submitted now waits for a connection (as long as its own
    // limit allows), runs once a query lets go, and its wait is not counted
    // as a client turned away.
    let r = submit(
        &g,
        ALICE,
        Some("patient"),
        json!({"sql": "SELECT 42 AS x", "wait_ms": 0}),
    )
    .await;
    assert_eq!(r.status(), 202);
    for h in hogs {
        let _ = h.await;
    }
    let s = finished(&g, ALICE, "patient", Duration::from_secs(30)).await;
    assert_eq!(s["state"], "succeeded", "{s}");
    let health = g.health().await;
    assert_eq!(
        health["pool"]["acquire_timeouts"], 1,
        "only the probe's 503 is an acquire timeout: {health}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_take_the_places_or_the_spool_from_another() {
    let g = builder()
        .env("DUCKGATE_MAX_STATEMENTS_PER_TOKEN", 2)
        .env("DUCKGATE_SPOOL_TOKEN_BYTES", "1MB")
        .env("DUCKGATE_SPOOL_STATEMENT_BYTES", "1MB")
        .env("DUCKGATE_SPOOL_BYTES", "3MB")
        .spawn_app()
        .await;
    let rows = |n: u64| json!({"sql": format!("SELECT range FROM range({n})"), "wait_ms": 30_000});
    for id in ["a", "b"] {
        let r = submit(&g, ALICE, Some(id), rows(40_000)).await;
        assert_eq!(r.status(), 200, "{id}");
        r.bytes().await.unwrap();
    }
    // Alice's third place: refused, naming the per-token setting.
    let r = submit(&g, ALICE, Some("c"), rows(10)).await;
    let (status, _, body) = bytes_of(r).await;
    let p: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 429, "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("DUCKGATE_MAX_STATEMENTS_PER_TOKEN"),
        "{p}"
    );
    // With one place back, alice's results would pass her byte quota...
    assert_eq!(g.delete("/statements/a", ALICE).await.0, 200);
    let r = submit(&g, ALICE, Some("c"), rows(110_000)).await;
    let (status, _, body) = bytes_of(r).await;
    let p: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, 507, "{p}");
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("DUCKGATE_SPOOL_TOKEN_BYTES"),
        "{p}"
    );
    // ...while bob, with the same statement, has room of his own.
    let r = submit(&g, BOB, Some("c"), rows(110_000)).await;
    assert_eq!(r.status(), 200);
    r.bytes().await.unwrap();
    for id in ["x", "y"] {
        let r = submit(&g, BOB, Some(id), rows(10)).await;
        assert_eq!(r.status(), if id == "x" { 200 } else { 429 }, "{id}");
    }
}

/// How many of alice's statements a1-a3 run, and their states.
async fn alices_running(g: &App) -> (usize, Vec<Value>) {
    let mut alice = Vec::new();
    for id in ["a1", "a2", "a3"] {
        alice.push(g.get(&format!("/statements/{id}"), ALICE).await.1["state"].clone());
    }
    let n = alice.iter().filter(|s| *s == "running").count();
    (n, alice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tokens_long_statements_leave_another_token_its_part_of_the_share() {
    // Issue 36: with a pool of 4 (statements' share 2) and two tokens,
    // alice's two long statements held the whole share and bob's `SELECT 1`
    // was still queued 15 s later (the console sends everything there).
    let g = builder()
        .env("DUCKGATE_POOL_SIZE", 4)
        .env("DUCKGATE_STATEMENT_POOL_SHARE", "0.5")
        .spawn_app()
        .await;
    for id in ["a1", "a2", "a3"] {
        let r = submit(&g, ALICE, Some(id), json!({"sql": LONG, "wait_ms": 0})).await;
        assert_eq!(r.status(), 202);
    }
    // Alone, alice uses the whole share (her part, and the rest borrowed:
    // issue 60); her third statement queues.
    eventually(
        "alice's statements holding the whole share",
        Duration::from_secs(20),
        || async {
            match alices_running(&g).await {
                (2, _) => Ok(()),
                (_, alice) => Err(Value::from(alice)),
            }
        },
    )
    .await;
    let started = Instant::now();
    let r = submit(
        &g,
        BOB,
        Some("b1"),
        json!({"sql": "SELECT 1 AS x", "wait_ms": 0}),
    )
    .await;
    // 202, or 200 when it finished before the answer was made.
    assert!(r.status() == 202 || r.status() == 200, "{}", r.status());
    // Before the fix it stayed queued as long as alice's (endless)
    // statements ran: any bound shows it, `finished` fails past its own.
    let s = finished(&g, BOB, "b1", BUSY_MARGIN).await;
    assert_eq!(s["state"], "succeeded", "{s}");
    let b1_took = started.elapsed();
    // Bob took back what alice borrowed; hers started again, none lost.
    let (n, alice) = alices_running(&g).await;
    assert!(n >= 1, "{alice:?}");
    assert!(
        alice.iter().all(|s| *s == "running" || *s == "queued"),
        "{alice:?}"
    );
    // Control: the same three long statements of alice and one of bob's
    // own: bob's second waits behind his first, so the bound is per token.
    let r = submit(&g, BOB, Some("b2"), json!({"sql": LONG, "wait_ms": 0})).await;
    assert_eq!(r.status(), 202);
    g.statement_in("b2", Some(BOB), &["running"], BUSY_MARGIN)
        .await;
    let r = submit(
        &g,
        BOB,
        Some("b3"),
        json!({"sql": "SELECT 1 AS x", "wait_ms": 0}),
    )
    .await;
    assert_eq!(r.status(), 202);
    // A sleep on purpose: b3 must *stay* queued, so the test holds for
    // three times what b1 (the same SELECT 1, when bob had room) took from
    // submission to its end, and at least the 1.5 s it always held.
    tokio::time::sleep((b1_took * 3).max(Duration::from_millis(1_500))).await;
    let (_, s) = g.get("/statements/b3", BOB).await;
    assert_eq!(s["state"], "queued", "{s}");
    for (token, id) in [(ALICE, "a1"), (ALICE, "a2"), (ALICE, "a3"), (BOB, "b2")] {
        g.delete(&format!("/statements/{id}"), token).await;
    }
    let s = finished(&g, BOB, "b3", Duration::from_secs(20)).await;
    assert_eq!(s["state"], "succeeded", "{s}");
}

#[tokio::test]
async fn a_page_read_by_url_has_its_length_and_byte_ranges() {
    // polars 2 reads a CSV by URL with HEAD (its length) and then byte
    // ranges, and refuses an answer without Content-Length; so does any
    // reader of a signed link, which gets the page as a file.
    let g = builder().spawn_app().await;
    let sql = "SELECT i, i * 2 AS j, 'row ' || i || ' é' AS s, INTERVAL (i) SECOND AS iv FROM range(50000) t(i) ORDER BY i";
    let r = submit(&g, ALICE, Some("by-url"), json!({"sql": sql, "wait_ms": 0})).await;
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(
        finished(&g, ALICE, "by-url", Duration::from_secs(60)).await["state"],
        "succeeded"
    );
    for format in ["csv", "ndjson", "arrow"] {
        let path = format!("/statements/by-url/result?format={format}&offset=100&limit=30000");
        // The page as the console reads it: streamed as it is encoded.
        let (status, headers, streamed) = bytes_of(
            g.client
                .get(g.url(&path))
                .bearer_auth(ALICE)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 200);
        assert!(
            headers.get("content-length").is_none(),
            "{format}: a stream"
        );
        // HEAD says its length, and that ranges are served.
        let r = g
            .client
            .head(g.url(&path))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(
            r.headers()["content-length"],
            streamed.len().to_string(),
            "{format}"
        );
        assert_eq!(r.headers()["accept-ranges"], "bytes", "{format}");
        // A range is the same bytes of the same page.
        let r = g
            .client
            .get(g.url(&path))
            .bearer_auth(ALICE)
            .header("range", "bytes=0-3")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206, "{format}");
        assert_eq!(r.bytes().await.unwrap(), streamed[..4], "{format}");
        let r = g
            .client
            .get(g.url(&path))
            .bearer_auth(ALICE)
            .header("range", "bytes=1000-")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 206, "{format}");
        assert_eq!(r.bytes().await.unwrap(), streamed[1000..], "{format}");
        // A signed link's page comes whole, with its length.
        let link: Value = g
            .client
            .post(g.url(&format!("/statements/by-url/links?format={format}")))
            .bearer_auth(ALICE)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let url = format!("{}&offset=100&limit=30000", link["path"].as_str().unwrap());
        let (status, headers, whole) =
            bytes_of(g.client.get(g.url(&url)).send().await.unwrap()).await;
        assert_eq!(status, 200, "{format}");
        assert_eq!(
            headers["content-length"],
            whole.len().to_string(),
            "{format}"
        );
        assert_eq!(whole, streamed, "{format}: the file is the streamed page");
    }
}
