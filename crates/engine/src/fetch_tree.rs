//! What a networked step sees of a base tree: a copy holding only the manifests and the
//! lockfile, so that nothing of the repository that can make the package manager run a program
//! is there. For Cargo every `Cargo.toml`, the root `Cargo.lock` and, empty, every `.rs` file
//! (Cargo discovers targets by those names; it never reads them to fetch), never
//! `.cargo/config.toml` (its `rustc-wrapper`, `rustc`, `[target]` runners and linkers, `[env]`,
//! sources, registries, proxies), `rust-toolchain.toml` or a build script's content; for npm
//! every `package.json` (workspaces) and the root `package-lock.json` or
//! `npm-shrinkwrap.json`, never `.npmrc` (its `git`, `script-shell`, `node-options`,
//! registries). Directories named `.git` or `node_modules` and symbolic links are skipped.
//!
//! A leaf: maintenance's networked steps and the presets' default prepare commands (`change`)
//! both use it.

use std::path::{Path, PathBuf};
use warden_protocol::{Failure, FailureCode};
use warden_tools::checks::ChangeSession;

/// Whose manifests a fetch tree holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Manifests {
    Cargo,
    Npm,
}

/// Writes at `dest` what a networked step sees of the tree at `root` (see the module).
pub fn write(kind: Manifests, root: &Path, dest: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dest).map_err(|e| format!("cannot create {}: {e}", dest.display()))?;
    let mut dirs = vec![PathBuf::new()];
    while let Some(relative) = dirs.pop() {
        let entries = std::fs::read_dir(root.join(&relative))
            .map_err(|e| format!("cannot read {}: {e}", root.join(&relative).display()))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read the tree: {e}"))?;
            let name = entry.file_name();
            let path = relative.join(&name);
            let file_type = entry
                .file_type()
                .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            if file_type.is_dir() {
                if name != ".git" && name != "node_modules" {
                    dirs.push(path);
                }
                continue;
            }
            if !file_type.is_file() {
                continue;
            }
            let Some(empty) = seen(kind, &path) else {
                continue;
            };
            let target = dest.join(&path);
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
            }
            let written = if empty {
                std::fs::write(&target, b"")
            } else {
                std::fs::copy(entry.path(), &target).map(|_| ())
            };
            written.map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        }
    }
    Ok(())
}

/// Whether the networked steps see the file at `relative`: `Some(false)` as it is,
/// `Some(true)` empty.
fn seen(kind: Manifests, relative: &Path) -> Option<bool> {
    let name = relative.file_name()?.to_str()?;
    let at_root = relative.parent() == Some(Path::new(""));
    match kind {
        Manifests::Cargo if name == "Cargo.toml" || (at_root && name == "Cargo.lock") => {
            Some(false)
        }
        Manifests::Cargo if name.ends_with(".rs") => Some(true),
        Manifests::Npm
            if name == "package.json"
                || (at_root && (name == "package-lock.json" || name == "npm-shrinkwrap.json")) =>
        {
            Some(false)
        }
        Manifests::Cargo | Manifests::Npm => None,
    }
}

/// A fetch tree under the task's scratch directory, removed when dropped; or, for `None`
/// manifests, the base tree itself.
pub struct FetchTree {
    root: PathBuf,
    owned: bool,
}

impl FetchTree {
    /// Writes `kind`'s fetch tree of the session's base as `<scratch>/<name>-tree`.
    pub fn new(
        session: &ChangeSession,
        kind: Option<Manifests>,
        name: &str,
    ) -> Result<FetchTree, Failure> {
        let config = &session.config;
        let Some(kind) = kind else {
            return Ok(FetchTree {
                root: config.snapshot.clone(),
                owned: false,
            });
        };
        let dest = config.scratch.join(format!("{name}-tree"));
        let _ = std::fs::remove_dir_all(&dest);
        match write(kind, &config.snapshot, &dest) {
            Ok(()) => Ok(FetchTree {
                root: dest,
                owned: true,
            }),
            Err(message) => {
                let _ = std::fs::remove_dir_all(&dest);
                Err(Failure {
                    code: FailureCode::Infrastructure,
                    message: format!("cannot write the manifests the fetch reads: {message}"),
                })
            }
        }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

impl Drop for FetchTree {
    fn drop(&mut self) {
        if self.owned {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
