//! Black-box tests of POST /query: formats, types, parameters, raw bodies,
//! limits and bad input, over HTTP on a loopback port: the gateway runs in
//! the test's process (`spawn_app`), except where start-up itself is under
//! test (refused settings, the `serve` subcommand), which start the binary.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::Gateway;
use serde_json::{json, Value};

/// A query that runs for minutes unless interrupted.
pub const LONG_QUERY: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

#[tokio::test]
async fn select_42_has_the_contract_shape() {
    let g = Gateway::builder().spawn_app().await;
    let r = g.query(json!({"sql": "SELECT 42 AS x"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/json");
    assert_eq!(r.headers()["duckgate-statement"], "SELECT");
    assert!(r.headers().contains_key("duckgate-credential-epoch"));
    assert!(r.headers().contains_key("x-request-id"));
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["columns"], json!([{"name": "x", "type": "INTEGER"}]));
    assert_eq!(v["rows"], json!([[42]]));
    assert_eq!(v["row_count"], 1);
    assert_eq!(v["truncated"], false);
    assert!(v["elapsed_ms"].as_f64().unwrap() >= 0.0);
}

/// One value of every type DuckDB answers with, named.
const EVERY_TYPE_SQL: &str = "SELECT
                9007199254740993::BIGINT AS big,
                42::BIGINT AS small_big,
                170141183460469231731687303715884105727::HUGEINT AS huge,
                123456789012345678.123::DECIMAL(38,3) AS dec_big,
                12.345::DECIMAL(18,3) AS dec_small,
                TIMESTAMP '2024-01-02 03:04:05.123456' AS ts,
                TIMESTAMPTZ '2024-01-02 03:04:05+00' AS tstz,
                DATE '2024-02-29' AS d,
                TIME '13:14:15' AS t,
                INTERVAL '1 year 2 months 3 days 04:05:06.5' AS iv,
                '5f3c2d1e-0000-4000-8000-000000000001'::UUID AS u,
                '\\x00\\xFFhi'::BLOB AS b,
                [1, 2, NULL]::INTEGER[] AS l,
                [1, 2, 3]::INTEGER[3] AS arr,
                {'a': 1, 'b': 'x'} AS s,
                MAP {'k1': 10, 'k2': 20} AS m,
                MAP {1: 'one'} AS m_int,
                union_value(num := 7)::UNION(num INTEGER, str VARCHAR) AS un,
                'sad'::ENUM('sad', 'happy') AS e,
                NULL::INTEGER AS n,
                'NaN'::DOUBLE AS nan,
                'Infinity'::DOUBLE AS inf,
                '-Infinity'::FLOAT AS ninf,
                1.5::DOUBLE AS dbl,
                0.1::FLOAT AS flt,
                1e300::DOUBLE AS huge_dbl,
                true AS bool,
                'héllo \"quoted\"' AS txt";

#[tokio::test]
async fn every_type_is_valid_lossless_json() {
    let g = Gateway::builder().spawn_app().await;
    let v = g.query_ok(EVERY_TYPE_SQL).await;
    let row = &v["rows"][0];
    let col = |name: &str| {
        let idx = v["columns"]
            .as_array()
            .unwrap()
            .iter()
            .position(|c| c["name"] == name)
            .unwrap();
        row[idx].clone()
    };
    assert_eq!(
        col("big"),
        json!("9007199254740993"),
        "BIGINT beyond 2^53 is a string"
    );
    assert_eq!(col("small_big"), json!(42));
    assert_eq!(
        col("huge"),
        json!("170141183460469231731687303715884105727")
    );
    assert_eq!(col("dec_big"), json!("123456789012345678.123"));
    assert_eq!(col("dec_small"), json!(12.345));
    assert_eq!(col("ts"), json!("2024-01-02T03:04:05.123456"));
    let tstz = col("tstz");
    let tstz = tstz.as_str().unwrap();
    assert!(
        tstz.starts_with("2024-01-02T03:04:05")
            && (tstz.ends_with("+00:00") || tstz.ends_with('Z')),
        "{tstz}"
    );
    assert_eq!(col("d"), json!("2024-02-29"));
    assert_eq!(col("t"), json!("13:14:15"));
    // DuckDB's own text (tests/conformance.rs checks it against DuckDB).
    assert_eq!(col("iv"), json!("1 year 2 months 3 days 04:05:06.5"));
    assert_eq!(col("u"), json!("5f3c2d1e-0000-4000-8000-000000000001"));
    assert_eq!(col("b"), json!("AP9oaQ=="));
    assert_eq!(col("l"), json!([1, 2, null]));
    assert_eq!(col("arr"), json!([1, 2, 3]));
    assert_eq!(col("s"), json!({"a": 1, "b": "x"}));
    assert_eq!(col("m"), json!({"k1": 10, "k2": 20}));
    assert_eq!(col("m_int"), json!({"1": "one"}));
    assert_eq!(col("un"), json!(7));
    assert_eq!(col("e"), json!("sad"));
    assert_eq!(col("n"), json!(null));
    assert_eq!(col("nan"), json!("NaN"));
    assert_eq!(col("inf"), json!("Infinity"));
    assert_eq!(col("ninf"), json!("-Infinity"));
    assert_eq!(col("dbl"), json!(1.5));
    assert_eq!(col("flt"), json!(0.1), "FLOAT keeps its own shortest text");
    assert_eq!(col("huge_dbl"), json!(1e300));
    assert_eq!(col("bool"), json!(true));
    assert_eq!(col("txt"), json!("héllo \"quoted\""));
    let types: Vec<&str> = v["columns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert!(
        types.contains(&"BIGINT") && types.contains(&"DECIMAL(18,3)") && types.contains(&"DATE"),
        "{types:?}"
    );
}

#[tokio::test]
async fn ndjson_csv_and_arrow_formats() {
    let g = Gateway::builder().spawn_app().await;
    let sql =
        "SELECT i AS id, 'row ' || i AS name, [i, i + 1] AS pair FROM range(3) t(i) ORDER BY i";

    let r = g.query(json!({"sql": sql, "format": "ndjson"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "application/x-ndjson");
    let text = r.text().await.unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[1], json!({"id": 1, "name": "row 1", "pair": [1, 2]}));

    let r = g.query(json!({"sql": sql, "format": "csv"})).await;
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/csv"));
    let text = r.text().await.unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "id,name,pair");
    // DuckDB's own text of a list, as its COPY writes it.
    assert_eq!(lines[1], "0,row 0,\"[0, 1]\"");
    assert_eq!(lines.len(), 4);

    let r = g.query(json!({"sql": sql, "format": "arrow"})).await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "application/vnd.apache.arrow.stream"
    );
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes.to_vec()), None)
            .unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
    assert_eq!(rows, 3);
    assert_eq!(batches[0].schema().field(1).name(), "name");

    // An empty result still has a header (CSV) and a schema (Arrow).
    let r = g
        .query(json!({"sql": "SELECT 1 AS a WHERE false", "format": "csv"}))
        .await;
    assert_eq!(r.text().await.unwrap().trim(), "a");
    let r = g
        .query(json!({"sql": "SELECT 1 AS a WHERE false", "format": "arrow"}))
        .await;
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes.to_vec()), None)
            .unwrap();
    assert_eq!(reader.schema().field(0).name(), "a");
}

