//! What a local `--repo` means: a directory inside a repository pins the whole repository; a
//! pin of `HEAD` says how many files of the work tree it leaves out; `PATH@worktree` pins a
//! snapshot of the work tree, a commit on top of `HEAD` that exists only in Warden's mirror,
//! without touching the user's index, `HEAD`, refs, objects or work tree.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use warden_repo::{PinnedRepo, WorkTree};
use warden_test_support::git_fixture::TempRepo;

use super::untouched::state_of;
use super::{pin_and_snapshot, spec, store, tree_of, Node};

/// Committed: `a.txt`, `run.sh`, `gone.txt`, `.gitignore` (`*.log`, `build/`), `keep.log`
/// (tracked although ignored) and `sub/dir/inner.txt`.
fn committed_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("a.txt", "alpha\n")
        .write("run.sh", "echo run\n")
        .write("gone.txt", "bye\n")
        .write(".gitignore", "*.log\nbuild/\n")
        .write("sub/dir/inner.txt", "inner\n");
    repo.commit("first");
    repo.write("keep.log", "tracked although ignored\n");
    repo.git(&["add", "-f", "keep.log"]);
    repo.git(&["commit", "-q", "-m", "keep"]);
    repo
}

/// Five changes git would show (a modification, a mode change, a deletion, an untracked file
/// and an untracked symlink to a file outside the repository), plus what must not count:
/// ignored files, an ignored directory, a nested repository and an empty directory.
fn dirty(repo: &TempRepo) {
    repo.write("a.txt", "alpha, edited\n")
        .write("new.txt", "new\n")
        .write("debug.log", "ignored\n")
        .write("build/out.bin", "ignored\n")
        .write("vendor/inner/file.txt", "nested\n");
    let run = repo.path().join("run.sh");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_file(repo.path().join("gone.txt")).unwrap();
    symlink("/etc/hostname", repo.path().join("outside")).unwrap();
    repo.git(&["init", "-q", "vendor/inner"]);
    std::fs::create_dir_all(repo.path().join("empty")).unwrap();
}

fn git_in_mirror(pinned: &PinnedRepo, args: &[&str]) -> String {
    let mirror = format!("--git-dir={}", pinned.mirror.display());
    let mut full = vec![mirror.as_str()];
    full.extend_from_slice(args);
    // Any repository works as the fixture's cwd; `--git-dir` points at the mirror.
    TempRepo::new().git(&full)
}

#[test]
fn a_directory_inside_a_repository_pins_the_whole_repository() {
    let repo = committed_repo();
    let (_home, store) = store();
    let top = repo.path().canonicalize().unwrap();
    let name = top.file_name().unwrap().to_str().unwrap().to_string();
    let inside = format!("{}/sub/dir", top.display());
    let parsed = spec(&inside);
    assert_eq!(
        parsed.within.as_deref(),
        Some(top.join("sub/dir").as_path())
    );
    let (pinned, snapshot) = pin_and_snapshot(&store, &inside);
    assert_eq!(pinned.name, name);
    assert_eq!(pinned.commit, repo.git(&["rev-parse", "HEAD"]));
    // The whole repository, not the directory: same mirror as the top level's.
    assert_eq!(
        pinned.mirror,
        store.mirror_path(&spec(top.to_str().unwrap()))
    );
    assert!(snapshot.root.join("a.txt").is_file());
    assert!(snapshot.root.join("sub/dir/inner.txt").is_file());
}

#[test]
fn a_pin_of_head_counts_the_uncommitted_and_untracked_files_it_leaves_out() {
    let repo = committed_repo();
    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    let (clean, _) = pin_and_snapshot(&store, path);
    assert_eq!(
        clean.work_tree, None,
        "a clean work tree has nothing to say"
    );

    dirty(&repo);
    let (pinned, _) = pin_and_snapshot(&store, path);
    assert_eq!(pinned.commit, repo.git(&["rev-parse", "HEAD"]));
    assert_eq!(pinned.work_tree, Some(WorkTree::Uncommitted { files: 5 }));
    // git agrees, once the nested repository (its own repository, not counted) is left out.
    let status = repo.git(&["status", "--porcelain", "--untracked-files=all"]);
    let listed: Vec<&str> = status.lines().filter(|l| !l.contains("vendor/")).collect();
    assert_eq!(listed.len(), 5, "{status}");

    // An explicit revision is what the person asked for: nothing to say about the work tree.
    let (pinned, _) = pin_and_snapshot(&store, &format!("{path}@HEAD"));
    assert_eq!(pinned.work_tree, None);
}

