//! A local fake of the GitHub REST calls Warden makes, for publication and webhook tests:
//! `POST /repos/{owner}/{repo}/pulls` and `GET /repos/{owner}/{repo}/pulls?head=owner:branch&state=...`;
//! `GET /repos/{owner}/{repo}/collaborators/{user}/permission` (the users and roles a test sets
//! with [`GithubFake::set_role`]; an unknown user is 404); issue comments, `POST
//! /repos/{owner}/{repo}/issues/{number}/comments`, `PATCH
//! /repos/{owner}/{repo}/issues/comments/{id}` and `GET /repos/{owner}/{repo}/issues/{number}/comments`
//! (each comment's every body kept, so a test sees edits). With GitHub's request checks,
//! status codes (200, 201, 400, 401, 403, 404, 422) and response and error shapes
//! (`{"message", "errors": [...], "documentation_url", "status"}`). Branches are looked up in a
//! real bare repository (the "remote" the test pushes to), so a pull request can only be opened
//! for a head that was really pushed, and records its sha. Faults can be injected: fail the
//! next create with a status without creating anything, or create it and then fail or cut the
//! response, as when GitHub acted but the caller never heard back.

// Test-only code: it asks the bare remote with the system git directly.
#![allow(clippy::disallowed_methods)]

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use serde_json::{json, Value};

/// A GitHub App private key for tests only (2048-bit RSA, PKCS#1 PEM, as GitHub hands keys
/// out), generated for this fake and published here: never trust it anywhere.
pub const APP_TEST_KEY_PEM: &str = "-----BEGIN RSA PRIVATE KEY-----\nMIIEogIBAAKCAQEAxVr8Fzs0qH9KB73RbCyOJ2G+1Mnr5UWES583uRht/b8uW/GE\nrmzumpvY5P5uazmAXg2sJ43QuWjOmyv/I1bBEhRCHCEocV4mHJHbk4+AFF3JGX3y\nIHBPxeNWqZ0+vr6YYYjiQSK0M/PQsNIziM3frE8GZvNY5q+O800FKVy1+I8p+Lgv\na5cBx+zO9mcKF8rICgkEmqouYggYRS4Y2p73fpRxVxOPjuzKQjMScIMihKfQTKAs\nBqLqnIDxlhpxsJgOeipn+2r6G3SE71oSvX6Ui5Xzoq5BuxacPECr+/f9+rqUuf+r\nw25OTrOaKQBkrlnmehP7Mo6BGAKFPKOFlmZKGwIDAQABAoIBAB4TsttILXXHybyq\noT8m/oEiTzwhtn7qBx1Om2ZCQrJgZQx5HzCarwscA5melwMQr9oQTl4hfvUKyStH\n22nY1QglfeUd6TUh1UAXEIuJW/UpTTZtMIM2FUpCI9kp+uqEpIzUw4U2veze/xKQ\n7m6ues9JTzSjEzeQ+4G5NAys3ES60+TJREix1bt8Fydg6iUbUMk84NzkVimi5+vj\nWvwvmel4Us4ZVh+3Dv3lbGWlarGW0pi6nHA35r3rHlkrNryIf2qp/26JmcAwGq4w\nt3Xo2KSxJY0YqrjFg4YDi7wehq6y3IKjUmB39czqBYfYXWMwLTwKvSeo74+GuoDK\nWCo4oxECgYEA+n44NkZ4bpk8XtYJIyaJEuzZE0Jt27Vd6Pk2Ep7DYvaQeFZSLfm4\n94Wmvm1MYbSjvVMtWbPpSSd9r220GAdybJIQF2V81L62iOKTnToRryW6/Mv7+15A\nYzahX7QhQ3+5LCM9HNFVxi7EEfkDJHNCzPXpl82thi8qN5NH8XxSjxECgYEAybG0\nkiWmfqTDiLDBCeYFzk3HoCJFybpNlzKyrIPbmENaIiWy+Zq1Xc7m+miOSauNBWN4\niqVIctwktF4F3ku4N+4s4LrzDAOhZ6emaFtpWEWG55/lRdNyl045nwkDq1S6fYEE\nKCCWIE35TZtFcZdCIdP29WEKVaupABEiPiIYnmsCgYBkdjK9Mc4jLTnVHypS+qWG\n/Y6h9sZwk3CyeyCAn0PlcNXILXaQEdNpEiUpwlQb64Kv76gEje9F85youuq7qGDv\nwjTJ7V3/RO2YQKbLK/rjr9IqiPTqf4Z7Q/G8nFWq6JKvbQKZiCtKbH8eZiwodkGY\nShgBVe/+HPRljaAQ7bd+wQKBgEoS5rNJ+pTGZD2eVLcS8IztCeSo0aKdtoNSDkbH\ngm2wRrkFyW5cQEG8jB3pKmCqDXeuKYYZ37q3WQ+Y/GTAwF5iLb83Sa3e43dTHg1z\njQPrPPlyQtzbJFmnVAgxYlSZIIiZSnKGTTx+BpJW9TEbkSElXKyPwCDok3+/yyiw\nkwQTAoGAUMh5fc2b+Ns0s9zRUTE/1Oj5dP51A1I/tqh/Vob4ckrm8hfU0Lu/u6nG\nIlAaLIUrLVdvBcbeqq9h7KoeoC2Oks98+5WEj4LBOJAaPAlA3rw637vUF+rWWhtA\ntiheF5qJ4bR886TGtOHPiZnfF9DHhn+FglCFkK/6/ew7TLG8uYw=\n-----END RSA PRIVATE KEY-----";

