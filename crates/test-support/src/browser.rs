//! A real headless browser for tests: Debian's `chromium`, driven by `chromedriver` over the
//! W3C WebDriver protocol (plain HTTP/1.1 and JSON on localhost, spoken here with `std::net`).
//! Nothing is downloaded at test time.
//!
//! [`Browser::start`] returns `None` (said on stderr) when `chromium` or `chromedriver` is not
//! installed — unless `WARDEN_TEST_REQUIRE` lists `chromium` (CI sets it), where a missing
//! browser fails the test instead of letting it pass without having run.

// A test helper fails the test that uses it: by panicking, with what went wrong.
#![allow(clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Where Debian installs them.
const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The W3C element reference key.
const ELEMENT_KEY: &str = "element-6066-11e4-a52e-4f735466cecf";

/// One browser session: a chromedriver process and the headless Chromium it started, with a
/// private profile. Dropping it ends the session and the driver.
pub struct Browser {
    driver: Child,
    port: u16,
    session: String,
    _profile: tempfile::TempDir,
}

/// An element of the current page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Element(String);

impl Browser {
    /// Starts headless Chromium; `None` when it is not installed and not required.
    ///
    /// # Panics
    /// When `WARDEN_TEST_REQUIRE` lists `chromium` and it is missing, or when the driver does
    /// not come up.
    pub fn start() -> Option<Browser> {
        Browser::start_with_env(&[])
    }

    /// [`Browser::start`] with `env` set for the browser (`TZ`, say: the zone its pages see).
    ///
    /// # Panics
    /// As [`Browser::start`].
    pub fn start_with_env(env: &[(&str, &str)]) -> Option<Browser> {
        let installed = Path::new(CHROMIUM).is_file() && Path::new(CHROMEDRIVER).is_file();
        if !installed {
            assert!(
                !crate::postgres::required("chromium"),
                "WARDEN_TEST_REQUIRE lists chromium but {CHROMIUM} or {CHROMEDRIVER} is missing: \
                 apt-get install chromium chromium-driver"
            );
            let _ = writeln!(std::io::stderr(), "skipped: chromium not installed");
            return None;
        }
        let port = free_port();
        #[allow(clippy::disallowed_methods)] // the driver is a test tool, not a repository's git
        let driver = std::process::Command::new(CHROMEDRIVER)
            .envs(env.iter().copied())
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        let profile = tempfile::tempdir().expect("browser profile directory");
        let mut browser = Browser {
            driver,
            port,
            session: String::new(),
            _profile: profile,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut args = vec![
            "--headless=new".to_string(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--no-first-run".into(),
            "--window-size=1280,900".into(),
            format!("--user-data-dir={}", browser._profile.path().display()),
        ];
        // Chromium's own sandbox needs unprivileged user namespaces or a setuid helper; as root
        // it refuses to start with it.
        if running_as_root() {
            args.push("--no-sandbox".into());
        }
        let created = browser.command(
            "POST",
            "/session",
            Some(json!({
                "capabilities": {"alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {"binary": CHROMIUM, "args": args},
                    "pageLoadStrategy": "normal",
                }}
            })),
        );
        browser.session = created["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {created}"))
            .to_string();
        Some(browser)
    }

    /// Opens `url` and waits for it to load.
    pub fn goto(&self, url: &str) {
        self.session_command("POST", "/url", Some(json!({ "url": url })));
    }

    /// The current page's URL.
    pub fn url(&self) -> String {
        self.session_command("GET", "/url", None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// The first element matching the CSS `selector`, if any.
    pub fn find(&self, selector: &str) -> Option<Element> {
        self.find_all(selector).into_iter().next()
    }

    /// Every element matching the CSS `selector`.
    pub fn find_all(&self, selector: &str) -> Vec<Element> {
        let found = self.session_command(
            "POST",
            "/elements",
            Some(json!({"using": "css selector", "value": selector})),
        );
        found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT_KEY].as_str().map(|id| Element(id.to_string())))
            .collect()
    }

