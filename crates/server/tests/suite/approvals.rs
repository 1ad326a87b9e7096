//! `GET /v1/approvals`, `GET /v1/approvals/{id}` and `POST /v1/approvals/{id}` through
//! `Router::oneshot` on a real SQLite store: who sees which approvals, who decides, the hash
//! binding (422 malformed, 409 `hash_mismatch`), single use (409 `already_decided`), and the
//! `publish` outbox intent an approval enqueues exactly once.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_protocol::{TaskId, TaskKind};
use warden_server::api::approvals::{enqueue_missing_publish_intents, publish_intent_id};
use warden_server::api::{router, ApiState, Tokens};
use warden_store::{Decision, NewApproval, NewTask, Store, TaskRepo};

const ADMIN: &str = "admin-token-0123456789";
const ALICE: &str = "alice-token-0123456789";
const BOB: &str = "bob-token-01234567890";
const VIEWER: &str = "viewer-token-01234567";

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
            Arc::clone(&store),
            tokens,
            Arc::new(Notify::new()),
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
async fn only_admins_decide_once_for_exactly_the_bound_hash_and_approval_enqueues_publication() {
    let api = Api::new().await;
    let task = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
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
    assert!(api.store.list_intents(&task).await.unwrap().is_empty());
    assert_eq!(api.ids("/v1/approvals", ADMIN).await, ["apr_1"]);

    // The admin approves the bound hash: approved, who and when, one publish intent.
    let reply = api.decide("apr_1", ADMIN, approve.clone()).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "approved");
    assert_eq!(reply.body["decided_by"], "root");
    assert!(reply.body["decided_at"].is_string());
    let intents = api.store.list_intents(&task).await.unwrap();
    assert_eq!(intents.len(), 1, "{intents:?}");
    assert_eq!(intents[0].id, publish_intent_id("apr_1"));
    assert_eq!(intents[0].kind, "publish");
    assert_eq!(
        intents[0].payload,
        json!({"approval": "apr_1", "task": task.as_str(), "hash": hash('a')})
    );
    assert!(api.ids("/v1/approvals", ADMIN).await.is_empty());
    assert_eq!(
        api.ids("/v1/approvals?status=approved", ALICE).await,
        ["apr_1"]
    );

    // Single use: approving or rejecting again is 409 and enqueues nothing more.
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
    assert_eq!(api.store.list_intents(&task).await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_rejection_or_another_kind_enqueues_nothing_and_lost_intents_are_recovered() {
    let api = Api::new().await;
    let rejected = api
        .task_with_approval("alice", 1, "publish", &hash('a'))
        .await;
    let command = api
        .task_with_approval("alice", 2, "command", &hash('c'))
        .await;
    let lost = api
        .task_with_approval("bob", 3, "publish_sensitive", &hash('d'))
        .await;
    let reply = api
        .decide(
            "apr_1",
            ADMIN,
            json!({"decision": "reject", "hash": hash('a')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "rejected");
    let reply = api
        .decide(
            "apr_2",
            ADMIN,
            json!({"decision": "approve", "hash": hash('c')}),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert!(api.store.list_intents(&rejected).await.unwrap().is_empty());
    assert!(api.store.list_intents(&command).await.unwrap().is_empty());

    // Approved straight in the store (as if the process died before enqueueing).
    api.store
        .decide_approval("apr_3", &hash('d'), Decision::Approve, "root")
        .await
        .unwrap();
    assert!(api.store.list_intents(&lost).await.unwrap().is_empty());
    assert_eq!(
        enqueue_missing_publish_intents(api.store.as_ref())
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        enqueue_missing_publish_intents(api.store.as_ref())
            .await
            .unwrap(),
        0
    );
    let intents = api.store.list_intents(&lost).await.unwrap();
    assert_eq!(intents.len(), 1);
    assert_eq!(intents[0].id, publish_intent_id("apr_3"));
}

#[tokio::test]
async fn the_openapi_document_describes_the_approval_routes() {
    let document: Value =
        serde_json::from_str(&warden_server::api::openapi().to_json().unwrap()).unwrap();
    assert!(document["paths"]["/v1/approvals"]["get"].is_object());
    let decide = &document["paths"]["/v1/approvals/{id}"]["post"];
    for status in ["200", "403", "404", "409", "422"] {
        assert!(decide["responses"][status].is_object(), "{status}");
    }
    assert!(document["components"]["schemas"]["ApprovalView"].is_object());
}
