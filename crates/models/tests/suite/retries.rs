//! Retries: which failures are retried, how long the client waits, and which are final.

use super::*;
use serde_json::json;
use std::time::Instant;
use warden_test_support::model_server::{anthropic, openai, Reply, SseEvent};

#[tokio::test]
async fn rate_limit_with_retry_after_ms_then_success() {
    let server = ScriptedModelServer::start(vec![
        openai::error(
            429,
            "requests",
            Some("rate_limit_exceeded"),
            "Rate limit reached",
        )
        .with_header("retry-after-ms", "20")
        .with_header("retry-after", "30"),
        openai::text("ok"),
    ])
    .await;
    let started = Instant::now();
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("ok"));
    assert!(started.elapsed() >= Duration::from_millis(20));
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    let (attempt, delay_ms, reason) = &retries[0];
    assert_eq!((*attempt, *delay_ms), (2, 20));
    assert!(
        reason.contains("429") && reason.contains("Rate limit reached"),
        "{reason}"
    );
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn rate_limit_with_retry_after_zero_seconds_then_success() {
    let server = ScriptedModelServer::start(vec![
        anthropic::error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
        )
        .with_header("retry-after", "0"),
        anthropic::text("ok"),
    ])
    .await;
    let (result, events) = complete(&model(anthropic_config(&server, false))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("ok"));
    assert_eq!(events.retries()[0].1, 0);
}