#[tokio::test]
async fn accept_header_picks_the_format() {
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .client
        .post(g.url("/query"))
        .header("accept", "text/csv")
        .json(&json!({"sql": "SELECT 1 AS a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "a\n1\n");

    let r = g
        .client
        .post(g.url("/query"))
        .header("accept", "application/x-ndjson")
        .json(&json!({"sql": "SELECT 1 AS a"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "{\"a\":1}\n");

    let r = g
        .client
        .post(g.url("/query"))
        .header("accept", "image/png")
        .json(&json!({"sql": "SELECT 1"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 406);
    assert_eq!(r.headers()["content-type"], "application/problem+json");

    let r = g.query(json!({"sql": "SELECT 1", "format": "xml"})).await;
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"].as_str().unwrap().contains("xml"));
}

#[tokio::test]
async fn parameters_bind_positionally_never_spliced() {
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .query(json!({"sql": "SELECT $1::INTEGER + $2::INTEGER AS s, $3 AS t, $4 IS NULL AS n, $5 AS b",
                      "params": [40, 2, "it's", null, true]}))
        .await;
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["rows"], json!([[42, "it's", true, true]]));

    let r = g
        .query(json!({"sql": "SELECT ? || ? AS s", "params": ["a", "b"]}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["rows"], json!([["ab"]]));

    // An injection attempt is just a string.
    let r = g
        .query(json!({"sql": "SELECT $1 AS s", "params": ["'; DROP TABLE x; --"]}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["rows"], json!([["'; DROP TABLE x; --"]]));

    let r = g
        .query(json!({"sql": "SELECT $1, $2", "params": [1]}))
        .await;
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["type"], "urn:duckgate:problem:parameter-count");

    let r = g
        .query(json!({"sql": "SELECT $1", "params": [{"a": 1}]}))
        .await;
    assert_eq!(r.status(), 400);
    let r = g
        .query(json!({"sql": "SELECT $1::INTEGER", "params": ["not a number"]}))
        .await;
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["error_class"], "Conversion");
    let r = g.query(json!({"sql": "SELECT 1", "params": "nope"})).await;
    assert_eq!(r.status(), 400);
}

#[tokio::test]
async fn raw_sql_bodies() {
    let g = Gateway::builder().spawn_app().await;
    for ct in [
        "text/plain",
        "application/sql",
        "application/x-www-form-urlencoded",
    ] {
        let r = g
            .client
            .post(g.url("/query"))
            .header("content-type", ct)
            .body("-- a report\nSELECT 6 * 7 AS answer;\n")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "{ct}");
        let v: Value = r.json().await.unwrap();
        assert_eq!(v["rows"], json!([[42]]), "{ct}");
    }
    // `curl -d '{"sql": ...}'` sends JSON as form encoding: read as JSON.
    let r = g
        .client
        .post(g.url("/query"))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(r#" {"sql": "SELECT 6 * 7 AS answer", "format": "csv"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "answer\n42\n");
    // Query-string options apply to raw bodies.
    let r = g
        .client
        .post(g.url("/query?format=csv&max_rows=2"))
        .header("content-type", "text/plain")
        .body("SELECT * FROM range(5)")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "range\n0\n1\n");
}

#[tokio::test]
async fn errors_are_problem_documents() {
    let g = Gateway::builder().spawn_app().await;
    let r = g.query(json!({"sql": "SELECT * FROM no_such_table"})).await;
    assert_eq!(r.status(), 400);
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["status"], 400);
    assert_eq!(p["error_class"], "Catalog");
    assert!(p["detail"].as_str().unwrap().contains("no_such_table"));
    assert!(p["title"].is_string() && p["type"].is_string());

    let r = g.query(json!({"sql": "SELEC 1"})).await;
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["error_class"], "Parser");

    let r = g.query(json!({"sql": "SELECT 1; SELECT 2"})).await;
    assert_eq!(r.status(), 400);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["type"], "urn:duckgate:problem:multiple-statements");

    let r = g
        .query(json!({"sql": "SELECT 1/0::INTEGER AS x, 'a'::INTEGER"}))
        .await;
    assert_eq!(r.status(), 400);
}

/// Bodies /query refuses: content type, body and the status it answers.
fn bad_bodies() -> Vec<(&'static str, Vec<u8>, u16)> {
    vec![
        ("application/json", b"{\"sql\": ".to_vec(), 400),
        ("application/json", b"".to_vec(), 400),
        ("application/json", b"[1,2]".to_vec(), 400),
        ("application/json", b"{\"sql\": 5}".to_vec(), 400),
        (
            "application/json",
            b"{\"sql\": \"SELECT 1\", \"bogus\": 1}".to_vec(),
            400,
        ),
        (
            "application/json",
            b"{\"sql\": \"SELECT 1\", \"timeout_ms\": -5}".to_vec(),
            400,
        ),
        (
            "application/json",
            b"{\"sql\": \"SELECT 1\", \"max_rows\": 0}".to_vec(),
            400,
        ),
        ("application/json", b"{\"sql\": \"   \"}".to_vec(), 400),
        ("text/plain", vec![0xff, 0xfe, 0x00, 0x80], 400),
        ("text/plain", b"".to_vec(), 400),
        ("application/json", vec![b'{'; 10_000], 413),
        (
            "text/plain",
            format!("SELECT '{}'", "x".repeat(3000)).into_bytes(),
            413,
        ),
        ("image/png", b"SELECT 1".to_vec(), 415),
        (
            "application/json",
            b"{\"sql\": \"SELECT \\u0000\"}".to_vec(),
            400,
        ),
    ]
}

#[tokio::test]
async fn bad_input_gets_4xx_and_the_server_keeps_serving() {
    let g = Gateway::builder()
        .env("DUCKGATE_MAX_BODY_BYTES", 4096)
        .env("DUCKGATE_MAX_SQL_BYTES", 2048)
        .spawn_app()
        .await;
    let post = |ct: &'static str, body: Vec<u8>| {
        let c = g.client.clone();
        let url = g.url("/query");
        async move {
            c.post(url)
                .header("content-type", ct)
                .body(body)
                .send()
                .await
                .unwrap()
        }
    };
    for (ct, body, want) in bad_bodies() {
        let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        let r = post(ct, body).await;
        assert_eq!(r.status().as_u16(), want, "{ct} {shown:?}");
        assert_eq!(
            r.headers()["content-type"],
            "application/problem+json",
            "{ct} {shown:?}"
        );
        let p: Value = r.json().await.unwrap();
        assert_eq!(p["status"], want);
        assert!(!p["detail"].as_str().unwrap().is_empty());
    }
    // GET /query needs its SQL in the URL (tests/url_query.rs); PUT is no
    // method of /query.
    let r = g.client.get(g.url("/query")).send().await.unwrap();
    assert_eq!(r.status(), 400);
    let r = g.client.put(g.url("/query")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    let r = g.client.get(g.url("/nope")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(g.query_ok("SELECT 1").await["rows"], json!([[1]]));
}

#[tokio::test]
async fn a_cut_is_clean_only_where_the_client_asked_for_it() {
    let g = Gateway::builder()
        .env("DUCKGATE_DEFAULT_MAX_ROWS", 10)
        .env("DUCKGATE_MAX_ROWS", 5000)
        .spawn_app()
        .await;
    // A server cap the client did not ask for, passed before the body
    // began: a problem document, never a complete-looking answer.
    let r = g.query(json!({"sql": "SELECT * FROM range(100)"})).await;
    assert_eq!(r.status(), 422);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["type"], "urn:duckgate:problem:result-too-large");
    // Passed after the body began (a limit above the maximum is not the
    // client's cut either): every format's body fails to arrive whole.
    for format in ["json", "ndjson", "csv", "arrow"] {
        let r = g
            .query(json!({"sql": "SELECT * FROM range(100000)", "format": format, "max_rows": 1000000}))
            .await;
        assert_eq!(r.status(), 200, "{format}");
        let (body, failed) = common::body_and_failure(r).await;
        assert!(failed, "{format}: a cut answer arrived as a whole body");
        if format == "ndjson" {
            let text = String::from_utf8(body).unwrap();
            let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
            assert_eq!(
                last["error"]["type"], "urn:duckgate:problem:result-too-large",
                "{last}"
            );
        }
    }
    // A limit the client asked for cuts cleanly.
    let r = g
        .query(json!({"sql": "SELECT * FROM range(100)", "max_rows": 10}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["row_count"], 10);
    assert_eq!(v["truncated"], true);
    let r = g
        .query(json!({"sql": "SELECT * FROM range(10)", "max_rows": 10}))
        .await;
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["row_count"], 10);
    assert_eq!(
        v["truncated"], false,
        "exactly max_rows rows is not a truncation"
    );
    // NDJSON and CSV carry rows only: no trailer a reader takes for data.
    let r = g
        .query(json!({"sql": "SELECT * FROM range(10000)", "max_rows": 2049, "format": "ndjson"}))
        .await;
    let (body, failed) = common::body_and_failure(r).await;
    assert!(!failed);
    let text = String::from_utf8(body).unwrap();
    assert_eq!(text.lines().count(), 2049);
    assert_eq!(text.lines().last().unwrap(), r#"{"range":2048}"#);
    let r = g
        .query(json!({"sql": "SELECT * FROM range(10000)", "max_rows": 3000, "format": "csv"}))
        .await;
    let (body, failed) = common::body_and_failure(r).await;
    assert!(!failed);
    assert_eq!(String::from_utf8(body).unwrap().lines().count(), 3001);
}

#[tokio::test]
async fn a_long_query_times_out_with_504_and_the_connection_is_reused() {
    let g = Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 1)
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 1500)
        .spawn_app()
        .await;
    let started = Instant::now();
    let r = g
        .query(json!({"sql": LONG_QUERY, "timeout_ms": 600000}))
        .await;
    let took = started.elapsed();
    assert_eq!(r.status(), 504);
    let p: Value = r.json().await.unwrap();
    assert_eq!(p["type"], "urn:duckgate:problem:query-timeout");
    assert!(
        p["detail"].as_str().unwrap().contains("1500 ms"),
        "timeout_ms is clamped to the maximum"
    );
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_secs(20),
        "{took:?}"
    );
    // The one pooled connection works again.
    let v = g.query_ok("SELECT 7 AS x").await;
    assert_eq!(v["rows"], json!([[7]]));
    // The worker hands its connection back just after the last byte is sent.
    g.health_until(
        "free connection",
        |h| h["pool"]["in_use"] == 0,
        Duration::from_secs(5),
    )
    .await;
}

