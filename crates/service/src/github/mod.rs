//! Warden's GitHub interface: a thin adapter over [`TaskService`] (who may do what is the
//! service's; this module maps a GitHub user to a [`Principal`] and renders tasks as GitHub
//! Markdown).
//!
//! - **Ingress** ([`GithubHook::webhook`]): the deliveries the API's `POST /webhooks/github`
//!   passes on, raw. Each is checked first: `X-Hub-Signature-256` over the raw body with
//!   `WARDEN_GITHUB_WEBHOOK_SECRET`, in constant time ([`text::verify`]). `ping` is answered.
//!   An `issue_comment` (`created`) or `issues` (`opened`) delivery is acknowledged within
//!   [`ACK_WITHIN`]: the work runs on its own task, and the answer waits for it at most that
//!   long. Each delivery is handled once, and each event ([`Subject`]: what the signed body is
//!   about, since the signature does not cover `X-GitHub-Delivery`): the event is recorded in
//!   the store with the replies, in one transaction, then the delivery id; one whose delivery
//!   id or event was recorded before (a redelivery, a replay under any id) is acknowledged and
//!   ignored, and a submission is idempotent (`Idempotency-Key` `github:<event>`) for the
//!   redelivery of one handled but not recorded. An event older than `max_event_age_secs` is
//!   refused ([`WebhookError::TooOld`]) unless that delivery was recorded as received (before
//!   it was handled) and is redelivered.
//! - **Requests**: a mention of the app (`@warden fix …`/`@warden change …`: a change,
//!   published after an approval; `@warden …` otherwise: a question) by a user GitHub says may
//!   write to the repository (`admin`, `maintain` or `write`; asked at each delivery). The
//!   repository is the registered one whose `[[publish]]` entry names `owner/name`, at its
//!   default branch. The task's owner is `github:<login>` (an operator). A mention in a comment
//!   while that person's question or change from the same issue is queued or running is sent
//!   to it instead (steering: its agent reads it at its next turn), and said so in a reply.
//! - **Pull requests Warden opened** (their head `warden/<task>` at a commit a task of this
//!   Warden published): a mention in a review comment or a review by a writer is a follow-up
//!   change of that task, `same_branch` (published onto the same branch as a new commit, the
//!   same pull request); a failed `check_run`/`check_suite` in a repository of
//!   `fix_failed_checks` is one too, asked as that task's owner, one per head commit and at most
//!   [`MAX_FIX_ATTEMPTS`] in a row. Their replies go on the pull request's conversation.
//! - **Approvals**: `/warden approve sha256:…` or `/warden reject sha256:…` on the issue, by a
//!   login the operator mapped to a Warden admin (`[[github.webhook.approvers]]`) who can also
//!   still write to the repository, decides the pending approval of a task of that issue,
//!   bound to the hash written (the service refuses another one; the refusal is a reply).
//! - **Progress**: the task's one comment on the issue (`gh:task:<id>`), created once and then
//!   edited (`PATCH`) as the task moves: the cited answer (citations as Warden's links), or the
//!   proposal with validations and `Hash: sha256:…` and how to approve it.
//! - **Egress**: the chats' outbox ([`crate::chat`]): recorded first, marked `sending` before
//!   the request leaves, the comment id GitHub returns recorded at once.
//!
//! **No gap** where the chats have one: every comment Warden writes ends with an invisible
//! marker, `<!-- warden:<message id>:<tag> -->`, the tag an HMAC of the message id with the
//! webhook secret (so nobody else can forge one). A comment whose creation was started but
//! whose id was not recorded (a crash, `WARDEN_FAILPOINT=github_after_send` in crash tests,
//! or a lost answer) is looked for on its issue by that marker before it is created again;
//! found, its id is recorded and it is edited instead.
//!
//! The REST client it and publication use is [`crate::github_client`].

pub mod text;

use std::sync::Arc;
use std::time::Duration;
use warden_protocol::views::TaskView;

use crate::config::github_hook::GithubWebhookConfig;
use crate::config::{GithubSettings, PublishTarget};
use crate::github_client::{GithubClient, GithubClientConfig, GithubError, GithubRepo};
use serde_json::{json, Value};
use tokio::sync::watch;
use warden_protocol::TaskKind;
use warden_store::{
    ApprovalStatus, ChatMessage, ChatMessageState, Decision, NewChatMessage, Store, StoreError,
};

use crate::chat::render::{self, Style};
use crate::chat::{DeliveryError, Front, Transport};
use crate::tasks::{
    ApprovalListing, Idempotency, Principal, Role, ServiceError, Submission, TaskService,
};

/// The store's channel name for GitHub.
pub const CHANNEL: &str = "github";
/// The crash point between GitHub creating a comment and Warden recording its id.
pub const FAILPOINT_AFTER_SEND: &str = "github_after_send";
/// The crash point after a delivery was handled and before it was recorded (and acknowledged).
pub const FAILPOINT_BEFORE_RECORD: &str = "github_before_record";
/// How long a webhook's answer waits for its work (GitHub gives up after ten seconds).
pub const ACK_WITHIN: Duration = Duration::from_secs(5);
/// A person's latest tasks looked at for one still running from the issue they comment on.
const ISSUE_TASKS_LOOKED_AT: u32 = 100;
/// How much of an issue's text a task started from it carries as context.
const ISSUE_CONTEXT_CHARS: usize = 4000;
/// How much of a review comment's diff hunk its follow-up carries as context.
const REVIEW_HUNK_CHARS: usize = 2000;
/// How many of the latest tasks are searched for the one a pull request's head commit is.
const PUBLISHED_SCAN: u32 = 1000;
/// Fix tasks started by failed checks in a row on one branch (each on its predecessor's
/// commit) before Warden stops trying; a person's request in between starts the count again.
pub const MAX_FIX_ATTEMPTS: u64 = 2;
/// How much of a failed check's output a fix task carries.
const CHECK_OUTPUT_CHARS: usize = 3000;
const SCAN_PAGE: u32 = 200;

const STYLE: Style = Style {
    escape: text::markdown,
    link: text::link,
    answer_hint: crate::chat::render::answer_elsewhere,
};

/// A request to `POST /webhooks/github`, as it arrived.
#[derive(Debug, Clone, Copy)]
pub struct Delivery<'a> {
    /// `X-Hub-Signature-256`.
    pub signature: Option<&'a str>,
    /// `X-GitHub-Event`.
    pub event: Option<&'a str>,
    /// `X-GitHub-Delivery`: the delivery's id, the same on a redelivery.
    pub delivery: Option<&'a str>,
    /// The raw body, as signed.
    pub body: &'a [u8],
}

/// What the webhook answers with 200.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WebhookReply {
    /// `ping`: the hook works.
    Pong,
    /// Received (handled, ignored as seen before or not for Warden, or still being handled).
    Ack,
}

