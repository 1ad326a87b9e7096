//! The HTTP API of SPEC §6 (core routes): `GET /healthz`, `GET/POST /v1/repos`,
//! `GET/POST /v1/tasks` and `GET /v1/tasks/{id}`, on axum.
//!
//! - Bearer tokens from `WARDEN_API_TOKENS` (`name:role:token`, comma-separated), compared in
//!   constant time (SHA-256 of both sides, then a comparison that looks at every byte of every
//!   token). Tasks belong to the token's name; only `admin` sees everyone's; `viewer` only reads;
//!   only `admin` registers repositories (a server path is the server's file system).
//! - Errors are `{"error":{"code","message"}}` through one [`ApiError`] with stable codes
//!   ([`ErrorCode`]); bodies are JSON objects of at most 1 MiB with no unknown fields.
//! - `POST /v1/tasks` honours `Idempotency-Key` (same key and body: the same task; same key,
//!   other body: 409) and answers `202` with the task; workers are woken at once.

use std::path::Path;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_repo::{RepoSpec, Source};
use warden_store::{
    Created, IdempotencyKey, NewRepo, NewTask, Repository, Store, StoreError, Task, TaskQuery,
    TaskRepo, UtcDay,
};

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;
const MAX_PAGE: u32 = 200;
const DEFAULT_PAGE: u32 = 50;
const MAX_REPOS_PER_TASK: usize = 16;

/// Stable error codes of the API, each with its HTTP status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The body is not JSON, or a query parameter is malformed.
    BadRequest,
    /// No bearer token, or one that matches no configured token.
    Unauthorized,
    /// The token's role may not do this.
    Forbidden,
    NotFound,
    MethodNotAllowed,
    /// The `Idempotency-Key` was used before with a different body.
    IdempotencyConflict,
    /// A repository with this name is registered already.
    AlreadyExists,
    PayloadTooLarge,
    /// The JSON does not have the expected shape (unknown or missing fields, wrong types) or a
    /// value is invalid.
    InvalidRequest,
    /// A task kind this server cannot run yet.
    UnsupportedKind,
    /// A task names a repository that is not registered.
    UnknownRepository,
    /// Warden failed; details are in the server log, never in the response.
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "bad_request",
            ErrorCode::Unauthorized => "unauthorized",
            ErrorCode::Forbidden => "forbidden",
            ErrorCode::NotFound => "not_found",
            ErrorCode::MethodNotAllowed => "method_not_allowed",
            ErrorCode::IdempotencyConflict => "idempotency_conflict",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::InvalidRequest => "invalid_request",
            ErrorCode::UnsupportedKind => "unsupported_kind",
            ErrorCode::UnknownRepository => "unknown_repository",
            ErrorCode::Internal => "internal",
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
            ErrorCode::Unauthorized => StatusCode::UNAUTHORIZED,
            ErrorCode::Forbidden => StatusCode::FORBIDDEN,
            ErrorCode::NotFound => StatusCode::NOT_FOUND,
            ErrorCode::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            ErrorCode::IdempotencyConflict | ErrorCode::AlreadyExists => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidRequest
            | ErrorCode::UnsupportedKind
            | ErrorCode::UnknownRepository => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Every error the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// A failure of Warden itself: logged here, reported without details.
    fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "request failed");
        ApiError::new(ErrorCode::Internal, "internal error; see the server log")
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> ApiError {
        match error {
            StoreError::IdempotencyConflict { key } => ApiError::new(
                ErrorCode::IdempotencyConflict,
                format!("Idempotency-Key {key:?} was already used with a different request"),
            ),
            StoreError::AlreadyExists { what, id } => ApiError::new(
                ErrorCode::AlreadyExists,
                format!("{what} {id} already exists"),
            ),
            other => ApiError::internal(other),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = json!({"error": {"code": self.code.as_str(), "message": self.message}});
        let mut response = (self.code.status(), Json(body)).into_response();
        if self.code == ErrorCode::Unauthorized {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// A JSON body: the same error format as everything else for bad JSON, unknown fields and
/// oversized bodies.
pub struct ApiJson<T>(pub T, pub Value);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for ApiJson<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ApiError::new(
                        ErrorCode::PayloadTooLarge,
                        format!("the body is larger than {MAX_BODY_BYTES} bytes"),
                    )
                } else {
                    ApiError::new(ErrorCode::BadRequest, rejection.body_text())
                }
            })?;
        let value: Value = serde_json::from_slice(&bytes).map_err(|e| {
            ApiError::new(
                ErrorCode::BadRequest,
                format!("the body is not valid JSON: {e}"),
            )
        })?;
        if !value.is_object() {
            return Err(ApiError::invalid("the body must be a JSON object"));
        }
        let parsed = serde_json::from_value(value.clone())
            .map_err(|e| ApiError::invalid(format!("invalid request: {e}")))?;
        Ok(ApiJson(parsed, value))
    }
}

