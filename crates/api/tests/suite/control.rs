//! Task control through the router: cancel, retry, messages (answers and follow-ups), the
//! journal and usage routes — every success path and every error (401, 403, 404, 409, 422,
//! 400), on a real SQLite store whose statuses the tests drive like a worker would.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_protocol::{Event, TaskId, TaskStatus};
use warden_runtime::CancelFlag;
use warden_service::cancel::RunningTasks;
use warden_service::tasks::TaskService;
use warden_store::{Claim, ClaimFilter, EventStream, RunJournal, Store, StoreError, UsageEntry};
use warden_test_support::git_fixture::TempRepo;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";
const VIEWER: &str = "viewer-token-01234567-0123456789";

struct Api {
    router: Router,
    store: Arc<dyn Store>,
    running: Arc<RunningTasks>,
    wake: Arc<Notify>,
    repo: TempRepo,
    _dir: tempfile::TempDir,
}

struct Reply {
    status: StatusCode,
    body: Value,
}

impl Reply {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

fn check_error(reply: &Reply, status: StatusCode, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.code(), code, "{}", reply.body);
    assert!(
        !reply.body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "{}",
        reply.body
    );
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
            "root:admin:{ADMIN},alice:operator:{ALICE},bob:operator:{BOB},val:viewer:{VIEWER}"
        ))
        .unwrap();
        let wake = Arc::new(Notify::new());
        let running = Arc::new(RunningTasks::default());
        let router = router(Arc::new(ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::clone(&wake))
                .with_running(Arc::clone(&running)),
            tokens,
        )));
        let repo = TempRepo::new();
        repo.write("src/lib.rs", "pub fn f() {}\n");
        repo.commit("initial");
        let api = Api {
            router,
            store,
            running,
            wake,
            repo,
            _dir: dir,
        };
        let reply = api
            .post(
                "/v1/repos",
                ADMIN,
                json!({"name": "app", "source": api.repo.path().to_str().unwrap()}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
        api
    }

    async fn send(&self, method: Method, uri: &str, token: Option<&str>, body: &str) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
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

    async fn get(&self, uri: &str, token: &str) -> Reply {
        self.send(Method::GET, uri, Some(token), "").await
    }

    async fn post(&self, uri: &str, token: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, Some(token), &body.to_string())
            .await
    }

    /// A queued question of `token`'s owner.
    async fn submit(&self, token: &str, prompt: &str) -> TaskId {
        let reply = self
            .post(
                "/v1/tasks",
                token,
                json!({"kind": "question", "repo": "app", "prompt": prompt}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
        reply.body["id"].as_str().unwrap().parse().unwrap()
    }

    /// Claims the oldest queued task as worker `w`, as a worker would.
    async fn claim(&self, expected: &TaskId) -> Claim {
        let claim = self
            .store
            .claim("w", Duration::from_secs(30), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&claim.task.id, expected);
        claim
    }

    /// Runs the task once (claim, finish) into `status` with `result`.
    async fn finish(&self, id: &TaskId, status: TaskStatus, result: Value) -> Claim {
        let claim = self.claim(id).await;
        self.store
            .finish_run(&claim.run(), "w", status, Some(result))
            .await
            .unwrap();
        claim
    }

    async fn status(&self, id: &TaskId) -> TaskStatus {
        self.store.get_task(id).await.unwrap().unwrap().status
    }

    /// Takes a pending wake-up (tasks submitted earlier leave one).
    async fn woken(&self) -> bool {
        tokio::time::timeout(Duration::from_millis(200), self.wake.notified())
            .await
            .is_ok()
    }
}

fn answer_result(id: &TaskId) -> Value {
    json!({"task_id": id, "kind": "question", "outcome": "answer",
           "answer": {"summary": "it doubles", "claims": [], "not_established": []},
           "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                     "cost_usd": 0.0, "model_calls": 1, "tool_calls": 0},
           "model": "gpt-test"})
}

fn clarification_result(id: &TaskId) -> Value {
    json!({"task_id": id, "kind": "question", "outcome": "clarification",
           "clarification": {"question": "Which branch do you mean?"},
           "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                     "cost_usd": 0.0, "model_calls": 1, "tool_calls": 0},
           "model": "gpt-test"})
}

#[tokio::test]
async fn the_routes_are_in_the_openapi_document() {
    let api = Api::new().await;
    let reply = api.send(Method::GET, "/openapi.json", None, "").await;
    assert_eq!(reply.status, StatusCode::OK);
    for (path, method) in [
        ("/v1/tasks/{id}/cancel", "post"),
        ("/v1/tasks/{id}/retry", "post"),
        ("/v1/tasks/{id}/messages", "post"),
        ("/v1/tasks/{id}/journal", "get"),
        ("/v1/usage", "get"),
    ] {
        let operation = &reply.body["paths"][path][method];
        assert!(operation.is_object(), "{method} {path} is not documented");
        assert!(operation["responses"]["401"].is_object(), "{method} {path}");
    }
    for schema in ["JournalPage", "UsageView", "PostMessage"] {
        assert!(
            reply.body["components"]["schemas"][schema].is_object(),
            "{schema}"
        );
    }
}

#[tokio::test]
async fn tokens_roles_and_owners_are_checked_on_every_route() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let unknown = "tsk_01M8VBQV37BCXJMMGC5Y911WEV";
    let message = json!({"text": "hello"});
    for (method, action) in [
        (Method::POST, "cancel"),
        (Method::POST, "retry"),
        (Method::POST, "messages"),
        (Method::GET, "journal"),
    ] {
        let uri = format!("/v1/tasks/{id}/{action}");
        let body = message.to_string();
        let reply = api.send(method.clone(), &uri, None, &body).await;
        check_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized");
        let reply = api
            .send(method.clone(), &uri, Some("wrong-token-0123456789"), &body)
            .await;
        check_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized");
        // Another operator's task does not exist for them; nor does an unknown or malformed id.
        for uri in [
            uri.clone(),
            format!("/v1/tasks/{unknown}/{action}"),
            format!("/v1/tasks/not-an-id/{action}"),
        ] {
            let reply = api.send(method.clone(), &uri, Some(BOB), &body).await;
            check_error(&reply, StatusCode::NOT_FOUND, "not_found");
        }
        let reply = api.send(method.clone(), &uri, Some(VIEWER), &body).await;
        if method == Method::POST {
            check_error(&reply, StatusCode::FORBIDDEN, "forbidden");
        } else {
            // Viewers read, but only their own tasks.
            check_error(&reply, StatusCode::NOT_FOUND, "not_found");
        }
    }
    // Nothing happened to the task.
    assert_eq!(api.status(&id).await, TaskStatus::Queued);
    // An admin reads anyone's journal.
    let reply = api.get(&format!("/v1/tasks/{id}/journal"), ADMIN).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(
        reply.body,
        json!({"runs": [], "data": [], "next_cursor": null})
    );
    let reply = api.send(Method::GET, "/v1/usage", None, "").await;
    check_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized");
}

