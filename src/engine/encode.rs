//! Result encoding: JSON, NDJSON, CSV and Arrow IPC, all built on the arrow
//! writers. Encoders turn record batches into bytes incrementally, so a result
//! streams in memory bounded by a few batches.
//!
//! JSON needs a few rules arrow-json's defaults do not follow, supplied through
//! its `EncoderFactory` hook: integers and decimals beyond 2^53 become strings
//! (JavaScript clients would round them), NaN/Infinity become strings (JSON has
//! no such numbers), binary becomes base64, intervals become ISO 8601
//! durations, unions and maps with non-string keys nest naturally.

use std::io::Write as _;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch, StringArray, StructArray, UnionArray};
use arrow::datatypes::{
    DataType, Decimal128Type, Decimal256Type, Field, FieldRef, Float16Type, Float32Type,
    Float64Type, Int64Type, IntervalUnit, Schema, SchemaRef, UInt64Type,
};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, Encoder, EncoderFactory, EncoderOptions, NullableEncoder};
use base64::Engine as _;
use serde::Serialize;

/// Largest integer a JSON consumer using doubles represents exactly.
const MAX_SAFE_INTEGER: u64 = 1 << 53;

/// A response format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// One JSON document: columns, rows as arrays, row count, truncation, time.
    Json,
    /// One JSON object per row and line.
    Ndjson,
    /// RFC 4180 CSV with a header line.
    Csv,
    /// Arrow IPC stream.
    Arrow,
}

impl Format {
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Ndjson => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Arrow => "application/vnd.apache.arrow.stream",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            "csv" => Some(Format::Csv),
            "arrow" | "ipc" => Some(Format::Arrow),
            _ => None,
        }
    }

    /// The format an `Accept` header asks for. `Ok(None)` when it accepts
    /// anything; `Err` when it accepts nothing we produce.
    pub fn from_accept(accept: &str) -> Result<Option<Self>, NotAcceptable> {
        let mut best: Option<(f32, Option<Format>)> = None;
        for part in accept.split(',') {
            let mut pieces = part.split(';');
            let media = pieces.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = pieces
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if q <= 0.0 {
                continue;
            }
            let format = match media.as_str() {
                "application/json" | "application/problem+json" => Some(Format::Json),
                "application/x-ndjson" | "application/ndjson" | "application/jsonl" => {
                    Some(Format::Ndjson)
                }
                "text/csv" => Some(Format::Csv),
                "application/vnd.apache.arrow.stream" => Some(Format::Arrow),
                "*/*" | "application/*" | "text/*" => None,
                _ => continue,
            };
            if best.as_ref().is_none_or(|(bq, _)| q > *bq) {
                best = Some((q, format));
            }
        }
        match best {
            Some((_, f)) => Ok(f),
            None if accept.trim().is_empty() => Ok(None),
            None => Err(NotAcceptable),
        }
    }
}

/// An `Accept` header that allows none of the result formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotAcceptable;

/// A column of the result, as the JSON answer names it.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Column {
    pub name: String,
    /// DuckDB's type name, e.g. `INTEGER`, `DECIMAL(18,3)`, `STRUCT(a INTEGER)`.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// What the encoder needs to write the end of a JSON answer.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub row_count: u64,
    pub truncated: bool,
    pub elapsed_ms: f64,
    pub retried: bool,
}

/// Turns batches of one result into bytes of one format.
pub struct ResultEncoder {
    format: Format,
    schema: SchemaRef,
    options: EncoderOptions,
    /// Rows written so far (JSON needs it for separators).
    rows: u64,
    ipc: Option<arrow::ipc::writer::StreamWriter<Vec<u8>>>,
    csv_header_pending: bool,
    /// CSV whose columns DuckDB already rendered as text, with these names.
    csv_text: Option<Arc<Vec<String>>>,
    /// Arrow columns that hold UHUGEINT (see [`ResultEncoder::unsigned_huge`]).
    uhugeint: Vec<usize>,
}

