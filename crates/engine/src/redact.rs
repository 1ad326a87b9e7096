//! Redaction of registered secrets (the model API keys and URL credentials of the configuration)
//! from everything Warden stores or shows: journal records, task records, progress and results.
//! Secrets never reach the model, so this is defence in depth against a provider or tool echoing
//! one back.
//!
//! Redaction fails closed: JSON is redacted string by string (so it always stays JSON), and a
//! typed value redacted that way which no longer reads back as its type is withheld, never
//! kept as it was ([`Redactor::event`]).

use serde_json::Value;
use warden_protocol::Event;
use warden_runtime::{BoxFuture, Journal, JournalError, RecordKind};

/// Replaces every registered secret with `[redacted]`. Its `Debug` shows how many it holds,
/// never them.
#[derive(Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
}

impl std::fmt::Debug for Redactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Redactor")
            .field("secrets", &self.secrets.len())
            .finish()
    }
}

impl Redactor {
    /// Secrets shorter than 8 characters are not registered: replacing them would mangle
    /// ordinary text and they are not real keys.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= 8).collect();
        // Longest first, so a secret containing another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        Redactor { secrets }
    }

    /// This redactor's secrets and `more`.
    pub fn with_secrets(self, more: impl IntoIterator<Item = String>) -> Redactor {
        Redactor::new(self.secrets.into_iter().chain(more))
    }

    /// The secrets registered.
    pub(crate) fn secrets(&self) -> &[String] {
        &self.secrets
    }

    pub fn text(&self, text: &str) -> String {
        let mut out = warden_repo::redact_credentials(text);
        for secret in &self.secrets {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), "[redacted]");
            }
        }
        out
    }

    /// Redacts every string inside a JSON value, keys included.
    pub fn json(&self, value: Value) -> Value {
        match value {
            Value::String(text) => Value::String(self.text(&text)),
            Value::Array(items) => Value::Array(items.into_iter().map(|v| self.json(v)).collect()),
            Value::Object(map) => Value::Object(
                map.into_iter()
                    .map(|(k, v)| (self.text(&k), self.json(v)))
                    .collect(),
            ),
            other => other,
        }
    }

    /// The event with every registered secret redacted. When the redacted form is no longer
    /// an event (a secret overlapped its type tag or a status name), the event is dropped and
    /// [`Event::RedactionFailed`] takes its place: the event as it was is never returned.
    pub fn event(&self, event: Event) -> Event {
        let redacted = serde_json::to_value(&event)
            .ok()
            .and_then(|value| serde_json::from_value::<Event>(self.json(value)).ok());
        match redacted {
            Some(redacted) => redacted,
            None => {
                tracing::warn!("an event was withheld: it was no longer an event once redacted");
                Event::RedactionFailed
            }
        }
    }
}

/// A journal that redacts each payload before it is hashed and written.
pub struct RedactingJournal<'a> {
    pub inner: &'a mut dyn Journal,
    pub redactor: &'a Redactor,
}

impl Journal for RedactingJournal<'_> {
    fn append(
        &mut self,
        at_ms: u64,
        kind: RecordKind,
        payload: Value,
    ) -> BoxFuture<'_, Result<(), JournalError>> {
        let payload = self.redactor.json(payload);
        self.inner.append(at_ms, kind, payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn debug_says_how_many_secrets_and_never_shows_them() {
        let redactor = Redactor::new(["sk-live-0123456789".to_string(), "ghp_abcdefgh".into()]);
        let shown = format!("{redactor:?}");
        assert_eq!(shown, "Redactor { secrets: 2 }");
    }

    #[test]
    fn redacts_keys_and_url_credentials_everywhere_in_json() {
        let redactor = Redactor::new(["sk-live-abcdef123456".to_string(), "short".to_string()]);
        let value = redactor.json(json!({
            "error": "bad key sk-live-abcdef123456",
            "nested": [{"url": "https://user:pw@example.com/x"}],
            "sk-live-abcdef123456": 1,
            "short": "short stays"
        }));
        let text = value.to_string();
        assert!(!text.contains("sk-live-abcdef123456"), "{text}");
        assert!(!text.contains("user:pw"), "{text}");
        assert!(text.contains("[redacted]"));
        assert!(text.contains("short stays"));
    }

    #[test]
    fn an_event_redaction_breaks_is_replaced_by_a_notice_never_kept() {
        // The secret is part of the event's type tag: redacted, the JSON is no event.
        let redactor = Redactor::new(["agent_message".to_string()]);
        let event = Event::AgentMessage {
            text: "the key is agent_message".into(),
        };
        let redacted = redactor.event(event);
        assert_eq!(redacted, Event::RedactionFailed);
        let shown = serde_json::to_string(&redacted).unwrap();
        assert_eq!(shown, r#"{"type":"redaction_failed"}"#);

        // A status name, likewise.
        let redactor = Redactor::new(["completed".to_string()]);
        let event = Event::TaskFinished {
            status: warden_protocol::TaskStatus::Completed,
            outcome: "completed".into(),
        };
        assert_eq!(redactor.event(event), Event::RedactionFailed);

        // An ordinary event is redacted and kept.
        let redactor = Redactor::new(["sk-live-abcdef123456".to_string()]);
        let event = Event::AgentMessage {
            text: "key sk-live-abcdef123456".into(),
        };
        assert_eq!(
            redactor.event(event),
            Event::AgentMessage {
                text: "key [redacted]".into()
            }
        );
    }
}
