//! The disk budget of a running service: mirrors and snapshots are evicted under
//! `[storage] max_bytes` every few minutes (and, through the repository store, before a new
//! snapshot is written). What a running task holds is never evicted (see `warden_repo::gc`),
//! nor what a task still needs: before each round, the mirrors and snapshots of every
//! unfinished task, and the recorded commits of every finished one — of this process's
//! database and, for `warden serve`, `warden worker` and `warden gc`, of the in-process
//! `local.db` sharing its `WARDEN_HOME` (`warden gc` reads the server's too) — are handed to
//! the repository store as [`Retained`]; an in-process run's eviction before a snapshot keeps
//! what its own database's tasks use. A retry or a follow-up pins the commit the earlier task
//! recorded, which for `PATH@worktree` exists only in Warden's mirror: a finished task keeps
//! that mirror (not its snapshot, which the mirror rebuilds). A change's proposal, which a
//! follow-up continues on, keeps its mirror through its `refs/warden/proposals/` ref.

use crate::task_repos::repo_specs;
use crate::worker::Services;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use warden_protocol::TaskStatus;
use warden_repo::{CachePolicy, GcReport, RepoSpec, RepoStore, Retained, Source};
use warden_store::{Store, StoreError, Task, TaskQuery};

/// How often the cache is checked against its limit.
pub const EVICTION_INTERVAL: Duration = Duration::from_secs(300);

/// Every status: an unfinished task may still run (and pin its repositories) again, a
/// finished one be retried or followed up on its recorded commits.
const STATUSES: [TaskStatus; 9] = [
    TaskStatus::Queued,
    TaskStatus::Running,
    TaskStatus::Testing,
    TaskStatus::WaitingInput,
    TaskStatus::WaitingApproval,
    TaskStatus::Completed,
    TaskStatus::Failed,
    TaskStatus::Cancelled,
    TaskStatus::TimedOut,
];

/// What the tasks of `stores` need kept: the mirrors (and snapshots of the recorded commits)
/// of unfinished tasks, and the recorded commits of finished ones, whose mirror stays while it
/// holds such a commit as a `PATH@worktree` snapshot. A repository that no longer resolves
/// (unregistered) keeps nothing: its task cannot pin it. Only an in-process task (its own
/// source) can have pinned `@worktree`, so a finished task naming registered repositories
/// costs no read of them.
pub async fn retained(
    stores: &[Arc<dyn Store>],
    repos: &RepoStore,
) -> Result<Retained, StoreError> {
    let mut retained = Retained::default();
    for store in stores {
        for status in STATUSES {
            let finished = status.is_terminal();
            let mut before = None;
            loop {
                let page = store
                    .list_tasks(TaskQuery {
                        owner: None,
                        status: Some(status),
                        before: before.clone(),
                        limit: 500,
                    })
                    .await?;
                for task in &page {
                    if finished {
                        retain_commits(task, repos, &mut retained);
                        continue;
                    }
                    let Ok(specs) = repo_specs(store.as_ref(), &task.repos).await else {
                        continue;
                    };
                    for (spec, repo) in specs.iter().zip(&task.repos) {
                        repos.retain(spec, repo.commit.as_deref(), &mut retained);
                    }
                }
                match page.last() {
                    Some(last) if page.len() == 500 => before = Some(last.id.clone()),
                    _ => break,
                }
            }
        }
    }
    Ok(retained)
}

/// The recorded commits of finished in-process task `task`'s repositories, for a retry or a
/// follow-up.
fn retain_commits(task: &Task, repos: &RepoStore, retained: &mut Retained) {
    for repo in &task.repos {
        let (Some(source), Some(commit)) = (&repo.source, &repo.commit) else {
            continue;
        };
        // A URL's commits are fetched again from it; only a local work tree makes commits
        // of its own.
        if !source.starts_with('/') {
            continue;
        }
        let spec = RepoSpec {
            source: Source::Path(source.into()),
            rev: Some(commit.clone()),
            name: repo.name.clone(),
            within: None,
        };
        repos.retain_commit(&spec, commit, retained);
    }
}

/// The databases of `urls` whose tasks share a `WARDEN_HOME`'s mirrors, for [`retained`]:
/// a SQLite one only when its file exists (a missing one holds no task; opening it would
/// create it). One that cannot be opened is logged and left out.
pub async fn other_stores(urls: &[String]) -> Vec<Arc<dyn Store>> {
    let mut stores = Vec::new();
    for url in urls {
        let file = url.strip_prefix("sqlite://").map(Path::new);
        if file.is_some_and(|file| !file.is_file()) {
            continue;
        }
        match warden_store::open(url).await {
            Ok(store) => stores.push(store),
            Err(error) => {
                tracing::warn!(%error, url, "cannot read the tasks of another database for eviction");
            }
        }
    }
    stores
}

/// Tells `repos` what the unfinished tasks of `stores` need, then evicts under `policy`.
pub async fn evict(
    stores: &[Arc<dyn Store>],
    repos: &RepoStore,
    policy: CachePolicy,
    dry_run: bool,
) -> anyhow::Result<GcReport> {
    use anyhow::Context;
    let keep = retained(stores, repos)
        .await
        .context("cannot read which repositories unfinished tasks use")?;
    repos.set_retained(keep);
    let store = repos.clone();
    tokio::task::spawn_blocking(move || store.gc(&policy, dry_run))
        .await
        .context("the eviction task failed")?
        .context("cannot evict mirrors, snapshots and dependency caches")
}

/// Checks the cache against `[storage] max_bytes` now and every [`EVICTION_INTERVAL`] until
/// `stopped` turns true, keeping what the unfinished tasks of the services' database and of
/// the databases `others` names (when they exist) use.
pub fn spawn_eviction(
    services: &Arc<Services>,
    others: Vec<String>,
    mut stopped: watch::Receiver<bool>,
) {
    let repos = services.repos.clone();
    let policy = services.config.storage.cache;
    let own = Arc::clone(&services.store);
    tokio::spawn(async move {
        let mut stores = vec![own];
        stores.extend(other_stores(&others).await);
        loop {
            match evict(&stores, &repos, policy, false).await {
                Ok(report) if !report.removed.is_empty() => tracing::info!(
                    freed_bytes = report.freed_bytes,
                    removed = report.removed.len(),
                    bytes_after = report.bytes_after,
                    "evicted unused mirrors and snapshots"
                ),
                Ok(report) if report.bytes_after > policy.max_bytes => tracing::warn!(
                    bytes = report.bytes_after,
                    max_bytes = policy.max_bytes,
                    "mirrors and snapshots exceed [storage] max_bytes; all of them are in use, recent or needed by unfinished tasks"
                ),
                Ok(_) => {}
                Err(error) => tracing::warn!(error = format!("{error:#}"), "evicting mirrors and snapshots failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(EVICTION_INTERVAL) => {}
                _ = stopped.wait_for(|s| *s) => return,
            }
        }
    });
}

/// Copies the SQLite database `from` to the new file `to` as one consistent snapshot while it
/// may be in use (`warden backup`), and checks the copy; its size in bytes.
pub fn backup_sqlite(from: &Path, to: &Path) -> std::io::Result<u64> {
    warden_store::backup_sqlite(from, to)
}
