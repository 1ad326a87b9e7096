//! The web console in real headless Chromium (Debian's `chromium` and `chromedriver`, driven
//! over WebDriver) against the real `warden serve`, a scripted model and a fake of GitHub's
//! pulls API: sign in with an API token, submit a question from the form, watch it finish on
//! the live timeline, read a checked citation's lines; submit a change with publish, read its
//! diff, approve it (the page shows the hash being approved) and see the pull request's link.
//! Around it, asserted from the browser: untrusted text (`<img onerror>`, a Markdown image at a
//! local listener) is inert and loads nothing; a cross-site form post with the session cookie
//! is refused; another user's task is not found; a password set with `warden web passwd` signs
//! in. A screenshot of the task page goes to `WARDEN_TEST_ARTEFACTS`.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use warden_test_support::browser::{artefact_dir, Browser};
use warden_test_support::git_fixture::TempRepo;
use warden_test_support::model_server::ScriptedModelServer;

use super::server_harness::{
    call, change_repo, sample_repo, settled, uppercase_beta, GithubRemote, Server, Token, ADMIN,
    ALICE,
};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN), ("alice", "operator", ALICE)];
const GITHUB_TOKEN: &str = "ghp_console_fake_token_0123456789";
const WAIT: Duration = Duration::from_secs(90);

/// A TCP listener that counts the connections made to it (a remote image must make none).
struct Tripwire {
    port: u16,
    hits: Arc<AtomicUsize>,
}

impl Tripwire {
    fn start() -> Tripwire {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let hits = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&hits);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Tripwire { port, hits }
    }
}

/// A page on another port of 127.0.0.1 (same site, another origin) whose form posts a new
/// task to the console as soon as it loads: what a hostile page the user visits would do.
fn cross_site_page(console: &str) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let page = format!(
        "<!doctype html><title>hostile</title>\
         <form id=f method=post action=\"{console}/tasks\">\
         <input name=kind value=question><input name=repo value=docs>\
         <input name=prompt value=\"cross-site task\"></form>\
         <script>document.getElementById('f').submit()</script>"
    );
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            let mut buffer = [0u8; 4096];
            let _ = stream.read(&mut buffer);
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\
                 Connection: close\r\n\r\n{page}",
                page.len()
            );
        }
    });
    port
}

fn sign_in_with_token(browser: &Browser, url: &str, token: &str) {
    browser.goto(&format!("{url}/"));
    assert!(browser.url().ends_with("/sign-in"), "{}", browser.url());
    let field = browser.find("input[name=token]").expect("token field");
    browser.type_into(&field, token);
    let button = browser
        .find_all("form button")
        .into_iter()
        .find(|b| browser.text(b).contains("token"))
        .expect("token sign-in button");
    browser.click(&button);
    wait_for_heading(browser, "Tasks");
}

fn select(browser: &Browser, name: &str, value: &str) {
    browser.execute(
        "const s = document.querySelector('select[name=' + arguments[0] + ']'); \
         s.value = arguments[1]; return s.value;",
        json!([name, value]),
    );
}

/// Fills and submits the new-task form; returns the new task's id from the page's URL.
fn submit_task(
    browser: &Browser,
    url: &str,
    kind: &str,
    repo: &str,
    prompt: &str,
    publish: bool,
) -> String {
    browser.goto(&format!("{url}/new"));
    let radio = browser
        .find(&format!("input[name=kind][value={kind}]"))
        .expect("kind choice");
    browser.click(&radio);
    select(browser, "repo", repo);
    let text = browser.find("textarea[name=prompt]").expect("prompt field");
    browser.type_into(&text, prompt);
    if publish {
        let check = browser.find("input[name=publish]").expect("publish box");
        browser.click(&check);
    }
    let submit = browser
        .find_all("form.stack button")
        .into_iter()
        .find(|b| browser.text(b) == "Submit")
        .expect("submit button");
    browser.click(&submit);
    browser.wait_for("#timeline", WAIT, |_| true);
    let here = browser.url();
    let id = here.rsplit('/').next().unwrap().to_string();
    assert!(id.starts_with("tsk_"), "{here}");
    id
}

