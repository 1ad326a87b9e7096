//! Acting on a task: cancel, retry, and messages (answer a clarification, or follow up on a
//! finished question).
//!
//! - **Cancel** moves any unfinished task to `cancelled` (compare-and-set on the status it has,
//!   so a run finishing at the same moment either wins or loses cleanly) with the result
//!   `failure {code: "cancelled"}` and the spend so far (the store adds `task_finished` in the
//!   same transaction), and stops the run: at once when it runs in this process, within about a
//!   second elsewhere ([`crate::cancel`]); its sandbox commands are killed. Its pending
//!   approvals are rejected in the canceller's name. A change task whose approved publication
//!   is running (or was interrupted and resumes on the next claim) is not cancelled: the cancel
//!   would drop the run between the push and the pull request, and the result would not record
//!   the push.
//! - **Retry** repeats a finished task as a new one (`retry_of`): same kind, owner, request,
//!   metadata and callback, and the same pinned commits, so the retry answers about the same
//!   code the first attempt saw (submit a new task for the current code). A conversation the
//!   task had (answered clarifications) carries over: the worker reads it through `retry_of`.
//! - **Messages** answer a task waiting for input (the same task is queued again and its next
//!   run continues the conversation: the request, the agent's question, the answer), steer a
//!   queued or running question or change (stored with the role `steer` and handed to the
//!   agent before its next model call; a run after a crash delivers it again at the same
//!   place), or follow up on a finished question or change with a new task (`follow_up_to`,
//!   the same pinned commits; a change continues on its proposal with its checks).

use serde_json::{json, Value};
use warden_protocol::{
    Event, Failure, FailureCode, QuestionOutcome, QuestionResult, TaskKind, TaskStatus, Usage,
};
use warden_store::{
    ApprovalStatus, Decision, NewTask, Spend, Store, StoreError, Task, MESSAGE_STEER,
};

use super::{Principal, ServiceError, TaskService};
use crate::task_view::task_view;
use warden_protocol::views::TaskView;

/// Whether a message to `task` reaches its agent at its next turn: a question or change that is
/// queued or running.
pub fn steerable(task: &TaskView) -> bool {
    reads_messages(task.kind, task.status)
}

/// [`steerable`] of a task of `kind` in `status`.
fn reads_messages(kind: TaskKind, status: TaskStatus) -> bool {
    kind != TaskKind::Maintain
        && matches!(
            status,
            TaskStatus::Queued | TaskStatus::Running | TaskStatus::Testing
        )
}

/// A message longer than this (in bytes) is refused.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// Messages a task can be sent while it is queued or running; more are refused (each one is
/// read before every model call).
pub(super) const MAX_STEER_MESSAGES: usize = 100;
// The refusal says the number in words.
const _: () = assert!(MAX_STEER_MESSAGES == 100);

/// Status changes a cancel may lose to (a run finishing, a worker claiming) before it wins.
const CANCEL_ATTEMPTS: usize = 8;

impl TaskService {
    /// Cancels a task that has not finished (operators and admins); a running task stops within
    /// seconds and its sandbox commands are killed. Returns the task, now cancelled.
    pub async fn cancel(&self, principal: &Principal, id: &str) -> Result<TaskView, ServiceError> {
        principal.require_writer()?;
        let mut task = self.visible_task(principal, id).await?;
        for _ in 0..CANCEL_ATTEMPTS {
            if task.status.is_terminal() {
                return Err(ServiceError::wrong_status(
                    &task,
                    "only an unfinished task can be cancelled",
                ));
            }
            self.refuse_during_publication(&task).await?;
            let spend = self.store.spend_for_task(&task.id).await?;
            let facts = run_facts(self.store.as_ref(), &task).await?;
            let result = cancelled_result(&task, &principal.name, &spend, &facts);
            match self
                .store
                .transition(&task.id, task.status, TaskStatus::Cancelled, Some(result))
                .await
            {
                Ok(cancelled) => {
                    // Stop a run of this process now; others notice the status within a second.
                    self.running.stop(&cancelled.id);
                    // Its pending approvals (a proposal waiting to be published) die with it.
                    reject_pending(self.store.as_ref(), &cancelled.id, &principal.name).await;
                    tracing::info!(task = %cancelled.id, by = %principal.name, "task cancelled");
                    return Ok(task_view(&cancelled));
                }
                Err(StoreError::StatusConflict { .. }) => {
                    task = self.visible_task(principal, id).await?;
                }
                Err(error) => return Err(error.into()),
            }
        }
        Err(ServiceError::Conflict(format!(
            "task {id} kept changing status; try again"
        )))
    }

