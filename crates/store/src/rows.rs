//! Rows as both backends read them (plain strings and integers) and their checked conversion
//! into the public types, so decoding rules — status names, JSON columns, integer ranges — live
//! in one place.

use warden_protocol::{Event, TaskId, TaskStatus};

use crate::state::{parse_kind, parse_status};
use crate::types::{
    ApiToken, Approval, ApprovalStatus, EventRecord, Intent, IntentStatus, Repository, Run, Spend,
    Task, TaskMessage, TaskRepo, WebSession, WebUser, MESSAGE_AGENT, MESSAGE_STEER, MESSAGE_USER,
};
use crate::{JournalEntry, StoreError};

/// Column list matching [`RawTask`]'s field order (both backends select it verbatim).
pub(crate) const TASK_COLUMNS: &str = "id, kind, status, owner, prompt, repos, priority, \
     created_at_ms, updated_at_ms, follow_up_to, retry_of, result, metadata, run_count, \
     interrupted_runs, callback_url";

pub(crate) struct RawTask {
    pub id: String,
    pub kind: String,
    pub status: String,
    pub owner: String,
    pub prompt: String,
    pub repos: String,
    pub priority: i32,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub follow_up_to: Option<String>,
    pub retry_of: Option<String>,
    pub result: Option<String>,
    pub metadata: String,
    pub run_count: i64,
    pub interrupted_runs: i64,
    pub callback_url: Option<String>,
}

impl RawTask {
    pub(crate) fn decode(self) -> Result<Task, StoreError> {
        Ok(Task {
            id: task_id(self.id)?,
            kind: parse_kind(&self.kind)
                .ok_or_else(|| StoreError::invalid_data(format!("task kind {:?}", self.kind)))?,
            status: status(&self.status)?,
            owner: self.owner,
            prompt: self.prompt,
            repos: serde_json::from_str(&self.repos)?,
            priority: self.priority,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            follow_up_to: self.follow_up_to.map(task_id).transpose()?,
            retry_of: self.retry_of.map(task_id).transpose()?,
            result: self
                .result
                .as_deref()
                .map(serde_json::from_str)
                .transpose()?,
            metadata: serde_json::from_str(&self.metadata)?,
            runs: to_u32(self.run_count)?,
            interrupted_runs: to_u32(self.interrupted_runs)?,
            callback_url: self.callback_url,
        })
    }
}

pub(crate) const REPO_COLUMNS: &str =
    "name, source, branch, checks, created_by, created_at_ms, mounts, prepare";

pub(crate) struct RawRepo {
    pub name: String,
    pub source: String,
    pub branch: Option<String>,
    pub checks: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub mounts: String,
    pub prepare: String,
}

impl RawRepo {
    pub(crate) fn decode(self) -> Result<Repository, StoreError> {
        Ok(Repository {
            name: self.name,
            source: self.source,
            branch: self.branch,
            checks: serde_json::from_str(&self.checks)?,
            mounts: serde_json::from_str(&self.mounts)?,
            prepare: serde_json::from_str(&self.prepare)?,
            created_by: self.created_by,
            created_at_ms: self.created_at_ms,
        })
    }
}

/// Checks that `pinned` is `stored` with commits filled in: same names and revisions in the
/// same order, no recorded commit changed, every commit set.
pub(crate) fn check_pinned_repos(
    stored: &[TaskRepo],
    pinned: &[TaskRepo],
) -> Result<(), StoreError> {
    if stored.len() != pinned.len() {
        return Err(StoreError::invalid_data(format!(
            "pinned {} repositories but the task has {}",
            pinned.len(),
            stored.len()
        )));
    }
    for (old, new) in stored.iter().zip(pinned) {
        if old.name != new.name || old.rev != new.rev {
            return Err(StoreError::invalid_data(format!(
                "pinned repository {:?} is not the task's {:?}",
                new.name, old.name
            )));
        }
        match (&old.commit, &new.commit) {
            (_, None) => {
                return Err(StoreError::invalid_data(format!(
                    "repository {:?} pinned without a commit",
                    new.name
                )))
            }
            (Some(was), Some(now)) if was != now => {
                return Err(StoreError::invalid_data(format!(
                    "repository {:?} is already pinned to {was}",
                    new.name
                )))
            }
            _ => {}
        }
    }
    Ok(())
}

pub(crate) const RUN_COLUMNS: &str = "task_id, number, worker, started_at_ms, heartbeat_at_ms, \
     lease_expires_at_ms, ended_at_ms, outcome";

