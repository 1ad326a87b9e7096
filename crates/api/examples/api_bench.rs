//! Benchmarks of the HTTP API (run by hand; never timing assertions in tests):
//! 1. `GET /v1/tasks/{id}` throughput with `wrk`, next to `GET /healthz` measured in the same
//!    run (the ratio says what authentication, the store read and the JSON cost). Goal: ≥ 10,000
//!    requests/s for the task route on 2 cores.
//! 2. 1,000 concurrent SSE subscribers to `/v1/events`: the server appends events (stamped with
//!    the time of the append) and every subscriber measures when each arrives: delivery latency
//!    p50/p99 (goal p99 ≤ 100 ms); and the server's RSS growth per idle keep-alive connection
//!    and per idle stream, its connection included (goal ≤ 20 kB each).
//!
//! The server runs in a child process (this example with `--server`) so its RSS is its own; it
//! uses the real router, the SQLite store, the hub and the accept loop
//! ([`warden_api::connections::serve_connections`], with the connection cap it would compute
//! here), as `warden serve` does. Client, server and `wrk` share the machine: on 2 cores the
//! figures are lower bounds. The idle connections each made one authenticated request first, as
//! API clients do (the server sheds anonymous connections of one address beyond its share).
//!
//! The server keeps its per-token cap on open streams
//! ([`warden_service::config::serve::DEFAULT_MAX_STREAMS_PER_TOKEN`]): the subscribers share one
//! bootstrap token per that many streams, as many clients of one deployment would.
//!
//! `cargo run --release -p warden-api --example api_bench -- [--subscribers N]
//! [--events N] [--seconds N] [--connections N] [--batch N]` (`--batch`: connections opened
//! at a time, default 50). `--smoke`: one small round of every part (32 subscribers on two
//! tokens, 3 events, 1 s of `wrk` if installed), failing on a wrong answer, never on a time.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;
use warden_api::connections::{self, ConnectionLimits};
use warden_api::routes::{router, ApiState, Tokens};
use warden_protocol::{Event, TaskKind};
use warden_service::config::serve::{RateLimit, DEFAULT_MAX_STREAMS_PER_TOKEN};
use warden_service::hub::{self, HubOptions};
use warden_service::tasks::TaskService;
use warden_store::new_task_id;
use warden_store::NewTask;

const TOKEN: &str = "bench-token-0123456789-0123456789";

/// The bootstrap token the `index`th subscriber streams with: `DEFAULT_MAX_STREAMS_PER_TOKEN`
/// subscribers share each, so none is refused with 429 `too_many_streams`.
fn stream_token(index: u64) -> String {
    format!(
        "{TOKEN}-{}",
        index / u64::from(DEFAULT_MAX_STREAMS_PER_TOKEN)
    )
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

// --- the server process ---

/// Serves the API with `TOKEN` and `stream_tokens` stream tokens; prints `READY <addr> <task>`;
/// on `append N` appends N stamped events 100 ms apart and prints `DONE`.
fn server(stream_tokens: u64) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (store, task) = runtime.block_on(async {
        let store = warden_store::open(&format!(
            "sqlite://{}",
            dir.path().join("warden.db").display()
        ))
        .await
        .unwrap();
        let hub = hub::instrument(&store, HubOptions::default());
        let task = new_task_id().unwrap();
        store
            .create_task(
                NewTask {
                    id: task.clone(),
                    kind: TaskKind::Question,
                    owner: "bench".into(),
                    prompt: "How does the scheduler pick the next task?".into(),
                    repos: vec![],
                    priority: 0,
                    follow_up_to: None,
                    retry_of: None,
                    metadata: serde_json::json!({"source": "api_bench"}),
                    callback_url: None,
                },
                None,
            )
            .await
            .unwrap();
        let state = ApiState::new(
            TaskService::new(Arc::clone(&store), Arc::new(Notify::new())),
            Tokens::parse(
                &std::iter::once(format!("bench:admin:{TOKEN}"))
                    .chain((0..stream_tokens).map(|n| {
                        format!(
                            "stream-{n}:admin:{}",
                            stream_token(n * u64::from(DEFAULT_MAX_STREAMS_PER_TOKEN))
                        )
                    }))
                    .collect::<Vec<_>>()
                    .join(","),
            )
            .unwrap(),
        )
        .with_rate_limit(RateLimit {
            per_minute: 1_000_000_000,
            burst: 1_000_000_000,
        })
        .with_hub(hub);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // The accept loop `warden serve` runs, with the cap it would compute here.
        let limits = ConnectionLimits {
            max_connections: connections::connection_cap(connections::raise_open_files_limit(), 2),
            ..ConnectionLimits::default()
        };
        tokio::spawn(connections::serve_connections(
            listener,
            router(Arc::new(state)),
            limits,
            std::future::pending(),
        ));
        println!("READY {addr} {task}");
        std::io::stdout().flush().unwrap();
        (store, task)
    });
    for line in std::io::stdin().lock().lines() {
        let line = line.unwrap();
        let Some(count) = line.trim().strip_prefix("append ") else {
            continue;
        };
        let count: u64 = count.parse().unwrap();
        runtime.block_on(async {
            for _ in 0..count {
                store
                    .append_event(
                        &task,
                        Event::AgentMessage {
                            text: format!("bench {}", now_micros()),
                        },
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        println!("DONE");
        std::io::stdout().flush().unwrap();
    }
}

// --- the client ---

fn rss_kb(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `wrk` on `path`: requests per second and the non-2xx count.
fn wrk(addr: &str, path: &str, seconds: u64, connections: u64) -> Option<(f64, u64, String)> {
    let output = Command::new("wrk")
        .args([
            "-t2",
            &format!("-c{connections}"),
            &format!("-d{seconds}s"),
            "--latency",
            "-H",
            &format!("Authorization: Bearer {TOKEN}"),
            &format!("http://{addr}{path}"),
        ])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout).to_string();
    let rate = text
        .lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())?;
    let errors = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let latency = text
        .lines()
        .filter(|l| l.trim_start().starts_with("50%") || l.trim_start().starts_with("99%"))
        .map(str::trim)
        .collect::<Vec<_>>()
        .join(", ");
    Some((rate, errors, latency))
}

/// An idle keep-alive connection after one authenticated `GET /v1/tasks/{id}`, as an API
/// client leaves it: what a connection costs the server without a stream. (With a token: the
/// server sheds anonymous connections of one address beyond its share, a sixteenth of the cap.)
async fn idle_connection(addr: String, task: String, connected: tokio::sync::mpsc::Sender<()>) {
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "GET /v1/tasks/{task} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let mut chunk = [0u8; 4096];
    // The whole response (its head and its JSON body, by its length) before going idle.
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "the server closed the connection");
        response.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&response);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            continue;
        };
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .expect("a content-length");
        if body.len() >= length {
            assert!(body.contains(&task), "{body}");
            break;
        }
    }
    connected.send(()).await.unwrap();
    // Held open until the process exits.
    let _ = stream.read(&mut chunk).await;
}

