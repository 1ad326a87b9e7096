//! `warden vulns`: the known vulnerabilities of a Cargo project's `Cargo.lock` or a Go module's
//! `go.mod`, and nothing else. A plain read-only command, not a task: the repository is pinned
//! as `warden ask --repo` pins it (a verified read-only snapshot of a commit; a work tree's
//! uncommitted files are left out and said), profiled as `warden maintain` profiles it, and
//! its lockfile scanned against `[maintain] advisory_db` (RustSec) or `osv_db` (OSV: Go, npm) with
//! the scan `warden maintain` makes of its base tree. For Go, the standard library is scanned
//! too and reported apart from the third-party modules. Nothing runs, nothing is fetched, no
//! model is asked and no task is recorded.
//!
//! Exit codes: 0 no finding, 1 findings (or advisories of its packages that could not be
//! evaluated), 2 no scan (a usage or configuration error, a project
//! the profile refuses, a database that does not load).

use crate::text;
use serde::Serialize;
use warden_engine::maintain::advisory::InformationalFinding;
use warden_engine::maintain::update::DatabaseAge;
use warden_engine::maintain::Stdlib;
use warden_protocol::{Finding, Scan};

#[derive(Debug, clap::Args)]
pub struct VulnsArgs {
    /// The repository: local path or git URL, optionally `@REV` (`PATH@worktree`: the work
    /// tree, uncommitted files included)
    #[arg(long = "repo", value_name = "PATH|URL[@REV]")]
    pub repo: String,
    /// Print the report as one JSON object
    #[arg(long)]
    pub json: bool,
    /// Also show informational advisories (unmaintained, unsound: RustSec's), as warnings; they
    /// do not change the exit code
    #[arg(long)]
    pub informational: bool,
    /// Show informational advisories and exit 1 when there are any, as for findings
    #[arg(long)]
    pub deny_informational: bool,
}

/// What `warden vulns` reports: the pinned repository and the scan bound to its tree.
#[derive(Debug, Serialize)]
pub struct VulnsReport {
    pub repo: String,
    pub commit: String,
    pub ecosystem: &'static str,
    /// The file scanned: `Cargo.lock` or `go.mod`.
    pub lockfile: &'static str,
    /// The third-party packages' scan, bound to the tree.
    pub scan: Scan,
    /// Go: the standard library at the version the module builds with, apart.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdlib: Option<Stdlib>,
    /// How old the advisory database is (`stale` past `[maintain] max_advisory_age_days`).
    pub database_age: DatabaseAge,
    /// Informational advisories (unmaintained, unsound) of the lockfile's packages, with
    /// `--informational` or `--deny-informational`; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub informational: Option<Vec<InformationalFinding>>,
    /// `--deny-informational`: informational advisories count like findings for the exit code.
    #[serde(skip)]
    pub deny_informational: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
}

impl VulnsReport {
    /// 0 without findings (the standard library's included), 1 with, or with an advisory of
    /// the lockfile's packages that could not be evaluated (not known to be clean).
    pub fn exit_code(&self) -> u8 {
        let stdlib = self.stdlib.as_ref().map_or(0, |s| s.findings.len());
        let denied =
            self.deny_informational && self.informational.as_ref().is_some_and(|i| !i.is_empty());
        u8::from(
            !self.scan.findings.is_empty()
                || stdlib > 0
                || !self.scan.unevaluated.is_empty()
                || denied,
        )
    }
}

/// The report for a terminal: one block per finding, then the scan it comes from (the
/// notices were shown on stderr while pinning).
pub fn render(report: &VulnsReport) -> String {
    let scan = &report.scan;
    let mut out = String::new();
    findings(&mut out, &scan.findings);
    if !scan.findings.is_empty() {
        out.push('\n');
    }
    for line in &scan.unevaluated {
        out.push_str(&format!("cannot be evaluated: {}\n", text::one_line(line)));
    }
    if let Some(informational) = &report.informational {
        for item in informational {
            let f = &item.finding;
            out.push_str(&format!(
                "warning: {} {}  {}  {}",
                text::one_line(&f.package),
                text::one_line(&f.version),
                text::one_line(&f.advisory),
                text::one_line(&item.kind)
            ));
            if !f.title.is_empty() {
                out.push_str(&format!("  {}", text::one_line(&f.title)));
            }
            out.push('\n');
        }
        if !informational.is_empty() {
            out.push_str(&format!(
                "{} (not vulnerabilities{})\n\n",
                text::count(
                    informational.len() as u64,
                    "informational advisory",
                    "informational advisories"
                ),
                if report.deny_informational {
                    "; --deny-informational fails the exit code"
                } else {
                    "; they do not change the exit code"
                }
            ));
        }
    }
    if !scan.unevaluated.is_empty() {
        out.push('\n');
    }
    let what = match (scan.findings.len(), scan.unevaluated.len()) {
        (0, 0) => "No known vulnerabilities".to_string(),
        (n, 0) => text::count(n as u64, "vulnerability", "vulnerabilities"),
        (n, u) => format!(
            "{}, and {} that could not be evaluated,",
            text::count(n as u64, "vulnerability", "vulnerabilities"),
            text::count(u as u64, "advisory", "advisories")
        ),
    };
    out.push_str(&format!(
        "{what} in {} of {} at {} (tree {}; {}, advisory database {}, {})\n",
        report.lockfile,
        text::one_line(&report.repo),
        text::short_commit(&report.commit),
        text::short_commit(&scan.tree),
        text::one_line(&scan.scanner),
        text::one_line(&scan.database_snapshot),
        text::one_line(&scan.scanned_at)
    ));
    let age = &report.database_age;
    out.push_str(&format!(
        "Advisory database {}: {}\n",
        text::one_line(&age.path.display().to_string()),
        text::one_line(&age.describe())
    ));
    if let Some(warning) = age.warning() {
        out.push_str(&format!("warning: {}\n", text::one_line(&warning)));
    }
    if let Some(stdlib) = &report.stdlib {
        out.push('\n');
        findings(&mut out, &stdlib.findings);
        if !stdlib.findings.is_empty() {
            out.push('\n');
        }
        let what = match stdlib.findings.len() {
            0 => "No known vulnerabilities".to_string(),
            n => text::count(n as u64, "vulnerability", "vulnerabilities"),
        };
        out.push_str(&format!(
            "{what} in the Go standard library at go{} ({})\n",
            text::one_line(&stdlib.go_version),
            text::one_line(&stdlib.source)
        ));
    }
    out
}

