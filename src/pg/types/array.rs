//! PostgreSQL arrays: which list columns are described as one, and an
//! array's text and binary forms.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Field};
use bytes::{BufMut, BytesMut};
use pgwire::api::Type;

use super::{binary, text, BoxError};

/// The PostgreSQL array type of a list of `item`, and its element type:
/// one level of text (`array_agg` of names, which SQLAlchemy's reflection
/// reads as a list); other lists are DuckDB's text of them.
pub(super) fn array_of(item: &Field) -> Option<(Type, Type)> {
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
pub(super) fn array_values(a: &dyn Array, i: usize, ty: &Type) -> Option<(ArrayRef, Type)> {
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
pub(super) fn array_text(
    values: &ArrayRef,
    element: &Type,
    out: &mut BytesMut,
) -> Result<(), BoxError> {
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
pub(super) fn array_binary(
    values: &ArrayRef,
    element: &Type,
    out: &mut BytesMut,
) -> Result<(), BoxError> {
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
