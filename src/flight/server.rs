//! The gRPC service the listener serves: arrow-flight's Flight SQL dispatch
//! (the `FlightService` it implements for every [`FlightSqlService`], here
//! [`FlightSql`]) for every call but `GetSchema`, which that dispatch
//! answers `Unimplemented` and which clients use to read a statement's
//! columns without running it (ADBC's `ExecuteSchema` of an unprepared
//! statement, pyarrow's `get_schema`): [`FlightSql::get_schema_of`].
//!
//! [`FlightSqlService`]: arrow_flight::sql::server::FlightSqlService

use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo,
    SchemaResult, Ticket,
};
use tonic::{Request, Response, Status, Streaming};

use crate::flight::service::FlightSql;

/// [`FlightSql`] with `GetSchema`.
pub struct Server {
    /// Every call's handler.
    pub inner: FlightSql,
}

#[tonic::async_trait]
impl FlightService for Server {
    type HandshakeStream = <FlightSql as FlightService>::HandshakeStream;
    type ListFlightsStream = <FlightSql as FlightService>::ListFlightsStream;
    type DoGetStream = <FlightSql as FlightService>::DoGetStream;
    type DoPutStream = <FlightSql as FlightService>::DoPutStream;
    type DoExchangeStream = <FlightSql as FlightService>::DoExchangeStream;
    type DoActionStream = <FlightSql as FlightService>::DoActionStream;
    type ListActionsStream = <FlightSql as FlightService>::ListActionsStream;

    async fn handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> Result<Response<Self::HandshakeStream>, Status> {
        FlightService::handshake(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn list_flights(
        &self,
        request: Request<Criteria>,
    ) -> Result<Response<Self::ListFlightsStream>, Status> {
        FlightService::list_flights(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn get_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<FlightInfo>, Status> {
        FlightService::get_flight_info(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn poll_flight_info(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<PollInfo>, Status> {
        FlightService::poll_flight_info(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn get_schema(
        &self,
        request: Request<FlightDescriptor>,
    ) -> Result<Response<SchemaResult>, Status> {
        self.inner.get_schema_of(request).await.map_err(undecodable)
    }

    async fn do_get(
        &self,
        request: Request<Ticket>,
    ) -> Result<Response<Self::DoGetStream>, Status> {
        FlightService::do_get(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn do_put(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoPutStream>, Status> {
        FlightService::do_put(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn do_exchange(
        &self,
        request: Request<Streaming<FlightData>>,
    ) -> Result<Response<Self::DoExchangeStream>, Status> {
        FlightService::do_exchange(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn do_action(
        &self,
        request: Request<Action>,
    ) -> Result<Response<Self::DoActionStream>, Status> {
        FlightService::do_action(&self.inner, request)
            .await
            .map_err(undecodable)
    }

    async fn list_actions(
        &self,
        request: Request<Empty>,
    ) -> Result<Response<Self::ListActionsStream>, Status> {
        FlightService::list_actions(&self.inner, request)
            .await
            .map_err(undecodable)
    }
}

/// A request arrow-flight could not decode is the client's: its dispatch
/// answers INTERNAL for a command whose bytes are no valid message (a
/// query that is not UTF-8, say), where gRPC's code for bad input is
/// INVALID_ARGUMENT.
fn undecodable(status: Status) -> Status {
    if status.code() == tonic::Code::Internal
        && status
            .message()
            .starts_with("ParseError(\"Unable to decode Any value")
    {
        Status::invalid_argument(format!(
            "the command could not be decoded (a string that is not UTF-8?): {}",
            status.message()
        ))
    } else {
        status
    }
}
