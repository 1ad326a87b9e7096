//! The web console's security through the real router (`Router::oneshot`) on a real SQLite
//! store, with Host pinning active: sign-in by password and by token (the cookie's attributes
//! over HTTP and HTTPS, one answer for a wrong password and an unknown user, a revoked token's
//! session ending), the per-address throttle shared with the API, cross-site refusal of every
//! state-changing route (and nothing changed), the API reading — never writing — with the
//! session cookie, the security headers of every console response and the caching of assets,
//! 421 for a foreign Host, what another user, a viewer and a signed-out browser get, untrusted
//! text escaped, and `[web] enabled = false`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use axum::response::Response;
use axum::Router;
use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, HostPolicy, Tokens};
use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};
use warden_service::config::serve::{IpRange, RateLimit};
use warden_service::tasks::{Principal, Role, TaskListing, TaskService};
use warden_store::{new_task_id, NewRepo, NewTask, Store, TaskRepo};

const ADMIN: &str = "admin-token-0123456789-0123456789";
const ALICE: &str = "alice-token-0123456789-0123456789";
const BOB: &str = "bob-token-01234567890-0123456789";
const VERA: &str = "vera-token-0123456789-0123456789";
const PASSWORD: &str = "correct horse battery";
/// The listen address the console is pinned to.
const HOST: &str = "127.0.0.1:8787";
const PUBLIC: &str = "warden.example.com";
const HOSTILE: &str = "<script>alert(1)</script><img src=x onerror=alert(2)> done";

struct Console {
    router: Router,
    state: Arc<ApiState>,
    store: Arc<dyn Store>,
    _dir: tempfile::TempDir,
}

struct Reply {
    status: StatusCode,
    headers: HeaderMap,
    text: String,
}

impl Reply {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .map_or("", |v| v.to_str().unwrap_or(""))
    }

    fn cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .map(|v| v.to_str().unwrap().to_string())
            .collect()
    }

    /// The `name=value` of the session cookie set (not cleared) by this reply.
    fn session_cookie(&self) -> String {
        let set = self
            .cookies()
            .into_iter()
            .find(|c| c.contains("=wds_"))
            .unwrap_or_else(|| panic!("no session cookie in {:?}", self.cookies()));
        set.split(';').next().unwrap().to_string()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or(Value::Null)
    }

    fn redirects_to(&self, to: &str) -> bool {
        self.status == StatusCode::SEE_OTHER && self.header("location") == to
    }
}

/// One request to the console.
struct Call {
    method: Method,
    uri: String,
    headers: Vec<(String, String)>,
    body: String,
    peer: SocketAddr,
}

fn get(uri: &str) -> Call {
    Call {
        method: Method::GET,
        uri: uri.into(),
        headers: Vec::new(),
        body: String::new(),
        peer: "127.0.0.1:40000".parse().unwrap(),
    }
}

/// A form post (`body` url-encoded).
fn post(uri: &str, body: &str) -> Call {
    let mut call = get(uri);
    call.method = Method::POST;
    call.body = body.into();
    call.header("content-type", "application/x-www-form-urlencoded")
}

impl Call {
    fn header(mut self, name: &str, value: &str) -> Call {
        self.headers.push((name.into(), value.into()));
        self
    }

    fn cookie(self, cookie: &str) -> Call {
        self.header("cookie", cookie)
    }

    /// What a browser sends with a form of the console's own page.
    fn same_origin(self) -> Call {
        self.header("sec-fetch-site", "same-origin")
    }

    fn from(mut self, peer: &str) -> Call {
        self.peer = peer.parse().unwrap();
        self
    }

    fn request(self) -> Request<Body> {
        let mut builder = Request::builder().method(self.method).uri(&self.uri);
        if !self.headers.iter().any(|(n, _)| n == "host") {
            builder = builder.header("host", HOST);
        }
        for (name, value) in &self.headers {
            builder = builder.header(name, value);
        }
        let mut request = builder.body(Body::from(self.body)).unwrap();
        request.extensions_mut().insert(ConnectInfo(self.peer));
        request
    }
}

