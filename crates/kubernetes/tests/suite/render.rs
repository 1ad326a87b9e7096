//! `warden k8s render`'s manifests against a checked-in golden file (`fixtures/render.yaml`;
//! `WARDEN_BLESS=1` rewrites it). CI also validates that output against the built-in kinds'
//! schemas and the agent-sandbox CRDs (`.ci/kubernetes.sh`).

use std::path::PathBuf;
use warden_kubernetes::{render, KubernetesConfig, PodResources};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Compares `actual` with a fixture file, or rewrites it under `WARDEN_BLESS=1`.
fn check_golden(name: &str, actual: &str) {
    let path = fixture(name);
    if std::env::var_os("WARDEN_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "{} differs from the rendered output (WARDEN_BLESS=1 rewrites it):\n{actual}",
        path.display()
    );
}

#[test]
fn default_settings_render_the_golden_manifests() {
    let resources = PodResources {
        memory_bytes: 2 << 30,
        disk_bytes: 1 << 30,
    };
    check_golden(
        "render.yaml",
        &render(&KubernetesConfig::default(), &resources),
    );
}

#[test]
fn an_egress_proxy_port_renders_its_one_allowed_destination() {
    let config = KubernetesConfig {
        egress_proxy_port: Some(3128),
        namespace: "sandboxes".into(),
        warden_namespace: "tools".into(),
        warm_pool_replicas: 5,
        ..KubernetesConfig::default()
    };
    let resources = PodResources {
        memory_bytes: 512 << 20,
        disk_bytes: 256 << 20,
    };
    check_golden("render-egress.yaml", &render(&config, &resources));
}
