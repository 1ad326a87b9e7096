//! A task's proposal diff from the store's record of it: finds the task's mirror and hands over
//! to [`warden_engine::diff::redacted_proposal_diff`], the one producer of the redacted text.

use warden_engine::diff::redacted_proposal_diff;
use warden_engine::redact::Redactor;
use warden_protocol::Proposal;

/// Why a task has no diff to show.
#[derive(Debug, thiserror::Error)]
pub enum TaskDiffError {
    /// Not a change task, no proposal (yet), or the proposal is gone from the mirror.
    #[error("{0}")]
    Missing(String),
    #[error("{0}")]
    Failed(String),
}

/// A change task's proposal diff, as `GET /v1/tasks/{id}/diff` serves it and `warden diff`
/// prints it: the proposal (for its stat) and `(diff, truncated)`. The mirror is found from the
/// task's repository as its runs pinned it (a registered repository, or an in-process task's
/// own source).
pub async fn task_diff(
    store: &dyn warden_store::Store,
    repos: &warden_repo::RepoStore,
    redactor: &Redactor,
    task: &warden_store::Task,
) -> Result<(Proposal, String, bool), TaskDiffError> {
    use warden_protocol::TaskKind;
    let id = &task.id;
    if !matches!(task.kind, TaskKind::Change | TaskKind::Maintain) {
        return Err(TaskDiffError::Missing(format!(
            "task {id} is a {} task: only changes and maintenance have a diff",
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
            TaskDiffError::Missing(format!(
                "task {id} has no proposal (status {})",
                wire_name(task.status)
            ))
        })?;
    let gone = || {
        TaskDiffError::Missing(format!(
            "the proposal of task {id} is no longer in Warden's mirror"
        ))
    };
    let repo = crate::task_repos::proposal_repo(task, &proposal);
    let spec = crate::task_repos::repo_specs(store, std::slice::from_ref(&repo))
        .await
        .map_err(|_| gone())?
        .pop()
        .ok_or_else(gone)?;
    let mirror = repos.mirror_path(&spec);
    let git = repos.git().clone();
    let task_id = id.to_string();
    let for_diff = proposal.clone();
    let redactor = redactor.clone();
    let produced = tokio::task::spawn_blocking(move || {
        redacted_proposal_diff(&git, &mirror, &task_id, &for_diff, &redactor)
    })
    .await
    .map_err(|e| TaskDiffError::Failed(e.to_string()))?;
    match produced {
        Ok(Some((diff, truncated))) => Ok((proposal, diff, truncated)),
        Ok(None) => Err(gone()),
        Err(error) => Err(TaskDiffError::Failed(error)),
    }
}

/// The snake_case name a protocol enum has on the wire.
fn wire_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".into(),
    }
}
