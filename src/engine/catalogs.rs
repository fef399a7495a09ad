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

use std::path::PathBuf;

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
        let catalogs_dir = self.data_dir.join("catalogs");
        if catalogs_dir.exists() {
            // Views of an earlier run are rebuilt from the configuration.
            std::fs::remove_dir_all(&catalogs_dir).map_err(|source| EngineError::DataDir {
                path: catalogs_dir.clone(),
                source,
            })?;
        }
        let mut out = Vec::new();
        for spec in specs {
            let password = spec.password().map_err(|e| EngineError::Setup {
                step: "attach",
                message: e.message,
            })?;
            let fail = |what: &str, e: &dyn std::fmt::Display| EngineError::Setup {
                step: "attach",
                message: scrub(
                    &format!("catalog `{}`: {what}: {e}", spec.name),
                    password.as_ref(),
                ),
            };
            let name = sql_ident(&spec.name);
            let read_only = if spec.read_only { ", READ_ONLY" } else { "" };
            match spec.kind {
                CatalogKind::DuckLake => {
                    let mut options = format!(
                        "DATA_PATH {}",
                        sql_string(spec.data_path.as_deref().unwrap_or_default())
                    );
                    if let Some(pw) = &password {
                        let secret = password_secret_name(&spec.name);
                        // Never logged, and the message of a failure is not
                        // shown: it could quote the statement.
                        control
                            .execute_batch(&format!(
                                "CREATE OR REPLACE TEMPORARY SECRET {secret} \
                                 (TYPE postgres, PASSWORD {})",
                                sql_string(pw.expose_secret())
                            ))
                            .map_err(|_| EngineError::Setup {
                                step: "attach",
                                message: format!(
                                    "catalog `{}`: DuckDB refused the password secret",
                                    spec.name
                                ),
                            })?;
                        options.push_str(&format!(", META_SECRET {}", sql_string(&secret)));
                    }
                    control
                        .execute_batch(&format!(
                            "ATTACH {} AS {name} ({options}{read_only})",
                            sql_string(&spec.path)
                        ))
                        .map_err(|e| fail("ATTACH", &e))?;
                    // The lake's own record of where its files are wins over
                    // the declaration: check that one too.
                    let stored: Vec<String> = {
                        let mut stmt = control
                            .prepare(&format!(
                                "SELECT value FROM {}.ducklake_metadata \
                                 WHERE key = 'data_path' AND scope IS NULL",
                                sql_ident(&format!("{HIDDEN_PREFIX}{}", spec.name))
                            ))
                            .map_err(|e| fail("reading its data path", &e))?;
                        let rows = stmt
                            .query_map([], |r| r.get::<_, String>(0))
                            .map_err(|e| fail("reading its data path", &e))?;
                        rows.collect::<Result<_, _>>()
                            .map_err(|e| fail("reading its data path", &e))?
                    };
                    for path in stored.iter().filter(|p| p.starts_with("s3://")) {
                        check_in_scope(path, s3_prefixes)
                            .map_err(|m| fail("its stored data path", &m))?;
                    }
                }
                CatalogKind::Iceberg | CatalogKind::Delta => {
                    std::fs::create_dir_all(&catalogs_dir).map_err(|source| {
                        EngineError::DataDir {
                            path: catalogs_dir.clone(),
                            source,
                        }
                    })?;
                    let file = catalogs_dir.join(format!("{}.duckdb", spec.name));
                    let file = sql_string(&file.to_string_lossy());
                    let scan = match spec.kind {
                        CatalogKind::Iceberg => "iceberg_scan",
                        _ => "delta_scan",
                    };
                    control
                        .execute_batch(&format!(
                            "ATTACH {file} AS {name}; \
                             CREATE VIEW {name}.main.{name} AS SELECT * FROM {scan}({}); \
                             DETACH {name}; \
                             ATTACH {file} AS {name} (READ_ONLY)",
                            sql_string(&spec.path)
                        ))
                        .map_err(|e| {
                            let _ =
                                control.execute_batch(&format!("DETACH DATABASE IF EXISTS {name}"));
                            fail(scan, &e)
                        })?;
                }
                CatalogKind::DuckDb => {
                    let options = if spec.read_only { " (READ_ONLY)" } else { "" };
                    control
                        .execute_batch(&format!(
                            "ATTACH {} AS {name}{options}",
                            sql_string(&spec.path)
                        ))
                        .map_err(|e| fail("ATTACH", &e))?;
                }
            }
            tracing::info!(catalog = %spec.name, kind = spec.kind.as_str(), read_only = spec.read_only, "catalog attached");
            out.push(Catalog {
                name: spec.name.clone(),
                kind: spec.kind,
                read_only: spec.read_only
                    || matches!(spec.kind, CatalogKind::Iceberg | CatalogKind::Delta),
            });
        }
        Ok(out)
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
