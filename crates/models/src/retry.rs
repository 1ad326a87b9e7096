//! Deciding whether a failed attempt is worth another one, and how long to wait first: HTTP
//! status and provider error types, `x-should-retry`, `retry-after-ms`, `retry-after`, and
//! exponential backoff with jitter.

use crate::config::RetryConfig;
use reqwest::header::HeaderMap;
use serde_json::Value;
use std::time::{Duration, SystemTime};

/// The longest wait a server may ask for; a longer request is cut to this.
pub(crate) const MAX_SERVER_DELAY: Duration = Duration::from_secs(60);

/// Provider-supplied text kept in error messages is cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 500;

/// Why one attempt failed.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AttemptError {
    /// Worth another attempt (rate limit, overload, 5xx, transport error, timeout, cut stream).
    Retryable {
        reason: String,
        /// The delay the server asked for, already capped.
        delay: Option<Duration>,
    },
    /// Retrying cannot help.
    Permanent {
        status: Option<u16>,
        message: String,
        /// Whether another model could succeed: yes for an unusable primary (bad key, no credit,
        /// unknown model), no for a request the provider found malformed (400, 413, 422), which
        /// another model would most likely refuse too and which should surface as a bug.
        fallback: bool,
    },
    /// The response could not be understood.
    Protocol { message: String },
}

impl AttemptError {
    pub(crate) fn retryable(reason: impl Into<String>) -> AttemptError {
        AttemptError::Retryable {
            reason: reason.into(),
            delay: None,
        }
    }

    pub(crate) fn protocol(message: impl Into<String>) -> AttemptError {
        AttemptError::Protocol {
            message: message.into(),
        }
    }

    /// The same error, its message followed by `; note`.
    pub(crate) fn with_note(self, note: &str) -> AttemptError {
        match self {
            AttemptError::Retryable { reason, delay } => AttemptError::Retryable {
                reason: format!("{reason}; {note}"),
                delay,
            },
            AttemptError::Permanent {
                status,
                message,
                fallback,
            } => AttemptError::Permanent {
                status,
                message: format!("{message}; {note}"),
                fallback,
            },
            AttemptError::Protocol { message } => AttemptError::Protocol {
                message: format!("{message}; {note}"),
            },
        }
    }
}

/// The fields of a provider error object that matter for classification and messages.
#[derive(Debug, Default, PartialEq)]
struct ProviderError {
    kind: Option<String>,
    code: Option<String>,
    message: Option<String>,
}

impl ProviderError {
    /// Reads `{"error": {...}}` (OpenAI, Anthropic, OpenRouter), `{"error": "text"}` (Ollama),
    /// a bare error object, or `{"detail": ...}` / `{"message": ...}` (other compatible servers).
    fn from_body(body: &Value) -> ProviderError {
        match body.get("error") {
            Some(Value::String(message)) => ProviderError {
                message: Some(message.clone()),
                ..ProviderError::default()
            },
            Some(error @ Value::Object(_)) => ProviderError::from_object(error),
            _ => {
                let mut error = ProviderError::from_object(body);
                if error.message.is_none() {
                    error.message = body.get("detail").map(text_of);
                }
                error
            }
        }
    }

    fn from_object(error: &Value) -> ProviderError {
        let field = |name: &str| error.get(name).filter(|v| !v.is_null()).map(text_of);
        ProviderError {
            kind: field("type"),
            code: field("code"),
            message: field("message"),
        }
    }

    fn is(&self, name: &str) -> bool {
        self.kind.as_deref() == Some(name) || self.code.as_deref() == Some(name)
    }

    /// `type/code: message`, whatever of it is present.
    fn summary(&self) -> String {
        let mut labels: Vec<&str> = Vec::new();
        labels.extend(self.kind.as_deref());
        if self.code != self.kind {
            labels.extend(self.code.as_deref());
        }
        match (labels.is_empty(), &self.message) {
            (true, None) => String::new(),
            (true, Some(message)) => message.clone(),
            (false, None) => labels.join("/"),
            (false, Some(message)) => format!("{}: {message}", labels.join("/")),
        }
    }
}

