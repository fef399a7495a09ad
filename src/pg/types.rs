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

use std::error::Error;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as at, DataType, Field, IntervalUnit, TimeUnit};
use bytes::{BufMut, BytesMut};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::types::format::FormatOptions;
use pgwire::types::ToSqlText;
use postgres_types::{IsNull, ToSql};

use crate::pg::backend::Param;

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

/// The PostgreSQL array type of a list of `item`, and its element type:
/// one level of text (`array_agg` of names, which SQLAlchemy's reflection
/// reads as a list); other lists are DuckDB's text of them.
fn array_of(item: &Field) -> Option<(Type, Type)> {
    if !item.metadata().is_empty() {
        return None;
    }
    // Only text: asyncpg decodes `text[]` itself, but looks other arrays
    // up in catalog queries the guard refuses (`current_setting`).
    Some(match item.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 => (Type::TEXT_ARRAY, Type::TEXT),
        _ => return None,
    })
}

/// The elements of row `i` of a list column described as a PostgreSQL
/// array, and the element's type.
fn array_values(a: &dyn Array, i: usize, ty: &Type) -> Option<(ArrayRef, Type)> {
    let element = match *ty {
        Type::TEXT_ARRAY => Type::TEXT,
        Type::INT2_ARRAY => Type::INT2,
        Type::INT4_ARRAY => Type::INT4,
        Type::INT8_ARRAY => Type::INT8,
        _ => return None,
    };
    let values = match a.data_type() {
        DataType::List(_) => a.as_list::<i32>().value(i),
        DataType::LargeList(_) => a.as_list::<i64>().value(i),
        _ => return None,
    };
    Some((values, element))
}

/// PostgreSQL's text of a one-dimensional array (`{a,"b c",NULL}`).
fn array_text(values: &ArrayRef, element: &Type, out: &mut BytesMut) -> Result<(), BoxError> {
    out.put_u8(b'{');
    let mut item = BytesMut::new();
    for j in 0..values.len() {
        if j > 0 {
            out.put_u8(b',');
        }
        if values.is_null(j) {
            out.put_slice(b"NULL");
            continue;
        }
        item.clear();
        text(values.as_ref(), j, element, &mut item)?;
        let quote = item.is_empty()
            || item.eq_ignore_ascii_case(b"null")
            || item
                .iter()
                .any(|b| matches!(b, b'{' | b'}' | b',' | b'"' | b'\\') || b.is_ascii_whitespace());
        if quote {
            out.put_u8(b'"');
            for &b in item.iter() {
                if b == b'"' || b == b'\\' {
                    out.put_u8(b'\\');
                }
                out.put_u8(b);
            }
            out.put_u8(b'"');
        } else {
            out.put_slice(&item);
        }
    }
    out.put_u8(b'}');
    Ok(())
}

