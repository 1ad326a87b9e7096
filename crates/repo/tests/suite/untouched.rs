//! Pinning and snapshotting never write into the user's repository: its work tree, index, refs
//! and every other file under `.git` are exactly as they were, and `git status` agrees.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use warden_test_support::git_fixture::TempRepo;

use super::{pin_and_snapshot, store};

/// Every path under `root` with its kind, size, mode, mtime and content.
pub(super) fn state_of(root: &Path) -> BTreeMap<String, (u32, u64, i64, i64, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, u64, i64, i64, Vec<u8>)>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let content = if meta.is_file() {
                std::fs::read(&path).unwrap()
            } else {
                Vec::new()
            };
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.insert(
                rel,
                (
                    meta.mode(),
                    meta.size(),
                    meta.mtime(),
                    meta.mtime_nsec(),
                    content,
                ),
            );
            if meta.is_dir() {
                walk(root, &path, out);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

#[test]
fn pin_and_snapshot_leave_the_users_repository_untouched() {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "one\n")
        .write("README.md", "readme\n");
    repo.commit("first");
    repo.git(&["tag", "v1"]);
    repo.write("src/lib.rs", "two\n");
    repo.commit("second");
    // A dirty work tree: a modified file, a staged file and an untracked one.
    repo.write("src/lib.rs", "modified, unstaged\n")
        .write("staged.txt", "staged\n")
        .write("untracked.txt", "untracked\n");
    repo.git(&["add", "staged.txt"]);
    let status = || repo.git(&["--no-optional-locks", "status", "--porcelain"]);
    let status_before = status();
    let before = state_of(repo.path());
    assert!(before.contains_key(".git/index"));

    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    for text in [
        path.to_string(),
        format!("{path}@v1"),
        format!("{path}@HEAD~1"),
        format!("file://{path}"),
        format!("file://{path}@main"),
    ] {
        pin_and_snapshot(&store, &text);
    }

    let after = state_of(repo.path());
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files were added to or removed from the repository"
    );
    for (path, state) in &before {
        assert_eq!(Some(state), after.get(path), "{path} changed");
    }
    assert_eq!(status(), status_before);
}