/// Why a delivery is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WebhookError {
    /// The signature is missing or wrong (401).
    #[error("{0}")]
    Unauthorized(text::SignatureError),
    /// Signed, but not a delivery Warden can read (400).
    #[error("{0}")]
    Invalid(String),
    /// Signed, but its event is older than `[github.webhook] max_event_age_secs` and this
    /// delivery was not received before (422): a replay, or a redelivery of an event Warden
    /// never saw, past the window.
    #[error("{0}")]
    TooOld(String),
    /// Whether the delivery was received before could not be learnt (the store failed; 500):
    /// nothing was done, a redelivery is handled.
    #[error("{0}")]
    Unavailable(String),
}

/// The GitHub interface: its API client, the service it calls, and who may approve.
pub struct GithubHook {
    client: GithubClient,
    tasks: TaskService,
    config: GithubWebhookConfig,
    secret: String,
    targets: Vec<PublishTarget>,
}

impl GithubHook {
    pub fn new(
        settings: &GithubSettings,
        tasks: TaskService,
    ) -> anyhow::Result<Option<GithubHook>> {
        let Some(config) = settings.webhook.clone() else {
            return Ok(None);
        };
        let secret = config.secret.as_ref().ok_or_else(|| {
            anyhow::anyhow!(
                "[github.webhook] is configured but WARDEN_GITHUB_WEBHOOK_SECRET is not set"
            )
        })?;
        let auth = settings.auth().ok_or_else(|| {
            anyhow::anyhow!(
                "[github.webhook] is configured but neither WARDEN_GITHUB_TOKEN nor [github.app] is"
            )
        })?;
        let client = GithubClient::new(GithubClientConfig::with_auth(&settings.api_url, auth))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        Ok(Some(GithubHook {
            client,
            tasks,
            secret: secret.expose().to_string(),
            config,
            targets: settings.targets.clone(),
        }))
    }

    /// `POST /webhooks/github`: one delivery.
    pub async fn webhook(
        self: &Arc<Self>,
        delivery: Delivery<'_>,
    ) -> Result<WebhookReply, WebhookError> {
        text::verify(self.secret.as_bytes(), delivery.signature, delivery.body)
            .map_err(WebhookError::Unauthorized)?;
        let event = delivery
            .event
            .ok_or_else(|| WebhookError::Invalid("no X-GitHub-Event header".into()))?;
        let id = delivery
            .delivery
            .map(str::trim)
            .filter(|id| !id.is_empty() && id.len() <= 200)
            .ok_or_else(|| WebhookError::Invalid("no X-GitHub-Delivery header".into()))?
            .to_string();
        let payload: Value = serde_json::from_slice(delivery.body).map_err(|e| {
            WebhookError::Invalid(format!(
                "the body is not JSON (set the hook's content type to application/json): {e}"
            ))
        })?;
        match event {
            "ping" => Ok(WebhookReply::Pong),
            "issue_comment"
            | "issues"
            | "pull_request_review_comment"
            | "pull_request_review"
            | "check_run"
            | "check_suite" => {
                let subject = Subject::of(event, &payload);
                if let Some(subject) = &subject {
                    self.check_age(&id, event, subject).await?;
                }
                let hook = Arc::clone(self);
                let event = event.to_string();
                let work = tokio::spawn(async move {
                    hook.handle_delivery(&id, subject.as_ref(), &event, &payload)
                        .await
                });
                match tokio::time::timeout(ACK_WITHIN, work).await {
                    Ok(Ok(Ok(()))) => {}
                    Ok(Ok(Err(error))) => {
                        tracing::warn!(%error, "a github delivery was not handled")
                    }
                    Ok(Err(error)) => tracing::warn!(%error, "handling a github delivery failed"),
                    Err(_) => {
                        tracing::info!("a github delivery is acknowledged before it is handled")
                    }
                }
                Ok(WebhookReply::Ack)
            }
            _ => Ok(WebhookReply::Ack),
        }
    }

    /// Refuses a delivery whose event is older than `max_event_age` unless this delivery (its
    /// id and its subject) was received before: a redelivery of something not yet handled, or
    /// one handled (then ignored by [`Self::handle_delivery`]). A subject without a time it
    /// can read (GitHub gives every one of these events its time) is not refused.
    async fn check_age(
        &self,
        delivery: &str,
        event: &str,
        subject: &Subject,
    ) -> Result<(), WebhookError> {
        let Some(at_ms) = subject.at_ms else {
            return Ok(());
        };
        let window = self.config.max_event_age;
        let window_ms = i64::try_from(window.as_millis()).unwrap_or(i64::MAX);
        let age_ms = crate::chat::now_ms().saturating_sub(at_ms);
        if age_ms <= window_ms {
            return Ok(());
        }
        match self
            .store()
            .chat_update_seen(CHANNEL, received_key(delivery, subject))
            .await
        {
            Ok(true) => Ok(()),
            Ok(false) => {
                tracing::warn!(
                    delivery,
                    event,
                    age_secs = age_ms / 1000,
                    "a github event older than max_event_age_secs refused"
                );
                Err(WebhookError::TooOld(format!(
                    "the {event} event is {} s old, older than [github.webhook] \
                     max_event_age_secs ({} s), and this delivery was not received before: \
                     refused, nothing was done",
                    age_ms / 1000,
                    window.as_secs()
                )))
            }
            Err(error) => {
                tracing::warn!(%error, delivery, "cannot learn whether an old github delivery was received before");
                Err(WebhookError::Unavailable(
                    "the store is unavailable: the delivery was not handled; redeliver it".into(),
                ))
            }
        }
    }

