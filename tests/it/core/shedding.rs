//! Overload is shed at once (issue 21, item 5): with far more clients than
//! the pool serves, a request whose expected wait for a connection is
//! beyond the acquire timeout is refused now (503 `pool-exhausted` with
//! Retry-After), not after waiting the whole timeout, and the pool's
//! throughput goes to requests that are served.
//!
//! `SHEDDING_CLIENTS` (default 400) and `SHEDDING_WINDOW_S` (default 8)
//! size the burst, for ad-hoc runs at other sizes (BENCHMARKS.md).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::{percentile_ms, sleeping_sql, Gateway};
use serde_json::json;
use tokio::sync::Mutex;

/// How long each query holds its connection.
const HOLD: Duration = Duration::from_millis(40);
/// The pool's acquire timeout in these tests.
const ACQUIRE_TIMEOUT_MS: u64 = 3_000;
/// How long a refused client waits before it asks again.
const BACKOFF: Duration = Duration::from_millis(250);

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// What the clients saw within the window.
#[derive(Default)]
struct Seen {
    /// Answers of 200 that ended within the window.
    served: u64,
    /// How long each 503 took.
    refusals: Vec<Duration>,
    /// 503s that were `pool-exhausted` (the rest are `overloaded`, from the
    /// route's concurrency limit).
    pool_exhausted: u64,
    /// Retry-After of every `pool-exhausted` answer.
    retry_after_missing: u64,
    /// Any other status (0: no answer).
    other: Vec<u16>,
}

/// `clients` clients, each asking again as soon as it has an answer (after
/// `BACKOFF` when refused, or with `SHEDDING_HONOUR_RETRY_AFTER=1` after
/// the refusal's Retry-After, as a well-behaved client library would),
/// until `window` has passed.
async fn load(g: &Gateway, clients: usize, window: Duration) -> Seen {
    let honour = env_or("SHEDDING_HONOUR_RETRY_AFTER", 0) == 1;
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .pool_max_idle_per_host(clients)
        .build()
        .unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let start = Instant::now();
    let end = start + window;
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (client, url, seen) = (client.clone(), g.url("/query"), seen.clone());
            tokio::spawn(async move {
                let body = json!({ "sql": sleeping_sql(HOLD) });
                while Instant::now() < end {
                    let asked = Instant::now();
                    let r = client.post(&url).json(&body).send().await;
                    let (status, retry_after, text) = match r {
                        Ok(r) => {
                            let status = r.status().as_u16();
                            let retry_after = r
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
                            (status, retry_after, r.text().await.unwrap_or_default())
                        }
                        Err(_) => (0, None, String::new()),
                    };
                    let took = asked.elapsed();
                    let mut s = seen.lock().await;
                    match status {
                        200 if Instant::now() <= end => s.served += 1,
                        200 => {}
                        503 => {
                            s.refusals.push(took);
                            if text.contains("pool-exhausted") {
                                s.pool_exhausted += 1;
                                if retry_after.is_none() {
                                    s.retry_after_missing += 1;
                                }
                            }
                        }
                        other => s.other.push(other),
                    }
                    drop(s);
                    if status == 503 {
                        match retry_after {
                            Some(secs) if honour => {
                                tokio::time::sleep(Duration::from_secs(secs)).await
                            }
                            // The clients' own pace, on purpose.
                            _ => tokio::time::sleep(BACKOFF).await,
                        }
                    }
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    Arc::try_unwrap(seen).ok().unwrap().into_inner()
}

fn gateway(shed_early: bool) -> Gateway {
    Gateway::builder()
        .env("DUCKGATE_POOL_SIZE", 2)
        .env("DUCKGATE_ACQUIRE_TIMEOUT_MS", ACQUIRE_TIMEOUT_MS)
        .env("DUCKGATE_SHED_EARLY", shed_early)
        .start()
}

/// Served answers a second with as many clients as connections: what the
/// pool can do unloaded.
async fn capacity(g: &Gateway) -> f64 {
    let window = Duration::from_secs(3);
    let seen = load(g, 2, window).await;
    assert!(seen.refusals.is_empty() && seen.other.is_empty());
    seen.served as f64 / window.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overload_is_refused_at_once_and_the_pool_keeps_serving() {
    let clients = env_or("SHEDDING_CLIENTS", 400) as usize;
    let window = Duration::from_secs(env_or("SHEDDING_WINDOW_S", 8));
    let g = gateway(true);
    let unloaded = capacity(&g).await;

    let mut seen = load(&g, clients, window).await;
    let burst = seen.served as f64 / window.as_secs_f64();
    let refused = seen.refusals.len();
    let p50 = percentile_ms(&mut seen.refusals, 0.5);
    let p95 = percentile_ms(&mut seen.refusals, 0.95);
    eprintln!(
        "{clients} clients for {window:?}: {burst:.1} served/s against {unloaded:.1}/s unloaded \
         ({:.0}%); {refused} refused ({} pool-exhausted), p50 {p50:.0} ms, p95 {p95:.0} ms; \
         other statuses: {:?}",
        100.0 * burst / unloaded,
        seen.pool_exhausted,
        seen.other
    );
    assert!(
        seen.other.is_empty(),
        "statuses other than 200/503: {:?}",
        seen.other
    );
    // Far more clients than the pool serves within the acquire timeout.
    assert!(seen.pool_exhausted > 0, "nothing was shed");
    assert_eq!(seen.retry_after_missing, 0, "a refusal without Retry-After");
    // Refused at once, not after the acquire timeout (generous: 2 busy cores
    // serve hundreds of clients from this process too).
    assert!(
        p95 < ACQUIRE_TIMEOUT_MS as f64 / 2.0,
        "p95 refusal {p95:.0} ms: refusals waited for the acquire timeout"
    );
    assert!(
        burst >= 0.5 * unloaded,
        "{burst:.1} served/s under load against {unloaded:.1}/s unloaded"
    );
    let h = g.health().await;
    assert!(h["pool"]["shed"].as_u64().unwrap() > 0, "{h}");
    let metrics = g.get_text("/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("duckgate_pool_shed_total ") && !l.ends_with(" 0")),
        "duckgate_pool_shed_total not counted"
    );
}

/// Control: without early shedding the same burst's refusals each wait the
/// whole acquire timeout, so the bound above can be broken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_without_early_shedding_refusals_wait_the_acquire_timeout() {
    let g = gateway(false);
    capacity(&g).await;
    let mut seen = load(&g, 400, Duration::from_secs(8)).await;
    assert!(seen.pool_exhausted > 0, "nothing was refused");
    let p50 = percentile_ms(&mut seen.refusals, 0.5);
    assert!(
        p50 >= ACQUIRE_TIMEOUT_MS as f64 * 0.9,
        "p50 refusal {p50:.0} ms without early shedding"
    );
    assert_eq!(g.health().await["pool"]["shed"], 0);
}
