//! Warden's Slack app: a thin adapter over [`TaskService`] (who may do what is the service's;
//! the app maps a Slack user to a [`Principal`] and renders tasks as mrkdwn).
//!
//! - **Ingress** ([`SlackApp::event`], [`SlackApp::interaction`]): the Events API and
//!   interactivity requests the API's `/webhooks/slack` routes pass on, raw. Each is checked
//!   first: the v0 signature over `v0:{timestamp}:{body}` with the signing secret, the timestamp
//!   within five minutes ([`text::verify`]). `url_verification` is echoed. An event is
//!   acknowledged within [`ACK_WITHIN`]: the work runs on its own task, and the answer waits for
//!   it at most that long. Each event is handled once: its `event_id` (a button press: its
//!   `trigger_id`) is recorded in the store with the replies, in one transaction; one recorded
//!   before (Slack retrying, `X-Slack-Retry-Num`, or a replay) is acknowledged and ignored, and
//!   a submission is idempotent (`Idempotency-Key` `slack:<event_id>`) for the retry of an event
//!   handled but not recorded.
//! - **Requests**: a mention (`app_mention`) or a direct message from an allow-listed user:
//!   `[ask] [REPO] question`, or `run|change [REPO] what to change` (published after an
//!   approval). The repository is the first word when it is a registered one, else the
//!   channel's configured default; without either the user is asked to name one.
//! - **Progress**: the task's one message in the thread of the request (`sl:task:<id>`), updated
//!   with `chat.update` as the task moves: the cited answer (citations as Warden's links), or
//!   the proposal with validations and `Hash: sha256:…`, with Approve/Reject buttons while it
//!   waits (their value the approval's short id). Only the configured approvers' presses are
//!   decided (the service also requires an admin); anyone else gets an ephemeral refusal.
//! - **Egress**: the chats' outbox ([`crate::chat`]): recorded first, marked `sending` before the
//!   request leaves, the `ts` Slack returns recorded at once, later states `chat.update`s of it.
//!
//! **Telegram's gap, closed**: a crash (or a lost answer) after Slack accepted a
//! `chat.postMessage` and before its `ts` was recorded leaves the message `sending`; before
//! sending it again, the outbox asks Slack for a copy tagged with its id in the message
//! metadata ([`Transport::find_sent`]) and adopts it (`WARDEN_FAILPOINT=slack_after_send`
//! stops the process there in crash tests).

mod api;
pub mod text;

use std::sync::{Arc, OnceLock};
use std::time::Duration;
use warden_protocol::views::TaskView as Task;

use crate::config::slack::SlackConfig;
use serde_json::{json, Value};
use tokio::sync::watch;
use warden_protocol::TaskKind;
use warden_store::{ChatMessage, Decision, NewChatMessage, Store, StoreError};

use crate::chat::render::{self, Style};
use crate::chat::{DeliveryError, Front, Transport};
use crate::tasks::{Idempotency, Principal, Role, ServiceError, Submission, TaskService};
pub use api::{message_body, ApiError, WebApi};
use text::{leading_repo, parse_request, ButtonAction, MAX_MESSAGE_UNITS};

/// The store's channel name for Slack.
pub const CHANNEL: &str = "slack";
/// The crash point between Slack accepting a message and Warden recording its `ts`.
pub const FAILPOINT_AFTER_SEND: &str = "slack_after_send";
/// The crash point after an event was handled and before it was recorded (and acknowledged).
pub const FAILPOINT_BEFORE_RECORD: &str = "slack_before_record";
/// How long a webhook's answer waits for its work (Slack gives up after three seconds).
pub const ACK_WITHIN: Duration = Duration::from_millis(2000);

/// The `event_type` of the metadata every posted message carries (its Warden id in the payload).
pub const METADATA_EVENT_TYPE: &str = "warden_message";

/// The repository picker's `action_id`; its `block_id` is this prefix and the event id.
pub const PICKER_ACTION_ID: &str = "warden_pick_repo";
pub const PICKER_BLOCK_PREFIX: &str = "warden_pick:";
/// Slack's limit on a static select's options; with more repositories the user names one.
const MAX_PICKER_OPTIONS: usize = 100;

/// The newest tasks of the author searched for a thread's task.
const THREAD_TASKS_LOOKED_AT: u32 = 100;

/// Whether a mention in a thread answered that thread's task.
enum Answered {
    Yes,
    No,
}