/// One subscriber: connects, then reports the latency of every stamped event it receives.
async fn subscriber(
    addr: String,
    token: String,
    connected: tokio::sync::mpsc::Sender<()>,
    latencies: tokio::sync::mpsc::UnboundedSender<u64>,
) {
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    // HTTP/1.0: the body is not chunked, the SSE text arrives as is.
    let request =
        format!("GET /v1/events HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut buffer = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    let mut head_seen = false;
    loop {
        let n = stream.read(&mut chunk).await.unwrap();
        if n == 0 {
            return;
        }
        let received = now_micros();
        buffer.extend_from_slice(&chunk[..n]);
        if !head_seen {
            let Some(end) = buffer.windows(4).position(|w| w == b"\r\n\r\n") else {
                continue;
            };
            assert!(
                buffer.starts_with(b"HTTP/1.0 200") || buffer.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&buffer)
            );
            buffer.drain(..end + 4);
            head_seen = true;
            connected.send(()).await.unwrap();
        }
        while let Some(end) = buffer.windows(2).position(|w| w == b"\n\n") {
            let message: Vec<u8> = buffer.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&message);
            if let Some(start) = text.find("\"text\":\"bench ") {
                let rest = &text[start + 14..];
                let stamp: u64 = rest[..rest.find('"').unwrap()].parse().unwrap();
                let _ = latencies.send(received.saturating_sub(stamp));
            }
        }
    }
}

fn percentile(sorted: &[u64], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index] as f64 / 1000.0
}

