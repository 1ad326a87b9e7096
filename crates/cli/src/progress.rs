//! Live progress on stderr: one short line per step the agent takes, so a person can follow what
//! it is doing while the result is reserved for stdout.

use std::io::Write;
use std::sync::Mutex;
use warden_protocol::Event;
use warden_runtime::EventSink;

/// Prints events to stderr as they happen.
pub struct StderrProgress {
    lock: Mutex<()>,
}

impl StderrProgress {
    pub fn new() -> StderrProgress {
        StderrProgress {
            lock: Mutex::new(()),
        }
    }

    /// Prints one line; control characters in it are escaped.
    pub fn line(&self, text: &str) {
        let text = crate::text::one_line(text);
        let _guard = self.lock.lock();
        let mut stderr = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not fail the task.
        let _ = writeln!(stderr, "{text}");
    }
}

impl EventSink for StderrProgress {
    fn emit(&self, event: Event) {
        if let Some(text) = render(&event) {
            self.line(&text);
        }
    }
}

fn render(event: &Event) -> Option<String> {
    Some(match event {
        Event::TaskStarted {
            task_id,
            model,
            manifest,
            ..
        } => {
            let repos: Vec<String> = manifest
                .iter()
                .map(|m| format!("{}@{}", m.repo, &m.commit[..m.commit.len().min(12)]))
                .collect();
            format!(
                "warden: task {task_id} · model {model} · {}",
                repos.join(", ")
            )
        }
        Event::ModelRequested { turn, .. } => format!("  · thinking (turn {turn})"),
        Event::ModelRetrying {
            model,
            attempt,
            delay_ms,
            reason,
        } => format!("  ! {model}: {reason}; retry {attempt} in {delay_ms} ms"),
        Event::ModelFallback { from, to, reason } => {
            format!("  ! {from} failed ({reason}); falling back to {to}")
        }
        Event::ToolStarted { summary, .. } => format!("  → {summary}"),
        Event::ToolFinished {
            ok: false, summary, ..
        } => format!("    ✗ {summary} failed"),
        Event::PolicyDenied { tool, reason } => format!("    ✗ {tool} denied: {reason}"),
        Event::SubmissionRejected { attempt, errors } => {
            format!("    ✗ submission {attempt} rejected: {}", errors.join("; "))
        }
        Event::TaskFinished { outcome, .. } => format!("warden: {outcome}"),
        Event::RedactionFailed => {
            "  ! an event was withheld: redacting secrets from it failed".into()
        }
        Event::ModelResponded { .. }
        | Event::AgentMessage { .. }
        | Event::ToolFinished { ok: true, .. }
        | Event::StatusChanged { .. } => return None,
    })
}
