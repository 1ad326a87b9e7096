//! A small client for the GitHub REST calls Warden makes. Publication: open a pull request
//! (`POST /repos/{owner}/{repo}/pulls`) and find the pull requests of a head branch
//! (`GET /repos/{owner}/{repo}/pulls?head={owner}:{branch}&state=all`), which is how a crash
//! between opening one and recording it is reconciled. The webhook interface: a user's
//! permission on a repository (`GET /repos/{owner}/{repo}/collaborators/{user}/permission`),
//! and an issue comment created (`POST /repos/{owner}/{repo}/issues/{number}/comments`) and
//! edited (`PATCH /repos/{owner}/{repo}/issues/comments/{id}`). The API base URL is configurable
//! (GitHub Enterprise Server is `https://HOST/api/v3`; tests point it at a local fake).
//!
//! Authentication is a token (a personal access token), or a GitHub App's installation tokens,
//! each narrowed to the repository of the call ([`app`]), held only by the host process.
//! It is sent only in the `Authorization` header, never in a URL, and is removed from every
//! error message this module produces. Redirects are refused so the header is never carried to
//! another host.
//!
//! Only idempotent reads are retried here (5xx, 429, rate-limited 403, network errors, with
//! exponential backoff). Creation is attempted once per call: whether a failed create went
//! through is only known by asking again, which [`crate::publish`] does before each attempt.

pub mod app;

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE, USER_AGENT};
use reqwest::{StatusCode, Url};
use serde::Serialize;
use serde_json::Value;

/// The public GitHub API.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// The REST API version every request pins.
pub const API_VERSION: &str = "2022-11-28";
/// GitHub error text kept in messages is cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 500;
/// The longest wait a `Retry-After` may impose.
const MAX_SERVER_DELAY: Duration = Duration::from_secs(60);

/// A GitHub token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct GithubToken(String);

impl GithubToken {
    /// `None` for an empty token.
    pub fn new(token: impl Into<String>) -> Option<GithubToken> {
        let token = token.into();
        let token = token.trim();
        (!token.is_empty()).then(|| GithubToken(token.to_string()))
    }

    /// The secret itself, for the `Authorization` header and the redactor.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for GithubToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("GithubToken([redacted])")
    }
}

/// How the client authenticates.
#[derive(Debug, Clone)]
pub enum GithubAuth {
    /// A personal (or fine-grained) token.
    Token(GithubToken),
    /// A GitHub App installation: installation tokens fetched with the App's JWT and cached
    /// ([`app`]).
    App(crate::github_client::app::AppCredentials),
}

/// How the client talks to GitHub.
#[derive(Debug, Clone)]
pub struct GithubClientConfig {
    /// E.g. `https://api.github.com` or `https://github.example.com/api/v3`, no trailing `/`
    /// needed.
    pub api_url: String,
    /// A token, or an App installation whose tokens the client fetches.
    pub auth: GithubAuth,
    /// Attempts for a read before giving up (at least 1).
    pub max_attempts: u32,
    /// First backoff delay; doubled per attempt.
    pub retry_base: Duration,
    /// Per request, connection to last byte.
    pub request_timeout: Duration,
}

impl GithubClientConfig {
    pub fn new(api_url: &str, token: GithubToken) -> GithubClientConfig {
        GithubClientConfig::with_auth(api_url, GithubAuth::Token(token))
    }