/// `GET /v1/tasks/{id}` once, checked to be the task's JSON: the answer `wrk` then times.
fn check_task_route(addr: &str, task: &str) {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    let request = format!(
        "GET /v1/tasks/{task} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAuthorization: Bearer {TOKEN}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    std::io::Read::read_to_string(&mut stream, &mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    let view: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(view["id"], task, "{body}");
}

fn main() {
    // A panic in a spawned connection task fails the run instead of leaving it waiting.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));
    if std::env::args().any(|a| a == "--server") {
        server(arg("--stream-tokens", 1));
        return;
    }
    let smoke = std::env::args().any(|a| a == "--smoke");
    let subscribers = arg("--subscribers", if smoke { 32 } else { 1000 });
    let events = arg("--events", if smoke { 3 } else { 20 });
    let seconds = arg("--seconds", if smoke { 1 } else { 10 });
    let connections = arg("--connections", if smoke { 8 } else { 64 });
    let batch = arg("--batch", if smoke { 16 } else { 50 }).max(1);
    let stream_tokens = subscribers
        .div_ceil(u64::from(DEFAULT_MAX_STREAMS_PER_TOKEN))
        .max(1);

    let mut child = Command::new(std::env::current_exe().unwrap())
        .arg("--server")
        .args(["--stream-tokens", &stream_tokens.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut child_in = child.stdin.take().unwrap();
    let mut child_out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    child_out.read_line(&mut line).unwrap();
    let mut parts = line.split_whitespace().skip(1);
    let addr = parts.next().unwrap().to_string();
    let task = parts.next().unwrap().to_string();
    println!(
        "server pid {pid} on {addr}; {} cores; {subscribers} subscribers on {stream_tokens} \
         tokens (at most {DEFAULT_MAX_STREAMS_PER_TOKEN} streams each)",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    check_task_route(&addr, &task);

    // 1. Throughput.
    let task_path = format!("/v1/tasks/{task}");
    match (
        wrk(&addr, "/healthz", seconds, connections),
        wrk(&addr, &task_path, seconds, connections),
    ) {
        (Some((health, health_errors, health_latency)), Some((task_rate, errors, latency))) => {
            assert_eq!(
                health_errors + errors,
                0,
                "wrk saw responses other than 200"
            );
            println!(
                "GET /healthz:        {health:>9.0} req/s ({health_errors} non-2xx; {health_latency})"
            );
            println!("GET /v1/tasks/{{id}}: {task_rate:>9.0} req/s ({errors} non-2xx; {latency})");
            println!(
                "task route / healthz: {:.2} (wrk -t2 -c{connections} -d{seconds}s, same machine)",
                task_rate / health
            );
        }
        _ => println!("skipped: wrk is not installed (apt-get install -y wrk), no throughput"),
    }

    // 2. SSE fan-out.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        tokio::time::sleep(Duration::from_millis(if smoke { 100 } else { 500 })).await;
        let before = rss_kb(pid);
        // Connections are opened in batches of `batch` so the transient memory of handling
        // many requests at once (which the allocator keeps) does not count as theirs.
        let (idle_tx, mut idle) = tokio::sync::mpsc::channel(subscribers as usize);
        for start in (0..subscribers).step_by(batch as usize) {
            let count = batch.min(subscribers - start);
            for _ in 0..count {
                tokio::spawn(idle_connection(addr.clone(), task.clone(), idle_tx.clone()));
            }
            for _ in 0..count {
                idle.recv().await.unwrap();
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let plain = rss_kb(pid);
        println!(
            "server RSS {before} kB → {plain} kB with {subscribers} idle keep-alive connections (no stream): {:.1} kB per connection",
            (plain.saturating_sub(before)) as f64 / subscribers as f64
        );
        let before = plain;
        let (connected_tx, mut connected) = tokio::sync::mpsc::channel(subscribers as usize);
        let (latency_tx, mut latency_rx) = tokio::sync::mpsc::unbounded_channel();
        let started = Instant::now();
        for start in (0..subscribers).step_by(batch as usize) {
            let count = batch.min(subscribers - start);
            for index in start..start + count {
                tokio::spawn(subscriber(
                    addr.clone(),
                    stream_token(index),
                    connected_tx.clone(),
                    latency_tx.clone(),
                ));
            }
            for _ in 0..count {
                connected.recv().await.unwrap();
            }
        }
        println!(
            "{subscribers} SSE subscribers connected in {:.0} ms",
            started.elapsed().as_secs_f64() * 1000.0
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle = rss_kb(pid);
        println!(
            "server RSS {before} kB → {idle} kB with {subscribers} idle streams: {:.1} kB per stream",
            (idle.saturating_sub(before)) as f64 / subscribers as f64
        );

        writeln!(child_in, "append {events}").unwrap();
        child_in.flush().unwrap();
        let expected = (subscribers * events) as usize;
        let mut samples = Vec::with_capacity(expected);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while samples.len() < expected {
            match tokio::time::timeout_at(deadline, latency_rx.recv()).await {
                Ok(Some(micros)) => samples.push(micros),
                _ => break,
            }
        }
        samples.sort_unstable();
        if samples.len() < expected {
            eprintln!(
                "FAILED: {} of {expected} events delivered to {subscribers} subscribers within 60 s",
                samples.len()
            );
            let _ = child.kill();
            std::process::exit(1);
        } else {
            println!(
                "delivery of {} events to {subscribers} subscribers: {} of {expected} received; latency p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
                events,
                samples.len(),
                percentile(&samples, 0.50),
                percentile(&samples, 0.99),
                *samples.last().unwrap() as f64 / 1000.0
            );
        }
        println!(
            "server RSS after delivery: {} kB",
            rss_kb(pid)
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    std::process::exit(0);
}
