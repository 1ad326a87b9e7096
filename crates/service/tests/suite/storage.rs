//! `storage::evict`: eviction keeps the mirrors and snapshots unfinished tasks use — of this
//! database and of the other one sharing the home — and, once a task ends, the mirror of a
//! `PATH@worktree` commit it recorded (its only home), for a retry or a follow-up.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_repo::{CachePolicy, RepoSpec, RepoStore};
use warden_store::{NewTask, Store, TaskRepo};
use warden_test_support::git_fixture::TempRepo;

fn everything() -> CachePolicy {
    CachePolicy {
        max_bytes: 0,
        keep_recent: Duration::ZERO,
    }
}

/// Queues a task on `spec`'s repository at `commit`, as the in-process front door records it.
async fn queue(store: &dyn Store, id: &TaskId, spec: &RepoSpec, commit: &str) {
    store
        .create_task(
            NewTask {
                id: id.clone(),
                kind: TaskKind::Question,
                owner: "local".into(),
                prompt: "what is here?".into(),
                repos: vec![TaskRepo {
                    name: spec.name.clone(),
                    rev: None,
                    commit: Some(commit.into()),
                    source: Some(spec.source.display_redacted()),
                }],
                priority: 0,
                follow_up_to: None,
                retry_of: None,
                metadata: serde_json::json!({}),
                callback_url: None,
            },
            None,
        )
        .await
        .unwrap();
}

