//! What the front door (`warden_service::tasks::TaskService` and `Access`) gives interfaces:
//! a task, an approval, a repository, spend, a task's conversation, an API token, as every
//! interface shows them. The HTTP API answers with these types as they serialise (SPEC §6),
//! the CLI and MCP render them, the console reads their fields; none of them reads the store.
//!
//! A few are also what the store keeps ([`TaskRepo`], [`ApprovalStatus`], [`Spend`],
//! [`UsageSummary`], [`TaskMessage`]): the store re-exports them. The others are built by the
//! service from its rows and hold only what may be shown (no token digests, no credentials in
//! sources, no internal counters).
//!
//! With the `openapi` feature each derives `utoipa::ToSchema`: the API's `/openapi.json`
//! describes exactly the types it serialises.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::{TaskId, TaskKind, TaskStatus};

/// An instant, in milliseconds since the Unix epoch; on the wire RFC 3339 in UTC with
/// milliseconds (`2026-12-05T14:20:01.123Z`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(pub i64);

impl Timestamp {
    /// Milliseconds since the Unix epoch.
    pub fn ms(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&warden_time::rfc3339(self.0))
    }
}

impl Serialize for Timestamp {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Timestamp, D::Error> {
        let text = String::deserialize(deserializer)?;
        warden_time::parse_rfc3339(&text)
            .map(Timestamp)
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(feature = "openapi")]
mod schemas {
    //! Schemas of the types whose serialisation is written by hand.

    use std::borrow::Cow;

    use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
    use utoipa::openapi::RefOr;
    use utoipa::{PartialSchema, ToSchema};

    impl PartialSchema for super::Timestamp {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
                .description(Some("RFC 3339, UTC, with milliseconds."))
                .into()
        }
    }

    impl ToSchema for super::Timestamp {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("Timestamp")
        }
    }

    impl PartialSchema for crate::TaskId {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("`tsk_` + 26 Crockford base-32 characters."))
                .pattern(Some("^tsk_[0-9A-HJKMNP-TV-Z]{26}$"))
                .into()
        }
    }

    impl PartialSchema for super::JournalCursor {
        fn schema() -> RefOr<Schema> {
            ObjectBuilder::new()
                .schema_type(Type::String)
                .description(Some("`<run>.<seq>`: the last record of a page."))
                .pattern(Some(r"^[0-9]+\.[0-9]+$"))
                .into()
        }
    }

    impl ToSchema for super::JournalCursor {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("JournalCursor")
        }
    }

    impl ToSchema for crate::TaskId {
        fn name() -> Cow<'static, str> {
            Cow::Borrowed("TaskId")
        }
    }
}

/// One repository a task runs against. `name` is the registered repository name and the key
/// of the one-writer-per-repository rule; `rev` is what the submitter asked for, if anything;
/// `commit` is the exact commit the first run pinned it to (every later run reuses it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = TaskRepoView))]
#[serde(deny_unknown_fields)]
pub struct TaskRepo {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rev: Option<String>,
    /// 40 hex digits, once pinned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Where an in-process task's repository comes from when it is not a registered one: an
    /// absolute local path, or a URL without credentials (never starting with `/`). Only the
    /// in-process front door sets it; the HTTP API builds task repositories from registered
    /// names and cannot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl TaskRepo {
    pub fn named(name: &str) -> TaskRepo {
        TaskRepo {
            name: name.to_string(),
            rev: None,
            commit: None,
            source: None,
        }
    }
}

/// A task as interfaces show it: the object of `GET /v1/tasks/{id}`. `result` is the result
/// JSON of SPEC §5 once the task has one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TaskView {
    pub id: TaskId,
    pub kind: TaskKind,
    pub status: TaskStatus,
    pub owner: String,
    pub repos: Vec<TaskRepo>,
    pub prompt: String,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
    pub follow_up_to: Option<TaskId>,
    pub retry_of: Option<TaskId>,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub metadata: serde_json::Value,
    /// Runs started so far.
    pub runs: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub result: Option<serde_json::Value>,
}

