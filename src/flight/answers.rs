//! What the Flight SQL service answers with: FlightInfos (a command's own
//! ticket, a schema as IPC), batches as Flight data, GetSqlInfo's values, and
//! the result handle a FlightInfo carries.

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow::ipc::writer::IpcWriteOptions;
use arrow_flight::encode::{DictionaryHandling, FlightDataEncoderBuilder};
use arrow_flight::error::FlightError;
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{Any, SqlInfo, TicketStatementQuery};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, IpcMessage, SchemaAsIpc, Ticket};
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use prost::Message;
use tonic::{Response, Status};

use crate::flight::status;
use crate::flight::tickets::{self, Handle};

/// A DoGet's answer: Flight data or the status that ended it.
pub(crate) type DoGetStream = BoxStream<'static, Result<arrow_flight::FlightData, Status>>;

/// A FlightInfo whose ticket is the command itself (metadata calls: the
/// DoGet authenticates again and reads the catalog then).
pub(crate) fn command_info(
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
pub(crate) fn ipc_schema(schema: &Schema) -> Result<bytes::Bytes, Status> {
    let IpcMessage(bytes) = SchemaAsIpc::new(schema, &IpcWriteOptions::default())
        .try_into()
        .map_err(|e: arrow::error::ArrowError| {
            Status::internal(format!("encoding a schema: {e}"))
        })?;
    Ok(bytes)
}

/// Batches as Flight data; dictionaries pass as DuckDB made them.
pub(crate) fn flight_data(
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

pub(crate) fn one_batch(
    batch: Result<RecordBatch, FlightError>,
) -> Result<Response<DoGetStream>, Status> {
    let batch = batch.map_err(|e| Status::internal(format!("building the answer: {e}")))?;
    let schema = batch.schema();
    Ok(Response::new(flight_data(
        schema,
        futures::stream::iter([Ok(batch)]).boxed(),
    )))
}

/// GetSqlInfo's answer.
pub(crate) fn sql_info(read_only: bool, duckdb_version: &str) -> SqlInfoData {
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

/// The result handle in a FlightInfo's first ticket (a cancel's target).
pub(crate) fn handle_of_info(info: &FlightInfo) -> Result<Handle, Status> {
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
