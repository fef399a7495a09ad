//! Streaming a result's Arrow batches through an encoder: the row, byte and
//! value limits, and parallel encoding of large results.

use arrow::array::{Array, RecordBatch};
use bytes::Bytes;

use crate::encode::{self, Column, Format, ResultEncoder, Summary};
use crate::engine::guard;

use super::control::{cancel_error, stopped_error, QueryControl};
use super::error::{run_error, QueryError};
use super::job::QueryJob;
use super::sender::{end_with_error, Msg, Sender, CHUNK_BYTES};
use super::worker::{column_types, execute_arrow};

/// Batches a result encodes one at a time before encoding goes parallel.
pub(super) const SERIAL_BATCHES: usize = 4;

/// Batches encoded together, split across threads.
pub(super) const WINDOW_BATCHES: usize = 8;

/// Encodes `window` (consecutive batches, after at least one row) across the
/// machine's cores and queues the bytes in order, a chunk at a time.
///
/// Each batch is encoded into its own buffer and the body is flushed at
/// every [`CHUNK_BYTES`], so no buffer grows to a whole window (2 MB of
/// NDJSON): with glibc's malloc, blocks of 1 MiB and more were mapped and
/// unmapped each time, and a fresh mapping per window cost a page fault per
/// 4 KiB written (493k faults and a third of the CPU of a 10M-row NDJSON
/// answer; 16k faults since).
fn encode_window(
    enc: &encode::RowsEncoder,
    window: Vec<RecordBatch>,
    body: &mut Body<'_>,
) -> Result<(), Stop> {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let cores = *CORES.get_or_init(|| {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
    });
    let threads = cores.min(window.len()).max(1);
    let per = window.len().div_ceil(threads);
    let mut chunks = window.chunks(per);
    let first = chunks.next().unwrap_or(&[]);
    let rest: Vec<&[RecordBatch]> = chunks.collect();
    std::thread::scope(|scope| {
        let handles: Vec<_> = rest
            .iter()
            .map(|chunk| {
                scope.spawn(move || -> Result<Vec<Vec<u8>>, arrow::error::ArrowError> {
                    chunk
                        .iter()
                        .map(|b| {
                            let mut bytes = Vec::new();
                            enc.encode(b, 1, &mut bytes)?;
                            Ok(bytes)
                        })
                        .collect()
                })
            })
            .collect();
        for b in first {
            enc.encode(b, 1, &mut body.buf).map_err(encoding)?;
            body.flush_full()?;
        }
        for h in handles {
            let pieces = h
                .join()
                .map_err(|_| {
                    encoding(arrow::error::ArrowError::ComputeError(
                        "an encoder thread panicked".into(),
                    ))
                })?
                .map_err(encoding)?;
            for piece in pieces {
                body.make_room(piece.len())?;
                body.buf.extend_from_slice(&piece);
                body.flush_full()?;
            }
        }
        Ok(())
    })
}

/// Binds, executes and streams one accepted statement. `Ok(true)` when the
/// result was read to its end.
pub(super) fn stream_statement(
    stmt: &mut duckdb::Statement<'_>,
    accepted: &guard::Accepted,
    csv_names: Option<Vec<String>>,
    marks: &[Vec<encode::Mark>],
    job: &QueryJob,
    tx: &Sender,
    control: &QueryControl,
) -> Result<bool, QueryError> {
    if let Err(e) = execute_arrow(stmt, job, control) {
        return tx.fail(e);
    }
    // The fields holding what DuckDB rendered for want of an Arrow type say
    // so (the batches need no change: only metadata differs).
    let schema = match stmt.schema() {
        s if encode::marks::any(marks) => encode::mark_schema(&s, marks),
        s => s,
    };
    let type_names = column_types(stmt, accepted, &schema);
    let columns: Vec<Column> = encode::columns(&schema, &type_names);
    let mut encoder = result_encoder(job.format, &schema, &type_names, csv_names);
    encoder.arrow_compression(job.arrow_compression);
    let mut body = Body {
        tx,
        tracker: job.tracker.as_deref(),
        kind: &accepted.kind,
        // Small answers stay small: the buffer grows to a chunk only when a
        // result needs one (a large first allocation costs small queries
        // dearly).
        buf: Vec::new(),
        started: false,
        queued: 0,
    };
    match write_result(stmt, &mut encoder, &columns, &mut body, job, control) {
        Ok(complete) => {
            control
                .complete
                .store(true, std::sync::atomic::Ordering::SeqCst);
            Ok(complete)
        }
        // Why it could not be delivered (the client stalled, left, the
        // deadline) is the query's outcome.
        Err(Stop::Undeliverable) => Err(stopped_error(control, job)),
        // Before the body began, the answer is a problem document; after,
        // the body ends with the format's error record or an abort.
        Err(Stop::Failed(err)) if !body.started => tx.fail(err),
        Err(Stop::Failed(err)) => {
            end_with_error(&encoder, &mut body.buf, &err, tx, job);
            Err(err)
        }
    }
}

