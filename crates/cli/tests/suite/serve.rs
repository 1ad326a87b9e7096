//! `warden serve` and `warden worker` as a user runs them: the real binary, tasks submitted over
//! HTTP (raw HTTP/1.1 on a `TcpStream`), the faux runner or the scripted model server. Covers
//! results with checked citations, authentication, idempotency, the one-instance lock, SIGTERM,
//! lease expiry, the per-day budget refusing before the model call, and the crash harness:
//! `kill -9` at random points, restart, every accepted task ends exactly once.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::server_harness::{
    open_store, queue_question, runtime, sample_repo, submit_answer, PgSchema, Server, Token,
    Worker, ADMIN, ALICE, BOB,
};
use super::support::Warden;

const TOKENS: &[Token] = &[
    ("root", "admin", ADMIN),
    ("alice", "operator", ALICE),
    ("bob", "operator", BOB),
];

fn write_config(warden: &Warden, text: &str) {
    std::fs::write(warden.home.path().join("warden.toml"), text).unwrap();
}

#[test]
fn serve_answers_questions_over_http_with_checked_citations() {
    let repo = sample_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    let (status, body) = server.request("GET", "/healthz", None, None);
    assert_eq!((status, body), (200, json!({"status": "ok"})));
    server.register("app", &repo);

    let ids: Vec<String> = (0..3)
        .map(|n| {
            server.submit_question(
                ALICE,
                "app",
                &format!("how does retry_with_backoff work? ({n})"),
            )
        })
        .collect();
    for id in &ids {
        let task = server.wait_terminal(ALICE, id);
        assert_eq!(task["status"], "completed", "{task}");
        assert_eq!(task["runs"], 1);
        assert_eq!(task["repos"], json!([{"name": "app", "commit": head}]));
        let result = &task["result"];
        assert_eq!(result["task_id"], id.as_str());
        assert_eq!(result["outcome"], "answer");
        assert_eq!(result["model"], "faux");
        let evidence = &result["answer"]["claims"][0]["evidence"][0];
        assert_eq!(evidence["repo"], "app");
        assert_eq!(evidence["commit"], head.as_str());
        assert_eq!(evidence["path"], "src/lib.rs");
        assert!(evidence["start_line"].as_u64().unwrap() >= 28, "{evidence}");
    }
    let (status, list) = server.request("GET", "/v1/tasks?limit=2", Some(ALICE), None);
    assert_eq!(status, 200);
    assert_eq!(list["data"].as_array().unwrap().len(), 2);
    assert_eq!(list["next_cursor"], ids[1].as_str());

    // Authentication: no token, a wrong token, someone else's task.
    let task_path = format!("/v1/tasks/{}", ids[0]);
    let (status, body) = server.request("GET", &task_path, None, None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("unauthorized"))
    );
    let (status, _) = server.request("GET", &task_path, Some("wrong-token-0123456789"), None);
    assert_eq!(status, 401);
    let (status, body) = server.request("GET", &task_path, Some(BOB), None);
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (404, Some("not_found"))
    );
    let (_, bobs) = server.request("GET", "/v1/tasks", Some(BOB), None);
    assert_eq!(bobs["data"], json!([]));

    // Idempotency: the same key and body is the same task, run once.
    let body = json!({"kind": "question", "repo": "app", "prompt": "once only"});
    let key = [("Idempotency-Key", "abc-123")];
    let (s1, first) = server.request_with("POST", "/v1/tasks", Some(ALICE), Some(&body), &key);
    let (s2, second) = server.request_with("POST", "/v1/tasks", Some(ALICE), Some(&body), &key);
    assert_eq!((s1, s2), (202, 202));
    assert_eq!(first["id"], second["id"]);
    let other = json!({"kind": "question", "repo": "app", "prompt": "something else"});
    let (s3, conflict) = server.request_with("POST", "/v1/tasks", Some(ALICE), Some(&other), &key);
    assert_eq!(
        (s3, conflict["error"]["code"].as_str()),
        (422, Some("idempotency_conflict"))
    );
    let once = server.wait_terminal(ALICE, first["id"].as_str().unwrap());
    assert_eq!(once["runs"], 1);

    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("warden: stopped"), "{stderr}");
    let (runtime, store) = open_store(&warden);
    runtime.block_on(store.check_integrity()).unwrap();
    // Each run's journal and events are in the store, complete, before the run finished.
    for id in &ids {
        let id: warden_protocol::TaskId = id.parse().unwrap();
        let run = warden_store::RunRef {
            task: id.clone(),
            number: 1,
        };
        let journal = runtime.block_on(store.journal(&run)).unwrap();
        warden_store::journal::verify_chain(&journal).unwrap();
        assert_eq!(journal.first().unwrap().kind, "run_started");
        assert_eq!(journal.last().unwrap().kind, "run_finished");
        assert!(journal.iter().any(|r| r.kind == "model_decision"));
        let events = runtime
            .block_on(store.events_after(&warden_store::EventStream::Task(id), 0, 1000))
            .unwrap();
        let kinds: Vec<Value> = events
            .iter()
            .map(|e| serde_json::to_value(&e.event).unwrap()["type"].clone())
            .collect();
        assert_eq!(kinds.first().unwrap(), "task_started", "{kinds:?}");
        assert_eq!(kinds.last().unwrap(), "task_finished", "{kinds:?}");
        assert!(kinds.iter().any(|k| k == "tool_finished"), "{kinds:?}");
        let seqs: Vec<u64> = events.iter().map(|e| e.task_seq).collect();
        assert_eq!(seqs, (1..=events.len() as u64).collect::<Vec<_>>());
    }
}

