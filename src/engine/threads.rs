//! DuckDB's scheduler threads, running while statements that may use them
//! run.
//!
//! DuckDB hands every statement's tasks to its scheduler: the caller runs
//! them, and so do DuckDB's background threads, which it wakes for each
//! task it queues. For a short read (`execute::inline`) that wake-up is pure
//! cost: a background thread wakes, mostly finds the task taken, and sleeps
//! again, and when it does take the task the caller waits for it. Measured
//! on `SELECT 42`: about 30 µs of a request's CPU (BENCHMARKS).
//!
//! So the background threads run while a statement that may use them holds
//! them ([`SchedulerThreads::hold`]: every statement on a blocking thread,
//! and the gateway's own reading on a pooled connection), and stop
//! [`LINGER`] after the last one ends. A hold that finds them stopped starts
//! them before its statement is scheduled: DuckDB sizes a pipeline's tasks
//! by the threads it has when it schedules them. Short reads never hold
//! them: one that runs while they are stopped runs its tasks itself.
//!
//! Starting and stopping happen on a thread of their own, at the query
//! niceness, so the threads DuckDB starts inherit it (`priority`). Stopping
//! joins DuckDB's threads, each after the task it runs (nothing holds them
//! then: those tasks are short reads' or the gateway's own, such as a lake
//! catalog's probe). It runs without the holders' lock, so a task stuck in
//! I/O never holds a hold: a statement that comes during a stop goes on,
//! and the threads start again for it as soon as the stop ends.

use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::engine::ffi::RawDatabase;

/// How long DuckDB's background threads stay after the last statement
/// that held them.
pub const LINGER: Duration = Duration::from_secs(1);

/// How long a hold waits for the threads to start, and a shutdown for the
/// thread that starts and stops them, at most.
const START_WAIT: Duration = Duration::from_secs(2);

extern "C" {
    fn duckgate_scheduler_threads(database: *mut c_void, background: i64, threads: *mut i32)
        -> i32;
}

/// DuckDB's scheduler threads, set to `background` (`None`: left as they
/// are); their count afterwards, the caller's thread included.
fn set(db: &RawDatabase, background: Option<usize>) -> Option<usize> {
    let mut threads = 0i32;
    let background = background.map_or(-1, |n| n as i64);
    // SAFETY: `db` is an open database for the call; the out pointer is valid.
    let rc = unsafe { duckgate_scheduler_threads(db.as_ptr().cast(), background, &mut threads) };
    usize::try_from(threads).ok().filter(|_| rc == 0)
}

struct State {
    /// Statements holding the threads now.
    holders: usize,
    /// DuckDB's background threads run.
    up: bool,
    /// When the last holder let go.
    released: Instant,
    stopped: bool,
    /// The manager thread has ended.
    exited: bool,
}

struct Shared {
    db: Arc<RawDatabase>,
    /// DuckDB's background threads while they run.
    background: usize,
    /// How long they stay after the last holder ([`LINGER`]).
    linger: Duration,
    /// DuckDB's scheduler threads now, the callers' included.
    now: AtomicUsize,
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits on `changed` until `done` holds or `limit` has passed.
    fn wait_up_to<'a>(
        &self,
        mut state: MutexGuard<'a, State>,
        limit: Duration,
        done: impl Fn(&State) -> bool,
    ) -> MutexGuard<'a, State> {
        let deadline = Instant::now() + limit;
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = self
                .changed
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state
    }
}

/// Starts and stops DuckDB's background threads (see the module).
pub struct SchedulerThreads {
    /// `None`: DuckDB has no background threads to stop (`threads` 1), or
    /// the scheduler could not be read; holds cost nothing.
    shared: Option<Arc<Shared>>,
    /// DuckDB's scheduler threads when there is no `shared`.
    fixed: usize,
    manager: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// Keeps DuckDB's background threads running while it lives.
#[must_use = "the threads are held while this lives"]
pub struct Held(Option<Arc<Shared>>);

impl SchedulerThreads {
    /// Takes over `db`'s scheduler threads as DuckDB opened them.
    pub fn start(db: Arc<RawDatabase>) -> Self {
        Self::start_lingering(db, LINGER)
    }

