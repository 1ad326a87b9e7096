//! Server-Sent Events (`GET /v1/tasks/{id}/events`, `GET /v1/events`) and `GET /metrics`:
//! through `Router::oneshot` for errors, visibility and the exact wire format, and over a real
//! socket (axum on 127.0.0.1:0, reqwest reading the stream) for live delivery and resuming
//! with `Last-Event-ID` without gaps or duplicates.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiRole, ApiState, Tokens};
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_service::config::serve::RateLimit;
use warden_service::hub::{self, Hub, HubOptions};
use warden_service::tasks::TaskService;
use warden_store::new_task_id;
use warden_store::{ClaimFilter, NewTask, Store, UsageEntry};

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";

struct Events {
    router: Router,
    /// The store the hub observes: what it stores reaches the hub at once.
    store: Arc<dyn Store>,
    /// The same database opened again, as another process would: what it stores reaches the
    /// hub by reading the store.
    inner: Arc<dyn Store>,
    hub: Arc<Hub>,
    _dir: tempfile::TempDir,
}

impl Events {
    async fn new() -> Events {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("warden.db").display());
        let store = warden_store::open(&url).await.unwrap();
        let inner = warden_store::open(&url).await.unwrap();
        let hub = hub::instrument(
            &store,
            HubOptions {
                ring_capacity: 64,
                poll_interval: Duration::from_millis(50),
                keep_alive: Duration::from_millis(200),
            },
        );
        let tokens = Tokens::parse(&format!(
            "root:admin:{ADMIN},alice:operator:{ALICE},bob:operator:{BOB}"
        ))
        .unwrap();
        let state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )
        .with_hub(Arc::clone(&hub));
        Events {
            router: router(Arc::new(state)),
            store,
            inner,
            hub,
            _dir: dir,
        }
    }

    async fn task(&self, owner: &str) -> TaskId {
        let id = new_task_id().unwrap();
        self.store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind: TaskKind::Question,
                    owner: owner.to_string(),
                    prompt: "why?".into(),
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
        id
    }

    async fn append(&self, task: &TaskId, text: &str) -> u64 {
        self.store
            .append_event(task, Event::AgentMessage { text: text.into() })
            .await
            .unwrap()
            .seq
    }

    async fn cancel(&self, task: &TaskId) {
        self.store
            .transition(task, TaskStatus::Queued, TaskStatus::Cancelled, None)
            .await
            .unwrap();
    }

    async fn request(&self, uri: &str, token: Option<&str>, headers: &[(&str, &str)]) -> Reply {
        let mut request = Request::builder().uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        Reply {
            status: response.status(),
            content_type: response
                .headers()
                .get("content-type")
                .map(|v| v.to_str().unwrap().to_string())
                .unwrap_or_default(),
            body: response.into_body(),
        }
    }
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: Body,
}

