//! The web console: server-rendered pages over the same
//! [`TaskService`](warden_service::tasks::TaskService) as the API, and the
//! same identity ([`warden_service::access`]). A handler reads the form or query, calls one
//! service method and renders a page or redirects; it holds no rule of its own (who may see,
//! answer, approve or cancel what is the service's).
//!
//! - **Sign-in** with a password (`warden web passwd`) or an API token pasted once starts a
//!   session: a random secret in a cookie (HttpOnly, SameSite=Strict, Path=/), only its digest
//!   stored. When the sign-in page was loaded over HTTPS (the form's `Origin` says so) the
//!   cookie is `__Host-warden_session` and `Secure`; over plain HTTP (a laptop's
//!   `http://127.0.0.1`) it cannot be either, and is `warden_session`. Failed sign-ins spend
//!   from the client address's bucket of failed authentications, as the API's do, and a
//!   password's from its account name's; a throttled sign-in waits for its turn
//!   ([`super::SignInThrottle`]) instead of being refused.
//! - **Cross-site requests:** every state-changing request needs the session cookie (which
//!   SameSite=Strict keeps off cross-site requests) and proof it came from the console itself:
//!   `Sec-Fetch-Site: same-origin`, or, from browsers that do not send it, an `Origin` equal
//!   to the request's `Host`. The router's host pinning (421) applies here as to the API.
//! - **Content Security Policy** `default-src 'self'` with no inline script or style, no
//!   framing and no remote images, on every console response; pages are `no-store`.
//! - The live timeline is read by `assets/app.js` from the API's own event stream, which
//!   accepts the session cookie for reads (see `routes/auth.rs`).

mod assets;
mod charts;
mod code;
mod format;
mod markdown;
mod pages;

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Form, FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;
use maud::Markup;
use serde::Deserialize;
use warden_protocol::{TaskKind, TaskStatus};
use warden_service::access::{AccessError, SignedIn};
use warden_service::tasks::{Principal, ServiceError, Submission, TaskListing};

use super::ApiState;
pub use pages::Budgets;

use super::auth::session_secret;
pub use super::auth::{PLAIN_COOKIE, SECURE_COOKIE};

const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
                   form-action 'self'; frame-ancestors 'none'; manifest-src 'self'; \
                   worker-src 'self'";

/// The console's routes (added to the API's router when `[web] enabled`).
pub fn routes() -> Router<Arc<ApiState>> {
    Router::new()
        .route("/", get(task_list))
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/new", get(new_task_page))
        .route("/tasks", post(submit))
        .route("/tasks/{id}", get(task_page))
        .route("/tasks/{id}/answer", post(answer))
        .route("/tasks/{id}/follow-up", post(follow_up))
        .route("/tasks/{id}/message", post(message))
        .route("/tasks/{id}/cancel", post(cancel))
        .route("/tasks/{id}/retry", post(retry))
        .route("/approvals/{id}/approve", post(approve))
        .route("/approvals/{id}/reject", post(reject))
        .route("/usage", get(usage))
        .route("/sessions", get(sessions))
        .route("/sessions/{id}/revoke", post(revoke_session))
        .route("/assets/{name}", get(assets::asset))
        .route("/manifest.webmanifest", get(assets::manifest))
        .route("/sw.js", get(assets::service_worker))
        .layer(axum::middleware::from_fn(security_headers))
}

/// CSP and its companions on every console response; pages are never stored.
async fn security_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

fn html(markup: Markup) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        )],
        markup.into_string(),
    )
        .into_response()
}

fn html_with_status(status: StatusCode, markup: Markup) -> Response {
    let mut response = html(markup);
    *response.status_mut() = status;
    response
}

fn see_other(to: &str) -> Response {
    Redirect::to(to).into_response()
}

// --- sessions and cross-site protection ---

/// Who is signed in, with their session's secret; `Err` redirects to the sign-in page.
async fn viewer(state: &ApiState, headers: &HeaderMap) -> Result<(Principal, String), Response> {
    let to_sign_in = || see_other("/sign-in");
    let secret = session_secret(headers).ok_or_else(to_sign_in)?;
    match state.access.session(&secret).await {
        Ok(Some((_, principal))) => Ok((principal, secret)),
        Ok(None) => Err(to_sign_in()),
        Err(error) => Err(server_error(None, &error.to_string())),
    }
}

