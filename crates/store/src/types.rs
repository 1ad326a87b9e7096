//! The rows the store reads and writes. Timestamps are milliseconds since the Unix epoch from
//! the store's clock (`*_at_ms`); JSON columns are `serde_json::Value`; token counts are `u64`
//! and money is integer micro-dollars (`None` when a price was unknown, never zero).

use std::fmt;

use warden_protocol::{Event, TaskId, TaskKind, TaskStatus};

pub use warden_protocol::views::{
    ApprovalStatus, Spend, TaskMessage, TaskRepo, UsageSummary, MESSAGE_AGENT, MESSAGE_STEER,
    MESSAGE_USER,
};

/// A repository to register.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRepo {
    pub name: String,
    pub source: String,
    pub branch: Option<String>,
    pub checks: Vec<String>,
    /// Host directories shown read-only in this repository's sandboxes.
    pub mounts: Vec<String>,
    /// Commands filling this repository's dependency cache before a change task's agent.
    pub prepare: Vec<String>,
    pub created_by: String,
}

/// A repository registered with the server (`POST /v1/repos`, SPEC §1), by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repository {
    pub name: String,
    /// A path on the server or a git URL, as given (credentials included: never shown).
    pub source: String,
    /// The default branch; `None` means the source's `HEAD`.
    pub branch: Option<String>,
    /// Check commands (how to validate a change).
    pub checks: Vec<String>,
    /// Host directories shown read-only in this repository's sandboxes (on top of
    /// `[sandbox] mounts`).
    pub mounts: Vec<String>,
    /// Commands filling this repository's dependency cache before a change task's agent
    /// (replacing `[sandbox] prepare`).
    pub prepare: Vec<String>,
    /// Who registered it (the API token's name).
    pub created_by: String,
    pub created_at_ms: i64,
}

/// A task to create. It starts `queued`.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTask {
    pub id: TaskId,
    pub kind: TaskKind,
    pub owner: String,
    pub prompt: String,
    pub repos: Vec<TaskRepo>,
    /// Higher runs first; equal priorities run in creation order.
    pub priority: i32,
    pub follow_up_to: Option<TaskId>,
    /// Set for a retry: the terminal task this one repeats.
    pub retry_of: Option<TaskId>,
    pub metadata: serde_json::Value,
    /// Where to POST the result when the task ends (validated by the caller).
    pub callback_url: Option<String>,
}

/// A stored task.
#[derive(Debug, Clone, PartialEq)]
pub struct Task {
    pub id: TaskId,
    pub kind: TaskKind,
    pub status: TaskStatus,
    pub owner: String,
    pub prompt: String,
    pub repos: Vec<TaskRepo>,
    pub priority: i32,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub follow_up_to: Option<TaskId>,
    pub retry_of: Option<TaskId>,
    /// The result JSON of SPEC §5, once there is one.
    pub result: Option<serde_json::Value>,
    pub metadata: serde_json::Value,
    /// Runs started so far (the number of the latest run).
    pub runs: u32,
    /// Runs that lost their lease; at [`crate::MAX_INTERRUPTED_RUNS`] the task is abandoned.
    pub interrupted_runs: u32,
    /// Where to POST the result when the task ends.
    pub callback_url: Option<String>,
}

/// `Idempotency-Key` handling for task creation: the same key and owner with the same request
/// hash returns the task created the first time; with another hash it is a conflict.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    pub owner: String,
    /// A hash of the request body, computed by the caller.
    pub request_hash: String,
}

/// What `create_task` did.
#[derive(Debug, Clone, PartialEq)]
pub enum Created {
    /// A new task was stored.
    New(Task),
    /// The idempotency key was seen before with the same request: the task it created then.
    Replayed(Task),
}

impl Created {
    pub fn task(&self) -> &Task {
        match self {
            Created::New(task) | Created::Replayed(task) => task,
        }
    }

    pub fn into_task(self) -> Task {
        match self {
            Created::New(task) | Created::Replayed(task) => task,
        }
    }
}

/// A page of tasks, newest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskQuery {
    pub owner: Option<String>,
    pub status: Option<TaskStatus>,
    /// Cursor: only tasks with an id below this one (the last id of the previous page).
    pub before: Option<TaskId>,
    pub limit: u32,
}

impl Default for TaskQuery {
    fn default() -> TaskQuery {
        TaskQuery {
            owner: None,
            status: None,
            before: None,
            limit: 50,
        }
    }
}

