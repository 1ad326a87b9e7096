//! `warden maintain`: its arguments and how a maintenance result reads on a terminal. The task
//! runs through the front door like `warden run` (`local_cli` in-process, `remote_cli` with a
//! server): the repository pinned, its lockfile profiled (Cargo, Go or npm), the checks on the base, the
//! upgrades discovered, applied and checked in the sandbox, and a proposal commit in Warden's
//! mirror. The user's checkout is only read.

use crate::text;
use warden_engine::change::MaintainOptions;
use warden_protocol::{ChangeResult, Maintenance};

#[derive(Debug, clap::Args)]
pub struct MaintainArgs {
    /// The repository: local path or git URL, optionally `@REV`; with --server, the name of a
    /// repository registered on the server
    #[arg(long = "repo", value_name = "PATH|URL[@REV]")]
    pub repo: String,
    /// What to upgrade: `all` direct dependencies (default), `vulnerable` packages (those a
    /// scan against `[maintain] advisory_db` or `osv_db` finds), or package names (repeatable):
    /// crate names, Go module paths (`golang.org/x/text`), npm names (`@types/node`)
    #[arg(long = "select", value_name = "all|vulnerable|NAME", num_args = 1..)]
    pub select: Vec<String>,
    /// `baseline`: deterministic, no model, drops an upgrade that breaks a check (the default);
    /// `model`: when an upgrade breaks a check, the model repairs the code (scoped to the
    /// upgrade: a repair that moves the lockfile is refused)
    #[arg(long, value_name = "MODE")]
    pub mode: Option<String>,
    /// A check command run with `bash -c` in the sandbox on the base and on each candidate
    /// tree (repeatable; default the ecosystem's: `cargo test --locked --offline`,
    /// `go test ./...`, or `npm ci --offline` and `npm test`)
    #[arg(long = "check", value_name = "CMD")]
    pub checks: Vec<String>,
    /// Publish the proposal to the repository's remote as branch `warden/<task-id>`, after an
    /// approval bound to the proposal hash (`warden approve`); the task waits (exit code 4)
    #[arg(long)]
    pub publish: bool,
    /// Print the result as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Also list the informational advisories (unmaintained, unsound: RustSec's) of the
    /// repository's packages in the proposal, and whether it clears them
    #[arg(long)]
    pub informational: bool,
}

impl MaintainArgs {
    /// The task's maintenance options, checked (a usage error names what is wrong).
    pub fn options(&self) -> Result<MaintainOptions, String> {
        if let Some(empty) = self.checks.iter().find(|c| c.trim().is_empty()) {
            return Err(format!("empty --check command {empty:?}"));
        }
        let options = MaintainOptions {
            select: self.select.clone(),
            mode: self.mode.clone(),
            informational: self.informational,
        };
        options.check()?;
        Ok(options)
    }
}

/// The maintenance lines of a result: each upgrade, the advisories cleared, the scans.
pub fn render_maintenance(result: &ChangeResult) -> String {
    let Some(Maintenance {
        upgrades,
        advisories_cleared,
        scans,
        ..
    }) = &result.maintenance
    else {
        return String::new();
    };
    let mut out = String::new();
    for upgrade in upgrades {
        out.push_str(&format!(
            "  ↑ {} {} → {}",
            text::one_line(&upgrade.package),
            text::one_line(&upgrade.from),
            text::one_line(&upgrade.to)
        ));
        if !upgrade.advisories.is_empty() {
            out.push_str(&format!(
                " (clears {})",
                text::one_line(&upgrade.advisories.join(", "))
            ));
        }
        out.push('\n');
    }
    if !advisories_cleared.is_empty() {
        out.push_str(&format!(
            "  advisories cleared: {}\n",
            text::one_line(&advisories_cleared.join(", "))
        ));
    }
    for scan in scans {
        out.push_str(&format!(
            "  scan {} tree {}: {} ({}, database {})\n",
            text::one_line(&scan.stage),
            crate::text::short_commit(&scan.tree),
            text::count(scan.findings.len() as u64, "finding", "findings"),
            text::one_line(&scan.scanner),
            text::one_line(&scan.database_snapshot)
        ));
    }
    out
}

/// The human-readable form of a maintenance result: the change's, with the maintenance lines.
pub fn render(result: &ChangeResult) -> String {
    let maintenance = render_maintenance(result);
    let mut out = crate::run::render_change(result);
    if !maintenance.is_empty() {
        out = format!("Maintenance:\n{maintenance}\n{out}");
    }
    out
}