/// A task cancelled after its run began: the result names the run's model and counts the tool
/// calls it finished (the usage ledger holds only model calls).
#[tokio::test]
async fn a_cancelled_result_names_the_model_and_counts_the_tool_calls_of_its_runs() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let started = warden_protocol::Event::TaskStarted {
        task_id: id.clone(),
        kind: warden_protocol::TaskKind::Question,
        model: "openai:gpt-test".into(),
        manifest: vec![],
    };
    api.store.append_event(&id, started).await.unwrap();
    for call in ["c1", "c2"] {
        let finished = warden_protocol::Event::ToolFinished {
            call_id: call.into(),
            tool: "read_file".into(),
            ok: true,
            summary: "read_file src/lib.rs".into(),
            note: None,
        };
        api.store.append_event(&id, finished).await.unwrap();
    }
    let reply = api
        .post(&format!("/v1/tasks/{id}/cancel"), ALICE, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let result = &reply.body["result"];
    assert_eq!(result["model"], "openai:gpt-test", "{result}");
    assert_eq!(result["usage"]["tool_calls"], 2, "{result}");
}

#[tokio::test]
async fn cancelling_a_queued_task_sets_the_cancelled_result_and_a_finished_task_is_a_conflict() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let reply = api
        .post(&format!("/v1/tasks/{id}/cancel"), ALICE, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "cancelled");
    let result = &reply.body["result"];
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "cancelled", "{result}");
    assert_eq!(result["failure"]["message"], "cancelled by alice");
    assert_eq!(result["task_id"], id.as_str());
    assert_eq!(result["usage"]["model_calls"], 0);
    assert_eq!(api.status(&id).await, TaskStatus::Cancelled);
    // Followers of the task's events see it end.
    let events = api
        .store
        .events_after(&EventStream::Task(id.clone()), 0, 100)
        .await
        .unwrap();
    assert!(
        matches!(
            events.last().map(|e| &e.event),
            Some(Event::TaskFinished {
                status: TaskStatus::Cancelled,
                ..
            })
        ),
        "{events:?}"
    );
    // Nothing is claimable any more.
    assert!(api
        .store
        .claim("w", Duration::from_secs(30), &ClaimFilter::default())
        .await
        .unwrap()
        .is_none());
    // A finished task cannot be cancelled (again), whatever it ended as.
    let reply = api
        .post(&format!("/v1/tasks/{id}/cancel"), ALICE, json!({}))
        .await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    let done = api.submit(ALICE, "another").await;
    api.finish(&done, TaskStatus::Completed, answer_result(&done))
        .await;
    let reply = api
        .post(&format!("/v1/tasks/{done}/cancel"), ADMIN, json!({}))
        .await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    assert_eq!(api.status(&done).await, TaskStatus::Completed);
}

