//! `GET/POST /v1/tokens`, `DELETE /v1/tokens/{id}`: API tokens kept in the store (admins only).
//! A new token's secret is in the creation response and nowhere else; the store keeps its
//! SHA-256 digest. Bootstrap tokens from `WARDEN_API_TOKENS` are not listed and cannot be
//! revoked here. The rules (admins only, roles, names, minting) are
//! [`warden_service::access::Access`]'s; these handlers read the request and render.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::schema::ErrorBody;
use super::{ApiError, ApiJson, ApiPath, ApiState};
use warden_protocol::views::{Role, TokenView};

pub(super) fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list_tokens, create_token))
        .routes(routes!(revoke_token))
}

/// A token to create.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(examples(json!({"role": "viewer", "name": "dashboard"})))]
struct CreateToken {
    #[schema(value_type = Role)]
    role: String,
    /// Who the token acts as (owner of its tasks): 1-64 ASCII letters, digits, `-`, `_`, `.`,
    /// `@`. Default: the token's id.
    #[serde(default)]
    #[schema(pattern = "^[A-Za-z0-9._@-]{1,64}$", min_length = 1, max_length = 64)]
    name: Option<String>,
}

/// A token just created: the only time its secret is shown.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CreatedTokenView {
    #[serde(flatten)]
    pub view: TokenView,
    /// The bearer token. Store it now: Warden keeps only its digest.
    pub token: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TokenPage {
    pub data: Vec<TokenView>,
    pub next_cursor: Option<String>,
}

/// Every stored token, revoked ones included, oldest first (admin tokens only).
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", responses(
    (status = 200, description = "The stored tokens, without their secrets", body = TokenPage),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
    (status = 403, description = "Not an admin token", body = ErrorBody),
))]
async fn list_tokens(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
) -> Result<Json<TokenPage>, ApiError> {
    let tokens = state.access.list_tokens(&caller).await?;
    Ok(Json(TokenPage {
        data: tokens,
        next_cursor: None,
    }))
}

/// Creates a token and shows its secret once (admin tokens only).
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens", request_body = CreateToken, responses(
    (status = 201, description = "Created; `token` is shown only now", body = CreatedTokenView),
    (status = 400, description = "The body is not JSON", body = ErrorBody),
    (status = 401, description = "No or an invalid token", body = ErrorBody),
    (status = 403, description = "Not an admin token", body = ErrorBody),
    (status = 413, description = "The body is too large", body = ErrorBody),
    (status = 422, description = "Invalid fields (role, name)", body = ErrorBody),
))]
async fn create_token(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiJson(request, _): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<CreatedTokenView>), ApiError> {
    let created = state
        .access
        .create_token(&caller, &request.role, request.name.as_deref())
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedTokenView {
            view: created.token,
            token: created.secret,
        }),
    ))
}

/// Revokes a token for good; revoking it again is harmless (admin tokens only).
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "The token id (`tok_…`)")),
    responses(
        (status = 200, description = "Revoked", body = TokenView),
        (status = 401, description = "No or an invalid token", body = ErrorBody),
        (status = 403, description = "Not an admin token", body = ErrorBody),
        (status = 404, description = "No such token", body = ErrorBody),
    ))]
async fn revoke_token(
    State(state): State<Arc<ApiState>>,
    caller: Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TokenView>, ApiError> {
    let token = state.access.revoke_token(&caller, &id).await?;
    Ok(Json(token))
}
