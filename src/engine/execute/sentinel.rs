//! The watch over inline runs (see `inline`): a run on an async worker
//! cannot be interrupted by a task on that same worker, so one thread of
//! the process does it. It interrupts a run that outlives its budget (the
//! run then moves to a blocking thread), passes its deadline, or whose
//! query was cancelled or the process is shutting down.
//!
//! Registering a run is a lock and a push: no system call while the
//! thread is awake. It wakes every [`TICK`] while runs come and goes back
//! to sleep (parked, no timer) after a while without any.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::control::{CancelReason, QueryControl};

/// How often the sentinel looks while runs come.
pub(super) const TICK: Duration = Duration::from_millis(5);

/// Ticks without any run before the sentinel sleeps until the next.
const IDLE_TICKS: u32 = 200;

/// One inline run under watch.
pub(super) struct Watched {
    pub(super) control: Arc<QueryControl>,
    /// Past this the run moves to a blocking thread.
    pub(super) budget: Instant,
    pub(super) deadline: Instant,
    pub(super) shutdown: CancellationToken,
    pub(super) requested: CancellationToken,
}

struct Shared {
    runs: Mutex<Vec<(u64, Watched)>>,
    next: std::sync::atomic::AtomicU64,
    /// The thread sleeps with no timer: a new run must wake it.
    idle: AtomicBool,
    thread: OnceLock<Thread>,
}

/// The sentinel, started with the first inline run; `None` if its thread
/// could not be started (then nothing runs inline).
fn shared() -> Option<&'static Shared> {
    static SHARED: OnceLock<Option<&'static Shared>> = OnceLock::new();
    *SHARED.get_or_init(|| {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            runs: Mutex::new(Vec::new()),
            next: std::sync::atomic::AtomicU64::new(0),
            idle: AtomicBool::new(false),
            thread: OnceLock::new(),
        }));
        match std::thread::Builder::new()
            .name("duckgate-sentinel".into())
            .spawn(move || watch_loop(shared))
        {
            Ok(handle) => {
                let _ = shared.thread.set(handle.thread().clone());
                Some(shared)
            }
            Err(e) => {
                tracing::warn!(error = %e, "the inline sentinel did not start; short reads run on blocking threads");
                None
            }
        }
    })
}

/// Whether inline runs can be watched.
pub(super) fn available() -> bool {
    shared().is_some()
}

/// Keeps a run under watch until dropped.
pub(super) struct Watch {
    id: u64,
}

/// Puts `run` under watch (`None` without a sentinel: see [`available`]).
pub(super) fn watch(run: Watched) -> Option<Watch> {
    let s = shared()?;
    let id = s.next.fetch_add(1, Ordering::Relaxed);
    s.runs
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push((id, run));
    if s.idle.swap(false, Ordering::SeqCst) {
        if let Some(t) = s.thread.get() {
            t.unpark();
        }
    }
    Some(Watch { id })
}

impl Drop for Watch {
    fn drop(&mut self) {
        let Some(s) = shared() else { return };
        let mut runs = s.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(i) = runs.iter().position(|(id, _)| *id == self.id) {
            runs.swap_remove(i);
        }
    }
}

fn watch_loop(s: &'static Shared) {
    let mut empty_ticks = 0u32;
    loop {
        let now = Instant::now();
        let empty = {
            let runs = s.runs.lock().unwrap_or_else(|p| p.into_inner());
            for (_, run) in runs.iter() {
                let reason = if run.shutdown.is_cancelled() {
                    Some(CancelReason::Shutdown)
                } else if run.requested.is_cancelled() {
                    Some(CancelReason::Requested)
                } else if now >= run.deadline {
                    Some(CancelReason::Timeout)
                } else if now >= run.budget {
                    Some(CancelReason::Moved)
                } else {
                    None
                };
                if let Some(reason) = reason {
                    run.control.cancel(reason);
                    // DuckDB clears the flag when a statement starts: an
                    // interrupt that came too early is given again.
                    run.control.reinterrupt();
                }
            }
            runs.is_empty()
        };
        empty_ticks = if empty { empty_ticks + 1 } else { 0 };
        if empty_ticks >= IDLE_TICKS {
            s.idle.store(true, Ordering::SeqCst);
            // A run registered before `idle` was set is seen here; one
            // after finds it set and unparks.
            if s.runs.lock().unwrap_or_else(|p| p.into_inner()).is_empty() {
                std::thread::park();
            }
            s.idle.store(false, Ordering::SeqCst);
            empty_ticks = 0;
        } else {
            std::thread::park_timeout(TICK);
        }
    }
}