#[tokio::test]
async fn cancelling_a_running_task_stops_its_run_in_this_process_and_ends_its_lease() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let claim = api.claim(&id).await;
    let cancel = CancelFlag::default();
    let registration = api.running.register(&id, cancel.clone());
    let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let hook = Arc::clone(&killed);
    registration
        .control()
        .on_stop(move || hook.store(true, std::sync::atomic::Ordering::SeqCst));
    // Someone else's run of an unrelated task is left alone.
    let other = api.submit(BOB, "unrelated").await;
    let other_claim = api.claim(&other).await;
    let other_cancel = CancelFlag::default();
    let _other_registration = api.running.register(&other, other_cancel.clone());

    let reply = api
        .post(&format!("/v1/tasks/{id}/cancel"), ADMIN, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    assert_eq!(reply.body["status"], "cancelled");
    assert_eq!(reply.body["owner"], "alice");
    assert_eq!(
        reply.body["result"]["failure"]["message"],
        "cancelled by root"
    );
    assert!(cancel.is_cancelled(), "the agent loop is cancelled at once");
    assert!(registration.control().stopped());
    assert!(
        killed.load(std::sync::atomic::Ordering::SeqCst),
        "sandbox hook ran"
    );
    assert!(!other_cancel.is_cancelled());
    // The run is over in the store: the worker's heartbeat and finish fail, and cannot
    // overwrite the cancelled status.
    let heartbeat = api
        .store
        .heartbeat(&claim.run(), "w", Duration::from_secs(30))
        .await;
    assert!(
        matches!(heartbeat, Err(StoreError::LeaseLost { .. })),
        "{heartbeat:?}"
    );
    assert!(api
        .store
        .finish_run(
            &claim.run(),
            "w",
            TaskStatus::Completed,
            Some(answer_result(&id))
        )
        .await
        .is_err());
    let task = api.store.get_task(&id).await.unwrap().unwrap();
    assert_eq!(task.status, TaskStatus::Cancelled);
    assert_eq!(task.result.unwrap()["failure"]["code"], "cancelled");
    api.store
        .heartbeat(&other_claim.run(), "w", Duration::from_secs(30))
        .await
        .unwrap();
}