/// Whether a state-changing request came from the console's own pages.
fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site.as_bytes() == b"same-origin";
    }
    let (Some(origin), Some(host)) = (headers.get(header::ORIGIN), headers.get(header::HOST))
    else {
        return false;
    };
    let (Ok(origin), Ok(host)) = (origin.to_str(), host.to_str()) else {
        return false;
    };
    ["http://", "https://"]
        .iter()
        .any(|scheme| origin.strip_prefix(scheme) == Some(host))
}

fn cross_site() -> Response {
    html_with_status(
        StatusCode::FORBIDDEN,
        pages::problem(
            None,
            "Refused",
            "This request did not come from the console's own pages (cross-site requests that \
             change anything are refused). Open the console and try again there.",
        ),
    )
}

/// The signed-in viewer of a state-changing request that came from the console.
async fn writer_request(
    state: &ApiState,
    headers: &HeaderMap,
) -> Result<(Principal, String), Response> {
    if !same_origin(headers) {
        return Err(cross_site());
    }
    viewer(state, headers).await
}

/// The signed-in viewer of a state-changing request that came from the console, and its form.
/// The origin and the session are checked before the body is read: a cross-site or signed-out
/// request is refused whatever it sends, and learns nothing of the form's fields.
async fn writer_form<T: serde::de::DeserializeOwned>(
    state: &ApiState,
    request: Request,
) -> Result<(Principal, T), Response> {
    let (parts, body) = request.into_parts();
    let (viewer, _) = writer_request(state, &parts.headers).await?;
    match Form::<T>::from_request(Request::from_parts(parts, body), &()).await {
        Ok(Form(form)) => Ok((viewer, form)),
        Err(rejection) => Err(html_with_status(
            rejection.status(),
            pages::problem(Some(&viewer), "Refused", &rejection.body_text()),
        )),
    }
}

fn server_error(viewer: Option<&Principal>, message: &str) -> Response {
    tracing::error!(%message, "web console request failed");
    html_with_status(
        StatusCode::INTERNAL_SERVER_ERROR,
        pages::problem(viewer, "Something went wrong", message),
    )
}

/// The status the API answers `error` with (one mapping for both interfaces) and its
/// message; no status for a failure of Warden's own (5xx), which is a server error page.
fn refusal(error: ServiceError) -> (Option<StatusCode>, String) {
    let message = error.to_string();
    let status = super::ApiError::from(error).code.status();
    ((!status.is_server_error()).then_some(status), message)
}

/// A service refusal as a page with the matching status.
fn refused(viewer: &Principal, error: ServiceError) -> Response {
    match refusal(error) {
        (Some(status), message) => refusal_page(viewer, status, &message),
        (None, message) => server_error(Some(viewer), &message),
    }
}

fn refusal_page(viewer: &Principal, status: StatusCode, message: &str) -> Response {
    let title = if status == StatusCode::NOT_FOUND {
        "Not found"
    } else {
        "Refused"
    };
    html_with_status(status, pages::problem(Some(viewer), title, message))
}

/// Milliseconds since the Unix epoch, by this machine's clock.
fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

fn session_cookie(signed_in: &SignedIn, secure: bool, now_ms: i64) -> HeaderValue {
    let max_age = ((signed_in.expires_at_ms - now_ms) / 1000).max(0);
    let text = if secure {
        format!(
            "{SECURE_COOKIE}={}; Path=/; Max-Age={max_age}; HttpOnly; Secure; SameSite=Strict",
            signed_in.secret
        )
    } else {
        format!(
            "{PLAIN_COOKIE}={}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict",
            signed_in.secret
        )
    };
    HeaderValue::from_str(&text).unwrap_or(HeaderValue::from_static(""))
}

fn cleared_cookies() -> [(header::HeaderName, HeaderValue); 2] {
    [
        (
            header::SET_COOKIE,
            HeaderValue::from_static(
                "__Host-warden_session=; Path=/; Max-Age=0; HttpOnly; Secure; SameSite=Strict",
            ),
        ),
        (
            header::SET_COOKIE,
            HeaderValue::from_static(
                "warden_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Strict",
            ),
        ),
    ]
}

// --- sign-in ---

async fn sign_in_page(State(state): State<Arc<ApiState>>, request: Request) -> Response {
    let (parts, _) = request.into_parts();
    if viewer(&state, &parts.headers).await.is_ok() {
        return see_other("/");
    }
    // The TCP peer: whether the cookie would cross the network in clear to this server.
    let address = super::auth::peer_address(&parts);
    html(pages::sign_in(
        None,
        plain_http_elsewhere(&parts.headers, address),
    ))
}

