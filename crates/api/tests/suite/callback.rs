//! Task callbacks end to end: submitted through the router, turned into outbox intents by the
//! dispatcher from the event stream, delivered signed to a local receiver — once per event id,
//! retried on failure — and the SSRF table: literal, mapped and resolved internal addresses and
//! redirects are refused where the connection would be made, and nothing reaches them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_config::CallbackSection;
use warden_protocol::{Event, TaskId, TaskStatus};
use warden_service::callback::sign::signature;
use warden_service::callback::{CallbackClient, Callbacks, DeliveryError};
use warden_service::config::callback::{
    AddressPolicy, CallbackConfig, Lookup, LookupFuture, SystemLookup,
};
use warden_service::tasks::TaskService;
use warden_store::{
    ClaimFilter, IntentStatus, ManualClock, NewIntent, NewRepo, Store, StoreOptions,
};

const SECRET: &str = "callback-secret-0123456789abcdef0123";
const TOKEN: &str = "alice-token-0123456789-0123456789";

/// One request a receiver saw.
#[derive(Debug, Clone)]
struct Received {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

impl Received {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap()
    }
}

/// Scripted answers: a status and an optional `Location`.
type Replies = Arc<Mutex<VecDeque<(u16, Option<String>)>>>;

/// An HTTP server on 127.0.0.1 that records every request and answers with the scripted
/// statuses (then 200).
struct Receiver {
    address: SocketAddr,
    seen: Arc<Mutex<Vec<Received>>>,
    replies: Replies,
}

impl Receiver {
    async fn start() -> Receiver {
        let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
        let replies: Replies = Arc::default();
        let (seen_in, replies_in) = (Arc::clone(&seen), Arc::clone(&replies));
        let app = axum::Router::new().fallback(move |request: Request<Body>| {
            let seen = Arc::clone(&seen_in);
            let replies = Arc::clone(&replies_in);
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
                seen.lock().unwrap().push(Received {
                    path: parts.uri.path().to_string(),
                    headers: parts.headers,
                    body,
                });
                let (status, location) = replies.lock().unwrap().pop_front().unwrap_or((200, None));
                let mut response: Response = StatusCode::from_u16(status).unwrap().into_response();
                if let Some(location) = location {
                    response
                        .headers_mut()
                        .insert("location", location.parse().unwrap());
                }
                response
            }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Receiver {
            address,
            seen,
            replies,
        }
    }

    fn script(&self, status: u16, location: Option<String>) {
        self.replies.lock().unwrap().push_back((status, location));
    }

    fn seen(&self) -> Vec<Received> {
        self.seen.lock().unwrap().clone()
    }

    fn origin(&self) -> String {
        format!("http://{}", self.address)
    }
}

/// Callbacks over plain http to `origins`, with `policy`.
fn config(origins: &[String], policy: AddressPolicy, max_attempts: u32) -> CallbackConfig {
    let mut config = CallbackConfig::resolve(
        &CallbackSection {
            secret: Some(SECRET.into()),
            allowed_origins: origins.to_vec(),
            allow_http: Some(true),
            max_attempts: Some(max_attempts),
            timeout_secs: Some(5),
        },
        None,
    )
    .unwrap();
    config.address_policy = policy;
    config
}

struct Setup {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    clock: ManualClock,
    receiver: Receiver,
    config: CallbackConfig,
    router: axum::Router,
}

impl Setup {
    async fn new(max_attempts: u32) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let clock = ManualClock::new(1_796_000_000_000);
        let store = warden_store::open_with(
            &format!("sqlite://{}", dir.path().join("warden.db").display()),
            StoreOptions {
                clock: Arc::new(clock.clone()),
                ..StoreOptions::default()
            },
        )
        .await
        .unwrap();
        store
            .register_repo(NewRepo {
                name: "app".into(),
                source: "/nonexistent".into(),
                branch: None,
                checks: vec![],
                mounts: vec![],
                prepare: vec![],
                created_by: "root".into(),
            })
            .await
            .unwrap();
        let receiver = Receiver::start().await;
        let config = config(
            &[receiver.origin()],
            AddressPolicy::public_and([receiver.address]),
            max_attempts,
        );
        let tokens = Tokens::parse(&format!("alice:operator:{TOKEN}")).unwrap();
        let tasks = TaskService::new(Arc::clone(&store), Arc::new(Notify::new()))
            .with_callbacks(config.clone());
        let state = ApiState::new(tasks, tokens);
        Setup {
            _dir: dir,
            store,
            clock,
            receiver,
            config,
            router: router(Arc::new(state)),
        }
    }

