//! Parquet pages of a spooled result, written by DuckDB's own Parquet writer
//! as `/query?format=parquet` writes them.
//!
//! The spool holds Arrow; DuckDB reads those batches back (an Arrow scan)
//! and `COPY`s them to a Parquet file. Arrow does not carry every DuckDB type
//! (a UUID arrives as text, a HUGEINT as a decimal, a TIMETZ loses its
//! offset, a BIT turns into bytes), so each column is cast back to the type
//! DuckDB gave it, from the spooled value or, where Arrow lost something,
//! from DuckDB's own text of it (the CSV twin, `CAST(x AS VARCHAR)` of the
//! original). The file then has the schema and values `/query` would send.
//!
//! The converting database is private to the process: in memory, no
//! extensions, never given client SQL (its only statements are built here
//! from the result's names and DuckDB's types).

use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::ffi_stream::FFI_ArrowArrayStream;
use duckdb::ffi;

use crate::engine::ffi::RawDatabase;
use crate::statements::pages::{Page, PageError, PageFile, PageReader};
use crate::statements::spool::SpoolResult;

/// How DuckDB's Parquet writer starts the message of a value Parquet
/// cannot hold (a negative INTERVAL, say).
const PARQUET_CANNOT_HOLD: &str = "Parquet files do not support";

/// The private database, opened once per process.
fn database() -> Result<Arc<RawDatabase>, PageError> {
    static DB: OnceLock<Result<Arc<RawDatabase>, String>> = OnceLock::new();
    DB.get_or_init(|| {
        RawDatabase::open(
            None,
            &[
                ("autoinstall_known_extensions", "false".into()),
                ("autoload_known_extensions", "false".into()),
                ("threads", "2".into()),
            ],
        )
        .map(Arc::new)
        .map_err(|e| format!("opening the Parquet writer's database: {e}"))
    })
    .clone()
    .map_err(PageError::Internal)
}

/// Whether a column of this DuckDB type is rebuilt from DuckDB's text of
/// it (its CSV twin) rather than from its Arrow value: the types whose Arrow
/// form loses something DuckDB's Parquet writer would keep (a BIT becomes
/// bytes, a TIMETZ its UTC time, a (U)HUGEINT a decimal, a BIGNUM or a
/// GEOMETRY opaque bytes, an INTERVAL past Arrow's range NULL), alone or inside a nested
/// type. Every other type's Arrow value casts back exactly (DuckDB's text
/// does not always: the largest TIMESTAMPTZ's text does not parse).
fn from_text(duckdb_type: &str) -> bool {
    [
        "BIT",
        "TIME WITH TIME ZONE",
        "HUGEINT",
        "INTERVAL",
        "BIGNUM",
        "VARINT",
        "GEOMETRY",
    ]
    .iter()
    .any(|t| duckdb_type.contains(t))
}

