//! The reviewer after a change's checks pass (`[gates] review`), with the scripted model: a
//! change whose checks pass but which deletes a test is sent back with the finding and comes
//! back fixed, the second review passes; a finding citing lines that do not exist is refused
//! and sent back to the reviewer; `block` fails the task with the findings in the result and
//! `warden show`; the rounds cap ends with the findings shown.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{anthropic, Gate, ScriptedModelServer};

use super::server_harness::{call, change_repo, uppercase_beta, Server, Token, ADMIN, ALICE};
use super::support::{proposal_paths, Warden};

/// [`change_repo`] with a test the check does not run.
fn repo_with_test() -> TempRepo {
    let repo = change_repo();
    repo.write("tests/beta_test.sh", "grep -q beta src/lib.txt\n");
    repo.commit("a test");
    repo
}

fn delete_the_test() -> warden_test_support::model_server::Reply {
    call("shell", json!({"command": "rm tests/beta_test.sh"}))
}

fn submit() -> warden_test_support::model_server::Reply {
    call(
        "submit_change",
        json!({"summary": "Uppercase beta\n\nThe check wants BETA."}),
    )
}

fn review(correct: bool, findings: Value) -> warden_test_support::model_server::Reply {
    call(
        "submit_review",
        json!({
            "overall_correctness": if correct { "patch is correct" } else { "patch is incorrect" },
            "explanation": if correct { "Looks right." } else { "A test was deleted." },
            "findings": findings,
        }),
    )
}

fn deleted_test_finding(start: u64, end: u64) -> Value {
    json!([{
        "title": "Restore the deleted test tests/beta_test.sh",
        "body": "The change deletes tests/beta_test.sh; the checks do not run it, so nothing \
                 notices. Put it back (updated for BETA).",
        "priority": 1, "confidence": 0.9,
        "path": "check.sh", "start_line": start, "end_line": end
    }])
}

fn with_review(model: &ScriptedModelServer, gates: &str) -> Warden {
    let warden = Warden::openai(&model.url());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[gates]\n{gates}"),
    )
    .unwrap();
    warden
}

fn run_change(warden: &Warden, repo: &TempRepo) -> super::support::Run {
    warden.run(&[
        "run",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "--check",
        "bash check.sh",
        "make beta uppercase in src/lib.txt",
    ])
}

/// Every message text of a recorded chat completions request, joined.
fn request_text(body: &Value) -> String {
    body["messages"].to_string()
}

#[test]
fn a_deleted_test_is_sent_back_and_comes_back_fixed() {
    let repo = repo_with_test();
    let model = ScriptedModelServer::start_blocking(vec![
        // The implementer: the edit, a deleted test, a submission whose checks pass.
        uppercase_beta(),
        delete_the_test(),
        submit(),
        // The reviewer finds it.
        review(false, deleted_test_finding(1, 1)),
        // The implementer puts the test back, updated, and submits again.
        call(
            "write_file",
            json!({"path": "tests/beta_test.sh", "content": "grep -q BETA src/lib.txt\n"}),
        ),
        submit(),
        // The second review passes.
        review(true, json!([])),
    ]);
    let warden = with_review(&model, "review = \"send_back\"\n");
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    // The proposal is the fixed one: the test is changed, not deleted.
    assert_eq!(
        proposal_paths(&result["proposal"]),
        ["src/lib.txt", "tests/beta_test.sh"]
    );
    let files = result["proposal"]["files"].to_string();
    assert!(!files.contains("deleted"), "{files}");
    let review = &result["review"];
    assert_eq!(review["verdict"], "pass", "{review}");
    assert_eq!(review["rounds"], 2);
    assert_eq!(review["findings"], json!([]));
    assert_eq!(review["model"], "openai:gpt-test");
    // Every call is counted: the reviews' in the task's usage too.
    assert_eq!(review["usage"]["model_calls"], 2);
    assert_eq!(result["usage"]["model_calls"], 7);
    let requests = model.requests();
    assert_eq!(requests.len(), 7);
    // The reviewer saw the request, the diff and the checks, under its own prompt and tools.
    let reviewer = requests[3].body.clone();
    let text = request_text(&reviewer);
    assert!(text.contains("Warden's reviewer"), "{text}");
    assert!(text.contains("deleted file mode"), "{text}");
    assert!(text.contains("bash check.sh"), "{text}");
    let tools = reviewer["tools"].to_string();
    assert!(
        tools.contains("submit_review") && !tools.contains("write_file"),
        "{tools}"
    );
    // The implementer got the finding as its next input.
    let implementer = request_text(&requests[4].body.clone());
    assert!(
        implementer.contains("Restore the deleted test tests/beta_test.sh"),
        "{implementer}"
    );
    // Progress shows each review.
    assert!(run.stderr.contains("review 1: sent_back"), "{}", run.stderr);
    assert!(run.stderr.contains("review 2: pass"), "{}", run.stderr);
    // The ledger knows whose calls they were: five of the implementer, two of the reviewer.
    assert_eq!(
        super::support::ledger_roles(&warden),
        [("agent".to_string(), 5), ("reviewer".to_string(), 2)]
    );
}

