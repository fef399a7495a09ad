//! /metrics exposes what an operator alerts on, read without the pool; each
//! gateway counts its own work, even beside others in one process.

mod common;

use std::time::Duration;

use common::{eventually, Gateway};
use serde_json::json;

#[tokio::test]
async fn prometheus_text_has_the_operational_series() {
    let g = Gateway::builder().spawn_app().await;
    g.query_ok("SELECT 1").await;
    let _ = g.query(json!({"sql": "SELEC 1"})).await;
    let _ = g.query(json!({"sql": "CREATE TABLE t (a INT)"})).await;
    // Outcomes are counted as the worker finishes, a moment after the
    // answer: wait until the pool has drained.
    g.health_until(
        "drained pool",
        |h| h["pool"]["in_use"] == 0,
        Duration::from_secs(5),
    )
    .await;
    let r = g.client.get(g.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain"));
    let m = r.text().await.unwrap();
    for series in [
        "duckgate_http_requests_total{",
        "duckgate_http_request_duration_seconds_bucket{",
        "duckgate_queries_total{outcome=\"ok\"}",
        "duckgate_queries_total{outcome=\"sql_error\"}",
        "duckgate_queries_total{outcome=\"refused\"}",
        "duckgate_query_duration_seconds_bucket{",
        "duckgate_pool_size ",
        "duckgate_pool_in_use ",
        "duckgate_pool_waiting ",
    ] {
        assert!(m.contains(series), "missing {series} in:\n{m}");
    }
    assert!(m.contains("route=\"/query\"") && m.contains("status=\"200\""));
}

/// The series value of `line_start` (e.g. `name{labels}`) in a scrape.
fn value_of(scrape: &str, line_start: &str) -> Option<f64> {
    scrape
        .lines()
        .find_map(|l| l.strip_prefix(line_start)?.trim().parse().ok())
}

#[tokio::test]
async fn gateways_in_one_process_count_only_their_own_queries() {
    let a = Gateway::builder().spawn_app().await;
    let b = Gateway::builder().spawn_app().await;
    for i in 0..3 {
        a.query_ok(&format!("SELECT {i}")).await;
    }
    b.query_ok("SELECT 1").await;
    let ok = "duckgate_queries_total{outcome=\"ok\"}";
    // Outcomes are counted as the worker finishes, a moment after the answer.
    eventually("own counts (a 3, b 1)", Duration::from_secs(5), || async {
        let (ma, mb) = (a.get_text("/metrics").await, b.get_text("/metrics").await);
        match (value_of(&ma, ok), value_of(&mb, ok)) {
            (Some(3.0), Some(1.0)) => Ok(()),
            seen => Err(format!("{seen:?}")),
        }
    })
    .await;
}
