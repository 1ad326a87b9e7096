//! `GET/POST /v1/tasks`, `GET /v1/tasks/{id}`: the JSON of [`warden_service::tasks::TaskService`]'s
//! submit, task and list.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::{TaskId, TaskKind, TaskStatus};

use super::auth::Caller;
use super::schema::{CommandLine, ErrorBody, NonBlankText, RepoRef, SubmitKindName};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState, ErrorCode};
use warden_protocol::views::TaskView;
use warden_service::tasks::{Idempotency, Submission, TaskListing, MAX_PAGE};

const DEFAULT_PAGE: u32 = 50;

/// A page of tasks, newest first.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TaskPage {
    pub data: Vec<TaskView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<TaskId>,
}

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_tasks, submit_task))
        .routes(routes!(get_task))
}

/// A task to run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"kind": "question", "repo": "app", "prompt": "how does retry work?"})))]
struct SubmitTask {
    #[schema(value_type = SubmitKindName)]
    kind: String,
    /// The one repository to work on; give `repo` or `repos`, not both.
    #[serde(default)]
    #[schema(value_type = Option<RepoRef>)]
    repo: Option<String>,
    /// The repositories to work on (a change works on exactly one); none with `follow_up_to`
    /// keeps that task's exact commits.
    #[serde(default)]
    #[schema(value_type = Option<Vec<RepoRef>>, max_items = 16)]
    repos: Option<Vec<String>>,
    /// The question or change request.
    #[schema(value_type = NonBlankText)]
    prompt: String,
    /// The id of an earlier task of yours, of the same kind, this one continues (its commits;
    /// a change continues on its proposal, with its checks unless `checks` is given).
    #[serde(default)]
    follow_up_to: Option<String>,
    #[serde(default)]
    callback: Option<CallbackRequest>,
    /// Any JSON object kept with the task: no NUL character in its keys or strings, and the
    /// key `warden` is reserved.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    metadata: Option<Value>,
    /// Change and maintain tasks: check commands replacing the registered repository's.
    #[serde(default)]
    #[schema(value_type = Option<Vec<CommandLine>>, max_items = 16)]
    checks: Option<Vec<String>>,
    /// Change and maintain tasks: publish a proposal after an approval bound to its hash (the task then
    /// waits in `waiting_approval`; a `publish_sensitive` approval when the diff touches
    /// sensitive files). Refused (422) when the repository has no remote to push to.
    #[serde(default)]
    publish: Option<bool>,
    /// Maintain tasks: what to upgrade: `["all"]` (the default), `["vulnerable"]` (packages a
    /// scan against the server's advisory database finds), or package names.
    #[serde(default)]
    #[schema(max_items = 64)]
    select: Option<Vec<String>>,
    /// Maintain tasks: `baseline` (deterministic, no model; the default) or `model` (an agent
    /// repairs the code an upgrade breaks).
    #[serde(default)]
    mode: Option<String>,
    /// Maintain tasks: the proposal also lists the informational advisories (unmaintained,
    /// unsound) of the repository's packages, and whether it clears them.
    #[serde(default)]
    informational: Option<bool>,
}

/// Where to POST the task's result when it ends or waits for input: an `https` URL whose origin
/// the server allow-lists (signed with HMAC-SHA256, see the `Warden-Signature` header).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct CallbackRequest {
    url: String,
}

/// The JSON `kind` → the task kind (a wire format's parsing; which kinds run is the service's).
fn parse_kind(kind: &str) -> Result<TaskKind, ApiError> {
    match kind {
        "question" => Ok(TaskKind::Question),
        "change" => Ok(TaskKind::Change),
        "maintain" => Ok(TaskKind::Maintain),
        other => Err(ApiError::invalid(format!(
            "unknown kind {other:?}: expected question, change or maintain"
        ))),
    }
}

