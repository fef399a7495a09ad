//! DuckDB's own parse of a client's SQL, through the C++ shim in
//! `describe/parse.cpp` (DuckDB's C API has no parse tree). Parsing has no side
//! effects: no pragma handler runs, nothing is bound, no file is touched.

use std::ffi::{c_char, c_void, CStr, CString};

use serde::Deserialize;

use crate::engine::ffi::RawConnection;

extern "C" {
    fn duckgate_describe_sql(connection: *mut c_void, sql: *const c_char) -> *mut c_char;
    fn duckgate_plan_names(connection: *mut c_void, sql: *const c_char) -> *mut c_char;
    fn duckgate_system_name(connection: *mut c_void, name: *const c_char) -> *mut c_char;
    fn duckgate_schema_has(
        connection: *mut c_void,
        schema: *const c_char,
        name: *const c_char,
    ) -> *mut c_char;
    fn duckgate_describe_free(text: *mut c_char);
}

/// What a bound plan calls and scans (views and macros expanded).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct PlanNames {
    /// Scalar, aggregate and window functions, by DuckDB's name.
    #[serde(default)]
    pub functions: Vec<String>,
    /// Table functions scanned (`seq_scan` for tables).
    #[serde(default)]
    pub tables: Vec<String>,
    /// Part of the plan could not be walked.
    #[serde(default)]
    pub unreadable: bool,
    /// DuckDB's type of each result column (`LogicalType::ToString`).
    #[serde(default)]
    pub types: Vec<String>,
    /// Each result column's name.
    #[serde(default)]
    pub names: Vec<String>,
    /// Per result column, the expression (over `#i`) that makes its values
    /// JSON-ready as DuckDB's own text where Arrow cannot carry them
    /// faithfully; empty where the Arrow value needs nothing.
    #[serde(default)]
    pub json_exprs: Vec<String>,
    /// Per result column, where `json_exprs` leave DuckDB's JSON of a
    /// VARIANT (see [`crate::encode::marks`]).
    #[serde(default)]
    pub json_marks: Vec<Vec<crate::encode::Mark>>,
    /// Per result column, the expression (over `#i`) that makes values
    /// DuckDB's Arrow export has no type for exportable (a VARIANT as its
    /// JSON, a TYPE as its text); empty where DuckDB exports it as it is.
    #[serde(default)]
    pub arrow_exprs: Vec<String>,
    /// Per result column, where `arrow_exprs` leave those values.
    #[serde(default)]
    pub arrow_marks: Vec<Vec<crate::encode::Mark>>,
    /// The databases the statement changes, by DuckDB's own account (what
    /// its read-only transactions check): a write's target, the catalog a
    /// CREATE or DROP reaches, an EXPLAIN ANALYZE's inner write.
    #[serde(default)]
    pub modified: Vec<String>,
    /// The databases whose tables the statement reads.
    #[serde(default)]
    pub read: Vec<String>,
    /// The catalog objects the plan reads (through views too) and changes,
    /// by their bound names: what grants are checked against.
    #[serde(default)]
    pub objects: Vec<PlanObject>,
    /// Table functions the plan scans that read no catalog table: readers
    /// (`read_parquet`), generators (`range`), DuckDB's catalog functions.
    #[serde(default)]
    pub sources: Vec<String>,
    /// Each of `sources` scanned, with the paths it was bound to.
    #[serde(default)]
    pub reads: Vec<SourceRead>,
    /// `describe`, `summarize` or `show` when the statement is one of
    /// those as a whole; a DESCRIBE's objects are what its query reads.
    #[serde(default)]
    pub described: Option<String>,
    /// The binder's error, if binding failed.
    #[serde(default)]
    pub error: Option<String>,
    /// Its class, e.g. `Catalog`, `Binder`.
    #[serde(default)]
    pub error_type: Option<String>,
    /// Where DuckDB places the error: a byte offset into its reading of
    /// the SQL (see [`crate::engine::errors::place`]).
    #[serde(default)]
    pub position: Option<usize>,
}

/// A table function a bound plan scans that reads no catalog table, with
/// the paths it was bound to (its first argument, where that is a string
/// or a list of strings): a named source's view's or the client's.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct SourceRead {
    /// The function, e.g. `read_parquet`, `range`.
    pub function: String,
    /// Its paths (none for a generator).
    #[serde(default)]
    pub paths: Vec<String>,
}

