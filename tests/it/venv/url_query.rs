//! Results by URL: `GET /query?sql=…&format=…` (and `HEAD`) for statements
//! that read, with POST's guard, limits, tokens, ids and audit; read by the
//! tools people point at a URL (pandas, DuckDB), each compared with DuckDB
//! in-process on the same query.

use std::time::Duration;

use crate::common::{eventually, python, Gateway};
use serde_json::Value;

const TOKEN: &str = "analyst:url-token-5d1f";
const SECRET: &str = "url-token-5d1f";

fn url(base: &str, sql: &str, format: Option<&str>) -> String {
    let mut u = reqwest::Url::parse(&format!("{base}/query")).unwrap();
    u.query_pairs_mut().append_pair("sql", sql);
    if let Some(f) = format {
        u.query_pairs_mut().append_pair("format", f);
    }
    u.to_string()
}

/// The audit lines ("query ended") logged so far.
fn audit_lines(log: &str) -> usize {
    log.lines().filter(|l| l.contains("query ended")).count()
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn get_runs_a_read_with_posts_token_id_and_audit() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .spawn_app()
        .await;
    let sql = "SELECT 42 AS answer, 'marker-7f3a' AS m";
    // The token is required, as for POST.
    let r = g.client.get(url(&g.base, sql, None)).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .client
        .get(url(&g.base, sql, None))
        .bearer_auth(SECRET)
        .header("duckgate-query-id", "by-url-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["duckgate-query-id"], "by-url-1");
    assert_eq!(r.headers()["duckgate-statement"], "SELECT");
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["rows"], serde_json::json!([[42, "marker-7f3a"]]));

    // The format by the URL, else by Accept.
    let r = g
        .client
        .get(url(
            &g.base,
            "SELECT 1 AS a UNION ALL SELECT 2",
            Some("csv"),
        ))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    assert_eq!(r.text().await.unwrap(), "a\n1\n2\n");
    let r = g
        .client
        .get(url(&g.base, "SELECT 1 AS a", None))
        .bearer_auth(SECRET)
        .header("accept", "application/x-ndjson")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "{\"a\":1}\n");

    // Limits as POST's: max_rows asked for is kept.
    let r = g
        .client
        .get(format!(
            "{}&max_rows=3",
            url(&g.base, "SELECT * FROM range(10)", Some("csv"))
        ))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap().lines().count(),
        4,
        "header + 3 rows"
    );

    // Bad requests are problems, never a query run.
    for (u, status, slug) in [
        (format!("{}/query", g.base), 400, "invalid-query-string"),
        (format!("{}/query?sql=", g.base), 400, "empty-sql"),
        (url(&g.base, "SELECT 1", Some("xml")), 400, "unknown-format"),
        (
            format!("{}&timeout_ms=-1", url(&g.base, "SELECT 1", None)),
            400,
            "invalid-timeout",
        ),
        (
            url(&g.base, "SELECT * FROM no_such_table", None),
            400,
            "sql-error",
        ),
    ] {
        let r = g.client.get(&u).bearer_auth(SECRET).send().await.unwrap();
        assert_eq!(r.status(), status, "{u}");
        assert_eq!(r.headers()["content-type"], "application/problem+json");
        let p: Value = r.json().await.unwrap();
        assert!(p["type"].as_str().unwrap().ends_with(slug), "{u}: {p}");
    }

    // One audit line per query run (the two that ran plus the SQL error),
    // naming the token; never the SQL, here or anywhere in the log.
    let log = eventually("audit lines", Duration::from_secs(5), || async {
        let log = g.log_text();
        if audit_lines(&log) >= 5 {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await;
    assert!(
        log.contains("by-url-1") && log.contains("token=analyst"),
        "{log}"
    );
    for secret in ["marker-7f3a", "no_such_table", "range(10)", SECRET] {
        assert!(!log.contains(secret), "{secret} reached the log:\n{log}");
    }
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn get_runs_only_statements_that_read_whatever_the_policy() {
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .spawn_app()
        .await;
    let r = g
        .client
        .get(url(&g.base, "CREATE TABLE made_by_get (a INT)", None))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = g
        .client
        .get(url(
            &g.base,
            "SELECT count(*) AS n FROM duckdb_tables() WHERE table_name = 'made_by_get'",
            Some("csv"),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "n\n0\n", "nothing was created");
    // POST may, under this policy: the refusal is GET's own.
    let r = g
        .query(serde_json::json!({"sql": "CREATE TABLE made_by_post (a INT)"}))
        .await;
    assert_eq!(r.status(), 200);
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_write_a_connection_accepted_for_post_is_refused_to_get_and_to_read_only() {
    // The guard's verdicts are kept per connection and text: a write
    // accepted for a POST was answered from that cache to a GET of the same
    // text on the same connection, and ran.
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 1)
        .spawn_app()
        .await;
    let write = "INSERT INTO t SELECT 1";
    let r = g
        .query(serde_json::json!({"sql": "CREATE TABLE t (a INT)"}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        g.query(serde_json::json!({ "sql": write })).await.status(),
        200
    );
    let r = g
        .client
        .get(url(&g.base, write, None))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403, "{}", r.text().await.unwrap());
    // A request may ask for reads only, in its body or its query string.
    let r = g
        .query(serde_json::json!({ "sql": write, "read_only": true }))
        .await;
    assert_eq!(r.status(), 403);
    let r = g
        .client
        .post(g.url("/query?read_only=true"))
        .body(write)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let r = g
        .query(serde_json::json!({ "sql": "SELECT count(*) AS n FROM t", "read_only": true }))
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(
        v["rows"],
        serde_json::json!([[1]]),
        "only the first INSERT ran"
    );
}

#[tokio::test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn head_checks_the_request_without_running_it() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .spawn_app()
        .await;
    // A query that would fail if it ran: HEAD says only that a GET would
    // run it.
    let failing = url(&g.base, "SELECT * FROM no_such_table", Some("csv"));
    let r = g
        .client
        .head(&failing)
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "text/csv; charset=utf-8");
    assert!(
        !r.headers().contains_key("content-length"),
        "a HEAD answer claims no length (0 would read as an empty file)"
    );
    // What HEAD can check, it checks.
    let r = g.client.head(&failing).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .client
        .head(url(&g.base, "SELECT 1", Some("xml")))
        .bearer_auth(SECRET)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    // HEAD then GET, as httpfs does: the query runs once.
    let ok = url(&g.base, "SELECT 1 AS one", Some("csv"));
    let r = g.client.head(&ok).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = g.client.get(&ok).bearer_auth(SECRET).send().await.unwrap();
    assert_eq!(r.text().await.unwrap(), "one\n1\n");
    eventually("the GET's audit line", Duration::from_secs(5), || async {
        let log = g.log_text();
        if audit_lines(&log) >= 1 {
            Ok(log)
        } else {
            Err(log)
        }
    })
    .await;
    // Had HEAD run the query, its audit line would have been written when
    // its answer ended, before the GET was sent.
    let log = g.log_text();
    assert_eq!(audit_lines(&log), 1, "only the GET ran:\n{log}");
}

/// Typed columns and more rows than one batch or chunk.
const CLIENT_SQL: &str = "SELECT i, i / 4 AS x, 'row ' || i || ', \"quoted\"' AS s, DATE '2024-01-01' + (i % 400)::INT AS d, CASE WHEN i % 7 = 0 THEN NULL ELSE i % 13 END AS maybe FROM range(300000) t(i)";

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn pandas_and_duckdb_read_a_result_by_url() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .start();
    // Above the row cap of a query that asks for none (100,000 before the
    // cut became an error): this reader asks for its limit.
    let csv_url = format!("{}&max_rows=1000000", url(&g.base, CLIENT_SQL, Some("csv")));
    let out = python(
        r#"
import os, sys, tempfile
import duckdb, pandas as pd
url, token, sql = sys.argv[1], sys.argv[2], sys.argv[3]
# pandas sends storage_options as request headers for http(s) URLs.
got = pd.read_csv(url, storage_options={"Authorization": "Bearer " + token})
# The reference: DuckDB in-process writes the same query as CSV, and
# pandas reads that file the same way.
with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "ref.csv")
    duckdb.connect().sql(sql).write_csv(path)
    ref = pd.read_csv(path)
assert len(got) == 300000, len(got)
pd.testing.assert_frame_equal(got, ref)
print("pandas", len(got))
"#,
        &[&csv_url, SECRET, CLIENT_SQL],
    );
    assert!(out.contains("pandas 300000"), "{out}");

    let out = python(
        r#"
import os, sys
import duckdb
url, token, sql = sys.argv[1], sys.argv[2], sys.argv[3]
con = duckdb.connect(config={"extension_directory": os.environ["DUCKGATE_EXTENSION_DIR"], "autoinstall_known_extensions": False})
con.execute("LOAD httpfs")
# The token in an HTTP secret, as a DuckDB user would keep it.
con.execute(f"CREATE SECRET gateway (TYPE http, BEARER_TOKEN '{token}')")
got = con.sql(f"SELECT * FROM read_csv('{url}')")
ref = con.sql(sql)
assert got.types == ref.types, (got.types, ref.types)
got, ref = got.fetchall(), ref.fetchall()
assert len(got) == 300000, len(got)
assert got == ref, next((a, b) for a, b in zip(got, ref) if a != b)
print("duckdb", len(got))
"#,
        &[&csv_url, SECRET, CLIENT_SQL],
    );
    assert!(out.contains("duckdb 300000"), "{out}");
    // Never the SQL or the token in the gateway's log.
    let log = g.log_text();
    for secret in ["quoted", "range(300000)", SECRET] {
        assert!(!log.contains(secret), "{secret} reached the log");
    }
}

