//! OpenAI Chat Completions: request shape, complete and streamed responses, stream quirks.

use super::*;
use serde_json::{json, Value};
use warden_models::{MaxTokensField, SystemRole};
use warden_test_support::model_server::{openai, Reply, SseEvent};

fn tool_chunk(fragments: Value) -> Value {
    openai::chunk(json!({ "tool_calls": fragments }), None)
}

#[tokio::test]
async fn request_shape_carries_roles_tool_results_key_and_stream_options() {
    let server = ScriptedModelServer::start(vec![openai::stream_text("fine", 2)]).await;
    let (result, _) = complete(&model(openai_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("fine"));

    let requests = server.requests();
    assert_eq!(requests.len(), 1);
    let request = &requests[0];
    assert_eq!(request.path, "/v1/chat/completions");
    assert_eq!(
        request.header("authorization"),
        Some(format!("Bearer {OPENAI_KEY}").as_str())
    );
    assert_eq!(request.header("content-type"), Some("application/json"));
    let body = &request.body;
    assert_eq!(body["model"], "gpt-5-mini");
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"], json!({"include_usage": true}));
    assert_eq!(body["max_completion_tokens"], 4096);
    assert!(body.get("max_tokens").is_none());
    assert_eq!(body["tool_choice"], "auto");
    assert_eq!(
        body["tools"][0],
        json!({"type": "function", "function": {"name": "search", "description": "Search the code.",
            "parameters": {"type":"object","properties":{"pattern":{"type":"string"}},"required":["pattern"]}}})
    );
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    let assistant = &body["messages"][2];
    assert_eq!(assistant["content"], Value::Null);
    assert_eq!(
        assistant["tool_calls"][1],
        json!({"id": "call_b", "type": "function", "function": {"name": "read_file", "arguments": "{\"path\":\"src/main.rs\""}})
    );
    assert_eq!(
        body["messages"][3],
        json!({"role": "tool", "tool_call_id": "call_a", "content": "src/main.rs:1: fn main() {"})
    );
    assert_eq!(body["messages"][4]["tool_call_id"], "call_b");
}

#[tokio::test]
async fn compatible_server_options_change_the_request() {
    let server = ScriptedModelServer::start(vec![openai::text("ok")]).await;
    let mut config = openai_config(&server, false);
    config.api_key = None; // Ollama needs none
    config.max_tokens_field = MaxTokensField::MaxTokens;
    config.system_role = SystemRole::Developer;
    let (result, _) = complete(&model(config)).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("ok"));
    let request = &server.requests()[0];
    assert_eq!(request.header("authorization"), None);
    assert_eq!(request.body["max_tokens"], 4096);
    assert!(request.body.get("max_completion_tokens").is_none());
    assert!(request.body.get("stream").is_none());
    assert!(request.body.get("stream_options").is_none());
    assert_eq!(request.body["messages"][0]["role"], "developer");
}

#[tokio::test]
async fn stream_without_usage_option_sends_no_stream_options() {
    let server = ScriptedModelServer::start(vec![openai::stream_text("ok", 1)]).await;
    let mut config = openai_config(&server, true);
    config.stream_usage = false;
    complete(&model(config)).await.0.unwrap();
    let body = &server.requests()[0].body;
    assert_eq!(body["stream"], true);
    assert!(body.get("stream_options").is_none());
}

