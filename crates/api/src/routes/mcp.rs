//! `/mcp`: Warden's MCP tools (`warden-mcp`, the same ones `warden mcp` serves on stdio) over
//! the Model Context Protocol's Streamable HTTP transport (`rmcp`'s, stateless: every POST is
//! one JSON-RPC message answered on its own response, JSON or an event stream carrying the
//! call's progress notifications; no sessions, so no `GET` stream and no `DELETE`, both 405).
//!
//! The request is authenticated like every API request — a bearer token through [`Caller`],
//! charging the token's rate limit, throttling failed authentications, behind the router's
//! `Host`/`Origin` pinning and connection handling — and its principal travels with it to the
//! tools, so the token's role applies: the service refuses a viewer's `ask`. Approvals are not
//! tools. It is not a REST route and is not in `/openapi.json`: its body is JSON-RPC, described
//! by the MCP specification (`documented_routes` says so, and a test lists it).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::any;
use axum::Router;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use warden_mcp::WardenMcp;
use warden_service::tasks::Principal;

use super::{ApiState, Caller, MAX_BODY_BYTES};

/// The MCP endpoint's path.
pub(crate) const PATH: &str = "/mcp";

/// `/mcp`, every method (the transport answers the ones it does not serve).
pub(super) fn routes() -> Router<Arc<ApiState>> {
    Router::new().route(PATH, any(mcp))
}

async fn mcp(State(state): State<Arc<ApiState>>, caller: Caller, mut request: Request) -> Response {
    request.extensions_mut().insert(caller.0);
    let tasks = state.tasks.clone();
    let transport = StreamableHttpService::new(
        move || Ok(WardenMcp::served(tasks.clone(), principal_of)),
        Arc::new(NeverSessionManager::default()),
        StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            // The router pins `Host` and `Origin` for every route, this one included.
            .disable_allowed_hosts()
            .with_max_request_body_bytes(MAX_BODY_BYTES),
    );
    transport
        .handle(request)
        .await
        .map(Body::new)
        .into_response()
}

/// The principal the route authenticated, from the request parts the transport hands each
/// tool call.
fn principal_of(extensions: &rmcp::model::Extensions) -> Option<Principal> {
    extensions
        .get::<axum::http::request::Parts>()?
        .extensions
        .get::<Principal>()
        .cloned()
}
