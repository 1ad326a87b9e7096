//! `warden-runtime` must know nothing of git, SQL, HTTP or a particular provider: its normal
//! (non-dev) dependency closure may contain only the crates listed here.

// cargo tree is run directly: this test checks the build graph, not Warden behaviour.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;

#[test]
fn runtime_depends_on_no_git_sql_http_or_provider_crate() {
    // What a build of the runtime alone links (normal dependencies, every target): `cargo
    // tree` resolves features for this package only, where `cargo metadata` would unify them
    // across the workspace (e.g. `warden-protocol`'s `views`, which the service enables).
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "tree",
            "--locked",
            "-p",
            "warden-runtime",
            "-e",
            "normal",
            "--prefix",
            "none",
            "--format",
            "{p}",
            "--target",
            "all",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo tree runs");
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let tree = String::from_utf8_lossy(&output.stdout);
    let names: BTreeSet<&str> = tree
        .lines()
        .filter_map(|line| line.split_whitespace().next())
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
