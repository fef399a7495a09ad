//! A short read runs on the request's own thread; one that turns out long
//! or large moves to a blocking thread and still answers in full, with
//! DuckDB's values.

use crate::common;

use crate::common::{metric, Gateway};
use serde_json::{json, Value};
use std::time::Duration;

/// Inline runs, and inline runs moved for their answer's size and for
/// their budget.
async fn counters(g: &common::Endpoint) -> [f64; 3] {
    let m = g.get_text("/metrics").await;
    [
        metric(&m, "duckgate_queries_inline_total"),
        metric(
            &m,
            "duckgate_queries_inline_moved_total{reason=\"answer_size\"}",
        ),
        metric(&m, "duckgate_queries_inline_moved_total{reason=\"budget\"}"),
    ]
}

/// `sql` with `param` in-process: DuckDB's own rows, as JSON values.
fn duckdb_rows(sql: &str, param: i64) -> Vec<Vec<Value>> {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let rows = common::reference::rows_with(&conn, sql, &[&param]).unwrap();
    serde_json::from_value(rows).unwrap()
}

/// The rows of an NDJSON answer, each as its array of values.
fn ndjson_rows(body: &str) -> Vec<Vec<Value>> {
    body.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|v| match v {
            Value::Array(a) => a,
            Value::Object(o) => o.into_iter().map(|(_, v)| v).collect(),
            other => panic!("not a row: {other}"),
        })
        .collect()
}

async fn ndjson(g: &common::Endpoint, sql: &str, param: i64) -> String {
    let r = g
        .query(json!({"sql": sql, "params": [param], "format": "ndjson", "max_rows": 10_000_000}))
        .await;
    let status = r.status();
    let text = r.text().await.unwrap();
    assert_eq!(status, 200, "{text}");
    text
}

/// Runs `sql` with `small`, then with `big`, until a big run was inline
/// and moved for `reason` (1: `answer_size`, 2: `budget`): the small run
/// makes the text quick unless it was slow itself (a busy moment: on a
/// loaded machine most are), and then the big one runs on a blocking
/// thread. Tries for up to [`MOVE_TRIES`], not a count of tries. Every
/// answer equals DuckDB's. The counters after the move.
async fn moves(g: &common::App, sql: &str, small: i64, big: i64, reason: usize) -> [f64; 3] {
    let small_rows = duckdb_rows(sql, small);
    let big_rows = duckdb_rows(sql, big);
    let started = std::time::Instant::now();
    let mut tries = 0;
    while started.elapsed() < MOVE_TRIES {
        tries += 1;
        assert_eq!(ndjson_rows(&ndjson(g, sql, small).await), small_rows);
        let before = counters(g).await;
        assert_eq!(ndjson_rows(&ndjson(g, sql, big).await), big_rows);
        let after = counters(g).await;
        // A busy moment can move a run for the other reason, or make
        // either run slow: only this reason's move ends the tries.
        if after[reason] > before[reason] {
            return after;
        }
    }
    // Which runs went inline (and of those, which moved) says why not.
    let seen = counters(g).await;
    panic!(
        "{tries} tries in {MOVE_TRIES:?}, no inline run of {sql} moved; \
         inline, moved for its answer, moved for its budget: {seen:?}"
    );
}

/// How long [`moves`] tries: a small run is quick only if it took at most
/// 2 ms, which a machine busy with other tests can deny many times in a row.
const MOVE_TRIES: Duration = Duration::from_secs(90);

/// One test at a time: "quick" is a measured time, and the other test's
/// long query would slow this one's short ones.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn a_short_read_runs_inline_and_a_grown_answer_moves_whole() {
    let _serial = SERIAL.lock().await;
    // One connection: every run of the text meets its own verdict.
    let g = Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 1)
        .spawn_app()
        .await;
    // Rows that are long, quick to make and to encode; none for the short
    // runs.
    let sql = "SELECT i, length(repeat('x', 50000) || i) AS n, repeat('x', 50000) AS s \
               FROM range(CAST($1 AS BIGINT)) t(i)";
    // The same text, an answer of 2 MB (40 rows): it outgrows the channel,
    // stops before any byte left, and runs again on a blocking thread.
    let n = 40;
    let after = moves(&g, sql, 0, n, 1).await;
    // Now known to be large: it stays on a blocking thread.
    let body = ndjson(&g, sql, n).await;
    assert_eq!(ndjson_rows(&body), duckdb_rows(sql, n));
    assert_eq!(counters(&g).await, after);
    // A short answer again: the text is quick again after a run that was
    // (tried for as long as `moves` tries, for the same reason).
    let none = duckdb_rows(sql, 0);
    let started = std::time::Instant::now();
    let mut runs = 0;
    loop {
        runs += 1;
        assert_eq!(ndjson_rows(&ndjson(&g, sql, 0).await), none);
        let now = counters(&g).await;
        if now[0] > after[0] {
            break;
        }
        assert!(
            started.elapsed() < MOVE_TRIES,
            "{runs} short runs in {MOVE_TRIES:?}, none inline: {now:?}"
        );
    }
}

