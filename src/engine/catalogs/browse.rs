//! The attached catalogs as `GET /catalog` and the doors' metadata browse
//! them: databases, schemas, tables, columns and snapshots, each filtered
//! to what the caller may see.

use super::Catalog;

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
    conn: &crate::engine::ffi::Connection,
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
    conn: &crate::engine::ffi::Connection,
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
    conn: &crate::engine::ffi::Connection,
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
    conn: &crate::engine::ffi::Connection,
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

/// Every schema, table and view clients can query ([`list`]), with each
/// table's and view's columns: what roles' grants are checked against at
/// start-up.
pub fn objects(
    conn: &crate::engine::ffi::Connection,
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
