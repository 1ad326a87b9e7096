//! Model provider clients behind the runtime's `Model` trait: OpenAI Chat Completions (and every
//! compatible server) and Anthropic Messages, streamed or not, with retries, an optional fallback
//! model, token usage and cost.
//!
//! **API boundary**: `build` turns configuration into an `Arc<dyn Model>`; everything else the
//! CLI needs is configuration (`ModelConfig`, `PriceTable`). Wire formats stay private; the one
//! shared piece is [`sse`], Warden's Server-Sent Events parser, which the CLI also uses to follow
//! `warden serve`'s event streams.
//!
//! Events: before each retry the client emits `ModelRetrying { model, attempt, delay_ms, reason }`
//! where `attempt` is the number of the attempt about to start (2 for the first retry) and
//! `delay_ms` the wait before it; `ModelFallback { from, to, reason }` when the fallback takes
//! over. `ModelResponse::raw` is the response body, or for a stream the JSON array of every
//! `data:` payload received (non-JSON payloads such as `[DONE]` as strings).

#![warn(unreachable_pub)]
mod anthropic;
mod config;
mod decision;
mod endpoint;
mod openai;
mod price;
mod retry;
pub mod sse;

pub use config::{
    known_context_tokens, CacheTtl, ConfigError, MaxTokensField, ModelConfig, Provider,
    RetryConfig, SystemRole,
};
pub use endpoint::CONNECT_FAILED;
pub use price::{Price, PriceTable};

use endpoint::Endpoint;
use std::sync::Arc;
use warden_protocol::Event;
use warden_runtime::{BoxFuture, EventSink, Model, ModelError, ModelRequest, ModelResponse};

/// Builds the model the runtime drives: `primary`, and `fallback` if it fails.
///
/// The fallback is called (once, with its own retries) when the primary ran out of retries, sent
/// a response that could not be understood, or refused in a way specific to it: bad key (401),
/// no access (403), unknown model (404), no credit (402, `insufficient_quota`). It is not called
/// when the primary rejected the request itself (400, 413, 422): the same request would most
/// likely be refused again, and the error should surface. Each call starts with the primary.
pub fn build(
    primary: ModelConfig,
    fallback: Option<ModelConfig>,
    prices: PriceTable,
) -> Result<Arc<dyn Model>, ConfigError> {
    primary.validate()?;
    if let Some(fallback) = &fallback {
        fallback.validate()?;
    }
    // One client for both endpoints: one connection pool, one TLS set-up. Redirects are refused:
    // an API endpoint has no business redirecting, and following one could carry the key away.
    let client = reqwest::Client::builder()
        .connect_timeout(endpoint::CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("warden/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| ConfigError::HttpClient(error.to_string()))?;
    let endpoint = |config: ModelConfig| {
        let price = prices.lookup(config.provider, &config.model).cloned();
        // Not a warning: every result of the task says so in a notice (with the fix), and a
        // warning here landed in the middle of the CLI's progress.
        if price.is_none() {
            tracing::info!(model = %config.name(), "no price known for this model: its cost will be reported as unknown");
        }
        Endpoint::new(config, price, client.clone())
    };
    Ok(Arc::new(ModelChain {
        primary: endpoint(primary),
        fallback: fallback.map(endpoint),
    }))
}

/// The primary endpoint and its optional fallback.
#[derive(Debug)]
struct ModelChain {
    primary: Endpoint,
    fallback: Option<Endpoint>,
}

impl Model for ModelChain {
    fn name(&self) -> String {
        self.primary.name().to_string()
    }

    fn complete<'a>(
        &'a self,
        request: &'a ModelRequest,
        events: &'a dyn EventSink,
    ) -> BoxFuture<'a, Result<ModelResponse, ModelError>> {
        let span = tracing::info_span!(
            "model.call",
            gen_ai.request.model = %self.primary.name(),
            gen_ai.response.model = tracing::field::Empty,
            gen_ai.usage.input_tokens = tracing::field::Empty,
            gen_ai.usage.output_tokens = tracing::field::Empty,
            error = tracing::field::Empty,
        );
        let recorded = span.clone();
        Box::pin(tracing::Instrument::instrument(
            async move {
                let outcome = self.complete_chain(request, events).await;
                match &outcome {
                    Ok(response) => {
                        recorded.record("gen_ai.response.model", response.model.as_str());
                        if let Some(usage) = &response.usage {
                            recorded.record("gen_ai.usage.input_tokens", usage.input_tokens);
                            recorded.record("gen_ai.usage.output_tokens", usage.output_tokens);
                        }
                    }
                    Err(error) => {
                        recorded.record("error", error.to_string().as_str());
                    }
                }
                outcome
            },
            span,
        ))
    }

    /// Known only when every model that may answer has a price.
    fn has_price(&self) -> bool {
        self.primary.has_price() && self.fallback.as_ref().is_none_or(Endpoint::has_price)
    }
}

impl ModelChain {
    /// The primary, then the fallback when the primary's failure allows one.
    async fn complete_chain(
        &self,
        request: &ModelRequest,
        events: &dyn EventSink,
    ) -> Result<ModelResponse, ModelError> {
        {
            let failure = match self.primary.complete(request, events).await {
                Ok(response) => return Ok(response),
                Err(failure) => failure,
            };
            let Some(fallback) = self.fallback.as_ref().filter(|_| failure.fallback) else {
                return Err(failure.error);
            };
            let reason = failure.error.to_string();
            tracing::warn!(from = %self.primary.name(), to = %fallback.name(), %reason, "falling back to another model");
            events.emit(Event::ModelFallback {
                from: self.primary.name().to_string(),
                to: fallback.name().to_string(),
                reason: reason.clone(),
            });
            fallback.complete(request, events).await.map_err(|second| {
                let context = format!(" (after {} failed: {reason})", self.primary.name());
                match second.error {
                    ModelError::Permanent { status, message } => ModelError::Permanent {
                        status,
                        message: message + &context,
                    },
                    ModelError::Exhausted { attempts, message } => ModelError::Exhausted {
                        attempts,
                        message: message + &context,
                    },
                    ModelError::Protocol { message } => ModelError::Protocol {
                        message: message + &context,
                    },
                }
            })
        }
    }
}
