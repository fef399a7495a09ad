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

    /// A raw connection, for the guard's parser.
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

/// A raw DuckDB connection used only to parse statements (its parser options
/// are the pooled connection's; it never runs anything).
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

impl RawConnection {
    /// The C API handle, for the guard's parse shim. Valid while `self` lives.
    pub fn as_ptr(&self) -> ffi::duckdb_connection {
        self.raw
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
