//! Stepping the wall clock of a running `warden` (NTP, a VM resume, an operator): durations and
//! budgets are measured on the monotonic clock, so a step neither fails a task nor stretches its
//! budget, and a step forward does not get the leases of live runs (wall-clock times in the
//! store) re-queued before their runs renew them. The process runs under libfaketime with its
//! wall clock read from a file the test rewrites (`FAKETIME_DONT_FAKE_MONOTONIC=1`: the
//! monotonic clock stays real).
//!
//! Skipped (saying so) when libfaketime is not installed, unless `WARDEN_TEST_REQUIRE` lists
//! `faketime`, where that fails them (`.ci/run` installs Debian's `libfaketime`).

use super::server_harness::{Server, Token, ADMIN};
use super::support::Warden;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, Reply, ScriptedModelServer};
use warden_test_support::postgres::required;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];

/// libfaketime's path (Debian's `libfaketime`, under the machine's multiarch directory), or
/// `None` (said on stderr) when it is missing and not required.
fn libfaketime() -> Option<PathBuf> {
    let found = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
        .find(|path| path.is_file());
    if found.is_none() {
        assert!(
            !required("faketime"),
            "WARDEN_TEST_REQUIRE lists faketime but libfaketime.so.1 is missing (apt-get \
             install libfaketime)"
        );
        eprintln!("skipped: no libfaketime (WARDEN_TEST_REQUIRE=faketime makes this a failure)");
    }
    found
}

/// The wall clock of the process under test: an offset from the real time, in a file
/// libfaketime reads on every clock reading.
struct SteppedClock {
    _dir: tempfile::TempDir,
    file: PathBuf,
}

impl SteppedClock {
    fn new() -> SteppedClock {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("faketime.rc");
        let clock = SteppedClock { _dir: dir, file };
        clock.set("+0");
        clock
    }

    /// Sets the offset (`+2h`, `-1h`, `+0`): a step of the wall clock, the monotonic clock
    /// untouched.
    fn set(&self, offset: &str) {
        // Written aside and renamed, so no reading sees a half-written file.
        let partial = self.file.with_extension("partial");
        std::fs::write(&partial, format!("{offset}\n")).unwrap();
        std::fs::rename(&partial, &self.file).unwrap();
    }

    fn apply(&self, warden: Warden, library: &Path) -> Warden {
        warden
            .with("LD_PRELOAD", library.to_str().unwrap())
            .with("FAKETIME_TIMESTAMP_FILE", self.file.to_str().unwrap())
            .with("FAKETIME_NO_CACHE", "1")
            .with("FAKETIME_DONT_FAKE_MONOTONIC", "1")
    }
}

fn sample_repo() -> TempRepo {
    let repo = TempRepo::new();
    repo.write("src/lib.rs", "pub fn answer() -> u32 {\n    42\n}\n");
    repo.commit("initial");
    repo
}

fn submit() -> String {
    json!({
        "summary": "answer returns 42",
        "claims": [{"text": "it returns 42", "basis": "observed",
            "evidence": [{"path": "src/lib.rs", "start_line": 1, "end_line": 3}]}]
    })
    .to_string()
}

/// The agent runs `command` in the sandbox, then submits its answer.
fn script(command: &str) -> Vec<Reply> {
    vec![
        openai::tool_call("shell", &json!({ "command": command }).to_string()),
        openai::tool_call("submit_answer", &submit()),
    ]
}

/// Waits until the scripted server has received `count` requests.
fn wait_for_requests(server: &ScriptedModelServer, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while server.requests().len() < count {
        assert!(Instant::now() < deadline, "the model was never asked");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `warden ask` whose agent runs `command` in the sandbox and then submits, with the wall clock
/// set to `offset` once the model was first asked (the command is still running then); the
/// result JSON.
fn ask_with_a_step(config: &str, command: &str, offset: &str) -> Option<serde_json::Value> {
    let library = libfaketime()?;
    let library = library.as_path();
    let repo = sample_repo();
    let server = ScriptedModelServer::start_blocking(script(command));
    let clock = SteppedClock::new();
    let warden = clock.apply(Warden::openai(&server.url()), library);
    std::fs::write(warden.home.path().join("warden.toml"), config).unwrap();
    let child = warden
        .command(&[
            "ask",
            "--repo",
            repo.path().to_str().unwrap(),
            "--json",
            "what does answer return?",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_requests(&server, 1);
    clock.set(offset);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    Some(
        serde_json::from_str(&stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{stdout}\nstderr:\n{stderr}")),
    )
}

#[test]
fn a_wall_clock_step_forward_does_not_time_out_a_running_task() {
    // Two hours forward while a 3 s command runs: the task's 30 min budget is not spent.
    let Some(result) = ask_with_a_step("", "sleep 3; echo slept", "+2h") else {
        return;
    };
    assert_eq!(result["outcome"], "answer", "{result:#}");
    assert_eq!(result["answer"]["summary"], "answer returns 42");
}

#[test]
fn a_wall_clock_step_back_does_not_stretch_the_wall_time_budget() {
    // One hour back while a 3 s command runs under a 2 s budget: the budget is spent all the
    // same, and the task times out before asking the model again.
    let Some(result) = ask_with_a_step(
        "[limits]\nmax_wall_secs = 2\n",
        "sleep 3; echo slept",
        "-1h",
    ) else {
        return;
    };
    assert_eq!(result["outcome"], "failure", "{result:#}");
    assert_eq!(result["failure"]["code"], "timed_out", "{result:#}");
    let message = result["failure"]["message"].as_str().unwrap();
    assert!(
        message.contains("wall-time limit of 2 s reached after 3 s"),
        "{message}"
    );
}

#[test]
fn wall_clock_steps_forward_do_not_expire_the_leases_of_live_runs() {
    // Leases are wall-clock times in the store. `warden serve` with a 9 s lease (a heartbeat
    // every 3 s, a look for expired leases every 4.5 s): the wall clock jumps an hour forward
    // every 0.4 s while an 11 s command runs. Each jump makes the run's lease look expired
    // until its next heartbeat; the worker, seeing the steps, re-queues nothing until the run
    // had a lease's time to renew it, so the run is never interrupted.
    let Some(library) = libfaketime() else {
        return;
    };
    let library = library.as_path();
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(script("sleep 11; echo slept"));
    let clock = SteppedClock::new();
    let warden = clock
        .apply(Warden::openai(&model.url()), library)
        .with("WARDEN_LOG", "info");
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[serve]\nlease_secs = 9\n",
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let id = server.submit_question(ADMIN, "app", "what does answer return?");
    wait_for_requests(&model, 1);
    for hours in 1..=22 {
        clock.set(&format!("+{hours}h"));
        std::thread::sleep(Duration::from_millis(400));
    }
    let task = server.wait_terminal(ADMIN, &id);
    let (_, stderr) = server.terminate();
    assert_eq!(task["status"], "completed", "{task:#}\n{stderr}");
    assert_eq!(task["runs"], 1, "{task:#}\n{stderr}");
    assert!(stderr.contains("the wall clock was stepped"), "{stderr}");
    assert!(!stderr.contains("lease expired"), "{stderr}");
}