#[tokio::test]
async fn an_error_mid_stream_is_never_a_silent_200() {
    let g = Gateway::builder()
        .env("DUCKGATE_THREADS", 1)
        .spawn_app()
        .await;
    // Rows stream first; a row far into the result raises an error.
    let sql = "SELECT i, CASE WHEN i < 800000 THEN 'ok' ELSE error('boom at ' || i) END AS v FROM range(1000000) t(i)";
    let r = g
        .query(json!({"sql": sql, "format": "ndjson", "max_rows": 100000000}))
        .await;
    assert_eq!(r.status(), 200, "the body had begun");
    let (body, failed) = common::body_and_failure(r).await;
    assert!(
        failed,
        "after its error record the NDJSON body is aborted too"
    );
    let text = String::from_utf8(body).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines.len() > 1000, "rows were streamed before the error");
    let last: Value = serde_json::from_str(lines.last().unwrap()).unwrap();
    assert_eq!(
        last["error"]["status"], 400,
        "NDJSON ends with an error record: {last}"
    );
    assert!(last["error"]["detail"].as_str().unwrap().contains("boom"));

    for format in ["csv", "json", "arrow"] {
        let r = g
            .query(json!({"sql": sql, "format": format, "max_rows": 100000000}))
            .await;
        assert_eq!(r.status(), 200, "{format}: the body had begun");
        assert!(
            r.bytes().await.is_err(),
            "{format}: the body must be aborted, not completed"
        );
    }
    // Control: the same query without the failing rows completes.
    let r = g
        .query(json!({"sql": sql.replace("800000", "2000000"), "format": "csv", "max_rows": 100000000}))
        .await;
    assert_eq!(r.status(), 200);
    assert!(r.bytes().await.is_ok());
}

