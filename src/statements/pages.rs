//! Pages of a spooled result, in any format, encoded exactly as `/query`
//! encodes the same rows: the same encoder, fed the columns `/query` would
//! have run (the result's own values for Arrow, DuckDB's text twins where
//! JSON or CSV use DuckDB's text).

use std::fs::File;
use std::io::BufReader;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::reader::FileReader;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::encode::{self, Format, ResultEncoder, Summary};
use crate::statements::spool::SpoolResult;

/// Encoded bytes are sent in chunks of about this size.
const CHUNK_BYTES: usize = 256 * 1024;

/// Which rows, in which format.
#[derive(Debug, Clone, Copy)]
pub struct Page {
    /// How the rows are encoded.
    pub format: Format,
    /// The first row (0-based).
    pub offset: u64,
    /// Rows at most; `None`: to the end.
    pub limit: Option<u64>,
}

impl Page {
    /// The rows of `result` this page holds.
    pub fn rows(&self, result: &SpoolResult) -> u64 {
        let left = result.rows.saturating_sub(self.offset);
        self.limit.map_or(left, |l| l.min(left))
    }
}

/// The file's columns this format reads, and the schema it encodes with.
fn projection(result: &SpoolResult, format: Format) -> (Vec<usize>, SchemaRef) {
    let layout = &result.layout;
    let n = layout.names.len();
    let source: Vec<usize> = (0..n)
        .map(|i| match format {
            Format::Arrow | Format::Parquet => i,
            Format::Json | Format::Ndjson => layout.json[i].unwrap_or(i),
            Format::Csv if layout.csv_text => layout.csv[i].unwrap_or(i),
            Format::Csv => i,
        })
        .collect();
    let fields: Vec<Field> = source
        .iter()
        .enumerate()
        .map(|(i, &c)| {
            let f = result.schema.field(c);
            let f = Field::new(&layout.names[i], f.data_type().clone(), true);
            match format {
                // JSON rules need DuckDB's type where Arrow's is ambiguous.
                Format::Json | Format::Ndjson => f.with_metadata(
                    [(encode::DUCKDB_TYPE_KEY.to_string(), layout.types[i].clone())].into(),
                ),
                _ => f,
            }
        })
        .collect();
    (source, Arc::new(Schema::new(fields)))
}

/// Encodes `page` of `result` and sends it through `tx` in chunks; stops
/// when the receiver goes away or accepts nothing for `stall`. Sets
/// `complete` once the last bytes are queued (a body that ends without it
/// was cut short). Runs on a blocking thread.
pub fn serve(
    result: Arc<SpoolResult>,
    page: Page,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    runtime: tokio::runtime::Handle,
    stall: Duration,
    complete: &std::sync::atomic::AtomicBool,
) {
    let started = Instant::now();
    let send = |chunk: Result<Bytes, std::io::Error>| -> bool {
        runtime.block_on(async {
            tokio::time::timeout(stall, tx.send(chunk))
                .await
                .is_ok_and(|r| r.is_ok())
        })
    };
    let mut buf = Vec::new();
    match encode_page(&result, page, started, &mut buf, &mut |buf| {
        send(Ok(Bytes::from(std::mem::take(buf))))
    }) {
        // The body began: an abort, never a complete-looking answer.
        Err(e) => {
            let _ = send(Err(std::io::Error::other(e)));
        }
        Ok(false) => {}
        Ok(true) => {
            if buf.is_empty() || send(Ok(Bytes::from(buf))) {
                complete.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

fn encode_page(
    result: &SpoolResult,
    page: Page,
    started: Instant,
    buf: &mut Vec<u8>,
    flush: &mut dyn FnMut(&mut Vec<u8>) -> bool,
) -> Result<bool, String> {
    let (source, schema) = projection(result, page.format);
    let layout = &result.layout;
    let mut encoder = ResultEncoder::new(page.format, schema.clone());
    if page.format == Format::Csv && layout.csv_text {
        encoder.duckdb_text(layout.names.clone());
    }
    encoder.unsigned_huge(
        layout
            .types
            .iter()
            .enumerate()
            .filter(|(_, t)| t.as_str() == "UHUGEINT")
            .map(|(i, _)| i)
            .collect(),
    );
    let columns = encode::columns(&schema, &layout.types);
    encoder.begin(&columns, buf).map_err(|e| e.to_string())?;

    let total = page.rows(result);
    let reader = PageReader::open(result, page, source, schema)
        .map_err(|e| format!("reading the spool: {e}"))?;
    for part in reader {
        let part = part.map_err(|e| format!("reading the spool: {e}"))?;
        encoder.batch(&part, buf).map_err(|e| e.to_string())?;
        if buf.len() >= CHUNK_BYTES && !flush(buf) {
            return Ok(false);
        }
    }
    let ends = page.offset + total >= result.rows;
    encoder
        .finish(
            Summary {
                row_count: total,
                truncated: result.truncated && ends,
                elapsed_ms: crate::engine::queries::elapsed_ms(started.elapsed()),
                retried: false,
            },
            buf,
        )
        .map_err(|e| e.to_string())?;
    Ok(true)
}

/// The page's rows of the spool's `source` columns, as batches of
/// `schema`, read from the spool as they are asked for (by the encoder
/// here, by DuckDB's Arrow scan for a Parquet page).
pub(crate) struct PageReader {
    batches: Option<FileReader<BufReader<File>>>,
    schema: SchemaRef,
    skip: u64,
    left: u64,
}

impl PageReader {
    pub(crate) fn open(
        result: &SpoolResult,
        page: Page,
        source: Vec<usize>,
        schema: SchemaRef,
    ) -> Result<Self, ArrowError> {
        let left = page.rows(result);
        let mut out = PageReader {
            batches: None,
            schema,
            skip: 0,
            left,
        };
        if left == 0 {
            return Ok(out);
        }
        let file = File::open(&result.path).map_err(|e| ArrowError::IoError(e.to_string(), e))?;
        let mut reader =
            FileReader::try_new(BufReader::with_capacity(1 << 20, file), Some(source))?;
        // The batch that holds the first row: starts[b] <= offset < starts[b + 1].
        let first = result
            .starts
            .partition_point(|&s| s <= page.offset)
            .saturating_sub(1);
        out.skip = page.offset - result.starts[first];
        reader.set_index(first)?;
        out.batches = Some(reader);
        Ok(out)
    }
}

impl Iterator for PageReader {
    type Item = Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        while self.left > 0 {
            let batch = match self.batches.as_mut()?.next()? {
                Ok(b) => b,
                Err(e) => return Some(Err(e)),
            };
            let from = self.skip.min(batch.num_rows() as u64) as usize;
            self.skip -= from as u64;
            let take = (batch.num_rows() - from).min(self.left as usize);
            if take == 0 {
                continue;
            }
            self.left -= take as u64;
            return Some(RecordBatch::try_new(
                self.schema.clone(),
                batch.slice(from, take).columns().to_vec(),
            ));
        }
        None
    }
}

impl RecordBatchReader for PageReader {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}
