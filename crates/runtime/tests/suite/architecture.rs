//! `warden-runtime` must know nothing of git, SQL, HTTP or a particular provider: its normal
//! (non-dev) dependency closure may contain only the crates listed here.

// cargo metadata is run directly: this test checks the build graph, not Warden behaviour.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};

#[test]
fn runtime_depends_on_no_git_sql_http_or_provider_crate() {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--filter-platform",
            &host_triple(),
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();

    let packages: BTreeMap<String, &serde_json::Value> = metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap().to_string(), p))
        .collect();
    let nodes: BTreeMap<String, &serde_json::Value> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap().to_string(), n))
        .collect();
    let root = packages
        .values()
        .find(|p| p["name"] == "warden-runtime")
        .map(|p| p["id"].as_str().unwrap().to_string())
        .unwrap();

    // Walk normal dependencies only (dev and build dependencies do not ship).
    let mut seen = BTreeSet::new();
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        if !seen.insert(id.clone()) {
            continue;
        }
        for dep in nodes[&id]["deps"].as_array().unwrap() {
            let normal = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .any(|k| k["kind"].is_null());
            if normal {
                stack.push(dep["pkg"].as_str().unwrap().to_string());
            }
        }
    }
    let names: BTreeSet<&str> = seen
        .iter()
        .map(|id| packages[id]["name"].as_str().unwrap())
        .collect();

    // The walk really followed the graph.
    assert!(
        names.contains("warden-protocol") && names.contains("serde_json"),
        "{names:?}"
    );
    let forbidden = [
        "warden-repo",
        "warden-models",
        "warden-store",
        "warden-engine",
        "warden-service",
        "warden-api",
        "warden-tools",
        "warden-sandbox",
        "git2",
        "gix",
        "rusqlite",
        "sqlx",
        "postgres",
        "tokio-postgres",
        "hyper",
        "reqwest",
        "axum",
        "http",
        "tokio",
    ];
    for name in forbidden {
        assert!(
            !names.contains(name),
            "warden-runtime depends on {name}: {names:?}"
        );
    }
    let allowed: BTreeSet<&str> = [
        "warden-runtime",
        "warden-protocol",
        "serde",
        "serde_core",
        "serde_derive",
        "serde_json",
        "sha2",
        "hex",
        "thiserror",
        "thiserror-impl",
        "proc-macro2",
        "quote",
        "syn",
        "unicode-ident",
        "itoa",
        "memchr",
        "ryu",
        "digest",
        "block-buffer",
        "crypto-common",
        "generic-array",
        "typenum",
        "version_check",
        "cpufeatures",
        "libc",
        "cfg-if",
        "zmij",
        // `digest`'s `mac` feature, switched on in the workspace's resolve by `hmac` (the
        // server's callback signatures): constant-time comparisons, no I/O, no dependencies.
        "subtle",
        // The `tool.call` span around each tool call (trace export, `[telemetry]`): a facade
        // with no I/O of its own; the subscriber that exports lives in the binary.
        "tracing",
        "tracing-core",
        "tracing-attributes",
        "pin-project-lite",
        "once_cell",
    ]
    .into_iter()
    .collect();
    let unexpected: Vec<&&str> = names.difference(&allowed).collect();
    assert!(
        unexpected.is_empty(),
        "warden-runtime grew dependencies; justify them and extend this list: {unexpected:?}"
    );
}

fn host_triple() -> String {
    let output = std::process::Command::new("rustc")
        .arg("-vV")
        .output()
        .expect("rustc runs");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("rustc -vV names the host")
        .to_string()
}
