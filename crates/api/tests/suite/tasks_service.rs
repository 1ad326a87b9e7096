//! [`TaskService`], the front door every interface calls, driven directly on a real store
//! (SQLite in a temporary directory, and Postgres in a schema of its own when
//! `WARDEN_TEST_POSTGRES_URL` is set): each refusal it makes — an empty prompt, a NUL, an unknown
//! repository, `@worktree`, a change over two repositories, a viewer submitting, cancelling a
//! finished task, a message to a task that is not waiting, a wrong approval hash, another
//! owner's task, an idempotency key reused with another request — and, for each, the HTTP route
//! over the same service giving the same refusal (status, code and the service's message word
//! for word): the check lives in one place, and the API only maps it.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_protocol::views::TaskView as Task;
use warden_protocol::{TaskKind, TaskStatus};
use warden_service::tasks::{
    Idempotency, Principal, Role, ServiceError, Submission, TaskListing, TaskService,
};
use warden_store::{ApprovalStatus, ClaimFilter, Decision, NewApproval, NewRepo, Store};

const ROOT: &str = "root-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";
const VAL: &str = "val-token-01234567890-0123456789";

fn principal(name: &str, role: Role) -> Principal {
    Principal {
        name: name.into(),
        role,
    }
}

fn root() -> Principal {
    principal("root", Role::Admin)
}

fn alice() -> Principal {
    principal("alice", Role::Operator)
}

fn bob() -> Principal {
    principal("bob", Role::Operator)
}

fn val() -> Principal {
    principal("val", Role::Viewer)
}

/// The service, and the API over the very same service.
struct Fixture {
    service: TaskService,
    router: Router,
    store: Arc<dyn Store>,
    wake: Arc<Notify>,
}

struct Reply {
    status: StatusCode,
    body: Value,
    replayed: bool,
}

impl Reply {
    /// The reply is `error`, as the API maps it: `status` and `code`, and the service's message
    /// word for word.
    fn is_refusal(&self, error: &ServiceError, status: StatusCode, code: &str) {
        assert_eq!(self.status, status, "{error:?}: {}", self.body);
        assert_eq!(self.body["error"]["code"], code, "{error:?}: {}", self.body);
        assert_eq!(
            self.body["error"]["message"].as_str(),
            Some(error.to_string().as_str()),
            "{error:?}"
        );
    }
}

impl Fixture {
    async fn new(store: Arc<dyn Store>) -> Fixture {
        for name in ["app", "lib"] {
            store
                .register_repo(NewRepo {
                    name: name.into(),
                    source: format!("/nonexistent/{name}"),
                    branch: None,
                    checks: vec![],
                    mounts: vec![],
                    prepare: vec![],
                    created_by: "root".into(),
                })
                .await
                .unwrap();
        }
        let wake = Arc::new(Notify::new());
        let service = TaskService::new(Arc::clone(&store), Arc::clone(&wake));
        let tokens = Tokens::parse(&format!(
            "root:admin:{ROOT},alice:operator:{ALICE},bob:operator:{BOB},val:viewer:{VAL}"
        ))
        .unwrap();
        let router = router(Arc::new(ApiState::new(service.clone(), tokens)));
        Fixture {
            service,
            router,
            store,
            wake,
        }
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        token: &str,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> Reply {
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let body = body.map(Value::to_string).unwrap_or_default();
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::from(body)).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let replayed = response.headers().contains_key("idempotent-replayed");
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
            replayed,
        }
    }

    async fn post(&self, uri: &str, token: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, token, Some(&body), &[]).await
    }

    async fn get(&self, uri: &str, token: &str) -> Reply {
        self.send(Method::GET, uri, token, None, &[]).await
    }

    /// A queued question of `who`, through the service.
    async fn question(&self, who: &Principal, prompt: &str) -> Task {
        let submitted = self
            .service
            .submit(
                who,
                Submission::new(TaskKind::Question, prompt, vec!["app".into()]),
                None,
            )
            .await
            .unwrap();
        assert!(!submitted.replayed);
        submitted.task
    }

    /// Claims `task` and ends its run in `status` with `result`, as a worker would.
    async fn finish(&self, task: &Task, status: TaskStatus, result: Value) {
        let claim = self
            .store
            .claim("w", Duration::from_secs(30), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claim.task.id, task.id);
        self.store
            .finish_run(&claim.run(), "w", status, Some(result))
            .await
            .unwrap();
    }
}

