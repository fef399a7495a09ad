//! Operator-declared catalogs (`[[attach]]`): attached once at start through
//! the control connection, after the S3 secrets exist and before the
//! lockdown (ATTACH needs external access, and clients may never run it).
//!
//! - DuckLake: `ATTACH 'ducklake:...' (DATA_PATH ..., META_SECRET ...)`. The
//!   catalog password lives in a temporary `postgres` secret that only the
//!   metadata connection names: no ATTACH text, no `duckdb_databases()` row
//!   and no error message holds it, and `duckdb_secrets()` (refused to
//!   clients anyway) shows it redacted.
//! - Iceberg, Delta: one table each, a view over `iceberg_scan`/`delta_scan`
//!   of the table root in a small DuckDB file of the gateway's, attached
//!   read-only; the view binds at each query, so each query reads the
//!   table's latest snapshot.
//! - DuckDB: the file, attached as it is.

use std::path::{Path, PathBuf};

use secrecy::{ExposeSecret, SecretString};

use super::{sql_string, Engine, EngineError, EXTENSION_SUBDIR};
use crate::config::attach::{check_in_scope, AttachSpec, CatalogKind};
use crate::config::Config;

/// The name prefix of the metadata database DuckLake attaches beside each
/// lake (`__ducklake_metadata_<lake>`), which clients never reach.
pub const HIDDEN_PREFIX: &str = "__ducklake_metadata_";

/// A catalog the gateway attached, as `GET /catalog` describes it.
#[derive(Debug, Clone)]
pub struct Catalog {
    /// The database name queries use.
    pub name: String,
    /// What it is.
    pub kind: CatalogKind,
    /// Whether clients may only read it.
    pub read_only: bool,
    /// DuckLake only: its metadata path (`ducklake:postgres:dbname=...`),
    /// which never holds a password (the configuration refuses one).
    pub metadata: Option<String>,
    /// Where its data lies: a DuckLake's data path as its metadata records
    /// it, an Iceberg or Delta table's root, a DuckDB file.
    pub location: String,
}

/// The DuckDB secret that holds a catalog's password.
fn password_secret_name(catalog: &str) -> String {
    format!("duckgate_catalog_{}", catalog.to_ascii_lowercase())
}

/// Quotes an identifier.
pub fn sql_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Removes `password` from a message DuckDB or a driver wrote, in case one
/// ever echoes the text it was given.
fn scrub(message: &str, password: Option<&SecretString>) -> String {
    match password.map(|p| p.expose_secret()) {
        Some(p) if !p.is_empty() => message.replace(p, "[redacted]"),
        _ => message.to_string(),
    }
}

/// A path a DuckLake's metadata records for one of its tables, or for one
/// of that table's data or delete files, with what each part is relative to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct StoredPath {
    /// `schema.table`.
    pub table: String,
    /// The schema's path; `true` when relative to the lake's data path.
    pub schema_path: (String, bool),
    /// The table's path; `true` when relative to the schema's.
    pub table_path: (String, bool),
    /// A file's path; `true` when relative to the table's. `None`: the
    /// table itself.
    pub file: Option<(String, bool)>,
}

/// Joins a relative DuckLake path onto the directory it is relative to.
fn join(base: &str, relative: &str) -> String {
    if base.is_empty() || base.ends_with('/') {
        format!("{base}{relative}")
    } else {
        format!("{base}/{relative}")
    }
}

fn resolve(base: &str, (path, relative): &(String, bool)) -> String {
    if *relative {
        join(base, path)
    } else {
        path.clone()
    }
}

