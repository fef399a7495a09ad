//! Parquet answers written by DuckDB's own `COPY ... (FORMAT parquet)`
//! through the pipe file system (see `engine::pipe`), so every type is
//! written as DuckDB writes it.
//!
//! A Parquet file cannot be cut: its footer, written last, says where
//! everything is. So a row limit the client asked for is the query's own
//! (`SELECT * FROM (<query>) LIMIT n`, checked by DuckDB's parser to wrap
//! exactly the judged query), and a cap the client did not ask for is
//! checked against the rows the COPY reports: more than the cap fails the
//! body. That COPY is not wrapped in a LIMIT: DuckDB runs a large LIMIT that
//! keeps insertion order on one thread, which halved Parquet answers
//! (10M rows: 2.62 s against 1.36 s for DuckDB's own COPY of the same query);
//! the answer's byte cap and time limit bound its work instead. The last bytes of
//! the file (the footer's length and the closing magic) are held back until
//! DuckDB says the COPY succeeded, so a body that fails anywhere is never a
//! file that a Parquet reader opens.

use std::sync::{Arc, Mutex};

use bytes::Bytes;

use crate::engine::pipe;

use super::control::{cancel_error, stopped_error, QueryControl};
use super::error::QueryError;
use super::job::QueryJob;
use super::sender::{end_body, Msg, Sender, CHUNK_BYTES};
use super::stream::{byte_cap, row_cap};
use super::worker::{execution_error, param_values};

/// Bytes of the file kept back until the COPY succeeds: the footer length
/// and the `PAR1` magic that end every Parquet file.
const HELD_BACK: usize = 8;

/// How DuckDB's Parquet writer starts the message of a value Parquet
/// cannot hold.
const PARQUET_CANNOT_HOLD: &str = "Parquet files do not support";

/// The COPY that writes the Parquet answer of `select_sql` for `job`, and the
/// number of rows past which the answer fails (`None`: it never does).
pub(super) fn parquet_copy(select_sql: &str, job: &QueryJob) -> Option<(String, Option<u64>)> {
    let (query, fail_past) = if job.max_rows == u64::MAX {
        (select_sql.to_string(), None)
    } else if job.rows_asked {
        // The client's own limit: the answer ends cleanly there.
        (pipe::limited_sql(select_sql, job.max_rows)?, None)
    } else {
        // The server's cap: the COPY's row count tells whether the result
        // passed it (see the module doc for why no LIMIT).
        (select_sql.to_string(), Some(job.max_rows))
    };
    let copy = pipe::copy_sql(&query, pipe::CopyFormat::Parquet)?;
    Some((copy, fail_past))
}

struct ParquetPipe {
    tx: Sender,
    kind: String,
    max_bytes: u64,
    /// The error of an answer past `max_bytes`.
    over_cap: QueryError,
    state: Mutex<ParquetState>,
}

#[derive(Default)]
struct ParquetState {
    buf: Vec<u8>,
    bytes: u64,
    started: bool,
    closed: bool,
    failed: Option<QueryError>,
}

impl ParquetPipe {
    fn lock(&self) -> std::sync::MutexGuard<'_, ParquetState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Queues the buffer but its last `keep` bytes; the first chunk starts
    /// the body.
    fn flush(&self, st: &mut ParquetState, keep: usize) -> bool {
        let cut = st.buf.len().saturating_sub(keep);
        let rest = st.buf.split_off(cut);
        let chunk = Bytes::from(std::mem::replace(&mut st.buf, rest));
        if st.started {
            return self.tx.send(Msg::Data(chunk));
        }
        let queued = self.tx.send(Msg::Start {
            kind: self.kind.clone(),
            first: chunk,
        });
        st.started = queued;
        queued
    }
}

impl pipe::Output for ParquetPipe {
    fn write(&self, data: &[u8]) -> bool {
        let mut st = self.lock();
        if st.closed {
            return false;
        }
        st.bytes += data.len() as u64;
        if st.bytes > self.max_bytes {
            // A Parquet file cut short is no file: the cap fails the answer.
            st.failed = Some(self.over_cap.clone());
            st.closed = true;
            return false;
        }
        st.buf.extend_from_slice(data);
        if st.buf.len() >= CHUNK_BYTES + HELD_BACK && !self.flush(&mut st, HELD_BACK) {
            st.closed = true;
            return false;
        }
        true
    }
}

/// Runs `copy` (from [`parquet_copy`]) with its output attached to the
/// client's body.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_parquet(
    stmt: &mut duckdb::Statement<'_>,
    token: u64,
    connection_id: u64,
    kind: &str,
    fail_past: Option<u64>,
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<(), QueryError> {
    let values = match param_values(stmt, job) {
        Ok(v) => v,
        Err(e) => return tx.fail(e),
    };
    let out = Arc::new(ParquetPipe {
        tx: tx.clone(),
        kind: kind.to_string(),
        max_bytes: job.max_bytes,
        over_cap: byte_cap(job),
        state: Mutex::new(ParquetState::default()),
    });
    let attached = pipe::attach(token, connection_id, out.clone());
    // COPY answers with the number of rows it wrote.
    let result = stmt.execute(duckdb::params_from_iter(values.iter()));
    drop(attached);
    let mut st = out.lock();
    st.closed = true;
    let err = match result {
        Err(e) => Some(st.failed.take().unwrap_or_else(|| {
            match execution_error(&e, &values, control, job) {
                // DuckDB's Parquet writer refuses a value the format cannot
                // hold (a negative INTERVAL) with an I/O error: it is the
                // format asked for, not storage, that failed.
                QueryError::Sql { message, .. } if message.contains(PARQUET_CANNOT_HOLD) => {
                    QueryError::FormatUnavailable(format!(
                        "DuckDB cannot write this result as Parquet: {message}; ask for json, ndjson, csv or arrow"
                    ))
                }
                other => other,
            }
        })),
        Ok(rows) => {
            if let Some(t) = &job.tracker {
                t.rows
                    .store(rows as u64, std::sync::atomic::Ordering::Relaxed);
            }
            match fail_past {
                Some(cap) if rows as u64 > cap => Some(row_cap(job)),
                _ => cancel_error(control, job),
            }
        }
    };
    if let Some(err) = err {
        if !st.started {
            return tx.fail(err);
        }
        // Nothing more of the file: what was sent lacks its end.
        st.buf.clear();
        end_body(&mut st.buf, None, &err, tx, job);
        return Err(err);
    }
    if let Some(t) = &job.tracker {
        t.advance(crate::engine::queries::QueryState::Streaming);
    }
    if !out.flush(&mut st, 0) {
        return Err(stopped_error(control, job));
    }
    control
        .complete
        .store(true, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}
