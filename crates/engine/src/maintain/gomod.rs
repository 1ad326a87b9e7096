//! Go modules: the profile of a pinned base tree (what maintenance refuses, and why) and its
//! `go.mod` (the module, the Go version it names and the modules it requires, direct or
//! `// indirect`).
//!
//! `go.mod` plays `Cargo.lock`'s part: since Go 1.17 it lists every module the build needs at
//! the version minimal version selection picks, and `go.sum` holds their checksums. Everything
//! here reads files of a verified, read-only tree; nothing runs.

use super::cargo::{LockedPackage, Lockfile};
use std::path::Path;

/// The `source` a required module has in the [`Lockfile`] a `go.mod` is read into.
pub const GO_SOURCE: &str = "go";

/// One `require` of a `go.mod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Require {
    pub path: String,
    /// As written: `v1.2.3`, a pseudo-version, `v2.0.0+incompatible`.
    pub version: String,
    /// Marked `// indirect`: needed by a dependency, not imported by the module itself.
    pub indirect: bool,
}

/// One `replace` of a `go.mod`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replace {
    pub path: String,
    /// The replacement: a module path (with a version) or a local directory.
    pub target: String,
}

impl Replace {
    /// Whether the replacement is a directory of the file system (`./x`, `../x`, `/x`).
    pub fn local(&self) -> bool {
        self.target.starts_with("./")
            || self.target.starts_with("../")
            || self.target == "."
            || self.target == ".."
            || self.target.starts_with('/')
    }
}

/// A parsed `go.mod`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GoMod {
    pub module: String,
    /// The `go` directive (`1.19`).
    pub go: Option<String>,
    /// The `toolchain` directive (`go1.21.3`).
    pub toolchain: Option<String>,
    pub requires: Vec<Require>,
    pub replaces: Vec<Replace>,
}

/// One token of a directive's line: unquoted, or a Go string (`"…"`, `` `…` ``).
fn tokens(line: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if rest.starts_with("//") {
            break;
        }
        let (token, after) = match rest.chars().next() {
            Some(quote @ ('"' | '`')) => {
                let end = rest[1..]
                    .find(quote)
                    .ok_or_else(|| format!("unterminated string in {line:?}"))?;
                (rest[1..1 + end].to_string(), &rest[end + 2..])
            }
            _ => {
                let end = rest.find(|c: char| c.is_whitespace()).unwrap_or(rest.len());
                (rest[..end].to_string(), &rest[end..])
            }
        };
        out.push(token);
        rest = after.trim_start();
    }
    Ok(out)
}

impl GoMod {
    /// Parses a `go.mod`. Directives Warden does not use (`exclude`, `retract`, `godebug`)
    /// are read past; a line that is none of the known forms is an error naming it.
    pub fn parse(text: &str) -> Result<GoMod, String> {
        let mut module = GoMod::default();
        let mut block: Option<String> = None;
        for (number, raw) in text.lines().enumerate() {
            let at = |reason: String| format!("go.mod line {}: {reason}", number + 1);
            let indirect = raw.split_once("//").is_some_and(|(_, comment)| {
                comment.trim().split([' ', ';']).any(|w| w == "indirect")
            });
            let words = tokens(raw).map_err(at)?;
            if words.is_empty() {
                continue;
            }
            let (verb, args): (String, &[String]) = match &block {
                Some(verb) => {
                    if words.len() == 1 && words[0] == ")" {
                        block = None;
                        continue;
                    }
                    (verb.clone(), &words[..])
                }
                None => {
                    if words.len() == 2 && words[1] == "(" {
                        block = Some(words[0].clone());
                        continue;
                    }
                    (words[0].clone(), &words[1..])
                }
            };
            match verb.as_str() {
                "module" => match args {
                    [path] => module.module = path.clone(),
                    _ => return Err(at("`module` takes one path".into())),
                },
                "go" => match args {
                    [version] => module.go = Some(version.clone()),
                    _ => return Err(at("`go` takes one version".into())),
                },
                "toolchain" => match args {
                    [name] => module.toolchain = Some(name.clone()),
                    _ => return Err(at("`toolchain` takes one name".into())),
                },
                "require" => match args {
                    [path, version] => module.requires.push(Require {
                        path: path.clone(),
                        version: version.clone(),
                        indirect,
                    }),
                    _ => return Err(at("`require` takes a module path and a version".into())),
                },
                "replace" => {
                    let arrow = args
                        .iter()
                        .position(|w| w == "=>")
                        .ok_or_else(|| at("`replace` without `=>`".into()))?;
                    let (Some(path), Some(target)) = (args.first(), args.get(arrow + 1)) else {
                        return Err(at("`replace` needs a module and a replacement".into()));
                    };
                    module.replaces.push(Replace {
                        path: path.clone(),
                        target: target.clone(),
                    });
                }
                "exclude" | "retract" | "godebug" => {}
                other => return Err(at(format!("unknown directive {other:?}"))),
            }
        }
        if block.is_some() {
            return Err("go.mod: a `(` block is not closed".into());
        }
        if module.module.is_empty() {
            return Err("go.mod has no `module` line".into());
        }
        Ok(module)
    }

