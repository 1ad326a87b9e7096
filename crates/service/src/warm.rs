//! Warming a registered repository: right after `POST /v1/repos` (and `warden repos add`) the
//! server fetches it into Warden's mirror and writes the snapshot of its default branch in the
//! background, so the first task on it does not wait for a large clone. What it is doing is
//! kept in memory for this process ([`Warmth`], served with the repository) — the fetch's and
//! the snapshot's progress lines, the commit once it is ready, or why it failed (a task pins
//! again anyway; warming only saves it the wait).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use warden_repo::RepoStore;
use warden_store::{Store, TaskRepo};

pub use warden_protocol::views::{WarmState, Warmth};

/// The warming of this process's repositories. Cheap to clone.
#[derive(Clone)]
pub struct Warmer {
    repos: RepoStore,
    states: Arc<Mutex<HashMap<String, Warmth>>>,
}

impl Warmer {
    pub fn new(repos: RepoStore) -> Warmer {
        Warmer {
            repos,
            states: Arc::default(),
        }
    }

    /// Where warming `name` stands, if it was started by this process.
    pub fn warmth(&self, name: &str) -> Option<Warmth> {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(name)
            .cloned()
    }

    fn set(&self, name: &str, warmth: Warmth) {
        self.states
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(name.to_string(), warmth);
    }

    /// Starts warming registered repository `name` in the background (its registered source,
    /// at its registered branch or the source's `HEAD`).
    pub fn start(&self, store: Arc<dyn Store>, name: &str) {
        let warmer = self.clone();
        let name = name.to_string();
        warmer.set_warming(&name);
        tokio::spawn(async move {
            let _ = warmer.warm_and_record(store.as_ref(), &name, None).await;
        });
    }

    /// Refreshes registered repository `name` now, as [`Warmer::start`] warms it (its mirror
    /// fetched, the snapshot of its default branch written, what warming shows updated), then
    /// removes its snapshots but the newest `keep` (the one just written first; none in use:
    /// [`warden_repo::RepoStore::prune_snapshots`]).
    pub async fn refresh(
        &self,
        store: &dyn Store,
        name: &str,
        keep: usize,
    ) -> Result<Refreshed, String> {
        self.set_warming(name);
        self.warm_and_record(store, name, Some(keep)).await
    }

    fn set_warming(&self, name: &str) {
        self.set(
            name,
            Warmth {
                state: WarmState::Warming,
                progress: None,
                commit: None,
                error: None,
            },
        );
    }

    async fn warm_and_record(
        &self,
        store: &dyn Store,
        name: &str,
        keep: Option<usize>,
    ) -> Result<Refreshed, String> {
        let ended = self.warm(store, name, keep).await;
        let warmth = match &ended {
            Ok(refreshed) => Warmth {
                state: WarmState::Ready,
                progress: None,
                commit: Some(refreshed.commit.clone()),
                error: None,
            },
            Err(error) => {
                tracing::warn!(repo = %name, %error, "warming the repository failed");
                Warmth {
                    state: WarmState::Failed,
                    progress: None,
                    commit: None,
                    error: Some(error.clone()),
                }
            }
        };
        self.set(name, warmth);
        ended
    }

    /// Pins and snapshots the repository, then (with `keep`) prunes its older snapshots.
    async fn warm(
        &self,
        store: &dyn Store,
        name: &str,
        keep: Option<usize>,
    ) -> Result<Refreshed, String> {
        let specs = crate::task_repos::repo_specs(store, &[TaskRepo::named(name)])
            .await
            .map_err(|failure| failure.message)?;
        let (repos, progress) = (self.repos.clone(), self.clone());
        let name = name.to_string();
        tokio::task::spawn_blocking(move || {
            let report = |line: &str| {
                let line = line.strip_prefix("warden: ").unwrap_or(line);
                let mut states = progress
                    .states
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                if let Some(warmth) = states.get_mut(&name) {
                    warmth.progress = Some(line.to_string());
                }
            };
            let repo = warden_engine::question::pin_all(&repos, &specs, &report)
                .map_err(|error| error.to_string())?
                .pop()
                .ok_or_else(|| "nothing was pinned".to_string())?;
            let removed = match keep {
                // Held (`repo.in_use`) while pruning: the new snapshot cannot go.
                Some(keep) => repos
                    .prune_snapshots(&repo.pinned, keep)
                    .map_err(|error| format!("removing older snapshots: {error}"))?
                    .len(),
                None => 0,
            };
            Ok(Refreshed {
                commit: repo.pinned.commit.clone(),
                removed_snapshots: removed,
            })
        })
        .await
        .map_err(|error| format!("warming crashed: {error}"))?
    }
}

/// What [`Warmer::refresh`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refreshed {
    /// The commit of the default branch now in the snapshot.
    pub commit: String,
    /// Older snapshots of the repository removed.
    pub removed_snapshots: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_registered_repository_is_warmed_to_its_default_branch() {
        let home = tempfile::tempdir().unwrap();
        let repo = warden_test_support::git_fixture::TempRepo::new();
        repo.write("README.md", "# warm\n");
        let head = repo.commit("initial");
        let store = warden_store::open(&format!(
            "sqlite://{}",
            home.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        store
            .register_repo(warden_store::NewRepo {
                name: "app".into(),
                source: repo.path().to_str().unwrap().into(),
                branch: None,
                checks: vec![],
                mounts: vec![],
                prepare: vec![],
                created_by: "root".into(),
            })
            .await
            .unwrap();
        let warmer = Warmer::new(RepoStore::open(home.path()).unwrap());
        warmer.start(Arc::clone(&store), "app");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let warmth = loop {
            let warmth = warmer.warmth("app").unwrap();
            if warmth.state != WarmState::Warming {
                break warmth;
            }
            assert!(std::time::Instant::now() < deadline, "{warmth:?}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(warmth.state, WarmState::Ready, "{warmth:?}");
        assert_eq!(warmth.commit.as_deref(), Some(head.as_str()));
        // The snapshot is written: a task on it starts from there.
        assert!(home
            .path()
            .join("snapshots")
            .read_dir()
            .unwrap()
            .next()
            .is_some());
        // An unknown repository fails with the reason.
        warmer.start(Arc::clone(&store), "nope");
        let failed = loop {
            let warmth = warmer.warmth("nope").unwrap();
            if warmth.state != WarmState::Warming {
                break warmth;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        };
        assert_eq!(failed.state, WarmState::Failed);
        assert!(failed.error.unwrap().contains("not registered"));
    }
}
