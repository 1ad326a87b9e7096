//! Disk budgets: a repository that is small in git but expands to gigabytes or to a flood of
//! files is refused while it is materialized, without writing past the limit and without a
//! partial snapshot; and the cache of mirrors and snapshots is trimmed by `gc`, oldest last use
//! first, never taking what a task holds.

use std::path::Path;
use std::time::Duration;

use warden_repo::{CachePolicy, GcKind, RepoError, RepoStore, SnapshotLimits};
use warden_test_support::git_fixture::TempRepo;

use super::spec;

const MIB: u64 = 1 << 20;

/// Bytes allocated under `path`.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(path).unwrap();
    let mut total = meta.blocks() * 512;
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).unwrap() {
            total += disk_usage(&entry.unwrap().path());
        }
    }
    total
}

/// What lies in the snapshot directory of a mirror, by name.
fn snapshot_names(home: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for dir in std::fs::read_dir(home.join("snapshots")).unwrap() {
        for entry in std::fs::read_dir(dir.unwrap().path()).unwrap() {
            names.push(entry.unwrap().file_name().to_string_lossy().into_owned());
        }
    }
    names.sort();
    names
}

fn refuse(store: &RepoStore, repo: &TempRepo, rev: &str) -> String {
    let pinned = store
        .pin(&spec(&format!("{}@{rev}", repo.path().display())))
        .unwrap();
    match store.snapshot(&pinned) {
        Err(error @ RepoError::QuotaExceeded(_)) => error.to_string(),
        other => panic!("{rev}: expected a quota error, got {other:?}"),
    }
}

#[test]
fn a_disk_bomb_is_refused_while_materializing_and_leaves_nothing() {
    let repo = TempRepo::new();
    repo.write("README.md", "# small\n");
    let main = repo.commit("small");
    // 2 GiB of zeros (a few MB in git) and 100,000 files sharing one blob.
    let (zeros, many) = repo.add_disk_bombs(2 << 30, 100_000);
    let home = tempfile::tempdir().unwrap();

    // The default limits (1 GiB, 100,000 entries) already refuse the blob, before writing it.
    let store = RepoStore::open(home.path()).unwrap();
    let message = refuse(&store, &repo, "zeros");
    assert!(message.contains("quota exceeded"), "{message}");
    assert!(message.contains("zeros.bin"), "{message}");

    // Low limits keep this test's own disk use small: the flood of files stops at the limit.
    let store = store.with_snapshot_limits(SnapshotLimits {
        max_bytes: 8 * MIB,
        max_files: 1_000,
    });
    let message = refuse(&store, &repo, "many");
    assert!(message.contains("more than 1000 files"), "{message}");
    let message = refuse(&store, &repo, "zeros");
    assert!(message.contains("exceed 8388608 bytes"), "{message}");

    // Nothing partial stays, nothing is marked complete, and hardly anything was written.
    let names = snapshot_names(home.path());
    for commit in [&zeros, &many] {
        assert!(
            !names
                .iter()
                .any(|n| n.starts_with(commit.as_str()) && !n.ends_with(".lock")),
            "{names:?}"
        );
        assert!(!names.iter().any(|n| n.starts_with(".tmp-")), "{names:?}");
    }
    let written = disk_usage(&home.path().join("snapshots"));
    assert!(written < MIB, "snapshots hold {written} bytes");

    // A repository within the limits still works.
    let pinned = store
        .pin(&spec(&format!("{}@main", repo.path().display())))
        .unwrap();
    assert_eq!(pinned.commit, main);
    let snapshot = store.snapshot(&pinned).unwrap();
    assert_eq!(
        std::fs::read_to_string(snapshot.root.join("README.md")).unwrap(),
        "# small\n"
    );
}

