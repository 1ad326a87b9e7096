//! Task control against the real `warden serve` (linux sandbox, scripted model over HTTP):
//! a clarification answered over `POST /v1/tasks/{id}/messages` resumes the conversation with
//! the question and the answer in front of the model; cancelling a running task stops it and
//! kills its sandboxed command; retrying a failed task runs it again as a new task over the
//! same pinned commit.

#![allow(clippy::disallowed_methods)] // the tests spawn the binary under test and pgrep

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, RecordedRequest, ScriptedModelServer};

use super::support::Warden;

const ALICE: &str = "alice-token-0123456789";

/// A running `warden serve`, its address and everything it printed on stderr.
struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn start(warden: &Warden) -> Server {
        let mut child = warden
            .command(&["serve"])
            .env("WARDEN_LISTEN", "127.0.0.1:0")
            .env("WARDEN_API_TOKENS", format!("alice:admin:{ALICE}"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (found, address) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                if let Some(addr) = line.strip_prefix("warden: listening on http://") {
                    let _ = found.send(addr.to_string());
                }
                let mut log = log.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let addr = address
            .recv_timeout(Duration::from_secs(60))
            .unwrap_or_else(|_| panic!("serve did not listen:\n{}", stderr.lock().unwrap()));
        Server {
            child,
            addr,
            stderr,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn terminate(mut self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < deadline, "serve did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// One HTTP/1.1 request on a fresh connection: status and JSON body.
    fn request(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\
             Authorization: Bearer {ALICE}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    fn register(&self, repo: &TempRepo) {
        let (status, body) = self.request(
            "POST",
            "/v1/repos",
            Some(&json!({"name": "app", "source": repo.path().to_str().unwrap()})),
        );
        assert_eq!(status, 201, "{body}");
    }

    fn submit(&self, prompt: &str) -> String {
        let (status, body) = self.request(
            "POST",
            "/v1/tasks",
            Some(&json!({"kind": "question", "repo": "app", "prompt": prompt})),
        );
        assert_eq!(status, 202, "{body}");
        body["id"].as_str().unwrap().to_string()
    }

    fn task(&self, id: &str) -> Value {
        let (status, body) = self.request("GET", &format!("/v1/tasks/{id}"), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls until the task is in one of `statuses` (generous timeout).
    fn wait_for(&self, id: &str, statuses: &[&str]) -> Value {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let task = self.task(id);
            if statuses.contains(&task["status"].as_str().unwrap_or_default()) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never reached {statuses:?}: {task}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sample_repo() -> TempRepo {
    let repo = TempRepo::new();
    let mut lib = String::new();
    for n in 1..=30 {
        lib.push_str(&format!("// line {n}\n"));
    }
    lib.push_str("pub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n");
    repo.write("src/lib.rs", &lib);
    repo.commit("initial");
    repo
}

fn submit_answer() -> String {
    json!({
        "summary": "retry_with_backoff doubles the attempts",
        "claims": [{"text": "it doubles its input", "basis": "observed",
                    "evidence": [{"path": "src/lib.rs", "start_line": 31, "end_line": 33}]}]
    })
    .to_string()
}

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

/// Opens the server's SQLite store (after it stopped).
fn open_store(
    warden: &Warden,
) -> (
    tokio::runtime::Runtime,
    std::sync::Arc<dyn warden_store::Store>,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let url = format!(
        "sqlite://{}",
        warden.home.path().join("warden.db").display()
    );
    let store = runtime.block_on(warden_store::open(&url)).unwrap();
    (runtime, store)
}

#[test]
fn an_answered_clarification_resumes_the_conversation_with_question_and_answer() {
    let repo = sample_repo();
    let question = "Do you mean the retry in the client or in the worker?";
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("ask_user", &json!({ "question": question }).to_string()),
        openai::tool_call("submit_answer", &submit_answer()),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    server.register(&repo);
    let id = server.submit("how does the retry work?");
    let task = server.wait_for(&id, &["waiting_input", "completed", "failed"]);
    assert_eq!(task["status"], "waiting_input", "{task}");
    assert_eq!(task["result"]["outcome"], "clarification", "{task}");
    assert_eq!(task["result"]["clarification"]["question"], question);
    assert_eq!(model.requests().len(), 1);

    let (status, body) = server.request(
        "POST",
        &format!("/v1/tasks/{id}/messages"),
        Some(&json!({"text": "The one in the client, please."})),
    );
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], id.as_str());
    let task = server.wait_for(&id, &["completed", "failed", "cancelled", "timed_out"]);
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

#[test]
fn cancelling_a_running_task_stops_it_and_kills_its_sandboxed_command() {
    let repo = sample_repo();
    // A marker no other test uses, so pgrep sees only this command.
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).unwrap();
    let marker = format!("sleep 7{}.{}", u32::from_le_bytes(random) % 1000, 123);
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "shell",
        &json!({"command": marker, "timeout_ms": 300_000}).to_string(),
    )]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    server.register(&repo);
    let id = server.submit("what does sleeping do?");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !process_running(&marker) {
        let task = server.task(&id);
        assert!(
            Instant::now() < deadline && task["status"] != "failed",
            "the command never started: {task}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(server.task(&id)["status"], "running");

    let (status, body) = server.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    assert_eq!(body["result"]["failure"]["code"], "cancelled", "{body}");
    // The sandboxed command dies long before its own timeout (generous bound, not a timing
    // assertion: it would otherwise live for minutes).
    let deadline = Instant::now() + Duration::from_secs(30);
    while process_running(&marker) {
        assert!(
            Instant::now() < deadline,
            "the sandboxed command survived the cancellation\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The run winds down without overwriting the cancellation; cancelling again conflicts.
    std::thread::sleep(Duration::from_secs(2));
    let task = server.task(&id);
    assert_eq!(task["status"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["code"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["message"], "cancelled by alice");
    let (status, body) = server.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
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
        openai::tool_call("submit_answer", &submit_answer()),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    server.register(&repo);
    let id = server.submit("how does the retry work?");
    let failed = server.wait_for(&id, &["completed", "failed", "cancelled", "timed_out"]);
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(
        failed["result"]["failure"]["code"], "model_error",
        "{failed}"
    );
    assert_eq!(failed["repos"][0]["commit"], pinned.as_str());

    // The repository moves on; the retry still answers about the commit the task pinned.
    repo.write("src/lib.rs", "pub fn something_else() {}\n");
    repo.commit("later");
    let (status, retry) = server.request("POST", &format!("/v1/tasks/{id}/retry"), None);
    assert_eq!(status, 202, "{retry}");
    assert_eq!(retry["retry_of"], id.as_str());
    assert_eq!(retry["prompt"], "how does the retry work?");
    let retry_id = retry["id"].as_str().unwrap();
    assert_ne!(retry_id, id);
    let done = server.wait_for(retry_id, &["completed", "failed", "cancelled", "timed_out"]);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["repos"][0]["commit"], pinned.as_str());
    let evidence = &done["result"]["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["commit"], pinned.as_str(), "{done}");
    assert_eq!(model.requests().len(), 2);
    // The original stays failed.
    assert_eq!(server.task(&id)["status"], "failed");
    server.terminate();
}

/// A fresh schema of the database `WARDEN_TEST_POSTGRES_URL` names, dropped afterwards; `None`
/// when no test database is configured.
struct PgSchema {
    admin_url: String,
    name: String,
}

impl PgSchema {
    fn create() -> Option<PgSchema> {
        let Ok(admin_url) = std::env::var("WARDEN_TEST_POSTGRES_URL") else {
            eprintln!("skipped: WARDEN_TEST_POSTGRES_URL not set");
            return None;
        };
        let mut random = [0u8; 5];
        getrandom::fill(&mut random).unwrap();
        let name = format!("control_{}_{}", std::process::id(), hex_of(&random));
        pg_execute(&admin_url, &format!("CREATE SCHEMA {name}"));
        Some(PgSchema { admin_url, name })
    }

    fn url(&self) -> String {
        let separator = if self.admin_url.contains('?') {
            '&'
        } else {
            '?'
        };
        format!(
            "{}{separator}options=-csearch_path%3D{}",
            self.admin_url, self.name
        )
    }
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        pg_execute(
            &self.admin_url,
            &format!("DROP SCHEMA IF EXISTS {} CASCADE", self.name),
        );
    }
}

fn hex_of(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn pg_execute(url: &str, sql: &str) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = connection.await;
    });
}

#[test]
fn a_task_running_on_another_worker_process_is_cancelled_through_the_shared_store() {
    let Some(schema) = PgSchema::create() else {
        return;
    };
    let repo = sample_repo();
    let mut random = [0u8; 4];
    getrandom::fill(&mut random).unwrap();
    let marker = format!("sleep 8{}.{}", u32::from_le_bytes(random) % 1000, 321);
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "shell",
        &json!({"command": marker, "timeout_ms": 300_000}).to_string(),
    )]);
    // The task is queued before any process runs, so `warden worker` (a second machine)
    // claims it, not the API server's own workers.
    let id: warden_protocol::TaskId = {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let store = warden_store::open(&schema.url()).await.unwrap();
            store
                .register_repo(warden_store::NewRepo {
                    name: "app".into(),
                    source: repo.path().canonicalize().unwrap().display().to_string(),
                    branch: None,
                    checks: vec![],
                    created_by: "alice".into(),
                })
                .await
                .unwrap();
            let id: warden_protocol::TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse().unwrap();
            store
                .create_task(
                    warden_store::NewTask {
                        id: id.clone(),
                        kind: warden_protocol::TaskKind::Question,
                        owner: "alice".into(),
                        prompt: "what does sleeping do?".into(),
                        repos: vec![warden_store::TaskRepo::named("app")],
                        priority: 0,
                        follow_up_to: None,
                        retry_of: None,
                        metadata: json!({}),
                        callback_url: None,
                    },
                    None,
                )
                .await
                .unwrap();
            id
        })
    };
    let remote = Warden::openai(&model.url()).with("WARDEN_DATABASE_URL", &schema.url());
    let mut worker = remote
        .command(&["worker"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let worker_log = Arc::new(Mutex::new(String::new()));
    let log = Arc::clone(&worker_log);
    let reader = BufReader::new(worker.stderr.take().unwrap());
    std::thread::spawn(move || {
        for line in reader.lines().map_while(Result::ok) {
            let mut log = log.lock().unwrap();
            log.push_str(&line);
            log.push('\n');
        }
    });
    let deadline = Instant::now() + Duration::from_secs(60);
    while !process_running(&marker) {
        assert!(
            Instant::now() < deadline,
            "the worker never ran the command:\n{}",
            worker_log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    let warden = Warden::openai(&model.url()).with("WARDEN_DATABASE_URL", &schema.url());
    let server = Server::start(&warden);
    assert_eq!(server.task(id.as_str())["status"], "running");
    let (status, body) = server.request("POST", &format!("/v1/tasks/{id}/cancel"), None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["status"], "cancelled");
    let deadline = Instant::now() + Duration::from_secs(30);
    while process_running(&marker) {
        assert!(
            Instant::now() < deadline,
            "the other process's sandboxed command survived the cancellation:\n{}",
            worker_log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_secs(2));
    let task = server.task(id.as_str());
    assert_eq!(task["status"], "cancelled", "{task}");
    assert_eq!(task["result"]["failure"]["code"], "cancelled", "{task}");
    assert!(
        worker.try_wait().unwrap().is_none(),
        "the worker keeps running"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runs = runtime.block_on(async {
        let store = warden_store::open(&schema.url()).await.unwrap();
        store.list_runs(&id).await.unwrap()
    });
    assert_eq!(runs.len(), 1);
    assert!(runs[0].worker.starts_with("worker-"), "{runs:?}");
    assert_eq!(runs[0].outcome.as_deref(), Some("cancelled"));
    let _ = worker.kill();
    let _ = worker.wait();
    server.terminate();
}
