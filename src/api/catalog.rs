//! `GET /catalog` and `GET /catalog/{database}/{schema}/{table}`: what
//! clients can query, with the same tokens as `/query`. The answers come
//! from DuckDB's own catalog views on a pooled connection, limited to the
//! gateway's database and the operator-declared catalogs.
//! `GET /catalog/functions`: the functions a caller may call, from the
//! guard's allow-list (no connection needed).

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

use crate::api::error::ApiError;
use crate::api::AppState;
use crate::engine::catalogs;
use crate::identity::Identity;

/// `GET /catalog`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct CatalogList {
    /// The gateway's own database first, then each declared catalog.
    pub databases: Vec<DatabaseInfo>,
}

/// One database.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct DatabaseInfo {
    /// The name queries use (`lake` in `lake.main.events`).
    pub name: String,
    /// `gateway` (the gateway's own database), the declared catalog's
    /// type (`ducklake`, `iceberg`, `delta`, `duckdb`), or `sources` (the
    /// operator's named sources, one view each).
    pub kind: String,
    /// Whether clients may only read it.
    pub read_only: bool,
    /// Its schemas.
    pub schemas: Vec<SchemaInfo>,
}

/// One schema.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SchemaInfo {
    /// The schema's name.
    pub name: String,
    /// Its tables and views.
    pub tables: Vec<TableInfo>,
}

/// One table or view in a listing.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TableInfo {
    /// Its name.
    pub name: String,
    /// `table` or `view`.
    pub kind: String,
}

/// `GET /catalog/{database}/{schema}/{table}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TableDetail {
    /// The database.
    pub database: String,
    /// The database's kind, as in [`DatabaseInfo::kind`].
    pub database_kind: String,
    /// The schema.
    pub schema: String,
    /// The table.
    pub table: String,
    /// `table` or `view`.
    pub kind: String,
    /// Its columns in order, with DuckDB's types.
    pub columns: Vec<ColumnInfo>,
    /// DuckLake only: the snapshot the next query reads.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotInfo>,
}

/// One column.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ColumnInfo {
    /// Its name.
    pub name: String,
    /// DuckDB's type, e.g. `DECIMAL(18,3)`, `VARCHAR[]`.
    #[serde(rename = "type")]
    pub data_type: String,
    /// Whether it may hold NULL.
    pub nullable: bool,
}

/// A DuckLake snapshot.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SnapshotInfo {
    /// Its id.
    pub id: i64,
    /// When it was committed.
    pub time: String,
    /// The lake's schema version at it.
    pub schema_version: i64,
}

use crate::core::catalog::{confine, on_pooled};

