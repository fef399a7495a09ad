//! A role's shared quotas (issue 39): `[role.limits] queries_at_once` caps
//! the statements all of a role's members run at once, and `spool_bytes`
//! the bytes their spooled results take together. Alice and bob hold the
//! role `team`; carol holds `other`, which caps nothing. Each test has its
//! control: with a cap that allows it, the same request is served.

use super::token_share::{call, runs_long};
use crate::common::{self, App, Gateway};
use serde_json::{json, Value};

const ALICE: &str = "alice-role-quota-token-01";
const BOB: &str = "bob-role-quota-token-0002";
const CAROL: &str = "carol-role-quota-token-03";

/// A gateway of three tokens, a pool of three, and no per-token share
/// below the pool: only the role's cap can turn bob away.
async fn gateway(team_limits: &str) -> (App, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("roles.toml");
    std::fs::write(
        &config,
        format!(
            "[[role]]\nname = \"team\"\nmembers = [\"alice\", \"bob\"]\n\
             [role.limits]\n{team_limits}\n\n\
             [[role]]\nname = \"other\"\nmembers = [\"carol\"]\n"
        ),
    )
    .unwrap();
    let g = Gateway::builder()
        .env("DUCKGATE_CONFIG", config.display())
        .env(
            "DUCKGATE_QUERY_TOKENS",
            format!("alice:{ALICE},bob:{BOB},carol:{CAROL}"),
        )
        .env("DUCKGATE_POOL_SIZE", 3)
        .env("DUCKGATE_POOL_SPARES", 0)
        .env("DUCKGATE_MAX_QUERIES_PER_TOKEN", 3)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", 1500)
        .spawn_app()
        .await;
    (g, dir)
}

/// Starts one long query of alice's and waits until it holds a connection.
async fn alice_runs(g: &App) -> tokio::task::JoinHandle<(u16, Value)> {
    runs_long(g, ALICE, 6_000, 1).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_members_share_its_queries_at_once() {
    let (g, _dir) = gateway("queries_at_once = 1").await;
    let first = alice_runs(&g).await;
    // Bob's query waits for the role's place, which alice holds, though
    // two connections are free and his own share is untouched.
    let (status, body) = call(&g, BOB, "SELECT 1", 30_000).await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["type"], "urn:duckgate:problem:role-concurrency");
    let detail = body["detail"].as_str().unwrap();
    assert!(
        detail.contains("'team'") && detail.contains("queries_at_once"),
        "{body}"
    );
    // Carol's role caps nothing: she is served meanwhile.
    let (status, body) = call(&g, CAROL, "SELECT 42 AS x", 30_000).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["rows"], json!([[42]]));
    let scrape = g.get_text("/metrics").await;
    assert_eq!(
        common::metric(&scrape, "duckgate_role_share_timeouts_total{role=\"team\"}"),
        1.0
    );
    // The place comes back when alice's query ends.
    let (status, _) = first.await.unwrap();
    assert_eq!(status, 504);
    let (status, body) = call(&g, BOB, "SELECT 1 AS x", 30_000).await;
    assert_eq!(status, 200, "{body}");

    // Control: with two places, bob runs beside alice.
    let (g, _dir) = gateway("queries_at_once = 2").await;
    let first = alice_runs(&g).await;
    let (status, body) = call(&g, BOB, "SELECT 1 AS x", 30_000).await;
    assert_eq!(status, 200, "{body}");
    first.abort();
}

/// POST /statements: status and body.
async fn submit(g: &App, token: &str, id: &str, rows: u64) -> (u16, Value) {
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(token)
        .header("duckgate-query-id", id)
        .json(&json!({"sql": format!("SELECT range FROM range({rows})"), "wait_ms": 30_000}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null);
    // The rows are not the point: a failure shows the rest.
    let body = match body {
        Value::Object(mut o) => {
            o.remove("rows");
            Value::Object(o)
        }
        other => other,
    };
    (status, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_roles_members_share_its_spool_bytes() {
    // 40,000 BIGINTs spool to about 320 kB: one fits in 500 kB, two do not.
    let (g, _dir) = gateway("spool_bytes = 500000").await;
    let (status, body) = submit(&g, ALICE, "a", 40_000).await;
    assert_eq!(status, 200, "{body}");
    // Bob's result would pass what the role's members hold together.
    let (status, body) = submit(&g, BOB, "b", 40_000).await;
    assert_eq!(status, 507, "{body}");
    assert_eq!(body["type"], "urn:duckgate:problem:spool-quota-exceeded");
    assert!(
        body["detail"].as_str().unwrap().contains("spool_bytes"),
        "{body}"
    );
    // Carol's role caps nothing.
    let (status, body) = submit(&g, CAROL, "c", 40_000).await;
    assert_eq!(status, 200, "{body}");
    // When alice lets hers go, bob has the room.
    assert_eq!(g.delete("/statements/a", ALICE).await.0, 200);
    let (status, body) = submit(&g, BOB, "b2", 40_000).await;
    assert_eq!(status, 200, "{body}");

    // Control: a cap that holds both.
    let (g, _dir) = gateway("spool_bytes = 2000000").await;
    for (token, id) in [(ALICE, "a"), (BOB, "b")] {
        let (status, body) = submit(&g, token, id, 40_000).await;
        assert_eq!(status, 200, "{id}: {body}");
    }
}
