//! A local advisory database in the OSV schema (<https://ossf.github.io/osv-schema/>), as Go's
//! vulnerability database publishes it (`vuln.go.dev`: one `ID.json` per advisory, under
//! `ID/` in its v1 layout; osv.dev's Go export: the same records in one directory), and the scan
//! of a module's requirements against it.
//!
//! Only the records of the project's ecosystem (`Go`, `npm`) are read. The scan is by module and version (the way
//! `warden maintain` chooses upgrades), not by reachable symbol as `govulncheck` refines it:
//! a finding says a required module's version is affected, not that the code calls the
//! vulnerable function. The standard library is the package `stdlib`: it is scanned at the Go
//! version given, and reported apart from the third-party modules.

use super::cargo::Lockfile;
use serde::Deserialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use warden_protocol::Finding;

/// Go's ecosystem name in OSV records.
pub const GO: &str = "Go";

/// npm's ecosystem name in OSV records.
pub const NPM: &str = "npm";

/// crates.io's ecosystem name in OSV records (GitHub's advisory database and osv.dev's export
/// publish Rust advisories under it; Cargo projects read them when no RustSec database is set).
pub const CRATES_IO: &str = "crates.io";

/// The OSV ecosystem named `name` (`Go`, `npm`, `crates.io`), as the readers take it.
pub fn ecosystem_name(name: &str) -> Option<&'static str> {
    [GO, NPM, CRATES_IO]
        .into_iter()
        .find(|known| *known == name)
}

/// The standard library's package name in Go's records.
pub const STDLIB: &str = "stdlib";

/// The most files a database directory is read from, and the deepest it is walked.
const MAX_FILES: usize = 1_000_000;
const MAX_DEPTH: usize = 6;

/// The file in a database directory that says when Warden fetched it (`warden advisories
/// update` writes it, [`super::update`]); here it marks another ecosystem's directory, which a
/// scan of this one does not walk.
pub const RECORD: &str = ".warden-fetched";

/// The scanner's name and version in a scan record.
pub fn scanner() -> String {
    format!("warden-osv/{}", env!("CARGO_PKG_VERSION"))
}

#[derive(Debug, Clone, Deserialize)]
struct Record {
    id: String,
    /// Its other ids (`CVE-…`, `RUSTSEC-…`, `GHSA-…`).
    #[serde(default)]
    aliases: Vec<String>,
    /// RFC 3339: of two copies of one record, the later one is read.
    #[serde(default)]
    modified: String,
    #[serde(default)]
    summary: String,
    #[serde(default)]
    withdrawn: Option<String>,
    #[serde(default)]
    affected: Vec<Affected>,
}

#[derive(Debug, Clone, Deserialize)]
struct Affected {
    package: Package,
    #[serde(default)]
    ranges: Vec<Range>,
    #[serde(default)]
    versions: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct Package {
    ecosystem: String,
    name: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Range {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    events: Vec<RangeEvent>,
}

#[derive(Debug, Clone, Deserialize)]
struct RangeEvent {
    introduced: Option<String>,
    fixed: Option<String>,
    last_affected: Option<String>,
    limit: Option<String>,
}

/// One range event, its version parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Introduced(semver::Version),
    Fixed(semver::Version),
    LastAffected(semver::Version),
}

impl Event {
    fn version(&self) -> &semver::Version {
        match self {
            Event::Introduced(v) | Event::Fixed(v) | Event::LastAffected(v) => v,
        }
    }
}

/// OSV's `introduced: "0"`, "from the start": below every version, pre-releases and Go's
/// `v0.0.0-…` pseudo-versions included (`0.0.0-0` is the lowest semver version there is).
fn lowest() -> semver::Version {
    semver::Version {
        pre: semver::Prerelease::new("0").unwrap_or_default(),
        ..semver::Version::new(0, 0, 0)
    }
}

/// A version of `ecosystem` in its own order, read as semver: Go's module versions (`v1.2.3`,
/// pseudo-versions `v0.0.0-20220314234659-1baeb1ce4c0b`, `+incompatible`; records write them
/// with or without the `v`), npm's (node-semver: pre-releases, a leading `v` or `=` as
/// node-semver cleans it), crates.io's (semver). All three orders are semver precedence,
/// pre-releases below their release and build metadata ignored ([`cmp`]); `0` is
/// [`lowest`].
fn parse_version(ecosystem: &str, text: &str) -> Option<semver::Version> {
    if text == "0" {
        return Some(lowest());
    }
    match ecosystem {
        GO => {
            let text = text.strip_prefix('v').unwrap_or(text);
            semver::Version::parse(text)
                .ok()
                .or_else(|| semver::Version::parse(&super::gomod::full_go_version(text)).ok())
        }
        NPM => {
            let text = text.trim();
            let text = text.strip_prefix('=').unwrap_or(text);
            semver::Version::parse(text.strip_prefix('v').unwrap_or(text)).ok()
        }
        _ => semver::Version::parse(text).ok(),
    }
}

/// The ecosystems' version order: semver precedence (build metadata does not order).
fn cmp(a: &semver::Version, b: &semver::Version) -> std::cmp::Ordering {
    a.cmp_precedence(b)
}

/// Where an affected interval ends.
#[derive(Debug, Clone, PartialEq, Eq)]
enum End {
    /// Before this version (a `fixed` event).
    Before(semver::Version),
    /// At this version, included (a `last_affected` event).
    Through(semver::Version),
    /// No fix.
    Open,
}

/// Versions from `start` (included) to `end`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Interval {
    start: semver::Version,
    end: End,
}

