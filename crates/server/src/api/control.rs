//! Acting on a task: `POST /v1/tasks/{id}/cancel`, `…/retry` and `…/messages` (answer a
//! clarification, or follow up on a finished question). Its journal is `journal.rs`'.
//!
//! - **Cancel** moves any unfinished task to `cancelled` (compare-and-set on the status it has,
//!   so a run finishing at the same moment either wins or loses cleanly) with the result
//!   `failure {code: "cancelled"}` and the spend so far (the store adds `task_finished` in the
//!   same transaction), and stops the run: at once when it runs in this process, within about a second elsewhere
//!   ([`crate::cancel`]); its sandbox commands are killed. Its pending approvals are rejected
//!   in the canceller's name. A change task whose approved publication is running (or was
//!   interrupted and resumes on the next claim) is not cancelled (409): the cancel would drop
//!   the run between the push and the pull request, and the result would not record the push.
//! - **Retry** repeats a finished task as a new one (`retry_of`): same kind, owner, request,
//!   metadata and callback, and the same pinned commits, so the retry answers about the same
//!   code the first attempt saw (submit a new task for the current code). A conversation the
//!   task had (answered clarifications) carries over: the worker reads it through `retry_of`.
//! - **Messages** answer a task waiting for input (the same task is queued again and its next
//!   run continues the conversation: the request, the agent's question, the answer), or follow
//!   up on a finished question with a new task (`follow_up_to`, the same pinned commits).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::{
    Event, Failure, FailureCode, QuestionOutcome, QuestionResult, TaskKind, TaskStatus, Usage,
};
use warden_store::{ApprovalStatus, NewTask, Spend, StoreError, Task};

use super::auth::{require_writer, Caller};
use super::schema::{ErrorBody, TaskView};
use super::tasks::visible_task;
use super::{ApiError, ApiJson, ApiPath, ApiState, ErrorCode};
use crate::task_view::task_json;

/// A message longer than this (in bytes) is refused.
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(cancel_task))
        .routes(routes!(retry_task))
        .routes(routes!(post_message))
}

fn wrong_status(task: &Task, action: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!(
            "task {} is {}: {action}",
            task.id,
            warden_store::state::status_name(task.status)
        ),
    )
}

/// Spend from the ledger as the result's usage.
pub(super) fn usage_of(spend: &Spend) -> Usage {
    Usage {
        input_tokens: spend.input_tokens,
        cached_input_tokens: spend.cached_input_tokens,
        output_tokens: spend.output_tokens,
        cost_usd: (!spend.cost_unknown).then(|| spend.cost_micro_usd as f64 / 1e6),
        model_calls: spend.entries,
        ..Usage::default()
    }
}

/// The result of a cancelled task (SPEC §5: `failure` with code `cancelled`).
fn cancelled_result(task: &Task, by: &str, spend: &Spend) -> Value {
    let model = task
        .result
        .as_ref()
        .and_then(|r| r.get("model"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let result = QuestionResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: QuestionOutcome::Failure {
            failure: Failure {
                code: FailureCode::Cancelled,
                message: format!("cancelled by {by}"),
            },
        },
        usage: usage_of(spend),
        model,
        sandbox: None,
        notices: vec![],
    };
    serde_json::to_value(&result).unwrap_or(Value::Null)
}

/// Status changes a cancel may lose to (a run finishing, a worker claiming) before it wins.
const CANCEL_ATTEMPTS: usize = 8;

/// Cancels a task that has not finished; a running task stops within seconds and its sandbox
/// commands are killed.
#[utoipa::path(post, path = "/v1/tasks/{id}/cancel", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The task, now cancelled", body = TaskView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "A viewer token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
        (status = 409, description = "The task has finished already, or its approved publication is running (code `conflict`)", body = ErrorBody),
    ))]
async fn cancel_task(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    require_writer(&caller)?;
    let mut task = visible_task(&state, &caller, &id).await?;
    for _ in 0..CANCEL_ATTEMPTS {
        if task.status.is_terminal() {
            return Err(wrong_status(
                &task,
                "only an unfinished task can be cancelled",
            ));
        }
        refuse_during_publication(&state, &task).await?;
        let spend = state.store.spend_for_task(&task.id).await?;
        let result = cancelled_result(&task, &caller.name, &spend);
        match state
            .store
            .transition(&task.id, task.status, TaskStatus::Cancelled, Some(result))
            .await
        {
            Ok(cancelled) => {
                // Stop a run of this process now; others notice the status within a second.
                state.running.stop(&cancelled.id);
                // Its pending approvals (a proposal waiting to be published) die with it.
                super::approvals::reject_pending(state.store.as_ref(), &cancelled.id, &caller.name)
                    .await;
                tracing::info!(task = %cancelled.id, by = %caller.name, "task cancelled");
                return Ok(Json(task_json(&cancelled)));
            }
            Err(StoreError::StatusConflict { .. }) => {
                task = visible_task(&state, &caller, &id).await?;
            }
            Err(error) => return Err(error.into()),
        }
    }
    Err(ApiError::new(
        ErrorCode::Conflict,
        format!("task {id} kept changing status; try again"),
    ))
}

