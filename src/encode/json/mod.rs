//! JSON values: the rules arrow-json's defaults do not follow, supplied
//! through its `EncoderFactory` hook. Integers and decimals beyond 2^53 become
//! strings (JavaScript clients would round them), NaN/Infinity strings (JSON
//! has no such numbers), binary base64, DuckDB's infinite dates and
//! `24:00:00` DuckDB's words, dates of any year ISO 8601, unions their value,
//! maps objects, unnamed structs arrays and repeated field names DuckDB's
//! column rule.

use arrow::array::{Array, AsArray, StringArray, UnionArray};
use arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Field, FieldRef, Float16Type, Float32Type,
    Float64Type, Int64Type, IntervalUnit, UInt64Type,
};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use base64::Engine as _;
use serde_json::ser::{CompactFormatter, Formatter as _};

use super::{dedup_names, marks};

/// Largest integer a JSON consumer using doubles represents exactly.
const MAX_SAFE_INTEGER: u64 = 1 << 53;

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
        let enc: Box<dyn Encoder + 'a> = match data_type {
            // A VARIANT, as DuckDB's JSON of it: the JSON value itself.
            DataType::Utf8 if marks::is_variant(field) => {
                let a = array.as_string::<i32>();
                Box::new(VariantJson(move |i| a.value(i)))
            }
            DataType::LargeUtf8 if marks::is_variant(field) => {
                let a = array.as_string::<i64>();
                Box::new(VariantJson(move |i| a.value(i)))
            }
            DataType::Utf8View if marks::is_variant(field) => {
                let a = array.as_string_view();
                Box::new(VariantJson(move |i| a.value(i)))
            }
            // Lists of VARIANTs (at any depth): the elements get their own
            // field, which says so.
            DataType::List(child) if marks::holds_variant(data_type) => {
                let a = array.as_list::<i32>();
                let values = make_encoder(child, a.values().as_ref(), options)?;
                let offsets = a.value_offsets();
                Box::new(ListEncoder {
                    bounds: Box::new(move |i| (offsets[i] as usize, offsets[i + 1] as usize)),
                    values,
                })
            }
            DataType::LargeList(child) if marks::holds_variant(data_type) => {
                let a = array.as_list::<i64>();
                let values = make_encoder(child, a.values().as_ref(), options)?;
                let offsets = a.value_offsets();
                Box::new(ListEncoder {
                    bounds: Box::new(move |i| (offsets[i] as usize, offsets[i + 1] as usize)),
                    values,
                })
            }
            DataType::FixedSizeList(child, size) if marks::holds_variant(data_type) => {
                let a = array.as_fixed_size_list();
                let values = make_encoder(child, a.values().as_ref(), options)?;
                let size = *size as usize;
                Box::new(ListEncoder {
                    bounds: Box::new(move |i| (i * size, (i + 1) * size)),
                    values,
                })
            }
            DataType::Struct(fields)
                if marks::holds_variant(data_type)
                    && !fields.is_empty()
                    && !fields.iter().all(|f| f.name().is_empty()) =>
            {
                let keys = Some(dedup_names(fields.iter().map(|f| f.name().as_str())));
                let children = fields
                    .iter()
                    .zip(array.as_struct().columns())
                    .map(|(f, c)| make_encoder(f, c.as_ref(), options))
                    .collect::<Result<Vec<_>, _>>()?;
                Box::new(StructEncoder { keys, children })
            }
            DataType::Int64 => Box::new(SafeInt(array.as_primitive::<Int64Type>())),
            DataType::UInt64 => Box::new(SafeUInt(array.as_primitive::<UInt64Type>())),
            DataType::Float16 => Box::new(Float(|i| {
                array.as_primitive::<Float16Type>().value(i).to_f32()
            })),
            DataType::Float32 => Box::new(Float(|i| array.as_primitive::<Float32Type>().value(i))),
            DataType::Float64 => Box::new(Float(|i| array.as_primitive::<Float64Type>().value(i))),
            // DuckDB exports UHUGEINT as a signed Decimal128 of the same
            // bits: read them back as u128 (the column says what it is).
            DataType::Decimal128(_, 0) if duckdb_type(field) == Some("UHUGEINT") => {
                let a = array.as_primitive::<Decimal128Type>();
                Box::new(UnsignedHuge(move |i| a.value(i) as u128))
            }
            DataType::Decimal128(_, scale) => {
                let a = array.as_primitive::<Decimal128Type>();
                let scale = *scale;
                Box::new(Decimal(move |i| (a.value(i), scale)))
            }
            // DuckDB's infinite dates and timestamps, and TIME 24:00:00, are
            // values Arrow's formatters reject: DuckDB's own words for them.
            DataType::Date32 => {
                let a = array.as_primitive::<arrow::datatypes::Date32Type>();
                Box::new(Quoted(move |i| match a.value(i) {
                    i32::MAX => "infinity".to_string(),
                    v if v == -i32::MAX => "-infinity".to_string(),
                    v => date_text(v.into()),
                }))
            }
            DataType::Timestamp(unit, tz) => {
                let unit = *unit;
                let zoned = tz.is_some();
                Box::new(Timestamps::new(array, unit, zoned))
            }
            DataType::Time64(arrow::datatypes::TimeUnit::Microsecond) => {
                let a = array.as_primitive::<arrow::datatypes::Time64MicrosecondType>();
                Box::new(Quoted(move |i| time_text(a.value(i) * 1000)))
            }
            DataType::Time64(arrow::datatypes::TimeUnit::Nanosecond) => {
                let a = array.as_primitive::<arrow::datatypes::Time64NanosecondType>();
                Box::new(Quoted(move |i| time_text(a.value(i))))
            }
            DataType::Decimal256(_, _) => {
                // Beyond i128 nothing fits a double: always a string.
                let a = array.as_primitive::<Decimal256Type>();
                Box::new(Quoted(move |i| a.value_as_string(i)))
            }
            DataType::Binary => {
                let a = array.as_binary::<i32>();
                Box::new(Base64(move |i| a.value(i)))
            }
            DataType::LargeBinary => {
                let a = array.as_binary::<i64>();
                Box::new(Base64(move |i| a.value(i)))
            }
            DataType::BinaryView => {
                let a = array.as_binary_view();
                Box::new(Base64(move |i| a.value(i)))
            }
            DataType::FixedSizeBinary(_) => {
                let a = array.as_fixed_size_binary();
                Box::new(Base64(move |i| a.value(i)))
            }
            DataType::Interval(unit) => {
                let unit = *unit;
                Box::new(Quoted(move |i| interval_text(array, unit, i)))
            }
            // BIGNUM arrives as DuckDB's text (see `json_exprs`): a number
            // where a double holds it exactly, else a string, like HUGEINT.
            DataType::Utf8 if duckdb_type(field) == Some("BIGNUM") => {
                let a = array.as_string::<i32>();
                Box::new(BigText(a))
            }
            // An unnamed struct (`row(1, 'x')`, DuckDB writes `(1, x)`) is a
            // JSON array; repeated field names get DuckDB's column rule.
            DataType::Struct(fields)
                if !fields.is_empty()
                    && (fields.iter().all(|f| f.name().is_empty())
                        || dedup_names(fields.iter().map(|f| f.name().as_str()))
                            .iter()
                            .zip(fields.iter())
                            .any(|(d, f)| d != f.name())) =>
            {
                let keys = (!fields.iter().all(|f| f.name().is_empty()))
                    .then(|| dedup_names(fields.iter().map(|f| f.name().as_str())));
                let children = fields
                    .iter()
                    .zip(array.as_struct().columns())
                    .map(|(f, c)| make_encoder(f, c.as_ref(), options))
                    .collect::<Result<Vec<_>, _>>()?;
                Box::new(StructEncoder { keys, children })
            }
            DataType::Union(fields, _) => {
                let union = array
                    .as_any()
                    .downcast_ref::<UnionArray>()
                    .expect("union type");
                let mut children = Vec::new();
                for (type_id, child_field) in fields.iter() {
                    let child = union.child(type_id);
                    children.push((type_id, make_encoder(child_field, child.as_ref(), options)?));
                }
                let _ = field;
                Box::new(UnionEncoder { union, children })
            }
            DataType::Map(entries, _) => {
                let DataType::Struct(kv) = entries.data_type() else {
                    return Ok(None);
                };
                if matches!(
                    kv[0].data_type(),
                    DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View
                ) && !marks::holds_variant(data_type)
                {
                    return Ok(None);
                }
                let map = array.as_map();
                let keys = arrow::util::display::ArrayFormatter::try_new(
                    map.keys().as_ref(),
                    &arrow::util::display::FormatOptions::default(),
                )?;
                let values = make_encoder(&kv[1], map.values().as_ref(), options)?;
                Box::new(MapEncoder { map, keys, values })
            }
            _ => return Ok(None),
        };
        Ok(Some(NullableEncoder::new(enc, nulls)))
    }
}

