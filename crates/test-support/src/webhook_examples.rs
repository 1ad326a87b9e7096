//! GitHub's published webhook payloads (`@octokit/webhooks-examples` on npm) as fixtures:
//! `WARDEN_TEST_WEBHOOK_EXAMPLES` names the package's `api.github.com/index.json` (or the
//! directory holding it; `.ci/webhook-examples.sh` installs the pinned version and prints the
//! line). The index lists each event (`name`) with its `examples`, whole payloads as GitHub
//! sends them. Without it the tests built on them skip, saying so — unless
//! `WARDEN_TEST_REQUIRE` lists `webhook-examples` (CI sets it), where a missing index fails the
//! test instead of letting it pass without having run.

use std::io::Write;
use std::path::PathBuf;

use serde_json::Value;

/// The variable naming the index.
pub const EXAMPLES_VAR: &str = "WARDEN_TEST_WEBHOOK_EXAMPLES";

/// The examples of every event, as the package publishes them.
#[derive(Debug, Clone)]
pub struct Examples {
    events: Vec<Value>,
}

impl Examples {
    /// The examples; `None` (said on stderr) when none are configured and they are not
    /// required.
    ///
    /// # Panics
    /// When `WARDEN_TEST_REQUIRE` lists `webhook-examples` and the variable is unset or names
    /// no index, or when the index is not the package's shape.
    pub fn load() -> Option<Examples> {
        let configured = std::env::var_os(EXAMPLES_VAR)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
            .map(|path| {
                if path.is_dir() {
                    path.join("index.json")
                } else {
                    path
                }
            });
        let path = match configured {
            Some(path) if path.is_file() => path,
            configured => {
                assert!(
                    !crate::postgres::required("webhook-examples"),
                    "{} lists webhook-examples but {EXAMPLES_VAR} {}: install them with \
                     `eval \"$(bash .ci/webhook-examples.sh)\"`",
                    crate::postgres::REQUIRE_VAR,
                    match &configured {
                        Some(path) => format!("names no file ({})", path.display()),
                        None => "is not set".to_string(),
                    }
                );
                // Not `eprintln!`: the test harness would capture it.
                let _ = writeln!(
                    std::io::stderr(),
                    "skipped: {EXAMPLES_VAR} not set (@octokit/webhooks-examples' index.json)"
                );
                return None;
            }
        };
        let text = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let index: Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
        let events = index
            .as_array()
            .unwrap_or_else(|| panic!("{} is not a list of events", path.display()))
            .clone();
        Some(Examples { events })
    }

    /// Every example of `event` whose `action` is `action` (`None`: events without one, such as
    /// `ping`), in the package's order.
    ///
    /// # Panics
    /// When the package has none: a test built on them would check nothing.
    pub fn of(&self, event: &str, action: Option<&str>) -> Vec<Value> {
        let found: Vec<Value> = self
            .events
            .iter()
            .filter(|e| e["name"] == event)
            .flat_map(|e| e["examples"].as_array().cloned().unwrap_or_default())
            .filter(|example| example["action"].as_str() == action)
            .collect();
        assert!(
            !found.is_empty(),
            "@octokit/webhooks-examples has no {event} example with action {action:?}"
        );
        found
    }
}