/// The public half of [`APP_TEST_KEY_PEM`], PKCS#1 `RSAPublicKey` DER in base64: what the
/// fake checks App JWTs with.
pub const APP_TEST_PUBLIC_KEY_DER_BASE64: &str = "MIIBCgKCAQEAxVr8Fzs0qH9KB73RbCyOJ2G+1Mnr5UWES583uRht/b8uW/GErmzumpvY5P5uazmAXg2sJ43QuWjOmyv/I1bBEhRCHCEocV4mHJHbk4+AFF3JGX3yIHBPxeNWqZ0+vr6YYYjiQSK0M/PQsNIziM3frE8GZvNY5q+O800FKVy1+I8p+Lgva5cBx+zO9mcKF8rICgkEmqouYggYRS4Y2p73fpRxVxOPjuzKQjMScIMihKfQTKAsBqLqnIDxlhpxsJgOeipn+2r6G3SE71oSvX6Ui5Xzoq5BuxacPECr+/f9+rqUuf+rw25OTrOaKQBkrlnmehP7Mo6BGAKFPKOFlmZKGwIDAQAB";

/// The API version the fake accepts in `X-GitHub-Api-Version` (absent is accepted too).
pub const API_VERSION: &str = "2022-11-28";

/// The GitHub App the fake knows: its client id, installation (the repositories it is
/// installed on), and the installation tokens it issued.
struct App {
    client_id: String,
    installation_id: u64,
    lifetime_secs: i64,
    repositories: Vec<String>,
    issued: Vec<IssuedToken>,
}

/// What the App's installation grants: a token may ask for these or less.
const APP_PERMISSIONS: [(&str, &str); 4] = [
    ("contents", "write"),
    ("issues", "write"),
    ("metadata", "read"),
    ("pull_requests", "write"),
];

/// An installation token the fake issued, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    pub token: String,
    /// Unix seconds.
    pub expires_at: i64,
    /// The repositories (names) it was narrowed to; `None`: all of the installation's.
    pub repositories: Option<Vec<String>>,
    /// Permission → `read` or `write`, as asked (or the installation's when not asked).
    pub permissions: Vec<(String, String)>,
}

/// An issue comment on the fake, with every body it had (oldest first).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Comment {
    pub id: u64,
    pub issue: u64,
    pub body: String,
    pub history: Vec<String>,
}

/// A planned failure of the next create request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status (e.g. 502) and GitHub's error body; nothing is created.
    FailCreate(u16),
    /// Create the pull request, then answer 502: GitHub acted, the caller saw a failure.
    CreateThenFail,
    /// Create the pull request, then cut the connection in the middle of the response.
    CreateThenDrop,
    /// Answer the next list request with this status.
    FailList(u16),
    /// Answer the next permission request with this status.
    FailPermission(u16),
}

/// One request the fake received.
#[derive(Debug, Clone)]
pub struct SeenRequest {
    pub method: String,
    pub path: String,
    pub query: String,
    /// Header names lowercase.
    pub headers: Vec<(String, String)>,
    pub body: Value,
}

impl SeenRequest {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    owner: String,
    repo: String,
    token: String,
    remote: PathBuf,
    base_url: Mutex<String>,
    pulls: Mutex<Vec<Value>>,
    /// Login (lowercase) → role name (`admin`, `maintain`, `write`, `triage`, `read`).
    roles: Mutex<Vec<(String, String)>>,
    comments: Mutex<Vec<Comment>>,
    app: Mutex<Option<App>>,
    faults: Mutex<VecDeque<Fault>>,
    requests: Mutex<Vec<SeenRequest>>,
    /// `GET /rate_limit` and `GET /app/installations/{id}`: credential checks, kept apart.
    credential_checks: Mutex<Vec<SeenRequest>>,
}

