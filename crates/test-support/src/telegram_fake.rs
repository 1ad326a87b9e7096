//! A local fake of Telegram's Bot API for the bot's tests: `POST /bot<token>/<method>` for
//! `getMe`, `getUpdates`, `sendMessage`, `editMessageText` and `answerCallbackQuery`, with the
//! real answer shapes (`{"ok": true, "result": …}`, `{"ok": false, "error_code",
//! "description", "parameters": {"retry_after"}}`), the real checks the bot relies on (an
//! unknown token is 401 `Unauthorized`; an empty or over-4,096-unit text is 400; editing to the
//! same text and markup is 400 `message is not modified`; callback data over 64 bytes is 400)
//! and long-poll semantics: `getUpdates` returns the updates with `update_id >= offset`
//! (acknowledging, and forgetting, the earlier ones), waiting up to `timeout` seconds for one.
//! `setWebhook` switches to webhook mode as Telegram does: `getUpdates` is then refused (409)
//! and each update is POSTed, one at a time and oldest first, to the webhook URL with the
//! secret in `X-Telegram-Bot-Api-Secret-Token`; an update is forgotten once its delivery is
//! answered 2xx and delivered again otherwise; `deleteWebhook` returns to polling.
//! A test injects what users do (a message in a private or group chat, a button press), can
//! replay an update Telegram already delivered, and can plan failures (the next call of a
//! method answers an error without acting).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};

/// A message the bot sent, as it stands now (edits applied), and every text it showed.
#[derive(Debug, Clone, PartialEq)]
pub struct SentMessage {
    pub chat_id: i64,
    pub message_id: i64,
    pub text: String,
    /// `reply_markup` as last sent or edited (`None`: no buttons).
    pub reply_markup: Option<Value>,
    /// Every text the message showed, oldest first (the sent one, then each edit).
    pub history: Vec<String>,
}

/// A planned failure: the next call of `method` answers `error_code` (with `retry_after` on a
/// 429) without acting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub method: String,
    pub error_code: u16,
    pub retry_after: Option<u64>,
}

struct Shared {
    token: String,
    state: Mutex<FakeState>,
    changed: tokio::sync::Notify,
}

#[derive(Default)]
struct FakeState {
    next_update_id: i64,
    next_message_id: i64,
    /// Updates not yet acknowledged, oldest first.
    pending: VecDeque<Value>,
    /// Updates to deliver once more whatever the offset (a replay).
    replays: VecDeque<Value>,
    delivered: Vec<Value>,
    sent: Vec<SentMessage>,
    callback_answers: Vec<Value>,
    faults: VecDeque<Fault>,
    calls: Vec<String>,
    /// `setWebhook`'s `(url, secret_token)`, while set.
    webhook: Option<(String, String)>,
    /// Each webhook delivery attempt: the update id and the HTTP status (0: no answer).
    webhook_attempts: Vec<(i64, u16)>,
}

