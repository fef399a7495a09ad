//! The PostgreSQL text of a result's values.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{self as at, DataType, IntervalUnit, TimeUnit};
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;

use super::array::{array_text, array_values};
use super::nested::nested_text;
use super::BoxError;

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
        DataType::Decimal128(_, s) => decimal_text(
            &mut w,
            itoa::Buffer::new().format(a.as_primitive::<at::Decimal128Type>().value(i)),
            *s,
        )?,
        DataType::Decimal256(_, s) => decimal_text(
            &mut w,
            &a.as_primitive::<at::Decimal256Type>().value(i).to_string(),
            *s,
        )?,
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

/// Writes a decimal's text from its unscaled integer's and its scale,
/// piece by piece (a `COPY` writes one for every row: no string of its own).
fn decimal_text(w: &mut impl std::fmt::Write, raw: &str, scale: i8) -> std::fmt::Result {
    let (sign, digits) = match raw.strip_prefix('-') {
        Some(d) => ("-", d),
        None => ("", raw),
    };
    w.write_str(sign)?;
    if scale <= 0 {
        w.write_str(digits)?;
        if digits != "0" {
            zeros(w, usize::from(scale.unsigned_abs()))?;
        }
        return Ok(());
    }
    let scale = scale as usize;
    if digits.len() <= scale {
        // Fewer digits than the scale: `0.` and the rest padded (`0.05`).
        w.write_str("0.")?;
        zeros(w, scale - digits.len())?;
        return w.write_str(digits);
    }
    let (int, frac) = digits.split_at(digits.len() - scale);
    w.write_str(int)?;
    w.write_char('.')?;
    w.write_str(frac)
}

/// `n` zeros.
fn zeros(w: &mut impl std::fmt::Write, n: usize) -> std::fmt::Result {
    (0..n).try_for_each(|_| w.write_char('0'))
}

pub(super) struct Writer<'a>(&'a mut BytesMut);

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
    // Rust's shortest text, into a buffer on the stack (a `COPY` writes one
    // for every row): at most 24 bytes (`-2.2250738585072014e-308`).
    use std::fmt::Write as _;
    let mut buf = Stack::default();
    if single {
        write!(buf, "{:?}", v as f32)?;
    } else {
        write!(buf, "{v:?}")?;
    }
    let s = buf.as_str();
    // Rust writes `1.0` and `1e20`; PostgreSQL `1` and `1e+20`.
    let s = s.strip_suffix(".0").unwrap_or(s);
    match s.split_once('e') {
        Some((m, e)) if !e.starts_with('-') => write!(w, "{m}e+{e}"),
        _ => w.write_str(s),
    }
}

/// A short text written on the stack.
#[derive(Default)]
struct Stack {
    bytes: [u8; 32],
    len: usize,
}

impl Stack {
    fn as_str(&self) -> &str {
        // Only whole `str`s are written into it.
        std::str::from_utf8(&self.bytes[..self.len]).unwrap_or_default()
    }
}

