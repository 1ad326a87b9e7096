//! npm projects: the profile of a pinned base tree (what maintenance refuses, and why), its
//! `package-lock.json` (lockfile version 2 or 3: the `packages` map) and the registry's
//! versions of a package (its packument: `GET <registry>/<name>`, read by Warden on the host).
//!
//! Everything here reads files of a verified, read-only tree or the registry's JSON; nothing
//! runs. Package names come from the repository and are checked against npm's rules before
//! they reach a URL or a command.

use super::cargo::{LockedPackage, Lockfile};
use super::index::{get_capped, IndexVersion};
use std::collections::BTreeMap;
use std::path::Path;

/// The `source` a registry package has in the [`Lockfile`] a `package-lock.json` is read into.
pub const NPM_SOURCE: &str = "npm";

/// The largest packument read (the largest real ones are tens of MiB).
const MAX_PACKUMENT_BYTES: usize = 64 * 1024 * 1024;

/// The dependency tables of `package.json` whose packages `--select all` upgrades.
const DEPENDENCY_TABLES: [&str; 3] = ["dependencies", "devDependencies", "optionalDependencies"];

/// npm's package name rules, kept with `--select`'s ([`crate::maintain_options`]).
pub use crate::maintain_options::check_npm_name as check_name;

/// The package's name in a `packages` key (`node_modules/a/node_modules/@s/b` → `@s/b`).
fn name_of_key(key: &str) -> Option<&str> {
    key.rsplit_once("node_modules/").map(|(_, name)| name)
}

/// What maintenance knows of an npm project's base tree.
#[derive(Debug, Clone)]
pub struct Profile {
    pub lockfile: Lockfile,
    /// The direct dependencies' locked packages (the root's `node_modules/<name>`).
    pub direct: Vec<LockedPackage>,
    /// `package.json`'s ranges on its direct dependencies, where the semver crate reads them
    /// (`^1.2.3`, `~1.2`, `>=1.0.0 <2.0.0`; not `||` alternatives or `x` ranges).
    pub requirements: BTreeMap<String, Vec<semver::VersionReq>>,
}

/// An npm range as a [`semver::VersionReq`], where it reads as one.
fn requirement(range: &str) -> Option<semver::VersionReq> {
    let range = range.trim();
    if range.contains("||") || range.contains(" - ") {
        return None;
    }
    // npm separates comparators with spaces, Cargo with commas.
    let mut parts: Vec<String> = Vec::new();
    for word in range.split_whitespace() {
        match parts.last_mut() {
            Some(last) if matches!(last.as_str(), ">" | ">=" | "<" | "<=" | "=") => {
                last.push_str(word)
            }
            _ => parts.push(word.to_string()),
        }
    }
    semver::VersionReq::parse(&parts.join(", ")).ok()
}

/// Parses a `package-lock.json` (version 2 or 3) into a [`Lockfile`]: the root (no source)
/// depending on `direct`, and every registry package with source [`NPM_SOURCE`]. `Err` names
/// what maintenance refuses: an older lockfile version, a linked, file or git package.
pub fn parse_lock(text: &str, direct: &[String]) -> Result<Lockfile, String> {
    let lock: serde_json::Value = serde_json::from_str(text)
        .map_err(|e| format!("package-lock.json is not valid JSON: {e}"))?;
    let version = lock
        .get("lockfileVersion")
        .and_then(|v| v.as_u64())
        .unwrap_or(1);
    if version < 2 {
        return Err(format!(
            "package-lock.json is lockfile version {version}: regenerate it with npm 7 or newer \
             (`npm install --package-lock-only`) and commit it"
        ));
    }
    let packages = lock
        .get("packages")
        .and_then(|p| p.as_object())
        .ok_or("package-lock.json has no `packages`")?;
    let root_name = packages
        .get("")
        .and_then(|r| r.get("name"))
        .and_then(|n| n.as_str())
        .unwrap_or("root")
        .to_string();
    let mut out = vec![LockedPackage {
        name: root_name,
        version: String::new(),
        source: None,
        dependencies: Vec::new(),
        path: None,
    }];
    for (key, entry) in packages {
        if key.is_empty() {
            continue;
        }
        let Some(name) = name_of_key(key) else {
            // A workspace member or a linked directory: not a registry package.
            return Err(format!(
                "package-lock.json has {key:?}, a local package: workspaces and linked packages \
                 are not supported"
            ));
        };
        if entry.get("link").and_then(|l| l.as_bool()) == Some(true) {
            return Err(format!(
                "package-lock.json links {name} to a local directory, which maintenance does not \
                 handle"
            ));
        }
        let resolved = entry.get("resolved").and_then(|r| r.as_str()).unwrap_or("");
        if !(resolved.is_empty()
            || resolved.starts_with("https://")
            || resolved.starts_with("http://"))
        {
            return Err(format!(
                "package-lock.json resolves {name} from {resolved:?} (not a registry), which \
                 maintenance does not handle"
            ));
        }
        let name = entry
            .get("name")
            .and_then(|n| n.as_str())
            .unwrap_or(name)
            .to_string();
        let Some(version) = entry.get("version").and_then(|v| v.as_str()) else {
            return Err(format!("package-lock.json: {key} has no version"));
        };
        if key.matches("node_modules/").count() == 1 && direct.contains(&name) {
            out[0].dependencies.push(format!("{name} {version}"));
        }
        out.push(LockedPackage {
            name,
            version: version.to_string(),
            source: Some(NPM_SOURCE.into()),
            dependencies: Vec::new(),
            path: Some(key.clone()),
        });
    }
    Ok(Lockfile { packages: out })
}

