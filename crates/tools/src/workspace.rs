//! The task's working root: one read-only snapshot (paths relative to its root) or several (a
//! virtual directory holding one folder per repository name). Every path a tool receives goes
//! through [`Workspace::resolve`], which splits off the repository and hands the rest to
//! `warden_repo::CheckoutRoot::resolve`, the one place paths are confined.

use std::path::{Path, PathBuf};
use warden_repo::confine::lexical_relative;
use warden_repo::{CheckoutRoot, ConfineError};

/// The repositories a task works on, as the tools see them.
#[derive(Debug)]
pub struct Workspace {
    /// Sorted by name; exactly one for a single-repository task.
    checkouts: Vec<Checkout>,
}

#[derive(Debug)]
pub(crate) struct Checkout {
    pub(crate) name: String,
    pub(crate) root: CheckoutRoot,
}

/// A path inside one checkout, confined and canonical.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The repository name.
    pub repo: String,
    /// Canonical, `/`-separated, relative to the repository root (`.` for the root itself).
    pub relative: String,
    /// The canonical path on disk.
    pub absolute: PathBuf,
}

/// Where a path lands: the virtual root of a multi-repository task, or inside a checkout.
#[derive(Debug)]
pub(crate) enum Location<'a> {
    /// The directory holding one folder per repository (multi-repository tasks only).
    WorkingRoot,
    Inside {
        checkout: &'a Checkout,
        resolved: Resolved,
    },
}

impl Workspace {
    /// `repos` are `(name, snapshot root)` pairs. With one repository paths are relative to its
    /// root; with several, the first path component names the repository.
    pub fn new(repos: Vec<(String, PathBuf)>) -> std::io::Result<Workspace> {
        let invalid =
            |message: String| std::io::Error::new(std::io::ErrorKind::InvalidInput, message);
        if repos.is_empty() {
            return Err(invalid("a workspace needs at least one repository".into()));
        }
        let multi = repos.len() > 1;
        let mut checkouts = Vec::with_capacity(repos.len());
        for (name, root) in repos {
            if multi && !is_folder_name(&name) {
                return Err(invalid(format!(
                    "repository name {name:?} cannot be a folder of the working root"
                )));
            }
            let root = CheckoutRoot::new(&root).map_err(|err| {
                std::io::Error::new(err.kind(), format!("snapshot {}: {err}", root.display()))
            })?;
            if !root.path().is_dir() {
                return Err(invalid(format!(
                    "snapshot {} is not a directory",
                    root.path().display()
                )));
            }
            checkouts.push(Checkout { name, root });
        }
        checkouts.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(pair) = checkouts
            .windows(2)
            .find(|pair| pair[0].name == pair[1].name)
        {
            return Err(invalid(format!(
                "repository name {:?} is given twice",
                pair[0].name
            )));
        }
        Ok(Workspace { checkouts })
    }

    /// Confines a path the model gave. Errors are messages meant for the model.
    pub fn resolve(&self, path: &str) -> Result<Resolved, String> {
        match self.locate(path)? {
            Location::Inside { resolved, .. } => Ok(resolved),
            Location::WorkingRoot => Err(format!(
                "path {path:?} is the working root, which holds one folder per repository ({}); \
                 name a path inside one of them",
                self.repo_list()
            )),
        }
    }

    /// How tools print a path: `relative` for a single repository, `repo/relative` otherwise.
    pub fn display_path(&self, repo: &str, relative: &str) -> String {
        let root = relative.is_empty() || relative == ".";
        match (self.is_multi_repo(), root) {
            (false, true) => ".".to_string(),
            (false, false) => relative.to_string(),
            (true, true) => repo.to_string(),
            (true, false) => format!("{repo}/{relative}"),
        }
    }

    pub(crate) fn is_multi_repo(&self) -> bool {
        self.checkouts.len() > 1
    }

    /// All checkouts, sorted by name.
    pub(crate) fn checkouts(&self) -> &[Checkout] {
        &self.checkouts
    }