/// What a request still needs from the person who made it.
enum Asked {
    /// An explanation of what to write.
    Text(String),
    /// A repository, picked from these.
    Pick(Vec<String>),
}

const STYLE: Style = Style {
    escape: text::mrkdwn,
    link: text::link,
    answer_hint: |_| "(Answer by mentioning the app in this thread.)".into(),
};

/// A request to one of the webhook routes, as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// `X-Slack-Request-Timestamp`.
    pub timestamp: Option<&'a str>,
    /// `X-Slack-Signature`.
    pub signature: Option<&'a str>,
    /// `X-Slack-Retry-Num`: Slack's retry of an event it had no answer to.
    pub retry_num: Option<&'a str>,
    /// The raw body, as signed.
    pub body: &'a [u8],
}

/// What a webhook answers with 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookReply {
    /// `url_verification`: the challenge, echoed.
    Challenge(String),
    /// Received (handled, ignored as seen before, or still being handled).
    Ack,
}

/// Why a webhook request is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The signature is missing, wrong or stale (401).
    #[error("{0}")]
    Unauthorized(text::SignatureError),
    /// Signed, but not a request Warden can read (400).
    #[error("{0}")]
    Invalid(String),
}

/// The Slack app: its Web API client, the service it calls, and who may use it.
pub struct SlackApp {
    api: WebApi,
    tasks: TaskService,
    config: SlackConfig,
    secret: String,
    /// The bot's user id (`auth.test`): its mentions are removed, its own messages ignored.
    bot_user: OnceLock<String>,
}

impl SlackApp {
    pub fn new(config: SlackConfig, tasks: TaskService) -> anyhow::Result<SlackApp> {
        let secret = config.signing_secret.as_ref().ok_or_else(|| {
            anyhow::anyhow!("[slack] is configured but WARDEN_SLACK_SIGNING_SECRET is not set")
        })?;
        let token = config.bot_token.as_ref().ok_or_else(|| {
            anyhow::anyhow!("[slack] is configured but WARDEN_SLACK_BOT_TOKEN is not set")
        })?;
        let api = WebApi::new(&config.api_url, token.expose())?;
        Ok(SlackApp {
            api,
            tasks,
            secret: secret.expose().to_string(),
            config,
            bot_user: OnceLock::new(),
        })
    }

    fn verify(&self, delivery: &Delivery<'_>) -> Result<(), WebhookError> {
        text::verify(
            self.secret.as_bytes(),
            delivery.timestamp,
            delivery.signature,
            delivery.body,
            crate::chat::now_ms() / 1000,
        )
        .map_err(WebhookError::Unauthorized)
    }

    /// `POST /webhooks/slack`: an Events API request.
    pub async fn event(
        self: &Arc<Self>,
        delivery: Delivery<'_>,
    ) -> Result<WebhookReply, WebhookError> {
        self.verify(&delivery)?;
        let envelope: Value = serde_json::from_slice(delivery.body)
            .map_err(|e| WebhookError::Invalid(format!("the body is not JSON: {e}")))?;
        match envelope["type"].as_str() {
            Some("url_verification") => {
                let challenge = envelope["challenge"].as_str().ok_or_else(|| {
                    WebhookError::Invalid("url_verification without a challenge".into())
                })?;
                Ok(WebhookReply::Challenge(challenge.to_string()))
            }
            Some("event_callback") => {
                let event_id = envelope["event_id"]
                    .as_str()
                    .filter(|id| !id.is_empty() && id.len() <= 200)
                    .ok_or_else(|| WebhookError::Invalid("an event without an event_id".into()))?
                    .to_string();
                if let Some(retry) = delivery.retry_num {
                    tracing::info!(event_id, retry, "slack retried an event");
                }
                let app = Arc::clone(self);
                let work =
                    tokio::spawn(async move { app.handle_event(&event_id, &envelope).await });
                self.within_ack(work).await;
                Ok(WebhookReply::Ack)
            }
            _ => Ok(WebhookReply::Ack),
        }
    }

    /// `POST /webhooks/slack/interactions`: a button press (`payload=<JSON>`, form-encoded).
    pub async fn interaction(
        self: &Arc<Self>,
        delivery: Delivery<'_>,
    ) -> Result<WebhookReply, WebhookError> {
        self.verify(&delivery)?;
        let payload = form_field(delivery.body, "payload")
            .ok_or_else(|| WebhookError::Invalid("no payload field".into()))?;
        let payload: Value = serde_json::from_str(&payload)
            .map_err(|e| WebhookError::Invalid(format!("the payload is not JSON: {e}")))?;
        if payload["type"] != "block_actions" {
            return Ok(WebhookReply::Ack);
        }
        let app = Arc::clone(self);
        let work = tokio::spawn(async move { app.handle_press(&payload).await });
        self.within_ack(work).await;
        Ok(WebhookReply::Ack)
    }

