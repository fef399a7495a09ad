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

use std::cell::LazyCell;
use std::sync::Arc;

use super::describe::{PlanObject, SourceRead};
use super::tree::{Named, NamedTable};
use super::{forbid, Accepted, Refusal};
use crate::config::grants::Part;
pub use crate::config::grants::{ColumnGrant, ColumnMasks, Grants, Pattern, RoleLimits, RowFilter};
use crate::engine::errors::place;
use crate::engine::sql_string;

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

/// `column` with its ASCII letters lowered, as SQL: how DuckDB compares
/// identifiers (`StringUtil::CIEquals`, ASCII only), and so how
/// [`Part::matches`] compares names in Rust; `lower()` would fold other
/// letters too, and a listing would then show what a read refuses.
fn ascii_lower(column: &str) -> String {
    format!("translate({column}, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')")
}

/// A pattern as SQL, for the catalog listings' filters.
impl Pattern {
    /// The pattern as a DuckDB condition over the columns that hold a
    /// catalog's, schema's and object's names (as many of them as given:
    /// one for databases, two for schemas), compared as [`Part::matches`]
    /// compares.
    fn condition(&self, columns: &[&str]) -> String {
        let parts: Vec<String> = self
            .parts
            .iter()
            .zip(columns)
            .filter_map(|(part, column)| match part {
                Part::Any => None,
                Part::Name(n) => Some(format!(
                    "{} = {}",
                    ascii_lower(column),
                    sql_string(&n.to_ascii_lowercase())
                )),
            })
            .collect();
        if parts.is_empty() {
            "TRUE".into()
        } else {
            parts.join(" AND ")
        }
    }
}

