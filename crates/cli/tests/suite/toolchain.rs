//! Toolchains in the sandbox end to end: a directory configured under `[sandbox] mounts` is
//! visible (read-only, on `PATH`) to checks and agent commands, and a check whose program the
//! sandbox cannot find fails the task before the agent starts, with the sentence naming the fix.

use super::support::Warden;
use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

const NOT_FOUND: &str = "`faketool`: not found in the sandbox; the operator can add a mount or a \
                         toolchain preset ([sandbox] toolchains / mounts in warden.toml)";

/// A directory outside Warden's home with `bin/faketool`, an executable script.
fn fake_toolchain() -> tempfile::TempDir {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bin")).unwrap();
    let tool = dir.path().join("bin/faketool");
    std::fs::write(&tool, "#!/bin/sh\necho faketool checked the tree\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

fn repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("README.md", "# sample\n");
    repo.commit("initial");
    repo
}

fn with_config(warden: Warden, toml: &str) -> Warden {
    let path = warden.home.path().join("warden.toml");
    std::fs::write(&path, toml).unwrap();
    warden
}

#[test]
fn a_mounted_toolchain_makes_its_check_pass() {
    let toolchain = fake_toolchain();
    let repo = repo();
    let server = ScriptedModelServer::start_blocking(vec![
        // A program nobody mounted: the agent is told how it can be fixed.
        openai::tool_call(
            "shell",
            &json!({"command": "othertool --version"}).to_string(),
        ),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&server.url()),
        &format!(
            "[sandbox]\nmounts = [{:?}]\n",
            toolchain.path().to_str().unwrap()
        ),
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "faketool",
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["command"], "faketool");
    assert_eq!(validation["exit_code"], 0);
    assert!(
        validation["output_tail"]
            .as_str()
            .unwrap()
            .contains("faketool checked the tree"),
        "{validation}"
    );
    let requests = server.requests();
    let shell_result = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .unwrap()["content"]
        .as_str()
        .unwrap()
        .to_string();
    let other = NOT_FOUND.replace("faketool", "othertool");
    assert!(shell_result.contains(&other), "{shell_result}");
    assert!(run.stderr.contains(&other), "{}", run.stderr);
}

#[test]
fn without_the_mount_the_check_fails_up_front_naming_the_fix() {
    let repo = repo();
    // The model is never asked: the failure comes before any agent turn.
    let server = ScriptedModelServer::start_blocking(vec![]);
    let warden = Warden::openai(&server.url());
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "faketool",
        "add notes",
    ]);
    assert_ne!(run.code, 0, "{}", run.stdout);
    let result = run.json();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "baseline_failing", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(message.contains(NOT_FOUND), "{message}");
    assert!(server.requests().is_empty());
}

#[test]
fn a_mount_under_warden_home_is_refused_at_configuration_load() {
    let repo = repo();
    let warden = Warden::faux();
    std::fs::create_dir_all(warden.home.path().join("snapshots")).unwrap();
    let snapshots = warden.home.path().join("snapshots");
    let warden = with_config(
        warden,
        &format!("[sandbox]\nmounts = [{:?}]\n", snapshots.to_str().unwrap()),
    );
    let run = warden.run(&["run", "--repo", repo.path().to_str().unwrap(), "x"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("overlaps WARDEN_HOME"),
        "{}",
        run.stderr
    );
}

#[test]
fn prepare_fills_the_cache_that_checks_and_the_agent_only_read() {
    let repo = repo();
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "shell",
            &json!({"command": "echo poisoned > \"$WARDEN_CACHE/dep\""}).to_string(),
        ),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&server.url()),
        "[sandbox]\nprepare = [\"echo fetched > \\\"$WARDEN_CACHE/dep\\\"\"]\n",
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "grep -qx fetched \"$WARDEN_CACHE/dep\" && ! touch \"$WARDEN_CACHE/x\"",
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let notices = result["notices"].to_string();
    assert!(notices.contains("prepare ran without network"), "{notices}");
    let caches = warden.home.path().join("caches");
    // The cache directory (its lock file, `<cache>.lock`, sits beside it).
    let cache = std::fs::read_dir(&caches)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.is_dir())
        .unwrap();
    let mut lock = cache.clone().into_os_string();
    lock.push(".lock");
    assert!(std::path::PathBuf::from(lock).is_file());
    assert_eq!(
        std::fs::read_to_string(cache.join("dep")).unwrap(),
        "fetched\n"
    );
    assert!(!cache.join("x").exists());
}