/// The names of `package.json`'s direct dependencies, and their ranges.
pub fn manifest_dependencies(manifest: &serde_json::Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for table in DEPENDENCY_TABLES {
        if let Some(deps) = manifest.get(table).and_then(|d| d.as_object()) {
            for (name, range) in deps {
                if let Some(range) = range.as_str() {
                    out.insert(name.clone(), range.to_string());
                }
            }
        }
    }
    out
}

/// Profiles the tree at `root`. `Err` is the reason maintenance refuses it
/// (`unsupported_project`).
pub fn profile(root: &Path) -> Result<Profile, String> {
    let read = |name: &str| -> Result<Option<String>, String> {
        match std::fs::symlink_metadata(root.join(name)) {
            Err(_) => Ok(None),
            Ok(meta) if !meta.is_file() => Err(format!("{name} is not a regular file")),
            Ok(_) => std::fs::read_to_string(root.join(name))
                .map(Some)
                .map_err(|e| format!("cannot read {name}: {e}")),
        }
    };
    let manifest = read("package.json")?.ok_or("no package.json at the repository's root")?;
    let manifest: serde_json::Value = serde_json::from_str(&manifest)
        .map_err(|e| format!("package.json is not valid JSON: {e}"))?;
    if manifest.get("workspaces").is_some() {
        return Err("package.json declares workspaces, which maintenance does not handle".into());
    }
    for other in ["yarn.lock", "pnpm-lock.yaml", "npm-shrinkwrap.json"] {
        if root.join(other).symlink_metadata().is_ok() {
            return Err(format!(
                "{other}: only npm's package-lock.json is maintained, alone"
            ));
        }
    }
    if root.join("node_modules").symlink_metadata().is_ok() {
        return Err(
            "node_modules/ is committed (vendored dependencies), which maintenance does not \
             handle"
                .into(),
        );
    }
    if root.join(".gitmodules").symlink_metadata().is_ok() {
        return Err("git submodules (.gitmodules) are not supported".into());
    }
    let lock = read("package-lock.json")?.ok_or(
        "no package-lock.json: maintenance needs a committed lockfile to upgrade from (run \
         `npm install --package-lock-only` and commit it)",
    )?;
    let dependencies = manifest_dependencies(&manifest);
    let names: Vec<String> = dependencies.keys().cloned().collect();
    let lockfile = parse_lock(&lock, &names)?;
    let mut direct: Vec<LockedPackage> = lockfile
        .packages
        .iter()
        .skip(1)
        .filter(|p| {
            lockfile.packages[0]
                .dependencies
                .contains(&format!("{} {}", p.name, p.version))
        })
        .cloned()
        .collect();
    direct.sort_by(|a, b| (&a.name, &a.version).cmp(&(&b.name, &b.version)));
    direct.dedup();
    let requirements = dependencies
        .iter()
        .filter_map(|(name, range)| Some((name.clone(), vec![requirement(range)?])))
        .collect();
    Ok(Profile {
        lockfile,
        direct,
        requirements,
    })
}

/// The registry path of a package (`@scope/name` → `@scope%2fname`).
fn registry_path(name: &str) -> String {
    name.replacen('/', "%2f", 1)
}

