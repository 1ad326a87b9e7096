//! A scripted model server for tests: a real HTTP server on `127.0.0.1`, port 0, that answers
//! OpenAI Chat Completions (`POST /v1/chat/completions`) and Anthropic Messages
//! (`POST /v1/messages`) with a fixed list of replies, in order, whatever the path, and records
//! every request. Replies can be JSON bodies, SSE streams (optionally cut mid-way), raw text, and
//! delays; the `openai` and `anthropic` modules build realistic ones.
//!
//! ```no_run
//! # async fn demo() {
//! use warden_test_support::model_server::{openai, ScriptedModelServer};
//! let server = ScriptedModelServer::start(vec![
//!     openai::error(429, "rate_limit_error", Some("rate_limit_exceeded"), "slow down")
//!         .with_header("retry-after-ms", "20"),
//!     openai::stream_tool_call("read_file", r#"{"path":"src/lib.rs"}"#, 3),
//! ])
//! .await;
//! let base_url = server.openai_base_url(); // http://127.0.0.1:PORT/v1
//! // ... run the client, then:
//! assert_eq!(server.requests().len(), 2);
//! # }
//! ```

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, Uri};
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// One scripted reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A JSON body (`content-type: application/json`).
    Json {
        status: u16,
        headers: Vec<(String, String)>,
        body: Value,
    },
    /// A Server-Sent Events stream (`content-type: text/event-stream`), one HTTP chunk per event.
    /// With `cut`, the connection is dropped after the events, without ending the body.
    Sse {
        status: u16,
        headers: Vec<(String, String)>,
        events: Vec<SseEvent>,
        cut: bool,
    },
    /// A body sent verbatim, with only the headers given (no content type unless given).
    Raw {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Waits, then replies.
    Delay { ms: u64, then: Box<Reply> },
    /// Waits until the test opens `gate`, then replies: a request held in flight for as long as
    /// the test needs (to act while the model "thinks", or to kill the caller mid-call).
    Held { gate: Gate, then: Box<Reply> },
}

/// A gate a [`Reply::Held`] waits for; clones share it.
#[derive(Debug, Clone, Default)]
pub struct Gate(Arc<std::sync::atomic::AtomicBool>);

impl Gate {
    pub fn new() -> Gate {
        Gate::default()
    }

