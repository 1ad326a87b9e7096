//! The task as every interface shows it: [`TaskView`], the object of `GET /v1/tasks/{id}`
//! (SPEC §6), which callbacks also deliver. Lives with the service because the callback sender
//! uses it.

use serde_json::Value;
use warden_protocol::views::{ApprovalView, TaskView, Timestamp};
use warden_store::{Approval, Task};

/// The task as interfaces show it.
pub fn task_view(task: &Task) -> TaskView {
    TaskView {
        id: task.id.clone(),
        kind: task.kind,
        status: task.status,
        owner: task.owner.clone(),
        repos: task.repos.clone(),
        prompt: task.prompt.clone(),
        created_at: Timestamp(task.created_at_ms),
        updated_at: Timestamp(task.updated_at_ms),
        follow_up_to: task.follow_up_to.clone(),
        retry_of: task.retry_of.clone(),
        metadata: task.metadata.clone(),
        runs: task.runs,
        result: task.result.clone(),
    }
}

/// An approval as interfaces show it.
pub fn approval_view(approval: &Approval) -> ApprovalView {
    ApprovalView {
        id: approval.id.clone(),
        task_id: approval.task.clone(),
        kind: approval.kind.clone(),
        subject_hash: approval.subject_hash.clone(),
        status: approval.status,
        created_at: Timestamp(approval.created_at_ms),
        decided_by: approval.decided_by.clone(),
        decided_at: approval.decided_at_ms.map(Timestamp),
        consumed_at: approval.consumed_at_ms.map(Timestamp),
    }
}

/// The task's JSON ([`task_view`] serialised).
pub fn task_json(task: &Task) -> Value {
    view_json(&task_view(task))
}

/// A view's JSON. A view always serialises (its maps have string keys).
pub fn view_json(view: &TaskView) -> Value {
    serde_json::to_value(view).unwrap_or(Value::Null)
}

/// A status as the task JSON spells it (`waiting_input`).
pub fn status_name(status: warden_protocol::TaskStatus) -> &'static str {
    warden_store::state::status_name(status)
}
