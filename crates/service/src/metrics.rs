//! Prometheus metrics (`GET /metrics`, text exposition format 0.0.4, names prefixed
//! `warden_`), written by hand: counters and histograms are atomics or small maps under a
//! mutex held for a few instructions, never across an `.await`.
//!
//! Where the numbers come from:
//! - task counts by status: read from the store at each scrape (every process sees the same);
//! - runs started, model calls, tokens, cost, events and tool calls: counted by the
//!   [`crate::hub::Hub`], the store's observer, as this process claims runs, appends to the
//!   usage ledger and stores events (appended, or stored with a run's end, a cancel or an
//!   abandoned task), so they are per process (sum them across processes in Prometheus);
//! - sandbox starts and their durations: [`warden_engine::timing::time_sandbox_start`], one
//!   line in each sandbox constructor; process-wide, as the constructors have no handle on a
//!   server;
//! - HTTP requests and latencies: the API's middleware, by route template (never the raw
//!   path: label values stay bounded) and status.
//!
//! Labels taken from data (model and tool names, which a model's output can influence) are
//! capped at [`MAX_LABEL_VALUES`] distinct values per metric; the rest count as `other`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use warden_engine::timing::Histogram;

use warden_protocol::{Event, TaskStatus};
use warden_store::UsageEntry;

/// Distinct values a data-derived label (model, tool) may take before further ones are
/// counted as `other`.
pub const MAX_LABEL_VALUES: usize = 64;

/// Upper bounds (seconds) of the HTTP latency histogram.
const HTTP_BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

/// A per-model counter: its name, help text and value.
type PerModel = (&'static str, &'static str, fn(&ModelCounters) -> u64);

/// Spend of one model.
#[derive(Debug, Clone, Copy, Default)]
struct ModelCounters {
    calls: u64,
    input_tokens: u64,
    cached_input_tokens: u64,
    output_tokens: u64,
    cost_micro_usd: u64,
    unpriced_calls: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct HttpKey {
    method: &'static str,
    route: String,
    status: u16,
}

/// The counters of one server (one store's workers and one API).
#[derive(Debug, Default)]
pub struct Metrics {
    runs_started: AtomicU64,
    events: AtomicU64,
    streams: AtomicU64,
    models: Mutex<BTreeMap<String, ModelCounters>>,
    tools: Mutex<BTreeMap<(String, bool), u64>>,
    http: Mutex<BTreeMap<HttpKey, Histogram>>,
}

/// `label` itself while the map has room for it, else `other`.
fn capped_label<V>(map: &BTreeMap<String, V>, label: &str) -> String {
    if map.contains_key(label) || map.len() < MAX_LABEL_VALUES {
        label.to_string()
    } else {
        "other".to_string()
    }
}

/// A label value as the exposition format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            other => out.push(other),
        }
    }
    out
}

