//! Host and Origin pinning, against DNS rebinding and cross-site requests from browsers.
//!
//! A request whose `Host` (or absolute-form authority) is not an address the server answers
//! to is refused with 421 `misdirected_request`; the server answers to the address the client
//! connected to (the listen address, `ip:port`, or `localhost:port` when that is a loopback
//! address; port 80 may be left out) and to the names in `[serve] public_names` (`name`
//! matches any port, `name:port` only that one). A state-changing request (`POST`, `PUT`,
//! `PATCH`, `DELETE`) whose `Origin` is not `http(s)://` one of those is refused with 403
//! `forbidden`; requests without `Origin` (the CLI, curl, webhooks) are unaffected, and so are
//! requests without `Host` (HTTP/1.0).
//!
//! The address comes from the request's [`ClientConnection`]; a router served some other way
//! uses [`HostPolicy::listen`], and when neither is known only nothing is pinned.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::{Content, OpenApi, Ref, ResponseBuilder};

use super::{ApiError, ApiState, ErrorCode};
use crate::connections::ClientConnection;
use warden_service::config::serve::{parse_authority, Authority};

/// The names the API answers to besides its address.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostPolicy {
    /// The listen address, for requests that do not carry their connection.
    pub listen: Option<SocketAddr>,
    /// Normalized as `[serve] public_names` are (`warden_service::config::serve`).
    pub public_names: Vec<String>,
}

impl HostPolicy {
    /// Whether `authority` (with `default_port` when it names none) is one the server answers
    /// to on `local`.
    fn allows(&self, local: SocketAddr, authority: &Authority, default_port: u16) -> bool {
        let port = authority.port.unwrap_or(default_port);
        if port == local.port() {
            let ip = match local.ip() {
                IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                    Some(v4) => IpAddr::V4(v4),
                    None => IpAddr::V6(v6),
                },
                v4 => v4,
            };
            let literal = match ip {
                IpAddr::V4(v4) => v4.to_string(),
                IpAddr::V6(v6) => format!("[{v6}]"),
            };
            if authority.host == literal || (ip.is_loopback() && authority.host == "localhost") {
                return true;
            }
        }
        self.public_names.iter().any(|name| {
            parse_authority(name).is_some_and(|public| {
                // A listed port must match, the scheme's default standing in for none
                // (`https://name` is `name:443`).
                public.host == authority.host && public.port.is_none_or(|p| p == port)
            })
        })
    }
}

fn misdirected(host: &str) -> Response {
    ApiError::new(
        ErrorCode::MisdirectedRequest,
        format!(
            "this server does not answer to the host {host:?}; use its address or a name in \
             [serve] public_names"
        ),
    )
    .into_response()
}

/// Refuses foreign `Host`s (421) and foreign `Origin`s on state-changing requests (403).
pub(super) async fn pin_host_and_origin(
    State(state): State<Arc<ApiState>>,
    request: Request,
    next: Next,
) -> Response {
    let local = request
        .extensions()
        .get::<ClientConnection>()
        .map(|connection| connection.local)
        .or(state.hosts.listen);
    let Some(local) = local else {
        return next.run(request).await;
    };
    let policy = &state.hosts;
    let header_host = request
        .headers()
        .get(header::HOST)
        .map(|value| value.to_str().unwrap_or("\u{0}").to_string());
    let uri_host = request.uri().authority().map(|a| a.as_str().to_string());
    for host in header_host.iter().chain(uri_host.iter()) {
        match parse_authority(host) {
            Some(authority) if policy.allows(local, &authority, 80) => {}
            _ => return misdirected(host),
        }
    }
    let changes_state = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if changes_state {
        if let Some(origin) = request.headers().get(header::ORIGIN) {
            let text = origin.to_str().unwrap_or_default();
            let allowed = [("http://", 80), ("https://", 443)]
                .into_iter()
                .find_map(|(scheme, port)| {
                    let rest = text.strip_prefix(scheme)?;
                    parse_authority(rest).map(|authority| (authority, port))
                })
                .is_some_and(|(authority, port)| policy.allows(local, &authority, port));
            if !allowed {
                return ApiError::new(
                    ErrorCode::Forbidden,
                    format!(
                        "cross-origin requests that change state are refused (Origin {text:?})"
                    ),
                )
                .into_response();
            }
        }
    }
    next.run(request).await
}