/// PostgreSQL's binary form of a one-dimensional array: dimensions, a
/// NULL flag, the element's oid, the length and lower bound, then each
/// element's length (-1: NULL) and binary form.
fn array_binary(values: &ArrayRef, element: &Type, out: &mut BytesMut) -> Result<(), BoxError> {
    let n = values.len();
    out.put_i32(i32::from(n > 0));
    out.put_i32(i32::from(values.null_count() > 0));
    out.put_u32(element.oid());
    if n > 0 {
        out.put_i32(i32::try_from(n)?);
        out.put_i32(1);
    }
    for j in 0..n {
        if values.is_null(j) {
            out.put_i32(-1);
            continue;
        }
        let at = out.len();
        out.put_i32(0);
        binary(values.as_ref(), j, element, out)?;
        let len = i32::try_from(out.len() - at - 4)?;
        out[at..at + 4].copy_from_slice(&len.to_be_bytes());
    }
    Ok(())
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

/// Writes the PostgreSQL text of a value that is not NULL.
pub fn text(a: &dyn Array, i: usize, ty: &Type, out: &mut BytesMut) -> Result<(), BoxError> {
    use std::fmt::Write;
    let mut w = Writer(out);
    match a.data_type() {
        DataType::Boolean => {
            w.0.put_u8(if a.as_boolean().value(i) { b't' } else { b'f' })
        }
        DataType::Int8 => write!(w, "{}", a.as_primitive::<at::Int8Type>().value(i))?,
        DataType::Int16 => write!(w, "{}", a.as_primitive::<at::Int16Type>().value(i))?,
        DataType::Int32 => write!(w, "{}", a.as_primitive::<at::Int32Type>().value(i))?,
        DataType::Int64 => write!(w, "{}", a.as_primitive::<at::Int64Type>().value(i))?,
        DataType::UInt8 => write!(w, "{}", a.as_primitive::<at::UInt8Type>().value(i))?,
        DataType::UInt16 => write!(w, "{}", a.as_primitive::<at::UInt16Type>().value(i))?,
        DataType::UInt32 => write!(w, "{}", a.as_primitive::<at::UInt32Type>().value(i))?,
        DataType::UInt64 => write!(w, "{}", a.as_primitive::<at::UInt64Type>().value(i))?,
        DataType::Float16 => float(
            &mut w,
            f64::from(a.as_primitive::<at::Float16Type>().value(i)),
            true,
        )?,
        DataType::Float32 => float(
            &mut w,
            f64::from(a.as_primitive::<at::Float32Type>().value(i)),
            true,
        )?,
        DataType::Float64 => float(&mut w, a.as_primitive::<at::Float64Type>().value(i), false)?,
        // From the raw integer: DuckDB exports HUGEINT as DECIMAL(38, 0),
        // whose values may have 39 digits, which Arrow's own rendering cuts.
        DataType::Decimal128(_, s) => w.write_str(&decimal_text(
            &a.as_primitive::<at::Decimal128Type>().value(i).to_string(),
            *s,
        ))?,
        DataType::Decimal256(_, s) => w.write_str(&decimal_text(
            &a.as_primitive::<at::Decimal256Type>().value(i).to_string(),
            *s,
        ))?,
        DataType::Utf8 => w.write_str(a.as_string::<i32>().value(i))?,
        DataType::LargeUtf8 => w.write_str(a.as_string::<i64>().value(i))?,
        DataType::FixedSizeBinary(16) if *ty == Type::UUID => {
            uuid_text(&mut w, a.as_fixed_size_binary().value(i))?
        }
        // DuckDB's opaque types (the column is described as what they are).
        DataType::Binary if *ty == Type::NUMERIC => {
            w.write_str(&bignum_text(a.as_binary::<i32>().value(i))?)?
        }
        DataType::Binary => bytea_text(&mut w, a.as_binary::<i32>().value(i))?,
        DataType::LargeBinary => bytea_text(&mut w, a.as_binary::<i64>().value(i))?,
        DataType::FixedSizeBinary(_) => bytea_text(&mut w, a.as_fixed_size_binary().value(i))?,
        DataType::Date32 => date_text(
            &mut w,
            i64::from(a.as_primitive::<at::Date32Type>().value(i)),
        )?,
        DataType::Date64 => date_text(
            &mut w,
            a.as_primitive::<at::Date64Type>()
                .value(i)
                .div_euclid(86_400_000),
        )?,
        DataType::Time32(_) | DataType::Time64(_) => time_text(&mut w, time_micros(a, i))?,
        DataType::Timestamp(unit, tz) => {
            let micros = timestamp_micros(a, i, *unit);
            timestamp_text(&mut w, micros)?;
            if tz.is_some() {
                w.write_str("+00")?;
            }
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            let (months, days, micros) = interval(a, i);
            interval_text(&mut w, months, days, micros)?
        }
        DataType::List(_) | DataType::LargeList(_) if array_values(a, i, ty).is_some() => {
            if let Some((values, element)) = array_values(a, i, ty) {
                array_text(&values, &element, w.0)?
            }
        }
        _ => nested_text(&mut w, a, i)?,
    }
    Ok(())
}

/// Writes the PostgreSQL binary form of a value that is not NULL, as `ty`
/// (the type the column was described with).
pub fn binary(a: &dyn Array, i: usize, ty: &Type, out: &mut BytesMut) -> Result<(), BoxError> {
    match a.data_type() {
        DataType::Boolean => out.put_u8(u8::from(a.as_boolean().value(i))),
        DataType::Int8 => out.put_i16(i16::from(a.as_primitive::<at::Int8Type>().value(i))),
        DataType::Int16 => out.put_i16(a.as_primitive::<at::Int16Type>().value(i)),
        DataType::UInt8 => out.put_i16(i16::from(a.as_primitive::<at::UInt8Type>().value(i))),
        DataType::Int32 => out.put_i32(a.as_primitive::<at::Int32Type>().value(i)),
        DataType::UInt16 => out.put_i32(i32::from(a.as_primitive::<at::UInt16Type>().value(i))),
        DataType::Int64 => out.put_i64(a.as_primitive::<at::Int64Type>().value(i)),
        DataType::UInt32 => out.put_i64(i64::from(a.as_primitive::<at::UInt32Type>().value(i))),
        DataType::Float16 => out.put_f32(f32::from(a.as_primitive::<at::Float16Type>().value(i))),
        DataType::Float32 => out.put_f32(a.as_primitive::<at::Float32Type>().value(i)),
        DataType::Float64 => out.put_f64(a.as_primitive::<at::Float64Type>().value(i)),
        DataType::UInt64 | DataType::Decimal128(_, _) | DataType::Decimal256(_, _) => {
            let mut t = BytesMut::new();
            text(a, i, ty, &mut t)?;
            numeric_binary(std::str::from_utf8(&t)?, out)?
        }
        DataType::FixedSizeBinary(16) if *ty == Type::UUID => {
            out.put_slice(a.as_fixed_size_binary().value(i))
        }
        DataType::Binary if *ty == Type::NUMERIC => {
            numeric_binary(&bignum_text(a.as_binary::<i32>().value(i))?, out)?
        }
        DataType::Binary => out.put_slice(a.as_binary::<i32>().value(i)),
        DataType::LargeBinary => out.put_slice(a.as_binary::<i64>().value(i)),
        DataType::FixedSizeBinary(_) => out.put_slice(a.as_fixed_size_binary().value(i)),
        DataType::Utf8 if *ty == Type::UUID => {
            out.put_slice(uuid::Uuid::parse_str(a.as_string::<i32>().value(i))?.as_bytes())
        }
        DataType::Date32 => out.put_i32(
            (i64::from(a.as_primitive::<at::Date32Type>().value(i)) - PG_EPOCH_DAYS)
                .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        ),
        DataType::Date64 => out.put_i32(
            (a.as_primitive::<at::Date64Type>()
                .value(i)
                .div_euclid(86_400_000)
                - PG_EPOCH_DAYS)
                .clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        ),
        DataType::Time32(_) | DataType::Time64(_) => out.put_i64(time_micros(a, i)),
        DataType::Timestamp(unit, _) => {
            out.put_i64(timestamp_micros(a, i, *unit).saturating_sub(PG_EPOCH_MICROS))
        }
        DataType::Interval(_) | DataType::Duration(_) => {
            let (months, days, micros) = interval(a, i);
            out.put_i64(micros);
            out.put_i32(days);
            out.put_i32(months);
        }
        DataType::List(_) | DataType::LargeList(_) if array_values(a, i, ty).is_some() => {
            if let Some((values, element)) = array_values(a, i, ty) {
                array_binary(&values, &element, out)?
            }
        }
        // Text, JSON and every type written as text: the binary form of
        // `text` and `json` is the text itself.
        _ => text(a, i, ty, out)?,
    }
    Ok(())
}

/// A decimal's text from its unscaled integer's and its scale.
fn decimal_text(raw: &str, scale: i8) -> String {
    let (sign, digits) = match raw.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", raw),
    };
    if scale <= 0 {
        let zeros = if digits == "0" { 0 } else { (-scale) as usize };
        return format!("{sign}{digits}{}", "0".repeat(zeros));
    }
    let scale = scale as usize;
    let padded = format!("{digits:0>width$}", width = scale + 1);
    let (int, frac) = padded.split_at(padded.len() - scale);
    format!("{sign}{int}.{frac}")
}

