//! Crash points (`WARDEN_FAILPOINT`) exist only in test builds: the `failpoints` feature of
//! warden-service is off by default and enabled by no normal dependency edge, only by a
//! dev-dependency, so `cargo build`/`cargo install` of the binary cannot contain them. (That
//! the feature off makes a crash point inert is `publish::tests`' business.)

// cargo metadata is run directly: this test checks the build graph, not Warden behaviour.
#![allow(clippy::disallowed_methods)]

use serde_json::Value;

#[test]
fn only_dev_dependencies_enable_failpoints() {
    let output = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: Value = serde_json::from_slice(&output.stdout).unwrap();
    let packages = metadata["packages"].as_array().unwrap();

    let service = packages
        .iter()
        .find(|p| p["name"] == "warden-service")
        .unwrap();
    assert!(
        service["features"]["failpoints"].is_array(),
        "warden-service has a failpoints feature"
    );
    // Nothing the default feature set turns on leads to it.
    let features = service["features"].as_object().unwrap();
    let mut enabled: Vec<&str> = vec!["default"];
    let mut seen = std::collections::BTreeSet::new();
    while let Some(feature) = enabled.pop() {
        if !seen.insert(feature) {
            continue;
        }
        assert_ne!(
            feature, "failpoints",
            "a default feature enables failpoints"
        );
        for next in features
            .get(feature)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            enabled.extend(next.as_str());
        }
    }

    let mut dev_edges = 0;
    for package in packages {
        for dependency in package["dependencies"].as_array().unwrap() {
            if dependency["name"] != "warden-service" {
                continue;
            }
            let failpoints = dependency["features"]
                .as_array()
                .unwrap()
                .iter()
                .any(|f| f == "failpoints");
            if !failpoints {
                continue;
            }
            assert_eq!(
                dependency["kind"], "dev",
                "{} enables warden-service/failpoints outside dev-dependencies",
                package["name"]
            );
            dev_edges += 1;
        }
    }
    // The CLI's crash tests need it; if this drops to 0 they lost their crash points.
    assert!(dev_edges >= 1, "no test build enables failpoints");
}
