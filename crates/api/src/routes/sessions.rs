//! `GET /v1/sessions`, `DELETE /v1/sessions/{id}`: the web console's sessions, listed and
//! revoked over the API too. Admins see and revoke every active session, others only those
//! signed in under their own name (another's does not exist for them). The rules are
//! [`warden_service::access::Access`]'s; these handlers read the request and render. No
//! session's secret or digest is ever shown.

use std::sync::Arc;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use warden_service::access::SessionView;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiPath, ApiState};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_sessions))
        .routes(routes!(revoke_session))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebSessionPage {
    pub data: Vec<SessionView>,
    pub next_cursor: Option<String>,
}

/// Active web sessions, oldest first: every one for an admin, else the caller's own.
#[utoipa::path(get, path = "/v1/sessions", tag = "sessions", responses(
    (status = 200, description = "The active sessions the caller may see", body = WebSessionPage),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
))]
async fn list_sessions(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
) -> Result<Json<WebSessionPage>, ApiError> {
    let sessions = state.access.sessions(&caller).await?;
    Ok(Json(WebSessionPage {
        data: sessions,
        next_cursor: None,
    }))
}

/// Revokes an active web session: an admin any, others their own. It stops working at once.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id (`ses_…`)")),
    responses(
        (status = 200, description = "Revoked", body = SessionView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such active session the caller may see", body = ErrorBody),
    ))]
async fn revoke_session(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<SessionView>, ApiError> {
    let session = state.access.revoke_session(&caller, &id).await?;
    Ok(Json(session))
}
