//! A store outage is not a task failure: `warden serve` and two `warden worker`s share a
//! private Postgres cluster (initdb in a temporary directory, its own port, run as `postgres`
//! when the tests run as root); 12 tasks are mid-run (the scripted model answers slowly) with a
//! Server-Sent-Events follower on each when the database is stopped (`pg_ctl stop -m
//! immediate`) and started again on the same port and data directory — for 6 s (shorter than
//! the lease: the runs wait and go on) and for 60 s (longer than a 10 s lease: the runs stop
//! and the tasks run again). Every task must complete exactly once (one terminal status, one
//! `task_finished`), every follower must see the end, and no model decision may be paid for or
//! charged twice.
//!
//! Skipped (saying so) when no Postgres server binaries are found, unless `WARDEN_TEST_REQUIRE`
//! names `postgres`: then their absence fails the test.

#![allow(clippy::disallowed_methods)] // the test runs initdb, pg_ctl and id

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;
use warden_store::EventStream;
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::server_harness::{call, runtime, sample_repo, submit_answer, Server, Worker, ALICE};
use super::support::Warden;

const TOKENS: &[super::server_harness::Token] = &[
    ("root", "admin", super::server_harness::ADMIN),
    ("alice", "operator", ALICE),
];

/// Tasks submitted, all running at once (three processes with four slots each).
const TASKS: usize = 12;

/// A Postgres cluster of the test's own, stopped (immediately) and removed on drop.
struct PrivatePostgres {
    bin: PathBuf,
    dir: tempfile::TempDir,
    port: u16,
    as_postgres: bool,
}

