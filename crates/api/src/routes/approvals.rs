//! `GET /v1/approvals`, `GET /v1/approvals/{id}`, `POST /v1/approvals/{id}`: approvals bound to
//! the hash of what they approve (a proposal hash for `publish`), served by
//! [`warden_service::tasks::TaskService`], whose `approvals.rs` holds the rules: who sees which
//! approval (an invisible one is 404, like an unknown id), only admins decide (403), a
//! malformed hash is 422 `invalid_request`, another hash 409 `hash_mismatch`, a second
//! decision 409 `already_decided`, an approval of an ended task 409 `conflict`; deciding a
//! `publish` approval queues its task, whose worker publishes the proposal or ends the task
//! with it unpublished.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_protocol::views::{ApprovalStatus, ApprovalView};
use warden_protocol::Decision;

use super::auth::Caller;
use super::schema::{ApprovalStatusFilterName, ErrorBody};
use super::{ApiError, ApiJson, ApiPath, ApiQuery, ApiState, ErrorCode};
use warden_service::tasks::{ApprovalListing, MAX_PAGE};

const DEFAULT_PAGE: usize = 50;

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ApprovalPage {
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
    #[schema(pattern = "^sha256:[0-9a-f]{64}$")]
    hash: String,
}

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(get_approval, decide_approval))
}

/// `status` (default `pending`, or `all`), `cursor`, `limit`.
struct ListQuery {
    status: Option<ApprovalStatus>,
    cursor: Option<String>,
    limit: usize,
}

/// The list route's query parameters as sent (see [`super::ApiQuery`]).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ListParams {
    status: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

fn list_query(params: ListParams) -> Result<ListQuery, ApiError> {
    let bad = |message: String| ApiError::new(ErrorCode::BadRequest, message);
    let mut parsed = ListQuery {
        status: Some(ApprovalStatus::Pending),
        cursor: None,
        limit: DEFAULT_PAGE,
    };
    match params.status.as_deref() {
        None => {}
        Some("all") => parsed.status = None,
        Some(value) => {
            parsed.status = Some(ApprovalStatus::parse(value).ok_or_else(|| {
                bad(format!(
                    "unknown status {value:?}: pending, approved, rejected, consumed or all"
                ))
            })?);
        }
    }
    match params.cursor {
        None => {}
        Some(value) if value.is_empty() => {}
        Some(value)
            if value.len() <= 100
                && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
        {
            parsed.cursor = Some(value);
        }
        Some(value) => return Err(bad(format!("invalid cursor {value:?}"))),
    }
    if let Some(value) = params.limit {
        parsed.limit = value
            .parse()
            .ok()
            .filter(|n| (1..=MAX_PAGE as usize).contains(n))
            .ok_or_else(|| bad(format!("limit must be 1-{MAX_PAGE}, got {value:?}")))?;
    }
    Ok(parsed)
}

/// Approvals of the caller's tasks (every task's for admins), oldest first; pending ones unless
/// `status` says otherwise.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals",
    params(
        ("status" = Option<ApprovalStatusFilterName>, Query,
            description = "`pending` (default), `approved`, `rejected`, `consumed` or `all`"),
        ("cursor" = Option<String>, Query, pattern = "^[A-Za-z0-9_]{0,100}$",
            description = "`next_cursor` of the previous page"),
        ("limit" = Option<u32>, Query, minimum = 1, maximum = 200, description = "1-200, default 50"),
    ),
    responses(
        (status = 200, description = "A page of approvals", body = ApprovalPage),
        (status = 400, description = "A malformed query", body = ErrorBody),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
    ))]
async fn list_approvals(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiQuery(params): ApiQuery<ListParams>,
) -> Result<Json<ApprovalPage>, ApiError> {
    let query = list_query(params)?;
    let page = state
        .tasks
        .approvals(
            &caller,
            ApprovalListing {
                status: query.status,
                cursor: query.cursor,
                limit: query.limit,
            },
        )
        .await?;
    Ok(Json(ApprovalPage {
        data: page.approvals,
        next_cursor: page.next_cursor,
    }))
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
) -> Result<Json<ApprovalView>, ApiError> {
    Ok(Json(state.tasks.approval(&caller, &id).await?))
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
) -> Result<Json<ApprovalView>, ApiError> {
    let decision = match request.decision {
        DecisionName::Approve => Decision::Approve,
        DecisionName::Reject => Decision::Reject,
    };
    let decided = state
        .tasks
        .decide(&caller, &id, decision, &request.hash)
        .await?;
    Ok(Json(decided))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_list_query(query: Option<&str>) -> Result<ListQuery, ApiError> {
        list_query(crate::routes::decode_query(query)?)
    }

    #[test]
    fn queries() {
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
