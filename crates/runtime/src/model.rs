//! The provider-neutral model contract: the conversation the loop keeps, the request it sends,
//! the decision it gets back, and the `Model` trait every client (OpenAI-compatible, Anthropic,
//! faux) implements. Nothing here knows HTTP or a wire format.

use crate::{BoxFuture, EventSink};
use serde::{Deserialize, Serialize};

/// One message of the conversation, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        text: String,
    },
    User {
        text: String,
    },
    Assistant {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    Tool {
        call_id: String,
        content: String,
        is_error: bool,
    },
}

/// A tool call as the model made it. `arguments` is the raw JSON text the model produced: it may
/// be invalid or carry unknown keys, which the loop reports back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// What the model is told about a tool. `parameters` is a JSON Schema object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub parameters: serde_json::Value,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelRequest {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
    pub max_output_tokens: u32,
    /// The same for every request of one kind of work (repository, role, prompt version): a
    /// provider routes requests with equal keys to the same prompt cache (OpenAI's
    /// `prompt_cache_key`). Never volatile (no time, no task id).
    pub cache_key: Option<String>,
}

/// Token counts of one response. `input_tokens` counts every prompt token, cached ones included;
/// `cached_input_tokens` is the part read from a prompt cache; `cache_write_tokens` the part
/// written to it (Anthropic).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenUsage {
    pub input_tokens: u64,
    pub cached_input_tokens: u64,
    pub cache_write_tokens: u64,
    /// The part of `cache_write_tokens` written with the 1-hour lifetime (Anthropic), which
    /// costs more than the 5-minute one.
    #[serde(default)]
    pub cache_write_1h_tokens: u64,
    pub output_tokens: u64,
    /// The part of `output_tokens` spent reasoning.
    #[serde(default)]
    pub reasoning_tokens: u64,
}

/// The money a call cost, in integer micro-dollars, or unknown when the model has no price.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cost", rename_all = "snake_case")]
pub enum Cost {
    Known { micro_usd: u64 },
    Unknown,
}

/// One model decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelResponse {
    /// The model that actually answered (the fallback's name if the fallback did).
    pub model: String,
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    /// `None` when the provider reported no usage at all.
    pub usage: Option<TokenUsage>,
    pub cost: Cost,
    pub stop_reason: Option<String>,
    /// The provider's response as received (the body, or the list of stream chunks), journaled verbatim.
    pub raw: serde_json::Value,
}

/// A model call that failed for good (after the client's own retries and fallback).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelError {
    /// The provider refused in a way retrying cannot fix: bad key, no quota, bad request.
    #[error("model provider refused the request: {message}")]
    Permanent {
        status: Option<u16>,
        message: String,
    },
    /// The provider kept failing with retryable errors until the retries ran out.
    #[error("model provider kept failing after {attempts} attempts: {message}")]
    Exhausted { attempts: u32, message: String },
    /// The response could not be understood.
    #[error("model response could not be understood: {message}")]
    Protocol { message: String },
}

/// A language model (or the faux runner) that decides the next step.
pub trait Model: Send + Sync {
    /// `provider:model`, or `faux`.
    fn name(&self) -> String;

    /// Asks for one decision. Retries, fallback and streaming are the implementation's business;
    /// it reports them through `events` (`ModelRetrying`, `ModelFallback`).
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>>;

    /// Whether the price of this model is known (used to refuse a money budget up front).
    fn has_price(&self) -> bool;
}
