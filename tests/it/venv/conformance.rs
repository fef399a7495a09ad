//! Every answer is DuckDB's own (issue 10): CSV from the gateway equals, byte
//! for byte, what DuckDB 1.5.5's own `COPY (...) TO ... (FORMAT csv, HEADER)`
//! writes for the same query. The reference is DuckDB itself (the test venv's
//! Python duckdb 1.5.5, time zone UTC like the gateway's default), never
//! strings typed by hand.

use crate::common;

use std::collections::BTreeMap;

use crate::common::{App, Gateway};
use serde_json::json;

/// Every column of `test_all_types()` (min, max and NULL rows), the edge values
/// of issue 10, nested combinations and names that collide.
const QUERIES: &[&str] = &[
    "SELECT * FROM test_all_types()",
    "SELECT 'infinity'::DATE AS d, '-infinity'::TIMESTAMP AS t, '24:00:00'::TIME AS tm",
    "SELECT '-infinity'::TIMESTAMPTZ AS a, 'infinity'::TIMESTAMP_NS AS b, 'infinity'::TIMESTAMP_MS AS c",
    "SELECT 170141183460469231731687303715884105727::HUGEINT AS h, ROUND(9999::DECIMAL(4,0), -1) AS r",
    "SELECT 340282366920938463463374607431768211455::UHUGEINT AS u, (2::UHUGEINT ** 127)::UHUGEINT AS v",
    "SELECT '999999999:54:32.101234'::INTERVAL AS a, INTERVAL '9223372036854775807 microseconds' AS b",
    "SELECT '12:00:00+01'::TIMETZ AS t, '23:59:59.999999-15:59'::TIMETZ AS u",
    "SELECT MAP {'2024-01-01'::TIMESTAMPTZ: 1} AS m, MAP {'\\x01'::BLOB: 2} AS b, MAP {INTERVAL 1 DAY: 3} AS i",
    "SELECT row(1, 'x') AS r, 1 AS a, 2 AS a, 3 AS \"A\"",
    "SELECT NULL::VARCHAR AS only",
    "SELECT NULL::VARCHAR AS a, '' AS b, ' ' AS c, 'x,y' AS d, 'q\"q' AS e, 'l\nl' AS f",
    "SELECT '0101011'::BIT AS b, 123456789012345678901234567890::BIGNUM AS n, (-1)::BIGNUM AS m",
    "SELECT [{'k': MAP {'a': [1, 2]}, 'u': union_value(n := 1)}] AS nested, [1, 2, 3]::INTEGER[3] AS arr",
    "SELECT 'a'::ENUM('a', 'b') AS e, uuid_extract_version('0b935562-b24c-44dd-a425-932cbeb3de7d'::UUID) AS v",
    "SELECT 0.1::FLOAT AS f, 1e300::DOUBLE AS d, 'nan'::DOUBLE AS n, '-inf'::FLOAT AS i, -0.0::DOUBLE AS z",
    "SELECT '\\xAA\\x00'::BLOB AS b, 'ünïcødé 🦆' AS u",
    "SELECT i, i::VARCHAR AS s FROM range(3) t(i) ORDER BY i DESC",
    "SELECT * FROM (VALUES (1, 'a'), (NULL, NULL)) t(\"select\", \"from\")",
    // Unicode blanks (DuckDB replaces them and re-parses): the wrapped text
    // must be the whole statement, never a shorter one (which here would
    // read a refused system view, or cut LIMIT 10 to LIMIT 1).
    "WITH duckdb_databasesX AS (SELECT 1 a, 2 b, 3 c) SELECT\u{a0}* FROM duckdb_databasesX",
    "\u{feff}SELECT\u{2003}* FROM range(100) LIMIT 10",
];

/// DuckDB's own CSV for every query, from the test venv's Python duckdb.
fn reference() -> BTreeMap<String, Result<String, String>> {
    copy_reference(QUERIES)
}

