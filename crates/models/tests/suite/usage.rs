//! Usage and cost of real responses: both providers' token accounting, unknown models, and
//! responses without usage.

use super::*;
use serde_json::json;
use warden_models::{Price, PriceTable, Provider};
use warden_runtime::{Cost, TokenUsage};
use warden_test_support::model_server::{anthropic, openai, SseEvent};

fn priced(config: ModelConfig, price: Price) -> Arc<dyn Model> {
    warden_models::build(config, None, PriceTable::new(vec![price])).unwrap()
}

fn price(
    provider: Provider,
    prefix: &str,
    input: f64,
    cached: f64,
    write: f64,
    output: f64,
) -> Price {
    Price {
        provider,
        model_prefix: prefix.into(),
        input_per_mtok_usd: input,
        cached_input_per_mtok_usd: cached,
        cache_write_per_mtok_usd: write,
        cache_write_1h_per_mtok_usd: None,
        output_per_mtok_usd: output,
    }
}

#[tokio::test]
async fn openai_usage_and_cost_count_cached_prompt_tokens() {
    let server = ScriptedModelServer::start(vec![openai::text("ok").map_json(|body| {
        body["usage"] = openai::usage(10_000, 8_000, 500);
    })])
    .await;
    let model = priced(
        openai_config(&server, false),
        price(Provider::OpenAi, "gpt-5", 1.25, 0.125, 0.0, 10.0),
    );
    let response = complete(&model).await.0.unwrap();
    assert_eq!(
        response.usage,
        Some(TokenUsage {
            input_tokens: 10_000,
            cached_input_tokens: 8_000,
            cache_write_tokens: 0,
            output_tokens: 500,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
        })
    );
    // 2000 * 1.25 + 8000 * 0.125 + 500 * 10 = 2500 + 1000 + 5000
    assert_eq!(response.cost, Cost::Known { micro_usd: 8_500 });
}

#[tokio::test]
async fn anthropic_usage_and_cost_count_cache_reads_and_writes() {
    let server = ScriptedModelServer::start(vec![anthropic::stream(vec![
        json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,
            "usage": anthropic::usage(50, 1_000, 20_000, 1)}}),
        json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
        json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}),
        json!({"type":"content_block_stop","index":0}),
        json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":300}}),
        json!({"type":"message_stop"}),
    ])])
    .await;
    let model = priced(
        anthropic_config(&server, true),
        price(
            Provider::Anthropic,
            "claude-sonnet-4",
            3.0,
            0.30,
            3.75,
            15.0,
        ),
    );
    let response = complete(&model).await.0.unwrap();
    assert_eq!(
        response.usage,
        Some(TokenUsage {
            input_tokens: 21_050,
            cached_input_tokens: 20_000,
            cache_write_tokens: 1_000,
            output_tokens: 300,
            cache_write_1h_tokens: 0,
            reasoning_tokens: 0,
        })
    );
    // 50 * 3 + 1000 * 3.75 + 20000 * 0.3 + 300 * 15 = 150 + 3750 + 6000 + 4500
    assert_eq!(response.cost, Cost::Known { micro_usd: 14_400 });
}

#[tokio::test]
async fn an_unknown_model_costs_unknown() {
    let server = ScriptedModelServer::start(vec![openai::text("ok")]).await;
    let mut config = openai_config(&server, false);
    config.model = "qwen3-coder:30b".into();
    let response = complete(&model(config)).await.0.unwrap();
    assert!(response.usage.is_some());
    assert_eq!(response.cost, Cost::Unknown);
}

#[tokio::test]
async fn missing_usage_is_none_not_zero() {
    let server = ScriptedModelServer::start(vec![
        openai::text("ok").map_json(|body| {
            body.as_object_mut().unwrap().remove("usage");
        }),
        // a stream whose usage chunk never came: the transport failed after finish_reason
        warden_test_support::model_server::Reply::sse(vec![
            SseEvent::json(&openai::chunk(
                json!({"role":"assistant","content":"done"}),
                None,
            )),
            SseEvent::json(&openai::chunk(json!({}), Some("stop"))),
        ])
        .cut_after(2),
        anthropic::text("ok").map_json(|body| {
            body.as_object_mut().unwrap().remove("usage");
        }),
    ])
    .await;
    for (stream, provider) in [
        (false, Provider::OpenAi),
        (true, Provider::OpenAi),
        (false, Provider::Anthropic),
    ] {
        let config = match provider {
            Provider::OpenAi => openai_config(&server, stream),
            Provider::Anthropic => anthropic_config(&server, stream),
        };
        let (result, events) = complete(&model(config)).await;
        let response = result.unwrap();
        assert_eq!(response.usage, None, "{provider} stream={stream}");
        assert_eq!(response.cost, Cost::Unknown);
        assert!(
            events.retries().is_empty(),
            "a finished response is not asked for again"
        );
    }
    assert_eq!(server.requests().len(), 3);
}
