//! Registered repositories, commits pinned by a task's first run, and a restarted worker
//! interrupting the runs its previous life left open.

use warden_protocol::{TaskKind, TaskStatus};
use warden_store::{NewRepo, StoreError, TaskRepo, RUN_INTERRUPTED};

use super::harness::Fixture;

fn repo(name: &str) -> NewRepo {
    NewRepo {
        name: name.into(),
        source: format!("/srv/git/{name}"),
        branch: Some("main".into()),
        checks: vec!["cargo test".into()],
        mounts: vec![format!("/opt/{name}/toolchain")],
        prepare: vec!["cargo fetch".into()],
        created_by: "alice".into(),
    }
}

async fn repositories_register_once_and_list_by_name(f: &Fixture) {
    let b = f.store.register_repo(repo("beta")).await.unwrap();
    assert_eq!(b.checks, ["cargo test"]);
    assert_eq!(b.mounts, ["/opt/beta/toolchain"]);
    assert_eq!(b.prepare, ["cargo fetch"]);
    assert_eq!(b.created_by, "alice");
    f.store.register_repo(repo("alpha")).await.unwrap();
    assert!(matches!(
        f.store.register_repo(repo("beta")).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    let names: Vec<String> = f
        .store
        .list_repos()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["alpha", "beta"]);
    assert_eq!(f.store.get_repo("beta").await.unwrap(), Some(b));
    assert_eq!(f.store.get_repo("gamma").await.unwrap(), None);
}

async fn pinned_commits_are_kept_and_cannot_change(f: &Fixture) {
    let task = f.task(TaskKind::Question, &["app", "lib"]).await;
    let claim = f.claim("w1").await.unwrap();
    let pinned: Vec<TaskRepo> = task
        .repos
        .iter()
        .map(|r| TaskRepo {
            commit: Some("a".repeat(40)),
            ..r.clone()
        })
        .collect();
    // Another worker cannot pin, nor can a list that is not the task's.
    assert!(matches!(
        f.store
            .pin_task_repos(&claim.run(), "w2", pinned.clone())
            .await,
        Err(StoreError::LeaseLost { .. })
    ));
    assert!(f
        .store
        .pin_task_repos(&claim.run(), "w1", pinned[..1].to_vec())
        .await
        .is_err());
    let updated = f
        .store
        .pin_task_repos(&claim.run(), "w1", pinned.clone())
        .await
        .unwrap();
    assert_eq!(updated.repos, pinned);
    let mut moved = pinned.clone();
    moved[0].commit = Some("b".repeat(40));
    assert!(f
        .store
        .pin_task_repos(&claim.run(), "w1", moved)
        .await
        .is_err());
    assert_eq!(
        f.store.get_task(&task.id).await.unwrap().unwrap().repos,
        pinned
    );
}

async fn a_restarted_worker_interrupts_only_its_own_runs(f: &Fixture) {
    let a1 = f.task(TaskKind::Question, &["r1"]).await;
    let a2 = f.task(TaskKind::Question, &["r2"]).await;
    let b1 = f.task(TaskKind::Question, &["r3"]).await;
    f.claim("a").await.unwrap();
    f.claim("a").await.unwrap();
    f.claim("b").await.unwrap();
    let mut requeued = f.store.interrupt_worker_runs("a").await.unwrap();
    requeued.sort_by(|x, y| x.run.task.cmp(&y.run.task));
    assert_eq!(requeued.len(), 2);
    assert!(requeued.iter().all(|r| r.status == TaskStatus::Queued));
    for id in [&a1.id, &a2.id] {
        let task = f.store.get_task(id).await.unwrap().unwrap();
        assert_eq!(task.status, TaskStatus::Queued);
        assert_eq!(task.interrupted_runs, 1);
        let runs = f.store.list_runs(id).await.unwrap();
        assert_eq!(runs[0].outcome.as_deref(), Some(RUN_INTERRUPTED));
    }
    let other = f.store.get_task(&b1.id).await.unwrap().unwrap();
    assert_eq!(other.status, TaskStatus::Running);
    assert!(f.store.interrupt_worker_runs("a").await.unwrap().is_empty());
}

conformance!(
    repositories_register_once_and_list_by_name,
    pinned_commits_are_kept_and_cannot_change,
    a_restarted_worker_interrupts_only_its_own_runs,
);