    /// Like [`Workspace::resolve`], but the working root of a multi-repository task is a valid
    /// answer (list_dir and search accept it).
    pub(crate) fn locate(&self, path: &str) -> Result<Location<'_>, String> {
        let (checkout, rest) = match self.checkouts.as_slice() {
            [single] => (single, path.to_string()),
            _ => {
                // Normalise first so `app/../lib/x` names `lib`; the checkout applies the same
                // lexical rules again to the remainder.
                let lexical = lexical_relative(path).map_err(|err| confine_message(&err, path))?;
                let mut components = lexical.components();
                let Some(first) = components.next() else {
                    return Ok(Location::WorkingRoot);
                };
                let name = first.as_os_str().to_str().unwrap_or_default();
                let Some(checkout) = self.checkouts.iter().find(|c| c.name == name) else {
                    return Err(format!(
                        "path {path:?} does not start with a repository name; the working root \
                         holds one folder per repository: {}",
                        self.repo_list()
                    ));
                };
                let rest: Vec<&str> = components
                    .map(|c| c.as_os_str().to_str().unwrap_or_default())
                    .collect();
                (checkout, rest.join("/"))
            }
        };
        let absolute = checkout
            .root
            .resolve(&rest)
            .map_err(|err| confine_message(&err, path))?;
        let relative = checkout.root.relative_display(&absolute).ok_or_else(|| {
            format!("path {path:?} resolves to a file name that is not valid UTF-8")
        })?;
        Ok(Location::Inside {
            checkout,
            resolved: Resolved {
                repo: checkout.name.clone(),
                relative,
                absolute,
            },
        })
    }

    fn repo_list(&self) -> String {
        let names: Vec<&str> = self.checkouts.iter().map(|c| c.name.as_str()).collect();
        names.join(", ")
    }
}

impl Checkout {
    /// `path` (a walk entry under this checkout's canonical root) relative to the root.
    pub(crate) fn relative_of<'p>(&self, path: &'p Path) -> Option<&'p Path> {
        path.strip_prefix(self.root.path()).ok()
    }
}

/// A repository name usable as one folder of the virtual working root.
fn is_folder_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && !name.eq_ignore_ascii_case(".git")
        && !name.contains(['/', '\\', '\0'])
}

/// The model-facing message for a refused path, naming the path as the model wrote it.
fn confine_message(err: &ConfineError, path: &str) -> String {
    match err {
        ConfineError::Absolute(_) => {
            format!("path {path:?} is absolute; paths are relative to the working root")
        }
        ConfineError::Escapes(_) => format!("path {path:?} leaves the working root"),
        ConfineError::GitDir(_) => {
            format!("path {path:?} is inside .git, which is not part of the checkout")
        }
        ConfineError::Invalid(_) => format!("path {path:?} is not a valid path"),
        ConfineError::NotFound(_) => {
            format!("path {path:?} does not exist; use list_dir or search to find files")
        }
        ConfineError::SymlinkEscape(_) => {
            format!("path {path:?} resolves outside the repository through a symlink")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names_must_be_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        for bad in ["", ".", "..", ".GIT", "a/b", "a\\b"] {
            let repos = vec![(bad.to_string(), root.clone()), ("ok".into(), root.clone())];
            assert!(Workspace::new(repos).is_err(), "{bad:?}");
        }
        let twice = vec![
            ("a".to_string(), root.clone()),
            ("a".to_string(), root.clone()),
        ];
        assert!(Workspace::new(twice).is_err());
        assert!(Workspace::new(Vec::new()).is_err());
        // A single repository's name never becomes a path component, so anything goes.
        assert!(Workspace::new(vec![(".".to_string(), root)]).is_ok());
    }

    #[test]
    fn display_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        let single = Workspace::new(vec![("app".into(), root.clone())]).unwrap();
        assert_eq!(single.display_path("app", "src/a.rs"), "src/a.rs");
        assert_eq!(single.display_path("app", "."), ".");
        let multi = Workspace::new(vec![("b".into(), root.clone()), ("a".into(), root)]).unwrap();
        assert_eq!(multi.display_path("a", "src/a.rs"), "a/src/a.rs");
        assert_eq!(multi.display_path("a", "."), "a");
        let names: Vec<&str> = multi.checkouts().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
    }
}
