//! The `warden serve` harness the end-to-end tests share: [`Server`] starts the real binary on a
//! free port with its `WARDEN_HOME` and API tokens, waits until it listens, speaks raw HTTP/1.1
//! with a bearer token, polls a task until a status and stops it with SIGTERM or `kill -9`;
//! [`Worker`] runs `warden worker`. Around them: the scripted model's answer and tool calls, the
//! sample repositories (one to ask about, one to change), the stopped server's store, a
//! throw-away Postgres schema and a question queued straight into a store before any process
//! runs.

#![allow(clippy::disallowed_methods)] // the harness spawns the binary under test and `kill`

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, Reply};

use super::support::{Run, Warden};

// Bearer tokens the tests hand to `warden serve` in their `Token` lists.
pub const ADMIN: &str = "admin-token-0123456789-0123456789";
pub const ALICE: &str = "alice-token-0123456789-0123456789";
pub const BOB: &str = "bob-token-01234567890-0123456789";

/// One `WARDEN_API_TOKENS` entry: `(name, role, token)`.
pub type Token = (&'static str, &'static str, &'static str);

/// The statuses a task never leaves.
pub const TERMINAL: &[&str] = &["completed", "failed", "cancelled", "timed_out"];

/// How long the harness waits for a process to listen, log a line or exit.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(60);
/// How long [`Server::wait_until`] polls a task (generous: only a failing test waits this long).
const TASK_TIMEOUT: Duration = Duration::from_secs(120);

/// A spawned `warden` process whose stderr a thread collects line by line; killed on drop.
struct Process {
    child: Child,
    stderr: Arc<Mutex<String>>,
    /// One message per stderr line, after the line is in `stderr`; disconnected at EOF.
    lines: Receiver<String>,
}

impl Process {
    fn spawn(mut command: Command) -> Process {
        let mut child = command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = Arc::new(Mutex::new(String::new()));
        let (sender, lines) = std::sync::mpsc::channel();
        let reader = BufReader::new(child.stderr.take().unwrap());
        let log = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in reader.lines().map_while(Result::ok) {
                {
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
                let _ = sender.send(line);
            }
        });
        Process {
            child,
            stderr,
            lines,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The first stderr line (so far or to come) `wanted` accepts; `None` once the process
    /// closed its stderr without one or after [`PROCESS_TIMEOUT`].
    fn find_line(&self, wanted: impl Fn(&str) -> bool) -> Option<String> {
        let deadline = Instant::now() + PROCESS_TIMEOUT;
        loop {
            if let Some(line) = self.stderr().lines().find(|line| wanted(line)) {
                return Some(line.to_string());
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(_) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return self
                        .stderr()
                        .lines()
                        .find(|line| wanted(line))
                        .map(Into::into)
                }
                Err(RecvTimeoutError::Timeout) => return None,
            }
        }
    }

    /// `kill -SIGNAL` (`TERM`, `INT`), then the exit code (panics when the process outlives
    /// [`PROCESS_TIMEOUT`]).
    fn stop(&mut self, signal: &str) -> Option<i32> {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        self.wait_exit(PROCESS_TIMEOUT)
    }

    /// Waits for the process to exit: its exit code; panics with its stderr when it outlives
    /// `timeout`.
    fn wait_exit(&mut self, timeout: Duration) -> Option<i32> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(
                Instant::now() < deadline,
                "the process did not exit:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`: no chance to clean up.
    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running `warden serve` on `127.0.0.1`, its address and everything it printed on stderr.
pub struct Server {
    process: Process,
    addr: String,
    /// The first admin token it was started with, for [`Server::register`].
    admin: Option<&'static str>,
    /// A `WARDEN_HOME` kept alive as long as the server (see [`Server::keeping`]).
    _home: Option<Warden>,
}

impl Server {
    /// Starts `warden serve` for `warden` on a free port with `tokens` as `WARDEN_API_TOKENS`
    /// and waits until it listens; panics with its stderr when it stops or hangs before that.
    pub fn start(warden: &Warden, tokens: &[Token]) -> Server {
        Server::start_with(warden, tokens, &[])
    }

    /// [`Server::start`] with more environment (a crash point: `WARDEN_FAILPOINT`).
    pub fn start_with(warden: &Warden, tokens: &[Token], env: &[(&str, &str)]) -> Server {
        Server::try_start_with(warden, tokens, env).unwrap_or_else(|(code, stderr)| {
            panic!("warden serve exited with {code:?} before listening:\n{stderr}")
        })
    }

    /// The server, or its exit code and stderr when it stopped before listening.
    pub fn try_start(warden: &Warden, tokens: &[Token]) -> Result<Server, (Option<i32>, String)> {
        Server::try_start_with(warden, tokens, &[])
    }

    /// [`Server::start`] with the process's open-file limit (soft and hard) set to
    /// `open_files`, so that a test can exhaust it with a few thousand sockets.
    pub fn start_with_open_files(warden: &Warden, tokens: &[Token], open_files: u64) -> Server {
        let command = warden.command_with_open_files(&["serve"], open_files);
        Server::try_start_command(command, tokens, &[]).unwrap_or_else(|(code, stderr)| {
            panic!("warden serve exited with {code:?} before listening:\n{stderr}")
        })
    }

    /// [`Server::try_start`] with `env` set before the tokens (and before the listen address
    /// unless `env` sets `WARDEN_LISTEN`).
    fn try_start_with(
        warden: &Warden,
        tokens: &[Token],
        env: &[(&str, &str)],
    ) -> Result<Server, (Option<i32>, String)> {
        Server::try_start_command(warden.command(&["serve"]), tokens, env)
    }

    /// Starts `command` (a `warden serve`) with `env`, then the listen address (unless `env`
    /// chose one) and the tokens.
    fn try_start_command(
        mut command: Command,
        tokens: &[Token],
        env: &[(&str, &str)],
    ) -> Result<Server, (Option<i32>, String)> {
        let entries: Vec<String> = tokens
            .iter()
            .map(|(name, role, token)| format!("{name}:{role}:{token}"))
            .collect();
        command.envs(env.iter().copied());
        // A free port unless the caller chose the address (a server restarted on its port).
        if !env.iter().any(|(name, _)| *name == "WARDEN_LISTEN") {
            command.env("WARDEN_LISTEN", "127.0.0.1:0");
        }
        command.env("WARDEN_API_TOKENS", entries.join(","));
        let mut process = Process::spawn(command);
        let prefix = "warden: listening on http://";
        match process.find_line(|line| line.starts_with(prefix)) {
            Some(line) => Ok(Server {
                addr: line[prefix.len()..].to_string(),
                admin: tokens
                    .iter()
                    .find(|(_, role, _)| *role == "admin")
                    .map(|(_, _, token)| *token),
                process,
                _home: None,
            }),
            None => {
                // Hung rather than exited: stop it, or waiting for its exit never ends.
                if process.child.try_wait().unwrap().is_none() {
                    let _ = process.child.kill();
                }
                let code = process.child.wait().ok().and_then(|s| s.code());
                std::thread::sleep(Duration::from_millis(100));
                Err((code, process.stderr()))
            }
        }
    }

    /// Keeps `warden` (its `WARDEN_HOME`) alive as long as the server, for a caller that hands
    /// the server on without its home.
    pub fn keeping(mut self, warden: Warden) -> Server {
        self._home = Some(warden);
        self
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn pid(&self) -> u32 {
        self.process.child.id()
    }

    /// Everything the server printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// The first stderr line containing `needle`, waiting for it; panics with the stderr when
    /// the server stops or stays silent.
    pub fn log_line(&self, needle: &str) -> String {
        self.process
            .find_line(|line| line.contains(needle))
            .unwrap_or_else(|| panic!("no log line with {needle:?}; stderr:\n{}", self.stderr()))
    }

    /// `kill -TERM`, then waits for the exit: its code and the whole stderr.
    pub fn terminate(self) -> (Option<i32>, String) {
        self.stop("TERM")
    }

    /// SIGINT, as Ctrl-C in a terminal, then waits for the exit: its code and the whole stderr.
    pub fn interrupt(self) -> (Option<i32>, String) {
        self.stop("INT")
    }

    fn stop(mut self, signal: &str) -> (Option<i32>, String) {
        let code = self.process.stop(signal);
        // The reader thread may still be copying the last lines.
        std::thread::sleep(Duration::from_millis(100));
        (code, self.stderr())
    }

    /// `kill -9`: no chance to clean up.
    pub fn kill(mut self) {
        self.process.kill();
    }

    /// Waits for the server to exit on its own (at a crash point, after a task's work): its exit
    /// code; panics with its stderr when it is still running after a generous timeout.
    pub fn wait_exit(mut self) -> Option<i32> {
        self.process.wait_exit(TASK_TIMEOUT)
    }

    /// A `warden` that talks to this server with `token` and has no model of its own.
    pub fn client(&self, token: &str) -> Warden {
        Warden::new()
            .with("WARDEN_SERVER", &self.url())
            .with("WARDEN_TOKEN", token)
    }

    /// Asserts a client's exit code, showing both sides' output when it differs.
    pub fn expect(&self, run: &Run, code: i32) {
        assert_eq!(
            run.code,
            code,
            "stdout:\n{}\nstderr:\n{}\nserver:\n{}",
            run.stdout,
            run.stderr,
            self.stderr()
        );
    }

    /// One HTTP/1.1 request on a fresh connection (`Connection: close`), with `token` as the
    /// bearer: status and JSON body (`null` when the body is not JSON).
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, Value) {
        self.request_with(method, path, token, body, &[])
    }

    /// [`Server::request`] with extra headers.
    pub fn request_with(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> (u16, Value) {
        let stream = self.send("HTTP/1.1", method, path, token, body, headers);
        let (status, body) = read_response(stream);
        (status, serde_json::from_str(&body).unwrap_or(Value::Null))
    }

    /// An HTTP/1.0 request (so no chunked body) with `token` as the bearer, sent; the response
    /// is the caller's to read, as it comes (an event stream).
    pub fn open(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> TcpStream {
        self.send("HTTP/1.0", method, path, token, body, &[])
    }

    /// [`Server::open`], read to the end: the status and the whole body as text (an event
    /// stream that ended, `/metrics`).
    pub fn request_text(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
    ) -> (u16, String) {
        read_response(self.open(method, path, token, body))
    }

    /// One unauthenticated `POST` of a raw `body` of `content_type` with `headers` (a signed
    /// webhook): the status and the body as text; `None` when the server closed the connection
    /// without answering (it died).
    pub fn post_raw(
        &self,
        path: &str,
        content_type: &str,
        body: &str,
        headers: &[(&str, &str)],
    ) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(&self.addr).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .ok()?;
        let mut request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: {content_type}\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);
        stream.write_all(request.as_bytes()).ok()?;
        let mut response = String::new();
        std::io::Read::read_to_string(&mut stream, &mut response).ok()?;
        let status = response.split_whitespace().nth(1)?.parse().ok()?;
        let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
        Some((status, body.to_string()))
    }

    /// Sends one `version` request with a JSON `body` on a fresh connection the server closes
    /// after its response.
    fn send(
        &self,
        version: &str,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        headers: &[(&str, &str)],
    ) -> TcpStream {
        let mut stream = TcpStream::connect(&self.addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        let mut request = format!(
            "{method} {path} {version}\r\nHost: {}\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n",
            self.addr,
            body.len()
        );
        if let Some(token) = token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(&body);
        stream.write_all(request.as_bytes()).unwrap();
        stream
    }

    /// Registers `repo` under `name` with the server's admin token (`POST /v1/repos`, 201).
    pub fn register(&self, name: &str, repo: &TempRepo) {
        let source = repo.path().to_str().unwrap();
        self.register_repo(&json!({"name": name, "source": source}));
    }

    /// Registers `repo` under `name` with `checks` as its check commands (`POST /v1/repos` with
    /// the server's admin token, 201).
    pub fn register_with_checks(&self, name: &str, repo: &TempRepo, checks: &[&str]) {
        let source = repo.path().to_str().unwrap();
        self.register_repo(&json!({"name": name, "source": source, "checks": checks}));
    }

    /// `POST /v1/repos` with `body` and the server's admin token; asserts 201.
    pub fn register_repo(&self, body: &Value) {
        let admin = self
            .admin
            .expect("the server was started with an admin token");
        let (status, body) = self.request("POST", "/v1/repos", Some(admin), Some(body));
        assert_eq!(status, 201, "{body}");
    }

    /// `POST /v1/tasks` with `body` as `token`; asserts 202 and returns the task.
    pub fn submit(&self, token: &str, body: &Value) -> Value {
        let (status, task) = self.request("POST", "/v1/tasks", Some(token), Some(body));
        assert_eq!(status, 202, "{task}");
        task
    }

    /// Submits `token`'s question about the repository registered as `repo`: the task id.
    pub fn submit_question(&self, token: &str, repo: &str, prompt: &str) -> String {
        let task = self.submit(
            token,
            &json!({"kind": "question", "repo": repo, "prompt": prompt}),
        );
        task["id"].as_str().unwrap().to_string()
    }

    /// Submits `token`'s change task `body`; asserts it is a change: the task id.
    pub fn submit_change(&self, token: &str, body: &Value) -> String {
        let task = self.submit(token, body);
        assert_eq!(task["kind"], "change", "{task}");
        task["id"].as_str().unwrap().to_string()
    }

    /// `GET /v1/tasks/{id}` as `token`; asserts 200.
    pub fn task(&self, token: &str, id: &str) -> Value {
        self.get(token, &format!("/v1/tasks/{id}"))
    }

    /// `GET path` as `token`; asserts 200 and returns the body.
    pub fn get(&self, token: &str, path: &str) -> Value {
        let (status, body) = self.request("GET", path, Some(token), None);
        assert_eq!(status, 200, "{body}");
        body
    }

    /// Polls (as `token`) until the task is in one of `statuses`.
    pub fn wait_for(&self, token: &str, id: &str, statuses: &[&str]) -> Value {
        self.wait_until(token, id, |status| statuses.contains(&status))
    }

    /// Polls (as `token`) until the task is in a [`TERMINAL`] status.
    pub fn wait_terminal(&self, token: &str, id: &str) -> Value {
        self.wait_for(token, id, TERMINAL)
    }

    /// Polls (as `token`) until `done` accepts the task's status (say, once it left `queued`,
    /// `running` and `testing`); panics with the task and the server's stderr after a
    /// generous timeout.
    pub fn wait_until(&self, token: &str, id: &str, done: impl Fn(&str) -> bool) -> Value {
        let deadline = Instant::now() + TASK_TIMEOUT;
        loop {
            let task = self.task(token, id);
            if done(task["status"].as_str().unwrap_or_default()) {
                return task;
            }
            assert!(
                Instant::now() < deadline,
                "task {id} never reached the awaited status: {task}\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// Whether a task with `status` has settled: left `queued`, `running` and `testing` (ended, or
/// waiting for input or approval). For [`Server::wait_until`].
pub fn settled(status: &str) -> bool {
    !matches!(status, "queued" | "running" | "testing")
}

/// Reads a response to the end: its status and its body as text.
fn read_response(mut stream: TcpStream) -> (u16, String) {
    let mut response = Vec::new();
    stream.read_to_end(&mut response).unwrap();
    let text = String::from_utf8_lossy(&response);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    (status, body.to_string())
}

/// A running `warden worker` (a second machine on a shared database) and its stderr.
pub struct Worker {
    process: Process,
}

impl Worker {
    pub fn start(warden: &Warden) -> Worker {
        Worker {
            process: Process::spawn(warden.command(&["worker"])),
        }
    }

    pub fn stderr(&self) -> String {
        self.process.stderr()
    }

    /// Waits for the first stderr line `wanted` accepts; panics when none comes.
    pub fn wait_for_line(&self, wanted: impl Fn(&str) -> bool) -> String {
        self.process
            .find_line(wanted)
            .unwrap_or_else(|| panic!("warden worker printed no such line:\n{}", self.stderr()))
    }

    pub fn is_running(&mut self) -> bool {
        self.process.child.try_wait().unwrap().is_none()
    }

    /// `kill -9`: no chance to clean up.
    pub fn kill(mut self) {
        self.process.kill();
    }
}

/// The scripted model's `submit_answer` arguments: one observed claim about
/// `retry_with_backoff` citing `path` lines `start..=end`.
pub fn submit_answer(path: &str, start: u64, end: u64) -> String {
    json!({
        "summary": "retry_with_backoff doubles the attempts",
        "claims": [{"text": "it doubles its input", "basis": "observed",
                    "evidence": [{"path": path, "start_line": start, "end_line": end}]}]
    })
    .to_string()
}

/// A repository with `retry_with_backoff` at `src/lib.rs` lines 31-33 and a README.
pub fn sample_repo() -> TempRepo {
    let repo = TempRepo::new();
    let mut lib = String::new();
    for n in 1..=30 {
        lib.push_str(&format!("// line {n}\n"));
    }
    lib.push_str("pub fn retry_with_backoff(attempts: u32) -> u32 {\n    attempts * 2\n}\n");
    repo.write("src/lib.rs", &lib)
        .write("README.md", "# sample\n");
    repo.commit("initial");
    repo
}

/// A repository to change: `src/lib.txt` with `beta` in it, a README, and `check.sh`, a check
/// that passes only once `beta` is `BETA`.
pub fn change_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
        .write("README.md", "# sample\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    repo
}

/// `repo`'s `origin`: a bare repository `widgets.git` holding its `HEAD` as `main`, and a fake
/// of GitHub's pulls API for `acme/widgets` over it that accepts `token`. Kept alive together.
pub struct GithubRemote {
    pub dir: tempfile::TempDir,
    pub path: std::path::PathBuf,
    pub fake: warden_test_support::github_fake::GithubFake,
}

impl GithubRemote {
    pub fn for_repo(repo: &TempRepo, token: &str) -> GithubRemote {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("widgets.git");
        let bare = path.to_str().unwrap();
        repo.git(&["init", "-q", "--bare", "-b", "main", bare]);
        repo.git(&["remote", "add", "origin", bare]);
        repo.git(&["push", "-q", "origin", "HEAD:main"]);
        let fake =
            warden_test_support::github_fake::GithubFake::start(&path, "acme", "widgets", token);
        GithubRemote { dir, path, fake }
    }
}

/// The scripted model's call of tool `name` with `arguments`.
pub fn call(name: &str, arguments: Value) -> Reply {
    openai::tool_call(name, &arguments.to_string())
}

/// The scripted model's edit that makes [`change_repo`]'s check pass: `beta` becomes `BETA`.
pub fn uppercase_beta() -> Reply {
    call(
        "edit_file",
        json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}),
    )
}

/// A current-thread runtime for a test's direct store calls.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens the server's SQLite store (after the server stopped) for checks the API does not show.
pub fn open_store(
    warden: &Warden,
) -> (
    tokio::runtime::Runtime,
    std::sync::Arc<dyn warden_store::Store>,
) {
    let runtime = runtime();
    let url = format!(
        "sqlite://{}",
        warden.home.path().join("warden.db").display()
    );
    let store = runtime.block_on(warden_store::open(&url)).unwrap();
    (runtime, store)
}

/// Registers `repo` as `app` (by `registered_by`) and queues alice's question `prompt` about
/// it straight in `store`, before any server runs, under a fixed id.
pub async fn queue_question(
    store: &dyn warden_store::Store,
    repo: &TempRepo,
    registered_by: &str,
    prompt: &str,
) -> warden_protocol::TaskId {
    store
        .register_repo(warden_store::NewRepo {
            name: "app".into(),
            source: repo.path().canonicalize().unwrap().display().to_string(),
            branch: None,
            checks: vec![],
            mounts: vec![],
            prepare: vec![],
            created_by: registered_by.into(),
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
                prompt: prompt.into(),
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
}

/// A fresh schema of the database `WARDEN_TEST_POSTGRES_URL` names, dropped afterwards; `None`
/// when no test database is configured.
pub struct PgSchema {
    admin_url: String,
    name: String,
}

impl PgSchema {
    /// A schema named `{prefix}_{pid}_{random}`.
    pub fn create(prefix: &str) -> Option<PgSchema> {
        let admin_url = warden_test_support::postgres::url()?;
        let mut random = [0u8; 5];
        getrandom::fill(&mut random).unwrap();
        let random: String = random.iter().map(|b| format!("{b:02x}")).collect();
        let name = format!("{prefix}_{}_{random}", std::process::id());
        pg_execute(&admin_url, &format!("CREATE SCHEMA {name}"));
        Some(PgSchema { admin_url, name })
    }

    /// The database URL with this schema as the search path.
    pub fn url(&self) -> String {
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

fn pg_execute(url: &str, sql: &str) {
    runtime().block_on(async {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
            .await
            .unwrap();
        let connection = tokio::spawn(connection);
        client.batch_execute(sql).await.unwrap();
        drop(client);
        let _ = connection.await;
    });
}
