//! Where a SQL error is: the problem document of a parser, binder, catalog
//! or conversion error carries DuckDB's place of it in the SQL the client
//! sent (`line`, `column`, `offset`) and DuckDB's caret `excerpt`, in every
//! format and through every text the gateway runs in the statement's place
//! (the CSV and Parquet COPYs, the wrappers that let DuckDB render values,
//! the spool of an async statement). The reference is DuckDB in-process:
//! the same SQL's error with `errors_as_json` (its message and `position`)
//! and without (the excerpt DuckDB appends).

use crate::common::Gateway;

use serde_json::{json, Value};

/// DuckDB's own account of the error `sql` raises, in-process.
#[derive(Debug)]
struct Reference {
    /// DuckDB's class, e.g. `Parser`.
    class: String,
    /// DuckDB's message, without class or excerpt.
    message: String,
    /// A byte offset into DuckDB's reading of the SQL (Unicode blanks read
    /// as spaces).
    position: usize,
    /// The `LINE n: ...` excerpt and its caret line, of DuckDB's reading.
    excerpt: String,
}

/// Runs `sql` to its end on `conn`: the error's text.
fn error_of(conn: &duckdb::Connection, sql: &str) -> String {
    let run = || -> duckdb::Result<()> {
        let mut stmt = conn.prepare(sql)?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        Ok(())
    };
    match run() {
        Err(duckdb::Error::DuckDBFailure(_, Some(m))) => m,
        Err(e) => e.to_string(),
        Ok(()) => panic!("DuckDB ran {sql:?} without an error"),
    }
}

fn reference(sql: &str) -> Reference {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let plain = error_of(&conn, sql);
    conn.execute_batch("SET errors_as_json = true").unwrap();
    let as_json = error_of(&conn, sql);
    let json_at = as_json
        .rfind("{\"exception_type\"")
        .unwrap_or_else(|| panic!("no JSON error in {as_json:?}"));
    let doc: Value = serde_json::from_str(&as_json[json_at..]).unwrap();
    let excerpt_at = plain
        .rfind("\n\nLINE ")
        .unwrap_or_else(|| panic!("DuckDB gave no excerpt: {plain:?}"));
    Reference {
        class: doc["exception_type"].as_str().unwrap().to_string(),
        // The gateway trims DuckDB's messages (a candidate list ends in a
        // newline).
        message: doc["exception_message"]
            .as_str()
            .unwrap()
            .trim()
            .to_string(),
        position: doc["position"]
            .as_str()
            .unwrap_or_else(|| panic!("DuckDB gave no position: {doc}"))
            .parse()
            .unwrap(),
        excerpt: plain[excerpt_at + 2..].to_string(),
    }
}

/// DuckDB's reading of `text`: the Unicode blanks of these tests as spaces.
fn as_duckdb_reads(text: &str) -> String {
    text.replace(['\u{a0}', '\u{3000}'], " ")
}

/// Checks a problem document against DuckDB's reference for `sql`.
fn check(sql: &str, p: &Value, r: &Reference, what: &str) {
    assert_eq!(p["type"], "urn:duckgate:problem:sql-error", "{what}: {p}");
    assert_eq!(p["error_class"], r.class.as_str(), "{what}: {p}");
    assert_eq!(p["detail"], r.message.as_str(), "{what}: {p}");
    let offset = p["offset"]
        .as_u64()
        .unwrap_or_else(|| panic!("{what}: no offset in {p}")) as usize;
    // The offset is into the client's text; DuckDB's is into its reading.
    assert_eq!(
        as_duckdb_reads(&sql[..offset]).len(),
        r.position,
        "{what}: offset {offset} is not DuckDB's position {} ({p})",
        r.position
    );
    let excerpt = p["excerpt"].as_str().unwrap();
    if sql.contains('\u{3000}') {
        // The excerpt is of the client's text, where an ideographic space
        // is two columns wide: the caret stands one column further right
        // than under DuckDB's reading, with its narrow space.
        assert_eq!(
            as_duckdb_reads(excerpt.lines().next().unwrap()),
            r.excerpt.lines().next().unwrap(),
            "{what}: {p}"
        );
    } else {
        assert_eq!(as_duckdb_reads(excerpt), r.excerpt, "{what}: {p}");
    }
    // The line is the excerpt's; the column counts characters from the
    // line's start (DuckDB's lines end at \n, \r\n or a lone \r).
    let line: u64 = r.excerpt["LINE ".len()..]
        .split(':')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert_eq!(p["line"], line, "{what}: {p}");
    let start = sql[..offset].rfind(['\n', '\r']).map_or(0, |i| i + 1);
    assert_eq!(
        p["column"],
        sql[start..offset].chars().count() as u64 + 1,
        "{what}: {p}"
    );
}

