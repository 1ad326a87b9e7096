//! A local RustSec advisory database (`advisory-db`'s layout: `crates/<package>/<id>.md`, each
//! a Markdown file opening with a fenced TOML block) and the scan of a lockfile against it.
//!
//! Parsed here with the `toml` and `semver` crates rather than with the `rustsec` crate: with
//! its default features off, `rustsec` 0.34 still requires `cargo-lock`, `cvss`, `platforms`,
//! `fs-err`, `jiff`, `url` and `toml` 1.0 (a second `toml` major beside the workspace's 0.9, with
//! its parser crates), for a workspace that needs only the advisory's package, `[versions]`
//! ranges, `informational` and `withdrawn` fields — about a hundred lines below. Informational
//! advisories (unmaintained, unsound, notices) and withdrawn ones are not vulnerabilities and
//! are not findings; the informational ones are listed apart ([`AdvisoryDb::scan_informational`])
//! when asked (`warden vulns --informational`), as cargo-audit shows them as warnings.

use super::cargo::Lockfile;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use warden_protocol::Finding;

/// The scanner's name and version in a scan record.
pub fn scanner() -> String {
    format!("warden-rustsec/{}", env!("CARGO_PKG_VERSION"))
}

/// An informational advisory (not a vulnerability) of a locked package: `unmaintained`,
/// `unsound`, `notice`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct InformationalFinding {
    /// RustSec's `informational` value.
    pub kind: String,
    #[serde(flatten)]
    pub finding: Finding,
}

/// One advisory.
#[derive(Debug, Clone)]
pub struct Advisory {
    pub id: String,
    pub package: String,
    pub title: String,
    pub patched: Vec<semver::VersionReq>,
    pub unaffected: Vec<semver::VersionReq>,
    /// The raw `patched` strings, for the record.
    pub patched_text: Vec<String>,
    /// `unmaintained`, `unsound`, `notice`: not a vulnerability.
    pub informational: Option<String>,
    pub withdrawn: bool,
    /// Its other ids (`CVE-…`, `GHSA-…`): how an OSV record of the same vulnerability is
    /// recognised.
    pub aliases: Vec<String>,
}

impl Advisory {
    /// Whether `version` is affected: neither patched nor unaffected.
    pub fn affects(&self, version: &semver::Version) -> bool {
        !self
            .patched
            .iter()
            .chain(&self.unaffected)
            .any(|req| req.matches(version))
    }

    /// Whether the scan reports it: a vulnerability that was not withdrawn.
    pub fn reported(&self) -> bool {
        self.informational.is_none() && !self.withdrawn
    }
}