fn result(task: &Task, outcome: Value) -> Value {
    let mut result = json!({"task_id": task.id, "kind": "question",
        "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                  "cost_usd": 0.0, "model_calls": 1, "tool_calls": 0},
        "model": "gpt-test"});
    for (key, value) in outcome.as_object().unwrap() {
        result[key] = value.clone();
    }
    result
}

fn answered(task: &Task) -> Value {
    result(
        task,
        json!({"outcome": "answer",
               "answer": {"summary": "it doubles", "claims": [], "not_established": []}}),
    )
}

fn clarification(task: &Task) -> Value {
    result(
        task,
        json!({"outcome": "clarification",
               "clarification": {"question": "Which branch do you mean?"}}),
    )
}

/// A submission the service refuses, the same request as the API's JSON, and what it is.
struct RefusedSubmission {
    who: (Principal, &'static str),
    submission: Submission,
    body: Value,
    is: fn(&ServiceError) -> bool,
    status: StatusCode,
    code: &'static str,
}

fn question(prompt: &str, repos: &[&str]) -> Submission {
    Submission::new(
        TaskKind::Question,
        prompt,
        repos.iter().map(|r| r.to_string()).collect(),
    )
}

async fn submissions_are_refused_alike(f: &Fixture) {
    let worktree = format!("app@{}", warden_repo::WORK_TREE_REV);
    let cases = [
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: question("   ", &["app"]),
            body: json!({"kind": "question", "repo": "app", "prompt": "   "}),
            is: |e| {
                matches!(e, ServiceError::Invalid(m)
                    if m == "the prompt is empty: ask a question about the repositories")
            },
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: question("what\0now", &["app"]),
            body: json!({"kind": "question", "repo": "app", "prompt": "what\0now"}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.contains("NUL")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission {
                metadata: Some(json!({"note": ["ok", "not\0ok"]})),
                ..question("p", &["app"])
            },
            body: json!({"kind": "question", "repo": "app", "prompt": "p",
                         "metadata": {"note": ["ok", "not\0ok"]}}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.starts_with("metadata.note[1]")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: question("p", &["nope"]),
            body: json!({"kind": "question", "repo": "nope", "prompt": "p"}),
            is: |e| matches!(e, ServiceError::UnknownRepository { name } if name == "nope"),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "unknown_repository",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: question("p", &[worktree.as_str()]),
            body: json!({"kind": "question", "repos": [worktree], "prompt": "p"}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.contains("in-process only")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission::new(TaskKind::Change, "p", vec!["app".into(), "lib".into()]),
            body: json!({"kind": "change", "repos": ["app", "lib"], "prompt": "p"}),
            is: |e| {
                matches!(e, ServiceError::Invalid(m)
                    if m == "a change task works on exactly one repository")
            },
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission {
                maintain: Some(warden_service::tasks::MaintainOptions {
                    select: vec![],
                    mode: Some("turbo".into()),
                    informational: false,
                }),
                ..Submission::new(TaskKind::Maintain, "p", vec!["app".into()])
            },
            body: json!({"kind": "maintain", "repo": "app", "prompt": "p", "mode": "turbo"}),
            is: |e| {
                matches!(e, ServiceError::Invalid(m)
                    if m.starts_with("unknown maintenance mode \"turbo\""))
            },
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission {
                maintain: Some(warden_service::tasks::MaintainOptions {
                    select: vec!["vulnerable".into(), "serde".into()],
                    mode: None,
                    informational: false,
                }),
                ..Submission::new(TaskKind::Maintain, "p", vec!["app".into()])
            },
            body: json!({"kind": "maintain", "repo": "app", "prompt": "p",
                         "select": ["vulnerable", "serde"]}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.contains("not a mix")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission {
                checks: Some(vec!["cargo test".into()]),
                ..question("p", &["app"])
            },
            body: json!({"kind": "question", "repo": "app", "prompt": "p",
                         "checks": ["cargo test"]}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.contains("for change and maintain tasks")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (alice(), ALICE),
            submission: Submission {
                callback_url: Some("https://example.com/hook".into()),
                ..question("p", &["app"])
            },
            body: json!({"kind": "question", "repo": "app", "prompt": "p",
                         "callback": {"url": "https://example.com/hook"}}),
            is: |e| matches!(e, ServiceError::Invalid(m) if m.contains("callback")),
            status: StatusCode::UNPROCESSABLE_ENTITY,
            code: "invalid_request",
        },
        RefusedSubmission {
            who: (val(), VAL),
            submission: question("p", &["app"]),
            body: json!({"kind": "question", "repo": "app", "prompt": "p"}),
            is: |e| matches!(e, ServiceError::Forbidden(_)),
            status: StatusCode::FORBIDDEN,
            code: "forbidden",
        },
    ];
    for case in cases {
        let (who, token) = &case.who;
        let error = f
            .service
            .submit(who, case.submission.clone(), None)
            .await
            .expect_err("refused");
        assert!((case.is)(&error), "{:?}: {error:?}", case.submission);
        f.post("/v1/tasks", token, case.body.clone())
            .await
            .is_refusal(&error, case.status, case.code);
    }
    // Nothing was queued by any of them.
    let listed = f
        .service
        .list(
            &root(),
            TaskListing {
                status: None,
                before: None,
                limit: 50,
            },
        )
        .await
        .unwrap();
    assert!(listed.tasks.is_empty(), "{:?}", listed.tasks);
}

async fn another_owners_task_does_not_exist_for_them(f: &Fixture) {
    let task = f.question(&alice(), "where is f?").await;
    let id = task.id.to_string();
    // Alice and admins see it.
    assert_eq!(f.service.task(&alice(), &id).await.unwrap().id, task.id);
    assert_eq!(f.service.task(&root(), &id).await.unwrap().id, task.id);
    // For Bob it is not there, exactly like an unknown id or one that cannot be one.
    for asked in [id.as_str(), "tsk_01M8VBQV37BCXJMMGC5Y911WEV", "not-an-id"] {
        let error = f.service.task(&bob(), asked).await.unwrap_err();
        assert!(matches!(error, ServiceError::NotFound(_)), "{error:?}");
        f.get(&format!("/v1/tasks/{asked}"), BOB).await.is_refusal(
            &error,
            StatusCode::NOT_FOUND,
            "not_found",
        );
    }
    // Acting on it is not found before anything else is looked at.
    let error = f.service.cancel(&bob(), &id).await.unwrap_err();
    assert!(matches!(error, ServiceError::NotFound(_)), "{error:?}");
    f.post(&format!("/v1/tasks/{id}/cancel"), BOB, json!({}))
        .await
        .is_refusal(&error, StatusCode::NOT_FOUND, "not_found");
    let error = f.service.proposal_diff(&bob(), &id).await.unwrap_err();
    assert!(matches!(error, ServiceError::NotFound(_)), "{error:?}");
    f.get(&format!("/v1/tasks/{id}/diff"), BOB)
        .await
        .is_refusal(&error, StatusCode::NOT_FOUND, "not_found");
    // Nor is it among Bob's tasks; it is among Alice's and the admin's.
    let listing = TaskListing {
        status: None,
        before: None,
        limit: 10,
    };
    for (who, seen) in [(bob(), false), (alice(), true), (root(), true)] {
        let list = f.service.list(&who, listing.clone()).await.unwrap();
        assert_eq!(list.tasks.iter().any(|t| t.id == task.id), seen, "{who:?}");
    }
    // A follow-up cannot name it either.
    let error = f
        .service
        .submit(
            &bob(),
            Submission {
                follow_up_to: Some(id.clone()),
                ..question("and then?", &["app"])
            },
            None,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ServiceError::Invalid(m) if m.starts_with("follow_up_to")),
        "{error:?}"
    );
    f.post(
        "/v1/tasks",
        BOB,
        json!({"kind": "question", "repo": "app", "prompt": "and then?", "follow_up_to": id}),
    )
    .await
    .is_refusal(&error, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    f.service.cancel(&alice(), &id).await.unwrap();
}

async fn status_rules_refuse_alike(f: &Fixture) {
    // A finished task cannot be cancelled; a queued one cannot be retried.
    let task = f.question(&alice(), "how does f work?").await;
    let id = task.id.to_string();
    let error = f.service.retry(&alice(), &id).await.unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::WrongStatus {
                status: TaskStatus::Queued,
                ..
            }
        ),
        "{error:?}"
    );
    f.post(&format!("/v1/tasks/{id}/retry"), ALICE, json!({}))
        .await
        .is_refusal(&error, StatusCode::CONFLICT, "conflict");
    // A viewer may do neither, whatever the status.
    let error = f.service.cancel(&val(), &id).await.unwrap_err();
    assert!(matches!(error, ServiceError::Forbidden(_)), "{error:?}");
    f.post(&format!("/v1/tasks/{id}/cancel"), VAL, json!({}))
        .await
        .is_refusal(&error, StatusCode::FORBIDDEN, "forbidden");

    f.finish(&task, TaskStatus::Completed, answered(&task))
        .await;
    let error = f.service.cancel(&alice(), &id).await.unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::WrongStatus {
                status: TaskStatus::Completed,
                ..
            }
        ),
        "{error:?}"
    );
    f.post(&format!("/v1/tasks/{id}/cancel"), ALICE, json!({}))
        .await
        .is_refusal(&error, StatusCode::CONFLICT, "conflict");
    let finished = f.service.task(&alice(), &id).await.unwrap();
    assert_eq!(finished.status, TaskStatus::Completed);

    // Only a waiting task takes an answer (a queued one takes a message for its agent).
    let queued = f.question(&alice(), "and g?").await;
    let queued_id = queued.id.to_string();
    let error = f
        .service
        .answer(&alice(), &queued_id, "main")
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::WrongStatus {
                status: TaskStatus::Queued,
                ..
            }
        ),
        "{error:?}"
    );
    // The finished question takes a follow-up but no answer; an empty text neither.
    let error = f.service.answer(&alice(), &id, "main").await.unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::WrongStatus {
                status: TaskStatus::Completed,
                ..
            }
        ),
        "{error:?}"
    );
    let error = f
        .service
        .post_message(&alice(), &id, "  ")
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ServiceError::Invalid(m) if m == "the message is empty: say what to tell the task"),
        "{error:?}"
    );
    f.post(
        &format!("/v1/tasks/{id}/messages"),
        ALICE,
        json!({"text": "  "}),
    )
    .await
    .is_refusal(&error, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    let follow_up = f
        .service
        .follow_up(&alice(), &id, "and why?")
        .await
        .unwrap();
    assert_eq!(follow_up.follow_up_to.as_ref(), Some(&task.id));
    assert_eq!(follow_up.repos, finished.repos);
    assert_eq!(follow_up.status, TaskStatus::Queued);

    // A task waiting for input takes the answer and is queued again.
    f.service
        .cancel(&alice(), &follow_up.id.to_string())
        .await
        .unwrap();
    f.finish(&queued, TaskStatus::WaitingInput, clarification(&queued))
        .await;
    // Take the wake-up the submissions left, so the answer's own is seen.
    let _ = tokio::time::timeout(Duration::from_millis(50), f.wake.notified()).await;
    let requeued = f
        .service
        .answer(&alice(), &queued_id, " main ")
        .await
        .unwrap();
    assert_eq!(requeued.status, TaskStatus::Queued);
    assert!(
        tokio::time::timeout(Duration::from_secs(1), f.wake.notified())
            .await
            .is_ok(),
        "the workers were not woken"
    );
    f.service.cancel(&alice(), &queued_id).await.unwrap();
}

