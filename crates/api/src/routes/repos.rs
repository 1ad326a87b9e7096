//! `GET/POST /v1/repos`: registered repositories.

use std::path::Path;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_repo::RepoSpec;
use warden_store::Repository;

use super::auth::Caller;
use super::schema::{CommandLine, ErrorBody, RepoName, RepoPage, RepoView, Revision};
use super::{ApiError, ApiJson, ApiPath, ApiState};
use warden_service::tasks::RepoRegistration;
use warden_time::rfc3339;

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

fn repo_json(state: &ApiState, repo: &Repository) -> Value {
    let source = match RepoSpec::parse(&repo.source, Path::new("/")) {
        Ok(spec) => spec.source.display_redacted(),
        Err(_) => warden_repo::redact_credentials(&repo.source),
    };
    let mut view = json!({
        "name": repo.name,
        "source": source,
        "branch": repo.branch,
        "checks": repo.checks,
        "mounts": repo.mounts,
        "prepare": repo.prepare,
        "created_by": repo.created_by,
        "created_at": rfc3339(repo.created_at_ms),
    });
    if let Some(warmth) = state.tasks.warmth(&repo.name) {
        let mut warm = serde_json::to_value(&warmth).unwrap_or(Value::Null);
        // Progress lines and errors are git's and the server's text: no secrets.
        if let Some(text) = warm
            .get_mut("error")
            .and_then(|e| e.as_str().map(str::to_string))
        {
            warm["error"] = json!(warden_repo::redact_credentials(&text));
        }
        view["warm"] = warm;
    }
    view
}

/// Every registered repository.
#[utoipa::path(get, path = "/v1/repos", tag = "repos", responses(
    (status = 200, description = "The repositories, by name", body = RepoPage),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
))]
async fn list_repos(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let repos = state.tasks.repos(&caller).await?;
    Ok(Json(json!({
        "data": repos.iter().map(|r| repo_json(&state, r)).collect::<Vec<_>>(),
        "next_cursor": null,
    })))
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
) -> Result<Json<Value>, ApiError> {
    let repo = state.tasks.repo(&caller, &name).await?;
    Ok(Json(repo_json(&state, &repo)))
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
) -> Result<(StatusCode, Json<Value>), ApiError> {
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
    Ok((StatusCode::CREATED, Json(repo_json(&state, &repo))))
}