#[test]
fn a_second_serve_on_the_same_home_is_refused() {
    let warden = Warden::faux();
    let first = Server::start(&warden, TOKENS);
    let Err((code, stderr)) = Server::try_start(&warden, TOKENS) else {
        panic!("a second serve started on the same WARDEN_HOME");
    };
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("another warden serve"), "{stderr}");
    assert!(stderr.contains(&first.pid().to_string()), "{stderr}");
    let (code, _) = first.terminate();
    assert_eq!(code, Some(0));
    // Once the first is gone, the home is free again.
    Server::start(&warden, TOKENS).terminate();
}

/// A server whose stderr goes away (a log shipper that restarted, `warden serve 2>&1 | head`)
/// keeps serving: its lines are best effort, and it still stops cleanly on SIGTERM.
#[test]
fn serve_keeps_serving_after_its_stderr_is_closed() {
    use std::io::{BufRead, BufReader, Read, Write};
    let warden = Warden::faux();
    let mut child = warden
        .command(&["serve"])
        .env("WARDEN_LISTEN", "127.0.0.1:0")
        .env("WARDEN_API_TOKENS", format!("root:admin:{ADMIN}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let prefix = "warden: listening on http://";
    let address = loop {
        let mut line = String::new();
        assert_ne!(stderr.read_line(&mut line).unwrap(), 0, "serve ended");
        if let Some(address) = line.trim().strip_prefix(prefix) {
            break address.to_string();
        }
    };
    drop(stderr);
    // Requests make the server log; with no reader each line is a broken pipe.
    for _ in 0..3 {
        let mut stream = TcpStream::connect(&address).unwrap();
        write!(
            stream,
            "GET /v1/tasks HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {ADMIN}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut reply = String::new();
        stream.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    }
    super::support::signal(child.id(), "TERM");
    let deadline = Instant::now() + Duration::from_secs(30);
    let exit = loop {
        if let Some(exit) = child.try_wait().unwrap() {
            break exit;
        }
        assert!(Instant::now() < deadline, "serve did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(exit.code(), Some(0), "{exit:?}");
}

/// With Telegram, Slack and the GitHub webhook configured as the docs show and none of their
/// secrets in the environment, `serve` names all five at once and exits 2 before it listens
/// (it used to print its address, then stop at the first, one secret per start).
#[test]
fn serve_refuses_with_every_missing_secret_at_once_before_listening() {
    let warden = Warden::faux();
    write_config(
        &warden,
        "[telegram]\n[[telegram.users]]\nid = 1\nname = \"alice\"\nrole = \"admin\"\n\n\
         [slack]\n[[slack.users]]\nid = \"U0ALICE\"\nname = \"alice\"\nrole = \"admin\"\n\n\
         [github.webhook]\n",
    );
    let warden = warden
        .with(
            "WARDEN_API_TOKENS",
            "root:admin:admin-token-0123456789-0123456789",
        )
        .with("WARDEN_LISTEN", "127.0.0.1:0");
    let run = warden.run(&["serve"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains("cannot start (5 problems"),
        "{}",
        run.stderr
    );
    for variable in [
        "WARDEN_TELEGRAM_TOKEN",
        "WARDEN_SLACK_SIGNING_SECRET",
        "WARDEN_SLACK_BOT_TOKEN",
        "WARDEN_GITHUB_WEBHOOK_SECRET",
        "WARDEN_GITHUB_TOKEN",
    ] {
        assert!(run.stderr.contains(variable), "{variable}: {}", run.stderr);
    }
    assert!(!run.stderr.contains("listening on"), "{}", run.stderr);
    // doctor lists the same, and fails.
    let doctor = warden.run(&["doctor", "--offline"]);
    assert_ne!(doctor.code, 0, "{}", doctor.stdout);
    assert!(
        doctor.stdout.contains("WARDEN_SLACK_BOT_TOKEN"),
        "{}",
        doctor.stdout
    );
}

/// Backup and restore as docs/operations.md tells it: `warden backup DIR` while `warden serve`
/// runs and answers, the backup copied into a new home, and `warden serve` there serves the
/// old tasks with their results; a Postgres URL is refused with the pg_dump pointer, and an
/// existing backup is never overwritten.
#[test]
fn a_backup_taken_while_serving_restores_into_a_new_home_with_every_task() {
    let repo = sample_repo();
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let done = server.submit_question(ALICE, "app", "how does retry_with_backoff work?");
    let done = server.wait_terminal(ALICE, &done);
    assert_eq!(done["status"], "completed", "{done}");
    // Taken while the server runs (and keeps being asked).
    let later = server.submit_question(ALICE, "app", "where is the backoff capped?");
    let backups = tempfile::tempdir().unwrap();
    let target = backups.path().join("today");
    let run = warden.run(&["backup", target.to_str().unwrap(), "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report: Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(
        report["backups"][0]["backup"],
        target.join("warden.db").to_str().unwrap(),
        "{report}"
    );
    server.wait_terminal(ALICE, &later);
    let (code, _) = server.terminate();
    assert_eq!(code, Some(0));
    // Never over an existing backup.
    let again = warden.run(&["backup", target.to_str().unwrap()]);
    assert_eq!(again.code, 2, "{}", again.stderr);
    assert!(again.stderr.contains("exists already"), "{}", again.stderr);
    let postgres = warden
        .command(&["backup", backups.path().join("pg").to_str().unwrap()])
        .env("WARDEN_DATABASE_URL", "postgres://warden@127.0.0.1/warden")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&postgres.stderr);
    assert_eq!(postgres.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("pg_dump"), "{stderr}");

    // Restore: a new home with the backup as its database.
    let restored = Warden::faux();
    std::fs::copy(
        target.join("warden.db"),
        restored.home.path().join("warden.db"),
    )
    .unwrap();
    let server = Server::start(&restored, TOKENS);
    let id = done["id"].as_str().unwrap();
    let task = server.get(ALICE, &format!("/v1/tasks/{id}"));
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["result"], done["result"], "{task}");
    let (status, repos) = server.request("GET", "/v1/repos", Some(ADMIN), None);
    assert_eq!(status, 200, "{repos}");
    assert!(repos.to_string().contains("\"app\""), "{repos}");
    server.terminate();
}

#[test]
fn warden_worker_needs_a_shared_postgres() {
    let warden = Warden::faux();
    let run = warden.run(&["worker"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("WARDEN_DATABASE_URL"), "{}", run.stderr);
    let db = format!("sqlite://{}", warden.home.path().join("w.db").display());
    let run = warden.with("WARDEN_DATABASE_URL", &db).run(&["worker"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("Postgres"), "{}", run.stderr);
}

#[test]
fn sigterm_lets_a_running_task_finish() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )
    .delayed(1_500)]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "how does retry work?");
    while model.requests().is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let addr = server.addr().to_string();
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("shutting down"), "{stderr}");
    // The run finished during the grace period; the API is gone.
    assert!(TcpStream::connect(&addr).is_err());
    let (runtime, store) = open_store(&warden);
    let task = runtime
        .block_on(store.get_task(&id.parse().unwrap()))
        .unwrap()
        .unwrap();
    assert_eq!(task.status, warden_protocol::TaskStatus::Completed);
    assert_eq!(task.runs, 1);
}

#[test]
fn after_the_grace_period_a_run_is_released_and_resumed_without_repeating_model_calls() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "read_file",
            &json!({"path": "src/lib.rs", "start_line": 31, "end_line": 33}).to_string(),
        ),
        // Shutdown comes while the model thinks about its second decision.
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)).delayed(5_000),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    write_config(&warden, "[serve]\nshutdown_grace_secs = 0\n");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ALICE, "app", "how does retry work?");
    while model.requests().len() < 2 {
        std::thread::sleep(Duration::from_millis(20));
    }
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");
    {
        let (runtime, store) = open_store(&warden);
        let task = runtime
            .block_on(store.get_task(&id.parse().unwrap()))
            .unwrap()
            .unwrap();
        assert_eq!(task.status, warden_protocol::TaskStatus::Queued, "released");
        assert_eq!(task.interrupted_runs, 0, "a release is not an interruption");
    }
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_terminal(ALICE, &id);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["runs"], 2);
    // The second run replayed the recorded read_file decision: one more request, not two.
    assert_eq!(model.requests().len(), 3);
    let usage = &task["result"]["usage"];
    assert_eq!(usage["model_calls"], 2, "{usage}");
    server.terminate();
}

