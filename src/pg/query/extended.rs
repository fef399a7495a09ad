//! The extended query protocol: `Parse`, `Bind`, `Describe` and
//! `Execute`.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::portal::{Format, Portal};
use pgwire::api::query::ExtendedQueryHandler;
use pgwire::api::results::{
    DescribePortalResponse, DescribeResponse as _, DescribeStatementResponse, FieldFormat,
    FieldInfo, Response,
};
use pgwire::api::stmt::{QueryParser, StoredStatement};
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, Type};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::extendedquery::Execute;
use pgwire::messages::PgWireBackendMessage;

use crate::pg::backend;
use crate::pg::errors::{self, code};
use crate::pg::session::Command;
use crate::pg::types;

use super::{session, Prepared, Queries};

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
pub(super) fn params(portal: &Portal<Prepared>) -> PgWireResult<Vec<backend::Param>> {
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

    /// A portal's every row streamed as it comes ([`Queries::execute_whole`]);
    /// else pgwire's own handling.
    async fn on_execute<C>(&self, client: &mut C, message: Execute) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore<Statement = Prepared>,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if self.execute_whole(client, &message).await? {
            return Ok(());
        }
        self._on_execute(client, message).await
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
            // Sent by `on_execute`.
            Command::CopyOut(_) => Err(errors::error(
                code::PROTOCOL,
                "the door answers a COPY in on_execute",
            )),
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
pub(super) fn key(portal: &Portal<Prepared>) -> usize {
    portal as *const Portal<Prepared> as usize
}
