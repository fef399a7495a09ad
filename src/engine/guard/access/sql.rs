//! Grants as DuckDB SQL: the conditions the catalog listings are filtered
//! by ([`Access::listing`]) and the policy document of row filters and
//! masks the C++ side applies ([`Access::policy`]).

use super::super::describe::PlanObject;
use super::super::{forbid, Accepted, Refusal};
use super::{Access, Grants, Pattern, TablePolicy, LISTINGS};
use crate::config::grants::Part;
use crate::engine::sql_string;

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

/// A table a statement reads, with what the caller sees of it.
type TableRead<'a> = (&'a PlanObject, TablePolicy);

/// The columns of a listing that hold a table's catalog, schema and name.
const TABLE_NAMES: [&str; 3] = ["database_name", "schema_name", "table_name"];

/// A mask of `column` that shows NULL where `condition` holds.
fn unless(condition: String, column: &str) -> (String, String) {
    (
        column.to_string(),
        format!("CASE WHEN {condition} THEN NULL ELSE {column} END"),
    )
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
}

impl Access {
    /// What it sees of DuckDB's catalog listing `function` (one of
    /// [`LISTINGS`]): a filter to the objects its roles let it read, and
    /// masks where a listing would tell more than it may know (definitions,
    /// which may name other objects; a filtered table's row count; a
    /// narrowed table's column count).
    /// `None` for any other function.
    pub fn listing(&self, function: &str) -> Option<TablePolicy> {
        let sees = |names: &[&str]| self.sees_sql(names);
        let all_patterns = |names: &[&str]| self.patterns_sql(names);
        let table = TABLE_NAMES;
        let narrowed = self.not_whole_sql(Grants::narrows_sql);
        let filtered = self.not_whole_sql(Grants::filters_sql);
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

    /// Whether any role lets the object whose names `columns` hold be read,
    /// as SQL.
    fn sees_sql(&self, columns: &[&str]) -> String {
        any_of(self.grants.iter().map(|g| g.reads_sql(columns)))
    }

    /// Whether any role's patterns (read or write) name the object whose
    /// names `columns` hold, as SQL.
    fn patterns_sql(&self, columns: &[&str]) -> String {
        any_of(
            self.grants
                .iter()
                .flat_map(|g| g.read.iter().chain(&g.write))
                .map(|p| p.condition(columns)),
        )
    }

    /// Whether no role reads a listed table whole, as `part` (its
    /// narrowing, its filter) says, as SQL: a role that reads the table
    /// whole (unnarrowed / unfiltered) lifts the narrowing / filter, as for
    /// reads.
    fn not_whole_sql(&self, part: fn(&Grants, &[&str]) -> String) -> String {
        format!(
            "NOT ({})",
            any_of(self.grants.iter().map(|g| format!(
                "({}) AND NOT ({})",
                g.reads_sql(&TABLE_NAMES),
                part(g, &TABLE_NAMES)
            )))
        )
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
        let listings = listings_read(accepted);
        if !self.has_policies() && listings.is_empty() {
            return Ok(None);
        }
        let (tables, any) = self.tables_read(accepted)?;
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
        Ok(Some(self.document(tables, listings)))
    }

    /// Each table the statement reads, once, with what this caller sees of
    /// it, and whether any is filtered or masked; a change of a filtered or
    /// masked table is refused.
    fn tables_read<'a>(
        &self,
        accepted: &'a Accepted,
    ) -> Result<(Vec<TableRead<'a>>, bool), Refusal> {
        let mut tables: Vec<TableRead<'a>> = Vec::new();
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
        Ok((tables, any))
    }

    /// The policy document of the tables read and the listings scanned.
    fn document(&self, tables: Vec<TableRead<'_>>, listings: Vec<&str>) -> String {
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
        crate::engine::policy::Document {
            tables,
            functions,
            listings: LISTINGS,
            claims: &self.claims,
        }
        .to_json()
    }
}

/// The catalog listings ([`LISTINGS`]) the statement scans, each once.
fn listings_read(accepted: &Accepted) -> Vec<&str> {
    let mut listings: Vec<&str> = accepted
        .sources
        .iter()
        .map(String::as_str)
        .filter(|s| LISTINGS.contains(s))
        .collect();
    listings.sort_unstable();
    listings.dedup();
    listings
}