    /// A change task whose approved publication runs (or was interrupted and resumes when the
    /// task is claimed again) is not cancelled: a cancel would drop the run between the push
    /// and the pull request, leaving a pushed branch the result says nothing about. The
    /// publication ends on its own (published or failed, both recorded). A task queued by an
    /// approval that no run has consumed yet has pushed nothing and may still be cancelled (if
    /// a worker claims it first, the cancel's transition fails and this is checked again).
    async fn refuse_during_publication(&self, task: &Task) -> Result<(), ServiceError> {
        if !matches!(task.kind, TaskKind::Change | TaskKind::Maintain)
            || !matches!(task.status, TaskStatus::Running | TaskStatus::Queued)
        {
            return Ok(());
        }
        let Some(approval) =
            crate::publication::approved_publication(self.store.as_ref(), task).await?
        else {
            return Ok(());
        };
        if task.status == TaskStatus::Running || approval.status == ApprovalStatus::Consumed {
            return Err(ServiceError::Conflict(format!(
                "task {} is publishing under approval {}; publication in progress, it finishes on its own",
                task.id, approval.id
            )));
        }
        Ok(())
    }

    /// Repeats a finished task as a new task (`retry_of`) over the same pinned commits
    /// (operators and admins), queued; returns the new task.
    pub async fn retry(&self, principal: &Principal, id: &str) -> Result<TaskView, ServiceError> {
        principal.require_writer()?;
        let task = self.visible_task(principal, id).await?;
        if !task.status.is_terminal() {
            return Err(ServiceError::wrong_status(
                &task,
                "only a finished task can be retried (cancel it first)",
            ));
        }
        if !crate::worker::runnable(task.kind) {
            return Err(ServiceError::UnsupportedKind(
                "this kind of task cannot run here".into(),
            ));
        }
        let created = self
            .store
            .create_task(
                NewTask {
                    id: warden_store::new_task_id().map_err(ServiceError::internal)?,
                    kind: task.kind,
                    owner: task.owner.clone(),
                    prompt: task.prompt.clone(),
                    repos: task.repos.clone(),
                    priority: task.priority,
                    follow_up_to: task.follow_up_to.clone(),
                    retry_of: Some(task.id.clone()),
                    metadata: task.metadata.clone(),
                    callback_url: task.callback_url.clone(),
                },
                None,
            )
            .await?;
        self.wake.notify_one();
        let retried = created.task().clone();
        tracing::info!(task = %retried.id, retry_of = %task.id, by = %principal.name, "task retried");
        Ok(task_view(&retried))
    }

    /// A message on task `id` (operators and admins): the answer of a task waiting for input
    /// (the same task, queued again), or a follow-up on a finished question (a new task).
    pub async fn post_message(
        &self,
        principal: &Principal,
        id: &str,
        text: &str,
    ) -> Result<TaskView, ServiceError> {
        principal.require_writer()?;
        let task = self.visible_task(principal, id).await?;
        let text = message_text(text)?;
        let task = match task.status {
            TaskStatus::WaitingInput => self.answer_task(principal, &task, text).await?,
            _ if reads_messages(task.kind, task.status) => {
                // The run is not woken: it reads the message at its next turn.
                return Ok(task_view(&self.steer_task(principal, &task, text).await?));
            }
            status if status.is_terminal() => self.follow_up_task(principal, &task, text).await?,
            _ => {
                return Err(ServiceError::wrong_status(
                    &task,
                    "messages answer a task waiting for input, reach a queued or running \
                     question or change at its next turn, or follow up on a finished one",
                ))
            }
        };
        self.wake.notify_one();
        Ok(task_view(&task))
    }

    /// Answers task `id`, which waits for input: the same task is queued again and its next
    /// run sees the whole exchange.
    pub async fn answer(
        &self,
        principal: &Principal,
        id: &str,
        text: &str,
    ) -> Result<TaskView, ServiceError> {
        principal.require_writer()?;
        let task = self.visible_task(principal, id).await?;
        let text = message_text(text)?;
        if task.status != TaskStatus::WaitingInput {
            return Err(ServiceError::wrong_status(
                &task,
                "only a task waiting for input can be answered",
            ));
        }
        let answered = self.answer_task(principal, &task, text).await?;
        self.wake.notify_one();
        Ok(task_view(&answered))
    }

    /// Follows up on finished task `id` with a new task of its kind over the same pinned
    /// commits (a change on its proposal) (`follow_up_to`), queued; returns the new task.
    pub async fn follow_up(
        &self,
        principal: &Principal,
        id: &str,
        text: &str,
    ) -> Result<TaskView, ServiceError> {
        principal.require_writer()?;
        let task = self.visible_task(principal, id).await?;
        let text = message_text(text)?;
        if !task.status.is_terminal() {
            return Err(ServiceError::wrong_status(
                &task,
                "only a finished task can be followed up",
            ));
        }
        let created = self.follow_up_task(principal, &task, text).await?;
        self.wake.notify_one();
        Ok(task_view(&created))
    }

