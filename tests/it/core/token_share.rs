//! Fair shares of the pool (issues 20 and 60): one token cannot keep
//! another from its share, and a token alone uses the whole pool. With two
//! tokens and a pool of two, each token is guaranteed one connection; past
//! it a token borrows a free connection nobody else waits for, and gives it
//! back when the other token, within its share, finds none free (the
//! borrowed query is interrupted before its answer began and waits in its
//! own token's queue again). The controls: under contention each token is
//! held to its share (429 `token-concurrency`), and a token allowed the
//! whole pool (`DUCKGATE_MAX_QUERIES_PER_TOKEN=2`) holds both connections
//! and bob gets 503.

use std::time::Duration;

use crate::common::{eventually, App, Endpoint, Gateway};
use serde_json::{json, Value};

const ALICE: &str = "alice-share-token-000001";
const BOB: &str = "bob-share-token-00000002";
const ADMIN: &str = "admin-share-token-000003";
/// Runs until its time limit.
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

async fn gateway(per_token: Option<u32>) -> App {
    let mut b = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_POOL_SPARES", 0)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", 1500);
    if let Some(n) = per_token {
        b = b.env("DUCKGATE_MAX_QUERIES_PER_TOKEN", n);
    }
    b.spawn_app().await
}

/// POST /query `sql` as `token` with a time limit: status and body.
pub(super) async fn call(g: &Endpoint, token: &str, sql: &str, timeout_ms: u64) -> (u16, Value) {
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(token)
        .json(&json!({"sql": sql, "timeout_ms": timeout_ms}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// Starts one long query of `token`'s (ending at its `timeout_ms`) and
/// waits until `running` connections are in use.
pub(super) async fn runs_long(
    g: &App,
    token: &'static str,
    timeout_ms: u64,
    running: u64,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let h = {
        let e = Endpoint {
            base: g.base.clone(),
            client: g.client.clone(),
        };
        tokio::spawn(async move { call(&e, token, LONG, timeout_ms).await })
    };
    eventually(
        "the long query holding a connection",
        Duration::from_secs(20),
        || async {
            let h = g.health().await;
            if h["pool"]["in_use"].as_u64() == Some(running) {
                Ok(())
            } else {
                Err(h["pool"].clone())
            }
        },
    )
    .await;
    h
}

/// Starts one long query of alice's and waits until it holds a connection.
async fn alice_runs(g: &App, running: u64) -> tokio::task::JoinHandle<(u16, Value)> {
    runs_long(g, ALICE, 8_000, running).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_token_cannot_take_the_whole_pool() {
    let g = gateway(None).await;
    // Alice alone borrows the second connection: both are hers.
    let first = alice_runs(&g, 1).await;
    let second = alice_runs(&g, 2).await;
    // Bob, within his share, takes the borrowed one back at once.
    let (status, body) = call(&g, BOB, "SELECT 42 AS x", 30_000).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"], json!([[42]]));
    // Her borrowed query went back to her own queue: it waits there for
    // her share (429) or borrows again once bob's is done (its own time
    // limit then ends it); never an error of the gateway's.
    let (status, body) = second.await.unwrap();
    assert!(status == 429 || status == 504, "{status} {body}");
    if status == 429 {
        assert_eq!(body["type"], "urn:duckgate:problem:token-concurrency");
    }
    assert_eq!(first.await.unwrap().0, 504);
    // Her share comes back with her connection.
    let (status, body) = call(&g, ALICE, "SELECT 1", 30_000).await;
    assert_eq!(status, 200, "{body}");
}

/// Issue 60: eight dashboard tiles of one token on a pool of two run two at
/// a time when no other token works; with bob holding his share, alice is
/// held to hers (her second query waits in her own queue, then 429).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_alone_uses_the_whole_pool_and_its_share_under_contention() {
    let g = gateway(None).await;
    let tiles: Vec<_> = (0..8)
        .map(|_| {
            let e = Endpoint {
                base: g.base.clone(),
                client: g.client.clone(),
            };
            tokio::spawn(async move { call(&e, ALICE, LONG, 4_000).await })
        })
        .collect();
    eventually(
        "two of alice's tiles running at once",
        Duration::from_secs(20),
        || async {
            let h = g.health().await;
            if h["pool"]["in_use"].as_u64() == Some(2) {
                Ok(())
            } else {
                Err(h["pool"].clone())
            }
        },
    )
    .await;
    for t in tiles {
        let (status, body) = t.await.unwrap();
        assert!(status == 504 || status == 429, "{status} {body}");
    }
    // Every tile's connection back (a lease goes after its answer).
    eventually("the pool idle", Duration::from_secs(20), || async {
        let h = g.health().await;
        if h["pool"]["in_use"].as_u64() == Some(0) {
            Ok(())
        } else {
            Err(h["pool"].clone())
        }
    })
    .await;
    // Control: bob holds his share; alice gets hers and no more.
    let bob = runs_long(&g, BOB, 8_000, 1).await;
    let alice = alice_runs(&g, 2).await;
    let (status, body) = call(&g, ALICE, "SELECT 1", 30_000).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["type"], "urn:duckgate:problem:token-concurrency");
    assert_eq!(alice.await.unwrap().0, 504);
    assert_eq!(bob.await.unwrap().0, 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_a_token_allowed_the_whole_pool_starves_the_others() {
    let g = gateway(Some(2)).await;
    let first = alice_runs(&g, 1).await;
    let second = alice_runs(&g, 2).await;
    let (status, body) = call(&g, BOB, "SELECT 42 AS x", 30_000).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["type"], "urn:duckgate:problem:pool-exhausted");
    assert_eq!(first.await.unwrap().0, 504);
    assert_eq!(second.await.unwrap().0, 504);
}

/// Whose work pinned the spares (issue 20): a query DuckDB cannot interrupt
/// inside one call (levenshtein of two 60,000-character strings, ~15 s of
/// one core) outlives its 500 ms limit; after the stuck grace its connection
/// is replaced by the one spare, and health says degraded, with the number
/// of tokens that hold it, while the other token is still served. The
/// probes answer anyone, so they name no token; `GET /admin/pool` (admin
/// token only) does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_names_the_token_whose_stuck_query_pinned_the_spares() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_POOL_SPARES", 1)
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .start();
    let h = g.health().await;
    assert_eq!(h["pool"]["stuck_tokens"], 0, "{h}");
    let (status, v) = call(
        &g,
        ALICE,
        "SELECT levenshtein(repeat('a', 60000), repeat('b', 60000)) AS d",
        500,
    )
    .await;
    assert_eq!(status, 504, "{v}");
    let h = g
        .health_until(
            "alice's connection stuck and replaced",
            |h| h["pool"]["stuck"] == 1,
            Duration::from_secs(10),
        )
        .await;
    assert_eq!(h["pool"]["stuck_tokens"], 1, "{h}");
    assert_eq!(h["status"], "degraded", "{h}");
    let reasons = h["reasons"].to_string();
    assert!(
        reasons.contains("spare") && reasons.contains("held by the queries of 1 token"),
        "{h}"
    );
    // Neither probe names a client, whoever asks.
    for probe in ["/healthz", "/readyz"] {
        let body = g.get_text(probe).await;
        assert!(!body.contains("alice"), "{probe} names a token: {body}");
    }
    // The admin sees whose work it is; a query token may not look.
    let (status, pool) = g.get("/admin/pool", ADMIN).await;
    assert_eq!(status, 200, "{pool}");
    assert_eq!(pool["stuck_by_token"], json!({"alice": 1}), "{pool}");
    assert_eq!(pool["stuck"], 1, "{pool}");
    let (status, _) = g.get("/admin/pool", ALICE).await;
    assert_eq!(status, 401);
    // Capacity is whole: bob is served meanwhile.
    let (status, v) = call(&g, BOB, "SELECT 42 AS x", 5_000).await;
    assert_eq!(status, 200, "{v}");
}
