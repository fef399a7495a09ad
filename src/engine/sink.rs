//! A result kept rather than sent: the batches of an async statement go to
//! a [`BatchSink`] (the spool) instead of an encoder, in a layout from which
//! every format can later be served exactly as `/query` would have sent it.
//!
//! One execution serves all four formats because the statement is wrapped
//! so that DuckDB computes, beside each column's own value, its text where a
//! format needs DuckDB's text: the JSON rendering of the few values Arrow
//! cannot carry (`ResultShape::json_exprs`), and the VARCHAR cast that CSV
//! is made of. The column's own value (what Arrow pages carry) comes first.

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;

use crate::engine::guard;

/// Where a spooled result's columns are. Columns `0..names.len()` of every
/// batch are the result's own values; twins follow.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ResultLayout {
    /// The statement kind the guard saw (`SELECT`, ...).
    pub kind: String,
    /// The result's column names.
    pub names: Vec<String>,
    /// DuckDB's type of each column.
    pub types: Vec<String>,
    /// Per column, the batch column holding DuckDB's text for JSON.
    pub json: Vec<Option<usize>>,
    /// Per column, the batch column holding DuckDB's VARCHAR text for CSV.
    pub csv: Vec<Option<usize>>,
    /// Whether CSV is DuckDB's text (the columns without a twin are
    /// integers, booleans or VARCHAR); otherwise CSV is made from Arrow
    /// values, as `/query` does when DuckDB cannot render the text.
    pub csv_text: bool,
    /// Per column: an INTERVAL whose own value is NULL where Arrow's
    /// nanosecond range cannot hold it (its JSON twin then is not NULL).
    pub interval_checked: Vec<bool>,
}

impl ResultLayout {
    /// A layout without twins (the statement could not be wrapped).
    pub fn plain(kind: String, names: Vec<String>, types: Vec<String>) -> Self {
        let n = names.len();
        ResultLayout {
            kind,
            names,
            types,
            json: vec![None; n],
            csv: vec![None; n],
            csv_text: false,
            interval_checked: vec![false; n],
        }
    }
}

/// Why a sink could not keep a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SinkError {
    /// The result would pass a byte quota: `scope` is `statement` (its own),
    /// `token` (its token's results) or `spool` (all results together).
    Full {
        /// The quota, in bytes.
        limit: u64,
        /// Which quota: `statement`, `token` or `spool`.
        scope: &'static str,
    },
    /// The disk under the spool has no space left (ENOSPC, or the user's
    /// disk quota, EDQUOT): the server's storage, worth a retry later.
    NoSpace,
    /// Writing failed otherwise (an I/O error of the server's storage).
    Io(String),
}

impl SinkError {
    /// An I/O error as the sink's error: out of space, or another failure.
    pub fn from_io(e: &std::io::Error) -> Self {
        if is_no_space(e) {
            SinkError::NoSpace
        } else {
            SinkError::Io(e.to_string())
        }
    }
}

/// Whether `e` says the disk (or the user's quota on it) is full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::StorageFull
        || e.kind() == std::io::ErrorKind::QuotaExceeded
        || matches!(e.raw_os_error(), Some(libc::ENOSPC) | Some(libc::EDQUOT))
}

/// Takes a statement's batches. A retry (after a credential refresh) calls
/// `begin` again: whatever the first attempt kept is dropped.
pub trait BatchSink: Send + Sync + std::fmt::Debug {
    /// Starts a result of this layout and schema, dropping any kept before.
    fn begin(&self, layout: &ResultLayout, schema: &SchemaRef) -> Result<(), SinkError>;
    /// Keeps one batch of the result begun.
    fn batch(&self, batch: &RecordBatch) -> Result<(), SinkError>;
    /// The result is complete (`truncated`: cut by the row limit).
    fn finish(&self, rows: u64, truncated: bool) -> Result<(), SinkError>;
}

