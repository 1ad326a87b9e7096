//! The `warden` CLI as a client of a remote `warden serve`: the real binary on both sides, the
//! scripted model server behind the server. `ask --server` prints the same result JSON as the
//! in-process path with progress on stderr; clarifications exit 3 and `answer` resumes them;
//! `tasks`, `show`, `cancel`, `logs --follow`, `repos`; Ctrl-C stops following without cancelling;
//! a wrong token and an unreachable server are clear errors.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::server_harness::{sample_repo, submit_answer, Server, Token, ADMIN, ALICE};
use super::support::{interrupt, Run, Warden};

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];

/// `warden serve` for `warden`, which lives as long as the server.
fn serve(warden: Warden) -> Server {
    Server::start(&warden, TOKENS).keeping(warden)
}

/// A search, then an answer citing what it found.
fn answering_script() -> Vec<warden_test_support::model_server::Reply> {
    vec![
        openai::tool_call(
            "search",
            &json!({"pattern": "retry_with_backoff"}).to_string(),
        ),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]
}

fn assert_code(run: &Run, code: i32) {
    assert_eq!(
        run.code, code,
        "stdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

/// The keys of an object, sorted.
fn keys(value: &Value) -> Vec<String> {
    let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    keys
}

#[test]
fn ask_with_a_server_streams_progress_and_prints_the_in_process_result() {
    let repo = sample_repo();
    let head = repo.git(&["rev-parse", "HEAD"]);
    let model = ScriptedModelServer::start_blocking(answering_script());
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);

    let client = server.client(ALICE);
    let remote = client.run(&["ask", "--repo", "app", "--json", "how does retry work?"]);
    server.expect(&remote, 0);
    let result = remote.json();
    assert_eq!(result["outcome"], "answer");
    let evidence = &result["answer"]["claims"][0]["evidence"][0];
    assert_eq!(evidence["repo"], "app");
    assert_eq!(evidence["commit"], head.as_str());
    assert_eq!(evidence["path"], "src/lib.rs");
    // Progress came live on stderr, event by event, as in-process.
    let task = result["task_id"].as_str().unwrap();
    assert!(
        remote.stderr.contains(&format!("submitted {task}")),
        "{}",
        remote.stderr
    );
    assert!(remote.stderr.contains("→ search"), "{}", remote.stderr);
    assert!(
        remote.stderr.contains("→ submit_answer"),
        "{}",
        remote.stderr
    );

    // The same question in-process gives a result of the same shape and content.
    let local_model = ScriptedModelServer::start_blocking(answering_script());
    let local = Warden::openai(&local_model.url()).run(&[
        "ask",
        "--repo",
        repo.path().to_str().unwrap(),
        "--json",
        "how does retry work?",
    ]);
    assert_code(&local, 0);
    let mut local = local.json();
    assert_eq!(keys(&result), keys(&local));
    assert_eq!(keys(&result["usage"]), keys(&local["usage"]));
    // In-process, a repository is named after its directory; on the server, as registered.
    local["answer"]["claims"][0]["evidence"][0]["repo"] = json!("app");
    assert_eq!(result["answer"]["claims"], local["answer"]["claims"]);
    assert_eq!(result["model"], local["model"]);

    // The human-readable form is the in-process one too.
    let model = ScriptedModelServer::start_blocking(answering_script());
    drop(server);
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);
    let human = server
        .client(ALICE)
        .run(&["ask", "--repo", "app", "how does retry work?"]);
    server.expect(&human, 0);
    assert!(
        human.stdout.contains("[observed] it doubles its input"),
        "{}",
        human.stdout
    );
    assert!(
        human.stdout.contains("✓ app:src/lib.rs:31-33 @"),
        "{}",
        human.stdout
    );
}

