//! Roles: `[[role]]` tables of the TOML file (`--config`), each granting
//! reading and writing catalog objects to its members (query tokens by
//! name, OIDC identities as `oidc:<sub>`) and to JWTs whose roles claim
//! names it. What a grant means is [`crate::engine::guard::access`]'s;
//! here they are read and checked for form. Whether each grant names
//! something that exists is checked once the catalogs are attached
//! ([`check_against`]).
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
use std::sync::Arc;

use serde::Deserialize;

use super::sources::SourceSpec;

use super::{ConfigError, ConfigFile};
use crate::engine::guard::access::{
    Access, ColumnGrant, ColumnMasks, Grants, Pattern, RoleLimits, RowFilter, TablePolicy, LISTINGS,
};
use crate::engine::policy::{Document, ListingRule, TableRule};

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

fn error(message: String) -> ConfigError {
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
fn compile(r: &RoleSpec) -> Result<Grants, ConfigError> {
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

/// Every role, and who holds which: the [`Access`] of a caller by its
/// name and its JWT roles.
#[derive(Debug, Default)]
pub struct Roles {
    roles: Vec<(RoleSpec, Arc<Grants>)>,
    /// The named sources: each name and its paths.
    sources: Arc<Vec<(String, Vec<String>)>>,
}

impl Roles {
    /// The declared roles (checked by [`roles_in`]), and the named
    /// sources their grants may name.
    pub fn new(specs: &[RoleSpec], sources: &[SourceSpec]) -> Result<Self, ConfigError> {
        let roles = specs
            .iter()
            .map(|s| Ok((s.clone(), Arc::new(compile(s)?))))
            .collect::<Result<_, ConfigError>>()?;
        let sources = sources
            .iter()
            .map(|s| (s.name.clone(), s.paths.clone()))
            .collect();
        Ok(Self {
            roles,
            sources: Arc::new(sources),
        })
    }

    /// Whether any role is declared.
    pub fn any(&self) -> bool {
        !self.roles.is_empty()
    }

    /// The grants of the caller `name` holding the JWT roles `claimed`
    /// (roles of that name that are declared; others mean nothing), or
    /// `None` when it holds no role: not confined.
    pub fn access(
        &self,
        name: &str,
        claimed: &[Arc<str>],
        claims: &Arc<serde_json::Map<String, serde_json::Value>>,
    ) -> Option<Arc<Access>> {
        let held: Vec<&(RoleSpec, Arc<Grants>)> = self
            .roles
            .iter()
            .filter(|(spec, _)| {
                spec.members.iter().any(|m| m == name)
                    || claimed.iter().any(|c| c.eq_ignore_ascii_case(&spec.name))
            })
            .collect();
        if held.is_empty() {
            return None;
        }
        Some(Arc::new(Access {
            roles: held
                .iter()
                .map(|(spec, _)| Arc::from(spec.name.as_str()))
                .collect(),
            grants: held.iter().map(|(_, g)| g.clone()).collect(),
            claims: claims.clone(),
            sources: self.sources.clone(),
        }))
    }

    /// Checks that every grant names something that exists in `objects`
    /// (catalog, schema, name, columns of each table and view): an exact
    /// pattern a table or view, a `*` table part a schema, a column grant
    /// a table with those columns. The error names the grant.
    pub fn check_against(&self, objects: &[CatalogObject]) -> Result<(), ConfigError> {
        for (spec, grants) in &self.roles {
            for (what, list) in [("read", &grants.read), ("write", &grants.write)] {
                for p in list {
                    let exists = objects.iter().any(|o| {
                        p.matches(&o.catalog, &o.schema, &o.name)
                            || p.covers_schema(&o.catalog, &o.schema)
                    });
                    if !exists {
                        return Err(error(format!(
                            "role '{}', {what} grant '{}' names no table, view or schema that \
                             exists",
                            spec.name,
                            p.as_str()
                        )));
                    }
                }
            }
            for g in &grants.columns {
                let tables: Vec<&CatalogObject> = objects
                    .iter()
                    .filter(|o| g.table.matches(&o.catalog, &o.schema, &o.name))
                    .collect();
                // A view reads with the caller's grants: its plan scans
                // tables, so only a table's columns can be narrowed (a grant
                // on a view's would be accepted and never applied).
                if let Some(view) = tables.iter().find(|o| o.view) {
                    return Err(error(format!(
                        "role '{}', columns of '{}': {}.{}.{} is a view (or a named source); \
                         column grants narrow tables: narrow the tables it reads",
                        spec.name,
                        g.table.as_str(),
                        view.catalog,
                        view.schema,
                        view.name
                    )));
                }
                if tables.is_empty() {
                    return Err(error(format!(
                        "role '{}', columns of '{}': no such table or view",
                        spec.name,
                        g.table.as_str()
                    )));
                }
                for c in &g.columns {
                    if !tables
                        .iter()
                        .any(|t| t.columns.iter().any(|x| x.eq_ignore_ascii_case(c)))
                    {
                        return Err(error(format!(
                            "role '{}', columns of '{}': no column '{c}'",
                            spec.name,
                            g.table.as_str()
                        )));
                    }
                }
            }
            for (what, table) in grants
                .rows
                .iter()
                .map(|r| ("rows", &r.table))
                .chain(grants.masks.iter().map(|m| ("masks", &m.table)))
            {
                if !objects
                    .iter()
                    .any(|o| !o.name.is_empty() && table.matches(&o.catalog, &o.schema, &o.name))
                {
                    return Err(error(format!(
                        "role '{}', {what} of '{}': no such table",
                        spec.name,
                        table.as_str()
                    )));
                }
            }
        }
        Ok(())
    }

    /// The policy documents ([`crate::engine::policy`]) that bind each
    /// role's row filters and masks, one per role and table of `objects`
    /// they name, with no claims (`claim()` reads NULL): DuckDB binding
    /// each says whether it is an expression over its table's row, of
    /// columns that exist. Each comes with what names it in an error.
    pub fn policy_checks(&self, objects: &[CatalogObject]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (spec, grants) in &self.roles {
            let only = Access {
                roles: Vec::new(),
                grants: vec![Arc::new(Grants {
                    read: vec![Pattern::parse("*.*.*").expect("a pattern")],
                    rows: grants.rows.clone(),
                    masks: grants.masks.clone(),
                    ..Grants::default()
                })],
                claims: Arc::default(),
                sources: Arc::default(),
            };
            // What the role sees of DuckDB's catalog listings: the
            // gateway writes these filters from its grants' names.
            let listings = Access {
                roles: Vec::new(),
                grants: vec![grants.clone()],
                claims: Arc::default(),
                sources: Arc::default(),
            };
            let no_claims = serde_json::Map::new();
            let functions = LISTINGS
                .iter()
                .filter_map(|f| {
                    let p = listings.listing(f)?;
                    Some(ListingRule {
                        name: f.to_string(),
                        filter: p.filter,
                        masks: p.masks,
                    })
                })
                .collect();
            out.push((
                format!("role '{}', its catalog listings", spec.name),
                Document {
                    tables: Vec::new(),
                    functions,
                    listings: LISTINGS,
                    claims: &no_claims,
                }
                .to_json(),
            ));
            for o in objects.iter().filter(|o| !o.name.is_empty()) {
                let TablePolicy { filter, masks } =
                    only.table_policy(&o.catalog, &o.schema, &o.name);
                if filter.is_none() && masks.is_empty() {
                    continue;
                }
                let doc = Document {
                    tables: vec![TableRule {
                        catalog: o.catalog.clone(),
                        schema: o.schema.clone(),
                        name: o.name.clone(),
                        filter,
                        masks,
                    }],
                    functions: Vec::new(),
                    listings: LISTINGS,
                    claims: &no_claims,
                };
                out.push((
                    format!(
                        "role '{}', rows or masks of {}.{}.{}",
                        spec.name, o.catalog, o.schema, o.name
                    ),
                    doc.to_json(),
                ));
            }
        }
        out
    }
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
