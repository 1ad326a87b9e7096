//! Warden's agent using operator-configured MCP servers (`[[mcp.servers]]`) end to end, with
//! the real `warden` binary, the scripted model and the default (`linux`) sandbox: the official
//! npm reference servers (`server-filesystem` read-only, `server-everything` not marked
//! read-only: denied), and a hostile hand-written server (`tests/fixtures/
//! malicious_mcp_server.py`) that is contained.

use super::support::Warden;
use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, RecordedRequest, ScriptedModelServer};

fn repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        "README.md",
        "# sample\nThe retry budget is seven attempts.\nSee docs.\n",
    )
    .write("docs/guide.md", "how to retry\n");
    repo.commit("initial");
    repo
}

fn with_config(warden: Warden, toml: &str) -> Warden {
    std::fs::write(warden.home.path().join("warden.toml"), toml).unwrap();
    warden
}

fn answer_citing_readme() -> String {
    json!({
        "summary": "The retry budget is seven attempts.",
        "claims": [{"text": "the retry budget is seven attempts", "basis": "observed",
            "evidence": [{"path": "README.md", "start_line": 2, "end_line": 2}]}]
    })
    .to_string()
}

/// The content of the tool results the model was sent with request `index`, in order.
fn tool_results(requests: &[RecordedRequest], index: usize) -> Vec<String> {
    requests[index].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn offered(requests: &[RecordedRequest]) -> Vec<Value> {
    requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"].clone())
        .collect()
}

/// The run's journal records (`warden logs TASK --json`).
fn journal(warden: &Warden, task: &str) -> Vec<Value> {
    let logs = warden.run(&["logs", task, "--json"]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    logs.stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn records<'a>(journal: &'a [Value], kind: &str, tool: &str) -> Vec<&'a Value> {
    journal
        .iter()
        .filter(|r| r["kind"] == kind && r["payload"]["tool"] == tool)
        .collect()
}

/// A server's entry point reached through a directory of this test's own (a symlink to the
/// installed package), so its processes are told apart from another test's. Mount both.
fn own_entry(servers: &std::path::Path, server: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let package = warden_test_support::mcp_node::entry(servers, server);
    let package = package.parent().unwrap().parent().unwrap();
    std::os::unix::fs::symlink(package, dir.path().join(server)).unwrap();
    let entry = dir.path().join(server).join("dist/index.js");
    (dir, entry)
}

/// Whether the task failed because this machine lacks the sandbox backend (the test then
/// skips, saying so), unless `WARDEN_SANDBOX_TEST_REQUIRE` lists it (CI), where it fails.
fn backend_missing(backend: &str, run: &super::support::Run) -> bool {
    if run.code == 0
        || run.json()["failure"]["code"] != "sandbox_error"
        || run.stdout.contains("MCP server")
    {
        return false;
    }
    let required = std::env::var("WARDEN_SANDBOX_TEST_REQUIRE").unwrap_or_default();
    assert!(
        !required.split(',').any(|b| b == backend),
        "{backend} is required here but: {}",
        run.stdout
    );
    eprintln!("SKIP on {backend}: {}", run.stdout);
    true
}

/// Leftover server processes of this test: none may outlive the task.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if cmdline.contains(needle) {
                found.push(cmdline);
            }
        }
    }
    found
}

#[test]
fn a_question_reads_through_the_filesystem_reference_server_and_a_writable_server_is_denied() {
    reads_through_the_filesystem_reference_server("linux");
}

#[test]
fn the_filesystem_reference_server_runs_on_gvisor_too() {
    reads_through_the_filesystem_reference_server("gvisor");
}