#[test]
fn a_finding_citing_lines_that_do_not_exist_is_refused_and_block_fails_the_task() {
    let repo = repo_with_test();
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        delete_the_test(),
        submit(),
        // check.sh has one line: lines 5-9 do not exist.
        review(false, deleted_test_finding(5, 9)),
        review(false, deleted_test_finding(1, 1)),
    ]);
    let warden = with_review(&model, "review = \"block\"\n");
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "failure", "{result}");
    assert_eq!(result["failure"]["code"], "review_blocked", "{result}");
    let review = &result["review"];
    assert_eq!(review["verdict"], "blocked");
    let finding = &review["findings"][0];
    assert_eq!(finding["priority"], 1);
    assert_eq!(finding["location"]["path"], "check.sh");
    assert_eq!(finding["location"]["start_line"], 1);
    // The refused location went back to the reviewer, saying why.
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    let retry = request_text(&requests[4].body.clone());
    assert!(retry.contains("end_line 9 is past the end"), "{retry}");
    // `warden show` prints the findings.
    let shown = warden.run(&["show", result["task_id"].as_str().unwrap()]);
    assert!(
        shown.stdout.contains("Review: blocked after 1 round"),
        "{}",
        shown.stdout
    );
    assert!(
        shown
            .stdout
            .contains("[P1] Restore the deleted test tests/beta_test.sh — check.sh:1"),
        "{}",
        shown.stdout
    );
}

#[test]
fn the_rounds_cap_ends_with_the_findings_shown() {
    let repo = repo_with_test();
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        delete_the_test(),
        submit(),
        review(false, deleted_test_finding(1, 1)),
        // The implementer does not fix it; the second review finds it again: blocked.
        submit(),
        review(false, deleted_test_finding(1, 1)),
    ]);
    let warden = with_review(&model, "review = \"send_back\"\nreview_rounds = 1\n");
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["failure"]["code"], "review_blocked", "{result}");
    assert_eq!(result["review"]["rounds"], 2);
    assert_eq!(result["review"]["verdict"], "blocked");
    assert_eq!(result["review"]["findings"].as_array().unwrap().len(), 1);
    assert_eq!(model.requests().len(), 6);
}

#[test]
fn report_shows_findings_without_blocking_and_low_priorities_never_block() {
    let repo = repo_with_test();
    let mut nit = deleted_test_finding(1, 1);
    nit[0]["priority"] = json!(3);
    let model =
        ScriptedModelServer::start_blocking(vec![uppercase_beta(), submit(), review(true, nit)]);
    let warden = with_review(&model, "review = \"send_back\"\n");
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal");
    assert_eq!(result["review"]["verdict"], "pass");
    assert_eq!(result["review"]["findings"][0]["priority"], 3);

    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        submit(),
        review(false, deleted_test_finding(1, 1)),
    ]);
    let warden = with_review(&model, "review = \"report\"\n");
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal");
    assert_eq!(result["review"]["verdict"], "reported");
}

/// `repo_with_test` plus a commit that makes beta uppercase and deletes the test: what
/// `warden review` is asked about.
fn range_repo() -> TempRepo {
    let repo = repo_with_test();
    repo.write("src/lib.txt", "alpha\nBETA\ngamma\n");
    repo.git(&["rm", "-q", "tests/beta_test.sh"]);
    repo.commit("Uppercase beta");
    repo
}