/// DuckDB's own CSV (`COPY ... (FORMAT csv, HEADER)`) for each of `queries`.
fn copy_reference(queries: &[&str]) -> BTreeMap<String, Result<String, String>> {
    let script = r#"
import json, os, sys, tempfile, duckdb
queries = json.load(sys.stdin)
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
out = {}
d = tempfile.mkdtemp()
for i, q in enumerate(queries):
    path = os.path.join(d, f"{i}.csv")
    try:
        con.execute(f"COPY ({q}) TO '{path}' (FORMAT csv, HEADER)")
        out[q] = {"ok": open(path, encoding="utf-8", newline="").read()}
    except Exception as e:
        out[q] = {"err": str(e)}
json.dump(out, sys.stdout)
"#;
    let mut child = std::process::Command::new(common::test_python())
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python");
    serde_json::to_writer(child.stdin.take().unwrap(), &queries).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v.as_object()
        .unwrap()
        .iter()
        .map(|(q, r)| {
            let r = match r.get("ok") {
                Some(t) => Ok(t.as_str().unwrap().to_string()),
                None => Err(r["err"].as_str().unwrap_or("").to_string()),
            };
            (q.clone(), r)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn ndjson_rows_never_repeat_a_key() {
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .query(json!({"sql": "SELECT 1 AS a, 2 AS a, 3 AS \"A\"", "format": "ndjson"}))
        .await;
    let text = r.text().await.unwrap();
    // DuckDB's own rule for repeated names, as its COPY writes them.
    assert_eq!(text.trim(), r#"{"a":1,"a_1":2,"A_2":3}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn csv_is_byte_for_byte_what_duckdb_copy_writes() {
    let reference = reference();
    // Two DuckDB threads: one CSV answer at a time is DuckDB's COPY; while
    // that place is taken, CSV is written from DuckDB's VARCHAR casts.
    let g = Gateway::builder()
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .env("DUCKGATE_THREADS", 2)
        .env("DUCKGATE_POOL_SIZE", 3)
        .spawn_app()
        .await;
    let mut same = 0;
    let mut wrong = Vec::new();
    let mut hold = None;
    for (pass, q) in QUERIES.iter().chain(QUERIES).enumerate() {
        if pass == QUERIES.len() {
            // The second pass: a long CSV answer holds the COPY's place.
            let (client, url) = (g.client.clone(), g.url("/query"));
            hold = Some(tokio::spawn(async move {
                let body = json!({"sql": "SELECT sum(hash(i)) AS s FROM range(100000000000) t(i)", "format": "csv", "timeout_ms": 120000});
                client.post(url).json(&body).send().await
            }));
            crate::common::eventually(
                "the long CSV query running",
                crate::common::BUSY_MARGIN,
                || async {
                    let v = g.get_json("/queries").await;
                    match v["queries"].as_array() {
                        Some(q) if q.iter().any(|q| q["state"] == "running") => Ok(()),
                        _ => Err(v),
                    }
                },
            )
            .await;
        }
        let want = &reference[*q];
        let r = g
            .query(json!({"sql": q, "format": "csv", "max_rows": 1000}))
            .await;
        let status = r.status().as_u16();
        let got = r.text().await.unwrap_or_default();
        match want {
            Ok(text) if status == 200 && &got == text => same += 1,
            Ok(text) => wrong.push(format!(
                "{q}\n  duckdb:  {text:?}\n  gateway: {status} {got:?}"
            )),
            // DuckDB cannot do it either: the gateway must fail cleanly too.
            Err(e) if (400..500).contains(&status) => {
                same += 1;
                eprintln!("both fail: {q}: {e}");
            }
            Err(e) => wrong.push(format!(
                "{q}\n  duckdb fails: {e}\n  gateway: {status} {got:?}"
            )),
        }
    }
    let hold = hold.expect("second pass ran");
    assert!(
        !hold.is_finished(),
        "the long query held its place throughout"
    );
    hold.abort();
    eprintln!(
        "csv conformance: {same} of {} answers (COPY, then casts) byte-identical to DuckDB's COPY",
        2 * QUERIES.len()
    );
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn csv_limits_cut_duckdb_copy_after_a_whole_row() {
    // Values with newlines, quotes and commas: a cut must fall after a
    // row's end, never inside a quoted value.
    let q = "SELECT i, 'line ' || i || chr(10) || 'has \"quotes\", commas' AS s FROM range(5000) t(i) ORDER BY i";
    let limited = format!("SELECT * FROM ({q}) LIMIT 37");
    let reference = copy_reference(&[q, &limited]);
    let full = reference[q].clone().unwrap();
    // The row limit: exactly DuckDB's COPY of the first 37 rows.
    let g = Gateway::builder().spawn_app().await;
    let r = g
        .query(json!({"sql": q, "format": "csv", "max_rows": 37}))
        .await;
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.text().await.unwrap(),
        reference[&limited].clone().unwrap()
    );
    // The byte cap (not the client's cut): a prefix of DuckDB's COPY, past
    // the cap, ending where the next row begins, and then an aborted body.
    let g = Gateway::builder()
        .env("DUCKGATE_MAX_RESULT_BYTES", 100_000)
        .spawn_app()
        .await;
    let r = g
        .query(json!({"sql": q, "format": "csv", "max_rows": 5000}))
        .await;
    assert_eq!(r.status(), 200);
    let (got, failed) = common::body_and_failure(r).await;
    assert!(failed, "an answer cut at the byte cap arrived whole");
    let got = String::from_utf8(got).unwrap();
    assert!(
        got.len() >= 100_000 && got.len() < full.len(),
        "{} bytes of {}",
        got.len(),
        full.len()
    );
    assert!(full.starts_with(&got), "not a prefix of DuckDB's COPY");
    // Each row holds one newline inside its quotes and ends with another.
    let rows = (got.matches('\n').count() - 1) / 2;
    assert!(
        full[got.len()..].starts_with(&format!("{rows},\"line {rows}\n")),
        "cut inside a row: {:?}",
        &full[got.len()..got.len() + 40]
    );
}

/// DuckDB's own text of each value of `sql`'s single row (its VARCHAR cast).
fn duckdb_texts(sql: &str) -> Vec<String> {
    let script = r#"
import json, sys, duckdb
con = duckdb.connect()
con.execute("SET TimeZone = 'UTC'")
rel = con.sql(sys.argv[1])
cols = ", ".join(f'CAST("{c}" AS VARCHAR)' for c in rel.columns)
print(json.dumps(list(con.sql(f"SELECT {cols} FROM ({sys.argv[1]})").fetchone())))
"#;
    let out = std::process::Command::new(common::test_python())
        .args(["-c", script, sql])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn json_and_ndjson_carry_values_arrow_formatters_reject() {
    // Infinite dates and timestamps, TIME 24:00:00, UHUGEINT at and above
    // 2^127 (exported by DuckDB as a signed decimal of the same bits),
    // HUGEINT's 39 digits: each JSON value, as text, is DuckDB's own text.
    let sql = "SELECT 'infinity'::DATE AS a, '-infinity'::DATE AS b, 'infinity'::TIMESTAMP AS c, \
               '-infinity'::TIMESTAMP AS d, '-infinity'::TIMESTAMPTZ AS e, 'infinity'::TIMESTAMP_NS AS f, \
               '24:00:00'::TIME AS g, 340282366920938463463374607431768211455::UHUGEINT AS h, \
               170141183460469231731687303715884105728::UHUGEINT AS i, \
               170141183460469231731687303715884105727::HUGEINT AS j";
    let want = duckdb_texts(sql);
    let g = Gateway::builder().spawn_app().await;
    let as_text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let json = g.query_ok(sql).await;
    let got: Vec<String> = json["rows"][0]
        .as_array()
        .unwrap()
        .iter()
        .map(as_text)
        .collect();
    assert_eq!(got, want, "json");
    let r = g.query(json!({"sql": sql, "format": "ndjson"})).await;
    let line: serde_json::Value = serde_json::from_str(r.text().await.unwrap().trim()).unwrap();
    let got: Vec<String> = "abcdefghij"
        .chars()
        .map(|c| as_text(&line[c.to_string()]))
        .collect();
    assert_eq!(got, want, "ndjson");
}

/// POSTs a raw JSON body (numbers beyond what `json!` can write).
async fn post_raw(g: &App, body: String) -> reqwest::Response {
    g.client
        .post(g.url("/query"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn json_gives_duckdb_text_where_arrow_cannot_carry_the_value() {
    // INTERVAL beyond nanoseconds, TIMETZ's offset, BIT, BIGNUM beyond 2^53,
    // map keys that are not strings, an unnamed struct: each JSON value is
    // DuckDB's own text of the value (the unnamed struct an array of them).
    let sql = "SELECT '999999999:54:32.101234'::INTERVAL AS a, INTERVAL '9223372036854775807 microseconds' AS b, \
               '12:00:00+01'::TIMETZ AS c, '0101011'::BIT AS d, 123456789012345678901234567890::BIGNUM AS e, \
               map_keys(MAP {'2024-01-01'::TIMESTAMPTZ: 1})[1] AS f, map_keys(MAP {'\\x01'::BLOB: 2})[1] AS g, \
               map_keys(MAP {INTERVAL 1 DAY: 3})[1] AS h, 1 AS i, 'x' AS j";
    let want = duckdb_texts(sql);
    let g = Gateway::builder().spawn_app().await;
    let as_text = |v: &serde_json::Value| match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let q = "SELECT '999999999:54:32.101234'::INTERVAL AS a, INTERVAL '9223372036854775807 microseconds' AS b, \
             '12:00:00+01'::TIMETZ AS c, '0101011'::BIT AS d, 123456789012345678901234567890::BIGNUM AS e, \
             MAP {'2024-01-01'::TIMESTAMPTZ: 1} AS f, MAP {'\\x01'::BLOB: 2} AS g, MAP {INTERVAL 1 DAY: 3} AS h, \
             row(1, 'x') AS r";
    for format in ["json", "ndjson"] {
        let r = g.query(json!({"sql": q, "format": format})).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        let row: Vec<serde_json::Value> = if format == "json" {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            v["rows"][0].as_array().unwrap().clone()
        } else {
            let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
            "abcdefghr"
                .chars()
                .map(|c| v[c.to_string()].clone())
                .collect()
        };
        let mut got: Vec<String> = row[..5].iter().map(as_text).collect();
        // Map keys: the one key of each map.
        for m in &row[5..8] {
            let keys: Vec<&String> = m.as_object().unwrap().keys().collect();
            assert_eq!(keys.len(), 1, "{format}: {m}");
            got.push(keys[0].clone());
        }
        // The unnamed struct: an array of its values.
        got.extend(row[8].as_array().unwrap().iter().map(as_text));
        assert_eq!(got, want, "{format}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn numeric_parameters_keep_the_type_duckdb_gives_the_same_literal() {
    // Beyond u64 and with fractions: typed as DuckDB types the literal, the
    // value exact; nothing silently becomes DOUBLE.
    let literals = [
        "0.05",
        "-12.50",
        "12345678901234567.89",
        "1e3",
        "18446744073709551616",
        "170141183460469231731687303715884105727",
        "-170141183460469231731687303715884105728",
        "340282366920938463463374607431768211455",
    ];
    let g = Gateway::builder().spawn_app().await;
    for lit in literals {
        let want = duckdb_texts(&format!("SELECT typeof({lit}) AS t, ({lit})::VARCHAR AS v"));
        let r = post_raw(
            &g,
            format!(r#"{{"sql": "SELECT typeof($1) AS t, $1::VARCHAR AS v", "params": [{lit}]}}"#),
        )
        .await;
        let status = r.status();
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(status, 200, "{lit}: {body}");
        let got: Vec<String> = body["rows"][0]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "parameter {lit}");
    }
    // Beyond every exact type: refused, naming the parameter.
    let r = post_raw(
        &g,
        r#"{"sql": "SELECT $1", "params": [3402823669209384634633744607431768211455]}"#.into(),
    )
    .await;
    assert_eq!(r.status(), 400);
    let body: serde_json::Value = r.json().await.unwrap();
    assert!(
        body["detail"].as_str().unwrap().contains("parameter 1"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn arrow_carries_uhugeint_exactly_and_refuses_intervals_it_cannot_hold() {
    let sql = "SELECT 340282366920938463463374607431768211455::UHUGEINT AS u, 42::UHUGEINT AS v";
    let want = duckdb_texts(sql);
    let g = Gateway::builder().spawn_app().await;
    let r = g.query(json!({"sql": sql, "format": "arrow"})).await;
    assert_eq!(r.status(), 200);
    let bytes = r.bytes().await.unwrap();
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(bytes), None).unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    let batch = &batches[0];
    let got: Vec<String> = (0..2)
        .map(|i| {
            assert_eq!(
                batch.column(i).data_type(),
                &arrow::datatypes::DataType::Decimal256(39, 0)
            );
            arrow::util::display::array_value_to_string(batch.column(i), 0).unwrap()
        })
        .collect();
    assert_eq!(got, want);
    // DuckDB's export would wrap this interval; the gateway says why not.
    let r = g
        .query(json!({"sql": "SELECT INTERVAL '9223372036854775807 microseconds' AS b", "format": "arrow"}))
        .await;
    assert_eq!(r.status(), 400);
    assert!(r.text().await.unwrap().contains("nanosecond range"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn a_repeated_query_sees_a_recreated_table_as_it_is_now() {
    // One connection: the same text's earlier verdict (column types, text
    // wrapper) must not outlive the table it described.
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .env("DUCKGATE_POOL_SIZE", 1)
        .spawn_app()
        .await;
    g.query_ok("CREATE TABLE t AS SELECT 1 AS x").await;
    let first = g.query_ok("SELECT * FROM t").await;
    assert_eq!(first["columns"][0]["type"], "INTEGER");
    g.query_ok("CREATE OR REPLACE TABLE t AS SELECT INTERVAL 1 DAY AS x")
        .await;
    let second = g.query_ok("SELECT * FROM t").await;
    assert_eq!(second["columns"][0]["type"], "INTERVAL");
    assert_eq!(
        second["rows"][0][0],
        duckdb_texts("SELECT INTERVAL 1 DAY")[0]
    );
    // Data only: bind-time answers (stats) follow the data too.
    g.query_ok("CREATE TABLE s AS SELECT 1 AS i").await;
    let sql = "SELECT stats(i) AS s FROM s LIMIT 1";
    let before = g.query_ok(sql).await;
    g.query_ok("INSERT INTO s VALUES (NULL)").await;
    let after = g.query_ok(sql).await;
    assert_ne!(
        before["rows"], after["rows"],
        "stats() still describes the old data"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn intervals_of_statements_that_cannot_be_wrapped_are_duckdb_text() {
    // INSERT ... RETURNING cannot be wrapped in a SELECT, so DuckDB cannot
    // render its INTERVALs: the encoders write DuckDB's text themselves.
    let values = [
        "INTERVAL 1 DAY",
        "INTERVAL '1 year 2 months 3 days 04:05:06.5'",
        "INTERVAL '-2 years -1 month'",
        "INTERVAL '-3 days 12:00:00'",
        "INTERVAL '-00:00:00.000001'",
        "INTERVAL '100 hours 7 minutes'",
        "INTERVAL 0 SECONDS",
        "INTERVAL '13 months -40 days 23:59:59.999999'",
    ];
    let select = values
        .iter()
        .enumerate()
        .map(|(i, v)| format!("{v} AS i{i}"))
        .collect::<Vec<_>>()
        .join(", ");
    let want = duckdb_texts(&format!("SELECT {select}"));
    let g = Gateway::builder()
        .env("DUCKGATE_POLICY", "read-write")
        .spawn_app()
        .await;
    let columns = (0..values.len())
        .map(|i| format!("i{i} INTERVAL"))
        .collect::<Vec<_>>()
        .join(", ");
    g.query_ok(&format!("CREATE TABLE iv ({columns})")).await;
    for (n, format) in ["json", "ndjson", "csv"].iter().enumerate() {
        let sql = format!("INSERT INTO iv VALUES ({}) RETURNING *", values.join(", "));
        let r = g.query(json!({"sql": sql, "format": format})).await;
        assert_eq!(r.status(), 200);
        let text = r.text().await.unwrap();
        let got: Vec<String> = match *format {
            "json" => {
                let v: serde_json::Value = serde_json::from_str(&text).unwrap();
                v["rows"][0]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|c| c.as_str().unwrap().to_string())
                    .collect()
            }
            "ndjson" => {
                let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
                (0..values.len())
                    .map(|i| v[format!("i{i}")].as_str().unwrap().to_string())
                    .collect()
            }
            _ => text
                .lines()
                .nth(1)
                .unwrap()
                .split(',')
                .map(str::to_string)
                .collect(),
        };
        assert_eq!(got, want, "{format} (insert {n})");
    }
}
