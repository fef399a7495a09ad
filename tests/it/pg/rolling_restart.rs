//! A rolling restart loses no acknowledged statement (issue 57): three
//! replicas sharing PostgreSQL and an S3 spool are restarted one by one
//! with SIGTERM while clients submit statements, poll them through any
//! replica and read their pages. A draining replica refuses new work with
//! 503 `shutting-down` (the client sends it elsewhere) and lets what it
//! acknowledged finish within `DUCKGATE_SHUTDOWN_GRACE_MS`, its results on
//! S3 and its ends published, before it exits; every acknowledged
//! statement then ends `succeeded` with DuckDB's rows, whichever replica
//! answers. (Before, a plain rolling restart lost 3: polls answered 410,
//! one statement `failed` with `shutting-down`.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::{Gateway, Postgres, S3Server};

const ALICE: &str = "alice-token-0123456789";
const PASSWORD: &str = "rolling-pw-61b0c2";

fn replica(s3: &S3Server, pg: &Postgres) -> crate::common::GatewayBuilder {
    s3.app(900)
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_STATE_DSN", pg.dsn())
        .env("DUCKGATE_SPOOL_URL", "s3://duckgate-test/spool/")
        .env("DUCKGATE_REPLICA_STALE_MS", 2_000)
        .env("DUCKGATE_SHUTDOWN_GRACE_MS", 15_000)
        .env("DUCKGATE_POOL_SIZE", 4)
}

/// Statement `k`: a pause of 0.3 to 2.5 s, then three rows that name it.
fn sql(k: u64, sleep: bool) -> String {
    let ms = if sleep { 300 + (k * 370) % 2_200 } else { 0 };
    format!(
        "SELECT {k} AS k, i, (SELECT sleep_ms({ms}) IS NULL) AS slept FROM range(3) t(i) ORDER BY i"
    )
}

/// DuckDB's rows of statement `k` (without its pause), as the gateway's
/// JSON renders them.
fn reference(k: u64) -> Value {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    let mut stmt = conn.prepare(&sql(k, false)).unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let k: i64 = row.get(0).unwrap();
        let i: i64 = row.get(1).unwrap();
        let slept: bool = row.get(2).unwrap();
        out.push(json!([k, i, slept]));
    }
    Value::Array(out)
}

/// What the clients saw.
#[derive(Default)]
struct Seen {
    /// Acknowledged statements: (k, id, final answer or why none).
    acknowledged: Vec<(u64, String, Result<Value, String>)>,
    /// Submissions refused with 503 shutting-down (sent elsewhere).
    refused: u64,
    /// Requests that found a replica gone (connection refused), retried.
    unreachable: u64,
}

