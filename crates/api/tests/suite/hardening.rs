//! Input the API must refuse cleanly, through `Router::oneshot`: every route authenticates
//! before it reads its path or body (an anonymous caller gets 401 whatever it sends, and its
//! body is never read, so an oversized one is 401 too), unreadable path parameters are JSON
//! 404s after authentication, and NUL characters in what is stored as text (a prompt, a
//! message, metadata) are 422 `invalid_request` naming the field — on SQLite, and on Postgres
//! (which refuses NUL in TEXT and JSONB) when `WARDEN_TEST_POSTGRES_URL` is set.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens, MAX_BODY_BYTES};
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_service::config::serve::RateLimit;
use warden_service::tasks::TaskService;
use warden_store::new_task_id;
use warden_store::{ClaimFilter, NewTask, Store};
use warden_test_support::git_fixture::TempRepo;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";

struct Api {
    router: Router,
    store: Arc<dyn Store>,
}

struct Reply {
    status: StatusCode,
    content_type: String,
    body: Value,
}

impl Reply {
    fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
    fn message(&self) -> &str {
        self.body["error"]["message"].as_str().unwrap_or_default()
    }
}

impl Api {
    fn new(store: Arc<dyn Store>, limit: RateLimit) -> Api {
        let tokens = Tokens::parse(&format!("root:admin:{ADMIN},alice:operator:{ALICE}")).unwrap();
        // These tests fail authentication on purpose, many times over.
        let state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )
        .with_rate_limit(limit)
        .with_auth_failure_limit(RateLimit {
            per_minute: 100_000,
            burst: 100_000,
        });
        Api {
            router: router(Arc::new(state)),
            store,
        }
    }

    async fn sqlite(dir: &tempfile::TempDir) -> Api {
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        Api::new(store, RateLimit::default())
    }

    async fn send(
        &self,
        method: Method,
        uri: &str,
        token: Option<&str>,
        body: impl Into<Body>,
    ) -> Reply {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let request = request
            .header("content-type", "application/json")
            .body(body.into())
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            content_type,
            body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        }
    }

    /// A question of alice's, run once into `status` with `result`.
    async fn finished_question(&self, status: TaskStatus, result: fn(&TaskId) -> Value) -> TaskId {
        let id = new_task_id().unwrap();
        self.store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind: TaskKind::Question,
                    owner: "alice".into(),
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
        let claim = self
            .store
            .claim("w", Duration::from_secs(30), &ClaimFilter::default())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(claim.task.id, id);
        self.store
            .finish_run(&claim.run(), "w", status, Some(result(&id)))
            .await
            .unwrap();
        id
    }
}

fn check_error(reply: &Reply, status: StatusCode, code: &str, context: &str) {
    assert_eq!(reply.status, status, "{context}: {}", reply.body);
    assert_eq!(reply.content_type, "application/json", "{context}");
    assert_eq!(reply.code(), code, "{context}: {}", reply.body);
    assert!(!reply.message().is_empty(), "{context}");
}

const TASK: &str = "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9";

/// Every route that takes a JSON body.
fn body_routes() -> Vec<String> {
    vec![
        "/v1/tasks".into(),
        "/v1/repos".into(),
        "/v1/tokens".into(),
        "/v1/approvals/apr_1".into(),
        format!("/v1/tasks/{TASK}/messages"),
    ]
}

#[tokio::test]
async fn anonymous_callers_get_401_before_any_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::sqlite(&dir).await;
    let oversized = vec![b'x'; MAX_BODY_BYTES + 1];
    for uri in body_routes() {
        for token in [None, Some("wrong-token-0123456789")] {
            for body in [&b"{bad"[..], br#"{"x":1}"#, br#"[1,2]"#, &oversized] {
                let reply = api
                    .send(Method::POST, &uri, token, Body::from(body.to_vec()))
                    .await;
                let context = format!("{uri} {token:?} {} bytes", body.len());
                check_error(&reply, StatusCode::UNAUTHORIZED, "unauthorized", &context);
                // Nothing of the route's input shape leaks (no field list of a 422).
                assert!(!reply.message().contains("expected"), "{context}");
            }
        }
    }
    // With a token the body is read: malformed is 400, oversized 413.
    let reply = api
        .send(Method::POST, "/v1/tasks", Some(ALICE), "{bad")
        .await;
    check_error(&reply, StatusCode::BAD_REQUEST, "bad_request", "alice {bad");
    let reply = api
        .send(Method::POST, "/v1/tasks", Some(ALICE), oversized)
        .await;
    check_error(
        &reply,
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        "alice oversized",
    );
}