    /// Lets every reply held by this gate go (now and later).
    pub fn open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    fn is_open(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Gates are equal when they are the same gate.
impl PartialEq for Gate {
    fn eq(&self, other: &Gate) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Reply {
    /// A JSON reply without extra headers.
    pub fn json(status: u16, body: Value) -> Reply {
        Reply::Json {
            status,
            headers: Vec::new(),
            body,
        }
    }

    /// A complete `200` event stream.
    pub fn sse(events: Vec<SseEvent>) -> Reply {
        Reply::Sse {
            status: 200,
            headers: Vec::new(),
            events,
            cut: false,
        }
    }

    /// A verbatim body.
    pub fn raw(status: u16, body: impl Into<String>) -> Reply {
        Reply::Raw {
            status,
            headers: Vec::new(),
            body: body.into(),
        }
    }

    /// Adds a response header (to the inner reply of a `Delay`).
    pub fn with_header(mut self, name: &str, value: &str) -> Reply {
        if let Some(headers) = self.headers_mut() {
            headers.push((name.to_string(), value.to_string()));
        }
        self
    }

    /// Waits `ms` milliseconds before replying.
    pub fn delayed(self, ms: u64) -> Reply {
        Reply::Delay {
            ms,
            then: Box::new(self),
        }
    }

    /// Holds the reply until `gate` is opened.
    pub fn held(self, gate: &Gate) -> Reply {
        Reply::Held {
            gate: gate.clone(),
            then: Box::new(self),
        }
    }

    /// Keeps the first `events` events of a stream and drops the connection after them, as a
    /// network failure or a crashed server would.
    ///
    /// # Panics
    /// If the reply is not an `Sse` stream.
    pub fn cut_after(self, events: usize) -> Reply {
        match self {
            Reply::Sse {
                status,
                headers,
                events: mut all,
                ..
            } => {
                all.truncate(events);
                Reply::Sse {
                    status,
                    headers,
                    events: all,
                    cut: true,
                }
            }
            Reply::Delay { ms, then } => Reply::Delay {
                ms,
                then: Box::new(then.cut_after(events)),
            },
            Reply::Held { gate, then } => Reply::Held {
                gate,
                then: Box::new(then.cut_after(events)),
            },
            other => panic!("cut_after applies to Sse replies, not {other:?}"),
        }
    }

    /// Edits the body of a `Json` reply (say, to drop `usage`).
    ///
    /// # Panics
    /// If the reply is not `Json`.
    pub fn map_json(self, edit: impl FnOnce(&mut Value)) -> Reply {
        match self {
            Reply::Json {
                status,
                headers,
                mut body,
            } => {
                edit(&mut body);
                Reply::Json {
                    status,
                    headers,
                    body,
                }
            }
            Reply::Delay { ms, then } => Reply::Delay {
                ms,
                then: Box::new(then.map_json(edit)),
            },
            Reply::Held { gate, then } => Reply::Held {
                gate,
                then: Box::new(then.map_json(edit)),
            },
            other => panic!("map_json applies to Json replies, not {other:?}"),
        }
    }

    fn headers_mut(&mut self) -> Option<&mut Vec<(String, String)>> {
        match self {
            Reply::Json { headers, .. }
            | Reply::Sse { headers, .. }
            | Reply::Raw { headers, .. } => Some(headers),
            Reply::Delay { then, .. } | Reply::Held { then, .. } => then.headers_mut(),
        }
    }
}

/// One item of an event stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    /// `event: NAME` (if any) and `data:` lines (one per line of `data`), then a blank line.
    Event { event: Option<String>, data: String },
    /// `: TEXT` and a blank line, as servers send for keep-alives (`: PROCESSING`).
    Comment(String),
    /// Bytes sent verbatim, for framing a test wants to get exactly wrong or right.
    Raw(String),
}

impl SseEvent {
    /// A `data:` event without a name.
    pub fn data(data: impl Into<String>) -> SseEvent {
        SseEvent::Event {
            event: None,
            data: data.into(),
        }
    }

    /// A `data:` event carrying `value` as compact JSON.
    pub fn json(value: &Value) -> SseEvent {
        SseEvent::data(value.to_string())
    }

    /// An `event: NAME` event carrying `value` as compact JSON (Anthropic style).
    pub fn named(event: &str, value: &Value) -> SseEvent {
        SseEvent::Event {
            event: Some(event.to_string()),
            data: value.to_string(),
        }
    }

    pub fn comment(text: impl Into<String>) -> SseEvent {
        SseEvent::Comment(text.into())
    }

    /// `data: [DONE]`, the end of an OpenAI stream.
    pub fn done() -> SseEvent {
        SseEvent::data("[DONE]")
    }

    fn to_wire(&self) -> String {
        match self {
            SseEvent::Event { event, data } => {
                let mut out = String::new();
                if let Some(event) = event {
                    out.push_str(&format!("event: {event}\n"));
                }
                for line in data.split('\n') {
                    out.push_str(&format!("data: {line}\n"));
                }
                out.push('\n');
                out
            }
            SseEvent::Comment(text) => format!(": {text}\n\n"),
            SseEvent::Raw(text) => text.clone(),
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    pub path: String,
    /// Names in lower case, in arrival order.
    pub headers: Vec<(String, String)>,
    /// The JSON body, or the body as a string when it is not JSON.
    pub body: Value,
}

impl RecordedRequest {
    /// The first value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| value.as_str())
    }
}

#[derive(Debug)]
struct Shared {
    script: Mutex<VecDeque<Reply>>,
    script_len: usize,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Replies given, outside the script, to every request whose body holds the text.
    standing: Mutex<Vec<(String, Reply)>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread must not hide what the server recorded.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The running server; it stops when dropped.
#[derive(Debug)]
pub struct ScriptedModelServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

impl ScriptedModelServer {
    /// Starts the server on the current tokio runtime.
    ///
    /// # Panics
    /// If no local port can be bound.
    pub async fn start(script: Vec<Reply>) -> ScriptedModelServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|error| panic!("scripted model server cannot bind: {error}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("scripted model server has no address: {error}"));
        let shared = Arc::new(Shared::new(script));
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        tokio::spawn(serve(listener, Arc::clone(&shared), stopped));
        ScriptedModelServer {
            addr,
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// Starts the server on its own thread with its own runtime, for synchronous tests (say, ones
    /// that run the `warden` binary).
    ///
    /// # Panics
    /// If no local port can be bound or the thread cannot start.
    pub fn start_blocking(script: Vec<Reply>) -> ScriptedModelServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .unwrap_or_else(|error| panic!("scripted model server cannot bind: {error}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("scripted model server has no address: {error}"));
        let shared = Arc::new(Shared::new(script));
        let (shutdown, stopped) = tokio::sync::oneshot::channel();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("scripted-model-server-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|error| panic!("scripted model server runtime: {error}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|error| panic!("scripted model server listener: {error}"));
                    serve(listener, thread_shared, stopped).await;
                });
            })
            .unwrap_or_else(|error| panic!("scripted model server thread: {error}"));
        ScriptedModelServer {
            addr,
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// `http://127.0.0.1:PORT`, without `/v1`: the Anthropic base URL as is; OpenAI clients
    /// want `{url}/v1` (see `openai_base_url`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1`, for `OPENAI_BASE_URL`.
    pub fn openai_base_url(&self) -> String {
        format!("{}/v1", self.url())
    }

    /// `http://127.0.0.1:PORT`, for `ANTHROPIC_BASE_URL`.
    pub fn anthropic_base_url(&self) -> String {
        self.url()
    }

    /// Every request received so far, oldest first (including ones to unknown paths).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// Answers every request whose body contains `needle` with `reply`, without taking a
    /// reply of the script (a compaction's request for a hand-off note, say, wherever it comes).
    pub fn always_answer(&self, needle: &str, reply: Reply) {
        lock(&self.shared.standing).push((needle.to_string(), reply));
    }

    /// Replies not yet served.
    pub fn remaining(&self) -> usize {
        lock(&self.shared.script).len()
    }
}

impl Drop for ScriptedModelServer {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl Shared {
    fn new(script: Vec<Reply>) -> Shared {
        Shared {
            script_len: script.len(),
            script: Mutex::new(script.into()),
            requests: Mutex::new(Vec::new()),
            standing: Mutex::new(Vec::new()),
        }
    }

    /// Records a request; returns its 1-based number.
    fn record(&self, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> usize {
        let request = RecordedRequest {
            path: uri.path().to_string(),
            headers: headers
                .iter()
                .map(|(name, value)| {
                    (
                        name.as_str().to_string(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    )
                })
                .collect(),
            body: serde_json::from_slice(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned())),
        };
        let mut requests = lock(&self.requests);
        requests.push(request);
        requests.len()
    }
}

async fn serve(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    stopped: tokio::sync::oneshot::Receiver<()>,
) {
    let app = Router::new()
        .route("/v1/chat/completions", post(scripted))
        .route("/v1/messages", post(scripted))
        .fallback(unknown_route)
        .with_state(shared);
    // Dropping the server future on shutdown also drops connections still being served (a long
    // `Delay`), so a test never waits for them.
    tokio::select! {
        result = axum::serve(listener, app) => {
            if let Err(error) = result {
                eprintln!("scripted model server stopped: {error}");
            }
        }
        _ = stopped => {}
    }
}

async fn scripted(
    State(shared): State<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let number = shared.record(&uri, &headers, &body);
    let text = String::from_utf8_lossy(&body);
    let standing = lock(&shared.standing)
        .iter()
        .find(|(needle, _)| text.contains(needle.as_str()))
        .map(|(_, reply)| reply.clone());
    let next = standing.or_else(|| lock(&shared.script).pop_front());
    match next {
        Some(reply) => render(reply).await,
        None => server_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!(
                "scripted model server: request #{number} (POST {}) is past the end of the script ({} replies)",
                uri.path(),
                shared.script_len
            ),
        ),
    }
}

async fn unknown_route(
    State(shared): State<Arc<Shared>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let number = shared.record(&uri, &headers, &body);
    server_error(
        StatusCode::NOT_FOUND,
        &format!(
            "scripted model server: request #{number} ({method} {}) is not POST /v1/chat/completions or POST /v1/messages (OpenAI base url is {{url}}/v1, Anthropic base url is {{url}})",
            uri.path()
        ),
    )
}

/// An error that is the test's fault: `x-should-retry: false` keeps clients from retrying it.
fn server_error(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": "scripted_model_server_error", "param": null, "code": null}});
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    headers.insert("x-should-retry", HeaderValue::from_static("false"));
    response
}

async fn render(mut reply: Reply) -> Response {
    let reply = loop {
        match reply {
            Reply::Delay { ms, then } => {
                tokio::time::sleep(Duration::from_millis(ms)).await;
                reply = *then;
            }
            Reply::Held { gate, then } => {
                while !gate.is_open() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                reply = *then;
            }
            other => break other,
        }
    };
    let (status, content_type, headers, body) = match reply {
        Reply::Json {
            status,
            headers,
            body,
        } => (
            status,
            Some("application/json"),
            headers,
            Body::from(body.to_string()),
        ),
        Reply::Raw {
            status,
            headers,
            body,
        } => (status, None, headers, Body::from(body)),
        Reply::Sse {
            status,
            headers,
            events,
            cut,
        } => (
            status,
            Some("text/event-stream"),
            headers,
            sse_body(events, cut),
        ),
        Reply::Delay { .. } | Reply::Held { .. } => unreachable!("delays are unwrapped above"),
    };
    let Ok(status) = StatusCode::from_u16(status) else {
        return server_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("scripted model server: invalid status {status} in the script"),
        );
    };
    let mut response = Response::new(body);
    *response.status_mut() = status;
    if let Some(content_type) = content_type {
        response
            .headers_mut()
            .insert("content-type", HeaderValue::from_static(content_type));
        if content_type == "text/event-stream" {
            response
                .headers_mut()
                .insert("cache-control", HeaderValue::from_static("no-cache"));
        }
    }
    for (name, value) in headers {
        let (Ok(name), Ok(value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(&value),
        ) else {
            return server_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("scripted model server: invalid header {name:?}: {value:?} in the script"),
            );
        };
        // A scripted header replaces a default one (say, the content type).
        response.headers_mut().insert(name, value);
    }
    response
}

/// One HTTP chunk per event; a cut stream fails after a short pause (so the events before it are
/// flushed first), which makes the server drop the connection without ending the chunked body.
fn sse_body(events: Vec<SseEvent>, cut: bool) -> Body {
    let mut items: VecDeque<Option<String>> = events.iter().map(|e| Some(e.to_wire())).collect();
    if cut {
        items.push_back(None);
    }
    let stream = futures_util::stream::unfold(items, |mut items| async move {
        match items.pop_front()? {
            Some(chunk) => Some((Ok(Bytes::from(chunk)), items)),
            None => {
                tokio::time::sleep(Duration::from_millis(30)).await;
                Some((
                    Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "scripted cut",
                    )),
                    items,
                ))
            }
        }
    });
    Body::from_stream(stream)
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A number unique in this process, for response and call ids.
fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Splits `text` into `pieces` parts of similar length, on character boundaries (fewer when the
/// text is shorter; at least one, possibly empty).
fn split_into(text: &str, pieces: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let pieces = pieces.clamp(1, chars.len().max(1));
    let size = chars.len().div_ceil(pieces).max(1);
    let mut out: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// Replies in the OpenAI Chat Completions format. Responses report 100 prompt tokens (none
/// cached) and 20 completion tokens unless said otherwise.
pub mod openai {
    use super::*;

    /// The model name responses carry.
    pub const MODEL: &str = "gpt-scripted";

    /// A `usage` object.
    pub fn usage(prompt_tokens: u64, cached_tokens: u64, completion_tokens: u64) -> Value {
        json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0, "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}
        })
    }

    fn default_usage() -> Value {
        usage(100, 0, 20)
    }

    /// A fresh `call_…` id.
    pub fn call_id() -> String {
        format!("call_scripted{:011}", next_id())
    }

    /// A complete `chat.completion` with one choice holding `message`.
    pub fn completion(message: Value, finish_reason: &str) -> Reply {
        Reply::json(
            200,
            json!({
                "id": format!("chatcmpl-scripted{}", next_id()),
                "object": "chat.completion",
                "created": unix_now(),
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish_reason}],
                "usage": default_usage(),
                "system_fingerprint": "fp_scripted"
            }),
        )
    }

    /// An answer in text.
    pub fn text(content: &str) -> Reply {
        completion(
            json!({"role": "assistant", "content": content, "refusal": null}),
            "stop",
        )
    }

    /// One tool call; `arguments` is sent verbatim (it may be invalid JSON).
    pub fn tool_call(name: &str, arguments: &str) -> Reply {
        tool_calls(&[(name, arguments)])
    }

    /// Several tool calls in one response.
    pub fn tool_calls(calls: &[(&str, &str)]) -> Reply {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(name, arguments)| {
                json!({"id": call_id(), "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        completion(
            json!({"role": "assistant", "content": null, "refusal": null, "tool_calls": calls}),
            "tool_calls",
        )
    }

    /// A `chat.completion.chunk` with one choice.
    pub fn chunk(delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": "chatcmpl-scripted-stream",
            "object": "chat.completion.chunk",
            "created": unix_now(),
            "model": MODEL,
            "system_fingerprint": "fp_scripted",
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}]
        })
    }