/// The versions of `name` in the registry at `registry`, newer than `current`: each with its
/// publication time (the packument's `time`) and, deprecated, marked as yanked (npm's nearest:
/// a deprecated version is not one to move to).
pub async fn fetch_versions(
    client: &reqwest::Client,
    registry: &str,
    name: &str,
    current: &semver::Version,
) -> Result<Vec<IndexVersion>, String> {
    check_name(name)?;
    let url = format!("{}/{}", registry.trim_end_matches('/'), registry_path(name));
    let bytes = get_capped(client, &url, MAX_PACKUMENT_BYTES, "the npm registry")
        .await?
        .ok_or_else(|| format!("{name} is not in the npm registry ({url}: 404)"))?;
    let packument: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| format!("{url}: not a packument: {e}"))?;
    let times = packument.get("time").and_then(|t| t.as_object());
    let mut out = Vec::new();
    if let Some(versions) = packument.get("versions").and_then(|v| v.as_object()) {
        for (text, entry) in versions {
            let Ok(version) = semver::Version::parse(text) else {
                continue;
            };
            if version <= *current {
                continue;
            }
            out.push(IndexVersion {
                version,
                yanked: entry.get("deprecated").is_some_and(|d| !d.is_null()),
                published_ms: times
                    .and_then(|t| t.get(text))
                    .and_then(|t| t.as_str())
                    .and_then(warden_time::parse_rfc3339_since_epoch),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: &str = r#"{
  "name": "app", "version": "1.0.0", "lockfileVersion": 3, "requires": true,
  "packages": {
    "": {"name": "app", "version": "1.0.0", "dependencies": {"greet": "^1.0.0", "@acme/util": "~2.1.0"}},
    "node_modules/greet": {"version": "1.0.0", "resolved": "http://127.0.0.1:1/greet/-/greet-1.0.0.tgz", "integrity": "sha512-x"},
    "node_modules/@acme/util": {"version": "2.1.3", "resolved": "https://registry.npmjs.org/@acme/util/-/util-2.1.3.tgz"},
    "node_modules/@acme/util/node_modules/greet": {"version": "0.9.0", "resolved": "https://registry.npmjs.org/greet/-/greet-0.9.0.tgz"},
    "node_modules/left": {"version": "1.2.0", "resolved": "https://registry.npmjs.org/left/-/left-1.2.0.tgz"}
  }
}"#;

    #[test]
    fn a_lockfile_reads_every_copy_and_which_are_direct() {
        let lock = parse_lock(LOCK, &["greet".into(), "@acme/util".into()]).unwrap();
        assert_eq!(lock.packages[0].source, None);
        let mut direct = lock.packages[0].dependencies.clone();
        direct.sort();
        assert_eq!(direct, ["@acme/util 2.1.3", "greet 1.0.0"]);
        let mut greets: Vec<&str> = lock
            .packages
            .iter()
            .filter(|p| p.name == "greet")
            .map(|p| p.version.as_str())
            .collect();
        greets.sort();
        assert_eq!(
            greets,
            ["0.9.0", "1.0.0"],
            "the nested copy is a package too"
        );
        assert_eq!(lock.packages.len(), 5);
    }

    #[test]
    fn what_maintenance_cannot_change_honestly_is_refused_naming_it() {
        let v1 = r#"{"lockfileVersion": 1, "dependencies": {}}"#;
        assert!(parse_lock(v1, &[])
            .unwrap_err()
            .contains("lockfile version 1"));
        let git = r#"{"lockfileVersion": 3, "packages": {"node_modules/x": {"version": "1.0.0", "resolved": "git+ssh://git@github.com/x/x.git#abc"}}}"#;
        assert!(parse_lock(git, &[]).unwrap_err().contains("not a registry"));
        let linked = r#"{"lockfileVersion": 3, "packages": {"node_modules/x": {"resolved": "../x", "link": true}}}"#;
        assert!(parse_lock(linked, &[]).unwrap_err().contains("links x"));
        let member = r#"{"lockfileVersion": 3, "packages": {"packages/a": {"version": "1.0.0"}}}"#;
        assert!(parse_lock(member, &[]).unwrap_err().contains("workspaces"));

        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(profile(root).unwrap_err().contains("no package.json"));
        std::fs::write(
            root.join("package.json"),
            r#"{"dependencies": {"greet": "^1.0.0"}}"#,
        )
        .unwrap();
        assert!(profile(root).unwrap_err().contains("no package-lock.json"));
        std::fs::write(root.join("package-lock.json"), LOCK).unwrap();
        let profiled = profile(root).unwrap();
        assert_eq!(profiled.direct.len(), 1);
        assert_eq!(profiled.direct[0].name, "greet");
        assert!(profiled.requirements["greet"][0].matches(&semver::Version::new(1, 4, 0)));
        std::fs::write(root.join("yarn.lock"), "").unwrap();
        assert!(profile(root).unwrap_err().contains("yarn.lock"));
        std::fs::remove_file(root.join("yarn.lock")).unwrap();
        std::fs::create_dir(root.join("node_modules")).unwrap();
        assert!(profile(root)
            .unwrap_err()
            .contains("node_modules/ is committed"));
        std::fs::remove_dir(root.join("node_modules")).unwrap();
        std::fs::write(
            root.join("package.json"),
            r#"{"workspaces": ["packages/*"]}"#,
        )
        .unwrap();
        assert!(profile(root).unwrap_err().contains("workspaces"));
    }

    #[test]
    fn names_that_could_leave_the_registry_or_read_as_flags_are_refused() {
        for good in ["greet", "@acme/util", "left-pad", "lodash.merge"] {
            check_name(good).unwrap();
        }
        for bad in [
            "",
            "../x",
            "@acme/../x",
            "-x",
            "Greet",
            "@acme",
            "a b",
            ".hidden",
            "a/b",
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
        assert_eq!(registry_path("@acme/util"), "@acme%2futil");
        assert!(requirement("^1.2.3")
            .unwrap()
            .matches(&semver::Version::new(1, 9, 0)));
        let spaced = requirement(">= 1.0.0 < 2.0.0").unwrap();
        assert!(spaced.matches(&semver::Version::new(1, 5, 0)));
        assert!(!spaced.matches(&semver::Version::new(2, 0, 0)));
        assert_eq!(requirement("1.x || 2.x"), None);
    }
}
