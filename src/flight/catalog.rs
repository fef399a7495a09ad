//! What generic Flight SQL clients (JDBC tools, ADBC, SQLAlchemy dialects)
//! need from the catalog answers beyond the listings themselves: a table's
//! columns with DuckDB's type names, and the current catalog.
//!
//! Type names: `GetTables` with `include_schema` carries each table's Arrow
//! schema; Flight SQL lets each field say more in its metadata
//! (`ARROW:FLIGHT:SQL:TYPE_NAME`, `..._CATALOG_NAME`, ...), which the JDBC
//! driver's `getColumns` answers as `TYPE_NAME` and ADBC's `GetObjects` as
//! `xdbc_type_name`. Without it both fall back to a name of the Arrow type
//! (a HUGEINT reads `DECIMAL`, a UUID `VARCHAR`, a list `ARRAY`). The names
//! are DuckDB's own, from `DESCRIBE` of the same query, through the guard.
//!
//! The current catalog: Flight's session options (`GetSessionOptions`,
//! `SetSessionOptions`, `CloseSession` actions) hold `catalog` and `schema`,
//! which ADBC reads as the connection's current catalog and schema and the
//! JDBC driver sets from its `catalog` property. The gateway's database is
//! the current catalog of every call (each runs on a pooled connection);
//! setting it to that name is accepted, to another refused.

use std::collections::HashMap;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use arrow_flight::sql::CommandGetTables;
use futures::TryStreamExt;
use prost::Message;
use tonic::Status;

use crate::core::state::AppState;
use crate::engine::catalogs::DatabaseEntry;
use crate::flight::options::CallOptions;
use crate::flight::results;
use crate::identity::Identity;

/// Field metadata keys of Flight SQL's column metadata.
pub const TYPE_NAME: &str = "ARROW:FLIGHT:SQL:TYPE_NAME";
const CATALOG_NAME: &str = "ARROW:FLIGHT:SQL:CATALOG_NAME";
const SCHEMA_NAME: &str = "ARROW:FLIGHT:SQL:SCHEMA_NAME";
const TABLE_NAME: &str = "ARROW:FLIGHT:SQL:TABLE_NAME";
const PRECISION: &str = "ARROW:FLIGHT:SQL:PRECISION";
const SCALE: &str = "ARROW:FLIGHT:SQL:SCALE";

/// `name` quoted as a DuckDB identifier.
pub fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The columns of `catalog.schema.table` as a query of it returns them to
/// `auth`, each field with DuckDB's type name and where it lives in its
/// metadata; `None` when the caller may not read it (not listed).
pub async fn table_schema(
    state: &AppState,
    auth: &Identity,
    catalog: &str,
    schema: &str,
    table: &str,
) -> Result<Option<SchemaRef>, Status> {
    let name = format!("{}.{}.{}", quoted(catalog), quoted(schema), quoted(table));
    // The Arrow types, through the guard like any query of the caller's.
    let sql = format!("SELECT * FROM {name} LIMIT 0");
    let arrow = match results::start(state, auth, sql, Vec::new(), CallOptions::default()).await {
        Ok(started) => started.schema.clone(),
        Err(e) if e.code() == tonic::Code::PermissionDenied => return Ok(None),
        Err(e) => return Err(e),
    };
    // DuckDB's names of the same columns, in the same order.
    let sql = format!("DESCRIBE SELECT * FROM {name}");
    let started = results::start(state, auth, sql, Vec::new(), CallOptions::default()).await?;
    let batches: Vec<RecordBatch> = results::batches(started.answer).try_collect().await?;
    let mut names = Vec::new();
    for batch in &batches {
        let format = FormatOptions::default();
        let column = ArrayFormatter::try_new(batch.column(0).as_ref(), &format)
            .map_err(|e| Status::internal(format!("reading DESCRIBE: {e}")))?;
        let kind = ArrayFormatter::try_new(batch.column(1).as_ref(), &format)
            .map_err(|e| Status::internal(format!("reading DESCRIBE: {e}")))?;
        for i in 0..batch.num_rows() {
            names.push((column.value(i).to_string(), kind.value(i).to_string()));
        }
    }
    let fields: Vec<Field> = arrow
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let mut meta = f.metadata().clone();
            // By position, checked by name: DESCRIBE lists the columns the
            // query returns, in its order.
            if let Some((_, type_name)) = names.get(i).filter(|(n, _)| n == f.name()) {
                meta.insert(TYPE_NAME.into(), type_name.clone());
            }
            meta.insert(CATALOG_NAME.into(), catalog.into());
            meta.insert(SCHEMA_NAME.into(), schema.into());
            meta.insert(TABLE_NAME.into(), table.into());
            if let DataType::Decimal128(p, s) | DataType::Decimal256(p, s) = f.data_type() {
                meta.insert(PRECISION.into(), p.to_string());
                meta.insert(SCALE.into(), s.to_string());
            }
            f.as_ref().clone().with_metadata(meta)
        })
        .collect();
    Ok(Some(Arc::new(Schema::new_with_metadata(
        fields,
        arrow.metadata().clone(),
    ))))
}

/// Flight's `SessionOptionValue` (Flight.proto), the string case: the
/// other cases of its `oneof` (bool 2, int64 3, double 4, list 5) decode
/// as no string, which a setter refuses as an invalid value.
#[derive(Clone, PartialEq, Message)]
pub struct SessionOptionValue {
    #[prost(string, optional, tag = "1")]
    pub string_value: Option<String>,
}

/// `GetSessionOptionsResult` and `SetSessionOptionsRequest`: options by name.
#[derive(Clone, PartialEq, Message)]
pub struct SessionOptions {
    #[prost(map = "string, message", tag = "1")]
    pub session_options: HashMap<String, SessionOptionValue>,
}

