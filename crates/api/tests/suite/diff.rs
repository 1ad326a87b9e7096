//! `GET /v1/tasks/{id}/diff` through `Router::oneshot`: the proposal's diff from Warden's
//! mirror, registered secrets and credential-looking strings redacted, visibility like every
//! task route, 404 without a proposal (not a change, still running, ref moved), and the route
//! in `/openapi.json`; plus the API side of change tasks (`checks`, `publish`, one repository,
//! `maintain` options checked).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_engine::redact::Redactor;
use warden_protocol::{
    ChangeOutcome, ChangeResult, ChangedFile, DiffStat, Proposal, Publication, PublicationStatus,
    TaskId, TaskKind, TaskStatus, Usage,
};
use warden_repo::{RepoSpec, RepoStore};
use warden_service::tasks::TaskService;
use warden_store::{ClaimFilter, NewRepo, NewTask, Store, TaskRepo};
use warden_test_support::git_fixture::TempRepo;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";

/// A registered secret (as the model API key would be).
const REGISTERED: &str = "sk-registered-model-key-0123456789";
const GITHUB_TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
const AWS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";

struct Fixture {
    router: Router,
    store: Arc<dyn Store>,
    repos: RepoStore,
    mirror: std::path::PathBuf,
    base: String,
    commit: String,
    _home: tempfile::TempDir,
    _repo: TempRepo,
}

async fn fixture() -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        home.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn f() {}\n")
        .write("README.md", "# app\n");
    let base = repo.commit("initial");
    repo.write("src/lib.rs", "pub fn f() {}\npub fn g() -> u32 { 7 }\n")
        .write(
            ".env",
            &format!("MODEL_KEY={REGISTERED}\nAWS={AWS_KEY_ID}\n"),
        )
        .write(
            "deploy.yml",
            &format!(
                "token: {GITHUB_TOKEN}\nurl: https://bot:hunter22@example.com/x\nmodel: \
                 {REGISTERED}\naws: {AWS_KEY_ID}\n"
            ),
        );
    let commit = repo.commit("the change");
    // Publication needs a remote to push to; without one `publish` is refused at submission.
    repo.git(&["remote", "add", "origin", "https://example.invalid/app.git"]);
    let repos = RepoStore::open(home.path()).unwrap();
    let mut spec =
        RepoSpec::parse(repo.path().to_str().unwrap(), std::path::Path::new("/")).unwrap();
    spec.name = "app".into();
    spec.rev = Some(commit.clone());
    let pinned = repos.pin(&spec).unwrap();
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
    let tokens = Tokens::parse(&format!(
        "root:admin:{ADMIN},alice:operator:{ALICE},bob:operator:{BOB}"
    ))
    .unwrap();
    let tasks = TaskService::new(Arc::clone(&store), Arc::new(Notify::new()))
        .with_repos(repos.clone(), Redactor::new([REGISTERED.to_string()]));
    let state = ApiState::new(tasks, tokens);
    Fixture {
        router: router(Arc::new(state)),
        store,
        repos,
        mirror: pinned.mirror,
        base,
        commit,
        _home: home,
        _repo: repo,
    }
}

