//! `GET/POST /v1/tasks`, `GET /v1/tasks/{id}`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_store::{Created, IdempotencyKey, NewTask, Store, Task, TaskQuery, TaskRepo};

use super::auth::{require_writer, ApiRole, Caller};
use super::repos::{valid_name, valid_rev};
use super::schema::{ErrorBody, TaskPage, TaskView};
use super::{ApiError, ApiJson, ApiPath, ApiState, ErrorCode};
use crate::task_view::task_json;

const MAX_PAGE: u32 = 200;
const DEFAULT_PAGE: u32 = 50;
const MAX_REPOS_PER_TASK: usize = 16;

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_tasks, submit_task))
        .routes(routes!(get_task))
}

/// A task to run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct SubmitTask {
    kind: String,
    #[serde(default)]
    repo: Option<String>,
    #[serde(default)]
    repos: Option<Vec<String>>,
    prompt: String,
    #[serde(default)]
    follow_up_to: Option<String>,
    #[serde(default)]
    callback: Option<CallbackRequest>,
    #[serde(default)]
    metadata: Option<Value>,
    /// Change tasks: check commands replacing the registered repository's (at most 16).
    #[serde(default)]
    checks: Option<Vec<String>>,
    /// Change tasks: publish a proposal after an approval bound to its hash (the task then
    /// waits in `waiting_approval`; a `publish_sensitive` approval when the diff touches
    /// sensitive files). Refused (422) when the repository has no remote to push to.
    #[serde(default)]
    publish: Option<bool>,
}

/// Where to POST the task's result when it ends or waits for input: an `https` URL whose origin
/// the server allow-lists (signed with HMAC-SHA256, see the `Warden-Signature` header).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CallbackRequest {
    url: String,
}

fn parse_kind(kind: &str) -> Result<TaskKind, ApiError> {
    match kind {
        "question" => Ok(TaskKind::Question),
        "change" => Ok(TaskKind::Change),
        "maintain" => Err(ApiError::new(
            ErrorCode::UnsupportedKind,
            "maintain tasks are not supported by this server yet",
        )),
        other => Err(ApiError::invalid(format!(
            "unknown kind {other:?}: expected question, change or maintain"
        ))),
    }
}

/// Submits a task; honours `Idempotency-Key`.
#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = SubmitTask,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Same key and body: the same task; same key, other body: an error")),
    responses(
        (status = 202, description = "Accepted (queued), or replayed for a known key", body = TaskView),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "A viewer token", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 422, description = "Invalid fields (a NUL character in prompt or metadata among them), unknown repository, unsupported kind, publish on a repository without a remote to push to, or Idempotency-Key reused with another body", body = ErrorBody),
    ))]
async fn submit_task(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    headers: HeaderMap,
    ApiJson(request, body): ApiJson<SubmitTask>,
) -> Result<Response, ApiError> {
    require_writer(&caller)?;
    let kind = parse_kind(&request.kind)?;
    if !crate::worker::runnable(kind) {
        return Err(ApiError::new(
            ErrorCode::UnsupportedKind,
            "this kind of task cannot run here",
        ));
    }
    let callback_url = match &request.callback {
        None => None,
        Some(callback) => Some(
            state
                .callbacks
                .check_url(&callback.url)
                .map_err(ApiError::invalid)?
                .to_string(),
        ),
    };
    let prompt = request.prompt.trim().to_string();
    if prompt.is_empty() {
        return Err(ApiError::invalid("prompt is empty"));
    }
    if prompt.contains('\0') {
        return Err(ApiError::invalid("prompt must not contain NUL characters"));
    }
    let mut metadata = match request.metadata {
        None => json!({}),
        Some(value @ Value::Object(_)) => value,
        Some(_) => return Err(ApiError::invalid("metadata must be a JSON object")),
    };
    if let Some(at) = super::nul_in_json(&metadata, "metadata") {
        return Err(ApiError::invalid(format!(
            "{at} must not contain NUL characters"
        )));
    }
    let publish = kind == TaskKind::Change && request.publish == Some(true);
    change_options(kind, request.checks, request.publish, &mut metadata)?;
    if kind == TaskKind::Change && request.follow_up_to.is_some() {
        return Err(ApiError::invalid(
            "follow_up_to is for questions; answer a change's clarification instead",
        ));
    }
    let idempotency = match headers.get("idempotency-key") {
        None => None,
        Some(value) => {
            let key = value
                .to_str()
                .ok()
                .filter(|k| !k.is_empty() && k.len() <= 255)
                .ok_or_else(|| {
                    ApiError::new(
                        ErrorCode::BadRequest,
                        "Idempotency-Key must be 1-255 visible ASCII characters",
                    )
                })?;
            Some(IdempotencyKey {
                key: key.to_string(),
                owner: caller.name.clone(),
                // serde_json's maps are sorted: equal bodies hash equally.
                request_hash: hex::encode(Sha256::digest(body.to_string().as_bytes())),
            })
        }
    };
    let follow_up_to = match &request.follow_up_to {
        None => None,
        Some(id) => {
            let earlier = visible_task(&state, &caller, id)
                .await
                .map_err(|_| ApiError::invalid(format!("follow_up_to: no task {id:?} of yours")))?;
            if earlier.kind != kind {
                return Err(ApiError::invalid("a follow-up must be of the same kind"));
            }
            Some(earlier)
        }
    };
    let names: Vec<String> = match (request.repo, request.repos) {
        (Some(_), Some(_)) => return Err(ApiError::invalid("give repo or repos, not both")),
        (Some(one), None) => vec![one],
        (None, Some(many)) => many,
        (None, None) => Vec::new(),
    };
    let repos = if names.is_empty() {
        match &follow_up_to {
            // A follow-up keeps the exact commits of the task it continues.
            Some(earlier) => earlier.repos.clone(),
            None => {
                return Err(ApiError::invalid(
                    "name at least one repository (repo or repos)",
                ))
            }
        }
    } else {
        task_repos(state.store.as_ref(), &names).await?
    };
    if kind == TaskKind::Change && repos.len() != 1 {
        return Err(ApiError::invalid(
            "a change task works on exactly one repository",
        ));
    }
    if publish {
        check_publishable(&state, &repos[0].name).await?;
    }
    let id = warden_store::new_task_id().map_err(ApiError::internal)?;
    let created = state
        .store
        .create_task(
            NewTask {
                id,
                kind,
                owner: caller.name,
                prompt,
                repos,
                priority: 0,
                follow_up_to: follow_up_to.map(|t| t.id),
                retry_of: None,
                metadata,
                callback_url,
            },
            idempotency,
        )
        .await?;
    let replayed = matches!(created, Created::Replayed(_));
    if !replayed {
        state.wake.notify_one();
    }
    let mut response = (StatusCode::ACCEPTED, Json(task_json(created.task()))).into_response();
    if replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
}

