//! `GET /v1/tasks/{id}/diff`: the unified diff of a change task's proposal commit against its
//! base, as JSON (`{"diff": "...", ...}`; a JSON body keeps one error and content format for the
//! whole API), from [`warden_service::tasks::TaskService::proposal_diff`].
//!
//! - The diff and its redaction are [`warden_engine::diff::redacted_proposal_diff`], the one producer
//!   `warden diff` uses too: hardened `diff-tree` from Warden's mirror, secrets and sensitive
//!   files' values redacted, at most [`warden_engine::diff::MAX_DIFF_BYTES`] cut at a line end (`truncated: true`).
//! - 404 when the task is not visible to the token, is not a change, or has no proposal — also
//!   while it is still running (a proposal exists only once the run ends); the message says
//!   which.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiPath, ApiState};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(get_diff))
}

/// A proposal's diff against its base commit, secrets redacted.
#[derive(Debug, Serialize, ToSchema)]
pub struct DiffView {
    pub task_id: String,
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

/// The diff of a change task's proposal.
#[utoipa::path(get, path = "/v1/tasks/{id}/diff", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The proposal's unified diff against its base, secrets redacted", body = DiffView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token, not a change task, or no proposal (yet)", body = ErrorBody),
    ))]
async fn get_diff(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<DiffView>, ApiError> {
    let proposal = state.tasks.proposal_diff(&caller, &id).await?;
    Ok(Json(DiffView {
        task_id: proposal.task.to_string(),
        repo: proposal.repo,
        base_commit: proposal.base_commit,
        commit: proposal.commit,
        hash: proposal.hash,
        diff: proposal.diff,
        truncated: proposal.truncated,
        sensitive_files: proposal.sensitive_files,
    }))
}
