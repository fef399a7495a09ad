//! Every role and who holds which, as one gateway runs them: the
//! [`Access`] of a caller by its name and its JWT roles, and the checks of
//! the declared roles against the catalogs as attached. The roles are read
//! and checked for form by [`crate::config::roles`].

use std::sync::Arc;

use crate::config::grants::{Grants, Pattern};
use crate::config::roles::{compile, error, RoleSpec};
use crate::config::sources::SourceSpec;
use crate::config::ConfigError;
use crate::engine::catalogs::CatalogObject;
use crate::engine::guard::access::{Access, TablePolicy, LISTINGS};
use crate::engine::policy::{Document, ListingRule, TableRule};

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
