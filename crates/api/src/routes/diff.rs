//! `GET /v1/tasks/{id}/diff`: the unified diff of a change task's proposal commit against its
//! base, as JSON (`{"diff": "...", ...}`; a JSON body keeps one error and content format for the
//! whole API), from [`warden_service::tasks::TaskService::proposal_diff`].
//!
//! - The diff and its redaction are the engine's `redacted_proposal_diff`, the one producer
//!   `warden diff` uses too: hardened `diff-tree` from Warden's mirror, secrets and sensitive
//!   files' values redacted, at most `MAX_DIFF_BYTES` cut at a line end (`truncated: true`).
//! - 404 when the task is not visible to the token, is not a change, or has no proposal — also
//!   while it is still running (a proposal exists only once the run ends); the message says
//!   which.
//!
//! `GET /v1/tasks/{id}/proposal`: the proposal itself as a git bundle
//! (`application/x-git-bundle`), from [`warden_service::tasks::TaskService::proposal_bundle`],
//! for `warden apply` against a server. Only what the proposal added (its base commit is the
//! bundle's prerequisite); the commit and base in `X-Warden-Commit` and `X-Warden-Base-Commit`.
//! Read like the task and its diff (404 as above); 403 when the proposal holds anything Warden
//! redacts (raw objects cannot be redacted) or changes sensitive files, saying which.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::views::ProposalDiff;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiPath, ApiState};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_diff))
        .routes(routes!(get_proposal))
}

/// The diff of a change task's proposal.
#[utoipa::path(get, path = "/v1/tasks/{id}/diff", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The proposal's unified diff against its base, secrets redacted", body = ProposalDiff),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token, not a change task, or no proposal (yet)", body = ErrorBody),
    ))]
async fn get_diff(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<ProposalDiff>, ApiError> {
    Ok(Json(state.tasks.proposal_diff(&caller, &id).await?))
}

/// The media type of a git bundle.
const BUNDLE_TYPE: &str = "application/x-git-bundle";

/// A change task's proposal as a git bundle.
#[utoipa::path(get, path = "/v1/tasks/{id}/proposal", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "A git bundle (v2) of `refs/warden/proposals/<id>` whose prerequisite is the proposal's base commit: fetch it into a clone holding that commit (`git fetch FILE refs/warden/proposals/<id>:refs/heads/BRANCH`). Headers `X-Warden-Commit` and `X-Warden-Base-Commit` name the two commits.",
            content_type = "application/x-git-bundle", body = Vec<u8>),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "The proposal holds text Warden redacts, or changes sensitive files: raw objects cannot be redacted; read the diff instead", body = ErrorBody),
        (status = 404, description = "No such task visible to this token, not a change task, or no proposal (yet)", body = ErrorBody),
    ))]
async fn get_proposal(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let (proposal, bundle) = state.tasks.proposal_bundle(&caller, &id).await?;
    Ok((
        [
            (axum::http::header::CONTENT_TYPE, BUNDLE_TYPE.to_string()),
            (
                axum::http::HeaderName::from_static("x-warden-commit"),
                proposal.commit,
            ),
            (
                axum::http::HeaderName::from_static("x-warden-base-commit"),
                proposal.base_commit,
            ),
        ],
        bundle,
    )
        .into_response())
}
