//! The door's one way into the gateway: who a credential is, running and
//! describing a statement for an identity, cancelling it. Everything the
//! door does with the core passes here, so the rest of `src/pg` is protocol
//! translation only and imports nothing of the other doors.
//!
//! It runs statements through the core's Arrow answer
//! ([`crate::core::answer`]: registration listed in `GET /queries`,
//! cancellable, audited with `api=pg`, the limits, the guard and the
//! grants, the credentials retry), as the Flight SQL door does, and decides
//! identities with the one protocol-neutral
//! [`crate::identity::Authenticator`], so a token works and fails alike on
//! every door.

use std::sync::Arc;

use secrecy::{ExposeSecret, SecretString};

pub use crate::core::answer::{Answer, Started};
pub use crate::core::state::AppState as State;
pub use crate::encode::DUCKDB_TYPE_KEY;
pub use crate::engine::execute::describe::Described;
pub use crate::engine::queries::Running;
pub use crate::engine::Param;
pub use crate::problems::Problem;

use crate::core::answer::{self, Failed, Options};

/// Who runs statements on a connection.
pub type Identity = crate::identity::Identity;

/// The audit and `GET /queries` label of statements run through the door.
pub const API: &str = "pg";
/// The label of statements only described (a `Describe` of a prepared
/// statement): bound by DuckDB, never run.
pub const API_DESCRIBE: &str = "pg-describe";

/// Why a statement failed, as the gateway's problem (its slug, DuckDB's
/// error class and place in the SQL); never a secret or the cause of an
/// internal error (that goes to the log).
#[derive(Debug, Clone)]
pub struct Failure {
    /// The problem an HTTP client would read.
    pub problem: Box<Problem>,
}

impl From<Failed> for Failure {
    fn from(f: Failed) -> Self {
        if let crate::core::Error::Internal(cause) | crate::core::Error::SharedState(cause) =
            f.error.as_ref()
        {
            tracing::error!(error = %cause, query_id = ?f.query_id, "PostgreSQL door: statement failed");
        }
        let mut problem = f.error.problem();
        problem.query_id = f.query_id;
        Failure {
            problem: Box::new(problem),
        }
    }
}

/// Whether the gateway serves without credentials (no query token, no OIDC).
pub fn anonymous(state: &State) -> bool {
    state.identities.directory().tokens.anonymous
}

/// The identity a bearer credential (a query token or an OIDC JWT) stands
/// for, checked as HTTP checks `Authorization: Bearer`; `None`: refused.
pub async fn identify(state: &State, credential: &[u8]) -> Option<Identity> {
    state
        .identities
        .identify(Some(credential.trim_ascii()))
        .await
        .ok()
}

/// The anonymous caller of a gateway that needs no credentials.
pub async fn anonymous_identity(state: &State) -> Option<Identity> {
    state.identities.identify(None).await.ok()
}

/// The secret of the query token named `name` (SCRAM needs the password of
/// the user it is told); `None`: no such token.
pub fn token_named(state: &State, name: &str) -> Option<SecretString> {
    state
        .identities
        .directory()
        .tokens
        .query
        .iter()
        .find(|t| t.name.as_ref() == name)
        .map(|t| SecretString::from(t.secret.expose_secret().to_string()))
}

/// The gateway's limit on a statement's time, for a session's
/// `statement_timeout` (0: the default), clamped to the gateway's maximum.
pub fn timeout_ms(state: &State, asked: Option<u64>) -> u64 {
    state
        .config
        .limits
        .query_timeout_ms(asked.filter(|t| *t > 0))
}

/// Whether the gateway's policy only reads.
pub fn read_only(state: &State) -> bool {
    state.engine.rules().policy == crate::config::Policy::ReadOnly
}

/// The DuckDB version the gateway embeds.
pub fn duckdb_version(state: &State) -> &str {
    &state.health.duckdb_version
}

