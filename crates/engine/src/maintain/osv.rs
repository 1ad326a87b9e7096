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

/// The standard library's package name in Go's records.
pub const STDLIB: &str = "stdlib";

/// The most files a database directory is read from, and the deepest it is walked.
const MAX_FILES: usize = 200_000;
const MAX_DEPTH: usize = 4;

/// The scanner's name and version in a scan record.
pub fn scanner() -> String {
    format!("warden-osv/{}", env!("CARGO_PKG_VERSION"))
}

#[derive(Debug, Clone, Deserialize)]
struct Record {
    id: String,
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
}

/// One range event, its version parsed (`0` is the lowest of all).
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

/// An OSV version (`1.2.3`, Go's records write no `v`; `0` is "from the start").
fn parse_version(text: &str) -> Option<semver::Version> {
    if text == "0" {
        return Some(semver::Version::new(0, 0, 0));
    }
    let text = text.strip_prefix('v').unwrap_or(text);
    semver::Version::parse(text)
        .ok()
        .or_else(|| semver::Version::parse(&super::gomod::full_go_version(text)).ok())
}

/// One advisory's effect on one package.
#[derive(Debug, Clone)]
pub struct Advisory {
    pub id: String,
    pub package: String,
    pub title: String,
    /// SEMVER ranges, each its events sorted by version.
    ranges: Vec<Vec<Event>>,
    /// Versions listed one by one.
    versions: Vec<semver::Version>,
    pub withdrawn: bool,
}

impl Advisory {
    /// Whether `version` is affected: listed, or inside a range (OSV's evaluation: the last
    /// event at or below the version decides; `last_affected` covers its own version).
    pub fn affects(&self, version: &semver::Version) -> bool {
        if self.versions.contains(version) {
            return true;
        }
        self.ranges.iter().any(|events| {
            let mut affected = false;
            for event in events {
                match event {
                    Event::Introduced(v) if version >= v => affected = true,
                    Event::Fixed(v) if version >= v => affected = false,
                    Event::LastAffected(v) if version > v => affected = false,
                    _ => {}
                }
            }
            affected
        })
    }

    /// The versions that fix it, as `>= vX.Y.Z` (for the record).
    pub fn patched(&self, prefix: &str) -> Vec<String> {
        let mut out: Vec<String> = self
            .ranges
            .iter()
            .flatten()
            .filter_map(|e| match e {
                Event::Fixed(v) if self.package == STDLIB => Some(format!(">= go{v}")),
                Event::Fixed(v) => Some(format!(">= {prefix}{v}")),
                _ => None,
            })
            .collect();
        out.dedup();
        out
    }
}

/// An OSV database directory, loaded.
#[derive(Debug, Clone)]
pub struct OsvDb {
    pub path: PathBuf,
    /// The ecosystem whose records were read: [`GO`] or [`NPM`].
    pub ecosystem: &'static str,
    pub advisories: Vec<Advisory>,
    /// `git:<commit>` of a git checkout, else `sha256:<digest>` of the record files (paths and
    /// contents, in path order).
    pub snapshot: String,
}