    /// Handles one delivery, unless it or its subject was handled before, and records it with
    /// its replies. A delivery is known by its `X-GitHub-Delivery` id; its subject by what
    /// the signed body is about ([`Subject`]), so one body replayed under another delivery id
    /// is the same event: ignored once handled, and the same task (the idempotency key and
    /// the replies' ids are the subject's) if two arrive at once. The delivery is recorded as
    /// received first, so a redelivery of it is handled even past the age window.
    async fn handle_delivery(
        &self,
        id: &str,
        subject: Option<&Subject>,
        event: &str,
        payload: &Value,
    ) -> Result<(), StoreError> {
        let delivery_key = update_key(id);
        if self.store().chat_update_seen(CHANNEL, delivery_key).await? {
            tracing::info!(delivery = id, "github delivery seen before; ignored");
            return Ok(());
        }
        if let Some(subject) = subject {
            if self
                .store()
                .chat_update_seen(CHANNEL, subject.key())
                .await?
            {
                tracing::info!(
                    delivery = id,
                    event,
                    "github event handled before under another delivery (a replay); ignored"
                );
                return Ok(());
            }
            self.store()
                .record_chat_update(CHANNEL, received_key(id, subject), Vec::new())
                .await?;
        }
        let event_id = subject.map_or_else(|| id.to_string(), Subject::id);
        let Some(replies) = self.on_event(&event_id, event, payload).await? else {
            // Not recorded: a redelivery is handled again.
            return Ok(());
        };
        crate::publish::crash_point(FAILPOINT_BEFORE_RECORD);
        let recorded = match subject {
            // The subject with the replies, in one transaction; then the delivery id.
            Some(subject) => {
                let recorded = self
                    .store()
                    .record_chat_update(CHANNEL, subject.key(), replies)
                    .await?;
                self.store()
                    .record_chat_update(CHANNEL, delivery_key, Vec::new())
                    .await?;
                recorded
            }
            None => {
                self.store()
                    .record_chat_update(CHANNEL, delivery_key, replies)
                    .await?
            }
        };
        if !recorded {
            tracing::info!(delivery = id, "github delivery recorded by another handler");
        }
        Ok(())
    }