/// A change's `checks` and `publish`, validated and kept in the task's metadata under
/// [`crate::change::OPTIONS_METADATA_KEY`] (a key callers may not use themselves).
fn change_options(
    kind: TaskKind,
    checks: Option<Vec<String>>,
    publish: Option<bool>,
    metadata: &mut Value,
) -> Result<(), ApiError> {
    const MAX_CHECKS: usize = 16;
    const MAX_CHECK_BYTES: usize = 4096;
    let key = crate::change::OPTIONS_METADATA_KEY;
    if metadata.get(key).is_some() {
        return Err(ApiError::invalid(format!(
            "metadata key {key:?} is reserved for Warden"
        )));
    }
    if kind != TaskKind::Change {
        if checks.is_some() || publish.is_some() {
            return Err(ApiError::invalid("checks and publish are for change tasks"));
        }
        return Ok(());
    }
    if let Some(checks) = &checks {
        if checks.len() > MAX_CHECKS {
            return Err(ApiError::invalid(format!(
                "at most {MAX_CHECKS} check commands"
            )));
        }
        if checks
            .iter()
            .any(|c| c.trim().is_empty() || c.len() > MAX_CHECK_BYTES || c.contains('\0'))
        {
            return Err(ApiError::invalid(format!(
                "each check command must be non-empty, without NUL, at most {MAX_CHECK_BYTES} bytes"
            )));
        }
    }
    let options = crate::change::ChangeOptions {
        checks,
        publish: publish.unwrap_or(false),
        ..crate::change::ChangeOptions::default()
    };
    if options != crate::change::ChangeOptions::default() {
        let value = serde_json::to_value(&options).map_err(ApiError::internal)?;
        if let Some(map) = metadata.as_object_mut() {
            map.insert(key.to_string(), value);
        }
    }
    Ok(())
}

/// A publication that could never be pushed is refused now, before any model call, with what
/// to configure (the same check [`crate::publish::publish_remote`] `warden run --publish` makes).
async fn check_publishable(state: &ApiState, name: &str) -> Result<(), ApiError> {
    let registered = state.store.get_repo(name).await?.ok_or_else(|| {
        ApiError::new(
            ErrorCode::UnknownRepository,
            format!("repository {name:?} is not registered (POST /v1/repos)"),
        )
    })?;
    let spec = warden_repo::RepoSpec::parse(&registered.source, std::path::Path::new("/"))
        .map_err(|e| ApiError::invalid(format!("repository {name:?}: {e}")))?;
    let git = match &state.repos {
        Some(repos) => repos.git().clone(),
        None => warden_repo::Git::locate().map_err(ApiError::internal)?,
    };
    tokio::task::spawn_blocking(move || crate::publish::publish_remote(&git, &spec.source))
        .await
        .map_err(ApiError::internal)?
        .map_err(ApiError::invalid)
        .map(drop)
}

