//! `warden gc`: evicts unused mirrors, snapshots and dependency caches under `WARDEN_HOME`,
//! oldest last use first, until they take at most `[storage] max_bytes` (`--max-bytes`
//! overrides, `0` takes every unused one). What a running task holds, or what was used within `[storage]
//! keep_recent_mins`, stays; so do mirrors holding proposals, the mirrors and snapshots
//! unfinished tasks use, and the mirror of a `@worktree` commit a finished task recorded (of
//! the in-process database and the server's, `WARDEN_DATABASE_URL` or `warden.db`).
//! `--dry-run` only reports.

use anyhow::Context;
use warden_config::{Env, ProcessEnv};
use warden_engine::config::Config;
use warden_repo::{GcEntry, GcKind};

#[derive(Debug, clap::Args)]
pub struct GcArgs {
    /// Report what would be removed, remove nothing
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Trim to this many bytes instead of `[storage] max_bytes` (0: every unused entry)
    #[arg(long, value_name = "BYTES")]
    pub max_bytes: Option<u64>,
}

pub async fn gc(config: &Config, args: GcArgs) -> anyhow::Result<u8> {
    let store =
        warden_repo::RepoStore::open(&config.home).context("cannot open the repository store")?;
    let mut policy = config.storage.cache;
    if let Some(max_bytes) = args.max_bytes {
        policy.max_bytes = max_bytes;
    }
    let urls = [
        warden_service::local::database_url(&config.home),
        warden_service::compose::database_url(ProcessEnv.var("WARDEN_DATABASE_URL"), &config.home),
    ];
    let databases = warden_service::storage::other_stores(&urls).await;
    let report = warden_service::storage::evict(&databases, &store, policy, args.dry_run).await?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
        return Ok(0);
    }
    let verb = if report.dry_run {
        "would remove"
    } else {
        "removed"
    };
    for entry in &report.removed {
        println!("{verb} {}", describe(entry));
    }
    for entry in &report.kept {
        println!(
            "kept {} ({})",
            describe(entry),
            entry.kept.unwrap_or("kept")
        );
    }
    println!(
        "{} {} bytes; mirrors, snapshots and dependency caches take {} bytes (limit {})",
        if report.dry_run {
            "would free"
        } else {
            "freed"
        },
        report.freed_bytes,
        report.bytes_after,
        report.max_bytes
    );
    Ok(0)
}

fn describe(entry: &GcEntry) -> String {
    let kind = match entry.kind {
        GcKind::Mirror => "mirror",
        GcKind::Snapshot => "snapshot",
        GcKind::Cache => "dependency cache",
    };
    crate::text::one_line(&format!(
        "{kind} {} ({} bytes)",
        entry.path.display(),
        entry.bytes
    ))
}
