//! The Flight SQL service: each call authenticates with the HTTP API's
//! extractor, runs statements through [`results::start`] and keeps what a
//! client fetches later in [`Tickets`].

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{self as types, DataType, Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow::util::display::{ArrayFormatter, FormatOptions};
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::server::{FlightSqlService, PeekableFlightDataStream};
use arrow_flight::sql::{
    ActionCancelQueryRequest, ActionCancelQueryResult, ActionClosePreparedStatementRequest,
    ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any, Command,
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetSqlInfo, CommandGetTableTypes,
    CommandGetTables, CommandGetXdbcTypeInfo, CommandPreparedStatementQuery,
    CommandPreparedStatementUpdate, CommandStatementQuery, CommandStatementUpdate,
    DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{
    Action, CancelFlightInfoRequest, CancelFlightInfoResult, CancelStatus, FlightDescriptor,
    FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, IpcMessage, SchemaAsIpc,
    SchemaResult, Ticket,
};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::core::state::AppState;
use crate::engine::Param;
use crate::flight::catalog;
use crate::flight::options::CallOptions;
use crate::flight::results::{self, Started};
use crate::flight::status;
use crate::flight::tickets::{self, Handle, Tickets};
use crate::flight::xdbc;
use crate::identity::Identity;

type DoGetStream = <FlightSql as FlightService>::DoGetStream;

/// Parameter rows a DoPut may bind.
const MAX_PARAM_ROWS: usize = 10_000;

/// Tables whose Arrow schema one GetTables may read (`include_schema`):
/// each is a `LIMIT 0` query through the guard.
const MAX_SCHEMA_TABLES: usize = 500;

/// The Flight SQL service over the gateway's state.
pub struct FlightSql {
    state: AppState,
    /// Results waiting for their DoGet, and prepared statements.
    pub tickets: Arc<Tickets>,
    /// What GetSqlInfo answers.
    sql_info: SqlInfoData,
}

impl FlightSql {
    pub fn new(state: AppState) -> Self {
        let server = &state.config.server;
        // A share of the table per identity, as of the pool and the
        // statements: one identity keeping its handles alive by using them
        // locks no one else out.
        let share = crate::statements::Settings::token_share_of(
            server.flight_max_tickets,
            state.identities.parties(),
        );
        let tickets = Arc::new(Tickets::new(
            server.flight_max_tickets,
            share,
            Duration::from_millis(server.flight_ticket_ttl_ms),
        ));
        let read_only = state.engine.rules().policy == crate::config::Policy::ReadOnly;
        let sql_info = sql_info(read_only, &state.health.duckdb_version);
        Self {
            state,
            tickets,
            sql_info,
        }
    }

    /// The caller, from the `authorization` metadata, decided as every
    /// door decides it (query tokens, OIDC JWTs).
    async fn auth<T>(&self, request: &Request<T>) -> Result<Identity, Status> {
        let value = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes());
        self.auth_header(value).await
    }

    async fn auth_header(&self, value: Option<&[u8]>) -> Result<Identity, Status> {
        self.state
            .identities
            .identify_authorization(value)
            .await
            .map_err(|denied| status::of_problem(&denied.problem(), None))
    }

    /// The FlightInfo of a started result, kept for its DoGet.
    fn result_info(
        &self,
        auth: &Identity,
        started: Started,
        descriptor: FlightDescriptor,
    ) -> Result<Response<FlightInfo>, Status> {
        let schema = started.schema.clone();
        let handle = self.tickets.keep_result(auth.name.clone(), started)?;
        let ticket = TicketStatementQuery {
            statement_handle: handle.to_vec().into(),
        };
        let info = FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
            .with_endpoint(
                FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec())),
            )
            .with_descriptor(descriptor)
            .with_ordered(true);
        Ok(Response::new(info))
    }

    /// Runs a statement that changes data: the rows it changed (DuckDB's
    /// `Count`), or -1 where it reports none.
    async fn update(
        &self,
        auth: &Identity,
        sql: String,
        params: Vec<Param>,
        options: CallOptions,
    ) -> Result<i64, Status> {
        let started = results::start(&self.state, auth, sql, params, options).await?;
        let counts =
            started.schema.fields().len() == 1 && started.schema.field(0).name() == "Count";
        let mut batches = started.answer.batches();
        let mut n = 0i64;
        while let Some(batch) = batches.next().await {
            let batch = batch?;
            if counts {
                if let Some(c) = batch.column(0).as_primitive_opt::<types::Int64Type>() {
                    n += c.iter().flatten().sum::<i64>();
                }
            }
        }
        Ok(if counts { n } else { -1 })
    }

    /// The databases, schemas and tables the caller may query, as
    /// `GET /catalog` lists them.
    async fn databases(
        &self,
        auth: &Identity,
    ) -> Result<Vec<crate::engine::catalogs::DatabaseEntry>, Status> {
        let declared = self.state.catalogs.clone();
        let mut databases = crate::core::catalog::on_pooled(&self.state, &auth.name, move |conn| {
            crate::engine::catalogs::list(conn, &declared)
        })
        .await
        .map_err(|e| status::of_core(&e, None))?;
        // A caller confined by roles sees what they grant.
        if let Some(access) = &auth.access {
            crate::core::catalog::confine(&mut databases, access);
        }
        Ok(databases)
    }
}