    /// The requirements as a [`Lockfile`]: the module itself (no source) depending on its
    /// direct requirements, and every required module with source [`GO_SOURCE`].
    pub fn lockfile(&self) -> Lockfile {
        let mut packages = vec![LockedPackage {
            name: self.module.clone(),
            version: String::new(),
            source: None,
            dependencies: self
                .requires
                .iter()
                .filter(|r| !r.indirect)
                .map(|r| format!("{} {}", r.path, r.version))
                .collect(),
            path: None,
        }];
        packages.extend(self.requires.iter().map(|r| LockedPackage {
            name: r.path.clone(),
            version: r.version.clone(),
            source: Some(GO_SOURCE.into()),
            dependencies: Vec::new(),
            path: None,
        }));
        Lockfile { packages }
    }

    /// The standard library's version this module names: the `toolchain` directive
    /// (`go1.21.3` → `1.21.3`), else the `go` directive (`1.19` → `1.19.0`).
    pub fn named_go_version(&self) -> Option<String> {
        if let Some(toolchain) = &self.toolchain {
            if let Some(version) = toolchain.strip_prefix("go") {
                return Some(full_go_version(version));
            }
        }
        self.go.as_deref().map(full_go_version)
    }
}

/// `1.19` → `1.19.0`; `1.21rc2` and `1.21.3` as they are.
pub fn full_go_version(version: &str) -> String {
    if version.split('.').count() == 2 && version.chars().all(|c| c.is_ascii_digit() || c == '.') {
        format!("{version}.0")
    } else {
        version.to_string()
    }
}

/// A Go module version (`v1.2.3`, `v0.0.0-2020…-abcdef`, `v2.0.0+incompatible`) as semver.
pub fn semver_of(version: &str) -> Option<semver::Version> {
    semver::Version::parse(version.strip_prefix('v')?).ok()
}

/// A Go toolchain's version (`go1.19.8`, from `$GOROOT/VERSION`'s first line) as semver-like
/// text (`1.19.8`).
pub fn toolchain_version(goroot: &Path) -> Option<String> {
    let text = std::fs::read_to_string(goroot.join("VERSION")).ok()?;
    let first = text.lines().next()?.trim();
    first.strip_prefix("go").map(full_go_version)
}

/// What maintenance knows of a Go module's base tree.
#[derive(Debug, Clone)]
pub struct Profile {
    pub go_mod: GoMod,
}

/// Profiles the tree at `root`. `Err` is the reason maintenance refuses it
/// (`unsupported_project`).
pub fn profile(root: &Path) -> Result<Profile, String> {
    let is_file = |name: &str| {
        std::fs::symlink_metadata(root.join(name)).is_ok_and(|m| m.file_type().is_file())
    };
    if !is_file("go.mod") {
        return Err("no go.mod at the repository's root (a symbolic link is not followed)".into());
    }
    if root.join("go.work").exists() {
        return Err(
            "go.work: multi-module workspaces are not supported; maintain one module per \
             repository"
                .into(),
        );
    }
    if root.join("vendor/modules.txt").exists() {
        return Err(
            "vendored dependencies (vendor/modules.txt): maintenance would have to re-vendor \
             them, which is not supported"
                .into(),
        );
    }
    if root.join(".gitmodules").exists() {
        return Err("git submodules (.gitmodules) are not supported".into());
    }
    let text = std::fs::read_to_string(root.join("go.mod"))
        .map_err(|e| format!("cannot read go.mod: {e}"))?;
    let go_mod = GoMod::parse(&text)?;
    if let Some(local) = go_mod.replaces.iter().find(|r| r.local()) {
        return Err(format!(
            "go.mod replaces {} with the local directory {}: local replacements are not \
             supported",
            local.path, local.target
        ));
    }
    if !go_mod.requires.is_empty() && !is_file("go.sum") {
        return Err(
            "go.sum is missing: run `go mod tidy` and commit go.sum, so the modules are \
             verified"
                .into(),
        );
    }
    Ok(Profile { go_mod })
}

