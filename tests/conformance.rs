//! Every answer is DuckDB's own (issue 10): CSV from the gateway equals, byte
//! for byte, what DuckDB 1.5.5's own `COPY (...) TO ... (FORMAT csv, HEADER)`
//! writes for the same query. The reference is DuckDB itself (the test venv's
//! Python duckdb 1.5.5, time zone UTC like the gateway's default), never
//! strings typed by hand.

mod common;

use std::collections::BTreeMap;

use common::Gateway;
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
];

/// DuckDB's own CSV for every query, from the test venv's Python duckdb.
fn reference() -> BTreeMap<String, Result<String, String>> {
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
    serde_json::to_writer(child.stdin.take().unwrap(), &QUERIES).unwrap();
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
async fn ndjson_rows_never_repeat_a_key() {
    let g = Gateway::builder().start();
    let r = g
        .query(json!({"sql": "SELECT 1 AS a, 2 AS a, 3 AS \"A\"", "format": "ndjson"}))
        .await;
    let text = r.text().await.unwrap();
    // DuckDB's own rule for repeated names, as its COPY writes them.
    assert_eq!(text.trim(), r#"{"a":1,"a_1":2,"A_2":3}"#);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csv_is_byte_for_byte_what_duckdb_copy_writes() {
    let reference = reference();
    let g = Gateway::builder()
        .env("DUCKGATE_EXTENSION_DIR", common::extension_dir())
        .start();
    let mut same = 0;
    let mut wrong = Vec::new();
    for q in QUERIES {
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
    eprintln!(
        "csv conformance: {same} of {} queries byte-identical to DuckDB's COPY",
        QUERIES.len()
    );
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
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
    let g = Gateway::builder().start();
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