    /// The replies to one delivery; `None` when whether its author may write could not be
    /// learnt (the delivery is then not recorded).
    async fn on_event(
        &self,
        id: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Option<Vec<NewChatMessage>>, StoreError> {
        if matches!(event, "pull_request_review_comment" | "pull_request_review") {
            return self.on_review(id, event, payload).await;
        }
        if matches!(event, "check_run" | "check_suite") {
            return self.on_check(id, event, payload).await;
        }
        let issue = &payload["issue"];
        let (author, body, opened) = match (event, payload["action"].as_str()) {
            ("issue_comment", Some("created")) => (
                &payload["comment"]["user"],
                payload["comment"]["body"].as_str().unwrap_or_default(),
                false,
            ),
            ("issues", Some("opened")) => (
                &issue["user"],
                issue["body"].as_str().unwrap_or_default(),
                true,
            ),
            _ => return Ok(Some(Vec::new())),
        };
        let (Some(login), Some(number), Some(full_name)) = (
            author["login"].as_str(),
            issue["number"].as_u64(),
            payload["repository"]["full_name"].as_str(),
        ) else {
            return Ok(Some(Vec::new()));
        };
        // Apps are not people; Warden's own comments (its marker: whatever model text they
        // quote, they are never requests, even under a token whose user is an approver).
        if author["type"] == "Bot" || login.ends_with("[bot]") || body.contains(MARKER_PREFIX) {
            return Ok(Some(Vec::new()));
        }
        let handle = &self.config.handle;
        let title = issue["title"].as_str().unwrap_or_default();
        let command = (!opened)
            .then(|| text::parse_command(body, handle))
            .flatten();
        let mention = if command.is_some() {
            None
        } else if opened {
            text::parse_mention(&format!("{title}\n{body}"), handle)
        } else {
            text::parse_mention(body, handle)
        };
        let (repo, chat, request) = match self
            .addressed(id, login, full_name, number, command, mention)
            .await?
        {
            Addressed::Nothing => return Ok(Some(Vec::new())),
            Addressed::Unknown => return Ok(None),
            Addressed::Decided(replies) => return Ok(Some(replies)),
            Addressed::Mention {
                repo,
                chat,
                request,
            } => (repo, chat, request),
        };
        let reply = |text: String| one_reply(id, &chat, text);
        let Some(target) = self.targets.iter().find(|t| same_repo(&t.github, &repo)) else {
            return Ok(Some(reply(format!(
                "This repository is not connected to this Warden: no `[[publish]]` entry names {}.",
                text::markdown(&repo.to_string())
            ))));
        };
        if request.text.trim().is_empty() {
            let joiner = crate::chat::text::JOINER;
            return Ok(Some(reply(format!(
                "Ask a question (`@{joiner}{handle} why …`) or ask for a change (`@{joiner}{handle} fix …`)."
            ))));
        }
        let principal = Principal {
            name: format!("github:{}", login.to_ascii_lowercase()),
            role: Role::Operator,
        };
        // A mention in a comment while the same person's task from this issue is queued or
        // running is said to that task: its agent reads it at its next turn.
        if !opened {
            match self
                .steer_running(&principal, &repo, number, id, &request.text)
                .await
            {
                Ok(Some(task)) => {
                    return Ok(Some(reply(format!(
                        "Sent to the running task {task}: it reads this at its next turn."
                    ))))
                }
                Ok(None) => {}
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => {
                    return Ok(Some(reply(format!(
                        "Refused: {}",
                        text::markdown(&error.to_string())
                    ))))
                }
            }
        }
        // A comment's request is about its issue: the issue's text goes with it (an opened
        // issue's request is that text already).
        let prompt = if opened {
            request.text.clone()
        } else {
            let context: String =
                format!("{title}\n\n{}", issue["body"].as_str().unwrap_or_default())
                    .chars()
                    .take(ISSUE_CONTEXT_CHARS)
                    .collect();
            format!(
                "{}\n\n(Asked on GitHub issue {repo}#{number}, whose text, as its author wrote it, follows.)\n{context}",
                request.text
            )
        };
        let mut submission = Submission::new(request.kind, prompt, vec![target.repo.clone()]);
        submission.metadata = Some(
            json!({"github": {"repo": repo.to_string(), "issue": number, "delivery": id,
                "login": login, "user_id": author["id"].as_u64()}}),
        );
        if request.kind == TaskKind::Change {
            submission.publish = Some(true);
        }
        let idempotency_body =
            json!({"repo": repo.to_string(), "issue": number, "text": request.text}).to_string();
        let idempotency = Idempotency::new(format!("github:{id}"), idempotency_body.as_bytes());
        Ok(Some(
            match self
                .tasks
                .submit(&principal, submission, Some(idempotency))
                .await
            {
                Ok(submitted) => task_pieces(&submitted.task, &chat),
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => reply(format!("Refused: {}", text::markdown(&error.to_string()))),
            },
        ))
    }

    /// Sends `text` to `principal`'s queued or running question or change from issue `number`
    /// of `repo`, if there is one: the task's id. A task started by this very delivery
    /// (`delivery`, redelivered after a crash) is not one. Sent once: a redelivery after a
    /// crash finds the same text as the task's last message and sends nothing more.
    async fn steer_running(
        &self,
        principal: &Principal,
        repo: &GithubRepo,
        number: u64,
        delivery: &str,
        text: &str,
    ) -> Result<Option<warden_protocol::TaskId>, ServiceError> {
        let listed = self
            .tasks
            .list(
                principal,
                crate::tasks::TaskListing {
                    status: None,
                    before: None,
                    limit: ISSUE_TASKS_LOOKED_AT,
                },
            )
            .await?;
        let Some(task) = listed.tasks.into_iter().find(|t| {
            crate::tasks::steerable(t)
                && t.metadata["github"]["repo"] == repo.to_string().as_str()
                && t.metadata["github"]["issue"] == number
                && t.metadata["github"]["delivery"] != delivery
        }) else {
            return Ok(None);
        };
        self.tasks.steer_once(principal, &task, text).await?;
        Ok(Some(task.id))
    }

    /// Whether GitHub says `login` may write to `repo`; `None` when it could not be learnt (the
    /// delivery is then not recorded, so a redelivery asks again).
    async fn may_write(&self, repo: &GithubRepo, login: &str) -> Option<bool> {
        match self.client.permission(repo, login).await {
            Ok(permission) if permission.can_write() => Some(true),
            Ok(permission) => {
                tracing::info!(login, repo = %repo, permission = %permission.permission, "github user without write access ignored");
                Some(false)
            }
            Err(GithubError::NotFound(_)) => {
                tracing::info!(login, repo = %repo, "github user unknown to the repository ignored");
                Some(false)
            }
            Err(error) => {
                tracing::warn!(%error, login, repo = %repo, "cannot learn a github user's permission; the delivery is not recorded");
                None
            }
        }
    }

    /// A review comment (`pull_request_review_comment` `created`) or a review with a body
    /// (`pull_request_review` `submitted`) on a pull request Warden opened: a mention of the
    /// app by a writer is a follow-up change of the task whose proposal the pull request's head
    /// is, published on the same branch after an approval; `/warden approve|reject` decides as
    /// on an issue. The replies go on the pull request's conversation.
    /// What a person's comment on issue or pull request `number` of `full_name` asks of
    /// Warden, once its author `login` may write there: a `/warden` command (decided here, its
    /// reply returned), a mention to act on, or nothing.
    async fn addressed(
        &self,
        id: &str,
        login: &str,
        full_name: &str,
        number: u64,
        command: Option<text::Command>,
        mention: Option<text::Request>,
    ) -> Result<Addressed, StoreError> {
        if command.is_none() && mention.is_none() {
            return Ok(Addressed::Nothing);
        }
        let Some(repo) = GithubRepo::parse(full_name) else {
            return Ok(Addressed::Nothing);
        };
        match self.may_write(&repo, login).await {
            Some(true) => {}
            Some(false) => return Ok(Addressed::Nothing),
            None => return Ok(Addressed::Unknown),
        }
        let chat = format!("{repo}#{number}");
        if let Some(command) = command {
            let decided = self.decide(login, &repo, number, command).await?;
            return Ok(Addressed::Decided(one_reply(id, &chat, decided)));
        }
        match mention {
            Some(request) => Ok(Addressed::Mention {
                repo,
                chat,
                request,
            }),
            None => Ok(Addressed::Nothing),
        }
    }

    async fn on_review(
        &self,
        id: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Option<Vec<NewChatMessage>>, StoreError> {
        let pull = &payload["pull_request"];
        let (item, location) = match (event, payload["action"].as_str()) {
            ("pull_request_review_comment", Some("created")) => {
                let comment = &payload["comment"];
                let line = comment["line"]
                    .as_u64()
                    .or_else(|| comment["original_line"].as_u64());
                let location = comment["path"].as_str().map(|path| {
                    let at = line.map(|l| format!(" line {l}")).unwrap_or_default();
                    let hunk: String = comment["diff_hunk"]
                        .as_str()
                        .unwrap_or_default()
                        .chars()
                        .take(REVIEW_HUNK_CHARS)
                        .collect();
                    format!("on `{path}`{at}, whose diff hunk follows:\n{hunk}")
                });
                (comment, location)
            }
            ("pull_request_review", Some("submitted")) => (&payload["review"], None),
            _ => return Ok(Some(Vec::new())),
        };
        let author = &item["user"];
        let body = item["body"].as_str().unwrap_or_default();
        let (Some(login), Some(number), Some(full_name)) = (
            author["login"].as_str(),
            pull["number"].as_u64(),
            payload["repository"]["full_name"].as_str(),
        ) else {
            return Ok(Some(Vec::new()));
        };
        if author["type"] == "Bot" || login.ends_with("[bot]") || body.contains(MARKER_PREFIX) {
            return Ok(Some(Vec::new()));
        }
        let handle = &self.config.handle;
        let command = text::parse_command(body, handle);
        let mention = match command {
            Some(_) => None,
            None => text::parse_mention(body, handle),
        };
        let (repo, chat, request) = match self
            .addressed(id, login, full_name, number, command, mention)
            .await?
        {
            Addressed::Nothing => return Ok(Some(Vec::new())),
            Addressed::Unknown => return Ok(None),
            Addressed::Decided(replies) => return Ok(Some(replies)),
            Addressed::Mention {
                repo,
                chat,
                request,
            } => (repo, chat, request),
        };
        let reply = |text: String| one_reply(id, &chat, text);
        // Only Warden's own pull requests: their head is a branch Warden published, in this
        // repository (not a fork's), at a commit a task of this Warden proposed.
        let head_repo = pull["head"]["repo"]["full_name"].as_str();
        let (Some(head_ref), Some(head_sha), Some(url)) = (
            pull["head"]["ref"].as_str(),
            pull["head"]["sha"].as_str(),
            pull["html_url"].as_str(),
        ) else {
            return Ok(Some(Vec::new()));
        };
        if head_repo != Some(full_name) {
            return Ok(Some(Vec::new()));
        }
        let Some(latest) = self.published_task(head_ref, head_sha, Some(url)).await? else {
            tracing::info!(pull = %chat, "a mention on a pull request Warden did not open (or whose head it did not publish) ignored");
            return Ok(Some(Vec::new()));
        };
        if request.text.trim().is_empty() {
            let joiner = crate::chat::text::JOINER;
            return Ok(Some(reply(format!(
                "Say what to change (`@{joiner}{handle} also handle the empty case`)."
            ))));
        }
        let principal = Principal {
            name: format!("github:{}", login.to_ascii_lowercase()),
            role: Role::Operator,
        };
        let prompt = match &location {
            Some(location) => format!(
                "{}\n\n(Asked in a review comment on pull request {repo}#{number}, {location})",
                request.text
            ),
            None => format!(
                "{}\n\n(Asked in a review of pull request {repo}#{number}.)",
                request.text
            ),
        };
        let mut submission = Submission::new(TaskKind::Change, prompt, Vec::new());
        submission.follow_up_to = Some(latest.id.to_string());
        submission.publish = Some(true);
        submission.same_branch = true;
        submission.metadata = Some(json!({"github": {
            "repo": repo.to_string(), "issue": number, "pull": number, "delivery": id,
            "login": login, "user_id": author["id"].as_u64(),
        }}));
        let idempotency_body = json!({"repo": repo.to_string(), "pull": number,
            "follows": latest.id.to_string(), "text": request.text})
        .to_string();
        let idempotency = Idempotency::new(format!("github:{id}"), idempotency_body.as_bytes());
        Ok(Some(
            match self
                .tasks
                .submit(&principal, submission, Some(idempotency))
                .await
            {
                Ok(submitted) => task_pieces(&submitted.task, &chat),
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => reply(format!(
                    "Refused: {}; nothing was started.",
                    text::markdown(&error.to_string())
                )),
            },
        ))
    }

    /// The change task whose published proposal a pull request shows: its branch `head_ref`
    /// is `warden/<task>` of a task that opened a pull request (`url` when given), and the task
    /// whose published commit is `head_sha` (that one, or a follow-up published on the same
    /// branch, among the latest [`PUBLISHED_SCAN`] tasks). `None`: not a pull request of this
    /// Warden, or its head is a commit Warden did not publish.
    async fn published_task(
        &self,
        head_ref: &str,
        head_sha: &str,
        url: Option<&str>,
    ) -> Result<Option<TaskView>, StoreError> {
        let Some(first) = head_ref.strip_prefix("warden/") else {
            return Ok(None);
        };
        let first = match self.tasks.task(&reader(), first).await {
            Ok(task) => task,
            Err(ServiceError::Store(error)) => return Err(error),
            // Not a task id, or no such task.
            Err(_) => return Ok(None),
        };
        let opened = |task: &TaskView| {
            let pr_url = task
                .result
                .as_ref()
                .and_then(|r| r.pointer("/publication/pr_url"))
                .and_then(Value::as_str);
            task.kind == TaskKind::Change
                && pr_url.is_some_and(|opened| url.is_none_or(|url| opened == url))
        };
        let on_branch = |task: &TaskView| {
            crate::publication::published_branch(task.result.as_ref())
                .is_some_and(|(branch, commit)| branch == head_ref && commit == head_sha)
        };
        if !opened(&first) {
            return Ok(None);
        }
        if on_branch(&first) {
            return Ok(Some(first));
        }
        let mut before = None;
        for _ in 0..PUBLISHED_SCAN / SCAN_PAGE {
            let listing = crate::tasks::TaskListing {
                status: None,
                before: before.take(),
                limit: SCAN_PAGE,
            };
            let page = match self.tasks.list(&reader(), listing).await {
                Ok(page) => page,
                Err(ServiceError::Store(error)) => return Err(error),
                Err(_) => break,
            };
            if let Some(found) = page.tasks.iter().find(|t| opened(t) && on_branch(t)) {
                return Ok(Some(found.clone()));
            }
            match page.next_cursor {
                Some(next) => before = Some(next),
                None => break,
            }
        }
        Ok(None)
    }

    /// A failed check (`check_run` or `check_suite` `completed` with `failure` or `timed_out`)
    /// on a pull request Warden opened, in a repository of `fix_failed_checks`: a follow-up
    /// change of the task whose proposal the pull request's head is, asked to fix what failed
    /// (the check's name, conclusion and a bounded, redacted excerpt of its output), published
    /// on the same branch after an approval, as the task's owner asked it. At most one per
    /// head commit (its idempotency key is the commit), and at most [`MAX_FIX_ATTEMPTS`] in a
    /// row on a branch without a person's request in between.
    async fn on_check(
        &self,
        id: &str,
        event: &str,
        payload: &Value,
    ) -> Result<Option<Vec<NewChatMessage>>, StoreError> {
        let (check, name, output) = match (event, payload["action"].as_str()) {
            ("check_run", Some("completed")) => {
                let run = &payload["check_run"];
                (run, run["name"].as_str(), Some(&run["output"]))
            }
            ("check_suite", Some("completed")) => {
                let suite = &payload["check_suite"];
                (suite, suite["app"]["name"].as_str(), None)
            }
            _ => return Ok(Some(Vec::new())),
        };
        let conclusion = check["conclusion"].as_str().unwrap_or_default();
        if !matches!(conclusion, "failure" | "timed_out") {
            return Ok(Some(Vec::new()));
        }
        let (Some(full_name), Some(head_sha)) = (
            payload["repository"]["full_name"].as_str(),
            check["head_sha"].as_str(),
        ) else {
            return Ok(Some(Vec::new()));
        };
        let Some(repo) = GithubRepo::parse(full_name) else {
            return Ok(Some(Vec::new()));
        };
        if !self
            .config
            .fix_failed_checks
            .iter()
            .any(|listed| same_repo(listed, &repo))
        {
            return Ok(Some(Vec::new()));
        }
        // The pull requests of the checked commit, in this repository (not a fork's).
        let repository_id = &payload["repository"]["id"];
        let mut found = None;
        for pull in check["pull_requests"].as_array().into_iter().flatten() {
            let head = &pull["head"];
            let (Some(number), Some(head_ref)) = (pull["number"].as_u64(), head["ref"].as_str())
            else {
                continue;
            };
            if head["sha"].as_str() != Some(head_sha) || &head["repo"]["id"] != repository_id {
                continue;
            }
            if let Some(task) = self.published_task(head_ref, head_sha, None).await? {
                found = Some((number, task));
                break;
            }
        }
        let Some((number, latest)) = found else {
            return Ok(Some(Vec::new()));
        };
        let attempts = latest.metadata["github"]["fix_attempt"]
            .as_u64()
            .unwrap_or(0);
        if attempts >= MAX_FIX_ATTEMPTS {
            tracing::info!(task = %latest.id, head_sha, "a failed check on a fix's own commit; no further fix task (at most {MAX_FIX_ATTEMPTS} in a row)");
            return Ok(Some(Vec::new()));
        }
        let chat = format!("{repo}#{number}");
        let name = name.unwrap_or("a check");
        let excerpt = output
            .map(|output| {
                self.tasks
                    .redactor()
                    .text(&text::check_excerpt(output, CHECK_OUTPUT_CHARS))
            })
            .filter(|excerpt| !excerpt.is_empty());
        let short = &head_sha[..head_sha.len().min(12)];
        let mut prompt = format!(
            "fix the failing check: `{name}` concluded `{conclusion}` on pull request {repo}#{number} \
             (commit {short}). Find the cause and fix it, keeping what the pull request changes."
        );
        match excerpt {
            Some(excerpt) => prompt.push_str(&format!(
                "\n\n(The check's output, as it reported it, at most {CHECK_OUTPUT_CHARS} characters, follows.)\n{excerpt}"
            )),
            None => prompt.push_str("\n\n(The check reported no output.)"),
        }
        // The task's owner asks for the fix: the repository's operator opted in, and the
        // publication still needs an approval.
        let principal = Principal {
            name: latest.owner.clone(),
            role: Role::Operator,
        };
        let mut submission = Submission::new(TaskKind::Change, prompt, Vec::new());
        submission.follow_up_to = Some(latest.id.to_string());
        submission.publish = Some(true);
        submission.same_branch = true;
        submission.metadata = Some(json!({"github": {
            "repo": repo.to_string(), "issue": number, "pull": number, "delivery": id,
            "fix_attempt": attempts + 1, "check": name,
        }}));
        // One fix per failed commit, however many of its checks fail (or are redelivered).
        let idempotency_body =
            json!({"repo": repo.to_string(), "pull": number, "sha": head_sha}).to_string();
        let idempotency = Idempotency::new(
            format!("github:fix:{head_sha}"),
            idempotency_body.as_bytes(),
        );
        Ok(Some(
            match self
                .tasks
                .submit(&principal, submission, Some(idempotency))
                .await
            {
                Ok(submitted) => task_pieces(&submitted.task, &chat),
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => one_reply(
                    id,
                    &chat,
                    format!(
                        "Refused to start a fix for `{}`: {}",
                        text::markdown(name),
                        text::markdown(&error.to_string())
                    ),
                ),
            },
        ))
    }

    /// `/warden approve|reject HASH` by `login`: decides the pending approval of a task of
    /// issue `number` if `login` is a configured approver; the reply either way.
    async fn decide(
        &self,
        login: &str,
        repo: &GithubRepo,
        number: u64,
        command: text::Command,
    ) -> Result<String, StoreError> {
        let login = login.to_ascii_lowercase();
        let Some((_, name)) = self.config.approvers.iter().find(|(l, _)| *l == login) else {
            return Ok(format!(
                "Refused: {} is not one of this Warden's approvers; nothing was decided.",
                text::markdown(&login)
            ));
        };
        let principal = Principal {
            name: name.clone(),
            role: Role::Admin,
        };
        let mut found = None;
        let mut cursor = None;
        'pages: loop {
            let page = match self
                .tasks
                .approvals(
                    &principal,
                    ApprovalListing {
                        status: Some(ApprovalStatus::Pending),
                        cursor: cursor.take(),
                        limit: usize::MAX,
                    },
                )
                .await
            {
                Ok(page) => page,
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => {
                    return Ok(format!("Refused: {}", text::markdown(&error.to_string())))
                }
            };
            for approval in page.approvals {
                let task = match self.tasks.task(&principal, approval.task_id.as_str()).await {
                    Ok(task) => task,
                    Err(ServiceError::Store(error)) => return Err(error),
                    Err(_) => continue,
                };
                let github = &task.metadata["github"];
                if github["repo"] == repo.to_string() && github["issue"] == number {
                    found = Some(approval);
                    break 'pages;
                }
            }
            match page.next_cursor {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        let Some(approval) = found else {
            return Ok("Refused: no proposal of this issue waits for an approval.".into());
        };
        let decision = if command.approve {
            Decision::Approve
        } else {
            Decision::Reject
        };
        Ok(
            match self
                .tasks
                .decide(&principal, &approval.id, decision, &command.hash)
                .await
            {
                Ok(decided) => format!(
                    "{} {} ({}) as {}.",
                    if command.approve {
                        "Approved"
                    } else {
                        "Rejected"
                    },
                    decided.subject_hash,
                    decided.task_id,
                    text::markdown(name)
                ),
                Err(ServiceError::Store(error)) => return Err(error),
                Err(error) => format!(
                    "Refused: {}; nothing was decided.",
                    text::markdown(&error.to_string())
                ),
            },
        )
    }
}

impl Front for GithubHook {
    const CHANNEL: &'static str = CHANNEL;

    fn store(&self) -> &Arc<dyn Store> {
        self.tasks.store()
    }

    fn tasks(&self) -> &TaskService {
        &self.tasks
    }

    /// Puts the comment of a task started from GitHub in its current state.
    async fn show(&self, task: &TaskView) -> Result<(), StoreError> {
        let github = &task.metadata["github"];
        let (Some(repo), Some(number)) = (github["repo"].as_str(), github["issue"].as_u64()) else {
            return Ok(());
        };
        for message in task_pieces(task, &format!("{repo}#{number}")) {
            self.store().put_chat_message(message).await?;
        }
        Ok(())
    }

    async fn deliver_due(&self) -> Result<usize, StoreError> {
        crate::chat::deliver_due(
            self.store(),
            CHANNEL,
            &Comments {
                client: &self.client,
                secret: self.secret.as_bytes(),
            },
            FAILPOINT_AFTER_SEND,
        )
        .await
    }
}

/// Whether `a` and `b` name the same repository: GitHub's owner and repository names are not
/// case-sensitive, and a delivery spells them as the repository does (`Codertocat/Hello-World`),
/// whatever the configuration wrote.
fn same_repo(a: &GithubRepo, b: &GithubRepo) -> bool {
    a.owner.eq_ignore_ascii_case(&b.owner) && a.name.eq_ignore_ascii_case(&b.name)
}

/// The one-off reply to delivery `id` on issue or pull request `chat`.
/// What a comment asks of Warden ([`GithubHook::addressed`]).
enum Addressed {
    /// Nothing: no command or mention, or its author may not write.
    Nothing,
    /// Whether its author may write is unknown for now: handled again on a redelivery.
    Unknown,
    /// A `/warden` command, decided: the reply.
    Decided(Vec<NewChatMessage>),
    /// A mention to act on, in `chat` (`owner/name#number`).
    Mention {
        repo: GithubRepo,
        chat: String,
        request: text::Request,
    },
}

fn one_reply(id: &str, chat: &str, text: String) -> Vec<NewChatMessage> {
    vec![NewChatMessage {
        id: format!("gh:d:{id}"),
        channel: CHANNEL.into(),
        chat: chat.to_string(),
        task: None,
        text,
        markup: None,
    }]
}

/// Who the interface reads tasks as when no person asks (finding the task a pull request or a
/// check run belongs to): every owner's tasks, through the service like any reader.
fn reader() -> Principal {
    Principal {
        name: "github".into(),
        role: Role::Admin,
    }
}

/// A task's comment(s) on issue `chat` (`owner/name#number`), saying how to approve while
/// its approval waits.
fn task_pieces(task: &TaskView, chat: &str) -> Vec<NewChatMessage> {
    let (mut text, _) = render::task_message(task, false, STYLE);
    if let Some((_, hash)) = render::pending_approval(task) {
        text.push_str(&format!(
            "\n\nAn approver publishes it with a comment `/warden approve {hash}` (or rejects it with `/warden reject {hash}`)."
        ));
    }
    crate::chat::pieces(
        CHANNEL,
        text::MAX_COMMENT_UNITS,
        &format!("gh:task:{}", task.id),
        chat,
        Some(task),
        &text,
        None,
    )
}

/// Issue comments as the chats' [`Transport`].
struct Comments<'a> {
    client: &'a GithubClient,
    /// The webhook secret, the key of each comment's marker.
    secret: &'a [u8],
}

/// How every marker starts; a delivery of a comment holding one is Warden's own.
const MARKER_PREFIX: &str = "<!-- warden:";

/// Pages of an issue's comments searched for a comment whose creation was not recorded.
const RECONCILE_PAGES: u32 = 10;

/// The invisible marker that ends the comment of message `id`: `<!-- warden:ID:TAG -->`, TAG
/// the first 16 bytes of HMAC-SHA256(`secret`, ID) in hex.
fn marker(secret: &[u8], id: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(secret)
        .unwrap_or_else(|_| unreachable!("HMAC accepts every key length"));
    mac.update(b"github-comment:");
    mac.update(id.as_bytes());
    let tag = mac.finalize().into_bytes();
    format!("{MARKER_PREFIX}{id}:{} -->", hex::encode(&tag[..16]))
}

impl Comments<'_> {
    fn body(&self, message: &ChatMessage) -> String {
        format!("{}\n\n{}", message.text, marker(self.secret, &message.id))
    }
}

/// `owner/name#number` → the repository and the issue number.
fn issue_of(chat: &str) -> Result<(GithubRepo, u64), GithubError> {
    chat.rsplit_once('#')
        .and_then(|(repo, number)| Some((GithubRepo::parse(repo)?, number.parse().ok()?)))
        .ok_or_else(|| GithubError::Config(format!("{chat:?} is not owner/name#number")))
}

impl Transport for Comments<'_> {
    type Error = GithubError;

