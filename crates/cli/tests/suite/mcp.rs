//! `warden mcp` driven end to end by the official MCP Python SDK's client (`mcp` on PyPI,
//! `tests/mcp_client.py`), on both protocol revisions it speaks: the stateless 2026-07-28
//! (`server/discover`, no handshake) and 2025-11-25 (`initialize`). A scripted model answers
//! over real HTTP, once with a citation past the end of the file (rejected, sent back to the
//! model) and then with a good one; the client lists the tools (no approve tool), calls `ask`,
//! receives progress notifications and reads the checked citation, pinned to the repository's
//! commit. Skipped without the SDK unless `WARDEN_TEST_REQUIRE` lists `mcp`.

#![allow(clippy::disallowed_methods)] // the test runs the SDK's client, which runs the binary

use std::path::Path;

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::mcp_python;
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::support::Warden;

pub(super) fn sample_repo() -> TempRepo {
    let repo = TempRepo::new();
    let mut lib = String::new();
    for n in 1..=30 {
        lib.push_str(&format!("// line {n}\n"));
    }
    lib.push_str("pub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n");
    repo.write("src/lib.rs", &lib);
    repo.commit("initial");
    repo
}

pub(super) fn submit(end_line: u32) -> String {
    json!({
        "summary": "retry_with_backoff doubles the attempts",
        "claims": [{"text": "the function doubles its input", "basis": "observed",
            "evidence": [{"path": "src/lib.rs", "start_line": 31, "end_line": end_line}]}]
    })
    .to_string()
}

/// Runs the SDK's client against `warden mcp --repo REPO` in `mode`; returns what it saw.
fn drive(python: &Path, mode: &str, repo: &TempRepo, warden: &Warden) -> Value {
    let mut env = serde_json::Map::new();
    env.insert(
        "PATH".into(),
        json!(std::env::var("PATH").unwrap_or_default()),
    );
    env.insert("WARDEN_HOME".into(), json!(warden.home.path()));
    env.insert("HOME".into(), json!(warden.home.path()));
    for (key, value) in &warden.env {
        env.insert(key.clone(), json!(value));
    }
    let name = repo.path().file_name().unwrap().to_str().unwrap();
    let scenario = json!({
        "command": env!("CARGO_BIN_EXE_warden"),
        "args": ["mcp", "--repo", repo.path()],
        "env": env,
        "mode": mode,
        "repo": name,
        "question": "how does retry_with_backoff work?",
    });
    run_client(python, &scenario)
}

/// Runs `tests/mcp_client.py` with `scenario`; returns what the SDK's client saw.
pub(super) fn run_client(python: &Path, scenario: &Value) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let output = std::process::Command::new(python)
        .arg(&script)
        .arg(scenario.to_string())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .output()
        .expect("the SDK's client runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the client failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!("the client printed no JSON ({e}):\n{stdout}\nstderr:\n{stderr}")
    })
}

/// The in-process tasks of `home`, newest first, as `warden tasks --json` lists them.
fn tasks(home: &Path) -> Vec<Value> {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_warden"))
        .args(["tasks", "--json"])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WARDEN_HOME", home)
        .env("HOME", home)
        .output()
        .expect("warden tasks runs");
    assert!(output.status.success(), "{output:?}");
    serde_json::from_slice(&output.stdout).unwrap()
}

fn check(mode: &str, protocol_version: &str) {
    let Some(python) = mcp_python::python() else {
        return;
    };
    let repo = sample_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let name = repo
        .path()
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_string();
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "read_file",
            &json!({"path": "src/lib.rs", "start_line": 31, "end_line": 33}).to_string(),
        ),
        openai::tool_call("submit_answer", &submit(99)),
        openai::tool_call("submit_answer", &submit(33)),
        // The abandoned question's first turn: the client gives up after two seconds.
        openai::text("too late").delayed(30_000),
    ]);
    let warden = Warden::openai(&server.url());
    let report = drive(&python, mode, &repo, &warden);
    let seen = serde_json::to_string_pretty(&report).unwrap();

    assert_eq!(report["protocol_version"], protocol_version, "{seen}");

    // Every tool, each with a closed schema; none approves.
    let tools = report["tools"].as_array().unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ask",
            "run_change",
            "task_status",
            "task_result",
            "task_diff",
            "answer",
            "cancel",
            "list_repos",
            "read_file",
            "search",
            "list_dir"
        ]
    );
    for tool in tools {
        assert_eq!(
            tool["input_schema"]["additionalProperties"], false,
            "{tool}"
        );
    }
    assert!(
        report["approve"]
            .as_str()
            .unwrap()
            .starts_with("refused: unknown tool \"approve\""),
        "{seen}"
    );

    // The answer, with the citation Warden checked against the pinned commit.
    let ask = &report["ask"];
    assert_eq!(ask["is_error"], false, "{seen}");
    let citation = format!("{name}/src/lib.rs:31-33 @ {head}");
    assert_eq!(ask["structured"]["citations"], json!([citation]), "{seen}");
    assert!(ask["text"].as_str().unwrap().contains(&citation), "{seen}");
    assert!(
        ask["text"]
            .as_str()
            .unwrap()
            .starts_with("retry_with_backoff doubles the attempts\n"),
        "{seen}"
    );
    let evidence = &ask["structured"]["result"]["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["commit"], head.as_str());
    assert_eq!(evidence["end_line"], 33);
    assert_eq!(ask["structured"]["status"], "completed");

    // Progress notifications came from the task's events, the rejected citation among them.
    let messages: Vec<&str> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["message"].as_str().unwrap_or(""))
        .collect();
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("→ read_file src/lib.rs")),
        "{seen}"
    );
    assert!(
        messages.iter().any(|m| m.contains("submission 1 rejected")),
        "{seen}"
    );
    let steps: Vec<f64> = report["progress"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "progress must increase: {steps:?}"
    );

    // The model saw the rejection and answered again: three calls; the fourth is the abandoned
    // question's.
    assert_eq!(server.requests().len(), 4);

    // The same task, read back.
    let task_id = ask["structured"]["task_id"].as_str().unwrap();
    assert_eq!(report["task_status"]["structured"]["id"], task_id);
    assert_eq!(report["task_status"]["structured"]["status"], "completed");
    assert_eq!(report["task_status"]["structured"]["outcome"], "answer");
    assert_eq!(
        report["task_result"]["structured"]["citations"],
        json!([citation])
    );

    assert_eq!(
        report["list_repos"]["structured"]["repos"][0]["name"],
        name.as_str()
    );

    assert_code_tools(&report, &name, &head);

    // The question the client gave up on was cancelled with its request.
    assert!(
        report["abandoned"].as_str().unwrap().starts_with("gave up"),
        "{seen}"
    );
    let tasks = tasks(warden.home.path());
    assert_eq!(tasks.len(), 2, "{tasks:?}");
    assert_eq!(tasks[0]["prompt"], "and the delay?");
    assert_eq!(tasks[0]["status"], "cancelled", "{tasks:?}");
    assert_eq!(tasks[1]["id"], task_id);

    // Refusals are tool errors with a sentence that names the fix.
    let unknown_argument = &report["unknown_argument"];
    assert_eq!(unknown_argument["is_error"], true, "{seen}");
    assert_eq!(
        unknown_argument["text"],
        "invalid arguments for ask: arguments: unknown field \"approve\" (known fields: \
         follow_up_to, question, repos); the tool's inputSchema (tools/list) says what it takes"
    );
    let unknown_repo = &report["unknown_repo"];
    assert_eq!(unknown_repo["is_error"], true, "{seen}");
    assert_eq!(
        unknown_repo["text"],
        format!(
            "repository \"nowhere\" is not one this server offers (it offers {name}) nor an \
             absolute path or a URL: call list_repos, or name it by absolute path or URL"
        )
    );
}

