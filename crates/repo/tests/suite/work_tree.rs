//! What a local `--repo` means: a directory inside a repository pins the whole repository; a
//! pin of `HEAD` says how many files of the work tree it leaves out; `PATH@worktree` pins a
//! snapshot of the work tree, a commit on top of `HEAD` that exists only in Warden's mirror,
//! without touching the user's index, `HEAD`, refs, objects or work tree.

use std::fs::File;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::{Duration, SystemTime};

use warden_repo::{PinnedRepo, WorkTree};
use warden_test_support::git_fixture::TempRepo;

use super::untouched::state_of;
use super::{is_root, pin_and_snapshot, spec, store, tree_of, Node};

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

/// The notice's count uses git's index stat shortcut; a corrupt or truncated index is not used
/// and every file is hashed, with the same count.
#[test]
fn a_corrupt_or_truncated_index_falls_back_to_hashing_with_the_same_count() {
    let repo = committed_repo();
    dirty(&repo);
    let path = repo.path().to_str().unwrap();
    let index = repo.path().join(".git/index");
    let raw = std::fs::read(&index).unwrap();
    let (_home, store) = store();
    let pinned = store.pin(&spec(path)).unwrap();
    assert_eq!(pinned.work_tree, Some(WorkTree::Uncommitted { files: 5 }));

    let mut flipped = raw.clone();
    flipped[40] ^= 0xff;
    let mut garbage = b"DIRC\0\0\0\x02\xff\xff\xff\xff".to_vec();
    garbage.resize(4096, 0xa5);
    for bad in [
        raw[..raw.len() / 2].to_vec(),
        raw[..raw.len() - 1].to_vec(),
        flipped,
        garbage,
    ] {
        std::fs::write(&index, &bad).unwrap();
        let pinned = store.pin(&spec(path)).unwrap();
        assert_eq!(pinned.work_tree, Some(WorkTree::Uncommitted { files: 5 }));
    }
}

/// A file rewritten (same size) right after `git add` and `git commit` wrote the index, in the
/// same clock tick as often as not: racily clean, so it is read, and counted.
#[test]
fn a_file_rewritten_right_after_the_index_was_written_is_counted() {
    let repo = committed_repo();
    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    for round in 0..5 {
        repo.write("racy.txt", &format!("before {round}\n"));
        repo.git(&["add", "racy.txt"]);
        repo.git(&["commit", "-q", "-m", "racy"]);
        repo.write("racy.txt", &format!("after  {round}\n"));
        let pinned = store.pin(&spec(path)).unwrap();
        assert_eq!(
            pinned.work_tree,
            Some(WorkTree::Uncommitted { files: 1 }),
            "round {round}"
        );
    }
}

/// Rewrites the stat data git recorded for `name` in the version 2 SHA-1 index at `index` with
/// what `lstat` says of `file` now (as if git had hashed the file as it is now), and dates the
/// index a second after the file so the entry is not racily clean. The entry keeps its object
/// id: the index now vouches for whatever `file` holds.
fn vouch_for_current_stat(index: &Path, name: &str, file: &Path) {
    let meta = std::fs::symlink_metadata(file).unwrap();
    let mut raw = std::fs::read(index).unwrap();
    assert_eq!(&raw[..8], b"DIRC\0\0\0\x02");
    let count = u32::from_be_bytes(raw[8..12].try_into().unwrap());
    let mut at = 12;
    let mut found = None;
    for _ in 0..count {
        let name_at = at + 62;
        let len = raw[name_at..].iter().position(|&b| b == 0).unwrap();
        if &raw[name_at..name_at + len] == name.as_bytes() {
            found = Some(at);
        }
        at += (62 + len + 8) & !7;
    }
    let entry = found.unwrap_or_else(|| panic!("{name} is not in the index"));
    let words = [
        meta.ctime(),
        meta.ctime_nsec(),
        meta.mtime(),
        meta.mtime_nsec(),
        meta.dev() as i64,
        meta.ino() as i64,
    ];
    for (i, value) in words.into_iter().enumerate() {
        raw[entry + 4 * i..entry + 4 * i + 4].copy_from_slice(&(value as u32).to_be_bytes());
    }
    raw[entry + 36..entry + 40].copy_from_slice(&(meta.size() as u32).to_be_bytes());
    let body = raw.len() - 20;
    let checksum = {
        use sha1::Digest;
        sha1::Sha1::digest(&raw[..body])
    };
    raw[body..].copy_from_slice(&checksum);
    std::fs::write(index, &raw).unwrap();
    File::options()
        .write(true)
        .open(index)
        .unwrap()
        .set_modified(meta.modified().unwrap() + Duration::from_secs(1))
        .unwrap();
}