    async fn send(&self, message: &ChatMessage) -> Result<String, GithubError> {
        let (repo, number) = issue_of(&message.chat)?;
        if message.state == ChatMessageState::Sending {
            // Created before without its id recorded? Its marker says so.
            let marker = marker(self.secret, &message.id);
            let found = self
                .client
                .issue_comments(&repo, number, RECONCILE_PAGES)
                .await?
                .into_iter()
                .find(|(_, body)| body.contains(&marker));
            if let Some((id, body)) = found {
                tracing::info!(message = %message.id, comment = id, "github comment created before found by its marker");
                if body != self.body(message) {
                    self.client
                        .update_issue_comment(&repo, id, &self.body(message))
                        .await?;
                }
                return Ok(id.to_string());
            }
        }
        let id = self
            .client
            .create_issue_comment(&repo, number, &self.body(message))
            .await?;
        Ok(id.to_string())
    }

    async fn edit(&self, message: &ChatMessage, sent: &str) -> Result<(), GithubError> {
        let (repo, _) = issue_of(&message.chat)?;
        let id = sent
            .parse()
            .map_err(|_| GithubError::Config(format!("{sent:?} is not a comment id")))?;
        self.client
            .update_issue_comment(&repo, id, &self.body(message))
            .await
    }
}

impl DeliveryError for GithubError {
    fn is_retryable(&self) -> bool {
        GithubError::is_retryable(self)
    }