#[test]
fn symlink_targets_and_entries_count_towards_the_limits() {
    let repo = TempRepo::new();
    repo.write("a/b/c.txt", "12345678\n");
    std::os::unix::fs::symlink("a/b/c.txt", repo.path().join("link")).unwrap();
    repo.commit("small tree");
    let home = tempfile::tempdir().unwrap();
    let text = repo.path().display().to_string();
    // Entries: a, a/b, a/b/c.txt, link = 4; bytes: 9 + 9 (the link's target) = 18.
    for (limits, fits) in [
        (
            SnapshotLimits {
                max_bytes: 18,
                max_files: 4,
            },
            true,
        ),
        (
            SnapshotLimits {
                max_bytes: 17,
                max_files: 4,
            },
            false,
        ),
        (
            SnapshotLimits {
                max_bytes: 18,
                max_files: 3,
            },
            false,
        ),
    ] {
        let _ = std::fs::remove_dir_all(home.path());
        let store = RepoStore::open(home.path())
            .unwrap()
            .with_snapshot_limits(limits);
        let pinned = store.pin(&spec(&text)).unwrap();
        let result = store.snapshot(&pinned);
        assert_eq!(result.is_ok(), fits, "{limits:?}: {result:?}");
    }
}

struct Cache {
    repo_a: TempRepo,
    repo_b: TempRepo,
    home: tempfile::TempDir,
    store: RepoStore,
}

/// Two repositories, each pinned and snapshotted once.
fn cache() -> Cache {
    let repo_a = TempRepo::new();
    repo_a.write("a.txt", &"a".repeat(100_000));
    repo_a.commit("a");
    let repo_b = TempRepo::new();
    repo_b.write("b.txt", &"b".repeat(100_000));
    repo_b.commit("b");
    let home = tempfile::tempdir().unwrap();
    let store = RepoStore::open(home.path()).unwrap();
    for repo in [&repo_a, &repo_b] {
        let pinned = store
            .pin(&spec(&repo.path().display().to_string()))
            .unwrap();
        store.snapshot(&pinned).unwrap();
    }
    Cache {
        repo_a,
        repo_b,
        home,
        store,
    }
}

fn everything() -> CachePolicy {
    CachePolicy {
        max_bytes: 0,
        keep_recent: Duration::ZERO,
    }
}

fn present(home: &Path) -> (usize, usize) {
    let mirrors = std::fs::read_dir(home.join("mirrors"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".git")
        })
        .count();
    let snapshots = snapshot_names(home)
        .iter()
        .filter(|n| !n.contains('.'))
        .count();
    (mirrors, snapshots)
}

#[test]
fn gc_evicts_unused_mirrors_and_read_only_snapshots() {
    let c = cache();
    assert_eq!(present(c.home.path()), (2, 2));
    let report = c.store.gc(&everything(), false).unwrap();
    assert_eq!(report.removed.len(), 4, "{report:?}");
    assert!(report.kept.is_empty(), "{report:?}");
    assert_eq!(report.bytes_after, 0);
    assert_eq!(report.freed_bytes, report.bytes_before);
    assert!(report.freed_bytes > 200_000, "{report:?}");
    assert_eq!(present(c.home.path()), (0, 0));
    // No snapshot is left marked complete; using the repository again rebuilds everything.
    assert!(!snapshot_names(c.home.path())
        .iter()
        .any(|n| n.ends_with(".done")));
    let pinned = c
        .store
        .pin(&spec(&c.repo_a.path().display().to_string()))
        .unwrap();
    let snapshot = c.store.snapshot(&pinned).unwrap();
    assert!(!snapshot.reused);
    assert_eq!(
        std::fs::read_to_string(snapshot.root.join("a.txt"))
            .unwrap()
            .len(),
        100_000
    );
}