struct SafeInt<'a>(&'a arrow::array::Int64Array);
impl Encoder for SafeInt<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.0.value(idx);
        write_integer(out, v, v.unsigned_abs() > MAX_SAFE_INTEGER);
    }
}

struct SafeUInt<'a>(&'a arrow::array::UInt64Array);
impl Encoder for SafeUInt<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.0.value(idx);
        write_integer(out, v, v > MAX_SAFE_INTEGER);
    }
}

/// An integer's decimal digits (itoa: no formatter, no allocation), in
/// quotes when a JSON reader's double could not hold it.
fn write_integer(out: &mut Vec<u8>, v: impl itoa::Integer, quoted: bool) {
    let mut digits = itoa::Buffer::new();
    let text = digits.format(v).as_bytes();
    if quoted {
        out.push(b'"');
        out.extend_from_slice(text);
        out.push(b'"');
    } else {
        out.extend_from_slice(text);
    }
}

struct Float<F>(F);
impl<T: JsonFloat, F: Fn(usize) -> T> Encoder for Float<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        (self.0)(idx).write_json(out);
    }
}

/// A float as JSON: the shortest text that reads back to the same value (in
/// its own width, so FLOAT 0.1 stays 0.1), NaN and infinities as strings.
trait JsonFloat: Copy {
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_sign_positive(self) -> bool;
    /// serde_json's own text of a finite value, straight from its formatter
    /// (what `to_writer` ends in, without a serializer per value).
    fn write_finite(self, out: &mut Vec<u8>);