impl Reply {
    /// The whole body (the stream must end).
    async fn text(self) -> String {
        let bytes = tokio::time::timeout(
            Duration::from_secs(20),
            axum::body::to_bytes(self.body, usize::MAX),
        )
        .await
        .expect("the stream did not end")
        .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    async fn error_code(self) -> String {
        let text = self.text().await;
        let body: Value = serde_json::from_str(&text).unwrap();
        body["error"]["code"].as_str().unwrap().to_string()
    }
}

/// One SSE message: `id`, `event`, `data` as JSON.
#[derive(Debug)]
struct Message {
    id: u64,
    event: String,
    data: Value,
}

/// Splits complete messages off the front of `buffer`; comments are returned as `None`.
fn take_messages(buffer: &mut String) -> Vec<Option<Message>> {
    let mut out = Vec::new();
    while let Some(end) = buffer.find("\n\n") {
        let block: String = buffer.drain(..end + 2).collect();
        let block = block.trim_end_matches('\n');
        if block.starts_with(':') {
            assert_eq!(block, ": keep-alive");
            out.push(None);
            continue;
        }
        let lines: Vec<&str> = block.split('\n').collect();
        assert_eq!(lines.len(), 3, "{block:?}");
        let id = lines[0].strip_prefix("id: ").expect(block).parse().unwrap();
        let event = lines[1].strip_prefix("event: ").expect(block).to_string();
        let data = serde_json::from_str(lines[2].strip_prefix("data: ").expect(block)).unwrap();
        out.push(Some(Message { id, event, data }));
    }
    out
}

fn messages(text: &str) -> Vec<Message> {
    let mut buffer = text.to_string();
    let messages = take_messages(&mut buffer).into_iter().flatten().collect();
    assert!(buffer.is_empty(), "a partial message: {buffer:?}");
    messages
}

#[tokio::test]
async fn event_routes_need_a_token_and_hide_other_owners_tasks() {
    let api = Events::new().await;
    let task = api.task("alice").await;
    let path = format!("/v1/tasks/{task}/events");
    for uri in [path.as_str(), "/v1/events", "/metrics"] {
        let reply = api.request(uri, None, &[]).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{uri}");
        assert_eq!(reply.error_code().await, "unauthorized");
        let reply = api.request(uri, Some("wrong-token-0123456789"), &[]).await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{uri}");
    }
    // Bob does not see Alice's task; nobody sees a task that does not exist.
    for (uri, token) in [
        (path.clone(), BOB),
        (
            "/v1/tasks/tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9/events".into(),
            ADMIN,
        ),
        ("/v1/tasks/nonsense/events".into(), ADMIN),
    ] {
        let reply = api.request(&uri, Some(token), &[]).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{uri}");
        assert_eq!(reply.content_type, "application/json");
        assert_eq!(reply.error_code().await, "not_found");
    }
    for (uri, headers) in [
        (path.as_str(), vec![("last-event-id", "x")]),
        ("/v1/events", vec![("last-event-id", "-1")]),
        ("/v1/events?after=abc", vec![]),
        ("/v1/events?since=1", vec![]),
    ] {
        let reply = api.request(uri, Some(ALICE), &headers).await;
        assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{uri} {headers:?}");
        assert_eq!(reply.error_code().await, "bad_request");
    }
}

#[tokio::test]
async fn a_finished_tasks_stream_replays_every_event_in_the_wire_format_and_ends() {
    let api = Events::new().await;
    let other = api.task("bob").await;
    let task = api.task("alice").await;
    api.append(&other, "not yours").await;
    let first = api.append(&task, "one").await;
    api.append(&task, "two\nlines").await;
    // Cancelling stores task_finished with the status.
    api.cancel(&task).await;

    let reply = api
        .request(&format!("/v1/tasks/{task}/events"), Some(ALICE), &[])
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    assert_eq!(reply.content_type, "text/event-stream");
    let text = reply.text().await;
    // The exact framing of the first message, then all of them parsed.
    let record = api
        .inner
        .events_after(&warden_store::EventStream::Task(task.clone()), 0, 1)
        .await
        .unwrap()
        .remove(0);
    let expected_first = format!(
        "id: 1\nevent: agent_message\ndata: {{\"seq\":{first},\"task_seq\":1,\"task\":\"{task}\",\"at\":\"{}\",\"event\":{{\"type\":\"agent_message\",\"text\":\"one\"}}}}\n\n",
        warden_time::rfc3339(record.at_ms)
    );
    assert!(
        text.starts_with(&expected_first),
        "{text}\n---\n{expected_first}"
    );
    let all = messages(&text);
    assert_eq!(
        all.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![1, 2, 3],
        "{text}"
    );
    assert_eq!(
        all.iter().map(|m| m.event.as_str()).collect::<Vec<_>>(),
        vec!["agent_message", "agent_message", "task_finished"]
    );
    assert_eq!(all[1].data["event"]["text"], "two\nlines");
    assert_eq!(all[1].data["seq"], first + 1);
    assert_eq!(all[2].data["event"]["status"], "cancelled");
    assert!(all.iter().all(|m| m.data["task"] == task.as_str()));

    // Resuming: strictly after the id given; the header wins over the query.
    for headers in [vec![("last-event-id", "2")], vec![]] {
        let uri = if headers.is_empty() {
            format!("/v1/tasks/{task}/events?after=2")
        } else {
            format!("/v1/tasks/{task}/events?after=0")
        };
        let text = api.request(&uri, Some(ALICE), &headers).await.text().await;
        let ids: Vec<u64> = messages(&text).iter().map(|m| m.id).collect();
        assert_eq!(ids, vec![3], "{uri}");
    }
    // Past the end: nothing, and still the end.
    let text = api
        .request(
            &format!("/v1/tasks/{task}/events"),
            Some(ADMIN),
            &[("last-event-id", "3")],
        )
        .await
        .text()
        .await;
    assert_eq!(text, "");
}

/// Reads messages from `body` until `enough` says so (keep-alives skipped, counted).
async fn read_until(
    stream: &mut (impl futures_util::Stream<Item = Result<axum::body::Bytes, impl std::fmt::Debug>>
              + Unpin),
    buffer: &mut String,
    mut enough: impl FnMut(&[Message]) -> bool,
) -> (Vec<Message>, usize) {
    let mut got = Vec::new();
    let mut keep_alives = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !enough(&got) {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("not enough messages within 30 s: {got:?}"))
            .expect("the stream ended")
            .unwrap();
        buffer.push_str(std::str::from_utf8(&chunk).unwrap());
        for message in take_messages(buffer) {
            match message {
                Some(message) => got.push(message),
                None => keep_alives += 1,
            }
        }
    }
    (got, keep_alives)
}

