//! `warden-engine` is how a task runs, not where it is kept or how it is asked for: its normal
//! dependency closure has no task store and no HTTP server, and its modules import each other
//! without circles.

use std::path::Path;

use warden_test_support::architecture::{assert_no_import_circles, built_closure};

/// `hyper` and `hyper-util` are there, for `reqwest`'s client (the model and GitHub clients);
/// the server side of an HTTP stack is `axum`'s, which the engine must not reach.
#[test]
fn the_engine_depends_on_no_store_and_no_http_server() {
    let names = built_closure(env!("CARGO_MANIFEST_DIR"), "warden-engine", &[]);
    // The walk really followed the graph.
    assert!(
        names.contains("warden-runtime") && names.contains("reqwest"),
        "{names:?}"
    );
    for name in [
        "warden-store",
        "warden-service",
        "warden-api",
        "warden-cli",
        "rusqlite",
        "tokio-postgres",
        "axum",
        "utoipa",
        "utoipa-axum",
    ] {
        assert!(
            !names.contains(name),
            "warden-engine depends on {name}: {names:?}"
        );
    }
}

#[test]
fn the_engine_has_no_import_circles() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = assert_no_import_circles(&src);
    // The check really read the crate.
    assert!(
        edges
            .iter()
            .any(|e| e.from == "question" && e.to == "config"),
        "{edges:?}"
    );
}