#[test]
fn gc_keeps_what_a_task_holds_and_what_was_used_recently() {
    let c = cache();
    let spec_a = spec(&c.repo_a.path().display().to_string());
    let mut held = c.store.hold_mirror(&spec_a).unwrap();
    let pinned = c.store.pin(&spec_a).unwrap();
    c.store.hold_snapshot(&pinned, &mut held).unwrap();
    let report = c.store.gc(&everything(), false).unwrap();
    let kept: Vec<_> = report
        .kept
        .iter()
        .map(|e| (e.kind, e.path.clone(), e.kept))
        .collect();
    assert_eq!(kept.len(), 2, "{report:?}");
    assert!(kept.iter().all(|(_, _, why)| *why == Some("in_use")));
    assert!(kept.iter().any(|(kind, path, _)| *kind == GcKind::Snapshot
        && *path == c.store.snapshot(&pinned).unwrap().root));
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert_eq!(present(c.home.path()), (1, 1));
    // Released (the task ended, or its process died): evictable.
    drop(held);
    let report = c.store.gc(&everything(), false).unwrap();
    assert_eq!(report.removed.len(), 2, "{report:?}");
    assert_eq!(present(c.home.path()), (0, 0));

    // Recently used entries stay even over the limit.
    let c = cache();
    let recent = CachePolicy {
        max_bytes: 0,
        keep_recent: Duration::from_secs(3600),
    };
    let report = c.store.gc(&recent, false).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    assert_eq!(report.kept.len(), 4);
    assert!(report.kept.iter().all(|e| e.kept == Some("recent")));
    assert_eq!(present(c.home.path()), (2, 2));
}

#[test]
fn gc_stops_under_the_limit_and_a_dry_run_changes_nothing() {
    let c = cache();
    let files = |home: &std::path::Path| -> Vec<(std::path::PathBuf, std::time::SystemTime)> {
        let mut found = Vec::new();
        let mut dirs = vec![home.to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let meta = entry.metadata().unwrap();
                if meta.is_dir() {
                    dirs.push(entry.path());
                } else {
                    found.push((entry.path(), meta.modified().unwrap()));
                }
            }
        }
        found.sort();
        found
    };
    let untouched = files(c.home.path());
    let before = c.store.gc(&everything(), true).unwrap();
    assert!(before.dry_run);
    // Not a file made, removed or touched: the last uses gc sorts by are as they were.
    assert_eq!(
        files(c.home.path()),
        untouched,
        "a dry run changed the cache"
    );
    assert_eq!(before.removed.len(), 4);
    assert_eq!(before.freed_bytes, before.bytes_before);
    assert_eq!(
        present(c.home.path()),
        (2, 2),
        "a dry run removed something"
    );
    // A limit that the whole cache fits: nothing to do.
    let fits = CachePolicy {
        max_bytes: before.bytes_before,
        keep_recent: Duration::ZERO,
    };
    let report = c.store.gc(&fits, false).unwrap();
    assert!(report.removed.is_empty(), "{report:?}");
    // One byte less: only the least recently used entry goes.
    let oldest = before.removed[0].clone();
    let tight = CachePolicy {
        max_bytes: before.bytes_before - 1,
        keep_recent: Duration::ZERO,
    };
    let report = c.store.gc(&tight, false).unwrap();
    assert_eq!(report.removed.len(), 1, "{report:?}");
    assert_eq!(report.removed[0].path, oldest.path);
    assert!(!oldest.path.exists());
}

#[test]
fn gc_keeps_mirrors_holding_proposals() {
    let c = cache();
    let spec_b = spec(&c.repo_b.path().display().to_string());
    let pinned = c.store.pin(&spec_b).unwrap();
    let git_dir = format!("--git-dir={}", pinned.mirror.display());
    c.repo_b.git(&[
        &git_dir,
        "update-ref",
        "refs/warden/proposals/tsk_x",
        &pinned.commit,
    ]);
    let report = c.store.gc(&everything(), false).unwrap();
    assert_eq!(report.kept.len(), 1, "{report:?}");
    assert_eq!(report.kept[0].kept, Some("holds_proposals"));
    assert_eq!(report.kept[0].path, pinned.mirror);
    assert!(pinned.mirror.join("HEAD").is_file());
}

