//! The spool: async statements' results as Arrow IPC files under
//! `<data dir>/spool/`, bounded by a byte quota for all of them and one per
//! statement. A file lives exactly as long as its owner: the writer removes
//! a partial file when the statement fails, and a finished result removes
//! its file when the last holder lets go (expiry, DELETE, shutdown).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use arrow::ipc::writer::FileWriter;

use crate::engine::guard::access::RoleQuota;
use crate::engine::sink::{BatchSink, ResultLayout, SinkError};

/// Batches are gathered to about this many rows before they are written
/// (DuckDB hands out 2,048 rows at a time; larger IPC batches page faster),
/// or this many bytes, whichever comes first (wide rows stay bounded).
const TARGET_BATCH_ROWS: usize = 64 * 1024;
const TARGET_BATCH_BYTES: usize = 16 << 20;

/// The spool directory and the bytes its files take, in all and per token.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    limit: u64,
    per_statement: u64,
    per_token: u64,
    used: Mutex<Usage>,
}

#[derive(Debug, Default)]
struct Usage {
    total: u64,
    by_token: std::collections::HashMap<Arc<str>, u64>,
    by_role: std::collections::HashMap<Arc<str>, u64>,
}

/// Whom a spooled file's bytes are charged to: its statement's owner (the
/// token's quota) and, when the owner's role caps its members' spool
/// together (`[role.limits] spool_bytes`), that role.
#[derive(Debug, Clone)]
pub struct Payer {
    /// The statement's owner.
    pub owner: Arc<str>,
    /// The role whose `spool_bytes` it counts against.
    pub role: Option<RoleQuota>,
}

impl Payer {
    /// An owner no role caps.
    pub fn owner(owner: Arc<str>) -> Self {
        Payer { owner, role: None }
    }
}

/// Subtracts `bytes` from `key`'s count in `map`, forgetting it at zero.
fn uncount(map: &mut std::collections::HashMap<Arc<str>, u64>, key: &Arc<str>, bytes: u64) {
    if let Some(n) = map.get_mut(key) {
        *n = n.saturating_sub(bytes);
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl Spool {
    /// Empties (or creates) `dir`: results of an earlier process are gone
    /// with the statements that made them.
    pub fn open(
        dir: PathBuf,
        limit: u64,
        per_statement: u64,
        per_token: u64,
    ) -> std::io::Result<Arc<Self>> {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        std::fs::create_dir_all(&dir)?;
        // Results are every token's: readable by the gateway's user only.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        Ok(Arc::new(Spool {
            dir,
            limit,
            per_statement,
            per_token,
            used: Mutex::new(Usage::default()),
        }))
    }

    fn usage(&self) -> std::sync::MutexGuard<'_, Usage> {
        self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Bytes the spool's files take now.
    pub fn used(&self) -> u64 {
        self.usage().total
    }

    /// The spool directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Charges `bytes` to the spool, to the payer's token and to its role,
    /// within their quotas.
    fn reserve(&self, payer: &Payer, bytes: u64) -> Result<(), SinkError> {
        let mut u = self.usage();
        let mine = u.by_token.get(&payer.owner).copied().unwrap_or(0);
        if mine + bytes > self.per_token {
            return Err(SinkError::Full {
                limit: self.per_token,
                scope: "token",
            });
        }
        if let Some(quota) = &payer.role {
            let ours = u.by_role.get(&quota.role).copied().unwrap_or(0);
            if ours + bytes > quota.cap {
                return Err(SinkError::Full {
                    limit: quota.cap,
                    scope: "role",
                });
            }
        }
        if u.total + bytes > self.limit {
            return Err(SinkError::Full {
                limit: self.limit,
                scope: "spool",
            });
        }
        if let Some(quota) = &payer.role {
            *u.by_role.entry(quota.role.clone()).or_default() += bytes;
        }
        u.total += bytes;
        u.by_token.insert(payer.owner.clone(), mine + bytes);
        metrics::gauge!("duckgate_spool_bytes").set(u.total as f64);
        Ok(())
    }

    fn release(&self, payer: &Payer, bytes: u64) {
        let mut u = self.usage();
        u.total = u.total.saturating_sub(bytes);
        uncount(&mut u.by_token, &payer.owner, bytes);
        if let Some(quota) = &payer.role {
            uncount(&mut u.by_role, &quota.role, bytes);
        }
        metrics::gauge!("duckgate_spool_bytes").set(u.total as f64);
    }

    /// A writer for one statement of `payer`, at `<dir>/<n>.arrow`.
    pub fn writer(self: &Arc<Self>, payer: Payer, file_name: &str) -> SpoolWriter {
        SpoolWriter {
            payer,
            spool: self.clone(),
            path: self.dir.join(file_name),
            state: Mutex::new(None),
            result: Mutex::new(None),
        }
    }
}