/// Parses one advisory file's text.
pub fn parse_advisory(text: &str) -> Result<Advisory, String> {
    let body = text.trim_start();
    let rest = body
        .strip_prefix("```toml")
        .ok_or("an advisory must open with a ```toml block")?;
    let end = rest
        .find("\n```")
        .ok_or("the ```toml block is not closed")?;
    let (front, after) = (&rest[..end], &rest[end + 4..]);
    let table: toml::Table = toml::from_str(front).map_err(|e| format!("invalid TOML: {e}"))?;
    let advisory = table
        .get("advisory")
        .and_then(|v| v.as_table())
        .ok_or("no [advisory] table")?;
    let text_of = |key: &str| advisory.get(key).and_then(|v| v.as_str());
    let id = text_of("id").ok_or("no advisory.id")?.to_string();
    let package = text_of("package").ok_or("no advisory.package")?.to_string();
    let ranges = |key: &str| -> Result<(Vec<semver::VersionReq>, Vec<String>), String> {
        let Some(list) = table
            .get("versions")
            .and_then(|v| v.get(key))
            .and_then(|v| v.as_array())
        else {
            return Ok((Vec::new(), Vec::new()));
        };
        let mut reqs = Vec::new();
        let mut texts = Vec::new();
        for item in list {
            let text = item
                .as_str()
                .ok_or(format!("versions.{key}: not a string"))?;
            reqs.push(
                semver::VersionReq::parse(text)
                    .map_err(|e| format!("versions.{key} {text:?}: {e}"))?,
            );
            texts.push(text.to_string());
        }
        Ok((reqs, texts))
    };
    let (patched, patched_text) = ranges("patched")?;
    let (unaffected, _) = ranges("unaffected")?;
    let title = after
        .lines()
        .find_map(|line| line.strip_prefix("# "))
        .unwrap_or_default()
        .trim()
        .to_string();
    Ok(Advisory {
        id,
        package,
        title,
        patched,
        unaffected,
        patched_text,
        informational: text_of("informational").map(str::to_string),
        withdrawn: advisory.contains_key("withdrawn"),
        aliases: advisory
            .get("aliases")
            .and_then(|v| v.as_array())
            .map(|list| {
                list.iter()
                    .filter_map(|alias| alias.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// An advisory database directory, loaded.
#[derive(Debug, Clone)]
pub struct AdvisoryDb {
    pub path: PathBuf,
    pub advisories: Vec<Advisory>,
    /// `git:<commit>` of a git checkout, else `sha256:<digest>` of the advisory files (paths
    /// and contents, in path order).
    pub snapshot: String,
}

impl AdvisoryDb {
    /// Loads every `crates/*/*.md` advisory under `path`. A file that does not parse fails
    /// the load, naming it: a scan that silently skipped advisories would read as clean.
    pub fn open(path: &Path) -> Result<AdvisoryDb, String> {
        let crates = path.join("crates");
        let mut files: Vec<PathBuf> = Vec::new();
        let packages = std::fs::read_dir(&crates).map_err(|e| {
            format!(
                "advisory database {}: cannot read {}: {e}",
                path.display(),
                crates.display()
            )
        })?;
        for package in packages.flatten() {
            let Ok(entries) = std::fs::read_dir(package.path()) else {
                continue;
            };
            for entry in entries.flatten() {
                let file = entry.path();
                if file.extension().is_some_and(|e| e == "md") && file.is_file() {
                    files.push(file);
                }
            }
        }
        files.sort();
        let mut digest = Sha256::new();
        let mut advisories = Vec::new();
        for file in &files {
            let text = std::fs::read_to_string(file)
                .map_err(|e| format!("cannot read advisory {}: {e}", file.display()))?;
            let relative = file.strip_prefix(path).unwrap_or(file);
            digest.update(relative.to_string_lossy().as_bytes());
            digest.update([0]);
            digest.update(text.as_bytes());
            digest.update([0]);
            advisories.push(
                parse_advisory(&text).map_err(|e| format!("advisory {}: {e}", file.display()))?,
            );
        }
        let snapshot = git_head(path)
            .map(|commit| format!("git:{commit}"))
            .unwrap_or_else(|| format!("sha256:{}", hex::encode(digest.finalize())));
        Ok(AdvisoryDb {
            path: path.to_path_buf(),
            advisories,
            snapshot,
        })
    }

    /// The advisories that apply to the crates.io packages of `lock`, in package and id order.
    pub fn scan(&self, lock: &Lockfile) -> Vec<Finding> {
        let mut findings = Vec::new();
        for package in lock.packages.iter().filter(|p| p.from_crates_io()) {
            let Ok(version) = semver::Version::parse(&package.version) else {
                continue;
            };
            for advisory in self
                .advisories
                .iter()
                .filter(|a| a.package == package.name && a.reported() && a.affects(&version))
            {
                findings.push(Finding {
                    advisory: advisory.id.clone(),
                    package: package.name.clone(),
                    version: package.version.clone(),
                    title: advisory.title.clone(),
                    patched: advisory.patched_text.clone(),
                    path: None,
                });
            }
        }
        findings.sort_by(|a, b| {
            (&a.package, &a.version, &a.advisory).cmp(&(&b.package, &b.version, &b.advisory))
        });
        findings
    }

    /// The informational advisories (not withdrawn) that apply to the crates.io packages of
    /// `lock`, in package and id order: not vulnerabilities, never findings.
    pub fn scan_informational(&self, lock: &Lockfile) -> Vec<InformationalFinding> {
        let mut out = Vec::new();
        for package in lock.packages.iter().filter(|p| p.from_crates_io()) {
            let Ok(version) = semver::Version::parse(&package.version) else {
                continue;
            };
            for advisory in self
                .advisories
                .iter()
                .filter(|a| a.package == package.name && !a.withdrawn && a.affects(&version))
            {
                let Some(kind) = &advisory.informational else {
                    continue;
                };
                out.push(InformationalFinding {
                    kind: kind.clone(),
                    finding: Finding {
                        advisory: advisory.id.clone(),
                        package: package.name.clone(),
                        version: package.version.clone(),
                        title: advisory.title.clone(),
                        patched: advisory.patched_text.clone(),
                        path: None,
                    },
                });
            }
        }
        out.sort_by(|a, b| {
            let key = |i: &InformationalFinding| {
                (
                    i.finding.package.clone(),
                    i.finding.version.clone(),
                    i.finding.advisory.clone(),
                )
            };
            key(a).cmp(&key(b))
        });
        out
    }

    /// The advisory `id`.
    pub fn advisory(&self, id: &str) -> Option<&Advisory> {
        self.advisories.iter().find(|a| a.id == id)
    }
}

/// The commit checked out in `dir` when it is a git work tree with a `.git` directory, read
/// from `HEAD`, the loose ref or `packed-refs` (no git process runs on it).
pub(super) fn git_head(dir: &Path) -> Option<String> {
    let git = dir.join(".git");
    if !git.is_dir() {
        return None;
    }
    let head = std::fs::read_to_string(git.join("HEAD")).ok()?;
    let head = head.trim();
    let commit = match head.strip_prefix("ref: ") {
        None => head.to_string(),
        Some(name) => {
            if name.contains("..") || !name.starts_with("refs/") {
                return None;
            }
            match std::fs::read_to_string(git.join(name)) {
                Ok(text) => text.trim().to_string(),
                Err(_) => std::fs::read_to_string(git.join("packed-refs"))
                    .ok()?
                    .lines()
                    .find_map(|line| {
                        let (hash, reference) = line.split_once(' ')?;
                        (reference == name).then(|| hash.to_string())
                    })?,
            }
        }
    };
    (commit.len() == 40 && commit.chars().all(|c| c.is_ascii_hexdigit())).then_some(commit)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SMALLVEC: &str = r#"```toml
[advisory]
id = "RUSTSEC-2021-0003"
package = "smallvec"
date = "2021-01-08"
categories = ["memory-corruption"]

[versions]
patched = [">= 1.6.1"]
unaffected = ["< 0.3.0"]
```

# Buffer overflow in SmallVec::insert_many

A bug in insert_many.
"#;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("src/maintain/fixtures/rustsec")
                .join(name),
        )
        .unwrap()
    }

    /// RustSec's own records (ansi_term unmaintained, atty unsound, smallvec a vulnerability):
    /// the informational ones are never findings, and are listed apart.
    #[test]
    fn informational_advisories_are_listed_apart_from_the_findings() {
        let dir = tempfile::tempdir().unwrap();
        for (package, file) in [
            ("ansi_term", "RUSTSEC-2021-0139.md"),
            ("atty", "RUSTSEC-2021-0145.md"),
            ("smallvec", "RUSTSEC-2021-0003.md"),
        ] {
            let crate_dir = dir.path().join("crates").join(package);
            std::fs::create_dir_all(&crate_dir).unwrap();
            std::fs::write(crate_dir.join(file), fixture(file)).unwrap();
        }
        let db = AdvisoryDb::open(dir.path()).unwrap();
        let lock = Lockfile::parse(
            &[
                ("ansi_term", "0.12.1"),
                ("atty", "0.2.14"),
                ("smallvec", "1.6.0"),
            ]
            .iter()
            .map(|(name, version)| {
                format!(
                    "[[package]]\nname = \"{name}\"\nversion = \"{version}\"\nsource = \
                     \"registry+https://github.com/rust-lang/crates.io-index\"\n"
                )
            })
            .collect::<String>(),
        )
        .unwrap();
        let findings = db.scan(&lock);
        assert_eq!(
            findings
                .iter()
                .map(|f| f.advisory.as_str())
                .collect::<Vec<_>>(),
            ["RUSTSEC-2021-0003"]
        );
        let informational = db.scan_informational(&lock);
        let listed: Vec<(&str, &str, &str)> = informational
            .iter()
            .map(|i| {
                (
                    i.kind.as_str(),
                    i.finding.package.as_str(),
                    i.finding.advisory.as_str(),
                )
            })
            .collect();
        assert_eq!(
            listed,
            [
                ("unmaintained", "ansi_term", "RUSTSEC-2021-0139"),
                ("unsound", "atty", "RUSTSEC-2021-0145"),
            ]
        );
        assert_eq!(informational[0].finding.title, "ansi_term is Unmaintained");
        assert_eq!(informational[1].finding.title, "Potential unaligned read");
    }

    #[test]
    fn an_advisory_applies_to_the_versions_neither_patched_nor_unaffected() {
        let advisory = parse_advisory(SMALLVEC).unwrap();
        assert_eq!(advisory.id, "RUSTSEC-2021-0003");
        assert_eq!(advisory.title, "Buffer overflow in SmallVec::insert_many");
        let v = |s: &str| semver::Version::parse(s).unwrap();
        assert!(advisory.affects(&v("1.6.0")));
        assert!(advisory.affects(&v("0.6.13")));
        assert!(!advisory.affects(&v("1.6.1")));
        assert!(!advisory.affects(&v("0.2.1")));
        assert!(advisory.reported());
    }

    #[test]
    fn a_database_is_scanned_and_identified_by_content_or_commit() {
        let dir = tempfile::tempdir().unwrap();
        let crates = dir.path().join("crates/smallvec");
        std::fs::create_dir_all(&crates).unwrap();
        std::fs::write(crates.join("RUSTSEC-2021-0003.md"), SMALLVEC).unwrap();
        std::fs::write(
            crates.join("RUSTSEC-2099-0001.md"),
            SMALLVEC
                .replace("RUSTSEC-2021-0003", "RUSTSEC-2099-0001")
                .replace("[versions]", "informational = \"unsound\"\n[versions]"),
        )
        .unwrap();
        let db = AdvisoryDb::open(dir.path()).unwrap();
        assert!(db.snapshot.starts_with("sha256:"), "{}", db.snapshot);
        let lock = Lockfile::parse(
            "[[package]]\nname = \"smallvec\"\nversion = \"1.6.0\"\nsource = \
             \"registry+https://github.com/rust-lang/crates.io-index\"\n",
        )
        .unwrap();
        let findings = db.scan(&lock);
        // The informational advisory is not a vulnerability.
        assert_eq!(findings.len(), 1, "{findings:?}");
        assert_eq!(findings[0].advisory, "RUSTSEC-2021-0003");
        assert_eq!(findings[0].patched, [">= 1.6.1"]);

        std::fs::create_dir_all(dir.path().join(".git/refs/heads")).unwrap();
        std::fs::write(dir.path().join(".git/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(
            dir.path().join(".git/packed-refs"),
            format!("{} refs/heads/main\n", "a".repeat(40)),
        )
        .unwrap();
        let db = AdvisoryDb::open(dir.path()).unwrap();
        assert_eq!(db.snapshot, format!("git:{}", "a".repeat(40)));

        std::fs::write(crates.join("RUSTSEC-2099-0002.md"), "no front matter").unwrap();
        let error = AdvisoryDb::open(dir.path()).unwrap_err();
        assert!(error.contains("RUSTSEC-2099-0002.md"), "{error}");
    }
}