/// Waits until `script` (run afresh each time: the page may be reloading or navigating)
/// returns `wanted`; panics naming `what` with the page's text when it never does.
fn wait_for_script(browser: &Browser, script: &str, wanted: &str, what: &str) {
    let seen = warden_test_support::wait_until(WAIT, || {
        Some(()).filter(|_| browser.execute(script, json!([])) == wanted)
    });
    assert!(
        seen.is_some(),
        "{what} never read {wanted:?}:\n{}",
        browser.page_text()
    );
}

/// Waits for the task page to show `status` in its badge (the page reloads itself when the
/// live stream says the status moved).
fn wait_for_status(browser: &Browser, status: &str) {
    let script = "const b = document.querySelector('main p span.badge'); \
                  return b ? b.dataset.status : null;";
    wait_for_script(browser, script, status, "the status badge");
}

/// Waits for the page's heading to read `text`.
fn wait_for_heading(browser: &Browser, text: &str) {
    let script = "const h = document.querySelector('h1'); return h ? h.textContent : null;";
    wait_for_script(browser, script, text, "the heading");
}

struct Setup {
    docs: TempRepo,
    app: TempRepo,
    github: GithubRemote,
    tripwire: Tripwire,
    _model: ScriptedModelServer,
    warden: Warden,
}

