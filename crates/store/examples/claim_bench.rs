//! Claim throughput: W workers each loop `claim` → `finish_run(completed)` until the queue is
//! empty; reports claims per second with 1 and 8 workers on SQLite (a temporary file, WAL,
//! `synchronous=FULL`) and, when `WARDEN_TEST_POSTGRES_URL` is set, on Postgres (a scratch
//! schema, dropped afterwards). Goals: SQLite ≥ 1,000/s; Postgres ≥ 2,000/s with 8 workers.
//!
//! `cargo run --release -p warden-store --example claim_bench [-- TASKS]`

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use warden_protocol::{TaskId, TaskKind, TaskStatus};
use warden_store::{ClaimFilter, NewTask, Store, TaskRepo};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const LEASE: Duration = Duration::from_secs(60);

#[tokio::main]
async fn main() -> Result<()> {
    let tasks: usize = match std::env::args().nth(1) {
        Some(n) => n.parse()?,
        None => 4_000,
    };
    println!("backend   workers  tasks  seconds  claims/s");
    for workers in [1, 8] {
        let dir = tempfile::tempdir()?;
        let url = format!("sqlite://{}", dir.path().join("bench.db").display());
        let store = warden_store::open(&url).await?;
        report(
            "sqlite",
            workers,
            tasks,
            measure(store, workers, tasks).await?,
        );
    }
    match std::env::var("WARDEN_TEST_POSTGRES_URL") {
        Ok(admin_url) => {
            for workers in [1, 8] {
                let schema = format!("bench_{}_{workers}", std::process::id());
                let admin = admin_client(&admin_url).await?;
                admin
                    .batch_execute(&format!("CREATE SCHEMA {schema}"))
                    .await?;
                let separator = if admin_url.contains('?') { '&' } else { '?' };
                let url = format!("{admin_url}{separator}options=-csearch_path%3D{schema}");
                let outcome = async {
                    let store = warden_store::open(&url).await?;
                    measure(store, workers, tasks).await
                }
                .await;
                admin
                    .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
                    .await?;
                report("postgres", workers, tasks, outcome?);
            }
        }
        Err(_) => println!("postgres  skipped: WARDEN_TEST_POSTGRES_URL not set"),
    }
    Ok(())
}

fn report(backend: &str, workers: usize, tasks: usize, elapsed: Duration) {
    let seconds = elapsed.as_secs_f64();
    println!(
        "{backend:<9} {workers:>7} {tasks:>6} {seconds:>8.2} {:>9.0}",
        tasks as f64 / seconds
    );
}

/// Queues `tasks` questions, then times `workers` concurrent claim-and-complete loops.
async fn measure(store: Arc<dyn Store>, workers: usize, tasks: usize) -> Result<Duration> {
    for i in 0..tasks {
        store
            .create_task(
                NewTask {
                    id: task_id(i)?,
                    kind: TaskKind::Question,
                    owner: "bench".into(),
                    prompt: "how does it work?".into(),
                    repos: vec![TaskRepo::named("app")],
                    priority: 0,
                    follow_up_to: None,
                    retry_of: None,
                    metadata: serde_json::json!({}),
                    callback_url: None,
                },
                None,
            )
            .await?;
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for w in 0..workers {
        let store = Arc::clone(&store);
        handles.push(tokio::spawn(async move {
            let name = format!("worker-{w}");
            let filter = ClaimFilter::default();
            let mut claimed = 0usize;
            while let Some(claim) = store.claim(&name, LEASE, &filter).await? {
                store
                    .finish_run(&claim.run(), &name, TaskStatus::Completed, None)
                    .await?;
                claimed += 1;
            }
            Ok::<_, warden_store::StoreError>(claimed)
        }));
    }
    let mut total = 0;
    for handle in handles {
        total += handle.await??;
    }
    let elapsed = started.elapsed();
    if total != tasks {
        return Err(format!("claimed {total} of {tasks} tasks").into());
    }
    Ok(elapsed)
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
