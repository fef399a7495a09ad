//! A slow or stalled S3 never takes the connections local work needs
//! (issue 21, item 2): queries that read S3 (by DuckDB's parse: an `s3://`
//! path or a lake's table) hold at most their share of the pool
//! (`DUCKGATE_MAX_S3_QUERIES`, default all but one), and `/readyz` says not
//! ready when every connection is busy and queries are refused.

use std::time::{Duration, Instant};

use crate::common::{eventually, S3Server, BUSY_MARGIN};
use serde_json::json;

const S3_SQL: &str = "SELECT count(*) AS n FROM read_csv('s3://duckgate-test/data/small.csv')";

/// While S3 answers after 20 s, three S3 queries are sent, then ten local
/// `select 42`, one after another: how many of those were served, the
/// statuses of the S3 queries that were refused, and `/readyz`'s status.
async fn local_while_s3_stalls(max_s3: Option<u32>) -> (usize, Vec<u16>, u16) {
    let s3 = S3Server::start(&[]);
    let acquire = Duration::from_millis(1500);
    let mut b = s3
        .app(3600)
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", acquire.as_millis())
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 120_000);

    if let Some(n) = max_s3 {
        b = b.env("DUCKGATE_MAX_S3_QUERIES", n);
    }
    let g = b.start();
    assert_eq!(g.query_ok(S3_SQL).await["rows"], json!([[3]]));
    let share = g.health().await["pool"]["s3_share"].as_u64().unwrap();
    assert_eq!(share, max_s3.map_or(1, u64::from));

    s3.control("POST", "s3?delay_ms=20000").await;
    let stalled: Vec<_> = (0..3)
        .map(|_| {
            let (c, url) = (g.client.clone(), g.url("/query"));
            tokio::spawn(async move {
                c.post(url)
                    .json(&json!({"sql": S3_SQL, "timeout_ms": 60_000}))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .unwrap_or(0)
            })
        })
        .collect();
    g.health_until(
        "S3 queries hold their share",
        |h| h["pool"]["s3_in_use"] == share,
        BUSY_MARGIN,
    )
    .await;
    // Those beyond the share wait the acquire timeout for it, then 503
    // (the others wait for S3's 20 s, longer than this wait).
    let beyond = 3 - share as usize;
    eventually(
        "the S3 queries beyond the share answered",
        acquire + BUSY_MARGIN,
        || async {
            match stalled.iter().filter(|t| t.is_finished()).count() {
                n if n >= beyond => Ok(()),
                n => Err(format!("{n} of {beyond}")),
            }
        },
    )
    .await;
    let mut refused = Vec::new();
    let mut stuck = Vec::new();
    for t in stalled {
        if t.is_finished() {
            refused.push(t.await.unwrap());
        } else {
            stuck.push(t);
        }
    }
    let mut served = 0;
    let started = Instant::now();
    for _ in 0..10 {
        let r = g
            .client
            .post(g.url("/query"))
            .json(&json!({"sql": "select 42"}))
            .send()
            .await
            .unwrap();
        if r.status() == 200 {
            served += 1;
        } else {
            assert_eq!(r.status(), 503);
            let p: serde_json::Value = r.json().await.unwrap();
            assert_eq!(p["type"], "urn:duckgate:problem:pool-exhausted", "{p}");
        }
    }
    eprintln!(
        "share {share}: {served}/10 local queries served in {:?} while S3 stalls",
        started.elapsed()
    );
    let ready = g
        .client
        .get(g.url("/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    s3.control("POST", "s3?delay_ms=0").await;
    for t in stuck {
        t.abort();
    }
    (served, refused, ready)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn stalled_s3_queries_keep_to_their_share_and_local_queries_run() {
    let (served, refused, ready) = local_while_s3_stalls(None).await;
    assert_eq!(served, 10, "local queries refused while S3 stalls");
    // Two of the three S3 queries found the share taken: refused.
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.iter().all(|&s| s == 503), "{refused:?}");
    // One connection is free: ready, truthfully.
    assert_eq!(ready, 200);
}

/// Control: with the share set to the whole pool, stalled S3 queries take
/// every connection, local queries are refused, and `/readyz` says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier venv: needs the test venv (Python DuckDB, the S3/STS emulation, extensions); scripts/test installs it"]
async fn control_with_the_whole_pool_for_s3_local_queries_are_refused() {
    let (served, _, ready) = local_while_s3_stalls(Some(2)).await;
    assert!(served <= 2, "{served}/10 local queries served");
    assert_eq!(
        ready, 503,
        "/readyz said ready with every connection stalled"
    );
}