/// The paths of a lake's tables, and of those of its files that could lie
/// outside their table's directory: absolute ones, and relative ones with
/// a `..` segment, a scheme or characters [`check_in_scope`] refuses. A
/// plain relative file name stays inside its table's directory, which is
/// checked itself, so a lake of a million files sends back few rows.
/// Every version of every table counts, not only the current snapshot's:
/// time travel reads the older ones.
fn stored_paths(conn: &super::ffi::Connection, metadata: &str) -> duckdb::Result<Vec<StoredPath>> {
    let mut stmt = conn.prepare(&format!(
        "SELECT DISTINCT s.schema_name, t.table_name, \
             coalesce(s.path, ''), coalesce(s.path_is_relative, true), \
             coalesce(t.path, ''), coalesce(t.path_is_relative, true), \
             f.path, coalesce(f.path_is_relative, true) \
         FROM {metadata}.ducklake_table t \
         JOIN {metadata}.ducklake_schema s ON s.schema_id = t.schema_id \
         LEFT JOIN (SELECT table_id, path, path_is_relative FROM {metadata}.ducklake_data_file \
                    UNION ALL \
                    SELECT table_id, path, path_is_relative FROM {metadata}.ducklake_delete_file) f \
           ON f.table_id = t.table_id \
          AND (NOT coalesce(f.path_is_relative, true) \
               OR regexp_matches(f.path, '(^|/)\\.\\.?(/|$)|[?#\\\\]|^[A-Za-z0-9+.-]+:'))"
    ))?;
    let rows = stmt.query_map([], |r| {
        let file: Option<String> = r.get(6)?;
        Ok(StoredPath {
            table: format!("{}.{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?),
            schema_path: (r.get(2)?, r.get(3)?),
            table_path: (r.get(4)?, r.get(5)?),
            file: match file {
                Some(f) => Some((f, r.get(7)?)),
                None => None,
            },
        })
    })?;
    rows.collect()
}

/// Whether the gateway may read `path`: on S3 inside a secret's scope, or
/// on local disk inside a directory (or file) a declared catalog names.
fn within_reach(path: &str, s3_prefixes: &[String], local_dirs: &[String]) -> Result<(), String> {
    if path.starts_with("s3://") {
        return check_in_scope(path, s3_prefixes);
    }
    let local = path.starts_with('/')
        && !path.split('/').any(|seg| seg == ".." || seg == ".")
        && local_dirs
            .iter()
            .any(|d| path == d || (d.ends_with('/') && path.starts_with(d.as_str())));
    if local {
        Ok(())
    } else if path.starts_with('/') {
        Err(format!(
            "{path} lies outside every local directory of a declared catalog"
        ))
    } else {
        Err(format!(
            "{path} is neither on S3 inside a configured secret's scope ({}) nor an absolute \
             local path",
            s3_prefixes.join(", ")
        ))
    }
}

/// Checks every path of `paths`, resolved against the lake's `data_path`:
/// the error names each table and file outside the gateway's reach (the
/// first five, and how many more).
fn check_stored_paths(
    data_path: &str,
    paths: &[StoredPath],
    s3_prefixes: &[String],
    local_dirs: &[String],
) -> Result<(), String> {
    let mut refused: Vec<String> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for p in paths {
        let table_dir = resolve(&resolve(data_path, &p.schema_path), &p.table_path);
        let (what, path) = match &p.file {
            None => ("its path", table_dir),
            Some(file) => ("file", resolve(&table_dir, file)),
        };
        if !seen.insert((p.table.clone(), path.clone())) {
            continue;
        }
        if let Err(why) = within_reach(&path, s3_prefixes, local_dirs) {
            refused.push(format!("table {}: {what} {why}", p.table));
        }
    }
    match refused.len() {
        0 => Ok(()),
        n => {
            let mut message = refused[..n.min(5)].join("; ");
            if n > 5 {
                message.push_str(&format!("; and {} more", n - 5));
            }
            Err(message)
        }
    }
}

impl Engine {
    /// Loads what the declared catalogs need from the extension directory
    /// and attaches each. `s3_prefixes`: what the S3 secrets serve, which
    /// every S3 location a catalog reaches must lie in.
    pub fn attach_catalogs(
        &self,
        config: &Config,
        specs: &[AttachSpec],
        s3_prefixes: &[String],
    ) -> Result<Vec<Catalog>, EngineError> {
        if specs.is_empty() {
            return Ok(Vec::new());
        }
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        load_catalog_extensions(&control, config, specs)?;
        let catalogs_dir = self.data_dir.join("catalogs");
        if catalogs_dir.exists() {
            // Views of an earlier run are rebuilt from the configuration.
            std::fs::remove_dir_all(&catalogs_dir).map_err(|source| EngineError::DataDir {
                path: catalogs_dir.clone(),
                source,
            })?;
        }
        // What DuckDB's lock-down lets catalogs read on local disk.
        let local_dirs: Vec<String> = specs.iter().flat_map(|s| s.local_dirs()).collect();
        let mut out = Vec::new();
        for spec in specs {
            let password = spec.password().map_err(|e| EngineError::Setup {
                step: "attach",
                message: e.message,
            })?;
            let attach = Attach {
                control: &control,
                spec,
                password: password.as_ref(),
                name: sql_ident(&spec.name),
            };
            let location = match spec.kind {
                CatalogKind::DuckLake => self.attach_ducklake(&attach, s3_prefixes, &local_dirs)?,
                CatalogKind::Iceberg | CatalogKind::Delta => attach.scan_view(&catalogs_dir)?,
                CatalogKind::Sources => attach.sources(&catalogs_dir)?,
                CatalogKind::DuckDb => {
                    let options = if spec.read_only { " (READ_ONLY)" } else { "" };
                    attach.run(
                        format!(
                            "ATTACH {} AS {}{options}",
                            sql_string(&spec.path),
                            attach.name
                        ),
                        "ATTACH",
                    )?;
                    spec.path.clone()
                }
            };
            tracing::info!(catalog = %spec.name, kind = spec.kind.as_str(), read_only = spec.read_only, "catalog attached");
            out.push(Catalog {
                name: spec.name.clone(),
                kind: spec.kind,
                read_only: spec.read_only
                    || matches!(
                        spec.kind,
                        CatalogKind::Iceberg | CatalogKind::Delta | CatalogKind::Sources
                    ),
                metadata: (spec.kind == CatalogKind::DuckLake).then(|| spec.path.clone()),
                location,
            });
        }
        Ok(out)
    }

    /// Attaches a DuckLake (its metadata password through DuckDB's secret
    /// manager) and checks that every data path its metadata records lies
    /// within the gateway's reach; its location is its data path.
    fn attach_ducklake(
        &self,
        attach: &Attach<'_>,
        s3_prefixes: &[String],
        local_dirs: &[String],
    ) -> Result<String, EngineError> {
        let (spec, name) = (attach.spec, &attach.name);
        let read_only = if spec.read_only { ", READ_ONLY" } else { "" };
        let mut options = format!(
            "DATA_PATH {}",
            sql_string(spec.data_path.as_deref().unwrap_or_default())
        );
        if let Some(pw) = attach.password {
            let secret = password_secret_name(&spec.name);
            // Through DuckDB's secret manager, not SQL text: no statement
            // DuckDB could log holds the password, and the error names
            // DuckDB's error class only.
            let raw = self.control_raw.lock().unwrap_or_else(|p| p.into_inner());
            crate::engine::secrets::install_postgres_password(&raw, &secret, pw.expose_secret())
                .map_err(|e| EngineError::Setup {
                    step: "attach",
                    message: format!("catalog `{}`: {e}", spec.name),
                })?;
            options.push_str(&format!(", META_SECRET {}", sql_string(&secret)));
        }
        attach
            .control
            .execute_batch(&format!(
                "ATTACH {} AS {name} ({options}{read_only})",
                sql_string(&spec.path)
            ))
            .map_err(|e| attach.fail("ATTACH", &e))?;
        // The lake's own record of where its files are wins over the
        // declaration: check that one too, and every path its tables and
        // files record.
        let metadata = sql_ident(&format!("{HIDDEN_PREFIX}{}", spec.name));
        let stored: Vec<String> = {
            let mut stmt = attach
                .control
                .prepare(&format!(
                    "SELECT value FROM {metadata}.ducklake_metadata \
                     WHERE key = 'data_path' AND scope IS NULL"
                ))
                .map_err(|e| attach.fail("reading its data path", &e))?;
            let rows = stmt
                .query_map([], |r| r.get::<_, String>(0))
                .map_err(|e| attach.fail("reading its data path", &e))?;
            rows.collect::<Result<_, _>>()
                .map_err(|e| attach.fail("reading its data path", &e))?
        };
        for path in stored.iter().filter(|p| p.starts_with("s3://")) {
            check_in_scope(path, s3_prefixes)
                .map_err(|m| attach.fail("its stored data path", &m))?;
        }
        let data_path = stored
            .into_iter()
            .next()
            .or_else(|| spec.data_path.clone())
            .unwrap_or_default();
        let paths = stored_paths(attach.control, &metadata)
            .map_err(|e| attach.fail("reading the paths of its tables and files", &e))?;
        check_stored_paths(&data_path, &paths, s3_prefixes, local_dirs).map_err(|m| {
            attach.fail("its metadata records data outside the gateway's reach", &m)
        })?;
        tracing::debug!(catalog = %spec.name, checked = paths.len(), "stored paths checked");
        Ok(data_path)
    }
}

/// Loads, once each, the extensions the declared catalogs need, from the
/// extension directory (never downloaded).
fn load_catalog_extensions(
    control: &crate::engine::ffi::Connection,
    config: &Config,
    specs: &[AttachSpec],
) -> Result<(), EngineError> {
    let ext_dir = config.engine.extension_dir.clone().unwrap_or_else(|| {
        std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default()
            .join(".duckdb/extensions")
    });
    let mut loaded: Vec<&str> = Vec::new();
    for spec in specs {
        for ext in spec.kind.extensions(spec) {
            if loaded.contains(&ext) {
                continue;
            }
            let file = ext_dir
                .join(EXTENSION_SUBDIR)
                .join(format!("{ext}.duckdb_extension"));
            if !file.is_file() {
                return Err(EngineError::Setup {
                    step: "attach",
                    message: format!(
                        "catalog `{}` needs the {ext} extension: expected {} (install the \
                         duckdb-extension-{} 1.5.5 wheel's file there, as for httpfs)",
                        spec.name,
                        file.display(),
                        ext.replace('_', "-")
                    ),
                });
            }
            control
                .execute_batch(&format!("LOAD {ext}"))
                .map_err(|e| EngineError::Setup {
                    step: "attach",
                    message: format!("LOAD {ext}: {e}"),
                })?;
            loaded.push(ext);
        }
    }
    Ok(())
}

/// One declared catalog being attached on the control connection.
struct Attach<'a> {
    control: &'a crate::engine::ffi::Connection,
    spec: &'a AttachSpec,
    /// Its metadata database's password, kept out of every message.
    password: Option<&'a SecretString>,
    /// Its name, quoted as an identifier.
    name: String,
}

