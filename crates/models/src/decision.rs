//! What the wire modules (`openai`, `anthropic`) hand back to `endpoint`: a response's
//! [`Decision`] and, while a stream is read, whether to keep reading it ([`Flow`]). Kept apart
//! from `endpoint` so the wire modules depend on it and not on the module that calls them.

use warden_runtime::{TokenUsage, ToolCall};

/// What a response decided, before it is priced and named.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Decision {
    pub text: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Option<TokenUsage>,
    pub stop_reason: Option<String>,
}

/// Whether to keep reading a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// The server said it is done (`[DONE]`, `message_stop`).
    Stop,
}