/// The fake, on its own thread; stopped on drop.
pub struct TelegramFake {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The bot's own user, as `getMe` and message `from` fields show it.
pub const BOT_USERNAME: &str = "warden_test_bot";

impl TelegramFake {
    /// Starts a fake accepting only `token`.
    ///
    /// # Panics
    /// If no local port can be bound or the thread cannot start.
    pub fn start(token: &str) -> TelegramFake {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
            .unwrap_or_else(|error| panic!("telegram fake cannot bind: {error}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|error| panic!("telegram fake has no address: {error}"));
        let shared = Arc::new(Shared {
            token: token.to_string(),
            state: Mutex::new(FakeState {
                next_update_id: 700_000,
                next_message_id: 1,
                ..FakeState::default()
            }),
            changed: tokio::sync::Notify::new(),
        });
        let (shutdown, stopped) = tokio::sync::oneshot::channel::<()>();
        let thread_shared = Arc::clone(&shared);
        std::thread::Builder::new()
            .name(format!("telegram-fake-{}", addr.port()))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap_or_else(|error| panic!("telegram fake runtime: {error}"));
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .unwrap_or_else(|error| panic!("telegram fake listener: {error}"));
                    tokio::spawn(deliver_to_webhook(Arc::clone(&thread_shared)));
                    let app = Router::new()
                        .route("/{bot}/{method}", post(handle))
                        .with_state(thread_shared);
                    tokio::select! {
                        result = axum::serve(listener, app) => {
                            if let Err(error) = result {
                                eprintln!("telegram fake stopped: {error}");
                            }
                        }
                        _ = stopped => {}
                    }
                });
            })
            .unwrap_or_else(|error| panic!("telegram fake thread: {error}"));
        TelegramFake {
            addr,
            shared,
            shutdown: Some(shutdown),
        }
    }

    /// The API base URL (`http://127.0.0.1:PORT`), as `api_url`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn push(&self, make: impl FnOnce(i64) -> Value) -> i64 {
        let id = {
            let mut state = lock(&self.shared.state);
            state.next_update_id += 1;
            let id = state.next_update_id;
            state.pending.push_back(make(id));
            id
        };
        self.shared.changed.notify_waiters();
        id
    }

    /// User `user` writes `text` in a private chat with the bot; the update id.
    pub fn send_private(&self, user: i64, text: &str) -> i64 {
        self.send_in_chat(
            user,
            json!({"id": user, "type": "private", "first_name": "U"}),
            text,
        )
    }

    /// User `user` writes `text` in group `group` (a negative chat id); the update id.
    pub fn send_in_group(&self, user: i64, group: i64, text: &str) -> i64 {
        self.send_in_chat(
            user,
            json!({"id": group, "type": "group", "title": "team"}),
            text,
        )
    }

    fn send_in_chat(&self, user: i64, chat: Value, text: &str) -> i64 {
        let message_id = {
            let mut state = lock(&self.shared.state);
            state.next_message_id += 1;
            state.next_message_id
        };
        let entities = if text.starts_with('/') {
            let length = text
                .split_whitespace()
                .next()
                .map_or(0, |c| c.encode_utf16().count());
            json!([{"type": "bot_command", "offset": 0, "length": length}])
        } else {
            json!([])
        };
        self.push(|update_id| {
            json!({
                "update_id": update_id,
                "message": {
                    "message_id": message_id,
                    "from": {"id": user, "is_bot": false, "first_name": "U"},
                    "chat": chat,
                    "date": 1_700_000_000,
                    "text": text,
                    "entities": entities,
                }
            })
        })
    }

    /// User `user` presses the button carrying `data` under the bot's message `message_id`
    /// in chat `chat`; the update id.
    pub fn press(&self, user: i64, chat: i64, message_id: i64, data: &str) -> i64 {
        let message = self
            .messages()
            .into_iter()
            .find(|m| m.message_id == message_id)
            .map(|m| json!({"message_id": m.message_id, "chat": {"id": m.chat_id, "type": "private"}, "date": 1_700_000_000, "text": m.text}))
            .unwrap_or_else(|| json!({"message_id": message_id, "chat": {"id": chat, "type": "private"}, "date": 1_700_000_000}));
        self.push(|update_id| {
            json!({
                "update_id": update_id,
                "callback_query": {
                    "id": format!("cbq{update_id}"),
                    "from": {"id": user, "is_bot": false, "first_name": "U"},
                    "message": message,
                    "chat_instance": "1",
                    "data": data,
                }
            })
        })
    }

    /// Delivers update `update_id` (one delivered before) once more, whatever the offset.
    ///
    /// # Panics
    /// If no such update was delivered.
    pub fn replay(&self, update_id: i64) {
        {
            let mut state = lock(&self.shared.state);
            let update = state
                .delivered
                .iter()
                .find(|u| u["update_id"] == update_id)
                .cloned()
                .unwrap_or_else(|| panic!("update {update_id} was never delivered"));
            state.replays.push_back(update);
        }
        self.shared.changed.notify_waiters();
    }

    /// Plans a failure of the next call of `method`.
    pub fn inject(&self, fault: Fault) {
        lock(&self.shared.state).faults.push_back(fault);
    }

    /// Every message the bot sent, in order, as it stands now.
    pub fn messages(&self) -> Vec<SentMessage> {
        lock(&self.shared.state).sent.clone()
    }

    /// The messages in chat `chat`.
    pub fn messages_in(&self, chat: i64) -> Vec<SentMessage> {
        self.messages()
            .into_iter()
            .filter(|m| m.chat_id == chat)
            .collect()
    }

    /// Every `answerCallbackQuery` body, in order.
    pub fn callback_answers(&self) -> Vec<Value> {
        lock(&self.shared.state).callback_answers.clone()
    }

    /// The methods called, in order.
    pub fn calls(&self) -> Vec<String> {
        lock(&self.shared.state).calls.clone()
    }

    /// Each webhook delivery attempt, in order: the update id and the HTTP status the
    /// webhook answered (0: no answer).
    pub fn webhook_attempts(&self) -> Vec<(i64, u16)> {
        lock(&self.shared.state).webhook_attempts.clone()
    }

    /// The webhook URL while one is set.
    pub fn webhook_url(&self) -> Option<String> {
        lock(&self.shared.state)
            .webhook
            .as_ref()
            .map(|(url, _)| url.clone())
    }

    /// Updates the bot has not acknowledged yet.
    pub fn unacknowledged(&self) -> usize {
        lock(&self.shared.state).pending.len()
    }

    /// Waits (polling every 50 ms, up to `timeout`) until `done` holds for the messages;
    /// the messages then, or `None`.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[SentMessage]) -> bool,
    ) -> Option<Vec<SentMessage>> {
        crate::wait_until(timeout, || Some(self.messages()).filter(|m| done(m)))
    }
}