impl Attach<'_> {
    /// Start-up's refusal: what failed, with DuckDB's error, the password
    /// scrubbed from it.
    fn fail(&self, what: &str, e: &dyn std::fmt::Display) -> EngineError {
        EngineError::Setup {
            step: "attach",
            message: scrub(
                &format!("catalog `{}`: {what}: {e}", self.spec.name),
                self.password,
            ),
        }
    }

    /// Runs `sql`; on failure the catalog is detached again.
    fn run(&self, sql: String, what: &str) -> Result<(), EngineError> {
        self.control.execute_batch(&sql).map_err(|e| {
            let _ = self
                .control
                .execute_batch(&format!("DETACH DATABASE IF EXISTS {}", self.name));
            self.fail(what, &e)
        })
    }

    /// The database file of a catalog the gateway builds itself (views
    /// over a scan, or the named sources), under `catalogs_dir`.
    fn own_file(&self, catalogs_dir: &Path) -> Result<String, EngineError> {
        std::fs::create_dir_all(catalogs_dir).map_err(|source| EngineError::DataDir {
            path: catalogs_dir.to_path_buf(),
            source,
        })?;
        let file = catalogs_dir.join(format!("{}.duckdb", self.spec.name));
        Ok(sql_string(&file.to_string_lossy()))
    }

    /// An Iceberg or Delta table: one view over its scan, in a database of
    /// the gateway's own, attached read-only.
    fn scan_view(&self, catalogs_dir: &Path) -> Result<String, EngineError> {
        let (file, name) = (self.own_file(catalogs_dir)?, &self.name);
        let scan = match self.spec.kind {
            CatalogKind::Iceberg => "iceberg_scan",
            _ => "delta_scan",
        };
        self.run(
            format!(
                "ATTACH {file} AS {name}; \
                 CREATE VIEW {name}.main.{name} AS SELECT * FROM {scan}({}); \
                 DETACH {name}; \
                 ATTACH {file} AS {name} (READ_ONLY)",
                sql_string(&self.spec.path)
            ),
            scan,
        )?;
        Ok(self.spec.path.clone())
    }

    /// The named sources: one view per source, in a database file of its
    /// own, attached read-only. Creating a view binds its reader, so a
    /// source whose files cannot be read stops start-up.
    fn sources(&self, catalogs_dir: &Path) -> Result<String, EngineError> {
        let (file, name) = (self.own_file(catalogs_dir)?, &self.name);
        self.run(format!("ATTACH {file} AS {name}"), "ATTACH")?;
        for source in &self.spec.sources {
            self.run(
                format!(
                    "CREATE VIEW {name}.main.{} AS {}",
                    sql_ident(&source.name),
                    source.select()
                ),
                &format!("source `{}`", source.name),
            )?;
        }
        self.run(
            format!("DETACH {name}; ATTACH {file} AS {name} (READ_ONLY)"),
            "ATTACH",
        )?;
        Ok(String::new())
    }
}