    /// [`start`](Self::start), stopping the threads `linger` after the
    /// last holder.
    fn start_lingering(db: Arc<RawDatabase>, linger: Duration) -> Self {
        let threads = set(&db, None).unwrap_or(1);
        let background = threads.saturating_sub(1);
        let fixed = |fixed| Self {
            shared: None,
            fixed,
            manager: Mutex::new(None),
        };
        if background == 0 {
            return fixed(threads);
        }
        let shared = Arc::new(Shared {
            db,
            background,
            linger,
            now: AtomicUsize::new(threads),
            state: Mutex::new(State {
                holders: 0,
                up: true,
                released: Instant::now(),
                stopped: false,
                exited: false,
            }),
            changed: Condvar::new(),
        });
        let manager = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("duckgate-threads".into())
                .spawn(move || manage(&shared))
        };
        match manager {
            Ok(manager) => Self {
                shared: Some(shared),
                fixed: threads,
                manager: Mutex::new(Some(manager)),
            },
            // No thread to stop them: they stay.
            Err(_) => fixed(threads),
        }
    }

    /// Holds DuckDB's background threads, starting them first if they
    /// were stopped. Call before the statement is prepared and run.
    pub fn hold(&self) -> Held {
        let Some(shared) = &self.shared else {
            return Held(None);
        };
        let mut state = shared.lock();
        state.holders += 1;
        if !state.up {
            // Starting them joins nothing; the bound is a backstop, after
            // which the statement runs its tasks itself.
            shared.changed.notify_all();
            drop(shared.wait_up_to(state, START_WAIT, |s| s.up || s.exited));
        }
        Held(Some(shared.clone()))
    }

    /// Whether DuckDB's background threads run now.
    pub fn running(&self) -> bool {
        self.shared.as_ref().is_none_or(|s| s.lock().up)
    }

    /// DuckDB's scheduler threads now, the callers' included (the
    /// `duckgate_duckdb_threads` gauge).
    pub fn count(&self) -> usize {
        self.shared
            .as_ref()
            .map_or(self.fixed, |s| s.now.load(Ordering::Relaxed))
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take() {
            let mut state = shared.lock();
            state.holders -= 1;
            if state.holders == 0 {
                state.released = Instant::now();
                shared.changed.notify_all();
            }
        }
    }
}

impl Drop for SchedulerThreads {
    /// Stops the manager and waits a moment for it (it holds the
    /// database); one stuck in DuckDB's relaunch is left behind.
    fn drop(&mut self) {
        let Some(shared) = &self.shared else {
            return;
        };
        let mut state = shared.lock();
        state.stopped = true;
        shared.changed.notify_all();
        let state = shared.wait_up_to(state, START_WAIT, |s| s.exited);
        if !state.exited {
            return;
        }
        drop(state);
        if let Ok(Some(manager)) = self.manager.get_mut().map(Option::take) {
            let _ = manager.join();
        }
    }
}