#[tokio::test]
async fn overloaded_529_then_success() {
    let server = ScriptedModelServer::start(vec![
        anthropic::error(529, "overloaded_error", "Overloaded"),
        anthropic::stream_text("ok", 2),
    ])
    .await;
    let (result, events) = complete(&model(anthropic_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("ok"));
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert!(
        retries[0].1 <= 5,
        "backoff is capped at max_delay: {retries:?}"
    );
    assert!(retries[0].2.contains("529"));
}

#[tokio::test]
async fn insufficient_quota_is_not_retried() {
    let server = ScriptedModelServer::start(vec![
        openai::error(
            429,
            "insufficient_quota",
            Some("insufficient_quota"),
            "You exceeded your current quota",
        ),
        openai::text("never sent"),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    assert!(
        matches!(result, Err(ModelError::Permanent { status: Some(429), ref message }) if message.contains("quota")),
        "{result:?}"
    );
    assert!(events.events().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn unauthorized_is_not_retried_and_the_key_is_never_shown() {
    let server = ScriptedModelServer::start(vec![openai::error(
        401,
        "invalid_request_error",
        Some("invalid_api_key"),
        &format!("Incorrect API key provided: {OPENAI_KEY}."),
    )])
    .await;
    let (result, events) = complete(&model(openai_config(&server, true))).await;
    let error = result.unwrap_err();
    assert!(
        matches!(
            error,
            ModelError::Permanent {
                status: Some(401),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(!error.to_string().contains(OPENAI_KEY), "{error}");
    assert!(events.events().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn server_errors_are_retried_until_attempts_run_out() {
    let server = ScriptedModelServer::start(vec![
        openai::error(500, "server_error", None, "boom"),
        openai::error(502, "server_error", None, "bad gateway"),
        openai::error(503, "server_error", None, "unavailable"),
        openai::text("too late"),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    assert!(
        matches!(result, Err(ModelError::Exhausted { attempts: 3, ref message }) if message.contains("503")),
        "{result:?}"
    );
    let attempts: Vec<u32> = events.retries().iter().map(|r| r.0).collect();
    assert_eq!(attempts, [2, 3]);
    assert_eq!(server.requests().len(), 3);
    assert_eq!(server.remaining(), 1);
}

#[tokio::test]
async fn x_should_retry_overrides_the_status() {
    let server = ScriptedModelServer::start(vec![
        openai::error(
            400,
            "invalid_request_error",
            None,
            "transient, says the server",
        )
        .with_header("x-should-retry", "true"),
        openai::error(503, "server_error", None, "do not retry")
            .with_header("x-should-retry", "false"),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    assert!(
        matches!(
            result,
            Err(ModelError::Permanent {
                status: Some(503),
                ..
            })
        ),
        "{result:?}"
    );
    assert_eq!(events.retries().len(), 1);
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn error_event_in_a_200_stream_retryable_then_success() {
    let server = ScriptedModelServer::start(vec![
        Reply::sse(vec![
            SseEvent::json(&openai::chunk(json!({"role": "assistant", "content": "Hel"}), None)),
            SseEvent::json(&json!({"error": {"message": "The server is overloaded", "type": "server_error", "param": null, "code": null}})),
        ]),
        openai::stream_text("Hello", 2),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello"));
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].2.contains("overloaded"), "{retries:?}");
}

#[tokio::test]
async fn error_event_in_a_200_stream_permanent() {
    let server = ScriptedModelServer::start(vec![Reply::sse(vec![SseEvent::json(&json!({
        "error": {"object": "error", "message": "This model's maximum context length is 8192 tokens", "type": "BadRequestError", "param": null, "code": 400}
    }))])])
    .await;
    let (result, events) = complete(&model(openai_config(&server, true))).await;
    assert!(
        matches!(result, Err(ModelError::Permanent { status: Some(400), ref message }) if message.contains("maximum context length")),
        "{result:?}"
    );
    assert!(events.retries().is_empty());
    assert_eq!(server.requests().len(), 1);
}

#[tokio::test]
async fn stream_cut_mid_way_is_retried() {
    let arguments = r#"{"pattern":"fn main"}"#;
    let server = ScriptedModelServer::start(vec![
        // role chunk and two of four argument fragments, then the connection drops
        openai::stream_tool_call("search", arguments, 4).cut_after(3),
        openai::stream_tool_call("search", arguments, 4),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, true))).await;
    let response = result.unwrap();
    assert_eq!(response.tool_calls.len(), 1);
    assert_eq!(response.tool_calls[0].arguments, arguments);
    let retries = events.retries();
    assert_eq!(retries.len(), 1);
    assert!(retries[0].2.contains("stream interrupted"), "{retries:?}");
    assert_eq!(server.requests().len(), 2);
}

#[tokio::test]
async fn stream_ending_cleanly_without_finish_is_retried() {
    let server = ScriptedModelServer::start(vec![
        Reply::sse(vec![SseEvent::json(&openai::chunk(
            json!({"role": "assistant", "content": "Hel"}),
            None,
        ))]),
        openai::stream_text("Hello", 1),
    ])
    .await;
    let (result, events) = complete(&model(openai_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("Hello"));
    assert!(events.retries()[0]
        .2
        .contains("before the response was complete"));
}

#[tokio::test]
async fn a_slow_response_times_out_and_is_retried() {
    let server = ScriptedModelServer::start(vec![
        openai::text("too slow").delayed(2_000),
        openai::text("fast"),
    ])
    .await;
    let mut config = openai_config(&server, false);
    config.request_timeout = Duration::from_millis(200);
    let (result, events) = complete(&model(config)).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("fast"));
    assert!(events.retries()[0]
        .2
        .contains("no complete response within 200 ms"));
}

#[tokio::test]
async fn connection_refused_is_retried_then_exhausted() {
    let server = ScriptedModelServer::start(vec![]).await;
    let mut config = openai_config(&server, false);
    drop(server); // nothing listens on the port any more
    config.retry = fast_retries(2);
    let (result, events) = complete(&model(config)).await;
    assert!(
        matches!(result, Err(ModelError::Exhausted { attempts: 2, .. })),
        "{result:?}"
    );
    assert_eq!(events.retries().len(), 1);
}

#[tokio::test]
async fn a_request_past_the_end_of_the_script_fails_clearly() {
    let server = ScriptedModelServer::start(vec![]).await;
    let (result, events) = complete(&model(openai_config(&server, false))).await;
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("request #1") && message.contains("past the end of the script"),
        "{message}"
    );
    assert!(events.retries().is_empty());
}

#[tokio::test]
async fn the_blocking_server_serves_from_its_own_thread() {
    let server = ScriptedModelServer::start_blocking(vec![anthropic::text("from a thread")]);
    let (result, _) = complete(&model(anthropic_config(&server, true))).await;
    assert_eq!(result.unwrap().text.as_deref(), Some("from a thread"));
    assert_eq!(server.requests()[0].path, "/v1/messages");
}
