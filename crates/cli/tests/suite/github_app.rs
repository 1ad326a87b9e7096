//! The GitHub interface of `warden serve`, as GitHub drives it, against the GitHub fake
//! (`warden_test_support::github_fake`: permissions, issue comments, pull requests) with
//! deliveries signed as GitHub signs them: a writer's mention yields one issue comment edited
//! to the cited answer; a forged, unsigned or replayed delivery and a reader's or a stranger's
//! mention do nothing; a change shows its hash, a writer who is not a configured approver and
//! a wrong hash decide nothing, and the approver's `/warden approve <hash>` opens one pull
//! request; `serve` killed after handling a delivery and before recording it still gives one
//! task and one comment once GitHub redelivers. On Warden's pull request, a writer's review
//! comment is a follow-up whose approved commit lands on the same branch (one pull request,
//! once across a kill after the push), and a failed check (opted in) a fix task, one per head
//! commit, at most two in a row. As an App, each installation token is narrowed to the
//! repository with the least permissions.

use std::time::Duration;

use serde_json::{json, Value};
use warden_service::github::text::signature;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::github_fake::{Comment, APP_TEST_KEY_PEM};
use warden_test_support::model_server::{openai, ScriptedModelServer};

use super::server_harness::{
    call, change_repo, sample_repo, submit_answer, uppercase_beta, GithubRemote, Server, Token,
    ADMIN,
};
use super::support::Warden;

pub(super) const TOKENS: &[Token] = &[("root", "admin", ADMIN)];
pub(super) const SECRET: &str = "github-webhook-test-secret-0123456789";
pub(super) const GITHUB_TOKEN: &str = "ghp_github_hook_fake_token_0123456789";
pub(super) const WAIT: Duration = Duration::from_secs(90);
const ISSUE: u64 = 7;

const HOOK_TOML: &str = "[github.webhook]\nhandle = \"warden\"\n\
[[github.webhook.approvers]]\nlogin = \"octo-root\"\nname = \"root\"\n\
[[publish]]\nrepo = \"app\"\ngithub = \"acme/widgets\"\n";

pub(super) fn with_hook(warden: Warden, github: &GithubRemote) -> Warden {
    with_hook_and(warden, github, "")
}

/// As [`with_hook`], authenticating as the GitHub App `Iv1test` (installation 42) the fake
/// knows, whose tokens expire after `lifetime_secs`.
fn with_app(warden: Warden, github: &GithubRemote, lifetime_secs: i64) -> Warden {
    github.fake.with_app("Iv1test", 42, lifetime_secs);
    with_hook_and(
        warden,
        github,
        "[github.app]\nclient_id = \"Iv1test\"\ninstallation_id = 42\n",
    )
    .with("WARDEN_GITHUB_APP_PRIVATE_KEY", APP_TEST_KEY_PEM)
}

fn with_hook_and(warden: Warden, github: &GithubRemote, extra_toml: &str) -> Warden {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("{extra_toml}{HOOK_TOML}"),
    )
    .unwrap();
    github.fake.set_role("alice", "write");
    github.fake.set_role("bob", "maintain");
    github.fake.set_role("octo-root", "admin");
    github.fake.set_role("mallory", "read");
    warden
        .with("WARDEN_GITHUB_WEBHOOK_SECRET", SECRET)
        .with("WARDEN_GITHUB_TOKEN", GITHUB_TOKEN)
        .with("WARDEN_GITHUB_API_URL", &github.fake.url())
}

/// Now, as GitHub writes times (`2026-12-03T14:00:00Z`).
pub(super) fn now_utc() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    warden_time::rfc3339_seconds(i64::try_from(ms).unwrap())
}

/// An id GitHub would give the object `parts` describe: the same parts, the same id (a
/// redelivery's body is the same), other parts another id.
pub(super) fn object_id(parts: &[&str]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    parts.hash(&mut hasher);
    hasher.finish() >> 20
}

/// An `issue_comment` `created` payload by `login` on issue [`ISSUE`] of acme/widgets, made
/// now (a comment's id is its author's and text's: the same comment when they are).
fn comment_payload(login: &str, body: &str) -> String {
    comment_payload_at(login, body, &now_utc())
}