/// The manager thread: starts the threads for a holder, stops them
/// [`LINGER`] after the last one let go.
fn manage(shared: &Shared) {
    crate::engine::priority::lower_for_queries();
    let mut state = shared.lock();
    while !state.stopped {
        let up = if state.holders > 0 && !state.up {
            true
        } else if state.holders == 0 && state.up {
            let idle = state.released.elapsed();
            if idle < shared.linger {
                state = shared
                    .changed
                    .wait_timeout(state, shared.linger - idle)
                    .unwrap_or_else(|p| p.into_inner())
                    .0;
                continue;
            }
            false
        } else {
            state = shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
            continue;
        };
        // DuckDB's relaunch runs unlocked: stopping joins each thread after
        // its task, and a task stuck in I/O (a catalog's probe on a hung
        // database) must not hold every hold. While it runs, `up` still
        // says they run, so holders go on (DuckDB counts them too until the
        // relaunch ends), and the next turn starts them again for them.
        drop(state);
        let now = set(&shared.db, Some(if up { shared.background } else { 0 }));
        state = shared.lock();
        match now {
            Some(n) => {
                shared.now.store(n, Ordering::Relaxed);
                state.up = up;
            }
            // Could not start them: DuckDB's own count stays, and holds go on.
            None if up => state.up = true,
            // Could not stop them: they stay, and this thread stops trying.
            None => break,
        }
        shared.changed.notify_all();
    }
    state.exited = true;
    shared.changed.notify_all();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn threads(db: &RawDatabase) -> usize {
        set(db, None).unwrap()
    }

    /// `SELECT count(*) FROM range(n)` on `conn` answers `n`: enough tasks
    /// to run on the background threads, or on the caller when they stop.
    fn counts_range(conn: &crate::engine::ffi::Connection, n: i64) {
        let counted: i64 = conn
            .prepare(&format!("SELECT count(*) FROM range({n})"))
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        assert_eq!(counted, n);
    }

    /// DuckDB counts its two threads now or within a second (generous: a
    /// stop under way ends, then they start again).
    fn running_soon(db: &RawDatabase, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(1);
        while threads(db) != 2 {
            assert!(Instant::now() < deadline, "{what}: not running");
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// The threads stop after the linger with nobody holding them, a hold
    /// starts them before it returns, and a statement run under the hold is
    /// planned with them: DuckDB's own count of its threads says so.
    #[test]
    fn background_threads_stop_when_unheld_and_start_for_a_hold() {
        let db = Arc::new(RawDatabase::open(None, &[("threads", "3".into())]).unwrap());
        let conn = db.connect().unwrap();
        let full = threads(&db);
        assert_eq!(full, 3);
        let scheduler = SchedulerThreads::start(db.clone());
        assert!(scheduler.running());
        assert_eq!(scheduler.count(), full);
        // Held: they stay past the linger.
        let held = scheduler.hold();
        std::thread::sleep(LINGER + Duration::from_millis(300));
        assert_eq!(threads(&db), full, "held threads stay");
        drop(held);
        // Unheld: they stop after the linger (generous bound).
        let deadline = Instant::now() + LINGER * 10;
        while scheduler.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(!scheduler.running(), "stopped after the linger");
        assert_eq!(threads(&db), 1, "only the caller's thread is left");
        assert_eq!(scheduler.count(), 1);
        // A statement still runs while they are stopped (its caller runs
        // its tasks), with DuckDB's own answer.
        counts_range(&conn, 2_000_000);
        // A hold starts them before it returns.
        let held = scheduler.hold();
        assert_eq!(threads(&db), full);
        assert!(scheduler.running());
        drop(held);
        drop(scheduler);
    }

    /// Holders come and go while the threads stop and start every
    /// millisecond: every holder finds them running, by DuckDB's own count
    /// (at once, or just after a stop that was under way when it came),
    /// still finds them running when it lets go, and its statements answer.
    #[test]
    fn every_holder_finds_the_threads_running_while_they_stop_and_start() {
        let db = Arc::new(RawDatabase::open(None, &[("threads", "2".into())]).unwrap());
        let scheduler = Arc::new(SchedulerThreads::start_lingering(
            db.clone(),
            Duration::from_millis(1),
        ));
        let started_again = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (db, scheduler, started_again) = (&db, &scheduler, &started_again);
                s.spawn(move || {
                    let conn = db.connect().unwrap();
                    for i in 0..150u64 {
                        let was_up = scheduler.running();
                        let held = scheduler.hold();
                        running_soon(db, "held");
                        if !was_up {
                            started_again.fetch_add(1, Ordering::Relaxed);
                        }
                        if i % 10 == 0 {
                            counts_range(&conn, 100_000);
                        }
                        std::thread::sleep(Duration::from_micros((t * 37 + i * 53) % 1500));
                        running_soon(db, "still held");
                        drop(held);
                        std::thread::sleep(Duration::from_micros((t * 71 + i * 29) % 3000));
                    }
                });
            }
        });
        // The schedule did stop and start them under the holders.
        assert!(
            started_again.load(Ordering::Relaxed) > 0,
            "no hold found the threads stopped"
        );
    }

    /// A task stuck on DuckDB's background thread (as a lake catalog's
    /// probe on a hung database would be) holds the stop that joins it,
    /// not the holds that come meanwhile: they return at once and their
    /// statements answer.
    #[test]
    fn a_stop_stuck_behind_a_task_does_not_hold_the_holds() {
        use duckdb::ffi;
        let db = Arc::new(RawDatabase::open(None, &[("threads", "2".into())]).unwrap());
        let scheduler = SchedulerThreads::start_lingering(db.clone(), Duration::from_millis(1));
        let raw = db.connect_raw().unwrap();
        let conn = db.connect().unwrap();
        let held = scheduler.hold();
        assert_eq!(threads(&db), 2);
        // A statement whose one task sleeps 3 s, left pending: nobody here
        // runs its tasks, so the background thread does.
        let sql = std::ffi::CString::new("SELECT sleep_ms(3000) IS NULL AS slept").unwrap();
        let mut stmt: ffi::duckdb_prepared_statement = std::ptr::null_mut();
        let mut pending: ffi::duckdb_pending_result = std::ptr::null_mut();
        // SAFETY: a live connection, a NUL-terminated text, valid out
        // pointers; both handles are destroyed below.
        unsafe {
            assert_eq!(
                ffi::duckdb_prepare(raw.as_ptr(), sql.as_ptr(), &mut stmt),
                ffi::DuckDBSuccess
            );
            assert_eq!(
                ffi::duckdb_pending_prepared(stmt, &mut pending),
                ffi::DuckDBSuccess
            );
        }
        std::thread::sleep(Duration::from_millis(300));
        // Let go: the stop begins and waits for the sleeping task.
        let let_go = Instant::now();
        drop(held);
        std::thread::sleep(Duration::from_millis(300));
        let t = Instant::now();
        let again = scheduler.hold();
        let waited = t.elapsed();
        let n: i64 = conn
            .prepare("SELECT 42")
            .unwrap()
            .query_row([], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 42);
        drop(again);
        assert!(
            waited < Duration::from_millis(500),
            "the hold waited {waited:?} for a stop stuck behind a task"
        );
        // The scenario held: the stop, which takes a millisecond when no
        // task runs, was still waiting for the sleeping one, and ended
        // once it did.
        assert_eq!(threads(&db), 2, "the stop was still under way");
        let deadline = Instant::now() + Duration::from_secs(10);
        while threads(&db) != 1 {
            assert!(Instant::now() < deadline, "the stop never ended");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(
            let_go.elapsed() >= Duration::from_millis(2000),
            "{:?}",
            let_go.elapsed()
        );
        // SAFETY: live handles, destroyed once.
        unsafe {
            let mut result: ffi::duckdb_result = std::mem::zeroed();
            assert_eq!(
                ffi::duckdb_execute_pending(pending, &mut result),
                ffi::DuckDBSuccess
            );
            ffi::duckdb_destroy_result(&mut result);
            ffi::duckdb_destroy_pending(&mut pending);
            ffi::duckdb_destroy_prepare(&mut stmt);
        }
    }

    /// With one thread there is nothing to stop: holds cost nothing.
    #[test]
    fn a_single_threaded_database_has_nothing_to_stop() {
        let db = Arc::new(RawDatabase::open(None, &[("threads", "1".into())]).unwrap());
        let scheduler = SchedulerThreads::start(db.clone());
        let _held = scheduler.hold();
        assert!(scheduler.running());
        assert_eq!(threads(&db), 1);
        assert_eq!(scheduler.count(), 1);
    }
}