#[test]
fn a_work_tree_snapshot_is_a_commit_in_the_mirror_and_the_users_repository_is_untouched() {
    let repo = committed_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    dirty(&repo);
    repo.git(&["add", "new.txt"]); // a staged file too: the index must stay exactly so
    let status = || repo.git(&["--no-optional-locks", "status", "--porcelain"]);
    let status_before = status();
    let refs_before = repo.git(&["for-each-ref", "--format=%(objectname) %(refname)"]);
    let before = state_of(repo.path());
    assert!(before.contains_key(".git/index"));

    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    let (pinned, snapshot) = pin_and_snapshot(&store, &format!("{path}@worktree"));
    match &pinned.work_tree {
        Some(WorkTree::Snapshot {
            head: parent,
            files,
            skipped,
        }) => {
            assert_eq!(parent, &head);
            assert_eq!(*files, 5);
            assert!(skipped.is_empty(), "{skipped:?}");
        }
        other => panic!("not a snapshot: {other:?}"),
    }
    assert_ne!(pinned.commit, head);
    assert_eq!(
        git_in_mirror(&pinned, &["rev-parse", &format!("{}^", pinned.commit)]),
        head
    );
    let message = git_in_mirror(&pinned, &["log", "-1", "--format=%B", &pinned.commit]);
    assert!(
        message.starts_with("Warden snapshot of the work tree"),
        "{message}"
    );

    // The snapshot is the work tree as it is: raw bytes, the mode change, the symlink as a
    // symlink (never followed), no deleted, ignored or nested-repository files.
    let tree = tree_of(&snapshot.root);
    let file = |content: &str, executable: bool| Node::File {
        content: content.as_bytes().to_vec(),
        executable,
    };
    assert_eq!(tree.get("a.txt"), Some(&file("alpha, edited\n", false)));
    assert_eq!(tree.get("run.sh"), Some(&file("echo run\n", true)));
    assert_eq!(tree.get("new.txt"), Some(&file("new\n", false)));
    assert_eq!(
        tree.get("keep.log"),
        Some(&file("tracked although ignored\n", false))
    );
    assert_eq!(
        tree.get("outside"),
        Some(&Node::Symlink(Path::new("/etc/hostname").to_path_buf()))
    );
    for absent in ["gone.txt", "debug.log", "build", "vendor", "empty"] {
        assert!(!tree.contains_key(absent), "{absent} is in the snapshot");
    }

    // Nothing of the user's changed: index bytes, HEAD, refs, objects, work tree, status.
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
    assert_eq!(
        repo.git(&["for-each-ref", "--format=%(objectname) %(refname)"]),
        refs_before
    );
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
    // The snapshot's objects went into Warden's mirror, not the user's object store.
    let lookup = repo.git_with_input(&["cat-file", "--batch-check"], pinned.commit.as_bytes());
    assert_eq!(lookup, format!("{} missing", pinned.commit));

    // The same work tree on the same HEAD is the same commit, and its snapshot is reused.
    let (again, snapshot_again) = pin_and_snapshot(&store, &format!("{path}@worktree"));
    assert_eq!(again.commit, pinned.commit);
    assert!(snapshot_again.reused);
    // A follow-up names the snapshot by its id, which only the mirror holds.
    let (named, _) = pin_and_snapshot(&store, &format!("{path}@{}", pinned.commit));
    assert_eq!(named.commit, pinned.commit);
}

#[test]
fn a_clean_work_tree_snapshot_is_head_itself() {
    let repo = committed_repo();
    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    let (pinned, _) = pin_and_snapshot(&store, &format!("{path}@worktree"));
    assert_eq!(pinned.commit, repo.git(&["rev-parse", "HEAD"]));
    assert!(
        matches!(pinned.work_tree, Some(WorkTree::Snapshot { files: 0, .. })),
        "{:?}",
        pinned.work_tree
    );
}
