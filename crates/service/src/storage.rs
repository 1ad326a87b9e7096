//! The disk budget of a running service: mirrors and snapshots are evicted under
//! `[storage] max_bytes` every few minutes (and, through the repository store, before a new
//! snapshot is written). What a running task holds is never evicted (see `warden_repo::gc`).

use crate::worker::Services;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often the cache is checked against its limit.
pub const EVICTION_INTERVAL: Duration = Duration::from_secs(300);

/// Checks the cache against `[storage] max_bytes` now and every [`EVICTION_INTERVAL`] until
/// `stopped` turns true.
pub fn spawn_eviction(services: &Arc<Services>, mut stopped: watch::Receiver<bool>) {
    let repos = services.repos.clone();
    let policy = services.config.storage.cache;
    tokio::spawn(async move {
        loop {
            let store = repos.clone();
            match tokio::task::spawn_blocking(move || store.gc(&policy, false)).await {
                Ok(Ok(report)) if !report.removed.is_empty() => tracing::info!(
                    freed_bytes = report.freed_bytes,
                    removed = report.removed.len(),
                    bytes_after = report.bytes_after,
                    "evicted unused mirrors and snapshots"
                ),
                Ok(Ok(report)) if report.bytes_after > policy.max_bytes => tracing::warn!(
                    bytes = report.bytes_after,
                    max_bytes = policy.max_bytes,
                    "mirrors and snapshots exceed [storage] max_bytes; all of them are in use or recent"
                ),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => tracing::warn!(%error, "evicting mirrors and snapshots failed"),
                Err(error) => tracing::warn!(%error, "the eviction task failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(EVICTION_INTERVAL) => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
        }
    });
}
