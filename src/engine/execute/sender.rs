//! The channel from the DuckDB thread to the HTTP body: [`Msg`]s queued by
//! a [`Sender`] that wakes on cancellation and cuts off a stalled client, and
//! the one way a body that has begun ends in an error.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::encode::{Format, ResultEncoder};

use super::control::{CancelReason, QueryControl};
use super::error::QueryError;
use super::job::QueryJob;

/// Encoded bytes are sent in chunks of about this size.
pub(super) const CHUNK_BYTES: usize = 256 * 1024;

/// The most an inline run's answer may hold (all of it waits in memory
/// until the run is over): what the channel holds for a blocking run.
pub(super) const INLINE_BYTES: usize = super::CHANNEL_CHUNKS * CHUNK_BYTES;

pub(super) enum Msg {
    /// Execution succeeded; the first bytes of the body.
    Start {
        kind: String,
        first: Bytes,
    },
    Data(Bytes),
    /// A failure before anything was sent.
    Fail(QueryError),
    /// A failure after the body began, for formats that cannot carry it.
    Abort(String),
}

/// Sends encoded chunks to the HTTP body, waking on cancellation and
/// cutting off a client that accepts nothing for the stall limit.
#[derive(Clone)]
pub(super) struct Sender {
    pub(super) tx: mpsc::Sender<Msg>,
    pub(super) control: Arc<QueryControl>,
    pub(super) runtime: tokio::runtime::Handle,
    pub(super) stall: Duration,
    /// Set for a run on the request's own thread (see `inline`): nothing
    /// reads the channel until the run is over, so a message that does not
    /// fit is not waited for; the run stops and this flag says so.
    pub(super) inline: Option<Arc<std::sync::atomic::AtomicBool>>,
}

impl Sender {
    /// Ends an answer that has no body (a description, a result kept for
    /// later): its kind and an empty start, the query complete.
    pub(super) fn start_empty(&self, kind: &str, control: &QueryControl) {
        self.try_send(Msg::Start {
            kind: kind.to_string(),
            first: Bytes::new(),
        });
        control
            .complete
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Queues `msg`; false when the query was cancelled or the client
    /// stalled or left.
    pub(super) fn send(&self, msg: Msg) -> bool {
        let bytes = match &msg {
            Msg::Start { first, .. } => first.len(),
            Msg::Data(b) => b.len(),
            _ => 0,
        };
        let sent = self
            .control
            .sent
            .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed)
            + bytes;
        if let Some(full) = &self.inline {
            if sent > INLINE_BYTES {
                full.store(true, std::sync::atomic::Ordering::SeqCst);
                return false;
            }
            return self.try_inline(full, msg);
        }
        self.runtime.block_on(async {
            tokio::select! {
                r = self.tx.send(msg) => r.is_ok(),
                _ = self.control.cancelled.cancelled() => false,
                _ = tokio::time::sleep(self.stall) => {
                    self.control.cancel(CancelReason::ClientStalled);
                    false
                }
            }
        })
    }

    /// An inline run's send: queued if there is room, else the run is to
    /// move to a blocking thread (the flag) and this one stops.
    fn try_inline(&self, full: &std::sync::atomic::AtomicBool, msg: Msg) -> bool {
        if self.control.cancelled.is_cancelled() {
            return false;
        }
        match self.tx.try_send(msg) {
            Ok(()) => true,
            Err(_) => {
                full.store(true, std::sync::atomic::Ordering::SeqCst);
                false
            }
        }
    }

    /// Queues `msg` only if there is room now (the answer before any body).
    pub(super) fn try_send(&self, msg: Msg) {
        let _ = self.tx.try_send(msg);
    }

    /// Answers with `err` (before any body began: the answer's problem
    /// document), and returns it.
    pub(super) fn fail<T>(&self, err: QueryError) -> Result<T, QueryError> {
        self.try_send(Msg::Fail(err.clone()));
        Err(err)
    }

    /// Records the error that ends a begun body, then queues its last
    /// bytes; if they cannot be queued (the client stopped reading, or the
    /// query was cancelled), the body ends itself with the recorded error.
    pub(super) fn end(&self, err: &QueryError, last: Vec<Msg>) {
        *self.control.error.lock().unwrap_or_else(|p| p.into_inner()) = Some(err.clone());
        for msg in last {
            if !self.send_final(msg) {
                return;
            }
        }
        // Delivered: the body ends as queued and reports nothing twice.
        self.control
            .complete
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Like `send`, but a cancellation does not stop it: only a full
    /// channel for the stall limit does.
    pub(super) fn send_final(&self, msg: Msg) -> bool {
        if let Some(full) = &self.inline {
            return self.try_inline(full, msg);
        }
        self.runtime.block_on(async {
            tokio::time::timeout(self.stall, self.tx.send(msg))
                .await
                .is_ok_and(|r| r.is_ok())
        })
    }
}

/// Ends a body that has begun: an error record where the format has one,
/// otherwise an abort, so the client never mistakes it for a complete result.
pub(super) fn end_with_error(
    encoder: &ResultEncoder,
    buf: &mut Vec<u8>,
    err: &QueryError,
    tx: &Sender,
    job: &QueryJob,
) {
    let record = encoder.error_record(&crate::problems::json_for_stream(err));
    end_body(buf, record, err, tx, job);
}

/// Ends a begun body with what is buffered and `record` (the format's error
/// record, for a reader that reads line by line), then an abort, so every
/// HTTP client library sees a failed transfer rather than a whole answer.
pub(super) fn end_body(
    buf: &mut Vec<u8>,
    record: Option<Vec<u8>>,
    err: &QueryError,
    tx: &Sender,
    job: &QueryJob,
) {
    record_failure(job.tracker.as_deref(), err);
    // Bounded by the stall limit: a client that stopped reading gets its
    // ending from the body itself (see `next_chunk`).
    let mut last = Vec::new();
    if let Some(record) = record {
        buf.extend_from_slice(&record);
    }
    if !buf.is_empty() {
        last.push(Msg::Data(Bytes::from(std::mem::take(buf))));
    }
    last.push(Msg::Abort(err.to_string()));
    tx.end(err, last);
}

/// Records, for the audit line, that a body which had begun ended in `err`.
pub(super) fn record_failure(tracker: Option<&crate::engine::queries::Running>, err: &QueryError) {
    if let Some(t) = tracker {
        t.set_outcome(crate::engine::queries::Outcome {
            status: 200,
            kind: format!("failed-while-streaming:{}", err.outcome()),
            error_class: match err {
                QueryError::Sql { class, .. } => Some(class.clone()),
                _ => None,
            },
        });
    }
}

/// The last NDJSON line for `err`, or `None` for formats that end by abort.
pub(super) fn error_record_for(format: Format, err: &QueryError) -> Option<Bytes> {
    (format == Format::Ndjson).then(|| {
        let problem = crate::problems::json_for_stream(err);
        let mut line =
            serde_json::to_vec(&serde_json::json!({ "error": problem })).unwrap_or_default();
        line.push(b'\n');
        Bytes::from(line)
    })
}
