//! Grants: what one caller may read and change, by its roles.
//!
//! A role (a `[[role]]` table of the TOML file, [`crate::config::roles`])
//! grants reading and writing catalog objects by pattern
//! (`catalog.schema.table`, `*` for a whole part) and may narrow a table to
//! some of its columns. A caller with roles gets one [`Access`], the union
//! of its roles' grants; a caller with none is not confined (what every
//! token could do before roles existed).
//!
//! Grants are checked on what runs, not on the text: the objects of the
//! statement's bound plan ([`super::describe::PlanObject`]), views expanded
//! by DuckDB's binder, so a view reads with the caller's grants (like
//! PostgreSQL's `security_invoker` views): a view over a table the caller
//! may not read is refused, and granting a view means granting what it
//! reads. The guard's verdict on a text is shared by every caller; the
//! grants are checked after it, per caller, on the verdict's objects.
//!
//! What a caller may neither read nor write does not exist for it: a
//! statement naming such a table is answered exactly as DuckDB answers for
//! a table that does not exist (`Catalog Error: Table with name x does not
//! exist!`, at the name's place), and DuckDB's hints that could name an
//! object (`Did you mean`, `Candidate bindings`) are dropped from a
//! confined caller's errors, so nothing tells an invisible table from a
//! missing one. A table it may read but not write is a 403 naming it;
//! what it may write it may read (an UPDATE's WHERE reads its rows).
//!
//! Allow, don't deny: a confined caller's plan may scan catalog tables it
//! is granted, the generators in [`GENERATORS`] and DuckDB's catalog
//! listings in [`LISTINGS`], each filtered to what its roles let it see
//! ([`Access::listing`], applied by `engine::policy` like a row filter), so
//! `duckdb_tables()`, `information_schema`, `SHOW TABLES` and `GET
//! /catalog` show its part of the catalog and nothing else. `DESCRIBE x`
//! reads what `SELECT * FROM x` reads (its columns are what it tells).
//! Readers of files and S3 and DuckDB's other catalog functions are
//! refused. Of the writes, rows (INSERT, UPDATE, DELETE, MERGE) of granted
//! tables and CREATE TABLE / VIEW in granted schemas; every other DDL is
//! refused.

use std::sync::Arc;

use super::describe::SourceRead;
pub use crate::config::grants::{ColumnGrant, ColumnMasks, Grants, Pattern, RoleLimits, RowFilter};

mod check;
mod sql;

/// Table functions a confined caller may scan: they compute rows from
/// their arguments and read nothing stored.
pub const GENERATORS: &[&str] = &[
    "range",
    "generate_series",
    "unnest",
    "repeat",
    "repeat_row",
    "json_each",
    "json_tree",
];

/// DuckDB's catalog listings a confined caller may scan, each filtered to
/// what it may see ([`Access::listing`]): `information_schema`'s tables,
/// columns and schemata and `SHOW`'s queries read these.
/// (`duckdb_databases()`, which shows file paths, stays refused for every
/// caller by the function list.)
pub const LISTINGS: &[&str] = &[
    "duckdb_schemas",
    "duckdb_tables",
    "duckdb_views",
    "duckdb_columns",
    "duckdb_indexes",
    "duckdb_sequences",
    "duckdb_types",
];

/// A quota a role's members share (a caller's work counts against one
/// role's): the role and its cap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoleQuota {
    /// The role.
    pub role: Arc<str>,
    /// Its cap.
    pub cap: u64,
}

/// What a caller's roles make of one table it reads: the filter its rows
/// pass (`None`: every row) and the masked columns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TablePolicy {
    /// The rows it reads: some role's filter holds (a role reading the
    /// table unfiltered lifts them all).
    pub filter: Option<String>,
    /// Columns every role that reads the table masks, with the first
    /// role's mask.
    pub masks: Vec<(String, String)>,
}

impl TablePolicy {
    /// Whether it changes what the caller reads.
    pub fn applies(&self) -> bool {
        self.filter.is_some() || !self.masks.is_empty()
    }
}