#[test]
fn warden_review_prints_checked_findings_on_a_commit_range() {
    let repo = range_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        // A location past the end of check.sh is refused and sent back; then a valid one.
        review(false, deleted_test_finding(5, 9)),
        review(false, deleted_test_finding(1, 1)),
    ]);
    let warden = Warden::openai(&model.url());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["review", "--repo", path, "HEAD~1..HEAD"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("Review: blocked"), "{}", run.stdout);
    assert!(
        run.stdout
            .contains("[P1] Restore the deleted test tests/beta_test.sh — check.sh:1"),
        "{}",
        run.stdout
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let asked = request_text(&requests[0].body);
    assert!(asked.contains("Uppercase beta"), "{asked}");
    assert!(asked.contains("deleted file mode"), "{asked}");
    assert!(
        request_text(&requests[1].body).contains("end_line 9 is past the end"),
        "{}",
        request_text(&requests[1].body)
    );

    // --json: the same review, its location pinned to the reviewed commit.
    let model =
        ScriptedModelServer::start_blocking(vec![review(false, deleted_test_finding(1, 1))]);
    let warden = Warden::openai(&model.url());
    let run = warden.run(&["review", "--repo", path, "--json", "HEAD~1..HEAD"]);
    assert_eq!(run.code, 1, "{}\n{}", run.stdout, run.stderr);
    let report = run.json();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let base = repo.git(&["rev-parse", "HEAD~1"]);
    assert_eq!(report["head"], head.trim());
    assert_eq!(report["base"], base.trim());
    assert_eq!(report["review"]["verdict"], "blocked");
    assert_eq!(
        report["review"]["findings"][0]["location"]["commit"],
        head.trim()
    );
}

#[test]
fn warden_review_reviews_a_tasks_proposal_and_refuses_bad_targets() {
    let repo = repo_with_test();
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        submit(),
        review(true, json!([])),
    ]);
    let warden = Warden::openai(&model.url());
    let run = run_change(&warden, &repo);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert!(
        result.get("review").is_none(),
        "review is off by default: {result}"
    );
    let task = result["task_id"].as_str().unwrap();
    let reviewed = warden.run(&["review", task, "--json"]);
    assert_eq!(reviewed.code, 0, "{}\n{}", reviewed.stdout, reviewed.stderr);
    let report = reviewed.json();
    assert_eq!(report["task"], task);
    assert_eq!(report["head"], result["proposal"]["commit"]);
    assert_eq!(report["review"]["verdict"], "pass");
    // The reviewer saw the task's request and the checks that passed.
    let asked = request_text(&model.requests()[2].body);
    assert!(asked.contains("make beta uppercase"), "{asked}");
    assert!(asked.contains("bash check.sh"), "{asked}");

    let path = repo.path().to_str().unwrap();
    // Usage errors (an unknown task too) exit 2.
    let cases: [(Vec<&str>, i32, &str); 3] = [
        (vec!["review", "HEAD~1..HEAD"], 2, "needs --repo"),
        (
            vec!["review", "--repo", path, "nosuchbranch..HEAD"],
            2,
            "is not a commit",
        ),
        (
            vec!["review", "tsk_01M8VBQV37BCXJMMGC5Y911W99"],
            2,
            "no task",
        ),
    ];
    for (args, code, says) in cases {
        let refused = warden.run(&args);
        assert_eq!(
            refused.code, code,
            "{args:?}: {}\n{}",
            refused.stdout, refused.stderr
        );
        assert!(
            refused.stderr.contains(says),
            "{args:?}: {}",
            refused.stderr
        );
    }
    assert_eq!(model.requests().len(), 3);
}

/// `submit_review` over the Anthropic wire: a separate reviewer model's reply.
fn anthropic_review(correct: bool, findings: Value) -> warden_test_support::model_server::Reply {
    anthropic::tool_use(
        "submit_review",
        json!({
            "overall_correctness": if correct { "patch is correct" } else { "patch is incorrect" },
            "explanation": if correct { "Looks right." } else { "A test was deleted." },
            "findings": findings,
        }),
    )
}

