//! `GET /v1/approvals`, `GET /v1/approvals/{id}` and `POST /v1/approvals/{id}` through
//! `Router::oneshot` on a real SQLite store: who sees which approvals, who decides, the hash
//! binding (422 malformed, 409 `hash_mismatch`), single use (409 `already_decided`), a decided
//! publish approval queueing its waiting task again (and workers' recovery of a decision whose
//! task was not queued), approvals of ended tasks refused (409 `conflict`) and a cancel
//! rejecting the pending ones; then `publish_approved`, `approved_publication` and
//! `rejected_publication` against a bare remote and the GitHub fake.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_service::publication::requeue_decided_tasks;
use warden_service::tasks::TaskService;
use warden_store::{Decision, NewApproval, NewTask, Store, TaskRepo};

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";
const VIEWER: &str = "viewer-token-01234567-0123456789";

struct Api {
    router: Router,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

fn hash(byte: char) -> String {
    format!("sha256:{}", byte.to_string().repeat(64))
}

impl Api {
    async fn new() -> Api {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        let tokens = Tokens::parse(&format!(
            "root:admin:{ADMIN},alice:operator:{ALICE},bob:operator:{BOB},alice-ro:viewer:{VIEWER}"
        ))
        .unwrap();
        let router = router(Arc::new(ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )));
        Api {
            router,
            store,
            _dir: dir,
        }
    }

    /// A change task owned by `owner` with a pending approval `apr_<n>` of `kind`.
    async fn task_with_approval(&self, owner: &str, n: u32, kind: &str, subject: &str) -> TaskId {
        let id: TaskId = format!("tsk_01M8VBQV37BCXJMMGC5Y911W{n:02}")
            .parse()
            .unwrap();
        self.store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind: TaskKind::Change,
                    owner: owner.to_string(),
                    prompt: "make it so".into(),
                    repos: vec![TaskRepo {
                        name: "app".into(),
                        rev: None,
                        commit: None,
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
        self.store
            .create_approval(NewApproval {
                id: format!("apr_{n}"),
                task: id.clone(),
                kind: kind.into(),
                subject_hash: subject.to_string(),
            })
            .await
            .unwrap();
        id
    }

    /// Parks the task in `waiting_approval` with a change result whose proposal waits for
    /// approval `apr_<n>` (what a worker run leaves behind).
    async fn waiting(&self, task: &TaskId, n: u32, subject: &str) {
        let result = json!({
            "task_id": task.as_str(), "kind": "change", "outcome": "proposal",
            "proposal": {"id": "prp_1", "repo": "app", "base_commit": "a".repeat(40),
                "commit": "b".repeat(40), "tree": "c".repeat(40),
                "ref": format!("refs/warden/proposals/{task}"),
                "diff_stat": {"files_changed": 1, "additions": 1, "deletions": 1},
                "files": [], "summary": "s", "hash": subject, "validations": []},
            "publication": {"status": "awaiting_approval", "branch": format!("warden/{task}")},
            "approval": {"id": format!("apr_{n}"), "kind": "publish", "subject_hash": subject,
                "status": "pending"},
            "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                "cost_usd": 0.0, "model_calls": 0, "tool_calls": 0},
            "model": "m",
        });
        serde_json::from_value::<warden_protocol::ChangeResult>(result.clone())
            .expect("a valid change result");
        self.store
            .transition(
                task,
                TaskStatus::Queued,
                TaskStatus::WaitingApproval,
                Some(result),
            )
            .await
            .unwrap();
    }

    async fn status(&self, task: &TaskId) -> TaskStatus {
        self.store.get_task(task).await.unwrap().unwrap().status
    }

    async fn send(&self, method: Method, uri: &str, token: &str, body: Option<Value>) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    async fn ids(&self, uri: &str, token: &str) -> Vec<String> {
        let reply = self.send(Method::GET, uri, token, None).await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        assert!(reply.body["next_cursor"].is_null() || reply.body["next_cursor"].is_string());
        reply.body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["id"].as_str().unwrap().to_string())
            .collect()
    }

    async fn decide(&self, id: &str, token: &str, body: Value) -> Reply {
        self.send(
            Method::POST,
            &format!("/v1/approvals/{id}"),
            token,
            Some(body),
        )
        .await
    }
}

struct Reply {
    status: StatusCode,
    body: Value,
}

fn check_error(reply: &Reply, status: StatusCode, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.body["error"]["code"], code, "{}", reply.body);
}