/// A refreshed repository keeps its newest snapshots (the one just pinned first); older ones
/// go unless a task holds them, and other repositories' snapshots are not touched.
#[test]
fn prune_snapshots_keeps_the_newest_and_what_is_held() {
    let c = cache();
    let source = c.repo_a.path().display().to_string();
    let mut commits = Vec::new();
    let mut last = None;
    for n in 0..4 {
        c.repo_a.write("a.txt", &format!("version {n}"));
        commits.push(c.repo_a.commit(&format!("v{n}")));
        let pinned = c.store.pin(&spec(&source)).unwrap();
        let snapshot = c.store.snapshot(&pinned).unwrap();
        // Marker times a second apart at least: the order of use, oldest first.
        let dir = snapshot.root.parent().unwrap().to_path_buf();
        let marker = std::fs::File::options()
            .write(true)
            .open(dir.join(format!("{}.done", pinned.commit)))
            .unwrap();
        marker
            .set_modified(std::time::SystemTime::now() - Duration::from_secs(100 * (10 - n)))
            .unwrap();
        last = Some(pinned);
    }
    let newest = last.unwrap();
    // The cache's own snapshot of repo_a is the oldest.
    let dir = c
        .store
        .snapshot(&newest)
        .unwrap()
        .root
        .parent()
        .unwrap()
        .to_path_buf();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".done") && !commits.iter().any(|c| name.starts_with(c.as_str())) {
            std::fs::File::options()
                .write(true)
                .open(&path)
                .unwrap()
                .set_modified(std::time::SystemTime::now() - Duration::from_secs(10_000))
                .unwrap();
        }
    }
    let (_, before) = present(c.home.path());
    assert_eq!(before, 2 + 4, "the cache's two and four more");
    let removed = c.store.prune_snapshots(&newest, 2).unwrap();
    let dir = c
        .store
        .snapshot(&newest)
        .unwrap()
        .root
        .parent()
        .unwrap()
        .to_path_buf();
    let kept: Vec<bool> = commits
        .iter()
        .map(|commit| dir.join(commit).is_dir())
        .collect();
    // The first snapshot (of the cache) and v0, v1 go; v2 and v3 (the newest) stay.
    assert_eq!(kept, [false, false, true, true], "{removed:?}");
    assert_eq!(removed.len(), 3, "{removed:?}");
    assert!(removed.iter().all(|e| e.kind == GcKind::Snapshot));
    assert!(!dir.join(format!("{}.done", commits[0])).exists());
    // repo_b's snapshot is another repository's.
    assert_eq!(present(c.home.path()), (2, 3));

    // One more: a held snapshot stays whatever `keep` says.
    c.repo_a.write("a.txt", "version 4");
    c.repo_a.commit("v4");
    let pinned = c.store.pin(&spec(&source)).unwrap();
    c.store.snapshot(&pinned).unwrap();
    let held = std::fs::File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!("{}.use", commits[2])))
        .unwrap();
    held.lock_shared().unwrap();
    let removed = c.store.prune_snapshots(&pinned, 1).unwrap();
    assert_eq!(removed.len(), 1, "{removed:?}");
    assert_eq!(removed[0].path, dir.join(&commits[3]));
    assert!(dir.join(&commits[2]).is_dir());
    assert!(dir.join(&pinned.commit).is_dir());
}

