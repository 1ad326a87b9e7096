//! Task control against the real `warden serve` (linux sandbox, scripted model over HTTP):
//! a clarification answered over `POST /v1/tasks/{id}/messages` resumes the conversation with
//! the question and the answer in front of the model; cancelling a running task stops it and
//! kills its sandboxed command; retrying a failed task runs it again as a new task over the
//! same pinned commit.

#![allow(clippy::disallowed_methods)] // the tests run pgrep

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, RecordedRequest, ScriptedModelServer};

use super::server_harness::{
    open_store, queue_question, runtime, sample_repo, submit_answer, PgSchema, Server, Token,
    Worker, ALICE,
};
use super::support::Warden;

/// Alice is the admin: she registers the repository and cancels.
const TOKENS: &[Token] = &[("alice", "admin", ALICE)];

/// The `(role, content)` of every message of a recorded chat completion request.
fn messages(request: &RecordedRequest) -> Vec<(String, String)> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                match &m["content"] {
                    Value::String(text) => text.clone(),
                    other => other.to_string(),
                },
            )
        })
        .collect()
}

#[test]
fn an_answered_clarification_resumes_the_conversation_with_question_and_answer() {
    let repo = sample_repo();
    let question = "Do you mean the retry in the client or in the worker?";
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("ask_user", &json!({ "question": question }).to_string()),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "how does the retry work?");
    let task = server.wait_for(ALICE, &id, &["waiting_input", "completed", "failed"]);
    assert_eq!(task["status"], "waiting_input", "{task}");
    assert_eq!(task["result"]["outcome"], "clarification", "{task}");
    assert_eq!(task["result"]["clarification"]["question"], question);
    assert_eq!(model.requests().len(), 1);

    let (status, body) = server.request(
        "POST",
        &format!("/v1/tasks/{id}/messages"),
        Some(ALICE),
        Some(&json!({"text": "The one in the client, please."})),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], id.as_str());
    let task = server.wait_terminal(ALICE, &id);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["runs"], 2);
    assert_eq!(task["result"]["outcome"], "answer", "{task}");

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let resumed = messages(&requests[1]);
    let position = |role: &str, text: &str| {
        resumed
            .iter()
            .position(|(r, c)| r == role && c.contains(text))
            .unwrap_or_else(|| panic!("no {role} message with {text:?} in {resumed:?}"))
    };
    let prompt = position("user", "how does the retry work?");
    let asked = position("assistant", question);
    let answered = position("user", "The one in the client, please.");
    assert!(prompt < asked && asked < answered, "{resumed:?}");
    assert_eq!(
        answered,
        resumed.len() - 1,
        "the answer is what the run answers"
    );
    server.terminate();
}

/// Whether a process whose command line contains `marker` runs on this machine.
fn process_running(marker: &str) -> bool {
    let output = Command::new("pgrep").args(["-f", marker]).output().unwrap();
    output.status.success()
}

/// Waits until a process whose command line contains `marker` is `running` (or gone); after
/// `within`, panics with `failure()`.
fn wait_for_process(marker: &str, running: bool, within: Duration, failure: impl Fn() -> String) {
    let deadline = Instant::now() + within;
    while process_running(marker) != running {
        assert!(Instant::now() < deadline, "{}", failure());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A model whose one decision runs `sleep` for minutes under a marker no other test uses, so
/// pgrep sees only this command (`lead` and `fraction` tell the tests' markers apart): the
/// marker and the model.
fn sleeping_model(lead: u32, fraction: u32) -> (String, ScriptedModelServer) {
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).unwrap();
    let marker = format!(
        "sleep {lead}{}.{fraction}",
        u32::from_le_bytes(random) % 1000
    );
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "shell",
        &json!({"command": marker, "timeout_ms": 300_000}).to_string(),
    )]);
    (marker, model)
}