    fn write_json(self, out: &mut Vec<u8>) {
        if self.is_nan() {
            out.extend_from_slice(b"\"NaN\"");
        } else if self.is_infinite() {
            out.extend_from_slice(if self.is_sign_positive() {
                b"\"Infinity\""
            } else {
                b"\"-Infinity\""
            });
        } else {
            self.write_finite(out);
        }
    }
}

impl JsonFloat for f32 {
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn is_infinite(self) -> bool {
        f32::is_infinite(self)
    }
    fn is_sign_positive(self) -> bool {
        f32::is_sign_positive(self)
    }
    fn write_finite(self, out: &mut Vec<u8>) {
        CompactFormatter
            .write_f32(out, self)
            .expect("writing to a Vec");
    }
}

impl JsonFloat for f64 {
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn is_infinite(self) -> bool {
        f64::is_infinite(self)
    }
    fn is_sign_positive(self) -> bool {
        f64::is_sign_positive(self)
    }
    fn write_finite(self, out: &mut Vec<u8>) {
        CompactFormatter
            .write_f64(out, self)
            .expect("writing to a Vec");
    }
}

struct Decimal<F>(F);
impl<F: Fn(usize) -> (i128, i8)> Encoder for Decimal<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let (unscaled, scale) = (self.0)(idx);
        let quoted = unscaled.unsigned_abs() > MAX_SAFE_INTEGER as u128;
        if quoted {
            out.push(b'"');
        }
        write_decimal(out, unscaled, scale);
        if quoted {
            out.push(b'"');
        }
    }
}

/// Appends the exact decimal text of `unscaled * 10^-scale`, without an
/// allocation.
fn write_decimal(out: &mut Vec<u8>, unscaled: i128, scale: i8) {
    let mut buf = itoa::Buffer::new();
    let abs = unscaled.unsigned_abs();
    // Most decimals fit 64 bits, whose digits cost a fraction of 128 bits'.
    let digits = match u64::try_from(abs) {
        Ok(small) => buf.format(small),
        Err(_) => buf.format(abs),
    }
    .as_bytes();
    if unscaled < 0 {
        out.push(b'-');
    }
    if scale <= 0 {
        out.extend_from_slice(digits);
        if unscaled != 0 {
            out.extend(std::iter::repeat_n(b'0', (-scale) as usize));
        }
        return;
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        out.extend_from_slice(b"0.");
        out.extend(std::iter::repeat_n(b'0', scale - digits.len()));
        out.extend_from_slice(digits);
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        out.extend_from_slice(int);
        out.push(b'.');
        out.extend_from_slice(frac);
    }
}

