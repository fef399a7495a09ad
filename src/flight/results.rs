//! One statement through `POST /query`'s machinery: a [`QueryJob`] in the
//! Arrow IPC format, registered (listed, cancellable, audited as
//! `api=flight`, or the label of the door that asks: `pg` for the
//! PostgreSQL door), run with the credential retry. Its answer reaches the
//! client as the engine wrote it: each IPC message of the stream becomes
//! one `FlightData` (the message's header and body, sliced from the
//! engine's buffer, not copied), and only a batch too large for one gRPC
//! message is decoded, cut and encoded again.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::writer::{
    CompressionContext, DictionaryTracker, IpcDataGenerator, IpcWriteOptions,
};
use arrow::ipc::MessageHeader;
use arrow_flight::{FlightData, SchemaAsIpc};
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;
use tonic::Status;

use crate::core::state::AppState;
use crate::encode::Format;
use crate::engine::execute::describe::{DescribeSlot, Described};
use crate::engine::queries::{Outcome, Registration, Running};
use crate::engine::Param;
use crate::flight::options::CallOptions;
use crate::flight::status;
use crate::identity::Identity;

/// The most bytes (header and body) a `FlightData` passed through may
/// hold: arrow-flight's own target for the messages it encodes, under the
/// 4 MiB that gRPC clients accept by default.
const MAX_FLIGHT_DATA: usize = 2 * 1024 * 1024;

/// A statement that ran: its schema known, its answer to come.
pub struct Started {
    /// The result's schema, as DuckDB's Arrow export gave it.
    pub schema: SchemaRef,
    /// The query's entry in the registry (for a cancel).
    pub running: Arc<Running>,
    /// The answer's IPC stream; an error ends it (a cap, the time limit,
    /// a cancel).
    pub answer: Answer,
}

/// Why a statement failed: the gateway's error (its problem: slug, DuckDB's
/// error class and place in the SQL) and the id of the query, where one was
/// registered. Flight answers it as a gRPC status; another door as its own
/// protocol's error.
#[derive(Debug)]
pub struct Failed {
    /// What went wrong.
    pub error: Box<crate::core::Error>,
    /// The query's id, once it was registered.
    pub query_id: Option<String>,
}

impl Failed {
    fn new(error: crate::core::Error, query_id: Option<&str>) -> Self {
        Self {
            error: Box::new(error),
            query_id: query_id.map(str::to_string),
        }
    }
}

impl From<Failed> for Status {
    fn from(f: Failed) -> Status {
        status::of_core(&f.error, f.query_id.as_deref())
    }
}

/// The IPC stream of a started statement, read as record batches or
/// passed through as Flight data.
pub struct Answer(Reader);

