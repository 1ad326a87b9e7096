//! Path confinement: turns a path the model (or any other hostile caller) gave into a real path
//! inside one checkout, or refuses. Symlinks are followed and their targets must stay inside the
//! checkout; nothing under `.git` is ever reachable.

use std::path::{Component, Path, PathBuf};

/// Why a path was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfineError {
    /// Absolute paths are refused: every path is relative to the working root.
    #[error("path {0:?} is absolute; paths are relative to the repository root")]
    Absolute(String),
    /// The path climbs above the root with `..`.
    #[error("path {0:?} leaves the repository")]
    Escapes(String),
    /// The path names `.git` or something under it.
    #[error("path {0:?} is inside .git, which is not part of the checkout")]
    GitDir(String),
    /// The path contains a NUL byte or is otherwise not a usable file name.
    #[error("path {0:?} is not a valid path")]
    Invalid(String),
    /// Nothing exists at the path.
    #[error("path {0:?} does not exist")]
    NotFound(String),
    /// A symlink on the way points outside the checkout.
    #[error("path {0:?} resolves outside the repository through a symlink")]
    SymlinkEscape(String),
}

/// Symlinks followed while resolving one path before it is refused as a loop.
const MAX_SYMLINK_HOPS: usize = 40;

/// A checkout root to resolve paths against.
///
/// Resolution walks the path one component at a time under the root and follows each symlink
/// itself (its target taken relative to the root, `..` never above it), the way
/// `openat2(RESOLVE_IN_ROOT)` would, instead of canonicalizing with `realpath`. That keeps
/// working for roots `realpath` cannot follow: an unprivileged Warden's writable view is
/// `/proc/<pid>/root/.warden-host/<id>`, a magic link into another mount namespace that
/// `realpath` turns into a path that exists nowhere. Nothing changes the tree during a
/// resolution: tool calls run one after another, and a sandboxed command's processes die with
/// it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutRoot {
    canonical: PathBuf,
}

impl CheckoutRoot {
    /// The root, canonicalized when `realpath` can; otherwise (a view root under
    /// `/proc/<pid>/root/`) the absolute directory as given, normalized lexically.
    pub fn new(root: &Path) -> std::io::Result<CheckoutRoot> {
        let canonical = match root.canonicalize() {
            Ok(path) => path,
            Err(error) => {
                let opens_as_directory = std::fs::metadata(root).is_ok_and(|m| m.is_dir());
                if !root.is_absolute() || !opens_as_directory {
                    return Err(error);
                }
                let mut normalized = PathBuf::from("/");
                for component in root.components() {
                    match component {
                        Component::Normal(name) => normalized.push(name),
                        Component::ParentDir => {
                            normalized.pop();
                        }
                        Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
                    }
                }
                normalized
            }
        };
        Ok(CheckoutRoot { canonical })
    }

    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Resolves `relative` to an existing path inside the root: the root joined with a path
    /// that has no symlink, `.` or `..` in it.
    pub fn resolve(&self, relative: &str) -> Result<PathBuf, ConfineError> {
        let lexical = lexical_relative(relative)?;
        let escape = || ConfineError::SymlinkEscape(relative.to_string());
        let missing = || ConfineError::NotFound(relative.to_string());
        let mut pending: std::collections::VecDeque<std::ffi::OsString> = lexical
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        let mut inside = PathBuf::new();
        let mut hops = 0;
        while let Some(name) = pending.pop_front() {
            if name == "." {
                continue;
            }
            if name == ".." {
                // Only a symlink's target can bring `..` here; it may not climb above the root.
                if !inside.pop() {
                    return Err(escape());
                }
                continue;
            }
            if is_git_name(&name) {
                return Err(ConfineError::GitDir(relative.to_string()));
            }
            let candidate = self.canonical.join(&inside).join(&name);
            let meta = std::fs::symlink_metadata(&candidate).map_err(|_| missing())?;
            if !meta.file_type().is_symlink() {
                inside.push(&name);
                continue;
            }
            hops += 1;
            if hops > MAX_SYMLINK_HOPS {
                return Err(missing());
            }
            let target = std::fs::read_link(&candidate).map_err(|_| missing())?;
            let target = if target.is_absolute() {
                // An absolute target counts only if it names a place under this root.
                let rest = target.strip_prefix(&self.canonical).map_err(|_| escape())?;
                inside.clear();
                rest.to_path_buf()
            } else {
                target
            };
            for component in target.components().rev() {
                match component {
                    Component::Normal(part) => pending.push_front(part.to_os_string()),
                    Component::ParentDir => pending.push_front("..".into()),
                    Component::CurDir => {}
                    Component::RootDir | Component::Prefix(_) => return Err(escape()),
                }
            }
        }
        Ok(self.canonical.join(inside))
    }

