//! Result encoding: JSON, NDJSON, CSV and Arrow IPC, built on the arrow
//! writers; nothing here knows HTTP. Encoders turn record batches into bytes
//! incrementally, so a result streams in memory bounded by a few batches.
//!
//! - [`json`]: the JSON rules arrow-json's defaults do not follow (integers
//!   beyond 2^53 as strings, NaN as strings, base64 binary, DuckDB's infinite
//!   dates, unnamed structs as arrays, ...).
//! - [`csv`]: DuckDB's COPY quoting over DuckDB's own VARCHAR text.
//! - [`types`]: DuckDB's names for the types of a result.
//! - [`marks`]: the fields that hold what DuckDB's Arrow export has no type
//!   for (VARIANT, TYPE), rendered by DuckDB.
//!
//! Values Arrow cannot carry faithfully are rendered by DuckDB itself before
//! they get here (the engine wraps the query; see `ResultShape::json_exprs`).

pub mod csv;
pub(crate) mod ipc;
pub mod json;
pub mod marks;
pub mod types;

pub use json::DUCKDB_TYPE_KEY;
pub use marks::{mark_schema, mark_uuids, Mark};
pub use types::{duckdb_type_name, logical_type_name};

use std::io::Write as _;
use std::sync::Arc;

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::{DataType, Decimal128Type, FieldRef, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::json::writer::{make_encoder, EncoderOptions, NullableEncoder};
use serde::Serialize;

/// A response format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
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
    /// A Parquet file, written by DuckDB's own COPY.
    Parquet,
}

impl Format {
    /// Every format, in the order the API lists them.
    pub const ALL: [Format; 5] = [
        Format::Json,
        Format::Ndjson,
        Format::Csv,
        Format::Arrow,
        Format::Parquet,
    ];

    /// Whether a body in this format is JSON text (else bytes of a file
    /// format: CSV, Arrow IPC, Parquet, written by DuckDB or Arrow).
    pub fn is_json(self) -> bool {
        matches!(self, Format::Json | Format::Ndjson)
    }

    /// The `Content-Type` of a body in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Json => "application/json",
            Format::Ndjson => "application/x-ndjson",
            Format::Csv => "text/csv; charset=utf-8",
            Format::Arrow => "application/vnd.apache.arrow.stream",
            Format::Parquet => "application/vnd.apache.parquet",
        }
    }

    /// The format's name, as `format=` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Ndjson => "ndjson",
            Format::Csv => "csv",
            Format::Arrow => "arrow",
            Format::Parquet => "parquet",
        }
    }

    /// The format `format=` names (case-insensitive; also `jsonl` and `ipc`).
    pub fn from_name(name: &str) -> Option<Self> {
        match name.trim().to_ascii_lowercase().as_str() {
            "json" => Some(Format::Json),
            "ndjson" | "jsonl" => Some(Format::Ndjson),
            "csv" => Some(Format::Csv),
            "arrow" | "ipc" => Some(Format::Arrow),
            "parquet" => Some(Format::Parquet),
            _ => None,
        }
    }
}

/// Arrow IPC's own compression of a record batch's buffers (the format's
/// `BodyCompression`), which every Arrow reader undoes itself: the way to
/// ask for a smaller Arrow answer, since a general-purpose compressor
/// around the stream (`Content-Encoding`) is never applied to one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrowCodec {
    /// LZ4 frames: cheap to write and read, a modest ratio.
    Lz4,
    /// Zstandard at its default level: a better ratio for more CPU.
    Zstd,
}

impl ArrowCodec {
    /// The codec `arrow_compression=` names (case-insensitive; `lz4_frame`
    /// as Arrow names it too): `Ok(None)` for `none`, `Err` for anything else.
    pub fn from_name(name: &str) -> Result<Option<Self>, UnknownCodec> {
        match name.trim().to_ascii_lowercase().as_str() {
            "zstd" => Ok(Some(ArrowCodec::Zstd)),
            "lz4" | "lz4_frame" => Ok(Some(ArrowCodec::Lz4)),
            "none" | "uncompressed" => Ok(None),
            _ => Err(UnknownCodec),
        }
    }

    /// arrow-ipc's name of it.
    fn ipc(self) -> arrow::ipc::CompressionType {
        match self {
            ArrowCodec::Lz4 => arrow::ipc::CompressionType::LZ4_FRAME,
            ArrowCodec::Zstd => arrow::ipc::CompressionType::ZSTD,
        }
    }
}

/// A name `arrow_compression=` does not know.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnknownCodec;

/// A column of the result, as the JSON answer names it.
#[derive(Debug, Clone, Serialize)]
pub struct Column {
    /// The column's name, as the result has it.
    pub name: String,
    /// DuckDB's type name, e.g. `INTEGER`, `DECIMAL(18,3)`, `STRUCT(a INTEGER)`.
    #[serde(rename = "type")]
    pub type_name: String,
}

/// What the encoder needs to write the end of a JSON answer.
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    /// Rows in the body.
    pub row_count: u64,
    /// Whether the row limit cut the result short.
    pub truncated: bool,
    /// Milliseconds since the query started.
    pub elapsed_ms: f64,
    /// Whether the query ran again after a credential refresh.
    pub retried: bool,
}

/// Turns batches of one result into bytes of one format.
pub struct ResultEncoder {
    format: Format,
    schema: SchemaRef,
    options: EncoderOptions,
    /// Rows written so far (JSON needs it for separators).
    rows: u64,
    ipc: Option<ipc::IpcStream>,
    /// Arrow IPC's buffer compression, if the client asked for it.
    arrow_codec: Option<ArrowCodec>,
    csv_header_pending: bool,
    /// CSV whose columns DuckDB already rendered as text, with these names.
    csv_text: Option<Arc<Vec<String>>>,
    /// Arrow columns that hold UHUGEINT (see [`ResultEncoder::unsigned_huge`]).
    uhugeint: Vec<usize>,
}

