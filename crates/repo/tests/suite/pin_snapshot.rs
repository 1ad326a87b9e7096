//! Pinning local repositories and `file://` URLs at various revisions, and snapshots that match
//! `git archive` exactly, are read-only, reused, safe under concurrency and verified.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use warden_repo::{BrowseBase, RepoError, Source};
use warden_test_support::git_fixture::TempRepo;

use super::{archive_of, is_root, pin_and_snapshot, spec, store, tree_of};

/// A repository with nested directories, an executable, symlinks, an empty file, odd names and a
/// submodule entry, over three commits: `v1` (annotated tag), `feature`, and `main`.
struct History {
    repo: TempRepo,
    first: String,
    feature: String,
    head: String,
}

fn history() -> History {
    let repo = TempRepo::new();
    repo.write("README.md", "# app\n")
        .write("src/lib.rs", "pub fn one() -> u32 { 1 }\n")
        .write("src/deep/er/mod.rs", "// nested\n");
    let first = repo.commit("first");
    repo.git(&["tag", "-a", "v1", "-m", "version one"]);
    repo.git(&["checkout", "-q", "-b", "feature"]);
    repo.write("src/feature.rs", "pub fn feature() {}\n");
    let feature = repo.commit("feature");
    repo.git(&["checkout", "-q", "main"]);
    repo.write("bin/run.sh", "#!/bin/sh\necho run\n")
        .write("empty.txt", "")
        .write("dir with space/ünïcode file.txt", "odd names\n")
        .write("no-newline.txt", "last line");
    let run = repo.path().join("bin/run.sh");
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("../src/lib.rs", repo.path().join("bin/lib-link")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", repo.path().join("outside-link")).unwrap();
    repo.git(&["add", "-A"]);
    let gitlink = format!("160000,{first},vendor/sub");
    repo.git(&["update-index", "--add", "--cacheinfo", &gitlink]);
    repo.git(&["commit", "-q", "-m", "main"]);
    let head = repo.git(&["rev-parse", "HEAD"]);
    History {
        repo,
        first,
        feature,
        head,
    }
}

fn path_of(repo: &TempRepo) -> String {
    repo.path().to_str().unwrap().to_string()
}

fn assert_matches_archive(h: &History, root: &Path, commit: &str) {
    let expected = archive_of(&h.repo, commit);
    let actual = tree_of(root);
    assert_eq!(
        actual.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>(),
        "file lists differ"
    );
    assert_eq!(actual, expected, "contents, exec bits or symlinks differ");
}

#[test]
fn local_head_snapshot_matches_git_archive() {
    let h = history();
    let (_home, store) = store();
    let (pinned, snapshot) = pin_and_snapshot(&store, &path_of(&h.repo));
    assert_eq!(pinned.commit, h.head);
    assert_eq!(pinned.tree, h.repo.git(&["rev-parse", "HEAD^{tree}"]));
    assert_eq!(snapshot.commit, h.head);
    assert_eq!(snapshot.tree, pinned.tree);
    assert!(!snapshot.reused);
    assert!(
        matches!(&pinned.source, Source::Path(p) if p == &h.repo.path().canonicalize().unwrap())
    );
    assert!(pinned.mirror.starts_with(store.home().join("mirrors")));
    assert!(snapshot.root.starts_with(store.home().join("snapshots")));
    assert_eq!(pinned.browse, None);
    assert_matches_archive(&h, &snapshot.root, &h.head);
    // Spot checks of what the comparison covers.
    let tree = tree_of(&snapshot.root);
    assert!(matches!(
        &tree["bin/run.sh"],
        super::Node::File {
            executable: true,
            ..
        }
    ));
    assert_eq!(tree["vendor/sub"], super::Node::Dir);
    assert_eq!(
        tree["outside-link"],
        super::Node::Symlink("/etc/passwd".into())
    );
}

#[test]
fn pins_tags_branches_and_ancestors() {
    let h = history();
    let (_home, store) = store();
    let path = path_of(&h.repo);
    for (rev, commit) in [
        ("v1", &h.first),
        ("feature", &h.feature),
        ("HEAD~1", &h.first),
        ("main", &h.head),
        (h.feature.as_str(), &h.feature),
        (&h.head[..10], &h.head),
    ] {
        let (pinned, snapshot) = pin_and_snapshot(&store, &format!("{path}@{rev}"));
        assert_eq!(&pinned.commit, commit, "{rev}");
        assert_matches_archive(&h, &snapshot.root, commit);
    }
    // Every pinned commit stays referenced in the mirror, so no later fetch or gc drops it.
    let mirror = store.mirror_path(&spec(&path));
    let git_dir = format!("--git-dir={}", mirror.display());
    let pinned = h.repo.git(&[
        &git_dir,
        "for-each-ref",
        "--format=%(refname)",
        "refs/warden/pinned/",
    ]);
    for commit in [&h.first, &h.feature, &h.head] {
        assert!(
            pinned.contains(&format!("refs/warden/pinned/{commit}")),
            "{pinned}"
        );
    }
}

#[test]
fn pins_file_urls_with_and_without_a_revision() {
    let h = history();
    let (_home, store) = store();
    let url = format!("file://{}", path_of(&h.repo));
    for (text, commit) in [
        (url.clone(), &h.head),
        (format!("{url}@v1"), &h.first),
        (format!("{url}@feature"), &h.feature),
        (format!("{url}@HEAD~1"), &h.first),
        (format!("{url}@{}", h.feature), &h.feature),
    ] {
        let (pinned, snapshot) = pin_and_snapshot(&store, &text);
        assert_eq!(&pinned.commit, commit, "{text}");
        assert_eq!(pinned.source, Source::Url(url.clone()));
        assert_matches_archive(&h, &snapshot.root, commit);
    }
}

#[test]
fn a_commit_reachable_only_from_a_remote_tracking_ref_is_fetched_by_id() {
    let h = history();
    h.repo.git(&["checkout", "-q", "--detach", "HEAD"]);
    h.repo.write("detached.txt", "only here\n");
    let detached = h.repo.commit("detached");
    h.repo
        .git(&["update-ref", "refs/remotes/origin/topic", &detached]);
    h.repo.git(&["checkout", "-q", "main"]);
    let (_home, store) = store();
    let (pinned, snapshot) =
        pin_and_snapshot(&store, &format!("{}@origin/topic", path_of(&h.repo)));
    assert_eq!(pinned.commit, detached);
    assert_matches_archive(&h, &snapshot.root, &detached);
    // From a URL, a full id no fetched ref reaches is fetched by id.
    let url = format!("file://{}@{detached}", path_of(&h.repo));
    let (pinned, _) = pin_and_snapshot(&store, &url);
    assert_eq!(pinned.commit, detached);
}

#[test]
fn an_unknown_revision_is_reported_as_such() {
    let h = history();
    let (_home, store) = store();
    for text in [
        format!("{}@nope", path_of(&h.repo)),
        format!("file://{}@nope", path_of(&h.repo)),
    ] {
        let err = store.pin(&spec(&text)).unwrap_err();
        assert!(
            matches!(&err, RepoError::RevisionNotFound { rev, .. } if rev == "nope"),
            "{text}: {err}"
        );
    }
}

#[test]
fn browse_style_comes_from_origin_or_the_url() {
    let h = history();
    h.repo.git(&[
        "remote",
        "add",
        "origin",
        "https://tok:secret@github.com/acme/app.git",
    ]);
    let (_home, store) = store();
    let pinned = store.pin(&spec(&path_of(&h.repo))).unwrap();
    assert_eq!(
        pinned.browse,
        Some(BrowseBase::GitHub {
            base: "https://github.com/acme/app".into()
        })
    );
}

#[test]
fn snapshots_are_read_only() {
    let h = history();
    let (_home, store) = store();
    let (_, snapshot) = pin_and_snapshot(&store, &path_of(&h.repo));
    let mode = |rel: &str| {
        std::fs::metadata(snapshot.root.join(rel))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode(""), 0o555);
    assert_eq!(mode("src"), 0o555);
    assert_eq!(mode("vendor/sub"), 0o555);
    assert_eq!(mode("README.md"), 0o444);
    assert_eq!(mode("empty.txt"), 0o444);
    assert_eq!(mode("bin/run.sh"), 0o555);
    if !is_root() {
        // Root bypasses permission bits; for everyone else writes must fail.
        let err = std::fs::write(snapshot.root.join("README.md"), "x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
        let err = std::fs::write(snapshot.root.join("new.txt"), "x").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::PermissionDenied);
    }
}

#[test]
fn a_second_snapshot_is_reused() {
    let h = history();
    let (home, store) = store();
    let (pinned, first) = pin_and_snapshot(&store, &path_of(&h.repo));
    assert!(!first.reused);
    let second = store.snapshot(&pinned).unwrap();
    assert!(second.reused);
    assert_eq!(second.root, first.root);
    // Another store on the same home (another process, later) reuses it too.
    let again = warden_repo::RepoStore::open(home.path()).unwrap();
    assert!(again.snapshot(&pinned).unwrap().reused);
}

#[test]
fn an_interrupted_snapshot_is_rebuilt_not_reused() {
    let h = history();
    let (_home, store) = store();
    let (pinned, first) = pin_and_snapshot(&store, &path_of(&h.repo));
    // A crash after the rename but before the marker: no marker means not complete.
    let marker = first.root.with_file_name(format!("{}.done", pinned.commit));
    std::fs::remove_file(&marker).unwrap();
    let rebuilt = store.snapshot(&pinned).unwrap();
    assert!(!rebuilt.reused);
    assert_matches_archive(&h, &rebuilt.root, &h.head);
}

#[test]
fn concurrent_snapshots_of_one_commit_agree() {
    let h = history();
    let (home, store) = store();
    let pinned = store.pin(&spec(&path_of(&h.repo))).unwrap();
    let results: Vec<_> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let pinned = pinned.clone();
                let home = home.path().to_path_buf();
                scope.spawn(move || {
                    warden_repo::RepoStore::open(&home)
                        .unwrap()
                        .snapshot(&pinned)
                        .unwrap()
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    assert_eq!(results.iter().filter(|s| !s.reused).count(), 1);
    assert!(results.iter().all(|s| s.root == results[0].root));
    assert_matches_archive(&h, &results[0].root, &h.head);
}

#[test]
fn a_corrupt_object_in_the_mirror_is_detected() {
    let repo = TempRepo::new();
    repo.write("a.txt", "alpha\n").write("b.txt", "bravo\n");
    repo.commit("two files");
    let a = repo.git(&["rev-parse", "HEAD:a.txt"]);
    let b = repo.git(&["rev-parse", "HEAD:b.txt"]);
    let (_home, store) = store();
    let pinned = store.pin(&spec(&path_of(&repo))).unwrap();
    // Explode the fetched pack into loose objects, then make `a`'s file hold `b`'s object: a
    // well-formed object with the wrong id, as disk corruption or tampering could leave.
    explode_packs(&pinned.mirror);
    let loose = |id: &str| pinned.mirror.join("objects").join(&id[..2]).join(&id[2..]);
    assert!(loose(&a).is_file(), "expected loose objects in the mirror");
    std::fs::set_permissions(loose(&a), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::copy(loose(&b), loose(&a)).unwrap();
    let err = store.snapshot(&pinned).unwrap_err();
    assert!(matches!(err, RepoError::Corrupt(_)), "{err}");
    assert!(
        err.to_string().contains(&format!("blob {a} hashes to {b}")),
        "{err}"
    );
    // Nothing half-written is left to be mistaken for a snapshot.
    let snapshots = store.home().join("snapshots");
    let leftovers: Vec<_> = walk_names(&snapshots);
    assert!(
        leftovers
            .iter()
            .all(|n| n.ends_with(".lock") || !n.contains(&pinned.commit)),
        "{leftovers:?}"
    );
}

#[allow(clippy::disallowed_methods)] // test-only: rearranges a mirror's object storage
fn explode_packs(git_dir: &Path) {
    let pack_dir = git_dir.join("objects/pack");
    let aside = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&pack_dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::rename(&path, aside.path().join(path.file_name().unwrap())).unwrap();
    }
    for entry in std::fs::read_dir(aside.path()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "pack") {
            let status = std::process::Command::new("git")
                .arg(format!("--git-dir={}", git_dir.display()))
                .args(["unpack-objects", "-q"])
                .stdin(std::fs::File::open(&path).unwrap())
                .status()
                .unwrap();
            assert!(status.success());
        }
    }
}

fn walk_names(dir: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        names.push(entry.file_name().to_string_lossy().into_owned());
        if entry.file_type().unwrap().is_dir() {
            names.extend(walk_names(&entry.path()));
        }
    }
    names
}

/// A repository in SHA-256 object format (built by hand: the fixture makes SHA-1 ones).
fn sha256_repo() -> TempRepo {
    let repo = TempRepo::new();
    std::fs::remove_dir_all(repo.path().join(".git")).unwrap();
    repo.git(&["init", "-q", "--object-format=sha256", "-b", "main"]);
    repo.git(&["config", "user.name", "Warden Test"]);
    repo.git(&["config", "user.email", "test@warden.invalid"]);
    repo.git(&["config", "commit.gpgsign", "false"]);
    repo.write("src/lib.rs", "fn sha256() {}\n")
        .write("README", "two\n");
    repo.commit("sha256");
    repo
}

#[test]
fn sha256_repositories_are_pinned_and_verified() {
    let repo = sha256_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    assert_eq!(head.len(), 64);
    let (_home, store) = store();
    for text in [path_of(&repo), format!("file://{}", path_of(&repo))] {
        let (pinned, snapshot) = pin_and_snapshot(&store, &text);
        assert_eq!(pinned.commit, head, "{text}");
        assert_eq!(pinned.tree.len(), 64);
        assert_eq!(
            std::fs::read_to_string(snapshot.root.join("src/lib.rs")).unwrap(),
            "fn sha256() {}\n"
        );
    }
}

#[test]
fn updates_reach_an_existing_mirror() {
    let h = history();
    let (_home, store) = store();
    let url = format!("file://{}", path_of(&h.repo));
    let before = store.pin(&spec(&url)).unwrap();
    h.repo.write("later.txt", "later\n");
    let later = h.repo.commit("later");
    let after = store.pin(&spec(&url)).unwrap();
    assert_eq!(after.mirror, before.mirror);
    assert_eq!(after.commit, later);
    let snapshot = store.snapshot(&after).unwrap();
    assert_matches_archive(&h, &snapshot.root, &later);
}

/// A fetch reports its progress, a line per phase (and about one a second within it), as the
/// local git writes it; nothing the remote says (`remote:` lines) is passed on.
#[test]
fn a_fetch_reports_its_progress_and_nothing_the_remote_says() {
    let h = history();
    // Enough objects that git reports receiving them.
    for n in 0..200 {
        h.repo
            .write(&format!("bulk/{n}.txt"), &format!("file {n}\n").repeat(50));
    }
    h.repo.commit("bulk");
    let (_home, store) = store();
    let lines = std::sync::Mutex::new(Vec::<String>::new());
    let url = format!("file://{}", path_of(&h.repo));
    store
        .pin_with_progress(&spec(&url), &|line| {
            lines.lock().unwrap().push(line.to_string())
        })
        .unwrap();
    let lines = lines.into_inner().unwrap();
    assert!(
        lines.iter().any(|l| l.starts_with("Receiving objects:")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.starts_with("remote:")), "{lines:?}");
    // Throttled: a phase is not reported once per object.
    assert!(lines.len() < 20, "{lines:?}");
    // The same commit again needs no fetch, and so reports nothing.
    let again = std::sync::Mutex::new(0);
    let head = h.repo.git(&["rev-parse", "HEAD"]);
    store
        .pin_with_progress(&spec(&format!("{url}@{head}")), &|_| {
            *again.lock().unwrap() += 1
        })
        .unwrap();
    assert_eq!(again.into_inner().unwrap(), 0);
}