/// Regression: a `PATH@worktree` commit exists only in Warden's mirror, so evicting the mirror
/// of a task that is not finished (a queued retry, a follow-up) lost it for good. What
/// [`RepoStore::set_retained`] names stays — in `gc` and in the eviction before a snapshot is
/// written, through any clone of the store — and goes once released.
#[test]
fn gc_keeps_what_unfinished_tasks_need_even_a_work_tree_commit() {
    let c = cache();
    let path = c.repo_a.path().display().to_string();
    c.repo_a.write("uncommitted.txt", "only in the work tree\n");
    let worktree = spec(&format!("{path}@worktree"));
    let pinned = c.store.pin(&worktree).unwrap();
    c.store.snapshot(&pinned).unwrap();
    // The work tree moves on: the snapshot commit can no longer be made again from it.
    std::fs::remove_file(c.repo_a.path().join("uncommitted.txt")).unwrap();
    let again = || c.store.pin(&spec(&format!("{path}@{}", pinned.commit)));

    let mut retained = warden_repo::Retained::default();
    c.store
        .retain(&worktree, Some(&pinned.commit), &mut retained);
    c.store.set_retained(retained);
    let report = c.store.gc(&everything(), false).unwrap();
    let kept: Vec<_> = report
        .kept
        .iter()
        .filter(|e| e.kept == Some("needed_by_task"))
        .map(|e| (e.kind, e.path.clone()))
        .collect();
    let snapshot_root = c.store.snapshot(&pinned).unwrap().root;
    assert!(
        kept.contains(&(GcKind::Mirror, pinned.mirror.clone())),
        "{report:?}"
    );
    assert!(
        kept.contains(&(GcKind::Snapshot, snapshot_root)),
        "{report:?}"
    );
    assert!(pinned.mirror.join("HEAD").is_file());
    assert_eq!(again().unwrap().commit, pinned.commit);

    // The eviction a new snapshot triggers, in a clone configured with a budget, keeps it too.
    let budgeted = c.store.clone().with_cache_policy(everything());
    let other = TempRepo::new();
    other.write("c.txt", "c\n");
    other.commit("c");
    // Held as a task holds what it runs on, or the eviction would take it mid-snapshot.
    let other_spec = spec(&other.path().display().to_string());
    let mut held = budgeted.hold_mirror(&other_spec).unwrap();
    let pinned_other = budgeted.pin(&other_spec).unwrap();
    budgeted.hold_snapshot(&pinned_other, &mut held).unwrap();
    budgeted.snapshot(&pinned_other).unwrap();
    drop(held);
    assert_eq!(again().unwrap().commit, pinned.commit);

    // Released (the task finished): the mirror goes, and with it the only copy of the commit.
    c.store.set_retained(warden_repo::Retained::default());
    let report = c.store.gc(&everything(), false).unwrap();
    assert!(report.kept.is_empty(), "{report:?}");
    assert!(!pinned.mirror.exists());
    assert!(
        again().is_err(),
        "the work tree commit came back from nowhere"
    );
}

/// A finished task can still be retried or followed up on the commit it recorded
/// ([`RepoStore::retain_commit`]): a mirror holding it as a `PATH@worktree` snapshot, its only
/// home, stays (also once git packs its refs), while an ordinary commit, which the source still
/// has, keeps nothing.
#[test]
fn gc_keeps_a_mirror_whose_work_tree_commit_a_finished_task_recorded() {
    let c = cache();
    let path_a = c.repo_a.path().display().to_string();
    let path_b = c.repo_b.path().display().to_string();
    c.repo_a.write("uncommitted.txt", "only in the work tree\n");
    let worktree = spec(&format!("{path_a}@worktree"));
    let pinned = c.store.pin(&worktree).unwrap();
    std::fs::remove_file(c.repo_a.path().join("uncommitted.txt")).unwrap();
    let plain = c.store.pin(&spec(&path_b)).unwrap();

    let mut retained = warden_repo::Retained::default();
    c.store
        .retain_commit(&worktree, &pinned.commit, &mut retained);
    c.store
        .retain_commit(&spec(&path_b), &plain.commit, &mut retained);
    // Not a commit id: nothing to keep.
    c.store.retain_commit(&spec(&path_b), "main", &mut retained);
    c.store.set_retained(retained);
    for round in ["loose refs", "packed refs"] {
        let report = c.store.gc(&everything(), false).unwrap();
        let kept: Vec<_> = report
            .kept
            .iter()
            .map(|e| (e.kind, e.path.clone(), e.kept))
            .collect();
        assert_eq!(
            kept,
            vec![(
                GcKind::Mirror,
                pinned.mirror.clone(),
                Some("needed_by_task")
            )],
            "{round}: {report:?}"
        );
        assert!(!plain.mirror.exists(), "{round}");
        let again = c
            .store
            .pin(&spec(&format!("{path_a}@{}", pinned.commit)))
            .unwrap();
        assert_eq!(again.commit, pinned.commit, "{round}");
        c.store
            .git()
            .run(
                &pinned.mirror,
                &[
                    &format!("--git-dir={}", pinned.mirror.display()),
                    "pack-refs",
                    "--all",
                ],
            )
            .unwrap();
        assert!(!pinned
            .mirror
            .join("refs/warden/worktree")
            .join(&pinned.commit)
            .exists());
    }

    // Without a task recording it, the mirror goes like any other.
    c.store.set_retained(warden_repo::Retained::default());
    let report = c.store.gc(&everything(), false).unwrap();
    assert!(report.kept.is_empty(), "{report:?}");
    assert!(!pinned.mirror.exists());
}