#[tokio::test]
async fn bad_settings_stop_start_up_naming_the_setting() {
    for (k, v) in [
        ("DUCKGATE_POOL_SIZE", "zero"),
        ("DUCKGATE_POOL_SIZE", "0"),
        ("DUCKGATE_MEMORY_LIMIT", "lots"),
        ("DUCKGATE_QUERY_TIMEOUT_MS", "999999999"),
    ] {
        let err = match Gateway::builder().env(k, v).try_start() {
            Ok(_) => panic!("{k}={v} should not start"),
            Err(e) => e,
        };
        assert_eq!(err.0, Some(2), "{k}={v}");
        let text = err.1.join("\n");
        let flag = k
            .trim_start_matches("DUCKGATE_")
            .to_ascii_lowercase()
            .replace('_', "-");
        assert!(text.contains(k) || text.contains(&flag), "{k}={v}: {text}");
    }
    let err = match Gateway::builder()
        .env("DUCKGATE_LISTEN", "0.0.0.0:0")
        .try_start()
    {
        Ok(_) => panic!("anonymous on a public address must not start"),
        Err(e) => e,
    };
    assert!(err.1.join("\n").contains("DUCKGATE_QUERY_TOKENS"));
}

/// With JSON logs a refusal is one JSON log line (level ERROR, exit code 2)
/// naming its setting, whichever step refuses: clap's parse, a relation
/// between settings, the TOML file (with its line and column), the listen
/// address, the database. Every line the process writes is JSON.
#[tokio::test]
async fn start_up_refusals_are_json_lines_when_logs_are_json() {
    let dir = tempfile::tempdir().unwrap();
    let toml = common::write_file(
        dir.path(),
        "duckgate.toml",
        "[[source]]\nname = \"events\"\npaths = 5\n",
    );
    let not_a_database = common::write_file(dir.path(), "db.duckdb", "not a database\n");
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    let cases = vec![
        (
            vec![("DUCKGATE_POOL_SIZE", "0".to_string())],
            Some("DUCKGATE_POOL_SIZE"),
            "0 is not in 1..=1024",
        ),
        (
            vec![
                ("DUCKGATE_QUERY_TIMEOUT_MS", "10".to_string()),
                ("DUCKGATE_MAX_QUERY_TIMEOUT_MS", "5".to_string()),
            ],
            Some("DUCKGATE_QUERY_TIMEOUT_MS"),
            "exceeds DUCKGATE_MAX_QUERY_TIMEOUT_MS",
        ),
        (
            vec![("DUCKGATE_CONFIG", toml.display().to_string())],
            Some("DUCKGATE_CONFIG"),
            "duckgate.toml, line 3, column 9: ",
        ),
        (
            vec![("DUCKGATE_LISTEN", taken)],
            Some("DUCKGATE_LISTEN"),
            "cannot listen on",
        ),
        (
            vec![("DUCKGATE_DATABASE", not_a_database.display().to_string())],
            None,
            "db.duckdb",
        ),
    ];
    for (envs, setting, says) in cases {
        let mut builder = Gateway::builder().env("DUCKGATE_LOG_FORMAT", "json");
        for (k, v) in &envs {
            builder = builder.env(k, v);
        }
        let (code, lines) = match builder.try_start() {
            Ok(_) => panic!("{envs:?} should not start"),
            Err(e) => e,
        };
        assert_eq!(code, Some(2), "{envs:?}: {lines:?}");
        let parsed: Vec<Value> = lines
            .iter()
            .map(|l| {
                serde_json::from_str(l).unwrap_or_else(|_| panic!("{envs:?}: not a JSON line: {l}"))
            })
            .collect();
        let errors: Vec<&Value> = parsed.iter().filter(|v| v["level"] == "ERROR").collect();
        assert_eq!(errors.len(), 1, "{envs:?}: {lines:?}");
        let e = errors[0];
        assert_eq!(e["setting"].as_str(), setting, "{envs:?}: {e}");
        assert_eq!(e["exit_code"], 2, "{envs:?}: {e}");
        let message = e["message"].as_str().unwrap();
        assert!(message.contains(says), "{envs:?}: {message}");
    }
}

