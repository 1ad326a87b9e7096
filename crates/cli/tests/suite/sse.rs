//! Server-Sent Events from the real `warden serve`: a task's stream carries what its run
//! stored, in order, and ends once the task is finished; an open `/v1/events` stream does not
//! hold up SIGTERM; `/metrics` counts the run.

#![allow(clippy::disallowed_methods)] // the test spawns the binary under test and `kill`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;

use super::support::Warden;

const ADMIN: &str = "admin-token-0123456789";

fn start(warden: &Warden) -> (Child, String) {
    let mut child = warden
        .command(&["serve"])
        .env("WARDEN_LISTEN", "127.0.0.1:0")
        .env("WARDEN_API_TOKENS", format!("root:admin:{ADMIN}"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let reader = BufReader::new(child.stderr.take().unwrap());
    let (found, address) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            if let Some(addr) = line.strip_prefix("warden: listening on http://") {
                let _ = found.send(addr.to_string());
            }
        }
    });
    let addr = address
        .recv_timeout(Duration::from_secs(60))
        .expect("warden serve did not start");
    (child, addr)
}

/// An HTTP/1.0 request (no chunked body): the status and the whole body.
fn request(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, String) {
    let mut stream = open(addr, method, path, body);
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (
        head.split(' ').nth(1).unwrap().parse().unwrap(),
        body.into(),
    )
}

fn open(addr: &str, method: &str, path: &str, body: Option<&Value>) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    let request = format!(
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {ADMIN}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

fn wait_for_exit(child: &mut Child) -> Option<i32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    None
}

#[test]
fn a_tasks_event_stream_carries_its_run_and_ends_and_sigterm_ends_open_streams() {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n");
    repo.commit("initial");
    let warden = Warden::faux();
    let (mut child, addr) = start(&warden);
    let (status, body) = request(
        &addr,
        "POST",
        "/v1/repos",
        Some(&json!({"name": "app", "source": repo.path().to_str().unwrap()})),
    );
    assert_eq!(status, 201, "{body}");
    // A global stream opened before anything happens.
    let mut global = open(&addr, "GET", "/v1/events", None);
    let (status, body) = request(
        &addr,
        "POST",
        "/v1/tasks",
        Some(&json!({"kind": "question", "repo": "app", "prompt": "what does answer return?"})),
    );
    assert_eq!(status, 202, "{body}");
    let task: Value = serde_json::from_str(&body).unwrap();
    let id = task["id"].as_str().unwrap();

    // The task's stream, opened while it runs (or after): ends by itself once it finished.
    let (status, text) = request(&addr, "GET", &format!("/v1/tasks/{id}/events"), None);
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

    let (status, metrics) = request(&addr, "GET", "/metrics", None);
    assert_eq!(status, 200);
    for line in [
        "warden_tasks{status=\"completed\"} 1",
        "warden_runs_started_total 1",
        "warden_sandbox_starts_total{kind=\"question\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }

    // SIGTERM with the global stream still open: the stream ends and the server exits.
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(wait_for_exit(&mut child), Some(0));
    let mut rest = Vec::new();
    global.read_to_end(&mut rest).unwrap();
}
