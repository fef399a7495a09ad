//! /metrics exposes what an operator alerts on, read without the pool; each
//! gateway counts its own work, even beside others in one process.

use std::time::Duration;

use crate::common::{eventually, Gateway};
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

/// Every series name the gateway's source records (`metrics::counter!`,
/// `gauge!`, `histogram!`).
fn recorded_series() -> Vec<String> {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                for kind in ["counter!(", "gauge!(", "histogram!("] {
                    for (i, _) in text.match_indices(kind) {
                        let rest = text[i + kind.len()..].trim_start();
                        if let Some(name) = rest.strip_prefix('"').and_then(|r| r.split('"').next())
                        {
                            out.push(name.to_string());
                        }
                    }
                }
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut out,
    );
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn a_fresh_gateway_shows_every_series_at_zero() {
    let g = Gateway::builder().spawn_app().await;
    // Nothing but the harness's readiness polls has happened.
    let m = g.get_text("/metrics").await;
    let series = recorded_series();
    assert!(series.len() >= 15, "{series:?}");
    for name in &series {
        // One series per S3 secret, and per dependency (shared state,
        // spool, lake), the S3 spool's, the OIDC issuer's, and per declared
        // role: this gateway has none.
        if name.starts_with("duckgate_credentials_")
            || name == "duckgate_rotations_total"
            || name.starts_with("duckgate_dependency_")
            || name.starts_with("duckgate_spool_s3_")
            || name == "duckgate_spool_orphans_removed_total"
            || name.starts_with("duckgate_oidc_")
            || name == "duckgate_grant_decisions_total"
            || name == "duckgate_role_share_timeouts_total"
            // The Flight SQL listener's calls and the PostgreSQL door's
            // connections: both off in this gateway.
            || name.starts_with("duckgate_flight_")
            || name.starts_with("duckgate_pg_")
        {
            continue;
        }
        assert!(
            m.lines().any(|l| l.starts_with(name.as_str())),
            "{name} missing from a fresh scrape:\n{m}"
        );
    }
    for (series, value) in [
        ("duckgate_pool_acquire_timeouts_total", 0.0),
        ("duckgate_query_cancellations_total", 0.0),
        ("duckgate_pool_connections_replaced_total", 0.0),
        ("duckgate_spill_cap_interrupts_total", 0.0),
        ("duckgate_duckdb_memory_refusals_total", 0.0),
        ("duckgate_spool_bytes", 0.0),
        ("duckgate_queries_running", 0.0),
        (
            "duckgate_auth_failures_total{route=\"query\",reason=\"missing\"}",
            0.0,
        ),
        (
            "duckgate_auth_failures_total{route=\"admin\",reason=\"wrong\"}",
            0.0,
        ),
        ("duckgate_queries_total{outcome=\"timeout\"}", 0.0),
        ("duckgate_statements_total{outcome=\"ok\"}", 0.0),
        ("duckgate_statements{state=\"running\"}", 0.0),
        ("duckgate_query_duration_seconds_count{outcome=\"ok\"}", 0.0),
        ("duckgate_rotation_duration_seconds_count", 0.0),
    ] {
        assert_eq!(
            value_of(&m, &format!("{series} ")),
            Some(value),
            "{series} in:\n{m}"
        );
    }
}

