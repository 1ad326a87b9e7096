//! What differs between the ecosystems maintenance knows — Cargo, Go modules and npm — behind one
//! shape the pipeline runs: the profile of the base tree, the lockfile, the commands that
//! fetch and apply an upgrade, where candidate versions come from, and the advisory database.

use super::cargo::{LockedPackage, Lockfile};
use super::{advisory, cargo, gomod, npm, osv};
use crate::config::Config;
use std::collections::BTreeMap;
use std::path::Path;
use warden_protocol::{Finding, Upgrade};

/// An ecosystem `warden maintain` upgrades.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecosystem {
    Cargo,
    Go,
    Npm,
}

/// The flags of every npm command Warden runs: no lifecycle scripts (a dependency's install
/// script would run with the networked steps' network), no audit or funding requests.
const NPM_FLAGS: &str = "--ignore-scripts --no-audit --no-fund";

/// `'text'` for a shell.
pub fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "'\\''"))
}

impl Ecosystem {
    /// Which ecosystem the tree at `root` is: a root `Cargo.toml` is Cargo, a root `go.mod`
    /// Go, a root `package.json` beside neither npm (a Cargo project or Go module with a
    /// `package.json` for its tooling is maintained as what it is). `Cargo.toml` and `go.mod`
    /// together, or none of the three, is refused (`unsupported_project`).
    pub fn detect(root: &Path) -> Result<Ecosystem, String> {
        let exists = |name: &str| root.join(name).symlink_metadata().is_ok();
        match (
            exists("Cargo.toml"),
            exists("go.mod"),
            exists("package.json"),
        ) {
            (true, false, _) => Ok(Ecosystem::Cargo),
            (false, true, _) => Ok(Ecosystem::Go),
            (true, true, _) => Err(
                "both Cargo.toml and go.mod at the repository's root: maintaining two \
                 ecosystems in one repository is not supported"
                    .into(),
            ),
            (false, false, true) => Ok(Ecosystem::Npm),
            (false, false, false) => Err(
                "no Cargo.toml, go.mod or package.json at the repository's root: Cargo \
                 projects, Go modules and npm projects are maintained"
                    .into(),
            ),
        }
    }

    /// The checks a project is maintained with when neither the task nor the repository
    /// names any, by what the tree at `root` is (Cargo's when it is neither).
    pub fn default_checks(root: &Path) -> Vec<String> {
        let checks: &[&str] = match Ecosystem::detect(root) {
            Ok(Ecosystem::Go) => &super::DEFAULT_GO_CHECKS,
            Ok(Ecosystem::Npm) => &super::DEFAULT_NPM_CHECKS,
            _ => &super::DEFAULT_CARGO_CHECKS,
        };
        checks.iter().map(|c| c.to_string()).collect()
    }