/// Lists databases, schemas and tables.
#[utoipa::path(get, path = "/catalog", operation_id = "list_catalog", tag = "catalog",
    responses(
        (status = 200, description = "Every database clients can query, with its schemas and tables", body = CatalogList),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 502, description = "A catalog's database could not be reached", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No pooled connection within the acquire timeout", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn list(
    State(state): State<AppState>,
    auth: Identity,
) -> Result<Json<CatalogList>, ApiError> {
    let declared = state.catalogs.clone();
    let mut databases = on_pooled(&state, &auth.name, move |conn| {
        catalogs::list(conn, &declared)
    })
    .await?;
    if let Some(access) = &auth.access {
        confine(&mut databases, access);
    }
    Ok(Json(CatalogList {
        databases: databases
            .into_iter()
            .map(|d| DatabaseInfo {
                name: d.name,
                kind: d.kind.into(),
                read_only: d.read_only,
                schemas: d
                    .schemas
                    .into_iter()
                    .map(|s| SchemaInfo {
                        name: s.name,
                        tables: s
                            .tables
                            .into_iter()
                            .map(|t| TableInfo {
                                name: t.name,
                                kind: t.kind.into(),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }))
}

/// `GET /catalog/functions`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FunctionList {
    /// Every function the guard lets this caller call by name, sorted.
    pub functions: Vec<FunctionInfo>,
}

/// One function clients may call.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct FunctionInfo {
    /// Its name, as SQL calls it (`upper`, `read_parquet`).
    pub name: String,
    /// DuckDB's function types for the name that this caller may call:
    /// `scalar`, `aggregate`, `window`, `macro`, `table`, ...
    pub kinds: Vec<String>,
}

/// Whether `name` is one a client types as a plain word (not an operator
/// such as `->>`, not one of DuckDB's `__internal` helpers).
fn callable_word(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && !name.starts_with("__")
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The functions a caller may call: the guard's allow-list (allowed
/// scalars, aggregates and macros, table functions and readers); for a
/// caller confined by roles, table functions only where they are
/// generators ([`GENERATORS`](crate::engine::guard::access::GENERATORS))
/// or catalog listings ([`LISTINGS`](crate::engine::guard::access::LISTINGS),
/// filtered to what it may see), since its plans may scan nothing else.
pub fn callable_functions(confined: bool) -> Vec<FunctionInfo> {
    use crate::engine::guard::access::{GENERATORS, LISTINGS};
    use crate::engine::guard::functions::{all, Verdict};
    let mut out: Vec<FunctionInfo> = all()
        .iter()
        .filter(|(name, _)| callable_word(name))
        .filter_map(|(name, e)| {
            let mut kinds: Vec<String> = e
                .kinds
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect();
            // A pragma is a statement, not a call; the allow-list's
            // verdict on a name covers its table form only when it says so.
            let table = |k: &str| k == "table" || k == "table_macro";
            match e.verdict {
                Verdict::Allow => kinds.retain(|k| k != "pragma" && !table(k)),
                Verdict::Table | Verdict::Reader => {
                    kinds.retain(|k| k != "pragma");
                    if confined
                        && !GENERATORS.contains(&name.as_str())
                        && !LISTINGS.contains(&name.as_str())
                    {
                        kinds.retain(|k| !table(k));
                    }
                }
                _ => return None,
            }
            (!kinds.is_empty()).then(|| FunctionInfo {
                name: name.clone(),
                kinds,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

/// Lists the functions this caller may call (for autocompletion).
///
/// The guard's allow-list, not DuckDB's `duckdb_functions()` (which the
/// guard refuses to clients): a name listed here is one the guard lets
/// through; a caller whose roles confine it sees only the table functions
/// that generate rows.
#[utoipa::path(get, path = "/catalog/functions", operation_id = "list_functions", tag = "catalog",
    responses(
        (status = 200, description = "The functions this caller may call, sorted by name", body = FunctionList),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn functions(auth: Identity) -> Json<FunctionList> {
    Json(FunctionList {
        functions: callable_functions(auth.access.is_some()),
    })
}

/// Describes one table: its columns and, for DuckLake, the current snapshot.
#[utoipa::path(get, path = "/catalog/{database}/{schema}/{table}", operation_id = "show_table", tag = "catalog",
    params(
        ("database" = String, Path, description = "The database, e.g. `lake`"),
        ("schema" = String, Path, description = "The schema, e.g. `main`"),
        ("table" = String, Path, description = "The table or view")
    ),
    responses(
        (status = 200, description = "The table's columns with DuckDB's types", body = TableDetail),
        (status = 401, description = "Missing or wrong token", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such table in a database clients can query", body = crate::api::error::Problem, content_type = "application/problem+json"),
        (status = 503, description = "No pooled connection within the acquire timeout", body = crate::api::error::Problem, content_type = "application/problem+json")
    ),
    security(("bearer" = []), ()))]
pub async fn table(
    State(state): State<AppState>,
    auth: Identity,
    Path((database, schema, table)): Path<(String, String, String)>,
) -> Result<Json<TableDetail>, ApiError> {
    let declared = state.catalogs.clone();
    let (db, sc, tb) = (database.clone(), schema.clone(), table.clone());
    let missing = || {
        ApiError::NotFound(format!(
            "no table {database}.{schema}.{table} that clients can query"
        ))
    };
    // What a confined caller may not see does not exist for it.
    if let Some(access) = &auth.access {
        if !access.sees(&database, &schema, &table) {
            return Err(missing());
        }
    }
    let mut detail = on_pooled(&state, &auth.name, move |conn| {
        catalogs::describe(conn, &declared, &db, &sc, &tb)
    })
    .await?
    .ok_or_else(missing)?;
    if let Some(access) = &auth.access {
        detail
            .columns
            .retain(|c| access.may_read_column(&database, &schema, &table, &c.name));
    }
    Ok(Json(TableDetail {
        database,
        database_kind: detail.database_kind.into(),
        schema,
        table,
        kind: detail.kind.into(),
        columns: detail
            .columns
            .into_iter()
            .map(|c| ColumnInfo {
                name: c.name,
                data_type: c.data_type,
                nullable: c.nullable,
            })
            .collect(),
        snapshot: detail.snapshot.map(|s| SnapshotInfo {
            id: s.id,
            time: s.time,
            schema_version: s.schema_version,
        }),
    }))
}
