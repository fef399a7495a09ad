//! DuckDB's values as PostgreSQL's: the type a result column is described
//! with, each value in the text and the binary formats, and the values of
//! parameters a client binds. The result arrives as DuckDB's Arrow export;
//! the mapping (also in docs/postgres.md):
//!
//! | DuckDB | Arrow | PostgreSQL |
//! |---|---|---|
//! | BOOLEAN | Boolean | `bool` |
//! | TINYINT, SMALLINT, UTINYINT | Int8, Int16, UInt8 | `int2` |
//! | INTEGER, USMALLINT | Int32, UInt16 | `int4` |
//! | BIGINT, UINTEGER | Int64, UInt32 | `int8` |
//! | UBIGINT, HUGEINT, UHUGEINT, DECIMAL(p,s) | UInt64, Decimal128/256 | `numeric` (typmod `(p,s)` for a DECIMAL) |
//! | FLOAT, DOUBLE | Float32, Float64 | `float4`, `float8` |
//! | VARCHAR | Utf8 | `text` |
//! | BLOB | Binary | `bytea` |
//! | UUID | Utf8 marked `duckgate.duckdb_type` = `UUID` (or FixedSizeBinary(16) `arrow.uuid`) | `uuid` |
//! | DATE | Date32 | `date` |
//! | TIME | Time64 | `time` |
//! | TIMESTAMP (any unit) | Timestamp | `timestamp` |
//! | TIMESTAMP WITH TIME ZONE | Timestamp with a zone | `timestamptz`, written in UTC (`+00`) |
//! | INTERVAL | Interval(MonthDayNano) | `interval` (microseconds: PostgreSQL keeps no nanoseconds) |
//! | BIGNUM | Binary, `arrow.opaque` `bignum` | `numeric`, every digit |
//! | LIST of VARCHAR | List(Utf8) | `text[]` |
//! | other LISTs, ARRAY, STRUCT, MAP, UNION | nested | `text`, rendered as DuckDB renders them (`[1, 2]`, `{'a': 1}`, `{k=v}`) |
//! | anything else | | `text`, Arrow's rendering |

mod array;
mod binary;
mod nested;
mod params;
mod text;

use std::error::Error;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field};
use bytes::BytesMut;
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{IsNull, ToSql};

use array::array_of;
pub use binary::binary;
pub use params::param;
pub use text::text;

type BoxError = Box<dyn Error + Sync + Send>;

/// Days from 1970-01-01 (Arrow's epoch) to 2000-01-01 (PostgreSQL's).
const PG_EPOCH_DAYS: i64 = 10_957;
/// The same in microseconds.
const PG_EPOCH_MICROS: i64 = PG_EPOCH_DAYS * 86_400_000_000;

