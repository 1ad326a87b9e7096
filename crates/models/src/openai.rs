//! The OpenAI Chat Completions wire format, as spoken by OpenAI and the servers compatible with
//! it: building the request, reading a complete response, and assembling a streamed one despite
//! the quirks of the compatible servers (see `StreamAssembler`).

use crate::config::{MaxTokensField, ModelConfig, SystemRole};
use crate::decision::{Decision, Flow};
use crate::retry::{classify_error_object, AttemptError};
use serde_json::{json, Map, Value};
use warden_runtime::{Message, ModelRequest, TokenUsage, ToolCall};

/// The request body.
pub(crate) fn request_body(config: &ModelConfig, request: &ModelRequest) -> Value {
    let system_role = match config.system_role {
        SystemRole::System => "system",
        SystemRole::Developer => "developer",
    };
    let messages: Vec<Value> = request
        .messages
        .iter()
        .map(|message| match message {
            Message::System { text } => json!({"role": system_role, "content": text}),
            Message::User { text } => json!({"role": "user", "content": text}),
            Message::Assistant { text, tool_calls } => {
                let text = text.as_deref().filter(|text| !text.is_empty());
                let mut out = Map::new();
                out.insert("role".into(), json!("assistant"));
                // `content: null` is only valid next to tool calls.
                out.insert(
                    "content".into(),
                    match (text, tool_calls.is_empty()) {
                        (Some(text), _) => json!(text),
                        (None, false) => Value::Null,
                        (None, true) => json!(""),
                    },
                );
                if !tool_calls.is_empty() {
                    let calls: Vec<Value> = tool_calls
                        .iter()
                        .map(|call| {
                            json!({
                                "id": call.id,
                                "type": "function",
                                "function": {"name": call.name, "arguments": call.arguments},
                            })
                        })
                        .collect();
                    out.insert("tool_calls".into(), Value::Array(calls));
                }
                Value::Object(out)
            }
            // Chat Completions has no error flag on tool results: the runtime's text says it.
            Message::Tool {
                call_id, content, ..
            } => json!({"role": "tool", "tool_call_id": call_id, "content": content}),
        })
        .collect();

    let mut body = Map::new();
    body.insert("model".into(), json!(config.model));
    body.insert("messages".into(), Value::Array(messages));
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": tool.parameters,
                    },
                })
            })
            .collect();
        body.insert("tools".into(), Value::Array(tools));
        body.insert("tool_choice".into(), json!("auto"));
    }
    if request.max_output_tokens > 0 {
        let field = match config.max_tokens_field {
            MaxTokensField::MaxCompletionTokens => "max_completion_tokens",
            MaxTokensField::MaxTokens => "max_tokens",
        };
        body.insert(field.into(), json!(request.max_output_tokens));
    }
    // After everything else, so the part a server caches is the messages' prefix.
    if let Some(key) = request
        .cache_key
        .as_ref()
        .filter(|_| config.prompt_cache_key)
    {
        body.insert("prompt_cache_key".into(), json!(key));
    }
    if let Some(retention) = &config.prompt_cache_retention {
        body.insert("prompt_cache_retention".into(), json!(retention));
    }
    if config.stream {
        body.insert("stream".into(), json!(true));
        if config.stream_usage {
            body.insert("stream_options".into(), json!({"include_usage": true}));
        }
    }
    Value::Object(body)
}

/// Tool call ids for servers that send none: stable for a given conversation (so a journal
/// replays identically) and unique across it, as the tool results must refer to one call each.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallIds {
    turn: usize,
}

impl CallIds {
    pub(crate) fn for_request(request: &ModelRequest) -> CallIds {
        let turn = request
            .messages
            .iter()
            .filter(|message| matches!(message, Message::Assistant { .. }))
            .count();
        CallIds { turn }
    }

    fn id(self, position: usize) -> String {
        format!("call_{}_{position}", self.turn)
    }
}

/// `usage` of a response or of the last stream chunk.
fn usage_of(usage: &Value) -> Option<TokenUsage> {
    if !usage.is_object() {
        return None;
    }
    let count = |value: &Value| value.as_u64().unwrap_or(0);
    Some(TokenUsage {
        input_tokens: count(&usage["prompt_tokens"]),
        cached_input_tokens: count(&usage["prompt_tokens_details"]["cached_tokens"]),
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        output_tokens: count(&usage["completion_tokens"]),
        reasoning_tokens: count(&usage["completion_tokens_details"]["reasoning_tokens"]),
    })
}