/// Reached directly (by the listen address, not a name a TLS proxy answers to) from another
/// machine: Warden itself speaks only HTTP, so the cookie would travel in clear.
fn plain_http_elsewhere(headers: &HeaderMap, address: Option<IpAddr>) -> bool {
    let by_address = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .and_then(warden_service::config::serve::parse_authority)
        .is_some_and(|authority| {
            authority
                .host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<IpAddr>()
                .is_ok()
        });
    by_address && address.is_some_and(|a| !a.is_loopback())
}

#[derive(Debug, Deserialize)]
struct SignInForm {
    name: Option<String>,
    password: Option<String>,
    token: Option<String>,
}

async fn sign_in(State(state): State<Arc<ApiState>>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let headers = parts.headers.clone();
    if !same_origin(&headers) {
        return cross_site();
    }
    let address = super::auth::client_address(&state, &parts);
    let request = Request::from_parts(parts, body);
    let Ok(Form(form)) = Form::<SignInForm>::from_request(request, &()).await else {
        return html_with_status(
            StatusCode::BAD_REQUEST,
            pages::sign_in(Some("The sign-in form could not be read."), false),
        );
    };
    let account = match (&form.name, &form.token) {
        (Some(name), None) => Some(name.as_str()),
        _ => None,
    };
    // Throttled sign-ins wait for their turn here (see `SignInThrottle`).
    let turn = match state.sign_ins.turn(&state.auth_failures, address, account) {
        Ok(turn) => turn,
        Err(super::auth::NoTurn(secs)) => {
            let mut response = html_with_status(
                StatusCode::TOO_MANY_REQUESTS,
                pages::sign_in(
                    Some(&format!(
                        "Too many failed sign-ins from this address or for this account; \
                         try again in {secs} s."
                    )),
                    false,
                ),
            );
            if let Ok(value) = HeaderValue::from_str(&secs.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
            return response;
        }
    };
    turn.wait().await;
    let address_text = address.map(|a| a.to_string());
    let user_agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let outcome = match (&form.name, &form.password, &form.token) {
        (Some(name), Some(password), None) => {
            state
                .access
                .sign_in_password(
                    name,
                    password,
                    address_text.as_deref(),
                    user_agent.as_deref(),
                )
                .await
        }
        (None, None, Some(token)) => {
            state
                .access
                .sign_in_token(token.trim(), address_text.as_deref(), user_agent.as_deref())
                .await
        }
        _ => {
            turn.succeeded();
            return html_with_status(
                StatusCode::BAD_REQUEST,
                pages::sign_in(Some("Give a name and password, or an API token."), false),
            );
        }
    };
    match &outcome {
        Err(AccessError::Unauthorized(_)) => {} // the failure keeps its units
        Ok(_) | Err(_) => turn.succeeded(),
    }
    match outcome {
        Ok(signed_in) => {
            // Rotated at sign-in: a session the browser held before ends here.
            if let Some(previous) = session_secret(&headers) {
                if let Err(error) = state.access.sign_out(&previous).await {
                    tracing::warn!(%error, "the previous console session could not be ended");
                }
            }
            let secure = headers
                .get(header::ORIGIN)
                .is_some_and(|o| o.as_bytes().starts_with(b"https://"));
            let cookie = session_cookie(&signed_in, secure, wall_ms());
            tracing::info!(who = %signed_in.principal.name, "web console sign-in");
            let mut response = see_other("/");
            // A stale cookie of the other kind must not outlive this sign-in.
            for (name, value) in cleared_cookies() {
                if value
                    .as_bytes()
                    .starts_with(if secure { b"warden_" } else { b"__Host" })
                {
                    response.headers_mut().append(name, value);
                }
            }
            response.headers_mut().append(header::SET_COOKIE, cookie);
            response
        }
        Err(error @ AccessError::Unauthorized(_)) => html_with_status(
            StatusCode::UNAUTHORIZED,
            pages::sign_in(Some(&error.to_string()), false),
        ),
        Err(AccessError::Invalid(message)) => html_with_status(
            StatusCode::BAD_REQUEST,
            pages::sign_in(Some(&message), false),
        ),
        Err(error) => server_error(None, &error.to_string()),
    }
}

async fn sign_out(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    if !same_origin(&headers) {
        return cross_site();
    }
    if let Some(secret) = session_secret(&headers) {
        if let Err(error) = state.access.sign_out(&secret).await {
            return server_error(None, &error.to_string());
        }
    }
    let mut response = see_other("/sign-in");
    for (name, value) in cleared_cookies() {
        response.headers_mut().append(name, value);
    }
    response
}

// --- tasks ---

#[derive(Debug, Deserialize, Default)]
struct ListQuery {
    repo: Option<String>,
    status: Option<String>,
    before: Option<String>,
}

async fn task_list(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(query): Query<ListQuery>,
) -> Response {
    let (viewer, _) = match viewer(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let status = match query.status.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => {
            match serde_json::from_value::<TaskStatus>(serde_json::Value::String(text.into())) {
                Ok(status) => Some(status),
                Err(_) => {
                    return refused(
                        &viewer,
                        ServiceError::Invalid(format!("unknown status {text:?}")),
                    )
                }
            }
        }
    };
    let before = match query.before.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(text) => match text.parse() {
            Ok(id) => Some(id),
            Err(_) => {
                return refused(
                    &viewer,
                    ServiceError::Invalid(format!("bad cursor {text:?}")),
                )
            }
        },
    };
    let repo = query.repo.filter(|r| !r.is_empty());
    let first_page = before.is_none();
    let listing = TaskListing {
        status,
        before,
        limit: warden_service::tasks::MAX_PAGE,
    };
    let list = match state.tasks.list(&viewer, listing).await {
        Ok(list) => list,
        Err(error) => return refused(&viewer, error),
    };
    let repos = match state.tasks.repos(&viewer).await {
        Ok(repos) => repos,
        Err(error) => return refused(&viewer, error),
    };
    // What needs the viewer comes first whatever its age: on the first page without a status
    // filter, the waiting tasks are fetched on their own too.
    let mut tasks = Vec::new();
    if status.is_none() && first_page {
        for waiting in [TaskStatus::WaitingInput, TaskStatus::WaitingApproval] {
            let listing = TaskListing {
                status: Some(waiting),
                before: None,
                limit: warden_service::tasks::MAX_PAGE,
            };
            match state.tasks.list(&viewer, listing).await {
                Ok(list) => tasks.extend(list.tasks),
                Err(error) => return refused(&viewer, error),
            }
        }
    }
    let waiting: std::collections::HashSet<_> = tasks.iter().map(|t| t.id.clone()).collect();
    tasks.extend(list.tasks.into_iter().filter(|t| !waiting.contains(&t.id)));
    let tasks: Vec<_> = tasks
        .into_iter()
        .filter(|t| {
            repo.as_ref()
                .is_none_or(|r| t.repos.iter().any(|tr| &tr.name == r))
        })
        .collect();
    let next = list.next_cursor.map(|cursor| {
        let mut query = format!("/?before={cursor}");
        if let Some(status) = &query_status(status) {
            query.push_str(&format!("&status={status}"));
        }
        if let Some(repo) = &repo {
            query.push_str(&format!("&repo={}", url_component(repo)));
        }
        query
    });
    html(pages::task_list(
        &viewer,
        &tasks,
        &repos,
        &pages::ListFilters { repo, status },
        next,
        wall_ms(),
    ))
}

