//! Liveness that nothing but progress makes (issue 57). A replica is taken
//! for dead when its heartbeat, a row in PostgreSQL, stops moving, never
//! for a session's existence: a PostgreSQL 1.5 s away behind a middlebox
//! that cuts idle connections at 5 s makes no live replica's statement
//! `statement-lost` (7 of 74 were, when liveness rested on one idle
//! session and on heartbeats through pooled sessions the middlebox cut),
//! and a frozen replica (SIGSTOP: its sessions stay open, its lock stayed
//! held, its statement answered `running` 76 s past its limit) is taken
//! for dead within the staleness. A killed replica's statements still
//! answer 410 (the control). Admin calls asked of every replica say in
//! their status what was done where: 504 listing a frozen replica (which
//! never carries the command out later), 207 with this replica's outcome
//! when PostgreSQL is out of reach (it was 503 naming no replica).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::common::{self, eventually, Gateway, Postgres, S3Server};

const ALICE: &str = "alice-token-0123456789";
const ADMIN: &str = "admin-token-0123456789";
const PASSWORD: &str = "liveness-pw-3d9a71";
/// Runs until cancelled or killed.
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

/// A replica reaching the state through `dsn` ([`Postgres::dsn`], or
/// [`Postgres::dsn_via`] a slow link).
fn replica(s3: &S3Server, dsn: String, stale_ms: u64) -> common::GatewayBuilder {
    s3.app(900)
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .env("DUCKGATE_STATE_DSN", dsn)
        .env("DUCKGATE_SPOOL_URL", "s3://duckgate-test/spool/")
        .env("DUCKGATE_REPLICA_STALE_MS", stale_ms)
        .env("DUCKGATE_MAX_STATEMENT_TIMEOUT_MS", 600_000)
        .env("DUCKGATE_POOL_SIZE", 4)
}

/// Starts the replicas off the test's runtime (a start waits on the
/// process, which may take a while through a slow link).
async fn start_all(builders: Vec<common::GatewayBuilder>) -> Vec<Gateway> {
    let handles: Vec<_> = builders
        .into_iter()
        .map(|b| tokio::task::spawn_blocking(move || b.start()))
        .collect();
    let mut out = Vec::new();
    for h in handles {
        out.push(h.await.unwrap());
    }
    out
}