impl Interval {
    fn contains(&self, version: &semver::Version) -> bool {
        cmp(version, &self.start).is_ge()
            && match &self.end {
                End::Before(v) => cmp(version, v).is_lt(),
                End::Through(v) => cmp(version, v).is_le(),
                End::Open => true,
            }
    }

    /// Whether `version` is at or before this interval's end (it touches or overlaps it).
    fn reaches(&self, version: &semver::Version) -> bool {
        match &self.end {
            End::Before(v) => cmp(version, v).is_le(),
            End::Through(v) => cmp(version, v).is_le(),
            End::Open => true,
        }
    }
}

/// A range's events, sorted by version, as the intervals they affect (OSV's evaluation: an
/// `introduced` opens one, a `fixed` closes it before its version, a `last_affected` at it).
fn intervals(mut events: Vec<Event>) -> Vec<Interval> {
    events.sort_by(|a, b| cmp(a.version(), b.version()));
    let mut out = Vec::new();
    let mut start: Option<semver::Version> = None;
    for event in events {
        match event {
            Event::Introduced(v) => {
                start.get_or_insert(v);
            }
            Event::Fixed(v) => {
                if let Some(start) = start.take() {
                    out.push(Interval {
                        start,
                        end: End::Before(v),
                    });
                }
            }
            Event::LastAffected(v) => {
                if let Some(start) = start.take() {
                    out.push(Interval {
                        start,
                        end: End::Through(v),
                    });
                }
            }
        }
    }
    if let Some(start) = start {
        out.push(Interval {
            start,
            end: End::Open,
        });
    }
    out
}

/// One advisory's effect on one package.
#[derive(Debug, Clone)]
pub struct Advisory {
    pub id: String,
    pub package: String,
    pub title: String,
    /// The affected intervals of its `SEMVER` and `ECOSYSTEM` ranges.
    intervals: Vec<Interval>,
    /// Versions listed one by one.
    versions: Vec<semver::Version>,
    pub withdrawn: bool,
    /// The record's other ids.
    pub aliases: Vec<String>,
}

impl Advisory {
    /// Whether `version` is affected: listed, or inside a range.
    pub fn affects(&self, version: &semver::Version) -> bool {
        self.versions.iter().any(|v| cmp(v, version).is_eq())
            || self.intervals.iter().any(|i| i.contains(version))
    }

    /// The versions that fix it, one unambiguous range each (`>= 1.2.6`, or `>= 0.2.4, < 1.0.0`
    /// when a later version is affected again): the gaps after each affected interval, over
    /// every range of the advisory merged. `prefix` is written before each version (`v` for
    /// Go modules, `go` for the standard library).
    pub fn patched(&self, prefix: &str) -> Vec<String> {
        let mut sorted = self.intervals.clone();
        sorted.sort_by(|a, b| cmp(&a.start, &b.start));
        let mut merged: Vec<Interval> = Vec::new();
        for interval in sorted {
            match merged.last_mut() {
                Some(last) if last.reaches(&interval.start) => {
                    let later = match (&last.end, &interval.end) {
                        (End::Open, _) | (_, End::Open) => End::Open,
                        (End::Before(a) | End::Through(a), End::Before(b) | End::Through(b)) => {
                            match cmp(a, b) {
                                std::cmp::Ordering::Less => interval.end.clone(),
                                std::cmp::Ordering::Greater => last.end.clone(),
                                // The same version: `Through` reaches further than `Before`.
                                std::cmp::Ordering::Equal => {
                                    if matches!(interval.end, End::Through(_)) {
                                        interval.end.clone()
                                    } else {
                                        last.end.clone()
                                    }
                                }
                            }
                        }
                    };
                    last.end = later;
                }
                _ => merged.push(interval),
            }
        }
        let mut out = Vec::new();
        for (i, interval) in merged.iter().enumerate() {
            let from = match &interval.end {
                End::Before(v) => format!(">= {prefix}{v}"),
                End::Through(v) => format!("> {prefix}{v}"),
                End::Open => continue,
            };
            out.push(match merged.get(i + 1) {
                Some(next) => format!("{from}, < {prefix}{}", next.start),
                None => from,
            });
        }
        out
    }
}