/// Where an approval stands in the store: `consumed` is approved and used (an approval
/// authorises exactly one action). The result JSON's [`crate::ApprovalStatus`] has no
/// `consumed`: a result is written before its approval is used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Rejected,
    /// Approved and then used: an approval authorises exactly one action.
    Consumed,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Rejected => "rejected",
            ApprovalStatus::Consumed => "consumed",
        }
    }

    pub fn parse(name: &str) -> Option<ApprovalStatus> {
        [
            ApprovalStatus::Pending,
            ApprovalStatus::Approved,
            ApprovalStatus::Rejected,
            ApprovalStatus::Consumed,
        ]
        .into_iter()
        .find(|s| s.as_str() == name)
    }
}

/// An approval request bound to the hash of exactly what it approves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ApprovalView {
    /// `apr_…`.
    pub id: String,
    pub task_id: TaskId,
    /// What is approved: `publish`, `publish_sensitive`, `command`, `dirty_start`, …
    pub kind: String,
    /// `sha256:` + 64 hex digits: the hash of exactly what is approved.
    pub subject_hash: String,
    pub status: ApprovalStatus,
    pub created_at: Timestamp,
    pub decided_by: Option<String>,
    pub decided_at: Option<Timestamp>,
    pub consumed_at: Option<Timestamp>,
}

/// A registered repository as it may be shown: its source without credentials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RepoView {
    pub name: String,
    /// The source path or URL, credentials redacted.
    pub source: String,
    /// The default branch; `null`: the source's `HEAD`.
    pub branch: Option<String>,
    pub checks: Vec<String>,
    /// Server directories shown read-only in this repository's sandboxes.
    pub mounts: Vec<String>,
    /// Commands filling this repository's dependency cache before a change task's agent.
    pub prepare: Vec<String>,
    pub created_by: String,
    pub created_at: Timestamp,
    /// Fetching it and writing the snapshot of its default branch, started when it was
    /// registered on this server process (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm: Option<Warmth>,
}

/// Where warming a registered repository stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum WarmState {
    Warming,
    Ready,
    Failed,
}

/// What warming a repository is doing, for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = WarmView))]
pub struct Warmth {
    pub state: WarmState,
    /// The latest progress line (objects received, files written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// Once ready: the commit of the default branch now in the snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Once failed: why (tasks pin again when they start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Sums over ledger entries. Money is integer micro-dollars.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Spend {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub output_tokens: u64,
    /// The sum of the known costs.
    pub cost_micro_usd: u64,
    /// At least one entry had an unknown cost: the true cost is higher than `cost_micro_usd`.
    pub cost_unknown: bool,
    pub entries: u64,
}

impl Spend {
    /// Adds `other`'s sums to these.
    pub fn add(&mut self, other: &Spend) {
        self.input_tokens += other.input_tokens;
        self.cached_input_tokens += other.cached_input_tokens;
        self.output_tokens += other.output_tokens;
        self.cost_micro_usd += other.cost_micro_usd;
        self.cost_unknown |= other.cost_unknown;
        self.entries += other.entries;
    }
}

/// Spend grouped four ways, each sorted by its key (day, task id, model, role).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UsageSummary {
    pub by_day: Vec<(warden_time::UtcDay, Spend)>,
    pub by_task: Vec<(TaskId, Spend)>,
    pub by_model: Vec<(String, Spend)>,
    pub by_role: Vec<(String, Spend)>,
}

/// `TaskMessage::role` of a message from a human (an answer).
pub const MESSAGE_USER: &str = "user";
/// `TaskMessage::role` of a message from the agent (a question it asked).
pub const MESSAGE_AGENT: &str = "agent";
/// `TaskMessage::role` of a message a human sent while the task was queued or running: the
/// agent reads it at its next turn.
pub const MESSAGE_STEER: &str = "steer";

/// One message of a task's conversation (questions asked, answers given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskMessage {
    /// Per task, from 1, in append order.
    pub seq: u64,
    /// [`MESSAGE_USER`], [`MESSAGE_AGENT`] or [`MESSAGE_STEER`].
    pub role: String,
    pub text: String,
    /// Who wrote it (a token name, or the model for the agent).
    pub author: String,
    pub at_ms: i64,
}