impl ResultEncoder {
    pub fn new(format: Format, schema: SchemaRef) -> Self {
        // NDJSON rows are objects: repeated column names would be repeated
        // keys, which a JSON parser collapses. CSV headers follow DuckDB too.
        let schema = match format {
            Format::Ndjson | Format::Csv => dedup_schema(&schema),
            _ => schema,
        };
        let options = EncoderOptions::default()
            .with_explicit_nulls(true)
            .with_encoder_factory(Arc::new(JsonRules));
        Self {
            format,
            schema,
            options,
            rows: 0,
            ipc: None,
            csv_header_pending: true,
            csv_text: None,
            uhugeint: Vec::new(),
        }
    }

    /// DuckDB exports UHUGEINT as a signed Decimal128 of the same bits, so
    /// values from 2^127 read negative. Arrow answers carry these columns
    /// (by index) as Decimal256(39, 0), which holds every UHUGEINT exactly.
    /// Call before [`ResultEncoder::begin`].
    pub fn unsigned_huge(&mut self, columns: Vec<usize>) {
        if self.format != Format::Arrow || columns.is_empty() {
            return;
        }
        let fields: Vec<FieldRef> = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| match f.data_type() {
                DataType::Decimal128(_, 0) if columns.contains(&i) => Arc::new(
                    f.as_ref()
                        .clone()
                        .with_data_type(DataType::Decimal256(39, 0)),
                ),
                _ => f.clone(),
            })
            .collect();
        self.uhugeint = columns
            .into_iter()
            .filter(|i| fields[*i].data_type() == &DataType::Decimal256(39, 0))
            .collect();
        self.schema = Arc::new(Schema::new_with_metadata(
            fields,
            self.schema.metadata().clone(),
        ));
    }

    /// The batches are DuckDB's own VARCHAR rendering of every column (the
    /// query was wrapped in casts), so CSV is written with DuckDB's COPY
    /// rules only: NULL empty, a value quoted when it is empty or holds a
    /// comma, quote or line break, quotes doubled. `names` head the columns.
    pub fn duckdb_text(&mut self, names: Vec<String>) {
        self.csv_text = Some(Arc::new(dedup_names(names.iter().map(String::as_str))));
    }

    /// The first bytes of the body.
    pub fn begin(&mut self, columns: &[Column], out: &mut Vec<u8>) -> Result<(), ArrowError> {
        match self.format {
            Format::Json => {
                out.extend_from_slice(b"{\"columns\":");
                serde_json::to_writer(&mut *out, columns)
                    .map_err(|e| ArrowError::JsonError(e.to_string()))?;
                out.extend_from_slice(b",\"rows\":[");
            }
            Format::Ndjson => {}
            Format::Csv => match &self.csv_text {
                Some(names) => {
                    for (i, name) in names.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        csv_field(out, name);
                    }
                    out.push(b'\n');
                    self.csv_header_pending = false;
                }
                None => {
                    let empty = RecordBatch::new_empty(csv_schema(&self.schema));
                    self.write_csv(&empty, out)?;
                }
            },
            Format::Arrow => {
                let writer = arrow::ipc::writer::StreamWriter::try_new(Vec::new(), &self.schema)?;
                self.ipc = Some(writer);
                self.drain_ipc(out);
            }
        }
        Ok(())
    }

    /// Appends one batch.
    pub fn batch(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match self.format {
            Format::Arrow if !self.uhugeint.is_empty() => {
                let mut columns = batch.columns().to_vec();
                for &i in &self.uhugeint {
                    let unsigned: arrow::array::Decimal256Array = columns[i]
                        .as_primitive::<Decimal128Type>()
                        .unary(|v| arrow::datatypes::i256::from_parts(v as u128, 0));
                    columns[i] = Arc::new(unsigned.with_precision_and_scale(39, 0)?);
                }
                let batch = RecordBatch::try_new(self.schema.clone(), columns)?;
                let w = self.ipc.as_mut().expect("begin() ran");
                w.write(&batch)?;
                self.drain_ipc(out);
            }
            Format::Arrow => {
                let w = self.ipc.as_mut().expect("begin() ran");
                w.write(batch)?;
                self.drain_ipc(out);
            }
            _ => {
                self.rows_encoder().encode(batch, self.rows, out)?;
                self.csv_header_pending = false;
            }
        }
        self.rows += batch.num_rows() as u64;
        Ok(())
    }

    /// A stateless encoder of row batches, which threads can share; `None`
    /// for Arrow IPC, whose stream writer is sequential.
    pub fn rows_encoder(&self) -> RowsEncoder {
        RowsEncoder {
            format: self.format,
            schema: self.schema.clone(),
            options: self.options.clone(),
            csv_text: self.csv_text.is_some(),
        }
    }

    /// The last bytes of a complete body.
    pub fn finish(&mut self, summary: Summary, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        match self.format {
            Format::Json => {
                write!(
                    out,
                    "],\"row_count\":{},\"truncated\":{},\"elapsed_ms\":{:.3}",
                    summary.row_count, summary.truncated, summary.elapsed_ms
                )
                .expect("writing to a Vec");
                if summary.retried {
                    out.extend_from_slice(b",\"retried\":true");
                }
                out.push(b'}');
            }
            Format::Ndjson => {
                if summary.truncated {
                    out.extend_from_slice(b"{\"truncated\":true,\"row_count\":");
                    write!(out, "{}", summary.row_count).expect("writing to a Vec");
                    out.extend_from_slice(b"}\n");
                }
            }
            Format::Csv => {}
            Format::Arrow => {
                if let Some(w) = self.ipc.as_mut() {
                    w.finish()?;
                }
                self.drain_ipc(out);
            }
        }
        Ok(())
    }

    /// For NDJSON, a last line that reports an error after rows were sent.
    /// Other formats cannot carry one; their body is aborted instead.
    pub fn error_record(&self, problem: &serde_json::Value) -> Option<Vec<u8>> {
        if self.format != Format::Ndjson {
            return None;
        }
        let mut line = serde_json::to_vec(&serde_json::json!({ "error": problem })).ok()?;
        line.push(b'\n');
        Some(line)
    }

    fn write_csv(&mut self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        let mut w = arrow::csv::WriterBuilder::new()
            .with_header(self.csv_header_pending)
            .build(&mut *out);
        w.write(batch)?;
        self.csv_header_pending = false;
        Ok(())
    }

    fn drain_ipc(&mut self, out: &mut Vec<u8>) {
        if let Some(w) = self.ipc.as_mut() {
            if out.is_empty() {
                // Hand the writer's buffer over instead of copying it.
                std::mem::swap(out, w.get_mut());
            } else {
                out.append(w.get_mut());
            }
        }
    }
}

