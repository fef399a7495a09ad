//! The spill cap, enforced by the gateway: DuckDB 1.5.5 does not hold a
//! spilling sort to `max_temp_directory_size` (2.3 GB seen under a 50 MB cap).
//! A watcher measures the spill directory and, past the cap, interrupts the
//! queries running then (DuckDB's spill files name no owner), which answer
//! 507 `temp-space-exhausted`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::engine::pool::QueryPool;

/// How often the spill directory is measured.
const EVERY: Duration = Duration::from_millis(250);

/// Watches `dir` until `stop`; past `cap` bytes, interrupts running queries.
pub async fn watch(pool: QueryPool, dir: PathBuf, cap: u64, stop: CancellationToken) {
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => return,
        }
        let d = dir.clone();
        let size = tokio::task::spawn_blocking(move || dir_size(&d))
            .await
            .unwrap_or(0);
        if size > cap {
            tracing::warn!(
                spilled_bytes = size,
                cap_bytes = cap,
                "spill directory past DUCKGATE_MAX_TEMP_DIRECTORY_SIZE; interrupting running queries"
            );
            metrics::counter!("duckgate_spill_cap_interrupts_total").increment(1);
            pool.spill_exceeded();
            // Let the interrupted queries remove their files before measuring
            // again, so queries that start next are not blamed.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.cancelled() => return,
            }
        }
    }
}

/// Bytes of the regular files in `dir` (DuckDB's spill files lie flat there).
fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok())
                .filter(|m| m.is_file())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