    /// `cargo` or `go`, as results name it.
    pub fn name(self) -> &'static str {
        match self {
            Ecosystem::Cargo => "cargo",
            Ecosystem::Go => "go",
            Ecosystem::Npm => "npm",
        }
    }

    /// The public registry's page of the version an upgrade moves to, when the packages come
    /// from that registry (a private one's pages are unknown) and the name is one the
    /// registry's rules allow (the name reaches a pull request's body).
    pub fn release_page(
        self,
        maintain: &crate::maintain_config::MaintainConfig,
        upgrade: &Upgrade,
    ) -> Option<String> {
        use crate::maintain_config::{DEFAULT_GOPROXY, DEFAULT_INDEX, DEFAULT_NPM_REGISTRY};
        let (name, to) = (&upgrade.package, &upgrade.to);
        semver::Version::parse(to.strip_prefix('v').unwrap_or(to)).ok()?;
        match self {
            Ecosystem::Cargo => {
                let valid = !name.is_empty()
                    && name.len() <= 64
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
                (maintain.index == DEFAULT_INDEX && valid)
                    .then(|| format!("https://crates.io/crates/{name}/{to}"))
            }
            Ecosystem::Go => (maintain.goproxy == DEFAULT_GOPROXY
                && super::goproxy::check_module_path(name).is_ok())
            .then(|| format!("https://pkg.go.dev/{name}@{to}")),
            Ecosystem::Npm => (maintain.npm_registry == DEFAULT_NPM_REGISTRY
                && npm::check_name(name).is_ok())
            .then(|| format!("https://www.npmjs.com/package/{name}/v/{to}")),
        }
    }

    /// Where candidate versions come from: `[maintain] index`, `goproxy` or `npm_registry`.
    pub fn source(self, maintain: &crate::maintain_config::MaintainConfig) -> &str {
        match self {
            Ecosystem::Cargo => &maintain.index,
            Ecosystem::Go => &maintain.goproxy,
            Ecosystem::Npm => &maintain.npm_registry,
        }
    }

    /// The file whose packages an upgrade changes.
    pub fn lock_name(self) -> &'static str {
        match self {
            Ecosystem::Cargo => "Cargo.lock",
            Ecosystem::Go => "go.mod",
            Ecosystem::Npm => "package-lock.json",
        }
    }

    /// What the packages are called in messages.
    pub fn packages_noun(self) -> &'static str {
        match self {
            Ecosystem::Cargo => "Cargo dependencies",
            Ecosystem::Go => "Go modules",
            Ecosystem::Npm => "npm packages",
        }
    }

    /// The toolchain preset and the cache variable it provides, which maintenance needs.
    pub fn preset(self) -> (&'static str, &'static str) {
        match self {
            Ecosystem::Cargo => ("rust", "CARGO_HOME"),
            Ecosystem::Go => ("go", "GOMODCACHE"),
            Ecosystem::Npm => ("node", "npm_config_cache"),
        }
    }

    /// The networked command that fetches the base tree's packages into the cache.
    pub fn acquire(self) -> &'static str {
        match self {
            Ecosystem::Cargo => "cargo fetch --locked",
            Ecosystem::Go => "go mod download",
            Ecosystem::Npm => "npm ci --ignore-scripts --no-audit --no-fund",
        }
    }

    /// Writes at `dest` what the networked steps (the acquire, the candidates' fetch) see of
    /// the tree at `root`, so that nothing of the repository that can make the package
    /// manager run a program is there: for Cargo every `Cargo.toml`, the root `Cargo.lock`
    /// and, empty, every `.rs` file (Cargo discovers targets by those names; it never reads
    /// them to fetch), never `.cargo/config.toml` (its `rustc-wrapper`, `rustc`, `[target]`
    /// runners and linkers, `[env]`, sources, registries, proxies), `rust-toolchain.toml` or
    /// a build script's content; for npm every `package.json` (workspaces) and the root
    /// `package-lock.json` or `npm-shrinkwrap.json`, never `.npmrc` (its `git`,
    /// `script-shell`, `node-options`, registries). `false` for Go, whose `go mod download`
    /// and `go get` read no file of the repository that runs a program (`GOTOOLCHAIN=local`,
    /// `GOFLAGS` only from the environment): its steps see the base tree. Directories named
    /// `.git` or `node_modules` and symbolic links are skipped.
    pub fn fetch_tree(self, root: &Path, dest: &Path) -> Result<bool, String> {
        match self.manifests() {
            Some(kind) => crate::fetch_tree::write(kind, root, dest).map(|()| true),
            None => Ok(false),
        }
    }

    /// Which manifests its networked steps see ([`Ecosystem::fetch_tree`]); `None`: the base
    /// tree (Go).
    pub fn manifests(self) -> Option<crate::fetch_tree::Manifests> {
        match self {
            Ecosystem::Cargo => Some(crate::fetch_tree::Manifests::Cargo),
            Ecosystem::Npm => Some(crate::fetch_tree::Manifests::Npm),
            Ecosystem::Go => None,
        }
    }

    /// The lockfile of the tree at `root`.
    pub fn read_lock(self, root: &Path) -> Result<Lockfile, String> {
        let name = self.lock_name();
        let text = std::fs::read_to_string(root.join(name))
            .map_err(|e| format!("cannot read {name}: {e}"))?;
        match self {
            Ecosystem::Cargo => Lockfile::parse(&text),
            Ecosystem::Go => Ok(gomod::GoMod::parse(&text)?.lockfile()),
            Ecosystem::Npm => {
                let direct = std::fs::read_to_string(root.join("package.json"))
                    .ok()
                    .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                    .map(|m| {
                        npm::manifest_dependencies(&m)
                            .into_keys()
                            .collect::<Vec<_>>()
                    })
                    .unwrap_or_default();
                npm::parse_lock(&text, &direct)
            }
        }
    }

    /// A version as the ecosystem writes it, as semver (`v1.2.3` for Go).
    pub fn semver(self, version: &str) -> Option<semver::Version> {
        match self {
            Ecosystem::Cargo | Ecosystem::Npm => semver::Version::parse(version).ok(),
            Ecosystem::Go => gomod::semver_of(version),
        }
    }

    /// A semver version as the ecosystem writes it.
    pub fn version_text(self, version: &semver::Version) -> String {
        match self {
            Ecosystem::Cargo | Ecosystem::Npm => version.to_string(),
            Ecosystem::Go => format!("v{version}"),
        }
    }

    /// Whether an upgrade from `current` to `candidate` keeps compatibility without opting
    /// into majors: Cargo's caret (npm's `^` reads the same); for Go the same major (a Go major
    /// from v2 on is another module path, never an upgrade of this one).
    pub fn compatible(self, current: &semver::Version, candidate: &semver::Version) -> bool {
        self.versioning().compatible(current, candidate)
    }

    /// How its versions group into majors ([`super::index::Versioning`]).
    pub fn versioning(self) -> super::index::Versioning {
        match self {
            Ecosystem::Cargo | Ecosystem::Npm => super::index::Versioning::Caret,
            Ecosystem::Go => super::index::Versioning::GoModule,
        }
    }

    /// The files an upgrade's command rewrites (what dropping an upgrade restores).
    pub fn upgrade_files(self) -> &'static [&'static str] {
        match self {
            Ecosystem::Cargo => &["Cargo.lock"],
            Ecosystem::Go => &["go.mod", "go.sum"],
            Ecosystem::Npm => &["package.json", "package-lock.json"],
        }
    }

    /// The networked script that fetches the upgrades' packages (in a view whose files are
    /// thrown away).
    pub fn fetch_script(self, upgrades: &[Upgrade]) -> String {
        let mut script: Vec<String> = match self {
            // An earlier upgrade may have moved the package from its old version (hyper moving
            // tokio): then its one copy is named without the version. Each upgrade's lockfile
            // is fetched, not only the last: they are applied (offline) one at a time, and an
            // intermediate one can need packages the last does not (tokio 1.18.4 needs mio
            // 0.8, which the h2 upgrade after it moves on to mio 1).
            Ecosystem::Cargo => {
                let mut steps = Vec::new();
                for (index, u) in upgrades.iter().enumerate() {
                    if index > 0 {
                        steps.push(self.acquire().to_string());
                    }
                    steps.push(format!(
                        "{{ cargo update -p {} --precise {to} || cargo update -p {} --precise {to}; }}",
                        quoted(&format!("{}@{}", u.package, u.from)),
                        quoted(&u.package),
                        to = quoted(&u.to)
                    ));
                }
                steps
            }
            Ecosystem::Go => vec![format!(
                "go get {}",
                upgrades
                    .iter()
                    .map(|u| quoted(&format!("{}@{}", u.package, u.to)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )],
            Ecosystem::Npm => vec![format!(
                "npm install --package-lock-only {NPM_FLAGS} {}",
                upgrades
                    .iter()
                    .map(|u| quoted(&format!("{}@{}", u.package, u.to)))
                    .collect::<Vec<_>>()
                    .join(" ")
            )],
        };
        script.push(self.acquire().into());
        script.join(" && ")
    }

    /// The offline script that applies one upgrade in the task's view. Go's checksum
    /// database is not reachable offline: the modules were verified against it when the
    /// networked steps downloaded them into the cache, which this trusts as `go` trusts its
    /// module cache.
    pub fn apply_script(self, upgrade: &Upgrade) -> String {
        match self {
            Ecosystem::Cargo => format!(
                "cargo update --offline -p {} --precise {}",
                quoted(&format!("{}@{}", upgrade.package, upgrade.from)),
                quoted(&upgrade.to)
            ),
            Ecosystem::Go => format!(
                "GOSUMDB=off go get {}",
                quoted(&format!("{}@{}", upgrade.package, upgrade.to))
            ),
            // npm reads only a writable cache (see `DEFAULT_NPM_CHECKS`): a fresh copy in /tmp.
            Ecosystem::Npm => format!(
                "rm -rf /tmp/npm-cache && cp -R \"$npm_config_cache\" /tmp/npm-cache && \
                 npm_config_cache=/tmp/npm-cache npm install --package-lock-only --offline \
                 {NPM_FLAGS} {}",
                quoted(&format!("{}@{}", upgrade.package, upgrade.to))
            ),
        }
    }
}

/// What maintenance knows of a base tree.
#[derive(Debug, Clone)]
pub struct Profile {
    pub ecosystem: Ecosystem,
    pub lockfile: Lockfile,
    /// The direct dependencies from the registry (`--select all` upgrades these), sorted.
    pub direct: Vec<LockedPackage>,
    /// Cargo: the root manifest's requirements by package name (Go has none beyond the
    /// minimum `go.mod` names).
    pub requirements: BTreeMap<String, Vec<semver::VersionReq>>,
    /// Go: the standard library's version `go.mod` names.
    pub named_go_version: Option<String>,
}

/// Profiles the tree at `root`. `Err` is the reason maintenance refuses it
/// (`unsupported_project`).
pub fn profile(root: &Path) -> Result<Profile, String> {
    match Ecosystem::detect(root)? {
        Ecosystem::Cargo => {
            let profile = cargo::profile(root)?;
            let direct = profile
                .lockfile
                .direct_crates_io()
                .into_iter()
                .cloned()
                .collect();
            Ok(Profile {
                ecosystem: Ecosystem::Cargo,
                lockfile: profile.lockfile,
                direct,
                requirements: profile.requirements,
                named_go_version: None,
            })
        }
        Ecosystem::Go => {
            let profile = gomod::profile(root)?;
            let lockfile = profile.go_mod.lockfile();
            let mut direct: Vec<LockedPackage> = profile
                .go_mod
                .requires
                .iter()
                .filter(|r| !r.indirect)
                .filter_map(|r| {
                    lockfile
                        .packages
                        .iter()
                        .find(|p| p.source.is_some() && p.name == r.path)
                        .cloned()
                })
                .collect();
            direct.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
            Ok(Profile {
                ecosystem: Ecosystem::Go,
                lockfile,
                direct,
                requirements: BTreeMap::new(),
                named_go_version: profile.go_mod.named_go_version(),
            })
        }
        Ecosystem::Npm => {
            let profile = npm::profile(root)?;
            Ok(Profile {
                ecosystem: Ecosystem::Npm,
                lockfile: profile.lockfile,
                direct: profile.direct,
                requirements: profile.requirements,
                named_go_version: None,
            })
        }
    }
}

/// A loaded advisory database: RustSec's (or OSV's crates.io records, or both) for Cargo, OSV
/// for Go and npm.
#[derive(Debug, Clone)]
pub enum Database {
    RustSec(advisory::AdvisoryDb),
    Osv(osv::OsvDb),
    /// Cargo with both configured: RustSec's advisories, and the OSV crates.io records that
    /// none of them stands for (matched by id and aliases on the same package).
    RustSecAndOsv(Box<Merged>),
}

/// RustSec's database and an OSV database's crates.io records, read as one.
#[derive(Debug, Clone)]
pub struct Merged {
    pub rustsec: advisory::AdvisoryDb,
    pub osv: osv::OsvDb,
    /// Both snapshots: `rustsec=…;osv=…`.
    snapshot: String,
}

impl Merged {
    pub fn new(rustsec: advisory::AdvisoryDb, osv: osv::OsvDb) -> Merged {
        let snapshot = format!("rustsec={};osv={}", rustsec.snapshot, osv.snapshot);
        Merged {
            rustsec,
            osv,
            snapshot,
        }
    }

    /// RustSec's findings of `lock`, then OSV's that report another vulnerability: an OSV
    /// finding whose id or aliases meet a RustSec finding's id or aliases on the same package
    /// copy is the same advisory, reported once (as RustSec's).
    fn scan(&self, lock: &Lockfile) -> Vec<Finding> {
        let mut findings = self.rustsec.scan(lock);
        let names_of_rustsec = |id: &str| -> Vec<String> {
            let mut names = vec![id.to_string()];
            if let Some(advisory) = self.rustsec.advisory(id) {
                names.extend(advisory.aliases.iter().cloned());
            }
            names
        };
        let known: Vec<(Vec<String>, &str, &str, Option<&str>)> = findings
            .iter()
            .map(|f| {
                (
                    names_of_rustsec(&f.advisory),
                    f.package.as_str(),
                    f.version.as_str(),
                    f.path.as_deref(),
                )
            })
            .collect();
        let mut extra = Vec::new();
        for finding in self.osv.scan(lock) {
            let names = self.osv.names(&finding.advisory);
            let same = known.iter().any(|(known_names, package, version, path)| {
                *package == finding.package
                    && *version == finding.version
                    && *path == finding.path.as_deref()
                    && names.iter().any(|name| known_names.contains(name))
            });
            if !same {
                extra.push(finding);
            }
        }
        findings.extend(extra);
        findings.sort_by(|a, b| {
            (&a.package, &a.version, &a.path, &a.advisory).cmp(&(
                &b.package,
                &b.version,
                &b.path,
                &b.advisory,
            ))
        });
        findings
    }
}

impl Database {
    /// The configured database of `ecosystem`: `Ok(None)` when none is configured.
    pub fn open(config: &Config, ecosystem: Ecosystem) -> Result<Option<Database>, String> {
        match ecosystem {
            // RustSec's database when one is set; else the crates.io records of the OSV
            // database (GitHub's or osv.dev's export), which must hold some: an OSV directory
            // without crates.io records would scan every Cargo project as clean.
            Ecosystem::Cargo => match (&config.maintain.advisory_db, &config.maintain.osv_db) {
                // Both: RustSec's, with the OSV crates.io records it lacks (GitHub's reviewed
                // advisories that RustSec never imported) when the OSV database holds any.
                (Some(path), Some(osv_path)) => {
                    let rustsec = advisory::AdvisoryDb::open(path)?;
                    let osv = osv::OsvDb::open(osv_path, osv::CRATES_IO)?;
                    Ok(Some(if osv.record_count() == 0 {
                        Database::RustSec(rustsec)
                    } else {
                        Database::RustSecAndOsv(Box::new(Merged::new(rustsec, osv)))
                    }))
                }
                (Some(path), None) => advisory::AdvisoryDb::open(path)
                    .map(Database::RustSec)
                    .map(Some),
                (None, Some(path)) => {
                    let db = osv::OsvDb::open(path, osv::CRATES_IO)?;
                    if db.record_count() == 0 {
                        return Err(format!(
                            "{} holds no crates.io advisory records: add \"crates.io\" to \
                             [maintain] osv_ecosystems and run `warden advisories update`, or \
                             set advisory_db to a RustSec database",
                            path.display()
                        ));
                    }
                    Ok(Some(Database::Osv(db)))
                }
                (None, None) => Ok(None),
            },
            Ecosystem::Go | Ecosystem::Npm => {
                let name = if ecosystem == Ecosystem::Go {
                    osv::GO
                } else {
                    osv::NPM
                };
                config
                    .maintain
                    .osv_db
                    .as_deref()
                    .map(|path| osv::OsvDb::open(path, name).map(Database::Osv))
                    .transpose()
            }
        }
    }

    /// What to set when `ecosystem` has no database and one is needed.
    pub fn missing(config: &Config, ecosystem: Ecosystem, needed_by: &str) -> String {
        match ecosystem {
            Ecosystem::Cargo => format!(
                "{needed_by} needs a local advisory database for Rust: set `advisory_db = \
                 \"/path/to/advisory-db\"` (RustSec's) or `osv_db = \"/path/to/osv\"` (OSV \
                 records with crates.io ones) under [maintain] in {}, then run `warden \
                 advisories update`",
                config.file.display()
            ),
            Ecosystem::Go | Ecosystem::Npm => format!(
                "{needed_by} needs a local OSV advisory database for {} (a directory of OSV \
                 records, such as a copy of vuln.go.dev's or osv.dev's export): set `osv_db = \
                 \"/path/to/osv\"` under [maintain] in {}",
                if ecosystem == Ecosystem::Go {
                    "Go"
                } else {
                    "npm"
                },
                config.file.display()
            ),
        }
    }

    /// The database's directory (RustSec's, of two).
    pub fn path(&self) -> &Path {
        match self {
            Database::RustSec(db) => &db.path,
            Database::Osv(db) => &db.path,
            Database::RustSecAndOsv(both) => &both.rustsec.path,
        }
    }

    pub fn snapshot(&self) -> &str {
        match self {
            Database::RustSec(db) => &db.snapshot,
            Database::Osv(db) => &db.snapshot,
            Database::RustSecAndOsv(both) => &both.snapshot,
        }
    }

    /// How old the database is at `now_ms` (see [`super::update`]): an OSV database is dated
    /// by its ecosystem's directory when `warden advisories update` wrote one; of two, the
    /// older (an undated one first).
    pub fn age(&self, max_age_days: u32, now_ms: u64) -> super::update::DatabaseAge {
        let osv_age = |db: &osv::OsvDb| {
            super::update::age(
                &super::update::osv_dir(&db.path, db.ecosystem),
                now_ms,
                max_age_days,
            )
        };
        match self {
            Database::RustSec(db) => super::update::age(&db.path, now_ms, max_age_days),
            Database::Osv(db) => osv_age(db),
            Database::RustSecAndOsv(both) => {
                let rustsec = super::update::age(&both.rustsec.path, now_ms, max_age_days);
                let osv = osv_age(&both.osv);
                let days = |age: &super::update::DatabaseAge| age.age_days.unwrap_or(u64::MAX);
                if days(&osv) > days(&rustsec) {
                    osv
                } else {
                    rustsec
                }
            }
        }
    }

    pub fn scanner(&self) -> String {
        match self {
            Database::RustSec(_) => advisory::scanner(),
            Database::Osv(_) => osv::scanner(),
            Database::RustSecAndOsv(_) => format!("{}+{}", advisory::scanner(), osv::scanner()),
        }
    }

    /// The advisories that apply to the registry packages of `lock`.
    pub fn scan(&self, lock: &Lockfile) -> Vec<Finding> {
        match self {
            Database::RustSec(db) => db.scan(lock),
            Database::Osv(db) => db.scan(lock),
            Database::RustSecAndOsv(both) => both.scan(lock),
        }
    }

    /// The informational advisories (unmaintained, unsound: not vulnerabilities) of `lock`'s
    /// packages: RustSec's; OSV records carry none.
    pub fn informational(&self, lock: &Lockfile) -> Vec<advisory::InformationalFinding> {
        match self {
            Database::RustSec(db) => db.scan_informational(lock),
            Database::Osv(_) => Vec::new(),
            Database::RustSecAndOsv(both) => both.rustsec.scan_informational(lock),
        }
    }

    /// What the scan of `lock` cannot evaluate ([`osv::OsvDb::unevaluated`]; RustSec's
    /// advisories are all evaluable, one that does not parse fails the load).
    pub fn unevaluated(&self, lock: &Lockfile) -> Vec<String> {
        match self {
            Database::RustSec(_) => Vec::new(),
            Database::Osv(db) => db.unevaluated(lock),
            Database::RustSecAndOsv(both) => both.osv.unevaluated(lock),
        }
    }

    /// Whether advisory `id` affects `package` at `version`.
    pub fn affects(&self, id: &str, package: &str, version: &semver::Version) -> bool {
        let rustsec = |db: &advisory::AdvisoryDb| {
            db.advisory(id)
                .is_some_and(|a| a.package == package && a.affects(version))
        };
        match self {
            Database::RustSec(db) => rustsec(db),
            Database::Osv(db) => db.affects(id, package, version),
            Database::RustSecAndOsv(both) => {
                if both.rustsec.advisory(id).is_some() {
                    rustsec(&both.rustsec)
                } else {
                    both.osv.affects(id, package, version)
                }
            }
        }
    }
}

/// The Go version of the toolchain the sandbox builds with (`$GOROOT/VERSION` of the `go`
/// preset), when the preset is configured.
pub fn sandbox_go_version(env: &[(String, String)]) -> Option<String> {
    env.iter()
        .find(|(name, _)| name == "GOROOT")
        .and_then(|(_, goroot)| gomod::toolchain_version(Path::new(goroot)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixtures(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/maintain/fixtures")
            .join(name)
    }

    /// RustSec's database from the fixture directories `names`, laid out as RustSec's
    /// (`crates/<package>/<id>.md`).
    fn rustsec(names: &[&str]) -> (tempfile::TempDir, advisory::AdvisoryDb) {
        let dir = tempfile::tempdir().unwrap();
        for name in names {
            for entry in std::fs::read_dir(fixtures(name)).unwrap().flatten() {
                let text = std::fs::read_to_string(entry.path()).unwrap();
                let package = advisory::parse_advisory(&text).unwrap().package;
                let crate_dir = dir.path().join("crates").join(package);
                std::fs::create_dir_all(&crate_dir).unwrap();
                std::fs::write(crate_dir.join(entry.file_name()), text).unwrap();
            }
        }
        let db = advisory::AdvisoryDb::open(dir.path()).unwrap();
        (dir, db)
    }

    #[test]
    fn rustsec_and_osv_crates_io_records_are_one_database_deduplicated_by_alias() {
        let lock = Lockfile::parse(
            "version = 3\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n\n\
             [[package]]\nname = \"regex\"\nversion = \"1.5.4\"\nsource = \
             \"registry+https://github.com/rust-lang/crates.io-index\"\n\n\
             [[package]]\nname = \"smallvec\"\nversion = \"1.6.0\"\nsource = \
             \"registry+https://github.com/rust-lang/crates.io-index\"\n",
        )
        .unwrap();
        let osv = osv::OsvDb::open(&fixtures("osv-crates"), osv::CRATES_IO).unwrap();
        let found = |db: &Database| -> Vec<(String, String)> {
            db.scan(&lock)
                .into_iter()
                .map(|f| (f.package, f.advisory))
                .collect()
        };
        // RustSec without regex's advisory: GitHub's record adds it.
        let (_dir, without_regex) = rustsec(&["rustsec"]);
        assert!(without_regex.advisory("RUSTSEC-2022-0013").is_none());
        let merged = Database::RustSecAndOsv(Box::new(Merged::new(without_regex, osv.clone())));
        assert_eq!(
            found(&merged),
            [
                ("regex".to_string(), "GHSA-m5pq-gvj9-9vr8".to_string()),
                ("smallvec".to_string(), "RUSTSEC-2021-0003".to_string())
            ]
        );
        assert!(merged.affects(
            "GHSA-m5pq-gvj9-9vr8",
            "regex",
            &semver::Version::new(1, 5, 4)
        ));
        assert!(merged.snapshot().starts_with("rustsec=") && merged.snapshot().contains(";osv="));
        // RustSec with it: one finding for regex, RustSec's, whose aliases name GitHub's.
        let (_dir, with_regex) = rustsec(&["rustsec", "rustsec-regex"]);
        let merged = Database::RustSecAndOsv(Box::new(Merged::new(with_regex, osv.clone())));
        assert_eq!(
            found(&merged),
            [
                ("regex".to_string(), "RUSTSEC-2022-0013".to_string()),
                ("smallvec".to_string(), "RUSTSEC-2021-0003".to_string())
            ]
        );
        // Matched through a shared CVE too, when neither names the other's id.
        let (_dir, mut cve_only) = rustsec(&["rustsec", "rustsec-regex"]);
        for advisory in &mut cve_only.advisories {
            advisory.aliases.retain(|alias| alias.starts_with("CVE-"));
        }
        let merged = Database::RustSecAndOsv(Box::new(Merged::new(cve_only, osv)));
        assert_eq!(found(&merged).len(), 2, "{:?}", found(&merged));
    }

    #[test]
    fn the_fetch_sees_the_manifests_and_the_lockfile_and_nothing_that_runs() {
        let dir = tempfile::tempdir().unwrap();
        let (root, dest) = (dir.path().join("repo"), dir.path().join("tree"));
        for (path, text) in [
            ("Cargo.toml", "[workspace]\nmembers = [\"crates/a\"]\n"),
            ("Cargo.lock", "version = 4\n"),
            (
                ".cargo/config.toml",
                "[build]\nrustc-wrapper = \"wrap.sh\"\n",
            ),
            (
                "rust-toolchain.toml",
                "[toolchain]\npath = \"/repo/evil\"\n",
            ),
            ("wrap.sh", "#!/bin/sh\n"),
            ("crates/a/Cargo.toml", "[package]\nname = \"a\"\n"),
            ("crates/a/Cargo.lock", "stray\n"),
            ("crates/a/build.rs", "fn main() { std::process::exit(1) }\n"),
            ("crates/a/src/bin/tool.rs", "fn main() {}\n"),
            (".git/Cargo.toml", "not the tree's\n"),
            ("package.json", "{}\n"),
            ("package-lock.json", "{}\n"),
            (".npmrc", "git=./wrap.sh\n"),
            ("web/package.json", "{\"name\": \"web\"}\n"),
            ("web/node_modules/x/package.json", "{}\n"),
        ] {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
        std::os::unix::fs::symlink(root.join("Cargo.toml"), root.join("crates/Cargo.toml"))
            .unwrap();
        let listing = |dest: &Path| {
            let mut files = Vec::new();
            let mut dirs = vec![dest.to_path_buf()];
            while let Some(dir) = dirs.pop() {
                for entry in std::fs::read_dir(dir).unwrap().flatten() {
                    if entry.file_type().unwrap().is_dir() {
                        dirs.push(entry.path());
                    } else {
                        let text = std::fs::read_to_string(entry.path()).unwrap();
                        let path = entry.path().strip_prefix(dest).unwrap().to_path_buf();
                        files.push((path.display().to_string(), text));
                    }
                }
            }
            files.sort();
            files
        };
        assert!(Ecosystem::Cargo.fetch_tree(&root, &dest).unwrap());
        let copied = |path: &str| {
            (
                path.to_string(),
                std::fs::read_to_string(root.join(path)).unwrap(),
            )
        };
        let empty = |path: &str| (path.to_string(), String::new());
        assert_eq!(
            listing(&dest),
            [
                copied("Cargo.lock"),
                copied("Cargo.toml"),
                copied("crates/a/Cargo.toml"),
                empty("crates/a/build.rs"),
                empty("crates/a/src/bin/tool.rs"),
            ]
        );
        let npm = dir.path().join("npm");
        assert!(Ecosystem::Npm.fetch_tree(&root, &npm).unwrap());
        assert_eq!(
            listing(&npm),
            [
                copied("package-lock.json"),
                copied("package.json"),
                copied("web/package.json"),
            ]
        );
        assert!(!Ecosystem::Go
            .fetch_tree(&root, &dir.path().join("go"))
            .unwrap());
        assert!(!dir.path().join("go").exists());
    }

    #[test]
    fn the_root_files_say_which_ecosystem_and_both_or_neither_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(Ecosystem::detect(root)
            .unwrap_err()
            .contains("no Cargo.toml, go.mod or package.json"));
        assert_eq!(
            Ecosystem::default_checks(root),
            ["cargo test --locked --offline"]
        );
        std::fs::write(root.join("package.json"), "{}").unwrap();
        assert_eq!(Ecosystem::detect(root).unwrap(), Ecosystem::Npm);
        std::fs::write(root.join("go.mod"), "module a\n").unwrap();
        assert_eq!(
            Ecosystem::detect(root).unwrap(),
            Ecosystem::Go,
            "a package.json for tooling"
        );
        assert_eq!(Ecosystem::default_checks(root), ["go test ./..."]);
        std::fs::write(root.join("Cargo.toml"), "").unwrap();
        assert!(Ecosystem::detect(root).unwrap_err().contains("both"));
        std::fs::remove_file(root.join("go.mod")).unwrap();
        assert_eq!(Ecosystem::detect(root).unwrap(), Ecosystem::Cargo);
    }

    #[test]
    fn release_pages_are_the_public_registries_and_only_for_names_they_allow() {
        let config = crate::maintain_config::MaintainConfig::default();
        let upgrade = |package: &str, to: &str| Upgrade {
            package: package.into(),
            from: "0.1.0".into(),
            to: to.into(),
            advisories: vec![],
        };
        assert_eq!(
            Ecosystem::Cargo.release_page(&config, &upgrade("smallvec", "1.6.1")),
            Some("https://crates.io/crates/smallvec/1.6.1".into())
        );
        assert_eq!(
            Ecosystem::Go.release_page(&config, &upgrade("golang.org/x/text", "v0.3.8")),
            Some("https://pkg.go.dev/golang.org/x/text@v0.3.8".into())
        );
        assert_eq!(
            Ecosystem::Npm.release_page(&config, &upgrade("@acme/util", "2.1.4")),
            Some("https://www.npmjs.com/package/@acme/util/v/2.1.4".into())
        );
        // A name or version that would be markup in the pull request is no link.
        assert_eq!(
            Ecosystem::Cargo.release_page(&config, &upgrade("x](https://evil", "1.0.0")),
            None
        );
        assert_eq!(
            Ecosystem::Npm.release_page(&config, &upgrade("greet", "1.0.0) [x](y")),
            None
        );
        // A private registry's pages are not guessed.
        let private = crate::maintain_config::MaintainConfig {
            npm_registry: "https://npm.internal".into(),
            ..config
        };
        assert_eq!(
            Ecosystem::Npm.release_page(&private, &upgrade("greet", "1.0.1")),
            None
        );
    }

    #[test]
    fn go_upgrades_stay_on_their_major_and_scripts_quote_what_go_mod_says() {
        let go = Ecosystem::Go;
        let v = |t: &str| go.semver(t).unwrap();
        assert!(go.compatible(&v("v1.0.0"), &v("v1.4.0")));
        assert!(go.compatible(&v("v0.3.0"), &v("v0.9.0")));
        assert!(!go.compatible(&v("v1.0.0"), &v("v2.0.0+incompatible")));
        assert!(!go.compatible(&v("v1.0.0"), &v("v2.0.0")));
        assert_eq!(go.version_text(&v("v1.0.1")), "v1.0.1");
        let upgrade = Upgrade {
            package: "example.com/it's".into(),
            from: "v1.0.0".into(),
            to: "v1.0.1".into(),
            advisories: vec![],
        };
        assert_eq!(
            go.apply_script(&upgrade),
            "GOSUMDB=off go get 'example.com/it'\\''s@v1.0.1'"
        );
        assert_eq!(
            go.fetch_script(std::slice::from_ref(&upgrade)),
            "go get 'example.com/it'\\''s@v1.0.1' && go mod download"
        );
        // Cargo names a copy by its old version, unless an earlier upgrade moved it.
        let cargo = |package: &str, from: &str, to: &str| Upgrade {
            package: package.into(),
            from: from.into(),
            to: to.into(),
            advisories: vec![],
        };
        assert_eq!(
            Ecosystem::Cargo.fetch_script(&[
                cargo("tokio", "1.8.0", "1.38.0"),
                cargo("hyper", "0.14.10", "0.14.28")
            ]),
            "{ cargo update -p 'tokio@1.8.0' --precise '1.38.0' || cargo update -p 'tokio' \
             --precise '1.38.0'; } && cargo fetch --locked && { cargo update -p \
             'hyper@0.14.10' --precise '0.14.28' || cargo update -p 'hyper' --precise '0.14.28'; \
             } && cargo fetch --locked"
        );
    }
}
