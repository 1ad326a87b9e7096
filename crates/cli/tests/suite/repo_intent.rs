//! `--repo` means what the person meant, and says how it was read: a directory inside a
//! repository is the whole repository (said in progress and as a notice); a pin of `HEAD` names
//! the uncommitted and untracked files it leaves out; `PATH@worktree` runs on a snapshot of the
//! work tree without touching the user's index (in-process only: the server refuses it);
//! `--publish` without a remote to push to is refused at submission, in-process and by the
//! server alike.

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;

use super::server_harness::{change_repo, Server, Token, ADMIN, ALICE};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

fn notices(result: &Value) -> Vec<String> {
    result["notices"]
        .as_array()
        .unwrap_or_else(|| panic!("no notices in {result}"))
        .iter()
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

fn mirror_git(warden: &Warden, args: &[&str]) -> String {
    let mirrors = warden.home.path().join("mirrors");
    let mirror = std::fs::read_dir(&mirrors)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "git"))
        .expect("a mirror");
    let git_dir = format!("--git-dir={}", mirror.display());
    let mut full = vec![git_dir.as_str()];
    full.extend_from_slice(args);
    TempRepo::new().git(&full)
}

#[test]
fn ask_in_a_subdirectory_uses_the_whole_repository_and_names_what_it_leaves_out() {
    let repo = change_repo();
    repo.write("docs/guide/intro.md", "# beta guide\n");
    let head = repo.commit("docs");
    repo.write("src/lib.txt", "alpha\nBETA\ngamma\n")
        .write("notes.txt", "untracked\n");
    let top = repo.path().canonicalize().unwrap();
    let name = top.file_name().unwrap().to_str().unwrap().to_string();

    let run = Warden::faux().in_dir(&repo.path().join("docs")).run(&[
        "ask",
        "--repo",
        "guide",
        "--json",
        "what does beta do?",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let inside = format!(
        "--repo {}/docs/guide is inside the repository at {}; using the whole repository",
        top.display(),
        top.display()
    );
    let dirty = format!(
        "{name}: using HEAD {}; 2 uncommitted or untracked files are not included (commit them, \
         or use --repo PATH@worktree)",
        &head[..12]
    );
    for said in [&inside, &dirty] {
        assert!(run.stderr.contains(said.as_str()), "{said}\n{}", run.stderr);
    }
    let result = run.json();
    let notices = notices(&result);
    assert_eq!(notices[..2], [inside, dirty], "{result}");
    // Citations name the repository after its top level, at HEAD.
    let evidence = &result["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["repo"], name.as_str(), "{result}");
    assert_eq!(evidence["commit"], head.as_str(), "{result}");
}

#[test]
fn run_on_the_work_tree_sees_uncommitted_edits_and_leaves_the_index_alone() {
    let repo = change_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    // The check passes only with the uncommitted edit: only the work tree has it.
    repo.write("src/lib.txt", "alpha\nBETA\ngamma\n")
        .write("notes.txt", "untracked\n");
    repo.git(&["add", "notes.txt"]);
    let index = || std::fs::read(repo.path().join(".git/index")).unwrap();
    let status = || repo.git(&["--no-optional-locks", "status", "--porcelain"]);
    let refs = || repo.git(&["for-each-ref", "--format=%(objectname) %(refname)"]);
    let before = (index(), status(), refs());

    let warden = Warden::faux().in_dir(repo.path());
    let run = warden.run(&[
        "run",
        "--repo",
        ".@worktree",
        "--json",
        "--check",
        "bash check.sh",
        "note the change",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    let result = run.json();
    assert_eq!(result["outcome"], "proposal", "{result}");
    let base = result["proposal"]["base_commit"].as_str().unwrap();
    assert_ne!(base, head, "the base is the snapshot, not HEAD");
    assert_eq!(
        mirror_git(&warden, &["rev-parse", &format!("{base}^")]),
        head
    );
    assert_eq!(
        result["proposal"]["validations"][0]["exit_code"], 0,
        "{result}"
    );
    let snapshot_notice = format!(
        "using a snapshot of the work tree, commit {} on top of HEAD {} with 2 uncommitted or \
         untracked files",
        &base[..12],
        &head[..12]
    );
    assert!(
        notices(&result)[0].contains(&snapshot_notice),
        "{snapshot_notice}\n{result}"
    );
    assert!(run.stderr.contains(&snapshot_notice), "{}", run.stderr);
    assert_eq!((index(), status(), refs()), before);
    assert_eq!(repo.git(&["rev-parse", "HEAD"]), head);
}

#[test]
fn publish_without_a_usable_remote_is_refused_before_anything_runs() {
    let repo = change_repo();
    let path = repo.path().to_str().unwrap();
    let warden = Warden::faux();
    let run = warden.run(&["run", "--repo", path, "--publish", "make beta uppercase"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    let top = repo.path().canonicalize().unwrap();
    let fix = format!("`git -C {} remote add origin URL`", top.display());
    assert!(
        run.stderr.contains("has no `origin` remote"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains(&fix), "{}", run.stderr);
    assert!(!run.stderr.contains("pinning"), "{}", run.stderr);
    assert_eq!(run.stderr.trim().lines().count(), 1, "{}", run.stderr);
    assert!(!warden.home.path().join("tasks").exists());

    // A work-tree snapshot is never published: its uncommitted files would go unreviewed.
    let run = warden.run(&[
        "run",
        "--repo",
        &format!("{path}@worktree"),
        "--publish",
        "x",
    ]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr
            .contains("cannot publish a change made on @worktree"),
        "{}",
        run.stderr
    );

    // A remote git may not push to is refused the same way.
    repo.git(&["remote", "add", "origin", "http://example.invalid/app.git"]);
    let run = warden.run(&["run", "--repo", path, "--publish", "make beta uppercase"]);
    assert_eq!(run.code, 2, "{}\n{}", run.stdout, run.stderr);
    assert!(
        run.stderr.contains("is not one Warden can push to"),
        "{}",
        run.stderr
    );
}

#[test]
fn the_server_refuses_publish_without_a_remote_and_work_tree_snapshots_at_submission() {
    let repo = change_repo();
    let warden = Warden::faux();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let change = |publish: bool| {
        json!({"kind": "change", "repo": "app", "prompt": "make beta uppercase",
               "publish": publish})
    };
    let (status, body) = server.request("POST", "/v1/tasks", Some(ALICE), Some(&change(true)));
    assert_eq!(status, 422, "{body}\n{}", server.stderr());
    let text = body.to_string();
    assert!(text.contains("has no `origin` remote"), "{text}");
    assert!(text.contains("remote add origin URL"), "{text}");
    let (_, tasks) = server.request("GET", "/v1/tasks", Some(ADMIN), None);
    assert_eq!(tasks["data"], json!([]), "{tasks}");

    // The server's checkout is the operator's: its work tree is not offered to API users.
    let worktree = json!({"kind": "question", "repo": "app@worktree", "prompt": "what changed?"});
    let (status, body) = server.request("POST", "/v1/tasks", Some(ALICE), Some(&worktree));
    assert_eq!(status, 422, "{body}");
    assert!(body.to_string().contains("works in-process only"), "{body}");

    // Without publication, or once there is a remote, the same task is accepted.
    server.submit_change(ALICE, &change(false));
    let remote = tempfile::tempdir().unwrap();
    repo.git(&["init", "-q", "--bare", remote.path().to_str().unwrap()]);
    repo.git(&["remote", "add", "origin", remote.path().to_str().unwrap()]);
    server.submit_change(ALICE, &change(true));
    server.terminate();
}

#[test]
fn a_follow_up_keeps_the_work_tree_snapshot_it_continues() {
    let repo = change_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    repo.write("notes.txt", "beta is uppercase now\n");
    let warden = Warden::faux().in_dir(repo.path());
    let first = warden.run(&["ask", "--repo", ".@worktree", "--json", "what is beta?"]);
    assert_eq!(first.code, 0, "{}\n{}", first.stdout, first.stderr);
    let first = first.json();
    let snapshot = first["answer"]["claims"][0]["evidence"][0]["commit"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(snapshot, head, "{first}");

    // The snapshot exists only in Warden's mirror; the follow-up pins it from there.
    let task = first["task_id"].as_str().unwrap();
    let again = warden.run(&["ask", "--follow-up", task, "--json", "and where is beta?"]);
    assert_eq!(again.code, 0, "{}\n{}", again.stdout, again.stderr);
    let again = again.json();
    assert_eq!(
        again["answer"]["claims"][0]["evidence"][0]["commit"],
        snapshot.as_str(),
        "{again}"
    );
}
