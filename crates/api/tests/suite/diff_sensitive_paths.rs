//! `GET /v1/tasks/{id}/diff` hides the values of sensitive files whose names git C-quotes
//! (non-ASCII under the default `core.quotePath`, a quote, a tab) and of a deleted `.env`,
//! through the real route over a real mirror, while other files' lines stay as they are.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_engine::redact::Redactor;
use warden_protocol::{
    ChangeOutcome, ChangeResult, DiffStat, Proposal, Publication, PublicationStatus, TaskId,
    TaskKind, TaskStatus, Usage,
};
use warden_repo::{RepoSpec, RepoStore};
use warden_service::tasks::TaskService;
use warden_store::{ClaimFilter, NewRepo, NewTask, TaskRepo};
use warden_test_support::git_fixture::TempRepo;

const ALICE: &str = "alice-token-0123456789-0123456789";

/// Sensitive files whose diff headers git quotes, each holding its own password.
const QUOTED: &[(&str, &str)] = &[
    ("dé/.env", "pw-accented-dir"),
    (".env.é", "pw-accented-suffix"),
    ("q\"uote/.env", "pw-quote"),
    ("tab\there/.env", "pw-tab"),
    ("back\\slash/id_rsa", "pw-key"),
];

#[tokio::test]
async fn quoted_and_deleted_sensitive_files_keep_their_values_hidden() {
    let home = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        home.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let repo = TempRepo::new();
    repo.write(".env", "OLD_PASSWORD=pw-deleted\n")
        .write("README.md", "# app\n");
    let base = repo.commit("initial");
    repo.git(&["rm", "-q", ".env"]);
    for (path, password) in QUOTED {
        repo.write(path, &format!("DB_PASSWORD={password}\n"));
    }
    repo.write("notes-é.txt", "PLAIN=visible-value\n");
    let commit = repo.commit("the change");

    let repos = RepoStore::open(home.path()).unwrap();
    let mut spec =
        RepoSpec::parse(repo.path().to_str().unwrap(), std::path::Path::new("/")).unwrap();
    spec.name = "app".into();
    spec.rev = Some(commit.clone());
    let mirror = repos.pin(&spec).unwrap().mirror;
    store
        .register_repo(NewRepo {
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
    let tokens = Tokens::parse(&format!("alice:operator:{ALICE}")).unwrap();
    let tasks = TaskService::new(Arc::clone(&store), Arc::new(Notify::new()))
        .with_repos(repos.clone(), Redactor::new(Vec::<String>::new()));
    let state = ApiState::new(tasks, tokens);
    let app = router(Arc::new(state));

    // A completed change task whose proposal is `commit`.
    let id: TaskId = warden_store::new_task_id().unwrap();
    store
        .create_task(
            NewTask {
                id: id.clone(),
                kind: TaskKind::Change,
                owner: "alice".into(),
                prompt: "change".into(),
                repos: vec![TaskRepo {
                    name: "app".into(),
                    rev: None,
                    commit: Some(base.clone()),
                    source: None,
                }],
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
    let reference = format!("refs/warden/proposals/{id}");
    let git_dir = format!("--git-dir={}", mirror.display());
    repos
        .git()
        .run(&mirror, &[&git_dir, "update-ref", &reference, &commit])
        .unwrap();
    let result = ChangeResult {
        task_id: id.clone(),
        kind: TaskKind::Change,
        outcome: ChangeOutcome::Proposal {
            proposal: Box::new(Proposal {
                id: "prp_x".into(),
                repo: "app".into(),
                base_commit: base,
                commit,
                tree: "0".repeat(40),
                reference,
                diff_stat: DiffStat::default(),
                files: vec![],
                summary: "change".into(),
                hash: format!("sha256:{}", "a".repeat(64)),
                validations: vec![],
                sensitive_files: vec![],
            }),
            publication: Publication {
                status: PublicationStatus::NotRequested,
                branch: None,
                pr_url: None,
            },
        },
        baseline: vec![],
        approval: None,
        usage: Usage::default(),
        model: "m".into(),
        sandbox: None,
        notices: vec![],
        maintenance: None,
        gate: None,
        review: None,
    };
    let claim = store
        .claim("w", Duration::from_secs(60), &ClaimFilter::default())
        .await
        .unwrap()
        .unwrap();
    store
        .finish_run(
            &claim.run(),
            "w",
            TaskStatus::Completed,
            Some(serde_json::to_value(&result).unwrap()),
        )
        .await
        .unwrap();

    let request = Request::get(format!("/v1/tasks/{id}/diff"))
        .header("authorization", format!("Bearer {ALICE}"))
        .body(Body::empty())
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: Value = serde_json::from_slice(&bytes).unwrap();
    let diff = body["diff"].as_str().unwrap();

    // git quoted the names (the case this guards), and no value shows.
    assert!(
        diff.contains(r#"+++ "b/d\303\251/.env""#),
        "git no longer quotes non-ASCII names here:\n{diff}"
    );
    assert!(diff.contains(r#""b/q\"uote/.env""#), "{diff}");
    for (path, password) in QUOTED {
        assert!(
            !diff.contains(password),
            "{path}: {password} shown:\n{diff}"
        );
    }
    assert!(!diff.contains("pw-deleted"), "{diff}");
    assert!(diff.contains("-OLD_PASSWORD=[redacted]\n"), "{diff}");
    assert!(diff.contains("+DB_PASSWORD=[redacted]\n"), "{diff}");
    // A quoted name that is not sensitive keeps its lines.
    assert!(diff.contains("+PLAIN=visible-value\n"), "{diff}");
}