    async fn submit(&self, body: Value) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(Method::POST)
            .uri("/v1/tasks")
            .header("authorization", format!("Bearer {TOKEN}"))
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
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

    /// A queued task, with a callback to the receiver's `/hook` or none.
    async fn task(&self, callback: bool) -> TaskId {
        let mut body = json!({"kind": "question", "repo": "app", "prompt": "what?"});
        if callback {
            body["callback"] = json!({"url": format!("{}/hook", self.receiver.origin())});
        }
        let (status, reply) = self.submit(body).await;
        assert_eq!(status, StatusCode::ACCEPTED, "{reply}");
        reply["id"].as_str().unwrap().parse().unwrap()
    }

    /// What a worker does at the end of a run: the status, stored with `task_finished`.
    async fn finish(&self, task: &TaskId, status: TaskStatus, outcome: &str) {
        let claim = self
            .store
            .claim("worker", Duration::from_secs(60), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&claim.task.id, task);
        self.store
            .finish_run(
                &claim.run(),
                "worker",
                status,
                Some(json!({"task_id": task, "outcome": outcome})),
            )
            .await
            .unwrap();
    }

    fn callbacks(&self) -> Callbacks {
        let client = CallbackClient::new(Arc::new(self.config.clone())).unwrap();
        Callbacks::new(
            Arc::clone(&self.store),
            client,
            Arc::new(self.clock.clone()),
            "serve-test-callbacks".into(),
        )
    }
}

fn check_signature(received: &Received) {
    let timestamp: i64 = received.header("warden-timestamp").parse().unwrap();
    assert_eq!(
        received.header("warden-signature"),
        signature(SECRET.as_bytes(), timestamp, &received.body)
    );
    assert_ne!(
        received.header("warden-signature"),
        signature(
            b"another-secret-0123456789abcdef0123",
            timestamp,
            &received.body
        )
    );
}

#[tokio::test]
async fn a_finished_task_is_called_back_once_signed() {
    let setup = Setup::new(8).await;
    let with = setup.task(true).await;
    let without = setup.task(false).await;
    setup.finish(&with, TaskStatus::Completed, "answer").await;
    setup
        .finish(&without, TaskStatus::Completed, "answer")
        .await;

    let mut callbacks = setup.callbacks();
    let enqueued = callbacks.enqueue_new().await.unwrap();
    assert_eq!(enqueued.new, vec![format!("callback:{with}:completed")]);
    let sent = callbacks.send_due().await.unwrap();
    assert_eq!(sent.delivered, enqueued.new);

    let seen = setup.receiver.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    let request = &seen[0];
    assert_eq!(request.path, "/hook");
    assert_eq!(request.header("content-type"), "application/json");
    assert_eq!(request.header("warden-event-id"), enqueued.new[0]);
    check_signature(request);
    let body = request.json();
    assert_eq!(body["event_id"], enqueued.new[0].as_str());
    assert_eq!(body["task"]["id"], with.as_str());
    assert_eq!(body["task"]["status"], "completed");
    assert_eq!(body["task"]["result"]["outcome"], "answer");
    assert_eq!(body["event"]["type"], "task_finished");
    assert_eq!(body["event"]["status"], "completed");
    assert!(body["event"]["seq"].as_u64().unwrap() >= 1);

    // A second pass, and a restarted dispatcher re-scanning from the start: nothing more.
    assert!(callbacks.enqueue_new().await.unwrap().new.is_empty());
    assert_eq!(callbacks.send_due().await.unwrap().delivered.len(), 0);
    let mut restarted = setup.callbacks();
    let rescan = restarted.enqueue_new().await.unwrap();
    assert!(rescan.new.is_empty(), "{rescan:?}");
    assert_eq!(rescan.existing, 1);
    setup.clock.advance(Duration::from_secs(3600));
    assert_eq!(restarted.send_due().await.unwrap(), Default::default());
    assert_eq!(setup.receiver.seen().len(), 1);
}