/// Counts the bytes handed to the file.
struct Counting<W> {
    inner: W,
    written: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

struct Writing {
    writer: FileWriter<Counting<BufWriter<File>>>,
    schema: SchemaRef,
    /// The schema holds dictionaries (ENUM): batches are written as DuckDB
    /// hands them out, each with the same full dictionary, because joining
    /// them would change the dictionary, which the IPC file format forbids.
    dictionaries: bool,
    layout: ResultLayout,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
    /// Rows before each written batch, then the total.
    starts: Vec<u64>,
    /// Bytes reserved in the spool's quota for this file.
    reserved: u64,
    /// An INTERVAL that Arrow cannot hold was seen (column name).
    arrow_refusal: Option<String>,
}

/// Writes one statement's result (the engine's [`BatchSink`]).
#[derive(Debug)]
pub struct SpoolWriter {
    /// The token name the bytes are charged to.
    payer: Payer,
    spool: Arc<Spool>,
    path: PathBuf,
    state: Mutex<Option<Writing>>,
    result: Mutex<Option<SpoolResult>>,
}

impl std::fmt::Debug for Writing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writing")
            .field("reserved", &self.reserved)
            .finish()
    }
}

/// An error of Arrow's writer: a full disk is told apart from other I/O
/// errors (the writer wraps them), anything else is an I/O-level failure.
fn io(e: arrow::error::ArrowError) -> SinkError {
    match &e {
        arrow::error::ArrowError::IoError(_, inner) => SinkError::from_io(inner),
        _ => SinkError::Io(e.to_string()),
    }
}