/// A `DUCKGATE_*` variable that names no setting is warned about at start,
/// with the setting it probably meant; the gateway starts all the same, and
/// the settings it knows are not warned about.
#[tokio::test]
async fn a_mistyped_variable_is_warned_about_at_start() {
    let g = Gateway::builder()
        .env("DUCKGATE_LOG_FORMAT", "json")
        .env("DUCKGATE_POOLSIZE", "4")
        .env("DUCKGATE_POOL_SIZE", "2")
        .start();
    let log = g.log.lock().unwrap().clone();
    let warnings: Vec<Value> = log
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["level"] == "WARN" && v["variable"].is_string())
        .collect();
    assert_eq!(warnings.len(), 1, "{log:?}");
    assert_eq!(warnings[0]["variable"], "DUCKGATE_POOLSIZE");
    assert_eq!(warnings[0]["did_you_mean"], "DUCKGATE_POOL_SIZE");
    assert_eq!(g.health().await["pool"]["size"], 2);
}

#[tokio::test]
async fn a_deadline_racing_completion_is_never_a_500() {
    // With a 1 ms limit the deadline and the answer often arrive together:
    // either the result stands or it is a timeout, never an internal error.
    let g = Gateway::builder().spawn_app().await;
    let mut seen = std::collections::BTreeMap::new();
    // Work sizes around the limit, so some finish just as it passes.
    for round in 0..10 {
        for k in 0..40u64 {
            let sql = format!("SELECT sum(i) AS s FROM range({}) t(i)", k * 25_000 + round);
            let r = g
                .query(json!({"sql": sql, "timeout_ms": 1, "format": "ndjson"}))
                .await;
            let status = r.status().as_u16();
            *seen.entry(status).or_insert(0) += 1;
            // A 200 that arrives whole is the whole row or ends in the
            // timeout's record; anything else fails to arrive.
            let (body, failed) = common::body_and_failure(r).await;
            let text = String::from_utf8(body).unwrap();
            if status == 200 && !failed && !text.contains("query-timeout") {
                assert!(
                    text.starts_with("{\"s\":") && text.lines().count() == 1,
                    "{text}"
                );
            }
        }
    }
    assert!(seen.keys().all(|s| *s == 200 || *s == 504), "{seen:?}");
}

