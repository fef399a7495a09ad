//! PostgreSQL connections per replica are bounded by a setting
//! (DUCKGATE_STATE_POOL_SIZE, docs/operations.md): under a burst of
//! requests that each read the shared state, a replica opens at most its
//! pool plus its one session of its own; the control with the default pool
//! opens more under the same burst.

use std::time::Duration;

use crate::common::{self, Postgres};

const ALICE: &str = "alice-token-0123456789";
const PASSWORD: &str = "state-connections-pw-51c2";

/// The sessions the gateway holds open, by pg_stat_activity's
/// application_name (the gateway names its sessions `duckgate`).
fn sessions(pg: &Postgres) -> usize {
    pg.psql(
        PASSWORD,
        "state",
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'duckgate'",
    )
    .parse()
    .unwrap()
}

/// The most sessions seen after bursts of 40 concurrent `GET /statements`
/// (each a read of the shared state), a few bursts at most.
async fn most_sessions_under_bursts(pg: &Postgres, pool: Option<u32>) -> usize {
    let mut builder = common::Gateway::builder()
        .env("DUCKGATE_QUERY_TOKENS", format!("alice:{ALICE}"))
        .env("DUCKGATE_STATE_DSN", pg.dsn());
    if let Some(n) = pool {
        builder = builder.env("DUCKGATE_STATE_POOL_SIZE", n);
    }
    let g = builder.start();
    let mut most = 0;
    for _ in 0..5 {
        let calls = (0..40).map(|_| g.get("/statements", ALICE));
        for (status, _) in futures::future::join_all(calls).await {
            assert_eq!(status, 200);
        }
        most = most.max(sessions(pg));
        if pool.is_none() && most > 3 {
            break;
        }
    }
    drop(g);
    // The replica's sessions close with it (a bounded wait).
    common::eventually("the sessions closed", Duration::from_secs(10), || async {
        match sessions(pg) {
            0 => Ok(()),
            n => Err(format!("{n} sessions still open")),
        }
    })
    .await;
    most
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "tier pg: needs PostgreSQL 15 and the test venv; scripts/test installs it"]
async fn a_replica_opens_at_most_its_state_pool_plus_one_session() {
    let pg = Postgres::start(PASSWORD, "state");
    let bounded = most_sessions_under_bursts(&pg, Some(2)).await;
    assert!(
        (1..=3).contains(&bounded),
        "DUCKGATE_STATE_POOL_SIZE=2: {bounded} sessions (at most 2 + 1)"
    );
    // Control: the default pool (8) opens more under the same bursts, so
    // the bound above is the setting's doing.
    let default = most_sessions_under_bursts(&pg, None).await;
    eprintln!("sessions: {bounded} with a pool of 2, {default} with the default");
    assert!(
        default > 3 && default <= 8 + 1,
        "the default pool: {default} sessions"
    );
}
