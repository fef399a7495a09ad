//! JSON values: the rules arrow-json's defaults do not follow, supplied
//! through its `EncoderFactory` hook. Integers and decimals beyond 2^53 become
//! strings (JavaScript clients would round them), NaN/Infinity strings (JSON
//! has no such numbers), binary base64, DuckDB's infinite dates and
//! `24:00:00` DuckDB's words, dates of any year ISO 8601, unions their value,
//! maps objects, unnamed structs arrays and repeated field names DuckDB's
//! column rule.

use arrow::array::Array;
use arrow::datatypes::{Field, FieldRef};
use arrow::error::ArrowError;
use arrow::json::writer::{EncoderFactory, EncoderOptions, NullableEncoder};

mod nested;
mod numbers;
mod text;
mod times;
mod variant;

use nested::nested_encoder;
use numbers::number_encoder;
use text::binary_encoder;
use times::time_encoder;
use variant::variant_encoder;

/// The JSON rules arrow-json does not apply by default.
#[derive(Debug)]
pub(super) struct JsonRules;

impl EncoderFactory for JsonRules {
    fn make_default_encoder<'a>(
        &self,
        field: &'a FieldRef,
        array: &'a dyn Array,
        options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        // The field's own type where it describes this array: the schema's
        // field carries marks (see `marks`) the exported batch does not.
        // arrow-json hands a list's elements and a map's keys and values the
        // list's or map's own field; then the array's type serves.
        let data_type = if field.data_type().equals_datatype(array.data_type()) {
            field.data_type()
        } else {
            array.data_type()
        };
        let enc = if let Some(enc) = variant_encoder(field, data_type, array, options)? {
            enc
        } else if let Some(enc) = number_encoder(field, data_type, array)
            .or_else(|| time_encoder(data_type, array))
            .or_else(|| binary_encoder(data_type, array))
        {
            enc
        } else if let Some(enc) = nested_encoder(data_type, array, options)? {
            enc
        } else {
            return Ok(None);
        };
        Ok(Some(NullableEncoder::new(enc, nulls)))
    }
}

/// The DuckDB type a top-level column was declared with (field metadata set
/// by the executor), e.g. `UHUGEINT`.
fn duckdb_type(field: &Field) -> Option<&str> {
    field.metadata().get(DUCKDB_TYPE_KEY).map(String::as_str)
}

/// Field metadata key that carries DuckDB's type name of a result column.
pub const DUCKDB_TYPE_KEY: &str = "duckgate.duckdb_type";