fn text_of(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Error types that no retry fixes, and whether another model might still succeed.
fn permanent_kind(error: &ProviderError) -> Option<bool> {
    const NO_FALLBACK: [&str; 4] = [
        "invalid_request_error",
        "request_too_large",
        "context_length_exceeded",
        "invalid_prompt",
    ];
    const FALLBACK: [&str; 7] = [
        "insufficient_quota",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "billing_error",
        "invalid_api_key",
        "model_not_found",
    ];
    if NO_FALLBACK.iter().any(|name| error.is(name)) {
        Some(false)
    } else if FALLBACK.iter().any(|name| error.is(name)) {
        Some(true)
    } else {
        None
    }
}

fn is_retryable_status(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

fn status_allows_fallback(status: u16) -> bool {
    !matches!(status, 400 | 413 | 422)
}

/// Classifies a non-success HTTP response.
pub(crate) fn classify_http_error(
    status: u16,
    headers: &HeaderMap,
    body: &str,
    secret: Option<&str>,
) -> AttemptError {
    let error = serde_json::from_str::<Value>(body)
        .map(|json| ProviderError::from_body(&json))
        .unwrap_or_else(|_| ProviderError {
            message: Some(body.trim().to_string()).filter(|text| !text.is_empty()),
            ..ProviderError::default()
        });
    let summary = error.summary();
    let message = clean(
        &if summary.is_empty() {
            format!("http {status}")
        } else {
            format!("http {status}: {summary}")
        },
        secret,
    );
    // An exhausted quota is answered with 429 but no wait fixes it; the body is definitive, so it
    // wins even over `x-should-retry`.
    if error.is("insufficient_quota") {
        return AttemptError::Permanent {
            status: Some(status),
            message,
            fallback: true,
        };
    }
    let should_retry = headers
        .get("x-should-retry")
        .and_then(|value| value.to_str().ok())
        .map(|value| value.trim().to_ascii_lowercase());
    let retry = match should_retry.as_deref() {
        Some("true") => true,
        Some("false") => false,
        _ => is_retryable_status(status),
    };
    if retry {
        AttemptError::Retryable {
            reason: message,
            delay: server_delay(headers, SystemTime::now()),
        }
    } else {
        AttemptError::Permanent {
            status: Some(status),
            message,
            fallback: status_allows_fallback(status),
        }
    }
}

/// Classifies an error object received where a response was expected: a `data:` event of an
/// OpenAI-compatible stream, an Anthropic `error` event, or an error body sent with HTTP 200.
/// An unrecognised error after the server accepted the request is most likely transient, so it
/// is retried (the attempt limit bounds the cost of being wrong).
pub(crate) fn classify_error_object(body: &Value, secret: Option<&str>) -> AttemptError {
    let error = ProviderError::from_body(body);
    let message = clean(&format!("error from provider: {}", error.summary()), secret);
    if let Some(fallback) = permanent_kind(&error) {
        return AttemptError::Permanent {
            status: None,
            message,
            fallback,
        };
    }
    // OpenRouter and vLLM put an HTTP status in `code`.
    if let Some(status) = error
        .code
        .as_deref()
        .and_then(|code| code.parse::<u16>().ok())
    {
        if (400..=599).contains(&status) && !is_retryable_status(status) {
            return AttemptError::Permanent {
                status: Some(status),
                message,
                fallback: status_allows_fallback(status),
            };
        }
    }
    AttemptError::retryable(message)
}

/// The delay the server asked for: `retry-after-ms`, else `retry-after` in seconds or as an HTTP
/// date; capped at `MAX_SERVER_DELAY`.
pub(crate) fn server_delay(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|value| value.to_str().ok())
            .map(str::trim)
    };
    let seconds = |text: &str| {
        text.parse::<f64>()
            .ok()
            .filter(|value| value.is_finite() && *value >= 0.0)
    };
    let delay = if let Some(ms) = header("retry-after-ms").and_then(seconds) {
        Some(Duration::from_secs_f64(
            ms.min(MAX_SERVER_DELAY.as_secs_f64() * 1000.0) / 1000.0,
        ))
    } else if let Some(value) = header("retry-after") {
        match seconds(value) {
            Some(secs) => Some(Duration::from_secs_f64(
                secs.min(MAX_SERVER_DELAY.as_secs_f64()),
            )),
            None => httpdate::parse_http_date(value)
                .ok()
                .map(|at| at.duration_since(now).unwrap_or(Duration::ZERO)),
        }
    } else {
        None
    };
    delay.map(|delay| delay.min(MAX_SERVER_DELAY))
}

/// Exponential backoff after the `failed_attempt`-th failure (1-based): `base * 2^(n-1)`, capped
/// at `max_delay`, less up to a quarter at random so that clients do not retry in lockstep.
pub(crate) fn backoff(retry: &RetryConfig, failed_attempt: u32) -> Duration {
    let exponent = failed_attempt.saturating_sub(1).min(30);
    let delay = retry
        .base_delay
        .saturating_mul(1u32 << exponent)
        .min(retry.max_delay);
    delay.mul_f64(1.0 - 0.25 * random_fraction())
}

