//! How a model client is configured: provider, endpoint, key, wire options, timeouts and retries.
//! The CLI fills these from `warden.toml` and the environment; nothing here reads either.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::time::Duration;

/// The wire protocol a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI Chat Completions, and every server compatible with it (vLLM, Ollama, llama.cpp,
    /// OpenRouter).
    #[serde(rename = "openai")]
    OpenAi,
    /// Anthropic Messages.
    Anthropic,
}

impl Provider {
    /// The prefix of `provider:model` names.
    pub fn as_str(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::Anthropic => "anthropic",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Provider {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "openai" => Ok(Provider::OpenAi),
            "anthropic" => Ok(Provider::Anthropic),
            other => Err(ConfigError::UnknownProvider(other.to_string())),
        }
    }
}

/// Which field carries the output token limit of an OpenAI-compatible request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    /// `max_completion_tokens`: what OpenAI itself wants (reasoning models reject `max_tokens`).
    MaxCompletionTokens,
    /// `max_tokens`: what many compatible servers still only understand.
    MaxTokens,
}

/// The role system instructions are sent with to an OpenAI-compatible server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemRole {
    /// `system`: understood everywhere (OpenAI maps it to `developer` for reasoning models).
    System,
    /// `developer`: OpenAI's newer name, unknown to many compatible servers.
    Developer,
}

/// How often and how patiently a failing call is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryConfig {
    /// Attempts in total, the first one included (`1` = never retry; `0` is treated as `1`).
    pub max_attempts: u32,
    /// The first backoff delay; doubled after every failure.
    pub base_delay: Duration,
    /// The longest backoff delay.
    pub max_delay: Duration,
}

impl Default for RetryConfig {
    fn default() -> RetryConfig {
        RetryConfig {
            max_attempts: 5,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

/// One model endpoint.
#[derive(Clone, PartialEq)]
pub struct ModelConfig {
    pub provider: Provider,
    /// The provider's model id, e.g. `gpt-5.1` or `claude-sonnet-4-5`.
    pub model: String,
    /// OpenAI: includes `/v1` (requests go to `{base_url}/chat/completions`). Anthropic: without
    /// `/v1` (requests go to `{base_url}/v1/messages`). A trailing slash is ignored.
    pub base_url: String,
    /// Sent as `Authorization: Bearer` (OpenAI) or `x-api-key` (Anthropic); never logged.
    pub api_key: Option<String>,
    /// Ask for a streamed (SSE) response.
    pub stream: bool,
    /// OpenAI streaming: send `stream_options.include_usage` (some compatible servers reject it).
    pub stream_usage: bool,
    /// OpenAI: which field carries the output token limit.
    pub max_tokens_field: MaxTokensField,
    /// OpenAI: the role of system instructions.
    pub system_role: SystemRole,
    /// The deadline of one attempt, from sending the request to the end of the response body.
    pub request_timeout: Duration,
    pub retry: RetryConfig,
    /// OpenAI: send the request's cache key as `prompt_cache_key` (servers that refuse unknown
    /// fields: false).
    pub prompt_cache_key: bool,
    /// OpenAI: `prompt_cache_retention` (e.g. `24h`) for the models that take it; none by
    /// default, as a server that does not know it answers 400.
    pub prompt_cache_retention: Option<String>,
    /// Anthropic: how long the tools and system prompt stay cached (the conversation's own
    /// breakpoints always use the 5-minute default).
    pub cache_ttl: CacheTtl,
}

/// Anthropic's prompt-cache lifetimes: writes cost 1.25x the input price for 5 minutes, 2x
/// for an hour; reads 0.1x either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheTtl {
    FiveMinutes,
    OneHour,
}

/// The API key is redacted: configs end up in debug logs.
impl fmt::Debug for ModelConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ModelConfig")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("stream", &self.stream)
            .field("stream_usage", &self.stream_usage)
            .field("max_tokens_field", &self.max_tokens_field)
            .field("system_role", &self.system_role)
            .field("request_timeout", &self.request_timeout)
            .field("retry", &self.retry)
            .field("prompt_cache_key", &self.prompt_cache_key)
            .field("prompt_cache_retention", &self.prompt_cache_retention)
            .field("cache_ttl", &self.cache_ttl)
            .finish()
    }
}

/// Default deadline of one attempt: long enough for a slow reasoning model writing a large file.
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(600);

impl ModelConfig {
    /// OpenAI's own API with its current wire options, streaming with usage.
    pub fn openai(model: impl Into<String>) -> ModelConfig {
        ModelConfig {
            provider: Provider::OpenAi,
            model: model.into(),
            base_url: "https://api.openai.com/v1".to_string(),
            api_key: None,
            stream: true,
            stream_usage: true,
            max_tokens_field: MaxTokensField::MaxCompletionTokens,
            system_role: SystemRole::System,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            retry: RetryConfig::default(),
            prompt_cache_key: true,
            prompt_cache_retention: None,
            cache_ttl: CacheTtl::OneHour,
        }
    }

