//! The `warden` binary links the HTTP API only for `warden serve`: built without its default
//! `serve` feature it has no HTTP server (no `axum`, no `utoipa`), while `ask`, `run` and the
//! other commands reach tasks through `warden-service` alike.

use warden_test_support::architecture::{direct_normal_dependencies, metadata, normal_closure};

const HTTP_SERVER: [&str; 4] = ["warden-api", "axum", "utoipa", "utoipa-axum"];

#[test]
fn without_the_serve_feature_the_binary_links_no_http_server() {
    let manifest = env!("CARGO_MANIFEST_DIR");
    let lean = normal_closure(
        &metadata(manifest, &["--no-default-features"]),
        "warden-cli",
    );
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
    let full = normal_closure(&metadata(manifest, &[]), "warden-cli");
    for name in HTTP_SERVER {
        assert!(full.contains(name), "the default warden-cli lacks {name}");
    }
}

/// The binary and the MCP tools reach tasks, approvals, events and storage through
/// `warden-service`, never by opening the store themselves: neither depends on `warden-store`
/// (their tests may, to check what was recorded). The HTTP API still does (issue 23).
#[test]
fn the_binary_and_the_mcp_tools_do_not_depend_on_the_store() {
    let metadata = metadata(env!("CARGO_MANIFEST_DIR"), &[]);
    for interface in ["warden-cli", "warden-mcp"] {
        let direct = direct_normal_dependencies(&metadata, interface);
        assert!(direct.contains("warden-service"), "{interface}: {direct:?}");
        assert!(
            !direct.contains("warden-store"),
            "{interface} depends on warden-store: {direct:?}"
        );
    }
}
