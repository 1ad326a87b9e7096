//! The Telegram bot of `warden serve`, as its users drive it, against a local fake of the Bot
//! API (`warden_test_support::telegram_fake`): `/ask` yields one message that ends as the cited
//! answer; `/run` yields the proposal with its hash and Approve/Reject buttons that only an
//! admin's press decides, and Approve opens one pull request on the GitHub fake; a user not on
//! the allow-list and a group chat are refused; a replayed update does nothing; `serve`
//! killed after handling an update and before recording it still gives one task and one
//! message, and killed between Telegram accepting a message and recording its id gives the
//! one documented duplicate.

use std::time::Duration;

use serde_json::json;
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::{openai, ScriptedModelServer};
use warden_test_support::telegram_fake::{SentMessage, TelegramFake};

use super::server_harness::{
    call, change_repo, sample_repo, submit_answer, uppercase_beta, GithubRemote, Server, Token,
    ADMIN, ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
const BOT_TOKEN: &str = "123456:telegram-test-token";
const GITHUB_TOKEN: &str = "ghp_telegram_fake_token_0123456789";
const ALICE_ID: i64 = 1001;
const ROOT_ID: i64 = 1002;
const STRANGER_ID: i64 = 999;
const WAIT: Duration = Duration::from_secs(90);

const TELEGRAM_TOML: &str = "[telegram]\npoll_timeout_secs = 1\npoll_interval_ms = 100\n\
[[telegram.users]]\nid = 1001\nname = \"alice\"\nrole = \"operator\"\n\
[[telegram.users]]\nid = 1002\nname = \"root\"\nrole = \"admin\"\n";

fn with_telegram(warden: Warden, fake: &TelegramFake, extra_toml: &str) -> Warden {
    std::fs::write(
        warden.home.path().join("warden.toml"),
        format!("{TELEGRAM_TOML}{extra_toml}"),
    )
    .unwrap();
    warden
        .with("WARDEN_TELEGRAM_TOKEN", BOT_TOKEN)
        .with("WARDEN_TELEGRAM_API_URL", &fake.url())
}

fn wait_for(
    fake: &TelegramFake,
    what: &str,
    done: impl Fn(&[SentMessage]) -> bool,
) -> Vec<SentMessage> {
    fake.wait_for(WAIT, done)
        .unwrap_or_else(|| panic!("{what}: {:#?}", fake.messages()))
}

/// What a reader sees: the invisible word joiners that keep Telegram from linking removed.
fn visible(text: &str) -> String {
    text.replace('\u{2060}', "")
}

fn task_ids(server: &Server) -> Vec<String> {
    server.get(ADMIN, "/v1/tasks")["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect()
}

/// Waits until the bot has asked for updates `polls` more times (so what was injected before
/// has been handled).
fn let_it_poll(fake: &TelegramFake, polls: usize) {
    let count = || fake.calls().iter().filter(|c| *c == "getUpdates").count();
    let target = count() + polls;
    let deadline = std::time::Instant::now() + WAIT;
    while count() < target {
        assert!(
            std::time::Instant::now() < deadline,
            "the bot stopped polling"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn ask_yields_one_cited_answer_and_strangers_groups_and_replays_get_nothing() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![openai::tool_call(
        "submit_answer",
        &submit_answer("src/lib.rs", 31, 33),
    )]);
    let fake = TelegramFake::start(BOT_TOKEN);
    let warden = with_telegram(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);
    let head = repo.git(&["rev-parse", "HEAD"]);

    // Someone not on the allow-list is told so, and nothing is submitted.
    fake.send_private(STRANGER_ID, "/ask app what does retry_with_backoff do?");
    let messages = wait_for(&fake, "the stranger is refused", |m| {
        m.iter().any(|m| m.chat_id == STRANGER_ID)
    });
    let refusal = &messages
        .iter()
        .find(|m| m.chat_id == STRANGER_ID)
        .unwrap()
        .text;
    assert!(
        refusal.contains("999 is not on this Warden's allow-list"),
        "{refusal}"
    );
    // An allow-listed user in a group chat: ignored.
    fake.send_in_group(ALICE_ID, -500, "/ask app what does retry_with_backoff do?");

    let ask = fake.send_private(ALICE_ID, "/ask app what does retry_with_backoff do?");
    let messages = wait_for(&fake, "the answer", |m| {
        m.iter()
            .any(|m| m.chat_id == ALICE_ID && m.text.contains("— completed"))
    });
    let mine: Vec<&SentMessage> = messages.iter().filter(|m| m.chat_id == ALICE_ID).collect();
    assert_eq!(mine.len(), 1, "one message per task: {mine:#?}");
    let answer = &mine[0].text;
    assert!(
        answer.contains("retry_with_backoff doubles the attempts"),
        "{answer}"
    );
    assert!(
        visible(answer).contains(&format!("app/src/lib.rs:31-33 @ {}", &head[..12])),
        "{answer}"
    );
    assert!(mine[0].reply_markup.is_none(), "no buttons on an answer");
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1, "only alice's private /ask became a task");
    assert!(answer.contains(&ids[0]), "{answer}");
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["owner"], "alice");

    // Telegram delivering the same update again: nothing happens.
    let before = fake.messages();
    fake.replay(ask);
    let_it_poll(&fake, 3);
    assert_eq!(task_ids(&server).len(), 1);
    std::thread::sleep(Duration::from_millis(700));
    assert_eq!(fake.messages(), before);
    assert!(
        fake.messages_in(-500).is_empty(),
        "nothing said in the group"
    );

    // The other commands answer in the chat.
    fake.send_private(ALICE_ID, "/tasks");
    fake.send_private(ALICE_ID, "/repos");
    let messages = wait_for(&fake, "/tasks and /repos", |m| {
        m.iter().filter(|m| m.chat_id == ALICE_ID).count() == 3
    });
    let texts: Vec<&str> = messages
        .iter()
        .filter(|m| m.chat_id == ALICE_ID)
        .map(|m| m.text.as_str())
        .collect();
    assert!(
        texts[1].contains(&ids[0]) && texts[1].contains("completed"),
        "{texts:?}"
    );
    assert!(texts[2].starts_with("app"), "{texts:?}");
    server.terminate();
}

/// A registered `app` whose `origin` is a bare remote, a GitHub fake for `acme/widgets`, a model
/// making the checked edit for each of `tasks` changes, and the bot.
struct ChangeSetup {
    repo: TempRepo,
    github: GithubRemote,
    _model: ScriptedModelServer,
    fake: TelegramFake,
    warden: Warden,
}

impl ChangeSetup {
    fn new(tasks: usize) -> ChangeSetup {
        let repo = change_repo();
        let github = GithubRemote::for_repo(&repo, GITHUB_TOKEN);
        let mut script = Vec::new();
        for _ in 0..tasks {
            script.push(uppercase_beta());
            script.push(call(
                "submit_change",
                json!({"summary": "Uppercase beta\n\nThe check wants BETA. Ask @someone at evil.com"}),
            ));
        }
        let model = ScriptedModelServer::start_blocking(script);
        let fake = TelegramFake::start(BOT_TOKEN);
        let warden = with_telegram(
            Warden::openai(&model.url())
                .with("WARDEN_GITHUB_API_URL", &github.fake.url())
                .with("WARDEN_GITHUB_TOKEN", GITHUB_TOKEN),
            &fake,
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

fn buttons(message: &SentMessage) -> Vec<String> {
    message.reply_markup.as_ref().map_or(Vec::new(), |markup| {
        markup["inline_keyboard"][0]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["callback_data"].as_str().unwrap().to_string())
            .collect()
    })
}

#[test]
fn run_shows_the_proposal_and_only_an_admins_approve_opens_one_pull_request() {
    let setup = ChangeSetup::new(1);
    let fake = &setup.fake;
    let server = Server::start(&setup.warden, TOKENS);
    server.register_with_checks("app", &setup.repo, &["bash check.sh"]);

    // Alice (an operator) asks for the change: her message shows the proposal without buttons;
    // the admin gets the approval with buttons.
    fake.send_private(ALICE_ID, "/run app make beta uppercase");
    let messages = wait_for(fake, "the approval request", |m| {
        m.iter()
            .any(|m| m.chat_id == ROOT_ID && !buttons(m).is_empty())
    });
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 1);
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(task["status"], "waiting_approval", "{task}");
    let hash = task["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let approval = task["result"]["approval"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let alices = wait_for(fake, "alice's proposal", |m| {
        m.iter()
            .any(|m| m.chat_id == ALICE_ID && m.text.contains("waiting_approval"))
    });
    let alices: Vec<&SentMessage> = alices.iter().filter(|m| m.chat_id == ALICE_ID).collect();
    assert_eq!(alices.len(), 1, "{alices:#?}");
    let shown = &alices[0].text;
    assert!(shown.contains(&format!("Hash: {hash}")), "{shown}");
    assert!(
        visible(shown).contains("✓ bash check.sh (exit 0"),
        "{shown}"
    );
    assert!(shown.contains("Waiting for an admin"), "{shown}");
    assert!(buttons(alices[0]).is_empty(), "an operator gets no buttons");
    // The model's text cannot mention or link.
    assert!(
        !shown.contains("@someone") && !shown.contains("evil.com"),
        "{shown}"
    );
    let request = messages.iter().find(|m| m.chat_id == ROOT_ID).unwrap();
    assert!(
        request.text.contains(&format!("Hash: {hash}")),
        "{}",
        request.text
    );
    let data = buttons(request);
    assert_eq!(data, [format!("a:{approval}"), format!("r:{approval}")]);
    assert!(data.iter().all(|d| d.len() <= 64));

    // Alice pressing the admin's button (the data is no secret): refused, nothing decided.
    fake.press(ALICE_ID, ALICE_ID, alices[0].message_id, &data[0]);
    let deadline = std::time::Instant::now() + WAIT;
    while fake.callback_answers().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the press was not answered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let answer = fake.callback_answers()[0]["text"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(answer.starts_with("Refused"), "{answer}");
    let shown = server.get(ADMIN, &format!("/v1/approvals/{approval}"));
    assert_eq!(shown["status"], "pending", "{shown}");

    // The admin approves: the proposal is published once, and both messages say so.
    fake.press(ROOT_ID, ROOT_ID, request.message_id, &data[0]);
    let messages = wait_for(fake, "the publication", |m| {
        m.iter()
            .filter(|m| m.text.contains("Publication: pr_opened"))
            .count()
            == 2
    });
    let pulls = setup.github.fake.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr_url = pulls[0]["html_url"].as_str().unwrap();
    for message in &messages {
        assert!(
            buttons(message).is_empty(),
            "buttons gone once decided: {message:#?}"
        );
    }
    let alices = messages.iter().find(|m| m.chat_id == ALICE_ID).unwrap();
    assert!(alices.text.contains(pr_url), "{}", alices.text);
    assert!(
        alices.text.contains("Approval approved by root"),
        "{}",
        alices.text
    );
    assert_eq!(
        fake.messages().len(),
        2,
        "one message each, edited in place"
    );
    let task = server.task(ADMIN, &ids[0]);
    assert_eq!(
        task["result"]["publication"]["status"], "pr_opened",
        "{task}"
    );
    server.terminate();
}

#[test]
fn a_crash_before_recording_an_update_gives_one_task_and_a_crash_after_a_send_one_duplicate() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = TelegramFake::start(BOT_TOKEN);
    let warden = with_telegram(Warden::openai(&model.url()), &fake, "");

    // Killed after the update was handled (the task submitted), before it was recorded.
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "telegram_before_record")],
    );
    server.register("app", &repo);
    fake.send_private(ALICE_ID, "/ask app what does retry_with_backoff do?");
    assert_eq!(server.wait_exit(), Some(101));
    assert!(fake.messages().is_empty());
    // Started again: Telegram delivers the update again (its offset was never acknowledged),
    // the submission is recognised, and the one task gets one message.
    let server = Server::start(&warden, TOKENS);
    let messages = wait_for(&fake, "the answer after the restart", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(fake.unacknowledged(), 0);
    server.terminate();

    // Killed after Telegram accepted a message, before its id was recorded: the one window
    // Telegram's API cannot close. The message is sent again (never lost), so it shows twice,
    // and later edits go to the copy whose id was recorded.
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[("WARDEN_FAILPOINT", "telegram_after_send")],
    );
    fake.send_private(ALICE_ID, "/ask app what does retry_with_backoff do? again");
    assert_eq!(server.wait_exit(), Some(101));
    let after_crash = fake.messages();
    assert_eq!(after_crash.len(), 2, "{after_crash:#?}");
    let server = Server::start(&warden, TOKENS);
    let ids = task_ids(&server);
    assert_eq!(ids.len(), 2);
    let second = ids
        .iter()
        .find(|id| !messages[0].text.contains(id.as_str()))
        .unwrap();
    let copies_of = |messages: &[SentMessage]| {
        messages
            .iter()
            .filter(|m| m.text.contains(second.as_str()))
            .count()
    };
    wait_for(&fake, "the message sent again", |m| copies_of(m) == 2);
    wait_for(&fake, "the second answer", |m| {
        m.iter()
            .any(|m| m.text.contains(second.as_str()) && m.text.contains("— completed"))
    });
    // And no third: the copy sent again was recorded.
    let_it_poll(&fake, 3);
    std::thread::sleep(Duration::from_millis(700));
    let copies = fake.messages();
    assert_eq!(
        copies_of(&copies),
        2,
        "exactly the one documented duplicate: {copies:#?}"
    );
    assert_eq!(copies.len(), 3, "{copies:#?}");
    server.terminate();
}