// --- authentication ---

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApiRole {
    /// Everything, including everyone's tasks and registering repositories.
    Admin,
    /// Submits tasks and sees its own.
    Operator,
    /// Reads its own tasks and the repositories.
    Viewer,
}

impl ApiRole {
    fn parse(name: &str) -> Option<ApiRole> {
        match name {
            "admin" => Some(ApiRole::Admin),
            "operator" => Some(ApiRole::Operator),
            "viewer" => Some(ApiRole::Viewer),
            _ => None,
        }
    }
}

/// Who made a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    pub name: String,
    pub role: ApiRole,
}

struct Token {
    caller: Caller,
    digest: [u8; 32],
}

/// The configured API tokens, kept only as SHA-256 digests.
pub struct Tokens(Vec<Token>);

impl std::fmt::Debug for Tokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|t| &t.caller))
            .finish()
    }
}

fn digest(text: &str) -> [u8; 32] {
    Sha256::digest(text.as_bytes()).into()
}

impl Tokens {
    /// Parses `name:role:token[,name:role:token…]`. Tokens shorter than 16 characters are
    /// refused: they can be guessed.
    pub fn parse(text: &str) -> Result<Tokens, String> {
        let mut tokens = Vec::new();
        for (index, item) in text.split(',').map(str::trim).enumerate() {
            if item.is_empty() {
                continue;
            }
            let mut parts = item.splitn(3, ':');
            let (Some(name), Some(role), Some(token)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {} is not name:role:token",
                    index + 1
                ));
            };
            let role = ApiRole::parse(role).ok_or_else(|| {
                format!(
                    "WARDEN_API_TOKENS entry {}: unknown role {role:?} (admin, operator or viewer)",
                    index + 1
                )
            })?;
            if name.is_empty()
                || !name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.@".contains(c))
            {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {}: the name must be letters, digits, - _ . @",
                    index + 1
                ));
            }
            if token.len() < 16 {
                return Err(format!(
                    "WARDEN_API_TOKENS entry {} ({name}): the token must be at least 16 characters",
                    index + 1
                ));
            }
            tokens.push(Token {
                caller: Caller {
                    name: name.to_string(),
                    role,
                },
                digest: digest(token),
            });
        }
        Ok(Tokens(tokens))
    }

    /// The caller whose token this is. Every configured token is compared in full, whatever
    /// matches, so the time taken says nothing about which bytes matched.
    pub fn authenticate(&self, presented: &str) -> Option<Caller> {
        let presented = digest(presented);
        let mut found: Option<&Token> = None;
        for token in &self.0 {
            let mut difference = 0u8;
            for (a, b) in token.digest.iter().zip(presented.iter()) {
                difference |= a ^ b;
            }
            if difference == 0 && found.is_none() {
                found = Some(token);
            }
        }
        found.map(|t| t.caller.clone())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

fn authenticate(state: &ApiState, headers: &HeaderMap) -> Result<Caller, ApiError> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "missing bearer token"))?;
    let text = value
        .to_str()
        .map_err(|_| ApiError::new(ErrorCode::Unauthorized, "malformed Authorization header"))?;
    let token = match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => token.trim(),
        _ => {
            return Err(ApiError::new(
                ErrorCode::Unauthorized,
                "the Authorization header must be `Bearer <token>`",
            ))
        }
    };
    state
        .tokens
        .authenticate(token)
        .ok_or_else(|| ApiError::new(ErrorCode::Unauthorized, "invalid token"))
}

fn require_writer(caller: &Caller) -> Result<(), ApiError> {
    match caller.role {
        ApiRole::Admin | ApiRole::Operator => Ok(()),
        ApiRole::Viewer => Err(ApiError::new(
            ErrorCode::Forbidden,
            "viewer tokens can only read",
        )),
    }
}

// --- state and router ---

/// What the handlers share.
pub struct ApiState {
    pub store: Arc<dyn Store>,
    pub tokens: Tokens,
    /// Woken after each new task so an idle worker claims it at once.
    pub wake: Arc<Notify>,
}

/// The API's routes.
pub fn router(state: Arc<ApiState>) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/repos", get(list_repos).post(register_repo))
        .route("/v1/tasks", get(list_tasks).post(submit_task))
        .route("/v1/tasks/{id}", get(get_task))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(state)
}

