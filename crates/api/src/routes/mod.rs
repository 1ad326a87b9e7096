//! The HTTP API of SPEC §6 on axum. This module holds the shared parts (errors, JSON bodies,
//! state, router); each submodule owns a group of routes and adds them through its
//! `routes()`. Nothing outside `routes/` but the composition root (`serve.rs`) depends on it:
//! what the routes share with the rest lives in the service (`warden_time`,
//! `warden_service::task_view`, `warden_service::config::serve`'s `RateLimit` and `Authority`).
//!
//! The task and approval routes are a transport for [`warden_service::tasks::TaskService`], the front
//! door every interface calls: a handler reads the HTTP input (path, query, body, headers, the
//! authenticated [`Caller`]), calls one service method and renders its answer; the service's
//! refusals become [`ApiError`]s in one place (`From<ServiceError>`). Who may do what to which
//! task, and which input a task accepts, is the service's, never a handler's.
//!
//! - Bearer tokens from `WARDEN_API_TOKENS` (`name:role:token`, comma-separated), compared in
//!   constant time (SHA-256 of both sides, then a comparison that looks at every byte of every
//!   token). Tasks belong to the token's name; only `admin` sees everyone's; `viewer` only reads;
//!   only `admin` registers repositories (a server path is the server's file system). Tokens
//!   created with `warden token create` or `POST /v1/tokens` live in the store as digests.
//!   Every authenticated request spends from its token's bucket (429 with `Retry-After`);
//!   every failed authentication from its client address's (429 with `Retry-After` instead of
//!   401 once spent, never slowing a valid token). Bootstrap tokens have at least 32
//!   characters.
//! - Requests for a foreign `Host` are 421, state-changing ones from a foreign `Origin` 403
//!   (`origin.rs`); a token holds at most `[serve] max_streams_per_token` event streams (429
//!   `too_many_streams`). Connection limits (cap, header and keep-alive timeouts) live in
//!   [`crate::connections`].
//! - Errors are `{"error":{"code","message"}}` through one [`ApiError`] with stable codes
//!   ([`ErrorCode`]); bodies are JSON objects of at most 1 MiB, nested at most
//!   [`MAX_JSON_DEPTH`] deep, with no unknown fields, read only after the token is checked (an
//!   anonymous request is 401 whatever its body; an oversized body with a valid token is 413);
//!   a path parameter that cannot be read ([`ApiPath`]) is a 404 after authentication; text
//!   that is stored (prompts, messages, metadata) holds no NUL (Postgres refuses it).
//! - `POST /webhooks/github` takes no bearer token: a delivery is authenticated by GitHub's
//!   `X-Hub-Signature-256` over its raw body (`github.rs`).
//! - `POST /webhooks/slack` and `POST /webhooks/slack/interactions` take no bearer token: a
//!   request is authenticated by Slack's signature over its raw body (`slack.rs`).
//! - `POST /webhooks/telegram` takes no bearer token: an update is authenticated by the secret
//!   token Telegram was given with the webhook (`telegram.rs`).
//! - `POST /v1/tasks` honours `Idempotency-Key` (same key and body: the same task; same key,
//!   other body: 422) and answers `202` with the task; workers are woken at once.

pub mod approvals;
mod auth;
mod control;
mod diff;
mod events;
mod forwarded;
mod github;
mod journal;
mod mcp;
mod origin;
mod repos;
pub mod schema;
mod sessions;
mod slack;
mod tasks;
mod telegram;
mod tokens;
mod usage;
pub mod web;

