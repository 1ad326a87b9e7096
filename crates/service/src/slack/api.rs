//! Slack's Web API (`{api_url}/<method>`, JSON bodies with the bot token as a bearer, replies
//! `{"ok": true, …}` or `{"ok": false, "error": "…"}`; a rate limit is HTTP 429 with
//! `Retry-After`): `auth.test`, `chat.postMessage`, `chat.update` and `chat.postEphemeral`,
//! and the blocks of a message (its text as sections, the Approve/Reject buttons).

use std::time::Duration;

use serde_json::{json, Value};

use super::text::{button_value, ButtonAction};

/// Why a Web API call failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// Slack answered `ok: false` (or a non-2xx status) with this error.
    #[error("slack refused {method}: {error} (HTTP {status})")]
    Refused {
        method: &'static str,
        status: u16,
        error: String,
        /// `Retry-After` of a 429, in seconds.
        retry_after: Option<u64>,
    },
    /// No usable answer: connection, timeout or an unreadable body. Whether Slack acted is
    /// unknown.
    #[error("slack {method} failed: {message}")]
    Transport {
        method: &'static str,
        message: String,
    },
}

/// Errors Slack documents as temporary.
const RETRYABLE: &[&str] = &[
    "ratelimited",
    "rate_limited",
    "internal_error",
    "fatal_error",
    "service_unavailable",
    "request_timeout",
];

impl ApiError {
    /// Whether trying again later can succeed: transport failures, 429, 5xx and Slack's
    /// temporary errors.
    pub fn is_retryable(&self) -> bool {
        match self {
            ApiError::Refused { status, error, .. } => {
                *status == 429 || *status >= 500 || RETRYABLE.contains(&error.as_str())
            }
            ApiError::Transport { .. } => true,
        }
    }

    /// The token is refused: nothing works until it is fixed.
    pub fn is_bad_token(&self) -> bool {
        matches!(self, ApiError::Refused { error, .. }
            if matches!(error.as_str(), "invalid_auth" | "not_authed" | "account_inactive" | "token_revoked" | "token_expired"))
    }

    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            ApiError::Refused { retry_after, .. } => retry_after.map(Duration::from_secs),
            ApiError::Transport { .. } => None,
        }
    }
}

/// The client of one app.
pub struct WebApi {
    http: reqwest::Client,
    base: String,
    token: String,
    /// The bot's own user id, once `auth.test` said it: only its messages are ever adopted.
    me: std::sync::OnceLock<String>,
}

