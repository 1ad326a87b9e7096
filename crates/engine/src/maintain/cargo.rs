//! Cargo projects: the profile of a pinned base tree (what maintenance refuses, and why) and
//! its lockfile (the packages, which of them are direct dependencies from crates.io, and the
//! version requirements the manifest puts on them).
//!
//! Everything here reads files of a verified, read-only tree (the snapshot or a
//! materialized candidate); nothing runs.

use std::collections::BTreeMap;
use std::path::Path;

/// The lockfile's `source` of crates.io, git index and sparse index.
const CRATES_IO_SOURCES: [&str; 2] = [
    "registry+https://github.com/rust-lang/crates.io-index",
    "sparse+https://index.crates.io/",
];

/// One `[[package]]` of a `Cargo.lock`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    /// `None` for the workspace's own packages.
    pub source: Option<String>,
    /// As the lockfile writes them: `name`, `name version` or `name version (source)`.
    pub dependencies: Vec<String>,
    /// Where the lockfile places this copy, when a name and version can be installed in more
    /// than one place: npm's `packages` key (`node_modules/optimist/node_modules/minimist`).
    /// `None` for Cargo and Go, whose lockfiles hold one copy of each name and version.
    pub path: Option<String>,
}

impl LockedPackage {
    /// Whether it comes from crates.io.
    pub fn from_crates_io(&self) -> bool {
        self.source
            .as_deref()
            .is_some_and(|s| CRATES_IO_SOURCES.contains(&s))
    }

    /// `name@version`, the package id `cargo update -p` takes.
    pub fn id(&self) -> String {
        format!("{}@{}", self.name, self.version)
    }
}

/// A parsed `Cargo.lock`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lockfile {
    pub packages: Vec<LockedPackage>,
}