impl Drop for TelegramFake {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

fn ok(result: Value) -> Response {
    (
        StatusCode::OK,
        axum::Json(json!({"ok": true, "result": result})),
    )
        .into_response()
}

fn error(code: u16, description: &str, retry_after: Option<u64>) -> Response {
    let mut body = json!({"ok": false, "error_code": code, "description": description});
    if let Some(after) = retry_after {
        body["parameters"] = json!({"retry_after": after});
    }
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST);
    (status, axum::Json(body)).into_response()
}

fn text_error(text: Option<&str>) -> Option<Response> {
    match text {
        None | Some("") => Some(error(400, "Bad Request: message text is empty", None)),
        Some(text) if text.encode_utf16().count() > 4096 => {
            Some(error(400, "Bad Request: message is too long", None))
        }
        Some(_) => None,
    }
}

fn markup_error(markup: &Value) -> Option<Response> {
    for row in markup["inline_keyboard"].as_array().into_iter().flatten() {
        for button in row.as_array().into_iter().flatten() {
            if button["callback_data"]
                .as_str()
                .is_some_and(|d| d.len() > 64)
            {
                return Some(error(400, "Bad Request: BUTTON_DATA_INVALID", None));
            }
        }
    }
    None
}

fn chat_id(body: &Value) -> Option<i64> {
    body["chat_id"]
        .as_i64()
        .or_else(|| body["chat_id"].as_str().and_then(|s| s.parse().ok()))
}

async fn handle(
    State(shared): State<Arc<Shared>>,
    Path((bot, method)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    if bot.strip_prefix("bot") != Some(shared.token.as_str()) {
        return error(401, "Unauthorized", None);
    }
    let body: Value = if body.is_empty() {
        json!({})
    } else {
        match serde_json::from_slice(&body) {
            Ok(body) => body,
            Err(_) => return error(400, "Bad Request: can't parse JSON", None),
        }
    };
    {
        let mut state = lock(&shared.state);
        state.calls.push(method.clone());
        if let Some(at) = state.faults.iter().position(|f| f.method == method) {
            let fault = state.faults.remove(at).unwrap_or_else(|| unreachable!());
            let description = match fault.error_code {
                429 => "Too Many Requests: retry later",
                code if code >= 500 => "Internal Server Error",
                _ => "Bad Request: planned failure",
            };
            return error(fault.error_code, description, fault.retry_after);
        }
    }
    match method.as_str() {
        "getMe" => {
            ok(json!({"id": 1, "is_bot": true, "first_name": "Warden", "username": BOT_USERNAME}))
        }
        "getUpdates" => {
            if lock(&shared.state).webhook.is_some() {
                return error(
                    409,
                    "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first",
                    None,
                );
            }
            get_updates(&shared, &body).await
        }
        "setWebhook" => {
            let url = body["url"].as_str().unwrap_or_default();
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return error(
                    400,
                    "Bad Request: bad webhook: An HTTPS URL must be provided for webhook",
                    None,
                );
            }
            let secret = body["secret_token"].as_str().unwrap_or_default();
            if secret.len() > 256
                || !secret
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            {
                return error(
                    400,
                    "Bad Request: secret token contains unallowed characters",
                    None,
                );
            }
            lock(&shared.state).webhook = Some((url.to_string(), secret.to_string()));
            shared.changed.notify_waiters();
            ok(json!(true))
        }
        "deleteWebhook" => {
            lock(&shared.state).webhook = None;
            ok(json!(true))
        }
        "sendMessage" => {
            let Some(chat) = chat_id(&body) else {
                return error(400, "Bad Request: chat_id is empty", None);
            };
            if let Some(refused) = text_error(body["text"].as_str()) {
                return refused;
            }
            if let Some(refused) = markup_error(&body["reply_markup"]) {
                return refused;
            }
            let text = body["text"].as_str().unwrap_or_default().to_string();
            let mut state = lock(&shared.state);
            state.next_message_id += 1;
            let message_id = state.next_message_id;
            let markup = body.get("reply_markup").cloned().filter(|m| !m.is_null());
            state.sent.push(SentMessage {
                chat_id: chat,
                message_id,
                text: text.clone(),
                reply_markup: markup.clone(),
                history: vec![text.clone()],
            });
            let mut result = json!({
                "message_id": message_id,
                "from": {"id": 1, "is_bot": true, "first_name": "Warden", "username": BOT_USERNAME},
                "chat": {"id": chat, "type": if chat > 0 { "private" } else { "group" }},
                "date": 1_700_000_000,
                "text": text,
            });
            if let Some(markup) = markup {
                result["reply_markup"] = markup;
            }
            ok(result)
        }
        "editMessageText" => {
            let (Some(chat), Some(message_id)) = (chat_id(&body), body["message_id"].as_i64())
            else {
                return error(
                    400,
                    "Bad Request: message identifier is not specified",
                    None,
                );
            };
            if let Some(refused) = text_error(body["text"].as_str()) {
                return refused;
            }
            if let Some(refused) = markup_error(&body["reply_markup"]) {
                return refused;
            }
            let text = body["text"].as_str().unwrap_or_default().to_string();
            let markup = body.get("reply_markup").cloned().filter(|m| !m.is_null());
            let mut state = lock(&shared.state);
            let Some(message) = state
                .sent
                .iter_mut()
                .find(|m| m.chat_id == chat && m.message_id == message_id)
            else {
                return error(400, "Bad Request: message to edit not found", None);
            };
            if message.text == text && message.reply_markup == markup {
                return error(
                    400,
                    "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message",
                    None,
                );
            }
            message.text = text.clone();
            message.reply_markup = markup;
            message.history.push(text.clone());
            ok(
                json!({"message_id": message_id, "chat": {"id": chat, "type": "private"}, "date": 1_700_000_000, "text": text}),
            )
        }
        "answerCallbackQuery" => {
            if body["callback_query_id"].as_str().is_none() {
                return error(400, "Bad Request: query is too old and response timeout expired or query ID is invalid", None);
            }
            lock(&shared.state).callback_answers.push(body);
            ok(json!(true))
        }
        _ => error(404, "Not Found", None),
    }
}