/// The encoder of `format` for a result of `schema`, whose columns DuckDB
/// types as `type_names`; `csv_names`: the columns are DuckDB's own CSV
/// text (see `wrap`).
fn result_encoder(
    format: Format,
    schema: &arrow::datatypes::SchemaRef,
    type_names: &[String],
    csv_names: Option<Vec<String>>,
) -> ResultEncoder {
    // JSON rules need DuckDB's type where Arrow's is ambiguous (UHUGEINT is
    // exported as a signed decimal): carried as field metadata.
    let encoder_schema = match format {
        Format::Json | Format::Ndjson => std::sync::Arc::new(arrow::datatypes::Schema::new(
            schema
                .fields()
                .iter()
                .zip(type_names)
                .map(|(f, t)| {
                    let mut m = f.metadata().clone();
                    m.insert(encode::DUCKDB_TYPE_KEY.to_string(), t.clone());
                    std::sync::Arc::new(f.as_ref().clone().with_metadata(m))
                })
                .collect::<Vec<_>>(),
        )),
        // A UUID column says so: its Arrow values are text.
        _ => encode::mark_uuids(schema, type_names),
    };
    let mut encoder = ResultEncoder::new(format, encoder_schema);
    if let Some(names) = csv_names {
        encoder.duckdb_text(names);
    }
    encoder.unsigned_huge(
        type_names
            .iter()
            .enumerate()
            .filter(|(_, t)| t.as_str() == "UHUGEINT")
            .map(|(i, _)| i)
            .collect(),
    );
    encoder
}

/// Why a result stopped before its end.
enum Stop {
    /// An error the answer reports: as its problem document before the body
    /// began, as the body's ending after.
    Failed(QueryError),
    /// The body could not be queued (the client left or stalled, or the
    /// query was cancelled): nothing more reaches the client.
    Undeliverable,
}

impl From<QueryError> for Stop {
    fn from(e: QueryError) -> Self {
        Stop::Failed(e)
    }
}

/// An encoding failure, as the answer reports it.
fn encoding(e: arrow::error::ArrowError) -> Stop {
    Stop::Failed(QueryError::Internal(format!("encoding: {e}")))
}

/// A flushed buffer at least this full belongs to a large answer, whose next
/// buffer is reserved at a chunk's size.
const ROOMY_BYTES: usize = 64 * 1024;

/// The body being written: bytes buffered until a chunk is full, the first
/// send carrying the start of the answer.
struct Body<'a> {
    tx: &'a Sender,
    tracker: Option<&'a crate::engine::queries::Running>,
    kind: &'a str,
    buf: Vec<u8>,
    started: bool,
    /// Bytes queued so far (not counting `buf`).
    queued: u64,
}

impl Body<'_> {
    /// Bytes of the answer so far, queued or buffered.
    fn len(&self) -> u64 {
        self.queued + self.buf.len() as u64
    }

    /// Queues what is buffered once it fills a chunk.
    fn flush_full(&mut self) -> Result<(), Stop> {
        if self.buf.len() >= CHUNK_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    /// Queues what is buffered first if `more` bytes would not fit in the
    /// buffer's room: a buffer grown by reallocation copies all it holds
    /// (with batches of 125 KB and a chunk's buffer, once a chunk: 6% of
    /// the gateway's CPU on a 10M-row Arrow answer).
    fn make_room(&mut self, more: usize) -> Result<(), Stop> {
        if self.started && !self.buf.is_empty() && self.buf.capacity() - self.buf.len() < more {
            self.flush()?;
        }
        Ok(())
    }

    /// Appends `batch` encoded, with room made for `room` bytes first (the
    /// last batch's size); returns its size.
    fn encode(
        &mut self,
        encoder: &mut ResultEncoder,
        batch: &RecordBatch,
        room: usize,
    ) -> Result<usize, Stop> {
        self.make_room(room)?;
        let at = self.buf.len();
        encoder.batch(batch, &mut self.buf).map_err(encoding)?;
        Ok(self.buf.len() - at)
    }

    /// Queues what is buffered.
    fn flush(&mut self) -> Result<(), Stop> {
        // A large answer keeps a chunk's buffer; a small one starts empty.
        let next = if self.buf.len() >= ROOMY_BYTES {
            CHUNK_BYTES + 64 * 1024
        } else {
            0
        };
        let chunk = Bytes::from(std::mem::replace(&mut self.buf, Vec::with_capacity(next)));
        self.queued += chunk.len() as u64;
        let msg = if self.started {
            Msg::Data(chunk)
        } else {
            self.started = true;
            if let Some(t) = self.tracker {
                t.advance(crate::engine::queries::QueryState::Streaming);
            }
            Msg::Start {
                kind: self.kind.to_string(),
                first: chunk,
            }
        };
        if self.tx.send(msg) {
            Ok(())
        } else {
            Err(Stop::Undeliverable)
        }
    }
}