impl Answer {
    /// The answer as record batches, every message decoded.
    pub fn batches(self) -> BoxStream<'static, Result<RecordBatch, Status>> {
        self.records().map(|r| r.map_err(Status::from)).boxed()
    }

    /// The answer as record batches, an error as the gateway's.
    pub fn records(self) -> BoxStream<'static, Result<RecordBatch, Failed>> {
        futures::stream::unfold(self.0, |mut r| async move {
            r.next_batch().await.map(|b| (b, r))
        })
        .boxed()
    }

    /// The answer as Flight data: the schema, then each dictionary and
    /// batch message as the engine wrote it; a batch message past
    /// [`MAX_FLIGHT_DATA`] is cut into batches under it.
    pub fn flight_data(self) -> BoxStream<'static, Result<FlightData, Status>> {
        let reader = self.0;
        let mut out: VecDeque<FlightData> = VecDeque::new();
        if reader.schema.is_none() {
            // No schema message came (the stream ended first): a client
            // still gets one.
            let schema = reader.schema();
            out.push_back(SchemaAsIpc::new(&schema, &IpcWriteOptions::default()).into());
        }
        // An error ends the stream: nothing follows it.
        futures::stream::unfold(Some((reader, out)), |state| async move {
            let (mut r, mut out) = state?;
            loop {
                if let Some(d) = out.pop_front() {
                    return Some((Ok(d), Some((r, out))));
                }
                match r.next_message().await? {
                    Err(e) => return Some((Err(e.into()), None)),
                    Ok(m)
                        if m.kind == MessageHeader::RecordBatch
                            && m.header.len() + m.body.len() > MAX_FLIGHT_DATA =>
                    {
                        match r.cut(m) {
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
}

/// Runs `sql` with `params` for `auth` as `POST /query` would with the
/// call's `options` (else the default time limit and row cap): returns once
/// DuckDB has produced the schema (and usually the first rows), or its
/// error.
pub async fn start(
    state: &AppState,
    auth: &Identity,
    sql: String,
    params: Vec<Param>,
    options: CallOptions,
) -> Result<Started, Status> {
    open_for_work(state)?;
    start_as(state, "flight", auth, sql, params, options)
        .await
        .map_err(Status::from)
}

/// [`start`] for the door whose label `api` the registration (the audit
/// line, `GET /queries`) carries, through the one core
/// ([`crate::core::Core::run`]); an error is the gateway's.
pub async fn start_as(
    state: &AppState,
    api: &'static str,
    auth: &Identity,
    sql: String,
    params: Vec<Param>,
    options: CallOptions,
) -> Result<Started, Failed> {
    let mut request = crate::core::Request::new(api, sql);
    request.params = params;
    request.timeout_ms = options.timeout_ms;
    request.max_rows = options.max_rows;
    let ran = state
        .core()
        .run(auth, request, crate::core::Leave::Encoded(Format::Arrow))
        .await
        .map_err(|e| Failed::new(e, None))?;
    let running = ran.registration.running.clone();
    let id = running.id.clone();
    let mut reader = Reader {
        body: ran.output.body.into_stream(),
        buf: Bytes::new(),
        decoder: StreamDecoder::new(),
        ahead: VecDeque::new(),
        ready: VecDeque::new(),
        schema: None,
        registration: Some(ran.registration),
        id,
    };
    // Read until the schema is known: an empty result still has one.
    while reader.schema.is_none() {
        match reader.next_message().await {
            Some(Ok(m)) => reader.ahead.push_back(m),
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(Started {
        schema: reader.schema(),
        running,
        answer: Answer(reader),
    })
}

/// Describes `sql` for `auth` without running it: the guard and the
/// caller's grants as for [`start`], then DuckDB's prepare reports the
/// result's and the parameters' Arrow schemas. Listed, cancellable and
/// audited like a query (it binds the statement, which may read a file's
/// metadata), as `api=flight-describe`: ADBC prepares every statement it
/// executes, so each query through it is one description and one run.
pub async fn describe(
    state: &AppState,
    auth: &Identity,
    sql: String,
    options: CallOptions,
) -> Result<Described, Status> {
    open_for_work(state)?;
    describe_as(state, "flight-describe", auth, sql, options)
        .await
        .map_err(Status::from)
}

/// [`describe`] registered as `api`, through the one core; an error is
/// the gateway's.
pub async fn describe_as(
    state: &AppState,
    api: &'static str,
    auth: &Identity,
    sql: String,
    options: CallOptions,
) -> Result<Described, Failed> {
    let out = DescribeSlot::default();
    let mut request = crate::core::Request::new(api, sql);
    request.timeout_ms = options.timeout_ms;
    let ran = state
        .core()
        .run(auth, request, crate::core::Leave::Described(out.clone()))
        .await
        .map_err(|e| Failed::new(e, None))?;
    let registration = ran.registration;
    let id = registration.running.id.clone();
    // The body is empty; its end is the worker's.
    let mut ended = Ok(());
    let mut body = ran.output.body.into_stream();
    while let Some(chunk) = body.next().await {
        if let Err(e) = chunk {
            ended = Err(Failed::new(body_error(&e), Some(&id)));
            break;
        }
    }
    registration.running.set_outcome(Outcome {
        status: if ended.is_ok() { 200 } else { 500 },
        kind: if ended.is_ok() { "ok" } else { "failed" }.into(),
        error_class: None,
    });
    drop(registration);
    ended?;
    out.get().cloned().ok_or_else(|| {
        Failed::new(
            crate::core::Error::Internal("the statement was not described".into()),
            Some(&id),
        )
    })
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

/// The error that ended a result's body: the query's own where the engine
/// carried it, else an internal one.
fn body_error(e: &std::io::Error) -> crate::core::Error {
    match e
        .get_ref()
        .and_then(|i| i.downcast_ref::<crate::engine::QueryError>())
    {
        Some(q) => crate::core::Error::Query(q.clone()),
        None => crate::core::Error::Internal(e.to_string()),
    }
}

/// One message of the IPC stream: its flatbuffer header (with the
/// framing's padding) and its body, slices of the engine's buffer.
struct Message {
    kind: MessageHeader,
    /// The whole framed message, as the decoder reads it.
    framed: Bytes,
    header: Bytes,
    body: Bytes,
}

/// What the front of the buffer holds.
enum Frame {
    /// Not yet a whole message.
    Partial,
    /// The end-of-stream marker, `n` bytes.
    End(usize),
    /// A whole message.
    Message(Message),
}

/// Splits the IPC stream's next message off `buf`'s front, framed as the
/// streaming format frames it (the continuation token, the header's length,
/// the header, the body the header gives the length of).
fn frame(buf: &Bytes) -> Result<Frame, String> {
    let word = |at: usize| -> Option<[u8; 4]> { buf.get(at..at + 4)?.try_into().ok() };
    let Some(first) = word(0) else {
        return Ok(Frame::Partial);
    };
    // Before format 0.15 the length came without the continuation token.
    let (prefix, len) = if first == [0xFF; 4] {
        match word(4) {
            Some(len) => (8, i32::from_le_bytes(len)),
            None => return Ok(Frame::Partial),
        }
    } else {
        (4, i32::from_le_bytes(first))
    };
    let len = usize::try_from(len).map_err(|_| format!("a message length of {len}"))?;
    if len == 0 {
        return Ok(Frame::End(prefix));
    }
    let Some(header) = buf.get(prefix..prefix + len) else {
        return Ok(Frame::Partial);
    };
    let message = arrow::ipc::root_as_message(header).map_err(|e| e.to_string())?;
    let body_len = usize::try_from(message.bodyLength())
        .map_err(|_| format!("a body length of {}", message.bodyLength()))?;
    let end = prefix + len + body_len;
    if buf.len() < end {
        return Ok(Frame::Partial);
    }
    Ok(Frame::Message(Message {
        kind: message.header_type(),
        framed: buf.slice(..end),
        header: buf.slice(prefix..prefix + len),
        body: buf.slice(prefix + len..end),
    }))
}

/// Reads the IPC body message by message and keeps the query registered
/// until the body ends (the audit line then) or the reader is dropped.
struct Reader {
    body: BoxStream<'static, Result<bytes::Bytes, std::io::Error>>,
    /// What has arrived and is not yet a message.
    buf: Bytes,
    /// Decodes the messages whose values are read: the schema, the
    /// dictionaries, and the batches read as batches or cut.
    decoder: StreamDecoder,
    /// Messages read before they were asked for (the schema's).
    ahead: VecDeque<Message>,
    /// Batches decoded and not yet read.
    ready: VecDeque<RecordBatch>,
    /// The stream's schema, once its message came.
    schema: Option<SchemaRef>,
    registration: Option<Registration>,
    id: String,
}

impl Reader {
    /// The result's schema: the stream's, or none where it had none.
    fn schema(&self) -> SchemaRef {
        self.schema
            .clone()
            .unwrap_or_else(|| Arc::new(Schema::empty()))
    }

    /// The next message; the schema and the dictionaries are decoded on
    /// the way (a batch's values need them).
    async fn next_message(&mut self) -> Option<Result<Message, Failed>> {
        if let Some(m) = self.ahead.pop_front() {
            return Some(Ok(m));
        }
        loop {
            match frame(&self.buf) {
                Err(e) => {
                    return Some(Err(
                        self.fail_internal(format!("reading DuckDB's Arrow: {e}"))
                    ))
                }
                Ok(Frame::End(n)) => {
                    // The decoder holds a message with no body until more
                    // bytes come: the end marker is them.
                    let end = self.buf.split_to(n);
                    if let Err(e) = self.feed(end) {
                        return Some(Err(e));
                    }
                }
                Ok(Frame::Message(m)) => {
                    let _ = self.buf.split_to(m.framed.len());
                    if m.kind == MessageHeader::Schema {
                        // Read here: the decoder takes a message without a
                        // body only when the next one starts.
                        let schema = arrow::ipc::root_as_message(&m.header)
                            .ok()
                            .and_then(|h| h.header_as_schema())
                            .map(arrow::ipc::convert::fb_to_schema);
                        // `frame` read this header as a schema message.
                        self.schema = Some(Arc::new(schema.unwrap_or_else(Schema::empty)));
                    }
                    if m.kind != MessageHeader::RecordBatch {
                        if let Err(e) = self.feed(m.framed.clone()) {
                            return Some(Err(e));
                        }
                    }
                    return Some(Ok(m));
                }
                Ok(Frame::Partial) => match self.next_chunk().await {
                    Ok(Some(chunk)) if self.buf.is_empty() => self.buf = chunk,
                    Ok(Some(chunk)) => {
                        // A message across two chunks (the engine flushes
                        // whole messages, so this is rare): joined.
                        let mut joined = BytesMut::with_capacity(self.buf.len() + chunk.len());
                        joined.extend_from_slice(&self.buf);
                        joined.extend_from_slice(&chunk);
                        self.buf = joined.freeze();
                    }
                    Ok(None) if self.buf.is_empty() => return None,
                    Ok(None) => {
                        return Some(Err(
                            self.fail_internal("DuckDB's Arrow ended inside a message".into())
                        ))
                    }
                    Err(e) => return Some(Err(e)),
                },
            }
        }
    }

    /// Feeds whole messages to the decoder; the batches it decodes wait in
    /// `ready`.
    fn feed(&mut self, bytes: Bytes) -> Result<(), Failed> {
        let mut buffer = Buffer::from(bytes);
        while !buffer.is_empty() {
            match self.decoder.decode(&mut buffer) {
                Ok(Some(b)) => self.ready.push_back(b),
                Ok(None) => {}
                Err(e) => return Err(self.fail_internal(format!("reading DuckDB's Arrow: {e}"))),
            }
        }
        Ok(())
    }

    /// A batch message past [`MAX_FLIGHT_DATA`], decoded and cut into
    /// batches under it, each encoded with the dictionaries it needs.
    fn cut(&mut self, m: Message) -> Result<Vec<FlightData>, Failed> {
        let size = m.header.len() + m.body.len();
        self.feed(m.framed)?;
        let Some(batch) = self.ready.pop_front() else {
            return Ok(Vec::new());
        };
        let pieces = size.div_ceil(MAX_FLIGHT_DATA).max(1);
        let rows = batch.num_rows().div_ceil(pieces).max(1);
        let generator = IpcDataGenerator::default();
        let options = IpcWriteOptions::default();
        // The client holds the dictionaries the stream sent last, which
        // are this batch's own: sent again with the first piece, harmless.
        let mut dictionaries = DictionaryTracker::new(false);
        // Numbers the dictionaries as the schema message the client holds
        // did (the same schema, numbered in the same order).
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
                .map_err(|e| self.fail_internal(format!("cutting a batch: {e}")))?;
            out.extend(dicts.into_iter().map(FlightData::from));
            out.push(FlightData::from(encoded));
        }
        Ok(out)
    }

    /// The next chunk of the body, `None` at its end (the query's outcome
    /// is recorded then, or at its error).
    async fn next_chunk(&mut self) -> Result<Option<Bytes>, Failed> {
        let Some(reg) = &self.registration else {
            return Ok(None);
        };
        match self.body.next().await {
            Some(Ok(chunk)) => {
                reg.running
                    .bytes
                    .fetch_add(chunk.len() as u64, std::sync::atomic::Ordering::Relaxed);
                Ok(Some(chunk))
            }
            Some(Err(e)) => {
                let status = Failed::new(body_error(&e), Some(&self.id));
                if let Some(r) = self.registration.take() {
                    r.running.set_outcome(Outcome {
                        status: 200,
                        kind: "failed-while-streaming".into(),
                        error_class: None,
                    });
                }
                Err(status)
            }
            None => {
                if let Some(r) = self.registration.take() {
                    r.running.set_outcome(Outcome::ok());
                }
                Ok(None)
            }
        }
    }

    fn fail_internal(&mut self, cause: String) -> Failed {
        if let Some(r) = self.registration.take() {
            r.running.set_outcome(Outcome {
                status: 500,
                kind: "internal".into(),
                error_class: None,
            });
        }
        Failed::new(crate::core::Error::Internal(cause), Some(&self.id))
    }

    /// The next batch, an error that ends the result, or `None` at its end.
    async fn next_batch(&mut self) -> Option<Result<RecordBatch, Failed>> {
        loop {
            if let Some(b) = self.ready.pop_front() {
                return Some(Ok(b));
            }
            match self.next_message().await? {
                Err(e) => return Some(Err(e)),
                Ok(m) if m.kind == MessageHeader::RecordBatch => {
                    if let Err(e) = self.feed(m.framed) {
                        return Some(Err(e));
                    }
                }
                Ok(_) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, DictionaryArray, Int32Array, StringArray};
    use arrow::datatypes::Int32Type;

    use super::*;
    use crate::encode::ipc::IpcStream;

    fn batches() -> Vec<RecordBatch> {
        let make = |ids: Vec<i32>, keys: Vec<&str>| {
            let d: DictionaryArray<Int32Type> = keys.into_iter().collect();
            RecordBatch::try_from_iter([
                ("id", Arc::new(Int32Array::from(ids)) as ArrayRef),
                ("k", Arc::new(d) as ArrayRef),
                (
                    "s",
                    Arc::new(StringArray::from(vec![Some("x"), None])) as ArrayRef,
                ),
            ])
            .unwrap()
        };
        vec![
            make(vec![1, 2], vec!["a", "b"]),
            make(vec![3, 4], vec!["c", "a"]),
        ]
    }

    /// The engine's stream, cut message by message as the listener cuts it:
    /// each message's header and body as one `FlightData` decode to the
    /// batches written, dictionaries included; a stream cut short is
    /// `Partial`, never a message.
    #[test]
    fn the_engines_messages_pass_through_as_flight_data() {
        let written = batches();
        let mut out = Vec::new();
        let mut w = IpcStream::begin(&written[0].schema(), None, &mut out).unwrap();
        for b in &written {
            w.batch(b, &mut out).unwrap();
        }
        w.finish(&mut out);
        let mut buf = Bytes::from(out);
        let mut kinds = Vec::new();
        let mut data = Vec::new();
        loop {
            match frame(&buf).unwrap() {
                Frame::Message(m) => {
                    for cut in [0, 3, 7, m.framed.len() - 1] {
                        assert!(matches!(frame(&buf.slice(..cut)).unwrap(), Frame::Partial));
                    }
                    let _ = buf.split_to(m.framed.len());
                    kinds.push(m.kind);
                    data.push(FlightData {
                        flight_descriptor: None,
                        data_header: m.header,
                        app_metadata: Bytes::new(),
                        data_body: m.body,
                    });
                }
                Frame::End(n) => {
                    assert_eq!(n, buf.len());
                    break;
                }
                Frame::Partial => panic!("a whole stream ended inside a message"),
            }
        }
        assert_eq!(kinds[0], MessageHeader::Schema);
        assert_eq!(
            kinds
                .iter()
                .filter(|k| **k == MessageHeader::DictionaryBatch)
                .count(),
            2
        );
        let decoded = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
            futures::stream::iter(data.into_iter().map(Ok)),
        );
        let read: Vec<RecordBatch> =
            futures::executor::block_on(decoded.map(Result::unwrap).collect());
        assert_eq!(read, written);
    }
}