impl PrivatePostgres {
    /// Creates and starts the cluster; `None` (after saying why) when no server binaries are
    /// installed and the environment does not require Postgres.
    fn start() -> Option<PrivatePostgres> {
        let Some(bin) = postgres_bin() else {
            assert!(
                !warden_test_support::postgres::required("postgres"),
                "WARDEN_TEST_REQUIRE names postgres but no Postgres server binaries (initdb, \
                 pg_ctl) were found under /usr/lib/postgresql/*/bin or on PATH"
            );
            eprintln!(
                "skipped: no Postgres server binaries (initdb, pg_ctl) for a private cluster"
            );
            return None;
        };
        let as_postgres = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
        let dir = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let cluster = PrivatePostgres {
            bin,
            dir,
            port,
            as_postgres,
        };
        if as_postgres {
            // initdb refuses to run as root: the cluster belongs to `postgres`.
            std::fs::set_permissions(
                cluster.dir.path(),
                std::os::unix::fs::PermissionsExt::from_mode(0o755),
            )
            .unwrap();
            std::fs::create_dir(cluster.data()).unwrap();
            cluster.run_as_owner(
                "chown",
                &["postgres:postgres", cluster.data().to_str().unwrap()],
                false,
            );
        }
        let data = cluster.data();
        cluster.run_as_owner(
            &cluster.bin.join("initdb").display().to_string(),
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "warden",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            cluster.as_postgres,
        );
        cluster.pg_ctl_start();
        Some(cluster)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn url(&self) -> String {
        format!("postgres://warden@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs `program` (as `postgres` when `as_postgres`), panicking with its output on failure.
    fn run_as_owner(&self, program: &str, args: &[&str], as_postgres: bool) {
        let output = if as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--", program])
                .args(args)
                .output()
        } else {
            Command::new(program).args(args).output()
        }
        .unwrap_or_else(|e| panic!("cannot run {program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn pg_ctl(&self, args: &[&str]) {
        let data = self.data();
        let mut all = vec!["-D", data.to_str().unwrap()];
        all.extend_from_slice(args);
        self.run_as_owner(
            &self.bin.join("pg_ctl").display().to_string(),
            &all,
            self.as_postgres,
        );
    }

    fn pg_ctl_start(&self) {
        let options = format!(
            "-p {} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' -c fsync=off \
             -c max_connections=200",
            self.port
        );
        let log = self.data().join("server.log");
        self.pg_ctl(&["-o", &options, "-l", log.to_str().unwrap(), "-w", "start"]);
    }

    /// A real outage: every server process is killed at once, connections reset.
    fn stop(&self) {
        self.pg_ctl(&["-m", "immediate", "-w", "stop"]);
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let data = self.data();
        let pg_ctl = self.bin.join("pg_ctl");
        let args = [
            "-D",
            data.to_str().unwrap_or_default(),
            "-m",
            "immediate",
            "stop",
        ];
        let _ = if self.as_postgres {
            Command::new("runuser")
                .args(["-u", "postgres", "--"])
                .arg(&pg_ctl)
                .args(args)
                .output()
        } else {
            Command::new(&pg_ctl).args(args).output()
        };
    }
}

/// The directory holding `initdb` and `pg_ctl`: the newest `/usr/lib/postgresql/*/bin`, else
/// `PATH`.
fn postgres_bin() -> Option<PathBuf> {
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse().ok()?;
            Some((version, entry.path().join("bin")))
        })
        .collect();
    versions.sort();
    let found = versions
        .into_iter()
        .rev()
        .map(|(_, bin)| bin)
        .chain(std::env::split_paths(
            &std::env::var_os("PATH").unwrap_or_default(),
        ))
        .find(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file());
    found
}

/// What a follower of one task's event stream saw: event ids and types, in order.
#[derive(Debug, Default)]
struct Followed {
    events: Vec<(u64, String)>,
    reconnects: u32,
}

/// Follows `/v1/tasks/{id}/events` until the stream ends after `task_finished`, reconnecting
/// with `Last-Event-ID` (as a client does) whenever the connection drops or is refused.
fn follow(addr: String, task: String, give_up: Instant) -> Followed {
    let mut followed = Followed::default();
    loop {
        assert!(
            Instant::now() < give_up,
            "the follower of {task} never saw the end: {followed:?}"
        );
        let last = followed.events.last().map(|(id, _)| *id);
        if let Some(ended) = follow_once(&addr, &task, last, &mut followed) {
            if ended {
                return followed;
            }
        }
        followed.reconnects += 1;
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// One connection: `Some(true)` when the stream ended after `task_finished`, `Some(false)`
/// when it ended without it, `None` when it could not be read.
fn follow_once(addr: &str, task: &str, last: Option<u64>, followed: &mut Followed) -> Option<bool> {
    let mut stream = TcpStream::connect(addr).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    let mut request = format!(
        "GET /v1/tasks/{task}/events HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {ALICE}\r\n"
    );
    if let Some(last) = last {
        request.push_str(&format!("Last-Event-ID: {last}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut reader = BufReader::new(stream);
    let mut status = String::new();
    reader.read_line(&mut status).ok()?;
    if status.split(' ').nth(1) != Some("200") {
        return None;
    }
    let mut id = None;
    let mut finished = false;
    for line in reader.lines() {
        let line = line.ok()?;
        if let Some(value) = line.strip_prefix("id: ") {
            id = value.parse().ok();
        } else if let Some(kind) = line.strip_prefix("event: ") {
            let seq = id.take()?;
            finished |= kind == "task_finished";
            followed.events.push((seq, kind.to_string()));
        }
    }
    Some(finished)
}

/// Polls the task until it is terminal, through the moments the server cannot answer (its
/// store is still reconnecting).
fn wait_terminal(server: &Server, id: &str, give_up: Instant) -> serde_json::Value {
    loop {
        let (status, task) = server.request("GET", &format!("/v1/tasks/{id}"), Some(ALICE), None);
        let state = task["status"].as_str().unwrap_or_default();
        if status == 200 && super::server_harness::TERMINAL.contains(&state) {
            return task;
        }
        assert!(
            Instant::now() < give_up,
            "task {id} never ended: {status} {task}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Runs 12 tasks through an outage of `outage` with `config` for every process; checks the
/// end of every task, every follower, the journals and the ledger.
fn tasks_survive_an_outage(outage: Duration, config: &str, runs_may_be_lost: bool) {
    let Some(postgres) = PrivatePostgres::start() else {
        return;
    };
    let repo = sample_repo();
    // Slow decisions, so every task is mid-run when the database goes; enough of them for the
    // tasks to run again after losing their runs.
    let mut script = Vec::new();
    for _ in 0..3 * TASKS {
        script.push(call("read_file", json!({"path": "src/lib.rs"})).delayed(1_500));
    }
    for _ in 0..5 * TASKS {
        script.push(
            openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)).delayed(300),
        );
    }
    let model = ScriptedModelServer::start_blocking(script);
    let warden_for = || {
        let warden = Warden::openai(&model.url())
            .with("WARDEN_SANDBOX", "local")
            .with("WARDEN_DATABASE_URL", &postgres.url());
        std::fs::write(warden.home.path().join("warden.toml"), config).unwrap();
        warden
    };
    let warden = warden_for();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let remotes: Vec<Warden> = (0..2).map(|_| warden_for()).collect();
    let workers: Vec<Worker> = remotes.iter().map(Worker::start).collect();
    for worker in &workers {
        worker.wait_for_line(|line| line.starts_with("warden: worker worker-"));
    }

    let ids: Vec<String> = (0..TASKS)
        .map(|n| server.submit_question(ALICE, "app", &format!("question {n}")))
        .collect();
    let give_up = Instant::now() + outage + Duration::from_secs(240);
    let followers: Vec<_> = ids
        .iter()
        .map(|id| {
            let (addr, id) = (server.addr().to_string(), id.clone());
            std::thread::spawn(move || follow(addr, id, give_up))
        })
        .collect();
    // Every task waits for its first decision: all of them are mid-run.
    let started = Instant::now();
    while model.requests().len() < TASKS {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "only {} of {TASKS} tasks reached the model:\n{}",
            model.requests().len(),
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    postgres.stop();
    std::thread::sleep(outage);
    postgres.pg_ctl_start();

    for id in &ids {
        let task = wait_terminal(&server, id, give_up);
        assert_eq!(
            task["status"],
            "completed",
            "{task}\nserver:\n{}\nworkers:\n{}\n{}",
            server.stderr(),
            workers[0].stderr(),
            workers[1].stderr()
        );
    }
    let followed: Vec<Followed> = followers.into_iter().map(|f| f.join().unwrap()).collect();
    drop(workers);
    server.terminate();

    let runtime = runtime();
    let store = runtime
        .block_on(warden_store::open(&postgres.url()))
        .unwrap();
    let mut decisions = 0;
    let mut lost_runs = 0;
    for (id, followed) in ids.iter().zip(&followed) {
        let task_id: warden_protocol::TaskId = id.parse().unwrap();
        // Ended exactly once: one task_finished stored, one seen by the follower.
        let events = runtime
            .block_on(store.events_after(&EventStream::Task(task_id.clone()), 0, 10_000))
            .unwrap();
        let finished: Vec<_> = events
            .iter()
            .filter(|r| matches!(r.event, warden_protocol::Event::TaskFinished { .. }))
            .collect();
        assert_eq!(finished.len(), 1, "{id}: {events:?}");
        let seen: Vec<&(u64, String)> = followed
            .events
            .iter()
            .filter(|(_, kind)| kind == "task_finished")
            .collect();
        assert_eq!(seen.len(), 1, "{id}: {followed:?}");
        let ids_seen: Vec<u64> = followed.events.iter().map(|(seq, _)| *seq).collect();
        let mut unique = ids_seen.clone();
        unique.dedup();
        assert_eq!(unique, ids_seen, "{id}: a follower saw an event twice");

        let runs = runtime.block_on(store.list_runs(&task_id)).unwrap();
        let completed: Vec<_> = runs
            .iter()
            .filter(|r| r.outcome.as_deref() == Some("completed"))
            .collect();
        assert_eq!(completed.len(), 1, "{id}: {runs:?}");
        lost_runs += runs.len() - 1;
        // Every decision the task went on is in its completing run's journal (replayed ones
        // included) and charged once in the ledger.
        let journal = runtime
            .block_on(store.journal(&warden_store::RunRef {
                task: task_id.clone(),
                number: completed[0].number,
            }))
            .unwrap();
        let made = journal
            .iter()
            .filter(|e| e.kind == "model_decision")
            .count();
        let charged = runtime.block_on(store.spend_for_task(&task_id)).unwrap();
        if runs_may_be_lost {
            assert!(
                charged.entries <= made as u64,
                "{id}: {charged:?}, {made} decisions"
            );
        } else {
            assert_eq!(
                charged.entries, made as u64,
                "{id}: {charged:?}, {made} decisions"
            );
        }
        decisions += made;
    }
    let requests = model.requests().len();
    eprintln!(
        "outage of {outage:?}: {TASKS} tasks completed, {decisions} decisions, {requests} model \
         requests, {lost_runs} runs lost, {} follower reconnections",
        followed.iter().map(|f| f.reconnects).sum::<u32>()
    );
    if runs_may_be_lost {
        // A lost run may lose the decision it was waiting for, never more.
        assert!(decisions <= requests && requests <= decisions + lost_runs);
    } else {
        assert_eq!(lost_runs, 0, "a run was lost to a {outage:?} outage");
        assert_eq!(requests, decisions, "a decision was asked for twice");
    }
    drop(store);
    drop(runtime);
}

#[test]
fn a_short_store_outage_pauses_running_tasks_and_every_task_ends_once() {
    tasks_survive_an_outage(Duration::from_secs(6), "[serve]\nworkers = 4\n", false);
}

#[test]
fn a_store_outage_longer_than_the_lease_requeues_running_tasks_and_every_task_ends_once() {
    tasks_survive_an_outage(
        Duration::from_secs(60),
        "[serve]\nworkers = 4\nlease_secs = 10\n",
        true,
    );
}