    pub fn with_auth(api_url: &str, auth: GithubAuth) -> GithubClientConfig {
        GithubClientConfig {
            api_url: api_url.to_string(),
            auth,
            max_attempts: 4,
            retry_base: Duration::from_millis(500),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// A repository on GitHub: `owner/name`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GithubRepo {
    pub owner: String,
    pub name: String,
}

impl GithubRepo {
    /// Parses `owner/name`; both parts must be names GitHub accepts (letters, digits, `-`, `_`,
    /// `.`), which also keeps them safe inside a URL path.
    pub fn parse(text: &str) -> Option<GithubRepo> {
        let (owner, name) = text.trim().split_once('/')?;
        let name = name.strip_suffix(".git").unwrap_or(name);
        let valid = |part: &str| {
            !part.is_empty()
                && part.len() <= 100
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        (valid(owner) && valid(name)).then(|| GithubRepo {
            owner: owner.to_string(),
            name: name.to_string(),
        })
    }
}

impl std::fmt::Display for GithubRepo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The body of `POST /repos/{owner}/{repo}/pulls`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NewPullRequest {
    pub title: String,
    /// The branch with the changes (`branch`, or `owner:branch` across forks).
    pub head: String,
    /// The branch to merge into.
    pub base: String,
    pub body: String,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub draft: bool,
}

/// The fields of a pull request Warden uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullRequest {
    pub number: u64,
    pub html_url: String,
    /// `open` or `closed`.
    pub state: String,
    pub head_ref: String,
    pub head_sha: String,
    pub base_ref: String,
}

impl PullRequest {
    fn from_json(value: &Value) -> Option<PullRequest> {
        let text = |v: &Value| v.as_str().map(str::to_string);
        Some(PullRequest {
            number: value.get("number")?.as_u64()?,
            html_url: text(value.get("html_url")?)?,
            state: text(value.get("state")?)?,
            head_ref: text(value.pointer("/head/ref")?)?,
            head_sha: text(value.pointer("/head/sha")?)?,
            base_ref: text(value.pointer("/base/ref")?)?,
        })
    }
}

/// A user's permission on a repository, as GitHub answers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    /// `admin`, `write`, `read` or `none` (`maintain` shows as `write`, `triage` as `read`).
    pub permission: String,
    /// `admin`, `maintain`, `write`, `triage`, `read` or a custom role's name.
    pub role_name: Option<String>,
}

impl Permission {
    /// Whether the user may push: `admin`, `maintain` or `write`.
    pub fn can_write(&self) -> bool {
        matches!(self.permission.as_str(), "admin" | "maintain" | "write")
    }
}

/// `text` as one URL path segment: a GitHub login (letters, digits, `-`), else refused.
fn path_segment(text: &str) -> Result<&str, GithubError> {
    if text.is_empty()
        || text.len() > 100
        || !text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        || text.starts_with('.')
    {
        return Err(GithubError::Config(format!(
            "{text:?} is not a GitHub login"
        )));
    }
    Ok(text)
}

/// Why a GitHub call failed. Messages never contain the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GithubError {
    /// 401: the token is missing, wrong, expired or revoked.
    #[error("GitHub refused the token (401): {0}")]
    Unauthorized(String),
    /// 403 not caused by rate limiting: the token lacks a permission (e.g. `pull_requests:
    /// write`) or the repository forbids it.
    #[error("GitHub forbids this for the token (403): {0}")]
    Forbidden(String),
    /// 404: the repository does not exist or the token cannot see it.
    #[error("GitHub repository not found or not visible to the token (404): {0}")]
    NotFound(String),
    /// 422 because an open pull request for this head and base exists already.
    #[error("a pull request already exists: {0}")]
    AlreadyExists(String),
    /// 422 otherwise (an unknown head or base branch, no commits between them, ...).
    #[error("GitHub rejected the request (422): {0}")]
    Validation(String),
    /// Rate limited (429, or 403 with no requests left).
    #[error("GitHub rate limit reached ({status}): {message}")]
    RateLimited {
        status: u16,
        message: String,
        retry_after: Option<Duration>,
    },
    /// 5xx: GitHub failed; the request may or may not have taken effect.
    #[error("GitHub failed ({status}): {message}")]
    Server { status: u16, message: String },
    /// Any other status.
    #[error("GitHub answered {status}: {message}")]
    Unexpected { status: u16, message: String },
    /// No answer: connection refused or reset, timeout, a response cut short. The request may
    /// or may not have taken effect.
    #[error("cannot reach GitHub: {0}")]
    Network(String),
    /// A success status with a body that is not what GitHub sends.
    #[error("GitHub's response is not understood: {0}")]
    InvalidResponse(String),
    /// The configuration cannot work (an invalid API URL or token).
    #[error("invalid GitHub configuration: {0}")]
    Config(String),
}

impl GithubError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            GithubError::RateLimited { .. }
            | GithubError::Server { .. }
            | GithubError::Network(_) => true,
            GithubError::Unauthorized(_)
            | GithubError::Forbidden(_)
            | GithubError::NotFound(_)
            | GithubError::AlreadyExists(_)
            | GithubError::Validation(_)
            | GithubError::Unexpected { .. }
            | GithubError::InvalidResponse(_)
            | GithubError::Config(_) => false,
        }
    }

    /// The delay the server asked for, if any.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            GithubError::RateLimited { retry_after, .. } => *retry_after,
            _ => None,
        }
    }
}

/// The GitHub client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct GithubClient {
    http: reqwest::Client,
    api_url: Url,
    /// The App's installation tokens in use, per repository (unused with a plain token).
    installation: Arc<crate::github_client::app::TokenCache>,
    config: GithubClientConfig,
}