impl FlightSql {
    /// Flight's session actions (see [`catalog`]): the answer's body, or
    /// `None` for another action.
    async fn session_action(&self, request: &Request<Action>) -> Option<Result<Vec<u8>, Status>> {
        let kind = request.get_ref().r#type.as_str();
        if !["GetSessionOptions", "SetSessionOptions", "CloseSession"].contains(&kind) {
            return None;
        }
        let t0 = Instant::now();
        let auth = match self.auth(request).await {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        let r = async {
            if kind == "CloseSession" {
                // Nothing is kept per session: closed at once.
                return Ok(catalog::CloseSessionResult { status: 1 }.encode_to_vec());
            }
            let databases = self.databases(&auth).await?;
            let current = databases
                .iter()
                .find(|d| d.kind == "gateway")
                .map(|d| d.name.clone())
                .unwrap_or_default();
            Ok(if kind == "GetSessionOptions" {
                catalog::session_options(&current).encode_to_vec()
            } else {
                let asked =
                    catalog::SessionOptions::decode(&*request.get_ref().body).map_err(|_| {
                        status::invalid("the request is not a SetSessionOptionsRequest")
                    })?;
                catalog::set_session_options(&current, &asked).encode_to_vec()
            })
        }
        .await;
        observe(
            match kind {
                "GetSessionOptions" => "GetSessionOptions",
                "SetSessionOptions" => "SetSessionOptions",
                _ => "CloseSession",
            },
            Some(&auth.name),
            t0,
            &r,
        );
        Some(r)
    }

    /// GetSchema: the schema a command's FlightInfo would carry, without
    /// running it. A statement (plain or prepared) is described as
    /// CreatePreparedStatement describes it: the guard and the caller's
    /// grants judge it, then DuckDB's prepare types its result; nothing
    /// runs. A result whose types follow the parameters' values
    /// (`SELECT ? + 1`) has none before it runs, and the answer says so.
    /// The metadata commands' schemas are fixed by Flight SQL.
    pub async fn get_schema_of(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let any = Any::decode(&*request.get_ref().cmd)
                .map_err(|_| status::invalid("the descriptor holds no Flight SQL command"))?;
            let command = Command::try_from(any)
                .map_err(|e| status::invalid(format!("not a Flight SQL command: {e}")))?;
            let schema = match command {
                Command::CommandStatementQuery(q) => {
                    self.dataset_schema(&auth, q.query, &request).await?
                }
                Command::CommandPreparedStatementQuery(q) => {
                    let handle = tickets::parse(&q.prepared_statement_handle)?;
                    let prepared = self.tickets.prepared(&handle, &auth.name)?;
                    self.dataset_schema(&auth, prepared.sql, &request).await?
                }
                Command::CommandGetCatalogs(q) => q.into_builder().schema(),
                Command::CommandGetDbSchemas(q) => q.into_builder().schema(),
                Command::CommandGetTables(q) => q.into_builder().schema(),
                Command::CommandGetTableTypes(q) => q.into_builder().schema(),
                Command::CommandGetSqlInfo(q) => q.into_builder(&self.sql_info).schema(),
                Command::CommandGetXdbcTypeInfo(q) => q.into_builder(xdbc::type_info()).schema(),
                other => {
                    return Err(Status::unimplemented(format!(
                        "GetSchema of {} is not supported",
                        other.type_url()
                    )))
                }
            };
            SchemaResult::try_from(SchemaAsIpc::new(&schema, &IpcWriteOptions::default()))
                .map_err(|e| Status::internal(format!("encoding the schema: {e}")))
        }
        .await;
        observe("GetSchema", Some(&auth.name), t0, &r);
        r.map(Response::new)
    }

