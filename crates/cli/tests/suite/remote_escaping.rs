//! Model-controlled text that would steer a terminal — C1 controls (U+009B is a CSI), DEL,
//! bidi overrides — reaches stdout of `warden logs/show/tasks --server` only escaped: as
//! `\uXXXX` inside JSON (still the same JSON) and as `\u{…}` in text for people.

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::server_harness::{sample_repo, submit_answer, Server, Token, ADMIN, ALICE};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

/// A search pattern with a CSI that would clear the screen, DEL and a right-to-left override.
const HOSTILE: &str = "retry\u{9b}2J\u{7f}\u{202e}kcab";
const RAW: &[char] = &['\u{9b}', '\u{7f}', '\u{202e}'];

fn assert_no_raw(what: &str, text: &str) {
    for raw in RAW {
        assert!(!text.contains(*raw), "{what}: raw {raw:?} in:\n{text}");
    }
}

#[test]
fn journal_task_and_listing_output_escape_terminal_controls() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("search", &json!({"pattern": HOSTILE}).to_string()),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = Warden::openai(&model.url());
    let server = Server::start(&warden, TOKENS).keeping(warden);
    server.register("app", &repo);
    let client = server.client(ALICE);
    let prompt = format!("how does {HOSTILE} work?");
    let asked = client.run(&["ask", "--repo", "app", "--json", &prompt]);
    server.expect(&asked, 0);
    let id = asked.json()["task_id"].as_str().unwrap().to_string();

    // The timeline escapes what it shows.
    let timeline = client.run(&["logs", &id]);
    server.expect(&timeline, 0);
    assert_no_raw("logs", &timeline.stdout);
    // The journal: one JSON record a line, the model's pattern escaped yet equal.
    let journal = client.run(&["logs", &id, "--json"]);
    server.expect(&journal, 0);
    assert_no_raw("logs", &journal.stdout);
    assert!(
        journal.stdout.contains(r"retry\u009b2J\u007f\u202ekcab"),
        "{}",
        journal.stdout
    );
    let found = journal.stdout.lines().any(|line| {
        let record: Value = serde_json::from_str(line).unwrap();
        record.to_string().contains(HOSTILE)
    });
    assert!(found, "the pattern is not in the parsed records");

    // `show --json` and `tasks --json` (pretty JSON), `show` and `tasks` (text).
    for args in [vec!["show", id.as_str(), "--json"], vec!["tasks", "--json"]] {
        let run = client.run(&args);
        server.expect(&run, 0);
        assert_no_raw(&args.join(" "), &run.stdout);
        let value: Value = serde_json::from_str(&run.stdout).unwrap();
        assert!(value.to_string().contains(HOSTILE), "{}", run.stdout);
    }
    for args in [vec!["show", id.as_str()], vec!["tasks"]] {
        let run = client.run(&args);
        server.expect(&run, 0);
        assert_no_raw(&args.join(" "), &run.stdout);
        assert!(
            run.stdout.contains(r"retry\u{9b}2J\u{7f}\u{202e}kcab"),
            "{}",
            run.stdout
        );
    }
}