impl GithubClient {
    pub fn new(config: GithubClientConfig) -> Result<GithubClient, GithubError> {
        let trimmed = config.api_url.trim().trim_end_matches('/');
        let api_url = Url::parse(&format!("{trimmed}/"))
            .map_err(|e| GithubError::Config(format!("api_url {trimmed:?}: {e}")))?;
        if !matches!(api_url.scheme(), "https" | "http") {
            return Err(GithubError::Config(format!(
                "api_url {trimmed:?} must be http(s)"
            )));
        }
        if !api_url.username().is_empty() || api_url.password().is_some() {
            return Err(GithubError::Config(
                "api_url must not carry credentials; the token comes from WARDEN_GITHUB_TOKEN"
                    .into(),
            ));
        }
        if let GithubAuth::Token(token) = &config.auth {
            if HeaderValue::from_str(&format!("Bearer {}", token.expose())).is_err() {
                return Err(GithubError::Config(
                    "the token contains characters a header cannot carry".into(),
                ));
            }
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(config.request_timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| GithubError::Config(format!("http client: {e}")))?;
        Ok(GithubClient {
            http,
            api_url,
            installation: Arc::default(),
            config,
        })
    }

    /// The bearer token of the next request, on `repo`: the configured token, or an App
    /// installation token narrowed to `repo` (cached until five minutes before it expires,
    /// then fetched again).
    async fn bearer(&self, repo: &GithubRepo) -> Result<GithubToken, GithubError> {
        match &self.config.auth {
            GithubAuth::Token(token) => Ok(token.clone()),
            GithubAuth::App(app) => {
                // The cache measures a token's life on the monotonic clock, from before it was
                // asked for: a step of the wall clock neither keeps an expired token in use
                // nor throws a good one away. The JWT and `expires_at` are wall-clock times.
                let wall = crate::github_client::app::now_secs();
                let now = crate::github_client::app::monotonic_secs();
                let scope = crate::github_client::app::TokenScope::new(
                    app.installation_id,
                    [repo.name.clone()],
                );
                self.installation
                    .get(&scope, now, || async {
                        let (token, expires_at) =
                            self.installation_token(app, &scope, wall).await?;
                        Ok((token, now.saturating_add(expires_at - wall)))
                    })
                    .await
            }
        }
    }

    /// `POST /app/installations/{id}/access_tokens` with the App's JWT, for `scope`'s
    /// repositories and [`crate::github_client::app::TOKEN_PERMISSIONS`]: a token and when it expires
    /// (Unix seconds; at most an hour from now whatever GitHub says).
    async fn installation_token(
        &self,
        app: &crate::github_client::app::AppCredentials,
        scope: &crate::github_client::app::TokenScope,
        now: i64,
    ) -> Result<(GithubToken, i64), GithubError> {
        let jwt = app.key.jwt(&app.client_id, now)?;
        let url = self
            .api_url
            .join(&format!(
                "app/installations/{}/access_tokens",
                app.installation_id
            ))
            .map_err(|e| GithubError::Config(format!("installation url: {e}")))?;
        let mut headers = Self::base_headers();
        let mut value = HeaderValue::from_str(&format!("Bearer {jwt}"))
            .map_err(|_| GithubError::Config("the App's JWT is not a header value".into()))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let request = self
            .http
            .post(url)
            .headers(headers)
            .body(scope.request_body().to_string());
        let (status, headers, body) = self.send(request).await?;
        if status != StatusCode::CREATED {
            return Err(self.classify(status, &headers, &body));
        }
        let token = body
            .get("token")
            .and_then(Value::as_str)
            .and_then(GithubToken::new)
            .ok_or_else(|| {
                GithubError::InvalidResponse("an installation token without `token`".into())
            })?;
        let expires_at = body
            .get("expires_at")
            .and_then(Value::as_str)
            .and_then(|text| warden_time::parse_rfc3339(text).ok())
            .map(|ms| ms.div_euclid(1000))
            .ok_or_else(|| {
                GithubError::InvalidResponse("an installation token without `expires_at`".into())
            })?;
        let longest = now + crate::github_client::app::MAX_TOKEN_LIFETIME.as_secs() as i64;
        if HeaderValue::from_str(&format!("Bearer {}", token.expose())).is_err() {
            return Err(GithubError::InvalidResponse(
                "an installation token a header cannot carry".into(),
            ));
        }
        Ok((token, expires_at.min(longest)))
    }

    fn pulls_url(&self, repo: &GithubRepo) -> Result<Url, GithubError> {
        self.api_url
            .join(&format!("repos/{}/{}/pulls", repo.owner, repo.name))
            .map_err(|e| GithubError::Config(format!("pulls url: {e}")))
    }

    async fn headers(&self, repo: &GithubRepo) -> Result<HeaderMap, GithubError> {
        let mut headers = Self::base_headers();
        let token = self.bearer(repo).await?;
        if let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", token.expose())) {
            value.set_sensitive(true);
            headers.insert(AUTHORIZATION, value);
        }
        Ok(headers)
    }