    /// Waits for `work` at most [`ACK_WITHIN`]; it goes on after that on its own.
    async fn within_ack(&self, work: tokio::task::JoinHandle<Result<(), StoreError>>) {
        match tokio::time::timeout(ACK_WITHIN, work).await {
            Ok(Ok(Ok(()))) => {}
            Ok(Ok(Err(error))) => tracing::warn!(%error, "a slack request was not handled"),
            Ok(Err(error)) => tracing::warn!(%error, "handling a slack request failed"),
            Err(_) => tracing::info!("a slack request is acknowledged before it is handled"),
        }
    }

    fn principal(&self, user: &str) -> Option<Principal> {
        let user = self.config.users.iter().find(|u| u.id == user)?;
        Some(Principal {
            name: user.name.clone(),
            role: Role::parse(&user.role)?,
        })
    }

    /// Handles one event, unless it was handled before, and records it with its replies.
    async fn handle_event(&self, event_id: &str, envelope: &Value) -> Result<(), StoreError> {
        let key = update_key("event", event_id);
        if self.store().chat_update_seen(CHANNEL, key).await? {
            tracing::info!(event_id, "slack event seen before; ignored");
            return Ok(());
        }
        let replies = self.on_event(event_id, &envelope["event"]).await?;
        crate::publish::crash_point(FAILPOINT_BEFORE_RECORD);
        if !self
            .store()
            .record_chat_update(CHANNEL, key, replies)
            .await?
        {
            tracing::info!(event_id, "slack event recorded by another handler");
        }
        Ok(())
    }

    async fn on_event(
        &self,
        event_id: &str,
        event: &Value,
    ) -> Result<Vec<NewChatMessage>, StoreError> {
        let kind = event["type"].as_str().unwrap_or_default();
        let direct = kind == "message" && event["channel_type"] == "im";
        let bot = self.bot_user.get().map(String::as_str);
        let (Some(user), Some(channel), Some(ts)) = (
            event["user"].as_str(),
            event["channel"].as_str(),
            event["ts"].as_str(),
        ) else {
            return Ok(Vec::new());
        };
        // Only mentions and direct messages by people (not the bot, not edits or joins).
        if !(kind == "app_mention" || direct)
            || event.get("subtype").is_some()
            || event.get("bot_id").is_some()
            || Some(user) == bot
        {
            return Ok(Vec::new());
        }
        let thread = event["thread_ts"].as_str().unwrap_or(ts).to_string();
        let reply = |text: String| {
            vec![NewChatMessage {
                id: format!("sl:e:{event_id}"),
                channel: CHANNEL.into(),
                chat: channel.to_string(),
                task: None,
                text,
                markup: Some(json!({"thread_ts": thread}).to_string()),
            }]
        };
        let Some(principal) = self.principal(user) else {
            tracing::info!(event_id, user, "slack user not on the allow-list");
            return Ok(reply(format!(
                "Your Slack user id {} is not on this Warden's allow-list.",
                text::mrkdwn(user)
            )));
        };
        // A mention in the thread of a task that asked something answers it.
        if let Some(in_thread) = event["thread_ts"].as_str() {
            let said = text::addressed_text(event["text"].as_str().unwrap_or_default(), bot);
            match self
                .answer_in_thread(&principal, event_id, channel, in_thread, &said)
                .await
            {
                Ok(Answered::No) => {}
                Ok(Answered::Yes) => return Ok(Vec::new()),
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => {
                    return Ok(reply(format!(
                        "Refused: {}",
                        text::mrkdwn(&error.to_string())
                    )))
                }
            }
        }
        let request = parse_request(event["text"].as_str().unwrap_or_default(), bot);
        let outcome = self
            .submit(&principal, event_id, channel, &thread, &request)
            .await;
        Ok(match outcome {
            Ok(Ok(task)) => task_pieces(&task, channel, &thread),
            Ok(Err(Asked::Text(text))) => reply(text),
            Ok(Err(Asked::Pick(repos))) => {
                let mut asked = reply(
                    "Which repository is this about? Pick one (or start with its name next time)."
                        .into(),
                );
                let kind = match request.kind {
                    TaskKind::Change => "change",
                    _ => "question",
                };
                asked[0].markup = Some(
                    json!({
                        "thread_ts": thread,
                        "pick": {"event": event_id, "user": user, "kind": kind,
                                 "text": request.text, "repos": repos},
                    })
                    .to_string(),
                );
                asked
            }
            Err(ServiceError::Store(error)) => return Err(error),
            Err(error) => reply(format!("Refused: {}", text::mrkdwn(&error.to_string()))),
        })
    }

