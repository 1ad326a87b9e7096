//! Benchmarks of the service (not timed tests):
//! - submission → first model request: `POST /v1/tasks` on an in-process `warden serve`
//!   (SQLite, two workers, the configured sandbox) until the scripted model server receives
//!   the task's request, for a repository whose snapshot is warm. Goal: median ≤ 50 ms.
//! - idle RSS of the real `warden serve` binary (`--warden PATH`, e.g. target/release/warden):
//!   VmRSS from /proc after it has been listening for a second. Goal: ≤ 40 MB.
//!
//! `cargo run --release -p warden-api --example serve_bench -- [--tasks N] [--warden PATH]`
//! (`--smoke`: two tasks, each checked to complete; the idle RSS only with `--warden`)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_config::Env;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

const TOKEN: &str = "bench-token-0123456789-0123456789";

struct MapEnv(HashMap<String, String>);

impl Env for MapEnv {
    fn var(&self, name: &str) -> Option<String> {
        self.0.get(name).cloned()
    }
}

fn http(addr: &str, method: &str, path: &str, body: &Value) -> (u16, Value) {
    let mut stream = TcpStream::connect(addr).unwrap();
    let body = body.to_string();
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn latency(tasks: usize) {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn f() -> u32 {\n    1\n}\n");
    repo.commit("initial");
    let submit = json!({
        "summary": "f returns 1",
        "claims": [{"text": "f returns 1", "basis": "observed",
                    "evidence": [{"path": "src/lib.rs", "start_line": 1, "end_line": 3}]}]
    })
    .to_string();
    let model = ScriptedModelServer::start_blocking(
        (0..=tasks)
            .map(|_| openai::tool_call("submit_answer", &submit))
            .collect(),
    );
    let home = tempfile::tempdir().unwrap();
    let mut env: HashMap<String, String> = [
        ("WARDEN_HOME", home.path().to_str().unwrap().to_string()),
        ("WARDEN_MODEL", "openai:gpt-bench".into()),
        ("OPENAI_BASE_URL", model.openai_base_url()),
        ("OPENAI_API_KEY", "sk-bench".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    if let Ok(sandbox) = std::env::var("WARDEN_SANDBOX") {
        env.insert("WARDEN_SANDBOX".into(), sandbox);
    }
    let loaded = warden_service::config::load(None, &MapEnv(env)).unwrap();
    let config = Arc::new(loaded.engine);
    let service_config = Arc::new(loaded.service);
    let sandbox = config.sandbox.backend.as_str();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let addr = runtime.block_on(async {
        let url = format!("sqlite://{}", home.path().join("warden.db").display());
        let store = warden_service::compose::open_store(&url).await.unwrap();
        let services = warden_service::compose::services(config, service_config, store)
            .await
            .unwrap();
        let tokens = warden_api::routes::Tokens::parse(&format!("bench:admin:{TOKEN}")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(warden_api::serve::serve(
            services,
            tokens,
            listener,
            "serve-bench".into(),
            async move {
                let _ = stopped.await;
            },
        ));
        addr
    });
    let (status, body) = http(
        &addr,
        "POST",
        "/v1/repos",
        &json!({"name": "app", "source": repo.path().to_str().unwrap()}),
    );
    assert_eq!(status, 201, "{body}");
    let task = json!({"kind": "question", "repo": "app", "prompt": "what does f return?"});
    let mut samples = Vec::new();
    // The first task builds the snapshot; the rest find it warm.
    for n in 0..=tasks {
        let before = model.requests().len();
        let started = Instant::now();
        let (status, body) = http(&addr, "POST", "/v1/tasks", &task);
        assert_eq!(status, 202, "{body}");
        while model.requests().len() == before {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "no model request"
            );
            std::hint::spin_loop();
        }
        let elapsed = started.elapsed();
        if n > 0 {
            samples.push(elapsed);
        }
        // Let the run finish before the next submission.
        let id = body["id"].as_str().unwrap().to_string();
        loop {
            let (_, current) = http(&addr, "GET", &format!("/v1/tasks/{id}"), &Value::Null);
            if current["status"] == "completed" {
                break;
            }
            assert_ne!(current["status"], "failed", "{current}");
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the task did not finish: {current}"
            );
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "submission -> first model request, warm snapshot, sandbox {sandbox}, {tasks} tasks: \
         median {:.1} ms, p90 {:.1} ms, min {:.1} ms, max {:.1} ms (goal: median <= 50 ms)",
        ms(samples[samples.len() / 2]),
        ms(samples[samples.len() * 9 / 10]),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
    );
    let _ = stop.send(());
    runtime.shutdown_timeout(Duration::from_secs(5));
}

fn idle_rss(warden: &str) {
    let home = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(warden)
        .arg("serve")
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("WARDEN_HOME", home.path())
        .env("WARDEN_MODEL", "faux")
        .env("WARDEN_LISTEN", "127.0.0.1:0")
        .env("WARDEN_API_TOKENS", format!("bench:admin:{TOKEN}"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its stderr is read to the end on a thread: a pipe closed after "listening on" would make
    // the server's next line fail (and the server exit) before it is measured.
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let (listening, started) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in stderr.lines().map_while(Result::ok) {
            if line.contains("listening on") {
                let _ = listening.send(());
            }
        }
    });
    started
        .recv_timeout(Duration::from_secs(60))
        .expect("warden serve did not say it listens");
    std::thread::sleep(Duration::from_secs(1));
    let status = std::fs::read_to_string(format!("/proc/{}/status", child.id())).unwrap();
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .unwrap_or("VmRSS: ?")
        .split_whitespace()
        .nth(1)
        .unwrap_or("?")
        .to_string();
    assert!(rss.parse::<u64>().is_ok(), "no VmRSS for warden serve");
    println!("idle warden serve ({warden}): VmRSS {rss} kB (goal: <= 40 MB)");
    child.kill().unwrap();
    child.wait().unwrap();
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut tasks = 30;
    let mut warden = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--smoke" => tasks = 2,
            "--tasks" => tasks = iter.next().and_then(|n| n.parse().ok()).unwrap_or(tasks),
            "--warden" => warden = iter.next().cloned(),
            other => panic!("unknown argument {other}"),
        }
    }
    latency(tasks.max(1));
    match warden {
        Some(warden) => idle_rss(&warden),
        None => println!("skipped: idle RSS of warden serve (no --warden PATH)"),
    }
}