#[test]
fn tasks_show_logs_and_retry_read_the_server() {
    let repo = sample_repo();
    // The question, then its retry.
    let mut script = answering_script();
    script.extend(answering_script());
    let model = ScriptedModelServer::start_blocking(script);
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);
    let client = server.client(ALICE);
    let asked = client.run(&["ask", "--repo", "app", "--json", "how does retry work?"]);
    server.expect(&asked, 0);
    let id = asked.json()["task_id"].as_str().unwrap().to_string();

    let tasks = client.run(&["tasks", "--json"]);
    server.expect(&tasks, 0);
    let listed = tasks.json();
    assert_eq!(listed[0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed[0]["status"], "completed");
    let text = client.run(&["tasks"]);
    server.expect(&text, 0);
    assert!(text.stdout.contains(&id) && text.stdout.contains("how does retry work?"));
    // The line: id, status, kind, age, repository, outcome, cost.
    let line = text.stdout.lines().find(|l| l.starts_with(&id)).unwrap();
    let words: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(words[1..3], ["completed", "question"], "{line}");
    assert!(words[3].ends_with('s') || words[3].ends_with('m'), "{line}");
    assert_eq!(words[4..6], ["app", "answer"], "{line}");

    let show = client.run(&["show", &id, "--json"]);
    server.expect(&show, 0);
    assert_eq!(show.json()["result"], asked.json());
    let show = client.run(&["show", &id]);
    server.expect(&show, 0);
    assert!(
        show.stdout.contains("prompt: how does retry work?"),
        "{}",
        show.stdout
    );
    assert!(
        show.stdout.contains("✓ app:src/lib.rs:31-33"),
        "{}",
        show.stdout
    );

    // Following a finished task replays its events and prints its result.
    let logs = client.run(&["logs", &id, "--follow", "--json"]);
    server.expect(&logs, 0);
    assert_eq!(logs.json(), asked.json());
    assert!(logs.stderr.contains("→ search"), "{}", logs.stderr);

    // The journal as a timeline, and with --json one record a line, its hash chain verified
    // by the server.
    let timeline = client.run(&["logs", &id]);
    server.expect(&timeline, 0);
    assert!(
        timeline.stdout.contains(" · run 1\n"),
        "{}",
        timeline.stdout
    );
    assert!(
        timeline.stdout.contains("→ search ("),
        "{}",
        timeline.stdout
    );
    assert!(
        timeline.stdout.contains("run finished: answered"),
        "{}",
        timeline.stdout
    );
    let journal = client.run(&["logs", &id, "--json"]);
    server.expect(&journal, 0);
    let kinds: Vec<String> = journal
        .stdout
        .lines()
        .map(|line| {
            let record: Value = serde_json::from_str(line).unwrap();
            record["kind"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("run_started"));
    assert_eq!(kinds.last().map(String::as_str), Some("run_finished"));
    assert!(journal.stderr.contains("verified"), "{}", journal.stderr);

    // A retry is a new task, followed like the first.
    let retried = client.run(&["retry", &id, "--json"]);
    server.expect(&retried, 0);
    let again = retried.json();
    assert_eq!(again["outcome"], "answer");
    assert_ne!(again["task_id"], id.as_str());
    assert!(
        retried.stderr.contains(&format!("retrying {id} as")),
        "{}",
        retried.stderr
    );
    assert!(retried.stderr.contains("→ search"), "{}", retried.stderr);

    // An unknown task is a usage error with the server's message.
    let missing = client.run(&["show", "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"]);
    server.expect(&missing, 2);
    assert!(
        missing.stderr.contains("404 not_found"),
        "{}",
        missing.stderr
    );
}

#[test]
fn a_clarification_exits_3_and_answer_resumes_the_task() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "ask_user",
            &json!({"question": "Which retry, the HTTP one or the queue one?"}).to_string(),
        ),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);
    let client = server.client(ALICE);

    let first = client.run(&["ask", "--repo", "app", "--json", "how does retry work?"]);
    server.expect(&first, 3);
    let result = first.json();
    assert_eq!(result["outcome"], "clarification");
    assert_eq!(
        result["clarification"]["question"],
        "Which retry, the HTTP one or the queue one?"
    );
    let id = result["task_id"].as_str().unwrap().to_string();
    assert!(
        first.stderr.contains(&format!("warden answer {id}")),
        "{}",
        first.stderr
    );
    assert_eq!(server.task(ADMIN, &id)["status"], "waiting_input");

    let answered = client.run(&["answer", &id, "the HTTP one", "--json"]);
    server.expect(&answered, 0);
    let answer = answered.json();
    assert_eq!(answer["outcome"], "answer");
    // Only what happened after the answer is shown: the clarification is not replayed.
    assert!(
        !answered.stderr.contains("needs a clarification"),
        "{}",
        answered.stderr
    );
    // The model saw the conversation: the question, its clarification and the answer.
    let messages = model.requests()[1].body["messages"].to_string();
    assert!(messages.contains("how does retry work?"), "{messages}");
    assert!(messages.contains("Which retry"), "{messages}");
    assert!(messages.contains("the HTTP one"), "{messages}");
}

