//! Server-Sent Events from the real `warden serve`: a task's stream carries what its run
//! stored, in order, and ends once the task is finished; an open `/v1/events` stream does not
//! hold up SIGTERM; `/metrics` counts the run.

use std::io::Read;

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;

use super::server_harness::{Server, Token, ADMIN};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];

#[test]
fn a_tasks_event_stream_carries_its_run_and_ends_and_sigterm_ends_open_streams() {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n");
    repo.commit("initial");
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    let (status, body) = server.request_text(
        "POST",
        "/v1/repos",
        Some(ADMIN),
        Some(&json!({"name": "app", "source": repo.path().to_str().unwrap()})),
    );
    assert_eq!(status, 201, "{body}");
    // A global stream opened before anything happens.
    let mut global = server.open("GET", "/v1/events", Some(ADMIN), None);
    let (status, body) = server.request_text(
        "POST",
        "/v1/tasks",
        Some(ADMIN),
        Some(&json!({"kind": "question", "repo": "app", "prompt": "what does answer return?"})),
    );
    assert_eq!(status, 202, "{body}");
    let task: Value = serde_json::from_str(&body).unwrap();
    let id = task["id"].as_str().unwrap();

    // The task's stream, opened while it runs (or after): ends by itself once it finished.
    let (status, text) =
        server.request_text("GET", &format!("/v1/tasks/{id}/events"), Some(ADMIN), None);
    assert_eq!(status, 200);
    let messages: Vec<(u64, String, Value)> = text
        .split("\n\n")
        .filter(|m| !m.is_empty() && !m.starts_with(':'))
        .map(|m| {
            let lines: Vec<&str> = m.lines().collect();
            (
                lines[0].strip_prefix("id: ").unwrap().parse().unwrap(),
                lines[1].strip_prefix("event: ").unwrap().to_string(),
                serde_json::from_str(lines[2].strip_prefix("data: ").unwrap()).unwrap(),
            )
        })
        .collect();
    let ids: Vec<u64> = messages.iter().map(|m| m.0).collect();
    assert_eq!(ids, (1..=ids.len() as u64).collect::<Vec<_>>(), "{text}");
    assert_eq!(messages.first().unwrap().1, "task_started", "{text}");
    let (_, last, data) = messages.last().unwrap();
    assert_eq!(last, "task_finished", "{text}");
    assert_eq!(data["event"]["status"], "completed", "{text}");
    assert!(messages.iter().all(|m| m.2["task"] == id));

    // The global stream saw the same events, by global sequence.
    let mut seen = String::new();
    let mut buffer = [0u8; 4096];
    while !seen.contains("event: task_finished") {
        let n = global.read(&mut buffer).unwrap();
        assert!(n > 0, "the global stream ended early: {seen}");
        seen.push_str(&String::from_utf8_lossy(&buffer[..n]));
    }
    assert!(seen.starts_with("HTTP/1.0 200") || seen.starts_with("HTTP/1.1 200"));
    assert_eq!(seen.matches("\nevent: ").count(), messages.len(), "{seen}");

    let (status, metrics) = server.request_text("GET", "/metrics", Some(ADMIN), None);
    assert_eq!(status, 200);
    for line in [
        "warden_tasks{status=\"completed\"} 1",
        "warden_runs_started_total 1",
        "warden_sandbox_starts_total{kind=\"question\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }

    // SIGTERM with the global stream still open: the stream ends and the server exits.
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    let mut rest = Vec::new();
    global.read_to_end(&mut rest).unwrap();
}