/// The running fake; stops when dropped.
pub struct GithubFake {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl GithubFake {
    /// Starts a fake serving repository `owner/repo`, backed by the bare repository `remote`,
    /// accepting only `token`, on its own thread (usable from sync and async tests).
    ///
    /// # Panics
    /// If no local port can be bound or the thread cannot start.
    pub fn start(remote: &Path, owner: &str, repo: &str, token: &str) -> GithubFake {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .unwrap_or_else(|error| panic!("github fake cannot bind: {error}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("github fake has no address: {error}"));
        let shared = Arc::new(Shared {
            owner: owner.to_string(),
            repo: repo.to_string(),
            token: token.to_string(),
            remote: remote.to_path_buf(),
            base_url: Mutex::new(format!("http://{addr}")),
            pulls: Mutex::new(Vec::new()),
            roles: Mutex::new(Vec::new()),
            comments: Mutex::new(Vec::new()),
            app: Mutex::new(None),
            faults: Mutex::new(VecDeque::new()),
            requests: Mutex::new(Vec::new()),
            credential_checks: Mutex::new(Vec::new()),
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("github-fake-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|error| panic!("github fake runtime: {error}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|error| panic!("github fake listener: {error}"));
                    let app = Router::new().fallback(handle).with_state(thread_shared);
                    tokio::select! {
                        result = axum::serve(listener, app) => {
                            if let Err(error) = result {
                                eprintln!("github fake stopped: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .unwrap_or_else(|error| panic!("github fake thread: {error}"));
        GithubFake {
            addr,
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// The API base URL (`http://127.0.0.1:PORT`), as `api_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every pull request created so far, oldest first, as GitHub would return it.
    pub fn pulls(&self) -> Vec<Value> {
        lock(&self.shared.pulls).clone()
    }

    /// Every request received so far, oldest first, but the credential checks
    /// ([`GithubFake::credential_checks`]): what acted on, or read, the repository and the App.
    pub fn requests(&self) -> Vec<SeenRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The read-only checks of the credentials (`GET /rate_limit`, `GET /app/installations/{id}`),
    /// oldest first.
    pub fn credential_checks(&self) -> Vec<SeenRequest> {
        lock(&self.shared.credential_checks).clone()
    }

    /// Plans a failure; faults are used in order, each once.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.faults).push_back(fault);
    }

    /// Gives `login` role `role` on the repository (`admin`, `maintain`, `write`, `triage`,
    /// `read`); a login never given one is not a GitHub user (404).
    pub fn set_role(&self, login: &str, role: &str) {
        let mut roles = lock(&self.shared.roles);
        roles.retain(|(l, _)| !l.eq_ignore_ascii_case(login));
        roles.push((login.to_ascii_lowercase(), role.to_string()));
    }

    /// Knows a GitHub App `client_id` (keyed with [`APP_TEST_KEY_PEM`]) installed as
    /// `installation_id` on the repository: `POST /app/installations/{id}/access_tokens` checks
    /// its JWT (RS256 signature, `iss`, `iat`, `exp` at most ten minutes ahead) and issues
    /// tokens that expire after `lifetime_secs`, accepted like the fake's token until then.
    pub fn with_app(&self, client_id: &str, installation_id: u64, lifetime_secs: i64) {
        *lock(&self.shared.app) = Some(App {
            client_id: client_id.to_string(),
            installation_id,
            lifetime_secs,
            repositories: vec![self.shared.repo.clone()],
            issued: Vec::new(),
        });
    }

    /// The installation tokens issued so far, oldest first.
    pub fn issued_tokens(&self) -> Vec<String> {
        self.issued().into_iter().map(|t| t.token).collect()
    }

    /// The installation tokens issued so far with their scopes, oldest first.
    pub fn issued(&self) -> Vec<IssuedToken> {
        lock(&self.shared.app)
            .as_ref()
            .map(|app| app.issued.clone())
            .unwrap_or_default()
    }

    /// Installs the App (see [`GithubFake::with_app`]) on these repositories of the owner as
    /// well as the fake's own (the fake serves the API of its own only).
    pub fn install_on(&self, repositories: &[&str]) {
        if let Some(app) = lock(&self.shared.app).as_mut() {
            for name in repositories {
                if !app.repositories.iter().any(|r| r == name) {
                    app.repositories.push(name.to_string());
                }
            }
        }
    }

    /// Every issue comment so far, oldest first.
    pub fn comments(&self) -> Vec<Comment> {
        lock(&self.shared.comments).clone()
    }

    /// Waits up to `timeout` for `done` to hold of the comments; them, or `None`.
    pub fn wait_for_comments(
        &self,
        timeout: std::time::Duration,
        done: impl Fn(&[Comment]) -> bool,
    ) -> Option<Vec<Comment>> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let comments = self.comments();
            if done(&comments) {
                return Some(comments);
            }
            if std::time::Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Closes a pull request (as a person on GitHub would).
    pub fn close(&self, number: u64) {
        for pull in lock(&self.shared.pulls).iter_mut() {
            if pull["number"] == number {
                pull["state"] = json!("closed");
            }
        }
    }
}

impl Drop for GithubFake {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

fn github_error(status: StatusCode, message: &str, errors: Option<Value>) -> Response {
    let mut body = json!({
        "message": message,
        "documentation_url": "https://docs.github.com/rest/pulls/pulls",
        "status": status.as_u16().to_string(),
    });
    if let Some(errors) = errors {
        body["errors"] = errors;
    }
    (status, axum::Json(body)).into_response()
}

/// The sha of `refs/heads/<branch>` in the bare remote.
fn branch_sha(remote: &Path, branch: &str) -> Option<String> {
    if branch.is_empty() || branch.starts_with('-') {
        return None;
    }
    let output = Command::new("git")
        .arg(format!("--git-dir={}", remote.display()))
        .args([
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            &format!("refs/heads/{branch}^{{commit}}"),
        ])
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}

fn query_pairs(query: &str) -> Vec<(String, String)> {
    query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        let escaped = (byte == b'%')
            .then(|| bytes.get(index + 1..index + 3))
            .flatten()
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (byte, escaped) {
            (_, Some(decoded)) => {
                out.push(decoded);
                index += 3;
            }
            (b'+', None) => {
                out.push(b' ');
                index += 1;
            }
            (other, None) => {
                out.push(other);
                index += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let seen = SeenRequest {
        method: method.to_string(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or_default().to_string(),
        headers: headers
            .iter()
            .map(|(n, v)| {
                (
                    n.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect(),
        body: serde_json::from_slice(&body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())),
    };
    let credential_check = method == Method::GET
        && (uri.path() == "/rate_limit" || uri.path().starts_with("/app/installations/"));
    if credential_check {
        lock(&shared.credential_checks).push(seen);
    } else {
        lock(&shared.requests).push(seen);
    }

    // GitHub refuses requests without a User-Agent.
    if headers.get("user-agent").is_none() {
        return github_error(
            StatusCode::FORBIDDEN,
            "Request forbidden by administrative rules. Please make sure your request has a User-Agent header",
            None,
        );
    }
    if let Some(version) = headers.get("x-github-api-version") {
        if version.as_bytes() != API_VERSION.as_bytes() {
            return github_error(
                StatusCode::BAD_REQUEST,
                &format!(
                    "API version {} is not supported.",
                    String::from_utf8_lossy(version.as_bytes())
                ),
                None,
            );
        }
    }
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("token "))
        })
        .unwrap_or_default()
        .to_string();
    if method == Method::POST {
        if let Some(id) = uri
            .path()
            .strip_prefix("/app/installations/")
            .and_then(|rest| rest.strip_suffix("/access_tokens"))
        {
            return installation_token(&shared, id, &bearer, &body);
        }
    }
    if method == Method::GET {
        if let Some(id) = uri.path().strip_prefix("/app/installations/") {
            return installation(&shared, id, &bearer);
        }
    }
    let now = now_secs();
    let installation = lock(&shared.app).as_ref().and_then(|app| {
        app.issued
            .iter()
            .find(|issued| issued.token == bearer && issued.expires_at > now)
            .cloned()
    });
    if bearer != shared.token && installation.is_none() {
        return github_error(StatusCode::UNAUTHORIZED, "Bad credentials", None);
    }
    if method == Method::GET && uri.path() == "/rate_limit" {
        return (
            StatusCode::OK,
            axum::Json(json!({"resources": {"core": {"limit": 5000, "remaining": 4999, "reset": now + 3600, "used": 1}}})),
        )
            .into_response();
    }
    let prefix = format!("/repos/{}/{}/", shared.owner, shared.repo);
    let Some(rest) = uri.path().strip_prefix(&prefix) else {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    };
    let parts: Vec<&str> = rest.split('/').collect();
    // An installation token acts only on the repositories and with the permissions it has.
    if let Some(issued) = &installation {
        let (needed, level) = match (&method, parts.first()) {
            (_, Some(&"pulls")) if method == Method::GET => ("pull_requests", "read"),
            (_, Some(&"pulls")) => ("pull_requests", "write"),
            (_, Some(&"issues")) if method == Method::GET => ("issues", "read"),
            (_, Some(&"issues")) => ("issues", "write"),
            _ => ("metadata", "read"),
        };
        let in_scope = issued
            .repositories
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| *n == shared.repo));
        let granted = issued
            .permissions
            .iter()
            .any(|(name, has)| name == needed && (has == "write" || has == level));
        if !in_scope || !granted {
            return github_error(
                StatusCode::FORBIDDEN,
                "Resource not accessible by integration",
                None,
            );
        }
    }
    match (&method, parts.as_slice()) {
        (&Method::POST, ["pulls"]) => create(&shared, &body),
        (&Method::GET, ["pulls"]) => list(&shared, uri.query().unwrap_or_default()),
        (&Method::GET, ["collaborators", user, "permission"]) => permission(&shared, user),
        (&Method::POST, ["issues", number, "comments"]) => match number.parse::<u64>() {
            Ok(number) if number > 0 => create_comment(&shared, number, &body),
            _ => github_error(StatusCode::NOT_FOUND, "Not Found", None),
        },
        (&Method::GET, ["issues", number, "comments"]) => match number.parse::<u64>() {
            Ok(number) => list_comments(&shared, number, uri.query().unwrap_or_default()),
            _ => github_error(StatusCode::NOT_FOUND, "Not Found", None),
        },
        (&Method::PATCH, ["issues", "comments", id]) => match id.parse::<u64>() {
            Ok(id) => update_comment(&shared, id, &body),
            _ => github_error(StatusCode::NOT_FOUND, "Not Found", None),
        },
        _ => github_error(StatusCode::NOT_FOUND, "Not Found", None),
    }
}

fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `secs` (Unix) as GitHub writes times: `2026-12-03T13:20:00Z`.
fn utc(secs: i64) -> String {
    warden_time::rfc3339_seconds(secs.saturating_mul(1000))
}

/// `POST /app/installations/{id}/access_tokens`, authenticated by the App's JWT; the body may
/// narrow the token to `repositories` (names of the installation's) and `permissions` (at most
/// the installation's).
/// Checks an App's JWT as GitHub does: RS256 by the App's key, `iss` its client id, issued in
/// the past, expiring in the future and at most ten minutes after it was issued; GitHub's
/// message when it is not.
fn verify_jwt(app: &App, jwt: &str) -> Result<(), &'static str> {
    use base64::Engine as _;
    let parts: Vec<&str> = jwt.split('.').collect();
    let decode = |part: &str| {
        base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(part)
            .ok()
    };
    let (Some(header), Some(claims), Some(signature)) = (
        parts.first().and_then(|p| decode(p)),
        parts.get(1).and_then(|p| decode(p)),
        parts.get(2).and_then(|p| decode(p)),
    ) else {
        return Err("A JSON web token could not be decoded");
    };
    if parts.len() != 3 {
        return Err("A JSON web token could not be decoded");
    }
    let header: Value = serde_json::from_slice(&header).unwrap_or(Value::Null);
    let claims: Value = serde_json::from_slice(&claims).unwrap_or(Value::Null);
    if header["alg"] != "RS256" {
        return Err("A JSON web token could not be decoded");
    }
    let public = base64::engine::general_purpose::STANDARD
        .decode(APP_TEST_PUBLIC_KEY_DER_BASE64)
        .unwrap_or_default();
    let key = ring::signature::UnparsedPublicKey::new(
        &ring::signature::RSA_PKCS1_2048_8192_SHA256,
        public,
    );
    let signed = format!("{}.{}", parts[0], parts[1]);
    if key.verify(signed.as_bytes(), &signature).is_err() {
        return Err("A JSON web token could not be decoded");
    }
    let now = now_secs();
    let (Some(iat), Some(exp)) = (claims["iat"].as_i64(), claims["exp"].as_i64()) else {
        return Err("A JSON web token could not be decoded");
    };
    if claims["iss"] != app.client_id.as_str() {
        return Err("A JSON web token could not be decoded");
    }
    if iat > now + 60 {
        return Err(
            "'Issued at' claim ('iat') must be an Integer representing a time in the past.",
        );
    }
    if exp <= now {
        return Err("'Expiration time' claim ('exp') must be a numeric value representing the future time at which the assertion expires.");
    }
    if exp > now + 600 || exp - iat > 660 {
        return Err("'Expiration time' claim ('exp') is too far in the future.");
    }
    Ok(())
}

/// `GET /app/installations/{id}` with the App's JWT: the installation, as GitHub shows it.
fn installation(shared: &Shared, id: &str, jwt: &str) -> Response {
    let app = lock(&shared.app);
    let Some(app) = app.as_ref() else {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    };
    if let Err(message) = verify_jwt(app, jwt) {
        return github_error(StatusCode::UNAUTHORIZED, message, None);
    }
    if id.parse::<u64>().ok() != Some(app.installation_id) {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    }
    (
        StatusCode::OK,
        axum::Json(json!({
            "id": app.installation_id,
            "account": {"login": shared.owner},
            "repository_selection": "selected",
            "permissions": APP_PERMISSIONS.iter().map(|(n, l)| (n.to_string(), json!(l))).collect::<serde_json::Map<_, _>>(),
        })),
    )
        .into_response()
}

fn installation_token(shared: &Shared, id: &str, jwt: &str, body: &Bytes) -> Response {
    let mut app = lock(&shared.app);
    let Some(app) = app.as_mut() else {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    };
    if let Err(message) = verify_jwt(app, jwt) {
        return github_error(StatusCode::UNAUTHORIZED, message, None);
    }
    if id.parse::<u64>().ok() != Some(app.installation_id) {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    }
    let request: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(body) {
            Ok(value @ Value::Object(_)) => value,
            _ => return github_error(StatusCode::BAD_REQUEST, "Problems parsing JSON", None),
        }
    };
    let repositories = match request.get("repositories") {
        None => None,
        Some(Value::Array(names)) => {
            let names: Vec<String> = names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect();
            if names.is_empty() || names.iter().any(|n| !app.repositories.contains(n)) {
                return github_error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "There is at least one repository that does not exist or is not accessible to the parent installation.",
                    None,
                );
            }
            Some(names)
        }
        Some(_) => return invalid_field("repositories", "invalid"),
    };
    let granted = |name: &str| {
        APP_PERMISSIONS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, level)| *level)
    };
    let permissions: Vec<(String, String)> = match request.get("permissions") {
        None => APP_PERMISSIONS
            .iter()
            .map(|(n, l)| (n.to_string(), l.to_string()))
            .collect(),
        Some(Value::Object(asked)) => {
            let mut permissions = Vec::new();
            for (name, level) in asked {
                let level = level.as_str().unwrap_or_default();
                let allowed = matches!(
                    (granted(name), level),
                    (Some("write"), "read" | "write") | (Some("read"), "read")
                );
                if !allowed {
                    return github_error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        "The permissions requested are not granted to this installation.",
                        None,
                    );
                }
                permissions.push((name.clone(), level.to_string()));
            }
            permissions
        }
        Some(_) => return invalid_field("permissions", "invalid"),
    };
    let token = format!("ghs_fake{:04}{}", app.issued.len() + 1, "x".repeat(32));
    let expires_at = now_secs() + app.lifetime_secs;
    let shown_permissions: serde_json::Map<String, Value> = permissions
        .iter()
        .map(|(n, l)| (n.clone(), json!(l)))
        .collect();
    let mut answer = json!({
        "token": token,
        "expires_at": utc(expires_at),
        "permissions": shown_permissions,
        "repository_selection": if repositories.is_some() { "selected" } else { "all" },
    });
    if let Some(names) = &repositories {
        answer["repositories"] = names
            .iter()
            .map(|name| json!({"name": name, "full_name": format!("{}/{name}", shared.owner)}))
            .collect();
    }
    app.issued.push(IssuedToken {
        token,
        expires_at,
        repositories,
        permissions,
    });
    (StatusCode::CREATED, axum::Json(answer)).into_response()
}

fn user_json(login: &str) -> Value {
    json!({"login": login, "id": 7, "node_id": "U_fake", "type": "User", "site_admin": false})
}

/// `GET /repos/{owner}/{repo}/collaborators/{user}/permission`: `permission` is GitHub's
/// legacy field (`maintain` shows as `write`, `triage` as `read`), `role_name` the role.
fn permission(shared: &Shared, user: &str) -> Response {
    {
        let mut faults = lock(&shared.faults);
        if let Some(Fault::FailPermission(status)) = faults.front().cloned() {
            faults.pop_front();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            return github_error(status, "Server Error", None);
        }
    }
    let role = lock(&shared.roles)
        .iter()
        .find(|(l, _)| l.eq_ignore_ascii_case(user))
        .map(|(_, r)| r.clone());
    let Some(role) = role else {
        return github_error(StatusCode::NOT_FOUND, "Not Found", None);
    };
    let legacy = match role.as_str() {
        "admin" => "admin",
        "maintain" | "write" => "write",
        "triage" | "read" => "read",
        _ => "none",
    };
    let mut user_value = user_json(user);
    user_value["role_name"] = json!(role);
    (
        StatusCode::OK,
        axum::Json(json!({"permission": legacy, "role_name": role, "user": user_value})),
    )
        .into_response()
}

const MAX_COMMENT_CHARS: usize = 65_536;

/// The `body` of a comment request, or GitHub's refusal.
fn comment_body(body: &Bytes) -> Result<String, Box<Response>> {
    let request: Value = match serde_json::from_slice(body) {
        Ok(value @ Value::Object(_)) => value,
        _ => {
            return Err(Box::new(github_error(
                StatusCode::BAD_REQUEST,
                "Problems parsing JSON",
                None,
            )))
        }
    };
    let invalid = |code: &str, message: Option<&str>| {
        let mut error = json!({"resource": "IssueComment", "field": "body", "code": code});
        if let Some(message) = message {
            error["message"] = json!(message);
        }
        Box::new(github_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Validation Failed",
            Some(json!([error])),
        ))
    };
    match request.get("body").and_then(Value::as_str) {
        None => Err(invalid("missing_field", None)),
        Some(text) if text.trim().is_empty() => Err(invalid("missing_field", None)),
        Some(text) if text.chars().count() > MAX_COMMENT_CHARS => Err(invalid(
            "custom",
            Some("body is too long (maximum is 65536 characters)"),
        )),
        Some(text) => Ok(text.to_string()),
    }
}

fn comment_json(shared: &Shared, comment: &Comment) -> Value {
    let base_url = lock(&shared.base_url).clone();
    let (owner, repo) = (&shared.owner, &shared.repo);
    json!({
        "id": comment.id,
        "node_id": format!("IC_fake{}", comment.id),
        "url": format!("{base_url}/repos/{owner}/{repo}/issues/comments/{}", comment.id),
        "html_url": format!("https://github.example/{owner}/{repo}/issues/{}#issuecomment-{}", comment.issue, comment.id),
        "issue_url": format!("{base_url}/repos/{owner}/{repo}/issues/{}", comment.issue),
        "body": comment.body,
        "user": user_json("warden-bot"),
        "author_association": "MEMBER",
        "created_at": "2026-12-02T12:00:00Z",
        "updated_at": "2026-12-02T12:00:00Z",
    })
}

fn create_comment(shared: &Shared, issue: u64, body: &Bytes) -> Response {
    let text = match comment_body(body) {
        Ok(text) => text,
        Err(refusal) => return *refusal,
    };
    let comment = {
        let mut comments = lock(&shared.comments);
        let comment = Comment {
            id: 9_000 + comments.len() as u64 + 1,
            issue,
            body: text.clone(),
            history: vec![text],
        };
        comments.push(comment.clone());
        comment
    };
    let value = comment_json(shared, &comment);
    let location = value["url"].as_str().unwrap_or_default().to_string();
    (
        StatusCode::CREATED,
        [("location", location)],
        axum::Json(value),
    )
        .into_response()
}

fn update_comment(shared: &Shared, id: u64, body: &Bytes) -> Response {
    let text = match comment_body(body) {
        Ok(text) => text,
        Err(refusal) => return *refusal,
    };
    let updated = {
        let mut comments = lock(&shared.comments);
        comments.iter_mut().find(|c| c.id == id).map(|comment| {
            comment.body = text.clone();
            comment.history.push(text);
            comment.clone()
        })
    };
    match updated {
        Some(comment) => {
            (StatusCode::OK, axum::Json(comment_json(shared, &comment))).into_response()
        }
        None => github_error(StatusCode::NOT_FOUND, "Not Found", None),
    }
}

/// One page (`per_page`, default 30, at most 100; `page` from 1) of an issue's comments,
/// oldest first.
fn list_comments(shared: &Shared, issue: u64, query: &str) -> Response {
    let pairs = query_pairs(query);
    let number = |name: &str, default: usize| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(default)
    };
    let per_page = number("per_page", 30).clamp(1, 100);
    let page = number("page", 1).max(1);
    let comments: Vec<Value> = lock(&shared.comments)
        .iter()
        .filter(|c| c.issue == issue)
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|c| comment_json(shared, c))
        .collect();
    (StatusCode::OK, axum::Json(Value::Array(comments))).into_response()
}

fn invalid_field(field: &str, code: &str) -> Response {
    github_error(
        StatusCode::UNPROCESSABLE_ENTITY,
        "Validation Failed",
        Some(json!([{"resource": "PullRequest", "field": field, "code": code}])),
    )
}

fn create(shared: &Shared, body: &Bytes) -> Response {
    let request: Value = match serde_json::from_slice(body) {
        Ok(value @ Value::Object(_)) => value,
        _ => return github_error(StatusCode::BAD_REQUEST, "Problems parsing JSON", None),
    };
    let field = |name: &str| {
        request
            .get(name)
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let Some(title) = field("title").filter(|t| !t.trim().is_empty()) else {
        return invalid_field("title", "missing_field");
    };
    let Some(head) = field("head") else {
        return invalid_field("head", "missing_field");
    };
    let Some(base) = field("base") else {
        return invalid_field("base", "missing_field");
    };
    // `owner:branch` or a branch of this repository.
    let head_branch = match head.split_once(':') {
        Some((owner, branch)) if owner == shared.owner => branch.to_string(),
        Some(_) => return invalid_field("head", "invalid"),
        None => head.clone(),
    };
    let Some(head_sha) = branch_sha(&shared.remote, &head_branch) else {
        return invalid_field("head", "invalid");
    };
    let Some(base_sha) = branch_sha(&shared.remote, &base) else {
        return invalid_field("base", "invalid");
    };
    if head_sha == base_sha {
        return github_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Validation Failed",
            Some(json!([{"resource": "PullRequest", "code": "custom",
                "message": format!("No commits between {base} and {head_branch}")}])),
        );
    }
    let fault = {
        let mut faults = lock(&shared.faults);
        match faults.front() {
            Some(Fault::FailList(_) | Fault::FailPermission(_)) | None => None,
            Some(_) => faults.pop_front(),
        }
    };
    if let Some(Fault::FailCreate(status)) = fault {
        let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
        return github_error(status, "Server Error", None);
    }
    let label = format!("{}:{head_branch}", shared.owner);
    let mut pulls = lock(&shared.pulls);
    let duplicate = pulls.iter().any(|p| {
        p["state"] == "open" && p["head"]["label"] == label.as_str() && p["base"]["ref"] == base
    });
    if duplicate {
        return github_error(
            StatusCode::UNPROCESSABLE_ENTITY,
            "Validation Failed",
            Some(json!([{"resource": "PullRequest", "code": "custom",
                "message": format!("A pull request already exists for {label}.")}])),
        );
    }
    let number = pulls.len() as u64 + 1;
    let base_url = lock(&shared.base_url).clone();
    let user = json!({"login": "warden-bot", "id": 1, "type": "User"});
    let repo_json = json!({
        "id": 1,
        "name": shared.repo,
        "full_name": format!("{}/{}", shared.owner, shared.repo),
        "owner": {"login": shared.owner, "id": 2, "type": "Organization"},
    });
    let pull = json!({
        "url": format!("{base_url}/repos/{}/{}/pulls/{number}", shared.owner, shared.repo),
        "id": 1000 + number,
        "node_id": format!("PR_fake{number}"),
        "html_url": format!("https://github.example/{}/{}/pull/{number}", shared.owner, shared.repo),
        "number": number,
        "state": "open",
        "locked": false,
        "title": title,
        "body": field("body"),
        "draft": request.get("draft").and_then(Value::as_bool).unwrap_or(false),
        "user": user,
        "created_at": "2026-12-02T12:00:00Z",
        "updated_at": "2026-12-02T12:00:00Z",
        "head": {"label": label, "ref": head_branch, "sha": head_sha, "user": {"login": shared.owner}, "repo": repo_json},
        "base": {"label": format!("{}:{base}", shared.owner), "ref": base, "sha": base_sha, "user": {"login": shared.owner}, "repo": repo_json},
        "merged": false,
    });
    pulls.push(pull.clone());
    drop(pulls);
    match fault {
        Some(Fault::CreateThenFail) => github_error(StatusCode::BAD_GATEWAY, "Server Error", None),
        Some(Fault::CreateThenDrop) => {
            let cut = futures_util::stream::once(async {
                Err::<Bytes, std::io::Error>(std::io::Error::other("connection cut by the fake"))
            });
            Response::builder()
                .status(StatusCode::CREATED)
                .header("content-type", "application/json; charset=utf-8")
                .header("content-length", "4096")
                .body(Body::from_stream(cut))
                .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
        }
        _ => {
            let location = pull["url"].as_str().unwrap_or_default().to_string();
            (
                StatusCode::CREATED,
                [("location", location)],
                axum::Json(pull),
            )
                .into_response()
        }
    }
}

fn list(shared: &Shared, query: &str) -> Response {
    {
        let mut faults = lock(&shared.faults);
        if let Some(Fault::FailList(status)) = faults.front().cloned() {
            faults.pop_front();
            let status = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
            return github_error(status, "Server Error", None);
        }
    }
    let pairs = query_pairs(query);
    let get = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let state = get("state").unwrap_or_else(|| "open".into());
    if !matches!(state.as_str(), "open" | "closed" | "all") {
        return invalid_field("state", "invalid");
    }
    let head = get("head");
    let base = get("base");
    let pulls: Vec<Value> = lock(&shared.pulls)
        .iter()
        .filter(|p| state == "all" || p["state"] == state.as_str())
        // GitHub filters by `user:ref-name`; a head without the user matches nothing.
        .filter(|p| {
            head.as_ref()
                .is_none_or(|h| p["head"]["label"] == h.as_str())
        })
        .filter(|p| base.as_ref().is_none_or(|b| p["base"]["ref"] == b.as_str()))
        .rev() // newest first, like GitHub's default sort (created, desc)
        .cloned()
        .collect();
    (StatusCode::OK, axum::Json(Value::Array(pulls))).into_response()
}

#[cfg(test)]
mod tests {
    use super::{percent_decode, utc};

    #[test]
    fn times_are_written_as_github_writes_them() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(1_468_275_250), "2016-07-11T22:14:10Z");
        assert_eq!(utc(951_825_600), "2000-02-29T12:00:00Z");
    }

    #[test]
    fn decodes_query_values() {
        assert_eq!(percent_decode("acme%3Awarden%2Ftsk_1"), "acme:warden/tsk_1");
        assert_eq!(percent_decode("a+b"), "a b");
        assert_eq!(percent_decode("bad%zz"), "bad%zz");
        assert_eq!(percent_decode("end%4"), "end%4");
        assert_eq!(percent_decode("end%"), "end%");
    }
}
