//! Thread priority: DuckDB's threads run at a higher niceness than the async
//! HTTP workers, so a probe is answered at once even while queries keep every
//! core busy. Linux applies `setpriority(PRIO_PROCESS, tid, ..)` to a single
//! thread, and threads a thread creates inherit its niceness.

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