    /// Sends `text` to a queued or running task ([`steerable`]) unless its last such message
    /// already says it — a chat or webhook event delivered again after a crash. Whether it was
    /// sent now.
    pub async fn steer_once(
        &self,
        principal: &Principal,
        task: &TaskView,
        text: &str,
    ) -> Result<bool, ServiceError> {
        let sent_before = self
            .messages(principal, task.id.as_str())
            .await?
            .iter()
            .rev()
            .find(|m| m.role == MESSAGE_STEER)
            .is_some_and(|m| m.text == text.trim());
        if sent_before {
            return Ok(false);
        }
        self.post_message(principal, task.id.as_str(), text).await?;
        Ok(true)
    }

    /// Queues a message for the agent of a queued or running task: stored in its conversation
    /// (so a run after a crash delivers it too) and announced on its timeline; the run hands
    /// it to the agent before its next model call ([`crate::inbox`]).
    async fn steer_task(
        &self,
        principal: &Principal,
        task: &Task,
        text: &str,
    ) -> Result<Task, ServiceError> {
        let sent = self
            .store
            .task_messages(&task.id)
            .await?
            .iter()
            .filter(|m| m.role == MESSAGE_STEER)
            .count();
        if sent >= MAX_STEER_MESSAGES {
            return Err(ServiceError::wrong_status(
                task,
                "it was already sent the most messages a task takes while it runs (100); \
                 cancel it and ask again with what it should know",
            ));
        }
        let message = self
            .store
            .append_task_message(&task.id, MESSAGE_STEER, text, &principal.name)
            .await?;
        let queued = self.redactor.event(Event::MessageQueued {
            seq: message.seq,
            author: message.author,
            text: message.text,
        });
        if let Err(error) = self.store.append_event(&task.id, queued).await {
            tracing::warn!(task = %task.id, %error, "cannot store message_queued");
        }
        tracing::info!(task = %task.id, seq = message.seq, by = %principal.name, "message queued for a running task");
        Ok(self
            .store
            .get_task(&task.id)
            .await?
            .unwrap_or_else(|| task.clone()))
    }

    async fn answer_task(
        &self,
        principal: &Principal,
        task: &Task,
        text: &str,
    ) -> Result<Task, ServiceError> {
        let answered = match self
            .store
            .answer_task(&task.id, text, &principal.name)
            .await
        {
            Ok(answered) => answered,
            Err(StoreError::StatusConflict { actual, .. }) => {
                // Answered (or cancelled) by someone else in the meantime.
                let mut current = task.clone();
                current.status = actual;
                return Err(ServiceError::wrong_status(
                    &current,
                    "it no longer waits for input",
                ));
            }
            Err(error) => return Err(error.into()),
        };
        if let Err(error) = self
            .store
            .append_event(
                &answered.id,
                Event::StatusChanged {
                    status: answered.status,
                },
            )
            .await
        {
            tracing::warn!(task = %answered.id, %error, "cannot store status_changed");
        }
        Ok(answered)
    }

    async fn follow_up_task(
        &self,
        principal: &Principal,
        task: &Task,
        text: &str,
    ) -> Result<Task, ServiceError> {
        if task.kind == TaskKind::Maintain {
            return Err(ServiceError::wrong_status(
                task,
                "only questions and changes take follow-ups; submit a new task",
            ));
        }
        let (repos, metadata) = follow_up_basis(task);
        let created = self
            .store
            .create_task(
                NewTask {
                    id: warden_store::new_task_id().map_err(ServiceError::internal)?,
                    kind: task.kind,
                    owner: principal.name.clone(),
                    prompt: text.to_string(),
                    repos,
                    priority: task.priority,
                    follow_up_to: Some(task.id.clone()),
                    retry_of: None,
                    metadata,
                    callback_url: None,
                },
                None,
            )
            .await?;
        Ok(created.task().clone())
    }
}

