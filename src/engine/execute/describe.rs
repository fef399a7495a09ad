//! A statement described, not run: the Arrow schemas of its result and of
//! its parameters, as DuckDB's prepare reports them, for clients that ask
//! before they execute (a Flight SQL `CreatePreparedStatement`: JDBC's
//! `getMetaData`, ADBC's `ExecuteSchema` and `GetParameterSchema`).
//!
//! The statement has passed the guard (and the caller's grants) like any
//! other; it is prepared (parsed and bound, never executed) on the pooled
//! connection's guard twin, which binds every statement the guard judges,
//! and its types are turned into Arrow by DuckDB's own converter with the
//! connection's Arrow options, so the schema is the one DuckDB's Arrow
//! export gives when the statement runs.

use std::ffi::{c_char, CStr, CString};
use std::sync::{Arc, OnceLock};

use arrow::datatypes::{Schema, SchemaRef};
use arrow::ffi::FFI_ArrowSchema;
use duckdb::ffi;

use crate::encode::{Format, ResultEncoder};
use crate::engine::ffi::RawConnection;
use crate::engine::guard;

use super::control::QueryControl;
use super::error::QueryError;
use super::sender::Sender;

/// What a described statement returns and takes.
#[derive(Debug, Clone)]
pub struct Described {
    /// The result's columns, as the statement's Arrow answer will carry
    /// them; `None` where DuckDB cannot tell before parameters are bound
    /// (`SELECT ? + 1`: the type follows the value).
    pub dataset: Option<SchemaRef>,
    /// One field per parameter (`1`, `2`, ... or the `$name`), typed as
    /// DuckDB's binder inferred it, Arrow's `Null` ("any") where it did not.
    pub parameters: SchemaRef,
}

/// Where a describe job leaves its answer.
pub type DescribeSlot = Arc<OnceLock<Described>>;

/// Describes the accepted statement: `sql` is what an Arrow answer runs
/// (the statement, or its wrapper), `marks` where that wrapper leaves
/// values DuckDB rendered for want of an Arrow type.
pub(super) fn described(
    raw: &RawConnection,
    accepted: &guard::Accepted,
    sql: &str,
    marks: &[Vec<crate::encode::Mark>],
) -> Result<Described, QueryError> {
    let mut described = prepare_schemas(raw, sql)?;
    if let Some(dataset) = described.dataset.take() {
        let dataset = crate::encode::mark_schema(&dataset, marks);
        described.dataset = Some(as_answered(dataset, accepted));
    }
    Ok(described)
}

/// Leaves `described` in `out` and ends the answer with an empty body.
pub(super) fn answer(
    described: Described,
    accepted: &guard::Accepted,
    tx: &Sender,
    control: &QueryControl,
    out: &DescribeSlot,
) -> Result<(), QueryError> {
    let _ = out.set(described);
    tx.start_empty(&accepted.kind, control);
    Ok(())
}

/// The schema as the gateway's Arrow answer carries it (UHUGEINT widened,
/// see [`ResultEncoder::unsigned_huge`]).
fn as_answered(schema: SchemaRef, accepted: &guard::Accepted) -> SchemaRef {
    let Some(types) = accepted
        .result
        .as_ref()
        .map(|r| &r.types)
        .filter(|t| t.len() == schema.fields().len())
    else {
        return schema;
    };
    let mut encoder = ResultEncoder::new(Format::Arrow, crate::encode::mark_uuids(&schema, types));
    encoder.unsigned_huge(
        types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.as_str() == "UHUGEINT")
            .map(|(i, _)| i)
            .collect(),
    );
    encoder.schema().clone()
}

/// Owned C API handles, destroyed once.
struct Prepared(ffi::duckdb_prepared_statement);

impl Drop for Prepared {
    fn drop(&mut self) {
        // SAFETY: made by `duckdb_prepare`, destroyed once.
        unsafe { ffi::duckdb_destroy_prepare(&mut self.0) }
    }
}

struct Types(Vec<ffi::duckdb_logical_type>);

