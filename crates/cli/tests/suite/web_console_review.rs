//! The web console read as a reviewer reads it, in real headless Chromium against the real
//! `warden serve` and a scripted model: the new-task form shows each kind's fields; an answer's
//! Markdown is rendered (a fenced block highlighted, the agent's link only text) and its cited
//! lines are highlighted with their numbers; times are in the browser's zone; a change with a
//! long prompt and a long line is reviewed — validations and the per-file diff before the
//! decision, the hash copied with its button, the connection labelled "waiting for approval" —
//! on a 390 px wide screen without scrolling sideways; approving without ticking the box that
//! names the hash is refused by the server, with it the proposal is published (the timeline
//! showing each check as it ran and each publication step); the task list
//! shows cost ("unpriced") and relative times; `/usage` draws its charts. Every page visited has
//! no axe-core violation (WCAG 2.x A/AA and best practices) when `WARDEN_TEST_AXE` names
//! axe-core (`.ci/axe-core.sh`; CI requires it). Screenshots go to `WARDEN_TEST_ARTEFACTS`.

use std::time::Duration;

use serde_json::{json, Value};
use warden_test_support::browser::{artefact_dir, axe_core, Browser};
use warden_test_support::model_server::ScriptedModelServer;

use super::server_harness::{
    call, change_repo, sample_repo, settled, uppercase_beta, GithubRemote, Server, Token, ADMIN,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];
const GITHUB_TOKEN: &str = "ghp_console_fake_token_0123456789";
const WAIT: Duration = Duration::from_secs(90);
/// The zone the browser's pages see: no daylight saving time, half an hour off any UTC hour.
const ZONE: &str = "Asia/Kolkata";

/// Fails with every violation axe-core finds on the page (nothing without axe-core).
fn assert_accessible(browser: &Browser, axe: Option<&str>, page: &str) {
    let Some(axe) = axe else { return };
    let violations = browser.axe_violations(axe);
    assert!(
        violations.is_empty(),
        "{page}: {} axe-core violation(s):\n{}",
        violations.len(),
        serde_json::to_string_pretty(&violations).unwrap()
    );
}

fn script(browser: &Browser, body: &str) -> Value {
    browser.execute(body, json!([]))
}

fn wait_for_script(browser: &Browser, body: &str, wanted: &Value, what: &str) {
    let seen = warden_test_support::wait_until(WAIT, || {
        Some(()).filter(|_| &script(browser, body) == wanted)
    });
    assert!(
        seen.is_some(),
        "{what} never read {wanted}:\n{}",
        browser.page_text()
    );
}

fn wait_for_status(browser: &Browser, status: &str) {
    wait_for_script(
        browser,
        "const b = document.querySelector('main p span.badge'); return b ? b.dataset.status : null;",
        &json!(status),
        "the status badge",
    );
}

/// Whether the element matching `selector` is displayed.
fn shown(browser: &Browser, selector: &str) -> bool {
    let found = browser.execute(
        "const e = document.querySelector(arguments[0]); \
         return e ? e.getClientRects().length > 0 : null;",
        json!([selector]),
    );
    found
        .as_bool()
        .unwrap_or_else(|| panic!("no {selector} on the page"))
}

fn button(browser: &Browser, text: &str) -> warden_test_support::browser::Element {
    browser
        .find_all("button")
        .into_iter()
        .find(|b| browser.text(b) == text)
        .unwrap_or_else(|| panic!("no button {text:?}:\n{}", browser.page_text()))
}

/// How far the page is wider than the window, and its widest element when it is.
fn overflow(browser: &Browser) -> (i64, Value) {
    let overflow = script(
        browser,
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
    );
    let widest = script(
        browser,
        "let worst = null; for (const e of document.querySelectorAll('body *')) { \
           const r = e.getBoundingClientRect(); \
           if (r.right > document.documentElement.clientWidth + 1 && (!worst || r.right > worst.r)) \
             worst = {r: r.right, tag: e.tagName, cls: e.className}; } return worst;",
    );
    (overflow.as_i64().unwrap(), widest)
}