fn query_status(status: Option<TaskStatus>) -> Option<String> {
    status.and_then(|s| match serde_json::to_value(s) {
        Ok(serde_json::Value::String(name)) => Some(name),
        _ => None,
    })
}

/// Percent-encodes everything but unreserved characters.
fn url_component(text: &str) -> String {
    text.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[derive(Debug, Deserialize, Default)]
struct NewTaskQuery {
    kind: Option<String>,
}

async fn new_task_page(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Query(query): Query<NewTaskQuery>,
) -> Response {
    let (viewer, _) = match viewer(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let repos = match state.tasks.repos(&viewer).await {
        Ok(repos) => repos,
        Err(error) => return refused(&viewer, error),
    };
    html(pages::new_task(
        &viewer,
        &repos,
        &pages::NewTaskInput {
            kind: query.kind.unwrap_or_else(|| "question".into()),
            ..Default::default()
        },
        None,
    ))
}

#[derive(Debug, Deserialize)]
struct SubmitForm {
    kind: String,
    repo: String,
    prompt: String,
    #[serde(default)]
    checks: String,
    #[serde(default)]
    publish: Option<String>,
    /// A maintenance's selection: `all`, `vulnerable` or package names, space- or
    /// comma-separated.
    #[serde(default)]
    select: String,
}

async fn submit(State(state): State<Arc<ApiState>>, request: Request) -> Response {
    let (viewer, form) = match writer_form::<SubmitForm>(&state, request).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let kind = match form.kind.as_str() {
        "question" => TaskKind::Question,
        "change" => TaskKind::Change,
        "maintain" => TaskKind::Maintain,
        other => {
            return refused(
                &viewer,
                ServiceError::Invalid(format!("unknown kind {other:?}")),
            )
        }
    };
    let maintain = (kind == TaskKind::Maintain).then(|| warden_service::tasks::MaintainOptions {
        select: form
            .select
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect(),
        ..warden_service::tasks::MaintainOptions::default()
    });
    // A maintenance says what it does in words when the form left the prompt empty.
    let prompt = match &maintain {
        Some(options) if form.prompt.trim().is_empty() => options.prompt(),
        _ => form.prompt.clone(),
    };
    let mut submission = Submission::new(kind, prompt, vec![form.repo.clone()]);
    submission.maintain = maintain;
    // The form shows each kind its own fields; what a browser without the script still sent
    // of another kind's is not this task's.
    let changes = kind != TaskKind::Question;
    let checks: Vec<String> = form
        .checks
        .lines()
        .map(str::trim)
        .filter(|c| !c.is_empty() && changes)
        .map(str::to_string)
        .collect();
    if !checks.is_empty() {
        submission.checks = Some(checks);
    }
    let publish = changes && form.publish.as_deref() == Some("true");
    if publish {
        submission.publish = Some(true);
    }
    match state.tasks.submit(&viewer, submission, None).await {
        Ok(submitted) => see_other(&format!("/tasks/{}", submitted.task.id)),
        Err(error) => {
            // A viewer may not submit (403): the form is shown again only for what the
            // submitter can fix.
            let (status, message) = match refusal(error) {
                (None, message) => return server_error(Some(&viewer), &message),
                (Some(StatusCode::FORBIDDEN), message) => {
                    return refusal_page(&viewer, StatusCode::FORBIDDEN, &message)
                }
                (Some(status), message) => (status, message),
            };
            let repos = state.tasks.repos(&viewer).await.unwrap_or_default();
            html_with_status(
                status,
                pages::new_task(
                    &viewer,
                    &repos,
                    &pages::NewTaskInput {
                        kind: form.kind,
                        repo: form.repo,
                        prompt: form.prompt,
                        checks: form.checks,
                        publish,
                        select: form.select,
                    },
                    Some(&message),
                ),
            )
        }
    }
}

async fn task_page(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (viewer, _) = match viewer(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let task = match state.tasks.task(&viewer, &id).await {
        Ok(task) => task,
        Err(error) => return refused(&viewer, error),
    };
    let messages = match state.tasks.messages(&viewer, &id).await {
        Ok(messages) => messages,
        Err(error) => return refused(&viewer, error),
    };
    let cited = match state.tasks.cited_lines(&viewer, &id).await {
        Ok(cited) => cited,
        Err(error) => return refused(&viewer, error),
    };
    let has_proposal = task
        .result
        .as_ref()
        .and_then(|r| r.get("outcome"))
        .and_then(|o| o.as_str())
        == Some("proposal");
    let diff = if has_proposal {
        state.tasks.proposal_diff(&viewer, &id).await.ok()
    } else {
        None
    };
    html(pages::task_page(
        &viewer,
        &pages::TaskPage {
            task: &task,
            messages: &messages,
            cited: &cited,
            diff: diff.as_ref(),
        },
    ))
}

#[derive(Debug, Deserialize)]
struct TextForm {
    text: String,
}

/// After an action on a task: the page of the task it led to, or the refusal.
fn task_or_refusal(
    viewer: &Principal,
    outcome: Result<warden_protocol::views::TaskView, ServiceError>,
) -> Response {
    match outcome {
        Ok(task) => see_other(&format!("/tasks/{}", task.id)),
        Err(error) => refused(viewer, error),
    }
}

/// The task actions a console form can take.
#[derive(Debug, Clone, Copy)]
enum Action {
    Answer,
    FollowUp,
    /// A message to a queued or running task (or whatever `POST …/messages` does with it).
    Message,
    Cancel,
    Retry,
}

/// Takes `action` on task `id` for the signed-in viewer of a console request: one service
/// method each.
async fn act(state: &ApiState, id: &str, request: Request, action: Action) -> Response {
    let tasks = &state.tasks;
    match action {
        Action::Answer | Action::FollowUp | Action::Message => {
            let (viewer, form) = match writer_form::<TextForm>(state, request).await {
                Ok(v) => v,
                Err(response) => return response,
            };
            let outcome = match action {
                Action::Answer => tasks.answer(&viewer, id, &form.text).await,
                Action::Message => tasks.post_message(&viewer, id, &form.text).await,
                _ => tasks.follow_up(&viewer, id, &form.text).await,
            };
            task_or_refusal(&viewer, outcome)
        }
        Action::Cancel | Action::Retry => {
            let (viewer, _) = match writer_request(state, request.headers()).await {
                Ok(v) => v,
                Err(response) => return response,
            };
            let outcome = match action {
                Action::Cancel => tasks.cancel(&viewer, id).await,
                _ => tasks.retry(&viewer, id).await,
            };
            task_or_refusal(&viewer, outcome)
        }
    }
}

async fn answer(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    act(&state, &id, request, Action::Answer).await
}

async fn message(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    act(&state, &id, request, Action::Message).await
}

async fn follow_up(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    act(&state, &id, request, Action::FollowUp).await
}

async fn cancel(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    act(&state, &id, request, Action::Cancel).await
}

async fn retry(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    act(&state, &id, request, Action::Retry).await
}

#[derive(Debug, Deserialize)]
struct DecisionForm {
    hash: String,
    /// The hash again, from the box the approver ticks to say they reviewed what it names;
    /// an approval without it is refused (rejecting needs none).
    #[serde(default)]
    confirm: Option<String>,
}

async fn decide(
    state: &ApiState,
    id: &str,
    request: Request,
    decision: warden_protocol::Decision,
) -> Response {
    let (viewer, form) = match writer_form::<DecisionForm>(state, request).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    // Who may decide is the service's to say, before the console asks for its confirmation.
    if let Err(error) = state.tasks.may_decide(&viewer, id).await {
        return refused(&viewer, error);
    }
    if decision == warden_protocol::Decision::Approve && form.confirm.as_deref() != Some(&form.hash)
    {
        return refusal_page(
            &viewer,
            StatusCode::UNPROCESSABLE_ENTITY,
            &format!(
                "Nothing was approved: tick the box saying you reviewed {} before approving. \
                 Go back to the task, read its diff and validations, and decide there.",
                form.hash
            ),
        );
    }
    match state.tasks.decide(&viewer, id, decision, &form.hash).await {
        Ok(approval) => see_other(&format!("/tasks/{}", approval.task_id)),
        Err(error) => refused(&viewer, error),
    }
}

async fn approve(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    decide(&state, &id, request, warden_protocol::Decision::Approve).await
}

async fn reject(
    State(state): State<Arc<ApiState>>,
    Path(id): Path<String>,
    request: Request,
) -> Response {
    decide(&state, &id, request, warden_protocol::Decision::Reject).await
}

// --- usage and sessions ---

async fn usage(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    let (viewer, _) = match viewer(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let summary = match state.tasks.usage(&viewer, None).await {
        Ok(summary) => summary,
        Err(error) => return refused(&viewer, error),
    };
    let by_repo = match state.tasks.spend_by_repo(&summary).await {
        Ok(by_repo) => by_repo,
        Err(error) => return refused(&viewer, error),
    };
    let rows = |items: Vec<(String, warden_protocol::views::Spend)>| -> Vec<pages::SpendRow> {
        items
            .into_iter()
            .map(|(key, spend)| pages::SpendRow { key, spend })
            .collect()
    };
    let today = warden_time::UtcDay::of_ms(wall_ms());
    let today_spend = summary
        .by_day
        .iter()
        .find(|(day, _)| *day == today)
        .map(|(_, spend)| *spend);
    // The last 30 days, oldest first, each one there whether anything was spent or not.
    let days: Vec<pages::SpendRow> = (0..30)
        .rev()
        .map(|back| warden_time::UtcDay::of_ms(wall_ms() - back * 86_400_000))
        .map(|day| pages::SpendRow {
            key: day.to_string(),
            spend: summary
                .by_day
                .iter()
                .find(|(d, _)| *d == day)
                .map(|(_, spend)| *spend)
                .unwrap_or_default(),
        })
        .collect();
    let by_model = rows(summary.by_model);
    let by_role = rows(summary.by_role);
    let by_repo = rows(by_repo);
    html(pages::usage(
        &viewer,
        today_spend.as_ref(),
        state.budgets,
        &days,
        pages::SpendGroups {
            by_repo: &by_repo,
            by_model: &by_model,
            by_role: &by_role,
        },
    ))
}

async fn sessions(State(state): State<Arc<ApiState>>, headers: HeaderMap) -> Response {
    let (viewer, secret) = match viewer(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    let current = match state.access.session(&secret).await {
        Ok(Some((session, _))) => Some(session.id),
        _ => None,
    };
    let list = match state.access.sessions(&viewer).await {
        Ok(list) => list,
        Err(error) => return server_error(Some(&viewer), &error.to_string()),
    };
    let rows: Vec<pages::SessionRow> = list
        .into_iter()
        .map(|session| pages::SessionRow {
            current: current.as_deref() == Some(session.id.as_str()),
            id: session.id,
            name: session.name,
            via: session.method.as_str().to_string(),
            address: session.address,
            created_at_ms: session.created_at.ms(),
            expires_at_ms: session.expires_at.ms(),
        })
        .collect();
    html(pages::sessions(&viewer, &rows, wall_ms()))
}

async fn revoke_session(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (viewer, _) = match writer_request(&state, &headers).await {
        Ok(v) => v,
        Err(response) => return response,
    };
    match state.access.revoke_session(&viewer, &id).await {
        Ok(_) => see_other("/sessions"),
        Err(error) => html_with_status(
            StatusCode::NOT_FOUND,
            pages::problem(Some(&viewer), "Not found", &error.to_string()),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secure_cookie_wins_and_others_are_ignored() {
        let mut headers = HeaderMap::new();
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("other=1; warden_session=plain"),
        );
        assert_eq!(session_secret(&headers).as_deref(), Some("plain"));
        headers.append(
            header::COOKIE,
            HeaderValue::from_static("__Host-warden_session=secure"),
        );
        assert_eq!(session_secret(&headers).as_deref(), Some("secure"));
        assert_eq!(session_secret(&HeaderMap::new()), None);
    }

    #[test]
    fn state_changes_need_proof_of_the_same_origin() {
        let with = |pairs: &[(&'static str, &'static str)]| {
            let mut headers = HeaderMap::new();
            for (name, value) in pairs {
                headers.insert(*name, HeaderValue::from_static(value));
            }
            same_origin(&headers)
        };
        assert!(with(&[("sec-fetch-site", "same-origin")]));
        assert!(!with(&[
            ("sec-fetch-site", "cross-site"),
            ("origin", "http://h:1"),
            ("host", "h:1")
        ]));
        assert!(!with(&[("sec-fetch-site", "same-site")]));
        assert!(with(&[("origin", "http://h:1"), ("host", "h:1")]));
        assert!(with(&[("origin", "https://h"), ("host", "h")]));
        assert!(!with(&[("origin", "http://evil:1"), ("host", "h:1")]));
        assert!(!with(&[("host", "h:1")]));
        assert!(!with(&[("origin", "null"), ("host", "h:1")]));
    }

    #[test]
    fn plain_http_is_warned_about_only_for_other_machines_by_address() {
        let host = |value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::HOST, HeaderValue::from_static(value));
            headers
        };
        let remote: Option<IpAddr> = Some("192.0.2.7".parse().unwrap());
        let local: Option<IpAddr> = Some("127.0.0.1".parse().unwrap());
        assert!(plain_http_elsewhere(&host("10.0.0.5:8787"), remote));
        assert!(plain_http_elsewhere(&host("[fd00::1]:8787"), remote));
        assert!(!plain_http_elsewhere(&host("127.0.0.1:8787"), local));
        assert!(!plain_http_elsewhere(&host("warden.example.com"), remote));
    }

    #[test]
    fn url_components_are_encoded() {
        assert_eq!(url_component("a b&c=d/é"), "a%20b%26c%3Dd%2F%C3%A9");
        assert_eq!(url_component("app-1_x.y~"), "app-1_x.y~");
    }
}