#[tokio::test]
async fn the_result_byte_cap_fails_the_answer_in_every_format() {
    let g = Gateway::builder()
        .env("DUCKGATE_MAX_RESULT_BYTES", 100_000)
        .spawn_app()
        .await;
    for format in ["json", "ndjson", "csv", "arrow"] {
        let r = g
            .query(json!({"sql": "SELECT i, repeat('x', 100) AS pad FROM range(1000000) t(i)", "format": format}))
            .await;
        if r.status() == 422 {
            continue;
        }
        assert_eq!(r.status(), 200, "{format}");
        let (body, failed) = common::body_and_failure(r).await;
        assert!(
            failed,
            "{format}: an answer cut at the byte cap arrived whole"
        );
        assert!(
            body.len() < 400_000,
            "{format}: cut near the cap: {} bytes",
            body.len()
        );
    }
    // A result under the cap is whole.
    let v = g.query_ok("SELECT * FROM range(10)").await;
    assert_eq!(v["truncated"], false);
}

#[tokio::test]
async fn large_results_arrive_whole_and_in_order_in_every_format() {
    // Past a few batches the encoding runs on several threads: the bytes
    // must still be every row, once, in DuckDB's order.
    let g = Gateway::builder().spawn_app().await;
    let n = 250_000u64;
    let sql = format!("SELECT i, i * 0.5 AS half, 'r' || i AS s FROM range({n}) t(i) ORDER BY i");
    let v = g
        .query(json!({"sql": sql, "max_rows": n}))
        .await
        .json::<Value>()
        .await
        .unwrap();
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len() as u64, n);
    assert_eq!(v["row_count"], n);
    for (k, row) in rows.iter().enumerate() {
        assert_eq!(row[0], json!(k), "JSON row {k}");
    }
    let text = g
        .query(json!({"sql": sql, "max_rows": n, "format": "ndjson"}))
        .await
        .text()
        .await
        .unwrap();
    for (k, line) in text.lines().enumerate() {
        let row: Value = serde_json::from_str(line).unwrap();
        assert_eq!(row["i"], json!(k), "NDJSON line {k}");
    }
    assert_eq!(text.lines().count() as u64, n);
    let text = g
        .query(json!({"sql": sql, "max_rows": n, "format": "csv"}))
        .await
        .text()
        .await
        .unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("i,half,s"));
    for (k, line) in lines.enumerate() {
        assert!(line.starts_with(&format!("{k},")), "CSV line {k}: {line}");
    }
    assert_eq!(text.lines().count() as u64, n + 1);
}

