//! What `/admin/secrets` says of the declared catalogs: their kind, scope
//! and, for a lake, its current snapshot.

use std::time::Duration;

use super::*;

/// How long `GET /admin/secrets` waits for a pooled connection to read the
/// lakes' snapshots: the admin view never queues behind client queries.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(250);

/// The declared catalogs, with the current snapshot of each DuckLake.
pub(super) async fn catalogs(state: &AppState) -> Vec<CatalogInfo> {
    let view = state.health.credentials.load();
    let mut out: Vec<CatalogInfo> = state
        .catalogs
        .iter()
        .map(|c| {
            let serving = serving_secret(&c.location, &view.secrets);
            CatalogInfo {
                name: c.name.clone(),
                kind: c.kind.as_str().into(),
                read_only: c.read_only,
                metadata: c.metadata.clone(),
                location: c.location.clone(),
                secret: serving.as_ref().map(|(n, _)| n.clone()),
                scope: serving.map(|(_, s)| s),
                snapshot: None,
                snapshot_error: None,
            }
        })
        .collect();
    let lakes: Vec<String> = state
        .catalogs
        .iter()
        .filter(|c| c.kind == CatalogKind::DuckLake)
        .map(|c| c.name.clone())
        .collect();
    if lakes.is_empty() {
        return out;
    }
    let snapshots = match state
        .engine
        .pool
        .acquire_within(SNAPSHOT_WAIT, false, None, None, false, None)
        .await
    {
        Err(_) => Err("no pooled connection free to read it".to_string()),
        Ok((slot, lease)) => tokio::task::spawn_blocking(move || {
            let out: Vec<_> = lakes
                .iter()
                .map(|l| (l.clone(), engine_catalogs::current_snapshot(&slot.conn, l)))
                .collect();
            lease.release(slot);
            out
        })
        .await
        .map_err(|e| format!("snapshot worker: {e}")),
    };
    for c in out.iter_mut().filter(|c| c.kind == "ducklake") {
        let found = match &snapshots {
            Err(e) => Err(e.clone()),
            Ok(all) => match all.iter().find(|(l, _)| *l == c.name) {
                Some((_, Ok(Some(s)))) => Ok(s.clone()),
                Some((_, Ok(None))) => Err("the lake has no snapshot".to_string()),
                Some((_, Err(e))) => {
                    tracing::warn!(catalog = %c.name, error.cause_chain = ?e, "reading a lake's snapshot");
                    Err("reading it failed (see the gateway's log)".to_string())
                }
                None => Err("not read".to_string()),
            },
        };
        match found {
            Ok(s) => {
                c.snapshot = Some(SnapshotInfo {
                    id: s.id,
                    time: s.time,
                    schema_version: s.schema_version,
                })
            }
            Err(e) => c.snapshot_error = Some(e),
        }
    }
    out
}