/// Steps through the result's batches and encodes them into `body`, within
/// the job's row, byte and value limits. `Ok(true)` when the result was read
/// to its end.
fn write_result(
    stmt: &mut duckdb::Statement<'_>,
    encoder: &mut ResultEncoder,
    columns: &[Column],
    body: &mut Body<'_>,
    job: &QueryJob,
    control: &QueryControl,
) -> Result<bool, Stop> {
    let mut rows: u64 = 0;
    let mut bytes: u64 = 0;
    let mut truncated = false;
    let rows_encoder = encoder.rows_encoder();
    let mut window: Vec<RecordBatch> = Vec::new();
    let mut serial_batches = 0usize;
    // The size of the last batch encoded serially: the room the next needs.
    let mut last_batch = 0usize;

    encoder.begin(columns, &mut body.buf).map_err(encoding)?;
    while let Some(batch) = next_batch(stmt, job, control)? {
        let Some((part, cut)) = within_limits(batch, rows, job)? else {
            truncated = true;
            break;
        };
        truncated = cut;
        let before = body.len();
        rows += part.num_rows() as u64;
        if let Some(t) = &job.tracker {
            t.rows.store(rows, std::sync::atomic::Ordering::Relaxed);
        }
        // Large results encode windows of batches on several threads (DuckDB
        // writes its own formats in parallel too); small ones stay serial.
        if rows_encoder.parallel() && serial_batches >= SERIAL_BATCHES {
            window.push(part);
            if window.len() < WINDOW_BATCHES && !truncated {
                continue;
            }
            encode_window(&rows_encoder, std::mem::take(&mut window), body)?;
        } else {
            serial_batches += 1;
            last_batch = body.encode(encoder, &part, last_batch)?;
        }
        bytes += body.len() - before;
        if truncated {
            break;
        }
        if bytes >= job.max_bytes {
            end_at_byte_limit(stmt, job)?;
            break;
        }
        // The first batch goes out at once (time to first byte); later ones
        // in chunks of CHUNK_BYTES.
        if !body.started || body.buf.len() >= CHUNK_BYTES {
            body.flush()?;
        }
        // A large Arrow answer encodes the rest on a thread of its own.
        if !rows_encoder.parallel()
            && serial_batches >= SERIAL_BATCHES
            && bytes >= PIPELINE_BYTES
            && body.tx.inline.is_none()
        {
            // `None`: no thread could be started; the rest stays here.
            if let Some(rest) = pipelined(stmt, encoder, body, job, control, rows, bytes)? {
                rows = rest.rows;
                truncated = rest.truncated;
                break;
            }
        }
    }
    if let Some(err) = cancel_error(control, job) {
        return Err(err.into());
    }
    if !window.is_empty() {
        encode_window(&rows_encoder, std::mem::take(&mut window), body)?;
    }
    let summary = Summary {
        row_count: rows,
        truncated,
        elapsed_ms: crate::engine::queries::elapsed_ms(job.started.elapsed()),
        retried: job.retried,
    };
    encoder.finish(summary, &mut body.buf).map_err(encoding)?;
    body.flush()?;
    Ok(!truncated)
}

/// Bytes of an Arrow answer after which (and its first [`SERIAL_BATCHES`])
/// the rest is encoded on a thread of its own.
const PIPELINE_BYTES: u64 = CHUNK_BYTES as u64;

/// Batches read ahead of the encoding thread.
const PIPELINE_DEPTH: usize = 2;

/// The rows of a pipelined answer, and whether the row limit cut it.
struct Rest {
    rows: u64,
    truncated: bool,
}