/// Every `*.json` file under `dir` (not following symbolic links), sorted.
fn json_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) -> Result<(), String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir()
            && depth < MAX_DEPTH
            && !entry.file_name().to_string_lossy().starts_with('.')
        {
            json_files(&path, depth + 1, out)?;
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
        json_files(path, 0, &mut files)
            .map_err(|e| format!("OSV database {}: {e}", path.display()))?;
        files.sort();
        let mut digest = Sha256::new();
        let mut advisories = Vec::new();
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
            advisories.extend(
                advisories_of(record, ecosystem)
                    .map_err(|e| format!("OSV record {}: {e}", file.display()))?,
            );
        }
        let snapshot = super::advisory::git_head(path)
            .map(|commit| format!("git:{commit}"))
            .unwrap_or_else(|| format!("sha256:{}", hex::encode(digest.finalize())));
        Ok(OsvDb {
            path: path.to_path_buf(),
            ecosystem,
            advisories,
            snapshot,
        })
    }

    /// The advisories that apply to the required modules of `lock` (a `go.mod` read as a
    /// lockfile), in package and id order.
    pub fn scan(&self, lock: &Lockfile) -> Vec<Finding> {
        let mut findings = Vec::new();
        for package in lock.packages.iter().filter(|p| p.source.is_some()) {
            let Some(version) = parse_version(&package.version) else {
                continue;
            };
            findings.extend(self.findings(&package.name, &package.version, &version));
        }
        sort(&mut findings);
        findings
    }

    /// The advisories of the standard library at Go `version` (`1.19.8`).
    pub fn scan_stdlib(&self, version: &str) -> Vec<Finding> {
        let Some(parsed) = parse_version(version) else {
            return Vec::new();
        };
        let mut findings = self.findings(STDLIB, &format!("go{version}"), &parsed);
        sort(&mut findings);
        findings
    }

    fn findings(&self, package: &str, shown: &str, version: &semver::Version) -> Vec<Finding> {
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
                patched: advisory.patched(if self.ecosystem == GO { "v" } else { "" }),
            });
        }
        out
    }

    /// Whether advisory `id` affects `package` at `version`.
    pub fn affects(&self, id: &str, package: &str, version: &semver::Version) -> bool {
        self.advisories
            .iter()
            .any(|a| a.id == id && a.package == package && a.affects(version))
    }
}

fn sort(findings: &mut [Finding]) {
    findings.sort_by(|a, b| {
        (&a.package, &a.version, &a.advisory).cmp(&(&b.package, &b.version, &b.advisory))
    });
}

/// A record's advisories: one per affected Go package.
fn advisories_of(record: Record, ecosystem: &str) -> Result<Vec<Advisory>, String> {
    let mut out: Vec<Advisory> = Vec::new();
    for affected in record
        .affected
        .iter()
        .filter(|a| a.package.ecosystem == ecosystem)
    {
        let mut ranges = Vec::new();
        for range in affected.ranges.iter().filter(|r| r.kind == "SEMVER") {
            let mut events = Vec::new();
            for event in &range.events {
                let parse = |text: &String| {
                    parse_version(text).ok_or_else(|| format!("version {text:?} is not semver"))
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
            }
            events.sort_by(|a, b| a.version().cmp(b.version()));
            ranges.push(events);
        }
        let versions = affected
            .versions
            .iter()
            .filter_map(|v| parse_version(v))
            .collect();
        match out.iter_mut().find(|a| a.package == affected.package.name) {
            Some(same) => {
                same.ranges.extend(ranges);
                same.versions.extend::<Vec<_>>(versions);
            }
            None => out.push(Advisory {
                id: record.id.clone(),
                package: affected.package.name.clone(),
                title: record.summary.clone(),
                ranges,
                versions,
                withdrawn: record.withdrawn.is_some(),
            }),
        }
    }
    Ok(out)
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
        assert_eq!(greet.patched("v"), [">= v1.0.1", ">= v1.1.2"]);
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
    fn a_record_that_does_not_parse_fails_the_load_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("GO-2026-0009.json"),
            r#"{"id":"GO-2026-0009","affected":[{"package":{"name":"x","ecosystem":"Go"},"ranges":[{"type":"SEMVER","events":[{"introduced":"banana"}]}]}]}"#,
        )
        .unwrap();
        let error = OsvDb::open(dir.path(), GO).unwrap_err();
        assert!(
            error.contains("GO-2026-0009.json") && error.contains("banana"),
            "{error}"
        );
        std::fs::write(dir.path().join("GO-2026-0009.json"), "{not json").unwrap();
        let error = OsvDb::open(dir.path(), GO).unwrap_err();
        assert!(error.contains("not JSON"), "{error}");
    }
}
