//! The query protocols: a simple `Query` and the extended protocol's
//! `Parse`/`Bind`/`Describe`/`Execute` become statements run through the
//! backend; their Arrow answer goes back as `RowDescription` and `DataRow`s
//! (or `CopyData` for `COPY ... TO STDOUT`), a batch at a time
//! ([`bulk`]); session commands are answered from the session.
//!
//! The door sends answers itself where pgwire's defaults would cost per row
//! or hold a whole result: a simple query's statements are each sent before
//! the next starts, a COPY sends many rows per `CopyData` and counts them in
//! its `COPY n` tag, and an `Execute` that asks for every row streams them
//! (pgwire's collects them all before sending the first).

mod extended;
mod simple;

use std::fmt::Debug;
use std::sync::Arc;

use futures::stream::{self, BoxStream, StreamExt};
use futures::{Sink, SinkExt};
use pgwire::api::portal::PortalExecutionState;
use pgwire::api::query::{send_execution_response, send_query_response};
use pgwire::api::results::{DataRowEncoder, FieldFormat, FieldInfo, QueryResponse, Response, Tag};
use pgwire::api::store::{Entry, PortalStore};
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState, Type, DEFAULT_NAME};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::{CopyData, CopyDone, CopyOutResponse};
use pgwire::messages::data::DataRow;
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::response::{EmptyQueryResponse, TransactionStatus};
use pgwire::messages::PgWireBackendMessage;

use crate::pg::backend::{self, Started};
use crate::pg::bulk::{self, CopyLines, DataRows};
use crate::pg::compat;
use crate::pg::errors::{self, code};
use crate::pg::keys;
use crate::pg::session::{self, Command, Copy, Session};
use crate::pg::types;
use crate::pg::Door;

pub use extended::Parser;
use extended::{key, params};

/// A statement parsed by `Parse`: its text, what it asks of the door, and
/// the parameter types a `Describe` found (for the binds that follow).
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What the statement asks.
    pub command: Arc<Command>,
    /// Parameter types from the statement's description.
    described: Arc<std::sync::Mutex<Option<Vec<Type>>>>,
}

/// Handles both query protocols.
pub struct Queries {
    pub(crate) door: Arc<Door>,
}

/// The session of an authenticated connection.
fn session<C: ClientInfo>(client: &C) -> PgWireResult<Arc<Session>> {
    client.session_extensions().get::<Session>().ok_or_else(|| {
        errors::fatal(
            code::PROTOCOL,
            "no session: the connection did not authenticate",
        )
    })
}

/// The rows of an answer as `DataRow`s, each column in `formats`.
fn rows(
    answer: backend::Answer,
    fields: Arc<Vec<FieldInfo>>,
    sql: Arc<str>,
    session: Arc<Session>,
) -> BoxStream<'static, PgWireResult<DataRow>> {
    let running = RunningGuard(session);
    let mut encoder = DataRows::new(fields);
    backend::batches(answer)
        .flat_map(move |batch| {
            let _keep = &running;
            let rows = match batch {
                Ok(b) => encoder.batch(&b),
                Err(f) => Err(errors::of_problem(&f.problem, &sql)),
            };
            match rows {
                Ok(rows) => stream::iter(rows.into_iter().map(Ok)).boxed(),
                Err(e) => stream::iter([Err(e)]).boxed(),
            }
        })
        .boxed()
}

/// Clears the session's running statement when its answer ends.
struct RunningGuard(Arc<Session>);

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.0.running(None);
    }
}

