//! Row filters and column masks, applied by DuckDB's optimizer (the C++
//! shim `policy/` (`extension.cpp`'s header says how and why it is safe): the
//! gateway installs a confined caller's policy on the pooled connection
//! before it prepares anything ([`install`]), and the shim's optimizer
//! extension wraps every scan of a filtered or masked table in the plan
//! DuckDB runs.
//!
//! The policy document is a [`Document`], serialized here and read by the
//! shim (`ReadSpec`); `policy::tests` checks that the shim reads what this
//! writes. It lists every table the statement reads, those without a
//! policy with neither `filter` nor `masks` (a scan of a table it does not
//! list is refused), the catalog listings the statement scans with their
//! filters, every catalog listing there is (a scan of one it does not
//! filter is refused), and the caller's claims.

use serde::Serialize;

use std::ffi::{c_char, c_void};

use crate::engine::ffi::{shim_result, RawConnection, RawDatabase};

extern "C" {
    fn duckgate_policy_register(database: *mut c_void) -> i32;
    fn duckgate_policy_set(
        database: *mut c_void,
        connection_id: u64,
        spec: *const c_char,
        len: usize,
    ) -> *mut c_char;
    fn duckgate_policy_check(
        connection: *mut c_void,
        spec: *const c_char,
        len: usize,
    ) -> *mut c_char;
    fn duckgate_policy_free(text: *mut c_char);
}

/// Registers the optimizer extension that applies installed policies;
/// once, before any client query.
pub fn register(db: &RawDatabase) -> bool {
    // SAFETY: `db` is an open database handle (its C API wrapper); the shim
    // catches every C++ exception.
    unsafe { duckgate_policy_register(db.as_ptr().cast()) == 0 }
}

/// Installs `spec` (a policy document) on the connection `connection_id`,
/// or removes the installed one (`None`). The connection must run nothing
/// meanwhile, and its prepared statements planned under another policy
/// must not run again (the caller flushes them).
pub fn install(db: &RawDatabase, connection_id: u64, spec: Option<&str>) -> Result<(), String> {
    let (ptr, len) = spec.map_or((std::ptr::null(), 0), |s| (s.as_ptr().cast(), s.len()));
    // SAFETY: `db` is open; `ptr` is NULL or `len` readable bytes that
    // outlive the call; the shim catches every C++ exception and answers
    // NULL or a message for `duckgate_policy_free`, used once.
    unsafe {
        shim_result(
            duckgate_policy_set(db.as_ptr().cast(), connection_id, ptr, len),
            duckgate_policy_free,
        )
    }
}

/// Binds every table policy of `spec` on `conn`: whether each filter and
/// mask is one expression over its table's row, of a column that exists.
pub fn check(conn: &RawConnection, spec: &str) -> Result<(), String> {
    // SAFETY: `conn` is a live connection (a `duckdb::Connection*`) used by
    // this thread alone for the call; `spec` outlives it; the shim catches
    // every C++ exception and answers NULL or a message for
    // `duckgate_policy_free`, used once.
    unsafe {
        shim_result(
            duckgate_policy_check(conn.as_ptr().cast(), spec.as_ptr().cast(), spec.len()),
            duckgate_policy_free,
        )
    }
}

/// A policy document, as the shim reads it.
#[derive(Debug, Serialize)]
pub struct Document<'a> {
    /// Every table the statement reads.
    pub tables: Vec<TableRule>,
    /// The catalog listings it scans, each filtered.
    pub functions: Vec<ListingRule>,
    /// Every catalog listing there is (`guard::access::LISTINGS`).
    pub listings: &'static [&'static str],
    /// The caller's claims, which `claim('name')` reads by exact name.
    pub claims: &'a serde_json::Map<String, serde_json::Value>,
}

/// What the caller's roles make of one table it reads.
#[derive(Debug, Serialize)]
pub struct TableRule {
    /// The table's database.
    pub catalog: String,
    /// Its schema.
    pub schema: String,
    /// Its name.
    pub name: String,
    /// The row filter (operator SQL, `claim()` calls in it), if any.
    pub filter: Option<String>,
    /// Masked columns: `[column, expression]`.
    pub masks: Vec<(String, String)>,
}

/// What the caller's roles let it see of one catalog listing.
#[derive(Debug, Serialize)]
pub struct ListingRule {
    /// The listing function (`duckdb_tables`, ...).
    pub name: String,
    /// The filter to what it may see.
    pub filter: Option<String>,
    /// Masked columns: `[column, expression]`.
    pub masks: Vec<(String, String)>,
}

impl Document<'_> {
    /// The document as the shim reads it.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a policy document serializes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn database() -> crate::engine::ffi::RawDatabase {
        crate::engine::ffi::RawDatabase::open(None, &[]).unwrap()
    }

    /// What Rust writes the shim reads: a document with a filter that
    /// reads a claim, a mask and a listing binds on a table that has the
    /// columns; one the shim cannot read is refused, naming why.
    #[test]
    fn the_shim_reads_the_document_rust_writes() {
        let db = database();
        let raw = db.connect_raw().unwrap();
        raw.execute("CREATE TABLE t (id INTEGER, tenant VARCHAR, email VARCHAR)")
            .unwrap();
        let claims: serde_json::Map<String, serde_json::Value> =
            serde_json::from_value(serde_json::json!({"tenant": "a", "org": {"tenant": "b"}}))
                .unwrap();
        let doc = Document {
            tables: vec![TableRule {
                catalog: "memory".into(),
                schema: "main".into(),
                name: "t".into(),
                filter: Some("tenant = claim('tenant') OR tenant = claim('org.tenant')".into()),
                masks: vec![("email".into(), "NULL".into())],
            }],
            functions: vec![ListingRule {
                name: "duckdb_tables".into(),
                filter: Some("table_name = 't'".into()),
                masks: vec![("sql".into(), "NULL".into())],
            }],
            listings: crate::engine::guard::access::LISTINGS,
            claims: &claims,
        };
        check(&raw, &doc.to_json()).unwrap();
        // A column the table lacks, a listing the list lacks, no list.
        let mut bad = doc.to_json().replace("\"email\"", "\"phone\"");
        assert!(check(&raw, &bad).unwrap_err().contains("phone"), "{bad}");
        bad = doc
            .to_json()
            .replace("\"name\":\"duckdb_tables\"", "\"name\":\"duckdb_secrets\"");
        let e = check(&raw, &bad).unwrap_err();
        assert!(e.contains("not a catalog listing"), "{e}");
        bad = doc.to_json().replace("\"listings\"", "\"nothing\"");
        assert!(check(&raw, &bad).unwrap_err().contains("no listings"));
    }
}
