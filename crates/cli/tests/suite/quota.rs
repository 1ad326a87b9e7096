//! Disk budgets end to end: a repository whose snapshot would pass `[storage]` limits fails the
//! task with `quota_exceeded` in the result; a sandbox command that fills its writable space sees
//! `ENOSPC` as its output (data for the model, not a failure); `warden gc` evicts unused mirrors
//! and snapshots, keeps what a task holds and what a finished task's follow-up needs, and
//! changes nothing on `--dry-run`.

use super::support::Warden;
use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

fn small_repo(text: &str) -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", text);
    repo.commit("small");
    repo
}

fn with_config(warden: Warden, toml: &str) -> Warden {
    std::fs::write(warden.home.path().join("warden.toml"), toml).unwrap();
    warden
}

/// The completed snapshots under `home` (directories named by commit).
fn snapshots(home: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(dirs) = std::fs::read_dir(home.join("snapshots")) {
        for dir in dirs {
            for entry in std::fs::read_dir(dir.unwrap().path()).unwrap() {
                let name = entry.unwrap().file_name().to_string_lossy().into_owned();
                if name.ends_with(".done") {
                    found.push(name);
                }
            }
        }
    }
    found
}

#[test]
fn a_snapshot_past_its_limits_fails_the_task_with_quota_exceeded() {
    let repo = small_repo("pub fn one() -> u32 { 1 }\n");
    let (_, _) = repo.add_disk_bombs(64 << 20, 2_000);
    let warden = with_config(
        Warden::faux(),
        "[storage]\nsnapshot_max_mib = 16\nsnapshot_max_files = 1000\n",
    );
    for (rev, names) in [
        ("zeros", "exceed 16777216 bytes"),
        ("many", "more than 1000 files"),
    ] {
        let run = warden.run(&[
            "ask",
            "--repo",
            &format!("{}@{rev}", repo.path().display()),
            "--json",
            "what is in here?",
        ]);
        assert_eq!(run.code, 1, "{rev}: {}\n{}", run.stdout, run.stderr);
        let result = run.json();
        assert_eq!(result["outcome"], "failure", "{result}");
        assert_eq!(result["failure"]["code"], "quota_exceeded", "{result}");
        let message = result["failure"]["message"].as_str().unwrap();
        assert!(message.contains(names), "{message}");
        assert!(message.contains("snapshot_max_mib"), "{message}");
        assert!(run.stderr.contains("failed"), "{}", run.stderr);
    }
    assert!(snapshots(warden.home.path()).is_empty());
    // The repository's ordinary commit is within the limits and answers.
    let run = warden.run(&[
        "ask",
        "--repo",
        &format!("{}@main", repo.path().display()),
        "--json",
        "what is in here?",
    ]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(snapshots(warden.home.path()).len(), 1);
}

fn tool_result_of(request: &serde_json::Value) -> String {
    let last = request["messages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["role"], "tool", "{last}");
    last["content"].as_str().unwrap().to_string()
}

#[test]
fn a_command_filling_its_writable_space_sees_enospc_and_the_task_goes_on() {
    let repo = small_repo("pub fn one() -> u32 { 1 }\n");
    let server = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "shell",
            &json!({"command": "head -c 64M /dev/zero > /tmp/fill; echo status=$?; \
                     for i in $(seq 1 300); do : > /tmp/f$i || break; done; echo made=$i"})
            .to_string(),
        ),
        openai::tool_call(
            "submit_answer",
            &json!({
                "summary": "one returns 1",
                "claims": [{"text": "one returns 1", "basis": "observed", "evidence": [
                    {"path": "src/lib.rs", "start_line": 1, "end_line": 1}]}]
            })
            .to_string(),
        ),
    ]);
    let warden = with_config(
        Warden::openai(&server.url()),
        "[sandbox]\ndisk_mib = 8\ndisk_inodes = 100\n",
    );
    let run = warden.run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "q?",
    ]);
    assert_eq!(run.code, 0, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(run.json()["outcome"], "answer", "{}", run.stdout);
    let observed = tool_result_of(&server.requests()[1].body);
    assert!(observed.contains("No space left on device"), "{observed}");
    assert!(observed.contains("status=1"), "{observed}");
    let made: u32 = observed
        .split("made=")
        .nth(1)
        .and_then(|rest| rest.trim().lines().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{observed}"));
    assert!(
        made < 110,
        "created {made} files with 100 inodes: {observed}"
    );
}

#[test]
fn gc_evicts_unused_entries_keeps_held_ones_and_dry_runs() {
    let repo_a = small_repo("pub fn a() {}\n");
    let repo_b = small_repo("pub fn b() {}\n");
    let warden = with_config(Warden::faux(), "[storage]\nkeep_recent_mins = 0\n");
    for repo in [&repo_a, &repo_b] {
        let run = warden.run(&["ask", "--repo", repo.path().to_str().unwrap(), "q?"]);
        assert_eq!(run.code, 0, "{}", run.stderr);
    }
    assert_eq!(snapshots(warden.home.path()).len(), 2);

    // Well under the default limit: nothing to do.
    let run = warden.run(&["gc", "--json"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert_eq!(run.json()["removed"], json!([]), "{}", run.stdout);

    // A dry run to zero lists everything and removes nothing.
    let run = warden.run(&["gc", "--dry-run", "--json", "--max-bytes", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["dry_run"], true);
    assert_eq!(report["removed"].as_array().unwrap().len(), 4, "{report}");
    assert!(report["freed_bytes"].as_u64().unwrap() > 0, "{report}");
    assert_eq!(snapshots(warden.home.path()).len(), 2);

    // A task holding repository A (as a running one does): A stays, B goes.
    let store = warden_repo::RepoStore::open(warden.home.path()).unwrap();
    let spec_a =
        warden_repo::RepoSpec::parse(repo_a.path().to_str().unwrap(), std::path::Path::new("/"))
            .unwrap();
    let mut held = store.hold_mirror(&spec_a).unwrap();
    let pinned = store.pin(&spec_a).unwrap();
    store.hold_snapshot(&pinned, &mut held).unwrap();
    let run = warden.run(&["gc", "--json", "--max-bytes", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    assert_eq!(report["removed"].as_array().unwrap().len(), 2, "{report}");
    let kept = report["kept"].as_array().unwrap();
    assert_eq!(kept.len(), 2, "{report}");
    assert!(kept.iter().all(|e| e["kept"] == "in_use"), "{report}");
    assert_eq!(snapshots(warden.home.path()).len(), 1);
    drop(held);

    // Released: the human report names what went and how much was freed.
    let run = warden.run(&["gc", "--max-bytes", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(run.stdout.contains("removed snapshot"), "{}", run.stdout);
    assert!(run.stdout.contains("freed "), "{}", run.stdout);
    assert!(snapshots(warden.home.path()).is_empty());
    // And the next task simply rebuilds what it needs.
    let run = warden.run(&["ask", "--repo", repo_a.path().to_str().unwrap(), "q?"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
}

/// Regression (issue 23): `warden gc` evicted the mirror of a finished question asked on
/// `PATH@worktree` — the only home of its snapshot commit — so its follow-up (or retry) could
/// never pin it again. What a finished task can still be continued on survives `gc`: that
/// commit's mirror, and a change's proposal (which lives only in the mirror), which
/// `warden apply` and a follow-up still reach; a finished task on an ordinary commit keeps
/// nothing, the source still has it.
#[test]
fn gc_keeps_what_follow_ups_of_finished_tasks_need() {
    let asked_repo = small_repo("pub fn a() {}\n");
    let changed_repo = small_repo("pub fn b() {}\n");
    let plain_repo = small_repo("pub fn c() {}\n");
    let warden = with_config(Warden::faux(), "[storage]\nkeep_recent_mins = 0\n");
    asked_repo.write("notes.txt", "only in the work tree\n");
    let asked_path = asked_repo.path().to_str().unwrap();
    let asked = warden.run(&[
        "ask",
        "--repo",
        &format!("{asked_path}@worktree"),
        "--json",
        "what is in the notes?",
    ]);
    assert_eq!(asked.code, 0, "{}", asked.stderr);
    let question = asked.json()["task_id"].as_str().unwrap().to_string();
    let shown = warden.run(&["show", &question, "--json"]);
    let commit = shown.json()["repos"][0]["commit"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(commit, asked_repo.git(&["rev-parse", "HEAD"]));
    let changed = warden.run(&[
        "run",
        "--repo",
        changed_repo.path().to_str().unwrap(),
        "--json",
        "add a note",
    ]);
    assert_eq!(changed.code, 0, "{}", changed.stderr);
    let change = changed.json();
    assert_eq!(change["outcome"], "proposal", "{change}");
    let change_id = change["task_id"].as_str().unwrap().to_string();
    let plain = warden.run(&["ask", "--repo", plain_repo.path().to_str().unwrap(), "q?"]);
    assert_eq!(plain.code, 0, "{}", plain.stderr);
    // The work tree moves on: the question's commit can no longer be made from it.
    std::fs::remove_file(asked_repo.path().join("notes.txt")).unwrap();

    let run = warden.run(&["gc", "--json", "--max-bytes", "0"]);
    assert_eq!(run.code, 0, "{}", run.stderr);
    let report = run.json();
    let mut kept: Vec<(&str, &str)> = report["kept"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["kind"].as_str().unwrap(), e["kept"].as_str().unwrap()))
        .collect();
    kept.sort_unstable();
    assert_eq!(
        kept,
        [("mirror", "holds_proposals"), ("mirror", "needed_by_task")],
        "{report}"
    );
    // Everything else went: the plain question's mirror and every snapshot.
    let removed = report["removed"].as_array().unwrap();
    assert_eq!(
        removed.iter().filter(|e| e["kind"] == "mirror").count(),
        1,
        "{report}"
    );
    assert!(snapshots(warden.home.path()).is_empty(), "{report}");

    // The question's follow-up pins the commit its question recorded, from the mirror.
    let followed = warden.run(&["ask", "--follow-up", &question, "--json", "and then?"]);
    assert_eq!(followed.code, 0, "{}", followed.stderr);
    let follow_up = followed.json()["task_id"].as_str().unwrap().to_string();
    let shown = warden.run(&["show", &follow_up, "--json"]);
    assert_eq!(shown.json()["repos"][0]["commit"], commit.as_str());

    // The proposal is still there to apply and to continue on.
    let applied = warden.run(&["apply", &change_id, "--branch", "after-gc"]);
    assert_eq!(applied.code, 0, "{}", applied.stderr);
    assert_eq!(
        changed_repo.git(&["rev-parse", "after-gc"]),
        change["proposal"]["commit"].as_str().unwrap()
    );
    let more = warden.run(&["run", "--follow-up", &change_id, "--json", "and more"]);
    assert_eq!(more.code, 0, "{}", more.stderr);
    assert_eq!(
        more.json()["proposal"]["base_commit"],
        change["proposal"]["commit"]
    );
}