async fn not_found(uri: Uri) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("no route {}", uri.path()))
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        ErrorCode::MethodNotAllowed,
        "method not allowed on this route",
    )
}

async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

// --- repositories ---

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegisterRepo {
    name: String,
    source: String,
    #[serde(default)]
    branch: Option<String>,
    #[serde(default)]
    checks: Vec<String>,
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with(['.', '-'])
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// A revision or branch as given: no option-looking or control-character text.
fn valid_rev(rev: &str) -> bool {
    !rev.is_empty()
        && rev.len() <= 200
        && !rev.starts_with('-')
        && !rev.chars().any(|c| c.is_control() || c == ' ')
}

fn repo_json(repo: &Repository) -> Value {
    let source = match RepoSpec::parse(&repo.source, Path::new("/")) {
        Ok(spec) => spec.source.display_redacted(),
        Err(_) => warden_repo::redact_credentials(&repo.source),
    };
    json!({
        "name": repo.name,
        "source": source,
        "branch": repo.branch,
        "checks": repo.checks,
        "created_by": repo.created_by,
        "created_at": rfc3339(repo.created_at_ms),
    })
}

async fn list_repos(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    authenticate(&state, &headers)?;
    let repos = state.store.list_repos().await?;
    Ok(Json(json!({
        "data": repos.iter().map(repo_json).collect::<Vec<_>>(),
        "next_cursor": null,
    })))
}

async fn register_repo(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    ApiJson(request, _): ApiJson<RegisterRepo>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let caller = authenticate(&state, &headers)?;
    if caller.role != ApiRole::Admin {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "only admin tokens register repositories",
        ));
    }
    if !valid_name(&request.name) {
        return Err(ApiError::invalid(
            "name must be 1-100 letters, digits, '.', '_' or '-', not starting with '.' or '-'",
        ));
    }
    let is_url = request.source.contains("://") || !request.source.starts_with('/');
    if !is_url && !Path::new(&request.source).is_absolute() {
        return Err(ApiError::invalid("a source path must be absolute"));
    }
    let spec = RepoSpec::parse(&request.source, Path::new("/"))
        .map_err(|e| ApiError::invalid(format!("invalid source: {e}")))?;
    if spec.rev.is_some() {
        return Err(ApiError::invalid(
            "the source must not name a revision (@REV); use branch",
        ));
    }
    if let Some(branch) = &request.branch {
        if !valid_rev(branch) {
            return Err(ApiError::invalid(format!("invalid branch {branch:?}")));
        }
    }
    if request.checks.len() > 50
        || request
            .checks
            .iter()
            .any(|c| c.trim().is_empty() || c.len() > 4096 || c.contains('\0'))
    {
        return Err(ApiError::invalid(
            "checks must be at most 50 non-empty commands of at most 4096 bytes",
        ));
    }
    let source = match &spec.source {
        Source::Path(path) => path.to_string_lossy().into_owned(),
        Source::Url(url) => url.clone(),
    };
    let repo = state
        .store
        .register_repo(NewRepo {
            name: request.name,
            source,
            branch: request.branch,
            checks: request.checks,
            created_by: caller.name,
        })
        .await?;
    Ok((StatusCode::CREATED, Json(repo_json(&repo))))
}

// --- tasks ---

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SubmitTask {
    kind: String,
    #[serde(default)]
    repo: Option<String>,
    #[serde(default)]
    repos: Option<Vec<String>>,
    prompt: String,
    #[serde(default)]
    follow_up_to: Option<String>,
    #[serde(default)]
    callback: Option<Value>,
    #[serde(default)]
    metadata: Option<Value>,
}

/// The task as the API shows it.
pub fn task_json(task: &Task) -> Value {
    let mut value = json!({
        "id": task.id,
        "kind": task.kind,
        "status": task.status,
        "owner": task.owner,
        "repos": task.repos,
        "prompt": task.prompt,
        "created_at": rfc3339(task.created_at_ms),
        "updated_at": rfc3339(task.updated_at_ms),
        "follow_up_to": task.follow_up_to,
        "retry_of": task.retry_of,
        "metadata": task.metadata,
        "runs": task.runs,
    });
    if let (Some(result), Some(map)) = (&task.result, value.as_object_mut()) {
        map.insert("result".into(), result.clone());
    }
    value
}

fn parse_kind(kind: &str) -> Result<TaskKind, ApiError> {
    match kind {
        "question" => Ok(TaskKind::Question),
        "change" | "maintain" => Err(ApiError::new(
            ErrorCode::UnsupportedKind,
            format!("{kind} tasks are not supported by this server yet; only question tasks run"),
        )),
        other => Err(ApiError::invalid(format!(
            "unknown kind {other:?}: expected question, change or maintain"
        ))),
    }
}

