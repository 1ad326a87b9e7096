//! Benchmarks of the web console (run by hand; figures are printed, never asserted):
//! 1. What a phone downloads for a task page: the HTML of `GET /tasks/{id}` for a change task
//!    with a proposal (a ~250-line diff, two validations with their output), plus `app.js` and
//!    `app.css`, uncompressed. Goal: ≤ 100 KB.
//! 2. Server time to render `GET /tasks/{id}` (session cookie) for that task with 1,000 stored
//!    events, next to `GET /v1/tasks/{id}` (bearer token; the API's JSON of the same task) and
//!    `GET /v1/tasks/{id}/diff` measured in the same run: the ratio says what the page costs
//!    over the API. Goal: page p50 ≤ 20 ms.
//! 3. Live timeline latency: from `append_event` to the SSE message arriving on
//!    `GET /v1/tasks/{id}/events` read with the session cookie, as `app.js` reads it.
//!
//! Everything runs in one process through the real router (`Router::oneshot`, so no socket or
//! HTTP parsing is counted), on the SQLite store with the hub, a real git mirror for the diff.
//!
//! `cargo run --release -p warden-api --example console_bench -- [--requests N] [--events N]`
//! (`--smoke`: 3 requests each, 20 stored events, 5 live events, every answer checked)

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::disallowed_methods)]

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use futures_util::StreamExt;
use serde_json::json;
use tokio::sync::Notify;
use tower::ServiceExt;
use warden_api::routes::{router, ApiState, Tokens};
use warden_engine::redact::Redactor;
use warden_protocol::{
    ChangeOutcome, ChangeResult, ChangedFile, DiffStat, Event, Proposal, Publication,
    PublicationStatus, TaskId, TaskKind, TaskStatus, Usage, Validation,
};
use warden_repo::{RepoSpec, RepoStore};
use warden_service::config::serve::RateLimit;
use warden_service::hub::{self, HubOptions};
use warden_service::tasks::TaskService;
use warden_store::{new_task_id, ClaimFilter, NewRepo, NewTask, Store, TaskRepo};
use warden_test_support::git_fixture::TempRepo;

const TOKEN: &str = "bench-token-0123456789-0123456789";

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map_or(default, |v| v.parse().unwrap())
}

fn now_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_micros() as u64
}

/// A source file of `lines` lines, `variant` changing every fourth one.
fn source(name: &str, lines: usize, variant: &str) -> String {
    (0..lines)
        .map(|i| {
            if i % 4 == 0 {
                format!("    let {name}_{i} = compute_{variant}({i}, \"{name}\");\n")
            } else {
                format!("    // {name}: line {i} of the scheduler's bookkeeping\n")
            }
        })
        .collect()
}

async fn get(router: &Router, uri: &str, header: (&str, &str)) -> (StatusCode, Vec<u8>) {
    let request = Request::builder()
        .uri(uri)
        .header(header.0, header.1)
        .body(Body::empty())
        .unwrap();
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, bytes.to_vec())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// p50, p90, p99 in ms of `samples` (seconds).
fn summary(samples: &mut [f64]) -> (f64, f64, f64) {
    samples.sort_by(f64::total_cmp);
    (
        percentile(samples, 0.5) * 1000.0,
        percentile(samples, 0.9) * 1000.0,
        percentile(samples, 0.99) * 1000.0,
    )
}

struct Fixture {
    router: Router,
    store: Arc<dyn Store>,
    cookie: String,
    change: TaskId,
    diff_bytes: usize,
    _home: tempfile::TempDir,
    _repo: TempRepo,
}

