//! Stopping a query: the state an interrupt may reach ([`QueryControl`]),
//! the reasons, and the watchdog that enforces the deadline independently
//! of the body and replaces a connection that does not let go.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::pool::Lease;

use super::error::QueryError;
use super::job::QueryJob;

/// Why a running query is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CancelReason {
    Timeout,
    ClientGone,
    /// `DELETE /queries/{id}` asked for it.
    Requested,
    /// The client accepted no bytes for the stall limit.
    ClientStalled,
    /// The spill directory passed `DUCKGATE_MAX_TEMP_DIRECTORY_SIZE`.
    TempSpace,
    Shutdown,
    /// An inline run outlived its budget: it runs again on a blocking
    /// thread (see `inline`), so no client sees this.
    Moved,
    /// What it borrowed past its token's share was taken back (see
    /// `admission::Reclaim`): it runs again from its token's own queue.
    Reclaimed,
}

/// Where the worker is with its connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    /// Not yet executing (guard, prepare).
    Pending,
    /// Executing or streaming: an interrupt reaches it.
    Running,
    /// The connection is no longer the query's: never interrupt it again.
    Done,
}

#[derive(Debug)]
pub(super) struct ControlState {
    pub(super) phase: Phase,
    /// Why the query is being stopped, once it is.
    pub(super) reason: Option<CancelReason>,
}

/// Lets the async side interrupt the query exactly while it runs on its
/// connection, never after the connection went back to the pool.
pub(super) struct QueryControl {
    pub(super) state: Mutex<ControlState>,
    pub(super) interrupt: Arc<duckdb::InterruptHandle>,
    /// Fires on any cancellation, so a worker blocked on a full channel
    /// (a slow reader) wakes at once.
    pub(super) cancelled: CancellationToken,
    /// Fires when the worker is done with the connection.
    pub(super) finished: CancellationToken,
    /// Set when the body's last bytes were queued: the whole result, or
    /// the ending of a failed one.
    pub(super) complete: std::sync::atomic::AtomicBool,
    /// The error that ended a body after it began, for the body to report
    /// if the worker could not queue it.
    pub(super) error: Mutex<Option<QueryError>>,
    /// Bytes the worker queued for the body.
    pub(super) sent: std::sync::atomic::AtomicUsize,
    /// The wrapper DuckDB runs in place of the client's text, if any: its
    /// errors' places are in the wrapper (see [`super::error::run_error`]).
    pub(super) ran: Mutex<Option<super::error::Wrapper>>,
}

impl QueryControl {
    pub(super) fn new(interrupt: Arc<duckdb::InterruptHandle>) -> Self {
        Self {
            state: Mutex::new(ControlState {
                phase: Phase::Pending,
                reason: None,
            }),
            interrupt,
            cancelled: CancellationToken::new(),
            finished: CancellationToken::new(),
            complete: std::sync::atomic::AtomicBool::new(false),
            error: Mutex::new(None),
            sent: std::sync::atomic::AtomicUsize::new(0),
            ran: Mutex::new(None),
        }
    }

    /// Records what DuckDB runs next: `wrapper` around `statement` (the
    /// client's, as DuckDB's reading spans it), or with `None` the client's
    /// own text.
    pub(super) fn runs(&self, wrapper: Option<(&str, &str)>) {
        *self.ran.lock().unwrap_or_else(|p| p.into_inner()) =
            wrapper.map(|(text, statement)| super::error::Wrapper {
                text: text.to_string(),
                statement: statement.to_string(),
            });
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, ControlState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the query as executing; refused once it was cancelled.
    pub(super) fn start(&self) -> Result<(), CancelReason> {
        let mut s = self.lock();
        match s.reason {
            Some(r) => Err(r),
            None => {
                s.phase = Phase::Running;
                Ok(())
            }
        }
    }

    pub(super) fn finish(&self) {
        self.lock().phase = Phase::Done;
        self.finished.cancel();
    }

    pub(super) fn cancel(&self, reason: CancelReason) {
        let mut s = self.lock();
        if s.reason.is_some() || s.phase == Phase::Done {
            return;
        }
        s.reason = Some(reason);
        if s.phase == Phase::Running {
            self.interrupt.interrupt();
        }
        drop(s);
        self.cancelled.cancel();
    }

    /// Interrupts again while the cancelled query still runs: DuckDB clears
    /// the flag when a statement starts, so an early interrupt can be lost.
    pub(super) fn reinterrupt(&self) {
        let s = self.lock();
        if s.phase == Phase::Running && s.reason.is_some() {
            self.interrupt.interrupt();
        }
    }

    pub(super) fn reason(&self) -> Option<CancelReason> {
        self.lock().reason
    }
}

/// Interrupts the query if the request goes away (handler future or body
/// stream dropped) before it finished.
pub(super) struct CancelOnDrop(pub(super) Arc<QueryControl>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancel(CancelReason::ClientGone);
    }
}

/// How long an interrupted query may keep its connection before the pool
/// replaces it.
pub(super) const STUCK_AFTER: Duration = Duration::from_secs(3);

/// Watches one query independently of the HTTP body (which is not polled
/// while a client reads slowly): enforces the deadline, keeps interrupting
/// until the worker lets go, and replaces the lease if it does not.
pub(super) async fn watchdog(
    control: Arc<QueryControl>,
    lease: Arc<Lease>,
    deadline: tokio::time::Instant,
    shutdown: CancellationToken,
    spill: CancellationToken,
    requested: CancellationToken,
    reclaimed: CancellationToken,
) {
    tokio::select! {
        _ = control.finished.cancelled() => return,
        _ = control.cancelled.cancelled() => {}
        _ = requested.cancelled() => control.cancel(CancelReason::Requested),
        _ = tokio::time::sleep_until(deadline) => control.cancel(CancelReason::Timeout),
        _ = shutdown.cancelled() => control.cancel(CancelReason::Shutdown),
        _ = spill.cancelled() => control.cancel(CancelReason::TempSpace),
        _ = reclaimed.cancelled() => control.cancel(CancelReason::Reclaimed),
    }
    let stuck_at = tokio::time::Instant::now() + STUCK_AFTER;
    loop {
        tokio::select! {
            _ = control.finished.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(100)) => control.reinterrupt(),
        }
        if tokio::time::Instant::now() >= stuck_at {
            break;
        }
    }
    if !control.finished.is_cancelled() {
        lease.replace();
    }
}

/// The error of a query that stopped before its end: the reason it was
/// stopped (the client stalled, the deadline, ...), else `Cancelled`.
pub(super) fn stopped_error(control: &QueryControl, job: &QueryJob) -> QueryError {
    cancel_error(control, job).unwrap_or(QueryError::Cancelled)
}

pub(super) fn cancel_error(control: &QueryControl, job: &QueryJob) -> Option<QueryError> {
    control.reason().map(|r| match r {
        CancelReason::Timeout => QueryError::Timeout(job.timeout),
        CancelReason::ClientGone | CancelReason::Moved => QueryError::Cancelled,
        CancelReason::Requested => QueryError::CancelledByRequest,
        CancelReason::ClientStalled => QueryError::ClientStalled,
        CancelReason::TempSpace => QueryError::TempSpace,
        CancelReason::Shutdown => QueryError::ShuttingDown,
        // Its caller runs it again; should it reach a client, it is the
        // token's share that bound it.
        CancelReason::Reclaimed => QueryError::TokenShare(job.timeout),
    })
}