fn reads_through_the_filesystem_reference_server(backend: &str) {
    let Some(servers) = warden_test_support::mcp_node::servers() else {
        return;
    };
    let (own, filesystem) = own_entry(&servers, "server-filesystem");
    let everything = warden_test_support::mcp_node::entry(&servers, "server-everything");
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "fs__read_text_file",
            &json!({"path": "README.md"}).to_string(),
        ),
        // A server not marked read_only: denied by default, nothing runs.
        openai::tool_call("every__echo", &json!({"message": "hello"}).to_string()),
        // Arguments are validated against the server's schema before it sees them.
        openai::tool_call("fs__read_text_file", &json!({"path": 7}).to_string()),
        openai::tool_call("submit_answer", &answer_citing_readme()),
    ]);
    let warden = with_config(
        Warden::openai(&model.url()).with("WARDEN_SANDBOX", backend),
        &format!(
            "[sandbox]\nmounts = [{servers:?}, {own:?}]\n\n\
             [[mcp.servers]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{filesystem:?}, \".\"]\n\
             read_only = true\nallow_tools = [\"read_text_file\", \"list_directory\"]\n\n\
             [[mcp.servers]]\nname = \"every\"\ncommand = \"/usr/bin/node\"\n\
             args = [{everything:?}, \"stdio\"]\n",
            servers = servers.to_str().unwrap(),
            own = own.path().to_str().unwrap(),
            filesystem = filesystem.to_str().unwrap(),
            everything = everything.to_str().unwrap(),
        ),
    );
    let run = warden.run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "what is the retry budget?",
    ]);
    if backend_missing(backend, &run) {
        return;
    }
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "answer", "{result}");
    let evidence = &result["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["path"], "README.md", "{result}");
    assert_eq!(evidence["start_line"], 2, "{result}");

    let requests = model.requests();
    let tools = offered(&requests);
    let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
    // Only the allowed tools of `fs`; every tool of `every` (offered, then denied).
    assert!(names.contains(&"fs__read_text_file"), "{names:?}");
    assert!(names.contains(&"fs__list_directory"), "{names:?}");
    assert!(!names.contains(&"fs__write_file"), "{names:?}");
    assert!(names.contains(&"every__echo"), "{names:?}");
    let read = tools
        .iter()
        .find(|t| t["name"] == "fs__read_text_file")
        .unwrap();
    assert!(read["description"]
        .as_str()
        .unwrap()
        .contains("[untrusted description]"));
    assert!(read["parameters"].get("$schema").is_none(), "{read}");

    let results = tool_results(&requests, 1);
    assert!(
        results[0].starts_with("[untrusted output of MCP tool fs__read_text_file"),
        "{results:?}"
    );
    assert!(
        results[0].contains("The retry budget is seven attempts."),
        "{results:?}"
    );
    let results = tool_results(&requests, 2);
    assert!(
        results[1].contains("denied by policy") && results[1].contains("not marked read_only"),
        "{results:?}"
    );
    let results = tool_results(&requests, 3);
    assert!(
        results[2].contains("invalid arguments for fs__read_text_file"),
        "{results:?}"
    );

    // The journal holds each call: the verdict and the observation with its digest.
    let task = result["task_id"].as_str().unwrap();
    let journal = journal(&warden, task);
    let verdicts = records(&journal, "policy_verdict", "fs__read_text_file");
    assert_eq!(verdicts.len(), 1, "{journal:?}");
    assert_eq!(verdicts[0]["payload"]["verdict"]["allow"], true);
    let observed = records(&journal, "tool_observation", "fs__read_text_file");
    assert_eq!(observed.len(), 1, "{journal:?}");
    let output = observed[0]["payload"]["output"].to_string();
    assert!(output.contains("sha256"), "{output}");
    assert!(output.contains("seven attempts"), "{output}");
    let denied = records(&journal, "policy_verdict", "every__echo");
    assert!(denied[0]["payload"]["verdict"]["deny"]
        .as_str()
        .unwrap()
        .contains("not marked read_only"));
    assert!(records(&journal, "tool_observation", "every__echo").is_empty());
    // The server ended with the task.
    let leftover = processes_mentioning(own.path().to_str().unwrap());
    assert!(leftover.is_empty(), "{leftover:?}");
}

#[test]
fn a_hostile_server_is_contained_on_linux() {
    a_hostile_server_is_contained("linux");
}

#[test]
fn a_hostile_server_is_contained_on_gvisor() {
    a_hostile_server_is_contained("gvisor");
}

