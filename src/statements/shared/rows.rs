//! Statement rows: claimed, published, found, listed, forgotten and swept;
//! query ids reserved while their query runs.

use std::sync::Arc;
use std::time::Duration;

use super::{alive, db, Row, Shared, SharedError, State};

/// A statement row and whether its owner lives ([`ALIVE`]).
fn row_sql() -> String {
    String::from(
        "SELECT s.token, s.id, s.replica, s.state, s.status::text, s.result::text,
            r.replica IS NOT NULL,
            coalesce(s.expires_at < now(), false)
        FROM duckgate_statements s LEFT JOIN duckgate_replicas r ON r.replica = s.replica",
    )
}

/// A `state` column's value. Only the gateway writes it; a name this
/// release does not know (a newer replica's) reads as lost: nothing here can
/// say what it means.
fn column_state(name: &str) -> State {
    State::parse(name).unwrap_or_else(|| {
        tracing::warn!(
            state = name,
            "a statement row in the shared state has a state this release does not know"
        );
        State::Lost
    })
}

fn row(r: &tokio_postgres::Row) -> Row {
    Row {
        token: r.get(0),
        id: r.get(1),
        replica: r.get(2),
        state: column_state(r.get(3)),
        status: serde_json::from_str(r.get::<_, &str>(4)).unwrap_or_default(),
        result: r.get(5),
        owner_alive: r.get(6),
        expired: r.get(7),
    }
}

impl Shared {
    /// Takes this statement id for `token`, owned by this replica; false if
    /// any replica keeps one with that id for that token.
    pub async fn claim(&self, token: &str, id: &str, status: &str) -> Result<bool, SharedError> {
        let n = self
            .client()
            .await?
            .execute(
                "INSERT INTO duckgate_statements (token, id, replica, state, status)
                 VALUES ($1, $2, $3, 'queued', $4::text::jsonb) ON CONFLICT DO NOTHING",
                &[&token, &id, &self.replica, &status],
            )
            .await
            .map_err(db)?;
        Ok(n == 1)
    }