#[test]
fn doctor_suggests_the_rust_preset_when_rustup_is_installed() {
    use std::os::unix::fs::PermissionsExt;
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join(".rustup/toolchains")).unwrap();
    std::fs::create_dir_all(home.path().join(".cargo/bin")).unwrap();
    let cargo = home.path().join(".cargo/bin/cargo");
    std::fs::write(&cargo, "#!/bin/sh\n").unwrap();
    std::fs::set_permissions(&cargo, std::fs::Permissions::from_mode(0o755)).unwrap();
    let warden = Warden::faux().with("HOME", home.path().to_str().unwrap());
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "toolchains")
        .unwrap_or_else(|| panic!("{report}"));
    assert_eq!(check["ok"], true);
    let detail = check["detail"].as_str().unwrap();
    assert!(detail.contains("found rust: rustup at"), "{detail}");
    assert!(
        detail.contains("add to warden.toml:\n[sandbox]\ntoolchains = [\"rust\"]"),
        "{detail}"
    );

    // Once configured, the sandbox sees it and the suggestion is gone.
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[sandbox]\ntoolchains = [\"rust\"]\n",
    )
    .unwrap();
    let run = warden.run(&["doctor", "--json", "--offline"]);
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    let detail = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["check"] == "toolchains")
        .unwrap()["detail"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(detail.contains("configured: rust"), "{detail}");
    assert!(!detail.contains("add to warden.toml"), "{detail}");
}

/// A registered repository's own mounts reach the sandboxes of its served tasks (checks and
/// agent commands), and only from under `[sandbox] repo_mount_roots`.
#[test]
fn a_registered_repository_mount_reaches_its_served_tasks() {
    use super::server_harness::{settled, Server, Token, ALICE};
    const TOKENS: &[Token] = &[("alice", "admin", ALICE)];
    use std::os::unix::fs::PermissionsExt;
    // The operator's root for repository mounts, with one toolchain in it.
    let roots = tempfile::tempdir().unwrap();
    let toolchain = roots.path().join("faketool-1.0");
    std::fs::create_dir_all(toolchain.join("bin")).unwrap();
    let tool = toolchain.join("bin/faketool");
    std::fs::write(&tool, "#!/bin/sh\necho faketool checked the tree\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("shell", &json!({"command": "faketool"}).to_string()),
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "notes\n"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&model.url()),
        &format!(
            "[sandbox]\nrepo_mount_roots = [{:?}]\n",
            roots.path().to_str().unwrap()
        ),
    );
    let server = Server::start(&warden, TOKENS);
    let mount = toolchain.to_str().unwrap();
    let source = repo.path().to_str().unwrap();
    // A mount outside the roots is refused at registration.
    let (status, body) = server.request(
        "POST",
        "/v1/repos",
        Some(ALICE),
        Some(&json!({"name": "bad", "source": source, "mounts": ["/etc"]})),
    );
    assert_eq!(status, 422, "{body}");
    server.register_repo(&json!({
        "name": "app", "source": source, "checks": ["faketool"], "mounts": [mount],
    }));
    let task = server.submit(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": "add notes"}),
    );
    let id = task["id"].as_str().unwrap();
    let task = server.wait_until(ALICE, id, settled);
    assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
    let result = &task["result"];
    let validation = &result["proposal"]["validations"][0];
    assert_eq!(validation["command"], "faketool", "{result}");
    assert_eq!(validation["exit_code"], 0, "{result}");
    // The agent's own command found it too.
    let seen = model.requests()[1].body["messages"].to_string();
    assert!(seen.contains("faketool checked the tree"), "{seen}");
    server.terminate();
}