#[tokio::test]
async fn waiting_input_is_called_back_and_a_pending_finish_is_waited_for() {
    let setup = Setup::new(8).await;
    let task = setup.task(true).await;
    let claim = setup
        .store
        .claim("worker", Duration::from_secs(60), &ClaimFilter::default())
        .await
        .unwrap()
        .unwrap();
    // The worker emits task_finished just before it records the status: the dispatcher waits
    // for the status instead of skipping the event.
    setup
        .store
        .append_event(
            &task,
            Event::TaskFinished {
                status: TaskStatus::WaitingInput,
                outcome: "clarification".into(),
            },
        )
        .await
        .unwrap();
    let mut callbacks = setup.callbacks();
    let early = callbacks.enqueue_new().await.unwrap();
    assert!(early.waiting && early.new.is_empty(), "{early:?}");
    setup
        .store
        .finish_run(
            &claim.run(),
            "worker",
            TaskStatus::WaitingInput,
            Some(json!({"outcome": "clarification", "clarification": {"question": "which?"}})),
        )
        .await
        .unwrap();
    let enqueued = callbacks.enqueue_new().await.unwrap();
    assert_eq!(enqueued.new.len(), 1, "{enqueued:?}");
    assert!(enqueued.new[0].starts_with(&format!("callback:{task}:waiting_input:")));
    assert_eq!(callbacks.send_due().await.unwrap().delivered, enqueued.new);
    let seen = setup.receiver.seen();
    assert_eq!(seen.len(), 1);
    check_signature(&seen[0]);
    assert_eq!(seen[0].json()["task"]["status"], "waiting_input");

    // Answered and finished for good: a second callback with its own event id.
    setup
        .store
        .answer_task(&task, "the first one", "alice")
        .await
        .unwrap();
    setup.finish(&task, TaskStatus::Failed, "failure").await;
    let enqueued = callbacks.enqueue_new().await.unwrap();
    assert_eq!(enqueued.new, vec![format!("callback:{task}:failed")]);
    callbacks.send_due().await.unwrap();
    let seen = setup.receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].json()["task"]["status"], "failed");

    // A restart re-scans: the old waiting_input event is superseded, nothing is re-sent.
    let mut restarted = setup.callbacks();
    assert!(restarted.enqueue_new().await.unwrap().new.is_empty());
    assert_eq!(restarted.send_due().await.unwrap(), Default::default());
    assert_eq!(setup.receiver.seen().len(), 2);
}

#[tokio::test]
async fn a_failed_delivery_is_retried_with_backoff_then_given_up() {
    let setup = Setup::new(3).await;
    let task = setup.task(true).await;
    setup.finish(&task, TaskStatus::Completed, "answer").await;
    let mut callbacks = setup.callbacks();
    callbacks.enqueue_new().await.unwrap();

    setup.receiver.script(500, None);
    let first = callbacks.send_due().await.unwrap();
    assert_eq!(first.retrying.len(), 1, "{first:?}");
    // Not due yet: nothing is sent until the backoff has passed.
    assert_eq!(callbacks.send_due().await.unwrap(), Default::default());
    assert_eq!(setup.receiver.seen().len(), 1);
    setup.clock.advance(Duration::from_secs(11));
    let second = callbacks.send_due().await.unwrap();
    assert_eq!(second.delivered, first.retrying);
    let seen = setup.receiver.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].body, seen[1].body, "a retry sends the same body");
    assert_eq!(
        seen[0].header("warden-event-id"),
        seen[1].header("warden-event-id")
    );
    check_signature(&seen[1]);

    // Another task whose receiver keeps failing: three attempts, then failed for good.
    let doomed = setup.task(true).await;
    setup.finish(&doomed, TaskStatus::Completed, "answer").await;
    callbacks.enqueue_new().await.unwrap();
    for _ in 0..3 {
        setup.receiver.script(503, None);
    }
    let mut outcomes = Vec::new();
    for _ in 0..4 {
        outcomes.push(callbacks.send_due().await.unwrap());
        setup.clock.advance(Duration::from_secs(3600));
    }
    assert_eq!(outcomes[0].retrying.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[1].retrying.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[2].failed.len(), 1, "{outcomes:?}");
    assert_eq!(outcomes[3], Default::default());
    assert_eq!(setup.receiver.seen().len(), 5);
    let intents = setup.store.list_intents(&doomed).await.unwrap();
    assert_eq!(intents[0].attempts, 3);
    assert!(intents[0].last_error.as_deref().unwrap().contains("503"));
}

