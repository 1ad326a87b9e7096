//! The Anthropic Messages wire format: building the request (system apart, tool results merged
//! into user turns, prompt-cache breakpoints), reading a complete response, and assembling a
//! streamed one from its typed events.

use crate::config::{CacheTtl, ModelConfig};
use crate::decision::{Decision, Flow};
use crate::retry::{classify_error_object, AttemptError};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;
use warden_runtime::{Message, ModelRequest, TokenUsage, ToolCall};

/// The API version this client speaks.
pub(crate) const API_VERSION: &str = "2023-06-01";

/// `max_tokens` is required; used when the runtime sets no limit.
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The request body.
///
/// Prompt-cache breakpoints (at most three of the four allowed), in the prefix's order: the
/// system prompt, which caches the tools before it too, with the longer lifetime
/// ([`ModelConfig::cache_ttl`]); the last block of the previous user turn and the last block of
/// the conversation, with the 5-minute default. Each turn of an agent loop then reads every
/// earlier turn from the cache, even when a turn added more blocks than the provider looks back
/// from one breakpoint (20).
pub(crate) fn request_body(config: &ModelConfig, request: &ModelRequest) -> Value {
    let system: Vec<&str> = request
        .messages
        .iter()
        .filter_map(|message| match message {
            Message::System { text } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        })
        .collect();

    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match turns.last_mut() {
        Some((last_role, blocks)) if *last_role == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for message in &request.messages {
        match message {
            Message::System { .. } => {}
            Message::User { text } => {
                if !text.is_empty() {
                    push("user", json!({"type": "text", "text": text}));
                }
            }
            Message::Assistant { text, tool_calls } => {
                if let Some(text) = text.as_deref().filter(|text| !text.is_empty()) {
                    push("assistant", json!({"type": "text", "text": text}));
                }
                for call in tool_calls {
                    push(
                        "assistant",
                        json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)}),
                    );
                }
            }
            Message::Tool {
                call_id,
                content,
                is_error,
            } => push(
                "user",
                json!({"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": is_error}),
            ),
        }
    }
    let mut messages: Vec<Value> = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // The answer to tool calls must start with their results, before any text.
            blocks.sort_by_key(|block| block["type"] != "tool_result");
            json!({"role": role, "content": blocks})
        })
        .collect();
    let user_turns: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, message)| message["role"] == "user")
        .map(|(index, _)| index)
        .collect();
    let last = messages.len().checked_sub(1);
    let previous_user = user_turns
        .iter()
        .rev()
        .find(|&&index| Some(index) != last)
        .copied();
    for index in [previous_user, last].into_iter().flatten() {
        if let Some(block) = messages[index]["content"]
            .as_array_mut()
            .and_then(|blocks| blocks.last_mut())
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
    }

    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    let max_tokens = match request.max_output_tokens {
        0 => DEFAULT_MAX_TOKENS,
        limit => limit,
    };
    body.insert("max_tokens".into(), json!(max_tokens));
    if !system.is_empty() {
        body.insert(
            "system".into(),
            json!([{"type": "text", "text": system.join("\n\n"), "cache_control": match config.cache_ttl {
                CacheTtl::OneHour => json!({"type": "ephemeral", "ttl": "1h"}),
                CacheTtl::FiveMinutes => json!({"type": "ephemeral"}),
            }}]),
        );
    }
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters})
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!({"type": "auto"}));
    }
    if config.stream {
        body.insert("stream".into(), json!(true));
    }
    Value::Object(body)
}

/// The `input` object of a past tool call. The API only accepts an object, but the runtime keeps
/// arguments as the model wrote them, which may not parse (a call cut by `max_tokens`) or not be
/// an object. Such a call is replayed as `{}`: the tool result that follows already tells the
/// model its arguments were invalid, and inventing a wrapper object would teach it a shape no tool
/// accepts.
fn tool_input(call: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => {
            tracing::debug!(call_id = %call.id, "replaying tool call with unusable arguments as {{}}");
            json!({})
        }
    }
}

/// Token counts as Anthropic reports them; `input` excludes both cache counts.
#[derive(Debug, Default, Clone, Copy)]
struct RawUsage {
    seen: bool,
    input: u64,
    cache_creation: u64,
    cache_read: u64,
    /// `cache_creation.ephemeral_1h_input_tokens`: the part of `cache_creation` kept an hour.
    cache_creation_1h: u64,
    output: u64,
}

impl RawUsage {
    /// Takes the counts present in `usage`, keeping the others (a `message_delta` may carry only
    /// the cumulative output count).
    fn update(&mut self, usage: &Value) {
        if !usage.is_object() {
            return;
        }
        self.seen = true;
        let set = |field: &mut u64, name: &str| {
            if let Some(count) = usage[name].as_u64() {
                *field = count;
            }
        };
        set(&mut self.input, "input_tokens");
        set(&mut self.cache_creation, "cache_creation_input_tokens");
        set(&mut self.cache_read, "cache_read_input_tokens");
        set(&mut self.output, "output_tokens");
        if let Some(count) = usage["cache_creation"]["ephemeral_1h_input_tokens"].as_u64() {
            self.cache_creation_1h = count;
        }
    }