#[tokio::test]
async fn the_global_stream_shows_admins_everything_and_others_their_own() {
    let api = Events::new().await;
    let alices = api.task("alice").await;
    let bobs = api.task("bob").await;
    let before = api.append(&alices, "before").await;

    let mut streams = Vec::new();
    for (token, uri) in [
        (ADMIN, "/v1/events".to_string()),
        (ALICE, "/v1/events".to_string()),
        (BOB, format!("/v1/events?after={}", before - 1)),
    ] {
        let reply = api.request(&uri, Some(token), &[]).await;
        assert_eq!(reply.status, StatusCode::OK);
        assert_eq!(reply.content_type, "text/event-stream");
        streams.push(reply.body.into_data_stream());
    }
    let a1 = api.append(&alices, "a1").await;
    let b1 = api.append(&bobs, "b1").await;
    // Appended as another process would: not through this server's store.
    let a2 = api
        .inner
        .append_event(&alices, Event::AgentMessage { text: "a2".into() })
        .await
        .unwrap()
        .seq;

    let mut buffer = String::new();
    let (admin, _) = read_until(&mut streams[0], &mut buffer, |m| m.len() >= 3).await;
    assert_eq!(
        admin.iter().map(|m| m.id).collect::<Vec<_>>(),
        vec![a1, b1, a2],
        "without a cursor the stream starts at the end"
    );
    assert_eq!(admin[1].data["task"], bobs.as_str());
    assert_eq!(admin[1].data["seq"], b1);
    let mut buffer = String::new();
    let (alice, _) = read_until(&mut streams[1], &mut buffer, |m| m.len() >= 2).await;
    assert_eq!(alice.iter().map(|m| m.id).collect::<Vec<_>>(), vec![a1, a2]);
    // Bob, from before Alice's first event: only his own.
    let b2 = api.append(&bobs, "b2").await;
    let mut buffer = String::new();
    let (bob, _) = read_until(&mut streams[2], &mut buffer, |m| m.len() >= 2).await;
    assert_eq!(bob.iter().map(|m| m.id).collect::<Vec<_>>(), vec![b1, b2]);
    assert!(buffer.is_empty());
}

#[tokio::test]
async fn idle_streams_keep_alive_and_end_when_the_hub_closes() {
    let api = Events::new().await;
    let task = api.task("alice").await;
    let reply = api
        .request(&format!("/v1/tasks/{task}/events"), Some(ALICE), &[])
        .await;
    let mut stream = reply.body.into_data_stream();
    let mut buffer = String::new();
    let chunk = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    buffer.push_str(std::str::from_utf8(&chunk).unwrap());
    assert_eq!(buffer, ": keep-alive\n\n");
    api.hub.close();
    let end = tokio::time::timeout(Duration::from_secs(20), stream.next())
        .await
        .unwrap();
    assert!(end.is_none(), "{end:?}");
}

