//! Runtime overhead per agent step: journal append (file, hash-chained), argument parsing and
//! schema validation, policy, events (serialised to JSON as the server will), with an instant
//! model and an instant tool so that only the loop's own work is measured.
//!
//! `cargo run --release -p warden-runtime --example step_bench` (`--smoke`: 3 runs)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use warden_protocol::Event;
use warden_runtime::{
    Agent, AgentConfig, AllowAll, BoxFuture, CancelFlag, Cost, EventSink, FileJournal, Limits,
    Message, Model, ModelError, ModelRequest, ModelResponse, RunInput, SystemClock, TokenUsage,
    Tool, ToolCall, ToolOutput, ToolSpec,
};

struct InstantModel;
impl Model for InstantModel {
    fn name(&self) -> String {
        "bench".into()
    }
    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        _events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let turn = request.messages.len();
        Box::pin(async move {
            Ok(ModelResponse {
                model: "bench".into(),
                text: None,
                tool_calls: vec![ToolCall {
                    id: format!("call_{turn}"),
                    name: "read_file".into(),
                    arguments: r#"{"path": "src/lib.rs", "start_line": 10, "end_line": 40}"#.into(),
                }],
                usage: Some(TokenUsage {
                    input_tokens: 1200,
                    cached_input_tokens: 0,
                    cache_write_tokens: 0,
                    output_tokens: 40,
                    cache_write_1h_tokens: 0,
                    reasoning_tokens: 0,
                }),
                cost: Cost::Known { micro_usd: 10 },
                stop_reason: Some("tool_calls".into()),
                raw: json!({"id": "x", "choices": [{"message": {"tool_calls": []}}]}),
            })
        })
    }
    fn has_price(&self) -> bool {
        true
    }
}

struct ReadFile;
impl Tool for ReadFile {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "read_file".into(),
            description: "read".into(),
            parameters: json!({"type": "object", "properties": {
                "path": {"type": "string", "minLength": 1},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1}},
                "required": ["path"], "additionalProperties": false}),
        }
    }
    fn describe(&self, arguments: &Value) -> String {
        format!("read_file {}", arguments["path"])
    }
    fn call<'a>(&'a self, _arguments: Value) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async { ToolOutput::Ok("src/lib.rs (lines 10-40 of 200)\n".repeat(4)) })
    }
}

#[derive(Default)]
struct JsonEvents(AtomicU64);
impl EventSink for JsonEvents {
    fn emit(&self, event: Event) {
        let bytes = serde_json::to_vec(&event).unwrap();
        self.0.fetch_add(bytes.len() as u64, Ordering::Relaxed);
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let tools: Vec<Arc<dyn Tool>> = vec![Arc::new(ReadFile)];
    let turns = 30u32;
    let runs = if std::env::args().any(|a| a == "--smoke") {
        3
    } else {
        300
    };
    let mut per_step_us = Vec::new();
    for run in 0..runs {
        let mut journal = FileJournal::create(&dir.path().join(format!("{run}.jsonl"))).unwrap();
        let events = JsonEvents::default();
        let started = Instant::now();
        let report = runtime.block_on(
            Agent {
                model: &InstantModel,
                tools: &tools,
                policy: &AllowAll,
                journal: &mut journal,
                events: &events,
                clock: &SystemClock,
                cancel: CancelFlag::default(),
                config: AgentConfig {
                    limits: Limits {
                        max_turns: turns,
                        ..Limits::default()
                    },
                    ..AgentConfig::default()
                },
                ledger: None,
                inbox: None,
                explorers: None,
            }
            .run(RunInput::Start {
                messages: vec![
                    Message::System {
                        text: "system prompt ".repeat(100),
                    },
                    Message::User {
                        text: "question".into(),
                    },
                ],
                context: serde_json::Value::Null,
            }),
        );
        let elapsed = started.elapsed();
        assert_eq!(report.usage.model_calls, u64::from(turns));
        per_step_us.push(elapsed.as_secs_f64() * 1e6 / f64::from(turns));
    }
    per_step_us.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let median = per_step_us[per_step_us.len() / 2];
    let p90 = per_step_us[per_step_us.len() * 9 / 10];
    println!(
        "runtime overhead per step ({turns}-turn runs, {runs} runs, file journal): median {median:.1} µs, p90 {p90:.1} µs (goal ≤ 1000 µs median)"
    );
}