#[tokio::test]
async fn a_finished_task_is_retried_as_a_new_task_over_the_same_commits() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    assert!(api.woken().await);
    let reply = api
        .post(&format!("/v1/tasks/{id}/retry"), ALICE, json!({}))
        .await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    // A worker pins the commit, then the task fails.
    let claim = api.claim(&id).await;
    let head = api.repo.git(&["rev-parse", "HEAD"]);
    let mut pinned = claim.task.repos.clone();
    pinned[0].commit = Some(head.clone());
    api.store
        .pin_task_repos(&claim.run(), "w", pinned)
        .await
        .unwrap();
    api.store
        .finish_run(
            &claim.run(),
            "w",
            TaskStatus::Failed,
            Some(json!({"outcome": "failure", "failure": {"code": "model_error", "message": "x"}})),
        )
        .await
        .unwrap();
    // The repository moves on; the retry still answers about the pinned commit.
    api.repo.write("src/lib.rs", "pub fn g() {}\n");
    api.repo.commit("later");
    assert!(!api.woken().await);
    let reply = api
        .post(&format!("/v1/tasks/{id}/retry"), ADMIN, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    let retry = &reply.body;
    assert_ne!(retry["id"], id.as_str());
    assert_eq!(retry["retry_of"], id.as_str());
    assert_eq!(retry["status"], "queued");
    assert_eq!(retry["owner"], "alice", "a retry keeps the owner");
    assert_eq!(retry["prompt"], "where is f?");
    assert_eq!(retry["repos"][0]["commit"], head.as_str());
    assert!(retry.get("result").is_none(), "{retry}");
    assert!(api.woken().await, "workers are woken");
    // The owner sees the retry in their list.
    let list = api.get("/v1/tasks", ALICE).await;
    assert_eq!(list.body["data"][0]["id"], retry["id"]);
    // Retrying an unfinished retry is a conflict.
    let retry_id = retry["id"].as_str().unwrap();
    let reply = api
        .post(&format!("/v1/tasks/{retry_id}/retry"), ALICE, json!({}))
        .await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
}