/// What `code_tools` in `mcp_client.py` saw of `sample_repo()`: each tool read the pinned
/// commit and names it; a path outside the repository and an unknown revision are tool errors.
pub(super) fn assert_code_tools(report: &Value, name: &str, head: &str) {
    let seen = serde_json::to_string_pretty(report).unwrap();
    let first_line = format!("{name} @ {head}\n");
    for tool in ["read_file", "search", "list_dir"] {
        let result = &report[tool];
        assert_eq!(result["is_error"], false, "{tool}: {seen}");
        assert_eq!(result["structured"]["commit"], head, "{tool}: {seen}");
        assert_eq!(result["structured"]["repo"], name, "{tool}: {seen}");
        assert!(
            result["text"].as_str().unwrap().starts_with(&first_line),
            "{tool}: {seen}"
        );
    }
    assert_eq!(
        report["read_file"]["structured"]["output"],
        "src/lib.rs (lines 31-33 of 33)\n    31\tpub fn retry_with_backoff(attempts: u32) -> u32 \
         {\n    32\t    attempts * 2\n    33\t}",
        "{seen}"
    );
    assert_eq!(
        report["search"]["structured"]["output"],
        "src/lib.rs:31:pub fn retry_with_backoff(attempts: u32) -> u32 {",
        "{seen}"
    );
    assert_eq!(report["list_dir"]["structured"]["output"], "src/", "{seen}");
    let outside = &report["read_outside"];
    assert_eq!(outside["is_error"], true, "{seen}");
    assert_eq!(outside["structured"]["commit"], head, "{seen}");
    let bad_rev = &report["read_bad_rev"];
    assert_eq!(bad_rev["is_error"], true, "{seen}");
    assert!(
        bad_rev["text"].as_str().unwrap().contains("no-such-branch"),
        "{seen}"
    );
}

#[test]
fn an_mcp_client_on_the_stateless_revision_asks_and_reads_a_checked_citation() {
    check("auto", "2026-07-28");
}

#[test]
fn an_mcp_client_on_the_handshake_revision_asks_and_reads_a_checked_citation() {
    check("legacy", "2025-11-25");
}

#[test]
fn warden_mcp_refuses_a_server_and_two_repositories_of_one_name() {
    let warden = Warden::faux().with("WARDEN_SERVER", "http://127.0.0.1:9");
    let run = warden.run_with_stdin(&["mcp"], "");
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stdout, "", "stdout carries protocol messages only");
    assert!(
        run.stderr.contains(
            "warden mcp runs tasks in-process and does not talk to a server yet: unset \
             WARDEN_SERVER (or leave out --server)"
        ),
        "{}",
        run.stderr
    );

    let one = TempRepo::new();
    one.write("a.txt", "a\n");
    one.commit("a");
    let other = tempfile::tempdir().unwrap();
    let same_name = other.path().join(one.path().file_name().unwrap());
    std::fs::create_dir(&same_name).unwrap();
    let run = Warden::faux().run_with_stdin(
        &[
            "mcp",
            "--repo",
            one.path().to_str().unwrap(),
            "--repo",
            same_name.to_str().unwrap(),
        ],
        "",
    );
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert_eq!(run.stdout, "");
    assert!(
        run.stderr.contains("two --repo arguments are both named"),
        "{}",
        run.stderr
    );
}

#[test]
fn a_client_that_closes_stdin_without_a_session_gets_nothing_on_stdout() {
    let run = Warden::faux().run_with_stdin(&["mcp"], "");
    assert_eq!(run.stdout, "", "stdout carries protocol messages only");
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(
        run.stderr
            .contains("warden: error: the MCP client did not open a session"),
        "{}",
        run.stderr
    );
}
