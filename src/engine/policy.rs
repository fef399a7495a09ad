//! Row filters and column masks, applied by DuckDB's optimizer (the C++
//! shim `policy.cpp`, whose header says how and why it is safe): the
//! gateway installs a confined caller's policy on the pooled connection
//! before it prepares anything ([`install`]), and the shim's optimizer
//! extension wraps every scan of a filtered or masked table in the plan
//! DuckDB runs.
//!
//! The policy document (JSON, built by
//! [`crate::engine::guard::access::Access::policy`]):
//!
//! ```json
//! {"tables": [{"catalog": "memory", "schema": "main", "name": "orders",
//!              "filter": "(tenant_id = claim('tenant'))",
//!              "masks": [["email", "NULL"]]}],
//!  "claims": {"tenant": "a"}}
//! ```
//!
//! It lists every table the statement reads, those without a policy with
//! neither `filter` nor `masks`: a scan of a table it does not list is
//! refused.

use std::ffi::{c_char, c_void};

use crate::engine::ffi::{shim_result, RawConnection, RawDatabase};

extern "C" {
    fn duckgate_policy_register(database: *mut c_void) -> i32;
    fn duckgate_policy_set(
        database: *mut c_void,
        connection_id: u64,
        spec: *const c_char,
        len: usize,
    ) -> *mut c_char;
    fn duckgate_policy_check(
        connection: *mut c_void,
        spec: *const c_char,
        len: usize,
    ) -> *mut c_char;
    fn duckgate_policy_free(text: *mut c_char);
}

/// Registers the optimizer extension that applies installed policies;
/// once, before any client query.
pub fn register(db: &RawDatabase) -> bool {
    // SAFETY: `db` is an open database handle (its C API wrapper); the shim
    // catches every C++ exception.
    unsafe { duckgate_policy_register(db.as_ptr().cast()) == 0 }
}

/// Installs `spec` (a policy document) on the connection `connection_id`,
/// or removes the installed one (`None`). The connection must run nothing
/// meanwhile, and its prepared statements planned under another policy
/// must not run again (the caller flushes them).
pub fn install(db: &RawDatabase, connection_id: u64, spec: Option<&str>) -> Result<(), String> {
    let (ptr, len) = spec.map_or((std::ptr::null(), 0), |s| (s.as_ptr().cast(), s.len()));
    // SAFETY: `db` is open; `ptr` is NULL or `len` readable bytes that
    // outlive the call; the shim catches every C++ exception and answers
    // NULL or a message for `duckgate_policy_free`, used once.
    unsafe {
        shim_result(
            duckgate_policy_set(db.as_ptr().cast(), connection_id, ptr, len),
            duckgate_policy_free,
        )
    }
}

/// Binds every table policy of `spec` on `conn`: whether each filter and
/// mask is one expression over its table's row, of a column that exists.
pub fn check(conn: &RawConnection, spec: &str) -> Result<(), String> {
    // SAFETY: `conn` is a live connection (a `duckdb::Connection*`) used by
    // this thread alone for the call; `spec` outlives it; the shim catches
    // every C++ exception and answers NULL or a message for
    // `duckgate_policy_free`, used once.
    unsafe {
        shim_result(
            duckgate_policy_check(conn.as_ptr().cast(), spec.as_ptr().cast(), spec.len()),
            duckgate_policy_free,
        )
    }
}