struct Writer<'a>(&'a mut BytesMut);

impl std::fmt::Write for Writer<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.put_slice(s.as_bytes());
        Ok(())
    }
}

/// PostgreSQL's text of a float (`extra_float_digits` ≥ 1, every client's
/// default since PostgreSQL 12): the shortest text that reads back to the
/// same value, `Infinity`, `-Infinity`, `NaN`.
fn float(w: &mut impl std::fmt::Write, v: f64, single: bool) -> std::fmt::Result {
    if v.is_nan() {
        return w.write_str("NaN");
    }
    if v.is_infinite() {
        return w.write_str(if v > 0.0 { "Infinity" } else { "-Infinity" });
    }
    let s = if single {
        format!("{:?}", v as f32)
    } else {
        format!("{v:?}")
    };
    // Rust writes `1.0` and `1e20`; PostgreSQL `1` and `1e+20`.
    let s = s.strip_suffix(".0").unwrap_or(&s);
    match s.split_once('e') {
        Some((m, e)) if !e.starts_with('-') => write!(w, "{m}e+{e}"),
        _ => w.write_str(s),
    }
}

fn bytea_text(w: &mut impl std::fmt::Write, b: &[u8]) -> std::fmt::Result {
    w.write_str("\\x")?;
    for byte in b {
        write!(w, "{byte:02x}")?;
    }
    Ok(())
}

/// The most bytes of a BIGNUM the door writes (about 39,000 digits, within
/// PostgreSQL's `numeric`); a larger one fails the statement (`54000`).
const MAX_BIGNUM_BYTES: usize = 16 * 1024;