async fn submit_task(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    ApiJson(request, body): ApiJson<SubmitTask>,
) -> Result<Response, ApiError> {
    let caller = authenticate(&state, &headers)?;
    require_writer(&caller)?;
    let kind = parse_kind(&request.kind)?;
    if !crate::worker::runnable(kind) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedKind,
            "this kind of task cannot run here",
        ));
    }
    if request.callback.is_some() {
        return Err(ApiError::invalid(
            "callbacks are not supported by this server yet",
        ));
    }
    let prompt = request.prompt.trim().to_string();
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt is empty"));
    }
    let metadata = match request.metadata {
        None => json!({}),
        Some(value @ Value::Object(_)) => value,
        Some(_) => return Err(ApiError::invalid("metadata must be a JSON object")),
    };
    let idempotency = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::BadRequest,
                        "Idempotency-Key must be 1-255 visible ASCII characters",
                    )
                })?;
            Some(IdempotencyKey {
                key: key.to_string(),
                owner: caller.name.clone(),
                // serde_json's maps are sorted: equal bodies hash equally.
                request_hash: hex::encode(Sha256::digest(body.to_string().as_bytes())),
            })
        }
    };
    let follow_up_to = match &request.follow_up_to {
        None => None,
        Some(id) => {
            let earlier = visible_task(&state, &caller, id)
                .await
                .map_err(|_| ApiError::invalid(format!("follow_up_to: no task {id:?} of yours")))?;
            if earlier.kind != kind {
                return Err(ApiError::invalid("a follow-up must be of the same kind"));
            }
            Some(earlier)
        }
    };
    let names: Vec<String> = match (request.repo, request.repos) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give repo or repos, not both")),
        (Some(one), None) => vec![one],
        (None, Some(many)) => many,
        (None, None) => Vec::new(),
    };
    let repos = if names.is_empty() {
        match &follow_up_to {
            // A follow-up keeps the exact commits of the task it continues.
            Some(earlier) => earlier.repos.clone(),
            None => {
                return Err(ApiError::invalid(
                    "name at least one repository (repo or repos)",
                ))
            }
        }
    } else {
        task_repos(state.store.as_ref(), &names).await?
    };
    let id = new_task_id().map_err(ApiError::internal)?;
    let created = state
        .store
        .create_task(
            NewTask {
                id,
                kind,
                owner: caller.name,
                prompt,
                repos,
                priority: 0,
                follow_up_to: follow_up_to.map(|t| t.id),
                retry_of: None,
                metadata,
            },
            idempotency,
        )
        .await?;
    let replayed = matches!(created, Created::Replayed(_));
    if !replayed {
        state.wake.notify_one();
    }
    let mut response = (StatusCode::ACCEPTED, Json(task_json(created.task()))).into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// `name` or `name@rev` entries → the task's repositories, each registered.
async fn task_repos(store: &dyn Store, names: &[String]) -> Result<Vec<TaskRepo>, ApiError> {
    if names.len() > MAX_REPOS_PER_TASK {
        return Err(ApiError::invalid(format!(
            "at most {MAX_REPOS_PER_TASK} repositories per task"
        )));
    }
    let mut repos: Vec<TaskRepo> = Vec::new();
    for entry in names {
        let (name, rev) = match entry.split_once('@') {
            Some((name, rev)) => (name, Some(rev)),
            None => (entry.as_str(), None),
        };
        if !valid_name(name) {
            return Err(ApiError::invalid(format!(
                "invalid repository name {name:?}"
            )));
        }
        if let Some(rev) = rev {
            if !valid_rev(rev) {
                return Err(ApiError::invalid(format!("invalid revision {rev:?}")));
            }
        }
        if repos.iter().any(|r| r.name == name) {
            return Err(ApiError::invalid(format!(
                "repository {name:?} is named twice"
            )));
        }
        if store.get_repo(name).await?.is_none() {
            return Err(ApiError::new(
                ErrorCode::UnknownRepository,
                format!("repository {name:?} is not registered (POST /v1/repos)"),
            ));
        }
        repos.push(TaskRepo {
            name: name.to_string(),
            rev: rev.map(str::to_string),
            commit: None,
        });
    }
    Ok(repos)
}

/// The task if the caller may see it; 404 otherwise (another owner's task does not exist for
/// them).
async fn visible_task(state: &ApiState, caller: &Caller, id: &str) -> Result<Task, ApiError> {
    let missing = || ApiError::new(ErrorCode::NotFound, format!("task {id} not found"));
    let id: TaskId = id.parse().map_err(|_| missing())?;
    let task = state.store.get_task(&id).await?.ok_or_else(missing)?;
    if caller.role != ApiRole::Admin && task.owner != caller.name {
        return Err(missing());
    }
    Ok(task)
}

