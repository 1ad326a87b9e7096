//! The API's front door through `Router::oneshot`: `Host` pinning (421) and `Origin` pinning
//! of state-changing requests (403), failed authentications throttled per client address
//! (429 with `Retry-After`) while valid tokens from the same address pass, the per-token cap on
//! open event streams (429 `too_many_streams`, freed when a stream ends), and the OpenAPI
//! document declaring those answers.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{Method, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use serde_json::Value;
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{openapi, router, ApiState, HostPolicy, Tokens};
use warden_service::config::serve::RateLimit;
use warden_service::tasks::TaskService;

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";

async fn api(configure: impl FnOnce(ApiState) -> ApiState) -> (Router, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        dir.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let tokens = Tokens::parse(&format!("root:admin:{ADMIN},alice:operator:{ALICE}")).unwrap();
    let state = configure(ApiState::new(
        TaskService::new(store, Arc::new(Notify::new())),
        tokens,
    ));
    (router(Arc::new(state)), dir)
}

/// A request as if from `peer`, with `headers`.
fn request(method: Method, uri: &str, peer: &str, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    let mut request = builder.body(Body::from("{}")).unwrap();
    let peer: SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(peer));
    request
}

async fn send(router: &Router, request: Request<Body>) -> Response {
    router.clone().oneshot(request).await.unwrap()
}