/// A number in `[0, 1)`, random enough for jitter, without a dependency: std's `RandomState` is
/// seeded from the OS once per thread and its keys advance with every instance.
fn random_fraction() -> f64 {
    use std::hash::BuildHasher;
    let bits = std::collections::hash_map::RandomState::new().hash_one(std::time::Instant::now());
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

/// Removes the API key (should a provider echo it) and cuts overly long provider text.
pub(crate) fn clean(text: &str, secret: Option<&str>) -> String {
    let text = match secret.filter(|secret| !secret.is_empty()) {
        Some(secret) => text.replace(secret, "<redacted>"),
        None => text.to_string(),
    };
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderName, HeaderValue};

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(name, value)| {
                (
                    HeaderName::from_bytes(name.as_bytes()).unwrap(),
                    HeaderValue::from_str(value).unwrap(),
                )
            })
            .collect()
    }

    /// `(retryable?, fallback?)` of an HTTP error.
    fn check_http(status: u16, pairs: &[(&str, &str)], body: &str, expected: (bool, bool)) {
        let got = match classify_http_error(status, &headers(pairs), body, None) {
            AttemptError::Retryable { .. } => (true, true),
            AttemptError::Permanent { fallback, .. } => (false, fallback),
            AttemptError::Protocol { .. } => panic!("protocol error for {status}"),
        };
        assert_eq!(
            got, expected,
            "status {status} headers {pairs:?} body {body}"
        );
    }

    #[test]
    fn http_statuses_are_classified_as_documented() {
        for status in [408, 409, 429, 500, 502, 503, 504, 529] {
            check_http(status, &[], "", (true, true));
        }
        for status in [400, 413, 422] {
            check_http(status, &[], "", (false, false));
        }
        for status in [401, 402, 403, 404] {
            check_http(status, &[], "", (false, true));
        }
        let quota = r#"{"error":{"message":"You exceeded your current quota","type":"insufficient_quota","param":null,"code":"insufficient_quota"}}"#;
        check_http(429, &[], quota, (false, true));
        check_http(429, &[("x-should-retry", "true")], quota, (false, true));
        check_http(400, &[("x-should-retry", "true")], "", (true, true));
        check_http(503, &[("x-should-retry", "false")], "", (false, true));
    }

    #[test]
    fn in_band_error_objects_are_classified_by_type_and_code() {
        let check = |body: Value, expected: Option<bool>| {
            let got = match classify_error_object(&body, None) {
                AttemptError::Retryable { .. } => None,
                AttemptError::Permanent { fallback, .. } => Some(fallback),
                AttemptError::Protocol { .. } => panic!("protocol"),
            };
            assert_eq!(got, expected, "{body}");
        };
        use serde_json::json;
        check(
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
            None,
        );
        check(
            json!({"error":{"message":"boom","type":"server_error","code":null}}),
            None,
        );
        check(json!({"error":{"code":502,"message":"upstream"}}), None);
        check(
            json!({"error":{"code":402,"message":"no credits"}}),
            Some(true),
        );
        check(
            json!({"error":{"code":400,"message":"bad","type":"BadRequestError"}}),
            Some(false),
        );
        check(
            json!({"type":"error","error":{"type":"invalid_request_error","message":"x"}}),
            Some(false),
        );
        check(
            json!({"error":{"type":"insufficient_quota","message":"x"}}),
            Some(true),
        );
        check(json!({"error":"model crashed"}), None);
    }

    #[test]
    fn server_delays_prefer_milliseconds_then_seconds_then_dates_and_are_capped() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let delay = |pairs: &[(&str, &str)]| server_delay(&headers(pairs), now);
        assert_eq!(delay(&[]), None);
        assert_eq!(
            delay(&[("retry-after-ms", "20"), ("retry-after", "5")]),
            Some(Duration::from_millis(20))
        );
        assert_eq!(delay(&[("retry-after", "2")]), Some(Duration::from_secs(2)));
        assert_eq!(delay(&[("retry-after", "0")]), Some(Duration::ZERO));
        assert_eq!(delay(&[("retry-after", "86400")]), Some(MAX_SERVER_DELAY));
        let in_ten = httpdate::fmt_http_date(now + Duration::from_secs(10));
        assert_eq!(
            delay(&[("retry-after", &in_ten)]),
            Some(Duration::from_secs(10))
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(10));
        assert_eq!(delay(&[("retry-after", &past)]), Some(Duration::ZERO));
        assert_eq!(delay(&[("retry-after", "soon")]), None);
        assert_eq!(delay(&[("retry-after-ms", "-1")]), None);
    }

    #[test]
    fn backoff_doubles_with_jitter_up_to_the_cap() {
        let retry = RetryConfig {
            max_attempts: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        for (attempt, full) in [(1, 100), (2, 200), (3, 400), (4, 500), (40, 500)] {
            let got = backoff(&retry, attempt);
            let full = Duration::from_millis(full);
            assert!(
                got <= full && got >= full.mul_f64(0.75),
                "{attempt}: {got:?}"
            );
        }
    }

    #[test]
    fn messages_never_carry_the_key_and_are_bounded() {
        let body = r#"{"error":{"message":"Incorrect API key provided: sk-live-123","type":"invalid_request_error","code":"invalid_api_key"}}"#;
        let AttemptError::Permanent { message, .. } =
            classify_http_error(401, &HeaderMap::new(), body, Some("sk-live-123"))
        else {
            panic!("not permanent")
        };
        assert!(!message.contains("sk-live-123"), "{message}");
        assert!(message.starts_with("http 401: invalid_request_error/invalid_api_key"));
        assert_eq!(clean(&"é".repeat(600), None).chars().count(), 501);
    }
}
