//! Warden's own egress end to end: a change's `prepare` step reaches the registries on the
//! allow-list through Warden's proxy and nothing else, each connection a task event; with only
//! `toolchains = ["rust"]` configured, a crate with crates.io dependencies pinned by its
//! lockfile is fetched by the preset's default prepare and its checks build offline.
//!
//! The crates.io test skips, saying so, when the registry is unreachable or no rustup is
//! installed — unless `WARDEN_TEST_REQUIRE` lists `crates-io`, where that fails it.

use super::support::Warden;
use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};
use warden_test_support::postgres::required;

/// The model's turns of a small change: a note, then the submission.
fn note_then_submit() -> ScriptedModelServer {
    ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ])
}

/// What the allow-list does not admit is answered 403 by Warden's proxy, never reached,
/// reported as a refused egress event and counted in the result's notice. Needs no network:
/// nothing refused is dialled.
#[test]
fn prepare_reaches_only_the_allow_list_and_every_refusal_is_an_event() {
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    let server = note_then_submit();
    // Asks Warden's proxy (from HTTPS_PROXY) for a tunnel to a host not listed and for the
    // cloud metadata address, keeping each status line in the cache.
    let ask = |request: &str| {
        format!(
            "exec 3<>/dev/tcp/${{p%:*}}/${{p##*:}} && printf '{request}\\r\\n\\r\\n' >&3 && \
             head -n 1 <&3 >> \"$WARDEN_CACHE/status\"; exec 3<&-"
        )
    };
    let prepare = format!(
        "p=${{HTTPS_PROXY#http://}}; {}; {}",
        ask("CONNECT example.com:443 HTTP/1.1"),
        ask("GET http://169.254.169.254/latest/meta-data/ HTTP/1.1")
    );
    let warden = Warden::openai(&server.url());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[sandbox]\nprepare = [{prepare:?}]\n\n[egress]\nallow = [\"deps.example\"]\n"),
    )
    .unwrap();
    let check = "[ \"$(grep -c ' 403 ' \"$WARDEN_CACHE/status\")\" = 2 ]";
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        check,
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(
        result["proposal"]["validations"][0]["exit_code"], 0,
        "both answers were 403: {result}"
    );
    let notices = result["notices"].to_string();
    assert!(
        notices.contains("through Warden's egress proxy (0 connections, 2 refused"),
        "{notices}"
    );
    for refused in [
        "✗ egress refused: CONNECT example.com:443: example.com:443 is not on the egress \
         allow-list",
        "✗ egress refused: GET 169.254.169.254:80: 169.254.169.254 is an IP address",
    ] {
        assert!(run.stderr.contains(refused), "{refused}\n{}", run.stderr);
    }
}

/// `[egress] allow_private` for the rust preset's registries when this machine resolves them
/// to addresses that are not public (a machine whose package registries are reached through
/// a documentation-range address, as some build sandboxes do): Warden's proxy would rightly
/// refuse those, so the test lists them as the operator's own hosts, and says so. Empty where
/// they resolve to public addresses, as they do on the internet.
fn private_registries() -> String {
    use std::net::ToSocketAddrs;
    let hosts = ["index.crates.io", "static.crates.io"];
    let private = hosts.iter().any(|host| {
        (*host, 443).to_socket_addrs().is_ok_and(|mut addresses| {
            addresses.any(|a| !warden_engine::address::is_public(a.ip()))
        })
    });
    if !private {
        return String::new();
    }
    eprintln!("note: this machine resolves crates.io's hosts to non-public addresses; listed under [egress] allow_private");
    format!("\n[egress]\nallow_private = {hosts:?}\n")
}

/// The README's tour on a crate with a crates.io dependency: nothing configured but the rust
/// preset. The preset's default prepare (`cargo fetch --locked`, over the manifest and the
/// lockfile) fetches through Warden's egress proxy straight to crates.io, and `cargo test`
/// builds offline in the checks.
#[test]
fn a_crate_with_registry_dependencies_builds_in_its_checks_with_only_the_rust_preset() {
    let missing = match (
        super::maintain::registry_reachable(),
        super::maintain::rustup(),
    ) {
        (false, _) => Some("index.crates.io is unreachable"),
        (true, None) => Some("no rustup installation"),
        (true, Some(_)) => None,
    };
    if let Some(missing) = missing {
        assert!(
            !required("crates-io"),
            "WARDEN_TEST_REQUIRE lists crates-io but {missing}"
        );
        eprintln!("skipped: {missing} (WARDEN_TEST_REQUIRE=crates-io makes this a failure)");
        return;
    }
    let Some((rustup, cargo)) = super::maintain::rustup() else {
        return;
    };
    let repo = super::maintain::fixture();
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "write_file",
            &json!({"path": "src/lib.rs", "content": super::maintain::LIB.replace(
                "pub fn three()", "/// Three, counted in a SmallVec.\npub fn three()")})
            .to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Document three"}).to_string(),
        ),
    ]);
    let warden = Warden::openai(&server.url())
        .with("RUSTUP_HOME", rustup.to_str().unwrap())
        .with("CARGO_HOME", cargo.to_str().unwrap());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!(
            "[sandbox]\ntoolchains = [\"rust\"]\n{}",
            private_registries()
        ),
    )
    .unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "cargo test",
        "document three",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["command"], "cargo test");
    assert_eq!(validation["exit_code"], 0, "{result}");
    let notices = result["notices"].to_string();
    assert!(
        notices.contains(
            "prepare: network to the allow-listed registries through Warden's egress proxy"
        ),
        "{notices}"
    );
    assert!(!notices.contains("failed"), "{notices}");
    assert!(
        run.stderr.contains("⇄ egress CONNECT index.crates.io:443"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("egress refused"), "{}", run.stderr);
}

/// A crate whose dependencies the checks cannot have (no lockfile, so the rust preset's default
/// prepare fetches nothing): the agent's first `run_checks`, on the base tree, stops the task
/// with `baseline_failing` and the setting that fixes it, before it spends any submission.
#[test]
fn checks_that_cannot_fetch_on_the_base_stop_the_task_with_the_fix() {
    let Some((rustup, cargo)) = super::maintain::rustup() else {
        assert!(
            !required("crates-io"),
            "WARDEN_TEST_REQUIRE lists crates-io but there is no rustup installation"
        );
        eprintln!(
            "skipped: no rustup installation (WARDEN_TEST_REQUIRE=crates-io makes this a failure)"
        );
        return;
    };
    let repo = TempRepo::new();
    repo.write("Cargo.toml", super::maintain::MANIFEST);
    repo.write("src/lib.rs", super::maintain::LIB);
    repo.write(".gitignore", "/target\n");
    repo.commit("a crate without its lockfile");
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("run_checks", "{}"),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "never reached"}).to_string(),
        ),
    ]);
    let warden = Warden::openai(&server.url())
        .with("RUSTUP_HOME", rustup.to_str().unwrap())
        .with("CARGO_HOME", cargo.to_str().unwrap());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[sandbox]\ntoolchains = [\"rust\"]\n",
    )
    .unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "cargo test",
        "document three",
    ]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "baseline_failing", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains("check `cargo test` cannot fetch the project's dependencies"),
        "{message}"
    );
    assert!(message.contains("commit Cargo.lock"), "{message}");
    // The model was asked once: its run_checks ended the task.
    assert_eq!(server.requests().len(), 1, "{result}");
}
