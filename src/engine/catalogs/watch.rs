//! The probe of catalogs whose metadata lives in a database that can go
//! down while the gateway runs (a DuckLake's PostgreSQL).

use super::{current_snapshot, Catalog};
use crate::config::attach::CatalogKind;

/// How often a catalog kept in a database is read by [`watch`].
const PROBE_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

/// A probe read that takes longer is interrupted and counted as failing.
const PROBE_LIMIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Watches the catalogs whose metadata is a database that can go down
/// while the gateway runs (a DuckLake's PostgreSQL): every few seconds,
/// reads each one's current snapshot on a connection of its own (never a
/// pooled one: the probe takes no client's capacity; never the control
/// connection: rotation never waits on it) and reports the dependency
/// `catalog:<name>` to the probes and `/metrics`. A read that takes longer
/// than its limit is interrupted and reported failing; while one is still
/// stuck, the next round reports failing without queuing another.
pub async fn watch(
    db: std::sync::Arc<crate::engine::ffi::RawDatabase>,
    catalogs: Vec<Catalog>,
    health: std::sync::Arc<crate::state::Health>,
    stop: tokio_util::sync::CancellationToken,
) {
    let probed: Vec<_> = catalogs
        .into_iter()
        .filter(|c| {
            c.kind == CatalogKind::DuckLake
                && c.metadata
                    .as_deref()
                    .is_some_and(|m| m.starts_with("ducklake:postgres:"))
        })
        .map(|c| (health.dependency(format!("catalog:{}", c.name)), c.name))
        .collect();
    if probed.is_empty() {
        return;
    }
    let conn = match db.connect() {
        Ok(c) => std::sync::Arc::new(std::sync::Mutex::new(c)),
        Err(e) => {
            tracing::error!(error.cause = %e, "no connection for the catalog probe");
            return;
        }
    };
    let mut running: Option<tokio::task::JoinHandle<()>> = None;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(PROBE_EVERY) => {}
        }
        if running.as_ref().is_some_and(|r| !r.is_finished()) {
            for (dep, _) in &probed {
                dep.failed("the previous probe of the catalog has not answered");
            }
            continue;
        }
        let (conn, each) = (conn.clone(), probed.clone());
        let interrupt = conn
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .interrupt_handle();
        let task = tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            for (dep, name) in &each {
                match current_snapshot(&conn, name) {
                    Ok(_) => dep.ok(),
                    Err(e) => dep.failed(&crate::engine::errors::scrub_dsn(&e.to_string())),
                }
            }
        });
        running = Some(task);
        let finished = tokio::time::timeout(PROBE_LIMIT, async {
            if let Some(r) = running.as_mut() {
                let _ = r.await;
            }
        })
        .await;
        if finished.is_err() {
            interrupt.interrupt();
            for (dep, _) in &probed {
                dep.failed("the catalog's database did not answer within 5 s");
            }
        } else {
            running = None;
        }
    }
}