/// What a principal may do: `viewer` reads, `operator` also submits and acts on its own tasks,
/// `admin` does everything on every owner's tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// Everything, including everyone's tasks, approvals and registering repositories.
    Admin,
    /// Submits, answers, cancels and retries tasks, and sees its own.
    Operator,
    /// Reads its own tasks and the repositories.
    Viewer,
}

impl Role {
    pub fn parse(name: &str) -> Option<Role> {
        match name {
            "admin" => Some(Role::Admin),
            "operator" => Some(Role::Operator),
            "viewer" => Some(Role::Viewer),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

/// A stored API token as it may be shown (never its secret, nor its digest).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct TokenView {
    /// `tok_…`.
    pub id: String,
    /// Who the token acts as (a task's `owner`).
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    #[cfg_attr(feature = "openapi", schema(value_type = Role))]
    pub role: String,
    pub created_by: String,
    pub created_at: Timestamp,
    /// Set once revoked; a revoked token never authenticates again.
    pub revoked_at: Option<Timestamp>,
}

/// A web console user as it may be shown (never its password hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebUserView {
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    pub role: String,
    pub created_at: Timestamp,
    /// When the role or the password was last set.
    pub updated_at: Timestamp,
}

/// How a web session signed in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(rename_all = "snake_case")]
pub enum SignInMethod {
    /// A web user's password (`warden web passwd`).
    Password,
    /// An API token, pasted once.
    Token,
}

impl SignInMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            SignInMethod::Password => "password",
            SignInMethod::Token => "token",
        }
    }
}

/// A web console session as it may be shown: never its secret or a digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = WebSessionView))]
pub struct SessionView {
    /// `ses_` + 16 hex digits.
    pub id: String,
    /// Who signed in (a web user's or a token's name).
    pub name: String,
    /// The role when it signed in (the role it acts with is re-derived on every use).
    #[cfg_attr(feature = "openapi", schema(value_type = Role))]
    pub role_at_sign_in: String,
    pub method: SignInMethod,
    pub address: Option<String>,
    pub user_agent: Option<String>,
    pub created_at: Timestamp,
    pub expires_at: Timestamp,
    pub revoked_at: Option<Timestamp>,
}

/// A change task's proposal and its diff against its base commit, secrets redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[cfg_attr(feature = "openapi", schema(as = DiffView))]
pub struct ProposalDiff {
    pub task_id: TaskId,
    pub repo: String,
    /// 40 (or 64) hex digits.
    pub base_commit: String,
    pub commit: String,
    /// The proposal hash approvals bind to.
    pub hash: String,
    /// Unified diff (`git diff-tree -p`), registered secrets, credential-looking strings and
    /// the values of sensitive files replaced by `[redacted]`.
    pub diff: String,
    /// The diff was longer than the server serves and was cut at a line end.
    pub truncated: bool,
    /// Changed paths that need a `publish_sensitive` approval to publish.
    pub sensitive_files: Vec<String>,
}

/// Where a journal page ends: the last record given, `<run>.<seq>` on the wire (runs count
/// from 1); the next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct JournalCursor {
    pub run: u32,
    pub seq: u64,
}

impl fmt::Display for JournalCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.run, self.seq)
    }
}

impl std::str::FromStr for JournalCursor {
    type Err = String;

    /// `<run>.<seq>`, ASCII digits only, the run from 1.
    fn from_str(text: &str) -> Result<JournalCursor, String> {
        let invalid = || format!("invalid cursor {text:?}: expected <run>.<seq>");
        let (run, seq) = text.split_once('.').ok_or_else(invalid)?;
        let digits = |part: &str| !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit());
        if !digits(run) || !digits(seq) {
            return Err(invalid());
        }
        let run = run
            .parse()
            .ok()
            .filter(|run| *run >= 1)
            .ok_or_else(invalid)?;
        Ok(JournalCursor {
            run,
            seq: seq.parse().map_err(|_| invalid())?,
        })
    }
}