    /// The result schema DuckDB's prepare gives `sql`, after the guard.
    async fn dataset_schema<T>(
        &self,
        auth: &Identity,
        sql: String,
        request: &Request<T>,
    ) -> Result<SchemaRef, Status> {
        let options = CallOptions::of(request.metadata())?;
        let described = results::describe(&self.state, auth, sql, options).await?;
        described.dataset.ok_or_else(|| {
            Status::failed_precondition(
                "the result's types follow the parameters' values: DuckDB types them when the statement runs",
            )
        })
    }
}

/// The digest of the call's `authorization` metadata (see
/// [`tickets::bearer_digest`]).
fn bearer_of<T>(request: &Request<T>) -> [u8; 32] {
    let value = request
        .metadata()
        .get("authorization")
        .map_or(&[][..], |v| v.as_bytes());
    tickets::bearer_digest(value)
}

/// A FlightInfo whose ticket is the command itself (metadata calls: the
/// DoGet authenticates again and reads the catalog then).
fn command_info(
    any: Any,
    schema: &Schema,
    descriptor: FlightDescriptor,
) -> Result<Response<FlightInfo>, Status> {
    let info = FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding the schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(any.encode_to_vec())))
        .with_descriptor(descriptor);
    Ok(Response::new(info))
}

/// A schema as the IPC message a prepared statement's answer carries.
fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: arrow::error::ArrowError| {
            Status::internal(format!("encoding a schema: {e}"))
        })?;
    Ok(bytes)
}

/// Batches as Flight data; dictionaries pass as DuckDB made them.
fn flight_data(
    schema: SchemaRef,
    batches: BoxStream<'static, Result<RecordBatch, Status>>,
) -> DoGetStream {
    let stream = FlightDataEncoderBuilder::new()
        .with_schema(schema)
        .with_dictionary_handling(DictionaryHandling::Resend)
        .build(batches.map_err(FlightError::from))
        .map_err(Status::from);
    Box::pin(stream)
}

fn one_batch(batch: Result<RecordBatch, FlightError>) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(format!("building the answer: {e}")))?;
    let schema = batch.schema();
    Ok(Response::new(flight_data(
        schema,
        futures::stream::iter([Ok(batch)]).boxed(),
    )))
}

/// GetSqlInfo's answer.
fn sql_info(read_only: bool, duckdb_version: &str) -> SqlInfoData {
    let mut b = SqlInfoDataBuilder::new();
    b.append(SqlInfo::FlightSqlServerName, "duckgate");
    b.append(
        SqlInfo::FlightSqlServerVersion,
        format!("{} (DuckDB {duckdb_version})", env!("CARGO_PKG_VERSION")).as_str(),
    );
    b.append(SqlInfo::FlightSqlServerArrowVersion, "58");
    b.append(SqlInfo::FlightSqlServerReadOnly, read_only);
    b.append(SqlInfo::FlightSqlServerSql, true);
    b.append(SqlInfo::FlightSqlServerSubstrait, false);
    // SqlSupportedTransaction::None: every statement commits on its own.
    b.append(SqlInfo::FlightSqlServerTransaction, 0i32);
    b.append(SqlInfo::FlightSqlServerCancel, true);
    b.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    // A qualified name is catalog.schema.table (a BI tool's navigator and
    // a dialect read these to qualify what they listed).
    b.append(SqlInfo::SqlCatalogTerm, "catalog");
    b.append(SqlInfo::SqlSchemaTerm, "schema");
    b.append(SqlInfo::SqlCatalogAtStart, true);
    b.append(SqlInfo::SqlDdlCatalog, false);
    b.append(SqlInfo::SqlDdlSchema, false);
    b.append(SqlInfo::SqlDdlTable, !read_only);
    b.build().expect("a fixed set of SqlInfo values")
}