/// An advisory of the project's ecosystem whose affected versions cannot be evaluated: a
/// range of commits only (`GIT`), a version its ecosystem's order does not read, a range type
/// OSV does not define. Not skipped: a scan of a lockfile holding its package says so.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unevaluable {
    pub id: String,
    pub package: String,
    pub reason: String,
}

/// An OSV database directory, loaded.
#[derive(Debug, Clone)]
pub struct OsvDb {
    pub path: PathBuf,
    /// The ecosystem whose records were read: [`GO`] or [`NPM`].
    pub ecosystem: &'static str,
    pub advisories: Vec<Advisory>,
    /// The advisories of the ecosystem that cannot be evaluated, by package.
    pub unevaluable: Vec<Unevaluable>,
    /// `git:<commit>` of a git checkout, else `sha256:<digest>` of the record files (paths and
    /// contents, in path order).
    pub snapshot: String,
}

/// Every `*.json` file under `dir` (not following symbolic links), sorted.
fn json_files(
    dir: &Path,
    depth: usize,
    skip: &[PathBuf],
    out: &mut Vec<PathBuf>,
) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if kind.is_dir() && !hidden && !skip.contains(&path) {
            // Deeper than any known layout (GitHub's advisory database:
            // `advisories/github-reviewed/YYYY/MM/GHSA-…/GHSA-….json`): refused rather than
            // passed over, which would read as clean.
            if depth >= MAX_DEPTH {
                return Err(format!(
                    "{} is nested deeper than {MAX_DEPTH} directories",
                    path.display()
                ));
            }
            json_files(&path, depth + 1, skip, out)?;
        } else if kind.is_file() && path.extension().is_some_and(|e| e == "json") {
            out.push(path);
            if out.len() > MAX_FILES {
                return Err(format!(
                    "more than {MAX_FILES} files under {}",
                    dir.display()
                ));
            }
        }
    }
    Ok(())
}

