//! OpenTelemetry trace export: Warden's spans (`task.run`, `model.call`, `tool.call`,
//! `http.request`, …, from the `warden_*` crates) sent to a collector over OTLP/HTTP with the
//! JSON encoding (`POST {endpoint}/v1/traces`, `[telemetry]`). The layer is always installed and
//! inert (its filter admits nothing) until [`start`] is called with a configuration; spans then
//! queue in a bounded channel (a full one drops them, counted, never blocking a task) and a
//! thread of its own batches them to the collector. [`flush`] sends what is queued before the
//! process exits. An export that fails is logged as a warning, and the spans are dropped.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::telemetry_config::TelemetryConfig;
use serde_json::{json, Value};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::Subscriber;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Spans waiting for the exporter; more are dropped.
const QUEUE: usize = 8192;
/// Spans per export request.
const BATCH: usize = 512;
/// How long a span may wait in a partial batch.
const LINGER: Duration = Duration::from_secs(2);
/// One export request's limit.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

static EXPORT: OnceLock<Export> = OnceLock::new();

struct Export {
    sender: SyncSender<Message>,
    dropped: AtomicU64,
}

enum Message {
    Span(SpanRecord),
    /// Send everything queued, then say so.
    Flush(mpsc::Sender<()>),
}

/// A span as it is exported.
struct SpanRecord {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    parent: Option<[u8; 8]>,
    name: &'static str,
    start_ns: u64,
    end_ns: u64,
    attributes: Vec<(&'static str, Value)>,
}

/// The layer that records spans for export (install it with [`filter`]).
pub struct OtlpLayer;

/// Only Warden's own spans, and only while export is on.
pub fn filter() -> tracing_subscriber::filter::FilterFn<fn(&tracing::Metadata<'_>) -> bool> {
    tracing_subscriber::filter::filter_fn(admits as fn(&tracing::Metadata<'_>) -> bool)
}

fn admits(metadata: &tracing::Metadata<'_>) -> bool {
    EXPORT.get().is_some()
        && metadata.is_span()
        && metadata.target().starts_with("warden")
        && *metadata.level() <= tracing::Level::INFO
}

/// Starts exporting to `config`'s collector. Once per process; a second call is ignored.
pub fn start(config: &TelemetryConfig) -> anyhow::Result<()> {
    if EXPORT.get().is_some() {
        return Ok(());
    }
    let mut headers = reqwest::header::HeaderMap::new();
    for (name, value) in &config.headers {
        let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
            anyhow::anyhow!("OTEL_EXPORTER_OTLP_HEADERS: {name} is not a header value")
        })?;
        value.set_sensitive(true);
        headers.insert(
            reqwest::header::HeaderName::from_bytes(name.as_bytes())?,
            value,
        );
    }
    let client = reqwest::Client::builder()
        .default_headers(headers)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(EXPORT_TIMEOUT)
        .build()?;
    let (sender, receiver) = mpsc::sync_channel(QUEUE);
    let url = config.traces_url.clone();
    let resource = json!({"attributes": [
        attribute("service.name", &json!(config.service_name)),
        attribute("service.version", &json!(env!("CARGO_PKG_VERSION"))),
    ]});
    std::thread::Builder::new()
        .name("warden-otlp".into())
        .spawn(move || export_loop(&receiver, &client, &url, &resource))?;
    let _ = EXPORT.set(Export {
        sender,
        dropped: AtomicU64::new(0),
    });
    Ok(())
}

/// Sends every span queued so far, waiting at most `limit`.
pub fn flush(limit: Duration) {
    let Some(export) = EXPORT.get() else {
        return;
    };
    let (done, wait) = mpsc::channel();
    if export.sender.send(Message::Flush(done)).is_ok() {
        let _ = wait.recv_timeout(limit);
    }
    let dropped = export.dropped.load(Ordering::Relaxed);
    if dropped > 0 {
        tracing::warn!(dropped, "trace export fell behind; spans were dropped");
    }
}

fn export_loop(
    receiver: &Receiver<Message>,
    client: &reqwest::Client,
    url: &str,
    resource: &Value,
) {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            tracing::warn!(%error, "trace export cannot start");
            return;
        }
    };
    let mut batch: Vec<SpanRecord> = Vec::new();
    loop {
        let message = if batch.is_empty() {
            receiver.recv().map_err(|_| RecvTimeoutError::Disconnected)
        } else {
            receiver.recv_timeout(LINGER)
        };
        match message {
            Ok(Message::Span(span)) => {
                batch.push(span);
                if batch.len() >= BATCH {
                    runtime.block_on(send(client, url, resource, &mut batch));
                }
            }
            Ok(Message::Flush(done)) => {
                runtime.block_on(send(client, url, resource, &mut batch));
                let _ = done.send(());
            }
            Err(RecvTimeoutError::Timeout) => {
                runtime.block_on(send(client, url, resource, &mut batch));
            }
            Err(RecvTimeoutError::Disconnected) => {
                runtime.block_on(send(client, url, resource, &mut batch));
                return;
            }
        }
    }
}

