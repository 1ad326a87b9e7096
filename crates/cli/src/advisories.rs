//! `warden advisories update`: fetches or refreshes the advisory databases `[maintain]` names
//! (`advisory_db` from `advisory_db_url`, `osv_db` from `osv_url` per `osv_ecosystems`)
//! through Warden's egress proxy, each replacing its old copy in one step only once it loads
//! (`warden_engine::maintain::update`). Exit codes: 0 every database updated, 1 one failed (its
//! old copy kept), 2 nothing to update (a usage or configuration error).

use crate::text;
use serde::Serialize;
use warden_engine::config::Config;
use warden_engine::maintain::update::{DatabaseUpdate, UpdateOutcome, UpdateReport};

#[derive(Debug, clap::Subcommand)]
pub enum AdvisoriesCommand {
    /// Fetch or refresh [maintain] advisory_db (RustSec, git) and osv_db (OSV's per-ecosystem
    /// exports) through Warden's egress proxy; each replaces its old copy only once it loads;
    /// exit 1 when one failed (its old copy is kept)
    Update {
        /// Print the report as one JSON object
        #[arg(long)]
        json: bool,
    },
}

/// What `warden advisories update --json` prints.
#[derive(Debug, Serialize)]
struct UpdateView<'a> {
    databases: &'a [DatabaseUpdate],
    /// Connections through Warden's egress proxy, refused ones included.
    connections: Vec<ConnectionView>,
}

#[derive(Debug, Serialize)]
struct ConnectionView {
    method: String,
    host: String,
    port: u16,
    allowed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    bytes_received: u64,
}

pub async fn advisories(config: Config, command: AdvisoriesCommand) -> anyhow::Result<u8> {
    let AdvisoriesCommand::Update { json } = command;
    let progress = |line: &str| eprintln!("{}", text::one_line(line));
    let now = || warden_runtime::Clock::now_ms(&warden_runtime::SystemClock);
    let report = warden_engine::maintain::update::update(&config, &now, &progress)
        .await
        .map_err(|e| crate::usage(anyhow::anyhow!(e)))?;
    for refused in report.connections.iter().filter(|c| !c.allowed) {
        eprintln!(
            "warden: Warden's egress proxy refused {} {}:{}: {}",
            text::one_line(&refused.method),
            text::one_line(&refused.host),
            refused.port,
            text::one_line(refused.reason.as_deref().unwrap_or("not admitted"))
        );
    }
    if json {
        let view = UpdateView {
            databases: &report.databases,
            connections: report
                .connections
                .iter()
                .map(|c| ConnectionView {
                    method: c.method.clone(),
                    host: c.host.clone(),
                    port: c.port,
                    allowed: c.allowed,
                    reason: c.reason.clone(),
                    bytes_received: c.bytes_received,
                })
                .collect(),
        };
        println!("{}", text::json_pretty(&view)?);
    } else {
        print!("{}", text::lines(&render(&report)));
    }
    Ok(u8::from(report.failed() > 0))
}

/// One line per database: what it holds now, or why its old copy was kept.
pub fn render(report: &UpdateReport) -> String {
    let mut out = String::new();
    for database in &report.databases {
        let path = database.path.display().to_string();
        match &database.outcome {
            UpdateOutcome::Updated(fetched) => out.push_str(&format!(
                "{} {}: updated from {}: {} ({})\n",
                text::one_line(&database.name),
                text::one_line(&path),
                text::one_line(&database.source),
                text::count(fetched.advisories as u64, "advisory", "advisories"),
                text::one_line(&fetched.snapshot)
            )),
            UpdateOutcome::Failed { error } => out.push_str(&format!(
                "{} {}: not updated, the old copy is kept: {}\n",
                text::one_line(&database.name),
                text::one_line(&path),
                text::one_line(error)
            )),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_engine::maintain::update::Fetched;

    #[test]
    fn each_database_reads_as_updated_or_kept() {
        let report = UpdateReport {
            databases: vec![
                DatabaseUpdate {
                    name: "RustSec".into(),
                    path: "/srv/advisory-db".into(),
                    source: "https://github.com/rustsec/advisory-db.git".into(),
                    outcome: UpdateOutcome::Updated(Fetched {
                        fetched_at: "2026-05-01T00:00:00Z".into(),
                        source: "https://github.com/rustsec/advisory-db.git".into(),
                        snapshot: "git:abc".into(),
                        advisories: 1,
                    }),
                },
                DatabaseUpdate {
                    name: "OSV npm".into(),
                    path: "/srv/osv/npm".into(),
                    source: "https://osv.example/npm/all.zip".into(),
                    outcome: UpdateOutcome::Failed {
                        error: "https://osv.example/npm/all.zip answered 500".into(),
                    },
                },
            ],
            connections: Vec::new(),
        };
        assert_eq!(report.failed(), 1);
        assert_eq!(
            render(&report),
            "RustSec /srv/advisory-db: updated from https://github.com/rustsec/advisory-db.git: \
             1 advisory (git:abc)\n\
             OSV npm /srv/osv/npm: not updated, the old copy is kept: \
             https://osv.example/npm/all.zip answered 500\n"
        );
    }
}