/// A BIGNUM's decimal digits from DuckDB's blob: a 3-byte header (the top
/// bit set for a positive number, then the length), the magnitude's bytes
/// big-endian; a negative number's header and bytes are inverted.
fn bignum_text(b: &[u8]) -> Result<String, BoxError> {
    if b.len() < 3 {
        return Err("a BIGNUM shorter than its header".into());
    }
    let negative = b[0] & 0x80 == 0;
    let bytes: Vec<u8> = b[3..]
        .iter()
        .map(|&x| if negative { !x } else { x })
        .collect();
    if bytes.len() > MAX_BIGNUM_BYTES {
        return Err(format!(
            "value too large: a BIGNUM of {} bytes (the door writes up to {MAX_BIGNUM_BYTES})",
            bytes.len()
        )
        .into());
    }
    // Base 10^9 limbs, least significant first.
    let mut limbs: Vec<u32> = vec![0];
    for &byte in &bytes {
        let mut carry = u64::from(byte);
        for limb in limbs.iter_mut() {
            let v = u64::from(*limb) * 256 + carry;
            *limb = (v % 1_000_000_000) as u32;
            carry = v / 1_000_000_000;
        }
        while carry > 0 {
            limbs.push((carry % 1_000_000_000) as u32);
            carry /= 1_000_000_000;
        }
    }
    let mut out = String::with_capacity(limbs.len() * 9 + 1);
    let zero = limbs.iter().all(|&l| l == 0);
    if negative && !zero {
        out.push('-');
    }
    let mut it = limbs.iter().rev();
    out.push_str(&it.next().copied().unwrap_or(0).to_string());
    for l in it {
        out.push_str(&format!("{l:09}"));
    }
    Ok(out)
}

fn uuid_text(w: &mut impl std::fmt::Write, b: &[u8]) -> Result<(), BoxError> {
    write!(w, "{}", uuid::Uuid::from_slice(b)?)?;
    Ok(())
}

fn date_text(w: &mut impl std::fmt::Write, days: i64) -> std::fmt::Result {
    use chrono::Datelike;
    let Some(d) = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|e| e.checked_add_signed(chrono::TimeDelta::try_days(days)?))
    else {
        return w.write_str(if days > 0 { "infinity" } else { "-infinity" });
    };
    if d.year() <= 0 {
        write!(w, "{:04}-{:02}-{:02} BC", 1 - d.year(), d.month(), d.day())
    } else {
        write!(w, "{:04}-{:02}-{:02}", d.year(), d.month(), d.day())
    }
}

fn time_text(w: &mut impl std::fmt::Write, micros: i64) -> std::fmt::Result {
    let (h, rest) = (micros / 3_600_000_000, micros % 3_600_000_000);
    let (m, rest) = (rest / 60_000_000, rest % 60_000_000);
    let (s, frac) = (rest / 1_000_000, rest % 1_000_000);
    write!(w, "{h:02}:{m:02}:{s:02}")?;
    fraction(w, frac)
}

/// `.ffffff` without its trailing zeros; nothing for a whole second.
fn fraction(w: &mut impl std::fmt::Write, micros: i64) -> std::fmt::Result {
    if micros == 0 {
        return Ok(());
    }
    let digits = format!("{:06}", micros.abs());
    write!(w, ".{}", digits.trim_end_matches('0'))
}

fn timestamp_text(w: &mut impl std::fmt::Write, micros: i64) -> std::fmt::Result {
    let days = micros.div_euclid(86_400_000_000);
    let time = micros.rem_euclid(86_400_000_000);
    use chrono::Datelike;
    let Some(d) = chrono::NaiveDate::from_ymd_opt(1970, 1, 1)
        .and_then(|e| e.checked_add_signed(chrono::TimeDelta::try_days(days)?))
    else {
        return w.write_str(if micros > 0 { "infinity" } else { "-infinity" });
    };
    let bc = d.year() <= 0;
    let year = if bc { 1 - d.year() } else { d.year() };
    write!(w, "{:04}-{:02}-{:02} ", year, d.month(), d.day())?;
    time_text(w, time)?;
    if bc {
        w.write_str(" BC")?;
    }
    Ok(())
}

/// PostgreSQL's `postgres` interval style: `1 year 2 mons 3 days 04:05:06.5`.
fn interval_text(
    w: &mut impl std::fmt::Write,
    months: i32,
    days: i32,
    micros: i64,
) -> std::fmt::Result {
    let mut parts: Vec<String> = Vec::new();
    let (years, mons) = (months / 12, months % 12);
    // PostgreSQL writes the singular for exactly 1 (`-1 mons`).
    let plural = |n: i64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    if years != 0 {
        parts.push(plural(years.into(), "year", "years"));
    }
    if mons != 0 {
        parts.push(plural(mons.into(), "mon", "mons"));
    }
    if days != 0 {
        parts.push(plural(days.into(), "day", "days"));
    }
    if micros != 0 || parts.is_empty() {
        let sign = if micros < 0 { "-" } else { "" };
        let m = micros.unsigned_abs();
        let (h, rest) = (m / 3_600_000_000, m % 3_600_000_000);
        let (mi, rest) = (rest / 60_000_000, rest % 60_000_000);
        let (s, frac) = (rest / 1_000_000, rest % 1_000_000);
        let mut t = format!("{sign}{h:02}:{mi:02}:{s:02}");
        fraction(&mut t, frac as i64)?;
        parts.push(t);
    }
    w.write_str(&parts.join(" "))
}

