//! A client of a remote Warden server: `--server URL` (or `WARDEN_SERVER`) with the token from
//! `--token` (or `WARDEN_TOKEN`). JSON requests over reqwest; the server's
//! `{"error":{"code","message"}}` shown as it said it (escaped: the server is not trusted with
//! the terminal); and a reader of a task's Server-Sent Events that follows it live, reconnects
//! with `Last-Event-ID` after a dropped connection, and falls back to polling the task on a
//! server that has no events route.
//!
//! Exit codes: what the server refuses as a bad request (400, 401, 403, 404, 405, 409, 413, 422:
//! a wrong token, an unknown task or repository, an invalid body) is a usage error, exit 2; a
//! server that cannot be reached, 429 and 5xx are failures, exit 1.

use crate::text;
use crate::usage;
use anyhow::Context;
use serde_json::Value;
use std::collections::VecDeque;
use std::time::Duration;
use warden_models::sse::{SseEvent, SseParser};
use warden_protocol::{Event, TaskId, TaskStatus};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Every request but the events stream.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Without a byte (keep-alive comments included) for this long, the events stream is reopened.
const STREAM_IDLE: Duration = Duration::from_secs(75);
/// How often the task's status is looked at while its stream is quiet: a task's stream ends only
/// once the task is terminal, so a task waiting for input or an approval is noticed this way.
const STATUS_CHECK: Duration = Duration::from_secs(5);
/// After an event that ends a run, the status is looked at this often until it settles.
const FINISH_CHECK: Duration = Duration::from_millis(250);
/// Reading a settled task's stored events: once nothing came for this long, all were read.
const DRAINED: Duration = Duration::from_millis(1500);
/// Largest JSON body read from the server.
const MAX_BODY: usize = 32 << 20;
/// Largest single event (or line) read from the events stream.
const MAX_EVENT: usize = 4 << 20;
/// How often a task is polled when the server has no events route.
const POLL: Duration = Duration::from_millis(500);
/// Consecutive failed attempts to (re)open the events stream before giving up.
const MAX_RECONNECTS: u32 = 8;
/// Attempts at submitting a task (same Idempotency-Key each time).
const SUBMIT_ATTEMPTS: u32 = 3;

/// Where a remote server is and how to authenticate to it.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct RemoteOptions {
    /// Talk to the Warden server at this URL instead of running in-process
    #[arg(long, global = true, env = "WARDEN_SERVER", value_name = "URL")]
    pub server: Option<String>,
    /// The API token for --server (prefer WARDEN_TOKEN: arguments are visible to other users)
    #[arg(
        long,
        global = true,
        env = "WARDEN_TOKEN",
        hide_env_values = true,
        value_name = "TOKEN"
    )]
    pub token: Option<String>,
}

impl RemoteOptions {
    /// The server URL, when one is configured.
    pub fn server(&self) -> Option<&str> {
        self.server
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
    }
}

/// A refusal by the server: its status and its `{"error":{"code","message"}}`.
#[derive(Debug)]
pub struct ApiFailure {
    pub server: String,
    pub status: u16,
    pub code: String,
    pub message: String,
    pub retry_after: Option<String>,
}

impl std::fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} refused the request ({} {}): {}",
            self.server, self.status, self.code, self.message
        )?;
        match self.status {
            401 => write!(f, "; give a valid API token with WARDEN_TOKEN or --token"),
            403 => write!(f, "; this token's role may not do this"),
            429 => match &self.retry_after {
                Some(seconds) => write!(f, "; retry after {seconds} s"),
                None => Ok(()),
            },
            _ => Ok(()),
        }
    }
}

impl std::error::Error for ApiFailure {}

impl ApiFailure {
    /// A 404 of the router itself (the server predates this route), not of a task.
    fn is_missing_route(&self) -> bool {
        self.status == 404 && self.message.starts_with("no route")
    }

    /// Worth trying again: the server or a proxy in front of it is momentarily unavailable.
    fn is_transient(&self) -> bool {
        matches!(self.status, 502..=504)
    }