pub(crate) struct RawRun {
    pub task_id: String,
    pub number: i64,
    pub worker: String,
    pub started_at_ms: i64,
    pub heartbeat_at_ms: i64,
    pub lease_expires_at_ms: i64,
    pub ended_at_ms: Option<i64>,
    pub outcome: Option<String>,
}

impl RawRun {
    pub(crate) fn decode(self) -> Result<Run, StoreError> {
        Ok(Run {
            task: task_id(self.task_id)?,
            number: to_u32(self.number)?,
            worker: self.worker,
            started_at_ms: self.started_at_ms,
            heartbeat_at_ms: self.heartbeat_at_ms,
            lease_expires_at_ms: self.lease_expires_at_ms,
            ended_at_ms: self.ended_at_ms,
            outcome: self.outcome,
        })
    }
}

pub(crate) const JOURNAL_COLUMNS: &str = "seq, at_ms, kind, payload, prev_hash, hash, display";

pub(crate) struct RawJournal {
    pub seq: i64,
    pub at_ms: i64,
    pub kind: String,
    pub payload: String,
    pub prev_hash: String,
    pub hash: String,
    pub display: Option<String>,
}

impl RawJournal {
    pub(crate) fn decode(self) -> Result<JournalEntry, StoreError> {
        Ok(JournalEntry {
            seq: to_u64(self.seq)?,
            at_ms: to_u64(self.at_ms)?,
            kind: self.kind,
            payload: serde_json::from_str(&self.payload)?,
            prev_hash: self.prev_hash,
            hash: self.hash,
            display: self.display,
        })
    }
}

pub(crate) const EVENT_COLUMNS: &str = "seq, task_seq, task_id, at_ms, event";

pub(crate) struct RawEvent {
    pub seq: i64,
    pub task_seq: i64,
    pub task_id: String,
    pub at_ms: i64,
    pub event: String,
}

impl RawEvent {
    pub(crate) fn decode(self) -> Result<EventRecord, StoreError> {
        Ok(EventRecord {
            seq: to_u64(self.seq)?,
            task_seq: to_u64(self.task_seq)?,
            task: task_id(self.task_id)?,
            at_ms: self.at_ms,
            event: serde_json::from_str(&self.event)?,
        })
    }
}

pub(crate) const APPROVAL_COLUMNS: &str = "id, task_id, kind, subject_hash, status, \
     created_at_ms, decided_by, decided_at_ms, consumed_at_ms";

pub(crate) struct RawApproval {
    pub id: String,
    pub task_id: String,
    pub kind: String,
    pub subject_hash: String,
    pub status: String,
    pub created_at_ms: i64,
    pub decided_by: Option<String>,
    pub decided_at_ms: Option<i64>,
    pub consumed_at_ms: Option<i64>,
}

impl RawApproval {
    pub(crate) fn decode(self) -> Result<Approval, StoreError> {
        Ok(Approval {
            status: approval_status(&self.status)?,
            id: self.id,
            task: task_id(self.task_id)?,
            kind: self.kind,
            subject_hash: self.subject_hash,
            created_at_ms: self.created_at_ms,
            decided_by: self.decided_by,
            decided_at_ms: self.decided_at_ms,
            consumed_at_ms: self.consumed_at_ms,
        })
    }
}

pub(crate) const INTENT_COLUMNS: &str = "id, task_id, kind, payload, status, attempts, \
     next_attempt_at_ms, lease_owner, lease_expires_at_ms, last_error, created_at_ms, done_at_ms";

pub(crate) struct RawIntent {
    pub id: String,
    pub task_id: String,
    pub kind: String,
    pub payload: String,
    pub status: String,
    pub attempts: i64,
    pub next_attempt_at_ms: i64,
    pub lease_owner: Option<String>,
    pub lease_expires_at_ms: Option<i64>,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub done_at_ms: Option<i64>,
}

impl RawIntent {
    pub(crate) fn decode(self) -> Result<Intent, StoreError> {
        Ok(Intent {
            status: intent_status(&self.status)?,
            id: self.id,
            task: task_id(self.task_id)?,
            kind: self.kind,
            payload: serde_json::from_str(&self.payload)?,
            attempts: to_u32(self.attempts)?,
            next_attempt_at_ms: self.next_attempt_at_ms,
            lease_owner: self.lease_owner,
            lease_expires_at_ms: self.lease_expires_at_ms,
            last_error: self.last_error,
            created_at_ms: self.created_at_ms,
            done_at_ms: self.done_at_ms,
        })
    }
}

pub(crate) const API_TOKEN_COLUMNS: &str =
    "id, name, role, digest, created_by, created_at_ms, revoked_at_ms";

