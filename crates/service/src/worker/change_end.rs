//! How a change run (or a maintenance run, which is one) ends, shared by its steps: a failure
//! as the change result, the result redacted, and the approval a proposal waits for before it
//! is published. A leaf of the worker: `change_task`, `maintain_task` and `gate` all end runs
//! through it, and it imports none of them.

use serde_json::Value;
use warden_protocol::{ChangeOutcome, ChangeResult, Failure, FailureCode, TaskStatus, Usage};
use warden_store::{ApprovalStatus, Decision, NewApproval, StoreError, Task};

use super::{Ending, RunServices};
use crate::outage::{RunStore, StoreCalls};
use warden_engine::change;

/// Who rejects an approval whose proposal a later run replaced.
const WARDEN: &str = "warden";

/// A change failure before or around the loop: the change result JSON and its status.
pub(super) fn change_failed(task: &Task, model: &str, failure: Failure) -> Ending {
    let status = match failure.code {
        FailureCode::Cancelled => TaskStatus::Cancelled,
        FailureCode::TimedOut => TaskStatus::TimedOut,
        _ => TaskStatus::Failed,
    };
    let result = ChangeResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: ChangeOutcome::Failure { failure },
        baseline: vec![],
        approval: None,
        usage: Usage {
            cost_usd: Some(0.0),
            ..Usage::default()
        },
        model: model.to_string(),
        sandbox: None,
        notices: vec![],
        maintenance: None,
        gate: None,
        review: None,
    };
    Ending::Finished {
        status,
        result: serde_json::to_value(&result).unwrap_or(Value::Null),
    }
}

pub(super) fn infrastructure(message: String) -> Failure {
    Failure {
        code: FailureCode::Infrastructure,
        message,
    }
}

/// Creates the approval publication of a proposal waits for and marks the result as waiting.
/// `Ok(false)` when the result has no proposal.
pub(super) async fn request_publication(
    store: &RunStore,
    task: &Task,
    run_number: u32,
    result: &mut ChangeResult,
) -> Result<bool, Failure> {
    let first_id = change::publication_approval_id(&task.id);
    let Some(approval) = change::await_publication(result, first_id.clone()) else {
        return Ok(false);
    };
    let new = |id: String| NewApproval {
        id,
        task: task.id.clone(),
        kind: approval.kind.clone(),
        subject_hash: approval.subject_hash.clone(),
    };
    let store_failure =
        |error: StoreError| infrastructure(format!("cannot create the approval: {error}"));
    let create = |id: String| {
        store.call("creating the publish approval", move |store| {
            store.create_approval(new(id.clone()))
        })
    };
    match create(first_id.clone()).await {
        Ok(_) => return Ok(true),
        Err(StoreError::AlreadyExists { .. }) => {}
        Err(error) => return Err(store_failure(error)),
    }
    // An interrupted earlier run of this task created it.
    let existing = store
        .call("reading the publish approval", |store| {
            store.get_approval(&first_id)
        })
        .await
        .map_err(store_failure)?;
    if let Some(existing) = &existing {
        if existing.kind == approval.kind
            && existing.subject_hash == approval.subject_hash
            && existing.status == ApprovalStatus::Pending
        {
            return Ok(true);
        }
        if existing.status == ApprovalStatus::Pending {
            // Its proposal is replaced by this run's: it must never authorise anything.
            if let Err(error) = store
                .call("rejecting a superseded approval", |store| {
                    store.decide_approval(
                        &first_id,
                        &existing.subject_hash,
                        Decision::Reject,
                        WARDEN,
                    )
                })
                .await
            {
                tracing::warn!(%error, approval = %first_id, "cannot reject a superseded approval");
            }
        }
    }
    let id = format!("{first_id}-{run_number}");
    match create(id.clone()).await {
        Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
        Err(error) => return Err(store_failure(error)),
    }
    if let Some(approval) = result.approval.as_mut() {
        approval.id = id;
    }
    Ok(true)
}

/// Ends a change run with its result, redacted (finishing a terminal run stores its
/// `task_finished` event).
pub(super) fn finished(
    services: &RunServices,
    status: TaskStatus,
    result: &ChangeResult,
) -> Ending {
    let result = services
        .redactor
        .json(serde_json::to_value(result).unwrap_or(Value::Null));
    Ending::Finished { status, result }
}