/// What a follow-up of `earlier` continues on: the exact commits the conversation was about —
/// a change on its proposal when it made one (the proposal commit is in Warden's mirror) — and
/// a change's checks.
pub(super) fn follow_up_basis(earlier: &Task) -> (Vec<warden_store::TaskRepo>, Value) {
    let proposal = earlier
        .result
        .as_ref()
        .filter(|r| r.get("outcome").and_then(Value::as_str) == Some("proposal"))
        .and_then(|r| r.pointer("/proposal/commit"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let repos = earlier
        .repos
        .iter()
        .map(|repo| warden_store::TaskRepo {
            commit: proposal.clone().or_else(|| repo.commit.clone()),
            ..repo.clone()
        })
        .collect();
    let mut metadata = json!({});
    if earlier.kind == TaskKind::Change {
        let checks = warden_engine::change::ChangeOptions::from_metadata(&earlier.metadata)
            .ok()
            .and_then(|options| options.checks);
        let options = warden_engine::change::ChangeOptions {
            checks,
            ..warden_engine::change::ChangeOptions::default()
        };
        if options != warden_engine::change::ChangeOptions::default() {
            if let Ok(value) = serde_json::to_value(&options) {
                metadata[warden_engine::change::OPTIONS_METADATA_KEY] = value;
            }
        }
    }
    (repos, metadata)
}

/// The text of a message, trimmed: not empty, no NUL, at most [`MAX_MESSAGE_BYTES`].
fn message_text(text: &str) -> Result<&str, ServiceError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(ServiceError::Invalid(
            "the message is empty: say what to tell the task".into(),
        ));
    }
    if text.contains('\0') {
        return Err(ServiceError::Invalid(
            "text must not contain NUL characters".into(),
        ));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(ServiceError::Invalid(format!(
            "text is longer than {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    Ok(text)
}

/// Spend from the ledger as the result's usage.
fn usage_of(spend: &Spend) -> Usage {
    Usage {
        input_tokens: spend.input_tokens,
        cached_input_tokens: spend.cached_input_tokens,
        output_tokens: spend.output_tokens,
        cost_usd: (!spend.cost_unknown).then(|| spend.cost_micro_usd as f64 / 1e6),
        model_calls: spend.entries,
        ..Usage::default()
    }
    .with_cache_hit_rate()
}

/// What a task's events say about its runs so far, for a result that ends it from outside.
#[derive(Debug, Default)]
struct RunFacts {
    /// The model of its latest run.
    model: Option<String>,
    /// Tool calls its runs finished.
    tool_calls: u64,
}

/// Events read at most to learn [`RunFacts`] (a cancel stays quick on an endless task).
const MAX_FACT_EVENTS: u64 = 20_000;

async fn run_facts(store: &dyn Store, task: &Task) -> Result<RunFacts, StoreError> {
    let stream = warden_store::EventStream::Task(task.id.clone());
    let mut facts = RunFacts::default();
    let mut after = 0;
    while after < MAX_FACT_EVENTS {
        let page = store.events_after(&stream, after, 1000).await?;
        let Some(last) = page.last() else { break };
        after = last.task_seq;
        for record in &page {
            match &record.event {
                warden_protocol::Event::TaskStarted { model, .. } => {
                    facts.model = Some(model.clone());
                }
                warden_protocol::Event::ToolFinished { .. } => facts.tool_calls += 1,
                _ => {}
            }
        }
    }
    Ok(facts)
}

/// The result of a cancelled task (SPEC §5: `failure` with code `cancelled`).
fn cancelled_result(task: &Task, by: &str, spend: &Spend, facts: &RunFacts) -> Value {
    let model = task
        .result
        .as_ref()
        .and_then(|r| r.get("model"))
        .and_then(Value::as_str)
        .map(str::to_string)
        .or_else(|| facts.model.clone())
        .unwrap_or_default();
    let result = QuestionResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: QuestionOutcome::Failure {
            failure: Failure {
                code: FailureCode::Cancelled,
                message: format!("cancelled by {by}"),
            },
        },
        usage: Usage {
            tool_calls: facts.tool_calls,
            ..usage_of(spend)
        },
        model,
        sandbox: None,
        notices: vec![],
    };
    serde_json::to_value(&result).unwrap_or(Value::Null)
}

/// Rejects the pending approvals of a task that was just cancelled, in the canceller's name, so
/// none of them can authorise anything later. Failures are logged: the task has ended anyway
/// (and deciding its approvals is refused from now on).
async fn reject_pending(store: &dyn Store, task: &warden_protocol::TaskId, by: &str) {
    let pending = match store.list_approvals(Some(ApprovalStatus::Pending)).await {
        Ok(pending) => pending,
        Err(error) => {
            tracing::warn!(%task, %error, "cannot list the approvals of a cancelled task");
            return;
        }
    };
    for approval in pending.iter().filter(|a| &a.task == task) {
        match store
            .decide_approval(&approval.id, &approval.subject_hash, Decision::Reject, by)
            .await
        {
            Ok(_) | Err(StoreError::ApprovalState { .. }) => {}
            Err(error) => {
                tracing::warn!(%task, approval = %approval.id, %error, "cannot reject the approval of a cancelled task")
            }
        }
    }
}