/// [`comment_payload`], the comment made at `at`.
fn comment_payload_at(login: &str, body: &str, at: &str) -> String {
    json!({
        "action": "created",
        "issue": {"number": ISSUE, "title": "retry is too eager", "body": "It retries at once.",
                  "state": "open", "user": {"login": "someone", "type": "User"}},
        "comment": {"id": object_id(&[login, body]), "body": body,
                    "user": {"login": login, "id": 11, "type": "User"},
                    "created_at": at, "updated_at": at,
                    "author_association": "CONTRIBUTOR"},
        "repository": {"id": 1, "name": "widgets", "full_name": "acme/widgets",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": login, "type": "User"},
    })
    .to_string()
}

pub(super) fn deliver(
    server: &Server,
    event: &str,
    id: &str,
    body: &str,
    secret: Option<&str>,
) -> Option<(u16, String)> {
    let signed = secret.map(|s| signature(s.as_bytes(), body.as_bytes()));
    let mut headers = vec![("X-GitHub-Event", event), ("X-GitHub-Delivery", id)];
    if let Some(signed) = &signed {
        headers.push(("X-Hub-Signature-256", signed.as_str()));
    }
    server.post_raw("/webhooks/github", "application/json", body, &headers)
}

fn comment(server: &Server, id: &str, login: &str, body: &str) -> u16 {
    deliver(
        server,
        "issue_comment",
        id,
        &comment_payload(login, body),
        Some(SECRET),
    )
    .expect("the server answers")
    .0
}

pub(super) fn wait_comments(
    github: &GithubRemote,
    what: &str,
    done: impl Fn(&[Comment]) -> bool,
) -> Vec<Comment> {
    github
        .fake
        .wait_for_comments(WAIT, done)
        .unwrap_or_else(|| panic!("{what}: {:#?}", github.fake.comments()))
}

/// [`wait_comments`], and on a timeout also the tasks and the server's stderr: what the task
/// was doing when the comment did not come.
pub(super) fn wait_comments_on(
    server: &Server,
    github: &GithubRemote,
    what: &str,
    done: impl Fn(&[Comment]) -> bool,
) -> Vec<Comment> {
    github
        .fake
        .wait_for_comments(WAIT, done)
        .unwrap_or_else(|| {
            panic!(
                "{what}: {:#?}\ntasks: {}\nserver stderr:\n{}",
                github.fake.comments(),
                server.get(ADMIN, "/v1/tasks"),
                server.stderr()
            )
        })
}

/// What a reader sees: the invisible word joiners, entities and Markdown escapes read.
pub(super) fn visible(text: &str) -> String {
    let read = text
        .replace('\u{2060}', "")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    let mut out = String::new();
    let mut chars = read.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            out.extend(chars.next());
        } else {
            out.push(c);
        }
    }
    out
}

