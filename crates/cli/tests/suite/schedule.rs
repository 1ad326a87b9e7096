//! `[[schedules]]` on the real `warden serve`: an every-minute schedule of a registered
//! repository submits a maintain task of the schedule's own (no client asks for it), and a
//! schedule that is never due stops the server at start, naming the entry.

use std::time::{Duration, Instant};

use serde_json::Value;
use warden_test_support::git_fixture::TempRepo;

use super::server_harness::{Server, ADMIN};
use super::support::Warden;

/// A Cargo project without dependencies.
fn cargo_project() -> TempRepo {
    let repo = TempRepo::new();
    repo.write(
        "Cargo.toml",
        "[package]\nname = \"app\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
    );
    repo.write(
        "Cargo.lock",
        "version = 4\n\n[[package]]\nname = \"app\"\nversion = \"0.1.0\"\n",
    );
    repo.write("src/lib.rs", "pub fn one() -> u32 {\n    1\n}\n");
    repo.commit("app");
    repo
}

#[test]
fn an_every_minute_schedule_submits_a_maintain_task_on_serve() {
    let repo = cargo_project();
    let warden = Warden::faux().with("WARDEN_LOG", "info");
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[[schedules]]\nrepo = \"app\"\ncron = \"* * * * *\"\npublish = false\n",
    )
    .unwrap();
    let server = Server::start(&warden, &[("root", "admin", ADMIN)]);
    server.register("app", &repo);
    // Due at the next minute's start at the latest.
    let deadline = Instant::now() + Duration::from_secs(90);
    let task = loop {
        let listing = server.get(ADMIN, "/v1/tasks");
        let found = listing["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["owner"] == "warden:schedule")
            .cloned();
        if let Some(task) = found {
            break task;
        }
        assert!(
            Instant::now() < deadline,
            "no scheduled task: {listing}\n{}",
            server.stderr()
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    assert_eq!(task["kind"], "maintain", "{task}");
    assert_eq!(task["repos"][0]["name"], "app", "{task}");
    assert!(
        task["prompt"]
            .as_str()
            .unwrap()
            .starts_with("maintain dependencies (select: all"),
        "{task}"
    );
    let line = server.log_line("scheduled maintenance submitted");
    assert!(line.contains("repo=app"), "{line}");
    // The refresh (on by default) fetched the repository and wrote its snapshot.
    server.log_line("repository refreshed");
    let snapshots = warden.home.path().join("snapshots");
    assert!(
        std::fs::read_dir(&snapshots).is_ok_and(|mut d| d.next().is_some()),
        "{}",
        server.stderr()
    );
    let _: Value = server.task(ADMIN, task["id"].as_str().unwrap());
}

#[test]
fn a_schedule_that_is_never_due_stops_the_server_at_start() {
    let warden = Warden::faux();
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[[schedules]]\nrepo = \"app\"\ncron = \"0 0 30 2 *\"\n",
    )
    .unwrap();
    let (code, stderr) = match Server::try_start(&warden, &[("root", "admin", ADMIN)]) {
        Ok(_) => panic!("warden serve started with a never-due schedule"),
        Err(stopped) => stopped,
    };
    assert_ne!(code, Some(0), "{stderr}");
    assert!(stderr.contains("schedules[0] (repo \"app\")"), "{stderr}");
    assert!(stderr.contains("never due"), "{stderr}");
}
