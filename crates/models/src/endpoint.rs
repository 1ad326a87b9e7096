//! One configured provider endpoint: sends a request, reads the response (whole or streamed),
//! retries what is worth retrying and prices the result. Wire details live in `openai` and
//! `anthropic`; the decisions about failures in `retry`.
//!
//! What a server sends is capped, so a misbehaving compatible server cannot exhaust memory:
//! [`MAX_RESPONSE_BYTES`] for a response body and for everything one stream sends,
//! [`MAX_STREAM_EVENT_BYTES`] for one SSE line or event, [`MAX_STREAM_EVENTS`] events in one
//! stream, and [`MAX_ERROR_BODY_BYTES`] read of an error body. Past a response cap the attempt fails for good with a protocol error naming
//! the cap (the same request would get the same answer); an error body is cut at its cap and
//! classified by its status as usual.

use crate::config::{ModelConfig, Provider};
use crate::decision::{Decision, Flow};
use crate::price::Price;
use crate::retry::{self, AttemptError};
use crate::sse::{EventTooLarge, SseEvent, SseParser};
use crate::{anthropic, openai};
use reqwest::header::{HeaderMap, HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use serde_json::Value;
use std::time::Duration;
use warden_protocol::Event;
use warden_runtime::{Cost, EventSink, ModelError, ModelRequest, ModelResponse};

/// The most a response body, or everything one stream sends, may hold. Generous: a long
/// answer is a few hundred kilobytes of JSON.
pub(crate) const MAX_RESPONSE_BYTES: usize = 32 << 20;
/// The most one SSE line, or one event's joined `data`, may hold.
pub(crate) const MAX_STREAM_EVENT_BYTES: usize = 8 << 20;
/// The most events one stream may send. Each is kept (parsed) in the raw response, which costs
/// far more memory than its bytes when events are tiny; a stream sends about one event per
/// output token, and the default output limit is 8,192 tokens.
pub(crate) const MAX_STREAM_EVENTS: usize = 100_000;
/// The most of an error body that is read; only its message is used.
pub(crate) const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

/// `32 MiB`, `64 KiB`: a cap as people read it.
fn size(bytes: usize) -> String {
    if bytes >= 1 << 20 && bytes.is_multiple_of(1 << 20) {
        format!("{} MiB", bytes >> 20)
    } else if bytes >= 1 << 10 && bytes.is_multiple_of(1 << 10) {
        format!("{} KiB", bytes >> 10)
    } else {
        format!("{bytes} bytes")
    }
}

/// How a stream ended.
enum StreamEnd {
    /// The assembler saw the end marker.
    Stopped,
    /// The body ended cleanly.
    Eof,
    /// The body failed mid-way.
    Interrupted(String),
}

/// A call that failed for good, and whether a fallback model may be tried.
#[derive(Debug)]
pub(crate) struct Failure {
    pub error: ModelError,
    pub fallback: bool,
}

#[derive(Debug)]
pub(crate) struct Endpoint {
    config: ModelConfig,
    name: String,
    price: Option<Price>,
    client: reqwest::Client,
    headers: HeaderMap,
}

impl Endpoint {
    pub(crate) fn new(
        config: ModelConfig,
        price: Option<Price>,
        client: reqwest::Client,
    ) -> Endpoint {
        let mut headers = HeaderMap::new();
        let accept = if config.stream {
            "text/event-stream"
        } else {
            "application/json"
        };
        headers.insert(ACCEPT, HeaderValue::from_static(accept));
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        // `validate` has checked that the key is a valid header value.
        let key = |prefix: &str| {
            config.api_key.as_deref().and_then(|key| {
                let mut value = HeaderValue::from_str(&format!("{prefix}{key}")).ok()?;
                value.set_sensitive(true);
                Some(value)
            })
        };
        match config.provider {
            Provider::OpenAi => {
                if let Some(value) = key("Bearer ") {
                    headers.insert(AUTHORIZATION, value);
                }
            }
            Provider::Anthropic => {
                if let Some(value) = key("") {
                    headers.insert("x-api-key", value);
                }
                headers.insert(
                    "anthropic-version",
                    HeaderValue::from_static(anthropic::API_VERSION),
                );
            }
        }
        Endpoint {
            name: config.name(),
            config,
            price,
            client,
            headers,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn has_price(&self) -> bool {
        self.price.is_some()
    }

    fn secret(&self) -> Option<&str> {
        self.config.api_key.as_deref()
    }

    /// One decision, with retries.
    pub(crate) async fn complete(
        &self,
        request: &ModelRequest,
        events: &dyn EventSink,
    ) -> Result<ModelResponse, Failure> {
        let body = match self.config.provider {
            Provider::OpenAi => openai::request_body(&self.config, request),
            Provider::Anthropic => anthropic::request_body(&self.config, request),
        };
        let body = serde_json::to_vec(&body).map_err(|error| Failure {
            error: ModelError::Protocol {
                message: format!("cannot encode the request: {error}"),
            },
            fallback: false,
        })?;
        let ids = openai::CallIds::for_request(request);
        let max_attempts = self.config.retry.max_attempts.max(1);
        let mut attempt = 1;
        loop {
            tracing::debug!(model = %self.name, attempt, "model request");
            let outcome =
                match tokio::time::timeout(self.config.request_timeout, self.attempt(&body, ids))
                    .await
                {
                    Ok(outcome) => outcome,
                    Err(_) => Err(AttemptError::retryable(format!(
                        "no complete response within {} ms",
                        self.config.request_timeout.as_millis()
                    ))),
                };
            match outcome {
                Ok((decision, raw)) => return Ok(self.respond(decision, raw)),
                Err(AttemptError::Retryable { reason, delay }) => {
                    if attempt >= max_attempts {
                        tracing::warn!(model = %self.name, attempt, %reason, "model call failed, no attempts left");
                        return Err(Failure {
                            error: ModelError::Exhausted {
                                attempts: attempt,
                                message: reason,
                            },
                            fallback: true,
                        });
                    }
                    let delay =
                        delay.unwrap_or_else(|| retry::backoff(&self.config.retry, attempt));
                    attempt += 1;
                    tracing::warn!(model = %self.name, attempt, delay_ms = delay.as_millis() as u64, %reason, "retrying model call");
                    events.emit(Event::ModelRetrying {
                        model: self.name.clone(),
                        attempt,
                        delay_ms: delay.as_millis() as u64,
                        reason,
                    });
                    tokio::time::sleep(delay).await;
                }
                Err(AttemptError::Permanent {
                    status,
                    message,
                    fallback,
                }) => {
                    tracing::warn!(model = %self.name, ?status, %message, "model call refused");
                    let message = match status {
                        Some(404) => format!("{message}; {}", self.not_found_hint()),
                        _ => message,
                    };
                    return Err(Failure {
                        error: ModelError::Permanent { status, message },
                        fallback,
                    });
                }
                Err(AttemptError::Protocol { message }) => {
                    tracing::warn!(model = %self.name, %message, "model response not understood");
                    return Err(Failure {
                        error: ModelError::Protocol { message },
                        fallback: true,
                    });
                }
            }
        }
    }

    /// What a 404 from the endpoint most often means, with the values to check.
    fn not_found_hint(&self) -> String {
        let base = self.config.base_url.trim_end_matches('/');
        match self.config.provider {
            Provider::OpenAi if !base.ends_with("/v1") => format!(
                "the server has no such model or path: check the model name ({:?}) and the base \
                 URL {base:?}, which for OpenAI-compatible servers usually ends in /v1 \
                 (OPENAI_BASE_URL)",
                self.config.model
            ),
            Provider::OpenAi => format!(
                "the server has no such model or path: check the model name ({:?}; `[model] \
                 name` or WARDEN_MODEL) and the base URL {base:?}",
                self.config.model
            ),
            Provider::Anthropic => format!(
                "the server has no such model or path: check the model name ({:?}) and the base \
                 URL {base:?}, which for Anthropic has no /v1 (ANTHROPIC_BASE_URL)",
                self.config.model
            ),
        }
    }

    fn respond(&self, decision: Decision, raw: Value) -> ModelResponse {
        let cost = match (&decision.usage, &self.price) {
            (Some(usage), Some(price)) => crate::price::cost_at(price, usage),
            (None, _) => {
                tracing::debug!(model = %self.name, "response carried no usage: cost unknown");
                Cost::Unknown
            }
            (Some(_), None) => Cost::Unknown,
        };
        ModelResponse {
            model: self.name.clone(),
            text: decision.text,
            tool_calls: decision.tool_calls,
            usage: decision.usage,
            cost,
            stop_reason: decision.stop_reason,
            raw,
        }
    }

    /// One attempt: the decision and the raw response (the body, or every stream event).
    async fn attempt(
        &self,
        body: &[u8],
        ids: openai::CallIds,
    ) -> Result<(Decision, Value), AttemptError> {
        let mut response = self
            .client
            .post(self.config.endpoint())
            .headers(self.headers.clone())
            .body(body.to_vec())
            .send()
            .await
            .map_err(|error| {
                AttemptError::retryable(if error.is_connect() {
                    connect_error(&error)
                } else {
                    transport_error("request failed", &error)
                })
            })?;
        let status = response.status();
        if !status.is_success() {
            let headers = response.headers().clone();
            let (text, cut) = match read_body(&mut response, MAX_ERROR_BODY_BYTES).await {
                Ok(Body::Whole(bytes)) => (String::from_utf8_lossy(&bytes).into_owned(), false),
                Ok(Body::Cut(bytes)) => (String::from_utf8_lossy(&bytes).into_owned(), true),
                Err(_) => (String::new(), false),
            };
            let error = retry::classify_http_error(status.as_u16(), &headers, &text, self.secret());
            return Err(if cut {
                error.with_note(&format!(
                    "error body longer than the {} cap, cut",
                    size(MAX_ERROR_BODY_BYTES)
                ))
            } else {
                error
            });
        }
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let is_stream = content_type.contains("text/event-stream")
            || (self.config.stream && !content_type.contains("json"));
        if !is_stream {
            // Also taken when a stream was asked for but the server answered with one JSON body.
            let too_large = || {
                AttemptError::protocol(format!(
                    "response body exceeds the {} cap",
                    size(MAX_RESPONSE_BYTES)
                ))
            };
            if response
                .content_length()
                .is_some_and(|length| length > MAX_RESPONSE_BYTES as u64)
            {
                return Err(too_large());
            }
            let bytes = match read_body(&mut response, MAX_RESPONSE_BYTES).await {
                Ok(Body::Whole(bytes)) => bytes,
                Ok(Body::Cut(_)) => return Err(too_large()),
                Err(error) => {
                    return Err(AttemptError::retryable(transport_error(
                        "reading the response failed",
                        &error,
                    )))
                }
            };
            let json: Value = serde_json::from_slice(&bytes).map_err(|_| {
                AttemptError::protocol(retry::clean(
                    &format!(
                        "response is not json: {}",
                        String::from_utf8_lossy(&bytes).trim()
                    ),
                    self.secret(),
                ))
            })?;
            let decision = match self.config.provider {
                Provider::OpenAi => openai::parse_response(&json, ids, self.secret())?,
                Provider::Anthropic => anthropic::parse_response(&json, self.secret())?,
            };
            return Ok((decision, json));
        }
        let mut raw = Vec::new();
        let decision = match self.config.provider {
            Provider::OpenAi => {
                let mut assembler = openai::StreamAssembler::new(ids, self.secret());
                let end = read_stream(&mut response, &mut raw, |event, json| {
                    assembler.on_data(&event.data, json)
                })
                .await?;
                check_complete(assembler.is_complete(), end, &self.name)?;
                assembler.finish()
            }
            Provider::Anthropic => {
                let mut assembler = anthropic::StreamAssembler::new(self.secret());
                let end = read_stream(&mut response, &mut raw, |event, json| {
                    assembler.on_event(event.event.as_deref(), &event.data, json)
                })
                .await?;
                check_complete(assembler.is_complete(), end, &self.name)?;
                assembler.finish()
            }
        };
        Ok((decision, Value::Array(raw)))
    }
}

/// A stream counts when the server marked its end; the transport failing after that mark (say,
/// before the usage chunk) loses nothing worth paying for again.
fn check_complete(complete: bool, end: StreamEnd, model: &str) -> Result<(), AttemptError> {
    match (complete, end) {
        (true, StreamEnd::Interrupted(reason)) => {
            tracing::warn!(model, %reason, "stream interrupted after the response was complete");
            Ok(())
        }
        (true, _) | (false, StreamEnd::Stopped) => Ok(()),
        (false, StreamEnd::Eof) => Err(AttemptError::retryable(
            "stream ended before the response was complete",
        )),
        (false, StreamEnd::Interrupted(reason)) => Err(AttemptError::retryable(reason)),
    }
}

/// A body read up to a cap.
enum Body {
    Whole(Vec<u8>),
    /// The first `cap` bytes of a longer body; the rest was not read.
    Cut(Vec<u8>),
}

/// Reads the body, stopping at `cap` bytes.
async fn read_body(response: &mut reqwest::Response, cap: usize) -> Result<Body, reqwest::Error> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await? {
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(&chunk[..room]);
            return Ok(Body::Cut(body));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Body::Whole(body))
}

/// Reads SSE events until the assembler stops, the body ends, or the transport fails. Every
/// `data:` payload is appended to `raw` (parsed when it is JSON, as a string otherwise). A
/// stream sending more than [`MAX_RESPONSE_BYTES`] or [`MAX_STREAM_EVENTS`] events, or one
/// event over [`MAX_STREAM_EVENT_BYTES`], fails the attempt for good.
async fn read_stream<F>(
    response: &mut reqwest::Response,
    raw: &mut Vec<Value>,
    mut on_event: F,
) -> Result<StreamEnd, AttemptError>
where
    F: FnMut(&SseEvent, Option<&Value>) -> Result<Flow, AttemptError>,
{
    let mut parser = SseParser::new(MAX_STREAM_EVENT_BYTES);
    let event_too_large = |error: EventTooLarge| {
        AttemptError::protocol(format!(
            "a stream event exceeds the {} cap",
            size(error.limit)
        ))
    };
    let mut received = 0usize;
    let mut dispatch = |event: SseEvent, raw: &mut Vec<Value>| {
        if raw.len() >= MAX_STREAM_EVENTS {
            return Err(AttemptError::protocol(format!(
                "streamed response exceeds the {MAX_STREAM_EVENTS}-event cap"
            )));
        }
        let json = serde_json::from_str::<Value>(&event.data).ok();
        raw.push(
            json.clone()
                .unwrap_or_else(|| Value::String(event.data.clone())),
        );
        on_event(&event, json.as_ref())
    };
    loop {
        match response.chunk().await {
            Ok(Some(bytes)) => {
                received = received.saturating_add(bytes.len());
                if received > MAX_RESPONSE_BYTES {
                    return Err(AttemptError::protocol(format!(
                        "streamed response exceeds the {} cap",
                        size(MAX_RESPONSE_BYTES)
                    )));
                }
                for event in parser.push(&bytes).map_err(event_too_large)? {
                    if dispatch(event, raw)? == Flow::Stop {
                        return Ok(StreamEnd::Stopped);
                    }
                }
            }
            Ok(None) => {
                if let Some(event) = parser.finish().map_err(event_too_large)? {
                    if dispatch(event, raw)? == Flow::Stop {
                        return Ok(StreamEnd::Stopped);
                    }
                }
                return Ok(StreamEnd::Eof);
            }
            Err(error) => {
                return Ok(StreamEnd::Interrupted(transport_error(
                    "stream interrupted",
                    &error,
                )))
            }
        }
    }
}

/// `context: error: cause: cause`, which reqwest's own message alone does not show.
/// No connection could be made (nothing listens there, no route, no such host): the
/// endpoint and the innermost cause, without the HTTP client's chain. It starts with
/// [`CONNECT_FAILED`], which the engine recognises to name the base URL variable.
fn connect_error(error: &reqwest::Error) -> String {
    let mut reason = error.to_string();
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        reason = cause.to_string();
        source = cause.source();
    }
    let endpoint = error
        .url()
        .map(|url| {
            let mut url = url.clone();
            let _ = url.set_username("");
            let _ = url.set_password(None);
            url.set_query(None);
            url.to_string()
        })
        .unwrap_or_default();
    format!("{CONNECT_FAILED} {endpoint}: {reason}")
}

/// How the reason of a connection that could not be made starts.
pub const CONNECT_FAILED: &str = "cannot connect to";

fn transport_error(context: &str, error: &reqwest::Error) -> String {
    let mut message = format!("{context}: {error}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        message.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    if error.is_timeout() {
        message.push_str(" (timed out)");
    }
    message
}

/// Timeouts of the shared HTTP client; the per-attempt deadline is `ModelConfig::request_timeout`.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(15);
