//! Shared helpers for the repository tests: a store per test, spec parsing, and a comparable
//! picture of a directory tree (kinds, contents, exec bits, symlink targets).

mod hostile;
mod pin_snapshot;
mod quota;
mod untouched;
mod work_tree;

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use warden_repo::{PinnedRepo, RepoSpec, RepoStore, Snapshot};
use warden_test_support::git_fixture::TempRepo;

/// A store under a fresh `WARDEN_HOME`.
pub fn store() -> (tempfile::TempDir, RepoStore) {
    let home = tempfile::tempdir().unwrap();
    let store = RepoStore::open(home.path()).unwrap();
    (home, store)
}

pub fn spec(text: &str) -> RepoSpec {
    RepoSpec::parse(text, Path::new("/")).unwrap_or_else(|e| panic!("{text}: {e}"))
}

pub fn pin_and_snapshot(store: &RepoStore, text: &str) -> (PinnedRepo, Snapshot) {
    let pinned = store
        .pin(&spec(text))
        .unwrap_or_else(|e| panic!("pin {text}: {e}"));
    let snapshot = store
        .snapshot(&pinned)
        .unwrap_or_else(|e| panic!("snapshot {text}: {e}"));
    (pinned, snapshot)
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Node {
    Dir,
    File { content: Vec<u8>, executable: bool },
    Symlink(PathBuf),
}

/// Every entry under `root` by relative path, symlinks not followed.
pub fn tree_of(root: &Path) -> BTreeMap<String, Node> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Node>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let kind = entry.file_type().unwrap();
            if kind.is_symlink() {
                out.insert(rel, Node::Symlink(std::fs::read_link(&path).unwrap()));
            } else if kind.is_dir() {
                out.insert(rel, Node::Dir);
                walk(root, &path, out);
            } else {
                let mode = entry.metadata().unwrap().permissions().mode();
                out.insert(
                    rel,
                    Node::File {
                        content: std::fs::read(&path).unwrap(),
                        executable: mode & 0o100 != 0,
                    },
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// `git archive <commit> | tar -x` of `repo`, as a tree picture.
#[allow(clippy::disallowed_methods)] // test-only: `tar` is the reference being compared against
pub fn archive_of(repo: &TempRepo, commit: &str) -> BTreeMap<String, Node> {
    let dir = tempfile::tempdir().unwrap();
    let tar = dir.path().join("a.tar");
    repo.git(&[
        "archive",
        "--format=tar",
        "-o",
        tar.to_str().unwrap(),
        commit,
    ]);
    let out = dir.path().join("out");
    std::fs::create_dir(&out).unwrap();
    let status = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&tar)
        .arg("-C")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    tree_of(&out)
}

/// Whether the tests run as root, which bypasses permission bits.
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid() == 0
}

/// Runs the test named `exact` of this binary again as uid/gid 65534 (`setpriv`, so the caller
/// must be root) and fails unless it ran and passed there. Its temporary files are its own (it
/// creates them under the world-writable temporary directory as that user).
pub fn rerun_as_nobody(exact: &str) {
    let exe = std::env::current_exe().unwrap();
    // The tests re-execute their own binary; this is not product code.
    #[allow(clippy::disallowed_methods)]
    let output = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args([exact, "--exact", "--nocapture", "--test-threads=1"])
        // Somewhere uid 65534 may be (the crate directory may not be readable to it).
        .current_dir("/")
        .env("RUST_BACKTRACE", "1")
        .output()
        .expect("setpriv runs (util-linux)");
    let log = format!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "{exact} as uid 65534 failed:\n{log}"
    );
    assert!(
        log.contains("test result: ok. 1 passed"),
        "{exact} did not run as uid 65534:\n{log}"
    );
}
