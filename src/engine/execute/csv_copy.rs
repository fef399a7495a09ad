//! CSV answers written by DuckDB's own COPY through the pipe file system
//! (see `engine::pipe`), cut after a whole row at the row and byte limits.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::engine::guard;
use crate::engine::pipe;

use super::control::{cancel_error, stopped_error, QueryControl};
use super::error::QueryError;
use super::job::QueryJob;
use super::sender::{end_body, Msg, Sender, CHUNK_BYTES};
use super::stream::{byte_cap, row_cap};
use super::worker::{execution_error, param_values};

/// A CSV answer in the making: what DuckDB's COPY writes, cut at the row
/// and byte limits (after the row that passes them), sent in chunks.
pub(super) struct CsvPipe {
    tx: Sender,
    kind: String,
    max_rows: u64,
    max_bytes: u64,
    max_value_bytes: u64,
    tracker: Option<Arc<crate::engine::queries::Running>>,
    state: Mutex<CsvState>,
}

#[derive(Default)]
pub(super) struct CsvState {
    buf: Vec<u8>,
    bytes: u64,
    rows: pipe::RowEnds,
    /// The body began (its first chunk was queued).
    started: bool,
    /// Stopped at a limit: DuckDB's failure to write more is the end.
    cut: bool,
    /// DuckDB had bytes past the cut: the result was larger than the limit
    /// let through (a cut exactly at the result's end is no cut).
    overflow: bool,
    /// No more bytes are taken (cut, cancelled, or the client left).
    closed: bool,
    /// Why the pipe stopped DuckDB, when it was not a limit or the client.
    failed: Option<QueryError>,
}

impl CsvPipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, CsvState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues what is buffered; the first chunk starts the body.
    fn flush(&self, st: &mut CsvState) -> bool {
        let chunk = Bytes::from(std::mem::take(&mut st.buf));
        if st.started {
            return self.tx.send(Msg::Data(chunk));
        }
        // Begun only once the start is queued: a start lost to a
        // cancellation leaves the answer a problem document.
        let queued = self.tx.send(Msg::Start {
            kind: self.kind.clone(),
            first: chunk,
        });
        if queued {
            st.started = true;
            if let Some(t) = &self.tracker {
                t.advance(crate::engine::queries::QueryState::Streaming);
            }
        }
        queued
    }
}

impl pipe::Output for CsvPipe {
    fn write(&self, data: &[u8]) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        if st.cut {
            // Anything past a cut made at the end of a write means the
            // result did not fit.
            if !data.is_empty() {
                st.overflow = true;
                st.closed = true;
                return false;
            }
            return true;
        }
        let (before, max_rows, max_bytes) = (st.bytes, self.max_rows, self.max_bytes);
        // The header's end is the first row end.
        let cut = st.rows.feed(data, |ends, at| {
            ends > max_rows || before + at as u64 >= max_bytes
        });
        // One huge row would be held whole: refuse it before buffering,
        // like a huge value in the other formats.
        let widest = st.rows.widest.max(st.rows.open_row);
        if widest > self.max_value_bytes {
            st.failed = Some(QueryError::ValueTooLarge {
                size: widest,
                limit: self.max_value_bytes,
            });
            st.closed = true;
            return false;
        }
        let take = cut.unwrap_or(data.len());
        st.buf.extend_from_slice(&data[..take]);
        st.bytes += take as u64;
        if let Some(t) = &self.tracker {
            let rows = st.rows.ends.saturating_sub(1);
            t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
        }
        if cut.is_some() {
            st.cut = true;
            if take < data.len() {
                st.overflow = true;
                st.closed = true;
                return false;
            }
            return true;
        }
        // The first row goes out at once (time to first byte); later ones
        // in chunks of CHUNK_BYTES.
        let first_row = !st.started && st.rows.ends >= 2;
        if (first_row || st.buf.len() >= CHUNK_BYTES) && !self.flush(&mut st) {
            st.closed = true;
            return false;
        }
        true
    }
}

/// Runs the CSV COPY of an accepted query with its output attached to the
/// client's body.
pub(super) fn copy_csv(
    stmt: &mut duckdb::Statement<'_>,
    token: u64,
    connection_id: u64,
    accepted: &guard::Accepted,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let values = match param_values(stmt, job) {
        Ok(v) => v,
        Err(e) => return tx.fail(e),
    };
    let out = Arc::new(CsvPipe {
        tx: tx.clone(),
        kind: accepted.kind.clone(),
        max_rows: job.max_rows,
        max_bytes: job.max_bytes,
        max_value_bytes: job.max_value_bytes,
        tracker: job.tracker.clone(),
        state: Mutex::new(CsvState::default()),
    });
    let attached = pipe::attach(token, connection_id, out.clone());
    let result = stmt.execute(duckdb::params_from_iter(values.iter()));
    drop(attached);
    let mut st = out.lock();
    st.closed = true;
    // DuckDB's failure to write past a limit is the answer's end; a
    // cancellation as it finished still means what was sent is not whole.
    let err = match result {
        Err(e) if !st.cut => Some(
            st.failed
                .take()
                .unwrap_or_else(|| execution_error(&e, &values, control, job)),
        ),
        // A cut at a cap the client did not ask for is not the answer's
        // end: the body says so.
        _ if st.overflow => {
            let at_row_limit = st.rows.ends.saturating_sub(1) >= job.max_rows;
            match (at_row_limit, job.rows_asked) {
                (true, true) => cancel_error(control, job),
                (true, false) => Some(row_cap(job)),
                (false, _) => Some(byte_cap(job)),
            }
        }
        _ => cancel_error(control, job),
    };
    if let Some(err) = err {
        if !st.started {
            return tx.fail(err);
        }
        end_body(&mut st.buf, None, &err, tx, job);
        return Err(err);
    }
    if !out.flush(&mut st) {
        return Err(stopped_error(control, job));
    }
    control
        .complete
        .store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}