impl SubmitTask {
    /// The body as the service's submission: `repo` is one of `repos`, spelled alone.
    fn into_submission(self) -> Result<Submission, ApiError> {
        let kind = parse_kind(&self.kind)?;
        let repos = match (self.repo, self.repos) {
            (Some(_), Some(_)) => return Err(ApiError::invalid("give repo or repos, not both")),
            (Some(one), None) => vec![one],
            (None, Some(many)) => many,
            (None, None) => Vec::new(),
        };
        Ok(Submission {
            kind,
            prompt: self.prompt,
            repos,
            follow_up_to: self.follow_up_to,
            checks: self.checks,
            publish: self.publish,
            metadata: self.metadata,
            callback_url: self.callback.map(|callback| callback.url),
            // The API names registered repositories; only the in-process front door pins.
            pinned: None,
            baseline: false,
            same_branch: false,
            maintain: (self.select.is_some()
                || self.mode.is_some()
                || self.informational.is_some())
            .then(|| warden_service::tasks::MaintainOptions {
                select: self.select.unwrap_or_default(),
                mode: self.mode,
                informational: self.informational.unwrap_or(false),
            }),
        })
    }
}

/// Submits a task; honours `Idempotency-Key`.
#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = SubmitTask,
    // The characters only: HTTP drops a value's surrounding spaces and tabs before the server
    // reads it, so the length sent is not the length checked.
    params(("Idempotency-Key" = Option<String>, Header, pattern = r"^[\t\u0020-\u007e]+$",
        description = "Same key and body: the same task; same key, other body: an error. \
            1-255 visible ASCII characters, spaces or tabs")),
    responses(
        (status = 202, description = "Accepted (queued), or replayed for a known key", body = TaskView),
        (status = 400, description = "The body is not JSON, or the Idempotency-Key is malformed", body = ErrorBody),
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
    let submission = request.into_submission()?;
    // The key as text (bytes that are not text fail the service's check); the request it
    // names is the body, whose keys serde_json sorts: equal bodies hash equally.
    let idempotency = headers.get("idempotency-key").map(|value| {
        Idempotency::new(
            String::from_utf8_lossy(value.as_bytes()),
            body.to_string().as_bytes(),
        )
    });
    let submitted = state.tasks.submit(&caller, submission, idempotency).await?;
    let mut response = (StatusCode::ACCEPTED, Json(submitted.task)).into_response();
    if submitted.replayed {
        response
            .headers_mut()
            .insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    Ok(response)
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
) -> Result<Json<TaskView>, ApiError> {
    Ok(Json(state.tasks.task(&caller, &id).await?))
}

/// `cursor`, `limit` and `status` of a list request.
#[derive(Debug, Default, PartialEq, Eq)]
struct ListQuery {
    cursor: Option<TaskId>,
    limit: u32,
    status: Option<TaskStatus>,
}

/// The list route's query parameters as sent (see [`super::ApiQuery`]).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    cursor: Option<String>,
    limit: Option<String>,
    status: Option<String>,
}

fn list_query(params: ListParams) -> Result<ListQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = ListQuery {
        limit: DEFAULT_PAGE,
        ..ListQuery::default()
    };
    if let Some(value) = params.cursor.filter(|c| !c.is_empty()) {
        parsed.cursor = Some(
            value
                .parse()
                .map_err(|_| bad(format!("invalid cursor {value:?}")))?,
        );
    }
    if let Some(value) = params.limit {
        parsed.limit = value
            .parse()
            .ok()
            .filter(|n| (1..=MAX_PAGE).contains(n))
            .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
    }
    if let Some(value) = params.status {
        parsed.status = Some(
            serde_json::from_value(Value::String(value.clone()))
                .map_err(|_| bad(format!("unknown status {value:?}")))?,
        );
    }
    Ok(parsed)
}

/// Tasks visible to the token, newest first.
#[utoipa::path(get, path = "/v1/tasks", tag = "tasks",
    params(
        ("cursor" = Option<String>, Query, pattern = "^(tsk_[0-9A-HJKMNP-TV-Z]{26})?$",
            description = "`next_cursor` of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "1-200, default 50"),
        ("status" = Option<TaskStatus>, Query, description = "Only tasks in this status"),
    ),
    responses(
        (status = 200, description = "A page of tasks", body = TaskPage),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn list_tasks(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<TaskPage>, ApiError> {
    let query = list_query(params)?;
    let page = state
        .tasks
        .list(
            &caller,
            TaskListing {
                status: query.status,
                before: query.cursor,
                limit: query.limit,
            },
        )
        .await?;
    Ok(Json(TaskPage {
        data: page.tasks,
        next_cursor: page.next_cursor,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
        list_query(crate::routes::decode_query(query)?)
    }

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