/// One database clients can read, as `GET /catalog` lists it.
#[derive(Debug, Clone)]
pub struct DatabaseEntry {
    /// The name queries use.
    pub name: String,
    /// `ducklake`, `iceberg`, `delta`, `duckdb` (a declared catalog),
    /// `gateway` (the gateway's own database), `sources` (the named
    /// sources).
    pub kind: &'static str,
    /// Whether clients may only read it.
    pub read_only: bool,
    /// Its schemas, by name.
    pub schemas: Vec<SchemaEntry>,
}

/// One schema and its tables.
#[derive(Debug, Clone)]
pub struct SchemaEntry {
    /// The schema's name.
    pub name: String,
    /// Its tables and views, by name.
    pub tables: Vec<TableEntry>,
}

/// One table or view.
#[derive(Debug, Clone)]
pub struct TableEntry {
    /// Its name.
    pub name: String,
    /// `table` or `view`.
    pub kind: &'static str,
}

/// One column of a table.
#[derive(Debug, Clone)]
pub struct ColumnEntry {
    /// Its name.
    pub name: String,
    /// DuckDB's type, e.g. `DECIMAL(18,3)`.
    pub data_type: String,
    /// Whether it may hold NULL.
    pub nullable: bool,
}

/// A DuckLake snapshot.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Its id.
    pub id: i64,
    /// When it was committed (DuckDB's text of the timestamp).
    pub time: String,
    /// The lake's schema version at it.
    pub schema_version: i64,
}