const WEBHOOK_SECRET: &str = "tg-webhook-secret_0123456789";

/// A port nothing listens on now, for a server that must keep its address across restarts
/// (Telegram was told the webhook URL).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn webhook_mode_serves_updates_once_refuses_forged_ones_and_survives_a_crash_before_recording() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = TelegramFake::start(BOT_TOKEN);
    let listen = format!("127.0.0.1:{}", free_port());
    let webhook = format!("http://{listen}/webhooks/telegram");
    let warden = with_telegram(Warden::openai(&model.url()), &fake, "");
    // `webhook_url` in `[telegram]` itself (before its `[[telegram.users]]` tables).
    std::fs::write(
        warden.home.path().join("warden.toml"),
        TELEGRAM_TOML.replacen(
            "[telegram]\n",
            &format!("[telegram]\nwebhook_url = \"{webhook}\"\n"),
            1,
        ),
    )
    .unwrap();
    let warden = warden.with("WARDEN_TELEGRAM_WEBHOOK_SECRET", WEBHOOK_SECRET);
    let env = [("WARDEN_LISTEN", listen.as_str())];

    // Killed after the first update was handled (its task submitted), before it was recorded:
    // the webhook never answered, so Telegram delivers it again to the restarted server.
    let server = Server::start_with(
        &warden,
        TOKENS,
        &[
            ("WARDEN_LISTEN", listen.as_str()),
            ("WARDEN_FAILPOINT", "telegram_before_record"),
        ],
    );
    server.register("app", &repo);
    let deadline = std::time::Instant::now() + WAIT;
    while fake.webhook_url().as_deref() != Some(webhook.as_str()) {
        assert!(std::time::Instant::now() < deadline, "no setWebhook");
        std::thread::sleep(Duration::from_millis(50));
    }
    let first = fake.send_private(ALICE_ID, "/ask app what does retry_with_backoff do?");
    assert_eq!(server.wait_exit(), Some(101));
    assert!(fake.messages().is_empty());
    assert_eq!(fake.unacknowledged(), 1, "the update is still Telegram's");

    let server = Server::start_with(&warden, TOKENS, &env);
    let messages = wait_for(&fake, "the answer after the restart", |m| {
        m.iter().any(|m| m.text.contains("— completed"))
    });
    assert_eq!(messages.len(), 1, "{messages:#?}");
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(fake.unacknowledged(), 0);
    let attempts = fake.webhook_attempts();
    assert!(
        attempts
            .iter()
            .any(|&(id, status)| id == first && status == 200),
        "{attempts:?}"
    );
    // Webhook mode never polls (Telegram would refuse getUpdates with a webhook set).
    assert!(
        !fake.calls().iter().any(|c| c == "getUpdates"),
        "{:?}",
        fake.calls()
    );

    // Telegram delivering the same update again (a replay): nothing more.
    fake.replay(first);
    let deadline = std::time::Instant::now() + WAIT;
    while fake
        .webhook_attempts()
        .iter()
        .filter(|&&(id, status)| id == first && status == 200)
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the replay was not delivered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(task_ids(&server).len(), 1);

    // Forged deliveries: a wrong or missing secret is 401 and submits nothing; a right secret
    // with a body that is no update object is 400.
    let forged = json!({
        "update_id": 990_001,
        "message": {
            "message_id": 1, "date": 1_700_000_000, "text": "/ask app forged",
            "from": {"id": ROOT_ID, "is_bot": false, "first_name": "R"},
            "chat": {"id": ROOT_ID, "type": "private"},
        }
    })
    .to_string();
    for headers in [
        vec![("x-telegram-bot-api-secret-token", "wrong-secret")],
        vec![(
            "x-telegram-bot-api-secret-token",
            &WEBHOOK_SECRET[..WEBHOOK_SECRET.len() - 1],
        )],
        vec![],
    ] {
        let (status, body) = server
            .post_raw("/webhooks/telegram", "application/json", &forged, &headers)
            .unwrap();
        assert_eq!(status, 401, "{headers:?}: {body}");
    }
    let (status, body) = server
        .post_raw(
            "/webhooks/telegram",
            "application/json",
            "[1, 2]",
            &[("x-telegram-bot-api-secret-token", WEBHOOK_SECRET)],
        )
        .unwrap();
    assert_eq!(status, 400, "{body}");
    assert_eq!(task_ids(&server).len(), 1, "nothing forged was submitted");
    assert_eq!(fake.messages().len(), 1);
    server.terminate();

    // Without `webhook_url` the bot removes the webhook and polls again.
    std::fs::write(warden.home.path().join("warden.toml"), TELEGRAM_TOML).unwrap();
    let server = Server::start(&warden, TOKENS);
    let deadline = std::time::Instant::now() + WAIT;
    while fake.webhook_url().is_some() {
        assert!(std::time::Instant::now() < deadline, "no deleteWebhook");
        std::thread::sleep(Duration::from_millis(50));
    }
    let second = fake.send_private(ALICE_ID, "/ask app and once more?");
    wait_for(&fake, "the polled answer", |m| {
        m.iter().filter(|m| m.text.contains("— completed")).count() == 2
    });
    let calls = fake.calls();
    let deleted = calls.iter().position(|c| c == "deleteWebhook").unwrap();
    let polled = calls.iter().position(|c| c == "getUpdates").unwrap();
    assert!(deleted < polled, "{calls:?}");
    assert!(
        !fake.webhook_attempts().iter().any(|&(id, _)| id == second),
        "polled, not pushed"
    );
    assert_eq!(task_ids(&server).len(), 2);
    server.terminate();
}