/// One block per finding.
fn findings(out: &mut String, findings: &[Finding]) {
    for finding in findings {
        out.push_str(&format!(
            "{} {}  {}",
            text::one_line(&finding.package),
            text::one_line(&finding.version),
            text::one_line(&finding.advisory)
        ));
        if !finding.title.is_empty() {
            out.push_str(&format!("  {}", text::one_line(&finding.title)));
        }
        out.push('\n');
        // Each alternative is a range whose comparators are joined by commas (`>= 1.2.3, <
        // 2.0.0`); joined by commas too, the alternatives would read as one range.
        let patched = if finding.patched.is_empty() {
            "no patched version".to_string()
        } else {
            text::one_line(&finding.patched.join(" or "))
        };
        out.push_str(&format!("  patched: {patched}\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_protocol::Finding;

    fn report(findings: Vec<Finding>) -> VulnsReport {
        VulnsReport {
            repo: "app".into(),
            commit: "0123456789abcdef0123".into(),
            ecosystem: "cargo",
            lockfile: "Cargo.lock",
            stdlib: None,
            scan: Scan {
                stage: "base".into(),
                tree: "fedcba9876543210fedc".into(),
                scanner: "warden-rustsec/0.1.0".into(),
                database: "/db".into(),
                database_snapshot: "git:abc".into(),
                scanned_at: "2026-12-03T15:00:00Z".into(),
                findings,
                unevaluated: vec![],
            },
            informational: None,
            deny_informational: false,
            database_age: DatabaseAge {
                path: "/db".into(),
                fetched_at: Some("2026-12-01T15:00:00Z".into()),
                age_days: Some(2),
                recorded_by: "warden advisories update",
                stale: false,
                max_age_days: 7,
            },
            notices: vec![],
        }
    }

    #[test]
    fn findings_read_with_their_patched_ranges_and_the_scan_they_come_from() {
        let dirty = report(vec![Finding {
            advisory: "RUSTSEC-2021-0003".into(),
            package: "smallvec".into(),
            version: "1.6.0".into(),
            title: "Buffer overflow".into(),
            patched: vec!["^0.6.14".into(), ">= 1.6.1".into()],
            path: None,
        }]);
        assert_eq!(dirty.exit_code(), 1);
        assert_eq!(
            render(&dirty),
            "smallvec 1.6.0  RUSTSEC-2021-0003  Buffer overflow\n  patched: ^0.6.14 or >= 1.6.1\n\n\
             1 vulnerability in Cargo.lock of app at 0123456789ab (tree fedcba987654; \
             warden-rustsec/0.1.0, advisory database git:abc, 2026-12-03T15:00:00Z)\n\
             Advisory database /db: fetched 2 days ago, at 2026-12-01T15:00:00Z\n"
        );
        // Alternatives are joined by "or": the commas belong to each range.
        let two_ranges = report(vec![Finding {
            advisory: "RUSTSEC-2099-0001".into(),
            package: "h2".into(),
            version: "2.0.5".into(),
            title: String::new(),
            patched: vec![">= 1.2.3, < 2.0.0".into(), ">= 2.1.0".into()],
            path: None,
        }]);
        assert!(
            render(&two_ranges).starts_with(
                "h2 2.0.5  RUSTSEC-2099-0001\n  patched: >= 1.2.3, < 2.0.0 or >= 2.1.0\n"
            ),
            "{}",
            render(&two_ranges)
        );
        let mut clean = report(vec![]);
        assert_eq!(clean.exit_code(), 0);
        // Past [maintain] max_advisory_age_days: said, and the exit code is the scan's.
        clean.database_age.age_days = Some(104);
        clean.database_age.stale = true;
        assert!(
            render(&clean).ends_with(
                "Advisory database /db: fetched 104 days ago, at 2026-12-01T15:00:00Z\n\
                 warning: the advisory database /db was fetched 104 days ago, more than \
                 [maintain] max_advisory_age_days (7): advisories published since are not known \
                 to it; run `warden advisories update`\n"
            ),
            "{}",
            render(&clean)
        );
        assert_eq!(clean.exit_code(), 0);
        assert!(
            render(&clean).starts_with("No known vulnerabilities in Cargo.lock of app"),
            "{}",
            render(&clean)
        );
    }
}
