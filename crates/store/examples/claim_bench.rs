//! Claim throughput: W workers loop claim → complete until the queue is empty; reports cycles
//! (claim + complete) per second with 1 and 8 workers on SQLite (a temporary file, WAL,
//! `synchronous=FULL`) and, when `WARDEN_TEST_POSTGRES_URL` is set, on Postgres (a scratch
//! schema per measurement, dropped afterwards), for three paths:
//!
//! - `claim+finish`: `claim`, then `finish_run` — two transactions per cycle (the old path);
//! - `finish+claim`: `finish_and_claim` — one transaction per cycle;
//! - `queue+batch`: the W workers are the slots of one process sharing a `ClaimQueue`
//!   (refilled W claims at a time by `claim_batch`) and a `CompletionBatcher` (group commit of
//!   `finish_runs`).
//!
//! Every path stores each task's `task_finished` event with its completion (the store does).
//!
//! Beside them it runs `pgbench` against the same Postgres server (a one-statement insert,
//! `-c 8 -j 2 -T 10`, before and after the measurements) and prints its durable commits per
//! second (`synchronous_commit` as the server has it, checked to be `on`), the ratios
//! cycles/commits and cycles/(commits/2) — the old path's ceiling is one cycle per two
//! commits, so the latter is at most 1 there — and the goal: ≥ 2,000 cycles/s with 8 workers
//! or ≥ 0.9 × two cycles per commit (1.8 × commits/s), whichever is lower.
//!
//! `cargo run --release -p warden-store --example claim_bench [-- TASKS]` (`--smoke`: 100 tasks
//! per measurement and 1 s of `pgbench`, skipped with a line where it is not installed; every
//! measurement checks the workers completed every task)

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;
use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_store::{
    ClaimFilter, ClaimQueue, Completion, CompletionBatcher, NewTask, Store, StoreOptions,
    SystemClock, TaskRepo,
};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const LEASE: Duration = Duration::from_secs(60);
const WORKERS: [usize; 2] = [1, 8];
const GOAL_CYCLES: f64 = 2_000.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    ClaimThenFinish,
    FinishAndClaim,
    QueueAndBatch,
}

impl Path {
    const ALL: [Path; 3] = [
        Path::ClaimThenFinish,
        Path::FinishAndClaim,
        Path::QueueAndBatch,
    ];

