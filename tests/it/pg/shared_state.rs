//! The state replicas share, told truthfully (issue 37): its schema has
//! versions and a database of the previous release is upgraded; a slow or
//! locked PostgreSQL makes no statement look lost; an outage shows in the
//! probes and the metrics.

use std::time::{Duration, Instant};

use crate::common::{self, Postgres, S3Server};
use serde_json::json;

const ALICE: &str = "alice-token-0123456789";
const PASSWORD: &str = "shared-state-pw-9e1a";

fn replica(s3: &S3Server, pg: &Postgres, stale_ms: u64) -> common::GatewayBuilder {
    s3.app(900)
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_STATE_DSN", pg.dsn())
        .env("DUCKGATE_SPOOL_URL", "s3://duckgate-test/spool/")
        .env("DUCKGATE_POOL_SIZE", 4)
        .env("DUCKGATE_REPLICA_STALE_MS", stale_ms)
}

/// The tables as the release before schema versions created them, with
/// one finished statement of alice's in them (written as that release did).
const PREVIOUS_RELEASE: &str = "
CREATE TABLE duckgate_replicas (replica text PRIMARY KEY, heartbeat timestamptz NOT NULL,
    queries jsonb NOT NULL DEFAULT '[]'::jsonb);
CREATE TABLE duckgate_statements (token text NOT NULL, id text NOT NULL, replica text NOT NULL,
    state text NOT NULL, status jsonb NOT NULL, result jsonb, expires_at timestamptz,
    PRIMARY KEY (token, id));
CREATE INDEX duckgate_statements_replica ON duckgate_statements (replica);
CREATE TABLE duckgate_query_ids (token text NOT NULL, id text NOT NULL, replica text NOT NULL,
    nonce text NOT NULL, started timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (token, id));
