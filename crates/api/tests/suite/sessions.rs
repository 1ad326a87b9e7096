//! `GET /v1/sessions` and `DELETE /v1/sessions/{id}` through `Router::oneshot`, over sessions
//! signed in through `ApiState::access` as the web console does: an admin sees and revokes
//! every active session, others only their own (another's is 404), a revoked session stops
//! identifying at once, and no secret or digest is ever in a reply.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use serde_json::Value;
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{openapi, router, ApiState, Tokens};
use warden_service::access::{token_digest, SignedIn};
use warden_service::tasks::TaskService;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const OPERATOR: &str = "operator-token-0123456789-0123456789";
const PASSWORD: &str = "correct horse battery";

struct Api {
    router: Router,
    state: Arc<ApiState>,
    _dir: tempfile::TempDir,
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
        let tokens =
            Tokens::parse(&format!("root:admin:{ADMIN},olga:operator:{OPERATOR}")).unwrap();
        let state = Arc::new(ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        ));
        Api {
            router: router(Arc::clone(&state)),
            state,
            _dir: dir,
        }
    }

    async fn send(&self, method: Method, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
        let mut request = Request::builder().method(method).uri(uri);
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn ids(&self, token: &str) -> Vec<String> {
        let (status, body) = self.send(Method::GET, "/v1/sessions", Some(token)).await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["id"].as_str().unwrap().to_string())
            .collect()
    }

    async fn is_active(&self, signed: &SignedIn) -> bool {
        self.state
            .access
            .session(&signed.secret)
            .await
            .unwrap()
            .is_some()
    }
}

#[tokio::test]
async fn admins_list_and_revoke_every_session_others_only_their_own() {
    let api = Api::new().await;
    let access = &api.state.access;
    access
        .set_password("alice", "operator", PASSWORD)
        .await
        .unwrap();
    let alice = access
        .sign_in_password("alice", PASSWORD, Some("192.0.2.7"), Some("Firefox"))
        .await
        .unwrap();
    let olga = access.sign_in_token(OPERATOR, None, None).await.unwrap();
    let root = access.sign_in_token(ADMIN, None, None).await.unwrap();

    let (status, listed) = api.send(Method::GET, "/v1/sessions", Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK, "{listed}");
    let sessions = listed["data"].as_array().unwrap();
    assert_eq!(sessions.len(), 3);
    // Sessions started in one millisecond have no order: alice's is found by its id.
    let first = sessions
        .iter()
        .find(|s| s["id"] == alice.session_id.as_str())
        .unwrap_or_else(|| panic!("alice's session in {listed}"));
    assert_eq!(first["name"], "alice");
    assert_eq!(first["role_at_sign_in"], "operator");
    assert_eq!(first["method"], "password");
    assert_eq!(first["address"], "192.0.2.7");
    assert_eq!(first["user_agent"], "Firefox");
    assert!(first["expires_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(first["revoked_at"], Value::Null);
    let tokens = sessions.iter().filter(|s| s["method"] == "token").count();
    assert_eq!(tokens, 2, "{listed}");
    let text = listed.to_string();
    for signed in [&alice, &olga, &root] {
        assert!(!text.contains(&signed.secret[4..]), "a secret in {text}");
        assert!(
            !text.contains(&token_digest(&signed.secret)),
            "a digest in {text}"
        );
    }
    assert!(
        !text.contains(&token_digest(OPERATOR)),
        "a token digest in {text}"
    );

    // An operator sees only sessions under its own name; another's does not exist for it.
    assert_eq!(api.ids(OPERATOR).await, vec![olga.session_id.clone()]);
    let (status, body) = api
        .send(
            Method::DELETE,
            &format!("/v1/sessions/{}", alice.session_id),
            Some(OPERATOR),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(body["error"]["code"], "not_found");
    assert!(api.is_active(&alice).await);
    // Its own it may end.
    let (status, body) = api
        .send(
            Method::DELETE,
            &format!("/v1/sessions/{}", olga.session_id),
            Some(OPERATOR),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body["revoked_at"].is_string());
    assert!(!api.is_active(&olga).await);

    // An admin ends anyone's, at once; an ended one is then not found.
    let uri = format!("/v1/sessions/{}", alice.session_id);
    let (status, body) = api.send(Method::DELETE, &uri, Some(ADMIN)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], alice.session_id.as_str());
    assert!(!api.is_active(&alice).await);
    let (status, _) = api.send(Method::DELETE, &uri, Some(ADMIN)).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(api.ids(ADMIN).await, vec![root.session_id]);
}

#[tokio::test]
async fn sessions_need_a_token_and_unknown_ids_are_not_found() {
    let api = Api::new().await;
    for (method, uri) in [
        (Method::GET, "/v1/sessions"),
        (Method::DELETE, "/v1/sessions/ses_0000000000000000"),
    ] {
        let (status, body) = api.send(method.clone(), uri, None).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{method} {uri}: {body}");
        let (status, body) = api.send(method, uri, Some("wdn_not-a-token")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}: {body}");
    }
    let (status, body) = api
        .send(
            Method::DELETE,
            "/v1/sessions/ses_0000000000000000",
            Some(ADMIN),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{body}");
    assert_eq!(api.ids(ADMIN).await, Vec::<String>::new());
}

#[test]
fn the_sessions_routes_are_documented_with_their_answers() {
    let document: Value = serde_json::from_str(&openapi().to_json().unwrap()).unwrap();
    let list = &document["paths"]["/v1/sessions"]["get"]["responses"];
    for status in ["200", "401", "429"] {
        assert!(list[status].is_object(), "GET /v1/sessions {status}");
    }
    let revoke = &document["paths"]["/v1/sessions/{id}"]["delete"]["responses"];
    for status in ["200", "401", "404", "429"] {
        assert!(
            revoke[status].is_object(),
            "DELETE /v1/sessions/{{id}} {status}"
        );
    }
    assert!(document["components"]["schemas"]["WebSessionView"].is_object());
    assert_eq!(
        document["components"]["schemas"]["SignInMethod"]["enum"],
        serde_json::json!(["password", "token"])
    );
}