    fn name(self) -> &'static str {
        match self {
            Path::ClaimThenFinish => "claim+finish",

            Path::FinishAndClaim => "finish+claim",
            Path::QueueAndBatch => "queue+batch",
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let smoke = std::env::args().any(|a| a == "--smoke");
    let tasks: usize = match std::env::args().skip(1).find(|a| a != "--smoke") {
        Some(n) => n.parse()?,
        None if smoke => 100,
        None => 4_000,
    };
    let pgbench_seconds = if smoke { 1 } else { 10 };
    println!("backend   path          workers  tasks  seconds  cycles/s");
    for path in Path::ALL {
        for workers in WORKERS {
            let dir = tempfile::tempdir()?;
            let url = format!("sqlite://{}", dir.path().join("bench.db").display());
            let store = open(&url, workers).await?;
            let elapsed = measure(store, path, workers, tasks).await?;
            println!("{}", row("sqlite", path, workers, tasks, elapsed));
        }
    }
    let Ok(admin_url) = std::env::var("WARDEN_TEST_POSTGRES_URL") else {
        println!("postgres  skipped: WARDEN_TEST_POSTGRES_URL not set");
        return Ok(());
    };
    let admin = admin_client(&admin_url).await?;
    let synchronous_commit: String = admin
        .query_one("SHOW synchronous_commit", &[])
        .await?
        .try_get(0)?;
    let fsync: String = admin.query_one("SHOW fsync", &[]).await?.try_get(0)?;
    if synchronous_commit != "on" || fsync != "on" {
        return Err(format!(
            "the server has synchronous_commit={synchronous_commit}, fsync={fsync}: \
             commits are not durable, the figures would mean nothing"
        )
        .into());
    }
    let have_pgbench = pgbench_binary().is_some();
    if !have_pgbench {
        if !smoke {
            return Err("pgbench not found (Debian: apt-get install postgresql-contrib)".into());
        }
        println!("skipped: pgbench is not installed (postgresql-contrib), no commits/s reference");
    }
    let before = if have_pgbench {
        pgbench(&admin_url, pgbench_seconds).await?
    } else {
        0.0
    };
    let mut results = Vec::new();
    for path in Path::ALL {
        for workers in WORKERS {
            let schema = format!("bench_{}_{workers}", std::process::id());
            admin
                .batch_execute(&format!("CREATE SCHEMA {schema}"))
                .await?;
            let outcome = async {
                let store = open(&schema_url(&admin_url, &schema), workers).await?;
                measure(store, path, workers, tasks).await
            }
            .await;
            admin
                .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                .await?;
            let elapsed = outcome?;
            println!("{}", row("postgres", path, workers, tasks, elapsed));
            results.push((path, workers, tasks as f64 / elapsed.as_secs_f64()));
        }
    }
    if !have_pgbench {
        return Ok(());
    }
    let after = pgbench(&admin_url, pgbench_seconds).await?;
    let commits = (before + after) / 2.0;
    println!();
    println!(
        "pgbench (same server, one-statement insert, 8 clients, synchronous_commit=on): \
         {before:.0} commits/s before, {after:.0} after, {commits:.0} mean"
    );
    println!("backend   path          workers  cycles/s  cycles/commits  cycles/(commits/2)");
    for (path, workers, cycles) in &results {
        println!(
            "postgres  {:<13} {workers:>7} {cycles:>9.0} {:>15.2} {:>19.2}",
            path.name(),
            cycles / commits,
            cycles / (commits / 2.0)
        );
    }
    let goal = GOAL_CYCLES.min(0.9 * 2.0 * commits);
    let best = results
        .iter()
        .filter(|(path, workers, _)| {
            matches!(path, Path::FinishAndClaim | Path::QueueAndBatch) && *workers == 8
        })
        .map(|(_, _, cycles)| *cycles)
        .fold(0.0, f64::max);
    println!(
        "goal with 8 workers: >= {goal:.0} cycles/s (min of 2000 and 1.8 x {commits:.0} \
         commits/s); best new path: {best:.0} cycles/s: {}",
        if best >= goal { "met" } else { "NOT met" }
    );
    Ok(())
}

fn row(backend: &str, path: Path, workers: usize, tasks: usize, elapsed: Duration) -> String {
    let seconds = elapsed.as_secs_f64();
    format!(
        "{backend:<9} {:<13} {workers:>7} {tasks:>6} {seconds:>8.2} {:>9.0}",
        path.name(),
        tasks as f64 / seconds
    )
}

async fn open(url: &str, workers: usize) -> Result<Arc<dyn Store>> {
    let options = StoreOptions {
        clock: Arc::new(SystemClock),
        // A connection per worker, one for the batcher, a few for task creation.
        postgres_pool_size: workers + 9,
    };
    Ok(warden_store::open_with(url, options).await?)
}

fn schema_url(admin_url: &str, schema: &str) -> String {
    let separator = if admin_url.contains('?') { '&' } else { '?' };
    format!("{admin_url}{separator}options=-csearch_path%3D{schema}")
}

/// A completed question's result (its `outcome` names the `task_finished` event's).
fn result() -> Option<serde_json::Value> {
    Some(serde_json::json!({"outcome": "answer"}))
}

/// Queues `tasks` questions (untimed), then times `workers` concurrent claim-and-complete
/// loops on `path`.
async fn measure(
    store: Arc<dyn Store>,
    path: Path,
    workers: usize,
    tasks: usize,
) -> Result<Duration> {
    create_tasks(&store, tasks).await?;
    let started = Instant::now();
    let mut handles = Vec::new();
    let queue = Arc::new(Mutex::new(ClaimQueue::new(
        Arc::clone(&store),
        Arc::new(SystemClock),
        "process",
        ClaimFilter::default(),
        LEASE,
        workers,
    )));
    let batcher = CompletionBatcher::start(Arc::clone(&store), Duration::ZERO, 64);
    for w in 0..workers {
        let store = Arc::clone(&store);
        let queue = Arc::clone(&queue);
        let batcher = batcher.clone();
        handles.push(tokio::spawn(async move {
            let name = format!("worker-{w}");
            let filter = ClaimFilter::default();
            let mut cycles = 0usize;
            match path {
                Path::ClaimThenFinish => {
                    while let Some(claim) = store.claim(&name, LEASE, &filter).await? {
                        store
                            .finish_run(&claim.run(), &name, TaskStatus::Completed, result())
                            .await?;
                        cycles += 1;
                    }
                }

                Path::FinishAndClaim => {
                    let mut next = store.claim(&name, LEASE, &filter).await?;
                    while let Some(claim) = next {
                        let completion =
                            Completion::new(claim.run(), &name, TaskStatus::Completed, result());
                        next = store.finish_and_claim(completion, LEASE, &filter).await?.1;
                        cycles += 1;
                    }
                }
                Path::QueueAndBatch => loop {
                    let claim = queue.lock().await.next().await?;
                    let Some(claim) = claim else { break };
                    let completion =
                        Completion::new(claim.run(), "process", TaskStatus::Completed, result());
                    batcher.finish(completion).await?;
                    cycles += 1;
                },
            }
            Ok::<_, warden_store::StoreError>(cycles)
        }));
    }
    let mut total = 0;
    for handle in handles {
        total += handle.await??;
    }
    let elapsed = started.elapsed();
    if total != tasks {
        return Err(format!("completed {total} of {tasks} tasks").into());
    }
    Ok(elapsed)
}

/// Creates the tasks 64 at a time, so the backends can share commits.
async fn create_tasks(store: &Arc<dyn Store>, tasks: usize) -> Result<()> {
    let ids: Vec<usize> = (0..tasks).collect();
    for chunk in ids.chunks(64) {
        let mut creating = Vec::new();
        for i in chunk {
            let store = Arc::clone(store);
            let task = NewTask {
                id: task_id(*i)?,
                kind: TaskKind::Question,
                owner: "bench".into(),
                prompt: "how does it work?".into(),
                repos: vec![TaskRepo::named("app")],
                priority: 0,
                follow_up_to: None,
                retry_of: None,
                metadata: serde_json::json!({}),
                callback_url: None,
            };
            creating.push(tokio::spawn(
                async move { store.create_task(task, None).await },
            ));
        }
        for created in creating {
            created.await??;
        }
    }
    Ok(())
}

fn task_id(i: usize) -> Result<TaskId> {
    const CROCKFORD: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let mut ulid = String::with_capacity(26);
    for shift in (0..26).rev() {
        let digit = (i as u128 >> (shift * 5)) & 31;
        ulid.push(char::from(CROCKFORD[digit as usize]));
    }
    Ok(TaskId::from_ulid(&ulid)?)
}

async fn admin_client(url: &str) -> Result<tokio_postgres::Client> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
    tokio::spawn(connection);
    Ok(client)
}