async fn approvals_refuse_alike(f: &Fixture) {
    let hash = format!("sha256:{}", "a".repeat(64));
    let other = format!("sha256:{}", "b".repeat(64));
    let task = f
        .service
        .submit(
            &alice(),
            Submission::new(TaskKind::Change, "make it so", vec!["app".into()]),
            None,
        )
        .await
        .unwrap()
        .task;
    let approval = f
        .store
        .create_approval(NewApproval {
            id: "apr_service_1".into(),
            task: task.id.clone(),
            kind: "publish".into(),
            subject_hash: hash.clone(),
        })
        .await
        .unwrap();
    let uri = format!("/v1/approvals/{}", approval.id);
    // Its owner sees it but may not decide; Bob does not see it.
    assert_eq!(
        f.service.approval(&alice(), &approval.id).await.unwrap().id,
        approval.id
    );
    let error = f
        .service
        .decide(&alice(), &approval.id, Decision::Approve, &hash)
        .await
        .unwrap_err();
    assert!(matches!(error, ServiceError::Forbidden(_)), "{error:?}");
    f.post(&uri, ALICE, json!({"decision": "approve", "hash": hash}))
        .await
        .is_refusal(&error, StatusCode::FORBIDDEN, "forbidden");
    let error = f.service.approval(&bob(), &approval.id).await.unwrap_err();
    assert!(matches!(error, ServiceError::NotFound(_)), "{error:?}");
    f.get(&uri, BOB)
        .await
        .is_refusal(&error, StatusCode::NOT_FOUND, "not_found");
    // A malformed hash, then another well-formed hash: nothing is decided.
    let error = f
        .service
        .decide(&root(), &approval.id, Decision::Approve, "sha256:abc")
        .await
        .unwrap_err();
    assert!(matches!(error, ServiceError::Invalid(_)), "{error:?}");
    f.post(
        &uri,
        ROOT,
        json!({"decision": "approve", "hash": "sha256:abc"}),
    )
    .await
    .is_refusal(&error, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    let error = f
        .service
        .decide(&root(), &approval.id, Decision::Approve, &other)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ServiceError::HashMismatch { approval: a, hash: h }
            if a == &approval.id && h == &other),
        "{error:?}"
    );
    f.post(&uri, ROOT, json!({"decision": "approve", "hash": other}))
        .await
        .is_refusal(&error, StatusCode::CONFLICT, "hash_mismatch");
    assert_eq!(
        f.service
            .approval(&root(), &approval.id)
            .await
            .unwrap()
            .status,
        ApprovalStatus::Pending
    );
    // The right hash decides it, once.
    let decided = f
        .service
        .decide(&root(), &approval.id, Decision::Reject, &hash)
        .await
        .unwrap();
    assert_eq!(decided.status, ApprovalStatus::Rejected);
    assert_eq!(decided.decided_by.as_deref(), Some("root"));
    let error = f
        .service
        .decide(&root(), &approval.id, Decision::Approve, &hash)
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            ServiceError::AlreadyDecided {
                status: ApprovalStatus::Rejected,
                ..
            }
        ),
        "{error:?}"
    );
    f.post(&uri, ROOT, json!({"decision": "approve", "hash": hash}))
        .await
        .is_refusal(&error, StatusCode::CONFLICT, "already_decided");
    f.service
        .cancel(&alice(), &task.id.to_string())
        .await
        .unwrap();
}

