//! Deep nesting fails a query, never the process (the shim is
//! `nesting.cpp`, which says why each measure is there).
//!
//! DuckDB recurses once per nesting level in places: JSON functions over
//! deep documents, the binder and the guard's reading of long expression
//! chains. On a 2 MiB thread (tokio's and Rust's default) `json_structure`
//! of 20,000 nested brackets overflowed the stack and aborted the process;
//! Python's DuckDB on its 8 MiB main thread survives 50,000 and fails at
//! 100,000. So every thread that runs DuckDB or the guard gets
//! [`STACK_BYTES`], and DuckDB's JSON code that recurses on a document's
//! depth refuses documents deeper than [`MAX_JSON_DEPTH`] (400) instead of
//! walking them.

use std::ffi::c_void;

use crate::engine::ffi::RawConnection;

extern "C" {
    fn duckgate_set_default_thread_stack(bytes: u64) -> i32;
    fn duckgate_current_thread_stack() -> u64;
    fn duckgate_cap_json_depth(connection: *mut c_void, max_depth: u64) -> i32;
}

/// The stack of every thread that runs DuckDB or the guard: the gateway's
/// runtime workers (short queries run on them), its blocking threads and
/// DuckDB's own scheduler threads. Only what a thread touches is resident;
/// the rest is address space. Measured: every JSON function at 200,000
/// levels and the guard's deepest reading fit in it with room to spare.
pub const STACK_BYTES: usize = 64 << 20;

/// The deepest JSON document that DuckDB's recursive JSON code reads
/// (`json_structure` and `read_json`'s schema detection, `json_merge_patch`,
/// `json_contains`, the transforms, a cast to VARIANT). The costliest level
/// is a cast of nested objects to VARIANT, about 1 KiB of stack each: at
/// [`STACK_BYTES`] 50,000 levels fit and 75,000 did not, so the cap leaves
/// more than twice the room. DuckDB itself, on an 8 MiB thread, fails that
/// cast before 10,000 levels and `json_structure` between 50,000 and 100,000.
pub const MAX_JSON_DEPTH: u64 = 20_000;

/// Threads created from now on with default attributes (DuckDB's scheduler
/// threads, which start when the database opens) get [`STACK_BYTES`].
pub fn set_default_thread_stack() -> bool {
    // SAFETY: plain values in and out; the shim changes glibc's default
    // thread attributes, which only threads created afterwards read.
    unsafe { duckgate_set_default_thread_stack(STACK_BYTES as u64) == 0 }
}

/// The calling thread's stack size, if the C library says.
pub fn current_thread_stack() -> Option<usize> {
    // SAFETY: no arguments; reads the calling thread's attributes.
    let bytes = unsafe { duckgate_current_thread_stack() };
    (bytes > 0).then_some(bytes as usize)
}

/// Whether the calling thread's stack fits DuckDB's deepest recursion
/// (an embedder's runtime must be built with [`crate::runtime_builder`]).
pub fn thread_fits() -> bool {
    // Glibc reports the main thread's stack as its rlimit, and a thread
    // may be given a little less than asked (guard page).
    current_thread_stack().is_none_or(|b| b >= STACK_BYTES - (1 << 20))
}

/// Caps the depth of JSON documents that DuckDB's recursive JSON functions
/// read, on the database of `conn`; once, before any client query.
pub fn cap_json_depth(conn: &RawConnection) -> bool {
    // SAFETY: `conn` is a live connection (a `duckdb::Connection*` in
    // DuckDB's C API) used by this thread alone for the call; the shim
    // catches every C++ exception.
    unsafe { duckgate_cap_json_depth(conn.as_ptr().cast(), MAX_JSON_DEPTH) == 0 }
}