/// Regression: the mirror holding a queued in-process task's `PATH@worktree` commit (which
/// exists nowhere else) was evicted like any other, so the task could never run.
#[tokio::test]
async fn eviction_keeps_what_unfinished_tasks_of_either_database_use() {
    let home = tempfile::tempdir().unwrap();
    let repos = RepoStore::open(home.path()).unwrap();
    let repo = TempRepo::new();
    repo.write("a.txt", "a\n");
    repo.commit("a");
    repo.write("uncommitted.txt", "only here\n");
    let path = repo.path().canonicalize().unwrap().display().to_string();
    let worktree = RepoSpec::parse(&format!("{path}@worktree"), Path::new("/")).unwrap();
    let pinned = repos.pin(&worktree).unwrap();
    let snapshot = repos.snapshot(&pinned).unwrap();
    // Another repository, used by a task that finished: evictable.
    let done = TempRepo::new();
    done.write("b.txt", "b\n");
    let done_commit = done.commit("b");
    let done_spec = RepoSpec::parse(
        &done.path().canonicalize().unwrap().display().to_string(),
        Path::new("/"),
    )
    .unwrap();
    let done_pinned = repos.pin(&done_spec).unwrap();

    // The server's database (this process's) and the in-process one beside it.
    let server = warden_store::open(&format!(
        "sqlite://{}",
        home.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let local_url = warden_service::local::database_url(home.path());
    let local = warden_store::open(&local_url).await.unwrap();
    let queued: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse().unwrap();
    let finished: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEW".parse().unwrap();
    queue(local.as_ref(), &queued, &worktree, &pinned.commit).await;
    queue(server.as_ref(), &finished, &done_spec, &done_commit).await;
    server
        .transition(&finished, TaskStatus::Queued, TaskStatus::Cancelled, None)
        .await
        .unwrap();

    let mut stores: Vec<Arc<dyn Store>> = vec![server];
    stores.extend(warden_service::storage::other_stores(&[local_url]).await);
    assert_eq!(stores.len(), 2);
    let report = warden_service::storage::evict(&stores, &repos, everything(), false)
        .await
        .unwrap();
    let kept: Vec<_> = report
        .kept
        .iter()
        .filter(|e| e.kept == Some("needed_by_task"))
        .map(|e| e.path.clone())
        .collect();
    assert_eq!(kept.len(), 2, "{report:?}");
    assert!(kept.contains(&pinned.mirror) && kept.contains(&snapshot.root));
    assert!(!done_pinned.mirror.exists(), "{report:?}");
    // The queued task can still run: its commit is pinned again from the mirror.
    std::fs::remove_file(repo.path().join("uncommitted.txt")).unwrap();
    let again = RepoSpec::parse(&format!("{path}@{}", pinned.commit), Path::new("/")).unwrap();
    assert_eq!(repos.pin(&again).unwrap().commit, pinned.commit);

    // Once it ends it can still be retried or followed up on that commit: its mirror, the
    // commit's only home, stays; its snapshot (which the mirror rebuilds) goes.
    stores[1]
        .transition(&queued, TaskStatus::Queued, TaskStatus::Cancelled, None)
        .await
        .unwrap();
    let report = warden_service::storage::evict(&stores, &repos, everything(), false)
        .await
        .unwrap();
    let kept: Vec<_> = report
        .kept
        .iter()
        .map(|e| (e.path.clone(), e.kept))
        .collect();
    assert_eq!(
        kept,
        vec![(pinned.mirror.clone(), Some("needed_by_task"))],
        "{report:?}"
    );
    assert!(!snapshot.root.exists(), "{report:?}");
    let retried = repos.pin(&again).unwrap();
    assert_eq!(retried.commit, pinned.commit);
    assert!(repos
        .snapshot(&retried)
        .unwrap()
        .root
        .join("a.txt")
        .is_file());
}

/// Regression: a finished in-process question asked on `PATH@worktree` lost its mirror to
/// eviction, and with it the snapshot commit its follow-up (or retry) pins: it could never be
/// continued. A finished task on an ordinary commit keeps nothing: the source has it.
#[tokio::test]
async fn eviction_keeps_the_work_tree_commit_a_finished_task_can_be_continued_on() {
    let home = tempfile::tempdir().unwrap();
    let repos = RepoStore::open(home.path()).unwrap();
    let repo = TempRepo::new();
    repo.write("a.txt", "a\n");
    let head = repo.commit("a");
    repo.write("uncommitted.txt", "only here\n");
    let path = repo.path().canonicalize().unwrap().display().to_string();
    let worktree = RepoSpec::parse(&format!("{path}@worktree"), Path::new("/")).unwrap();
    let pinned = repos.pin(&worktree).unwrap();
    assert_ne!(pinned.commit, head);
    let store = warden_store::open(&warden_service::local::database_url(home.path()))
        .await
        .unwrap();
    let asked: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEX".parse().unwrap();
    queue(store.as_ref(), &asked, &worktree, &pinned.commit).await;
    let claim = store
        .claim(
            "worker",
            Duration::from_secs(60),
            &warden_store::ClaimFilter::default(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id, asked);
    store
        .transition(&asked, TaskStatus::Running, TaskStatus::Completed, None)
        .await
        .unwrap();
    let stores = [store];

    // The dry run says so, and the real one keeps it.
    for dry_run in [true, false] {
        let report = warden_service::storage::evict(&stores, &repos, everything(), dry_run)
            .await
            .unwrap();
        assert!(
            report
                .kept
                .iter()
                .any(|e| e.path == pinned.mirror && e.kept == Some("needed_by_task")),
            "{report:?}"
        );
        assert!(report.removed.iter().all(|e| e.path != pinned.mirror));
    }
    // The user's work tree moved on; the follow-up still pins the commit the task recorded.
    std::fs::remove_file(repo.path().join("uncommitted.txt")).unwrap();
    let follow_up = RepoSpec::parse(&format!("{path}@{}", pinned.commit), Path::new("/")).unwrap();
    assert_eq!(repos.pin(&follow_up).unwrap().commit, pinned.commit);

    // The same task on the committed HEAD: the mirror is fetched again when needed.
    let other: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEY".parse().unwrap();
    let plain = RepoSpec::parse(&path, Path::new("/")).unwrap();
    let plain_home = tempfile::tempdir().unwrap();
    let store = warden_store::open(&warden_service::local::database_url(plain_home.path()))
        .await
        .unwrap();
    queue(store.as_ref(), &other, &plain, &head).await;
    store
        .transition(&other, TaskStatus::Queued, TaskStatus::Cancelled, None)
        .await
        .unwrap();
    let plain_repos = RepoStore::open(plain_home.path()).unwrap();
    let plain_pinned = plain_repos.pin(&plain).unwrap();
    let report = warden_service::storage::evict(&[store], &plain_repos, everything(), false)
        .await
        .unwrap();
    assert!(report.kept.is_empty(), "{report:?}");
    assert!(!plain_pinned.mirror.exists());
}

/// A database that does not exist holds no task and is not created by looking.
#[tokio::test]
async fn a_missing_database_is_not_created() {
    let home = tempfile::tempdir().unwrap();
    let url = warden_service::local::database_url(home.path());
    assert!(warden_service::storage::other_stores(&[url])
        .await
        .is_empty());
    assert!(!home
        .path()
        .join(warden_service::local::DATABASE_FILE)
        .exists());
}