fn time_micros(a: &dyn Array, i: usize) -> i64 {
    match a.data_type() {
        DataType::Time32(TimeUnit::Second) => {
            i64::from(a.as_primitive::<at::Time32SecondType>().value(i)) * 1_000_000
        }
        DataType::Time32(_) => {
            i64::from(a.as_primitive::<at::Time32MillisecondType>().value(i)) * 1_000
        }
        DataType::Time64(TimeUnit::Nanosecond) => {
            a.as_primitive::<at::Time64NanosecondType>().value(i) / 1_000
        }
        _ => a.as_primitive::<at::Time64MicrosecondType>().value(i),
    }
}

fn timestamp_micros(a: &dyn Array, i: usize, unit: TimeUnit) -> i64 {
    match unit {
        TimeUnit::Second => a
            .as_primitive::<at::TimestampSecondType>()
            .value(i)
            .saturating_mul(1_000_000),
        TimeUnit::Millisecond => a
            .as_primitive::<at::TimestampMillisecondType>()
            .value(i)
            .saturating_mul(1_000),
        TimeUnit::Microsecond => a.as_primitive::<at::TimestampMicrosecondType>().value(i),
        TimeUnit::Nanosecond => a
            .as_primitive::<at::TimestampNanosecondType>()
            .value(i)
            .div_euclid(1_000),
    }
}

/// An interval's months, days and microseconds.
fn interval(a: &dyn Array, i: usize) -> (i32, i32, i64) {
    match a.data_type() {
        DataType::Interval(IntervalUnit::MonthDayNano) => {
            let v = a.as_primitive::<at::IntervalMonthDayNanoType>().value(i);
            (v.months, v.days, v.nanoseconds / 1_000)
        }
        DataType::Interval(IntervalUnit::DayTime) => {
            let v = a.as_primitive::<at::IntervalDayTimeType>().value(i);
            (0, v.days, i64::from(v.milliseconds) * 1_000)
        }
        DataType::Interval(IntervalUnit::YearMonth) => {
            (a.as_primitive::<at::IntervalYearMonthType>().value(i), 0, 0)
        }
        DataType::Duration(unit) => {
            let (v, per_micro) = match unit {
                TimeUnit::Second => (a.as_primitive::<at::DurationSecondType>().value(i), -1),
                TimeUnit::Millisecond => (
                    a.as_primitive::<at::DurationMillisecondType>().value(i),
                    -1_000,
                ),
                TimeUnit::Microsecond => {
                    (a.as_primitive::<at::DurationMicrosecondType>().value(i), 1)
                }
                TimeUnit::Nanosecond => (
                    a.as_primitive::<at::DurationNanosecondType>().value(i),
                    1_000,
                ),
            };
            let micros = match per_micro {
                -1 => v.saturating_mul(1_000_000),
                -1_000 => v.saturating_mul(1_000),
                1 => v,
                _ => v / 1_000,
            };
            (0, 0, micros)
        }
        _ => (0, 0, 0),
    }
}

/// A nested value (LIST, ARRAY, STRUCT, MAP, UNION) as DuckDB renders it
/// as VARCHAR; any other type as Arrow displays it.
fn nested_text(w: &mut Writer<'_>, a: &dyn Array, i: usize) -> Result<(), BoxError> {
    use std::fmt::Write;
    let s = nested(a, i)?;
    w.write_str(&s)?;
    Ok(())
}

fn nested(a: &dyn Array, i: usize) -> Result<String, BoxError> {
    if null_at(a, i) {
        return Ok("NULL".into());
    }
    let list = |values: ArrayRef| -> Result<String, BoxError> {
        let items: Result<Vec<String>, BoxError> =
            (0..values.len()).map(|j| element(&values, j)).collect();
        Ok(format!("[{}]", items?.join(", ")))
    };
    match a.data_type() {
        DataType::List(_) => list(a.as_list::<i32>().value(i)),
        DataType::LargeList(_) => list(a.as_list::<i64>().value(i)),
        DataType::FixedSizeList(_, _) => list(a.as_fixed_size_list().value(i)),
        DataType::Struct(fields)
            if !fields.is_empty() && fields.iter().all(|f| f.name().is_empty()) =>
        {
            // An unnamed struct (`struct_values`, a row): `(1, x)`.
            let s = a.as_struct();
            let items: Result<Vec<String>, BoxError> =
                s.columns().iter().map(|c| element(c, i)).collect();
            Ok(format!("({})", items?.join(", ")))
        }
        DataType::Struct(fields) => {
            let s = a.as_struct();
            let items: Result<Vec<String>, BoxError> = fields
                .iter()
                .zip(s.columns())
                .map(|(f, c)| Ok(format!("'{}': {}", f.name(), element(c, i)?)))
                .collect();
            Ok(format!("{{{}}}", items?.join(", ")))
        }
        DataType::Map(_, _) => {
            let m = a.as_map();
            let entries = m.value(i);
            let (k, v) = (entries.column(0), entries.column(1));
            let items: Result<Vec<String>, BoxError> = (0..entries.len())
                .map(|j| Ok(format!("{}={}", element(k, j)?, element(v, j)?)))
                .collect();
            Ok(format!("{{{}}}", items?.join(", ")))
        }
        DataType::Union(_, _) => {
            let u = a.as_union();
            let (ty, off) = (u.type_id(i), u.value_offset(i));
            element(u.child(ty), off)
        }
        _ => {
            let options = arrow::util::display::FormatOptions::default().with_null("NULL");
            let f = arrow::util::display::ArrayFormatter::try_new(a, &options)?;
            Ok(f.value(i).to_string())
        }
    }
}

