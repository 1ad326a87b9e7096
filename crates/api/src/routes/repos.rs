//! `GET/POST /v1/repos`: registered repositories.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::views::RepoView;

use super::auth::Caller;
use super::schema::{CommandLine, ErrorBody, RepoName, Revision};
use super::{ApiError, ApiJson, ApiPath, ApiState};
use warden_service::tasks::RepoRegistration;

/// A repository to register.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct RegisterRepo {
    #[schema(value_type = RepoName)]
    name: String,
    /// An absolute path on the server or a git URL.
    // `RepoSpec::parse`: not empty, no control characters.
    #[schema(min_length = 1, pattern = r"^[^\u0000-\u001f\u007f-\u009f]+$")]
    source: String,
    /// The branch tasks start from by default.
    #[serde(default)]
    #[schema(value_type = Option<Revision>)]
    branch: Option<String>,
    /// Check commands a change task runs on its proposal.
    #[serde(default)]
    #[schema(value_type = Vec<CommandLine>, max_items = 50)]
    checks: Vec<String>,
    /// Absolute directories on the server shown read-only (at the same path) in this
    /// repository's sandboxes: toolchains. Never under `WARDEN_HOME`, `/proc`, `/sys`, `/dev`
    /// or `/etc`, never `/` or the Warden user's home; each must exist, under one of the
    /// server's `[sandbox] repo_mount_roots`.
    #[serde(default)]
    #[schema(max_items = 50, pattern = r"^/[^\u0000]*$")]
    mounts: Vec<String>,
    /// Commands run before a change task's agent with this repository's dependency cache
    /// writable (no network); they replace `[sandbox] prepare`.
    #[serde(default)]
    #[schema(value_type = Vec<CommandLine>, max_items = 50)]
    prepare: Vec<String>,
}

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_repos, register_repo))
        .routes(routes!(get_repo))
}

/// The registered repositories (all of them: the page has no cursor yet).
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RepoPage {
    pub data: Vec<RepoView>,
    pub next_cursor: Option<String>,
}

/// Every registered repository.
#[utoipa::path(get, path = "/v1/repos", tag = "repos", responses(
    (status = 200, description = "The repositories, by name", body = RepoPage),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
))]
async fn list_repos(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
) -> Result<Json<RepoPage>, ApiError> {
    Ok(Json(RepoPage {
        data: state.tasks.repos(&caller).await?,
        next_cursor: None,
    }))
}

/// A registered repository, with how warming it stands (its mirror and the snapshot of its
/// default branch are written in the background after it is registered).
#[utoipa::path(get, path = "/v1/repos/{name}", tag = "repos",
    params(("name" = RepoName, Path, description = "The repository's name")),
    responses(
        (status = 200, description = "The repository", body = RepoView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such repository", body = ErrorBody),
    ))]
async fn get_repo(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(name): ApiPath<String>,
) -> Result<Json<RepoView>, ApiError> {
    Ok(Json(state.tasks.repo(&caller, &name).await?))
}

/// Registers a repository (admin tokens only) and starts fetching it and writing the snapshot
/// of its default branch in the background (see `GET /v1/repos/{name}`).
#[utoipa::path(post, path = "/v1/repos", tag = "repos", request_body = RegisterRepo, responses(
    (status = 201, description = "Registered", body = RepoView),
    (status = 400, description = "The body is not JSON", body = ErrorBody),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
    (status = 403, description = "Not an admin token", body = ErrorBody),
    (status = 409, description = "The name is taken", body = ErrorBody),
    (status = 413, description = "The body is too large", body = ErrorBody),
    (status = 422, description = "Invalid fields", body = ErrorBody),
))]
async fn register_repo(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiJson(request, _): ApiJson<RegisterRepo>,
) -> Result<(StatusCode, Json<RepoView>), ApiError> {
    let repo = state
        .tasks
        .register_repo(
            &caller,
            RepoRegistration {
                name: request.name,
                source: request.source,
                branch: request.branch,
                checks: request.checks,
                mounts: request.mounts,
                prepare: request.prepare,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, Json(repo)))
}
