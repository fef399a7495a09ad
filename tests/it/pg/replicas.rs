//! Three gateway processes behind no load balancer at all, sharing one
//! PostgreSQL state (DUCKGATE_STATE_DSN) and one S3 spool
//! (DUCKGATE_SPOOL_URL): a statement submitted on one is polled, paged,
//! listed and cancelled through the others; a replica killed with SIGKILL
//! mid-statement leaves that statement `statement-lost` (410) and its
//! finished results served by the others; credentials rotate on every
//! replica meanwhile.

use crate::common;

use std::time::{Duration, Instant};

use crate::common::{eventually, Gateway, Postgres, S3Server};
use serde_json::{json, Value};

const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-0123456789ab";
const ADMIN: &str = "admin-token-0123456789";
const PASSWORD: &str = "state-pw-7c1e4a";
/// Runs until cancelled or killed.
const LONG: &str = "SELECT sum(hash(i)) FROM range(100000000000) t(i)";

/// The connection string of the state database in `pg`.
fn replica(s3: &S3Server, pg: &Postgres) -> Gateway {
    replica_builder(s3, pg).start()
}

fn replica_builder(s3: &S3Server, pg: &Postgres) -> common::GatewayBuilder {
    s3.app(20)
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE},bob:{BOB}"))
        .env("DUCKGATE_ADMIN_TOKEN", ADMIN)
        .env("DUCKGATE_STATE_DSN", pg.dsn())
        .env("DUCKGATE_SPOOL_URL", "s3://duckgate-test/spool/")
        .env("DUCKGATE_REPLICA_STALE_MS", 2000)
        .env("DUCKGATE_MAX_QUERY_TIMEOUT_MS", 3000)
        .env("DUCKGATE_MAX_STATEMENT_TIMEOUT_MS", 8000)
        .env("DUCKGATE_S3_REFRESH_LEAD_SECS", 1)
        .env("DUCKGATE_S3_CHECK_INTERVAL_MS", 200)
        .env("DUCKGATE_POOL_SIZE", 4)
}