    /// Submits what `request` asks for; `Ok(Err(…))` asks the user for what is missing: the
    /// repository (a picker of those the user can name, when there are any) or the prompt.
    async fn submit(
        &self,
        principal: &Principal,
        event_id: &str,
        channel: &str,
        thread: &str,
        request: &text::Request,
    ) -> Result<Result<Task, Asked>, ServiceError> {
        let known: Vec<String> = self
            .tasks
            .repos(principal)
            .await?
            .into_iter()
            .map(|r| r.name)
            .collect();
        let (named, prompt) = leading_repo(&request.text, &known);
        let default = self
            .config
            .channels
            .iter()
            .find(|(id, _)| id == channel)
            .map(|(_, repo)| repo.clone());
        if prompt.trim().is_empty() {
            return Ok(Err(Asked::Text(
                "Ask a question (`ask [REPO] question`) or ask for a change (`run [REPO] what to change`).".into(),
            )));
        }
        let Some(repo) = named.or(default) else {
            if known.is_empty() || known.len() > MAX_PICKER_OPTIONS {
                return Ok(Err(Asked::Text(format!(
                    "Which repository? Start with its name: `ask REPO question` or `run REPO change`. Registered: {}",
                    text::mrkdwn(&known.join(", "))
                ))));
            }
            return Ok(Err(Asked::Pick(known)));
        };
        self.submit_to(
            principal,
            event_id,
            channel,
            thread,
            request.kind,
            &request.text,
            prompt,
            repo,
        )
        .await
        .map(Ok)
    }

    /// Submits `prompt` about `repo` for the request whose whole text was `text`, once per
    /// event (`Idempotency-Key` `slack:<event_id>`).
    #[allow(clippy::too_many_arguments)]
    async fn submit_to(
        &self,
        principal: &Principal,
        event_id: &str,
        channel: &str,
        thread: &str,
        kind: TaskKind,
        text: &str,
        prompt: &str,
        repo: String,
    ) -> Result<Task, ServiceError> {
        let body =
            json!({"channel": channel, "thread": thread, "text": text, "repo": repo}).to_string();
        let mut submission = Submission::new(kind, prompt.to_string(), vec![repo]);
        submission.metadata =
            Some(json!({"slack": {"channel": channel, "thread_ts": thread, "event_id": event_id}}));
        if kind == TaskKind::Change {
            submission.publish = Some(true);
        }
        let idempotency = Idempotency::new(format!("slack:{event_id}"), body.as_bytes());
        let submitted = self
            .tasks
            .submit(principal, submission, Some(idempotency))
            .await?;
        Ok(submitted.task)
    }