#[tokio::test]
async fn a_request_with_a_body_is_charged_to_the_rate_limit_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        dir.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let api = Api::new(
        store,
        RateLimit {
            per_minute: 1,
            burst: 2,
        },
    );
    // Two requests fit a burst of two only if each costs one unit.
    for _ in 0..2 {
        let reply = api
            .send(Method::POST, "/v1/tasks", Some(ALICE), r#"{"x":1}"#)
            .await;
        check_error(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "charged",
        );
    }
    let reply = api
        .send(Method::POST, "/v1/tasks", Some(ALICE), r#"{"x":1}"#)
        .await;
    check_error(
        &reply,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
        "third",
    );
}

#[tokio::test]
async fn unreadable_path_parameters_are_json_404s_after_authentication() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::sqlite(&dir).await;
    let routes = [
        (Method::GET, "/v1/tasks/{}"),
        (Method::GET, "/v1/tasks/{}/events"),
        (Method::GET, "/v1/tasks/{}/diff"),
        (Method::GET, "/v1/tasks/{}/journal"),
        (Method::POST, "/v1/tasks/{}/cancel"),
        (Method::POST, "/v1/tasks/{}/retry"),
        (Method::POST, "/v1/tasks/{}/messages"),
        (Method::GET, "/v1/approvals/{}"),
        (Method::POST, "/v1/approvals/{}"),
        (Method::DELETE, "/v1/tokens/{}"),
        (Method::DELETE, "/v1/sessions/{}"),
    ];
    for (method, template) in routes {
        let body = match method {
            Method::POST if template.ends_with("messages") => r#"{"text":"hi"}"#,
            Method::POST if template.starts_with("/v1/approvals") => {
                r#"{"decision":"approve","hash":"sha256:00"}"#
            }
            _ => "",
        };
        for segment in ["%FF", "%C3%28", "%00", "tsk_%00"] {
            let uri = template.replace("{}", segment);
            let anonymous = api.send(method.clone(), &uri, None, body).await;
            check_error(&anonymous, StatusCode::UNAUTHORIZED, "unauthorized", &uri);
            let reply = api.send(method.clone(), &uri, Some(ADMIN), body).await;
            check_error(&reply, StatusCode::NOT_FOUND, "not_found", &uri);
        }
    }
}

fn clarification_result(id: &TaskId) -> Value {
    json!({"task_id": id, "kind": "question", "outcome": "clarification",
           "clarification": {"question": "Which branch do you mean?"},
           "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                     "cost_usd": 0.0, "model_calls": 1, "tool_calls": 0},
           "model": "gpt-test"})
}

fn answer_result(id: &TaskId) -> Value {
    json!({"task_id": id, "kind": "question", "outcome": "answer",
           "answer": {"summary": "it doubles", "claims": [], "not_established": []},
           "usage": {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0,
                     "cost_usd": 0.0, "model_calls": 1, "tool_calls": 0},
           "model": "gpt-test"})
}

/// NUL in a prompt, metadata (values and keys, nested) and a message (answer and follow-up) is
/// 422 naming the field, and nothing is stored; a repository source with NUL was refused
/// before (`RepoSpec::parse`) and still is.
async fn nul_characters_are_refused(api: &Api) {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn f() {}\n");
    repo.commit("initial");
    let reply = api
        .send(
            Method::POST,
            "/v1/repos",
            Some(ADMIN),
            json!({"name": "app", "source": repo.path().to_str().unwrap()}).to_string(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    for source in ["/srv/repo\u{0}", "https://example.com/a\u{0}.git"] {
        let reply = api
            .send(
                Method::POST,
                "/v1/repos",
                Some(ADMIN),
                json!({"name": "other", "source": source}).to_string(),
            )
            .await;
        check_error(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            source,
        );
        assert!(reply.message().contains("source"), "{}", reply.body);
    }
    let submits = [
        (
            json!({"kind": "question", "repo": "app", "prompt": "a\u{0}b"}),
            "prompt",
        ),
        (
            json!({"kind": "question", "repo": "app", "prompt": "p", "metadata": {"k": "a\u{0}"}}),
            "metadata.k",
        ),
        (
            json!({"kind": "question", "repo": "app", "prompt": "p",
                   "metadata": {"deep": [1, {"x": ["ok", "\u{0}"]}]}}),
            "metadata.deep[1].x[1]",
        ),
        (
            json!({"kind": "question", "repo": "app", "prompt": "p", "metadata": {"k\u{0}": 1}}),
            "a key of metadata",
        ),
    ];
    for (body, field) in submits {
        let reply = api
            .send(Method::POST, "/v1/tasks", Some(ALICE), body.to_string())
            .await;
        check_error(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            field,
        );
        assert!(reply.message().contains(field), "{field}: {}", reply.body);
        assert!(reply.message().contains("NUL"), "{}", reply.body);
    }
    let waiting = api
        .finished_question(TaskStatus::WaitingInput, clarification_result)
        .await;
    let finished = api
        .finished_question(TaskStatus::Completed, answer_result)
        .await;
    for task in [&waiting, &finished] {
        let reply = api
            .send(
                Method::POST,
                &format!("/v1/tasks/{task}/messages"),
                Some(ALICE),
                json!({"text": "the main\u{0} branch"}).to_string(),
            )
            .await;
        check_error(
            &reply,
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_request",
            "text",
        );
        assert!(reply.message().contains("text"), "{}", reply.body);
    }
    assert_eq!(
        api.store.get_task(&waiting).await.unwrap().unwrap().status,
        TaskStatus::WaitingInput
    );
    let tasks = api
        .send(Method::GET, "/v1/tasks", Some(ADMIN), Body::empty())
        .await;
    assert_eq!(tasks.status, StatusCode::OK, "{}", tasks.body);
    assert_eq!(
        tasks.body["data"].as_array().unwrap().len(),
        2,
        "{}",
        tasks.body
    );
}

#[tokio::test]
async fn nul_characters_in_stored_text_are_refused_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::sqlite(&dir).await;
    nul_characters_are_refused(&api).await;
}

#[tokio::test]
async fn nul_characters_in_stored_text_are_refused_on_postgres() {
    let Some(admin_url) = warden_test_support::postgres::url() else {
        return;
    };
    let mut random = [0u8; 5];
    getrandom::fill(&mut random).unwrap();
    let schema = format!("api_nul_{}_{}", std::process::id(), hex::encode(random));
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
    let api = Api::new(store, RateLimit::default());
    nul_characters_are_refused(&api).await;
    drop(api);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
    drop(client);
    let _ = connection.await;
}