impl OsvDb {
    /// Loads every OSV record (a JSON object with `id` and `affected`) under `path`; other JSON
    /// files (Go's `index/*.json`) are not records and are passed over. A record that does not
    /// parse fails the load, naming it: a scan that silently skipped advisories would read as
    /// clean.
    pub fn open(path: &Path, ecosystem: &'static str) -> Result<OsvDb, String> {
        let mut files = Vec::new();
        // `warden advisories update` keeps each ecosystem's records in a directory of its own:
        // another ecosystem's is not walked.
        let others: Vec<PathBuf> = [GO, NPM, CRATES_IO]
            .into_iter()
            .filter(|other| *other != ecosystem)
            .map(|other| path.join(other))
            .filter(|dir| dir.join(RECORD).is_file())
            .collect();
        json_files(path, 0, &others, &mut files)
            .map_err(|e| format!("OSV database {}: {e}", path.display()))?;
        files.sort();
        let mut digest = Sha256::new();
        // One record per id: a copy laid out by hand beside the update's is read once.
        let mut records: std::collections::BTreeMap<String, Record> = Default::default();
        for file in &files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
            let value: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| format!("OSV record {}: not JSON: {e}", file.display()))?;
            let is_record = value.get("id").is_some() && value.get("affected").is_some();
            if !is_record {
                continue;
            }
            let relative = file.strip_prefix(path).unwrap_or(file);
            digest.update(relative.to_string_lossy().as_bytes());
            digest.update([0]);
            digest.update(text.as_bytes());
            digest.update([0]);
            let record: Record = serde_json::from_value(value)
                .map_err(|e| format!("OSV record {}: {e}", file.display()))?;
            if !record
                .affected
                .iter()
                .any(|a| a.package.ecosystem == ecosystem)
            {
                continue;
            }
            match records.get(&record.id) {
                Some(kept) if kept.modified >= record.modified => {}
                _ => {
                    records.insert(record.id.clone(), record);
                }
            }
        }
        let mut advisories = Vec::new();
        let mut unevaluable = Vec::new();
        for record in records.into_values() {
            let (read, not_read) = advisories_of(record, ecosystem);
            advisories.extend(read);
            unevaluable.extend(not_read);
        }
        let snapshot = super::advisory::git_head(path)
            .map(|commit| format!("git:{commit}"))
            .unwrap_or_else(|| format!("sha256:{}", hex::encode(digest.finalize())));
        Ok(OsvDb {
            path: path.to_path_buf(),
            ecosystem,
            advisories,
            unevaluable,
            snapshot,
        })
    }

    /// How many records of the ecosystem it holds (an advisory naming two packages is one).
    pub fn record_count(&self) -> usize {
        let ids: std::collections::HashSet<&str> =
            self.advisories.iter().map(|a| a.id.as_str()).collect();
        ids.len()
    }

    /// The advisories that apply to the required modules of `lock` (a `go.mod` read as a
    /// lockfile), in package and id order.
    pub fn scan(&self, lock: &Lockfile) -> Vec<Finding> {
        let mut findings = Vec::new();
        for package in lock.packages.iter().filter(|p| p.source.is_some()) {
            // A version the order does not read is in [`OsvDb::unevaluated`].
            let Some(version) = parse_version(self.ecosystem, &package.version) else {
                continue;
            };
            findings.extend(self.findings(
                &package.name,
                &package.version,
                package.path.as_deref(),
                &version,
            ));
        }
        sort(&mut findings);
        findings
    }

    /// What the scan of `lock` could not evaluate, one line each: an advisory of one of its
    /// packages that cannot be evaluated ([`Unevaluable`]), a package version its
    /// ecosystem's order does not read while advisories name the package. Empty for a
    /// complete scan; anything else leaves the scan inconclusive for those packages.
    pub fn unevaluated(&self, lock: &Lockfile) -> Vec<String> {
        let mut out = Vec::new();
        for package in lock.packages.iter().filter(|p| p.source.is_some()) {
            for advisory in self
                .unevaluable
                .iter()
                .filter(|u| u.package == package.name)
            {
                out.push(format!(
                    "{} {}: advisory {} cannot be evaluated ({}); the package may be affected",
                    package.name, package.version, advisory.id, advisory.reason
                ));
            }
            if parse_version(self.ecosystem, &package.version).is_none() {
                let ids: Vec<&str> = self
                    .advisories
                    .iter()
                    .filter(|a| a.package == package.name && !a.withdrawn)
                    .map(|a| a.id.as_str())
                    .collect();
                if !ids.is_empty() {
                    out.push(format!(
                        "{} {}: not a {} version, so advisories {} cannot be evaluated against it",
                        package.name,
                        package.version,
                        self.ecosystem,
                        ids.join(", ")
                    ));
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The advisories of the standard library at Go `version` (`1.19.8`).
    pub fn scan_stdlib(&self, version: &str) -> Vec<Finding> {
        let Some(parsed) = parse_version(GO, version) else {
            return Vec::new();
        };
        let mut findings = self.findings(STDLIB, &format!("go{version}"), None, &parsed);
        sort(&mut findings);
        findings
    }

    fn findings(
        &self,
        package: &str,
        shown: &str,
        path: Option<&str>,
        version: &semver::Version,
    ) -> Vec<Finding> {
        let mut out: Vec<Finding> = Vec::new();
        for advisory in self
            .advisories
            .iter()
            .filter(|a| a.package == package && !a.withdrawn && a.affects(version))
        {
            // One finding per advisory and package, however many ranges matched.
            if out.iter().any(|f| f.advisory == advisory.id) {
                continue;
            }
            out.push(Finding {
                advisory: advisory.id.clone(),
                package: package.to_string(),
                version: shown.to_string(),
                title: advisory.title.clone(),
                patched: advisory.patched(match (package, self.ecosystem) {
                    (STDLIB, _) => "go",
                    (_, GO) => "v",
                    _ => "",
                }),
                path: path.map(str::to_string),
            });
        }
        out
    }

    /// Whether advisory `id` affects `package` at `version`.
    /// Advisory `id`'s names: the id and its record's aliases.
    pub fn names(&self, id: &str) -> Vec<String> {
        let mut names = vec![id.to_string()];
        if let Some(advisory) = self.advisories.iter().find(|a| a.id == id) {
            names.extend(advisory.aliases.iter().cloned());
        }
        names
    }

    pub fn affects(&self, id: &str, package: &str, version: &semver::Version) -> bool {
        self.advisories
            .iter()
            .any(|a| a.id == id && a.package == package && a.affects(version))
    }
}

fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        (&a.package, &a.version, &a.path, &a.advisory).cmp(&(
            &b.package,
            &b.version,
            &b.path,
            &b.advisory,
        ))
    });
}