    fn retry_after(&self) -> Option<Duration> {
        GithubError::retry_after(self)
    }

    fn is_not_modified(&self) -> bool {
        false
    }
}

/// The store keys chat updates by a number; GitHub's delivery ids are GUIDs. The key of `id`
/// is the first 63 bits of SHA-256(`github:delivery:{id}`) (see [`crate::slack::update_key`]
/// for the odds of two sharing one: the later would be ignored, never doubled).
pub fn update_key(id: &str) -> i64 {
    key_of(&format!("github:delivery:{id}"))
}

/// The first 63 bits of SHA-256(`text`).
fn key_of(text: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first) & i64::MAX
}

/// The key recording that delivery `id` of `subject` was received (before it was handled).
fn received_key(id: &str, subject: &Subject) -> i64 {
    key_of(&format!("github:received:{id}\n{}", subject.identity))
}

/// What a delivery's signed body is about, the same however often and under whatever delivery
/// id it arrives: the event, its action, and the comment, issue, review, check run or check
/// suite with its id and its own time (a comment's or issue's `updated_at`, a review's
/// `submitted_at`, a check run's `completed_at`, a check suite's `updated_at`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `event`, `action`, the object's id and its time as written, one line each.
    identity: String,
    /// That time, in milliseconds since the Unix epoch, when it reads as RFC 3339.
    at_ms: Option<i64>,
}