/// `%` and `_` of a Flight SQL filter pattern.
fn like(pattern: &str, text: &str) -> bool {
    fn go(p: &[char], t: &[char]) -> bool {
        match p.split_first() {
            None => t.is_empty(),
            Some(('%', rest)) => (0..=t.len()).any(|i| go(rest, &t[i..])),
            Some(('_', rest)) => !t.is_empty() && go(rest, &t[1..]),
            Some((c, rest)) => t.first() == Some(c) && go(rest, &t[1..]),
        }
    }
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    go(&p, &t)
}

/// Row `i` of a parameter column as a statement parameter: numbers,
/// booleans, text and bytes as themselves, other types as their text
/// (DuckDB casts it to the parameter's type).
fn param_of(a: &ArrayRef, i: usize) -> Result<Param, Status> {
    if a.is_null(i) {
        return Ok(Param::Null);
    }
    Ok(match a.data_type() {
        DataType::Null => Param::Null,
        DataType::Boolean => Param::Bool(a.as_boolean().value(i)),
        DataType::Int8 => Param::Int(a.as_primitive::<types::Int8Type>().value(i).into()),
        DataType::Int16 => Param::Int(a.as_primitive::<types::Int16Type>().value(i).into()),
        DataType::Int32 => Param::Int(a.as_primitive::<types::Int32Type>().value(i).into()),
        DataType::Int64 => Param::Int(a.as_primitive::<types::Int64Type>().value(i)),
        DataType::UInt8 => Param::Int(a.as_primitive::<types::UInt8Type>().value(i).into()),
        DataType::UInt16 => Param::Int(a.as_primitive::<types::UInt16Type>().value(i).into()),
        DataType::UInt32 => Param::Int(a.as_primitive::<types::UInt32Type>().value(i).into()),
        DataType::UInt64 => Param::UInt(a.as_primitive::<types::UInt64Type>().value(i)),
        DataType::Float32 => Param::Float(a.as_primitive::<types::Float32Type>().value(i).into()),
        DataType::Float64 => Param::Float(a.as_primitive::<types::Float64Type>().value(i)),
        DataType::Utf8 => Param::Text(a.as_string::<i32>().value(i).to_string()),
        DataType::LargeUtf8 => Param::Text(a.as_string::<i64>().value(i).to_string()),
        DataType::Utf8View => Param::Text(a.as_string_view().value(i).to_string()),
        DataType::Decimal128(width, scale) if *scale >= 0 => Param::Decimal {
            width: *width,
            scale: *scale as u8,
            value: a.as_primitive::<types::Decimal128Type>().value(i),
        },
        // A union column lets each row carry a type of its own
        // (`flightsql-dbapi` binds every parameter so): the row's value is
        // that of the member it selects.
        DataType::Union(_, _) => {
            let member = a.as_union().value(i);
            return param_of(&member, 0);
        }
        DataType::Binary => Param::Blob(a.as_binary::<i32>().value(i).to_vec()),
        DataType::LargeBinary => Param::Blob(a.as_binary::<i64>().value(i).to_vec()),
        DataType::BinaryView => Param::Blob(a.as_binary_view().value(i).to_vec()),
        DataType::FixedSizeBinary(_) => Param::Blob(a.as_fixed_size_binary().value(i).to_vec()),
        _ => {
            let f =
                ArrayFormatter::try_new(a.as_ref(), &FormatOptions::default()).map_err(|e| {
                    status::invalid(format!("a parameter of type {}: {e}", a.data_type()))
                })?;
            Param::Text(f.value(i).to_string())
        }
    })
}

/// The parameter rows of a DoPut's batches.
async fn read_params(stream: PeekableFlightDataStream) -> Result<Vec<Vec<Param>>, Status> {
    let mut batches = arrow_flight::decode::FlightRecordBatchStream::new_from_flight_data(
        stream.map_err(FlightError::from),
    );
    let mut rows = Vec::new();
    while let Some(batch) = batches.next().await {
        let batch = batch.map_err(Status::from)?;
        if rows.len() + batch.num_rows() > MAX_PARAM_ROWS {
            return Err(Status::resource_exhausted(format!(
                "more than {MAX_PARAM_ROWS} parameter rows in one DoPut"
            )));
        }
        for r in 0..batch.num_rows() {
            rows.push(
                batch
                    .columns()
                    .iter()
                    .map(|c| param_of(c, r))
                    .collect::<Result<Vec<_>, _>>()?,
            );
        }
    }
    Ok(rows)
}

