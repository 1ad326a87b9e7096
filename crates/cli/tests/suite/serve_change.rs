//! Change tasks on `warden serve` workers, as a user runs them: the real binary, a registered
//! repository with its check command, tasks submitted over HTTP, the scripted model editing
//! files and calling `submit_change`. Covers the checked proposal in the mirror, the redacted
//! diff route, sensitive files (`.env`) flagged with a `publish_sensitive` approval bound to the
//! proposal hash, a clarification answered over the API and the change finished with the
//! exchange, a change resumed after `kill -9` (journaled decisions replayed, the edits
//! re-executed into a fresh view), and the same sensitive-file rule in the in-process
//! `warden run`.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::ScriptedModelServer;

use super::server_harness::{
    call, change_repo, open_store, settled, uppercase_beta, Server, Token, ADMIN, ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
/// What `Warden::openai` sets as the model API key: a registered secret.
const MODEL_KEY: &str = "sk-test-key";
const GITHUB_TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

/// `warden serve` for `warden` with `repo` registered as `app`, checked by `bash check.sh`
/// (passes only once `beta` is `BETA`), and alice's change task `body` submitted to it: the
/// server and the task id.
fn serve_with_task(warden: &Warden, repo: &TempRepo, body: &Value) -> (Server, String) {
    let server = Server::start(warden, TOKENS);
    server.register_with_checks("app", repo, &["bash check.sh"]);
    let id = server.submit_change(ALICE, body);
    (server, id)
}

/// Every tool result the model saw in its last request, for assertion messages.
fn transcript(server: &ScriptedModelServer) -> String {
    server
        .requests()
        .last()
        .and_then(|r| r.body["messages"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect::<Vec<_>>()
        .join("\n----\n")
}

#[test]
fn serve_runs_a_change_to_a_checked_proposal_and_shows_its_diff() {
    let repo = change_repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    // The registered repository's check: passes only with the edit.
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase"}),
    );
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "completed",
        "{task}\n{}\n{}",
        transcript(&model),
        server.stderr()
    );
    let result = &task["result"];
    assert_eq!(result["task_id"], id.as_str());
    assert_eq!(result["kind"], "change");
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(result["publication"]["status"], "not_requested");
    assert!(result.get("approval").is_none(), "{result}");
    let proposal = &result["proposal"];
    assert_eq!(proposal["base_commit"], base.as_str());
    assert_eq!(
        proposal["ref"],
        format!("refs/warden/proposals/{id}").as_str()
    );
    assert!(proposal.get("sensitive_files").is_none(), "{proposal}");
    let validations = proposal["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 1, "{proposal}");
    assert_eq!(validations[0]["command"], "bash check.sh");
    assert_eq!(validations[0]["exit_code"], 0);
    assert_eq!(validations[0]["tree"], proposal["tree"]);
    assert_eq!(task["repos"][0]["commit"], base.as_str());

    // The diff route shows exactly the change, from the mirror.
    let diff = server.get(ALICE, &format!("/v1/tasks/{id}/diff"));
    assert_eq!(diff["commit"], proposal["commit"]);
    assert_eq!(diff["hash"], proposal["hash"]);
    let text = diff["diff"].as_str().unwrap();
    assert!(
        text.contains("diff --git a/src/lib.txt b/src/lib.txt"),
        "{text}"
    );
    assert!(text.contains("-beta\n+BETA\n"), "{text}");
    assert_eq!(text.matches("diff --git").count(), 1, "{text}");
    server.terminate();
}

/// Regression: `warden apply` with `WARDEN_SERVER` set told the user to set `WARDEN_SERVER`.
/// It now fetches the proposal as a bundle (`GET /v1/tasks/{id}/proposal`) into the user's
/// clone as a branch, exactly as in-process: work tree, index and `HEAD` untouched, an existing
/// branch never moved, and a clone without the base commit told to fetch it.
#[test]
fn warden_apply_against_a_server_fetches_the_proposal_into_a_clone() {
    let repo = change_repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase"}),
    );
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
    let commit = task["result"]["proposal"]["commit"]
        .as_str()
        .unwrap()
        .to_string();

    // The user's own clone, elsewhere: it has the base commit, not the proposal.
    let user = tempfile::tempdir().unwrap();
    let clone = user.path().join("app");
    repo.git(&[
        "clone",
        "-q",
        repo.path().to_str().unwrap(),
        clone.to_str().unwrap(),
    ]);
    let in_clone = |args: &[&str]| {
        let mut full = vec!["-C", clone.to_str().unwrap()];
        full.extend_from_slice(args);
        repo.git(&full)
    };
    let head_before = in_clone(&["rev-parse", "HEAD"]);
    let client = server.client(ALICE);
    let applied = client.run(&["apply", &id, "--repo", clone.to_str().unwrap()]);
    server.expect(&applied, 0);
    let branch = format!("warden/{id}");
    assert_eq!(in_clone(&["rev-parse", &branch]), commit);
    assert_eq!(in_clone(&["rev-parse", "HEAD"]), head_before);
    assert_eq!(in_clone(&["status", "--porcelain"]), "");
    assert_eq!(
        in_clone(&["show", &format!("{branch}:src/lib.txt")]),
        "alpha\nBETA\ngamma"
    );
    assert!(
        applied
            .stdout
            .contains(&format!("created branch {branch} at {commit}")),
        "{}",
        applied.stdout
    );
    // Again: already there. Another existing branch is refused (exit 2) and left where it was.
    server.expect(
        &client.run(&["apply", &id, "--repo", clone.to_str().unwrap()]),
        0,
    );
    in_clone(&["branch", "taken", &base]);
    let refused = client.run(&[
        "apply",
        &id,
        "--repo",
        clone.to_str().unwrap(),
        "--branch",
        "taken",
    ]);
    server.expect(&refused, 2);
    assert_eq!(in_clone(&["rev-parse", "taken"]), base);

    // A repository without the base commit is told to fetch it; nothing is written.
    let empty = user.path().join("empty");
    repo.git(&["init", "-q", empty.to_str().unwrap()]);
    let lacking = client.run(&["apply", &id, "--repo", empty.to_str().unwrap()]);
    server.expect(&lacking, 2);
    assert!(
        lacking
            .stderr
            .contains(&format!("does not hold the proposal's base commit {base}")),
        "{}",
        lacking.stderr
    );

    // Like every task route, it needs a valid token.
    let (status, _) = server.request(
        "GET",
        &format!("/v1/tasks/{id}/proposal"),
        Some("nobody"),
        None,
    );
    assert_eq!(status, 401);
    server.terminate();
}

#[test]
fn a_change_touching_env_waits_for_a_publish_sensitive_approval_and_its_diff_is_redacted() {
    let repo = change_repo();
    // Publication needs a remote to push to; without one `publish` is refused at submission.
    repo.git(&["remote", "add", "origin", "https://example.invalid/app.git"]);
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "write_file",
            json!({"path": ".env",
                   "content": format!("OPENAI_API_KEY={MODEL_KEY}\nGH_TOKEN={GITHUB_TOKEN}\n")}),
        ),
        call(
            "write_file",
            json!({"path": "notes.txt",
                   "content": format!("key {MODEL_KEY} token {GITHUB_TOKEN}\n")}),
        ),
        call(
            "submit_change",
            json!({"summary": "Add the environment file"}),
        ),
    ]);
    let warden = Warden::openai(&model.url());
    // The task's own check replaces the registered one (which would fail: no BETA).
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "add a .env",
                "checks": ["test -s .env"], "publish": true}),
    );
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "waiting_approval",
        "{task}\n{}\n{}",
        transcript(&model),
        server.stderr()
    );
    let result = &task["result"];
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(result["publication"]["status"], "awaiting_approval");
    assert_eq!(
        result["publication"]["branch"],
        format!("warden/{id}").as_str()
    );
    let proposal = &result["proposal"];
    assert_eq!(proposal["sensitive_files"], json!([".env"]));
    assert_eq!(proposal["validations"][0]["command"], "test -s .env");
    assert_eq!(proposal["validations"][0]["exit_code"], 0);
    let approval = &result["approval"];
    assert_eq!(approval["kind"], "publish_sensitive", "{result}");
    assert_eq!(approval["subject_hash"], proposal["hash"]);
    assert_eq!(approval["status"], "pending");
    let notices = result["notices"].to_string();
    assert!(notices.contains(".env (environment file)"), "{notices}");
    // Neither secret is anywhere in what the API shows.
    let shown = task.to_string();
    assert!(!shown.contains(MODEL_KEY), "{shown}");

    let diff = server.get(ALICE, &format!("/v1/tasks/{id}/diff"));
    let text = diff["diff"].as_str().unwrap();
    assert!(text.contains("+++ b/.env"), "{text}");
    assert!(text.contains("+OPENAI_API_KEY=[redacted]"), "{text}");
    assert!(text.contains("+GH_TOKEN=[redacted]"), "{text}");
    // Outside the sensitive file: the model key (registered) and the token (its shape).
    assert!(
        text.contains("+key [redacted] token [redacted]\n"),
        "{text}"
    );
    assert!(
        !text.contains(MODEL_KEY) && !text.contains(GITHUB_TOKEN),
        "{text}"
    );
    assert_eq!(diff["sensitive_files"], json!([".env"]));
    // `warden diff` over the server shows the same redacted text, with the stat.
    let client = server.client(ALICE);
    let shown = client.run(&["diff", &id]);
    server.expect(&shown, 0);
    assert!(
        shown.stdout.contains("+OPENAI_API_KEY=[redacted]"),
        "{}",
        shown.stdout
    );
    assert!(shown.stdout.contains("! .env"), "{}", shown.stdout);
    assert!(shown.stdout.contains("2 files changed"), "{}", shown.stdout);
    assert!(!shown.stdout.contains(MODEL_KEY), "{}", shown.stdout);
    let as_json = client.run(&["diff", &id, "--json"]);
    server.expect(&as_json, 0);
    assert_eq!(as_json.json()["diff"], diff["diff"]);
    // Raw objects cannot be redacted: the proposal is not served as a bundle.
    let (status, body) = server.request(
        "GET",
        &format!("/v1/tasks/{id}/proposal"),
        Some(ALICE),
        None,
    );
    assert_eq!(status, 403, "{body}");
    assert!(
        body.to_string().contains("sensitive files (.env)"),
        "{body}"
    );
    let clone = tempfile::tempdir().unwrap();
    repo.git(&[
        "clone",
        "-q",
        repo.path().to_str().unwrap(),
        clone.path().join("app").to_str().unwrap(),
    ]);
    let refused = client.run(&[
        "apply",
        &id,
        "--repo",
        clone.path().join("app").to_str().unwrap(),
    ]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(
        refused.stderr.contains("sensitive files"),
        "{}",
        refused.stderr
    );
    assert!(!refused.stderr.contains(MODEL_KEY), "{}", refused.stderr);
    server.terminate();

    // The store holds the approval, bound to the proposal hash, pending.
    let (runtime, store) = open_store(&warden);
    let stored = runtime
        .block_on(store.get_approval(approval["id"].as_str().unwrap()))
        .unwrap()
        .expect("the approval is in the store");
    assert_eq!(stored.kind, "publish_sensitive");
    assert_eq!(stored.subject_hash, proposal["hash"].as_str().unwrap());
    assert_eq!(stored.task.as_str(), id);
    assert_eq!(stored.status, warden_store::ApprovalStatus::Pending);
}