async fn idempotency_keys_hold_across_interfaces(f: &Fixture) {
    // The service replays a key with the same request and refuses it with another.
    let submission = question("once", &["app"]);
    let first = f
        .service
        .submit(
            &alice(),
            submission.clone(),
            Some(Idempotency::new("svc-1", b"request one")),
        )
        .await
        .unwrap();
    assert!(!first.replayed);
    let again = f
        .service
        .submit(
            &alice(),
            submission.clone(),
            Some(Idempotency::new("svc-1", b"request one")),
        )
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.task.id, first.task.id);
    let error = f
        .service
        .submit(
            &alice(),
            question("twice", &["app"]),
            Some(Idempotency::new("svc-1", b"request two")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ServiceError::IdempotencyConflict { key } if key == "svc-1"),
        "{error:?}"
    );
    // Keys are per owner: Bob's "svc-1" is his own.
    let bobs = f
        .service
        .submit(
            &bob(),
            submission.clone(),
            Some(Idempotency::new("svc-1", b"request one")),
        )
        .await
        .unwrap();
    assert!(!bobs.replayed);
    assert_ne!(bobs.task.id, first.task.id);

    // The API names a request by its JSON body: a key the service took for that body is the
    // same task over HTTP, and the same refusal with another body.
    let body = json!({"kind": "question", "repo": "app", "prompt": "over http"});
    let shared = f
        .service
        .submit(
            &alice(),
            question("over http", &["app"]),
            Some(Idempotency::new("shared-1", body.to_string().as_bytes())),
        )
        .await
        .unwrap();
    let reply = f
        .send(
            Method::POST,
            "/v1/tasks",
            ALICE,
            Some(&body),
            &[("idempotency-key", "shared-1")],
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert!(reply.replayed);
    assert_eq!(reply.body["id"], shared.task.id.to_string());
    let other = json!({"kind": "question", "repo": "app", "prompt": "something else"});
    let error = f
        .service
        .submit(
            &alice(),
            question("something else", &["app"]),
            Some(Idempotency::new("shared-1", other.to_string().as_bytes())),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::IdempotencyConflict { .. }),
        "{error:?}"
    );
    f.send(
        Method::POST,
        "/v1/tasks",
        ALICE,
        Some(&other),
        &[("idempotency-key", "shared-1")],
    )
    .await
    .is_refusal(
        &error,
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency_conflict",
    );
    // A key that is no key: 400 from both.
    let error = f
        .service
        .submit(
            &alice(),
            question("p", &["app"]),
            Some(Idempotency::new("", b"{}")),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(error, ServiceError::InvalidIdempotencyKey),
        "{error:?}"
    );
    f.send(
        Method::POST,
        "/v1/tasks",
        ALICE,
        Some(&json!({"kind": "question", "repo": "app", "prompt": "p"})),
        &[("idempotency-key", "")],
    )
    .await
    .is_refusal(&error, StatusCode::BAD_REQUEST, "bad_request");
    for task in [first.task, bobs.task, shared.task] {
        f.service
            .cancel(&root(), &task.id.to_string())
            .await
            .unwrap();
    }
}

