//! One statement through the core ([`crate::core::answer`]), answered as
//! Flight: registered as `api=flight` (or `flight-describe`), its answer
//! reaches the client as the engine wrote it: each IPC message of the
//! stream becomes one `FlightData` (the message's header and body, sliced
//! from the engine's buffer, not copied), and only a batch too large for
//! one gRPC message is decoded, cut and encoded again.

use std::collections::VecDeque;

use arrow::array::RecordBatch;
use arrow::ipc::writer::{
    CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions,
};
use arrow::ipc::MessageHeader;
use arrow_flight::{FlightData, SchemaAsIpc};
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::Status;

use crate::core::answer::{self, Answer, Failed, Message};
use crate::core::state::AppState;
use crate::engine::execute::describe::Described;
use crate::engine::Param;
use crate::flight::options::CallOptions;
use crate::flight::status;
use crate::identity::Identity;

pub use crate::core::answer::Started;

/// The most bytes (header and body) a `FlightData` passed through may
/// hold: arrow-flight's own target for the messages it encodes, under the
/// 4 MiB that gRPC clients accept by default.
const MAX_FLIGHT_DATA: usize = 2 * 1024 * 1024;

impl From<Failed> for Status {
    fn from(f: Failed) -> Status {
        status::of_core(&f.error, f.query_id.as_deref())
    }
}

/// The answer as record batches, every message decoded.
pub fn batches(answer: Answer) -> BoxStream<'static, Result<RecordBatch, Status>> {
    answer.records().map(|r| r.map_err(Status::from)).boxed()
}

/// The answer as Flight data: the schema, then each dictionary and batch
/// message as the engine wrote it; a batch message past
/// [`MAX_FLIGHT_DATA`] is cut into batches under it.
pub fn flight_data(answer: Answer) -> BoxStream<'static, Result<FlightData, Status>> {
    let mut out: VecDeque<FlightData> = VecDeque::new();
    if !answer.has_schema_message() {
        // No schema message came (the stream ended first): a client still
        // gets one.
        let schema = answer.schema();
        out.push_back(SchemaAsIpc::new(&schema, &IpcWriteOptions::default()).into());
    }
    // An error ends the stream: nothing follows it.
    futures::stream::unfold(Some((answer, out)), |state| async move {
        let (mut a, mut out) = state?;
        loop {
            if let Some(d) = out.pop_front() {
                return Some((Ok(d), Some((a, out))));
            }
            match a.next_message().await? {
                Err(e) => return Some((Err(e.into()), None)),
                Ok(m)
                    if m.kind == MessageHeader::RecordBatch
                        && m.header.len() + m.body.len() > MAX_FLIGHT_DATA =>
                {
                    match cut(&mut a, m) {
                        Ok(pieces) => out.extend(pieces),
                        Err(e) => return Some((Err(e.into()), None)),
                    }
                }
                Ok(m) => out.push_back(FlightData {
                    flight_descriptor: None,
                    data_header: m.header,
                    app_metadata: Bytes::new(),
                    data_body: m.body,
                }),
            }
        }
    })
    .boxed()
}

/// A batch message past [`MAX_FLIGHT_DATA`], decoded and cut into batches
/// under it, each encoded with the dictionaries it needs.
fn cut(answer: &mut Answer, m: Message) -> Result<Vec<FlightData>, Failed> {
    let size = m.header.len() + m.body.len();
    let Some(batch) = answer.decode(m)? else {
        return Ok(Vec::new());
    };
    let pieces = size.div_ceil(MAX_FLIGHT_DATA).max(1);
    let rows = batch.num_rows().div_ceil(pieces).max(1);
    let generator = IpcDataGenerator::default();
    let options = IpcWriteOptions::default();
    // The client holds the dictionaries the stream sent last, which are
    // this batch's own: sent again with the first piece, harmless.
    let mut dictionaries = DictionaryTracker::new(false);
    // Numbers the dictionaries as the schema message the client holds did
    // (the same schema, numbered in the same order).
    let _ = generator.schema_to_bytes_with_dictionary_tracker(
        &batch.schema(),
        &mut dictionaries,
        &options,
    );
    let mut compression = CompressionContext::default();
    let mut out = Vec::new();
    let mut offset = 0;
    while offset < batch.num_rows() {
        let piece = batch.slice(offset, rows.min(batch.num_rows() - offset));
        offset += piece.num_rows();
        let (dicts, encoded) = generator
            .encode(&piece, &mut dictionaries, &options, &mut compression)
            .map_err(|e| answer.fail_internal(format!("cutting a batch: {e}")))?;
        out.extend(dicts.into_iter().map(FlightData::from));
        out.push(FlightData::from(encoded));
    }
    Ok(out)
}

/// Runs `sql` with `params` for `auth` as `POST /query` would with the
/// call's `options` (else the default time limit and row cap), registered
/// as `api=flight`: returns once DuckDB has produced the schema (and
/// usually the first rows), or its error.
pub async fn start(
    state: &AppState,
    auth: &Identity,
    sql: String,
    params: Vec<Param>,
    options: CallOptions,
) -> Result<Started, Status> {
    open_for_work(state)?;
    answer::start(state, "flight", auth, sql, params, options)
        .await
        .map_err(Status::from)
}

/// Describes `sql` for `auth` without running it ([`answer::describe`]),
/// audited as `api=flight-describe`: ADBC prepares every statement it
/// executes, so each query through it is one description and one run.
pub async fn describe(
    state: &AppState,
    auth: &Identity,
    sql: String,
    options: CallOptions,
) -> Result<Described, Status> {
    open_for_work(state)?;
    answer::describe(state, "flight-describe", auth, sql, options)
        .await
        .map_err(Status::from)
}

/// No new statement while the gateway drains, as HTTP's `/query` and
/// `/statements` take none (503 `shutting-down`): UNAVAILABLE with the
/// problem and its retry hint, so a client retries elsewhere. What runs
/// finishes and its result is fetched (the drain waits for it).
fn open_for_work(state: &AppState) -> Result<(), Status> {
    if state
        .health
        .shutting_down
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        return Err(status::of_query(
            crate::engine::QueryError::ShuttingDown,
            None,
        ));
    }
    Ok(())
}
