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
use super::schema::{ErrorBody, RoleName, SignInMethodName};
use super::{ApiError, ApiPath, ApiState};
use warden_time::rfc3339;

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_sessions))
        .routes(routes!(revoke_session))
}

/// A web console session; never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebSessionView {
    /// `ses_` + 16 hex digits.
    pub id: String,
    /// Who signed in (a web user's or a token's name).
    pub name: String,
    /// The role at sign-in; each use of the session acts with the current one.
    #[schema(value_type = RoleName)]
    pub role_at_sign_in: String,
    #[schema(value_type = SignInMethodName)]
    pub method: String,
    /// The client address it signed in from.
    pub address: Option<String>,
    /// The browser's User-Agent at sign-in, shortened.
    pub user_agent: Option<String>,
    /// RFC 3339, UTC.
    pub created_at: String,
    /// RFC 3339, UTC.
    pub expires_at: String,
    /// RFC 3339, UTC; set once revoked.
    pub revoked_at: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct WebSessionPage {
    pub data: Vec<WebSessionView>,
    pub next_cursor: Option<String>,
}

fn session_view(session: SessionView) -> WebSessionView {
    WebSessionView {
        method: session.method.as_str().to_string(),
        id: session.id,
        name: session.name,
        role_at_sign_in: session.role_at_sign_in,
        address: session.address,
        user_agent: session.user_agent,
        created_at: rfc3339(session.created_at_ms),
        expires_at: rfc3339(session.expires_at_ms),
        revoked_at: session.revoked_at_ms.map(rfc3339),
    }
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
        data: sessions.into_iter().map(session_view).collect(),
        next_cursor: None,
    }))
}

/// Revokes an active web session: an admin any, others their own. It stops working at once.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions",
    params(("id" = String, Path, description = "The session id (`ses_…`)")),
    responses(
        (status = 200, description = "Revoked", body = WebSessionView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 404, description = "No such active session the caller may see", body = ErrorBody),
    ))]
async fn revoke_session(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<WebSessionView>, ApiError> {
    let session = state.access.revoke_session(&caller, &id).await?;
    Ok(Json(session_view(session)))
}
