//! The fallback model: when it is called, what it reports, and who answered.

use super::*;
use warden_models::PriceTable;
use warden_test_support::model_server::{anthropic, openai};

fn chain(primary: ModelConfig, fallback: ModelConfig) -> Arc<dyn Model> {
    warden_models::build(primary, Some(fallback), PriceTable::builtin()).unwrap()
}

fn fallbacks(events: &Recorder) -> Vec<(String, String, String)> {
    events
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ModelFallback { from, to, reason } => Some((from, to, reason)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn fallback_answers_after_the_primary_exhausts_its_retries() {
    let primary = ScriptedModelServer::start(vec![
        openai::error(503, "server_error", None, "unavailable"),
        openai::error(503, "server_error", None, "unavailable"),
        openai::error(503, "server_error", None, "unavailable"),
    ])
    .await;
    let secondary = ScriptedModelServer::start(vec![
        anthropic::error(529, "overloaded_error", "Overloaded"),
        anthropic::stream_tool_use("search", r#"{"pattern":"main"}"#, 2),
    ])
    .await;
    let model = chain(
        openai_config(&primary, false),
        anthropic_config(&secondary, true),
    );
    assert_eq!(model.name(), "openai:gpt-5-mini");
    let (result, events) = complete(&model).await;
    let response = result.unwrap();
    assert_eq!(response.model, "anthropic:claude-sonnet-4-5");
    assert_eq!(response.tool_calls[0].name, "search");

    let names: Vec<(String, u32)> = events
        .events()
        .into_iter()
        .filter_map(|event| match event {
            Event::ModelRetrying { model, attempt, .. } => Some((model, attempt)),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        [
            ("openai:gpt-5-mini".to_string(), 2),
            ("openai:gpt-5-mini".to_string(), 3),
            // the fallback retries on its own
            ("anthropic:claude-sonnet-4-5".to_string(), 2),
        ]
    );
    let fallbacks = fallbacks(&events);
    assert_eq!(fallbacks.len(), 1);
    assert_eq!(fallbacks[0].0, "openai:gpt-5-mini");
    assert_eq!(fallbacks[0].1, "anthropic:claude-sonnet-4-5");
    assert!(fallbacks[0].2.contains("after 3 attempts"), "{fallbacks:?}");
    assert_eq!(primary.requests().len(), 3);
    assert_eq!(secondary.requests().len(), 2);
}

#[tokio::test]
async fn fallback_answers_when_the_primary_key_is_refused() {
    let primary = ScriptedModelServer::start(vec![anthropic::error(
        401,
        "authentication_error",
        "invalid x-api-key",
    )])
    .await;
    let secondary = ScriptedModelServer::start(vec![openai::text("from the fallback")]).await;
    let model = chain(
        anthropic_config(&primary, false),
        openai_config(&secondary, false),
    );
    let (result, events) = complete(&model).await;
    let response = result.unwrap();
    assert_eq!(response.model, "openai:gpt-5-mini");
    assert_eq!(response.text.as_deref(), Some("from the fallback"));
    assert!(events.retries().is_empty());
    assert_eq!(fallbacks(&events).len(), 1);
}

#[tokio::test]
async fn a_bad_request_does_not_fall_back() {
    let primary = ScriptedModelServer::start(vec![openai::error(
        400,
        "invalid_request_error",
        None,
        "Invalid schema for function 'search'",
    )])
    .await;
    let secondary = ScriptedModelServer::start(vec![anthropic::text("unused")]).await;
    let model = chain(
        openai_config(&primary, false),
        anthropic_config(&secondary, false),
    );
    let (result, events) = complete(&model).await;
    assert!(
        matches!(
            result,
            Err(ModelError::Permanent {
                status: Some(400),
                ..
            })
        ),
        "{result:?}"
    );
    assert!(events.events().is_empty());
    assert!(secondary.requests().is_empty());
}

#[tokio::test]
async fn when_both_fail_the_error_names_both() {
    let primary = ScriptedModelServer::start(vec![openai::error(
        404,
        "invalid_request_error",
        Some("model_not_found"),
        "no such model",
    )])
    .await;
    let secondary = ScriptedModelServer::start(vec![anthropic::error(
        403,
        "permission_error",
        "not allowed",
    )])
    .await;
    let model = chain(
        openai_config(&primary, false),
        anthropic_config(&secondary, false),
    );
    let error = complete(&model).await.0.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            ModelError::Permanent {
                status: Some(403),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        message.contains("not allowed") && message.contains("no such model"),
        "{message}"
    );
}

#[tokio::test]
async fn has_price_needs_a_price_for_every_model_that_may_answer() {
    let server = ScriptedModelServer::start(vec![]).await;
    let priced = openai_config(&server, false);
    let mut unpriced = openai_config(&server, false);
    unpriced.model = "llama3.1:8b".into();
    assert!(model(priced.clone()).has_price());
    assert!(!model(unpriced.clone()).has_price());
    assert!(chain(priced.clone(), anthropic_config(&server, false)).has_price());
    assert!(!chain(priced, unpriced).has_price());
}

#[tokio::test]
async fn a_404_names_the_model_and_the_base_url_to_check() {
    let server = ScriptedModelServer::start(vec![]).await;
    // An OpenAI-compatible base URL without /v1: requests land on a path the server lacks.
    let mut config = openai_config(&server, false);
    config.base_url = server.url();
    let error = complete(&model(config)).await.0.unwrap_err();
    let message = error.to_string();
    assert!(
        matches!(
            error,
            ModelError::Permanent {
                status: Some(404),
                ..
            }
        ),
        "{error:?}"
    );
    assert!(message.contains("\"gpt-5-mini\""), "{message}");
    assert!(message.contains("usually ends in /v1"), "{message}");
    assert!(message.contains("OPENAI_BASE_URL"), "{message}");
}
