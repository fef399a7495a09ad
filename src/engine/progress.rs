//! DuckDB's own progress of a running query, read from its connection's
//! context by the shim in `progress.cpp` (duckdb-rs does not expose the
//! connection handle that `duckdb_query_progress` needs).

use std::ffi::c_void;

use crate::engine::ffi::RawDatabase;

extern "C" {
    fn duckgate_track_progress(
        database: *mut c_void,
        connection_id: u64,
        flag: *mut *mut bool,
    ) -> i32;
    fn duckgate_query_progress(
        database: *mut c_void,
        connection_id: u64,
        percentage: *mut f64,
        rows_processed: *mut u64,
        total_rows: *mut u64,
    ) -> i32;
}

/// What DuckDB reports of a running query.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Percentage done (0-100), `None` while DuckDB cannot tell.
    pub percentage: Option<f64>,
    /// Rows (or, for some sources, bytes) processed so far.
    pub rows_processed: u64,
    /// Rows (or bytes) to process in all.
    pub total_rows: u64,
}

/// DuckDB's progress tracking switch of one pooled connection. DuckDB
/// updates a query's progress after every task while it is on: worth it
/// for a query someone may watch in `GET /queries`, not for one that is
/// over in a millisecond (see `execute::inline`).
pub struct ProgressSwitch {
    flag: *mut bool,
    on: bool,
}

// SAFETY: the flag belongs to the connection the switch is kept beside (in
// its pool slot); it is written only by whoever holds that slot, while the
// connection runs nothing.
unsafe impl Send for ProgressSwitch {}

impl ProgressSwitch {
    /// Tracks the next query's progress or not.
    ///
    /// # Safety
    ///
    /// The connection this switch came with ([`track`]) must still be open
    /// (the flag is its `enable_progress_bar`, freed with it), must run
    /// nothing now, and must be used by this thread only: DuckDB reads the
    /// flag when a query starts, on the thread that runs the query.
    pub unsafe fn set(&mut self, on: bool) {
        if self.on != on {
            // SAFETY: the caller's promise: the flag's connection is open
            // and idle, and only this thread runs it.
            unsafe { self.flag.write(on) };
            self.on = on;
        }
    }
}

/// Turns on DuckDB's progress tracking (never its printing) for the
/// connection with this id, and gives its switch. Call it while that
/// connection runs nothing; keep the switch only as long as the connection.
pub fn track(db: &RawDatabase, connection_id: u64) -> Option<ProgressSwitch> {
    let mut flag: *mut bool = std::ptr::null_mut();
    // SAFETY: `db.as_ptr()` is an open database (it lives as long as `db`);
    // the shim looks the connection up under the connection manager's lock,
    // writes only that idle connection's client settings and `flag` (a live
    // local), and catches every C++ exception.
    let ok = unsafe { duckgate_track_progress(db.as_ptr().cast(), connection_id, &mut flag) == 0 };
    (ok && !flag.is_null()).then_some(ProgressSwitch { flag, on: true })
}

/// The progress of what the connection with this id runs now.
pub fn read(db: &RawDatabase, connection_id: u64) -> Option<Progress> {
    let (mut percentage, mut rows, mut total) = (-1.0f64, 0u64, 0u64);
    // SAFETY: as in `track`; the shim only copies the context's atomics into
    // the three out-parameters, which point at live locals.
    let state = unsafe {
        duckgate_query_progress(
            db.as_ptr().cast(),
            connection_id,
            &mut percentage,
            &mut rows,
            &mut total,
        )
    };
    (state == 0).then_some(Progress {
        percentage: (percentage >= 0.0 && percentage.is_finite()).then_some(percentage),
        rows_processed: rows,
        total_rows: total,
    })
}