impl SpoolWriter {
    /// The finished result, once `finish` ran.
    pub fn take_result(&self) -> Option<SpoolResult> {
        self.result.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Writing>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops a partial file and its quota.
    fn abandon(&self, writing: Option<Writing>) {
        if let Some(w) = writing {
            drop(w.writer);
            self.spool.release(&self.payer, w.reserved);
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Writes the gathered batches as one and charges the quota.
    fn flush(&self, w: &mut Writing) -> Result<(), SinkError> {
        if w.pending.is_empty() {
            return Ok(());
        }
        let batch = if w.pending.len() == 1 {
            w.pending.pop().expect("one batch")
        } else {
            let b = arrow::compute::concat_batches(&w.schema, &w.pending).map_err(io)?;
            w.pending.clear();
            b
        };
        w.pending_rows = 0;
        w.pending_bytes = 0;
        let start = *w.starts.last().unwrap_or(&0);
        w.writer.write(&batch).map_err(io)?;
        w.starts.push(start + batch.num_rows() as u64);
        self.charge(w)
    }

    fn charge(&self, w: &mut Writing) -> Result<(), SinkError> {
        let written = w.writer.get_ref().written;
        if written > self.spool.per_statement {
            return Err(SinkError::Full {
                limit: self.spool.per_statement,
                scope: "statement",
            });
        }
        if written > w.reserved {
            self.spool.reserve(&self.payer, written - w.reserved)?;
            w.reserved = written;
        }
        Ok(())
    }
}

impl Drop for SpoolWriter {
    fn drop(&mut self) {
        let writing = self.lock().take();
        self.abandon(writing);
    }
}

/// Whether `dt` is or holds a dictionary.
fn has_dictionary(dt: &arrow::datatypes::DataType) -> bool {
    use arrow::datatypes::DataType as D;
    match dt {
        D::Dictionary(_, _) => true,
        D::List(f)
        | D::LargeList(f)
        | D::FixedSizeList(f, _)
        | D::ListView(f)
        | D::LargeListView(f)
        | D::Map(f, _) => has_dictionary(f.data_type()),
        D::Struct(fields) => fields.iter().any(|f| has_dictionary(f.data_type())),
        D::Union(fields, _) => fields.iter().any(|(_, f)| has_dictionary(f.data_type())),
        _ => false,
    }
}

/// Whether `batch` holds an INTERVAL whose own value was nulled because
/// Arrow cannot hold it (its JSON twin is not NULL): returns the column.
fn arrow_refusal(layout: &ResultLayout, batch: &RecordBatch) -> Option<String> {
    layout
        .interval_checked
        .iter()
        .enumerate()
        .filter(|(_, checked)| **checked)
        .find_map(|(i, _)| {
            let own = batch.column(i);
            let text = batch.column(layout.json[i]?);
            (0..batch.num_rows())
                .any(|r| own.is_null(r) && !text.is_null(r))
                .then(|| layout.names[i].clone())
        })
}

impl BatchSink for SpoolWriter {
    fn begin(&self, layout: &ResultLayout, schema: &SchemaRef) -> Result<(), SinkError> {
        let mut state = self.lock();
        self.abandon(state.take());
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            options.mode(0o600);
        }
        let file = options
            .open(&self.path)
            .map_err(|e| SinkError::from_io(&e))?;
        let counting = Counting {
            inner: BufWriter::with_capacity(1 << 20, file),
            written: 0,
        };
        let writer = match FileWriter::try_new(counting, schema) {
            Ok(w) => w,
            Err(e) => {
                let _ = std::fs::remove_file(&self.path);
                return Err(io(e));
            }
        };
        let mut w = Writing {
            writer,
            schema: schema.clone(),
            dictionaries: schema
                .fields()
                .iter()
                .any(|f| has_dictionary(f.data_type())),
            layout: layout.clone(),
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            starts: vec![0],
            reserved: 0,
            arrow_refusal: None,
        };
        let charged = self.charge(&mut w);
        *state = Some(w);
        charged
    }

    fn batch(&self, batch: &RecordBatch) -> Result<(), SinkError> {
        let mut state = self.lock();
        let w = state
            .as_mut()
            .ok_or_else(|| SinkError::Io("no result begun".into()))?;
        if w.arrow_refusal.is_none() {
            w.arrow_refusal = arrow_refusal(&w.layout, batch);
        }
        w.pending_rows += batch.num_rows();
        w.pending_bytes += batch.get_array_memory_size();
        w.pending.push(batch.clone());
        if w.dictionaries
            || w.pending_rows >= TARGET_BATCH_ROWS
            || w.pending_bytes >= TARGET_BATCH_BYTES
        {
            let flushed = self.flush(w);
            if flushed.is_err() {
                self.abandon(state.take());
            }
            return flushed;
        }
        Ok(())
    }

    fn finish(&self, rows: u64, truncated: bool) -> Result<(), SinkError> {
        let mut state = self.lock();
        let mut w = state
            .take()
            .ok_or_else(|| SinkError::Io("no result begun".into()))?;
        let done = self
            .flush(&mut w)
            .and_then(|_| w.writer.finish().map_err(io))
            .and_then(|_| {
                w.writer
                    .get_mut()
                    .flush()
                    .map_err(|e| SinkError::from_io(&e))
            })
            .and_then(|_| self.charge(&mut w));
        if let Err(e) = done {
            self.abandon(Some(w));
            return Err(e);
        }
        let bytes = w.reserved;
        let result = SpoolResult {
            spool: self.spool.clone(),
            payer: self.payer.clone(),
            path: self.path.clone(),
            layout: w.layout.clone(),
            schema: w.schema.clone(),
            starts: std::mem::take(&mut w.starts),
            rows,
            truncated,
            bytes,
            arrow_refusal: w.arrow_refusal.take(),
            // Reserved while it was written; released when it goes.
            _charge: Some(Charge {
                spool: self.spool.clone(),
                payer: self.payer.clone(),
                bytes,
            }),
            pages: Default::default(),
        };
        // The file and its quota now belong to the result.
        drop(w.writer);
        *self.result.lock().unwrap_or_else(|p| p.into_inner()) = Some(result);
        Ok(())
    }
}

/// A finished, spooled result. Dropping the last holder removes its file.
#[derive(Debug)]
pub struct SpoolResult {
    spool: Arc<Spool>,
    payer: Payer,
    /// The Arrow IPC file that holds it.
    pub path: PathBuf,
    /// Where the result's columns and their twins are in the file.
    pub layout: ResultLayout,
    /// The file's schema: the result's own columns, then twins.
    pub schema: SchemaRef,
    /// Rows before each batch of the file, then the total.
    pub starts: Vec<u64>,
    /// Rows in the result.
    pub rows: u64,
    /// Cut by the statement's row limit.
    pub truncated: bool,
    /// The file's size.
    pub bytes: u64,
    /// A column holding an INTERVAL beyond Arrow's range: Arrow pages are
    /// refused, as `/query` refuses such an Arrow answer.
    pub arrow_refusal: Option<String>,
    /// Its bytes in the spool's quotas: none for a copy fetched from the
    /// S3 spool for another replica's statement.
    _charge: Option<Charge>,
    /// Pages written from it as files (Parquet pages always, others for
    /// readers that need a length or byte ranges), kept while it lives (a
    /// few at most), so the ranges a reader asks for come from one file.
    pub pages: crate::statements::pages::PageCache,
}

/// What another replica needs to page a result it did not write (kept in
/// the shared state with the statement).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct ResultMeta {
    /// The S3 URL of the result's file.
    pub url: String,
    /// Where the result's columns and their twins are in the file.
    pub layout: ResultLayout,
    /// Rows before each batch of the file, then the total.
    pub starts: Vec<u64>,
    /// Rows in the result.
    pub rows: u64,
    /// Cut by the statement's row limit.
    pub truncated: bool,
    /// The file's size.
    pub bytes: u64,
    /// See [`SpoolResult::arrow_refusal`].
    pub arrow_refusal: Option<String>,
}

/// Bytes charged to a spool's quotas (of a token and of every result) until
/// dropped: a file derived from a result, such as a Parquet page of it.
#[derive(Debug)]
pub struct Charge {
    spool: Arc<Spool>,
    payer: Payer,
    bytes: u64,
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.spool.release(&self.payer, self.bytes);
    }
}

