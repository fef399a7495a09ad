//! The shared state's schema: its versions, their migrations, and the check
//! that the tables are the ones this release expects.

use std::collections::HashMap;

use super::{db, Shared, SharedError};

/// Schema version 1: the tables as the first releases created them (with
/// `CREATE ... IF NOT EXISTS`, before the schema had versions).
const SCHEMA_V1: &str = "
CREATE TABLE IF NOT EXISTS duckgate_replicas (
    replica text PRIMARY KEY,
    heartbeat timestamptz NOT NULL,
    queries jsonb NOT NULL DEFAULT '[]'::jsonb
);
CREATE TABLE IF NOT EXISTS duckgate_statements (
    token text NOT NULL,
    id text NOT NULL,
    replica text NOT NULL,
    state text NOT NULL,
    status jsonb NOT NULL,
    result jsonb,
    expires_at timestamptz,
    PRIMARY KEY (token, id)
);
CREATE INDEX IF NOT EXISTS duckgate_statements_replica ON duckgate_statements (replica);
CREATE TABLE IF NOT EXISTS duckgate_query_ids (
    token text NOT NULL,
    id text NOT NULL,
    replica text NOT NULL,
    nonce text NOT NULL,
    started timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token, id)
);
CREATE INDEX IF NOT EXISTS duckgate_query_ids_replica ON duckgate_query_ids (replica);
CREATE TABLE IF NOT EXISTS duckgate_cancels (
    replica text NOT NULL,
    token text NOT NULL,
    id text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (replica, token, id)
);
";

/// The migrations, in order: version `i + 1` is `MIGRATIONS[i]`. Each runs
/// once, in the transaction that records it, under an advisory lock (two
/// replicas starting at once would otherwise race). Additive only (new
/// tables, new nullable columns) so that, during a rolling upgrade, the
/// replicas of the older release keep working beside the newer ones; a
/// migration that is not must raise [`MIN_COMPATIBLE`] (docs/operations.md).
const MIGRATIONS: &[&str] = &[
    SCHEMA_V1,
    // 2: each replica's liveness lock and release, for evidence of life
    // that slow or locked PostgreSQL cannot fake (`ALIVE`).
    "ALTER TABLE duckgate_replicas ADD COLUMN IF NOT EXISTS lock_key integer;
     ALTER TABLE duckgate_replicas ADD COLUMN IF NOT EXISTS release text;",
    // 3: commands for every replica (a rotation, a reload asked of one),
    // one row per replica, its answer written back.
    "CREATE TABLE IF NOT EXISTS duckgate_commands (
        id text NOT NULL,
        replica text NOT NULL,
        command text NOT NULL,
        argument text,
        requested_at timestamptz NOT NULL DEFAULT now(),
        taken_at timestamptz,
        done_at timestamptz,
        result jsonb,
        PRIMARY KEY (id, replica)
     );",
];

/// The oldest schema version a replica must know to run against a
/// database this release migrated: older replicas refuse to start on it.
const MIN_COMPATIBLE: i32 = 1;

/// Columns this release reads and writes, with their types as
/// `information_schema.columns.data_type` names them: a table changed by
/// hand (a column dropped, or its type altered) is named at start-up rather
/// than failing every statement later.
const COLUMNS: &[(&str, &[(&str, &str)])] = &[
    (
        "duckgate_replicas",
        &[
            ("replica", TEXT),
            ("heartbeat", TIMESTAMPTZ),
            ("queries", JSONB),
            ("lock_key", "integer"),
            ("release", TEXT),
        ],
    ),
    (
        "duckgate_statements",
        &[
            ("token", TEXT),
            ("id", TEXT),
            ("replica", TEXT),
            ("state", TEXT),
            ("status", JSONB),
            ("result", JSONB),
            ("expires_at", TIMESTAMPTZ),
        ],
    ),
    (
        "duckgate_query_ids",
        &[
            ("token", TEXT),
            ("id", TEXT),
            ("replica", TEXT),
            ("nonce", TEXT),
            ("started", TIMESTAMPTZ),
        ],
    ),
    (
        "duckgate_cancels",
        &[
            ("replica", TEXT),
            ("token", TEXT),
            ("id", TEXT),
            ("requested_at", TIMESTAMPTZ),
        ],
    ),
    (
        "duckgate_commands",
        &[
            ("id", TEXT),
            ("replica", TEXT),
            ("command", TEXT),
            ("argument", TEXT),
            ("requested_at", TIMESTAMPTZ),
            ("taken_at", TIMESTAMPTZ),
            ("done_at", TIMESTAMPTZ),
            ("result", JSONB),
        ],
    ),
];