impl WebApi {
    pub fn new(api_url: &str, token: &str) -> anyhow::Result<WebApi> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("warden-slack/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(WebApi {
            http,
            base: api_url.trim_end_matches('/').to_string(),
            token: token.to_string(),
            me: std::sync::OnceLock::new(),
        })
    }

    /// A write method, with a JSON body.
    async fn call(&self, method: &'static str, body: Value) -> Result<Value, ApiError> {
        self.send(method, "application/json; charset=utf-8", body.to_string())
            .await
    }

    /// A read method: Slack takes only form-encoded arguments for these.
    async fn call_form(
        &self,
        method: &'static str,
        fields: &[(&str, &str)],
    ) -> Result<Value, ApiError> {
        let body = reqwest::Url::parse_with_params("x:", fields)
            .ok()
            .and_then(|url| url.query().map(str::to_string))
            .unwrap_or_default();
        self.send(method, "application/x-www-form-urlencoded", body)
            .await
    }

    async fn send(
        &self,
        method: &'static str,
        content_type: &'static str,
        body: String,
    ) -> Result<Value, ApiError> {
        let transport = |e: reqwest::Error| ApiError::Transport {
            method,
            message: e.without_url().to_string(),
        };
        let response = self
            .http
            .post(format!("{}/{method}", self.base))
            .bearer_auth(&self.token)
            .header(reqwest::header::CONTENT_TYPE, content_type)
            .body(body)
            .send()
            .await
            .map_err(transport)?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok());
        let bytes = response.bytes().await.map_err(transport)?;
        let reply: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if reply["ok"] == json!(true) && (200..300).contains(&status) {
            return Ok(reply);
        }
        if reply.is_null() && (200..300).contains(&status) {
            return Err(ApiError::Transport {
                method,
                message: format!("unreadable answer (HTTP {status})"),
            });
        }
        Err(ApiError::Refused {
            method,
            status,
            error: reply["error"]
                .as_str()
                .unwrap_or(if status == 429 {
                    "ratelimited"
                } else {
                    "no error given"
                })
                .chars()
                .take(200)
                .collect(),
            retry_after,
        })
    }

    /// `auth.test`: checks the token; the bot's user id (remembered).
    pub async fn auth_test(&self) -> Result<String, ApiError> {
        let me = self.call("auth.test", json!({})).await?;
        let user = me["user_id"].as_str().unwrap_or_default().to_string();
        if !user.is_empty() {
            let _ = self.me.set(user.clone());
        }
        Ok(user)
    }

    /// The `ts` of the bot's own message in `thread` (`conversations.replies`), or among the
    /// channel's newest (`conversations.history`), whose metadata is `event_type` with `id` in
    /// its payload (scopes `channels:history`, `groups:history`, `im:history`); only the newest
    /// 200 are looked at. Another app's message with the same metadata is never adopted; before
    /// `auth.test` answered, nothing is.
    pub async fn find_posted(
        &self,
        channel: &str,
        thread: Option<&str>,
        event_type: &str,
        id: &str,
    ) -> Result<Option<String>, ApiError> {
        let Some(me) = self.me.get() else {
            return Ok(None);
        };
        let listed = match thread {
            Some(thread) => {
                self.call_form(
                    "conversations.replies",
                    &[
                        ("channel", channel),
                        ("ts", thread),
                        ("include_all_metadata", "true"),
                        ("limit", "200"),
                    ],
                )
                .await?
            }
            None => {
                self.call_form(
                    "conversations.history",
                    &[
                        ("channel", channel),
                        ("include_all_metadata", "true"),
                        ("limit", "200"),
                    ],
                )
                .await?
            }
        };
        Ok(listed["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|m| {
                m["user"] == me.as_str()
                    && m["metadata"]["event_type"] == event_type
                    && m["metadata"]["event_payload"]["id"] == id
            })
            .and_then(|m| m["ts"].as_str())
            .map(str::to_string))
    }

    /// `usergroups.users.list`: the user ids in user group `group` (scope `usergroups:read`).
    pub async fn usergroup_members(&self, group: &str) -> Result<Vec<String>, ApiError> {
        let listed = self
            .call_form("usergroups.users.list", &[("usergroup", group)])
            .await?;
        Ok(listed["users"]
            .as_array()
            .map(|users| {
                users
                    .iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `chat.postMessage` of a prepared `body` (see [`message_body`]); the new message's `ts`.
    pub async fn post(&self, body: Value) -> Result<String, ApiError> {
        let sent = self.call("chat.postMessage", body).await?;
        sent["ts"]
            .as_str()
            .map(str::to_string)
            .ok_or(ApiError::Transport {
                method: "chat.postMessage",
                message: "the answer holds no ts".into(),
            })
    }

    /// `chat.update`: the message `ts` shows `text` (and the buttons deciding `approval`).
    pub async fn update(
        &self,
        channel: &str,
        ts: &str,
        text: &str,
        approval: Option<&str>,
    ) -> Result<(), ApiError> {
        let mut body = message_body(channel, text, approval);
        body["ts"] = json!(ts);
        self.call("chat.update", body).await.map(drop)
    }

    /// `chat.postEphemeral`: `text` shown only to `user`; its `message_ts`.
    pub async fn post_ephemeral(
        &self,
        channel: &str,
        user: &str,
        text: &str,
        thread_ts: Option<&str>,
    ) -> Result<String, ApiError> {
        let mut body = json!({"channel": channel, "user": user, "text": text});
        if let Some(thread) = thread_ts {
            body["thread_ts"] = json!(thread);
        }
        let sent = self.call("chat.postEphemeral", body).await?;
        Ok(sent["message_ts"].as_str().unwrap_or_default().to_string())
    }
}

/// A message's body: `text` (already mrkdwn) as the notification text and as a section block,
/// and the Approve/Reject buttons deciding `approval` (its short id as their value).
pub fn message_body(channel: &str, text: &str, approval: Option<&str>) -> Value {
    let mut blocks = vec![json!({
        "type": "section",
        "text": {"type": "mrkdwn", "text": text},
    })];
    if let Some(value) = approval.and_then(button_value) {
        blocks.push(json!({
            "type": "actions",
            "block_id": "warden_approval",
            "elements": [
                {"type": "button", "style": "primary", "action_id": ButtonAction::Approve.action_id(),
                 "text": {"type": "plain_text", "text": "Approve"}, "value": value},
                {"type": "button", "style": "danger", "action_id": ButtonAction::Reject.action_id(),
                 "text": {"type": "plain_text", "text": "Reject"}, "value": value},
            ],
        }));
    }
    json!({
        "channel": channel,
        "text": text,
        "blocks": blocks,
        "unfurl_links": false,
        "unfurl_media": false,
    })
}