#[test]
fn run_with_a_server_waits_for_approval_and_reject_decides_it() {
    let repo = TempRepo::new();
    repo.write("src/lib.txt", "alpha\nbeta\ngamma\n")
        .write("check.sh", "grep -q BETA src/lib.txt\n");
    repo.commit("initial");
    // Publication needs a remote to push to; without one `publish` is refused at submission.
    repo.git(&["remote", "add", "origin", "https://example.invalid/app.git"]);
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "edit_file",
            &json!({"path": "src/lib.txt", "old": "beta", "new": "BETA"}).to_string(),
        ),
        openai::tool_call(
            "submit_change",
            &json!({"summary": "Make beta uppercase"}).to_string(),
        ),
    ]);
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);
    let client = server.client(ADMIN);
    let run = client.run(&[
        "run",
        "--repo",
        "app",
        "--check",
        "bash check.sh",
        "--publish",
        "make beta uppercase",
    ]);
    // A proposal waiting for the approval to publish it: exit 4, printed as in-process.
    server.expect(&run, 4);
    assert!(run.stdout.contains("Proposal "), "{}", run.stdout);
    assert!(run.stdout.contains("✓ bash check.sh"), "{}", run.stdout);
    assert!(run.stderr.contains("→ edit_file"), "{}", run.stderr);
    let approve_line = run
        .stdout
        .lines()
        .find(|l| l.trim_start().starts_with("warden approve "))
        .unwrap_or_else(|| panic!("no approve hint in:\n{}", run.stdout));
    let words: Vec<&str> = approve_line.split_whitespace().collect();
    let (approval, hash) = (words[2], words[4]);
    let task = run
        .stdout
        .split(|c: char| c.is_whitespace() || c == '[')
        .find(|w| w.starts_with("tsk_"))
        .unwrap()
        .to_string();
    assert_eq!(server.task(ADMIN, &task)["status"], "waiting_approval");

    // A hash that is not the approval's: refused, nothing decided.
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_ne!(hash, wrong);
    let mismatch = client.run(&["approve", approval, "--hash", &wrong]);
    server.expect(&mismatch, 2);
    assert!(mismatch.stderr.contains("409"), "{}", mismatch.stderr);

    let reject = client.run(&["reject", approval]);
    server.expect(&reject, 0);
    assert!(
        reject.stdout.contains(&format!("rejected {approval}")),
        "{}",
        reject.stdout
    );
    let (status, decided) = server.request(
        "GET",
        &format!("/v1/approvals/{approval}"),
        Some(ADMIN),
        None,
    );
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["status"], "rejected");
    // Decided once: approving now is refused.
    let late = client.run(&["approve", approval, "--hash", hash]);
    server.expect(&late, 2);
}

