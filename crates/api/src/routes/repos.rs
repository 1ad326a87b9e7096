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
use warden_repo::{RepoSpec, Source};
use warden_store::{NewRepo, Repository};

use super::auth::{ApiRole, Caller};
use super::schema::{CommandLine, ErrorBody, RepoName, RepoPage, RepoView, Revision};
use super::{ApiError, ApiJson, ApiState, ErrorCode};
use warden_service::tasks::{valid_repo_name, valid_rev};
use warden_service::time::rfc3339;

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
    OpenApiRouter::new().routes(routes!(list_repos, register_repo))
}

fn repo_json(repo: &Repository) -> Value {
    let source = match RepoSpec::parse(&repo.source, Path::new("/")) {
        Ok(spec) => spec.source.display_redacted(),
        Err(_) => warden_repo::redact_credentials(&repo.source),
    };
    json!({
        "name": repo.name,
        "source": source,
        "branch": repo.branch,
        "checks": repo.checks,
        "mounts": repo.mounts,
        "prepare": repo.prepare,
        "created_by": repo.created_by,
        "created_at": rfc3339(repo.created_at_ms),
    })
}

/// Every registered repository.
#[utoipa::path(get, path = "/v1/repos", tag = "repos", responses(
    (status = 200, description = "The repositories, by name", body = RepoPage),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
))]
async fn list_repos(
    State(state): State<Arc<ApiState>>,
    _caller: Caller,
) -> Result<Json<Value>, ApiError> {
    let repos = state.store.list_repos().await?;
    Ok(Json(json!({
        "data": repos.iter().map(repo_json).collect::<Vec<_>>(),
        "next_cursor": null,
    })))
}

/// Registers a repository (admin tokens only).
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
    if caller.role != ApiRole::Admin {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "only admin tokens register repositories",
        ));
    }
    if !valid_repo_name(&request.name) {
        return Err(ApiError::invalid(
            "name must be 1-100 letters, digits, '.', '_' or '-', not starting with '.' or '-'",
        ));
    }
    let is_url = request.source.contains("://") || !request.source.starts_with('/');
    if !is_url && !Path::new(&request.source).is_absolute() {
        return Err(ApiError::invalid("a source path must be absolute"));
    }
    let spec = RepoSpec::parse(&request.source, Path::new("/"))
        .map_err(|e| ApiError::invalid(format!("invalid source: {e}")))?;
    if spec.rev.is_some() {
        return Err(ApiError::invalid(
            "the source must not name a revision (@REV); use branch",
        ));
    }
    if let Some(branch) = &request.branch {
        if !valid_rev(branch) || branch == warden_repo::WORK_TREE_REV {
            return Err(ApiError::invalid(format!("invalid branch {branch:?}")));
        }
    }
    if request.checks.len() > 50
        || request
            .checks
            .iter()
            .any(|c| c.trim().is_empty() || c.len() > 4096 || c.contains('\0'))
    {
        return Err(ApiError::invalid(
            "checks must be at most 50 non-empty commands of at most 4096 bytes",
        ));
    }
    if request.prepare.len() > 50
        || request
            .prepare
            .iter()
            .any(|c| c.trim().is_empty() || c.len() > 4096 || c.contains('\0'))
    {
        return Err(ApiError::invalid(
            "prepare must be at most 50 non-empty commands of at most 4096 bytes",
        ));
    }
    if request.mounts.len() > 50 {
        return Err(ApiError::invalid("mounts must be at most 50 directories"));
    }
    for mount in &request.mounts {
        if !mount.starts_with('/') || mount.contains('\0') {
            return Err(ApiError::invalid(format!(
                "mount {mount:?} must be an absolute path on the server"
            )));
        }
        // The server's own paths: its user's home and state directory stay out.
        let user_home = std::env::var_os("HOME").map(std::path::PathBuf::from);
        let warden_home = state.tasks.repo_store().map(|repos| repos.home());
        let checked =
            warden_engine::toolchain::check_mount(mount, user_home.as_deref(), warden_home)
                .map_err(ApiError::invalid)?;
        // Only under the directories the operator lists: an API token is not the operator.
        warden_engine::toolchain::check_repo_mount(&state.repo_mount_roots, &checked)
            .map_err(ApiError::invalid)?;
    }
    let source = match &spec.source {
        Source::Path(path) => path.to_string_lossy().into_owned(),
        Source::Url(url) => url.clone(),
    };
    let repo = state
        .store
        .register_repo(NewRepo {
            name: request.name,
            source,
            branch: request.branch,
            checks: request.checks,
            mounts: request.mounts,
            prepare: request.prepare,
            created_by: caller.name.clone(),
        })
        .await?;
    Ok((StatusCode::CREATED, Json(repo_json(&repo))))
}
