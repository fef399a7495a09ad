//! A statement's answer as Arrow, for a door that translates record batches
//! into its own protocol (Flight SQL, the PostgreSQL wire protocol): the
//! statement runs through [`crate::core::Core::run`] as a job in the Arrow
//! IPC format (registered, listed in `GET /queries`, cancellable, audited
//! with the door's label, the credential retry), and its answer is read
//! message by message, as the engine wrote it. A door that passes messages
//! through (Flight) takes [`Answer::next_message`]; one that converts
//! values takes [`Answer::records`]. Nothing here knows a protocol: an
//! error is a [`Failed`], which each door translates.

use std::collections::VecDeque;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::buffer::Buffer;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::reader::StreamDecoder;
use arrow::ipc::MessageHeader;
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::core::state::AppState;
use crate::encode::Format;
use crate::engine::execute::describe::{DescribeSlot, Described};
use crate::engine::queries::{Outcome, Registration, Running};
use crate::engine::Param;
use crate::identity::Identity;

/// What a door's call asked for, as `POST /query`'s `timeout_ms` and
/// `max_rows`; `None`: the gateway's default.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options {
    /// `timeout_ms`: the query's time limit (clamped to the gateway's and
    /// the roles').
    pub timeout_ms: Option<u64>,
    /// `max_rows`: the rows wanted (a cut there is the client's, a clean
    /// end).
    pub max_rows: Option<u64>,
}

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
/// registered. Each door answers it as its protocol's error.
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

/// The IPC stream of a started statement, read as record batches or
/// message by message. It keeps the query registered until the stream
/// ends (the audit line then) or the answer is dropped.
pub struct Answer(Reader);

impl Answer {
    /// The answer as record batches, every message decoded; an error ends
    /// the stream.
    pub fn records(self) -> BoxStream<'static, Result<RecordBatch, Failed>> {
        futures::stream::unfold(self.0, |mut r| async move {
            r.next_batch().await.map(|b| (b, r))
        })
        .boxed()
    }

    /// Whether the stream's schema message came (an answer whose stream
    /// ended first has none).
    pub fn has_schema_message(&self) -> bool {
        self.0.schema.is_some()
    }

    /// The result's schema: the stream's, or an empty one where it had none.
    pub fn schema(&self) -> SchemaRef {
        self.0.schema()
    }

    /// The next message as the engine wrote it; the schema and the
    /// dictionaries are decoded on the way (a batch's values need them).
    /// `None` at the stream's end; an error ends it.
    pub async fn next_message(&mut self) -> Option<Result<Message, Failed>> {
        self.0.next_message().await
    }

    /// A record batch message's batch, decoded (with the dictionaries
    /// that came before it).
    pub fn decode(&mut self, m: Message) -> Result<Option<RecordBatch>, Failed> {
        self.0.feed(m.framed)?;
        Ok(self.0.ready.pop_front())
    }

    /// Ends the answer with an internal error the door met (its cause goes
    /// to the log where the door logs it): the query's outcome is recorded.
    pub fn fail_internal(&mut self, cause: String) -> Failed {
        self.0.fail_internal(cause)
    }
}

/// Runs `sql` with `params` for `auth` as `POST /query` would with the
/// call's `options` (else the default time limit and row cap), registered
/// as the door `api` (the audit line, `GET /queries`), through the one
/// core ([`crate::core::Core::run`]): returns once DuckDB has produced the
/// schema (and usually the first rows), or its error.
pub async fn start(
    state: &AppState,
    api: &'static str,
    auth: &Identity,
    sql: String,
    params: Vec<Param>,
    options: Options,
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
/// audited like a query as the door `api` (it binds the statement, which
/// may read a file's metadata).
pub async fn describe(
    state: &AppState,
    api: &'static str,
    auth: &Identity,
    sql: String,
    options: Options,
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
pub struct Message {
    /// What the message holds (a schema, a dictionary, a record batch).
    pub kind: MessageHeader,
    /// The whole framed message, as the decoder reads it.
    framed: Bytes,
    /// The flatbuffer header, with the framing's padding.
    pub header: Bytes,
    /// The body the header describes.
    pub body: Bytes,
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

    /// The engine's stream, cut message by message as the reader cuts it:
    /// each message's header and body are exactly the framed message's
    /// (what a door passes through as they are), the messages decode to
    /// the batches written, dictionaries included; a stream cut short is
    /// `Partial`, never a message.
    #[test]
    fn the_engines_stream_is_cut_into_whole_messages() {
        let written = batches();
        let mut out = Vec::new();
        let mut w = IpcStream::begin(&written[0].schema(), None, &mut out).unwrap();
        for b in &written {
            w.batch(b, &mut out).unwrap();
        }
        w.finish(&mut out);
        let mut buf = Bytes::from(out);
        let mut kinds = Vec::new();
        let mut decoder = StreamDecoder::new();
        let mut read = Vec::new();
        loop {
            match frame(&buf).unwrap() {
                Frame::Message(m) => {
                    for cut in [0, 3, 7, m.framed.len() - 1] {
                        assert!(matches!(frame(&buf.slice(..cut)).unwrap(), Frame::Partial));
                    }
                    let _ = buf.split_to(m.framed.len());
                    kinds.push(m.kind);
                    let mut whole = vec![0xFF; 4];
                    whole.extend_from_slice(&(m.header.len() as i32).to_le_bytes());
                    whole.extend_from_slice(&m.header);
                    whole.extend_from_slice(&m.body);
                    assert_eq!(whole, m.framed.to_vec());
                    let mut b = Buffer::from(m.framed);
                    while !b.is_empty() {
                        if let Some(batch) = decoder.decode(&mut b).unwrap() {
                            read.push(batch);
                        }
                    }
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
        assert_eq!(read, written);
    }
}
