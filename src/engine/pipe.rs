//! DuckDB's own CSV writer, streamed: a CSV answer is DuckDB running
//! `COPY (<query>) TO 'duckgate-pipe://csv' (FORMAT csv, HEADER)`, and the
//! file system behind that path (`pipe.cpp`) hands every write to the output
//! attached to the connection that runs the COPY. DuckDB casts, quotes and
//! writes in one parallel pipeline, and the bytes are DuckDB's by
//! construction.
//!
//! Outputs are attached by (database, connection id): tests run several
//! databases in one process, and DuckDB numbers connections per database.

use std::collections::HashMap;
use std::ffi::{c_char, c_void, CString};
use std::sync::{Arc, LazyLock, Mutex};

use crate::engine::ffi::RawDatabase;

/// A format the gateway has DuckDB's COPY write through the pipe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyFormat {
    /// `FORMAT csv, HEADER`: the CSV answer.
    Csv,
    /// `FORMAT parquet`: the Parquet answer.
    Parquet,
}

impl CopyFormat {
    /// The path the gateway's COPY writes to; nothing else can open it.
    pub fn target(self) -> &'static str {
        match self {
            CopyFormat::Csv => "duckgate-pipe://csv",
            CopyFormat::Parquet => "duckgate-pipe://parquet",
        }
    }

    fn name(self) -> &'static str {
        match self {
            CopyFormat::Csv => "csv",
            CopyFormat::Parquet => "parquet",
        }
    }

    fn options(self) -> &'static str {
        match self {
            CopyFormat::Csv => "FORMAT csv, HEADER, USE_TMP_FILE false",
            CopyFormat::Parquet => "FORMAT parquet, USE_TMP_FILE false",
        }
    }
}

extern "C" {
    fn duckgate_pipe_register(
        database: *mut c_void,
        token: u64,
        open: extern "C" fn(token: u64, connection_id: u64) -> i32,
        write: extern "C" fn(token: u64, connection_id: u64, data: *const u8, len: u64) -> i32,
    ) -> i32;
    fn duckgate_copy_matches(
        copy_sql: *const c_char,
        select_sql: *const c_char,
        target: *const c_char,
        format: *const c_char,
    ) -> i32;
    fn duckgate_limit_wraps(wrapper_sql: *const c_char, select_sql: *const c_char) -> i32;
}

/// Where the bytes of one connection's COPY go.
pub trait Output: Send + Sync {
    /// Takes the next bytes of the file, in order; false stops the COPY
    /// (DuckDB then fails it with an I/O error).
    fn write(&self, bytes: &[u8]) -> bool;
}

type Key = (u64, u64);

static OUTPUTS: LazyLock<Mutex<HashMap<Key, Arc<dyn Output>>>> = LazyLock::new(Default::default);

fn outputs() -> std::sync::MutexGuard<'static, HashMap<Key, Arc<dyn Output>>> {
    OUTPUTS.lock().unwrap_or_else(|p| p.into_inner())
}

/// The token naming `db` to the pipe: its handle's address, unique while it
/// is open.
pub fn token(db: &RawDatabase) -> u64 {
    db.as_ptr() as usize as u64
}

extern "C" fn on_open(token: u64, connection_id: u64) -> i32 {
    i32::from(!outputs().contains_key(&(token, connection_id)))
}

extern "C" fn on_write(token: u64, connection_id: u64, data: *const u8, len: u64) -> i32 {
    let Some(output) = outputs().get(&(token, connection_id)).cloned() else {
        return 1;
    };
    if data.is_null() {
        return 1;
    }
    // SAFETY: DuckDB passes a buffer of `len` bytes that stays valid and
    // unchanged for the duration of this call (its `FileSystem::Write`
    // contract); the slice does not outlive the call.
    let bytes = unsafe { std::slice::from_raw_parts(data, len as usize) };
    // A panic must not unwind into C++.
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| output.write(bytes))) {
        Ok(true) => 0,
        _ => 1,
    }
}

/// Registers the pipe file system with `db`; false when DuckDB refused.
pub fn register(db: &RawDatabase) -> bool {
    // SAFETY: `db.as_ptr()` is an open database that lives as long as `db`;
    // the shim registers a file system object it owns with that database
    // and catches every C++ exception. The two callbacks are plain functions
    // that live for the whole process.
    unsafe { duckgate_pipe_register(db.as_ptr().cast(), token(db), on_open, on_write) == 0 }
}

/// An output attached to one connection until dropped.
pub struct Attached(Key);

impl Drop for Attached {
    fn drop(&mut self) {
        outputs().remove(&self.0);
    }
}

/// Sends what the COPY on connection `connection_id` of the database named
/// by `token` writes to `output`, until the returned guard is dropped.
pub fn attach(token: u64, connection_id: u64, output: Arc<dyn Output>) -> Attached {
    outputs().insert((token, connection_id), output);
    Attached((token, connection_id))
}