/// The result handle in a FlightInfo's first ticket (a cancel's target).
fn handle_of_info(info: &FlightInfo) -> Result<Handle, Status> {
    let ticket = info
        .endpoint
        .first()
        .and_then(|e| e.ticket.as_ref())
        .ok_or_else(|| status::invalid("the FlightInfo has no ticket"))?;
    let any =
        Any::decode(&*ticket.ticket).map_err(|_| status::invalid("not a ticket of this server"))?;
    let t: TicketStatementQuery = any
        .unpack()
        .ok()
        .flatten()
        .ok_or_else(|| status::invalid("not a statement ticket of this server"))?;
    tickets::parse(&t.statement_handle)
}

/// One line and one count per call: method, identity, gRPC code, time.
fn observe<T>(method: &'static str, who: Option<&str>, t0: Instant, r: &Result<T, Status>) {
    let code = match r {
        Ok(_) => tonic::Code::Ok,
        Err(s) => s.code(),
    };
    let code_label = format!("{code:?}");
    metrics::counter!("duckgate_flight_requests_total", "method" => method, "code" => code_label.clone())
        .increment(1);
    tracing::info!(
        route = "flight",
        method,
        identity = who.unwrap_or("-"),
        code = %code_label,
        elapsed_ms = crate::engine::queries::elapsed_ms(t0.elapsed()),
        "flight call"
    );
}

