//! Client-chosen query ids (`duckgate-query-id`) unique per token across
//! replicas that share state (DUCKGATE_STATE_DSN): while replica A runs a
//! token's query `X`, replica B answers 409 to that token's `X` (for
//! `/query` and `/statements` alike), `GET`/`DELETE /queries/X` through B
//! mean A's query, and the id is free again once A's query ends, however it
//! ends (answered, cancelled, client gone, replica killed). Generated ids
//! take no reservation.

use std::time::{Duration, Instant};

use crate::common::{eventually, sleeping_sql, Gateway, Postgres};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";
const PASSWORD: &str = "state-pw-3f9a0c";
/// `DUCKGATE_REPLICA_STALE_MS`: how long a killed replica's ids stay held.
const STALE: Duration = Duration::from_millis(2000);
/// Runs until cancelled.
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

fn replica(pg: &Postgres) -> Gateway {
    Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_STATE_DSN", pg.dsn())
        .env("DUCKGATE_REPLICA_STALE_MS", STALE.as_millis())
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 60000)
        .env("DUCKGATE_POOL_SIZE", 3)
        .start()
}

/// `POST /query` of `sql` on `g` as `token`, with the query id `id` (none:
/// generated): status and body (JSON, or `Null`).
async fn query(
    client: &reqwest::Client,
    url: &str,
    token: &str,
    id: Option<&str>,
    sql: &str,
) -> Result<(u16, Value), reqwest::Error> {
    let mut r = client
        .post(url)
        .bearer_auth(token)
        .json(&json!({"sql": sql, "timeout_ms": 60000}));
    if let Some(id) = id {
        r = r.header("duckgate-query-id", id);
    }
    let r = r.send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

async fn query_on(g: &Gateway, token: &str, id: &str, sql: &str) -> (u16, Value) {
    query(&g.client, &g.url("/query"), token, Some(id), sql)
        .await
        .unwrap()
}

/// Starts `sql` with `id` on `g` in the background.
fn spawn_query(
    g: &Gateway,
    id: Option<&'static str>,
    sql: &str,
) -> tokio::task::JoinHandle<Result<(u16, Value), reqwest::Error>> {
    let (client, url, sql) = (g.client.clone(), g.url("/query"), sql.to_string());
    tokio::spawn(async move { query(&client, &url, ALICE, id, &sql).await })
}

/// Waits until `seen_through` lists alice's running query `id`.
async fn until_listed(seen_through: &Gateway, id: &str) -> Value {
    eventually(
        "the query listed through the other replica",
        Duration::from_secs(20),
        || async {
            let (status, v) = seen_through.get(&format!("/queries/{id}"), ALICE).await;
            match status {
                200 => Ok(v),
                _ => Err(format!("{status} {v}")),
            }
        },
    )
    .await
}

fn taken(status: u16, v: &Value) {
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["type"], "urn:duckgate:problem:query-id-taken", "{v}");
}

/// Waits until `g` runs alice's `SELECT 1` under `id`; how long that took.
async fn until_accepted(g: &Gateway, id: &str) -> Duration {
    let t = Instant::now();
    eventually(
        "the id accepted on the other replica",
        Duration::from_secs(10),
        || async {
            let (status, v) = query_on(g, ALICE, id, "SELECT 1 AS one").await;
            match status {
                200 => Ok(()),
                _ => Err(format!("{status} {v}")),
            }
        },
    )
    .await;
    t.elapsed()
}