    /// Waits up to `timeout` for an element matching `selector` whose text satisfies `ready`.
    ///
    /// # Panics
    /// When none appears in time (with the page's text in the message).
    pub fn wait_for(
        &self,
        selector: &str,
        timeout: Duration,
        ready: impl Fn(&str) -> bool,
    ) -> Element {
        let deadline = Instant::now() + timeout;
        loop {
            for element in self.find_all(selector) {
                if ready(&self.text(&element)) {
                    return element;
                }
            }
            assert!(
                Instant::now() < deadline,
                "no {selector} became ready; the page says:\n{}",
                self.page_text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The element's rendered text.
    pub fn text(&self, element: &Element) -> String {
        self.session_command("GET", &format!("/element/{}/text", element.0), None)
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// An attribute (or property) of the element.
    pub fn attribute(&self, element: &Element, name: &str) -> Option<String> {
        self.session_command(
            "GET",
            &format!("/element/{}/attribute/{name}", element.0),
            None,
        )
        .as_str()
        .map(str::to_string)
    }

    pub fn click(&self, element: &Element) {
        self.session_command(
            "POST",
            &format!("/element/{}/click", element.0),
            Some(json!({})),
        );
    }

    /// Types `text` into the element (a form field).
    pub fn type_into(&self, element: &Element, text: &str) {
        self.session_command(
            "POST",
            &format!("/element/{}/value", element.0),
            Some(json!({ "text": text })),
        );
    }

    /// The whole page's text.
    pub fn page_text(&self) -> String {
        self.execute(
            "return document.body ? document.body.innerText : ''",
            json!([]),
        )
        .as_str()
        .unwrap_or_default()
        .to_string()
    }

    /// Runs `script` (a function body) in the page with `args`; its return value.
    pub fn execute(&self, script: &str, args: Value) -> Value {
        self.session_command(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// Runs `script` (a function body) in the page with `args`, its last argument being the
    /// callback to call with the result; what it was called with.
    pub fn execute_async(&self, script: &str, args: Value) -> Value {
        self.session_command(
            "POST",
            "/execute/async",
            Some(json!({"script": script, "args": args})),
        )
    }

    /// The accessibility violations axe-core finds in the current page (WCAG 2.x A and AA,
    /// 2.2 AA and axe's best practices), each as `{id, impact, help, nodes: [{target,
    /// summary}]}`. `axe` is the source of `axe.min.js` ([`axe_core`]); it is injected through
    /// WebDriver, which the page's Content Security Policy does not govern.
    pub fn axe_violations(&self, axe: &str) -> Vec<Value> {
        let loaded = self.execute(&format!("{axe}\n;return typeof window.axe;"), json!([]));
        assert_eq!(loaded, "object", "axe-core did not load");
        let found = self.execute_async(
            "const done = arguments[arguments.length - 1];\
             window.axe.run(document, {runOnly: {type: 'tag', values: \
               ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa', 'wcag22aa', 'best-practice']}})\
             .then((r) => done(r.violations.map((v) => ({id: v.id, impact: v.impact, help: v.help,\
               nodes: v.nodes.map((n) => ({target: n.target, summary: n.failureSummary}))}))))\
             .catch((e) => done({error: String(e)}));",
            json!([]),
        );
        assert!(found.get("error").is_none(), "axe-core failed: {found}");
        found.as_array().cloned().unwrap_or_default()
    }

    /// Grants the pages a permission (`clipboard-read`, `clipboard-write`) without asking.
    pub fn grant(&self, permission: &str) {
        self.session_command(
            "POST",
            "/permissions",
            Some(json!({"descriptor": {"name": permission}, "state": "granted"})),
        );
    }

    /// Makes pages see `prefers-color-scheme: dark` (`true`) or light, through Chromium's
    /// DevTools protocol (chromedriver's `goog/cdp/execute`).
    pub fn prefer_dark(&self, dark: bool) {
        self.session_command(
            "POST",
            "/goog/cdp/execute",
            Some(
                json!({"cmd": "Emulation.setEmulatedMedia", "params": {"features": [
                    {"name": "prefers-color-scheme", "value": if dark { "dark" } else { "light" }}
                ]}}),
            ),
        );
    }

    /// Resizes the browser window (a phone's screen, say) to `width` × `height` CSS pixels.
    pub fn set_window_size(&self, width: u32, height: u32) {
        self.session_command(
            "POST",
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        );
    }

    /// Saves a PNG screenshot of the page to `path`.
    pub fn screenshot(&self, path: &Path) {
        let encoded = self.session_command("GET", "/screenshot", None);
        let bytes = decode_base64(encoded.as_str().unwrap_or_default());
        std::fs::write(path, bytes).expect("write screenshot");
    }

    fn session_command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        self.command(method, &format!("/session/{}{path}", self.session), body)
    }

    /// One WebDriver command; its `value`.
    ///
    /// # Panics
    /// On a WebDriver error, with its message.
    fn command(&self, method: &str, path: &str, body: Option<Value>) -> Value {
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).expect("reach chromedriver");
        stream
            .set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        write!(
            stream,
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.port,
            body.len()
        )
        .expect("send to chromedriver");
        let (status, text) = read_http_response(stream);
        let reply: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let value = reply.get("value").cloned().unwrap_or(Value::Null);
        assert!(
            (200..300).contains(&status),
            "WebDriver {method} {path}: {status} {}",
            value
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or(&text)
        );
        value
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let session = std::mem::take(&mut self.session);
            // Best effort: the driver is killed next anyway.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.command("DELETE", &format!("/session/{session}"), None)
            }));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// A status code and a body (`Content-Length` or read to the end).
fn read_http_response(stream: TcpStream) -> (u16, String) {
    let mut reader = BufReader::new(stream);
    let mut status_line = String::new();
    reader.read_line(&mut status_line).expect("status line");
    let status = status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0);
    let mut length: Option<usize> = None;
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    let mut body = Vec::new();
    match length {
        Some(length) => {
            body.resize(length, 0);
            reader.read_exact(&mut body).expect("response body");
        }
        None => {
            reader.read_to_end(&mut body).expect("response body");
        }
    }
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

fn running_as_root() -> bool {
    // /proc/self/status names the effective uid (the third field of `Uid:`).
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// Standard base64 (the screenshot's encoding), without a crate for it.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut buffer = 0u32;
    let mut bits = 0;
    for byte in text.bytes() {
        let Some(v) = value(byte) else { continue };
        buffer = (buffer << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((buffer >> bits) as u8);
            buffer &= (1 << bits) - 1;
        }
    }
    out
}

/// The variable naming axe-core's `axe.min.js` (`.ci/axe-core.sh` installs the pinned version
/// and prints the line).
pub const AXE_VAR: &str = "WARDEN_TEST_AXE";

/// The source of axe-core's `axe.min.js`; `None` (said on stderr) when [`AXE_VAR`] is not set
/// and `WARDEN_TEST_REQUIRE` does not list `axe`.
///
/// # Panics
/// When `axe` is required and the variable is unset or names no readable file.
pub fn axe_core() -> Option<String> {
    let path = std::env::var_os(AXE_VAR).filter(|v| !v.is_empty());
    match path.as_ref().map(std::fs::read_to_string) {
        Some(Ok(source)) => Some(source),
        other => {
            assert!(
                !crate::postgres::required("axe"),
                "{} lists axe but {AXE_VAR} {}: install it with `eval \"$(bash .ci/axe-core.sh)\"`",
                crate::postgres::REQUIRE_VAR,
                match other {
                    Some(Err(error)) => format!("cannot be read ({error})"),
                    _ => "is not set".to_string(),
                }
            );
            let _ = writeln!(
                std::io::stderr(),
                "skipped: {AXE_VAR} not set (axe-core's axe.min.js): no accessibility check"
            );
            None
        }
    }
}

/// Where a test saves artefacts (screenshots): `WARDEN_TEST_ARTEFACTS`, else the system temp
/// directory.
pub fn artefact_dir() -> PathBuf {
    std::env::var_os("WARDEN_TEST_ARTEFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_decodes_like_the_standard() {
        assert_eq!(decode_base64("aGVsbG8="), b"hello");
        assert_eq!(decode_base64("aGk="), b"hi");
        assert_eq!(decode_base64("AAEC/w=="), [0, 1, 2, 255]);
    }

    /// A page served from here, driven in the real browser: text, a click running the page's
    /// own script, typing into a form, a screenshot.
    #[test]
    fn the_browser_drives_a_real_page() {
        let Some(browser) = Browser::start() else {
            return;
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request = String::new();
                let _ = reader.read_line(&mut request);
                loop {
                    let mut header = String::new();
                    if reader.read_line(&mut header).unwrap_or(0) == 0 || header == "\r\n" {
                        break;
                    }
                }
                let (kind, body) = if request.starts_with("GET /app.js") {
                    (
                        "text/javascript",
                        "document.getElementById('go').addEventListener('click', () => {\n\
                         document.getElementById('out').textContent =\n\
                         'hello ' + document.getElementById('name').value; });",
                    )
                } else {
                    (
                        "text/html",
                        "<!doctype html><title>t</title><input id=name>\
                         <button id=go>go</button><p id=out>waiting</p>\
                         <script src=/app.js></script>",
                    )
                };
                let mut stream = stream;
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Type: {kind}\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        browser.goto(&format!("http://{address}/"));
        let out = browser.find("#out").unwrap();
        assert_eq!(browser.text(&out), "waiting");
        browser.type_into(&browser.find("#name").unwrap(), "warden");
        browser.click(&browser.find("#go").unwrap());
        browser.wait_for("#out", Duration::from_secs(10), |t| t == "hello warden");
        let shot = tempfile::NamedTempFile::new().unwrap();
        browser.screenshot(shot.path());
        let png = std::fs::read(shot.path()).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert!(browser.find("#missing").is_none());
    }
}