pub use auth::{
    ApiRole, AuthThrottle, Caller, RateLimiter, SignInThrottle, Tokens,
    DEFAULT_ACCOUNT_FAILURE_LIMIT, DEFAULT_AUTH_FAILURE_LIMIT, DEFAULT_SIGN_IN_WAIT,
    MIN_BOOTSTRAP_TOKEN_LEN,
};
pub use origin::HostPolicy;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::de::DeserializeOwned;
use serde_json::{json, Value};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use warden_service::access::{Access, AccessError};
use warden_service::config::serve::RateLimit;
use warden_service::tasks::{ServiceError, TaskService};

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// JSON bodies nested deeper than this (arrays and objects) are refused with 400 before parsing.
pub const MAX_JSON_DEPTH: usize = 32;

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
    /// The `Idempotency-Key` was used before with a different body (422).
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
    /// The task's status does not allow this (cancel a finished task, retry an unfinished
    /// one, answer a task that asked nothing) (409).
    Conflict,
    /// The hash presented is not the one the approval is bound to (409).
    HashMismatch,
    /// The approval was decided before; an approval is decided once (409).
    AlreadyDecided,
    /// The token spent its request budget, or its address too many failed authentications;
    /// `Retry-After` says when to come back.
    RateLimited,
    /// The token holds as many open event streams as it may (429).
    TooManyStreams,
    /// The `Host` is not an address or public name of this server (421).
    MisdirectedRequest,
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
            ErrorCode::Conflict => "conflict",
            ErrorCode::HashMismatch => "hash_mismatch",
            ErrorCode::AlreadyDecided => "already_decided",
            ErrorCode::RateLimited => "rate_limited",
            ErrorCode::TooManyStreams => "too_many_streams",
            ErrorCode::MisdirectedRequest => "misdirected_request",
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
            ErrorCode::AlreadyExists
            | ErrorCode::HashMismatch
            | ErrorCode::AlreadyDecided
            | ErrorCode::Conflict => StatusCode::CONFLICT,
            ErrorCode::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            ErrorCode::InvalidRequest
            | ErrorCode::IdempotencyConflict
            | ErrorCode::UnsupportedKind
            | ErrorCode::UnknownRepository => StatusCode::UNPROCESSABLE_ENTITY,
            ErrorCode::RateLimited | ErrorCode::TooManyStreams => StatusCode::TOO_MANY_REQUESTS,
            ErrorCode::MisdirectedRequest => StatusCode::MISDIRECTED_REQUEST,
            ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

/// Every error the API answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Seconds for a `Retry-After` header (rate limits).
    pub retry_after_secs: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            message: message.into(),
            retry_after_secs: None,
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> ApiError {
        ApiError::new(ErrorCode::InvalidRequest, message)
    }

    /// A failure of Warden itself: logged here, reported without details.
    pub(crate) fn internal(error: impl std::fmt::Display) -> ApiError {
        tracing::error!(%error, "request failed");
        ApiError::new(ErrorCode::Internal, "internal error; see the server log")
    }
}

/// The one place the task service's refusals become HTTP answers: each [`ServiceError`]
/// variant has one status and error code; the message is the service's.
impl From<ServiceError> for ApiError {
    fn from(error: ServiceError) -> ApiError {
        let code = match error {
            ServiceError::Store(failure) => return ApiError::internal(failure),
            ServiceError::Internal(failure) => return ApiError::internal(failure),
            ServiceError::Invalid(_) => ErrorCode::InvalidRequest,
            ServiceError::InvalidIdempotencyKey => ErrorCode::BadRequest,
            ServiceError::IdempotencyConflict { .. } => ErrorCode::IdempotencyConflict,
            ServiceError::NotFound(_) => ErrorCode::NotFound,
            ServiceError::UnknownRepository { .. } => ErrorCode::UnknownRepository,
            ServiceError::UnsupportedKind(_) => ErrorCode::UnsupportedKind,
            ServiceError::Forbidden(_) => ErrorCode::Forbidden,
            ServiceError::AlreadyExists(_) => ErrorCode::AlreadyExists,
            ServiceError::WrongStatus { .. } | ServiceError::Conflict(_) => ErrorCode::Conflict,
            ServiceError::HashMismatch { .. } => ErrorCode::HashMismatch,
            ServiceError::AlreadyDecided { .. } => ErrorCode::AlreadyDecided,
        };
        ApiError::new(code, error.to_string())
    }
}

/// The one place identity's refusals become HTTP answers.
impl From<AccessError> for ApiError {
    fn from(error: AccessError) -> ApiError {
        let code = match error {
            AccessError::Store(failure) => return ApiError::internal(failure),
            AccessError::Internal(failure) => return ApiError::internal(failure),
            AccessError::Unauthorized(_) => ErrorCode::Unauthorized,
            AccessError::Forbidden(_) => ErrorCode::Forbidden,
            AccessError::AlreadyExists(_) => ErrorCode::AlreadyExists,
            AccessError::NotFound(_) => ErrorCode::NotFound,
            AccessError::Invalid(_) => ErrorCode::InvalidRequest,
        };
        ApiError::new(code, error.to_string())
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
        if let Some(secs) = self.retry_after_secs {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

/// A JSON body: the same error format as everything else for bad JSON, too deep nesting,
/// unknown fields (named in the message) and oversized bodies.
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
        if json_depth_exceeds(&bytes, MAX_JSON_DEPTH) {
            return Err(ApiError::new(
                ErrorCode::BadRequest,
                format!("the body nests arrays and objects deeper than {MAX_JSON_DEPTH} levels"),
            ));
        }
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

/// A route's query string, percent-decoded and deserialized by `serde_urlencoded` into `T` (a
/// struct of the parameters as strings, `deny_unknown_fields`, which the route then validates):
/// a malformed query, an unknown or repeated parameter is a JSON 400 `bad_request`, the format
/// of every other error, never axum's plain-text rejection. The one way a route reads its query.
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        decode_query(parts.uri.query()).map(ApiQuery)
    }
}

/// [`ApiQuery`]'s decoding of a raw query string (`None`: no `?`).
pub(crate) fn decode_query<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or_default())
        .map_err(|e| ApiError::new(ErrorCode::BadRequest, format!("invalid query: {e}")))
}

