//! One front door: the in-process CLI and the HTTP API go through the same `TaskService`, so
//! the same request is refused with the same sentence by both, and an in-process task is kept
//! and run exactly like a served one (the same store, the same worker code).

use serde_json::{json, Value};

use super::server_harness::{sample_repo, Server, Token, ALICE};
use super::support::Warden;

const TOKENS: &[Token] = &[("alice", "admin", ALICE)];

/// The refusal message of an API error body.
fn message(body: &Value) -> String {
    body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn the_cli_and_the_api_refuse_the_same_request_with_the_same_sentence() {
    let repo = sample_repo();
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let path = repo.path().to_str().unwrap();

    // Seventeen checks: one more than a change may give.
    let checks: Vec<String> = (0..17).map(|n| format!("true {n}")).collect();
    let mut args = vec!["run", "--repo", path];
    for check in &checks {
        args.extend(["--check", check.as_str()]);
    }
    args.push("do it");
    let local = warden.run(&args);
    assert_eq!(local.code, 2, "{}", local.stderr);
    let (status, body) = server.request(
        "POST",
        "/v1/tasks",
        Some(ALICE),
        Some(&json!({"kind": "change", "repo": "app", "prompt": "do it", "checks": checks})),
    );
    assert_eq!(status, 422, "{body}");
    let sentence = message(&body);
    assert_eq!(sentence, "at most 16 check commands");
    assert!(
        local.stderr.contains(&sentence),
        "in-process: {}\nHTTP: {sentence}",
        local.stderr
    );

    // A malformed approval hash, for an approval that exists on neither side yet: the
    // visibility check comes first on both.
    let local = warden.run(&[
        "approve",
        "apr_01HZY8Q6K9V2M3N4P5R6S7T8V9",
        "--hash",
        "nope",
    ]);
    assert_eq!(local.code, 2, "{}", local.stderr);
    let (status, body) = server.request(
        "POST",
        "/v1/approvals/apr_01HZY8Q6K9V2M3N4P5R6S7T8V9",
        Some(ALICE),
        Some(&json!({"decision": "approve", "hash": "nope"})),
    );
    assert_eq!(status, 404, "{body}");
    assert!(
        local.stderr.contains(&message(&body)),
        "in-process: {}\nHTTP: {}",
        local.stderr,
        message(&body)
    );

    // A message to a finished task's follow-up that is empty.
    let asked = warden.run(&["ask", "--repo", path, "--json", "where is retry?"]);
    assert_eq!(asked.code, 0, "{}", asked.stderr);
    let id = asked.json()["task_id"].as_str().unwrap().to_string();
    let local = warden.run(&["answer", &id, "   "]);
    assert_eq!(local.code, 2, "{}", local.stderr);
    let sentence = "the message is empty: say what to tell the task";
    assert!(local.stderr.contains(sentence), "{}", local.stderr);
    let mcp = mcp_refusal(
        &warden,
        path,
        "answer",
        json!({"task_id": id, "text": "  "}),
    );
    assert_eq!(mcp, sentence);

    // An empty question and an empty change request: one sentence each, said by the service
    // whichever door they come through (in-process, --server, HTTP, MCP).
    for (kind, command, tool, argument, sentence) in [
        (
            "question",
            "ask",
            "ask",
            "question",
            "the prompt is empty: ask a question about the repositories",
        ),
        (
            "change",
            "run",
            "run_change",
            "request",
            "the prompt is empty: say what to change",
        ),
    ] {
        let local = warden.run(&[command, "--repo", path, "  "]);
        assert_eq!(local.code, 2, "{}", local.stderr);
        assert!(local.stderr.contains(sentence), "{kind}: {}", local.stderr);
        let remote = warden
            .command(&[command, "--server", &server.url(), "--repo", "app", "  "])
            .env("WARDEN_TOKEN", ALICE)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&remote.stderr);
        assert_eq!(remote.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(sentence), "{kind}: {stderr}");
        let (status, body) = server.request(
            "POST",
            "/v1/tasks",
            Some(ALICE),
            Some(&json!({"kind": kind, "repo": "app", "prompt": " "})),
        );
        assert_eq!(status, 422, "{body}");
        assert_eq!(message(&body), sentence);
        let arguments = match tool {
            "ask" => json!({"question": " ", "repos": [offered_name(path)]}),
            _ => json!({"request": " ", "repo": offered_name(path)}),
        };
        assert_eq!(
            mcp_refusal(&warden, path, tool, arguments),
            sentence,
            "{argument}"
        );
    }
    server.terminate();
}