async fn fixture(events: u64) -> Fixture {
    let home = tempfile::tempdir().unwrap();
    let store = warden_store::open(&format!(
        "sqlite://{}",
        home.path().join("warden.db").display()
    ))
    .await
    .unwrap();
    let hub = hub::instrument(&store, HubOptions::default());

    // A repository whose change touches five files and adds one: a ~250-line diff.
    let repo = TempRepo::new();
    let files = ["queue", "lease", "claim", "budget", "report"];
    for name in files {
        repo.write(&format!("src/{name}.rs"), &source(name, 80, "old"));
    }
    let base = repo.commit("initial");
    for name in files {
        repo.write(&format!("src/{name}.rs"), &source(name, 80, "new"));
    }
    repo.write("src/fairness.rs", &source("fairness", 60, "new"));
    let commit = repo.commit("share the queue fairly between owners");
    let repos = RepoStore::open(home.path()).unwrap();
    let mut spec =
        RepoSpec::parse(repo.path().to_str().unwrap(), std::path::Path::new("/")).unwrap();
    spec.name = "app".into();
    spec.rev = Some(commit.clone());
    let mirror = repos.pin(&spec).unwrap().mirror;
    store
        .register_repo(NewRepo {
            name: "app".into(),
            source: repo.path().to_str().unwrap().into(),
            branch: None,
            checks: vec![],
            mounts: vec![],
            prepare: vec![],
            created_by: "bench".into(),
        })
        .await
        .unwrap();

    let tasks = TaskService::new(Arc::clone(&store), Arc::new(Notify::new()))
        .with_repos(repos.clone(), Redactor::new(Vec::<String>::new()));
    let state = Arc::new(
        ApiState::new(
            tasks,
            Tokens::parse(&format!("bench:admin:{TOKEN}")).unwrap(),
        )
        .with_rate_limit(RateLimit {
            per_minute: 1_000_000_000,
            burst: 1_000_000_000,
        })
        .with_hub(hub),
    );
    let signed = state.access.sign_in_token(TOKEN, None, None).await.unwrap();

    // The change task: its events while it ran, then its proposal.
    let change = new_task_id().unwrap();
    store
        .create_task(
            NewTask {
                id: change.clone(),
                kind: TaskKind::Change,
                owner: "bench".into(),
                prompt: "Make the scheduler share the queue fairly between owners, so one \
                         owner's burst of tasks cannot starve the others."
                    .into(),
                repos: vec![TaskRepo {
                    name: "app".into(),
                    rev: None,
                    commit: Some(base.clone()),
                    source: None,
                }],
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
    let claim = store
        .claim("bench", Duration::from_secs(600), &ClaimFilter::default())
        .await
        .unwrap()
        .unwrap();
    for n in 0..events {
        store
            .append_event(
                &change,
                Event::AgentMessage {
                    text: format!("step {n}: reading src/queue.rs around the claim loop"),
                },
            )
            .await
            .unwrap();
    }
    let reference = format!("refs/warden/proposals/{change}");
    let git_dir = format!("--git-dir={}", mirror.display());
    repos
        .git()
        .run(&mirror, &[&git_dir, "update-ref", &reference, &commit])
        .unwrap();
    let tail: String = (0..40)
        .map(|i| format!("test scheduler::fairness::case_{i} ... ok\n"))
        .collect();
    let validation = |command: &str| Validation {
        command: command.into(),
        exit_code: Some(0),
        tree: "e".repeat(40),
        config_hash: "f".repeat(16),
        sandbox: "linux".into(),
        duration_ms: 41_200,
        output_tail: tail.clone(),
        reused: false,
    };
    let mut changed: Vec<ChangedFile> = files
        .iter()
        .map(|name| ChangedFile {
            path: format!("src/{name}.rs"),
            status: "modified".into(),
            additions: Some(20),
            deletions: Some(20),
        })
        .collect();
    changed.push(ChangedFile {
        path: "src/fairness.rs".into(),
        status: "added".into(),
        additions: Some(60),
        deletions: Some(0),
    });
    let result = ChangeResult {
        task_id: change.clone(),
        kind: TaskKind::Change,
        outcome: ChangeOutcome::Proposal {
            proposal: Box::new(Proposal {
                id: "prp_bench".into(),
                repo: "app".into(),
                base_commit: base,
                commit,
                tree: "e".repeat(40),
                reference,
                diff_stat: DiffStat {
                    files_changed: 6,
                    additions: 160,
                    deletions: 100,
                },
                files: changed,
                summary: "Claims now take the oldest task of the owner with the fewest \
                          running tasks; a new fairness module keeps the counts."
                    .into(),
                hash: format!("sha256:{}", "a".repeat(64)),
                validations: vec![validation("cargo test"), validation("cargo clippy")],
                sensitive_files: vec![],
            }),
            publication: Publication {
                status: PublicationStatus::NotRequested,
                branch: None,
                pr_url: None,
            },
        },
        baseline: vec![],
        approval: None,
        usage: Usage {
            input_tokens: 412_000,
            cached_input_tokens: 300_000,
            output_tokens: 18_000,
            cost_usd: Some(1.2345),
            model_calls: 42,
            tool_calls: 97,
            ..Usage::default()
        },
        model: "bench-model".into(),
        sandbox: None,
        notices: vec![],
        maintenance: None,
        gate: None,
        review: None,
    };
    store
        .finish_run(
            &claim.run(),
            "bench",
            TaskStatus::Completed,
            Some(serde_json::to_value(&result).unwrap()),
        )
        .await
        .unwrap();
    let router = router(state);
    let (status, diff) = get(
        &router,
        &format!("/v1/tasks/{change}/diff"),
        ("authorization", &format!("Bearer {TOKEN}")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&diff));
    let diff: serde_json::Value = serde_json::from_slice(&diff).unwrap();
    Fixture {
        router,
        store,
        cookie: format!("warden_session={}", signed.secret),
        change,
        diff_bytes: diff["diff"].as_str().unwrap().len(),
        _home: home,
        _repo: repo,
    }
}

fn main() {
    // A panic in the spawned stream reader fails the run.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        default_hook(info);
        std::process::exit(101);
    }));
    let smoke = std::env::args().any(|a| a == "--smoke");
    let requests = arg("--requests", if smoke { 3 } else { 300 });
    let events = arg("--events", if smoke { 20 } else { 1000 });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        println!(
            "{} cores; SQLite store with the hub; in-process requests (Router::oneshot)",
            std::thread::available_parallelism().map_or(0, |n| n.get())
        );
        let fixture = fixture(events).await;
        let cookie = ("cookie", fixture.cookie.as_str());
        let bearer = format!("Bearer {TOKEN}");
        let token = ("authorization", bearer.as_str());
        let page_uri = format!("/tasks/{}", fixture.change);

        // 1. Bytes.
        let (status, page) = get(&fixture.router, &page_uri, cookie).await;
        assert_eq!(status, StatusCode::OK);
        let page = String::from_utf8(page).unwrap();
        let asset = |extension: &str| -> String {
            page.split('"')
                .find(|part| part.starts_with("/assets/app.") && part.ends_with(extension))
                .unwrap()
                .to_string()
        };
        let (_, js) = get(&fixture.router, &asset(".js"), cookie).await;
        let (_, css) = get(&fixture.router, &asset(".css"), cookie).await;
        let total = page.len() + js.len() + css.len();
        println!(
            "1. task page of a change with a proposal ({} bytes of diff, 2 validations): HTML \
             {} B + app.js {} B + app.css {} B = {:.1} KB uncompressed (goal ≤ 100 KB)",
            fixture.diff_bytes,
            page.len(),
            js.len(),
            css.len(),
            total as f64 / 1024.0
        );

        // 2. Render time, interleaved with the API's JSON and diff of the same task.
        let api_uri = format!("/v1/tasks/{}", fixture.change);
        let diff_uri = format!("/v1/tasks/{}/diff", fixture.change);
        for _ in 0..requests.min(20) {
            get(&fixture.router, &page_uri, cookie).await;
            get(&fixture.router, &api_uri, token).await;
        }
        let (mut page_times, mut api_times, mut diff_times) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..requests {
            for (uri, header, times) in [
                (&page_uri, cookie, &mut page_times),
                (&api_uri, token, &mut api_times),
                (&diff_uri, token, &mut diff_times),
            ] {
                let started = Instant::now();
                let (status, _) = get(&fixture.router, uri, header).await;
                times.push(started.elapsed().as_secs_f64());
                assert_eq!(status, StatusCode::OK, "{uri}");
            }
        }
        let (page50, page90, page99) = summary(&mut page_times);
        let (api50, api90, api99) = summary(&mut api_times);
        let (diff50, diff90, diff99) = summary(&mut diff_times);
        println!(
            "2. {requests} requests each, the task with {events} stored events:\n   \
             GET /tasks/{{id}} (cookie)      p50 {page50:.2} ms, p90 {page90:.2} ms, p99 {page99:.2} ms (goal p50 ≤ 20 ms)\n   \
             GET /v1/tasks/{{id}} (token)    p50 {api50:.2} ms, p90 {api90:.2} ms, p99 {api99:.2} ms\n   \
             GET /v1/tasks/{{id}}/diff       p50 {diff50:.2} ms, p90 {diff90:.2} ms, p99 {diff99:.2} ms\n   \
             page / API JSON: {:.1}× at p50; page / (JSON + diff): {:.2}× (the page reads the \
             diff from the git mirror, a git process per view)",
            page50 / api50,
            page50 / (api50 + diff50)
        );

        // 3. Live timeline latency, read with the cookie.
        let live = new_task_id().unwrap();
        fixture
            .store
            .create_task(
                NewTask {
                    id: live.clone(),
                    kind: TaskKind::Question,
                    owner: "bench".into(),
                    prompt: "live".into(),
                    repos: vec![],
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
        let request = Request::builder()
            .uri(format!("/v1/tasks/{live}/events"))
            .header("cookie", &fixture.cookie)
            .body(Body::empty())
            .unwrap();
        let response = fixture.router.clone().oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let mut stream = response.into_body().into_data_stream();
        let (latency_tx, mut latency_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut buffer = String::new();
            while let Some(Ok(chunk)) = stream.next().await {
                let received = now_micros();
                buffer.push_str(std::str::from_utf8(&chunk).unwrap());
                while let Some(end) = buffer.find("\n\n") {
                    let message: String = buffer.drain(..end + 2).collect();
                    if let Some(start) = message.find("\"text\":\"live ") {
                        let rest = &message[start + 13..];
                        let stamp: u64 = rest[..rest.find('"').unwrap()].parse().unwrap();
                        let _ = latency_tx.send(received.saturating_sub(stamp) as f64 / 1e6);
                    }
                }
            }
        });
        let count = if smoke { 5 } else { 200 };
        for _ in 0..count {
            fixture
                .store
                .append_event(
                    &live,
                    Event::AgentMessage {
                        text: format!("live {}", now_micros()),
                    },
                )
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut latencies = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while latencies.len() < count {
            match tokio::time::timeout_at(deadline, latency_rx.recv()).await {
                Ok(Some(seconds)) => latencies.push(seconds),
                _ => break,
            }
        }
        if latencies.len() < count {
            eprintln!(
                "FAILED: 3. {} of {count} events arrived on the stream",
                latencies.len()
            );
            std::process::exit(1);
        } else {
            let received = latencies.len();
            let (p50, p90, p99) = summary(&mut latencies);
            println!(
                "3. append_event → SSE message on /v1/tasks/{{id}}/events (cookie): {received} of \
                 {count} received; p50 {p50:.2} ms, p90 {p90:.2} ms, p99 {p99:.2} ms, max {:.2} ms",
                latencies.last().unwrap() * 1000.0
            );
        }
    });
    // The open stream is dropped with the runtime.
    runtime.shutdown_timeout(Duration::from_secs(1));
}