/// The method as a bounded label: the standard ones, else `other`.
fn method_label(method: &str) -> &'static str {
    match method {
        "GET" => "GET",
        "POST" => "POST",
        "PUT" => "PUT",
        "DELETE" => "DELETE",
        "PATCH" => "PATCH",
        "HEAD" => "HEAD",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

impl Metrics {
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// An event stream (SSE) opened.
    pub fn stream_opened(&self) {
        self.streams.fetch_add(1, Ordering::Relaxed);
    }

    /// An event stream closed.
    pub fn stream_closed(&self) {
        self.streams.fetch_sub(1, Ordering::Relaxed);
    }

    /// A worker of this process claimed a run.
    pub fn run_started(&self) {
        self.runs_started.fetch_add(1, Ordering::Relaxed);
    }

    /// A model call's spend was appended to the ledger.
    pub fn usage_recorded(&self, entry: &UsageEntry) {
        let mut models = self.models.lock().unwrap_or_else(PoisonError::into_inner);
        let label = capped_label(&models, &entry.model);
        let counters = models.entry(label).or_default();
        counters.calls += 1;
        counters.input_tokens += entry.input_tokens;
        counters.cached_input_tokens += entry.cached_input_tokens;
        counters.output_tokens += entry.output_tokens;
        match entry.cost_micro_usd {
            Some(micro_usd) => counters.cost_micro_usd += micro_usd,
            None => counters.unpriced_calls += 1,
        }
    }

    /// An event was stored; tool completions are counted by tool.
    pub fn event_stored(&self, event: &Event) {
        self.events.fetch_add(1, Ordering::Relaxed);
        if let Event::ToolFinished { tool, ok, .. } = event {
            let mut tools = self.tools.lock().unwrap_or_else(PoisonError::into_inner);
            let known = tools.keys().any(|(name, _)| name == tool);
            let mut names: Vec<&String> = tools.keys().map(|(name, _)| name).collect();
            names.dedup();
            let label = if known || names.len() < MAX_LABEL_VALUES {
                tool.clone()
            } else {
                "other".to_string()
            };
            *tools.entry((label, *ok)).or_default() += 1;
        }
    }

    /// An HTTP request was answered: `route` is the matched route template (`/v1/tasks/{id}`),
    /// or `None` when no route matched.
    pub fn http_request(&self, method: &str, route: Option<&str>, status: u16, elapsed: Duration) {
        let key = HttpKey {
            method: method_label(method),
            route: route.unwrap_or("unmatched").to_string(),
            status,
        };
        let mut http = self.http.lock().unwrap_or_else(PoisonError::into_inner);
        http.entry(key).or_default().observe(&HTTP_BUCKETS, elapsed);
    }

    /// The exposition text, with `tasks` (status → count) as read from the store.
    pub fn render(&self, tasks: &[(TaskStatus, u64)]) -> String {
        let mut out = String::with_capacity(4096);
        header(&mut out, "warden_tasks", "gauge", "Tasks by status.");
        for (status, count) in tasks {
            let name = serde_json::to_value(status)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_else(|| format!("{status:?}"));
            let _ = writeln!(out, "warden_tasks{{status=\"{}\"}} {count}", escape(&name));
        }

        header(
            &mut out,
            "warden_runs_started_total",
            "counter",
            "Runs claimed by this process's workers.",
        );
        let _ = writeln!(
            out,
            "warden_runs_started_total {}",
            self.runs_started.load(Ordering::Relaxed)
        );
        header(
            &mut out,
            "warden_events_total",
            "counter",
            "Task events stored by this process.",
        );
        let _ = writeln!(
            out,
            "warden_events_total {}",
            self.events.load(Ordering::Relaxed)
        );

        header(
            &mut out,
            "warden_event_streams",
            "gauge",
            "Open Server-Sent-Events streams.",
        );
        let _ = writeln!(
            out,
            "warden_event_streams {}",
            self.streams.load(Ordering::Relaxed)
        );

        let models = self
            .models
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let per_model: [PerModel; 5] = [
            (
                "warden_model_calls_total",
                "Model calls recorded in the usage ledger.",
                |c| c.calls,
            ),
            (
                "warden_model_input_tokens_total",
                "Input tokens of model calls.",
                |c| c.input_tokens,
            ),
            (
                "warden_model_cached_input_tokens_total",
                "Cached input tokens of model calls.",
                |c| c.cached_input_tokens,
            ),
            (
                "warden_model_output_tokens_total",
                "Output tokens of model calls.",
                |c| c.output_tokens,
            ),
            (
                "warden_model_unpriced_calls_total",
                "Model calls whose price is unknown (not in the cost).",
                |c| c.unpriced_calls,
            ),
        ];
        for (name, help, value) in per_model {
            header(&mut out, name, "counter", help);
            for (model, counters) in &models {
                let _ = writeln!(
                    out,
                    "{name}{{model=\"{}\"}} {}",
                    escape(model),
                    value(counters)
                );
            }
        }
        header(
            &mut out,
            "warden_model_cost_usd_total",
            "counter",
            "Cost of priced model calls in US dollars.",
        );
        for (model, counters) in &models {
            let _ = writeln!(
                out,
                "warden_model_cost_usd_total{{model=\"{}\"}} {}",
                escape(model),
                counters.cost_micro_usd as f64 / 1e6
            );
        }

        header(
            &mut out,
            "warden_tool_calls_total",
            "counter",
            "Tool calls finished, by tool and whether they succeeded.",
        );
        let tools = self
            .tools
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for ((tool, ok), count) in &tools {
            let _ = writeln!(
                out,
                "warden_tool_calls_total{{tool=\"{}\",ok=\"{ok}\"}} {count}",
                escape(tool)
            );
        }

        let sandbox = warden_engine::timing::sandbox_starts();
        header(
            &mut out,
            "warden_sandbox_starts_total",
            "counter",
            "Sandbox views opened (attempts, failed ones included), by task kind.",
        );
        for (kind, histogram) in &sandbox {
            let _ = writeln!(
                out,
                "warden_sandbox_starts_total{{kind=\"{kind}\"}} {}",
                histogram.count()
            );
        }
        header(
            &mut out,
            "warden_sandbox_start_seconds",
            "histogram",
            "Time to open a sandbox view.",
        );
        for (kind, histogram) in &sandbox {
            histogram.render(
                &mut out,
                "warden_sandbox_start_seconds",
                &format!("kind=\"{kind}\""),
                &warden_engine::timing::SANDBOX_BUCKETS,
            );
        }

        let http = self
            .http
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        header(
            &mut out,
            "warden_http_requests_total",
            "counter",
            "HTTP requests answered, by method, route template and status.",
        );
        for (key, histogram) in &http {
            let _ = writeln!(
                out,
                "warden_http_requests_total{{method=\"{}\",route=\"{}\",status=\"{}\"}} {}",
                key.method,
                escape(&key.route),
                key.status,
                histogram.count()
            );
        }
        header(
            &mut out,
            "warden_http_request_duration_seconds",
            "histogram",
            "Time to the response head (for event streams: until streaming starts).",
        );
        for (key, histogram) in &http {
            histogram.render(
                &mut out,
                "warden_http_request_duration_seconds",
                &format!(
                    "method=\"{}\",route=\"{}\",status=\"{}\"",
                    key.method,
                    escape(&key.route),
                    key.status
                ),
                &HTTP_BUCKETS,
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped_and_capped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
        let metrics = Metrics::new();
        for index in 0..(MAX_LABEL_VALUES + 5) {
            metrics.event_stored(&Event::ToolFinished {
                call_id: "c".into(),
                tool: format!("tool{index}"),
                ok: true,
                summary: String::new(),
                note: None,
            });
        }
        let text = metrics.render(&[]);
        assert!(text.contains("warden_tool_calls_total{tool=\"other\",ok=\"true\"} 5"));
        assert!(text.contains("warden_tool_calls_total{tool=\"tool0\",ok=\"true\"} 1"));
        assert!(text.contains("warden_events_total 69"));
    }
}