fn principal(name: &str, role: Role) -> Principal {
    Principal {
        name: name.into(),
        role,
    }
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Console {
    async fn new() -> Console {
        Console::with(|state| state).await
    }

    async fn with(configure: impl FnOnce(ApiState) -> ApiState) -> Console {
        let dir = tempfile::tempdir().unwrap();
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        store
            .register_repo(NewRepo {
                name: "docs".into(),
                source: dir.path().join("docs").display().to_string(),
                branch: None,
                checks: vec![],
                mounts: vec![],
                prepare: vec![],
                created_by: "root".into(),
            })
            .await
            .unwrap();
        let tokens = Tokens::parse(&format!(
            "root:admin:{ADMIN},alice:operator:{ALICE},bob:operator:{BOB},vera:viewer:{VERA}"
        ))
        .unwrap();
        let state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            tokens,
        )
        .with_hosts(HostPolicy {
            listen: Some(HOST.parse().unwrap()),
            public_names: vec![PUBLIC.into()],
        });
        let state = Arc::new(configure(state));
        Console {
            router: router(Arc::clone(&state)),
            state,
            store,
            _dir: dir,
        }
    }

    async fn open(&self, call: Call) -> Response {
        self.router.clone().oneshot(call.request()).await.unwrap()
    }

    async fn send(&self, call: Call) -> Reply {
        let response = self.open(call).await;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        Reply {
            status,
            headers,
            text: String::from_utf8(bytes.to_vec()).unwrap(),
        }
    }

    /// A session signed in with `token` (through the service, as the sign-in form does), as
    /// the `Cookie` header a browser would send over HTTP.
    async fn session(&self, token: &str) -> String {
        let signed = self
            .state
            .access
            .sign_in_token(token, None, None)
            .await
            .unwrap();
        format!("warden_session={}", signed.secret)
    }

    /// A queued task of `owner`'s on `docs`.
    async fn task(&self, owner: &str, kind: TaskKind, prompt: &str) -> TaskId {
        let id = new_task_id().unwrap();
        self.store
            .create_task(
                NewTask {
                    id: id.clone(),
                    kind,
                    owner: owner.into(),
                    prompt: prompt.into(),
                    repos: vec![TaskRepo::named("docs")],
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

    async fn status(&self, id: &TaskId) -> TaskStatus {
        self.store.get_task(id).await.unwrap().unwrap().status
    }

    async fn task_count(&self) -> usize {
        self.state
            .tasks
            .list(
                &principal("root", Role::Admin),
                TaskListing {
                    status: None,
                    before: None,
                    limit: 100,
                },
            )
            .await
            .unwrap()
            .tasks
            .len()
    }

    /// The id of `name`'s one active session (sessions started in one millisecond have no
    /// order, so tests find them by name).
    async fn session_of(&self, name: &str) -> String {
        let mine: Vec<String> = self
            .state
            .access
            .sessions(&principal("root", Role::Admin))
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.name == name)
            .map(|s| s.id)
            .collect();
        assert_eq!(mine.len(), 1, "{name}: {mine:?}");
        mine[0].clone()
    }

    async fn session_ids(&self) -> Vec<String> {
        self.state
            .access
            .sessions(&principal("root", Role::Admin))
            .await
            .unwrap()
            .into_iter()
            .map(|s| s.id)
            .collect()
    }
}

/// The CSP and its companions, on any console response.
fn assert_secured(reply: &Reply, context: &str) {
    let csp = reply.header("content-security-policy");
    assert!(
        csp.starts_with("default-src 'self'"),
        "{context}: CSP {csp:?}"
    );
    assert!(!csp.contains("unsafe-inline"), "{context}: {csp}");
    assert!(!csp.contains("unsafe-eval"), "{context}: {csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{context}: {csp}");
    assert_eq!(
        reply.header("x-content-type-options"),
        "nosniff",
        "{context}"
    );
    assert_eq!(reply.header("x-frame-options"), "DENY", "{context}");
}

fn assert_page(reply: &Reply, context: &str) {
    assert_secured(reply, context);
    assert_eq!(reply.header("cache-control"), "no-store", "{context}");
}

// --- sign-in ---

#[tokio::test]
async fn password_sign_in_sets_a_strict_http_only_cookie_secure_and_host_prefixed_over_https() {
    let console = Console::new().await;
    console
        .state
        .access
        .set_password("alice", "operator", PASSWORD)
        .await
        .unwrap();
    let form = format!("name=alice&password={}", url_encode(PASSWORD));

    // Over plain HTTP (the form's Sec-Fetch-Site says it is the console's own).
    let reply = console.send(post("/sign-in", &form).same_origin()).await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    assert_secured(&reply, "sign-in redirect");
    let cookies = reply.cookies();
    let set = cookies
        .iter()
        .find(|c| c.starts_with("warden_session=wds_"))
        .unwrap_or_else(|| panic!("{cookies:?}"));
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age="] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    assert!(!set.contains("Secure"), "over HTTP: {set}");
    assert!(!set.contains("Domain"), "{set}");
    // A stale HTTPS cookie is cleared; no HTTPS cookie is set.
    assert!(cookies
        .iter()
        .all(|c| !c.starts_with("__Host-") || c.contains("Max-Age=0")));
    let cookie = reply.session_cookie();
    let home = console.send(get("/").cookie(&cookie)).await;
    assert_eq!(home.status, StatusCode::OK, "{}", home.text);
    assert!(home.text.contains("alice (operator)"), "{}", home.text);
    // Signed in, the sign-in page sends you home.
    assert!(console
        .send(get("/sign-in").cookie(&cookie))
        .await
        .redirects_to("/"));

    // Over HTTPS through a proxy under a public name: the form's Origin says so.
    let reply = console
        .send(
            post("/sign-in", &form)
                .header("host", PUBLIC)
                .header("origin", &format!("https://{PUBLIC}")),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    let cookies = reply.cookies();
    let set = cookies
        .iter()
        .find(|c| c.starts_with("__Host-warden_session=wds_"))
        .unwrap_or_else(|| panic!("{cookies:?}"));
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/"] {
        assert!(set.contains(attribute), "{attribute} missing: {set}");
    }
    assert!(
        !set.contains("Domain"),
        "__Host- cookies have no Domain: {set}"
    );
    assert!(cookies
        .iter()
        .all(|c| !c.starts_with("warden_session=") || c.contains("Max-Age=0")));
    let secure = reply.session_cookie();
    assert!(console
        .send(get("/").cookie(&secure).header("host", PUBLIC))
        .await
        .status
        .is_success());

    // A wrong password and an unknown user get the very same page.
    let wrong = console
        .send(post("/sign-in", "name=alice&password=not+the+password").same_origin())
        .await;
    let unknown = console
        .send(
            post(
                "/sign-in",
                &format!("name=mallory&password={}", url_encode(PASSWORD)),
            )
            .same_origin(),
        )
        .await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{}", wrong.text);
    assert_eq!(unknown.status, StatusCode::UNAUTHORIZED);
    assert_eq!(wrong.text, unknown.text);
    assert!(
        wrong.text.contains("wrong name or password"),
        "{}",
        wrong.text
    );
    assert!(wrong.cookies().is_empty());
    assert_page(&wrong, "failed sign-in");
    // Neither or both kinds of credential: 400, no session.
    let both = console
        .send(post("/sign-in", &format!("name=alice&password=x&token={ALICE}")).same_origin())
        .await;
    assert_eq!(both.status, StatusCode::BAD_REQUEST, "{}", both.text);
    assert_eq!(console.session_ids().await.len(), 2);
}

#[tokio::test]
async fn a_token_session_ends_with_its_token_and_sign_out_ends_it_at_once() {
    let console = Console::new().await;
    let root = principal("root", Role::Admin);
    let created = console
        .state
        .access
        .create_token(&root, "operator", Some("carol"))
        .await
        .unwrap();
    let reply = console
        .send(
            post(
                "/sign-in",
                &format!("token={}", url_encode(&created.secret)),
            )
            .same_origin(),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    let cookie = reply.session_cookie();
    let home = console.send(get("/").cookie(&cookie)).await;
    assert_eq!(home.status, StatusCode::OK);
    assert!(home.text.contains("carol (operator)"), "{}", home.text);
    assert_eq!(
        console.send(get("/v1/tasks").cookie(&cookie)).await.status,
        StatusCode::OK
    );

    console
        .state
        .access
        .revoke_token(&root, &created.token.id)
        .await
        .unwrap();
    for uri in ["/", "/sessions", "/new"] {
        let reply = console.send(get(uri).cookie(&cookie)).await;
        assert!(reply.redirects_to("/sign-in"), "{uri}: {}", reply.status);
    }
    let reply = console.send(get("/v1/tasks").cookie(&cookie)).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
    // A revoked token does not sign in again.
    let again = console
        .send(
            post(
                "/sign-in",
                &format!("token={}", url_encode(&created.secret)),
            )
            .same_origin(),
        )
        .await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);

    // Sign-out: the session ends in the store, both cookies are cleared.
    let alice = console
        .state
        .access
        .sign_in_token(ALICE, None, None)
        .await
        .unwrap();
    let cookie = format!("warden_session={}", alice.secret);
    let reply = console
        .send(post("/sign-out", "").cookie(&cookie).same_origin())
        .await;
    assert!(reply.redirects_to("/sign-in"), "{}", reply.status);
    let cleared = reply.cookies();
    assert_eq!(cleared.len(), 2, "{cleared:?}");
    assert!(
        cleared.iter().all(|c| c.contains("Max-Age=0")),
        "{cleared:?}"
    );
    assert!(console
        .send(get("/").cookie(&cookie))
        .await
        .redirects_to("/sign-in"));
    // (The revoked token's session no longer identifies anyone, but the store still lists it
    // as active until it expires: only alice's is gone from the list.)
    assert!(!console.session_ids().await.contains(&alice.session_id));
}

#[tokio::test]
async fn failed_sign_ins_share_the_api_throttle_and_a_throttled_address_cannot_sign_in() {
    let console = Console::with(|state| {
        state.with_auth_failure_limit(RateLimit {
            per_minute: 1,
            burst: 2,
        })
    })
    .await;
    console
        .state
        .access
        .set_password("alice", "operator", PASSWORD)
        .await
        .unwrap();
    let right = format!("name=alice&password={}", url_encode(PASSWORD));
    let attacker = "192.0.2.50:5000";
    for _ in 0..2 {
        let reply = console
            .send(
                post("/sign-in", "name=alice&password=guess+guess+guess")
                    .same_origin()
                    .from(attacker),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
    }
    let reply = console
        .send(
            post("/sign-in", "name=alice&password=guess+guess+guess")
                .same_origin()
                .from(attacker),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.text
    );
    assert!(reply.text.contains("try again in"), "{}", reply.text);
    assert_page(&reply, "429");
    // While throttled even the right password is refused (no password is checked at all, so
    // guessing gets no answer), and no session is opened.
    let reply = console
        .send(post("/sign-in", &right).same_origin().from(attacker))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.text
    );
    assert!(reply.cookies().is_empty());
    let reply = console
        .send(
            post("/sign-in", &format!("token={ADMIN}"))
                .same_origin()
                .from(attacker),
        )
        .await;
    assert_eq!(reply.status, StatusCode::TOO_MANY_REQUESTS);
    assert!(console.session_ids().await.is_empty());
    // A valid bearer token from that address still reaches the API (its own rule).
    let reply = console
        .send(
            get("/v1/tasks")
                .header("authorization", &format!("Bearer {ALICE}"))
                .from(attacker),
        )
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // Another address signs in.
    let reply = console
        .send(
            post("/sign-in", &right)
                .same_origin()
                .from("192.0.2.51:5000"),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);

    // Failed API authentications spend the same bucket as failed sign-ins.
    let prober = "198.51.100.9:7000";
    for _ in 0..2 {
        let reply = console
            .send(
                get("/v1/tasks")
                    .header("authorization", "Bearer guessed-0123456789-0123456789")
                    .from(prober),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    let reply = console
        .send(post("/sign-in", &right).same_origin().from(prober))
        .await;
    assert_eq!(
        reply.status,
        StatusCode::TOO_MANY_REQUESTS,
        "{}",
        reply.text
    );
}

// --- cross-site requests ---

#[tokio::test]
async fn every_state_changing_route_refuses_cross_site_requests_and_changes_nothing() {
    let console = Console::new().await;
    let cookie = console.session(ADMIN).await;
    let alice_cookie = console.session(ALICE).await;
    let queued = console
        .task("root", TaskKind::Question, "still queued")
        .await;
    let sessions = console.session_ids().await;
    // Both sessions may start in the same millisecond: find alice's by name, not position.
    let alice_session = console.session_of("alice").await;
    let hash = format!("sha256:{}", "b".repeat(64));
    let routes: Vec<(String, String)> = vec![
        (
            "/tasks".into(),
            "kind=question&repo=docs&prompt=cross-site+task".into(),
        ),
        (format!("/tasks/{queued}/answer"), "text=yes".into()),
        (format!("/tasks/{queued}/follow-up"), "text=more".into()),
        (format!("/tasks/{queued}/message"), "text=steer".into()),
        (format!("/tasks/{queued}/cancel"), String::new()),
        (format!("/tasks/{queued}/retry"), String::new()),
        (
            "/approvals/apr_0000000000000000/approve".into(),
            format!("hash={hash}"),
        ),
        (
            "/approvals/apr_0000000000000000/reject".into(),
            format!("hash={hash}"),
        ),
        (format!("/sessions/{alice_session}/revoke"), String::new()),
        ("/sign-out".into(), String::new()),
        ("/sign-in".into(), format!("token={ADMIN}")),
        // A malformed body is refused for where it came from, before it is read.
        ("/tasks".into(), "%%%".into()),
        (format!("/tasks/{queued}/answer"), String::new()),
    ];
    let own = format!("http://{HOST}");
    let variants: Vec<Vec<(&str, &str)>> = vec![
        vec![("sec-fetch-site", "cross-site")],
        vec![("sec-fetch-site", "same-site")],
        vec![("sec-fetch-site", "none")],
        // Sec-Fetch-Site wins over an Origin that would match.
        vec![("sec-fetch-site", "cross-site"), ("origin", &own)],
        // Neither proof.
        vec![],
        vec![("origin", "null")],
        vec![("referer", "http://127.0.0.1:8787/new")],
        // A foreign Origin (the router's Origin pinning refuses it first).
        vec![("origin", "https://evil.example")],
    ];
    for (uri, body) in &routes {
        for headers in &variants {
            let mut call = post(uri, body).cookie(&cookie);
            for (name, value) in headers {
                call = call.header(name, value);
            }
            let reply = console.send(call).await;
            let context = format!("POST {uri} {body:?} with {headers:?}");
            assert_eq!(
                reply.status,
                StatusCode::FORBIDDEN,
                "{context}: {}",
                reply.text
            );
            assert!(reply.cookies().is_empty(), "{context}");
            if reply.header("content-type").starts_with("text/html") {
                assert_page(&reply, &context);
                assert!(
                    reply.text.contains("did not come from the console"),
                    "{context}"
                );
            } else {
                assert_eq!(reply.json()["error"]["code"], "forbidden", "{context}");
            }
        }
    }
    assert_eq!(console.task_count().await, 1);
    assert_eq!(console.status(&queued).await, TaskStatus::Queued);
    assert_eq!(
        console.session_ids().await,
        sessions,
        "no session made or ended"
    );
    assert!(console
        .send(get("/").cookie(&alice_cookie))
        .await
        .status
        .is_success());

    // The same requests from the console's own pages do change things: the 403s above were
    // for where they came from, nothing else.
    let reply = console
        .send(
            post("/tasks", "kind=question&repo=docs&prompt=from+the+form")
                .cookie(&cookie)
                .same_origin(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    assert!(reply.header("location").starts_with("/tasks/tsk_"));
    // A browser without Sec-Fetch-Site, with the console's Origin.
    let reply = console
        .send(
            post("/tasks", "kind=question&repo=docs&prompt=older+browser")
                .cookie(&cookie)
                .header("origin", &own),
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    assert_eq!(console.task_count().await, 3);
    let reply = console
        .send(
            post(&format!("/tasks/{queued}/cancel"), "")
                .cookie(&cookie)
                .same_origin(),
        )
        .await;
    assert!(
        reply.redirects_to(&format!("/tasks/{queued}")),
        "{}",
        reply.text
    );
    assert_eq!(console.status(&queued).await, TaskStatus::Cancelled);
    let reply = console
        .send(
            post(&format!("/sessions/{alice_session}/revoke"), "")
                .cookie(&cookie)
                .same_origin(),
        )
        .await;
    assert!(reply.redirects_to("/sessions"), "{}", reply.text);
    assert!(console
        .send(get("/").cookie(&alice_cookie))
        .await
        .redirects_to("/sign-in"));
    // Signed out, a same-origin post goes to the sign-in page and changes nothing.
    let reply = console
        .send(post("/tasks", "kind=question&repo=docs&prompt=anonymous").same_origin())
        .await;
    assert!(reply.redirects_to("/sign-in"), "{}", reply.status);
    assert_eq!(console.task_count().await, 3);
}

// --- the API with the cookie ---

#[tokio::test]
async fn the_api_reads_with_the_session_cookie_and_never_writes_with_it() {
    let console = Console::new().await;
    let cookie = console.session(ALICE).await;
    let task = console
        .task("alice", TaskKind::Question, "what streams?")
        .await;
    let bobs = console.task("bob", TaskKind::Question, "bob's own").await;

    let reply = console.send(get("/v1/tasks").cookie(&cookie)).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    let ids: Vec<String> = reply.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, vec![task.to_string()], "only alice's own");
    let reply = console
        .send(get(&format!("/v1/tasks/{bobs}")).cookie(&cookie))
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);

    // Writes need a bearer token whatever the cookie and the origin say.
    let own = format!("http://{HOST}");
    let writes = [
        (
            Method::POST,
            "/v1/tasks".to_string(),
            json!({"kind": "question", "repo": "docs", "prompt": "via cookie"}),
        ),
        (Method::POST, format!("/v1/tasks/{task}/cancel"), json!({})),
        (
            Method::POST,
            format!("/v1/tasks/{task}/messages"),
            json!({"text": "hi"}),
        ),
        (
            Method::POST,
            "/v1/tokens".to_string(),
            json!({"role": "admin"}),
        ),
        (
            Method::DELETE,
            "/v1/sessions/ses_0000000000000000".to_string(),
            json!({}),
        ),
    ];
    for (method, uri, body) in &writes {
        let mut call = get(uri)
            .cookie(&cookie)
            .same_origin()
            .header("origin", &own)
            .header("content-type", "application/json");
        call.method = method.clone();
        call.body = body.to_string();
        let reply = console.send(call).await;
        assert_eq!(
            reply.status,
            StatusCode::UNAUTHORIZED,
            "{method} {uri}: {}",
            reply.text
        );
        assert_eq!(reply.json()["error"]["code"], "unauthorized");
    }
    assert_eq!(console.task_count().await, 2);
    assert_eq!(console.status(&task).await, TaskStatus::Queued);
    // A bearer token present is the credential, even a wrong one beside a good cookie.
    let reply = console
        .send(
            get("/v1/tasks")
                .cookie(&cookie)
                .header("authorization", "Bearer wrong-0123456789-0123456789"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    // A made-up or ended session is 401 like a revoked token.
    let reply = console
        .send(get("/v1/tasks").cookie(&format!("warden_session=wds_{}", "0".repeat(64))))
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);

    // The task's event stream, as app.js opens it.
    console
        .store
        .append_event(
            &task,
            Event::AgentMessage {
                text: "looking at <b>it</b>".into(),
            },
        )
        .await
        .unwrap();
    let response = console
        .open(get(&format!("/v1/tasks/{task}/events")).cookie(&cookie))
        .await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    let mut stream = response.into_body().into_data_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !text.contains("looking at") {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("no event within 30 s")
            .expect("the stream ended")
            .unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    assert!(text.contains("event: agent_message"), "{text}");
    // Another's stream is not found.
    let response = console
        .open(get(&format!("/v1/tasks/{bobs}/events")).cookie(&cookie))
        .await;
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
}

// --- headers and assets ---

#[tokio::test]
async fn every_console_response_carries_the_security_headers_and_assets_cache_by_hash() {
    let console = Console::new().await;
    let cookie = console.session(ALICE).await;
    let task = console.task("alice", TaskKind::Question, "headers?").await;
    let mut replies = Vec::new();
    for (uri, signed_in) in [
        ("/".to_string(), true),
        ("/new".to_string(), true),
        (format!("/tasks/{task}"), true),
        ("/tasks/tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".to_string(), true),
        ("/tasks/not-an-id".to_string(), true),
        ("/?status=bogus".to_string(), true),
        ("/usage".to_string(), true),
        ("/sessions".to_string(), true),
        ("/sign-in".to_string(), false),
        ("/".to_string(), false),
        (format!("/tasks/{task}"), false),
    ] {
        let call = if signed_in {
            get(&uri).cookie(&cookie)
        } else {
            get(&uri)
        };
        let reply = console.send(call).await;
        assert_page(&reply, &format!("GET {uri} (signed in: {signed_in})"));
        replies.push((uri, reply));
    }
    let statuses: Vec<u16> = replies.iter().map(|(_, r)| r.status.as_u16()).collect();
    assert_eq!(
        statuses,
        [200, 200, 200, 404, 404, 422, 200, 200, 200, 303, 303]
    );
    let cross = console
        .send(post("/tasks", "kind=question&repo=docs&prompt=x").cookie(&cookie))
        .await;
    assert_page(&cross, "403");

    // The page's assets, by their hashed names.
    let home = &replies[0].1.text;
    let asset = |extension: &str| -> String {
        home.split('"')
            .find(|part| part.starts_with("/assets/") && part.ends_with(extension))
            .unwrap_or_else(|| panic!("no {extension} asset in {home}"))
            .to_string()
    };
    let (css, js, icon) = (asset(".css"), asset(".js"), asset(".svg"));
    for (path, content_type) in [
        (&css, "text/css"),
        (&js, "text/javascript"),
        (&icon, "image/svg+xml"),
    ] {
        let reply = console.send(get(path)).await;
        assert_eq!(reply.status, StatusCode::OK, "{path}");
        assert_secured(&reply, path);
        assert!(
            reply.header("content-type").starts_with(content_type),
            "{path}"
        );
        let cache = reply.header("cache-control");
        assert!(
            cache.contains("immutable") && cache.contains("max-age=31536000"),
            "{path}: {cache}"
        );
        let etag = reply.header("etag").to_string();
        assert!(etag.starts_with('"') && etag.len() > 2, "{path}: {etag}");
        assert!(
            path.contains(etag.trim_matches('"')),
            "the name holds the hash: {path} {etag}"
        );
        let again = console.send(get(path).header("if-none-match", &etag)).await;
        assert_eq!(again.status, StatusCode::NOT_MODIFIED, "{path}");
        assert!(again.text.is_empty());
        assert_secured(&again, path);
        let stale = console
            .send(get(path).header("if-none-match", "\"0000\""))
            .await;
        assert_eq!(stale.status, StatusCode::OK);
    }
    // Assets need no session (the sign-in page uses them) and do not vary with one.
    for path in [
        "/assets/app.css",
        "/assets/app.0000000000000000.js",
        "/assets/../sw.js",
        "/assets/%2e%2e%2fCargo.toml",
    ] {
        let reply = console.send(get(path)).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{path}: {}",
            reply.text
        );
        // A name the asset route takes is its 404; a path it cannot take is the API's.
        if !path.contains("..") {
            assert_secured(&reply, path);
        }
    }

    // The manifest and the service worker are revalidated every time.
    let manifest = console.send(get("/manifest.webmanifest")).await;
    assert_eq!(manifest.status, StatusCode::OK);
    assert_eq!(manifest.header("cache-control"), "no-cache");
    assert_secured(&manifest, "manifest");
    assert_eq!(manifest.json()["icons"][0]["src"], icon.as_str());
    let worker = console.send(get("/sw.js")).await;
    assert_eq!(worker.status, StatusCode::OK);
    assert_eq!(worker.header("cache-control"), "no-cache");
    assert!(worker.header("content-type").starts_with("text/javascript"));
    assert_secured(&worker, "sw.js");
    let list = worker
        .text
        .lines()
        .find_map(|l| l.strip_prefix("const ASSETS = "))
        .expect("the worker's list")
        .trim_end_matches(';');
    let cached: Vec<String> = serde_json::from_str(list).unwrap();
    assert_eq!(cached, vec![css.clone(), js.clone(), icon.clone()]);
    assert!(cached.iter().all(|p| p.starts_with("/assets/")));
}

#[tokio::test]
async fn a_foreign_host_gets_421_on_console_routes() {
    let console = Console::new().await;
    let cookie = console.session(ALICE).await;
    for host in ["rebound.example:8787", "127.0.0.1:9999", "evil.example"] {
        for call in [
            get("/"),
            get("/sign-in"),
            get("/sw.js"),
            get("/sessions").cookie(&cookie),
            post("/sign-in", &format!("token={ALICE}")).same_origin(),
            post("/tasks", "kind=question&repo=docs&prompt=rebound")
                .cookie(&cookie)
                .same_origin(),
        ] {
            let context = format!("{} {} for {host}", call.method, call.uri);
            let reply = console.send(call.header("host", host)).await;
            assert_eq!(
                reply.status,
                StatusCode::MISDIRECTED_REQUEST,
                "{context}: {}",
                reply.text
            );
            assert!(reply.cookies().is_empty(), "{context}");
            assert!(!reply.text.contains("Warden</a>"), "no page for {context}");
        }
    }
    assert_eq!(console.task_count().await, 0);
    assert_eq!(console.session_ids().await.len(), 1);
    // The listen address, localhost on it, and the public name are served.
    for host in [HOST, "localhost:8787", PUBLIC] {
        let reply = console
            .send(get("/").cookie(&cookie).header("host", host))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{host}");
    }
}

// --- who sees what ---

#[tokio::test]
async fn another_users_task_is_not_found_and_a_viewer_only_reads() {
    let console = Console::new().await;
    let alice = console.session(ALICE).await;
    let vera = console.session(VERA).await;
    let bobs = console
        .task("bob", TaskKind::Question, "bob's secret plan")
        .await;
    let veras = console
        .task("vera", TaskKind::Question, "vera reads this")
        .await;

    for cookie in [&alice, &vera] {
        let reply = console
            .send(get(&format!("/tasks/{bobs}")).cookie(cookie))
            .await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text);
        assert!(reply.text.contains("Not found"));
        assert!(!reply.text.contains("secret plan"), "{}", reply.text);
        let list = console.send(get("/").cookie(cookie)).await;
        assert!(!list.text.contains("secret plan"));
        assert!(!list.text.contains(&bobs.to_string()));
        // Nor can they act on it.
        let reply = console
            .send(
                post(&format!("/tasks/{bobs}/cancel"), "")
                    .cookie(cookie)
                    .same_origin(),
            )
            .await;
        assert!(
            matches!(reply.status, StatusCode::NOT_FOUND | StatusCode::FORBIDDEN),
            "{}",
            reply.status
        );
    }
    assert_eq!(console.status(&bobs).await, TaskStatus::Queued);

    // A viewer's own task page: no form but signing out.
    let page = console
        .send(get(&format!("/tasks/{veras}")).cookie(&vera))
        .await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains("vera reads this"));
    let actions: Vec<&str> = page
        .text
        .match_indices("action=\"")
        .map(|(i, _)| page.text[i + 8..].split('"').next().unwrap())
        .collect();
    assert_eq!(actions, vec!["/sign-out"], "{}", page.text);
    assert!(!page.text.contains("New task"));
    // The owner-operator's page of a queued task has the cancel form; the viewer's had not.
    let alices = console
        .task("alice", TaskKind::Question, "alice asks")
        .await;
    let page = console
        .send(get(&format!("/tasks/{alices}")).cookie(&alice))
        .await;
    assert!(page
        .text
        .contains(&format!("action=\"/tasks/{alices}/cancel\"")));
    // Her queued task takes a message for its agent, from the form on its page.
    assert!(page
        .text
        .contains(&format!("action=\"/tasks/{alices}/message\"")));
    let reply = console
        .send(
            post(&format!("/tasks/{alices}/message"), "text=use+staging")
                .cookie(&alice)
                .same_origin(),
        )
        .await;
    assert!(
        reply.redirects_to(&format!("/tasks/{alices}")),
        "{} {}",
        reply.status,
        reply.text
    );
    let said = console.store.task_messages(&alices).await.unwrap();
    assert_eq!(said.len(), 1);
    assert_eq!(
        (said[0].role.as_str(), said[0].text.as_str()),
        ("steer", "use staging")
    );

    // Posts from a viewer are refused by the service, and change nothing.
    let posts = [
        (
            "/tasks".to_string(),
            "kind=question&repo=docs&prompt=viewer+asks".to_string(),
        ),
        (format!("/tasks/{veras}/cancel"), String::new()),
        (format!("/tasks/{veras}/answer"), "text=hi".into()),
        (format!("/tasks/{veras}/follow-up"), "text=more".into()),
        (format!("/tasks/{veras}/message"), "text=steer".into()),
        (format!("/tasks/{veras}/retry"), String::new()),
        (
            "/approvals/apr_0000000000000000/approve".into(),
            "hash=sha256%3Ax".into(),
        ),
    ];
    for (uri, body) in &posts {
        let reply = console
            .send(post(uri, body).cookie(&vera).same_origin())
            .await;
        // An unknown approval is not found before the role is looked at.
        let expected = if uri.starts_with("/approvals/") {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::FORBIDDEN
        };
        assert_eq!(reply.status, expected, "POST {uri}: {}", reply.text);
        assert_page(&reply, uri);
    }
    assert_eq!(console.status(&veras).await, TaskStatus::Queued);
    assert_eq!(console.task_count().await, 3);
    // An operator may not decide approvals either.
    let reply = console
        .send(
            post("/approvals/apr_0000000000000000/reject", "hash=sha256%3Ax")
                .cookie(&alice)
                .same_origin(),
        )
        .await;
    assert!(
        matches!(reply.status, StatusCode::FORBIDDEN | StatusCode::NOT_FOUND),
        "{}",
        reply.status
    );

    // Sessions: alice sees and revokes only her own; the admin's is not found for her.
    let root = console.session(ADMIN).await;
    let (alices, roots) = (
        console.session_of("alice").await,
        console.session_of("root").await,
    );
    let page = console.send(get("/sessions").cookie(&alice)).await;
    assert_eq!(page.text.matches("/revoke\"").count(), 1, "{}", page.text);
    assert!(page.text.contains(&alices));
    let reply = console
        .send(
            post(&format!("/sessions/{roots}/revoke"), "")
                .cookie(&alice)
                .same_origin(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert!(console
        .send(get("/").cookie(&root))
        .await
        .status
        .is_success());
}

#[tokio::test]
async fn signed_out_every_page_redirects_to_sign_in_and_shows_nothing() {
    let console = Console::new().await;
    let task = console
        .task("alice", TaskKind::Question, "private question")
        .await;
    let uris = [
        "/".to_string(),
        "/?status=queued".to_string(),
        "/new".to_string(),
        format!("/tasks/{task}"),
        "/tasks/tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9".to_string(),
        "/usage".to_string(),
        "/sessions".to_string(),
    ];
    let cookies = [
        None,
        Some("warden_session=".to_string()),
        Some("warden_session=wds_guess".to_string()),
        Some(format!("__Host-warden_session=wds_{}", "a".repeat(64))),
        Some(format!("warden_session={ALICE}")),
    ];
    for uri in &uris {
        for cookie in &cookies {
            let mut call = get(uri);
            if let Some(cookie) = cookie {
                call = call.cookie(cookie);
            }
            let reply = console.send(call).await;
            assert!(
                reply.redirects_to("/sign-in"),
                "{uri} {cookie:?}: {}",
                reply.status
            );
            assert_page(&reply, uri);
            assert!(!reply.text.contains("private question"), "{uri}");
            assert!(!reply.text.contains(&task.to_string()), "{uri}");
        }
    }
    let page = console.send(get("/sign-in")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.text.contains("private question"));
    assert!(page.text.contains("name=\"token\""));
}

#[tokio::test]
async fn untrusted_text_is_escaped_on_pages_served_by_the_router() {
    let console = Console::new().await;
    let cookie = console.session(ALICE).await;
    let task = console.task("alice", TaskKind::Question, HOSTILE).await;
    console
        .store
        .append_task_message(&task, "user", &format!("answer {HOSTILE}"), "alice")
        .await
        .unwrap();
    for uri in [format!("/tasks/{task}"), "/".to_string()] {
        let page = console.send(get(&uri).cookie(&cookie)).await;
        assert_eq!(page.status, StatusCode::OK, "{uri}");
        assert!(!page.text.contains("<img"), "{uri}: {}", page.text);
        assert!(!page.text.contains("<script>alert"), "{uri}");
        assert!(
            page.text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{uri}: {}",
            page.text
        );
        assert!(
            page.text.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{uri}"
        );
        assert_eq!(
            page.text.matches("<script").count(),
            1,
            "only app.js: {uri}"
        );
        assert!(!page.text.contains("style="), "no inline style: {uri}");
    }
    // The new-task form shows a refused prompt again, escaped.
    let reply = console
        .send(
            post(
                "/tasks",
                &format!("kind=question&repo=nope&prompt={}", url_encode(HOSTILE)),
            )
            .cookie(&cookie)
            .same_origin(),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert!(!reply.text.contains("<img"), "{}", reply.text);
    assert!(reply.text.contains("&lt;img src=x onerror=alert(2)&gt;"));
}

#[tokio::test]
async fn with_the_console_off_its_routes_are_the_apis_json_404() {
    let console =
        Console::with(|state| state.with_web(false, warden_api::routes::web::Budgets::default()))
            .await;
    let cookie = console.session(ALICE).await;
    for call in [
        get("/"),
        get("/sign-in"),
        get("/new"),
        get("/sw.js"),
        get("/manifest.webmanifest"),
        get("/assets/app.css"),
        get("/sessions").cookie(&cookie),
        post("/sign-in", &format!("token={ALICE}")).same_origin(),
        post("/tasks", "kind=question&repo=docs&prompt=x")
            .cookie(&cookie)
            .same_origin(),
    ] {
        let context = format!("{} {}", call.method, call.uri);
        let reply = console.send(call).await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{context}: {}",
            reply.text
        );
        assert_eq!(
            reply.header("content-type"),
            "application/json",
            "{context}"
        );
        assert_eq!(reply.json()["error"]["code"], "not_found", "{context}");
        assert!(reply.cookies().is_empty());
        assert!(
            reply.header("content-security-policy").is_empty(),
            "{context}"
        );
    }
    assert_eq!(console.task_count().await, 0);
    let reply = console
        .send(get("/v1/tasks").header("authorization", &format!("Bearer {ALICE}")))
        .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text);
    // A session from before the console was turned off reads nothing through the API.
    let reply = console.send(get("/v1/tasks").cookie(&cookie)).await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "{}", reply.text);
}

#[tokio::test]
async fn the_form_submits_a_maintenance_with_its_selection_and_refuses_a_bad_one() {
    let console = Console::new().await;
    let cookie = console.session(ADMIN).await;
    let page = console.send(get("/new").cookie(&cookie)).await;
    assert!(page.text.contains(r#"value="maintain""#), "{}", page.text);

    // An empty prompt: the maintenance says what it does in words.
    let reply = console
        .send(
            post(
                "/tasks",
                "kind=maintain&repo=docs&prompt=&select=vulnerable",
            )
            .cookie(&cookie)
            .same_origin(),
        )
        .await;
    assert_eq!(reply.status, StatusCode::SEE_OTHER, "{}", reply.text);
    let id = reply
        .header("location")
        .trim_start_matches("/tasks/")
        .to_string();
    let task = console
        .store
        .get_task(&id.parse::<TaskId>().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(task.kind, TaskKind::Maintain);
    assert_eq!(
        task.prompt,
        "maintain dependencies (select: vulnerable; mode: baseline)"
    );
    assert_eq!(
        task.metadata["warden"]["maintain"]["select"],
        json!(["vulnerable"]),
        "{}",
        task.metadata
    );

    // `all` mixed with names is the service's refusal, shown on the form with what was typed.
    let reply = console
        .send(
            post(
                "/tasks",
                "kind=maintain&repo=docs&prompt=&select=all%2C+serde",
            )
            .cookie(&cookie)
            .same_origin(),
        )
        .await;
    assert_eq!(
        reply.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        reply.text
    );
    assert!(reply.text.contains("all, serde"), "{}", reply.text);
    assert_eq!(console.task_count().await, 1);
}

// --- sign-in behind a reverse proxy ---

/// The proxy's network in the tests below.
const PROXY: &str = "10.0.0.1:40000";

fn behind_proxy(state: ApiState) -> ApiState {
    state.with_trusted_proxies(vec![IpRange::parse("10.0.0.0/8").unwrap()])
}

fn password_form(name: &str, password: &str) -> String {
    format!("name={name}&password={}", url_encode(password))
}

impl Console {
    /// The addresses recorded by `name`'s active sessions.
    async fn session_addresses(&self, name: &str) -> Vec<String> {
        let mut addresses: Vec<String> = self
            .state
            .access
            .sessions(&principal("root", Role::Admin))
            .await
            .unwrap()
            .into_iter()
            .filter(|s| s.name == name)
            .filter_map(|s| s.address)
            .collect();
        addresses.sort();
        addresses
    }
}

#[tokio::test]
async fn forwarding_headers_name_the_client_only_from_a_trusted_proxy() {
    let console = Console::with(behind_proxy).await;
    for name in ["alice", "bob", "carol"] {
        console
            .state
            .access
            .set_password(name, "operator", PASSWORD)
            .await
            .unwrap();
    }
    // A client that is not a trusted proxy cannot choose its address.
    let reply = console
        .send(
            post("/sign-in", &password_form("alice", PASSWORD))
                .same_origin()
                .from("192.0.2.50:5000")
                .header("x-forwarded-for", "203.0.113.7")
                .header("forwarded", "for=203.0.113.8"),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    assert_eq!(console.session_addresses("alice").await, ["192.0.2.50"]);
    // Through the proxy: the rightmost hop that is not a trusted proxy (the client wrote
    // 198.51.100.1 itself; an inner proxy, 10.0.0.2, forwarded to the outer one).
    let reply = console
        .send(
            post("/sign-in", &password_form("bob", PASSWORD))
                .same_origin()
                .from(PROXY)
                .header("x-forwarded-for", "198.51.100.1, 203.0.113.7, 10.0.0.2"),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    assert_eq!(console.session_addresses("bob").await, ["203.0.113.7"]);
    let reply = console
        .send(
            post("/sign-in", &password_form("carol", PASSWORD))
                .same_origin()
                .from(PROXY)
                .header("forwarded", "for=198.51.100.1, for=\"[2001:db8::7]:4711\""),
        )
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    assert_eq!(console.session_addresses("carol").await, ["2001:db8::7"]);
}

#[tokio::test]
async fn behind_a_trusted_proxy_one_clients_failures_do_not_lock_out_another() {
    let console = Console::with(|state| {
        behind_proxy(state).with_auth_failure_limit(RateLimit {
            per_minute: 1,
            burst: 2,
        })
    })
    .await;
    for name in ["alice", "bob"] {
        console
            .state
            .access
            .set_password(name, "operator", PASSWORD)
            .await
            .unwrap();
    }
    let attacker = |call: Call| {
        call.same_origin()
            .from(PROXY)
            .header("x-forwarded-for", "203.0.113.66")
    };
    let statuses = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            let reply = console
                .send(attacker(post(
                    "/sign-in",
                    &password_form("alice", "guess guess guess"),
                )))
                .await;
            statuses.push(reply.status);
        }
        statuses
    };
    assert_eq!(
        statuses,
        [
            StatusCode::UNAUTHORIZED,
            StatusCode::UNAUTHORIZED,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Every client shares the proxy's connection, not its throttle.
    for name in ["bob", "alice"] {
        let reply = console
            .send(
                post("/sign-in", &password_form(name, PASSWORD))
                    .same_origin()
                    .from(PROXY)
                    .header("x-forwarded-for", "198.51.100.7"),
            )
            .await;
        assert!(
            reply.redirects_to("/"),
            "{name}: {} {}",
            reply.status,
            reply.text
        );
    }
}

#[tokio::test]
async fn guessing_one_account_is_bounded_whatever_the_addresses() {
    let console = Console::with(|state| {
        behind_proxy(state).with_sign_in_limit(
            RateLimit {
                per_minute: 1,
                burst: 3,
            },
            Duration::from_secs(5),
        )
    })
    .await;
    for name in ["alice", "bob"] {
        console
            .state
            .access
            .set_password(name, "operator", PASSWORD)
            .await
            .unwrap();
    }
    let from = |call: Call, client: &str| {
        call.same_origin()
            .from(PROXY)
            .header("x-forwarded-for", client)
    };
    for n in 1..=3 {
        let reply = console
            .send(from(
                post("/sign-in", &password_form("alice", "guess guess guess")),
                &format!("203.0.113.{n}"),
            ))
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED, "guess {n}");
    }
    // The account's next failure is a minute away, longer than a sign-in waits: a fresh
    // address gets no answer on the password for now, and is told when to come back.
    for password in ["guess guess guess", PASSWORD] {
        let reply = console
            .send(from(
                post("/sign-in", &password_form("alice", password)),
                "203.0.113.4",
            ))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::TOO_MANY_REQUESTS,
            "{}",
            reply.text
        );
        let retry: u64 = reply.header("retry-after").parse().unwrap();
        assert!((1..=60).contains(&retry), "{retry}");
        assert!(reply.cookies().is_empty());
    }
    // Another account is not affected, from any of those addresses.
    let reply = console
        .send(from(
            post("/sign-in", &password_form("bob", PASSWORD)),
            "203.0.113.1",
        ))
        .await;
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_correct_password_after_throttling_is_delayed_not_refused() {
    // Units come back every half second; a sign-in waits up to 20 s for one.
    let console = Console::with(|state| {
        state
            .with_auth_failure_limit(RateLimit {
                per_minute: 120,
                burst: 2,
            })
            .with_sign_in_limit(
                RateLimit {
                    per_minute: 120,
                    burst: 1,
                },
                Duration::from_secs(20),
            )
    })
    .await;
    for name in ["alice", "bob"] {
        console
            .state
            .access
            .set_password(name, "operator", PASSWORD)
            .await
            .unwrap();
    }
    // One address shared by an attacker and the users (a NAT, or a proxy not listed in
    // trusted_proxies). The attacker spends the address's failures, then goes on guessing.
    let shared = "192.0.2.50:5000";
    for _ in 0..2 {
        let reply = console
            .send(
                post("/sign-in", &password_form("root", "guess guess guess"))
                    .same_origin()
                    .from(shared),
            )
            .await;
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    let router = console.router.clone();
    let attacking = tokio::spawn(async move {
        let mut statuses = Vec::new();
        for n in 0..6 {
            let call = post(
                "/sign-in",
                &password_form(&format!("guess{n}"), "guess guess guess"),
            )
            .same_origin()
            .from(shared);
            let response = router.clone().oneshot(call.request()).await.unwrap();
            statuses.push(response.status());
        }
        statuses
    });
    // Today's right password from that address waits its turn and is let in.
    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        console.send(
            post("/sign-in", &password_form("alice", PASSWORD))
                .same_origin()
                .from(shared),
        ),
    )
    .await
    .expect("the sign-in was answered");
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    // The attacker's guesses were answered too, each in its turn: slowed, never faster.
    let statuses = attacking.await.unwrap();
    assert!(
        statuses.iter().all(|s| *s == StatusCode::UNAUTHORIZED),
        "{statuses:?}"
    );

    // An account whose failures are spent: the right password from another address waits
    // for the account's next unit, while the attacker keeps guessing on it.
    let reply = console
        .send(
            post("/sign-in", &password_form("bob", "guess guess guess"))
                .same_origin()
                .from("198.51.100.1:5000"),
        )
        .await;
    assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    let router = console.router.clone();
    let attacking = tokio::spawn(async move {
        for _ in 0..4 {
            let call = post("/sign-in", &password_form("bob", "guess guess guess"))
                .same_origin()
                .from("198.51.100.1:5000");
            let _ = router.clone().oneshot(call.request()).await.unwrap();
        }
    });
    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        console.send(
            post("/sign-in", &password_form("bob", PASSWORD))
                .same_origin()
                .from("198.51.100.2:5000"),
        ),
    )
    .await
    .expect("the sign-in was answered");
    assert!(reply.redirects_to("/"), "{} {}", reply.status, reply.text);
    attacking.await.unwrap();
}