impl Subject {
    /// `None` for an event without such an object (or whose object has no id).
    pub fn of(event: &str, payload: &Value) -> Option<Subject> {
        let (object, times): (&Value, &[&str]) = match event {
            "issue_comment" | "pull_request_review_comment" => {
                (&payload["comment"], &["updated_at", "created_at"])
            }
            "issues" => (&payload["issue"], &["updated_at", "created_at"]),
            "pull_request_review" => (&payload["review"], &["submitted_at"]),
            "check_run" => (&payload["check_run"], &["completed_at", "started_at"]),
            "check_suite" => (&payload["check_suite"], &["updated_at", "created_at"]),
            _ => return None,
        };
        let id = object["id"].as_u64()?;
        let time = times.iter().find_map(|name| object[*name].as_str());
        Some(Subject {
            identity: format!(
                "{event}\n{}\n{id}\n{}",
                payload["action"].as_str().unwrap_or_default(),
                time.unwrap_or_default()
            ),
            at_ms: time.and_then(|time| warden_time::parse_rfc3339(time).ok()),
        })
    }

    /// The key recording that the subject was handled.
    fn key(&self) -> i64 {
        key_of(&format!("github:event:{}", self.identity))
    }

    /// The event's id in what handling it writes (the idempotency key of the task it submits,
    /// its replies' ids): `e` and 16 hex digits of the subject's SHA-256.
    fn id(&self) -> String {
        format!("e{:016x}", self.key())
    }
}

/// The credentials checked once as `serve` checks them at start-up (`GET /rate_limit` for a
/// token, the App's installation under its JWT), for `warden doctor`. `None` when neither is
/// configured.
pub async fn check_online(settings: &GithubSettings) -> Option<Result<String, String>> {
    let auth = settings.auth()?;
    let (what, path) = match &auth {
        crate::github_client::GithubAuth::Token(_) => ("WARDEN_GITHUB_TOKEN", "/rate_limit"),
        crate::github_client::GithubAuth::App(_) => {
            ("the GitHub App ([github.app])", "/app/installations/{id}")
        }
    };
    let client = match GithubClient::new(GithubClientConfig::with_auth(&settings.api_url, auth)) {
        Ok(client) => client,
        Err(error) => return Some(Err(error.to_string())),
    };
    Some(match client.check_auth().await {
        Ok(()) => Ok(format!("GitHub accepted {what} ({path})")),
        Err(error) => Err(format!("GitHub refused {what}: {error}")),
    })
}