#[cfg(test)]
mod tests {
    use super::*;

    const GO_MOD: &str = r#"module example.com/app

go 1.19

require (
	example.com/greet v1.0.0
	golang.org/x/text v0.3.7 // indirect
	"example.com/quoted" v0.1.0
)

require github.com/pkg/errors v0.9.1

replace example.com/old => example.com/new v1.2.0

exclude example.com/bad v1.0.0

retract (
	v1.0.5 // published by mistake
)
"#;

    #[test]
    fn a_go_mod_reads_its_module_versions_and_which_requirements_are_indirect() {
        let parsed = GoMod::parse(GO_MOD).unwrap();
        assert_eq!(parsed.module, "example.com/app");
        assert_eq!(parsed.go.as_deref(), Some("1.19"));
        assert_eq!(
            parsed.requires,
            vec![
                Require {
                    path: "example.com/greet".into(),
                    version: "v1.0.0".into(),
                    indirect: false
                },
                Require {
                    path: "golang.org/x/text".into(),
                    version: "v0.3.7".into(),
                    indirect: true
                },
                Require {
                    path: "example.com/quoted".into(),
                    version: "v0.1.0".into(),
                    indirect: false
                },
                Require {
                    path: "github.com/pkg/errors".into(),
                    version: "v0.9.1".into(),
                    indirect: false
                },
            ]
        );
        assert_eq!(parsed.replaces.len(), 1);
        assert!(!parsed.replaces[0].local());
        let lock = parsed.lockfile();
        assert_eq!(lock.packages[0].source, None);
        assert_eq!(
            lock.packages[0].dependencies,
            [
                "example.com/greet v1.0.0",
                "example.com/quoted v0.1.0",
                "github.com/pkg/errors v0.9.1"
            ]
        );
        assert_eq!(lock.packages.len(), 5);
        assert_eq!(parsed.named_go_version().as_deref(), Some("1.19.0"));
    }

    #[test]
    fn malformed_go_mods_are_refused_naming_the_line() {
        for (text, expected) in [
            ("module a\nrequire b\n", "go.mod line 2: `require` takes"),
            (
                "module a\nfrobnicate x\n",
                "go.mod line 2: unknown directive",
            ),
            ("module a\nrequire (\nb v1.0.0\n", "not closed"),
            ("go 1.19\n", "no `module` line"),
            ("module \"a\n", "unterminated string"),
        ] {
            let error = GoMod::parse(text).unwrap_err();
            assert!(error.contains(expected), "{text:?}: {error}");
        }
    }

    #[test]
    fn the_toolchain_directive_names_the_standard_library_before_the_go_line() {
        let parsed = GoMod::parse("module a\ngo 1.21\ntoolchain go1.21.3\n").unwrap();
        assert_eq!(parsed.named_go_version().as_deref(), Some("1.21.3"));
        assert_eq!(semver_of("v1.2.3").unwrap().to_string(), "1.2.3");
        let pseudo = semver_of("v0.0.0-20200101000000-abcdefabcdef").unwrap();
        assert!(!pseudo.pre.is_empty(), "a pseudo-version is a pre-release");
        assert_eq!(semver_of("1.2.3"), None, "Go versions start with v");
    }

    #[test]
    fn the_profile_refuses_what_maintenance_cannot_change_honestly() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let write = |name: &str, text: &str| {
            let path = root.join(name);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        assert!(profile(root).unwrap_err().contains("no go.mod"));
        write(
            "go.mod",
            "module a\n\ngo 1.19\n\nrequire b.example/x v1.0.0\n",
        );
        assert!(profile(root).unwrap_err().contains("go.sum is missing"));
        write("go.sum", "");
        profile(root).unwrap();
        write(
            "go.mod",
            "module a\nrequire b.example/x v1.0.0\nreplace b.example/x => ../x\n",
        );
        assert!(profile(root)
            .unwrap_err()
            .contains("replaces b.example/x with the local directory ../x"));
        write("go.mod", "module a\n");
        write("vendor/modules.txt", "# b.example/x v1.0.0\n");
        assert!(profile(root).unwrap_err().contains("vendor/modules.txt"));
        std::fs::remove_dir_all(root.join("vendor")).unwrap();
        write("go.work", "go 1.19\nuse .\n");
        assert!(profile(root).unwrap_err().contains("go.work"));
        std::fs::remove_file(root.join("go.work")).unwrap();
        write(".gitmodules", "");
        assert!(profile(root).unwrap_err().contains("submodules"));
    }
}