/// One table in detail.
#[derive(Debug, Clone)]
pub struct TableDetail {
    /// The database's kind (as in [`DatabaseEntry::kind`]).
    pub database_kind: &'static str,
    /// `table` or `view`.
    pub kind: &'static str,
    /// Its columns, in order.
    pub columns: Vec<ColumnEntry>,
    /// DuckLake only: the current snapshot.
    pub snapshot: Option<Snapshot>,
}

/// The databases clients may name: the gateway's own and the declared
/// catalogs (never DuckDB's `system`/`temp`, nor a lake's metadata).
fn visible(
    conn: &super::ffi::Connection,
    declared: &[Catalog],
) -> duckdb::Result<Vec<(String, &'static str, bool)>> {
    let own: String = conn
        .prepare("SELECT current_database()")?
        .query_row([], |r| r.get(0))?;
    let mut out = vec![(own, "gateway", false)];
    out.extend(
        declared
            .iter()
            .map(|c| (c.name.clone(), c.kind.as_str(), c.read_only)),
    );
    Ok(out)
}

/// Every visible database with its schemas and tables, for `GET /catalog`.
pub fn list(
    conn: &super::ffi::Connection,
    declared: &[Catalog],
) -> duckdb::Result<Vec<DatabaseEntry>> {
    let mut out = Vec::new();
    for (name, kind, read_only) in visible(conn, declared)? {
        let mut schemas: Vec<SchemaEntry> = conn
            .prepare(
                "SELECT schema_name FROM duckdb_schemas() \
                 WHERE database_name = ? \
                 AND schema_name NOT IN ('information_schema', 'pg_catalog') ORDER BY schema_name",
            )?
            .query_map([&name], |r| r.get::<_, String>(0))?
            .map(|n| {
                n.map(|name| SchemaEntry {
                    name,
                    tables: Vec::new(),
                })
            })
            .collect::<Result<_, _>>()?;
        let mut stmt = conn.prepare(
            "SELECT schema_name, table_name, 'table' FROM duckdb_tables() \
             WHERE database_name = ? AND NOT internal AND NOT temporary \
             UNION ALL SELECT schema_name, view_name, 'view' FROM duckdb_views() \
             WHERE database_name = ? AND NOT internal AND NOT temporary ORDER BY 1, 2",
        )?;
        let tables = stmt.query_map([&name, &name], |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        for t in tables {
            let (schema, table, kind) = t?;
            let entry = TableEntry {
                name: table,
                kind: if kind == "view" { "view" } else { "table" },
            };
            match schemas.iter_mut().find(|s| s.name == schema) {
                Some(s) => s.tables.push(entry),
                None => schemas.push(SchemaEntry {
                    name: schema,
                    tables: vec![entry],
                }),
            }
        }
        out.push(DatabaseEntry {
            name,
            kind,
            read_only,
            schemas,
        });
    }
    Ok(out)
}

/// The current snapshot of the DuckLake attached as `database`.
pub fn current_snapshot(
    conn: &super::ffi::Connection,
    database: &str,
) -> duckdb::Result<Option<Snapshot>> {
    conn.prepare(
        "SELECT snapshot_id, CAST(snapshot_time AS VARCHAR), schema_version \
         FROM ducklake_snapshots(?) \
         WHERE snapshot_id = (SELECT id FROM ducklake_current_snapshot(?))",
    )?
    .query_map([database, database], |r| {
        Ok(Snapshot {
            id: r.get(0)?,
            time: r.get(1)?,
            schema_version: r.get(2)?,
        })
    })?
    .next()
    .transpose()
}

/// One table of a visible database, or `None` when there is no such table
/// a client could read.
pub fn describe(
    conn: &super::ffi::Connection,
    declared: &[Catalog],
    database: &str,
    schema: &str,
    table: &str,
) -> duckdb::Result<Option<TableDetail>> {
    let Some((database, database_kind, _)) = visible(conn, declared)?
        .into_iter()
        .find(|(name, _, _)| name.eq_ignore_ascii_case(database))
    else {
        return Ok(None);
    };
    let kind: Option<String> = conn
        .prepare(
            "SELECT 'table' FROM duckdb_tables() WHERE database_name = ? AND schema_name = ? \
             AND table_name = ? AND NOT temporary \
             UNION ALL SELECT 'view' FROM duckdb_views() WHERE database_name = ? \
             AND schema_name = ? AND view_name = ? AND NOT internal AND NOT temporary",
        )?
        .query_map([&database, schema, table, &database, schema, table], |r| {
            r.get::<_, String>(0)
        })?
        .next()
        .transpose()?;
    let Some(kind) = kind else {
        return Ok(None);
    };
    let columns = conn
        .prepare(
            "SELECT column_name, data_type, is_nullable FROM duckdb_columns() \
             WHERE database_name = ? AND schema_name = ? AND table_name = ? \
             ORDER BY column_index",
        )?
        .query_map([&database, schema, table], |r| {
            Ok(ColumnEntry {
                name: r.get(0)?,
                data_type: r.get(1)?,
                nullable: r.get(2)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let snapshot = if database_kind == "ducklake" {
        current_snapshot(conn, &database)?
    } else {
        None
    };
    Ok(Some(TableDetail {
        database_kind,
        kind: if kind == "view" { "view" } else { "table" },
        columns,
        snapshot,
    }))
}

/// How often a catalog kept in a database is read by [`watch`].
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
/// A probe read that takes longer is interrupted and counted as failing.
const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Watches the catalogs whose metadata is a database that can go down
/// while the gateway runs (a DuckLake's PostgreSQL): every few seconds,
/// reads each one's current snapshot on a connection of its own (never a
/// pooled one: the probe takes no client's capacity; never the control
/// connection: rotation never waits on it) and reports the dependency
/// `catalog:<name>` to the probes and `/metrics`. A read that takes longer
/// than its limit is interrupted and reported failing; while one is still
/// stuck, the next round reports failing without queuing another.
pub async fn watch(
    db: std::sync::Arc<super::ffi::RawDatabase>,
    catalogs: Vec<Catalog>,
    health: std::sync::Arc<crate::state::Health>,
    stop: tokio_util::sync::CancellationToken,
) {
    let probed: Vec<_> = catalogs
        .into_iter()
        .filter(|c| {
            c.kind == CatalogKind::DuckLake
                && c.metadata
                    .as_deref()
                    .is_some_and(|m| m.starts_with("ducklake:postgres:"))
        })
        .map(|c| (health.dependency(format!("catalog:{}", c.name)), c.name))
        .collect();
    if probed.is_empty() {
        return;
    }
    let conn = match db.connect() {
        Ok(c) => std::sync::Arc::new(std::sync::Mutex::new(c)),
        Err(e) => {
            tracing::error!(error.cause = %e, "no connection for the catalog probe");
            return;
        }
    };
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_EVERY) => {}
        }
        if running.as_ref().is_some_and(|r| !r.is_finished()) {
            for (dep, _) in &probed {
                dep.failed("the previous probe of the catalog has not answered");
            }
            continue;
        }
        let (conn, each) = (conn.clone(), probed.clone());
        let interrupt = conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .interrupt_handle();
        let task = tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            for (dep, name) in &each {
                match current_snapshot(&conn, name) {
                    Ok(_) => dep.ok(),
                    Err(e) => dep.failed(&super::errors::scrub_dsn(&e.to_string())),
                }
            }
        });
        running = Some(task);
        let finished = tokio::time::timeout(PROBE_LIMIT, async {
            if let Some(r) = running.as_mut() {
                let _ = r.await;
            }
        })
        .await;
        if finished.is_err() {
            interrupt.interrupt();
            for (dep, _) in &probed {
                dep.failed("the catalog's database did not answer within 5 s");
            }
        } else {
            running = None;
        }
    }
}