async fn submit(g: &Gateway, token: &str, id: &str, sql: &str, wait_ms: u64) -> (u16, Value) {
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(token)
        .header("duckgate-query-id", id)
        .json(&json!({"sql": sql, "wait_ms": wait_ms}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The rows `/query` gives for `sql` on `g`: DuckDB's own answer.
async fn reference(g: &Gateway, sql: &str) -> Value {
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .json(&json!({ "sql": sql }))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.json::<Value>().await.unwrap()["rows"].clone()
}

async fn state_of(g: &Gateway, id: &str) -> (u16, Value) {
    g.get(&format!("/statements/{id}"), ALICE).await
}

async fn rotations(g: &Gateway) -> u64 {
    let (status, v) = g.get("/admin/secrets", ADMIN).await;
    assert_eq!(status, 200, "{v}");
    v["secrets"][0]["rotations"].as_u64().unwrap_or(0)
}

fn sql_for(i: usize) -> String {
    format!(
        "SELECT i, i * {} AS v, 'r' || i AS s FROM range(10000) t(i) ORDER BY i",
        i + 2
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn statements_any_replica_serves() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let mut g: Vec<Gateway> = (0..3).map(|_| replica(&s3, &pg)).collect();
    let started = Instant::now();

    // Submitted on each replica, polled through the next, paged through
    // the one after.
    for i in 0..3 {
        let id = format!("each-{i}");
        let sql = sql_for(i);
        let (status, v) = submit(&g[i], ALICE, &id, &sql, 0).await;
        assert!(status == 202 || status == 200, "{status} {v}");
        let poller = &g[(i + 1) % 3];
        let done = eventually(
            "the statement succeeded, seen on another replica",
            Duration::from_secs(30),
            || async {
                let (status, v) = state_of(poller, &id).await;
                match (status, v["state"].as_str()) {
                    (200, Some("succeeded")) => Ok(v),
                    _ => Err(format!("{status} {v}")),
                }
            },
        )
        .await;
        assert_eq!(done["rows"], 10000, "{done}");
        assert_eq!(done["token"], "alice");
        let pager = &g[(i + 2) % 3];
        let (status, page) = pager
            .get(
                &format!("/statements/{id}/result?format=json&offset=4000&limit=3000"),
                ALICE,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        let want = reference(pager, &format!("{sql} LIMIT 3000 OFFSET 4000")).await;
        assert_eq!(
            page["rows"],
            want,
            "page of each-{i} through replica {}",
            (i + 2) % 3
        );
        // The same token rules as one process: another token sees nothing.
        let (status, _) = pager.get(&format!("/statements/{id}"), BOB).await;
        assert_eq!(status, 404);
        let (status, _) = pager.get(&format!("/statements/{id}/result"), BOB).await;
        assert_eq!(status, 404);
    }
    // Every replica lists every statement of the token.
    for gw in &g {
        let (status, v) = gw.get("/statements", ALICE).await;
        assert_eq!(status, 200);
        let ids: Vec<&str> = v["statements"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|s| s["id"].as_str())
            .collect();
        for i in 0..3 {
            assert!(ids.contains(&format!("each-{i}").as_str()), "{ids:?}");
        }
        let (_, v) = gw.get("/statements", BOB).await;
        assert_eq!(v["statements"], json!([]));
    }
    // Never existed: 404 on all.
    let (status, v) = state_of(&g[1], "never-was").await;
    assert_eq!(status, 404, "{v}");

    // The S3 spool holds every token's results: no query reads it.
    for sql in [
        "SELECT count(*) FROM read_blob('s3://duckgate-test/spool/*/*')",
        "SELECT count(*) FROM read_blob('s3://duckgate-test/*/*/*.arrow')",
    ] {
        let r = g[1]
            .client
            .post(g[1].url("/query"))
            .bearer_auth(BOB)
            .json(&json!({ "sql": sql }))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 403, "{sql}: {}", r.text().await.unwrap());
    }

    // Ids are unique across replicas.
    let (status, v) = submit(&g[0], ALICE, "dup", "SELECT 1", 20_000).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = submit(&g[1], ALICE, "dup", "SELECT 2", 20_000).await;
    assert_eq!(status, 409, "{v}");
    assert!(
        v["type"].as_str().unwrap().ends_with("query-id-taken"),
        "{v}"
    );

    // A running statement is listed among the queries of every replica and
    // cancelled through another (DELETE /queries/{id}).
    let (status, v) = submit(&g[1], ALICE, "long-1", LONG, 0).await;
    assert_eq!(status, 202, "{v}");
    let listed = eventually(
        "long-1 listed on replica 2",
        Duration::from_secs(10),
        || async {
            let (_, v) = g[2].get("/queries", ALICE).await;
            v["queries"]
                .as_array()
                .and_then(|q| q.iter().find(|q| q["id"] == "long-1").cloned())
                .ok_or(v.to_string())
        },
    )
    .await;
    assert_eq!(listed["token"], "alice");
    let (_, v) = g[2].get("/queries", BOB).await;
    assert!(!v.to_string().contains("long-1"), "{v}");
    let (status, _) = g[2].delete("/queries/long-1", BOB).await;
    assert_eq!(status, 404, "another token cannot cancel it");
    let asked = Instant::now();
    let (status, v) = g[2].delete("/queries/long-1", ALICE).await;
    assert_eq!(status, 200, "{v}");
    eventually(
        "long-1 cancelled, seen on replica 0",
        Duration::from_secs(10),
        || async {
            let (status, v) = state_of(&g[0], "long-1").await;
            match v["state"].as_str() {
                Some("cancelled") => Ok(()),
                _ => Err(format!("{status} {v}")),
            }
        },
    )
    .await;
    eprintln!("cancel through another replica took {:?}", asked.elapsed());

    // DELETE /statements/{id} through another replica stops it on its owner.
    let (status, v) = submit(&g[2], ALICE, "long-2", LONG, 0).await;
    assert_eq!(status, 202, "{v}");
    eventually("long-2 running", Duration::from_secs(10), || async {
        let (_, v) = state_of(&g[0], "long-2").await;
        (v["state"] == "running").then_some(()).ok_or(v.to_string())
    })
    .await;
    let (status, v) = g[0].delete("/statements/long-2", ALICE).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["cancelled"], true, "{v}");
    eventually(
        "long-2 gone from its owner's queries",
        Duration::from_secs(5),
        || async {
            let (_, v) = g[2].get("/queries", ADMIN).await;
            (!v.to_string().contains("long-2"))
                .then_some(())
                .ok_or(v.to_string())
        },
    )
    .await;
    let (status, _) = state_of(&g[1], "long-2").await;
    assert_eq!(status, 404);

    // Credentials rotate on every replica meanwhile.
    for (i, gw) in g.iter().enumerate() {
        let mut n = 0;
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            n = rotations(gw).await;
            if n >= 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        assert!(n >= 3, "replica {i}: start-up plus two rotations, saw {n}");
    }

    // Replica 0 is killed with SIGKILL: its finished statement stays
    // served, its running one is lost.
    let kept_sql = sql_for(7);
    let (status, v) = submit(&g[0], ALICE, "kept", &kept_sql, 20_000).await;
    assert_eq!(status, 200, "{v}");
    let (status, v) = submit(&g[0], ALICE, "doomed", LONG, 0).await;
    assert_eq!(status, 202, "{v}");
    eventually(
        "doomed running, seen on replica 1",
        Duration::from_secs(10),
        || async {
            let (_, v) = state_of(&g[1], "doomed").await;
            (v["state"] == "running").then_some(()).ok_or(v.to_string())
        },
    )
    .await;
    // Its published status: the end of "kept" is published before the
    // next submission's answer.
    eventually("kept published", Duration::from_secs(5), || async {
        let (_, v) = state_of(&g[1], "kept").await;
        (v["state"] == "succeeded")
            .then_some(())
            .ok_or(v.to_string())
    })
    .await;
    g[0].child.kill().unwrap();
    g[0].child.wait().unwrap();
    let killed = Instant::now();
    let lost = eventually("doomed lost", Duration::from_secs(20), || async {
        let (status, v) = state_of(&g[1], "doomed").await;
        (status == 410)
            .then_some(v.clone())
            .ok_or(format!("{status} {v}"))
    })
    .await;
    assert!(
        lost["type"].as_str().unwrap().ends_with("statement-lost"),
        "{lost}"
    );
    eprintln!(
        "a killed replica's statement was lost after {:?}",
        killed.elapsed()
    );
    let (status, v) = g[2].get("/statements/doomed/result", ALICE).await;
    assert_eq!(status, 410, "{v}");
    let (status, v) = g[2].get("/statements", ALICE).await;
    assert_eq!(status, 200);
    let doomed = v["statements"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "doomed")
        .cloned()
        .unwrap();
    assert_eq!(doomed["state"], "lost", "{doomed}");
    // The finished result of the dead replica, served by both others.
    for gw in &g[1..] {
        let (status, page) = gw
            .get("/statements/kept/result?format=json&offset=9000", ALICE)
            .await;
        assert_eq!(status, 200, "{page}");
        let want = reference(gw, &format!("{kept_sql} OFFSET 9000")).await;
        assert_eq!(page["rows"], want);
    }
    // Never existed stays 404, lost or not.
    let (status, _) = state_of(&g[2], "never-was").await;
    assert_eq!(status, 404);
    eprintln!("three replicas: {:?} in all", started.elapsed());
}

/// A full disk under a replica's spool (issue 21): fetching another
/// replica's result there is 507 `spool-full` with Retry-After, the server's
/// storage, and leaves no partial copy behind to keep the disk full; once
/// there is room the same page is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_full_disk_under_a_result_copy_is_507_and_leaves_nothing() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let a = replica(&s3, &pg);
    let b = replica(&s3, &pg);
    // About 2 MB of Arrow: more than the 64 KiB disk below.
    let sql = "SELECT i, 'row ' || i AS s FROM range(100000) t(i) ORDER BY i";
    let (status, _) = submit(&a, ALICE, "big", sql, 30_000).await;
    assert_eq!(status, 200);
    let (status, v) = state_of(&a, "big").await;
    assert_eq!(
        (status, v["state"].as_str()),
        (200, Some("succeeded")),
        "{v}"
    );

    let copies = b.data_dir.path().join("data").join("spool").join("copies");
    let Some(disk) = common::Tmpfs::mount(&copies, "64k") else {
        return;
    };
    let page = "/statements/big/result?format=json&offset=500&limit=10";
    let r = b
        .client
        .get(b.url(page))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry_after = r.headers().get("retry-after").cloned();
    let problem: Value = r.json().await.unwrap_or(Value::Null);
    assert_eq!(status, 507, "{problem}");
    assert_eq!(
        problem["type"], "urn:duckgate:problem:spool-full",
        "{problem}"
    );
    assert!(retry_after.is_some(), "no Retry-After: {problem}");
    let left = common::files_in(&copies);
    assert!(
        left.is_empty(),
        "a failed copy stayed on the full disk: {left:?}"
    );

    drop(disk);
    let (status, got) = b.get(page, ALICE).await;
    assert_eq!(status, 200, "{got}");
    let want = reference(&b, &format!("{sql} LIMIT 10 OFFSET 500")).await;
    assert_eq!(got["rows"], want);
}

/// The keys under the spool's prefix, as the store itself lists them.
async fn spool_keys(s3: &S3Server) -> Vec<String> {
    let v = s3
        .control("GET", "objects?bucket=duckgate-test&prefix=spool/")
        .await;
    v["keys"]
        .as_array()
        .unwrap_or_else(|| panic!("no keys: {v}"))
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}

async fn page(g: &Gateway, id: &str) -> (u16, Option<String>, Value) {
    let r = g
        .client
        .get(g.url(&format!("/statements/{id}/result?format=json&limit=5")))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_string());
    (status, retry, r.json().await.unwrap_or(Value::Null))
}

/// Issue 37: the S3 spool's faults are the spool's. An upload S3 answers
/// with 503 fails the statement as `spool-unavailable` (never `internal`)
/// and /healthz names the spool; a copy to another replica answers 503 with
/// Retry-After for 500s, 502 `spool-refused` for AccessDenied, and 410
/// `result-missing` once the object was removed underneath; an upload
/// stalled past the statement's limit ends at the limit. And no object
/// outlives its statement: deleted while uploading, expired, or orphaned
/// (an object no statement names), each is gone from the bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn spool_faults_are_the_spools_and_no_object_outlives_its_statement() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let a = replica_builder(&s3, &pg)
        .env("DUCKGATE_SPOOL_ORPHAN_GRACE_MS", 2000)
        .env("DUCKGATE_STATEMENT_TTL_MS", 60_000)
        .start();
    let b = replica_builder(&s3, &pg)
        .env("DUCKGATE_SPOOL_ORPHAN_GRACE_MS", 2000)
        .env("DUCKGATE_STATEMENT_TTL_MS", 60_000)
        .start();
    let sql = sql_for(1);

    // An upload answered 503: the statement fails as the spool's fault.
    s3.control("POST", "s3?fail_status=503&match=/spool/").await;
    submit(&a, ALICE, "up503", &sql, 20_000).await;
    let (_, v) = state_of(&a, "up503").await;
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(
        v["problem"]["type"], "urn:duckgate:problem:spool-unavailable",
        "{v}"
    );
    let h = a.health().await;
    let spool = h["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "spool")
        .cloned()
        .unwrap_or_else(|| panic!("no spool dependency: {h}"));
    assert_eq!(spool["up"], false, "{h}");
    assert_eq!(h["status"], "degraded", "{h}");
    s3.control("POST", "s3?fail_status=0").await;

    // A result on A, copied by B through failures of each kind.
    let (status, v) = submit(&a, ALICE, "ok", &sql, 20_000).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(state_of(&a, "ok").await.1["state"], "succeeded");
    for (fail, want, retry) in [
        (500, (503, "spool-unavailable"), true),
        (503, (503, "spool-unavailable"), true),
        (403, (502, "spool-refused"), true),
    ] {
        s3.control("POST", &format!("s3?fail_status={fail}&match=/spool/"))
            .await;
        let (status, retry_after, p) = page(&b, "ok").await;
        assert_eq!(
            (status, p["type"].as_str()),
            (want.0, Some(&*format!("urn:duckgate:problem:{}", want.1))),
            "S3 answering {fail}: {p}"
        );
        assert_eq!(retry_after.is_some(), retry, "{p}");
    }
    s3.control("POST", "s3?fail_status=0").await;
    let (status, _, p) = page(&b, "ok").await;
    assert_eq!(status, 200, "{p}");

    // Removed underneath: 410 on a replica without a copy.
    let before = spool_keys(&s3).await;
    let (status, v) = submit(&a, ALICE, "gone", &sql, 20_000).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(state_of(&a, "gone").await.1["state"], "succeeded");
    let keys: Vec<String> = spool_keys(&s3)
        .await
        .into_iter()
        .filter(|k| !before.contains(k))
        .collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let (_, row) = b.get("/statements/gone", ALICE).await;
    assert_eq!(row["state"], "succeeded", "{row}");
    for k in &keys {
        s3.control("POST", &format!("delete?bucket=duckgate-test&key={k}"))
            .await;
    }
    let (status, _, p) = page(&b, "gone").await;
    assert_eq!(
        (status, p["type"].as_str()),
        (410, Some("urn:duckgate:problem:result-missing")),
        "{p}"
    );

    // An upload stalled past the statement's limit ends at the limit.
    s3.control("POST", "s3?delay_ms=6000").await;
    let started = Instant::now();
    let r = a
        .client
        .post(a.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "stalled")
        .json(&json!({"sql": sql, "wait_ms": 0, "timeout_ms": 2000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    let v = eventually(
        "the stalled upload to end",
        Duration::from_secs(30),
        || async {
            let (_, v) = state_of(&a, "stalled").await;
            match v["state"].as_str() {
                Some("queued" | "running") => Err(format!("{v}")),
                _ => Ok(v),
            }
        },
    )
    .await;
    let took = started.elapsed();
    s3.control("POST", "s3?delay_ms=0").await;
    assert_eq!(v["state"], "failed", "{v}");
    assert_eq!(
        v["problem"]["type"], "urn:duckgate:problem:spool-unavailable",
        "{v}"
    );
    // The limit is 2 s; S3 answers after 6 s per request. Generous: the
    // upload ended well before S3 would have answered.
    assert!(took < Duration::from_millis(5500), "ended after {took:?}");

    // Deleted while it uploads: its object goes with it.
    s3.control("POST", "s3?delay_ms=1500").await;
    let r = a
        .client
        .post(a.url("/statements"))
        .bearer_auth(ALICE)
        .header("duckgate-query-id", "deleted")
        .json(&json!({"sql": sql, "wait_ms": 0, "timeout_ms": 8000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (status, v) = a.delete("/statements/deleted", ALICE).await;
    assert_eq!(status, 200, "{v}");
    tokio::time::sleep(Duration::from_millis(4000)).await;
    s3.control("POST", "s3?delay_ms=0").await;

    // An orphan (a dead replica's object nobody names) goes after the
    // grace; the one a kept statement names stays.
    s3.control(
        "POST",
        "put?bucket=duckgate-test&key=spool/dead-replica/7.arrow",
    )
    .await;
    let (status, v) = submit(&a, ALICE, "kept", &sql, 20_000).await;
    assert_eq!(status, 200, "{v}");
    // Left: ok's and kept's objects (the stalled upload's object, which S3
    // stored after the gateway gave up on it, and the deleted statement's,
    // go too).
    eventually(
        "only named objects left",
        Duration::from_secs(20),
        || async {
            let keys = spool_keys(&s3).await;
            if keys.len() == 2 && !keys.iter().any(|k| k.contains("dead-replica")) {
                Ok(())
            } else {
                Err(format!("{keys:?}"))
            }
        },
    )
    .await;
    let (status, _, p) = page(&b, "kept").await;
    assert_eq!(status, 200, "{p}");
    // Either replica's sweep may remove it: the count is the two's sum (a
    // replica whose sweep removed nothing has no such series yet).
    let mut removed = 0.0;
    for scrape in [a.get_text("/metrics").await, b.get_text("/metrics").await] {
        removed += scrape
            .lines()
            .find_map(|l| l.strip_prefix("duckgate_spool_orphans_removed_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    assert!(removed >= 1.0, "{removed} orphans removed");

    // Deleting the rest empties the bucket.
    for id in ["ok", "kept"] {
        let (status, v) = b.delete(&format!("/statements/{id}"), ALICE).await;
        assert_eq!(status, 200, "{v}");
    }
    let keys = spool_keys(&s3).await;
    assert!(keys.is_empty(), "left behind: {keys:?}");
}

/// Issue 37: `POST /admin/secrets/rotate` asked of one replica rotated that
/// one only. Now every live replica rotates (through the shared state) and
/// the answer names each with its outcome; a reload reaches them the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn one_admin_call_reaches_every_replica() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let a = replica(&s3, &pg);
    let b = replica(&s3, &pg);
    let c = replica(&s3, &pg);
    let mut names = Vec::new();
    for g in [&a, &b, &c] {
        names.push(g.health().await["replica"].as_str().unwrap().to_string());
    }
    // Each replica has joined the shared state once its heartbeat ran
    // (every fifth of DUCKGATE_REPLICA_STALE_MS, 2 s here).
    let beat = Duration::from_millis(2000) / 5;
    common::eventually(
        "three replicas in the shared state",
        common::intervals(beat),
        || async {
            let out = pg
                .psql_session(PASSWORD, "state")
                .args(["-tAc", "SELECT count(*) FROM duckgate_replicas"])
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
            match text.parse::<u32>() {
                Ok(n) if n >= 3 => Ok(()),
                _ => Err(format!("{text} {}", String::from_utf8_lossy(&out.stderr))),
            }
        },
    )
    .await;
    let before = [
        rotations(&a).await,
        rotations(&b).await,
        rotations(&c).await,
    ];
    let (status, v) = a
        .call(reqwest::Method::POST, "/admin/secrets/rotate", ADMIN)
        .await;
    assert_eq!(status, 200, "{v}");
    let answered: Vec<(String, String)> = v["replicas"]
        .as_array()
        .unwrap_or_else(|| panic!("no replicas: {v}"))
        .iter()
        .map(|r| {
            (
                r["replica"].as_str().unwrap().to_string(),
                r["outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(answered.len(), 3, "{v}");
    assert_eq!(answered[0].0, names[0], "this replica first: {v}");
    for name in &names {
        assert!(
            answered.iter().any(|(r, o)| r == name && o == "ok"),
            "{name} did not answer ok: {v}"
        );
    }
    let after = [
        rotations(&a).await,
        rotations(&b).await,
        rotations(&c).await,
    ];
    for i in 0..3 {
        assert!(
            after[i] > before[i],
            "replica {i} did not rotate: {before:?} -> {after:?}"
        );
    }

    let (status, v) = b.call(reqwest::Method::POST, "/admin/reload", ADMIN).await;
    assert_eq!(status, 200, "{v}");
    let ok = v["replicas"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["outcome"] == "ok")
        .count();
    assert_eq!(ok, 3, "{v}");
    // Log lines reach stderr in batches (`telemetry::BatchedStderr`): the
    // line is written before the replica answers, and read a moment later.
    for g in [&a, &b, &c] {
        eventually(
            "command line in a replica's log",
            Duration::from_secs(5),
            || {
                let seen = g.log_text().contains("carrying out a command");
                async move {
                    if seen {
                        Ok(())
                    } else {
                        Err("not yet")
                    }
                }
            },
        )
        .await;
    }
}

/// DuckDB's rows of `sql` (id BIGINT, region VARCHAR, amount DOUBLE) over
/// the database file `db`, as the gateway's JSON renders them.
fn orders_reference(db: &std::path::Path, sql: &str) -> Value {
    let conn = duckdb::Connection::open_in_memory().unwrap();
    conn.execute_batch(&format!(
        "ATTACH '{}' AS ops (READ_ONLY); USE ops;",
        db.display()
    ))
    .unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let mut rows = stmt.query([]).unwrap();
    let mut out = Vec::new();
    while let Some(row) = rows.next().unwrap() {
        let id: i64 = row.get(0).unwrap();
        let region: String = row.get(1).unwrap();
        let amount: f64 = row.get(2).unwrap();
        out.push(json!([id, region, amount]));
    }
    Value::Array(out)
}

/// The tenant corpus across replicas (issue 39): replicas sharing one state
/// and one spool, each over its own copy of the same database, with a role
/// whose row filter confines alice. Her statement submitted on one replica
/// and paged on another holds only her rows (DuckDB's answer over the
/// filtered table); a table she may not see is missing on each; the
/// unconfined bob cannot see her statement anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_confined_identity_is_confined_on_every_replica() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let reference_db = dir.path().join("reference.duckdb");
    {
        let c = duckdb::Connection::open(&reference_db).unwrap();
        c.execute_batch(
            "CREATE TABLE orders AS SELECT i AS id, CASE WHEN i % 3 = 0 THEN 'eu' ELSE 'us' END \
             AS region, i * 1.5 + 0.25 AS amount FROM range(3000) t(i);
             CREATE TABLE payroll AS SELECT 1 AS salary;",
        )
        .unwrap();
    }
    let config = common::write_file(
        dir.path(),
        "roles.toml",
        "[[role]]\nname = \"eu\"\nmembers = [\"alice\"]\nread = [\"ops.main.orders\"]\n\
         [role.rows]\n\"ops.main.orders\" = \"region = 'eu'\"\n",
    );
    let g: Vec<Gateway> = (0..2)
        .map(|i| {
            let dbdir = dir.path().join(format!("replica-{i}"));
            std::fs::create_dir_all(&dbdir).unwrap();
            let db = dbdir.join("ops.duckdb");
            std::fs::copy(&reference_db, &db).unwrap();
            replica_builder(&s3, &pg)
                .env("DUCKGATE_DATABASE", db.display())
                .env("DUCKGATE_CONFIG", config.display())
                .start()
        })
        .collect();
    let mut attempts = 0;
    let filtered = "SELECT id, region, amount FROM orders WHERE region = 'eu'";

    for (i, (sql, want_sql)) in [
        (
            "SELECT id, region, amount FROM orders ORDER BY id".to_string(),
            format!("{filtered} ORDER BY id"),
        ),
        (
            "SELECT id, region, amount FROM orders WHERE amount > 2000 ORDER BY id DESC"
                .to_string(),
            format!("SELECT * FROM ({filtered}) WHERE amount > 2000 ORDER BY id DESC"),
        ),
        (
            "SELECT max(id) AS id, min(region) AS region, sum(amount) AS amount FROM orders"
                .to_string(),
            format!(
                "SELECT max(id) AS id, min(region) AS region, sum(amount) AS amount FROM ({filtered})"
            ),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let (on, other) = (&g[i % 2], &g[(i + 1) % 2]);
        let id = format!("tenant-{i}");
        let (status, v) = submit(on, ALICE, &id, &sql, 0).await;
        assert!(status == 202 || status == 200, "{status} {v}");
        eventually(
            "alice's statement succeeded, seen on the other replica",
            Duration::from_secs(30),
            || async {
                let (status, v) = state_of(other, &id).await;
                match (status, v["state"].as_str()) {
                    (200, Some("succeeded")) => Ok(v),
                    _ => Err(format!("{status} {v}")),
                }
            },
        )
        .await;
        let (status, page) = other
            .get(&format!("/statements/{id}/result?format=json"), ALICE)
            .await;
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["rows"], orders_reference(&reference_db, &want_sql), "{sql}");
        attempts += 1;
        // Bob sees nothing of it on either replica.
        for gw in &g {
            let (status, _) = gw.get(&format!("/statements/{id}"), BOB).await;
            assert_eq!(status, 404);
            attempts += 1;
        }
    }
    // What she may not see is missing on each replica, as a name that
    // exists nowhere is.
    for (n, gw) in g.iter().enumerate() {
        let (want_status, want) = submit(
            gw,
            ALICE,
            &format!("nowhere-{n}"),
            "SELECT * FROM no_such",
            10_000,
        )
        .await;
        let (status, v) = submit(
            gw,
            ALICE,
            &format!("hidden-{n}"),
            "SELECT * FROM payroll",
            10_000,
        )
        .await;
        assert_eq!(status, want_status, "{v}");
        assert_eq!(v["type"], want["type"], "{v}");
        assert!(!v.to_string().contains("payroll\" exists"), "{v}");
        attempts += 1;
    }
    // Bob, unconfined, reads every row on each replica.
    for gw in &g {
        let (status, v) = gw
            .run_sql(BOB, "SELECT id, region, amount FROM orders ORDER BY id")
            .await;
        assert_eq!(status, 200, "{v}");
        assert_eq!(
            v["rows"],
            orders_reference(
                &reference_db,
                "SELECT id, region, amount FROM orders ORDER BY id"
            )
        );
        attempts += 1;
    }
    assert_eq!(attempts, 13);
}
