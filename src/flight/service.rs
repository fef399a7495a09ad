//! The Flight SQL service: each call is identified as every door identifies
//! it ([`crate::identity::Authenticator`]), runs statements through
//! [`results::start`] and keeps what a client fetches later in [`Tickets`];
//! parameters are read by [`crate::flight::params`], answers built by
//! [`crate::flight::answers`], catalog calls answered by [`catalog`].
//! One `impl FlightSqlService` holds every call: the trait's methods cannot
//! be split between files.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::AsArray;
use arrow::datatypes::{self as types, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::SqlInfoData;
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
    FlightEndpoint, FlightInfo, HandshakeRequest, HandshakeResponse, SchemaAsIpc, SchemaResult,
    Ticket,
};
use futures::{Stream, StreamExt};
use prost::Message;
use tonic::{Request, Response, Status, Streaming};

use crate::core::state::AppState;
use crate::engine::Param;
use crate::flight::answers::{
    command_info, handle_of_info, ipc_schema, one_batch, sql_info, DoGetStream,
};
use crate::flight::catalog;
use crate::flight::options::CallOptions;
use crate::flight::params::read_params;
use crate::flight::results::{self, Started};
use crate::flight::status;
use crate::flight::tickets::{self, Tickets};
use crate::flight::xdbc;
use crate::identity::Identity;

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
        let mut batches = results::batches(started.answer);
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
        Ok(Response::new(results::flight_data(started.answer)))
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
            catalog::tables(&self.state, &auth, &databases, &query).await
        }
        .await;
        observe("GetTables", Some(&auth.name), t0, &r);
        one_batch(Ok(r?))
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
