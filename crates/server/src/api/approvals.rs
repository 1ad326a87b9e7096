//! `GET /v1/approvals`, `GET /v1/approvals/{id}`, `POST /v1/approvals/{id}`: approvals bound to
//! the hash of what they approve (a proposal hash for `publish`).
//!
//! - Everyone sees the approvals of their own tasks; admins see all. An approval of a task the
//!   caller cannot see is 404, exactly like an unknown id.
//! - Only admins decide (SPEC: "an admin manages repositories, tokens and approvals"): 403 for
//!   other roles on an approval they can see.
//! - The decision names the hash it approves: a hash that is not `sha256:` + 64 lowercase hex
//!   digits is 422 `invalid_request`; a well-formed hash that is not the one the approval is
//!   bound to is 409 `hash_mismatch`; an approval decided before (approved, rejected or
//!   consumed) is 409 `already_decided`. Nothing changes in either case.
//! - Cancelling a task rejects its pending approvals (in the canceller's name), so deciding one
//!   afterwards is 409 `already_decided`; a pending approval of a task that ended another way
//!   (abandoned after lost leases, cancelled by an older version) is 409 `conflict`: there is
//!   nothing left to approve.
//! - Deciding a `publish` (or `publish_sensitive`) approval queues its task again
//!   (`waiting_approval → queued`, the only way out of waiting the state machine allows besides
//!   cancelling). The worker that claims it does not run the agent: on approval it publishes
//!   the proposal ([`crate::publish::publish_approved`]: push to `warden/<task>`, open the pull
//!   request) and the task ends `completed` with `publication` `pushed` or `pr_opened` (`failed`
//!   and the task `failed` when publication fails); on rejection the task ends `completed` with
//!   the proposal kept (in the result and the mirror) and `publication` `not_requested`. The
//!   queue is the durable trigger, no outbox intent is involved: a decision recorded by a
//!   process that died before queueing its task is found by the workers' periodic
//!   [`crate::publish::requeue_decided_tasks`]; a crash during publication interrupts the run
//!   and the next run resumes it, each step reconciled with the remote.

use std::sync::Arc;

use axum::extract::State;
use axum::http::Uri;
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::TaskId;
use warden_store::{Approval, ApprovalStatus, Decision, Store, StoreError, Task};

use super::auth::{ApiRole, Caller};
use super::schema::ErrorBody;
use super::{ApiError, ApiJson, ApiPath, ApiState, ErrorCode};
use crate::publish;
use crate::time::rfc3339;

/// Approval kinds whose approval publishes a proposal.
pub const PUBLISH_KINDS: [&str; 2] = ["publish", "publish_sensitive"];

const DEFAULT_PAGE: usize = 50;
const MAX_PAGE: usize = 200;

/// An approval.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    /// `apr_…`.
    pub id: String,
    pub task_id: String,
    /// What is approved: `publish`, `publish_sensitive`, `command`, `dirty_start`, …
    pub kind: String,
    /// `sha256:` + 64 hex digits: the hash of exactly what is approved.
    pub subject_hash: String,
    /// `pending`, `approved`, `rejected` or `consumed` (approved and used).
    pub status: String,
    pub created_at: String,
    pub decided_by: Option<String>,
    pub decided_at: Option<String>,
    pub consumed_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalPage {
    pub data: Vec<ApprovalView>,
    pub next_cursor: Option<String>,
}

/// `approve` or `reject`.
#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
enum DecisionName {
    Approve,
    Reject,
}

/// A decision on a pending approval, bound to the hash it approves.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
struct DecideApproval {
    decision: DecisionName,
    /// The approval's `subject_hash`, exactly.
    hash: String,
}

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(get_approval, decide_approval))
}

fn approval_json(approval: &Approval) -> Value {
    json!({
        "id": approval.id,
        "task_id": approval.task.as_str(),
        "kind": approval.kind,
        "subject_hash": approval.subject_hash,
        "status": approval.status.as_str(),
        "created_at": rfc3339(approval.created_at_ms),
        "decided_by": approval.decided_by,
        "decided_at": approval.decided_at_ms.map(rfc3339),
        "consumed_at": approval.consumed_at_ms.map(rfc3339),
    })
}

/// Whether the caller may see the approval: admins see all, others those of their own tasks.
async fn may_see(state: &ApiState, caller: &Caller, approval: &Approval) -> Result<bool, ApiError> {
    if caller.role == ApiRole::Admin {
        return Ok(true);
    }
    let task = state.store.get_task(&approval.task).await?;
    Ok(task.is_some_and(|t| t.owner == caller.name))
}