    fn into_error(self) -> anyhow::Error {
        match self.status {
            400 | 401 | 403 | 404 | 405 | 409 | 413 | 422 => usage(anyhow::Error::new(self)),
            _ => anyhow::Error::new(self),
        }
    }
}

/// The server's refusal inside an error, if that is what it is.
pub fn api_failure(error: &anyhow::Error) -> Option<&ApiFailure> {
    error.downcast_ref::<ApiFailure>().or_else(|| {
        error
            .downcast_ref::<crate::UsageError>()
            .and_then(|u| u.0.downcast_ref::<ApiFailure>())
    })
}

/// A connection to one Warden server.
pub struct Remote {
    /// The URL without a trailing slash; paths (`/v1/…`) are appended.
    base: String,
    token: Option<String>,
    client: reqwest::Client,
}

impl Remote {
    pub fn new(server: &str, token: Option<&str>) -> anyhow::Result<Remote> {
        let url = reqwest::Url::parse(server).map_err(|e| {
            usage(anyhow::anyhow!(
                "--server {}: not a URL ({e}); expected http(s)://HOST[:PORT]",
                text::one_line(server)
            ))
        })?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(usage(anyhow::anyhow!(
                "--server {}: expected an http:// or https:// URL",
                text::one_line(server)
            )));
        }
        if url.query().is_some() || url.fragment().is_some() || !url.username().is_empty() {
            return Err(usage(anyhow::anyhow!(
                "--server {}: give the server's base URL, without credentials, query or fragment \
                 (the token goes in WARDEN_TOKEN)",
                text::one_line(server)
            )));
        }
        let token = token
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .map(str::to_string);
        if let Some(token) = &token {
            if token.chars().any(|c| c.is_control() || c == ' ') {
                return Err(usage(anyhow::anyhow!(
                    "the API token contains spaces or control characters"
                )));
            }
            if url.scheme() == "http" && !is_loopback(&url) {
                eprintln!(
                    "warden: warning: sending the API token over plain http to {}; use https",
                    url.host_str().unwrap_or_default()
                );
            }
        }
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // A redirect could carry the token elsewhere; a Warden server never redirects.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("warden-cli/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Remote {
            base: url.as_str().trim_end_matches('/').to_string(),
            token,
            client,
        })
    }

    /// The server's URL as given (no trailing slash).
    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let request = self
            .client
            .request(method, format!("{}{path}", self.base))
            .header(reqwest::header::ACCEPT, "application/json");
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends the request: the response when it is a success, the server's refusal otherwise.
    async fn execute(&self, request: reqwest::RequestBuilder) -> anyhow::Result<reqwest::Response> {
        let response = request.send().await.map_err(|e| {
            if e.is_connect() {
                anyhow::Error::new(Unreachable {
                    base: self.base.clone(),
                    error: e,
                })
            } else {
                anyhow::Error::new(e)
                    .context(format!("cannot reach the Warden server at {}", self.base))
            }
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(text::one_line);
        let body = read_bounded(response, 64 << 10).await.unwrap_or_default();
        let parsed: Option<Value> = serde_json::from_slice(&body).ok();
        let error = parsed.as_ref().and_then(|v| v.get("error"));
        let field = |name: &str| {
            error
                .and_then(|e| e.get(name))
                .and_then(Value::as_str)
                .map(|s| text::one_line(&truncate(s, 2000)))
        };
        let code = field("code").unwrap_or_else(|| format!("http_{}", status.as_u16()));
        let message = field("message").unwrap_or_else(|| {
            let body = String::from_utf8_lossy(&body);
            let body = body.trim();
            if body.is_empty() {
                status
                    .canonical_reason()
                    .unwrap_or("no message")
                    .to_string()
            } else {
                text::one_line(&truncate(body, 300))
            }
        });
        if status.is_redirection() {
            return Err(usage(anyhow::anyhow!(
                "{} answered with a redirect ({status}); give the server's own URL",
                self.base
            )));
        }
        Err(ApiFailure {
            server: self.base.clone(),
            status: status.as_u16(),
            code,
            message,
            retry_after,
        }
        .into_error())
    }

    async fn json_of(&self, response: reqwest::Response) -> anyhow::Result<Value> {
        let body = read_bounded(response, MAX_BODY)
            .await
            .with_context(|| format!("the connection to {} broke while reading", self.base))?;
        serde_json::from_slice(&body).map_err(|_| {
            anyhow::anyhow!(
                "{} did not answer with JSON; is it a Warden server?",
                self.base
            )
        })
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .execute(
                self.request(reqwest::Method::GET, path)
                    .timeout(REQUEST_TIMEOUT),
            )
            .await?;
        self.json_of(response).await
    }

    /// `GET path` answered with a body that is not JSON (a git bundle), at most `limit` bytes,
    /// with the response's headers.
    pub async fn get_bytes(
        &self,
        path: &str,
        limit: usize,
    ) -> anyhow::Result<(reqwest::header::HeaderMap, Vec<u8>)> {
        let response = self
            .execute(
                self.request(reqwest::Method::GET, path)
                    .timeout(REQUEST_TIMEOUT),
            )
            .await?;
        let headers = response.headers().clone();
        let body = read_bounded(response, limit)
            .await
            .with_context(|| format!("the connection to {} broke while reading", self.base))?;
        Ok((headers, body))
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .execute(
                self.request(reqwest::Method::POST, path)
                    .timeout(REQUEST_TIMEOUT)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body.to_string()),
            )
            .await?;
        self.json_of(response).await
    }

    /// `POST /v1/tasks` with an `Idempotency-Key`: a submission that broke off (a timeout, a
    /// proxy error) is sent again with the same key, so the server makes one task of it.
    pub async fn submit(&self, body: &Value) -> anyhow::Result<Value> {
        let key = idempotency_key()?;
        let mut attempt = 1;
        loop {
            let request = self
                .request(reqwest::Method::POST, "/v1/tasks")
                .timeout(REQUEST_TIMEOUT)
                .header("Idempotency-Key", &key)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.to_string());
            let outcome = match self.execute(request).await {
                Ok(response) => self.json_of(response).await,
                Err(error) => Err(error),
            };
            match outcome {
                Err(error) if attempt < SUBMIT_ATTEMPTS && retry_submit(&error) => {
                    tracing::debug!(error = %format!("{error:#}"), attempt, "submitting again");
                    tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt))).await;
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    /// Opens the task's events stream after `last` (`None`: from the start); `None` when the
    /// server has no events route.
    async fn open_events(
        &self,
        task: &TaskId,
        last: Option<u64>,
    ) -> anyhow::Result<Option<EventStream>> {
        let mut request = self
            .request(reqwest::Method::GET, &format!("/v1/tasks/{task}/events"))
            .header(reqwest::header::ACCEPT, "text/event-stream");
        if let Some(last) = last {
            request = request.header("Last-Event-ID", last.to_string());
        }
        match self.execute(request).await {
            Ok(response) => Ok(Some(EventStream {
                response,
                parser: SseParser::new(MAX_EVENT),
                pending: VecDeque::new(),
                last_bytes: std::time::Instant::now(),
            })),
            Err(error) if api_failure(&error).is_some_and(ApiFailure::is_missing_route) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `GET /v1/tasks/{id}`.
    pub async fn task(&self, task: &TaskId) -> anyhow::Result<Value> {
        self.get(&format!("/v1/tasks/{task}")).await
    }

    /// Follows the task until it is settled (terminal, or waiting for input or an approval):
    /// each event after `last` is shown on `progress` as it happens. Returns the settled task.
    pub async fn follow(
        &self,
        task: &TaskId,
        mut last: Option<u64>,
        progress: &dyn Fn(Event),
        status_line: &dyn Fn(&str),
    ) -> anyhow::Result<Value> {
        let mut failures = 0u32;
        loop {
            let opened = self.open_events(task, last).await;
            let mut stream = match opened {
                Ok(Some(stream)) => stream,
                Ok(None) => return self.poll(task, status_line).await,
                Err(error) if is_transient(&error) && failures < MAX_RECONNECTS => {
                    failures += 1;
                    tracing::debug!(error = %format!("{error:#}"), failures, "reopening events");
                    tokio::time::sleep(backoff(failures)).await;
                    continue;
                }
                Err(error) => return Err(error),
            };
            let mut received = false;
            let mut check_every = STATUS_CHECK;
            let broken = loop {
                let message = match tokio::time::timeout(check_every, stream.next()).await {
                    Ok(Ok(Some(message))) => message,
                    Ok(Ok(None)) => break None,
                    Ok(Err(error)) => break Some(error),
                    Err(_) => {
                        if let Some(current) = self.settled_task(task).await? {
                            return Ok(current);
                        }
                        if stream.idle() > STREAM_IDLE {
                            break Some(anyhow::anyhow!(
                                "nothing arrived on the events stream for {} s",
                                STREAM_IDLE.as_secs()
                            ));
                        }
                        continue;
                    }
                };
                received = true;
                let Some((seq, event)) = decode(&message) else {
                    continue;
                };
                if let Some(seq) = seq {
                    // A reconnection can repeat what was already shown.
                    if last.is_some_and(|last| seq <= last) {
                        continue;
                    }
                    last = Some(seq);
                }
                let Some(event) = event else {
                    continue;
                };
                // A withheld event (`redaction_failed`) may have been the end.
                let ends_run = matches!(
                    event,
                    Event::TaskFinished { .. }
                        | Event::StatusChanged { .. }
                        | Event::RedactionFailed
                );
                progress(event);
                if ends_run {
                    if let Some(current) = self.settled_task(task).await? {
                        return Ok(current);
                    }
                    check_every = FINISH_CHECK;
                }
            };
            if received {
                failures = 0;
            }
            // The stream ends once the task is settled; anything else was a dropped connection.
            match self.task(task).await {
                Ok(current) if settled(&current) => return Ok(current),
                Ok(_) => {}
                Err(error) if is_transient(&error) => {}
                Err(error) => return Err(error),
            }
            failures += 1;
            if failures > MAX_RECONNECTS {
                let why = broken.map_or("the stream kept ending early".to_string(), |e| {
                    format!("{e:#}")
                });
                anyhow::bail!(
                    "lost the events of {task} from {} ({why}); the task goes on on the server: \
                     follow it again with `warden logs {task} --follow`",
                    self.base
                );
            }
            tokio::time::sleep(backoff(failures)).await;
        }
    }

    /// The task if it is settled, `None` while it is not (or the server is momentarily away).
    async fn settled_task(&self, task: &TaskId) -> anyhow::Result<Option<Value>> {
        match self.task(task).await {
            Ok(current) if settled(&current) => Ok(Some(current)),
            Ok(_) => Ok(None),
            Err(error) if is_transient(&error) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// Reads the stored events of a waiting task, showing nothing: the sequence number to
    /// follow from once it resumes. Its stream does not end (the task is not terminal): they
    /// were all read once nothing more came for a moment. `None` when there is nothing to
    /// skip or no events route.
    pub async fn last_event(&self, task: &TaskId) -> anyhow::Result<Option<u64>> {
        let Some(mut stream) = self.open_events(task, None).await? else {
            return Ok(None);
        };
        let mut last = None;
        // The stored events are sent at once: wait for the first, then until a pause.
        let mut wait = REQUEST_TIMEOUT;
        while let Ok(message) = tokio::time::timeout(wait, stream.next()).await {
            wait = DRAINED;
            let Some(message) = message? else {
                break;
            };
            if let Some((Some(seq), _)) = decode(&message) {
                last = Some(last.map_or(seq, |l: u64| l.max(seq)));
            }
        }
        Ok(last)
    }

    /// The fallback for a server without an events route: the task's status, polled.
    async fn poll(&self, task: &TaskId, status_line: &dyn Fn(&str)) -> anyhow::Result<Value> {
        let mut shown: Option<String> = None;
        let mut failures = 0u32;
        loop {
            match self.task(task).await {
                Ok(current) => {
                    failures = 0;
                    if settled(&current) {
                        return Ok(current);
                    }
                    let status = current["status"].as_str().unwrap_or("unknown").to_string();
                    if shown.as_deref() != Some(status.as_str()) {
                        status_line(&format!("warden: {task} is {status}"));
                        shown = Some(status);
                    }
                    tokio::time::sleep(POLL).await;
                }
                Err(error) if is_transient(&error) && failures < MAX_RECONNECTS => {
                    failures += 1;
                    tokio::time::sleep(backoff(failures)).await;
                }
                Err(error) => return Err(error),
            }
        }
    }
}

/// The task's status, if it has a known one.
pub fn status_of(task: &Value) -> Option<TaskStatus> {
    serde_json::from_value(task.get("status")?.clone()).ok()
}

/// Nothing more happens to the task until someone acts: terminal, or waiting for input or an
/// approval.
pub fn settled(task: &Value) -> bool {
    status_of(task).is_some_and(|status| {
        status.is_terminal()
            || matches!(
                status,
                TaskStatus::WaitingInput | TaskStatus::WaitingApproval
            )
    })
}

/// The task id in a task JSON the server sent.
pub fn task_id_of(task: &Value) -> anyhow::Result<TaskId> {
    task.get("id")
        .and_then(Value::as_str)
        .and_then(|id| id.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("the server answered without a valid task id"))
}

/// One event of the stream: its sequence number and the event, when they decode. Events of
/// kinds this build does not know are skipped.
fn decode(message: &SseEvent) -> Option<(Option<u64>, Option<Event>)> {
    let envelope: Value = serde_json::from_str(&message.data).ok()?;
    let seq = envelope
        .get("task_seq")
        .and_then(Value::as_u64)
        .or_else(|| message.id.as_deref().and_then(|id| id.trim().parse().ok()));
    let event = envelope
        .get("event")
        .and_then(|event| serde_json::from_value(event.clone()).ok());
    Some((seq, event))
}

/// No connection to the server could be made (nothing listens there, or no route): one
/// sentence naming the server and what to do, without the HTTP client's chain of causes.
#[derive(Debug)]
struct Unreachable {
    base: String,
    error: reqwest::Error,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The innermost cause says why (`Connection refused (os error 111)`).
        let mut reason = self.error.to_string();
        let mut cause = std::error::Error::source(&self.error);
        while let Some(inner) = cause {
            reason = inner.to_string();
            cause = inner.source();
        }
        write!(
            f,
            "cannot reach the Warden server at {}: {reason}; start it there with `warden serve`, \
             or drop --server and WARDEN_SERVER to run the command in-process",
            self.base
        )
    }
}

impl std::error::Error for Unreachable {}

/// Whether `error` is a server that could not be reached at all (its message says what to do).
pub fn is_unreachable(error: &anyhow::Error) -> bool {
    error
        .chain()
        .any(|cause| cause.downcast_ref::<Unreachable>().is_some())
}

/// Connection failures, timeouts and 502-504: worth another attempt.
fn is_transient(error: &anyhow::Error) -> bool {
    match api_failure(error) {
        Some(failure) => failure.is_transient(),
        None => error.chain().any(|cause| {
            cause.downcast_ref::<reqwest::Error>().is_some()
                || cause.downcast_ref::<Unreachable>().is_some()
        }),
    }
}

/// A submission is sent again when it may not have arrived, but never to a server that refused
/// the connection outright (nothing is listening there: say so at once).
fn retry_submit(error: &anyhow::Error) -> bool {
    !is_unreachable(error) && is_transient(error)
}

fn backoff(failures: u32) -> Duration {
    Duration::from_millis((250u64 << failures.min(4)).min(5_000))
}

fn is_loopback(url: &reqwest::Url) -> bool {
    let host = url.host_str().unwrap_or_default();
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

fn idempotency_key() -> anyhow::Result<String> {
    let mut random = [0u8; 16];
    getrandom::fill(&mut random).map_err(|e| anyhow::anyhow!("no randomness available: {e}"))?;
    Ok(format!(
        "warden-cli-{}",
        random
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    ))
}

fn truncate(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_string(),
    }
}

async fn read_bounded(mut response: reqwest::Response, limit: usize) -> anyhow::Result<Vec<u8>> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        if body.len() + chunk.len() > limit {
            anyhow::bail!("the response is larger than {limit} bytes");
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An open `text/event-stream` response.
struct EventStream {
    response: reqwest::Response,
    parser: SseParser,
    /// Events parsed but not yet returned by `next`.
    pending: VecDeque<SseEvent>,
    /// When the last bytes (keep-alive comments included) arrived.
    last_bytes: std::time::Instant,
}

impl EventStream {
    /// How long nothing arrived.
    fn idle(&self) -> Duration {
        self.last_bytes.elapsed()
    }

    /// The next message; `None` when the server ended the stream. Cancel-safe: what was read
    /// stays in the parser.
    async fn next(&mut self) -> anyhow::Result<Option<SseEvent>> {
        loop {
            if let Some(message) = self.pending.pop_front() {
                return Ok(Some(message));
            }
            match tokio::time::timeout(STREAM_IDLE, self.response.chunk()).await {
                Err(_) => anyhow::bail!(
                    "nothing arrived on the events stream for {} s",
                    STREAM_IDLE.as_secs()
                ),
                Ok(chunk) => match chunk? {
                    Some(bytes) => {
                        self.last_bytes = std::time::Instant::now();
                        let events = self
                            .parser
                            .push(&bytes)
                            .context("reading the events stream")?;
                        self.pending.extend(events);
                    }
                    None => return Ok(None),
                },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A server answering the `n`th request with `respond(n, request head)`, then closing the
    /// connection; every request head is kept.
    async fn fake_server(
        respond: fn(usize, &str) -> String,
    ) -> (String, std::sync::Arc<std::sync::Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = std::sync::Arc::clone(&heads);
        tokio::spawn(async move {
            let mut count = 0;
            loop {
                let (mut socket, _) = listener.accept().await.unwrap();
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if socket.read(&mut byte).await.unwrap() == 0 {
                        break;
                    }
                    head.push(byte[0]);
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let reply = respond(count, &head);
                seen.lock().unwrap().push(head);
                count += 1;
                let _ = socket.write_all(reply.as_bytes()).await;
                let _ = socket.shutdown().await;
            }
        });
        (url, heads)
    }

    fn http_json(status: &str, body: &Value) -> String {
        let body = body.to_string();
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
             Connection: close\r\n\r\n{body}",
            body.len()
        )
    }

    /// An event stream that the connection's end cuts off (no length, no chunking).
    fn http_events(events: &[(u64, Value)]) -> String {
        let mut out = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n: keep-alive\n\n".to_string();
        for (seq, event) in events {
            let data =
                json!({"seq": seq + 100, "task_seq": seq, "task": TASK, "at": "", "event": event});
            out.push_str(&format!("id: {seq}\nevent: x\ndata: {data}\n\n"));
        }
        out
    }

    const TASK: &str = "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9";

    fn tool(n: u64) -> Value {
        json!({"type": "tool_started", "call_id": format!("c{n}"), "tool": "search", "summary": format!("step {n}")})
    }

    fn task(status: &str) -> Value {
        json!({"id": TASK, "kind": "question", "status": status,
               "result": {"task_id": TASK, "outcome": "answer"}})
    }

    async fn follow_collecting(url: &str) -> (anyhow::Result<Value>, Vec<String>) {
        let remote = Remote::new(url, Some("token")).unwrap();
        let seen = std::cell::RefCell::new(Vec::new());
        let id: TaskId = TASK.parse().unwrap();
        let followed = remote
            .follow(
                &id,
                None,
                &|event| {
                    if let Event::ToolStarted { summary, .. } = event {
                        seen.borrow_mut().push(summary);
                    }
                },
                &|line| seen.borrow_mut().push(line.to_string()),
            )
            .await;
        (followed, seen.into_inner())
    }

    #[tokio::test]
    async fn a_dropped_stream_resumes_after_the_last_event_without_repeats() {
        let (url, heads) = fake_server(|n, _| match n {
            // The stream breaks off after two events; the task still runs.
            0 => http_events(&[(1, tool(1)), (2, tool(2))]),
            1 => http_json("200 OK", &task("running")),
            // The server resends from its own cursor: the repeat is not shown twice.
            2 => http_events(&[(2, tool(2)), (3, tool(3))]),
            _ => http_json("200 OK", &task("completed")),
        })
        .await;
        let (followed, seen) = follow_collecting(&url).await;
        assert_eq!(followed.unwrap()["status"], "completed");
        assert_eq!(seen, ["step 1", "step 2", "step 3"]);
        let heads = heads.lock().unwrap().clone();
        assert!(heads[0].starts_with(&format!("GET /v1/tasks/{TASK}/events ")));
        assert!(!heads[0].to_lowercase().contains("last-event-id"));
        assert!(
            heads[0].contains("authorization: Bearer token"),
            "{}",
            heads[0]
        );
        assert!(
            heads[2].to_lowercase().contains("last-event-id: 2"),
            "{}",
            heads[2]
        );
    }

    #[tokio::test]
    async fn a_server_without_an_events_route_is_polled() {
        let (url, _) = fake_server(|n, head| {
            if head.contains("/events ") {
                let path = head.split(' ').nth(1).unwrap_or_default().to_string();
                http_json(
                    "404 Not Found",
                    &json!({"error": {"code": "not_found", "message": format!("no route {path}")}}),
                )
            } else if n < 3 {
                http_json("200 OK", &task("running"))
            } else {
                http_json("200 OK", &task("completed"))
            }
        })
        .await;
        let (followed, seen) = follow_collecting(&url).await;
        assert_eq!(followed.unwrap()["status"], "completed");
        assert_eq!(seen, [format!("warden: {TASK} is running")]);
    }

    #[tokio::test]
    async fn a_missing_task_is_not_mistaken_for_a_missing_route() {
        let (url, _) = fake_server(|_, _| {
            http_json(
                "404 Not Found",
                &json!({"error": {"code": "not_found", "message": format!("task {TASK} not found")}}),
            )
        })
        .await;
        let (followed, _) = follow_collecting(&url).await;
        let error = followed.unwrap_err();
        assert_eq!(api_failure(&error).unwrap().status, 404);
        assert!(format!("{error:#}").contains("not found"));
    }

    #[test]
    fn events_decode_with_their_sequence_and_unknown_kinds_are_skipped() {
        let message = |data: &str| SseEvent {
            id: Some("7".into()),
            event: None,
            data: data.into(),
        };
        let known = json!({"seq": 40, "task_seq": 5, "task": "tsk_x", "at": "…",
            "event": {"type": "tool_started", "call_id": "c", "tool": "search", "summary": "search x"}});
        let (seq, event) = decode(&message(&known.to_string())).unwrap();
        assert_eq!(seq, Some(5));
        assert!(matches!(event, Some(Event::ToolStarted { .. })));
        let unknown = json!({"event": {"type": "from_the_future"}});
        assert_eq!(
            decode(&message(&unknown.to_string())),
            Some((Some(7), None))
        );
        assert_eq!(decode(&message("not json")), None);
    }

    #[test]
    fn server_urls_are_checked() {
        for bad in [
            "localhost:8787",
            "ftp://host",
            "http://u:p@host",
            "http://h/?q=1",
            "x",
        ] {
            let error = Remote::new(bad, None).err().unwrap();
            assert!(error.downcast_ref::<crate::UsageError>().is_some(), "{bad}");
        }
        let remote = Remote::new("http://127.0.0.1:8787/", Some("t")).unwrap();
        assert_eq!(remote.base(), "http://127.0.0.1:8787");
        let prefixed = Remote::new("https://example.com/warden/", None).unwrap();
        assert_eq!(prefixed.base(), "https://example.com/warden");
    }

    #[test]
    fn refusals_are_usage_errors_and_outages_are_not() {
        let failure = |status| ApiFailure {
            server: "http://s".into(),
            status,
            code: "c".into(),
            message: "m".into(),
            retry_after: None,
        };
        for status in [400, 401, 403, 404, 409, 422] {
            let error = failure(status).into_error();
            assert!(error.downcast_ref::<crate::UsageError>().is_some());
            assert_eq!(api_failure(&error).unwrap().status, status);
        }
        for status in [429, 500, 503] {
            let error = failure(status).into_error();
            assert!(error.downcast_ref::<crate::UsageError>().is_none());
            assert_eq!(api_failure(&error).unwrap().status, status);
        }
        assert!(failure(401).to_string().contains("WARDEN_TOKEN"));
    }
}
