//! Hostile repositories: config that names filter drivers, textconv, fsmonitor, hooks, ssh and
//! pack-objects commands, credential helpers and pagers, each a script that leaves a marker
//! file if it ever runs. Pinning and snapshotting (by path and by `file://` URL) must leave every
//! marker absent; a control run of ordinary git afterwards shows the traps were live.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use warden_repo::RepoError;
use warden_test_support::git_fixture::TempRepo;

use super::{pin_and_snapshot, spec, store};

const HOOKS: &[&str] = &[
    "applypatch-msg",
    "pre-applypatch",
    "post-applypatch",
    "pre-commit",
    "pre-merge-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "pre-rebase",
    "post-checkout",
    "post-merge",
    "pre-push",
    "pre-receive",
    "update",
    "proc-receive",
    "post-receive",
    "post-update",
    "reference-transaction",
    "push-to-checkout",
    "pre-auto-gc",
    "post-rewrite",
    "fsmonitor-watchman",
    "post-index-change",
];

struct Traps {
    _dir: tempfile::TempDir,
    markers: PathBuf,
}

impl Traps {
    fn new() -> Traps {
        let dir = tempfile::tempdir().unwrap();
        let markers = dir.path().join("markers");
        std::fs::create_dir_all(&markers).unwrap();
        std::fs::create_dir_all(dir.path().join("bin")).unwrap();
        Traps { _dir: dir, markers }
    }

    /// An executable script that records `name` in the markers directory when run.
    fn script(&self, name: &str) -> String {
        let path = self.markers.parent().unwrap().join("bin").join(name);
        write_script(&path, &self.markers.join(name));
        path.to_str().unwrap().to_string()
    }

    fn fired(&self) -> Vec<String> {
        let mut names: Vec<_> = std::fs::read_dir(&self.markers)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }
}

fn write_script(path: &Path, marker: &Path) {
    std::fs::write(
        path,
        format!("#!/bin/sh\ntouch '{}'\nexit 0\n", marker.display()),
    )
    .unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Content first (so the fixture's own git calls trigger nothing), traps second.
fn hostile_repo(traps: &Traps) -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        ".gitattributes",
        "* filter=evil diff=evil\n*.txt text eol=crlf ident\n",
    )
    .write("a.txt", "alpha $Id$\n")
    .write("src/lib.rs", "fn x() {}\n");
    repo.commit("content");
    repo.write("src/lib.rs", "fn y() {}\n");
    repo.commit("more");

    let hooks = traps.markers.parent().unwrap().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    for hook in HOOKS {
        write_script(
            &hooks.join(hook),
            &traps.markers.join(format!("hook-{hook}")),
        );
        let default = repo.path().join(".git/hooks").join(hook);
        write_script(
            &default,
            &traps.markers.join(format!("default-hook-{hook}")),
        );
    }
    let credential = format!("!{}", traps.script("credential-helper"));
    let ext = format!("ext::{}", traps.script("ext-transport"));
    for (key, value) in [
        ("filter.evil.smudge", traps.script("filter-smudge")),
        ("filter.evil.clean", traps.script("filter-clean")),
        ("filter.evil.process", traps.script("filter-process")),
        ("filter.evil.required", "true".to_string()),
        ("diff.evil.textconv", traps.script("diff-textconv")),
        ("diff.evil.command", traps.script("diff-command")),
        ("diff.external", traps.script("diff-external")),
        ("core.fsmonitor", traps.script("core-fsmonitor")),
        ("core.hooksPath", hooks.to_str().unwrap().to_string()),
        ("core.sshCommand", traps.script("core-sshcommand")),
        ("core.gitProxy", traps.script("core-gitproxy")),
        ("core.pager", traps.script("core-pager")),
        ("core.askPass", traps.script("core-askpass")),
        ("core.editor", traps.script("core-editor")),
        ("core.alternateRefsCommand", traps.script("alternate-refs")),
        ("credential.helper", credential),
        (
            "uploadpack.packObjectsHook",
            traps.script("packobjects-hook"),
        ),
        ("gpg.program", traps.script("gpg-program")),
        ("alias.rev-parse", format!("!{}", traps.script("alias"))),
        ("gc.auto", "1".to_string()),
        ("gc.autoDetach", "false".to_string()),
        ("maintenance.auto", "true".to_string()),
        ("protocol.allow", "always".to_string()),
        ("remote.origin.url", ext),
        (
            "remote.origin.uploadpack",
            traps.script("remote-uploadpack"),
        ),
    ] {
        repo.git(&["config", key, &value]);
    }
    repo
}

#[test]
fn pinning_and_snapshotting_a_hostile_repository_runs_none_of_its_code() {
    let traps = Traps::new();
    let repo = hostile_repo(&traps);
    assert_eq!(
        traps.fired(),
        Vec::<String>::new(),
        "the fixture itself set off a trap"
    );
    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    for text in [
        path.to_string(),
        format!("{path}@HEAD~1"),
        format!("file://{path}"),
        format!("file://{path}@main"),
    ] {
        let (pinned, snapshot) = pin_and_snapshot(&store, &text);
        assert_eq!(pinned.browse, None);
        // Bytes as committed: no smudge, no eol conversion, no ident expansion.
        assert_eq!(
            std::fs::read(snapshot.root.join("a.txt")).unwrap(),
            b"alpha $Id$\n",
            "{text}"
        );
        assert_eq!(traps.fired(), Vec::<String>::new(), "after {text}");
    }

    // Control: ordinary git in the same repository does run the repository's code, so the
    // traps above were live.
    control_git(&repo, &["status"]);
    std::fs::remove_file(repo.path().join("a.txt")).unwrap();
    control_git(&repo, &["checkout", "--", "a.txt"]);
    control_git(&repo, &["update-ref", "refs/heads/control", "HEAD"]);
    let fired = traps.fired();
    for expected in [
        "core-fsmonitor",
        "filter-process",
        "hook-reference-transaction",
    ] {
        assert!(
            fired.iter().any(|f| f == expected),
            "{expected} not in {fired:?}"
        );
    }
}