/// A route's one path parameter (`/v1/tasks/{id}`): one that cannot be read (not UTF-8 once
/// percent-decoded) or holds a NUL (no id does, and Postgres refuses it in a query) names
/// nothing, so it is a JSON 404 `not_found` like any other unknown id, not axum's plain-text
/// 400 or a store error. Handlers take it after their [`Caller`], so anonymous requests are 401
/// first.
pub struct ApiPath<T>(pub T);

impl<S: Send + Sync> FromRequestParts<S> for ApiPath<String> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match axum::extract::Path::<String>::from_request_parts(parts, state).await {
            Ok(axum::extract::Path(value)) if !value.contains('\0') => Ok(ApiPath(value)),
            Ok(_) => Err(ApiError::new(
                ErrorCode::NotFound,
                "no such resource: the path holds a NUL character",
            )),
            Err(rejection) => Err(ApiError::new(
                ErrorCode::NotFound,
                format!("no such resource: {}", rejection.body_text()),
            )),
        }
    }
}

/// Whether `json` opens more than `limit` arrays or objects inside each other (brackets in
/// strings do not count). Runs on the raw bytes, so a deep body costs no recursion.
fn json_depth_exceeds(json: &[u8], limit: usize) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in json {
        if in_string {
            if escaped {
                escaped = false;
            } else if byte == b'\\' {
                escaped = true;
            } else if byte == b'"' {
                in_string = false;
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth > limit {
                    return true;
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

// --- state and router ---

/// What the handlers share. Build it with [`ApiState::new`] (fields may be added).
pub struct ApiState {
    /// The front door to tasks: every task and approval route calls it and holds no rule of
    /// its own.
    pub tasks: TaskService,
    /// Who is calling: bootstrap and stored tokens, web users and sessions. Every token,
    /// session and sign-in rule is its; the console signs in through it too.
    pub access: Access,
    /// Per-token request budgets.
    pub limiter: RateLimiter,
    /// Failed authentications per client address.
    pub auth_failures: AuthThrottle,
    /// Failed console sign-ins per account name, and their turns.
    pub sign_ins: SignInThrottle,
    /// `[serve] trusted_proxies`: the peers whose forwarding headers name the client.
    pub trusted_proxies: Vec<warden_service::config::serve::IpRange>,
    /// Store token lookups allowed at once for addresses out of failed authentications.
    pub throttled_lookups: Arc<tokio::sync::Semaphore>,
    /// Open event streams per token.
    pub streams: events::StreamCounter,
    /// The `Host`s and `Origin`s the API answers to besides its address.
    pub hosts: HostPolicy,
    /// Event fan-out for the SSE routes, and the metrics. [`ApiState::new`] gives one that
    /// only polls the store; give the hub of the store's [`warden_service::hub::instrument`] with
    /// [`ApiState::with_hub`] for immediate delivery and the workers' counters.
    pub hub: Arc<warden_service::hub::Hub>,
    /// How often an open event stream checks, before sending, that its token still
    /// authenticates (a revoked token's stream ends); [`DEFAULT_STREAM_RECHECK`] by default.
    pub stream_recheck: std::time::Duration,
    /// Whether the web console is served at `/` (`[web] enabled`; on by default).
    pub web_enabled: bool,
    /// The daily budgets the console's usage page compares spend with.
    pub budgets: web::Budgets,
    /// The Slack app the `/webhooks/slack` routes pass requests to (`None`: 404).
    pub slack: Option<Arc<warden_service::slack::SlackApp>>,
    /// The GitHub interface `/webhooks/github` passes deliveries to (`None`: 404).
    pub github: Option<Arc<warden_service::github::GithubHook>>,
    /// The Telegram bot `/webhooks/telegram` passes updates to (`None`, or a polling bot: 404).
    pub telegram: Option<Arc<warden_service::telegram::Bot>>,
}

/// Store token lookups at once for addresses that ran out of failed authentications.
pub const THROTTLED_LOOKUPS: usize = 2;

/// How often an open event stream re-checks its token by default: a revoked token receives
/// at most this much more of a stream (checks charge no rate limit).
pub const DEFAULT_STREAM_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

impl ApiState {
    /// The API over `tasks` for `tokens`, with the default rate limit ([`RateLimit::default`]).
    pub fn new(tasks: TaskService, tokens: Tokens) -> ApiState {
        ApiState {
            hub: Arc::new(tasks.hub(warden_service::hub::HubOptions::default())),
            access: Access::over(&tasks, tokens),
            tasks,
            limiter: RateLimiter::new(RateLimit::default()),
            auth_failures: AuthThrottle::new(DEFAULT_AUTH_FAILURE_LIMIT),
            sign_ins: SignInThrottle::new(DEFAULT_ACCOUNT_FAILURE_LIMIT, DEFAULT_SIGN_IN_WAIT),
            trusted_proxies: Vec::new(),
            throttled_lookups: Arc::new(tokio::sync::Semaphore::new(THROTTLED_LOOKUPS)),
            streams: events::StreamCounter::new(
                warden_service::config::serve::DEFAULT_MAX_STREAMS_PER_TOKEN,
            ),
            hosts: HostPolicy::default(),
            stream_recheck: DEFAULT_STREAM_RECHECK,
            web_enabled: true,
            budgets: web::Budgets::default(),
            slack: None,
            github: None,
            telegram: None,
        }
    }

    /// Serves `/webhooks/github` with `hook`.
    pub fn with_github(
        mut self,
        hook: Option<Arc<warden_service::github::GithubHook>>,
    ) -> ApiState {
        self.github = hook;
        self
    }

    /// Serves `/webhooks/telegram` with `bot` (when it is in webhook mode).
    pub fn with_telegram(mut self, bot: Option<Arc<warden_service::telegram::Bot>>) -> ApiState {
        self.telegram = bot;
        self
    }

    /// Serves `/webhooks/slack` with `app`.
    pub fn with_slack(mut self, app: Option<Arc<warden_service::slack::SlackApp>>) -> ApiState {
        self.slack = app;
        self
    }

    /// Serves the web console or not, and the budgets its usage page shows.
    pub fn with_web(mut self, enabled: bool, budgets: web::Budgets) -> ApiState {
        self.web_enabled = enabled;
        self.budgets = budgets;
        self
    }

    /// Replaces how many failed password sign-ins one account may take, and how long a
    /// sign-in waits for its turn at most (see [`SignInThrottle`]).
    pub fn with_sign_in_limit(
        mut self,
        per_account: RateLimit,
        max_wait: std::time::Duration,
    ) -> ApiState {
        self.sign_ins = SignInThrottle::new(per_account, max_wait);
        self
    }

    /// `[serve] trusted_proxies`: from these peers, the client address is read from
    /// `X-Forwarded-For`/`Forwarded` (see `routes/forwarded.rs`).
    pub fn with_trusted_proxies(
        mut self,
        proxies: Vec<warden_service::config::serve::IpRange>,
    ) -> ApiState {
        self.trusted_proxies = proxies;
        self
    }

    /// Sets how often open event streams re-check their token (zero: before every message).
    pub fn with_stream_recheck(mut self, every: std::time::Duration) -> ApiState {
        self.stream_recheck = every;
        self
    }

    /// Serves events and metrics from `hub` (see [`warden_service::hub::instrument`]).
    pub fn with_hub(mut self, hub: Arc<warden_service::hub::Hub>) -> ApiState {
        self.hub = hub;
        self
    }

    /// Sets how long new web sessions last.
    pub fn with_session_lifetime(mut self, lifetime: std::time::Duration) -> ApiState {
        self.access = self.access.clone().with_session_lifetime(lifetime);
        self
    }

    /// Replaces the rate limit.
    pub fn with_rate_limit(mut self, limit: RateLimit) -> ApiState {
        self.limiter = RateLimiter::new(limit);
        self
    }

    /// Replaces how many failed authentications a client address may make.
    pub fn with_auth_failure_limit(mut self, limit: RateLimit) -> ApiState {
        self.auth_failures = AuthThrottle::new(limit);
        self
    }

    /// Sets how many event streams one token may hold open at once.
    pub fn with_max_streams_per_token(mut self, max: u32) -> ApiState {
        self.streams = events::StreamCounter::new(max);
        self
    }

    /// `[sandbox] repo_mount_roots`: where registered repositories' own mounts may lie (the
    /// service checks registrations against them).
    pub fn with_repo_mount_roots(mut self, roots: Vec<std::path::PathBuf>) -> ApiState {
        self.tasks = self.tasks.clone().with_repo_mount_roots(roots);
        self
    }

    /// Sets the names (and the listen address, for requests that do not carry their
    /// connection) the API answers to.
    pub fn with_hosts(mut self, hosts: HostPolicy) -> ApiState {
        self.hosts = hosts;
        self
    }
}

/// Every documented route. A route group adds its handlers here through its `routes()`, each
/// annotated with `#[utoipa::path]`, so `/openapi.json` is generated from the code that serves.
fn documented_routes() -> OpenApiRouter<Arc<ApiState>> {
    let mut routes = OpenApiRouter::with_openapi(schema::BaseDocument::openapi())
        .routes(routes!(healthz))
        .merge(repos::routes())
        .merge(approvals::routes())
        .merge(tasks::routes())
        .merge(events::routes())
        .merge(diff::routes())
        .merge(control::routes())
        .merge(journal::routes())
        .merge(usage::routes())
        .merge(tokens::routes())
        .merge(sessions::routes())
        .merge(slack::routes())
        .merge(telegram::routes())
        .merge(github::routes());
    auth::document_rate_limit(routes.get_openapi_mut());
    origin::document_pinning(routes.get_openapi_mut());
    routes
}

/// The OpenAPI 3.1 description of the API.
pub fn openapi() -> utoipa::openapi::OpenApi {
    documented_routes().split_for_parts().1
}

/// The API's routes.
pub fn router(state: Arc<ApiState>) -> Router {
    let (routes, document) = documented_routes().split_for_parts();
    let document: Arc<str> = match document.to_json() {
        Ok(text) => text.into(),
        Err(error) => {
            tracing::error!(%error, "the OpenAPI document does not serialize");
            "{}".into()
        }
    };
    // Not API routes, and so not in the document: `/mcp` speaks JSON-RPC (the MCP
    // specification describes it), the console's pages are HTML for browsers.
    let routes = routes.merge(mcp::routes());
    let routes = if state.web_enabled {
        routes.merge(web::routes())
    } else {
        routes
    };
    routes
        .route(
            "/openapi.json",
            get(move || {
                let document = Arc::clone(&document);
                async move {
                    (
                        [(
                            header::CONTENT_TYPE,
                            HeaderValue::from_static("application/json"),
                        )],
                        document.to_string(),
                    )
                }
            }),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            origin::pin_host_and_origin,
        ))
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state.hub.metrics),
            track_http,
        ))
        .with_state(state)
}