/// Arguments as the model wrote them. Some servers send an object instead of a string; an empty
/// string means "no arguments" (seen from servers calling parameterless tools).
fn arguments_text(arguments: Option<&Value>) -> String {
    match arguments {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

fn finish_arguments(arguments: String) -> String {
    if arguments.trim().is_empty() {
        "{}".to_string()
    } else {
        arguments
    }
}

/// Message content: a string, or (some servers) an array of text parts.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|part| part.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// Reads a complete (non-streamed) response.
pub(crate) fn parse_response(
    body: &Value,
    ids: CallIds,
    secret: Option<&str>,
) -> Result<Decision, AttemptError> {
    let Some(choice) = body["choices"]
        .as_array()
        .and_then(|choices| choices.first())
    else {
        if body.get("error").is_some_and(|error| !error.is_null()) {
            return Err(classify_error_object(body, secret));
        }
        return Err(AttemptError::protocol("response has no choices"));
    };
    let message = &choice["message"];
    let mut text = content_text(&message["content"]);
    if text.is_empty() {
        text = content_text(&message["refusal"]);
    }
    let tool_calls = message["tool_calls"]
        .as_array()
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(position, call)| ToolCall {
                    id: call["id"]
                        .as_str()
                        .filter(|id| !id.is_empty())
                        .map_or_else(|| ids.id(position), str::to_string),
                    name: call["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    arguments: finish_arguments(arguments_text(call["function"].get("arguments"))),
                })
                .collect()
        })
        .unwrap_or_default();
    Ok(Decision {
        text: Some(text).filter(|text| !text.is_empty()),
        tool_calls,
        usage: usage_of(&body["usage"]),
        stop_reason: choice["finish_reason"].as_str().map(str::to_string),
    })
}

/// A tool call being assembled from stream fragments.
#[derive(Debug, Default)]
struct PartialCall {
    index: Option<u64>,
    id: Option<String>,
    name: String,
    arguments: String,
}

/// Assembles a streamed response.
///
/// Fragments of tool calls are matched to calls like this, to survive every server we know of:
/// - a fragment with an `index` continues the latest call with that index, unless it carries an
///   `id` different from that call's (several calls all sent as `index: 0`), or, without any
///   `id`, a name while that call already has a name and arguments;
/// - a fragment without an `index` (old Ollama) starts a new call when it carries an `id` other
///   than the latest call's, or no `id` but a name; otherwise it continues the latest call;
/// - a call without an `id` gets a generated one (`CallIds`).
#[derive(Debug)]
pub(crate) struct StreamAssembler {
    ids: CallIds,
    secret: Option<String>,
    text: String,
    refusal: String,
    calls: Vec<PartialCall>,
    usage: Option<TokenUsage>,
    finish_reason: Option<String>,
    done: bool,
}

impl StreamAssembler {
    pub(crate) fn new(ids: CallIds, secret: Option<&str>) -> StreamAssembler {
        StreamAssembler {
            ids,
            secret: secret.map(str::to_string),
            text: String::new(),
            refusal: String::new(),
            calls: Vec::new(),
            usage: None,
            finish_reason: None,
            done: false,
        }
    }

    /// Takes one `data:` payload (`json` is `None` when it is not JSON).
    pub(crate) fn on_data(
        &mut self,
        data: &str,
        json: Option<&Value>,
    ) -> Result<Flow, AttemptError> {
        let Some(chunk) = json else {
            if data.trim() == "[DONE]" {
                self.done = true;
                return Ok(Flow::Stop);
            }
            tracing::warn!(data = %crate::retry::clean(data, self.secret.as_deref()), "ignoring a stream event that is not json");
            return Ok(Flow::Continue);
        };
        if chunk.get("error").is_some_and(|error| !error.is_null()) {
            return Err(classify_error_object(chunk, self.secret.as_deref()));
        }
        if let Some(usage) = usage_of(&chunk["usage"]) {
            self.usage = Some(usage);
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            if choice["index"].as_u64().unwrap_or(0) != 0 {
                continue; // only one completion is ever asked for
            }
            let delta = if choice["delta"].is_object() {
                &choice["delta"]
            } else {
                &choice["message"]
            };
            self.text.push_str(&content_text(&delta["content"]));
            self.refusal.push_str(&content_text(&delta["refusal"]));
            for fragment in delta["tool_calls"].as_array().into_iter().flatten() {
                self.on_fragment(fragment);
            }
            if let Some(reason) = choice["finish_reason"].as_str() {
                self.finish_reason = Some(reason.to_string());
            }
        }
        Ok(Flow::Continue)
    }