/// Warden reads a hostile work tree itself: comparing it with `HEAD` (a pin without a
/// revision) and snapshotting it (`@worktree`) run no filter, hook or other program of the
/// repository's, follow no symlink and never block on a fifo. Git's own comparison would run
/// the clean filter (`status`, `diff-files` and `ls-files --modified` re-read racily clean
/// files through it; `add` reads every new file through it), as the control shows.
#[test]
fn comparing_and_snapshotting_a_hostile_work_tree_runs_none_of_its_code() {
    let traps = Traps::new();
    let repo = hostile_repo(&traps);
    // Only a clean filter (no long-running process), so git's own reading runs exactly it.
    repo.git(&["config", "--unset", "filter.evil.process"]);
    std::fs::write(repo.path().join("a.txt"), "alpha, edited $Id$\r\n").unwrap();
    std::fs::write(repo.path().join("new.txt"), "new $Id$\n").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", repo.path().join("escape")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        repo.path().join("pipe"),
        rustix::fs::FileType::Fifo,
        rustix::fs::Mode::from_raw_mode(0o644),
        0,
    )
    .unwrap();
    assert_eq!(
        traps.fired(),
        Vec::<String>::new(),
        "the fixture set off a trap"
    );

    let (_home, store) = store();
    let path = repo.path().to_str().unwrap();
    let (pinned, _) = pin_and_snapshot(&store, path);
    assert_eq!(
        pinned.work_tree,
        Some(warden_repo::WorkTree::Uncommitted { files: 3 })
    );
    assert_eq!(traps.fired(), Vec::<String>::new(), "after the comparison");

    let (pinned, snapshot) = pin_and_snapshot(&store, &format!("{path}@worktree"));
    match &pinned.work_tree {
        Some(warden_repo::WorkTree::Snapshot { files, skipped, .. }) => {
            assert_eq!(*files, 3);
            assert_eq!(
                skipped,
                &vec![(
                    "pipe".to_string(),
                    "not a regular file or symlink".to_string()
                )]
            );
        }
        other => panic!("not a snapshot: {other:?}"),
    }
    // Raw bytes: no clean filter, no eol conversion, no ident collapsing; the symlink kept.
    assert_eq!(
        std::fs::read(snapshot.root.join("a.txt")).unwrap(),
        b"alpha, edited $Id$\r\n"
    );
    assert_eq!(
        std::fs::read(snapshot.root.join("new.txt")).unwrap(),
        b"new $Id$\n"
    );
    assert_eq!(
        std::fs::read_link(snapshot.root.join("escape")).unwrap(),
        Path::new("/etc/hostname")
    );
    assert!(!snapshot.root.join("pipe").exists());
    assert_eq!(traps.fired(), Vec::<String>::new(), "after the snapshot");

    // Control: git's own reading of the same work tree runs the repository's clean filter.
    control_git(&repo, &["add", "-A"]);
    let fired = traps.fired();
    assert!(fired.iter().any(|f| f == "filter-clean"), "{fired:?}");
}

#[test]
fn a_tree_that_contains_dot_git_is_never_materialized() {
    let repo = TempRepo::new();
    repo.write("ok.txt", "ok\n");
    repo.commit("ok");
    // Built with plumbing, since porcelain refuses `.git` paths.
    let config = repo.path().join("evil-config");
    std::fs::write(&config, "[core]\n\tfsmonitor = /bin/false\n").unwrap();
    let blob = repo.git(&["hash-object", "-w", config.to_str().unwrap()]);
    std::fs::remove_file(&config).unwrap();
    let inner = pipe_mktree(&repo, &format!("100644 blob {blob}\tconfig\n"));
    let root = pipe_mktree(&repo, &format!("040000 tree {inner}\t.git\n"));
    let commit = repo.git(&["commit-tree", &root, "-m", "evil"]);
    repo.git(&["update-ref", "refs/heads/evil", &commit]);

    let (_home, store) = store();
    let outcome = store
        .pin(&spec(&format!("{}@evil", repo.path().to_str().unwrap())))
        .and_then(|pinned| store.snapshot(&pinned));
    match outcome {
        Err(RepoError::UnsafeEntry { path, .. }) => assert_eq!(path, ".git"),
        // transfer.fsckObjects may refuse it even earlier, at fetch time.
        Err(RepoError::GitFailed { stderr, .. }) => assert!(stderr.contains(".git"), "{stderr}"),
        other => panic!("a .git tree entry was accepted: {other:?}"),
    }
}

#[allow(clippy::disallowed_methods)] // test-only: feeds `git mktree` on stdin
fn pipe_mktree(repo: &TempRepo, listing: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .args(["mktree"])
        .current_dir(repo.path())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(listing.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

/// Plain git, as a user would run it; the traps make some of these calls fail, which is fine.
#[allow(clippy::disallowed_methods)] // test-only: deliberately unhardened git
fn control_git(repo: &TempRepo, args: &[&str]) {
    let _ = std::process::Command::new("git")
        .args(args)
        .current_dir(repo.path())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
}
