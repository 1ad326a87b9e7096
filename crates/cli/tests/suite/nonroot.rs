//! Warden run by an unprivileged user (uid 65534, no delegated cgroups, so the cgroup layers are
//! disabled explicitly in `warden.toml`): a change task edits its copy-on-write view, the checks
//! run in the sandbox on the candidate tree, and the proposal lands in Warden's mirror — the
//! same path root takes, with none of root's privileges. Needs root to switch users; skipped
//! (loudly) otherwise.

#![allow(clippy::disallowed_methods)] // the test spawns the binary under test through setpriv

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

const NOBODY: &str = "65534";

fn euid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

fn chown_tree(path: &Path, owner: &str) {
    let status = Command::new("chown")
        .args([
            "-R",
            &format!("{owner}:{owner}"),
            &path.display().to_string(),
        ])
        .status()
        .unwrap();
    assert!(status.success(), "chown {}", path.display());
}

fn call(name: &str, arguments: serde_json::Value) -> warden_test_support::model_server::Reply {
    openai::tool_call(name, &arguments.to_string())
}

#[test]
fn an_unprivileged_warden_runs_a_change_task_in_the_linux_sandbox() {
    if euid() != 0 {
        // CI runs as root: a change of its user must show, not skip this quietly.
        assert!(
            !warden_test_support::postgres::required("root"),
            "WARDEN_TEST_REQUIRE lists root, but this run is uid {}",
            euid()
        );
        eprintln!(
            "skipped: needs root to switch to uid 65534 (uid {})",
            euid()
        );
        return;
    }
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    let home = tempfile::tempdir().unwrap();
    std::fs::write(
        home.path().join("warden.toml"),
        "[sandbox]\nbackend = \"linux\"\n\
         disabled_layers = [\"cgroup_memory\", \"cgroup_pids\", \"cgroup_cpu\"]\n",
    )
    .unwrap();
    let before = repo.git(&["status", "--porcelain", "--ignored"]);
    for dir in [repo.path(), home.path()] {
        chown_tree(dir, NOBODY);
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let server = ScriptedModelServer::start_blocking(vec![
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        call(
            "write_file",
            json!({"path": "notes/new.txt", "content": "in a new directory\n"}),
        ),
        call(
            "shell",
            json!({"command": "id -u > whoami.txt && cat whoami.txt"}),
        ),
        call("run_checks", json!({})),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let output = Command::new("setpriv")
        .args([
            "--reuid",
            NOBODY,
            "--regid",
            NOBODY,
            "--clear-groups",
            env!("CARGO_BIN_EXE_warden"),
            "run",
            "--repo",
            &repo.path().display().to_string(),
            "--check",
            "sh check.sh",
            "--json",
            "make beta uppercase",
        ])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", home.path())
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_MODEL", "openai:gpt-test")
        .env("OPENAI_BASE_URL", format!("{}/v1", server.url()))
        .env("OPENAI_API_KEY", "sk-test-key")
        .env("WARDEN_RETRY_BASE_MS", "5")
        .current_dir(home.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let observations: Vec<String> = server
        .requests()
        .iter()
        .filter_map(|r| {
            r.body["messages"]
                .as_array()?
                .iter()
                .rev()
                .find(|m| m["role"] == "tool")
                .and_then(|m| m["content"].as_str())
                .map(str::to_string)
        })
        .collect();
    assert_eq!(
        output.status.code(),
        Some(0),
        "stdout:\n{stdout}\nstderr:\n{stderr}\ntool results:\n{}",
        observations.join("\n---\n")
    );
    let result: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let proposal = &result["proposal"];
    let validations = proposal["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 1, "{proposal}");
    assert_eq!(validations[0]["exit_code"], 0, "{proposal}");
    assert_eq!(validations[0]["tree"], proposal["tree"]);
    let files: Vec<&str> = proposal["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().or(f.as_str()).unwrap_or_default())
        .collect();
    assert!(files.contains(&"src/lib.txt"), "{files:?}");
    assert!(files.contains(&"whoami.txt"), "{files:?}");
    assert!(
        files.contains(&"notes/new.txt"),
        "{files:?}\n{result}\n{}",
        observations.join("\n---\n")
    );
    // The shell command ran as the unprivileged user (mapped into the sandbox), not as root.
    let requests = server.requests();
    let observation = requests[3].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(!observation.contains("\n0\n"), "{observation}");
    // The user's checkout is untouched (back in root's hands so root's git trusts it).
    chown_tree(repo.path(), "0");
    assert_eq!(repo.git(&["status", "--porcelain", "--ignored"]), before);
}
