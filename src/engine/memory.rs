//! A ceiling on what DuckDB allocates beyond its buffer pool (the C++ shim in
//! `memory.cpp`): `memory_limit` bounds DuckDB's buffer pool, not the vectors
//! a query computes, so `SELECT repeat('x', 1500000000) FROM range(64)` could
//! take the process past its memory. Everything DuckDB allocates through its
//! allocators (the pool's blocks too) is counted against the pool's limit
//! plus an allowance; the allocation that would cross it fails inside DuckDB
//! with its own out-of-memory error (507 to the client who asked), and
//! nothing else does.

use std::ffi::c_void;

use crate::engine::ffi::RawDatabase;

extern "C" {
    fn duckgate_count_memory(config: *mut c_void) -> i32;
    fn duckgate_set_memory_ceiling(bytes: u64);
    fn duckgate_memory_usage(bytes: *mut u64, ceiling: *mut u64, refusals: *mut u64);
    fn duckgate_memory_budget(
        database: *mut c_void,
        available: *mut u64,
        buffer_pool: *mut u64,
    ) -> i32;
}

/// The smallest default allowance: a machine whose buffer pool takes nearly
/// all of its memory still computes ordinary vectors.
const MIN_DEFAULT: u64 = 256 << 20;

/// Counts what DuckDB allocates through its default allocator from now on,
/// and through the allocator of the database that opens with `config`.
/// Call before that database opens (it takes both allocators then); false
/// when DuckDB could not make the allocator.
///
/// # Safety
/// `config` is a live `duckdb_config` not yet used to open a database.
pub unsafe fn count(config: *mut c_void) -> bool {
    // SAFETY: `config` as the caller promises; the default allocator is
    // replaced once, before any database of the gateway's opens.
    unsafe { duckgate_count_memory(config) == 0 }
}

/// Sets the ceiling on everything counted, in bytes.
pub fn set_ceiling(bytes: u64) {
    // SAFETY: stores one atomic.
    unsafe { duckgate_set_memory_ceiling(bytes) }
}

/// What DuckDB's allocators count now.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// Bytes held (the buffer pool's blocks included).
    pub bytes: u64,
    /// The ceiling (0 before one is set).
    pub ceiling: u64,
    /// Allocations refused at the ceiling so far.
    pub refusals: u64,
}

/// What DuckDB's allocators count now.
pub fn usage() -> Usage {
    let (mut bytes, mut ceiling, mut refusals) = (0, 0, 0);
    // SAFETY: the out pointers are valid for the call.
    unsafe { duckgate_memory_usage(&mut bytes, &mut ceiling, &mut refusals) };
    Usage {
        bytes,
        ceiling,
        refusals,
    }
}

/// The memory DuckDB sees (its cgroup's limit if lower than the machine's)
/// and its buffer pool's limit.
pub fn budget(db: &RawDatabase) -> Option<(u64, u64)> {
    let (mut available, mut pool) = (0, 0);
    // SAFETY: `db` is an open database for the call; the out pointers are valid.
    let rc = unsafe { duckgate_memory_budget(db.as_ptr().cast(), &mut available, &mut pool) };
    (rc == 0).then_some((available, pool))
}

/// The default allowance beyond the buffer pool: what is left of 90% of the
/// memory DuckDB sees once its buffer pool is full (the last 10% for the
/// gateway's own answers and the rest of the process), and never less than
/// 256 MiB.
pub fn default_allowance(available: u64, buffer_pool: u64) -> u64 {
    (available / 10 * 9)
        .saturating_sub(buffer_pool)
        .max(MIN_DEFAULT)
}

/// A smaller buffer pool when `buffer_pool` and `allowance` together pass
/// 90% of the memory DuckDB sees (the default pool in a small container):
/// what is left of 90% after the allowance, at least 64 MiB.
pub fn fitted_pool(available: u64, buffer_pool: u64, allowance: u64) -> Option<u64> {
    let room = available / 10 * 9;
    (buffer_pool.saturating_add(allowance) > room)
        .then(|| room.saturating_sub(allowance).max(64 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_container_keeps_the_ceiling_inside_it() {
        let gib = 1u64 << 30;
        let pool = gib / 10 * 8;
        let allowance = default_allowance(gib, pool);
        assert!(pool + allowance > gib, "the case issue 37 found");
        let fitted = fitted_pool(gib, pool, allowance).unwrap();
        assert!(fitted + allowance <= gib / 10 * 9, "{fitted}");
        // 24 GiB with the default pool already fits.
        assert_eq!(
            fitted_pool(
                24 * gib,
                24 * gib / 10 * 8,
                default_allowance(24 * gib, 24 * gib / 10 * 8)
            ),
            None
        );
    }

    #[test]
    fn the_default_leaves_the_buffer_pool_and_a_tenth() {
        let gib = 1u64 << 30;
        // DuckDB's default pool (80%) on 24 GiB leaves 10% of it.
        let ceiling = default_allowance(24 * gib, 24 * gib / 10 * 8);
        assert!(ceiling > 2 * gib && ceiling < 3 * gib, "{ceiling}");
        assert_eq!(
            default_allowance(24 * gib, 200 << 20),
            24 * gib / 10 * 9 - (200 << 20)
        );
        // A pool as large as the machine still leaves the floor.
        assert_eq!(default_allowance(gib, gib), MIN_DEFAULT);
    }
}