impl Drop for Types {
    fn drop(&mut self) {
        for t in &mut self.0 {
            // SAFETY: each made by DuckDB for this list, destroyed once.
            unsafe { ffi::duckdb_destroy_logical_type(t) }
        }
    }
}

/// DuckDB's text at `p` (freed with `duckdb_free`), or `fallback`.
///
/// # Safety
/// `p` is null or a NUL-terminated string DuckDB allocated for the caller.
unsafe fn owned_text(p: *const c_char, fallback: String) -> String {
    if p.is_null() {
        return fallback;
    }
    let s = CStr::from_ptr(p).to_string_lossy().into_owned();
    ffi::duckdb_free(p as *mut std::ffi::c_void);
    s
}

fn internal(what: &str) -> QueryError {
    QueryError::Internal(format!("describing the statement: {what}"))
}

/// Prepares `sql` on `raw` and converts its result and parameter types.
fn prepare_schemas(raw: &RawConnection, sql: &str) -> Result<Described, QueryError> {
    let prepared = prepare(raw, sql)?;
    let dataset = result_schema(raw, &prepared)?;
    let parameters = parameter_schema(raw, &prepared)?;
    Ok(Described {
        dataset,
        parameters,
    })
}

/// `sql` prepared (parsed and bound, never executed) on `raw`; DuckDB's
/// error if it does not prepare.
fn prepare(raw: &RawConnection, sql: &str) -> Result<Prepared, QueryError> {
    let c_sql = CString::new(sql).map_err(|_| internal("a NUL byte in the SQL"))?;
    let mut handle: ffi::duckdb_prepared_statement = std::ptr::null_mut();
    // SAFETY: `raw` is a live connection this thread alone uses; `c_sql` is
    // NUL-terminated; the handle is destroyed by `Prepared` even on failure.
    let state = unsafe { ffi::duckdb_prepare(raw.as_ptr(), c_sql.as_ptr(), &mut handle) };
    let prepared = Prepared(handle);
    if state != ffi::DuckDBSuccess {
        // The guard bound this text a moment ago: a failure here is DuckDB's
        // error, reported as the query's would be.
        // SAFETY: the handle holds the error (or is null-safe per the API).
        let message = unsafe {
            let e = ffi::duckdb_prepare_error(prepared.0);
            if e.is_null() {
                "the statement did not prepare".to_string()
            } else {
                CStr::from_ptr(e).to_string_lossy().into_owned()
            }
        };
        return Err(QueryError::Sql {
            class: "Unknown".into(),
            message,
            at: None,
        });
    }
    Ok(prepared)
}

/// The Arrow schema of the prepared statement's result; `None` where
/// DuckDB cannot tell it before execution.
fn result_schema(
    raw: &RawConnection,
    prepared: &Prepared,
) -> Result<Option<SchemaRef>, QueryError> {
    // SAFETY: `prepared.0` is a successfully prepared
    // statement; indexes are within the counts DuckDB reports; every type
    // and name DuckDB hands over is owned by `Types` or freed by
    // `owned_text`.
    unsafe {
        let columns = ffi::duckdb_prepared_statement_column_count(prepared.0);
        let mut names = Vec::new();
        let mut types = Types(Vec::new());
        let mut known = true;
        for i in 0..columns {
            let name = owned_text(
                ffi::duckdb_prepared_statement_column_name(prepared.0, i),
                format!("column{i}"),
            );
            let t = ffi::duckdb_prepared_statement_column_logical_type(prepared.0, i);
            if t.is_null() {
                return Err(internal("a column without a type"));
            }
            let id = ffi::duckdb_get_type_id(t);
            types.0.push(t);
            known &= id != ffi::DUCKDB_TYPE_DUCKDB_TYPE_INVALID;
            names.push(name);
        }
        // DuckDB's conversion of a prepared statement's types can fail where
        // its export of the result does not (a GEOMETRY with a CRS): then,
        // as for types that follow the parameters, the result's schema
        // comes with its execution.
        Ok(if known {
            to_arrow(raw, types, &names)
                .inspect_err(|e| {
                    tracing::warn!(error.cause = %e, "the result's Arrow schema is left to its execution")
                })
                .ok()
        } else {
            None
        })
    }
}