impl ResultEncoder {
    /// An encoder of `format` for batches of `schema`.
    pub fn new(format: Format, schema: SchemaRef) -> Self {
        // NDJSON rows are objects: repeated column names would be repeated
        // keys, which a JSON parser collapses. CSV headers follow DuckDB too.
        let schema = match format {
            Format::Ndjson | Format::Csv => dedup_schema(&schema),
            _ => schema,
        };
        let options = EncoderOptions::default()
            .with_explicit_nulls(true)
            .with_encoder_factory(Arc::new(json::JsonRules));
        Self {
            format,
            schema,
            options,
            rows: 0,
            ipc: None,
            arrow_codec: None,
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

    /// Compresses an Arrow answer's buffers with `codec` (Arrow IPC's own
    /// compression; no effect on other formats). Call before
    /// [`ResultEncoder::begin`].
    pub fn arrow_compression(&mut self, codec: Option<ArrowCodec>) {
        self.arrow_codec = codec;
    }

    /// The schema the answer carries (after [`ResultEncoder::unsigned_huge`]).
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
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
                        csv::csv_field(out, name);
                    }
                    out.push(b'\n');
                    self.csv_header_pending = false;
                }
                None => {
                    let empty = RecordBatch::new_empty(csv::csv_schema(&self.schema));
                    self.write_csv(&empty, out)?;
                }
            },
            Format::Arrow => {
                let codec = self.arrow_codec.map(ArrowCodec::ipc);
                self.ipc = Some(ipc::IpcStream::begin(&self.schema, codec, out)?);
            }
            Format::Parquet => return Err(parquet_is_duckdbs()),
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
                // The answer's schema may mark fields (see `marks`) the
                // batch's types do not: the stream's schema message carries
                // the marks, the batch only its data.
                let fields: Vec<FieldRef> = self
                    .schema
                    .fields()
                    .iter()
                    .zip(&columns)
                    .map(|(f, c)| {
                        Arc::new(f.as_ref().clone().with_data_type(c.data_type().clone()))
                    })
                    .collect();
                let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns)?;
                let w = self.ipc.as_mut().expect("begin() ran");
                w.batch(&batch, out)?;
            }
            Format::Arrow => {
                let w = self.ipc.as_mut().expect("begin() ran");
                w.batch(batch, out)?;
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
            // No trailer record: a reader would take it for one more row.
            // A cut the client asked for ends cleanly; any other cut is an
            // error ending (see `QueryJob::rows_asked`).
            Format::Ndjson => {}
            Format::Csv => {}
            Format::Arrow => {
                if let Some(w) = self.ipc.as_mut() {
                    w.finish(out);
                }
            }
            Format::Parquet => return Err(parquet_is_duckdbs()),
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
            Format::Json => self.json_rows(batch, rows_before, out)?,
            Format::Ndjson => self.ndjson_rows(batch, out)?,
            Format::Csv if self.csv_text => csv::csv_text_rows(batch, out)?,
            Format::Csv => {
                let converted = csv::csv_batch(batch, &self.options)?;
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
            Format::Parquet => return Err(parquet_is_duckdbs()),
        }
        Ok(())
    }

    /// One JSON value encoder per column of `batch`.
    fn encoders<'a>(
        &'a self,
        batch: &'a RecordBatch,
    ) -> Result<Vec<NullableEncoder<'a>>, ArrowError> {
        self.schema
            .fields()
            .iter()
            .zip(batch.columns())
            .map(|(f, c)| make_encoder(f, c.as_ref(), &self.options))
            .collect::<Result<Vec<_>, _>>()
    }

    /// The batch's rows as JSON arrays, each after a comma unless it is the
    /// answer's first.
    fn json_rows(
        &self,
        batch: &RecordBatch,
        rows_before: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), ArrowError> {
        let mut encoders = self.encoders(batch)?;
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
        Ok(())
    }

    /// The batch's rows as NDJSON objects, one a line.
    fn ndjson_rows(&self, batch: &RecordBatch, out: &mut Vec<u8>) -> Result<(), ArrowError> {
        // Row by row like JSON, each value after its key: the
        // (deduplicated) names, JSON-escaped once per batch, not per
        // row (as a struct encoder would).
        let mut encoders = self.encoders(batch)?;
        let keys: Vec<Vec<u8>> = self
            .schema
            .fields()
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let mut key = Vec::with_capacity(f.name().len() + 4);
                key.push(if i == 0 { b'{' } else { b',' });
                serde_json::to_writer(&mut key, f.name())
                    .map_err(|e| ArrowError::JsonError(e.to_string()))?;
                key.push(b':');
                Ok(key)
            })
            .collect::<Result<_, ArrowError>>()?;
        for row in 0..batch.num_rows() {
            if encoders.is_empty() {
                out.push(b'{');
            }
            for (enc, key) in encoders.iter_mut().zip(&keys) {
                out.extend_from_slice(key);
                if enc.is_null(row) {
                    out.extend_from_slice(b"null");
                } else {
                    enc.encode(row, out);
                }
            }
            out.extend_from_slice(b"}\n");
        }
        Ok(())
    }
}

/// Parquet answers are DuckDB's own COPY (see `engine::execute`), never
/// encoded here.
fn parquet_is_duckdbs() -> ArrowError {
    ArrowError::InvalidArgumentError("Parquet is written by DuckDB's COPY".into())
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
