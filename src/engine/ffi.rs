//! The few DuckDB C API calls that duckdb-rs does not wrap: opening a database
//! that several crate connections share, and DuckDB's own statement splitter.

use std::ffi::{CStr, CString};
use std::ptr;
use std::sync::Arc;

use duckdb::ffi;

/// A DuckDB database opened through the C API. DuckDB's own connection
/// objects keep the database instance alive, but duckdb-rs's `Connection`
/// also remembers this handle (its `try_clone` reads it), so crate
/// connections come as [`Connection`], which owns an `Arc` of the handle.
pub struct RawDatabase {
    raw: ffi::duckdb_database,
}

// SAFETY: a duckdb_database is a pointer to a wrapper around a thread-safe
// DatabaseInstance; DuckDB allows connecting from any thread, and the handle
// is only read after `open` (closed once, in drop, with no other user left).
unsafe impl Send for RawDatabase {}
// SAFETY: as above; connecting takes `&self` and DuckDB synchronizes it.
unsafe impl Sync for RawDatabase {}

/// Why DuckDB's C API refused to open or connect.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FfiError {
    /// A path, option name or value holds a NUL byte (C strings cannot).
    #[error("{0} contains a NUL byte")]
    Nul(String),
    /// `duckdb_create_config` failed.
    #[error("cannot allocate a DuckDB configuration")]
    Config,
    /// DuckDB refused a configuration option or its value.
    #[error("DuckDB rejected option {name}={value}")]
    Option {
        /// The option's name.
        name: String,
        /// The value it was given.
        value: String,
    },
    /// `duckdb_open_ext` failed, with DuckDB's message.
    #[error("{0}")]
    Open(String),
    /// `duckdb_connect` failed.
    #[error("cannot connect to the database")]
    Connect,
}

/// A DuckDB configuration, destroyed when dropped.
struct Config(ffi::duckdb_config);

impl Config {
    fn new() -> Result<Self, FfiError> {
        let mut config: ffi::duckdb_config = ptr::null_mut();
        // SAFETY: `config` is a valid out pointer.
        if unsafe { ffi::duckdb_create_config(&mut config) } != ffi::DuckDBSuccess {
            return Err(FfiError::Config);
        }
        Ok(Self(config))
    }
}

impl Drop for Config {
    fn drop(&mut self) {
        // SAFETY: created by `duckdb_create_config`, destroyed once.
        unsafe { ffi::duckdb_destroy_config(&mut self.0) }
    }
}

/// A duckdb-rs connection that keeps its database open: it holds an `Arc`
/// of the [`RawDatabase`] and drops the connection first. Only what the
/// gateway uses is exposed: not `try_clone`, whose clone would not keep the
/// database alive (the use-after-free this type exists to rule out).
pub struct Connection {
    conn: duckdb::Connection,
    _db: Arc<RawDatabase>,
}

impl Connection {
    /// See `duckdb::Connection::execute_batch`.
    pub fn execute_batch(&self, sql: &str) -> duckdb::Result<()> {
        self.conn.execute_batch(sql)
    }

    /// See `duckdb::Connection::prepare_cached`.
    pub fn prepare_cached(&self, sql: &str) -> duckdb::Result<duckdb::CachedStatement<'_>> {
        self.conn.prepare_cached(sql)
    }

    /// DuckDB's id of this connection (`current_connection_id()`).
    pub fn connection_id(&self) -> duckdb::Result<u64> {
        self.conn
            .query_row("SELECT current_connection_id()", [], |r| r.get(0))
    }

    /// See `duckdb::Connection::prepare`.
    pub fn prepare(&self, sql: &str) -> duckdb::Result<duckdb::Statement<'_>> {
        self.conn.prepare(sql)
    }

    /// See `duckdb::Connection::interrupt_handle`.
    pub fn interrupt_handle(&self) -> Arc<duckdb::InterruptHandle> {
        self.conn.interrupt_handle()
    }

    /// See `duckdb::Connection::is_autocommit`.
    pub fn is_autocommit(&self) -> bool {
        self.conn.is_autocommit()
    }

    /// See `duckdb::Connection::set_prepared_statement_cache_capacity`.
    pub fn set_prepared_statement_cache_capacity(&self, capacity: usize) {
        self.conn.set_prepared_statement_cache_capacity(capacity)
    }

    /// The database it is a connection of.
    pub fn database(&self) -> &RawDatabase {
        &self._db
    }

    /// See `duckdb::Connection::flush_prepared_statement_cache`.
    pub fn flush_prepared_statement_cache(&self) {
        self.conn.flush_prepared_statement_cache()
    }
}