impl Grants {
    /// Whether this role lets the object be read (what it may write it may
    /// read).
    fn may_read(&self, catalog: &str, schema: &str, name: &str) -> bool {
        self.read
            .iter()
            .chain(&self.write)
            .any(|p| p.matches(catalog, schema, name))
    }

    /// Whether this role lets `column` of a table it may read be read: yes
    /// where it narrows the table to no columns.
    fn column(&self, catalog: &str, schema: &str, table: &str, column: &str) -> bool {
        let mut narrowing = self
            .columns
            .iter()
            .filter(|g| g.table.matches(catalog, schema, table))
            .peekable();
        narrowing.peek().is_none()
            || narrowing.any(|g| g.columns.iter().any(|c| c.eq_ignore_ascii_case(column)))
    }
}

/// What one confined caller may read and change: what any of its roles
/// grants (a column one role narrows away and another grants is read).
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// The roles it holds, for refusals and the audit line.
    pub roles: Vec<Arc<str>>,
    /// Each role's grants.
    pub grants: Vec<Arc<Grants>>,
    /// The caller's claims (a JWT's; none for a query token), which row
    /// filters and masks read as `claim('name')`.
    pub claims: Arc<serde_json::Map<String, serde_json::Value>>,
    /// The named sources (`[[source]]`): each name and the paths its view
    /// reads, which a grant of `sources.main.<name>` lets it read.
    pub sources: Arc<Vec<(String, Vec<String>)>>,
}

impl Access {
    /// The roles it holds as one label (`a+b`; `none` for a JWT holding
    /// no declared role): metrics count decisions by it.
    pub fn label(&self) -> String {
        if self.roles.is_empty() {
            return "none".into();
        }
        self.roles
            .iter()
            .map(|r| &**r)
            .collect::<Vec<_>>()
            .join("+")
    }

