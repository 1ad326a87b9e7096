//! Telegram's Bot API over HTTPS (`{api_url}/bot<token>/<method>`, JSON bodies, replies
//! `{"ok": true, "result": …}` or `{"ok": false, "error_code", "description", "parameters":
//! {"retry_after"}}`): the few methods the bot uses and the few fields of updates it reads.
//! The token is part of every request path, so no error or log line ever carries a URL.

use std::time::Duration;

use serde::Deserialize;
use serde_json::{json, Value};

/// Why a Bot API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Telegram answered `ok: false` (or a non-2xx status) with this code and description.
    #[error("telegram refused {method}: {code} {description}")]
    Refused {
        method: &'static str,
        code: u16,
        description: String,
        /// `parameters.retry_after` of a 429, in seconds.
        retry_after: Option<u64>,
    },
    /// No usable answer: connection, timeout or an unreadable body. Whether Telegram acted is
    /// unknown.
    #[error("telegram {method} failed: {message}")]
    Transport {
        method: &'static str,
        message: String,
    },
}

impl ApiError {
    /// Whether trying again later can succeed: transport failures, 429 and 5xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            ApiError::Refused { code, .. } => *code == 429 || *code >= 500,
            ApiError::Transport { .. } => true,
        }
    }

    /// The token was refused (401) or names no bot (404): nothing works until it is fixed.
    pub fn is_bad_token(&self) -> bool {
        matches!(
            self,
            ApiError::Refused {
                code: 401 | 404,
                ..
            }
        )
    }

    /// An edit that changes nothing: what the message shows is already right.
    pub fn is_not_modified(&self) -> bool {
        matches!(self, ApiError::Refused { code: 400, description, .. }
            if description.contains("message is not modified"))
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Refused { retry_after, .. } => retry_after.map(Duration::from_secs),
            ApiError::Transport { .. } => None,
        }
    }
}

/// A Telegram user (`from`).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct User {
    pub id: i64,
}

/// A chat: `private` chats only are served.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Chat {
    pub id: i64,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct Message {
    pub from: Option<User>,
    pub chat: Chat,
    pub text: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
pub(super) struct CallbackQuery {
    pub id: String,
    pub from: User,
    pub data: Option<String>,
}

/// One update; kinds the bot does not ask for are ignored.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Update {
    pub update_id: i64,
    pub message: Option<Message>,
    pub callback_query: Option<CallbackQuery>,
}

/// The client of one bot.
pub struct BotApi {
    http: reqwest::Client,
    /// `{api_url}/bot<token>/`.
    base: String,
}

impl BotApi {
    /// `poll_timeout` is the longest a `getUpdates` is held open; requests may take that long
    /// plus a margin.
    pub fn new(api_url: &str, token: &str, poll_timeout: Duration) -> anyhow::Result<BotApi> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(poll_timeout + Duration::from_secs(15))
            .user_agent(concat!("warden-telegram/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(BotApi {
            http,
            base: format!("{}/bot{token}/", api_url.trim_end_matches('/')),
        })
    }

    async fn call(&self, method: &'static str, body: Value) -> Result<Value, ApiError> {
        let transport = |e: reqwest::Error| ApiError::Transport {
            method,
            // Never the URL: it holds the token.
            message: e.without_url().to_string(),
        };
        let response = self
            .http
            .post(format!("{}{method}", self.base))
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.map_err(transport)?;
        let reply: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::Transport {
            method,
            message: format!("unreadable answer (HTTP {status}): {e}"),
        })?;
        if reply["ok"] == json!(true) && (200..300).contains(&status) {
            return Ok(reply["result"].clone());
        }
        Err(ApiError::Refused {
            method,
            code: reply["error_code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .unwrap_or(status),
            description: reply["description"]
                .as_str()
                .unwrap_or("no description")
                .chars()
                .take(300)
                .collect(),
            retry_after: reply["parameters"]["retry_after"].as_u64(),
        })
    }

    /// `getMe`: checks the token; the bot's username.
    pub async fn get_me(&self) -> Result<String, ApiError> {
        let me = self.call("getMe", json!({})).await?;
        Ok(me["username"].as_str().unwrap_or_default().to_string())
    }

    /// `getUpdates` from `offset` (which acknowledges every earlier update), waiting up to
    /// `timeout` for one.
    pub async fn get_updates(
        &self,
        offset: Option<i64>,
        timeout: Duration,
    ) -> Result<Vec<Value>, ApiError> {
        let mut body = json!({
            "timeout": timeout.as_secs(),
            "limit": 100,
            "allowed_updates": ["message", "callback_query"],
        });
        if let Some(offset) = offset {
            body["offset"] = json!(offset);
        }
        let result = self.call("getUpdates", body).await?;
        match result {
            Value::Array(updates) => Ok(updates),
            other => Err(ApiError::Transport {
                method: "getUpdates",
                message: format!("result is not a list: {}", kind_of(&other)),
            }),
        }
    }

    /// `setWebhook`: Telegram POSTs each update to `url` with `secret` in
    /// `X-Telegram-Bot-Api-Secret-Token`; updates not yet delivered are kept.
    pub async fn set_webhook(&self, url: &str, secret: &str) -> Result<(), ApiError> {
        self.call(
            "setWebhook",
            json!({
                "url": url,
                "secret_token": secret,
                "allowed_updates": ["message", "callback_query"],
                "drop_pending_updates": false,
            }),
        )
        .await
        .map(drop)
    }

    /// `deleteWebhook`, keeping updates not yet delivered (`getUpdates` is refused while a
    /// webhook is set).
    pub async fn delete_webhook(&self) -> Result<(), ApiError> {
        self.call("deleteWebhook", json!({"drop_pending_updates": false}))
            .await
            .map(drop)
    }

    /// `sendMessage` as plain text (no `parse_mode`: nothing in it is markup), link previews
    /// off; the new message's id.
    pub async fn send_message(
        &self,
        chat: &str,
        text: &str,
        markup: Option<&str>,
    ) -> Result<i64, ApiError> {
        let mut body = json!({
            "chat_id": chat,
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(markup) = markup.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
            body["reply_markup"] = markup;
        }
        let sent = self.call("sendMessage", body).await?;
        sent["message_id"].as_i64().ok_or(ApiError::Transport {
            method: "sendMessage",
            message: "the answer holds no message_id".into(),
        })
    }

    /// `editMessageText`: the message shows `text` and `markup` (none: no buttons).
    pub async fn edit_message_text(
        &self,
        chat: &str,
        message_id: i64,
        text: &str,
        markup: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut body = json!({
            "chat_id": chat,
            "message_id": message_id,
            "text": text,
            "link_preview_options": {"is_disabled": true},
        });
        if let Some(markup) = markup.and_then(|m| serde_json::from_str::<Value>(m).ok()) {
            body["reply_markup"] = markup;
        }
        self.call("editMessageText", body).await.map(drop)
    }

    /// `answerCallbackQuery`: the short notice a button press shows.
    pub async fn answer_callback_query(&self, id: &str, text: &str) -> Result<(), ApiError> {
        self.call(
            "answerCallbackQuery",
            json!({"callback_query_id": id, "text": text}),
        )
        .await
        .map(drop)
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
