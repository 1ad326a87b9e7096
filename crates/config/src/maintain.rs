//! `[maintain]` and `[[schedules]]`: where maintenance finds versions and advisories, and when
//! `warden serve` runs it on its own.

use serde::Deserialize;
use std::path::PathBuf;

/// `[maintain]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintainSection {
    /// The Cargo sparse index candidate versions come from (default crates.io's).
    pub index: Option<String>,
    /// A local RustSec advisory database (`advisory-db`'s layout), for `--select vulnerable`.
    pub advisory_db: Option<PathBuf>,
    /// A local OSV advisory database for Go modules (a directory of vuln.go.dev's records).
    pub osv_db: Option<PathBuf>,
    /// The git repository `warden advisories update` fetches `advisory_db` from (`https://`
    /// or `file://`; default RustSec's on GitHub).
    pub advisory_db_url: Option<String>,
    /// Where `warden advisories update` fetches `osv_db`'s exports from: `<osv_url>/<ecosystem>/all.zip`
    /// (default osv.dev's).
    pub osv_url: Option<String>,
    /// The OSV ecosystems `warden advisories update` fetches (default `["Go", "npm"]`).
    pub osv_ecosystems: Option<Vec<String>>,
    /// An advisory database fetched longer ago than this many days is warned about (default 7).
    pub max_advisory_age_days: Option<u32>,
    /// The Go module proxy candidate versions and modules come from: `https://…` or
    /// `file:///dir` (default proxy.golang.org).
    pub goproxy: Option<String>,
    /// `GOSUMDB` for the networked Go steps (default: Go's own, sum.golang.org).
    pub gosumdb: Option<String>,
    /// The npm registry candidate versions and packages come from (default npm's).
    pub npm_registry: Option<String>,
    /// Minimum age of a version, in days (default 0).
    pub cooldown_days: Option<u32>,
    /// Allow semver-incompatible (major) upgrades (default false).
    pub allow_major: Option<bool>,
    /// Only these packages are upgraded (default: all).
    #[serde(default)]
    pub allow: Vec<String>,
    /// These packages are never upgraded.
    #[serde(default)]
    pub deny: Vec<String>,
}

/// One `[[schedules]]` entry as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScheduleEntry {
    /// What runs: `maintain` (default) or `advisories_update`.
    pub action: Option<String>,
    /// A registered repository's name (`maintain` only).
    #[serde(default)]
    pub repo: String,
    /// `minute hour day-of-month month day-of-week`, UTC.
    pub cron: String,
    /// What to upgrade: `["all"]` (default), `["vulnerable"]` or package names.
    pub select: Option<Vec<String>>,
    /// Check commands replacing the registered repository's.
    pub checks: Option<Vec<String>>,
    /// Publish the proposal after an approval bound to its hash (default true).
    pub publish: Option<bool>,
    /// Open maintenance proposals of the repository above which a run is skipped (default 1).
    pub max_open_proposals: Option<u32>,
    /// Also refresh the repository's mirror and snapshot (default true).
    pub refresh: Option<bool>,
}