/// How the reading side of a pipelined answer stopped.
enum Read {
    /// At the result's end, or the query stopped (the caller checks).
    End,
    /// Told to by the encoding thread: the byte limit was reached.
    Told,
    /// After sending a batch the row limit cut.
    CutSent,
    /// At a batch with rows beyond the row limit, nothing of it sent.
    Beyond,
    /// A batch was refused (a value or row cap): it had rows.
    Refused(Stop),
    /// DuckDB failed to give the next batch.
    Failed(Stop),
    /// The encoding thread stopped taking batches (it failed).
    Closed,
}

/// The rest of a large Arrow answer, after `rows` rows and `bytes` bytes:
/// this thread (DuckDB's) reads and checks each batch, a second one encodes
/// and queues them, so IPC's copy of every buffer is not on the thread the
/// query runs on. For 10M rows (611 MB) that thread was the bound: 550 ms
/// of CPU for a 550 ms answer, about 70 ms of it the IPC encoding. The
/// answer is byte for byte the serial loop's, ended where and as it ends.
/// `Ok(None)`: no thread could be started and nothing was read; the serial
/// loop goes on.
fn pipelined(
    stmt: &mut duckdb::Statement<'_>,
    encoder: &mut ResultEncoder,
    body: &mut Body<'_>,
    job: &QueryJob,
    control: &QueryControl,
    mut rows: u64,
    bytes: u64,
) -> Result<Option<Rest>, Stop> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let over = AtomicBool::new(false);
    let (batches, received) = std::sync::mpsc::sync_channel::<RecordBatch>(PIPELINE_DEPTH);
    let ran = std::thread::scope(|scope| {
        let over = &over;
        let spawned = std::thread::Builder::new()
            .name("duckgate-encode".into())
            .spawn_scoped(scope, move || -> Result<bool, Stop> {
                let mut bytes = bytes;
                let mut last = 0usize;
                // A batch read after the byte limit was reached: dropped.
                let mut dropped = false;
                for part in received {
                    if over.load(Ordering::SeqCst) {
                        dropped = true;
                        continue;
                    }
                    last = body.encode(encoder, &part, last)?;
                    bytes += last as u64;
                    if bytes >= job.max_bytes {
                        over.store(true, Ordering::SeqCst);
                    } else if body.buf.len() >= CHUNK_BYTES {
                        body.flush()?;
                    }
                }
                Ok(dropped)
            });
        // Spawning failed (the process is out of threads): nothing was
        // sent, and the closure with its borrows is gone.
        let Ok(encoder_thread) = spawned else {
            return None;
        };
        let read = loop {
            if over.load(Ordering::SeqCst) {
                break Read::Told;
            }
            let batch = match next_batch(stmt, job, control) {
                Ok(Some(b)) => b,
                Ok(None) => break Read::End,
                Err(e) => break Read::Failed(e),
            };
            let (part, cut) = match within_limits(batch, rows, job) {
                Ok(Some(p)) => p,
                Ok(None) => break Read::Beyond,
                Err(e) => break Read::Refused(e),
            };
            rows += part.num_rows() as u64;
            if let Some(t) = &job.tracker {
                t.rows.store(rows, Ordering::Relaxed);
            }
            if batches.send(part).is_err() {
                break Read::Closed;
            }
            if cut {
                break Read::CutSent;
            }
        };
        drop(batches);
        let encoded = encoder_thread.join().unwrap_or_else(|_| {
            Err(encoding(arrow::error::ArrowError::ComputeError(
                "the encoding thread panicked".into(),
            )))
        });
        Some((read, encoded))
    });
    let Some((read, encoded)) = ran else {
        return Ok(None);
    };
    let done = |truncated| Ok(Some(Rest { rows, truncated }));
    // In the order the serial loop meets them: the encoding's failure, the
    // byte limit (after which it reads one batch more: rows there are
    // refused, an error there is not), then what reading met.
    let dropped = encoded?;
    if over.load(Ordering::SeqCst) {
        return match read {
            _ if dropped => Err(byte_cap(job).into()),
            // The byte limit was reached at the batch the row limit cut.
            Read::CutSent => done(true),
            Read::Beyond | Read::Refused(_) => Err(byte_cap(job).into()),
            Read::Told => {
                end_at_byte_limit(stmt, job)?;
                done(false)
            }
            Read::End | Read::Failed(_) | Read::Closed => done(false),
        };
    }
    match read {
        Read::Refused(stop) | Read::Failed(stop) => Err(stop),
        Read::CutSent | Read::Beyond => done(true),
        Read::End | Read::Told | Read::Closed => done(false),
    }
}

