//! Signed result URLs (`POST /statements/{id}/links`): a statement's owner
//! mints a URL for its result pages that needs no header until it expires,
//! for readers that cannot send one (polars, a browser link). The URL holds
//! for exactly its statement, until its expiry, and never carries the token.

use std::time::Duration;

use crate::common::{python, Gateway};
use serde_json::{json, Value};

const TOKENS: &str = "alice:alice-secret-9d2c,bob:bob-secret-41f7";
const ALICE: &str = "alice-secret-9d2c";
const BOB: &str = "bob-secret-41f7";

/// A finished statement of `token` with id `id`.
async fn statement(g: &Gateway, token: &str, id: &str, sql: &str) {
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(token)
        .header("duckgate-query-id", id)
        .json(&json!({"sql": sql, "wait_ms": 30_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
}

async fn mint(g: &Gateway, token: &str, id: &str, query: &str) -> (u16, Value) {
    let r = g
        .client
        .post(g.url(&format!("/statements/{id}/links{query}")))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

async fn get(g: &Gateway, url: &str) -> (u16, String) {
    let r = g.client.get(url).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_signed_url_reads_its_statement_without_a_header_and_nothing_else() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKENS)
        .start();
    let sql = "SELECT i, 'v' || i AS s FROM range(2500) t(i) ORDER BY i";
    statement(&g, ALICE, "report-1", sql).await;
    statement(&g, ALICE, "report-2", "SELECT 'other' AS x").await;
    statement(&g, BOB, "bobs", "SELECT 'bob' AS x").await;

    // Without a header and without a signature: 401.
    let (status, _) = get(&g, &g.url("/statements/report-1/result?format=csv")).await;
    assert_eq!(status, 401);

    let (status, link) = mint(&g, ALICE, "report-1", "?format=csv&expires_in_s=600").await;
    assert_eq!(status, 201, "{link}");
    let url = link["url"].as_str().unwrap().to_string();
    assert!(url.starts_with(&g.base), "{url}");
    assert!(!url.contains(ALICE), "the token must never be in the URL");
    assert!(link["expires_at"].as_u64().unwrap() > 0);
    // The signed URL answers as the owner's header would.
    let (status, body) = get(&g, &url).await;
    assert_eq!(status, 200, "{body}");
    let with_header = g
        .client
        .get(g.url("/statements/report-1/result?format=csv"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, with_header);
    assert_eq!(body.lines().count(), 2501);
    // Pages and other formats of the same result are the reader's choice.
    let (status, page) = get(&g, &format!("{url}&offset=10&limit=5")).await;
    assert_eq!(status, 200);
    assert_eq!(page.lines().count(), 6);

    // The same signature on another statement, another owner, a later
    // expiry, another route or method: refused.
    let other = url.replace("report-1", "report-2");
    assert_eq!(get(&g, &other).await.0, 401);
    let as_bob = url.replace("owner=alice", "owner=bob");
    assert_eq!(get(&g, &as_bob).await.0, 401);
    let expires = link["expires_at"].as_u64().unwrap();
    let later = url.replace(
        &format!("expires={expires}"),
        &format!("expires={}", expires + 3600),
    );
    assert_eq!(get(&g, &later).await.0, 401);
    let status_route = url.replace("/result?", "?");
    assert_eq!(get(&g, &status_route).await.0, 401);
    let r = g.client.delete(&status_route).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = g.client.delete(&url).send().await.unwrap();
    assert!(r.status().is_client_error());
    // The statement is still there for its owner.
    assert_eq!(get(&g, &url).await.0, 200);

    // Only the owner (or the admin) mints: bob's token sees no report-1.
    assert_eq!(mint(&g, BOB, "report-1", "").await.0, 404);
    assert_eq!(mint(&g, ALICE, "bobs", "").await.0, 404);
    // Bad options are problems.
    assert_eq!(mint(&g, ALICE, "report-1", "?expires_in_s=0").await.0, 400);
    assert_eq!(
        mint(&g, ALICE, "report-1", "?expires_in_s=999999").await.0,
        400
    );
    assert_eq!(mint(&g, ALICE, "report-1", "?format=xml").await.0, 400);

    // It stops at its expiry.
    let expires_in = Duration::from_secs(1);
    let (_, short) = mint(
        &g,
        ALICE,
        "report-1",
        &format!("?expires_in_s={}", expires_in.as_secs()),
    )
    .await;
    let short = short["url"].as_str().unwrap().to_string();
    // A sleep on purpose: the link must outlive its expiry (whole seconds,
    // so a second more, and a little for the clock's rounding).
    tokio::time::sleep(expires_in + Duration::from_millis(1100)).await;
    let (status, body) = get(&g, &short).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("expired"), "{body}");

    // Failed signatures are counted.
    let metrics = g.get_text("/metrics").await;
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with("duckgate_auth_failures_total") && l.contains("reason=\"signature\"")
        })
        .expect("the signature failures counter");
    let n: f64 = line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(n >= 6.0, "{line}");

    // Neither signatures nor tokens reach the log.
    let sig = url.split("sig=").nth(1).unwrap();
    let log = g.log_text();
    for secret in [sig, ALICE, BOB] {
        assert!(!log.contains(secret), "{secret} reached the log");
    }
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn readers_that_send_no_header_read_a_signed_url() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKENS)
        .start();
    let sql = "SELECT i, i / 3 AS x, 'row ' || i AS s, DATE '2024-01-01' + (i % 400)::INT AS d FROM range(20000) t(i) ORDER BY i";
    statement(&g, ALICE, "for-tools", sql).await;
    let (_, csv) = mint(&g, ALICE, "for-tools", "?format=csv").await;
    let (_, arrow) = mint(&g, ALICE, "for-tools", "?format=arrow").await;
    // pandas, pyarrow and polars with no header at all.
    // The reference: DuckDB in-process, the same query.
    let out = python(
        r#"
import io, sys, urllib.request
import duckdb, pandas as pd, pyarrow.ipc
csv_url, arrow_url, sql = sys.argv[1], sys.argv[2], sys.argv[3]
ref = duckdb.sql(sql).df()
got = pd.read_csv(csv_url, parse_dates=["d"])
got["d"] = got["d"].astype(ref["d"].dtype)
pd.testing.assert_frame_equal(got, ref, check_dtype=False)
print("pandas", len(got))
table = pyarrow.ipc.open_stream(urllib.request.urlopen(arrow_url).read()).read_all()
assert table.equals(duckdb.sql(sql).arrow().read_all() if hasattr(duckdb.sql(sql).arrow(), "read_all") else duckdb.sql(sql).arrow()), "arrow differs"
print("pyarrow", table.num_rows)
try:
    import polars as pl
except ImportError:
    print("polars not installed")
else:
    got = pl.read_csv(csv_url, try_parse_dates=True)
    want = pl.from_arrow(duckdb.sql(sql).arrow())
    assert got.height == want.height and got["i"].to_list() == want["i"].to_list() and got["s"].to_list() == want["s"].to_list()
    print("polars", got.height)
"#,
        &[
            csv["url"].as_str().unwrap(),
            arrow["url"].as_str().unwrap(),
            sql,
        ],
    );
    assert!(out.contains("pandas 20000"), "{out}");
    assert!(out.contains("pyarrow 20000"), "{out}");
    assert!(out.contains("polars 20000"), "{out}");
    eprintln!("{out}");
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_signed_url_does_not_follow_its_id_to_a_later_statement() {
    // Issue 36: delete `st-a1`, submit a new `st-a1`, and the old link read
    // the new result.
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKENS)
        .start();
    statement(&g, ALICE, "st-a1", "SELECT 'first' AS x").await;
    let (status, link) = mint(&g, ALICE, "st-a1", "?format=csv").await;
    assert_eq!(status, 201, "{link}");
    let old = link["url"].as_str().unwrap().to_string();
    let (status, body) = get(&g, &old).await;
    assert_eq!((status, body.as_str()), (200, "x\nfirst\n"));
    let r = g
        .client
        .delete(g.url("/statements/st-a1"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    statement(&g, ALICE, "st-a1", "SELECT 'second' AS x").await;
    let (status, body) = get(&g, &old).await;
    assert_eq!(status, 404, "the old link read the new statement: {body}");
    // A link minted for the new statement reads it.
    let (_, link) = mint(&g, ALICE, "st-a1", "?format=csv").await;
    let (status, body) = get(&g, link["url"].as_str().unwrap()).await;
    assert_eq!((status, body.as_str()), (200, "x\nsecond\n"));
    // The instance is part of what is signed.
    let (_, other) = mint(&g, ALICE, "st-a1", "?format=csv").await;
    let forged = old.replace(
        old.split("instance=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap(),
        other["url"]
            .as_str()
            .unwrap()
            .split("instance=")
            .nth(1)
            .unwrap()
            .split('&')
            .next()
            .unwrap(),
    );
    assert_eq!(get(&g, &forged).await.0, 401);
}

/// polars 2 (the venv's pin) reads a result by URL through a signed link:
/// `read_csv`, `scan_csv` (HEAD for the length, then byte ranges) and
/// `read_parquet` of the statement's pages, every value equal to DuckDB's.
/// It cannot send a token over HTTP (`storage_options` headers are not
/// sent; tried in every spelling polars 2.1 accepts), so `GET /query`, which
/// needs the token, is not polars' door: its HEAD is answered 401 and
/// polars says so; on an anonymous gateway the streamed answer has no
/// length, which polars 2 refuses (docs/api.md, "Results by URL").
#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, polars 2); scripts/test installs it"]
async fn polars_2_reads_a_signed_link_in_csv_and_parquet() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKENS)
        .start();
    let sql = "SELECT i, i / 3 AS x, 'row ' || i || ', \"q\"' AS s, DATE '2024-01-01' + (i % 400)::INT AS d, CASE WHEN i % 7 = 0 THEN NULL ELSE i % 13 END AS maybe FROM range(30000) t(i) ORDER BY i";
    statement(&g, ALICE, "for-polars", sql).await;
    let (_, csv) = mint(&g, ALICE, "for-polars", "?format=csv").await;
    let (_, parquet) = mint(&g, ALICE, "for-polars", "?format=parquet").await;
    let by_get = format!(
        "{}?sql={}&format=csv",
        g.url("/query"),
        "SELECT%201%20AS%20one"
    );
    let out = python(
        r#"
import json, sys
import duckdb, polars as pl
csv_url, parquet_url, get_url, sql = sys.argv[1:5]
want = duckdb.sql(sql).fetchall()
want_frame = pl.from_arrow(duckdb.sql(sql).arrow())
out = {"version": pl.__version__}
got = pl.read_csv(csv_url, try_parse_dates=True)
out["csv_rows"] = got.height
out["csv_equal"] = got.rows() == want
lazy = pl.scan_csv(csv_url, try_parse_dates=True).filter(pl.col("i") >= 29990).collect()
out["scan_equal"] = lazy.rows() == [r for r in want if r[0] >= 29990]
got = pl.read_parquet(parquet_url)
out["parquet_rows"] = got.height
out["parquet_equal"] = got.equals(want_frame)
try:
    pl.read_csv(get_url, storage_options={"Authorization": "Bearer " + sys.argv[5]})
    out["get_query"] = None
except Exception as e:
    out["get_query"] = str(e)[:400]
print(json.dumps(out))
"#,
        &[
            csv["url"].as_str().unwrap(),
            parquet["url"].as_str().unwrap(),
            &by_get,
            sql,
            ALICE,
        ],
    );
    let v: Value = serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}: {out}"));
    assert!(v["version"].as_str().unwrap().starts_with("2."), "{v:#}");
    assert_eq!(v["csv_rows"], 30000, "{v:#}");
    assert_eq!(v["csv_equal"], true, "{v:#}");
    assert_eq!(v["scan_equal"], true, "{v:#}");
    assert_eq!(v["parquet_rows"], 30000, "{v:#}");
    assert_eq!(v["parquet_equal"], true, "{v:#}");
    let e = v["get_query"].as_str().unwrap_or_default();
    assert!(e.contains("401"), "{v:#}");
    // Without tokens (an anonymous gateway on loopback) the GET is
    // answered, but as a stream: no length, which polars 2 refuses.
    let anonymous = Gateway::builder().start();
    let out = python(
        r#"
import sys, polars as pl
try:
    pl.read_csv(sys.argv[1])
    print("read")
except Exception as e:
    print(str(e)[:400])
"#,
        &[&format!(
            "{}?sql=SELECT%201%20AS%20one&format=csv",
            anonymous.url("/query")
        )],
    );
    assert!(out.contains("Content-Length Header missing"), "{out}");
    assert!(!g.log_text().contains(ALICE), "the token reached the log");
}