#[test]
fn warden_run_flags_sensitive_files_the_same_way() {
    let repo = change_repo();
    // Publication needs a remote to push to; without one `publish` is refused at submission.
    repo.git(&["remote", "add", "origin", "https://example.invalid/app.git"]);
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "write_file",
            json!({"path": ".github/workflows/ci.yml", "content": "on: push\n"}),
        ),
        uppercase_beta(),
        call("submit_change", json!({"summary": "CI and BETA"})),
        // The second run: no sensitive file.
        uppercase_beta(),
        call("submit_change", json!({"summary": "BETA"})),
    ]);
    let warden = Warden::openai(&model.url());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "--check",
        "bash check.sh",
        "--publish",
        "change it",
    ]);
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(
        result["proposal"]["sensitive_files"],
        json!([".github/workflows/ci.yml"])
    );
    assert_eq!(result["approval"]["kind"], "publish_sensitive");
    assert_eq!(
        result["approval"]["subject_hash"],
        result["proposal"]["hash"]
    );
    assert!(
        result["notices"]
            .to_string()
            .contains(".github/workflows/ci.yml (CI configuration)"),
        "{result}"
    );

    // Without sensitive files, the same flags ask for a plain publish approval.
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--check",
        "bash check.sh",
        "--publish",
        "change it",
    ]);
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("approval (publish)"), "{}", run.stdout);
    assert!(!run.stdout.contains("sensitive files"), "{}", run.stdout);
}

