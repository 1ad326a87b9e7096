//! The cost of a page of a task's journal by its position: a run of N records (default
//! 10,000: model decisions each calling a tool, half on `.env`, and their observations) on
//! SQLite, read 50 a page at page 1 and page 100, once as the workers write it (`StoreJournal`,
//! which records what display needs with each record) and once written raw (nothing recorded,
//! as records from before it was: a page then reads the run's earlier records). Timings are
//! reported, never asserted. `cargo test` builds it, so it cannot rot.
//!
//! `cargo run --release -p warden-service --example journal_page_bench [-- RECORDS]`

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use warden_protocol::views::JournalCursor;
use warden_protocol::{TaskId, TaskKind};
use warden_runtime::{Journal, RecordKind};
use warden_service::journal::StoreJournal;
use warden_service::tasks::{journal_page, JournalPageQuery};
use warden_store::{ClaimFilter, NewTask, RunJournal, Store};

type Result<T> = std::result::Result<T, Box<dyn Error + Send + Sync>>;

const PAGE: u32 = 50;
/// What `.env` holds; no page may show it.
const SECRET: &str = "hunter2";

fn record(n: u64) -> (RecordKind, &'static str, serde_json::Value) {
    let call = format!("c{}", n / 2);
    let path = if (n / 2).is_multiple_of(2) {
        ".env"
    } else {
        "README.md"
    };
    if n.is_multiple_of(2) {
        let arguments = json!({ "path": path }).to_string();
        (
            RecordKind::ModelDecision,
            "model_decision",
            json!({"tool_calls": [{"id": call, "name": "read_file", "arguments": arguments}]}),
        )
    } else {
        (
            RecordKind::ToolObservation,
            "tool_observation",
            json!({"call_id": call, "tool": "read_file",
            "output": {"ok": if path == ".env" {
                format!("     1\tDB_PASSWORD={SECRET}\n")
            } else {
                "     1\t# the readme\n".to_string()
            }}}),
        )
    }
}

async fn task(store: &Arc<dyn Store>, id: &TaskId) -> Result<warden_store::RunRef> {
    store
        .create_task(
            NewTask {
                id: id.clone(),
                kind: TaskKind::Question,
                owner: "bench".into(),
                prompt: "bench".into(),
                repos: vec![],
                priority: 0,
                follow_up_to: None,
                retry_of: None,
                metadata: json!({}),
                callback_url: None,
            },
            None,
        )
        .await?;
    let filter = ClaimFilter {
        task: Some(id.clone()),
        ..ClaimFilter::default()
    };
    let claim = store
        .claim("bench", Duration::from_secs(3600), &filter)
        .await?
        .ok_or("nothing to claim")?;
    Ok(claim.run())
}

async fn time_page(store: &dyn Store, id: &TaskId, page: u64) -> Result<Duration> {
    let after = page.checked_sub(2).map(|_| JournalCursor {
        run: 1,
        seq: (page - 1) * u64::from(PAGE) - 1,
    });
    let query = JournalPageQuery {
        run: None,
        after,
        limit: PAGE,
    };
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let started = Instant::now();
        let read = journal_page(store, id, query).await?;
        best = best.min(started.elapsed());
        if read.data.len() != PAGE as usize {
            return Err(format!("page {page} held {} records", read.data.len()).into());
        }
        // The page starts where it should, its chain checks, and the `.env` observations on it
        // are hidden as the sensitive-path rule says.
        let first = (page - 1) * u64::from(PAGE);
        if read.data[0].seq != first || read.data.iter().any(|r| !r.chain_ok) {
            return Err(format!("page {page} is not records {first}.. with intact hashes").into());
        }
        let shown =
            serde_json::to_string(&read.data.iter().map(|r| &r.payload).collect::<Vec<_>>())?;
        if shown.contains(SECRET) {
            return Err(format!("page {page} shows what .env holds").into());
        }
    }
    Ok(best)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    // `--smoke` (CI, .ci/bench-smoke.sh): one small round, every page's answer checked.
    let smoke = std::env::args().any(|a| a == "--smoke");
    let records: u64 = if smoke {
        500
    } else {
        std::env::args()
            .nth(1)
            .map(|n| n.parse())
            .transpose()?
            .unwrap_or(10_000)
    };
    let pages = records / u64::from(PAGE);
    if pages < 2 {
        return Err("RECORDS must make at least two pages of 50".into());
    }
    let dir = tempfile::tempdir()?;
    let store = warden_store::open(&format!(
        "sqlite://{}",
        dir.path().join("bench.db").display()
    ))
    .await?;
    let recorded: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEV".parse()?;
    let raw: TaskId = "tsk_01M8VBQV37BCXJMMGC5Y911WEW".parse()?;
    let run = task(&store, &recorded).await?;
    let mut writer = StoreJournal::new(
        RunJournal::open(Arc::clone(&store), run).await?,
        warden_engine::redact::Redactor::new(Vec::<String>::new()),
    );
    for n in 0..records {
        let (kind, _, payload) = record(n);
        writer.append(n, kind, payload).await?;
    }
    let run = task(&store, &raw).await?;
    let mut writer = RunJournal::open(Arc::clone(&store), run).await?;
    for n in 0..records {
        let (_, kind, payload) = record(n);
        writer.append(n, kind, payload).await?;
    }
    let last = pages.min(100);
    println!("{records} records, {PAGE} a page, best of 5 (SQLite):");
    for (name, id) in [("recorded at append", &recorded), ("written raw", &raw)] {
        let first = time_page(store.as_ref(), id, 1).await?;
        let later = time_page(store.as_ref(), id, last).await?;
        println!(
            "  {name:>18}: page 1 {:>8.2} ms, page {last} {:>8.2} ms ({:.1}x)",
            first.as_secs_f64() * 1e3,
            later.as_secs_f64() * 1e3,
            later.as_secs_f64() / first.as_secs_f64()
        );
    }
    Ok(())
}
