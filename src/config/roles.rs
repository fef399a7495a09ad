//! Roles: `[[role]]` tables of the TOML file (`--config`), each granting
//! reading and writing catalog objects to its members (query tokens by
//! name, OIDC identities as `oidc:<sub>`) and to JWTs whose roles claim
//! names it. What a grant means is [`crate::engine::guard::access`]'s;
//! here they are read and checked for form. Whether each grant names
//! something that exists is checked once the catalogs are attached
//! ([`crate::identity::roles::Roles::check_against`]).
//!
//! ```toml
//! [[role]]
//! name = "analyst"
//! members = ["alice", "oidc:bob"]
//! read = ["memory.main.orders", "lake.sales.*"]
//! write = ["memory.client.*"]
//! [role.columns]
//! "memory.main.customers" = ["id", "country"]
//! [role.rows]
//! "memory.main.orders" = "tenant_id = claim('tenant')"
//! [role.masks."memory.main.customers"]
//! email = "NULL"
//! [role.limits]
//! max_rows = 100000
//! queries_at_once = 4
//! ```

use std::collections::BTreeMap;

use serde::Deserialize;

use super::grants::{ColumnGrant, ColumnMasks, Grants, Pattern, RoleLimits, RowFilter};
use super::{ConfigError, ConfigFile};

/// One role, as declared.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoleSpec {
    /// Its name, as a JWT's roles claim names it.
    pub name: String,
    /// Identities that hold it: query tokens' names, `oidc:<sub>`.
    #[serde(default)]
    pub members: Vec<String>,
    /// What it may read: `catalog.schema.table` patterns (`*` a part).
    #[serde(default)]
    pub read: Vec<String>,
    /// What it may change: rows of matching tables, and new tables and
    /// views where the table part is `*`.
    #[serde(default)]
    pub write: Vec<String>,
    /// Tables narrowed to some columns: the table (a pattern) and the
    /// columns it may read.
    #[serde(default)]
    pub columns: BTreeMap<String, Vec<String>>,
    /// Row filters: the table (a pattern) and a boolean expression over its
    /// row, `claim('name')` standing for the caller's claim.
    #[serde(default)]
    pub rows: BTreeMap<String, String>,
    /// Column masks: the table (a pattern), and each masked column with
    /// the expression read in its place.
    #[serde(default)]
    pub masks: BTreeMap<String, BTreeMap<String, String>>,
    /// Caps on one statement of its members, below the gateway's own.
    #[serde(default)]
    pub limits: RoleLimits,
    /// Whether its members may read any file or S3 path the gateway's path
    /// guard allows (off: only the named sources it grants).
    #[serde(default)]
    pub raw_paths: bool,
}

#[derive(Debug, Deserialize)]
struct FileConfig {
    #[serde(default, rename = "role")]
    roles: Vec<RoleSpec>,
}

pub(crate) fn error(message: String) -> ConfigError {
    ConfigError::new("DUCKGATE_CONFIG", message)
}

/// The roles `file` declares, checked for form (names, patterns).
pub fn roles_in(file: &ConfigFile) -> Result<Vec<RoleSpec>, ConfigError> {
    let roles = file.parse::<FileConfig>()?.roles;
    let mut seen = std::collections::HashSet::new();
    for r in &roles {
        if r.name.trim().is_empty() || r.name.contains(char::is_whitespace) {
            return Err(error(format!(
                "role '{}': a role's name is one word (a JWT's roles claim names it)",
                r.name
            )));
        }
        if !seen.insert(r.name.to_ascii_lowercase()) {
            return Err(error(format!("role '{}' is declared twice", r.name)));
        }
        compile(r)?;
    }
    Ok(roles)
}

fn patterns(role: &str, what: &str, texts: &[String]) -> Result<Vec<Pattern>, ConfigError> {
    texts
        .iter()
        .map(|t| Pattern::parse(t).map_err(|e| error(format!("role '{role}', {what}: {e}"))))
        .collect()
}

/// One role's grants as the guard reads them.
pub(crate) fn compile(r: &RoleSpec) -> Result<Grants, ConfigError> {
    let mut columns = Vec::new();
    for (table, cols) in &r.columns {
        let table =
            Pattern::parse(table).map_err(|e| error(format!("role '{}', columns: {e}", r.name)))?;
        if cols.is_empty() {
            return Err(error(format!(
                "role '{}', columns of {}: name at least one column (leave the table out of \
                 `read` to hide it)",
                r.name,
                table.as_str()
            )));
        }
        columns.push(ColumnGrant {
            table,
            columns: cols.clone(),
        });
    }
    let pattern = |what: &str, table: &str| {
        Pattern::parse(table).map_err(|e| error(format!("role '{}', {what}: {e}", r.name)))
    };
    let mut rows = Vec::new();
    for (table, filter) in &r.rows {
        if filter.trim().is_empty() {
            return Err(error(format!(
                "role '{}', rows of {table}: the filter is empty",
                r.name
            )));
        }
        rows.push(RowFilter {
            table: pattern("rows", table)?,
            filter: filter.clone(),
        });
    }
    let mut masks = Vec::new();
    for (table, columns) in &r.masks {
        if let Some((c, _)) = columns.iter().find(|(_, m)| m.trim().is_empty()) {
            return Err(error(format!(
                "role '{}', masks of {table}: the mask of {c} is empty",
                r.name
            )));
        }
        masks.push(ColumnMasks {
            table: pattern("masks", table)?,
            masks: columns
                .iter()
                .map(|(c, m)| (c.clone(), m.clone()))
                .collect(),
        });
    }
    let l = &r.limits;
    for (key, value) in [
        ("max_rows", l.max_rows),
        ("max_result_bytes", l.max_result_bytes),
        ("max_query_timeout_ms", l.max_query_timeout_ms),
        ("queries_at_once", l.queries_at_once),
        ("spool_bytes", l.spool_bytes),
    ] {
        if value == Some(0) {
            return Err(error(format!(
                "role '{}', limits.{key}: 0 allows nothing; leave it out for no cap",
                r.name
            )));
        }
    }
    Ok(Grants {
        read: patterns(&r.name, "read", &r.read)?,
        write: patterns(&r.name, "write", &r.write)?,
        columns,
        rows,
        masks,
        limits: r.limits,
        raw_paths: r.raw_paths,
    })
}
