//! The `warden` binary links the HTTP API only for `warden serve`: built without its default
//! `serve` feature it has no HTTP server (no `axum`, no `utoipa`), while `ask`, `run` and the
//! other commands reach tasks through `warden-service` alike.

use warden_test_support::architecture::{built_closure, direct_normal_dependencies, metadata};

const HTTP_SERVER: [&str; 4] = ["warden-api", "axum", "utoipa", "utoipa-axum"];

#[test]
fn without_the_serve_feature_the_binary_links_no_http_server() {
    let manifest = env!("CARGO_MANIFEST_DIR");
    let lean = built_closure(manifest, "warden-cli", &["--no-default-features"]);
    // The walk really followed the graph.
    assert!(
        lean.contains("warden-service") && lean.contains("warden-engine"),
        "{lean:?}"
    );
    for name in HTTP_SERVER {
        assert!(
            !lean.contains(name),
            "warden-cli without default features depends on {name}: {lean:?}"
        );
    }
    // The default build does have it: the feature is what keeps it out.
    let full = built_closure(manifest, "warden-cli", &[]);
    for name in HTTP_SERVER {
        assert!(full.contains(name), "the default warden-cli lacks {name}");
    }
}

/// The interfaces — the binary, the HTTP API (and its console) and the MCP tools — reach
/// tasks, approvals, events and storage through `warden-service`, never by opening the store
/// themselves: none depends on `warden-store` (their tests may, to check what was recorded).
/// What the service gives them is `warden_protocol::views`.
#[test]
fn no_interface_depends_on_the_store() {
    let metadata = metadata(env!("CARGO_MANIFEST_DIR"), &[]);
    for interface in ["warden-cli", "warden-api", "warden-mcp"] {
        let direct = direct_normal_dependencies(&metadata, interface);
        assert!(direct.contains("warden-service"), "{interface}: {direct:?}");
        assert!(
            !direct.contains("warden-store"),
            "{interface} depends on warden-store: {direct:?}"
        );
    }
}

/// The HTTP API and the MCP tools only parse, ask the front door and render: they do not
/// reach past the service into the engine (what they need of it — maintenance options, a
/// pinned repository, how a gate reads, `host[:port]` parsing — the service offers). The
/// binary does: `warden review` and `warden vulns` run the engine in-process.
#[test]
fn the_api_and_mcp_do_not_depend_on_the_engine() {
    let metadata = metadata(env!("CARGO_MANIFEST_DIR"), &[]);
    for interface in ["warden-api", "warden-mcp"] {
        let direct = direct_normal_dependencies(&metadata, interface);
        assert!(direct.contains("warden-service"), "{interface}: {direct:?}");
        assert!(
            !direct.contains("warden-engine"),
            "{interface} depends on warden-engine: {direct:?}"
        );
    }
}
