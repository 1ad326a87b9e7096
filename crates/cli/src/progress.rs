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

    /// Prints one step; control characters in it are escaped, and line breaks (in rejection
    /// reasons, check output) continue on indented lines instead of showing as `\n`.
    pub fn line(&self, text: &str) {
        let text = progress_text(text);
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

/// One progress step as printed: escaped, continuation lines indented.
fn progress_text(text: &str) -> String {
    crate::text::block(text.trim_end_matches('\n'), "      ")
}

pub(crate) fn render(event: &Event) -> Option<String> {
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
            ok: false,
            summary,
            note: Some(note),
            ..
        } => format!("    ✗ {summary} failed: {note}"),
        Event::ToolFinished {
            ok: false, summary, ..
        } => format!("    ✗ {summary} failed"),
        Event::PolicyDenied { tool, reason } => format!("    ✗ {tool} denied: {reason}"),
        Event::ToolCallRejected {
            tool,
            reason,
            consecutive,
        } => format!("    ✗ {tool} call rejected ({consecutive} in a row): {reason}"),
        Event::SubmissionRejected { attempt, errors } => {
            format!(
                "    ✗ submission {attempt} rejected:\n- {}",
                errors.join("\n- ")
            )
        }
        Event::RedactionFailed => {
            "  ! an event was withheld: redacting secrets from it failed".into()
        }
        Event::ModelResponded { .. }
        | Event::AgentMessage { .. }
        | Event::ToolFinished { ok: true, .. }
        | Event::StatusChanged { .. }
        // The command prints the settled task's finish line from its result.
        | Event::TaskFinished { .. } => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejections_render_line_breaks_as_lines_and_escape_the_rest() {
        let event = Event::SubmissionRejected {
            attempt: 2,
            errors: vec!["line 99 is past the end".into(), "no \x1b[31mcolour".into()],
        };
        assert_eq!(
            progress_text(&render(&event).unwrap()),
            "    ✗ submission 2 rejected:\n      - line 99 is past the end\n      - no \\u{1b}[31mcolour"
        );
        let event = Event::ToolCallRejected {
            tool: "nope".into(),
            reason: "unknown tool \"nope\"".into(),
            consecutive: 3,
        };
        assert_eq!(
            progress_text(&render(&event).unwrap()),
            "    ✗ nope call rejected (3 in a row): unknown tool \"nope\""
        );
    }
}