impl std::fmt::Write for Stack {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let end = self.len + s.len();
        self.bytes
            .get_mut(self.len..end)
            .ok_or(std::fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
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
pub(super) fn bignum_text(b: &[u8]) -> Result<String, BoxError> {
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

pub(super) fn date_text(w: &mut impl std::fmt::Write, days: i64) -> std::fmt::Result {
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

pub(super) fn time_text(w: &mut impl std::fmt::Write, micros: i64) -> std::fmt::Result {
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
    let mut digits = [b'0'; 7];
    digits[0] = b'.';
    let mut rest = micros.unsigned_abs();
    for d in digits[1..].iter_mut().rev() {
        *d = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    let end = digits.iter().rposition(|&d| d != b'0').map_or(1, |i| i + 1);
    // ASCII digits and a point.
    w.write_str(std::str::from_utf8(&digits[..end]).unwrap_or_default())
}

pub(super) fn timestamp_text(w: &mut impl std::fmt::Write, micros: i64) -> std::fmt::Result {
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

pub(super) fn time_micros(a: &dyn Array, i: usize) -> i64 {
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

pub(super) fn timestamp_micros(a: &dyn Array, i: usize, unit: TimeUnit) -> i64 {
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
pub(super) fn interval(a: &dyn Array, i: usize) -> (i32, i32, i64) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn decimal(raw: &str, scale: i8) -> String {
        let mut s = String::new();
        decimal_text(&mut s, raw, scale).unwrap();
        s
    }

    #[test]
    fn decimals_keep_every_digit() {
        // HUGEINT's largest value has 39 digits in a DECIMAL(38, 0).
        assert_eq!(
            decimal("170141183460469231731687303715884105727", 0),
            "170141183460469231731687303715884105727"
        );
        assert_eq!(decimal("-5", 2), "-0.05");
        assert_eq!(decimal("12345", 2), "123.45");
        assert_eq!(decimal("0", 3), "0.000");
        assert_eq!(decimal("0", -2), "0");
        assert_eq!(decimal("-7", -2), "-700");
    }

    /// The text of every value equals DuckDB's own cast to VARCHAR, which
    /// PostgreSQL's text matches for these types (numeric's digits to its
    /// scale; a timestamp's fraction without trailing zeros): decimals of
    /// every width and scale around their edges (cast from DECIMAL(38, s),
    /// as DuckDB writes `-.9999` for a DECIMAL(4, 4) where PostgreSQL and
    /// its wider decimals write `-0.9999`), timestamps over the years
    /// 1-9999 with and without a fraction, times of day.
    #[test]
    fn decimals_and_timestamps_read_as_duckdb_casts_them() {
        let conn = duckdb::Connection::open_in_memory().unwrap();
        let mut checked = 0;
        let mut check = |sql: &str, ty: &Type| {
            let mut stmt = conn.prepare(sql).unwrap();
            for batch in stmt.query_arrow([]).unwrap() {
                let (values, texts) = (batch.column(0), batch.column(1).as_string::<i32>());
                for i in 0..batch.num_rows() {
                    let mut out = BytesMut::new();
                    text(values.as_ref(), i, ty, &mut out).unwrap();
                    assert_eq!(
                        std::str::from_utf8(&out).unwrap(),
                        texts.value(i),
                        "{sql}, row {i}"
                    );
                    checked += 1;
                }
            }
        };
        for (width, scale) in [
            (4, 0),
            (4, 4),
            (9, 2),
            (18, 3),
            (18, 18),
            (38, 0),
            (38, 10),
            (38, 37),
        ] {
            let max = format!("{}::HUGEINT", "9".repeat(width));
            // The unscaled integer times 10^-scale, exactly (a DECIMAL
            // product's scale is its factors' together).
            let unit = if scale == 0 {
                "1".to_string()
            } else {
                format!("0.{}1", "0".repeat(scale - 1))
            };
            check(
                &format!(
                    "SELECT v, v::DECIMAL(38, {scale})::VARCHAR FROM (SELECT ((CASE \
                       WHEN i % 7 = 0 THEN {max} - i WHEN i % 7 = 1 THEN (i % 10)::HUGEINT \
                       ELSE hash(i)::HUGEINT % {max} END \
                       * CASE WHEN i % 2 = 0 THEN -1 ELSE 1 END)::DECIMAL(38, 0) \
                       * '{unit}'::DECIMAL(38, {scale}))::DECIMAL({width}, {scale}) AS v \
                       FROM range(2000) t(i))"
                ),
                &Type::NUMERIC,
            );
        }
        check(
            "SELECT v, v::VARCHAR FROM (SELECT TIMESTAMP '0001-01-01 00:00:00' \
               + to_microseconds(CASE WHEN i % 3 = 0 THEN (hash(i) % 315537897599)::BIGINT * 1000000 \
               ELSE (hash(i) % 315537897599999999)::BIGINT END) AS v FROM range(5000) t(i))",
            &Type::TIMESTAMP,
        );
        check(
            "SELECT v, v::VARCHAR FROM (SELECT TIME '00:00:00' \
               + to_microseconds((hash(i) % 86400000000)::BIGINT // (10 ** (i % 7))::BIGINT \
               * (10 ** (i % 7))::BIGINT) AS v FROM range(2000) t(i))",
            &Type::TIME,
        );
        assert!(checked > 20_000, "{checked} values checked");
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