/// Adds the 421 answer to every operation, and the 403 answer to every state-changing one
/// that does not document it already.
pub(super) fn document_pinning(document: &mut OpenApi) {
    let error = || Content::new(Some(Ref::from_schema_name("ErrorBody")));
    for item in document.paths.paths.values_mut() {
        let reading = [&mut item.get].into_iter().flatten().map(|op| (op, false));
        let changing = [
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ]
        .into_iter()
        .flatten()
        .map(|op| (op, true));
        for (operation, changes_state) in reading.chain(changing) {
            let responses = &mut operation.responses.responses;
            responses.entry("421".to_string()).or_insert_with(|| {
                ResponseBuilder::new()
                    .description("The Host is not an address or public name of this server")
                    .content("application/json", error())
                    .build()
                    .into()
            });
            if changes_state {
                responses.entry("403".to_string()).or_insert_with(|| {
                    ResponseBuilder::new()
                        .description("A cross-origin request (a foreign Origin header)")
                        .content("application/json", error())
                        .build()
                        .into()
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(policy: &HostPolicy, local: &str, host: &str, expected: bool) {
        let local: SocketAddr = local.parse().unwrap();
        let allowed = parse_authority(host).is_some_and(|a| policy.allows(local, &a, 80));
        assert_eq!(allowed, expected, "{host} on {local}");
    }

    #[test]
    fn hosts_are_the_address_localhost_on_loopback_and_public_names() {
        let none = HostPolicy::default();
        check(&none, "127.0.0.1:8787", "127.0.0.1:8787", true);
        check(&none, "127.0.0.1:8787", "localhost:8787", true);
        check(&none, "127.0.0.1:8787", "LOCALHOST.:8787", true);
        check(&none, "127.0.0.1:8787", "localhost:8788", false);
        check(&none, "127.0.0.1:8787", "localhost", false);
        check(&none, "127.0.0.1:80", "localhost", true);
        check(&none, "127.0.0.1:8787", "attacker.example:8787", false);
        check(&none, "127.0.0.1:8787", "127.0.0.2:8787", false);
        check(&none, "[::1]:8787", "[::1]:8787", true);
        check(&none, "[::1]:8787", "[0:0::1]:8787", true);
        check(&none, "[::1]:8787", "localhost:8787", true);
        check(&none, "[::ffff:10.0.0.5]:8787", "10.0.0.5:8787", true);
        check(&none, "10.0.0.5:8787", "10.0.0.5:8787", true);
        check(&none, "10.0.0.5:8787", "localhost:8787", false);
        for junk in [
            "",
            ":8787",
            "a b:8787",
            "x:99999",
            "[::1",
            "evil/x:8787",
            "a..b:1",
        ] {
            check(&none, "127.0.0.1:8787", junk, false);
        }
        let public = HostPolicy {
            listen: None,
            public_names: vec!["warden.example.com".into(), "proxy.internal:8443".into()],
        };
        check(&public, "10.0.0.5:8787", "warden.example.com", true);
        check(&public, "10.0.0.5:8787", "Warden.Example.COM:443", true);
        check(&public, "10.0.0.5:8787", "proxy.internal:8443", true);
        check(&public, "10.0.0.5:8787", "proxy.internal", false);
        check(&public, "10.0.0.5:8787", "example.com", false);
        // A listed default port matches a name given without one (`https://name` is 443).
        let tls = HostPolicy {
            listen: None,
            public_names: vec!["warden.example.com:443".into()],
        };
        let local: SocketAddr = "10.0.0.5:8787".parse().unwrap();
        let origin = parse_authority("warden.example.com").unwrap();
        assert!(tls.allows(local, &origin, 443));
        assert!(!tls.allows(local, &origin, 80));
    }
}