/// A value inside a nested one: strings quoted as DuckDB quotes them.
fn element(a: &ArrayRef, j: usize) -> Result<String, BoxError> {
    if null_at(a.as_ref(), j) {
        return Ok("NULL".into());
    }
    let a = plain(a)?;
    match a.data_type() {
        DataType::Utf8 | DataType::LargeUtf8 => {
            let mut t = BytesMut::new();
            text(a.as_ref(), j, &Type::TEXT, &mut t)?;
            Ok(quote_nested(std::str::from_utf8(&t)?))
        }
        DataType::List(_)
        | DataType::LargeList(_)
        | DataType::FixedSizeList(_, _)
        | DataType::Struct(_)
        | DataType::Map(_, _)
        | DataType::Union(_, _) => nested(a.as_ref(), j),
        DataType::Boolean => Ok(a.as_boolean().value(j).to_string()),
        DataType::Binary | DataType::LargeBinary => {
            let mut t = BytesMut::new();
            text(a.as_ref(), j, &Type::BYTEA, &mut t)?;
            Ok(String::from_utf8(t.to_vec())?)
        }
        // DuckDB writes `2.0` where PostgreSQL writes `2`, and `nan`, `inf`.
        DataType::Float32 => Ok(nested_float(
            f64::from(a.as_primitive::<at::Float32Type>().value(j)),
            || format!("{:?}", a.as_primitive::<at::Float32Type>().value(j)),
        )),
        DataType::Float64 => Ok(nested_float(
            a.as_primitive::<at::Float64Type>().value(j),
            || format!("{:?}", a.as_primitive::<at::Float64Type>().value(j)),
        )),
        _ => {
            let mut t = BytesMut::new();
            text(a.as_ref(), j, &Type::TEXT, &mut t)?;
            Ok(String::from_utf8(t.to_vec())?)
        }
    }
}

/// A float inside a nested value as DuckDB writes it.
fn nested_float(v: f64, finite: impl Fn() -> String) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v.is_infinite() {
        if v > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        finite()
    }
}

/// DuckDB quotes a string inside a nested value when it would not read
/// back as itself: when empty, `NULL`, padded, or holding a quote,
/// backslash, separator or bracket.
fn quote_nested(s: &str) -> String {
    let needs = s.is_empty()
        || s.eq_ignore_ascii_case("null")
        || s.starts_with(char::is_whitespace)
        || s.ends_with(char::is_whitespace)
        || s.contains(['\'', '"', '\\', ',', '[', ']', '{', '}', '(', ')', ':', '=']);
    if needs {
        format!("'{}'", s.replace('\\', "\\\\").replace('\'', "\\'"))
    } else {
        s.to_string()
    }
}

/// PostgreSQL's binary `numeric` of a decimal text (`-12.3400`).
fn numeric_binary(text: &str, out: &mut BytesMut) -> Result<(), BoxError> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if !int.bytes().chain(frac.bytes()).all(|b| b.is_ascii_digit()) {
        return Err(format!("not a decimal: {text}").into());
    }
    let dscale = frac.len() as u16;
    let int = int.trim_start_matches('0');
    // Base-10000 groups, aligned on the decimal point.
    let int_pad = (4 - int.len() % 4) % 4;
    let int_digits = format!("{}{}", "0".repeat(int_pad), int);
    let frac_pad = (4 - frac.len() % 4) % 4;
    let frac_digits = format!("{}{}", frac, "0".repeat(frac_pad));
    let mut groups: Vec<i16> = Vec::new();
    for chunk in int_digits
        .as_bytes()
        .chunks(4)
        .chain(frac_digits.as_bytes().chunks(4))
    {
        groups.push(std::str::from_utf8(chunk)?.parse()?);
    }
    let mut weight = (int_digits.len() / 4) as i16 - 1;
    // Leading and trailing zero groups are not sent.
    while groups.first() == Some(&0) {
        groups.remove(0);
        weight -= 1;
    }
    while groups.last() == Some(&0) {
        groups.pop();
    }
    if groups.is_empty() {
        weight = 0;
    }
    out.put_i16(groups.len() as i16);
    out.put_i16(weight);
    out.put_u16(if negative && !groups.is_empty() {
        0x4000
    } else {
        0
    });
    out.put_u16(dscale);
    for g in groups {
        out.put_i16(g);
    }
    Ok(())
}

