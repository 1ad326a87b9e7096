//! Anthropic Messages: request shape, complete and streamed responses.

use super::*;
use serde_json::json;
use warden_test_support::model_server::{anthropic, Reply, SseEvent};

#[tokio::test]
async fn request_shape_has_headers_system_and_merged_tool_results() {
    let server = ScriptedModelServer::start(vec![anthropic::text("done")]).await;
    let (result, _) = complete(&model(anthropic_config(&server, false))).await;
    let response = result.unwrap();
    assert_eq!(response.text.as_deref(), Some("done"));
    assert_eq!(response.model, "anthropic:claude-sonnet-4-5");
    assert_eq!(response.stop_reason.as_deref(), Some("end_turn"));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/messages");
    assert_eq!(request.header("x-api-key"), Some(ANTHROPIC_KEY));
    assert_eq!(request.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(request.header("authorization"), None);
    let body = &request.body;
    assert_eq!(body["model"], "claude-sonnet-4-5");
    assert_eq!(body["max_tokens"], 4096);
    assert!(body.get("stream").is_none());
    assert_eq!(body["system"][0]["text"], "You are a careful coding agent.");
    assert_eq!(body["tool_choice"], json!({"type": "auto"}));
    assert_eq!(
        body["tools"][1],
        json!({"name": "read_file", "description": "Read a file.",
            "input_schema": {"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}})
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{body:#}");
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(
        messages[0]["content"][0],
        json!({"type": "text", "text": "Where is main defined?",
            // the previous user turn's breakpoint: the next turn reads up to here from the cache
            "cache_control": {"type": "ephemeral"}})
    );
    assert_eq!(messages[1]["role"], "assistant");
    assert_eq!(
        messages[1]["content"],
        json!([
            {"type": "tool_use", "id": "call_a", "name": "search", "input": {"pattern": "fn main"}},
            // the stored arguments were not valid JSON: replayed as an empty object
            {"type": "tool_use", "id": "call_b", "name": "read_file", "input": {}},
        ])
    );
    // both tool results in one user message
    assert_eq!(messages[2]["role"], "user");
    assert_eq!(
        messages[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "call_a", "content": "src/main.rs:1: fn main() {", "is_error": false},
            {"type": "tool_result", "tool_use_id": "call_b", "content": "invalid arguments: EOF while parsing", "is_error": true,
             "cache_control": {"type": "ephemeral"}},
        ])
    );
}

#[tokio::test]
async fn non_streamed_tool_use_is_returned_with_input_as_arguments() {
    let server = ScriptedModelServer::start(vec![anthropic::tool_uses(&[
        ("search", json!({"pattern": "x"})),
        ("read_file", json!({"path": "a"})),
    ])])
    .await;
    let response = complete(&model(anthropic_config(&server, false)))
        .await
        .0
        .unwrap();
    let calls = calls(&response);
    assert_eq!(calls.len(), 2);
    assert!(calls[0].0.starts_with("toolu_"));
    assert_eq!(
        (calls[0].1.as_str(), calls[0].2.as_str()),
        ("search", r#"{"pattern":"x"}"#)
    );
    assert_eq!(
        (calls[1].1.as_str(), calls[1].2.as_str()),
        ("read_file", r#"{"path":"a"}"#)
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    assert_eq!(response.raw["type"], "message");
}

#[tokio::test]
async fn fragmented_tool_use_stream_is_assembled_verbatim() {
    let input = r#"{"path": "src/main.rs", "start_line": 1}"#;
    let server =
        ScriptedModelServer::start(vec![anthropic::stream_tool_use("read_file", input, 6)]).await;
    let response = complete(&model(anthropic_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(server.requests()[0].body["stream"], true);
    let calls = calls(&response);
    assert_eq!(calls.len(), 1);
    assert_eq!(
        (calls[0].1.as_str(), calls[0].2.as_str()),
        ("read_file", input)
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
    let usage = response.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (100, 20));
    // raw: every event's data, in order
    let raw = response.raw.as_array().unwrap();
    assert_eq!(raw[0]["type"], "message_start");
    assert_eq!(raw.last().unwrap()["type"], "message_stop");
}

#[tokio::test]
async fn streamed_text_and_invalid_partial_json_pass_through() {
    let server = ScriptedModelServer::start(vec![
        anthropic::stream_text("The answer is in main.rs.", 5),
        anthropic::stream_tool_use("read_file", r#"{"path": "a"#, 3),
    ])
    .await;
    let model = model(anthropic_config(&server, true));
    let text = complete(&model).await.0.unwrap();
    assert_eq!(text.text.as_deref(), Some("The answer is in main.rs."));
    assert!(text.tool_calls.is_empty());
    let broken = complete(&model).await.0.unwrap();
    assert_eq!(broken.tool_calls[0].arguments, r#"{"path": "a"#);
}

#[tokio::test]
async fn overloaded_error_event_in_a_stream_is_retried() {
    let server = ScriptedModelServer::start(vec![
        Reply::sse(vec![
            SseEvent::named(
                "message_start",
                &json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":5,"output_tokens":1}}}),
            ),
            anthropic::error_event("overloaded_error", "Overloaded"),
        ]),
        anthropic::stream_text("ok", 1),
    ])
    .await;
    let (result, events) = complete(&model(anthropic_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("ok"));
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].2.contains("overloaded_error"), "{retries:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn invalid_request_error_event_in_a_stream_is_permanent() {
    let server = ScriptedModelServer::start(vec![Reply::sse(vec![anthropic::error_event(
        "invalid_request_error",
        "prompt is too long",
    )])])
    .await;
    let (result, events) = complete(&model(anthropic_config(&server, true))).await;
    assert!(
        matches!(result, Err(ModelError::Permanent { status: None, ref message }) if message.contains("prompt is too long")),
        "{result:?}"
    );
    assert!(events.retries().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn cut_stream_is_retried() {
    let server = ScriptedModelServer::start(vec![
        anthropic::stream_tool_use("search", r#"{"pattern":"main"}"#, 4).cut_after(4),
        anthropic::stream_tool_use("search", r#"{"pattern":"main"}"#, 4),
    ])
    .await;
    let (result, events) = complete(&model(anthropic_config(&server, true))).await;
    assert_eq!(
        result.unwrap().tool_calls[0].arguments,
        r#"{"pattern":"main"}"#
    );
    assert_eq!(events.retries().len(), 1);
    assert_eq!(server.requests().len(), 2);
}
