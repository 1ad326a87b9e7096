//! The task as every interface shows it: the JSON object of `GET /v1/tasks/{id}` (SPEC §6),
//! which callbacks also deliver. Lives with the service because the callback sender uses it.

use serde_json::{json, Value};
use warden_store::Task;

use crate::time::rfc3339;

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

/// Spend from the ledger as a result's usage.
pub fn usage_of(spend: &warden_store::Spend) -> warden_protocol::Usage {
    warden_protocol::Usage {
        input_tokens: spend.input_tokens,
        cached_input_tokens: spend.cached_input_tokens,
        output_tokens: spend.output_tokens,
        cost_usd: (!spend.cost_unknown).then(|| spend.cost_micro_usd as f64 / 1e6),
        model_calls: spend.entries,
        ..warden_protocol::Usage::default()
    }
}

/// The result of a cancelled task (SPEC §5: `failure` with code `cancelled`).
pub fn cancelled_result(task: &Task, by: &str, spend: &warden_store::Spend) -> Value {
    let model = task
        .result
        .as_ref()
        .and_then(|r| r.get("model"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let result = warden_protocol::QuestionResult {
        task_id: task.id.clone(),
        kind: task.kind,
        outcome: warden_protocol::QuestionOutcome::Failure {
            failure: warden_protocol::Failure {
                code: warden_protocol::FailureCode::Cancelled,
                message: format!("cancelled by {by}"),
            },
        },
        usage: usage_of(spend),
        model,
        sandbox: None,
        notices: vec![],
    };
    serde_json::to_value(&result).unwrap_or(Value::Null)
}