/// Encodes row batches of JSON, NDJSON or CSV without state of its own, so
/// several threads can encode consecutive batches at once.
#[derive(Clone)]
pub struct RowsEncoder {
    format: Format,
    schema: SchemaRef,
    options: EncoderOptions,
    /// The columns are DuckDB's text (see [`ResultEncoder::duckdb_text`]).
    csv_text: bool,
}

impl RowsEncoder {
    /// Whether batches of this format may be encoded in parallel.
    pub fn parallel(&self) -> bool {
        self.format != Format::Arrow
    }

    /// Appends `batch`; `rows_before` is how many rows the body already holds
    /// (JSON separates rows with commas).
    pub fn encode(
        &self,
        batch: &RecordBatch,
        rows_before: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        if batch.num_rows() == 0 {
            return Ok(());
        }
        match self.format {
            Format::Json => {
                let mut encoders = self
                    .schema
                    .fields()
                    .iter()
                    .zip(batch.columns())
                    .map(|(f, c)| make_encoder(f, c.as_ref(), &self.options))
                    .collect::<Result<Vec<_>, _>>()?;
                for row in 0..batch.num_rows() {
                    if rows_before > 0 || row > 0 {
                        out.push(b',');
                    }
                    out.push(b'[');
                    for (i, enc) in encoders.iter_mut().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        if enc.is_null(row) {
                            out.extend_from_slice(b"null");
                        } else {
                            enc.encode(row, out);
                        }
                    }
                    out.push(b']');
                }
            }
            Format::Ndjson => {
                // The (deduplicated) names of the schema, the batch's arrays.
                let array = StructArray::try_new(
                    self.schema.fields().clone(),
                    batch.columns().to_vec(),
                    None,
                )?;
                let field: FieldRef =
                    Arc::new(Field::new_struct("", self.schema.fields().clone(), false));
                let mut enc = make_encoder(&field, &array, &self.options)?;
                for row in 0..batch.num_rows() {
                    enc.encode(row, out);
                    out.push(b'\n');
                }
            }
            Format::Csv if self.csv_text => csv_text_rows(batch, out)?,
            Format::Csv => {
                let converted = csv_batch(batch, &self.options)?;
                let mut w = arrow::csv::WriterBuilder::new()
                    .with_header(false)
                    .build(&mut *out);
                w.write(&converted)?;
            }
            Format::Arrow => {
                return Err(ArrowError::InvalidArgumentError(
                    "Arrow IPC is written by its stream writer".into(),
                ))
            }
        }
        Ok(())
    }
}