impl SpoolResult {
    /// Charges `bytes` more to the result's token and the spool (a file
    /// made from it), within both quotas, until the charge is dropped.
    /// A copy of another replica's result is charged too: the file is on
    /// this replica's disk.
    pub fn charge(&self, bytes: u64) -> Result<Charge, SinkError> {
        self.spool.reserve(&self.payer, bytes)?;
        Ok(Charge {
            spool: self.spool.clone(),
            payer: self.payer.clone(),
            bytes,
        })
    }

    /// What another replica needs to page it from `url`.
    pub fn meta(&self, url: String) -> ResultMeta {
        ResultMeta {
            url,
            layout: self.layout.clone(),
            starts: self.starts.clone(),
            rows: self.rows,
            truncated: self.truncated,
            bytes: self.bytes,
            arrow_refusal: self.arrow_refusal.clone(),
        }
    }

    /// A local copy at `path` of another replica's result: removed when the
    /// last holder lets go, never charged to the quotas.
    pub fn copy(
        spool: Arc<Spool>,
        owner: Arc<str>,
        path: PathBuf,
        meta: ResultMeta,
    ) -> Result<Self, String> {
        let file = File::open(&path).map_err(|e| format!("opening the spool copy: {e}"))?;
        let reader = arrow::ipc::reader::FileReader::try_new(std::io::BufReader::new(file), None)
            .map_err(|e| format!("reading the spool copy: {e}"))?;
        Ok(SpoolResult {
            spool,
            payer: Payer::owner(owner),
            path,
            layout: meta.layout,
            schema: reader.schema(),
            starts: meta.starts,
            rows: meta.rows,
            truncated: meta.truncated,
            bytes: meta.bytes,
            arrow_refusal: meta.arrow_refusal,
            _charge: None,
            pages: Default::default(),
        })
    }
}

impl Drop for SpoolResult {
    fn drop(&mut self) {
        // Its charge, a field, is released after the file is gone.
        let _ = std::fs::remove_file(&self.path);
    }
}
