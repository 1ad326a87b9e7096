//! Sandbox start timings, process-wide: the sandbox constructors of [`crate::question`] and
//! [`crate::change`] hold a [`time_sandbox_start`] guard, and `warden_service::metrics` renders
//! [`sandbox_starts`] with the rest of the Prometheus text. Also the [`Histogram`] both use.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Upper bounds (seconds) of the sandbox start histogram.
pub const SANDBOX_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0];

/// Cumulative-on-render histogram: per-bucket counts, the sum in microseconds and the count.
#[derive(Debug, Clone, Default)]
pub struct Histogram {
    buckets: Vec<u64>,
    sum_micros: u64,
    count: u64,
}

impl Histogram {
    /// Observations so far.
    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn observe(&mut self, bounds: &[f64], elapsed: Duration) {
        if self.buckets.len() != bounds.len() {
            self.buckets = vec![0; bounds.len()];
        }
        let seconds = elapsed.as_secs_f64();
        if let Some(index) = bounds.iter().position(|bound| seconds <= *bound) {
            self.buckets[index] += 1;
        }
        self.sum_micros = self
            .sum_micros
            .saturating_add(u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX));
        self.count += 1;
    }

    /// `name_bucket{labels,le}`, `name_sum{labels}`, `name_count{labels}`.
    pub fn render(&self, out: &mut String, name: &str, labels: &str, bounds: &[f64]) {
        let separator = if labels.is_empty() { "" } else { "," };
        let mut cumulative = 0;
        for (index, bound) in bounds.iter().enumerate() {
            cumulative += self.buckets.get(index).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{separator}le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{separator}le=\"+Inf\"}} {}",
            self.count
        );
        let braces = |labels: &str| {
            if labels.is_empty() {
                String::new()
            } else {
                format!("{{{labels}}}")
            }
        };
        let _ = writeln!(
            out,
            "{name}_sum{} {}",
            braces(labels),
            self.sum_micros as f64 / 1e6
        );
        let _ = writeln!(out, "{name}_count{} {}", braces(labels), self.count);
    }
}

/// Sandbox starts by kind (`question`, `change`): process-wide.
static SANDBOX_STARTS: Mutex<BTreeMap<&'static str, Histogram>> = Mutex::new(BTreeMap::new());

/// Counts a sandbox start of `kind` and its duration when dropped: hold it for the length of
/// the constructor (`let _timing = timing::time_sandbox_start("question");`). Failed starts
/// count too: the metric is attempts.
pub fn time_sandbox_start(kind: &'static str) -> SandboxTiming {
    SandboxTiming {
        kind,
        started: Instant::now(),
    }
}

/// See [`time_sandbox_start`].
#[derive(Debug)]
pub struct SandboxTiming {
    kind: &'static str,
    started: Instant,
}

impl Drop for SandboxTiming {
    fn drop(&mut self) {
        let mut starts = SANDBOX_STARTS
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        starts
            .entry(self.kind)
            .or_default()
            .observe(&SANDBOX_BUCKETS, self.started.elapsed());
    }
}

/// The sandbox starts so far, by kind.
pub fn sandbox_starts() -> BTreeMap<&'static str, Histogram> {
    SANDBOX_STARTS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_render_cumulative_buckets() {
        let mut histogram = Histogram::default();
        let bounds = [0.1, 1.0];
        histogram.observe(&bounds, Duration::from_millis(50));
        histogram.observe(&bounds, Duration::from_millis(500));
        histogram.observe(&bounds, Duration::from_secs(3));
        let mut out = String::new();
        histogram.render(&mut out, "x", "a=\"b\"", &bounds);
        assert_eq!(
            out,
            "x_bucket{a=\"b\",le=\"0.1\"} 1\nx_bucket{a=\"b\",le=\"1\"} 2\n\
             x_bucket{a=\"b\",le=\"+Inf\"} 3\nx_sum{a=\"b\"} 3.55\nx_count{a=\"b\"} 3\n"
        );
    }
}
