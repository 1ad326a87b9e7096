//! The Slack app of `warden serve`, as Slack drives it, against a local fake of the Web API
//! (`warden_test_support::slack_fake`) with requests signed as Slack signs them: a mention
//! yields one thread message that ends as the cited answer; a forged, a stale and a replayed
//! delivery do nothing; a change shows its hash and Approve/Reject buttons that a
//! non-approver's press cannot decide and an approver's press publishes as one pull request;
//! `serve` killed after handling an event and before recording it still gives one task and one
//! message once Slack retries; approvers may be a user group, asked of Slack at each press; a
//! chat interface that cannot start is reported in the other chat.

use std::time::Duration;

use serde_json::{json, Value};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};
use warden_test_support::slack_fake::{sign, PostedMessage, SlackFake, BOT_USER};
use warden_test_support::telegram_fake::TelegramFake;

use super::server_harness::{
    call, change_repo, sample_repo, submit_answer, uppercase_beta, GithubRemote, Server, Token,
    ADMIN,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];
const SIGNING_SECRET: &str = "slack-test-signing-secret-0123456789";
const BOT_TOKEN: &str = "xoxb-slack-test-token";
const GITHUB_TOKEN: &str = "ghp_slack_fake_token_0123456789";
const CHANNEL: &str = "CTEAM";
const WAIT: Duration = Duration::from_secs(90);

const SLACK_TOML: &str = "[slack]\n\
[[slack.users]]\nid = \"UALICE\"\nname = \"alice\"\nrole = \"operator\"\n\
[[slack.users]]\nid = \"UROOT\"\nname = \"root\"\nrole = \"admin\"\n\
[[slack.channels]]\nid = \"CTEAM\"\nrepo = \"app\"\n";

fn with_slack(warden: Warden, fake: &SlackFake, extra_toml: &str) -> Warden {
    with_slack_keys(warden, fake, "", extra_toml)
}

/// [`with_slack`] with `keys` in the `[slack]` table itself.
fn with_slack_keys(warden: Warden, fake: &SlackFake, keys: &str, extra_toml: &str) -> Warden {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!(
            "{}{extra_toml}",
            SLACK_TOML.replacen("[slack]\n", &format!("[slack]\n{keys}"), 1)
        ),
    )
    .unwrap();
    warden
        .with("WARDEN_SLACK_SIGNING_SECRET", SIGNING_SECRET)
        .with("WARDEN_SLACK_BOT_TOKEN", BOT_TOKEN)
        .with("WARDEN_SLACK_API_URL", &fake.url())
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// POSTs `body` to `path` signed at `timestamp` with `secret`.
fn deliver_signed(
    server: &Server,
    path: &str,
    content_type: &str,
    body: &str,
    timestamp: i64,
    secret: &str,
    extra: &[(&str, &str)],
) -> Option<(u16, String)> {
    let timestamp = timestamp.to_string();
    let signature = sign(secret, &timestamp, body);
    let mut headers = vec![
        ("X-Slack-Request-Timestamp", timestamp.as_str()),
        ("X-Slack-Signature", signature.as_str()),
    ];
    headers.extend_from_slice(extra);
    server.post_raw(path, content_type, body, &headers)
}

/// An `app_mention` event envelope.
fn mention(event_id: &str, user: &str, ts: &str, text: &str) -> String {
    json!({
        "token": "unused", "team_id": "T0WARDEN", "api_app_id": "A0WARDEN",
        "type": "event_callback", "event_id": event_id, "event_time": now(),
        "event": {"type": "app_mention", "user": user, "text": format!("<@{BOT_USER}> {text}"),
                  "ts": ts, "channel": CHANNEL, "event_ts": ts},
    })
    .to_string()
}

fn send_event(server: &Server, body: &str, extra: &[(&str, &str)]) -> Option<(u16, String)> {
    deliver_signed(
        server,
        "/webhooks/slack",
        "application/json",
        body,
        now(),
        SIGNING_SECRET,
        extra,
    )
}

/// A button press as Slack posts it: `payload=<JSON>`, form-encoded.
fn press(
    server: &Server,
    user: &str,
    message: &PostedMessage,
    button: usize,
    trigger: &str,
) -> u16 {
    let (action_id, value) = message.buttons()[button].clone();
    let payload = json!({
        "type": "block_actions", "trigger_id": trigger,
        "user": {"id": user}, "channel": {"id": message.channel},
        "container": {"type": "message", "message_ts": message.ts, "channel_id": message.channel},
        "message": {"ts": message.ts, "thread_ts": message.thread_ts},
        "actions": [{"type": "button", "action_id": action_id, "value": value, "block_id": "warden_approval"}],
    });
    let body = format!("payload={}", form_encode(&payload.to_string()));
    let (status, _) = deliver_signed(
        server,
        "/webhooks/slack/interactions",
        "application/x-www-form-urlencoded",
        &body,
        now(),
        SIGNING_SECRET,
        &[],
    )
    .expect("the server answers a press");
    status
}