    /// Whether it may read `catalog.schema.name` (what it may change it may
    /// read too).
    pub fn may_read(&self, catalog: &str, schema: &str, name: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.may_read(catalog, schema, name))
    }

    /// Whether it may change `catalog.schema.name`.
    pub fn may_write(&self, catalog: &str, schema: &str, name: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.write.iter().any(|p| p.matches(catalog, schema, name)))
    }

    /// Whether it may create tables and views in `catalog.schema`.
    pub fn may_create_in(&self, catalog: &str, schema: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.write.iter().any(|p| p.covers_schema(catalog, schema)))
    }

    /// Whether the object exists for it at all (it may read it).
    pub fn sees(&self, catalog: &str, schema: &str, name: &str) -> bool {
        self.may_read(catalog, schema, name)
    }

    /// What its roles make of reading `catalog.schema.name` (see
    /// [`TablePolicy`]): the roles that read it, each filtering its rows
    /// by every filter of its own that names the table (none: all rows),
    /// the caller reading what any of them reads; a column masked by every
    /// one of them.
    pub fn table_policy(&self, catalog: &str, schema: &str, name: &str) -> TablePolicy {
        let readers: Vec<&Grants> = self
            .grants
            .iter()
            .map(|g| &**g)
            .filter(|g| g.may_read(catalog, schema, name))
            .collect();
        let mut filters = Vec::new();
        let mut unfiltered = readers.is_empty();
        for g in &readers {
            let own: Vec<String> = g
                .rows
                .iter()
                .filter(|r| r.table.matches(catalog, schema, name))
                .map(|r| format!("({}\n)", r.filter))
                .collect();
            if own.is_empty() {
                unfiltered = true;
                break;
            }
            filters.push(format!("({})", own.join(" AND ")));
        }
        let filter = (!unfiltered).then(|| filters.join(" OR "));
        let mut masks: Vec<(String, String)> = Vec::new();
        if let Some((first, others)) = readers.split_first() {
            let masks_of = |g: &Grants| -> Vec<(String, String)> {
                g.masks
                    .iter()
                    .filter(|m| m.table.matches(catalog, schema, name))
                    .flat_map(|m| m.masks.iter().cloned())
                    .collect()
            };
            let others: Vec<Vec<(String, String)>> = others.iter().map(|g| masks_of(g)).collect();
            for (column, mask) in masks_of(first) {
                let everyone = others
                    .iter()
                    .all(|o| o.iter().any(|(c, _)| c.eq_ignore_ascii_case(&column)));
                if everyone && !masks.iter().any(|(c, _)| c.eq_ignore_ascii_case(&column)) {
                    masks.push((column, mask));
                }
            }
        }
        TablePolicy { filter, masks }
    }

    /// The caps on its statements: for each, the most any of its roles
    /// allows (none where a role sets none, or it holds no role).
    pub fn limits(&self) -> RoleLimits {
        let most = |f: fn(&RoleLimits) -> Option<u64>| {
            self.grants
                .iter()
                .map(|g| f(&g.limits))
                .try_fold(0u64, |acc, l| l.map(|l| acc.max(l)))
                .filter(|_| !self.grants.is_empty())
        };
        RoleLimits {
            max_rows: most(|l| l.max_rows),
            max_result_bytes: most(|l| l.max_result_bytes),
            max_query_timeout_ms: most(|l| l.max_query_timeout_ms),
            queries_at_once: most(|l| l.queries_at_once),
            spool_bytes: most(|l| l.spool_bytes),
        }
    }

    /// The role whose shared quota (`queries_at_once`, `spool_bytes`) the
    /// caller's work counts against: as with the other caps, the most any
    /// of its roles allows, so none when one of its roles sets none (or it
    /// holds no role), else the role with the largest cap (the first
    /// declared of equals).
    pub fn quota(&self, cap: fn(&RoleLimits) -> Option<u64>) -> Option<RoleQuota> {
        let mut best: Option<RoleQuota> = None;
        for (role, grants) in self.roles.iter().zip(&self.grants) {
            let cap = cap(&grants.limits)?;
            if best.as_ref().is_none_or(|b| cap > b.cap) {
                best = Some(RoleQuota {
                    role: role.clone(),
                    cap,
                });
            }
        }
        best
    }

    /// Whether any of its roles filters rows or masks columns.
    pub fn has_policies(&self) -> bool {
        self.grants
            .iter()
            .any(|g| !g.rows.is_empty() || !g.masks.is_empty())
    }

    /// Whether it may read `column` of the table: some role that lets it
    /// read the table narrows it to no columns, or to some holding this one.
    pub fn may_read_column(&self, catalog: &str, schema: &str, table: &str, column: &str) -> bool {
        self.grants
            .iter()
            .any(|g| g.may_read(catalog, schema, table) && g.column(catalog, schema, table, column))
    }

    /// Whether it may read what `read` (a reader's scan) was bound to: any
    /// path, where a role of its grants raw paths (the gateway's path guard
    /// has checked them); else only the paths of named sources it may read,
    /// each exactly as the source names it.
    fn may_read_paths(&self, read: &SourceRead) -> bool {
        if self.grants.iter().any(|g| g.raw_paths) {
            return true;
        }
        !read.paths.is_empty()
            && read.paths.iter().all(|p| {
                self.sources.iter().any(|(name, paths)| {
                    paths.contains(p)
                        && self.may_read(crate::config::sources::CATALOG, "main", name)
                })
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn holding(caps: &[(&str, Option<u64>)]) -> Access {
        Access {
            roles: caps.iter().map(|(r, _)| Arc::from(*r)).collect(),
            grants: caps
                .iter()
                .map(|(_, c)| {
                    Arc::new(Grants {
                        limits: RoleLimits {
                            queries_at_once: *c,
                            ..RoleLimits::default()
                        },
                        ..Grants::default()
                    })
                })
                .collect(),
            claims: Default::default(),
            sources: Default::default(),
        }
    }

    #[test]
    fn a_caller_counts_against_the_role_allowing_the_most() {
        let quota = |caps: &[(&str, Option<u64>)]| {
            holding(caps)
                .quota(|l| l.queries_at_once)
                .map(|q| (q.role.to_string(), q.cap))
        };
        assert_eq!(quota(&[("a", Some(2))]), Some(("a".into(), 2)));
        assert_eq!(
            quota(&[("a", Some(2)), ("b", Some(5)), ("c", Some(5))]),
            Some(("b".into(), 5))
        );
        // A role that caps nothing lifts the cap, as for the other limits.
        assert_eq!(quota(&[("a", Some(2)), ("b", None)]), None);
        assert_eq!(quota(&[]), None);
    }

    #[test]
    fn patterns_read_parts_and_quotes() {
        let p = Pattern::parse("memory.main.*").unwrap();
        assert!(p.matches("MEMORY", "main", "orders"));
        assert!(!p.matches("lake", "main", "orders"));
        assert!(p.covers_schema("memory", "main"));
        let q = Pattern::parse(r#""my.db".s."T""#).unwrap();
        assert!(q.matches("my.db", "S", "t"));
        assert!(!q.covers_schema("my.db", "s"));
        for bad in ["orders", "a.b", "a.b.c.d", "a..c", r#""a.b.c"#] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_column_one_role_narrows_away_another_may_grant() {
        let grants = |read: &str, narrow: Option<(&str, &[&str])>| {
            Arc::new(Grants {
                read: vec![Pattern::parse(read).unwrap()],
                write: Vec::new(),
                columns: narrow
                    .map(|(t, cols)| ColumnGrant {
                        table: Pattern::parse(t).unwrap(),
                        columns: cols.iter().map(|c| c.to_string()).collect(),
                    })
                    .into_iter()
                    .collect(),
                ..Grants::default()
            })
        };
        let support = grants("db.main.customers", Some(("db.main.customers", &["id"])));
        let billing = grants("db.main.*", None);
        let other = grants("db.main.orders", None);
        let access = |gs: Vec<Arc<Grants>>| Access {
            roles: Vec::new(),
            grants: gs,
            claims: Arc::default(),
            sources: Arc::default(),
        };
        let narrowed = access(vec![support.clone(), other]);
        assert!(narrowed.may_read_column("db", "main", "customers", "id"));
        assert!(!narrowed.may_read_column("db", "main", "customers", "email"));
        let whole = access(vec![support, billing]);
        assert!(whole.may_read_column("db", "main", "customers", "email"));
    }

    #[test]
    fn roles_see_the_union_of_their_rows_and_mask_what_all_mask() {
        let role = |read: &str, rows: &[&str], masks: &[(&str, &str)]| {
            Arc::new(Grants {
                read: vec![Pattern::parse(read).unwrap()],
                rows: rows
                    .iter()
                    .map(|f| RowFilter {
                        table: Pattern::parse("db.main.orders").unwrap(),
                        filter: f.to_string(),
                    })
                    .collect(),
                masks: vec![ColumnMasks {
                    table: Pattern::parse("db.main.orders").unwrap(),
                    masks: masks
                        .iter()
                        .map(|(c, m)| (c.to_string(), m.to_string()))
                        .collect(),
                }],
                ..Grants::default()
            })
        };
        let access = |gs: Vec<Arc<Grants>>| Access {
            roles: Vec::new(),
            grants: gs,
            claims: Arc::default(),
            sources: Arc::default(),
        };
        let tenant = role("db.main.orders", &["a = 1", "b = 2"], &[("email", "NULL")]);
        let region = role(
            "db.main.*",
            &["r = 'eu'"],
            &[("email", "'x'"), ("phone", "NULL")],
        );
        let auditor = role("db.main.orders", &[], &[]);
        let p = access(vec![tenant.clone()]).table_policy("db", "main", "orders");
        assert_eq!(p.filter.as_deref(), Some("((a = 1\n) AND (b = 2\n))"));
        assert_eq!(p.masks, vec![("email".to_string(), "NULL".to_string())]);
        let p = access(vec![tenant.clone(), region.clone()]).table_policy("db", "main", "orders");
        assert_eq!(
            p.filter.as_deref(),
            Some("((a = 1\n) AND (b = 2\n)) OR ((r = 'eu'\n))")
        );
        // phone: the tenant role reads it unmasked.
        assert_eq!(p.masks, vec![("email".to_string(), "NULL".to_string())]);
        let p = access(vec![tenant, region, auditor]).table_policy("db", "main", "orders");
        assert!(!p.applies(), "{p:?}");
        // A table no role filters or masks.
        let p = access(vec![role("db.main.*", &[], &[])]).table_policy("db", "main", "other");
        assert!(!p.applies());
    }
}