async fn get_task(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Result<Json<Value>, ApiError> {
    let caller = authenticate(&state, &headers)?;
    let task = visible_task(&state, &caller, &id).await?;
    Ok(Json(task_json(&task)))
}

/// `cursor`, `limit` and `status` of a list request.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListQuery {
    cursor: Option<TaskId>,
    limit: u32,
    status: Option<TaskStatus>,
}

fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = ListQuery {
        limit: DEFAULT_PAGE,
        ..ListQuery::default()
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "cursor" if !value.is_empty() => {
                parsed.cursor = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("invalid cursor {value:?}")))?,
                );
            }
            "cursor" => {}
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
            }
            "status" => {
                parsed.status = Some(
                    serde_json::from_value(Value::String(value.to_string()))
                        .map_err(|_| bad(format!("unknown status {value:?}")))?,
                );
            }
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(parsed)
}

async fn list_tasks(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let caller = authenticate(&state, &headers)?;
    let query = parse_list_query(uri.query())?;
    let mut tasks = state
        .store
        .list_tasks(TaskQuery {
            owner: (caller.role != ApiRole::Admin).then(|| caller.name.clone()),
            status: query.status,
            before: query.cursor,
            limit: query.limit + 1,
        })
        .await?;
    let more = tasks.len() > query.limit as usize;
    tasks.truncate(query.limit as usize);
    let next_cursor = if more {
        tasks.last().map(|t| t.id.to_string())
    } else {
        None
    };
    Ok(Json(json!({
        "data": tasks.iter().map(task_json).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    })))
}

// --- ids and times ---

const CROCKFORD: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// `tsk_` + a ULID: 48 bits of milliseconds, 80 random bits.
pub fn new_task_id() -> Result<TaskId, String> {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let mut random = [0u8; 10];
    getrandom::fill(&mut random).map_err(|e| format!("no randomness available: {e}"))?;
    let mut value: u128 = u128::from(now_ms & 0xFFFF_FFFF_FFFF) << 80;
    for (index, byte) in random.iter().enumerate() {
        value |= u128::from(*byte) << (8 * (9 - index));
    }
    let mut text = String::with_capacity(26);
    for index in 0..26 {
        let shift = 5 * (25 - index);
        text.push(char::from(CROCKFORD[((value >> shift) & 0x1F) as usize]));
    }
    TaskId::from_ulid(&text).map_err(|e| e.to_string())
}

/// `2026-12-02T12:34:56.789Z`.
pub fn rfc3339(ms: i64) -> String {
    let day = UtcDay::of_ms(ms);
    let (y, m, d) = day.ymd();
    let in_day = ms - day.start_ms();
    let seconds = in_day / 1000;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{:03}Z",
        seconds / 3600,
        (seconds / 60) % 60,
        seconds % 60,
        in_day % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_authenticate() {
        let tokens =
            Tokens::parse("alice:operator:aaaaaaaaaaaaaaaa1, bob:admin:bbbbbbbbbbbbbbbb:colon")
                .unwrap();
        assert_eq!(
            tokens.authenticate("bbbbbbbbbbbbbbbb:colon"),
            Some(Caller {
                name: "bob".into(),
                role: ApiRole::Admin
            })
        );
        assert_eq!(
            tokens.authenticate("aaaaaaaaaaaaaaaa1").unwrap().name,
            "alice"
        );
        assert_eq!(tokens.authenticate("aaaaaaaaaaaaaaaa"), None);
        assert_eq!(tokens.authenticate(""), None);
        for bad in [
            "alice:root:aaaaaaaaaaaaaaaa",
            "alice:admin:short",
            "alice",
            ":admin:aaaaaaaaaaaaaaaa",
        ] {
            assert!(Tokens::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn times_and_ids() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_796_131_143_042), "2026-12-01T13:19:03.042Z");
        let a = new_task_id().unwrap();
        assert!(a.as_str().starts_with("tsk_"));
    }

    #[test]
    fn list_queries() {
        assert_eq!(parse_list_query(None).unwrap().limit, DEFAULT_PAGE);
        let q = parse_list_query(Some("limit=2&status=queued")).unwrap();
        assert_eq!((q.limit, q.status), (2, Some(TaskStatus::Queued)));
        for bad in [
            "limit=0",
            "limit=201",
            "status=paused",
            "cursor=x",
            "page=2",
        ] {
            assert!(parse_list_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
