//! Installs secrets (S3 credentials, a PostgreSQL catalog's password) through DuckDB's secret manager (the C++ shim in
//! `secrets.cpp`), never as SQL text: no statement that DuckDB's query log,
//! profiler or a hook could record ever holds a credential.

use std::ffi::{c_char, c_void, CString};

use crate::engine::ffi::{shim_result, RawConnection};

extern "C" {
    fn duckgate_install_secret(
        connection: *mut c_void,
        kind: *const c_char,
        name: *const c_char,
        keys: *const *const c_char,
        values: *const *const c_char,
        n: usize,
        scope: *const *const c_char,
        n_scope: usize,
    ) -> *mut c_char;
    fn duckgate_logging_off(connection: *mut c_void) -> *mut c_char;
    fn duckgate_secrets_free(text: *mut c_char);
}

/// Creates or replaces the temporary S3 secret `name` with `options`
/// (`key_id`, `secret`, `session_token`, `region`, `use_ssl`, `endpoint`,
/// `url_style`) and `scope`. The error names DuckDB's error class only.
pub fn install_s3(
    conn: &RawConnection,
    name: &str,
    options: &[(&str, &str)],
    scope: &[String],
) -> Result<(), String> {
    install(conn, "s3", name, options, scope)
}

/// Creates or replaces the temporary PostgreSQL secret `name` holding only
/// `password` (what a DuckLake catalog's `META_SECRET` names), so the
/// password never appears in an `ATTACH` or `CREATE SECRET` text. The
/// postgres_scanner extension must be loaded.
pub fn install_postgres_password(
    conn: &RawConnection,
    name: &str,
    password: &str,
) -> Result<(), String> {
    install(conn, "postgres", name, &[("password", password)], &[])
}

fn install(
    conn: &RawConnection,
    kind: &str,
    name: &str,
    options: &[(&str, &str)],
    scope: &[String],
) -> Result<(), String> {
    let nul = |_| "a secret option holds a NUL byte".to_string();
    let kind = CString::new(kind).map_err(nul)?;
    let name = CString::new(name).map_err(nul)?;
    let keys = options
        .iter()
        .map(|(k, _)| CString::new(*k))
        .collect::<Result<Vec<_>, _>>()
        .map_err(nul)?;
    let values = options
        .iter()
        .map(|(_, v)| CString::new(*v))
        .collect::<Result<Vec<_>, _>>()
        .map_err(nul)?;
    let scope = scope
        .iter()
        .map(|s| CString::new(s.as_str()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(nul)?;
    let key_ptrs: Vec<*const c_char> = keys.iter().map(|k| k.as_ptr()).collect();
    let value_ptrs: Vec<*const c_char> = values.iter().map(|v| v.as_ptr()).collect();
    let scope_ptrs: Vec<*const c_char> = scope.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: `conn` is a live duckdb_connection (a `duckdb::Connection*`)
    // used by this thread alone (the caller holds its mutex); every pointer
    // array holds NUL-terminated strings that outlive the call, with the
    // lengths passed beside them. The shim catches every C++ exception.
    let text = unsafe {
        duckgate_install_secret(
            conn.as_ptr().cast(),
            kind.as_ptr(),
            name.as_ptr(),
            key_ptrs.as_ptr(),
            value_ptrs.as_ptr(),
            key_ptrs.len(),
            scope_ptrs.as_ptr(),
            scope_ptrs.len(),
        )
    };
    // SAFETY: the shim's answer, NULL or a message for
    // `duckgate_secrets_free`, used once.
    unsafe { shim_result(text, duckgate_secrets_free) }
        .map_err(|class| format!("DuckDB {class} error while installing the secret"))
}

/// `Ok` when DuckDB's logging (log storage, the query log file) is off.
pub fn logging_off(conn: &RawConnection) -> Result<(), String> {
    // SAFETY: as in `install_s3`; the shim takes only the connection.
    unsafe {
        shim_result(
            duckgate_logging_off(conn.as_ptr().cast()),
            duckgate_secrets_free,
        )
    }
}
