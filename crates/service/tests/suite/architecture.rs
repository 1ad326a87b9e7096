//! `warden-service` keeps and runs tasks behind one front door, for every interface: it links
//! no HTTP server, only the CLI links the HTTP API, and its modules import each other without
//! circles.

use std::path::Path;

use warden_test_support::architecture::{
    assert_no_import_circles, built_closure, dependents as dependents_of, metadata,
};

#[test]
fn the_service_depends_on_no_http_server() {
    let names = built_closure(env!("CARGO_MANIFEST_DIR"), "warden-service", &[]);
    // The walk really followed the graph.
    assert!(
        names.contains("warden-engine") && names.contains("warden-store"),
        "{names:?}"
    );
    for name in ["warden-api", "warden-cli", "axum", "utoipa", "utoipa-axum"] {
        assert!(
            !names.contains(name),
            "warden-service depends on {name}: {names:?}"
        );
    }
}

#[test]
fn only_the_cli_depends_on_the_api() {
    let metadata = metadata(env!("CARGO_MANIFEST_DIR"), &[]);
    let api_dependents = dependents_of(&metadata, "warden-api");
    assert_eq!(
        api_dependents.into_iter().collect::<Vec<_>>(),
        ["warden-cli"],
        "the HTTP API is an interface on top; nothing but the binary builds on it"
    );
    // Nor does anything but the interfaces depend on the service: the API, the CLI, and the
    // MCP tools both of them serve (stdio in the CLI, `/mcp` in the API).
    let service_dependents = dependents_of(&metadata, "warden-service");
    assert_eq!(
        service_dependents.into_iter().collect::<Vec<_>>(),
        ["warden-api", "warden-cli", "warden-mcp"]
    );
    // The MCP tools are an interface under both, not on top of the API.
    let mcp_dependents = dependents_of(&metadata, "warden-mcp");
    assert_eq!(
        mcp_dependents.into_iter().collect::<Vec<_>>(),
        ["warden-api", "warden-cli"]
    );
}

#[test]
fn the_service_has_no_import_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = assert_no_import_circles(&src);
    // The check really read the crate.
    assert!(
        edges
            .iter()
            .any(|e| e.from == "worker" && e.to == "journal"),
        "{edges:?}"
    );
}