/// Column names made unique the way DuckDB's own writers do (its
/// `DeduplicateColumns`): a name seen before, case-insensitively, gets `_1`,
/// `_2`, ... (one counter per name), skipping names already taken. `a, a, A`
/// become `a, a_1, A_2`.
pub fn dedup_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut counts: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut out = Vec::new();
    for name in names {
        let key = name.to_lowercase();
        let Some(count) = counts.get(&key).copied() else {
            counts.insert(key, 0);
            out.push(name.to_string());
            continue;
        };
        let mut n = count;
        let renamed = loop {
            n += 1;
            let candidate = format!("{name}_{n}");
            if !counts.contains_key(&candidate.to_lowercase()) {
                break candidate;
            }
        };
        counts.insert(key, n);
        counts.insert(renamed.to_lowercase(), 0);
        out.push(renamed);
    }
    out
}

/// `schema` with its field names made unique ([`dedup_names`]).
fn dedup_schema(schema: &Schema) -> SchemaRef {
    let names = dedup_names(schema.fields().iter().map(|f| f.name().as_str()));
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .zip(names)
            .map(|(f, n)| Arc::new(f.as_ref().clone().with_name(n)))
            .collect::<Vec<FieldRef>>(),
    ))
}

/// Writes one CSV field by DuckDB's COPY rules (see `duckdb_text`).
fn csv_field(out: &mut Vec<u8>, v: &str) {
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
fn csv_text_rows(batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
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

fn csv_schema(schema: &Schema) -> SchemaRef {
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

fn csv_batch(batch: &RecordBatch, options: &EncoderOptions) -> Result<RecordBatch, ArrowError> {
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

/// DuckDB type names for the columns of a result, from the Arrow schema.
pub fn columns(schema: &Schema, duckdb_types: &[String]) -> Vec<Column> {
    schema
        .fields()
        .iter()
        .enumerate()
        .map(|(i, f)| Column {
            name: f.name().clone(),
            type_name: duckdb_types
                .get(i)
                .cloned()
                .unwrap_or_else(|| f.data_type().to_string()),
        })
        .collect()
}

/// The JSON rules arrow-json does not apply by default.
#[derive(Debug)]
struct JsonRules;

impl EncoderFactory for JsonRules {
    fn make_default_encoder<'a>(
        &self,
        field: &'a FieldRef,
        array: &'a dyn Array,
        options: &'a EncoderOptions,
    ) -> Result<Option<NullableEncoder<'a>>, ArrowError> {
        let nulls = array.nulls().cloned();
        let enc: Box<dyn Encoder + 'a> = match array.data_type() {
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
                Box::new(Quoted(move |i| timestamp_text(array, unit, zoned, i)))
            }
            DataType::Time64(arrow::datatypes::TimeUnit::Microsecond) => {
                let a = array.as_primitive::<arrow::datatypes::Time64MicrosecondType>();
                Box::new(Quoted(move |i| time_text(a.value(i) as i128 * 1000)))
            }
            DataType::Time64(arrow::datatypes::TimeUnit::Nanosecond) => {
                let a = array.as_primitive::<arrow::datatypes::Time64NanosecondType>();
                Box::new(Quoted(move |i| time_text(a.value(i) as i128)))
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
                Box::new(Quoted(move |i| iso_interval(array, unit, i)))
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
                ) {
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
        if v.unsigned_abs() > MAX_SAFE_INTEGER {
            write!(out, "\"{v}\"").expect("writing to a Vec");
        } else {
            write!(out, "{v}").expect("writing to a Vec");
        }
    }
}

struct SafeUInt<'a>(&'a arrow::array::UInt64Array);
impl Encoder for SafeUInt<'_> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let v = self.0.value(idx);
        if v > MAX_SAFE_INTEGER {
            write!(out, "\"{v}\"").expect("writing to a Vec");
        } else {
            write!(out, "{v}").expect("writing to a Vec");
        }
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
trait JsonFloat: serde::Serialize + Copy {
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_sign_positive(self) -> bool;

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
            serde_json::to_writer(out, &self).expect("finite float");
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
}

struct Decimal<F>(F);
impl<F: Fn(usize) -> (i128, i8)> Encoder for Decimal<F> {
    fn encode(&mut self, idx: usize, out: &mut Vec<u8>) {
        let (unscaled, scale) = (self.0)(idx);
        let text = decimal_text(unscaled, scale);
        if unscaled.unsigned_abs() > MAX_SAFE_INTEGER as u128 {
            out.push(b'"');
            out.extend_from_slice(text.as_bytes());
            out.push(b'"');
        } else {
            out.extend_from_slice(text.as_bytes());
        }
    }
}

/// Exact decimal text of `unscaled * 10^-scale`.
fn decimal_text(unscaled: i128, scale: i8) -> String {
    if scale <= 0 {
        let mut s = unscaled.to_string();
        if unscaled != 0 {
            s.extend(std::iter::repeat_n('0', (-scale) as usize));
        }
        return s;
    }
    let scale = scale as usize;
    let digits = unscaled.unsigned_abs().to_string();
    let sign = if unscaled < 0 { "-" } else { "" };
    if digits.len() <= scale {
        format!("{sign}0.{}{digits}", "0".repeat(scale - digits.len()))
    } else {
        let (int, frac) = digits.split_at(digits.len() - scale);
        format!("{sign}{int}.{frac}")
    }
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
        if v <= (1u128 << 53) {
            write!(out, "{v}").expect("writing to a Vec");
        } else {
            write!(out, "\"{v}\"").expect("writing to a Vec");
        }
    }
}

