//! Numbers as JSON: integers and decimals beyond 2^53 as strings (JavaScript
//! clients would round them), NaN and infinities as strings, decimals exact.

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Field, Float16Type, Float32Type, Float64Type,
    Int64Type, UInt64Type,
};
use arrow::json::writer::Encoder;
use serde_json::ser::{CompactFormatter, Formatter as _};

use super::duckdb_type;
use super::text::Quoted;

/// The encoder of a number DuckDB's JSON would round or reject, for
/// [`super::JsonRules`].
pub(super) fn number_encoder<'a>(
    field: &'a Field,
    data_type: &'a DataType,
    array: &'a dyn Array,
) -> Option<Box<dyn Encoder + 'a>> {
    let enc: Box<dyn Encoder + 'a> = match data_type {
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
        DataType::Decimal256(_, _) => {
            // Beyond i128 nothing fits a double: always a string.
            let a = array.as_primitive::<Decimal256Type>();
            Box::new(Quoted(move |i| a.value_as_string(i)))
        }
        // BIGNUM arrives as DuckDB's text (see `json_exprs`): a number
        // where a double holds it exactly, else a string, like HUGEINT.
        DataType::Utf8 if duckdb_type(field) == Some("BIGNUM") => {
            let a = array.as_string::<i32>();
            Box::new(BigText(a))
        }
        _ => return None,
    };
    Some(enc)
}

/// Largest integer a JSON consumer using doubles represents exactly.
const MAX_SAFE_INTEGER: u64 = 1 << 53;

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

/// A UHUGEINT: a number up to 2^53, else a string (as for BIGINT).
struct UnsignedHuge<F>(F);
impl<F: Fn(usize) -> u128> Encoder for UnsignedHuge<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = (self.0)(idx);
        write_integer(out, v, v > (1u128 << 53));
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

#[cfg(test)]
mod tests {
    use super::*;

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
