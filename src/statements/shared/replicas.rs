//! Replicas' liveness: the heartbeat and the queries it lists, stale replicas
//! declared dead, and a clean leave.

use std::sync::Arc;
use std::time::Duration;

use super::{db, Shared, SharedError};

/// The heartbeat: the replica's row, its time by the database's clock at
/// the moment of writing, the queries it runs. Written again in full if
/// another replica took this one for dead meanwhile.
const HEARTBEAT: &str = "INSERT INTO duckgate_replicas (replica, heartbeat, queries, release)
    VALUES ($1, clock_timestamp(), $2::text::jsonb, $3)
    ON CONFLICT (replica) DO UPDATE SET heartbeat = clock_timestamp(), queries = excluded.queries";

impl Shared {
    /// Beats this replica's heartbeat until `stop`, on a session of its own
    /// (never the pool's: a pooled session idle for a while is the one a
    /// middlebox cuts, and a new one takes several round trips), with its
    /// statement prepared once: one round trip a beat, every `every` or as
    /// fast as PostgreSQL answers. `queries` gives the JSON list of the
    /// queries running here, written with each beat. A session that ends
    /// is opened again at once.
    pub async fn beat(
        self: Arc<Self>,
        every: Duration,
        queries: impl Fn() -> String + Send,
        stop: tokio_util::sync::CancellationToken,
    ) {
        let mut backoff = Duration::from_millis(100);
        loop {
            let (config, tls) = &self.connect;
            let session = async {
                let (client, connection) = config.connect(tls.clone()).await.map_err(db)?;
                let running = tokio::spawn(connection);
                let statement = client.prepare(HEARTBEAT).await.map_err(db)?;
                Ok::<_, SharedError>((client, running, statement))
            };
            let (client, running, statement) = match tokio::select! {
                _ = stop.cancelled() => return,
                s = session => s,
            } {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error.cause = %e, "opening the heartbeat's session failed; retried");
                    self.dependency.failed(&e);
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                    continue;
                }
            };
            backoff = Duration::from_millis(100);
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let why = loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let json = queries();
                let release = env!("CARGO_PKG_VERSION");
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                    [&self.replica, &json, &release];
                let beat = client.execute(&statement, &params);
                match tokio::select! {
                    _ = stop.cancelled() => return,
                    r = beat => r,
                } {
                    Ok(_) => self.dependency.ok(),
                    Err(e) => break db(e),
                }
            };
            drop(client);
            let _ = running.await;
            tracing::warn!(error.cause = %why, "the heartbeat's session ended; opening another");
            self.dependency.failed(&why);
        }
    }

    /// Records this replica alive, running `queries` (a JSON array): once
    /// at start-up, through the pool; then [`Shared::beat`]'s session.
    pub async fn heartbeat(&self, queries: &str) -> Result<(), SharedError> {
        self.client()
            .await?
            .execute(
                HEARTBEAT,
                &[&self.replica, &queries, &env!("CARGO_PKG_VERSION")],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// The other replicas whose heartbeat is older than the staleness by
    /// the database's clock, with that heartbeat (its text: what
    /// [`Shared::declare_dead`] checks did not move).
    pub async fn stale_replicas(&self) -> Result<Vec<(String, String)>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT replica, heartbeat::text FROM duckgate_replicas
                 WHERE replica <> $2
                   AND heartbeat < clock_timestamp() - make_interval(secs => $1::float8)",
                &[&self.stale_secs(), &self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Takes `replica` for dead if its heartbeat is still `heartbeat` and
    /// still stale: its row goes, its unfinished statements become `lost`
    /// (kept a TTL), and what was addressed to it (commands, cancels) or
    /// reserved by it (query ids) goes. Returns how many statements it
    /// lost, `None` if it beat meanwhile (alive after all).
    pub async fn declare_dead(
        &self,
        replica: &str,
        heartbeat: &str,
        ttl: Duration,
    ) -> Result<Option<u64>, SharedError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let gone = tx
            .execute(
                "DELETE FROM duckgate_replicas WHERE replica = $1 AND heartbeat::text = $2
                    AND heartbeat < clock_timestamp() - make_interval(secs => $3::float8)",
                &[&replica, &heartbeat, &self.stale_secs()],
            )
            .await
            .map_err(db)?;
        if gone == 0 {
            return Ok(None);
        }
        let lost = tx
            .execute(
                "UPDATE duckgate_statements s SET state = 'lost',
                    status = jsonb_set(s.status, '{state}', '\"lost\"'),
                    expires_at = now() + make_interval(secs => $2::float8)
                 WHERE s.replica = $1 AND s.state IN ('queued', 'running')",
                &[&replica, &ttl.as_secs_f64()],
            )
            .await
            .map_err(db)?;
        for sql in [
            "DELETE FROM duckgate_commands WHERE replica = $1 AND done_at IS NULL",
            "DELETE FROM duckgate_cancels WHERE replica = $1",
            "DELETE FROM duckgate_query_ids WHERE replica = $1",
        ] {
            tx.execute(sql, &[&replica]).await.map_err(db)?;
        }
        tx.commit().await.map_err(db)?;
        Ok(Some(lost))
    }

    /// The queries the other live replicas run: (replica, its JSON list).
    pub async fn others_queries(&self) -> Result<Vec<(String, String)>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT r.replica, r.queries::text FROM duckgate_replicas r
                 WHERE r.replica <> $1 ORDER BY r.replica",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// This replica stops: its row goes, so its statements are lost at once
    /// rather than after the heartbeat goes stale, and so do the query ids
    /// it reserved.
    pub async fn leave(&self) -> Result<(), SharedError> {
        let client = self.client().await?;
        client
            .execute(
                "DELETE FROM duckgate_replicas WHERE replica = $1",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        client
            .execute(
                "DELETE FROM duckgate_query_ids WHERE replica = $1",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        Ok(())
    }
}