/// Whether CSV needs DuckDB's VARCHAR cast of a column of this type:
/// integers, booleans and VARCHAR read the same in Arrow as in DuckDB's
/// text, so they pass uncast (casting costs DuckDB and the export).
pub fn csv_needs_cast(duckdb_type: &str) -> bool {
    !matches!(
        duckdb_type,
        "VARCHAR"
            | "BOOLEAN"
            | "TINYINT"
            | "SMALLINT"
            | "INTEGER"
            | "BIGINT"
            | "UTINYINT"
            | "USMALLINT"
            | "UINTEGER"
            | "UBIGINT"
    )
}

/// Whether an INTERVAL value (expression `c`) fits Arrow's nanoseconds.
pub fn interval_fits_arrow(c: &str) -> String {
    format!(
        "({c} IS NULL OR abs(datepart('hour', {c})::HUGEINT * 3600000000 + datepart('minute', {c}) * 60000000 + datepart('microseconds', {c})) <= 9223372036854775)"
    )
}

/// Why an Arrow answer with an INTERVAL beyond Arrow's range is refused
/// (by `/query` and by statement pages alike).
pub fn arrow_interval_refusal(column: &str) -> String {
    format!(
        "column {column}: an INTERVAL beyond Arrow's nanosecond range (about 292 years of hours) cannot be sent as Arrow; ask for JSON, NDJSON or CSV, or CAST it to VARCHAR"
    )
}

/// The statement wrapped for the spool, its layout and the marks of its
/// columns (see [`crate::encode::marks`]): the result's own columns (what
/// DuckDB's Arrow export has no type for mapped as Arrow answers map it),
/// then JSON twins, then CSV twins. `None` when there is no statement text or
/// result shape to wrap.
pub fn spool_sql(
    accepted: &guard::Accepted,
) -> Option<(String, ResultLayout, Vec<Vec<crate::encode::Mark>>)> {
    let result = accepted.result.as_ref()?;
    let inner = result.sql.as_deref()?;
    let n = result.names.len();
    if n == 0 || result.types.len() != n {
        return None;
    }
    let quoted = |name: &str| format!("\"{}\"", name.replace('"', "\"\""));
    let mut exprs = Vec::with_capacity(n * 2);
    let mut interval_checked = vec![false; n];
    for (i, (t, name)) in result.types.iter().zip(&result.names).enumerate() {
        let c = format!("#{}", i + 1);
        let own = if let Some(e) = result.arrow_exprs.get(i).filter(|e| !e.is_empty()) {
            e.clone()
        } else if t == "INTERVAL" && result.json_exprs.get(i).is_some_and(|e| !e.is_empty()) {
            interval_checked[i] = true;
            format!("CASE WHEN {} THEN {c} END", interval_fits_arrow(&c))
        } else {
            c
        };
        exprs.push(format!("{own} AS {}", quoted(name)));
    }
    let mut marks: Vec<Vec<crate::encode::Mark>> = (0..n)
        .map(|i| result.arrow_marks.get(i).cloned().unwrap_or_default())
        .collect();
    let mut json = vec![None; n];
    for (i, e) in result.json_exprs.iter().enumerate().take(n) {
        if !e.is_empty() {
            json[i] = Some(exprs.len());
            exprs.push(format!("{e} AS \"duckgate_json_{}\"", i + 1));
            marks.push(result.json_marks.get(i).cloned().unwrap_or_default());
        }
    }
    let mut csv = vec![None; n];
    for (i, t) in result.types.iter().enumerate() {
        if csv_needs_cast(t) {
            csv[i] = Some(exprs.len());
            exprs.push(format!(
                "CAST(#{} AS VARCHAR) AS \"duckgate_csv_{}\"",
                i + 1,
                i + 1
            ));
        }
    }
    let sql = format!(
        "SELECT {} FROM (\n{inner}\n) AS duckgate_wrapped",
        exprs.join(", ")
    );
    Some((
        sql,
        ResultLayout {
            kind: accepted.kind.clone(),
            names: result.names.clone(),
            types: result.types.clone(),
            json,
            csv,
            csv_text: true,
            interval_checked,
        },
        marks,
    ))
}