#[test]
fn an_expired_lease_puts_the_task_back_and_another_run_finishes_it() {
    let repo = sample_repo();
    let warden = Warden::faux();
    write_config(&warden, "[serve]\nlease_secs = 1\n");
    let id = {
        // A worker that claims the task and dies without a word.
        let (runtime, store) = open_store(&warden);
        runtime.block_on(async {
            let id = queue_question(&*store, &repo, "root", "where is retry_with_backoff?").await;
            let claim = store
                .claim("ghost", Duration::from_secs(1), &Default::default())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(claim.task.id, id);
            id
        })
    };
    let server = Server::start(&warden, TOKENS);
    let task = server.wait_terminal(ALICE, id.as_str());
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(task["runs"], 2);
    server.terminate();
    let (runtime, store) = open_store(&warden);
    let runs = runtime.block_on(store.list_runs(&id)).unwrap();
    assert_eq!(runs[0].worker, "ghost");
    assert_eq!(
        runs[0].outcome.as_deref(),
        Some(warden_store::RUN_INTERRUPTED)
    );
    assert_eq!(runs[1].outcome.as_deref(), Some("completed"));
    let task = runtime.block_on(store.get_task(&id)).unwrap().unwrap();
    assert_eq!(task.interrupted_runs, 1);
}