impl Queries {
    /// `sql` as DuckDB runs it: PostgreSQL's catalog spellings rewritten
    /// ([`compat`]), with the keys the identity may see where the
    /// statement reads them ([`keys`]).
    async fn catalog_text<'a>(
        &self,
        session: &Arc<Session>,
        sql: &'a str,
    ) -> PgWireResult<std::borrow::Cow<'a, str>> {
        // BI tools' spellings first, `current_setting` answered from the
        // session's own settings ([`compat::tools`]).
        let setting = |name: &str| session.get(name, &self.door.defaults);
        if let std::borrow::Cow::Owned(text) = compat::tools(sql, &setting) {
            let keyed = self.keyed_text(session, &text).await?;
            return Ok(std::borrow::Cow::Owned(keyed.into_owned()));
        }
        self.keyed_text(session, sql).await
    }

    /// [`Self::catalog_text`] after the tools' spellings.
    async fn keyed_text<'a>(
        &self,
        session: &Arc<Session>,
        sql: &'a str,
    ) -> PgWireResult<std::borrow::Cow<'a, str>> {
        if !keys::needed(sql) {
            return Ok(compat::rewrite(sql));
        }
        let found = backend::keys(&self.door.state, &session.identity)
            .await
            .map_err(|f| errors::of_problem(&f.problem, sql))?;
        let relation = keys::relation(&found);
        Ok(std::borrow::Cow::Owned(
            compat::rewrite_with(sql, Some(&relation)).into_owned(),
        ))
    }

    /// Starts a statement for the session, recording it as running.
    async fn start(
        &self,
        session: &Arc<Session>,
        sql: &str,
        params: Vec<backend::Param>,
    ) -> PgWireResult<Started> {
        let timeout = session.statement_timeout_ms();
        let text = self.catalog_text(session, sql).await?;
        let started = backend::start(
            &self.door.state,
            &session.identity,
            text.to_string(),
            params,
            timeout,
        )
        .await
        .map_err(|f| errors::of_problem(&f.problem, &text))?;
        session.running(Some(started.running.clone()));
        Ok(started)
    }

    /// The answer of a started statement: rows, or a tag for a statement
    /// that changed something (DuckDB answers those with a `Count`).
    async fn answer(
        &self,
        started: Started,
        sql: &str,
        session: &Arc<Session>,
        format: impl Fn(usize) -> FieldFormat,
    ) -> PgWireResult<Response> {
        let tag = tag_of(sql);
        if !matches!(tag, "SELECT" | "SHOW" | "EXPLAIN") {
            // A statement that changes something: its tag, with DuckDB's
            // count of the rows it changed.
            let counted =
                started.schema.fields().len() == 1 && started.schema.field(0).name() == "Count";
            let _running = RunningGuard(session.clone());
            let mut batches = backend::batches(started.answer);
            let mut n = 0i64;
            while let Some(b) = batches.next().await {
                let b = b.map_err(|f| errors::of_problem(&f.problem, sql))?;
                if counted {
                    if let Some(c) = b
                        .column(0)
                        .as_any()
                        .downcast_ref::<arrow::array::Int64Array>()
                    {
                        n += c.iter().flatten().sum::<i64>();
                    }
                }
            }
            let t = match tag {
                "INSERT" => Tag::new(tag).with_oid(0).with_rows(n.max(0) as usize),
                "UPDATE" | "DELETE" => Tag::new(tag).with_rows(n.max(0) as usize),
                _ => Tag::new(tag),
            };
            return Ok(Response::Execution(t));
        }
        let fields = Arc::new(types::fields(&started.schema, format));
        let mut response = QueryResponse::new(
            fields.clone(),
            rows(started.answer, fields, sql.into(), session.clone()),
        );
        response.set_command_tag(tag);
        Ok(Response::Query(response))
    }

    /// The door's answer to a session command; `None` for DuckDB's work.
    fn command(
        &self,
        session: &Session,
        command: &Command,
        format: impl Fn(usize) -> FieldFormat,
    ) -> PgWireResult<Option<Response>> {
        Ok(Some(match command {
            Command::Query(_) | Command::CopyOut(_) => return Ok(None),
            Command::Begin => Response::TransactionStart(Tag::new("BEGIN")),
            Command::End(tag) => Response::TransactionEnd(Tag::new(tag)),
            Command::Noop(tag) => Response::Execution(Tag::new(tag)),
            Command::Set(name, value) => {
                session.set(name, value.as_deref())?;
                Response::Execution(Tag::new(if value.is_some() { "SET" } else { "RESET" }))
            }
            Command::ResetAll => {
                session.reset_all();
                Response::Execution(Tag::new("RESET"))
            }
            Command::Show(name) => {
                let value = session.get(name, &self.door.defaults).unwrap_or_default();
                let column = session::setting(name).map_or(name.as_str(), |s| s.name);
                one_value(&column.to_ascii_lowercase(), value, format(0))?
            }
            Command::Fixed(column, session::Answer::Version) => one_value(
                column,
                format!(
                    "PostgreSQL {} (duckgate {}, DuckDB {})",
                    self.door.defaults.server_version,
                    env!("CARGO_PKG_VERSION"),
                    backend::duckdb_version(&self.door.state)
                ),
                format(0),
            )?,
            Command::Unsupported(why) => return Err(errors::error(code::NOT_SUPPORTED, *why)),
        }))
    }

    /// `COPY (query) TO STDOUT`, sent to `client`: the header line (CSV's
    /// `HEADER`) and each row in PostgreSQL's text format or CSV, a
    /// `CopyData` each (as PostgreSQL sends them), written a batch at a
    /// time, then `COPY n` with the rows sent. An error after the copy began
    /// is returned (the client reads an `ErrorResponse`, never a
    /// `CopyDone`).
    async fn send_copy<C>(
        &self,
        client: &mut C,
        session: &Arc<Session>,
        copy: &Copy,
    ) -> PgWireResult<()>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let started = self.start(session, &copy.query, Vec::new()).await?;
        let _running = RunningGuard(session.clone());
        let columns = started.schema.fields().len();
        let header = copy.header.then(|| {
            let names: Vec<String> = started
                .schema
                .fields()
                .iter()
                .map(|f| bulk::csv_field(f.name(), copy.delimiter))
                .collect();
            let mut line = names.join(&copy.delimiter.to_string());
            line.push('\n');
            line
        });
        let fields = Arc::new(types::fields(&started.schema, |_| FieldFormat::Text));
        let mut lines = CopyLines::new(copy, fields);
        let width = i16::try_from(columns).unwrap_or(i16::MAX);
        client
            .feed(PgWireBackendMessage::CopyOutResponse(CopyOutResponse::new(
                0,
                width,
                vec![0; columns],
            )))
            .await?;
        if let Some(h) = header {
            client
                .feed(PgWireBackendMessage::CopyData(CopyData::new(
                    h.into_bytes().into(),
                )))
                .await?;
        }
        let mut batches = backend::batches(started.answer);
        let mut rows = 0usize;
        let mut ends = Vec::new();
        while let Some(batch) = batches.next().await {
            let batch = batch.map_err(|f| errors::of_problem(&f.problem, &copy.query))?;
            let mut out = lines.buffer();
            ends.clear();
            lines.batch(&batch, &mut out, &mut ends)?;
            let out = out.freeze();
            let mut start = 0;
            for &end in &ends {
                client
                    .feed(PgWireBackendMessage::CopyData(CopyData::new(
                        out.slice(start..end),
                    )))
                    .await?;
                start = end;
            }
            rows += ends.len();
        }
        client
            .feed(PgWireBackendMessage::CopyDone(CopyDone::new()))
            .await?;
        client
            .feed(PgWireBackendMessage::CommandComplete(
                Tag::new("COPY").with_rows(rows).into(),
            ))
            .await?;
        Ok(())
    }

    /// Runs one statement of a simple query: its answer to send, or
    /// `None` where it was sent (a COPY).
    async fn simple<C>(
        &self,
        client: &mut C,
        session: &Arc<Session>,
        sql: &str,
    ) -> PgWireResult<Option<Response>>
    where
        C: Sink<PgWireBackendMessage> + Unpin + Send,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let command = session::classify(sql);
        if let Some(r) = self.command(session, &command, |_| FieldFormat::Text)? {
            return Ok(Some(r));
        }
        match &command {
            Command::CopyOut(copy) => {
                self.send_copy(client, session, copy).await?;
                Ok(None)
            }
            _ => {
                let started = self.start(session, sql, Vec::new()).await?;
                let response = self
                    .answer(started, sql, session, |_| FieldFormat::Text)
                    .await?;
                Ok(Some(response))
            }
        }
    }

    /// An `Execute` of every row of a portal not yet run: its answer
    /// streamed to `client`; `false` where pgwire's own handling fits (a
    /// portal read in parts, one already run, a session command).
    async fn execute_whole<C>(&self, client: &mut C, message: &Execute) -> PgWireResult<bool>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Ok(false);
        }
        let name = message.name.as_deref().unwrap_or(DEFAULT_NAME);
        let Some(Entry::Value(portal)) = client.portal_store().get_portal(name) else {
            return Ok(false);
        };
        let command = portal.statement.statement.command.clone();
        let whole = match command.as_ref() {
            Command::CopyOut(_) => true,
            Command::Query(_) => message.max_rows == 0,
            _ => false,
        };
        if !whole || !matches!(*portal.state().lock().await, PortalExecutionState::Initial) {
            return Ok(false);
        }
        client.set_state(PgWireConnectionState::QueryInProgress);
        let session = session(client)?;
        let pending = session.pending.lock().await.take();
        match command.as_ref() {
            Command::CopyOut(copy) => self.send_copy(client, &session, copy).await?,
            Command::Query(sql) => {
                let started = match pending {
                    Some((k, started)) if k == key(&portal) => started,
                    _ => self.start(&session, sql, params(&portal)?).await?,
                };
                let format = |i: usize| portal.result_column_format.format_for(i);
                match self.answer(started, sql, &session, format).await? {
                    Response::Query(q) => send_query_response(client, q, false).await?,
                    Response::Execution(tag) => send_execution_response(client, tag).await?,
                    _ => {}
                }
            }
            _ => {}
        }
        // Run to its end: an `Execute` again reads no rows, as from
        // PostgreSQL.
        portal
            .start(QueryResponse::new(Arc::new(Vec::new()), stream::empty()))
            .await;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(true)
    }
}