impl Setup {
    fn new() -> Setup {
        let docs = sample_repo();
        let app = change_repo();
        let github = GithubRemote::for_repo(&app, GITHUB_TOKEN);
        let tripwire = Tripwire::start();
        let hostile = format!(
            "retry doubles <img src=x onerror=\"window.__pwned=1\"> ![](http://127.0.0.1:{}/x.png)",
            tripwire.port
        );
        let answer = json!({
            "summary": hostile,
            "claims": [{"text": "it doubles its input", "basis": "observed",
                        "evidence": [{"path": "src/lib.rs", "start_line": 31, "end_line": 33}]}]
        });
        let model = ScriptedModelServer::start_blocking(vec![
            // Slow enough for the page to be watching while the model thinks.
            call(
                "ask_user",
                json!({"question": "Which retry: <b>backoff</b> or jitter?"}),
            )
            .delayed(1_500),
            call("submit_answer", answer),
            uppercase_beta(),
            call(
                "submit_change",
                json!({"summary": "Uppercase beta\n\nThe check wants BETA."}),
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
        Setup {
            docs,
            app,
            github,
            tripwire,
            _model: model,
            warden,
        }
    }
}

#[test]
fn the_console_asks_watches_approves_and_publishes_in_a_real_browser() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let setup = Setup::new();
    let server = Server::start(&setup.warden, TOKENS);
    let printed = server.log_line("web console at");
    assert!(printed.contains(&format!("{}/", server.url())), "{printed}");
    server.register("docs", &setup.docs);
    server.register_with_checks("app", &setup.app, &["bash check.sh"]);
    let url = server.url();

    sign_in_with_token(&browser, &url, ADMIN);

    // A question, watched live until it finishes, its citation's lines read from the commit.
    let question = submit_task(
        &browser,
        &url,
        "question",
        "docs",
        "How does retry work? <img src=y onerror=\"window.__pwned=2\">",
        false,
    );
    // Watched while it runs: the stream is live before the agent asks its question.
    browser.wait_for("#connection", WAIT, |text| text == "live");
    wait_for_status(&browser, "waiting_input");
    let asked = browser.wait_for("main .md", WAIT, |text| text.contains("Which retry"));
    assert!(
        browser.text(&asked).contains("<b>backoff</b>"),
        "shown as text"
    );
    // The question is shown once, the connection says the task waits for its answer, and the
    // answer box is labelled.
    let page = browser.page_text();
    assert_eq!(page.matches("Which retry").count(), 1, "{page}");
    browser.wait_for("#connection", WAIT, |text| {
        text == "waiting for your answer"
    });
    let label = browser.execute(
        "const t = document.querySelector('textarea[name=text]'); \
         return t.labels.length ? t.labels[0].textContent : null;",
        json!([]),
    );
    assert_eq!(label, "Your answer to the agent's question");
    let answer = browser.find("textarea[name=text]").expect("answer field");
    browser.type_into(&answer, "the backoff one");
    let send = browser
        .find_all("form button")
        .into_iter()
        .find(|b| browser.text(b) == "Send answer")
        .expect("send button");
    browser.click(&send);
    wait_for_status(&browser, "completed");
    let answered = browser.wait_for("ol.conversation li", WAIT, |text| {
        text.contains("the backoff one")
    });
    assert!(
        browser.text(&answered).starts_with("root ·"),
        "{}",
        browser.text(&answered)
    );
    browser.wait_for("#connection", WAIT, |text| text == "finished");
    let timeline = browser.find_all("#timeline li");
    assert!(timeline.len() >= 3, "{}", browser.page_text());
    let steps: Vec<String> = timeline.iter().map(|li| browser.text(li)).collect();
    assert!(
        steps.iter().any(|s| s.contains("turn 1"))
            && steps.iter().any(|s| s.contains("finished: completed")),
        "{steps:#?}"
    );
    let cited = browser.wait_for(".code.cited", WAIT, |text| {
        text.contains("retry_with_backoff")
    });
    assert!(browser.text(&cited).contains("attempts * 2"));
    // Untrusted text is text: no image element, no handler ran, nothing fetched.
    let page = browser.page_text();
    assert!(page.contains("<img src=x onerror="), "{page}");
    assert!(page.contains("How does retry work? <img src=y"), "{page}");
    let images = browser.execute("return document.querySelectorAll('img').length", json!([]));
    assert_eq!(images, 0);
    let pwned = browser.execute("return window.__pwned === undefined", json!([]));
    assert_eq!(pwned, true);
    let fetched = browser.execute(
        "return performance.getEntriesByType('resource').map(e => e.name)\
         .filter(n => n.includes(':' + arguments[0] + '/'))",
        json!([setup.tripwire.port]),
    );
    assert_eq!(fetched, json!([]));
    assert_eq!(setup.tripwire.hits.load(Ordering::SeqCst), 0);

    // A change with publish: its diff, the hash to approve, then the pull request.
    let change = submit_task(&browser, &url, "change", "app", "make beta uppercase", true);
    wait_for_status(&browser, "waiting_approval");
    let diff = browser.wait_for(".diff", WAIT, |text| text.contains("+BETA"));
    assert!(browser.text(&diff).contains("-beta"));
    let api_task = server.task(ADMIN, &change);
    let hash = api_task["result"]["proposal"]["hash"]
        .as_str()
        .unwrap()
        .to_string();
    let shown = browser
        .find("#approval-hash")
        .expect("the hash being approved");
    assert_eq!(browser.text(&shown), hash);
    browser.screenshot(&artefact_dir().join("web-console-task.png"));
    // On a phone's screen the page fits its width (long hashes and paths wrap or scroll inside
    // their own boxes), and the decision is still there.
    browser.set_window_size(390, 844);
    let overflow = browser.execute(
        "return document.documentElement.scrollWidth - document.documentElement.clientWidth",
        json!([]),
    );
    browser.screenshot(&artefact_dir().join("web-console-task-phone.png"));
    let widest = browser.execute(
        "let worst = null; for (const e of document.querySelectorAll('main *')) { \
           const r = e.getBoundingClientRect(); \
           if (r.right > document.documentElement.clientWidth + 1 && (!worst || r.right > worst.r)) \
             worst = {r: r.right, tag: e.tagName, cls: e.className}; } return worst;",
        json!([]),
    );
    assert!(
        overflow.as_i64().unwrap() <= 0,
        "wider than the screen by {overflow} px, the widest being {widest}"
    );
    browser.set_window_size(1280, 900);
    let approve = browser
        .find_all("form button")
        .into_iter()
        .find(|b| browser.text(b) == "Approve and publish")
        .expect("approve button");
    let confirm = browser
        .find("input[name=confirm]")
        .expect("the box naming the hash");
    browser.click(&confirm);
    browser.click(&approve);
    wait_for_status(&browser, "completed");
    let pulls = setup.github.fake.pulls();
    assert_eq!(pulls.len(), 1, "{pulls:#?}");
    let pr_url = pulls[0]["html_url"].as_str().unwrap();
    let link = browser
        .find(&format!("a[href=\"{pr_url}\"]"))
        .unwrap_or_else(|| panic!("no pull request link; page:\n{}", browser.page_text()));
    assert_eq!(browser.text(&link), "pull request");
    let finished = server.wait_until(ADMIN, &change, settled);
    assert_eq!(finished["result"]["publication"]["status"], "pr_opened");

    // A hostile page on another port of this host (same site, other origin) posts a task
    // with the user's cookie: refused, and no task appears.
    let hostile = cross_site_page(&url);
    browser.goto(&format!("http://127.0.0.1:{hostile}/"));
    let script =
        "return document.body ? String(document.body.innerText.includes('refused')) : null";
    wait_for_script(&browser, script, "true", "the cross-site post's answer");
    let tasks = server.get(ADMIN, "/v1/tasks");
    assert!(
        !tasks.to_string().contains("cross-site task"),
        "a cross-site post created a task: {tasks}"
    );

    // Another user's task does not exist for them, in the console as in the API.
    browser.goto(&format!("{url}/"));
    let sign_out = browser
        .find_all("header form button")
        .into_iter()
        .next()
        .expect("sign-out button");
    browser.click(&sign_out);
    wait_for_heading(&browser, "Sign in");
    sign_in_with_token(&browser, &url, ALICE);
    browser.goto(&format!("{url}/tasks/{question}"));
    wait_for_heading(&browser, "Not found");
}

#[test]
fn a_password_set_with_warden_web_passwd_signs_in_and_a_wrong_one_does_not() {
    let Some(browser) = Browser::start() else {
        return;
    };
    let warden = Warden::faux();
    let set = warden.run_with_stdin(
        &["web", "passwd", "carol", "--role", "viewer"],
        "correct horse battery staple\n",
    );
    assert_eq!(set.code, 0, "{}", set.stderr);
    let server = Server::start(&warden, TOKENS);
    let url = server.url();
    let sign_in = |password: &str| {
        browser.goto(&format!("{url}/sign-in"));
        let name = browser.find("input[name=name]").expect("name field");
        browser.type_into(&name, "carol");
        let field = browser
            .find("input[name=password]")
            .expect("password field");
        browser.type_into(&field, password);
        let button = browser
            .find_all("form button")
            .into_iter()
            .find(|b| browser.text(b) == "Sign in")
            .expect("sign-in button");
        browser.click(&button);
    };
    sign_in("not the password");
    let error = browser.wait_for("p.error", WAIT, |_| true);
    assert!(!browser.text(&error).is_empty());
    assert!(browser.url().ends_with("/sign-in"), "{}", browser.url());
    sign_in("correct horse battery staple");
    wait_for_heading(&browser, "Tasks");
    // A viewer reads: no link to submit a task.
    assert!(
        browser.find("a[href=\"/new\"]").is_none(),
        "{}",
        browser.page_text()
    );
    let cookie_flags = browser.execute("return document.cookie", json!([]));
    assert_eq!(cookie_flags, "", "the session cookie is HttpOnly");
}
