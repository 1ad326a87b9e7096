//! Warden's Telegram bot: a thin adapter over [`TaskService`] (who may do what to which task is
//! the service's; the bot maps a Telegram user to a [`Principal`] and renders answers).
//!
//! - **Ingress** ([`Bot::poll_once`]): long polling with `getUpdates` (no open port). Only
//!   allow-listed numeric user ids in private chats are served; group chats are ignored and
//!   other users told their id is not on the list. Each update is handled, then recorded with
//!   its reply in one store transaction (`record_chat_update`), which also stores the polling
//!   offset; a recorded `update_id` is never handled again (a replay does nothing) and a crash
//!   before the record re-reads the update (Telegram keeps what the offset did not
//!   acknowledge): its submission is idempotent (`Idempotency-Key` `telegram:<update_id>`).
//! - **Commands**: `/ask repo question`, `/run repo task` (a change published after an
//!   approval), `/status [task]`, `/tasks`, `/answer task text`, `/cancel task`, `/retry task`,
//!   `/usage`, `/repos`.
//! - **Progress** ([`crate::chat::follow`]): the task's message (`tg:task:<id>`, in the chat the task's
//!   metadata names) is edited as the task's status events arrive: status, the cited answer,
//!   the proposal with validations and hash, and for an admin the Approve/Reject buttons
//!   (`callback_data` `a:<approval id>` / `r:<approval id>`, the hash in the text). Admins get
//!   their own message for an approval of someone else's task. A press calls
//!   [`TaskService::decide`] with the hash that approval is bound to.
//! - **Egress** ([`crate::chat::deliver_due`]): every message goes through the store's chat outbox:
//!   recorded first, sent (`sendMessage`), its returned `message_id` recorded, later states
//!   edited in place (`editMessageText`). Refusals are retried with backoff (`retry_after` of
//!   a 429 honoured); text past 4,096 UTF-16 units is split into numbered follow-on messages.
//!
//! **Exactly once, and the one gap.** A message is recorded before anything is sent and marked
//! `sending` (durably) before the request leaves; the returned id is recorded right after.
//! Edits are idempotent (editing to the same text is a no-op). A crash — or a transport error —
//! after Telegram accepted a `sendMessage` and before Warden recorded its id is the one window
//! Telegram's API cannot close (there is no way to ask it whether a message was sent): the
//! message is sent again, so it can appear twice. Everywhere else nothing is doubled or lost.
//! The window is a single local database write wide; `WARDEN_FAILPOINT=telegram_after_send`
//! stops the process inside it in crash tests.

mod api;
mod text;

use std::sync::Arc;
use std::time::Duration;
use warden_protocol::views::TaskView as Task;

use crate::config::telegram::{Ingress, TelegramConfig};
use serde_json::{json, Value};
use tokio::sync::watch;
use warden_protocol::TaskKind;
use warden_store::{ChatMessage, Decision, NewChatMessage, Store, StoreError};

use crate::chat::render::{self, Style};
use crate::chat::text::inert;
use crate::chat::{now_ms, DeliveryError, Front, Transport};

use crate::tasks::{
    Idempotency, Principal, Role, ServiceError, Submission, TaskListing, TaskService,
};
pub use api::{ApiError, BotApi};
pub use text::{
    callback_data, parse_callback_data, parse_command, ButtonAction, Command,
    MAX_CALLBACK_DATA_BYTES, MAX_MESSAGE_UNITS,
};

/// The store's channel name for Telegram.
pub const CHANNEL: &str = "telegram";
/// The crash point between Telegram accepting a message and Warden recording its id.
pub const FAILPOINT_AFTER_SEND: &str = "telegram_after_send";
/// The crash point after an update was handled and before it was recorded.
pub const FAILPOINT_BEFORE_RECORD: &str = "telegram_before_record";

const LIST_LIMIT: u32 = 10;

/// Plain text: nothing is markup, links Warden built are shown as they are.
/// Telegram answers a task's question with `/answer`.
fn telegram_answer_hint(task: &str) -> String {
    format!("(Answer with /answer {task} YOUR ANSWER)")
}

