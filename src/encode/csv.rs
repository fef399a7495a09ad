//! CSV: DuckDB's own text for every value (the engine wraps the query in
//! VARCHAR casts), written with the quoting of DuckDB's `COPY ... (FORMAT
//! csv)`; arrow's CSV writer only where DuckDB could not render the text.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, EncoderOptions};
use std::io::Write as _;
use std::sync::Arc;

/// Writes one CSV field by DuckDB's COPY rules (see `duckdb_text`).
pub(super) fn csv_field(out: &mut Vec<u8>, v: &str) {
    let quote = v.is_empty() || v.bytes().any(|b| matches!(b, b',' | b'"' | b'\n' | b'\r'));
    if !quote {
        out.extend_from_slice(v.as_bytes());
        return;
    }
    out.push(b'"');
    for b in v.bytes() {
        if b == b'"' {
            out.push(b'"');
        }
        out.push(b);
    }
    out.push(b'"');
}

/// One column of DuckDB's text: strings in any of Arrow's layouts, or an
/// integer or boolean column whose Arrow text is DuckDB's.
enum TextColumn<'a> {
    Utf8(&'a arrow::array::StringArray),
    Large(&'a arrow::array::LargeStringArray),
    View(&'a arrow::array::StringViewArray),
    Plain(&'a dyn Array, arrow::util::display::ArrayFormatter<'a>),
}

impl<'a> TextColumn<'a> {
    fn of(c: &'a dyn Array) -> Result<Self, ArrowError> {
        Ok(match c.data_type() {
            DataType::Utf8 => Self::Utf8(c.as_string::<i32>()),
            DataType::LargeUtf8 => Self::Large(c.as_string::<i64>()),
            DataType::Utf8View => Self::View(c.as_string_view()),
            DataType::Boolean
            | DataType::Int8
            | DataType::Int16
            | DataType::Int32
            | DataType::Int64
            | DataType::UInt8
            | DataType::UInt16
            | DataType::UInt32
            | DataType::UInt64 => Self::Plain(
                c,
                arrow::util::display::ArrayFormatter::try_new(c, &Default::default())?,
            ),
            other => {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "DuckDB text column exported as {other}"
                )))
            }
        })
    }

    /// Appends the CSV field of `row` (nothing for NULL).
    fn write(&self, row: usize, out: &mut Vec<u8>) {
        let text = match self {
            Self::Utf8(a) => a.is_valid(row).then(|| a.value(row)),
            Self::Large(a) => a.is_valid(row).then(|| a.value(row)),
            Self::View(a) => a.is_valid(row).then(|| a.value(row)),
            Self::Plain(a, f) => {
                if a.is_valid(row) {
                    // Digits, a sign, true/false: never quoted.
                    write!(out, "{}", f.value(row)).expect("writing to a Vec");
                }
                return;
            }
        };
        if let Some(v) = text {
            csv_field(out, v);
        }
    }
}

/// Rows of DuckDB-rendered text columns as CSV.
pub(super) fn csv_text_rows(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
    let columns = batch
        .columns()
        .iter()
        .map(|c| TextColumn::of(c.as_ref()))
        .collect::<Result<Vec<_>, _>>()?;
    for row in 0..batch.num_rows() {
        for (i, c) in columns.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            c.write(row, out);
        }
        out.push(b'\n');
    }
    Ok(())
}

/// CSV cannot hold nested values: they become JSON text; dictionaries become
/// their values; binary becomes base64.
fn csv_needs_text(dt: &DataType) -> bool {
    matches!(
        dt,
        DataType::List(_)
            | DataType::LargeList(_)
            | DataType::FixedSizeList(_, _)
            | DataType::ListView(_)
            | DataType::LargeListView(_)
            | DataType::Struct(_)
            | DataType::Map(_, _)
            | DataType::Union(_, _)
            | DataType::Dictionary(_, _)
            | DataType::Binary
            | DataType::LargeBinary
            | DataType::FixedSizeBinary(_)
            | DataType::BinaryView
            | DataType::Interval(_)
            | DataType::Timestamp(_, Some(_))
    )
}

pub(super) fn csv_schema(schema: &Schema) -> SchemaRef {
    let fields: Vec<Field> = schema
        .fields()
        .iter()
        .map(|f| {
            if csv_needs_text(f.data_type()) {
                Field::new(f.name(), DataType::Utf8, true)
            } else {
                f.as_ref().clone()
            }
        })
        .collect();
    Arc::new(Schema::new(fields))
}

pub(super) fn csv_batch(
    batch: &RecordBatch,
    options: &EncoderOptions,
) -> Result<RecordBatch, ArrowError> {
    if !batch
        .schema()
        .fields()
        .iter()
        .any(|f| csv_needs_text(f.data_type()))
    {
        return Ok(batch.clone());
    }
    let schema = csv_schema(&batch.schema());
    let columns = batch
        .schema()
        .fields()
        .iter()
        .zip(batch.columns())
        .map(|(field, col)| -> Result<ArrayRef, ArrowError> {
            if !csv_needs_text(field.data_type()) {
                return Ok(col.clone());
            }
            let mut enc = make_encoder(field, col.as_ref(), options)?;
            let mut buf = Vec::new();
            let values: Vec<Option<String>> = (0..col.len())
                .map(|i| {
                    if enc.is_null(i) {
                        return None;
                    }
                    buf.clear();
                    enc.encode(i, &mut buf);
                    // Plain strings are written bare, nested values as JSON.
                    let text = String::from_utf8_lossy(&buf).into_owned();
                    match serde_json::from_str::<serde_json::Value>(&text) {
                        Ok(serde_json::Value::String(s)) => Some(s),
                        _ => Some(text),
                    }
                })
                .collect();
            Ok(Arc::new(StringArray::from(values)))
        })
        .collect::<Result<Vec<_>, _>>()?;
    RecordBatch::try_new(schema, columns)
}
