//! Parquet answers (`format=parquet`): DuckDB's own `COPY ... (FORMAT
//! parquet)` streamed through the pipe. Each body is read back by DuckDB
//! (the test venv's Python duckdb 1.5.5) and compared with the file DuckDB
//! writes in-process for the same query; every cut is one the client asked
//! for, or a body no Parquet reader opens.

use crate::common;

use crate::common::{body_and_failure, python, Gateway};
use serde_json::{json, Value};

/// Compares the Parquet file at argv[1] with DuckDB's own Parquet of the
/// query argv[2] (names, types, values in order); argv[3]: rows expected.
const SAME_AS_DUCKDB: &str = r#"
import os, sys, tempfile
import duckdb
got_path, sql, rows = sys.argv[1], sys.argv[2], int(sys.argv[3])
con = duckdb.connect()
with tempfile.TemporaryDirectory() as d:
    ref_path = os.path.join(d, "ref.parquet")
    con.execute(f"COPY ({sql}) TO '{ref_path}' (FORMAT parquet)")
    got = con.sql(f"SELECT * FROM read_parquet('{got_path}')")
    want = con.sql(f"SELECT * FROM read_parquet('{ref_path}')")
    assert got.columns == want.columns, (got.columns, want.columns)
    assert [str(t) for t in got.types] == [str(t) for t in want.types], (got.types, want.types)
    g, w = [repr(r) for r in got.fetchall()], [repr(r) for r in want.fetchall()]
assert len(g) == rows, (len(g), rows)
assert g == w, next((a, b) for a, b in zip(g, w) if a != b)
print("same", len(g))
"#;

/// Sends a request on a connection of its own (the checks in Python
/// between requests can outlast the gateway's idle keep-alive, and a
/// request sent on a connection as the gateway closes it fails before it is
/// read): status, content type, body, and whether the transfer failed.
async fn send(
    request: impl FnOnce(&reqwest::Client) -> reqwest::RequestBuilder,
) -> (u16, String, Vec<u8>, bool) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let r = request(&client).send().await.unwrap();
    let status = r.status().as_u16();
    let ctype = r
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let (bytes, failed) = body_and_failure(r).await;
    (status, ctype, bytes, failed)
}

