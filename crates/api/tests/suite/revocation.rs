//! Revocation ends open event streams at once: for each trigger (`DELETE /v1/sessions/{id}`,
//! the console's sign-out, a new password — set in this process or by another one, as
//! `warden web passwd` does — and a token's revocation), a `/v1/events` or task event stream
//! opened before ends promptly after it and delivers no event of a task created after it. The
//! periodic re-check is set to an hour, so only the revocation can end the streams.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::{Request, StatusCode};
use axum::Router;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_protocol::{Event, TaskId, TaskKind};
use warden_service::access::Access;
use warden_service::hub::{self, HubOptions};
use warden_service::tasks::{Principal, Role, TaskService};
use warden_store::{new_task_id, NewTask, Store};

const ADMIN: &str = "admin-token-0123456789-0123456789";
const PASSWORD: &str = "correct horse battery";
/// A bound for "ends", generous for a loaded machine (the store poll is 50 ms).
const ENDS_WITHIN: Duration = Duration::from_secs(20);

struct Server {
    router: Router,
    state: Arc<ApiState>,
    store: Arc<dyn Store>,
    /// The same database opened again, as `warden web passwd` would.
    other_process: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

/// How a stream authenticates.
enum Credential {
    Bearer(String),
    Cookie(String),
}

impl Server {
    async fn new() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("warden.db").display());
        let store = warden_store::open(&url).await.unwrap();
        let other_process = warden_store::open(&url).await.unwrap();
        let hub = hub::instrument(
            &store,
            HubOptions {
                ring_capacity: 64,
                poll_interval: Duration::from_millis(50),
                keep_alive: Duration::from_millis(200),
            },
        );
        let tokens = Tokens::parse(&format!("root:admin:{ADMIN}")).unwrap();
        let mut state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )
        .with_hub(hub)
        // Only a revocation can end a stream within the test.
        .with_stream_recheck(Duration::from_secs(3600));
        state.access = state
            .access
            .clone()
            .with_revocation_poll(Duration::from_millis(50));
        let state = Arc::new(state);
        Server {
            router: router(Arc::clone(&state)),
            state,
            store,
            other_process,
            _dir: dir,
        }
    }

    async fn send(&self, request: Request<Body>) -> axum::response::Response {
        self.router.clone().oneshot(request).await.unwrap()
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

    async fn append(&self, task: &TaskId, text: &str) {
        self.store
            .append_event(task, Event::AgentMessage { text: text.into() })
            .await
            .unwrap();
    }

    /// A password session of `name` (an operator), as the `Cookie` header.
    async fn password_session(&self, name: &str) -> (String, String) {
        self.state
            .access
            .set_password(name, "operator", PASSWORD)
            .await
            .unwrap();
        let signed = self
            .state
            .access
            .sign_in_password(name, PASSWORD, None, None)
            .await
            .unwrap();
        (
            signed.session_id,
            format!("warden_session={}", signed.secret),
        )
    }

    /// Opens `uri` (an event stream) with `credential`, and reads it until it carries the
    /// message of an event appended to `task` now: the stream is live.
    async fn open_live(&self, uri: &str, credential: &Credential, task: &TaskId) -> BodyDataStream {
        let request = Request::builder().uri(uri);
        let request = match credential {
            Credential::Bearer(token) => request.header("authorization", format!("Bearer {token}")),
            Credential::Cookie(cookie) => request.header("cookie", cookie),
        };
        let response = self.send(request.body(Body::empty()).unwrap()).await;
        assert_eq!(response.status(), StatusCode::OK, "{uri}");
        let mut stream = response.into_body().into_data_stream();
        self.append(task, "before the revocation").await;
        let mut text = String::new();
        while !text.contains("before the revocation") {
            let chunk = tokio::time::timeout(ENDS_WITHIN, stream.next())
                .await
                .unwrap_or_else(|_| panic!("{uri}: no message within the bound: {text:?}"))
                .expect("the stream ended early")
                .unwrap();
            text.push_str(std::str::from_utf8(&chunk).unwrap());
        }
        stream
    }
}

/// Reads the rest of `stream`: it must end within the bound and carry no event appended after
/// the revocation (their texts say `AFTER`).
async fn assert_ends_silently(what: &str, mut stream: BodyDataStream) {
    let deadline = tokio::time::Instant::now() + ENDS_WITHIN;
    let mut rest = String::new();
    while let Some(chunk) = tokio::time::timeout_at(deadline, stream.next())
        .await
        .unwrap_or_else(|_| panic!("{what}: the stream did not end: {rest:?}"))
    {
        rest.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
    }
    assert!(
        !rest.contains("AFTER"),
        "{what}: an event appended after the revocation: {rest:?}"
    );
}