async fn submit(g: &Gateway, id: &str, sql: &str) -> (u16, Value) {
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", id)
        .json(&json!({"sql": sql, "wait_ms": 0}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

fn signal(g: &Gateway, sig: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(g.pid().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig}");
}

/// A TCP link to PostgreSQL as a slow network and a middlebox make it:
/// every byte arrives `delay` late each way (a round trip takes twice
/// that), and a connection with no byte either way for `idle_cut` is cut
/// (both sides closed), as a NAT or firewall idle timeout does. At most
/// 64 connections at once; everything stops when it is dropped.
struct SlowLink {
    port: u16,
    /// Connections cut for idleness.
    cuts: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl SlowLink {
    async fn start(upstream: u16, delay: Duration, idle_cut: Duration) -> SlowLink {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let cuts = Arc::new(AtomicU64::new(0));
        let counted = cuts.clone();
        let task = tokio::spawn(async move {
            let slots = Arc::new(tokio::sync::Semaphore::new(64));
            let mut links = tokio::task::JoinSet::new();
            loop {
                let permit = slots.clone().acquire_owned().await.unwrap();
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                let cuts = counted.clone();
                links.spawn(async move {
                    let _permit = permit;
                    if let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)).await {
                        if link(client, server, delay, idle_cut).await {
                            cuts.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                while links.try_join_next().is_some() {}
            }
        });
        SlowLink { port, cuts, task }
    }
}

impl Drop for SlowLink {
    fn drop(&mut self) {
        // The accept loop's JoinSet goes with it: every link is aborted.
        self.task.abort();
    }
}

/// Carries bytes both ways, each `delay` late, until a side closes or the
/// link is idle for `idle_cut`; true when it was cut for idleness.
async fn link(a: TcpStream, b: TcpStream, delay: Duration, idle_cut: Duration) -> bool {
    let start = Instant::now();
    let last = Arc::new(AtomicU64::new(0));
    let (ar, aw) = a.into_split();
    let (br, bw) = b.into_split();
    let idle = {
        let last = last.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let quiet = start.elapsed().as_millis() as u64 - last.load(Ordering::Relaxed);
                if quiet >= idle_cut.as_millis() as u64 {
                    return;
                }
            }
        }
    };
    tokio::select! {
        _ = pump(ar, bw, delay, last.clone(), start) => false,
        _ = pump(br, aw, delay, last.clone(), start) => false,
        _ = idle => true,
    }
}

/// One direction of a link: what `r` reads is written to `w` `delay`
/// later, in order.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    delay: Duration,
    last: Arc<AtomicU64>,
    start: Instant,
) {
    let touch =
        |last: &AtomicU64| last.store(start.elapsed().as_millis() as u64, Ordering::Relaxed);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<(tokio::time::Instant, Vec<u8>)>(1024);
    let reader = {
        let last = last.clone();
        async move {
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match r.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => {
                        touch(&last);
                        let due = tokio::time::Instant::now() + delay;
                        if tx.send((due, buf[..n].to_vec())).await.is_err() {
                            return;
                        }
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return;
            }
            touch(&last);
        }
    };
    tokio::join!(reader, writer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_slow_postgresql_behind_an_idle_cutting_middlebox_loses_no_live_statement() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let stale = 5_000;
    // The schema first, directly (a start-up's migration through the slow
    // link would take most of a minute).
    drop(start_all(vec![replica(&s3, pg.dsn(), stale)]).await);
    let idle_cut = Duration::from_secs(5);
    let link = SlowLink::start(pg.port, Duration::from_millis(750), idle_cut).await;
    // One at a time: a start-up waiting for the other's migration lock
    // says nothing for 5 s, and the middlebox cuts it.
    let mut g = start_all(vec![replica(&s3, pg.dsn_via(link.port), stale)]).await;
    g.extend(start_all(vec![replica(&s3, pg.dsn_via(link.port), stale)]).await);
    let started = Instant::now();

    // Statements of 0.5 to 12 s on both replicas.
    let mut ids = Vec::new();
    for i in 0..8u64 {
        let id = format!("slow-{i}");
        let sql = common::sleeping_sql(Duration::from_millis(500 + 1_500 * i));
        let (status, v) = submit(&g[(i % 2) as usize], &id, &sql).await;
        assert!(status == 202 || status == 200, "{id}: {status} {v}");
        ids.push(id);
    }
    // A quiet while: the pooled sessions idle past the middlebox's limit
    // (a sleep on purpose: the idleness is the scenario).
    tokio::time::sleep(idle_cut + Duration::from_secs(3)).await;

    // Both replicas are asked about every statement until each is seen
    // succeeded on both; none may ever be lost.
    let mut lost = Vec::new();
    let mut unavailable = 0;
    let mut seen = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(180);
    while seen.len() < ids.len() * 2 && Instant::now() < deadline {
        let asks = ids
            .iter()
            .flat_map(|id| (0..2).map(move |r| (id.clone(), r)));
        let answers = futures::future::join_all(asks.map(|(id, r)| {
            let g = &g[r];
            async move {
                let (status, v) = g.get(&format!("/statements/{id}"), ALICE).await;
                (id, r, status, v)
            }
        }))
        .await;
        for (id, r, status, v) in answers {
            if status == 410 || v["state"] == "lost" {
                lost.push(format!("{id} on replica {r}: {status} {v}"));
            } else if status == 503 {
                unavailable += 1;
            } else if v["state"] == "succeeded" {
                seen.insert((id, r));
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let cuts = link.cuts.load(Ordering::Relaxed);
    eprintln!(
        "{} statements over a 1.5 s round trip: {} of {} answers succeeded in {:?}, {unavailable} answers 503, {cuts} idle connections cut",
        ids.len(),
        seen.len(),
        ids.len() * 2,
        started.elapsed()
    );
    assert!(
        lost.is_empty(),
        "live replicas' statements answered lost:\n{}",
        lost.join("\n")
    );
    assert_eq!(
        seen.len(),
        ids.len() * 2,
        "not every statement was seen succeeded on both replicas"
    );
    assert!(
        cuts > 0,
        "the middlebox cut no idle connection: the test tests nothing"
    );

    // The control, through the same link: a killed replica's running
    // statement answers 410 statement-lost on the other.
    let (status, v) = submit(&g[0], "doomed", LONG).await;
    assert_eq!(status, 202, "{v}");
    eventually(
        "doomed running on replica 1",
        Duration::from_secs(60),
        || async {
            let (_, v) = g[1].get("/statements/doomed", ALICE).await;
            (v["state"] == "running").then_some(()).ok_or(v.to_string())
        },
    )
    .await;
    g[0].child.kill().unwrap();
    g[0].child.wait().unwrap();
    let killed = Instant::now();
    let v = eventually("doomed lost", Duration::from_secs(120), || async {
        let (status, v) = g[1].get("/statements/doomed", ALICE).await;
        (status == 410)
            .then_some(v.clone())
            .ok_or(format!("{status} {v}"))
    })
    .await;
    assert_eq!(v["type"], "urn:duckgate:problem:statement-lost", "{v}");
    eprintln!(
        "a killed replica's statement was lost after {:?} through the slow link",
        killed.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_frozen_replica_is_taken_for_dead_and_an_admin_call_says_so() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let stale = Duration::from_millis(2_000);
    let g = start_all(vec![
        replica(&s3, pg.dsn(), stale.as_millis() as u64),
        replica(&s3, pg.dsn(), stale.as_millis() as u64),
    ])
    .await;
    let (a, b) = (&g[0], &g[1]);
    let sql = "SELECT i, i * 3 AS v FROM range(1000) t(i) ORDER BY i";
    let r = a
        .client
        .post(a.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "finished")
        .json(&json!({"sql": sql, "wait_ms": 20_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let (status, v) = submit(a, "frozen", LONG).await;
    assert_eq!(status, 202, "{v}");
    eventually(
        "frozen running, seen on b",
        Duration::from_secs(10),
        || async {
            let (_, v) = b.get("/statements/frozen", ALICE).await;
            (v["state"] == "running").then_some(()).ok_or(v.to_string())
        },
    )
    .await;
    eventually("finished published", Duration::from_secs(10), || async {
        let (_, v) = b.get("/statements/finished", ALICE).await;
        (v["state"] == "succeeded")
            .then_some(())
            .ok_or(v.to_string())
    })
    .await;
    let rotations = |g: &Gateway| {
        let g = g
            .client
            .clone()
            .get(g.url("/admin/secrets"))
            .bearer_auth(ADMIN);
        async move {
            let v: Value = g.send().await.unwrap().json().await.unwrap();
            v["secrets"][0]["rotations"].as_u64().unwrap()
        }
    };
    let a_rotations = rotations(a).await;

    signal(a, "STOP");
    let frozen = Instant::now();
    // An admin call meanwhile: it waits for the frozen replica only until
    // that one is taken for dead, and says so in its status.
    let call = {
        let (client, url) = (b.client.clone(), b.url("/admin/secrets/rotate"));
        tokio::spawn(async move {
            let r = client.post(url).bearer_auth(ADMIN).send().await.unwrap();
            let status = r.status().as_u16();
            let v: Value = r.json().await.unwrap_or(Value::Null);
            (status, v, frozen.elapsed())
        })
    };

    // Its running statement is lost, within the staleness and a second
    // look; its finished one is still served.
    let (status, lost) = eventually("frozen lost on b", Duration::from_secs(20), || async {
        let (status, v) = b.get("/statements/frozen", ALICE).await;
        (status == 410)
            .then_some((status, v.clone()))
            .ok_or(format!("{status} {v}"))
    })
    .await;
    let detected = frozen.elapsed();
    assert_eq!(status, 410);
    assert_eq!(
        lost["type"], "urn:duckgate:problem:statement-lost",
        "{lost}"
    );
    assert!(
        detected < stale * 3,
        "a frozen replica taken for dead after {detected:?} (staleness {stale:?})"
    );
    let (status, v, call_took) = call.await.unwrap();
    assert_eq!(status, 504, "{v}");
    let outcomes: Vec<(String, String)> = v["replicas"]
        .as_array()
        .unwrap_or_else(|| panic!("{v}"))
        .iter()
        .map(|r| {
            (
                r["replica"].as_str().unwrap().into(),
                r["outcome"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(outcomes.len(), 2, "{v}");
    assert_eq!(outcomes[0].1, "ok", "this replica rotated: {v}");
    assert_eq!(outcomes[1].1, "not_reached", "{v}");
    assert!(
        call_took < Duration::from_secs(15),
        "the call took {call_took:?}"
    );
    let scrape = b.get_text("/metrics").await;
    assert!(
        common::metric(
            &scrape,
            "duckgate_admin_fanout_unanswered_total{command=\"rotate\"}"
        ) >= 1.0
    );

    let (status, page) = b
        .get("/statements/finished/result?format=json&offset=990", ALICE)
        .await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["rows"].as_array().map(Vec::len), Some(10), "{page}");
    let scrape = b.get_text("/metrics").await;
    assert!(common::metric(&scrape, "duckgate_statement_lost_answers_total") >= 1.0);
    eprintln!("frozen replica taken for dead after {detected:?}; the admin call answered after {call_took:?}");

    // Thawed: it rejoins, its lost statement stays lost on every replica
    // (itself included), the withdrawn rotation is never carried out, and
    // its new statements are its own again.
    signal(a, "CONT");
    eventually("a answers again", Duration::from_secs(10), || async {
        let (status, v) = a.get("/statements/frozen", ALICE).await;
        (status == 410).then_some(()).ok_or(format!("{status} {v}"))
    })
    .await;
    let (status, v) = submit(a, "after-thaw", sql).await;
    assert!(status == 202 || status == 200, "{v}");
    eventually(
        "after-thaw succeeded on b",
        Duration::from_secs(20),
        || async {
            let (status, v) = b.get("/statements/after-thaw", ALICE).await;
            (v["state"] == "succeeded")
                .then_some(())
                .ok_or(format!("{status} {v}"))
        },
    )
    .await;
    // A sleep on purpose: an absence is proved by waiting, here a full
    // staleness (five of its heartbeats, each a chance to act on the
    // withdrawn command).
    tokio::time::sleep(stale).await;
    assert_eq!(
        rotations(a).await,
        a_rotations,
        "the frozen replica carried out a command withdrawn from it"
    );
    let (status, _) = b.get("/statements/frozen", ALICE).await;
    assert_eq!(status, 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn an_admin_call_without_the_shared_state_reports_what_this_replica_did() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let g = start_all(vec![replica(&s3, pg.dsn(), 5_000)]).await;
    let g = &g[0];
    let (status, v) = g.call(reqwest::Method::POST, "/admin/reload", ADMIN).await;
    assert_eq!(status, 200, "{v}");
    pg.stop();
    for path in ["/admin/reload", "/admin/secrets/rotate"] {
        let (status, v) = g.call(reqwest::Method::POST, path, ADMIN).await;
        assert_eq!(status, 207, "{path}: {v}");
        assert_eq!(v["replicas"][0]["outcome"], "ok", "{path}: {v}");
        assert_eq!(
            v["replicas"][0]["replica"],
            g.health().await["replica"],
            "{path}: {v}"
        );
        assert!(
            v["not_asked"]
                .as_str()
                .is_some_and(|t| t.contains("shared state")),
            "{path}: {v}"
        );
        assert!(!v.to_string().contains(PASSWORD));
    }
}