    fn on_fragment(&mut self, fragment: &Value) {
        let index = fragment["index"].as_u64();
        let id = fragment["id"].as_str().filter(|id| !id.is_empty());
        let name = fragment["function"]["name"]
            .as_str()
            .filter(|name| !name.is_empty());
        let current = match index {
            Some(index) => self
                .calls
                .iter()
                .rposition(|call| call.index == Some(index)),
            None => self.calls.len().checked_sub(1),
        };
        let starts_new_call = match current.and_then(|position| self.calls.get(position)) {
            None => true,
            Some(call) => match (index, id, call.id.as_deref()) {
                (_, Some(id), Some(known)) => id != known,
                (Some(_), Some(_), None) => name.is_some() && !call.name.is_empty(),
                (None, Some(_), None) => true,
                (Some(_), None, _) => {
                    name.is_some() && !call.name.is_empty() && !call.arguments.is_empty()
                }
                (None, None, _) => name.is_some(),
            },
        };
        if starts_new_call {
            self.calls.push(PartialCall {
                index,
                ..PartialCall::default()
            });
        }
        let position = if starts_new_call {
            self.calls.len() - 1
        } else {
            current.unwrap_or(0)
        };
        let Some(call) = self.calls.get_mut(position) else {
            return;
        };
        if call.id.is_none() {
            call.id = id.map(str::to_string);
        }
        if call.name.is_empty() {
            if let Some(name) = name {
                call.name = name.to_string();
            }
        }
        call.arguments
            .push_str(&arguments_text(fragment["function"].get("arguments")));
    }

    /// Whether the server said the response was complete.
    pub(crate) fn is_complete(&self) -> bool {
        self.done || self.finish_reason.is_some()
    }