/// `SetSessionOptionsResult.Error`.
#[derive(Clone, PartialEq, Message)]
pub struct SetSessionOptionError {
    /// `SetSessionOptionsResult.ErrorValue`: 1 invalid name, 2 invalid value.
    #[prost(int32, tag = "1")]
    pub value: i32,
}

/// `SetSessionOptionsResult`: the options not set, and why.
#[derive(Clone, PartialEq, Message)]
pub struct SetSessionOptionsResult {
    #[prost(map = "string, message", tag = "1")]
    pub errors: HashMap<String, SetSessionOptionError>,
}

/// `CloseSessionResult`: 1 CLOSED.
#[derive(Clone, PartialEq, Message)]
pub struct CloseSessionResult {
    #[prost(int32, tag = "1")]
    pub status: i32,
}

/// The session options every call of the gateway runs under.
pub fn session_options(current_catalog: &str) -> SessionOptions {
    let text = |s: &str| SessionOptionValue {
        string_value: Some(s.to_string()),
    };
    SessionOptions {
        session_options: HashMap::from([
            ("catalog".to_string(), text(current_catalog)),
            ("schema".to_string(), text("main")),
        ]),
    }
}

/// The answer to `SetSessionOptions`: what already holds is accepted,
/// anything else refused option by option (nothing changes: each call runs
/// on a pooled connection whose catalog is the gateway's database).
pub fn set_session_options(
    current_catalog: &str,
    asked: &SessionOptions,
) -> SetSessionOptionsResult {
    let holds = session_options(current_catalog).session_options;
    let mut errors = HashMap::new();
    for (name, value) in &asked.session_options {
        let verdict = match holds.get(name) {
            None => Some(1),
            Some(v)
                if v.string_value.as_deref().map(str::to_ascii_lowercase)
                    == value.string_value.as_deref().map(str::to_ascii_lowercase) =>
            {
                None
            }
            Some(_) => Some(2),
        };
        if let Some(value) = verdict {
            errors.insert(name.clone(), SetSessionOptionError { value });
        }
    }
    SetSessionOptionsResult { errors }
}

/// Tables whose Arrow schema one GetTables may read (`include_schema`):
/// each is a `LIMIT 0` query through the guard.
const MAX_SCHEMA_TABLES: usize = 500;

/// GetTables' answer: the tables of `databases` (what the caller may see)
/// that its filters match, each with its Arrow schema when asked.
pub async fn tables(
    state: &AppState,
    auth: &Identity,
    databases: &[DatabaseEntry],
    query: &CommandGetTables,
) -> Result<RecordBatch, Status> {
    let mut rows = Vec::new();
    for d in databases {
        if query.catalog.as_ref().is_some_and(|c| c != &d.name) {
            continue;
        }
        for s in &d.schemas {
            if query
                .db_schema_filter_pattern
                .as_ref()
                .is_some_and(|p| !like(p, &s.name))
            {
                continue;
            }
            for t in &s.tables {
                let kind = t.kind.to_uppercase();
                let wanted = query
                    .table_name_filter_pattern
                    .as_ref()
                    .is_none_or(|p| like(p, &t.name))
                    && (query.table_types.is_empty() || query.table_types.contains(&kind));
                if wanted {
                    rows.push((d.name.clone(), s.name.clone(), t.name.clone(), kind));
                }
            }
        }
    }
    if query.include_schema && rows.len() > MAX_SCHEMA_TABLES {
        return Err(Status::resource_exhausted(format!(
            "{} tables match; with their schemas at most {MAX_SCHEMA_TABLES} are listed at once: narrow the filters",
            rows.len()
        )));
    }
    let mut b = query.clone().into_builder();
    for (c, s, t, kind) in rows {
        let schema = if query.include_schema {
            // The table's columns as a query of it returns them,
            // with DuckDB's type names; what the caller may not
            // read is not listed.
            match table_schema(state, auth, &c, &s, &t).await? {
                Some(schema) => schema,
                None => continue,
            }
        } else {
            Arc::new(Schema::empty())
        };
        b.append(c, s, t, kind, &schema)
            .map_err(|e| Status::internal(format!("building the answer: {e}")))?;
    }
    b.build()
        .map_err(|e| Status::internal(format!("building the answer: {e}")))
}

/// `%` and `_` of a Flight SQL filter pattern.
fn like(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('%', rest)) => (0..=t.len()).any(|i| go(rest, &t[i..])),
            Some(('_', rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    go(&p, &t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_holds_may_be_set() {
        let text = |s: &str| SessionOptionValue {
            string_value: Some(s.into()),
        };
        let ask = |pairs: &[(&str, SessionOptionValue)]| SessionOptions {
            session_options: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect(),
        };
        let r = set_session_options(
            "shop",
            &ask(&[("catalog", text("shop")), ("schema", text("MAIN"))]),
        );
        assert!(r.errors.is_empty(), "{r:?}");
        let r = set_session_options(
            "shop",
            &ask(&[
                ("catalog", text("lake")),
                ("search_path", text("x")),
                ("schema", SessionOptionValue { string_value: None }),
            ]),
        );
        assert_eq!(r.errors["catalog"].value, 2);
        assert_eq!(r.errors["search_path"].value, 1);
        assert_eq!(r.errors["schema"].value, 2);
        // Round trip through the wire format a client reads.
        let got = SessionOptions::decode(&*session_options("shop").encode_to_vec()).unwrap();
        assert_eq!(
            got.session_options["catalog"].string_value.as_deref(),
            Some("shop")
        );
    }
}