async fn parquet_body(g: &Gateway, body: Value) -> (u16, String, Vec<u8>, bool) {
    send(|c| c.post(g.url("/query")).json(&body)).await
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn parquet_answers_equal_duckdbs_own_file() {
    let g = Gateway::builder().start();
    let dir = tempfile::tempdir().unwrap();
    for (name, sql, rows) in [
        // Every type DuckDB's test_all_types() holds (min, max, NULL rows).
        ("all_types", "SELECT * FROM test_all_types()", 3),
        // More rows than one row group and one chunk of the body.
        (
            "many",
            "SELECT i, i / 7 AS d, 'row ' || i AS s, [i, NULL] AS l, {'a': i} AS st FROM range(300000) t(i) ORDER BY i",
            300000,
        ),
        ("empty", "SELECT 1 AS a WHERE false", 0),
    ] {
        let (status, ctype, bytes, failed) =
            parquet_body(&g, json!({"sql": sql, "format": "parquet"})).await;
        assert_eq!(status, 200, "{name}: {}", String::from_utf8_lossy(&bytes));
        assert_eq!(ctype, "application/vnd.apache.parquet", "{name}");
        assert!(!failed, "{name}: the transfer failed");
        let path = dir.path().join(format!("{name}.parquet"));
        std::fs::write(&path, &bytes).unwrap();
        let out = python(
            SAME_AS_DUCKDB,
            &[path.to_str().unwrap(), sql, &rows.to_string()],
        );
        assert!(out.contains(&format!("same {rows}")), "{name}: {out}");
    }
    // By Accept, too.
    let r = g
        .client
        .post(g.url("/query"))
        .header("accept", "application/vnd.apache.parquet")
        .body("SELECT 42 AS answer")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.unwrap().starts_with(b"PAR1"));
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_row_limit_asked_for_ends_the_file_cleanly_at_that_row() {
    let g = Gateway::builder().start();
    let dir = tempfile::tempdir().unwrap();
    let sql = "SELECT i, md5(i::VARCHAR) AS h FROM range(500000) t(i) ORDER BY i DESC";
    let (status, _, bytes, failed) = parquet_body(
        &g,
        json!({"sql": sql, "format": "parquet", "max_rows": 1234}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!failed);
    let path = dir.path().join("limited.parquet");
    std::fs::write(&path, &bytes).unwrap();
    // The reference: DuckDB's file of the same query with the same limit.
    let limited = format!("SELECT * FROM ({sql}) LIMIT 1234");
    let out = python(SAME_AS_DUCKDB, &[path.to_str().unwrap(), &limited, "1234"]);
    assert!(out.contains("same 1234"), "{out}");
}

/// Whether DuckDB can open the Parquet bytes at argv[1].
const READABLE: &str = r#"
import sys, duckdb
try:
    n = duckdb.sql(f"SELECT count(*) FROM read_parquet('{sys.argv[1]}')").fetchone()[0]
    print("readable", n)
except duckdb.Error as e:
    print("unreadable", type(e).__name__)
"#;

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_cap_the_client_did_not_ask_for_is_never_a_whole_file() {
    let g = Gateway::builder()
        .env("DUCKGATE_DEFAULT_MAX_ROWS", 100_000)
        .env("DUCKGATE_MAX_RESULT_BYTES", 20_000_000)
        .start();
    let dir = tempfile::tempdir().unwrap();
    // Small: the whole file is still held back, so the answer is a 422.
    let (status, _, bytes, _) = parquet_body(
        &g,
        json!({"sql": "SELECT 1 AS one FROM range(100001)", "format": "parquet"}),
    )
    .await;
    assert_eq!(status, 422, "{}", String::from_utf8_lossy(&bytes));
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(p["type"].as_str().unwrap().ends_with("result-too-large"));
    // Exactly at the cap is whole.
    let (status, _, bytes, failed) = parquet_body(
        &g,
        json!({"sql": "SELECT * FROM range(100000)", "format": "parquet"}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!failed);
    let path = dir.path().join("at_cap.parquet");
    std::fs::write(&path, &bytes).unwrap();
    let out = python(READABLE, &[path.to_str().unwrap()]);
    assert!(out.contains("readable 100000"), "{out}");

    // Large: the body has begun when the cap is passed; the transfer fails
    // and what arrived is no Parquet file.
    for (name, body) in [
        (
            "rows",
            json!({"sql": "SELECT i, md5(i::VARCHAR) AS a, md5((i + 1)::VARCHAR) AS b FROM range(400000) t(i)", "format": "parquet"}),
        ),
        (
            "bytes",
            json!({"sql": "SELECT i, md5(i::VARCHAR) AS a, md5((i + 1)::VARCHAR) AS b FROM range(3000000) t(i)", "format": "parquet", "max_rows": 3000000}),
        ),
    ] {
        let (status, _, bytes, failed) = parquet_body(&g, body).await;
        assert!(
            (status == 200 && failed) || status == 422,
            "{name}: {status}, failed {failed}"
        );
        let path = dir.path().join(format!("cut_{name}.parquet"));
        std::fs::write(&path, &bytes).unwrap();
        let out = python(READABLE, &[path.to_str().unwrap()]);
        assert!(out.contains("unreadable"), "{name}: {out}");
    }
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_failure_after_the_body_began_leaves_no_readable_file() {
    let g = Gateway::builder().start();
    let dir = tempfile::tempdir().unwrap();
    let sql = "SELECT CASE WHEN i > 2500000 THEN error('boom') ELSE i END AS x, md5(i::VARCHAR) AS h FROM range(3000000) t(i)";
    let (status, _, bytes, failed) =
        parquet_body(&g, json!({"sql": sql, "format": "parquet"})).await;
    assert_eq!(status, 200);
    assert!(failed, "the transfer must fail");
    assert!(bytes.len() > 1_000_000, "the body had begun");
    let path = dir.path().join("failed.parquet");
    std::fs::write(&path, &bytes).unwrap();
    let out = python(READABLE, &[path.to_str().unwrap()]);
    assert!(out.contains("unreadable"), "{out}");
    // The process and its pool are fine.
    g.query_ok("SELECT 1").await;
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn statements_without_rows_say_parquet_is_not_theirs() {
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .start();
    let (status, _, bytes, _) = parquet_body(
        &g,
        json!({"sql": "CREATE TABLE t (i INTEGER)", "format": "parquet"}),
    )
    .await;
    assert_eq!(status, 400);
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        p["type"].as_str().unwrap().ends_with("format-unavailable"),
        "{p}"
    );
    // Nothing ran: the table does not exist.
    let v = g
        .query_ok("SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 't'")
        .await;
    assert_eq!(v["rows"][0][0], 0);
}

/// A finished statement of `sql`, run with the default wait; its id.
async fn statement(g: &Gateway, id: &str, sql: &str) {
    let r = g
        .client
        .post(g.url("/statements"))
        .header("duckgate-query-id", id)
        .json(&json!({"sql": sql, "wait_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{id}: {}", r.text().await.unwrap());
}

async fn get_bytes(g: &Gateway, path: &str) -> (u16, String, Vec<u8>, bool) {
    send(|c| c.get(g.url(path))).await
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn statement_pages_in_parquet_equal_duckdbs_own_file() {
    // A spooled result is Arrow; its Parquet pages are DuckDB's writer fed
    // that Arrow, each column cast back to its DuckDB type (from DuckDB's
    // own text where Arrow lost something): the same file DuckDB writes.
    let g = Gateway::builder().start();
    let dir = tempfile::tempdir().unwrap();
    let many = "SELECT i, i / 7 AS d, 'row ' || i AS s, [i, NULL] AS l, {'a': i} AS st FROM range(300000) t(i) ORDER BY i";
    let cases = [
        ("all-types", "SELECT * FROM test_all_types()", 3, None),
        (
            "nested-lossy",
            "SELECT {'b': '101'::BIT, 't': '12:00:00+02'::TIMETZ, 'h': 170141183460469231731687303715884105727::HUGEINT} AS s,              ['1:2:3+04'::TIMETZ] AS l, 340282366920938463463374607431768211455::UHUGEINT AS u,              INTERVAL '3000000 hours' AS i",
            1,
            None,
        ),
        ("many", many, 300000, None),
        ("many-page", many, 1000, Some((123_456u64, 1000u64))),
        ("empty", "SELECT 1 AS a WHERE false", 0, None),
    ];
    for (id, sql, rows, window) in cases {
        if window.is_none() || id == "many" {
            statement(&g, id, sql).await;
        }
        let (source_id, query, reference) = match window {
            None => (id, String::new(), sql.to_string()),
            Some((offset, limit)) => (
                "many",
                format!("&offset={offset}&limit={limit}"),
                format!("SELECT * FROM ({sql}) LIMIT {limit} OFFSET {offset}"),
            ),
        };
        let (status, ctype, bytes, failed) = get_bytes(
            &g,
            &format!("/statements/{source_id}/result?format=parquet{query}"),
        )
        .await;
        assert_eq!(status, 200, "{id}: {}", String::from_utf8_lossy(&bytes));
        assert_eq!(ctype, "application/vnd.apache.parquet", "{id}");
        assert!(!failed, "{id}: the transfer failed");
        let path = dir.path().join(format!("{id}.parquet"));
        std::fs::write(&path, &bytes).unwrap();
        let out = python(
            SAME_AS_DUCKDB,
            &[path.to_str().unwrap(), &reference, &rows.to_string()],
        );
        assert!(out.contains(&format!("same {rows}")), "{id}: {out}");
    }
    // Asked by Accept, and through POST's own format.
    let r = g
        .client
        .get(g.url("/statements/empty/result"))
        .header("accept", "application/vnd.apache.parquet")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.apache.parquet"
    );
    let r = g
        .client
        .post(g.url("/statements?format=parquet"))
        .json(&json!({"sql": "SELECT 42 AS answer", "wait_ms": 60_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let bytes = r.bytes().await.unwrap();
    assert!(bytes.starts_with(b"PAR1") && bytes.ends_with(b"PAR1"));
    // Parquet readers ask for byte ranges (the footer first): a page is one
    // file kept with the result, served with its length and ranges, which
    // polars and pandas read by URL.
    let (_, _, whole, _) = get_bytes(&g, "/statements/many/result?format=parquet").await;
    let url = g.url("/statements/many/result?format=parquet");
    let n = whole.len();
    for (range, status, want) in [
        ("bytes=-8".to_string(), 206, Some(&whole[n - 8..])),
        ("bytes=4-1003".to_string(), 206, Some(&whole[4..1004])),
        (format!("bytes={}-", n + 10), 416, None),
    ] {
        let r = g
            .client
            .get(&url)
            .header("range", &range)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), status, "{range}");
        if let Some(want) = want {
            assert_eq!(r.bytes().await.unwrap(), want, "{range}");
        }
    }
    let out = python(
        r#"
import sys, duckdb, pandas as pd, polars as pl
url, sql = sys.argv[1], sys.argv[2]
want = duckdb.sql(sql).pl()
got = pl.read_parquet(url)
assert got.equals(want), (got, want)
assert pd.read_parquet(url).equals(want.to_pandas())
print("read", got.height)
"#,
        &[&url, many],
    );
    assert!(out.contains("read 300000"), "{out}");
    // A value Parquet cannot hold: the client's format, as for /query.
    statement(&g, "negative", "SELECT INTERVAL '-5 days' AS i").await;
    let (status, _, bytes, _) = get_bytes(&g, "/statements/negative/result?format=parquet").await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&bytes));
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        p["type"].as_str().unwrap().ends_with("format-unavailable"),
        "{p}"
    );
    // No page file is left behind in the spool.
    g.query_ok("SELECT 1").await;
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_value_parquet_cannot_hold_is_the_clients_format_not_storage() {
    let g = Gateway::builder().start();
    let sql = "SELECT INTERVAL '-5 days' AS i";
    // DuckDB itself refuses to write it.
    let out = python(
        r#"
import sys, duckdb, tempfile, os
with tempfile.TemporaryDirectory() as d:
    try:
        duckdb.sql(f"COPY ({sys.argv[1]}) TO '{os.path.join(d, 'x.parquet')}' (FORMAT parquet)")
        print("written")
    except duckdb.Error as e:
        print("refused", type(e).__name__)
"#,
        &[sql],
    );
    assert!(out.contains("refused"), "{out}");
    let (status, _, bytes, _) = parquet_body(&g, json!({"sql": sql, "format": "parquet"})).await;
    assert_eq!(status, 400, "{}", String::from_utf8_lossy(&bytes));
    let p: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        p["type"].as_str().unwrap().ends_with("format-unavailable"),
        "{p}"
    );
}

/// The spool's charged bytes, as /metrics reports them.
async fn spool_bytes(g: &Gateway) -> u64 {
    let m = g.get_text("/metrics").await;
    m.lines()
        .find_map(|l| l.strip_prefix("duckgate_spool_bytes "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no duckgate_spool_bytes in\n{m}")) as u64
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn parquet_pages_count_against_the_spool_quotas() {
    // Measured on one gateway: the result's bytes, then with its page.
    let sql = "SELECT i, 'row ' || i AS s FROM range(200000) t(i) ORDER BY i";
    let g = Gateway::builder().start();
    statement(&g, "q", sql).await;
    let result = spool_bytes(&g).await;
    assert!(result > 0);
    let (status, _, body, _) = get_bytes(&g, "/statements/q/result?format=parquet").await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let with_page = spool_bytes(&g).await;
    assert!(
        with_page > result,
        "the Parquet page is not charged: {with_page} bytes with it, {result} without"
    );
    let page = with_page - result;
    let r = g
        .client
        .delete(g.url("/statements/q"))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "{}", r.status());
    assert_eq!(spool_bytes(&g).await, 0, "the page outlived its result");
    drop(g);

    // A token quota between the two: the result fits, its Parquet page does
    // not. The page is a 507 the client can act on, its file and its bytes
    // go, and the result's other formats still page.
    let g = Gateway::builder()
        .env("DUCKGATE_SPOOL_TOKEN_BYTES", result + page / 2)
        .start();
    statement(&g, "q", sql).await;
    let result = spool_bytes(&g).await;
    let r = g
        .client
        .get(g.url("/statements/q/result?format=parquet"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 507);
    assert!(r.headers().contains_key("retry-after"));
    let p: Value = r.json().await.unwrap();
    assert_eq!(
        p["type"], "urn:duckgate:problem:spool-quota-exceeded",
        "{p}"
    );
    assert!(
        p["detail"]
            .as_str()
            .unwrap()
            .contains("DUCKGATE_SPOOL_TOKEN_BYTES"),
        "{p}"
    );
    assert_eq!(spool_bytes(&g).await, result);
    let spool = g.data_dir.path().join("data").join("spool");
    let pages: Vec<_> = common::files_in(&spool)
        .into_iter()
        .filter(|name| name.ends_with(".parquet"))
        .collect();
    assert!(pages.is_empty(), "a refused page stayed: {pages:?}");
    let (status, _, _, _) = get_bytes(&g, "/statements/q/result?format=csv&limit=10").await;
    assert_eq!(status, 200);
}