    /// The path of `canonical` relative to the root, with `/` separators (for citations).
    pub fn relative_display(&self, canonical: &Path) -> Option<String> {
        let rel = canonical.strip_prefix(&self.canonical).ok()?;
        let parts: Option<Vec<&str>> = rel.components().map(|c| c.as_os_str().to_str()).collect();
        let joined = parts?.join("/");
        Some(if joined.is_empty() {
            ".".into()
        } else {
            joined
        })
    }
}

/// Normalises a relative path lexically: `.` dropped, `..` applied, never above the root, no
/// `.git` component. An empty path or `.` is the root itself.
pub fn lexical_relative(relative: &str) -> Result<PathBuf, ConfineError> {
    if relative.contains('\0') {
        return Err(ConfineError::Invalid(relative.to_string()));
    }
    let path = Path::new(relative);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err(ConfineError::Absolute(relative.to_string()))
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(ConfineError::Escapes(relative.to_string()));
                }
            }
            Component::Normal(name) => {
                if is_git_name(name) {
                    return Err(ConfineError::GitDir(relative.to_string()));
                }
                parts.push(name);
            }
        }
    }
    Ok(parts.iter().collect())
}

#[cfg(test)]
fn is_git_component(component: Component<'_>) -> bool {
    matches!(component, Component::Normal(name) if is_git_name(name))
}