#[tokio::test]
async fn submissions_are_checked_at_the_api() {
    let setup = Setup::new(8).await;
    let submit = |url: &str| json!({"kind": "question", "repo": "app", "prompt": "what?", "callback": {"url": url}});
    let port = setup.receiver.address.port();
    for (url, expected) in [
        ("https://hooks.example.com/", "not allow-listed"),
        (
            &format!("http://127.0.0.1:{}/", port + 1) as &str,
            "not a public address",
        ),
        (
            &format!("http://[::ffff:127.0.0.1]:{port}/"),
            "not a public address",
        ),
        (
            "http://169.254.169.254/latest/meta-data",
            "not a public address",
        ),
        ("ftp://hooks.example.com/", "scheme"),
        ("nonsense", "not a valid URL"),
    ] {
        let (status, reply) = setup.submit(submit(url)).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{url}: {reply}");
        assert_eq!(reply["error"]["code"], "invalid_request");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(message.contains(expected), "{url}: {message}");
    }
    let (status, reply) = setup
        .submit(json!({"kind": "question", "repo": "app", "prompt": "p",
                       "callback": {"url": format!("{}/", setup.receiver.origin()), "secret": "x"}}))
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{reply}");

    // A server without a callback secret refuses every callback, saying why.
    let tokens = Tokens::parse(&format!("alice:operator:{TOKEN}")).unwrap();
    let plain = router(Arc::new(ApiState::new(
        TaskService::new(Arc::clone(&setup.store), Arc::new(Notify::new())),
        tokens,
    )));
    let request = Request::builder()
        .method(Method::POST)
        .uri("/v1/tasks")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-type", "application/json")
        .body(Body::from(
            submit(&format!("{}/hook", setup.receiver.origin())).to_string(),
        ))
        .unwrap();
    let response = plain.oneshot(request).await.unwrap();
    assert_eq!(response.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let reply: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(
        reply["error"]["message"]
            .as_str()
            .unwrap()
            .contains("no callback secret"),
        "{reply}"
    );
    assert!(setup.receiver.seen().is_empty());
}

/// Resolves every name to the addresses given.
struct FixedLookup(Vec<std::net::IpAddr>);

impl Lookup for FixedLookup {
    fn lookup(&self, _host: String) -> LookupFuture<'static> {
        let found = self.0.clone();
        Box::pin(async move { Ok(found) })
    }
}

async fn deliver(client: &CallbackClient, url: &str) -> Result<u16, DeliveryError> {
    client
        .deliver(url, "callback:test", b"{}".to_vec(), 1_796_000_000)
        .await
}