/// Which queued tasks a worker takes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClaimFilter {
    /// Only these kinds; empty means any kind.
    pub kinds: Vec<TaskKind>,
    /// Only this task (the worker of an in-process `warden ask`/`run` runs its own task and
    /// nobody else's).
    pub task: Option<TaskId>,
}

/// A run of a task: `(task, number)`, numbers counting from 1.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunRef {
    pub task: TaskId,
    pub number: u32,
}

impl fmt::Display for RunRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.task, self.number)
    }
}

/// A claimed task: now `running`, with a new run leased to the claiming worker.
#[derive(Debug, Clone, PartialEq)]
pub struct Claim {
    pub task: Task,
    pub run_number: u32,
    pub lease_expires_at_ms: i64,
}

impl Claim {
    pub fn run(&self) -> RunRef {
        RunRef {
            task: self.task.id.clone(),
            number: self.run_number,
        }
    }
}

/// `Run::outcome` of a run whose lease expired while its task was running.
pub const RUN_INTERRUPTED: &str = "interrupted";

/// One execution attempt of a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub task: TaskId,
    pub number: u32,
    pub worker: String,
    pub started_at_ms: i64,
    pub heartbeat_at_ms: i64,
    pub lease_expires_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    /// How it ended: the status its task moved to (`completed`, `queued`, …) or
    /// [`RUN_INTERRUPTED`].
    pub outcome: Option<String>,
}

/// A run that `requeue_expired` found with an expired lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requeued {
    pub run: RunRef,
    /// `queued` for another run, or `failed` (abandoned) after too many interruptions.
    pub status: TaskStatus,
}

/// Which event sequence to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventStream {
    /// One task's events, by its own sequence (`GET /v1/tasks/{id}/events`).
    Task(TaskId),
    /// Every task's events, by the global sequence (`GET /v1/events`).
    All,
}

/// A stored event. Both sequences start at 1, increase with commit order and have no gaps a
/// reader could miss: resuming after the last seen number never skips an event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    pub seq: u64,
    pub task_seq: u64,
    pub task: TaskId,
    pub at_ms: i64,
    pub event: Event,
}

/// One model call's spend, appended to the ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageEntry {
    pub task: TaskId,
    pub run_number: Option<u32>,
    pub model: String,
    /// Who made the call: `agent`, `explorer` or `reviewer` (entries from before the column
    /// existed read as `agent`).
    pub role: String,
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// `None` when the model's price is unknown: the spend is then flagged, never taken as 0.
    pub cost_micro_usd: Option<u64>,
}

/// An approval request bound to the hash of exactly what it approves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApproval {
    pub id: String,
    pub task: TaskId,
    /// What is approved (`publish`, `command`, `dirty_start`, …).
    pub kind: String,
    pub subject_hash: String,
}

pub use warden_protocol::Decision;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    pub id: String,
    pub task: TaskId,
    pub kind: String,
    pub subject_hash: String,
    pub status: ApprovalStatus,
    pub created_at_ms: i64,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub consumed_at_ms: Option<i64>,
}

/// A side effect to perform (push, open a PR, POST a callback), recorded before it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct NewIntent {
    pub id: String,
    pub task: TaskId,
    pub kind: String,
    pub payload: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IntentStatus {
    Pending,
    Done,
    Failed,
}

impl IntentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            IntentStatus::Pending => "pending",
            IntentStatus::Done => "done",
            IntentStatus::Failed => "failed",
        }
    }

    pub fn parse(name: &str) -> Option<IntentStatus> {
        [
            IntentStatus::Pending,
            IntentStatus::Done,
            IntentStatus::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Intent {
    pub id: String,
    pub task: TaskId,
    pub kind: String,
    pub payload: serde_json::Value,
    pub status: IntentStatus,
    /// Claims so far.
    pub attempts: u32,
    pub next_attempt_at_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub done_at_ms: Option<i64>,
}

/// An API token to store. Only the digest of the secret is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewApiToken {
    pub id: String,
    /// Who the token acts as (a task's `owner`).
    pub name: String,
    /// `admin`, `operator` or `viewer` (checked by the caller).
    pub role: String,
    /// Lowercase hex SHA-256 of the token.
    pub digest: String,
    pub created_by: String,
}

/// A stored API token (never the secret itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    pub id: String,
    pub name: String,
    pub role: String,
    pub digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    /// Set once revoked; a revoked token never authenticates again.
    pub revoked_at_ms: Option<i64>,
}

