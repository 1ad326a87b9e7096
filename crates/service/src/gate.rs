//! The store's side of the risk gate (`warden_engine::gates`): the approval a change task
//! waits for before it runs (`approve_before_run`), and queueing the task again once that
//! approval is decided.
//!
//! The gate is decided by the worker that claims the task, before it pins, opens a sandbox or
//! asks a model (`worker/gate.rs`). A task that must be approved first ends its run
//! `waiting_approval` with an `awaiting_approval` result naming an approval of kind `run`
//! bound to the request's hash. Deciding that approval queues the task again (as deciding a
//! publish approval does, and recovered the same way by the workers' periodic
//! [`crate::publication::requeue_decided_tasks`]); the worker that claims it then runs the
//! agent (approved: the approval is consumed first, so it authorises one run) or ends the task
//! `cancelled` with failure `rejected` and nothing run.

use warden_engine::gates::RUN_APPROVAL_KIND;
/// How a gate's level and reasons read, for interfaces that show them.
pub use warden_engine::gates::{action_name, level_name, reason_lines};
use warden_protocol::{ChangeOutcome, ChangeResult, TaskId, TaskStatus};
use warden_store::{ApprovalStatus, Store, StoreError};

/// The run approval a waiting task's result names, when its outcome is `awaiting_approval`.
pub(crate) fn awaited_run_approval(result: &ChangeResult) -> Option<&str> {
    match (&result.outcome, &result.approval) {
        (ChangeOutcome::AwaitingApproval {}, Some(approval))
            if approval.kind == RUN_APPROVAL_KIND =>
        {
            Some(approval.id.as_str())
        }
        _ => None,
    }
}

/// Queues a task waiting for its run approval once that approval is decided (approved or
/// rejected). `Ok(true)` when this call queued it; any other task is left alone.
pub async fn requeue_decided_run(store: &dyn Store, task: &TaskId) -> Result<bool, StoreError> {
    let Some(current) = store.get_task(task).await? else {
        return Ok(false);
    };
    if current.status != TaskStatus::WaitingApproval {
        return Ok(false);
    }
    let Some(result) = current
        .result
        .clone()
        .and_then(|value| serde_json::from_value::<ChangeResult>(value).ok())
    else {
        return Ok(false);
    };
    let Some(id) = awaited_run_approval(&result) else {
        return Ok(false);
    };
    let decided = store
        .get_approval(id)
        .await?
        .is_some_and(|a| a.task == current.id && a.status != ApprovalStatus::Pending);
    if !decided {
        return Ok(false);
    }
    match store
        .transition(task, TaskStatus::WaitingApproval, TaskStatus::Queued, None)
        .await
    {
        Ok(_) => Ok(true),
        Err(StoreError::StatusConflict { .. }) => Ok(false),
        Err(error) => Err(error),
    }
}

/// The protocol's view of a stored approval.
pub(crate) fn approval_view(approval: &warden_store::Approval) -> warden_protocol::Approval {
    warden_protocol::Approval {
        id: approval.id.clone(),
        kind: approval.kind.clone(),
        subject_hash: approval.subject_hash.clone(),
        status: match approval.status {
            ApprovalStatus::Pending => warden_protocol::ApprovalStatus::Pending,
            ApprovalStatus::Approved | ApprovalStatus::Consumed => {
                warden_protocol::ApprovalStatus::Approved
            }
            ApprovalStatus::Rejected => warden_protocol::ApprovalStatus::Rejected,
        },
        decided_by: approval.decided_by.clone(),
        decided_at: approval.decided_at_ms.map(warden_time::rfc3339),
    }
}