/// Sets `path`'s modification time to an hour ago.
fn backdate(path: &Path) {
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

/// Observable as any user: where the index vouches for a file (its recorded stat matches), the
/// notice takes git's word and does not read it, as `git status` does; a `PATH@worktree`
/// snapshot reads every file whatever the index says. In the main work tree and in a linked
/// worktree, whose index lives in its own git dir.
#[test]
fn the_notice_takes_the_index_at_its_word_and_a_snapshot_never_does() {
    let repo = TempRepo::new();
    repo.write("f.txt", "one\n");
    backdate(&repo.path().join("f.txt"));
    repo.commit("first");
    let place = tempfile::tempdir().unwrap();
    let linked = place.path().join("linked");
    repo.git(&[
        "worktree",
        "add",
        "-q",
        linked.to_str().unwrap(),
        "-b",
        "side",
    ]);
    let linked_index = Path::new(&repo.git(&[
        "-C",
        linked.to_str().unwrap(),
        "rev-parse",
        "--absolute-git-dir",
    ]))
    .join("index");
    assert!(linked_index.starts_with(repo.path().join(".git/worktrees")));

    let (_home, store) = store();
    for (root, index) in [
        (repo.path(), repo.path().join(".git/index")),
        (linked.as_path(), linked_index),
    ] {
        let file = root.join("f.txt");
        std::fs::write(&file, "two\n").unwrap();
        let path = root.to_str().unwrap();
        // Not vouched for (its stat changed): read, and counted.
        let pinned = store.pin(&spec(path)).unwrap();
        assert_eq!(pinned.work_tree, Some(WorkTree::Uncommitted { files: 1 }));

        vouch_for_current_stat(&index, "f.txt", &file);
        let pinned = store.pin(&spec(path)).unwrap();
        assert_eq!(
            pinned.work_tree, None,
            "{path}: the index vouches for f.txt"
        );

        let (pinned, snapshot) = pin_and_snapshot(&store, &format!("{path}@worktree"));
        assert!(
            matches!(pinned.work_tree, Some(WorkTree::Snapshot { files: 1, .. })),
            "{:?}",
            pinned.work_tree
        );
        assert_eq!(
            std::fs::read_to_string(snapshot.root.join("f.txt")).unwrap(),
            "two\n"
        );
    }
}

/// A tracked file nobody may read, whose stat the index vouches for, is not read by the
/// notice's count (so it is no error); only observable when not running as root, so as root
/// (CI) the test runs itself again as uid 65534 through `setpriv`.
#[test]
fn an_unreadable_file_the_index_vouches_for_is_not_read() {
    if is_root() {
        super::rerun_as_nobody(
            "suite::work_tree::an_unreadable_file_the_index_vouches_for_is_not_read",
        );
        return;
    }
    let repo = committed_repo();
    let secret = repo.path().join("a.txt");
    backdate(&secret);
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o000)).unwrap();
    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    // Its stat changed since git recorded it: it must be read, and cannot be.
    let pinned = store.pin(&spec(path)).unwrap();
    assert!(
        matches!(pinned.work_tree, Some(WorkTree::Unchecked { .. })),
        "{:?}",
        pinned.work_tree
    );
    vouch_for_current_stat(&repo.path().join(".git/index"), "a.txt", &secret);
    let pinned = store.pin(&spec(path)).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o644)).unwrap();
    assert_eq!(pinned.work_tree, None);
}