/// A conversion error at run time, on a long line (DuckDB cuts its
/// excerpt), after wide characters, with an INTERVAL column (which JSON and
/// Arrow answers wrap so that DuckDB renders or checks it).
fn long_line_sql() -> String {
    let before: Vec<String> = (0..30).map(|i| format!("i + {i} AS c{i}")).collect();
    let after: Vec<String> = (30..60).map(|i| format!("i + {i} AS c{i}")).collect();
    format!(
        "SELECT '日本語のテキスト' AS wide, INTERVAL 1 DAY AS iv,\n  {}, (CASE WHEN i > 2 THEN 'x' ELSE '1' END)::INTEGER AS bad, {}\nFROM range(5) t(i)",
        before.join(", "),
        after.join(", ")
    )
}

#[tokio::test]
async fn sql_errors_carry_duckdbs_place_in_every_format() {
    let g = Gateway::builder().spawn_app().await;
    let cases: Vec<(&str, String)> = vec![
        (
            "a parser error on line 3",
            "SELECT channel, count(*)\nFROM range(3) t(channel)\nGROUPBY channel".into(),
        ),
        (
            "a binder error on line 2",
            "SELECT 1 +\n  nope_col\nFROM range(3)".into(),
        ),
        (
            "a catalog error after a CRLF",
            "SELECT *\r\nFROM nope_table".into(),
        ),
        (
            "a binder error after Unicode blanks",
            "SELECT\u{a0}\u{a0}1 +\u{3000}nope_col".into(),
        ),
        (
            "a long error (candidate functions)",
            "SELECT 1,\n  substr(1, 2, 3, 4, 5)".into(),
        ),
        (
            "a conversion error at run time, after Unicode blanks",
            "SELECT\u{a0}INTERVAL 1 DAY AS iv,\n  x::INTEGER AS n\nFROM (VALUES ('abc')) t(x)".into(),
        ),
        (
            "a conversion error at run time, far into a long line",
            long_line_sql(),
        ),
        (
            "a conversion error at run time, the statement run as sent",
            "SELECT i,\n  (CASE WHEN i > 2 THEN 'x' ELSE '1' END)::INTEGER AS bad\nFROM range(5) t(i)".into(),
        ),
    ];
    for (what, sql) in &cases {
        let r = reference(sql);
        for format in ["json", "ndjson", "csv", "arrow", "parquet"] {
            let resp = g.query(json!({"sql": sql, "format": format})).await;
            assert_eq!(resp.status(), 400, "{what} ({format})");
            let p: Value = resp.json().await.unwrap();
            check(sql, &p, &r, &format!("{what} ({format})"));
        }
        // An async statement runs the statement into its spool through a
        // wrapper of its own: its problem is placed the same.
        let resp = g
            .client
            .post(g.url("/statements"))
            .json(&json!({"sql": sql, "wait_ms": 10000}))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{what} (statement)");
        let p: Value = resp.json().await.unwrap();
        check(sql, &p, &r, &format!("{what} (statement)"));
    }
}

#[tokio::test]
async fn an_error_mid_stream_is_placed_too() {
    let g = Gateway::builder()
        .env("DUCKGATE_THREADS", 1)
        .spawn_app()
        .await;
    // Rows stream first; a row far into the result fails DuckDB's cast.
    // The INTERVAL column has DuckDB render it, through a wrapper.
    let sql = "SELECT i, INTERVAL 1 DAY AS iv,\n  (CASE WHEN i < 800000 THEN i::VARCHAR ELSE 'x' END)::INTEGER AS v\nFROM range(1000000) t(i)";
    let r = reference(sql);
    let resp = g
        .query(json!({"sql": sql, "format": "ndjson", "max_rows": 100000000}))
        .await;
    assert_eq!(resp.status(), 200, "the body had begun");
    let (body, _) = crate::common::body_and_failure(resp).await;
    let text = String::from_utf8(body).unwrap();
    assert!(text.lines().count() > 1000, "rows were streamed first");
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    check(sql, &last["error"], &r, "NDJSON's error record");
}

#[tokio::test]
async fn places_are_only_where_duckdb_gives_one() {
    let g = Gateway::builder().spawn_app().await;
    // An error DuckDB does not place (a function's own error).
    let resp = g.query(json!({"sql": "SELECT error('boom')"})).await;
    let p: Value = resp.json().await.unwrap();
    assert_eq!(p["detail"], "boom", "{p}");
    for field in ["line", "column", "offset", "excerpt"] {
        assert!(p.get(field).is_none(), "{field} in {p}");
    }
    // The guard's own refusals name no place either.
    let resp = g.query(json!({"sql": "SELECT 1; SELECT 2"})).await;
    let p: Value = resp.json().await.unwrap();
    assert!(p.get("offset").is_none(), "{p}");
}
