//! The risk gate (`[gates]`), as a person and an operator meet it: a change request naming CI
//! workflow configuration waits for an approval bound to the request's hash before anything
//! runs (the scripted model is asked nothing), a wrong hash is refused with nothing run, the
//! right one runs the change; rejecting ends the task with nothing run; a low-risk request runs
//! at once with the decision in the result; the proposal's actual paths are classified again
//! after the run. In-process (`warden run`, `warden approve`/`reject`) and over HTTP
//! (`warden serve`, `POST /v1/approvals/{id}`).

use serde_json::{json, Value};
use warden_test_support::model_server::ScriptedModelServer;

use super::server_harness::{
    call, change_repo, settled, uppercase_beta, Server, Token, ADMIN, ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

/// A request that names CI workflow configuration (high) and asks for the checked edit.
const CI_REQUEST: &str =
    "make beta uppercase in src/lib.txt; the CI in .github/workflows/ci.yml checks it";

/// A model that makes the checked edit and submits it.
fn edit_and_submit() -> ScriptedModelServer {
    ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call(
            "submit_change",
            json!({"summary": "Uppercase beta\n\nThe check wants BETA."}),
        ),
    ])
}

fn with_gates(warden: Warden, gates: &str) -> Warden {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("[gates]\n{gates}"),
    )
    .unwrap();
    warden
}

fn reason_rules(reasons: &Value) -> Vec<String> {
    reasons
        .as_array()
        .unwrap_or_else(|| panic!("no reasons: {reasons}"))
        .iter()
        .map(|r| r["rule"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_ci_request_waits_for_an_approval_of_its_hash_before_anything_runs() {
    let repo = change_repo();
    let model = edit_and_submit();
    let warden = with_gates(
        Warden::openai(&model.url()),
        "high = \"approve_before_run\"\n",
    );
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "--check",
        "bash check.sh",
        CI_REQUEST,
    ]);
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "awaiting_approval", "{result}");
    assert_eq!(result["gate"]["level"], "high");
    assert_eq!(result["gate"]["action"], "approve_before_run");
    assert!(reason_rules(&result["gate"]["reasons"]).contains(&"ci".to_string()));
    let approval = &result["approval"];
    assert_eq!(approval["kind"], "run");
    assert_eq!(approval["status"], "pending");
    assert_eq!(approval["subject_hash"], result["gate"]["request_hash"]);
    assert!(
        run.stderr
            .contains("risk gate (request): high → approve_before_run"),
        "{}",
        run.stderr
    );
    // Nothing ran: the model was asked nothing.
    assert_eq!(model.requests().len(), 0);
    let id = approval["id"].as_str().unwrap().to_string();
    let hash = approval["subject_hash"].as_str().unwrap().to_string();
    let task = result["task_id"].as_str().unwrap().to_string();

    // A wrong (well-formed) hash is refused and nothing runs.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let refused = warden.run(&["approve", &id, "--hash", &wrong]);
    assert_ne!(refused.code, 0, "{}", refused.stdout);
    assert!(refused.stderr.contains("hash"), "{}", refused.stderr);
    assert_eq!(model.requests().len(), 0);
    let shown = warden.run(&["show", &task, "--json"]).json();
    assert_eq!(shown["status"], "waiting_approval", "{shown}");

    // The right hash runs exactly this request: the proposal, with the gate's decision.
    let approved = warden.run(&["approve", &id, "--hash", &hash]);
    assert_eq!(approved.code, 0, "{}\n{}", approved.stdout, approved.stderr);
    assert_eq!(model.requests().len(), 2);
    let shown = warden.run(&["show", &task, "--json"]).json();
    assert_eq!(shown["status"], "completed", "{shown}");
    let result = &shown["result"];
    assert_eq!(result["outcome"], "proposal", "{result}");
    assert_eq!(result["gate"]["approval"]["id"], id.as_str());
    assert_eq!(result["gate"]["approval"]["status"], "approved");
    assert_eq!(result["gate"]["approval"]["decided_by"], "local");
    // The proposal changed src/lib.txt only: low.
    assert_eq!(result["gate"]["proposal"]["level"], "low", "{result}");
    // Approving again is refused: an approval authorises one run.
    let again = warden.run(&["approve", &id, "--hash", &hash]);
    assert_ne!(again.code, 0, "{}", again.stdout);
    assert_eq!(model.requests().len(), 2);
    // The decisions are journaled with the run that made them.
    let logs = warden.run(&["logs", &task, "--json"]);
    assert!(logs.stdout.contains("gate_decided"), "{}", logs.stdout);
}

#[test]
fn rejecting_the_run_approval_ends_the_task_with_nothing_run() {
    let repo = change_repo();
    let model = edit_and_submit();
    let warden = with_gates(
        Warden::openai(&model.url()),
        "high = \"approve_before_run\"\n",
    );
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "--check",
        "bash check.sh",
        CI_REQUEST,
    ]);
    assert_eq!(run.code, 4, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    let id = result["approval"]["id"].as_str().unwrap();
    let task = result["task_id"].as_str().unwrap();
    let rejected = warden.run(&["reject", id]);
    assert_eq!(rejected.code, 0, "{}\n{}", rejected.stdout, rejected.stderr);
    assert!(
        rejected.stdout.contains("nothing run"),
        "{}",
        rejected.stdout
    );
    let shown = warden.run(&["show", task, "--json"]).json();
    assert_eq!(shown["status"], "cancelled", "{shown}");
    assert_eq!(shown["result"]["failure"]["code"], "rejected", "{shown}");
    assert_eq!(shown["result"]["gate"]["approval"]["status"], "rejected");
    assert_eq!(model.requests().len(), 0);
}

