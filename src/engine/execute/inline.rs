//! A short read on the request's own thread.
//!
//! Handing a statement to a blocking thread and its answer back costs two
//! thread wake-ups, which for a statement DuckDB answers in tens of
//! microseconds is most of the request. A text this connection has judged
//! read-only, whose last run here was short and whose answer fit the
//! channel ([`Verdict::quick`](crate::engine::pool::Verdict)), runs on the
//! async worker that took the request, its whole answer queued before the
//! body starts.
//!
//! The way out: an answer that outgrows the channel stops the run (nothing
//! has reached the client) and the statement runs again on a blocking
//! thread, as does one the [`Sentinel`](super::sentinel) interrupts for
//! outrunning its budget. Either marks the text slow on this connection.
//! Only read-only statements run here, so running one again changes
//! nothing but the time it takes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::encode::Format;
use crate::engine::pool::{Lease, Pooled};

use super::control::{CancelReason, QueryControl};
use super::job::QueryJob;
use super::sender::{Msg, Sender};
use super::sentinel::{self, Watched};
use super::worker::{finish, mark_quick, work_inner};
use super::CHANNEL_CHUNKS;

/// How long an inline run may hold the request's thread before it moves
/// to a blocking one (the sentinel looks every [`sentinel::TICK`]).
pub(super) const BUDGET: std::time::Duration = std::time::Duration::from_millis(10);

/// Whether `job` may run on the request's own thread on `slot`.
/// `s3`: DuckDB's parse finds S3 (or a lake) in it; such a statement
/// keeps to a blocking thread, whose watchdog answers at the deadline even
/// while an S3 read in flight does not see the interrupt.
pub(super) fn eligible(job: &QueryJob, slot: &Pooled, s3: bool) -> bool {
    !s3 && job.sink.is_none()
        && matches!(job.format, Format::Json | Format::Ndjson | Format::Arrow)
        && slot.is_quick(&job.sql, job.rules.policy)
        && sentinel::available()
        // The other workers keep serving while this one runs DuckDB: on a
        // single-threaded runtime nothing would.
        && tokio::runtime::Handle::try_current().is_ok_and(|h| {
            h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
        })
}

/// Runs `job` here. Its answer is queued on the receiver when this
/// returns; `Err` gives the connection back for a run on a blocking thread.
pub(super) fn run(
    mut slot: Pooled,
    lease: &Arc<Lease>,
    job: &QueryJob,
    shutdown: &CancellationToken,
    requested: &CancellationToken,
) -> Result<(mpsc::Receiver<Msg>, Arc<QueryControl>), Box<Pooled>> {
    let started = Instant::now();
    let control = Arc::new(QueryControl::new(slot.interrupt.clone()));
    let Some(watch) = sentinel::watch(Watched {
        control: control.clone(),
        budget: started + BUDGET,
        deadline: job.started + job.timeout,
        shutdown: shutdown.clone(),
        requested: requested.clone(),
    }) else {
        return Err(Box::new(slot));
    };
    let full = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel(CHANNEL_CHUNKS);
    let sender = Sender {
        tx,
        control: control.clone(),
        runtime: tokio::runtime::Handle::current(),
        stall: job.stall_timeout,
        inline: Some(full.clone()),
    };
    // Over within milliseconds: nobody watches its progress.
    slot.track_progress(false);
    // Not `block_in_place`: it hands the worker's core to another thread
    // on every call, and measured here it cut `SELECT 42` to a tenth.
    // Only a text judged here before runs inline: there is no parse to hand on.
    let outcome = work_inner(&mut slot, job, None, &sender, &control, false);
    drop(watch);
    // An answer that did not fit, or a run stopped for its budget (one
    // that finished in the same instant stands).
    let grew = full.load(Ordering::SeqCst);
    let moved = control.reason() == Some(CancelReason::Moved);
    if grew || (outcome.is_err() && moved) {
        if let Some(v) = slot.verdicts.get_mut(&job.sql) {
            v.quick = false;
        }
        let reason = if grew { "answer_size" } else { "budget" };
        metrics::counter!("duckgate_queries_inline_moved_total", "reason" => reason).increment(1);
        return Err(Box::new(slot));
    }
    metrics::counter!("duckgate_queries_inline_total").increment(1);
    mark_quick(&mut slot, job, &outcome, &control, started.elapsed());
    finish(slot, lease, job, &outcome, sender, started);
    Ok((rx, control))
}