/// Exact decimal text of `unscaled * 10^-scale`.
#[cfg(test)]
fn decimal_text(unscaled: i128, scale: i8) -> String {
    let mut out = Vec::new();
    write_decimal(&mut out, unscaled, scale);
    String::from_utf8(out).expect("ASCII digits")
}

struct Quoted<F>(F);
impl<F: Fn(usize) -> String> Encoder for Quoted<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let s = (self.0)(idx);
        serde_json::to_writer(out, &s).expect("writing to a Vec");
    }
}

struct Base64<F>(F);
impl<'b, F: Fn(usize) -> &'b [u8]> Encoder for Base64<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.push(b'"');
        let encoded = base64::engine::general_purpose::STANDARD.encode((self.0)(idx));
        out.extend_from_slice(encoded.as_bytes());
        out.push(b'"');
    }
}

/// A UTC instant as RFC 3339 with its offset, e.g. `2024-01-02T03:04:05.5+00:00`.
/// The DuckDB type a top-level column was declared with (field metadata set
/// by the executor), e.g. `UHUGEINT`.
fn duckdb_type(field: &Field) -> Option<&str> {
    field.metadata().get(DUCKDB_TYPE_KEY).map(String::as_str)
}

/// Field metadata key that carries DuckDB's type name of a result column.
pub const DUCKDB_TYPE_KEY: &str = "duckgate.duckdb_type";

/// A UHUGEINT: a number up to 2^53, else a string (as for BIGINT).
struct UnsignedHuge<F>(F);
impl<F: Fn(usize) -> u128> Encoder for UnsignedHuge<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = (self.0)(idx);
        write_integer(out, v, v > (1u128 << 53));
    }
}

/// TIMESTAMP values as ISO 8601 (TIMESTAMPTZ in UTC with `+00:00`), or
/// DuckDB's `infinity` / `-infinity`; written straight into the output.
struct Timestamps<'a> {
    values: &'a [i64],
    /// Units per second (1, 1e3, 1e6, 1e9).
    per_second: i64,
    zoned: bool,
    /// The last day written and its text: rows of a batch mostly share
    /// their day, and the calendar arithmetic is most of a timestamp's cost.
    day: Option<(i64, Vec<u8>)>,
}

impl<'a> Timestamps<'a> {
    fn new(array: &'a dyn Array, unit: arrow::datatypes::TimeUnit, zoned: bool) -> Self {
        use arrow::datatypes::{
            TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
            TimestampSecondType,
        };
        let (values, per_second): (&[i64], i64) = match unit {
            TimeUnit::Second => (array.as_primitive::<TimestampSecondType>().values(), 1),
            TimeUnit::Millisecond => (
                array.as_primitive::<TimestampMillisecondType>().values(),
                1_000,
            ),
            TimeUnit::Microsecond => (
                array.as_primitive::<TimestampMicrosecondType>().values(),
                1_000_000,
            ),
            TimeUnit::Nanosecond => (
                array.as_primitive::<TimestampNanosecondType>().values(),
                1_000_000_000,
            ),
        };
        Self {
            values,
            per_second,
            zoned,
            day: None,
        }
    }
}

impl Encoder for Timestamps<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let raw = self.values[idx];
        out.push(b'"');
        match raw {
            i64::MAX => out.extend_from_slice(b"infinity"),
            v if v == -i64::MAX => out.extend_from_slice(b"-infinity"),
            _ => {
                let per_day = self.per_second * 86_400;
                let (days, in_day) = (raw.div_euclid(per_day), raw.rem_euclid(per_day));
                let date = match &mut self.day {
                    Some((day, text)) if *day == days => text,
                    slot => {
                        let mut text = Vec::with_capacity(16);
                        write_date(&mut text, days);
                        &mut slot.insert((days, text)).1
                    }
                };
                out.extend_from_slice(date);
                out.push(b'T');
                write_time(out, in_day * (1_000_000_000 / self.per_second));
                if self.zoned {
                    out.extend_from_slice(b"+00:00");
                }
            }
        }
        out.push(b'"');
    }
}