pub(crate) struct RawApiToken {
    pub id: String,
    pub name: String,
    pub role: String,
    pub digest: String,
    pub created_by: String,
    pub created_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

impl RawApiToken {
    pub(crate) fn decode(self) -> ApiToken {
        ApiToken {
            id: self.id,
            name: self.name,
            role: self.role,
            digest: self.digest,
            created_by: self.created_by,
            created_at_ms: self.created_at_ms,
            revoked_at_ms: self.revoked_at_ms,
        }
    }
}

pub(crate) const WEB_USER_COLUMNS: &str = "name, role, password_hash, created_at_ms, updated_at_ms";

pub(crate) const WEB_SESSION_COLUMNS: &str = "id, digest, name, role_at_sign_in, credential, \
     address, user_agent, created_at_ms, expires_at_ms, revoked_at_ms";

/// Sessions that expired or were revoked longer ago than this are deleted.
pub(crate) const WEB_SESSION_RETENTION_MS: i64 = MS_PER_DAY;

pub(crate) struct RawWebUser {
    pub name: String,
    pub role: String,
    pub password_hash: String,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl RawWebUser {
    pub(crate) fn decode(self) -> WebUser {
        WebUser {
            name: self.name,
            role: self.role,
            password_hash: self.password_hash,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        }
    }
}

pub(crate) struct RawWebSession {
    pub id: String,
    pub digest: String,
    pub name: String,
    pub role_at_sign_in: String,
    pub credential: String,
    pub address: Option<String>,
    pub user_agent: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub revoked_at_ms: Option<i64>,
}

impl RawWebSession {
    pub(crate) fn decode(self) -> WebSession {
        WebSession {
            id: self.id,
            digest: self.digest,
            name: self.name,
            role_at_sign_in: self.role_at_sign_in,
            credential: self.credential,
            address: self.address,
            user_agent: self.user_agent,
            created_at_ms: self.created_at_ms,
            expires_at_ms: self.expires_at_ms,
            revoked_at_ms: self.revoked_at_ms,
        }
    }
}

pub(crate) const MESSAGE_COLUMNS: &str = "seq, role, text, author, at_ms";

pub(crate) struct RawMessage {
    pub seq: i64,
    pub role: String,
    pub text: String,
    pub author: String,
    pub at_ms: i64,
}

impl RawMessage {
    pub(crate) fn decode(self) -> Result<TaskMessage, StoreError> {
        Ok(TaskMessage {
            seq: to_u64(self.seq)?,
            role: self.role,
            text: self.text,
            author: self.author,
            at_ms: self.at_ms,
        })
    }
}

/// A message role the store accepts.
pub(crate) fn check_message_role(role: &str) -> Result<(), StoreError> {
    if role == MESSAGE_USER || role == MESSAGE_AGENT || role == MESSAGE_STEER {
        Ok(())
    } else {
        Err(StoreError::invalid_data(format!(
            "message role {role:?}: expected {MESSAGE_USER:?}, {MESSAGE_AGENT:?} or \
             {MESSAGE_STEER:?}"
        )))
    }
}

/// Milliseconds in a UTC day, for grouping the ledger by day in SQL.
pub(crate) const MS_PER_DAY: i64 = warden_time::MS_PER_DAY;

pub(crate) fn task_id(value: String) -> Result<TaskId, StoreError> {
    TaskId::try_from(value).map_err(StoreError::invalid_data)
}

pub(crate) fn status(name: &str) -> Result<TaskStatus, StoreError> {
    parse_status(name).ok_or_else(|| StoreError::invalid_data(format!("task status {name:?}")))
}

pub(crate) fn approval_status(name: &str) -> Result<ApprovalStatus, StoreError> {
    ApprovalStatus::parse(name)
        .ok_or_else(|| StoreError::invalid_data(format!("approval status {name:?}")))
}

pub(crate) fn intent_status(name: &str) -> Result<IntentStatus, StoreError> {
    IntentStatus::parse(name)
        .ok_or_else(|| StoreError::invalid_data(format!("intent status {name:?}")))
}

/// A stored event, from the sequence numbers its insert returned.
pub(crate) fn event_record(
    task: &TaskId,
    seq: i64,
    task_seq: i64,
    at_ms: i64,
    event: Event,
) -> Result<EventRecord, StoreError> {
    Ok(EventRecord {
        seq: to_u64(seq)?,
        task_seq: to_u64(task_seq)?,
        task: task.clone(),
        at_ms,
        event,
    })
}

/// A JSON value as the text column it is stored in.
pub(crate) fn json_text(value: Option<&serde_json::Value>) -> Result<Option<String>, StoreError> {
    value
        .map(serde_json::to_string)
        .transpose()
        .map_err(Into::into)
}

pub(crate) fn to_i64(value: u64) -> Result<i64, StoreError> {
    i64::try_from(value).map_err(|_| StoreError::OutOfRange(format!("{value} exceeds i64")))
}

pub(crate) fn to_u64(value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::OutOfRange(format!("stored {value} is negative")))
}

pub(crate) fn to_u32(value: i64) -> Result<u32, StoreError> {
    u32::try_from(value).map_err(|_| StoreError::OutOfRange(format!("stored {value} exceeds u32")))
}

/// Whether a move to `to` stores the task's `task_finished` event in its transaction: a
/// terminal status, or waiting for a person (an answer, an approval) — every status a run
/// hands back to people.
pub(crate) fn announces_finish(to: TaskStatus) -> bool {
    to.is_terminal() || matches!(to, TaskStatus::WaitingInput | TaskStatus::WaitingApproval)
}

/// The event every move to a terminal or waiting status ([`announces_finish`]) stores in the
/// same transaction: `task_finished`
/// with the status and the result's `outcome` (`failure` when the result names none).
pub(crate) fn finished_event(status: TaskStatus, result: Option<&serde_json::Value>) -> Event {
    Event::TaskFinished {
        status,
        outcome: result
            .and_then(|r| r.get("outcome"))
            .and_then(serde_json::Value::as_str)
            .unwrap_or("failure")
            .to_string(),
    }
}

/// The result JSON of a task abandoned after too many interrupted runs.
pub(crate) fn abandoned_result(task: &Task) -> serde_json::Value {
    serde_json::json!({
        "task_id": task.id,
        "kind": task.kind,
        "outcome": "failure",
        "failure": {
            "code": crate::ABANDONED,
            "message": format!(
                "abandoned after {} runs lost their worker (lease expired)",
                task.interrupted_runs
            ),
        },
    })
}

/// `,a,b,` — a list of names for `instr`-style membership tests in SQLite.
pub(crate) fn name_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    let mut list = String::from(",");
    for name in names {
        list.push_str(name);
        list.push(',');
    }
    list
}