    /// Publishes this replica's statement: its state and status document,
    /// its result's metadata, and (`ttl`, once finished) when it expires.
    pub async fn publish(
        &self,
        token: &str,
        id: &str,
        state: State,
        status: &str,
        result: Option<&str>,
        ttl: Option<Duration>,
    ) -> Result<(), SharedError> {
        let ttl = ttl.map(|t| t.as_secs_f64());
        self.client()
            .await?
            .execute(
                // A row already final stays so: a status read while the
                // statement ran, sent after its end was, must not put the
                // row back to `running` (that left rows stuck for good).
                "UPDATE duckgate_statements SET state = $4, status = $5::text::jsonb,
                    result = $6::text::jsonb,
                    expires_at = now() + make_interval(secs => $7::float8)
                 WHERE token = $1 AND id = $2 AND replica = $3 AND state IN ('queued', 'running')",
                &[
                    &token,
                    &id,
                    &self.replica,
                    &state.as_str(),
                    &status,
                    &result,
                    &ttl,
                ],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// The statements with this id: of `token` only, or of every token.
    pub async fn find(&self, token: Option<&str>, id: &str) -> Result<Vec<Row>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "{} WHERE s.id = $1 AND ($2::text IS NULL OR s.token = $2) ORDER BY s.token",
                    row_sql()
                ),
                &[&id, &token],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(row).collect())
    }

    /// Every statement of `token` (of every token for `None`).
    pub async fn list(&self, token: Option<&str>) -> Result<Vec<Row>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!("{} WHERE ($1::text IS NULL OR s.token = $1)", row_sql()),
                &[&token],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(row).collect())
    }

    /// Forgets a statement (`DELETE /statements/{id}`): its owner, if
    /// another replica, sees its row gone and stops it. The result's URL,
    /// if any, is returned for removal.
    pub async fn forget(&self, token: &str, id: &str) -> Result<Option<String>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                "DELETE FROM duckgate_statements WHERE token = $1 AND id = $2 RETURNING result->>'url'",
                &[&token, &id],
            )
            .await
            .map_err(db)?;
        Ok(rows.first().and_then(|r| r.get(0)))
    }

    /// The (token, id) of every statement row this replica owns, with its
    /// state there.
    pub async fn mine(
        &self,
    ) -> Result<std::collections::HashMap<(String, String), State>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                "SELECT token, id, state FROM duckgate_statements WHERE replica = $1",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| ((r.get(0), r.get(1)), column_state(r.get(2))))
            .collect())
    }

    /// Reserves a client-chosen query id of `token` for a query this
    /// replica runs, under `nonce` (this reservation's own); false if a
    /// live replica runs one with that id. A row of this replica's own is
    /// a release still on its way (the local registry already said the id
    /// is free here) and a dead replica's is stale: both are taken over.
    pub async fn reserve(&self, token: &str, id: &str, nonce: &str) -> Result<bool, SharedError> {
        let n = self
            .client()
            .await?
            .execute(
                &format!(
                    "INSERT INTO duckgate_query_ids AS q (token, id, replica, nonce)
                 VALUES ($1, $2, $3, $4)
                 ON CONFLICT (token, id) DO UPDATE
                    SET replica = excluded.replica, nonce = excluded.nonce, started = now()
                 WHERE q.replica = $3 OR NOT {}",
                    alive("q.replica")
                ),
                &[&token, &id, &self.replica, &nonce],
            )
            .await
            .map_err(db)?;
        Ok(n == 1)
    }

    /// Releases reservations (by nonce); those that cannot be released now
    /// are kept for the next [`Shared::release_pending`].
    pub async fn release(&self, nonces: Vec<String>) {
        let done = async {
            self.client()
                .await?
                .execute(
                    "DELETE FROM duckgate_query_ids WHERE replica = $1 AND nonce = ANY($2)",
                    &[&self.replica, &nonces],
                )
                .await
                .map_err(db)
        }
        .await;
        if let Err(e) = done {
            tracing::warn!(error.cause = %e, "releasing query ids in the shared state failed; retried");
            self.unreleased
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend(nonces);
        }
    }

    /// Retries the releases that failed.
    pub async fn release_pending(&self) {
        let nonces =
            std::mem::take(&mut *self.unreleased.lock().unwrap_or_else(|p| p.into_inner()));
        if !nonces.is_empty() {
            self.release(nonces).await;
        }
    }

    /// Housekeeping any replica may do: statements whose owner died before
    /// they finished become `lost` (kept a TTL, then forgotten); succeeded
    /// ones past their expiry become `expired` (their result URLs are
    /// returned for removal); expired and lost ones are forgotten a TTL
    /// later; cancels addressed to dead replicas and replicas gone for a
    /// day are dropped.
    pub async fn sweep(&self, ttl: Duration) -> Result<(Vec<String>, u64), SharedError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let ttl = ttl.as_secs_f64();
        let lost = tx
            .execute(
                &format!(
                    "UPDATE duckgate_statements s SET state = 'lost',
                    status = jsonb_set(s.status, '{{state}}', '\"lost\"'),
                    expires_at = now() + make_interval(secs => $1::float8)
                 WHERE s.state IN ('queued', 'running') AND NOT {}",
                    alive("s.replica")
                ),
                &[&ttl],
            )
            .await
            .map_err(db)?;
        let expired = tx
            .query(
                "WITH e AS (SELECT token, id, result->>'url' AS url FROM duckgate_statements
                    WHERE state = 'succeeded' AND expires_at < now() FOR UPDATE SKIP LOCKED)
                 UPDATE duckgate_statements s SET state = 'expired', result = NULL,
                    status = jsonb_set(s.status, '{state}', '\"expired\"')
                 FROM e WHERE s.token = e.token AND s.id = e.id RETURNING e.url",
                &[],
            )
            .await
            .map_err(db)?;
        tx.execute(
            "DELETE FROM duckgate_statements WHERE expires_at < now() - make_interval(secs => $1::float8)",
            &[&ttl],
        )
        .await
        .map_err(db)?;
        tx.execute(
            &format!(
                "DELETE FROM duckgate_cancels c WHERE NOT {}",
                alive("c.replica")
            ),
            &[],
        )
        .await
        .map_err(db)?;
        tx.execute(
            &format!(
                "DELETE FROM duckgate_query_ids q WHERE NOT {}",
                alive("q.replica")
            ),
            &[],
        )
        .await
        .map_err(db)?;
        tx.execute(
            "DELETE FROM duckgate_commands WHERE requested_at < now() - interval '1 hour'",
            &[],
        )
        .await
        .map_err(db)?;
        tx.execute(
            "DELETE FROM duckgate_replicas WHERE heartbeat < now() - interval '1 day'",
            &[],
        )
        .await
        .map_err(db)?;
        tx.commit().await.map_err(db)?;
        Ok((expired.iter().filter_map(|r| r.get(0)).collect(), lost))
    }

    /// Which of `urls` a kept statement's result names (the rest are
    /// orphans: their statement was deleted, expired, or lost with its
    /// replica).
    pub async fn referenced(
        &self,
        urls: &[String],
    ) -> Result<std::collections::HashSet<String>, SharedError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT result->>'url' FROM duckgate_statements WHERE result->>'url' = ANY($1)",
                &[&urls],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().filter_map(|r| r.get(0)).collect())
    }
}

/// A client-chosen query id reserved in the shared state for as long as
/// its query runs here: held by the query's registration, released (in the
/// background) when that goes, however the query ended.
#[derive(Debug)]
pub struct Reservation {
    shared: Arc<Shared>,
    nonce: String,
    runtime: tokio::runtime::Handle,
}

impl Reservation {
    /// Reserves `id` of `token` on every replica: `Ok(None)` when a live
    /// replica runs a query with that id.
    pub async fn take(
        shared: &Arc<Shared>,
        token: &str,
        id: &str,
    ) -> Result<Option<Reservation>, SharedError> {
        let nonce = uuid::Uuid::new_v4().to_string();
        if !shared.reserve(token, id, &nonce).await? {
            return Ok(None);
        }
        Ok(Some(Reservation {
            shared: shared.clone(),
            nonce,
            runtime: tokio::runtime::Handle::current(),
        }))
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let shared = self.shared.clone();
        let nonce = std::mem::take(&mut self.nonce);
        // Dropped where the query ends, maybe off the runtime: the release
        // runs on it.
        self.runtime
            .spawn(async move { shared.release(vec![nonce]).await });
    }
}