#[test]
fn a_change_interrupted_by_a_crash_is_rebuilt_from_its_journal_by_the_next_run() {
    let repo = change_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        // The server dies while the model thinks about its second decision.
        call("submit_change", json!({"summary": "Make beta uppercase"})).delayed(10_000),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase"}),
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();

    let server = Server::start(&warden, TOKENS);
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "completed",
        "{task}\n{}\n{}",
        transcript(&model),
        server.stderr()
    );
    assert_eq!(task["runs"], 2);
    // The edit was not asked of the model again: it was replayed from the journal and
    // executed anew, so the proposal carries it and the check passes on it.
    assert_eq!(model.requests().len(), 3);
    let proposal = &task["result"]["proposal"];
    assert_eq!(proposal["validations"][0]["exit_code"], 0, "{proposal}");
    let diff = server.get(ALICE, &format!("/v1/tasks/{id}/diff"));
    assert!(
        diff["diff"].as_str().unwrap().contains("-beta\n+BETA\n"),
        "{diff}"
    );
    server.terminate();
}

#[test]
fn a_change_that_asks_waits_for_input_and_an_answer_resumes_it_with_the_exchange() {
    let repo = change_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call("ask_user", json!({"question": "Which word should change?"})),
        uppercase_beta(),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "uppercase a word"}),
    );
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "waiting_input",
        "{task}\n{}",
        server.stderr()
    );
    assert_eq!(task["result"]["outcome"], "clarification");
    assert_eq!(
        task["result"]["clarification"]["question"],
        "Which word should change?"
    );

    let (status, body) = server.request(
        "POST",
        &format!("/v1/tasks/{id}/messages"),
        Some(ALICE),
        Some(&json!({"text": "beta"})),
    );
    assert_eq!(status, 202, "{body}");
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "completed",
        "{task}\n{}\n{}",
        transcript(&model),
        server.stderr()
    );
    assert_eq!(task["result"]["outcome"], "proposal");
    // The second run started from the request, the question and the answer, in that order.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tail: Vec<(&str, &str)> = messages
        .iter()
        .skip(1)
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        tail,
        [
            ("user", "uppercase a word"),
            ("assistant", "Which word should change?"),
            ("user", "beta"),
        ]
    );
    server.terminate();
}