/// A catalog object a bound plan reads or changes, named as DuckDB resolved
/// it (catalog, schema and name; views expanded to what they read).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct PlanObject {
    /// Its database, e.g. `memory`, `lake`.
    pub catalog: String,
    /// Its schema.
    pub schema: String,
    /// Its name (empty for `ddl`).
    pub name: String,
    /// `read`, `insert`, `update`, `delete`, `merge`, `create table`,
    /// `create view`, or `ddl` (another CREATE, a DROP or ALTER, whose
    /// object the plan leaves unresolved).
    pub action: String,
    /// For `read`: the columns the scan returns.
    #[serde(default)]
    pub columns: Vec<String>,
}

/// Calls a shim function that takes a connection and SQL and returns a
/// malloc'd JSON text, and parses the answer.
fn call_shim<T: serde::de::DeserializeOwned>(
    f: unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_char,
    conn: &RawConnection,
    sql: &str,
) -> Result<T, DescribeError> {
    let c_sql = CString::new(sql).map_err(|_| DescribeError::Nul)?;
    // SAFETY: `c_sql` is NUL-terminated and outlives the call.
    shim_answer(conn, |c| unsafe { f(c, c_sql.as_ptr()) })
}

/// Runs `call` with `conn`'s handle and parses the malloc'd JSON text the
/// shim returned.
fn shim_answer<T: serde::de::DeserializeOwned>(
    conn: &RawConnection,
    call: impl FnOnce(*mut c_void) -> *mut c_char,
) -> Result<T, DescribeError> {
    // `conn.as_ptr()` is a live duckdb_connection (a `duckdb::Connection*`
    // in DuckDB's C API) owned by `conn`, used by this thread alone for the
    // call (the pool hands a slot to one request at a time). The shims catch
    // every C++ exception and return NULL or a malloc'd NUL-terminated
    // string.
    let text = call(conn.as_ptr().cast());
    if text.is_null() {
        return Err(DescribeError::Internal(
            "out of memory in the parse shim".into(),
        ));
    }
    // SAFETY: non-null and NUL-terminated (above); copied before it is freed.
    let json = unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: allocated by the shim, freed exactly once, not used afterwards.
    unsafe { duckgate_describe_free(text) };
    read_deep(&json)
}

/// The deepest a document from the shims may nest. DuckDB's parser stops
/// an expression at depth 1,000 (a level is two or three here); set
/// operations nest without its limit (a `UNION ALL` of 10,000 queries is
/// 10,000 levels, and costs DuckDB's binder 6 s and 1.8 GB). Deeper than
/// this, the statement is refused before the guard reads it: every level
/// costs the guard's reading a stack frame and DuckDB's binder more.
pub const MAX_TREE_DEPTH: usize = 20_000;

/// Parses a shim's JSON answer however deep DuckDB's tree is (serde_json
/// stops at 128 levels by default, which a 60-term sum passes), up to
/// [`MAX_TREE_DEPTH`]; the thread's stack fits that
/// ([`crate::engine::nesting::STACK_BYTES`]).
fn read_deep<T: serde::de::DeserializeOwned>(json: &str) -> Result<T, DescribeError> {
    let depth = json_depth(json.as_bytes());
    if depth > MAX_TREE_DEPTH {
        return Err(DescribeError::TooDeep(depth));
    }
    let mut de = serde_json::Deserializer::from_str(json);
    de.disable_recursion_limit();
    let value = T::deserialize(&mut de).map_err(|e| DescribeError::Internal(e.to_string()))?;
    de.end()
        .map_err(|e| DescribeError::Internal(e.to_string()))?;
    Ok(value)
}