/// `n` as exactly `width` decimal digits (n < 10^width).
fn write_digits(out: &mut Vec<u8>, mut n: u64, width: usize) {
    let start = out.len();
    out.resize(start + width, b'0');
    for slot in out[start..].iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
}

/// A time of day from nanoseconds (`HH:MM:SS` and the fraction in groups of
/// three digits, as elsewhere in the answers); DuckDB's `24:00:00` is a
/// valid TIME.
fn write_time(out: &mut Vec<u8>, nanos: i64) {
    let nanos = nanos.max(0) as u64;
    let (secs, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    write_digits(out, secs / 3600, 2);
    out.push(b':');
    write_digits(out, secs / 60 % 60, 2);
    out.push(b':');
    write_digits(out, secs % 60, 2);
    if frac == 0 {
        return;
    }
    out.push(b'.');
    if frac % 1_000_000 == 0 {
        write_digits(out, frac / 1_000_000, 3);
    } else if frac % 1_000 == 0 {
        write_digits(out, frac / 1_000, 6);
    } else {
        write_digits(out, frac, 9);
    }
}

fn time_text(nanos: i64) -> String {
    let mut out = Vec::with_capacity(18);
    write_time(&mut out, nanos);
    String::from_utf8(out).expect("ASCII")
}

/// A proleptic Gregorian date from days since 1970-01-01, for any day
/// DuckDB holds (chrono stops at ±262,143 years; DuckDB's TIMESTAMP reaches
/// 294,247) by Howard Hinnant's `civil_from_days`; years as ISO 8601 (and
/// chrono) write them: four digits, a sign beyond 9999 or before year 0.
fn write_date(out: &mut Vec<u8>, days: i64) {
    let z = days as i128 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u64;
    let month = (if mp < 10 { mp + 3 } else { mp - 9 }) as u64;
    let year = yoe + era * 400 + i128::from(month <= 2);
    match year {
        0..=9999 => write_digits(out, year as u64, 4),
        y if y > 9999 => {
            out.push(b'+');
            out.extend_from_slice(year.to_string().as_bytes());
        }
        _ => {
            out.push(b'-');
            let abs = (-year) as u64;
            if abs < 10_000 {
                write_digits(out, abs, 4);
            } else {
                out.extend_from_slice(abs.to_string().as_bytes());
            }
        }
    }
    out.push(b'-');
    write_digits(out, month, 2);
    out.push(b'-');
    write_digits(out, day, 2);
}

fn date_text(days: i64) -> String {
    let mut out = Vec::with_capacity(10);
    write_date(&mut out, days);
    String::from_utf8(out).expect("ASCII")
}

/// An interval as DuckDB's own text (its `IntervalToStringCast`), the
/// same text the JSON wrapper makes DuckDB write: used where a statement
/// cannot be wrapped (INSERT ... RETURNING, CALL). Arrow carries DuckDB's
/// microseconds as nanoseconds.
fn interval_text(array: &dyn Array, unit: IntervalUnit, idx: usize) -> String {
    use arrow::datatypes::{IntervalDayTimeType, IntervalMonthDayNanoType, IntervalYearMonthType};
    let (months, days, micros): (i32, i32, i64) = match unit {
        IntervalUnit::YearMonth => (
            array.as_primitive::<IntervalYearMonthType>().value(idx),
            0,
            0,
        ),
        IntervalUnit::DayTime => {
            let v = array.as_primitive::<IntervalDayTimeType>().value(idx);
            (0, v.days, v.milliseconds as i64 * 1000)
        }
        IntervalUnit::MonthDayNano => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(idx);
            (v.months, v.days, v.nanoseconds / 1000)
        }
    };
    duckdb_interval(months, days, micros)
}