/// Runs `sql` with `params` for `who`, within `timeout_ms` (0: the
/// default): returns once DuckDB has produced the result's schema.
pub async fn start(
    state: &State,
    who: &Identity,
    sql: String,
    params: Vec<Param>,
    timeout_ms: u64,
) -> Result<Started, Failure> {
    let options = Options {
        timeout_ms: (timeout_ms > 0).then_some(timeout_ms),
        max_rows: None,
    };
    Ok(answer::start(state, API, who, sql, params, options).await?)
}

/// Describes `sql` for `who` without running it: its result's and its
/// parameters' types as DuckDB binds them, after the guard.
pub async fn describe(
    state: &State,
    who: &Identity,
    sql: String,
    timeout_ms: u64,
) -> Result<Described, Failure> {
    let options = Options {
        timeout_ms: (timeout_ms > 0).then_some(timeout_ms),
        max_rows: None,
    };
    Ok(answer::describe(state, API_DESCRIBE, who, sql, options).await?)
}

/// The answer's batches; an error as the gateway's.
pub fn batches(
    answer: Answer,
) -> futures::stream::BoxStream<'static, Result<arrow::array::RecordBatch, Failure>> {
    use futures::StreamExt;
    answer.records().map(|r| r.map_err(Failure::from)).boxed()
}

/// Cancels a running statement as `DELETE /queries/{id}` does.
pub fn cancel(state: &State, running: &Arc<Running>) {
    tracing::info!(query_id = %running.id, owner = %running.owner, by = "pg cancel request", "cancel requested");
    state.queries.cancel(running);
}

/// A primary key, unique constraint, foreign key or CHECK constraint of a
/// table (DuckDB's
/// `duckdb_constraints()`), as [`keys`] lists them.
#[derive(Debug, Clone)]
pub struct Key {
    /// The table's catalog.
    pub database: String,
    /// The table's schema.
    pub schema: String,
    /// The table.
    pub table: String,
    /// The table's oid (`pg_class.oid`).
    pub table_oid: i64,
    /// The schema's oid (`pg_namespace.oid`).
    pub schema_oid: i64,
    /// The constraint's place among the table's.
    pub index: i64,
    /// PostgreSQL's `contype`: `p` (primary key), `u` (unique), `f`
    /// (foreign key), `c` (CHECK).
    pub contype: char,
    /// DuckDB's name of it (`orders_id_pkey`).
    pub name: String,
    /// Its columns, in order.
    pub columns: Vec<String>,
    /// Their places in the table, from 1 (`pg_attribute.attnum`).
    pub attnums: Vec<i64>,
    /// DuckDB's text of it (`FOREIGN KEY (pid) REFERENCES p(id)`).
    pub text: String,
    /// What a foreign key references: the key of the other table it
    /// points at, and its columns' places there.
    pub references: Option<Reference>,
}

/// The key a foreign key references.
#[derive(Debug, Clone)]
pub struct Reference {
    /// The referenced table's oid (`confrelid`).
    pub table_oid: i64,
    /// The referenced key's place among its table's (its index is
    /// PostgreSQL's `conindid`).
    pub key_index: i64,
    /// The referenced columns' places, from 1 (`confkey`).
    pub attnums: Vec<i64>,
}