/// Every schema, table and view clients can query ([`list`]), with each
/// table's and view's columns: what roles' grants are checked against at
/// start-up.
pub fn objects(
    conn: &super::ffi::Connection,
    declared: &[Catalog],
) -> duckdb::Result<Vec<CatalogObject>> {
    let mut out = Vec::new();
    for database in list(conn, declared)? {
        for schema in database.schemas {
            out.push(CatalogObject {
                catalog: database.name.clone(),
                schema: schema.name.clone(),
                ..Default::default()
            });
            for table in schema.tables {
                let columns = conn
                    .prepare(
                        "SELECT column_name FROM duckdb_columns() WHERE database_name = ? \
                         AND schema_name = ? AND table_name = ? ORDER BY column_index",
                    )?
                    .query_map([&database.name, &schema.name, &table.name], |r| {
                        r.get::<_, String>(0)
                    })?
                    .collect::<Result<_, _>>()?;
                out.push(CatalogObject {
                    catalog: database.name.clone(),
                    schema: schema.name.clone(),
                    name: table.name,
                    columns,
                    view: table.kind == "view",
                });
            }
        }
    }
    Ok(out)
}

/// A table, view or schema of the catalog (a schema: empty name), with
/// its columns.
#[derive(Debug, Clone, Default)]
pub struct CatalogObject {
    /// Its database.
    pub catalog: String,
    /// Its schema.
    pub schema: String,
    /// Its name; empty for the schema itself.
    pub name: String,
    /// Its columns.
    pub columns: Vec<String>,
    /// Whether it is a view (a named source is one).
    pub view: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_removes_the_password() {
        let pw = SecretString::from("s3cr3t".to_string());
        assert_eq!(
            scrub("password=s3cr3t failed", Some(&pw)),
            "password=[redacted] failed"
        );
        assert_eq!(scrub("x", None), "x");
    }