/// A TIMESTAMP as ISO 8601 (TIMESTAMPTZ in UTC with `+00:00`), or DuckDB's
/// `infinity` / `-infinity`.
fn timestamp_text(
    array: &dyn Array,
    unit: arrow::datatypes::TimeUnit,
    zoned: bool,
    idx: usize,
) -> String {
    use arrow::datatypes::{
        TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    let raw = match unit {
        TimeUnit::Second => array.as_primitive::<TimestampSecondType>().value(idx),
        TimeUnit::Millisecond => array.as_primitive::<TimestampMillisecondType>().value(idx),
        TimeUnit::Microsecond => array.as_primitive::<TimestampMicrosecondType>().value(idx),
        TimeUnit::Nanosecond => array.as_primitive::<TimestampNanosecondType>().value(idx),
    };
    if raw == i64::MAX {
        return "infinity".into();
    }
    if raw == -i64::MAX {
        return "-infinity".into();
    }
    let text = utc_timestamp(array, unit, idx);
    if zoned {
        text
    } else {
        text.trim_end_matches("+00:00").to_string()
    }
}

/// A time of day from nanoseconds; DuckDB's `24:00:00` is a valid TIME.
fn time_text(nanos: i128) -> String {
    let (secs, frac) = (nanos / 1_000_000_000, nanos % 1_000_000_000);
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    // Fractions in groups of three digits, as elsewhere in the answers.
    let f = format!("{frac:09}");
    match frac {
        0 => format!("{h:02}:{m:02}:{s:02}"),
        _ if frac % 1_000_000 == 0 => format!("{h:02}:{m:02}:{s:02}.{}", &f[..3]),
        _ if frac % 1_000 == 0 => format!("{h:02}:{m:02}:{s:02}.{}", &f[..6]),
        _ => format!("{h:02}:{m:02}:{s:02}.{f}"),
    }
}

/// A timestamp as ISO 8601 in UTC, for every value DuckDB holds (chrono's
/// formatter stops at ±262,143 years; DuckDB's TIMESTAMP reaches 294,247).
fn utc_timestamp(array: &dyn Array, unit: arrow::datatypes::TimeUnit, idx: usize) -> String {
    use arrow::datatypes::{
        TimeUnit, TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
        TimestampSecondType,
    };
    let (raw, per_second): (i64, i128) = match unit {
        TimeUnit::Second => (array.as_primitive::<TimestampSecondType>().value(idx), 1),
        TimeUnit::Millisecond => (
            array.as_primitive::<TimestampMillisecondType>().value(idx),
            1_000,
        ),
        TimeUnit::Microsecond => (
            array.as_primitive::<TimestampMicrosecondType>().value(idx),
            1_000_000,
        ),
        TimeUnit::Nanosecond => (
            array.as_primitive::<TimestampNanosecondType>().value(idx),
            1_000_000_000,
        ),
    };
    let per_day = per_second * 86_400;
    let raw = raw as i128;
    let (days, in_day) = (raw.div_euclid(per_day), raw.rem_euclid(per_day));
    let nanos = in_day * (1_000_000_000 / per_second);
    let time = time_text(nanos);
    format!("{}T{time}+00:00", date_text(days as i64))
}

/// A proleptic Gregorian date from days since 1970-01-01, for any day
/// (Howard Hinnant's `civil_from_days`); years as chrono writes them:
/// four digits, a sign beyond 9999 or before year 0.
fn date_text(days: i64) -> String {
    let z = days as i128 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i128::from(month <= 2);
    match year {
        0..=9999 => format!("{year:04}-{month:02}-{day:02}"),
        y if y > 9999 => format!("+{year}-{month:02}-{day:02}"),
        _ => format!("-{:04}-{month:02}-{day:02}", -year),
    }
}

/// An interval as an ISO 8601 duration, e.g. `P1Y2M3DT4H5M6.5S`.
fn iso_interval(array: &dyn Array, unit: IntervalUnit, idx: usize) -> String {
    use arrow::datatypes::{IntervalDayTimeType, IntervalMonthDayNanoType, IntervalYearMonthType};
    let (months, days, nanos): (i64, i64, i64) = match unit {
        IntervalUnit::YearMonth => (
            array.as_primitive::<IntervalYearMonthType>().value(idx) as i64,
            0,
            0,
        ),
        IntervalUnit::DayTime => {
            let v = array.as_primitive::<IntervalDayTimeType>().value(idx);
            (0, v.days as i64, v.milliseconds as i64 * 1_000_000)
        }
        IntervalUnit::MonthDayNano => {
            let v = array.as_primitive::<IntervalMonthDayNanoType>().value(idx);
            (v.months as i64, v.days as i64, v.nanoseconds)
        }
    };
    format_iso_duration(months, days, nanos)
}

fn format_iso_duration(months: i64, days: i64, nanos: i64) -> String {
    let mut s = String::from("P");
    let (years, months) = (months / 12, months % 12);
    if years != 0 {
        s += &format!("{years}Y");
    }
    if months != 0 {
        s += &format!("{months}M");
    }
    if days != 0 {
        s += &format!("{days}D");
    }
    if nanos != 0 {
        s.push('T');
        let neg = nanos < 0;
        let n = nanos.unsigned_abs();
        let hours = n / 3_600_000_000_000;
        let minutes = (n / 60_000_000_000) % 60;
        let secs = (n / 1_000_000_000) % 60;
        let frac = n % 1_000_000_000;
        let sign = if neg { "-" } else { "" };
        if hours != 0 {
            s += &format!("{sign}{hours}H");
        }
        if minutes != 0 {
            s += &format!("{sign}{minutes}M");
        }
        if secs != 0 || frac != 0 {
            if frac != 0 {
                let f = format!("{frac:09}");
                s += &format!("{sign}{secs}.{}S", f.trim_end_matches('0'));
            } else {
                s += &format!("{sign}{secs}S");
            }
        }
    }
    if s == "P" {
        s += "T0S";
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

/// DuckDB's name for a result column's type: from DuckDB's logical type
/// where Arrow loses the distinction (UUID, JSON, HUGEINT, TIMESTAMPTZ, ...),
/// otherwise from the Arrow type it was exported as.
pub fn logical_type_name(lt: &duckdb::core::LogicalTypeHandle, dt: &DataType) -> String {
    use duckdb::core::LogicalTypeId as Id;
    if let Some(alias) = lt.get_alias() {
        return alias.to_ascii_uppercase();
    }
    match lt.try_id() {
        Ok(Id::Uuid) => "UUID".into(),
        Ok(Id::Hugeint) => "HUGEINT".into(),
        Ok(Id::UHugeint) => "UHUGEINT".into(),
        Ok(Id::TimestampTZ) => "TIMESTAMP WITH TIME ZONE".into(),
        Ok(Id::TimeTZ) => "TIME WITH TIME ZONE".into(),
        Ok(Id::Bit) => "BIT".into(),
        Ok(Id::Bignum) => "BIGNUM".into(),
        Ok(Id::Varchar) => "VARCHAR".into(),
        Ok(Id::Blob) => "BLOB".into(),
        Ok(Id::Decimal) => format!("DECIMAL({},{})", lt.decimal_width(), lt.decimal_scale()),
        _ => duckdb_type_name(dt),
    }
}

/// DuckDB's name for the type a column was exported as.
pub fn duckdb_type_name(dt: &DataType) -> String {
    use arrow::datatypes::TimeUnit;
    match dt {
        DataType::Null => "NULL".into(),
        DataType::Boolean => "BOOLEAN".into(),
        DataType::Int8 => "TINYINT".into(),
        DataType::Int16 => "SMALLINT".into(),
        DataType::Int32 => "INTEGER".into(),
        DataType::Int64 => "BIGINT".into(),
        DataType::UInt8 => "UTINYINT".into(),
        DataType::UInt16 => "USMALLINT".into(),
        DataType::UInt32 => "UINTEGER".into(),
        DataType::UInt64 => "UBIGINT".into(),
        DataType::Float16 | DataType::Float32 => "FLOAT".into(),
        DataType::Float64 => "DOUBLE".into(),
        DataType::Decimal32(p, s)
        | DataType::Decimal64(p, s)
        | DataType::Decimal128(p, s)
        | DataType::Decimal256(p, s) => {
            format!("DECIMAL({p},{s})")
        }
        DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View => "VARCHAR".into(),
        DataType::Binary
        | DataType::LargeBinary
        | DataType::BinaryView
        | DataType::FixedSizeBinary(_) => "BLOB".into(),
        DataType::Date32 | DataType::Date64 => "DATE".into(),
        DataType::Time32(_) | DataType::Time64(_) => "TIME".into(),
        DataType::Timestamp(unit, tz) => {
            let base = match unit {
                TimeUnit::Second => "TIMESTAMP_S",
                TimeUnit::Millisecond => "TIMESTAMP_MS",
                TimeUnit::Microsecond => "TIMESTAMP",
                TimeUnit::Nanosecond => "TIMESTAMP_NS",
            };
            if tz.is_some() {
                "TIMESTAMP WITH TIME ZONE".into()
            } else {
                base.into()
            }
        }
        DataType::Duration(_) | DataType::Interval(_) => "INTERVAL".into(),
        DataType::List(f)
        | DataType::LargeList(f)
        | DataType::ListView(f)
        | DataType::LargeListView(f) => {
            format!("{}[]", duckdb_type_name(f.data_type()))
        }
        DataType::FixedSizeList(f, n) => format!("{}[{n}]", duckdb_type_name(f.data_type())),
        DataType::Struct(fields) => format!(
            "STRUCT({})",
            fields
                .iter()
                .map(|f| format!(
                    "{} {}",
                    quote_ident(f.name()),
                    duckdb_type_name(f.data_type())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::Map(entries, _) => match entries.data_type() {
            DataType::Struct(kv) if kv.len() == 2 => format!(
                "MAP({}, {})",
                duckdb_type_name(kv[0].data_type()),
                duckdb_type_name(kv[1].data_type())
            ),
            _ => "MAP".into(),
        },
        DataType::Union(fields, _) => format!(
            "UNION({})",
            fields
                .iter()
                .map(|(_, f)| format!(
                    "{} {}",
                    quote_ident(f.name()),
                    duckdb_type_name(f.data_type())
                ))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        DataType::Dictionary(_, v) if matches!(**v, DataType::Utf8 | DataType::LargeUtf8) => {
            "ENUM".into()
        }
        DataType::Dictionary(_, v) => duckdb_type_name(v),
        DataType::RunEndEncoded(_, v) => duckdb_type_name(v.data_type()),
    }
}

fn quote_ident(name: &str) -> String {
    if !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && !name.starts_with(|c: char| c.is_ascii_digit())
    {
        name.to_string()
    } else {
        format!("\"{}\"", name.replace('"', "\"\""))
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

    #[test]
    fn decimals_are_exact() {
        assert_eq!(decimal_text(12345, 3), "12.345");
        assert_eq!(decimal_text(-5, 3), "-0.005");
        assert_eq!(decimal_text(0, 2), "0.00");
        assert_eq!(decimal_text(7, 0), "7");
    }

    #[test]
    fn intervals_are_iso_8601() {
        assert_eq!(
            format_iso_duration(14, 3, 3_723_500_000_000),
            "P1Y2M3DT1H2M3.5S"
        );
        assert_eq!(format_iso_duration(0, 0, 0), "PT0S");
        assert_eq!(format_iso_duration(0, -1, 0), "P-1D");
    }

    #[test]
    fn accept_negotiation() {
        assert_eq!(Format::from_accept("text/csv"), Ok(Some(Format::Csv)));
        assert_eq!(Format::from_accept("*/*"), Ok(None));
        assert_eq!(
            Format::from_accept("application/json;q=0.5, application/vnd.apache.arrow.stream"),
            Ok(Some(Format::Arrow))
        );
        assert_eq!(Format::from_accept("image/png"), Err(NotAcceptable));
    }
}
