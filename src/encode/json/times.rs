//! Dates, times, timestamps and intervals as JSON: ISO 8601 for any year,
//! DuckDB's words for its infinite dates and `24:00:00`, DuckDB's interval
//! text.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, IntervalUnit};
use arrow::json::writer::Encoder;

use super::text::Quoted;

/// The encoder of a date, time, timestamp or interval, for
/// [`super::JsonRules`].
pub(super) fn time_encoder<'a>(
    data_type: &'a DataType,
    array: &'a dyn Array,
) -> Option<Box<dyn Encoder + 'a>> {
    let enc: Box<dyn Encoder + 'a> = match data_type {
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
        DataType::Interval(unit) => {
            let unit = *unit;
            Box::new(Quoted(move |i| interval_text(array, unit, i)))
        }
        _ => return None,
    };
    Some(enc)
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
}