async fn visible_approval(
    state: &ApiState,
    caller: &Caller,
    id: &str,
) -> Result<Approval, ApiError> {
    let missing = || ApiError::new(ErrorCode::NotFound, format!("approval {id} not found"));
    if id.is_empty() || id.len() > 100 {
        return Err(missing());
    }
    let approval = state.store.get_approval(id).await?.ok_or_else(missing)?;
    if !may_see(state, caller, &approval).await? {
        return Err(missing());
    }
    Ok(approval)
}

/// `status` (default `pending`, or `all`), `cursor`, `limit`.
struct ListQuery {
    status: Option<ApprovalStatus>,
    cursor: Option<String>,
    limit: usize,
}

fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = ListQuery {
        status: Some(ApprovalStatus::Pending),
        cursor: None,
        limit: DEFAULT_PAGE,
    };
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        match key {
            "status" if value == "all" => parsed.status = None,
            "status" => {
                parsed.status = Some(ApprovalStatus::parse(value).ok_or_else(|| {
                    bad(format!(
                        "unknown status {value:?}: pending, approved, rejected, consumed or all"
                    ))
                })?);
            }
            "cursor" if value.is_empty() => {}
            "cursor"
                if value.len() <= 100
                    && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                parsed.cursor = Some(value.to_string());
            }
            "cursor" => return Err(bad(format!("invalid cursor {value:?}"))),
            "limit" => {
                parsed.limit = value
                    .parse()
                    .ok()
                    .filter(|n| (1..=MAX_PAGE).contains(n))
                    .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
            }
            other => return Err(bad(format!("unknown query parameter {other:?}"))),
        }
    }
    Ok(parsed)
}

/// Approvals of the caller's tasks (every task's for admins), oldest first; pending ones unless
/// `status` says otherwise.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    params(
        ("status" = Option<String>, Query,
            description = "`pending` (default), `approved`, `rejected`, `consumed` or `all`"),
        ("cursor" = Option<String>, Query, description = "`next_cursor` of the previous page"),
        ("limit" = Option<u32>, Query, description = "1-200, default 50"),
    ),
    responses(
        (status = 200, description = "A page of approvals", body = ApprovalPage),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn list_approvals(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let query = parse_list_query(uri.query())?;
    let all = state.store.list_approvals(query.status).await?;
    let mut page = Vec::new();
    let mut past_cursor = query.cursor.is_none();
    let mut next_cursor = None;
    for approval in all {
        if !past_cursor {
            past_cursor = query.cursor.as_deref() == Some(approval.id.as_str());
            continue;
        }
        if !may_see(&state, &caller, &approval).await? {
            continue;
        }
        if page.len() == query.limit {
            next_cursor = page
                .last()
                .and_then(|last: &Value| last["id"].as_str().map(str::to_string));
            break;
        }
        page.push(approval_json(&approval));
    }
    Ok(Json(json!({"data": page, "next_cursor": next_cursor})))
}

/// One approval.
#[utoipa::path(get, path = "/v1/approvals/{id}", tag = "approvals",
    params(("id" = String, Path, description = "The approval id")),
    responses(
        (status = 200, description = "The approval", body = ApprovalView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such approval visible to this token", body = ErrorBody),
    ))]