/// Issue 37's on-call kit: every series has HELP (there were none), the
/// build and the process are described (`duckgate_build_info`,
/// `process_*`), and every route leaves one access line naming the replica,
/// the identity (never its token), the client's address, the status, the
/// latency as a number and the body bytes sent (and whether the body was
/// cut short).
#[tokio::test]
async fn every_series_has_help_and_every_route_an_access_line() {
    const TOKEN: &str = "alice-token-0123456789";
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{TOKEN}"))
        .env("DUCKGATE_LOG_FORMAT", "json")
        .start();
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(TOKEN)
        .json(&json!({"sql": "SELECT 1", "wait_ms": 5000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let statement_bytes = r.bytes().await.unwrap().len() as u64;
    // A streamed answer the client stops reading after its first chunk.
    let mut r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(TOKEN)
        .json(&json!({"sql": "SELECT * FROM range(100000000)", "format": "ndjson"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.chunk().await.unwrap().is_some());
    drop(r);
    let (status, _) = g.get("/statements/nope", TOKEN).await;
    assert_eq!(status, 404);
    let (status, _) = g.get("/statements", "wrong-token-0123456789").await;
    assert_eq!(status, 401);
    let m = g.get_text("/metrics").await;
    let typed: Vec<&str> = m
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(typed.len() > 30, "{m:.2000}");
    for name in &typed {
        assert!(m.contains(&format!("# HELP {name} ")), "no HELP for {name}");
    }
    for series in [
        "duckgate_build_info{",
        "process_cpu_seconds_total ",
        "process_resident_memory_bytes ",
        "process_open_fds ",
    ] {
        assert!(m.contains(series), "missing {series}");
    }
    let health = g.health().await;
    let replica = health["replica"].as_str().unwrap().to_string();
    let log = eventually("the access lines", Duration::from_secs(5), || async {
        let log = g.log_text();
        let lines: Vec<serde_json::Value> = log
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .filter(|v: &serde_json::Value| v["message"] == "access")
            .collect();
        if lines.len() >= 5 && lines.iter().any(|v| v["span"]["route"] == "/query") {
            Ok(lines)
        } else {
            Err(log)
        }
    })
    .await;
    let line_of = |route: &str, status: u64| {
        log.iter()
            .find(|v| v["span"]["route"] == route && v["status"] == status)
            .unwrap_or_else(|| panic!("no access line for {route} {status}: {log:?}"))
    };
    for (route, status, identity) in [
        ("/statements", 200, Some("alice")),
        ("/statements/{id}", 404, Some("alice")),
        ("/statements", 401, None),
    ] {
        let v = line_of(route, status);
        assert_eq!(v["span"]["replica"], replica.as_str(), "{v}");
        assert_eq!(v["span"]["identity"].as_str(), identity, "{v}");
        assert!(v["latency_ms"].as_f64().is_some(), "{v}");
        // The client's address (the test's own loopback socket) and the
        // body bytes sent, whole.
        assert!(
            v["span"]["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("127.0.0.1:")),
            "{v}"
        );
        assert!(v["bytes"].as_u64().is_some_and(|b| b > 0), "{v}");
        assert!(v.get("aborted").is_none(), "{v}");
    }
    assert_eq!(line_of("/statements", 200)["bytes"], statement_bytes);
    // The answer cut short says so, with what was sent before the cut.
    let cut = line_of("/query", 200);
    assert_eq!(cut["aborted"], true, "{cut}");
    assert!(cut["bytes"].as_u64().is_some_and(|b| b > 0), "{cut}");
    let text = g.log_text();
    assert!(!text.contains(TOKEN) && !text.contains("wrong-token"));
}

/// `duckgate_http_client_timeouts_total{route}` (issue 57): the 504
/// `query-timeout` answers at the very time limit the client asked for
/// (`timeout_ms`, in the body or the URL) are counted by route, from 0 at
/// start-up, and kept out of `DuckgateServerErrors` by it; a 504 at the
/// gateway's default limit, or at the gateway's largest one below what the
/// client asked, is the gateway's and is not counted.
#[tokio::test]
async fn timeouts_the_client_chose_are_counted_apart_from_the_gateways() {
    let g = Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", "alice:alice-token-0123456789")
        .env("DUCKGATE_QUERY_TIMEOUT_MS", 300)
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 600)
        .start();
    let series = |route: &str| format!("duckgate_http_client_timeouts_total{{route=\"{route}\"}}");
    let m = g.get_text("/metrics").await;
    for route in ["/query", "/query/{format}", "/statements"] {
        assert_eq!(
            value_of(&m, &format!("{} ", series(route))),
            Some(0.0),
            "{m}"
        );
    }
    let slow = crate::common::sleeping_sql(Duration::from_secs(5));
    let post = |path: &'static str, body: serde_json::Value| {
        let g = &g;
        async move {
            let r = g
                .client
                .post(g.url(path))
                .bearer_auth("alice-token-0123456789")
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (
                status,
                r.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    };
    // The client's own limits: counted.
    let (status, v) = post("/query", json!({"sql": slow, "timeout_ms": 250})).await;
    assert_eq!(
        (status, v["type"].as_str()),
        (504, Some("urn:duckgate:problem:query-timeout")),
        "{v}"
    );
    let r = g
        .client
        .get(g.url("/query"))
        .query(&[("sql", slow.as_str()), ("timeout_ms", "250")])
        .bearer_auth("alice-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 504);
    let (status, v) = post(
        "/statements",
        json!({"sql": slow, "timeout_ms": 250, "wait_ms": 5000}),
    )
    .await;
    assert_eq!(
        (status, v["type"].as_str()),
        (504, Some("urn:duckgate:problem:query-timeout")),
        "{v}"
    );
    // The gateway's: its default, and its largest below the 4 s asked.
    let (status, v) = post("/query", json!({"sql": slow})).await;
    assert_eq!(status, 504, "{v}");
    let (status, v) = post("/query", json!({"sql": slow, "timeout_ms": 4000})).await;
    assert_eq!(status, 504, "{v}");
    assert!(
        v["detail"].as_str().unwrap_or_default().contains("600 ms"),
        "{v}"
    );

    let m = g.get_text("/metrics").await;
    assert_eq!(
        value_of(&m, &format!("{} ", series("/query"))),
        Some(2.0),
        "{m}"
    );
    assert_eq!(
        value_of(&m, &format!("{} ", series("/statements"))),
        Some(1.0),
        "{m}"
    );
    let timeouts: f64 = m
        .lines()
        .filter(|l| l.starts_with("duckgate_http_requests_total{") && l.contains("status=\"504\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(timeouts, 5.0, "{m}");
    assert!(
        m.contains("# HELP duckgate_http_client_timeouts_total "),
        "{m}"
    );
}