    fn base_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(
            ACCEPT,
            HeaderValue::from_static("application/vnd.github+json"),
        );
        headers.insert(
            "X-GitHub-Api-Version",
            HeaderValue::from_static(API_VERSION),
        );
        headers.insert(
            USER_AGENT,
            HeaderValue::from_static(concat!("warden/", env!("CARGO_PKG_VERSION"))),
        );
        headers
    }

    /// Opens a pull request, one attempt. `AlreadyExists` when an open one has this head and
    /// base; after `Server` or `Network` errors the pull request may exist: ask with
    /// [`GithubClient::pulls_for_branch`] before trying again.
    pub async fn create_pull(
        &self,
        repo: &GithubRepo,
        pull: &NewPullRequest,
    ) -> Result<PullRequest, GithubError> {
        let url = self.pulls_url(repo)?;
        let body = serde_json::to_vec(pull)
            .map_err(|e| GithubError::InvalidResponse(format!("cannot encode the request: {e}")))?;
        let request = self
            .http
            .post(url)
            .headers(self.headers(repo).await?)
            .header(CONTENT_TYPE, "application/json")
            .body(body);
        let (status, headers, value) = self.send(request).await?;
        if status != StatusCode::CREATED {
            return Err(self.classify(status, &headers, &value));
        }
        PullRequest::from_json(&value).ok_or_else(|| {
            GithubError::InvalidResponse("a 201 without number, html_url, state, head, base".into())
        })
    }

    /// Every pull request, open or closed, whose head is `{repo.owner}:{branch}`, oldest first.
    /// Retried on 5xx, rate limits and network errors.
    pub async fn pulls_for_branch(
        &self,
        repo: &GithubRepo,
        branch: &str,
    ) -> Result<Vec<PullRequest>, GithubError> {
        let mut url = self.pulls_url(repo)?;
        url.query_pairs_mut()
            .append_pair("head", &format!("{}:{branch}", repo.owner))
            .append_pair("state", "all")
            .append_pair("per_page", "100");
        let mut attempt = 1;
        loop {
            let result = self.list_once(repo, url.clone()).await;
            match result {
                Err(error) if error.is_retryable() && attempt < self.config.max_attempts.max(1) => {
                    tokio::time::sleep(self.backoff(attempt, error.retry_after())).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// `login`'s permission on `repo` (`admin`, `write`, `read` or `none`, GitHub's legacy
    /// field; `role_name` says `maintain`/`triage` where it differs), one attempt. 404 when
    /// the login is not a user GitHub knows.
    pub async fn permission(
        &self,
        repo: &GithubRepo,
        login: &str,
    ) -> Result<Permission, GithubError> {
        let url = self.repo_url(
            repo,
            &format!("collaborators/{}/permission", path_segment(login)?),
        )?;
        let request = self.http.get(url).headers(self.headers(repo).await?);
        let (status, headers, value) = self.send(request).await?;
        if status != StatusCode::OK {
            return Err(self.classify(status, &headers, &value));
        }
        let text = |key: &str| value.get(key).and_then(Value::as_str).map(str::to_string);
        Ok(Permission {
            permission: text("permission").ok_or_else(|| {
                GithubError::InvalidResponse("a permission without `permission`".into())
            })?,
            role_name: text("role_name"),
        })
    }

    /// Creates a comment on issue (or pull request) `number`, one attempt; its id. After
    /// `Server` or `Network` errors it may exist.
    pub async fn create_issue_comment(
        &self,
        repo: &GithubRepo,
        number: u64,
        body: &str,
    ) -> Result<u64, GithubError> {
        let url = self.repo_url(repo, &format!("issues/{number}/comments"))?;
        let request = self
            .http
            .post(url)
            .headers(self.headers(repo).await?)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::json!({"body": body}).to_string());
        let (status, headers, value) = self.send(request).await?;
        if status != StatusCode::CREATED {
            return Err(self.classify(status, &headers, &value));
        }
        value
            .get("id")
            .and_then(Value::as_u64)
            .ok_or_else(|| GithubError::InvalidResponse("a 201 comment without an id".into()))
    }

    /// The comments of issue `number` (id and body), oldest first, at most `max_pages` pages of
    /// 100. Retried on 5xx, rate limits and network errors.
    pub async fn issue_comments(
        &self,
        repo: &GithubRepo,
        number: u64,
        max_pages: u32,
    ) -> Result<Vec<(u64, String)>, GithubError> {
        let mut comments = Vec::new();
        for page in 1..=max_pages.max(1) {
            let mut url = self.repo_url(repo, &format!("issues/{number}/comments"))?;
            url.query_pairs_mut()
                .append_pair("per_page", "100")
                .append_pair("page", &page.to_string());
            let mut attempt = 1;
            let value = loop {
                let request = self
                    .http
                    .get(url.clone())
                    .headers(self.headers(repo).await?);
                let result = match self.send(request).await {
                    Ok((status, _, value)) if status == StatusCode::OK => Ok(value),
                    Ok((status, headers, value)) => Err(self.classify(status, &headers, &value)),
                    Err(error) => Err(error),
                };
                match result {
                    Err(error) if error.is_retryable() && attempt < self.max_attempts() => {
                        tokio::time::sleep(self.backoff(attempt, error.retry_after())).await;
                        attempt += 1;
                    }
                    other => break other?,
                }
            };
            let items = value.as_array().ok_or_else(|| {
                GithubError::InvalidResponse("the comment list is not an array".into())
            })?;
            for item in items {
                let id = item.get("id").and_then(Value::as_u64).ok_or_else(|| {
                    GithubError::InvalidResponse("a comment without an id".into())
                })?;
                let body = item.get("body").and_then(Value::as_str).unwrap_or_default();
                comments.push((id, body.to_string()));
            }
            if items.len() < 100 {
                break;
            }
        }
        Ok(comments)
    }

    /// Replaces the body of issue comment `id`, one attempt.
    pub async fn update_issue_comment(
        &self,
        repo: &GithubRepo,
        id: u64,
        body: &str,
    ) -> Result<(), GithubError> {
        let url = self.repo_url(repo, &format!("issues/comments/{id}"))?;
        let request = self
            .http
            .patch(url)
            .headers(self.headers(repo).await?)
            .header(CONTENT_TYPE, "application/json")
            .body(serde_json::json!({"body": body}).to_string());
        let (status, headers, value) = self.send(request).await?;
        if status != StatusCode::OK {
            return Err(self.classify(status, &headers, &value));
        }
        Ok(())
    }

    fn repo_url(&self, repo: &GithubRepo, rest: &str) -> Result<Url, GithubError> {
        self.api_url
            .join(&format!("repos/{}/{}/{rest}", repo.owner, repo.name))
            .map_err(|e| GithubError::Config(format!("repository url: {e}")))
    }

    /// The wait before attempt `attempt + 1`.
    pub fn backoff(&self, attempt: u32, asked: Option<Duration>) -> Duration {
        let exponential = self
            .config
            .retry_base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(10));
        asked.unwrap_or(exponential).min(MAX_SERVER_DELAY)
    }

    /// Checks the credentials once, at start-up: a token with `GET /rate_limit` (free, and 401
    /// for a bad token), the App with `GET /app/installations/{id}` under its JWT (401 for a
    /// wrong or expired key, 404 when the App is not installed there). `Ok` means GitHub
    /// accepted them; an error says what it refused (never the credential).
    pub async fn check_auth(&self) -> Result<(), GithubError> {
        let mut headers = Self::base_headers();
        let path = match &self.config.auth {
            GithubAuth::Token(token) => {
                if let Ok(mut value) = HeaderValue::from_str(&format!("Bearer {}", token.expose()))
                {
                    value.set_sensitive(true);
                    headers.insert(AUTHORIZATION, value);
                }
                "rate_limit".to_string()
            }
            GithubAuth::App(app) => {
                let jwt = app
                    .key
                    .jwt(&app.client_id, crate::github_client::app::now_secs())?;
                let mut value = HeaderValue::from_str(&format!("Bearer {jwt}")).map_err(|_| {
                    GithubError::Config("the App's JWT is not a header value".into())
                })?;
                value.set_sensitive(true);
                headers.insert(AUTHORIZATION, value);
                format!("app/installations/{}", app.installation_id)
            }
        };
        let url = self
            .api_url
            .join(&path)
            .map_err(|e| GithubError::Config(format!("{path} url: {e}")))?;
        let (status, headers, body) = self.send(self.http.get(url).headers(headers)).await?;
        if status != StatusCode::OK {
            return Err(self.classify(status, &headers, &body));
        }
        Ok(())
    }

    /// Attempts allowed for one operation.
    pub fn max_attempts(&self) -> u32 {
        self.config.max_attempts.max(1)
    }

    async fn list_once(
        &self,
        repo: &GithubRepo,
        url: Url,
    ) -> Result<Vec<PullRequest>, GithubError> {
        let request = self.http.get(url).headers(self.headers(repo).await?);
        let (status, headers, value) = self.send(request).await?;
        if status != StatusCode::OK {
            return Err(self.classify(status, &headers, &value));
        }
        let items = value.as_array().ok_or_else(|| {
            GithubError::InvalidResponse("the pull request list is not an array".into())
        })?;
        let mut pulls = items
            .iter()
            .map(|item| {
                PullRequest::from_json(item).ok_or_else(|| {
                    GithubError::InvalidResponse("a pull request without number or html_url".into())
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        pulls.sort_by_key(|p| p.number);
        Ok(pulls)
    }

    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<(StatusCode, HeaderMap, Value), GithubError> {
        let response = request
            .send()
            .await
            .map_err(|e| GithubError::Network(self.redact(&transport_error(&e))))?;
        let status = response.status();
        let headers = response.headers().clone();
        let bytes = response
            .bytes()
            .await
            .map_err(|e| GithubError::Network(self.redact(&transport_error(&e))))?;
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            match serde_json::from_slice(&bytes) {
                Ok(value) => value,
                Err(_) if !status.is_success() => {
                    Value::String(String::from_utf8_lossy(&bytes).into_owned())
                }
                Err(e) => {
                    return Err(GithubError::InvalidResponse(format!(
                        "{status} with a body that is not JSON: {e}"
                    )))
                }
            }
        };
        Ok((status, headers, value))
    }

    /// Maps an error status and GitHub's `{"message", "errors": [...]}` body.
    fn classify(&self, status: StatusCode, headers: &HeaderMap, body: &Value) -> GithubError {
        let message = self.redact(&error_message(body));
        let retry_after = headers
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(|secs| Duration::from_secs(secs).min(MAX_SERVER_DELAY));
        let exhausted = headers
            .get("x-ratelimit-remaining")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim() == "0");
        let code = status.as_u16();
        match code {
            401 => GithubError::Unauthorized(message),
            403 if exhausted || message.to_ascii_lowercase().contains("rate limit") => {
                GithubError::RateLimited {
                    status: code,
                    message,
                    retry_after,
                }
            }
            403 => GithubError::Forbidden(message),
            404 => GithubError::NotFound(message),
            422 if message.contains("already exists") => GithubError::AlreadyExists(message),
            422 => GithubError::Validation(message),
            429 => GithubError::RateLimited {
                status: code,
                message,
                retry_after,
            },
            500..=599 => GithubError::Server {
                status: code,
                message,
            },
            _ => GithubError::Unexpected {
                status: code,
                message,
            },
        }
    }

    fn redact(&self, text: &str) -> String {
        let tokens = match &self.config.auth {
            GithubAuth::Token(token) => vec![token.clone()],
            GithubAuth::App(_) => self.installation.current(),
        };
        tokens
            .iter()
            .filter(|token| !token.expose().is_empty())
            .fold(text.to_string(), |text, token| {
                text.replace(token.expose(), "[redacted]")
            })
    }
}

/// `message: detail; detail` from GitHub's error body (or the raw text of a non-JSON body).
fn error_message(body: &Value) -> String {
    let mut text = match body {
        Value::String(raw) => raw.trim().to_string(),
        Value::Object(_) => {
            let mut text = body
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_string();
            let details: Vec<String> = body
                .get("errors")
                .and_then(Value::as_array)
                .map(|errors| errors.iter().filter_map(error_detail).collect())
                .unwrap_or_default();
            if !details.is_empty() {
                text.push_str(": ");
                text.push_str(&details.join("; "));
            }
            text
        }
        Value::Null => "empty body".to_string(),
        other => other.to_string(),
    };
    if text.chars().count() > MAX_MESSAGE_CHARS {
        text = text.chars().take(MAX_MESSAGE_CHARS).collect::<String>() + "…";
    }
    text
}

/// One item of `errors`: its `message`, else `field code` (`head invalid`), else the text.
fn error_detail(error: &Value) -> Option<String> {
    if let Some(text) = error.as_str() {
        return Some(text.to_string());
    }
    if let Some(message) = error.get("message").and_then(Value::as_str) {
        return Some(message.to_string());
    }
    let field = error.get("field").and_then(Value::as_str);
    let code = error.get("code").and_then(Value::as_str);
    match (field, code) {
        (Some(field), Some(code)) => Some(format!("{field} {code}")),
        (None, Some(code)) => Some(code.to_string()),
        (Some(field), None) => Some(field.to_string()),
        (None, None) => None,
    }
}

fn transport_error(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// `owner/name` of a GitHub-style remote URL whose host is `host` (`github.com`, or an
/// Enterprise host): `https://HOST/o/n(.git)`, `ssh://git@HOST/o/n.git`, `git@HOST:o/n.git`.
pub fn repo_from_remote_url(url: &str, host: &str) -> Option<GithubRepo> {
    let url = url.trim();
    let host = host.to_ascii_lowercase();
    let path = if let Some((scheme, rest)) = url.split_once("://") {
        if !matches!(scheme, "https" | "http" | "ssh" | "git") {
            return None;
        }
        let (authority, path) = rest.split_once('/')?;
        let authority = authority.rsplit('@').next().unwrap_or(authority);
        let authority_host = authority.split(':').next().unwrap_or(authority);
        if authority_host.to_ascii_lowercase() != host {
            return None;
        }
        path
    } else {
        // scp-like: [user@]host:owner/name
        let (authority, path) = url.split_once(':')?;
        let authority_host = authority.rsplit('@').next().unwrap_or(authority);
        if authority_host.to_ascii_lowercase() != host || path.starts_with('/') {
            return None;
        }
        path
    };
    let path = path.trim_end_matches('/');
    if path.matches('/').count() != 1 {
        return None;
    }
    GithubRepo::parse(path)
}

/// The web host of an API URL: `api.github.com` → `github.com`, `https://HOST/api/v3` → HOST.
pub fn web_host_of_api(api_url: &str) -> Option<String> {
    let url = Url::parse(api_url.trim()).ok()?;
    let host = url.host_str()?.to_ascii_lowercase();
    Some(
        host.strip_prefix("api.")
            .map(str::to_string)
            .unwrap_or(host),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repo_names_from_remote_urls() {
        let check = |url: &str, expected: Option<&str>| {
            assert_eq!(
                repo_from_remote_url(url, "github.com").map(|r| r.to_string()),
                expected.map(str::to_string),
                "{url}"
            );
        };
        check("https://github.com/acme/widgets.git", Some("acme/widgets"));
        check("https://github.com/acme/widgets", Some("acme/widgets"));
        check(
            "https://x:tok@github.com/acme/widgets/",
            Some("acme/widgets"),
        );
        check("git@github.com:acme/widgets.git", Some("acme/widgets"));
        check("ssh://git@github.com:22/acme/w.x.git", Some("acme/w.x"));
        check("https://gitlab.com/acme/widgets.git", None);
        check("https://github.com/acme/widgets/extra", None);
        check("https://github.com/acme/..", None);
        check("/srv/git/widgets.git", None);
        check("file:///github.com/acme/widgets", None);
        check("https://github.com.evil.test/acme/widgets", None);
        assert_eq!(
            web_host_of_api("https://api.github.com").as_deref(),
            Some("github.com")
        );
        assert_eq!(
            web_host_of_api("https://ghe.example.com/api/v3").as_deref(),
            Some("ghe.example.com")
        );
    }

    #[test]
    fn error_bodies_become_messages() {
        let client = GithubClient::new(GithubClientConfig::new(
            "https://api.github.com",
            GithubToken::new("ghp_secret_secret").unwrap(),
        ))
        .unwrap();
        let headers = HeaderMap::new();
        let exists = serde_json::json!({"message": "Validation Failed", "errors": [
            {"resource": "PullRequest", "code": "custom",
             "message": "A pull request already exists for acme:warden/x."}]});
        assert!(matches!(
            client.classify(StatusCode::UNPROCESSABLE_ENTITY, &headers, &exists),
            GithubError::AlreadyExists(m) if m.contains("acme:warden/x")
        ));
        let invalid = serde_json::json!({"message": "Validation Failed", "errors": [
            {"resource": "PullRequest", "field": "head", "code": "invalid"}]});
        assert_eq!(
            client.classify(StatusCode::UNPROCESSABLE_ENTITY, &headers, &invalid),
            GithubError::Validation("Validation Failed: head invalid".into())
        );
        let echoed = serde_json::json!({"message": "Bad credentials ghp_secret_secret"});
        let error = client.classify(StatusCode::UNAUTHORIZED, &headers, &echoed);
        assert!(!error.to_string().contains("ghp_secret_secret"), "{error}");
        let mut limited = HeaderMap::new();
        limited.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        limited.insert("retry-after", HeaderValue::from_static("7"));
        let error = client.classify(StatusCode::FORBIDDEN, &limited, &Value::Null);
        assert!(error.is_retryable());
        assert_eq!(error.retry_after(), Some(Duration::from_secs(7)));
        assert!(!client
            .classify(StatusCode::FORBIDDEN, &headers, &Value::Null)
            .is_retryable());
        assert!(client
            .classify(StatusCode::BAD_GATEWAY, &headers, &Value::Null)
            .is_retryable());
        assert!(format!("{client:?}").contains("[redacted]"));
        assert!(!format!("{client:?}").contains("ghp_secret_secret"));
    }

    #[test]
    fn configuration_is_checked() {
        let token = GithubToken::new("ghp_secret_secret").unwrap();
        assert!(GithubClient::new(GithubClientConfig::new("ftp://x", token.clone())).is_err());
        assert!(GithubClient::new(GithubClientConfig::new(
            "https://u:p@api.github.com",
            token.clone()
        ))
        .is_err());
        assert!(GithubToken::new("  ").is_none());
        assert!(GithubRepo::parse("acme/widgets").is_some());
        assert!(GithubRepo::parse("acme/wid gets").is_none());
        assert!(GithubRepo::parse("acme").is_none());
        assert!(GithubRepo::parse("a/b/c").is_none());
    }

    #[tokio::test]
    async fn an_app_installation_token_is_fetched_with_a_jwt_cached_and_renewed() {
        use base64::Engine as _;
        use warden_test_support::github_fake::{
            GithubFake, APP_TEST_KEY_PEM, APP_TEST_PUBLIC_KEY_DER_BASE64,
        };
        let key = std::sync::Arc::new(super::app::AppKey::from_pem(APP_TEST_KEY_PEM).unwrap());
        assert_eq!(
            base64::engine::general_purpose::STANDARD.encode(key.public_key_der()),
            APP_TEST_PUBLIC_KEY_DER_BASE64
        );
        // The JWT's claims: iat a minute back, exp under ten minutes ahead, iss the client id.
        let jwt = key.jwt("Iv1test", 1_700_000_000).unwrap();
        let claims = jwt.split('.').nth(1).unwrap();
        let claims: Value = serde_json::from_slice(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(claims)
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            claims,
            serde_json::json!({"iat": 1_699_999_940, "exp": 1_700_000_540, "iss": "Iv1test"})
        );
        assert!(!format!("{key:?}").contains("PRIVATE"));

        let origin = warden_test_support::git_fixture::TempRepo::new();
        let remote = tempfile::tempdir().unwrap();
        origin.git(&["init", "-q", "--bare", remote.path().to_str().unwrap()]);
        let fake = GithubFake::start(remote.path(), "acme", "widgets", "ghp_unused_unused");
        fake.set_role("alice", "write");
        let repo = GithubRepo::parse("acme/widgets").unwrap();
        let client = |client_id: &str, installation_id: u64| {
            GithubClient::new(GithubClientConfig::with_auth(
                &fake.url(),
                GithubAuth::App(super::app::AppCredentials {
                    client_id: client_id.into(),
                    installation_id,
                    key: key.clone(),
                }),
            ))
            .unwrap()
        };
        // An hour-long token serves every call.
        fake.with_app("Iv1test", 42, 3600);
        let app_client = client("Iv1test", 42);
        for _ in 0..3 {
            assert!(app_client
                .permission(&repo, "alice")
                .await
                .unwrap()
                .can_write());
        }
        assert_eq!(fake.issued_tokens().len(), 1);
        let used = fake.requests();
        let bearer = used.last().unwrap().header("authorization").unwrap();
        assert_eq!(bearer, format!("Bearer {}", fake.issued_tokens()[0]));
        // A token with under five minutes left is renewed before it is used.
        fake.with_app("Iv1test", 42, 200);
        let app_client = client("Iv1test", 42);
        app_client.permission(&repo, "alice").await.unwrap();
        app_client.permission(&repo, "alice").await.unwrap();
        assert_eq!(fake.issued_tokens().len(), 2);
        // Each token was narrowed to the repository of its calls, with the least permissions.
        for issued in fake.issued() {
            assert_eq!(issued.repositories, Some(vec!["widgets".to_string()]));
            assert_eq!(
                issued.permissions,
                [
                    ("issues".to_string(), "write".to_string()),
                    ("metadata".to_string(), "read".to_string()),
                    ("pull_requests".to_string(), "write".to_string()),
                ]
            );
        }
        // Another repository of the installation: its own token, cached apart, which the
        // fake refuses on acme/widgets.
        fake.install_on(&["gadgets"]);
        let gadgets = GithubRepo::parse("acme/gadgets").unwrap();
        assert!(matches!(
            app_client.permission(&gadgets, "alice").await,
            Err(GithubError::NotFound(_))
        ));
        let issued = fake.issued();
        assert_eq!(issued.len(), 3, "{issued:?}");
        assert_eq!(issued[2].repositories, Some(vec!["gadgets".to_string()]));
        let outside = GithubClient::new(GithubClientConfig::new(
            &fake.url(),
            GithubToken::new(issued[2].token.clone()).unwrap(),
        ))
        .unwrap();
        assert!(matches!(
            outside.permission(&repo, "alice").await,
            Err(GithubError::Forbidden(m)) if m.contains("not accessible by integration")
        ));
        // A repository the App is not installed on: no token.
        let stranger = GithubRepo::parse("acme/elsewhere").unwrap();
        assert!(matches!(
            app_client.permission(&stranger, "alice").await,
            Err(GithubError::Validation(m)) if m.contains("not accessible to the parent installation")
        ));
        // Another App's JWT, or another installation: refused, named.
        assert!(matches!(
            client("Iv1other", 42).permission(&repo, "alice").await,
            Err(GithubError::Unauthorized(m)) if m.contains("JSON web token")
        ));
        assert!(matches!(
            client("Iv1test", 7).permission(&repo, "alice").await,
            Err(GithubError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn reads_are_retried_and_refusals_are_named() {
        use warden_test_support::github_fake::{Fault, GithubFake};
        let origin = warden_test_support::git_fixture::TempRepo::new();
        let remote = tempfile::tempdir().unwrap();
        origin.git(&["init", "-q", "--bare", remote.path().to_str().unwrap()]);
        let fake = GithubFake::start(remote.path(), "acme", "widgets", "ghp_secret_secret");
        let mut config = GithubClientConfig::new(
            &format!("{}/", fake.url()),
            GithubToken::new("ghp_secret_secret").unwrap(),
        );
        config.retry_base = Duration::from_millis(1);
        let client = GithubClient::new(config.clone()).unwrap();
        let repo = GithubRepo::parse("acme/widgets").unwrap();
        fake.inject(Fault::FailList(502));
        fake.inject(Fault::FailList(503));
        assert_eq!(client.pulls_for_branch(&repo, "warden/x").await, Ok(vec![]));
        assert_eq!(fake.requests().len(), 3);
        let head = &fake.requests()[2].query;
        assert_eq!(head, "head=acme%3Awarden%2Fx&state=all&per_page=100");

        // A branch that is not on the remote: GitHub's 422, named.
        let pull = NewPullRequest {
            title: "t".into(),
            head: "warden/x".into(),
            base: "main".into(),
            body: String::new(),
            draft: false,
        };
        assert_eq!(
            client.create_pull(&repo, &pull).await,
            Err(GithubError::Validation(
                "Validation Failed: head invalid".into()
            ))
        );
        let missing = GithubRepo::parse("acme/nothing").unwrap();
        assert!(matches!(
            client.pulls_for_branch(&missing, "warden/x").await,
            Err(GithubError::NotFound(_))
        ));
        // The webhook's calls: permissions, and a comment created, edited and listed.
        fake.set_role("alice", "maintain");
        fake.set_role("mallory", "triage");
        let alice = client.permission(&repo, "alice").await.unwrap();
        assert!(alice.can_write(), "{alice:?}");
        assert_eq!(alice.role_name.as_deref(), Some("maintain"));
        assert!(!client
            .permission(&repo, "mallory")
            .await
            .unwrap()
            .can_write());
        assert!(matches!(
            client.permission(&repo, "nobody").await,
            Err(GithubError::NotFound(_))
        ));
        assert!(matches!(
            client.permission(&repo, "../pulls").await,
            Err(GithubError::Config(_))
        ));
        let id = client
            .create_issue_comment(&repo, 3, "first")
            .await
            .unwrap();
        client
            .update_issue_comment(&repo, id, "second")
            .await
            .unwrap();
        assert_eq!(
            client.issue_comments(&repo, 3, 5).await.unwrap(),
            [(id, "second".to_string())]
        );
        assert_eq!(fake.comments()[0].history, ["first", "second"]);
        assert!(matches!(
            client.update_issue_comment(&repo, id + 1, "x").await,
            Err(GithubError::NotFound(_))
        ));
        assert_eq!(
            client.create_issue_comment(&repo, 3, " ").await,
            Err(GithubError::Validation(
                "Validation Failed: body missing_field".into()
            ))
        );
        config.auth = GithubAuth::Token(GithubToken::new("ghp_wrong_wrong").unwrap());
        let wrong = GithubClient::new(config).unwrap();
        let error = wrong.pulls_for_branch(&repo, "warden/x").await.unwrap_err();
        assert_eq!(error, GithubError::Unauthorized("Bad credentials".into()));
        assert!(!error.is_retryable());
    }
}