/// A record's advisories of `ecosystem`, one per affected package, and those of its packages
/// that cannot be evaluated. `SEMVER` and `ECOSYSTEM` ranges are read in the ecosystem's order
/// ([`parse_version`]); a `GIT` range (commits) beside them is passed over, since they say in
/// versions what it says in commits; an entry with only `GIT` ranges, a range type OSV does not
/// define, an event version the order does not read, a `limit` event or an entry with neither
/// ranges nor versions makes the package's advisory unevaluable.
fn advisories_of(record: Record, ecosystem: &str) -> (Vec<Advisory>, Vec<Unevaluable>) {
    let mut out: Vec<Advisory> = Vec::new();
    let mut unevaluable: Vec<Unevaluable> = Vec::new();
    for affected in record
        .affected
        .iter()
        .filter(|a| a.package.ecosystem == ecosystem)
    {
        let name = &affected.package.name;
        match affected_intervals(affected, ecosystem) {
            Ok((intervals, versions)) => match out.iter_mut().find(|a| &a.package == name) {
                Some(same) => {
                    same.intervals.extend(intervals);
                    same.versions.extend(versions);
                }
                None => out.push(Advisory {
                    id: record.id.clone(),
                    package: name.clone(),
                    title: record.summary.clone(),
                    intervals,
                    versions,
                    withdrawn: record.withdrawn.is_some(),
                    aliases: record.aliases.clone(),
                }),
            },
            // A withdrawn advisory is not a vulnerability, evaluable or not.
            Err(_) if record.withdrawn.is_some() => {}
            Err(reason) => {
                if !unevaluable.iter().any(|u| &u.package == name) {
                    unevaluable.push(Unevaluable {
                        id: record.id.clone(),
                        package: name.clone(),
                        reason,
                    });
                }
            }
        }
    }
    // Part of a package's advisory unevaluable is all of it: its other entries alone could
    // read as clean.
    out.retain(|a| !unevaluable.iter().any(|u| u.package == a.package));
    (out, unevaluable)
}

