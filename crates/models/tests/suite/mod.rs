//! Shared helpers: configs pointing at a scripted server, an event recorder, a typical request.

mod anthropic;
mod caps;
mod fallback;
mod openai;
mod retries;
mod usage;

use serde_json::json;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use warden_models::{ModelConfig, PriceTable, RetryConfig};
use warden_protocol::Event;
use warden_runtime::{
    EventSink, Message, Model, ModelError, ModelRequest, ModelResponse, ToolCall, ToolSpec,
};
use warden_test_support::model_server::ScriptedModelServer;

pub const OPENAI_KEY: &str = "sk-test-openai-key-0123456789";
pub const ANTHROPIC_KEY: &str = "sk-ant-test-key-0123456789";

/// Tiny delays so retry tests run fast.
pub fn fast_retries(max_attempts: u32) -> RetryConfig {
    RetryConfig {
        max_attempts,
        base_delay: Duration::from_millis(1),
        max_delay: Duration::from_millis(5),
    }
}

pub fn openai_config(server: &ScriptedModelServer, stream: bool) -> ModelConfig {
    let mut config = ModelConfig::openai("gpt-5-mini");
    config.base_url = server.openai_base_url();
    config.api_key = Some(OPENAI_KEY.to_string());
    config.stream = stream;
    config.request_timeout = Duration::from_secs(10);
    config.retry = fast_retries(3);
    config
}

pub fn anthropic_config(server: &ScriptedModelServer, stream: bool) -> ModelConfig {
    let mut config = ModelConfig::anthropic("claude-sonnet-4-5");
    config.base_url = format!("{}/", server.anthropic_base_url());
    config.api_key = Some(ANTHROPIC_KEY.to_string());
    config.stream = stream;
    config.request_timeout = Duration::from_secs(10);
    config.retry = fast_retries(3);
    config
}

pub fn model(config: ModelConfig) -> Arc<dyn Model> {
    warden_models::build(config, None, PriceTable::builtin()).unwrap()
}

/// Keeps every event.
#[derive(Default)]
pub struct Recorder(Mutex<Vec<Event>>);

impl EventSink for Recorder {
    fn emit(&self, event: Event) {
        self.0.lock().unwrap().push(event);
    }
}

impl Recorder {
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }

    pub fn retries(&self) -> Vec<(u32, u64, String)> {
        self.events()
            .into_iter()
            .filter_map(|event| match event {
                Event::ModelRetrying {
                    attempt,
                    delay_ms,
                    reason,
                    ..
                } => Some((attempt, delay_ms, reason)),
                _ => None,
            })
            .collect()
    }
}

/// A conversation with a finished tool round: system, user, assistant call, tool result.
pub fn request() -> ModelRequest {
    ModelRequest {
        messages: vec![
            Message::System {
                text: "You are a careful coding agent.".into(),
            },
            Message::User {
                text: "Where is main defined?".into(),
            },
            Message::Assistant {
                text: None,
                tool_calls: vec![
                    ToolCall {
                        id: "call_a".into(),
                        name: "search".into(),
                        arguments: r#"{"pattern":"fn main"}"#.into(),
                    },
                    ToolCall {
                        id: "call_b".into(),
                        name: "read_file".into(),
                        arguments: r#"{"path":"src/main.rs""#.into(),
                    },
                ],
            },
            Message::Tool {
                call_id: "call_a".into(),
                content: "src/main.rs:1: fn main() {".into(),
                is_error: false,
            },
            Message::Tool {
                call_id: "call_b".into(),
                content: "invalid arguments: EOF while parsing".into(),
                is_error: true,
            },
        ],
        tools: vec![
            ToolSpec {
                name: "search".into(),
                description: "Search the code.".into(),
                parameters: json!({"type":"object","properties":{"pattern":{"type":"string"}},"required":["pattern"]}),
            },
            ToolSpec {
                name: "read_file".into(),
                description: "Read a file.".into(),
                parameters: json!({"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}),
            },
        ],
        max_output_tokens: 4096,
        cache_key: None,
    }
}

/// Runs one completion of `request()` and returns it with the events.
pub async fn complete(model: &Arc<dyn Model>) -> (Result<ModelResponse, ModelError>, Recorder) {
    let events = Recorder::default();
    let result = model.complete(&request(), &events).await;
    (result, events)
}

/// `(id, name, arguments)` of every tool call.
pub fn calls(response: &ModelResponse) -> Vec<(String, String, String)> {
    response
        .tool_calls
        .iter()
        .map(|call| (call.id.clone(), call.name.clone(), call.arguments.clone()))
        .collect()
}