/// The primary keys, unique constraints, foreign keys and CHECK
/// constraints of the tables
/// `who` may read, confined as every listing is: a table it may not read,
/// or a key over a column its grants hide, is not there, and neither is a
/// foreign key whose referenced table or columns are hidden (its text
/// names them).
pub async fn keys(state: &State, who: &Identity) -> Result<Vec<Key>, Failure> {
    const SQL: &str = "SELECT database_name, schema_name, table_name, table_oid, schema_oid, \
        constraint_index, constraint_type, constraint_name, \
        to_json(constraint_column_names)::VARCHAR, to_json(constraint_column_indexes)::VARCHAR, \
        constraint_text, referenced_table, to_json(referenced_column_names)::VARCHAR \
        FROM duckdb_constraints() WHERE constraint_type IN ('PRIMARY KEY', 'UNIQUE', 'FOREIGN KEY', 'CHECK') \
        ORDER BY ALL";
    let rows = crate::core::catalog::on_pooled(state, &who.name, |conn| {
        let mut stmt = conn.prepare(SQL)?;
        let rows = stmt.query_map([], |r| {
            let columns: String = r.get(8)?;
            let indexes: String = r.get(9)?;
            let kind: String = r.get(6)?;
            let referenced: Option<String> = r.get(11)?;
            let referenced_columns: Option<String> = r.get(12)?;
            let key = Key {
                database: r.get(0)?,
                schema: r.get(1)?,
                table: r.get(2)?,
                table_oid: r.get(3)?,
                schema_oid: r.get(4)?,
                index: r.get(5)?,
                contype: match kind.as_str() {
                    "PRIMARY KEY" => 'p',
                    "UNIQUE" => 'u',
                    "CHECK" => 'c',
                    _ => 'f',
                },
                name: r.get(7)?,
                columns: serde_json::from_str(&columns).unwrap_or_default(),
                attnums: serde_json::from_str::<Vec<i64>>(&indexes)
                    .unwrap_or_default()
                    .into_iter()
                    .map(|i| i + 1)
                    .collect(),
                text: r.get(10)?,
                references: None,
            };
            let target = referenced.map(|t| {
                let cols = referenced_columns
                    .and_then(|c| serde_json::from_str(&c).ok())
                    .unwrap_or_default();
                (t, cols)
            });
            Ok((key, target))
        })?;
        rows.collect::<duckdb::Result<Vec<KeyRow>>>()
    })
    .await
    .map_err(|e| Failure {
        problem: Box::new(e.problem()),
    })?;
    let mut keys = resolve_references(rows);
    if let Some(access) = &who.access {
        confine(&mut keys, access);
    }
    Ok(keys)
}

/// Keeps the keys over tables and columns `access` may read, and the
/// foreign keys whose referenced key stays too.
fn confine(keys: &mut Vec<Key>, access: &crate::engine::guard::access::Access) {
    let readable = |database: &str, schema: &str, table: &str, columns: &[String]| {
        access.sees(database, schema, table)
            && columns
                .iter()
                .all(|c| access.may_read_column(database, schema, table, c))
    };
    let visible: Vec<bool> = keys
        .iter()
        .map(|k| readable(&k.database, &k.schema, &k.table, &k.columns))
        .collect();
    // A foreign key stays only beside the key it references.
    let referenced_visible = |k: &Key| {
        k.references.as_ref().is_none_or(|r| {
            keys.iter()
                .zip(&visible)
                .any(|(t, &v)| v && t.table_oid == r.table_oid && t.index == r.key_index)
        })
    };
    let keep: Vec<bool> = keys
        .iter()
        .zip(&visible)
        .map(|(k, &v)| v && referenced_visible(k))
        .collect();
    let mut keep = keep.into_iter();
    keys.retain(|_| keep.next().unwrap_or(false));
}

/// A key as read, and for a foreign key the table and columns it names.
type KeyRow = (Key, Option<(String, Vec<String>)>);

/// Foreign keys tied to the primary key or unique constraint they
/// reference (DuckDB requires one, in the same schema, over the same
/// columns); one whose key is not found is left out.
fn resolve_references(rows: Vec<KeyRow>) -> Vec<Key> {
    let targets: Vec<Key> = rows
        .iter()
        .filter(|(k, _)| matches!(k.contype, 'p' | 'u'))
        .map(|(k, _)| k.clone())
        .collect();
    rows.into_iter()
        .filter_map(|(mut key, target)| {
            if key.contype != 'f' {
                return Some(key);
            }
            let (table, columns) = target?;
            let same_columns = |t: &Key| {
                t.columns.len() == columns.len() && columns.iter().all(|c| t.columns.contains(c))
            };
            let t = targets.iter().find(|t| {
                t.database == key.database
                    && t.schema == key.schema
                    && t.table == table
                    && same_columns(t)
            })?;
            let attnums = columns
                .iter()
                .map(|c| {
                    let at = t.columns.iter().position(|x| x == c).unwrap_or(0);
                    t.attnums[at]
                })
                .collect();
            key.references = Some(Reference {
                table_oid: t.table_oid,
                key_index: t.index,
                attnums,
            });
            Some(key)
        })
        .collect()
}
