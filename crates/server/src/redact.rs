//! Redaction of registered secrets (the model API keys and URL credentials of the configuration)
//! from everything Warden stores or shows: journal records, task records, progress and results.
//! Secrets never reach the model, so this is defence in depth against a provider or tool echoing
//! one back.

use serde_json::Value;
use warden_runtime::{BoxFuture, Journal, JournalError, RecordKind};

/// Replaces every registered secret with `[redacted]`.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    secrets: Vec<String>,
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
}
