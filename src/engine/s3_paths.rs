//! No S3 path with a URL query string reaches httpfs (the shim is
//! `s3_paths.cpp`, which says why): with that check in front of httpfs's
//! S3 file system, the gateway can turn httpfs's URL-compatibility mode off,
//! which S3 globs and hive partitions need.

use std::ffi::c_void;

use crate::engine::ffi::RawDatabase;

extern "C" {
    fn duckgate_guard_s3_paths(database: *mut c_void) -> i32;
}

/// Puts the path check in front of httpfs's S3 file system; after `LOAD
/// httpfs`, before any client query.
pub fn guard(db: &RawDatabase) -> bool {
    // SAFETY: `db` is an open database (a `DatabaseWrapper*` in DuckDB's C
    // API) that outlives the call; the shim catches every C++ exception.
    unsafe { duckgate_guard_s3_paths(db.as_ptr().cast()) == 0 }
}