pub(super) fn task_ids(server: &Server) -> Vec<String> {
    server.get(ADMIN, "/v1/tasks")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

pub(super) fn wait_serving(server: &Server) {
    let deadline = std::time::Instant::now() + WAIT;
    while !server.stderr().contains("github webhook (mention @warden)") {
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_writers_mention_yields_one_comment_edited_to_the_cited_answer_and_nothing_else_does() {
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);
    let head = repo.git(&["rev-parse", "HEAD"]);

    // GitHub's ping when the hook is created.
    let ping = json!({"zen": "Keep it logically awesome.", "hook_id": 1}).to_string();
    let (status, answer) = deliver(&server, "ping", "d-ping", &ping, Some(SECRET)).unwrap();
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        serde_json::from_str::<Value>(&answer).unwrap()["pong"],
        true
    );

    // Forged (another secret) and unsigned: 401, nothing happens.
    let ask = comment_payload("alice", "@warden why does retry_with_backoff double?");
    for secret in [Some("not the secret"), None] {
        let (status, answer) = deliver(&server, "issue_comment", "d-1", &ask, secret).unwrap();
        assert_eq!(status, 401, "{answer}");
    }
    assert!(task_ids(&server).is_empty());

    // The real delivery: acknowledged, and one comment ends as the cited answer.
    let started = std::time::Instant::now();
    assert_eq!(
        deliver(&server, "issue_comment", "d-1", &ask, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "acknowledged in time"
    );
    let comments = wait_comments(&github, "the answer", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    assert_eq!(
        comments.len(),
        1,
        "one comment per task, edited: {comments:#?}"
    );
    let answer = &comments[0];
    assert_eq!(answer.issue, ISSUE);
    let shown = visible(&answer.body);
    assert!(
        shown.contains("retry_with_backoff doubles the attempts"),
        "{shown}"
    );
    assert!(
        shown.contains(&format!("app/src/lib.rs:31-33 @ {}", &head[..12])),
        "{shown}"
    );
    // The prompt is shown with its issue's text, its mention neutralised.
    assert!(shown.contains("It retries at once."), "{shown}");
    assert!(!answer.body.contains("@warden"), "{}", answer.body);
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["owner"], "github:alice", "{task}");
    assert_eq!(task["kind"], "question");

    // A replay of the same delivery: nothing more. Nor of the same signed body under new
    // delivery ids (GitHub's signature does not cover the id): the same comment, handled.
    let before = github.fake.comments();
    for delivery in ["d-1", "d-1-replayed", "d-1-replayed-again"] {
        let (status, answer) =
            deliver(&server, "issue_comment", delivery, &ask, Some(SECRET)).unwrap();
        assert_eq!(status, 200, "{delivery}: {answer}");
    }
    // A writer's mention made 90 days ago, never delivered before: refused, saying why,
    // and nothing is asked of GitHub or started.
    let old = comment_payload_at(
        "alice",
        "@warden why is the backoff capped?",
        &warden_time::rfc3339_seconds(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
                - 90 * 86_400_000,
        ),
    );
    let (status, answer) = deliver(&server, "issue_comment", "d-old", &old, Some(SECRET)).unwrap();
    assert_eq!(status, 422, "{answer}");
    let refusal: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(refusal["error"]["code"], "invalid_request", "{answer}");
    let message = refusal["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("older than [github.webhook] max_event_age_secs (86400 s)")
            && message.contains("nothing was done"),
        "{message}"
    );
    // A reader's and a stranger's mentions: no task, no reply.
    assert_eq!(
        comment(&server, "d-2", "mallory", "@warden fix everything"),
        200
    );
    assert_eq!(comment(&server, "d-3", "nobody", "@warden why?"), 200);
    // A writer's comment that does not mention the app: nothing.
    assert_eq!(comment(&server, "d-4", "alice", "thanks, warden"), 200);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(github.fake.comments(), before);
    // The permission was asked of GitHub for each mention, never for the others.
    let asked: Vec<String> = github
        .fake
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/permission"))
        .map(|r| r.path.clone())
        .collect();
    assert_eq!(
        asked,
        [
            "/repos/acme/widgets/collaborators/alice/permission",
            "/repos/acme/widgets/collaborators/mallory/permission",
            "/repos/acme/widgets/collaborators/nobody/permission",
        ]
    );

    // A new issue that mentions the app: its own comment, its text the prompt.
    let opened = json!({
        "action": "opened",
        "issue": {"id": 80, "number": 8, "title": "Question", "body": "@warden why does retry_with_backoff double?",
                  "state": "open", "user": {"login": "alice", "type": "User"},
                  "created_at": now_utc(), "updated_at": now_utc()},
        "repository": {"id": 1, "name": "widgets", "full_name": "acme/widgets",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": "alice", "type": "User"},
    })
    .to_string();
    assert_eq!(
        deliver(&server, "issues", "d-5", &opened, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    let comments = wait_comments(&github, "the opened issue's answer", |c| {
        c.iter()
            .any(|c| c.issue == 8 && c.body.contains("— completed"))
    });
    assert_eq!(comments.len(), 2, "{comments:#?}");
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 2);
    let prompts: Vec<String> = ids
        .iter()
        .map(|id| {
            server.task(ADMIN, id)["prompt"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        prompts.contains(&"why does retry_with_backoff double?".to_string()),
        "{prompts:?}"
    );
    server.terminate();
}

/// Past `max_event_age_secs` (3 s here) an event is refused unless its very delivery was
/// received before and not handled: GitHub's redelivery of a comment whose author's permission
/// GitHub could not tell at first is handled once, late; the same body under a new delivery id
/// is refused.
#[test]
fn a_late_redelivery_of_an_unhandled_event_is_handled_once_and_a_late_replay_is_refused() {
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    std::fs::write(
        warden.home.path().join("warden.toml"),
        HOOK_TOML.replace(
            "handle = \"warden\"\n",
            "handle = \"warden\"\nmax_event_age_secs = 3\n",
        ),
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);
    let permissions = || {
        github
            .fake
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/permission"))
            .count()
    };

    // Delivered once: GitHub cannot say whether alice may write, so nothing is done (and
    // nothing recorded as handled).
    github
        .fake
        .inject(warden_test_support::github_fake::Fault::FailPermission(502));
    let ask = comment_payload("alice", "@warden why does retry_with_backoff double?");
    let (status, answer) = deliver(&server, "issue_comment", "late-1", &ask, Some(SECRET)).unwrap();
    assert_eq!(status, 200, "{answer}");
    let deadline = std::time::Instant::now() + WAIT;
    while permissions() == 0 {
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    assert!(task_ids(&server).is_empty());

    // Past the window: the same body under another delivery id is refused, nothing asked.
    std::thread::sleep(Duration::from_secs(4));
    let (status, answer) = deliver(
        &server,
        "issue_comment",
        "late-replayed",
        &ask,
        Some(SECRET),
    )
    .unwrap();
    assert_eq!(status, 422, "{answer}");
    assert!(answer.contains("max_event_age_secs (3 s)"), "{answer}");
    assert_eq!(permissions(), 1);

    // GitHub's redelivery of the delivery it received: handled, once.
    let (status, answer) = deliver(&server, "issue_comment", "late-1", &ask, Some(SECRET)).unwrap();
    assert_eq!(status, 200, "{answer}");
    let comments = wait_comments_on(&server, &github, "the late answer", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(task_ids(&server).len(), 1);
    // Once more: the handled delivery acknowledged and ignored, the replay still refused.
    for (delivery, expected) in [("late-1", 200), ("late-replayed", 422)] {
        let (status, answer) =
            deliver(&server, "issue_comment", delivery, &ask, Some(SECRET)).unwrap();
        assert_eq!(status, expected, "{delivery}: {answer}");
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(github.fake.comments().len(), 1);
    assert_eq!(permissions(), 2);
    server.terminate();
}

#[test]
fn a_change_shows_its_hash_and_only_the_approvers_comment_with_that_hash_opens_one_pull_request() {
    let repo = change_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call(
            "submit_change",
            json!({"summary": "Uppercase beta\n\nThe check wants BETA. cc @admin ![x](https://evil.com/p.png) <img src=x>"}),
        ),
    ]);
    // Authenticated as a GitHub App whose installation tokens last two minutes: renewed
    // before each use.
    let warden = with_app(Warden::openai(&model.url()), &github, 120);
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    wait_serving(&server);

    assert_eq!(
        comment(&server, "c-1", "alice", "@warden fix: make beta uppercase"),
        200
    );
    let comments = wait_comments_on(&server, &github, "the proposal", |c| {
        c.iter().any(|c| c.body.contains("/warden approve sha256:"))
    });
    assert_eq!(comments.len(), 1, "{comments:#?}");
    let ids = task_ids(&server);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["status"], "waiting_approval", "{task}");
    assert_eq!(task["kind"], "change");
    let hash = task["result"]["proposal"]["hash"].as_str().unwrap();
    let approval = task["result"]["approval"]["id"].as_str().unwrap();
    let proposal = &comments[0].body;
    assert!(proposal.contains(&format!("Hash: {hash}")), "{proposal}");
    assert!(
        proposal.contains(&format!("`/warden approve {hash}`")),
        "{proposal}"
    );
    assert!(
        visible(proposal).contains("✓ bash check.sh (exit 0"),
        "{proposal}"
    );
    // The model's text forms no mention, image, link or HTML.
    for forbidden in ["@admin", "![", "https://evil", "<img"] {
        assert!(!proposal.contains(forbidden), "{forbidden}: {proposal}");
    }

    // Bob can write but is no approver; the approver with a wrong hash: refused in replies.
    let wrong = format!("sha256:{}", "0".repeat(64));
    assert_eq!(
        comment(&server, "c-2", "bob", &format!("/warden approve {hash}")),
        200
    );
    assert_eq!(
        comment(
            &server,
            "c-3",
            "octo-root",
            &format!("/warden approve {wrong}")
        ),
        200
    );
    let comments = wait_comments(&github, "two refusals", |c| c.len() == 3);
    assert!(
        visible(&comments[1].body)
            .starts_with("Refused: bob is not one of this Warden's approvers"),
        "{:?}",
        comments[1].body
    );
    assert!(
        comments[2].body.starts_with("Refused:") && comments[2].body.contains(&wrong),
        "{:?}",
        comments[2].body
    );
    let shown = server.get(ADMIN, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");
    assert!(github.fake.pulls().is_empty());

    // A comment carrying Warden's marker is Warden's own, whatever it says: never a command.
    let own = format!(
        "<!-- warden:gh:task:{}:00 -->\n/warden approve {hash}",
        ids[0]
    );
    assert_eq!(comment(&server, "c-own", "octo-root", &own), 200);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(github.fake.comments().len(), 3);
    let shown = server.get(ADMIN, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");

    // The approver, with the hash: one pull request; the task's comment says so.
    let approve = format!("LGTM\n/warden approve {hash}");
    assert_eq!(comment(&server, "c-4", "octo-root", &approve), 200);
    assert_eq!(comment(&server, "c-4", "octo-root", &approve), 200);
    // The reply to the approval and the publication race each other: wait for both.
    let comments = wait_comments(&github, "the publication and the reply", |c| {
        c[0].body.contains("Publication: pr_opened") && c.len() >= 4
    });
    assert_eq!(
        comments.len(),
        4,
        "one reply to the approval: {comments:#?}"
    );
    assert!(
        comments[0].history.len() > 1,
        "the task's comment is edited in place: {:?}",
        comments[0].history
    );
    assert!(
        comments[3].body.starts_with(&format!("Approved {hash}")),
        "{:?}",
        comments[3].body
    );
    let pulls = github.fake.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr_url = pulls[0]["html_url"].as_str().unwrap();
    assert!(
        comments[0].body.contains(&format!("<{pr_url}>")),
        "{}",
        comments[0].body
    );
    assert!(
        comments[0].body.contains("Approval approved by root"),
        "{}",
        comments[0].body
    );
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["result"]["approval"]["decided_by"], "root", "{task}");
    // Every call went out with an installation token, fetched with the App's JWT.
    let issued = github.fake.issued_tokens();
    assert!(issued.len() > 1, "renewed: {issued:?}");
    for request in github.fake.requests() {
        if request.path.starts_with("/app/") {
            continue;
        }
        let bearer = request.header("authorization").unwrap_or_default();
        assert!(
            issued.iter().any(|t| bearer == format!("Bearer {t}")),
            "{} {}: {bearer}",
            request.method,
            request.path
        );
    }
    // Each token was narrowed to the task's repository with the least permissions (the fake
    // refuses a token outside them), and none reached the task's records.
    let shown = format!(
        "{}{}{}",
        server.task(ADMIN, &ids[0]),
        server.get(ADMIN, &format!("/v1/tasks/{}/journal?run=1", ids[0])),
        server.get(ADMIN, &format!("/v1/tasks/{}/journal?run=2", ids[0])),
    );
    for token in github.fake.issued() {
        assert_eq!(token.repositories, Some(vec!["widgets".to_string()]));
        let permissions: Vec<&str> = token.permissions.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(permissions, ["issues", "metadata", "pull_requests"]);
        assert!(
            !shown.contains(&token.token),
            "a token in the task's records"
        );
    }
    server.terminate();
}

#[test]
fn a_crash_before_recording_a_delivery_gives_one_task_and_one_comment_after_a_redelivery() {
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "github_before_record")],
    );
    server.register("app", &repo);
    wait_serving(&server);
    let ask = comment_payload("alice", "@warden why does retry_with_backoff double?");
    let answer = deliver(&server, "issue_comment", "d-crash", &ask, Some(SECRET));
    assert!(
        answer.as_ref().is_none_or(|(status, _)| *status != 200),
        "{answer:?}"
    );
    assert_eq!(server.wait_exit(), Some(101));

    // Started again, GitHub redelivers (same delivery id): one task, one comment.
    let server = Server::start(&warden, TOKENS);
    wait_serving(&server);
    assert_eq!(
        deliver(&server, "issue_comment", "d-crash", &ask, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    let comments = wait_comments(&github, "the answer after the restart", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(
        deliver(&server, "issue_comment", "d-crash", &ask, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(github.fake.comments().len(), 1);
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

#[test]
fn a_crash_after_github_created_a_comment_and_before_its_id_was_recorded_still_gives_one_comment() {
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    // The same answer twice: the run the crash interrupted may ask again.
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "github_after_send")],
    );
    server.register("app", &repo);
    wait_serving(&server);
    let ask = comment_payload("alice", "@warden why does retry_with_backoff double?");
    let _ = deliver(&server, "issue_comment", "d-sent", &ask, Some(SECRET));
    // Killed right after GitHub created the task's comment, its id unrecorded.
    assert_eq!(server.wait_exit(), Some(101));
    let created = github.fake.comments();
    assert_eq!(created.len(), 1, "{created:#?}");
    assert!(
        created[0].body.contains("<!-- warden:gh:task:tsk_"),
        "{created:#?}"
    );

    // Started again: the comment is found by its marker and edited, never created twice.
    let server = Server::start(&warden, TOKENS);
    wait_serving(&server);
    let comments = wait_comments(&github, "the answer after the restart", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    assert_eq!(comments.len(), 1, "{comments:#?}");
    assert_eq!(comments[0].id, created[0].id);
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

/// An `issue_comment` `created` payload by `login` on issue or pull request `number`.
fn comment_on(number: u64, login: &str, body: &str) -> String {
    let mut payload: Value = serde_json::from_str(&comment_payload(login, body)).unwrap();
    payload["issue"]["number"] = json!(number);
    if number != ISSUE {
        // A pull request's conversation is an issue with a `pull_request` key.
        payload["issue"]["pull_request"] = json!({
            "url": format!("https://api.github.com/repos/acme/widgets/pulls/{number}"),
            "html_url": format!("https://github.example/acme/widgets/pull/{number}"),
        });
    }
    payload.to_string()
}

/// A `pull_request_review_comment` `created` payload by `login` on pull request `pull` (as
/// the fake returns it), shaped as GitHub's documented example.
fn review_comment_payload(pull: &Value, login: &str, body: &str) -> String {
    let number = pull["number"].as_u64().unwrap();
    json!({
        "action": "created",
        "comment": {
            "url": format!("https://api.github.com/repos/acme/widgets/pulls/comments/{}", 500 + number),
            "pull_request_review_id": 700 + number,
            "id": object_id(&[login, body, &pull["html_url"].to_string(), &pull["head"].to_string()]),
            "node_id": "PRRC_fake",
            "diff_hunk": "@@ -1,3 +1,3 @@\n alpha\n-beta\n+BETA\n gamma",
            "path": "src/lib.txt",
            "commit_id": pull["head"]["sha"],
            "original_commit_id": pull["head"]["sha"],
            "user": {"login": login, "id": 11, "type": "User"},
            "body": body,
            "created_at": now_utc(),
            "updated_at": now_utc(),
            "html_url": format!("https://github.example/acme/widgets/pull/{number}#discussion_r1"),
            "pull_request_url": pull["url"],
            "author_association": "CONTRIBUTOR",
            "start_line": null, "original_start_line": null, "start_side": null,
            "line": 3, "original_line": 3, "side": "RIGHT",
        },
        "pull_request": pull,
        "repository": {"id": 1, "name": "widgets", "full_name": "acme/widgets",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": login, "type": "User"},
    })
    .to_string()
}

/// A `pull_request_review` `submitted` payload by `login` on pull request `pull`, its body
/// `body` (as GitHub's documented example).
fn review_payload(pull: &Value, login: &str, body: &str) -> String {
    let number = pull["number"].as_u64().unwrap();
    json!({
        "action": "submitted",
        "review": {
            "id": object_id(&[login, body, &pull["html_url"].to_string(), &pull["head"].to_string()]), "node_id": "PRR_fake",
            "user": {"login": login, "id": 12, "type": "User"},
            "body": body, "commit_id": pull["head"]["sha"],
            "submitted_at": now_utc(), "state": "commented",
            "html_url": format!("https://github.example/acme/widgets/pull/{number}#pullrequestreview-1"),
            "pull_request_url": pull["url"], "author_association": "MEMBER",
        },
        "pull_request": pull,
        "repository": {"id": 1, "name": "widgets", "full_name": "acme/widgets",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": login, "type": "User"},
    })
    .to_string()
}

/// `refs/heads/warden/*` of the remote, each `REF SHA` (asked with `repo`'s git).
fn remote_branches(repo: &TempRepo, github: &GithubRemote) -> Vec<String> {
    let git_dir = format!("--git-dir={}", github.path.display());
    let listed = repo.git(&[
        &git_dir,
        "for-each-ref",
        "--format=%(refname) %(objectname)",
        "refs/heads/warden/",
    ]);
    listed.lines().map(str::to_string).collect()
}

#[test]
fn a_review_comment_on_a_warden_pull_request_adds_one_commit_to_its_branch_once_across_a_crash() {
    let repo = change_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let model = ScriptedModelServer::start_blocking(vec![
        uppercase_beta(),
        call("submit_change", json!({"summary": "Uppercase beta"})),
        call(
            "edit_file",
            json!({"path": "src/lib.txt", "old": "gamma", "new": "GAMMA"}),
        ),
        call("submit_change", json!({"summary": "Uppercase gamma too"})),
    ]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    wait_serving(&server);

    // The change from the issue, approved: pull request #1 on warden/<task>.
    assert_eq!(
        comment(&server, "r-1", "alice", "@warden fix: make beta uppercase"),
        200
    );
    wait_comments(&github, "the proposal", |c| {
        c.iter().any(|c| c.body.contains("/warden approve sha256:"))
    });
    let first = task_ids(&server).pop().unwrap();
    let hash = server.task(ADMIN, &first)["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        comment(
            &server,
            "r-2",
            "octo-root",
            &format!("/warden approve {hash}")
        ),
        200
    );
    // The task's comment and the reply to the approval.
    wait_comments(&github, "the publication", |c| {
        c[0].body.contains("Publication: pr_opened") && c.len() >= 2
    });
    let pulls = github.fake.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pull = pulls[0].clone();
    let first_commit = pull["head"]["sha"].as_str().unwrap().to_string();
    assert_eq!(pull["head"]["ref"], format!("warden/{first}"));
    // The proposal commit credits the GitHub user who asked, as GitHub attributes it.
    let message = repo.git(&[
        &format!("--git-dir={}", github.path.display()),
        "log",
        "-1",
        "--format=%B",
        &first_commit,
    ]);
    assert!(
        message.contains("Co-authored-by: alice <11+alice@users.noreply.github.com>"),
        "{message}"
    );

    // A reader's review comment, a forged one, and one on a pull request Warden did not open:
    // nothing.
    let asked = review_comment_payload(&pull, "alice", "@warden make gamma uppercase too");
    for secret in [Some("not the secret"), None] {
        let (status, _) = deliver(
            &server,
            "pull_request_review_comment",
            "r-3",
            &asked,
            secret,
        )
        .unwrap();
        assert_eq!(status, 401);
    }
    let reader = review_comment_payload(&pull, "mallory", "@warden make gamma uppercase too");
    let mut foreign = pull.clone();
    foreign["head"]["ref"] = json!("feature/mine");
    foreign["html_url"] = json!("https://github.example/acme/widgets/pull/9");
    let foreign = review_comment_payload(&foreign, "alice", "@warden make gamma uppercase too");
    for (id, body) in [("r-4", &reader), ("r-5", &foreign)] {
        let (status, _) = deliver(
            &server,
            "pull_request_review_comment",
            id,
            body,
            Some(SECRET),
        )
        .unwrap();
        assert_eq!(status, 200);
    }
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(task_ids(&server).len(), 1);
    let comments_before = github.fake.comments().len();
    server.terminate();

    // Served again, set to die right after the next push.
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "publish_after_push")],
    );
    wait_serving(&server);
    let (status, _) = deliver(
        &server,
        "pull_request_review_comment",
        "r-6",
        &asked,
        Some(SECRET),
    )
    .unwrap();
    assert_eq!(status, 200);
    // The follow-up's proposal is shown on the pull request's conversation (issue #1).
    let comments = wait_comments_on(&server, &github, "the follow-up's proposal", |c| {
        c.iter()
            .any(|c| c.issue == 1 && c.body.contains("/warden approve sha256:"))
    });
    assert_eq!(comments.len(), comments_before + 1, "{comments:#?}");
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 2, "{ids:?}");
    let second = ids.iter().find(|id| **id != first).unwrap().clone();
    let task = server.task(ADMIN, &second);
    assert_eq!(task["follow_up_to"], first.as_str(), "{task}");
    assert_eq!(task["owner"], "github:alice", "{task}");
    assert_eq!(task["status"], "waiting_approval", "{task}");
    let prompt = task["prompt"].as_str().unwrap();
    assert!(prompt.starts_with("make gamma uppercase too"), "{prompt}");
    assert!(prompt.contains("`src/lib.txt` line 3"), "{prompt}");
    let second_hash = task["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        task["result"]["proposal"]["base_commit"],
        first_commit.as_str(),
        "{task}"
    );
    // The approval, in a review of the pull request, bound to the new hash: published, and
    // the process dies after the push, before recording anything.
    let approve = review_payload(
        &pull,
        "octo-root",
        &format!("/warden approve {second_hash}"),
    );
    let _ = deliver(
        &server,
        "pull_request_review",
        "r-7",
        &approve,
        Some(SECRET),
    );
    assert_eq!(server.wait_exit(), Some(101));

    // Started again: the publication resumes; the branch moved once, one pull request.
    let server = Server::start(&warden, TOKENS);
    wait_serving(&server);
    let task = server.wait_until(ADMIN, &second, |s| s == "completed");
    let result = &task["result"];
    assert_eq!(result["publication"]["status"], "pr_opened", "{task}");
    assert_eq!(result["publication"]["branch"], format!("warden/{first}"));
    assert_eq!(result["publication"]["pr_url"], pull["html_url"], "{task}");
    let second_commit = result["proposal"]["commit"].as_str().unwrap();
    assert_eq!(
        remote_branches(&repo, &github),
        [format!("refs/heads/warden/{first} {second_commit}")]
    );
    let git_dir = format!("--git-dir={}", github.path.display());
    assert_eq!(
        repo.git(&[&git_dir, "rev-parse", &format!("{second_commit}^")]),
        first_commit,
        "a fast-forward: the new commit's parent is the first proposal"
    );
    assert_eq!(github.fake.pulls().len(), 1);
    let creates = github
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pulls"))
        .count();
    assert_eq!(creates, 1);
    // The follow-up's comment on the pull request ends with the publication.
    wait_comments(&github, "the follow-up's publication", |c| {
        c.iter()
            .any(|c| c.issue == 1 && c.body.contains("Publication: pr_opened"))
    });
    // GitHub redelivering the review comment starts nothing more.
    let (status, _) = deliver(
        &server,
        "pull_request_review_comment",
        "r-6",
        &asked,
        Some(SECRET),
    )
    .unwrap();
    assert_eq!(status, 200);
    // A failed check on the pull request: this Warden did not opt acme/widgets in, nothing.
    let failed = check_run_payload(&pull_now(&repo, &github), "lint", "failure", "lint failed");
    assert_eq!(
        deliver(&server, "check_run", "r-8", &failed, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(task_ids(&server).len(), 2);
    server.terminate();
}

/// A `check_run` `completed` payload (as GitHub's documented example) for `pull`'s head
/// commit, by the CI app, concluded `conclusion`.
fn check_run_payload(pull: &Value, name: &str, conclusion: &str, text: &str) -> String {
    let number = pull["number"].as_u64().unwrap();
    let sha = &pull["head"]["sha"];
    let pull_ref = json!({
        "url": format!("https://api.github.com/repos/acme/widgets/pulls/{number}"),
        "id": 1000 + number,
        "number": number,
        "head": {"ref": pull["head"]["ref"], "sha": sha,
                 "repo": {"id": 1, "url": "https://api.github.com/repos/acme/widgets", "name": "widgets"}},
        "base": {"ref": "main", "sha": pull["base"]["sha"],
                 "repo": {"id": 1, "url": "https://api.github.com/repos/acme/widgets", "name": "widgets"}},
    });
    let app = json!({"id": 29310, "slug": "ci", "node_id": "MDM6QXBwMjkzMTA=", "name": "CI",
                     "owner": {"login": "acme", "type": "Organization"}});
    json!({
        "action": "completed",
        "check_run": {
            "id": object_id(&[sha.as_str().unwrap(), name, conclusion]), "name": name,
            "node_id": "MDg6Q2hlY2tSdW4xMjg2MjAyMjg=",
            "head_sha": sha, "external_id": "", "status": "completed", "conclusion": conclusion,
            "url": "https://api.github.com/repos/acme/widgets/check-runs/128620228",
            "html_url": "https://github.example/acme/widgets/runs/128620228",
            "details_url": "https://ci.example/runs/1",
            "started_at": now_utc(), "completed_at": now_utc(),
            "output": {"title": format!("{name}: 1 failure"), "summary": "check.sh exited 1",
                       "text": text, "annotations_count": 0,
                       "annotations_url": "https://api.github.com/repos/acme/widgets/check-runs/128620228/annotations"},
            "check_suite": {"id": 118_578_147, "head_branch": pull["head"]["ref"], "head_sha": sha,
                            "status": "completed", "conclusion": conclusion, "app": app,
                            "pull_requests": [pull_ref]},
            "app": app,
            "pull_requests": [pull_ref],
        },
        "repository": {"id": 1, "name": "widgets", "full_name": "acme/widgets",
                       "owner": {"login": "acme", "type": "Organization"}},
        "sender": {"login": "acme-ci[bot]", "type": "Bot"},
    })
    .to_string()
}

/// The pull request as the fake shows it now (its head moves with follow-ups).
pub(super) fn pull_now(repo: &TempRepo, github: &GithubRemote) -> Value {
    let mut pull = github.fake.pulls()[0].clone();
    let git_dir = format!("--git-dir={}", github.path.display());
    let head = pull["head"]["ref"].as_str().unwrap().to_string();
    let sha = repo.git(&[&git_dir, "rev-parse", &format!("refs/heads/{head}")]);
    pull["head"]["sha"] = json!(sha);
    pull
}

/// Approves the pending proposal of task `id` from the pull request's conversation and waits
/// for its publication.
fn approve_on_pull(server: &Server, delivery: &str, id: &str) -> Value {
    let task = server.wait_until(ADMIN, id, |s| s == "waiting_approval");
    let hash = task["result"]["proposal"]["hash"].as_str().unwrap();
    let approve = comment_on(1, "octo-root", &format!("/warden approve {hash}"));
    assert_eq!(
        deliver(server, "issue_comment", delivery, &approve, Some(SECRET))
            .unwrap()
            .0,
        200
    );
    server.wait_until(ADMIN, id, |s| s == "completed")
}

#[test]
fn a_failed_check_on_a_warden_pull_request_starts_one_fix_per_commit_and_at_most_two_in_a_row() {
    let repo = change_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
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
        call("submit_change", json!({"summary": "Fix lint: gamma"})),
        edit("alpha", "ALPHA"),
        call("submit_change", json!({"summary": "Fix lint: alpha"})),
    ]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    // Opted in for acme/widgets.
    std::fs::write(
        warden.home.path().join("warden.toml"),
        HOOK_TOML.replace(
            "handle = \"warden\"\n",
            "handle = \"warden\"\nfix_failed_checks = [\"acme/widgets\"]\n",
        ),
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register_with_checks("app", &repo, &["bash check.sh"]);
    wait_serving(&server);
    assert_eq!(
        comment(&server, "k-1", "alice", "@warden fix: make beta uppercase"),
        200
    );
    if github
        .fake
        .wait_for_comments(WAIT, |c| {
            c.iter().any(|c| c.body.contains("/warden approve sha256:"))
        })
        .is_none()
    {
        let ids = task_ids(&server);
        panic!(
            "no proposal after {WAIT:?}: {}\n{:#?}\n{}",
            server.task(ADMIN, &ids[0]),
            github.fake.comments(),
            server.stderr()
        );
    }
    let first = task_ids(&server).pop().unwrap();
    let hash = server.task(ADMIN, &first)["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        comment(
            &server,
            "k-2",
            "octo-root",
            &format!("/warden approve {hash}")
        ),
        200
    );
    server.wait_until(ADMIN, &first, |s| s == "completed");
    let check = |delivery: &str, pull: &Value, name: &str, conclusion: &str| {
        let body = check_run_payload(
            pull,
            name,
            conclusion,
            "lint: src/lib.txt:3 gamma must be uppercase\nauth ghs_16C7e42F292c6912E7710c838347Ae178B4a",
        );
        assert_eq!(
            deliver(&server, "check_run", delivery, &body, Some(SECRET))
                .unwrap()
                .0,
            200
        );
    };

    // A passing check, and a failing one on a pull request Warden did not open: nothing.
    let pull = pull_now(&repo, &github);
    check("k-3", &pull, "lint", "success");
    let mut foreign = pull.clone();
    foreign["head"]["ref"] = json!("feature/mine");
    check("k-4", &foreign, "lint", "failure");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(task_ids(&server).len(), 1);

    // The failing check: one fix task, a follow-up on the same branch, with the check's
    // name, conclusion and output (the token in it redacted).
    check("k-5", &pull, "lint", "failure");
    let fix = wait_new_task(&server, &[&first]);
    let task = server.task(ADMIN, &fix);
    assert_eq!(task["follow_up_to"], first.as_str(), "{task}");
    assert_eq!(task["owner"], "github:alice", "{task}");
    let prompt = task["prompt"].as_str().unwrap();
    for expected in [
        "`lint` concluded `failure` on pull request acme/widgets#1",
        "gamma must be uppercase",
        "check.sh exited 1",
        "[redacted]",
    ] {
        assert!(prompt.contains(expected), "{expected}: {prompt}");
    }
    assert!(!prompt.contains("ghs_16C7"), "{prompt}");
    // Another failing check, the suite, and a redelivery on the same commit: no second fix.
    check("k-6", &pull, "test", "failure");
    check("k-5", &pull, "lint", "failure");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(task_ids(&server).len(), 2);

    // The fix published on the branch; its own commit fails: a second fix (the last one).
    let done = approve_on_pull(&server, "k-7", &fix);
    assert_eq!(done["result"]["publication"]["pr_url"], pull["html_url"]);
    let pull = pull_now(&repo, &github);
    assert_eq!(pull["head"]["sha"], done["result"]["proposal"]["commit"]);
    check("k-8", &pull, "lint", "timed_out");
    let second_fix = wait_new_task(&server, &[&first, &fix]);
    assert_eq!(
        server.task(ADMIN, &second_fix)["follow_up_to"],
        fix.as_str()
    );
    let done = approve_on_pull(&server, "k-9", &second_fix);
    let pull = pull_now(&repo, &github);
    assert_eq!(pull["head"]["sha"], done["result"]["proposal"]["commit"]);
    // Its commit fails too: Warden stops trying.
    check("k-10", &pull, "lint", "failure");
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(task_ids(&server).len(), 3);
    assert_eq!(github.fake.pulls().len(), 1);
    server.terminate();
}

/// Waits until the server has one task besides `known`; its id.
pub(super) fn wait_new_task(server: &Server, known: &[&str]) -> String {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let ids = task_ids(server);
        if ids.len() > known.len() {
            assert_eq!(ids.len(), known.len() + 1, "{ids:?}");
            return ids
                .into_iter()
                .find(|id| !known.contains(&id.as_str()))
                .unwrap();
        }
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_mention_while_the_same_persons_task_from_the_issue_runs_is_sent_to_that_task() {
    let repo = sample_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    let thinking = warden_test_support::model_server::Gate::new();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("read_file", &json!({"path": "src/lib.rs"}).to_string()).held(&thinking),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let warden = with_hook(Warden::openai(&model.url()), &github);
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);

    assert_eq!(
        comment(
            &server,
            "s-1",
            "alice",
            "@warden why does retry_with_backoff double?"
        ),
        200
    );
    let deadline = std::time::Instant::now() + WAIT;
    while model.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Alice says more while her question runs: no second task, a reply that says where it went.
    let said = "@warden only the doubling, not the jitter";
    assert_eq!(comment(&server, "s-2", "alice", said), 200);
    let comments = wait_comments(&github, "the steering reply", |c| {
        c.iter()
            .any(|c| visible(&c.body).contains("Sent to the running task"))
    });
    assert_eq!(task_ids(&server).len(), 1, "{comments:#?}");
    // The same delivery again (GitHub retrying) sends nothing twice.
    assert_eq!(comment(&server, "s-2", "alice", said), 200);
    thinking.open();
    wait_comments_on(&server, &github, "the answer", |c| {
        c.iter().any(|c| c.body.contains("— completed"))
    });
    let requests = model.requests();
    assert_eq!(requests.len(), 2, "{requests:#?}");
    let second = requests[1].body["messages"].to_string();
    assert_eq!(
        second.matches("only the doubling, not the jitter").count(),
        1,
        "{second}"
    );
    assert!(second.contains("github:alice sent a message"), "{second}");
    server.terminate();
}