pub(crate) fn spend_from(sums: [i64; 6]) -> Result<Spend, StoreError> {
    let [input, cached, output, cost, unknown, entries] = sums;
    Ok(Spend {
        input_tokens: to_u64(input)?,
        cached_input_tokens: to_u64(cached)?,
        output_tokens: to_u64(output)?,
        cost_micro_usd: to_u64(cost)?,
        cost_unknown: unknown > 0,
        entries: to_u64(entries)?,
    })
}

/// The approval is bound to `subject_hash` and in `expected` status.
pub(crate) fn check_approval(
    approval: &Approval,
    subject_hash: &str,
    expected: ApprovalStatus,
) -> Result<(), StoreError> {
    if approval.subject_hash != subject_hash {
        return Err(StoreError::ApprovalMismatch {
            id: approval.id.clone(),
        });
    }
    if approval.status != expected {
        return Err(StoreError::ApprovalState {
            id: approval.id.clone(),
            expected,
            actual: approval.status,
        });
    }
    Ok(())
}

pub(crate) const CHAT_MESSAGE_COLUMNS: &str = "id, channel, chat, task_id, text, markup, state, \
     message_id, revision, delivered_revision, attempts, next_attempt_at_ms, last_error, \
     created_at_ms, updated_at_ms";

pub(crate) struct RawChatMessage {
    pub id: String,
    pub channel: String,
    pub chat: String,
    pub task_id: Option<String>,
    pub text: String,
    pub markup: Option<String>,
    pub state: String,
    pub message_id: Option<String>,
    pub revision: i64,
    pub delivered_revision: i64,
    pub attempts: i64,
    pub next_attempt_at_ms: i64,
    pub last_error: Option<String>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl RawChatMessage {
    pub(crate) fn decode(self) -> Result<crate::ChatMessage, StoreError> {
        Ok(crate::ChatMessage {
            state: crate::ChatMessageState::parse(&self.state).ok_or_else(|| {
                StoreError::invalid_data(format!("chat message state {:?}", self.state))
            })?,
            id: self.id,
            channel: self.channel,
            chat: self.chat,
            task: self.task_id.map(task_id).transpose()?,
            text: self.text,
            markup: self.markup,
            message_id: self.message_id,
            revision: self.revision,
            delivered_revision: self.delivered_revision,
            attempts: to_u32(self.attempts)?,
            next_attempt_at_ms: self.next_attempt_at_ms,
            last_error: self.last_error,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
        })
    }
}
