//! Tokens, roles and input limits through `Router::oneshot`: store tokens (created directly and
//! through `/v1/tokens`) authenticate with their role until revoked, each role is refused what
//! it may not do, every token has its own rate limit (429 with `Retry-After`), and bodies are
//! refused when too deep, too large or carrying unknown fields.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiRole, ApiState, Tokens};
use warden_service::access::mint_token;
use warden_service::config::serve::RateLimit;
use warden_service::tasks::TaskService;
use warden_store::Store;
use warden_test_support::git_fixture::TempRepo;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const OPERATOR: &str = "operator-token-0123456789-0123456789";

struct Api {
    router: Router,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
    repo: TempRepo,
}

struct Reply {
    status: StatusCode,
    headers: axum::http::HeaderMap,
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

fn check_error(reply: &Reply, status: StatusCode, code: &str) {
    assert_eq!(reply.status, status, "{}", reply.body);
    assert_eq!(reply.code(), code, "{}", reply.body);
}

impl Api {
    async fn new() -> Api {
        Api::with_limit(RateLimit {
            per_minute: 100_000,
            burst: 100_000,
        })
        .await
    }

    async fn with_limit(limit: RateLimit) -> Api {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        let tokens =
            Tokens::parse(&format!("root:admin:{ADMIN},olga:operator:{OPERATOR}")).unwrap();
        let state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )
        .with_rate_limit(limit);
        let repo = TempRepo::new();
        repo.write("src/lib.rs", "pub fn f() {}\n");
        repo.commit("initial");
        Api {
            router: router(Arc::new(state)),
            store,
            _dir: dir,
            repo,
        }
    }

    /// A token stored directly (as `warden token create` does); returns (id, secret).
    async fn stored_token(&self, name: &str, role: ApiRole) -> (String, String) {
        let (row, secret) = mint_token(Some(name), role, "test").unwrap();
        let stored = self.store.create_api_token(row).await.unwrap();
        (stored.id, secret)
    }

    async fn send(&self, method: Method, uri: &str, token: &str, body: Option<String>) -> Reply {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .header("authorization", format!("Bearer {token}"))
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, Body::from))
            .unwrap();
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Reply {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, uri: &str, token: &str) -> Reply {
        self.send(Method::GET, uri, token, None).await
    }

    async fn post(&self, uri: &str, token: &str, body: Value) -> Reply {
        self.send(Method::POST, uri, token, Some(body.to_string()))
            .await
    }

    async fn register(&self) {
        let reply = self
            .post(
                "/v1/repos",
                ADMIN,
                json!({"name": "app", "source": self.repo.path().to_str().unwrap()}),
            )
            .await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.body);
    }
}

fn question(prompt: &str) -> Value {
    json!({"kind": "question", "repo": "app", "prompt": prompt})
}