#[tokio::test]
async fn metrics_count_tasks_events_spend_and_requests() {
    let api = Events::new().await;
    let task = api.task("alice").await;
    api.task("alice").await;
    api.cancel(&task).await;
    for (tool, ok) in [("shell", true), ("shell", false), ("read_file", true)] {
        api.store
            .append_event(
                &task,
                Event::ToolFinished {
                    call_id: "c".into(),
                    tool: tool.into(),
                    ok,
                    summary: String::new(),
                    note: None,
                },
            )
            .await
            .unwrap();
    }
    for cost in [Some(1_500_000), None] {
        api.store
            .record_usage(UsageEntry {
                task: task.clone(),
                run_number: None,
                model: "gpt-x".into(),
                role: "agent".into(),
                input_tokens: 100,
                cached_input_tokens: 10,
                output_tokens: 7,
                cost_micro_usd: cost,
            })
            .await
            .unwrap();
    }
    let running = api.task("bob").await;
    let claim = api
        .store
        .claim("w1", Duration::from_secs(60), &ClaimFilter::default())
        .await
        .unwrap()
        .unwrap();
    assert_ne!(
        claim.task.id, running,
        "the oldest queued task is claimed first"
    );
    for _ in 0..2 {
        let reply = api
            .request(&format!("/v1/tasks/{task}"), Some(ALICE), &[])
            .await;
        assert_eq!(reply.status, StatusCode::OK);
    }
    api.request(
        "/v1/tasks/tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9/events",
        Some(ALICE),
        &[],
    )
    .await;
    api.request("/no/such/route", Some(ALICE), &[]).await;
    // One stream open, one opened and closed.
    let open = api.request("/v1/events", Some(ALICE), &[]).await;
    drop(api.request("/v1/events", Some(ALICE), &[]).await);

    let reply = api.request("/metrics", Some(BOB), &[]).await;
    assert_eq!(reply.status, StatusCode::OK);
    assert!(reply.content_type.starts_with("text/plain; version=0.0.4"));
    let text = reply.text().await;
    for line in [
        "# TYPE warden_tasks gauge",
        "warden_tasks{status=\"queued\"} 1",
        "warden_tasks{status=\"running\"} 1",
        "warden_tasks{status=\"cancelled\"} 1",
        "warden_tasks{status=\"completed\"} 0",
        "# TYPE warden_runs_started_total counter",
        "warden_runs_started_total 1",
        "# TYPE warden_events_total counter",
        // The cancel's `task_finished` and the three tool events.
        "warden_events_total 4",
        "# TYPE warden_event_streams gauge",
        "warden_event_streams 1",
        "# TYPE warden_model_calls_total counter",
        "warden_model_calls_total{model=\"gpt-x\"} 2",
        "warden_model_input_tokens_total{model=\"gpt-x\"} 200",
        "warden_model_cached_input_tokens_total{model=\"gpt-x\"} 20",
        "warden_model_output_tokens_total{model=\"gpt-x\"} 14",
        "warden_model_unpriced_calls_total{model=\"gpt-x\"} 1",
        "# TYPE warden_model_cost_usd_total counter",
        "warden_model_cost_usd_total{model=\"gpt-x\"} 1.5",
        "# TYPE warden_tool_calls_total counter",
        "warden_tool_calls_total{tool=\"shell\",ok=\"true\"} 1",
        "warden_tool_calls_total{tool=\"shell\",ok=\"false\"} 1",
        "warden_tool_calls_total{tool=\"read_file\",ok=\"true\"} 1",
        "# TYPE warden_sandbox_starts_total counter",
        "# TYPE warden_sandbox_start_seconds histogram",
        "# TYPE warden_http_requests_total counter",
        "warden_http_requests_total{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"200\"} 2",
        "warden_http_requests_total{method=\"GET\",route=\"/v1/tasks/{id}/events\",status=\"404\"} 1",
        "warden_http_requests_total{method=\"GET\",route=\"unmatched\",status=\"404\"} 1",
        "# TYPE warden_http_request_duration_seconds histogram",
        "warden_http_request_duration_seconds_count{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"200\"} 2",
        "warden_http_request_duration_seconds_bucket{method=\"GET\",route=\"/v1/tasks/{id}\",status=\"200\",le=\"+Inf\"} 2",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // Every sample line belongs to a declared metric.
    let declared: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| l.split(' ').next().unwrap())
        .collect();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let name = line.split(['{', ' ']).next().unwrap();
        assert!(
            declared.iter().any(|d| name == *d
                || name
                    .strip_prefix(d)
                    .is_some_and(|rest| { ["_bucket", "_sum", "_count"].contains(&rest) })),
            "{line}"
        );
    }
    drop(open);
}

