//! A local fake of Slack's Web API for the Slack app's tests: `POST /api/<method>` for
//! `auth.test`, `chat.postMessage`, `chat.update`, `chat.postEphemeral`,
//! `usergroups.users.list` (`no_such_subteam` for an unknown group), and
//! `conversations.history` / `conversations.replies` (newest first / a thread oldest first,
//! a message's `metadata` only with `include_all_metadata`), with Slack's
//! answer shapes (`{"ok": true, …}`, `{"ok": false, "error": "…"}` with HTTP 200; a rate
//! limit is HTTP 429 `ratelimited` with `Retry-After`) and the checks the app relies on: the
//! bot token as a bearer (or a `token` field; `not_authed` / `invalid_auth` otherwise), JSON
//! or form bodies as Slack accepts them (`blocks` a JSON string in a form), `no_text` without
//! text or blocks, `invalid_blocks` for a section over 3,000 characters or a button value over
//! 2,000, `message_not_found` for an update of an unknown `ts`. A test can plan failures (the
//! next call of a method is refused without acting) and sign the requests Slack would send
//! ([`sign`], an HMAC computed here, not by the code under test).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;

/// The bot's user id, as `auth.test` gives it.
pub const BOT_USER: &str = "UWARDENBOT";

/// A message the app posted, as it stands now (updates applied).
#[derive(Debug, Clone, PartialEq)]
pub struct PostedMessage {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    pub text: String,
    /// `blocks` as last posted or updated.
    pub blocks: Value,
    /// Every text the message showed, oldest first.
    pub history: Vec<String>,
    /// The message's `metadata` (`event_type`, `event_payload`) as posted, or null.
    pub metadata: Value,
    /// Who posted it: the bot ([`BOT_USER`]) unless a test posted as another app.
    pub user: String,
}

impl PostedMessage {
    /// The `(action_id, value)` of its buttons.
    pub fn buttons(&self) -> Vec<(String, String)> {
        let mut buttons = Vec::new();
        for block in self.blocks.as_array().into_iter().flatten() {
            for element in block["elements"].as_array().into_iter().flatten() {
                if element["type"] == "button" {
                    buttons.push((
                        element["action_id"]
                            .as_str()
                            .unwrap_or_default()
                            .to_string(),
                        element["value"].as_str().unwrap_or_default().to_string(),
                    ));
                }
            }
        }
        buttons
    }
}

#[derive(Default)]
struct FakeState {
    next_ts: u64,
    messages: Vec<PostedMessage>,
    ephemerals: Vec<Value>,
    /// Planned refusals: method, then `Some(retry_after)` for a 429 or `None` for a 500.
    faults: VecDeque<(String, Option<u64>)>,
    calls: Vec<String>,
    /// User group id → its members' user ids.
    usergroups: std::collections::HashMap<String, Vec<String>>,
}

struct Shared {
    token: String,
    state: Mutex<FakeState>,
}

