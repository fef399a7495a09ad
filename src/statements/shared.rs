//! The state several replicas share, in PostgreSQL (`DUCKGATE_STATE_DSN`):
//! every statement's row (owner replica, token, state, status document,
//! result metadata, expiry), every replica's heartbeat with the list of
//! queries it runs, and cancel requests addressed to a replica. Replicas
//! never talk to each other: what one must know of another is read here,
//! and the owner of a statement or query polls for what others asked of it.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::config::SslMode;
use tokio_postgres_rustls::MakeRustlsConnect;

use super::State;

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

/// Columns this release reads and writes: a table changed by hand is named
/// at start-up rather than failing some query later.
const COLUMNS: &[(&str, &[&str])] = &[
    (
        "duckgate_replicas",
        &["replica", "heartbeat", "queries", "lock_key", "release"],
    ),
    (
        "duckgate_statements",
        &[
            "token",
            "id",
            "replica",
            "state",
            "status",
            "result",
            "expires_at",
        ],
    ),
    (
        "duckgate_query_ids",
        &["token", "id", "replica", "nonce", "started"],
    ),
    (
        "duckgate_cancels",
        &["replica", "token", "id", "requested_at"],
    ),
    (
        "duckgate_commands",
        &[
            "id",
            "replica",
            "command",
            "argument",
            "requested_at",
            "taken_at",
            "done_at",
            "result",
        ],
    ),
];

/// The first key of every replica's advisory lock ("duck").
const LOCK_SPACE: i32 = 0x6475_636b;

/// A replica is alive while the session that holds its advisory lock is
/// (PostgreSQL releases it the moment that connection goes), or while its
/// heartbeat is fresh by the database's clock at the time of asking
/// (`clock_timestamp()`, not the transaction's start: a query that waited
/// on a lock sees the time it reads). Slow or locked PostgreSQL delays both
/// but fakes neither: the lock stays held however slow the server is.
/// `$1`: the staleness in seconds; `r`: the replica's row.
const ALIVE: &str = "(r.heartbeat > clock_timestamp() - make_interval(secs => $1::float8)
    OR EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
        AND l.classid = 1685414763::oid AND l.objid = r.lock_key::oid AND l.objsubid = 2))";

/// A statement's row, as another replica reads it.
#[derive(Debug, Clone)]
pub struct Row {
    /// The token name that submitted it.
    pub token: String,
    /// Its id.
    pub id: String,
    /// The replica that runs (or ran) it.
    pub replica: String,
    /// Its state in the shared state's `state` column.
    pub state: State,
    /// Its status document, as its owner last published it.
    pub status: serde_json::Value,
    /// Its result's metadata ([`super::spool::ResultMeta`]), once it
    /// succeeded and until it expires.
    pub result: Option<String>,
    /// Whether its owner's heartbeat is fresh.
    pub owner_alive: bool,
    /// Whether it finished longer ago than the TTL.
    pub expired: bool,
}

impl Row {
    /// Whether its owner died before it finished.
    pub fn lost(&self) -> bool {
        self.state == State::Lost || (!self.state.finished() && !self.owner_alive)
    }

    /// The state a reader answers: `lost` once its owner died before it
    /// finished, `expired` once a success is past its expiry.
    pub fn answered_state(&self) -> State {
        if self.lost() {
            State::Lost
        } else if self.expired && self.state == State::Succeeded {
            State::Expired
        } else {
            self.state
        }
    }
}

/// A connection pool to the shared state, and who this replica is.
pub struct Shared {
    pool: Pool,
    /// Reservations of query ids whose release failed (PostgreSQL out of
    /// reach): retried every round of the replicas loop.
    unreleased: std::sync::Mutex<Vec<String>>,
    /// This replica's id (new for every process, so a restarted replica
    /// never claims the statements its predecessor lost).
    pub replica: String,
    /// A heartbeat older than this (and no liveness lock) means its
    /// replica is gone.
    pub stale: Duration,
    /// The second key of this replica's advisory lock (the first is
    /// [`LOCK_SPACE`]), held by [`Shared::hold_lock`]'s session.
    pub lock_key: i32,
    /// How to open the session that holds the lock.
    connect: (tokio_postgres::Config, MakeRustlsConnect),
    /// Whether the shared state answers, for the probes.
    pub dependency: Arc<crate::state::Dependency>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("replica", &self.replica)
            .finish_non_exhaustive()
    }
}