#[tokio::test]
async fn store_tokens_authenticate_with_their_role_until_revoked() {
    let api = Api::new().await;
    api.register().await;
    let (op_id, operator) = api.stored_token("ci-bot", ApiRole::Operator).await;
    let (_, viewer) = api.stored_token("watcher", ApiRole::Viewer).await;
    let (_, admin) = api.stored_token("boss", ApiRole::Admin).await;

    let task = api
        .post("/v1/tasks", &operator, question("who calls f?"))
        .await;
    assert_eq!(task.status, StatusCode::ACCEPTED, "{}", task.body);
    assert_eq!(task.body["owner"], "ci-bot");
    let id = task.body["id"].as_str().unwrap().to_string();

    // A viewer reads but cannot write, and does not see another owner's task.
    assert_eq!(api.get("/v1/repos", &viewer).await.status, StatusCode::OK);
    let listed = api.get("/v1/tasks", &viewer).await;
    assert_eq!(listed.status, StatusCode::OK);
    assert_eq!(listed.body["data"], json!([]));
    check_error(
        &api.get(&format!("/v1/tasks/{id}"), &viewer).await,
        StatusCode::NOT_FOUND,
        "not_found",
    );
    check_error(
        &api.post("/v1/tasks", &viewer, question("p")).await,
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    // A stored admin token sees everyone's tasks and manages tokens.
    assert_eq!(
        api.get(&format!("/v1/tasks/{id}"), &admin).await.status,
        StatusCode::OK
    );
    assert_eq!(api.get("/v1/tokens", &admin).await.status, StatusCode::OK);

    api.store.revoke_api_token(&op_id).await.unwrap();
    let revoked = api.get("/v1/tasks", &operator).await;
    check_error(&revoked, StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(revoked.headers["www-authenticate"], "Bearer");
    // The digest of a real token with one character changed is not a token.
    let mut forged = operator.clone();
    forged.pop();
    forged.push('x');
    check_error(
        &api.get("/v1/tasks", &forged).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
}

#[tokio::test]
async fn operators_cannot_register_repositories_or_manage_tokens() {
    let api = Api::new().await;
    let (_, stored_operator) = api.stored_token("ops", ApiRole::Operator).await;
    for token in [OPERATOR, stored_operator.as_str()] {
        let reply = api
            .post(
                "/v1/repos",
                token,
                json!({"name": "app", "source": api.repo.path().to_str().unwrap()}),
            )
            .await;
        check_error(&reply, StatusCode::FORBIDDEN, "forbidden");
        check_error(
            &api.get("/v1/tokens", token).await,
            StatusCode::FORBIDDEN,
            "forbidden",
        );
        let create = api
            .post("/v1/tokens", token, json!({"role": "admin"}))
            .await;
        check_error(&create, StatusCode::FORBIDDEN, "forbidden");
        let revoke = api
            .send(
                Method::DELETE,
                "/v1/tokens/tok_0000000000000000",
                token,
                None,
            )
            .await;
        check_error(&revoke, StatusCode::FORBIDDEN, "forbidden");
    }
    // Nothing was created by the refused requests.
    assert_eq!(api.store.list_api_tokens().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_token_created_through_the_api_works_until_revoked_there() {
    let api = Api::new().await;
    api.register().await;
    let created = api
        .post(
            "/v1/tokens",
            ADMIN,
            json!({"role": "operator", "name": "deploy-bot"}),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let secret = created.body["token"].as_str().unwrap().to_string();
    let id = created.body["id"].as_str().unwrap().to_string();
    assert!(
        secret.starts_with("wdn_") && secret.len() >= 4 + 64,
        "{secret}"
    );
    assert_eq!(created.body["name"], "deploy-bot");
    assert_eq!(created.body["role"], "operator");
    assert_eq!(created.body["created_by"], "root");
    assert_eq!(created.body["revoked_at"], Value::Null);

    let task = api.post("/v1/tasks", &secret, question("p")).await;
    assert_eq!(task.status, StatusCode::ACCEPTED, "{}", task.body);
    assert_eq!(task.body["owner"], "deploy-bot");

    // Listed without the secret (nor its digest).
    let listed = api.get("/v1/tokens", ADMIN).await;
    assert_eq!(listed.status, StatusCode::OK);
    let text = listed.body.to_string();
    assert!(!text.contains(&secret[4..]), "{text}");
    assert!(listed.body["data"][0].get("token").is_none());
    assert!(listed.body["data"][0].get("digest").is_none());
    assert_eq!(listed.body["data"][0]["id"], id.as_str());

    // A token without a name is named by its id.
    let unnamed = api
        .post("/v1/tokens", ADMIN, json!({"role": "viewer"}))
        .await;
    assert_eq!(unnamed.status, StatusCode::CREATED, "{}", unnamed.body);
    assert_eq!(unnamed.body["name"], unnamed.body["id"]);

    let revoked = api
        .send(Method::DELETE, &format!("/v1/tokens/{id}"), ADMIN, None)
        .await;
    assert_eq!(revoked.status, StatusCode::OK, "{}", revoked.body);
    assert!(revoked.body["revoked_at"].as_str().unwrap().ends_with('Z'));
    check_error(
        &api.post("/v1/tasks", &secret, question("p")).await,
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    // Revoking twice is harmless; an unknown id is 404.
    let again = api
        .send(Method::DELETE, &format!("/v1/tokens/{id}"), ADMIN, None)
        .await;
    assert_eq!(again.status, StatusCode::OK);
    assert_eq!(again.body["revoked_at"], revoked.body["revoked_at"]);
    check_error(
        &api.send(Method::DELETE, "/v1/tokens/tok_nope", ADMIN, None)
            .await,
        StatusCode::NOT_FOUND,
        "not_found",
    );

    for (body, fragment) in [
        (json!({"role": "root"}), "root"),
        (json!({"role": "viewer", "name": "two words"}), "name"),
        (json!({"role": "viewer", "name": ""}), "name"),
        (json!({"role": "viewer", "expires": 3}), "expires"),
        (json!({}), "role"),
    ] {
        let reply = api.post("/v1/tokens", ADMIN, body.clone()).await;
        check_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
        assert!(
            reply.message().contains(fragment),
            "{body}: {}",
            reply.message()
        );
    }
}

#[tokio::test]
async fn each_token_is_rate_limited_with_retry_after() {
    let api = Api::with_limit(RateLimit {
        per_minute: 1,
        burst: 3,
    })
    .await;
    let (_, stored) = api.stored_token("ops", ApiRole::Operator).await;
    for _ in 0..3 {
        assert_eq!(api.get("/v1/repos", ADMIN).await.status, StatusCode::OK);
    }
    let limited = api.get("/v1/repos", ADMIN).await;
    check_error(&limited, StatusCode::TOO_MANY_REQUESTS, "rate_limited");
    let retry: u64 = limited.headers["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    // Every authenticated route counts, writes included.
    check_error(
        &api.post("/v1/tasks", ADMIN, question("p")).await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    );
    // Other tokens have budgets of their own, stored tokens included.
    assert_eq!(api.get("/v1/repos", OPERATOR).await.status, StatusCode::OK);
    for _ in 0..3 {
        assert_eq!(api.get("/v1/repos", &stored).await.status, StatusCode::OK);
    }
    check_error(
        &api.get("/v1/repos", &stored).await,
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limited",
    );
    // Unauthenticated routes are not limited.
    let health = api.get("/healthz", ADMIN).await;
    assert_eq!(health.status, StatusCode::OK);
}

/// `{"a":{"a":…}}` with `depth` objects.
fn nested(depth: usize) -> Value {
    let mut value = json!(1);
    for _ in 0..depth {
        value = json!({ "a": value });
    }
    value
}

#[tokio::test]
async fn bodies_are_limited_in_depth_size_and_fields() {
    let api = Api::new().await;
    api.register().await;
    // 1 (the body) + 31 = 32 levels: accepted; one more is refused before parsing.
    let mut body = question("p");
    body["metadata"] = nested(31);
    let reply = api.post("/v1/tasks", OPERATOR, body.clone()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);
    body["metadata"] = nested(32);
    let reply = api.post("/v1/tasks", OPERATOR, body).await;
    check_error(&reply, StatusCode::BAD_REQUEST, "bad_request");
    assert!(reply.message().contains("32"), "{}", reply.message());
    // Very deep arrays are refused the same way (not a stack overflow, not a 500).
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let reply = api
        .send(Method::POST, "/v1/tasks", OPERATOR, Some(deep))
        .await;
    check_error(&reply, StatusCode::BAD_REQUEST, "bad_request");
    // Brackets inside strings (escaped quotes included) are text, not nesting.
    let reply = api
        .post(
            "/v1/tasks",
            OPERATOR,
            question(&format!("\"{}\\", "[{".repeat(100))),
        )
        .await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.body);

    // Unknown fields are named.
    let mut body = question("p");
    body["colour"] = json!("blue");
    let reply = api.post("/v1/tasks", OPERATOR, body).await;
    check_error(&reply, StatusCode::UNPROCESSABLE_ENTITY, "invalid_request");
    assert!(reply.message().contains("colour"), "{}", reply.message());

    // More than 1 MiB: 413, on every body-taking route.
    let huge = "x".repeat((1 << 20) + 1);
    for uri in ["/v1/tasks", "/v1/tokens", "/v1/repos"] {
        let reply = api
            .post(uri, ADMIN, json!({"role": "viewer", "name": huge}))
            .await;
        check_error(&reply, StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large");
    }
}

#[tokio::test]
async fn the_openapi_document_declares_429_on_authenticated_routes() {
    let api = Api::new().await;
    let reply = api.get("/openapi.json", ADMIN).await;
    assert_eq!(reply.status, StatusCode::OK);
    let paths = &reply.body["paths"];
    for (path, method) in [
        ("/v1/tokens", "get"),
        ("/v1/tokens", "post"),
        ("/v1/tokens/{id}", "delete"),
        ("/v1/tasks", "post"),
        ("/v1/repos", "get"),
    ] {
        let limited = &paths[path][method]["responses"]["429"];
        assert!(limited.is_object(), "{method} {path}: no 429");
        assert!(limited["headers"]["Retry-After"].is_object());
    }
    assert!(paths["/healthz"]["get"]["responses"]["429"].is_null());
    assert_eq!(
        paths["/v1/tasks"]["post"]["responses"]["409"],
        Value::Null,
        "idempotency conflicts are 422 now"
    );
}
