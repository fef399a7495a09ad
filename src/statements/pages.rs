//! Pages of a spooled result, in any format, encoded exactly as `/query`
//! encodes the same rows: the same encoder, fed the columns `/query` would
//! have run (the result's own values for Arrow, DuckDB's text twins where
//! JSON or CSV use DuckDB's text).

use std::fs::File;
use std::io::{BufReader, BufWriter, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::datatypes::{Field, Schema, SchemaRef};
use arrow::error::ArrowError;
use arrow::ipc::reader::FileReader;
use bytes::Bytes;
use tokio::sync::mpsc;

use crate::encode::{self, Format, ResultEncoder, Summary};
use crate::engine::sink::SinkError;
use crate::statements::spool::{Charge, SpoolResult};

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

/// Why a page could not be written to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageError {
    /// A value the format cannot hold, with DuckDB's message (the client's
    /// answer: another format).
    Unrepresentable(String),
    /// The page would pass the spool's quota of its token (`token`) or of
    /// every result (`spool`): it is removed, and the client may retry once
    /// results are fetched and deleted.
    Full {
        /// The quota, in bytes.
        limit: u64,
        /// Which quota.
        scope: &'static str,
    },
    /// Anything else: the server's fault.
    Internal(String),
}

/// Pages kept as files per result.
const PAGES_KEPT: usize = 4;

/// A page written to a file; its file goes, and its bytes leave the
/// spool's quotas, when the last holder lets go.
#[derive(Debug)]
pub struct PageFile {
    /// Where it is (in the spool's directory).
    pub path: PathBuf,
    /// Its bytes, charged to the result's token and the spool.
    _charge: Option<Charge>,
}

impl PageFile {
    /// The file at `path` (a page of `result`), its bytes charged to the
    /// result's token and the spool like the result itself; a page that
    /// passes a quota is removed.
    pub fn charged(path: PathBuf, result: &SpoolResult) -> Result<PageFile, PageError> {
        let mut file = PageFile {
            path,
            _charge: None,
        };
        let bytes = std::fs::metadata(&file.path)
            .map_err(|e| PageError::Internal(format!("reading the page's size: {e}")))?
            .len();
        file._charge = Some(result.charge(bytes).map_err(|e| match e {
            SinkError::Full { limit, scope } => PageError::Full { limit, scope },
            other => PageError::Internal(format!("charging the page: {other:?}")),
        })?);
        Ok(file)
    }
}

impl Drop for PageFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The pages of one result kept as files, by format, offset and limit: the
/// last few written, so a reader that asks for the length and then for
/// byte ranges (polars, DuckDB's httpfs, pyarrow over HTTP) reads one file,
/// and a client cannot fill the disk by asking for many different pages.
#[derive(Debug, Default)]
pub struct PageCache(Mutex<Vec<(PageKey, Arc<PageFile>)>>);

/// A page's format, offset and limit.
type PageKey = (Format, u64, Option<u64>);

impl PageCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(PageKey, Arc<PageFile>)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The file kept for `page`, if one is.
    pub fn get(&self, page: Page) -> Option<Arc<PageFile>> {
        let key = (page.format, page.offset, page.limit);
        self.lock()
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, f)| f.clone())
    }

    /// The file kept for `page`, or the one `write` makes (then kept).
    pub fn get_or_write(
        &self,
        page: Page,
        write: impl FnOnce() -> Result<PageFile, PageError>,
    ) -> Result<Arc<PageFile>, PageError> {
        if let Some(f) = self.get(page) {
            return Ok(f);
        }
        let key = (page.format, page.offset, page.limit);
        // Written outside the lock: two requests for one new page may both
        // write it; the later one is kept, the other removed when sent.
        let file = Arc::new(write()?);
        let mut kept = self.lock();
        kept.retain(|(k, _)| *k != key);
        if kept.len() >= PAGES_KEPT {
            kept.remove(0);
        }
        kept.push((key, file.clone()));
        Ok(file)
    }
}

/// Writes `page` of `result` (JSON, NDJSON, CSV or Arrow) to a file in
/// `dir`, the bytes [`serve`] would send, and charges them like the result
/// (see [`PageFile::charged`]). Runs on a blocking thread.
pub fn write_page(result: &SpoolResult, page: Page, dir: &Path) -> Result<PageFile, PageError> {
    let path = dir.join(format!(
        ".page-{}.{}",
        uuid::Uuid::new_v4().simple(),
        page.format.name()
    ));
    let written = (|| -> Result<(), String> {
        let file = File::create(&path).map_err(|e| format!("creating the page's file: {e}"))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        let mut failed: Option<std::io::Error> = None;
        let mut buf = Vec::new();
        let complete = {
            let mut flush = |buf: &mut Vec<u8>| match out.write_all(buf) {
                Ok(()) => {
                    buf.clear();
                    true
                }
                Err(e) => {
                    failed = Some(e);
                    false
                }
            };
            encode_page(result, page, Instant::now(), &mut buf, &mut flush)? && flush(&mut buf)
        };
        match (failed, complete) {
            (Some(e), _) => Err(format!("writing the page's file: {e}")),
            (None, false) => Err("writing the page's file stopped".into()),
            (None, true) => out
                .flush()
                .map_err(|e| format!("writing the page's file: {e}")),
        }
    })();
    match written {
        Ok(()) => PageFile::charged(path, result),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(PageError::Internal(e))
        }
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
            // The spooled field's metadata says what DuckDB rendered for
            // want of an Arrow type (see `encode::marks`).
            let mut metadata = f.metadata().clone();
            let f = Field::new(&layout.names[i], f.data_type().clone(), true);
            match format {
                // JSON rules need DuckDB's type where Arrow's is ambiguous.
                Format::Json | Format::Ndjson => {
                    metadata.insert(encode::DUCKDB_TYPE_KEY.to_string(), layout.types[i].clone());
                    f.with_metadata(metadata)
                }
                Format::Arrow => f.with_metadata(metadata),
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