/// A change is continued the same way with and without a server: `warden run --follow-up`
/// (here with `--server`) starts from the earlier proposal and runs the checks it is given.
#[test]
fn a_served_change_follow_up_builds_on_the_proposal_with_new_checks() {
    let repo = change_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "gamma", "new": "GAMMA"}),
        ),
        call(
            "submit_change",
            json!({"summary": "Make gamma uppercase too"}),
        ),
    ]);
    let warden = Warden::openai(&model.url());
    let (server, id) = serve_with_task(
        &warden,
        &repo,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase"}),
    );
    let first = server.wait_until(ALICE, &id, settled);
    assert_eq!(first["status"], "completed", "{first}\n{}", server.stderr());
    let proposal = first["result"]["proposal"]["commit"]
        .as_str()
        .unwrap()
        .to_string();

    let client = server.client(ALICE);
    let more = client.run(&[
        "run",
        "--follow-up",
        &id,
        "--check",
        "grep -q GAMMA src/lib.txt",
        "--json",
        "gamma too",
    ]);
    server.expect(&more, 0);
    let result = more.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    // On the earlier proposal, checked by the new check only.
    assert_eq!(result["proposal"]["base_commit"], proposal.as_str());
    let validations = result["proposal"]["validations"].as_array().unwrap();
    assert_eq!(validations.len(), 1, "{result}");
    assert_eq!(validations[0]["command"], "grep -q GAMMA src/lib.txt");
    let task = server.get(
        ALICE,
        &format!("/v1/tasks/{}", result["task_id"].as_str().unwrap()),
    );
    assert_eq!(task["follow_up_to"], id.as_str());
    // The model saw the earlier request and its reply before the new request.
    let seen = model.requests().last().unwrap().body["messages"].to_string();
    assert!(seen.contains("make beta uppercase"), "{seen}");
    assert!(seen.contains("gamma too"), "{seen}");
    server.terminate();
}