/// The COPY the gateway runs for a `format` answer of `select_sql`, if
/// DuckDB's parser reads it as exactly one COPY of exactly that query to the
/// format's target with no options but the gateway's.
pub fn copy_sql(select_sql: &str, format: CopyFormat) -> Option<String> {
    let (target, options) = (format.target(), format.options());
    let sql = format!("COPY (\n{select_sql}\n) TO '{target}' ({options})");
    let (c_copy, c_select, c_target, c_format) = (
        CString::new(sql.as_str()).ok()?,
        CString::new(select_sql).ok()?,
        CString::new(target).ok()?,
        CString::new(format.name()).ok()?,
    );
    // SAFETY: four NUL-terminated strings that outlive the call; the shim
    // only parses them (no database, no side effects) and catches every
    // C++ exception.
    let matches = unsafe {
        duckgate_copy_matches(
            c_copy.as_ptr(),
            c_select.as_ptr(),
            c_target.as_ptr(),
            c_format.as_ptr(),
        ) == 1
    };
    matches.then_some(sql)
}

/// `select_sql` with at most `limit` rows, if DuckDB's parser reads the
/// wrapper as exactly `SELECT * FROM (<that query>) LIMIT <limit>`. DuckDB
/// keeps the query's row order through the wrapper.
pub fn limited_sql(select_sql: &str, limit: u64) -> Option<String> {
    let sql = format!("SELECT * FROM (\n{select_sql}\n) LIMIT {limit}");
    let (c_wrapper, c_select) = (
        CString::new(sql.as_str()).ok()?,
        CString::new(select_sql).ok()?,
    );
    // SAFETY: two NUL-terminated strings that outlive the call; the shim
    // only parses them and catches every C++ exception.
    let wraps = unsafe { duckgate_limit_wraps(c_wrapper.as_ptr(), c_select.as_ptr()) == 1 };
    wraps.then_some(sql)
}

/// Finds the ends of rows in DuckDB's CSV: a newline outside double quotes
/// (DuckDB quotes every value that holds a newline or a quote, and doubles
/// the quotes inside, so the quote parity says where a value is open).
#[derive(Debug, Default)]
pub struct RowEnds {
    quoted: bool,
    /// Row ends seen, the header's included.
    pub ends: u64,
    /// Bytes of the row not yet ended.
    pub open_row: u64,
    /// Bytes of the longest row ended so far.
    pub widest: u64,
}

impl RowEnds {
    /// Reads `data`; `stop(ends, offset)` is asked at each row end (`ends`
    /// counted so far, `offset` just past it in `data`); the first offset
    /// for which it says true is returned, and reading stops there.
    pub fn feed(&mut self, data: &[u8], mut stop: impl FnMut(u64, usize) -> bool) -> Option<usize> {
        let mut row_start = 0;
        for at in memchr::memchr2_iter(b'"', b'\n', data) {
            if data[at] == b'"' {
                self.quoted = !self.quoted;
            } else if !self.quoted {
                self.ends += 1;
                self.widest = self.widest.max(self.open_row + (at - row_start) as u64);
                self.open_row = 0;
                row_start = at + 1;
                if stop(self.ends, at + 1) {
                    return Some(at + 1);
                }
            }
        }
        self.open_row += (data.len() - row_start) as u64;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_ends_skip_quoted_newlines_across_writes() {
        let mut r = RowEnds::default();
        assert_eq!(r.feed(b"a,b\n1,\"x\ny\"", |_, _| false), None);
        assert_eq!(r.ends, 1);
        assert_eq!(r.feed(b"\n2,\"q\"\"\n\"\n", |_, _| false), None);
        assert_eq!(r.ends, 3);
        assert_eq!(r.open_row, 0);
        r.feed(b"4,\"", |_, _| false);
        assert_eq!(r.open_row, 3);
        // A row that starts and ends inside one write counts too.
        let mut r = RowEnds::default();
        r.feed(b"h\nxxxxxxxxxx\ny\n", |_, _| false);
        assert_eq!((r.widest, r.open_row), (10, 0));
        let mut r = RowEnds::default();
        assert_eq!(r.feed(b"h\n1\n2\n3\n", |ends, _| ends == 3), Some(6));
    }

    #[test]
    fn the_copy_must_be_the_query_itself() {
        for format in [CopyFormat::Csv, CopyFormat::Parquet] {
            assert!(copy_sql("SELECT 1 AS x", format).is_some());
            assert!(copy_sql("SELECT 1 -- a comment", format).is_some());
            // Text that would close the COPY's parenthesis or add a statement.
            assert!(copy_sql("SELECT 1) TO '/tmp/x' (FORMAT csv); SELECT (1", format).is_none());
            assert!(copy_sql("SELECT 1) TO '/tmp/x' (FORMAT parquet) --", format).is_none());
            assert!(copy_sql("SELECT 1; SELECT 2", format).is_none());
            assert!(copy_sql("INSERT INTO t VALUES (1)", format).is_none());
        }
    }

    #[test]
    fn the_limit_wrapper_must_be_the_query_itself() {
        assert!(limited_sql("SELECT 1 AS x", 5).is_some());
        assert!(limited_sql("SELECT * FROM range(10) ORDER BY 1 DESC", 5).is_some());
        // Text that would end the subquery early and change what the
        // wrapper selects or where it reads from.
        assert!(limited_sql("SELECT 1) AS t, (SELECT 2", 5).is_none());
        assert!(limited_sql("SELECT 1) UNION ALL (SELECT 2", 5).is_none());
        assert!(limited_sql("SELECT 1) WHERE (1 = 1", 5).is_none());
        assert!(limited_sql("SELECT 1; SELECT 2", 5).is_none());
    }
}