/// The value a client bound for a parameter, for DuckDB: by the type the
/// client declared for it or the statement was described with (`ty`), in
/// the format it was sent in. Text goes to DuckDB as text, which DuckDB
/// casts to the parameter's type as it does any VARCHAR; numbers, booleans
/// and bytes keep their own types.
pub fn param(value: Option<&[u8]>, ty: Option<&Type>, binary: bool) -> Result<Param, String> {
    let Some(v) = value else {
        return Ok(Param::Null);
    };
    let ty = ty.unwrap_or(&Type::UNKNOWN);
    if !binary {
        let s = std::str::from_utf8(v).map_err(|_| "a text parameter is not UTF-8".to_string())?;
        return Ok(match *ty {
            Type::INT2 | Type::INT4 | Type::INT8 => s
                .trim()
                .parse::<i64>()
                .map(Param::Int)
                .map_err(|_| format!("invalid input syntax for type {}: \"{s}\"", ty.name()))?,
            Type::FLOAT4 | Type::FLOAT8 => {
                Param::Float(float_text(s).ok_or_else(|| {
                    format!("invalid input syntax for type {}: \"{s}\"", ty.name())
                })?)
            }
            Type::BOOL => Param::Bool(
                bool_text(s)
                    .ok_or_else(|| format!("invalid input syntax for type boolean: \"{s}\""))?,
            ),
            Type::BYTEA => Param::Blob(bytea_from_text(s)?),
            _ => Param::Text(s.to_string()),
        });
    }
    let fixed = |n: usize| -> Result<&[u8], String> {
        if v.len() == n {
            Ok(v)
        } else {
            Err(format!(
                "a binary {} parameter of {} bytes",
                ty.name(),
                v.len()
            ))
        }
    };
    Ok(match *ty {
        Type::BOOL => Param::Bool(fixed(1)?[0] != 0),
        Type::INT2 => {
            Param::Int(i16::from_be_bytes(fixed(2)?.try_into().unwrap_or_default()).into())
        }
        Type::INT4 => {
            Param::Int(i32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::INT8 => Param::Int(i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default())),
        Type::OID => {
            Param::Int(u32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::FLOAT4 => {
            Param::Float(f32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default()).into())
        }
        Type::FLOAT8 => Param::Float(f64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default())),
        Type::BYTEA => Param::Blob(v.to_vec()),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN | Type::JSON => {
            Param::Text(
                String::from_utf8(v.to_vec())
                    .map_err(|_| "a text parameter is not UTF-8".to_string())?,
            )
        }
        Type::UUID => Param::Text(
            uuid::Uuid::from_slice(v)
                .map_err(|_| "a binary uuid parameter is not 16 bytes".to_string())?
                .to_string(),
        ),
        Type::DATE => {
            let days = i32::from_be_bytes(fixed(4)?.try_into().unwrap_or_default());
            let mut s = String::new();
            date_text(&mut s, i64::from(days) + PG_EPOCH_DAYS).map_err(|e| e.to_string())?;
            Param::Text(s)
        }
        Type::TIMESTAMP | Type::TIMESTAMPTZ => {
            let micros = i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default());
            let mut s = String::new();
            timestamp_text(&mut s, micros.saturating_add(PG_EPOCH_MICROS))
                .map_err(|e| e.to_string())?;
            if *ty == Type::TIMESTAMPTZ {
                s.push_str("+00");
            }
            Param::Text(s)
        }
        Type::TIME => {
            let micros = i64::from_be_bytes(fixed(8)?.try_into().unwrap_or_default());
            let mut s = String::new();
            time_text(&mut s, micros).map_err(|e| e.to_string())?;
            Param::Text(s)
        }
        Type::NUMERIC => Param::Text(numeric_from_binary(v)?),
        _ => {
            return Err(format!(
                "a binary parameter of type {} is not supported: send it as text",
                ty.name()
            ))
        }
    })
}

fn float_text(s: &str) -> Option<f64> {
    match s.trim().to_ascii_lowercase().as_str() {
        "infinity" | "inf" | "+infinity" => Some(f64::INFINITY),
        "-infinity" | "-inf" => Some(f64::NEG_INFINITY),
        "nan" => Some(f64::NAN),
        t => t.parse().ok(),
    }
}

fn bool_text(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "t" | "true" | "yes" | "y" | "on" | "1" => Some(true),
        "f" | "false" | "no" | "n" | "off" | "0" => Some(false),
        _ => None,
    }
}

fn bytea_from_text(s: &str) -> Result<Vec<u8>, String> {
    let Some(hex) = s.strip_prefix("\\x") else {
        return Ok(s.as_bytes().to_vec());
    };
    let bytes = hex.as_bytes();
    if bytes.len() % 2 != 0 {
        return Err("invalid hexadecimal data: odd number of digits".into());
    }
    bytes
        .chunks(2)
        .map(|p| {
            std::str::from_utf8(p)
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| "invalid hexadecimal digit".to_string())
        })
        .collect()
}

