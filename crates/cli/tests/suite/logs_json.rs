//! `WARDEN_LOG_FORMAT=json`: the log lines `warden serve` writes on stderr are JSON objects
//! with `level` and `message`; without it they are text.

#![allow(clippy::disallowed_methods)] // the test spawns the binary under test

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;

use super::support::{interrupt, Warden};

/// Starts `warden serve` with `format`, returns the first stderr line mentioning the start-up
/// log message, then stops the server.
fn startup_log_line(format: Option<&str>) -> String {
    let mut warden = Warden::faux()
        .with("WARDEN_LOG", "info")
        .with("WARDEN_LISTEN", "127.0.0.1:0")
        .with("WARDEN_API_TOKENS", "root:admin:admin-token-0123456789");
    if let Some(format) = format {
        warden = warden.with("WARDEN_LOG_FORMAT", format);
    }
    let mut child = warden
        .command(&["serve"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (found, line) = std::sync::mpsc::channel();
    let reader = BufReader::new(child.stderr.take().unwrap());
    std::thread::spawn(move || {
        let mut seen = String::new();
        for text in reader.lines().map_while(Result::ok) {
            if text.contains("serving the API and running the workers") {
                let _ = found.send(Ok(text));
                return;
            }
            seen.push_str(&text);
            seen.push('\n');
        }
        let _ = found.send(Err(seen));
    });
    let line = line.recv_timeout(Duration::from_secs(60));
    interrupt(child.id());
    let _ = child.wait();
    match line {
        Ok(Ok(line)) => line,
        Ok(Err(stderr)) => panic!("no start-up log line; stderr:\n{stderr}"),
        Err(_) => panic!("no start-up log line within 60 s"),
    }
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