/// The name `warden mcp --repo PATH` offers the repository at `path` under.
fn offered_name(path: &str) -> String {
    std::path::Path::new(path)
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// The text of `warden mcp`'s refusal of one `tool` call with `arguments`, over stdio as
/// newline-delimited JSON-RPC, offering the repository at `repo`.
fn mcp_refusal(warden: &Warden, repo: &str, tool: &str, arguments: Value) -> String {
    use std::io::{BufRead, BufReader, Write};
    let mut child = warden
        .command(&["mcp", "--repo", repo])
        .env_remove("WARDEN_SERVER")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut send = |message: Value| writeln!(stdin, "{message}").unwrap();
    let mut reply = |id: u64| loop {
        let mut line = String::new();
        assert_ne!(
            stdout.read_line(&mut line).unwrap(),
            0,
            "warden mcp closed stdout"
        );
        let message: Value = serde_json::from_str(&line).unwrap();
        if message["id"] == id {
            return message;
        }
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "parity", "version": "1"}}}),
    );
    let initialized = reply(1);
    assert!(initialized.get("result").is_some(), "{initialized}");
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}}));
    let called = reply(2);
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(called["result"]["isError"], true, "{called}");
    called["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn an_in_process_task_is_a_stored_task_like_a_served_one() {
    let repo = sample_repo();
    let warden = Warden::faux();
    let path = repo.path().to_str().unwrap();
    let asked = warden.run(&["ask", "--repo", path, "--json", "where is retry?"]);
    assert_eq!(asked.code, 0, "{}", asked.stderr);
    let id = asked.json()["task_id"].as_str().unwrap().to_string();
    // The task JSON is the API's: the same fields `GET /v1/tasks/{id}` serves.
    let shown = warden.run(&["show", &id, "--json"]).json();
    for field in [
        "id",
        "kind",
        "status",
        "owner",
        "prompt",
        "repos",
        "created_at",
        "result",
    ] {
        assert!(shown.get(field).is_some(), "{field} missing: {shown}");
    }
    assert_eq!(shown["owner"], "local");
    assert_eq!(shown["status"], "completed");
    assert_eq!(shown["result"], asked.json());
    // Kept in the store under WARDEN_HOME, not as files.
    assert!(warden.home.path().join("local.db").is_file());
    assert!(!warden.home.path().join("tasks").exists());
    // Its run journal is the store's, hash-chained.
    let logs = warden.run(&["logs", &id, "--json"]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(logs.stdout.lines().count() >= 4, "{}", logs.stdout);
}

#[test]
fn task_records_of_an_earlier_version_are_named_as_not_read() {
    let warden = Warden::faux();
    let old = warden
        .home
        .path()
        .join("tasks/tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9");
    std::fs::create_dir_all(&old).unwrap();
    std::fs::write(old.join("task.json"), "{}").unwrap();
    let shown = warden.run(&["show", "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"]);
    assert_eq!(shown.code, 2, "{}", shown.stderr);
    assert!(
        shown.stderr.contains("earlier version, which are not read"),
        "{}",
        shown.stderr
    );
    assert!(shown
        .stderr
        .contains("no task tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"));
}

/// Publishing asks no model: an in-process approval works without one configured, and a task
/// still waiting for a model is never failed for the lack of one by only following it.
#[test]
fn approving_in_process_needs_no_model() {
    let repo = sample_repo();
    let remote = tempfile::tempdir().unwrap();
    let remote_git = remote.path().join("remote.git");
    repo.git(&["init", "-q", "--bare", remote_git.to_str().unwrap()]);
    repo.git(&["remote", "add", "origin", remote_git.to_str().unwrap()]);
    let warden = Warden::faux();
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--publish",
        "--json",
        "make the faux change",
    ]);
    assert_eq!(run.code, 4, "{}", run.stderr);
    let result = run.json();
    let approval = result["approval"]["id"].as_str().unwrap().to_string();
    let hash = result["approval"]["subject_hash"]
        .as_str()
        .unwrap()
        .to_string();
    #[allow(clippy::disallowed_methods)]
    let approved = warden
        .command(&["approve", &approval, "--hash", &hash])
        .env_remove("WARDEN_MODEL")
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&approved.stdout),
        String::from_utf8_lossy(&approved.stderr),
    );
    assert_eq!(approved.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("pushed"), "{stdout}");
    let branches = repo.git(&["--git-dir", remote_git.to_str().unwrap(), "for-each-ref"]);
    assert_eq!(branches.lines().count(), 1, "{branches}");
}
