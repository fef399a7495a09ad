//! The statements' drain of one process (issue 57): on SIGTERM the gateway
//! refuses new work with 503 `shutting-down` but keeps answering polls and
//! pages, so a statement running at the signal still
//! succeeds and its result is read during the drain; one that outlives the
//! grace period ends with the documented answer (`failed`, problem
//! `shutting-down`), read before the process exits. Before, SIGTERM
//! stopped accepting connections at once and the statement ended
//! `client-gone` 0.1 s later: its client could not even ask.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{eventually, sleeping_sql, Gateway, BUSY_MARGIN};

fn sigterm(g: &Gateway) {
    let status = Command::new("kill")
        .arg("-TERM")
        .arg(g.pid().to_string())
        .status()
        .unwrap();
    assert!(status.success());
}

async fn submit(g: &Gateway, id: &str, sql: &str) -> (u16, Value) {
    let r = g
        .client
        .post(g.url("/statements"))
        .header("duckgate-query-id", id)
        .json(&json!({"sql": sql, "wait_ms": 0, "timeout_ms": 60_000}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Polls `id` until it ends; every answer must be a 200 (the drain serves
/// polls).
async fn until_ended(g: &Gateway, id: &str, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        let r = g
            .client
            .get(g.url(&format!("/statements/{id}")))
            .send()
            .await
            .unwrap_or_else(|e| panic!("polling {id} during the drain: {e}"));
        assert_eq!(r.status(), 200, "polling {id} during the drain");
        let v: Value = r.json().await.unwrap();
        if !matches!(v["state"].as_str(), Some("queued" | "running")) {
            return v;
        }
        assert!(Instant::now() < deadline, "{id} never ended: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits for the process to exit: its code.
async fn exit_code(mut g: Gateway, within: Duration) -> (Option<i32>, Gateway) {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(s)) = g.child.try_wait() {
                return (s.code(), g);
            }
            if Instant::now() > deadline {
                return (None, g);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    })
    .await
    .unwrap()
}

#[tokio::test]
async fn a_statement_submitted_before_sigterm_succeeds_and_is_read_during_the_drain() {
    let grace = Duration::from_secs(20);
    let g = Gateway::builder()
        .env("DUCKGATE_SHUTDOWN_GRACE_MS", grace.as_millis())
        .start();
    // Four seconds of sleep (evaluated once), then three rows.
    let sql = |ms: u64| {
        format!(
            "SELECT i, i * 7 AS v, (SELECT sleep_ms({ms}) IS NULL) AS slept FROM range(3) t(i) ORDER BY i"
        )
    };
    let (sql, reference_sql) = (sql(4000), sql(0));
    let (status, v) = submit(&g, "before-term", &sql).await;
    assert_eq!(status, 202, "{v}");
    // The signal comes while it runs (it sleeps 4 s).
    g.statement_in("before-term", None, &["running"], BUSY_MARGIN)
        .await;
    sigterm(&g);
    let signalled = Instant::now();

    // New work is refused at once, with the status a client retries elsewhere.
    let r = eventually_refused(&g).await;
    assert_eq!(r.0, 503, "{}", r.2);
    assert!(r.1, "no Retry-After: {}", r.2);
    assert_eq!(r.2["type"], "urn:duckgate:problem:shutting-down", "{}", r.2);

    // The statement runs on, and its result is read during the drain.
    let done = until_ended(&g, "before-term", grace + BUSY_MARGIN).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    let r = g
        .client
        .get(g.url("/statements/before-term/result?format=json"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let page: Value = r.json().await.unwrap();
    assert_eq!(page["rows"], reference(&reference_sql), "{page}");
    let read = signalled.elapsed();

    // Read: nothing is left to drain, and the process exits well before
    // the grace period is over.
    let (code, g) = exit_code(g, grace + BUSY_MARGIN).await;
    assert_eq!(code, Some(0), "{}", g.log_text());
    let exited = signalled.elapsed();
    assert!(
        exited < grace,
        "exited {exited:?} after SIGTERM (the result was read after {read:?})"
    );
    eprintln!("SIGTERM: result read after {read:?}, exited after {exited:?}");
}

#[tokio::test]
async fn a_statement_outliving_the_grace_period_ends_with_the_documented_answer() {
    let grace = Duration::from_millis(1500);
    let g = Gateway::builder()
        .env("DUCKGATE_SHUTDOWN_GRACE_MS", grace.as_millis())
        .start();
    let (status, v) = submit(&g, "too-long", &sleeping_sql(Duration::from_secs(30))).await;
    assert_eq!(status, 202, "{v}");
    g.statement_in("too-long", None, &["running"], BUSY_MARGIN)
        .await;
    sigterm(&g);
    let signalled = Instant::now();
    let done = until_ended(&g, "too-long", grace + BUSY_MARGIN).await;
    assert_eq!(done["state"], "failed", "{done}");
    assert_eq!(
        done["problem"]["type"], "urn:duckgate:problem:shutting-down",
        "{done}"
    );
    assert!(
        signalled.elapsed() >= grace,
        "ended {:?} after SIGTERM, before the grace period",
        signalled.elapsed()
    );
    let (code, g) = exit_code(g, grace + BUSY_MARGIN).await;
    assert_eq!(code, Some(0), "{}", g.log_text());
}

/// POST /query until the drain refuses it: status, whether Retry-After
/// came, the problem.
async fn eventually_refused(g: &Gateway) -> (u16, bool, Value) {
    let deadline = Instant::now() + BUSY_MARGIN;
    loop {
        let r = g
            .client
            .post(g.url("/query"))
            .json(&json!({"sql": "SELECT 1 AS one"}))
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        let retry = r.headers().contains_key("retry-after");
        let v: Value = r.json().await.unwrap_or(Value::Null);
        if status != 200 || Instant::now() > deadline {
            return (status, retry, v);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// DuckDB's rows of `sql` (i BIGINT, v BIGINT, slept BOOLEAN), as the
/// gateway's JSON renders them.
fn reference(sql: &str) -> Value {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let i: i64 = row.get(0).unwrap();
        let v: i64 = row.get(1).unwrap();
        let slept: bool = row.get(2).unwrap();
        out.push(json!([i, v, slept]));
    }
    Value::Array(out)
}

/// A Flight SQL call with the token and the statement `sql`.
fn flight_statement(sql: &str) -> tonic::Request<arrow_flight::FlightDescriptor> {
    use arrow_flight::sql::{CommandStatementQuery, ProstMessageExt};
    use prost::Message;
    let cmd = CommandStatementQuery {
        query: sql.to_string(),
        transaction_id: None,
    };
    let mut request = tonic::Request::new(arrow_flight::FlightDescriptor::new_cmd(
        cmd.as_any().encode_to_vec(),
    ));
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {FLIGHT_SECRET}").parse().unwrap(),
    );
    request
}

const FLIGHT_SECRET: &str = "drain-flight-3f9a7c21";

type FlightClient =
    arrow_flight::flight_service_client::FlightServiceClient<tonic::transport::Channel>;

async fn flight_client(uri: &str) -> FlightClient {
    let channel = tonic::transport::Endpoint::from_shared(uri.replace("grpc://", "http://"))
        .unwrap()
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connecting to {uri}: {e}"));
    FlightClient::new(channel)
}

/// Runs `sql` over Flight SQL: GetFlightInfo, then (once `go` says so) the
/// DoGet of its ticket; the rows as (i, v, slept).
async fn flight_rows(
    mut client: FlightClient,
    sql: String,
    go: tokio::sync::oneshot::Receiver<()>,
) -> Result<Value, tonic::Status> {
    use arrow::array::{AsArray, RecordBatch};
    use arrow::datatypes::Int64Type;
    use futures::TryStreamExt;
    let info = client
        .get_flight_info(flight_statement(&sql))
        .await?
        .into_inner();
    let ticket = info.endpoint[0].ticket.clone().expect("a ticket");
    let _ = go.await;
    let mut request = tonic::Request::new(ticket);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {FLIGHT_SECRET}").parse().unwrap(),
    );
    let data = client.do_get(request).await?.into_inner();
    let batches: Vec<RecordBatch> =
        arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
            data.map_err(arrow_flight::error::FlightError::from),
        )
        .try_collect()
        .await
        .map_err(|e| tonic::Status::internal(e.to_string()))?;
    let mut rows = Vec::new();
    for b in &batches {
        for r in 0..b.num_rows() {
            rows.push(json!([
                b.column(0).as_primitive::<Int64Type>().value(r),
                b.column(1).as_primitive::<Int64Type>().value(r),
                b.column(2).as_boolean().value(r),
            ]));
        }
    }
    Ok(Value::Array(rows))
}

/// Flight SQL drains as the HTTP door does: during SIGTERM's drain a new
/// statement is refused with UNAVAILABLE, the problem `shutting-down` and a
/// retry hint (`retry-after`), on a connection open before the signal and
/// on one made after it (the listener still accepts), while a statement
/// running at the signal finishes and its result is fetched (its DoGet
/// comes during the drain); then the process exits before the grace
/// period is over. Before, the listener stopped at the signal: the
/// running statement's DoGet and the new statement both met a closed
/// listener (UNAVAILABLE, a transport error, no problem, no hint).
#[tokio::test]
async fn flight_sql_statements_drain_as_http_queries_do() {
    let grace = Duration::from_secs(20);
    let g = Gateway::builder()
        .env("DUCKGATE_SHUTDOWN_GRACE_MS", grace.as_millis())
        .env("DUCKGATE_FLIGHT_LISTEN", "127.0.0.1:0")
        .env("DUCKGATE_QUERY_TOKENS", format!("analyst:{FLIGHT_SECRET}"))
        .start();
    let uri = g.flight_uri().await;
    let client = flight_client(&uri).await;
    let sql = |ms: u64| {
        format!(
            "SELECT i, i * 7 AS v, (SELECT sleep_ms({ms}) IS NULL) AS slept FROM range(3) t(i) ORDER BY i"
        )
    };
    let (sql, reference_sql) = (sql(4000), sql(0));
    let (go, wait) = tokio::sync::oneshot::channel();
    let running = tokio::spawn(flight_rows(client.clone(), sql, wait));
    // The statement is running (its GetFlightInfo returns once DuckDB has
    // its first rows, after the 4 s sleep) when the signal comes: listed
    // among its identity's queries.
    eventually("the Flight statement running", BUSY_MARGIN, || async {
        let (status, v) = g.get("/queries", FLIGHT_SECRET).await;
        match v["queries"].as_array() {
            Some(q) if status == 200 && !q.is_empty() => Ok(()),
            _ => Err(v),
        }
    })
    .await;
    assert!(
        !running.is_finished(),
        "GetFlightInfo returned before the signal: the statement was not running at it"
    );
    sigterm(&g);
    let signalled = Instant::now();
    eventually("the drain's start", BUSY_MARGIN, || {
        let log = g.log_text();
        async move {
            log.contains("shutting down: new work refused")
                .then_some(())
                .ok_or("not yet")
        }
    })
    .await;

    for fresh in [false, true] {
        let (which, mut c) = if fresh {
            (
                "a connection made during the drain",
                flight_client(&uri).await,
            )
        } else {
            ("the connection open before the signal", client.clone())
        };
        let refused = c
            .get_flight_info(flight_statement("SELECT 1 AS one"))
            .await
            .expect_err("a new statement during the drain");
        assert_eq!(
            refused.code(),
            tonic::Code::Unavailable,
            "{which}: {refused:?}"
        );
        let meta = refused.metadata();
        assert_eq!(
            meta.get("duckgate-problem").and_then(|v| v.to_str().ok()),
            Some("shutting-down"),
            "{which}: {refused:?}"
        );
        assert_eq!(
            meta.get("retry-after").and_then(|v| v.to_str().ok()),
            Some("1"),
            "{which}: {refused:?}"
        );
    }

    // The running statement's DoGet, during the drain: its whole result.
    let _ = go.send(());
    let rows = running.await.unwrap().unwrap_or_else(|e| {
        panic!(
            "the running statement's result, fetched during the drain: {e:?}\n{}",
            g.log_text()
        )
    });
    assert_eq!(rows, reference(&reference_sql));
    let fetched = signalled.elapsed();

    let (code, g) = exit_code(g, grace + BUSY_MARGIN).await;
    assert_eq!(code, Some(0), "{}", g.log_text());
    let exited = signalled.elapsed();
    assert!(
        exited < grace,
        "exited {exited:?} after SIGTERM (the result was fetched after {fetched:?})"
    );
    eprintln!("SIGTERM: Flight result fetched after {fetched:?}, exited after {exited:?}");
}