/// Durable commits per second the server does: `pgbench` inserting one row per transaction
/// into a table of a scratch schema, 8 clients on 2 threads for `seconds`.
async fn pgbench(admin_url: &str, seconds: u32) -> Result<f64> {
    let schema = format!("bench_pgbench_{}", std::process::id());
    let admin = admin_client(admin_url).await?;
    admin
        .batch_execute(&format!(
            "CREATE SCHEMA {schema}; CREATE TABLE {schema}.commits (id BIGSERIAL PRIMARY KEY, at TIMESTAMPTZ NOT NULL DEFAULT now())"
        ))
        .await?;
    let outcome = run_pgbench(admin_url, &schema, seconds).await;
    admin
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await?;
    outcome
}

fn pgbench_binary() -> Option<&'static str> {
    ["/usr/lib/postgresql/15/bin/pgbench", "/usr/bin/pgbench"]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists())
}

async fn run_pgbench(admin_url: &str, schema: &str, seconds: u32) -> Result<f64> {
    let dir = tempfile::tempdir()?;
    let script = dir.path().join("commit.sql");
    std::fs::write(&script, "INSERT INTO commits DEFAULT VALUES;\n")?;
    let binary =
        pgbench_binary().ok_or("pgbench not found (Debian: apt-get install postgresql-contrib)")?;
    let url = schema_url(admin_url, schema);
    // A benchmark tool outside Warden: a fixed program with fixed arguments.
    #[allow(clippy::disallowed_methods)]
    let mut command = std::process::Command::new(binary);
    command
        .args(["-n", "-c", "8", "-j", "2", "-T", &seconds.to_string(), "-f"])
        .arg(&script)
        .arg(&url);
    let output = tokio::task::spawn_blocking(move || command.output()).await??;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "pgbench failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )
        .into());
    }
    // "tps = 2101.5 (without initial connection time)"
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("tps = "))
        .filter_map(|rest| rest.split_whitespace().next())
        .find_map(|number| number.parse().ok())
        .ok_or_else(|| format!("no tps in pgbench's output: {stdout}").into())
}
