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

mod browse;
mod paths;
mod watch;

pub use browse::{
    current_snapshot, describe, list, objects, CatalogObject, ColumnEntry, DatabaseEntry,
    SchemaEntry, Snapshot, TableDetail, TableEntry,
};
pub use paths::StoredPath;
use paths::{check_stored_paths, stored_paths};
pub use watch::watch;

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
}
