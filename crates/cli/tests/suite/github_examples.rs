//! `warden serve`'s GitHub webhook fed GitHub's own published payloads
//! (`@octokit/webhooks-examples`, `warden_test_support::webhook_examples`; skipped without them
//! unless `WARDEN_TEST_REQUIRE` lists `webhook-examples`), not payloads shaped by our reading
//! of the documentation. Each example is changed only where it must point at the test's
//! world: its repository becomes `acme/widgets` (the GitHub fake's), a comment's or review's
//! body mentions the app or carries an approval, a pull request's number, head and URL become
//! Warden's pull request in the fake (and one check suite example is made to fail), and each
//! happens now (its times now, its comment, issue, review or check a new id). The examples' user, `Codertocat`, is given write
//! access in the fake and made an approver. Then, as docs/github.md says: every `ping` is
//! answered with pong; the examples as published (no mention) start nothing and ask GitHub
//! nothing; a mention in a comment or an opened issue is a task with its kind and prompt; on
//! Warden's pull request a review comment's mention is a same-branch follow-up, a review
//! without a body does nothing and one with `/warden approve` publishes; a check on a
//! repository not opted in, or a passing one, does nothing; the failed `check_run` example on
//! Warden's pull request (its output all `null`) starts one fix task. The examples' mixed-case
//! repository names showed that `[[publish]]` and `fix_failed_checks` were matched
//! case-sensitively; they are spelt otherwise here.

use std::time::Duration;

use serde_json::{json, Value};
use warden_test_support::webhook_examples::Examples;

use super::github_app::{
    deliver, pull_now, task_ids, visible, wait_comments, wait_new_task, wait_serving, with_hook,
    SECRET, TOKENS,
};
use super::server_harness::{
    call, change_repo, sample_repo, submit_answer, uppercase_beta, GithubRemote, Server, ADMIN,
};
use super::support::Warden;
use warden_test_support::model_server::{openai, ScriptedModelServer};

/// The examples' user (sender, commenter, reviewer, issue author).
const USER: &str = "Codertocat";

/// `[github.webhook]` with the examples' user as an approver, acme/widgets connected as
/// `connected` names it and, when `fix`, opted in to fixes of failed checks (spelt in capitals:
/// names are matched without regard to case, as GitHub matches them).
fn hook_toml(connected: &str, fix: bool) -> String {
    let fix = if fix {
        "fix_failed_checks = [\"ACME/WIDGETS\"]\n"
    } else {
        ""
    };
    format!(
        "[github.webhook]\nhandle = \"warden\"\n{fix}\
         [[github.webhook.approvers]]\nlogin = \"{USER}\"\nname = \"root\"\n\
         [[publish]]\nrepo = \"app\"\ngithub = \"{connected}\"\n"
    )
}

fn warden_for(
    model: &ScriptedModelServer,
    github: &GithubRemote,
    connected: &str,
    fix: bool,
) -> Warden {
    let warden = with_hook(Warden::openai(&model.url()), github);
    std::fs::write(
        warden.home.path().join("warden.toml"),
        hook_toml(connected, fix),
    )
    .unwrap();
    github.fake.set_role(USER, "write");
    warden
}

/// `example` moved to acme/widgets: every `Codertocat/Hello-World` (full names, URLs) becomes
/// `acme/widgets`, and the repository's (and pull request heads') name and owner follow; and
/// it happens now ([`happening_now`]: Warden refuses events older than a day and handles a
/// subject once, however many deliveries carry it).
fn in_widgets(example: &Value) -> Value {
    let text = example
        .to_string()
        .replace("Codertocat/Hello-World", "acme/widgets");
    let mut moved = happening_now(&serde_json::from_str(&text).unwrap());
    for repository in [
        "/repository",
        "/pull_request/head/repo",
        "/pull_request/base/repo",
    ] {
        if let Some(repository) = moved.pointer_mut(repository) {
            if repository.is_object() {
                repository["name"] = json!("widgets");
                repository["owner"]["login"] = json!("acme");
            }
        }
    }
    moved
}

/// The next subject id [`in_widgets`] gives.
static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1_000_000);

/// `example` as if it happened now: every time (`…_at`) is now, and its subject (the comment,
/// issue, review or check) a new one, with a new id.
fn happening_now(example: &Value) -> Value {
    let mut moved = example.clone();
    now(&mut moved, &super::github_app::now_utc());
    let fresh = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for subject in ["comment", "issue", "review", "check_run", "check_suite"] {
        if let Some(object) = moved.get_mut(subject).filter(|o| o.is_object()) {
            object["id"] = json!(fresh);
        }
    }
    moved
}

