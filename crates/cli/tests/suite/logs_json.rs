//! `WARDEN_LOG_FORMAT=json`: the log lines `warden serve` writes on stderr are JSON objects
//! with `level` and `message`; without it they are text.

use serde_json::Value;

use super::server_harness::{Server, Token, ADMIN};
use super::support::Warden;

const TOKENS: &[Token] = &[("root", "admin", ADMIN)];

/// Starts `warden serve` with `format`, returns the first stderr line mentioning the start-up
/// log message, then stops the server.
fn startup_log_line(format: Option<&str>) -> String {
    let mut warden = Warden::faux().with("WARDEN_LOG", "info");
    if let Some(format) = format {
        warden = warden.with("WARDEN_LOG_FORMAT", format);
    }
    let server = Server::start(&warden, TOKENS);
    let line = server.log_line("serving the API and running the workers");
    server.interrupt();
    line
}

#[test]
fn json_log_lines_have_level_and_message() {
    let line = startup_log_line(Some("json"));
    let value: Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
    assert_eq!(value["level"], "INFO", "{line}");
    assert_eq!(
        value["message"], "serving the API and running the workers",
        "{line}"
    );
    assert_eq!(value["store"], "sqlite", "{line}");
    assert!(value["timestamp"].is_string(), "{line}");

    let text = startup_log_line(None);
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
    assert!(text.contains("INFO"), "{text}");
}