/// The Arrow schema of the prepared statement's parameters: one field per
/// parameter, typed as the binder inferred it (Arrow's `Null` where it did
/// not), UUIDs marked.
fn parameter_schema(raw: &RawConnection, prepared: &Prepared) -> Result<SchemaRef, QueryError> {
    // SAFETY: as in `result_schema`; a parameter type DuckDB does not know
    // is destroyed here and replaced by one `Types` owns.
    unsafe {
        let count = ffi::duckdb_nparams(prepared.0);
        let mut names = Vec::new();
        // Which parameters are UUIDs (their Arrow type is text).
        let mut uuids = Vec::new();
        let mut types = Types(Vec::new());
        for i in 1..=count {
            names.push(owned_text(
                ffi::duckdb_parameter_name(prepared.0, i),
                i.to_string(),
            ));
            let t = ffi::duckdb_param_logical_type(prepared.0, i);
            let t = if t.is_null()
                || ffi::duckdb_get_type_id(t) == ffi::DUCKDB_TYPE_DUCKDB_TYPE_INVALID
            {
                if !t.is_null() {
                    let mut t = t;
                    ffi::duckdb_destroy_logical_type(&mut t);
                }
                ffi::duckdb_create_logical_type(ffi::DUCKDB_TYPE_DUCKDB_TYPE_SQLNULL)
            } else {
                t
            };
            uuids.push(
                if ffi::duckdb_get_type_id(t) == ffi::DUCKDB_TYPE_DUCKDB_TYPE_UUID {
                    "UUID".to_string()
                } else {
                    String::new()
                },
            );
            types.0.push(t);
        }
        Ok(crate::encode::mark_uuids(
            &to_arrow(raw, types, &names)?,
            &uuids,
        ))
    }
}

/// DuckDB's Arrow conversion of `types` named `names`, with `raw`'s Arrow
/// options (the ones its results are exported with).
fn to_arrow(
    raw: &RawConnection,
    mut types: Types,
    names: &[String],
) -> Result<SchemaRef, QueryError> {
    let c_names: Vec<CString> = names
        .iter()
        .map(|n| CString::new(n.as_str()).unwrap_or_default())
        .collect();
    let mut name_ptrs: Vec<*const c_char> = c_names.iter().map(|n| n.as_ptr()).collect();
    let mut out = FFI_ArrowSchema::empty();
    // SAFETY: the options are made and destroyed here; `types` and
    // `name_ptrs` hold `names.len()` live entries; `out` is an empty
    // ArrowSchema of the C data interface DuckDB fills (the same layout as
    // libduckdb-sys's `ArrowSchema`, as duckdb-rs casts it too); the error
    // data is destroyed once.
    let schema = unsafe {
        let mut options: ffi::duckdb_arrow_options = std::ptr::null_mut();
        ffi::duckdb_connection_get_arrow_options(raw.as_ptr(), &mut options);
        let mut error = ffi::duckdb_to_arrow_schema(
            options,
            types.0.as_mut_ptr(),
            name_ptrs.as_mut_ptr(),
            names.len() as ffi::idx_t,
            &mut out as *mut FFI_ArrowSchema as *mut ffi::ArrowSchema,
        );
        ffi::duckdb_destroy_arrow_options(&mut options);
        let failed = !error.is_null() && ffi::duckdb_error_data_has_error(error);
        let message = failed.then(|| {
            let m = ffi::duckdb_error_data_message(error);
            if m.is_null() {
                String::new()
            } else {
                CStr::from_ptr(m).to_string_lossy().into_owned()
            }
        });
        if !error.is_null() {
            ffi::duckdb_destroy_error_data(&mut error);
        }
        if let Some(m) = message {
            return Err(internal(&format!("DuckDB's Arrow conversion: {m}")));
        }
        Schema::try_from(&out)
            .map_err(|e| internal(&format!("reading DuckDB's Arrow schema: {e}")))?
    };
    Ok(Arc::new(schema))
}
