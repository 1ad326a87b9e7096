//! Explorers end to end, against the scripted model server over the OpenAI wire: a question's
//! agent sends a read-only explorer, whose wrong citation goes back to it (not to the parent)
//! and whose checked answer comes back as the `explore` call's result; every call is the task's
//! in its usage and journal; a `kill -9` while the explorer works resumes into exactly one
//! outcome, its journaled decisions replayed rather than paid again.

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, Gate, ScriptedModelServer};

use super::server_harness::{call, sample_repo, submit_answer, Server, Token, ADMIN, ALICE};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

fn explore(question: &str) -> warden_test_support::model_server::Reply {
    call("explore", json!({ "question": question }))
}

/// The tool results (content, whether an error) of an OpenAI request, in order.
fn tool_results(body: &Value) -> Vec<(String, bool)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let content = m["content"].as_str().unwrap_or_default().to_string();
            let error = content.starts_with("Error") || content.contains("rejected");
            (content, error)
        })
        .collect()
}

#[test]
fn a_questions_explorer_answers_with_checked_citations_in_its_own_conversation() {
    let repo = sample_repo();
    let server = ScriptedModelServer::start_blocking(vec![
        explore("Where is retry_with_backoff defined, and what does it return?"),
        // The explorer: a read, an answer citing lines past the end, then a good one.
        call("read_file", json!({"path": "src/lib.rs"})),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 999)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        // The parent, with the explorer's answer in hand.
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&server.url());
    let path = repo.path().to_str().unwrap();
    let run = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "answer", "{result}");
    assert_eq!(result["usage"]["model_calls"], 5, "{result}");
    // The explorer's part of it: one sent, three calls.
    assert_eq!(result["usage"]["explorers"]["sent"], 1, "{result}");
    assert_eq!(result["usage"]["explorers"]["model_calls"], 3, "{result}");
    assert!(run.stderr.contains("→ explore"), "{}", run.stderr);

    let bodies: Vec<Value> = server.requests().into_iter().map(|r| r.body).collect();
    assert_eq!(bodies.len(), 5);
    let tools = |body: &Value| -> Vec<String> {
        body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert!(tools(&bodies[0]).contains(&"explore".to_string()));
    // The explorer: its own conversation, no explore (depth 1), no ask_user, no shell.
    let explorer = tools(&bodies[1]);
    assert!(!explorer.contains(&"explore".to_string()), "{explorer:?}");
    assert!(!explorer.contains(&"ask_user".to_string()), "{explorer:?}");
    assert!(!explorer.contains(&"shell".to_string()), "{explorer:?}");
    let messages = bodies[1]["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{messages:#?}");
    assert!(messages[0]["content"]
        .as_str()
        .unwrap()
        .contains("You are an explorer"));
    assert_eq!(
        messages[1]["content"],
        "Where is retry_with_backoff defined, and what does it return?"
    );
    assert_ne!(bodies[1]["prompt_cache_key"], bodies[0]["prompt_cache_key"]);
    // The wrong citation went back to the explorer.
    let rejected = tool_results(&bodies[3]);
    assert!(rejected.last().unwrap().0.contains("999"), "{rejected:#?}");
    // The parent got the checked answer, and never saw the rejection.
    let parent = tool_results(&bodies[4]);
    assert_eq!(parent.len(), 1, "{parent:#?}");
    let (answer, _) = &parent[0];
    assert!(answer.contains("citations were checked"), "{answer}");
    assert!(answer.contains("src/lib.rs:31-33"), "{answer}");
    assert!(!answer.contains("999"), "{answer}");

    // The journal shows the explorer inside the run.
    let id = result["task_id"].as_str().unwrap();
    let logs = warden.run(&["logs", id]);
    assert_eq!(logs.code, 0, "{}", logs.stderr);
    assert!(logs.stdout.contains("explorer 1 sent"), "{}", logs.stdout);
    assert!(logs.stdout.contains("explorer back"), "{}", logs.stdout);
    // The ledger keeps whose calls they were: the parent's two, the explorer's three.
    assert_eq!(
        super::support::ledger_roles(&warden),
        [("agent".to_string(), 2), ("explorer".to_string(), 3)]
    );
}

#[test]
fn a_kill_9_while_an_explorer_works_resumes_into_one_outcome_replaying_its_decisions() {
    let repo = sample_repo();
    let held = Gate::new();
    let model = ScriptedModelServer::start_blocking(vec![
        explore("Where is retry_with_backoff?"),
        call("read_file", json!({"path": "src/lib.rs"})),
        // Held: the server is killed while the explorer waits for this decision.
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)).held(&held),
        // The resumed run asks for that decision again, then the parent finishes.
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[serve]\nworkers = 1\nlease_secs = 1\n",
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "how does retry work?");
    let deadline = Instant::now() + Duration::from_secs(90);
    while model.requests().len() < 3 {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();
    held.open();
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_for(ALICE, &id, &["completed", "failed"]);
    assert_eq!(task["status"], "completed", "{task}");
    let requests = model.requests();
    // 3 before the kill; the resumed run replayed the first two (the parent's explore and the
    // explorer's read) and asked only for what was never journaled.
    assert_eq!(requests.len(), 5, "{requests:#?}");
    assert_eq!(
        requests[3].body["messages"], requests[2].body["messages"],
        "the resumed explorer asks what the killed one asked"
    );
    assert_eq!(task["result"]["outcome"], "answer", "{task}");
    server.terminate();
}
