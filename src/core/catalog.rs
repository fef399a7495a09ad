//! The catalog as a caller may see it, for every door that lists it
//! (`GET /catalog`, Flight SQL's `GetCatalogs`/`GetDbSchemas`/`GetTables`):
//! DuckDB's catalog read on a pooled connection under no row policy, then
//! confined to what the caller's roles let it read.

use crate::core::state::AppState;
use crate::core::Error;
use crate::engine::admission::AcquireError;
use crate::engine::catalogs;

/// Runs `f` on a pooled connection, off the async workers.
pub async fn on_pooled<T: Send + 'static>(
    state: &AppState,
    owner: &std::sync::Arc<str>,
    f: impl FnOnce(&crate::engine::ffi::Connection) -> duckdb::Result<T> + Send + 'static,
) -> Result<T, Error> {
    let pool = &state.engine.pool;
    let (slot, lease) = pool
        .acquire(Some(owner), None, false)
        .await
        .map_err(|e| match e {
            AcquireError::Backend(e) => Error::Internal(e.to_string()),
            e => Error::Query(crate::engine::execute::admission_error(e, pool)),
        })?;
    tokio::task::spawn_blocking(move || {
        let _threads = lease.hold_threads();
        let mut slot = slot;
        // A confined caller's row policy may still be installed on the
        // connection (it stays for that caller's next statement): the
        // gateway's own reading of the catalog (a lake's metadata tables)
        // runs under none.
        let out = slot.use_policy(None).map(|()| f(&slot.conn));
        lease.release(slot);
        out
    })
    .await
    .map_err(|e| Error::Internal(format!("catalog worker: {e}")))?
    .map_err(|e| Error::Internal(format!("row policy: {e}")))?
    // DuckDB's error, read as a query's: a catalog whose database is down
    // is 502 upstream-error (its connection string withheld), not 500.
    .map_err(|e| Error::Query(crate::engine::execute::sql_error(&e)))
}

/// What a caller confined by `access` sees of the catalog: the tables and
/// views its roles let it read, and the schemas it may create in.
pub fn confine(
    databases: &mut Vec<catalogs::DatabaseEntry>,
    access: &crate::engine::guard::access::Access,
) {
    for d in databases.iter_mut() {
        for s in &mut d.schemas {
            s.tables.retain(|t| access.sees(&d.name, &s.name, &t.name));
        }
        d.schemas
            .retain(|s| !s.tables.is_empty() || access.may_create_in(&d.name, &s.name));
    }
    databases.retain(|d| !d.schemas.is_empty());
}
