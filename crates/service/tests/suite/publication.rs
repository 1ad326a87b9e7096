//! `publication::publish_approved`: a server change task's approved proposal published to a
//! bare remote and the GitHub fake, once, resumable, refused when anything drifted.

use std::path::Path;
use std::time::Duration;

use serde_json::json;
use warden_engine::redact::Redactor;
use warden_protocol::{
    Approval, ApprovalStatus as WireStatus, ChangeOutcome, ChangeResult, DiffStat, Proposal,
    Publication, PublicationStatus, TaskId, TaskKind, TaskStatus, Usage, Validation,
};
use warden_repo::{RepoSpec, RepoStore};
use warden_runtime::{MemoryJournal, RecordKind};
use warden_service::config::{GithubSettings, PublishTarget};
use warden_service::github_client::{GithubRepo, GithubToken};
use warden_service::publication::{
    approved_publication, publish_approved, rejected_publication, ApprovedPublishError,
    ServerPublish,
};
use warden_store::{ApprovalStatus, Decision, NewApproval, NewRepo, NewTask, Store};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::github_fake::GithubFake;

const TOKEN: &str = "ghp_server_fake_token_0123456789";

fn bare(dir: &Path, args: &[&str]) -> String {
    #[allow(clippy::disallowed_methods)]
    let output = std::process::Command::new("git")
        .arg(format!("--git-dir={}", dir.display()))
        .args(args)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}");
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

struct World {
    _home: tempfile::TempDir,
    _remote_dir: tempfile::TempDir,
    repo: TempRepo,
    remote: std::path::PathBuf,
    mirror: std::path::PathBuf,
    store: std::sync::Arc<dyn Store>,
    repos: RepoStore,
    fake: GithubFake,
    settings: GithubSettings,
    task: TaskId,
    base: String,
    commit: String,
}

