//! `POST /webhooks/github`: a thin handler that passes the raw body and GitHub's headers to
//! [`warden_service::github::GithubHook`], which checks the signature, deduplicates and does
//! the work. No bearer token: a delivery is authenticated by its `X-Hub-Signature-256` (401
//! when it is missing or wrong). 404 when `[github.webhook]` is not configured.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_service::github::{Delivery, WebhookError, WebhookReply};

use super::schema::ErrorBody;
use super::{ApiError, ApiState, ErrorCode};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(github_webhook))
}

/// GitHub's webhook deliveries: `ping` (answered), `issue_comment` and `issues` (a mention of
/// the app from a user with write access starts a task; `/warden approve sha256:…` from a
/// configured approver decides its approval), `pull_request_review_comment` and
/// `pull_request_review` (a writer's mention on a pull request Warden opened: a follow-up change
/// on its branch), `check_run` and `check_suite` (a failure on such a pull request, where opted
/// in: a fix task). Acknowledged within five seconds, handled once per `X-GitHub-Delivery` and
/// once per event (the same signed body under another delivery id is ignored); an event older
/// than `[github.webhook] max_event_age_secs` is refused unless this delivery was received
/// before.
#[utoipa::path(post, path = "/webhooks/github", tag = "webhooks", security(()),
    params(
        ("X-Hub-Signature-256" = Option<String>, Header, description = "`sha256=` and the hex HMAC-SHA256 of the raw body with the webhook secret"),
        ("X-GitHub-Event" = Option<String>, Header, description = "The event's name (`ping`, `issue_comment`, `issues`, `pull_request_review_comment`, `check_run`, …)"),
        ("X-GitHub-Delivery" = Option<String>, Header, description = "The delivery's id; a redelivery keeps it"),
    ),
    request_body(content = String, content_type = "application/json", description = "The event payload, as GitHub signed it"),
    responses(
        (status = 200, description = "Received (or the ping answered)", body = serde_json::Value),
        (status = 400, description = "Signed, but no event name, delivery id or JSON body", body = ErrorBody),
        (status = 401, description = "Not signed with the webhook secret", body = ErrorBody),
        (status = 404, description = "The GitHub webhook is not configured", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 422, description = "The event is older than `max_event_age_secs` and this delivery was not received before: nothing was done", body = ErrorBody),
        (status = 500, description = "Whether an old delivery was received before could not be learnt: nothing was done", body = ErrorBody),
    ))]
async fn github_webhook(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(hook) = &state.github else {
        return ApiError::new(
            ErrorCode::NotFound,
            "the GitHub webhook is not configured ([github.webhook])",
        )
        .into_response();
    };
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let delivery = Delivery {
        signature: header("x-hub-signature-256"),
        event: header("x-github-event"),
        delivery: header("x-github-delivery"),
        body: &body,
    };
    match hook.webhook(delivery).await {
        Ok(WebhookReply::Pong) => Json(json!({"ok": true, "pong": true})).into_response(),
        Ok(WebhookReply::Ack) => Json(json!({"ok": true})).into_response(),
        Err(WebhookError::Unauthorized(why)) => {
            ApiError::new(ErrorCode::Unauthorized, why.to_string()).into_response()
        }
        Err(WebhookError::Invalid(why)) => {
            ApiError::new(ErrorCode::BadRequest, why).into_response()
        }
        Err(WebhookError::TooOld(why)) => {
            ApiError::new(ErrorCode::InvalidRequest, why).into_response()
        }
        Err(WebhookError::Unavailable(why)) => {
            ApiError::new(ErrorCode::Internal, why).into_response()
        }
    }
}