/// Each IPC message of an Arrow stream: where it starts and ends, and its
/// kind (read from its own header: the continuation, the length, the
/// flatbuffer and the body it announces).
fn ipc_messages(b: &[u8]) -> Vec<(usize, usize, arrow::ipc::MessageHeader)> {
    let mut at = 0;
    let mut out = Vec::new();
    while at + 8 <= b.len() {
        assert_eq!(b[at..at + 4], [0xFF; 4], "a continuation at {at}");
        let len = i32::from_le_bytes(b[at + 4..at + 8].try_into().unwrap()) as usize;
        if len == 0 {
            break;
        }
        let message = arrow::ipc::root_as_message(&b[at + 8..at + 8 + len]).unwrap();
        let end = at + 8 + len + message.bodyLength() as usize;
        out.push((at, end, message.header_type()));
        at = end;
    }
    out
}

#[tokio::test]
async fn a_large_arrow_answer_is_every_row_and_ends_where_its_limits_say() {
    // Past its first batches an Arrow answer is encoded on a thread of its
    // own while DuckDB's reads on: the rows must be DuckDB's, in order, and
    // a row or byte limit must end it as the one-thread loop does.
    let n = 204_800usize;
    let sql = format!("SELECT i, i * 0.5 AS half, 'r' || i AS s FROM range({n}) t(i) ORDER BY i");
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let reference: Vec<arrow::record_batch::RecordBatch> = conn
        .prepare(&sql)
        .unwrap()
        .query_arrow([])
        .unwrap()
        .collect();
    let reference = arrow::compute::concat_batches(&reference[0].schema(), &reference).unwrap();
    let rows = |body: &[u8]| {
        let reader =
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(body.to_vec()), None)
                .unwrap();
        let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
        arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
    };
    let same = |got: &arrow::record_batch::RecordBatch, len: usize, what: &str| {
        assert_eq!(got.num_rows(), len, "{what}");
        for (i, column) in got.columns().iter().enumerate() {
            let want = arrow::compute::cast(&reference.column(i).slice(0, len), column.data_type())
                .unwrap();
            assert!(
                column.as_ref() == want.as_ref(),
                "{what}: column {i} differs"
            );
        }
    };
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .query(json!({"sql": sql, "format": "arrow", "max_rows": n}))
        .await;
    assert_eq!(r.status(), 200);
    let (whole, failed) = common::body_and_failure(r).await;
    assert!(!failed);
    same(&rows(&whole), n, "whole");
    let messages = ipc_messages(&whole);
    let batches: Vec<_> = messages
        .iter()
        .filter(|m| m.2 == arrow::ipc::MessageHeader::RecordBatch)
        .collect();
    assert!(batches.len() > 20, "{} batches", batches.len());
    // A cut the client asks for, inside a batch past the first ones.
    let r = g
        .query(json!({"sql": sql, "format": "arrow", "max_rows": 150_001}))
        .await;
    let (cut, failed) = common::body_and_failure(r).await;
    assert!(!failed, "a cut asked for ends cleanly");
    same(&rows(&cut), 150_001, "max_rows 150001");

    // The byte cap counts the batches' messages: one byte more than all but
    // the last lets the last one cross it with no row after it (whole); a
    // cap the batch before the last reaches leaves rows unsent (refused).
    let schema_end = messages[0].1;
    let before_last = (batches[batches.len() - 1].0 - schema_end) as u64;
    for (cap, whole_expected) in [(before_last + 1, true), (before_last, false)] {
        let g = Gateway::builder()
            .env("DUCKGATE_MAX_RESULT_BYTES", cap)
            .env("DUCKGATE_MAX_ROWS", n)
            .spawn_app()
            .await;
        let r = g.query(json!({"sql": sql, "format": "arrow"})).await;
        assert_eq!(r.status(), 200, "cap {cap}");
        let (body, failed) = common::body_and_failure(r).await;
        if whole_expected {
            assert!(
                !failed,
                "cap {cap}: the last batch crossed it, nothing after"
            );
            assert_eq!(body, whole, "cap {cap}");
        } else {
            assert!(
                failed,
                "cap {cap}: an answer cut at the byte cap arrived whole"
            );
            assert!(body.len() <= whole.len(), "cap {cap}");
        }
    }
}