/// A separate reviewer model (`[roles] reviewer`, another provider and server) and a `kill -9`
/// while it reviews the second round: the resumed run replays the implementer's and the
/// reviewer's journaled decisions in journal order, asks each model only for what was never
/// decided, and ends in one outcome.
#[test]
fn a_kill_9_during_a_separate_reviewers_round_replays_both_models_and_pays_neither_again() {
    const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
    let repo = repo_with_test();
    let implementer = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        delete_the_test(),
        submit(),
        call(
            "write_file",
            json!({"path": "tests/beta_test.sh", "content": "grep -q BETA src/lib.txt\n"}),
        ),
        submit(),
    ]);
    let held = Gate::new();
    let reviewer = ScriptedModelServer::start_blocking(vec![
        anthropic_review(false, deleted_test_finding(1, 1)),
        // Held: the server is killed while the second review waits for this decision.
        anthropic_review(true, json!([])).held(&held),
        // The resumed run asks for that decision again, and only for it.
        anthropic_review(true, json!([])),
    ]);
    let warden = Warden::openai(&implementer.url())
        .with("ANTHROPIC_BASE_URL", &reviewer.url())
        .with("ANTHROPIC_API_KEY", "sk-ant-test");
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[serve]\nworkers = 1\nlease_secs = 1\n\n[gates]\nreview = \"send_back\"\n\n\
         [roles]\nreviewer = \"anthropic:claude-review\"\n",
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    let id = server.submit_change(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase in src/lib.txt"}),
    );
    let deadline = Instant::now() + Duration::from_secs(120);
    while reviewer.requests().len() < 2 {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    held.open();
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_for(ALICE, &id, &["completed", "failed", "waiting_approval"]);
    let result = &task["result"];
    assert_eq!(result["outcome"], "proposal", "{task}\n{}", server.stderr());
    assert_eq!(result["review"]["verdict"], "pass", "{result}");
    assert_eq!(result["review"]["rounds"], 2, "{result}");
    assert_eq!(
        result["review"]["model"], "anthropic:claude-review",
        "{result}"
    );
    assert_eq!(
        proposal_paths(&result["proposal"]),
        ["src/lib.txt", "tests/beta_test.sh"]
    );
    // The implementer's five decisions were all journaled before the kill: none asked again.
    assert_eq!(implementer.requests().len(), 5);
    // The reviewer: two before the kill, then only the one never journaled.
    let asked = reviewer.requests();
    assert_eq!(asked.len(), 3, "{asked:#?}");
    assert_eq!(
        asked[2].body["messages"], asked[1].body["messages"],
        "the resumed reviewer asks what the killed one asked"
    );
    server.terminate();
}

/// `warden review TASK` against a server: the task's proposal comes from the server (its bundle,
/// unpacked beside the user's clone), the reviewer runs here with this machine's model, its
/// findings are checked against the proposal's tree, and the user's clone is not touched.
#[test]
fn warden_review_reviews_a_servers_task_with_the_local_model() {
    const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
    let repo = repo_with_test();
    let implementer =
        ScriptedModelServer::start_blocking(vec![uppercase_beta(), delete_the_test(), submit()]);
    let warden = Warden::openai(&implementer.url());
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    let id = server.submit_change(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase in src/lib.txt"}),
    );
    let task = server.wait_for(ALICE, &id, &["completed", "failed"]);
    assert_eq!(task["result"]["outcome"], "proposal", "{task}");
    let commit = task["result"]["proposal"]["commit"]
        .as_str()
        .unwrap()
        .to_string();

    let reviewer = ScriptedModelServer::start_blocking(vec![
        // A location past the end of check.sh goes back to the reviewer, then a good one.
        review(false, deleted_test_finding(1, 99)),
        review(false, deleted_test_finding(1, 1)),
    ]);
    let refs_before = repo.git(&["for-each-ref"]);
    let client = server
        .client(ALICE)
        .with("WARDEN_MODEL", "openai:gpt-test")
        .with("OPENAI_BASE_URL", &format!("{}/v1", reviewer.url()))
        .with("OPENAI_API_KEY", "sk-test-key");
    let path = repo.path().to_str().unwrap();
    let reviewed = client.run(&["review", &id, "--repo", path, "--json"]);
    assert_eq!(reviewed.code, 1, "{}\n{}", reviewed.stdout, reviewed.stderr);
    let report = reviewed.json();
    assert_eq!(report["task"], id.as_str());
    assert_eq!(report["head"], commit.as_str());
    assert_eq!(report["review"]["verdict"], "blocked", "{report}");
    let finding = &report["review"]["findings"][0];
    assert_eq!(finding["location"]["commit"], commit.as_str());
    assert_eq!(finding["location"]["end_line"], 1);
    // The reviewer saw the server's request, the diff deleting the test, and the checks.
    let asked = request_text(&reviewer.requests()[0].body);
    assert!(asked.contains("make beta uppercase"), "{asked}");
    assert!(asked.contains("deleted file mode"), "{asked}");
    assert!(asked.contains("bash check.sh"), "{asked}");
    assert_eq!(reviewer.requests().len(), 2);
    // The implementer's model was never asked to review.
    assert_eq!(implementer.requests().len(), 3);
    assert_eq!(repo.git(&["for-each-ref"]), refs_before);

    // A clone without the proposal's base is told so.
    let stranger = TempRepo::new();
    stranger.write("x", "x\n");
    stranger.commit("unrelated");
    let refused = client.run(&["review", &id, "--repo", stranger.path().to_str().unwrap()]);
    assert_eq!(refused.code, 2, "{}\n{}", refused.stdout, refused.stderr);
    assert!(refused.stderr.contains("base"), "{}", refused.stderr);
    server.terminate();
}