async fn json(response: Response) -> (StatusCode, Value) {
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn code(body: &Value) -> &str {
    body["error"]["code"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn foreign_hosts_get_421_and_foreign_origins_403_on_state_changing_requests() {
    let (router, _dir) = api(|state| {
        state.with_hosts(HostPolicy {
            listen: Some("127.0.0.1:8787".parse().unwrap()),
            public_names: vec!["warden.example.com".into()],
        })
    })
    .await;
    let peer = "127.0.0.1:40000";
    let bearer = format!("Bearer {ADMIN}");
    for (host, expected) in [
        ("127.0.0.1:8787", StatusCode::OK),
        ("localhost:8787", StatusCode::OK),
        ("warden.example.com", StatusCode::OK),
        ("warden.example.com:443", StatusCode::OK),
        ("rebound.example:8787", StatusCode::MISDIRECTED_REQUEST),
        ("127.0.0.1:9999", StatusCode::MISDIRECTED_REQUEST),
        ("localhost", StatusCode::MISDIRECTED_REQUEST),
    ] {
        for uri in ["/healthz", "/v1/tasks"] {
            let reply = send(
                &router,
                request(
                    Method::GET,
                    uri,
                    peer,
                    &[("host", host), ("authorization", &bearer)],
                ),
            )
            .await;
            let (status, body) = json(reply).await;
            assert_eq!(status, expected, "{host} {uri}: {body}");
            if expected == StatusCode::MISDIRECTED_REQUEST {
                assert_eq!(code(&body), "misdirected_request", "{body}");
            }
        }
    }
    // Without a Host (HTTP/1.0, or a test request) nothing is pinned.
    let (status, _) = json(send(&router, request(Method::GET, "/healthz", peer, &[])).await).await;
    assert_eq!(status, StatusCode::OK);

    // Origin: a state-changing request from a foreign origin is 403 before anything else,
    // even without a token; our own origins reach the route (which finds `{}` invalid).
    for (origin, expected) in [
        ("https://evil.example", StatusCode::FORBIDDEN),
        ("http://127.0.0.1:8787.evil.example", StatusCode::FORBIDDEN),
        ("null", StatusCode::FORBIDDEN),
        ("http://localhost:8788", StatusCode::FORBIDDEN),
        ("http://127.0.0.1:8787", StatusCode::UNPROCESSABLE_ENTITY),
        ("http://localhost:8787", StatusCode::UNPROCESSABLE_ENTITY),
        (
            "https://warden.example.com",
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ] {
        let reply = send(
            &router,
            request(
                Method::POST,
                "/v1/tasks",
                peer,
                &[
                    ("host", "127.0.0.1:8787"),
                    ("origin", origin),
                    ("authorization", &bearer),
                    ("content-type", "application/json"),
                ],
            ),
        )
        .await;
        let (status, body) = json(reply).await;
        assert_eq!(status, expected, "{origin}: {body}");
        if expected == StatusCode::FORBIDDEN {
            assert_eq!(code(&body), "forbidden", "{body}");
        }
    }
    // No Origin (the CLI, curl) is fine; a foreign Origin on a read is not refused.
    let (status, _) = json(
        send(
            &router,
            request(
                Method::POST,
                "/v1/tasks",
                peer,
                &[
                    ("authorization", &bearer),
                    ("content-type", "application/json"),
                ],
            ),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, _) = json(
        send(
            &router,
            request(
                Method::GET,
                "/v1/tasks",
                peer,
                &[
                    ("authorization", &bearer),
                    ("origin", "https://evil.example"),
                ],
            ),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn failed_authentications_are_throttled_per_address_and_valid_tokens_are_not() {
    let (router, _dir) = api(|state| {
        state.with_auth_failure_limit(RateLimit {
            per_minute: 1,
            burst: 3,
        })
    })
    .await;
    let attacker = "192.0.2.7:5000";
    let bearer = format!("Bearer {ALICE}");
    let failures: [&[(&str, &str)]; 3] = [
        &[],
        &[("authorization", "Bearer guessed-0123456789-0123456789")],
        &[("authorization", "Basic YWxpY2U6cGFzcw==")],
    ];
    for headers in failures {
        let (status, body) = json(
            send(
                &router,
                request(Method::GET, "/v1/tasks", attacker, headers),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    }
    // The address spent its failures: 429 with Retry-After, whatever the route.
    for uri in ["/v1/tasks", "/v1/events", "/metrics"] {
        let reply = send(&router, request(Method::GET, uri, attacker, failures[1])).await;
        let retry_after = reply.headers().get("retry-after").cloned();
        let (status, body) = json(reply).await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{uri}: {body}");
        assert_eq!(code(&body), "rate_limited");
        let secs: u64 = retry_after.unwrap().to_str().unwrap().parse().unwrap();
        assert!((1..=60).contains(&secs), "{secs}");
    }
    // A valid token from the same address is served, again and again.
    for _ in 0..10 {
        let (status, body) = json(
            send(
                &router,
                request(
                    Method::GET,
                    "/v1/tasks",
                    attacker,
                    &[("authorization", &bearer)],
                ),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    // Another address has its own budget; /healthz needs no token and is never throttled.
    let (status, _) = json(
        send(
            &router,
            request(Method::GET, "/v1/tasks", "198.51.100.1:1", failures[0]),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, _) =
        json(send(&router, request(Method::GET, "/healthz", attacker, &[])).await).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_token_holds_at_most_its_cap_of_event_streams() {
    let (router, _dir) = api(|state| state.with_max_streams_per_token(2)).await;
    let peer = "127.0.0.1:40000";
    let alice = format!("Bearer {ALICE}");
    let admin = format!("Bearer {ADMIN}");
    let open = |bearer: &str| {
        send(
            &router,
            request(
                Method::GET,
                "/v1/events",
                peer,
                &[("authorization", bearer)],
            ),
        )
    };
    let first = open(&alice).await;
    assert_eq!(first.status(), StatusCode::OK);
    let second = open(&alice).await;
    assert_eq!(second.status(), StatusCode::OK);
    let (status, body) = json(open(&alice).await).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(code(&body), "too_many_streams");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_streams_per_token"),
        "{body}"
    );
    // Refused stream requests hold nothing; another token has its own streams.
    let other = open(&admin).await;
    assert_eq!(other.status(), StatusCode::OK);
    // A stream that ends (the client went away) frees its slot.
    drop(first);
    let again = open(&alice).await;
    assert_eq!(again.status(), StatusCode::OK);
    let (status, _) = json(open(&alice).await).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    drop((second, again, other));
}

#[test]
fn the_openapi_document_declares_421_403_and_the_stream_cap() {
    let document: Value = serde_json::from_str(&openapi().to_json().unwrap()).unwrap();
    let paths = document["paths"].as_object().unwrap();
    for (path, item) in paths {
        for (method, operation) in item.as_object().unwrap() {
            let responses = &operation["responses"];
            assert!(responses["421"].is_object(), "{method} {path}: no 421");
            if ["post", "put", "patch", "delete"].contains(&method.as_str()) {
                assert!(responses["403"].is_object(), "{method} {path}: no 403");
            }
        }
    }
    for path in ["/v1/events", "/v1/tasks/{id}/events"] {
        let description = document["paths"][path]["get"]["responses"]["429"]["description"]
            .as_str()
            .unwrap();
        assert!(description.contains("too_many_streams"), "{description}");
    }
}

#[tokio::test]
async fn a_throttled_address_gets_only_a_few_store_lookups_at_a_time() {
    let lookups = Arc::new(tokio::sync::Semaphore::new(2));
    let shared = Arc::clone(&lookups);
    let (router, _dir) = api(move |mut state| {
        state.throttled_lookups = shared;
        state.with_auth_failure_limit(RateLimit {
            per_minute: 1,
            burst: 2,
        })
    })
    .await;
    // A token kept in the store (not a bootstrap one): checking it costs a query.
    let admin = format!("Bearer {ADMIN}");
    let reply = send(
        &router,
        Request::builder()
            .method(Method::POST)
            .uri("/v1/tokens")
            .header("authorization", &admin)
            .header("content-type", "application/json")
            .extension(ConnectInfo("203.0.113.9:1".parse::<SocketAddr>().unwrap()))
            .body(Body::from(r#"{"role":"viewer","name":"carol"}"#))
            .unwrap(),
    )
    .await;
    let (status, created) = json(reply).await;
    assert_eq!(status, StatusCode::CREATED, "{created}");
    let stored = format!("Bearer {}", created["token"].as_str().unwrap());
    let attacker = "192.0.2.8:5000";
    let guessed: &[(&str, &str)] = &[("authorization", "Bearer guessed-0123456789-0123456789")];
    for _ in 0..2 {
        let (status, _) = json(
            send(
                &router,
                request(Method::GET, "/v1/tasks", attacker, guessed),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    // Out of failures, with every lookup slot busy (a flood in flight): refused without
    // asking the store, a guessed token and a stored one alike ...
    let held = Arc::clone(&lookups).acquire_many_owned(2).await.unwrap();
    for headers in [guessed, &[("authorization", stored.as_str())]] {
        let (status, body) = json(
            send(
                &router,
                request(Method::GET, "/v1/tasks", attacker, headers),
            )
            .await,
        )
        .await;
        assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    }
    // ... bootstrap tokens are checked in memory and always served ...
    let (status, _) = json(
        send(
            &router,
            request(
                Method::GET,
                "/v1/tasks",
                attacker,
                &[("authorization", &admin)],
            ),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // ... and once a slot is free, the stored token gets through.
    drop(held);
    let (status, body) = json(
        send(
            &router,
            request(
                Method::GET,
                "/v1/tasks",
                attacker,
                &[("authorization", &stored)],
            ),
        )
        .await,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}