#[tokio::test]
async fn serve_takes_every_flag_duckgate_takes() {
    // The Dockerfile and the Kubernetes manifests run `duckgate serve`.
    let g = Gateway::builder()
        .arg("serve")
        .arg("--pool-size")
        .arg("1")
        .start();
    assert_eq!(g.health().await["pool"]["size"], 1);
    assert_eq!(g.query_ok("SELECT 1 AS x").await["rows"], json!([[1]]));
}

#[tokio::test]
async fn the_readable_directory_never_overlaps_the_private_ones() {
    // A files directory inside the spool (every token's results) or holding
    // it would let queries read what they must not: start-up refuses both.
    for readable in ["data/spool", "data/spool/sub", "data"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(readable);
        let refused = Gateway::builder()
            .env("DUCKGATE_FILES_DIR", path.display())
            .data_dir(dir)
            .try_start();
        let (code, log) = refused
            .err()
            .unwrap_or_else(|| panic!("{readable}: started"));
        assert_eq!(code, Some(2), "{readable}: {log:?}");
        assert!(
            log.join("\n").contains("DUCKGATE_FILES_DIR"),
            "{readable}: {log:?}"
        );
    }
}

#[tokio::test]
async fn a_value_past_the_value_limit_is_422_in_every_format() {
    let g = Gateway::builder()
        .env("DUCKGATE_MAX_VALUE_BYTES", 100_000)
        .spawn_app()
        .await;
    for format in ["json", "ndjson", "csv", "arrow"] {
        let r = g
            // The large value first: in CSV its row ends inside the same
            // write as the next row's.
            .query(json!({"sql": "SELECT i, CASE WHEN i = 0 THEN repeat('x', 200000) ELSE 'a' END AS big FROM range(3) t(i)", "format": format}))
            .await;
        assert_eq!(r.status(), 422, "{format}");
        let v: Value = r.json().await.unwrap();
        assert!(
            v["type"].as_str().unwrap().ends_with("value-too-large"),
            "{format}: {v}"
        );
        // Under the limit it is sent.
        let r = g
            .query(json!({"sql": "SELECT 1 AS i, repeat('x', 50000) AS big", "format": format}))
            .await;
        assert_eq!(r.status(), 200, "{format}");
    }
}

/// A new text is parsed by DuckDB's parser once for admission (whether it
/// reads S3) and the guard, which judges admission's parse; a text the
/// connection judged before is not parsed again, however long. Needs
/// `test-hooks`.
#[cfg(feature = "test-hooks")]
#[tokio::test]
async fn a_new_text_is_parsed_once_for_admission_and_the_guard() {
    use duckgate::engine::guard::describe::parse_counts;
    let g = Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 1)
        .spawn_app()
        .await;
    let unique = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let sql = format!("SELECT 42 AS {}{unique}", parse_counts::MARK);
    g.query_ok(&sql).await;
    assert_eq!(parse_counts::of(&sql), 1, "a new text");
    g.query_ok(&sql).await;
    assert_eq!(
        parse_counts::of(&sql),
        1,
        "judged on this connection before"
    );
    // Refused at the parse layer (no S3 is configured): one parse too.
    let s3 = format!(
        "SELECT * FROM read_parquet('s3://bucket/{}{unique}.parquet')",
        parse_counts::MARK
    );
    let r = g.query(serde_json::json!({ "sql": s3 })).await;
    assert_eq!(r.status(), 403, "{}", r.text().await.unwrap());
    assert_eq!(parse_counts::of(&s3), 1, "a refused S3 read");
    // A text past 4 KiB is remembered by its digest: not parsed again.
    let long = format!(
        "SELECT 42 AS {}{unique}, '{}' AS pad",
        parse_counts::MARK,
        "x".repeat(5000)
    );
    g.query_ok(&long).await;
    g.query_ok(&long).await;
    assert_eq!(parse_counts::of(&long), 1, "a long text judged before");
}
