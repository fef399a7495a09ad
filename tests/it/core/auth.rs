//! Tokens: query tokens open /query, the admin token opens /admin, neither
//! opens the other; missing and wrong tokens are 401 and never logged; the
//! admin API is off without a token (in this process); anonymous serving is
//! refused off loopback (a process: it is a start-up refusal).

use crate::common;

use crate::common::{Endpoint, Gateway};
use serde_json::{json, Value};

const ADMIN: &str = "admin-token-0123456789";

async fn post_query(g: &Endpoint, token: Option<&str>) -> reqwest::Response {
    let mut req = g
        .client
        .post(g.url("/query"))
        .json(&json!({"sql": "SELECT 1 AS x"}));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    req.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn query_tokens_gate_queries() {
    let dir = tempfile::tempdir().unwrap();
    let file = common::write_file(dir.path(), "tokens", "# one per line\nfile-token-1\n\n");
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "tok-a,tok-b")
        .env("DUCKGATE_QUERY_TOKENS_FILE", file.display())
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let r = post_query(&g, None).await;
    assert_eq!(r.status(), 401);
    assert_eq!(r.headers()["www-authenticate"], "Bearer");
    assert_eq!(r.headers()["content-type"], "application/problem+json");
    assert_eq!(post_query(&g, Some("tok-c")).await.status(), 401);
    assert_eq!(post_query(&g, Some("tok-")).await.status(), 401);
    assert_eq!(
        post_query(&g, Some(ADMIN)).await.status(),
        401,
        "the admin token is not a query token"
    );
    assert_eq!(post_query(&g, Some("tok-b")).await.status(), 200);
    assert_eq!(post_query(&g, Some("file-token-1")).await.status(), 200);

    // Probes need no token.
    assert_eq!(
        g.client
            .get(g.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );

    // A query token never opens the admin API.
    let r = g
        .client
        .get(g.url("/admin/secrets"))
        .bearer_auth("tok-a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .client
        .post(g.url("/admin/secrets/rotate"))
        .bearer_auth("tok-a")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);

    let m = g.get_text("/metrics").await;
    let failures: f64 = m
        .lines()
        .filter(|l| l.starts_with("duckgate_auth_failures_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(
        failures >= 6.0,
        "failed authentications are counted: {failures}\n{m}"
    );
    let log = g.log_text();
    assert!(log.contains("authentication failed"));
    for secret in ["tok-a", "tok-b", "tok-c", "file-token-1", ADMIN] {
        assert!(!log.contains(secret), "token {secret} reached the log");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_api_needs_its_token_and_is_off_without_one() {
    let off = Gateway::builder().spawn_app().await;
    let r = off
        .client
        .get(off.url("/admin/secrets"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    let p: Value = r.json().await.unwrap();
    assert!(p["detail"]
        .as_str()
        .unwrap()
        .contains("DUCKGATE_ADMIN_TOKEN"));

    let g = Gateway::builder()
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .spawn_app()
        .await;
    let r = g.client.get(g.url("/admin/secrets")).send().await.unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .client
        .get(g.url("/admin/secrets"))
        .bearer_auth("wrong-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let r = g
        .client
        .get(g.url("/admin/secrets"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["secrets"], json!([]));
    let r = g
        .client
        .post(g.url("/admin/secrets/rotate?name=nope"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // With no query tokens on loopback, anonymous queries are allowed.
    assert_eq!(post_query(&g, None).await.status(), 200);
}

#[tokio::test]
async fn anonymous_off_loopback_needs_allow_anonymous() {
    let err = match Gateway::builder()
        .env("DUCKGATE_LISTEN", "0.0.0.0:0")
        .try_start()
    {
        Ok(_) => panic!("must refuse"),
        Err(e) => e,
    };
    assert_eq!(err.0, Some(2));
    assert!(err.1.join("\n").contains("--allow-anonymous"));
    let err = match Gateway::builder()
        .env("DUCKGATE_ADMIN_TOKEN", "short")
        .try_start()
    {
        Ok(_) => panic!("must refuse a short admin token"),
        Err(e) => e,
    };
    assert!(err.1.join("\n").contains("DUCKGATE_ADMIN_TOKEN"));
}