    fn table(schema: (&str, bool), table: (&str, bool), file: Option<(&str, bool)>) -> StoredPath {
        StoredPath {
            table: "main.t".into(),
            schema_path: (schema.0.into(), schema.1),
            table_path: (table.0.into(), table.1),
            file: file.map(|(f, r)| (f.into(), r)),
        }
    }

    #[test]
    fn stored_paths_resolve_against_the_data_path_and_stay_in_scope() {
        let scope = vec!["s3://data/lake/".to_string()];
        let local = vec!["/srv/lake/".to_string()];
        let ok = |p: &[StoredPath]| check_stored_paths("s3://data/lake/", p, &scope, &local);
        assert_eq!(ok(&[table(("main/", true), ("t/", true), None)]), Ok(()));
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("f.parquet", true))
            )]),
            Ok(())
        );
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("s3://data/lake/x/f.parquet", false))
            )]),
            Ok(())
        );
        assert_eq!(
            ok(&[table(
                ("main/", true),
                ("t/", true),
                Some(("/srv/lake/f.parquet", false))
            )]),
            Ok(())
        );
        for (bad, names) in [
            (
                table(("s3://other/", false), ("t/", true), None),
                "s3://other/t/",
            ),
            (
                table(("main/", true), ("s3://data/elsewhere/", false), None),
                "s3://data/elsewhere/",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("s3://other/f.parquet", false)),
                ),
                "s3://other/f.parquet",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("../../../x/f.parquet", true)),
                ),
                "s3://data/lake/main/t/../../../x/f.parquet",
            ),
            (
                table(("main/", true), ("t/", true), Some(("/etc/passwd", false))),
                "/etc/passwd",
            ),
            (
                table(
                    ("main/", true),
                    ("t/", true),
                    Some(("gs://b/f.parquet", false)),
                ),
                "gs://b/f.parquet",
            ),
        ] {
            let e = ok(std::slice::from_ref(&bad)).unwrap_err();
            assert!(
                e.contains("table main.t") && e.contains(names),
                "{bad:?}: {e}"
            );
        }
        let many: Vec<StoredPath> = (0..8)
            .map(|i| {
                let f = format!("s3://other/{i}.parquet");
                table(("main/", true), ("t/", true), Some((f.as_str(), false)))
            })
            .collect();
        let e = ok(&many).unwrap_err();
        assert!(e.contains("and 3 more") && !e.contains("5.parquet"), "{e}");
    }
}