#[tokio::test]
async fn messages_answer_a_waiting_task_and_follow_up_a_finished_one() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "how do I deploy?").await;
    let uri = format!("/v1/tasks/{id}/messages");
    api.finish(&id, TaskStatus::WaitingInput, clarification_result(&id))
        .await;
    // Bad bodies change nothing.
    for (body, status, code) in [
        ("{}", StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
        (
            r#"{"text": ""}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            r#"{"text": " \n\t "}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            r#"{"text": 5}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        (
            r#"{"text": "main", "urgent": true}"#,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
        ),
        ("[]", StatusCode::UNPROCESSABLE_ENTITY, "invalid_request"),
        ("not json", StatusCode::BAD_REQUEST, "bad_request"),
    ] {
        let reply = api.send(Method::POST, &uri, Some(ALICE), body).await;
        check_error(&reply, status, code);
    }
    let long = "x".repeat(64 * 1024 + 1);
    let reply = api.post(&uri, ALICE, json!({ "text": long })).await;
    check_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    assert_eq!(api.status(&id).await, TaskStatus::WaitingInput);
    assert!(api.store.task_messages(&id).await.unwrap().is_empty());

    // The answer: the same task, queued again, with the answer in its conversation.
    assert!(api.woken().await);
    let reply = api
        .post(&uri, ALICE, json!({"text": "  the main branch  "}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(reply.body["id"], id.as_str());
    assert_eq!(reply.body["status"], "queued");
    assert!(api.woken().await, "workers are woken");
    let messages = api.store.task_messages(&id).await.unwrap();
    assert_eq!(messages.len(), 1);
    assert_eq!(
        (
            messages[0].role.as_str(),
            messages[0].text.as_str(),
            messages[0].author.as_str()
        ),
        ("user", "the main branch", "alice")
    );
    // Answered once: a second message finds it queued, and waits for its next run's agent.
    let reply = api.post(&uri, ALICE, json!({"text": "again"})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(reply.body["id"], id.as_str());
    assert_eq!(reply.body["status"], "queued");
    let messages = api.store.task_messages(&id).await.unwrap();
    assert_eq!(
        messages.iter().map(|m| m.role.as_str()).collect::<Vec<_>>(),
        ["user", "steer"]
    );

    // The next run answers; a message now follows up with a new task over the same commits.
    let claim = api.claim(&id).await;
    assert_eq!(claim.run_number, 2);
    let head = api.repo.git(&["rev-parse", "HEAD"]);
    let mut pinned = claim.task.repos.clone();
    pinned[0].commit = Some(head.clone());
    api.store
        .pin_task_repos(&claim.run(), "w", pinned)
        .await
        .unwrap();
    api.store
        .finish_run(
            &claim.run(),
            "w",
            TaskStatus::Completed,
            Some(answer_result(&id)),
        )
        .await
        .unwrap();
    let reply = api
        .post(&uri, ALICE, json!({"text": "and for staging?"}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    let follow_up = &reply.body;
    assert_ne!(follow_up["id"], id.as_str());
    assert_eq!(follow_up["follow_up_to"], id.as_str());
    assert_eq!(follow_up["prompt"], "and for staging?");
    assert_eq!(follow_up["kind"], "question");
    assert_eq!(follow_up["status"], "queued");
    assert_eq!(follow_up["repos"][0]["commit"], head.as_str());
    assert_eq!(api.status(&id).await, TaskStatus::Completed);
}

#[tokio::test]
async fn a_message_to_a_queued_or_running_task_is_queued_for_its_agent_and_a_maintenance_task_takes_none(
) {
    let api = Api::new().await;
    let id = api.submit(ALICE, "how do I deploy?").await;
    let uri = format!("/v1/tasks/{id}/messages");
    let reply = api
        .post(&uri, ALICE, json!({"text": "  use staging  "}))
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(reply.body["id"], id.as_str(), "the same task");
    assert_eq!(reply.body["status"], "queued");
    let claim = api.claim(&id).await;
    let reply = api.post(&uri, BOB, json!({"text": "and prod"})).await;
    // Bob sees only his own tasks.
    check_error(&reply, StatusCode::NOT_FOUND, "not_found");
    let reply = api.post(&uri, ALICE, json!({"text": "and prod"})).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    assert_eq!(reply.body["status"], "running");
    let reply = api.post(&uri, VIEWER, json!({"text": "hi"})).await;
    check_error(&reply, StatusCode::FORBIDDEN, "forbidden");
    let messages = api.store.task_messages(&id).await.unwrap();
    assert_eq!(
        messages
            .iter()
            .map(|m| (m.role.as_str(), m.text.as_str(), m.author.as_str()))
            .collect::<Vec<_>>(),
        [
            ("steer", "use staging", "alice"),
            ("steer", "and prod", "alice")
        ]
    );
    // Each is on the task's timeline.
    let events = api
        .store
        .events_after(&warden_store::EventStream::Task(id.clone()), 0, 100)
        .await
        .unwrap();
    let queued: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.event {
            warden_protocol::Event::MessageQueued { seq, author, text } => {
                Some((*seq, author.as_str(), text.as_str()))
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        queued,
        [(1, "alice", "use staging"), (2, "alice", "and prod")]
    );
    // After 100 of them a running task takes no more.
    for n in 2..100 {
        api.store
            .append_task_message(&id, warden_store::MESSAGE_STEER, &format!("m{n}"), "alice")
            .await
            .unwrap();
    }
    let reply = api.post(&uri, ALICE, json!({"text": "one more"})).await;
    check_error(&reply, StatusCode::CONFLICT, "conflict");
    drop(claim);
}

#[tokio::test]
async fn the_journal_lists_every_run_and_its_records_each_verified() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let claim = api.claim(&id).await;
    let mut journal = RunJournal::open(Arc::clone(&api.store), claim.run())
        .await
        .unwrap();
    journal
        .append(1_796_131_143_042, "run_started", json!({"task_id": id}))
        .await
        .unwrap();
    journal
        .append(1_796_131_143_043, "model_requested", json!({"turn": 1}))
        .await
        .unwrap();
    api.store
        .finish_run(&claim.run(), "w", TaskStatus::Queued, None)
        .await
        .unwrap();
    api.claim(&id).await;

    let reply = api.get(&format!("/v1/tasks/{id}/journal"), ALICE).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let runs = reply.body["runs"].as_array().unwrap();
    assert_eq!(runs.len(), 2, "{}", reply.body);
    let first = &runs[0];
    assert_eq!(first["number"], 1);
    assert_eq!(first["worker"], "w");
    assert_eq!(first["outcome"], "queued");
    assert!(first["ended_at"].is_string());
    let second = &runs[1];
    assert_eq!(second["number"], 2);
    assert_eq!(second["outcome"], Value::Null);
    assert_eq!(second["ended_at"], Value::Null);
    let records = reply.body["data"].as_array().unwrap();
    assert_eq!(records.len(), 2);
    assert_eq!(records[0]["run"], 1);
    assert_eq!(records[0]["seq"], 0);
    assert_eq!(records[0]["kind"], "run_started");
    assert_eq!(records[0]["at"], "2026-12-01T13:19:03.042Z");
    assert_eq!(records[0]["payload"], json!({"task_id": id}));
    assert_eq!(records[0]["prev_hash"], warden_store::GENESIS_HASH);
    assert_eq!(records[1]["prev_hash"], records[0]["hash"]);
    assert!(records.iter().all(|r| r["chain_ok"] == true));
    let stored = api.store.journal(&claim.run()).await.unwrap();
    assert_eq!(records[1]["hash"], stored[1].hash.as_str());
    assert_eq!(reply.body["next_cursor"], Value::Null);
    // One run at a time.
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?run=1"), ALICE)
        .await;
    assert_eq!(reply.body["runs"], json!([first]));
    assert_eq!(reply.body["data"], json!(records));
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?run=2"), ALICE)
        .await;
    assert_eq!(reply.body["runs"], json!([second]));
    assert_eq!(reply.body["data"], json!([]));
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?run=3"), ALICE)
        .await;
    assert_eq!(
        reply.body,
        json!({"runs": [], "data": [], "next_cursor": null})
    );
    for bad in [
        "run=0",
        "run=x",
        "run=-1",
        "limit=0",
        "limit=201",
        "limit=x",
        "cursor=x",
        "cursor=1",
        "cursor=1.x",
        "cursor=0.1",
        "cursor=1.-1",
        "page=2",
    ] {
        let reply = api
            .get(&format!("/v1/tasks/{id}/journal?{bad}"), ALICE)
            .await;
        check_error(&reply, StatusCode::BAD_REQUEST, "bad_request");
    }
}

/// Appends `count` records to `claim`'s run.
async fn journal_records(api: &Api, claim: &Claim, count: u64) {
    let mut journal = RunJournal::open(Arc::clone(&api.store), claim.run())
        .await
        .unwrap();
    for turn in 0..count {
        journal
            .append(1_000 + turn, "model_requested", json!({"turn": turn}))
            .await
            .unwrap();
    }
}

/// Every page of `id`'s journal at `limit` records a page, following `next_cursor`.
async fn journal_pages(api: &Api, id: &TaskId, limit: u32) -> Vec<Value> {
    let mut pages = Vec::new();
    let mut cursor = String::new();
    loop {
        let reply = api
            .get(
                &format!("/v1/tasks/{id}/journal?limit={limit}&cursor={cursor}"),
                ALICE,
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
        let next = reply.body["next_cursor"].as_str().map(str::to_string);
        pages.push(reply.body);
        match next {
            Some(next) => cursor = next,
            None => return pages,
        }
        assert!(pages.len() < 100, "pages do not end");
    }
}

#[tokio::test]
async fn the_journal_pages_across_runs_and_a_cursor_resumes_where_it_points() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    // Run 1: five records; run 2: three.
    let claim = api.claim(&id).await;
    journal_records(&api, &claim, 5).await;
    api.store
        .finish_run(&claim.run(), "w", TaskStatus::Queued, None)
        .await
        .unwrap();
    let claim = api.claim(&id).await;
    journal_records(&api, &claim, 3).await;

    let whole = api
        .get(&format!("/v1/tasks/{id}/journal?limit=200"), ALICE)
        .await;
    let all = whole.body["data"].as_array().unwrap().clone();
    let position = |r: &Value| (r["run"].as_u64().unwrap(), r["seq"].as_u64().unwrap());
    assert_eq!(
        all.iter().map(position).collect::<Vec<_>>(),
        [
            (1, 0),
            (1, 1),
            (1, 2),
            (1, 3),
            (1, 4),
            (2, 0),
            (2, 1),
            (2, 2)
        ]
    );
    assert_eq!(whole.body["next_cursor"], Value::Null);

    for limit in [1, 2, 3, 5, 7, 8] {
        let pages = journal_pages(&api, &id, limit).await;
        let mut joined = Vec::new();
        for page in &pages {
            let data = page["data"].as_array().unwrap();
            assert!(data.len() <= limit as usize);
            // Every page lists the runs and verifies its own records, the first one included
            // (its predecessor is on the page before).
            assert_eq!(page["runs"], whole.body["runs"]);
            assert!(data.iter().all(|r| r["chain_ok"] == true), "{page}");
            joined.extend(data.iter().cloned());
        }
        assert_eq!(joined, all, "limit {limit}");
        assert_eq!(
            pages.len(),
            all.len().div_ceil(limit as usize),
            "limit {limit}"
        );
    }

    // A cursor is a position: asked again, the same page.
    let first = api
        .get(&format!("/v1/tasks/{id}/journal?limit=3"), ALICE)
        .await;
    assert_eq!(first.body["next_cursor"], "1.2");
    let again = |cursor: &str| {
        let uri = format!("/v1/tasks/{id}/journal?limit=3&cursor={cursor}");
        let api = &api;
        async move { api.get(&uri, ALICE).await.body }
    };
    let second = again("1.2").await;
    assert_eq!(second, again("1.2").await);
    assert_eq!(second["data"], json!(all[3..6]));
    assert_eq!(second["next_cursor"], "2.0");
    // Past the last record of a run, the next run's; past everything, nothing.
    assert_eq!(again("1.4").await["data"], json!(all[5..8]));
    assert_eq!(again("2.2").await["data"], json!([]));
    assert_eq!(again("9.0").await["next_cursor"], Value::Null);
    // With `run`, only that run's records.
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?run=2&limit=2"), ALICE)
        .await;
    assert_eq!(reply.body["data"], json!(all[5..7]));
    assert_eq!(reply.body["next_cursor"], "2.1");
}

#[tokio::test]
async fn an_observation_of_a_sensitive_file_is_hidden_on_a_later_page_too() {
    let api = Api::new().await;
    let id = api.submit(ALICE, "what is in .env?").await;
    let claim = api.claim(&id).await;
    let mut journal = RunJournal::open(Arc::clone(&api.store), claim.run())
        .await
        .unwrap();
    journal
        .append(
            1,
            "model_decision",
            json!({"tool_calls": [{"id": "c1", "name": "read_file",
                                   "arguments": "{\"path\":\".env\"}"}]}),
        )
        .await
        .unwrap();
    for turn in 0..3 {
        journal
            .append(2, "policy_verdict", json!({"turn": turn}))
            .await
            .unwrap();
    }
    journal
        .append(
            3,
            "tool_observation",
            json!({"call_id": "c1", "tool": "read_file",
                   "output": {"ok": ".env (lines 1-1 of 1)\n     1\tDB_PASSWORD=hunter2\n"}}),
        )
        .await
        .unwrap();
    for limit in [1, 2, 4, 200] {
        let pages = journal_pages(&api, &id, limit).await;
        let shown = serde_json::to_string(&pages).unwrap();
        assert!(!shown.contains("hunter2"), "limit {limit}: {shown}");
        assert!(shown.contains("DB_PASSWORD=[redacted]"), "limit {limit}");
    }
}

/// The workers' writer records with each observation what showing it needs (`values` for a
/// call on `.env`, `nothing` for one on README.md), so a page is redacted from its own records:
/// the observation is hidden on a page that does not hold the decision that made the call.
#[tokio::test]
async fn a_page_is_redacted_from_what_the_writer_recorded_with_each_record() {
    use warden_runtime::{Journal, RecordKind};
    let api = Api::new().await;
    let id = api.submit(ALICE, "what is in .env?").await;
    let claim = api.claim(&id).await;
    let inner = RunJournal::open(Arc::clone(&api.store), claim.run())
        .await
        .unwrap();
    let mut journal = warden_service::journal::StoreJournal::new(
        inner,
        warden_engine::redact::Redactor::new(Vec::<String>::new()),
    );
    journal
        .append(
            1,
            RecordKind::ModelDecision,
            json!({"tool_calls": [
                {"id": "c1", "name": "read_file", "arguments": "{\"path\":\".env\"}"},
                {"id": "c2", "name": "read_file", "arguments": "{\"path\":\"README.md\"}"}]}),
        )
        .await
        .unwrap();
    for call in ["c1", "c2"] {
        journal
            .append(
                2,
                RecordKind::ToolObservation,
                json!({"call_id": call, "tool": "read_file",
                       "output": {"ok": "     1\tDB_PASSWORD=hunter2\n"}}),
            )
            .await
            .unwrap();
    }
    let stored = api.store.journal(&claim.run()).await.unwrap();
    let displays: Vec<_> = stored.iter().map(|e| e.display.as_deref()).collect();
    assert_eq!(displays, [None, Some("values"), Some("nothing")]);
    // Page 2 alone (the decision is on page 1): the first observation is hidden.
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?limit=1&cursor=1.0"), ALICE)
        .await;
    let shown = reply.body["data"].to_string();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("DB_PASSWORD=[redacted]"), "{shown}");
    // README.md is not sensitive: shown as written.
    let reply = api
        .get(&format!("/v1/tasks/{id}/journal?limit=1&cursor=1.1"), ALICE)
        .await;
    assert!(
        reply.body["data"].to_string().contains("hunter2"),
        "{}",
        reply.body
    );
}

#[tokio::test]
async fn usage_is_summed_per_day_task_model_and_role_for_the_callers_tasks() {
    let api = Api::new().await;
    let alices = api.submit(ALICE, "one").await;
    let bobs = api.submit(BOB, "two").await;
    for (task, model, role, tokens, cost) in [
        (&alices, "gpt-test", "agent", 100, Some(1_500)),
        (&alices, "gpt-test", "agent", 50, Some(500)),
        (&bobs, "claude-test", "reviewer", 10, None),
    ] {
        api.store
            .record_usage(UsageEntry {
                task: task.clone(),
                run_number: Some(1),
                model: model.into(),
                role: role.into(),
                input_tokens: tokens,
                cached_input_tokens: 1,
                output_tokens: 2,
                cost_micro_usd: cost,
            })
            .await
            .unwrap();
    }
    let reply = api.get("/v1/usage", ALICE).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    let today = warden_store::UtcDay::of_ms(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64,
    )
    .to_string();
    // 2 of 150 prompt tokens read from the cache.
    let spend = json!({"input_tokens": 150, "cached_input_tokens": 2, "cache_hit_rate": 0.0133,
                       "output_tokens": 4, "cost_usd": 0.002, "cost_unknown": false,
                       "model_calls": 2});
    let with = |key: &str, value: &str| {
        let mut entry = spend.clone();
        entry[key] = json!(value);
        entry
    };
    assert_eq!(
        reply.body,
        json!({"by_day": [with("day", &today)],
               "by_task": [with("task_id", alices.as_str())],
               "by_model": [with("model", "gpt-test")],
               "by_role": [with("role", "agent")]})
    );
    // A viewer has no tasks, so no spend; an admin sees everyone's.
    let reply = api.get("/v1/usage", VIEWER).await;
    assert_eq!(
        reply.body,
        json!({"by_day": [], "by_task": [], "by_model": [], "by_role": []})
    );
    let reply = api.get("/v1/usage", ADMIN).await;
    assert_eq!(reply.body["by_day"][0]["model_calls"], 3);
    assert_eq!(reply.body["by_day"][0]["cost_unknown"], true);
    assert_eq!(reply.body["by_task"].as_array().unwrap().len(), 2);
    let models: Vec<&str> = reply.body["by_model"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["model"].as_str().unwrap())
        .collect();
    assert_eq!(models, ["claude-test", "gpt-test"]);
    let roles: Vec<(&str, u64)> = reply.body["by_role"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["role"].as_str().unwrap(),
                r["model_calls"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(roles, [("agent", 2), ("reviewer", 1)]);
    // `since` filters by UTC day.
    let reply = api.get(&format!("/v1/usage?since={today}"), ADMIN).await;
    assert_eq!(reply.body["by_day"][0]["model_calls"], 3, "{}", reply.body);
    let reply = api.get("/v1/usage?since=2999-01-01", ADMIN).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.body["by_task"], json!([]));
    for bad in ["since=yesterday", "since=2026-02-30", "from=2026-01-01"] {
        let reply = api.get(&format!("/v1/usage?{bad}"), ADMIN).await;
        check_error(&reply, StatusCode::BAD_REQUEST, "bad_request");
    }
}

#[tokio::test]
async fn a_run_notices_a_cancellation_made_by_another_process() {
    // What a `warden worker` on a shared Postgres sees: no in-process signal, only the status.
    let api = Api::new().await;
    let id = api.submit(ALICE, "where is f?").await;
    let _claim = api.claim(&id).await;
    let elsewhere = Arc::new(RunningTasks::default());
    let cancel = CancelFlag::default();
    let registration = elsewhere.register(&id, cancel.clone());
    let watcher = tokio::spawn(warden_service::cancel::watch_status(
        Arc::clone(&api.store),
        id.clone(),
        Arc::clone(registration.control()),
        Duration::from_millis(20),
    ));
    // Still running: the run goes on.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!cancel.is_cancelled() && !watcher.is_finished());
    let reply = api
        .post(&format!("/v1/tasks/{id}/cancel"), ALICE, json!({}))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    tokio::time::timeout(Duration::from_secs(30), watcher)
        .await
        .expect("the watcher noticed the cancellation")
        .unwrap();
    assert!(cancel.is_cancelled() && registration.control().stopped());
}
