//! The PostgreSQL binary form of a result's values.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{self as at, DataType};
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;

use super::array::{array_binary, array_values};
use super::text::{bignum_text, interval, text, time_micros, timestamp_micros};
use super::{BoxError, PG_EPOCH_DAYS, PG_EPOCH_MICROS};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pg::types::params::numeric_from_binary;

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
}