    /// The runtime counts every prompt token as input.
    fn token_usage(self) -> Option<TokenUsage> {
        self.seen.then_some(TokenUsage {
            input_tokens: self.input + self.cache_creation + self.cache_read,
            cached_input_tokens: self.cache_read,
            cache_write_tokens: self.cache_creation,
            cache_write_1h_tokens: self.cache_creation_1h.min(self.cache_creation),
            output_tokens: self.output,
            reasoning_tokens: 0,
        })
    }
}

/// Reads a complete (non-streamed) response.
pub(crate) fn parse_response(body: &Value, secret: Option<&str>) -> Result<Decision, AttemptError> {
    if body["type"] == "error" {
        return Err(classify_error_object(body, secret));
    }
    let Some(content) = body["content"].as_array() else {
        return Err(AttemptError::protocol("response has no content"));
    };
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for block in content {
        match block["type"].as_str() {
            Some("text") => text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: block["id"].as_str().unwrap_or_default().to_string(),
                name: block["name"].as_str().unwrap_or_default().to_string(),
                arguments: match &block["input"] {
                    Value::Null => "{}".to_string(),
                    input => input.to_string(),
                },
            }),
            _ => {} // thinking, redacted_thinking, server tool blocks
        }
    }
    let mut usage = RawUsage::default();
    usage.update(&body["usage"]);
    Ok(Decision {
        text: Some(text).filter(|text| !text.is_empty()),
        tool_calls,
        usage: usage.token_usage(),
        stop_reason: body["stop_reason"].as_str().map(str::to_string),
    })
}

/// A content block being streamed.
#[derive(Debug)]
enum Block {
    Text(String),
    /// `json` is the concatenated `partial_json`, kept verbatim as the call's arguments.
    ToolUse {
        id: String,
        name: String,
        json: String,
        start_input: Value,
    },
    /// Thinking and anything newer: not part of the decision.
    Other,
}

/// Assembles a streamed response from `message_start`, `content_block_*`, `message_delta`,
/// `message_stop`, `ping` and `error` events.
#[derive(Debug)]
pub(crate) struct StreamAssembler {
    secret: Option<String>,
    blocks: BTreeMap<u64, Block>,
    usage: RawUsage,
    stop_reason: Option<String>,
    stopped: bool,
}

impl StreamAssembler {
    pub(crate) fn new(secret: Option<&str>) -> StreamAssembler {
        StreamAssembler {
            secret: secret.map(str::to_string),
            blocks: BTreeMap::new(),
            usage: RawUsage::default(),
            stop_reason: None,
            stopped: false,
        }
    }