fn form_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

fn wait_for(
    fake: &SlackFake,
    what: &str,
    done: impl Fn(&[PostedMessage]) -> bool,
) -> Vec<PostedMessage> {
    fake.wait_for(WAIT, done)
        .unwrap_or_else(|| panic!("{what}: {:#?}", fake.messages()))
}

/// The ephemeral notices once `count` have been posted.
fn wait_for_ephemerals(fake: &SlackFake, count: usize) -> Vec<serde_json::Value> {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let notices = fake.ephemerals();
        if notices.len() >= count {
            return notices;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{count} notices were not posted: {notices:#?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What a reader sees: the invisible word joiners removed, the entities read.
fn visible(text: &str) -> String {
    text.replace('\u{2060}', "")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

fn task_ids(server: &Server) -> Vec<String> {
    server.get(ADMIN, "/v1/tasks")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

fn wait_serving(server: &Server) {
    let deadline = std::time::Instant::now() + WAIT;
    while !server.stderr().contains("slack app (bot user") {
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_mention_yields_one_cited_answer_in_its_thread_and_forged_stale_and_replayed_deliveries_nothing(
) {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);
    let head = repo.git(&["rev-parse", "HEAD"]);

    // Slack's URL check: the challenge is echoed.
    let body = json!({"token": "t", "challenge": "c-3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"}).to_string();
    let (status, answer) = send_event(&server, &body, &[]).unwrap();
    assert_eq!(status, 200, "{answer}");
    let answer: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(
        answer["challenge"],
        "c-3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"
    );

    // Forged (another secret), stale (six minutes old) and unsigned: 401, nothing happens.
    let ask = mention(
        "Ev0ASK0001",
        "UALICE",
        "1700000000.000100",
        "why does retry_with_backoff double?",
    );
    let forged = deliver_signed(
        &server,
        "/webhooks/slack",
        "application/json",
        &ask,
        now(),
        "not the secret",
        &[],
    )
    .unwrap();
    assert_eq!(forged.0, 401, "{forged:?}");
    let stale = deliver_signed(
        &server,
        "/webhooks/slack",
        "application/json",
        &ask,
        now() - 360,
        SIGNING_SECRET,
        &[],
    )
    .unwrap();
    assert_eq!(stale.0, 401, "{stale:?}");
    assert!(stale.1.contains("five minutes"), "{stale:?}");
    let unsigned = server
        .post_raw("/webhooks/slack", "application/json", &ask, &[])
        .unwrap();
    assert_eq!(unsigned.0, 401, "{unsigned:?}");
    assert!(task_ids(&server).is_empty());

    // The real delivery: acknowledged, and one message in the thread ends as the cited answer.
    let started = std::time::Instant::now();
    let (status, _) = send_event(&server, &ask, &[]).unwrap();
    assert_eq!(status, 200);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "acknowledged within 3 s"
    );
    let messages = wait_for(&fake, "the answer", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    assert_eq!(
        messages.len(),
        1,
        "one message per task, updated: {messages:#?}"
    );
    let answer = &messages[0];
    assert_eq!(answer.channel, CHANNEL);
    assert_eq!(
        answer.thread_ts.as_deref(),
        Some("1700000000.000100"),
        "in the thread"
    );
    assert!(
        answer
            .text
            .contains("retry_with_backoff doubles the attempts"),
        "{}",
        answer.text
    );
    assert!(
        visible(&answer.text).contains(&format!("app/src/lib.rs:31-33 @ {}", &head[..12])),
        "{}",
        answer.text
    );
    assert!(answer.buttons().is_empty(), "no buttons on an answer");
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1);
    assert_eq!(server.task(ADMIN, &ids[0])["owner"], "alice");

    // Slack retrying the event, and a replay of the same signed delivery: nothing more.
    let before = fake.messages();
    let (status, _) = send_event(
        &server,
        &ask,
        &[
            ("X-Slack-Retry-Num", "1"),
            ("X-Slack-Retry-Reason", "http_timeout"),
        ],
    )
    .unwrap();
    assert_eq!(status, 200);
    let (status, _) = send_event(&server, &ask, &[]).unwrap();
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(fake.messages(), before);

    // Someone not on the allow-list is told so in the thread, and nothing is submitted.
    let stranger = mention(
        "Ev0STRANGER",
        "UOTHER",
        "1700000000.000200",
        "what is this?",
    );
    assert_eq!(send_event(&server, &stranger, &[]).unwrap().0, 200);
    let messages = wait_for(&fake, "the stranger is refused", |m| m.len() == 2);
    assert!(
        messages[1]
            .text
            .contains("UOTHER is not on this Warden's allow-list"),
        "{:?}",
        messages[1]
    );
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

/// A registered `app` whose `origin` is a bare remote, a GitHub fake for `acme/widgets`, a
/// model making the checked edit, and the Slack fake.
struct ChangeSetup {
    repo: TempRepo,
    github: GithubRemote,
    _model: ScriptedModelServer,
    fake: SlackFake,
    warden: Warden,
}

impl ChangeSetup {
    fn new() -> ChangeSetup {
        ChangeSetup::with_keys("")
    }

    /// With `keys` in `[slack]`.
    fn with_keys(keys: &str) -> ChangeSetup {
        let repo = change_repo();
        let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
        let model = ScriptedModelServer::start_blocking(vec![
            uppercase_beta(),
            call(
                "submit_change",
                json!({"summary": "Uppercase beta\n\nThe check wants BETA. <!channel> ask <@U999> at evil.com"}),
            ),
        ]);
        let fake = SlackFake::start(BOT_TOKEN);
        let warden = with_slack_keys(
            Warden::openai(&model.url())
                .with("WARDEN_GITHUB_API_URL", &github.fake.url())
                .with("WARDEN_GITHUB_TOKEN", GITHUB_TOKEN),
            &fake,
            keys,
            "[[publish]]\nrepo = \"app\"\ngithub = \"acme/widgets\"\n",
        );
        ChangeSetup {
            repo,
            github,
            _model: model,
            fake,
            warden,
        }
    }
}

#[test]
fn a_change_shows_its_hash_and_only_an_approvers_press_opens_one_pull_request() {
    let setup = ChangeSetup::new();
    let fake = &setup.fake;
    let server = Server::start(&setup.warden, TOKENS);
    server.register_with_checks("app", &setup.repo, &["bash check.sh"]);
    wait_serving(&server);

    let run = mention(
        "Ev0RUN0001",
        "UALICE",
        "1700000000.000300",
        "run make beta uppercase",
    );
    assert_eq!(send_event(&server, &run, &[]).unwrap().0, 200);
    let messages = wait_for(fake, "the proposal with buttons", |m| {
        m.iter().any(|m| !m.buttons().is_empty())
    });
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let proposal = &messages[0];
    let ids = task_ids(&server);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["status"], "waiting_approval", "{task}");
    let hash = task["result"]["proposal"]["hash"].as_str().unwrap();
    let approval = task["result"]["approval"]["id"].as_str().unwrap();
    assert!(
        proposal.text.contains(&format!("Hash: {hash}")),
        "{}",
        proposal.text
    );
    assert!(
        visible(&proposal.text).contains("✓ bash check.sh (exit 0"),
        "{}",
        proposal.text
    );
    assert_eq!(
        proposal.buttons(),
        [
            ("warden_approve".to_string(), approval.to_string()),
            ("warden_reject".to_string(), approval.to_string())
        ]
    );
    // The model's text forms no mention, broadcast or link.
    for forbidden in ["<!channel>", "<@U999>", "evil.com"] {
        assert!(
            !proposal.text.contains(forbidden),
            "{forbidden}: {}",
            proposal.text
        );
    }

    // Alice (not an approver) presses Approve: refused to her alone, nothing decided.
    assert_eq!(
        press(&server, "UALICE", proposal, 0, "trigger-alice-1"),
        200
    );
    let notice = &wait_for_ephemerals(fake, 1)[0];
    assert_eq!(notice["user"], "UALICE");
    assert!(
        notice["text"].as_str().unwrap().starts_with("Refused"),
        "{notice}"
    );
    let shown = server.get(ADMIN, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");

    // The approver presses Approve: published once; the message says so and loses its buttons.
    assert_eq!(press(&server, "UROOT", proposal, 0, "trigger-root-1"), 200);
    // The same press delivered again (a replay): nothing more.
    assert_eq!(press(&server, "UROOT", proposal, 0, "trigger-root-1"), 200);
    let messages = wait_for(fake, "the publication", |m| {
        m.iter().any(|m| m.text.contains("Publication: pr_opened"))
    });
    assert_eq!(messages.len(), 1, "one message, updated: {messages:#?}");
    assert!(
        messages[0].buttons().is_empty(),
        "buttons gone once decided"
    );
    assert!(
        messages[0].history.len() > 1,
        "updated in place: {:?}",
        messages[0].history
    );
    let pulls = setup.github.fake.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr_url = pulls[0]["html_url"].as_str().unwrap();
    assert!(
        messages[0].text.contains(&format!("<{pr_url}>")),
        "{}",
        messages[0].text
    );
    assert!(
        messages[0].text.contains("Approval approved by root"),
        "{}",
        messages[0].text
    );
    // The approver's notice follows the decision; the publication may finish first.
    let notices = wait_for_ephemerals(fake, 2);
    assert_eq!(notices.len(), 2, "{notices:#?}");
    assert!(
        notices[1]["text"].as_str().unwrap().starts_with("Approved"),
        "{notices:#?}"
    );
    server.terminate();
}

#[test]
fn a_crash_before_recording_an_event_gives_one_task_and_one_message_after_slacks_retry() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");

    // Killed after the event was handled (the task submitted), before it was recorded and
    // acknowledged: Slack sees no answer.
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "slack_before_record")],
    );
    server.register("app", &repo);
    wait_serving(&server);
    let ask = mention(
        "Ev0CRASH01",
        "UALICE",
        "1700000000.000400",
        "why does retry_with_backoff double?",
    );
    let answer = send_event(&server, &ask, &[]);
    assert!(
        answer.as_ref().is_none_or(|(status, _)| *status != 200),
        "{answer:?}"
    );
    assert_eq!(server.wait_exit(), Some(101));
    assert!(fake.messages().is_empty());

    // Started again, Slack retries: the submission is recognised; one task, one message.
    let server = Server::start(&warden, TOKENS);
    wait_serving(&server);
    let (status, _) = send_event(&server, &ask, &[("X-Slack-Retry-Num", "1")]).unwrap();
    assert_eq!(status, 200);
    let messages = wait_for(&fake, "the answer after the restart", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(task_ids(&server).len(), 1);
    // A second retry after it was recorded: nothing.
    let (status, _) = send_event(&server, &ask, &[("X-Slack-Retry-Num", "2")]).unwrap();
    assert_eq!(status, 200);
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(fake.messages().len(), 1);
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

#[test]
fn a_user_groups_members_approve_as_slack_says_at_each_press() {
    let setup = ChangeSetup::with_keys("approver_groups = [\"S0APPROVERS\"]\n");
    let fake = &setup.fake;
    fake.set_usergroup("S0APPROVERS", &["UALICE"]);
    let server = Server::start(&setup.warden, TOKENS);
    server.register_with_checks("app", &setup.repo, &["bash check.sh"]);
    wait_serving(&server);
    let run = mention(
        "Ev0GROUPRUN",
        "UALICE",
        "1700000000.000400",
        "run make beta uppercase",
    );
    assert_eq!(send_event(&server, &run, &[]).unwrap().0, 200);
    let messages = wait_for(fake, "the proposal with buttons", |m| {
        m.iter().any(|m| !m.buttons().is_empty())
    });
    let proposal = messages[0].clone();
    let approval = proposal.buttons()[0].1.clone();

    // Root is an admin but not in the group (the default "every admin" no longer applies).
    assert_eq!(
        press(&server, "UROOT", &proposal, 0, "trigger-group-1"),
        200
    );
    let notices = wait_for_ephemerals(fake, 1);
    assert!(
        notices[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Refused: you are not one of this Warden's approvers"),
        "{notices:#?}"
    );
    // Alice is in the group, but only an admin decides: the service refuses her.
    assert_eq!(
        press(&server, "UALICE", &proposal, 0, "trigger-group-2"),
        200
    );
    let notices = wait_for_ephemerals(fake, 2);
    let refused = notices[1]["text"].as_str().unwrap();
    assert!(refused.starts_with("Refused"), "{refused}");
    let shown = server.get(ADMIN, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");

    // Root joins the group in Slack: the next press is decided, with no restart.
    fake.set_usergroup("S0APPROVERS", &["UALICE", "UROOT"]);
    assert_eq!(
        press(&server, "UROOT", &proposal, 0, "trigger-group-3"),
        200
    );
    wait_for(fake, "the publication", |m| {
        m.iter().any(|m| m.text.contains("Publication: pr_opened"))
    });
    assert_eq!(setup.github.fake.pulls().len(), 1);
    let asked = fake
        .calls()
        .iter()
        .filter(|c| *c == "usergroups.users.list")
        .count();
    assert_eq!(asked, 3, "once per press: {:?}", fake.calls());
    server.terminate();
}

#[test]
fn a_chat_that_cannot_start_is_reported_in_the_other_chat() {
    const TELEGRAM_TOKEN: &str = "123456:telegram-alert-token";
    let slack = SlackFake::start(BOT_TOKEN);
    let telegram = TelegramFake::start(TELEGRAM_TOKEN);
    let warden = with_slack_keys(
        Warden::faux(),
        &slack,
        "alerts_channel = \"C0OPS\"\n",
        "[telegram]\npoll_timeout_secs = 1\npoll_interval_ms = 100\n\
         [[telegram.users]]\nid = 1001\nname = \"alice\"\nrole = \"operator\"\n\
         [[telegram.users]]\nid = 1002\nname = \"root\"\nrole = \"admin\"\n",
    )
    .with("WARDEN_TELEGRAM_API_URL", &telegram.url());

    // Telegram refuses its token: Slack's alerts channel says so, naming the variable.
    let warden = warden.with("WARDEN_TELEGRAM_TOKEN", "123456:revoked-token");
    let server = Server::start(&warden, TOKENS);
    let messages = wait_for(&slack, "the alert in Slack", |m| {
        m.iter().any(|m| m.channel == "C0OPS")
    });
    let alert = messages.iter().find(|m| m.channel == "C0OPS").unwrap();
    let shown = visible(&alert.text);
    assert!(
        shown.contains("Telegram bot is not served") && shown.contains("WARDEN_TELEGRAM_TOKEN"),
        "{shown}"
    );
    assert!(!alert.text.contains("revoked-token"), "{}", alert.text);
    assert!(telegram.messages().is_empty());
    server.terminate();
    assert_eq!(slack.messages().len(), 1, "one alert per start");

    // Slack refuses its token: Telegram's admin (only) is told.
    let warden = warden
        .with("WARDEN_TELEGRAM_TOKEN", TELEGRAM_TOKEN)
        .with("WARDEN_SLACK_BOT_TOKEN", "xoxb-revoked");
    let server = Server::start(&warden, TOKENS);
    let sent = telegram
        .wait_for(WAIT, |m| !m.is_empty())
        .expect("the alert in Telegram");
    assert_eq!(sent.len(), 1, "{sent:#?}");
    assert_eq!(sent[0].chat_id, 1002, "admins only");
    let shown = sent[0].text.replace('\u{2060}', "");
    assert!(
        shown.contains("Slack app is not served") && shown.contains("WARDEN_SLACK_BOT_TOKEN"),
        "{shown}"
    );
    assert_eq!(slack.messages().len(), 1, "nothing more through Slack");
    server.terminate();

    // GitHub refuses the token, then the App is not installed where configured: both chats
    // are told, and neither report carries a credential.
    let repo = change_repo();
    let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
    github.fake.with_app("Iv1test", 42, 600);
    let warden = warden
        .with("WARDEN_SLACK_BOT_TOKEN", BOT_TOKEN)
        .with("WARDEN_GITHUB_API_URL", &github.fake.url())
        .with("WARDEN_GITHUB_TOKEN", "ghp_revoked_token_0123456789");
    let server = Server::start(&warden, TOKENS);
    let alerts = wait_for(&slack, "the GitHub alert in Slack", |m| {
        m.iter().filter(|m| m.channel == "C0OPS").count() == 2
    });
    let shown = visible(&alerts[1].text);
    assert!(
        shown.contains("GitHub refused WARDEN_GITHUB_TOKEN") && shown.contains("401"),
        "{shown}"
    );
    assert!(!shown.contains("ghp_revoked"), "{shown}");
    let checks = github.fake.credential_checks();
    assert_eq!(checks.len(), 1, "{checks:#?}");
    assert_eq!(checks[0].path, "/rate_limit");
    telegram
        .wait_for(WAIT, |m| m.len() == 2)
        .expect("the GitHub alert in Telegram");
    server.terminate();

    let config = warden.home.path().join("warden.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(
        &config,
        format!("[github.app]\nclient_id = \"Iv1test\"\ninstallation_id = 43\n{text}"),
    )
    .unwrap();
    let warden = warden.with(
        "WARDEN_GITHUB_APP_PRIVATE_KEY",
        warden_test_support::github_fake::APP_TEST_KEY_PEM,
    );
    let server = Server::start(&warden, TOKENS);
    let alerts = wait_for(&slack, "the GitHub App alert in Slack", |m| {
        m.iter().filter(|m| m.channel == "C0OPS").count() == 3
    });
    let shown = visible(&alerts[2].text);
    assert!(
        shown.contains("GitHub refused the GitHub App's key or installation")
            && shown.contains("404"),
        "{shown}"
    );
    assert!(!shown.contains("PRIVATE KEY"), "{shown}");
    server.terminate();
}

/// A press of the repository picker under `message`: `user` picks `repo`.
fn pick(server: &Server, user: &str, message: &PostedMessage, repo: &str, trigger: &str) -> u16 {
    let block = message
        .blocks
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["elements"][0]["type"] == "static_select")
        .expect("a picker")
        .clone();
    let payload = json!({
        "type": "block_actions", "trigger_id": trigger,
        "user": {"id": user}, "channel": {"id": message.channel},
        "container": {"type": "message", "message_ts": message.ts, "channel_id": message.channel},
        "message": {"ts": message.ts, "thread_ts": message.thread_ts},
        "actions": [{"type": "static_select", "action_id": block["elements"][0]["action_id"],
                     "block_id": block["block_id"],
                     "selected_option": {"text": {"type": "plain_text", "text": repo}, "value": repo}}],
    });
    let body = format!("payload={}", form_encode(&payload.to_string()));
    deliver_signed(
        server,
        "/webhooks/slack/interactions",
        "application/x-www-form-urlencoded",
        &body,
        now(),
        SIGNING_SECRET,
        &[],
    )
    .expect("the server answers a pick")
    .0
}

#[test]
fn a_request_naming_no_repository_offers_a_picker_only_its_author_answers_once() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    server.register("other", &repo);
    wait_serving(&server);

    // A channel with no default repository, a question naming none.
    let ask = mention(
        "Ev0PICK0001",
        "UALICE",
        "1700000000.000500",
        "what does retry_with_backoff do?",
    )
    .replace(CHANNEL, "CNODEFAULT");
    assert_eq!(send_event(&server, &ask, &[]).unwrap().0, 200);
    let messages = wait_for(&fake, "the picker", |m| !m.is_empty());
    let asked = messages[0].clone();
    assert_eq!(asked.channel, "CNODEFAULT");
    assert_eq!(asked.thread_ts.as_deref(), Some("1700000000.000500"));
    let options: Vec<&str> = asked.blocks[1]["elements"][0]["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["value"].as_str().unwrap())
        .collect();
    assert_eq!(options, ["app", "other"], "{:#?}", asked.blocks);
    assert!(task_ids(&server).is_empty());

    // Someone else's pick is refused to them alone.
    assert_eq!(pick(&server, "UROOT", &asked, "app", "trigger-pick-1"), 200);
    let notices = wait_for_ephemerals(&fake, 1);
    assert_eq!(notices[0]["user"], "UROOT");
    assert!(
        notices[0]["text"]
            .as_str()
            .unwrap()
            .contains("only the person who asked"),
        "{notices:#?}"
    );
    assert!(task_ids(&server).is_empty());

    // The author's pick submits the question about that repository, answered in the thread;
    // the picker says what was picked and loses its menu.
    assert_eq!(
        pick(&server, "UALICE", &asked, "app", "trigger-pick-2"),
        200
    );
    let messages = wait_for(&fake, "the answer", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["repos"][0]["name"], "app", "{task}");
    assert_eq!(task["prompt"], "what does retry_with_backoff do?", "{task}");
    let answer = messages
        .iter()
        .find(|m| m.text.contains("— completed"))
        .unwrap();
    assert_eq!(answer.thread_ts.as_deref(), Some("1700000000.000500"));
    let picker = wait_for(&fake, "the picker updated", |m| {
        m.iter()
            .any(|m| m.ts == asked.ts && m.text.contains("Repository"))
    })
    .into_iter()
    .find(|m| m.ts == asked.ts)
    .unwrap();
    assert!(
        !picker.blocks.to_string().contains("static_select"),
        "{:#?}",
        picker.blocks
    );

    // Picking again (the stale menu, a new press): nothing more.
    assert_eq!(
        pick(&server, "UALICE", &asked, "other", "trigger-pick-3"),
        200
    );
    let notices = wait_for_ephemerals(&fake, 2);
    assert!(
        notices[1]["text"]
            .as_str()
            .unwrap()
            .contains("made already"),
        "{notices:#?}"
    );
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

/// `body` signed at `timestamp` by Slack's own SDK (`slack_sdk.signature.SignatureVerifier`).
#[allow(clippy::disallowed_methods)] // the SDK is Python: run its interpreter
fn sdk_signature(python: &std::path::Path, secret: &str, timestamp: &str, body: &str) -> String {
    let script = "import sys\n\
        from slack_sdk.signature import SignatureVerifier\n\
        print(SignatureVerifier(sys.argv[1]).generate_signature(timestamp=sys.argv[2], body=sys.stdin.read()))";
    let mut child = std::process::Command::new(python)
        .args(["-c", script, secret, timestamp])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("the SDK's interpreter runs");
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), body.as_bytes()).unwrap();
    drop(child.stdin.take());
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_string()
}

#[test]
fn requests_signed_by_slacks_own_sdk_are_accepted_and_its_signature_under_another_secret_is_not() {
    let Some(python) = warden_test_support::mcp_python::python() else {
        return;
    };
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::faux(), &fake, "");
    let server = Server::start(&warden, TOKENS);
    let timestamp = now().to_string();
    let challenge =
        json!({"token": "t", "challenge": "sdk-signed-challenge", "type": "url_verification"})
            .to_string();
    // A press that names no action of Warden's: signed, read, acknowledged, nothing decided.
    let press = format!(
        "payload={}",
        form_encode(
            &json!({"type": "block_actions", "trigger_id": "sdk-1", "user": {"id": "UALICE"},
                            "actions": [{"action_id": "unknown", "value": "x"}]})
            .to_string()
        )
    );
    for (path, content_type, body) in [
        ("/webhooks/slack", "application/json", challenge.as_str()),
        (
            "/webhooks/slack/interactions",
            "application/x-www-form-urlencoded",
            press.as_str(),
        ),
    ] {
        let post = |secret: &str| {
            let signature = sdk_signature(&python, secret, &timestamp, body);
            assert!(signature.starts_with("v0="), "{signature}");
            server
                .post_raw(
                    path,
                    content_type,
                    body,
                    &[
                        ("X-Slack-Request-Timestamp", timestamp.as_str()),
                        ("X-Slack-Signature", signature.as_str()),
                    ],
                )
                .unwrap()
        };
        let (status, answer) = post(SIGNING_SECRET);
        assert_eq!(status, 200, "{path}: {answer}");
        if path == "/webhooks/slack" {
            assert_eq!(
                serde_json::from_str::<Value>(&answer).unwrap()["challenge"],
                "sdk-signed-challenge"
            );
        }
        let (status, answer) = post("another-signing-secret");
        assert_eq!(status, 401, "{path}: {answer}");
    }
    assert!(fake.messages().is_empty() && fake.ephemerals().is_empty());
    server.terminate();
}

#[test]
fn a_crash_after_slack_accepted_a_message_finds_it_by_its_metadata_instead_of_posting_twice() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");

    // Killed after Slack accepted the task's first message, before its ts was recorded.
    let server = Server::start_with(&warden, TOKENS, &[("WARDEN_FAILPOINT", "slack_after_send")]);
    server.register("app", &repo);
    wait_serving(&server);
    let ask = mention(
        "Ev0AFTERSEND",
        "UALICE",
        "1700000000.000600",
        "why does retry_with_backoff double?",
    );
    let _ = send_event(&server, &ask, &[]);
    assert_eq!(server.wait_exit(), Some(101));
    let posted = fake.messages();
    assert_eq!(posted.len(), 1, "{posted:#?}");
    assert_eq!(
        posted[0].metadata["event_type"], "warden_message",
        "{posted:#?}"
    );
    // Another app's earlier message in the thread claims the same id: never adopted.
    fake.post_as_another_app(
        "CTEAM",
        "1700000000.000600",
        "not Warden's",
        posted[0].metadata.clone(),
    );

    // Started again: the copy is looked for in the thread by its metadata, adopted and edited
    // in place (the task may have finished before the first send: then nothing changes).
    let server = Server::start(&warden, TOKENS);
    let deadline = std::time::Instant::now() + WAIT;
    while !fake.calls().iter().any(|c| c == "conversations.replies") {
        assert!(
            std::time::Instant::now() < deadline,
            "the copy was never looked for: {:?}",
            fake.calls()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let messages = wait_for(&fake, "the answer after the restart", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    // Give a second post, if one were coming, the time to show.
    std::thread::sleep(Duration::from_millis(1500));
    drop(messages);
    let messages: Vec<PostedMessage> = fake
        .messages()
        .into_iter()
        .filter(|m| m.user == BOT_USER)
        .collect();
    assert_eq!(messages.len(), 1, "posted once: {messages:#?}");
    assert_eq!(messages[0].ts, posted[0].ts);
    assert!(messages[0].text.contains("— completed"), "{messages:#?}");
    let foreign = &fake.messages()[0];
    assert_eq!(
        foreign.history,
        ["not Warden's"],
        "never edited: {foreign:#?}"
    );
    let posts = fake
        .calls()
        .iter()
        .filter(|c| *c == "chat.postMessage")
        .count();
    assert_eq!(posts, 1, "{:?}", fake.calls());
    assert_eq!(task_ids(&server).len(), 1);
    server.terminate();
}

/// A mention by `user` in `thread` (a reply in that thread).
fn mention_in_thread(event_id: &str, user: &str, ts: &str, thread: &str, text: &str) -> String {
    let mut event: Value = serde_json::from_str(&mention(event_id, user, ts, text)).unwrap();
    event["event"]["thread_ts"] = json!(thread);
    event.to_string()
}

#[test]
fn a_mention_in_a_waiting_tasks_thread_answers_it_once_even_when_slack_retries() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "ask_user",
            json!({"question": "Which retry policy: the HTTP client's or the queue's?"}),
        ),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);

    let ask = mention(
        "Ev0THREAD01",
        "UALICE",
        "1700000000.000700",
        "how does retrying work?",
    );
    assert_eq!(send_event(&server, &ask, &[]).unwrap().0, 200);
    let messages = wait_for(&fake, "the agent's question", |m| {
        m.iter().any(|m| m.text.contains("The agent asks"))
    });
    assert!(
        visible(&messages[0].text).contains("Answer by mentioning the app in this thread"),
        "{}",
        messages[0].text
    );
    let ids = task_ids(&server);
    assert_eq!(server.task(ADMIN, &ids[0])["status"], "waiting_input");

    // The answer, in the thread, to a serve killed after answering and before recording the
    // event; started again, Slack retries the event: the task has its answer once, and no
    // task is started from it.
    server.terminate();
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "slack_before_record")],
    );
    wait_serving(&server);
    let answer = mention_in_thread(
        "Ev0THREAD02",
        "UALICE",
        "1700000000.000800",
        "1700000000.000700",
        "the HTTP client's",
    );
    let _ = send_event(&server, &answer, &[]);
    assert_eq!(server.wait_exit(), Some(101));
    let server = Server::start(&warden, TOKENS);
    wait_serving(&server);
    assert_eq!(
        send_event(&server, &answer, &[("X-Slack-Retry-Num", "1")])
            .unwrap()
            .0,
        200
    );
    wait_for(&fake, "the answer after the answer", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    let second = model.requests()[1].body.to_string();
    assert!(second.contains("the HTTP client's"), "{second}");
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(
        task_ids(&server).len(),
        1,
        "no task from the answer or its retry"
    );
    assert_eq!(model.requests().len(), 2);
    assert_eq!(fake.messages().len(), 1, "{:#?}", fake.messages());
    server.terminate();
}

