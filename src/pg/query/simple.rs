//! The simple query protocol: each statement of a `Query` answered as it
//! runs.

use std::fmt::Debug;

use async_trait::async_trait;
use futures::{Sink, SinkExt};
use pgwire::api::query::{send_ready_for_query, SimpleQueryHandler};
use pgwire::api::results::Response;
use pgwire::api::store::PortalStore;
use pgwire::api::{ClientInfo, ClientPortalStore, PgWireConnectionState};
use pgwire::error::{PgWireError, PgWireResult};
use pgwire::messages::response::EmptyQueryResponse;
use pgwire::messages::simplequery::Query;
use pgwire::messages::PgWireBackendMessage;

use crate::pg::errors::{self, code};

use super::{send, session, Queries};

#[async_trait]
impl SimpleQueryHandler for Queries {
    /// pgwire's `on_query`, but each statement's answer is sent before the
    /// next starts (so two never hold connections at once) and a COPY is
    /// sent by the door ([`Queries::send_copy`]).
    async fn on_query<C>(&self, client: &mut C, query: Query) -> PgWireResult<()>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if !matches!(client.state(), PgWireConnectionState::ReadyForQuery) {
            return Err(PgWireError::NotReadyForQuery);
        }
        let mut status = client.transaction_status();
        client.set_state(PgWireConnectionState::QueryInProgress);
        let session = session(client)?;
        let text = query.query;
        let pieces = session::split(&text);
        if pieces.is_empty() {
            client
                .feed(PgWireBackendMessage::EmptyQueryResponse(
                    EmptyQueryResponse::new(),
                ))
                .await?;
        }
        for sql in &pieces {
            match self.simple(client, &session, sql).await {
                Ok(Some(response)) => status = send(client, response, status).await?,
                Ok(None) => {}
                // PostgreSQL stops a simple query at its first error.
                Err(PgWireError::UserError(mut info)) => {
                    // The position is in the statement; the client counts
                    // from the start of the text it sent.
                    let before = sql.as_ptr() as usize - text.as_ptr() as usize;
                    info.position = info
                        .position
                        .as_deref()
                        .and_then(|p| p.parse::<usize>().ok())
                        .map(|p| (p + text[..before].chars().count()).to_string());
                    status = send(client, Response::Error(info), status).await?;
                    break;
                }
                Err(e) => return Err(e),
            }
        }
        client.set_state(PgWireConnectionState::ReadyForQuery);
        client.set_transaction_status(status);
        send_ready_for_query(client, status).await
    }

    /// Not called: [`Self::on_query`] runs and sends each statement.
    async fn do_query<C>(&self, _client: &mut C, _query: &str) -> PgWireResult<Vec<Response>>
    where
        C: ClientInfo + ClientPortalStore + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::PortalStore: PortalStore,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        Err(errors::error(
            code::PROTOCOL,
            "the door answers a simple query in on_query",
        ))
    }
}