/// Checks GitHub's credentials once at start-up (`warden serve`), when any are configured: a
/// token or App key GitHub refuses, or an App not installed where configured, is reported on
/// stderr, in the log and to the chats' alerts ([`crate::chat::Alerts`]), since publication and
/// the webhook's replies will fail until it is fixed. An unreachable GitHub is retried a few
/// times, then left to the operations that need it.
pub fn check_at_start(
    settings: &GithubSettings,
    alerts: crate::chat::Alerts,
) -> Option<tokio::task::JoinHandle<()>> {
    let auth = settings.auth()?;
    let what = match &auth {
        crate::github_client::GithubAuth::Token(_) => "WARDEN_GITHUB_TOKEN",
        crate::github_client::GithubAuth::App(_) => {
            "the GitHub App's key or installation ([github.app])"
        }
    };
    let client = match GithubClient::new(GithubClientConfig::with_auth(&settings.api_url, auth)) {
        Ok(client) => client,
        Err(error) => {
            tracing::warn!(%error, "no GitHub client to check the credentials with");
            return None;
        }
    };
    Some(tokio::spawn(async move {
        for attempt in 1..=5u32 {
            match client.check_auth().await {
                Ok(()) => {
                    tracing::info!("github accepted the credentials");
                    return;
                }
                Err(error) if error.is_retryable() => {
                    tracing::warn!(%error, attempt, "github unreachable while checking the credentials");
                    tokio::time::sleep(std::time::Duration::from_secs(2 * u64::from(attempt)))
                        .await;
                }
                Err(error) => {
                    let why = format!("GitHub refused {what}: {error}");
                    tracing::error!("{why}");
                    crate::say!(
                        "warden: {why}; publishing and GitHub replies will fail until it is fixed"
                    );
                    alerts
                        .report(
                            "github",
                            &format!("{why}. Publishing and GitHub replies fail until it is fixed; then restart `warden serve`."),
                        )
                        .await;
                    return;
                }
            }
        }
    }))
}

/// Starts the interface's delivery when `[github.webhook]` is configured (`warden serve`):
/// follows tasks and edits their comments until `stop`. The webhook is served by the API with
/// the returned hook.
pub fn spawn(
    settings: &GithubSettings,
    tasks: TaskService,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Option<(Arc<GithubHook>, tokio::task::JoinHandle<()>)>> {
    let Some(hook) = GithubHook::new(settings, tasks)? else {
        return Ok(None);
    };
    let hook = Arc::new(hook);
    crate::say!(
        "warden: github webhook (mention @{}) is serving /webhooks/github",
        hook.config.handle
    );
    let handle = tokio::spawn(crate::chat::delivery_loop(Arc::clone(&hook), stop));
    Ok(Some((hook, handle)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_map_to_distinct_non_negative_keys() {
        let a = update_key("72d3162e-cc78-11e3-81ab-4c9367dc0958");
        assert!(a >= 0);
        assert_eq!(a, update_key("72d3162e-cc78-11e3-81ab-4c9367dc0958"));
        assert_ne!(a, update_key("72d3162e-cc78-11e3-81ab-4c9367dc0959"));
    }

    #[test]
    fn a_subject_is_the_event_action_object_and_its_time_whatever_the_delivery() {
        let comment = |id: u64, at: &str, body: &str| {
            json!({"action": "created", "comment": {"id": id, "updated_at": at, "body": body},
                   "issue": {"id": 9, "number": 1, "updated_at": "2026-01-01T00:00:00Z"}})
        };
        let a = Subject::of("issue_comment", &comment(1, "2026-12-03T14:00:00Z", "a")).unwrap();
        assert_eq!(a.at_ms, Some(1_796_306_400_000));
        // The same comment however its body reads (an edit is another action and time).
        let same = Subject::of("issue_comment", &comment(1, "2026-12-03T14:00:00Z", "b"));
        assert_eq!(same.as_ref(), Some(&a));
        assert_eq!(same.unwrap().id(), a.id());
        for other in [
            Subject::of("issue_comment", &comment(2, "2026-12-03T14:00:00Z", "a")),
            Subject::of("issue_comment", &comment(1, "2026-12-03T14:00:01Z", "a")),
            Subject::of("issues", &comment(1, "2026-12-03T14:00:00Z", "a")),
        ] {
            let other = other.unwrap();
            assert_ne!(other.key(), a.key(), "{other:?}");
            assert_ne!(received_key("d-1", &other), received_key("d-1", &a));
        }
        assert_ne!(received_key("d-1", &a), received_key("d-2", &a));
        assert_ne!(received_key("d-1", &a), a.key());
        assert_ne!(a.key(), update_key("d-1"));
        let run = json!({"action": "completed",
                         "check_run": {"id": 5, "completed_at": "2026-12-03T14:01:00Z"}});
        assert_eq!(
            Subject::of("check_run", &run).unwrap().at_ms,
            Some(1_796_306_460_000)
        );
        // Nothing to know it by: the delivery id alone.
        assert_eq!(Subject::of("ping", &run), None);
        assert_eq!(Subject::of("check_suite", &run), None);
    }

    #[test]
    fn markers_are_keyed_by_the_secret_and_the_message() {
        let a = marker(b"secret", "gh:task:tsk_1");
        assert!(
            a.starts_with("<!-- warden:gh:task:tsk_1:") && a.ends_with(" -->"),
            "{a}"
        );
        assert_eq!(a, marker(b"secret", "gh:task:tsk_1"));
        assert_ne!(a, marker(b"another", "gh:task:tsk_1"));
        assert_ne!(a, marker(b"secret", "gh:task:tsk_2"));
    }

    #[test]
    fn repositories_match_whatever_their_case() {
        let configured = GithubRepo::parse("codertocat/hello-world").unwrap();
        let delivered = GithubRepo::parse("Codertocat/Hello-World").unwrap();
        assert!(same_repo(&configured, &delivered));
        assert!(!same_repo(
            &configured,
            &GithubRepo::parse("Codertocat/Hello-Worlds").unwrap()
        ));
        assert!(!same_repo(
            &configured,
            &GithubRepo::parse("Octocoders/Hello-World").unwrap()
        ));
    }

    #[test]
    fn comment_targets_are_read_back() {
        let (repo, number) = issue_of("acme/widgets#12").unwrap();
        assert_eq!((repo.to_string(), number), ("acme/widgets".to_string(), 12));
        assert!(issue_of("acme/widgets").is_err());
        assert!(issue_of("acme#1").is_err());
    }
}
