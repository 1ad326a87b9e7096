//! `GET /v1/tasks/{id}/diff`: the unified diff of a change task's proposal commit against its
//! base, as JSON (`{"diff": "...", ...}`; a JSON body keeps one error and content format for the
//! whole API).
//!
//! - The diff comes from Warden's mirror through the hardened git (`diff-tree -p --no-renames
//!   --no-ext-diff --no-textconv --no-color`): no diff driver or textconv a repository
//!   configures ever runs. The proposal ref must still point at the recorded commit, whose
//!   parent is the recorded base.
//! - Registered secrets (model API keys, URL credentials) and credential-looking strings
//!   (GitHub/GitLab/AWS/Slack/`sk-` tokens, PEM private-key bodies) are replaced by
//!   `[redacted]` before the diff leaves the server, and so are the values of sensitive files
//!   (`.env*` keep their names, keys and credential stores only their diff markers; see
//!   [`crate::sensitive`]).
//! - At most [`MAX_DIFF_BYTES`], cut at a line end (`truncated: true`), so a secret is never
//!   cut in half past the redaction.
//! - 404 when the task is not visible to the token, is not a change, or has no proposal — also
//!   while it is still running (a proposal exists only once the run ends); the message says
//!   which.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::{Proposal, TaskKind};
use warden_repo::proposal::proposal_ref;
use warden_repo::{Git, RepoSpec};

use super::auth::Caller;
use super::schema::ErrorBody;
use super::tasks::visible_task;
use super::{ApiError, ApiPath, ApiState, ErrorCode};

/// The largest diff served; longer ones are cut at a line end and marked `truncated`.
pub const MAX_DIFF_BYTES: usize = 4 << 20;

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

fn no_proposal(message: String) -> ApiError {
    ApiError::new(ErrorCode::NotFound, message)
}

/// The snake_case name a protocol enum has on the wire.
fn wire_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".into(),
    }
}

fn is_object_id(text: &str) -> bool {
    matches!(text.len(), 40 | 64) && text.bytes().all(|b| b.is_ascii_hexdigit())
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
    let task = visible_task(&state, &caller, &id).await?;
    if task.kind != TaskKind::Change {
        return Err(no_proposal(format!(
            "task {id} is a {} task: only changes have a diff",
            wire_name(task.kind)
        )));
    }
    let proposal: Proposal = task
        .result
        .as_ref()
        .filter(|r| r.get("outcome").and_then(|o| o.as_str()) == Some("proposal"))
        .and_then(|r| r.get("proposal"))
        .and_then(|p| serde_json::from_value(p.clone()).ok())
        .ok_or_else(|| {
            no_proposal(format!(
                "task {id} has no proposal (status {})",
                wire_name(task.status)
            ))
        })?;
    if !is_object_id(&proposal.base_commit) || !is_object_id(&proposal.commit) {
        return Err(ApiError::internal(format!(
            "task {id}: the stored proposal names malformed commits"
        )));
    }
    let gone = || {
        no_proposal(format!(
            "the proposal of task {id} is no longer in Warden's mirror"
        ))
    };
    let repos = state.repos.as_ref().ok_or_else(gone)?;
    let registered = state
        .store
        .get_repo(&proposal.repo)
        .await?
        .ok_or_else(gone)?;
    let mut spec = RepoSpec::parse(&registered.source, Path::new("/")).map_err(|_| gone())?;
    spec.name = registered.name.clone();
    let mirror = repos.mirror_path(&spec);
    let git = repos.git().clone();
    let (task_id, base, commit) = (
        task.id.to_string(),
        proposal.base_commit.clone(),
        proposal.commit.clone(),
    );
    let produced = tokio::task::spawn_blocking(move || {
        proposal_diff(&git, &mirror, &task_id, &base, &commit, MAX_DIFF_BYTES)
    })
    .await
    .map_err(ApiError::internal)?;
    let (text, truncated) = match produced {
        Ok(Some(diff)) => diff,
        Ok(None) => return Err(gone()),
        Err(error) => return Err(ApiError::internal(error)),
    };
    let diff = crate::sensitive::redact_sensitive_file_values(
        &crate::sensitive::redact_credential_patterns(&state.redactor.text(&text)),
    );
    Ok(Json(DiffView {
        task_id: task.id.to_string(),
        repo: proposal.repo.clone(),
        base_commit: proposal.base_commit.clone(),
        commit: proposal.commit.clone(),
        hash: proposal.hash.clone(),
        diff,
        truncated,
        sensitive_files: proposal.sensitive_files.clone(),
    }))
}

/// The diff of `commit` against `base` in `mirror`, at most `max` bytes cut at a line end, and
/// whether it was cut. `None` when the mirror no longer holds the task's proposal as recorded
/// (ref moved or gone, or the commit is not on top of `base`).
fn proposal_diff(
    git: &Git,
    mirror: &Path,
    task_id: &str,
    base: &str,
    commit: &str,
    max: usize,
) -> Result<Option<(String, bool)>, String> {
    if !mirror.is_dir() {
        return Ok(None);
    }
    let git_dir = format!("--git-dir={}", mirror.display());
    let resolve = |rev: &str| {
        git.run(mirror, &[&git_dir, "rev-parse", "--verify", "--quiet", rev])
            .ok()
            .map(|o| o.text())
    };
    let at_ref = resolve(&format!("{}^{{commit}}", proposal_ref(task_id)));
    let parent = resolve(&format!("{commit}^1"));
    if at_ref.as_deref() != Some(commit) || parent.as_deref() != Some(base) {
        return Ok(None);
    }
    let mut stream = git
        .stream(
            mirror,
            &[
                &git_dir,
                "diff-tree",
                "-p",
                "-r",
                "--no-renames",
                "--no-ext-diff",
                "--no-textconv",
                "--no-color",
                base,
                commit,
            ],
        )
        .map_err(|e| e.to_string())?;
    drop(stream.take_stdin());
    let Some(stdout) = stream.take_stdout() else {
        return Err("git diff-tree has no output pipe".into());
    };
    let mut bytes = Vec::new();
    stdout
        .take(max as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read git diff-tree: {e}"))?;
    if bytes.len() > max {
        // Dropping the stream kills git; cut at the last complete line.
        drop(stream);
        bytes.truncate(max);
        let end = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        bytes.truncate(end);
        return Ok(Some((String::from_utf8_lossy(&bytes).into_owned(), true)));
    }
    stream.finish().map_err(|e| e.to_string())?;
    Ok(Some((String::from_utf8_lossy(&bytes).into_owned(), false)))
}
