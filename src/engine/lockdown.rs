//! The lockdown under the guard: the guard's rules fixed, then DuckDB's own
//! walls (allowed paths and directories, external access off, the
//! configuration locked).

use std::sync::Arc;

use super::{guard, pipe, sql_string, Engine, EngineError};

impl Engine {
    /// Defense in depth under the guard: queries may touch only the readable
    /// directory and the configured S3 prefixes, and nothing may change a
    /// setting afterwards. The order matters: allowed directories can only be
    /// set while external access is on. `catalog_dirs`: local directories
    /// that declared catalogs read ([`catalogs`]), which clients reach only
    /// through those catalogs.
    pub fn lock_down(
        &self,
        s3_prefixes: &[String],
        catalog_dirs: &[String],
        s3_refused: &[String],
        writable_catalogs: &[String],
    ) -> Result<(), EngineError> {
        let files = format!("{}/", self.files_dir.display());
        let scope: Vec<String> = s3_prefixes
            .iter()
            .map(|p| {
                if p.ends_with('/') {
                    p.clone()
                } else {
                    format!("{p}/")
                }
            })
            .collect();
        let client_schema = self.client_schema_with_databases()?;
        let writable = match &client_schema {
            Some(home) => std::iter::once(home.database.clone())
                .chain(writable_catalogs.iter().cloned())
                .collect(),
            None => Vec::new(),
        };
        let _ = self.rules.set(Arc::new(guard::Rules {
            policy: self.policy,
            client_schema,
            writable,
            paths: guard::paths::PathRules {
                files_dir: Some(files.clone()),
                s3: !scope.is_empty(),
                s3_scope: scope,
                s3_refused: s3_refused.to_vec(),
                redacted: false,
            },
            access: None,
            confined_plans: self.confined_plans,
        }));
        self.lock_settings(files, s3_prefixes, catalog_dirs)
    }

    /// The client schema with every database attached now (declared
    /// catalogs are attached by now, and clients cannot attach).
    fn client_schema_with_databases(&self) -> Result<Option<guard::ClientSchema>, EngineError> {
        let Some(mut home) = self.client_schema.clone() else {
            return Ok(None);
        };
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        home.databases = control
            .prepare("SELECT database_name FROM duckdb_databases()")
            .and_then(|mut s| {
                s.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<Result<Vec<_>, _>>()
            })
            .map_err(|e| EngineError::Setup {
                step: "client schema",
                message: e.to_string(),
            })?;
        Ok(Some(home))
    }

    /// DuckDB's own walls: the paths and directories it may touch, external
    /// access off, the configuration locked, in that order.
    fn lock_settings(
        &self,
        files: String,
        s3_prefixes: &[String],
        catalog_dirs: &[String],
    ) -> Result<(), EngineError> {
        let control = self.control.lock().unwrap_or_else(|p| p.into_inner());
        let mut allowed: Vec<String> = vec![files];
        allowed.extend(s3_prefixes.iter().cloned());
        allowed.extend(catalog_dirs.iter().cloned());
        let list = allowed
            .iter()
            .map(|p| sql_string(p))
            .collect::<Vec<_>>()
            .join(", ");
        for (step, sql) in [
            (
                "allowed_paths",
                format!(
                    "SET allowed_paths = [{}, {}]",
                    sql_string(pipe::CopyFormat::Csv.target()),
                    sql_string(pipe::CopyFormat::Parquet.target())
                ),
            ),
            (
                "allowed_directories",
                format!("SET allowed_directories = [{list}]"),
            ),
            (
                "enable_external_access",
                "SET enable_external_access = false".to_string(),
            ),
            (
                "lock_configuration",
                "SET lock_configuration = true".to_string(),
            ),
        ] {
            control
                .execute_batch(&sql)
                .map_err(|e| EngineError::Setup {
                    step,
                    message: e.to_string(),
                })?;
        }
        Ok(())
    }
}
