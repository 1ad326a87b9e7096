//! Steering a running task, end to end over the real wire: `warden serve` with a scripted model
//! server whose replies are held at gates, so a message is sent while the model "thinks".
//! The message reaches the agent before its next model call, is journaled and shown on the
//! timeline, and after a `kill -9` the run that resumes delivers it at the same place (so the
//! journaled decisions replay) or, when it had not been delivered yet, at the resumed run's
//! next call.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, Gate, RecordedRequest, ScriptedModelServer};

use super::server_harness::{
    call, change_repo, open_store, sample_repo, submit_answer, uppercase_beta, Server, Token,
    ADMIN, ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

const SAID: &str = "keep the README as it is";

/// Waits until the model server has received `count` requests.
fn wait_requests(model: &ScriptedModelServer, count: usize, server: &Server) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while model.requests().len() < count {
        assert!(
            Instant::now() < deadline,
            "the model never got request {count}:\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The OpenAI request's messages.
fn messages(request: &RecordedRequest) -> Vec<Value> {
    request.body["messages"].as_array().unwrap().clone()
}

/// How many messages of `request` carry `text`.
fn saying(request: &RecordedRequest, text: &str) -> usize {
    messages(request)
        .iter()
        .filter(|m| m["content"].as_str().is_some_and(|c| c.contains(text)))
        .count()
}

fn serve(warden: &Warden) -> Server {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[serve]\nworkers = 1\nlease_secs = 1\n",
    )
    .unwrap();
    Server::start(warden, TOKENS)
}

/// Every journal record of the task's runs (the API's pages).
fn journal(server: &Server, id: &str) -> Vec<Value> {
    let body = server.get(ALICE, &format!("/v1/tasks/{id}/journal?limit=200"));
    assert!(body["next_cursor"].is_null(), "more than one page");
    body["data"].as_array().cloned().unwrap_or_default()
}

/// The types of the task's stored events, oldest first (read after the server stopped).
fn event_types(warden: &Warden, id: &str) -> Vec<String> {
    let (runtime, store) = open_store(warden);
    let stream = warden_store::EventStream::Task(id.parse().unwrap());
    let events = runtime
        .block_on(store.events_after(&stream, 0, 10_000))
        .unwrap();
    events
        .iter()
        .map(|record| {
            serde_json::to_value(&record.event).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect()
}

#[test]
fn a_message_to_a_running_change_reaches_its_next_turn_and_replays_in_place_after_kill_9() {
    let repo = change_repo();
    let thinking = Gate::new();
    let crashed = Gate::new();
    let model = ScriptedModelServer::start_blocking(vec![
        call("read_file", json!({"path": "src/lib.txt"})),
        // Held while the message is sent: the agent's second call is in flight.
        uppercase_beta().held(&thinking),
        // Held until the server is killed: this decision is never journaled.
        call("submit_change", json!({"summary": "Uppercase beta"})).held(&crashed),
        // What the resumed run gets for that same call.
        call("submit_change", json!({"summary": "Uppercase beta"})),
    ]);
    let warden = Warden::openai(&model.url());
    let server = serve(&warden);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    let id = server.submit_change(
        ALICE,
        &json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase"}),
    );
    wait_requests(&model, 2, &server);

    let (status, task) = server.request(
        "POST",
        &format!("/v1/tasks/{id}/messages"),
        Some(ALICE),
        Some(&json!({"text": SAID})),
    );
    assert_eq!(status, 202, "{task}");
    assert_eq!(task["id"], id.as_str(), "steering is the same task: {task}");
    assert!(
        matches!(task["status"].as_str(), Some("running" | "testing")),
        "{task}"
    );
    thinking.open();
    wait_requests(&model, 3, &server);
    let requests = model.requests();
    assert_eq!(saying(&requests[1], SAID), 0, "sent before the message");
    assert_eq!(saying(&requests[2], SAID), 1, "the next turn carries it");
    let last = messages(&requests[2]).last().unwrap().clone();
    assert_eq!(last["role"], "user", "{last}");
    assert!(
        last["content"]
            .as_str()
            .unwrap()
            .contains("alice sent a message"),
        "{last}"
    );

    // kill -9 while the model answers the third call; the next server resumes the run.
    server.kill();
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_for(ALICE, &id, &["waiting_approval", "completed", "failed"]);
    assert_eq!(task["result"]["outcome"], "proposal", "{task}");
    crashed.open();
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        4,
        "decisions 1 and 2 replayed from the journal"
    );
    // The resumed run delivered the message where the crashed one had: the same conversation.
    assert_eq!(messages(&requests[3]), messages(&requests[2]));
    assert_eq!(saying(&requests[3], SAID), 1);

    // Both runs journaled the delivery, before their third model call.
    let records = journal(&server, &id);
    for run in [1, 2] {
        let kinds: Vec<&str> = records
            .iter()
            .filter(|r| r["run"] == run)
            .filter(|r| {
                matches!(
                    r["kind"].as_str(),
                    Some("model_requested" | "message_delivered")
                )
            })
            .map(|r| r["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds[..4],
            [
                "model_requested",
                "model_requested",
                "message_delivered",
                "model_requested"
            ],
            "run {run}: {kinds:?}"
        );
    }
    server.terminate();
    // The timeline: queued once, delivered by each run.
    let types = event_types(&warden, &id);
    assert_eq!(
        types.iter().filter(|t| *t == "message_queued").count(),
        1,
        "{types:?}"
    );
    assert_eq!(
        types.iter().filter(|t| *t == "message_delivered").count(),
        2,
        "{types:?}"
    );
}

#[test]
fn warden_say_reaches_a_question_whose_run_was_killed_before_it_could_deliver() {
    let repo = sample_repo();
    let thinking = Gate::new();
    let model = ScriptedModelServer::start_blocking(vec![
        call("search", json!({"pattern": "retry"})).held(&thinking),
        // The resumed run's first call, and its answer.
        call("search", json!({"pattern": "retry"})),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 1, 3)),
    ]);
    let warden = Warden::openai(&model.url());
    let server = serve(&warden);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "where is the retry logic?");
    wait_requests(&model, 1, &server);

    let said = server
        .client(ALICE)
        .run(&["say", &id, "only look under src/"]);
    server.expect(&said, 0);
    assert!(
        said.stdout.contains("reads the message at its next turn"),
        "{}",
        said.stdout
    );
    // Killed before the next turn: the message is stored, not delivered.
    server.kill();
    thinking.open();
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_for(ALICE, &id, &["completed", "failed"]);
    assert_eq!(task["status"], "completed", "{task}");
    let requests = model.requests();
    assert_eq!(requests.len(), 3, "{requests:#?}");
    // The crashed run's only call never saw it; the resumed run's first call did not either
    // (it replays nothing: the first decision was never journaled)…
    assert_eq!(saying(&requests[0], "only look under src/"), 0);
    // …so the message reaches it before its first call, and stays in the conversation.
    assert_eq!(saying(&requests[1], "only look under src/"), 1);
    assert_eq!(saying(&requests[2], "only look under src/"), 1);

    // A finished task's message is a follow-up, said in words.
    let again = server.client(ALICE).run(&["say", &id, "and the tests?"]);
    server.expect(&again, 0);
    assert!(
        again.stdout.contains("started the follow-up"),
        "{}",
        again.stdout
    );
    server.terminate();
}