/// The PostgreSQL type a column of `field` is described with, and its
/// type modifier (a DECIMAL's precision and scale; -1: none).
pub fn pg_type(field: &Field) -> (Type, i32) {
    if is_bignum(field) {
        return (Type::NUMERIC, -1);
    }
    match field.data_type() {
        DataType::Boolean => (Type::BOOL, -1),
        DataType::Int8 | DataType::Int16 | DataType::UInt8 => (Type::INT2, -1),
        DataType::Int32 | DataType::UInt16 => (Type::INT4, -1),
        DataType::Int64 | DataType::UInt32 => (Type::INT8, -1),
        DataType::UInt64 => (Type::NUMERIC, -1),
        DataType::Float16 | DataType::Float32 => (Type::FLOAT4, -1),
        DataType::Float64 => (Type::FLOAT8, -1),
        DataType::Decimal128(p, s) | DataType::Decimal256(p, s) => {
            if *s >= 0 {
                (
                    Type::NUMERIC,
                    ((i32::from(*p) << 16) | i32::from(*s as u8)) + 4,
                )
            } else {
                (Type::NUMERIC, -1)
            }
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => {
            if is_uuid(field) {
                (Type::UUID, -1)
            } else if is_json(field) {
                (Type::JSON, -1)
            } else {
                (Type::TEXT, -1)
            }
        }
        DataType::FixedSizeBinary(16) if is_uuid(field) => (Type::UUID, -1),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => (Type::BYTEA, -1),
        DataType::Date32 | DataType::Date64 => (Type::DATE, -1),
        DataType::Time32(_) | DataType::Time64(_) => (Type::TIME, -1),
        DataType::Timestamp(_, None) => (Type::TIMESTAMP, -1),
        DataType::Timestamp(_, Some(_)) => (Type::TIMESTAMPTZ, -1),
        DataType::Interval(_) | DataType::Duration(_) => (Type::INTERVAL, -1),
        DataType::Dictionary(_, v) => pg_type(&Field::new(field.name(), (**v).clone(), true)),
        DataType::List(item) | DataType::LargeList(item) => match array_of(item) {
            Some((array, _)) => (array, -1),
            None => (Type::TEXT, -1),
        },
        _ => (Type::TEXT, -1),
    }
}

/// Whether a column holds UUIDs: Arrow's canonical `arrow.uuid` (16
/// bytes), or the text DuckDB's Arrow export carries them as, which the
/// engine marks `duckgate.duckdb_type` = `UUID`.
fn is_uuid(field: &Field) -> bool {
    let m = field.metadata();
    m.get("ARROW:extension:name")
        .is_some_and(|n| n == "arrow.uuid")
        || m.get(crate::pg::backend::DUCKDB_TYPE_KEY)
            .is_some_and(|t| t == "UUID")
}

/// Whether a column is a BIGNUM: DuckDB exports it as an opaque Arrow
/// extension (`arrow.opaque`, `type_name` `bignum`) over its blob.
fn is_bignum(field: &Field) -> bool {
    let m = field.metadata();
    if m.get("ARROW:extension:name").map(String::as_str) != Some("arrow.opaque") {
        return false;
    }
    m.get("ARROW:extension:metadata")
        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
        .is_some_and(|meta| meta.get("type_name").and_then(|n| n.as_str()) == Some("bignum"))
}

fn is_json(field: &Field) -> bool {
    field
        .metadata()
        .get("ARROW:extension:name")
        .is_some_and(|n| n == "arrow.json")
}

/// The fields of a result's row description, each in the format the client
/// asked for (`format(i)`).
pub fn fields(
    schema: &arrow::datatypes::Schema,
    format: impl Fn(usize) -> FieldFormat,
) -> Vec<FieldInfo> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let (ty, typmod) = pg_type(f);
            FieldInfo::new(f.name().clone(), None, None, ty, format(i)).with_type_modifier(typmod)
        })
        .collect()
}

/// A column of a batch as the door writes it: dictionaries and views
/// unpacked to plain arrays.
pub fn plain(column: &ArrayRef) -> Result<ArrayRef, arrow::error::ArrowError> {
    match column.data_type() {
        DataType::Dictionary(_, v) => arrow::compute::cast(column, v),
        DataType::Utf8View => arrow::compute::cast(column, &DataType::Utf8),
        DataType::BinaryView => arrow::compute::cast(column, &DataType::Binary),
        DataType::RunEndEncoded(_, v) => arrow::compute::cast(column, v.data_type()),
        _ => Ok(column.clone()),
    }
}

/// One value of a result: row `row` of `array`, described as `ty`.
pub struct Cell<'a> {
    /// The column (see [`plain`]).
    pub array: &'a dyn Array,
    /// The row.
    pub row: usize,
}

impl std::fmt::Debug for Cell<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cell({:?}, {})", self.array.data_type(), self.row)
    }
}

impl ToSqlText for Cell<'_> {
    fn to_sql_text(
        &self,
        ty: &Type,
        out: &mut BytesMut,
        _options: &FormatOptions,
    ) -> Result<IsNull, BoxError> {
        if null_at(self.array, self.row) {
            return Ok(IsNull::Yes);
        }
        text(self.array, self.row, ty, out)?;
        Ok(IsNull::No)
    }
}

impl ToSql for Cell<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        if null_at(self.array, self.row) {
            return Ok(IsNull::Yes);
        }
        binary(self.array, self.row, ty, out)?;
        Ok(IsNull::No)
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    postgres_types::to_sql_checked!();
}

/// Whether a value is NULL: a union's is its member's (Arrow's unions have
/// no validity of their own).
pub fn null_at(a: &dyn Array, i: usize) -> bool {
    if a.is_null(i) {
        return true;
    }
    if let DataType::Union(_, _) = a.data_type() {
        let u = a.as_union();
        return u.child(u.type_id(i)).is_null(u.value_offset(i));
    }
    false
}

/// The PostgreSQL type a parameter DuckDB typed as `field` is described
/// with; DuckDB's "any" (Arrow's Null) as `text`, which every client can
/// send and DuckDB casts.
pub fn param_type(field: &Field) -> Type {
    match field.data_type() {
        DataType::Null => Type::TEXT,
        _ => pg_type(field).0,
    }
}

/// The described fields of a result schema, in text (for a statement not
/// yet bound: the formats are the portal's).
pub fn described(schema: &Arc<arrow::datatypes::Schema>) -> Vec<FieldInfo> {
    fields(schema, |_| FieldFormat::Text)
}
