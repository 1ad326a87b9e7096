//! `warden backup DIR`: online copies of the SQLite databases of this `WARDEN_HOME` —
//! `warden.db` (the service's, or the SQLite file `WARDEN_DATABASE_URL` names) and `local.db`
//! (the in-process tasks) — each a consistent snapshot taken with SQLite's `VACUUM INTO` over a
//! read-only connection, so it is safe while `warden serve` writes. A Postgres store is backed
//! up with `pg_dump` (docs/operations.md). Restoring is copying a backup into place with Warden
//! stopped.

use anyhow::Context;
use std::path::PathBuf;
use warden_config::{Env, ProcessEnv};
use warden_engine::config::Config;

#[derive(Debug, clap::Args)]
pub struct BackupArgs {
    /// The directory to write the backups into (created; existing backups there are refused)
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
    /// Print what was written as one JSON object
    #[arg(long)]
    pub json: bool,
}

pub fn backup(config: &Config, args: BackupArgs) -> anyhow::Result<u8> {
    let service = match ProcessEnv.var("WARDEN_DATABASE_URL") {
        Some(url) if url.starts_with("postgres://") || url.starts_with("postgresql://") => {
            return Err(crate::usage(anyhow::anyhow!(
                "WARDEN_DATABASE_URL is a Postgres database: back it up with pg_dump \
                 (docs/operations.md#backups); `warden backup` copies SQLite databases"
            )))
        }
        Some(url) => PathBuf::from(url.strip_prefix("sqlite://").ok_or_else(|| {
            crate::usage(anyhow::anyhow!(
                "WARDEN_DATABASE_URL {url:?} is neither sqlite:// nor postgres://"
            ))
        })?),
        None => config.home.join("warden.db"),
    };
    let databases: Vec<PathBuf> = [service, config.home.join("local.db")]
        .into_iter()
        .filter(|path| path.is_file())
        .collect();
    if databases.is_empty() {
        return Err(crate::usage(anyhow::anyhow!(
            "no database to back up in {} (neither warden.db nor local.db exists)",
            config.home.display()
        )));
    }
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("cannot create {}", args.dir.display()))?;
    let mut written = Vec::new();
    for database in &databases {
        let name = database.file_name().unwrap_or_default();
        let target = args.dir.join(name);
        if target.exists() {
            return Err(crate::usage(anyhow::anyhow!(
                "{} exists already: back up into an empty directory",
                target.display()
            )));
        }
        let bytes = warden_service::storage::backup_sqlite(database, &target)
            .with_context(|| format!("cannot back up {}", database.display()))?;
        eprintln!(
            "warden: backed up {} to {} ({bytes} bytes)",
            database.display(),
            target.display()
        );
        written.push(serde_json::json!({
            "database": database, "backup": target, "bytes": bytes
        }));
    }
    if args.json {
        println!("{}", serde_json::json!({ "backups": written }));
    }
    Ok(0)
}
