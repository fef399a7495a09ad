//! The door's bulk answers, a batch at a time: `COPY ... TO STDOUT`'s lines
//! in PostgreSQL's text format or CSV, and the `DataRow`s of a result. A
//! batch is encoded into one buffer, reserved from the size of the batch
//! before, its values written by a writer chosen once per column (integers
//! and text straight from their arrays, the rest through [`types::text`]
//! and [`types::binary`]); COPY's escapes copy the runs between the bytes
//! that need one. Each row's message is a slice of the batch's buffer: the
//! cost is per batch and per value, never an allocation per row.
//!
//! A row is one message, as PostgreSQL sends it: psycopg's `read_row` (and
//! `rows()`) parses each `CopyData` as exactly one row.

use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{self as at, DataType};
use bytes::{BufMut, BytesMut};
use pgwire::api::results::{FieldFormat, FieldInfo};
use pgwire::api::Type;
use pgwire::error::PgWireResult;
use pgwire::messages::data::DataRow;

use crate::pg::errors;
use crate::pg::session::Copy;
use crate::pg::types;

/// A column of a batch as its values are written: the common types read
/// straight from their arrays, the rest through the type mapping.
enum Column<'a> {
    Int64(&'a arrow::array::Int64Array),
    Int32(&'a arrow::array::Int32Array),
    Utf8(&'a arrow::array::StringArray),
    LargeUtf8(&'a arrow::array::LargeStringArray),
    Other(&'a dyn Array),
}

impl<'a> Column<'a> {
    /// The writer of `array`'s values as text (`binary`: in the binary
    /// format) of type `ty`.
    fn of(array: &'a ArrayRef, ty: &Type, binary: bool) -> Self {
        match array.data_type() {
            DataType::Int64 => Column::Int64(array.as_primitive::<at::Int64Type>()),
            DataType::Int32 => Column::Int32(array.as_primitive::<at::Int32Type>()),
            // A UUID's binary form is parsed from its text.
            DataType::Utf8 if !(binary && *ty == Type::UUID) => {
                Column::Utf8(array.as_string::<i32>())
            }
            DataType::LargeUtf8 if !binary => Column::LargeUtf8(array.as_string::<i64>()),
            _ => Column::Other(array.as_ref()),
        }
    }

    fn array(&self) -> &dyn Array {
        match self {
            Column::Int64(a) => *a,
            Column::Int32(a) => *a,
            Column::Utf8(a) => *a,
            Column::LargeUtf8(a) => *a,
            Column::Other(a) => *a,
        }
    }

    /// Row `row`'s text (not NULL), in `scratch` or the array itself.
    fn text<'b>(
        &'b self,
        row: usize,
        ty: &Type,
        scratch: &'b mut BytesMut,
        digits: &'b mut itoa::Buffer,
    ) -> Result<&'b [u8], String> {
        Ok(match self {
            Column::Int64(a) => digits.format(a.value(row)).as_bytes(),
            Column::Int32(a) => digits.format(a.value(row)).as_bytes(),
            Column::Utf8(a) => a.value(row).as_bytes(),
            Column::LargeUtf8(a) => a.value(row).as_bytes(),
            Column::Other(a) => {
                scratch.clear();
                types::text(*a, row, ty, scratch).map_err(|e| e.to_string())?;
                &scratch[..]
            }
        })
    }

    /// Writes row `row`'s value (not NULL) in the binary format.
    fn binary(&self, row: usize, ty: &Type, out: &mut BytesMut) -> Result<(), String> {
        match self {
            Column::Int64(a) => out.put_i64(a.value(row)),
            Column::Int32(a) => out.put_i32(a.value(row)),
            // The binary form of `text` is the text itself.
            Column::Utf8(a) => out.put_slice(a.value(row).as_bytes()),
            Column::LargeUtf8(a) => out.put_slice(a.value(row).as_bytes()),
            Column::Other(a) => types::binary(*a, row, ty, out).map_err(|e| e.to_string())?,
        }
        Ok(())
    }
}

/// A batch's columns as the door writes them (dictionaries and views
/// unpacked, [`types::plain`]).
fn plain_columns(batch: &RecordBatch) -> PgWireResult<Vec<ArrayRef>> {
    batch
        .columns()
        .iter()
        .map(types::plain)
        .collect::<Result<_, _>>()
        .map_err(|e| errors::error("XX000", format!("reading DuckDB's Arrow: {e}")))
}

/// Writes a COPY's batches as lines of PostgreSQL's text format or of CSV.
pub struct CopyLines {
    copy: Copy,
    fields: Arc<Vec<FieldInfo>>,
    /// The bytes that need care inside a value: escaped in the text format,
    /// quoting the value in CSV.
    special: [bool; 256],
    /// The delimiter, as the bytes that separate values.
    delimiter: Vec<u8>,
    /// A non-ASCII delimiter (CSV then searches values for its bytes).
    wide_delimiter: bool,
    scratch: BytesMut,
    /// The size of the last batch's lines: the next is reserved as large.
    last: usize,
}

impl CopyLines {
    /// The writer of `copy`'s lines; `fields` describe the columns (their
    /// types choose how values are written).
    pub fn new(copy: &Copy, fields: Arc<Vec<FieldInfo>>) -> Self {
        let mut special = [false; 256];
        let delimiter = copy.delimiter.to_string().into_bytes();
        if copy.csv {
            for b in [b'"', b'\n', b'\r'] {
                special[b as usize] = true;
            }
            if copy.delimiter.is_ascii() {
                special[delimiter[0] as usize] = true;
            }
        } else {
            for b in [b'\\', b'\n', b'\r', b'\t'] {
                special[b as usize] = true;
            }
            // A byte equal to the delimiter's code point is escaped (as
            // the text format always did, for a delimiter up to U+00FF).
            if let Ok(b) = u8::try_from(u32::from(copy.delimiter)) {
                special[b as usize] = true;
            }
        }
        CopyLines {
            copy: copy.clone(),
            fields,
            special,
            delimiter,
            wide_delimiter: !copy.delimiter.is_ascii(),
            scratch: BytesMut::new(),
            last: 0,
        }
    }

    /// A buffer for the next batch's lines, as large as the last one's.
    pub fn buffer(&self) -> BytesMut {
        BytesMut::with_capacity(self.last + self.last / 8)
    }

    /// Appends the lines of `batch` to `out`, and where each ends to `ends`.
    pub fn batch(
        &mut self,
        batch: &RecordBatch,
        out: &mut BytesMut,
        ends: &mut Vec<usize>,
    ) -> PgWireResult<()> {
        let start = out.len();
        let columns = plain_columns(batch)?;
        let columns: Vec<Column<'_>> = columns
            .iter()
            .zip(self.fields.iter())
            .map(|(c, f)| Column::of(c, f.datatype(), false))
            .collect();
        let mut digits = itoa::Buffer::new();
        for row in 0..batch.num_rows() {
            for (i, (c, f)) in columns.iter().zip(self.fields.iter()).enumerate() {
                if i > 0 {
                    out.put_slice(&self.delimiter);
                }
                if c.array().is_null(row) {
                    out.put_slice(self.copy.null.as_bytes());
                    continue;
                }
                let value = c
                    .text(row, f.datatype(), &mut self.scratch, &mut digits)
                    .map_err(|e| errors::error("XX000", format!("writing a value: {e}")))?;
                if self.copy.csv {
                    csv_value(out, value, &self.special, &self.copy, self.wide_delimiter);
                } else {
                    text_value(out, value, &self.special);
                }
            }
            out.put_u8(b'\n');
            ends.push(out.len());
        }
        self.last = out.len() - start;
        Ok(())
    }
}

/// A value in COPY's text format: backslash, newline, carriage return, tab
/// and the delimiter escaped with a backslash; the runs between them copied.
fn text_value(out: &mut BytesMut, value: &[u8], special: &[bool; 256]) {
    let mut run = 0;
    for (i, &b) in value.iter().enumerate() {
        if !special[b as usize] {
            continue;
        }
        out.put_slice(&value[run..i]);
        match b {
            b'\\' => out.put_slice(b"\\\\"),
            b'\n' => out.put_slice(b"\\n"),
            b'\r' => out.put_slice(b"\\r"),
            b'\t' => out.put_slice(b"\\t"),
            _ => out.put_slice(&[b'\\', b]),
        }
        run = i + 1;
    }
    out.put_slice(&value[run..]);
}

/// A value in CSV: quoted (its quotes doubled) where it holds the
/// delimiter, a quote, a line break, equals the NULL text, or is empty
/// while NULL is written empty; else as it is.
fn csv_value(out: &mut BytesMut, value: &[u8], special: &[bool; 256], copy: &Copy, wide: bool) {
    let quote = (value.is_empty() && copy.null.is_empty())
        || value.iter().any(|&b| special[b as usize])
        || (wide && {
            let mut d = [0u8; 4];
            let d = copy.delimiter.encode_utf8(&mut d).as_bytes();
            memchr::memmem::find(value, d).is_some()
        })
        || value == copy.null.as_bytes();
    if !quote {
        out.put_slice(value);
        return;
    }
    out.put_u8(b'"');
    let mut run = 0;
    for i in memchr::memchr_iter(b'"', value) {
        out.put_slice(&value[run..=i]);
        out.put_u8(b'"');
        run = i + 1;
    }
    out.put_slice(&value[run..]);
    out.put_u8(b'"');
}

/// A CSV field (a header's name) quoted where it must be.
pub fn csv_field(s: &str, delimiter: char) -> String {
    if s.is_empty() || s.contains([delimiter, '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Writes a result's batches as `DataRow`s, each column in its format.
pub struct DataRows {
    fields: Arc<Vec<FieldInfo>>,
    scratch: BytesMut,
    /// The size of the last batch's rows: the next is reserved as large.
    last: usize,
}

impl DataRows {
    /// The writer of rows described by `fields` (their types and formats).
    pub fn new(fields: Arc<Vec<FieldInfo>>) -> Self {
        DataRows {
            fields,
            scratch: BytesMut::new(),
            last: 0,
        }
    }

    /// The rows of `batch`: encoded into one buffer, each row a slice of
    /// it.
    pub fn batch(&mut self, batch: &RecordBatch) -> PgWireResult<Vec<DataRow>> {
        let columns = plain_columns(batch)?;
        let columns: Vec<(Column<'_>, &FieldInfo)> = columns
            .iter()
            .zip(self.fields.iter())
            .map(|(c, f)| {
                let binary = f.format() == FieldFormat::Binary;
                (Column::of(c, f.datatype(), binary), f)
            })
            .collect();
        let field_count = i16::try_from(columns.len())
            .map_err(|_| errors::error("54011", "a result of more than 32767 columns"))?;
        let mut buf = BytesMut::with_capacity(self.last + self.last / 8);
        let mut ends = Vec::with_capacity(batch.num_rows());
        let mut digits = itoa::Buffer::new();
        for row in 0..batch.num_rows() {
            for (c, f) in &columns {
                let at = buf.len();
                // The length, -1 for NULL, written once the value is.
                buf.put_i32(-1);
                if types::null_at(c.array(), row) {
                    continue;
                }
                let ty = f.datatype();
                if f.format() == FieldFormat::Binary {
                    c.binary(row, ty, &mut buf)
                } else {
                    c.text(row, ty, &mut self.scratch, &mut digits)
                        .map(|v| buf.put_slice(v))
                }
                .map_err(|e| errors::error("XX000", format!("writing a value: {e}")))?;
                let len = i32::try_from(buf.len() - at - 4)
                    .map_err(|_| errors::error("54000", "a value larger than 2 GiB"))?;
                buf[at..at + 4].copy_from_slice(&len.to_be_bytes());
            }
            ends.push(buf.len());
        }
        self.last = buf.len();
        let mut rows = Vec::with_capacity(ends.len());
        let mut taken = 0;
        for end in ends {
            rows.push(DataRow::new(buf.split_to(end - taken), field_count));
            taken = end;
        }
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy(csv: bool, delimiter: char, null: &str) -> Copy {
        Copy {
            query: String::new(),
            csv,
            header: false,
            delimiter,
            null: null.into(),
        }
    }

    /// The old per-byte escape, the reference for the runs copied.
    fn text_reference(value: &[u8], delimiter: char) -> Vec<u8> {
        let mut line = Vec::new();
        for &b in value {
            match b {
                b'\\' => line.extend_from_slice(b"\\\\"),
                b'\n' => line.extend_from_slice(b"\\n"),
                b'\r' => line.extend_from_slice(b"\\r"),
                b'\t' => line.extend_from_slice(b"\\t"),
                _ if b as char == delimiter => line.extend_from_slice(&[b'\\', b]),
                _ => line.push(b),
            }
        }
        line
    }

    /// The old CSV quoting, the reference.
    fn csv_reference(value: &[u8], c: &Copy) -> Vec<u8> {
        let s = String::from_utf8_lossy(value);
        let quote = s.is_empty() && c.null.is_empty()
            || s.contains([c.delimiter, '"', '\n', '\r'])
            || s == c.null;
        if quote {
            format!("\"{}\"", s.replace('"', "\"\"")).into_bytes()
        } else {
            value.to_vec()
        }
    }

    #[test]
    fn escapes_and_quotes_match_the_per_byte_rules() {
        let values: [&[u8]; 12] = [
            b"",
            b"plain",
            b"tab\there",
            b"line\nbreak\r\n",
            b"back\\slash\\",
            b"\\N",
            b"a,b;c|d",
            b"\"quoted\" \"\"",
            "é|ü,ß".as_bytes(),
            b"\t\t\n",
            b"NULL",
            b"x",
        ];
        for delimiter in ['\t', ',', ';', '|', 'é', 'x'] {
            for null in ["\\N", "", "NULL", "x"] {
                for csv in [false, true] {
                    let c = copy(csv, delimiter, null);
                    let lines = CopyLines::new(&c, Arc::new(Vec::new()));
                    for v in values {
                        let mut out = BytesMut::new();
                        if csv {
                            csv_value(&mut out, v, &lines.special, &c, lines.wide_delimiter);
                            assert_eq!(&out[..], &csv_reference(v, &c)[..], "{c:?} {v:?}");
                        } else {
                            text_value(&mut out, v, &lines.special);
                            assert_eq!(&out[..], &text_reference(v, delimiter)[..], "{v:?}");
                        }
                    }
                }
            }
        }
    }
}