impl Fixture {
    async fn get(&self, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
        self.send(Method::GET, uri, token, None).await
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    /// A task of `kind` owned by alice, left queued.
    async fn task(&self, kind: TaskKind) -> TaskId {
        let id: TaskId = warden_store::new_task_id().unwrap();
        self.store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind,
                    owner: "alice".into(),
                    prompt: "add g".into(),
                    repos: vec![TaskRepo {
                        name: "app".into(),
                        rev: None,
                        commit: Some(self.base.clone()),
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
        id
    }

    /// Runs the (only queued) task to `completed` with `result`.
    async fn finish(&self, result: Value) {
        let claim = self
            .store
            .claim("w", Duration::from_secs(60), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        self.store
            .finish_run(&claim.run(), "w", TaskStatus::Completed, Some(result))
            .await
            .unwrap();
    }

    /// A completed change task whose proposal is `self.commit` under its ref in the mirror.
    async fn proposed(&self) -> TaskId {
        let id = self.task(TaskKind::Change).await;
        let reference = format!("refs/warden/proposals/{id}");
        let git_dir = format!("--git-dir={}", self.mirror.display());
        self.repos
            .git()
            .run(
                &self.mirror,
                &[&git_dir, "update-ref", &reference, &self.commit],
            )
            .unwrap();
        let result = ChangeResult {
            task_id: id.clone(),
            kind: TaskKind::Change,
            outcome: ChangeOutcome::Proposal {
                proposal: Box::new(Proposal {
                    id: "prp_x".into(),
                    repo: "app".into(),
                    base_commit: self.base.clone(),
                    commit: self.commit.clone(),
                    tree: "0".repeat(40),
                    reference,
                    diff_stat: DiffStat::default(),
                    files: vec![ChangedFile {
                        path: ".env".into(),
                        status: "added".into(),
                        additions: Some(2),
                        deletions: Some(0),
                    }],
                    summary: "add g".into(),
                    hash: format!("sha256:{}", "a".repeat(64)),
                    validations: vec![],
                    sensitive_files: vec![".env".into()],
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
        self.finish(serde_json::to_value(&result).unwrap()).await;
        id
    }
}

#[tokio::test]
async fn the_diff_of_a_proposal_comes_from_the_mirror_with_secrets_redacted() {
    let api = fixture().await;
    let id = api.proposed().await;
    let (status, body) = api.get(&format!("/v1/tasks/{id}/diff"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["task_id"], id.as_str());
    assert_eq!(body["repo"], "app");
    assert_eq!(body["base_commit"], api.base.as_str());
    assert_eq!(body["commit"], api.commit.as_str());
    assert_eq!(body["truncated"], false);
    assert_eq!(body["sensitive_files"], json!([".env"]));
    let diff = body["diff"].as_str().unwrap();
    assert!(
        diff.contains("diff --git a/src/lib.rs b/src/lib.rs"),
        "{diff}"
    );
    assert!(diff.contains("+pub fn g() -> u32 { 7 }"), "{diff}");
    assert!(diff.contains("+MODEL_KEY=[redacted]"), "{diff}");
    assert!(diff.contains("+AWS=[redacted]"), "{diff}");
    // Outside sensitive files: registered secrets and credential-looking strings.
    assert!(diff.contains("+token: [redacted]\n"), "{diff}");
    assert!(diff.contains("+model: [redacted]\n"), "{diff}");
    assert!(diff.contains("+aws: [redacted]\n"), "{diff}");
    assert!(diff.contains("+url: https://***@example.com/x\n"), "{diff}");
    for secret in [REGISTERED, GITHUB_TOKEN, AWS_KEY_ID, "hunter22"] {
        assert!(!diff.contains(secret), "{secret} leaked:\n{diff}");
    }
    // An admin sees it too; another operator does not know the task exists.
    let (status, _) = api.get(&format!("/v1/tasks/{id}/diff"), Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = api.get(&format!("/v1/tasks/{id}/diff"), Some(BOB)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("not_found"))
    );
    let (status, _) = api.get(&format!("/v1/tasks/{id}/diff"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn no_proposal_no_diff() {
    let api = fixture().await;
    // Unknown and malformed ids.
    for uri in [
        "/v1/tasks/tsk_01JAAAAAAAAAAAAAAAAAAAAAAA/diff".to_string(),
        "/v1/tasks/nonsense/diff".to_string(),
    ] {
        let (status, body) = api.get(&uri, Some(ALICE)).await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{uri}: {body}");
    }
    // A change that has not finished yet.
    let queued = api.task(TaskKind::Change).await;
    let (status, body) = api
        .get(&format!("/v1/tasks/{queued}/diff"), Some(ALICE))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no proposal (status queued)"),
        "{body}"
    );
    // A change that ended without a proposal.
    api.finish(
        json!({"task_id": queued, "kind": "change", "outcome": "no_change",
                      "summary": "nothing", "usage": {}, "model": "m"}),
    )
    .await;
    let (status, _) = api
        .get(&format!("/v1/tasks/{queued}/diff"), Some(ALICE))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // A question.
    let question = api.task(TaskKind::Question).await;
    let (status, body) = api
        .get(&format!("/v1/tasks/{question}/diff"), Some(ALICE))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("question"),
        "{body}"
    );
}

#[tokio::test]
async fn a_proposal_ref_that_moved_is_not_served() {
    let api = fixture().await;
    let id = api.proposed().await;
    let git_dir = format!("--git-dir={}", api.mirror.display());
    api.repos
        .git()
        .run(
            &api.mirror,
            &[
                &git_dir,
                "update-ref",
                &format!("refs/warden/proposals/{id}"),
                &api.base,
            ],
        )
        .unwrap();
    let (status, body) = api.get(&format!("/v1/tasks/{id}/diff"), Some(ALICE)).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no longer"),
        "{body}"
    );
}

#[tokio::test]
async fn the_diff_route_is_documented() {
    let document: Value =
        serde_json::from_str(&warden_api::routes::openapi().to_json().unwrap()).unwrap();
    let operation = &document["paths"]["/v1/tasks/{id}/diff"]["get"];
    assert!(operation.is_object(), "{document}");
    for status in ["200", "401", "404"] {
        assert!(operation["responses"][status].is_object(), "{status}");
    }
    assert!(document["components"]["schemas"]["DiffView"].is_object());
}

#[tokio::test]
async fn change_tasks_are_accepted_with_their_options() {
    let api = fixture().await;
    let submit = |body: Value| api.send(Method::POST, "/v1/tasks", Some(ALICE), Some(body));
    let (status, task) = submit(json!({"kind": "change", "repo": "app", "prompt": "add g",
                                       "checks": ["cargo test"], "publish": true}))
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{task}");
    assert_eq!(task["kind"], "change");
    assert_eq!(
        task["metadata"]["warden"],
        json!({"checks": ["cargo test"], "publish": true})
    );
    let (status, task) = submit(json!({"kind": "change", "repo": "app", "prompt": "add g",
                                       "metadata": {"ticket": 7}}))
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{task}");
    assert_eq!(task["metadata"], json!({"ticket": 7}));
    for (body, needle) in [
        (
            json!({"kind": "question", "repo": "app", "prompt": "q", "checks": ["x"]}),
            "change and maintain tasks",
        ),
        (
            json!({"kind": "change", "repo": "app", "prompt": "p", "checks": [" "]}),
            "non-empty",
        ),
        (
            json!({"kind": "change", "repo": "app", "prompt": "p", "metadata": {"warden": {}}}),
            "reserved",
        ),
        (
            json!({"kind": "change", "repos": [], "prompt": "p"}),
            "repository",
        ),
        (
            json!({"kind": "change", "repo": "app", "prompt": "p", "publish": "yes"}),
            "boolean",
        ),
    ] {
        let (status, reply) = submit(body.clone()).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}: {reply}");
        assert!(
            reply["error"]["message"].as_str().unwrap().contains(needle),
            "{body}: {reply}"
        );
    }
    let (status, reply) = submit(
        json!({"kind": "maintain", "repo": "app", "prompt": "p", "select": ["not a crate"]}),
    )
    .await;
    assert_eq!(
        (status, reply["error"]["code"].as_str()),
        (StatusCode::UNPROCESSABLE_ENTITY, Some("invalid_request"))
    );
}