#[test]
fn a_question_the_agent_asks_is_answered_with_answer_and_the_task_completes() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "ask_user",
            json!({"question": "Which retry policy: the HTTP client's or the queue's?"}),
        ),
        openai::tool_call("submit_answer", &submit_answer("src/lib.rs", 31, 33)),
    ]);
    let fake = TelegramFake::start(BOT_TOKEN);
    let warden = with_telegram(Warden::openai(&model.url()), &fake, "");
    let server = Server::start(&warden, TOKENS);
    server.register("app", &repo);

    fake.send_private(ALICE_ID, "/ask app how does retrying work?");
    let messages = wait_for(&fake, "the agent's question", |m| {
        m.iter().any(|m| m.text.contains("The agent asks"))
    });
    let asked = messages
        .iter()
        .find(|m| m.text.contains("The agent asks"))
        .unwrap();
    let ids = task_ids(&server);
    let task = &ids[0];
    assert!(
        asked.text.contains(&format!("/answer {task} YOUR ANSWER")),
        "{}",
        asked.text
    );

    // Incomplete: the usage line, nothing changes.
    fake.send_private(ALICE_ID, &format!("/answer {task}"));
    wait_for(&fake, "the usage line", |m| {
        m.iter()
            .any(|m| m.text.contains("/answer TASK YOUR ANSWER"))
    });
    assert_eq!(server.task(ADMIN, task)["status"], "waiting_input");

    fake.send_private(ALICE_ID, &format!("/answer {task} the HTTP client's"));
    wait_for(&fake, "the answer after the answer", |m| {
        m.iter()
            .any(|m| m.message_id == asked.message_id && m.text.contains("— completed"))
    });
    let done = server.task(ADMIN, task);
    assert_eq!(done["status"], "completed", "{done}");
    // The model saw the answer.
    let second = &model.requests()[1].body.to_string();
    assert!(second.contains("the HTTP client's"), "{second}");
    // A task no longer waiting is not answered again.
    fake.send_private(ALICE_ID, &format!("/answer {task} once more"));
    wait_for(&fake, "the refusal", |m| {
        m.iter()
            .any(|m| m.text.starts_with("Refused") && m.text.contains("waiting for input"))
    });
    assert_eq!(task_ids(&server).len(), 1);
    assert_eq!(model.requests().len(), 2);
    server.terminate();
}
