//! `POST /webhooks/telegram`: a thin handler that passes Telegram's secret-token header and
//! the raw update to [`warden_service::telegram::Bot::webhook`], which checks the secret,
//! deduplicates by `update_id` and does the work. No bearer token: an update is authenticated
//! by `X-Telegram-Bot-Api-Secret-Token` (401 when it is missing or wrong). 404 unless the bot
//! is configured in webhook mode (`[telegram] webhook_url`).

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_service::telegram::WebhookError;

use super::schema::ErrorBody;
use super::{ApiError, ApiState, ErrorCode};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(telegram_webhook))
}

/// Telegram's webhook deliveries (when `[telegram] webhook_url` is set): one update each — a
/// command in a private chat from an allow-listed user, or an Approve/Reject press — handled
/// once per `update_id`. A non-2xx answer makes Telegram deliver the update again.
#[utoipa::path(post, path = "/webhooks/telegram", tag = "webhooks", security(()),
    params(
        ("X-Telegram-Bot-Api-Secret-Token" = Option<String>, Header, description = "The secret given to `setWebhook` (`WARDEN_TELEGRAM_WEBHOOK_SECRET`)"),
    ),
    request_body(content = String, content_type = "application/json", description = "One Update object, as Telegram sent it"),
    responses(
        (status = 200, description = "Received (handled, or seen before)", body = serde_json::Value),
        (status = 400, description = "Authenticated, but not a JSON object", body = ErrorBody),
        (status = 401, description = "Missing or wrong secret token", body = ErrorBody),
        (status = 404, description = "The Telegram bot is not configured for webhooks", body = ErrorBody),
        (status = 413, description = "The body is too large", body = ErrorBody),
        (status = 500, description = "Not recorded; Telegram delivers it again", body = ErrorBody),
    ))]
async fn telegram_webhook(
    State(state): State<Arc<ApiState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(bot) = &state.telegram else {
        return ApiError::new(ErrorCode::NotFound, WebhookError::NotServed.to_string())
            .into_response();
    };
    let secret = headers
        .get("x-telegram-bot-api-secret-token")
        .and_then(|v| v.to_str().ok());
    match bot.webhook(secret, &body).await {
        Ok(()) => Json(json!({"ok": true})).into_response(),
        Err(error @ WebhookError::NotServed) => {
            ApiError::new(ErrorCode::NotFound, error.to_string()).into_response()
        }
        Err(error @ WebhookError::Unauthorized) => {
            ApiError::new(ErrorCode::Unauthorized, error.to_string()).into_response()
        }
        Err(WebhookError::Invalid(why)) => {
            ApiError::new(ErrorCode::BadRequest, why).into_response()
        }
        Err(WebhookError::Store(error)) => ApiError::internal(error).into_response(),
    }
}
