//! The query protocols: a simple `Query` and the extended protocol's
//! `Parse`/`Bind`/`Describe`/`Execute` become statements run through the
//! backend; their Arrow answer goes back as `RowDescription` and `DataRow`s
//! (or `CopyData` for `COPY ... TO STDOUT`); session commands are answered
//! from the session.

use std::fmt::Debug;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch};
use async_trait::async_trait;
use bytes::{BufMut, BytesMut};
use futures::stream::{self, BoxStream, StreamExt};
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::results::{
    CopyResponse, DataRowEncoder, DescribePortalResponse, DescribeResponse as _,
    DescribeStatementResponse, FieldFormat, FieldInfo, QueryResponse, Response, Tag,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::copy::CopyData;
use pgwire::messages::data::DataRow;
use pgwire::messages::PgWireBackendMessage;

use crate::pg::backend::{self, Started};
use crate::pg::compat;
use crate::pg::errors::{self, code};
use crate::pg::keys;
use crate::pg::session::{self, Command, Copy, Session};
use crate::pg::types;
use crate::pg::Door;

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
    backend::batches(answer)
        .flat_map(move |batch| {
            let _keep = &running;
            let rows = match batch {
                Ok(b) => encode_rows(&b, &fields),
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

fn encode_rows(batch: &RecordBatch, fields: &Arc<Vec<FieldInfo>>) -> PgWireResult<Vec<DataRow>> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(types::plain)
        .collect::<Result<_, _>>()
        .map_err(|e| errors::error("XX000", format!("reading DuckDB's Arrow: {e}")))?;
    let mut encoder = DataRowEncoder::new(fields.clone());
    let mut out = Vec::with_capacity(batch.num_rows());
    for row in 0..batch.num_rows() {
        for (c, f) in columns.iter().zip(fields.iter()) {
            encoder.encode_field_with_type_and_format(
                &types::Cell {
                    array: c.as_ref(),
                    row,
                },
                f.datatype(),
                f.format(),
                f.format_options(),
            )?;
        }
        out.push(encoder.take_row());
    }
    Ok(out)
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

    /// `COPY (query) TO STDOUT`: each row one `CopyData` in PostgreSQL's
    /// text format or CSV.
    async fn copy_out(&self, session: &Arc<Session>, copy: &Copy) -> PgWireResult<Response> {
        let started = self.start(session, &copy.query, Vec::new()).await?;
        let columns = started.schema.fields().len();
        let header = copy.header.then(|| {
            let names: Vec<String> = started
                .schema
                .fields()
                .iter()
                .map(|f| csv_field(f.name(), copy.delimiter))
                .collect();
            let mut line = names.join(&copy.delimiter.to_string());
            line.push('\n');
            line
        });
        let sql: Arc<str> = copy.query.clone().into();
        let copy = copy.clone();
        let running = RunningGuard(session.clone());
        let fields: Arc<Vec<FieldInfo>> =
            Arc::new(types::fields(&started.schema, |_| FieldFormat::Text));
        let state = CopyState {
            batches: backend::batches(started.answer),
            header,
            lines: std::collections::VecDeque::new(),
            done: false,
            _running: running,
        };
        let body = stream::unfold(state, move |mut st| {
            let (fields, copy, sql) = (fields.clone(), copy.clone(), sql.clone());
            async move {
                loop {
                    if let Some(line) = st.lines.pop_front() {
                        return Some((Ok(line), st));
                    }
                    if st.done {
                        // An empty result: the header alone.
                        let h = st.header.take()?;
                        return Some((Ok(CopyData::new(h.into_bytes().into())), st));
                    }
                    let lines = match st.batches.next().await {
                        None => {
                            st.done = true;
                            continue;
                        }
                        Some(Ok(b)) => copy_lines(&b, &fields, &copy),
                        Some(Err(f)) => Err(errors::of_problem(&f.problem, &sql)),
                    };
                    match lines {
                        Ok(lines) => st.lines.extend(lines),
                        Err(e) => {
                            st.done = true;
                            st.header = None;
                            return Some((Err(e), st));
                        }
                    }
                    // The header travels with the first row, so COPY's
                    // count is the rows'.
                    if let (Some(first), true) = (st.lines.front_mut(), st.header.is_some()) {
                        let h = st.header.take().unwrap_or_default();
                        let mut joined = BytesMut::from(h.as_bytes());
                        joined.extend_from_slice(&first.data);
                        *first = CopyData::new(joined.freeze());
                    }
                }
            }
        })
        .boxed();
        Ok(Response::CopyOut(CopyResponse::new(0, columns, body)))
    }

    /// Runs one statement of a simple query.
    async fn simple(
        &self,
        session: &Arc<Session>,
        sql: &str,
        last: bool,
    ) -> PgWireResult<Response> {
        let command = session::classify(sql);
        if let Some(r) = self.command(session, &command, |_| FieldFormat::Text)? {
            return Ok(r);
        }
        match &command {
            Command::CopyOut(copy) => self.copy_out(session, copy).await,
            _ => {
                let started = self.start(session, sql, Vec::new()).await?;
                let response = self
                    .answer(started, sql, session, |_| FieldFormat::Text)
                    .await?;
                if last {
                    return Ok(response);
                }
                // A statement before the last of a simple query is read
                // whole before the next starts (within the gateway's caps),
                // so two never hold connections at once.
                let Response::Query(mut q) = response else {
                    return Ok(response);
                };
                let mut rows = Vec::new();
                while let Some(r) = q.data_rows().next().await {
                    rows.push(r);
                }
                let tag = q.command_tag().to_string();
                let mut whole = QueryResponse::new(q.row_schema(), stream::iter(rows));
                whole.set_command_tag(&tag);
                Ok(Response::Query(whole))
            }
        }
    }
}

/// A `COPY ... TO STDOUT` on its way: the batches to come, the lines of
/// the last one, the header until it is sent.
struct CopyState {
    batches: BoxStream<'static, Result<RecordBatch, backend::Failure>>,
    header: Option<String>,
    lines: std::collections::VecDeque<CopyData>,
    done: bool,
    _running: RunningGuard,
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

/// A CSV field (a header's name) quoted where it must be.
fn csv_field(s: &str, delimiter: char) -> String {
    if s.is_empty() || s.contains([delimiter, '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// The lines of a batch in COPY's text format or CSV.
fn copy_lines(
    batch: &RecordBatch,
    fields: &Arc<Vec<FieldInfo>>,
    copy: &Copy,
) -> PgWireResult<Vec<CopyData>> {
    let columns: Vec<ArrayRef> = batch
        .columns()
        .iter()
        .map(types::plain)
        .collect::<Result<_, _>>()
        .map_err(|e| errors::error("XX000", format!("reading DuckDB's Arrow: {e}")))?;
    let mut out = Vec::with_capacity(batch.num_rows());
    let mut value = BytesMut::new();
    for row in 0..batch.num_rows() {
        let mut line = BytesMut::new();
        for (i, (c, f)) in columns.iter().zip(fields.iter()).enumerate() {
            if i > 0 {
                let mut d = [0u8; 4];
                line.put_slice(copy.delimiter.encode_utf8(&mut d).as_bytes());
            }
            if c.is_null(row) {
                line.put_slice(copy.null.as_bytes());
                continue;
            }
            value.clear();
            types::text(c.as_ref(), row, f.datatype(), &mut value)
                .map_err(|e| errors::error("XX000", format!("writing a value: {e}")))?;
            if copy.csv {
                let s = String::from_utf8_lossy(&value);
                let quote = s.is_empty() && copy.null.is_empty()
                    || s.contains([copy.delimiter, '"', '\n', '\r'])
                    || s == copy.null;
                if quote {
                    line.put_u8(b'"');
                    line.put_slice(s.replace('"', "\"\"").as_bytes());
                    line.put_u8(b'"');
                } else {
                    line.put_slice(&value);
                }
            } else {
                for &b in value.iter() {
                    match b {
                        b'\\' => line.put_slice(b"\\\\"),
                        b'\n' => line.put_slice(b"\\n"),
                        b'\r' => line.put_slice(b"\\r"),
                        b'\t' => line.put_slice(b"\\t"),
                        _ if b as char == copy.delimiter => {
                            line.put_u8(b'\\');
                            line.put_u8(b);
                        }
                        _ => line.put_u8(b),
                    }
                }
            }
        }
        line.put_u8(b'\n');
        out.push(CopyData::new(line.freeze()));
    }
    Ok(out)
}

#[async_trait]
impl SimpleQueryHandler for Queries {
    async fn do_query<C>(&self, client: &mut C, query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session(client)?;
        let pieces = session::split(query);
        let mut out = Vec::with_capacity(pieces.len());
        for (i, sql) in pieces.iter().enumerate() {
            match self.simple(&session, sql, i + 1 == pieces.len()).await {
                Ok(r) => out.push(r),
                // PostgreSQL stops a simple query at its first error.
                Err(PgWireError::UserError(mut info)) => {
                    // The position is in the statement; the client counts
                    // from the start of the text it sent.
                    let before = sql.as_ptr() as usize - query.as_ptr() as usize;
                    info.position = info
                        .position
                        .as_deref()
                        .and_then(|p| p.parse::<usize>().ok())
                        .map(|p| (p + query[..before].chars().count()).to_string());
                    out.push(Response::Error(info));
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        if out.is_empty() {
            out.push(Response::EmptyQuery);
        }
        Ok(out)
    }
}

/// Parses nothing: the statement is DuckDB's to parse when it runs or is
/// described; the door only sorts out its own commands.
pub struct Parser;

#[async_trait]
impl QueryParser for Parser {
    type Statement = Prepared;

    async fn parse_sql<C>(
        &self,
        _client: &C,
        sql: &str,
        _types: &[Option<Type>],
    ) -> PgWireResult<Option<Prepared>>
    where
        C: ClientInfo + Unpin + Send + Sync,
    {
        let pieces = session::split(sql);
        if pieces.len() > 1 {
            return Err(errors::error(
                code::SYNTAX,
                "cannot insert multiple commands into a prepared statement",
            ));
        }
        Ok(Some(Prepared {
            command: Arc::new(session::classify(sql)),
            described: Arc::default(),
        }))
    }

    fn get_parameter_types(&self, _stmt: &Prepared) -> PgWireResult<Vec<Type>> {
        Ok(Vec::new())
    }

    fn get_result_schema(
        &self,
        _stmt: &Prepared,
        _column_format: Option<&Format>,
    ) -> PgWireResult<Vec<FieldInfo>> {
        Ok(Vec::new())
    }
}

/// The values a portal binds, by the types the client declared or the
/// statement's description found.
fn params(portal: &Portal<Prepared>) -> PgWireResult<Vec<backend::Param>> {
    let described = portal
        .statement
        .statement
        .described
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone()
        .unwrap_or_default();
    portal
        .parameters
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let declared = portal
                .statement
                .parameter_types
                .get(i)
                .cloned()
                .flatten()
                .filter(|t| *t != Type::UNKNOWN);
            let ty = declared.or_else(|| described.get(i).cloned());
            types::param(
                v.as_deref(),
                ty.as_ref(),
                portal.parameter_format.is_binary(i),
            )
            .map_err(|why| errors::error("22P02", format!("parameter ${}: {why}", i + 1)))
        })
        .collect()
}

#[async_trait]
impl ExtendedQueryHandler for Queries {
    type Statement = Prepared;
    type QueryParser = Parser;

    fn query_parser(&self) -> Arc<Parser> {
        Arc::new(Parser)
    }

    async fn do_describe_statement<C>(
        &self,
        client: &mut C,
        target: &StoredStatement<Prepared>,
    ) -> PgWireResult<DescribeStatementResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session(client)?;
        let sql = match target.statement.command.as_ref() {
            Command::Query(sql) => sql,
            Command::Show(name) => {
                let column = session::setting(name).map_or(name.as_str(), |s| s.name);
                return Ok(DescribeStatementResponse::new(
                    Vec::new(),
                    vec![FieldInfo::new(
                        column.to_ascii_lowercase(),
                        None,
                        None,
                        Type::TEXT,
                        FieldFormat::Text,
                    )],
                ));
            }
            Command::Fixed(column, _) => {
                return Ok(DescribeStatementResponse::new(
                    Vec::new(),
                    vec![FieldInfo::new(
                        column.to_string(),
                        None,
                        None,
                        Type::TEXT,
                        FieldFormat::Text,
                    )],
                ));
            }
            _ => return Ok(DescribeStatementResponse::no_data()),
        };
        let text = self.catalog_text(&session, sql).await?;
        let described = backend::describe(
            &self.door.state,
            &session.identity,
            text.to_string(),
            session.statement_timeout_ms(),
        )
        .await
        .map_err(|f| errors::of_problem(&f.problem, &text))?;
        let found: Vec<Type> = described
            .parameters
            .fields()
            .iter()
            .map(|f| types::param_type(f))
            .collect();
        let parameters: Vec<Type> = found
            .iter()
            .enumerate()
            .map(|(i, t)| {
                target
                    .parameter_types
                    .get(i)
                    .cloned()
                    .flatten()
                    .filter(|t| *t != Type::UNKNOWN)
                    .unwrap_or_else(|| t.clone())
            })
            .collect();
        *target
            .statement
            .described
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some(parameters.clone());
        let fields = described
            .dataset
            .as_ref()
            .map(types::described)
            .unwrap_or_default();
        Ok(DescribeStatementResponse::new(parameters, fields))
    }

    async fn do_describe_portal<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
    ) -> PgWireResult<DescribePortalResponse>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session(client)?;
        let format = |i: usize| portal.result_column_format.format_for(i);
        match portal.statement.statement.command.as_ref() {
            Command::Query(sql) => {
                // The columns are known once the statement runs: it starts
                // now, and its Execute reads it.
                let started = self.start(&session, sql, params(portal)?).await?;
                let fields = types::fields(&started.schema, format);
                *session.pending.lock().await = Some((key(portal), started));
                Ok(DescribePortalResponse::new(fields))
            }
            Command::Show(name) => {
                let column = session::setting(name).map_or(name.as_str(), |s| s.name);
                Ok(DescribePortalResponse::new(vec![FieldInfo::new(
                    column.to_ascii_lowercase(),
                    None,
                    None,
                    Type::TEXT,
                    format(0),
                )]))
            }
            Command::Fixed(column, _) => Ok(DescribePortalResponse::new(vec![FieldInfo::new(
                column.to_string(),
                None,
                None,
                Type::TEXT,
                format(0),
            )])),
            _ => Ok(DescribePortalResponse::no_data()),
        }
    }

    async fn do_query<C>(
        &self,
        client: &mut C,
        portal: &Portal<Prepared>,
        _max_rows: usize,
    ) -> PgWireResult<Response>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let session = session(client)?;
        let format = |i: usize| portal.result_column_format.format_for(i);
        let command = portal.statement.statement.command.clone();
        let pending = session.pending.lock().await.take();
        if let Some(r) = self.command(&session, &command, format)? {
            return Ok(r);
        }
        match command.as_ref() {
            Command::CopyOut(copy) => self.copy_out(&session, copy).await,
            Command::Query(sql) => {
                let started = match pending {
                    Some((k, started)) if k == key(portal) => started,
                    _ => self.start(&session, sql, params(portal)?).await?,
                };
                self.answer(started, sql, &session, format).await
            }
            _ => Ok(Response::EmptyQuery),
        }
    }
}

/// A portal's identity while it lives (its address).
fn key(portal: &Portal<Prepared>) -> usize {
    portal as *const Portal<Prepared> as usize
}