    /// The last chunk `stream_options.include_usage` adds: no choices, only usage.
    pub fn usage_chunk(usage: Value) -> Value {
        json!({
            "id": "chatcmpl-scripted-stream",
            "object": "chat.completion.chunk",
            "created": unix_now(),
            "model": MODEL,
            "system_fingerprint": "fp_scripted",
            "choices": [],
            "usage": usage
        })
    }

    /// A stream of the given chunks followed by `data: [DONE]`.
    pub fn stream(chunks: Vec<Value>) -> Reply {
        let mut events: Vec<SseEvent> = chunks.iter().map(SseEvent::json).collect();
        events.push(SseEvent::done());
        Reply::sse(events)
    }

    /// A streamed text answer in `fragments` pieces, with a usage chunk and `[DONE]`.
    pub fn stream_text(content: &str, fragments: usize) -> Reply {
        let mut chunks = vec![chunk(
            json!({"role": "assistant", "content": "", "refusal": null}),
            None,
        )];
        for piece in split_into(content, fragments) {
            chunks.push(chunk(json!({"content": piece}), None));
        }
        chunks.push(chunk(json!({}), Some("stop")));
        chunks.push(usage_chunk(default_usage()));
        stream(chunks)
    }

    /// A streamed tool call as OpenAI sends it: the first fragment carries the `id`, `type` and
    /// name with empty arguments, then `fragments` pieces of the arguments carrying only `index`
    /// and their piece; then `finish_reason: tool_calls`, a usage chunk and `[DONE]`.
    pub fn stream_tool_call(name: &str, arguments: &str, fragments: usize) -> Reply {
        let mut chunks = vec![chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"index": 0, "id": call_id(), "type": "function", "function": {"name": name, "arguments": ""}}
            ]}),
            None,
        )];
        for piece in split_into(arguments, fragments) {
            chunks.push(chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None,
            ));
        }
        chunks.push(chunk(json!({}), Some("tool_calls")));
        chunks.push(usage_chunk(default_usage()));
        stream(chunks)
    }

    /// An error response: `{"error": {"message", "type", "param": null, "code"}}`.
    pub fn error(status: u16, kind: &str, code: Option<&str>, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"error": {"message": message, "type": kind, "param": null, "code": code}}),
        )
    }
}