/// Counts every request and its time to the response head by route template and status
/// (`Router::layer` wraps each route, so the matched template is known here).
async fn track_http(
    axum::extract::State(metrics): axum::extract::State<Arc<warden_service::metrics::Metrics>>,
    request: Request,
    next: axum::middleware::Next,
) -> Response {
    let started = std::time::Instant::now();
    let method = request.method().clone();
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map(|path| path.as_str().to_string());
    let span = tracing::info_span!(
        "http.request",
        http.request.method = %method,
        http.route = route.as_deref().unwrap_or("unmatched"),
        http.response.status_code = tracing::field::Empty,
    );
    let response = tracing::Instrument::instrument(next.run(request), span.clone()).await;
    span.record("http.response.status_code", response.status().as_u16());
    metrics.http_request(
        method.as_str(),
        route.as_deref(),
        response.status().as_u16(),
        started.elapsed(),
    );
    response
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

/// Liveness: answers while the process serves.
#[utoipa::path(get, path = "/healthz", tag = "service", security(()),
    responses((status = 200, description = "The server is up", body = schema::Health)))]
async fn healthz() -> Json<schema::Health> {
    Json(schema::Health {
        status: "ok".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_describes_every_route() {
        let document: Value = serde_json::from_str(&openapi().to_json().unwrap()).unwrap();
        assert_eq!(document["openapi"], "3.1.0");
        for (path, method) in [
            ("/healthz", "get"),
            ("/v1/repos", "get"),
            ("/v1/repos", "post"),
            ("/v1/tasks", "get"),
            ("/v1/tasks", "post"),
            ("/v1/tasks/{id}", "get"),
            ("/v1/tasks/{id}/events", "get"),
            ("/v1/tasks/{id}/diff", "get"),
            ("/v1/tasks/{id}/proposal", "get"),
            ("/v1/events", "get"),
            ("/metrics", "get"),
            ("/webhooks/slack", "post"),
            ("/webhooks/github", "post"),
            ("/webhooks/slack/interactions", "post"),
        ] {
            assert!(
                document["paths"][path][method].is_object(),
                "{method} {path} is not documented"
            );
        }
        assert_eq!(
            document["components"]["securitySchemes"]["bearer"]["scheme"],
            "bearer"
        );
        assert!(document["components"]["schemas"]["TaskView"].is_object());
    }
}
