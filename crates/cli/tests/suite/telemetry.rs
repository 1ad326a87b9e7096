//! OpenTelemetry trace export (`[telemetry]`, OTLP/HTTP JSON) against a local receiver: an
//! in-process `warden ask` with a scripted model exports its spans — the task's run, its model
//! calls and tool calls as children in one trace, with the task id, the model and the token
//! counts — to `/v1/traces` with the configured headers.

use serde_json::{json, Value};
use warden_test_support::model_server::{openai, Reply, ScriptedModelServer};

use super::mcp::{sample_repo, submit};
use super::support::Warden;

/// Every span the receiver got: `(span, its resource)`.
fn spans(receiver: &ScriptedModelServer) -> Vec<(Value, Value)> {
    let mut spans = Vec::new();
    for request in receiver.requests() {
        assert_eq!(request.path, "/v1/traces");
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(
            request.header("x-team"),
            Some("core"),
            "the configured header"
        );
        for resource_spans in request.body["resourceSpans"].as_array().unwrap() {
            for scope in resource_spans["scopeSpans"].as_array().unwrap() {
                assert_eq!(scope["scope"]["name"], "warden");
                for span in scope["spans"].as_array().unwrap() {
                    spans.push((span.clone(), resource_spans["resource"].clone()));
                }
            }
        }
    }
    spans
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)
        .map(|a| &a["value"])
}

#[test]
fn an_in_process_task_exports_its_run_model_and_tool_spans_as_one_trace() {
    let repo = sample_repo();
    let model = ScriptedModelServer::start_blocking(vec![
        openai::tool_call(
            "read_file",
            &json!({"path": "src/lib.rs", "start_line": 31, "end_line": 33}).to_string(),
        ),
        openai::tool_call("submit_answer", &submit(33)),
    ]);
    let receiver = ScriptedModelServer::start_blocking(vec![Reply::json(200, json!({})); 64]);
    let warden = Warden::openai(&model.url())
        .with("WARDEN_OTLP_ENDPOINT", &receiver.url())
        .with("OTEL_EXPORTER_OTLP_HEADERS", "x-team=core");
    let path = repo.path().to_str().unwrap();
    let asked = warden.run(&["ask", "--repo", path, "--json", "how does retry work?"]);
    assert_eq!(asked.code, 0, "{}", asked.stderr);
    let task_id = asked.json()["task_id"].as_str().unwrap().to_string();

    let spans = spans(&receiver);
    let named = |name: &str| -> Vec<&Value> {
        spans
            .iter()
            .map(|(span, _)| span)
            .filter(|s| s["name"] == name)
            .collect()
    };
    let runs = named("task.run");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    let run = runs[0];
    assert_eq!(
        attribute(run, "task.id"),
        Some(&json!({"stringValue": task_id}))
    );
    assert_eq!(
        attribute(run, "task.kind"),
        Some(&json!({"stringValue": "question"}))
    );
    let resource = &spans[0].1;
    assert!(
        resource["attributes"]
            .as_array()
            .unwrap()
            .contains(&json!({"key": "service.name", "value": {"stringValue": "warden"}})),
        "{resource}"
    );
    let trace = run["traceId"].as_str().unwrap();
    assert_eq!(trace.len(), 32);
    assert!(run["spanId"].as_str().unwrap().len() == 16);
    let start: u64 = run["startTimeUnixNano"].as_str().unwrap().parse().unwrap();
    let end: u64 = run["endTimeUnixNano"].as_str().unwrap().parse().unwrap();
    assert!(start > 1_700_000_000_000_000_000 && end >= start, "{run}");

    // Two model calls and the tool calls, inside the run's trace.
    let calls = named("model.call");
    assert_eq!(calls.len(), 2, "{spans:#?}");
    let tools = named("tool.call");
    let tool_names: Vec<&Value> = tools
        .iter()
        .filter_map(|s| attribute(s, "tool.name"))
        .collect();
    assert!(
        tool_names.contains(&&json!({"stringValue": "read_file"})),
        "{tool_names:?}"
    );
    for span in calls.iter().chain(&tools) {
        assert_eq!(span["traceId"], trace, "{span}");
        assert_eq!(span["parentSpanId"], run["spanId"], "{span}");
    }
    let call = calls[0];
    assert!(attribute(call, "gen_ai.request.model").is_some(), "{call}");
    assert!(
        attribute(call, "gen_ai.usage.input_tokens").is_some_and(|v| v["intValue"].is_string()),
        "{call}"
    );
}
