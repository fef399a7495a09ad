//! Statement parameters as Flight SQL clients bind them: the rows of a
//! DoPut's batches, each value as a [`Param`].

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as types, DataType};
use arrow::util::display::{ArrayFormatter, FormatOptions};
use arrow_flight::error::FlightError;
use arrow_flight::sql::server::PeekableFlightDataStream;
use futures::{StreamExt, TryStreamExt};
use tonic::Status;

use crate::engine::Param;
use crate::flight::status;

/// Parameter rows a DoPut may bind.
pub(crate) const MAX_PARAM_ROWS: usize = 10_000;

/// Row `i` of a parameter column as a statement parameter: numbers,
/// booleans, text and bytes as themselves, other types as their text
/// (DuckDB casts it to the parameter's type).
pub(crate) fn param_of(a: &ArrayRef, i: usize) -> Result<Param, Status> {
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
pub(crate) async fn read_params(
    stream: PeekableFlightDataStream,
) -> Result<Vec<Vec<Param>>, Status> {
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