/// A change task whose approved publication runs (or was interrupted and resumes when the task
/// is claimed again) is not cancelled: a cancel would drop the run between the push and the
/// pull request, leaving a pushed branch the result says nothing about. The publication ends
/// on its own (published or failed, both recorded). A task queued by an approval that no run
/// has consumed yet has pushed nothing and may still be cancelled (if a worker claims it first,
/// the cancel's transition fails and this is checked again).
async fn refuse_during_publication(state: &ApiState, task: &Task) -> Result<(), ApiError> {
    if task.kind != TaskKind::Change
        || !matches!(task.status, TaskStatus::Running | TaskStatus::Queued)
    {
        return Ok(());
    }
    let Some(approval) = crate::publish::approved_publication(state.store.as_ref(), task).await?
    else {
        return Ok(());
    };
    if task.status == TaskStatus::Running || approval.status == ApprovalStatus::Consumed {
        return Err(ApiError::new(
            ErrorCode::Conflict,
            format!(
                "task {} is publishing under approval {}; publication in progress, it finishes on its own",
                task.id, approval.id
            ),
        ));
    }
    Ok(())
}

/// Repeats a finished task as a new task (`retry_of`) over the same pinned commits.
#[utoipa::path(post, path = "/v1/tasks/{id}/retry", tag = "tasks",
    params(("id" = String, Path, description = "The task to repeat")),
    responses(
        (status = 202, description = "The new task, queued", body = TaskView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "A viewer token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
        (status = 409, description = "The task has not finished (code `conflict`)", body = ErrorBody),
        (status = 422, description = "This server cannot run the task's kind", body = ErrorBody),
    ))]
async fn retry_task(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Response, ApiError> {
    require_writer(&caller)?;
    let task = visible_task(&state, &caller, &id).await?;
    if !task.status.is_terminal() {
        return Err(wrong_status(
            &task,
            "only a finished task can be retried (cancel it first)",
        ));
    }
    if !crate::worker::runnable(task.kind) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedKind,
            "this kind of task cannot run here",
        ));
    }
    let created = state
        .store
        .create_task(
            NewTask {
                id: warden_store::new_task_id().map_err(ApiError::internal)?,
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
    state.wake.notify_one();
    tracing::info!(task = %created.task().id, retry_of = %task.id, by = %caller.name, "task retried");
    Ok((StatusCode::ACCEPTED, Json(task_json(created.task()))).into_response())
}

/// An answer to the agent's question, or a follow-up question.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PostMessage {
    /// 1 byte to 64 KiB, not only whitespace.
    text: String,
}

/// Answers a task waiting for input (the same task runs again with the whole exchange), or
/// follows up on a finished question (a new task with `follow_up_to`).
#[utoipa::path(post, path = "/v1/tasks/{id}/messages", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    request_body = PostMessage,
    responses(
        (status = 202, description = "Answered: the task, queued again; or the new follow-up task", body = TaskView),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "A viewer token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
        (status = 409, description = "The task is neither waiting for input nor a finished question (code `conflict`)", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 422, description = "The text is empty, longer than 64 KiB or holds a NUL character", body = ErrorBody),
    ))]
async fn post_message(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(message, _): ApiJson<PostMessage>,
) -> Result<Response, ApiError> {
    require_writer(&caller)?;
    let task = visible_task(&state, &caller, &id).await?;
    let text = message.text.trim();
    if text.is_empty() {
        return Err(ApiError::invalid("text is empty"));
    }
    if text.contains('\0') {
        return Err(ApiError::invalid("text must not contain NUL characters"));
    }
    if text.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::invalid(format!(
            "text is longer than {MAX_MESSAGE_BYTES} bytes"
        )));
    }
    let task = match task.status {
        TaskStatus::WaitingInput => answer(&state, &caller, &task, text).await?,
        status if status.is_terminal() => follow_up(&state, &caller, &task, text).await?,
        _ => {
            return Err(wrong_status(
                &task,
                "messages answer a task waiting for input or follow up on a finished one",
            ))
        }
    };
    state.wake.notify_one();
    Ok((StatusCode::ACCEPTED, Json(task_json(&task))).into_response())
}

async fn answer(
    state: &ApiState,
    caller: &Caller,
    task: &Task,
    text: &str,
) -> Result<Task, ApiError> {
    let answered = match state.store.answer_task(&task.id, text, &caller.name).await {
        Ok(answered) => answered,
        Err(StoreError::StatusConflict { actual, .. }) => {
            // Answered (or cancelled) by someone else in the meantime.
            let mut current = task.clone();
            current.status = actual;
            return Err(wrong_status(&current, "it no longer waits for input"));
        }
        Err(error) => return Err(error.into()),
    };
    if let Err(error) = state
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

async fn follow_up(
    state: &ApiState,
    caller: &Caller,
    task: &Task,
    text: &str,
) -> Result<Task, ApiError> {
    match task.kind {
        TaskKind::Question => {}
        TaskKind::Change | TaskKind::Maintain => {
            return Err(wrong_status(
                task,
                "only questions take follow-ups; submit a new task",
            ))
        }
    }
    let created = state
        .store
        .create_task(
            NewTask {
                id: warden_store::new_task_id().map_err(ApiError::internal)?,
                kind: task.kind,
                owner: caller.name.clone(),
                prompt: text.to_string(),
                // The exact commits the conversation was about.
                repos: task.repos.clone(),
                priority: task.priority,
                follow_up_to: Some(task.id.clone()),
                retry_of: None,
                metadata: json!({}),
                callback_url: None,
            },
            None,
        )
        .await?;
    Ok(created.task().clone())
}