    pub(crate) fn finish(self) -> Decision {
        let ids = self.ids;
        let tool_calls = self
            .calls
            .into_iter()
            .filter(|call| !call.name.is_empty() || !call.arguments.is_empty())
            .enumerate()
            .map(|(position, call)| ToolCall {
                id: call.id.unwrap_or_else(|| ids.id(position)),
                name: call.name,
                arguments: finish_arguments(call.arguments),
            })
            .collect();
        let text = if self.text.is_empty() {
            self.refusal
        } else {
            self.text
        };
        Decision {
            text: Some(text).filter(|text| !text.is_empty()),
            tool_calls,
            usage: self.usage,
            stop_reason: self.finish_reason,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use warden_runtime::ToolSpec;

    fn assemble(chunks: &[Value]) -> Decision {
        let request = ModelRequest {
            messages: vec![],
            tools: vec![],
            max_output_tokens: 0,
            cache_key: None,
        };
        let mut assembler = StreamAssembler::new(CallIds::for_request(&request), None);
        for chunk in chunks {
            assembler.on_data(&chunk.to_string(), Some(chunk)).unwrap();
        }
        assembler.finish()
    }

    fn delta_calls(fragments: Value) -> Value {
        json!({"choices":[{"index":0,"delta":{"tool_calls":fragments},"finish_reason":null}]})
    }

    fn calls(decision: &Decision) -> Vec<(&str, &str, &str)> {
        decision
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect()
    }

    #[test]
    fn request_shape_follows_the_config() {
        let mut config = ModelConfig::openai("gpt-x");
        config.system_role = SystemRole::Developer;
        config.max_tokens_field = MaxTokensField::MaxTokens;
        config.stream_usage = false;
        let request = ModelRequest {
            messages: vec![
                Message::System { text: "sys".into() },
                Message::User { text: "hi".into() },
                Message::Assistant {
                    text: None,
                    tool_calls: vec![ToolCall {
                        id: "c1".into(),
                        name: "read_file".into(),
                        arguments: "{\"path\":\"a\"}".into(),
                    }],
                },
                Message::Tool {
                    call_id: "c1".into(),
                    content: "1: x".into(),
                    is_error: false,
                },
                Message::Assistant {
                    text: Some("thinking".into()),
                    tool_calls: vec![],
                },
            ],
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: "reads".into(),
                parameters: json!({"type":"object"}),
            }],
            max_output_tokens: 1000,
            cache_key: None,
        };
        let body = request_body(&config, &request);
        assert_eq!(
            body,
            json!({
                "model": "gpt-x",
                "messages": [
                    {"role": "developer", "content": "sys"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": null, "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"a\"}"}}
                    ]},
                    {"role": "tool", "tool_call_id": "c1", "content": "1: x"},
                    {"role": "assistant", "content": "thinking"},
                ],
                "tools": [{"type": "function", "function": {"name": "read_file", "description": "reads", "parameters": {"type": "object"}}}],
                "tool_choice": "auto",
                "max_tokens": 1000,
                "stream": true,
            })
        );
    }

    #[test]
    fn fragments_with_index_assemble_into_calls() {
        let decision = assemble(&[
            delta_calls(
                json!([{"index":0,"id":"a","type":"function","function":{"name":"f","arguments":""}}]),
            ),
            delta_calls(json!([{"index":0,"function":{"arguments":"{\"x\""}}])),
            delta_calls(
                json!([{"index":1,"id":"b","type":"function","function":{"name":"g","arguments":"{}"}}]),
            ),
            delta_calls(json!([{"index":0,"function":{"arguments":":1}"}}])),
        ]);
        assert_eq!(
            calls(&decision),
            [("a", "f", "{\"x\":1}"), ("b", "g", "{}")]
        );
    }

    #[test]
    fn repeated_index_zero_with_new_ids_starts_new_calls() {
        let decision = assemble(&[
            delta_calls(
                json!([{"index":0,"id":"a","function":{"name":"f","arguments":"{\"n\":"}}]),
            ),
            delta_calls(json!([{"index":0,"function":{"arguments":"1}"}}])),
            delta_calls(
                json!([{"index":0,"id":"b","function":{"name":"g","arguments":"{\"n\":"}}]),
            ),
            delta_calls(json!([{"index":0,"function":{"arguments":"2}"}}])),
        ]);
        assert_eq!(
            calls(&decision),
            [("a", "f", "{\"n\":1}"), ("b", "g", "{\"n\":2}")]
        );
    }

    #[test]
    fn repeated_index_zero_without_ids_splits_on_a_new_name() {
        let decision = assemble(&[
            delta_calls(json!([{"index":0,"function":{"name":"f","arguments":"{}"}}])),
            delta_calls(json!([{"index":0,"function":{"name":"g","arguments":"{\"a\":"}}])),
            delta_calls(json!([{"index":0,"function":{"arguments":"2}"}}])),
        ]);
        assert_eq!(
            calls(&decision),
            [("call_0_0", "f", "{}"), ("call_0_1", "g", "{\"a\":2}")]
        );
    }

    #[test]
    fn fragments_without_index_follow_ids_and_names() {
        let decision = assemble(&[
            delta_calls(json!([{"id":"a","function":{"name":"f","arguments":"{\"p\":"}}])),
            delta_calls(json!([{"function":{"arguments":"1}"}}])),
            delta_calls(json!([{"id":"a","function":{"arguments":""}}])),
            delta_calls(json!([{"function":{"name":"g","arguments":{"q":2}}}])),
            delta_calls(json!([{"id":"c","function":{"name":"h"}}])),
        ]);
        assert_eq!(
            calls(&decision),
            [
                ("a", "f", "{\"p\":1}"),
                ("call_0_1", "g", "{\"q\":2}"),
                ("c", "h", "{}")
            ]
        );
    }

    #[test]
    fn usage_only_last_chunk_and_done_complete_the_stream() {
        let request = ModelRequest {
            messages: vec![Message::Assistant {
                text: Some("x".into()),
                tool_calls: vec![],
            }],
            tools: vec![],
            max_output_tokens: 0,
            cache_key: None,
        };
        let mut assembler = StreamAssembler::new(CallIds::for_request(&request), None);
        let chunks = [
            json!({"choices":[{"index":0,"delta":{"role":"assistant","content":"Hel"}}]}),
            json!({"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}),
            json!({"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":4}}}),
        ];
        for chunk in &chunks {
            assert_eq!(assembler.on_data("", Some(chunk)), Ok(Flow::Continue));
        }
        assert_eq!(assembler.on_data("[DONE]", None), Ok(Flow::Stop));
        assert!(assembler.is_complete());
        let decision = assembler.finish();
        assert_eq!(decision.text.as_deref(), Some("Hello"));
        assert_eq!(decision.stop_reason.as_deref(), Some("stop"));
        assert_eq!(
            decision.usage,
            Some(TokenUsage {
                input_tokens: 10,
                cached_input_tokens: 4,
                cache_write_tokens: 0,
                output_tokens: 2,
                cache_write_1h_tokens: 0,
                reasoning_tokens: 0,
            })
        );
    }

    #[test]
    fn generated_ids_differ_between_turns() {
        let body = json!({"choices":[{"index":0,"message":{"role":"assistant","content":null,
            "tool_calls":[{"type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":"tool_calls"}]});
        let turn = |assistants: usize| {
            let request = ModelRequest {
                messages: vec![
                    Message::Assistant {
                        text: Some("x".into()),
                        tool_calls: vec![]
                    };
                    assistants
                ],
                tools: vec![],
                max_output_tokens: 0,
                cache_key: None,
            };
            parse_response(&body, CallIds::for_request(&request), None)
                .unwrap()
                .tool_calls
        };
        assert_eq!(turn(0)[0].id, "call_0_0");
        assert_eq!(turn(2)[0].id, "call_2_0");
        assert_eq!(turn(2)[0].arguments, "{}");
        assert_eq!(
            parse_response(&body, CallIds { turn: 0 }, None)
                .unwrap()
                .usage,
            None
        );
    }
}