#[tokio::test]
async fn each_caller_sees_the_approvals_of_their_own_tasks_and_admins_see_all() {
    let api = Api::new().await;
    api.task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.task_with_approval("bob", 2, "publish", &hash('b'))
        .await;
    assert_eq!(api.ids("/v1/approvals", ALICE).await, ["apr_1"]);
    assert_eq!(api.ids("/v1/approvals", BOB).await, ["apr_2"]);
    assert_eq!(api.ids("/v1/approvals", ADMIN).await, ["apr_1", "apr_2"]);
    // A viewer named differently owns nothing.
    assert!(api.ids("/v1/approvals", VIEWER).await.is_empty());

    let reply = api
        .send(Method::GET, "/v1/approvals/apr_1", ALICE, None)
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["task_id"], "tsk_01M8VBQV37BCXJMMGC5Y911W01");
    assert_eq!(reply.body["kind"], "publish");
    assert_eq!(reply.body["subject_hash"], hash('a'));
    assert_eq!(reply.body["status"], "pending");
    assert!(reply.body["decided_by"].is_null());
    // Another owner's approval does not exist for bob; neither does an unknown one.
    for (id, token) in [("apr_1", BOB), ("apr_9", ADMIN), ("apr_1", VIEWER)] {
        let reply = api
            .send(Method::GET, &format!("/v1/approvals/{id}"), token, None)
            .await;
        check_error(&reply, StatusCode::NOT_FOUND, "not_found");
    }
    // Pagination and filters.
    assert_eq!(api.ids("/v1/approvals?limit=1", ADMIN).await, ["apr_1"]);
    let first = api
        .send(Method::GET, "/v1/approvals?limit=1", ADMIN, None)
        .await;
    assert_eq!(first.body["next_cursor"], "apr_1");
    assert_eq!(
        api.ids("/v1/approvals?limit=1&cursor=apr_1", ADMIN).await,
        ["apr_2"]
    );
    assert!(api
        .ids("/v1/approvals?status=approved", ADMIN)
        .await
        .is_empty());
    for uri in [
        "/v1/approvals?status=maybe",
        "/v1/approvals?limit=0",
        "/v1/approvals?colour=red",
    ] {
        let reply = api.send(Method::GET, uri, ADMIN, None).await;
        check_error(&reply, StatusCode::BAD_REQUEST, "bad_request");
    }
    let reply = api
        .send(Method::GET, "/v1/approvals", "no-such-token-000000", None)
        .await;
    check_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized");
}