/// Sends one answer of a simple query as pgwire would; the transaction
/// status after it.
async fn send<C>(
    client: &mut C,
    response: Response,
    status: TransactionStatus,
) -> PgWireResult<TransactionStatus>
where
    C: Sink<PgWireBackendMessage> + Unpin + Send,
    C::Error: Debug,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    Ok(match response {
        Response::EmptyQuery => {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
            status
        }
        Response::Query(q) => {
            send_query_response(client, q, true).await?;
            status
        }
        Response::Execution(tag) => {
            send_execution_response(client, tag).await?;
            status
        }
        Response::TransactionStart(tag) => {
            send_execution_response(client, tag).await?;
            status.to_in_transaction_state()
        }
        Response::TransactionEnd(tag) => {
            send_execution_response(client, tag).await?;
            status.to_idle_state()
        }
        Response::Error(e) => {
            client
                .feed(PgWireBackendMessage::ErrorResponse((*e).into()))
                .await?;
            status.to_error_state()
        }
        // The door sends its COPY itself and takes no data in.
        Response::CopyIn(_) | Response::CopyOut(_) | Response::CopyBoth(_) => {
            return Err(errors::error(code::PROTOCOL, "an unexpected COPY answer"))
        }
    })
}

/// A one-row, one-column text answer.
fn one_value(column: &str, value: String, format: FieldFormat) -> PgWireResult<Response> {
    let fields = Arc::new(vec![FieldInfo::new(
        column.to_string(),
        None,
        None,
        Type::TEXT,
        format,
    )]);
    let mut encoder = DataRowEncoder::new(fields.clone());
    encoder.encode_field(&value)?;
    let row = encoder.take_row();
    let mut r = QueryResponse::new(fields, stream::iter([Ok(row)]));
    r.set_command_tag("SHOW");
    Ok(Response::Query(r))
}

/// The command tag of a statement's answer: its first word (`SELECT`,
/// `SHOW`, `WITH` answers as `SELECT`).
fn tag_of(sql: &str) -> &'static str {
    let first = sql
        .trim_start()
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or_default()
        .to_ascii_uppercase();
    match first.as_str() {
        "SHOW" | "DESCRIBE" | "SUMMARIZE" => "SHOW",
        "EXPLAIN" => "EXPLAIN",
        "INSERT" => "INSERT",
        "UPDATE" => "UPDATE",
        "DELETE" => "DELETE",
        "CREATE" => "CREATE",
        "DROP" => "DROP",
        "ALTER" => "ALTER",
        "ATTACH" | "DETACH" | "USE" | "SET" | "RESET" | "CHECKPOINT" | "LOAD" | "INSTALL" => "SET",
        _ => "SELECT",
    }
}