    /// Takes one event (`json` is `None` when its data is not JSON).
    pub(crate) fn on_event(
        &mut self,
        event: Option<&str>,
        data: &str,
        json: Option<&Value>,
    ) -> Result<Flow, AttemptError> {
        let Some(json) = json else {
            tracing::warn!(data = %crate::retry::clean(data, self.secret.as_deref()), "ignoring a stream event that is not json");
            return Ok(Flow::Continue);
        };
        let kind = json["type"].as_str().or(event).unwrap_or_default();
        let index = json["index"].as_u64().unwrap_or(0);
        match kind {
            "message_start" => self.usage.update(&json["message"]["usage"]),
            "content_block_start" => {
                let block = &json["content_block"];
                let block = match block["type"].as_str() {
                    Some("text") => {
                        Block::Text(block["text"].as_str().unwrap_or_default().to_string())
                    }
                    Some("tool_use") => Block::ToolUse {
                        id: block["id"].as_str().unwrap_or_default().to_string(),
                        name: block["name"].as_str().unwrap_or_default().to_string(),
                        json: String::new(),
                        start_input: block["input"].clone(),
                    },
                    _ => Block::Other,
                };
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let delta = &json["delta"];
                match (self.blocks.get_mut(&index), delta["type"].as_str()) {
                    (Some(Block::Text(text)), Some("text_delta")) => {
                        text.push_str(delta["text"].as_str().unwrap_or_default());
                    }
                    (None, Some("text_delta")) => {
                        let text = delta["text"].as_str().unwrap_or_default().to_string();
                        self.blocks.insert(index, Block::Text(text));
                    }
                    (Some(Block::ToolUse { json, .. }), Some("input_json_delta")) => {
                        json.push_str(delta["partial_json"].as_str().unwrap_or_default());
                    }
                    _ => {} // thinking, signature, citations
                }
            }
            "message_delta" => {
                if let Some(reason) = json["delta"]["stop_reason"].as_str() {
                    self.stop_reason = Some(reason.to_string());
                }
                self.usage.update(&json["usage"]);
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Flow::Stop);
            }
            "error" => return Err(classify_error_object(json, self.secret.as_deref())),
            _ => {} // ping, content_block_stop, and event types added later
        }
        Ok(Flow::Continue)
    }

    /// Whether the server said the response was complete.
    pub(crate) fn is_complete(&self) -> bool {
        self.stopped || self.stop_reason.is_some()
    }

    pub(crate) fn finish(self) -> Decision {
        let mut text = String::new();
        let mut tool_calls = Vec::new();
        for block in self.blocks.into_values() {
            match block {
                Block::Text(piece) => text.push_str(&piece),
                Block::ToolUse {
                    id,
                    name,
                    json,
                    start_input,
                } => {
                    let arguments = if !json.trim().is_empty() {
                        json
                    } else if start_input.is_object() {
                        start_input.to_string()
                    } else {
                        "{}".to_string()
                    };
                    tool_calls.push(ToolCall {
                        id,
                        name,
                        arguments,
                    });
                }
                Block::Other => {}
            }
        }
        Decision {
            text: Some(text).filter(|text| !text.is_empty()),
            tool_calls,
            usage: self.usage.token_usage(),
            stop_reason: self.stop_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_runtime::ToolSpec;

    #[test]
    fn request_merges_tool_results_and_puts_them_first() {
        let call = |id: &str, arguments: &str| ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: arguments.into(),
        };
        let request = ModelRequest {
            messages: vec![
                Message::System { text: "a".into() },
                Message::System { text: "b".into() },
                Message::User { text: "q".into() },
                Message::Assistant {
                    text: Some("looking".into()),
                    tool_calls: vec![call("t1", "{\"path\":\"x\"}"), call("t2", "{not json")],
                },
                Message::Tool {
                    call_id: "t1".into(),
                    content: "ok".into(),
                    is_error: false,
                },
                Message::User {
                    text: "nudge".into(),
                },
                Message::Tool {
                    call_id: "t2".into(),
                    content: "bad args".into(),
                    is_error: true,
                },
            ],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "d".into(),
                parameters: json!({"type": "object"}),
            }],
            max_output_tokens: 0,
            cache_key: None,
        };
        let mut config = ModelConfig::anthropic("claude-x");
        config.stream = false;
        assert_eq!(
            request_body(&config, &request),
            json!({
                "model": "claude-x",
                "max_tokens": 8192,
                "system": [{"type": "text", "text": "a\n\nb", "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "q", "cache_control": {"type": "ephemeral"}}]},
                    {"role": "assistant", "content": [
                        {"type": "text", "text": "looking"},
                        {"type": "tool_use", "id": "t1", "name": "read_file", "input": {"path": "x"}},
                        {"type": "tool_use", "id": "t2", "name": "read_file", "input": {}},
                    ]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": false},
                        {"type": "tool_result", "tool_use_id": "t2", "content": "bad args", "is_error": true},
                        {"type": "text", "text": "nudge", "cache_control": {"type": "ephemeral"}},
                    ]},
                ],
                "tools": [{"name": "read_file", "description": "d", "input_schema": {"type": "object"}}],
                "tool_choice": {"type": "auto"},
            })
        );
    }

    #[test]
    fn stream_events_assemble_text_tool_calls_and_usage() {
        let mut assembler = StreamAssembler::new(None);
        let events = [
            json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"usage":{"input_tokens":10,"cache_creation_input_tokens":200,"cache_read_input_tokens":3000,"output_tokens":1}}}),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"ping"}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"look."}}),
            json!({"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_1","name":"f","input":{}}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"a\": "}}),
            json!({"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"1}"}}),
            json!({"type":"content_block_stop","index":2}),
            json!({"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"toolu_2","name":"g","input":{}}}),
            json!({"type":"content_block_stop","index":3}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":42}}),
        ];
        for event in &events {
            assert_eq!(
                assembler.on_event(None, "", Some(event)),
                Ok(Flow::Continue)
            );
        }
        assert!(assembler.is_complete());
        assert_eq!(
            assembler.on_event(
                Some("message_stop"),
                "",
                Some(&json!({"type":"message_stop"}))
            ),
            Ok(Flow::Stop)
        );
        let decision = assembler.finish();
        assert_eq!(decision.text.as_deref(), Some("Let me look."));
        assert_eq!(
            decision.tool_calls,
            [
                ToolCall {
                    id: "toolu_1".into(),
                    name: "f".into(),
                    arguments: "{\"a\": 1}".into()
                },
                ToolCall {
                    id: "toolu_2".into(),
                    name: "g".into(),
                    arguments: "{}".into()
                },
            ]
        );
        assert_eq!(decision.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(
            decision.usage,
            Some(TokenUsage {
                input_tokens: 3210,
                cached_input_tokens: 3000,
                cache_write_tokens: 200,
                output_tokens: 42,
                cache_write_1h_tokens: 0,
                reasoning_tokens: 0,
            })
        );
    }

    #[test]
    fn an_overloaded_error_event_is_retryable() {
        let mut assembler = StreamAssembler::new(None);
        let error =
            json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}});
        assert!(matches!(
            assembler.on_event(Some("error"), "", Some(&error)),
            Err(AttemptError::Retryable { .. })
        ));
    }
}