/// A web console user: a name, a role and a password kept only as a PHC string (the
/// service hashes it; the store never sees the password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebUser {
    pub name: String,
    /// `admin`, `operator` or `viewer` (checked by the caller).
    pub role: String,
    /// A PHC string (`$argon2id$v=19$…`).
    pub password_hash: String,
    pub created_at_ms: i64,
    /// When the role or the password was last set.
    pub updated_at_ms: i64,
}

/// [`WebSession::credential`] of a session signed in with a web user's password; any other
/// value is the lowercase hex SHA-256 digest of the API token that signed it in.
pub const WEB_CREDENTIAL_PASSWORD: &str = "password";

/// A web console session to store. Only the digest of its cookie secret is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWebSession {
    /// `ses_` + 16 hex digits.
    pub id: String,
    /// Lowercase hex SHA-256 of the cookie secret.
    pub digest: String,
    /// Who signed in (a web user's or a token's name).
    pub name: String,
    /// The role at sign-in, for listings; the service re-derives the role on every use.
    pub role_at_sign_in: String,
    /// [`WEB_CREDENTIAL_PASSWORD`] or the hex digest of the API token used.
    pub credential: String,
    pub address: Option<String>,
    pub user_agent: Option<String>,
    /// The session expires this long after the store clock's now at creation.
    pub lifetime: std::time::Duration,
}

/// A stored web console session (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    pub id: String,
    pub digest: String,
    pub name: String,
    pub role_at_sign_in: String,
    pub credential: String,
    pub address: Option<String>,
    pub user_agent: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    /// Set once revoked (signed out, revoked by someone, or its password was replaced).
    pub revoked_at_ms: Option<i64>,
}

/// Which ledger entries a usage summary covers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageQuery {
    /// Only entries of tasks owned by this caller.
    pub owner: Option<String>,
    /// Only entries recorded at or after this instant.
    pub since_ms: Option<i64>,
}

/// A chat message to send (Telegram today): the chat-side outbox. Its `id` is chosen by the
/// caller and deterministic (`tg:u:<update>` for the reply to an update), so recording it twice
/// is a no-op and a crash can never turn one message into two rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewChatMessage {
    pub id: String,
    /// `telegram`.
    pub channel: String,
    /// The chat it goes to, as the channel spells it (a Telegram chat id in decimal).
    pub chat: String,
    /// The task whose progress it shows, if any.
    pub task: Option<TaskId>,
    pub text: String,
    /// The channel's reply markup (Telegram's `reply_markup` JSON), if any.
    pub markup: Option<String>,
}

/// Where a chat message is in its delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChatMessageState {
    /// Not sent yet.
    Pending,
    /// A send started and its outcome was not recorded (a crash or an ambiguous failure in
    /// between): the channel may or may not hold it.
    Sending,
    /// Sent; `message_id` is the channel's id for it. A `revision` past `delivered_revision` is
    /// an edit still to make.
    Sent,
    /// Given up on (refused for good, or out of attempts).
    Failed,
}

impl ChatMessageState {
    pub fn as_str(self) -> &'static str {
        match self {
            ChatMessageState::Pending => "pending",
            ChatMessageState::Sending => "sending",
            ChatMessageState::Sent => "sent",
            ChatMessageState::Failed => "failed",
        }
    }

    pub fn parse(name: &str) -> Option<ChatMessageState> {
        [
            ChatMessageState::Pending,
            ChatMessageState::Sending,
            ChatMessageState::Sent,
            ChatMessageState::Failed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// A stored chat message and its delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    pub id: String,
    pub channel: String,
    pub chat: String,
    pub task: Option<TaskId>,
    pub text: String,
    pub markup: Option<String>,
    pub state: ChatMessageState,
    /// The channel's id for the message, recorded once it accepted it.
    pub message_id: Option<String>,
    /// Bumped by each change of text or markup.
    pub revision: i64,
    /// The revision the channel shows.
    pub delivered_revision: i64,
    /// Delivery attempts since the last success.
    pub attempts: u32,
    pub next_attempt_at_ms: i64,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl ChatMessage {
    /// An edit to make: sent, and changed since.
    pub fn needs_edit(&self) -> bool {
        self.state == ChatMessageState::Sent && self.revision > self.delivered_revision
    }
}