#[tokio::test]
async fn non_streamed_tool_calls_are_returned_with_usage_and_raw_body() {
    let server = ScriptedModelServer::start(vec![openai::tool_calls(&[
        ("search", r#"{"pattern":"x"}"#),
        ("read_file", r#"{"path":"a"}"#),
    ])])
    .await;
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    let response = result.unwrap();
    assert_eq!(response.model, "openai:gpt-5-mini");
    let calls = calls(&response);
    assert_eq!(calls.len(), 2);
    assert!(calls[0].0.starts_with("call_"));
    assert_eq!(
        (calls[0].1.as_str(), calls[0].2.as_str()),
        ("search", r#"{"pattern":"x"}"#)
    );
    assert_eq!(
        (calls[1].1.as_str(), calls[1].2.as_str()),
        ("read_file", r#"{"path":"a"}"#)
    );
    assert_eq!(response.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.text, None);
    assert_eq!(response.usage.unwrap().input_tokens, 100);
    assert_eq!(response.raw["object"], "chat.completion");
    assert!(events.events().is_empty());
}

#[tokio::test]
async fn fragmented_tool_call_stream_is_assembled() {
    let arguments = r#"{"path":"src/main.rs","start_line":1,"end_line":40}"#;
    let server =
        ScriptedModelServer::start(vec![openai::stream_tool_call("read_file", arguments, 9)]).await;
    let (result, _) = complete(&model(openai_config(&server, true))).await;
    let response = result.unwrap();
    let calls = calls(&response);
    assert_eq!(calls.len(), 1);
    assert!(calls[0].0.starts_with("call_scripted"));
    assert_eq!(calls[0].1, "read_file");
    assert_eq!(calls[0].2, arguments);
    assert_eq!(response.stop_reason.as_deref(), Some("tool_calls"));
    assert_eq!(response.usage.unwrap().output_tokens, 20);
    // raw keeps every data payload, [DONE] included
    let raw = response.raw.as_array().unwrap();
    assert_eq!(raw.len(), 1 + 9 + 1 + 1 + 1);
    assert_eq!(raw.last().unwrap(), &json!("[DONE]"));
    assert_eq!(raw[raw.len() - 2]["choices"], json!([]));
}

#[tokio::test]
async fn stream_fragments_without_index_old_ollama() {
    let server = ScriptedModelServer::start(vec![openai::stream(vec![
        tool_chunk(json!([{"id": "call_x", "function": {"name": "search", "arguments": "{\"pattern\":"}}])),
        tool_chunk(json!([{"function": {"arguments": "\"main\"}"}}])),
        tool_chunk(json!([{"id": "call_y", "function": {"name": "read_file", "arguments": {"path": "a.rs"}}}])),
        tool_chunk(json!([{"function": {"name": "list_dir", "arguments": "{\"path\":\".\"}"}}])),
        openai::chunk(json!({}), Some("tool_calls")),
    ])])
    .await;
    let response = complete(&model(openai_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(
        calls(&response),
        [
            (
                "call_x".into(),
                "search".into(),
                r#"{"pattern":"main"}"#.into()
            ),
            (
                "call_y".into(),
                "read_file".into(),
                r#"{"path":"a.rs"}"#.into()
            ),
            // no id: a stable one, unique in the conversation (the request has 1 assistant turn)
            (
                "call_1_2".into(),
                "list_dir".into(),
                r#"{"path":"."}"#.into()
            ),
        ]
    );
}

#[tokio::test]
async fn stream_fragments_without_id_get_stable_ids() {
    let server = ScriptedModelServer::start(vec![openai::stream(vec![
        tool_chunk(json!([{"index": 0, "type": "function", "function": {"name": "search", "arguments": ""}}])),
        tool_chunk(json!([{"index": 0, "function": {"arguments": "{\"pattern\":\"a\"}"}}])),
        tool_chunk(json!([{"index": 1, "type": "function", "function": {"name": "search", "arguments": "{\"pattern\":\"b\"}"}}])),
        openai::chunk(json!({}), Some("tool_calls")),
    ])])
    .await;
    let response = complete(&model(openai_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(
        calls(&response),
        [
            (
                "call_1_0".into(),
                "search".into(),
                r#"{"pattern":"a"}"#.into()
            ),
            (
                "call_1_1".into(),
                "search".into(),
                r#"{"pattern":"b"}"#.into()
            ),
        ]
    );
    // no usage chunk was sent
    assert_eq!(response.usage, None);
}

#[tokio::test]
async fn stream_repeating_index_zero_for_two_calls() {
    let server = ScriptedModelServer::start(vec![openai::stream(vec![
        tool_chunk(json!([{"index": 0, "id": "call_1", "type": "function", "function": {"name": "search", "arguments": ""}}])),
        tool_chunk(json!([{"index": 0, "function": {"arguments": "{\"pattern\":\"a\"}"}}])),
        tool_chunk(json!([{"index": 0, "id": "call_2", "type": "function", "function": {"name": "read_file", "arguments": ""}}])),
        tool_chunk(json!([{"index": 0, "function": {"arguments": "{\"path\":"}}])),
        tool_chunk(json!([{"index": 0, "function": {"arguments": "\"b\"}"}}])),
        openai::chunk(json!({}), Some("tool_calls")),
        openai::usage_chunk(openai::usage(50, 0, 10)),
    ])])
    .await;
    let response = complete(&model(openai_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(
        calls(&response),
        [
            (
                "call_1".into(),
                "search".into(),
                r#"{"pattern":"a"}"#.into()
            ),
            (
                "call_2".into(),
                "read_file".into(),
                r#"{"path":"b"}"#.into()
            ),
        ]
    );
}

#[tokio::test]
async fn sse_comments_and_odd_framing_are_tolerated() {
    let text_chunk = |text: &str| openai::chunk(json!({"content": text}), None);
    let server = ScriptedModelServer::start(vec![Reply::sse(vec![
        SseEvent::comment("PROCESSING"),
        SseEvent::json(&openai::chunk(
            json!({"role": "assistant", "content": ""}),
            None,
        )),
        SseEvent::comment("PROCESSING"),
        SseEvent::json(&text_chunk("Hello, ")),
        // CRLF line endings and no space after the colon
        SseEvent::Raw(format!("data:{}\r\n\r\n", text_chunk("wörld"))),
        SseEvent::json(&openai::chunk(json!({}), Some("stop"))),
        SseEvent::json(&openai::usage_chunk(openai::usage(10, 0, 3))),
        // the last event without its blank line
        SseEvent::Raw("data: [DONE]\n".into()),
    ])])
    .await;
    let response = complete(&model(openai_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(response.text.as_deref(), Some("Hello, wörld"));
    assert_eq!(response.stop_reason.as_deref(), Some("stop"));
    assert_eq!(response.usage.unwrap().input_tokens, 10);
}

#[tokio::test]
async fn invalid_json_arguments_are_passed_through_verbatim() {
    let broken = r#"{"path": "src/lib.rs", "start_line": }"#;
    let server = ScriptedModelServer::start(vec![
        openai::tool_call("read_file", broken),
        openai::stream_tool_call("read_file", broken, 4),
    ])
    .await;
    for stream in [false, true] {
        let model = model(openai_config(&server, stream));
        let response = complete(&model).await.0.unwrap();
        assert_eq!(response.tool_calls[0].arguments, broken, "stream: {stream}");
    }
}

#[tokio::test]
async fn a_json_answer_to_a_stream_request_is_accepted() {
    let server = ScriptedModelServer::start(vec![openai::text("not streamed")]).await;
    let response = complete(&model(openai_config(&server, true)))
        .await
        .0
        .unwrap();
    assert_eq!(response.text.as_deref(), Some("not streamed"));
    assert_eq!(response.raw["object"], "chat.completion");
}

#[tokio::test]
async fn a_non_json_body_is_a_protocol_error() {
    let server = ScriptedModelServer::start(vec![
        Reply::raw(200, "<html>login</html>").with_header("content-type", "text/html")
    ])
    .await;
    let error = complete(&model(openai_config(&server, false)))
        .await
        .0
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::Protocol { message } if message.contains("not json")),
        "{error:?}"
    );
    assert_eq!(server.requests().len(), 1);
}