#[tokio::test]
async fn a_read_that_outruns_its_budget_moves_and_answers() {
    let _serial = SERIAL.lock().await;
    let g = Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 1)
        .env("DUCKGATE_THREADS", 1)
        .spawn_app()
        .await;
    let sql =
        "SELECT count(*) AS a, max(i) AS b FROM range(CAST($1 AS BIGINT)) t(i) WHERE i % 7 = 3";
    // The same text over many rows (100 ms of one DuckDB thread, ten times
    // an inline run's budget) takes far longer than an inline run may hold
    // the thread: the sentinel stops it and it runs again elsewhere.
    moves(&g, sql, 10, 20_000_000, 2).await;
}

/// DuckDB's scheduler threads, the callers' included, as `/metrics` says.
async fn duckdb_threads(g: &common::Endpoint) -> f64 {
    metric(&g.get_text("/metrics").await, "duckgate_duckdb_threads")
}

/// Waits up to `within` for `duckgate_duckdb_threads` to read `n`.
async fn threads_become(g: &common::Endpoint, what: &str, within: Duration, n: f64) {
    common::eventually(what, within, || async {
        match duckdb_threads(g).await {
            seen if seen == n => Ok(()),
            seen => Err(format!("{seen} threads")),
        }
    })
    .await;
}

/// DuckDB's background threads stop while only short reads run
/// (`engine::threads`) and run again for a statement on a blocking thread,
/// while it runs; short reads answer with DuckDB's values either way.
#[tokio::test]
async fn duckdbs_threads_stop_while_only_short_reads_run() {
    let _serial = SERIAL.lock().await;
    let g = Gateway::builder().env("DUCKGATE_THREADS", 2).start();
    let want = duckdb_rows("SELECT $1 + 1 AS n", 41);
    // Start-up's own statements ended: after the linger, only the
    // callers' thread is left, while short reads keep running inline. A
    // read that outran its inline budget (a loaded machine) ran on a
    // blocking thread and held them again: such a round proves nothing and
    // is run again, and a round in which none moved must see them stop.
    let linger = duckgate::engine::threads::LINGER;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let before = counters(&g).await;
        for _ in 0..5 {
            assert_eq!(
                ndjson_rows(&ndjson(&g, "SELECT $1 + 1 AS n", 41).await),
                want
            );
        }
        let deadline = std::time::Instant::now() + linger * 5;
        let mut seen = duckdb_threads(&g).await;
        while seen != 1.0 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            seen = duckdb_threads(&g).await;
        }
        if seen == 1.0 {
            break;
        }
        let after = counters(&g).await;
        let moved = after[1] + after[2] > before[1] + before[2];
        // The first round's text is new: it runs on a blocking thread.
        assert!(
            moved || rounds == 1,
            "no read moved, yet {seen} threads ran {:?} after the reads",
            linger * 5
        );
        assert!(rounds < 40, "{rounds} rounds, in each a read moved");
    }
    // A new text runs on a blocking thread: the threads run while it does
    // (seen while it runs: it lasts as long as the wait for them may).
    let runs = common::BUSY_MARGIN;
    let long = {
        let endpoint_url = g.url("/query");
        let client = g.client.clone();
        tokio::spawn(async move {
            let r = client
                .post(endpoint_url)
                .json(&json!({"sql": common::sleeping_sql(runs)}))
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        })
    };
    threads_become(&g, "the background thread running", runs, 2.0).await;
    assert_eq!(long.await.unwrap(), 200);
    // And stop again after it, once they have lingered.
    threads_become(
        &g,
        "the background thread stopped again",
        common::intervals(linger),
        1.0,
    )
    .await;
    assert_eq!(
        ndjson_rows(&ndjson(&g, "SELECT $1 + 1 AS n", 41).await),
        want
    );
}