    /// A repository picked for a request that named none: submitted as the request would have
    /// been, by the person who asked only; the picker's message then says what was picked and
    /// loses its menu. The request is read back from the picker's stored message, never from
    /// the payload.
    async fn on_pick(
        &self,
        user: &str,
        channel: &str,
        action: &Value,
    ) -> Result<(Vec<NewChatMessage>, Option<String>), StoreError> {
        let event_id = action["block_id"]
            .as_str()
            .and_then(|b| b.strip_prefix(PICKER_BLOCK_PREFIX))
            .unwrap_or_default();
        let picked = action["selected_option"]["value"]
            .as_str()
            .unwrap_or_default();
        let asked = self
            .store()
            .get_chat_message(&format!("sl:e:{event_id}"))
            .await?;
        let Some(asked) = asked.filter(|m| m.channel == CHANNEL && m.chat == channel) else {
            return Ok((Vec::new(), Some("This choice is no longer open.".into())));
        };
        let stored = markup(&asked);
        let pick = &stored["pick"];
        if pick.is_null() {
            return Ok((Vec::new(), Some("This choice was made already.".into())));
        }
        if pick["user"] != user {
            return Ok((
                Vec::new(),
                Some("Refused: only the person who asked picks the repository.".into()),
            ));
        }
        let Some(principal) = self.principal(user) else {
            return Ok((
                Vec::new(),
                Some("Refused: you are not on this Warden's allow-list.".into()),
            ));
        };
        let thread = stored["thread_ts"].as_str().unwrap_or_default().to_string();
        let text = pick["text"].as_str().unwrap_or_default();
        let kind = match pick["kind"].as_str() {
            Some("change") => TaskKind::Change,
            _ => TaskKind::Question,
        };
        let offered = pick["repos"]
            .as_array()
            .is_some_and(|repos| repos.iter().any(|r| r == picked));
        if !offered {
            return Ok((
                Vec::new(),
                Some("Refused: that repository was not offered.".into()),
            ));
        }
        let submitted = self
            .submit_to(
                &principal,
                event_id,
                channel,
                &thread,
                kind,
                text,
                text,
                picked.to_string(),
            )
            .await;
        match submitted {
            Ok(task) => {
                // The picker answered: it says so, without its menu (a chat.update).
                self.store()
                    .put_chat_message(NewChatMessage {
                        id: asked.id.clone(),
                        channel: CHANNEL.into(),
                        chat: channel.to_string(),
                        task: None,
                        text: format!("Repository: *{}*", text::mrkdwn(picked)),
                        markup: Some(json!({"thread_ts": thread}).to_string()),
                    })
                    .await?;
                Ok((task_pieces(&task, channel, &thread), None))
            }
            Err(ServiceError::Store(error)) => Err(error),
            Err(error) => Ok((
                Vec::new(),
                Some(format!("Refused: {}", text::mrkdwn(&error.to_string()))),
            )),
        }
    }

    /// Answers the question of the task started in `thread` of `channel` with `said`, when that
    /// task waits for input; hands it to the agent at its next turn when the task is queued or
    /// running. A task that no longer waits but whose last message is `said` was
    /// answered by this very event before a crash (Slack retrying it): nothing more.
    async fn answer_in_thread(
        &self,
        principal: &Principal,
        event_id: &str,
        channel: &str,
        thread: &str,
        said: &str,
    ) -> Result<Answered, ServiceError> {
        let listed = self
            .tasks
            .list(
                principal,
                crate::tasks::TaskListing {
                    status: None,
                    before: None,
                    limit: THREAD_TASKS_LOOKED_AT,
                },
            )
            .await?;
        let Some(task) = listed.tasks.into_iter().find(|t| {
            t.metadata["slack"]["channel"] == channel && t.metadata["slack"]["thread_ts"] == thread
        }) else {
            return Ok(Answered::No);
        };
        if task.status == warden_protocol::TaskStatus::WaitingInput {
            self.tasks.answer(principal, task.id.as_str(), said).await?;
            return Ok(Answered::Yes);
        }
        let messages = self.tasks.messages(principal, task.id.as_str()).await?;
        // A task this very event started (Slack retrying it after a crash) is not told its own
        // request.
        if crate::tasks::steerable(&task) && task.metadata["slack"]["event_id"] != event_id {
            // Said to the running task: its agent reads it at its next turn (once, even when
            // Slack delivers the event again after a crash).
            self.tasks.steer_once(principal, &task, said).await?;
            return Ok(Answered::Yes);
        }
        let answered_before = messages
            .iter()
            .rev()
            .find(|m| m.role == warden_store::MESSAGE_USER)
            .is_some_and(|m| m.text == said.trim());
        Ok(if answered_before {
            Answered::Yes
        } else {
            Answered::No
        })
    }