fn is_git_name(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.eq_ignore_ascii_case(".git"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn fixture() -> (tempfile::TempDir, tempfile::TempDir, CheckoutRoot) {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret.txt"), "secret").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("src/nested")).unwrap();
        std::fs::create_dir_all(root.join(".git/hooks")).unwrap();
        std::fs::write(root.join(".git/config"), "[core]").unwrap();
        std::fs::write(root.join("src/lib.rs"), "fn main() {}\n").unwrap();
        std::fs::write(root.join("src/nested/a.rs"), "a\n").unwrap();
        symlink("lib.rs", root.join("src/inside_link")).unwrap();
        symlink(outside.path().join("secret.txt"), root.join("escape_link")).unwrap();
        symlink("../../..", root.join("src/up_link")).unwrap();
        symlink(".git", root.join("gitlink")).unwrap();
        symlink("missing", root.join("dangling")).unwrap();
        let checkout = CheckoutRoot::new(root).unwrap();
        (dir, outside, checkout)
    }

    fn check(root: &CheckoutRoot, input: &str, expect: Result<&str, fn(String) -> ConfineError>) {
        let got = root.resolve(input);
        match expect {
            Ok(rel) => {
                let path = got.unwrap_or_else(|e| panic!("{input:?} refused: {e}"));
                assert_eq!(
                    root.relative_display(&path).as_deref(),
                    Some(rel),
                    "{input:?}"
                );
            }
            Err(make) => assert_eq!(got, Err(make(input.to_string())), "{input:?}"),
        }
    }

    #[test]
    fn resolves_or_refuses_each_case() {
        let (_dir, _outside, root) = fixture();
        check(&root, "src/lib.rs", Ok("src/lib.rs"));
        check(&root, "./src/../src/lib.rs", Ok("src/lib.rs"));
        check(&root, "", Ok("."));
        check(&root, ".", Ok("."));
        check(&root, "src/inside_link", Ok("src/lib.rs"));
        check(&root, "/etc/passwd", Err(ConfineError::Absolute));
        check(&root, "../secret.txt", Err(ConfineError::Escapes));
        check(&root, "src/../../x", Err(ConfineError::Escapes));
        check(&root, ".git/config", Err(ConfineError::GitDir));
        check(&root, "src/../.git/hooks", Err(ConfineError::GitDir));
        check(&root, ".GIT/config", Err(ConfineError::GitDir));
        check(&root, "gitlink/config", Err(ConfineError::GitDir));
        check(&root, "escape_link", Err(ConfineError::SymlinkEscape));
        check(
            &root,
            "src/up_link/etc/passwd",
            Err(ConfineError::SymlinkEscape),
        );
        check(&root, "missing.rs", Err(ConfineError::NotFound));
        check(&root, "dangling", Err(ConfineError::NotFound));
        check(&root, "src/\0lib.rs", Err(ConfineError::Invalid));
    }

    #[test]
    fn symlink_loops_and_climbing_targets_are_refused() {
        let (dir, _outside, root) = fixture();
        symlink("loop_b", dir.path().join("loop_a")).unwrap();
        symlink("loop_a", dir.path().join("loop_b")).unwrap();
        symlink("nested/../../src", dir.path().join("src/sideways")).unwrap();
        symlink(
            dir.path().join("src/lib.rs"),
            dir.path().join("absolute_inside"),
        )
        .unwrap();
        check(&root, "loop_a", Err(ConfineError::NotFound));
        check(&root, "src/sideways/lib.rs", Ok("src/lib.rs"));
        check(&root, "absolute_inside", Ok("src/lib.rs"));
        check(&root, "src/lib.rs/x", Err(ConfineError::NotFound));
    }

    /// A root `realpath` cannot follow (an unprivileged Warden's view under /proc/<pid>/root)
    /// is kept as given and paths still resolve inside it.
    #[test]
    fn roots_under_proc_pid_root_resolve_without_realpath() {
        let (dir, _outside, _root) = fixture();
        let through_proc = PathBuf::from(format!(
            "/proc/{}/root{}",
            std::process::id(),
            dir.path().display()
        ));
        // In this mount namespace realpath could follow the link; in a view's it cannot, so
        // build the root the way `new` falls back to.
        let root = CheckoutRoot {
            canonical: through_proc.clone(),
        };
        let resolved = root.resolve("src/inside_link").unwrap();
        assert!(resolved.starts_with(&through_proc), "{resolved:?}");
        assert_eq!(
            root.relative_display(&resolved).as_deref(),
            Some("src/lib.rs")
        );
        assert_eq!(
            root.resolve("escape_link"),
            Err(ConfineError::SymlinkEscape("escape_link".into()))
        );
        assert_eq!(
            root.resolve("src/up_link/etc"),
            Err(ConfineError::SymlinkEscape("src/up_link/etc".into()))
        );
    }

    proptest::proptest! {
        #[test]
        fn never_resolves_outside_the_root(parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("..".to_string()),
                proptest::strategy::Just(".".to_string()),
                proptest::strategy::Just(".git".to_string()),
                proptest::strategy::Just("src".to_string()),
                proptest::strategy::Just("escape_link".to_string()),
                proptest::strategy::Just("up_link".to_string()),
                proptest::strategy::Just("gitlink".to_string()),
                proptest::strategy::Just("lib.rs".to_string()),
                "[a-z./]{0,6}",
            ], 0..8)) {
            let (_dir, outside, root) = fixture();
            let joined = parts.join("/");
            if let Ok(path) = root.resolve(&joined) {
                proptest::prop_assert!(path.starts_with(root.path()), "{joined} -> {path:?}");
                proptest::prop_assert!(!path.starts_with(outside.path()));
                let rel = path.strip_prefix(root.path()).unwrap();
                proptest::prop_assert!(!rel.components().any(is_git_component), "{joined} -> {path:?}");
            }
        }
    }
}