CREATE INDEX duckgate_query_ids_replica ON duckgate_query_ids (replica);
CREATE TABLE duckgate_cancels (replica text NOT NULL, token text NOT NULL, id text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (replica, token, id));
INSERT INTO duckgate_replicas VALUES ('old-replica', now() - interval '1 hour', '[]');
INSERT INTO duckgate_statements VALUES ('alice', 'kept-from-before', 'old-replica', 'failed',
    '{\"id\":\"kept-from-before\",\"token\":\"alice\",\"state\":\"failed\",\"sql\":\"SELECT 1\"}',
    NULL, now() + interval '1 hour');
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn the_schema_has_versions_and_a_previous_releases_database_is_upgraded() {
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    pg.psql(PASSWORD, "state", PREVIOUS_RELEASE);
    let g = replica(&s3, &pg, 5_000).start();
    // Migrated once, recorded, and the old rows still serve.
    let versions = pg.psql(
        PASSWORD,
        "state",
        "SELECT string_agg(version::text, ',' ORDER BY version) FROM duckgate_schema",
    );
    assert_eq!(versions.trim(), "1,2,3");
    let (status, v) = g.get("/statements/kept-from-before", ALICE).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["state"], "failed");
    // A second replica of the same release migrates nothing again.
    let other = replica(&s3, &pg, 5_000).start();
    assert_eq!(
        other.get("/statements/kept-from-before", ALICE).await.0,
        200
    );
    let n = pg.psql(PASSWORD, "state", "SELECT count(*) FROM duckgate_schema");
    assert_eq!(n.trim(), "3");
    drop((g, other));

    // A table changed by hand: start-up names what is missing.
    pg.psql(
        PASSWORD,
        "state",
        "ALTER TABLE duckgate_statements DROP COLUMN replica",
    );
    let (code, log) = replica(&s3, &pg, 5_000)
        .try_start()
        .err()
        .expect("it started");
    assert_eq!(code, Some(2));
    let text = log.join("\n");
    assert!(
        text.contains("duckgate_statements.replica") && text.contains("outside duckgate"),
        "{text}"
    );
    // A column's type altered by hand (issue 57: start-up passed, /healthz
    // said ok, and every statement answered 503 while PostgreSQL
    // answered): start-up names the column and both types.
    let pg3 = Postgres::start(PASSWORD, "state");
    drop(replica(&s3, &pg3, 5_000).start());
    pg3.psql(
        PASSWORD,
        "state",
        "ALTER TABLE duckgate_statements ALTER COLUMN status TYPE text",
    );
    let (code, log) = replica(&s3, &pg3, 5_000)
        .try_start()
        .err()
        .expect("it started on an altered table");
    assert_eq!(code, Some(2));
    let text = log.join("\n");
    assert!(
        text.contains("duckgate_statements.status of type text where jsonb is expected")
            && text.contains("outside duckgate"),
        "{text}"
    );
    // A database a newer release migrated with a change this one cannot run.
    let pg2 = Postgres::start(PASSWORD, "state");
    drop(replica(&s3, &pg2, 5_000).start());
    pg2.psql(
        PASSWORD,
        "state",
        "INSERT INTO duckgate_schema VALUES (99, 99, '9.9.9')",
    );
    let (code, log) = replica(&s3, &pg2, 5_000)
        .try_start()
        .err()
        .expect("it started");
    assert_eq!(code, Some(2));
    let text = log.join("\n");
    assert!(text.contains("newer release"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_locked_postgresql_makes_no_statement_look_lost() {
    // Issue 37: table locks held 20 s made 7 of 33 acknowledged statements
    // answer 410 statement-lost while every replica lived (their heartbeats
    // could not be written), and the same ids answered succeeded later.
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let stale = 2_000;
    let a = replica(&s3, &pg, stale).start();
    let b = replica(&s3, &pg, stale).start();
    let mut ids = Vec::new();
    for i in 0..12 {
        let r = a
            .client
            .post(a.url("/statements"))
            .bearer_auth(ALICE)
            .json(&json!({"sql": common::sleeping_sql(Duration::from_millis(500 + 300 * i)), "wait_ms": 0}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        ids.push(
            r.headers()["duckgate-query-id"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    // The replicas' table locked for three times the staleness: no
    // heartbeat can be written, no statement row published.
    let mut lock = pg
        .psql_session(PASSWORD, "state")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    {
        use std::io::Write;
        let stdin = lock.stdin.as_mut().unwrap();
        writeln!(
            stdin,
            "BEGIN; LOCK TABLE duckgate_replicas, duckgate_statements IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep({});  COMMIT;",
            3 * stale / 1000
        )
        .unwrap();
    }
    drop(lock.stdin.take());
    // Meanwhile and after, both replicas are asked; none may say lost.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lost = Vec::new();
    let mut done = std::collections::HashSet::new();
    while done.len() < ids.len() && Instant::now() < deadline {
        for id in &ids {
            for g in [&a, &b] {
                let (status, v) = g.get(&format!("/statements/{id}"), ALICE).await;
                if status == 410 || v["state"] == "lost" {
                    lost.push(format!("{id}: {status} {v}"));
                }
                if v["state"] == "succeeded" && g.base == b.base {
                    done.insert(id.clone());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let _ = lock.wait();
    assert!(
        lost.is_empty(),
        "{} answers said lost:\n{}",
        lost.len(),
        lost.join("\n")
    );
    assert_eq!(
        done.len(),
        ids.len(),
        "not every statement was seen finished on the other replica"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_state_outage_shows_in_the_probes_and_the_metrics() {
    // Issue 37: PostgreSQL killed or stopped left /healthz `ok` and
    // /readyz 200 on every probe, with no metric to alert on.
    let pg = Postgres::start(PASSWORD, "state");
    let s3 = S3Server::start(&[]);
    let g = replica(&s3, &pg, 5_000).start();
    let h = g.health().await;
    assert_eq!(h["status"], "ok", "{h}");
    assert_eq!(h["dependencies"][0]["name"], "shared_state");
    pg.stop();
    let h = g
        .health_until(
            "the outage in /healthz",
            |h| h["status"] == "degraded",
            Duration::from_secs(30),
        )
        .await;
    let reasons = h["reasons"].to_string();
    assert!(reasons.contains("shared_state"), "{h}");
    assert!(
        !reasons.contains(PASSWORD),
        "the DSN's password in the probe"
    );
    let scrape = g.get_text("/metrics").await;
    assert_eq!(
        common::metric(
            &scrape,
            "duckgate_dependency_up{dependency=\"shared_state\"}"
        ),
        0.0
    );
    assert!(
        common::metric(
            &scrape,
            "duckgate_dependency_failures_total{dependency=\"shared_state\"}"
        ) >= 1.0
    );
    // Queries still run: readiness stays (the state fails alike everywhere).
    let r = g.client.get(g.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let r = g
        .client
        .post(g.url("/query"))
        .bearer_auth(ALICE)
        .json(&json!({"sql": "SELECT 42 AS x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    // Back: the probes say so, and statements serve again.
    pg.restart();
    g.health_until(
        "the state back",
        |h| h["status"] == "ok",
        Duration::from_secs(60),
    )
    .await;
    let r = g
        .client
        .post(g.url("/statements"))
        .bearer_auth(ALICE)
        .json(&json!({"sql": "SELECT 1 AS x", "wait_ms": 10_000}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}