impl RawDatabase {
    /// Opens `path` (`None` = in memory) with start-up options that must be in
    /// place before the first connection exists.
    pub fn open(
        path: Option<&std::path::Path>,
        options: &[(&str, String)],
    ) -> Result<Self, FfiError> {
        let c_path = match path {
            Some(p) => CString::new(p.to_string_lossy().as_bytes())
                .map_err(|_| FfiError::Nul("the database path".into()))?,
            None => CString::new(":memory:").expect("static string"),
        };
        // Every fallible conversion happens before anything is allocated on
        // DuckDB's side, and the configuration is destroyed on every path.
        let options = options
            .iter()
            .map(|(name, value)| {
                let n = CString::new(*name)
                    .map_err(|_| FfiError::Nul(format!("option name {name}")))?;
                let v = CString::new(value.as_str())
                    .map_err(|_| FfiError::Nul(format!("the value of option {name}")))?;
                Ok((n, v, *name, value))
            })
            .collect::<Result<Vec<_>, FfiError>>()?;
        let config = Config::new()?;
        for (n, v, name, value) in &options {
            // SAFETY: `config.0` is a live configuration (destroyed only by
            // `Config`'s drop); `n` and `v` are NUL-terminated and outlive
            // the call, which copies them.
            let state = unsafe { ffi::duckdb_set_config(config.0, n.as_ptr(), v.as_ptr()) };
            if state != ffi::DuckDBSuccess {
                return Err(FfiError::Option {
                    name: name.to_string(),
                    value: value.to_string(),
                });
            }
        }
        // SAFETY: `config.0` is live and not yet used to open a database.
        if !unsafe { crate::engine::memory::count(config.0.cast()) } {
            return Err(FfiError::Open(
                "DuckDB's counting allocator could not be made".into(),
            ));
        }
        let mut db: ffi::duckdb_database = ptr::null_mut();
        let mut err: *mut std::os::raw::c_char = ptr::null_mut();
        // SAFETY: `c_path` is NUL-terminated; `db` and `err` are valid out
        // pointers; `config.0` is live (duckdb_open_ext copies it).
        let state = unsafe { ffi::duckdb_open_ext(c_path.as_ptr(), &mut db, config.0, &mut err) };
        if state != ffi::DuckDBSuccess {
            let msg = if err.is_null() {
                "unknown error".to_string()
            } else {
                // SAFETY: on failure DuckDB sets `err` to a malloc'd
                // NUL-terminated message that the caller frees once.
                unsafe {
                    let m = CStr::from_ptr(err).to_string_lossy().into_owned();
                    ffi::duckdb_free(err.cast());
                    m
                }
            };
            return Err(FfiError::Open(msg));
        }
        Ok(Self { raw: db })
    }

    /// A duckdb-rs connection to this database, which keeps the database
    /// open for as long as it lives (see [`Connection`]).
    pub fn connect(self: &Arc<Self>) -> duckdb::Result<Connection> {
        // SAFETY: `raw` is an open database handle, and stays open while the
        // returned connection lives: the connection holds an `Arc` of `self`
        // and is dropped before it (field order), and duckdb-rs does not
        // close a database it did not open.
        let conn = unsafe { duckdb::Connection::open_from_raw(self.raw) }?;
        Ok(Connection {
            conn,
            _db: self.clone(),
        })
    }

    /// The C API handle, for the progress shim. Valid while `self` lives.
    pub fn as_ptr(&self) -> ffi::duckdb_database {
        self.raw
    }

    /// A raw connection, for the guard's parser.
    pub fn connect_raw(&self) -> Result<RawConnection, FfiError> {
        let mut con: ffi::duckdb_connection = ptr::null_mut();
        // SAFETY: `raw` is an open database.
        let state = unsafe { ffi::duckdb_connect(self.raw, &mut con) };
        if state != ffi::DuckDBSuccess {
            return Err(FfiError::Connect);
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

    /// Runs `sql` (the gateway's own setup, never client text) and drops
    /// its result; DuckDB's error message on failure.
    pub fn execute(&self, sql: &str) -> Result<(), String> {
        let c_sql = CString::new(sql).map_err(|e| e.to_string())?;
        let mut result = std::mem::MaybeUninit::<ffi::duckdb_result>::zeroed();
        // SAFETY: `raw` is a live connection used by this thread alone;
        // `c_sql` is NUL-terminated; the result is destroyed exactly once,
        // after its error text has been copied.
        unsafe {
            let state = ffi::duckdb_query(self.raw, c_sql.as_ptr(), result.as_mut_ptr());
            let outcome = if state == ffi::DuckDBSuccess {
                Ok(())
            } else {
                let e = ffi::duckdb_result_error(result.as_mut_ptr());
                Err(if e.is_null() {
                    "DuckDB failed without a message".to_string()
                } else {
                    CStr::from_ptr(e).to_string_lossy().into_owned()
                })
            };
            ffi::duckdb_destroy_result(result.as_mut_ptr());
            outcome
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

/// Takes the answer of a shim that reports success as NULL and a failure as
/// a malloc'd message (`policy/extension.cpp`, `secrets.cpp`): the message, copied,
/// after `free` (that shim's own free function) released it.
///
/// # Safety
///
/// `text` is NULL or a NUL-terminated string the shim of `free` returned and
/// nothing else owns; it is freed here and must not be used afterwards.
pub(crate) unsafe fn shim_result(
    text: *mut std::ffi::c_char,
    free: unsafe extern "C" fn(*mut std::ffi::c_char),
) -> Result<(), String> {
    if text.is_null() {
        return Ok(());
    }
    // SAFETY: non-null, a NUL-terminated string from the shim (the caller's
    // promise), copied here before it is freed exactly once.
    let message = unsafe { std::ffi::CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `free` is the shim's own free function for `text`; not used
    // afterwards.
    unsafe { free(text) };
    Err(message)
}
