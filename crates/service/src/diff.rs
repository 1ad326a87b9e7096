//! A task's proposal diff from the store's record of it: finds the task's mirror and hands over
//! to [`warden_engine::diff::redacted_proposal_diff`], the one producer of the redacted text —
//! and the proposal itself as a git bundle ([`task_bundle`]), found the same way.

use warden_engine::diff::{proposal_bundle, redacted_proposal_diff, ProposalBundle};
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
    let (proposal, mirror) = proposal_and_mirror(store, repos, task).await?;
    let git = repos.git().clone();
    let task_id = task.id.to_string();
    let for_diff = proposal.clone();
    let redactor = redactor.clone();
    let produced = tokio::task::spawn_blocking(move || {
        redacted_proposal_diff(&git, &mirror, &task_id, &for_diff, &redactor)
    })
    .await
    .map_err(|e| TaskDiffError::Failed(e.to_string()))?;
    match produced {
        Ok(Some((diff, truncated))) => Ok((proposal, diff, truncated)),
        Ok(None) => Err(gone(&task.id)),
        Err(error) => Err(TaskDiffError::Failed(error)),
    }
}

/// A change task's proposal as a git bundle, as `GET /v1/tasks/{id}/proposal` serves it for
/// `warden apply` against a server (see [`warden_engine::diff::proposal_bundle`]): the proposal
/// and what was found, found the way [`task_diff`] finds it.
pub async fn task_bundle(
    store: &dyn warden_store::Store,
    repos: &warden_repo::RepoStore,
    redactor: &Redactor,
    task: &warden_store::Task,
) -> Result<(Proposal, ProposalBundle), TaskDiffError> {
    let (proposal, mirror) = proposal_and_mirror(store, repos, task).await?;
    let git = repos.git().clone();
    let task_id = task.id.to_string();
    let for_bundle = proposal.clone();
    let redactor = redactor.clone();
    let produced = tokio::task::spawn_blocking(move || {
        proposal_bundle(&git, &mirror, &task_id, &for_bundle, &redactor)
    })
    .await
    .map_err(|e| TaskDiffError::Failed(e.to_string()))?;
    match produced {
        Ok(Some(bundle)) => Ok((proposal, bundle)),
        Ok(None) => Err(gone(&task.id)),
        Err(error) => Err(TaskDiffError::Failed(error)),
    }
}

fn gone(id: &warden_protocol::TaskId) -> TaskDiffError {
    TaskDiffError::Missing(format!(
        "the proposal of task {id} is no longer in Warden's mirror"
    ))
}

/// The task's proposal and the mirror holding it.
async fn proposal_and_mirror(
    store: &dyn warden_store::Store,
    repos: &warden_repo::RepoStore,
    task: &warden_store::Task,
) -> Result<(Proposal, std::path::PathBuf), TaskDiffError> {
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
    let repo = crate::task_repos::proposal_repo(task, &proposal);
    let spec = crate::task_repos::repo_specs(store, std::slice::from_ref(&repo))
        .await
        .map_err(|_| gone(id))?
        .pop()
        .ok_or_else(|| gone(id))?;
    Ok((proposal, repos.mirror_path(&spec)))
}

/// The snake_case name a protocol enum has on the wire.
fn wire_name(value: impl serde::Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => "unknown".into(),
    }
}
