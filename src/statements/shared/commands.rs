//! Requests between replicas: cancels addressed to a query's owner, and
//! commands asked of every replica with their answers.

use super::{alive, db, Shared, SharedError};

/// One replica's side of a command asked of every replica.
#[derive(Debug, Clone)]
pub struct CommandAnswer {
    /// The replica asked.
    pub replica: String,
    /// Its answer (`{"errors": [...]}`), once it gave one.
    pub answer: Option<serde_json::Value>,
    /// Whether it took the command (it may be carrying it out).
    pub taken: bool,
    /// Whether it is alive (its row is in `duckgate_replicas`).
    pub alive: bool,
}

impl Shared {
    /// Asks `replica` to cancel the query (token, id).
    pub async fn request_cancel(
        &self,
        replica: &str,
        token: &str,
        id: &str,
    ) -> Result<(), SharedError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO duckgate_cancels (replica, token, id) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                &[&replica, &token, &id],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// The cancels other replicas asked of this one (taken: each once).
    pub async fn take_cancels(&self) -> Result<Vec<(String, String)>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                "DELETE FROM duckgate_cancels WHERE replica = $1 RETURNING token, id",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Asks every other live replica to carry out `command` (with
    /// `argument`); returns the command's id and the replicas asked.
    pub async fn broadcast(
        &self,
        command: &str,
        argument: Option<&str>,
    ) -> Result<(String, Vec<String>), SharedError> {
        let id = uuid::Uuid::new_v4().to_string();
        let client = self.client().await?;
        let rows = client
            .query(
                "INSERT INTO duckgate_commands (id, replica, command, argument)
                 SELECT $1, r.replica, $2, $3 FROM duckgate_replicas r
                 WHERE r.replica <> $4
                 RETURNING replica",
                &[&id, &command, &argument, &self.replica],
            )
            .await
            .map_err(db)?;
        Ok((id, rows.iter().map(|r| r.get(0)).collect()))
    }

    /// The commands other replicas asked of this one and nobody took yet
    /// (taken now: each runs once): id, command, argument. One its asker
    /// withdrew (it did not wait for it any longer) is gone and never runs.
    pub async fn take_commands(
        &self,
    ) -> Result<Vec<(String, String, Option<String>)>, SharedError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "UPDATE duckgate_commands SET taken_at = now()
                 WHERE replica = $1 AND taken_at IS NULL
                 RETURNING id, command, argument",
                &[&self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect())
    }

    /// This replica's answer to command `id`.
    pub async fn answer_command(
        &self,
        id: &str,
        result: &serde_json::Value,
    ) -> Result<(), SharedError> {
        let client = self.client().await?;
        client
            .execute(
                "UPDATE duckgate_commands SET done_at = now(), result = $3::text::jsonb
                 WHERE id = $1 AND replica = $2",
                &[&id, &self.replica, &result.to_string()],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    /// Where command `id` is on each replica still asked: its answer, if
    /// any, whether it took the command, and whether the replica is alive.
    /// A replica taken for dead meanwhile has no row any more.
    pub async fn command_answers(&self, id: &str) -> Result<Vec<CommandAnswer>, SharedError> {
        let client = self.client().await?;
        let rows = client
            .query(
                &format!(
                    "SELECT c.replica, c.result::text, c.taken_at IS NOT NULL, {}
                     FROM duckgate_commands c WHERE c.id = $1 ORDER BY c.replica",
                    alive("c.replica")
                ),
                &[&id],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| {
                let text: Option<String> = r.get(1);
                CommandAnswer {
                    replica: r.get(0),
                    answer: text.and_then(|t| serde_json::from_str(&t).ok()),
                    taken: r.get(2),
                    alive: r.get(3),
                }
            })
            .collect())
    }

    /// Withdraws command `id` from the replicas that have not taken it
    /// yet (they never will carry it out); returns them.
    pub async fn withdraw_command(&self, id: &str) -> Result<Vec<String>, SharedError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "DELETE FROM duckgate_commands WHERE id = $1 AND taken_at IS NULL RETURNING replica",
                &[&id],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }
}