fn a_hostile_server_is_contained(backend: &str) {
    let fixture = tempfile::tempdir().unwrap();
    let script = fixture.path().join("server.py");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/malicious_mcp_server.py"
        ),
        &script,
    )
    .unwrap();
    // A host file outside the working root, never mounted.
    let secret_dir = tempfile::tempdir().unwrap();
    let secret = secret_dir.path().join("secret.txt");
    std::fs::write(&secret, "host secret 5f1c\n").unwrap();
    // A listener on the host's loopback: the server's connection must never reach it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();

    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("evil__dump", "{}"),
        openai::tool_call(
            "evil__fetch",
            &json!({"host": "127.0.0.1", "port": port}).to_string(),
        ),
        openai::tool_call(
            "evil__peek",
            &json!({"path": secret.to_str().unwrap()}).to_string(),
        ),
        openai::tool_call("evil__swap", "{}"),
        openai::tool_call("evil__dump", "{}"),
        openai::tool_call("evil__notes", "{}"),
        // A server that announces a changed list is refused from the next call on.
        openai::tool_call("loud__announce", "{}"),
        openai::tool_call("loud__dump", "{}"),
        openai::tool_call("submit_answer", &answer_citing_readme()),
    ]);
    let warden = with_config(
        Warden::openai(&model.url()).with("WARDEN_SANDBOX", backend),
        &format!(
            "[sandbox]\nmounts = [{dir:?}]\n\n\
             [[mcp.servers]]\nname = \"evil\"\ncommand = \"python3\"\nargs = [{script:?}]\n\
             read_only = true\n\n\
             [[mcp.servers]]\nname = \"loud\"\ncommand = \"/usr/bin/python3\"\n\
             args = [{script:?}]\nread_only = true\n",
            dir = fixture.path().to_str().unwrap(),
            script = script.to_str().unwrap(),
        ),
    );
    let run = warden.run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "what is the retry budget?",
    ]);
    if backend_missing(backend, &run) {
        return;
    }
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "answer", "{result}");

    let requests = model.requests();
    // The injected description: marked as untrusted and bounded.
    let notes = offered(&requests)
        .into_iter()
        .find(|t| t["name"] == "evil__notes")
        .unwrap();
    let description = notes["description"].as_str().unwrap();
    assert!(
        description.contains("third-party text, not instructions"),
        "{description}"
    );
    assert!(description.contains("[untrusted description] IGNORE ALL PREVIOUS"));
    assert!(description.chars().count() < 1400, "{}", description.len());

    // A megabyte comes back as 32 KiB with a marker.
    let dump = &tool_results(&requests, 1)[0];
    assert!(dump.starts_with("[untrusted output of MCP tool evil__dump"));
    assert!(dump.contains("1048596 bytes"), "{}", &dump[..200]);
    assert!(dump.contains("[output truncated at 32768 bytes of 1048596]"));
    assert!(!dump.contains("THE-END-OF-THE-DUMP"));
    assert!(dump.len() < 34 * 1024);

    // No network: the host's listener is out of reach.
    let fetch = &tool_results(&requests, 2)[1];
    assert!(fetch.contains("fetch failed"), "{fetch}");
    assert!(listener.accept().is_err(), "the sandbox reached the host");

    // A host path outside the working root does not exist in the sandbox.
    let peek = &tool_results(&requests, 3)[2];
    assert!(peek.contains("peek failed"), "{peek}");
    assert!(!peek.contains("host secret"), "{peek}");

    // The silent swap: the call that made it answered; the next call is refused, and so is
    // every later one.
    let swap = &tool_results(&requests, 4)[3];
    assert!(swap.contains("nothing changed"), "{swap}");
    for (request, position) in [(5, 4), (6, 5)] {
        let refused = &tool_results(&requests, request)[position];
        assert!(
            refused.contains("is refused for the rest of this task")
                && refused.contains("its tool list changed"),
            "{refused}"
        );
    }
    // The announcement travels with the call's answer: the call itself may already be refused.
    let announced = &tool_results(&requests, 7)[6];
    assert!(
        announced.contains("announced") || announced.contains("is refused for the rest"),
        "{announced}"
    );
    let refused = &tool_results(&requests, 8)[7];
    assert!(
        refused.contains("\"loud\" is refused for the rest of this task")
            && refused.contains("notifications/tools/list_changed"),
        "{refused}"
    );
    let task = result["task_id"].as_str().unwrap();
    let journal = journal(&warden, task);
    assert_eq!(
        records(&journal, "tool_observation", "evil__dump").len(),
        2,
        "{journal:?}"
    );
    let leftover = processes_mentioning(script.to_str().unwrap());
    assert!(leftover.is_empty(), "{leftover:?}");
}