/// `name` or `name@rev` entries → the task's repositories, each registered.
async fn task_repos(store: &dyn Store, names: &[String]) -> Result<Vec<TaskRepo>, ApiError> {
    if names.len() > MAX_REPOS_PER_TASK {
        return Err(ApiError::invalid(format!(
            "at most {MAX_REPOS_PER_TASK} repositories per task"
        )));
    }
    let mut repos: Vec<TaskRepo> = Vec::new();
    for entry in names {
        let (name, rev) = match entry.split_once('@') {
            Some((name, rev)) => (name, Some(rev)),
            None => (entry.as_str(), None),
        };
        if !valid_name(name) {
            return Err(ApiError::invalid(format!(
                "invalid repository name {name:?}"
            )));
        }
        if let Some(rev) = rev {
            if !valid_rev(rev) {
                return Err(ApiError::invalid(format!("invalid revision {rev:?}")));
            }
            // The server's checkout is the operator's: its uncommitted files are not shared.
            if rev == warden_repo::WORK_TREE_REV {
                return Err(ApiError::invalid(format!(
                    "{entry:?}: @{rev} snapshots a local work tree and works in-process only; \
                     commit and push the changes, or name a revision"
                )));
            }
        }
        if repos.iter().any(|r| r.name == name) {
            return Err(ApiError::invalid(format!(
                "repository {name:?} is named twice"
            )));
        }
        if store.get_repo(name).await?.is_none() {
            return Err(ApiError::new(
                ErrorCode::UnknownRepository,
                format!("repository {name:?} is not registered (POST /v1/repos)"),
            ));
        }
        repos.push(TaskRepo {
            name: name.to_string(),
            rev: rev.map(str::to_string),
            commit: None,
            source: None,
        });
    }
    Ok(repos)
}

/// The task if the caller may see it; 404 otherwise (another owner's task does not exist for
/// them).
pub(super) async fn visible_task(
    state: &ApiState,
    caller: &Caller,
    id: &str,
) -> Result<Task, ApiError> {
    let missing = || ApiError::new(ErrorCode::NotFound, format!("task {id} not found"));
    let id: TaskId = id.parse().map_err(|_| missing())?;
    let task = state.store.get_task(&id).await?.ok_or_else(missing)?;
    if caller.role != ApiRole::Admin && task.owner != caller.name {
        return Err(missing());
    }
    Ok(task)
}

/// One task, with its result once it has one.
#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "tasks",
    params(("id" = String, Path, description = "The task id")),
    responses(
        (status = 200, description = "The task", body = TaskView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such task visible to this token", body = ErrorBody),
    ))]
async fn get_task(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let task = visible_task(&state, &caller, &id).await?;
    Ok(Json(task_json(&task)))
}

/// `cursor`, `limit` and `status` of a list request.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListQuery {
    cursor: Option<TaskId>,
    limit: u32,
    status: Option<TaskStatus>,
}

fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = ListQuery {
        limit: DEFAULT_PAGE,
        ..ListQuery::default()
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "cursor" if !value.is_empty() => {
                parsed.cursor = Some(
                    value
                        .parse()
                        .map_err(|_| bad(format!("invalid cursor {value:?}")))?,
                );
            }
            "cursor" => {}
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
            }
            "status" => {
                parsed.status = Some(
                    serde_json::from_value(Value::String(value.to_string()))
                        .map_err(|_| bad(format!("unknown status {value:?}")))?,
                );
            }
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(parsed)
}

/// Tasks visible to the token, newest first.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks",
    params(
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("limit" = Option<u32>, Query, description = "1-200, default 50"),
        ("status" = Option<String>, Query, description = "Only tasks in this status"),
    ),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn list_tasks(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let query = parse_list_query(uri.query())?;
    let mut tasks = state
        .store
        .list_tasks(TaskQuery {
            owner: (caller.role != ApiRole::Admin).then(|| caller.name.clone()),
            status: query.status,
            before: query.cursor,
            limit: query.limit + 1,
        })
        .await?;
    let more = tasks.len() > query.limit as usize;
    tasks.truncate(query.limit as usize);
    let next_cursor = if more {
        tasks.last().map(|t| t.id.to_string())
    } else {
        None
    };
    Ok(Json(json!({
        "data": tasks.iter().map(task_json).collect::<Vec<_>>(),
        "next_cursor": next_cursor,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_queries() {
        assert_eq!(parse_list_query(None).unwrap().limit, DEFAULT_PAGE);
        let q = parse_list_query(Some("limit=2&status=queued")).unwrap();
        assert_eq!((q.limit, q.status), (2, Some(TaskStatus::Queued)));
        for bad in [
            "limit=0",
            "limit=201",
            "status=paused",
            "cursor=x",
            "page=2",
        ] {
            assert!(parse_list_query(Some(bad)).is_err(), "{bad}");
        }
    }
}