#[tonic::async_trait]
impl FlightSqlService for FlightSql {
    type FlightService = FlightSql;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<
        Response<Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>>>,
        Status,
    > {
        let t0 = Instant::now();
        // Bearer as on every call, or Basic with the token as the password
        // (the user name is not checked: the token names the identity).
        let header = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let token = if let Some(basic) = header
            .strip_prefix("Basic ")
            .or_else(|| header.strip_prefix("basic "))
        {
            use base64::Engine as _;
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(basic.trim())
                .ok()
                .and_then(|b| String::from_utf8(b).ok())
                .ok_or_else(|| Status::unauthenticated("unreadable basic credentials"))?;
            decoded
                .split_once(':')
                .map(|(_, p)| p.to_string())
                .unwrap_or_default()
        } else {
            header
                .strip_prefix("Bearer ")
                .or_else(|| header.strip_prefix("bearer "))
                .unwrap_or_default()
                .to_string()
        };
        let bearer = format!("Bearer {token}");
        let r = self
            .auth_header((!token.is_empty()).then_some(bearer.as_bytes()))
            .await;
        observe("Handshake", r.as_ref().ok().map(|a| &*a.name), t0, &r);
        r?;
        let answer: Pin<Box<dyn Stream<Item = Result<HandshakeResponse, Status>> + Send>> =
            Box::pin(futures::stream::iter([Ok(HandshakeResponse {
                protocol_version: 0,
                payload: Default::default(),
            })]));
        let mut response = Response::new(answer);
        if !token.is_empty() {
            if let Ok(v) = bearer.parse() {
                response.metadata_mut().insert("authorization", v);
            }
        }
        Ok(response)
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await;
        let r = match &auth {
            Ok(auth) => match self
                .tickets
                .room(&auth.name)
                .and_then(|()| CallOptions::of(request.metadata()))
            {
                Err(e) => Err(e),
                Ok(options) => {
                    match results::start(&self.state, auth, query.query, Vec::new(), options).await
                    {
                        Ok(started) => self.result_info(auth, started, request.into_inner()),
                        Err(e) => Err(e),
                    }
                }
            },
            Err(e) => Err(e.clone()),
        };
        observe(
            "GetFlightInfo",
            auth.as_ref().ok().map(|a| &*a.name),
            t0,
            &r,
        );
        r
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let handle = tickets::parse(&query.prepared_statement_handle)?;
            let prepared = self.tickets.prepared(&handle, &auth.name)?;
            let params = match prepared.params.len() {
                0 => Vec::new(),
                1 => prepared.params[0].clone(),
                n => {
                    return Err(status::invalid(format!(
                        "{n} parameter rows are bound; a query runs with one"
                    )))
                }
            };
            self.tickets.room(&auth.name)?;
            let options = CallOptions::of(request.metadata())?;
            let started = results::start(&self.state, &auth, prepared.sql, params, options).await?;
            self.result_info(&auth, started, request.into_inner())
        }
        .await;
        observe("GetFlightInfo", Some(&auth.name), t0, &r);
        r
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = tickets::parse(&ticket.statement_handle)
            .and_then(|h| self.tickets.take_result(&h, &auth.name));
        observe("DoGet", Some(&auth.name), t0, &r);
        let started = r?;
        Ok(Response::new(started.answer.flight_data()))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = match CallOptions::of(request.metadata()) {
            Ok(options) => self.update(&auth, command.query, Vec::new(), options).await,
            Err(e) => Err(e),
        };
        observe("DoPut", Some(&auth.name), t0, &r);
        r
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<DoPutPreparedStatementResult, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let handle = tickets::parse(&query.prepared_statement_handle)?;
            // The handle must be the caller's before its rows are read.
            self.tickets.prepared(&handle, &auth.name)?;
            let rows = read_params(request.into_inner()).await?;
            self.tickets.bind(&handle, &auth.name, rows)?;
            Ok(DoPutPreparedStatementResult {
                prepared_statement_handle: Some(query.prepared_statement_handle.clone()),
            })
        }
        .await;
        observe("DoPut", Some(&auth.name), t0, &r);
        r
    }

    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> Result<i64, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let handle = tickets::parse(&query.prepared_statement_handle)?;
            let prepared = self.tickets.prepared(&handle, &auth.name)?;
            let options = CallOptions::of(request.metadata())?;
            let rows = read_params(request.into_inner()).await?;
            let sets = match (rows.is_empty(), prepared.params.is_empty()) {
                (false, _) => rows,
                (true, false) => prepared.params,
                (true, true) => vec![Vec::new()],
            };
            let mut total = 0i64;
            for params in sets {
                let n = self
                    .update(&auth, prepared.sql.clone(), params, options)
                    .await?;
                total = if n < 0 || total < 0 { -1 } else { total + n };
            }
            Ok(total)
        }
        .await;
        observe("DoPut", Some(&auth.name), t0, &r);
        r
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<ActionCreatePreparedStatementResult, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            self.tickets.room(&auth.name)?;
            let options = CallOptions::of(request.metadata())?;
            // Drivers and BI tools ask for the result's columns before they
            // execute (JDBC's getMetaData, ADBC's ExecuteSchema): DuckDB's
            // prepare says, after the guard and the caller's grants. A
            // result whose types follow the parameters' values (`SELECT ?
            // + 1`) has none yet: the FlightInfo of the execution carries it.
            let described =
                results::describe(&self.state, &auth, query.query.clone(), options).await?;
            let handle =
                self.tickets
                    .prepare(auth.name.clone(), query.query, bearer_of(&request))?;
            Ok(ActionCreatePreparedStatementResult {
                prepared_statement_handle: handle.to_vec().into(),
                dataset_schema: described
                    .dataset
                    .as_deref()
                    .map(ipc_schema)
                    .transpose()?
                    .unwrap_or_default(),
                parameter_schema: ipc_schema(&described.parameters)?,
            })
        }
        .await;
        observe("CreatePreparedStatement", Some(&auth.name), t0, &r);
        r
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<Action>,
    ) -> Result<(), Status> {
        let handle = tickets::parse(&query.prepared_statement_handle)?;
        match self.auth(&request).await {
            Ok(auth) => self.tickets.close(&handle, &auth.name),
            // Its owner may always close it: the bearer that made it, past
            // its expiry, still frees what it made (and nothing else).
            Err(_) if self.tickets.close_by_bearer(&handle, &bearer_of(&request)) => Ok(()),
            Err(refused) => Err(refused),
        }
    }

    async fn do_action_cancel_query(
        &self,
        query: ActionCancelQueryRequest,
        request: Request<Action>,
    ) -> Result<ActionCancelQueryResult, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let info = FlightInfo::decode(&*query.info)
                .map_err(|_| status::invalid("the request holds no FlightInfo"))?;
            let handle = handle_of_info(&info)?;
            let cancelled = self.tickets.cancel(&handle, &auth.name)?;
            // CancelResult (not re-exported): 1 CANCELLED, 3 NOT_CANCELLABLE.
            Ok(ActionCancelQueryResult {
                result: if cancelled { 1 } else { 3 },
            })
        }
        .await;
        observe("CancelQuery", Some(&auth.name), t0, &r);
        r
    }

    async fn do_action_fallback(
        &self,
        request: Request<Action>,
    ) -> Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        if let Some(answer) = self.session_action(&request).await {
            let body = answer?;
            let body = arrow_flight::Result { body: body.into() };
            return Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))));
        }
        if request.get_ref().r#type != "CancelFlightInfo" {
            return Err(status::invalid(format!(
                "action {:?} is not supported",
                request.get_ref().r#type
            )));
        }
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let cancel = CancelFlightInfoRequest::decode(&*request.get_ref().body)
                .map_err(|_| status::invalid("the request is not a CancelFlightInfoRequest"))?;
            let info = cancel
                .info
                .ok_or_else(|| status::invalid("the request holds no FlightInfo"))?;
            let handle = handle_of_info(&info)?;
            let cancelled = self.tickets.cancel(&handle, &auth.name)?;
            Ok(CancelFlightInfoResult::new(if cancelled {
                CancelStatus::Cancelled
            } else {
                CancelStatus::NotCancellable
            }))
        }
        .await;
        observe("CancelFlightInfo", Some(&auth.name), t0, &r);
        let result = r?;
        let body = arrow_flight::Result {
            body: result.encode_to_vec().into(),
        };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(body)]))))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.into_builder().schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = self.databases(&auth).await;
        observe("GetCatalogs", Some(&auth.name), t0, &r);
        let mut b = query.into_builder();
        for d in r? {
            b.append(d.name);
        }
        one_batch(b.build())
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.clone().into_builder().schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = self.databases(&auth).await;
        observe("GetDbSchemas", Some(&auth.name), t0, &r);
        let mut b = query.into_builder();
        for d in r? {
            for s in &d.schemas {
                b.append(&d.name, &s.name);
            }
        }
        one_batch(b.build())
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.clone().into_builder().schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        let t0 = Instant::now();
        let auth = self.auth(&request).await?;
        let r = async {
            let databases = self.databases(&auth).await?;
            let mut rows = Vec::new();
            for d in &databases {
                if query.catalog.as_ref().is_some_and(|c| c != &d.name) {
                    continue;
                }
                for s in &d.schemas {
                    if query
                        .db_schema_filter_pattern
                        .as_ref()
                        .is_some_and(|p| !like(p, &s.name))
                    {
                        continue;
                    }
                    for t in &s.tables {
                        let kind = t.kind.to_uppercase();
                        let wanted = query
                            .table_name_filter_pattern
                            .as_ref()
                            .is_none_or(|p| like(p, &t.name))
                            && (query.table_types.is_empty() || query.table_types.contains(&kind));
                        if wanted {
                            rows.push((d.name.clone(), s.name.clone(), t.name.clone(), kind));
                        }
                    }
                }
            }
            if query.include_schema && rows.len() > MAX_SCHEMA_TABLES {
                return Err(Status::resource_exhausted(format!(
                    "{} tables match; with their schemas at most {MAX_SCHEMA_TABLES} are listed at once: narrow the filters",
                    rows.len()
                )));
            }
            let mut b = query.clone().into_builder();
            for (c, s, t, kind) in rows {
                let schema = if query.include_schema {
                    // The table's columns as a query of it returns them,
                    // with DuckDB's type names; what the caller may not
                    // read is not listed.
                    match catalog::table_schema(&self.state, &auth, &c, &s, &t).await? {
                        Some(schema) => schema,
                        None => continue,
                    }
                } else {
                    Arc::new(Schema::empty())
                };
                b.append(c, s, t, kind, &schema)
                    .map_err(|e| Status::internal(format!("building the answer: {e}")))?;
            }
            Ok(b.build())
        }
        .await;
        observe("GetTables", Some(&auth.name), t0, &r);
        one_batch(r?)
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.into_builder().schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.auth(&request).await?;
        let mut b = query.into_builder();
        b.append("TABLE");
        b.append("VIEW");
        one_batch(b.build())
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.clone().into_builder(&self.sql_info).schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.auth(&request).await?;
        one_batch(query.into_builder(&self.sql_info).build())
    }

    async fn get_flight_info_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        self.auth(&request).await?;
        let schema = query.into_builder(xdbc::type_info()).schema();
        command_info(query.as_any(), &schema, request.into_inner())
    }

    async fn do_get_xdbc_type_info(
        &self,
        query: CommandGetXdbcTypeInfo,
        request: Request<Ticket>,
    ) -> Result<Response<DoGetStream>, Status> {
        self.auth(&request).await?;
        one_batch(query.into_builder(xdbc::type_info()).build())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