#[test]
fn the_console_reads_as_code_fits_a_phone_and_has_no_accessibility_violations() {
    let Some(browser) = Browser::start_with_env(&[("TZ", ZONE)]) else {
        return;
    };
    let axe = axe_core();
    let axe = axe.as_deref();
    let docs = sample_repo();
    let app = change_repo();
    let github = GithubRemote::for_repo(&app, GITHUB_TOKEN);
    let long_token = "x".repeat(300);
    let retry_rs = format!(
        "// Retry with backoff.\npub fn next_delay(attempt: u32) -> u64 {{\n    \
         let base: u64 = 100; /* ms */\n    base * 2u64.pow(attempt)\n}}\n\
         pub const TABLE: &str = \"{long_token}\";\n"
    );
    let model = ScriptedModelServer::start_blocking(vec![
        call(
            "submit_answer",
            json!({
                "summary": "Retry **doubles** the attempts:\n\n```rust\nlet next = attempts * 2;\n```\n\n\
                            See [the docs](https://example.com/retry).",
                "claims": [{"text": "it `doubles` its input", "basis": "observed",
                            "evidence": [{"path": "src/lib.rs", "start_line": 31, "end_line": 33}]}]
            }),
        ),
        call(
            "write_file",
            json!({"path": "src/retry.rs", "content": retry_rs}),
        ),
        uppercase_beta(),
        call(
            "submit_change",
            json!({"summary": "Uppercase beta\n\nAlso adds `next_delay`."}),
        ),
    ]);
    let warden = Warden::openai(&model.url())
        .with("WARDEN_GITHUB_API_URL", &github.fake.url())
        .with("WARDEN_GITHUB_TOKEN", GITHUB_TOKEN);
    std::fs::write(
        warden.home.path().join("warden.toml"),
        "[[publish]]\nrepo = \"app\"\ngithub = \"acme/widgets\"\n",
    )
    .unwrap();
    let server = Server::start(&warden, TOKENS);
    server.register("docs", &docs);
    server.register_with_checks("app", &app, &["bash check.sh"]);
    let url = server.url();

    browser.goto(&format!("{url}/sign-in"));
    assert_accessible(&browser, axe, "the sign-in page");
    browser.type_into(&browser.find("input[name=token]").unwrap(), ADMIN);
    browser.click(&button(&browser, "Sign in with token"));
    wait_for_script(
        &browser,
        "const h = document.querySelector('h1'); return h ? h.textContent : null;",
        &json!("Tasks"),
        "the heading",
    );
    assert_accessible(&browser, axe, "the empty task list");

    // The new-task form shows only the chosen kind's fields.
    browser.goto(&format!("{url}/new"));
    assert!(shown(&browser, "textarea[name=prompt]"));
    assert!(
        !shown(&browser, "textarea[name=checks]"),
        "a question has no checks"
    );
    assert!(!shown(&browser, "input[name=select]"));
    assert!(!shown(&browser, "input[name=publish]"));
    assert_accessible(&browser, axe, "the new-task form");
    browser.click(&browser.find("input[name=kind][value=change]").unwrap());
    assert!(shown(&browser, "textarea[name=checks]"));
    assert!(shown(&browser, "input[name=publish]"));
    assert!(
        !shown(&browser, "input[name=select]"),
        "a change selects no packages"
    );
    browser.click(&browser.find("input[name=kind][value=maintain]").unwrap());
    assert!(shown(&browser, "input[name=select]"));

    // A question: its Markdown rendered, its citation highlighted with line numbers.
    browser.click(&browser.find("input[name=kind][value=question]").unwrap());
    browser.execute(
        "document.querySelector('select[name=repo]').value = 'docs';",
        json!([]),
    );
    browser.type_into(
        &browser.find("textarea[name=prompt]").unwrap(),
        "How does retry work?",
    );
    browser.click(&button(&browser, "Submit"));
    wait_for_status(&browser, "completed");
    let strong = browser.wait_for(".md strong", WAIT, |t| t == "doubles");
    assert_eq!(browser.text(&strong), "doubles");
    let block = browser.find(".md pre.md-code").expect("the fenced block");
    assert!(browser.text(&block).contains("let next = attempts * 2;"));
    assert!(
        browser.find(".md pre.md-code i.k").is_some(),
        "the fenced block is highlighted"
    );
    assert!(
        browser
            .find("a[href=\"https://example.com/retry\"]")
            .is_none(),
        "the agent's link is not a link"
    );
    assert!(browser
        .page_text()
        .contains("the docs (https://example.com/retry)"));
    let numbers = script(
        &browser,
        "return [...document.querySelectorAll('.code.cited > div')].map(n => n.dataset.n)",
    );
    assert_eq!(numbers, json!(["31", "32", "33"]));
    let keywords = script(
        &browser,
        "return [...document.querySelectorAll('.code.cited i.k')].map(k => k.textContent)",
    );
    assert_eq!(keywords, json!(["pub", "fn"]));
    // Copying the cited lines copies the code, not the numbers.
    let copied_text = script(
        &browser,
        "const c = document.querySelector('.code.cited'); const r = document.createRange(); \
         r.selectNodeContents(c); const s = getSelection(); s.removeAllRanges(); s.addRange(r); \
         return s.toString();",
    );
    assert!(
        !copied_text.as_str().unwrap().contains("31"),
        "{copied_text}"
    );
    // Times in the browser's zone, in the one format.
    let created = browser
        .find("p.status-line time")
        .expect("the creation time");
    let shown_time = browser.text(&created);
    assert!(
        shown_time.ends_with("GMT+5:30") || shown_time.ends_with("IST"),
        "{shown_time}"
    );
    let stamp = &shown_time[..16];
    let shape = stamp.chars().enumerate().all(|(i, c)| match i {
        4 | 7 => c == '-',
        10 => c == ' ',
        13 => c == ':',
        _ => c.is_ascii_digit(),
    });
    assert!(shape, "{shown_time}");
    assert_accessible(&browser, axe, "a question's answer");

    // A change with a long prompt: reviewed, then decided, on a phone's screen.
    browser.goto(&format!("{url}/new"));
    browser.click(&browser.find("input[name=kind][value=change]").unwrap());
    browser.execute(
        "document.querySelector('select[name=repo]').value = 'app';",
        json!([]),
    );
    let prompt = format!("make beta uppercase and add next_delay {long_token}");
    browser.type_into(&browser.find("textarea[name=prompt]").unwrap(), &prompt);
    browser.click(&browser.find("input[name=publish]").unwrap());
    browser.click(&button(&browser, "Submit"));
    wait_for_status(&browser, "waiting_approval");
    let change = browser.url().rsplit('/').next().unwrap().to_string();
    browser.wait_for("#connection", WAIT, |t| t == "waiting for approval");
    let files = script(
        &browser,
        "return [...document.querySelectorAll('details.file summary .path')].map(p => p.textContent)",
    );
    assert_eq!(files, json!(["src/lib.txt", "src/retry.rs"]));
    assert!(
        browser.find("details.file i.c").is_some(),
        "the Rust file's comments are highlighted"
    );
    let order = script(
        &browser,
        "const at = (s) => { const e = document.querySelector(s); \
           return e ? e.compareDocumentPosition(document.getElementById('decision')) : 0; }; \
         return [at('ul.checks'), at('.diff')];",
    );
    // 4: the decision follows the validations and the diff.
    assert_eq!(order, json!([4, 4]));
    let hash = server.task(ADMIN, &change)["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    // The copy button puts the hash on the clipboard.
    browser.grant("clipboard-read");
    browser.grant("clipboard-write");
    let copy = browser
        .find("#decision button.copy")
        .expect("the hash's copy button");
    assert_eq!(
        browser.attribute(&copy, "aria-label").as_deref(),
        Some("Copy the hash being approved")
    );
    browser.click(&copy);
    browser.wait_for("#decision .copy-note", WAIT, |t| t == "Copied");
    let clipboard = browser.execute_async(
        "const done = arguments[0]; navigator.clipboard.readText().then(done, (e) => done(String(e)));",
        json!([]),
    );
    assert_eq!(clipboard, json!(hash));
    assert_accessible(&browser, axe, "a change waiting for approval");
    // The same in the dark colour scheme (contrast is checked again).
    browser.prefer_dark(true);
    assert_accessible(&browser, axe, "a change waiting for approval, dark");
    browser.screenshot(&artefact_dir().join("web-console-review-dark.png"));
    browser.prefer_dark(false);

    browser.set_window_size(390, 844);
    let (wider, widest) = overflow(&browser);
    browser.execute(
        "document.getElementById('diff').scrollIntoView()",
        json!([]),
    );
    browser.screenshot(&artefact_dir().join("web-console-review-phone-diff.png"));
    browser.execute(
        "document.getElementById('decision').scrollIntoView()",
        json!([]),
    );
    browser.screenshot(&artefact_dir().join("web-console-review-phone-decision.png"));
    assert!(
        wider <= 0,
        "wider than a 390 px screen by {wider} px, the widest being {widest}"
    );
    assert!(shown(&browser, "#decision button[type=submit]"));
    assert_accessible(&browser, axe, "a change waiting for approval, on a phone");

    // Approving without ticking the box is refused by the server (a browser keeps `required`;
    // a forged form does not).
    browser.execute(
        "document.querySelector('input[name=confirm]').removeAttribute('required');",
        json!([]),
    );
    browser.click(&button(&browser, "Approve and publish"));
    let refused = browser.wait_for("p.error", WAIT, |t| t.contains("Nothing was approved"));
    assert!(browser.text(&refused).contains(&hash));
    assert_eq!(
        server.task(ADMIN, &change)["status"],
        "waiting_approval",
        "nothing was approved"
    );
    browser.goto(&format!("{url}/tasks/{change}"));
    browser.click(&browser.find("input[name=confirm]").unwrap());
    browser.click(&button(&browser, "Approve and publish"));
    wait_for_status(&browser, "completed");
    let finished = server.wait_until(ADMIN, &change, settled);
    assert_eq!(finished["result"]["publication"]["status"], "pr_opened");
    // The timeline showed each check as it ran, with its duration, and each publication step.
    browser.wait_for("#connection", WAIT, |t| t == "finished");
    let steps: Vec<String> = browser
        .find_all("#timeline li")
        .iter()
        .map(|li| browser.text(li))
        .collect();
    let has = |wanted: &str| steps.iter().any(|s| s.contains(wanted));
    assert!(
        has("▸ check started: bash check.sh")
            && has("✓ check passed: bash check.sh (")
            && has("⇪ publication: push started · branch warden/")
            && has("✓ publication: push done · branch warden/")
            && has("✓ publication: pull request done · http"),
        "{steps:#?}"
    );
    let (wider, widest) = overflow(&browser);
    assert!(
        wider <= 0,
        "the published change: {wider} px too wide ({widest})"
    );
    assert_accessible(&browser, axe, "a published change, on a phone");

    // The list: cost in words, relative times; on the phone its table reflows.
    browser.goto(&format!("{url}/"));
    let cell = script(
        &browser,
        "const td = document.querySelector('td[data-label=Cost]'); \
         return [td.textContent, getComputedStyle(td).display, \
                 getComputedStyle(td, '::before').content];",
    );
    assert_eq!(
        cell,
        json!(["unpriced", "block", "\"Cost: \""]),
        "reflowed, in words"
    );
    let updated = script(
        &browser,
        "return document.querySelector('td[data-label=Updated] time').textContent",
    );
    assert!(
        updated == "just now" || updated.as_str().unwrap().ends_with("min ago"),
        "{updated}"
    );
    let (wider, widest) = overflow(&browser);
    assert!(wider <= 0, "the task list: {wider} px too wide ({widest})");
    assert_accessible(&browser, axe, "the task list, on a phone");

    browser.set_window_size(1280, 900);
    browser.goto(&format!("{url}/usage"));
    let charts = script(
        &browser,
        "return [document.querySelectorAll('svg.columns').length, \
                 document.querySelectorAll('svg.hbar').length]",
    );
    // Per day: cost and tokens; per repository (docs, app), per model and per role (the
    // agent's only): a bar each, in a cost and a tokens chart.
    assert_eq!(charts, json!([2, 8]), "{}", browser.page_text());
    let day = script(
        &browser,
        "return document.querySelector('svg.columns').getAttribute('aria-label')",
    );
    assert_eq!(
        day,
        "Cost per day, last 30 days: unpriced (no call had a price)"
    );
    assert!(browser.page_text().contains("unpriced"));
    assert_accessible(&browser, axe, "the usage page");
    browser.screenshot(&artefact_dir().join("web-console-usage.png"));

    browser.goto(&format!("{url}/sessions"));
    assert_accessible(&browser, axe, "the sessions page");
}