#[test]
fn the_daily_budget_refuses_before_the_model_is_called() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        // 100 prompt + 20 completion tokens: past the day's 100.
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    write_config(&warden, "[serve]\nmax_tokens_per_day = 100\n");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let first = server.submit_question(ALICE, "app", "first question");
    let task = server.wait_terminal(ALICE, &first);
    assert_eq!(task["status"], "completed", "{task}");
    assert_eq!(model.requests().len(), 1);

    let second = server.submit_question(ALICE, "app", "second question");
    let task = server.wait_terminal(ALICE, &second);
    assert_eq!(task["status"], "failed", "{task}");
    let failure = &task["result"]["failure"];
    assert_eq!(failure["code"], "budget_exceeded", "{failure}");
    let message = failure["message"].as_str().unwrap();
    assert!(
        message.contains("daily") && message.contains("120 tokens spent"),
        "{message}"
    );
    // Refused before the call: the model server saw nothing of the second task.
    assert_eq!(model.requests().len(), 1);
    server.terminate();
}

/// A pseudo-random number in `0..bound` (the tests need no reproducible sequence).
fn random_below(bound: u64) -> u64 {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).unwrap();
    u64::from_le_bytes(bytes) % bound
}

#[test]
fn crash_harness_every_accepted_task_ends_exactly_once_after_repeated_kill_9() {
    const TASKS: usize = 10;
    const KILLS: usize = 5;
    let repo = sample_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    // Every decision takes a moment, so kills land mid-run: a read, then an answer.
    let mut script = Vec::new();
    for _ in 0..200 {
        script.push(
            openai::tool_call(
                "read_file",
                &json!({"path": "src/lib.rs", "start_line": 31, "end_line": 33}).to_string(),
            )
            .delayed(250),
        );
        script.push(
            openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)).delayed(250),
        );
    }
    let model = ScriptedModelServer::start_blocking(script);
    let warden = Warden::openai(&model.url()).with("WARDEN_SANDBOX", "local");
    write_config(&warden, "[serve]\nworkers = 3\n");

    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let mut accepted = Vec::new();
    for n in 0..TASKS {
        accepted.push(server.submit_question(ALICE, "app", &format!("question {n}")));
    }
    let mut server = Some(server);
    for _ in 0..KILLS {
        std::thread::sleep(Duration::from_millis(100 + random_below(900)));
        if let Some(running) = server.take() {
            running.kill();
        }
        server = Some(Server::start(&warden, TOKENS));
    }
    let server = server.unwrap();
    let mut outcomes = Vec::new();
    for id in &accepted {
        let task = server.wait_terminal(ALICE, id);
        let result = &task["result"];
        assert_eq!(result["task_id"], id.as_str(), "{task}");
        match task["status"].as_str().unwrap() {
            "completed" => {
                let evidence = &result["answer"]["claims"][0]["evidence"][0];
                assert_eq!(evidence["commit"], head.as_str(), "{task}");
                assert_eq!(evidence["end_line"], 33);
            }
            // Interrupted by three kills in a row: abandoned, which is an end too.
            "failed" => assert_eq!(result["failure"]["code"], "abandoned", "{task}"),
            other => panic!("task {id} ended {other}: {task}"),
        }
        outcomes.push(task["status"].as_str().unwrap().to_string());
    }
    let (code, stderr) = server.terminate();
    assert_eq!(code, Some(0), "{stderr}");

    let (runtime, store) = open_store(&warden);
    runtime.block_on(store.check_integrity()).unwrap();
    let all = runtime
        .block_on(store.list_tasks(warden_store::TaskQuery {
            limit: 1000,
            ..Default::default()
        }))
        .unwrap();
    assert_eq!(all.len(), TASKS, "a task was lost or duplicated");
    let mut interrupted = 0;
    for id in &accepted {
        let id: warden_protocol::TaskId = id.parse().unwrap();
        let task = runtime.block_on(store.get_task(&id)).unwrap().unwrap();
        let runs = runtime.block_on(store.list_runs(&id)).unwrap();
        assert_eq!(runs.len() as u32, task.runs);
        assert!(
            task.runs >= 1 && task.runs as usize <= KILLS + 1,
            "{} runs",
            task.runs
        );
        assert!(
            runs.iter().all(|r| r.ended_at_ms.is_some()),
            "a run was left open"
        );
        // Exactly one run ended the task; every other one was interrupted.
        let ended: Vec<_> = runs
            .iter()
            .filter(|r| r.outcome.as_deref() != Some(warden_store::RUN_INTERRUPTED))
            .collect();
        match task.status {
            warden_protocol::TaskStatus::Completed => {
                assert_eq!(ended.len(), 1, "{runs:?}");
                assert_eq!(ended[0].outcome.as_deref(), Some("completed"));
            }
            // Abandoned by the store itself: every run was interrupted.
            _ => assert!(ended.is_empty(), "{runs:?}"),
        }
        assert_eq!(task.interrupted_runs as usize, runs.len() - ended.len());
        interrupted += task.interrupted_runs;
    }
    let completed = outcomes.iter().filter(|s| *s == "completed").count();
    eprintln!(
        "crash harness: {completed}/{TASKS} completed, {} abandoned, {interrupted} runs interrupted",
        TASKS - completed
    );
    // The kills landed while tasks ran: the harness tested something.
    assert!(interrupted >= 1);
}