/// One `affected` entry's intervals and listed versions, or why it cannot be evaluated.
fn affected_intervals(
    affected: &Affected,
    ecosystem: &str,
) -> Result<(Vec<Interval>, Vec<semver::Version>), String> {
    let mut intervals = Vec::new();
    let mut evaluable_ranges = 0;
    for range in &affected.ranges {
        match range.kind.as_str() {
            "SEMVER" | "ECOSYSTEM" => {}
            "GIT" => continue,
            other => return Err(format!("a range of unknown type {other:?}")),
        }
        evaluable_ranges += 1;
        let mut events = Vec::new();
        for event in &range.events {
            let parse = |text: &String| {
                parse_version(ecosystem, text).ok_or_else(|| {
                    format!(
                        "{} range version {text:?} is not a {ecosystem} version",
                        range.kind
                    )
                })
            };
            if let Some(v) = &event.introduced {
                events.push(Event::Introduced(parse(v)?));
            }
            if let Some(v) = &event.fixed {
                events.push(Event::Fixed(parse(v)?));
            }
            if let Some(v) = &event.last_affected {
                events.push(Event::LastAffected(parse(v)?));
            }
            if event.limit.is_some() {
                return Err(format!("a `limit` event in a {} range", range.kind));
            }
        }
        intervals.extend(self::intervals(events));
    }
    let mut versions = Vec::new();
    for text in &affected.versions {
        versions.push(
            parse_version(ecosystem, text)
                .ok_or_else(|| format!("listed version {text:?} is not a {ecosystem} version"))?,
        );
    }
    if evaluable_ranges == 0 && versions.is_empty() {
        return Err(if affected.ranges.is_empty() {
            "neither ranges nor versions".to_string()
        } else {
            "only GIT ranges (commits), no versions".to_string()
        });
    }
    Ok((intervals, versions))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: &str, package: &str, events: &str) -> String {
        format!(
            r#"{{"schema_version":"1.3.1","id":"{id}","modified":"2026-01-01T00:00:00Z",
"summary":"Bad thing in {package}","affected":[{{"package":{{"name":"{package}","ecosystem":"Go"}},
"ranges":[{{"type":"SEMVER","events":{events}}}]}}]}}"#
        )
    }

    fn db(files: &[(&str, String)]) -> (tempfile::TempDir, OsvDb) {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            let path = dir.path().join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        let db = OsvDb::open(dir.path(), GO).unwrap();
        (dir, db)
    }

    fn v(text: &str) -> semver::Version {
        semver::Version::parse(text).unwrap()
    }

    #[test]
    fn ranges_follow_osv_evaluation_with_fixed_and_last_affected_events() {
        let (_dir, db) = db(&[
            (
                "ID/GO-2026-0001.json",
                record(
                    "GO-2026-0001",
                    "example.com/greet",
                    r#"[{"introduced":"0"},{"fixed":"1.0.1"},{"introduced":"1.1.0"},{"fixed":"1.1.2"}]"#,
                ),
            ),
            (
                "ID/GO-2026-0002.json",
                record(
                    "GO-2026-0002",
                    "example.com/other",
                    r#"[{"introduced":"0.2.0"},{"last_affected":"0.3.0"}]"#,
                ),
            ),
            (
                "index/db.json",
                r#"{"modified":"2026-01-01T00:00:00Z"}"#.into(),
            ),
            ("index/modules.json", "[]".into()),
        ]);
        assert_eq!(db.advisories.len(), 2, "index files are not records");
        let greet = &db.advisories[0];
        for (version, affected) in [
            ("0.9.0", true),
            ("1.0.0", true),
            ("1.0.1", false),
            ("1.0.9", false),
            ("1.1.0", true),
            ("1.1.1", true),
            ("1.1.2", false),
        ] {
            assert_eq!(greet.affects(&v(version)), affected, "{version}");
        }
        assert_eq!(greet.patched("v"), [">= v1.0.1, < v1.1.0", ">= v1.1.2"]);
        let other = &db.advisories[1];
        assert!(!other.affects(&v("0.1.9")));
        assert!(other.affects(&v("0.3.0")));
        assert!(!other.affects(&v("0.3.1")));
        assert!(db.snapshot.starts_with("sha256:"), "{}", db.snapshot);
    }

    #[test]
    fn a_go_mod_and_the_standard_library_are_scanned_apart() {
        let (_dir, db) = db(&[
            (
                "GO-2026-0001.json",
                record(
                    "GO-2026-0001",
                    "example.com/greet",
                    r#"[{"introduced":"0"},{"fixed":"1.0.1"}]"#,
                ),
            ),
            (
                "GO-2026-0003.json",
                record(
                    "GO-2026-0003",
                    "stdlib",
                    r#"[{"introduced":"0"},{"fixed":"1.19.9"}]"#,
                ),
            ),
        ]);
        let go_mod = super::super::gomod::GoMod::parse(
            "module a\ngo 1.19\nrequire (\n example.com/greet v1.0.0\n example.com/fine v1.0.0\n)\n",
        )
        .unwrap();
        let findings = db.scan(&go_mod.lockfile());
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].package, "example.com/greet");
        assert_eq!(findings[0].version, "v1.0.0");
        assert_eq!(findings[0].title, "Bad thing in example.com/greet");
        let stdlib = db.scan_stdlib("1.19.8");
        assert_eq!(stdlib.len(), 1);
        assert_eq!(stdlib[0].version, "go1.19.8");
        assert_eq!(stdlib[0].patched, [">= go1.19.9"]);
        assert!(db.scan_stdlib("1.19.9").is_empty());
        assert!(db.affects("GO-2026-0001", "example.com/greet", &v("1.0.0")));
        assert!(!db.affects("GO-2026-0001", "example.com/greet", &v("1.0.1")));
    }

    #[test]
    fn a_record_that_is_not_json_fails_the_load_and_one_that_cannot_be_evaluated_is_said() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("GO-2026-0009.json"),
            r#"{"id":"GO-2026-0009","affected":[{"package":{"name":"example.com/x","ecosystem":"Go"},"ranges":[{"type":"SEMVER","events":[{"introduced":"banana"}]}]}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("GO-2026-0010.json"),
            r#"{"id":"GO-2026-0010","affected":[{"package":{"name":"example.com/y","ecosystem":"Go"},"ranges":[{"type":"GIT","repo":"https://example.com/y","events":[{"introduced":"0"},{"fixed":"0123abcd"}]}]}]}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("GO-2026-0011.json"),
            r#"{"id":"GO-2026-0011","withdrawn":"2026-01-02T00:00:00Z","affected":[{"package":{"name":"example.com/x","ecosystem":"Go"},"ranges":[{"type":"GIT","events":[{"introduced":"0"}]}]}]}"#,
        )
        .unwrap();
        let db = OsvDb::open(dir.path(), GO).unwrap();
        assert!(db.advisories.is_empty(), "{:?}", db.advisories);
        let go_mod = super::super::gomod::GoMod::parse(
            "module a\ngo 1.19\nrequire (\n example.com/x v1.0.0\n example.com/y v1.0.0\n example.com/z v1.0.0\n)\n",
        )
        .unwrap();
        let lock = go_mod.lockfile();
        assert!(db.scan(&lock).is_empty());
        assert_eq!(
            db.unevaluated(&lock),
            [
                "example.com/x v1.0.0: advisory GO-2026-0009 cannot be evaluated (SEMVER range \
                 version \"banana\" is not a Go version); the package may be affected",
                "example.com/y v1.0.0: advisory GO-2026-0010 cannot be evaluated (only GIT \
                 ranges (commits), no versions); the package may be affected",
            ]
        );
        // A lockfile without those packages is scanned completely.
        let other =
            super::super::gomod::GoMod::parse("module a\ngo 1.19\nrequire example.com/z v1.0.0\n")
                .unwrap();
        assert!(db.unevaluated(&other.lockfile()).is_empty());
        std::fs::write(dir.path().join("GO-2026-0009.json"), "{not json").unwrap();
        let error = OsvDb::open(dir.path(), GO).unwrap_err();
        assert!(
            error.contains("GO-2026-0009.json") && error.contains("not JSON"),
            "{error}"
        );
    }

    #[test]
    fn a_github_crates_io_record_is_read_for_a_cargo_lockfile_in_semver_order() {
        let db = OsvDb::open(
            Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/maintain/fixtures/osv-crates"
            )),
            CRATES_IO,
        )
        .unwrap();
        assert_eq!(db.record_count(), 1);
        let lock = |version: &str| {
            Lockfile::parse(&format!(
                "version = 3\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\n\
                 [[package]]\nname = \"regex\"\nversion = \"{version}\"\nsource = \
                 \"registry+https://github.com/rust-lang/crates.io-index\"\n"
            ))
            .unwrap()
        };
        let findings = db.scan(&lock("1.5.4"));
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].advisory, "GHSA-m5pq-gvj9-9vr8");
        assert_eq!(findings[0].package, "regex");
        assert_eq!(findings[0].patched, [">= 1.5.5"]);
        assert!(db.scan(&lock("1.5.5")).is_empty());
        assert!(db.scan(&lock("1.10.2")).is_empty());
        // Go and npm never read it.
        let go = OsvDb::open(
            Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/maintain/fixtures/osv-crates"
            )),
            GO,
        )
        .unwrap();
        assert_eq!(go.record_count(), 0);
    }

    /// Real records as GitHub's advisory database publishes them (`ECOSYSTEM` ranges).
    fn github_records(ecosystem: &'static str) -> OsvDb {
        OsvDb::open(
            Path::new(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/src/maintain/fixtures/osv"
            )),
            ecosystem,
        )
        .unwrap()
    }

    #[test]
    fn github_npm_records_are_evaluated_in_node_semver_order_every_copy_of_a_package() {
        let db = github_records(NPM);
        let mut ids: Vec<(&str, &str)> = db
            .advisories
            .iter()
            .map(|a| (a.id.as_str(), a.package.as_str()))
            .collect();
        ids.sort();
        assert_eq!(
            ids,
            [
                ("GHSA-35jh-r3h4-6jhm", "lodash"),
                ("GHSA-35jh-r3h4-6jhm", "lodash-es"),
                ("GHSA-xvch-5gv4-984h", "minimist"),
            ],
            "the Go records are not read for npm"
        );
        let lock = super::super::npm::parse_lock(
            r#"{"lockfileVersion": 3, "packages": {
  "": {"name": "app", "dependencies": {"lodash": "^4.17.20", "minimist": "^1.2.5", "optimist": "^0.6.1"}},
  "node_modules/lodash": {"version": "4.17.20", "resolved": "https://registry.npmjs.org/lodash/-/lodash-4.17.20.tgz"},
  "node_modules/minimist": {"version": "1.2.5", "resolved": "https://registry.npmjs.org/minimist/-/minimist-1.2.5.tgz"},
  "node_modules/optimist": {"version": "0.6.1", "resolved": "https://registry.npmjs.org/optimist/-/optimist-0.6.1.tgz"},
  "node_modules/optimist/node_modules/minimist": {"version": "0.0.10", "resolved": "https://registry.npmjs.org/minimist/-/minimist-0.0.10.tgz"},
  "node_modules/wordwrap": {"version": "0.0.3", "resolved": "https://registry.npmjs.org/wordwrap/-/wordwrap-0.0.3.tgz"}
}}"#,
            &["lodash".into(), "minimist".into(), "optimist".into()],
        )
        .unwrap();
        let findings = db.scan(&lock);
        let found: Vec<(&str, &str, &str)> = findings
            .iter()
            .map(|f| (f.package.as_str(), f.version.as_str(), f.advisory.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("lodash", "4.17.20", "GHSA-35jh-r3h4-6jhm"),
                ("minimist", "0.0.10", "GHSA-xvch-5gv4-984h"),
                ("minimist", "1.2.5", "GHSA-xvch-5gv4-984h"),
            ]
        );
        assert!(db.unevaluated(&lock).is_empty());
        // Two ranges of one package, merged: 1.0.0 is affected again after 0.2.4's fix.
        assert_eq!(findings[1].patched, [">= 0.2.4, < 1.0.0", ">= 1.2.6"]);
        assert_eq!(findings[0].patched, [">= 4.17.21"]);
        let minimist = db
            .advisories
            .iter()
            .find(|a| a.package == "minimist")
            .unwrap();
        let npm = |t: &str| parse_version(NPM, t).unwrap();
        for (version, affected) in [
            ("0.0.0-alpha", true),
            ("0.2.3", true),
            ("0.2.4", false),
            ("0.9.9", false),
            // node-semver: a pre-release is below its release.
            ("1.0.0-beta.1", false),
            ("1.0.0", true),
            ("1.2.6-rc.1", true),
            ("1.2.6", false),
            ("v1.2.5", true),
            ("=1.2.6", false),
            ("1.2.6+build.5", false),
        ] {
            assert_eq!(minimist.affects(&npm(version)), affected, "{version}");
        }
        assert_eq!(
            parse_version(NPM, "1.2"),
            None,
            "npm versions are full semver"
        );
    }

    #[test]
    fn github_go_records_are_evaluated_in_go_module_order_pseudo_versions_included() {
        let db = github_records(GO);
        let go_mod = super::super::gomod::GoMod::parse(
            "module a\ngo 1.19\nrequire (\n golang.org/x/text v0.3.7\n \
             golang.org/x/crypto v0.0.0-20210921155107-089bfa567519 // indirect\n)\n",
        )
        .unwrap();
        let findings = db.scan(&go_mod.lockfile());
        let found: Vec<(&str, &str, &str, Vec<String>)> = findings
            .iter()
            .map(|f| {
                (
                    f.package.as_str(),
                    f.version.as_str(),
                    f.advisory.as_str(),
                    f.patched.clone(),
                )
            })
            .collect();
        assert_eq!(
            found,
            [
                (
                    "golang.org/x/crypto",
                    "v0.0.0-20210921155107-089bfa567519",
                    "GHSA-8c26-wmh5-6g9v",
                    vec![">= v0.0.0-20220314234659-1baeb1ce4c0b".to_string()]
                ),
                (
                    "golang.org/x/text",
                    "v0.3.7",
                    "GHSA-69ch-w2m2-3vjp",
                    vec![">= v0.3.8".to_string()]
                ),
            ]
        );
        let go = |t: &str| parse_version(GO, t).unwrap();
        for (version, affected) in [
            ("v0.0.0-20220314234659-1baeb1ce4c0b", false),
            ("v0.0.0-20220315160706-3147a52a75dd", false),
            ("v0.0.0-20220214200702-86341886e292", true),
            ("v0.1.0", false),
        ] {
            assert_eq!(
                db.affects("GHSA-8c26-wmh5-6g9v", "golang.org/x/crypto", &go(version)),
                affected,
                "{version}"
            );
        }
        assert!(db.affects(
            "GHSA-69ch-w2m2-3vjp",
            "golang.org/x/text",
            &go("v0.3.8-pre")
        ));
        assert!(!db.affects("GHSA-69ch-w2m2-3vjp", "golang.org/x/text", &go("v0.3.8")));
        assert!(!db.affects(
            "GHSA-69ch-w2m2-3vjp",
            "golang.org/x/text",
            &go("v0.4.0+incompatible")
        ));
    }
}