/// Opens a global and a task stream with `credential` (owned by `owner`), runs `revoke`, then
/// creates a task and appends to both: both streams end and carry nothing more.
async fn streams_end_on<F, Fut>(
    server: &Server,
    what: &str,
    owner: &str,
    credential: Credential,
    revoke: F,
) where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let running = server.task(owner).await;
    let global = server.open_live("/v1/events", &credential, &running).await;
    let task_stream = server
        .open_live(
            &format!("/v1/tasks/{running}/events"),
            &credential,
            &running,
        )
        .await;
    revoke().await;
    let created_after = server.task(owner).await;
    server.append(&created_after, "a task created AFTER").await;
    server
        .append(&running, "more of the running task, AFTER")
        .await;
    let (global_name, task_name) = (
        format!("{what}: /v1/events"),
        format!("{what}: the task's stream"),
    );
    tokio::join!(
        assert_ends_silently(&global_name, global),
        assert_ends_silently(&task_name, task_stream),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_session_ends_its_streams_at_once() {
    let server = Server::new().await;
    let (id, cookie) = server.password_session("dave").await;
    // Another session of the same user is not ended by it.
    let (_, kept) = server.password_session_again("dave").await;
    let running = server.task("dave").await;
    let survivor = server
        .open_live("/v1/events", &Credential::Cookie(kept), &running)
        .await;
    streams_end_on(
        &server,
        "DELETE /v1/sessions",
        "dave",
        Credential::Cookie(cookie),
        || async {
            let reply = server
                .send(
                    Request::builder()
                        .method("DELETE")
                        .uri(format!("/v1/sessions/{id}"))
                        .header("authorization", format!("Bearer {ADMIN}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await;
            assert_eq!(reply.status(), StatusCode::OK);
        },
    )
    .await;
    let mut survivor = survivor;
    server.append(&running, "still served").await;
    let mut text = String::new();
    while !text.contains("still served") {
        let chunk = tokio::time::timeout(ENDS_WITHIN, survivor.next())
            .await
            .expect("the other session's stream goes on")
            .expect("the other session's stream ended")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_out_ends_the_sessions_streams_at_once() {
    let server = Server::new().await;
    let (_, cookie) = server.password_session("erin").await;
    let sign_out_cookie = cookie.clone();
    streams_end_on(
        &server,
        "sign-out",
        "erin",
        Credential::Cookie(cookie),
        || async {
            let reply = server
                .send(
                    Request::builder()
                        .method("POST")
                        .uri("/sign-out")
                        .header("cookie", sign_out_cookie)
                        .header("sec-fetch-site", "same-origin")
                        .body(Body::empty())
                        .unwrap(),
                )
                .await;
            assert_eq!(reply.status(), StatusCode::SEE_OTHER);
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_password_ends_the_users_password_session_streams_at_once() {
    let server = Server::new().await;
    let (_, cookie) = server.password_session("frank").await;
    streams_end_on(
        &server,
        "a new password",
        "frank",
        Credential::Cookie(cookie),
        || async {
            server
                .state
                .access
                .set_password("frank", "operator", "another good password")
                .await
                .unwrap();
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_set_by_another_process_ends_the_streams_within_the_store_poll() {
    let server = Server::new().await;
    let (_, cookie) = server.password_session("grace").await;
    let running = server.task("grace").await;
    let stream = server
        .open_live("/v1/events", &Credential::Cookie(cookie), &running)
        .await;
    // `warden web passwd` opens the database itself: this server hears of it only by
    // reading the store.
    Access::new(Arc::clone(&server.other_process), Tokens::default())
        .set_password("grace", "operator", "another good password")
        .await
        .unwrap();
    assert_ends_silently("a password set by another process", stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoking_a_token_ends_its_streams_and_its_sessions_streams_at_once() {
    let server = Server::new().await;
    let root = Principal {
        name: "root".into(),
        role: Role::Admin,
    };
    let created = server
        .state
        .access
        .create_token(&root, "operator", Some("heidi"))
        .await
        .unwrap();
    let session = server
        .state
        .access
        .sign_in_token(&created.secret, None, None)
        .await
        .unwrap();
    let running = server.task("heidi").await;
    let session_stream = server
        .open_live(
            "/v1/events",
            &Credential::Cookie(format!("warden_session={}", session.secret)),
            &running,
        )
        .await;
    let token_id = created.token.id.clone();
    streams_end_on(
        &server,
        "a token's revocation",
        "heidi",
        Credential::Bearer(created.secret.clone()),
        || async {
            let reply = server
                .send(
                    Request::builder()
                        .method("DELETE")
                        .uri(format!("/v1/tokens/{token_id}"))
                        .header("authorization", format!("Bearer {ADMIN}"))
                        .body(Body::empty())
                        .unwrap(),
                )
                .await;
            assert_eq!(reply.status(), StatusCode::OK);
        },
    )
    .await;
    assert_ends_silently("the revoked token's console session", session_stream).await;
}

impl Server {
    /// A second password session of `name`, whose password is already set.
    async fn password_session_again(&self, name: &str) -> (String, String) {
        let signed = self
            .state
            .access
            .sign_in_password(name, PASSWORD, None, None)
            .await
            .unwrap();
        (
            signed.session_id,
            format!("warden_session={}", signed.secret),
        )
    }
}