fn quoted(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The spool columns the page reads, and the SELECT list that turns them
/// (named `c0`, `c1`, ... in the scan) back into the result's columns.
fn select_list(result: &SpoolResult) -> (Vec<usize>, String) {
    let layout = &result.layout;
    let mut source = Vec::new();
    let mut exprs = Vec::new();
    for (i, (name, ty)) in layout.names.iter().zip(&layout.types).enumerate() {
        let column = match layout.csv[i] {
            Some(text) if from_text(ty) => text,
            _ => i,
        };
        // A TYPE value is spooled as DuckDB's text of it, which is what
        // DuckDB's Parquet writer writes of it too (and no cast makes a TYPE
        // of text).
        let holds_type = crate::encode::marks::field_holds(result.schema.field(i), "TYPE");
        if holds_type {
            exprs.push(format!("c{} AS {}", source.len(), quoted(name)));
        } else {
            exprs.push(format!(
                "CAST(c{} AS {ty}) AS {}",
                source.len(),
                quoted(name)
            ));
        }
        source.push(column);
    }
    (source, exprs.join(", "))
}

/// Writes `page` of `result` as a Parquet file in `dir` and charges its
/// bytes to the result's token and the spool, like the result itself: a
/// page that passes a quota is removed. Runs on a blocking thread.
pub fn write_page(result: &SpoolResult, page: Page, dir: &Path) -> Result<PageFile, PageError> {
    PageFile::charged(write(result, page, dir)?, result)
}

/// Writes `page` of `result` as a Parquet file in `dir`, returning its path
/// (the caller removes it). Runs on a blocking thread.
fn write(result: &SpoolResult, page: Page, dir: &Path) -> Result<PathBuf, PageError> {
    refuse_variant(result)?;
    let (source, select) = select_list(result);
    let mut stream = page_stream(result, page, source)?;
    let path = dir.join(format!(".page-{}.parquet", uuid::Uuid::new_v4().simple()));
    let copy = format!(
        "COPY (SELECT {select} FROM duckgate_page) TO '{}' (FORMAT parquet)",
        path.to_string_lossy().replace('\'', "''")
    );
    let db = database()?;
    let conn = db
        .connect_raw()
        .map_err(|e| internal("connecting to the Parquet writer", &e))?;
    let view = CString::new("duckgate_page").expect("static name");
    let copy = CString::new(copy)
        .map_err(|_| PageError::Internal("a column name holds a NUL byte".into()))?;
    // SAFETY: `conn` is a live connection of the private database, used by
    // this thread alone; `view` is NUL-terminated; `stream` is a valid
    // ArrowArrayStream that outlives every use (DuckDB reads it during the
    // COPY below, on this connection, before `stream` is dropped).
    let state = unsafe {
        ffi::duckdb_arrow_scan(
            conn.as_ptr(),
            view.as_ptr(),
            (&mut *stream as *mut FFI_ArrowArrayStream).cast(),
        )
    };
    if state != ffi::DuckDBSuccess {
        return Err(PageError::Internal(
            "DuckDB could not scan the spooled page".into(),
        ));
    }
    let outcome = run(&conn, &copy);
    drop(conn);
    drop(stream);
    finish_file(outcome, path)
}

/// An error of the gateway's own in writing a page: what failed and why.
fn internal(what: &str, e: &dyn std::fmt::Display) -> PageError {
    PageError::Internal(format!("{what}: {e}"))
}

/// Refuses a page of a result with a VARIANT column, which Parquet cannot
/// be given again from what the spool keeps.
fn refuse_variant(result: &SpoolResult) -> Result<(), PageError> {
    // A VARIANT is spooled as DuckDB's JSON of it (Arrow has no VARIANT), and
    // JSON does not say what DuckDB's VARIANT held (a DATE is a string, a
    // DECIMAL a number): the Parquet file `/query` writes cannot be made
    // again from it.
    if let Some(name) = (0..result.layout.names.len())
        .find(|&i| crate::encode::marks::field_holds(result.schema.field(i), "VARIANT"))
        .map(|i| &result.layout.names[i])
    {
        return Err(PageError::Unrepresentable(format!(
            "column {name} holds VARIANT values, which a statement's result keeps as their JSON: \
             its Parquet pages cannot hold DuckDB's VARIANT; ask for json, ndjson, csv or arrow pages, \
             or for Parquet from /query"
        )));
    }
    Ok(())
}

/// The page's rows as an Arrow stream DuckDB can scan: the spool's columns
/// `source`, named `c0`, `c1`, ...
fn page_stream(
    result: &SpoolResult,
    page: Page,
    source: Vec<usize>,
) -> Result<Box<FFI_ArrowArrayStream>, PageError> {
    let schema: SchemaRef = Arc::new(Schema::new(
        source
            .iter()
            .enumerate()
            .map(|(i, &c)| {
                Field::new(
                    format!("c{i}"),
                    result.schema.field(c).data_type().clone(),
                    true,
                )
            })
            .collect::<Vec<_>>(),
    ));
    let reader = PageReader::open(result, page, source, schema)
        .map_err(|e| internal("reading the spool", &e))?;
    Ok(Box::new(FFI_ArrowArrayStream::new(Box::new(reader))))
}

/// The written file's path, made the gateway's user's only; or the COPY's
/// error (a value Parquet cannot hold is the client's), the file removed.
fn finish_file(outcome: Result<(), String>, path: PathBuf) -> Result<PathBuf, PageError> {
    match outcome {
        Ok(()) => {
            // Like the spool's own files: the gateway's user only.
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| internal("the Parquet page's permissions", &e))?;
            Ok(path)
        }
        Err(message) => {
            let _ = std::fs::remove_file(&path);
            if message.contains(PARQUET_CANNOT_HOLD) {
                Err(PageError::Unrepresentable(message))
            } else {
                Err(PageError::Internal(format!(
                    "DuckDB's Parquet writer: {message}"
                )))
            }
        }
    }
}

/// Runs one statement on a raw connection; the error is DuckDB's message.
fn run(conn: &crate::engine::ffi::RawConnection, sql: &CStr) -> Result<(), String> {
    // SAFETY: duckdb_result is a plain C struct of pointers and integers,
    // for which all zeroes is the state DuckDB expects before a query.
    let mut result: ffi::duckdb_result = unsafe { std::mem::zeroed() };
    // SAFETY: `conn` is live; `sql` is NUL-terminated; `result` is a valid
    // out pointer, destroyed exactly once below whatever the outcome.
    let state = unsafe { ffi::duckdb_query(conn.as_ptr(), sql.as_ptr(), &mut result) };
    let outcome = if state == ffi::DuckDBSuccess {
        Ok(())
    } else {
        // SAFETY: the error text lives in `result` until it is destroyed;
        // it is copied first.
        let text = unsafe { ffi::duckdb_result_error(&mut result) };
        Err(if text.is_null() {
            "unknown error".to_string()
        } else {
            // SAFETY: non-null: a NUL-terminated string owned by `result`.
            unsafe { CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        })
    };
    // SAFETY: `result` was filled by `duckdb_query`; destroyed once.
    unsafe { ffi::duckdb_destroy_result(&mut result) };
    outcome
}