/// The conditions joined by OR (`FALSE` when there are none).
fn any_of(conditions: impl IntoIterator<Item = String>) -> String {
    let all: Vec<String> = conditions.into_iter().map(|c| format!("({c})")).collect();
    if all.is_empty() {
        "FALSE".into()
    } else {
        all.join(" OR ")
    }
}

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
    /// Whether it may read the object whose names `columns` hold, as SQL
    /// (what [`Grants::may_read`] decides).
    fn reads_sql(&self, columns: &[&str]) -> String {
        any_of(
            self.read
                .iter()
                .chain(&self.write)
                .map(|p| p.condition(columns)),
        )
    }

    /// Whether it narrows the object to some columns, as SQL.
    fn narrows_sql(&self, columns: &[&str]) -> String {
        any_of(self.columns.iter().map(|g| g.table.condition(columns)))
    }

    /// Whether `column` (a column holding a column's name) is one it
    /// narrows the object to, as SQL.
    fn column_sql(&self, columns: &[&str], column: &str) -> String {
        any_of(self.columns.iter().map(|g| {
            let names: Vec<String> = g
                .columns
                .iter()
                .map(|c| sql_string(&c.to_ascii_lowercase()))
                .collect();
            format!(
                "{} AND {} IN ({})",
                g.table.condition(columns),
                ascii_lower(column),
                names.join(", ")
            )
        }))
    }

    /// Whether it filters the object's rows, as SQL.
    fn filters_sql(&self, columns: &[&str]) -> String {
        any_of(self.rows.iter().map(|r| r.table.condition(columns)))
    }

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

    /// What it sees of DuckDB's catalog listing `function` (one of
    /// [`LISTINGS`]): a filter to the objects its roles let it read, and
    /// masks where a listing would tell more than it may know (definitions,
    /// which may name other objects; a filtered table's row count; a
    /// narrowed table's column count).
    /// `None` for any other function.
    pub fn listing(&self, function: &str) -> Option<TablePolicy> {
        let sees = |names: &[&str]| any_of(self.grants.iter().map(|g| g.reads_sql(names)));
        let all_patterns = |names: &[&str]| {
            any_of(
                self.grants
                    .iter()
                    .flat_map(|g| g.read.iter().chain(&g.write))
                    .map(|p| p.condition(names)),
            )
        };
        let table = ["database_name", "schema_name", "table_name"];
        let unless = |condition: String, column: &str| {
            (
                column.to_string(),
                format!("CASE WHEN {condition} THEN NULL ELSE {column} END"),
            )
        };
        // A role that reads the table whole (unnarrowed / unfiltered) lifts
        // the narrowing / filter, as for reads.
        let narrowed = format!(
            "NOT ({})",
            any_of(self.grants.iter().map(|g| format!(
                "({}) AND NOT ({})",
                g.reads_sql(&table),
                g.narrows_sql(&table)
            )))
        );
        let filtered = format!(
            "NOT ({})",
            any_of(self.grants.iter().map(|g| format!(
                "({}) AND NOT ({})",
                g.reads_sql(&table),
                g.filters_sql(&table)
            )))
        );
        let (filter, masks) = match function {
            "duckdb_schemas" => (all_patterns(&["database_name", "schema_name"]), Vec::new()),
            // Definitions are not shown: a view's query, a key's or a
            // default's text may name what the caller cannot see.
            "duckdb_tables" => (
                sees(&table),
                vec![
                    ("sql".to_string(), "NULL".to_string()),
                    unless(narrowed, "column_count"),
                    unless(filtered, "estimated_size"),
                ],
            ),
            "duckdb_views" => (
                sees(&["database_name", "schema_name", "view_name"]),
                vec![("sql".to_string(), "NULL".to_string())],
            ),
            // An index of a table it may read; its definition and
            // expressions may name columns a narrowed grant hides.
            "duckdb_indexes" => (
                sees(&table),
                vec![
                    ("sql".to_string(), "NULL".to_string()),
                    ("expressions".to_string(), "NULL".to_string()),
                ],
            ),
            // A sequence its grants' patterns name; its values count
            // what every writer drew from it.
            "duckdb_sequences" => (
                sees(&["database_name", "schema_name", "sequence_name"]),
                vec![
                    ("last_value".to_string(), "NULL".to_string()),
                    ("sql".to_string(), "NULL".to_string()),
                ],
            ),
            // DuckDB's own types, and the types of schemas it may read.
            "duckdb_types" => (
                format!(
                    "internal OR ({})",
                    all_patterns(&["database_name", "schema_name"])
                ),
                Vec::new(),
            ),
            "duckdb_columns" => (
                any_of(self.grants.iter().map(|g| {
                    format!(
                        "({}) AND (NOT ({}) OR ({}))",
                        g.reads_sql(&table),
                        g.narrows_sql(&table),
                        g.column_sql(&table, "column_name")
                    )
                })),
                // Positions stay the table's own (tools order columns by
                // them): a gap shows where a column not granted sits.
                Vec::new(),
            ),
            _ => return None,
        };
        Some(TablePolicy {
            filter: Some(filter),
            masks,
        })
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

    /// The policy document ([`crate::engine::policy`]) for running an
    /// accepted statement, when a table it reads is filtered or masked for
    /// this caller; `None` when none is. A statement that changes such a
    /// table is refused: its rows are the caller's to read, not to change
    /// (an INSERT could add rows the filter hides, an UPDATE write masked
    /// values back).
    ///
    /// An EXPLAIN of such a statement is refused: its estimates come from
    /// every row of the tables, its plan's shape from those estimates, and
    /// EXPLAIN ANALYZE counts what each operator saw (a catalog listing's
    /// scan counts every object). `show_plans` lifts that for the tests
    /// ([`super::Rules::confined_plans`]).
    pub fn policy(&self, accepted: &Accepted, show_plans: bool) -> Result<Option<String>, Refusal> {
        let mut listings: Vec<&str> = accepted
            .sources
            .iter()
            .map(String::as_str)
            .filter(|s| LISTINGS.contains(s))
            .collect();
        listings.sort_unstable();
        listings.dedup();
        if !self.has_policies() && listings.is_empty() {
            return Ok(None);
        }
        let mut tables: Vec<(&PlanObject, TablePolicy)> = Vec::new();
        let mut any = false;
        for o in &accepted.objects {
            let read = o.action == "read";
            if !read && !matches!(o.action.as_str(), "insert" | "update" | "delete" | "merge") {
                continue;
            }
            let p = self.table_policy(&o.catalog, &o.schema, &o.name);
            if !read {
                if p.applies() {
                    return Err(forbid(
                        format!("table {}.{}.{}", o.catalog, o.schema, o.name),
                        "its rows are filtered or its columns masked for this identity's roles: \
                         it may read them, not change them",
                    ));
                }
                continue;
            }
            if tables
                .iter()
                .any(|(t, _)| t.catalog == o.catalog && t.schema == o.schema && t.name == o.name)
            {
                continue;
            }
            any |= p.applies();
            tables.push((o, p));
        }
        if !any && listings.is_empty() {
            return Ok(None);
        }
        if accepted.kind.starts_with("EXPLAIN") && !show_plans {
            return Err(forbid(
                "EXPLAIN",
                "a plan of what this identity reads through a row filter, a mask or a filtered \
                 catalog listing is not shown: its estimates, its shape and its profile's counts \
                 depend on rows and objects this identity may not see; run the statement itself",
            ));
        }
        let tables = tables
            .into_iter()
            .map(|(o, p)| crate::engine::policy::TableRule {
                catalog: o.catalog.clone(),
                schema: o.schema.clone(),
                name: o.name.clone(),
                filter: p.filter,
                masks: p.masks,
            })
            .collect();
        let functions = listings
            .into_iter()
            .filter_map(|f| {
                let p = self.listing(f)?;
                Some(crate::engine::policy::ListingRule {
                    name: f.to_string(),
                    filter: p.filter,
                    masks: p.masks,
                })
            })
            .collect();
        Ok(Some(
            crate::engine::policy::Document {
                tables,
                functions,
                listings: LISTINGS,
                claims: &self.claims,
            }
            .to_json(),
        ))
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

    /// Checks an accepted statement's plan against the grants. `named`
    /// gives the tables its text names (parsed again only when a refusal
    /// needs a place); `sql` is the client's text.
    pub fn check(
        &self,
        accepted: &Accepted,
        sql: &str,
        named: impl FnOnce() -> Named,
    ) -> Result<(), Refusal> {
        let named = LazyCell::new(named);
        // One DESCRIBE, SHOW or SUMMARIZE as the whole statement: the shim
        // planned what it describes. Another (one in a subquery) would be
        // answered from the whole catalog.
        let describes = named.describes;
        if describes > 1 || (describes == 1 && !accepted.described) {
            return Err(forbid(
                "DESCRIBE",
                "inside another statement DuckDB answers it from the whole catalog; send it \
                 alone (GET /catalog lists what this identity may read)",
            ));
        }
        for read in &accepted.reads {
            let f = read.function.as_str();
            if GENERATORS.contains(&f) || LISTINGS.contains(&f) || self.may_read_paths(read) {
                continue;
            }
            // A named source it may not see is as missing as a table.
            if let Some(t) = named.tables.iter().find(|t| {
                names(t, crate::config::sources::CATALOG, "main")
                    && self
                        .sources
                        .iter()
                        .any(|(n, _)| n.eq_ignore_ascii_case(&t.name))
                    && !self.may_read(crate::config::sources::CATALOG, "main", &t.name)
            }) {
                return Err(missing_table(t, sql));
            }
            return Err(forbid(
                format!("function {f}()"),
                "this identity's roles grant catalog tables and named sources: other files, \
                 S3 paths and DuckDB's catalog functions but its listings are not granted \
                 (GET /catalog lists what it may read)",
            ));
        }
        // Views first: a view it may not read is missing, whatever it reads
        // (refused for a table the view reads, it would tell the view is
        // there).
        for o in accepted.objects.iter().filter(|o| o.action == "view") {
            self.check_object(o, sql, &named)?;
        }
        for o in accepted.objects.iter().filter(|o| o.action != "view") {
            self.check_object(o, sql, &named)?;
        }
        Ok(())
    }

    fn check_object<F: FnOnce() -> Named>(
        &self,
        o: &PlanObject,
        sql: &str,
        named: &LazyCell<Named, F>,
    ) -> Result<(), Refusal> {
        let full = format!("{}.{}.{}", o.catalog, o.schema, o.name);
        match o.action.as_str() {
            // A view is granted like a table: a view that reads nothing, or
            // only what the caller may read, is still the operator's (or
            // another tenant's) to grant. DuckDB's own views
            // (`information_schema`, `pg_catalog`) read its listings, which
            // show the caller its part of the catalog.
            "view" if o.catalog.eq_ignore_ascii_case("system") => Ok(()),
            "view" => {
                if self.may_read(&o.catalog, &o.schema, &o.name) {
                    Ok(())
                } else {
                    Err(self.missing(o, sql, named))
                }
            }
            "read" => {
                if !self.may_read(&o.catalog, &o.schema, &o.name) {
                    return Err(self.missing(o, sql, named));
                }
                if let Some(c) = o
                    .columns
                    .iter()
                    .find(|c| !self.may_read_column(&o.catalog, &o.schema, &o.name, c))
                {
                    return Err(forbid(
                        format!("column {c} of {full}"),
                        "this identity's roles grant reading only some columns of it \
                         (GET /catalog lists them)",
                    ));
                }
                Ok(())
            }
            "insert" | "update" | "delete" | "merge" | "create table" | "create view" => {
                if self.may_write(&o.catalog, &o.schema, &o.name) {
                    return Ok(());
                }
                let creates = o.action.starts_with("create");
                if !creates && !self.may_read(&o.catalog, &o.schema, &o.name) {
                    return Err(self.missing(o, sql, named));
                }
                Err(forbid(
                    format!("{} {full}", if creates { "schema" } else { "table" }),
                    format!(
                        "this identity's roles do not grant {}",
                        if creates {
                            "creating objects there"
                        } else {
                            "changing it"
                        }
                    ),
                ))
            }
            _ => Err(forbid(
                "DDL",
                "this identity's roles grant rows of tables and CREATE TABLE or VIEW, no \
                 other change to the catalog",
            )),
        }
    }

    /// The refusal for an object the caller may not see: DuckDB's own
    /// answer for a table that does not exist, at the place the text names
    /// it; read through a view or macro (not named in the text), a refusal
    /// that names neither the table nor the view.
    fn missing<F: FnOnce() -> Named>(
        &self,
        o: &PlanObject,
        sql: &str,
        named: &LazyCell<Named, F>,
    ) -> Refusal {
        let written = named
            .tables
            .iter()
            .find(|t| t.name.eq_ignore_ascii_case(&o.name) && names(t, &o.catalog, &o.schema));
        match written {
            Some(t) => missing_table(t, sql),
            None => forbid(
                "view",
                "it reads a table this identity's roles do not grant (views and macros read \
                 with the caller's grants)",
            ),
        }
    }

    /// A confined caller's view of a refusal before the plan: a text that
    /// names a table it cannot see is answered as if that table did not
    /// exist (whatever else is wrong with it), a name that exists nowhere
    /// gets DuckDB's plain answer (not the variants that tell whether its
    /// schema or catalog exists), and DuckDB's hints, which may name
    /// objects it cannot see, are dropped. `existing()` lists every table
    /// and view (catalog, schema, name), read once whatever the number of
    /// names the text holds.
    pub fn hide(
        &self,
        refusal: Refusal,
        sql: &str,
        named: impl FnOnce() -> Named,
        existing: impl FnOnce() -> Vec<(String, String, String)>,
    ) -> Refusal {
        // A parse error comes before the catalog, and so does a count of
        // statements; a bind error or a refusal of what binding found (a
        // macro's function) tells that the names bound.
        if !matches!(refusal, Refusal::Bind { .. } | Refusal::Forbidden { .. }) {
            return refusal;
        }
        let named = named();
        if named.tables.is_empty() {
            return without_hints_in(refusal);
        }
        let mut by_name: std::collections::HashMap<String, Vec<(String, String)>> =
            std::collections::HashMap::new();
        for (c, s, n) in existing() {
            by_name.entry(n.to_lowercase()).or_default().push((c, s));
        }
        let mut tables: Vec<&NamedTable> = named.tables.iter().collect();
        tables.sort_by_key(|t| t.at.unwrap_or(usize::MAX));
        for t in tables {
            let candidates: Vec<&(String, String)> = by_name
                .get(&t.name.to_lowercase())
                .into_iter()
                .flatten()
                .filter(|(c, s)| names(t, c, s))
                .collect();
            if candidates.is_empty() {
                let here = t.at.and_then(|p| place(sql, p));
                if let Refusal::Bind { message, at } = &refusal {
                    let about_it = here.is_some() && *at == here;
                    if about_it && message.contains("does not exist") {
                        return missing_table(t, sql);
                    }
                }
                continue;
            }
            if !candidates.iter().any(|(c, s)| self.may_read(c, s, &t.name)) {
                return missing_table(t, sql);
            }
        }
        without_hints_in(refusal)
    }
}

/// DuckDB's answer for a table that does not exist (its message for
/// `SELECT * FROM x` when no `x` exists, with its hints dropped).
fn missing_table(t: &NamedTable, sql: &str) -> Refusal {
    Refusal::Bind {
        message: format!("Catalog Error: Table with name {} does not exist!", t.name),
        at: t.at.and_then(|p| place(sql, p)),
    }
}

/// `refusal` without DuckDB's hints in its message.
fn without_hints_in(refusal: Refusal) -> Refusal {
    match refusal {
        Refusal::Bind { message, at } => Refusal::Bind {
            message: without_hints(&message),
            at,
        },
        other => other,
    }
}

/// `message` without DuckDB's hints, which name catalog objects.
fn without_hints(message: &str) -> String {
    message
        .lines()
        .filter(|l| {
            let l = l.trim_start();
            !(l.starts_with("Did you mean") || l.starts_with("Candidate"))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `t`, as written, may name an object of `catalog.schema` (the
/// parts it leaves out DuckDB fills from its search path; `a.b` is a
/// schema and a name, or a catalog and a name).
fn names(t: &NamedTable, catalog: &str, schema: &str) -> bool {
    (t.catalog.is_empty() || t.catalog.eq_ignore_ascii_case(catalog))
        && (t.schema.is_empty()
            || t.schema.eq_ignore_ascii_case(schema)
            || (t.catalog.is_empty() && t.schema.eq_ignore_ascii_case(catalog)))
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

    #[test]
    fn hints_are_dropped() {
        assert_eq!(
            without_hints("Catalog Error: Table with name x does not exist!\nDid you mean \"y\"?"),
            "Catalog Error: Table with name x does not exist!"
        );
        assert_eq!(
            without_hints("Binder Error: Referenced column \"x\" not found in FROM clause!\nCandidate bindings: \"a\""),
            "Binder Error: Referenced column \"x\" not found in FROM clause!"
        );
    }
}