/// Replies in the Anthropic Messages format. Responses report 100 input tokens (no cache) and
/// 20 output tokens unless said otherwise.
pub mod anthropic {
    use super::*;

    /// The model name responses carry.
    pub const MODEL: &str = "claude-scripted";

    /// A `usage` object.
    pub fn usage(input: u64, cache_creation: u64, cache_read: u64, output: u64) -> Value {
        json!({
            "input_tokens": input,
            "cache_creation_input_tokens": cache_creation,
            "cache_read_input_tokens": cache_read,
            "output_tokens": output,
            "service_tier": "standard"
        })
    }

    fn default_usage() -> Value {
        usage(100, 0, 0, 20)
    }

    /// A fresh `toolu_…` id.
    pub fn tool_use_id() -> String {
        format!("toolu_01Scripted{:010}", next_id())
    }

    fn message_id() -> String {
        format!("msg_01Scripted{:010}", next_id())
    }

    /// A complete `message` with the given content blocks.
    pub fn message(content: Vec<Value>, stop_reason: &str) -> Reply {
        Reply::json(
            200,
            json!({
                "id": message_id(),
                "type": "message",
                "role": "assistant",
                "model": MODEL,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": null,
                "usage": default_usage()
            }),
        )
    }

    /// An answer in text.
    pub fn text(text: &str) -> Reply {
        message(vec![json!({"type": "text", "text": text})], "end_turn")
    }