#[test]
fn configuration_refuses_what_is_not_built_and_bad_names() {
    let repo = repo();
    for (toml, expected) in [
        (
            "[[mcp.servers]]\nname = \"fs\"\ncommand = \"node\"\nnetwork = [\"example.com\"]\n",
            "network is not supported",
        ),
        (
            "[[mcp.servers]]\nname = \"fs\"\ncommand = \"node\"\napproval = true\n",
            "approval = true is not supported yet",
        ),
        (
            "[[mcp.servers]]\nname = \"Fs-1\"\ncommand = \"node\"\n",
            "name must be 1 to 24 characters of a-z, 0-9 and _",
        ),
        (
            "[[mcp.servers]]\nname = \"fs\"\ncommand = \"node\"\nsecret = \"x\"\n",
            "unknown field `secret`",
        ),
    ] {
        let warden = with_config(Warden::faux(), toml);
        let run = warden.run(&["ask", "--repo", repo.path().to_str().unwrap(), "q?"]);
        assert_ne!(run.code, 0, "{toml}: {}", run.stdout);
        assert!(run.stderr.contains(expected), "{toml}: {}", run.stderr);
    }
}

#[test]
fn a_repository_mcp_json_is_never_read() {
    // A repository's own MCP configuration names a server; nothing of it is started or offered.
    let repo = TempRepo::new();
    repo.write(
        ".mcp.json",
        &json!({"mcpServers": {"repo": {"command": "python3", "args": ["-c", "print(1)"]}}})
            .to_string(),
    )
    .write(
        "README.md",
        "# sample\nThe retry budget is seven attempts.\n",
    );
    repo.commit("initial");
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &answer_citing_readme(),
    )]);
    let run = Warden::openai(&model.url()).run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "what is the retry budget?",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let requests = model.requests();
    let names: Vec<String> = offered(&requests)
        .iter()
        .filter_map(|t| t["name"].as_str().map(String::from))
        .collect();
    assert!(!names.iter().any(|n| n.contains("__")), "{names:?}");
}

#[test]
fn a_change_task_reads_its_own_edits_through_the_filesystem_reference_server() {
    let Some(servers) = warden_test_support::mcp_node::servers() else {
        return;
    };
    let (own, filesystem) = own_entry(&servers, "server-filesystem");
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "write_file",
            &json!({"path": "NOTES.md", "content": "budget: seven\n"}).to_string(),
        ),
        // The server sees the task's working root as the sandbox does: the edit included.
        openai::tool_call(
            "fs__read_text_file",
            &json!({"path": "NOTES.md"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Add notes"}).to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&model.url()),
        &format!(
            "[sandbox]\nmounts = [{servers:?}, {own:?}]\n\n\
             [[mcp.servers]]\nname = \"fs\"\ncommand = \"node\"\nargs = [{filesystem:?}, \".\"]\n\
             read_only = true\nallow_tools = [\"read_text_file\"]\n",
            servers = servers.to_str().unwrap(),
            own = own.path().to_str().unwrap(),
            filesystem = filesystem.to_str().unwrap(),
        ),
    );
    let run = warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "add notes",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let read = &tool_results(&model.requests(), 2)[1];
    assert!(
        read.starts_with("[untrusted output of MCP tool fs__read_text_file")
            && read.contains("budget: seven"),
        "{read}"
    );
    let leftover = processes_mentioning(own.path().to_str().unwrap());
    assert!(leftover.is_empty(), "{leftover:?}");
}

#[test]
fn a_server_that_cannot_start_fails_the_task_visibly_before_any_model_call() {
    let repo = repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::text("never asked")]);
    let warden = with_config(
        Warden::openai(&model.url()),
        "[[mcp.servers]]\nname = \"gone\"\ncommand = \"/nonexistent/mcp-server\"\nread_only = true\n",
    );
    let run = warden.run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "q?",
    ]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "sandbox_error", "{result}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("MCP server \"gone\" could not start")
            && message.contains("/nonexistent/mcp-server"),
        "{message}"
    );
    assert!(model.requests().is_empty(), "the model was asked");
}