#[test]
fn cancelling_a_running_task_stops_it_and_kills_its_sandboxed_command() {
    let repo = sample_repo();
    let (marker, model) = sleeping_model(7, 123);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "what does sleeping do?");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !process_running(&marker) {
        let task = server.task(ALICE, &id);
        assert!(
            Instant::now() < deadline && task["status"] != "failed",
            "the command never started: {task}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.task(ALICE, &id)["status"], "running");

    let (status, body) =
        server.request("POST", &format!("/v1/tasks/{id}/cancel"), Some(ALICE), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(body["result"]["failure"]["code"], "cancelled", "{body}");
    // The sandboxed command dies long before its own timeout (generous bound, not a timing
    // assertion: it would otherwise live for minutes).
    wait_for_process(&marker, false, Duration::from_secs(30), || {
        format!(
            "the sandboxed command survived the cancellation\n{}",
            server.stderr()
        )
    });
    // The run winds down without overwriting the cancellation; cancelling again conflicts.
    std::thread::sleep(Duration::from_secs(2));
    let task = server.task(ALICE, &id);
    assert_eq!(task["status"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["code"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["message"], "cancelled by alice");
    let (status, body) =
        server.request("POST", &format!("/v1/tasks/{id}/cancel"), Some(ALICE), None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("conflict"))
    );
    assert_eq!(model.requests().len(), 1, "no model call after the cancel");
    server.terminate();

    let (runtime, store) = open_store(&warden);
    let task_id: warden_protocol::TaskId = id.parse().unwrap();
    let runs = runtime.block_on(store.list_runs(&task_id)).unwrap();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].outcome.as_deref(), Some("cancelled"));
    let events = runtime
        .block_on(store.events_after(&warden_store::EventStream::Task(task_id), 0, 1000))
        .unwrap();
    let finished: Vec<_> = events
        .iter()
        .filter(|e| matches!(e.event, warden_protocol::Event::TaskFinished { .. }))
        .collect();
    assert_eq!(finished.len(), 1, "{events:?}");
    assert!(matches!(
        finished[0].event,
        warden_protocol::Event::TaskFinished {
            status: warden_protocol::TaskStatus::Cancelled,
            ..
        }
    ));
}

#[test]
fn retrying_a_failed_task_runs_a_new_task_over_the_same_commit() {
    let repo = sample_repo();
    let pinned = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(vec![
        openai::error(
            400,
            "invalid_request_error",
            None,
            "this request cannot be served",
        ),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "how does the retry work?");
    let failed = server.wait_terminal(ALICE, &id);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(
        failed["result"]["failure"]["code"], "model_error",
        "{failed}"
    );
    assert_eq!(failed["repos"][0]["commit"], pinned.as_str());

    // The repository moves on; the retry still answers about the commit the task pinned.
    repo.write("src/lib.rs", "pub fn something_else() {}\n");
    repo.commit("later");
    let (status, retry) =
        server.request("POST", &format!("/v1/tasks/{id}/retry"), Some(ALICE), None);
    assert_eq!(status, 202, "{retry}");
    assert_eq!(retry["retry_of"], id.as_str());
    assert_eq!(retry["prompt"], "how does the retry work?");
    let retry_id = retry["id"].as_str().unwrap();
    assert_ne!(retry_id, id);
    let done = server.wait_terminal(ALICE, retry_id);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["repos"][0]["commit"], pinned.as_str());
    let evidence = &done["result"]["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["commit"], pinned.as_str(), "{done}");
    assert_eq!(model.requests().len(), 2);
    // The original stays failed.
    assert_eq!(server.task(ALICE, &id)["status"], "failed");
    server.terminate();
}

#[test]
fn a_task_running_on_another_worker_process_is_cancelled_through_the_shared_store() {
    let Some(schema) = PgSchema::create("control") else {
        return;
    };
    let repo = sample_repo();
    let (marker, model) = sleeping_model(8, 321);
    // The task is queued before any process runs, so `warden worker` (a second machine)
    // claims it, not the API server's own workers.
    let id = runtime().block_on(async {
        let store = warden_store::open(&schema.url()).await.unwrap();
        queue_question(&*store, &repo, "alice", "what does sleeping do?").await
    });
    let remote = Warden::openai(&model.url()).with("WARDEN_DATABASE_URL", &schema.url());
    let mut worker = Worker::start(&remote);
    wait_for_process(&marker, true, Duration::from_secs(60), || {
        format!("the worker never ran the command:\n{}", worker.stderr())
    });

    let warden = Warden::openai(&model.url()).with("WARDEN_DATABASE_URL", &schema.url());
    let server = Server::start(&warden, TOKENS);
    assert_eq!(server.task(ALICE, id.as_str())["status"], "running");
    let (status, body) =
        server.request("POST", &format!("/v1/tasks/{id}/cancel"), Some(ALICE), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    wait_for_process(&marker, false, Duration::from_secs(30), || {
        format!(
            "the other process's sandboxed command survived the cancellation:\n{}",
            worker.stderr()
        )
    });
    std::thread::sleep(Duration::from_secs(2));
    let task = server.task(ALICE, id.as_str());
    assert_eq!(task["status"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["code"], "cancelled", "{task}");
    assert!(worker.is_running(), "the worker keeps running");
    let runs = runtime().block_on(async {
        let store = warden_store::open(&schema.url()).await.unwrap();
        store.list_runs(&id).await.unwrap()
    });
    assert_eq!(runs.len(), 1);
    assert!(runs[0].worker.starts_with("worker-"), "{runs:?}");
    assert_eq!(runs[0].outcome.as_deref(), Some("cancelled"));
    drop(worker);
    server.terminate();
}