impl Lockfile {
    pub fn parse(text: &str) -> Result<Lockfile, String> {
        let value: toml::Table =
            toml::from_str(text).map_err(|e| format!("Cargo.lock is not valid TOML: {e}"))?;
        let Some(packages) = value.get("package") else {
            return Ok(Lockfile::default());
        };
        let packages = packages
            .as_array()
            .ok_or("Cargo.lock: `package` is not an array of tables")?;
        let mut out = Vec::new();
        for package in packages {
            let text = |key: &str| {
                package
                    .get(key)
                    .and_then(|v| v.as_str())
                    .map(str::to_string)
            };
            let (Some(name), Some(version)) = (text("name"), text("version")) else {
                return Err("Cargo.lock: a package without name or version".into());
            };
            let dependencies = package
                .get("dependencies")
                .and_then(|d| d.as_array())
                .map(|deps| {
                    deps.iter()
                        .filter_map(|d| d.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            out.push(LockedPackage {
                name,
                version,
                source: text("source"),
                dependencies,
                path: None,
            });
        }
        Ok(Lockfile { packages: out })
    }

    /// The package a dependency entry of the lockfile names (`name`, `name version`,
    /// `name version (source)`).
    fn resolve(&self, entry: &str) -> Option<&LockedPackage> {
        let mut parts = entry.split_whitespace();
        let name = parts.next()?;
        let version = parts.next();
        self.packages
            .iter()
            .find(|p| p.name == name && version.is_none_or(|v| p.version == v))
    }

    /// Whether the package `name` at `version` depends on a package named `on`, directly or
    /// through others.
    pub fn depends_on(&self, name: &str, version: &str, on: &str) -> bool {
        let mut seen: Vec<&LockedPackage> = Vec::new();
        let mut stack: Vec<&LockedPackage> = self
            .packages
            .iter()
            .filter(|p| p.name == name && p.version == version)
            .collect();
        while let Some(package) = stack.pop() {
            if seen.contains(&package) {
                continue;
            }
            seen.push(package);
            for entry in &package.dependencies {
                if entry.split_whitespace().next() == Some(on) {
                    return true;
                }
                stack.extend(self.resolve(entry));
            }
        }
        false
    }

    /// The crates.io packages the workspace's own packages depend on directly, each once,
    /// sorted by name and version.
    pub fn direct_crates_io(&self) -> Vec<&LockedPackage> {
        let mut direct: Vec<&LockedPackage> = self
            .packages
            .iter()
            .filter(|p| p.source.is_none())
            .flat_map(|member| member.dependencies.iter())
            .filter_map(|entry| self.resolve(entry))
            .filter(|p| p.from_crates_io())
            .collect();
        direct.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
        direct.dedup();
        direct
    }
}

/// What maintenance knows of a Cargo project's base tree.
#[derive(Debug, Clone)]
pub struct Profile {
    pub lockfile: Lockfile,
    /// The root manifest's requirements on its direct dependencies, by package name (every
    /// dependency table, `[workspace.dependencies]` and target tables included).
    pub requirements: BTreeMap<String, Vec<semver::VersionReq>>,
}

/// Profiles the tree at `root`. `Err` is the reason maintenance refuses it
/// (`unsupported_project`).
pub fn profile(root: &Path) -> Result<Profile, String> {
    let read = |name: &str| -> Result<Option<String>, String> {
        let path = root.join(name);
        match std::fs::symlink_metadata(&path) {
            Err(_) => Ok(None),
            Ok(meta) if !meta.is_file() => Err(format!("{name} is not a regular file")),
            Ok(_) => std::fs::read_to_string(&path)
                .map(Some)
                .map_err(|e| format!("cannot read {name}: {e}")),
        }
    };
    let Some(manifest) = read("Cargo.toml")? else {
        return Err(
            "no Cargo.toml at the repository root: only Cargo projects are \
                    maintained yet"
                .into(),
        );
    };
    let Some(lock) = read("Cargo.lock")? else {
        return Err(
            "no Cargo.lock: maintenance needs a committed lockfile to upgrade from \
                    (run `cargo generate-lockfile` and commit it)"
                .into(),
        );
    };
    if root.join(".gitmodules").symlink_metadata().is_ok() {
        return Err(
            "the repository has git submodules (.gitmodules), which maintenance \
                    does not handle"
                .into(),
        );
    }
    for config in [".cargo/config.toml", ".cargo/config"] {
        if let Some(text) = read(config)? {
            let table: toml::Table =
                toml::from_str(&text).map_err(|e| format!("{config} is not valid TOML: {e}"))?;
            if table.contains_key("source") {
                return Err(format!(
                    "{config} replaces dependency sources ([source], e.g. vendored \
                     dependencies), which maintenance does not handle"
                ));
            }
            if table.contains_key("patch") {
                return Err(format!(
                    "{config} patches dependencies ([patch]), which maintenance does not \
                     handle"
                ));
            }
        }
    }
    if vendored(&root.join("vendor")) {
        return Err(
            "vendor/ holds vendored crates (cargo vendor's .cargo-checksum.json), \
                    which maintenance does not handle"
                .into(),
        );
    }
    let manifest: toml::Table =
        toml::from_str(&manifest).map_err(|e| format!("Cargo.toml is not valid TOML: {e}"))?;
    for section in ["patch", "replace"] {
        if manifest.contains_key(section) {
            return Err(format!(
                "Cargo.toml has a [{section}] section (dependencies replaced locally), \
                 which maintenance does not handle"
            ));
        }
    }
    let lockfile = Lockfile::parse(&lock)?;
    Ok(Profile {
        lockfile,
        requirements: requirements(&manifest),
    })
}

/// Whether `vendor/` holds crates `cargo vendor` wrote.
fn vendored(vendor: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(vendor) else {
        return false;
    };
    entries
        .flatten()
        .any(|entry| entry.path().join(".cargo-checksum.json").is_file())
}

/// The version requirements of every dependency table of a manifest, by package name (a
/// renamed dependency's `package`).
fn requirements(manifest: &toml::Table) -> BTreeMap<String, Vec<semver::VersionReq>> {
    let mut tables: Vec<&toml::Table> = Vec::new();
    let kinds = ["dependencies", "dev-dependencies", "build-dependencies"];
    let mut owners: Vec<&toml::Table> = vec![manifest];
    if let Some(targets) = manifest.get("target").and_then(|v| v.as_table()) {
        owners.extend(targets.values().filter_map(|v| v.as_table()));
    }
    for owner in owners {
        for kind in kinds {
            if let Some(t) = owner.get(kind).and_then(|v| v.as_table()) {
                tables.push(t);
            }
        }
    }
    if let Some(deps) = manifest
        .get("workspace")
        .and_then(|w| w.get("dependencies"))
        .and_then(|v| v.as_table())
    {
        tables.push(deps);
    }
    let mut out: BTreeMap<String, Vec<semver::VersionReq>> = BTreeMap::new();
    for table in tables {
        for (key, value) in table {
            let (name, version) = match value {
                toml::Value::String(version) => (key.clone(), Some(version.as_str())),
                toml::Value::Table(t) => (
                    t.get("package")
                        .and_then(|p| p.as_str())
                        .unwrap_or(key)
                        .to_string(),
                    t.get("version").and_then(|v| v.as_str()),
                ),
                _ => continue,
            };
            if let Some(req) = version.and_then(|v| semver::VersionReq::parse(v).ok()) {
                out.entry(name).or_default().push(req);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"
version = 4

[[package]]
name = "app"
version = "0.1.0"
dependencies = [
 "smallvec",
 "itoa 1.0.1",
]

[[package]]
name = "itoa"
version = "0.4.8"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "itoa"
version = "1.0.1"
source = "registry+https://github.com/rust-lang/crates.io-index"

[[package]]
name = "smallvec"
version = "1.6.0"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "1a55ca5f3b68e41c979bf8c46a6f1da892ca4db8f94023ce0bd32407573b1ac0"
"#;

    fn write(root: &Path, files: &[(&str, &str)]) {
        for (path, text) in files {
            let path = root.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        }
    }

    #[test]
    fn direct_dependencies_are_the_members_crates_io_ones() {
        let lock = Lockfile::parse(LOCK).unwrap();
        let direct: Vec<String> = lock.direct_crates_io().iter().map(|p| p.id()).collect();
        assert_eq!(direct, ["itoa@1.0.1", "smallvec@1.6.0"]);
    }

    #[test]
    fn a_cargo_project_is_profiled_with_its_requirements() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[
                (
                    "Cargo.toml",
                    "[package]\nname = \"app\"\nversion = \"0.1.0\"\n[dependencies]\n\
                     smallvec = \"1.6.0\"\nnumbers = { package = \"itoa\", version = \"1\" }\n",
                ),
                ("Cargo.lock", LOCK),
            ],
        );
        let profile = profile(dir.path()).unwrap();
        assert_eq!(profile.lockfile.packages.len(), 4);
        assert_eq!(profile.requirements["smallvec"][0].to_string(), "^1.6.0");
        assert_eq!(profile.requirements["itoa"][0].to_string(), "^1");
    }

    #[test]
    fn what_maintenance_does_not_handle_is_refused_with_the_reason() {
        let manifest = "[package]\nname = \"app\"\nversion = \"0.1.0\"\n";
        let cases: Vec<(Vec<(&str, String)>, &str)> = vec![
            (vec![], "no Cargo.toml"),
            (vec![("Cargo.toml", manifest.into())], "no Cargo.lock"),
            (
                vec![
                    (
                        "Cargo.toml",
                        format!("{manifest}[patch.crates-io]\nx = {{ path = \"x\" }}\n"),
                    ),
                    ("Cargo.lock", LOCK.into()),
                ],
                "[patch]",
            ),
            (
                vec![
                    (
                        "Cargo.toml",
                        format!("{manifest}[replace]\n\"x:1.0.0\" = {{ path = \"x\" }}\n"),
                    ),
                    ("Cargo.lock", LOCK.into()),
                ],
                "[replace]",
            ),
            (
                vec![
                    ("Cargo.toml", manifest.into()),
                    ("Cargo.lock", LOCK.into()),
                    (
                        ".cargo/config.toml",
                        "[source.crates-io]\nreplace-with = \"vendored\"\n[source.vendored]\n\
                         directory = \"vendor\"\n"
                            .into(),
                    ),
                ],
                "replaces dependency sources",
            ),
            (
                vec![
                    ("Cargo.toml", manifest.into()),
                    ("Cargo.lock", LOCK.into()),
                    ("vendor/smallvec/.cargo-checksum.json", "{}".into()),
                ],
                "vendored crates",
            ),
            (
                vec![
                    ("Cargo.toml", manifest.into()),
                    ("Cargo.lock", LOCK.into()),
                    (".gitmodules", "[submodule \"x\"]\n".into()),
                ],
                "submodules",
            ),
        ];
        for (files, expect) in cases {
            let dir = tempfile::tempdir().unwrap();
            let files: Vec<(&str, &str)> = files.iter().map(|(p, t)| (*p, t.as_str())).collect();
            write(dir.path(), &files);
            let error = profile(dir.path()).unwrap_err();
            assert!(error.contains(expect), "{expect}: {error}");
        }
    }
}
