//! `POST /webhooks/slack` (the Events API) and `POST /webhooks/slack/interactions` (button
//! presses): thin handlers that pass the raw body and Slack's headers to
//! [`warden_service::slack::SlackApp`], which checks the signature, deduplicates and does the
//! work. No bearer token: a request is authenticated by its `X-Slack-Signature` (401 when it
//! is missing, wrong or more than five minutes old). 404 when `[slack]` is not configured.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_service::slack::{Delivery, WebhookError, WebhookReply};

use super::schema::ErrorBody;
use super::{ApiError, ApiState, ErrorCode};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(slack_events))
        .routes(routes!(slack_interactions))
}

fn delivery<'a>(headers: &'a HeaderMap, body: &'a [u8]) -> Delivery<'a> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    Delivery {
        timestamp: header("x-slack-request-timestamp"),
        signature: header("x-slack-signature"),
        retry_num: header("x-slack-retry-num"),
        body,
    }
}

fn answer(reply: Result<WebhookReply, WebhookError>) -> Response {
    match reply {
        Ok(WebhookReply::Challenge(challenge)) => {
            Json(json!({"challenge": challenge})).into_response()
        }
        Ok(WebhookReply::Ack) => Json(json!({"ok": true})).into_response(),
        Err(WebhookError::Unauthorized(why)) => {
            ApiError::new(ErrorCode::Unauthorized, why.to_string()).into_response()
        }
        Err(WebhookError::Invalid(why)) => {
            ApiError::new(ErrorCode::BadRequest, why).into_response()
        }
    }
}

fn not_configured() -> Response {
    ApiError::new(
        ErrorCode::NotFound,
        "the Slack app is not configured ([slack])",
    )
    .into_response()
}

/// Slack's Events API: a signed `url_verification` (its challenge echoed) or `event_callback`
/// (a mention or a direct message; acknowledged within three seconds, handled once per
/// `event_id`, retries recognised by `X-Slack-Retry-Num`).
#[utoipa::path(post, path = "/webhooks/slack", tag = "webhooks", security(()),
    params(
        ("X-Slack-Request-Timestamp" = Option<String>, Header, description = "Unix seconds the request was signed at; within five minutes of now"),
        ("X-Slack-Signature" = Option<String>, Header, description = "`v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` with the signing secret"),
        ("X-Slack-Retry-Num" = Option<String>, Header, description = "Slack's retry count of an event"),
    ),
    request_body(content = String, content_type = "application/json", description = "The event envelope, as Slack signed it"),
    responses(
        (status = 200, description = "Received (or the url_verification challenge)", body = serde_json::Value),
        (status = 400, description = "Signed, but not an event envelope", body = ErrorBody),
        (status = 401, description = "Not signed with the signing secret, or stale", body = ErrorBody),
        (status = 404, description = "The Slack app is not configured", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
    ))]
async fn slack_events(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match &state.slack {
        Some(app) => answer(app.event(delivery(&headers, &body)).await),
        None => not_configured(),
    }
}

/// Slack's interactivity: a signed, form-encoded `payload` of a button press (Approve/Reject),
/// decided when the presser is an approver.
#[utoipa::path(post, path = "/webhooks/slack/interactions", tag = "webhooks", security(()),
    params(
        ("X-Slack-Request-Timestamp" = Option<String>, Header, description = "Unix seconds the request was signed at; within five minutes of now"),
        ("X-Slack-Signature" = Option<String>, Header, description = "`v0=` and the hex HMAC-SHA256 of `v0:{timestamp}:{body}` with the signing secret"),
    ),
    request_body(content = String, content_type = "application/x-www-form-urlencoded", description = "`payload=<JSON>`, as Slack signed it"),
    responses(
        (status = 200, description = "Received", body = serde_json::Value),
        (status = 400, description = "Signed, but no readable payload", body = ErrorBody),
        (status = 401, description = "Not signed with the signing secret, or stale", body = ErrorBody),
        (status = 404, description = "The Slack app is not configured", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
    ))]
async fn slack_interactions(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    match &state.slack {
        Some(app) => answer(app.interaction(delivery(&headers, &body)).await),
        None => not_configured(),
    }
}
