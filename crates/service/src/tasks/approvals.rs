//! Approvals bound to the hash of what they approve (a proposal hash for `publish`): who sees
//! them, who decides, and what a decision does.
//!
//! - Everyone sees the approvals of their own tasks; admins see all. An approval of a task the
//!   principal cannot see is not found, exactly like an unknown id.
//! - Only admins decide (SPEC: "an admin manages repositories, tokens and approvals").
//! - The decision names the hash it approves: a hash that is not `sha256:` + 64 lowercase hex
//!   digits is invalid; a well-formed hash that is not the one the approval is bound to is
//!   [`ServiceError::HashMismatch`]; an approval decided before (approved, rejected or consumed)
//!   is [`ServiceError::AlreadyDecided`]. Nothing changes in either case.
//! - Cancelling a task rejects its pending approvals (in the canceller's name), so deciding one
//!   afterwards is `AlreadyDecided`; a pending approval of a task that ended another way
//!   (abandoned after lost leases, cancelled by an older version) is a
//!   [`ServiceError::Conflict`]: there is nothing left to approve.
//! - A publication that failed for a cause that can be fixed (a refused token, a remote that
//!   was down) leaves its task waiting with `publication.status` `failed`; approving again with
//!   the same hash queues it again and its next run resumes publication, reconciling with the
//!   remote (nothing is pushed or opened twice). The decision itself is not made again.
//! - Deciding a `publish` (or `publish_sensitive`) approval queues its task again
//!   (`waiting_approval → queued`, the only way out of waiting the state machine allows besides
//!   cancelling). The worker that claims it does not run the agent: on approval it publishes
//!   the proposal ([`crate::publication::publish_approved`]) and the task ends `completed` with
//!   `publication` `pushed` or `pr_opened` (`failed` and the task `failed` when publication
//!   fails); on rejection the task ends `completed` with the proposal kept and `publication`
//!   `not_requested`. The queue is the durable trigger: a decision recorded by a process that
//!   died before queueing its task is found by the workers' periodic
//!   [`crate::publication::requeue_decided_tasks`].

use warden_protocol::views::ApprovalView;
use warden_store::{Approval, ApprovalStatus, Decision, StoreError, Task};

use crate::task_view::approval_view;

use super::{Principal, Role, ServiceError, TaskService};

/// Approval kinds whose approval publishes a proposal.
pub const PUBLISH_KINDS: [&str; 2] = ["publish", "publish_sensitive"];

/// Which approvals to list: those in `status` (`None`: all), after the approval `cursor`, at
/// most `limit` (1 to [`super::MAX_PAGE`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalListing {
    pub status: Option<ApprovalStatus>,
    pub cursor: Option<String>,
    pub limit: usize,
}

/// A page of approvals, oldest first, and the cursor of the next page when there is one.
#[derive(Debug, Clone)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalView>,
    pub next_cursor: Option<String>,
}

impl TaskService {
    /// Whether `principal` may see `approval`: admins see all, others those of their own tasks.
    async fn may_see(
        &self,
        principal: &Principal,
        approval: &Approval,
    ) -> Result<bool, ServiceError> {
        if principal.role == Role::Admin {
            return Ok(true);
        }
        let task = self.store.get_task(&approval.task).await?;
        Ok(task.is_some_and(|t| principal.sees_tasks_of(&t.owner)))
    }

