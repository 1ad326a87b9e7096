//! The task as every interface shows it: the JSON object of `GET /v1/tasks/{id}` (SPEC §6),
//! which callbacks also deliver. Lives with the service because the callback sender uses it.

use serde_json::{json, Value};
use warden_store::Task;

use warden_time::rfc3339;

/// The task as the API shows it.
pub fn task_json(task: &Task) -> Value {
    let mut value = json!({
        "id": task.id,
        "kind": task.kind,
        "status": task.status,
        "owner": task.owner,
        "repos": task.repos,
        "prompt": task.prompt,
        "created_at": rfc3339(task.created_at_ms),
        "updated_at": rfc3339(task.updated_at_ms),
        "follow_up_to": task.follow_up_to,
        "retry_of": task.retry_of,
        "metadata": task.metadata,
        "runs": task.runs,
    });
    if let (Some(result), Some(map)) = (&task.result, value.as_object_mut()) {
        map.insert("result".into(), result.clone());
    }
    value
}

/// A status as the task JSON spells it (`waiting_input`).
pub fn status_name(status: warden_protocol::TaskStatus) -> &'static str {
    warden_store::state::status_name(status)
}