#[test]
fn workers_share_a_postgres_queue_and_a_dead_workers_task_is_finished_by_another() {
    let Some(schema) = PgSchema::create("serve") else {
        return;
    };
    let repo = sample_repo();
    let mut script = Vec::new();
    for _ in 0..40 {
        script.push(
            openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)).delayed(1_500),
        );
    }
    let model = ScriptedModelServer::start_blocking(script);
    let config = "[serve]\nworkers = 1\nlease_secs = 1\n";
    let warden = Warden::openai(&model.url())
        .with("WARDEN_SANDBOX", "local")
        .with("WARDEN_DATABASE_URL", &schema.url());
    write_config(&warden, config);
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);

    // A second machine: its own home, the same database, workers only.
    let remote = Warden::openai(&model.url())
        .with("WARDEN_SANDBOX", "local")
        .with("WARDEN_DATABASE_URL", &schema.url());
    write_config(&remote, config);
    let worker = Worker::start(&remote);
    worker.wait_for_line(|line| line.starts_with("warden: worker worker-"));

    let ids: Vec<String> = (0..4)
        .map(|n| server.submit_question(ALICE, "app", &format!("question {n}")))
        .collect();
    // Each process runs one task at a time and a decision takes 1.5 s: the second request to
    // the model comes from the worker machine. Kill it while it waits for the answer.
    let deadline = Instant::now() + Duration::from_secs(30);
    while model.requests().len() < 2 {
        assert!(Instant::now() < deadline, "the worker never claimed a task");
        std::thread::sleep(Duration::from_millis(20));
    }
    worker.kill();
    for id in &ids {
        let task = server.wait_terminal(ALICE, id);
        assert_eq!(task["status"], "completed", "{task}");
    }
    server.terminate();

    let runtime = runtime();
    let store = runtime.block_on(warden_store::open(&schema.url())).unwrap();
    let mut workers = std::collections::HashSet::new();
    let mut interrupted = 0;
    for id in &ids {
        let runs = runtime
            .block_on(store.list_runs(&id.parse().unwrap()))
            .unwrap();
        for run in &runs {
            workers.insert(run.worker.clone());
            if run.outcome.as_deref() == Some(warden_store::RUN_INTERRUPTED) {
                interrupted += 1;
                assert!(run.worker.starts_with("worker-"), "{run:?}");
            }
        }
        assert_eq!(
            runs.iter()
                .filter(|r| r.outcome.as_deref() == Some("completed"))
                .count(),
            1
        );
    }
    assert!(
        workers.iter().any(|w| w.starts_with("worker-")),
        "{workers:?}"
    );
    assert!(
        workers.iter().any(|w| w.starts_with("serve-")),
        "{workers:?}"
    );
    assert!(interrupted >= 1, "the killed worker held no run");
    drop(store);
    drop(runtime);
}

