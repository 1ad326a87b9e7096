//! Change tasks on `warden serve` workers, as a user runs them: the real binary, a registered
//! repository with its check command, tasks submitted over HTTP, the scripted model editing
//! files and calling `submit_change`. Covers the checked proposal in the mirror, the redacted
//! diff route, sensitive files (`.env`) flagged with a `publish_sensitive` approval bound to the
//! proposal hash, a clarification answered over the API and the change finished with the
//! exchange, a change resumed after `kill -9` (journaled decisions replayed, the edits
//! re-executed into a fresh view), and the same sensitive-file rule in the in-process
//! `warden run`.

#![allow(clippy::disallowed_methods)] // the tests spawn the binary under test and `kill`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, Reply, ScriptedModelServer};

use super::support::Warden;

pub(super) const ADMIN: &str = "admin-token-0123456789";
pub(super) const ALICE: &str = "alice-token-0123456789";
/// What `Warden::openai` sets as the model API key: a registered secret.
const MODEL_KEY: &str = "sk-test-key";
const GITHUB_TOKEN: &str = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";

/// A running `warden serve`, its address and its stderr.
pub(super) struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    pub(super) fn start(warden: &Warden) -> Server {
        Server::start_with(warden, &[])
    }

    /// [`Server::start`] with more environment (a crash point).
    pub(super) fn start_with(warden: &Warden, env: &[(&str, &str)]) -> Server {
        let mut command = warden.command(&["serve"]);
        command.envs(env.iter().copied());
        let mut child = command
            .env("WARDEN_LISTEN", "127.0.0.1:0")
            .env(
                "WARDEN_API_TOKENS",
                format!("root:admin:{ADMIN},alice:operator:{ALICE}"),
            )
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

    pub(super) fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub(super) fn request(
        &self,
        method: &str,
        path: &str,
        token: &str,
        body: Option<&Value>,
    ) -> (u16, Value) {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Type: \
             application/json\r\nContent-Length: {}\r\nAuthorization: Bearer {token}\r\n\r\n{body}",
            self.addr,
            body.len()
        );
        stream.write_all(request.as_bytes()).unwrap();
        let mut response = Vec::new();
        stream.read_to_end(&mut response).unwrap();
        let text = String::from_utf8_lossy(&response);
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap();
        (status, serde_json::from_str(body).unwrap_or(Value::Null))
    }

    pub(super) fn register(&self, repo: &TempRepo, checks: &[&str]) {
        let (status, body) = self.request(
            "POST",
            "/v1/repos",
            ADMIN,
            Some(
                &json!({"name": "app", "source": repo.path().to_str().unwrap(),
                         "checks": checks}),
            ),
        );
        assert_eq!(status, 201, "{body}");
    }

    pub(super) fn submit(&self, body: Value) -> String {
        let (status, task) = self.request("POST", "/v1/tasks", ALICE, Some(&body));
        assert_eq!(status, 202, "{task}");
        assert_eq!(task["kind"], "change");
        task["id"].as_str().unwrap().to_string()
    }

    /// Polls until the task leaves queued/running/testing.
    pub(super) fn wait_settled(&self, id: &str) -> Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, task) = self.request("GET", &format!("/v1/tasks/{id}"), ALICE, None);
            assert_eq!(status, 200, "{task}");
            if !matches!(
                task["status"].as_str(),
                Some("queued" | "running" | "testing")
            ) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never settled: {task}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `kill -9`: no chance to clean up.
    pub(super) fn kill(mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    /// Waits for the server to exit on its own (a crash point); its exit status.
    pub(super) fn wait_exit(mut self) -> Option<i32> {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "serve did not exit:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(super) fn terminate(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(super) fn sample_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
        .write("README.md", "# sample\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    repo
}

pub(super) fn call(name: &str, arguments: Value) -> Reply {
    openai::tool_call(name, &arguments.to_string())
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

/// The store of a stopped server.
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
fn serve_runs_a_change_to_a_checked_proposal_and_shows_its_diff() {
    let repo = sample_repo();
    let base = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    // The registered repository's check: passes only with the edit.
    server.register(&repo, &["bash check.sh"]);
    let id = server.submit(json!({"kind": "change", "repo": "app",
                                  "prompt": "make beta uppercase"}));
    let task = server.wait_settled(&id);
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
    let (status, diff) = server.request("GET", &format!("/v1/tasks/{id}/diff"), ALICE, None);
    assert_eq!(status, 200, "{diff}");
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

#[test]
fn a_change_touching_env_waits_for_a_publish_sensitive_approval_and_its_diff_is_redacted() {
    let repo = sample_repo();
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
    let server = Server::start(&warden);
    server.register(&repo, &["bash check.sh"]);
    // The task's own check replaces the registered one (which would fail: no BETA).
    let id = server.submit(
        json!({"kind": "change", "repo": "app", "prompt": "add a .env",
                                  "checks": ["test -s .env"], "publish": true}),
    );
    let task = server.wait_settled(&id);
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

    let (status, diff) = server.request("GET", &format!("/v1/tasks/{id}/diff"), ALICE, None);
    assert_eq!(status, 200, "{diff}");
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
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "write_file",
            json!({"path": ".github/workflows/ci.yml", "content": "on: push\n"}),
        ),
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        call("submit_change", json!({"summary": "CI and BETA"})),
        // The second run: no sensitive file.
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
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
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        // The server dies while the model thinks about its second decision.
        call("submit_change", json!({"summary": "Make beta uppercase"})).delayed(10_000),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    server.register(&repo, &["bash check.sh"]);
    let id = server.submit(json!({"kind": "change", "repo": "app",
                                  "prompt": "make beta uppercase"}));
    let deadline = Instant::now() + Duration::from_secs(60);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    server.kill();

    let server = Server::start(&warden);
    let task = server.wait_settled(&id);
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
    let (status, diff) = server.request("GET", &format!("/v1/tasks/{id}/diff"), ALICE, None);
    assert_eq!(status, 200, "{diff}");
    assert!(
        diff["diff"].as_str().unwrap().contains("-beta\n+BETA\n"),
        "{diff}"
    );
    server.terminate();
}

#[test]
fn a_change_that_asks_waits_for_input_and_an_answer_resumes_it_with_the_exchange() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call("ask_user", json!({"question": "Which word should change?"})),
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
        ),
        call("submit_change", json!({"summary": "Make beta uppercase"})),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden);
    server.register(&repo, &["bash check.sh"]);
    let id = server.submit(json!({"kind": "change", "repo": "app", "prompt": "uppercase a word"}));
    let task = server.wait_settled(&id);
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
        ALICE,
        Some(&json!({"text": "beta"})),
    );
    assert_eq!(status, 202, "{body}");
    let task = server.wait_settled(&id);
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