    /// Anthropic's API, streaming.
    pub fn anthropic(model: impl Into<String>) -> ModelConfig {
        ModelConfig {
            provider: Provider::Anthropic,
            model: model.into(),
            base_url: "https://api.anthropic.com".to_string(),
            api_key: None,
            stream: true,
            stream_usage: true,
            max_tokens_field: MaxTokensField::MaxTokens,
            system_role: SystemRole::System,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            retry: RetryConfig::default(),
            prompt_cache_key: true,
            prompt_cache_retention: None,
            cache_ttl: CacheTtl::OneHour,
        }
    }

    /// `provider:model`, the name used in events, results and the price table.
    pub fn name(&self) -> String {
        format!("{}:{}", self.provider, self.model)
    }

    /// The full URL requests are posted to.
    pub(crate) fn endpoint(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        match self.provider {
            Provider::OpenAi => format!("{base}/chat/completions"),
            Provider::Anthropic => format!("{base}/v1/messages"),
        }
    }

    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        if self.model.trim().is_empty() {
            return Err(ConfigError::EmptyModel);
        }
        let url = reqwest::Url::parse(self.base_url.trim_end_matches('/')).map_err(|error| {
            ConfigError::InvalidBaseUrl {
                url: self.base_url.clone(),
                reason: error.to_string(),
            }
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(ConfigError::InvalidBaseUrl {
                url: self.base_url.clone(),
                reason: format!("scheme {:?} is not http or https", url.scheme()),
            });
        }
        if self.request_timeout.is_zero() {
            return Err(ConfigError::ZeroTimeout);
        }
        if let Some(key) = &self.api_key {
            if reqwest::header::HeaderValue::from_str(key).is_err() {
                return Err(ConfigError::InvalidApiKey);
            }
        }
        Ok(())
    }
}

/// A model configuration that cannot work.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The provider part of `provider:model` is not one Warden speaks.
    #[error("unknown model provider {0:?} (expected openai or anthropic)")]
    UnknownProvider(String),
    /// No model id was given.
    #[error("model name is empty")]
    EmptyModel,
    /// The base URL does not parse or is not http(s).
    #[error("invalid model base url {url:?}: {reason}")]
    InvalidBaseUrl { url: String, reason: String },
    /// The API key cannot be sent in an HTTP header (the key itself is not repeated here).
    #[error("model api key contains characters not allowed in an http header")]
    InvalidApiKey,
    /// A zero request timeout would fail every call.
    #[error("model request timeout must be greater than zero")]
    ZeroTimeout,
    /// The HTTP client could not be built (TLS set-up).
    #[error("cannot build the http client: {0}")]
    HttpClient(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_normalise_a_trailing_slash() {
        let mut openai = ModelConfig::openai("gpt-5.1");
        assert_eq!(
            openai.endpoint(),
            "https://api.openai.com/v1/chat/completions"
        );
        openai.base_url = "http://localhost:11434/v1/".into();
        assert_eq!(
            openai.endpoint(),
            "http://localhost:11434/v1/chat/completions"
        );
        let mut anthropic = ModelConfig::anthropic("claude-sonnet-4-5");
        assert_eq!(
            anthropic.endpoint(),
            "https://api.anthropic.com/v1/messages"
        );
        anthropic.base_url = "http://127.0.0.1:9/".into();
        assert_eq!(anthropic.endpoint(), "http://127.0.0.1:9/v1/messages");
    }

    #[test]
    fn debug_output_never_shows_the_key() {
        let mut config = ModelConfig::openai("gpt-5.1");
        config.api_key = Some("sk-secret-value".into());
        let shown = format!("{config:?}");
        assert!(!shown.contains("sk-secret-value"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn validation_names_the_problem() {
        let mut config = ModelConfig::openai("");
        assert_eq!(config.validate(), Err(ConfigError::EmptyModel));
        config.model = "m".into();
        config.base_url = "ftp://x".into();
        assert!(matches!(
            config.validate(),
            Err(ConfigError::InvalidBaseUrl { .. })
        ));
        config.base_url = "http://x/v1".into();
        config.api_key = Some("bad\nkey".into());
        assert_eq!(config.validate(), Err(ConfigError::InvalidApiKey));
        assert_eq!(
            "gemini".parse::<Provider>(),
            Err(ConfigError::UnknownProvider("gemini".into()))
        );
    }
}

/// The context window, in tokens, of the model families Warden knows by name (the published
/// figures; `[model] context_tokens` overrides). `None` for any other model: its conversation is
/// never compacted unless the operator names its window.
pub fn known_context_tokens(model: &str) -> Option<u64> {
    const KNOWN: &[(&str, u64)] = &[
        ("claude-", 200_000),
        ("gpt-5", 400_000),
        ("gpt-4.1", 1_047_576),
        ("gpt-4o", 128_000),
        ("o1", 200_000),
        ("o3", 200_000),
        ("o4-mini", 200_000),
    ];
    KNOWN
        .iter()
        .find(|(prefix, _)| model.starts_with(prefix))
        .map(|(_, tokens)| *tokens)
}

#[cfg(test)]
mod context_tests {
    use super::known_context_tokens;

    #[test]
    fn known_families_have_their_published_windows_and_others_none() {
        assert_eq!(known_context_tokens("claude-sonnet-4-5"), Some(200_000));
        assert_eq!(known_context_tokens("gpt-5.1"), Some(400_000));
        assert_eq!(known_context_tokens("gpt-4o-mini"), Some(128_000));
        assert_eq!(known_context_tokens("llama3.1:8b"), None);
    }
}