/// DuckDB's `IntervalToStringCast::Format`: `1 year 2 months 3 days
/// 04:05:06.5`, signed parts, `00:00:00` for nothing.
fn duckdb_interval(months: i32, days: i32, micros: i64) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let part = |s: &mut String, value: i32, name: &str| {
        if value == 0 {
            return;
        }
        if !s.is_empty() {
            s.push(' ');
        }
        let plural = if value == 1 || value == -1 { "" } else { "s" };
        let _ = write!(s, "{value} {name}{plural}");
    };
    if months != 0 {
        let years = months / 12;
        part(&mut s, years, "year");
        part(&mut s, months - years * 12, "month");
    }
    part(&mut s, days, "day");
    if micros != 0 {
        if !s.is_empty() {
            s.push(' ');
        }
        if micros < 0 {
            s.push('-');
        }
        let m = micros.unsigned_abs();
        let (hour, min, sec, frac) = (
            m / 3_600_000_000,
            (m / 60_000_000) % 60,
            (m / 1_000_000) % 60,
            m % 1_000_000,
        );
        let _ = write!(s, "{hour:02}:{min:02}:{sec:02}");
        if frac != 0 {
            let digits = format!("{frac:06}");
            s.push('.');
            s.push_str(digits.trim_end_matches('0'));
        }
    } else if s.is_empty() {
        s.push_str("00:00:00");
    }
    s
}

/// A struct whose field names cannot be JSON keys as they are: an array of
/// its values (`keys` is `None`) or an object with deduplicated keys.
struct StructEncoder<'a> {
    keys: Option<Vec<String>>,
    children: Vec<NullableEncoder<'a>>,
}

impl Encoder for StructEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        out.push(if self.keys.is_some() { b'{' } else { b'[' });
        for (n, child) in self.children.iter_mut().enumerate() {
            if n > 0 {
                out.push(b',');
            }
            if let Some(keys) = &self.keys {
                serde_json::to_writer(&mut *out, &keys[n]).expect("writing to a Vec");
                out.push(b':');
            }
            if child.is_null(idx) {
                out.extend_from_slice(b"null");
            } else {
                child.encode(idx, out);
            }
        }
        out.push(if self.keys.is_some() { b'}' } else { b']' });
    }
}

/// A list whose elements the gateway encodes with their own field (see
/// `marks`): `bounds` gives a row's range of values.
struct ListEncoder<'a> {
    bounds: Box<dyn Fn(usize) -> (usize, usize) + 'a>,
    values: NullableEncoder<'a>,
}

impl Encoder for ListEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let (start, end) = (self.bounds)(idx);
        out.push(b'[');
        for i in start..end {
            if i > start {
                out.push(b',');
            }
            if self.values.is_null(i) {
                out.extend_from_slice(b"null");
            } else {
                self.values.encode(i, out);
            }
        }
        out.push(b']');
    }
}

/// A VARIANT as DuckDB's JSON of it (`CAST(v AS JSON)`), written as the JSON
/// value it is, under the rules of every other value: DuckDB writes NaN and
/// the infinities as bare `NaN`, `Infinity`, `-Infinity` (not JSON): they
/// become strings; an integer beyond 2^53 becomes a string, as a BIGINT's
/// does. Numbers with a fraction or an exponent (DOUBLE, FLOAT, DECIMAL: a
/// VARIANT's JSON does not say which) stay as DuckDB writes them.
struct VariantJson<F>(F);
impl<'b, F: Fn(usize) -> &'b str> Encoder for VariantJson<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        write_variant_json(out, (self.0)(idx));
    }
}

/// Copies DuckDB's JSON text `text` into `out` under the rules of
/// [`VariantJson`]. Strings are copied as they are (DuckDB escapes them).
fn write_variant_json(out: &mut Vec<u8>, text: &str) {
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                // A string, escapes included, to its closing quote.
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                out.extend_from_slice(&bytes[start..i]);
            }
            b'N' | b'I' | b'-' if !bytes.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                let word = match bytes[i] {
                    b'N' => "NaN",
                    b'I' => "Infinity",
                    _ => "-Infinity",
                };
                serde_json::to_writer(&mut *out, word).expect("writing to a Vec");
                i += word.len();
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < bytes.len()
                    && matches!(bytes[i], b'0'..=b'9' | b'.' | b'e' | b'E' | b'+' | b'-')
                {
                    i += 1;
                }
                let token = &text[start..i];
                let digits = token.strip_prefix('-').unwrap_or(token);
                let beyond = digits.bytes().all(|b| b.is_ascii_digit())
                    && (digits.len() > 16 || (digits.len() == 16 && digits > "9007199254740992"));
                if beyond {
                    serde_json::to_writer(&mut *out, token).expect("writing to a Vec");
                } else {
                    out.extend_from_slice(token.as_bytes());
                }
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
}