/// The decimal text of PostgreSQL's binary `numeric`.
fn numeric_from_binary(v: &[u8]) -> Result<String, String> {
    let bad = || "a binary numeric parameter is malformed".to_string();
    let word = |at: usize| -> Result<i16, String> {
        v.get(at..at + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(bad)
    };
    let (n, weight, sign, dscale) = (word(0)?, word(2)?, word(4)? as u16, word(6)?);
    if sign == 0xC000 {
        return Ok("NaN".into());
    }
    let digits: Result<Vec<i16>, String> =
        (0..n.max(0) as usize).map(|k| word(8 + 2 * k)).collect();
    let digits = digits?;
    let mut int = String::new();
    for k in 0..=weight.max(-1) {
        let d = digits.get(k as usize).copied().unwrap_or(0);
        if int.is_empty() {
            int.push_str(&d.to_string());
        } else {
            int.push_str(&format!("{d:04}"));
        }
    }
    if int.is_empty() {
        int.push('0');
    }
    let mut frac = String::new();
    let first_frac = (weight + 1).max(0) as usize;
    let leading_zero_groups = (-(weight + 1)).max(0) as usize;
    for _ in 0..leading_zero_groups {
        frac.push_str("0000");
    }
    for d in digits.iter().skip(first_frac) {
        frac.push_str(&format!("{d:04}"));
    }
    let dscale = dscale.max(0) as usize;
    while frac.len() < dscale {
        frac.push('0');
    }
    frac.truncate(dscale);
    let sign = if sign == 0x4000 { "-" } else { "" };
    Ok(if frac.is_empty() {
        format!("{sign}{int}")
    } else {
        format!("{sign}{int}.{frac}")
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn numeric_round_trip(text: &str, expected: &str) {
        let mut out = BytesMut::new();
        numeric_binary(text, &mut out).unwrap();
        assert_eq!(numeric_from_binary(&out).unwrap(), expected, "{text}");
    }

    #[test]
    fn numerics_round_trip_through_the_binary_form() {
        for (t, e) in [
            ("0", "0"),
            ("12.3400", "12.3400"),
            ("-12.34", "-12.34"),
            ("10000", "10000"),
            ("0.0001", "0.0001"),
            (
                "123456789012345678901234567890.5",
                "123456789012345678901234567890.5",
            ),
            ("-0.00000001", "-0.00000001"),
        ] {
            numeric_round_trip(t, e);
        }
    }

    #[test]
    fn decimals_keep_every_digit() {
        // HUGEINT's largest value has 39 digits in a DECIMAL(38, 0).
        assert_eq!(
            decimal_text("170141183460469231731687303715884105727", 0),
            "170141183460469231731687303715884105727"
        );
        assert_eq!(decimal_text("-5", 2), "-0.05");
        assert_eq!(decimal_text("12345", 2), "123.45");
        assert_eq!(decimal_text("0", 3), "0.000");
    }

    #[test]
    fn intervals_read_as_postgresql_writes_them() {
        let mut s = String::new();
        interval_text(
            &mut s,
            14,
            3,
            4 * 3_600_000_000 + 5 * 60_000_000 + 6_500_000,
        )
        .unwrap();
        assert_eq!(s, "1 year 2 mons 3 days 04:05:06.5");
        let mut s = String::new();
        interval_text(&mut s, 0, 0, 0).unwrap();
        assert_eq!(s, "00:00:00");
        let mut s = String::new();
        interval_text(&mut s, -1, -1, -1_000_000).unwrap();
        assert_eq!(s, "-1 mons -1 days -00:00:01");
    }

    #[test]
    fn floats_read_as_postgresql_writes_them() {
        let f = |v: f64| {
            let mut s = String::new();
            float(&mut s, v, false).unwrap();
            s
        };
        assert_eq!(f(1.0), "1");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(1e20), "1e+20");
        assert_eq!(f(1.5e-7), "1.5e-7");
        assert_eq!(f(f64::NEG_INFINITY), "-Infinity");
    }

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// DuckDB's blobs of BIGNUMs (its Arrow export, read by Python DuckDB
    /// 1.5.5) and the text DuckDB casts them to.
    #[test]
    fn bignums_read_as_duckdb_writes_them() {
        for (blob, want) in [
            (
                "80000d018ee90ff6c373e0ee4e3f0ad2",
                "123456789012345678901234567890",
            ),
            (
                "7ffff2fe7116f0093c8c1f11b1c0f52d",
                "-123456789012345678901234567890",
            ),
            ("80000100", "0"),
            ("7ffffefe", "-1"),
            ("800001ff", "255"),
            ("7ffffdfeff", "-256"),
        ] {
            assert_eq!(bignum_text(&hex(blob)).unwrap(), want, "{blob}");
        }
    }
}