#[tokio::test]
async fn the_ssrf_table_is_refused_at_connect_time() {
    let receiver = Receiver::start().await;
    let port = receiver.address.port();
    // Each URL's origin is allow-listed, so only the address check stands in the way.
    let table = [
        format!("http://127.1:{port}/"),
        format!("http://0x7f000001:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://[::1]:{port}/"),
        "http://169.254.169.254/latest/meta-data".to_string(),
        "http://100.64.0.1/".to_string(),
        "http://[fd00::1]/".to_string(),
        "http://10.0.0.1/".to_string(),
        "http://[fe80::1]/".to_string(),
        "http://0.0.0.0/".to_string(),
    ];
    let origins: Vec<String> = table
        .iter()
        .map(|u| {
            reqwest::Url::parse(u)
                .unwrap()
                .origin()
                .ascii_serialization()
        })
        .collect();
    let client =
        CallbackClient::new(Arc::new(config(&origins, AddressPolicy::public_only(), 8))).unwrap();
    for url in &table {
        match deliver(&client, url).await {
            Err(DeliveryError::Refused(message)) => {
                assert!(message.contains("not a public address"), "{url}: {message}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // The test policy admits the receiver's exact address, yet not its IPv4-mapped form.
    let lenient = CallbackClient::new(Arc::new(config(
        &origins,
        AddressPolicy::public_and([receiver.address]),
        8,
    )))
    .unwrap();
    assert!(matches!(
        deliver(&lenient, &format!("http://[::ffff:127.0.0.1]:{port}/")).await,
        Err(DeliveryError::Refused(_))
    ));
    assert!(receiver.seen().is_empty(), "{:?}", receiver.seen());
}

#[tokio::test]
async fn a_name_resolving_to_an_internal_address_is_refused_at_connect_time() {
    let receiver = Receiver::start().await;
    let port = receiver.address.port();
    let origins = vec![
        format!("http://callbacks.example.com:{port}"),
        format!("http://localhost:{port}"),
    ];
    let loopback = Arc::new(FixedLookup(vec!["127.0.0.1".parse().unwrap()]));
    let strict = CallbackClient::with_lookup(
        Arc::new(config(&origins, AddressPolicy::public_only(), 8)),
        loopback.clone(),
    )
    .unwrap();
    match deliver(
        &strict,
        &format!("http://callbacks.example.com:{port}/hook"),
    )
    .await
    {
        Err(DeliveryError::Transport(message)) => assert!(
            message.contains("no public address") && message.contains("127.0.0.1"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }
    // The system resolver goes through the same check.
    let system = CallbackClient::with_lookup(
        Arc::new(config(&origins, AddressPolicy::public_only(), 8)),
        Arc::new(SystemLookup),
    )
    .unwrap();
    match deliver(&system, &format!("http://localhost:{port}/hook")).await {
        Err(DeliveryError::Transport(message)) => {
            assert!(message.contains("no public address"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert!(receiver.seen().is_empty());

    // Control: the same name and resolver reach the receiver once the policy admits it, so
    // the refusal above is the policy's doing.
    let admitted = CallbackClient::with_lookup(
        Arc::new(config(
            &origins,
            AddressPolicy::public_and([receiver.address]),
            8,
        )),
        loopback,
    )
    .unwrap();
    assert_eq!(
        deliver(
            &admitted,
            &format!("http://callbacks.example.com:{port}/hook")
        )
        .await
        .unwrap(),
        200
    );
    assert_eq!(receiver.seen().len(), 1);
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let outside = Receiver::start().await;
    let internal = Receiver::start().await;
    outside.script(302, Some(format!("http://{}/internal", internal.address)));
    // Both are admitted by the address policy and the allow-list: only the refusal to follow
    // redirects keeps the request from the internal one.
    let client = CallbackClient::new(Arc::new(config(
        &[outside.origin(), internal.origin()],
        AddressPolicy::public_and([outside.address, internal.address]),
        8,
    )))
    .unwrap();
    match deliver(&client, &format!("{}/hook", outside.origin())).await {
        Err(DeliveryError::Status(302)) => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(outside.seen().len(), 1);
    assert!(internal.seen().is_empty(), "{:?}", internal.seen());
}

#[tokio::test]
async fn other_outbox_intents_are_left_to_their_owners() {
    let setup = Setup::new(8).await;
    let task = setup.task(true).await;
    setup
        .store
        .enqueue_intent(NewIntent {
            id: "int_publish_apr_x".into(),
            task: task.clone(),
            kind: "publish".into(),
            payload: json!({"url": format!("{}/hook", setup.receiver.origin()), "body": {}}),
        })
        .await
        .unwrap();
    let sent = setup.callbacks().send_due().await.unwrap();
    assert_eq!(sent, Default::default());
    assert!(setup.receiver.seen().is_empty());
    let intents = setup.store.list_intents(&task).await.unwrap();
    assert_eq!(intents[0].status, IntentStatus::Pending);
    assert_eq!(intents[0].last_error, None);
}