const STYLE: Style = Style {
    escape: inert,
    link: str::to_string,
    answer_hint: telegram_answer_hint,
};

/// Why a webhook delivery was not taken.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The bot polls (or is not configured): there is no webhook.
    #[error("the Telegram bot is not configured for webhooks ([telegram] webhook_url)")]
    NotServed,
    /// The secret token header is missing or wrong.
    #[error("missing or wrong X-Telegram-Bot-Api-Secret-Token")]
    Unauthorized,
    /// Authenticated, but not an update.
    #[error("{0}")]
    Invalid(String),
    /// The store failed; Telegram delivers the update again.
    #[error("the update could not be recorded: {0}")]
    Store(StoreError),
}

/// `getMe` with the configured token, once (`warden doctor`): the bot's username, or what
/// Telegram (or the network) said.
pub async fn check_online(config: &TelegramConfig) -> Result<String, String> {
    let token = config
        .token
        .as_ref()
        .ok_or("WARDEN_TELEGRAM_TOKEN is not set")?;
    let api = BotApi::new(&config.api_url, token.expose(), config.poll_timeout)
        .map_err(|error| format!("{error:#}"))?;
    let name = api.get_me().await.map_err(|error| error.to_string())?;
    Ok(format!("getMe: the bot is @{name}"))
}

/// One bot: its API client, the service it calls, and who may use it.
pub struct Bot {
    api: BotApi,
    tasks: TaskService,
    config: TelegramConfig,
}

impl Bot {
    pub fn new(config: TelegramConfig, tasks: TaskService) -> anyhow::Result<Bot> {
        let token = config.token.as_ref().ok_or_else(|| {
            anyhow::anyhow!("[telegram] is configured but WARDEN_TELEGRAM_TOKEN is not set")
        })?;
        let api = BotApi::new(&config.api_url, token.expose(), config.poll_timeout)?;
        Ok(Bot { api, tasks, config })
    }

    /// The principal of allow-listed user `id`.
    fn principal(&self, id: i64) -> Option<Principal> {
        let user = self.config.users.iter().find(|u| u.id == id)?;
        Some(Principal {
            name: user.name.clone(),
            role: Role::parse(&user.role)?,
        })
    }

    /// Whether the Telegram user acting as `owner` is an admin (they get the buttons).
    fn owner_is_admin(&self, owner: &str) -> bool {
        self.config
            .users
            .iter()
            .any(|u| u.name == owner && u.role == "admin")
    }

    /// One `getUpdates` from the stored offset, each update handled and recorded in order.
    pub async fn poll_once(&self) -> Result<usize, anyhow::Error> {
        let offset = self.store().chat_offset(CHANNEL).await?;
        let updates = self
            .api
            .get_updates(offset, self.config.poll_timeout)
            .await?;
        let count = updates.len();
        for raw in updates {
            self.handle_raw(raw).await?;
        }
        Ok(count)
    }

    /// One update as Telegram sent it (polled or POSTed to the webhook): handled and recorded
    /// unless it was before; one without an `update_id` or unreadable is ignored (and, with
    /// an id, recorded so it is not read again).
    pub async fn handle_raw(&self, raw: Value) -> Result<(), StoreError> {
        let Some(update_id) = raw["update_id"].as_i64() else {
            tracing::warn!("telegram update without an update_id ignored");
            return Ok(());
        };
        match serde_json::from_value::<api::Update>(raw) {
            Ok(update) => self.handle(update).await,
            Err(error) => {
                tracing::warn!(update_id, %error, "unreadable telegram update ignored");
                self.store()
                    .record_chat_update(CHANNEL, update_id, Vec::new())
                    .await
                    .map(drop)
            }
        }
    }