#[test]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
fn a_failed_read_by_url_says_why_where_readers_look() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", TOKEN)
        .start();
    let csv_url = url(&g.base, "SELECT nope FROM range(3)", Some("csv"));
    // What the gateway answers, read raw.
    let raw = python(
        r#"
import json, sys, urllib.request, urllib.error
req = urllib.request.Request(sys.argv[1], headers={"Authorization": "Bearer " + sys.argv[2]})
try:
    urllib.request.urlopen(req)
except urllib.error.HTTPError as e:
    print(json.dumps({"status": e.code, "header": e.headers["duckgate-error"], "message": str(e), "body": json.loads(e.read())}))
"#,
        &[&csv_url, SECRET],
    );
    let raw: Value = serde_json::from_str(raw.trim()).unwrap();
    let problem = &raw["body"];
    let first = problem["detail"].as_str().unwrap().lines().next().unwrap();
    assert_eq!(raw["status"], 400);
    assert_eq!(
        raw["header"],
        format!("{}: {first}", problem["title"].as_str().unwrap())
    );
    // urllib, under pandas' read_csv(url): "HTTP Error 400: <reason phrase>".
    assert_eq!(raw["message"], "HTTP Error 400: SQL error", "{raw}");

    // DuckDB's read_csv(url): its message shows the status with its own
    // reason text ("HTTP 400 Bad Request"), neither the reason phrase nor a
    // header (DuckDB 1.5.5); its HTTPException keeps the answer's headers,
    // `duckgate-error` among them.
    let out = python(
        r#"
import json, os, sys
import duckdb
url, token = sys.argv[1], sys.argv[2]
con = duckdb.connect(config={"extension_directory": os.environ["DUCKGATE_EXTENSION_DIR"], "autoinstall_known_extensions": False})
con.execute("LOAD httpfs")
con.execute(f"CREATE SECRET gateway (TYPE http, BEARER_TOKEN '{token}')")
try:
    con.sql(f"SELECT * FROM read_csv('{url}')").fetchall()
except duckdb.HTTPException as e:
    print(json.dumps({"message": str(e), "status": e.status_code, "headers": dict(e.headers)}))
"#,
        &[&csv_url, SECRET],
    );
    let duck: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(duck["status"], 400);
    assert!(
        duck["message"].as_str().unwrap().contains("(HTTP 400 "),
        "{duck}"
    );
    assert_eq!(duck["headers"]["duckgate-error"], raw["header"], "{duck}");
    // pandas itself.
    let out = python(
        r#"
import sys
import pandas as pd
try:
    pd.read_csv(sys.argv[1], storage_options={"Authorization": "Bearer " + sys.argv[2]})
except Exception as e:
    print(str(e))
"#,
        &[&csv_url, SECRET],
    );
    assert_eq!(out.trim(), "HTTP Error 400: SQL error");
}