/// One request to whichever live replica comes next: the first answer
/// that is not a dropped connection or a draining replica's refusal.
async fn ask(
    live: &Mutex<Vec<String>>,
    turn: &mut usize,
    seen: &Mutex<Seen>,
    build: impl Fn(&str) -> reqwest::RequestBuilder,
) -> Option<(u16, Value)> {
    for _ in 0..200 {
        let base = {
            let live = live.lock().unwrap();
            *turn += 1;
            live[*turn % live.len()].clone()
        };
        match build(&base).send().await {
            Err(_) => {
                seen.lock().unwrap().unreachable += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(r) => {
                let status = r.status().as_u16();
                let v: Value = r.json().await.unwrap_or(Value::Null);
                if status == 503 && v["type"] == "urn:duckgate:problem:shutting-down" {
                    seen.lock().unwrap().refused += 1;
                    continue;
                }
                return Some((status, v));
            }
        }
    }
    None
}

/// A client until `stop`: submits statement after statement, each polled
/// through the replicas until it ends, then paged.
async fn client(
    n: u64,
    live: Arc<Mutex<Vec<String>>>,
    seen: Arc<Mutex<Seen>>,
    stop: tokio_util::sync::CancellationToken,
) {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut turn = n as usize;
    let mut k = n * 1_000;
    while !stop.is_cancelled() {
        k += 1;
        let text = sql(k, true);
        let id = format!("c{n}-{k}");
        let Some((status, _)) = ask(&live, &mut turn, &seen, |base| {
            client
                .post(format!("{base}/statements"))
                .bearer_auth(ALICE)
                .header("duckgate-query-id", &id)
                .json(&json!({"sql": text, "wait_ms": 0}))
        })
        .await
        else {
            continue;
        };
        if status != 200 && status != 202 {
            // Not acknowledged: nothing was promised.
            continue;
        }
        let outcome = follow(&client, &live, &mut turn, &seen, &id).await;
        seen.lock().unwrap().acknowledged.push((k, id, outcome));
    }
}

/// Polls statement `id` until it ends, then reads its page.
async fn follow(
    client: &reqwest::Client,
    live: &Mutex<Vec<String>>,
    turn: &mut usize,
    seen: &Mutex<Seen>,
    id: &str,
) -> Result<Value, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (status, v) = ask(live, turn, seen, |base| {
            client
                .get(format!("{base}/statements/{id}"))
                .bearer_auth(ALICE)
        })
        .await
        .ok_or("no replica answered")?;
        match (status, v["state"].as_str()) {
            (200, Some("queued" | "running")) => {}
            (200, Some("succeeded")) => break,
            _ => return Err(format!("status {status} {v}")),
        }
        if Instant::now() > deadline {
            return Err(format!("still {v} after 60 s"));
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (status, page) = ask(live, turn, seen, |base| {
        client
            .get(format!("{base}/statements/{id}/result?format=json"))
            .bearer_auth(ALICE)
    })
    .await
    .ok_or("no replica answered the page")?;
    if status != 200 {
        return Err(format!("page {status} {page}"));
    }
    Ok(page["rows"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_rolling_restart_under_load_loses_no_acknowledged_statement() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let mut replicas: Vec<Gateway> = Vec::new();
    for _ in 0..3 {
        let b = replica(&s3, &pg);
        replicas.push(
            tokio::task::spawn_blocking(move || b.start())
                .await
                .unwrap(),
        );
    }
    let live = Arc::new(Mutex::new(
        replicas.iter().map(|g| g.base.clone()).collect::<Vec<_>>(),
    ));
    let seen = Arc::new(Mutex::new(Seen::default()));
    let stop = tokio_util::sync::CancellationToken::new();
    let clients: Vec<_> = (1..=4)
        .map(|n| tokio::spawn(client(n, live.clone(), seen.clone(), stop.clone())))
        .collect();
    let started = Instant::now();
    // The clients' load runs a while before the first restart (a sleep on
    // purpose: the restarts must come under load, and the statements
    // acknowledged meanwhile count toward the run's total).
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Each replica in turn: two statements of 2-3 s acknowledged by it,
    // then SIGTERM, its exit awaited, a new one.
    let mut exits = Vec::new();
    let mut anchors = Vec::new();
    for i in 0..3 {
        let mut old = replicas.remove(0);
        let base = old.base.clone();
        for j in 0..2u64 {
            let k = 900_000 + 10 * i as u64 + j;
            let id = format!("anchor-{i}-{j}");
            let text = format!(
                "SELECT {k} AS k, i, (SELECT sleep_ms({}) IS NULL) AS slept FROM range(3) t(i) ORDER BY i",
                2_000 + 500 * j
            );
            let r = old
                .client
                .post(old.url("/statements"))
                .bearer_auth(ALICE)
                .header("duckgate-query-id", &id)
                .json(&json!({"sql": text, "wait_ms": 0}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 202, "{id}");
            anchors.push((k, id));
        }
        let signalled = Instant::now();
        let (code, old) =
            tokio::task::spawn_blocking(move || (old.terminate(Duration::from_secs(40)), old))
                .await
                .unwrap();
        assert_eq!(
            code,
            Some(0),
            "replica {i} did not exit cleanly:\n{}",
            old.log_text()
        );
        exits.push(signalled.elapsed());
        let b = replica(&s3, &pg);
        let new = tokio::task::spawn_blocking(move || b.start())
            .await
            .unwrap();
        {
            let mut live = live.lock().unwrap();
            live.retain(|b| *b != base);
            live.push(new.base.clone());
        }
        replicas.push(new);
        // The new replica takes load before the next restart (on purpose).
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    stop.cancel();
    for c in clients {
        tokio::time::timeout(Duration::from_secs(90), c)
            .await
            .expect("a client never finished")
            .unwrap();
    }
    // The statements acknowledged just before each SIGTERM, through the
    // replicas that are left.
    let client = reqwest::Client::new();
    let mut turn = 0;
    for (k, id) in anchors {
        let outcome = follow(&client, &live, &mut turn, &seen, &id).await;
        seen.lock().unwrap().acknowledged.push((k, id, outcome));
    }

    let seen = seen.lock().unwrap();
    let mut lost = Vec::new();
    for (k, id, outcome) in &seen.acknowledged {
        match outcome {
            Ok(rows) if *rows == reference(*k) => {}
            Ok(rows) => lost.push(format!("{id} (k={k}): wrong rows {rows}")),
            Err(why) => lost.push(format!("{id} (k={k}): {why}")),
        }
    }
    eprintln!(
        "rolling restart in {:?}: {} statements acknowledged, {} lost; {} submissions refused while draining, {} requests found a replica gone; replicas exited {:?} after SIGTERM",
        started.elapsed(),
        seen.acknowledged.len(),
        lost.len(),
        seen.refused,
        seen.unreachable,
        exits
    );
    assert!(
        seen.acknowledged.len() >= 15,
        "too few statements to say anything: {}",
        seen.acknowledged.len()
    );
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged statements lost:\n{}",
        lost.len(),
        seen.acknowledged.len(),
        lost.join("\n")
    );
}