/// An integer as DuckDB's decimal text: a JSON number when a double holds it
/// exactly (|v| <= 2^53), else a string.
struct BigText<'a>(&'a StringArray);
impl Encoder for BigText<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let text = self.0.value(idx);
        let exact = text
            .parse::<i64>()
            .is_ok_and(|v| v.unsigned_abs() <= 1 << 53);
        if exact {
            out.extend_from_slice(text.as_bytes());
        } else {
            serde_json::to_writer(&mut *out, text).expect("writing to a Vec");
        }
    }
}

struct UnionEncoder<'a> {
    union: &'a UnionArray,
    children: Vec<(i8, NullableEncoder<'a>)>,
}

impl Encoder for UnionEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let type_id = self.union.type_id(idx);
        let offset = self.union.value_offset(idx);
        match self.children.iter_mut().find(|(t, _)| *t == type_id) {
            Some((_, enc)) if !enc.is_null(offset) => enc.encode(offset, out),
            _ => out.extend_from_slice(b"null"),
        }
    }
}

struct MapEncoder<'a> {
    map: &'a arrow::array::MapArray,
    keys: arrow::util::display::ArrayFormatter<'a>,
    values: NullableEncoder<'a>,
}

impl Encoder for MapEncoder<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let offsets = self.map.value_offsets();
        let (start, end) = (offsets[idx] as usize, offsets[idx + 1] as usize);
        out.push(b'{');
        for (n, i) in (start..end).enumerate() {
            if n > 0 {
                out.push(b',');
            }
            let key = self.keys.value(i).to_string();
            serde_json::to_writer(&mut *out, &key).expect("writing to a Vec");
            out.push(b':');
            if self.values.is_null(i) {
                out.extend_from_slice(b"null");
            } else {
                self.values.encode(i, out);
            }
        }
        out.push(b'}');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_agree_with_chrono_wherever_chrono_reaches() {
        // Every 997th day across chrono's whole range, and the days around
        // the epoch, year 0 and the Gregorian leap rules.
        let (lo, hi) = (-95_000_000i64, 95_000_000i64);
        let days = (lo..hi).step_by(997).chain(-800_000..800_000);
        for d in days {
            let want = arrow::temporal_conversions::date32_to_datetime(d as i32)
                .unwrap()
                .format("%Y-%m-%d")
                .to_string();
            assert_eq!(date_text(d), want, "day {d}");
        }
    }

    /// DuckDB's JSON of a VARIANT as the answer carries it; the texts are
    /// DuckDB 1.5.5's `CAST(v AS JSON)` of such values.
    #[test]
    fn variant_json_is_json() {
        let cases = [
            ("42", "42"),
            ("null", "null"),
            ("\"x\"", "\"x\""),
            (
                "{\"k\":NaN,\"i\":Infinity,\"j\":-Infinity}",
                "{\"k\":\"NaN\",\"i\":\"Infinity\",\"j\":\"-Infinity\"}",
            ),
            (
                "[9007199254740992,9007199254740993,-9007199254740993]",
                "[9007199254740992,\"9007199254740993\",\"-9007199254740993\"]",
            ),
            (
                "340282366920938463463374607431768211455",
                "\"340282366920938463463374607431768211455\"",
            ),
            (
                "[1e300,0.10000000149011612,100000000000000000000.0,-0.0]",
                "[1e300,0.10000000149011612,100000000000000000000.0,-0.0]",
            ),
            (
                "{\"NaN \\\" Infinity\":\"-1\"}",
                "{\"NaN \\\" Infinity\":\"-1\"}",
            ),
            ("{\"a\":[1,2],\"b\":\"x\"}", "{\"a\":[1,2],\"b\":\"x\"}"),
        ];
        for (duckdb, want) in cases {
            let mut out = Vec::new();
            write_variant_json(&mut out, duckdb);
            let got = String::from_utf8(out).unwrap();
            assert_eq!(got, want, "{duckdb}");
            serde_json::from_str::<serde_json::Value>(&got).expect("valid JSON");
        }
    }

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal_text(12345, 3), "12.345");
        assert_eq!(decimal_text(-5, 3), "-0.005");
        assert_eq!(decimal_text(0, 2), "0.00");
        assert_eq!(decimal_text(7, 0), "7");
        assert_eq!(decimal_text(-7, -2), "-700");
        assert_eq!(decimal_text(0, -2), "0");
        assert_eq!(decimal_text(-99, 5), "-0.00099");
    }
}
