//! Reading tasks back: pages of the tasks a principal sees, and a change's proposal as a diff.
//! One task ([`TaskService::task`]) and the visibility rule ([`super::Principal::owner_scope`])
//! live in `mod.rs`; event streams and journals are read by the interfaces once the task is
//! known to be visible.
//!
//! A proposal's diff is [`crate::diff::redacted_proposal_diff`], the one producer `warden diff`
//! uses too: hardened `diff-tree` from Warden's mirror, secrets and sensitive files' values
//! redacted, at most [`crate::diff::MAX_DIFF_BYTES`] cut at a line end. A task that is not a
//! change, has no proposal (also while it runs: a proposal exists once the run ends), or whose
//! proposal left the mirror has no diff (not found, the message says which).

use warden_protocol::{TaskId, TaskStatus};

use warden_store::{Task, TaskQuery};

use super::{Principal, ServiceError, TaskService};

/// The most tasks or approvals a page holds.
pub const MAX_PAGE: u32 = 200;

/// Which tasks to list: in `status` (`None`: any), older than the task `before` (the previous
/// page's cursor), at most `limit` (1 to [`MAX_PAGE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskListing {
    pub status: Option<TaskStatus>,
    pub before: Option<TaskId>,
    pub limit: u32,
}

/// A page of tasks, newest first, and the cursor of the next page when there is one.
#[derive(Debug, Clone)]
pub struct TaskList {
    pub tasks: Vec<Task>,
    pub next_cursor: Option<TaskId>,
}

/// A change task's proposal and its diff against its base commit, secrets redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposalDiff {
    pub task: TaskId,
    pub repo: String,
    pub base_commit: String,
    pub commit: String,
    /// The proposal hash approvals bind to.
    pub hash: String,
    /// Unified diff (`git diff-tree -p`), redacted.
    pub diff: String,
    /// The diff was longer than is served and was cut at a line end.
    pub truncated: bool,
    /// Changed paths that need a `publish_sensitive` approval to publish.
    pub sensitive_files: Vec<String>,
}

impl TaskService {
    /// The tasks `principal` sees (their own; everyone's for admins), newest first.
    pub async fn list(
        &self,
        principal: &Principal,
        listing: TaskListing,
    ) -> Result<TaskList, ServiceError> {
        let limit = listing.limit.clamp(1, MAX_PAGE);
        let mut tasks = self
            .store
            .list_tasks(TaskQuery {
                owner: principal.owner_scope().map(str::to_string),
                status: listing.status,
                before: listing.before,
                limit: limit + 1,
            })
            .await?;
        let more = tasks.len() > limit as usize;
        tasks.truncate(limit as usize);
        let next_cursor = if more {
            tasks.last().map(|t| t.id.clone())
        } else {
            None
        };
        Ok(TaskList { tasks, next_cursor })
    }

    /// The diff of change task `id`'s proposal, if `principal` sees the task.
    pub async fn proposal_diff(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<ProposalDiff, ServiceError> {
        let task = self.task(principal, id).await?;
        let gone = || {
            ServiceError::NotFound(format!(
                "the proposal of task {id} is no longer in Warden's mirror"
            ))
        };
        let repos = self.repos.as_ref().ok_or_else(gone)?;
        let (proposal, diff, truncated) =
            crate::diff::task_diff(self.store.as_ref(), repos, &self.redactor, &task)
                .await
                .map_err(|error| match error {
                    crate::diff::TaskDiffError::Missing(message) => ServiceError::NotFound(message),
                    crate::diff::TaskDiffError::Failed(message) => ServiceError::internal(message),
                })?;
        Ok(ProposalDiff {
            task: task.id,
            repo: proposal.repo,
            base_commit: proposal.base_commit,
            commit: proposal.commit,
            hash: proposal.hash,
            diff,
            truncated,
            sensitive_files: proposal.sensitive_files,
        })
    }
}