#[test]
fn cancel_stops_a_queued_task_on_the_server() {
    let repo = sample_repo();
    // The only worker is busy with a slow model call, so the second task stays queued.
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )
    .delayed(4_000)]);
    let warden = Warden::openai(&model.url());
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[serve]\nworkers = 1\n",
    )
    .unwrap();
    let server = serve(warden);
    server.register("app", &repo);
    let busy = server.submit_question(ALICE, "app", "slow question");
    while model.requests().is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let queued = server.submit_question(ALICE, "app", "waits its turn");
    assert_eq!(server.task(ADMIN, &queued)["status"], "queued");

    let client = server.client(ALICE);
    let cancel = client.run(&["cancel", &queued]);
    server.expect(&cancel, 0);
    assert!(cancel.stdout.contains(&queued), "{}", cancel.stdout);
    assert_eq!(server.task(ADMIN, &queued)["status"], "cancelled");
    // Following it ends at once: a task cancelled before it ran has no result, exit 1.
    let follow = client.run(&["logs", &queued, "--follow"]);
    server.expect(&follow, 1);
    // The busy one was not touched.
    let busy = client.run(&["logs", &busy, "--follow", "--json"]);
    server.expect(&busy, 0);
    assert_eq!(busy.json()["outcome"], "answer", "{}", server.stderr());
}

#[test]
fn ctrl_c_stops_following_but_not_the_task() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )
    .delayed(3_000)]);
    let server = serve(Warden::openai(&model.url()));
    server.register("app", &repo);
    let client = server.client(ALICE);
    let child = client
        .command(&["ask", "--repo", "app", "--json", "how does retry work?"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    while model.requests().is_empty() {
        std::thread::sleep(Duration::from_millis(20));
    }
    interrupt(child.id());
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(130), "{stderr}");
    assert!(output.stdout.is_empty());
    let id = stderr
        .split_whitespace()
        .find(|w| w.starts_with("tsk_"))
        .unwrap()
        .to_string();
    assert!(
        stderr.contains(&format!("warden logs {id} --follow")),
        "{stderr}"
    );
    // The task went on and can be picked up again.
    let resumed = client.run(&["logs", &id, "--follow", "--json"]);
    server.expect(&resumed, 0);
    assert_eq!(resumed.json()["task_id"], id.as_str());
}