/// Every time in `value` (a string under a key ending in `_at`) set to `at`.
fn now(value: &mut Value, at: &str) {
    match value {
        Value::Object(map) => {
            for (key, item) in map.iter_mut() {
                if key.ends_with("_at") && item.is_string() {
                    *item = json!(at);
                } else {
                    now(item, at);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| now(item, at)),
        _ => {}
    }
}

/// `example` (moved to acme/widgets) about Warden's pull request `pull` as the fake shows it:
/// its number, URL, head branch and commit.
fn on_pull(example: &Value, pull: &Value) -> Value {
    let mut moved = in_widgets(example);
    let target = &mut moved["pull_request"];
    for key in ["number", "html_url", "url"] {
        target[key] = pull[key].clone();
    }
    target["head"]["ref"] = pull["head"]["ref"].clone();
    target["head"]["sha"] = pull["head"]["sha"].clone();
    moved
}

fn post(server: &Server, event: &str, id: &str, payload: &Value) -> (u16, String) {
    deliver(server, event, id, &payload.to_string(), Some(SECRET)).expect("the server answers")
}

fn acknowledged(server: &Server, event: &str, id: &str, payload: &Value) {
    let (status, answer) = post(server, event, id, payload);
    assert_eq!(status, 200, "{event} {id}: {answer}");
}

/// Nothing was started or written, and GitHub was asked no permission, after `what`.
fn nothing_happened(server: &Server, github: &GithubRemote, tasks: usize, what: &str) {
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(server).len(), tasks, "{what}: {}", server.stderr());
    let permissions = github
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/permission"))
        .count();
    assert_eq!(permissions, 0, "{what}: GitHub was asked a permission");
}

fn prompt(server: &Server, id: &str) -> String {
    server.task(ADMIN, id)["prompt"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn githubs_example_pings_issues_and_comments_are_answered_as_documented() {
    let Some(examples) = Examples::load() else {
        return;
    };
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, super::github_app::GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    // GitHub's names are not case-sensitive, and deliveries carry a repository's own spelling
    // (the examples': `Codertocat/Hello-World`): the `[[publish]]` entry may spell it otherwise.
    let warden = warden_for(&model, &github, "Acme/Widgets", false);
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);

    // Every ping example, as published (a repository's hook, an organisation's): pong.
    for (n, ping) in examples.of("ping", None).iter().enumerate() {
        let (status, answer) = post(&server, "ping", &format!("ping-{n}"), ping);
        assert_eq!(status, 200, "{answer}");
        assert_eq!(
            serde_json::from_str::<Value>(&answer).unwrap()["pong"],
            true,
            "{answer}"
        );
    }

    // The comment and opened-issue examples as published, moved to acme/widgets: none mentions
    // the app (one issue's body is `null`, one comment's issue body empty), so nothing starts
    // and GitHub is not even asked who may write.
    let comments = examples.of("issue_comment", Some("created"));
    let opened = examples.of("issues", Some("opened"));
    for (n, example) in comments.iter().enumerate() {
        acknowledged(
            &server,
            "issue_comment",
            &format!("c-{n}"),
            &in_widgets(example),
        );
    }
    for (n, example) in opened.iter().enumerate() {
        acknowledged(&server, "issues", &format!("o-{n}"), &in_widgets(example));
    }
    nothing_happened(&server, &github, 0, "the examples as published");
    assert!(github.fake.comments().is_empty());

    // The first comment example, its body a mention: a question whose prompt carries the
    // example issue's title and text; its one comment on issue #1 ends as the cited answer.
    let mut asked = in_widgets(&comments[0]);
    asked["comment"]["body"] = json!("@warden why does retry_with_backoff double?");
    acknowledged(&server, "issue_comment", "c-mention", &asked);
    let shown = wait_comments(&github, "the answer", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    assert_eq!(shown.len(), 1, "{shown:#?}");
    assert_eq!(shown[0].issue, 1, "the example's issue number");
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["kind"], "question", "{task}");
    assert_eq!(task["owner"], "github:codertocat", "{task}");
    let asked_prompt = prompt(&server, &ids[0]);
    assert!(
        asked_prompt.starts_with("why does retry_with_backoff double?"),
        "{asked_prompt}"
    );
    for expected in [
        "GitHub issue acme/widgets#1",
        "Spelling error in the README file",
        "accidently spelled 'commit'",
    ] {
        assert!(
            asked_prompt.contains(expected),
            "{expected}: {asked_prompt}"
        );
    }
    assert!(
        visible(&shown[0].body).contains("retry_with_backoff doubles the attempts"),
        "{}",
        shown[0].body
    );

    // The opened-issue example whose body is `null`, given a body that mentions the app: the
    // mention is its prompt.
    let mut new_issue = in_widgets(
        opened
            .iter()
            .find(|e| e["issue"]["body"].is_null())
            .expect("an opened issue without a body"),
    );
    new_issue["issue"]["body"] = json!("@warden why does retry_with_backoff double?");
    acknowledged(&server, "issues", "o-mention", &new_issue);
    let first = ids[0].clone();
    let second = wait_new_task(&server, &[&first]);
    let task = server.task(ADMIN, &second);
    assert_eq!(task["kind"], "question", "{task}");
    assert_eq!(task["prompt"], "why does retry_with_backoff double?");
    wait_comments(&github, "the opened issue's answer", |c| {
        c.len() == 2 && c.iter().all(|c| c.body.contains("— completed"))
    });
    server.terminate();
}

#[test]
fn githubs_example_reviews_and_checks_on_a_warden_pull_request_are_answered_as_documented() {
    let Some(examples) = Examples::load() else {
        return;
    };
    let repo = change_repo();
    let github = GithubRemote::for_repo(&repo, super::github_app::GITHUB_TOKEN);
    let edit = |old: &str, new: &str| {
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": old, "new": new}),
        )
    };
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("submit_change", json!({"summary": "Uppercase beta"})),
        edit("gamma", "GAMMA"),
        call("submit_change", json!({"summary": "Uppercase gamma too"})),
        edit("alpha", "ALPHA"),
        call("submit_change", json!({"summary": "Fix the linter"})),
    ]);
    let warden = warden_for(&model, &github, "acme/widgets", true);
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    wait_serving(&server);

    // A change asked in the comment example, approved in it: Warden's pull request #1.
    let comment = &examples.of("issue_comment", Some("created"))[0];
    let mut asked = in_widgets(comment);
    asked["comment"]["body"] = json!("@warden fix: make beta uppercase");
    acknowledged(&server, "issue_comment", "p-1", &asked);
    wait_comments(&github, "the proposal", |c| {
        c.iter().any(|c| c.body.contains("/warden approve sha256:"))
    });
    let first = task_ids(&server).pop().unwrap();
    let task = server.task(ADMIN, &first);
    assert_eq!(task["kind"], "change", "{task}");
    let hash = task["result"]["proposal"]["hash"].as_str().unwrap();
    let mut approve = in_widgets(comment);
    approve["comment"]["body"] = json!(format!("/warden approve {hash}"));
    acknowledged(&server, "issue_comment", "p-2", &approve);
    server.wait_until(ADMIN, &first, |s| s == "completed");
    let pull = pull_now(&repo, &github);
    assert_eq!(pull["head"]["ref"], format!("warden/{first}"));

    // The review and review-comment examples as published, on Warden's pull request: the
    // reviews have no body, the comments no mention; nothing.
    let reviews = examples.of("pull_request_review", Some("submitted"));
    let review_comments = examples.of("pull_request_review_comment", Some("created"));
    assert!(reviews.iter().all(|e| e["review"]["body"].is_null()));
    assert!(review_comments
        .iter()
        .all(|e| !e["comment"]["body"].as_str().unwrap().contains("@warden")));
    for (n, example) in reviews.iter().enumerate() {
        acknowledged(
            &server,
            "pull_request_review",
            &format!("r-{n}"),
            &on_pull(example, &pull),
        );
    }
    for (n, example) in review_comments.iter().enumerate() {
        acknowledged(
            &server,
            "pull_request_review_comment",
            &format!("rc-{n}"),
            &on_pull(example, &pull),
        );
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 1, "{}", server.stderr());

    // The review-comment example that has a line, its body a mention: a follow-up on the
    // same branch, its prompt the example's file, line and diff hunk.
    let mut mention = on_pull(
        review_comments
            .iter()
            .find(|e| e["comment"]["line"].is_u64())
            .expect("a review comment with a line"),
        &pull,
    );
    mention["comment"]["body"] = json!("@warden make gamma uppercase too");
    acknowledged(
        &server,
        "pull_request_review_comment",
        "rc-mention",
        &mention,
    );
    let second = wait_new_task(&server, &[&first]);
    let task = server.wait_until(ADMIN, &second, |s| s == "waiting_approval");
    assert_eq!(task["kind"], "change", "{task}");
    assert_eq!(task["follow_up_to"], first.as_str(), "{task}");
    assert_eq!(task["owner"], "github:codertocat", "{task}");
    let follow_up = task["prompt"].as_str().unwrap();
    assert!(
        follow_up.starts_with("make gamma uppercase too"),
        "{follow_up}"
    );
    let line = mention["comment"]["line"].as_u64().unwrap();
    for expected in [
        "review comment on pull request acme/widgets#1".to_string(),
        format!("`README.md` line {line}"),
        "@@ -1 +1 @@".to_string(),
    ] {
        assert!(follow_up.contains(&expected), "{expected}: {follow_up}");
    }

    // A review example with the approval as its body: published on the same branch.
    let second_hash = task["result"]["proposal"]["hash"].as_str().unwrap();
    let mut review = on_pull(&reviews[0], &pull);
    review["review"]["body"] = json!(format!("/warden approve {second_hash}"));
    acknowledged(&server, "pull_request_review", "r-approve", &review);
    let done = server.wait_until(ADMIN, &second, |s| s == "completed");
    assert_eq!(
        done["result"]["publication"]["pr_url"], pull["html_url"],
        "{done}"
    );
    assert_eq!(github.fake.pulls().len(), 1);
    let pull = pull_now(&repo, &github);
    assert_eq!(pull["head"]["sha"], done["result"]["proposal"]["commit"]);

    // The check examples as published (Codertocat/Hello-World is not opted in: the failed
    // check_run example too), and moved to acme/widgets but passing (every check_suite
    // example, the successful check_run ones) on Warden's pull request: nothing.
    let runs = examples.of("check_run", Some("completed"));
    let suites = examples.of("check_suite", Some("completed"));
    let on_head = |example: &Value, key: &str| {
        let mut moved = in_widgets(example);
        let check = &mut moved[key];
        check["head_sha"] = pull["head"]["sha"].clone();
        for listed in check["pull_requests"].as_array_mut().into_iter().flatten() {
            listed["number"] = pull["number"].clone();
            listed["head"]["ref"] = pull["head"]["ref"].clone();
            listed["head"]["sha"] = pull["head"]["sha"].clone();
        }
        moved
    };
    let mut n = 0;
    for (event, example) in runs
        .iter()
        .map(|e| ("check_run", e))
        .chain(suites.iter().map(|e| ("check_suite", e)))
    {
        n += 1;
        acknowledged(&server, event, &format!("k-{n}"), &happening_now(example));
        if example[event]["conclusion"] != "failure" {
            n += 1;
            acknowledged(&server, event, &format!("k-{n}"), &on_head(example, event));
        }
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 2, "{}", server.stderr());

    // The failed check_run example on Warden's pull request, opted in: one fix task, asked as
    // the first task's owner, naming the example's check; its output is all `null`.
    let failed = runs
        .iter()
        .find(|e| e["check_run"]["conclusion"] == "failure")
        .expect("a failed check_run example");
    acknowledged(
        &server,
        "check_run",
        "k-fail",
        &on_head(failed, "check_run"),
    );
    let fix = wait_new_task(&server, &[&first, &second]);
    let task = server.task(ADMIN, &fix);
    assert_eq!(task["kind"], "change", "{task}");
    assert_eq!(task["follow_up_to"], second.as_str(), "{task}");
    assert_eq!(task["owner"], "github:codertocat", "{task}");
    let fix_prompt = task["prompt"].as_str().unwrap();
    for expected in [
        "`Octocoders-linter` concluded `failure` on pull request acme/widgets#1",
        "(The check reported no output.)",
    ] {
        assert!(fix_prompt.contains(expected), "{expected}: {fix_prompt}");
    }
    // The suite example, concluded `failure`, on the same commit: no second fix.
    let mut suite = on_head(&suites[0], "check_suite");
    suite["check_suite"]["conclusion"] = json!("failure");
    acknowledged(&server, "check_suite", "k-suite", &suite);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 3);
    server.terminate();
}