/// A registered repository whose `origin` is a bare remote holding `main`; a change task
/// waiting for approval `apr_1` of its proposal (the repository's second commit).
async fn world() -> World {
    let home = tempfile::tempdir().unwrap();
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\n");
    let base = repo.commit("initial");
    let remote_dir = tempfile::tempdir().unwrap();
    let remote = remote_dir.path().join("widgets.git");
    repo.git(&[
        "init",
        "-q",
        "--bare",
        "-b",
        "main",
        remote.to_str().unwrap(),
    ]);
    repo.git(&["remote", "add", "origin", remote.to_str().unwrap()]);
    repo.git(&["push", "-q", "origin", "main"]);
    repo.write("src/lib.txt", "alpha\nBETA\n");
    let commit = repo.commit("Uppercase beta");
    let source = repo.path().canonicalize().unwrap();
    let spec = RepoSpec::parse(source.to_str().unwrap(), Path::new("/")).unwrap();
    let repos = RepoStore::open(home.path()).unwrap();
    let pinned = repos.pin(&spec).unwrap();
    assert_eq!(pinned.commit, commit);
    let store = warden_store::open(&format!(
        "sqlite://{}",
        home.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    store
        .register_repo(NewRepo {
            name: spec.name.clone(),
            source: source.to_str().unwrap().to_string(),
            branch: None,
            checks: vec!["bash check.sh".into()],
            mounts: vec![],
            prepare: vec![],
            created_by: "root".into(),
        })
        .await
        .unwrap();
    let task: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse().unwrap();
    bare(
        &pinned.mirror,
        &[
            "update-ref",
            &format!("refs/warden/proposals/{task}"),
            &commit,
        ],
    );
    let tree = bare(
        &pinned.mirror,
        &["rev-parse", &format!("{commit}^{{tree}}")],
    );
    let validations = vec![Validation {
        command: "bash check.sh".into(),
        exit_code: Some(0),
        tree: tree.clone(),
        config_hash: "sha256:cfg".into(),
        sandbox: "linux".into(),
        duration_ms: 12,
        output_tail: String::new(),
        reused: false,
    }];
    let hash = warden_repo::proposal::proposal_hash(
        &base,
        &tree,
        &commit,
        &serde_json::to_value(&validations).unwrap(),
    );
    let result = ChangeResult {
        task_id: task.clone(),
        kind: TaskKind::Change,
        outcome: ChangeOutcome::Proposal {
            proposal: Box::new(Proposal {
                id: "prp_1".into(),
                repo: spec.name.clone(),
                base_commit: base.clone(),
                commit: commit.clone(),
                tree,
                reference: format!("refs/warden/proposals/{task}"),
                diff_stat: DiffStat {
                    files_changed: 1,
                    additions: 1,
                    deletions: 1,
                },
                files: vec![],
                summary: "Uppercase beta".into(),
                hash: hash.clone(),
                validations,
                sensitive_files: vec![],
            }),
            publication: Publication {
                status: PublicationStatus::AwaitingApproval,
                branch: Some(format!("warden/{task}")),
                pr_url: None,
            },
        },
        baseline: vec![],
        approval: Some(Approval {
            id: "apr_1".into(),
            kind: "publish".into(),
            subject_hash: hash.clone(),
            status: WireStatus::Pending,
            decided_by: None,
            decided_at: None,
        }),
        usage: Usage::default(),
        model: "openai:gpt-test".into(),
        sandbox: Some("linux".into()),
        notices: vec![],
        maintenance: None,
        gate: None,
        review: None,
    };
    store
        .create_task(
            NewTask {
                id: task.clone(),
                kind: TaskKind::Change,
                owner: "alice".into(),
                prompt: "make beta uppercase".into(),
                repos: vec![],
                priority: 0,
                follow_up_to: None,
                retry_of: None,
                metadata: json!({}),
                callback_url: None,
            },
            None,
        )
        .await
        .unwrap();
    store
        .transition(
            &task,
            TaskStatus::Queued,
            TaskStatus::WaitingApproval,
            Some(serde_json::to_value(&result).unwrap()),
        )
        .await
        .unwrap();
    store
        .create_approval(NewApproval {
            id: "apr_1".into(),
            task: task.clone(),
            kind: "publish".into(),
            subject_hash: hash,
        })
        .await
        .unwrap();
    let fake = GithubFake::start(&remote, "acme", "widgets", TOKEN);
    let settings = GithubSettings {
        api_url: fake.url(),
        token: GithubToken::new(TOKEN),
        draft: false,
        targets: vec![PublishTarget {
            repo: spec.name.clone(),
            github: GithubRepo::parse("acme/widgets").unwrap(),
            base: None,
        }],
        retry_base: Some(Duration::from_millis(5)),
        webhook: None,
        app: None,
    };
    World {
        _home: home,
        _remote_dir: remote_dir,
        repo,
        remote,
        mirror: pinned.mirror,
        store,
        repos,
        fake,
        settings,
        task,
        base,
        commit,
    }
}

impl World {
    fn context<'a>(&'a self, redactor: &'a Redactor) -> ServerPublish<'a> {
        ServerPublish {
            store: self.store.as_ref(),
            repos: &self.repos,
            settings: &self.settings,
            redactor,
        }
    }

    fn remote_branches(&self) -> String {
        bare(
            &self.remote,
            &[
                "for-each-ref",
                "--format=%(refname) %(objectname)",
                "refs/heads/warden/",
            ],
        )
    }
}

#[tokio::test]
async fn an_approved_proposal_is_published_once_and_a_second_call_resumes_without_repeating() {
    let world = world().await;
    let redactor = Redactor::default();
    let context = world.context(&redactor);
    // Pending: nothing happens.
    let mut journal = MemoryJournal::default();
    let refused = publish_approved(context, "apr_1", &mut journal).await;
    assert!(
        matches!(refused, Err(ApprovedPublishError::Refused(_))),
        "{refused:?}"
    );
    assert_eq!(world.remote_branches(), "");
    assert!(journal.records.is_empty());
    let task = world.store.get_task(&world.task).await.unwrap().unwrap();
    assert_eq!(
        approved_publication(world.store.as_ref(), &task)
            .await
            .unwrap(),
        None
    );

    world
        .store
        .decide_approval("apr_1", &world.task_hash().await, Decision::Approve, "root")
        .await
        .unwrap();
    let due = approved_publication(world.store.as_ref(), &task)
        .await
        .unwrap();
    assert_eq!(due.map(|a| a.id).as_deref(), Some("apr_1"));
    let result = publish_approved(context, "apr_1", &mut journal)
        .await
        .unwrap();
    let ChangeOutcome::Proposal { publication, .. } = &result.outcome else {
        panic!("{result:?}")
    };
    let pulls = world.fake.pulls();
    assert_eq!(pulls.len(), 1);
    assert_eq!(publication.status, PublicationStatus::PrOpened);
    assert_eq!(publication.pr_url.as_deref(), pulls[0]["html_url"].as_str());
    assert_eq!(pulls[0]["base"]["ref"], "main");
    assert_eq!(pulls[0]["head"]["sha"], world.commit.as_str());
    assert_eq!(
        world.remote_branches(),
        format!("refs/heads/warden/{} {}", world.task, world.commit)
    );
    assert_eq!(
        result.approval.as_ref().unwrap().status,
        WireStatus::Approved
    );
    let approval = world.store.get_approval("apr_1").await.unwrap().unwrap();
    assert_eq!(approval.status, ApprovalStatus::Consumed);
    // The decision it acts on, then each side effect's intent and outcome.
    assert_eq!(journal.records.len(), 5);
    assert_eq!(journal.records[0].kind, RecordKind::ApprovalDecided);

    // Called again (a crash before the caller recorded it): the same branch and pull
    // request are found, nothing is created.
    let again = publish_approved(context, "apr_1", &mut journal)
        .await
        .unwrap();
    assert_eq!(again.outcome, result.outcome);
    assert_eq!(world.fake.pulls().len(), 1);
    let creates = world
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 1);
}

#[tokio::test]
async fn a_rejected_proposal_ends_unpublished_and_is_never_due_for_publication() {
    let world = world().await;
    let task = world.store.get_task(&world.task).await.unwrap().unwrap();
    assert!(rejected_publication(world.store.as_ref(), &task)
        .await
        .unwrap()
        .is_none());
    world
        .store
        .decide_approval("apr_1", &world.task_hash().await, Decision::Reject, "root")
        .await
        .unwrap();
    assert_eq!(
        approved_publication(world.store.as_ref(), &task)
            .await
            .unwrap(),
        None
    );
    let result = rejected_publication(world.store.as_ref(), &task)
        .await
        .unwrap()
        .expect("a rejected publication");
    let ChangeOutcome::Proposal {
        proposal,
        publication,
    } = &result.outcome
    else {
        panic!("{result:?}")
    };
    // The proposal stays, for `warden apply`; nothing is (or claims to be) published.
    assert_eq!(proposal.commit, world.commit);
    assert_eq!(publication.status, PublicationStatus::NotRequested);
    assert_eq!(publication.branch, None);
    let approval = result.approval.as_ref().unwrap();
    assert_eq!(approval.status, WireStatus::Rejected);
    assert_eq!(approval.decided_by.as_deref(), Some("root"));
    assert!(approval.decided_at.is_some());
    assert_eq!(world.remote_branches(), "");
    assert!(world.fake.requests().is_empty());
}

#[tokio::test]
async fn a_proposal_that_changed_after_approval_is_not_published() {
    let world = world().await;
    let redactor = Redactor::default();
    let context = world.context(&redactor);
    world
        .store
        .decide_approval("apr_1", &world.task_hash().await, Decision::Approve, "root")
        .await
        .unwrap();
    bare(
        &world.mirror,
        &[
            "update-ref",
            &format!("refs/warden/proposals/{}", world.task),
            &world.base,
        ],
    );
    let mut journal = MemoryJournal::default();
    let refused = publish_approved(context, "apr_1", &mut journal).await;
    match refused {
        Err(ApprovedPublishError::Refused(message)) => {
            assert!(message.contains("changed"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(world.remote_branches(), "");
    assert!(world.fake.requests().is_empty());
    // The approval was not used up by a publication that did not happen.
    let approval = world.store.get_approval("apr_1").await.unwrap().unwrap();
    assert_eq!(approval.status, ApprovalStatus::Approved);
}

impl World {
    async fn task_hash(&self) -> String {
        self.store
            .get_approval("apr_1")
            .await
            .unwrap()
            .unwrap()
            .subject_hash
    }
}

/// A follow-up change of `world.task` (which is published by then), waiting for approval
/// `apr_2` of its proposal: the source repository's next commit, on top of the first proposal,
/// to be published on the first task's branch (`same_branch`).
async fn follow_up(world: &World) -> (TaskId, String, String) {
    world.repo.write("src/lib.txt", "ALPHA\nBETA\n");
    let commit = world.repo.commit("Uppercase alpha");
    let source = world.repo.path().canonicalize().unwrap();
    let spec = RepoSpec::parse(source.to_str().unwrap(), Path::new("/")).unwrap();
    let pinned = world.repos.pin(&spec).unwrap();
    assert_eq!(pinned.commit, commit);
    let task: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEW".parse().unwrap();
    bare(
        &world.mirror,
        &[
            "update-ref",
            &format!("refs/warden/proposals/{task}"),
            &commit,
        ],
    );
    let tree = bare(&world.mirror, &["rev-parse", &format!("{commit}^{{tree}}")]);
    let hash = warden_repo::proposal::proposal_hash(
        &world.commit,
        &tree,
        &commit,
        &serde_json::to_value(Vec::<Validation>::new()).unwrap(),
    );
    let result = ChangeResult {
        task_id: task.clone(),
        kind: TaskKind::Change,
        outcome: ChangeOutcome::Proposal {
            proposal: Box::new(Proposal {
                id: "prp_2".into(),
                repo: spec.name.clone(),
                base_commit: world.commit.clone(),
                commit: commit.clone(),
                tree,
                reference: format!("refs/warden/proposals/{task}"),
                diff_stat: DiffStat {
                    files_changed: 1,
                    additions: 1,
                    deletions: 1,
                },
                files: vec![],
                summary: "Uppercase alpha".into(),
                hash: hash.clone(),
                validations: vec![],
                sensitive_files: vec![],
            }),
            publication: Publication {
                status: PublicationStatus::AwaitingApproval,
                branch: None,
                pr_url: None,
            },
        },
        baseline: vec![],
        approval: Some(Approval {
            id: "apr_2".into(),
            kind: "publish".into(),
            subject_hash: hash.clone(),
            status: WireStatus::Pending,
            decided_by: None,
            decided_at: None,
        }),
        usage: Usage::default(),
        model: "openai:gpt-test".into(),
        sandbox: Some("linux".into()),
        notices: vec![],
        maintenance: None,
        gate: None,
        review: None,
    };
    world
        .store
        .create_task(
            NewTask {
                id: task.clone(),
                kind: TaskKind::Change,
                owner: "alice".into(),
                prompt: "uppercase alpha too".into(),
                repos: vec![],
                priority: 0,
                follow_up_to: Some(world.task.clone()),
                retry_of: None,
                metadata: json!({"warden": {"publish": true, "same_branch": true}}),
                callback_url: None,
            },
            None,
        )
        .await
        .unwrap();
    world
        .store
        .transition(
            &task,
            TaskStatus::Queued,
            TaskStatus::WaitingApproval,
            Some(serde_json::to_value(&result).unwrap()),
        )
        .await
        .unwrap();
    world
        .store
        .create_approval(NewApproval {
            id: "apr_2".into(),
            task: task.clone(),
            kind: "publish".into(),
            subject_hash: hash.clone(),
        })
        .await
        .unwrap();
    world
        .store
        .decide_approval("apr_2", &hash, Decision::Approve, "root")
        .await
        .unwrap();
    (task, commit, hash)
}

/// Publishes `world.task` (approval `apr_1`) and records its result.
async fn publish_first(world: &World) {
    let redactor = Redactor::default();
    world
        .store
        .decide_approval("apr_1", &world.task_hash().await, Decision::Approve, "root")
        .await
        .unwrap();
    let mut journal = MemoryJournal::default();
    let result = publish_approved(world.context(&redactor), "apr_1", &mut journal)
        .await
        .unwrap();
    // Recorded with the task (its status is the worker's business, not this test's).
    world
        .store
        .transition(
            &world.task,
            TaskStatus::WaitingApproval,
            TaskStatus::Queued,
            Some(serde_json::to_value(&result).unwrap()),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn a_same_branch_follow_up_fast_forwards_the_published_branch_and_keeps_its_pull_request() {
    let world = world().await;
    publish_first(&world).await;
    assert_eq!(world.fake.pulls().len(), 1);
    let (_, commit, _) = follow_up(&world).await;
    let redactor = Redactor::default();
    let mut journal = MemoryJournal::default();
    let result = publish_approved(world.context(&redactor), "apr_2", &mut journal)
        .await
        .unwrap();
    let ChangeOutcome::Proposal { publication, .. } = &result.outcome else {
        panic!("{result:?}")
    };
    let pulls = world.fake.pulls();
    assert_eq!(pulls.len(), 1, "no second pull request: {pulls:#?}");
    assert_eq!(publication.status, PublicationStatus::PrOpened);
    assert_eq!(publication.branch, Some(format!("warden/{}", world.task)));
    assert_eq!(publication.pr_url.as_deref(), pulls[0]["html_url"].as_str());
    assert_eq!(
        world.remote_branches(),
        format!("refs/heads/warden/{} {commit}", world.task),
        "the first task's branch moved to the follow-up's commit; no branch of its own"
    );
    assert!(
        result.notices.iter().any(|n| n.contains("new commit on")),
        "{:?}",
        result.notices
    );
    let intent = journal
        .records
        .iter()
        .find(|r| r.kind == RecordKind::SideEffectIntent)
        .unwrap();
    assert_eq!(intent.payload["push"]["onto"], world.commit.as_str());

    // Called again (a crash after the push): found there, nothing repeated.
    let again = publish_approved(world.context(&redactor), "apr_2", &mut journal)
        .await
        .unwrap();
    assert_eq!(again.outcome, result.outcome);
    assert!(
        again
            .notices
            .iter()
            .any(|n| n.contains("already on the remote")),
        "{:?}",
        again.notices
    );
    let creates = world
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST")
        .count();
    assert_eq!(creates, 1);
}

#[tokio::test]
async fn a_same_branch_follow_up_is_not_pushed_over_a_branch_that_moved() {
    let world = world().await;
    publish_first(&world).await;
    let (_, commit, _) = follow_up(&world).await;
    // Someone pushed to the pull request's branch meanwhile.
    bare(
        &world.remote,
        &[
            "update-ref",
            &format!("refs/heads/warden/{}", world.task),
            &world.base,
        ],
    );
    let redactor = Redactor::default();
    let mut journal = MemoryJournal::default();
    let failed = publish_approved(world.context(&redactor), "apr_2", &mut journal).await;
    match failed {
        Err(ApprovedPublishError::Publish(failure)) => {
            assert!(!failure.pushed);
            assert_eq!(failure.branch, format!("warden/{}", world.task));
            let message = failure.error.to_string();
            assert!(message.contains("not at"), "{message}");
        }
        other => panic!("{other:?}"),
    }
    assert!(!world.remote_branches().contains(&commit));
}