/// The executed statement's next batch with rows; `None` at its end or
/// once the query is stopped.
fn next_batch(
    stmt: &mut duckdb::Statement<'_>,
    job: &QueryJob,
    control: &QueryControl,
) -> Result<Option<RecordBatch>, Stop> {
    loop {
        if control.reason().is_some() {
            return Ok(None);
        }
        let batch = match stmt.step() {
            Ok(Some(sa)) => RecordBatch::from(&sa),
            Ok(None) => return Ok(None),
            Err(e) => return Err(run_error(&e, control, job).into()),
        };
        if batch.num_rows() > 0 {
            return Ok(Some(batch));
        }
    }
}

/// The part of `batch` within the row limit, after the `rows` already
/// written, and whether the limit cut it; `None` when the limit was reached
/// before it. A value over the value limit, or a cut the client did not
/// ask for (`rows`), is refused.
fn within_limits(
    batch: RecordBatch,
    rows: u64,
    job: &QueryJob,
) -> Result<Option<(RecordBatch, bool)>, Stop> {
    // One huge value would be copied again by every encoder: refuse it
    // before anything is buffered.
    if let Some(size) = oversized_value(&batch, job.max_value_bytes) {
        return Err(QueryError::ValueTooLarge {
            size,
            limit: job.max_value_bytes,
        }
        .into());
    }
    let Some((part, cut)) = within_row_limit(batch, rows, job.max_rows) else {
        if !job.rows_asked {
            return Err(row_cap(job).into());
        }
        return Ok(None);
    };
    if cut && !job.rows_asked {
        return Err(row_cap(job).into());
    }
    Ok(Some((part, cut)))
}

/// The answer reached the byte limit: cut there. Whether more rows existed
/// is unknown without reading them, so it is refused as truncated only if
/// one more row does.
fn end_at_byte_limit(stmt: &mut duckdb::Statement<'_>, job: &QueryJob) -> Result<(), Stop> {
    if let Ok(Some(sa)) = stmt.step() {
        if sa.len() > 0 {
            return Err(byte_cap(job).into());
        }
    }
    Ok(())
}

/// The row cap the client did not ask for (the gateway's or a role's).
pub(super) fn row_cap(job: &QueryJob) -> QueryError {
    QueryError::ResultCap {
        what: "rows",
        limit: job.max_rows,
        role: job.row_cap_role.clone(),
    }
}

/// The byte cap of an answer (the gateway's or a role's).
pub(super) fn byte_cap(job: &QueryJob) -> QueryError {
    QueryError::ResultCap {
        what: "bytes",
        limit: job.max_bytes,
        role: job.byte_cap_role.clone(),
    }
}

/// The part of `batch` that fits the row limit after `rows` rows, and
/// whether it was cut; `None` when no row fits.
pub(super) fn within_row_limit(
    batch: RecordBatch,
    rows: u64,
    max_rows: u64,
) -> Option<(RecordBatch, bool)> {
    let room = max_rows.saturating_sub(rows);
    if room == 0 {
        return None;
    }
    let take = (batch.num_rows() as u64).min(room) as usize;
    Some(if take < batch.num_rows() {
        (batch.slice(0, take), true)
    } else {
        (batch, false)
    })
}

/// The size of the first value in `batch` larger than `limit` bytes, looking
/// at variable-width columns (strings, blobs) by their offsets, and at a
/// one-row batch as a whole.
pub(super) fn oversized_value(batch: &RecordBatch, limit: u64) -> Option<u64> {
    use arrow::array::{AsArray, GenericByteArray};
    use arrow::datatypes::{ArrowNativeType, ByteArrayType, DataType};
    fn widest<T: ByteArrayType>(a: &GenericByteArray<T>) -> u64 {
        a.offsets()
            .windows(2)
            .map(|w| (w[1].as_usize() - w[0].as_usize()) as u64)
            .max()
            .unwrap_or(0)
    }
    for col in batch.columns() {
        let w = match col.data_type() {
            DataType::Utf8 => widest(col.as_string::<i32>()),
            DataType::LargeUtf8 => widest(col.as_string::<i64>()),
            DataType::Binary => widest(col.as_binary::<i32>()),
            DataType::LargeBinary => widest(col.as_binary::<i64>()),
            _ => 0,
        };
        if w > limit {
            return Some(w);
        }
    }
    if batch.num_rows() == 1 {
        let total = batch.get_array_memory_size() as u64;
        if total > limit {
            return Some(total);
        }
    }
    None
}
