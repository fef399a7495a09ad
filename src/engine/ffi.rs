//! The few DuckDB C API calls that duckdb-rs does not wrap: opening a database
//! that several crate connections share, and DuckDB's own statement splitter.

use std::ffi::{CStr, CString};
use std::ptr;

use duckdb::ffi;

/// A DuckDB database opened through the C API. Connections made from it
/// (crate or raw) keep the database instance alive on their own, so dropping
/// this handle first is safe.
pub struct RawDatabase {
    raw: ffi::duckdb_database,
}

// SAFETY: a duckdb_database is a pointer to a thread-safe DatabaseInstance
// wrapper; DuckDB allows connecting from any thread.
unsafe impl Send for RawDatabase {}
unsafe impl Sync for RawDatabase {}

impl RawDatabase {
    /// Opens `path` (`None` = in memory) with start-up options that must be in
    /// place before the first connection exists.
    pub fn open(
        path: Option<&std::path::Path>,
        options: &[(&str, String)],
    ) -> Result<Self, String> {
        let c_path = match path {
            Some(p) => CString::new(p.to_string_lossy().as_bytes())
                .map_err(|_| "database path contains NUL".to_string())?,
            None => CString::new(":memory:").expect("static string"),
        };
        unsafe {
            let mut config: ffi::duckdb_config = ptr::null_mut();
            if ffi::duckdb_create_config(&mut config) != ffi::DuckDBSuccess {
                return Err("cannot allocate DuckDB configuration".into());
            }
            for (name, value) in options {
                let n = CString::new(*name).map_err(|_| format!("{name}: NUL in name"))?;
                let v =
                    CString::new(value.as_str()).map_err(|_| format!("{name}: NUL in value"))?;
                if ffi::duckdb_set_config(config, n.as_ptr(), v.as_ptr()) != ffi::DuckDBSuccess {
                    ffi::duckdb_destroy_config(&mut config);
                    return Err(format!("DuckDB rejected option {name}={value}"));
                }
            }
            let mut db: ffi::duckdb_database = ptr::null_mut();
            let mut err: *mut std::os::raw::c_char = ptr::null_mut();
            let state = ffi::duckdb_open_ext(c_path.as_ptr(), &mut db, config, &mut err);
            ffi::duckdb_destroy_config(&mut config);
            if state != ffi::DuckDBSuccess {
                let msg = if err.is_null() {
                    "unknown error".to_string()
                } else {
                    let m = CStr::from_ptr(err).to_string_lossy().into_owned();
                    ffi::duckdb_free(err.cast());
                    m
                };
                return Err(msg);
            }
            Ok(Self { raw: db })
        }
    }

    /// A duckdb-rs connection to this database.
    pub fn connect(&self) -> duckdb::Result<duckdb::Connection> {
        // SAFETY: `raw` is an open database; the crate does not close it
        // because it did not open it.
        unsafe { duckdb::Connection::open_from_raw(self.raw) }
    }

    /// A raw connection, for the statement splitter.
    pub fn connect_raw(&self) -> Result<RawConnection, String> {
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: `raw` is an open database.
        let state = unsafe { ffi::duckdb_connect(self.raw, &mut con) };
        if state != ffi::DuckDBSuccess {
            return Err("cannot connect to the database".into());
        }
        Ok(RawConnection { raw: con })
    }
}

impl Drop for RawDatabase {
    fn drop(&mut self) {
        // SAFETY: opened by `open`, closed once.
        unsafe { ffi::duckdb_close(&mut self.raw) }
    }
}

/// A raw DuckDB connection used only to parse and classify statements.
pub struct RawConnection {
    raw: ffi::duckdb_connection,
}

// SAFETY: a connection may move between threads; it is used by one at a time
// (it lives in a pool slot that one request owns).
unsafe impl Send for RawConnection {}

impl Drop for RawConnection {
    fn drop(&mut self) {
        // SAFETY: connected in `connect_raw`, disconnected once.
        unsafe { ffi::duckdb_disconnect(&mut self.raw) }
    }
}

/// What DuckDB's parser and binder say about one request's SQL.
#[derive(Debug)]
pub enum Extracted {
    /// The text could not be parsed.
    ParseError(String),
    /// The text holds this many statements (0 or more than 1).
    Count(usize),
    /// Exactly one statement, bound, of this type.
    One(ffi::duckdb_statement_type),
    /// Exactly one statement that parsed but did not bind.
    BindError(String),
}

impl RawConnection {
    /// Splits `sql` with DuckDB's own parser and, if it holds exactly one
    /// statement, prepares (binds, never executes) it to learn its type.
    pub fn classify(&self, sql: &str) -> Extracted {
        let Ok(c_sql) = CString::new(sql) else {
            return Extracted::ParseError("the SQL text contains a NUL byte".into());
        };
        unsafe {
            let mut extracted: ffi::duckdb_extracted_statements = ptr::null_mut();
            let count = ffi::duckdb_extract_statements(self.raw, c_sql.as_ptr(), &mut extracted);
            let _guard = ExtractedGuard(extracted);
            if count == 0 {
                let err = ffi::duckdb_extract_statements_error(extracted);
                if !err.is_null() {
                    return Extracted::ParseError(
                        CStr::from_ptr(err).to_string_lossy().into_owned(),
                    );
                }
                return Extracted::Count(0);
            }
            if count != 1 {
                return Extracted::Count(count as usize);
            }
            let mut prepared: ffi::duckdb_prepared_statement = ptr::null_mut();
            let state =
                ffi::duckdb_prepare_extracted_statement(self.raw, extracted, 0, &mut prepared);
            let result = if state == ffi::DuckDBSuccess {
                Extracted::One(ffi::duckdb_prepared_statement_type(prepared))
            } else {
                let err = ffi::duckdb_prepare_error(prepared);
                let msg = if err.is_null() {
                    "the statement could not be prepared".to_string()
                } else {
                    CStr::from_ptr(err).to_string_lossy().into_owned()
                };
                Extracted::BindError(msg)
            };
            ffi::duckdb_destroy_prepare(&mut prepared);
            result
        }
    }

    /// Interrupts whatever this raw connection runs (used by tests only).
    #[allow(dead_code)]
    pub fn interrupt(&self) {
        unsafe { ffi::duckdb_interrupt(self.raw) }
    }
}

struct ExtractedGuard(ffi::duckdb_extracted_statements);

impl Drop for ExtractedGuard {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: created by duckdb_extract_statements, destroyed once.
            unsafe { ffi::duckdb_destroy_extracted(&mut self.0) }
        }
    }
}

/// The version string of the linked DuckDB library, e.g. `v1.5.5`.
pub fn library_version() -> String {
    // SAFETY: returns a static NUL-terminated string.
    unsafe {
        CStr::from_ptr(ffi::duckdb_library_version())
            .to_string_lossy()
            .into_owned()
    }
}
