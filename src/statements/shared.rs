//! The state several replicas share, in PostgreSQL (`DUCKGATE_STATE_DSN`):
//! every statement's row (owner replica, token, state, status document,
//! result metadata, expiry), every replica's heartbeat with the list of
//! queries it runs, and cancel requests addressed to a replica. Replicas
//! never talk to each other: what one must know of another is read here,
//! and the owner of a statement or query polls for what others asked of it.

use std::collections::HashMap;
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

/// A replica is alive while its row is in `duckgate_replicas`. The row
/// goes when the replica leaves (a clean shutdown) or when another replica
/// takes it for dead ([`Shared::declare_dead`]): its heartbeat made no
/// progress for longer than the staleness, seen twice, a moment apart
/// ([`Watch`]). Neither a slow or locked PostgreSQL (every heartbeat is
/// late alike, and the first one after the wait moves the row on), nor an
/// idle connection cut by a middlebox (the heartbeat's session is never
/// idle), nor a frozen process whose sessions stay open (its heartbeat
/// stops) fakes it. A live replica whose row was removed writes it again
/// at its next beat; what it ran meanwhile stays lost.
const ALIVE: &str = "EXISTS (SELECT 1 FROM duckgate_replicas r WHERE r.replica = {} )";

/// [`ALIVE`] for the replica named by `column`.
fn alive(column: &str) -> String {
    ALIVE.replace("{}", column)
}

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

/// How long opening a pooled session may take (see [`Shared::connect`]).
const CREATE_TIMEOUT: Duration = Duration::from_secs(20);

/// The heartbeat: the replica's row, its time by the database's clock at
/// the moment of writing, the queries it runs. Written again in full if
/// another replica took this one for dead meanwhile.
const HEARTBEAT: &str = "INSERT INTO duckgate_replicas (replica, heartbeat, queries, release)
    VALUES ($1, clock_timestamp(), $2::text::jsonb, $3)
    ON CONFLICT (replica) DO UPDATE SET heartbeat = clock_timestamp(), queries = excluded.queries";

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
    /// A replica whose heartbeat made no progress for this long (seen
    /// twice, a moment apart) is taken for dead.
    pub stale: Duration,
    /// How to open the heartbeat's own session ([`Shared::beat`]).
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
        config.connect_timeout(Duration::from_secs(10));
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
            // A new session takes four or five round trips (TLS or its
            // refusal, start-up, SCRAM): 6 s at 1.5 s a round trip.
            .create_timeout(Some(CREATE_TIMEOUT))
            .runtime(deadpool_postgres::Runtime::Tokio1)
            .build()
            .map_err(db)?;
        let shared = Shared {
            pool,
            unreleased: std::sync::Mutex::new(Vec::new()),
            replica,
            stale,
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

    async fn client(&self) -> Result<deadpool_postgres::Object, SharedError> {
        self.pool.get().await.map_err(db)
    }

    fn stale_secs(&self) -> f64 {
        self.stale.as_secs_f64()
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
                "SELECT r.replica, r.queries::text FROM duckgate_replicas r
                 WHERE r.replica <> $1 ORDER BY r.replica",
                &[&self.replica],
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