const TEXT: &str = "text";
const JSONB: &str = "jsonb";
const TIMESTAMPTZ: &str = "timestamp with time zone";

/// What differs between the columns this release uses ([`COLUMNS`]) and
/// `present` ((table, column) -> type): each missing column or wrong type.
fn schema_faults(present: &HashMap<(String, String), String>) -> Vec<String> {
    let mut faults = Vec::new();
    for (table, columns) in COLUMNS {
        for (column, want) in *columns {
            match present.get(&(table.to_string(), column.to_string())) {
                None => faults.push(format!("lacks {table}.{column}")),
                Some(got) if got != want => faults.push(format!(
                    "has {table}.{column} of type {got} where {want} is expected"
                )),
                Some(_) => {}
            }
        }
    }
    faults
}

impl Shared {
    /// Brings the schema to this release's version, once, under a lock;
    /// refuses a database a newer, incompatible release migrated, and one
    /// whose tables were changed by hand.
    pub(super) async fn migrate(&self) -> Result<(), SharedError> {
        let latest = MIGRATIONS.len() as i32;
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        tx.execute("SELECT pg_advisory_xact_lock(7226348713)", &[])
            .await
            .map_err(db)?;
        tx.batch_execute(
            "CREATE TABLE IF NOT EXISTS duckgate_schema (
                version integer PRIMARY KEY,
                min_compatible integer NOT NULL,
                release text NOT NULL,
                applied_at timestamptz NOT NULL DEFAULT now()
            )",
        )
        .await
        .map_err(db)?;
        let row = tx
            .query_one(
                "SELECT coalesce(max(version), 0), coalesce(max(min_compatible), 0) FROM duckgate_schema",
                &[],
            )
            .await
            .map_err(db)?;
        let (version, needs): (i32, i32) = (row.get(0), row.get(1));
        if needs > latest {
            return Err(format!(
                "the shared state's schema is version {version}, migrated by a newer release that \
                 needs replicas knowing version {needs}; this release knows up to {latest}: run the \
                 newer release"
            ));
        }
        for v in version + 1..=latest {
            tx.batch_execute(MIGRATIONS[(v - 1) as usize])
                .await
                .map_err(|e| format!("migrating the shared state to version {v}: {}", db(e)))?;
            tx.execute(
                "INSERT INTO duckgate_schema (version, min_compatible, release) VALUES ($1, $2, $3)",
                &[&v, &MIN_COMPATIBLE, &env!("CARGO_PKG_VERSION")],
            )
            .await
            .map_err(db)?;
            tracing::info!(version = v, "shared state migrated");
        }
        // Every column this release uses is there with its type (a table
        // changed by hand stopped start-up with `column "replica" does not
        // exist`; a column's type altered passed start-up, and every
        // statement then answered 503 while PostgreSQL answered).
        let present = tx
            .query(
                "SELECT table_name::text, column_name::text, data_type::text
                 FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name LIKE 'duckgate%'",
                &[],
            )
            .await
            .map_err(db)?;
        let present: HashMap<(String, String), String> = present
            .iter()
            .map(|r| ((r.get(0), r.get(1)), r.get(2)))
            .collect();
        let wrong = schema_faults(&present);
        if !wrong.is_empty() {
            return Err(format!(
                "the shared state's schema (version {}) {}: its tables were changed outside \
                 duckgate; restore them, or point DUCKGATE_STATE_DSN at a database of its own",
                version.max(latest),
                wrong.join(", ")
            ));
        }
        tx.commit().await.map_err(db)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_column_and_an_altered_type_are_named() {
        let mut present: HashMap<(String, String), String> = COLUMNS
            .iter()
            .flat_map(|(t, cols)| {
                cols.iter()
                    .map(move |(c, ty)| ((t.to_string(), c.to_string()), ty.to_string()))
            })
            .collect();
        assert!(schema_faults(&present).is_empty());
        present.remove(&("duckgate_statements".into(), "replica".into()));
        present.insert(
            ("duckgate_replicas".into(), "heartbeat".into()),
            "timestamp without time zone".into(),
        );
        let faults = schema_faults(&present);
        assert_eq!(
            faults,
            [
                "has duckgate_replicas.heartbeat of type timestamp without time zone where timestamp with time zone is expected",
                "lacks duckgate_statements.replica",
            ]
        );
    }
}