    /// A webhook delivery (`POST /webhooks/telegram`): refused unless the bot is in webhook
    /// mode and `secret` (`X-Telegram-Bot-Api-Secret-Token`) is the configured one (compared
    /// in constant time); otherwise handled like a polled update. An error leaves the update
    /// unrecorded: the non-2xx answer makes Telegram deliver it again.
    pub async fn webhook(&self, secret: Option<&str>, body: &[u8]) -> Result<(), WebhookError> {
        let Ingress::Webhook {
            secret: expected, ..
        } = &self.config.ingress
        else {
            return Err(WebhookError::NotServed);
        };
        // Digests of equal length, compared without an early exit: the time taken says
        // nothing about how much of the secret matched.
        let presented = crate::access::digest(secret.unwrap_or_default());
        let expected = crate::access::digest(expected.expose());
        let differ = presented
            .iter()
            .zip(expected.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if differ != 0 {
            return Err(WebhookError::Unauthorized);
        }
        let raw: Value = serde_json::from_slice(body)
            .map_err(|e| WebhookError::Invalid(format!("the update is not JSON: {e}")))?;
        if !raw.is_object() {
            return Err(WebhookError::Invalid(
                "the update is not a JSON object".into(),
            ));
        }
        self.handle_raw(raw).await.map_err(WebhookError::Store)
    }

    /// Handles one update, unless it was handled before, and records it with its reply.
    async fn handle(&self, update: api::Update) -> Result<(), StoreError> {
        let update_id = update.update_id;
        if self.seen(update_id).await? {
            tracing::info!(update_id, "telegram update seen before; ignored");
            // Still moves the offset past it.
            self.store()
                .record_chat_update(CHANNEL, update_id, Vec::new())
                .await?;
            return Ok(());
        }
        let replies = if let Some(message) = update.message {
            self.on_message(update_id, message).await?
        } else if let Some(press) = update.callback_query {
            self.on_press(press).await?;
            Vec::new()
        } else {
            Vec::new()
        };
        crate::publish::crash_point(FAILPOINT_BEFORE_RECORD);
        let new = self
            .store()
            .record_chat_update(CHANNEL, update_id, replies)
            .await?;
        if !new {
            tracing::info!(update_id, "telegram update recorded by another handler");
        }
        Ok(())
    }

    /// Whether `update_id` was recorded before.
    async fn seen(&self, update_id: i64) -> Result<bool, StoreError> {
        self.store().chat_update_seen(CHANNEL, update_id).await
    }

    async fn on_message(
        &self,
        update_id: i64,
        message: api::Message,
    ) -> Result<Vec<NewChatMessage>, StoreError> {
        let chat = message.chat.id.to_string();
        if message.chat.kind != "private" {
            tracing::info!(update_id, chat = %chat, kind = %message.chat.kind, "telegram message outside a private chat ignored");
            return Ok(Vec::new());
        }
        let Some(from) = message.from else {
            return Ok(Vec::new());
        };
        let reply = |text: String| NewChatMessage {
            id: format!("tg:u:{update_id}"),
            channel: CHANNEL.into(),
            chat: chat.clone(),
            task: None,
            text,
            markup: None,
        };
        let Some(principal) = self.principal(from.id) else {
            tracing::info!(
                update_id,
                user = from.id,
                "telegram user not on the allow-list"
            );
            return Ok(vec![reply(format!(
                "Your Telegram user id {} is not on this Warden's allow-list.",
                from.id
            ))]);
        };
        let command = parse_command(message.text.as_deref().unwrap_or(""));
        let outcome = self
            .run_command(&principal, &chat, update_id, &message.text, command)
            .await;
        Ok(match outcome {
            Ok(Reply::Text(text)) => pieces(&format!("tg:u:{update_id}"), &chat, None, &text, None),
            Ok(Reply::Task(task)) => {
                let (text, approval) =
                    render::task_message(&task, self.owner_is_admin(&task.owner), STYLE);
                pieces(
                    &task_message_id(&task),
                    &chat,
                    Some(&task),
                    &text,
                    approval_buttons(approval),
                )
            }
            Err(ServiceError::Store(error)) => return Err(error),
            Err(error) => vec![reply(format!("Refused: {}", inert(&error.to_string())))],
        })
    }

    async fn run_command(
        &self,
        principal: &Principal,
        chat: &str,
        update_id: i64,
        text: &Option<String>,
        command: Command,
    ) -> Result<Reply, ServiceError> {
        let tasks = &self.tasks;
        match command {
            Command::Ask { repo, question } => {
                self.submit(
                    principal,
                    chat,
                    update_id,
                    text,
                    TaskKind::Question,
                    repo,
                    question,
                )
                .await
            }
            Command::Run { repo, request } => {
                self.submit(
                    principal,
                    chat,
                    update_id,
                    text,
                    TaskKind::Change,
                    repo,
                    request,
                )
                .await
            }
            Command::Status { task: Some(id) } => Ok(Reply::Text(
                render::task_message(&tasks.task(principal, &id).await?, false, STYLE).0,
            )),
            Command::Status { task: None } => {
                let latest = tasks
                    .list(
                        principal,
                        TaskListing {
                            status: None,
                            before: None,
                            limit: 1,
                        },
                    )
                    .await?;
                match latest.tasks.into_iter().next() {
                    Some(task) => Ok(Reply::Text(render::task_message(&task, false, STYLE).0)),
                    None => Ok(Reply::Text("No tasks yet.".into())),
                }
            }
            Command::Tasks => {
                let page = tasks
                    .list(
                        principal,
                        TaskListing {
                            status: None,
                            before: None,
                            limit: LIST_LIMIT,
                        },
                    )
                    .await?;
                if page.tasks.is_empty() {
                    return Ok(Reply::Text("No tasks yet.".into()));
                }
                let lines: Vec<String> = page
                    .tasks
                    .iter()
                    .map(|t| {
                        format!(
                            "{} {} {} — {}",
                            t.id,
                            warden_store::state::status_name(t.status),
                            t.repos
                                .iter()
                                .map(|r| r.name.as_str())
                                .collect::<Vec<_>>()
                                .join("+"),
                            inert(&t.prompt.chars().take(60).collect::<String>())
                        )
                    })
                    .collect();
                Ok(Reply::Text(lines.join("\n")))
            }
            Command::Cancel { task } => {
                let task = tasks.cancel(principal, &task).await?;
                Ok(Reply::Text(format!(
                    "Task {} is {}.",
                    task.id,
                    warden_store::state::status_name(task.status)
                )))
            }
            Command::Answer { task, text } => {
                let current = tasks.task(principal, &task).await?;
                if current.status != warden_protocol::TaskStatus::WaitingInput
                    && !current.status.is_terminal()
                {
                    // A queued or running task: its agent reads the message at its next turn.
                    let steered = tasks.post_message(principal, &task, &text).await?;
                    return Ok(Reply::Text(format!(
                        "Task {} is {}: it reads your message at its next turn.",
                        steered.id,
                        warden_store::state::status_name(steered.status)
                    )));
                }
                let answered = tasks.answer(principal, &task, &text).await?;
                Ok(Reply::Text(format!(
                    "Task {} has your answer and is {}.",
                    answered.id,
                    warden_store::state::status_name(answered.status)
                )))
            }
            Command::Retry { task } => {
                let retried = tasks.retry(principal, &task).await?;
                // The new task has its own message, in this chat.
                let mut retried = retried;
                retried.metadata = telegram_metadata(chat);
                Ok(Reply::Task(Box::new(retried)))
            }
            Command::Usage => {
                let today = warden_time::UtcDay::of_ms(now_ms()).start_ms();
                let usage = tasks.usage(principal, Some(today)).await?;
                let mut total = warden_store::Spend::default();
                for (_, spend) in &usage.by_task {
                    total.input_tokens += spend.input_tokens;
                    total.output_tokens += spend.output_tokens;
                    total.cost_micro_usd += spend.cost_micro_usd;
                    total.cost_unknown |= spend.cost_unknown;
                }
                Ok(Reply::Text(format!(
                    "Today (UTC): {} tasks, {} input and {} output tokens, ${:.4}{}",
                    usage.by_task.len(),
                    total.input_tokens,
                    total.output_tokens,
                    total.cost_micro_usd as f64 / 1e6,
                    if total.cost_unknown {
                        " (some costs unknown)"
                    } else {
                        ""
                    }
                )))
            }
            Command::Repos => {
                let repos = tasks.repos(principal).await?;
                if repos.is_empty() {
                    return Ok(Reply::Text("No repositories are registered.".into()));
                }
                Ok(Reply::Text(
                    repos
                        .iter()
                        .map(|r| {
                            format!(
                                "{} ({})",
                                r.name,
                                r.branch.as_deref().unwrap_or("default branch")
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                ))
            }
            Command::Incomplete(usage) => Ok(Reply::Text(format!("Usage: {usage}"))),
            Command::Help => Ok(Reply::Text(HELP.into())),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn submit(
        &self,
        principal: &Principal,
        chat: &str,
        update_id: i64,
        text: &Option<String>,
        kind: TaskKind,
        repo: String,
        prompt: String,
    ) -> Result<Reply, ServiceError> {
        let mut submission = Submission::new(kind, prompt, vec![repo]);
        submission.metadata = Some(telegram_metadata(chat));
        if kind == TaskKind::Change {
            submission.publish = Some(true);
        }
        let request = json!({"chat": chat, "text": text}).to_string();
        let idempotency = Idempotency::new(format!("telegram:{update_id}"), request.as_bytes());
        let submitted = self
            .tasks
            .submit(principal, submission, Some(idempotency))
            .await?;
        Ok(Reply::Task(Box::new(submitted.task)))
    }

    /// A button press: decides the approval it names with the hash it is bound to, as the
    /// presser (the service refuses anyone but an admin), and answers the press.
    async fn on_press(&self, press: api::CallbackQuery) -> Result<(), StoreError> {
        let notice = match (
            self.principal(press.from.id),
            press.data.as_deref().and_then(parse_callback_data),
        ) {
            (None, _) => "You are not on this Warden's allow-list.".to_string(),
            (Some(_), None) => "This button is not Warden's.".to_string(),
            (Some(principal), Some(action)) => {
                let (approval, decision) = match action {
                    ButtonAction::Approve { approval } => (approval, Decision::Approve),
                    ButtonAction::Reject { approval } => (approval, Decision::Reject),
                };
                match crate::chat::decide_pressed(&self.tasks, &principal, &approval, decision, 19)
                    .await
                {
                    Ok(text) => text,
                    Err(ServiceError::Store(error)) => return Err(error),
                    Err(error) => format!("Refused: {error}"),
                }
            }
        };
        // The notice is a courtesy: a press that cannot be answered still took effect.
        if let Err(error) = self
            .api
            .answer_callback_query(&press.id, &clip(&notice, 190))
            .await
        {
            tracing::info!(%error, "telegram button press not answered");
        }
        Ok(())
    }
}

impl Front for Bot {
    const CHANNEL: &'static str = CHANNEL;

    fn store(&self) -> &Arc<dyn Store> {
        self.tasks.store()
    }

    fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    /// Puts `task`'s messages in its current state.
    async fn show(&self, task: &Task) -> Result<(), StoreError> {
        let Some(chat) = task.metadata["telegram"]["chat"]
            .as_str()
            .map(str::to_string)
        else {
            return Ok(());
        };
        let (text, approval) = render::task_message(task, self.owner_is_admin(&task.owner), STYLE);
        let markup = approval_buttons(approval);
        for message in pieces(&task_message_id(task), &chat, Some(task), &text, markup) {
            self.store().put_chat_message(message).await?;
        }
        let Some(approval) = render::approval_id(task) else {
            return Ok(());
        };
        let pending = render::pending_approval(task).is_some();
        let (text, buttons) = render::approval_message(task, STYLE);
        let markup = approval_buttons(buttons);
        for admin in self
            .config
            .users
            .iter()
            .filter(|u| u.role == "admin" && u.name != task.owner)
        {
            let id = format!("tg:approval:{approval}:{}", admin.id);
            // A decided approval only updates the messages already sent.
            if !pending && self.store().get_chat_message(&id).await?.is_none() {
                continue;
            }
            for message in pieces(
                &id,
                &admin.id.to_string(),
                Some(task),
                &text,
                markup.clone(),
            ) {
                self.store().put_chat_message(message).await?;
            }
        }
        Ok(())
    }

    async fn deliver_due(&self) -> Result<usize, StoreError> {
        crate::chat::deliver_due(self.store(), CHANNEL, &self.api, FAILPOINT_AFTER_SEND).await
    }
}

impl Transport for BotApi {
    type Error = ApiError;

    async fn send(&self, message: &ChatMessage) -> Result<String, ApiError> {
        self.send_message(&message.chat, &message.text, message.markup.as_deref())
            .await
            .map(|id| id.to_string())
    }

    async fn edit(&self, message: &ChatMessage, sent: &str) -> Result<(), ApiError> {
        let id: i64 = sent.parse().unwrap_or_default();
        self.edit_message_text(&message.chat, id, &message.text, message.markup.as_deref())
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
        ApiError::is_not_modified(self)
    }
}

enum Reply {
    Text(String),
    Task(Box<Task>),
}

const HELP: &str = "Warden runs coding agents on your repositories.\n\
/ask REPO QUESTION — a cited answer\n\
/run REPO WHAT TO CHANGE — a proposal, published after an approval\n\
/status [TASK] — a task (the latest without one)\n\
/tasks — your latest tasks\n\
/answer TASK YOUR ANSWER — answer a task's question\n\
/cancel TASK, /retry TASK\n\
/usage — today's spend\n\
/repos — the repositories you can name";

fn telegram_metadata(chat: &str) -> Value {
    json!({"telegram": {"chat": chat}})
}

fn task_message_id(task: &Task) -> String {
    format!("tg:task:{}", task.id)
}

/// The inline keyboard (`reply_markup` JSON) deciding `approval`, if any.
fn approval_buttons(approval: Option<String>) -> Option<String> {
    let approval = approval?;
    let approve = callback_data(&ButtonAction::Approve {
        approval: approval.clone(),
    })?;
    let reject = callback_data(&ButtonAction::Reject { approval })?;
    Some(
        json!({"inline_keyboard": [[
            {"text": "Approve", "callback_data": approve},
            {"text": "Reject", "callback_data": reject},
        ]]})
        .to_string(),
    )
}

/// `text` as the messages that carry it: the first under `id`, the rest `id:2`, `id:3`, …
/// (the buttons on the last).
fn pieces(
    id: &str,
    chat: &str,
    task: Option<&Task>,
    text: &str,
    markup: Option<String>,
) -> Vec<NewChatMessage> {
    crate::chat::pieces(CHANNEL, MAX_MESSAGE_UNITS, id, chat, task, text, markup)
}

fn clip(text: &str, max_chars: usize) -> String {
    text.chars().take(max_chars).collect()
}

/// Where other interfaces' start-up failures go on Telegram: the allow-listed admins' private
/// chats (a private chat's id is its user's), unless `[telegram] alerts = false`.
pub fn alert_destinations(config: Option<&TelegramConfig>) -> Vec<crate::chat::alert::Destination> {
    config
        .filter(|t| t.alerts)
        .into_iter()
        .flat_map(|t| t.users.iter())
        .filter(|u| u.role == "admin")
        .map(|u| crate::chat::alert::Destination {
            channel: CHANNEL,
            chat: u.id.to_string(),
            format: |what| format!("⚠ Warden: {}", inert(what)),
        })
        .collect()
}

/// Starts the bot when `[telegram]` is configured (`warden serve`): checks the token
/// (`getMe`), then either registers the webhook (`setWebhook`; updates arrive at
/// `/webhooks/telegram`, passed to [`Bot::webhook`]) or removes any webhook and polls; follows
/// and delivers until `stop`. A token Telegram refuses stops the bot with an error on stderr,
/// in the log and to the other chats' alerts (it cannot report through Telegram); the rest of
/// `serve` goes on. The bot is returned for
/// the webhook route.
pub fn spawn(
    config: Option<&TelegramConfig>,
    tasks: TaskService,
    alerts: crate::chat::Alerts,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<(Arc<Bot>, tokio::task::JoinHandle<()>)>> {
    let Some(config) = config else {
        return Ok(None);
    };
    let bot = Arc::new(Bot::new(config.clone(), tasks)?);
    let handle = tokio::spawn(run(Arc::clone(&bot), alerts, stop));
    Ok(Some((bot, handle)))
}

/// Retries `call` every `interval` while Telegram cannot be reached; `None` when the token or
/// the call is refused (reported on stderr, in the log and to the other chats' alerts) or
/// `stop` comes first.
async fn until_reached<T, F>(
    bot: &Bot,
    alerts: &crate::chat::Alerts,
    stop: &mut watch::Receiver<bool>,
    what: &str,
    mut call: impl FnMut() -> F,
) -> Option<T>
where
    F: std::future::Future<Output = Result<T, ApiError>>,
{
    loop {
        match call().await {
            Ok(value) => return Some(value),
            Err(error) if error.is_bad_token() || !error.is_retryable() => {
                let why = if error.is_bad_token() {
                    format!("telegram refused WARDEN_TELEGRAM_TOKEN ({error})")
                } else {
                    format!("telegram refused {what} ({error})")
                };
                tracing::error!(%error, "{why}; the bot is not served");
                crate::say!("warden: {why}; the Telegram bot is not served");
                alerts
                    .report(
                        CHANNEL,
                        &format!(
                            "the Telegram bot is not served: {why}. Fix it and restart `warden serve`."
                        ),
                    )
                    .await;
                return None;
            }
            Err(error) => tracing::warn!(%error, "telegram unreachable ({what}); retrying"),
        }
        tokio::select! {
            _ = tokio::time::sleep(bot.config.poll_interval) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}

async fn run(bot: Arc<Bot>, alerts: crate::chat::Alerts, mut stop: watch::Receiver<bool>) {
    // Check the token first.
    let Some(username) =
        until_reached(&bot, &alerts, &mut stop, "getMe", || bot.api.get_me()).await
    else {
        return;
    };
    let poller = match &bot.config.ingress {
        Ingress::Webhook { url, secret } => {
            let registered = until_reached(&bot, &alerts, &mut stop, "setWebhook", || {
                bot.api.set_webhook(url, secret.expose())
            })
            .await;
            if registered.is_none() {
                return;
            }
            tracing::info!(bot = %username, %url, "telegram bot serving (webhook)");
            crate::say!("warden: telegram bot @{username} receives updates at {url}");
            None
        }
        Ingress::Polling => {
            // A webhook left from an earlier configuration would refuse every getUpdates.
            if until_reached(&bot, &alerts, &mut stop, "deleteWebhook", || {
                bot.api.delete_webhook()
            })
            .await
            .is_none()
            {
                return;
            }
            tracing::info!(bot = %username, "telegram bot serving (long polling)");
            crate::say!("warden: telegram bot @{username} is polling for updates");
            Some(tokio::spawn(poll_loop(Arc::clone(&bot), stop.clone())))
        }
    };
    crate::chat::delivery_loop(bot, stop).await;
    if let Some(poller) = poller {
        let _ = poller.await;
    }
}

async fn poll_loop(bot: Arc<Bot>, mut stop: watch::Receiver<bool>) {
    let interval = bot.config.poll_interval;
    loop {
        if *stop.borrow() {
            return;
        }
        let pause = tokio::select! {
            polled = bot.poll_once() => match polled {
                // Long polling returns as soon as there is something; short polling waits.
                Ok(count) => count == 0 && bot.config.poll_timeout.is_zero(),
                Err(error) => {
                    tracing::warn!(error = %format!("{error:#}"), "telegram polling failed; retrying");
                    true
                }
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        if pause {
            tokio::select! {
                _ = tokio::time::sleep(interval) => {}
                _ = stop.wait_for(|s| *s) => return,
            }
        }
    }
}