/// While a webhook is set: POSTs the oldest undelivered update (a replay first) to it, one at
/// a time; a 2xx answer acknowledges it, anything else leaves it to be delivered again.
async fn deliver_to_webhook(shared: Arc<Shared>) {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap_or_else(|error| panic!("telegram fake http client: {error}"));
    loop {
        let notified = shared.changed.notified();
        let next = {
            let state = lock(&shared.state);
            state.webhook.clone().and_then(|hook| {
                state
                    .replays
                    .front()
                    .cloned()
                    .map(|u| (hook.clone(), u, true))
                    .or_else(|| state.pending.front().cloned().map(|u| (hook, u, false)))
            })
        };
        let Some(((url, secret), update, replay)) = next else {
            let _ = tokio::time::timeout(Duration::from_millis(200), notified).await;
            continue;
        };
        let update_id = update["update_id"].as_i64().unwrap_or(0);
        let status = match http
            .post(&url)
            .header("content-type", "application/json")
            .header("x-telegram-bot-api-secret-token", &secret)
            .body(update.to_string())
            .send()
            .await
        {
            Ok(response) => response.status().as_u16(),
            Err(_) => 0,
        };
        let delivered = (200..300).contains(&status);
        {
            let mut state = lock(&shared.state);
            state.webhook_attempts.push((update_id, status));
            if delivered {
                if replay {
                    state.replays.pop_front();
                } else {
                    state
                        .pending
                        .retain(|u| u["update_id"] != update["update_id"]);
                }
                if !state.delivered.contains(&update) {
                    state.delivered.push(update);
                }
            }
        }
        if !delivered {
            // Telegram backs off between attempts; a short pause keeps tests quick.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

async fn get_updates(shared: &Shared, body: &Value) -> Response {
    let offset = body["offset"].as_i64();
    let timeout = Duration::from_secs(body["timeout"].as_u64().unwrap_or(0).min(50));
    let limit = body["limit"].as_u64().unwrap_or(100).clamp(1, 100) as usize;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let notified = shared.changed.notified();
        {
            let mut state = lock(&shared.state);
            if let Some(offset) = offset {
                // An offset acknowledges every earlier update: Telegram forgets them.
                state
                    .pending
                    .retain(|u| u["update_id"].as_i64().unwrap_or(0) >= offset);
            }
            let mut out: Vec<Value> = state.replays.drain(..).collect();
            out.extend(state.pending.iter().take(limit).cloned());
            if !out.is_empty() {
                for update in &out {
                    if !state.delivered.contains(update) {
                        state.delivered.push(update.clone());
                    }
                }
                return ok(Value::Array(out));
            }
        }
        if tokio::time::timeout_at(deadline, notified).await.is_err() {
            return ok(json!([]));
        }
    }
}
