//! The shapes the API answers with, as OpenAPI schemas. Handlers build their JSON with the
//! `*_json` functions next to them; these types describe that JSON for `/openapi.json`, and
//! the schemathesis run in CI checks every response against them.

use serde::Serialize;
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// `{"error":{"code","message"}}`: every error.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// A stable code, e.g. `not_found`, `invalid_request`, `rate_limited`.
    pub code: String,
    pub message: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// A registered repository.
#[derive(Debug, Serialize, ToSchema)]
pub struct RepoView {
    pub name: String,
    /// The source path or URL, credentials redacted.
    pub source: String,
    pub branch: Option<String>,
    pub checks: Vec<String>,
    /// Server directories shown read-only in this repository's sandboxes.
    pub mounts: Vec<String>,
    /// Commands filling this repository's dependency cache before a change task's agent.
    pub prepare: Vec<String>,
    pub created_by: String,
    /// RFC 3339, UTC.
    pub created_at: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RepoPage {
    pub data: Vec<RepoView>,
    pub next_cursor: Option<String>,
}

/// One repository of a task: its name, the revision asked for, and the commit it was pinned
/// to once a run started.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskRepoView {
    pub name: String,
    pub rev: Option<String>,
    /// 40 hex digits, once pinned.
    pub commit: Option<String>,
}

/// A task. `result` is the result JSON of SPEC §5 once the task has one.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskView {
    /// `tsk_` + 26 Crockford base-32 characters.
    pub id: String,
    /// `question`, `change` or `maintain`.
    pub kind: String,
    /// `queued`, `waiting_approval`, `running`, `testing`, `waiting_input`, `completed`,
    /// `failed`, `cancelled` or `timed_out`.
    pub status: String,
    pub owner: String,
    pub repos: Vec<TaskRepoView>,
    pub prompt: String,
    pub created_at: String,
    pub updated_at: String,
    pub follow_up_to: Option<String>,
    pub retry_of: Option<String>,
    #[schema(value_type = Object)]
    pub metadata: serde_json::Value,
    /// Runs started so far.
    pub runs: u32,
    #[schema(value_type = Option<Object>)]
    pub result: Option<serde_json::Value>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TaskPage {
    pub data: Vec<TaskView>,
    /// Pass as `cursor` for the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// The document's fixed parts: title, version, the bearer scheme.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Warden API",
        description = "Questions and changes over pinned repositories, run by sandboxed agents \
                       (the API overview is docs/api.md in the repository). Every route but /healthz and /openapi.json takes \
                       `Authorization: Bearer <token>`.",
    ),
    modifiers(&BearerScheme),
    security(("bearer" = [])),
)]
pub struct BaseDocument;

struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(Http::new(HttpAuthScheme::Bearer)),
        );
    }
}
