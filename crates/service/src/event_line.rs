//! One line per task event, as a person follows a task: `warden ask`'s stderr and the progress
//! notifications of `warden mcp` and `/mcp`. Events without a line (the task's own result,
//! status changes) give `None`.

use warden_protocol::Event;

/// The line `event` is shown as, if any.
pub fn render(event: &Event) -> Option<String> {
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
        // A passing call with something to say (each check's verdict and duration).
        Event::ToolFinished {
            ok: true,
            summary,
            note: Some(note),
            ..
        } => format!("    ✓ {summary}: {note}"),
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
        Event::EgressConnection {
            method,
            host,
            port,
            allowed: false,
            reason,
            ..
        } => format!(
            "    ✗ egress refused: {method} {host}:{port}: {}",
            reason.as_deref().unwrap_or("refused")
        ),
        Event::EgressConnection {
            method,
            host,
            port,
            allowed: true,
            reason,
            bytes_received,
            duration_ms,
            ..
        } => {
            let moved = format!("{} in {duration_ms} ms", bytes(*bytes_received));
            match reason {
                Some(reason) => format!("  ! egress {method} {host}:{port} ({moved}): {reason}"),
                None => format!("  ⇄ egress {method} {host}:{port} ({moved})"),
            }
        }
        Event::GateDecided {
            stage,
            level,
            action,
            reasons,
            approval,
        } => {
            let level = warden_engine::gates::level_name(*level);
            let action = warden_engine::gates::action_name(*action);
            let mut line = format!("  ◆ risk gate ({stage}): {level} → {action}");
            for reason in reasons {
                line.push_str(&format!("\n      {reason}"));
            }
            if let Some(approval) = approval {
                line.push_str(&format!("\n      waits for approval {approval}"));
            }
            line
        }
        Event::ReviewFinished {
            round,
            verdict,
            findings,
            blocking,
        } => format!(
            "  ◆ review {round}: {verdict} ({findings} findings, {blocking} blocking)"
        ),
        Event::MessageQueued { seq, author, .. } => {
            format!("  ✉ message {seq} from {author} queued for the agent's next turn")
        }
        Event::MessageDelivered { seq, turn } => {
            format!("  ✉ message {seq} delivered to the agent (turn {turn})")
        }
        Event::ContextCompacted {
            attempt,
            tokens_before,
            tokens_after,
            shrunk,
        } => format!(
            "  ◆ context compacted ({attempt}): about {tokens_before} → {tokens_after} tokens{}",
            if *shrunk { "" } else { ", still above the trigger" }
        ),
        Event::CheckStarted { command, .. } => format!("    ▸ check `{}` started", one_line(command)),
        Event::CheckFinished {
            command,
            exit_code,
            duration_ms,
            reused,
            output_tail,
            ..
        } => {
            let command = one_line(command);
            let took = seconds(*duration_ms);
            match (exit_code, reused) {
                (Some(0), true) => {
                    format!("    ✓ check `{command}` passed on this tree before (not run again)")
                }
                (Some(0), false) => format!("    ✓ check `{command}` passed in {took}"),
                (code, _) => {
                    let how = match code {
                        Some(code) => format!("exit code {code}"),
                        None => "killed, timed out or could not run".into(),
                    };
                    let again = if *reused { " (an earlier run on this tree)" } else { "" };
                    let mut line = format!("    ✗ check `{command}` failed ({how}) in {took}{again}");
                    let tail: Vec<&str> = output_tail.trim_end().lines().collect();
                    for text in &tail[tail.len().saturating_sub(FAILED_CHECK_LINES)..] {
                        line.push_str(&format!("\n| {text}"));
                    }
                    line
                }
            }
        }
        Event::PublicationStep {
            step,
            state,
            detail,
        } => {
            let what = match step.as_str() {
                "push" => "pushing the proposal",
                "pull_request" => "opening the pull request",
                other => other,
            };
            let detail = detail.as_deref().map(one_line);
            match (state.as_str(), detail) {
                ("started", Some(detail)) => format!("  ↑ {what} ({detail})"),
                ("started", None) => format!("  ↑ {what}"),
                ("done", Some(detail)) => format!("  ✓ {what}: done, {detail}"),
                ("done", None) => format!("  ✓ {what}: done"),
                (_, Some(detail)) => format!("  ✗ {what} failed: {detail}"),
                (_, None) => format!("  ✗ {what} failed"),
            }
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

/// The last lines of a failed check's output shown under its verdict.
const FAILED_CHECK_LINES: usize = 5;

/// `text` on one line: a check command or a publication detail with line breaks in it.
fn one_line(text: &str) -> String {
    text.replace(['\r', '\n'], " ")
}

/// A duration as people read it: `0.4 s`, `12.0 s`, `2 min 5 s`.
fn seconds(ms: u64) -> String {
    if ms < 60_000 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// A byte count as people read it.
fn bytes(count: u64) -> String {
    match count {
        0..1024 => format!("{count} B"),
        1024..1_048_576 => format!("{:.1} KiB", count as f64 / 1024.0),
        _ => format!("{:.1} MiB", count as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn finished(exit_code: Option<i32>, reused: bool, output_tail: &str) -> Event {
        Event::CheckFinished {
            command: "cargo test\n--quiet".into(),
            tree: "c".repeat(40),
            exit_code,
            duration_ms: 83_400,
            reused,
            output_tail: output_tail.into(),
        }
    }

    #[test]
    fn checks_read_as_their_verdicts_with_a_failure_s_last_lines() {
        let started = Event::CheckStarted {
            command: "cargo test".into(),
            tree: "c".repeat(40),
        };
        assert_eq!(
            render(&started).unwrap(),
            "    ▸ check `cargo test` started"
        );
        assert_eq!(
            render(&finished(Some(0), false, "ok")).unwrap(),
            "    ✓ check `cargo test --quiet` passed in 1 min 23 s"
        );
        assert_eq!(
            render(&finished(Some(0), true, "")).unwrap(),
            "    ✓ check `cargo test --quiet` passed on this tree before (not run again)"
        );
        let tail: String = (1..=8).map(|n| format!("line {n}\n")).collect();
        assert_eq!(
            render(&finished(Some(101), false, &tail)).unwrap(),
            "    ✗ check `cargo test --quiet` failed (exit code 101) in 1 min 23 s\n| line 4\n| line 5\n| line 6\n| line 7\n| line 8"
        );
        assert_eq!(
            render(&finished(None, false, "")).unwrap(),
            "    ✗ check `cargo test --quiet` failed (killed, timed out or could not run) in 1 min 23 s"
        );
    }

    #[test]
    fn publication_steps_read_in_words() {
        let step = |step: &str, state: &str, detail: Option<&str>| {
            render(&Event::PublicationStep {
                step: step.into(),
                state: state.into(),
                detail: detail.map(str::to_string),
            })
            .unwrap()
        };
        assert_eq!(
            step("push", "started", Some("warden/tsk_1")),
            "  ↑ pushing the proposal (warden/tsk_1)"
        );
        assert_eq!(
            step("pull_request", "done", Some("https://example.test/pr/7")),
            "  ✓ opening the pull request: done, https://example.test/pr/7"
        );
        assert_eq!(
            step("push", "failed", Some("rejected\nnon-fast-forward")),
            "  ✗ pushing the proposal failed: rejected non-fast-forward"
        );
    }
}