// --- over a real socket ---

async fn serve(api: &Events) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let router = api.router.clone();
    tokio::spawn(async move { axum::serve(listener, router).await });
    format!("http://{address}")
}

async fn connect(
    client: &reqwest::Client,
    url: &str,
    last_event_id: Option<u64>,
) -> impl futures_util::Stream<Item = Result<axum::body::Bytes, reqwest::Error>> + Unpin {
    let mut request = client.get(url).bearer_auth(ALICE);
    if let Some(id) = last_event_id {
        request = request.header("last-event-id", id.to_string());
    }
    let response = request.send().await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"],
        "text/event-stream",
        "{:?}",
        response.headers()
    );
    Box::pin(response.bytes_stream())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_socket_streams_resume_with_last_event_id_without_gaps_or_duplicates() {
    // More than a batch is left for the replay of the finished task at the end.
    const EVENTS: u64 = 600;
    let api = Events::new().await;
    let base = serve(&api).await;
    let task = api.task("alice").await;
    let client = reqwest::Client::new();
    let task_url = format!("{base}/v1/tasks/{task}/events");
    let all_url = format!("{base}/v1/events?after=0");

    // Appended while the clients read, some through this server and some as another process
    // would; more than the ring holds, so readers fall behind it too.
    let store = Arc::clone(&api.store);
    let inner = Arc::clone(&api.inner);
    let appender_task = task.clone();
    let appender = tokio::spawn(async move {
        for n in 1..=EVENTS {
            let event = Event::AgentMessage {
                text: format!("event {n}"),
            };
            let target = if n % 7 == 0 { &inner } else { &store };
            target.append_event(&appender_task, event).await.unwrap();
            if n % 10 == 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    // The task's stream: read a while, hang up, resume with Last-Event-ID, three times.
    let mut task_ids = Vec::new();
    let mut all_ids = Vec::new();
    for round in 0..3 {
        let mut stream = connect(&client, &task_url, task_ids.last().copied()).await;
        let mut buffer = String::new();
        let target = (round + 1) * 40;
        let (got, _) = read_until(&mut stream, &mut buffer, |m| {
            task_ids.len() + m.len() >= target
        })
        .await;
        for message in &got {
            assert_eq!(message.data["task_seq"], message.id);
        }
        task_ids.extend(got.iter().map(|m| m.id));
        drop(stream);

        let mut stream = connect(&client, &all_url, all_ids.last().copied()).await;
        let mut buffer = String::new();
        let (got, _) = read_until(&mut stream, &mut buffer, |m| {
            all_ids.len() + m.len() >= target
        })
        .await;
        for message in &got {
            assert_eq!(message.data["seq"], message.id);
        }
        all_ids.extend(got.iter().map(|m| m.id));
    }
    appender.await.unwrap();
    // The rest: the global stream up to the last event, the task's until it ends.
    let mut stream = connect(&client, &all_url, all_ids.last().copied()).await;
    let mut buffer = String::new();
    let missing = EVENTS as usize - all_ids.len();
    let (got, _) = read_until(&mut stream, &mut buffer, |m| m.len() >= missing).await;
    all_ids.extend(got.iter().map(|m| m.id));

    api.cancel(&task).await;
    let response = client
        .get(&task_url)
        .bearer_auth(ALICE)
        .header("last-event-id", task_ids.last().unwrap().to_string())
        .send()
        .await
        .unwrap();
    let text = tokio::time::timeout(Duration::from_secs(20), response.text())
        .await
        .expect("the stream of a finished task ends")
        .unwrap();
    task_ids.extend(messages(&text).iter().map(|m| m.id));

    let expected: Vec<u64> = (1..=EVENTS).collect();
    // The cancel stored the task's task_finished after them.
    let finished: Vec<u64> = (1..=EVENTS + 1).collect();
    assert_eq!(task_ids, finished, "the task's stream");
    assert_eq!(all_ids, expected, "the global stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_a_socket_a_live_task_stream_ends_when_the_task_finishes() {
    let api = Events::new().await;
    let base = serve(&api).await;
    let task = api.task("alice").await;
    let client = reqwest::Client::new();
    let response = client
        .get(format!("{base}/v1/tasks/{task}/events"))
        .bearer_auth(ALICE)
        .send()
        .await
        .unwrap();
    let reader = tokio::spawn(async move {
        tokio::time::timeout(Duration::from_secs(20), response.text()).await
    });
    api.append(&task, "working").await;
    // Cancelling stores task_finished with the status.
    api.cancel(&task).await;
    let text = reader.await.unwrap().expect("the stream ended").unwrap();
    let events: Vec<String> = messages(&text).into_iter().map(|m| m.event).collect();
    assert_eq!(events, vec!["agent_message", "task_finished"], "{text}");
}

#[tokio::test]
async fn a_revoked_tokens_open_stream_ends_before_the_next_message() {
    let api = Events::new().await;
    let (row, secret) =
        warden_service::access::mint_token(Some("carol"), ApiRole::Operator, "root").unwrap();
    let token_id = row.id.clone();
    api.store.create_api_token(row).await.unwrap();
    let tokens = Tokens::parse(&format!("root:admin:{ADMIN}")).unwrap();
    // Checked before every message and keep-alive; a burst of two requests per token.
    let state = ApiState::new(
        TaskService::new(Arc::clone(&api.store), Arc::new(Notify::new())),
        tokens,
    )
    .with_hub(Arc::clone(&api.hub))
    .with_stream_recheck(Duration::ZERO)
    .with_rate_limit(RateLimit {
        per_minute: 1,
        burst: 2,
    });
    let router = router(Arc::new(state));
    let send = |method: &str, uri: String, token: &str| {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        router.clone().oneshot(request)
    };
    let task = api.task("carol").await;
    let response = send("GET", "/v1/events".into(), &secret).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let mut stream = response.into_body().into_data_stream();
    let before = api.append(&task, "before revoking").await;
    let mut buffer = String::new();
    let (got, _) = read_until(&mut stream, &mut buffer, |m| !m.is_empty()).await;
    assert_eq!(got[0].id, before);
    // The stream's checks charged nothing: the second request of the burst still passes.
    let reply = send("GET", format!("/v1/tasks/{task}"), &secret)
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);

    let reply = send("DELETE", format!("/v1/tokens/{token_id}"), ADMIN)
        .await
        .unwrap();
    assert_eq!(reply.status(), StatusCode::OK);
    api.append(&task, "after revoking").await;
    // Keep-alives come every 200 ms, so the deadline is for the whole rest of the stream.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut rest = String::new();
    while let Some(chunk) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .unwrap_or_else(|_| panic!("the revoked token's stream did not end: {rest:?}"))
    {
        rest.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        assert!(
            !rest.contains("id: "),
            "a message after the revocation: {rest:?}"
        );
    }
}

#[tokio::test]
async fn an_event_redaction_breaks_is_withheld_from_the_store_and_the_stream() {
    let api = Events::new().await;
    let task = api.task("alice").await;
    // A registered secret that is also the event's type tag: redacted string by string, the
    // event is no event any more. It must not be stored as it was.
    let secret = "agent_message";
    let redactor = warden_engine::redact::Redactor::new([secret.to_string()]);
    let (sink, drain) =
        warden_service::journal::store_events(Arc::clone(&api.store), task.clone(), redactor);
    use warden_runtime::EventSink;
    sink.emit(Event::AgentMessage {
        text: format!("the key is {secret}"),
    });
    sink.emit(Event::ToolStarted {
        call_id: "c1".into(),
        tool: "search".into(),
        summary: "search sk".into(),
    });
    assert_eq!(drain.finish(sink).await, 0);

    let stored = api
        .store
        .events_after(&warden_store::EventStream::Task(task.clone()), 0, 100)
        .await
        .unwrap();
    let kinds: Vec<Event> = stored.into_iter().map(|record| record.event).collect();
    assert_eq!(kinds[0], Event::RedactionFailed);
    assert!(matches!(kinds[1], Event::ToolStarted { .. }), "{kinds:?}");

    api.cancel(&task).await;
    let reply = api
        .request(&format!("/v1/tasks/{task}/events"), Some(ALICE), &[])
        .await;
    assert_eq!(reply.status, StatusCode::OK);
    let text = reply.text().await;
    assert!(!text.contains(secret), "{text}");
    let shown = messages(&text);
    assert_eq!(shown[0].event, "redaction_failed");
    assert_eq!(shown[0].data["event"], json!({"type": "redaction_failed"}));
}
