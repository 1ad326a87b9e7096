//! The HTTP API sits on top of the service, and inside the crate the routes (`src/routes/`)
//! sit on top of the rest, never underneath it: no module but the routes and `serve.rs` refers
//! to `crate::routes`, and nothing refers to `serve.rs`, the composition root that mounts the
//! router and runs the workers. The crate's modules import each other without circles.

use std::path::Path;

use warden_test_support::architecture::{assert_no_import_circles, Edge};

fn edges() -> Vec<Edge> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let edges = assert_no_import_circles(&src);
    // The check really read the crate.
    assert!(
        edges
            .iter()
            .any(|e| e.from_top() == "serve" && e.to_top() == "routes"),
        "{edges:?}"
    );
    edges
}

fn describe(edges: &[&Edge]) -> String {
    edges
        .iter()
        .map(|e| format!("{}: {}", e.file, e.reference))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_api_has_no_import_circles() {
    edges();
}

#[test]
fn only_the_routes_and_the_composition_root_refer_to_the_routes() {
    let edges = edges();
    let offenders: Vec<&Edge> = edges
        .iter()
        .filter(|e| e.to_top() == "routes" && !matches!(e.from_top(), "routes" | "serve"))
        .collect();
    assert!(
        offenders.is_empty(),
        "modules outside src/routes/ depend on the routes (move the shared item out):\n{}",
        describe(&offenders)
    );
}

#[test]
fn nothing_in_the_crate_refers_to_the_composition_root() {
    let edges = edges();
    let offenders: Vec<&Edge> = edges.iter().filter(|e| e.to_top() == "serve").collect();
    assert!(
        offenders.is_empty(),
        "serve.rs is the composition root; nothing may depend on it:\n{}",
        describe(&offenders)
    );
}
