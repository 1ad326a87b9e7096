//! Acting on a task: `POST /v1/tasks/{id}/cancel`, `…/retry` and `…/messages` (answer a
//! clarification, or follow up on a finished question or change), each one call of
//! [`warden_service::tasks::TaskService`] (whose `control.rs` says what they do). Its journal is
//! `journal.rs`'.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::schema::{ErrorBody, NonBlankText};
use super::{ApiError, ApiJson, ApiPath, ApiState};
use warden_protocol::views::TaskView;

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(cancel_task))
        .routes(routes!(retry_task))
        .routes(routes!(post_message))
}

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
) -> Result<Json<TaskView>, ApiError> {
    let cancelled = state.tasks.cancel(&caller, &id).await?;
    Ok(Json(cancelled))
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
    let retried = state.tasks.retry(&caller, &id).await?;
    Ok((StatusCode::ACCEPTED, Json(retried)).into_response())
}

/// An answer to the agent's question, or a follow-up question.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct PostMessage {
    /// Not only whitespace, no NUL character; at most 64 KiB (65536 bytes) once surrounding
    /// whitespace is dropped.
    #[schema(value_type = NonBlankText)]
    text: String,
}

/// Answers a task waiting for input (the same task runs again with the whole exchange), steers
/// a queued or running question or change (the agent reads the message before its next model
/// call; `message_queued` and `message_delivered` events), or follows up on a finished question
/// or change (a new task with `follow_up_to`; a change continues on its proposal).
#[utoipa::path(post, path = "/v1/tasks/{id}/messages", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    request_body = PostMessage,
    responses(
        (status = 202, description = "Answered: the task, queued again; steered: the task as it is, the message queued for its next turn; or the new follow-up task", body = TaskView),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "A viewer token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
        (status = 409, description = "The task waits for an approval, is a maintenance task that runs, or was sent 100 messages while it ran (code `conflict`)", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 422, description = "The text is empty, longer than 64 KiB or holds a NUL character", body = ErrorBody),
    ))]
async fn post_message(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(message, _): ApiJson<PostMessage>,
) -> Result<Response, ApiError> {
    let task = state
        .tasks
        .post_message(&caller, &id, &message.text)
        .await?;
    Ok((StatusCode::ACCEPTED, Json(task)).into_response())
}