/// `doctor` tries each configured interface's credentials as `serve` does at start-up —
/// Telegram's `getMe`, Slack's `auth.test`, GitHub's `/rate_limit` — and names the one refused
/// (here against local fakes of the three APIs); `--offline` tries none.
#[test]
fn doctor_tries_every_interface_credential_online_and_names_the_refused_one() {
    use warden_test_support::github_fake::GithubFake;
    use warden_test_support::slack_fake::SlackFake;
    use warden_test_support::telegram_fake::TelegramFake;
    let telegram = TelegramFake::start("123:telegram-good");
    let slack = SlackFake::start("xoxb-slack-good");
    let remote = tempfile::tempdir().unwrap();
    let github = GithubFake::start(remote.path(), "acme", "app", "ghp_good");
    let warden = Warden::faux();
    write_config(
        &warden,
        "[telegram]\n[[telegram.users]]\nid = 1\nname = \"alice\"\nrole = \"admin\"\n\n\
         [slack]\n[[slack.users]]\nid = \"U0ALICE\"\nname = \"alice\"\nrole = \"admin\"\n",
    );
    let doctor = |telegram_token: &str, slack_token: &str, github_token: &str, args: &[&str]| {
        let run = warden
            .command(&[&["doctor", "--json"], args].concat())
            .env("WARDEN_TELEGRAM_API_URL", telegram.url())
            .env("WARDEN_TELEGRAM_TOKEN", telegram_token)
            .env("WARDEN_SLACK_API_URL", slack.url())
            .env("WARDEN_SLACK_BOT_TOKEN", slack_token)
            .env("WARDEN_SLACK_SIGNING_SECRET", "signing-secret")
            .env("WARDEN_GITHUB_API_URL", github.url())
            .env("WARDEN_GITHUB_TOKEN", github_token)
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&run.stdout).unwrap_or_else(|_| {
            panic!("{}", String::from_utf8_lossy(&run.stderr));
        });
        let checks: Vec<(String, bool, String)> = report["checks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["check"].as_str().unwrap().to_string(),
                    c["ok"].as_bool().unwrap(),
                    c["detail"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        (run.status.code(), checks)
    };
    let find = |checks: &[(String, bool, String)], name: &str| {
        checks
            .iter()
            .find(|(check, ..)| check == name)
            .cloned()
            .unwrap_or_else(|| panic!("no {name} check in {checks:?}"))
    };

    let (_, checks) = doctor("123:telegram-good", "xoxb-slack-good", "ghp_good", &[]);
    for name in ["telegram", "slack", "github"] {
        let (_, ok, detail) = find(&checks, name);
        assert!(ok, "{name}: {detail}");
    }
    assert!(find(&checks, "telegram").2.contains("getMe"));
    assert!(find(&checks, "slack").2.contains("auth.test"));
    assert!(find(&checks, "github").2.contains("/rate_limit"));

    let (code, checks) = doctor("123:telegram-bad", "xoxb-slack-bad", "ghp_bad", &[]);
    assert_eq!(code, Some(1));
    for name in ["telegram", "slack", "github"] {
        let (_, ok, detail) = find(&checks, name);
        assert!(!ok, "{name} passed with a refused credential: {detail}");
    }
    let (_, _, detail) = find(&checks, "github");
    assert!(detail.contains("WARDEN_GITHUB_TOKEN"), "{detail}");
    assert!(
        !detail.contains("ghp_bad"),
        "the credential is shown: {detail}"
    );

    let (_, checks) = doctor(
        "123:telegram-bad",
        "xoxb-slack-bad",
        "ghp_bad",
        &["--offline"],
    );
    assert!(
        checks
            .iter()
            .all(|(name, ..)| !["telegram", "slack", "github"].contains(&name.as_str())),
        "{checks:?}"
    );
}

#[test]
fn a_port_in_use_is_refused_naming_warden_listen() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let warden = Warden::faux().with("WARDEN_LISTEN", &address);
    let run = warden.run(&["serve"]);
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("cannot listen on {address}")),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("set WARDEN_LISTEN"), "{}", run.stderr);
    // Said once.
    assert_eq!(
        run.stderr.matches("cannot listen on").count(),
        1,
        "{}",
        run.stderr
    );
    drop(taken);
}