    /// Whether Slack user `user` may decide approvals: listed in `approvers`, or a member of
    /// one of `approver_groups` (asked of Slack at each press, so a removal takes effect at
    /// once). The service still requires the user's principal to be an admin.
    async fn is_approver(&self, user: &str) -> Result<bool, ApiError> {
        if self.config.approvers.iter().any(|a| a == user) {
            return Ok(true);
        }
        for group in &self.config.approver_groups {
            if self
                .api
                .usergroup_members(group)
                .await?
                .iter()
                .any(|member| member == user)
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A button press: decides the approval its value names, with the hash that approval is
    /// bound to, in the presser's name, if the presser is an approver; an ephemeral notice
    /// either way. Recorded by `trigger_id`, so a replayed press does nothing.
    async fn handle_press(&self, payload: &Value) -> Result<(), StoreError> {
        let Some(trigger) = payload["trigger_id"].as_str() else {
            return Ok(());
        };
        let key = update_key("interaction", trigger);
        if self.store().chat_update_seen(CHANNEL, key).await? {
            tracing::info!(trigger, "slack button press seen before; ignored");
            return Ok(());
        }
        let user = payload["user"]["id"].as_str().unwrap_or_default();
        let channel = payload["channel"]["id"]
            .as_str()
            .or_else(|| payload["container"]["channel_id"].as_str())
            .unwrap_or_default();
        let action = &payload["actions"][0];
        if action["action_id"] == PICKER_ACTION_ID {
            let (mut replies, notice) = self.on_pick(user, channel, action).await?;
            let thread = payload["message"]["thread_ts"]
                .as_str()
                .or_else(|| payload["container"]["thread_ts"].as_str());
            if let Some(text) = notice.filter(|_| !user.is_empty() && !channel.is_empty()) {
                replies.push(NewChatMessage {
                    id: format!("sl:i:{trigger}"),
                    channel: CHANNEL.into(),
                    chat: channel.to_string(),
                    task: None,
                    text,
                    markup: Some(json!({"thread_ts": thread, "ephemeral_user": user}).to_string()),
                });
            }
            self.store()
                .record_chat_update(CHANNEL, key, replies)
                .await?;
            return Ok(());
        }
        let pressed =
            ButtonAction::from_action_id(action["action_id"].as_str().unwrap_or_default());
        let approval = action["value"].as_str().and_then(text::button_value);
        let approver = match (pressed, &approval) {
            (Some(_), Some(_)) => self.is_approver(user).await,
            _ => Ok(false),
        };
        let notice = match (pressed, approval) {
            (None, _) | (_, None) => None,
            (Some(_), Some(_)) if approver.is_err() => Some(format!(
                "Not decided: Slack could not say who is in the approvers' user groups ({}); press again later.",
                text::mrkdwn(&approver.as_ref().err().map(ToString::to_string).unwrap_or_default())
            )),
            (Some(_), Some(_)) if approver.as_ref().is_ok_and(|a| !a) => Some(
                "Refused: you are not one of this Warden's approvers; nothing was decided."
                    .to_string(),
            ),
            (Some(pressed), Some(approval)) => Some(match self.principal(user) {
                None => "Refused: you are not on this Warden's allow-list.".to_string(),
                Some(principal) => match crate::chat::decide_pressed(
                    &self.tasks,
                    &principal,
                    &approval,
                    match pressed {
                        ButtonAction::Approve => Decision::Approve,
                        ButtonAction::Reject => Decision::Reject,
                    },
                    usize::MAX,
                )
                .await
                {
                    Ok(text) => text,
                    Err(ServiceError::Store(error)) => return Err(error),
                    Err(error) => format!("Refused: {}", text::mrkdwn(&error.to_string())),
                },
            }),
        };
        let thread = payload["message"]["thread_ts"]
            .as_str()
            .or_else(|| payload["container"]["thread_ts"].as_str());
        let replies = match notice {
            Some(text) if !user.is_empty() && !channel.is_empty() => vec![NewChatMessage {
                id: format!("sl:i:{trigger}"),
                channel: CHANNEL.into(),
                chat: channel.to_string(),
                task: None,
                text,
                markup: Some(json!({"thread_ts": thread, "ephemeral_user": user}).to_string()),
            }],
            _ => Vec::new(),
        };
        self.store()
            .record_chat_update(CHANNEL, key, replies)
            .await?;
        Ok(())
    }
}

impl Front for SlackApp {
    const CHANNEL: &'static str = CHANNEL;

    fn store(&self) -> &Arc<dyn Store> {
        self.tasks.store()
    }

    fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    /// Puts the message of a task started from Slack in its current state: buttons while its
    /// approval waits (only approvers' presses count).
    async fn show(&self, task: &Task) -> Result<(), StoreError> {
        let slack = &task.metadata["slack"];
        let (Some(channel), Some(thread)) =
            (slack["channel"].as_str(), slack["thread_ts"].as_str())
        else {
            return Ok(());
        };
        for message in task_pieces(task, channel, thread) {
            self.store().put_chat_message(message).await?;
        }
        Ok(())
    }

    async fn deliver_due(&self) -> Result<usize, StoreError> {
        crate::chat::deliver_due(self.store(), CHANNEL, &self.api, FAILPOINT_AFTER_SEND).await
    }
}

/// A task's message(s) in `thread` of `channel`, the buttons on the last while its approval
/// waits.
fn task_pieces(task: &Task, channel: &str, thread: &str) -> Vec<NewChatMessage> {
    let (text, approval) = render::task_message(task, true, STYLE);
    let mut pieces = crate::chat::pieces(
        CHANNEL,
        MAX_MESSAGE_UNITS,
        &format!("sl:task:{}", task.id),
        channel,
        Some(task),
        &text,
        Some(json!({"thread_ts": thread, "approval": approval}).to_string()),
    );
    // Every piece goes to the thread; only the last carries the buttons.
    let last = pieces.len() - 1;
    for piece in &mut pieces[..last] {
        piece.markup = Some(json!({"thread_ts": thread}).to_string());
    }
    pieces
}

/// The repository picker under a request that named none: a static select of the repositories
/// offered, its `block_id` naming the event the request came in.
fn picker_block(pick: &Value) -> Value {
    let options: Vec<Value> = pick["repos"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .take(MAX_PICKER_OPTIONS)
        .map(|repo| {
            json!({
                "text": {"type": "plain_text", "text": repo.chars().take(75).collect::<String>()},
                "value": repo,
            })
        })
        .collect();
    json!({
        "type": "actions",
        "block_id": format!("{PICKER_BLOCK_PREFIX}{}", pick["event"].as_str().unwrap_or_default()),
        "elements": [{
            "type": "static_select",
            "action_id": PICKER_ACTION_ID,
            "placeholder": {"type": "plain_text", "text": "Repository"},
            "options": options,
        }],
    })
}

/// What a message's stored markup says: its thread, the approval its buttons decide, the
/// user an ephemeral message is shown to, and a repository picker's request.
fn markup(message: &ChatMessage) -> Value {
    message
        .markup
        .as_deref()
        .and_then(|m| serde_json::from_str(m).ok())
        .unwrap_or(Value::Null)
}

impl Transport for WebApi {
    type Error = ApiError;

    /// Posts `message`, tagged with its id in the message's metadata so that a copy whose `ts`
    /// was never recorded can be found ([`Transport::find_sent`]).
    async fn send(&self, message: &ChatMessage) -> Result<String, ApiError> {
        let markup = markup(message);
        let thread = markup["thread_ts"].as_str();
        if let Some(user) = markup["ephemeral_user"].as_str() {
            return self
                .post_ephemeral(&message.chat, user, &message.text, thread)
                .await;
        }
        let mut body = message_body(&message.chat, &message.text, markup["approval"].as_str());
        if markup["pick"].is_object() {
            if let Some(blocks) = body["blocks"].as_array_mut() {
                blocks.push(picker_block(&markup["pick"]));
            }
        }
        if let Some(thread) = thread {
            body["thread_ts"] = json!(thread);
        }
        body["metadata"] = json!({
            "event_type": METADATA_EVENT_TYPE,
            "event_payload": {"id": message.id},
        });
        self.post(body).await
    }

    /// The message in its thread (or the channel's newest) whose metadata carries its id: a
    /// copy Slack accepted before `serve` could record its `ts`. An ephemeral message cannot be
    /// looked up (it is sent again).
    async fn find_sent(&self, message: &ChatMessage) -> Result<Option<String>, ApiError> {
        let markup = markup(message);
        if markup["ephemeral_user"].is_string() {
            return Ok(None);
        }
        self.find_posted(
            &message.chat,
            markup["thread_ts"].as_str(),
            METADATA_EVENT_TYPE,
            &message.id,
        )
        .await
    }

    async fn edit(&self, message: &ChatMessage, sent: &str) -> Result<(), ApiError> {
        let markup = markup(message);
        if markup["ephemeral_user"].is_string() {
            // An ephemeral message cannot be edited; it is sent once.
            return Ok(());
        }
        self.update(
            &message.chat,
            sent,
            &message.text,
            markup["approval"].as_str(),
        )
        .await
    }
}

impl DeliveryError for ApiError {
    fn is_retryable(&self) -> bool {
        ApiError::is_retryable(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        ApiError::retry_after(self)
    }

    fn is_not_modified(&self) -> bool {
        false
    }
}

/// The store keys chat updates by a number; Slack's ids are strings. The key of `id` is the
/// first 63 bits of SHA-256(`slack:{kind}:{id}`): two distinct ids share a key with a
/// probability of about n²/2⁶⁴ over n events (under 10⁻⁷ for a million), and a shared key
/// would make the later event look seen (ignored, never doubled).
pub fn update_key(kind: &str, id: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(format!("slack:{kind}:{id}").as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first) & i64::MAX
}

/// The value of `name` in a form-encoded body.
fn form_field(body: &[u8], name: &str) -> Option<String> {
    let body = std::str::from_utf8(body).ok()?;
    let url = reqwest::Url::parse(&format!("http://form.invalid/?{body}")).ok()?;
    url.query_pairs()
        .find(|(key, _)| key == name)
        .map(|(_, value)| value.into_owned())
}

/// Starts the app's delivery when `[slack]` is configured (`warden serve`): checks the token
/// (`auth.test`), then follows tasks and delivers until `stop`. The webhooks are served by the
/// API with the returned app. A token Slack refuses is reported on stderr, in the log and to
/// the other chats' alerts ([`crate::chat::Alerts`]; it cannot be reported through Slack) and
/// the app is not served; the rest of `serve` goes on.
/// Where other interfaces' start-up failures go on Slack: `[slack] alerts_channel`.
pub fn alert_destinations(config: Option<&SlackConfig>) -> Vec<crate::chat::alert::Destination> {
    config
        .and_then(|s| s.alerts_channel.clone())
        .map(|channel| crate::chat::alert::Destination {
            channel: CHANNEL,
            chat: channel,
            format: |what| format!(":warning: *Warden:* {}", text::mrkdwn(what)),
        })
        .into_iter()
        .collect()
}

pub fn spawn(
    config: Option<&SlackConfig>,
    tasks: TaskService,
    alerts: crate::chat::Alerts,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<(Arc<SlackApp>, tokio::task::JoinHandle<()>)>> {
    let Some(config) = config else {
        return Ok(None);
    };
    let app = Arc::new(SlackApp::new(config.clone(), tasks)?);
    let handle = tokio::spawn(run(Arc::clone(&app), alerts, stop));
    Ok(Some((app, handle)))
}

/// `auth.test` with the configured bot token, once (`warden doctor`): the bot user, or what
/// Slack (or the network) said.
pub async fn check_online(config: &SlackConfig) -> Result<String, String> {
    let token = config
        .bot_token
        .as_ref()
        .ok_or("WARDEN_SLACK_BOT_TOKEN is not set")?;
    let api = api::WebApi::new(&config.api_url, token.expose()).map_err(|e| format!("{e:#}"))?;
    let user = api.auth_test().await.map_err(|error| error.to_string())?;
    Ok(format!("auth.test: the bot user is {user}"))
}

async fn run(app: Arc<SlackApp>, alerts: crate::chat::Alerts, mut stop: watch::Receiver<bool>) {
    loop {
        match app.api.auth_test().await {
            Ok(user) => {
                tracing::info!(bot = %user, "slack app serving");
                crate::say!("warden: slack app (bot user {user}) is serving /webhooks/slack");
                let _ = app.bot_user.set(user);
                break;
            }
            Err(error) if error.is_bad_token() => {
                tracing::error!(%error, "slack refused the bot token; the app is not served");
                crate::say!(
                    "warden: slack refused WARDEN_SLACK_BOT_TOKEN ({error}); the Slack app is not served"
                );
                alerts
                    .report(
                        CHANNEL,
                        &format!(
                            "the Slack app is not served: slack refused WARDEN_SLACK_BOT_TOKEN ({error}). Fix it and restart `warden serve`."
                        ),
                    )
                    .await;
                return;
            }
            Err(error) => tracing::warn!(%error, "slack unreachable; retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    crate::chat::delivery_loop(app, stop).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_ids_map_to_distinct_non_negative_keys() {
        let a = update_key("event", "Ev0PV52K21");
        assert!(a >= 0);
        assert_eq!(a, update_key("event", "Ev0PV52K21"));
        assert_ne!(a, update_key("event", "Ev0PV52K22"));
        assert_ne!(a, update_key("interaction", "Ev0PV52K21"));
    }

    #[test]
    fn form_fields_are_decoded() {
        let body = b"payload=%7B%22type%22%3A%22block_actions%22%2C%22a%22%3A%22x+y%22%7D&other=1";
        assert_eq!(
            form_field(body, "payload").as_deref(),
            Some(r#"{"type":"block_actions","a":"x y"}"#)
        );
        assert_eq!(form_field(body, "missing"), None);
        assert_eq!(form_field(&[0xff, 0xfe], "payload"), None);
    }
}
