//! Problem answers as readers see them. Every one names its title and the
//! first line of its detail in a `duckgate-error` header, and its title in
//! the HTTP/1 reason phrase, for readers that show a failed answer's status
//! line and headers but not its body. And where a SQL error is: the
//! problem document of a parser, binder, catalog
//! or conversion error carries DuckDB's place of it in the SQL the client
//! sent (`line`, `column`, `offset`) and DuckDB's caret `excerpt`, in every
//! format and through every text the gateway runs in the statement's place
//! (the CSV and Parquet COPYs, the wrappers that let DuckDB render values,
//! the spool of an async statement). The reference is DuckDB in-process:
//! the same SQL's error with `errors_as_json` (its message and `position`)
//! and without (the excerpt DuckDB appends).

use crate::common::{App, Gateway};

use std::io::{Read, Write};

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

/// The status line and headers of a raw HTTP/1.1 exchange (reqwest does not
/// show a reason phrase).
fn raw_head(base: &str, request: &str) -> String {
    let addr = base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&got).to_string();
    text[..text.find("\r\n\r\n").unwrap_or(text.len())].to_string()
}

/// `duckgate-error`'s value read back: percent-decoded UTF-8.
fn decoded(value: &str) -> String {
    let bytes = value.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 3 <= bytes.len() {
            if let Ok(b) = u8::from_str_radix(&value[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8(out).unwrap()
}

/// The token of the problems' caller.
const HEADER_TOKEN: &str = "header-token-8c2e";

#[tokio::test]
async fn every_problem_names_itself_in_a_header_and_its_status_line() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("analyst:{HEADER_TOKEN}"))
        .env("DUCKGATE_MAX_BODY_BYTES", 4096)
        .env("DUCKGATE_MAX_SQL_BYTES", 4096)
        .spawn_app()
        .await;
    for (what, r) in problem_answers(&g).await {
        its_header_says_its_title_and_first_line(what, r).await;
    }
    the_status_line_says_the_title(&g);
}

/// One answer of each kind of problem, named: a table of requests.
async fn problem_answers(g: &App) -> Vec<(&'static str, reqwest::Response)> {
    let token = HEADER_TOKEN;
    let post = |sql: &str| {
        g.client
            .post(g.url("/query"))
            .bearer_auth(token)
            .json(&json!({ "sql": sql }))
    };
    vec![
        (
            "a SQL error",
            post("SELECT\n  nope FROM range(3)").send().await.unwrap(),
        ),
        (
            "a long error",
            post("SELECT substr(1, 2, 3, 4, 5)").send().await.unwrap(),
        ),
        (
            "a name of characters a header cannot carry",
            post("SELECT \"crème %d\" FROM range(3)")
                .send()
                .await
                .unwrap(),
        ),
        (
            "a refusal",
            post("SELECT current_setting('threads')")
                .send()
                .await
                .unwrap(),
        ),
        (
            "a wrong token",
            g.client
                .post(g.url("/query"))
                .bearer_auth("wrong-token-1")
                .json(&json!({"sql": "SELECT 1"}))
                .send()
                .await
                .unwrap(),
        ),
        (
            "no such route",
            g.client.get(g.url("/nope")).send().await.unwrap(),
        ),
        (
            "a method the route does not take",
            g.client
                .delete(g.url("/query"))
                .bearer_auth(token)
                .send()
                .await
                .unwrap(),
        ),
        (
            "a body past its limit",
            g.client
                .post(g.url("/query"))
                .bearer_auth(token)
                .body("SELECT 1 -- ".to_string() + &"x".repeat(8192))
                .send()
                .await
                .unwrap(),
        ),
        (
            "a failed URL read",
            g.client
                .get(format!(
                    "{}?format=csv&sql=SELECT%20nope%20FROM%20range(3)",
                    g.url("/query")
                ))
                .bearer_auth(token)
                .send()
                .await
                .unwrap(),
        ),
    ]
}

/// A client error whose `duckgate-error` header holds the title and the
/// detail's first line, percent-encoded ASCII, cut at 300 bytes with
/// `...`, and no token.
async fn its_header_says_its_title_and_first_line(what: &str, r: reqwest::Response) {
    let token = HEADER_TOKEN;
    let status = r.status();
    assert!(status.is_client_error(), "{what}: {status}");
    let header = r.headers()["duckgate-error"].to_str().unwrap().to_string();
    let p: Value = r.json().await.unwrap();
    let title = p["title"].as_str().unwrap();
    let first = p["detail"].as_str().unwrap().lines().next().unwrap();
    let whole = format!("{title}: {first}");
    assert!(header.len() <= 300, "{what}: {} bytes", header.len());
    assert!(
        header.bytes().all(|b| (b' '..=b'~').contains(&b)),
        "{what}: {header}"
    );
    if whole.len() < 250 {
        assert_eq!(decoded(&header), whole, "{what}");
    } else {
        let kept = decoded(header.trim_end_matches("..."));
        assert!(
            header.ends_with("...") && whole.starts_with(&kept),
            "{what}: {header}"
        );
    }
    assert!(
        !header.contains(token) && !header.contains("wrong-token-1"),
        "{what}: {header}"
    );
}

/// The status line says the title (HTTP/1.1 has a reason phrase).
fn the_status_line_says_the_title(g: &App) {
    let token = HEADER_TOKEN;
    let head = raw_head(
        &g.base,
        "GET /nope HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    );
    assert!(head.starts_with("HTTP/1.1 404 Not found\r\n"), "{head}");
    let sql = "SELECT%20nope%20FROM%20range(3)";
    let head = raw_head(
        &g.base,
        &format!("GET /query?format=csv&sql={sql} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
    );
    assert!(head.starts_with("HTTP/1.1 400 SQL error\r\n"), "{head}");
    assert!(
        head.lines()
            .any(|l| l.starts_with("duckgate-error: SQL error: Referenced column")),
        "{head}"
    );
}