/// Why the shared state could not answer. The text names no part of the
/// connection string.
pub type SharedError = String;

/// The error with its causes: tokio-postgres says "db error" or "error
/// performing TLS handshake" and keeps the why (the server's message, the
/// certificate problem) in its source. No cause quotes the connection
/// string.
fn db(e: impl std::error::Error) -> SharedError {
    let mut text = format!("PostgreSQL: {e}");
    let mut cause = e.source();
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.contains(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

/// The TLS of the connections: rustls (with ring, as the AWS SDK's client)
/// verifying the server's certificate and host name against the system's
/// roots plus, if given, the PEM certificates of `ca_file`. Used as the
/// DSN's `sslmode` says: `disable` never, `prefer` (the default) when the
/// server offers it, `require` always; verified whenever used.
fn tls(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, SharedError> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "a system CA certificate could not be read");
    }
    roots.add_parsable_certificates(native.certs);
    if let Some(path) = ca_file {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| {
                format!(
                    "DUCKGATE_STATE_CA_FILE: cannot read PEM certificates from {}: {e}",
                    path.display()
                )
            })?;
        if certs.is_empty() {
            return Err(format!(
                "DUCKGATE_STATE_CA_FILE: {} holds no PEM certificate",
                path.display()
            ));
        }
        for cert in certs {
            roots.add(cert).map_err(|e| {
                format!(
                    "DUCKGATE_STATE_CA_FILE: a certificate in {} is not a usable CA: {e}",
                    path.display()
                )
            })?;
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// A statement row and whether its owner lives ([`ALIVE`]).
fn row_sql() -> String {
    format!(
        "SELECT s.token, s.id, s.replica, s.state, s.status::text, s.result::text,
            coalesce(r.replica IS NOT NULL AND {ALIVE}, false),
            coalesce(s.expires_at < now(), false)
        FROM duckgate_statements s LEFT JOIN duckgate_replicas r ON r.replica = s.replica"
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
    /// Connects to `dsn` (over TLS as its `sslmode` says, trusting the
    /// system's roots and `ca_file`) with a pool of at most `pool_size`
    /// sessions (DUCKGATE_STATE_POOL_SIZE), and creates the schema if it
    /// is missing.
    pub async fn connect(
        dsn: &str,
        pool_size: usize,
        ca_file: Option<&Path>,
        stale: Duration,
        dependency: Arc<crate::state::Dependency>,
        replica: String,
    ) -> Result<Self, SharedError> {
        // The parser's error could quote the string: it is not passed on.
        let mut config: tokio_postgres::Config = dsn.parse().map_err(|_| {
            if dsn.contains("verify-full") || dsn.contains("verify-ca") {
                "DUCKGATE_STATE_DSN: sslmode verify-full and verify-ca are not accepted; \
                 sslmode=require verifies the server's certificate and host name here"
                    .to_string()
            } else {
                "DUCKGATE_STATE_DSN is not a PostgreSQL connection string".to_string()
            }
        })?;
        if config.get_application_name().is_none() {
            // So the server's pg_stat_activity says whose connections these are.
            config.application_name("duckgate");
        }
        let tls = tls(ca_file)?;
        tracing::info!(
            sslmode = match config.get_ssl_mode() {
                SslMode::Disable => "disable",
                SslMode::Prefer => "prefer",
                _ => "require",
            },
            ca_file = ca_file.map(|p| p.display().to_string()).unwrap_or_default(),
            "connecting to the shared state"
        );
        // A dead replica's session, and so its lock, must go: keepalives
        // find a peer that vanished without closing.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(10));
        config.keepalives_interval(Duration::from_secs(5));
        config.keepalives_retries(3);
        config.connect_timeout(Duration::from_secs(5));
        let manager = Manager::from_config(
            config.clone(),
            tls.clone(),
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size)
            .wait_timeout(Some(Duration::from_secs(5)))
            .create_timeout(Some(Duration::from_secs(5)))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(db)?;
        let shared = Shared {
            pool,
            unreleased: std::sync::Mutex::new(Vec::new()),
            replica,
            stale,
            lock_key: 1 + fastrand::i32(0..i32::MAX - 1),
            connect: (config, tls),
            dependency,
        };
        shared.migrate().await?;
        shared.heartbeat("[]").await?;
        Ok(shared)
    }

    /// Brings the schema to this release's version, once, under a lock;
    /// refuses a database a newer, incompatible release migrated, and one
    /// whose tables were changed by hand.
    async fn migrate(&self) -> Result<(), SharedError> {
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
        // Every column this release uses is there (a table changed by hand
        // stopped start-up with `column "replica" does not exist`).
        let present = tx
            .query(
                "SELECT table_name::text, column_name::text FROM information_schema.columns
                 WHERE table_schema = current_schema() AND table_name LIKE 'duckgate%'",
                &[],
            )
            .await
            .map_err(db)?;
        let present: HashSet<(String, String)> =
            present.iter().map(|r| (r.get(0), r.get(1))).collect();
        let missing: Vec<String> = COLUMNS
            .iter()
            .flat_map(|(t, cols)| cols.iter().map(move |c| (*t, *c)))
            .filter(|(t, c)| !present.contains(&(t.to_string(), c.to_string())))
            .map(|(t, c)| format!("{t}.{c}"))
            .collect();
        if !missing.is_empty() {
            return Err(format!(
                "the shared state's schema (version {}) lacks {}: its tables were changed outside \
                 duckgate; restore them, or point DUCKGATE_STATE_DSN at a database of its own",
                version.max(latest),
                missing.join(", ")
            ));
        }
        tx.commit().await.map_err(db)?;
        Ok(())
    }

    /// Holds this replica's liveness lock for as long as `stop` allows: a
    /// session of its own takes `pg_advisory_lock(LOCK_SPACE, lock_key)`
    /// and keeps it; when the session ends (PostgreSQL restarted, the
    /// network broke), a new one takes it again. Other replicas read the
    /// lock in `pg_locks` ([`ALIVE`]).
    pub async fn hold_lock(self: Arc<Self>, stop: tokio_util::sync::CancellationToken) {
        let mut backoff = Duration::from_millis(200);
        loop {
            let (config, tls) = &self.connect;
            let session = async {
                let (client, connection) = config.connect(tls.clone()).await.map_err(db)?;
                let running = tokio::spawn(connection);
                client
                    .execute(
                        "SELECT pg_advisory_lock($1, $2)",
                        &[&LOCK_SPACE, &self.lock_key],
                    )
                    .await
                    .map_err(db)?;
                self.register_lock(&client).await?;
                Ok::<_, SharedError>((client, running))
            };
            match tokio::select! {
                _ = stop.cancelled() => return,
                s = session => s,
            } {
                Ok((client, running)) => {
                    backoff = Duration::from_millis(200);
                    tokio::select! {
                        _ = stop.cancelled() => {
                            drop(client);
                            return;
                        }
                        ended = running => {
                            let why = match ended {
                                Ok(Err(e)) => db(e),
                                _ => "the session ended".to_string(),
                            };
                            tracing::warn!(error.cause = %why, "the shared state's liveness session ended; taking the lock again");
                            self.dependency.failed(&why);
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error.cause = %e, "taking the liveness lock failed; retried");
                    self.dependency.failed(&e);
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        }
    }

    /// Records the lock's key in this replica's row (created if missing).
    async fn register_lock(&self, client: &tokio_postgres::Client) -> Result<(), SharedError> {
        client
            .execute(
                "INSERT INTO duckgate_replicas (replica, heartbeat, lock_key, release)
                 VALUES ($1, clock_timestamp(), $2, $3)
                 ON CONFLICT (replica) DO UPDATE SET lock_key = excluded.lock_key, release = excluded.release",
                &[&self.replica, &self.lock_key, &env!("CARGO_PKG_VERSION")],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

    async fn client(&self) -> Result<deadpool_postgres::Object, SharedError> {
        self.pool.get().await.map_err(db)
    }

    fn stale_secs(&self) -> f64 {
        self.stale.as_secs_f64()
    }

    /// Records this replica alive, running `queries` (a JSON array).
    pub async fn heartbeat(&self, queries: &str) -> Result<(), SharedError> {
        self.client()
            .await?
            .execute(
                "INSERT INTO duckgate_replicas (replica, heartbeat, queries, lock_key, release)
                 VALUES ($1, clock_timestamp(), $2::text::jsonb, $3, $4)
                 ON CONFLICT (replica) DO UPDATE SET heartbeat = clock_timestamp(), queries = excluded.queries",
                &[&self.replica, &queries, &self.lock_key, &env!("CARGO_PKG_VERSION")],
            )
            .await
            .map_err(db)?;
        Ok(())
    }

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
                    "{} WHERE s.id = $2 AND ($3::text IS NULL OR s.token = $3) ORDER BY s.token",
                    row_sql()
                ),
                &[&self.stale_secs(), &id, &token],
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
                &format!("{} WHERE ($2::text IS NULL OR s.token = $2)", row_sql()),
                &[&self.stale_secs(), &token],
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
                 VALUES ($2, $3, $4, $5)
                 ON CONFLICT (token, id) DO UPDATE
                    SET replica = excluded.replica, nonce = excluded.nonce, started = now()
                 WHERE q.replica = $3 OR NOT EXISTS (
                    SELECT 1 FROM duckgate_replicas r WHERE r.replica = q.replica AND {ALIVE})"
                ),
                &[&self.stale_secs(), &token, &id, &self.replica, &nonce],
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

    /// The queries the other live replicas run: (replica, its JSON list).
    pub async fn others_queries(&self) -> Result<Vec<(String, String)>, SharedError> {
        let rows = self
            .client()
            .await?
            .query(
                &format!(
                    "SELECT r.replica, r.queries::text FROM duckgate_replicas r
                     WHERE r.replica <> $2 AND {ALIVE} ORDER BY r.replica"
                ),
                &[&self.stale_secs(), &self.replica],
            )
            .await
            .map_err(db)?;
        Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
    }

    /// Housekeeping any replica may do: statements whose owner died before
    /// they finished become `lost` (kept a TTL, then forgotten); succeeded
    /// ones past their expiry become `expired` (their result URLs are
    /// returned for removal); expired and lost ones are forgotten a TTL
    /// later; cancels addressed to dead replicas and replicas gone for a
    /// day are dropped.
    pub async fn sweep(&self, ttl: Duration) -> Result<Vec<String>, SharedError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(db)?;
        let stale = self.stale_secs();
        let ttl = ttl.as_secs_f64();
        tx.execute(
            &format!(
                "UPDATE duckgate_statements s SET state = 'lost',
                    status = jsonb_set(s.status, '{{state}}', '\"lost\"'),
                    expires_at = now() + make_interval(secs => $2::float8)
                 WHERE s.state IN ('queued', 'running') AND NOT EXISTS (
                    SELECT 1 FROM duckgate_replicas r WHERE r.replica = s.replica AND {ALIVE})"
            ),
            &[&stale, &ttl],
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
                "DELETE FROM duckgate_cancels c WHERE NOT EXISTS (
                    SELECT 1 FROM duckgate_replicas r WHERE r.replica = c.replica AND {ALIVE})"
            ),
            &[&stale],
        )
        .await
        .map_err(db)?;
        tx.execute(
            &format!(
                "DELETE FROM duckgate_query_ids q WHERE NOT EXISTS (
                    SELECT 1 FROM duckgate_replicas r WHERE r.replica = q.replica AND {ALIVE})"
            ),
            &[&stale],
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
        Ok(expired.iter().filter_map(|r| r.get(0)).collect())
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
                &format!(
                    "INSERT INTO duckgate_commands (id, replica, command, argument)
                     SELECT $2, r.replica, $3, $4 FROM duckgate_replicas r
                     WHERE r.replica <> $5 AND {ALIVE}
                     RETURNING replica"
                ),
                &[&self.stale_secs(), &id, &command, &argument, &self.replica],
            )
            .await
            .map_err(db)?;
        Ok((id, rows.iter().map(|r| r.get(0)).collect()))
    }

    /// The commands other replicas asked of this one and nobody took yet
    /// (taken now: each runs once): id, command, argument.
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

    /// The answers to command `id` so far: replica, answer (`None` while
    /// it has not answered).
    pub async fn command_answers(
        &self,
        id: &str,
    ) -> Result<Vec<(String, Option<serde_json::Value>)>, SharedError> {
        let client = self.client().await?;
        let rows = client
            .query(
                "SELECT replica, result::text FROM duckgate_commands WHERE id = $1 ORDER BY replica",
                &[&id],
            )
            .await
            .map_err(db)?;
        Ok(rows
            .iter()
            .map(|r| {
                let text: Option<String> = r.get(1);
                (r.get(0), text.and_then(|t| serde_json::from_str(&t).ok()))
            })
            .collect())
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