    /// Approval `id`, if `principal` may see it.
    pub async fn approval(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<ApprovalView, ServiceError> {
        Ok(approval_view(&self.visible_approval(principal, id).await?))
    }

    /// [`TaskService::approval`] as the store keeps it.
    async fn visible_approval(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<Approval, ServiceError> {
        let missing = || ServiceError::NotFound(format!("approval {id} not found"));
        if id.is_empty() || id.len() > 100 {
            return Err(missing());
        }
        let approval = self.store.get_approval(id).await?.ok_or_else(missing)?;
        if !self.may_see(principal, &approval).await? {
            return Err(missing());
        }
        Ok(approval)
    }

    /// The approvals `principal` sees (of their tasks; every task's for admins), oldest first.
    pub async fn approvals(
        &self,
        principal: &Principal,
        listing: ApprovalListing,
    ) -> Result<ApprovalList, ServiceError> {
        let limit = listing.limit.clamp(1, super::MAX_PAGE as usize);
        let all = self.store.list_approvals(listing.status).await?;
        let mut page: Vec<Approval> = Vec::new();
        let mut past_cursor = listing.cursor.is_none();
        let mut next_cursor = None;
        for approval in all {
            if !past_cursor {
                past_cursor = listing.cursor.as_deref() == Some(approval.id.as_str());
                continue;
            }
            if !self.may_see(principal, &approval).await? {
                continue;
            }
            if page.len() == limit {
                next_cursor = page.last().map(|last| last.id.clone());
                break;
            }
            page.push(approval);
        }
        Ok(ApprovalList {
            approvals: page.iter().map(approval_view).collect(),
            next_cursor,
        })
    }

    /// Approval `id`, if `principal` may decide it (sees it, and is an admin): what
    /// [`TaskService::decide`] checks first, for an interface that asks something of the
    /// person (the console's confirmation) before deciding.
    pub async fn may_decide(
        &self,
        principal: &Principal,
        id: &str,
    ) -> Result<ApprovalView, ServiceError> {
        Ok(approval_view(&self.decidable(principal, id).await?))
    }

    /// [`TaskService::may_decide`] as the store keeps it.
    async fn decidable(&self, principal: &Principal, id: &str) -> Result<Approval, ServiceError> {
        let approval = self.visible_approval(principal, id).await?;
        if principal.role != Role::Admin {
            return Err(ServiceError::Forbidden(
                "only admin tokens decide approvals".into(),
            ));
        }
        Ok(approval)
    }

    /// Decides pending approval `id` (admins only), once, for exactly `hash`, the hash it is
    /// bound to. Deciding a `publish` approval queues its task: a worker publishes the proposal
    /// (approve) or ends the task with it unpublished (reject).
    pub async fn decide(
        &self,
        principal: &Principal,
        id: &str,
        decision: Decision,
        hash: &str,
    ) -> Result<ApprovalView, ServiceError> {
        let approval = self.decidable(principal, id).await?;
        if !well_formed_hash(hash) {
            return Err(ServiceError::Invalid(
                "hash must be sha256: followed by 64 lowercase hex digits".into(),
            ));
        }
        // Approving again what was approved, for the same hash, resumes a publication that
        // failed (its cause fixed since); the decision itself stands as it was made.
        if decision == Decision::Approve
            && approval.subject_hash == hash
            && matches!(
                approval.status,
                ApprovalStatus::Approved | ApprovalStatus::Consumed
            )
            && PUBLISH_KINDS.contains(&approval.kind.as_str())
            && crate::publication::requeue_failed_publication(self.store.as_ref(), &approval.task)
                .await?
        {
            self.wake.notify_one();
            return Ok(approval_view(&approval));
        }
        // A decided approval is `AlreadyDecided` (below) whatever its task did since.
        if approval.status == ApprovalStatus::Pending {
            if let Some(task) = self.store.get_task(&approval.task).await? {
                if task.status.is_terminal() {
                    return Err(ended(&task, &approval.id));
                }
            }
        }
        // An approval is given to exactly what it is bound to: the proposal is re-derived from
        // the mirror now, and one that changed since is not approved.
        if decision == Decision::Approve
            && approval.status == ApprovalStatus::Pending
            && approval.subject_hash == hash
            && PUBLISH_KINDS.contains(&approval.kind.as_str())
        {
            self.verify_proposal_unchanged(&approval).await?;
        }
        let decided = self
            .store
            .decide_approval(&approval.id, hash, decision, &principal.name)
            .await
            .map_err(|error| match error {
                StoreError::ApprovalMismatch { id } => ServiceError::HashMismatch {
                    approval: id,
                    hash: hash.to_string(),
                },
                StoreError::ApprovalState { id, actual, .. } => ServiceError::AlreadyDecided {
                    approval: id,
                    status: actual,
                },
                StoreError::NotFound { .. } => {
                    ServiceError::NotFound(format!("approval {id} not found"))
                }
                other => ServiceError::from(other),
            })?;
        // A run approval (the risk gate's `approve_before_run`): its task runs, or ends with
        // nothing run.
        if decided.kind == warden_engine::gates::RUN_APPROVAL_KIND
            && crate::gate::requeue_decided_run(self.store.as_ref(), &decided.task).await?
        {
            self.wake.notify_one();
        }
        if PUBLISH_KINDS.contains(&decided.kind.as_str()) {
            if crate::publication::requeue_decided(self.store.as_ref(), &decided.task).await? {
                self.wake.notify_one();
            }
            // Cancelled between the check above and the decision: nothing will be published.
            if decided.status == ApprovalStatus::Approved {
                if let Some(task) = self.store.get_task(&decided.task).await? {
                    if task.status.is_terminal() {
                        return Err(ended(&task, &approval.id));
                    }
                }
            }
        }
        Ok(approval_view(&decided))
    }
}

impl TaskService {
    /// The proposal a publish approval is bound to still hashes to it: its commit under its
    /// ref in the mirror, on its base, with the tree and validations its hash covers.
    async fn verify_proposal_unchanged(&self, approval: &Approval) -> Result<(), ServiceError> {
        let Some(repos) = self.repos.as_ref() else {
            // Without Warden's mirrors here, the worker verifies before publishing.
            return Ok(());
        };
        let Some(task) = self.store.get_task(&approval.task).await? else {
            return Ok(());
        };
        let proposal: Option<warden_protocol::Proposal> = task
            .result
            .as_ref()
            .and_then(|r| r.get("proposal"))
            .and_then(|p| serde_json::from_value(p.clone()).ok());
        let changed = |now: String| {
            ServiceError::Conflict(format!(
                "the proposal of task {} changed since approval {} was requested (now {now}); \
                 nothing was decided",
                task.id, approval.id
            ))
        };
        let Some(proposal) = proposal else {
            return Err(changed("no proposal".into()));
        };
        let repo = crate::task_repos::proposal_repo(&task, &proposal);
        let spec = crate::task_repos::repo_specs(self.store.as_ref(), std::slice::from_ref(&repo))
            .await
            .map_err(|failure| changed(failure.message))?
            .pop()
            .ok_or_else(|| changed("no repository".into()))?;
        let (git, mirror) = (repos.git().clone(), repos.mirror_path(&spec));
        let (task_id, hash) = (task.id.to_string(), approval.subject_hash.clone());
        tokio::task::spawn_blocking(move || {
            crate::publish::verify_proposal(&git, &mirror, &task_id, &proposal, &hash)
        })
        .await
        .map_err(ServiceError::internal)?
        .map_err(changed)
    }
}

/// The conflict of deciding an approval of a task that has ended.
fn ended(task: &Task, approval: &str) -> ServiceError {
    ServiceError::Conflict(format!(
        "task {} is {}; approval {approval} can no longer be decided and nothing will be \
         published",
        task.id,
        warden_store::state::status_name(task.status)
    ))
}

fn well_formed_hash(hash: &str) -> bool {
    hash.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha256_in_lowercase_hex() {
        assert!(well_formed_hash(&format!("sha256:{}", "a1".repeat(32))));
        assert!(!well_formed_hash(&format!("sha256:{}", "A1".repeat(32))));
        assert!(!well_formed_hash("sha256:abc"));
        assert!(!well_formed_hash(&"a".repeat(71)));
    }
}