#[test]
fn wrong_tokens_unknown_servers_and_local_paths_are_clear_errors() {
    let repo = sample_repo();
    let server = serve(Warden::faux());
    let source = repo.path().to_str().unwrap();

    // Registering needs an admin token; the server's 403 says so.
    let refused = server.client(ALICE).run(&["repos", "add", "app", source]);
    server.expect(&refused, 2);
    assert!(refused.stderr.contains("403"), "{}", refused.stderr);
    // Registering follows the server as it fetches the repository and writes its snapshot.
    let head = repo.git(&["rev-parse", "HEAD"]);
    let added = server.client(ADMIN).run(&["repos", "add", "app", source]);
    server.expect(&added, 0);
    assert!(added.stderr.contains("registered app"), "{}", added.stderr);
    assert!(
        added
            .stderr
            .contains(&format!("app is ready at {}", &head[..12])),
        "{}",
        added.stderr
    );
    assert!(added.stdout.starts_with("app  "), "{}", added.stdout);
    let shown = server.get(ADMIN, "/v1/repos/app");
    assert_eq!(shown["warm"]["state"], "ready", "{shown}");
    assert_eq!(shown["warm"]["commit"], head.as_str());
    // A repository that cannot be fetched stays registered; the command says so, exit 1.
    let not_a_repository = tempfile::tempdir().unwrap();
    let broken = server.client(ADMIN).run(&[
        "repos",
        "add",
        "broken",
        not_a_repository.path().to_str().unwrap(),
    ]);
    server.expect(&broken, 1);
    assert!(
        broken.stderr.contains("fetching broken failed"),
        "{}",
        broken.stderr
    );
    let (status, _) = server.request("GET", "/v1/repos/nothing", Some(ADMIN), None);
    assert_eq!(status, 404);
    let listed = server.client(ALICE).run(&["repos", "--json"]);
    server.expect(&listed, 0);
    assert_eq!(listed.json()[0]["name"], "app");

    // A wrong token: the server's message, a hint, exit 2 (authentication is a usage problem).
    let wrong = server
        .client("wrong-token-0123456789")
        .run(&["ask", "--repo", "app", "q?"]);
    server.expect(&wrong, 2);
    assert!(
        wrong.stderr.contains("401 unauthorized"),
        "{}",
        wrong.stderr
    );
    assert!(wrong.stderr.contains("WARDEN_TOKEN"), "{}", wrong.stderr);
    assert!(wrong.stdout.is_empty());

    // An unregistered repository: the server's 422 message.
    let unknown = server.client(ALICE).run(&["ask", "--repo", "nope", "q?"]);
    server.expect(&unknown, 2);
    assert!(
        unknown.stderr.contains("not registered"),
        "{}",
        unknown.stderr
    );

    // A local path cannot be sent to a server: said before anything is sent.
    let path = server
        .client(ALICE)
        .run(&["ask", "--repo", repo.path().to_str().unwrap(), "q?"]);
    server.expect(&path, 2);
    assert!(path.stderr.contains("warden repos add"), "{}", path.stderr);

    // Nothing listens there: the URL is named, exit 1.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nowhere = format!("http://127.0.0.1:{port}");
    let down = Warden::new().run(&["--server", &nowhere, "tasks"]);
    assert_code(&down, 1);
    assert!(
        down.stderr
            .contains(&format!("cannot reach the Warden server at {nowhere}")),
        "{}",
        down.stderr
    );
    // One sentence with the fix, the same for `answer` and `run --follow-up` (whose tasks a
    // server would hold), without the HTTP client's chain of causes.
    let task = "tsk_01JQ3ZB5X0M2K8Y4R7T9V6W1AB";
    for args in [
        vec!["answer", task, "the v2 client"],
        vec!["run", "--follow-up", task, "and the timeout"],
    ] {
        let down = Warden::new().with("WARDEN_SERVER", &nowhere).run(&args);
        assert_code(&down, 1);
        let stderr = down.stderr.trim_end();
        assert!(!stderr.contains('\n'), "{stderr}");
        assert!(
            stderr.starts_with(&format!(
                "warden: error: cannot reach the Warden server at {nowhere}: "
            )) && stderr.ends_with(
                "; start it there with `warden serve`, or drop --server and WARDEN_SERVER to \
                 run the command in-process"
            ),
            "{stderr}"
        );
        assert!(!stderr.contains("error sending request"), "{stderr}");
    }
    let bad_url = Warden::new().run(&["tasks", "--server", "localhost:8787"]);
    assert_code(&bad_url, 2);
    assert!(bad_url.stderr.contains("http://"), "{}", bad_url.stderr);

    // `repos` only exists against a server and says so without one.
    let run = Warden::new().run(&["repos"]);
    assert_code(&run, 2);
    assert!(run.stderr.contains("needs a server"), "{}", run.stderr);
    // `cancel` and `retry` work in-process too; an unknown task is one sentence.
    for args in [
        vec!["cancel", "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"],
        vec!["retry", "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"],
    ] {
        let run = Warden::faux().run(&args);
        assert_code(&run, 2);
        assert!(
            run.stderr
                .contains("no task tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"),
            "{}",
            run.stderr
        );
    }
    // `answer` works in-process too; an unknown task is one sentence.
    let run = Warden::faux().run(&["answer", "tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9", "yes"]);
    assert_code(&run, 2);
    assert!(
        run.stderr
            .contains("no task tsk_01HZY8Q6K9V2M3N4P5R6S7T8V9"),
        "{}",
        run.stderr
    );
    // It says where it looked and what to do (a task on a server is answered with one).
    assert!(
        run.stderr.trim_end().ends_with(
            "local.db; `warden tasks` lists the tasks there (a server's task: give --server URL \
             or set WARDEN_SERVER)"
        ),
        "{}",
        run.stderr
    );
}