async fn get_approval(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<Value>, ApiError> {
    let approval = visible_approval(&state, &caller, &id).await?;
    Ok(Json(approval_json(&approval)))
}

/// The 409 for deciding an approval of a task that has ended.
fn ended(task: &Task, approval: &str) -> ApiError {
    ApiError::new(
        ErrorCode::Conflict,
        format!(
            "task {} is {}; approval {approval} can no longer be decided and nothing will be \
             published",
            task.id,
            warden_store::state::status_name(task.status)
        ),
    )
}

/// Rejects the pending approvals of a task that was just cancelled, in the canceller's name, so
/// none of them can authorise anything later. Failures are logged: the task has ended anyway
/// (and deciding its approvals is refused from now on).
pub async fn reject_pending(store: &dyn Store, task: &TaskId, by: &str) {
    let pending = match store.list_approvals(Some(ApprovalStatus::Pending)).await {
        Ok(pending) => pending,
        Err(error) => {
            tracing::warn!(%task, %error, "cannot list the approvals of a cancelled task");
            return;
        }
    };
    for approval in pending.iter().filter(|a| &a.task == task) {
        match store
            .decide_approval(&approval.id, &approval.subject_hash, Decision::Reject, by)
            .await
        {
            Ok(_) | Err(StoreError::ApprovalState { .. }) => {}
            Err(error) => {
                tracing::warn!(%task, approval = %approval.id, %error, "cannot reject the approval of a cancelled task")
            }
        }
    }
}

fn well_formed_hash(hash: &str) -> bool {
    hash.strip_prefix("sha256:").is_some_and(|hex| {
        hex.len() == 64
            && hex
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    })
}

/// Decides a pending approval, once, for exactly the hash it is bound to (admin tokens only).
/// Deciding a `publish` approval queues its task: a worker publishes the proposal (approve) or
/// ends the task with it unpublished (reject).
#[utoipa::path(post, path = "/v1/approvals/{id}", tag = "approvals", request_body = DecideApproval,
    params(("id" = String, Path, description = "The approval id")),
    responses(
        (status = 200, description = "Decided", body = ApprovalView),
        (status = 400, description = "The body is not JSON", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "Not an admin token", body = ErrorBody),
        (status = 404, description = "No such approval visible to this token", body = ErrorBody),
        (status = 409, description = "`hash_mismatch`: not the hash the approval is bound to; \
            `already_decided`: the approval was decided before; `conflict`: its task has ended \
            (cancelled, failed, …)", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 422, description = "Invalid fields (unknown decision, malformed hash)", body = ErrorBody),
    ))]
async fn decide_approval(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
    ApiJson(request, _): ApiJson<DecideApproval>,
) -> Result<Json<Value>, ApiError> {
    let approval = visible_approval(&state, &caller, &id).await?;
    if caller.role != ApiRole::Admin {
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "only admin tokens decide approvals",
        ));
    }
    if !well_formed_hash(&request.hash) {
        return Err(ApiError::invalid(
            "hash must be sha256: followed by 64 lowercase hex digits",
        ));
    }
    // A decided approval is `already_decided` (below) whatever its task did since.
    if approval.status == ApprovalStatus::Pending {
        if let Some(task) = state.store.get_task(&approval.task).await? {
            if task.status.is_terminal() {
                return Err(ended(&task, &approval.id));
            }
        }
    }
    let decision = match request.decision {
        DecisionName::Approve => Decision::Approve,
        DecisionName::Reject => Decision::Reject,
    };
    let decided = state
        .store
        .decide_approval(&approval.id, &request.hash, decision, &caller.name)
        .await
        .map_err(|error| match error {
            StoreError::ApprovalMismatch { id } => ApiError::new(
                ErrorCode::HashMismatch,
                format!(
                    "hash {} is not the hash approval {id} is bound to; nothing was decided",
                    request.hash
                ),
            ),
            StoreError::ApprovalState { id, actual, .. } => ApiError::new(
                ErrorCode::AlreadyDecided,
                format!(
                    "approval {id} is {}; an approval is decided once",
                    actual.as_str()
                ),
            ),
            StoreError::NotFound { .. } => {
                ApiError::new(ErrorCode::NotFound, format!("approval {id} not found"))
            }
            other => ApiError::from(other),
        })?;
    if PUBLISH_KINDS.contains(&decided.kind.as_str()) {
        if publish::requeue_decided(state.store.as_ref(), &decided.task).await? {
            state.wake.notify_one();
        }
        // Cancelled between the check above and the decision: nothing will be published.
        if decided.status == ApprovalStatus::Approved {
            if let Some(task) = state.store.get_task(&decided.task).await? {
                if task.status.is_terminal() {
                    return Err(ended(&task, &approval.id));
                }
            }
        }
    }
    Ok(Json(approval_json(&decided)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_queries() {
        assert!(well_formed_hash(&format!("sha256:{}", "a1".repeat(32))));
        assert!(!well_formed_hash(&format!("sha256:{}", "A1".repeat(32))));
        assert!(!well_formed_hash("sha256:abc"));
        assert!(!well_formed_hash(&"a".repeat(71)));
        assert!(parse_list_query(Some("status=all"))
            .unwrap()
            .status
            .is_none());
        assert_eq!(
            parse_list_query(None).unwrap().status,
            Some(ApprovalStatus::Pending)
        );
        assert!(parse_list_query(Some("status=maybe")).is_err());
        assert!(parse_list_query(Some("limit=0")).is_err());
        assert!(parse_list_query(Some("cursor=a%20b")).is_err());
        assert!(parse_list_query(Some("x=1")).is_err());
    }
}