async fn every_rule(store: Arc<dyn Store>) {
    let f = Fixture::new(store).await;
    submissions_are_refused_alike(&f).await;
    another_owners_task_does_not_exist_for_them(&f).await;
    status_rules_refuse_alike(&f).await;
    approvals_refuse_alike(&f).await;
    idempotency_keys_hold_across_interfaces(&f).await;
}

#[tokio::test]
async fn the_service_and_the_api_refuse_alike_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        dir.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    every_rule(store).await;
}

#[tokio::test]
async fn the_service_and_the_api_refuse_alike_on_postgres() {
    let Some(admin_url) = warden_test_support::postgres::url() else {
        return;
    };
    let mut random = [0u8; 5];
    getrandom::fill(&mut random).unwrap();
    let schema = format!(
        "tasks_service_{}_{}",
        std::process::id(),
        hex::encode(random)
    );
    let (client, connection) = tokio_postgres::connect(&admin_url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .await
        .unwrap();
    let separator = if admin_url.contains('?') { '&' } else { '?' };
    let url = format!("{admin_url}{separator}options=-csearch_path%3D{schema}");
    let store = warden_store::open(&url).await.unwrap();
    assert_eq!(store.backend(), "postgres");
    every_rule(store).await;
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    drop(client);
    let _ = connection.await;
}
