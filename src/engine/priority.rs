//! Thread priority: DuckDB's threads run at a higher niceness than the async
//! HTTP workers, so a probe is answered at once even while queries keep every
//! core busy. Linux applies `setpriority(PRIO_PROCESS, tid, ..)` to a single
//! thread, and threads a thread creates inherit its niceness.
//!
//! A caller waiting for DuckDB's scheduler threads to finish its
//! statement's tasks yields its core to them (`priority.cpp`) rather than
//! spinning on it ahead of them: at a lower niceness, it would keep the core
//! it waits for.

use std::cell::Cell;
use std::sync::atomic::{AtomicI32, Ordering};

/// The niceness for threads that run DuckDB, set once at start-up.
static QUERY_NICE: AtomicI32 = AtomicI32::new(0);

/// Records the niceness for query threads and applies it to this thread.
pub fn set_query_nice(nice: i32) {
    QUERY_NICE.store(nice, Ordering::Relaxed);
    lower_current_thread(nice);
}

/// Applies the query niceness to the calling (blocking) thread.
pub fn lower_for_queries() {
    lower_current_thread(QUERY_NICE.load(Ordering::Relaxed));
}

extern "C" {
    fn duckgate_execute_count(executed: *mut u64) -> i32;
}

/// How many statements ran through the gateway's yielding wait
/// (`priority.cpp`); `None` when DuckDB's own wait is in use (a DuckDB
/// linked statically).
pub fn yielding_waits() -> Option<u64> {
    let mut executed = 0u64;
    // SAFETY: a valid out pointer; the shim only reads an atomic.
    let own = unsafe { duckgate_execute_count(&mut executed) } == 0;
    own.then_some(executed)
}

thread_local! {
    static LOWERED: Cell<bool> = const { Cell::new(false) };
}

/// Sets the calling thread's niceness to `nice` (once per thread; raising
/// niceness needs no privilege). Failures are ignored: priority is a
/// preference, not a correctness matter.
pub fn lower_current_thread(nice: i32) {
    if nice <= 0 || LOWERED.with(Cell::get) {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain syscalls about the calling thread itself; no memory
        // is passed.
        unsafe {
            let tid = libc::gettid();
            if tid > 0 {
                libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
            }
        }
    }
    LOWERED.with(|l| l.set(true));
}

#[cfg(test)]
mod tests {
    /// Statements execute through the gateway's yielding wait (the prebuilt
    /// library's build), streamed and materialized, and what it hands back
    /// is DuckDB's: the same rows as DuckDB's own `duckdb_query`, and an
    /// execution error as an error, not an abort.
    #[test]
    #[cfg(not(feature = "bundled"))]
    fn statements_wait_for_their_tasks_through_the_yielding_loop() {
        let db = std::sync::Arc::new(crate::engine::ffi::RawDatabase::open(None, &[]).unwrap());
        let conn = db.connect().unwrap();
        let before = super::yielding_waits().expect("the binary's wait is in use");
        // Parallel enough that DuckDB's scheduler threads take tasks.
        let sql = "SELECT count(*)::BIGINT AS n, sum(i % 7)::BIGINT AS s FROM range(3000000) t(i)";
        let mut stmt = conn.prepare(sql).unwrap();
        let streamed: Vec<arrow::array::RecordBatch> = stmt.stream_arrow([]).unwrap().collect();
        let materialized: (i64, i64) = conn
            .prepare(sql)
            .unwrap()
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        use arrow::array::AsArray;
        use arrow::datatypes::Int64Type;
        let rows: Vec<(i64, i64)> = streamed
            .iter()
            .flat_map(|b| {
                let (n, s) = (
                    b.column(0).as_primitive::<Int64Type>(),
                    b.column(1).as_primitive::<Int64Type>(),
                );
                n.values()
                    .iter()
                    .copied()
                    .zip(s.values().iter().copied())
                    .collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(rows, vec![materialized]);
        // DuckDB's own reading, through `duckdb_query` (no prepared
        // statement, so DuckDB's own wait), kept in a table: the same.
        let raw = db.connect_raw().unwrap();
        raw.execute(&format!("CREATE TABLE reference AS {sql}"))
            .unwrap();
        let reference: (i64, i64) = conn
            .prepare("SELECT n, s FROM reference")
            .unwrap()
            .query_row([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap();
        assert_eq!(materialized, reference);
        // An error in a task the wait runs (the aggregate's sink), streamed
        // and materialized: DuckDB's message, no abort.
        let failing = "SELECT sum(CASE WHEN i = 2999999 THEN error('late failure') ELSE i END) FROM range(3000000) t(i)";
        // DuckDB's own message for it, through its own wait:
        let own = raw.execute(failing).unwrap_err();
        assert!(own.contains("late failure"), "{own}");
        let streamed = conn
            .prepare(failing)
            .unwrap()
            .stream_arrow([])
            .map(|_| ())
            .unwrap_err();
        assert_eq!(streamed.to_string(), own);
        let materialized = conn
            .prepare(failing)
            .unwrap()
            .query_row([], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert_eq!(materialized.to_string(), own);
        let after = super::yielding_waits().unwrap();
        assert!(
            after >= before + 5,
            "five executions went through the shim: {before} -> {after}"
        );
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn niceness_applies_to_the_calling_thread_only() {
        let read = || -> i64 {
            let stat = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
            // Field 19 (1-based) is the nice value; fields after the comm.
            let after = &stat[stat.rfind(')').unwrap() + 2..];
            after.split_whitespace().nth(16).unwrap().parse().unwrap()
        };
        let before = read();
        let niced = std::thread::spawn(move || {
            super::lower_current_thread(7);
            read()
        })
        .join()
        .unwrap();
        assert_eq!(niced, 7);
        assert_eq!(read(), before, "the test thread itself is untouched");
    }
}