#[tokio::test]
async fn only_admins_decide_once_for_exactly_the_bound_hash_and_approval_queues_the_task() {
    let api = Api::new().await;
    let task = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.waiting(&task, 1, &hash('a')).await;
    let approve = json!({"decision": "approve", "hash": hash('a')});

    // The owner may look but not decide; another operator does not see it at all.
    check_error(
        &api.decide("apr_1", ALICE, approve.clone()).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    check_error(
        &api.decide("apr_1", BOB, approve.clone()).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    check_error(
        &api.decide("apr_7", ADMIN, approve.clone()).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    // Malformed bodies and hashes: 422; a well-formed other hash: 409; nothing changes.
    for body in [
        json!({"decision": "approve", "hash": "sha256:abc"}),
        json!({"decision": "approve", "hash": hash('A')}),
        json!({"decision": "maybe", "hash": hash('a')}),
        json!({"decision": "approve"}),
        json!({"decision": "approve", "hash": hash('a'), "by": "me"}),
    ] {
        check_error(
            &api.decide("apr_1", ADMIN, body).await,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        );
    }
    let reply = api
        .decide(
            "apr_1",
            ADMIN,
            json!({"decision": "approve", "hash": hash('b')}),
        )
        .await;
    check_error(&reply, StatusCode::CONFLICT, "hash_mismatch");
    assert_eq!(api.status(&task).await, TaskStatus::WaitingApproval);
    assert_eq!(api.ids("/v1/approvals", ADMIN).await, ["apr_1"]);

    // The admin approves the bound hash: approved, who and when; the task is queued for the
    // worker that publishes; no outbox intent is involved.
    let reply = api.decide("apr_1", ADMIN, approve.clone()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "approved");
    assert_eq!(reply.body["decided_by"], "root");
    assert!(reply.body["decided_at"].is_string());
    assert_eq!(api.status(&task).await, TaskStatus::Queued);
    assert!(api.store.list_intents(&task).await.unwrap().is_empty());
    assert!(api.ids("/v1/approvals", ADMIN).await.is_empty());
    assert_eq!(
        api.ids("/v1/approvals?status=approved", ALICE).await,
        ["apr_1"]
    );

    // Single use: approving or rejecting again is 409.
    for decision in ["approve", "reject"] {
        let reply = api
            .decide(
                "apr_1",
                ADMIN,
                json!({"decision": decision, "hash": hash('a')}),
            )
            .await;
        check_error(&reply, StatusCode::CONFLICT, "already_decided");
    }
    assert_eq!(api.status(&task).await, TaskStatus::Queued);
}

#[tokio::test]
async fn a_rejection_queues_too_another_kind_does_not_and_lost_decisions_are_recovered() {
    let api = Api::new().await;
    let rejected = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.waiting(&rejected, 1, &hash('a')).await;
    let command = api
        .task_with_approval("alice", 2, "command", &hash('c'))
        .await;
    api.waiting(&command, 2, &hash('c')).await;
    let lost = api
        .task_with_approval("bob", 3, "publish_sensitive", &hash('d'))
        .await;
    api.waiting(&lost, 3, &hash('d')).await;
    let pending = api
        .task_with_approval("bob", 4, "publish", &hash('e'))
        .await;
    api.waiting(&pending, 4, &hash('e')).await;
    let reply = api
        .decide(
            "apr_1",
            ADMIN,
            json!({"decision": "reject", "hash": hash('a')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "rejected");
    // Queued: its next run ends it with the rejection (see `rejected_publication`).
    assert_eq!(api.status(&rejected).await, TaskStatus::Queued);
    let reply = api
        .decide(
            "apr_2",
            ADMIN,
            json!({"decision": "approve", "hash": hash('c')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(api.status(&command).await, TaskStatus::WaitingApproval);

    // Approved straight in the store (as if the process died before queueing the task).
    api.store
        .decide_approval("apr_3", &hash('d'), Decision::Approve, "root")
        .await
        .unwrap();
    assert_eq!(api.status(&lost).await, TaskStatus::WaitingApproval);
    let queued = requeue_decided_tasks(api.store.as_ref()).await.unwrap();
    assert_eq!(queued, std::slice::from_ref(&lost));
    assert!(requeue_decided_tasks(api.store.as_ref())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(api.status(&lost).await, TaskStatus::Queued);
    // Undecided and non-publish approvals keep their tasks waiting.
    assert_eq!(api.status(&pending).await, TaskStatus::WaitingApproval);
    assert_eq!(api.status(&command).await, TaskStatus::WaitingApproval);
}

#[tokio::test]
async fn a_cancel_rejects_pending_approvals_and_approvals_of_ended_tasks_are_refused() {
    let api = Api::new().await;
    let task = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.waiting(&task, 1, &hash('a')).await;
    let other = api
        .task_with_approval("bob", 2, "publish", &hash('b'))
        .await;
    api.waiting(&other, 2, &hash('b')).await;
    let reply = api
        .send(
            Method::POST,
            &format!("/v1/tasks/{task}/cancel"),
            ALICE,
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "cancelled");
    let approval = api.store.get_approval("apr_1").await.unwrap().unwrap();
    assert_eq!(approval.status, warden_store::ApprovalStatus::Rejected);
    assert_eq!(approval.decided_by.as_deref(), Some("alice"));
    // Another task's approval is untouched.
    let untouched = api.store.get_approval("apr_2").await.unwrap().unwrap();
    assert_eq!(untouched.status, warden_store::ApprovalStatus::Pending);
    for decision in ["approve", "reject"] {
        let reply = api
            .decide(
                "apr_1",
                ADMIN,
                json!({"decision": decision, "hash": hash('a')}),
            )
            .await;
        check_error(&reply, StatusCode::CONFLICT, "already_decided");
    }

    // An approval left pending on a task that ended another way (here: straight in the store,
    // not through the cancel route) is refused as well, and stays pending.
    api.store
        .transition(
            &other,
            TaskStatus::WaitingApproval,
            TaskStatus::Cancelled,
            None,
        )
        .await
        .unwrap();
    let reply = api
        .decide(
            "apr_2",
            ADMIN,
            json!({"decision": "approve", "hash": hash('b')}),
        )
        .await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    assert!(reply.body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("cancelled"));
    let still = api.store.get_approval("apr_2").await.unwrap().unwrap();
    assert_eq!(still.status, warden_store::ApprovalStatus::Pending);
    assert_eq!(api.status(&other).await, TaskStatus::Cancelled);
}

#[tokio::test]
async fn the_openapi_document_describes_the_approval_routes() {
    let document: Value =
        serde_json::from_str(&warden_api::routes::openapi().to_json().unwrap()).unwrap();
    assert!(document["paths"]["/v1/approvals"]["get"].is_object());
    let decide = &document["paths"]["/v1/approvals/{id}"]["post"];
    for status in ["200", "403", "404", "409", "422"] {
        assert!(decide["responses"][status].is_object(), "{status}");
    }
    assert!(document["components"]["schemas"]["ApprovalView"].is_object());
}

#[tokio::test]
async fn a_running_publication_is_not_cancelled_and_its_approval_stays() {
    let api = Api::new().await;
    let task = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.waiting(&task, 1, &hash('a')).await;
    let reply = api
        .decide(
            "apr_1",
            ADMIN,
            json!({"decision": "approve", "hash": hash('a')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    // A worker claims the queued task to publish it: approved, then consumed by the push.
    let claim = api
        .store
        .claim(
            "w",
            std::time::Duration::from_secs(30),
            &warden_store::ClaimFilter::default(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!(claim.task.id, task);
    let cancel = format!("/v1/tasks/{task}/cancel");
    for consumed in [false, true] {
        if consumed {
            api.store
                .consume_approval("apr_1", &hash('a'))
                .await
                .unwrap();
        }
        for token in [ALICE, ADMIN] {
            let reply = api.send(Method::POST, &cancel, token, None).await;
            check_error(&reply, StatusCode::CONFLICT, "conflict");
            assert!(
                reply.body["error"]["message"]
                    .as_str()
                    .unwrap()
                    .contains("publication in progress"),
                "{}",
                reply.body
            );
        }
        assert_eq!(api.status(&task).await, TaskStatus::Running);
        let approval = api.store.get_approval("apr_1").await.unwrap().unwrap();
        let expected = if consumed {
            warden_store::ApprovalStatus::Consumed
        } else {
            warden_store::ApprovalStatus::Approved
        };
        assert_eq!(approval.status, expected);
    }
    // The publishing worker stops (serve shuts down): the task is queued again with its
    // approval consumed, and the next claim resumes the publication, so it is not cancelled
    // either.
    api.store.interrupt_worker_runs("w").await.unwrap();
    assert_eq!(api.status(&task).await, TaskStatus::Queued);
    let reply = api.send(Method::POST, &cancel, ALICE, None).await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    assert_eq!(api.status(&task).await, TaskStatus::Queued);
}

#[tokio::test]
async fn an_approved_task_no_run_has_claimed_yet_can_still_be_cancelled() {
    let api = Api::new().await;
    let task = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    api.waiting(&task, 1, &hash('a')).await;
    let reply = api
        .decide(
            "apr_1",
            ADMIN,
            json!({"decision": "approve", "hash": hash('a')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(api.status(&task).await, TaskStatus::Queued);
    let reply = api
        .send(
            Method::POST,
            &format!("/v1/tasks/{task}/cancel"),
            ALICE,
            None,
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "cancelled");
}