#[test]
fn a_mention_in_a_running_tasks_thread_reaches_its_agent_at_the_next_turn_once() {
    let repo = sample_repo();
    let thinking = warden_test_support::model_server::Gate::new();
    let model = ScriptedModelServer::start_blocking(vec![
        call("read_file", json!({"path": "src/lib.rs"})).held(&thinking),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = SlackFake::start(BOT_TOKEN);
    let warden = with_slack(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    wait_serving(&server);

    let ask = mention(
        "Ev0STEER01",
        "UALICE",
        "1700000000.000900",
        "how does retrying work?",
    );
    assert_eq!(send_event(&server, &ask, &[]).unwrap().0, 200);
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    while model.requests().is_empty() {
        assert!(std::time::Instant::now() < deadline, "{}", server.stderr());
        std::thread::sleep(Duration::from_millis(20));
    }
    // Said in the thread while the agent thinks, and Slack delivers it twice.
    let said = mention_in_thread(
        "Ev0STEER02",
        "UALICE",
        "1700000000.001000",
        "1700000000.000900",
        "only the HTTP client, please",
    );
    assert_eq!(send_event(&server, &said, &[]).unwrap().0, 200);
    assert_eq!(
        send_event(&server, &said, &[("X-Slack-Retry-Num", "1")])
            .unwrap()
            .0,
        200
    );
    thinking.open();
    wait_for(&fake, "the answer", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    let second = model.requests()[1].body.to_string();
    assert_eq!(
        second.matches("only the HTTP client, please").count(),
        1,
        "{second}"
    );
    assert_eq!(task_ids(&server).len(), 1, "no task from the message");
    server.terminate();
}