/// Reservation rows in the shared state.
fn reserved(pg: &Postgres) -> u64 {
    pg.psql(PASSWORD, "state", "SELECT count(*) FROM duckgate_query_ids")
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn query_ids_are_unique_across_replicas() {
    let pg = Postgres::start(PASSWORD, "state");
    let mut a = replica(&pg);
    let b = replica(&pg);

    // A long query with id job-x on A; B sees it.
    let long = spawn_query(&a, Some("job-x"), LONG);
    let listed = until_listed(&b, "job-x").await;
    assert_eq!(listed["token"], "alice", "{listed}");
    // B refuses alice's job-x while A runs it, through /query and
    // /statements alike; bob's job-x is bob's own.
    let (status, v) = query_on(&b, ALICE, "job-x", "SELECT 1 AS one").await;
    taken(status, &v);
    let r = b
        .client
        .post(b.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "job-x")
        .json(&json!({"sql": "SELECT 1 AS one", "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    taken(status, &r.json().await.unwrap());
    let (status, v) = query_on(&b, BOB, "job-x", "SELECT 1 AS one").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(reserved(&pg), 1);
    // DELETE /queries/job-x through B stops A's query.
    let (status, v) = b.delete("/queries/job-x", ALICE).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["ended"], true, "{v}");
    let (status, v) = long.await.unwrap().unwrap();
    assert_eq!(status, 409, "{v}");
    assert_eq!(v["type"], "urn:duckgate:problem:query-cancelled", "{v}");
    let free = until_accepted(&b, "job-x").await;
    eprintln!("job-x free on B {free:?} after A's query was cancelled");

    // A query that ends with its answer frees its id too.
    let short = spawn_query(
        &a,
        Some("job-y"),
        &sleeping_sql(Duration::from_millis(2500)),
    );
    until_listed(&b, "job-y").await;
    let (status, v) = query_on(&b, ALICE, "job-y", "SELECT 1 AS one").await;
    taken(status, &v);
    let (status, v) = short.await.unwrap().unwrap();
    assert_eq!(status, 200, "{v}");
    let free = until_accepted(&b, "job-y").await;
    eprintln!("job-y free on B {free:?} after A answered");

    // So does a client that goes away mid-query.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(1500))
        .build()
        .unwrap();
    let gone = {
        let url = a.url("/query");
        tokio::spawn(async move { query(&impatient, &url, ALICE, Some("job-z"), LONG).await })
    };
    until_listed(&b, "job-z").await;
    assert!(gone.await.unwrap().is_err(), "the client gave up");
    let free = until_accepted(&b, "job-z").await;
    eprintln!("job-z free on B {free:?} after its client left A");

    // A running statement's id is a running query's id too.
    let r = a
        .client
        .post(a.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "job-s")
        .json(&json!({"sql": LONG, "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    until_listed(&b, "job-s").await;
    let (status, v) = query_on(&b, ALICE, "job-s", "SELECT 1 AS one").await;
    taken(status, &v);
    let (status, v) = b.delete("/statements/job-s", ALICE).await;
    assert!(status == 200 || status == 204, "{status} {v}");
    let free = until_accepted(&b, "job-s").await;
    eprintln!("job-s free on B {free:?} after the statement was deleted");

    // Generated ids take no reservation (no PostgreSQL round trip).
    let anonymous = spawn_query(&a, None, LONG);
    eventually(
        "the anonymous query runs",
        Duration::from_secs(20),
        || async {
            let (_, v) = a.get("/queries", ALICE).await;
            match v["queries"].as_array().map(Vec::len) {
                Some(1) => Ok(()),
                _ => Err(v.to_string()),
            }
        },
    )
    .await;
    assert_eq!(reserved(&pg), 0);
    anonymous.abort();

    // A replica killed mid-query holds its ids until its heartbeat is stale
    // (DUCKGATE_REPLICA_STALE_MS, 2 s here), not for ever.
    let _doomed = spawn_query(&a, Some("job-d"), LONG);
    until_listed(&b, "job-d").await;
    a.child.kill().unwrap();
    let killed = Instant::now();
    let (status, v) = query_on(&b, ALICE, "job-d", "SELECT 1 AS one").await;
    // Still held only if asked well inside the staleness (a busy machine
    // may answer later: then the id may be free already, and nothing is
    // asserted of it).
    if killed.elapsed() < STALE * 3 / 4 {
        taken(status, &v);
    }
    until_accepted(&b, "job-d").await;
    let free = killed.elapsed();
    eprintln!("job-d free on B {free:?} after A was killed");
    // Not before A's last heartbeat went stale: A beat at most a fifth of
    // the staleness before it was killed (measured from the kill, not from
    // the first ask, which a busy machine may make late).
    assert!(free >= STALE * 3 / 4, "{free:?}");
    // Nothing of A's is left behind.
    eventually("no reservation left", Duration::from_secs(10), || async {
        match reserved(&pg) {
            0 => Ok(()),
            n => Err(n),
        }
    })
    .await;
}
