//! Nested values (LIST, ARRAY, STRUCT, MAP, UNION) as DuckDB renders
//! them as VARCHAR.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{self as at, DataType};
use bytes::BytesMut;
use pgwire::api::Type;

use super::text::Writer;
use super::{null_at, plain, text, BoxError};

/// A nested value (LIST, ARRAY, STRUCT, MAP, UNION) as DuckDB renders it
/// as VARCHAR; any other type as Arrow displays it.
pub(super) fn nested_text(w: &mut Writer<'_>, a: &dyn Array, i: usize) -> Result<(), BoxError> {
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