async fn send(client: &reqwest::Client, url: &str, resource: &Value, batch: &mut Vec<SpanRecord>) {
    if batch.is_empty() {
        return;
    }
    let body = request_body(resource, batch);
    let spans = batch.len();
    batch.clear();
    let request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    match request.send().await {
        Ok(response) if response.status().is_success() => {}
        Ok(response) => {
            tracing::warn!(
                status = response.status().as_u16(),
                spans,
                "the trace collector refused an export"
            )
        }
        Err(error) => tracing::warn!(%error, spans, "trace export failed"),
    }
}

/// An `ExportTraceServiceRequest` in OTLP's JSON encoding: ids in hex, times as decimal
/// strings of nanoseconds since the epoch, `kind` 1 (internal).
fn request_body(resource: &Value, batch: &[SpanRecord]) -> Value {
    let spans: Vec<Value> = batch
        .iter()
        .map(|span| {
            let mut value = json!({
                "traceId": hex(&span.trace_id),
                "spanId": hex(&span.span_id),
                "name": span.name,
                "kind": 1,
                "startTimeUnixNano": span.start_ns.to_string(),
                "endTimeUnixNano": span.end_ns.to_string(),
                "attributes": span.attributes.iter().map(|(k, v)| attribute(k, v)).collect::<Vec<_>>(),
            });
            if let Some(parent) = &span.parent {
                value["parentSpanId"] = json!(hex(parent));
            }
            value
        })
        .collect();
    json!({"resourceSpans": [{
        "resource": resource,
        "scopeSpans": [{
            "scope": {"name": "warden", "version": env!("CARGO_PKG_VERSION")},
            "spans": spans,
        }],
    }]})
}

/// An OTLP `KeyValue`: strings, booleans, integers (as decimal strings) and doubles.
fn attribute(key: &str, value: &Value) -> Value {
    let any = match value {
        Value::Bool(b) => json!({"boolValue": b}),
        Value::Number(n) if n.is_i64() || n.is_u64() => json!({"intValue": n.to_string()}),
        Value::Number(n) => json!({"doubleValue": n.as_f64()}),
        Value::String(s) => json!({"stringValue": s}),
        other => json!({"stringValue": other.to_string()}),
    };
    json!({"key": key, "value": any})
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

/// Random, never all zero (OTLP's invalid id).
fn random_id<const N: usize>() -> [u8; N] {
    let mut id = [0u8; N];
    while id.iter().all(|b| *b == 0) {
        if getrandom::fill(&mut id).is_err() {
            id[0] = 1;
        }
    }
    id
}

/// Field values as attributes; long strings cut at 1 KiB.
struct Fields<'a>(&'a mut Vec<(&'static str, Value)>);

impl Fields<'_> {
    fn put(&mut self, field: &Field, value: Value) {
        match self.0.iter_mut().find(|(k, _)| *k == field.name()) {
            Some(slot) => slot.1 = value,
            None => self.0.push((field.name(), value)),
        }
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        let mut text = value.to_string();
        if text.len() > 1024 {
            let mut cut = 1024;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        self.put(field, json!(text));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, json!(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, json!(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, json!(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, json!(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.record_str(field, &format!("{value:?}"));
    }
}

impl<S> Layer<S> for OtlpLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let Some(span) = ctx.span(id) else {
            return;
        };
        let parent = span.parent().and_then(|parent| {
            parent
                .extensions()
                .get::<SpanRecord>()
                .map(|record| (record.trace_id, record.span_id))
        });
        let mut record = SpanRecord {
            trace_id: parent.map_or_else(random_id, |(trace, _)| trace),
            span_id: random_id(),
            parent: parent.map(|(_, span)| span),
            name: attrs.metadata().name(),
            start_ns: now_ns(),
            end_ns: 0,
            attributes: Vec::new(),
        };
        attrs.record(&mut Fields(&mut record.attributes));
        span.extensions_mut().insert(record);
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(record) = span.extensions_mut().get_mut::<SpanRecord>() {
                values.record(&mut Fields(&mut record.attributes));
            }
        }
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let (Some(export), Some(span)) = (EXPORT.get(), ctx.span(&id)) else {
            return;
        };
        let Some(mut record) = span.extensions_mut().remove::<SpanRecord>() else {
            return;
        };
        record.end_ns = now_ns().max(record.start_ns);
        if export.sender.try_send(Message::Span(record)).is_err() {
            export.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}