#[test]
fn each_policy_action_is_what_the_level_does() {
    let repo = change_repo();
    let path = repo.path().to_str().unwrap();
    // `run` at low: a plain request runs at once, its decision in the result.
    let model = edit_and_submit();
    let warden = with_gates(
        Warden::openai(&model.url()),
        "low = \"run\"\nmedium = \"approve_proposal\"\nhigh = \"approve_before_run\"\n",
    );
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "--check",
        "bash check.sh",
        "make beta uppercase in src/lib.txt",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal");
    assert_eq!(result["gate"]["level"], "low");
    assert_eq!(result["gate"]["action"], "run");
    assert!(result["gate"].get("approval").is_none(), "{result}");
    assert_eq!(model.requests().len(), 2);

    // `approve_proposal` at medium (no checks: nothing proves the change): it runs at once; the
    // proposal reaches a remote only through an approval of its hash.
    let model = edit_and_submit();
    let warden = with_gates(
        Warden::openai(&model.url()),
        "medium = \"approve_proposal\"\nhigh = \"approve_before_run\"\n",
    );
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "make beta uppercase in src/lib.txt",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["gate"]["level"], "medium", "{result}");
    assert_eq!(result["gate"]["action"], "approve_proposal");
    assert_eq!(reason_rules(&result["gate"]["reasons"]), ["checks"]);
    assert_eq!(model.requests().len(), 2);
    // The human-readable result says it too.
    let shown = warden.run(&["show", result["task_id"].as_str().unwrap()]);
    assert!(
        shown
            .stdout
            .contains("Risk gate: medium → approve_proposal"),
        "{}",
        shown.stdout
    );
}

#[test]
fn the_proposal_is_classified_again_from_the_paths_it_changed() {
    // The request looks harmless; the proposal deletes a test and edits the check script.
    let repo = change_repo();
    repo.write("tests/beta_test.sh", "true\n");
    repo.commit("a test");
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("shell", json!({"command": "rm tests/beta_test.sh"})),
        call(
            "submit_change",
            json!({"summary": "Uppercase beta\n\nAnd tidy up."}),
        ),
    ]);
    let warden = with_gates(
        Warden::openai(&model.url()),
        "medium = \"approve_before_run\"\n",
    );
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&[
        "run",
        "--repo",
        path,
        "--json",
        "--check",
        "bash check.sh",
        "make beta uppercase in src/lib.txt",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["gate"]["level"], "low", "{result}");
    let proposal = &result["gate"]["proposal"];
    assert_eq!(proposal["level"], "medium", "{result}");
    assert_eq!(proposal["action"], "approve_before_run");
    assert_eq!(reason_rules(&proposal["reasons"]), ["tests"]);
    let notices = result["notices"].to_string();
    assert!(notices.contains("the proposal is medium risk"), "{notices}");
    assert!(
        run.stderr.contains("risk gate (proposal): medium"),
        "{}",
        run.stderr
    );
}

#[test]
fn over_http_a_ci_request_waits_for_its_run_approval() {
    let repo = change_repo();
    let model = edit_and_submit();
    let warden = with_gates(
        Warden::openai(&model.url()),
        "high = \"approve_before_run\"\n",
    );
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    let id = server.submit_change(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": CI_REQUEST}),
    );
    let task = server.wait_until(ALICE, &id, settled);
    assert_eq!(
        task["status"],
        "waiting_approval",
        "{task}\n{}",
        server.stderr()
    );
    let result = &task["result"];
    assert_eq!(result["outcome"], "awaiting_approval", "{result}");
    assert_eq!(result["gate"]["level"], "high");
    let approval = result["approval"].clone();
    assert_eq!(approval["kind"], "run");
    let approval_id = approval["id"].as_str().unwrap();
    let hash = approval["subject_hash"].as_str().unwrap();
    // The approval is listed like any other, and the decision journaled.
    let pending = server.get(ADMIN, "/v1/approvals?status=pending");
    assert!(pending.to_string().contains(approval_id), "{pending}");
    let journal = server.get(ALICE, &format!("/v1/tasks/{id}/journal"));
    assert!(journal.to_string().contains("gate_decided"), "{journal}");
    assert_eq!(model.requests().len(), 0);

    // A wrong hash is 409 and nothing runs.
    let wrong = format!("sha256:{}", "0".repeat(64));
    let (status, body) = server.request(
        "POST",
        &format!("/v1/approvals/{approval_id}"),
        Some(ADMIN),
        Some(&json!({"decision": "approve", "hash": wrong})),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "hash_mismatch", "{body}");
    // An operator cannot approve.
    let (status, _) = server.request(
        "POST",
        &format!("/v1/approvals/{approval_id}"),
        Some(ALICE),
        Some(&json!({"decision": "approve", "hash": hash})),
    );
    assert_eq!(status, 403);
    assert_eq!(server.task(ALICE, &id)["status"], "waiting_approval");
    assert_eq!(model.requests().len(), 0);

    let (status, body) = server.request(
        "POST",
        &format!("/v1/approvals/{approval_id}"),
        Some(ADMIN),
        Some(&json!({"decision": "approve", "hash": hash})),
    );
    assert_eq!(status, 200, "{body}");
    let task = server.wait_terminal(ALICE, &id);
    assert_eq!(task["status"], "completed", "{task}\n{}", server.stderr());
    assert_eq!(task["result"]["outcome"], "proposal");
    assert_eq!(task["result"]["gate"]["approval"]["status"], "approved");
    assert_eq!(model.requests().len(), 2);
}