/// How deep JSON text nests (brackets and braces outside strings).
fn json_depth(text: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in text {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Binds `sql` on `conn` and lists what its plan calls. Binding may read
/// files: only for SQL whose paths the guard has admitted.
pub fn plan_names(conn: &RawConnection, sql: &str) -> Result<PlanNames, DescribeError> {
    call_shim(duckgate_plan_names, conn, sql)
}

/// One statement as DuckDB's parser read it.
#[derive(Debug, Clone, Deserialize)]
pub struct Statement {
    /// DuckDB's statement type, e.g. `SELECT`, `CREATE`, `EXPLAIN`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Every part that holds expressions or table references, serialized by
    /// DuckDB (the statement itself for SELECT, the create info for CREATE,
    /// ...). The guard walks all of them.
    #[serde(default)]
    pub parts: Vec<serde_json::Value>,
    /// The catalog type a CREATE, DROP or ALTER acts on, e.g. `TABLE`.
    #[serde(default)]
    pub object: Option<String>,
    /// CREATE TEMP ...
    #[serde(default)]
    pub temporary: bool,
    /// Set when a part could not be serialized: the guard cannot see it.
    #[serde(default)]
    pub unreadable: bool,
    /// EXPLAIN ANALYZE (runs the statement).
    #[serde(default)]
    pub analyze: bool,
    /// A finer name for refusals: `RESET`, `USE`, `INSTALL`, `CHECKPOINT`...
    #[serde(default)]
    pub verb: Option<String>,
    /// The statement an EXPLAIN explains.
    #[serde(default)]
    pub inner: Option<Box<Statement>>,
    /// DuckDB's rendering of a SELECT as SQL text.
    #[serde(default)]
    pub sql: Option<String>,
    /// DuckDB's rendering of `inner` as SQL text.
    #[serde(default)]
    pub inner_sql: Option<String>,
    /// The object a CREATE, DROP or ALTER names.
    #[serde(default)]
    pub target: Option<Target>,
    /// The new name an ALTER ... RENAME TO gives its object.
    #[serde(default)]
    pub new_name: Option<String>,
    /// CREATE INDEX: the table indexed (in the target's schema).
    #[serde(default)]
    pub on_table: Option<String>,
}

/// The object a CREATE, DROP or ALTER names, as written.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Target {
    /// The catalog, or empty.
    #[serde(default)]
    pub catalog: String,
    /// The schema, or empty.
    #[serde(default)]
    pub schema: String,
    /// The object's own name.
    #[serde(default)]
    pub name: String,
}

#[derive(Deserialize)]
struct Document {
    #[serde(default)]
    statements: Vec<Statement>,
    #[serde(default)]
    error: Option<String>,
    #[serde(default)]
    position: Option<usize>,
}

/// Why the SQL could not be described.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DescribeError {
    /// DuckDB's parser rejected the text.
    Parse {
        /// DuckDB's message.
        message: String,
        /// Where DuckDB places the error: a byte offset into its reading of
        /// the SQL (see [`crate::engine::errors::place`]).
        position: Option<usize>,
    },
    /// The text holds a NUL byte (DuckDB would read only the part before it).
    Nul,
    /// The shim's answer was not understood (a bug; refused).
    Internal(String),
    /// DuckDB's tree of the statement nests deeper than the guard reads
    /// ([`MAX_TREE_DEPTH`]).
    TooDeep(usize),
}

/// Parses `sql` with DuckDB's parser, using `conn`'s parser options.
pub fn describe(conn: &RawConnection, sql: &str) -> Result<Vec<Statement>, DescribeError> {
    #[cfg(feature = "test-hooks")]
    parse_counts::count(sql);
    let doc: Document = call_shim(duckgate_describe_sql, conn, sql)?;
    match doc.error {
        Some(message) => Err(DescribeError::Parse {
            message,
            position: doc.position,
        }),
        None => Ok(doc.statements),
    }
}

/// Whether `name` names a function, view, type or schema of DuckDB's system
/// catalog (read from DuckDB's own catalog on `conn`).
pub fn system_name(conn: &RawConnection, name: &str) -> Result<bool, DescribeError> {
    call_shim::<u8>(duckgate_system_name, conn, name).map(|v| v == 1)
}

/// Whether schema `schema` of `conn`'s default database holds a table,
/// view, sequence, type, index or macro named `name`.
pub fn schema_has(conn: &RawConnection, schema: &str, name: &str) -> Result<bool, DescribeError> {
    let c_schema = CString::new(schema).map_err(|_| DescribeError::Nul)?;
    let c_name = CString::new(name).map_err(|_| DescribeError::Nul)?;
    // SAFETY: both strings are NUL-terminated and outlive the call.
    shim_answer::<u8>(conn, |c| unsafe {
        duckgate_schema_has(c, c_schema.as_ptr(), c_name.as_ptr())
    })
    .map(|v| v == 1)
}

/// Test hook (`test-hooks`): how many times [`describe`] parsed a text
/// holding [`parse_counts::MARK`], so a test counts the parses of its own
/// text among other tests'.
#[cfg(feature = "test-hooks")]
pub mod parse_counts {
    use std::collections::HashMap;
    use std::sync::Mutex;

    /// Only texts holding this are counted.
    pub const MARK: &str = "count_parses_";

    static COUNTS: Mutex<Option<HashMap<String, usize>>> = Mutex::new(None);

    pub(super) fn count(sql: &str) {
        if sql.contains(MARK) {
            let mut counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
            *counts
                .get_or_insert_with(HashMap::new)
                .entry(sql.to_string())
                .or_default() += 1;
        }
    }

    /// How many times `sql` was parsed.
    pub fn of(sql: &str) -> usize {
        let counts = COUNTS.lock().unwrap_or_else(|p| p.into_inner());
        counts
            .as_ref()
            .and_then(|c| c.get(sql))
            .copied()
            .unwrap_or(0)
    }
}