/// The fake, on its own thread; stopped on drop.
pub struct SlackFake {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `v0=<hex HMAC-SHA256(secret, "v0:{timestamp}:{body}")>`, as Slack signs a request.
///
/// # Panics
/// Never: an HMAC takes a key of any length.
pub fn sign(secret: &str, timestamp: &str, body: &str) -> String {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(secret.as_bytes())
        .unwrap_or_else(|error| panic!("hmac: {error}"));
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    format!("v0={}", hex::encode(mac.finalize().into_bytes()))
}

impl SlackFake {
    /// Starts a fake accepting only `token`.
    ///
    /// # Panics
    /// If no local port can be bound or the thread cannot start.
    pub fn start(token: &str) -> SlackFake {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .unwrap_or_else(|error| panic!("slack fake cannot bind: {error}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("slack fake has no address: {error}"));
        let shared = Arc::new(Shared {
            token: token.to_string(),
            state: Mutex::new(FakeState {
                next_ts: 1_700_000_000_000_100,
                ..FakeState::default()
            }),
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let app = Router::new()
            .route("/api/{method}", post(handle))
            .with_state(Arc::clone(&shared));
        std::thread::Builder::new()
            .name(format!("slack-fake-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|error| panic!("slack fake runtime: {error}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|error| panic!("slack fake listener: {error}"));
                    tokio::select! {
                        result = axum::serve(listener, app) => {
                            if let Err(error) = result {
                                eprintln!("slack fake stopped: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .unwrap_or_else(|error| panic!("slack fake thread: {error}"));
        SlackFake {
            addr,
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// The Web API base URL (`http://127.0.0.1:PORT/api`), as `api_url`.
    pub fn url(&self) -> String {
        format!("http://{}/api", self.addr)
    }

    /// The messages posted so far, in order.
    pub fn messages(&self) -> Vec<PostedMessage> {
        lock(&self.shared.state).messages.clone()
    }

    /// The ephemeral messages posted so far (`channel`, `user`, `text`, …).
    pub fn ephemerals(&self) -> Vec<Value> {
        lock(&self.shared.state).ephemerals.clone()
    }

    /// The methods called so far, in order.
    /// Another app's message in `thread` of `channel` carrying `metadata`, listed before every
    /// message there (an earlier one).
    pub fn post_as_another_app(&self, channel: &str, thread: &str, text: &str, metadata: Value) {
        lock(&self.shared.state).messages.insert(
            0,
            PostedMessage {
                channel: channel.into(),
                ts: "1600000000.000001".into(),
                thread_ts: Some(thread.into()),
                text: text.into(),
                blocks: Value::Null,
                history: vec![text.into()],
                metadata,
                user: "UOTHERAPP".into(),
            },
        );
    }

    /// Makes user group `group` hold `members` (replacing what it held).
    pub fn set_usergroup(&self, group: &str, members: &[&str]) {
        lock(&self.shared.state).usergroups.insert(
            group.to_string(),
            members.iter().map(|m| m.to_string()).collect(),
        );
    }

    pub fn calls(&self) -> Vec<String> {
        lock(&self.shared.state).calls.clone()
    }

    /// The next call of `method` is refused without acting: a 429 with `Retry-After:
    /// retry_after` when given, else a 500.
    pub fn fail_next(&self, method: &str, retry_after: Option<u64>) {
        lock(&self.shared.state)
            .faults
            .push_back((method.to_string(), retry_after));
    }

    /// Waits up to `timeout` until `done` holds for the messages; them, or `None`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[PostedMessage]) -> bool,
    ) -> Option<Vec<PostedMessage>> {
        crate::wait_until(timeout, || Some(self.messages()).filter(|m| done(m)))
    }
}

impl Drop for SlackFake {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

fn ok(body: Value) -> Response {
    let mut body = body;
    body["ok"] = json!(true);
    axum::Json(body).into_response()
}

fn refused(error: &str) -> Response {
    axum::Json(json!({"ok": false, "error": error})).into_response()
}

/// The request's fields: a JSON object, or a form whose `blocks` is a JSON string.
fn fields(headers: &HeaderMap, body: &[u8]) -> Option<Value> {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if content_type.starts_with("application/json") {
        return serde_json::from_slice::<Value>(body)
            .ok()
            .filter(Value::is_object);
    }
    let text = std::str::from_utf8(body).ok()?;
    let mut map = serde_json::Map::new();
    for pair in text.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = decode(value)?;
        let value = if key == "blocks" {
            serde_json::from_str(&value).ok()?
        } else {
            Value::String(value)
        };
        map.insert(decode(key)?, value);
    }
    Some(Value::Object(map))
}

/// Percent-decoding of a form value (`+` is a space).
fn decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Slack's block checks the app relies on.
fn blocks_valid(blocks: &Value) -> bool {
    blocks.as_array().into_iter().flatten().all(|block| {
        let text_ok = block["text"]["text"]
            .as_str()
            .is_none_or(|t| t.chars().count() <= 3000);
        let values_ok = block["elements"].as_array().into_iter().flatten().all(|e| {
            e["value"]
                .as_str()
                .is_none_or(|v| v.chars().count() <= 2000)
        });
        text_ok && values_ok
    })
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path(method): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(fields) = fields(&headers, &body) else {
        return refused("invalid_form_data");
    };
    let bearer = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
        .or_else(|| fields["token"].as_str().map(str::to_string));
    let mut state = lock(&shared.state);
    state.calls.push(method.clone());
    match bearer {
        None => return refused("not_authed"),
        Some(token) if token != shared.token => return refused("invalid_auth"),
        Some(_) => {}
    }
    if let Some(at) = state.faults.iter().position(|(m, _)| *m == method) {
        let (_, retry_after) = state.faults.remove(at).unwrap_or_default();
        return match retry_after {
            Some(secs) => (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", secs.to_string())],
                axum::Json(json!({"ok": false, "error": "ratelimited"})),
            )
                .into_response(),
            None => (
                StatusCode::INTERNAL_SERVER_ERROR,
                axum::Json(json!({"ok": false, "error": "internal_error"})),
            )
                .into_response(),
        };
    }
    let channel = fields["channel"].as_str().unwrap_or_default().to_string();
    let text = fields["text"].as_str().unwrap_or_default().to_string();
    let blocks = fields.get("blocks").cloned().unwrap_or(Value::Null);
    match method.as_str() {
        "auth.test" => ok(json!({
            "url": "https://warden-test.slack.com/", "team": "Warden Test",
            "user": "warden", "team_id": "T0WARDEN", "user_id": BOT_USER, "bot_id": "B0WARDEN",
        })),
        "chat.postMessage" | "chat.update" | "chat.postEphemeral" => {
            if channel.is_empty() {
                return refused("channel_not_found");
            }
            if text.is_empty() && blocks.as_array().is_none_or(Vec::is_empty) {
                return refused("no_text");
            }
            if !blocks_valid(&blocks) {
                return refused("invalid_blocks");
            }
            state.next_ts += 1;
            let ts = format!(
                "{}.{:06}",
                state.next_ts / 1_000_000,
                state.next_ts % 1_000_000
            );
            match method.as_str() {
                "chat.postMessage" => {
                    state.messages.push(PostedMessage {
                        channel: channel.clone(),
                        ts: ts.clone(),
                        thread_ts: fields["thread_ts"].as_str().map(str::to_string),
                        text: text.clone(),
                        blocks,
                        history: vec![text.clone()],
                        metadata: fields.get("metadata").cloned().unwrap_or(Value::Null),
                        user: BOT_USER.into(),
                    });
                    ok(
                        json!({"channel": channel, "ts": ts, "message": {"text": text, "bot_id": "B0WARDEN"}}),
                    )
                }
                "chat.update" => {
                    let wanted = fields["ts"].as_str().unwrap_or_default().to_string();
                    let Some(message) = state
                        .messages
                        .iter_mut()
                        .find(|m| m.channel == channel && m.ts == wanted)
                    else {
                        return refused("message_not_found");
                    };
                    if message.user != BOT_USER {
                        return refused("cant_update_message");
                    }
                    message.text = text.clone();
                    message.blocks = blocks;
                    message.history.push(text.clone());
                    ok(json!({"channel": channel, "ts": wanted, "text": text}))
                }
                _ => {
                    let user = fields["user"].as_str().unwrap_or_default().to_string();
                    if user.is_empty() {
                        return refused("user_not_in_channel");
                    }
                    state.ephemerals.push(json!({
                        "channel": channel, "user": user, "text": text,
                        "thread_ts": fields["thread_ts"],
                    }));
                    ok(json!({"message_ts": ts}))
                }
            }
        }
        "conversations.history" | "conversations.replies" => {
            if fields.get("channel").is_none() {
                return refused("channel_not_found");
            }
            let with_metadata = fields["include_all_metadata"] == "true";
            let limit = fields["limit"]
                .as_str()
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(100)
                .clamp(1, 1000);
            let thread = fields["ts"].as_str().unwrap_or_default().to_string();
            let shown = |m: &PostedMessage| {
                let mut shown = json!({"type": "message", "ts": m.ts, "text": m.text,
                                       "user": m.user});
                if m.user == BOT_USER {
                    shown["bot_id"] = json!("B0WARDEN");
                }
                if let Some(thread) = &m.thread_ts {
                    shown["thread_ts"] = json!(thread);
                }
                if with_metadata && !m.metadata.is_null() {
                    shown["metadata"] = m.metadata.clone();
                }
                shown
            };
            let in_channel = state.messages.iter().filter(|m| m.channel == channel);
            let messages: Vec<Value> = if method == "conversations.history" {
                let mut top: Vec<Value> = in_channel
                    .filter(|m| m.thread_ts.is_none() || m.thread_ts.as_deref() == Some(&m.ts))
                    .map(shown)
                    .collect();
                top.reverse();
                top.into_iter().take(limit).collect()
            } else {
                if thread.is_empty() {
                    return refused("thread_not_found");
                }
                in_channel
                    .filter(|m| m.ts == thread || m.thread_ts.as_deref() == Some(&thread))
                    .map(shown)
                    .take(limit)
                    .collect()
            };
            ok(json!({"messages": messages, "has_more": false}))
        }
        "usergroups.users.list" => {
            let group = fields["usergroup"].as_str().unwrap_or_default();
            match state.usergroups.get(group) {
                Some(users) => ok(json!({"users": users})),
                None => refused("no_such_subteam"),
            }
        }
        _ => refused("unknown_method"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_like_slacks_documented_example() {
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        assert_eq!(
            sign("8f742231b10e8888abcd99yyyzzz85a5", "1531420618", body),
            "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
        );
    }

    #[test]
    fn form_values_decode() {
        assert_eq!(decode("a+b%2Cc%7B").as_deref(), Some("a b,c{"));
        assert_eq!(decode("%zz"), None);
    }
}