    /// One tool call.
    pub fn tool_use(name: &str, input: Value) -> Reply {
        tool_uses(&[(name, input)])
    }

    /// Several tool calls in one response.
    pub fn tool_uses(calls: &[(&str, Value)]) -> Reply {
        let content = calls
            .iter()
            .map(|(name, input)| {
                json!({"type": "tool_use", "id": tool_use_id(), "name": name, "input": input})
            })
            .collect();
        message(content, "tool_use")
    }

    /// A stream of the given events, each sent with its `type` as the SSE event name.
    pub fn stream(events: Vec<Value>) -> Reply {
        Reply::sse(
            events
                .iter()
                .map(|event| SseEvent::named(event["type"].as_str().unwrap_or("message"), event))
                .collect(),
        )
    }

    fn message_start() -> Value {
        json!({"type": "message_start", "message": {
            "id": message_id(), "type": "message", "role": "assistant", "model": MODEL,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(100, 0, 0, 1)
        }})
    }

    fn message_end(stop_reason: &str) -> [Value; 2] {
        [
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null}, "usage": {"output_tokens": 20}}),
            json!({"type": "message_stop"}),
        ]
    }

    /// A streamed text answer in `fragments` pieces.
    pub fn stream_text(text: &str, fragments: usize) -> Reply {
        let mut events = vec![
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
        ];
        for piece in split_into(text, fragments) {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        events.extend(message_end("end_turn"));
        stream(events)
    }

    /// A streamed tool call: `input_json` (sent verbatim, it may be invalid) in `fragments`
    /// `input_json_delta` pieces.
    pub fn stream_tool_use(name: &str, input_json: &str, fragments: usize) -> Reply {
        let mut events = vec![
            message_start(),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": tool_use_id(), "name": name, "input": {}}}),
            json!({"type": "ping"}),
        ];
        for piece in split_into(input_json, fragments) {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        events.extend(message_end("tool_use"));
        stream(events)
    }

    /// An error response: `{"type": "error", "error": {"type", "message"}}`.
    pub fn error(status: u16, kind: &str, message: &str) -> Reply {
        Reply::json(
            status,
            json!({"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_scripted"}),
        )
    }

    /// The `error` event Anthropic sends inside a stream (say, `overloaded_error`).
    pub fn error_event(kind: &str, message: &str) -> SseEvent {
        SseEvent::named(
            "error",
            &json!({"type": "error", "error": {"type": kind, "message": message}}),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_into_keeps_every_character_once() {
        assert_eq!(split_into("abcdefg", 3), ["abc", "def", "g"]);
        assert_eq!(split_into("ab", 5), ["a", "b"]);
        assert_eq!(split_into("", 3), [""]);
        assert_eq!(split_into("éé", 2), ["é", "é"]);
    }

    #[test]
    fn sse_events_render_to_the_wire_format() {
        assert_eq!(
            SseEvent::named("ping", &json!({"type": "ping"})).to_wire(),
            "event: ping\ndata: {\"type\":\"ping\"}\n\n"
        );
        assert_eq!(SseEvent::data("a\nb").to_wire(), "data: a\ndata: b\n\n");
        assert_eq!(
            SseEvent::comment("PROCESSING").to_wire(),
            ": PROCESSING\n\n"
        );
    }
}