impl Serialize for JournalCursor {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for JournalCursor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<JournalCursor, D::Error> {
        String::deserialize(deserializer)?
            .parse()
            .map_err(serde::de::Error::custom)
    }
}

/// One run of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RunView {
    /// From 1.
    pub number: u32,
    pub worker: String,
    pub started_at: Timestamp,
    /// `null` while the run is open.
    pub ended_at: Option<Timestamp>,
    /// How the run ended: the status its task moved to, or `interrupted`; `null` while open.
    pub outcome: Option<String>,
}

/// One journal record, redacted when it was written (and for display).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalRecordView {
    /// The run's number, from 1.
    pub run: u32,
    /// From 0 in each run.
    pub seq: u64,
    /// `run_started`, `model_requested`, `model_decision`, `tool_observation`, …
    pub kind: String,
    pub at: Timestamp,
    /// SHA-256 over the record and `prev_hash`, hex.
    pub hash: String,
    pub prev_hash: String,
    #[cfg_attr(feature = "openapi", schema(value_type = Object))]
    pub payload: serde_json::Value,
    /// Whether the record continues the record before it in its run (checked by the server
    /// against the stored record, whichever page it is on) and its hash matches its content.
    pub chain_ok: bool,
}

/// A page of a task's journal: `GET /v1/tasks/{id}/journal`, and what `warden logs` reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct JournalPage {
    /// The task's runs (only the one asked for with `run`), on every page.
    pub runs: Vec<RunView>,
    /// Journal records, oldest run first, in sequence within a run.
    pub data: Vec<JournalRecordView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<JournalCursor>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timestamp_is_rfc3339_on_the_wire_both_ways() {
        let at = Timestamp(1_764_944_401_123);
        let text = serde_json::to_string(&at).unwrap();
        assert_eq!(text, "\"2025-12-05T14:20:01.123Z\"");
        assert_eq!(serde_json::from_str::<Timestamp>(&text).unwrap(), at);
        let error = serde_json::from_str::<Timestamp>("\"2025-13-05T14:20:01Z\"").unwrap_err();
        assert!(error.to_string().contains("2025-13-05"), "{error}");
    }

    #[test]
    fn a_task_view_reads_back_what_it_writes_and_omits_what_it_lacks() {
        let view = TaskView {
            id: "tsk_01JABCDEFGHJKMNPQRSTVWXYZ0".parse().unwrap(),
            kind: TaskKind::Question,
            status: TaskStatus::WaitingInput,
            owner: "ada".into(),
            repos: vec![TaskRepo::named("app")],
            prompt: "why?".into(),
            created_at: Timestamp(0),
            updated_at: Timestamp(1),
            follow_up_to: None,
            retry_of: None,
            metadata: serde_json::json!({}),
            runs: 1,
            result: None,
        };
        let value = serde_json::to_value(&view).unwrap();
        assert_eq!(value["status"], "waiting_input");
        assert_eq!(value["created_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(value["repos"], serde_json::json!([{"name": "app"}]));
        assert!(value.get("result").is_none(), "{value}");
        assert_eq!(value["follow_up_to"], serde_json::Value::Null);
        assert_eq!(serde_json::from_value::<TaskView>(value).unwrap(), view);
    }

    #[test]
    fn a_journal_cursor_is_run_dot_seq_and_nothing_else() {
        let cursor: JournalCursor = "3.41".parse().unwrap();
        assert_eq!(cursor, JournalCursor { run: 3, seq: 41 });
        assert_eq!(cursor.to_string(), "3.41");
        assert_eq!(serde_json::to_value(cursor).unwrap(), "3.41");
        for bad in [
            "",
            "3",
            "3.",
            ".4",
            "0.4",
            "+3.4",
            "3.-4",
            "3.4.5",
            "x.1",
            "4294967296.0",
        ] {
            assert!(bad.parse::<JournalCursor>().is_err(), "{bad:?}");
        }
    }
}
